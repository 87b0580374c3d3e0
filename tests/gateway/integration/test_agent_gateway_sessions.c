/*
 * What a client that shows sessions sees through the gateway's WebSocket
 * RPC, as OpenClaw's Control UI and TUI ask it: chat.history under a byte
 * budget and with the receipts of its runs, chat.startup, sessions.describe,
 * sessions.changed after sessions.subscribe, session.message after
 * sessions.messages.subscribe (numbered per session, stopped by the
 * unsubscribe), sessions.resolve, sessions.create, and the params these
 * methods refuse.
 */
#include <criterion/criterion.h>

#include "gateway_harness.h"

TestSuite(agent_gateway_sessions, .timeout = 300);

static cJSON *key_params(const char *name, const char *key)
{
	cJSON *p = cJSON_CreateObject();
	cJSON_AddStringToObject(p, name, key);
	return p;
}

/* chat.send of `message` to `key`; its run id into run. */
static void chat_send(cl_t *c, const char *key, const char *message, const char *idem, char run[80])
{
	cJSON *p = key_params("sessionKey", key);
	cJSON_AddStringToObject(p, "message", message);
	cJSON_AddStringToObject(p, "idempotencyKey", idem);
	cJSON *r = cl_call(c, "chat.send", p);
	cr_assert(jok(r), "%s", cJSON_PrintUnformatted(r));
	snprintf(run, 80, "%s", jstr(jget(r, "payload"), "runId"));
	cJSON_Delete(r);
}

/* Waits for run's final chat event. */
static void chat_final(cl_t *c, const char *run)
{
	for (;;) {
		cJSON *e = cl_await_event(c, "chat", 15000);
		cr_assert_not_null(e, "no final chat event");
		bool fin = !strcmp(jstr(jget(e, "payload"), "runId"), run) &&
			   !strcmp(jstr(jget(e, "payload"), "state"), "final");
		cJSON_Delete(e);
		if (fin)
			return;
	}
}

static cJSON *history(cl_t *c, cJSON *p)
{
	cJSON *r = cl_call(c, "chat.history", p);
	cr_assert(jok(r), "%s", cJSON_PrintUnformatted(r));
	return r;
}

