/*
 * Runs through the gateway's WebSocket RPC end to end (spec §8.3–§8.6,
 * §5.10): `agent` and its two answers, idempotency, agent.wait, agent and
 * chat events on the wire, aborts, chat.history, sessions.list (from the
 * store, in pages), a reader that stops reading, a client that leaves
 * mid-run, and a thousand sessions over ten connections.
 */
#include <criterion/criterion.h>

#include <pthread.h>

#include "gateway_harness.h"

TestSuite(agent_gateway_runs, .timeout = 300);

#define SLOW "[[mock:{\"text\":\"one two three four five six seven eight\",\"delay_ms\":300}]]"

/* Sends an agent request; returns its first answer and writes the id. */
static cJSON *agent_start(cl_t *c, cJSON *params, char *id)
{
	cl_req(c, "agent", params, id);
	cJSON *r = cl_await_res(c, id, 30000);
	cr_assert_not_null(r, "no first answer");
	return r;
}

static const char *run_of(const cJSON *res) { return jstr(jget(res, "payload"), "runId"); }

/* The agent events kept for run `run`, in order (removed from the kept
 * list; the caller deletes the array). */
static cJSON *take_agent_events(cl_t *c, const char *run)
{
	cJSON *out = cJSON_CreateArray();
	cJSON *e = c->events->child;
	while (e) {
		cJSON *next = e->next;
		if (!strcmp(jstr(e, "event"), "agent") && !strcmp(jstr(jget(e, "payload"), "runId"), run))
			cJSON_AddItemToArray(out, cJSON_DetachItemViaPointer(c->events, e));
		e = next;
	}
	return out;
}

Test(agent_gateway_runs, agent_answers_accepted_then_the_result_with_events_in_order_between)
{
	gw_t f;
	gw_start(&f, GW_CONFIG(""), NULL);
	cl_t *c = cl_connect(f.port);
	char id[32];
	cJSON *r1 = agent_start(c, agent_params("hello there gateway", "idem-1", "s1"), id);
	cr_assert(jok(r1), "%s", cJSON_PrintUnformatted(r1));
	const cJSON *p1 = jget(r1, "payload");
	cr_assert_str_eq(jstr(p1, "status"), "accepted");
	cr_assert_gt(jnum(p1, "acceptedAt"), 1.6e12);
	char run[80];
	snprintf(run, sizeof(run), "%s", run_of(r1));
	cr_assert_str_neq(run, "");
	cJSON *r2 = cl_await_res(c, id, 30000);
	cr_assert_not_null(r2, "no final answer");
	cr_assert(jok(r2), "%s", cJSON_PrintUnformatted(r2));
	const cJSON *p2 = jget(r2, "payload");
	cr_assert_str_eq(jstr(p2, "runId"), run);
	cr_assert_str_eq(jstr(p2, "status"), "ok");
	cr_assert_str_eq(jstr(p2, "summary"), "completed");
	const cJSON *res = jget(p2, "result");
	cr_assert_str_eq(jstr(cJSON_GetArrayItem(jget(res, "payloads"), 0), "text"), "hello there gateway");
	cr_assert_geq(jnum(jget(res, "meta"), "durationMs"), 0);
	cr_assert_str_eq(jstr(jget(res, "meta"), "status"), "ok");

	/* every event of the run came before the final answer, seq growing
	 * from 1 (merged assistant deltas skip the seqs of those they hold);
	 * the deltas add up to the text the last one carries */
	cJSON *evs = take_agent_events(c, run);
	int n = cJSON_GetArraySize(evs);
	cr_assert_geq(n, 3, "only %d agent events", n);
	const cJSON *e;
	int i = 0;
	double last_seq = 0;
	bool delta = false;
	char joined[256] = "", text[256] = "";
	cJSON_ArrayForEach(e, evs) {
		const cJSON *p = jget(e, "payload");
		cr_assert(i > 0 || jnum(p, "seq") == 1, "the first event has seq %g", jnum(p, "seq"));
		cr_assert_gt(jnum(p, "seq"), last_seq, "event %d has seq %g", i, jnum(p, "seq"));
		last_seq = jnum(p, "seq");
		cr_assert_str_eq(jstr(p, "sessionKey"), "s1");
		cr_assert_gt(jnum(p, "ts"), 1.6e12);
		cr_assert(cJSON_IsObject(jget(p, "data")));
		if (!strcmp(jstr(p, "stream"), "assistant")) {
			delta = true;
			strncat(joined, jstr(jget(p, "data"), "delta"), sizeof(joined) - strlen(joined) - 1);
			snprintf(text, sizeof(text), "%s", jstr(jget(p, "data"), "text"));
		}
		i++;
	}
	cr_assert(delta, "no assistant delta");
	cr_assert_str_eq(joined, "hello there gateway");
	cr_assert_str_eq(text, "hello there gateway");
	const cJSON *first = jget(cJSON_GetArrayItem(evs, 0), "payload");
	const cJSON *last = jget(cJSON_GetArrayItem(evs, n - 1), "payload");
	cr_assert_str_eq(jstr(first, "stream"), "lifecycle");
	cr_assert_str_eq(jstr(jget(first, "data"), "phase"), "start");
	cr_assert_str_eq(jstr(last, "stream"), "lifecycle");
	cr_assert_str_eq(jstr(jget(last, "data"), "phase"), "end");
	cr_assert_not(c->seq_gap, "frame seq must grow by one");
	cJSON_Delete(evs);
	cJSON_Delete(r1);
	cJSON_Delete(r2);
	cl_free(c);
	gw_stop(&f);
}

