/*
 * Recovery through the whole loop against the embedded mock LLM (spec
 * §1.7 steps 2, 6 and 7, §1.13, §1.15, §7): context overflow compacts the
 * transcript and retries, at most three times; the retry budget ends a run
 * with retry_limit or hands it to the fallback model; the idle-timeout
 * breaker stops a run after five idle attempts in a row without progress
 * (and not when progress came in between); a timeout with a prompt over
 * 65 % of the window compacts first.
 */
#include <criterion/criterion.h>

#include "agent_harness.h"
#include "agents/compaction/compaction.h"

TestSuite(agent_recovery, .timeout = 60);

#define PROVIDERS_WITH_FALLBACK                                                                    \
	"\"providers\":{"                                                                           \
	"\"mock\":{\"api\":\"openai-completions\",\"embedded\":true,"                               \
	"\"profiles\":[{\"id\":\"a\",\"apiKey\":\"key-a\"},{\"id\":\"b\",\"apiKey\":\"key-b\"}]},"   \
	"\"fb\":{\"api\":\"openai-completions\",\"embedded\":true,\"apiKey\":\"key-fb\"}}"

#define RECOVERY_CONFIG(defaults)                                                                  \
	"{" PROVIDERS_WITH_FALLBACK ",\"agents\":{\"defaults\":{\"model\":\"mock/m1\",\"fallbacks\":[\"fb/m2\"]," \
	"\"maxConcurrent\":16,\"sessionIdleSeconds\":1" defaults "}}}"

/* One provider with `profiles` (a JSON array) and no fallback. */
#define SINGLE_CONFIG(provider_extra, profiles, defaults)                                          \
	"{\"providers\":{\"mock\":{\"api\":\"openai-completions\",\"embedded\":true" provider_extra  \
	",\"profiles\":" profiles "}},"                                                             \
	"\"agents\":{\"defaults\":{\"model\":\"mock/m1\",\"maxConcurrent\":16,"                     \
	"\"sessionIdleSeconds\":1" defaults "}}}"

#define OVERFLOW "{\"kind\":\"context_overflow\"}"

static int count_of(const char *hay, const char *needle)
{
	int n = 0;
	for (const char *p = hay; (p = strstr(p, needle)) != NULL; p += strlen(needle))
		n++;
	return n;
}

/* The first stored message of session `key`: its role and content. */
static void first_message(harness_t *h, const char *key, char *role, size_t rcap, char *content, size_t ccap)
{
	pc_store_history_t *hist = NULL;
	cr_assert_eq(pc_store_history(h->store, key, &hist), 0);
	cr_assert_gt(pc_store_history_count(hist), 0);
	pc_store_msg_t m;
	pc_store_history_get(hist, 0, &m);
	snprintf(role, rcap, "%s", m.role);
	snprintf(content, ccap, "%s", m.content);
	pc_store_history_free(hist);
}

/* Takes every buffered event of `sub`; appends the data of those of
 * `stream` to log, one per line. Returns how many of `stream` there were. */
static int drain_events(pc_event_sub_t *sub, pc_event_stream_t stream, char *log, size_t cap)
{
	int n = 0;
	pc_event_t *ev = NULL;
	while (pc_event_sub_take(sub, &ev, 1) == 1) {
		if (ev->stream == stream) {
			size_t l = strlen(log);
			snprintf(log + l, cap - l, "%s\n", ev->data);
			n++;
		}
		pc_event_release(ev);
	}
	return n;
}

/* How many of the mock's requests were answered with a step of `kind`. */
static int steps_of_kind(harness_t *h, const char *kind)
{
	cJSON *reqs = mock_requests(h);
	int n = 0;
	const cJSON *r;
	cJSON_ArrayForEach(r, reqs) {
		const cJSON *step = cJSON_GetObjectItemCaseSensitive(r, "step");
		n += cJSON_IsObject(step) && !strcmp(jstr(step, "kind"), kind);
	}
	cJSON_Delete(reqs);
	return n;
}

/* Sets every provider's idle watchdog (the config key is in whole seconds). */
static void set_idle_timeout(harness_t *h, uint64_t ms)
{
	for (size_t i = 0; i < h->cfg->provider_count; i++)
		((pc_provider_config_t *)&h->cfg->providers[i])->idle_timeout_ms = ms;
}

