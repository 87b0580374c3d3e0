/*
 * Usage accounting through the whole loop against the embedded mock LLM
 * (spec §11.3, §1.19): what a run reports as its usage, lastCallUsage and
 * promptTokens after several model calls, and the store's record of every
 * call that reported usage, whose sums are the run's exact totals.
 */
#include <criterion/criterion.h>

#include "agent_harness.h"

TestSuite(agent_usage, .timeout = 60);

/* One Anthropic-style provider (its usage names cache writes), two profiles. */
#define ANTHROPIC_CONFIG                                                                           \
	"{\"providers\":{\"mock\":{\"api\":\"anthropic-messages\",\"embedded\":true,"                \
	"\"profiles\":[{\"id\":\"a\",\"apiKey\":\"key-a\"},{\"id\":\"b\",\"apiKey\":\"key-b\"}]}},"  \
	"\"agents\":{\"defaults\":{\"model\":\"mock/m1\",\"maxConcurrent\":16,"                     \
	"\"sessionIdleSeconds\":1}}}"

static int64_t num_of(const cJSON *o, const char *k)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
	cr_assert(cJSON_IsNumber(v), "no number %s", k);
	return (int64_t)v->valuedouble;
}

/* `o` is {input, output, cacheRead, cacheWrite, total} with these values. */
static void expect_usage(const cJSON *o, const char *what, int64_t in, int64_t out, int64_t cr, int64_t cw,
			 int64_t total)
{
	cr_assert(cJSON_IsObject(o), "no %s", what);
	int64_t got[5] = {num_of(o, "input"), num_of(o, "output"), num_of(o, "cacheRead"), num_of(o, "cacheWrite"),
			  num_of(o, "total")};
	int64_t want[5] = {in, out, cr, cw, total};
	for (int k = 0; k < 5; k++)
		cr_assert_eq(got[k], want[k], "%s: {%lld,%lld,%lld,%lld,%lld}", what, (long long)got[0],
			     (long long)got[1], (long long)got[2], (long long)got[3], (long long)got[4]);
}

static void expect_record(const pc_store_usage_list_t *l, size_t i, const char *run, uint32_t attempt,
			  uint32_t call, int64_t in, int64_t out, int64_t cr, int64_t cw)
{
	pc_store_usage_t u;
	pc_store_usage_list_get(l, i, &u);
	cr_assert_str_eq(u.run_id, run);
	cr_assert_str_eq(u.session_key, "s");
	cr_assert_str_eq(u.provider, "mock");
	cr_assert_str_eq(u.model, "m1");
	cr_assert_eq(u.attempt, attempt, "record %zu", i);
	cr_assert_eq(u.call, call, "record %zu", i);
	cr_assert(u.input == in && u.output == out && u.cache_read == cr && u.cache_write == cw &&
			  u.total == in + out + cr + cw,
		  "record %zu: {%lld,%lld,%lld,%lld,%lld}", i, (long long)u.input, (long long)u.output,
		  (long long)u.cache_read, (long long)u.cache_write, (long long)u.total);
	cr_assert_gt(u.created_ms, 0);
}

/* A tool call, then the answer: two model calls in one attempt. The run
 * reports the latest call's prompt (not the sum of both prompts) with the
 * output of both, and its total; lastCallUsage is the latest call alone;
 * promptTokens its input plus cache. The store holds both calls, and their
 * sums are the run's accumulated usage. */
Test(agent_usage, a_tool_loop_reports_the_latest_prompt_and_stores_every_call)
{
	harness_t h;
	harness_start_with(&h, ANTHROPIC_CONFIG,
			   "{\"steps\":[{\"kind\":\"tool_calls\",\"tool_calls\":[{\"name\":\"clock\"}],"
			   "\"usage\":{\"input_tokens\":1000,\"output_tokens\":20,\"cache_read_tokens\":300,"
			   "\"cache_write_tokens\":50}},"
			   "{\"text\":\"done\",\"usage\":{\"input_tokens\":1500,\"output_tokens\":7,"
			   "\"cache_read_tokens\":600,\"cache_write_tokens\":0}}]}",
			   NULL);
	char run[80];
	submit(&h, "s", "what time is it", run);
	cJSON *d = finish_of(&h, run, 20000);
	cr_assert_str_eq(jstr(d, "phase"), "end", "%s", jstr(d, "error"));
	cr_assert_str_eq(payload_text(d), "done");
	expect_usage(cJSON_GetObjectItemCaseSensitive(d, "usage"), "usage", 1500, 27, 600, 0, 2107);
	expect_usage(cJSON_GetObjectItemCaseSensitive(d, "lastCallUsage"), "lastCallUsage", 1500, 7, 600, 0, 2107);
	cr_assert_eq(num_of(d, "promptTokens"), 2100);
	cJSON_Delete(d);

	pc_store_usage_list_t *l = NULL;
	cr_assert_eq(pc_agent_usage(h.agent, run, NULL, &l), 0);
	cr_assert_eq(pc_store_usage_list_count(l), 2);
	expect_record(l, 0, run, 0, 0, 1000, 20, 300, 50);
	expect_record(l, 1, run, 0, 1, 1500, 7, 600, 0);
	pc_store_usage_t sum;
	uint64_t n = 0;
	pc_store_usage_list_totals(l, &sum, &n);
	cr_assert_eq(n, 2);
	cr_assert(sum.input == 2500 && sum.output == 27 && sum.cache_read == 900 && sum.cache_write == 50 &&
			  sum.total == 3477,
		  "sums {%lld,%lld,%lld,%lld,%lld}", (long long)sum.input, (long long)sum.output,
		  (long long)sum.cache_read, (long long)sum.cache_write, (long long)sum.total);
	pc_store_usage_list_free(l);

	/* the session's records are the same two */
	cr_assert_eq(pc_agent_usage(h.agent, NULL, "s", &l), 0);
	pc_store_usage_list_totals(l, &sum, &n);
	cr_assert_eq(n, 2);
	cr_assert_eq(sum.total, 3477);
	pc_store_usage_list_free(l);

	pc_agent_stats_t st;
	pc_agent_stats(h.agent, &st);
	cr_assert_eq(st.usage_write_errors, 0);
	harness_stop(&h);
}

