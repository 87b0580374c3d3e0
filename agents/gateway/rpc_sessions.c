/*
 * What a connection follows of sessions it does not run anything in:
 * sessions.subscribe (sessions.changed for every session: a run queued,
 * started or ended, a message appended) and sessions.messages.subscribe
 * (session.message for each message appended to one session's transcript,
 * numbered per session by `seq`), with their unsubscribes, and
 * sessions.observer.visibility.
 *
 * Both come from one subscription per connection to the agent's feed
 * (pc_agent_subscribe_feed), made by the first subscribe and dropped with
 * the last unsubscribe or the connection: the events go out in the order
 * the agent published them. The subscription holds at most
 * PC__GW_SUB_CAPACITY events for a reader that falls behind; the oldest go
 * first, and the client is told of the gap by a sessions.changed without a
 * session (reason "gap"), on which OpenClaw's clients read the list again.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rpc_internal.h"
#include "runtime/clock.h"

#define FEED_BATCH 64
#define FEED_PER_TURN 1024

/* A session whose messages the connection follows. */
typedef struct msg_sub {
	char *key;
	uint64_t seq; /* the last session.message's seq */
} msg_sub_t;

struct pc__gw_feed {
	pc_event_sub_t *sub;
	uint64_t last_seq; /* the feed's seq of the last event taken (0: none) */
	bool sessions;     /* sessions.subscribe */
	msg_sub_t *keys;   /* sessions.messages.subscribe, at most PC__GW_MSG_SUBS_MAX */
	size_t nkeys;
};

const pc__gw_param_t pc__gw_messages_subscribe_spec[PC__GW_MESSAGES_SUBSCRIBE_NPARAMS] = {
	{"key", PC__GW_T_NESTR, true},
	{"agentId", PC__GW_T_NESTR, false},
	{"includeApprovals", PC__GW_T_BOOL, false},
};

const pc__gw_param_t pc__gw_messages_unsubscribe_spec[PC__GW_MESSAGES_UNSUBSCRIBE_NPARAMS] = {
	{"key", PC__GW_T_NESTR, true},
	{"agentId", PC__GW_T_NESTR, false},
};

const pc__gw_param_t pc__gw_observer_visibility_spec[PC__GW_OBSERVER_VISIBILITY_NPARAMS] = {
	{"visible", PC__GW_T_BOOL, true},
};

/* ---- the connection's feed subscription ---- */

/* c's feed subscription, made if needed. */
static int feed_get(pc__gw_conn_t *c, pc__gw_feed_t **out)
{
	if (c->feed) {
		*out = c->feed;
		return 0;
	}
	pc__gw_feed_t *f = calloc(1, sizeof(*f));
	if (!f)
		return PC_ENOMEM;
	pc_event_sub_config_t sc = {.capacity = PC__GW_SUB_CAPACITY, .notify = c->self,
				    .notify_type = PC__GW_MSG_FEED};
	int rc = pc_event_sub_new(&sc, &f->sub);
	if (rc == 0)
		rc = pc_agent_subscribe_feed(c->g->agent, f->sub);
	if (rc != 0) {
		pc_event_sub_release(f->sub);
		free(f);
		return rc;
	}
	c->feed = f;
	*out = f;
	return 0;
}

void pc__gw_feed_release(pc__gw_conn_t *c)
{
	pc__gw_feed_t *f = c->feed;
	if (!f)
		return;
	pc_agent_unsubscribe_feed(c->g->agent, f->sub);
	pc_event_sub_close(f->sub);
	pc_event_sub_release(f->sub);
	for (size_t i = 0; i < f->nkeys; i++)
		free(f->keys[i].key);
	free(f->keys);
	free(f);
	c->feed = NULL;
}

/* Drops the subscription once nothing uses it. */
static void feed_trim(pc__gw_conn_t *c)
{
	if (c->feed && !c->feed->sessions && c->feed->nkeys == 0)
		pc__gw_feed_release(c);
}

static msg_sub_t *key_find(pc__gw_feed_t *f, const char *key)
{
	for (size_t i = 0; f && i < f->nkeys; i++)
		if (!strcmp(f->keys[i].key, key))
			return &f->keys[i];
	return NULL;
}

/* ---- the events ---- */

static void changed_gap(pc__gw_conn_t *c)
{
	cJSON *p = cJSON_CreateObject();
	cJSON_AddStringToObject(p, "reason", "gap");
	cJSON_AddNumberToObject(p, "ts", (double)pc__clock_wall_ms());
	pc__gw_event(c, "sessions.changed", p);
}

