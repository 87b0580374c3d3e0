/*
 * The store's requests as messages (store.h, "Requests"): each builder
 * checks its arguments and packs them, strings and all, into one message
 * the store actor and the backend read without copying.
 */
#include "store_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

/* Builds a request of `type` from ints and strings. Names (the first
 * `nnames` strings) are limited to PC_STORE_NAME_MAX; `required` is a bit
 * mask of strings that must be present. */
static int req_build(uint32_t type, const int64_t *ints, uint32_t nint, const char *const *strs, uint32_t nstr,
		     uint32_t nnames, uint64_t required, pc_msg_t **out)
{
	*out = NULL;
	size_t bytes = 0;
	for (uint32_t k = 0; k < nstr; k++) {
		bool need = k < 64 && (required >> k) & 1u;
		if (!strs[k]) {
			if (need)
				return PC_EINVAL;
			continue;
		}
		size_t l = strlen(strs[k]);
		if ((k < nnames && l > PC_STORE_NAME_MAX) || l >= PC__STR_NULL)
			return PC_EINVAL;
		bytes += l + 1;
	}
	size_t size = sizeof(pc__store_req_t) + nint * sizeof(int64_t) + nstr * sizeof(uint32_t) + bytes;
	if (size > PC_MSG_MAX_PAYLOAD)
		return PC_STORE_ETOOBIG;
	pc_msg_t *m = pc_msg_new(type, size);
	if (!m)
		return PC_ENOMEM;
	char *p = pc_msg_data(m);
	pc__store_req_t h = {nint, nstr, 0, 0};
	memcpy(p, &h, sizeof(h));
	p += sizeof(h);
	if (nint)
		memcpy(p, ints, nint * sizeof(int64_t));
	p += nint * sizeof(int64_t);
	char *lens = p;
	p += nstr * sizeof(uint32_t);
	for (uint32_t k = 0; k < nstr; k++) {
		uint32_t l = PC__STR_NULL;
		if (strs[k]) {
			l = (uint32_t)strlen(strs[k]);
			memcpy(p, strs[k], (size_t)l + 1);
			p += (size_t)l + 1;
		}
		memcpy(lens + k * sizeof(uint32_t), &l, sizeof(l));
	}
	*out = m;
	return 0;
}

int pc__store_op_from_msg(const pc_msg_t *m, pc__store_op_t **out)
{
	*out = NULL;
	size_t size = m->size;
	const char *p = pc_msg_cdata(m);
	pc__store_req_t h;
	if (size < sizeof(h))
		return PC_EINVAL;
	memcpy(&h, p, sizeof(h));
	if (h.nint > 1u << 24 || h.nstr > 1u << 24)
		return PC_EINVAL;
	size_t fixed = sizeof(h) + (size_t)h.nint * sizeof(int64_t) + (size_t)h.nstr * sizeof(uint32_t);
	if (fixed > size)
		return PC_EINVAL;
	/* One allocation: the op, the pointer array, then the payload copy
	 * (8-aligned, so the ints can be read in place). */
	size_t ptrs = (size_t)h.nstr * sizeof(char *);
	size_t head = (sizeof(pc__store_op_t) + ptrs + 7) & ~(size_t)7;
	pc__store_op_t *op = calloc(1, head + size);
	if (!op)
		return PC_ENOMEM;
	char *copy = (char *)op + head;
	memcpy(copy, p, size);
	op->kind = m->type;
	op->nint = h.nint;
	op->nstr = h.nstr;
	op->i = (const int64_t *)(void *)(copy + sizeof(h));
	op->len = (const uint32_t *)(void *)(copy + sizeof(h) + (size_t)h.nint * sizeof(int64_t));
	op->s = (const char **)(void *)(op + 1);
	size_t at = fixed;
	int rc = 0;
	for (uint32_t k = 0; k < h.nstr && rc == 0; k++) {
		uint32_t l = op->len[k];
		if (l == PC__STR_NULL) {
			op->s[k] = NULL;
		} else if ((size_t)l + 1 > size - at || copy[at + l] != 0) {
			rc = PC_EINVAL;
		} else {
			op->s[k] = copy + at;
			at += (size_t)l + 1;
		}
	}
	if (rc != 0) {
		free(op);
		return rc;
	}
	op->reply_to = pc_actor_retain(m->reply_to);
	op->corr = m->corr;
	/* nobody waits for a write sent without a reply address */
	op->lazy = (h.flags & PC__STORE_LAZY) || (!m->reply_to && !(h.flags & PC__STORE_URGENT));
	*out = op;
	return 0;
}

