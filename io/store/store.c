/*
 * The store front: request builders, the store actor (group commit), the
 * plain-thread wrappers and history snapshots. The backend does the SQL.
 *
 * Group commit. Writes queue in the actor. An idle actor that gets a write
 * starts a batch at once, or, with a window configured, waits window_ms
 * for company (a timer) unless group_max writes arrive first. A batch goes
 * to the blocking pool as one transaction, each write in its own savepoint
 * so that one bad write fails alone. Writes arriving while a batch commits
 * wait for it and go in the next batch at once. The pool thread answers
 * every write of a batch after COMMIT returned, then tells the actor, so
 * at most one batch is in flight.
 */
#include "store_internal.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "../../actors/timer.h"
#include "../../runtime/blocking.h"

/* Actor-private message types. */
enum {
	STORE_TICK = 0x53540200u,  /* payload u64: the window's generation */
	STORE_BATCH_DONE,
	STORE_CLOSE,
};

struct pc_store {
	pc_runtime_t *rt;
	const pc__store_backend_t *ops;
	void *be;
	pc_store_config_t cfg; /* path not kept */
	pc_actor_t *actor;
	pthread_mutex_t lock;  /* guards reads */
	pthread_cond_t cond;
	uint32_t reads;        /* read jobs submitted and not finished */
	pc_store_stats_t stats; /* __atomic counters */
	int32_t health_rc;      /* __atomic: the latest write transaction's outcome */
	int64_t health_since_ms;
};

/* ---- errors, config, small helpers ---- */

const char *pc_store_strerror(int code)
{
	switch (code) {
	case PC_STORE_ECORRUPT: return "store: the file is not a database or is damaged";
	case PC_STORE_EFOREIGN: return "store: the database is not a Pincer store";
	case PC_STORE_EVERSION: return "store: the database was written by a newer Pincer";
	case PC_STORE_EFULL: return "store: disk full or file size limit reached";
	case PC_STORE_EREADONLY: return "store: the database or its directory is read-only";
	case PC_STORE_EIO: return "store: I/O error";
	case PC_STORE_ETOOBIG: return "store: content over the size limit";
	case PC_STORE_EFENCED: return "store: stale lease epoch";
	case PC_STORE_ECONFLICT: return "store: the transcript changed since the snapshot";
	case PC_STORE_ECANTOPEN: return "store: the database file cannot be opened";
	default: return pc_strerror(code);
	}
}

void pc_store_config_init(pc_store_config_t *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
}

static void config_resolve(pc_store_config_t *c)
{
	if (c->group_max == 0)
		c->group_max = PC_STORE_DEFAULT_GROUP_MAX;
	if (c->lazy_ms == 0)
		c->lazy_ms = PC_STORE_DEFAULT_LAZY_MS;
	if (c->max_content == 0)
		c->max_content = PC_STORE_DEFAULT_MAX_CONTENT;
	if (c->audit_max == 0)
		c->audit_max = PC_STORE_DEFAULT_AUDIT_MAX;
	if (c->audit_days == 0)
		c->audit_days = PC_STORE_DEFAULT_AUDIT_DAYS;
	if (c->timeout_ms == 0)
		c->timeout_ms = PC_STORE_DEFAULT_TIMEOUT_MS;
	if (c->idem_ttl_ms <= 0)
		c->idem_ttl_ms = PC_STORE_DEFAULT_IDEM_TTL_MS;
}

int pc_store_default_path(char *buf, size_t len)
{
	const char *home = getenv("PINCER_HOME");
	if (!home || !*home)
		home = "./.pincer";
	int n = snprintf(buf, len, "%s/state.db", home);
	return (n < 0 || (size_t)n >= len) ? PC_ELIMIT : 0;
}

int64_t pc__store_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- request encoding ---- */

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

void pc_store_health(pc_store_t *s, pc_store_health_t *out)
{
	*out = (pc_store_health_t){0};
	if (!s)
		return;
	out->rc = __atomic_load_n(&s->health_rc, __ATOMIC_ACQUIRE);
	out->since_ms = __atomic_load_n(&s->health_since_ms, __ATOMIC_RELAXED);
}

int pc_store_req_runs_open(pc_msg_t **out)
{
	if (!out)
		return PC_EINVAL;
	return req_build(PC_STORE_REQ_RUNS_OPEN, NULL, 0, NULL, 0, 0, 0, out);
}

int pc_store_req_run_end(const char *run_id, pc_store_run_status_t status, const char *error_code,
			 const char *usage, uint32_t flags, pc_msg_t **out)
{
	if (!out)
		return PC_EINVAL;
	*out = NULL;
	if ((int)status < PC_STORE_RUN_ACCEPTED || (int)status > PC_STORE_RUN_TIMEOUT ||
	    (!(flags & PC_STORE_REQ_JSON_CHECKED) && !json_ok(usage)))
		return PC_EINVAL;
	const char *s[S_RE_N] = {run_id, error_code, usage};
	int64_t i[I_RE_N] = {status};
	return req_build(PC_STORE_REQ_RUN_END, i, I_RE_N, s, S_RE_N, 2, 1u << S_RE_RUN, out);
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
	if (ttl_ms <= 0)
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
	const char *s[S_SL_N] = {q->after_key};
	int64_t i[I_SL_N] = {q->limit ? q->limit : PC_STORE_SESSIONS_DEFAULT, q->order, q->after_ms};
	return req_build(PC_STORE_REQ_SESSIONS, i, I_SL_N, s, S_SL_N, S_SL_N, 0, out);
}

/* A reply travels as its fixed fields, then its id and its code as C
 * strings: most replies have neither, and fit a small message from the
 * worker's cache instead of the heap. */
#define REPLY_HEAD offsetof(pc_store_reply_t, id)

int pc_store_reply_get(const pc_msg_t *m, pc_store_reply_t *out)
{
	if (!m || !out || m->type != PC_STORE_MSG_REPLY || m->size < REPLY_HEAD + 2)
		return PC_EINVAL;
	const char *p = pc_msg_cdata(m), *end = p + m->size;
	const char *id = p + REPLY_HEAD;
	size_t il = strnlen(id, (size_t)(end - id));
	const char *code = id + il + 1;
	if (code >= end)
		return PC_EINVAL;
	size_t cl = strnlen(code, (size_t)(end - code));
	if (code + cl >= end || il > PC_STORE_ID_MAX || cl > PC_STORE_CODE_MAX)
		return PC_EINVAL;
	memset(out, 0, sizeof(*out));
	memcpy(out, p, REPLY_HEAD);
	memcpy(out->id, id, il);
	memcpy(out->code, code, cl);
	return 0;
}

/* ---- replies ---- */

