/*
 * A connection's runs and the pending work of its methods: the session
 * subscriptions a submit opens before it asks (so no event of its run is
 * missed), the runs a client follows, and what it is told of them: agent
 * events on the wire (§8.6) with their deltas merged, the chat projection
 * (§5.10), a run's end as the answer to `agent` or `agent.wait`.
 *
 * Runs and their events. Before a connection submits a message to a
 * session it subscribes to that session's hub, so the run's bus (made when
 * the run is admitted) publishes to it from its first event: nothing is
 * missed, even when the run starts before the "accepted" answer comes
 * back. Events of runs not yet known to the connection are held until the
 * answer names them; events of other clients' runs are dropped. The
 * subscription is bounded: a reader that falls behind loses the oldest
 * assistant deltas (never the terminal event) and the client is told of
 * the gap. A client that goes away only unsubscribes: its runs finish and
 * are stored as any other.
 *
 * Agent deltas are merged. The bus's assistant and thinking events carry
 * only their delta and a view of the run's text, shared by every reader.
 * A client gets at most one frame per run and stream every
 * gateway.deltaIntervalMs, holding the deltas merged since its last frame
 * and the message's text read from the shared view as the frame is
 * written. A frame that would take the text resent in this message past
 * PC__GW_RESEND_BUDGET waits for the message's last frame, so a long reply
 * costs a client about three times its size, not its square. Whatever else the run
 * sends (tool, lifecycle, its end) first sends the merged deltas waiting,
 * so the last frame of a message has its whole text and the deltas a
 * client gets add up to it exactly. A client that reads slowly has its
 * deltas merged the same way: after a frame, the next waits until the
 * socket took it all (pc_ws_notify_drained), so what came meanwhile is one
 * frame, not a queue of them; and what the connection actor's
 * subscription buffered, or dropped, is one frame too.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "io/io.h"
#include "rpc_internal.h"
#include "runtime/clock.h"

#define EVENT_BATCH 64
#define EVENTS_PER_TURN 1024

/* ---- session subscriptions ---- */

static void hold_clear(pc__gw_ssub_t *s)
{
	for (size_t i = 0; i < s->nhold; i++)
		pc_event_release(s->hold[i]);
	free(s->hold);
	s->hold = NULL;
	s->nhold = 0;
}

static void hold_drop(pc__gw_ssub_t *s, size_t i)
{
	pc_event_release(s->hold[i]);
	memmove(&s->hold[i], &s->hold[i + 1], (s->nhold - i - 1) * sizeof(s->hold[0]));
	s->nhold--;
}

/* Keeps an event of a run whose submit answer is still on its way. At
 * the bound the oldest delta goes, else the oldest non-terminal event. */
static void hold(pc__gw_ssub_t *s, pc_event_t *e)
{
	if (s->nhold >= PC__GW_HOLD_MAX) {
		size_t victim = s->nhold;
		for (size_t i = 0; i < s->nhold && victim == s->nhold; i++)
			if (s->hold[i]->droppable)
				victim = i;
		for (size_t i = 0; i < s->nhold && victim == s->nhold && !e->droppable; i++)
			if (!s->hold[i]->terminal)
				victim = i;
		if (victim < s->nhold)
			hold_drop(s, victim);
		else if (!e->terminal)
			return; /* a delta when nothing else may go: this one goes */
	}
	pc_event_t **v = realloc(s->hold, (s->nhold + 1) * sizeof(*v));
	if (!v)
		return;
	s->hold = v;
	v[s->nhold++] = pc_event_retain(e);
}

static pc__gw_ssub_t *ssub_by_key(pc__gw_conn_t *c, const char *key)
{
	for (pc__gw_node_t *n = c->ssubs.head; n; n = n->next)
		if (!strcmp(((pc__gw_ssub_t *)n)->key, key))
			return (pc__gw_ssub_t *)n;
	return NULL;
}