/* §8.3: an `agent` run is named by its idempotency key. A key another
 * session's run already names (keys are the session's, run ids are not),
 * or one that cannot be a run id, gets a generated id; every run ends. */
Test(agent_gateway_runs, an_agent_run_is_named_by_its_idempotency_key)
{
	gw_t f;
	gw_start(&f, GW_CONFIG(""), NULL);
	cl_t *c = cl_connect(f.port);
	char id1[32], id2[32], id3[32];
	cJSON *a = agent_start(c, agent_params("first", "order-4711", "named-a"), id1);
	cr_assert(jok(a), "%s", cJSON_PrintUnformatted(a));
	cr_assert_str_eq(run_of(a), "order-4711");
	cJSON *b = agent_start(c, agent_params("second", "order-4711", "named-b"), id2);
	cr_assert(jok(b), "%s", cJSON_PrintUnformatted(b));
	cr_assert_str_neq(run_of(b), "order-4711", "another session's run holds that id");
	cJSON *d = agent_start(c, agent_params("third", "with a space", "named-a"), id3);
	cr_assert(jok(d), "%s", cJSON_PrintUnformatted(d));
	cr_assert_str_neq(run_of(d), "with a space");
	const char *ids[] = {id1, id2, id3};
	for (int i = 0; i < 3; i++) {
		cJSON *fin = cl_await_res(c, ids[i], 30000);
		cr_assert(fin && jok(fin), "run %d did not end well", i);
		cJSON_Delete(fin);
	}
	/* agent.wait finds it by the key */
	char wid[32];
	cJSON *wp = cJSON_CreateObject();
	cJSON_AddStringToObject(wp, "runId", "order-4711");
	cl_req(c, "agent.wait", wp, wid);
	cJSON *w = cl_await_res(c, wid, 30000);
	cr_assert_str_eq(jstr(jget(w, "payload"), "status"), "ok");
	cJSON_Delete(w);
	cJSON_Delete(a);
	cJSON_Delete(b);
	cJSON_Delete(d);
	cl_free(c);
	gw_stop(&f);
}

Test(agent_gateway_runs, the_same_idempotency_key_twice_is_one_run_answered_twice)
{
	gw_t f;
	gw_start(&f, GW_CONFIG(""), NULL);
	cl_t *c = cl_connect(f.port);
	char a[32], b[32];
	cl_req(c, "agent", agent_params("only once please", "idem-same", "s2"), a);
	cl_req(c, "agent", agent_params("only once please", "idem-same", "s2"), b);
	cJSON *a1 = cl_await_res(c, a, 30000), *b1 = cl_await_res(c, b, 30000);
	cr_assert(jok(a1) && jok(b1));
	cr_assert_str_eq(run_of(a1), run_of(b1));
	cr_assert_str_eq(jstr(jget(b1, "payload"), "status"), "accepted");
	cJSON *a2 = cl_await_res(c, a, 30000), *b2 = cl_await_res(c, b, 30000);
	cr_assert_not_null(a2);
	cr_assert_not_null(b2);
	cr_assert_str_eq(jstr(jget(a2, "payload"), "status"), "ok");
	cr_assert_str_eq(jstr(jget(b2, "payload"), "status"), "ok");
	cr_assert_str_eq(jstr(cJSON_GetArrayItem(jget(jget(jget(b2, "payload"), "result"), "payloads"), 0), "text"),
			 "only once please");
	cr_assert_eq(request_count(&f.h), 1, "one model request for one run");
	/* later, on another connection: the same run, answered at once */
	cl_t *d = cl_connect(f.port);
	char e[32];
	cJSON *e1 = agent_start(d, agent_params("only once please", "idem-same", "s2"), e);
	cr_assert_str_eq(run_of(e1), run_of(a1));
	cJSON *e2 = cl_await_res(d, e, 10000);
	cr_assert_not_null(e2);
	cr_assert_str_eq(jstr(jget(e2, "payload"), "status"), "ok");
	cr_assert_eq(request_count(&f.h), 1);
	cJSON_Delete(a1);
	cJSON_Delete(b1);
	cJSON_Delete(a2);
	cJSON_Delete(b2);
	cJSON_Delete(e1);
	cJSON_Delete(e2);
	cl_free(d);
	cl_free(c);
	gw_stop(&f);
}

static cJSON *wait_params(const char *run, int timeout_ms)
{
	cJSON *p = cJSON_CreateObject();
	cJSON_AddStringToObject(p, "runId", run);
	if (timeout_ms >= 0)
		cJSON_AddNumberToObject(p, "timeoutMs", timeout_ms);
	return p;
}

