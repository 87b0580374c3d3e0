/*
 * Reads of a session's transcript and row, in OpenClaw's shapes: chat.history
 * (a tail page under a count and a byte budget, with the receipts of the
 * client's own runs), chat.startup (the same with the chat's metadata, what
 * the Control UI asks when it opens a chat), chat.metadata and
 * sessions.describe. Each is one store read (a history snapshot) answered
 * when it comes back; docs/gateway.md says where they depart from OpenClaw.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rpc_internal.h"

/* What a history read answers (pc__gw_pend_t.view). */
enum { VIEW_HISTORY = 0, VIEW_STARTUP, VIEW_DESCRIBE };

/* OpenClaw's bounds on chat.history's params. */
#define MAX_BYTES_MIN 1024
#define MAX_CHARS_MAX 500000
#define INPUT_RUN_IDS_MAX 50
#define INPUT_RUN_ID_LEN_MAX 256

#define HISTORY_PARAMS(key_required)                                                               \
	{"sessionKey", PC__GW_T_NESTR, key_required}, {"agentId", PC__GW_T_NESTR, false},          \
	    {"cursor", PC__GW_T_STRING, false}, {"limit", PC__GW_T_UINT, false},                   \
	    {"maxBytes", PC__GW_T_UINT, false}, {"offset", PC__GW_T_UINT, false},                  \
	    {"pendingBefore", PC__GW_T_UINT, false}, {"inputRunIds", PC__GW_T_ARRAY, false},       \
	    {"messageId", PC__GW_T_NESTR, false}, {"sessionId", PC__GW_T_NESTR, false},            \
	    {"maxChars", PC__GW_T_UINT, false}

const pc__gw_param_t pc__gw_chat_history_spec[PC__GW_CHAT_HISTORY_NPARAMS] = {HISTORY_PARAMS(true)};

/* chat.history's, or a short chat link's (which this gateway has none of). */
const pc__gw_param_t pc__gw_chat_startup_spec[PC__GW_CHAT_STARTUP_NPARAMS] = {
	HISTORY_PARAMS(false),
	{"shortId", PC__GW_T_NESTR, false},
	{"slugHint", PC__GW_T_NESTR, false},
};

const pc__gw_param_t pc__gw_chat_metadata_spec[PC__GW_CHAT_METADATA_NPARAMS] = {
	{"agentId", PC__GW_T_NESTR, false},
	{"authProfileId", PC__GW_T_NESTR, false},
	{"sessionKey", PC__GW_T_NESTR, false},
};

const pc__gw_param_t pc__gw_sessions_describe_spec[PC__GW_SESSIONS_DESCRIBE_NPARAMS] = {
	{"key", PC__GW_T_NESTR, true},
	{"agentId", PC__GW_T_NESTR, false},
	{"includeDerivedTitles", PC__GW_T_BOOL, false},
	{"includeLastMessage", PC__GW_T_BOOL, false},
};

static const char *agent_unknown(const cJSON *params)
{
	const char *agent = pc__gw_str(params, "agentId");
	return agent && strcmp(agent, "main") != 0 ? "agentId: unknown agent (this gateway serves \"main\")" : NULL;
}

static double num(const cJSON *params, const char *name, double def)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(params, name);
	return v ? v->valuedouble : def;
}

/* inputRunIds: 1 to 50 distinct strings of 1 to 256 bytes. */
static const char *input_run_ids_invalid(const cJSON *ids)
{
	if (!ids)
		return NULL;
	int n = cJSON_GetArraySize(ids);
	if (n < 1 || n > INPUT_RUN_IDS_MAX)
		return "inputRunIds: must hold 1 to 50 run ids";
	for (int i = 0; i < n; i++) {
		const char *v = cJSON_GetStringValue(cJSON_GetArrayItem(ids, i));
		size_t len = v ? strlen(v) : 0;
		if (len < 1 || len > INPUT_RUN_ID_LEN_MAX)
			return "inputRunIds: each must be a string of 1 to 256 bytes";
		for (int j = 0; j < i; j++)
			if (!strcmp(v, cJSON_GetStringValue(cJSON_GetArrayItem(ids, j))))
				return "inputRunIds: must not repeat a run id";
	}
	return NULL;
}