static pc__gw_ssub_t *ssub_by_tag(pc__gw_conn_t *c, uint64_t tag)
{
	for (pc__gw_node_t *n = c->ssubs.head; n; n = n->next)
		if (((pc__gw_ssub_t *)n)->tag == tag)
			return (pc__gw_ssub_t *)n;
	return NULL;
}

void pc__gw_ssub_free(pc__gw_conn_t *c, pc__gw_ssub_t *s)
{
	pc_agent_unsubscribe_session(c->g->agent, s->key, s->sub);
	pc_event_sub_close(s->sub);
	pc_event_sub_release(s->sub);
	hold_clear(s);
	free(s->key);
	free(s);
}

/* Drops a use of s; the last one unsubscribes. */
void pc__gw_ssub_put(pc__gw_conn_t *c, pc__gw_ssub_t *s)
{
	if (s->refs > 0)
		s->refs--;
	if (s->pending == 0)
		hold_clear(s);
	if (s->refs == 0) {
		pc__gw_list_remove(&c->ssubs, &s->node);
		pc__gw_ssub_free(c, s);
	}
}

/* The connection's subscription to session `key`, made if needed (with no
 * use counted yet). PC_EINVAL for a bad key. */
int pc__gw_ssub_get(pc__gw_conn_t *c, const char *key, pc__gw_ssub_t **out)
{
	pc__gw_ssub_t *s = ssub_by_key(c, key);
	if (s) {
		*out = s;
		return 0;
	}
	s = calloc(1, sizeof(*s));
	if (!s || !(s->key = strdup(key))) {
		free(s);
		return PC_ENOMEM;
	}
	s->tag = ++c->next_tag;
	pc_event_sub_config_t sc = {.capacity = PC__GW_SUB_CAPACITY, .notify = c->self,
				    .notify_type = PC__GW_MSG_EVENTS, .tag = s->tag};
	int rc = pc_event_sub_new(&sc, &s->sub);
	if (rc == 0)
		rc = pc_agent_subscribe_session(c->g->agent, key, s->sub);
	if (rc != 0) {
		pc_event_sub_release(s->sub);
		free(s->key);
		free(s);
		return rc;
	}
	pc__gw_list_add(&c->ssubs, &s->node);
	*out = s;
	return 0;
}

/* ---- runs ---- */

pc__gw_run_t *pc__gw_run_by_tag(pc__gw_conn_t *c, uint64_t tag)
{
	for (pc__gw_node_t *n = c->runs.head; n; n = n->next)
		if (((pc__gw_run_t *)n)->tag == tag)
			return (pc__gw_run_t *)n;
	return NULL;
}

/* The run (not a repeat) of session subscription s with this id. */
static pc__gw_run_t *run_by_id(pc__gw_conn_t *c, const pc__gw_ssub_t *s, const char *run_id)
{
	for (pc__gw_node_t *n = c->runs.head; n; n = n->next) {
		pc__gw_run_t *r = (pc__gw_run_t *)n;
		if (!r->dup && r->ssub == s && !strcmp(r->run_id, run_id))
			return r;
	}
	return NULL;
}

pc__gw_run_t *pc__gw_run_new(pc__gw_conn_t *c, int kind, const char *run_id, const char *req_id)
{
	pc__gw_run_t *r = calloc(1, sizeof(*r));
	if (!r)
		return NULL;
	r->tag = ++c->next_tag;
	r->kind = kind;
	snprintf(r->run_id, sizeof(r->run_id), "%s", run_id);
	if (req_id && !(r->req_id = strdup(req_id))) {
		free(r);
		return NULL;
	}
	pc__gw_list_add(&c->runs, &r->node);
	pc__gw_owe(c->g, 1);
	return r;
}

