/*
 * The methods (§8.3–§8.5) and the answers to the work they started:
 * submit answers, store reads, timers; the runs a connection follows are
 * rpc_runs.c's. Nothing here blocks: every wait is a message
 * (pc_agent_watch, a timer, an ask to the store).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "runtime/clock.h"
#include "runtime/version.h"
#include "io/io.h"
#include "rpc_internal.h"


/* ---- lists ---- */

void pc__gw_list_add(pc__gw_list_t *l, pc__gw_node_t *n)
{
	n->prev = NULL;
	n->next = l->head;
	if (l->head)
		l->head->prev = n;
	l->head = n;
	l->n++;
}

void pc__gw_list_remove(pc__gw_list_t *l, pc__gw_node_t *n)
{
	if (n->prev)
		n->prev->next = n->next;
	else
		l->head = n->next;
	if (n->next)
		n->next->prev = n->prev;
	n->prev = n->next = NULL;
	l->n--;
}

/* ---- small helpers ---- */

static bool draining(const pc__gw_conn_t *c) { return pc__gw_state(c->g) >= PC__GW_DRAINING; }

static void unavailable(pc__gw_conn_t *c, const char *id, const char *message, bool retryable)
{
	pc__gw_reply_error(c, id, "UNAVAILABLE", message, NULL, NULL, retryable);
}

/* UNAVAILABLE with the wait the gateway expects before a retry can work. */
static void unavailable_for(pc__gw_conn_t *c, const char *id, const char *message, uint64_t retry_after_ms)
{
	pc__gw_reply_error_after(c, id, "UNAVAILABLE", message, NULL, NULL, true, retry_after_ms);
}

/* A text message of `type` carrying a u64, for timers. */
pc_msg_t *pc__gw_u64_msg(uint32_t type, uint64_t v)
{
	pc_msg_t *m = pc_msg_new(type, sizeof(v));
	if (m)
		memcpy(pc_msg_data(m), &v, sizeof(v));
	return m;
}

bool pc__gw_inflight_full(pc__gw_conn_t *c, const char *id)
{
	if (c->runs.n + c->pend.n < PC__GW_INFLIGHT_MAX)
		return false;
	unavailable(c, id, "too many requests in flight on this connection", true);
	return true;
}

/* ---- submitting (agent, chat.send) ---- */

static void submit_refused(pc__gw_conn_t *c, const char *id, const char *method, int rc)
{
	char msg[200];
	if (rc == PC_EINVAL) {
		pc__gw_invalid(c, id, method, "sessionKey or idempotencyKey is not valid (at most 255 bytes, no control characters)");
	} else if (rc == PC_ESTOPPED) {
		unavailable_for(c, id, "the agent is shutting down", pc__gw_retry_after_ms(c->g));
	} else if (rc == PC_EEXIST) {
		pc__gw_invalid(c, id, method, "idempotencyKey: already used with different parameters");
	} else {
		snprintf(msg, sizeof(msg), "the message could not be accepted: %s", pc_store_strerror(rc));
		unavailable(c, id, msg, true);
	}
}

/* Accepts a run for `kind`; the answers come with the submit's reply
 * (`create`: answered as sessions.create). */
static void submit(pc__gw_conn_t *c, const char *id, const char *method, int kind, const pc_agent_params_t *p,
		   bool create)
{
	if (draining(c)) {
		unavailable_for(c, id, "the gateway is shutting down: no new runs", pc__gw_retry_after_ms(c->g));
		return;
	}
	if (pc__gw_inflight_full(c, id))
		return;
	const char *key = p->session_key && *p->session_key ? p->session_key : "main";
	pc__gw_ssub_t *s = NULL;
	int rc = pc__gw_ssub_get(c, key, &s);
	pc__gw_pend_t *pd = rc == 0 ? pc__gw_pend_new(c, PC__GW_P_SUBMIT, id) : NULL;
	if (rc == 0 && !pd)
		rc = PC_ENOMEM;
	if (pd) {
		pd->run_kind = kind;
		pd->view = create;
		pd->corr = ++c->next_tag;
		pd->ssub = s;
		pd->key = strdup(key);
		rc = pd->key ? pc_agent_submit_async(c->g->agent, p, c->self, pd->corr) : PC_ENOMEM;
	}
	if (rc != 0) {
		if (pd)
			pc__gw_pend_free(c, pd);
		if (s && s->refs == 0) {
			pc__gw_list_remove(&c->ssubs, &s->node);
			pc__gw_ssub_free(c, s);
		}
		submit_refused(c, id, method, rc);
		return;
	}
	s->refs++;
	s->pending++;
}

static cJSON *accepted_payload(int kind, const pc_agent_accepted_t *a, const char *chat_status)
{
	cJSON *p = cJSON_CreateObject();
	cJSON_AddStringToObject(p, "runId", a->run_id);
	if (kind == PC__GW_RUN_CHAT) {
		cJSON_AddStringToObject(p, "status", chat_status);
	} else {
		cJSON_AddStringToObject(p, "status", "accepted");
		cJSON_AddNumberToObject(p, "acceptedAt", (double)a->accepted_ms);
	}
	return p;
}

/* sessions.create's answer: the session `key` and its first run, as
 * chat.send's answer (`started`: a new run, not a repeat's). */
static cJSON *created_payload(const char *key, const pc_agent_accepted_t *a, bool started, const char *status)
{
	cJSON *p = accepted_payload(PC__GW_RUN_CHAT, a, status);
	cJSON_AddTrueToObject(p, "ok");
	cJSON_AddStringToObject(p, "key", key);
	cJSON *entry = cJSON_AddObjectToObject(p, "entry");
	cJSON_AddNumberToObject(entry, "updatedAt", (double)a->accepted_ms);
	cJSON_AddBoolToObject(p, "runStarted", started);
	return p;
}

/* A repeated chat.send: where the first run is. */
static const char *chat_repeat_status(pc__gw_conn_t *c, const char *run_id)
{
	pc_run_info_t info;
	if (pc_agent_run_info(c->g->agent, run_id, &info) != 0 || !pc_run_status_terminal(info.status))
		return "in_flight";
	return info.status == PC_RUN_STATUS_OK ? "ok" : "error";
}

static void ask_run_get(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *req_id, const char *run_id, uint64_t run_tag,
			uint64_t wait_ms);