/* sessions.changed for a feed event d: a run's phase ("queued" is
 * OpenClaw's reason "send"), or a message appended. */
static void changed(pc__gw_conn_t *c, const cJSON *d, const char *key, const char *phase, const char *run_id)
{
	cJSON *p = cJSON_CreateObject();
	cJSON_AddStringToObject(p, "sessionKey", key);
	if (!strcmp(phase, "queued"))
		cJSON_AddStringToObject(p, "reason", "send");
	else
		cJSON_AddStringToObject(p, "phase", phase);
	if (*run_id)
		cJSON_AddStringToObject(p, "runId", run_id);
	const cJSON *status = cJSON_GetObjectItemCaseSensitive(d, "status");
	if (status)
		cJSON_AddItemToObject(p, "status", cJSON_Duplicate(status, false));
	char active[PC_RUN_ID_MAX + 1];
	bool running = pc_agent_active_run(c->g->agent, key, active) == 0;
	cJSON_AddBoolToObject(p, "hasActiveRun", running);
	cJSON *ids = cJSON_AddArrayToObject(p, "activeRunIds");
	if (running)
		cJSON_AddItemToArray(ids, cJSON_CreateString(active));
	cJSON_AddNumberToObject(p, "ts", (double)pc__clock_wall_ms());
	pc__gw_event(c, "sessions.changed", p);
}

static void message(pc__gw_conn_t *c, msg_sub_t *k, cJSON *d, const char *run_id)
{
	cJSON *p = cJSON_CreateObject();
	cJSON_AddStringToObject(p, "sessionKey", k->key);
	cJSON_AddNumberToObject(p, "seq", (double)++k->seq);
	if (*run_id)
		cJSON_AddStringToObject(p, "runId", run_id);
	cJSON *m = cJSON_DetachItemFromObjectCaseSensitive(d, "message");
	double seq = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(d, "messageSeq"));
	if (seq > 0) {
		cJSON_AddNumberToObject(p, "messageSeq", seq);
		pc__gw_name_message(m, (int64_t)seq, run_id,
				    cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(d, "idempotencyKey")));
	}
	cJSON_AddItemToObject(p, "message", m ? m : cJSON_CreateNull());
	const cJSON *ts = cJSON_GetObjectItemCaseSensitive(d, "ts");
	cJSON_AddNumberToObject(p, "ts", ts ? ts->valuedouble : (double)pc__clock_wall_ms());
	pc__gw_event(c, "session.message", p);
}

static void route(pc__gw_conn_t *c, pc__gw_feed_t *f, const pc_event_t *e)
{
	if (f->last_seq && e->seq != f->last_seq + 1)
		changed_gap(c);
	f->last_seq = e->seq;
	cJSON *d = cJSON_Parse(e->data);
	const char *key = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(d, "sessionKey"));
	const char *phase = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(d, "phase"));
	const char *run_id = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(d, "runId"));
	if (key && phase && run_id) {
		if (f->sessions)
			changed(c, d, key, phase, run_id);
		msg_sub_t *k = !strcmp(phase, "message") ? key_find(f, key) : NULL;
		if (k)
			message(c, k, d, run_id);
	}
	cJSON_Delete(d);
}

void pc__gw_on_feed(pc__gw_conn_t *c)
{
	pc__gw_feed_t *f = c->feed;
	if (!f || pc__gw_conn_gone(c))
		return;
	pc_event_t *ev[FEED_BATCH];
	size_t n, total = 0;
	/* route() never releases the feed: only the methods and the end do */
	while (total < FEED_PER_TURN && (n = pc_event_sub_take(f->sub, ev, FEED_BATCH)) > 0) {
		for (size_t i = 0; i < n; i++) {
			route(c, f, ev[i]);
			pc_event_release(ev[i]);
		}
		total += n;
	}
	/* A busy feed yields to the connection's other messages; the buffer
	 * was not emptied, so no notice would come: remind ourselves. */
	if (total >= FEED_PER_TURN)
		(void)pc_send_signal(c->self, PC__GW_MSG_FEED);
}

/* ---- the methods ---- */

static void subscribe_refused(pc__gw_conn_t *c, const char *id, int rc)
{
	const char *why = rc == PC_ENOMEM ? "out of memory" : "the agent's feed cannot be followed";
	pc__gw_reply_error(c, id, "UNAVAILABLE", why, NULL, NULL, true);
}