Test(agent_recovery, context_overflow_compacts_then_succeeds)
{
	harness_t h;
	harness_start_with(&h, RECOVERY_CONFIG(",\"compaction\":{\"keepRecentTokens\":50}"),
			   "{\"steps\":[" OVERFLOW ",{\"text\":\"SUMMARY\"},{\"text\":\"after\"}]}", NULL);
	seed_history(&h, "s", 30);
	pc_event_sub_t *sub = session_sub(&h, "s");
	char run[80];
	cr_assert_eq(submit(&h, "s", "what is on shelf B5?", run), PC_AGENT_STARTED);
	cJSON *d = finish_of(&h, run, 20000);
	cr_assert_str_eq(jstr(d, "phase"), "end", "result: %s / %s", jstr(d, "error"), jstr(d, "errorKind"));
	cr_assert_str_eq(payload_text(d), "after");
	cJSON_Delete(d);
	/* compaction events: start (overflow), end (completed, willRetry) */
	char log[4096] = "";
	cr_assert_eq(drain_events(sub, PC_EVENT_COMPACTION, log, sizeof(log)), 2, "events: %s", log);
	session_unsub(&h, "s", sub);
	const char *start = strstr(log, "\"phase\":\"start\"");
	const char *end = strstr(log, "\"phase\":\"end\"");
	cr_assert(start && end && start < end, "events: %s", log);
	cr_assert_not_null(strstr(log, "\"trigger\":\"overflow\""), "events: %s", log);
	cr_assert_not_null(strstr(end, "\"willRetry\":true"), "events: %s", log);
	cr_assert_not_null(strstr(end, "\"completed\":true"), "events: %s", log);
	/* the transcript starts with the summary the model wrote */
	char role[64], content[4096];
	first_message(&h, "s", role, sizeof(role), content, sizeof(content));
	cr_assert_str_eq(role, PC_COMPACTION_ROLE);
	cr_assert_not_null(strstr(content, "\"summary\":\"SUMMARY\""), "summary: %s", content);
	char roles[1024];
	int n = history_roles(&h, "s", roles, sizeof(roles));
	cr_assert_lt(n, 31, "history: %s", roles);
	cr_assert_eq(count_of(roles, PC_COMPACTION_ROLE), 1);
	/* requests: the overflowing prompt, the summary, the retry on the summary */
	cJSON *reqs = mock_requests(&h);
	cr_assert_eq(cJSON_GetArraySize(reqs), 3);
	char *summarise = request_text(reqs, 1);
	char *retry = request_text(reqs, 2);
	cr_assert_not_null(strstr(summarise, "question 0:"), "the oldest turn was summarised: %s", summarise);
	cr_assert_not_null(strstr(retry, "SUMMARY"), "the retry reads the summary: %s", retry);
	cr_assert_eq(strstr(retry, "question 0:"), NULL, "the summarised turns are gone: %s", retry);
	cr_assert_eq(count_of(retry, "what is on shelf B5?"), 1, "the user turn once: %s", retry);
	cJSON_free(summarise);
	cJSON_free(retry);
	cJSON_Delete(reqs);
	harness_stop_no_leaks(&h);
}

Test(agent_recovery, overflow_after_three_compactions_is_the_overflow_error)
{
	harness_t h;
	harness_start_with(&h, RECOVERY_CONFIG(",\"compaction\":{\"keepRecentTokens\":50}"),
			   "{\"steps\":[" OVERFLOW ",{\"text\":\"S1\"}," OVERFLOW ",{\"text\":\"S2\"}," OVERFLOW
			   ",{\"text\":\"S3\"}," OVERFLOW ",{\"text\":\"never\"}]}",
			   NULL);
	seed_history(&h, "s", 30);
	pc_event_sub_t *sub = session_sub(&h, "s");
	char run[80];
	cr_assert_eq(submit(&h, "s", "what is on shelf B5?", run), PC_AGENT_STARTED);
	cJSON *d = finish_of(&h, run, 30000);
	cr_assert_str_eq(jstr(d, "phase"), "error");
	cr_assert_str_eq(jstr(d, "errorKind"), "context_overflow", "kind %s", jstr(d, "errorKind"));
	const cJSON *p = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(d, "payloads"), 0);
	cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(p, "isError")));
	const char *want = "Context overflow: prompt too large for the model.";
	cr_assert_eq(strncmp(jstr(p, "text"), want, strlen(want)), 0, "payload: %s", jstr(p, "text"));
	cr_assert_str_eq(jstr(d, "livenessState"), "blocked");
	cJSON_Delete(d);
	char log[8192] = "";
	drain_events(sub, PC_EVENT_COMPACTION, log, sizeof(log));
	session_unsub(&h, "s", sub);
	cr_assert_eq(count_of(log, "\"phase\":\"start\""), 3, "events: %s", log);
	cr_assert_eq(count_of(log, "\"willRetry\":true"), 3, "events: %s", log);
	/* four overflowing prompts and three summaries; "never" was not asked for */
	cJSON *reqs = mock_requests(&h);
	cr_assert_eq(cJSON_GetArraySize(reqs), 7);
	cJSON_Delete(reqs);
	cr_assert_eq(steps_of_kind(&h, "context_overflow"), 4);
	char role[64], content[4096];
	first_message(&h, "s", role, sizeof(role), content, sizeof(content));
	cr_assert_str_eq(role, PC_COMPACTION_ROLE);
	cr_assert_not_null(strstr(content, "\"summary\":\"S3\""), "summary: %s", content);
	harness_stop_no_leaks(&h);
}