pc_msg_t *pc__store_reply_msg(const pc_store_reply_t *r)
{
	size_t il = strnlen(r->id, PC_STORE_ID_MAX), cl = strnlen(r->code, PC_STORE_CODE_MAX);
	pc_msg_t *m = pc_msg_new(PC_STORE_MSG_REPLY, REPLY_HEAD + il + 1 + cl + 1);
	if (m) {
		char *p = pc_msg_data(m);
		memcpy(p, r, REPLY_HEAD);
		memcpy(p + REPLY_HEAD, r->id, il);
		p[REPLY_HEAD + il] = '\0';
		memcpy(p + REPLY_HEAD + il + 1, r->code, cl);
		p[REPLY_HEAD + il + 1 + cl] = '\0';
	}
	return m;
}

static pc_msg_t *list_error(uint32_t type, int rc);
static pc_msg_t *usage_error(int rc);

pc_msg_t *pc__store_error_reply(uint32_t kind, int rc)
{
	if (kind == PC_STORE_REQ_HISTORY)
		return pc__store_hist_error(rc);
	if (kind == PC_STORE_REQ_USAGE_LIST)
		return usage_error(rc);
	if (kind == PC_STORE_REQ_SESSIONS || kind == PC_STORE_REQ_RUNS_OPEN)
		return list_error(kind == PC_STORE_REQ_SESSIONS ? PC_STORE_MSG_SESSIONS : PC_STORE_MSG_RUNS, rc);
	pc_store_reply_t r = {.rc = rc};
	return pc__store_reply_msg(&r);
}

static bool is_read(uint32_t kind)
{
	return kind == PC_STORE_REQ_HISTORY || kind == PC_STORE_REQ_RUN_GET || kind == PC_STORE_REQ_SESSIONS ||
	       kind == PC_STORE_REQ_RUNS_OPEN || kind == PC_STORE_REQ_USAGE_LIST;
}

/* Answers a decoded op (if it asked) with its result, `delay_ms` late
 * (0: now); frees the op. A reply that cannot be allocated is lost: the
 * asker's timeout covers it. */
static void op_answer_after(pc__store_op_t *op, uint64_t delay_ms)
{
	if (op->reply_to) {
		pc_msg_t *m = op->kind == PC_STORE_REQ_RUN_GET || !is_read(op->kind)
				      ? pc__store_reply_msg(&op->res)
				      : pc__store_error_reply(op->kind, op->res.rc);
		if (m) {
			m->corr = op->corr;
			/* An asker that has stopped frees the reply as a dead
			 * letter: nothing to do about a failed send. */
			if (delay_ms)
				(void)pc_timer_after(op->reply_to, delay_ms, m, NULL);
			else
				(void)pc_send(op->reply_to, m);
		}
	}
	pc__store_op_free(op);
}

static void op_answer(pc__store_op_t *op)
{
	op_answer_after(op, 0);
}

/* The test hook (pc_store_config_t.test_lease_delay_*): how late the
 * answer to `op` goes. */
static uint64_t answer_delay(const pc_store_t *s, const pc__store_op_t *op)
{
	const char *key = s->cfg.test_lease_delay_key;
	if (!key || !s->cfg.test_lease_delay_ms || op->kind != PC_STORE_REQ_LEASE_ACQUIRE ||
	    op->nstr <= S_LS_KEY || !op->s[S_LS_KEY] || pc__store_len(op, S_LS_KEY) != strlen(key) ||
	    memcmp(op->s[S_LS_KEY], key, strlen(key)) != 0)
		return 0;
	return s->cfg.test_lease_delay_ms;
}

/* Answers a request still in the handler with an error. */
static void answer_now(const pc_msg_t *req, int rc)
{
	if (!req->reply_to)
		return;
	pc_msg_t *m = pc__store_error_reply(req->type, rc);
	if (m)
		pc_reply(req, m);
}

/* ---- read payloads (history, session listings) ---- */

/* Appends n strings (NULL = absent) to the byte area; their offsets go to
 * off[]. */
static int strs_put(pc__store_strs_t *a, const char *const *str, const size_t *len, int n, uint32_t *off)
{
	size_t need = 0;
	for (int k = 0; k < n; k++)
		need += str[k] ? len[k] + 1 : 0;
	if (need > PC_MSG_MAX_PAYLOAD - a->len)
		return PC_STORE_ETOOBIG;
	if (a->len + need > a->cap) {
		size_t cap = a->cap ? a->cap * 2 : 4096;
		while (cap < a->len + need)
			cap *= 2;
		char *nb = realloc(a->bytes, cap);
		if (!nb)
			return PC_ENOMEM;
		a->bytes = nb;
		a->cap = cap;
	}
	for (int k = 0; k < n; k++) {
		if (!str[k]) {
			off[k] = PC__STR_NULL;
			continue;
		}
		off[k] = (uint32_t)a->len;
		memcpy(a->bytes + a->len, str[k], len[k]);
		a->bytes[a->len + len[k]] = 0;
		a->len += len[k] + 1;
	}
	return 0;
}

/* Entries v (n of `size` bytes, room for *cap) with room for one more:
 * v itself, or v grown (doubled, *cap updated), or NULL when it cannot
 * grow (v is then unchanged). */
static void *ents_room(void *v, size_t n, size_t *cap, size_t size)
{
	if (n < *cap)
		return v;
	size_t c = *cap ? *cap * 2 : 64;
	void *nv = realloc(v, c * size);
	if (nv)
		*cap = c;
	return nv;
}

/* A reply of `type`: `head` (hsize bytes), the entries, the strings; NULL
 * when it would not fit a message or on ENOMEM. */
static pc_msg_t *payload_msg(uint32_t type, const void *head, size_t hsize, const void *ents, size_t esize,
			     const pc__store_strs_t *strs)
{
	size_t size = hsize + esize + strs->len;
	pc_msg_t *m = size <= PC_MSG_MAX_PAYLOAD ? pc_msg_new(type, size) : NULL;
	if (m) {
		char *p = pc_msg_data(m);
		memcpy(p, head, hsize);
		if (esize)
			memcpy(p + hsize, ents, esize);
		if (strs->len)
			memcpy(p + hsize + esize, strs->bytes, strs->len);
	}
	return m;
}

int pc__store_hist_session(pc__store_hist_builder_t *b, const char *str[3], const size_t len[3], int64_t created_ms,
			   int64_t updated_ms)
{
	b->head.created_ms = created_ms;
	b->head.updated_ms = updated_ms;
	return strs_put(&b->strs, str, len, 3, b->head.sess_off);
}

int pc__store_hist_add(pc__store_hist_builder_t *b, int64_t seq, int64_t created_ms, const char *str[4],
		       const size_t len[4])
{
	pc__store_hist_ent_t *v = ents_room(b->ents, b->n, &b->cap, sizeof(*v));
	if (!v)
		return PC_ENOMEM;
	b->ents = v;
	pc__store_hist_ent_t *e = &v[b->n];
	int rc = strs_put(&b->strs, str, len, 4, e->off);
	if (rc != 0)
		return rc;
	e->seq = seq;
	e->created_ms = created_ms;
	b->n++;
	return 0;
}

