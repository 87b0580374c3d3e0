/*
 * The mock LLM server (agents/mock/mock_server.c) over real HTTP: a plain
 * blocking libcurl client on loopback asks for each scripted behaviour and
 * checks the status, headers and exact bytes against the plan the pure
 * module builds, the timing bounds of delays and stalls, disconnects,
 * malformed streams, the request log and the control endpoints.
 */
#include <criterion/criterion.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "agents/mock/mock_server.h"
#include "agents/mock/scenario.h"
#include "io/io.h"
#include "tests/support/test_util.h"
#include "curl_client.h"

static pc_runtime_t *rt;
static pc_io_t *io;
static pc_mock_server_t *mock;
static uint16_t port;

static void up_with(const pc_mock_server_config_t *cfg)
{
	cr_assert_eq(curl_global_init(CURL_GLOBAL_DEFAULT), CURLE_OK);
	rt = start_rt(4);
	cr_assert_eq(pc_io_new(rt, NULL, &io), 0);
	char err[PC_MOCK_ERR_MAX] = "";
	cr_assert_eq(pc_mock_server_start(io, cfg, &mock, err, sizeof(err)), 0, "%s", err);
	port = pc_mock_server_port(mock);
	cr_assert_neq(port, 0);
}

static void up(const char *scenario)
{
	pc_mock_server_config_t cfg = {.scenario = scenario};
	up_with(&cfg);
}

static void down(void)
{
	pc_mock_server_free(mock);
	pc_io_free(io);
	curl_global_cleanup();
	FREE_RUNTIME_CHECKED(rt);
}

/* ---- a blocking client (curl_client.h) ----------------------------------- */

static void request(const char *method, const char *path, const char *const *hdrs, const char *body,
		    long timeout_ms, resp_t *r)
{
	curl_request(port, method, path, hdrs, body, body ? strlen(body) : 0, timeout_ms, r);
}

static void post(const char *path, const char *body, const char *const *hdrs, resp_t *r)
{
	request("POST", path, hdrs, body, 10000, r);
	cr_assert_eq(r->code, CURLE_OK, "%s: %s", path, curl_easy_strerror(r->code));
}

/* A chat request body for `api` with one user message. */
static void chat_body(char *out, size_t cap, pc_mock_api_t api, bool stream, const char *user)
{
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "model", api == PC_MOCK_OPENAI ? "gpt-test" : "claude-test");
	if (stream)
		cJSON_AddTrueToObject(o, "stream");
	if (api == PC_MOCK_ANTHROPIC)
		cJSON_AddNumberToObject(o, "max_tokens", 1024);
	cJSON *msgs = cJSON_AddArrayToObject(o, "messages");
	cJSON *m = cJSON_CreateObject();
	cJSON_AddStringToObject(m, "role", "user");
	cJSON_AddStringToObject(m, "content", user);
	cJSON_AddItemToArray(msgs, m);
	char *s = cJSON_PrintUnformatted(o);
	cr_assert_lt(strlen(s), cap);
	strcpy(out, s);
	free(s);
	cJSON_Delete(o);
}

static const char *chat_path(pc_mock_api_t api)
{
	return api == PC_MOCK_OPENAI ? "/v1/chat/completions" : "/v1/messages";
}

/* The answer must be byte for byte what the plan for `step` (NULL: the
 * echo) says, with the sequence number `seq`. */
static void expect_plan(const char *step, pc_mock_api_t api, const char *req, uint64_t seq, const resp_t *r)
{
	cJSON *body = cJSON_Parse(req);
	pc_mock_step_t *st = NULL;
	if (step) {
		cJSON *j = cJSON_Parse(step);
		cr_assert_eq(pc_mock_step_parse(j, &st, NULL, 0), 0);
		cJSON_Delete(j);
	}
	/* Only OpenAI answers carry the creation time: take it from there. */
	const char *cr = strstr(r->body, "\"created\":");
	int64_t created = cr ? strtoll(cr + 10, NULL, 10) : 0;
	pc_mock_plan_t pl;
	cr_assert_eq(pc_mock_plan_build(st, api, body, seq, created, &pl), 0);
	cr_assert_eq(r->status, pl.status);
	char *want = NULL;
	size_t wl = 0;
	resp_append(&want, &wl, "", 0);
	if (pl.streamed)
		for (size_t i = 0; i < pl.write_count; i++)
			resp_append(&want, &wl, pl.body + pl.writes[i].off, pl.writes[i].len);
	else
		resp_append(&want, &wl, pl.body, pl.body_len);
	cr_assert_eq(r->len, wl, "got %zu bytes, want %zu:\n%s\n---\n%s", r->len, wl, r->body, want);
	cr_assert_eq(memcmp(r->body, want, wl), 0, "got:\n%s\n---\nwant:\n%s", r->body, want);
	/* Every header line of the plan is in the response as it is. */
	for (char *line = pl.headers, *e; line && (e = strstr(line, "\r\n")); line = e + 2) {
		*e = 0;
		cr_assert(strstr(r->head, line), "header \"%s\" missing in:\n%s", line, r->head);
		*e = '\r';
	}
	free(want);
	pc_mock_plan_free(&pl);
	pc_mock_step_free(st);
	cJSON_Delete(body);
}

