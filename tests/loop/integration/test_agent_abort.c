/*
 * Aborts through the whole loop against the embedded mock LLM (spec §1.7
 * step 0, §6.3 step 7, §7.4): a user abort ends the run as aborted at once,
 * wherever it is (streaming, in a tool, compacting, still queued), is never
 * retried or failed over, releases the session and the global lane, and
 * leaves no actor behind.
 */
#include <criterion/criterion.h>

#include "agent_harness.h"

TestSuite(agent_abort, .timeout = 60);

#define ABORT_CONFIG(extra)                                                                        \
	"{\"providers\":{"                                                                          \
	"\"mock\":{\"api\":\"openai-completions\",\"embedded\":true,"                               \
	"\"profiles\":[{\"id\":\"a\",\"apiKey\":\"key-a\"},{\"id\":\"b\",\"apiKey\":\"key-b\"}]},"   \
	"\"fb\":{\"api\":\"openai-completions\",\"embedded\":true,\"apiKey\":\"key-fb\"}},"         \
	"\"agents\":{\"defaults\":{\"model\":\"mock/m1\",\"fallbacks\":[\"fb/m2\"],"                \
	"\"maxConcurrent\":16,\"sessionIdleSeconds\":1" extra "}},"                                 \
	"\"messages\":{\"queue\":{\"mode\":\"followup\",\"debounceMs\":20}}}"

#define SLOW_STREAM "[[mock:{\"text\":\"one two three four five six seven eight\",\"delay_ms\":400}]]"

static void assert_aborted(harness_t *h, const char *run)
{
	cJSON *d = finish_of(h, run, 10000);
	cr_assert_str_eq(jstr(d, "phase"), "error");
	cr_assert_str_eq(jstr(d, "status"), "aborted", "status %s", jstr(d, "status"));
	cJSON_Delete(d);
}

Test(agent_abort, abort_while_streaming_ends_at_once_without_retry_or_fallback)
{
	harness_t h;
	harness_start_with(&h, ABORT_CONFIG(""), "{}", NULL);
	pc_event_sub_t *sub = session_sub(&h, "s");
	char run[80];
	cr_assert_eq(submit(&h, "s", "story " SLOW_STREAM, run), PC_AGENT_STARTED);
	cr_assert(await_event(sub, PC_EVENT_ASSISTANT, NULL, 10000, NULL, 0), "no delta");
	uint64_t t0 = now_ms();
	cr_assert_eq(pc_agent_abort_run(h.agent, run), 0);
	pc_agent_wait_result_t w = wait_run(&h, run, 10000);
	cr_assert_lt(now_ms() - t0, 1500, "the abort took %llu ms", (unsigned long long)(now_ms() - t0));
	cr_assert_eq(w.status, PC_AGENT_WAIT_ERROR);
	cr_assert_eq(w.run.status, PC_RUN_STATUS_ABORTED);
	cJSON *d = finish_of(&h, run, 1000);
	cr_assert_str_eq(jstr(d, "errorKind"), "aborted");
	char trace[256];
	trace_text(d, trace, sizeof(trace));
	cr_assert_eq(strstr(trace, "fallback"), NULL, "trace %s", trace);
	cr_assert_eq(strstr(trace, "rotate"), NULL, "trace %s", trace);
	cJSON_Delete(d);
	/* a second abort of an ended run is refused */
	cr_assert_eq(pc_agent_abort_run(h.agent, run), PC_ESTATE);
	/* one model request: no retry, no other profile, no fallback model */
	cJSON *reqs = mock_requests(&h);
	cr_assert_eq(cJSON_GetArraySize(reqs), 1);
	cJSON_Delete(reqs);
	/* the lane is free and the session takes the next message */
	pc_agent_stats_t st;
	AWAIT((pc_agent_stats(h.agent, &st), st.lane_active == 0), 5000);
	cr_assert_eq(submit(&h, "s", "are you there?", run), PC_AGENT_STARTED);
	d = finish_of(&h, run, 10000);
	cr_assert_str_eq(jstr(d, "phase"), "end");
	cr_assert_str_eq(payload_text(d), "are you there?");
	cJSON_Delete(d);
	AWAIT((pc_agent_stats(h.agent, &st), st.lane_active == 0 && st.runs_active == 0), 5000);
	session_unsub(&h, "s", sub);
	harness_stop_no_leaks(&h);
}