Test(agent_gateway_runs, agent_wait_reports_ok_error_and_timeout)
{
	gw_t f;
	gw_start(&f, GW_CONFIG(""), NULL);
	cl_t *c = cl_connect(f.port);
	char id[32], run[80];

	/* ok: waited for while it runs */
	cJSON *r = agent_start(c, agent_params("fine " SLOW, "w-ok", "w1"), id);
	snprintf(run, sizeof(run), "%s", run_of(r));
	cJSON_Delete(r);
	r = cl_call(c, "agent.wait", wait_params(run, -1));
	cr_assert(jok(r));
	const cJSON *p = jget(r, "payload");
	cr_assert_str_eq(jstr(p, "runId"), run);
	cr_assert_str_eq(jstr(p, "status"), "ok");
	cr_assert_gt(jnum(p, "startedAt"), 0);
	cr_assert_geq(jnum(p, "endedAt"), jnum(p, "startedAt"));
	cJSON_Delete(r);
	r = cl_await_res(c, id, 10000);
	cr_assert_not_null(r, "the agent's final answer");
	cr_assert_str_eq(jstr(jget(r, "payload"), "status"), "ok");
	cJSON_Delete(r);

	/* error: the provider refuses; the agent's final answer says so too */
	r = agent_start(c, agent_params("bad [[mock:{\"kind\":\"error\",\"status\":400,\"message\":"
					"\"Invalid value for 'temperature': must be at most 2.\"}]]", "w-err", "w2"), id);
	snprintf(run, sizeof(run), "%s", run_of(r));
	cJSON_Delete(r);
	r = cl_await_res(c, id, 30000);
	cr_assert_not_null(r);
	cr_assert_not(jok(r));
	cr_assert_str_eq(jerr(r), "UNAVAILABLE");
	cr_assert_str_eq(jstr(jget(r, "payload"), "status"), "error");
	cr_assert_str_eq(jstr(jget(r, "payload"), "runId"), run);
	/* meta.error: the kind and the provider's own words (§1.19) */
	const cJSON *me = jget(jget(jget(jget(r, "payload"), "result"), "meta"), "error");
	cr_assert_str_eq(jstr(me, "reason"), "format", "%s", cJSON_PrintUnformatted(r));
	cr_assert_not_null(strstr(jstr(me, "message"), "Invalid value for 'temperature'"), "%s", jstr(me, "message"));
	cr_assert_eq(jnum(me, "providerStatus"), 400);
	cJSON_Delete(r);
	r = cl_call(c, "agent.wait", wait_params(run, 5000));
	cr_assert_str_eq(jstr(jget(r, "payload"), "status"), "error");
	cr_assert_str_neq(jstr(jget(r, "payload"), "error"), "");
	cJSON_Delete(r);

	/* timeout: the wait runs out, the run goes on */
	r = agent_start(c, agent_params("late [[mock:{\"text\":\"late\",\"ttft_ms\":2500}]]", "w-late", "w3"), id);
	snprintf(run, sizeof(run), "%s", run_of(r));
	cJSON_Delete(r);
	uint64_t t0 = now_ms();
	r = cl_call(c, "agent.wait", wait_params(run, 200));
	cr_assert_str_eq(jstr(jget(r, "payload"), "status"), "timeout");
	cr_assert_lt(now_ms() - t0, 2000);
	cJSON_Delete(r);
	r = cl_await_res(c, id, 10000);
	cr_assert_str_eq(jstr(jget(r, "payload"), "status"), "ok", "the run went on after the wait");
	cJSON_Delete(r);

	/* a run nobody knows */
	r = cl_call(c, "agent.wait", wait_params("no-such-run", 100));
	cr_assert_str_eq(jerr(r), "INVALID_REQUEST");
	cJSON_Delete(r);
	cl_free(c);
	gw_stop(&f);
}

static cJSON *key_params(const char *key, const char *run)
{
	cJSON *p = cJSON_CreateObject();
	cJSON_AddStringToObject(p, "sessionKey", key);
	if (run)
		cJSON_AddStringToObject(p, "runId", run);
	return p;
}

Test(agent_gateway_runs, sessions_abort_and_chat_abort_end_runs_as_aborted)
{
	gw_t f;
	gw_start(&f, GW_CONFIG(""), NULL);
	cl_t *c = cl_connect(f.port);
	char id[32], run[80];
	cJSON *r = agent_start(c, agent_params("story " SLOW, "ab-1", "ab"), id);
	snprintf(run, sizeof(run), "%s", run_of(r));
	cJSON_Delete(r);
	/* wait for it to stream, then abort the session */
	cJSON *e = NULL;
	for (;;) {
		e = cl_await_event(c, "agent", 10000);
		cr_assert_not_null(e);
		bool streaming = !strcmp(jstr(jget(e, "payload"), "stream"), "assistant");
		cJSON_Delete(e);
		if (streaming)
			break;
	}
	r = cl_call(c, "sessions.abort", key_params("ab", NULL));
	cr_assert(jok(r));
	cr_assert(cJSON_IsTrue(jget(jget(r, "payload"), "aborted")), "%s", cJSON_PrintUnformatted(r));
	cr_assert_str_eq(cJSON_GetArrayItem(jget(jget(r, "payload"), "runIds"), 0)->valuestring, run);
	cJSON_Delete(r);
	r = cl_await_res(c, id, 10000);
	cr_assert_not_null(r);
	cr_assert(jok(r));
	cr_assert_str_eq(jstr(jget(r, "payload"), "summary"), "aborted");
	cr_assert(cJSON_IsTrue(jget(jget(jget(jget(r, "payload"), "result"), "meta"), "aborted")));
	cJSON_Delete(r);
	/* nothing left to abort */
	r = cl_call(c, "sessions.abort", key_params("ab", NULL));
	cr_assert(cJSON_IsFalse(jget(jget(r, "payload"), "aborted")));
	cJSON_Delete(r);

	/* chat.send, then chat.abort by run id: a chat "aborted" event */
	cJSON *cp = key_params("chat-ab", NULL);
	cJSON_AddStringToObject(cp, "message", "tell me " SLOW);
	cJSON_AddStringToObject(cp, "idempotencyKey", "chat-ab-1");
	r = cl_call(c, "chat.send", cp);
	cr_assert(jok(r), "%s", cJSON_PrintUnformatted(r));
	cr_assert_str_eq(jstr(jget(r, "payload"), "status"), "started");
	snprintf(run, sizeof(run), "%s", run_of(r));
	cJSON_Delete(r);
	e = cl_await_event(c, "chat", 10000);
	cr_assert_not_null(e);
	cr_assert_str_eq(jstr(jget(e, "payload"), "state"), "delta");
	cJSON_Delete(e);
	r = cl_call(c, "chat.abort", key_params("other-session", run));
	cr_assert_str_eq(jerr(r), "INVALID_REQUEST", "a run id of another session");
	cJSON_Delete(r);
	r = cl_call(c, "chat.abort", key_params("chat-ab", run));
	cr_assert(cJSON_IsTrue(jget(jget(r, "payload"), "aborted")));
	cJSON_Delete(r);
	for (;;) {
		e = cl_await_event(c, "chat", 10000);
		cr_assert_not_null(e, "no aborted chat event");
		const char *state = jstr(jget(e, "payload"), "state");
		bool done = strcmp(state, "delta") != 0;
		if (done)
			cr_assert_str_eq(state, "aborted");
		cJSON_Delete(e);
		if (done)
			break;
	}
	cl_free(c);
	gw_stop(&f);
}

