/*
 * sessions.resolve: which stored session a key, a session id, a label, a
 * short id or a reference names, answered in OpenClaw's shape:
 * {ok: true, key, agentId}, or when nothing matches INVALID_REQUEST "No
 * session found: ..." (with allowMissing: {ok: false}), or for a short id
 * more than one session has, {ok: false, candidates} (at most ten).
 *
 * Each selector is a store read. A key (and a reference, whose exact key
 * is all that can match here) is looked up as sessions.describe looks it
 * up, and when no session has it, in its other form: Pincer keeps a key as
 * its client gave it, while OpenClaw's clients name "x" also as
 * "agent:main:x" (its canonical form, which the Control UI builds from a
 * /chat/main/x route); the answer is the key stored. A session id is found
 * by the store's search of ids; a short id, a prefix of the UUID a key ends
 * with, among the PC_STORE_SESSIONS_MAX sessions updated last. Pincer's sessions have neither labels nor display names,
 * so a label never matches, a reference's slug and a slugHint narrow
 * nothing, and candidates carry no displayName. Every session is the one
 * agent's, "main".
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rpc_internal.h"

#define METHOD "sessions.resolve"
#define CANDIDATES_MAX 10 /* OpenClaw's bound on an ambiguous answer */

/* What a pending resolve asked the store (pd->view). */
enum { BY_KEY = 0, BY_OTHER_FORM, BY_SESSION_ID, BY_SHORT_ID };

#define AGENT_PREFIX "agent:" PC__GW_AGENT_ID ":"

const pc__gw_param_t pc__gw_sessions_resolve_spec[PC__GW_SESSIONS_RESOLVE_NPARAMS] = {
	{"key", PC__GW_T_NESTR, false},
	{"sessionId", PC__GW_T_NESTR, false},
	{"label", PC__GW_T_STRING, false},
	{"reference", PC__GW_T_OBJECT, false},
	{"shortId", PC__GW_T_NESTR, false},
	{"slugHint", PC__GW_T_NESTR, false},
	{"agentId", PC__GW_T_NESTR, false},
	{"spawnedBy", PC__GW_T_NESTR, false},
	{"includeGlobal", PC__GW_T_BOOL, false},
	{"includeUnknown", PC__GW_T_BOOL, false},
	{"allowMissing", PC__GW_T_BOOL, false},
};

static const pc__gw_param_t reference_spec[] = {
	{"key", PC__GW_T_NESTR, true},
	{"slug", PC__GW_T_NESTR, false},
};

static cJSON *found(const char *key)
{
	cJSON *p = cJSON_CreateObject();
	cJSON_AddTrueToObject(p, "ok");
	cJSON_AddStringToObject(p, "key", key);
	cJSON_AddStringToObject(p, "agentId", PC__GW_AGENT_ID);
	return p;
}

/* Nothing matched `what` (`prefix` names the kind of selector). */
static void not_found(pc__gw_conn_t *c, const char *id, const cJSON *params, const char *prefix, const char *what)
{
	if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(params, "allowMissing"))) {
		cJSON *p = cJSON_CreateObject();
		cJSON_AddFalseToObject(p, "ok");
		pc__gw_reply_ok(c, id, p);
		return;
	}
	size_t cap = strlen(prefix) + strlen(what) + 1;
	char *msg = malloc(cap);
	if (!msg) {
		pc__gw_reply_error(c, id, "UNAVAILABLE", "out of memory", NULL, NULL, true);
		return;
	}
	snprintf(msg, cap, "%s%s", prefix, what);
	pc__gw_reply_error(c, id, "INVALID_REQUEST", msg, NULL, NULL, false);
	free(msg);
}

/* OpenClaw's short id: 8 to 32 hexadecimal digits, lowercased into out. */
static bool short_id(const char *s, char out[33])
{
	size_t n = strlen(s);
	if (n < 8 || n > 32)
		return false;
	for (size_t i = 0; i < n; i++) {
		if (!isxdigit((unsigned char)s[i]))
			return false;
		out[i] = (char)tolower((unsigned char)s[i]);
	}
	out[n] = '\0';
	return true;
}

/* True when `key` ends in a UUID (8-4-4-4-12 hexadecimal digits) whose
 * digits, lowercased, begin with `prefix`. */
static bool uuid_starts_with(const char *key, const char *prefix)
{
	static const int groups[5] = {8, 4, 4, 4, 12};
	size_t n = strlen(key);
	if (n < 36)
		return false;
	const char *u = key + n - 36;
	char digits[33];
	size_t d = 0;
	for (int g = 0; g < 5; g++) {
		for (int i = 0; i < groups[g]; i++, u++) {
			if (!isxdigit((unsigned char)*u))
				return false;
			digits[d++] = (char)tolower((unsigned char)*u);
		}
		if (g < 4 && *u++ != '-')
			return false;
	}
	digits[d] = '\0';
	return !strncmp(digits, prefix, strlen(prefix));
}