/* SSE events in a body: the count of blank-line-terminated blocks. */
static int event_count(const char *s)
{
	int n = 0;
	for (const char *p = s; (p = strstr(p, "\n\n")); p += 2)
		n++;
	return n;
}

static cJSON *requests_log(void)
{
	cJSON *arr = NULL;
	cr_assert_eq(pc_mock_server_requests(mock, &arr), 0);
	return arr;
}

static const char *str_at(const cJSON *o, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* ---- answers ---------------------------------------------------------------- */

Test(mock_server, echo_both_apis_exact_bytes)
{
	up(NULL);
	char req[512];
	uint64_t seq = 0;
	for (int api = 0; api < 2; api++) {
		for (int stream = 0; stream < 2; stream++) {
			chat_body(req, sizeof(req), (pc_mock_api_t)api, stream, "Hello from the test");
			resp_t r = {0};
			post(chat_path((pc_mock_api_t)api), req, NULL, &r);
			cr_assert_eq(r.status, 200);
			cr_assert(strstr(r.body, "Hello"));
			cr_assert(strstr(r.head, stream ? "text/event-stream" : "application/json"));
			expect_plan(NULL, (pc_mock_api_t)api, req, ++seq, &r);
			resp_free(&r);
		}
	}
	down();
}

Test(mock_server, every_answer_kind_matches_its_plan)
{
	up(NULL);
	static const char *steps[] = {
		"{\"text\":\"Paris is the capital.\",\"chunks\":3}",
		"{\"kind\":\"tool_calls\",\"text\":\"Looking.\",\"tool_calls\":[{\"name\":\"get_weather\","
		"\"arguments\":{\"city\":\"Paris\"}},{\"name\":\"read\",\"arguments\":{\"path\":\"/x\"}}]}",
		"{\"kind\":\"reasoning\",\"reasoning\":\"Thinking hard about it\"}",
		"{\"kind\":\"empty\"}",
		"{\"text\":\"cached\",\"usage\":{\"input_tokens\":10,\"output_tokens\":20,\"cache_read_tokens\":5}}",
		"{\"kind\":\"error\",\"status\":500}",
		"{\"kind\":\"error\",\"status\":401}",
		"{\"kind\":\"error\",\"status\":402}",
		"{\"kind\":\"error\",\"status\":403}",
		"{\"kind\":\"error\",\"status\":502}",
		"{\"kind\":\"error\",\"status\":503}",
		"{\"kind\":\"error\",\"status\":529}",
		"{\"kind\":\"context_overflow\",\"max_tokens\":1000,\"prompt_tokens\":1500}",
	};
	char req[1024], hdr[512];
	uint64_t seq = 0;
	for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
		for (int api = 0; api < 2; api++) {
			chat_body(req, sizeof(req), (pc_mock_api_t)api, i % 2 == 0, "question");
			snprintf(hdr, sizeof(hdr), "x-mock-scenario: %s", steps[i]);
			const char *hdrs[] = {hdr, NULL};
			resp_t r = {0};
			post(chat_path((pc_mock_api_t)api), req, hdrs, &r);
			expect_plan(steps[i], (pc_mock_api_t)api, req, ++seq, &r);
			resp_free(&r);
		}
	}
	down();
}

