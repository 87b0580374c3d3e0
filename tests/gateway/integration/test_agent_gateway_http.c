/*
 * The gateway's plain-HTTP surface end to end on loopback: a real gateway
 * (runtime, I/O, store, agent with the embedded mock LLM) and a libcurl
 * client. OpenAI-compatible chat completions (plain and streamed), session
 * routing, model names, errors in OpenAI's shape, /v1/models, the probes
 * across a drain, /metrics, and a client that leaves mid-stream.
 */
#include <criterion/criterion.h>
#include <curl/curl.h>
#include <pthread.h>
#include <regex.h>

#include "agent_harness.h"
#include "agents/gateway/gateway.h"
#include "agents/gateway/http_util_internal.h"
#include "curl_client.h"
#include "trace_capture.h"

TestSuite(gateway_http, .timeout = 120);

/* The providers (the embedded mock twice) and the agent's models. */
#define PROVIDERS                                                                                  \
	"\"providers\":{"                                                                           \
	"\"mock\":{\"api\":\"openai-completions\",\"embedded\":true,\"models\":[{\"id\":\"m1\"}],"  \
	"\"profiles\":[{\"id\":\"a\",\"apiKey\":\"key-a\"}]},"                                      \
	"\"fb\":{\"api\":\"openai-completions\",\"embedded\":true,\"apiKey\":\"key-fb\"}},"         \
	"\"agents\":{\"defaults\":{\"model\":\"mock/m1\",\"fallbacks\":[\"fb/m2\"],"                \
	"\"maxConcurrent\":16,\"sessionIdleSeconds\":1}}"

typedef struct gw {
	harness_t h;
	pc_gateway_t *g;
	uint16_t port;
} gw_t;

static void gw_start(gw_t *e, const char *gateway_json)
{
	char cfg[2048];
	snprintf(cfg, sizeof(cfg), "{" PROVIDERS "%s%s}", gateway_json ? ",\"gateway\":" : "",
		 gateway_json ? gateway_json : "");
	harness_start_with(&e->h, cfg, "[]", NULL); /* no script: every answer is the echo */
	pc_gateway_options_t o = {
	    .rt = e->h.rt, .io = e->h.io, .agent = e->h.agent, .config = e->h.cfg, .port = 0, .log = harness_log};
	cr_assert_eq(pc_gateway_new(&o, &e->g), 0);
	cr_assert_not(pc_gateway_ready(e->g));
	cr_assert_eq(pc_gateway_start(e->g), 0);
	e->port = pc_gateway_port(e->g);
	cr_assert_neq(e->port, 0);
}

static void gw_stop(gw_t *e)
{
	pc_gateway_free(e->g);
	harness_stop(&e->h);
}

/* ---- a small HTTP client (curl_client.h) ---- */

static void request(gw_t *e, const char *method, const char *path, const char *const *hdrs, const char *body,
		    size_t body_len, resp_t *r)
{
	curl_request(e->port, method, path, hdrs, body, body_len, 30000, r);
}

static void get(gw_t *e, const char *path, const char *const *hdrs, resp_t *r)
{
	memset(r, 0, sizeof(*r));
	request(e, "GET", path, hdrs, NULL, 0, r);
	cr_assert_eq(r->code, CURLE_OK, "GET %s: %s", path, curl_easy_strerror(r->code));
}

static void post(gw_t *e, const char *path, const char *const *hdrs, const char *body, resp_t *r)
{
	memset(r, 0, sizeof(*r));
	request(e, "POST", path, hdrs, body, strlen(body), r);
	cr_assert_eq(r->code, CURLE_OK, "POST %s: %s", path, curl_easy_strerror(r->code));
}

/* A chat body: `user_text` as the one user message; `extra` is further
 * members ("\"stream\":true,...") or "". */
static void chat_body(char *out, size_t cap, const char *model, const char *extra, const char *user_text)
{
	cJSON *s = cJSON_CreateString(user_text);
	char *q = cJSON_PrintUnformatted(s);
	snprintf(out, cap, "{%s%s\"model\":\"%s\",\"messages\":[{\"role\":\"user\",\"content\":%s}]}", extra,
		 extra[0] ? "," : "", model, q);
	cJSON_free(q);
	cJSON_Delete(s);
}

/* POSTs a chat completion and parses the answer (the caller deletes it). */
static cJSON *chat(gw_t *e, const char *const *hdrs, const char *model, const char *extra, const char *text,
		   long want_status)
{
	char body[4096];
	chat_body(body, sizeof(body), model, extra, text);
	resp_t r;
	post(e, "/v1/chat/completions", hdrs, body, &r);
	cr_assert_eq(r.status, want_status, "status %ld, body %s", r.status, r.body);
	cJSON *j = cJSON_Parse(r.body);
	cr_assert_not_null(j, "not JSON: %s", r.body);
	resp_free(&r);
	return j;
}

static const char *content_of(const cJSON *completion)
{
	const cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(completion, "choices"), 0);
	return jstr(cJSON_GetObjectItemCaseSensitive(ch, "message"), "content");
}

static double num(const cJSON *o, const char *k)
{
	return cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(o, k));
}

/* An error answer must be OpenAI's shape: error.{message,type,param,code}. */
static const cJSON *error_of(const cJSON *j, const char *type)
{
	const cJSON *err = cJSON_GetObjectItemCaseSensitive(j, "error");
	cr_assert(cJSON_IsObject(err));
	cr_assert(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(err, "message")));
	cr_assert_str_eq(jstr(err, "type"), type);
	cr_assert(cJSON_HasObjectItem(err, "param"));
	cr_assert(cJSON_HasObjectItem(err, "code"));
	return err;
}

/* The run id inside an answer's id ("chatcmpl-<run>"). */
static void run_of(const char *answer_id, char *run, size_t cap)
{
	cr_assert_eq(strncmp(answer_id, "chatcmpl-", 9), 0, "id %s", answer_id);
	snprintf(run, cap, "%s", answer_id + 9);
}

/* ---- tests ---- */

Test(gateway_http, completion_answers_with_the_run_reply_and_usage)
{
	gw_t e;
	gw_start(&e, NULL);
	cJSON *j = chat(&e, NULL, "pincer:main", "", "hello from the endpoint", 200);
	cr_assert_str_eq(jstr(j, "object"), "chat.completion");
	cr_assert_str_eq(jstr(j, "model"), "pincer:main");
	cr_assert_str_eq(content_of(j), "hello from the endpoint");
	const cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0);
	cr_assert_str_eq(jstr(ch, "finish_reason"), "stop");
	cr_assert_str_eq(jstr(cJSON_GetObjectItemCaseSensitive(ch, "message"), "role"), "assistant");
	const cJSON *u = cJSON_GetObjectItemCaseSensitive(j, "usage");
	/* the mock counts words: four out; the prompt holds at least the four in */
	cr_assert_eq(num(u, "completion_tokens"), 4);
	cr_assert_geq(num(u, "prompt_tokens"), 4);
	cr_assert_eq(num(u, "total_tokens"), num(u, "prompt_tokens") + num(u, "completion_tokens"));
	/* the answer is the run's: same id, stored, ended well */
	char run[80];
	run_of(jstr(j, "id"), run, sizeof(run));
	pc_agent_wait_result_t w = wait_run(&e.h, run, 10000);
	cr_assert_eq(w.status, PC_AGENT_WAIT_OK);
	cJSON *d = finish_of(&e.h, run, 1000);
	cr_assert_str_eq(payload_text(d), content_of(j));
	cJSON_Delete(d);
	cJSON_Delete(j);
	gw_stop(&e);
}

/* The SSE events of a streamed answer, parsed: every `data:` payload in
 * order (the caller frees each and the array). */