void pc__gw_m_sessions_subscribe(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *id, const cJSON *params)
{
	pc__gw_feed_t *f = NULL;
	int rc = feed_get(c, &f);
	if (rc != 0) {
		subscribe_refused(c, id, rc);
		return;
	}
	/* subscribed before the list is read: no change falls between them */
	f->sessions = true;
	if (cJSON_GetArraySize(params) > 0) {
		pc__gw_sessions_list(ctx, c, id, "sessions.subscribe", params, true);
		return;
	}
	cJSON *p = cJSON_CreateObject();
	cJSON_AddTrueToObject(p, "subscribed");
	pc__gw_reply_ok(c, id, p);
}

void pc__gw_m_sessions_unsubscribe(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *id, const cJSON *params)
{
	(void)ctx;
	(void)params;
	if (c->feed) {
		c->feed->sessions = false;
		feed_trim(c);
	}
	cJSON *p = cJSON_CreateObject();
	cJSON_AddFalseToObject(p, "subscribed");
	pc__gw_reply_ok(c, id, p);
}

static cJSON *key_answer(const char *key, bool subscribed)
{
	cJSON *p = cJSON_CreateObject();
	cJSON_AddBoolToObject(p, "subscribed", subscribed);
	cJSON_AddStringToObject(p, "key", key);
	return p;
}

static const char *agent_unknown(const cJSON *params)
{
	const char *agent = pc__gw_str(params, "agentId");
	return agent && strcmp(agent, "main") != 0 ? "agentId: unknown agent (this gateway serves \"main\")" : NULL;
}

void pc__gw_m_messages_subscribe(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *id, const cJSON *params)
{
	(void)ctx;
	const char *key = pc__gw_str(params, "key");
	const cJSON *approvals = cJSON_GetObjectItemCaseSensitive(params, "includeApprovals");
	const char *why = agent_unknown(params);
	if (!why && approvals && !cJSON_IsTrue(approvals))
		why = "includeApprovals: must be true when given";
	else if (!why && strlen(key) > PC_STORE_NAME_MAX)
		why = "key: is not a session key";
	if (why) {
		pc__gw_invalid(c, id, "sessions.messages.subscribe", why);
		return;
	}
	/* The session's approval requests would come with its messages, to a
	 * client allowed to review them (OpenClaw's rule); nothing here ever
	 * waits for an approval, so there are none to send. */
	if (approvals && !(c->scopes & PC__GW_SCOPE_ADMIN) &&
	    !((c->scopes & PC__GW_SCOPE_APPROVALS) && c->device_id[0])) {
		pc__gw_reply_error(c, id, "INVALID_REQUEST",
				   "sessions.messages.subscribe includeApprovals requires a paired device and gateway "
				   "scope: operator.approvals",
				   NULL, NULL, false);
		return;
	}
	pc__gw_feed_t *f = NULL;
	if (!key_find(c->feed, key)) {
		int rc = feed_get(c, &f);
		if (rc == 0 && f->nkeys >= PC__GW_MSG_SUBS_MAX) {
			feed_trim(c);
			pc__gw_invalid(c, id, "sessions.messages.subscribe",
				       "key: this connection follows as many sessions as it may (256)");
			return;
		}
		msg_sub_t *v = rc == 0 ? realloc(f->keys, (f->nkeys + 1) * sizeof(*v)) : NULL;
		if (v)
			f->keys = v;
		char *dup = v ? strdup(key) : NULL;
		if (!dup) {
			feed_trim(c);
			subscribe_refused(c, id, rc ? rc : PC_ENOMEM);
			return;
		}
		f->keys[f->nkeys++] = (msg_sub_t){.key = dup};
	}
	pc__gw_reply_ok(c, id, key_answer(key, true));
}

void pc__gw_m_messages_unsubscribe(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *id, const cJSON *params)
{
	(void)ctx;
	const char *key = pc__gw_str(params, "key");
	const char *why = agent_unknown(params);
	if (why) {
		pc__gw_invalid(c, id, "sessions.messages.unsubscribe", why);
		return;
	}
	msg_sub_t *k = key_find(c->feed, key);
	if (k) {
		pc__gw_feed_t *f = c->feed;
		free(k->key);
		*k = f->keys[--f->nkeys];
		feed_trim(c);
	}
	pc__gw_reply_ok(c, id, key_answer(key, false));
}

/* OpenClaw shows visible observers a live digest of a session's runs
 * (session.observer); this gateway has no digest, so the declaration is
 * acknowledged and changes nothing. */
void pc__gw_m_observer_visibility(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *id, const cJSON *params)
{
	(void)ctx;
	(void)params;
	cJSON *p = cJSON_CreateObject();
	cJSON_AddTrueToObject(p, "ok");
	pc__gw_reply_ok(c, id, p);
}