pc_msg_t *pc__store_hist_finish(pc__store_hist_builder_t *b, int64_t last_seq)
{
	pc__store_hist_t h = b->head;
	h.rc = 0;
	h.count = (uint32_t)b->n;
	h.last_seq = last_seq;
	pc_msg_t *m = payload_msg(PC_STORE_MSG_HISTORY, &h, sizeof(h), b->ents, b->n * sizeof(*b->ents), &b->strs);
	pc__store_hist_clear(b);
	return m;
}

void pc__store_hist_clear(pc__store_hist_builder_t *b)
{
	free(b->ents);
	free(b->strs.bytes);
	*b = (pc__store_hist_builder_t){0};
}

int pc__store_list_add(pc__store_list_builder_t *b, const pc__store_list_ent_t *e, const char *str[4],
		       const size_t len[4])
{
	pc__store_list_ent_t *v = ents_room(b->ents, b->n, &b->cap, sizeof(*v));
	if (!v)
		return PC_ENOMEM;
	b->ents = v;
	pc__store_list_ent_t *d = &v[b->n];
	int rc = strs_put(&b->strs, str, len, 4, d->off);
	if (rc != 0)
		return rc;
	d->created_ms = e->created_ms;
	d->updated_ms = e->updated_ms;
	d->last_seq = e->last_seq;
	d->runs = e->runs;
	b->n++;
	return 0;
}

pc_msg_t *pc__store_list_finish(pc__store_list_builder_t *b, bool more)
{
	pc__store_list_t h = {.count = (uint32_t)b->n, .more = more};
	pc_msg_t *m = payload_msg(PC_STORE_MSG_SESSIONS, &h, sizeof(h), b->ents, b->n * sizeof(*b->ents), &b->strs);
	pc__store_list_clear(b);
	return m;
}

void pc__store_list_clear(pc__store_list_builder_t *b)
{
	free(b->ents);
	free(b->strs.bytes);
	*b = (pc__store_list_builder_t){0};
}

static pc_msg_t *list_error(uint32_t type, int rc)
{
	pc__store_list_t h = {.rc = rc};
	pc__store_strs_t none = {0};
	return payload_msg(type, &h, sizeof(h), NULL, 0, &none);
}

pc_msg_t *pc__store_hist_error(int rc)
{
	pc__store_hist_t h = {.rc = rc};
	pc__store_strs_t none = {0};
	return payload_msg(PC_STORE_MSG_HISTORY, &h, sizeof(h), NULL, 0, &none);
}

/* The n strings at offsets `off` of `bytes` (NULL where absent). */
static void strs_get(const char *bytes, const uint32_t *off, int n, const char **out)
{
	for (int k = 0; k < n; k++)
		out[k] = off[k] == PC__STR_NULL ? NULL : bytes + off[k];
}

struct pc_store_history {
	size_t n;
	int64_t last_seq;
	pc__store_hist_t head;
	const pc__store_hist_ent_t *ents;
	const char *bytes;
	pc_msg_t *msg; /* the payload the pointers point into */
};

/* Wraps history reply `m` (owned; taken on success) as a snapshot. */
static int history_adopt(pc_msg_t *m, pc_store_history_t **out)
{
	*out = NULL;
	if (!m || m->type != PC_STORE_MSG_HISTORY || m->size < sizeof(pc__store_hist_t))
		return PC_EINVAL;
	pc__store_hist_t h;
	memcpy(&h, pc_msg_cdata(m), sizeof(h));
	if (h.rc != 0)
		return h.rc;
	if (h.count > (m->size - sizeof(h)) / sizeof(pc__store_hist_ent_t))
		return PC_EINVAL;
	pc_store_history_t *hs = calloc(1, sizeof(*hs));
	if (!hs)
		return PC_ENOMEM;
	const char *p = pc_msg_cdata(m);
	hs->msg = m;
	hs->n = h.count;
	hs->last_seq = h.last_seq;
	hs->head = h;
	hs->ents = (const pc__store_hist_ent_t *)(const void *)(p + sizeof(h));
	hs->bytes = p + sizeof(h) + h.count * sizeof(pc__store_hist_ent_t);
	*out = hs;
	return 0;
}

int pc_store_history_take(const pc_msg_t *m, pc_store_history_t **out)
{
	if (!out)
		return PC_EINVAL;
	*out = NULL;
	if (!m)
		return PC_EINVAL;
	pc_msg_t *copy = pc_msg_new(m->type, m->size);
	if (!copy)
		return PC_ENOMEM;
	memcpy(pc_msg_data(copy), pc_msg_cdata(m), m->size);
	int rc = history_adopt(copy, out);
	if (rc != 0)
		pc_msg_free(copy);
	return rc;
}

size_t pc_store_history_count(const pc_store_history_t *h)
{
	return h ? h->n : 0;
}

int64_t pc_store_history_last_seq(const pc_store_history_t *h)
{
	return h ? h->last_seq : 0;
}

void pc_store_history_session(const pc_store_history_t *h, pc_store_session_t *out)
{
	memset(out, 0, sizeof(*out));
	if (!h)
		return;
	const char *f[3];
	strs_get(h->bytes, h->head.sess_off, 3, f);
	*out = (pc_store_session_t){f[0], f[1], f[2], h->head.created_ms, h->head.updated_ms};
}

void pc_store_history_get(const pc_store_history_t *h, size_t i, pc_store_msg_t *out)
{
	memset(out, 0, sizeof(*out));
	if (!h || i >= h->n)
		return;
	const pc__store_hist_ent_t *e = &h->ents[i];
	const char *f[4];
	strs_get(h->bytes, e->off, 4, f);
	/* stored JSON was checked on its way in */
	*out = (pc_store_msg_t){e->seq, e->created_ms, f[0], f[1], f[2], f[3], true};
}

void pc_store_history_free(pc_store_history_t *h)
{
	if (!h)
		return;
	pc_msg_free(h->msg);
	free(h);
}

/* A listing reply taken by the caller: its header, entries and strings
 * point into msg. The public listings are this, typed. */
typedef struct listing {
	pc__store_list_t head;
	const void *ents;
	const char *bytes;
	pc_msg_t *msg; /* the payload the pointers point into */
} listing_t;

struct pc_store_sessions {
	listing_t l;
};

struct pc_store_open_runs {
	listing_t l;
};

/* A copy of listing reply `m` of `type` (entries of ent_size bytes) as a
 * new listing (*out, the caller's: listing_free). Returns the reply's code
 * when the read failed. */
