/*
 * The gateway takes only text, end to end on loopback (a real gateway,
 * agent, store and embedded mock LLM): bytes that are not UTF-8, a NUL
 * written as "\u0000" and lone UTF-16 surrogate escapes are refused at the
 * edge, on the OpenAI endpoint (400) and on the WebSocket RPC (a binary
 * frame: INVALID_REQUEST under the request's id, the connection kept; a
 * text frame that is not UTF-8: close 1007); nothing is stored and the
 * model is never asked. Text that is not ASCII, raw or escaped, still
 * goes through whole.
 */
#include <criterion/criterion.h>
#include <curl/curl.h>

#include "curl_client.h"
#include "gateway_harness.h"
#include "io/utf8.h"

TestSuite(gateway_text, .timeout = 120);

#define AUTH "Authorization: Bearer " GW_TOKEN

/* Session `key`'s transcript rows, joined by newlines (the caller
 * frees); "" when it has none. */
static char *transcript(gw_t *f, const char *key)
{
	pc_store_history_t *hist = NULL;
	int rc = pc_store_history(f->h.store, key, &hist);
	if (rc == PC_ENOTFOUND)
		return strdup("");
	cr_assert_eq(rc, 0);
	size_t cap = 1, n = pc_store_history_count(hist);
	for (size_t i = 0; i < n; i++) {
		pc_store_msg_t m;
		pc_store_history_get(hist, i, &m);
		cap += strlen(m.content) + 1;
	}
	char *out = calloc(1, cap);
	cr_assert_not_null(out);
	for (size_t i = 0; i < n; i++) {
		pc_store_msg_t m;
		pc_store_history_get(hist, i, &m);
		strcat(out, m.content);
		strcat(out, "\n");
	}
	pc_store_history_free(hist);
	return out;
}

/* Nothing of session `key` was stored, and the model was never asked. */
static void expect_untouched(gw_t *f, const char *key)
{
	char *t = transcript(f, key);
	cr_assert_str_eq(t, "", "session %s has rows: %s", key, t);
	free(t);
	cr_assert_eq(request_count(&f->h), 0, "the model was asked");
}

/* ---- the OpenAI endpoint ---- */

/* POSTs `body` (body_len bytes) with the session-key header `key` (NULL:
 * none); the answer's status; its error message into msg. */
static long post_chat(gw_t *f, const char *key_header, const char *body, size_t body_len, char *msg, size_t cap)
{
	const char *hdrs[3] = {AUTH, key_header, NULL};
	resp_t r = {0};
	curl_request(f->port, "POST", "/v1/chat/completions", hdrs, body, body_len, 30000, &r);
	cr_assert_eq(r.code, CURLE_OK, "%s", curl_easy_strerror(r.code));
	cJSON *j = cJSON_Parse(r.body);
	cr_assert_not_null(j, "not JSON: %s", r.body);
	const cJSON *err = jget(j, "error");
	snprintf(msg, cap, "%s", jstr(err, "message"));
	if (r.status >= 400) {
		cr_assert_str_eq(jstr(err, "type"), "invalid_request_error", "%s", r.body);
		cr_assert(cJSON_HasObjectItem(err, "param") && cJSON_HasObjectItem(err, "code"), "%s", r.body);
	} else {
		const cJSON *ch = cJSON_GetArrayItem(jget(j, "choices"), 0);
		snprintf(msg, cap, "%s", jstr(jget(ch, "message"), "content"));
	}
	cJSON_Delete(j);
	long status = r.status;
	resp_free(&r);
	return status;
}

static long post_text(gw_t *f, const char *key_header, const char *body, char *msg, size_t cap)
{
	return post_chat(f, key_header, body, strlen(body), msg, cap);
}

#define USER_MSG(text) "{\"model\":\"pincer\",\"messages\":[{\"role\":\"user\",\"content\":\"" text "\"}]}"
#define VICTIM_KEY "x-pincer-session-key: victim"
#define NOT_UTF8 "The request body is not valid UTF-8."
#define LONE_SURROGATE "The request body holds a lone UTF-16 surrogate escape."
#define NUL_CHAR "The request body holds a NUL character (\\u0000)."

/* POSTs `body` in session "victim": refused with a 400 that says `want`. */
static void expect_victim_refused(gw_t *f, const char *body, const char *want)
{
	char msg[256];
	cr_assert_eq(post_text(f, VICTIM_KEY, body, msg, sizeof(msg)), 400, "%s", msg);
	cr_assert_str_eq(msg, want);
}

/* A fresh gateway refuses each of the `n` bodies, POSTed in session
 * "victim", with a 400 that says `want`; nothing runs. */
