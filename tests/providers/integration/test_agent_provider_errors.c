/*
 * A provider's error answer through the whole loop against the embedded
 * mock LLM (spec §1.8-§1.10, §11.2): its status, wording and retry-after
 * headers reach the run's rules, and its own words end the run. The
 * messages are the providers' wording (OpenAI's and Anthropic's rate-limit,
 * overload and unsupported-value errors); which rule they meet is the
 * classifier's decision, not the fixture's.
 */
#include <criterion/criterion.h>

#include "agent_harness.h"

TestSuite(agent_provider_errors, .timeout = 90);

/* One provider with two profiles and no fallback, with `api`. */
#define ONE_PROVIDER(api, defaults)                                                                \
	"{\"providers\":{\"mock\":{\"api\":\"" api "\",\"embedded\":true,"                          \
	"\"profiles\":[{\"id\":\"a\",\"apiKey\":\"key-a\"},{\"id\":\"b\",\"apiKey\":\"key-b\"}]}},"  \
	"\"agents\":{\"defaults\":{\"model\":\"mock/m1\",\"maxConcurrent\":16,"                     \
	"\"sessionIdleSeconds\":1" defaults "}}}"

/* OpenAI's per-minute limit, as its API words it. */
#define RPM_MESSAGE                                                                                \
	"Rate limit reached for gpt-4o in organization org-abc123 on requests per min (RPM): "     \
	"Limit 500, Used 500, Requested 1. Please try again in 120ms. Visit "                      \
	"https://platform.openai.com/account/rate-limits to learn more."

/* The time between the mock's requests i and i + 1, in ms. */
static int64_t gap_ms(harness_t *h, int i)
{
	cJSON *reqs = mock_requests(h);
	const cJSON *a = cJSON_GetArrayItem(reqs, i), *b = cJSON_GetArrayItem(reqs, i + 1);
	cr_assert(a && b, "fewer than %d requests", i + 2);
	double ta = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(a, "time_ms"));
	double tb = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(b, "time_ms"));
	cJSON_Delete(reqs);
	return (int64_t)(tb - ta);
}

/* The `reasoning_effort` of request i's body, into out. */
static void request_effort(harness_t *h, int i, char *out, size_t cap)
{
	cJSON *reqs = mock_requests(h);
	cJSON *owned = NULL;
	const cJSON *b = request_body(reqs, i, &owned);
	snprintf(out, cap, "%s", jstr(b, "reasoning_effort"));
	cJSON_Delete(owned);
	cJSON_Delete(reqs);
}

#define TRACE_CAP 512u

/* Starts the harness with `config` and the mock's `scenario`, runs one
 * message to its end: its terminal data, and its attempt trace in trace. */
static cJSON *run_scenario(harness_t *h, const char *config, const char *scenario, char trace[TRACE_CAP])
{
	harness_start_with(h, config, scenario, NULL);
	char run[80];
	submit(h, "s", "hello", run);
	cJSON *d = finish_of(h, run, 80000);
	trace_text(d, trace, TRACE_CAP);
	return d;
}

/* The run ended well after one same-model rate-limit retry, which waited
 * lo_ms to hi_ms. Frees d. */
static void expect_same_model_retry(harness_t *h, cJSON *d, const char *trace, int64_t lo_ms, int64_t hi_ms)
{
	cr_assert_str_eq(jstr(d, "phase"), "end", "%s", jstr(d, "error"));
	cr_assert_str_eq(trace, "same_model_rate_limit:rate_limit,success", "trace %s", trace);
	cJSON_Delete(d);
	int64_t gap = gap_ms(h, 0);
	cr_assert(gap >= lo_ms && gap < hi_ms, "waited %" PRId64 " ms", gap);
}

#define MSG_OVERLOADED "The AI service is temporarily overloaded. Please try again in a moment."

/* The run was classified overloaded first; ended well, or (`failed`) with
 * the reply runner's overload text for the user and the provider's
 * "Overloaded" in errorDetail (meta.error.message). Frees d. */
static void expect_overloaded(cJSON *d, const char *trace, bool failed)
{
	cr_assert_str_eq(jstr(d, "phase"), failed ? "error" : "end", "%s", jstr(d, "error"));
	cr_assert(!strncmp(trace, "rotate_profile:overloaded,", 26), "trace %s", trace);
	if (failed) {
		cr_assert_str_eq(jstr(d, "error"), MSG_OVERLOADED);
		cr_assert_not_null(strstr(jstr(d, "errorDetail"), "Overloaded"), "detail: %s", jstr(d, "errorDetail"));
	}
	cJSON_Delete(d);
}

/* §1.10: a 429 whose wording names a per-minute window is retried on the
 * same model and profile after 10 s (the first step of 10/20/30 s). */