/* A repeat of an agent request: the first run's answers, final included. */
static void agent_repeat(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *req_id, const pc_agent_accepted_t *a)
{
	pc__gw_run_t *r = pc__gw_run_new(c, PC__GW_RUN_AGENT, a->run_id, req_id);
	if (!r) {
		unavailable(c, req_id, "out of memory", true);
		return;
	}
	r->dup = true;
	pc__gw_reply_ok(c, req_id, accepted_payload(PC__GW_RUN_AGENT, a, NULL));
	int rc = pc_agent_watch(c->g->agent, a->run_id, c->self, r->tag);
	if (rc == PC_ENOTFOUND) {
		/* Swept from memory: the store still knows how it ended. */
		ask_run_get(ctx, c, NULL, a->run_id, r->tag, 0);
	} else if (rc != 0) {
		pc__gw_agent_final(c, r->req_id, r->run_id, NULL, "error", "the run cannot be watched");
		pc__gw_run_free(c, r);
	}
}

void pc__gw_on_accepted(pc_ctx_t *ctx, pc__gw_conn_t *c, const pc_msg_t *msg)
{
	pc__gw_pend_t *pd = pc__gw_pend_find(c, PC__GW_P_SUBMIT, msg->corr);
	if (!pd)
		return;
	const pc_agent_submit_reply_t *rep = pc_msg_cdata(msg);
	pc__gw_ssub_t *s = pd->ssub;
	const pc_agent_accepted_t *a = &rep->accepted;
	s->pending--;
	const char *id = pd->req_id;
	int kind = pd->run_kind;
	const char *method = pd->view ? "sessions.create" : kind == PC__GW_RUN_CHAT ? "chat.send" : "agent";
	if (rep->rc != 0) {
		submit_refused(c, id, method, rep->rc);
	} else if (a->disposition == PC_AGENT_DROPPED) {
		unavailable_for(c, id, "the session's queue refused the message (queue full or busy)",
				pc_agent_retry_estimate_ms(c->g->agent, s->key));
	} else if (a->disposition == PC_AGENT_DUPLICATE && pd->view) {
		pc__gw_reply_ok(c, id, created_payload(pd->key, a, false, chat_repeat_status(c, a->run_id)));
	} else if (a->disposition == PC_AGENT_DUPLICATE && kind == PC__GW_RUN_CHAT) {
		pc__gw_reply_ok(c, id, accepted_payload(kind, a, chat_repeat_status(c, a->run_id)));
	} else if (a->disposition == PC_AGENT_DUPLICATE) {
		agent_repeat(ctx, c, id, a);
	} else {
		pc__gw_run_t *r = pc__gw_run_new(c, kind, a->run_id, kind == PC__GW_RUN_AGENT ? id : NULL);
		if (r) {
			r->ssub = s;
			s->refs++;
			pc__gw_reply_ok(c, id, pd->view ? created_payload(pd->key, a, true, "started")
							  : accepted_payload(kind, a, "started"));
			pc__gw_replay_held(c, s, r);
		} else {
			unavailable(c, id, "out of memory", true);
		}
	}
	pc__gw_pend_free(c, pd);
	pc__gw_ssub_put(c, s); /* the submit's use */
}

/* ---- store reads ---- */

int pc__gw_ask_store(pc_ctx_t *ctx, pc__gw_conn_t *c, pc__gw_pend_t *pd, int built, pc_msg_t **req)
{
	int rc = built;
	if (rc == 0)
		rc = pc_ask(ctx, pc_store_actor(pc_agent_store(c->g->agent)), *req, &pd->corr);
	else
		pc_msg_free(*req);
	if (rc != 0)
		pc__gw_pend_free(c, pd);
	return rc;
}

static void ask_run_get(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *req_id, const char *run_id, uint64_t run_tag,
			uint64_t wait_ms)
{
	pc_msg_t *req = NULL;
	pc__gw_pend_t *pd = pc__gw_pend_new(c, PC__GW_P_RUNGET, req_id);
	int rc = PC_ENOMEM;
	if (pd) {
		pd->run_tag = run_tag;
		pd->wait_ms = wait_ms;
		snprintf(pd->run_id, sizeof(pd->run_id), "%s", run_id);
		rc = pc__gw_ask_store(ctx, c, pd, pc_store_req_run_get(run_id, &req), &req);
	}
	if (rc == 0)
		return;
	pc__gw_run_t *r = run_tag ? pc__gw_run_by_tag(c, run_tag) : NULL;
	if (r) {
		pc__gw_agent_final(c, r->req_id, r->run_id, NULL, "error", "the run's outcome cannot be read");
		pc__gw_run_free(c, r);
	} else if (rc == PC_EINVAL) {
		pc__gw_invalid(c, req_id, "agent.wait", "runId: is not a run id");
	} else {
		unavailable(c, req_id, "the store cannot be read now", true);
	}
}

/* How long a repeated agent follows a run another process holds. */
#define STORED_RUN_FOLLOW_MS ((uint64_t)3600 * 1000)

/* Run read pd names is another process's and has not ended: its repeated
 * agent, or the agent.wait asking, waits for the store to say it ended.
 * False when that cannot be set up (pd is then still to be answered). */
static bool follow_stored(pc__gw_conn_t *c, pc__gw_pend_t *pd, pc__gw_run_t *run)
{
	pc_agent_t *a = c->g->agent;
	if (run) {
		if (pc_agent_watch_stored(a, run->run_id, c->self, run->tag, STORED_RUN_FOLLOW_MS) != 0)
			return false;
		pc__gw_pend_free(c, pd);
		return true;
	}
	if (!pd->req_id)
		return false;
	/* it becomes a wait like one on a run of this process */
	uint64_t tag = ++c->next_tag;
	pc_msg_t *m = pc__gw_u64_msg(PC__GW_MSG_WAIT_TIMEOUT, tag);
	if (!m || pc_timer_after(c->self, pd->wait_ms, m, &pd->timer) != 0)
		return false;
	pd->kind = PC__GW_P_WAIT;
	pd->corr = tag;
	if (pc_agent_watch_stored(a, pd->run_id, c->self, tag, pd->wait_ms) != 0) {
		pc_timer_cancel(c->g->rt, pd->timer);
		pd->timer = 0;
		return false;
	}
	return true;
}

void pc__gw_on_store_reply(pc__gw_conn_t *c, const pc_msg_t *msg)
{
	pc__gw_pend_t *pd = pc__gw_pend_find(c, PC__GW_P_RUNGET, msg->corr);
	if (!pd)
		return;
	pc_store_reply_t r;
	int rc = pc_store_reply_get(msg, &r);
	if (rc == 0)
		rc = r.rc;
	pc__gw_run_t *run = pd->run_tag ? pc__gw_run_by_tag(c, pd->run_tag) : NULL;
	pc_run_info_t info;
	if (rc == 0)
		pc_agent_run_info_from_store(&r, &info);
	/* another process runs it: its end comes from the store */
	if (rc == 0 && !pc_run_status_terminal(info.status) && follow_stored(c, pd, run))
		return;
	if (run) {
		pc__gw_agent_final(c, run->req_id, run->run_id, NULL, rc == 0 ? pc_run_status_name(info.status) : "error",
			    rc == 0 ? info.error : "the run's outcome is no longer known");
		pc__gw_run_free(c, run);
	} else if (pd->req_id && rc == PC_ENOTFOUND) {
		char why[PC_RUN_ID_MAX + 32];
		snprintf(why, sizeof(why), "runId: unknown run '%s'", pd->run_id);
		pc__gw_invalid(c, pd->req_id, "agent.wait", why);
	} else if (pd->req_id && rc != 0) {
		unavailable(c, pd->req_id, pc_store_strerror(rc), true);
	} else if (pd->req_id) {
		pc__gw_wait_answer(c, pd, &info); /* frees pd */
		return;
	}
	pc__gw_pend_free(c, pd);
}