/* What this gateway refuses of a chat.history (or startup) request that
 * passed the spec, or NULL. */
static const char *history_invalid(const cJSON *params)
{
	const char *why = agent_unknown(params);
	if (why)
		return why;
	double limit = num(params, "limit", PC__GW_HISTORY_DEFAULT);
	if (limit < 1 || limit > PC__GW_HISTORY_MAX)
		return "limit: must be 1 to 1000";
	if (num(params, "maxBytes", MAX_BYTES_MIN) < MAX_BYTES_MIN)
		return "maxBytes: must be at least 1024";
	if (num(params, "pendingBefore", 1) < 1)
		return "pendingBefore: must be at least 1";
	double max_chars = num(params, "maxChars", 1);
	if (max_chars < 1 || max_chars > MAX_CHARS_MAX)
		return "maxChars: must be 1 to 500000";
	if (pc__gw_str(params, "messageId"))
		return "messageId: reads anchored at a message are not supported";
	return input_run_ids_invalid(cJSON_GetObjectItemCaseSensitive(params, "inputRunIds"));
}

/* Asks the store for session `key`'s snapshot, answered as `view`. */
static void ask_history(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *id, const char *method, const char *key,
			const cJSON *params, int view)
{
	if (pc__gw_inflight_full(c, id))
		return;
	pc_msg_t *req = NULL;
	pc__gw_pend_t *pd = pc__gw_pend_new(c, PC__GW_P_HISTORY, id);
	int rc = PC_ENOMEM;
	if (pd && (pd->key = strdup(key)) && (pd->params = cJSON_Duplicate(params, true))) {
		pd->view = view;
		rc = pc__gw_ask_store(ctx, c, pd, pc_store_req_history(key, &req), &req);
	} else if (pd) {
		pc__gw_pend_free(c, pd);
	}
	if (rc != 0)
		pc__gw_read_refused(c, id, method, rc, "sessionKey: is not a session key");
}

static void history_or_startup(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *id, const char *method,
			       const cJSON *params, int view)
{
	const char *why = history_invalid(params);
	if (why) {
		pc__gw_invalid(c, id, method, why);
		return;
	}
	/* This gateway hands out no deltaCursor: any cursor is not one of
	 * its own, which OpenClaw answers with a reset (fetch a tail page). */
	if (pc__gw_str(params, "cursor")) {
		cJSON *p = cJSON_CreateObject();
		cJSON_AddStringToObject(p, "kind", "reset");
		pc__gw_reply_ok(c, id, p);
		return;
	}
	ask_history(ctx, c, id, method, pc__gw_str(params, "sessionKey"), params, view);
}

void pc__gw_m_chat_history(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *id, const cJSON *params)
{
	history_or_startup(ctx, c, id, "chat.history", params, VIEW_HISTORY);
}

void pc__gw_m_chat_startup(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *id, const cJSON *params)
{
	if (pc__gw_str(params, "shortId") || pc__gw_str(params, "slugHint")) {
		pc__gw_invalid(c, id, "chat.startup", "shortId: short chat links are not supported");
		return;
	}
	if (!pc__gw_str(params, "sessionKey")) {
		pc__gw_invalid(c, id, "chat.startup", "sessionKey: is required");
		return;
	}
	history_or_startup(ctx, c, id, "chat.startup", params, VIEW_STARTUP);
}

/* chat.metadata's answer: the agent and what it may run. */
static cJSON *metadata(pc__gw_conn_t *c)
{
	cJSON *p = cJSON_CreateObject();
	cJSON_AddStringToObject(p, "agentId", "main");
	cJSON_AddItemToObject(p, "models", pc__gw_models(c->g->cfg));
	return p;
}