static size_t sse_events(const char *body, char ***out)
{
	size_t n = 0;
	char **v = NULL;
	for (const char *p = body; (p = strstr(p, "data: ")) != NULL;) {
		p += 6;
		const char *end = strstr(p, "\n\n");
		cr_assert_not_null(end, "an SSE event without its blank line");
		v = realloc(v, (n + 1) * sizeof(*v));
		v[n++] = strndup(p, (size_t)(end - p));
		p = end + 2;
	}
	*out = v;
	return n;
}

static void sse_free(char **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

Test(gateway_http, stream_sends_chunks_that_add_up_to_the_reply_then_done)
{
	gw_t e;
	gw_start(&e, NULL);
	char body[1024];
	/* a word every 20 ms: the deltas come in several chunks */
	chat_body(body, sizeof(body), "pincer", "\"stream\":true,\"stream_options\":{\"include_usage\":true}",
		  "[[mock:{\"text\":\"one two three four five six seven\",\"delay_ms\":20}]]");
	resp_t r;
	post(&e, "/v1/chat/completions", NULL, body, &r);
	cr_assert_eq(r.status, 200);
	cr_assert(strcasestr(r.head, "content-type: text/event-stream"), "%s", r.head);
	char **ev = NULL;
	size_t n = sse_events(r.body, &ev);
	cr_assert_geq(n, 4, "%s", r.body);
	cr_assert_str_eq(ev[n - 1], "[DONE]");
	char text[1024] = "", id[128] = "";
	bool role = false, stop = false, usage = false;
	int pieces = 0;
	for (size_t i = 0; i + 1 < n; i++) {
		cJSON *c = cJSON_Parse(ev[i]);
		cr_assert_not_null(c, "chunk %zu is not JSON: %s", i, ev[i]);
		cr_assert_str_eq(jstr(c, "object"), "chat.completion.chunk");
		if (!id[0])
			snprintf(id, sizeof(id), "%s", jstr(c, "id"));
		cr_assert_str_eq(jstr(c, "id"), id, "every chunk carries the same id");
		const cJSON *choices = cJSON_GetObjectItemCaseSensitive(c, "choices");
		const cJSON *ch = cJSON_GetArrayItem(choices, 0);
		const cJSON *delta = cJSON_GetObjectItemCaseSensitive(ch, "delta");
		if (!strcmp(jstr(delta, "role"), "assistant"))
			role = true;
		if (jstr(delta, "content")[0])
			pieces++;
		strncat(text, jstr(delta, "content"), sizeof(text) - strlen(text) - 1);
		if (!strcmp(jstr(ch, "finish_reason"), "stop"))
			stop = true;
		if (cJSON_GetArraySize(choices) == 0) {
			usage = true;
			cr_assert_gt(num(cJSON_GetObjectItemCaseSensitive(c, "usage"), "completion_tokens"), 0);
		}
		cJSON_Delete(c);
	}
	cr_assert(role && stop && usage, "role %d stop %d usage %d", role, stop, usage);
	cr_assert_str_eq(text, "one two three four five six seven");
	cr_assert_gt(pieces, 1, "the reply streamed in pieces");
	/* the deltas add up to the run's final reply */
	char run[80];
	run_of(id, run, sizeof(run));
	cJSON *d = finish_of(&e.h, run, 10000);
	cr_assert_str_eq(payload_text(d), text);
	cJSON_Delete(d);
	sse_free(ev, n);
	resp_free(&r);
	gw_stop(&e);
}

/* Does the last request the mock received carry `needle`? */
static bool last_request_has(gw_t *e, const char *needle)
{
	cJSON *reqs = mock_requests(&e->h);
	char *text = request_text(reqs, cJSON_GetArraySize(reqs) - 1);
	bool has = strstr(text, needle) != NULL;
	cJSON_free(text);
	cJSON_Delete(reqs);
	return has;
}

/* The endpoint over h2c: the same answers, plain and streamed. */
Test(gateway_http, completions_over_h2c_answer_as_over_http1)
{
	gw_t e;
	gw_start(&e, NULL);
	char body[1024];
	chat_body(body, sizeof(body), "pincer", "", "over http two");
	resp_t r = {.http_version = CURL_HTTP_VERSION_2_PRIOR_KNOWLEDGE};
	request(&e, "POST", "/v1/chat/completions", NULL, body, strlen(body), &r);
	cr_assert_eq(r.code, CURLE_OK, "%s", curl_easy_strerror(r.code));
	cr_assert_eq(strncmp(r.head, "HTTP/2 200", 10), 0, "%s", r.head);
	cJSON *j = cJSON_Parse(r.body);
	cr_assert_str_eq(content_of(j), "over http two");
	cJSON_Delete(j);
	resp_free(&r);
	chat_body(body, sizeof(body), "pincer", "\"stream\":true", "streamed over http two");
	r = (resp_t){.http_version = CURL_HTTP_VERSION_2_PRIOR_KNOWLEDGE};
	request(&e, "POST", "/v1/chat/completions", NULL, body, strlen(body), &r);
	cr_assert_eq(r.code, CURLE_OK, "%s", curl_easy_strerror(r.code));
	cr_assert_eq(strncmp(r.head, "HTTP/2 200", 10), 0, "%s", r.head);
	cr_assert(strcasestr(r.head, "content-type: text/event-stream"), "%s", r.head);
	cr_assert_not_null(strstr(r.body, "data: [DONE]"), "%s", r.body);
	resp_free(&r);
	gw_stop(&e);
}

Test(gateway_http, a_session_header_or_user_shares_history_else_each_request_is_alone)
{
	gw_t e;
	gw_start(&e, NULL);
	const char *hdr[] = {"x-pincer-session-key: thread-7", NULL};
	cJSON_Delete(chat(&e, hdr, "pincer:main", "", "first words alpha", 200));
	cJSON_Delete(chat(&e, hdr, "pincer:main", "", "second words beta", 200));
	cr_assert(last_request_has(&e, "first words alpha"), "the second turn replays the first");
	char roles[256];
	cr_assert_eq(history_roles(&e.h, "thread-7", roles, sizeof(roles)), 4, "%s", roles);

	/* OpenClaw's header name is honoured too */
	const char *oc[] = {"x-openclaw-session-key: thread-7", NULL};
	cJSON_Delete(chat(&e, oc, "openclaw:main", "", "third words gamma", 200));
	cr_assert(last_request_has(&e, "second words beta"));

	/* `user`: one session per user */
	cJSON_Delete(chat(&e, NULL, "pincer", "\"user\":\"ann\"", "ann says delta", 200));
	cJSON_Delete(chat(&e, NULL, "pincer", "\"user\":\"ann\"", "ann says epsilon", 200));
	cr_assert(last_request_has(&e, "ann says delta"));
	cr_assert_eq(history_roles(&e.h, "agent:main:openai-user:ann", roles, sizeof(roles)), 4);
	cJSON_Delete(chat(&e, NULL, "pincer", "\"user\":\"bob\"", "bob says zeta", 200));
	cr_assert_not(last_request_has(&e, "ann says"), "another user is another session");

	/* neither: stateless, a fresh session each time */
	cJSON_Delete(chat(&e, NULL, "pincer", "", "lonely words eta", 200));
	cJSON_Delete(chat(&e, NULL, "pincer", "", "lonely words theta", 200));
	cr_assert_not(last_request_has(&e, "lonely words eta"));
	gw_stop(&e);
}

Test(gateway_http, the_last_user_message_is_the_prompt_and_system_messages_add_to_the_system_prompt)
{
	gw_t e;
	gw_start(&e, NULL);
	const char *body = "{\"model\":\"pincer\",\"messages\":["
			   "{\"role\":\"system\",\"content\":\"Rule kappa: be brief.\"},"
			   "{\"role\":\"user\",\"content\":\"an old question omega\"},"
			   "{\"role\":\"assistant\",\"content\":\"an old answer\"},"
			   "{\"role\":\"developer\",\"content\":[{\"type\":\"text\",\"text\":\"Rule lambda.\"}]},"
			   "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"new part one\"},"
			   "{\"type\":\"image_url\",\"image_url\":{\"url\":\"http://x/y.png\"}},"
			   "{\"type\":\"text\",\"text\":\"part two\"}]}]}";
	resp_t r;
	post(&e, "/v1/chat/completions", NULL, body, &r);
	cr_assert_eq(r.status, 200, "%s", r.body);
	cJSON *j = cJSON_Parse(r.body);
	cr_assert_str_eq(content_of(j), "new part one\npart two");
	cJSON_Delete(j);
	resp_free(&r);
	cr_assert(last_request_has(&e, "Rule kappa: be brief.\\n\\nRule lambda."), "system texts joined");
	cr_assert_not(last_request_has(&e, "old question omega"), "earlier turns are not replayed");
	cr_assert_not(last_request_has(&e, "an old answer"));
	/* reasoning_effort is the run's thinking level */
	post(&e, "/v1/chat/completions", NULL,
	     "{\"reasoning_effort\":\"medium\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", &r);
	cr_assert_eq(r.status, 200, "%s", r.body);
	resp_free(&r);
	cr_assert(last_request_has(&e, "\"reasoning_effort\":\"medium\""));
	gw_stop(&e);
}

Test(gateway_http, model_names_choose_the_agent_or_a_configured_model)
{
	gw_t e;
	gw_start(&e, NULL);
	static const char *const agent_models[] = {"pincer:main", "openclaw:main", "agent:main", "pincer/main",
						   "openclaw", "PINCER:Main"};
	for (size_t i = 0; i < sizeof(agent_models) / sizeof(agent_models[0]); i++) {
		cJSON *j = chat(&e, NULL, agent_models[i], "", "which agent", 200);
		cr_assert_str_eq(content_of(j), "which agent");
		cr_assert_str_eq(jstr(j, "model"), agent_models[i], "the request's model is echoed");
		cJSON_Delete(j);
	}
	/* a configured provider/model runs that model */
	cJSON_Delete(chat(&e, NULL, "fb/m2", "", "on the fallback", 200));
	cJSON *reqs = mock_requests(&e.h);
	char model[64];
	request_model(reqs, cJSON_GetArraySize(reqs) - 1, model, sizeof(model));
	cr_assert_str_eq(model, "m2");
	cJSON_Delete(reqs);
	/* a header names the agent too */
	const char *hdr[] = {"x-pincer-agent-id: main", NULL};
	cJSON_Delete(chat(&e, hdr, "pincer", "", "by header", 200));

	int before = request_count(&e.h);
	cJSON *j = chat(&e, NULL, "pincer:beta", "", "nobody home", 404);
	cr_assert_str_eq(jstr(error_of(j, "invalid_request_error"), "code"), "model_not_found");
	cJSON_Delete(j);
	j = chat(&e, NULL, "gpt-4o", "", "not ours", 404);
	cr_assert_str_eq(jstr(error_of(j, "invalid_request_error"), "code"), "model_not_found");
	cJSON_Delete(j);
	const char *other[] = {"x-openclaw-agent-id: beta", NULL};
	cJSON_Delete(chat(&e, other, "pincer", "", "nobody home", 404));
	cJSON_Delete(chat(&e, NULL, "pincer:Bad Name!", "", "malformed", 400));
	cr_assert_eq(request_count(&e.h), before, "a refused request never reaches a model");
	gw_stop(&e);
}

/* A request's answer must be `status` with an OpenAI error of `code`. */
static void expect_error(gw_t *e, const char *method, const char *path, const char *const *hdrs,
			 const char *body, long status, const char *code)
{
	resp_t r;
	memset(&r, 0, sizeof(r));
	request(e, method, path, hdrs, body, body ? strlen(body) : 0, &r);
	cr_assert_eq(r.code, CURLE_OK);
	cr_assert_eq(r.status, status, "%s %s: %ld %s", method, path, r.status, r.body);
	cJSON *j = cJSON_Parse(r.body);
	cr_assert_not_null(j, "%s", r.body);
	const cJSON *err = error_of(j, status >= 500 ? "server_error" : "invalid_request_error");
	if (code)
		cr_assert_str_eq(jstr(err, "code"), code);
	cJSON_Delete(j);
	resp_free(&r);
}

Test(gateway_http, errors_come_in_openai_shape)
{
	gw_t e;
	gw_start(&e, NULL);
	const char *path = "/v1/chat/completions";
	expect_error(&e, "POST", path, NULL, "{\"model\":", 400, "invalid_json");
	expect_error(&e, "POST", path, NULL, "{} trailing", 400, "invalid_json");
	expect_error(&e, "POST", path, NULL, "[1,2]", 400, "invalid_json");
	expect_error(&e, "POST", path, NULL, "{\"model\":\"pincer\"}", 400, NULL);
	expect_error(&e, "POST", path, NULL, "{\"messages\":[]}", 400, NULL);
	expect_error(&e, "POST", path, NULL, "{\"messages\":[{\"role\":\"system\",\"content\":\"only rules\"}]}", 400,
		     NULL);
	expect_error(&e, "POST", path, NULL, "{\"stream\":\"yes\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
		     400, NULL);
	expect_error(&e, "POST", path, NULL,
		     "{\"reasoning_effort\":\"lots\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 400, NULL);
	expect_error(&e, "GET", path, NULL, NULL, 405, "method_not_allowed");
	expect_error(&e, "DELETE", "/v1/models", NULL, NULL, 405, "method_not_allowed");
	expect_error(&e, "GET", "/v1/embeddings", NULL, NULL, 404, "unknown_url");
	expect_error(&e, "POST", "/v1/chat/completions/extra", NULL, "{}", 404, "unknown_url");
	/* a too-long session key is refused, not cut */
	char hdr[400] = "x-pincer-session-key: ";
	memset(hdr + strlen(hdr), 'k', 300);
	const char *hdrs[] = {hdr, NULL};
	expect_error(&e, "POST", path, hdrs, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 400,
		     "invalid_session");
	/* the 405 says what is allowed */
	resp_t r;
	get(&e, path, NULL, &r);
	cr_assert(strcasestr(r.head, "allow: POST"), "%s", r.head);
	resp_free(&r);
	gw_stop(&e);
}

/* The OpenAI SDKs retry a 429 and a 5xx by themselves, and each retry
 * would run the prompt again: a run that failed says not to. */
Test(gateway_http, a_failed_run_tells_sdks_not_to_retry)
{
	gw_t e;
	gw_start(&e, NULL);
	char body[4096];
	chat_body(body, sizeof(body), "pincer", "",
		  "x [[mock:{\"kind\":\"error\",\"status\":402,\"message\":\"Insufficient credits\"}]]");
	resp_t r;
	post(&e, "/v1/chat/completions", NULL, body, &r);
	cr_assert_eq(r.status, 402, "the provider's status: %s", r.body);
	cJSON *j = cJSON_Parse(r.body);
	cr_assert_not_null(j, "%s", r.body);
	cr_assert_eq(strncmp(jstr(error_of(j, "invalid_request_error"), "code"), "run_", 4), 0, "%s", r.body);
	cJSON_Delete(j);
	cr_assert(strcasestr(r.head, "\r\nx-should-retry: false\r\n"), "%s", r.head);
	resp_free(&r);
	/* an answer that ran nothing says nothing of the kind */
	post(&e, "/v1/chat/completions", NULL, "{\"model\":", &r);
	cr_assert_eq(r.status, 400);
	cr_assert_null(strcasestr(r.head, "x-should-retry"), "%s", r.head);
	resp_free(&r);
	gw_stop(&e);
}

Test(gateway_http, a_body_over_the_limit_is_refused_in_openai_shape)
{
	gw_t e;
	gw_start(&e, NULL);
	size_t n = ((size_t)20 << 20) + 4096; /* past the endpoint's 20 MiB, within the server's 25 */
	char *body = malloc(n + 1);
	cr_assert_not_null(body);
	memset(body, ' ', n);
	memcpy(body, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 45);
	body[n] = '\0';
	resp_t r;
	memset(&r, 0, sizeof(r));
	request(&e, "POST", "/v1/chat/completions", NULL, body, n, &r);
	cr_assert_eq(r.code, CURLE_OK);
	cr_assert_eq(r.status, 413, "%ld %s", r.status, r.body);
	cJSON *j = cJSON_Parse(r.body);
	cr_assert_str_eq(jstr(error_of(j, "invalid_request_error"), "code"), "payload_too_large");
	cJSON_Delete(j);
	resp_free(&r);
	free(body);
	gw_stop(&e);
}

Test(gateway_http, with_a_token_every_v1_request_needs_the_bearer)
{
	gw_t e;
	gw_start(&e, "{\"auth\":{\"token\":\"s3cret-token\"}}");
	const char *body = "{\"messages\":[{\"role\":\"user\",\"content\":\"let me in\"}]}";
	const char *wrong[] = {"Authorization: Bearer s3cret-tokem", NULL};
	const char *longer[] = {"Authorization: Bearer s3cret-token2", NULL};
	const char *scheme[] = {"Authorization: Basic s3cret-token", NULL};
	const char *right[] = {"Authorization: Bearer s3cret-token", NULL};
	expect_error(&e, "POST", "/v1/chat/completions", NULL, body, 401, "invalid_api_key");
	expect_error(&e, "POST", "/v1/chat/completions", wrong, body, 401, "invalid_api_key");
	expect_error(&e, "POST", "/v1/chat/completions", longer, body, 401, "invalid_api_key");
	expect_error(&e, "POST", "/v1/chat/completions", scheme, body, 401, "invalid_api_key");
	expect_error(&e, "GET", "/v1/models", NULL, NULL, 401, "invalid_api_key");
	resp_t r;
	post(&e, "/v1/chat/completions", right, body, &r);
	cr_assert_eq(r.status, 200, "%s", r.body);
	resp_free(&r);
	get(&e, "/v1/models", right, &r);
	cr_assert_eq(r.status, 200);
	resp_free(&r);
	/* probes need no token */
	get(&e, "/readyz", NULL, &r);
	cr_assert_eq(r.status, 200);
	resp_free(&r);
	gw_stop(&e);
}

Test(gateway_http, models_lists_the_agent_and_the_configured_models)
{
	gw_t e;
	gw_start(&e, NULL);
	resp_t r;
	get(&e, "/v1/models", NULL, &r);
	cr_assert_eq(r.status, 200);
	cJSON *j = cJSON_Parse(r.body);
	cr_assert_str_eq(jstr(j, "object"), "list");
	char ids[512] = "";
	const cJSON *m;
	cJSON_ArrayForEach(m, cJSON_GetObjectItemCaseSensitive(j, "data")) {
		cr_assert_str_eq(jstr(m, "object"), "model");
		cr_assert_str_eq(jstr(m, "owned_by"), "pincer");
		cr_assert_gt(num(m, "created"), 0);
		size_t l = strlen(ids);
		snprintf(ids + l, sizeof(ids) - l, "%s%s", l ? "," : "", jstr(m, "id"));
	}
	cr_assert_str_eq(ids, "pincer:main,mock/m1,fb/m2");
	cJSON_Delete(j);
	resp_free(&r);
	get(&e, "/v1/models/mock%2Fm1", NULL, &r);
	cr_assert_eq(r.status, 200, "%s", r.body);
	j = cJSON_Parse(r.body);
	cr_assert_str_eq(jstr(j, "id"), "mock/m1");
	cJSON_Delete(j);
	resp_free(&r);
	get(&e, "/v1/models/pincer:main", NULL, &r);
	cr_assert_eq(r.status, 200);
	resp_free(&r);
	expect_error(&e, "GET", "/v1/models/nope", NULL, NULL, 404, "model_not_found");
	gw_stop(&e);
}

Test(gateway_http, probes_follow_start_and_drain)
{
	gw_t e;
	gw_start(&e, NULL);
	resp_t r;
	get(&e, "/livez", NULL, &r);
	cr_assert_eq(r.status, 200);
	cr_assert(strstr(r.body, "\"status\":\"ok\""), "%s", r.body);
	resp_free(&r);
	static const char *const ready[] = {"/readyz", "/healthz", "/health"};
	for (size_t i = 0; i < 3; i++) {
		get(&e, ready[i], NULL, &r);
		cr_assert_eq(r.status, 200, "%s", ready[i]);
		cJSON *j = cJSON_Parse(r.body);
		cr_assert_str_eq(jstr(j, "status"), "ready");
		cr_assert_str_eq(jstr(j, "version"), PC_VERSION_STRING);
		cr_assert(cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(j, "uptimeMs")));
		cJSON_Delete(j);
		resp_free(&r);
	}
	memset(&r, 0, sizeof(r));
	request(&e, "POST", "/readyz", NULL, "{}", 2, &r);
	cr_assert_eq(r.status, 405);
	resp_free(&r);

	cr_assert_eq(pc_gateway_drain(e.g, 1000), 0);
	cr_assert_not(pc_gateway_ready(e.g));
	for (size_t i = 0; i < 3; i++) {
		get(&e, ready[i], NULL, &r);
		cr_assert_eq(r.status, 503, "%s while draining", ready[i]);
		cJSON *j = cJSON_Parse(r.body);
		cr_assert_str_eq(jstr(j, "status"), "draining");
		cJSON_Delete(j);
		resp_free(&r);
	}
	get(&e, "/livez", NULL, &r);
	cr_assert_eq(r.status, 200, "the process still serves");
	resp_free(&r);
	expect_error(&e, "POST", "/v1/chat/completions", NULL,
		     "{\"messages\":[{\"role\":\"user\",\"content\":\"too late\"}]}", 503, "unavailable");
	gw_stop(&e);
}

/* The value of the sample `series` (name and labels, as printed), or -1. */
static double metric(const char *text, const char *series)
{
	size_t n = strlen(series);
	for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
		if (!strncmp(p, series, n) && p[n] == ' ')
			return strtod(p + n + 1, NULL);
	}
	return -1;
}