Test(agent_gateway_runs, chat_send_streams_chat_events_and_history_and_sessions_show_it)
{
	gw_t f;
	gw_start(&f, GW_CONFIG(""), NULL);
	cl_t *c = cl_connect(f.port);
	cJSON *p = key_params("chat-1", NULL);
	cJSON_AddStringToObject(p, "message", "good morning to the whole team");
	cJSON_AddStringToObject(p, "idempotencyKey", "chat-1-a");
	cJSON *r = cl_call(c, "chat.send", p);
	cr_assert(jok(r));
	char run[80];
	snprintf(run, sizeof(run), "%s", run_of(r));
	cJSON_Delete(r);
	uint64_t last_seq = 0;
	cJSON *fin = NULL;
	while (!fin) {
		cJSON *e = cl_await_event(c, "chat", 10000);
		cr_assert_not_null(e, "no final chat event");
		const cJSON *ep = jget(e, "payload");
		cr_assert_str_eq(jstr(ep, "runId"), run);
		cr_assert_str_eq(jstr(ep, "sessionKey"), "chat-1");
		cr_assert_gt(jnum(ep, "seq"), (double)last_seq);
		last_seq = (uint64_t)jnum(ep, "seq");
		if (!strcmp(jstr(ep, "state"), "final"))
			fin = e;
		else
			cJSON_Delete(e);
	}
	const cJSON *msg = jget(jget(fin, "payload"), "message");
	cr_assert_str_eq(jstr(msg, "role"), "assistant");
	cr_assert_str_eq(jstr(cJSON_GetArrayItem(jget(msg, "content"), 0), "text"), "good morning to the whole team");
	cJSON_Delete(fin);

	/* the transcript */
	r = cl_call(c, "chat.history", key_params("chat-1", NULL));
	cr_assert(jok(r), "%s", cJSON_PrintUnformatted(r));
	const cJSON *msgs = jget(jget(r, "payload"), "messages");
	cr_assert_eq(cJSON_GetArraySize(msgs), 2, "%s", cJSON_PrintUnformatted(r));
	cr_assert_str_eq(jstr(cJSON_GetArrayItem(msgs, 0), "role"), "user");
	cr_assert_str_eq(jstr(cJSON_GetArrayItem(msgs, 1), "role"), "assistant");
	cJSON_Delete(r);
	cJSON *hp = key_params("chat-1", NULL);
	cJSON_AddNumberToObject(hp, "limit", 1);
	r = cl_call(c, "chat.history", hp);
	cr_assert_eq(cJSON_GetArraySize(jget(jget(r, "payload"), "messages")), 1);
	cJSON_Delete(r);
	r = cl_call(c, "chat.history", key_params("never-used", NULL));
	cr_assert(jok(r));
	cr_assert_eq(cJSON_GetArraySize(jget(jget(r, "payload"), "messages")), 0);
	cJSON_Delete(r);

	/* sessions.list */
	r = cl_call(c, "sessions.list", NULL);
	const cJSON *s = cJSON_GetArrayItem(jget(jget(r, "payload"), "sessions"), 0);
	cr_assert_str_eq(jstr(s, "key"), "chat-1");
	cr_assert_str_eq(jstr(s, "lastRunId"), run);
	cr_assert_eq(jnum(s, "runs"), 1);
	cJSON_Delete(r);

	/* usage.run: the run's one model call, as stored, and its sums */
	cJSON *up = cJSON_CreateObject();
	cJSON_AddStringToObject(up, "runId", run);
	r = cl_call(c, "usage.run", up);
	cr_assert(jok(r));
	const cJSON *upay = jget(r, "payload");
	cr_assert_str_eq(jstr(upay, "runId"), run);
	cr_assert_eq(jnum(upay, "count"), 1);
	const cJSON *call0 = cJSON_GetArrayItem(jget(upay, "calls"), 0);
	cr_assert_str_eq(jstr(call0, "provider"), "mock");
	cr_assert_eq(jnum(call0, "attempt"), 0);
	cr_assert_eq(jnum(call0, "call"), 0);
	cr_assert_gt(jnum(call0, "output"), 0);
	cr_assert_eq(jnum(jget(upay, "totals"), "total"), jnum(call0, "total"));
	cJSON_Delete(r);
	up = cJSON_CreateObject();
	cJSON_AddStringToObject(up, "runId", "no-such-run");
	r = cl_call(c, "usage.run", up);
	cr_assert(jok(r));
	cr_assert_eq(jnum(jget(r, "payload"), "count"), 0);
	cJSON_Delete(r);
	r = cl_call(c, "usage.run", NULL);
	cr_assert_not(jok(r), "usage.run needs a runId");
	cJSON_Delete(r);

	/* models.list and status */
	r = cl_call(c, "models.list", NULL);
	const cJSON *m = cJSON_GetArrayItem(jget(jget(r, "payload"), "models"), 0);
	cr_assert_str_eq(jstr(m, "id"), "m1");
	cr_assert_str_eq(jstr(m, "provider"), "mock");
	cr_assert(cJSON_IsTrue(jget(m, "default")));
	cJSON_Delete(r);
	r = cl_call(c, "status", NULL);
	cr_assert_geq(jnum(jget(jget(r, "payload"), "runs"), "finished"), 1);
	cJSON_Delete(r);

	/* a run that fails ends its chat with an error */
	p = key_params("chat-2", NULL);
	cJSON_AddStringToObject(p, "message", "fail [[mock:{\"kind\":\"error\",\"status\":400}]]");
	cJSON_AddStringToObject(p, "idempotencyKey", "chat-2-a");
	r = cl_call(c, "chat.send", p);
	cr_assert(jok(r));
	cJSON_Delete(r);
	fin = NULL;
	while (!fin) {
		cJSON *e = cl_await_event(c, "chat", 10000);
		cr_assert_not_null(e, "no chat error event");
		if (strcmp(jstr(jget(e, "payload"), "state"), "delta") != 0)
			fin = e;
		else
			cJSON_Delete(e);
	}
	cr_assert_str_eq(jstr(jget(fin, "payload"), "state"), "error");
	cr_assert_str_neq(jstr(jget(fin, "payload"), "errorMessage"), "");
	cr_assert_str_neq(jstr(jget(fin, "payload"), "errorKind"), "");
	cJSON_Delete(fin);

	/* the same key again: the first run, not a second one */
	p = key_params("chat-1", NULL);
	cJSON_AddStringToObject(p, "message", "good morning to the whole team");
	cJSON_AddStringToObject(p, "idempotencyKey", "chat-1-a");
	r = cl_call(c, "chat.send", p);
	cr_assert_str_eq(run_of(r), run);
	cr_assert_str_eq(jstr(jget(r, "payload"), "status"), "ok");
	cJSON_Delete(r);
	cl_free(c);
	gw_stop(&f);
}