static void expect_bodies_refused(const char *const *bodies, size_t n, const char *want)
{
	gw_t f;
	gw_start(&f, GW_CONFIG(""), NULL);
	for (size_t i = 0; i < n; i++)
		expect_victim_refused(&f, bodies[i], want);
	expect_untouched(&f, "victim");
	gw_stop(&f);
}

Test(gateway_text, http_a_body_that_is_not_utf8_is_refused_and_nothing_runs)
{
	/* Bytes that are not UTF-8, an encoded surrogate, an overlong form. */
	static const char *const bodies[] = {
		USER_MSG("caf\xe9 \xff\xfe"),
		USER_MSG("\xed\xa0\x80"),
		USER_MSG("\xc0\xaf"),
	};
	expect_bodies_refused(bodies, sizeof(bodies) / sizeof(bodies[0]), NOT_UTF8);
}

Test(gateway_text, http_lone_surrogate_escapes_are_refused_with_their_reason)
{
	static const char *const bodies[] = {
		USER_MSG("a\\ud800b"),
		USER_MSG("\\udc00"),
		USER_MSG("\\ud800\\u0041"),
	};
	expect_bodies_refused(bodies, sizeof(bodies) / sizeof(bodies[0]), LONE_SURROGATE);
}

Test(gateway_text, http_nul_in_the_message_or_the_user_is_refused_not_cut)
{
	gw_t f;
	gw_start(&f, GW_CONFIG(""), NULL);
	expect_victim_refused(&f, USER_MSG("hi\\u0000 and more"), NUL_CHAR);
	/* `user` names the session: "victim\u0000junk" must not run as "victim". */
	const char *body = "{\"model\":\"pincer\",\"user\":\"victim\\u0000junk\","
			   "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
	char msg[256];
	cr_assert_eq(post_text(&f, NULL, body, msg, sizeof(msg)), 400);
	/* A raw 0 byte reads the same as its escape. */
	const char raw[] = "{\"model\":\"pincer\",\"messages\":[{\"role\":\"user\",\"content\":\"a\0b\"}]}";
	cr_assert_eq(post_chat(&f, VICTIM_KEY, raw, sizeof(raw) - 1, msg, sizeof(msg)), 400);
	expect_untouched(&f, "victim");
	expect_untouched(&f, "agent:main:openai-user:victim");
	gw_stop(&f);
}

Test(gateway_text, http_a_session_header_that_is_not_utf8_is_refused)
{
	gw_t f;
	gw_start(&f, GW_CONFIG(""), NULL);
	char msg[256];
	cr_assert_eq(post_text(&f, "x-pincer-session-key: victim\xff", USER_MSG("hi"), msg, sizeof(msg)), 400);
	cr_assert_not_null(strstr(msg, "not UTF-8"), "%s", msg);
	cr_assert_eq(request_count(&f.h), 0);
	gw_stop(&f);
}

Test(gateway_text, http_text_beyond_ascii_goes_through_whole)
{
	gw_t f;
	gw_start(&f, GW_CONFIG(""), NULL);
	char msg[256];
	/* Raw UTF-8, and an emoji as a surrogate pair of escapes. */
	cr_assert_eq(post_text(&f, "x-pincer-session-key: intl", USER_MSG("h\xc3\xa9llo \xe2\x9c\x93 \\ud83d\\ude00"),
			       msg, sizeof(msg)),
		     200, "%s", msg);
	const char *want = "h\xc3\xa9llo \xe2\x9c\x93 \xf0\x9f\x98\x80";
	cr_assert_str_eq(msg, want, "the mock echoes the message");
	char *t = transcript(&f, "intl");
	cr_assert_not_null(strstr(t, want), "%s", t);
	free(t);
	cJSON *reqs = mock_requests(&f.h);
	char role[32], text[256];
	request_last_message(reqs, 0, role, sizeof(role), text, sizeof(text));
	cr_assert_str_eq(text, want);
	cJSON_Delete(reqs);
	gw_stop(&f);
}

/* ---- the WebSocket RPC ---- */

typedef enum frame_kind { AS_TEXT, AS_BINARY } frame_kind_t;

/* Sends an agent request in session `key` carrying `message` (JSON string
 * content, escapes as written) under id `id`, in a frame of `kind`. */
static void send_agent(cl_t *c, frame_kind_t kind, const char *id, const char *key, const char *message)
{
	char frame[512];
	snprintf(frame, sizeof(frame),
		 "{\"type\":\"req\",\"id\":\"%s\",\"method\":\"agent\",\"params\":{\"message\":\"%s\","
		 "\"idempotencyKey\":\"k-%s\",\"sessionKey\":\"%s\"}}",
		 id, message, id, key);
	if (kind == AS_BINARY)
		cl_send_binary(c, frame);
	else
		cl_send_raw(c, frame);
}