static char *scrape(gw_t *e)
{
	resp_t r;
	get(e, "/metrics", NULL, &r);
	cr_assert_eq(r.status, 200);
	cr_assert(strcasestr(r.head, "content-type: text/plain; version=0.0.4"), "%s", r.head);
	char *text = r.body;
	r.body = NULL;
	resp_free(&r);
	return text;
}

/* Every line: a comment (# HELP / # TYPE) or `name{labels} value`. */
static void expect_exposition(const char *text)
{
	regex_t sample, comment;
	cr_assert_eq(regcomp(&sample,
			     "^[a-zA-Z_:][a-zA-Z0-9_:]*(\\{([a-zA-Z_][a-zA-Z0-9_]*=\"[^\"]*\",?)*\\})? "
			     "(-?[0-9.]+([eE][-+]?[0-9]+)?|NaN|[+-]Inf)$",
			     REG_EXTENDED | REG_NOSUB),
		     0);
	cr_assert_eq(regcomp(&comment, "^# (HELP|TYPE) [a-zA-Z_:][a-zA-Z0-9_:]* .+$", REG_EXTENDED | REG_NOSUB), 0);
	char *copy = strdup(text), *save = NULL;
	int lines = 0;
	for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save), lines++) {
		regex_t *re = line[0] == '#' ? &comment : &sample;
		cr_assert_eq(regexec(re, line, 0, NULL, 0), 0, "not exposition format: '%s'", line);
	}
	cr_assert_gt(lines, 50);
	free(copy);
	regfree(&sample);
	regfree(&comment);
}