/* ---- the methods ---- */

/* "provider/model" from model and provider (either may be absent). */
static int model_ref(const cJSON *params, char *out, size_t cap)
{
	const char *model = pc__gw_str(params, "model");
	const char *provider = pc__gw_str(params, "provider");
	out[0] = '\0';
	if (model && *model && provider && *provider && !strchr(model, '/'))
		snprintf(out, cap, "%s/%s", provider, model);
	else if (model && *model)
		snprintf(out, cap, "%s", model);
	else if (provider && *provider)
		return PC_EINVAL;
	return 0;
}

static bool one_of(const char *v, const char *const *allowed)
{
	for (; *allowed; allowed++)
		if (!strcmp(v, *allowed))
			return true;
	return false;
}

/* What this gateway cannot do with agent params it accepts by name. */
/* The `thinking` param's complaint, or NULL when absent or a level. */
static const char *thinking_invalid(const cJSON *params)
{
	const char *t = pc__gw_str(params, "thinking");
	pc_think_level_t level;
	if (t && pc_think_level_parse(t, &level) != 0)
		return "thinking: must be one of off, minimal, low, medium, high, xhigh, adaptive, max";
	return NULL;
}

static const char *agent_unsupported(const cJSON *params)
{
	static const char *const modes[] = {"full", "lightweight", NULL};
	static const char *const kinds[] = {"default", "heartbeat", "cron", NULL};
	const char *agent = pc__gw_str(params, "agentId");
	const char *mode = pc__gw_str(params, "bootstrapContextMode");
	const char *kind = pc__gw_str(params, "bootstrapContextRunKind");
	if (agent && *agent && strcmp(agent, "main") != 0)
		return "agentId: unknown agent (this gateway serves \"main\")";
	if (mode && !one_of(mode, modes))
		return "bootstrapContextMode: must be one of full, lightweight";
	if (kind && !one_of(kind, kinds))
		return "bootstrapContextRunKind: must be one of default, heartbeat, cron";
	if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(params, "deliver")) &&
	    !cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(params, "bestEffortDeliver")))
		return "deliver: delivery channel is required, and this gateway has no messaging channels "
		       "(pass bestEffortDeliver for a session-only run)";
	if (cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(params, "attachments")) > 0)
		return "attachments: are not supported";
	return thinking_invalid(params);
}

static const pc__gw_param_t agent_spec[] = {
	{"message", PC__GW_T_NESTR, true},
	{"idempotencyKey", PC__GW_T_NESTR, true},
	{"agentId", PC__GW_T_STRING, false},
	{"provider", PC__GW_T_STRING, false},
	{"model", PC__GW_T_STRING, false},
	{"to", PC__GW_T_STRING, false},
	{"replyTo", PC__GW_T_STRING, false},
	{"sessionId", PC__GW_T_STRING, false},
	{"sessionKey", PC__GW_T_STRING, false},
	{"thinking", PC__GW_T_STRING, false},
	{"deliver", PC__GW_T_BOOL, false},
	{"attachments", PC__GW_T_ARRAY, false},
	{"channel", PC__GW_T_STRING, false},
	{"replyChannel", PC__GW_T_STRING, false},
	{"accountId", PC__GW_T_STRING, false},
	{"replyAccountId", PC__GW_T_STRING, false},
	{"threadId", PC__GW_T_ANY, false},
	{"groupId", PC__GW_T_STRING, false},
	{"groupChannel", PC__GW_T_STRING, false},
	{"groupSpace", PC__GW_T_STRING, false},
	{"timeout", PC__GW_T_UINT, false},
	{"bestEffortDeliver", PC__GW_T_BOOL, false},
	{"lane", PC__GW_T_STRING, false},
	{"extraSystemPrompt", PC__GW_T_STRING, false},
	{"bootstrapContextMode", PC__GW_T_STRING, false},
	{"bootstrapContextRunKind", PC__GW_T_STRING, false},
	{"internalEvents", PC__GW_T_ARRAY, false},
	{"inputProvenance", PC__GW_T_ANY, false},
	{"label", PC__GW_T_STRING, false},
};

static void m_agent(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *id, const cJSON *params)
{
	char model[512];
	const char *why = agent_unsupported(params);
	if (!why && model_ref(params, model, sizeof(model)) != 0)
		why = "provider: goes with model";
	if (why) {
		pc__gw_invalid(c, id, "agent", why);
		return;
	}
	const char *key = pc__gw_str(params, "sessionKey");
	const char *sid = pc__gw_str(params, "sessionId");
	if ((!key || !*key) && sid && *sid)
		pc__gw_agent_by_session_id(ctx, c, id, params); /* the session first (rpc_session_id.c) */
	else
		pc__gw_agent_submit(c, id, params, key);
}

void pc__gw_agent_submit(pc__gw_conn_t *c, const char *id, const cJSON *params, const char *key)
{
	char model[512];
	(void)model_ref(params, model, sizeof(model)); /* m_agent checked it */
	const char *kind = pc__gw_str(params, "bootstrapContextRunKind");
	double timeout_s = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(params, "timeout"));
	const char *extra = pc__gw_str(params, "extraSystemPrompt");
	const char *idem = pc__gw_str(params, "idempotencyKey");
	pc_agent_params_t p = {
		.session_key = key,
		.message = pc__gw_str(params, "message"),
		.idempotency_key = idem,
		/* §8.3: the run is named by its key (a key that cannot be a run
		 * id, too long or with spaces, gets a generated one) */
		.run_id = idem && pc_agent_run_id_ok(idem) ? idem : NULL,
		.model = model[0] ? model : NULL,
		.trigger = kind && strcmp(kind, "default") ? kind : NULL,
		.extra_system_prompt = extra && *extra ? extra : NULL,
		.thinking = pc__gw_str(params, "thinking"),
		/* seconds; 0 (or absent) is the configured run timeout */
		.timeout_ms = timeout_s > 0 ? (uint64_t)(timeout_s * 1000.0) : 0,
	};
	submit(c, id, "agent", PC__GW_RUN_AGENT, &p, false);
}