void pc__gw_run_free(pc__gw_conn_t *c, pc__gw_run_t *r)
{
	pc__gw_list_remove(&c->runs, &r->node);
	pc__gw_owe(c->g, -1);
	pc_timer_cancel(c->g->rt, r->flush_timer);
	pc_timer_cancel(c->g->rt, r->merge_timer);
	if (r->ssub)
		pc__gw_ssub_put(c, r->ssub);
	free(r->req_id);
	pc_event_release(r->merge[0].pending);
	pc_event_release(r->merge[1].pending);
	pc_event_release(r->chat_ev);
	free(r);
}

/* ---- pending work ---- */

pc__gw_pend_t *pc__gw_pend_new(pc__gw_conn_t *c, int kind, const char *req_id)
{
	pc__gw_pend_t *p = calloc(1, sizeof(*p));
	if (!p)
		return NULL;
	p->kind = kind;
	if (req_id && !(p->req_id = strdup(req_id))) {
		free(p);
		return NULL;
	}
	pc__gw_list_add(&c->pend, &p->node);
	if (kind == PC__GW_P_SUBMIT)
		pc__gw_owe(c->g, 1);
	return p;
}

pc__gw_pend_t *pc__gw_pend_find(pc__gw_conn_t *c, int kind, uint64_t corr)
{
	for (pc__gw_node_t *n = c->pend.head; n; n = n->next) {
		pc__gw_pend_t *p = (pc__gw_pend_t *)n;
		if (p->kind == kind && p->corr == corr)
			return p;
	}
	return NULL;
}

void pc__gw_pend_free(pc__gw_conn_t *c, pc__gw_pend_t *p)
{
	pc__gw_list_remove(&c->pend, &p->node);
	if (p->kind == PC__GW_P_SUBMIT)
		pc__gw_owe(c->g, -1);
	pc_timer_cancel(c->g->rt, p->timer);
	free(p->req_id);
	free(p->key);
	cJSON_Delete(p->params);
	free(p);
}

void pc__gw_pend_store_failed(pc__gw_conn_t *c, pc__gw_pend_t *p, const char *what, int rc)
{
	char why[160];
	snprintf(why, sizeof(why), "%s: %s", what, pc_store_strerror(rc));
	pc__gw_reply_error(c, p->req_id, "UNAVAILABLE", why, NULL, NULL, true);
	pc__gw_pend_free(c, p);
}

void pc__gw_release_work(pc__gw_conn_t *c)
{
	pc__gw_feed_release(c);
	while (c->pend.head)
		pc__gw_pend_free(c, (pc__gw_pend_t *)c->pend.head);
	/* Runs first: each drops its use of its session subscription. */
	while (c->runs.head)
		pc__gw_run_free(c, (pc__gw_run_t *)c->runs.head);
	while (c->ssubs.head) {
		pc__gw_ssub_t *s = (pc__gw_ssub_t *)c->ssubs.head;
		pc__gw_list_remove(&c->ssubs, &s->node);
		pc__gw_ssub_free(c, s);
	}
}

/* ---- the JSON of run ends ---- */

static void copy_item(cJSON *to, const cJSON *from, const char *k)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(from, k);
	if (v)
		cJSON_AddItemToObject(to, k, cJSON_Duplicate(v, true));
}

/* The second answer to an `agent` request (§8.3 step 7). */
void pc__gw_agent_final(pc__gw_conn_t *c, const char *req_id, const char *run_id, const cJSON *d,
			const char *status, const char *error)
{
	if (!status)
		status = "error";
	if (!error || !*error)
		error = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(d, "error"));
	/* A run that never ran says why in `reason` (queue_overflow, ...). */
	if (!error || !*error)
		error = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(d, "reason"));
	cJSON *p = cJSON_CreateObject();
	cJSON_AddStringToObject(p, "runId", run_id);
	if (!strcmp(status, "ok") || !strcmp(status, "aborted")) {
		/* An abort is the user's: the run ended as asked, not failed. */
		cJSON_AddStringToObject(p, "status", "ok");
		cJSON_AddStringToObject(p, "summary", strcmp(status, "ok") ? "aborted" : "completed");
		cJSON_AddItemToObject(p, "result", pc_agent_run_result(d, status));
		pc__gw_reply_ok(c, req_id, p);
		return;
	}
	bool timeout = !strcmp(status, "timeout");
	const char *why = error && *error ? error : timeout ? "the run timed out" : "the run failed";
	cJSON_AddStringToObject(p, "status", timeout ? "timeout" : "error");
	cJSON_AddStringToObject(p, "summary", why);
	/* a run that ran: its payloads (the spec's user-facing text) and
	 * meta.error with the provider's own words */
	if (cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(d, "payloads")))
		cJSON_AddItemToObject(p, "result", pc_agent_run_result(d, status));
	pc__gw_reply_error(c, req_id, timeout ? "AGENT_TIMEOUT" : "UNAVAILABLE", why, NULL, p, false);
}