Test(gateway_http, metrics_parse_and_move_with_requests)
{
	gw_t e;
	gw_start(&e, NULL);
	char *before = scrape(&e);
	expect_exposition(before);
	cr_assert_eq(metric(before, "pincer_gateway_state{state=\"ready\"}"), 1);
	cJSON_Delete(chat(&e, NULL, "pincer", "", "count me", 200));
	char body[512];
	chat_body(body, sizeof(body), "pincer", "\"stream\":true", "count me streamed");
	resp_t r;
	post(&e, "/v1/chat/completions", NULL, body, &r);
	cr_assert_eq(r.status, 200);
	resp_free(&r);
	get(&e, "/v1/nothing", NULL, &r);
	resp_free(&r);
	char *after = scrape(&e);
	expect_exposition(after);
	cr_assert_eq(metric(after, "pincer_gateway_openai_runs_total{stream=\"false\"}"),
		     metric(before, "pincer_gateway_openai_runs_total{stream=\"false\"}") + 1);
	cr_assert_eq(metric(after, "pincer_gateway_openai_runs_total{stream=\"true\"}"),
		     metric(before, "pincer_gateway_openai_runs_total{stream=\"true\"}") + 1);
	cr_assert_eq(metric(after, "pincer_gateway_http_requests_total{route=\"/v1/chat/completions\",code=\"200\"}"),
		     2);
	cr_assert_eq(metric(after, "pincer_gateway_http_requests_total{route=\"/v1/other\",code=\"404\"}"), 1);
	cr_assert_eq(metric(after, "pincer_gateway_http_requests_total{route=\"/metrics\",code=\"200\"}"), 1,
		     "the first scrape is counted");
	cr_assert_geq(metric(after, "pincer_agent_runs_started_total"),
		      metric(before, "pincer_agent_runs_started_total") + 2);
	/* the agent's own registry follows: both runs ended well, each timed */
	cr_assert_eq(metric(after, "pincer_agent_runs_total{outcome=\"ok\"}"),
		     metric(before, "pincer_agent_runs_total{outcome=\"ok\"}") + 2);
	cr_assert_eq(metric(after, "pincer_agent_run_duration_seconds_count"),
		     metric(before, "pincer_agent_run_duration_seconds_count") + 2);
	cr_assert_eq(metric(after, "pincer_provider_ttft_seconds_count{provider=\"mock\",model=\"m1\"}"),
		     metric(before, "pincer_provider_ttft_seconds_count{provider=\"mock\",model=\"m1\"}") + 2);
	cr_assert_eq(metric(after, "pincer_gateway_ws_connections"), 0, "no WebSocket client");
	cr_assert_geq(metric(after, "pincer_io_output_queued_bytes"), 0);
	cr_assert_eq(metric(after, "pincer_io_transitions_refused_total"), 0);
	cr_assert_gt(metric(after, "pincer_io_connections_accepted_total"),
		     metric(before, "pincer_io_connections_accepted_total"));
	cr_assert_geq(metric(after, "pincer_runtime_worker_messages_total{worker=\"0\"}"), 1);
	/* turns the I/O and blocking threads ran themselves: never fewer */
	cr_assert_geq(metric(after, "pincer_runtime_guest_turns_total"), metric(before, "pincer_runtime_guest_turns_total"));
	cr_assert_geq(metric(before, "pincer_runtime_guest_turns_total"), 0);
	/* the scrape's own request is in flight, so mailboxes hold little */
	cr_assert_geq(metric(after, "pincer_runtime_mailbox_depth_max"), 0);
	cr_assert_leq(metric(after, "pincer_runtime_mailbox_depth_max"), metric(after, "pincer_runtime_mailbox_messages"));
	/* each run wrote its row, its messages and its end, in transactions
	 * the writer spent CPU time on */
	cr_assert_geq(metric(after, "pincer_store_writes_total"), metric(before, "pincer_store_writes_total") + 2 * 3);
	cr_assert_gt(metric(after, "pincer_store_transactions_total"), metric(before, "pincer_store_transactions_total"));
	cr_assert_gt(metric(after, "pincer_store_write_cpu_seconds_total"),
		     metric(before, "pincer_store_write_cpu_seconds_total"));
	cr_assert_eq(metric(after, "pincer_store_failed_transactions_total"), 0);
	free(before);
	free(after);
	gw_stop(&e);
}