static const pc__gw_param_t chat_send_spec[] = {
	{"sessionKey", PC__GW_T_NESTR, true},
	{"message", PC__GW_T_NESTR, true},
	{"idempotencyKey", PC__GW_T_NESTR, true},
	{"thinking", PC__GW_T_STRING, false},
	{"deliver", PC__GW_T_BOOL, false},
	{"attachments", PC__GW_T_ARRAY, false},
	{"timeoutMs", PC__GW_T_UINT, false},
	{"originatingChannel", PC__GW_T_STRING, false},
	{"originatingTo", PC__GW_T_STRING, false},
	{"originatingAccountId", PC__GW_T_STRING, false},
	{"originatingThreadId", PC__GW_T_ANY, false},
	{"systemInputProvenance", PC__GW_T_ANY, false},
	{"systemProvenanceReceipt", PC__GW_T_ANY, false},
	/* accepted as OpenClaw's schema accepts them; what they steer (fast
	 * mode, mentions, work context, tool bindings, the expected* guards
	 * of a branching UI) has no counterpart here */
	{"agentId", PC__GW_T_NESTR, false},
	{"sessionId", PC__GW_T_NESTR, false},
	{"queueMode", PC__GW_T_STRING, false},
	{"mentions", PC__GW_T_ANY, false},
	{"workContext", PC__GW_T_OBJECT, false},
	{"intent", PC__GW_T_OBJECT, false},
	{"fastMode", PC__GW_T_ANY, false},
	{"fastAutoOnSeconds", PC__GW_T_UINT, false},
	{"replyToId", PC__GW_T_NESTR, false},
	{"toolBindings", PC__GW_T_ANY, false},
	{"suppressCommandInterpretation", PC__GW_T_BOOL, false},
	{"expectedLeafEntryId", PC__GW_T_ANY, false},
	{"expectedSessionRoutingContract", PC__GW_T_NESTR, false},
	{"expectedPermissionMode", PC__GW_T_ANY, false},
	{"expectedToolOverrides", PC__GW_T_ANY, false},
};

/* OpenClaw's queue modes, which are this loop's (§3). */
static bool queue_mode_valid(const char *m)
{
	return !m || !strcmp(m, "steer") || !strcmp(m, "followup") || !strcmp(m, "collect") ||
	       !strcmp(m, "interrupt");
}

static void m_chat_send(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *id, const cJSON *params)
{
	(void)ctx;
	const char *why = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(params, "attachments")) > 0
				  ? "attachments: are not supported"
				  : thinking_invalid(params);
	const char *queue_mode = pc__gw_str(params, "queueMode");
	if (!why && !queue_mode_valid(queue_mode))
		why = "queueMode: must be steer, followup, collect or interrupt";
	if (why) {
		pc__gw_invalid(c, id, "chat.send", why);
		return;
	}
	double timeout = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(params, "timeoutMs"));
	pc_agent_params_t p = {
		.session_key = pc__gw_str(params, "sessionKey"),
		.message = pc__gw_str(params, "message"),
		.idempotency_key = pc__gw_str(params, "idempotencyKey"),
		.thinking = pc__gw_str(params, "thinking"),
		.queue_mode = queue_mode,
		.timeout_ms = timeout > 0 ? (uint64_t)timeout : 0,
	};
	submit(c, id, "chat.send", PC__GW_RUN_CHAT, &p, false);
}

/* sessions.create: the params used; OpenClaw's others (presentation,
 * workspaces, tools, lineage) are accepted and change nothing. */
static const pc__gw_param_t sessions_create_spec[] = {
	{"key", PC__GW_T_NESTR, false},
	{"agentId", PC__GW_T_NESTR, false},
	{"message", PC__GW_T_STRING, false},
	{"idempotencyKey", PC__GW_T_NESTR, false},
	{"timeoutMs", PC__GW_T_UINT, false},
	{"attachments", PC__GW_T_ARRAY, false},
};

/* A session begins in Pincer's store with its first message, so the
 * session and that message's run are made together: the run is chat.send's
 * in a session keyed as OpenClaw keys one the Control UI makes
 * ("agent:main:dashboard:<uuid>") unless `key` names one. */
static void m_sessions_create(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *id, const cJSON *params)
{
	(void)ctx;
	const char *agent = pc__gw_str(params, "agentId");
	const char *message = pc__gw_str(params, "message");
	const char *why = NULL;
	if (agent && strcmp(agent, PC__GW_AGENT_ID) != 0)
		why = "agentId: unknown agent (this gateway serves \"main\")";
	else if (!message || !*message)
		why = "message: is required here (a session begins with its first message)";
	else if (cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(params, "attachments")) > 0)
		why = "attachments: are not supported";
	if (why) {
		pc__gw_invalid(c, id, "sessions.create", why);
		return;
	}
	char uuid[37], key[sizeof("agent:" PC__GW_AGENT_ID ":dashboard:") + 36], idem[37];
	pc__gw_uuid(uuid);
	snprintf(key, sizeof(key), "agent:" PC__GW_AGENT_ID ":dashboard:%s", uuid);
	pc__gw_uuid(idem);
	const char *k = pc__gw_str(params, "key");
	const char *i = pc__gw_str(params, "idempotencyKey");
	double timeout = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(params, "timeoutMs"));
	pc_agent_params_t p = {
		.session_key = k ? k : key,
		.message = message,
		.idempotency_key = i ? i : idem,
		.timeout_ms = timeout > 0 ? (uint64_t)timeout : 0,
	};
	submit(c, id, "sessions.create", PC__GW_RUN_CHAT, &p, true);
}

static const pc__gw_param_t agent_wait_spec[] = {
	{"runId", PC__GW_T_NESTR, true},
	{"timeoutMs", PC__GW_T_UINT, false},
};

static void m_agent_wait(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *id, const cJSON *params)
{
	const char *run_id = pc__gw_str(params, "runId");
	if (strlen(run_id) > PC_RUN_ID_MAX) {
		pc__gw_invalid(c, id, "agent.wait", "runId: is not a run id");
		return;
	}
	if (pc__gw_inflight_full(c, id))
		return;
	const cJSON *t = cJSON_GetObjectItemCaseSensitive(params, "timeoutMs");
	uint64_t timeout = t ? (uint64_t)t->valuedouble : (uint64_t)PC_AGENT_WAIT_DEFAULT_MS;
	pc__gw_pend_t *pd = pc__gw_pend_new(c, PC__GW_P_WAIT, id);
	if (!pd) {
		unavailable(c, id, "out of memory", true);
		return;
	}
	pd->corr = ++c->next_tag;
	snprintf(pd->run_id, sizeof(pd->run_id), "%s", run_id);
	int rc = pc_agent_watch(c->g->agent, run_id, c->self, pd->corr);
	if (rc == PC_ENOTFOUND) {
		/* Not in memory: perhaps an older run the store knows. */
		pc__gw_pend_free(c, pd);
		ask_run_get(ctx, c, id, run_id, 0, timeout);
		return;
	}
	pc_msg_t *m = rc == 0 ? pc__gw_u64_msg(PC__GW_MSG_WAIT_TIMEOUT, pd->corr) : NULL;
	if (rc == 0 && (!m || pc_timer_after(c->self, timeout, m, &pd->timer) != 0))
		rc = PC_ENOMEM;
	if (rc != 0) {
		pc__gw_pend_free(c, pd);
		unavailable(c, id, "the run cannot be watched now", true);
	}
}