/* ---- the chat projection (§5.10) ---- */

/* Text that is (or, while streaming, starts with) the silent token. */
static bool silent(const char *t, bool prefix)
{
	while (*t == ' ' || *t == '\n' || *t == '\t' || *t == '\r')
		t++;
	if (strncasecmp(t, "NO_REPLY", 8) != 0)
		return false;
	if (prefix)
		return true;
	t += 8;
	while (*t == ' ' || *t == '\n' || *t == '\t' || *t == '\r')
		t++;
	return *t == '\0';
}

static cJSON *assistant_message(const char *text)
{
	cJSON *m = cJSON_CreateObject();
	cJSON_AddStringToObject(m, "role", "assistant");
	cJSON *content = cJSON_AddArrayToObject(m, "content");
	cJSON *part = cJSON_CreateObject();
	cJSON_AddStringToObject(part, "type", "text");
	cJSON_AddStringToObject(part, "text", text);
	cJSON_AddItemToArray(content, part);
	cJSON_AddNumberToObject(m, "timestamp", (double)pc__clock_wall_ms());
	return m;
}

static cJSON *chat_payload(pc__gw_run_t *r, const char *state)
{
	cJSON *p = cJSON_CreateObject();
	cJSON_AddStringToObject(p, "runId", r->run_id);
	cJSON_AddStringToObject(p, "sessionKey", r->ssub ? r->ssub->key : "");
	cJSON_AddNumberToObject(p, "seq", (double)++r->chat_seq);
	cJSON_AddStringToObject(p, "state", state);
	return p;
}

/* Whether a throttled send of run r must wait: true when less than
 * `every` ms passed since `last_ms` (0: never sent), and then a timer
 * sends `type` with r's tag when the time comes (armed once). False when
 * it may go now, also when no timer could be armed: now rather than never. */
static bool too_soon(pc__gw_conn_t *c, const pc__gw_run_t *r, uint64_t last_ms, uint64_t every, uint32_t type,
		     pc_timer_t *timer)
{
	uint64_t now = pc_runtime_now_ms();
	if (!last_ms || now - last_ms >= every)
		return false;
	if (*timer)
		return true;
	pc_msg_t *m = pc__gw_u64_msg(type, r->tag);
	return m && pc_timer_after(c->self, every - (now - last_ms), m, timer) == 0;
}

/* The assistant text so far as a C string (malloc'd), or NULL. */
static char *chat_text(const pc__gw_run_t *r)
{
	return r->chat_ev ? strndup(r->chat_ev->text, r->chat_ev->text_len) : NULL;
}

static void chat_delta_now(pc__gw_conn_t *c, pc__gw_run_t *r)
{
	r->delta_pending = false;
	r->last_delta_ms = pc_runtime_now_ms();
	char *text = chat_text(r);
	if (text && !silent(text, true)) {
		cJSON *p = chat_payload(r, "delta");
		cJSON_AddItemToObject(p, "message", assistant_message(text));
		pc__gw_event(c, "chat", p);
	}
	free(text);
}

/* Keeps the latest delta (its view is the text so far, read only when a
 * chat delta goes). */