Test(mock_server, rate_limit_has_retry_after)
{
	up(NULL);
	char req[512];
	chat_body(req, sizeof(req), PC_MOCK_ANTHROPIC, true,
		  "hi [[mock:{\"kind\":\"error\",\"status\":429,\"retry_after\":12}]]");
	resp_t r = {0};
	post("/v1/messages", req, NULL, &r);
	cr_assert_eq(r.status, 429);
	cr_assert(strstr(r.head, "retry-after: 12\r\n"), "%s", r.head);
	cJSON *j = cJSON_Parse(r.body);
	cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "error"), "type")->valuestring, "rate_limit_error");
	cJSON_Delete(j);
	resp_free(&r);
	down();
}

Test(mock_server, delays_are_honoured)
{
	up(NULL);
	char req[512];
	/* ttft 150, then 4 more pieces 40 ms apart. */
	const char *step = "{\"text\":\"alpha beta gamma delta omega\",\"ttft_ms\":150,\"delay_ms\":40}";
	for (int api = 0; api < 2; api++) {
		chat_body(req, sizeof(req), (pc_mock_api_t)api, true, "x");
		char hdr[256];
		snprintf(hdr, sizeof(hdr), "x-mock-scenario: %s", step);
		const char *hdrs[] = {hdr, NULL};
		resp_t r = {.mark = "alpha"};
		post(chat_path((pc_mock_api_t)api), req, hdrs, &r);
		cr_assert_geq(r.t_mark, 150 + 1, "api %d: first token after %" PRIu64 " ms", api, r.t_mark - 1);
		cr_assert_lt(r.t_mark, 1500);
		cr_assert_geq(r.t_end, 150 + 4 * 40, "api %d: done after %" PRIu64 " ms", api, r.t_end);
		cr_assert_lt(r.t_end, 3000);
		expect_plan(step, (pc_mock_api_t)api, req, (uint64_t)api + 1, &r);
		resp_free(&r);
	}
	/* Not streamed: the whole body after the time the stream would take. */
	chat_body(req, sizeof(req), PC_MOCK_OPENAI, false, "[[mock:{\"text\":\"a b c\",\"ttft_ms\":100,\"delay_ms\":50}]]");
	resp_t r = {0};
	post("/v1/chat/completions", req, NULL, &r);
	cr_assert_eq(r.status, 200);
	cr_assert_geq(r.t_end, 200);
	resp_free(&r);
	/* Errors can be slow too. */
	chat_body(req, sizeof(req), PC_MOCK_OPENAI, true, "[[mock:{\"kind\":\"error\",\"status\":503,\"ttft_ms\":120}]]");
	r = (resp_t){0};
	post("/v1/chat/completions", req, NULL, &r);
	cr_assert_eq(r.status, 503);
	cr_assert_geq(r.t_end, 120);
	resp_free(&r);
	down();
}

/* ---- faults ----------------------------------------------------------------- */

Test(mock_server, disconnect_mid_stream)
{
	up(NULL);
	char req[512];
	chat_body(req, sizeof(req), PC_MOCK_OPENAI, true,
		  "[[mock:{\"text\":\"one two three four\",\"disconnect_after\":3,\"delay_ms\":10}]]");
	resp_t r = {0};
	request("POST", "/v1/chat/completions", NULL, req, 5000, &r);
	/* The stream is cut: curl sees a broken chunked body. */
	cr_assert_neq(r.code, CURLE_OK);
	cr_assert_neq(r.code, CURLE_OPERATION_TIMEDOUT);
	cr_assert_eq(r.status, 200);
	cr_assert_eq(event_count(r.body), 1 + 3, "%s", r.body); /* the role chunk, three pieces */
	cr_assert_null(strstr(r.body, "[DONE]"));
	resp_free(&r);

	/* Not streamed: the connection closes with no answer at all. */
	chat_body(req, sizeof(req), PC_MOCK_ANTHROPIC, false, "[[mock:{\"disconnect_after\":0}]]");
	r = (resp_t){0};
	request("POST", "/v1/messages", NULL, req, 5000, &r);
	cr_assert_eq(r.code, CURLE_GOT_NOTHING, "%s", curl_easy_strerror(r.code));
	resp_free(&r);
	down();
}