/* Aborts run_id (when given) or whatever the session runs; the payload
 * says what was aborted. */
static void abort_in(pc__gw_conn_t *c, const char *id, const char *method, const char *key, const char *run_id)
{
	pc_agent_t *a = c->g->agent;
	char active[PC_RUN_ID_MAX + 1] = "";
	bool aborted = false;
	if (run_id) {
		pc_run_info_t info;
		if (strlen(run_id) <= PC_RUN_ID_MAX && pc_agent_run_info(a, run_id, &info) == 0) {
			if (strcmp(info.session_key, key) != 0) {
				pc__gw_invalid(c, id, method, "runId: the run belongs to another session");
				return;
			}
			aborted = pc_agent_abort_run(a, run_id) == 0;
			if (aborted)
				snprintf(active, sizeof(active), "%s", run_id);
		}
	} else {
		aborted = pc_agent_active_run(a, key, active) == 0;
		int rc = pc_agent_abort_session(a, key);
		if (rc == PC_EINVAL) {
			pc__gw_invalid(c, id, method, "sessionKey: is not a session key");
			return;
		}
		aborted = aborted && rc == 0;
	}
	cJSON *p = cJSON_CreateObject();
	cJSON_AddTrueToObject(p, "ok");
	cJSON_AddStringToObject(p, "sessionKey", key);
	cJSON_AddBoolToObject(p, "aborted", aborted);
	cJSON *ids = cJSON_AddArrayToObject(p, "runIds");
	if (aborted && active[0])
		cJSON_AddItemToArray(ids, cJSON_CreateString(active));
	pc__gw_reply_ok(c, id, p);
}

static const pc__gw_param_t chat_abort_spec[] = {
	{"sessionKey", PC__GW_T_NESTR, true},
	{"runId", PC__GW_T_NESTR, false},
	{"agentId", PC__GW_T_NESTR, false},
	{"preserveSideRuns", PC__GW_T_BOOL, false}, /* there are no side runs here */
};

static void m_chat_abort(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *id, const cJSON *params)
{
	(void)ctx;
	abort_in(c, id, "chat.abort", pc__gw_str(params, "sessionKey"), pc__gw_str(params, "runId"));
}

static const pc__gw_param_t sessions_abort_spec[] = {{"sessionKey", PC__GW_T_NESTR, true}};

static void m_sessions_abort(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *id, const cJSON *params)
{
	(void)ctx;
	abort_in(c, id, "sessions.abort", pc__gw_str(params, "sessionKey"), NULL);
}

void pc__gw_read_refused(pc__gw_conn_t *c, const char *id, const char *method, int rc, const char *einval)
{
	if (rc == PC_EINVAL)
		pc__gw_invalid(c, id, method, einval);
	else
		unavailable(c, id, "the store cannot be read now", true);
}

/* A read's `limit` (`def` when absent) into *limit; false, after
 * answering, when it is below `min` or c has no room for another read. */
static bool read_limit(pc__gw_conn_t *c, const char *id, const char *method, const cJSON *params, double def,
		       double min, double *limit)
{
	const cJSON *l = cJSON_GetObjectItemCaseSensitive(params, "limit");
	*limit = l ? l->valuedouble : def;
	if (*limit < min) {
		pc__gw_invalid(c, id, method, "limit: must be at least 1");
		return false;
	}
	return !pc__gw_inflight_full(c, id);
}

cJSON *pc__gw_session_row(pc_gateway_t *g, const pc_store_session_entry_t *e)
{
	cJSON *s = cJSON_CreateObject();
	char active[PC_RUN_ID_MAX + 1];
	cJSON_AddStringToObject(s, "key", e->key);
	cJSON_AddStringToObject(s, "sessionId", e->id);
	cJSON_AddNumberToObject(s, "createdAt", (double)e->created_ms);
	cJSON_AddNumberToObject(s, "updatedAt", (double)e->updated_ms);
	cJSON_AddNumberToObject(s, "lastSeq", (double)e->last_seq);
	cJSON_AddNumberToObject(s, "runs", (double)e->runs);
	if (e->last_run_id)
		cJSON_AddStringToObject(s, "lastRunId", e->last_run_id);
	if (pc_agent_active_run(g->agent, e->key, active) == 0)
		cJSON_AddStringToObject(s, "activeRunId", active);
	else if (g->cluster && e->open_run_id)
		cJSON_AddStringToObject(s, "activeRunId", e->open_run_id);
	return s;
}

/* The sessions.list payload of page l (NULL: an empty page). */
static cJSON *sessions_page(pc_gateway_t *g, const pc_store_sessions_t *l)
{
	size_t n = pc_store_sessions_count(l);
	cJSON *p = cJSON_CreateObject();
	cJSON_AddNumberToObject(p, "ts", (double)pc__clock_wall_ms());
	cJSON_AddNumberToObject(p, "count", (double)n);
	cJSON *defs = cJSON_AddObjectToObject(p, "defaults");
	cJSON_AddStringToObject(defs, "mainSessionKey", "main");
	cJSON *list = cJSON_AddArrayToObject(p, "sessions");
	pc_store_session_entry_t e = {0};
	for (size_t i = 0; i < n; i++) {
		pc_store_sessions_get(l, i, &e);
		cJSON_AddItemToArray(list, pc__gw_session_row(g, &e));
	}
	if (pc_store_sessions_more(l) && n > 0) {
		size_t cap = strlen(e.key) + 24;
		char *cursor = malloc(cap);
		if (cursor) {
			snprintf(cursor, cap, "%lld:%s", (long long)e.updated_ms, e.key);
			cJSON_AddStringToObject(p, "nextCursor", cursor);
		}
		free(cursor);
	}
	return p;
}

/* sessions.list's cursor: "<updatedAt>:<key>" of a page's last session. */
static int cursor_parse(const char *cursor, pc_store_sessions_query_t *q)
{
	char *end = NULL;
	long long ms = strtoll(cursor, &end, 10);
	if (end == cursor || *end != ':' || ms < 0)
		return PC_EINVAL;
	q->after_ms = ms;
	q->after_key = end + 1;
	return 0;
}