Test(agent_provider_errors, per_minute_rate_limit_retries_the_same_model_after_the_step_delay)
{
	harness_t h;
	char trace[TRACE_CAP];
	cJSON *d = run_scenario(&h, ONE_PROVIDER("openai-completions", ""),
				 "{\"steps\":[{\"kind\":\"error\",\"status\":429,\"message\":\"" RPM_MESSAGE "\"},"
			   "{\"text\":\"fine\"}]}", trace);
	const cJSON *a0 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(d, "attempts"), 0);
	const cJSON *a1 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(d, "attempts"), 1);
	cr_assert_eq(cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(a0, "profile")),
		     cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(a1, "profile")), "same profile");
	expect_same_model_retry(&h, d, trace, 10000, 14000);
	harness_stop(&h);
}

/* §1.10: a retry-after-ms header (12 s, within the 60 s short window) wins
 * over the 10 s step; Anthropic's own per-minute wording. */
Test(agent_provider_errors, per_minute_rate_limit_honours_retry_after_ms)
{
	harness_t h;
	char trace[TRACE_CAP];
	cJSON *d = run_scenario(&h, ONE_PROVIDER("anthropic-messages", ""),
				 "{\"steps\":[{\"kind\":\"error\",\"status\":429,\"headers\":{\"retry-after-ms\":\"12000\"},"
			   "\"message\":\"This request would exceed the rate limit for your organization "
			   "(4b1f3c2e-0000-4000-8000-000000000000) of 50,000 input tokens per minute. For "
			   "details, refer to: https://docs.claude.com/en/api/rate-limits. You can see the "
			   "response headers for current usage. Please reduce the prompt length or the "
			   "maximum tokens requested, or try again later.\"},"
			   "{\"text\":\"fine\"}]}", trace);
	expect_same_model_retry(&h, d, trace, 12000, 16000);
	harness_stop(&h);
}

/* §1.10: a daily limit is no short window: the next profile at once, and
 * when none is left the run ends with the provider's words. */
Test(agent_provider_errors, daily_rate_limit_rotates_at_once_and_ends_with_the_providers_words)
{
	harness_t h;
	char trace[TRACE_CAP];
	cJSON *d = run_scenario(&h, ONE_PROVIDER("openai-completions", ""),
				 "{\"then\":\"loop\",\"steps\":[{\"kind\":\"error\",\"status\":429,\"message\":"
			   "\"Rate limit reached for gpt-4o-mini in organization org-abc123 on requests per "
			   "day (RPD): Limit 10000, Used 10000, Requested 1. Please try again in 8.64s. Visit "
			   "https://platform.openai.com/account/rate-limits to learn more. Key: "
			   "sk-proj-abcdefgh12345678\"}]}", trace);
	cr_assert_str_eq(jstr(d, "phase"), "error");
	cr_assert(!strncmp(trace, "rotate_profile:rate_limit,", 26), "trace %s", trace);
	cr_assert_null(strstr(trace, "same_model_rate_limit"), "trace %s", trace);
	const char *err = jstr(d, "error");
	cr_assert_not_null(strstr(err, "requests per day (RPD)"), "error: %s", err);
	cr_assert_null(strstr(err, "abcdefgh12345678"), "a key in the error: %s", err);
	cJSON_Delete(d);
	cr_assert_lt(gap_ms(&h, 0), 5000, "no wait before the rotation");
	harness_stop(&h);
}

/* §1.8: Anthropic's 529 overloaded_error is `overloaded`. */
Test(agent_provider_errors, anthropic_529_is_overloaded)
{
	harness_t h;
	char trace[TRACE_CAP];
	cJSON *d = run_scenario(&h, ONE_PROVIDER("anthropic-messages", ""),
				 "{\"steps\":[{\"kind\":\"error\",\"status\":529},{\"text\":\"fine\"}]}", trace);
	expect_overloaded(d, trace, false);
	harness_stop(&h);
}

#define REPEAT9(x) x x x x x x x x x

/* Overloaded on every profile and no fallback: the reply runner replays
 * the chain 10 times (§1.12, 2.5 s doubling to 30 s; waited here a
 * thousand times faster), tells the user once that it is still retrying,
 * then the run ends with the overload text, the provider's words in its
 * detail. */
Test(agent_provider_errors, overloaded_everywhere_is_replayed_then_ends_with_the_overload_text)
{
	harness_t h;
	char trace[TRACE_CAP];
	pc__agent_test_delay_divisor(1000);
	harness_start_with(&h, ONE_PROVIDER("anthropic-messages", ""),
			   "{\"then\":\"loop\",\"steps\":[{\"kind\":\"error\",\"status\":529}]}", NULL);
	pc_event_sub_t *sub = session_sub(&h, "s");
	char run[80];
	submit(&h, "s", "hello", run);
	cJSON *d = finish_of(&h, run, 80000);
	trace_text(d, trace, TRACE_CAP);
	cr_assert(await_event(sub, PC_EVENT_LIFECYCLE, "still retrying", 5000, NULL, 0), "no retry notice");
	session_unsub(&h, "s", sub);
	pc__agent_test_delay_divisor(1);
	/* the first pass rotates a -> b; each replay probes the cooled-down
	 * primary once */
	/* the first pass rotates a -> b; the first replay probes the cooled
	 * down primary; the probe throttle (30 s) skips it on the other nine */
	cr_assert_str_eq(trace, "rotate_profile:overloaded,error:overloaded,error:overloaded"
				REPEAT9(",fallback_model:overloaded"), "trace %s", trace);
	cr_assert_eq(request_count(&h), 3);
	cr_assert_str_eq(jstr(d, "phase"), "error");
	cr_assert_str_eq(jstr(d, "error"), MSG_OVERLOADED);
	cr_assert_not_null(strstr(jstr(d, "errorDetail"), "Overloaded"), "detail: %s", jstr(d, "errorDetail"));
	cJSON_Delete(d);
	harness_stop(&h);
}

