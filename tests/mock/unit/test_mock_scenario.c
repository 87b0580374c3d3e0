/*
 * Mock LLM scenarios (agents/mock/ step.c, scenario.c, request.c,
 * answer.c, plan.c), without a server: step validation, the selection
 * order and cursors, and the exact wire bytes and timing of the plans for
 * both APIs. Streams are read back with the project's SSE parser and
 * cJSON, so every event is checked to be what a
 * client would decode.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "agents/mock/scenario.h"
#include "io/sse.h"
#include "tests/support/test_util.h"

#define SEQ 7
#define CREATED 1700000000

static pc_mock_step_t *step_of(const char *json)
{
	cJSON *j = cJSON_Parse(json);
	cr_assert_not_null(j, "test step is not JSON: %s", json);
	pc_mock_step_t *s = NULL;
	char err[PC_MOCK_ERR_MAX] = "";
	int rc = pc_mock_step_parse(j, &s, err, sizeof(err));
	cJSON_Delete(j);
	cr_assert_eq(rc, 0, "step %s: %s", json, err);
	return s;
}

/* Parses a step that must be rejected; returns the message. */
static void step_error(const char *json, const char *want)
{
	cJSON *j = cJSON_Parse(json);
	cr_assert_not_null(j);
	pc_mock_step_t *s = NULL;
	char err[PC_MOCK_ERR_MAX] = "";
	int rc = pc_mock_step_parse(j, &s, err, sizeof(err));
	cJSON_Delete(j);
	cr_assert_eq(rc, PC_EINVAL, "step %s was accepted", json);
	cr_assert_null(s);
	cr_assert(strstr(err, want), "step %s: error \"%s\" lacks \"%s\"", json, err, want);
}

/* Builds the plan of `step` (NULL: echo) for request `req`. */
static void build(const char *step, pc_mock_api_t api, const char *req, pc_mock_plan_t *pl)
{
	cJSON *body = cJSON_Parse(req);
	cr_assert_not_null(body, "test request is not JSON: %s", req);
	pc_mock_step_t *s = step ? step_of(step) : NULL;
	cr_assert_eq(pc_mock_plan_build(s, api, body, SEQ, CREATED, pl), 0);
	pc_mock_step_free(s);
	cJSON_Delete(body);
}

/* The bytes the client receives: every write, in order. */
static char *wire(const pc_mock_plan_t *pl, size_t *len)
{
	static char buf[1 << 16];
	size_t n = 0;
	for (size_t i = 0; i < pl->write_count; i++) {
		cr_assert_lt(n + pl->writes[i].len, sizeof(buf));
		memcpy(buf + n, pl->body + pl->writes[i].off, pl->writes[i].len);
		n += pl->writes[i].len;
	}
	buf[n] = 0;
	*len = n;
	return buf;
}

static int on_event(void *user, const pc_sse_event_t *ev)
{
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "event", ev->type);
	cJSON *d = cJSON_ParseWithLength(ev->data, ev->data_len);
	if (d)
		cJSON_AddItemToObject(o, "json", d);
	else
		cJSON_AddStringToObject(o, "raw", ev->data);
	cJSON_AddItemToArray(user, o);
	return 0;
}

/* The stream as a client decodes it: [{"event":..., "json"|"raw":...}]. */
static cJSON *events_of(const pc_mock_plan_t *pl)
{
	cJSON *arr = cJSON_CreateArray();
	pc_sse_parser_t *p = NULL;
	cr_assert_eq(pc_sse_parser_new(NULL, on_event, arr, &p), 0);
	size_t n;
	const char *w = wire(pl, &n);
	cr_assert_eq(pc_sse_feed(p, w, n), 0);
	cr_assert_eq(pc_sse_finish(p), 0);
	pc_sse_parser_free(p);
	return arr;
}

static const cJSON *at(const cJSON *o, const char *path)
{
	/* "a.b.0.c": object keys and array indexes. */
	char buf[128];
	snprintf(buf, sizeof(buf), "%s", path);
	for (char *tok = strtok(buf, "."); tok && o; tok = strtok(NULL, "."))
		o = (*tok >= '0' && *tok <= '9') ? cJSON_GetArrayItem(o, atoi(tok))
						 : cJSON_GetObjectItemCaseSensitive(o, tok);
	return o;
}

static const char *str_at(const cJSON *o, const char *path)
{
	const cJSON *v = at(o, path);
	return cJSON_IsString(v) ? v->valuestring : NULL;
}

static double num_at(const cJSON *o, const char *path)
{
	const cJSON *v = at(o, path);
	cr_assert(cJSON_IsNumber(v), "%s is not a number", path);
	return v->valuedouble;
}

/* Joins the strings at `path` of every event that has one. */
static void join(const cJSON *evs, const char *path, char *out, size_t cap)
{
	out[0] = 0;
	const cJSON *e;
	cJSON_ArrayForEach(e, evs) {
		const char *s = str_at(e, path);
		if (s)
			strncat(out, s, cap - strlen(out) - 1);
	}
}

static const char *OA_REQ = "{\"model\":\"gpt-x\",\"stream\":true,\"messages\":["
			    "{\"role\":\"system\",\"content\":\"be brief\"},"
			    "{\"role\":\"user\",\"content\":\"Hello big world\"}]}";
static const char *AN_REQ = "{\"model\":\"claude-x\",\"stream\":true,\"system\":\"be brief\",\"messages\":["
			    "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Hello big world\"}]}]}";

/* ---- steps ------------------------------------------------------------------ */

Test(mock_step, every_kind_parses)
{
	static const char *ok[] = {
		"{}",
		"{\"text\":\"hi\",\"chunks\":2,\"ttft_ms\":10,\"delay_ms\":1}",
		"{\"kind\":\"text\",\"text\":\"\",\"reasoning\":\"r\",\"usage\":{\"input_tokens\":1,"
		"\"output_tokens\":2,\"cache_read_tokens\":3,\"cache_write_tokens\":4,\"reasoning_tokens\":5}}",
		"{\"kind\":\"tool_calls\",\"tool_calls\":[{\"name\":\"a\"},{\"name\":\"b\",\"arguments\":\"{bad\","
		"\"id\":\"call_x\"}],\"arg_chunks\":1}",
		"{\"kind\":\"reasoning\",\"reasoning\":\"think\",\"finish_reason\":\"length\"}",
		"{\"kind\":\"empty\",\"disconnect_after\":0}",
		"{\"kind\":\"error\",\"status\":503,\"message\":\"m\",\"type\":\"t\",\"code\":\"c\",\"retry_after\":3,"
		"\"ttft_ms\":5,\"headers\":{\"x-should-retry\":\"false\"}}",
		"{\"kind\":\"context_overflow\",\"max_tokens\":10,\"prompt_tokens\":20}",
		"{\"kind\":\"stall\",\"ms\":100,\"before_headers\":true}",
		"{\"stall_after\":2,\"stall_ms\":50}",
		"{\"malformed\":\"truncated\",\"malformed_at\":3}",
	};
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		pc_mock_step_t *s = step_of(ok[i]);
		cJSON *back = cJSON_Parse(pc_mock_step_json(s));
		cJSON *orig = cJSON_Parse(ok[i]);
		cr_assert(cJSON_Compare(back, orig, true), "step %zu json round trip", i);
		cJSON_Delete(back);
		cJSON_Delete(orig);
		pc_mock_step_free(s);
	}
	cr_assert_str_eq(pc_mock_step_json(NULL), "null");
	ASSERT_NO_LEAKS();
}