const pc__gw_param_t pc__gw_sessions_list_spec[PC__GW_SESSIONS_LIST_NPARAMS] = {
	{"limit", PC__GW_T_UINT, false},
	{"cursor", PC__GW_T_STRING, false},
};

/* A sessions.list answer, or with `subscribed` sessions.subscribe's:
 * {subscribed: true, list}. */
static cJSON *sessions_answer(pc_gateway_t *g, const pc_store_sessions_t *l, bool subscribed)
{
	cJSON *list = sessions_page(g, l);
	if (!subscribed)
		return list;
	cJSON *p = cJSON_CreateObject();
	cJSON_AddTrueToObject(p, "subscribed");
	cJSON_AddItemToObject(p, "list", list);
	return p;
}

void pc__gw_sessions_list(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *id, const char *method, const cJSON *params,
			  bool subscribed)
{
	double limit;
	if (!read_limit(c, id, method, params, PC_STORE_SESSIONS_MAX, 0, &limit))
		return;
	if (limit == 0) {
		pc__gw_reply_ok(c, id, sessions_answer(c->g, NULL, subscribed));
		return;
	}
	pc_store_sessions_query_t q = {
		.limit = limit > PC_STORE_SESSIONS_MAX ? PC_STORE_SESSIONS_MAX : (uint32_t)limit,
		.order = PC_STORE_SESSIONS_UPDATED,
	};
	const char *cursor = pc__gw_str(params, "cursor");
	if (cursor && cursor_parse(cursor, &q) != 0) {
		pc__gw_invalid(c, id, method, "cursor: is not one sessions.list gave");
		return;
	}
	pc_msg_t *req = NULL;
	pc__gw_pend_t *pd = pc__gw_pend_new(c, PC__GW_P_SESSIONS, id);
	if (pd)
		pd->view = subscribed;
	int rc = pd ? pc__gw_ask_store(ctx, c, pd, pc_store_req_sessions(&q, &req), &req) : PC_ENOMEM;
	if (rc != 0)
		pc__gw_read_refused(c, id, method, rc, "cursor: is not one sessions.list gave");
}

static void m_sessions_list(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *id, const cJSON *params)
{
	pc__gw_sessions_list(ctx, c, id, "sessions.list", params, false);
}

void pc__gw_on_sessions(pc__gw_conn_t *c, const pc_msg_t *msg)
{
	pc__gw_pend_t *pd = pc__gw_pend_find(c, PC__GW_P_SESSIONS, msg->corr);
	if (!pd) {
		if (!pc__gw_on_session_id(c, msg))
			(void)pc__gw_on_resolve_sessions(c, msg);
		return;
	}
	pc_store_sessions_t *l = NULL;
	int rc = pc_store_sessions_take(msg, &l);
	if (rc != 0) {
		pc__gw_pend_store_failed(c, pd, "the sessions cannot be read", rc);
		return;
	}
	pc__gw_reply_ok(c, pd->req_id, sessions_answer(c->g, l, pd->view));
	pc_store_sessions_free(l);
	pc__gw_pend_free(c, pd);
}

/* ---- usage.run ---- */

static const pc__gw_param_t usage_run_spec[] = {
	{"runId", PC__GW_T_NESTR, true},
};

/* A run's usage records as the store keeps them (one per model call that
 * reported usage) and their exact sums. */
static void m_usage_run(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *id, const cJSON *params)
{
	if (pc__gw_inflight_full(c, id))
		return;
	const char *run = pc__gw_str(params, "runId");
	if (strlen(run) > PC_RUN_ID_MAX) {
		pc__gw_invalid(c, id, "usage.run", "runId: is too long");
		return;
	}
	pc_msg_t *req = NULL;
	pc__gw_pend_t *pd = pc__gw_pend_new(c, PC__GW_P_USAGE, id);
	int rc = PC_ENOMEM;
	if (pd) {
		snprintf(pd->run_id, sizeof(pd->run_id), "%s", run);
		rc = pc__gw_ask_store(ctx, c, pd, pc_store_req_usage_list(run, NULL, &req), &req);
	}
	if (rc != 0)
		pc__gw_read_refused(c, id, "usage.run", rc, "runId: is too long");
}

static cJSON *usage_counts(const pc_store_usage_t *u)
{
	cJSON *o = cJSON_CreateObject();
	cJSON_AddNumberToObject(o, "input", (double)u->input);
	cJSON_AddNumberToObject(o, "output", (double)u->output);
	cJSON_AddNumberToObject(o, "cacheRead", (double)u->cache_read);
	cJSON_AddNumberToObject(o, "cacheWrite", (double)u->cache_write);
	cJSON_AddNumberToObject(o, "total", (double)u->total);
	return o;
}

void pc__gw_on_usage(pc__gw_conn_t *c, const pc_msg_t *msg)
{
	pc__gw_pend_t *pd = pc__gw_pend_find(c, PC__GW_P_USAGE, msg->corr);
	if (!pd) {
		(void)pc__gw_on_usage_cost(c, msg);
		return;
	}
	pc_store_usage_list_t *l = NULL;
	int rc = pc_store_usage_list_take(msg, &l);
	if (rc != 0) {
		pc__gw_pend_store_failed(c, pd, "the usage cannot be read", rc);
		return;
	}
	cJSON *p = cJSON_CreateObject();
	cJSON_AddStringToObject(p, "runId", pd->run_id);
	cJSON *calls = cJSON_AddArrayToObject(p, "calls");
	size_t n = pc_store_usage_list_count(l);
	for (size_t i = 0; i < n; i++) {
		pc_store_usage_t u;
		pc_store_usage_list_get(l, i, &u);
		cJSON *o = usage_counts(&u);
		cJSON_AddNumberToObject(o, "attempt", u.attempt);
		cJSON_AddNumberToObject(o, "call", u.call);
		if (u.provider)
			cJSON_AddStringToObject(o, "provider", u.provider);
		if (u.model)
			cJSON_AddStringToObject(o, "model", u.model);
		cJSON_AddNumberToObject(o, "at", (double)u.created_ms);
		cJSON_AddItemToArray(calls, o);
	}
	pc_store_usage_t sum;
	uint64_t records = 0;
	pc_store_usage_list_totals(l, &sum, &records);
	cJSON_AddItemToObject(p, "totals", usage_counts(&sum));
	cJSON_AddNumberToObject(p, "count", (double)records);
	pc__gw_reply_ok(c, pd->req_id, p);
	pc_store_usage_list_free(l);
	pc__gw_pend_free(c, pd);
}

static const char *state_name(int s)
{
	return s == PC__GW_READY ? "ready" : s == PC__GW_DRAINING ? "draining" : s == PC__GW_STARTING ? "starting"
												  : "stopped";
}