void pc__store_op_free(pc__store_op_t *op)
{
	if (!op)
		return;
	pc_actor_release(op->reply_to);
	free(op);
}

int pc_store_req_session(const char *key, const char *agent, const char *session_id, const char *metadata,
			 pc_msg_t **out)
{
	if (!out)
		return PC_EINVAL;
	const char *s[S_SESS_N] = {key, agent, session_id, metadata};
	return req_build(PC_STORE_REQ_SESSION, NULL, 0, s, S_SESS_N, 3, 1u << S_SESS_KEY, out);
}

/* JSON text the store keeps must parse; NULL passes (absent). */
static bool json_ok(const char *text)
{
	if (!text)
		return true;
	cJSON *j = cJSON_ParseWithLength(text, strlen(text));
	cJSON_Delete(j);
	return j != NULL;
}

/* A message's JSON fields, unless its producer vouches for them. */
static bool msg_json_ok(const pc_store_msg_t *m)
{
	return m->json_checked || (json_ok(m->content) && json_ok(m->tool_call_ids));
}

int pc_store_req_append(const char *key, int64_t epoch, const pc_store_msg_t *m, pc_msg_t **out)
{
	if (!out)
		return PC_EINVAL;
	*out = NULL;
	if (!m || !msg_json_ok(m))
		return PC_EINVAL;
	const char *s[S_APP_N] = {key, m->role, m->content, m->tool_call_ids, m->run_id};
	int64_t i[I_APP_N] = {epoch, m->created_ms};
	/* role is a name too, but not first: checked here. */
	if (m->role && strlen(m->role) > PC_STORE_NAME_MAX)
		return PC_EINVAL;
	return req_build(PC_STORE_REQ_APPEND, i, I_APP_N, s, S_APP_N, 1,
			 1u << S_APP_KEY | 1u << S_APP_ROLE | 1u << S_APP_CONTENT, out);
}

int pc_store_req_rewrite(const char *key, int64_t epoch, int64_t expected_last_seq, int64_t from_seq,
			 const pc_store_msg_t *msgs, size_t n, pc_msg_t **out)
{
	if (!out)
		return PC_EINVAL;
	*out = NULL;
	if ((n && !msgs) || n > (1u << 22))
		return PC_EINVAL;
	uint32_t nstr = S_RW_FIRST + (uint32_t)n * S_RW_PER, nint = I_RW_FIRST + (uint32_t)n;
	const char **s = calloc(nstr, sizeof(*s));
	int64_t *iv = calloc(nint, sizeof(*iv));
	int rc = 0;
	if (!s || !iv) {
		rc = PC_ENOMEM;
		goto out;
	}
	s[S_RW_KEY] = key;
	iv[I_RW_EPOCH] = epoch;
	iv[I_RW_EXPECTED] = expected_last_seq;
	iv[I_RW_FROM] = from_seq;
	iv[I_RW_COUNT] = (int64_t)n;
	for (size_t k = 0; k < n && rc == 0; k++) {
		if (!msgs[k].role || !msgs[k].content || strlen(msgs[k].role) > PC_STORE_NAME_MAX ||
		    !msg_json_ok(&msgs[k]))
			rc = PC_EINVAL;
		s[S_RW_FIRST + k * S_RW_PER + 0] = msgs[k].role;
		s[S_RW_FIRST + k * S_RW_PER + 1] = msgs[k].content;
		s[S_RW_FIRST + k * S_RW_PER + 2] = msgs[k].tool_call_ids;
		s[S_RW_FIRST + k * S_RW_PER + 3] = msgs[k].run_id;
		iv[I_RW_FIRST + k] = msgs[k].created_ms;
	}
	if (rc == 0)
		rc = req_build(PC_STORE_REQ_REWRITE, iv, nint, s, nstr, 1, 1u << S_RW_KEY, out);
out:
	free(s);
	free(iv);
	return rc;
}