#define BUDGET_ONE ",\"runRetries\":{\"base\":1,\"perProfile\":0,\"min\":1,\"max\":1}"
#define DAILY_LIMIT "{\"kind\":\"error\",\"status\":429,\"message\":\"Daily request limit reached\"}"

Test(agent_recovery, retry_limit_hands_the_run_to_the_fallback_model)
{
	harness_t h;
	harness_start_with(&h, RECOVERY_CONFIG(BUDGET_ONE),
			   "{\"steps\":[" DAILY_LIMIT ",{\"text\":\"from the fallback\"}]}", NULL);
	char run[80];
	submit(&h, "s", "hi", run);
	cJSON *d = finish_of(&h, run, 20000);
	cr_assert_str_eq(jstr(d, "phase"), "end", "error: %s", jstr(d, "error"));
	cr_assert_str_eq(payload_text(d), "from the fallback");
	char trace[256];
	trace_text(d, trace, sizeof(trace));
	/* the rotation used the one iteration of the budget: the next try is the fallback's */
	cr_assert_str_eq(trace, "rotate_profile:rate_limit,fallback_model:rate_limit,success", "trace %s", trace);
	cJSON_Delete(d);
	cJSON *reqs = mock_requests(&h);
	cr_assert_eq(cJSON_GetArraySize(reqs), 2);
	char m[2][32];
	request_model(reqs, 0, m[0], sizeof(m[0]));
	request_model(reqs, 1, m[1], sizeof(m[1]));
	cr_assert_str_eq(m[0], "m1");
	cr_assert_str_eq(m[1], "m2");
	cJSON_Delete(reqs);
	harness_stop_no_leaks(&h);
}

Test(agent_recovery, retry_limit_without_a_fallback_is_the_retry_limit_payload)
{
	harness_t h;
	harness_start_with(&h,
			   SINGLE_CONFIG("", "[{\"id\":\"a\",\"apiKey\":\"key-a\"},{\"id\":\"b\",\"apiKey\":\"key-b\"}]",
					 BUDGET_ONE),
			   "{\"steps\":[" DAILY_LIMIT ",{\"text\":\"never\"}]}", NULL);
	char run[80];
	submit(&h, "s", "hi", run);
	cJSON *d = finish_of(&h, run, 20000);
	cr_assert_str_eq(jstr(d, "phase"), "error");
	cr_assert_str_eq(jstr(d, "errorKind"), "retry_limit", "kind %s: %s", jstr(d, "errorKind"), jstr(d, "error"));
	const char *want = "Request failed after repeated internal retries.";
	cr_assert_eq(strncmp(payload_text(d), want, strlen(want)), 0, "payload: %s", payload_text(d));
	cr_assert_str_eq(jstr(d, "livenessState"), "blocked");
	cJSON_Delete(d);
	cr_assert_eq(request_count(&h), 1);
	harness_stop_no_leaks(&h);
}