/* The connection still serves requests. */
static void expect_alive(cl_t *c)
{
	cJSON *r = cl_call(c, "health", NULL);
	cr_assert(jok(r), "%s", cJSON_PrintUnformatted(r));
	cJSON_Delete(r);
}

/* RFC 6455 (8.1): a text frame that is not UTF-8 fails the connection,
 * with 1007, before the gateway reads it. */
Test(gateway_text, ws_a_text_frame_that_is_not_utf8_closes_the_connection_with_1007)
{
	gw_t f;
	gw_start(&f, GW_CONFIG(""), NULL);
	cl_t *c = cl_connect(f.port);
	send_agent(c, AS_TEXT, "bad-1", "victim", "caf\xe9 \xff");
	cl_expect_close(c, 1007);
	expect_untouched(&f, "victim");
	cl_free(c);
	gw_stop(&f);
}

Test(gateway_text, ws_a_binary_frame_that_is_not_utf8_is_refused_under_its_id)
{
	gw_t f;
	gw_start(&f, GW_CONFIG(""), NULL);
	cl_t *c = cl_connect(f.port);
	send_agent(c, AS_BINARY, "bad-2", "victim", "\xed\xa0\x80");
	cl_expect_invalid(c, "bad-2", "invalid frame: the text is not valid UTF-8", 10000);
	expect_alive(c);
	expect_untouched(&f, "victim");
	cl_free(c);
	gw_stop(&f);
}

/* Requests whose session key or message holds a NUL or a lone surrogate
 * escape, each with its frame kind and the reason it is refused for. */
static const struct {
	frame_kind_t kind;
	const char *id, *key, *message, *why;
} not_text[] = {
	{AS_TEXT, "nul-key", "victim\\u0000junk", "hi", "holds a NUL character (\\u0000)"},
	{AS_TEXT, "nul-msg", "victim", "hi\\u0000there", "holds a NUL character (\\u0000)"},
	{AS_BINARY, "lone", "victim", "a\\ud800b", "holds a lone UTF-16 surrogate escape"},
};

Test(gateway_text, ws_nul_and_lone_surrogates_are_refused_and_the_session_is_untouched)
{
	gw_t f;
	gw_start(&f, GW_CONFIG(""), NULL);
	cl_t *c = cl_connect(f.port);
	for (size_t i = 0; i < sizeof(not_text) / sizeof(not_text[0]); i++) {
		send_agent(c, not_text[i].kind, not_text[i].id, not_text[i].key, not_text[i].message);
		cl_expect_invalid(c, not_text[i].id, not_text[i].why, 10000);
	}
	/* An id that is itself not text cannot be echoed: "invalid" instead. */
	cl_send_raw(c, "{\"type\":\"req\",\"id\":\"x\\u0000y\",\"method\":\"health\"}");
	cl_expect_invalid(c, "invalid", "holds a NUL character", 10000);
	expect_alive(c);
	expect_untouched(&f, "victim");
	cl_free(c);
	gw_stop(&f);
}

Test(gateway_text, ws_a_first_binary_frame_that_is_not_text_is_answered_then_closed)
{
	gw_t f;
	gw_start(&f, GW_CONFIG(""), NULL);
	expect_first_frame_refused(f.port,
				   "{\"type\":\"req\",\"id\":\"c1\",\"method\":\"connect\",\"params\":{\"x\":\"\xff\"}}", true,
				   "c1", "invalid frame: the text is not valid UTF-8");
	gw_stop(&f);
}

Test(gateway_text, ws_text_beyond_ascii_goes_through_whole)
{
	gw_t f;
	gw_start(&f, GW_CONFIG(""), NULL);
	cl_t *c = cl_connect(f.port);
	send_agent(c, AS_TEXT, "intl", "intl", "h\xc3\xa9llo \xe2\x9c\x93 \\ud83d\\ude00");
	cJSON *r = cl_await_res(c, "intl", 10000);
	cr_assert(r && jok(r), "%s", r ? cJSON_PrintUnformatted(r) : "no answer");
	cJSON_Delete(r);
	r = cl_await_res(c, "intl", 30000);
	cr_assert(r && jok(r), "%s", r ? cJSON_PrintUnformatted(r) : "no final answer");
	const char *want = "h\xc3\xa9llo \xe2\x9c\x93 \xf0\x9f\x98\x80";
	const cJSON *res = jget(jget(r, "payload"), "result");
	cr_assert_str_eq(jstr(cJSON_GetArrayItem(jget(res, "payloads"), 0), "text"), want);
	cJSON_Delete(r);
	char *t = transcript(&f, "intl");
	cr_assert_not_null(strstr(t, want), "%s", t);
	free(t);
	cl_free(c);
	gw_stop(&f);
}