/* The one selector params has, or NULL after answering why not. */
static const char *selector(pc__gw_conn_t *c, const char *id, const cJSON *params)
{
	static const char *const names[] = {"key", "sessionId", "label", "shortId", "reference"};
	const char *which = NULL;
	int count = 0;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		const cJSON *v = cJSON_GetObjectItemCaseSensitive(params, names[i]);
		if (v && (!cJSON_IsString(v) || *v->valuestring)) {
			which = names[i];
			count++;
		}
	}
	const char *why = NULL;
	if (pc__gw_str(params, "slugHint") && !pc__gw_str(params, "shortId"))
		why = "slugHint requires shortId";
	else if (count > 1)
		why = "Provide either key, sessionId, label, shortId, or reference (not multiple)";
	else if (count == 0)
		why = "Either key, sessionId, label, shortId, or reference is required";
	if (why) {
		pc__gw_reply_error(c, id, "INVALID_REQUEST", why, NULL, NULL, false);
		return NULL;
	}
	return which;
}

/* The key asked, by key or by reference. */
static const char *key_asked(const cJSON *params)
{
	const char *key = pc__gw_str(params, "key");
	return key ? key : pc__gw_str(cJSON_GetObjectItemCaseSensitive(params, "reference"), "key");
}

/* Asks the store for what `view` needs; answers when it cannot. */
static void ask(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *id, const cJSON *params, int view, const char *what)
{
	if (pc__gw_inflight_full(c, id))
		return;
	pc_msg_t *req = NULL;
	pc__gw_pend_t *pd = pc__gw_pend_new(c, PC__GW_P_RESOLVE, id);
	int rc = PC_ENOMEM;
	if (pd && (pd->key = strdup(what)) && (pd->params = cJSON_Duplicate(params, true))) {
		pd->view = view;
		pc_store_sessions_query_t q = {.limit = PC_STORE_SESSIONS_MAX, .order = PC_STORE_SESSIONS_UPDATED};
		if (view == BY_SESSION_ID) {
			q.limit = 1;
			q.id = what;
		}
		bool by_key = view == BY_KEY || view == BY_OTHER_FORM;
		rc = pc__gw_ask_store(ctx, c, pd, by_key ? pc_store_req_history(what, &req) : pc_store_req_sessions(&q, &req),
				      &req);
	} else if (pd) {
		pc__gw_pend_free(c, pd);
	}
	/* a key or id the store cannot hold names no session */
	if (rc == PC_EINVAL)
		not_found(c, id, params, "No session found: ", view == BY_OTHER_FORM ? key_asked(params) : what);
	else if (rc != 0)
		pc__gw_read_refused(c, id, METHOD, rc, NULL);
}

void pc__gw_m_sessions_resolve(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *id, const cJSON *params)
{
	const char *agent = pc__gw_str(params, "agentId");
	if (agent && strcmp(agent, PC__GW_AGENT_ID) != 0) {
		pc__gw_invalid(c, id, METHOD, "agentId: unknown agent (this gateway serves \"main\")");
		return;
	}
	const char *which = selector(c, id, params);
	if (!which)
		return;
	if (!strcmp(which, "key")) {
		ask(ctx, c, id, params, BY_KEY, pc__gw_str(params, "key"));
	} else if (!strcmp(which, "reference")) {
		const cJSON *ref = cJSON_GetObjectItemCaseSensitive(params, "reference");
		char err[160];
		if (!pc__gw_check_params(ref, reference_spec, sizeof(reference_spec) / sizeof(reference_spec[0]), true,
					 err, sizeof(err))) {
			char why[192];
			snprintf(why, sizeof(why), "reference.%s", err);
			pc__gw_invalid(c, id, METHOD, why);
			return;
		}
		ask(ctx, c, id, params, BY_KEY, pc__gw_str(ref, "key"));
	} else if (!strcmp(which, "sessionId")) {
		ask(ctx, c, id, params, BY_SESSION_ID, pc__gw_str(params, "sessionId"));
	} else if (!strcmp(which, "shortId")) {
		char sid[33];
		if (!short_id(pc__gw_str(params, "shortId"), sid))
			pc__gw_reply_error(c, id, "INVALID_REQUEST", "shortId must be 8-32 hexadecimal characters", NULL,
					   NULL, false);
		else
			ask(ctx, c, id, params, BY_SHORT_ID, sid);
	} else {
		not_found(c, id, params, "No session found with label: ", pc__gw_str(params, "label"));
	}
}