/* A run of session `key` through the agent API (not the gateway); its id
 * into run. */
static void run_elsewhere(gw_t *f, const char *key, const char *message, char *run)
{
	pc_agent_params_t p = {.session_key = key, .message = message};
	pc_agent_accepted_t acc;
	cr_assert_eq(pc_agent_submit(f->h.agent, &p, &acc), 0);
	strcpy(run, acc.run_id);
}

/* sessions.list with `params` (taken); the sessions' keys, joined by ",",
 * into keys; the answer (the caller deletes it). */
static cJSON *list_sessions(cl_t *c, cJSON *params, char *keys, size_t cap)
{
	cJSON *r = cl_call(c, "sessions.list", params);
	cr_assert(jok(r), "%s", cJSON_PrintUnformatted(r));
	size_t k = 0;
	keys[0] = '\0';
	const cJSON *s;
	cJSON_ArrayForEach(s, jget(jget(r, "payload"), "sessions"))
		k += (size_t)snprintf(keys + k, cap - k, "%s%s", k ? "," : "", jstr(s, "key"));
	cr_assert_eq(jnum(jget(r, "payload"), "count"), cJSON_GetArraySize(jget(jget(r, "payload"), "sessions")));
	return r;
}

static void expect_invalid(cl_t *c, const char *method, const char *params, const char *message)
{
	cJSON *r = cl_call(c, method, cJSON_Parse(params));
	cr_assert_str_eq(jerr(r), "INVALID_REQUEST", "%s", cJSON_PrintUnformatted(r));
	cr_assert_str_eq(jstr(jget(r, "error"), "message"), message);
	cJSON_Delete(r);
}