static void chat_delta(pc__gw_conn_t *c, pc__gw_run_t *r, pc_event_t *e)
{
	pc_event_release(r->chat_ev);
	r->chat_ev = pc_event_retain(e);
	r->delta_pending = true;
	if (!too_soon(c, r, r->last_delta_ms, PC__GW_CHAT_THROTTLE_MS, PC__GW_MSG_CHAT_FLUSH, &r->flush_timer))
		chat_delta_now(c, r);
}

void pc__gw_on_chat_flush(pc__gw_conn_t *c, uint64_t tag)
{
	pc__gw_run_t *r = pc__gw_run_by_tag(c, tag);
	if (!r)
		return;
	r->flush_timer = 0;
	if (r->delta_pending)
		chat_delta_now(c, r);
}

static const char *chat_error_kind(const char *kind, const char *status)
{
	if (!strcmp(status, "timeout") || (kind && !strcmp(kind, "timeout")))
		return "timeout";
	if (kind && (!strcmp(kind, "rate_limit") || !strcmp(kind, "refusal")))
		return kind;
	if (kind && (!strcmp(kind, "context_overflow") || !strcmp(kind, "context_length")))
		return "context_length";
	return "unknown";
}

/* The final text: the run's payloads that are not errors, joined. */
static char *final_text(const cJSON *d, const char *streamed)
{
	size_t len = 1;
	const cJSON *p;
	cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(d, "payloads")) {
		const char *t = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(p, "text"));
		if (t && !cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(p, "isError")))
			len += strlen(t) + 2;
	}
	if (len == 1)
		return streamed ? strdup(streamed) : NULL;
	char *out = malloc(len);
	if (!out)
		return NULL;
	size_t off = 0;
	out[0] = '\0';
	cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(d, "payloads")) {
		const char *t = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(p, "text"));
		if (t && !cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(p, "isError")))
			off += (size_t)snprintf(out + off, len - off, "%s%s", off ? "\n\n" : "", t);
	}
	return out;
}

static void chat_final(pc__gw_conn_t *c, pc__gw_run_t *r, const cJSON *d)
{
	pc_timer_cancel(c->g->rt, r->flush_timer);
	r->flush_timer = 0;
	const char *status = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(d, "status"));
	if (!status)
		status = "error";
	cJSON *p;
	if (!strcmp(status, "ok")) {
		p = chat_payload(r, "final");
		char *streamed = chat_text(r);
		char *text = final_text(d, streamed);
		free(streamed);
		if (text && !silent(text, false))
			cJSON_AddItemToObject(p, "message", assistant_message(text));
		free(text);
		copy_item(p, d, "usage");
		copy_item(p, d, "stopReason");
	} else if (!strcmp(status, "aborted")) {
		p = chat_payload(r, "aborted");
	} else {
		p = chat_payload(r, "error");
		const char *err = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(d, "error"));
		if (!err)
			err = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(d, "reason"));
		cJSON_AddStringToObject(p, "errorMessage", err ? err : "the run failed");
		cJSON_AddStringToObject(p, "errorKind",
					chat_error_kind(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(d, "errorKind")),
							status));
	}
	pc__gw_event(c, "chat", p);
}

/* ---- agent events on the wire (§8.6) ---- */

/* The event's payload; tool events lose result/partialResult unless the
 * client asked for them (cap "tool-events"); the terminal event loses the
 * run's payloads, which the final answer (or chat final) carries: §5.2's
 * lifecycle end has none, and a long reply would otherwise reach the
 * client once more. malloc'd. */
