/*
 * `agent` with a sessionId and no sessionKey, as OpenClaw takes it (its
 * CLI's `agent --session-id`, a client resuming a session it listed): the
 * run goes to the session whose id that is, looked up in the store
 * (whichever process made it); when no session has that id, to a session
 * of its own named as OpenClaw names one, "agent:main:explicit:<id>", so
 * that the next request with the same id finds the same conversation.
 * OpenClaw would also give that new session the id asked for; Pincer's
 * store gives it one of its own (sessions.list shows it), and the key
 * keeps the two requests together all the same.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rpc_internal.h"

#define EXPLICIT_PREFIX "agent:" PC__GW_AGENT_ID ":explicit:"

void pc__gw_agent_by_session_id(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *id, const cJSON *params)
{
	const char *sid = pc__gw_str(params, "sessionId");
	if (strlen(sid) + sizeof(EXPLICIT_PREFIX) - 1 > PC_STORE_NAME_MAX) {
		pc__gw_invalid(c, id, "agent", "sessionId: is too long");
		return;
	}
	if (c->runs.n + c->pend.n >= PC__GW_INFLIGHT_MAX) {
		pc__gw_reply_error(c, id, "UNAVAILABLE", "too many requests in flight on this connection", NULL, NULL,
				   true);
		return;
	}
	pc_store_sessions_query_t q = {.limit = 1, .id = sid};
	pc_msg_t *req = NULL;
	pc__gw_pend_t *pd = pc__gw_pend_new(c, PC__GW_P_SESSID, id);
	int rc = pd && (pd->params = cJSON_Duplicate(params, true)) ? pc_store_req_sessions(&q, &req) : PC_ENOMEM;
	if (rc == 0)
		rc = pc_ask(ctx, pc_store_actor(pc_agent_store(c->g->agent)), req, &pd->corr);
	else
		pc_msg_free(req);
	if (rc != 0) {
		if (pd)
			pc__gw_pend_free(c, pd);
		pc__gw_reply_error(c, id, "UNAVAILABLE", "the store cannot be read now", NULL, NULL, true);
	}
}

bool pc__gw_on_session_id(pc__gw_conn_t *c, const pc_msg_t *msg)
{
	pc__gw_pend_t *pd = pc__gw_pend_find(c, PC__GW_P_SESSID, msg->corr);
	if (!pd)
		return false;
	pc_store_sessions_t *l = NULL;
	int rc = pc_store_sessions_take(msg, &l);
	if (rc != 0) {
		pc__gw_pend_store_failed(c, pd, "the session cannot be looked up", rc);
		return true;
	}
	char key[PC_STORE_NAME_MAX + 1];
	pc_store_session_entry_t e;
	if (pc_store_sessions_count(l) > 0) {
		pc_store_sessions_get(l, 0, &e);
		snprintf(key, sizeof(key), "%s", e.key);
	} else {
		snprintf(key, sizeof(key), EXPLICIT_PREFIX "%s", pc__gw_str(pd->params, "sessionId"));
	}
	pc_store_sessions_free(l);
	/* pd goes first: the submit counts in the same in-flight budget */
	cJSON *params = pd->params;
	char *req_id = pd->req_id;
	pd->params = NULL;
	pd->req_id = NULL;
	pc__gw_pend_free(c, pd);
	pc__gw_agent_submit(c, req_id, params, key);
	cJSON_Delete(params);
	free(req_id);
	return true;
}