Test(agent_gateway_runs, sessions_list_reads_the_store_most_recent_first_in_pages)
{
	gw_t f;
	gw_start(&f, GW_CONFIG(""), NULL);
	/* sessions this gateway never saw: another entry ran them */
	const char *keys[] = {"older", "middle", "newest"};
	char runs[3][80];
	for (int i = 0; i < 3; i++) {
		run_elsewhere(&f, keys[i], "hi", runs[i]);
		pc_agent_wait_result_t w;
		cr_assert_eq(pc_agent_wait(f.h.agent, runs[i], 20000, &w), 0);
		cr_assert_eq(w.status, PC_AGENT_WAIT_OK);
		sleep_ms(5); /* each later session is updated in a later millisecond */
	}
	cl_t *c = cl_connect(f.port);
	char got[256];
	cJSON *r = list_sessions(c, cJSON_Parse("{\"limit\":2,\"search\":\"ignored\"}"), got, sizeof(got));
	cr_assert_str_eq(got, "newest,middle");
	const cJSON *s = cJSON_GetArrayItem(jget(jget(r, "payload"), "sessions"), 0);
	cr_assert_str_eq(jstr(s, "lastRunId"), runs[2]);
	cr_assert_eq(jnum(s, "runs"), 1);
	cr_assert_eq(jnum(s, "lastSeq"), 2, "the user's message and the answer");
	cr_assert_eq(strlen(jstr(s, "sessionId")), 32);
	cr_assert_leq(jnum(s, "createdAt"), jnum(s, "updatedAt"));
	cr_assert_null(jget(s, "activeRunId"));
	cr_assert_str_eq(jstr(jget(jget(r, "payload"), "defaults"), "mainSessionKey"), "main");
	cJSON *next = cJSON_CreateObject();
	cJSON_AddNumberToObject(next, "limit", 2);
	cJSON_AddStringToObject(next, "cursor", jstr(jget(r, "payload"), "nextCursor"));
	cJSON_Delete(r);
	r = list_sessions(c, next, got, sizeof(got));
	cr_assert_str_eq(got, "older");
	cr_assert_null(jget(jget(r, "payload"), "nextCursor"), "the last page");
	cJSON_Delete(r);

	/* a session with a run going says which */
	char busy[80];
	run_elsewhere(&f, "busy", "slow " SLOW, busy);
	bool active = false;
	for (uint64_t until = now_ms() + 10000; !active && now_ms() < until; sleep_ms(10)) {
		r = list_sessions(c, NULL, got, sizeof(got));
		s = cJSON_GetArrayItem(jget(jget(r, "payload"), "sessions"), 0);
		active = !strcmp(jstr(s, "key"), "busy") && !strcmp(jstr(s, "activeRunId"), busy);
		cJSON_Delete(r);
	}
	cr_assert(active, "the busy session never listed its active run");
	cr_assert_eq(pc_agent_abort_session(f.h.agent, "busy"), 0);
	pc_agent_wait_result_t w;
	cr_assert_eq(pc_agent_wait(f.h.agent, busy, 20000, &w), 0);

	r = list_sessions(c, cJSON_Parse("{\"limit\":0}"), got, sizeof(got));
	cr_assert_str_eq(got, "", "limit 0: an empty page");
	cJSON_Delete(r);
	expect_invalid(c, "sessions.list", "{\"limit\":\"2\"}",
		       "invalid sessions.list params: limit: must be an integer >= 0");
	expect_invalid(c, "sessions.list", "{\"cursor\":\"nonsense\"}",
		       "invalid sessions.list params: cursor: is not one sessions.list gave");
	cl_free(c);
	gw_stop(&f);
}

#define TOOL_CALL "[[mock:{\"kind\":\"tool_calls\",\"tool_calls\":[{\"name\":\"clock\",\"arguments\":{}}]}]]"

/* The data of the first tool "result" event kept for the connection. */
static cJSON *tool_result(cl_t *c)
{
	cJSON *e;
	cJSON_ArrayForEach(e, c->events) {
		const cJSON *p = jget(e, "payload");
		if (!strcmp(jstr(p, "stream"), "tool") && !strcmp(jstr(jget(p, "data"), "phase"), "result"))
			return cJSON_Duplicate(jget(p, "data"), true);
	}
	return NULL;
}

Test(agent_gateway_runs, tool_results_go_only_to_clients_with_the_tool_events_cap)
{
	gw_t f;
	gw_start(&f, GW_CONFIG(""), NULL);
	cl_t *plain = cl_connect(f.port);
	cl_t *rich = cl_open(f.port);
	cJSON *cp = connect_params(GW_TOKEN, NULL);
	cJSON_AddItemToObject(cp, "caps", cJSON_Parse("[\"tool-events\"]"));
	cJSON *r = cl_handshake(rich, cp);
	cr_assert(jok(r));
	cJSON_Delete(r);
	cl_t *both[] = {plain, rich};
	for (int i = 0; i < 2; i++) {
		char id[32], idem[16];
		snprintf(idem, sizeof(idem), "tool-%d", i);
		cJSON_Delete(agent_start(both[i], agent_params("what time is it " TOOL_CALL, idem, idem), id));
		r = cl_await_res(both[i], id, 30000);
		cr_assert(jok(r), "%s", cJSON_PrintUnformatted(r));
		cJSON_Delete(r);
	}
	cJSON *d0 = tool_result(plain), *d1 = tool_result(rich);
	cr_assert_not_null(d0, "no tool result event");
	cr_assert_not_null(d1, "no tool result event");
	cr_assert_str_eq(jstr(d0, "name"), "clock");
	cr_assert_null(jget(d0, "result"), "stripped without the cap");
	cr_assert_not_null(jget(d1, "result"), "kept with the cap");
	cJSON_Delete(d0);
	cJSON_Delete(d1);
	cl_free(plain);
	cl_free(rich);
	gw_stop(&f);
}

/* ---- slow and vanishing clients ---- */

static void small_buffer(pc_config_t *cfg) { cfg->gateway.max_buffered = 65536; }