Test(mock_server, stalls)
{
	up(NULL);
	char req[512];
	/* Headers, then silence for ever: the client gives up. */
	chat_body(req, sizeof(req), PC_MOCK_OPENAI, true, "[[mock:{\"kind\":\"stall\"}]]");
	resp_t r = {0};
	request("POST", "/v1/chat/completions", NULL, req, 300, &r);
	cr_assert_eq(r.code, CURLE_OPERATION_TIMEDOUT);
	cr_assert_eq(r.status, 200);
	cr_assert(strstr(r.head, "text/event-stream"));
	cr_assert_eq(r.len, 0);
	/* curl's timer and ours start a moment apart and count whole ms */
	cr_assert_geq(r.t_end, 290);
	resp_free(&r);

	/* Silence before the headers, then a close. */
	chat_body(req, sizeof(req), PC_MOCK_ANTHROPIC, true, "[[mock:{\"kind\":\"stall\",\"ms\":200,\"before_headers\":true}]]");
	r = (resp_t){0};
	request("POST", "/v1/messages", NULL, req, 5000, &r);
	cr_assert_eq(r.code, CURLE_GOT_NOTHING, "%s", curl_easy_strerror(r.code));
	cr_assert_eq(r.status, 0);
	cr_assert_geq(r.t_end, 200);
	cr_assert_lt(r.t_end, 3000);
	resp_free(&r);

	/* Mid-stream: two pieces, 250 ms of nothing, then a close. */
	chat_body(req, sizeof(req), PC_MOCK_ANTHROPIC, true,
		  "[[mock:{\"text\":\"a b c\",\"stall_after\":2,\"stall_ms\":250}]]");
	r = (resp_t){.mark = "ping"};
	request("POST", "/v1/messages", NULL, req, 5000, &r);
	cr_assert_neq(r.code, CURLE_OK);
	cr_assert_neq(r.code, CURLE_OPERATION_TIMEDOUT);
	cr_assert_eq(event_count(r.body), 3 + 2); /* start, ping, block start, two deltas */
	cr_assert_geq(r.t_end, 250);
	cr_assert_lt(r.t_mark + 100, r.t_end, "the events came before the stall, not with the close");
	resp_free(&r);
	down();
}

/* A client that leaves while its answer waits (before the first token,
 * or stalled mid-stream) ends its responder at once: the runtime is idle
 * long before the 10 s wait would have ended, on both APIs. */
Test(mock_server, a_client_that_leaves_ends_its_responder)
{
	up(NULL);
	static const char *const steps[] = {
		"[[mock:{\"text\":\"late\",\"ttft_ms\":10000}]]",
		"[[mock:{\"text\":\"a b c\",\"stall_after\":2,\"stall_ms\":10000}]]",
	};
	for (int api = 0; api < 2; api++) {
		for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
			char req[512];
			chat_body(req, sizeof(req), api ? PC_MOCK_ANTHROPIC : PC_MOCK_OPENAI, true, steps[i]);
			resp_t r = {0};
			request("POST", api ? "/v1/messages" : "/v1/chat/completions", NULL, req, 300, &r);
			cr_assert_eq(r.code, CURLE_OPERATION_TIMEDOUT, "%s", curl_easy_strerror(r.code));
			resp_free(&r);
			cr_assert_eq(pc_runtime_wait_quiescent(rt, 5000), 0, "api %d, step %zu: a responder still waits",
				     api, i);
		}
	}
	down();
}

Test(mock_server, malformed_streams)
{
	up(NULL);
	char req[512];
	chat_body(req, sizeof(req), PC_MOCK_OPENAI, true, "[[mock:{\"text\":\"a b\",\"malformed\":\"bad_json\"}]]");
	resp_t r = {0};
	post("/v1/chat/completions", req, NULL, &r);
	cr_assert(strstr(r.body, "data: [DONE]\n\n"));
	int bad = 0;
	for (char *line = strstr(r.body, "data: "); line; line = strstr(line + 1, "\ndata: ")) {
		char *d = strchr(line, ':') + 2, *e = strchr(d, '\n');
		cJSON *j = cJSON_ParseWithLength(d, (size_t)(e - d));
		bad += !j && strncmp(d, "[DONE]", 6);
		cJSON_Delete(j);
	}
	cr_assert_eq(bad, 1);
	resp_free(&r);

	chat_body(req, sizeof(req), PC_MOCK_ANTHROPIC, true, "[[mock:{\"text\":\"a b\",\"malformed\":\"truncated\"}]]");
	r = (resp_t){0};
	post("/v1/messages", req, NULL, &r); /* HTTP is fine, the SSE is not */
	cr_assert_null(strstr(r.body, "message_stop"));
	cr_assert(strstr(r.body, "message_delta"));
	resp_free(&r);
	down();
}