void pc__gw_m_chat_metadata(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *id, const cJSON *params)
{
	(void)ctx;
	const char *why = agent_unknown(params);
	if (!why && pc__gw_str(params, "sessionKey") && pc__gw_str(params, "authProfileId"))
		why = "authProfileId: cannot be combined with sessionKey";
	else if (!why && pc__gw_str(params, "authProfileId"))
		why = "authProfileId: this gateway has no saved model accounts";
	if (why)
		pc__gw_invalid(c, id, "chat.metadata", why);
	else
		pc__gw_reply_ok(c, id, metadata(c));
}

void pc__gw_m_sessions_describe(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *id, const cJSON *params)
{
	const char *why = agent_unknown(params);
	if (why)
		pc__gw_invalid(c, id, "sessions.describe", why);
	else
		ask_history(ctx, c, id, "sessions.describe", pc__gw_str(params, "key"), params, VIEW_DESCRIBE);
}

/* ---- the answers ---- */

/* The session's row (sessionInfo, sessions.describe's session). */
static cJSON *session_info(pc__gw_conn_t *c, const char *key, const pc_store_history_t *h)
{
	pc_store_session_t sess;
	pc_store_history_session(h, &sess);
	cJSON *s = cJSON_CreateObject();
	char active[PC_RUN_ID_MAX + 1];
	bool running = pc_agent_active_run(c->g->agent, key, active) == 0;
	cJSON_AddStringToObject(s, "key", key);
	if (sess.id)
		cJSON_AddStringToObject(s, "sessionId", sess.id);
	cJSON_AddNumberToObject(s, "createdAt", (double)sess.created_ms);
	cJSON_AddNumberToObject(s, "updatedAt", (double)sess.updated_ms);
	cJSON_AddNumberToObject(s, "messageCount", (double)pc_store_history_count(h));
	cJSON_AddBoolToObject(s, "hasActiveRun", running);
	cJSON *ids = cJSON_AddArrayToObject(s, "activeRunIds");
	if (running)
		cJSON_AddItemToArray(ids, cJSON_CreateString(active));
	if (running)
		cJSON_AddStringToObject(s, "status", "running");
	return s;
}

void pc__gw_name_message(cJSON *item, int64_t seq, const char *run_id, const char *idem)
{
	if (!cJSON_IsObject(item) || cJSON_HasObjectItem(item, "__openclaw"))
		return;
	cJSON *oc = cJSON_AddObjectToObject(item, "__openclaw");
	if (!oc)
		return;
	cJSON_AddNumberToObject(oc, "seq", (double)seq);
	if (run_id && *run_id)
		cJSON_AddStringToObject(oc, "runId", run_id);
	if (idem)
		cJSON_AddStringToObject(oc, "idempotencyKey", idem);
}

/* Message i of the snapshot, named: a run's prompt (a user message that
 * begins its run's messages) by its run's idempotency key too. */
static void name_stored(cJSON *item, const pc_store_history_t *h, size_t i, const pc_store_msg_t *m)
{
	const char *idem = NULL;
	if (m->idem_key && m->role && !strcmp(m->role, "user")) {
		pc_store_msg_t prev = {0};
		if (i > 0)
			pc_store_history_get(h, i - 1, &prev);
		if (!prev.run_id || strcmp(prev.run_id, m->run_id) != 0)
			idem = m->idem_key;
	}
	pc__gw_name_message(item, m->seq, m->run_id, idem);
}

/* Messages [from, to) of the snapshot, then only the newest that fit
 * `budget` bytes as a JSON array (what the answer's messages cost); NULL
 * when memory ran out. */