Test(agent_gateway_runs, a_client_that_never_reads_is_cut_off_and_others_are_unaffected)
{
	gw_t f;
	/* a long answer (3 MB): its merged deltas still carry the text so far,
	 * a few times the answer in all, more than the socket buffers (up to
	 * 4 MiB on loopback) and the 64 KiB cap hold. The mock's default step,
	 * so that the prompt stays small. */
	size_t cap = 4u << 20;
	char *scenario = malloc(cap);
	cr_assert_not_null(scenario);
	size_t n = (size_t)snprintf(scenario, cap, "{\"default\":{\"chunks\":3000,\"text\":\"");
	for (int i = 0; i < 300000; i++)
		n += (size_t)snprintf(scenario + n, cap - n, "%sword%d", i ? " " : "", i);
	snprintf(scenario + n, cap - n, "\"}}");
	gw_start_scenario(&f, GW_CONFIG(""), scenario, small_buffer);
	free(scenario);
	tws_options_t o = {.port = f.port, .rcvbuf = 4096};
	cl_t *slow = cl_open_with(&o);
	cJSON *r = cl_handshake(slow, connect_params(GW_TOKEN, NULL));
	cr_assert(jok(r));
	cJSON_Delete(r);
	cl_req(slow, "agent", agent_params("flood", "flood-1", "slow"), NULL);
	/* from now on `slow` reads nothing */
	cl_t *c = cl_connect(f.port);
	char id[32];
	cJSON_Delete(agent_start(c, agent_params("still here [[mock:{\"text\":\"still here\"}]]", "other-1", "fast"), id));
	r = cl_await_res(c, id, 60000);
	cr_assert_not_null(r);
	cr_assert_str_eq(jstr(jget(r, "payload"), "status"), "ok");
	cJSON_Delete(r);
	pc_io_stats_t st;
	uint64_t until = now_ms() + 60000;
	do {
		sleep_ms(20);
		pc_io_stats(f.h.io, &st);
	} while (st.connections_dropped == 0 && now_ms() < until);
	cr_assert_geq(st.connections_dropped, 1, "the reader that stopped was not cut off");
	/* its run finished anyway */
	char run[80] = "";
	until = now_ms() + 10000;
	while (!run[0] && now_ms() < until) {
		r = cl_call(c, "sessions.list", NULL);
		const cJSON *s;
		cJSON_ArrayForEach(s, jget(jget(r, "payload"), "sessions")) {
			if (!strcmp(jstr(s, "key"), "slow"))
				snprintf(run, sizeof(run), "%s", jstr(s, "lastRunId"));
		}
		cJSON_Delete(r);
	}
	cr_assert_str_neq(run, "");
	r = cl_call(c, "agent.wait", wait_params(run, 60000));
	cr_assert_str_eq(jstr(jget(r, "payload"), "status"), "ok");
	cJSON_Delete(r);
	/* what reached `slow` before the cut ends without a close frame and
	 * without the run's final answer */
	bool final = false;
	until = now_ms() + 30000;
	cJSON *fr;
	while ((fr = cl_frame(slow, left_ms(until))) != NULL) {
		final = final || (!strcmp(jstr(fr, "type"), "res") && !strcmp(jstr(jget(fr, "payload"), "status"), "ok"));
		cJSON_Delete(fr);
	}
	cr_assert_eq(tws_close_code(slow->ws), 1006);
	cr_assert_not(final);
	cl_free(slow);
	cl_free(c);
	/* what the cut connection held for its reader was dropped with it */
	AWAIT((pc_io_stats(f.h.io, &st), st.output_queued == 0), 10000);
	gw_stop(&f);
}

Test(agent_gateway_runs, a_client_that_leaves_mid_run_does_not_stop_its_run)
{
	gw_t f;
	gw_start(&f, GW_CONFIG(""), NULL);
	cl_t *c = cl_connect(f.port);
	char id[32], run[80];
	cJSON *r = agent_start(c, agent_params("leaving " SLOW, "leave-1", "gone"), id);
	snprintf(run, sizeof(run), "%s", run_of(r));
	cJSON_Delete(r);
	cl_free(c); /* no close frame: the socket just goes */
	pc_agent_wait_result_t w = wait_run(&f.h, run, 30000);
	cr_assert_eq(w.status, PC_AGENT_WAIT_OK);
	char roles[128];
	cr_assert_eq(history_roles(&f.h, "gone", roles, sizeof(roles)), 2, "%s", roles);
	cr_assert_str_eq(roles, "user,assistant");
	pc_store_reply_t sr;
	uint64_t until = now_ms() + 5000;
	do {
		cr_assert_eq(pc_store_run_get(f.h.store, run, &sr), 0);
		if (sr.status == PC_STORE_RUN_OK)
			break;
		sleep_ms(10);
	} while (now_ms() < until);
	cr_assert_eq(sr.status, PC_STORE_RUN_OK);
	gw_stop(&f);
}

/* ---- load ---- */

#define LOAD_CONNS 10
#define LOAD_RUNS 100

typedef struct load {
	uint16_t port;
	int index;
	int ok;
	bool gap;
	uint64_t events; /* event frames seen */
} load_t;

static void *load_client(void *arg)
{
	load_t *l = arg;
	cl_t *c = cl_connect(l->port);
	for (int i = 0; i < LOAD_RUNS; i++) {
		char msg[64], key[32];
		snprintf(key, sizeof(key), "load-%d-%d", l->index, i);
		snprintf(msg, sizeof(msg), "hello %d %d", l->index, i);
		cl_req(c, "agent", agent_params(msg, key, key), NULL);
	}
	/* two answers per request: accepted, then the result */
	int answers = 0;
	uint64_t until = now_ms() + 240000;
	while (answers < 2 * LOAD_RUNS && now_ms() < until) {
		cJSON *fr = cl_frame(c, left_ms(until));
		if (!fr)
			break;
		if (!strcmp(jstr(fr, "type"), "res")) {
			answers++;
			const char *st = jstr(jget(fr, "payload"), "status");
			if (jok(fr) && !strcmp(st, "ok"))
				l->ok++;
		}
		cJSON_Delete(fr);
	}
	l->gap = c->seq_gap;
	l->events = c->last_seq;
	cl_free(c);
	return NULL;
}