Test(mock_server, bad_requests_get_provider_errors)
{
	up(NULL);
	resp_t r = {0};
	post("/v1/chat/completions", "this is not json", NULL, &r);
	cr_assert_eq(r.status, 400);
	cJSON *j = cJSON_Parse(r.body);
	cr_assert_str_eq(str_at(cJSON_GetObjectItem(j, "error"), "type"), "invalid_request_error");
	cr_assert(strstr(str_at(cJSON_GetObjectItem(j, "error"), "message"), "not a JSON object"));
	cJSON_Delete(j);
	resp_free(&r);

	const char *hdrs[] = {"x-mock-scenario: {\"kind\":\"nope\"}", NULL};
	r = (resp_t){0};
	post("/v1/messages", "{\"messages\":[]}", hdrs, &r);
	cr_assert_eq(r.status, 400);
	j = cJSON_Parse(r.body);
	cr_assert_str_eq(str_at(j, "type"), "error");
	cr_assert(strstr(str_at(cJSON_GetObjectItem(j, "error"), "message"), "x-mock-scenario.kind"));
	cJSON_Delete(j);
	resp_free(&r);

	cJSON *log = requests_log();
	cr_assert_eq(cJSON_GetArraySize(log), 2);
	cr_assert_str_eq(str_at(cJSON_GetArrayItem(log, 0), "body"), "this is not json");
	cr_assert(strstr(str_at(cJSON_GetArrayItem(log, 1), "error"), "must be one of"));
	cJSON_Delete(log);

	/* Unknown routes and methods are the server's 404. */
	r = (resp_t){0};
	request("GET", "/v1/chat/completions", NULL, NULL, 5000, &r);
	cr_assert_eq(r.status, 404);
	resp_free(&r);
	down();
}

/* ---- selection, the log, control ---------------------------------------------- */

Test(mock_server, priority_marker_header_scenario_default)
{
	up("{\"steps\":[{\"text\":\"scenario one\"},{\"text\":\"scenario two\"}]}");
	char req[512];
	const char *hdrs[] = {"x-mock-scenario: {\"text\":\"from header\"}", NULL};
	resp_t r = {0};
	chat_body(req, sizeof(req), PC_MOCK_OPENAI, false, "[[mock:{\"text\":\"from marker\"}]]");
	post("/v1/chat/completions", req, hdrs, &r);
	cr_assert(strstr(r.body, "from marker"));
	resp_free(&r);
	chat_body(req, sizeof(req), PC_MOCK_OPENAI, false, "plain");
	r = (resp_t){0};
	post("/v1/chat/completions", req, hdrs, &r);
	cr_assert(strstr(r.body, "from header"));
	resp_free(&r);
	/* The scenario was not consumed by those. */
	const char *names[] = {"scenario one", "scenario two", "plain", "plain"};
	for (int i = 0; i < 4; i++) {
		r = (resp_t){0};
		post("/v1/chat/completions", req, NULL, &r);
		cr_assert(strstr(r.body, names[i]), "request %d: %s", i, r.body);
		resp_free(&r);
	}
	cJSON *log = requests_log();
	static const char *const sources[] = {"marker", "header", "scenario", "scenario", "default", "default"};
	cr_assert_eq(cJSON_GetArraySize(log), 6);
	for (int i = 0; i < 6; i++) {
		const cJSON *e = cJSON_GetArrayItem(log, i);
		cr_assert_str_eq(str_at(e, "source"), sources[i]);
		cr_assert_eq(cJSON_GetObjectItem(e, "seq")->valuedouble, i + 1);
		cr_assert_str_eq(str_at(e, "api"), "openai");
		cr_assert_str_eq(str_at(e, "method"), "POST");
		cr_assert_str_eq(str_at(e, "path"), "/v1/chat/completions");
	}
	cr_assert_str_eq(str_at(cJSON_GetObjectItem(cJSON_GetArrayItem(log, 0), "step"), "text"), "from marker");
	cr_assert_str_eq(str_at(cJSON_GetObjectItem(cJSON_GetArrayItem(log, 3), "step"), "text"), "scenario two");
	cr_assert(cJSON_IsNull(cJSON_GetObjectItem(cJSON_GetArrayItem(log, 4), "step")));
	cJSON_Delete(log);
	down();
}