Test(agent_gateway_sessions, history_keeps_the_newest_messages_within_max_bytes_and_reports_input_receipts)
{
	gw_t f;
	gw_start(&f, GW_CONFIG(""), NULL);
	cl_t *c = cl_connect(f.port);
	char runs[3][80];
	char text[1200];
	for (int i = 0; i < 3; i++) {
		/* each turn's user message and reply are about 1 KB apiece */
		memset(text, 'a' + i, sizeof(text) - 1);
		text[sizeof(text) - 1] = '\0';
		char idem[16];
		snprintf(idem, sizeof(idem), "h-%d", i);
		chat_send(c, "hist", text, idem, runs[i]);
		chat_final(c, runs[i]);
	}
	cJSON *r = history(c, key_params("sessionKey", "hist"));
	const cJSON *p = jget(r, "payload");
	const cJSON *all = jget(p, "messages");
	cr_assert_eq(cJSON_GetArraySize(all), 6);
	cr_assert_eq(jnum(p, "totalMessages"), 6);
	cr_assert(cJSON_IsFalse(jget(p, "hasMore")));
	cr_assert_str_eq(jstr(jget(p, "sessionInfo"), "key"), "hist");
	cr_assert_str_eq(jstr(jget(p, "defaults"), "mainSessionKey"), "main");
	/* a budget that holds the last two messages as a JSON array, and not
	 * the third from the end */
	cJSON *tail = cJSON_CreateArray();
	cJSON_AddItemToArray(tail, cJSON_Duplicate(cJSON_GetArrayItem(all, 4), true));
	cJSON_AddItemToArray(tail, cJSON_Duplicate(cJSON_GetArrayItem(all, 5), true));
	char *tail_text = cJSON_PrintUnformatted(tail);
	size_t budget = strlen(tail_text) + 10;
	cJSON_Delete(tail);

	cJSON *hp = key_params("sessionKey", "hist");
	cJSON_AddNumberToObject(hp, "maxBytes", (double)budget);
	cJSON *r2 = history(c, hp);
	p = jget(r2, "payload");
	char *got = cJSON_PrintUnformatted(jget(p, "messages"));
	cr_assert_str_eq(got, tail_text, "the newest two messages, whole");
	cr_assert_leq(strlen(got), budget);
	cJSON_free(got);
	cJSON_free(tail_text);
	cr_assert_str_eq(jstr(cJSON_GetArrayItem(jget(p, "messages"), 0), "role"), "user");
	cr_assert(cJSON_IsTrue(jget(p, "hasMore")));
	cr_assert_eq(jnum(p, "nextOffset"), 2);
	cJSON_Delete(r2);
	cJSON_Delete(r);

	/* the next page: the two before them */
	hp = key_params("sessionKey", "hist");
	cJSON_AddNumberToObject(hp, "offset", 2);
	cJSON_AddNumberToObject(hp, "limit", 2);
	r = history(c, hp);
	p = jget(r, "payload");
	const cJSON *msgs = jget(p, "messages");
	cr_assert_eq(cJSON_GetArraySize(msgs), 2);
	cr_assert_str_eq(jstr(cJSON_GetArrayItem(msgs, 0), "role"), "user");
	cr_assert_eq(jstr(cJSON_GetArrayItem(msgs, 0), "content")[0], 'b'); /* the second turn's */
	cr_assert_eq(jnum(p, "nextOffset"), 4);
	cJSON_Delete(r);

	/* inputRunIds: a run whose turn is in the transcript is consumed,
	 * named by its run id or by the idempotency key it was sent under
	 * (OpenClaw's clients name a run they sent so) */
	hp = key_params("sessionKey", "hist");
	cJSON *ids = cJSON_AddArrayToObject(hp, "inputRunIds");
	cJSON_AddItemToArray(ids, cJSON_CreateString(runs[1]));
	cJSON_AddItemToArray(ids, cJSON_CreateString("not-a-run-of-this-session"));
	cJSON_AddItemToArray(ids, cJSON_CreateString("h-2"));
	r = history(c, hp);
	const cJSON *rec = jget(jget(r, "payload"), "inputReceipts");
	cr_assert_eq(cJSON_GetArraySize(rec), 3);
	cr_assert_str_eq(jstr(cJSON_GetArrayItem(rec, 0), "runId"), runs[1]);
	cr_assert_str_eq(jstr(cJSON_GetArrayItem(rec, 0), "state"), "consumed");
	cr_assert_str_neq(jstr(cJSON_GetArrayItem(rec, 0), "consumedByEventId"), "");
	cr_assert_str_eq(jstr(cJSON_GetArrayItem(rec, 1), "state"), "pending");
	cr_assert_str_eq(jstr(cJSON_GetArrayItem(rec, 2), "runId"), "h-2");
	cr_assert_str_eq(jstr(cJSON_GetArrayItem(rec, 2), "state"), "consumed");
	cr_assert_eq(cJSON_GetArraySize(jget(jget(r, "payload"), "inputConsumptions")), 2);
	cJSON_Delete(r);
	cl_free(c);
	gw_stop(&f);
}