/* §1.7 step 11, §11.2: OpenAI refusing a reasoning effort, with the values it
 * takes, makes the run retry at the first one it lists. */
Test(agent_provider_errors, unsupported_reasoning_effort_falls_back_to_a_listed_level)
{
	harness_t h;
	char trace[TRACE_CAP];
	cJSON *d = run_scenario(&h, ONE_PROVIDER("openai-completions", ",\"thinking\":\"minimal\""),
				 "{\"steps\":[{\"kind\":\"error\",\"status\":400,\"message\":\"Unsupported value: "
			   "'reasoning_effort' does not support 'minimal' with this model. Supported values "
			   "are: 'low', 'medium', and 'high'.\",\"type\":\"invalid_request_error\","
			   "\"code\":\"unsupported_value\"},{\"text\":\"fine\"}]}", trace);
	cr_assert_str_eq(jstr(d, "phase"), "end", "%s", jstr(d, "error"));
	cr_assert_str_eq(payload_text(d), "fine");
	cJSON_Delete(d);
	char effort[32];
	request_effort(&h, 0, effort, sizeof(effort));
	cr_assert_str_eq(effort, "minimal");
	request_effort(&h, 1, effort, sizeof(effort));
	cr_assert_str_eq(effort, "low");
	harness_stop(&h);
}

/* §1.8 on an error inside a started stream: Anthropic's `error` event
 * (overloaded_error "Overloaded") after some text is `overloaded`, and
 * when it is all the provider says the run ends with its words. */
Test(agent_provider_errors, in_stream_overload_is_classified_from_its_text)
{
	harness_t h;
	char trace[TRACE_CAP];
	cJSON *d = run_scenario(&h, ONE_PROVIDER("anthropic-messages", ""),
				 "{\"steps\":[{\"text\":\"Let me think about this\",\"error_after\":2},{\"text\":\"fine\"}]}", trace);
	expect_overloaded(d, trace, false);
	harness_stop(&h);

	d = run_scenario(&h, ONE_PROVIDER("anthropic-messages", ""),
			 "{\"then\":\"loop\",\"steps\":[{\"text\":\"Let me think\",\"error_after\":1}]}", trace);
	expect_overloaded(d, trace, true);
	harness_stop(&h);
}

/* OpenAI's per-minute token limit arriving as an in-stream error: a rate
 * limit of the short window, so the same model again after 10 s. */
Test(agent_provider_errors, in_stream_per_minute_limit_retries_the_same_model)
{
	harness_t h;
	char trace[TRACE_CAP];
	cJSON *d = run_scenario(&h, ONE_PROVIDER("openai-completions", ""),
			   "{\"steps\":[{\"text\":\"Working on it\",\"error_after\":1,\"type\":\"tokens\","
			   "\"message\":\"Rate limit reached for gpt-4o in organization org-abc123 on tokens "
			   "per min (TPM): Limit 30000, Used 29500, Requested 1200. Please try again in "
			   "1.4s. Visit https://platform.openai.com/account/rate-limits to learn more.\"},"
			   "{\"text\":\"fine\"}]}", trace);
	expect_same_model_retry(&h, d, trace, 10000, 14000);
	harness_stop(&h);
}

/* §1.2 step 8: a model the configuration does not know ends the run before
 * any call, as OpenClaw's FailoverError "Unknown model: p/m" with reason
 * model_not_found. */
Test(agent_provider_errors, an_unknown_model_fails_with_model_not_found)
{
	harness_t h;
	harness_start_with(&h, ONE_PROVIDER("openai-completions", ""), "{\"steps\":[{\"text\":\"never\"}]}", NULL);
	pc_agent_params_t p = {.session_key = "s", .message = "hello", .model = "nope/m9"};
	pc_agent_accepted_t acc;
	cr_assert_eq(pc_agent_submit(h.agent, &p, &acc), 0);
	cJSON *d = finish_of(&h, acc.run_id, 20000);
	cr_assert_str_eq(jstr(d, "phase"), "error");
	cr_assert_str_eq(jstr(d, "error"), "Unknown model: nope/m9");
	cJSON *meta = pc_agent_error_meta(d);
	cr_assert_str_eq(jstr(meta, "reason"), "model_not_found");
	cJSON_Delete(meta);
	cJSON_Delete(d);
	cr_assert_eq(request_count(&h), 0);
	harness_stop(&h);
}