Test(mock_server, sessions_and_recorded_requests)
{
	up("{\"steps\":[{\"text\":\"first\"},{\"text\":\"second\"}],\"then\":\"loop\"}");
	char req[512];
	chat_body(req, sizeof(req), PC_MOCK_ANTHROPIC, false, "q");
	const char *a[] = {"x-mock-session: A", "x-api-key: sk-ant-test", "anthropic-version: 2023-06-01", NULL};
	const char *b[] = {"x-mock-session: B", NULL};
	const char *want[][2] = {{"A", "first"}, {"A", "second"}, {"B", "first"}, {"A", "first"}, {"B", "second"}};
	for (int i = 0; i < 5; i++) {
		resp_t r = {0};
		post("/v1/messages", req, want[i][0][0] == 'A' ? a : b, &r);
		cr_assert(strstr(r.body, want[i][1]), "request %d: %s", i, r.body);
		resp_free(&r);
	}
	cJSON *log = requests_log();
	const cJSON *e = cJSON_GetArrayItem(log, 0);
	const cJSON *h = cJSON_GetObjectItem(e, "headers");
	cr_assert_str_eq(str_at(h, "x-mock-session"), "A");
	cr_assert_str_eq(str_at(h, "x-api-key"), "sk-ant-test");
	cr_assert_str_eq(str_at(h, "anthropic-version"), "2023-06-01");
	cr_assert_str_eq(str_at(h, "content-type"), "application/json");
	cr_assert_null(cJSON_GetObjectItem(h, "host"));
	cr_assert_null(cJSON_GetObjectItem(h, "content-length"));
	cJSON *sent = cJSON_Parse(req);
	cr_assert(cJSON_Compare(cJSON_GetObjectItem(e, "body"), sent, true));
	cJSON_Delete(sent);
	double t = cJSON_GetObjectItem(e, "time_ms")->valuedouble;
	cr_assert_gt(t, 1.6e12); /* wall clock, ms */
	cr_assert_str_eq(str_at(e, "api"), "anthropic");
	cJSON_Delete(log);
	down();
}

Test(mock_server, control_endpoints)
{
	up(NULL);
	resp_t r = {0};
	post("/__mock/scenario", "{\"steps\":[{\"kind\":\"bogus\"}]}", NULL, &r);
	cr_assert_eq(r.status, 400);
	cr_assert(strstr(r.body, "steps[0].kind: must be one of"), "%s", r.body);
	resp_free(&r);
	r = (resp_t){0};
	post("/__mock/scenario", "[{\"text\":\"scripted\"}]", NULL, &r);
	cr_assert_eq(r.status, 200);
	cr_assert_str_eq(r.body, "{\"ok\":true}");
	resp_free(&r);

	char req[512];
	chat_body(req, sizeof(req), PC_MOCK_OPENAI, true, "q");
	r = (resp_t){0};
	post("/v1/chat/completions", req, NULL, &r);
	cr_assert(strstr(r.body, "scripted"));
	resp_free(&r);

	r = (resp_t){0};
	request("GET", "/__mock/requests", NULL, NULL, 5000, &r);
	cr_assert_eq(r.status, 200);
	cr_assert(strstr(r.head, "application/json"));
	cJSON *arr = cJSON_Parse(r.body);
	cr_assert_eq(cJSON_GetArraySize(arr), 1); /* control requests are not logged */
	cr_assert_str_eq(str_at(cJSON_GetArrayItem(arr, 0), "source"), "scenario");
	cJSON_Delete(arr);
	resp_free(&r);

	/* Reset: empty log, the scenario and the ids start over. */
	r = (resp_t){0};
	post("/__mock/reset", "", NULL, &r);
	cr_assert_str_eq(r.body, "{\"ok\":true}");
	resp_free(&r);
	r = (resp_t){0};
	post("/v1/chat/completions", req, NULL, &r);
	expect_plan("{\"text\":\"scripted\"}", PC_MOCK_OPENAI, req, 1, &r);
	resp_free(&r);
	cJSON *log = requests_log();
	cr_assert_eq(cJSON_GetArraySize(log), 1);
	cJSON_Delete(log);

	/* The C API does the same. */
	char err[PC_MOCK_ERR_MAX];
	cr_assert_eq(pc_mock_server_set_scenario(mock, "{", 1, err, sizeof(err)), PC_EINVAL);
	cr_assert(strstr(err, "not valid JSON"));
	cr_assert_eq(pc_mock_server_set_scenario(mock, "[{\"text\":\"api\"}]", 16, err, sizeof(err)), 0);
	pc_mock_server_reset(mock);
	log = requests_log();
	cr_assert_eq(cJSON_GetArraySize(log), 0);
	cJSON_Delete(log);
	r = (resp_t){0};
	post("/v1/chat/completions", req, NULL, &r);
	cr_assert(strstr(r.body, "\"api\""));
	resp_free(&r);
	down();
}