static char *agent_payload(const pc__gw_conn_t *c, const pc_event_t *e, size_t *len)
{
	char *out = NULL;
	bool lean_tool = e->stream == PC_EVENT_TOOL && !c->tool_events;
	if (!lean_tool && !e->terminal) {
		return pc_event_to_json(e, &out, len) == 0 ? out : NULL;
	}
	cJSON *d = cJSON_Parse(e->data);
	if (lean_tool) {
		cJSON_DeleteItemFromObjectCaseSensitive(d, "result");
		cJSON_DeleteItemFromObjectCaseSensitive(d, "partialResult");
	}
	if (e->terminal)
		cJSON_DeleteItemFromObjectCaseSensitive(d, "payloads");
	char *data = d ? pc_json_print(d) : NULL;
	cJSON_Delete(d);
	if (!data)
		return NULL;
	pc_event_t lean = *e;
	lean.data = data;
	lean.data_len = strlen(data);
	if (pc_event_to_json(&lean, &out, len) != 0)
		out = NULL;
	cJSON_free(data);
	return out;
}

/* §5.10: a gap in a run's seq (deltas dropped for a slow reader) is said
 * before the event after it. */
static void seq_gap(pc__gw_conn_t *c, const pc__gw_run_t *r, const pc_event_t *e)
{
	cJSON *p = cJSON_CreateObject();
	cJSON_AddStringToObject(p, "runId", r->run_id);
	cJSON_AddNumberToObject(p, "seq", (double)(r->last_seq + 1));
	cJSON_AddStringToObject(p, "stream", "error");
	cJSON_AddNumberToObject(p, "ts", (double)pc__clock_wall_ms());
	cJSON *d = cJSON_AddObjectToObject(p, "data");
	cJSON_AddStringToObject(d, "reason", "seq gap");
	cJSON_AddNumberToObject(d, "expected", (double)(r->last_seq + 1));
	cJSON_AddNumberToObject(d, "received", (double)e->seq);
	if (r->ssub)
		cJSON_AddStringToObject(p, "sessionKey", r->ssub->key);
	pc__gw_event(c, "agent", p);
}

/* ---- merged agent deltas ---- */

/* Sends m's waiting delta now: the deltas since the client's last frame
 * and the message's text, as they are in the shared view. */
static void merge_flush(pc__gw_conn_t *c, struct merge *m)
{
	pc_event_t *e = m->pending;
	if (!e)
		return;
	if (e->message != m->message) {
		m->message = e->message;
		m->sent = m->resent = 0;
	}
	char *p = NULL;
	size_t len = 0;
	if (e->text_len > m->sent && pc_event_delta_to_json(e, m->sent, &p, &len) == 0) {
		pc__gw_event_text(c, "agent", p, len);
		m->resent += e->text_len;
	}
	free(p);
	/* Counted as sent even if it could not be built: a later frame never
	 * repeats a delta, it may only lack one when memory ran out. */
	m->sent = e->text_len;
	m->last_ms = pc_runtime_now_ms();
	pc_event_release(e);
	m->pending = NULL;
	/* The next frame waits until the socket took this one. */
	if (!c->drain_wait && pc_ws_notify_drained(c->srv, c->id) == 0)
		c->drain_wait = true;
}

/* Sends both streams' waiting deltas, the older first, before anything
 * else of the run goes. */
static void merge_flush_all(pc__gw_conn_t *c, pc__gw_run_t *r)
{
	struct merge *a = &r->merge[0], *t = &r->merge[1];
	bool thinking_first = t->pending && (!a->pending || t->pending->seq < a->pending->seq);
	merge_flush(c, thinking_first ? t : a);
	merge_flush(c, thinking_first ? a : t);
}

/* Sends m's waiting delta if its time has come, it fits the budget and
 * the socket took the last frame; otherwise arms the run's timer for the
 * time. Past the budget it waits for the run's next other event or
 * message, which sends it; behind a full socket for pc__gw_on_drained. */
static void merge_due(pc__gw_conn_t *c, pc__gw_run_t *r, struct merge *m, bool socket_free)
{
	const pc_event_t *e = m->pending;
	if (!e)
		return;
	size_t resent = e->message == m->message ? m->resent : 0;
	if (resent + e->text_len > PC__GW_RESEND_BUDGET || !socket_free)
		return;
	if (!too_soon(c, r, m->last_ms, c->g->gcfg->delta_interval_ms, PC__GW_MSG_DELTA_FLUSH, &r->merge_timer))
		merge_flush(c, m);
}