Test(gateway_http, a_client_leaving_mid_stream_leaves_the_run_going)
{
	gw_t e;
	gw_start(&e, NULL);
	/* a slow answer: one word every 200 ms */
	char body[1024];
	chat_body(body, sizeof(body), "pincer", "\"stream\":true",
		  "[[mock:{\"text\":\"slow words keep coming after the client left\",\"delay_ms\":200}]]");
	const char *hdr[] = {"x-pincer-session-key: leaver", NULL};
	resp_t r;
	memset(&r, 0, sizeof(r));
	r.abort_after = 1; /* hang up at the first bytes: the role chunk */
	request(&e, "POST", "/v1/chat/completions", hdr, body, strlen(body), &r);
	cr_assert_eq(r.code, CURLE_WRITE_ERROR, "%s", curl_easy_strerror(r.code));
	cJSON *chunk = cJSON_ParseWithLength(r.body + 6, strcspn(r.body + 6, "\n"));
	cr_assert_not_null(chunk, "%s", r.body);
	char run[80];
	run_of(jstr(chunk, "id"), run, sizeof(run));
	cJSON_Delete(chunk);
	resp_free(&r);
	/* the gateway saw the client go; the run went on to its end */
	pc__gw_openai_stats_t st;
	AWAIT((pc__gw_openai_stats(e.g, &st), st.gone == 1), 5000);
	pc_agent_wait_result_t w = wait_run(&e.h, run, 15000);
	cr_assert_eq(w.status, PC_AGENT_WAIT_OK);
	cJSON *d = finish_of(&e.h, run, 1000);
	cr_assert_str_eq(payload_text(d), "slow words keep coming after the client left");
	cJSON_Delete(d);
	char roles[128];
	cr_assert_eq(history_roles(&e.h, "leaver", roles, sizeof(roles)), 2, "%s", roles);
	AWAIT((pc__gw_openai_stats(e.g, &st), st.active == 0), 5000);
	gw_stop(&e);
}

/* Drains the gateway once a completion is under way. */
static void *drain_soon(void *arg)
{
	gw_t *e = arg;
	pc__gw_openai_stats_t st;
	uint64_t until = now_ms() + 10000;
	do {
		sleep_ms(20);
		pc__gw_openai_stats(e->g, &st);
	} while (st.runs[1] == 0 && now_ms() < until);
	sleep_ms(300);
	pc_gateway_drain(e->g, 200);
	return NULL;
}

Test(gateway_http, a_drain_aborts_a_long_stream_with_an_error_event)
{
	gw_t e;
	gw_start(&e, NULL);
	/* a run that outlasts the drain deadline: aborted, and the stream
	 * ends with an error event and [DONE] */
	char body[1024];
	chat_body(body, sizeof(body), "pincer", "\"stream\":true",
		  "[[mock:{\"text\":\"a b c d e f g h i j k l m n\",\"delay_ms\":300}]]");
	pthread_t t;
	cr_assert_eq(pthread_create(&t, NULL, drain_soon, &e), 0);
	resp_t r;
	post(&e, "/v1/chat/completions", NULL, body, &r);
	cr_assert_eq(pthread_join(t, NULL), 0);
	cr_assert_eq(r.status, 200);
	char **ev = NULL;
	size_t n = sse_events(r.body, &ev);
	cr_assert_geq(n, 3, "%s", r.body);
	cr_assert_str_eq(ev[n - 1], "[DONE]");
	cJSON *err = cJSON_Parse(ev[n - 2]);
	cr_assert_not_null(err, "%s", r.body);
	cr_assert_str_eq(jstr(error_of(err, "server_error"), "code"), "run_aborted", "%s", ev[n - 2]);
	cJSON_Delete(err);
	sse_free(ev, n);
	resp_free(&r);
	gw_stop(&e);
}