Test(agent_abort, abort_during_a_tool_ends_quickly)
{
	harness_t h;
	harness_start_with(&h, ABORT_CONFIG(""),
			   "{\"steps\":[{\"kind\":\"tool_calls\",\"tool_calls\":[{\"name\":\"sleep\","
			   "\"arguments\":{\"ms\":5000}}]},{\"text\":\"slept\"}]}",
			   NULL);
	pc_event_sub_t *sub = session_sub(&h, "s");
	char run[80];
	uint64_t t0 = now_ms();
	cr_assert_eq(submit(&h, "s", "nap", run), PC_AGENT_STARTED);
	cr_assert(await_event(sub, PC_EVENT_TOOL, "\"phase\":\"start\"", 10000, NULL, 0), "no tool start");
	cr_assert_eq(pc_agent_abort_run(h.agent, run), 0);
	pc_agent_wait_result_t w = wait_run(&h, run, 10000);
	cr_assert_lt(now_ms() - t0, 2500, "the run waited for the tool: %llu ms",
		     (unsigned long long)(now_ms() - t0));
	cr_assert_eq(w.run.status, PC_RUN_STATUS_ABORTED);
	assert_aborted(&h, run);
	/* the model was not asked again after the tool */
	cr_assert_eq(request_count(&h), 1);
	/* the tool call has its result in the transcript (pairing kept) */
	char roles[256];
	history_roles(&h, "s", roles, sizeof(roles));
	cr_assert_str_eq(roles, "user,assistant,toolResult");
	pc_agent_stats_t st;
	AWAIT((pc_agent_stats(h.agent, &st), st.lane_active == 0), 5000);
	session_unsub(&h, "s", sub);
	harness_stop_no_leaks(&h);
}

Test(agent_abort, abort_during_compaction_leaves_the_transcript_unchanged)
{
	harness_t h;
	harness_start_with(&h, ABORT_CONFIG(",\"compaction\":{\"keepRecentTokens\":50}"),
			   /* (3 s, not more: the mock's answer timer outlives the
			    * aborted request, and the actor check waits for it) */
			   "{\"steps\":[{\"kind\":\"context_overflow\"},{\"text\":\"S\",\"ttft_ms\":3000}]}", NULL);
	seed_history(&h, "s", 30);
	pc_event_sub_t *sub = session_sub(&h, "s");
	char run[80];
	cr_assert_eq(submit(&h, "s", "one more question", run), PC_AGENT_STARTED);
	char log[4096] = "";
	cr_assert(await_event(sub, PC_EVENT_COMPACTION, "\"phase\":\"start\"", 10000, log, sizeof(log)),
		  "no compaction start");
	/* the summarising request has reached the mock */
	AWAIT(request_count(&h) == 2, 5000);
	uint64_t t0 = now_ms();
	cr_assert_eq(pc_agent_abort_run(h.agent, run), 0);
	pc_agent_wait_result_t w = wait_run(&h, run, 10000);
	cr_assert_lt(now_ms() - t0, 1500, "the run waited for the summary: %llu ms",
		     (unsigned long long)(now_ms() - t0));
	cr_assert_eq(w.run.status, PC_RUN_STATUS_ABORTED);
	assert_aborted(&h, run);
	/* the 30 messages and the run's user turn, no summary */
	char roles[1024];
	cr_assert_eq(history_roles(&h, "s", roles, sizeof(roles)), 31, "history: %s", roles);
	cr_assert_eq(strstr(roles, "compactionSummary"), NULL, "history: %s", roles);
	cr_assert_eq(strncmp(roles, "user,assistant,", 15), 0);
	/* no attempt after the aborted compaction */
	sleep_ms(100);
	cr_assert_eq(request_count(&h), 2);
	/* the compaction ended without a retry */
	cr_assert(await_event(sub, PC_EVENT_COMPACTION, "\"phase\":\"end\"", 2000, log, sizeof(log)), "events: %s",
		  log);
	cr_assert_not_null(strstr(log, "\"willRetry\":false"), "events: %s", log);
	cr_assert_eq(strstr(log, "\"completed\":true"), NULL, "events: %s", log);
	session_unsub(&h, "s", sub);
	harness_stop_no_leaks(&h);
}