/* `key`'s other form into out ("agent:main:x" for "x" and back); false
 * when it has none (another agent's). */
static bool other_form(const char *key, char *out, size_t cap)
{
	size_t n = sizeof(AGENT_PREFIX) - 1;
	int len;
	if (!strncmp(key, AGENT_PREFIX, n))
		len = snprintf(out, cap, "%s", key + n);
	else if (!strncmp(key, "agent:", 6))
		return false;
	else
		len = snprintf(out, cap, AGENT_PREFIX "%s", key);
	return len > 0 && (size_t)len < cap;
}

bool pc__gw_on_resolve_history(pc_ctx_t *ctx, pc__gw_conn_t *c, const pc_msg_t *msg)
{
	pc__gw_pend_t *pd = pc__gw_pend_find(c, PC__GW_P_RESOLVE, msg->corr);
	if (!pd)
		return false;
	pc_store_history_t *h = NULL;
	int rc = pc_store_history_take(msg, &h);
	pc_store_history_free(h);
	if (rc != 0 && rc != PC_ENOTFOUND) {
		pc__gw_pend_store_failed(c, pd, "the session cannot be looked up", rc);
		return true;
	}
	char other[PC_STORE_NAME_MAX + 1];
	if (rc == 0) {
		pc__gw_reply_ok(c, pd->req_id, found(pd->key));
	} else if (pd->view == BY_KEY && other_form(pd->key, other, sizeof(other))) {
		/* the request goes on as a read of the other form: pd's place in
		 * the in-flight budget passes to it */
		cJSON *params = pd->params;
		char *req_id = pd->req_id;
		pd->params = NULL;
		pd->req_id = NULL;
		pc__gw_pend_free(c, pd);
		ask(ctx, c, req_id, params, BY_OTHER_FORM, other);
		cJSON_Delete(params);
		free(req_id);
		return true;
	} else {
		not_found(c, pd->req_id, pd->params, "No session found: ", key_asked(pd->params));
	}
	pc__gw_pend_free(c, pd);
	return true;
}

/* The sessions of l whose key's UUID begins with `prefix`: one is found,
 * more are candidates. */
static void answer_short(pc__gw_conn_t *c, pc__gw_pend_t *pd, const pc_store_sessions_t *l)
{
	cJSON *cands = cJSON_CreateArray();
	const char *first = NULL;
	int n = 0;
	for (size_t i = 0; i < pc_store_sessions_count(l); i++) {
		pc_store_session_entry_t e;
		pc_store_sessions_get(l, i, &e);
		if (!uuid_starts_with(e.key, pd->key))
			continue;
		if (n++ == 0)
			first = e.key;
		if (n <= CANDIDATES_MAX) {
			cJSON *o = cJSON_CreateObject();
			cJSON_AddStringToObject(o, "key", e.key);
			cJSON_AddStringToObject(o, "agentId", PC__GW_AGENT_ID);
			cJSON_AddItemToArray(cands, o);
		}
	}
	if (n == 1) {
		pc__gw_reply_ok(c, pd->req_id, found(first));
		cJSON_Delete(cands);
	} else if (n > 1) {
		cJSON *p = cJSON_CreateObject();
		cJSON_AddFalseToObject(p, "ok");
		cJSON_AddItemToObject(p, "candidates", cands);
		pc__gw_reply_ok(c, pd->req_id, p);
	} else {
		cJSON_Delete(cands);
		not_found(c, pd->req_id, pd->params, "No session found: ", pd->key);
	}
}

bool pc__gw_on_resolve_sessions(pc__gw_conn_t *c, const pc_msg_t *msg)
{
	pc__gw_pend_t *pd = pc__gw_pend_find(c, PC__GW_P_RESOLVE, msg->corr);
	if (!pd)
		return false;
	pc_store_sessions_t *l = NULL;
	int rc = pc_store_sessions_take(msg, &l);
	if (rc != 0) {
		pc__gw_pend_store_failed(c, pd, "the sessions cannot be read", rc);
		return true;
	}
	if (pd->view == BY_SHORT_ID) {
		answer_short(c, pd, l);
	} else if (pc_store_sessions_count(l) > 0) {
		pc_store_session_entry_t e;
		pc_store_sessions_get(l, 0, &e);
		pc__gw_reply_ok(c, pd->req_id, found(e.key));
	} else {
		not_found(c, pd->req_id, pd->params, "No session found: ", pd->key);
	}
	pc_store_sessions_free(l);
	pc__gw_pend_free(c, pd);
	return true;
}