static int listing_take(const pc_msg_t *m, uint32_t type, size_t ent_size, listing_t **out)
{
	if (!out)
		return PC_EINVAL;
	*out = NULL;
	if (!m || m->type != type || m->size < sizeof(pc__store_list_t))
		return PC_EINVAL;
	pc__store_list_t head;
	memcpy(&head, pc_msg_cdata(m), sizeof(head));
	if (head.rc != 0)
		return head.rc;
	if (head.count > (m->size - sizeof(head)) / ent_size)
		return PC_EINVAL;
	listing_t *l = calloc(1, sizeof(*l));
	pc_msg_t *copy = l ? pc_msg_new(m->type, m->size) : NULL;
	if (!copy) {
		free(l);
		return PC_ENOMEM;
	}
	memcpy(pc_msg_data(copy), pc_msg_cdata(m), m->size);
	const char *p = pc_msg_cdata(copy);
	*l = (listing_t){head, p + sizeof(head), p + sizeof(head) + head.count * ent_size, copy};
	*out = l;
	return 0;
}

static void listing_free(listing_t *l)
{
	if (!l)
		return;
	pc_msg_free(l->msg);
	free(l);
}

int pc_store_sessions_take(const pc_msg_t *m, pc_store_sessions_t **out)
{
	return listing_take(m, PC_STORE_MSG_SESSIONS, sizeof(pc__store_list_ent_t), (listing_t **)out);
}

size_t pc_store_sessions_count(const pc_store_sessions_t *s)
{
	return s ? s->l.head.count : 0;
}

bool pc_store_sessions_more(const pc_store_sessions_t *s)
{
	return s && s->l.head.more;
}

void pc_store_sessions_get(const pc_store_sessions_t *s, size_t i, pc_store_session_entry_t *out)
{
	memset(out, 0, sizeof(*out));
	if (!s || i >= s->l.head.count)
		return;
	const pc__store_list_ent_t *e = (const pc__store_list_ent_t *)s->l.ents + i;
	const char *f[4];
	strs_get(s->l.bytes, e->off, 4, f);
	*out = (pc_store_session_entry_t){f[0], f[1], f[2], e->created_ms, e->updated_ms, e->last_seq, e->runs, f[3]};
}

void pc_store_sessions_free(pc_store_sessions_t *s)
{
	listing_free((listing_t *)s);
}

/* ---- open runs ---- */

int pc__store_runs_add(pc__store_runs_builder_t *b, const pc__store_run_ent_t *e, const char *str[4],
		       const size_t len[4])
{
	pc__store_run_ent_t *v = ents_room(b->ents, b->n, &b->cap, sizeof(*v));
	if (!v)
		return PC_ENOMEM;
	b->ents = v;
	pc__store_run_ent_t *d = &v[b->n];
	int rc = strs_put(&b->strs, str, len, 4, d->off);
	if (rc != 0)
		return rc;
	d->accepted_ms = e->accepted_ms;
	d->started = e->started;
	b->n++;
	return 0;
}

pc_msg_t *pc__store_runs_finish(pc__store_runs_builder_t *b)
{
	pc__store_list_t h = {.count = (uint32_t)b->n};
	pc_msg_t *m = payload_msg(PC_STORE_MSG_RUNS, &h, sizeof(h), b->ents, b->n * sizeof(*b->ents), &b->strs);
	pc__store_runs_clear(b);
	return m;
}

void pc__store_runs_clear(pc__store_runs_builder_t *b)
{
	free(b->ents);
	free(b->strs.bytes);
	*b = (pc__store_runs_builder_t){0};
}

int pc_store_open_runs_take(const pc_msg_t *m, pc_store_open_runs_t **out)
{
	return listing_take(m, PC_STORE_MSG_RUNS, sizeof(pc__store_run_ent_t), (listing_t **)out);
}

size_t pc_store_open_runs_count(const pc_store_open_runs_t *r)
{
	return r ? r->l.head.count : 0;
}

void pc_store_open_runs_get(const pc_store_open_runs_t *r, size_t i, pc_store_open_run_t *out)
{
	memset(out, 0, sizeof(*out));
	if (!r || i >= r->l.head.count)
		return;
	const pc__store_run_ent_t *e = (const pc__store_run_ent_t *)r->l.ents + i;
	const char *f[4];
	strs_get(r->l.bytes, e->off, 4, f);
	*out = (pc_store_open_run_t){f[0], f[1], f[2], f[3], e->accepted_ms, e->started != 0};
}

void pc_store_open_runs_free(pc_store_open_runs_t *r)
{
	listing_free((listing_t *)r);
}

/* ---- usage records ---- */

int pc__store_usage_add(pc__store_usage_builder_t *b, const pc__store_usage_ent_t *e, const char *str[4],
			const size_t len[4])
{
	pc__store_usage_ent_t *v = ents_room(b->ents, b->n, &b->cap, sizeof(*v));
	if (!v)
		return PC_ENOMEM;
	b->ents = v;
	pc__store_usage_ent_t *d = &v[b->n];
	int rc = strs_put(&b->strs, str, len, 4, d->off);
	if (rc != 0)
		return rc;
	memcpy(d->n, e->n, sizeof(d->n));
	d->created_ms = e->created_ms;
	b->n++;
	return 0;
}

pc_msg_t *pc__store_usage_finish(pc__store_usage_builder_t *b, bool more)
{
	pc__store_usage_head_t h = b->head;
	h.rc = 0;
	h.count = (uint32_t)b->n;
	h.more = more;
	pc_msg_t *m = payload_msg(PC_STORE_MSG_USAGE, &h, sizeof(h), b->ents, b->n * sizeof(*b->ents), &b->strs);
	pc__store_usage_clear(b);
	return m;
}

void pc__store_usage_clear(pc__store_usage_builder_t *b)
{
	free(b->ents);
	free(b->strs.bytes);
	*b = (pc__store_usage_builder_t){0};
}

static pc_msg_t *usage_error(int rc)
{
	pc__store_usage_head_t h = {.rc = rc};
	pc__store_strs_t none = {0};
	return payload_msg(PC_STORE_MSG_USAGE, &h, sizeof(h), NULL, 0, &none);
}

struct pc_store_usage_list {
	pc__store_usage_head_t head;
	const pc__store_usage_ent_t *ents;
	const char *bytes;
	pc_msg_t *msg; /* the payload the pointers point into */
};