int pc_store_req_run_begin(const pc_store_run_new_t *r, pc_msg_t **out)
{
	if (!out)
		return PC_EINVAL;
	*out = NULL;
	if (!r || (r->run_id && strlen(r->run_id) > PC_STORE_ID_MAX) || !json_ok(r->prompt))
		return PC_EINVAL;
	const char *s[S_RB_N] = {r->key, r->run_id, r->idem_key, r->fingerprint, r->owner, r->prompt};
	int64_t i[I_RB_N] = {r->flags};
	return req_build(PC_STORE_REQ_RUN_BEGIN, i, I_RB_N, s, S_RB_N, S_RB_PROMPT,
			 1u << S_RB_KEY | 1u << S_RB_RUN, out);
}

int pc_store_req_run_adopt(const char *run_id, const char *from_owner, const char *to_owner, pc_msg_t **out)
{
	if (!out)
		return PC_EINVAL;
	const char *s[S_AD_N] = {run_id, from_owner, to_owner};
	return req_build(PC_STORE_REQ_RUN_ADOPT, NULL, 0, s, S_AD_N, S_AD_N, 1u << S_AD_RUN | 1u << S_AD_TO, out);
}

int pc_store_req_probe(pc_msg_t **out)
{
	if (!out)
		return PC_EINVAL;
	int rc = req_build(PC_STORE_REQ_PROBE, NULL, 0, NULL, 0, 0, 0, out);
	if (rc == 0)
		pc_store_req_urgent(*out);
	return rc;
}

int pc_store_req_runs_open(pc_msg_t **out)
{
	if (!out)
		return PC_EINVAL;
	return req_build(PC_STORE_REQ_RUNS_OPEN, NULL, 0, NULL, 0, 0, 0, out);
}

int pc_store_req_run_end(const pc_store_run_end_t *e, pc_msg_t **out)
{
	if (!out)
		return PC_EINVAL;
	*out = NULL;
	if (!e || (int)e->status < PC_STORE_RUN_ACCEPTED || (int)e->status > PC_STORE_RUN_TIMEOUT ||
	    e->epoch < 0 || (e->epoch && !e->key) ||
	    (!(e->flags & PC_STORE_REQ_JSON_CHECKED) && !json_ok(e->usage)))
		return PC_EINVAL;
	const char *s[S_RE_N] = {e->run_id, e->key, e->error_code, e->usage};
	int64_t i[I_RE_N] = {e->status, e->epoch, e->replay_invalid};
	return req_build(PC_STORE_REQ_RUN_END, i, I_RE_N, s, S_RE_N, 3, 1u << S_RE_RUN, out);
}

int pc_store_req_attempt(const pc_store_attempt_t *a, pc_msg_t **out)
{
	if (!out || !a) {
		if (out)
			*out = NULL;
		return PC_EINVAL;
	}
	const char *s[S_AT_N] = {a->run_id, a->provider, a->model, a->profile, a->reason, a->status, a->code};
	int64_t i[I_AT_N] = {a->index, a->duration_ms};
	return req_build(PC_STORE_REQ_ATTEMPT, i, I_AT_N, s, S_AT_N, S_AT_N,
			 1u << S_AT_RUN | 1u << S_AT_STATUS, out);
}

int pc_store_req_usage_add(const pc_store_usage_t *u, int64_t epoch, pc_msg_t **out)
{
	if (!out)
		return PC_EINVAL;
	*out = NULL;
	if (!u || u->input < 0 || u->output < 0 || u->cache_read < 0 || u->cache_write < 0 || u->total < 0)
		return PC_EINVAL;
	const char *s[S_UA_N] = {u->run_id, u->session_key, u->provider, u->model};
	int64_t i[I_UA_N] = {epoch, u->attempt, u->call, u->input, u->output, u->cache_read, u->cache_write,
			     u->total, u->created_ms};
	return req_build(PC_STORE_REQ_USAGE_ADD, i, I_UA_N, s, S_UA_N, S_UA_N, 1u << S_UA_RUN | 1u << S_UA_KEY, out);
}