/* ---- Idempotency-Key ---- */

/* The text of a streamed answer (its chunks' contents joined), its id
 * and finish_reason; false when it is not a whole stream ending [DONE]. */
static bool stream_text(const char *body, char *text, size_t cap, char *id, size_t id_cap, char *finish,
			size_t finish_cap)
{
	char **ev = NULL;
	size_t n = sse_events(body, &ev);
	bool whole = n >= 2 && !strcmp(ev[n - 1], "[DONE]");
	text[0] = id[0] = finish[0] = '\0';
	for (size_t i = 0; whole && i + 1 < n; i++) {
		cJSON *c = cJSON_Parse(ev[i]);
		cr_assert_not_null(c, "chunk %zu: %s", i, ev[i]);
		snprintf(id, id_cap, "%s", jstr(c, "id"));
		const cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(c, "choices"), 0);
		strncat(text, jstr(cJSON_GetObjectItemCaseSensitive(ch, "delta"), "content"), cap - strlen(text) - 1);
		if (jstr(ch, "finish_reason")[0])
			snprintf(finish, finish_cap, "%s", jstr(ch, "finish_reason"));
		cJSON_Delete(c);
	}
	sse_free(ev, n);
	return whole;
}

typedef struct keyed {
	gw_t *e;
	const char *key;
	const char *extra; /* chat_body's */
	const char *text;
	resp_t r;
} keyed_t;

static void keyed_post(keyed_t *k)
{
	char hdr[320], body[2048];
	snprintf(hdr, sizeof(hdr), "Idempotency-Key: %s", k->key);
	const char *hdrs[] = {hdr, "x-pincer-session-key: idem", NULL};
	chat_body(body, sizeof(body), "pincer", k->extra, k->text);
	post(k->e, "/v1/chat/completions", hdrs, body, &k->r);
}

static void *keyed_thread(void *arg)
{
	keyed_post(arg);
	return NULL;
}

static uint64_t runs_started(gw_t *e)
{
	pc_agent_stats_t st;
	pc_agent_stats(e->h.agent, &st);
	return st.runs_started;
}

#define SLOW_REPLY "alpha beta gamma delta epsilon zeta eta theta iota kappa"
#define SLOW_TEXT "[[mock:{\"text\":\"" SLOW_REPLY "\",\"delay_ms\":60}]]"

Test(gateway_http, a_bad_idempotency_key_is_refused)
{
	gw_t e;
	gw_start(&e, NULL);
	char long_key[300];
	memset(long_key, 'k', 256);
	long_key[256] = '\0';
	char hdr_long[320];
	snprintf(hdr_long, sizeof(hdr_long), "Idempotency-Key: %s", long_key);
	const char *bad[][2] = {{"Idempotency-Key;", NULL}, {hdr_long, NULL}, {"Idempotency-Key: caf\xc3\xa9", NULL},
				{"Idempotency-Key: a\x01z", NULL}};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		resp_t r;
		post(&e, "/v1/chat/completions", bad[i], "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", &r);
		cr_assert_eq(r.status, 400, "key %zu: %ld %s", i, r.status, r.body);
		cJSON *j = cJSON_Parse(r.body);
		/* a control byte is refused by the HTTP parser already */
		if (i < 3)
			cr_assert_str_eq(jstr(error_of(j, "invalid_request_error"), "code"), "invalid_idempotency_key",
					 "key %zu: %s", i, r.body);
		cJSON_Delete(j);
		resp_free(&r);
	}
	cr_assert_eq(runs_started(&e), 0);
	gw_stop(&e);
}

Test(gateway_http, a_repeat_after_the_end_gets_the_first_answer)
{
	gw_t e;
	gw_start(&e, NULL);
	keyed_t a = {&e, "after-end-1", "", "hello there", {0}}, b = a;
	keyed_post(&a);
	cr_assert_eq(a.r.status, 200, "%s", a.r.body);
	keyed_post(&b);
	cr_assert_eq(b.r.status, 200, "%s", b.r.body);
	cr_assert_str_eq(b.r.body, a.r.body, "the same answer, byte for byte");
	cr_assert_eq(runs_started(&e), 1);
	/* streamed, the repeat carries the same id, text and finish */
	keyed_t s = {&e, "after-end-1", "\"stream\":true", "hello there", {0}};
	keyed_post(&s);
	cr_assert_eq(s.r.status, 200);
	char text[512], id[128], finish[32];
	cr_assert(stream_text(s.r.body, text, sizeof(text), id, sizeof(id), finish, sizeof(finish)), "%s", s.r.body);
	cJSON *j = cJSON_Parse(a.r.body);
	cr_assert_str_eq(id, jstr(j, "id"));
	cr_assert_str_eq(text, content_of(j));
	cr_assert_str_eq(finish, "stop");
	cJSON_Delete(j);
	cr_assert_eq(runs_started(&e), 1);
	resp_free(&a.r);
	resp_free(&b.r);
	resp_free(&s.r);
	gw_stop(&e);
}

Test(gateway_http, a_repeat_of_a_failed_run_gets_the_same_error)
{
	gw_t e;
	gw_start(&e, NULL);
	const char *text = "x [[mock:{\"kind\":\"error\",\"status\":402,\"message\":\"Insufficient credits\"}]]";
	keyed_t a = {&e, "failed-1", "", text, {0}}, b = a;
	keyed_post(&a);
	cr_assert_eq(a.r.status, 402, "%s", a.r.body);
	keyed_post(&b);
	cr_assert_eq(b.r.status, 402, "%s", b.r.body);
	cr_assert_str_eq(b.r.body, a.r.body);
	cr_assert(strcasestr(b.r.head, "\r\nx-should-retry: false\r\n"), "%s", b.r.head);
	cr_assert_eq(runs_started(&e), 1);
	resp_free(&a.r);
	resp_free(&b.r);
	gw_stop(&e);
}

/* The first call streams a slow reply; once some of it went out, a
 * repeat (`extra` says streamed or not) joins the same run. */
static void repeat_while_running(const char *extra)
{
	gw_t e;
	gw_start(&e, NULL);
	keyed_t a = {&e, "running-1", "\"stream\":true", SLOW_TEXT, {0}};
	keyed_t b = {&e, "running-1", extra, SLOW_TEXT, {0}};
	pthread_t t;
	cr_assert_eq(pthread_create(&t, NULL, keyed_thread, &a), 0);
	pc__gw_openai_stats_t st;
	AWAIT((pc__gw_openai_stats(e.g, &st), st.runs[1] == 1), 5000);
	sleep_ms(250); /* a few words are out */
	keyed_post(&b);
	cr_assert_eq(pthread_join(t, NULL), 0);
	cr_assert_eq(a.r.status, 200);
	cr_assert_eq(b.r.status, 200);
	char text[512], id[128], finish[32];
	cr_assert(stream_text(a.r.body, text, sizeof(text), id, sizeof(id), finish, sizeof(finish)), "%s", a.r.body);
	cr_assert_str_eq(text, SLOW_REPLY);
	if (strstr(extra, "stream")) {
		char text2[512], id2[128], finish2[32];
		cr_assert(stream_text(b.r.body, text2, sizeof(text2), id2, sizeof(id2), finish2, sizeof(finish2)), "%s",
			  b.r.body);
		cr_assert_str_eq(text2, SLOW_REPLY, "replay and live add up, nothing missed or doubled");
		cr_assert_str_eq(id2, id);
		cr_assert_str_eq(finish2, finish);
	} else {
		cJSON *j = cJSON_Parse(b.r.body);
		cr_assert_str_eq(content_of(j), SLOW_REPLY, "%s", b.r.body);
		cr_assert_str_eq(jstr(j, "id"), id);
		cJSON_Delete(j);
	}
	cr_assert_eq(runs_started(&e), 1);
	resp_free(&a.r);
	resp_free(&b.r);
	gw_stop(&e);
}