/* A delta of run r: it replaces the one waiting (whose text it holds) or,
 * when it starts a new message, first sends the old message's last frame. */
static void merge_add(pc__gw_conn_t *c, pc__gw_run_t *r, pc_event_t *e)
{
	struct merge *m = &r->merge[e->stream == PC_EVENT_THINKING];
	if (m->pending && m->pending->message != e->message)
		merge_flush(c, m);
	pc_event_release(m->pending);
	m->pending = pc_event_retain(e);
	merge_due(c, r, m, !c->drain_wait);
}

void pc__gw_on_drained(pc__gw_conn_t *c)
{
	/* Every run's due frame goes in this round (one drain request for
	 * them all), so no run waits behind another. */
	c->drain_wait = false;
	for (pc__gw_node_t *n = c->runs.head; n; n = n->next) {
		pc__gw_run_t *r = (pc__gw_run_t *)n;
		merge_due(c, r, &r->merge[0], true);
		merge_due(c, r, &r->merge[1], true);
	}
}

void pc__gw_on_delta_flush(pc__gw_conn_t *c, uint64_t tag)
{
	pc__gw_run_t *r = pc__gw_run_by_tag(c, tag);
	if (!r)
		return;
	r->merge_timer = 0;
	merge_due(c, r, &r->merge[0], !c->drain_wait);
	merge_due(c, r, &r->merge[1], !c->drain_wait);
}

/* Sends one event of run r; true when it was the run's last (r is gone). */
static bool forward(pc__gw_conn_t *c, pc__gw_run_t *r, pc_event_t *e)
{
	if (e->seq <= r->last_seq)
		return false; /* seen already */
	if (e->seq != r->last_seq + 1)
		seq_gap(c, r, e);
	r->last_seq = e->seq;
	if (e->text) {
		merge_add(c, r, e);
		if (r->kind == PC__GW_RUN_CHAT && e->stream == PC_EVENT_ASSISTANT)
			chat_delta(c, r, e);
		return false;
	}
	merge_flush_all(c, r);
	size_t len = 0;
	char *p = agent_payload(c, e, &len);
	if (p)
		pc__gw_event_text(c, "agent", p, len);
	free(p);
	if (!e->terminal)
		return false;
	cJSON *d = cJSON_Parse(e->data);
	const char *status = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(d, "status"));
	if (r->kind == PC__GW_RUN_CHAT)
		chat_final(c, r, d);
	else
		pc__gw_agent_final(c, r->req_id, r->run_id, d, status, NULL);
	cJSON_Delete(d);
	pc__gw_run_free(c, r);
	return true;
}

static void route_event(pc__gw_conn_t *c, pc__gw_ssub_t *s, pc_event_t *e)
{
	pc__gw_run_t *r = run_by_id(c, s, e->run_id);
	if (r)
		forward(c, r, e);
	else if (s->pending > 0)
		hold(s, e);
	/* else: another client's run in the same session */
}

void pc__gw_on_events(pc_ctx_t *ctx, pc__gw_conn_t *c, uint64_t tag)
{
	(void)ctx;
	pc__gw_ssub_t *s = ssub_by_tag(c, tag);
	if (!s || pc__gw_conn_gone(c))
		return;
	s->refs++; /* s stays while its runs end under our feet */
	pc_event_t *ev[EVENT_BATCH];
	size_t n, total = 0;
	while (total < EVENTS_PER_TURN && (n = pc_event_sub_take(s->sub, ev, EVENT_BATCH)) > 0) {
		for (size_t i = 0; i < n; i++) {
			route_event(c, s, ev[i]);
			pc_event_release(ev[i]);
		}
		total += n;
	}
	/* A busy session yields to the connection's other messages; the
	 * buffer was not emptied, so no notice would come: remind ourselves. */
	if (total >= EVENTS_PER_TURN)
		(void)pc_send_u64(c->self, PC__GW_MSG_EVENTS, tag);
	pc__gw_ssub_put(c, s);
}