Test(agent_gateway_sessions, startup_answers_history_with_metadata_and_describe_the_row)
{
	gw_t f;
	gw_start(&f, GW_CONFIG(""), NULL);
	cl_t *c = cl_connect(f.port);
	char run[80];
	chat_send(c, "boot", "hello there", "b-1", run);
	chat_final(c, run);
	cJSON *r = cl_call(c, "chat.startup", key_params("sessionKey", "boot"));
	cr_assert(jok(r), "%s", cJSON_PrintUnformatted(r));
	const cJSON *p = jget(r, "payload");
	cr_assert_str_eq(jstr(p, "sessionKey"), "boot");
	cr_assert_eq(cJSON_GetArraySize(jget(p, "messages")), 2);
	cr_assert_str_eq(jstr(jget(p, "metadata"), "agentId"), "main");
	cr_assert(cJSON_IsArray(jget(jget(p, "metadata"), "models")));
	cr_assert_not_null(jget(p, "sessionInfo"));
	cJSON_Delete(r);

	r = cl_call(c, "chat.metadata", NULL);
	cr_assert(jok(r));
	cr_assert_str_eq(jstr(jget(r, "payload"), "agentId"), "main");
	cJSON_Delete(r);

	r = cl_call(c, "sessions.describe", key_params("key", "boot"));
	cr_assert(jok(r), "%s", cJSON_PrintUnformatted(r));
	const cJSON *s = jget(jget(r, "payload"), "session");
	cr_assert_str_eq(jstr(s, "key"), "boot");
	cr_assert_eq(jnum(s, "messageCount"), 2);
	cr_assert(cJSON_IsFalse(jget(s, "hasActiveRun")));
	cJSON_Delete(r);
	r = cl_call(c, "sessions.describe", key_params("key", "nobody-here"));
	cr_assert(cJSON_IsNull(jget(jget(r, "payload"), "session")));
	cJSON_Delete(r);

	/* a cursor this gateway never gave: fetch a tail page again */
	cJSON *hp = key_params("sessionKey", "boot");
	cJSON_AddStringToObject(hp, "cursor", "whatever");
	r = cl_call(c, "chat.history", hp);
	cr_assert_str_eq(jstr(jget(r, "payload"), "kind"), "reset");
	cJSON_Delete(r);

	cJSON *vp = cJSON_CreateObject();
	cJSON_AddTrueToObject(vp, "visible");
	r = cl_call(c, "sessions.observer.visibility", vp);
	cr_assert(cJSON_IsTrue(jget(jget(r, "payload"), "ok")));
	cJSON_Delete(r);
	cl_free(c);
	gw_stop(&f);
}

/* The next sessions.changed for `key` with `field` == `value`. */
static cJSON *await_changed(cl_t *c, const char *key, const char *field, const char *value)
{
	for (;;) {
		cJSON *e = cl_await_event(c, "sessions.changed", 15000);
		cr_assert_not_null(e, "no sessions.changed %s=%s for %s", field, value, key);
		const cJSON *p = jget(e, "payload");
		if (jstr(p, "sessionKey") && !strcmp(jstr(p, "sessionKey"), key) && jstr(p, field) &&
		    !strcmp(jstr(p, field), value))
			return e;
		cJSON_Delete(e);
	}
}

Test(agent_gateway_sessions, subscribers_see_a_new_session_and_its_messages_in_order_until_they_unsubscribe)
{
	gw_t f;
	gw_start(&f, GW_CONFIG(""), NULL);
	cl_t *watcher = cl_connect(f.port);
	cl_t *sender = cl_connect(f.port);
	cJSON *r = cl_call(watcher, "sessions.subscribe", NULL);
	cr_assert(jok(r));
	cr_assert(cJSON_IsTrue(jget(jget(r, "payload"), "subscribed")));
	cJSON_Delete(r);
	r = cl_call(watcher, "sessions.messages.subscribe", key_params("key", "fresh"));
	cr_assert(jok(r), "%s", cJSON_PrintUnformatted(r));
	cr_assert_str_eq(jstr(jget(r, "payload"), "key"), "fresh");
	cJSON_Delete(r);

	char run[80];
	chat_send(sender, "fresh", "a brand new session", "f-1", run);
	cJSON *e = await_changed(watcher, "fresh", "reason", "send");
	cr_assert_str_eq(jstr(jget(e, "payload"), "runId"), run);
	cJSON_Delete(e);
	e = await_changed(watcher, "fresh", "phase", "start");
	cr_assert_str_eq(jstr(jget(e, "payload"), "runId"), run);
	cJSON_Delete(e);
	e = await_changed(watcher, "fresh", "phase", "end");
	cr_assert_str_eq(jstr(jget(e, "payload"), "status"), "ok");
	cJSON_Delete(e);

	/* the user's turn, then the reply, numbered 1, 2 */
	const char *roles[] = {"user", "assistant"};
	for (int i = 0; i < 2; i++) {
		e = cl_await_event(watcher, "session.message", 15000);
		cr_assert_not_null(e, "no session.message %d", i + 1);
		const cJSON *p = jget(e, "payload");
		cr_assert_str_eq(jstr(p, "sessionKey"), "fresh");
		cr_assert_eq(jnum(p, "seq"), i + 1);
		cr_assert_str_eq(jstr(p, "runId"), run);
		cr_assert_str_eq(jstr(jget(p, "message"), "role"), roles[i]);
		cJSON_Delete(e);
	}

	/* unsubscribed: another turn brings neither event */
	r = cl_call(watcher, "sessions.messages.unsubscribe", key_params("key", "fresh"));
	cr_assert(cJSON_IsFalse(jget(jget(r, "payload"), "subscribed")));
	cJSON_Delete(r);
	r = cl_call(watcher, "sessions.unsubscribe", NULL);
	cr_assert(jok(r));
	cJSON_Delete(r);
	chat_send(sender, "fresh", "a second turn", "f-2", run);
	chat_final(sender, run);
	/* the history read after the run's end orders after its events */
	r = cl_call(watcher, "chat.history", key_params("sessionKey", "fresh"));
	cr_assert_eq(cJSON_GetArraySize(jget(jget(r, "payload"), "messages")), 4);
	cJSON_Delete(r);
	cr_assert_null(cl_await_event(watcher, "session.message", 500));
	cr_assert_null(cl_await_event(watcher, "sessions.changed", 10));

	/* with sessions.list's params, the first page comes with the answer */
	cJSON *lp = cJSON_CreateObject();
	cJSON_AddNumberToObject(lp, "limit", 5);
	r = cl_call(watcher, "sessions.subscribe", lp);
	cr_assert(cJSON_IsTrue(jget(jget(r, "payload"), "subscribed")), "%s", cJSON_PrintUnformatted(r));
	const cJSON *rows = jget(jget(jget(r, "payload"), "list"), "sessions");
	cr_assert_eq(cJSON_GetArraySize(rows), 1);
	cr_assert_str_eq(jstr(cJSON_GetArrayItem(rows, 0), "key"), "fresh");
	cJSON_Delete(r);
	cl_free(sender);
	cl_free(watcher);
	gw_stop(&f);
}