/* A cluster's node: the node and the nodes it last read (cluster.c). */
static void add_cluster(cJSON *o, const pc_gateway_t *g)
{
	cJSON *cluster = pc__gw_cluster_json(g);
	if (cluster && !cJSON_AddItemToObject(o, "cluster", cluster))
		cJSON_Delete(cluster);
}

cJSON *pc__gw_health(pc_gateway_t *g)
{
	pc_agent_stats_t st;
	pc_agent_stats(g->agent, &st);
	cJSON *h = cJSON_CreateObject();
	cJSON_AddBoolToObject(h, "ok", pc__gw_state(g) == PC__GW_READY);
	cJSON_AddNumberToObject(h, "ts", (double)pc__clock_wall_ms());
	cJSON_AddStringToObject(h, "state", state_name(pc__gw_state(g)));
	cJSON_AddNumberToObject(h, "uptimeMs", (double)(pc_runtime_now_ms() - g->started_mono_ms));
	cJSON *agent = cJSON_AddObjectToObject(h, "agent");
	cJSON_AddNumberToObject(agent, "runsActive", (double)st.runs_active);
	cJSON_AddNumberToObject(agent, "sessionsLive", (double)st.sessions_live);
	cJSON *lane = cJSON_AddObjectToObject(h, "lane");
	cJSON_AddNumberToObject(lane, "active", st.lane_active);
	cJSON_AddNumberToObject(lane, "queued", st.lane_queued);
	cJSON_AddNumberToObject(lane, "max", st.lane_max);
	add_cluster(h, g);
	return h;
}

static void m_health(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *id, const cJSON *params)
{
	(void)ctx;
	(void)params;
	pc__gw_reply_ok(c, id, pc__gw_health(c->g));
}

static void m_status(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *id, const cJSON *params)
{
	(void)ctx;
	(void)params;
	pc_gateway_t *g = c->g;
	pc_agent_stats_t st;
	pc_agent_stats(g->agent, &st);
	pc__gw_ws_stats_t ws;
	pc__gw_ws_stats(g, &ws);
	cJSON *p = cJSON_CreateObject();
	cJSON_AddStringToObject(p, "version", PC_VERSION_STRING);
	cJSON_AddStringToObject(p, "state", state_name(pc__gw_state(g)));
	cJSON_AddNumberToObject(p, "startedAt", (double)g->started_wall_ms);
	cJSON_AddNumberToObject(p, "uptimeMs", (double)(pc_runtime_now_ms() - g->started_mono_ms));
	cJSON *cn = cJSON_AddObjectToObject(p, "connections");
	cJSON_AddNumberToObject(cn, "open", (double)ws.open);
	cJSON_AddNumberToObject(cn, "connected", (double)ws.connected);
	cJSON *ss = cJSON_AddObjectToObject(p, "sessions");
	cJSON_AddNumberToObject(ss, "live", (double)st.sessions_live);
	cJSON *runs = cJSON_AddObjectToObject(p, "runs");
	cJSON_AddNumberToObject(runs, "started", (double)st.runs_started);
	cJSON_AddNumberToObject(runs, "finished", (double)st.runs_finished);
	cJSON_AddNumberToObject(runs, "active", (double)st.runs_active);
	cJSON *lane = cJSON_AddObjectToObject(p, "lane");
	cJSON_AddNumberToObject(lane, "active", st.lane_active);
	cJSON_AddNumberToObject(lane, "queued", st.lane_queued);
	cJSON_AddNumberToObject(lane, "peak", st.lane_peak);
	cJSON_AddNumberToObject(lane, "max", st.lane_max);
	add_cluster(p, g);
	cJSON *tools = cJSON_AddObjectToObject(p, "tools");
	cJSON_AddNumberToObject(tools, "calls", (double)st.tool_calls);
	cJSON_AddNumberToObject(tools, "loopsBlocked", (double)st.tool_loops_blocked);
	pc__gw_reply_ok(c, id, p);
}

static void add_model(cJSON *list, const pc_config_t *cfg, const pc_provider_config_t *pv, const char *model,
		      const pc_model_config_t *mc)
{
	const pc_model_ref_t *def = &cfg->agent.model;
	cJSON *m = cJSON_CreateObject();
	cJSON_AddStringToObject(m, "id", model);
	cJSON_AddStringToObject(m, "name", model);
	cJSON_AddStringToObject(m, "provider", pv->id);
	uint64_t ctx = mc && mc->context_tokens ? mc->context_tokens : pv->context_tokens;
	cJSON_AddNumberToObject(m, "contextWindow", (double)(ctx ? ctx : PC_CONFIG_DEFAULT_CONTEXT_TOKENS));
	cJSON_AddBoolToObject(m, "reasoning", mc && mc->reasoning);
	if (def->provider && def->model && !strcmp(def->provider, pv->id) && !strcmp(def->model, model))
		cJSON_AddTrueToObject(m, "default");
	cJSON_AddItemToArray(list, m);
}

/* A provider without a model list shows the models the configuration
 * names for it (the primary, then the fallbacks). */
static void add_named_models(cJSON *list, const pc_config_t *cfg, const pc_provider_config_t *pv)
{
	const pc_model_ref_t *refs[PC_CONFIG_MAX_FALLBACKS + 1];
	size_t n = 0;
	refs[n++] = &cfg->agent.model;
	for (size_t i = 0; i < cfg->agent.fallback_count; i++)
		refs[n++] = &cfg->agent.fallbacks[i];
	for (size_t i = 0; i < n; i++) {
		if (!refs[i]->provider || !refs[i]->model || strcmp(refs[i]->provider, pv->id) != 0)
			continue;
		bool seen = false;
		for (size_t j = 0; j < i && !seen; j++)
			seen = refs[j]->provider && refs[j]->model && !strcmp(refs[j]->provider, pv->id) &&
			       !strcmp(refs[j]->model, refs[i]->model);
		if (!seen)
			add_model(list, cfg, pv, refs[i]->model, NULL);
	}
}

cJSON *pc__gw_models(const pc_config_t *cfg)
{
	cJSON *list = cJSON_CreateArray();
	for (size_t i = 0; i < cfg->provider_count; i++) {
		const pc_provider_config_t *pv = &cfg->providers[i];
		for (size_t j = 0; j < pv->model_count; j++)
			add_model(list, cfg, pv, pv->models[j].id, &pv->models[j]);
		if (!pv->model_count)
			add_named_models(list, cfg, pv);
	}
	return list;
}

static void m_models_list(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *id, const cJSON *params)
{
	(void)ctx;
	(void)params;
	cJSON *p = cJSON_CreateObject();
	cJSON_AddItemToObject(p, "models", pc__gw_models(c->g->cfg));
	pc__gw_reply_ok(c, id, p);
}

/* ---- the method table ---- */