int pc_store_usage_list_take(const pc_msg_t *m, pc_store_usage_list_t **out)
{
	if (!out)
		return PC_EINVAL;
	*out = NULL;
	if (!m || m->type != PC_STORE_MSG_USAGE || m->size < sizeof(int32_t))
		return PC_EINVAL;
	int32_t rc;
	memcpy(&rc, pc_msg_cdata(m), sizeof(rc));
	if (rc != 0)
		return rc;
	pc__store_usage_head_t head;
	if (m->size < sizeof(head))
		return PC_EINVAL;
	memcpy(&head, pc_msg_cdata(m), sizeof(head));
	if (head.count > (m->size - sizeof(head)) / sizeof(pc__store_usage_ent_t))
		return PC_EINVAL;
	pc_store_usage_list_t *l = calloc(1, sizeof(*l));
	pc_msg_t *copy = l ? pc_msg_new(m->type, m->size) : NULL;
	if (!copy) {
		free(l);
		return PC_ENOMEM;
	}
	memcpy(pc_msg_data(copy), pc_msg_cdata(m), m->size);
	const char *p = pc_msg_cdata(copy);
	l->head = head;
	l->ents = (const pc__store_usage_ent_t *)(const void *)(p + sizeof(head));
	l->bytes = p + sizeof(head) + head.count * sizeof(pc__store_usage_ent_t);
	l->msg = copy;
	*out = l;
	return 0;
}

size_t pc_store_usage_list_count(const pc_store_usage_list_t *l)
{
	return l ? l->head.count : 0;
}

void pc_store_usage_list_get(const pc_store_usage_list_t *l, size_t i, pc_store_usage_t *out)
{
	memset(out, 0, sizeof(*out));
	if (!l || i >= l->head.count)
		return;
	const pc__store_usage_ent_t *e = &l->ents[i];
	const char *f[4];
	strs_get(l->bytes, e->off, 4, f);
	*out = (pc_store_usage_t){.run_id = f[0], .session_key = f[1], .attempt = (uint32_t)e->n[0],
				  .call = (uint32_t)e->n[1], .provider = f[2], .model = f[3], .input = e->n[2],
				  .output = e->n[3], .cache_read = e->n[4], .cache_write = e->n[5], .total = e->n[6],
				  .created_ms = e->created_ms};
}

void pc_store_usage_list_totals(const pc_store_usage_list_t *l, pc_store_usage_t *out, uint64_t *records)
{
	memset(out, 0, sizeof(*out));
	if (records)
		*records = l ? (uint64_t)l->head.records : 0;
	if (!l)
		return;
	const int64_t *s = l->head.sum;
	*out = (pc_store_usage_t){.input = s[0], .output = s[1], .cache_read = s[2], .cache_write = s[3],
				  .total = s[4], .created_ms = l->head.latest_ms};
}

void pc_store_usage_list_free(pc_store_usage_list_t *l)
{
	if (!l)
		return;
	pc_msg_free(l->msg);
	free(l);
}

/* ---- blocking jobs ---- */

typedef struct batch {
	pc_store_t *s;
	pc__store_op_t *ops;
	uint32_t writes; /* syncs not counted */
	pc_msg_t *done; /* STORE_BATCH_DONE, allocated up front: the actor must
			 * hear that the batch ended, even when memory is short */
} batch_t;

static void batch_fail(pc__store_op_t *op, int rc)
{
	for (; op; op = op->next)
		op->res = (pc_store_reply_t){.rc = rc};
}

/* The provisional answer of a run row that asked for one, once its
 * statement ran (either pass: a rolled-back pass redoes the same ops in the
 * same order, so the outcome it told stands unless the commit fails). */
static void tell_early(pc__store_op_t *op)
{
	if (op->told_early || !op->reply_to || op->kind != PC_STORE_REQ_RUN_BEGIN || op->nint < I_RB_N ||
	    !(op->i[I_RB_FLAGS] & PC_STORE_REQ_EARLY) || op->res.rc != 0)
		return;
	pc_store_reply_t r = op->res;
	r.flags |= PC_STORE_PROVISIONAL;
	pc_msg_t *m = pc__store_reply_msg(&r);
	if (m) {
		m->corr = op->corr;
		op->told_early = pc_send(op->reply_to, m) == 0;
	}
}

/* The calling thread's CPU time: what a batch cost, whichever thread of the
 * blocking pool ran it. */
static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;
	if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0)
		return 0;
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* On a blocking thread: one pass over the batch in one transaction; with
 * `guarded`, each op in a savepoint of its own so a failed op leaves the
 * others in. */
static int batch_pass(pc_store_t *s, batch_t *b, bool guarded)
{
	int rc = s->ops->begin(s->be);
	for (pc__store_op_t *op = b->ops; op && rc == 0; op = op->next) {
		if (op->kind == PC_STORE_REQ_SYNC)
			continue; /* it asks only for the commit */
		rc = s->ops->apply(s->be, op, guarded);
		if (rc == 0)
			tell_early(op);
	}
	if (rc == 0)
		rc = s->ops->commit(s->be);
	return rc;
}

static pc_msg_t *batch_run(void *arg)
{
	batch_t *b = arg;
	pc_store_t *s = b->s;
	uint64_t cpu0 = thread_cpu_ns();
	/* Optimistic: almost every batch succeeds whole, so it first runs
	 * without a savepoint per op (two statements fewer each). If anything
	 * failed, the transaction is rolled back and the batch runs again
	 * guarded, where a failed op (a fenced write, a conflict, a refused
	 * size) fails alone. */
	int rc = batch_pass(s, b, false);
	if (rc != 0) {
		s->ops->rollback(s->be);
		rc = batch_pass(s, b, true);
	}
	if (rc != 0) {
		s->ops->rollback(s->be);
		batch_fail(b->ops, rc);
		__atomic_add_fetch(&s->stats.failed_batches, 1, __ATOMIC_RELAXED);
	}
	/* one writer thread at a time: the pair is written by it alone */
	if (__atomic_load_n(&s->health_rc, __ATOMIC_RELAXED) != rc) {
		__atomic_store_n(&s->health_since_ms, pc__store_now_ms(), __ATOMIC_RELAXED);
		__atomic_store_n(&s->health_rc, rc, __ATOMIC_RELEASE);
		if (s->cfg.on_health)
			s->cfg.on_health(s->cfg.health_user, rc);
	}
	__atomic_add_fetch(&s->stats.batches, 1, __ATOMIC_RELAXED);
	__atomic_add_fetch(&s->stats.writes, b->writes, __ATOMIC_RELAXED);
	uint64_t cpu1 = thread_cpu_ns();
	if (cpu0 && cpu1 > cpu0)
		__atomic_add_fetch(&s->stats.write_cpu_ns, cpu1 - cpu0, __ATOMIC_RELAXED);
	/* Durable (or failed) now: answer. */
	pc__store_op_t *op = b->ops;
	while (op) {
		pc__store_op_t *next = op->next;
		op_answer_after(op, answer_delay(s, op));
		op = next;
	}
	pc_msg_t *done = b->done;
	free(b);
	return done;
}