Test(agent_gateway_sessions, a_client_that_leaves_subscribed_leaves_nothing_behind)
{
	gw_t f;
	gw_start(&f, GW_CONFIG(""), NULL);
	cl_t *watcher = cl_connect(f.port);
	cl_t *sender = cl_connect(f.port);
	cJSON_Delete(cl_call(watcher, "sessions.subscribe", NULL));
	cJSON_Delete(cl_call(watcher, "sessions.messages.subscribe", key_params("key", "gone")));
	char run[80];
	chat_send(sender, "gone", "anyone there", "g-1", run);
	cl_free(watcher); /* mid-run, its events unread */
	chat_final(sender, run);
	cl_free(sender);
	gw_stop(&f); /* ASan: the feed subscription went with the connection */
}

Test(agent_gateway_sessions, params_outside_openclaws_schema_are_refused)
{
	gw_t f;
	gw_start(&f, GW_CONFIG(""), NULL);
	cl_t *c = cl_connect(f.port);
	struct {
		const char *method, *params, *why;
	} cases[] = {
		{"chat.history", "{\"sessionKey\":\"s\",\"bogus\":1}", "bogus"},
		{"chat.history", "{\"sessionKey\":\"s\",\"maxBytes\":100}", "maxBytes: must be at least 1024"},
		{"chat.history", "{\"sessionKey\":\"s\",\"limit\":1001}", "limit: must be 1 to 1000"},
		{"chat.history", "{\"sessionKey\":\"s\",\"inputRunIds\":[]}", "inputRunIds"},
		{"chat.history", "{\"sessionKey\":\"s\",\"inputRunIds\":[\"a\",\"a\"]}", "must not repeat"},
		{"chat.history", "{\"sessionKey\":\"s\",\"inputRunIds\":[7]}", "inputRunIds"},
		{"chat.history", "{\"sessionKey\":\"s\",\"agentId\":\"other\"}", "agentId: unknown agent"},
		{"chat.startup", "{\"shortId\":\"abc\",\"agentId\":\"main\"}", "shortId"},
		{"chat.startup", "{\"sessionKey\":\"s\",\"extra\":true}", "extra"},
		{"chat.metadata", "{\"sessionKey\":\"s\",\"authProfileId\":\"p\"}", "cannot be combined"},
		{"sessions.describe", "{}", "key: is required"},
		{"sessions.messages.subscribe", "{}", "key: is required"},
		/* a client without operator.approvals on a paired device, or admin */
		{"sessions.messages.subscribe", "{\"key\":\"s\",\"includeApprovals\":true}",
		 "includeApprovals requires a paired device"},
		{"sessions.messages.unsubscribe", "{\"key\":\"s\",\"x\":1}", "x"},
		{"sessions.observer.visibility", "{}", "visible: is required"},
		{"sessions.observer.visibility", "{\"visible\":\"yes\"}", "visible"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char id[32];
		cl_req(c, cases[i].method, cJSON_Parse(cases[i].params), id);
		cl_expect_invalid(c, id, cases[i].why, 10000);
	}
	cl_free(c);
	gw_stop(&f);
}

/* sessions.resolve's answer to `params` (JSON text), which must succeed. */
static cJSON *resolve(cl_t *c, const char *params)
{
	cJSON *r = cl_call(c, "sessions.resolve", cJSON_Parse(params));
	cr_assert(jok(r), "%s: %s", params, cJSON_PrintUnformatted(r));
	cJSON *p = cJSON_DetachItemFromObject(r, "payload");
	cJSON_Delete(r);
	return p;
}

static void expect_resolved(cl_t *c, const char *params, const char *key)
{
	cJSON *p = resolve(c, params);
	cr_assert(cJSON_IsTrue(jget(p, "ok")), "%s: %s", params, cJSON_PrintUnformatted(p));
	cr_assert_str_eq(jstr(p, "key"), key, "%s", params);
	cr_assert_str_eq(jstr(p, "agentId"), "main");
	cJSON_Delete(p);
}

#define UUID_A "0f1e2d3c-4b5a-6978-8899-aabbccddeeff"
#define UUID_B "0f1e2d3c-0000-4000-8000-000000000001"

Test(agent_gateway_sessions, resolve_finds_a_session_by_key_id_reference_or_short_id)
{
	gw_t f;
	gw_start(&f, GW_CONFIG(""), NULL);
	cl_t *c = cl_connect(f.port);
	char run[80];
	static const char *const keys[] = {"res-plain", "agent:main:dashboard:" UUID_A, "agent:main:dashboard:" UUID_B};
	for (size_t i = 0; i < 3; i++) {
		char idem[16];
		snprintf(idem, sizeof(idem), "res-%zu", i);
		chat_send(c, keys[i], "hello", idem, run);
		chat_final(c, run);
	}
	expect_resolved(c, "{\"key\":\"res-plain\",\"agentId\":\"main\"}", "res-plain");
	expect_resolved(c, "{\"reference\":{\"key\":\"res-plain\",\"slug\":\"any\"},\"includeGlobal\":true}",
			"res-plain");
	/* OpenClaw's canonical form of a key finds the session stored under
	 * the plain one, and back */
	expect_resolved(c, "{\"key\":\"agent:main:res-plain\",\"allowMissing\":true}", "res-plain");
	expect_resolved(c, "{\"reference\":{\"key\":\"dashboard:" UUID_A "\"}}", "agent:main:dashboard:" UUID_A);
	/* by the session id sessions.list shows */
	cJSON *l = cl_call(c, "sessions.list", NULL);
	const cJSON *row;
	char sid[128] = "";
	cJSON_ArrayForEach(row, jget(jget(l, "payload"), "sessions"))
		if (!strcmp(jstr(row, "key"), "res-plain"))
			snprintf(sid, sizeof(sid), "{\"sessionId\":\"%s\"}", jstr(row, "sessionId"));
	cJSON_Delete(l);
	cr_assert_str_neq(sid, "", "res-plain not listed");
	expect_resolved(c, sid, "res-plain");
	/* a short id: a prefix of the UUID a key ends with, dashes left out */
	expect_resolved(c, "{\"shortId\":\"0F1E2D3C4B5A\",\"slugHint\":\"x\"}", "agent:main:dashboard:" UUID_A);
	cJSON *p = resolve(c, "{\"shortId\":\"0f1e2d3c\"}");
	cr_assert(cJSON_IsFalse(jget(p, "ok")));
	cr_assert_eq(cJSON_GetArraySize(jget(p, "candidates")), 2, "%s", cJSON_PrintUnformatted(p));
	cJSON_Delete(p);

	/* nothing matches: an error, or {ok: false} when missing is allowed */
	static const char *const missing[][2] = {
		{"{\"key\":\"no-such\"}", "No session found: no-such"},
		{"{\"sessionId\":\"no-such-id\"}", "No session found: no-such-id"},
		{"{\"label\":\"work\"}", "No session found with label: work"},
		{"{\"shortId\":\"deadbeef\"}", "No session found: deadbeef"},
		{"{\"reference\":{\"key\":\"gone\"}}", "No session found: gone"},
	};
	for (size_t i = 0; i < sizeof(missing) / sizeof(missing[0]); i++) {
		char id[32];
		cl_req(c, "sessions.resolve", cJSON_Parse(missing[i][0]), id);
		cl_expect_invalid(c, id, missing[i][1], 10000);
		cJSON *q = cJSON_Parse(missing[i][0]);
		cJSON_AddTrueToObject(q, "allowMissing");
		cJSON *r = cl_call(c, "sessions.resolve", q);
		cr_assert(jok(r), "%s", cJSON_PrintUnformatted(r));
		cJSON *want = cJSON_Parse("{\"ok\":false}");
		cr_assert(cJSON_Compare(jget(r, "payload"), want, true), "%s", cJSON_PrintUnformatted(r));
		cJSON_Delete(want);
		cJSON_Delete(r);
	}
	/* exactly one selector, as OpenClaw's */
	static const char *const refused[][2] = {
		{"{}", "Either key, sessionId, label, shortId, or reference is required"},
		{"{\"key\":\"a\",\"label\":\"b\"}", "not multiple"},
		{"{\"key\":\"a\",\"slugHint\":\"b\"}", "slugHint requires shortId"},
		{"{\"shortId\":\"xyz\"}", "shortId must be 8-32 hexadecimal characters"},
		{"{\"key\":\"res-plain\",\"agentId\":\"other\"}", "agentId: unknown agent"},
		{"{\"reference\":{\"slug\":\"s\"}}", "reference.key: is required"},
		{"{\"key\":\"a\",\"bogus\":1}", "bogus"},
	};
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		char id[32];
		cl_req(c, "sessions.resolve", cJSON_Parse(refused[i][0]), id);
		cl_expect_invalid(c, id, refused[i][1], 10000);
	}
	cl_free(c);
	gw_stop(&f);
}