Test(agent_recovery, retry_limit_without_a_failover_reason_does_not_fall_back)
{
	harness_t h;
	harness_start_with(&h, RECOVERY_CONFIG(BUDGET_ONE),
			   "{\"steps\":[{\"kind\":\"reasoning\",\"reasoning\":\"hmm\"},{\"text\":\"never\"}]}", NULL);
	char run[80];
	submit(&h, "s", "hi", run);
	cJSON *d = finish_of(&h, run, 20000);
	cr_assert_str_eq(jstr(d, "phase"), "error");
	cr_assert_str_eq(jstr(d, "errorKind"), "retry_limit", "kind %s: %s", jstr(d, "errorKind"), jstr(d, "error"));
	cJSON_Delete(d);
	cJSON *reqs = mock_requests(&h);
	cr_assert_eq(cJSON_GetArraySize(reqs), 1);
	char m[32];
	request_model(reqs, 0, m, sizeof(m));
	cr_assert_str_eq(m, "m1");
	cJSON_Delete(reqs);
	harness_stop_no_leaks(&h);
}

#define SIX_PROFILES                                                                               \
	"[{\"id\":\"p1\"},{\"id\":\"p2\"},{\"id\":\"p3\"},{\"id\":\"p4\"},{\"id\":\"p5\"},{\"id\":\"p6\"}]"
#define TEN_PROFILES                                                                               \
	"[{\"id\":\"p1\"},{\"id\":\"p2\"},{\"id\":\"p3\"},{\"id\":\"p4\"},{\"id\":\"p5\"},"           \
	"{\"id\":\"p6\"},{\"id\":\"p7\"},{\"id\":\"p8\"},{\"id\":\"p9\"},{\"id\":\"p10\"}]"
#define STALL "{\"kind\":\"stall\"}"

Test(agent_recovery, idle_breaker_trips_after_five_idle_attempts_without_output)
{
	harness_t h;
	harness_start_with(&h, SINGLE_CONFIG("", SIX_PROFILES, ""), "{\"default\":" STALL "}", NULL);
	set_idle_timeout(&h, 200);
	char run[80];
	uint64_t t0 = now_ms();
	submit(&h, "s", "hi", run);
	cJSON *d = finish_of(&h, run, 30000);
	cr_assert_str_eq(jstr(d, "phase"), "error");
	cr_assert_str_eq(jstr(d, "errorKind"), "retry_limit", "kind %s: %s", jstr(d, "errorKind"), jstr(d, "error"));
	cr_assert_str_eq(jstr(d, "livenessState"), "blocked");
	cJSON_Delete(d);
	/* PC_IDLE_BREAKER_DEFAULT_CAP paid calls, not one more (a sixth profile was left) */
	cr_assert_eq(request_count(&h), (int)PC_IDLE_BREAKER_DEFAULT_CAP);
	cr_assert_geq(now_ms() - t0, PC_IDLE_BREAKER_DEFAULT_CAP * 200 - 50);
	harness_stop_no_leaks(&h);
}

Test(agent_recovery, idle_breaker_does_not_trip_when_output_arrived_in_between)
{
	harness_t h;
	harness_start_with(&h, SINGLE_CONFIG("", TEN_PROFILES, ""),
			   "{\"steps\":[" STALL "," STALL "," STALL "," STALL ","
			   "{\"kind\":\"tool_calls\",\"tool_calls\":[{\"name\":\"clock\"}]}," STALL ","
			   STALL "," STALL "," STALL "," STALL ",{\"text\":\"done\"}]}",
			   NULL);
	set_idle_timeout(&h, 200);
	char run[80];
	submit(&h, "s", "hi", run);
	cJSON *d = finish_of(&h, run, 30000);
	/* four idle attempts, one with a completed call (the breaker heals),
	 * four more idle ones: never five in a row */
	cr_assert_str_eq(jstr(d, "phase"), "end", "kind %s: %s", jstr(d, "errorKind"), jstr(d, "error"));
	cr_assert_str_eq(payload_text(d), "done");
	cJSON_Delete(d);
	cr_assert_eq(steps_of_kind(&h, "stall"), 9);
	cr_assert_eq(request_count(&h), 11);
	harness_stop_no_leaks(&h);
}

/* §1.15 step 2 and §1.13: the trip ends the run through
 * handleRetryLimitExhaustion, whose payload is the generic retry text and
 * whose error message is the breaker's own, with the count and the cap. */