Test(mock_step, bad_steps_name_the_key)
{
	step_error("[]", "must be a JSON object");
	step_error("{\"txet\":\"x\"}", "txet: unknown key");
	step_error("{\"kind\":\"bogus\"}", "kind: must be one of");
	step_error("{\"kind\":\"error\"}", "status: is required");
	step_error("{\"kind\":\"error\",\"status\":700}", "status: must be an integer from 0 to 599");
	step_error("{\"kind\":\"error\",\"status\":150}", "status: must be from 200");
	step_error("{\"kind\":\"error\",\"status\":500,\"text\":\"x\"}", "text: not allowed for kind error");
	step_error("{\"kind\":\"tool_calls\"}", "tool_calls: is required");
	step_error("{\"kind\":\"tool_calls\",\"tool_calls\":[]}", "tool_calls: must be a non-empty array");
	step_error("{\"kind\":\"tool_calls\",\"tool_calls\":[{\"arguments\":{}}]}", "tool_calls[0].name: must be");
	step_error("{\"kind\":\"tool_calls\",\"tool_calls\":[{\"name\":\"a\",\"arguments\":[1]}]}",
		   "tool_calls[0].arguments: must be an object or a string");
	step_error("{\"kind\":\"tool_calls\",\"tool_calls\":[{\"name\":\"a\",\"x\":1}]}", "tool_calls[0].x: unknown");
	step_error("{\"kind\":\"reasoning\"}", "reasoning: is required");
	step_error("{\"text\":5}", "text: must be a string");
	step_error("{\"ttft_ms\":-1}", "ttft_ms: must be an integer");
	step_error("{\"ttft_ms\":1.5}", "ttft_ms: must be an integer");
	step_error("{\"ttft_ms\":999999999}", "ttft_ms: must be an integer from 0 to 86400000");
	step_error("{\"chunks\":0}", "chunks: must be at least 1");
	step_error("{\"usage\":{\"prompt_tokens\":1}}", "usage.prompt_tokens: unknown key");
	step_error("{\"usage\":{\"input_tokens\":\"1\"}}", "usage.input_tokens: must be an integer");
	step_error("{\"finish_reason\":\"end_turn\"}", "finish_reason: must be");
	step_error("{\"disconnect_after\":1,\"malformed\":\"truncated\"}", "only one of");
	step_error("{\"stall_ms\":5}", "stall_ms: needs stall_after");
	step_error("{\"malformed_at\":5}", "malformed_at: needs malformed");
	step_error("{\"malformed\":\"garbled\"}", "malformed: must be");
	step_error("{\"headers\":{\"bad name\":\"v\"}}", "headers: needs token names");
	step_error("{\"headers\":{\"x\":\"a\\r\\nb: c\"}}", "headers: needs token names");
	step_error("{\"kind\":\"stall\",\"before_headers\":1}", "before_headers: must be true or false");
	step_error("{\"kind\":\"stall\",\"delay_ms\":1}", "delay_ms: not allowed for kind stall");
	ASSERT_NO_LEAKS();
}

/* ---- scenarios and selection ------------------------------------------------ */

static pc_mock_scenario_t *scenario_of(const char *json)
{
	pc_mock_scenario_t *sc = NULL;
	char err[PC_MOCK_ERR_MAX] = "";
	cr_assert_eq(pc_mock_scenario_parse(json, strlen(json), &sc, err, sizeof(err)), 0, "%s", err);
	return sc;
}

/* The "text" of the next step, "echo" for the echo, or the kind. */
static const char *next_text(pc_mock_scenario_t *sc, const char *session, pc_mock_source_t want)
{
	static char out[64];
	const pc_mock_step_t *st = NULL;
	pc_mock_source_t src;
	cr_assert_eq(pc_mock_scenario_next(sc, session, &st, &src), 0);
	cr_assert_eq(src, want);
	if (!st)
		return "echo";
	cJSON *j = cJSON_Parse(pc_mock_step_json(st));
	snprintf(out, sizeof(out), "%s", str_at(j, "text") ? str_at(j, "text") : str_at(j, "kind"));
	cJSON_Delete(j);
	return out;
}

Test(mock_scenario, sequence_then_default)
{
	pc_mock_scenario_t *sc = scenario_of("[{\"text\":\"a\"},{\"text\":\"b\"}]");
	cr_assert_str_eq(next_text(sc, NULL, PC_MOCK_SRC_SCENARIO), "a");
	cr_assert_str_eq(next_text(sc, "", PC_MOCK_SRC_SCENARIO), "b");
	cr_assert_str_eq(next_text(sc, NULL, PC_MOCK_SRC_DEFAULT), "echo");
	cr_assert_str_eq(next_text(sc, NULL, PC_MOCK_SRC_DEFAULT), "echo");
	pc_mock_scenario_rewind(sc);
	cr_assert_str_eq(next_text(sc, NULL, PC_MOCK_SRC_SCENARIO), "a");
	pc_mock_scenario_release(sc);

	sc = scenario_of("{\"steps\":[{\"text\":\"a\"}],\"default\":{\"kind\":\"empty\"}}");
	cr_assert_str_eq(next_text(sc, NULL, PC_MOCK_SRC_SCENARIO), "a");
	cr_assert_str_eq(next_text(sc, NULL, PC_MOCK_SRC_DEFAULT), "empty");
	pc_mock_scenario_release(sc);
	ASSERT_NO_LEAKS();
}

Test(mock_scenario, loop_and_sessions)
{
	pc_mock_scenario_t *sc = scenario_of("{\"steps\":[{\"text\":\"a\"},{\"text\":\"b\"}],\"then\":\"loop\"}");
	cr_assert_str_eq(next_text(sc, NULL, PC_MOCK_SRC_SCENARIO), "a");
	cr_assert_str_eq(next_text(sc, "s1", PC_MOCK_SRC_SCENARIO), "a");
	cr_assert_str_eq(next_text(sc, "s1", PC_MOCK_SRC_SCENARIO), "b");
	cr_assert_str_eq(next_text(sc, "s2", PC_MOCK_SRC_SCENARIO), "a");
	cr_assert_str_eq(next_text(sc, "s1", PC_MOCK_SRC_SCENARIO), "a"); /* looped */
	cr_assert_str_eq(next_text(sc, NULL, PC_MOCK_SRC_SCENARIO), "b");
	cr_assert_str_eq(next_text(sc, NULL, PC_MOCK_SRC_SCENARIO), "a");
	pc_mock_scenario_rewind(sc);
	cr_assert_str_eq(next_text(sc, "s1", PC_MOCK_SRC_SCENARIO), "a");
	/* Many sessions: the table grows and keeps each cursor. */
	char key[32];
	for (int i = 0; i < 1000; i++) {
		snprintf(key, sizeof(key), "k%d", i);
		cr_assert_str_eq(next_text(sc, key, PC_MOCK_SRC_SCENARIO), "a");
	}
	for (int i = 0; i < 1000; i++) {
		snprintf(key, sizeof(key), "k%d", i);
		cr_assert_str_eq(next_text(sc, key, PC_MOCK_SRC_SCENARIO), "b");
	}
	/* A retained scenario outlives the first release. */
	pc_mock_scenario_t *again = pc_mock_scenario_retain(sc);
	pc_mock_scenario_release(sc);
	cr_assert_str_eq(next_text(again, "k1", PC_MOCK_SRC_SCENARIO), "a");
	pc_mock_scenario_release(again);
	pc_mock_scenario_release(NULL);
	ASSERT_NO_LEAKS();
}

Test(mock_scenario, models_and_empty)
{
	pc_mock_scenario_t *sc = scenario_of("{\"models\":[\"m1\",\"m2\"]}");
	cr_assert_str_eq(next_text(sc, NULL, PC_MOCK_SRC_DEFAULT), "echo");
	pc_mock_plan_t pl;
	cr_assert_eq(pc_mock_plan_models(sc, PC_MOCK_OPENAI, SEQ, CREATED, &pl), 0);
	cJSON *j = cJSON_ParseWithLength(pl.body, pl.body_len);
	cr_assert_str_eq(str_at(j, "object"), "list");
	cr_assert_str_eq(str_at(j, "data.1.id"), "m2");
	cr_assert_str_eq(str_at(j, "data.0.object"), "model");
	cr_assert_eq(num_at(j, "data.0.created"), CREATED);
	cJSON_Delete(j);
	pc_mock_plan_free(&pl);
	cr_assert_eq(pc_mock_plan_models(NULL, PC_MOCK_ANTHROPIC, SEQ, CREATED, &pl), 0);
	cr_assert_eq(pl.status, 200);
	cr_assert_str_eq(pl.body, "{\"data\":[{\"type\":\"model\",\"id\":\"mock-model\",\"display_name\":"
				  "\"mock-model\",\"created_at\":\"2023-11-14T22:13:20Z\"}],\"has_more\":false,"
				  "\"first_id\":\"mock-model\",\"last_id\":\"mock-model\"}");
	pc_mock_plan_free(&pl);
	pc_mock_scenario_release(sc);
	ASSERT_NO_LEAKS();
}