Test(agent_gateway_sessions, messages_subscribe_takes_include_approvals_from_a_client_that_may_review_them)
{
	gw_t f;
	gw_start(&f, GW_CONFIG(""), NULL);
	cl_t *c = cl_connect_scopes(f.port, "[\"operator.admin\"]");
	cJSON *r = cl_call(c, "sessions.messages.subscribe", cJSON_Parse("{\"key\":\"s\",\"includeApprovals\":true}"));
	cr_assert(jok(r), "%s", cJSON_PrintUnformatted(r));
	cr_assert(cJSON_IsTrue(jget(jget(r, "payload"), "subscribed")), "%s", cJSON_PrintUnformatted(r));
	cJSON_Delete(r);
	cl_free(c);
	gw_stop(&f);
}

Test(agent_gateway_sessions, create_starts_a_new_session_with_its_first_message)
{
	gw_t f;
	gw_start(&f, GW_CONFIG(""), NULL);
	cl_t *c = cl_connect(f.port);
	cJSON *r = cl_call(c, "sessions.create",
			   cJSON_Parse("{\"agentId\":\"main\",\"message\":\"hello\",\"visibility\":\"private\"}"));
	cr_assert(jok(r), "%s", cJSON_PrintUnformatted(r));
	const cJSON *p = jget(r, "payload");
	cr_assert(cJSON_IsTrue(jget(p, "ok")));
	cr_assert(cJSON_IsTrue(jget(p, "runStarted")), "%s", cJSON_PrintUnformatted(p));
	cr_assert_str_eq(jstr(p, "status"), "started");
	char key[128], run[80], q[192];
	snprintf(key, sizeof(key), "%s", jstr(p, "key"));
	snprintf(run, sizeof(run), "%s", jstr(p, "runId"));
	cJSON_Delete(r);
	/* OpenClaw's key for a session the Control UI makes, with a UUID */
	cr_assert_eq(strncmp(key, "agent:main:dashboard:", 21), 0, "%s", key);
	cr_assert_eq(strlen(key), 21 + 36, "%s", key);
	chat_final(c, run);
	/* the session is there to find, with its message and the reply */
	snprintf(q, sizeof(q), "{\"key\":\"%s\"}", key);
	expect_resolved(c, q, key);
	cJSON *h = history(c, key_params("sessionKey", key));
	cr_assert_eq(cJSON_GetArraySize(jget(jget(h, "payload"), "messages")), 2);
	cJSON_Delete(h);

	/* a key asked for is used; the same idempotency key is the same run */
	static const char *const again = "{\"key\":\"made\",\"message\":\"hi\",\"idempotencyKey\":\"mk-1\"}";
	r = cl_call(c, "sessions.create", cJSON_Parse(again));
	cr_assert_str_eq(jstr(jget(r, "payload"), "key"), "made");
	snprintf(run, sizeof(run), "%s", jstr(jget(r, "payload"), "runId"));
	cJSON_Delete(r);
	chat_final(c, run);
	r = cl_call(c, "sessions.create", cJSON_Parse(again));
	cr_assert(cJSON_IsFalse(jget(jget(r, "payload"), "runStarted")), "%s", cJSON_PrintUnformatted(r));
	cr_assert_str_eq(jstr(jget(r, "payload"), "runId"), run);
	cJSON_Delete(r);

	static const char *const refused[][2] = {
		{"{\"agentId\":\"main\"}", "message: is required here"},
		{"{\"message\":\"\"}", "message: is required here"},
		{"{\"message\":\"x\",\"agentId\":\"other\"}", "agentId: unknown agent"},
	};
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		char id[32];
		cl_req(c, "sessions.create", cJSON_Parse(refused[i][0]), id);
		cl_expect_invalid(c, id, refused[i][1], 10000);
	}
	cl_free(c);
	gw_stop(&f);
}