/* Sends the held events of a run just named, in order. */
void pc__gw_replay_held(pc__gw_conn_t *c, pc__gw_ssub_t *s, pc__gw_run_t *r)
{
	size_t i = 0;
	while (i < s->nhold) {
		pc_event_t *e = s->hold[i];
		if (strcmp(e->run_id, r->run_id) != 0) {
			i++;
			continue;
		}
		memmove(&s->hold[i], &s->hold[i + 1], (s->nhold - i - 1) * sizeof(s->hold[0]));
		s->nhold--;
		bool ended = forward(c, r, e);
		pc_event_release(e);
		if (ended)
			return;
	}
}


/* ---- run ends told by the registry (repeats, agent.wait) ---- */

static const char *wait_status(pc_run_status_t s)
{
	/* §8.4: an aborted run answers "timeout", as OpenClaw's does. */
	return s == PC_RUN_STATUS_OK ? "ok" : s == PC_RUN_STATUS_ERROR ? "error" : "timeout";
}

void pc__gw_wait_answer(pc__gw_conn_t *c, pc__gw_pend_t *pd, const pc_run_info_t *info)
{
	cJSON *p = cJSON_CreateObject();
	cJSON_AddStringToObject(p, "runId", pd->run_id);
	cJSON_AddStringToObject(p, "status", wait_status(info->status));
	if (info->started_ms)
		cJSON_AddNumberToObject(p, "startedAt", (double)info->started_ms);
	if (info->ended_ms)
		cJSON_AddNumberToObject(p, "endedAt", (double)info->ended_ms);
	if (info->error[0])
		cJSON_AddStringToObject(p, "error", info->error);
	/* beyond OpenClaw's answer: what a client deciding to send the run
	 * again needs (node_lost, run_interrupted; spec §1.14) */
	if (info->error_kind[0])
		cJSON_AddStringToObject(p, "errorKind", info->error_kind);
	if (info->replay_invalid)
		cJSON_AddBoolToObject(p, "replayInvalid", true);
	pc__gw_reply_ok(c, pd->req_id, p);
	pc__gw_pend_free(c, pd);
}

static void repeat_final(pc__gw_conn_t *c, pc__gw_run_t *r, const pc_run_info_t *info)
{
	char *json = NULL;
	cJSON *d = pc_agent_result(c->g->agent, r->run_id, &json) == 0 ? cJSON_Parse(json) : NULL;
	free(json);
	pc__gw_agent_final(c, r->req_id, r->run_id, d, pc_run_status_name(info->status), info->error);
	cJSON_Delete(d);
	pc__gw_run_free(c, r);
}

void pc__gw_on_run_info(pc_ctx_t *ctx, pc__gw_conn_t *c, const pc_msg_t *msg)
{
	(void)ctx;
	const pc_run_info_t *info = pc_msg_cdata(msg);
	pc__gw_run_t *r = pc__gw_run_by_tag(c, msg->corr);
	if (r && r->dup) {
		repeat_final(c, r, info);
		return;
	}
	pc__gw_pend_t *pd = pc__gw_pend_find(c, PC__GW_P_WAIT, msg->corr);
	if (pd)
		pc__gw_wait_answer(c, pd, info);
}

void pc__gw_on_wait_timeout(pc__gw_conn_t *c, uint64_t tag)
{
	pc__gw_pend_t *pd = pc__gw_pend_find(c, PC__GW_P_WAIT, tag);
	if (!pd)
		return;
	pd->timer = 0;
	cJSON *p = cJSON_CreateObject();
	cJSON_AddStringToObject(p, "runId", pd->run_id);
	cJSON_AddStringToObject(p, "status", "timeout");
	pc__gw_reply_ok(c, pd->req_id, p);
	pc__gw_pend_free(c, pd);
}