static void batch_discard(void *arg)
{
	batch_t *b = arg;
	pc__store_op_t *op = b->ops;
	while (op) {
		pc__store_op_t *next = op->next;
		pc__store_op_free(op);
		op = next;
	}
	pc_msg_free(b->done);
	free(b);
}

static void reads_done(pc_store_t *s)
{
	pthread_mutex_lock(&s->lock);
	s->reads--;
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
}

typedef struct read_job {
	pc_store_t *s;
	pc__store_op_t *op;
} read_job_t;

static pc_msg_t *read_run(void *arg)
{
	read_job_t *j = arg;
	pc_msg_t *m = j->s->ops->read(j->s->be, j->op);
	if (m)
		m->corr = j->op->corr;
	__atomic_add_fetch(&j->s->stats.reads, 1, __ATOMIC_RELAXED);
	reads_done(j->s);
	pc__store_op_free(j->op);
	free(j);
	return m;
}

static void read_discard(void *arg)
{
	read_job_t *j = arg;
	reads_done(j->s);
	pc__store_op_free(j->op);
	free(j);
}

/* ---- the store actor ---- */

typedef struct store_actor {
	pc_store_t *s;
	pc__store_op_t *head, *tail;
	uint32_t pending;       /* queued writes */
	uint32_t urgent;        /* of which not lazy */
	bool in_flight;
	bool window_armed;      /* a tick is due after window_ms */
	bool lazy_armed;        /* a tick is due after lazy_ms */
	pc_timer_t window_tick, lazy_tick;
	uint64_t gen;           /* tick generation: stale ticks are ignored */
	bool closing;
	pc_actor_t *close_to;   /* retained */
	uint64_t close_corr;
} store_actor_t;

/* Sends the oldest group_max writes as one batch. A batch that cannot be
 * submitted is answered with the error at once, and the next is tried, so
 * no write is left waiting for an event that may never come. */
static void flush(pc_ctx_t *ctx, store_actor_t *a)
{
	a->gen++;
	/* cancelled, so that a long lazy_ms leaves no timer behind; one
	 * already on its way is stale by its generation */
	if (a->window_armed)
		pc_timer_cancel(a->s->rt, a->window_tick);
	if (a->lazy_armed)
		pc_timer_cancel(a->s->rt, a->lazy_tick);
	a->window_armed = a->lazy_armed = false;
	while (a->head && !a->in_flight) {
		pc__store_op_t *first = a->head, *last = first;
		uint32_t n = 0, writes = 0;
		for (pc__store_op_t *op = first; op && n < a->s->cfg.group_max; op = op->next) {
			last = op;
			n++;
			writes += op->kind != PC_STORE_REQ_SYNC;
			a->urgent -= !op->lazy;
		}
		a->head = last->next;
		if (!a->head)
			a->tail = NULL;
		a->pending -= n;
		last->next = NULL;
		batch_t *b = malloc(sizeof(*b));
		pc_msg_t *done = pc_msg_new(STORE_BATCH_DONE, 0);
		int rc = PC_ENOMEM;
		if (b && done) {
			*b = (batch_t){a->s, first, writes, done};
			rc = pc_blocking_submit(a->s->rt, batch_run, batch_discard, b, pc_self(ctx));
		}
		if (rc == 0) {
			a->in_flight = true;
			return;
		}
		pc_msg_free(done);
		free(b);
		batch_fail(first, rc);
		while (first) {
			pc__store_op_t *next = first->next;
			op_answer(first);
			first = next;
		}
	}
}

static void close_finish(pc_ctx_t *ctx, store_actor_t *a)
{
	pc_store_reply_t done = {0};
	pc_msg_t *m = pc__store_reply_msg(&done);
	if (m) {
		m->corr = a->close_corr;
		(void)pc_send(a->close_to, m); /* a gone waiter needs no answer */
	}
	pc_actor_release(a->close_to);
	a->close_to = NULL;
	pc_exit(ctx, PC_EXIT_NORMAL);
}

/* The content-sized strings of a write: limited by max_content. */
static bool too_big(const pc_store_t *s, const pc__store_op_t *op)
{
	for (uint32_t k = 0; k < op->nstr; k++)
		if (pc__store_len(op, k) > s->cfg.max_content)
			return true;
	return false;
}

/* A tick of the current generation after `ms`; false if none could be
 * armed (then the caller commits at once rather than leave writes waiting
 * for a tick that will not come). */
static bool arm_tick(pc_ctx_t *ctx, store_actor_t *a, uint32_t ms, pc_timer_t *id)
{
	pc_msg_t *t = pc_msg_new(STORE_TICK, sizeof(uint64_t));
	if (!t)
		return false;
	memcpy(pc_msg_data(t), &a->gen, sizeof(a->gen));
	return pc_timer_after(pc_self(ctx), ms, t, id) == 0;
}

/* Starts the next batch now, or arms the tick that will: at once for a
 * write someone waits for (after window_ms if one is configured, unless
 * `waited`: those writes queued behind a commit and have waited already);
 * after lazy_ms when only lazy writes are queued. */
static void schedule(pc_ctx_t *ctx, store_actor_t *a, bool waited)
{
	const pc_store_config_t *c = &a->s->cfg;
	if (a->in_flight || !a->head)
		return;
	bool now = a->closing || a->pending >= c->group_max || (a->urgent && (waited || c->window_ms == 0));
	if (!now && a->urgent && !a->window_armed)
		now = !(a->window_armed = arm_tick(ctx, a, c->window_ms, &a->window_tick));
	else if (!now && !a->urgent && !a->lazy_armed)
		now = !(a->lazy_armed = arm_tick(ctx, a, c->lazy_ms, &a->lazy_tick));
	if (now)
		flush(ctx, a);
}

static int on_request(pc_ctx_t *ctx, store_actor_t *a, const pc_msg_t *m)
{
	pc_store_t *s = a->s;
	if (a->closing) {
		answer_now(m, PC_ESTOPPED);
		return 0;
	}
	pc__store_op_t *op = NULL;
	int rc = pc__store_op_from_msg(m, &op);
	if (rc == 0 && too_big(s, op))
		rc = PC_STORE_ETOOBIG;
	if (rc != 0) {
		pc__store_op_free(op);
		answer_now(m, rc);
		return 0;
	}
	if (is_read(m->type)) {
		if (!op->reply_to) {
			pc__store_op_free(op);
			return 0;
		}
		read_job_t *j = malloc(sizeof(*j));
		rc = PC_ENOMEM;
		if (j) {
			*j = (read_job_t){s, op};
			pthread_mutex_lock(&s->lock);
			s->reads++;
			pthread_mutex_unlock(&s->lock);
			rc = pc_blocking_submit(s->rt, read_run, read_discard, j, op->reply_to);
			if (rc != 0) {
				reads_done(s);
				free(j);
			}
		}
		if (rc != 0) {
			op->res.rc = rc;
			op_answer(op);
		}
		return 0;
	}
	if (a->tail)
		a->tail->next = op;
	else
		a->head = op;
	a->tail = op;
	a->pending++;
	a->urgent += !op->lazy;
	schedule(ctx, a, false);
	return 0;
}