Test(gateway_http, a_plain_repeat_while_running_waits_for_the_first_run)
{
	repeat_while_running("");
}

Test(gateway_http, a_streamed_repeat_while_running_replays_then_follows)
{
	repeat_while_running("\"stream\":true");
}

/* Needs the store's PC_EEXIST for a key reused with other parameters
 * (session actor and store, not on this branch yet): until then the
 * repeat is answered as a duplicate. */
Test(gateway_http, a_key_reused_with_other_parameters_is_refused)
{
	gw_t e;
	gw_start(&e, NULL);
	keyed_t a = {&e, "reused-1", "", "first question", {0}}, b = {&e, "reused-1", "", "another question", {0}};
	keyed_post(&a);
	cr_assert_eq(a.r.status, 200, "%s", a.r.body);
	keyed_post(&b);
	cr_assert_eq(b.r.status, 422, "%s", b.r.body);
	cJSON *j = cJSON_Parse(b.r.body);
	cr_assert_str_eq(jstr(error_of(j, "invalid_request_error"), "code"), "idempotency_key_reused");
	cJSON_Delete(j);
	cr_assert(strcasestr(b.r.head, "\r\nx-should-retry: false\r\n"), "%s", b.r.head);
	cr_assert_eq(runs_started(&e), 1);
	resp_free(&a.r);
	resp_free(&b.r);
	gw_stop(&e);
}

/* Retry-After: whole seconds, > 0 and at most `max`. */
static void expect_retry_after(const resp_t *r, long max)
{
	const char *h = strcasestr(r->head, "\r\nretry-after: ");
	cr_assert_not_null(h, "%s", r->head);
	long v = strtol(h + 15, NULL, 10);
	cr_assert(v >= 1 && v <= max, "Retry-After %ld: %s", v, r->head);
}

static void *drain_20s(void *arg)
{
	pc_gateway_drain(((gw_t *)arg)->g, 20000);
	return NULL;
}

Test(gateway_http, refusals_while_draining_say_when_to_retry)
{
	gw_t e;
	gw_start(&e, NULL);
	/* a run keeps the drain going; its deadline is 20 s away */
	keyed_t a = {&e, "drain-1", "\"stream\":true", SLOW_TEXT, {0}};
	pthread_t t, d;
	cr_assert_eq(pthread_create(&t, NULL, keyed_thread, &a), 0);
	pc__gw_openai_stats_t st;
	AWAIT((pc__gw_openai_stats(e.g, &st), st.runs[1] == 1), 5000);
	cr_assert_eq(pthread_create(&d, NULL, drain_20s, &e), 0);
	AWAIT(!pc_gateway_ready(e.g), 5000);
	resp_t r;
	get(&e, "/readyz", NULL, &r);
	cr_assert_eq(r.status, 503);
	expect_retry_after(&r, 20);
	cr_assert_geq(strtol(strcasestr(r.head, "\r\nretry-after: ") + 15, NULL, 10), 15, "%s", r.head);
	resp_free(&r);
	post(&e, "/v1/chat/completions", NULL, "{\"messages\":[{\"role\":\"user\",\"content\":\"late\"}]}", &r);
	cr_assert_eq(r.status, 503);
	expect_retry_after(&r, 20);
	cr_assert_geq(strtol(strcasestr(r.head, "\r\nretry-after: ") + 15, NULL, 10), 15, "%s", r.head);
	resp_free(&r);
	cr_assert_eq(pthread_join(t, NULL), 0);
	cr_assert_eq(pthread_join(d, NULL), 0);
	cr_assert_eq(a.r.status, 200);
	resp_free(&a.r);
	gw_stop(&e);
}

/* ---- one text plain or streamed, keep-alives, request ids ---- */

/* POSTs a chat completion of model "pincer" (chat_body's `extra` and
 * `text`); the answer, whatever its status, in *r. */
static void post_chat(gw_t *e, const char *extra, const char *text, resp_t *r)
{
	char body[4096];
	chat_body(body, sizeof(body), "pincer", extra, text);
	post(e, "/v1/chat/completions", NULL, body, r);
}

/* A model call that says something and calls a tool, then the echo of
 * the user's text: "Let me look." and "the final words", two calls. */
#define PREAMBLE_TEXT                                                                                         \
	"the final words [[mock:{\"kind\":\"tool_calls\",\"text\":\"Let me look.\",\"delay_ms\":20,"          \
	"\"tool_calls\":[{\"name\":\"clock\",\"arguments\":{}}]}]]"

Test(gateway_http, plain_and_streamed_answers_are_the_same_text)
{
	gw_t e;
	gw_start(&e, NULL);
	cJSON *j = chat(&e, NULL, "pincer", "", PREAMBLE_TEXT, 200);
	cr_assert_str_eq(content_of(j), "Let me look.\n\nthe final words", "%s", content_of(j));
	resp_t r;
	post_chat(&e, "\"stream\":true", PREAMBLE_TEXT, &r);
	cr_assert_eq(r.status, 200);
	char text[512], id[128], finish[32];
	cr_assert(stream_text(r.body, text, sizeof(text), id, sizeof(id), finish, sizeof(finish)), "%s", r.body);
	cr_assert_str_eq(text, content_of(j), "streamed %s", r.body);
	cr_assert_str_eq(finish, "stop");
	resp_free(&r);
	cJSON_Delete(j);
	/* one call only: the text is the call's, as before */
	j = chat(&e, NULL, "pincer", "", "just one call", 200);
	cr_assert_str_eq(content_of(j), "just one call");
	cJSON_Delete(j);
	gw_stop(&e);
}

/* How many times `needle` occurs in `hay` before `end` (NULL: the end). */
static int count_before(const char *hay, const char *needle, const char *end)
{
	int n = 0;
	for (const char *p = hay; (p = strstr(p, needle)) != NULL && (!end || p < end); p += strlen(needle))
		n++;
	return n;
}

Test(gateway_http, a_silent_stream_sends_keep_alive_comments_until_its_first_token)
{
	gw_t e;
	gw_start(&e, "{\"http\":{\"sseKeepAliveMs\":100}}");
	resp_t r;
	post_chat(&e, "\"stream\":true", "[[mock:{\"text\":\"late words\",\"ttft_ms\":600}]]", &r);
	cr_assert_eq(r.status, 200);
	const char *first = strstr(r.body, "\"content\":\"late");
	cr_assert_not_null(first, "%s", r.body);
	int before = count_before(r.body, "\n: keep-alive\n\n", first);
	cr_assert_geq(before, 3, "%d keep-alives before the first token: %s", before, r.body);
	/* none after the end; and the SSE parser still finds the whole text */
	size_t n = strlen(r.body);
	cr_assert(n > 14 && !strcmp(r.body + n - 14, "data: [DONE]\n\n"), "%s", r.body);
	char text[512], id[128], finish[32];
	cr_assert(stream_text(r.body, text, sizeof(text), id, sizeof(id), finish, sizeof(finish)), "%s", r.body);
	cr_assert_str_eq(text, "late words");
	resp_free(&r);
	/* a plain answer is one JSON object: no comments */
	cJSON *j = chat(&e, NULL, "pincer", "", "[[mock:{\"text\":\"slow plain\",\"ttft_ms\":300}]]", 200);
	cr_assert_str_eq(content_of(j), "slow plain");
	cJSON_Delete(j);
	gw_stop(&e);
}