Test(agent_abort, a_queued_run_that_is_aborted_never_runs)
{
	harness_t h;
	harness_start_with(&h, ABORT_CONFIG(""), "{}", NULL);
	char r1[80], r2[80];
	cr_assert_eq(submit(&h, "s", "first [[mock:{\"text\":\"first answer\",\"ttft_ms\":500}]]", r1),
		     PC_AGENT_STARTED);
	cr_assert_eq(submit(&h, "s", "second", r2), PC_AGENT_QUEUED);
	cr_assert_eq(pc_agent_abort_run(h.agent, r2), 0);
	pc_agent_wait_result_t w2 = wait_run(&h, r2, 5000);
	cr_assert_eq(w2.status, PC_AGENT_WAIT_ERROR);
	cr_assert_eq(w2.run.status, PC_RUN_STATUS_ABORTED);
	cr_assert_eq(w2.run.started_ms, 0);
	pc_agent_wait_result_t w1 = wait_run(&h, r1, 10000);
	cr_assert_eq(w1.status, PC_AGENT_WAIT_OK);
	/* past the debounce: nothing else ran */
	sleep_ms(200);
	cJSON *reqs = mock_requests(&h);
	cr_assert_eq(cJSON_GetArraySize(reqs), 1);
	char *all = cJSON_PrintUnformatted(reqs);
	cr_assert_eq(strstr(all, "\"second\""), NULL, "%s", all);
	cJSON_free(all);
	cJSON_Delete(reqs);
	char roles[256];
	history_roles(&h, "s", roles, sizeof(roles));
	cr_assert_str_eq(roles, "user,assistant");
	harness_stop_no_leaks(&h);
}

Test(agent_abort, abort_session_aborts_the_active_and_the_queued_runs)
{
	harness_t h;
	harness_start_with(&h, ABORT_CONFIG(""), "{}", NULL);
	pc_event_sub_t *sub = session_sub(&h, "s");
	char r[3][80];
	cr_assert_eq(submit(&h, "s", "first " SLOW_STREAM, r[0]), PC_AGENT_STARTED);
	cr_assert_eq(submit(&h, "s", "second", r[1]), PC_AGENT_QUEUED);
	cr_assert_eq(submit(&h, "s", "third", r[2]), PC_AGENT_QUEUED);
	cr_assert(await_event(sub, PC_EVENT_ASSISTANT, NULL, 10000, NULL, 0), "no delta");
	uint64_t t0 = now_ms();
	cr_assert_eq(pc_agent_abort_session(h.agent, "s"), 0);
	for (int i = 0; i < 3; i++) {
		pc_agent_wait_result_t w = wait_run(&h, r[i], 10000);
		cr_assert_eq(w.status, PC_AGENT_WAIT_ERROR, "run %d", i);
		cr_assert_eq(w.run.status, PC_RUN_STATUS_ABORTED, "run %d: %s", i, pc_run_status_name(w.run.status));
	}
	cr_assert_lt(now_ms() - t0, 1500);
	sleep_ms(200);
	cr_assert_eq(request_count(&h), 1);
	pc_agent_stats_t st;
	AWAIT((pc_agent_stats(h.agent, &st), st.lane_active == 0 && st.runs_active == 0), 5000);
	/* the session is usable afterwards */
	char run[80];
	cr_assert_eq(submit(&h, "s", "fresh start", run), PC_AGENT_STARTED);
	cJSON *d = finish_of(&h, run, 10000);
	cr_assert_str_eq(payload_text(d), "fresh start");
	cJSON_Delete(d);
	session_unsub(&h, "s", sub);
	harness_stop_no_leaks(&h);
}