Test(agent_recovery, idle_breaker_trip_reports_its_own_message_with_the_cap)
{
	harness_t h;
	harness_start_with(&h, SINGLE_CONFIG("", SIX_PROFILES, ""), "{\"default\":" STALL "}", NULL);
	set_idle_timeout(&h, 200);
	char run[80];
	submit(&h, "s", "hi", run);
	cJSON *d = finish_of(&h, run, 30000);
	cr_assert_str_eq(jstr(d, "errorKind"), "retry_limit", "kind %s: %s", jstr(d, "errorKind"), jstr(d, "error"));
	cr_assert_str_eq(payload_text(d), "Request failed after repeated internal retries. Please try "
					  "again, or use /new to start a fresh session.");
	cr_assert_str_eq(jstr(d, "errorDetail"),
			 "Idle-timeout cost-runaway breaker tripped: 5 consecutive idle timeouts without "
			 "completed model progress (cap=5). Halting further attempts to bound paid model "
			 "calls. See issue #76293.");
	cJSON_Delete(d);
	harness_stop_no_leaks(&h);
}

/* §1.15 hasCompletedModelProgressForIdleBreaker: any non-blank assistant
 * text is progress, so an answer that streamed words to the client and
 * then went silent heals the breaker like a finished call does. */
Test(agent_recovery, idle_breaker_counts_streamed_text_as_progress)
{
	harness_t h;
	harness_start_with(&h, SINGLE_CONFIG("", TEN_PROFILES, ""),
			   "{\"steps\":[" STALL "," STALL "," STALL "," STALL ","
			   "{\"text\":\"partial answer words\",\"stall_after\":2}," STALL ","
			   STALL "," STALL "," STALL ",{\"text\":\"done\"}]}",
			   NULL);
	set_idle_timeout(&h, 200);
	pc_event_sub_t *sub = session_sub(&h, "s");
	char run[80];
	submit(&h, "s", "hi", run);
	cJSON *d = finish_of(&h, run, 30000);
	cr_assert_neq(strcmp(jstr(d, "errorKind"), "retry_limit"), 0, "breaker tripped: %s", jstr(d, "errorDetail"));
	cJSON_Delete(d);
	/* the partial words did reach the client */
	char log[8192] = "";
	cr_assert_gt(drain_events(sub, PC_EVENT_ASSISTANT, log, sizeof(log)), 0);
	session_unsub(&h, "s", sub);
	cr_assert_not_null(strstr(log, "partial"), "events: %s", log);
	cr_assert_geq(request_count(&h), 6);
	harness_stop_no_leaks(&h);
}

/* Blank streamed text is not progress: five silent attempts, one of which
 * streamed only whitespace before going quiet, still trip the breaker. */
Test(agent_recovery, idle_breaker_ignores_blank_streamed_text)
{
	harness_t h;
	harness_start_with(&h, SINGLE_CONFIG("", TEN_PROFILES, ""),
			   "{\"steps\":[" STALL "," STALL ",{\"text\":\"   \\n  \",\"stall_after\":2},"
			   STALL "," STALL ",{\"text\":\"never\"}]}",
			   NULL);
	set_idle_timeout(&h, 200);
	char run[80];
	submit(&h, "s", "hi", run);
	cJSON *d = finish_of(&h, run, 30000);
	cr_assert_str_eq(jstr(d, "errorKind"), "retry_limit", "kind %s: %s", jstr(d, "errorKind"), jstr(d, "error"));
	cJSON_Delete(d);
	cr_assert_eq(request_count(&h), (int)PC_IDLE_BREAKER_DEFAULT_CAP);
	harness_stop_no_leaks(&h);
}

/* A tool turn whose usage says the prompt filled `input` of the 100 000
 * window (under the threshold compaction's window - reserve), then a stall
 * (the idle watchdog fires), then what a compaction and a retry get. */
#define TIMEOUT_STEPS(input)                                                                       \
	"{\"steps\":[{\"kind\":\"tool_calls\",\"tool_calls\":[{\"name\":\"clock\"}],"               \
	"\"usage\":{\"input_tokens\":" #input "}}," STALL ",{\"text\":\"SUMMARY\"},{\"text\":\"after\"}]}"