/* A rate-limited first attempt reports no usage; the retry on the next
 * profile does. Only the call that returned usage is recorded (as the
 * second attempt's first call), and the run reports that call. */
Test(agent_usage, a_retry_after_an_error_records_only_calls_that_reported_usage)
{
	harness_t h;
	harness_start_with(&h, ANTHROPIC_CONFIG,
			   "{\"steps\":[{\"kind\":\"error\",\"status\":429,"
			   "\"message\":\"Daily request limit reached\"},"
			   "{\"text\":\"ok\",\"usage\":{\"input_tokens\":40,\"output_tokens\":3,"
			   "\"cache_read_tokens\":8,\"cache_write_tokens\":2}}]}",
			   NULL);
	char run[80];
	submit(&h, "s", "hello", run);
	cJSON *d = finish_of(&h, run, 20000);
	cr_assert_str_eq(jstr(d, "phase"), "end", "%s", jstr(d, "error"));
	char trace[128];
	trace_text(d, trace, sizeof(trace));
	cr_assert_str_eq(trace, "rotate_profile:rate_limit,success", "%s", trace);
	expect_usage(cJSON_GetObjectItemCaseSensitive(d, "usage"), "usage", 40, 3, 8, 2, 53);
	expect_usage(cJSON_GetObjectItemCaseSensitive(d, "lastCallUsage"), "lastCallUsage", 40, 3, 8, 2, 53);
	cr_assert_eq(num_of(d, "promptTokens"), 50);
	cJSON_Delete(d);

	pc_store_usage_list_t *l = NULL;
	cr_assert_eq(pc_agent_usage(h.agent, run, NULL, &l), 0);
	cr_assert_eq(pc_store_usage_list_count(l), 1);
	expect_record(l, 0, run, 1, 0, 40, 3, 8, 2);
	pc_store_usage_list_free(l);
	harness_stop(&h);
}

/* A run none of whose calls reported usage reports none (§1.19: usage is
 * optional) and leaves no record. */
Test(agent_usage, a_run_without_usage_reports_none)
{
	harness_t h;
	harness_start_with(&h, ANTHROPIC_CONFIG,
			   "{\"then\":\"loop\",\"steps\":[{\"kind\":\"error\",\"status\":400,"
			   "\"message\":\"invalid request\"}]}",
			   NULL);
	char run[80];
	submit(&h, "s", "hello", run);
	cJSON *d = finish_of(&h, run, 20000);
	cr_assert_str_eq(jstr(d, "phase"), "error");
	cr_assert_null(cJSON_GetObjectItemCaseSensitive(d, "usage"));
	cr_assert_null(cJSON_GetObjectItemCaseSensitive(d, "lastCallUsage"));
	cr_assert_null(cJSON_GetObjectItemCaseSensitive(d, "promptTokens"));
	cJSON_Delete(d);
	pc_store_usage_list_t *l = NULL;
	cr_assert_eq(pc_agent_usage(h.agent, run, NULL, &l), 0);
	cr_assert_eq(pc_store_usage_list_count(l), 0);
	pc_store_usage_list_free(l);
	harness_stop(&h);
}

/* A usage record the store refuses (here: a model name over the store's
 * 255-byte limit for names) does not fail the run: it is counted. */
Test(agent_usage, a_refused_usage_record_is_counted_and_the_run_goes_on)
{
	char model[301];
	memset(model, 'x', 300);
	model[300] = '\0';
	char config[1024];
	snprintf(config, sizeof(config),
		 "{\"providers\":{\"mock\":{\"api\":\"anthropic-messages\",\"embedded\":true,"
		 "\"apiKey\":\"k\"}},\"agents\":{\"defaults\":{\"model\":\"mock/%s\"}}}",
		 model);
	harness_t h;
	harness_start_with(&h, config, "{\"steps\":[{\"text\":\"fine\",\"usage\":{\"input_tokens\":5,"
				      "\"output_tokens\":1}}]}",
			   NULL);
	char run[80];
	submit(&h, "s", "hello", run);
	cJSON *d = finish_of(&h, run, 20000);
	cr_assert_str_eq(jstr(d, "phase"), "end", "%s", jstr(d, "error"));
	cr_assert_str_eq(payload_text(d), "fine");
	expect_usage(cJSON_GetObjectItemCaseSensitive(d, "usage"), "usage", 5, 1, 0, 0, 6);
	cJSON_Delete(d);
	pc_agent_stats_t st;
	pc_agent_stats(h.agent, &st);
	cr_assert_eq(st.usage_write_errors, 1);
	pc_store_usage_list_t *l = NULL;
	cr_assert_eq(pc_agent_usage(h.agent, run, NULL, &l), 0);
	cr_assert_eq(pc_store_usage_list_count(l), 0);
	pc_store_usage_list_free(l);
	harness_stop(&h);
}