int pc_store_req_usage_list(const char *run_id, const char *session_key, pc_msg_t **out)
{
	if (!out)
		return PC_EINVAL;
	*out = NULL;
	if (!run_id && !session_key)
		return PC_EINVAL;
	/* a run is asked by its id alone */
	const char *s[S_UL_N] = {run_id, run_id ? NULL : session_key};
	return req_build(PC_STORE_REQ_USAGE_LIST, NULL, 0, s, S_UL_N, S_UL_N, 0, out);
}

int pc_store_req_usage_days(int64_t from_ms, int64_t to_ms, pc_msg_t **out)
{
	if (!out)
		return PC_EINVAL;
	*out = NULL;
	if (from_ms > to_ms)
		return PC_EINVAL;
	int64_t i[I_UD_N] = {from_ms, to_ms};
	return req_build(PC_STORE_REQ_USAGE_DAYS, i, I_UD_N, NULL, 0, 0, 0, out);
}

int pc_store_req_device_put(const pc_store_device_t *d, pc_msg_t **out)
{
	if (!out)
		return PC_EINVAL;
	*out = NULL;
	if (!d)
		return PC_EINVAL;
	const char *s[S_DV_N] = {d->id, d->public_key, d->token_hash, d->scopes};
	int64_t i[I_DV_N] = {d->approved_ms, d->issued_ms, d->update_only};
	return req_build(PC_STORE_REQ_DEVICE_PUT, i, I_DV_N, s, S_DV_N, S_DV_N,
			 1u << S_DV_ID | 1u << S_DV_KEY | 1u << S_DV_HASH, out);
}

int pc_store_req_device_delete(const char *id, pc_msg_t **out)
{
	if (!out)
		return PC_EINVAL;
	const char *s[1] = {id};
	return req_build(PC_STORE_REQ_DEVICE_DELETE, NULL, 0, s, 1, 1, 1u, out);
}

int pc_store_req_devices(pc_msg_t **out)
{
	if (!out)
		return PC_EINVAL;
	return req_build(PC_STORE_REQ_DEVICES, NULL, 0, NULL, 0, 0, 0, out);
}

int pc_store_req_node_beat(const char *id, const char *url, const char *owner, int64_t lease_ms, bool fresh,
			   pc_msg_t **out)
{
	if (!out)
		return PC_EINVAL;
	*out = NULL;
	/* an empty owner would match every other empty one */
	if (lease_ms < 0 || (owner && !*owner))
		return PC_EINVAL;
	const char *s[S_NB_N] = {id, url, owner};
	int64_t i[I_NB_N] = {lease_ms, fresh};
	int rc = req_build(PC_STORE_REQ_NODE_BEAT, i, I_NB_N, s, S_NB_N, S_NB_N, 1u << S_NB_ID | 1u << S_NB_OWNER,
			   out);
	/* a beat that waits for company may land after its lease ran out */
	if (rc == 0)
		pc_store_req_urgent(*out);
	return rc;
}

int pc_store_req_nodes(pc_msg_t **out)
{
	if (!out)
		return PC_EINVAL;
	return req_build(PC_STORE_REQ_NODES, NULL, 0, NULL, 0, 0, 0, out);
}

/* Sets `flag` in a built request's header. */
static void req_flag(pc_msg_t *req, uint32_t flag)
{
	pc__store_req_t h;
	if (!req || req->size < sizeof(h))
		return;
	char *p = pc_msg_data(req);
	memcpy(&h, p, sizeof(h));
	h.flags |= flag;
	memcpy(p, &h, sizeof(h));
}

void pc_store_req_lazy(pc_msg_t *req)
{
	req_flag(req, PC__STORE_LAZY);
}

void pc_store_req_urgent(pc_msg_t *req)
{
	req_flag(req, PC__STORE_URGENT);
}