Test(mock_server, models)
{
	up("{\"models\":[\"alpha\",\"beta\"]}");
	resp_t r = {0};
	request("GET", "/v1/models", NULL, NULL, 5000, &r);
	cr_assert_eq(r.status, 200);
	cJSON *j = cJSON_Parse(r.body);
	cr_assert_str_eq(str_at(j, "object"), "list");
	cr_assert_str_eq(str_at(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "data"), 1), "id"), "beta");
	cJSON_Delete(j);
	resp_free(&r);
	const char *hdrs[] = {"anthropic-version: 2023-06-01", NULL};
	r = (resp_t){0};
	request("GET", "/v1/models", hdrs, NULL, 5000, &r);
	j = cJSON_Parse(r.body);
	cr_assert_str_eq(str_at(j, "first_id"), "alpha");
	cr_assert_str_eq(str_at(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "data"), 0), "type"), "model");
	cJSON_Delete(j);
	resp_free(&r);
	cJSON *log = requests_log();
	cr_assert_eq(cJSON_GetArraySize(log), 2);
	cr_assert_str_eq(str_at(cJSON_GetArrayItem(log, 1), "api"), "anthropic");
	cr_assert(cJSON_IsNull(cJSON_GetObjectItem(cJSON_GetArrayItem(log, 1), "source")));
	cJSON_Delete(log);
	down();
}

Test(mock_server, log_is_bounded)
{
	pc_mock_server_config_t cfg = {.max_records = 3};
	up_with(&cfg);
	char req[256];
	chat_body(req, sizeof(req), PC_MOCK_OPENAI, false, "q");
	for (int i = 0; i < 5; i++) {
		resp_t r = {0};
		post("/v1/chat/completions", req, NULL, &r);
		resp_free(&r);
	}
	cJSON *log = requests_log();
	cr_assert_eq(cJSON_GetArraySize(log), 3);
	cr_assert_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(log, 0), "seq")->valuedouble, 3);
	cJSON_Delete(log);
	down();

	/* By bytes too: each entry costs about 750 bytes, so two fit. */
	cfg = (pc_mock_server_config_t){.max_record_bytes = 1800};
	up_with(&cfg);
	char big[1024];
	memset(big, 'x', 500);
	big[500] = 0;
	char body[1200];
	chat_body(body, sizeof(body), PC_MOCK_OPENAI, false, big);
	for (int i = 0; i < 4; i++) {
		resp_t r = {0};
		post("/v1/chat/completions", body, NULL, &r);
		resp_free(&r);
	}
	log = requests_log();
	cr_assert_eq(cJSON_GetArraySize(log), 2);
	cJSON_Delete(log);
	down();
}

/* ---- concurrency and shutdown -------------------------------------------------- */

/* Request i of a client thread was answered in full: its text starts
 * with `tag` and i. */
static void check_answered(const resp_t *r, char tag, int i)
{
	char want[16];
	snprintf(want, sizeof(want), "%c%d", tag, i);
	CHECK(r->code == CURLE_OK && r->status == 200 && strstr(r->body, want), "request %d: %d %ld", i, (int)r->code,
	      r->status);
}

/* Runs fn(args[i]) on n threads at once and waits for them all. */
static void in_threads(int n, void *(*fn)(void *), void *const *args)
{
	pthread_t t[16];
	cr_assert_leq(n, 16);
	for (int i = 0; i < n; i++)
		cr_assert_eq(pthread_create(&t[i], NULL, fn, args[i]), 0);
	for (int i = 0; i < n; i++)
		pthread_join(t[i], NULL);
}

static void *client_thread(void *arg)
{
	int n = *(int *)arg;
	for (int i = 0; i < n; i++) {
		char req[512];
		char text[64];
		snprintf(text, sizeof(text), "[[mock:{\"text\":\"w%d x y\",\"ttft_ms\":%d}]]", i, i % 3);
		chat_body(req, sizeof(req), i % 2 ? PC_MOCK_OPENAI : PC_MOCK_ANTHROPIC, i % 4 < 2, text);
		resp_t r = {0};
		request("POST", chat_path(i % 2 ? PC_MOCK_OPENAI : PC_MOCK_ANTHROPIC), NULL, req, 10000, &r);
		check_answered(&r, 'w', i);
		resp_free(&r);
	}
	return NULL;
}