Test(agent_gateway_runs, a_thousand_sessions_over_ten_connections_all_complete)
{
	gw_t f;
	gw_start(&f, GW_CONFIG(""), NULL);
	pthread_t t[LOAD_CONNS];
	load_t l[LOAD_CONNS];
	uint64_t t0 = now_ms();
	for (int i = 0; i < LOAD_CONNS; i++) {
		l[i] = (load_t){.port = f.port, .index = i};
		cr_assert_eq(pthread_create(&t[i], NULL, load_client, &l[i]), 0);
	}
	int ok = 0;
	for (int i = 0; i < LOAD_CONNS; i++) {
		pthread_join(t[i], NULL);
		ok += l[i].ok;
		cr_assert_not(l[i].gap, "connection %d saw a gap in event seq", i);
		cr_assert_gt(l[i].events, 3 * LOAD_RUNS, "connection %d saw %llu events", i,
			     (unsigned long long)l[i].events);
	}
	uint64_t took = now_ms() - t0;
	cr_assert_eq(ok, LOAD_CONNS * LOAD_RUNS, "%d of %d runs completed in %llu ms", ok, LOAD_CONNS * LOAD_RUNS,
		     (unsigned long long)took);
	cr_assert_lt(took, 240000);
	cr_log_info("1000 runs over 10 connections: %llu ms", (unsigned long long)took);
	pc_agent_stats_t st;
	pc_agent_stats(f.h.agent, &st);
	cr_assert_geq(st.runs_finished, LOAD_CONNS * LOAD_RUNS);
	gw_stop(&f);
}

/* A drain ends once every client has its final answers, not only once the
 * runs ended: freeing the gateway right after must not cut any off. */
Test(agent_gateway_runs, a_drain_delivers_every_final_answer_before_the_close)
{
	enum { RUNS = 200 };
	/* every run at once, so they end together and the connection still
	 * has final answers to send when the last run has ended */
	static const char cfg[] =
		"{\"providers\":{\"mock\":{\"api\":\"openai-completions\",\"embedded\":true,\"apiKey\":\"k\"}},"
		"\"agents\":{\"defaults\":{\"model\":\"mock/m1\",\"maxConcurrent\":256}},"
		"\"gateway\":{\"auth\":{\"mode\":\"token\",\"token\":\"" GW_TOKEN "\"}}}";
	gw_t f;
	gw_start(&f, cfg, NULL);
	cl_t *c = cl_connect(f.port);
	char ids[RUNS][32];
	for (int i = 0; i < RUNS; i++) {
		char idem[32], key[32];
		snprintf(idem, sizeof(idem), "drain-%d", i);
		snprintf(key, sizeof(key), "drain-s%d", i);
		cl_req(c, "agent", agent_params(SLOW, idem, key), ids[i]);
	}
	for (int i = 0; i < RUNS; i++) {
		cJSON *r = cl_await_res(c, ids[i], 30000);
		cr_assert(r && jok(r), "run %d not accepted", i);
		cJSON_Delete(r);
	}
	cr_assert_eq(pc_gateway_drain(f.g, 30000), 0);
	pc_gateway_free(f.g);
	f.g = NULL;
	/* everything the gateway sent before it closed is readable */
	int finals = 0;
	for (int i = 0; i < RUNS; i++) {
		cJSON *r = cl_await_res(c, ids[i], 5000);
		if (r && !strcmp(jstr(jget(r, "payload"), "status"), "ok"))
			finals++;
		cJSON_Delete(r);
	}
	cr_assert_eq(finals, RUNS, "%d of %d final answers arrived before the close", finals, RUNS);
	cl_free(c);
	gw_stop(&f);
}

/* `thinking` on agent and chat.send sets the run's level; an unknown level
 * is refused before anything runs. */
Test(agent_gateway_runs, thinking_sets_the_runs_level_and_bad_levels_are_refused)
{
	gw_t f;
	gw_start(&f, GW_CONFIG(""), NULL);
	cl_t *c = cl_connect(f.port);
	char id[32];
	cJSON *p = agent_params("think a little", "think-1", "think");
	cJSON_AddStringToObject(p, "thinking", "low");
	cJSON *r = agent_start(c, p, id);
	cr_assert(jok(r), "%s", cJSON_PrintUnformatted(r));
	cJSON_Delete(r);
	r = cl_await_res(c, id, 30000);
	cr_assert(r && jok(r), "no final answer");
	cJSON_Delete(r);
	p = agent_params("too much", "think-2", "think");
	cJSON_AddStringToObject(p, "thinking", "lots");
	r = cl_call(c, "agent", p);
	cr_assert_not(jok(r));
	cr_assert_str_eq(jerr(r), "INVALID_REQUEST");
	cJSON_Delete(r);
	p = cJSON_CreateObject();
	cJSON_AddStringToObject(p, "sessionKey", "think");
	cJSON_AddStringToObject(p, "message", "chat too much");
	cJSON_AddStringToObject(p, "idempotencyKey", "think-3");
	cJSON_AddStringToObject(p, "thinking", "lots");
	r = cl_call(c, "chat.send", p);
	cr_assert_not(jok(r));
	cr_assert_str_eq(jerr(r), "INVALID_REQUEST");
	cJSON_Delete(r);
	cJSON *reqs = mock_requests(&f.h);
	cr_assert_eq(cJSON_GetArraySize(reqs), 1, "only the good run asked the model");
	cJSON *owned = NULL;
	cr_assert_str_eq(jstr(request_body(reqs, 0, &owned), "reasoning_effort"), "low");
	cJSON_Delete(owned);
	cJSON_Delete(reqs);
	cl_free(c);
	gw_stop(&f);
}