static int store_receive(pc_ctx_t *ctx, void *state, pc_msg_t *m)
{
	store_actor_t *a = state;
	switch (m->type) {
	case STORE_TICK:
		if (pc_msg_u64(m) == a->gen && !a->in_flight)
			flush(ctx, a);
		return 0;
	case STORE_BATCH_DONE:
		a->in_flight = false;
		if (a->head)
			schedule(ctx, a, true);
		else if (a->closing)
			close_finish(ctx, a);
		return 0;
	case STORE_CLOSE:
		if (a->closing) {
			answer_now(m, PC_ESTATE);
			return 0;
		}
		a->closing = true;
		a->close_to = pc_actor_retain(m->reply_to);
		a->close_corr = m->corr;
		if (a->head && !a->in_flight)
			flush(ctx, a);
		if (!a->in_flight)
			close_finish(ctx, a);
		return 0;
	default:
		if (m->type >= PC_STORE_REQ_SESSION && m->type <= PC_STORE_REQ_USAGE_LIST)
			return on_request(ctx, a, m);
		return 0;
	}
}

static void store_stop(pc_ctx_t *ctx, void *state, int reason)
{
	(void)ctx;
	(void)reason;
	store_actor_t *a = state;
	/* Stopped with writes still queued (runtime shutdown): they were
	 * never committed, so they are answered as such. */
	batch_fail(a->head, PC_ESTOPPED);
	while (a->head) {
		pc__store_op_t *next = a->head->next;
		op_answer(a->head);
		a->head = next;
	}
	pc_actor_release(a->close_to);
	free(a);
}

static const pc_behavior_t store_behavior = {"store", store_receive, store_stop};

/* ---- open / close ---- */

static int ensure_home(const char *path)
{
	/* Only the default location's directory is created for the caller. */
	char dir[PATH_MAX];
	int n = snprintf(dir, sizeof(dir), "%s", path);
	if (n < 0 || (size_t)n >= sizeof(dir))
		return PC_ELIMIT;
	char *slash = strrchr(dir, '/');
	if (!slash)
		return 0;
	*slash = 0;
	if (mkdir(dir, 0700) == 0 || errno == EEXIST)
		return 0;
	return (errno == EACCES || errno == EROFS || errno == EPERM) ? PC_STORE_EREADONLY : PC_STORE_ECANTOPEN;
}

int pc_store_open(pc_runtime_t *rt, const pc_store_config_t *cfg, pc_store_t **out)
{
	if (!out)
		return PC_EINVAL;
	*out = NULL;
	if (!rt)
		return PC_EINVAL;
	pc_store_t *s = calloc(1, sizeof(*s));
	store_actor_t *a = calloc(1, sizeof(*a));
	char defpath[PATH_MAX];
	int rc = 0;
	if (!s || !a) {
		rc = PC_ENOMEM;
		goto fail;
	}
	if (cfg)
		s->cfg = *cfg;
	config_resolve(&s->cfg);
	const char *path = s->cfg.path;
	if (!path) {
		rc = pc_store_default_path(defpath, sizeof(defpath));
		if (rc == 0)
			rc = ensure_home(defpath);
		if (rc != 0)
			goto fail;
		path = defpath;
	}
	s->cfg.path = NULL;
	s->rt = rt;
	s->ops = &pc__store_sqlite;
	if (pthread_mutex_init(&s->lock, NULL) != 0) {
		rc = PC_ESYS;
		goto fail;
	}
	if (pthread_cond_init(&s->cond, NULL) != 0) {
		rc = PC_ESYS;
		goto fail_lock;
	}
	rc = s->ops->open(path, &s->cfg, &s->be);
	if (rc != 0)
		goto fail_cond;
	a->s = s;
	rc = pc_spawn(rt, &store_behavior, a, &s->actor);
	if (rc != 0) {
		s->ops->close(s->be);
		goto fail_cond;
	}
	*out = s;
	return 0;
fail_cond:
	pthread_cond_destroy(&s->cond);
fail_lock:
	pthread_mutex_destroy(&s->lock);
fail:
	free(a);
	free(s);
	return rc;
}

int pc_store_close(pc_store_t *s)
{
	if (!s)
		return 0;
	pc_msg_t *m = pc_msg_new(STORE_CLOSE, 0), *r = NULL;
	if (!m)
		return PC_ENOMEM;
	/* Waits for the last batch. PC_ESTOPPED: the actor is gone already
	 * (its stop handler answered what was queued). Anything else means
	 * the actor may still run on `s`: nothing is freed. */
	int rc = pc_ask_sync(s->actor, m, -1, &r);
	pc_msg_free(r);
	if (rc != 0 && rc != PC_ESTOPPED)
		return rc;
	pthread_mutex_lock(&s->lock);
	while (s->reads)
		pthread_cond_wait(&s->cond, &s->lock);
	pthread_mutex_unlock(&s->lock);
	s->ops->close(s->be);
	pc_actor_release(s->actor);
	pthread_cond_destroy(&s->cond);
	pthread_mutex_destroy(&s->lock);
	free(s);
	return 0;
}

pc_actor_t *pc_store_actor(pc_store_t *s)
{
	return s ? s->actor : NULL;
}

void pc_store_stats(pc_store_t *s, pc_store_stats_t *out)
{
	memset(out, 0, sizeof(*out));
	if (!s)
		return;
	out->batches = __atomic_load_n(&s->stats.batches, __ATOMIC_RELAXED);
	out->writes = __atomic_load_n(&s->stats.writes, __ATOMIC_RELAXED);
	out->failed_batches = __atomic_load_n(&s->stats.failed_batches, __ATOMIC_RELAXED);
	out->reads = __atomic_load_n(&s->stats.reads, __ATOMIC_RELAXED);
	out->write_cpu_ns = __atomic_load_n(&s->stats.write_cpu_ns, __ATOMIC_RELAXED);
}

/* ---- plain-thread wrappers ---- */

/* Sends `req` (built by the caller with code `built`) and waits for the
 * reply: *rep, the caller's. */
static int ask(pc_store_t *s, int built, pc_msg_t *req, pc_msg_t **rep)
{
	*rep = NULL;
	if (built != 0)
		return built;
	if (!s) {
		pc_msg_free(req);
		return PC_EINVAL;
	}
	return pc_ask_sync(s->actor, req, s->cfg.timeout_ms, rep);
}