int pc_store_req_sync(pc_msg_t **out)
{
	if (!out)
		return PC_EINVAL;
	return req_build(PC_STORE_REQ_SYNC, NULL, 0, NULL, 0, 0, 0, out);
}

int pc_store_req_audit(const pc_store_audit_t *a, pc_msg_t **out)
{
	if (!out || !a) {
		if (out)
			*out = NULL;
		return PC_EINVAL;
	}
	const char *s[S_AU_N] = {a->kind, a->status, a->run_id, a->session_key, a->tool_name, a->tool_call_id,
				 a->code};
	int64_t i[I_AU_N] = {a->ts_ms};
	return req_build(PC_STORE_REQ_AUDIT, i, I_AU_N, s, S_AU_N, S_AU_N,
			 1u << S_AU_KIND | 1u << S_AU_STATUS | 1u << S_AU_RUN, out);
}

int pc_store_req_lease_acquire(const char *key, const char *owner, int64_t ttl_ms, const char *steal_from,
			       pc_msg_t **out)
{
	if (!out)
		return PC_EINVAL;
	*out = NULL;
	if (ttl_ms <= 0 && ttl_ms != PC_STORE_LEASE_NODE)
		return PC_EINVAL;
	const char *s[S_LS_N] = {key, owner, steal_from};
	int64_t i[I_LS_N] = {ttl_ms};
	return req_build(PC_STORE_REQ_LEASE_ACQUIRE, i, I_LS_N, s, S_LS_N, S_LS_N,
			 1u << S_LS_KEY | 1u << S_LS_OWNER, out);
}

int pc_store_req_lease_release(const char *key, const char *owner, int64_t epoch, pc_msg_t **out)
{
	if (!out)
		return PC_EINVAL;
	const char *s[S_LS_N] = {key, owner};
	int64_t i[I_LS_N] = {epoch};
	return req_build(PC_STORE_REQ_LEASE_RELEASE, i, I_LS_N, s, S_LS_N, S_LS_N,
			 1u << S_LS_KEY | 1u << S_LS_OWNER, out);
}

int pc_store_req_history(const char *key, pc_msg_t **out)
{
	if (!out)
		return PC_EINVAL;
	const char *s[S_HI_N] = {key};
	return req_build(PC_STORE_REQ_HISTORY, NULL, 0, s, S_HI_N, S_HI_N, 1u << S_HI_KEY, out);
}

int pc_store_req_session_set(const char *key, int64_t epoch, const char *metadata, pc_msg_t **out)
{
	if (!out)
		return PC_EINVAL;
	const char *s[S_SS_N] = {key, metadata};
	int64_t i[I_SS_N] = {epoch};
	return req_build(PC_STORE_REQ_SESSION_SET, i, I_SS_N, s, S_SS_N, 1, 1u << S_SS_KEY | 1u << S_SS_META, out);
}

int pc_store_req_run_get(const char *run_id, pc_msg_t **out)
{
	if (!out)
		return PC_EINVAL;
	const char *s[S_RG_N] = {run_id};
	return req_build(PC_STORE_REQ_RUN_GET, NULL, 0, s, S_RG_N, S_RG_N, 1u << S_RG_RUN, out);
}

int pc_store_req_sessions(const pc_store_sessions_query_t *q, pc_msg_t **out)
{
	if (!out)
		return PC_EINVAL;
	*out = NULL;
	pc_store_sessions_query_t d = {0};
	if (!q)
		q = &d;
	if (q->limit > PC_STORE_SESSIONS_MAX || (int)q->order < PC_STORE_SESSIONS_UPDATED ||
	    (int)q->order > PC_STORE_SESSIONS_KEY)
		return PC_EINVAL;
	const char *s[S_SL_N] = {q->after_key, q->id};
	int64_t i[I_SL_N] = {q->limit ? q->limit : PC_STORE_SESSIONS_DEFAULT, q->order, q->after_ms};
	return req_build(PC_STORE_REQ_SESSIONS, i, I_SL_N, s, S_SL_N, S_SL_N, 0, out);
}