#define SPEC(v) v, sizeof(v) / sizeof((v)[0])

/* In hello-ok's order. Methods without a spec ignore their params;
 * sessions.list takes OpenClaw's filters and ignores them. */
static const pc__gw_method_t methods[] = {
	{"agent", PC__GW_SCOPE_WRITE, SPEC(agent_spec), true, m_agent},
	{"agent.wait", PC__GW_SCOPE_WRITE, SPEC(agent_wait_spec), true, m_agent_wait},
	{"chat.send", PC__GW_SCOPE_WRITE, SPEC(chat_send_spec), true, m_chat_send},
	{"chat.abort", PC__GW_SCOPE_WRITE, SPEC(chat_abort_spec), true, m_chat_abort},
	{"sessions.create", PC__GW_SCOPE_WRITE, SPEC(sessions_create_spec), false, m_sessions_create},
	{"chat.history", PC__GW_SCOPE_READ, SPEC(pc__gw_chat_history_spec), true, pc__gw_m_chat_history},
	{"sessions.list", PC__GW_SCOPE_READ, SPEC(pc__gw_sessions_list_spec), false, m_sessions_list},
	{"sessions.abort", PC__GW_SCOPE_WRITE, SPEC(sessions_abort_spec), true, m_sessions_abort},
	{"health", PC__GW_SCOPE_READ, NULL, 0, false, m_health},
	{"status", PC__GW_SCOPE_READ, NULL, 0, false, m_status},
	{"models.list", PC__GW_SCOPE_READ, NULL, 0, false, m_models_list},
	{"usage.run", PC__GW_SCOPE_READ, SPEC(usage_run_spec), true, m_usage_run},
	/* rpc_history.c, rpc_sessions.c */
	{"chat.startup", PC__GW_SCOPE_READ, SPEC(pc__gw_chat_startup_spec), true, pc__gw_m_chat_startup},
	{"chat.metadata", PC__GW_SCOPE_READ, SPEC(pc__gw_chat_metadata_spec), true, pc__gw_m_chat_metadata},
	{"sessions.describe", PC__GW_SCOPE_READ, SPEC(pc__gw_sessions_describe_spec), true, pc__gw_m_sessions_describe},
	{"sessions.subscribe", PC__GW_SCOPE_READ, SPEC(pc__gw_sessions_list_spec), false, pc__gw_m_sessions_subscribe},
	{"sessions.unsubscribe", PC__GW_SCOPE_READ, NULL, 0, false, pc__gw_m_sessions_unsubscribe},
	{"sessions.messages.subscribe", PC__GW_SCOPE_READ, SPEC(pc__gw_messages_subscribe_spec), true,
	 pc__gw_m_messages_subscribe},
	{"sessions.messages.unsubscribe", PC__GW_SCOPE_READ, SPEC(pc__gw_messages_unsubscribe_spec), true,
	 pc__gw_m_messages_unsubscribe},
	{"sessions.observer.visibility", PC__GW_SCOPE_READ, SPEC(pc__gw_observer_visibility_spec), true,
	 pc__gw_m_observer_visibility},
	/* rpc_resolve.c */
	{"sessions.resolve", PC__GW_SCOPE_READ, SPEC(pc__gw_sessions_resolve_spec), true, pc__gw_m_sessions_resolve},
	/* rpc_info.c, rpc_cost.c: OpenClaw's reads about the gateway; writes refused */
	{"agent.identity.get", PC__GW_SCOPE_READ, SPEC(pc__gw_identity_spec), true, pc__gw_m_identity},
	{"agents.list", PC__GW_SCOPE_READ, NULL, 0, false, pc__gw_m_agents_list},
	{"config.get", PC__GW_SCOPE_READ, NULL, 0, false, pc__gw_m_config_get},
	{"config.set", PC__GW_SCOPE_ADMIN, NULL, 0, false, pc__gw_m_config_write},
	{"config.patch", PC__GW_SCOPE_ADMIN, NULL, 0, false, pc__gw_m_config_write},
	{"config.apply", PC__GW_SCOPE_ADMIN, NULL, 0, false, pc__gw_m_config_write},
	{"models.authStatus", PC__GW_SCOPE_READ, NULL, 0, false, pc__gw_m_models_auth},
	{"update.status", PC__GW_SCOPE_ADMIN, NULL, 0, false, pc__gw_m_update_status},
	{"diagnostics.stability", PC__GW_SCOPE_READ, SPEC(pc__gw_stability_spec), true, pc__gw_m_stability},
	{"usage.cost", PC__GW_SCOPE_READ, SPEC(pc__gw_usage_cost_spec), false, pc__gw_m_usage_cost},
	{"system.info", PC__GW_SCOPE_READ, NULL, 0, false, pc__gw_m_system_info},
	/* rpc_empty.c: empty pages of OpenClaw's scheduler (its filters narrow nothing) */
	{"cron.list", PC__GW_SCOPE_READ, SPEC(pc__gw_cron_page_spec), false, pc__gw_m_cron_list},
	{"cron.runs", PC__GW_SCOPE_READ, SPEC(pc__gw_cron_page_spec), false, pc__gw_m_cron_runs},
	/* device_pairing.c */
	{"device.pair.list", PC__GW_SCOPE_PAIRING, NULL, 0, false, pc__gw_m_device_pair_list},
	{"device.pair.approve", PC__GW_SCOPE_PAIRING, SPEC(pc__gw_pair_request_spec), true,
	 pc__gw_m_device_pair_approve},
	{"device.pair.reject", PC__GW_SCOPE_PAIRING, SPEC(pc__gw_pair_request_spec), true,
	 pc__gw_m_device_pair_reject},
	{"device.pair.remove", PC__GW_SCOPE_PAIRING, SPEC(pc__gw_pair_device_spec), true,
	 pc__gw_m_device_pair_remove},
	{"device.token.rotate", PC__GW_SCOPE_PAIRING, SPEC(pc__gw_token_rotate_spec), true,
	 pc__gw_m_device_token_rotate},
	{"device.token.revoke", PC__GW_SCOPE_PAIRING, SPEC(pc__gw_token_revoke_spec), true,
	 pc__gw_m_device_token_revoke},
};
#define NMETHODS (sizeof(methods) / sizeof(methods[0]))

const pc__gw_method_t *pc__gw_method_find(const char *name)
{
	for (size_t i = 0; i < NMETHODS; i++)
		if (!strcmp(methods[i].name, name))
			return &methods[i];
	return NULL;
}

cJSON *pc__gw_method_names(void)
{
	cJSON *a = cJSON_CreateArray();
	for (size_t i = 0; a && i < NMETHODS; i++)
		cJSON_AddItemToArray(a, cJSON_CreateString(methods[i].name));
	if (a)
		pc__gw_empty_names(a);
	return a;
}
