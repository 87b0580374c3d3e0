/*
 * A provider configured with "http2": "prior-knowledge": whole agent runs
 * whose model calls reach the embedded mock LLM over cleartext HTTP/2,
 * overlapping calls sharing one connection; the key's validation (errors
 * named by their JSON path) and its round trip through `config show`.
 */
#include <criterion/criterion.h>

#include <cjson/cJSON.h>

#include "agent_harness.h"

#define H2_PROVIDER                                                                                 \
	"\"mock\":{\"api\":\"openai-completions\",\"embedded\":true,\"http2\":\"prior-knowledge\","   \
	"\"apiKey\":\"key-h2\"}"

#define H2_CONFIG                                                                                   \
	"{\"providers\":{" H2_PROVIDER "},"                                                         \
	"\"agents\":{\"defaults\":{\"model\":\"mock/m1\",\"maxConcurrent\":16,\"sessionIdleSeconds\":1}}}"

/* Every answer streams after 300 ms: runs submitted together overlap. */
#define SLOW_SCENARIO "{\"default\":{\"text\":\"over one connection\",\"ttft_ms\":300,\"chunks\":3}}"

TestSuite(agent_http2, .timeout = 60);

static uint64_t accepted(const harness_t *h)
{
	pc_io_stats_t s;
	pc_io_stats(h->io, &s);
	return s.connections_accepted;
}

Test(agent_http2, overlapping_runs_share_one_connection)
{
	enum { N = 8 };
	harness_t h;
	harness_start_with(&h, H2_CONFIG, SLOW_SCENARIO, NULL);
	char runs[N][80];
	for (int i = 0; i < N; i++) {
		char key[16];
		snprintf(key, sizeof(key), "s%d", i);
		cr_assert_eq(submit(&h, key, "hello", runs[i]), PC_AGENT_STARTED);
	}
	for (int i = 0; i < N; i++) {
		cJSON *d = finish_of(&h, runs[i], 20000);
		cr_assert_str_eq(jstr(d, "phase"), "end", "run %d: %s", i, jstr(d, "phase"));
		cr_assert_str_eq(payload_text(d), "over one connection", "run %d", i);
		cJSON_Delete(d);
	}
	cJSON *reqs = mock_requests(&h);
	cr_assert_eq(cJSON_GetArraySize(reqs), N);
	cJSON_Delete(reqs);
	/* The harness's I/O layer hosts the mock too: its accepted
	 * connections are the model calls'. Over HTTP/1.1, N overlapping
	 * calls take N connections. */
	cr_assert_eq(accepted(&h), 1, "%" PRIu64 " connections: the provider's http2 did not reach the calls",
		     accepted(&h));
	harness_stop(&h);
}

Test(agent_http2, runs_with_tool_turns_complete_over_http2)
{
	enum { N = 3 };
	harness_t h;
	/* The demo scenario: a clock tool call, then the echo. */
	harness_start_with(&h, H2_CONFIG, NULL, NULL);
	char runs[N][80];
	for (int i = 0; i < N; i++) {
		char key[16];
		snprintf(key, sizeof(key), "t%d", i);
		cr_assert_eq(submit(&h, key, "what time is it", runs[i]), PC_AGENT_STARTED);
	}
	for (int i = 0; i < N; i++) {
		cJSON *d = finish_of(&h, runs[i], 20000);
		cr_assert_str_eq(jstr(d, "phase"), "end", "run %d", i);
		cr_assert_str_eq(payload_text(d), "what time is it", "run %d", i);
		cJSON_Delete(d);
	}
	cJSON *reqs = mock_requests(&h);
	cr_assert_eq(cJSON_GetArraySize(reqs), 2 * N, "a tool turn and the answer per run");
	cJSON_Delete(reqs);
	cr_assert_eq(accepted(&h), 1);
	harness_stop(&h);
}

/* Parses `json`; returns the result and the errors joined by '\n'. */
static int parse(const char *json, char *errs, size_t cap, pc_config_t **out)
{
	pc_config_errors_t e = {0};
	int rc = pc_config_parse(json, strlen(json), "test", out, &e);
	errs[0] = 0;
	for (size_t i = 0; i < e.count; i++) {
		size_t n = strlen(errs);
		snprintf(errs + n, cap - n, "%s\n", e.items[i]);
	}
	pc_config_errors_free(&e);
	return rc;
}

Test(agent_http2, a_bad_value_is_an_error_named_by_its_path)
{
	static const char *const bad[] = {"\"h2c\"", "\"\"", "true", "2", "\"Prior-Knowledge\""};
	static const char *const want[] = {
		"providers.p.http2: must be prior-knowledge (or absent)",
		"providers.p.http2: must be prior-knowledge (or absent)",
		"providers.p.http2: must be a string",
		"providers.p.http2: must be a string",
		"providers.p.http2: must be prior-knowledge (or absent)",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char json[512], errs[1024];
		snprintf(json, sizeof(json),
			 "{\"providers\":{\"p\":{\"api\":\"openai-completions\",\"baseUrl\":\"http://127.0.0.1:9/v1\","
			 "\"http2\":%s,\"models\":[{\"id\":\"m\"}]}}}",
			 bad[i]);
		pc_config_t *c = NULL;
		cr_assert_eq(parse(json, errs, sizeof(errs), &c), PC_EINVAL, "case %zu accepted", i);
		cr_assert_not_null(strstr(errs, want[i]), "case %zu: %s", i, errs);
		cr_assert_null(c);
	}
}

Test(agent_http2, the_key_round_trips_through_config_show)
{
	const char *json = "{\"providers\":{"
			   "\"h2\":{\"api\":\"openai-completions\",\"baseUrl\":\"http://127.0.0.1:9/v1\","
			   "\"http2\":\"prior-knowledge\",\"models\":[{\"id\":\"m\"}]},"
			   "\"h1\":{\"api\":\"openai-completions\",\"baseUrl\":\"http://127.0.0.1:9/v1\"}},"
			   "\"agents\":{\"defaults\":{\"model\":\"h2/m\"}}}";
	char errs[1024];
	pc_config_t *c = NULL;
	cr_assert_eq(parse(json, errs, sizeof(errs), &c), 0, "%s", errs);
	cr_assert_eq(pc_config_provider(c, "h2")->http2, PC_PROVIDER_HTTP2_PRIOR_KNOWLEDGE);
	cr_assert_eq(pc_config_provider(c, "h1")->http2, PC_PROVIDER_HTTP2_OFF);
	char *shown = NULL;
	cr_assert_eq(pc_config_to_json(c, &shown), 0);
	cJSON *root = cJSON_Parse(shown);
	cr_assert_not_null(root);
	const cJSON *ps = cJSON_GetObjectItemCaseSensitive(root, "providers");
	cr_assert_str_eq(jstr(cJSON_GetObjectItemCaseSensitive(ps, "h2"), "http2"), "prior-knowledge");
	cr_assert_null(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(ps, "h1"), "http2"),
		       "absent stays absent");
	cJSON_Delete(root);
	/* What `config show` prints is itself a valid config, the same. */
	pc_config_t *again = NULL;
	cr_assert_eq(parse(shown, errs, sizeof(errs), &again), 0, "%s", errs);
	cr_assert_eq(pc_config_provider(again, "h2")->http2, PC_PROVIDER_HTTP2_PRIOR_KNOWLEDGE);
	cr_assert_eq(pc_config_provider(again, "h1")->http2, PC_PROVIDER_HTTP2_OFF);
	free(shown);
	pc_config_free(again);
	pc_config_free(c);
}