Test(agent_recovery, idle_timeout_with_a_full_prompt_compacts_and_retries)
{
	harness_t h;
	harness_start_with(&h,
			   SINGLE_CONFIG(",\"contextTokens\":100000", "[{\"id\":\"a\"}]",
					 ",\"compaction\":{\"keepRecentTokens\":50}"),
			   TIMEOUT_STEPS(70000), NULL);
	set_idle_timeout(&h, 300);
	seed_history(&h, "s", 30);
	pc_event_sub_t *sub = session_sub(&h, "s");
	char run[80];
	submit(&h, "s", "what time is it?", run);
	cJSON *d = finish_of(&h, run, 30000);
	cr_assert_str_eq(jstr(d, "phase"), "end", "kind %s: %s", jstr(d, "errorKind"), jstr(d, "error"));
	cr_assert_str_eq(payload_text(d), "after");
	cJSON_Delete(d);
	char log[4096] = "";
	cr_assert_eq(drain_events(sub, PC_EVENT_COMPACTION, log, sizeof(log)), 2, "events: %s", log);
	session_unsub(&h, "s", sub);
	cr_assert_not_null(strstr(log, "\"trigger\":\"timeout_recovery\""), "events: %s", log);
	cr_assert_not_null(strstr(log, "\"willRetry\":true"), "events: %s", log);
	char role[64], content[4096];
	first_message(&h, "s", role, sizeof(role), content, sizeof(content));
	cr_assert_str_eq(role, PC_COMPACTION_ROLE);
	cr_assert_not_null(strstr(content, "\"summary\":\"SUMMARY\""), "summary: %s", content);
	cr_assert_eq(request_count(&h), 4);
	harness_stop_no_leaks(&h);
}

Test(agent_recovery, idle_timeout_with_a_small_prompt_does_not_compact)
{
	harness_t h;
	harness_start_with(&h,
			   SINGLE_CONFIG(",\"contextTokens\":100000", "[{\"id\":\"a\"}]",
					 ",\"compaction\":{\"keepRecentTokens\":50}"),
			   TIMEOUT_STEPS(40000), NULL);
	set_idle_timeout(&h, 300);
	seed_history(&h, "s", 30);
	pc_event_sub_t *sub = session_sub(&h, "s");
	char run[80];
	submit(&h, "s", "what time is it?", run);
	cJSON *d = finish_of(&h, run, 30000);
	/* 40 000 / 100 000 is under 65 %: the timeout is reported, nothing compacted */
	cr_assert_str_eq(jstr(d, "phase"), "error");
	cr_assert_str_eq(jstr(d, "errorKind"), "timeout", "kind %s: %s", jstr(d, "errorKind"), jstr(d, "error"));
	cr_assert_not_null(strstr(payload_text(d), "model idle timeout"), "payload: %s", payload_text(d));
	cJSON_Delete(d);
	char log[4096] = "";
	cr_assert_eq(drain_events(sub, PC_EVENT_COMPACTION, log, sizeof(log)), 0, "events: %s", log);
	session_unsub(&h, "s", sub);
	char role[64], content[4096];
	first_message(&h, "s", role, sizeof(role), content, sizeof(content));
	cr_assert_str_eq(role, "user");
	cr_assert_eq(request_count(&h), 2);
	harness_stop_no_leaks(&h);
}

Test(agent_recovery, a_stalled_summary_call_is_bounded_by_the_idle_watchdog)
{
	harness_t h;
	harness_start_with(&h, SINGLE_CONFIG("", "[{\"id\":\"a\"}]", ",\"compaction\":{\"keepRecentTokens\":50}"),
			   "{\"steps\":[" OVERFLOW "," STALL ",{\"text\":\"never\"}]}", NULL);
	set_idle_timeout(&h, 300);
	seed_history(&h, "s", 30);
	char run[80];
	submit(&h, "s", "what is on shelf B5?", run);
	/* The summarising request goes to the same provider: its idle watchdog
	 * (300 ms here) bounds it, not only the 900 s compaction timeout. */
	pc_agent_wait_result_t w;
	cr_assert_eq(pc_agent_wait(h.agent, run, 10000, &w), 0);
	bool ended = w.status != PC_AGENT_WAIT_TIMEOUT;
	if (!ended) {
		pc_agent_abort_run(h.agent, run);
		pc_agent_wait(h.agent, run, 10000, &w);
	}
	int requests = request_count(&h);
	harness_stop_no_leaks(&h);
	cr_assert(ended, "the run still hung 10 s after the summary call stalled (%d requests)", requests);
	/* the failed compaction leaves the overflow unrecovered: an error, no retry */
	cr_assert_eq(w.status, PC_AGENT_WAIT_ERROR);
	cr_assert_eq(requests, 2);
}