/* Every subscriber gets each stored message named as chat.history names it
 * (OpenClaw's clients keep one copy of a message they hold twice only when
 * both are alike): its seq (also as messageSeq), its run, and for the
 * run's prompt the idempotency key it was sent under, by which the sender
 * matches the copy it showed while the message was on its way. */
Test(agent_gateway_sessions, session_message_names_each_message_as_history_does)
{
	gw_t f;
	gw_start(&f, GW_CONFIG(""), NULL);
	cl_t *sender = cl_connect(f.port);
	cl_t *watcher = cl_connect(f.port);
	cl_t *both[] = {sender, watcher};
	for (int i = 0; i < 2; i++) {
		cJSON *r = cl_call(both[i], "sessions.messages.subscribe", key_params("key", "own"));
		cr_assert(jok(r), "%s", cJSON_PrintUnformatted(r));
		cJSON_Delete(r);
	}
	char run[80];
	chat_send(sender, "own", "mine", "own-1", run);
	chat_final(sender, run);
	cJSON *h = history(sender, key_params("sessionKey", "own"));
	const cJSON *stored = jget(jget(h, "payload"), "messages");
	cr_assert_eq(cJSON_GetArraySize(stored), 2, "%s", cJSON_PrintUnformatted(h));
	for (int i = 0; i < 2; i++) {
		for (int k = 0; k < 2; k++) {
			cJSON *e = cl_await_event(both[i], "session.message", 15000);
			cr_assert_not_null(e);
			const cJSON *p = jget(e, "payload");
			const cJSON *m = jget(p, "message");
			const cJSON *want = cJSON_GetArrayItem(stored, k);
			cr_assert(cJSON_Compare(m, want, true), "%s\n%s", cJSON_PrintUnformatted(m),
				  cJSON_PrintUnformatted(want));
			const cJSON *oc = jget(m, "__openclaw");
			cr_assert_eq(jnum(oc, "seq"), k + 1);
			cr_assert_eq(jnum(p, "messageSeq"), k + 1);
			cr_assert_str_eq(jstr(oc, "runId"), run);
			cr_assert_str_eq(jstr(oc, "idempotencyKey"), k == 0 ? "own-1" : "", "%s",
					 cJSON_PrintUnformatted(m));
			cJSON_Delete(e);
		}
	}
	cJSON_Delete(h);
	cl_free(sender);
	cl_free(watcher);
	gw_stop(&f);
}