/* The value of header `name` in a response head ("" when absent). */
static void header_of(const char *head, const char *name, char *out, size_t cap)
{
	char key[64];
	snprintf(key, sizeof(key), "\r\n%s: ", name);
	const char *p = strcasestr(head, key);
	out[0] = '\0';
	if (!p)
		return;
	p += strlen(key);
	size_t n = strcspn(p, "\r\n");
	snprintf(out, cap, "%.*s", (int)(n < cap ? n : cap - 1), p);
}

/* A generated id: req_ and 24 hex digits. */
static void expect_generated_id(const resp_t *r)
{
	char v[200];
	header_of(r->head, "x-request-id", v, sizeof(v));
	cr_assert_eq(strlen(v), 28, "%s", r->head);
	cr_assert_eq(strncmp(v, "req_", 4), 0, "%s", v);
	cr_assert_eq(strspn(v + 4, "0123456789abcdef"), 24, "%s", v);
}

Test(gateway_http, every_answer_names_its_request)
{
	gw_t e;
	gw_start(&e, NULL);
	static const char *const paths[] = {"/v1/models", "/v1/nowhere", "/readyz", "/healthz", "/livez", "/metrics"};
	char v[200], other[200];
	resp_t r;
	for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
		const char *hdrs[] = {"x-request-id: client-id-42", NULL};
		get(&e, paths[i], hdrs, &r);
		header_of(r.head, "x-request-id", v, sizeof(v));
		cr_assert_str_eq(v, "client-id-42", "%s: %s", paths[i], r.head);
		resp_free(&r);
		get(&e, paths[i], NULL, &r);
		expect_generated_id(&r);
		resp_free(&r);
	}
	/* chat: an answer, an error, a stream, each its own id */
	const char *mine[] = {"x-request-id: chat-1", NULL};
	post(&e, "/v1/chat/completions", mine, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", &r);
	cr_assert_eq(r.status, 200);
	header_of(r.head, "x-request-id", v, sizeof(v));
	cr_assert_str_eq(v, "chat-1");
	resp_free(&r);
	post(&e, "/v1/chat/completions", NULL, "{\"messages\":[]}", &r);
	cr_assert_eq(r.status, 400);
	expect_generated_id(&r);
	header_of(r.head, "x-request-id", other, sizeof(other));
	resp_free(&r);
	post(&e, "/v1/chat/completions", NULL, "{\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
	     &r);
	cr_assert_eq(r.status, 200);
	expect_generated_id(&r);
	header_of(r.head, "x-request-id", v, sizeof(v));
	cr_assert_str_neq(v, other, "ids differ per request");
	resp_free(&r);
	/* an id that is too long or not printable ASCII is replaced */
	char long_id[200] = "x-request-id: ";
	memset(long_id + 14, 'i', 129);
	long_id[14 + 129] = '\0';
	const char *bad[][2] = {{long_id, NULL}, {"x-request-id: caf\xc3\xa9", NULL}};
	for (size_t i = 0; i < 2; i++) {
		get(&e, "/v1/models", bad[i], &r);
		cr_assert_eq(r.status, 200);
		expect_generated_id(&r);
		resp_free(&r);
	}
	gw_stop(&e);
}

/* ---- provider errors ---- */

/* A run the provider refuses with `status`: the answer's status, type
 * and message, plain and streamed. */
static void provider_refuses(gw_t *e, int status, long want, const char *type)
{
	char text[512];
	snprintf(text, sizeof(text),
		 "x [[mock:{\"kind\":\"error\",\"status\":%d,\"message\":\"Provider says no (key sk-live-0123456789abcdef, "
		 "Authorization: Bearer tok-123)\"}]]",
		 status);
	static const char *const want_msg = "Provider says no (key sk-***, Authorization: ***)";
	resp_t r;
	post_chat(e, "", text, &r);
	cr_assert_eq(r.status, want, "provider %d: %ld %s", status, r.status, r.body);
	cr_assert(strcasestr(r.head, "\r\nx-should-retry: false\r\n"), "%s", r.head);
	cJSON *j = cJSON_Parse(r.body);
	const cJSON *err = error_of(j, type);
	cr_assert_str_eq(jstr(err, "message"), want_msg, "%s", r.body);
	cr_assert_eq(strncmp(jstr(err, "code"), "run_", 4), 0, "%s", r.body);
	cJSON_Delete(j);
	resp_free(&r);
	/* streamed: the same error as an event, then [DONE]; on a gateway of
	 * its own, since an auth failure leaves the profiles in cooldown for
	 * this process's next runs (§1.11), which would then not ask the
	 * provider at all */
	gw_stop(e);
	gw_start(e, NULL);
	post_chat(e, "\"stream\":true", text, &r);
	cr_assert_eq(r.status, 200);
	char **ev = NULL;
	size_t n = sse_events(r.body, &ev);
	cr_assert_geq(n, 3, "%s", r.body);
	cr_assert_str_eq(ev[n - 1], "[DONE]");
	char run[80];
	cJSON *c = cJSON_Parse(ev[0]);
	run_of(jstr(c, "id"), run, sizeof(run));
	cJSON_Delete(c);
	j = cJSON_Parse(ev[n - 2]);
	cr_assert_str_eq(jstr(error_of(j, type), "message"), want_msg, "%s", r.body);
	cJSON_Delete(j);
	sse_free(ev, n);
	resp_free(&r);
	/* the run's terminal data has the status and the masked message */
	cJSON *d = finish_of(&e->h, run, 10000);
	const cJSON *pe = cJSON_GetObjectItemCaseSensitive(d, "providerError");
	cr_assert_eq(num(pe, "status"), status);
	cr_assert_str_eq(jstr(pe, "message"), want_msg);
	cJSON_Delete(d);
}

Test(gateway_http, a_provider_error_keeps_its_status_class_and_message)
{
	gw_t e;
	gw_start(&e, NULL);
	/* each case on a fresh gateway: cooldowns outlive runs */
	provider_refuses(&e, 400, 400, "invalid_request_error");
	gw_stop(&e);
	gw_start(&e, NULL);
	provider_refuses(&e, 429, 429, "rate_limit_error");
	gw_stop(&e);
	gw_start(&e, NULL);
	provider_refuses(&e, 500, 502, "upstream_error");
	gw_stop(&e);
	gw_start(&e, NULL);
	/* the gateway's own provider key, not the client's: an upstream error */
	provider_refuses(&e, 401, 502, "upstream_error");
	gw_stop(&e);
}

/* PINCER_TRACE=http: the server connection's transitions, which io writes,
 * reach the gateway's logger as the agent's own traces do, in the same
 * form; a keep-alive request ends back in head, and the connection closes
 * when the gateway goes. */
Test(gateway_http, the_io_trace_goes_through_the_gateway_log)
{
	trace_capture_t c;
	trace_capture_begin(&c, "http");
	gw_t e;
	gw_start(&e, NULL);
	trace_capture_started(&c);
	resp_t r = {0};
	get(&e, "/livez", NULL, &r);
	cr_assert_eq(r.status, 200);
	resp_free(&r);
	gw_stop(&e);
	char *log = trace_capture_end(&c);
	char got[2048];
	trace_of(log, "http", "", got, sizeof(got));
	cr_assert(strstr(got, "new -> head (accepted); head -> body (head complete); "
			      "body -> service (request complete); service -> head (keep-alive)"),
		  "traced: %s", got);
	cr_assert(strstr(got, "-> closed"), "traced: %s", got);
	free(log);
}