/* ask() for a PC_STORE_MSG_REPLY, read into *out (may be NULL). */
static int call(pc_store_t *s, int built, pc_msg_t *req, pc_store_reply_t *out)
{
	pc_store_reply_t r = {0};
	pc_msg_t *rep = NULL;
	int rc = ask(s, built, req, &rep);
	if (rc == 0)
		rc = pc_store_reply_get(rep, &r);
	if (rc == 0)
		rc = r.rc;
	pc_msg_free(rep);
	if (out)
		*out = r;
	return rc;
}

int pc_store_session(pc_store_t *s, const char *key, const char *agent, const char *session_id,
		     const char *metadata, pc_store_reply_t *out)
{
	pc_msg_t *m = NULL;
	int rc = pc_store_req_session(key, agent, session_id, metadata, &m);
	return call(s, rc, m, out);
}

int pc_store_session_set(pc_store_t *s, const char *key, int64_t epoch, const char *metadata)
{
	pc_msg_t *m = NULL;
	int rc = pc_store_req_session_set(key, epoch, metadata, &m);
	return call(s, rc, m, NULL);
}

int pc_store_append(pc_store_t *s, const char *key, int64_t epoch, const pc_store_msg_t *msg, int64_t *seq)
{
	pc_msg_t *m = NULL;
	pc_store_reply_t r;
	int rc = pc_store_req_append(key, epoch, msg, &m);
	rc = call(s, rc, m, &r);
	if (seq)
		*seq = rc == 0 ? r.seq : 0;
	return rc;
}

int pc_store_rewrite(pc_store_t *s, const char *key, int64_t epoch, int64_t expected_last_seq,
		     int64_t from_seq, const pc_store_msg_t *msgs, size_t n, int64_t *last_seq)
{
	pc_msg_t *m = NULL;
	pc_store_reply_t r;
	int rc = pc_store_req_rewrite(key, epoch, expected_last_seq, from_seq, msgs, n, &m);
	rc = call(s, rc, m, &r);
	if (last_seq)
		*last_seq = rc == 0 ? r.seq : 0;
	return rc;
}

int pc_store_run_begin(pc_store_t *s, const pc_store_run_new_t *r, pc_store_reply_t *out)
{
	pc_msg_t *m = NULL;
	pc_store_run_new_t plain = r ? *r : (pc_store_run_new_t){0};
	plain.flags &= ~PC_STORE_REQ_EARLY; /* one answer for a plain thread */
	int rc = pc_store_req_run_begin(r ? &plain : NULL, &m);
	return call(s, rc, m, out);
}

int pc_store_run_adopt(pc_store_t *s, const char *run_id, const char *from_owner, const char *to_owner)
{
	pc_msg_t *m = NULL;
	int rc = pc_store_req_run_adopt(run_id, from_owner, to_owner, &m);
	return call(s, rc, m, NULL);
}

int pc_store_runs_open(pc_store_t *s, pc_store_open_runs_t **out)
{
	if (!out)
		return PC_EINVAL;
	*out = NULL;
	pc_msg_t *m = NULL, *rep = NULL;
	int rc = pc_store_req_runs_open(&m);
	rc = ask(s, rc, m, &rep);
	if (rc == 0)
		rc = pc_store_open_runs_take(rep, out);
	pc_msg_free(rep);
	return rc;
}

int pc_store_run_end(pc_store_t *s, const char *run_id, pc_store_run_status_t status, const char *error_code,
		     const char *usage)
{
	pc_msg_t *m = NULL;
	int rc = pc_store_req_run_end(run_id, status, error_code, usage, 0, &m);
	return call(s, rc, m, NULL);
}

int pc_store_run_get(pc_store_t *s, const char *run_id, pc_store_reply_t *out)
{
	pc_msg_t *m = NULL;
	int rc = pc_store_req_run_get(run_id, &m);
	return call(s, rc, m, out);
}

int pc_store_attempt(pc_store_t *s, const pc_store_attempt_t *a)
{
	pc_msg_t *m = NULL;
	int rc = pc_store_req_attempt(a, &m);
	return call(s, rc, m, NULL);
}

int pc_store_usage_add(pc_store_t *s, const pc_store_usage_t *u, int64_t epoch)
{
	pc_msg_t *m = NULL;
	int rc = pc_store_req_usage_add(u, epoch, &m);
	return call(s, rc, m, NULL);
}

int pc_store_usage_list(pc_store_t *s, const char *run_id, const char *session_key, pc_store_usage_list_t **out)
{
	if (!out)
		return PC_EINVAL;
	*out = NULL;
	pc_msg_t *m = NULL, *rep = NULL;
	int rc = pc_store_req_usage_list(run_id, session_key, &m);
	rc = ask(s, rc, m, &rep);
	if (rc == 0)
		rc = pc_store_usage_list_take(rep, out);
	pc_msg_free(rep);
	return rc;
}

int pc_store_audit(pc_store_t *s, const pc_store_audit_t *a)
{
	pc_msg_t *m = NULL;
	int rc = pc_store_req_audit(a, &m);
	return call(s, rc, m, NULL);
}

int pc_store_lease_acquire(pc_store_t *s, const char *key, const char *owner, int64_t ttl_ms, const char *steal_from,
			   int64_t *epoch, char *busy)
{
	pc_msg_t *m = NULL;
	pc_store_reply_t r;
	int rc = pc_store_req_lease_acquire(key, owner, ttl_ms, steal_from, &m);
	rc = call(s, rc, m, &r);
	if (epoch)
		*epoch = rc == 0 ? r.epoch : 0;
	if (busy)
		snprintf(busy, PC_STORE_ID_MAX + 1, "%s", rc == PC_EBUSY ? r.id : "");
	return rc;
}

int pc_store_lease_release(pc_store_t *s, const char *key, const char *owner, int64_t epoch)
{
	pc_msg_t *m = NULL;
	int rc = pc_store_req_lease_release(key, owner, epoch, &m);
	return call(s, rc, m, NULL);
}

int pc_store_history(pc_store_t *s, const char *key, pc_store_history_t **out)
{
	if (!out)
		return PC_EINVAL;
	*out = NULL;
	pc_msg_t *m = NULL, *rep = NULL;
	int rc = pc_store_req_history(key, &m);
	rc = ask(s, rc, m, &rep);
	if (rc == 0) {
		rc = history_adopt(rep, out);
		if (rc == 0)
			rep = NULL;
	}
	pc_msg_free(rep);
	return rc;
}

int pc_store_sessions(pc_store_t *s, const pc_store_sessions_query_t *q, pc_store_sessions_t **out)
{
	if (!out)
		return PC_EINVAL;
	*out = NULL;
	pc_msg_t *m = NULL, *rep = NULL;
	int rc = pc_store_req_sessions(q, &m);
	rc = ask(s, rc, m, &rep);
	if (rc == 0)
		rc = pc_store_sessions_take(rep, out);
	pc_msg_free(rep);
	return rc;
}