Test(agent_abort, abort_of_unknown_run_is_not_found)
{
	harness_t h;
	harness_start_with(&h, ABORT_CONFIG(""), "{}", NULL);
	cr_assert_eq(pc_agent_abort_run(h.agent, "no-such-run"), PC_ENOTFOUND);
	char run[80];
	submit(&h, "s", "hi", run);
	cJSON *d = finish_of(&h, run, 10000);
	cr_assert_str_eq(jstr(d, "phase"), "end");
	cJSON_Delete(d);
	cr_assert_eq(pc_agent_abort_run(h.agent, run), PC_ESTATE);
	harness_stop_no_leaks(&h);
}

Test(agent_abort, abort_during_a_retry_backoff_ends_at_once)
{
	harness_t h;
	/* a short-window rate limit: the same model is retried after 10 s */
	harness_start_with(&h, ABORT_CONFIG(""),
			   "{\"steps\":[{\"kind\":\"error\",\"status\":429,\"retry_after\":5},{\"text\":\"late\"}]}", NULL);
	char run[80];
	cr_assert_eq(submit(&h, "s", "hi", run), PC_AGENT_STARTED);
	AWAIT(request_count(&h) == 1, 10000);
	sleep_ms(200); /* the attempt has reported; the run sleeps */
	uint64_t t0 = now_ms();
	cr_assert_eq(pc_agent_abort_run(h.agent, run), 0);
	pc_agent_wait_result_t w = wait_run(&h, run, 15000);
	cr_assert_lt(now_ms() - t0, 1500, "the abort waited for the backoff: %llu ms",
		     (unsigned long long)(now_ms() - t0));
	cr_assert_eq(w.run.status, PC_RUN_STATUS_ABORTED, "status %s", pc_run_status_name(w.run.status));
	assert_aborted(&h, run);
	sleep_ms(100);
	cr_assert_eq(request_count(&h), 1);
	harness_stop_no_leaks(&h);
}

Test(agent_abort, abort_of_a_run_waiting_for_the_global_lane)
{
	harness_t h;
	harness_start_with(&h,
			   "{\"providers\":{\"mock\":{\"api\":\"openai-completions\",\"embedded\":true}},"
			   "\"agents\":{\"defaults\":{\"model\":\"mock/m1\",\"maxConcurrent\":1,\"sessionIdleSeconds\":1}}}",
			   "{}", NULL);
	char r1[80], r2[80];
	cr_assert_eq(submit(&h, "s1", "first [[mock:{\"text\":\"first answer\",\"ttft_ms\":800}]]", r1),
		     PC_AGENT_STARTED);
	cr_assert_eq(submit(&h, "s2", "second", r2), PC_AGENT_STARTED);
	pc_agent_stats_t st;
	AWAIT((pc_agent_stats(h.agent, &st), st.lane_active == 1 && st.lane_queued == 1), 5000);
	cr_assert_eq(pc_agent_abort_run(h.agent, r2), 0);
	pc_agent_wait_result_t w2 = wait_run(&h, r2, 5000);
	cr_assert_eq(w2.run.status, PC_RUN_STATUS_ABORTED);
	cr_assert_eq(w2.run.started_ms, 0);
	AWAIT((pc_agent_stats(h.agent, &st), st.lane_queued == 0), 5000);
	cr_assert_eq(wait_run(&h, r1, 10000).status, PC_AGENT_WAIT_OK);
	sleep_ms(100);
	cr_assert_eq(request_count(&h), 1);
	/* the lane admits the next run at once */
	char r3[80];
	cr_assert_eq(submit(&h, "s2", "third", r3), PC_AGENT_STARTED);
	cJSON *d = finish_of(&h, r3, 10000);
	cr_assert_str_eq(payload_text(d), "third");
	cJSON_Delete(d);
	harness_stop_no_leaks(&h);
}