Test(mock_scenario, bad_scenarios_say_where)
{
	static const struct {
		const char *json;
		const char *want;
	} bad[] = {
		{"{\"steps\":[", "not valid JSON"},
		{"42", "must be an object or an array"},
		{"{\"stepz\":[]}", "stepz: unknown key"},
		{"{\"steps\":{}}", "steps: must be an array"},
		{"[{\"text\":\"a\"},{\"kind\":\"error\"}]", "steps[1].status: is required"},
		{"[{},{\"kind\":\"tool_calls\",\"tool_calls\":[{\"name\":\"\"}]}]", "steps[1].tool_calls[0].name"},
		{"{\"then\":\"again\"}", "then: must be"},
		{"{\"default\":{\"bogus\":1}}", "default.bogus: unknown key"},
		{"{\"models\":[]}", "models: must be a non-empty array"},
		{"{\"models\":[\"a\",3]}", "models[1]: must be"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		pc_mock_scenario_t *sc = NULL;
		char err[PC_MOCK_ERR_MAX] = "";
		int rc = pc_mock_scenario_parse(bad[i].json, strlen(bad[i].json), &sc, err, sizeof(err));
		cr_assert_eq(rc, PC_EINVAL, "%s accepted", bad[i].json);
		cr_assert_null(sc);
		cr_assert(strstr(err, bad[i].want), "%s: \"%s\" lacks \"%s\"", bad[i].json, err, bad[i].want);
	}
	ASSERT_NO_LEAKS();
}

/* The step a request scripts: its text, or "none". */
static const char *request_text(const char *req, const char *header, pc_mock_source_t *src, int want_rc)
{
	static char out[PC_MOCK_ERR_MAX];
	cJSON *body = cJSON_Parse(req);
	cr_assert_not_null(body);
	pc_mock_step_t *st = NULL;
	char err[PC_MOCK_ERR_MAX] = "";
	int rc = pc_mock_request_step(body, header, &st, src, err, sizeof(err));
	cJSON_Delete(body);
	cr_assert_eq(rc, want_rc, "%s: rc %d (%s)", req, rc, err);
	if (rc)
		snprintf(out, sizeof(out), "%s", err);
	else if (!st)
		snprintf(out, sizeof(out), "none");
	else {
		cJSON *j = cJSON_Parse(pc_mock_step_json(st));
		snprintf(out, sizeof(out), "%s", str_at(j, "text"));
		cJSON_Delete(j);
	}
	pc_mock_step_free(st);
	return out;
}

Test(mock_scenario, marker_then_header)
{
	pc_mock_source_t src = PC_MOCK_SRC_DEFAULT;
	const char *hdr = "{\"text\":\"from header\"}";
	/* A marker in the last user message wins over the header. */
	cr_assert_str_eq(request_text("{\"messages\":[{\"role\":\"user\",\"content\":"
				      "\"please [[mock:{\\\"text\\\":\\\"from [[marker]]\\\"}]] now\"}]}",
				      hdr, &src, 0), "from [[marker]]");
	cr_assert_eq(src, PC_MOCK_SRC_MARKER);
	/* In a content part too. */
	cr_assert_str_eq(request_text("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\"},"
				      "{\"type\":\"text\",\"text\":\"[[mock:{\\\"text\\\":\\\"part\\\"}]]\"}]}]}",
				      NULL, &src, 0), "part");
	/* Not when the last message is a tool result or the assistant's: an
	 * agent loop's next turn must not replay the marker. */
	cr_assert_str_eq(request_text("{\"messages\":[{\"role\":\"user\",\"content\":\"[[mock:{\\\"text\\\":\\\"m\\\"}]]\"},"
				      "{\"role\":\"assistant\",\"content\":null},{\"role\":\"tool\",\"content\":\"r\"}]}",
				      hdr, &src, 0), "from header");
	cr_assert_eq(src, PC_MOCK_SRC_HEADER);
	cr_assert_str_eq(request_text("{\"messages\":[{\"role\":\"user\",\"content\":\"[[mock:{\\\"text\\\":\\\"m\\\"}]]\"},"
				      "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"content\":\"x\"}]}]}",
				      NULL, &src, 0), "none");
	cr_assert_str_eq(request_text("{\"messages\":[]}", NULL, &src, 0), "none");
	cr_assert_str_eq(request_text("{}", NULL, &src, 0), "none");
	/* Broken ones are errors, not silently ignored. */
	cr_assert(strstr(request_text("{\"messages\":[{\"role\":\"user\",\"content\":\"[[mock:{oops}]]\"}]}",
				      NULL, &src, PC_EINVAL), "marker: [[mock:...]] must hold"));
	cr_assert(strstr(request_text("{\"messages\":[{\"role\":\"user\",\"content\":\"[[mock:{\\\"x\\\":1}]]\"}]}",
				      NULL, &src, PC_EINVAL), "marker.x: unknown key"));
	cr_assert(strstr(request_text("{\"messages\":[]}", "{nope", &src, PC_EINVAL), "x-mock-scenario: not valid JSON"));
	cr_assert(strstr(request_text("{\"messages\":[]}", "{\"kind\":\"error\"}", &src, PC_EINVAL),
			 "x-mock-scenario.status: is required"));
	ASSERT_NO_LEAKS();
}

/* ---- plans: OpenAI ----------------------------------------------------------- */

#define OA_HEAD "data: {\"id\":\"chatcmpl-%s\",\"object\":\"chat.completion.chunk\",\"created\":1700000000," \
		"\"model\":\"gpt-x\",\"system_fingerprint\":\"fp_mock\",\"choices\":"

Test(mock_plan, openai_echo_exact_bytes)
{
	pc_mock_plan_t pl;
	build(NULL, PC_MOCK_OPENAI, OA_REQ, &pl);
	cr_assert_eq(pl.status, 200);
	cr_assert(pl.send_head && pl.streamed);
	cr_assert_eq(pl.head_wait_ms, 0);
	cr_assert_eq(pl.finish, PC_MOCK_END);
	/* No delays: one write holds the whole answer. */
	cr_assert_eq(pl.write_count, 1);
	cr_assert_eq(pl.writes[0].events, 6);
	size_t n;
	const char *w = wire(&pl, &n);
	cr_assert_eq(n, pl.body_len);
	char id[64];
	cJSON *evs = events_of(&pl);
	const char *full = str_at(cJSON_GetArrayItem(evs, 0), "json.id");
	cr_assert_not_null(full);
	cr_assert_eq(strlen(full), strlen("chatcmpl-") + 29);
	cr_assert_eq(strncmp(full, "chatcmpl-", 9), 0);
	snprintf(id, sizeof(id), "%s", full + 9);
	char want[4096];
	snprintf(want, sizeof(want),
		 OA_HEAD "[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n"
		 OA_HEAD "[{\"index\":0,\"delta\":{\"content\":\"Hello\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n"
		 OA_HEAD "[{\"index\":0,\"delta\":{\"content\":\" big\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n"
		 OA_HEAD "[{\"index\":0,\"delta\":{\"content\":\" world\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n"
		 OA_HEAD "[{\"index\":0,\"delta\":{},\"logprobs\":null,\"finish_reason\":\"stop\"}]}\n\n"
		 "data: [DONE]\n\n",
		 id, id, id, id, id);
	cr_assert_str_eq(w, want);
	cr_assert(strstr(pl.headers, "Content-Type: text/event-stream\r\n"));
	cr_assert(strstr(pl.headers, "Cache-Control: no-cache\r\n"));
	cr_assert(strstr(pl.headers, "x-request-id: req_"));
	cJSON_Delete(evs);
	pc_mock_plan_free(&pl);
	ASSERT_NO_LEAKS();
}

Test(mock_plan, deterministic_and_unique_ids)
{
	pc_mock_plan_t a, b, c;
	build(NULL, PC_MOCK_OPENAI, OA_REQ, &a);
	build(NULL, PC_MOCK_OPENAI, OA_REQ, &b);
	cr_assert_eq(a.body_len, b.body_len);
	cr_assert_eq(memcmp(a.body, b.body, a.body_len), 0);
	cJSON *body = cJSON_Parse(OA_REQ);
	cr_assert_eq(pc_mock_plan_build(NULL, PC_MOCK_OPENAI, body, SEQ + 1, CREATED, &c), 0);
	cJSON *ea = events_of(&a), *ec = events_of(&c);
	cr_assert_str_neq(str_at(cJSON_GetArrayItem(ea, 0), "json.id"), str_at(cJSON_GetArrayItem(ec, 0), "json.id"));
	cJSON_Delete(ea);
	cJSON_Delete(ec);
	cJSON_Delete(body);
	pc_mock_plan_free(&a);
	pc_mock_plan_free(&b);
	pc_mock_plan_free(&c);
	ASSERT_NO_LEAKS();
}

Test(mock_plan, openai_tool_calls)
{
	pc_mock_plan_t pl;
	build("{\"kind\":\"tool_calls\",\"tool_calls\":[{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}},"
	      "{\"name\":\"read\",\"arguments\":{\"path\":\"/a b\"},\"id\":\"call_fixed\"}],\"arg_chunks\":4}",
	      PC_MOCK_OPENAI, OA_REQ, &pl);
	cJSON *evs = events_of(&pl);
	/* Bare tool calls: the role rides on the first tool fragment. */
	const cJSON *d0 = at(cJSON_GetArrayItem(evs, 0), "json.choices.0.delta");
	cr_assert_str_eq(str_at(d0, "role"), "assistant");
	cr_assert(cJSON_IsNull(at(d0, "content")));
	cr_assert_eq(num_at(d0, "tool_calls.0.index"), 0);
	const char *id0 = str_at(d0, "tool_calls.0.id");
	cr_assert(id0 && strncmp(id0, "call_", 5) == 0 && strlen(id0) == 29, "id %s", id0);
	cr_assert_str_eq(str_at(d0, "tool_calls.0.type"), "function");
	cr_assert_str_eq(str_at(d0, "tool_calls.0.function.name"), "get_weather");
	cr_assert_str_eq(str_at(d0, "tool_calls.0.function.arguments"), "");
	/* Fragments: 1 header + 4 argument pieces per tool, then finish,
	 * then [DONE]. */
	cr_assert_eq(cJSON_GetArraySize(evs), 2 * 5 + 2);
	char args[2][256] = {"", ""};
	const cJSON *e;
	int headers = 0;
	cJSON_ArrayForEach(e, evs) {
		const cJSON *tc = at(e, "json.choices.0.delta.tool_calls.0");
		if (!tc)
			continue;
		int idx = (int)num_at(tc, "index");
		cr_assert(idx == 0 || idx == 1);
		if (str_at(tc, "id")) {
			headers++;
			cr_assert_str_eq(str_at(tc, "function.arguments"), "");
			cr_assert_str_eq(str_at(tc, "function.name"), idx ? "read" : "get_weather");
			if (idx)
				cr_assert_str_eq(str_at(tc, "id"), "call_fixed");
		} else {
			cr_assert_null(at(tc, "function.name"));
			strcat(args[idx], str_at(tc, "function.arguments"));
		}
	}
	cr_assert_eq(headers, 2);
	cr_assert_str_eq(args[0], "{\"city\":\"Paris\"}");
	cr_assert_str_eq(args[1], "{\"path\":\"/a b\"}");
	cr_assert_str_eq(str_at(cJSON_GetArrayItem(evs, 10), "json.choices.0.finish_reason"), "tool_calls");
	cr_assert_str_eq(str_at(cJSON_GetArrayItem(evs, 11), "raw"), "[DONE]");
	cJSON_Delete(evs);
	pc_mock_plan_free(&pl);
	ASSERT_NO_LEAKS();
}

Test(mock_plan, openai_text_before_tools_reasoning_and_usage)
{
	pc_mock_plan_t pl;
	build("{\"kind\":\"tool_calls\",\"reasoning\":\"I should look\",\"text\":\"Checking.\","
	      "\"tool_calls\":[{\"name\":\"ls\"}],\"usage\":{\"input_tokens\":100,\"cache_read_tokens\":40}}",
	      PC_MOCK_OPENAI,
	      "{\"model\":\"gpt-x\",\"stream\":true,\"stream_options\":{\"include_usage\":true},"
	      "\"messages\":[{\"role\":\"user\",\"content\":\"go\"}]}",
	      &pl);
	cJSON *evs = events_of(&pl);
	char buf[256];
	join(evs, "json.choices.0.delta.reasoning_content", buf, sizeof(buf));
	cr_assert_str_eq(buf, "I should look");
	join(evs, "json.choices.0.delta.content", buf, sizeof(buf));
	cr_assert_str_eq(buf, "Checking.");
	const cJSON *e;
	int n = cJSON_GetArraySize(evs), i = 0;
	cJSON_ArrayForEach(e, evs) {
		if (i < n - 2) /* every chunk carries usage: null until the last */
			cr_assert(cJSON_IsNull(at(e, "json.usage")), "event %d", i);
		i++;
	}
	const cJSON *last = cJSON_GetArrayItem(evs, n - 2);
	cr_assert_eq(cJSON_GetArraySize(at(last, "json.choices")), 0);
	cr_assert_eq(num_at(last, "json.usage.prompt_tokens"), 140);
	cr_assert_eq(num_at(last, "json.usage.prompt_tokens_details.cached_tokens"), 40);
	/* Output: "Checking." 1 word + "{}" 1 + reasoning 3 words. */
	cr_assert_eq(num_at(last, "json.usage.completion_tokens"), 5);
	cr_assert_eq(num_at(last, "json.usage.completion_tokens_details.reasoning_tokens"), 3);
	cr_assert_eq(num_at(last, "json.usage.total_tokens"), 145);
	cr_assert_str_eq(str_at(cJSON_GetArrayItem(evs, n - 3), "json.choices.0.finish_reason"), "tool_calls");
	cJSON_Delete(evs);
	pc_mock_plan_free(&pl);
	ASSERT_NO_LEAKS();
}

Test(mock_plan, openai_non_stream)
{
	pc_mock_plan_t pl;
	build("{\"kind\":\"tool_calls\",\"tool_calls\":[{\"name\":\"ls\",\"arguments\":{\"a\":1}}],\"ttft_ms\":30,"
	      "\"delay_ms\":10}",
	      PC_MOCK_OPENAI, "{\"model\":\"gpt-x\",\"messages\":[{\"role\":\"user\",\"content\":\"one two three\"}]}", &pl);
	cr_assert(pl.send_head && !pl.streamed);
	/* The time the stream would take: ttft + 3 more fragments (header
	 * and three argument pieces). */
	cr_assert_eq(pl.head_wait_ms, 30 + 3 * 10);
	cr_assert(strstr(pl.headers, "Content-Type: application/json\r\n"));
	cJSON *j = cJSON_ParseWithLength(pl.body, pl.body_len);
	cr_assert_not_null(j);
	cr_assert_str_eq(str_at(j, "object"), "chat.completion");
	cr_assert_str_eq(str_at(j, "model"), "gpt-x");
	cr_assert(cJSON_IsNull(at(j, "choices.0.message.content")));
	cr_assert_str_eq(str_at(j, "choices.0.message.role"), "assistant");
	cr_assert_str_eq(str_at(j, "choices.0.message.tool_calls.0.function.arguments"), "{\"a\":1}");
	cr_assert_str_eq(str_at(j, "choices.0.finish_reason"), "tool_calls");
	cr_assert_eq(num_at(j, "usage.prompt_tokens"), 3);
	cJSON_Delete(j);
	pc_mock_plan_free(&pl);

	build(NULL, PC_MOCK_OPENAI, "{\"messages\":[{\"role\":\"user\",\"content\":\"  [[mock:{}]] echo me \"}]}", &pl);
	j = cJSON_ParseWithLength(pl.body, pl.body_len);
	cr_assert_str_eq(str_at(j, "choices.0.message.content"), "echo me");
	cr_assert_str_eq(str_at(j, "model"), "mock-model");
	cr_assert_str_eq(str_at(j, "choices.0.finish_reason"), "stop");
	cJSON_Delete(j);
	pc_mock_plan_free(&pl);
	ASSERT_NO_LEAKS();
}

/* ---- plans: Anthropic -------------------------------------------------------- */

Test(mock_plan, anthropic_echo_sequence)
{
	pc_mock_plan_t pl;
	build(NULL, PC_MOCK_ANTHROPIC, AN_REQ, &pl);
	cr_assert_eq(pl.write_count, 1);
	cr_assert(strstr(pl.headers, "request-id: req_01"));
	cJSON *evs = events_of(&pl);
	static const char *const seq[] = {"message_start", "ping", "content_block_start", "content_block_delta",
					  "content_block_delta", "content_block_delta", "content_block_stop",
					  "message_delta", "message_stop"};
	cr_assert_eq(cJSON_GetArraySize(evs), 9);
	for (int i = 0; i < 9; i++) {
		const cJSON *e = cJSON_GetArrayItem(evs, i);
		cr_assert_str_eq(str_at(e, "event"), seq[i]);
		cr_assert_str_eq(str_at(e, "json.type"), seq[i], "event %d's type", i);
	}
	const cJSON *ms = cJSON_GetArrayItem(evs, 0);
	const char *id = str_at(ms, "json.message.id");
	cr_assert(id && strncmp(id, "msg_01", 6) == 0 && strlen(id) == 28, "id %s", id);
	cr_assert_str_eq(str_at(ms, "json.message.model"), "claude-x");
	cr_assert_str_eq(str_at(ms, "json.message.role"), "assistant");
	/* "be brief" + "Hello big world". */
	cr_assert_eq(num_at(ms, "json.message.usage.input_tokens"), 5);
	cr_assert_eq(num_at(ms, "json.message.usage.cache_read_input_tokens"), 0);
	char buf[128];
	join(evs, "json.delta.text", buf, sizeof(buf));
	cr_assert_str_eq(buf, "Hello big world");
	cr_assert_str_eq(str_at(cJSON_GetArrayItem(evs, 2), "json.content_block.type"), "text");
	const cJSON *md = cJSON_GetArrayItem(evs, 7);
	cr_assert_str_eq(str_at(md, "json.delta.stop_reason"), "end_turn");
	cr_assert(cJSON_IsNull(at(md, "json.delta.stop_sequence")));
	cr_assert_eq(num_at(md, "json.usage.output_tokens"), 3);
	size_t n;
	const char *w = wire(&pl, &n);
	cr_assert(strstr(w, "event: ping\ndata: {\"type\": \"ping\"}\n\n"));
	cr_assert(strstr(w, "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"));
	cJSON_Delete(evs);
	pc_mock_plan_free(&pl);
	ASSERT_NO_LEAKS();
}

Test(mock_plan, anthropic_thinking_text_tools)
{
	pc_mock_plan_t pl;
	build("{\"kind\":\"tool_calls\",\"reasoning\":\"let me think\",\"text\":\"Sure.\",\"tool_calls\":["
	      "{\"name\":\"a\",\"arguments\":{\"x\":\"y\"}},{\"name\":\"b\",\"arguments\":{}}],\"finish_reason\":\"length\"}",
	      PC_MOCK_ANTHROPIC, AN_REQ, &pl);
	cJSON *evs = events_of(&pl);
	const cJSON *e;
	char thinking[64] = "", text[64] = "", args[4][64] = {"", "", "", ""};
	int sig = 0, starts = 0, stops = 0;
	cJSON_ArrayForEach(e, evs) {
		const char *t = str_at(e, "json.type");
		if (!strcmp(t, "content_block_start")) {
			int idx = (int)num_at(e, "json.index");
			cr_assert_eq(idx, starts++);
			const char *bt = str_at(e, "json.content_block.type");
			cr_assert_str_eq(bt, idx == 0 ? "thinking" : idx == 1 ? "text" : "tool_use");
			if (idx >= 2) {
				const char *id = str_at(e, "json.content_block.id");
				cr_assert(id && strncmp(id, "toolu_01", 8) == 0 && strlen(id) == 30, "id %s", id);
				cr_assert_str_eq(str_at(e, "json.content_block.name"), idx == 2 ? "a" : "b");
				cr_assert(cJSON_IsObject(at(e, "json.content_block.input")));
			}
		} else if (!strcmp(t, "content_block_delta")) {
			int idx = (int)num_at(e, "json.index");
			const char *dt = str_at(e, "json.delta.type");
			if (!strcmp(dt, "thinking_delta"))
				strcat(thinking, str_at(e, "json.delta.thinking"));
			else if (!strcmp(dt, "signature_delta"))
				sig++;
			else if (!strcmp(dt, "text_delta"))
				strcat(text, str_at(e, "json.delta.text"));
			else {
				cr_assert_str_eq(dt, "input_json_delta");
				strcat(args[idx], str_at(e, "json.delta.partial_json"));
			}
		} else if (!strcmp(t, "content_block_stop")) {
			cr_assert_eq(num_at(e, "json.index"), stops++);
		}
	}
	cr_assert_eq(starts, 4);
	cr_assert_eq(stops, 4);
	cr_assert_eq(sig, 1);
	cr_assert_str_eq(thinking, "let me think");
	cr_assert_str_eq(text, "Sure.");
	cr_assert_str_eq(args[2], "{\"x\":\"y\"}");
	cr_assert_str_eq(args[3], "{}");
	int n = cJSON_GetArraySize(evs);
	cr_assert_str_eq(str_at(cJSON_GetArrayItem(evs, n - 2), "json.delta.stop_reason"), "max_tokens");
	cJSON_Delete(evs);
	pc_mock_plan_free(&pl);
	ASSERT_NO_LEAKS();
}

Test(mock_plan, anthropic_non_stream_and_reasoning_only)
{
	pc_mock_plan_t pl;
	const char *req = "{\"model\":\"claude-x\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
	build("{\"kind\":\"tool_calls\",\"text\":\"t\",\"tool_calls\":[{\"name\":\"a\",\"arguments\":{\"k\":[1,2]}},"
	      "{\"name\":\"b\",\"arguments\":\"{not json\"}],\"usage\":{\"output_tokens\":9,\"cache_write_tokens\":2}}",
	      PC_MOCK_ANTHROPIC, req, &pl);
	cJSON *j = cJSON_ParseWithLength(pl.body, pl.body_len);
	cr_assert_not_null(j);
	cr_assert_str_eq(str_at(j, "type"), "message");
	cr_assert_str_eq(str_at(j, "content.0.type"), "text");
	cr_assert_str_eq(str_at(j, "content.1.type"), "tool_use");
	cr_assert_eq(num_at(j, "content.1.input.k.1"), 2);
	cr_assert_str_eq(str_at(j, "content.2.input"), "{not json"); /* as broken as asked */
	cr_assert_str_eq(str_at(j, "stop_reason"), "tool_use");
	cr_assert_eq(num_at(j, "usage.output_tokens"), 9);
	cr_assert_eq(num_at(j, "usage.cache_creation_input_tokens"), 2);
	cr_assert_eq(num_at(j, "usage.input_tokens"), 1);
	cJSON_Delete(j);
	pc_mock_plan_free(&pl);

	build("{\"kind\":\"reasoning\",\"reasoning\":\"only thinking\"}", PC_MOCK_ANTHROPIC,
	      "{\"stream\":true,\"messages\":[]}", &pl);
	cJSON *evs = events_of(&pl);
	/* start, ping, thinking block (start, 2 deltas, signature, stop),
	 * message_delta, message_stop. */
	cr_assert_eq(cJSON_GetArraySize(evs), 9);
	cr_assert_str_eq(str_at(cJSON_GetArrayItem(evs, 2), "json.content_block.type"), "thinking");
	cr_assert_str_eq(str_at(cJSON_GetArrayItem(evs, 5), "json.delta.type"), "signature_delta");
	cr_assert_str_eq(str_at(cJSON_GetArrayItem(evs, 7), "json.delta.stop_reason"), "end_turn");
	cJSON_Delete(evs);
	pc_mock_plan_free(&pl);
	ASSERT_NO_LEAKS();
}

Test(mock_plan, empty_answers)
{
	pc_mock_plan_t pl;
	build("{\"kind\":\"empty\"}", PC_MOCK_ANTHROPIC, AN_REQ, &pl);
	cJSON *evs = events_of(&pl);
	cr_assert_eq(cJSON_GetArraySize(evs), 4); /* start, ping, delta, stop */
	cr_assert_eq(num_at(cJSON_GetArrayItem(evs, 2), "json.usage.output_tokens"), 0);
	cJSON_Delete(evs);
	pc_mock_plan_free(&pl);

	build("{\"text\":\"\"}", PC_MOCK_OPENAI, OA_REQ, &pl);
	evs = events_of(&pl);
	cr_assert_eq(cJSON_GetArraySize(evs), 3); /* role, finish, [DONE] */
	cr_assert_str_eq(str_at(cJSON_GetArrayItem(evs, 1), "json.choices.0.finish_reason"), "stop");
	cJSON_Delete(evs);
	pc_mock_plan_free(&pl);

	build("{\"kind\":\"empty\"}", PC_MOCK_OPENAI, "{\"messages\":[]}", &pl);
	cJSON *j = cJSON_ParseWithLength(pl.body, pl.body_len);
	cr_assert_str_eq(str_at(j, "choices.0.message.content"), "");
	cr_assert_eq(num_at(j, "usage.completion_tokens"), 0);
	cJSON_Delete(j);
	pc_mock_plan_free(&pl);
	ASSERT_NO_LEAKS();
}

/* ---- chunking, escaping, timing ---------------------------------------------- */

Test(mock_plan, chunks_split_on_code_points)
{
	/* 2-, 3- and 4-byte sequences, quotes, control characters. */
	const char *text = "h\xc3\xa9llo \xe2\x82\xac \"q\" \\ \n\t\x01 \xf0\x9f\x98\x80!";
	char step[256], req[64];
	cJSON *s = cJSON_CreateObject();
	cJSON_AddStringToObject(s, "text", text);
	cJSON_AddNumberToObject(s, "chunks", 7);
	char *sj = cJSON_PrintUnformatted(s);
	snprintf(step, sizeof(step), "%s", sj);
	free(sj);
	cJSON_Delete(s);
	snprintf(req, sizeof(req), "{\"stream\":true,\"messages\":[]}");
	for (int api = 0; api < 2; api++) {
		pc_mock_plan_t pl;
		build(step, (pc_mock_api_t)api, req, &pl);
		cJSON *evs = events_of(&pl);
		char buf[256];
		join(evs, api == PC_MOCK_OPENAI ? "json.choices.0.delta.content" : "json.delta.text", buf, sizeof(buf));
		cr_assert_str_eq(buf, text);
		int pieces = 0;
		const cJSON *e;
		cJSON_ArrayForEach(e, evs) {
			const char *p = str_at(e, api == PC_MOCK_OPENAI ? "json.choices.0.delta.content" : "json.delta.text");
			if (!p || !*p)
				continue;
			pieces++;
			cr_assert_neq((unsigned char)p[0] & 0xC0, 0x80, "a piece starts inside a code point");
		}
		cr_assert_eq(pieces, 7);
		cJSON_Delete(evs);
		pc_mock_plan_free(&pl);
	}
	/* More chunks than code points: one per code point. */
	pc_mock_plan_t pl;
	build("{\"text\":\"\xc3\xa9t\xc3\xa9\",\"chunks\":50}", PC_MOCK_OPENAI, req, &pl);
	cJSON *evs = events_of(&pl);
	cr_assert_eq(cJSON_GetArraySize(evs), 3 + 3);
	cJSON_Delete(evs);
	pc_mock_plan_free(&pl);
	ASSERT_NO_LEAKS();
}

Test(mock_plan, waits_follow_ttft_and_delay)
{
	pc_mock_plan_t pl;
	build("{\"text\":\"a b c\",\"ttft_ms\":100,\"delay_ms\":20}", PC_MOCK_OPENAI, OA_REQ, &pl);
	/* role at once; "a" after ttft; " b", " c"+finish+[DONE] after delay. */
	cr_assert_eq(pl.write_count, 4);
	uint32_t waits[] = {0, 100, 20, 20}, events[] = {1, 1, 1, 3};
	for (int i = 0; i < 4; i++) {
		cr_assert_eq(pl.writes[i].wait_ms, waits[i], "write %d", i);
		cr_assert_eq(pl.writes[i].events, events[i], "write %d", i);
	}
	pc_mock_plan_free(&pl);

	build("{\"text\":\"a b\",\"ttft_ms\":100,\"delay_ms\":20}", PC_MOCK_ANTHROPIC, AN_REQ, &pl);
	/* start+ping; block start + "a"; " b" + stop + delta + stop. */
	cr_assert_eq(pl.write_count, 3);
	cr_assert_eq(pl.writes[0].events, 2);
	cr_assert_eq(pl.writes[1].wait_ms, 100);
	cr_assert_eq(pl.writes[1].events, 2);
	cr_assert_eq(pl.writes[2].wait_ms, 20);
	cr_assert_eq(pl.writes[2].events, 4);
	pc_mock_plan_free(&pl);

	/* An empty answer still waits ttft before its end. */
	build("{\"kind\":\"empty\",\"ttft_ms\":50}", PC_MOCK_OPENAI, OA_REQ, &pl);
	cr_assert_eq(pl.write_count, 2);
	cr_assert_eq(pl.writes[1].wait_ms, 50);
	pc_mock_plan_free(&pl);

	build("{\"kind\":\"error\",\"status\":500,\"ttft_ms\":40}", PC_MOCK_OPENAI, OA_REQ, &pl);
	cr_assert_eq(pl.head_wait_ms, 40);
	cr_assert(!pl.streamed);
	pc_mock_plan_free(&pl);
	ASSERT_NO_LEAKS();
}

/* ---- errors ------------------------------------------------------------------ */

static cJSON *error_of(const char *step, pc_mock_api_t api, pc_mock_plan_t *pl)
{
	build(step, api, "{\"model\":\"m-1\",\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"a b c\"}]}", pl);
	cr_assert(pl->send_head && !pl->streamed);
	cr_assert(strstr(pl->headers, "Content-Type: application/json\r\n"));
	cJSON *j = cJSON_ParseWithLength(pl->body, pl->body_len);
	cr_assert_not_null(j);
	return j;
}

Test(mock_plan, error_shapes)
{
	static const struct {
		int status;
		const char *oa_type, *oa_code, *an_type;
	} cases[] = {
		{400, "invalid_request_error", NULL, "invalid_request_error"},
		{401, "invalid_request_error", "invalid_api_key", "authentication_error"},
		{402, "insufficient_quota", "insufficient_quota", "billing_error"},
		{403, "permission_error", NULL, "permission_error"},
		{404, "invalid_request_error", "model_not_found", "not_found_error"},
		{429, "requests", "rate_limit_exceeded", "rate_limit_error"},
		{500, "server_error", NULL, "api_error"},
		{502, "server_error", NULL, "api_error"},
		{503, "server_error", NULL, "overloaded_error"},
		{529, "server_error", NULL, "overloaded_error"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char step[64];
		snprintf(step, sizeof(step), "{\"kind\":\"error\",\"status\":%d}", cases[i].status);
		pc_mock_plan_t pl;
		cJSON *j = error_of(step, PC_MOCK_OPENAI, &pl);
		cr_assert_eq(pl.status, cases[i].status);
		cr_assert_str_eq(str_at(j, "error.type"), cases[i].oa_type, "status %d", cases[i].status);
		if (cases[i].oa_code)
			cr_assert_str_eq(str_at(j, "error.code"), cases[i].oa_code);
		else
			cr_assert(cJSON_IsNull(at(j, "error.code")));
		cr_assert(cJSON_IsNull(at(j, "error.param")));
		cr_assert(str_at(j, "error.message") && *str_at(j, "error.message"));
		cr_assert_null(strstr(pl.headers, "retry-after"));
		cJSON_Delete(j);
		pc_mock_plan_free(&pl);

		j = error_of(step, PC_MOCK_ANTHROPIC, &pl);
		cr_assert_str_eq(str_at(j, "type"), "error");
		cr_assert_str_eq(str_at(j, "error.type"), cases[i].an_type, "status %d", cases[i].status);
		cr_assert(str_at(j, "error.message") && *str_at(j, "error.message"));
		cr_assert(str_at(j, "request_id") && strstr(pl.headers, str_at(j, "request_id")));
		cJSON_Delete(j);
		pc_mock_plan_free(&pl);
	}
	pc_mock_plan_t pl;
	cJSON *j = error_of("{\"kind\":\"error\",\"status\":429,\"retry_after\":7,\"headers\":{\"x-should-retry\":\"true\"}}",
			    PC_MOCK_ANTHROPIC, &pl);
	cr_assert(strstr(pl.headers, "retry-after: 7\r\n"));
	cr_assert(strstr(pl.headers, "x-should-retry: true\r\n"));
	cr_assert(strstr(str_at(j, "error.message"), "rate limit"));
	cJSON_Delete(j);
	pc_mock_plan_free(&pl);
	j = error_of("{\"kind\":\"error\",\"status\":402,\"message\":\"Insufficient credits\",\"type\":\"t\",\"code\":\"c\"}",
		     PC_MOCK_OPENAI, &pl);
	cr_assert_str_eq(pl.body, "{\"error\":{\"message\":\"Insufficient credits\",\"type\":\"t\",\"param\":null,\"code\":\"c\"}}");
	cJSON_Delete(j);
	pc_mock_plan_free(&pl);
	ASSERT_NO_LEAKS();
}

Test(mock_plan, context_overflow_wording)
{
	pc_mock_plan_t pl;
	cJSON *j = error_of("{\"kind\":\"context_overflow\",\"max_tokens\":128000,\"prompt_tokens\":130512}",
			    PC_MOCK_OPENAI, &pl);
	cr_assert_eq(pl.status, 400);
	cr_assert_str_eq(pl.body, "{\"error\":{\"message\":\"This model's maximum context length is 128000 tokens. "
				  "However, your messages resulted in 130512 tokens. Please reduce the length of the "
				  "messages.\",\"type\":\"invalid_request_error\",\"param\":\"messages\",\"code\":"
				  "\"context_length_exceeded\"}}");
	cJSON_Delete(j);
	pc_mock_plan_free(&pl);
	j = error_of("{\"kind\":\"context_overflow\"}", PC_MOCK_ANTHROPIC, &pl);
	cr_assert_eq(pl.status, 400);
	cr_assert_str_eq(str_at(j, "error.type"), "invalid_request_error");
	/* Default: the API's window, and over it by the request's words + 1. */
	cr_assert_str_eq(str_at(j, "error.message"), "prompt is too long: 200004 tokens > 200000 maximum");
	cJSON_Delete(j);
	pc_mock_plan_free(&pl);

	cr_assert_eq(pc_mock_plan_error(PC_MOCK_ANTHROPIC, 400, "mock: bad", SEQ, &pl), 0);
	j = cJSON_ParseWithLength(pl.body, pl.body_len);
	cr_assert_str_eq(str_at(j, "error.message"), "mock: bad");
	cr_assert_str_eq(str_at(j, "error.type"), "invalid_request_error");
	cJSON_Delete(j);
	pc_mock_plan_free(&pl);
	cr_assert_eq(pc_mock_plan_error(PC_MOCK_OPENAI, 42, "x", SEQ, &pl), PC_EINVAL);
	ASSERT_NO_LEAKS();
}

/* ---- faults ------------------------------------------------------------------ */

static int count_events(const pc_mock_plan_t *pl)
{
	cJSON *evs = events_of(pl);
	int n = cJSON_GetArraySize(evs);
	cJSON_Delete(evs);
	return n;
}

/* Text deltas in a plan's stream, either API. */
static int text_deltas(const pc_mock_plan_t *pl)
{
	cJSON *evs = events_of(pl);
	int n = 0;
	const cJSON *e;
	cJSON_ArrayForEach(e, evs) {
		const char *oa = str_at(e, "json.choices.0.delta.content");
		n += (oa && *oa) || str_at(e, "json.delta.text");
	}
	cJSON_Delete(evs);
	return n;
}

Test(mock_plan, disconnect_and_stall)
{
	/* Counts are pieces, whatever the API's framing. */
	pc_mock_plan_t pl;
	build("{\"text\":\"a b c d\",\"disconnect_after\":3}", PC_MOCK_OPENAI, OA_REQ, &pl);
	cr_assert_eq(pl.finish, PC_MOCK_ABORT);
	cr_assert_eq(pl.finish_wait_ms, 0);
	cr_assert_eq(count_events(&pl), 1 + 3); /* the role chunk and three pieces */
	cr_assert_eq(text_deltas(&pl), 3);
	pc_mock_plan_free(&pl);
	build("{\"text\":\"a b c d\",\"disconnect_after\":3}", PC_MOCK_ANTHROPIC, AN_REQ, &pl);
	cr_assert_eq(count_events(&pl), 3 + 3); /* start, ping, block start, three deltas */
	cr_assert_eq(text_deltas(&pl), 3);
	pc_mock_plan_free(&pl);
	build("{\"kind\":\"tool_calls\",\"tool_calls\":[{\"name\":\"t\",\"arguments\":{\"a\":1}}],"
	      "\"disconnect_after\":2}", PC_MOCK_ANTHROPIC, AN_REQ, &pl);
	/* The tool's header is a piece, then one argument piece. */
	cr_assert_eq(count_events(&pl), 2 + 2 + 1);
	pc_mock_plan_free(&pl);

	build("{\"text\":\"a b\",\"disconnect_after\":100}", PC_MOCK_ANTHROPIC, AN_REQ, &pl);
	cr_assert_eq(pl.finish, PC_MOCK_ABORT);
	cr_assert_eq(count_events(&pl), 8); /* everything, then the close */
	pc_mock_plan_free(&pl);

	build("{\"text\":\"a b c d\",\"stall_after\":2,\"stall_ms\":300}", PC_MOCK_ANTHROPIC, AN_REQ, &pl);
	cr_assert_eq(pl.finish, PC_MOCK_ABORT);
	cr_assert_eq(pl.finish_wait_ms, 300);
	cr_assert_eq(text_deltas(&pl), 2);
	pc_mock_plan_free(&pl);

	/* After no piece: the preamble only. */
	build("{\"text\":\"a\",\"stall_after\":0}", PC_MOCK_OPENAI, OA_REQ, &pl);
	cr_assert_eq(pl.finish, PC_MOCK_HANG);
	cr_assert(pl.send_head);
	cr_assert_eq(pl.write_count, 1);
	cr_assert_eq(pl.writes[0].events, 1);
	pc_mock_plan_free(&pl);
	build("{\"kind\":\"empty\",\"stall_after\":0}", PC_MOCK_ANTHROPIC, AN_REQ, &pl);
	cr_assert_eq(count_events(&pl), 2); /* message_start, ping */
	pc_mock_plan_free(&pl);

	/* Not streamed: no status line at all, after the answer's time. */
	build("{\"text\":\"a\",\"disconnect_after\":1,\"ttft_ms\":20}", PC_MOCK_OPENAI, "{\"messages\":[]}", &pl);
	cr_assert(!pl.send_head);
	cr_assert_eq(pl.head_wait_ms, 20);
	cr_assert_eq(pl.finish, PC_MOCK_ABORT);
	pc_mock_plan_free(&pl);
	build("{\"text\":\"a\",\"stall_after\":1,\"stall_ms\":70}", PC_MOCK_OPENAI, "{\"messages\":[]}", &pl);
	cr_assert(!pl.send_head);
	cr_assert_eq(pl.finish_wait_ms, 70);
	cr_assert_eq(pl.finish, PC_MOCK_ABORT);
	pc_mock_plan_free(&pl);

	build("{\"kind\":\"stall\"}", PC_MOCK_OPENAI, OA_REQ, &pl);
	cr_assert(pl.send_head && pl.streamed);
	cr_assert_eq(pl.status, 200);
	cr_assert(strstr(pl.headers, "text/event-stream"));
	cr_assert_eq(pl.write_count, 0);
	cr_assert_eq(pl.finish, PC_MOCK_HANG);
	pc_mock_plan_free(&pl);
	build("{\"kind\":\"stall\",\"ms\":250,\"before_headers\":true}", PC_MOCK_ANTHROPIC, AN_REQ, &pl);
	cr_assert(!pl.send_head);
	cr_assert_eq(pl.finish, PC_MOCK_ABORT);
	cr_assert_eq(pl.finish_wait_ms, 250);
	pc_mock_plan_free(&pl);
	ASSERT_NO_LEAKS();
}

Test(mock_plan, malformed_streams)
{
	for (int api = 0; api < 2; api++) {
		const char *req = api == PC_MOCK_OPENAI ? OA_REQ : AN_REQ;
		pc_mock_plan_t pl;
		/* bad_json: exactly one event's data does not parse (the first
		 * piece's by default), the rest of the stream is intact. */
		build("{\"text\":\"a b c\",\"malformed\":\"bad_json\"}", (pc_mock_api_t)api, req, &pl);
		cJSON *evs = events_of(&pl);
		int raw = 0, first = -1, i = 0;
		const cJSON *e;
		cJSON_ArrayForEach(e, evs) {
			if (at(e, "raw") && strcmp(str_at(e, "raw"), "[DONE]")) {
				raw++;
				first = i;
			}
			i++;
		}
		cr_assert_eq(raw, 1, "api %d", api);
		cr_assert_eq(first, api == PC_MOCK_OPENAI ? 1 : 3);
		cr_assert_eq(pl.finish, PC_MOCK_END);
		cJSON_Delete(evs);
		pc_mock_plan_free(&pl);

		/* The second piece; past the last piece, the finish. */
		build("{\"text\":\"a b c\",\"malformed\":\"bad_json\",\"malformed_at\":1}", (pc_mock_api_t)api, req, &pl);
		evs = events_of(&pl);
		int second = api == PC_MOCK_OPENAI ? 2 : 4;
		cr_assert(at(cJSON_GetArrayItem(evs, second), "raw"));
		cr_assert(at(cJSON_GetArrayItem(evs, second - 1), "json"));
		cJSON_Delete(evs);
		pc_mock_plan_free(&pl);
		build("{\"text\":\"a b c\",\"malformed\":\"bad_json\",\"malformed_at\":9}", (pc_mock_api_t)api, req, &pl);
		evs = events_of(&pl);
		int fin = api == PC_MOCK_OPENAI ? 4 : 7;
		cr_assert(at(cJSON_GetArrayItem(evs, fin), "raw"));
		cr_assert(at(cJSON_GetArrayItem(evs, fin - 1), "json"));
		cJSON_Delete(evs);
		pc_mock_plan_free(&pl);

		/* truncated: everything but the terminator, and a clean end. */
		build("{\"text\":\"a b c\",\"malformed\":\"truncated\"}", (pc_mock_api_t)api, req, &pl);
		size_t n;
		const char *w = wire(&pl, &n);
		cr_assert_eq(pl.finish, PC_MOCK_END);
		cr_assert_null(strstr(w, api == PC_MOCK_OPENAI ? "[DONE]" : "message_stop"));
		cr_assert_eq(count_events(&pl), api == PC_MOCK_OPENAI ? 5 : 8);
		pc_mock_plan_free(&pl);

		/* truncated at K: K whole pieces and half of the next event. */
		build("{\"text\":\"a b c\",\"malformed\":\"truncated\",\"malformed_at\":2}", (pc_mock_api_t)api, req, &pl);
		w = wire(&pl, &n);
		cr_assert_eq(text_deltas(&pl), 2);
		cr_assert_eq(count_events(&pl), api == PC_MOCK_OPENAI ? 3 : 5);
		cr_assert_neq(w[n - 1], '\n');
		cr_assert_eq(pl.writes[pl.write_count - 1].events, api == PC_MOCK_OPENAI ? 4 : 6);
		pc_mock_plan_free(&pl);
	}
	/* Not streamed: half a JSON body. */
	pc_mock_plan_t pl;
	build("{\"text\":\"a b c\",\"malformed\":\"truncated\"}", PC_MOCK_OPENAI, "{\"messages\":[]}", &pl);
	cr_assert(!pl.streamed && pl.send_head);
	cr_assert_null(cJSON_ParseWithLength(pl.body, pl.body_len));
	pc_mock_plan_free(&pl);
	ASSERT_NO_LEAKS();
}

/* error_after: K pieces, then the provider's in-stream error in place of
 * the rest (OpenAI a data line, Anthropic an `error` event), no terminator. */
Test(mock_plan, in_stream_errors)
{
	for (int api = 0; api < 2; api++) {
		bool oai = api == PC_MOCK_OPENAI;
		pc_mock_plan_t pl;
		build("{\"text\":\"a b c\",\"error_after\":2}", (pc_mock_api_t)api, oai ? OA_REQ : AN_REQ, &pl);
		size_t n;
		const char *w = wire(&pl, &n);
		cr_assert_eq(text_deltas(&pl), 2);
		cr_assert_eq(pl.finish, PC_MOCK_END);
		cr_assert_null(strstr(w, oai ? "[DONE]" : "message_stop"), "%s", w);
		const char *want = oai ? "data: {\"error\":{\"message\":\"The server had an error while processing "
					 "your request. Sorry about that!\",\"type\":\"server_error\""
				       : "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":"
					 "\"overloaded_error\",\"message\":\"Overloaded\"}";
		cr_assert_not_null(strstr(w, want), "%s", w);
		cr_assert_eq(w[n - 1], '\n');
		pc_mock_plan_free(&pl);
		/* the step's message and type; past the last piece, before the finish */
		build("{\"text\":\"a b c\",\"error_after\":9,\"message\":\"Internal error\",\"type\":\"api_error\"}",
		      (pc_mock_api_t)api, oai ? OA_REQ : AN_REQ, &pl);
		w = wire(&pl, &n);
		cr_assert_eq(text_deltas(&pl), 3);
		cr_assert_not_null(strstr(w, "\"type\":\"api_error\""), "%s", w);
		cr_assert_not_null(strstr(w, "\"message\":\"Internal error\""), "%s", w);
		cr_assert_null(strstr(w, oai ? "\"finish_reason\":\"stop\"" : "message_delta"), "%s", w);
		pc_mock_plan_free(&pl);
	}
	/* OpenAI's in-stream error carries the step's code; Anthropic's has none */
	pc_mock_plan_t pl;
	build("{\"text\":\"\",\"error_after\":0,\"type\":\"tokens\",\"code\":\"rate_limit_exceeded\","
	      "\"message\":\"slow down\"}", PC_MOCK_OPENAI, OA_REQ, &pl);
	size_t n;
	const char *w = wire(&pl, &n);
	cr_assert_not_null(strstr(w, "\"type\":\"tokens\",\"param\":null,\"code\":\"rate_limit_exceeded\""),
			   "%s", w);
	pc_mock_plan_free(&pl);
	build("{\"text\":\"\",\"error_after\":0,\"type\":\"rate_limit_error\",\"code\":\"x\"}",
	      PC_MOCK_ANTHROPIC, AN_REQ, &pl);
	w = wire(&pl, &n);
	cr_assert_null(strstr(w, "\"code\""), "%s", w);
	pc_mock_plan_free(&pl);
	step_error("{\"text\":\"a\",\"message\":\"x\"}", "needs error_after");
	step_error("{\"text\":\"a\",\"code\":\"x\"}", "needs error_after");
	step_error("{\"text\":\"a\",\"error_after\":1,\"malformed\":\"truncated\"}", "only one of");
	ASSERT_NO_LEAKS();
}

/* finish_reason "error": OpenAI's value, and sent as is to Anthropic clients. */
Test(mock_plan, error_finish)
{
	pc_mock_plan_t pl;
	build("{\"text\":\"\",\"finish_reason\":\"error\"}", PC_MOCK_OPENAI, OA_REQ, &pl);
	cJSON *evs = events_of(&pl);
	cr_assert_str_eq(str_at(cJSON_GetArrayItem(evs, 1), "json.choices.0.finish_reason"), "error");
	cJSON_Delete(evs);
	pc_mock_plan_free(&pl);
	build("{\"text\":\"hi\",\"finish_reason\":\"error\"}", PC_MOCK_ANTHROPIC, AN_REQ, &pl);
	size_t n;
	const char *w = wire(&pl, &n);
	cr_assert_not_null(strstr(w, "\"stop_reason\":\"error\""), "%s", w);
	pc_mock_plan_free(&pl);
	ASSERT_NO_LEAKS();
}