Test(mock_server, concurrent_clients)
{
	up(NULL);
	reset_failures();
	enum { THREADS = 6, EACH = 40 };
	int each = EACH;
	void *args[THREADS];
	for (int i = 0; i < THREADS; i++)
		args[i] = &each;
	in_threads(THREADS, client_thread, args);
	assert_no_failures();
	cJSON *log = requests_log();
	cr_assert_eq(cJSON_GetArraySize(log), THREADS * EACH);
	cJSON_Delete(log);
	down();
}

/* Clients that leave and clients that stay, from many threads at once:
 * the router forgets each responder exactly once (by its end or by its
 * client's leaving), every answer that was waited for is whole, and no
 * responder outlives its client. */
static void *leaving_thread(void *arg)
{
	unsigned seed = (unsigned)(uintptr_t)arg;
	for (int i = 0; i < 24; i++) {
		bool leave = rand_r(&seed) % 3 == 0;
		pc_mock_api_t api = rand_r(&seed) % 2 ? PC_MOCK_OPENAI : PC_MOCK_ANTHROPIC;
		char req[512], text[96];
		if (leave)
			snprintf(text, sizeof(text), "[[mock:{\"text\":\"a b c\",\"stall_after\":%d,\"stall_ms\":10000}]]",
				 rand_r(&seed) % 3);
		else
			snprintf(text, sizeof(text), "[[mock:{\"text\":\"s%d x\",\"ttft_ms\":%d}]]", i, rand_r(&seed) % 5);
		chat_body(req, sizeof(req), api, true, text);
		resp_t r = {0};
		request("POST", chat_path(api), NULL, req, leave ? 20 + rand_r(&seed) % 100 : 10000, &r);
		if (leave)
			CHECK(r.code == CURLE_OPERATION_TIMEDOUT, "request %d: %d", i, (int)r.code);
		else
			check_answered(&r, 's', i);
		resp_free(&r);
	}
	return NULL;
}

Test(mock_server, clients_leaving_and_staying_at_once)
{
	up(NULL);
	reset_failures();
	enum { THREADS = 8 };
	void *seeds[THREADS];
	for (uintptr_t i = 0; i < THREADS; i++)
		seeds[i] = (void *)(i * 7919 + 1);
	in_threads(THREADS, leaving_thread, seeds);
	assert_no_failures();
	cr_assert_eq(pc_runtime_wait_quiescent(rt, 5000), 0, "a responder outlived its client");
	down();
}

/* The server goes away while a responder waits on a long timer and a
 * client waits for an answer: nothing may touch the freed server, the
 * responder stops with it (its timer cancelled, so the runtime is idle at
 * once, not when the 10 s wait would have ended), and everything is
 * reclaimed with the runtime. */
Test(mock_server, free_while_responders_wait)
{
	up(NULL);
	char req[512], msg[1024];
	chat_body(req, sizeof(req), PC_MOCK_OPENAI, true, "[[mock:{\"text\":\"late\",\"ttft_ms\":10000}]]");
	int len = snprintf(msg, sizeof(msg),
			   "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
			   "Content-Length: %zu\r\n\r\n%s", strlen(req), req);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	cr_assert_geq(fd, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	cr_assert_eq(write(fd, msg, (size_t)len), len);
	/* The headers and the role chunk arrive at once; "late" does not. */
	char buf[4096];
	ssize_t got = read(fd, buf, sizeof(buf) - 1);
	cr_assert_gt(got, 0);
	buf[got] = 0;
	cr_assert(strstr(buf, "200"));
	cr_assert_null(strstr(buf, "late"));
	pc_mock_server_free(mock);
	mock = NULL;
	/* The connection is closed by the server's free. */
	while ((got = read(fd, buf, sizeof(buf))) > 0)
		cr_assert_null(memmem(buf, (size_t)got, "late", 4));
	close(fd);
	cr_assert_eq(pc_runtime_wait_quiescent(rt, 5000), 0, "a responder still waits");
	pc_io_free(io);
	curl_global_cleanup();
	FREE_RUNTIME_CHECKED(rt);
}