static cJSON *messages(const pc_store_history_t *h, size_t from, size_t to, size_t budget)
{
	size_t n = to - from, used = 2, kept = 0;
	cJSON **items = n ? calloc(n, sizeof(*items)) : NULL;
	cJSON *out = cJSON_CreateArray();
	if (!out || (n && !items)) {
		cJSON_Delete(out);
		free(items);
		return NULL;
	}
	for (size_t i = n; i-- > 0;) {
		pc_store_msg_t m;
		pc_store_history_get(h, from + i, &m);
		cJSON *item = cJSON_Parse(m.content);
		if (!item)
			item = cJSON_CreateString(m.content);
		else
			name_stored(item, h, from + i, &m);
		char *text = item ? cJSON_PrintUnformatted(item) : NULL;
		size_t cost = text ? strlen(text) + (kept ? 1 : 0) : budget;
		cJSON_free(text);
		if (!text || used + cost > budget) {
			cJSON_Delete(item);
			break;
		}
		used += cost;
		items[i] = item;
		kept++;
	}
	for (size_t i = n - kept; i < n; i++)
		cJSON_AddItemToArray(out, items[i]);
	free(items);
	return out;
}

/* For each of the client's run ids: "consumed" once the run's user turn is
 * in the transcript (its message's seq names it), else "pending". A client
 * names a run it sent by the idempotency key it sent it under (OpenClaw
 * names runs so), so either name finds it. */
static void input_receipts(cJSON *p, const pc_store_history_t *h, const cJSON *ids)
{
	if (!ids)
		return;
	cJSON *receipts = cJSON_AddArrayToObject(p, "inputReceipts");
	cJSON *consumed = cJSON_AddArrayToObject(p, "inputConsumptions");
	size_t n = h ? pc_store_history_count(h) : 0;
	const cJSON *id;
	cJSON_ArrayForEach(id, ids) {
		const char *run = cJSON_GetStringValue(id);
		int64_t seq = 0;
		for (size_t i = 0; i < n && !seq; i++) {
			pc_store_msg_t m;
			pc_store_history_get(h, i, &m);
			bool named = (m.run_id && !strcmp(m.run_id, run)) || (m.idem_key && !strcmp(m.idem_key, run));
			if (named && !strcmp(m.role, "user"))
				seq = m.seq;
		}
		cJSON *r = cJSON_CreateObject();
		cJSON_AddStringToObject(r, "runId", run);
		cJSON_AddStringToObject(r, "state", seq ? "consumed" : "pending");
		if (seq) {
			char ev[24];
			snprintf(ev, sizeof(ev), "%lld", (long long)seq);
			cJSON_AddStringToObject(r, "consumedByEventId", ev);
			cJSON *cr = cJSON_CreateObject();
			cJSON_AddStringToObject(cr, "runId", run);
			cJSON_AddStringToObject(cr, "consumedByEventId", ev);
			cJSON_AddItemToArray(consumed, cr);
		}
		cJSON_AddItemToArray(receipts, r);
	}
}

static cJSON *defaults(pc__gw_conn_t *c)
{
	const pc_model_ref_t *m = &c->g->cfg->agent.model;
	cJSON *d = cJSON_CreateObject();
	cJSON_AddStringToObject(d, "mainSessionKey", "main");
	if (m->provider)
		cJSON_AddStringToObject(d, "modelProvider", m->provider);
	if (m->model)
		cJSON_AddStringToObject(d, "model", m->model);
	return d;
}

/* chat.history's answer (h NULL: no such session yet), chat.startup's with
 * the metadata too; NULL when memory ran out. */
static cJSON *history_answer(pc__gw_conn_t *c, const pc__gw_pend_t *pd, const pc_store_history_t *h)
{
	const cJSON *args = pd->params;
	size_t limit = (size_t)num(args, "limit", PC__GW_HISTORY_DEFAULT);
	size_t offset = (size_t)num(args, "offset", 0);
	size_t budget = (size_t)num(args, "maxBytes", (double)PC__GW_HISTORY_MAX_BYTES);
	if (budget > PC__GW_HISTORY_MAX_BYTES)
		budget = PC__GW_HISTORY_MAX_BYTES;
	size_t total = h ? pc_store_history_count(h) : 0;
	/* offset counts back from the newest message: the page ends there */
	size_t to = offset < total ? total - offset : 0;
	size_t from = to > limit ? to - limit : 0;
	cJSON *msgs = h ? messages(h, from, to, budget) : cJSON_CreateArray();
	if (!msgs)
		return NULL;
	size_t got = (size_t)cJSON_GetArraySize(msgs);
	cJSON *p = cJSON_CreateObject();
	cJSON_AddStringToObject(p, "sessionKey", pd->key);
	if (h) {
		pc_store_session_t sess;
		pc_store_history_session(h, &sess);
		if (sess.id)
			cJSON_AddStringToObject(p, "sessionId", sess.id);
	}
	cJSON_AddItemToObject(p, "messages", msgs);
	cJSON *pending = cJSON_AddObjectToObject(p, "pendingInputs");
	cJSON_AddArrayToObject(pending, "items");
	cJSON_AddNumberToObject(pending, "total", 0);
	input_receipts(p, h, cJSON_GetObjectItemCaseSensitive(args, "inputRunIds"));
	bool more = to - got > 0;
	if (cJSON_GetObjectItemCaseSensitive(args, "offset"))
		cJSON_AddNumberToObject(p, "offset", (double)offset);
	if (more)
		cJSON_AddNumberToObject(p, "nextOffset", (double)(total - (to - got)));
	cJSON_AddBoolToObject(p, "hasMore", more);
	cJSON_AddNumberToObject(p, "totalMessages", (double)total);
	cJSON_AddItemToObject(p, "defaults", defaults(c));
	if (h)
		cJSON_AddItemToObject(p, "sessionInfo", session_info(c, pd->key, h));
	if (pd->view == VIEW_STARTUP)
		cJSON_AddItemToObject(p, "metadata", metadata(c));
	return p;
}

/* A session the snapshot was asked by id must still be that one. */
static bool session_matches(const pc__gw_pend_t *pd, const pc_store_history_t *h)
{
	const char *want = pc__gw_str(pd->params, "sessionId");
	if (!want)
		return true;
	pc_store_session_t sess = {0};
	if (h)
		pc_store_history_session(h, &sess);
	return sess.id && !strcmp(sess.id, want);
}

void pc__gw_on_history(pc__gw_conn_t *c, const pc_msg_t *msg)
{
	pc__gw_pend_t *pd = pc__gw_pend_find(c, PC__GW_P_HISTORY, msg->corr);
	if (!pd)
		return;
	pc_store_history_t *h = NULL;
	int rc = pc_store_history_take(msg, &h);
	const char *method = pd->view == VIEW_DESCRIBE ? "sessions.describe"
			     : pd->view == VIEW_STARTUP ? "chat.startup"
							: "chat.history";
	if (rc != 0 && rc != PC_ENOTFOUND) {
		char why[160];
		snprintf(why, sizeof(why), "the transcript cannot be read: %s", pc_store_strerror(rc));
		pc__gw_reply_error(c, pd->req_id, "UNAVAILABLE", why, NULL, NULL, true);
	} else if (pd->view == VIEW_DESCRIBE) {
		cJSON *p = cJSON_CreateObject();
		cJSON_AddItemToObject(p, "session", h ? session_info(c, pd->key, h) : cJSON_CreateNull());
		pc__gw_reply_ok(c, pd->req_id, p);
	} else if (!session_matches(pd, h)) {
		pc__gw_invalid(c, pd->req_id, method, "sessionId: does not belong to sessionKey");
	} else {
		cJSON *p = history_answer(c, pd, h);
		if (p)
			pc__gw_reply_ok(c, pd->req_id, p);
		else
			pc__gw_reply_error(c, pd->req_id, "UNAVAILABLE", "out of memory", NULL, NULL, true);
	}
	pc_store_history_free(h);
	pc__gw_pend_free(c, pd);
}
