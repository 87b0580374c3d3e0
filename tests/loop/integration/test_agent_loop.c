/*
 * The whole agent loop against the embedded mock LLM: one run from
 * message to final payload, retries, profile rotation and model fallback,
 * compaction on overflow, the idle breaker, tool crashes, agent.wait.
 * Each test scripts the mock (one script cursor per run) and asserts what
 * a user sees: the terminal event, the attempts trace, the transcript,
 * and the requests the provider received.
 */
#include <criterion/criterion.h>

#include <inttypes.h>

#include "agent_harness.h"

TestSuite(agent_loop, .timeout = 60);

static int count_messages(harness_t *h, const char *key, const char *role)
{
	pc_store_history_t *hist = NULL;
	cr_assert_eq(pc_store_history(h->store, key, &hist), 0);
	int n = 0;
	for (size_t i = 0; i < pc_store_history_count(hist); i++) {
		pc_store_msg_t m;
		pc_store_history_get(hist, i, &m);
		if (!role || !strcmp(m.role, role))
			n++;
	}
	pc_store_history_free(hist);
	return n;
}

Test(agent_loop, one_attempt_with_a_tool_call)
{
	harness_t h;
	harness_start(&h, NULL); /* the demo: clock tool, then the echo */
	pc_event_sub_t *sub = NULL;
	pc_event_sub_config_t sc = {.capacity = 256};
	cr_assert_eq(pc_event_sub_new(&sc, &sub), 0);
	cr_assert_eq(pc_agent_subscribe_session(h.agent, "s1", sub), 0);
	char run[80];
	cr_assert_eq(submit(&h, "s1", "hello world", run), PC_AGENT_STARTED);
	cJSON *d = finish_of(&h, run, 10000);
	cr_assert_str_eq(jstr(d, "phase"), "end");
	cr_assert_str_eq(payload_text(d), "hello world");
	char trace[256];
	trace_text(d, trace, sizeof(trace));
	cr_assert_str_eq(trace, "success");
	cJSON_Delete(d);

	/* events: seq 1.., one terminal, tool start and result in between */
	pc_event_t *ev[256];
	size_t n = pc_event_sub_take(sub, ev, 256);
	uint64_t seq = 0;
	int tool_start = 0, tool_result = 0, terminal = 0, deltas = 0;
	for (size_t i = 0; i < n; i++) {
		cr_assert_eq(ev[i]->seq, seq + 1);
		seq = ev[i]->seq;
		if (ev[i]->stream == PC_EVENT_TOOL && strstr(ev[i]->data, "\"phase\":\"start\""))
			tool_start++;
		if (ev[i]->stream == PC_EVENT_TOOL && strstr(ev[i]->data, "\"phase\":\"result\""))
			tool_result++;
		deltas += ev[i]->stream == PC_EVENT_ASSISTANT;
		terminal += ev[i]->terminal;
		pc_event_release(ev[i]);
	}
	cr_assert_eq(tool_start, 1);
	cr_assert_eq(tool_result, 1);
	cr_assert_eq(terminal, 1);
	cr_assert_gt(deltas, 0);
	pc_agent_unsubscribe_session(h.agent, "s1", sub);
	pc_event_sub_release(sub);

	/* the transcript: user, assistant (tool call), tool result, assistant */
	cr_assert_eq(count_messages(&h, "s1", NULL), 4);
	cr_assert_eq(count_messages(&h, "s1", "toolResult"), 1);

	/* a second turn sees the first in its context */
	cr_assert_eq(submit(&h, "s1", "again", run), PC_AGENT_STARTED);
	d = finish_of(&h, run, 10000);
	cr_assert_str_eq(payload_text(d), "again");
	cJSON_Delete(d);
	cr_assert_eq(count_messages(&h, "s1", "user"), 2);
	harness_stop(&h);
}

/* A turn's messages are written lazily and made durable with the run's
 * end: each turn (with a tool call: four messages) costs two commits, the
 * run row's and the one of its transcript and its end (which the session
 * hears of only once it is durable), and is in the store when the run
 * reports its end. The session's lease costs one more, once: it is kept
 * while the session stays busy. */
Test(agent_loop, a_turn_with_a_tool_call_commits_twice)
{
	harness_store_lazy_ms = 600000; /* only syncs and waited-for writes commit */
	harness_t h;
	harness_start(&h, NULL);
	harness_store_lazy_ms = 0;
	enum { TURNS = 10 };
	for (int k = 1; k <= TURNS; k++) {
		char run[80];
		cr_assert_eq(submit(&h, "s1", "hello", run), PC_AGENT_STARTED);
		pc_agent_wait_result_t w;
		cr_assert_eq(pc_agent_wait(h.agent, run, 10000, &w), 0);
		cr_assert_eq(w.status, PC_AGENT_WAIT_OK);
		cr_assert_eq(count_messages(&h, "s1", NULL), 4 * k);
	}
	pc_store_stats_t st;
	pc_store_stats(h.store, &st);
	cr_assert_leq(st.batches, 2 * TURNS + 1, "%" PRIu64 " commits for %d turns", st.batches, TURNS);
	harness_stop(&h);
}

Test(agent_loop, rate_limit_rotates_the_profile_then_succeeds)
{
	harness_t h;
	harness_start(&h, "{\"steps\":[{\"kind\":\"error\",\"status\":429,\"message\":\"Daily request limit reached\"},{\"text\":\"fine\"}]}");
	char run[80];
	submit(&h, "s", "hi", run);
	cJSON *d = finish_of(&h, run, 10000);
	cr_assert_str_eq(payload_text(d), "fine");
	char trace[256];
	trace_text(d, trace, sizeof(trace));
	cr_assert_str_eq(trace, "rotate_profile:rate_limit,success");
	cJSON_Delete(d);
	cJSON *reqs = mock_requests(&h);
	cr_assert_eq(cJSON_GetArraySize(reqs), 2);
	char *all = cJSON_PrintUnformatted(reqs);
	char *a = strstr(all, "key-a"), *b = strstr(all, "key-b");
	cr_assert(a && b && a < b, "the second attempt used the second profile");
	cJSON_free(all);
	cJSON_Delete(reqs);
	harness_stop(&h);
}

Test(agent_loop, rotations_exhausted_then_model_fallback)
{
	harness_t h;
	harness_start(&h, "{\"steps\":[{\"kind\":\"error\",\"status\":429,\"message\":\"Daily request limit reached\"},{\"kind\":\"error\",\"status\":429,\"message\":\"Daily request limit reached\"},"
			  "{\"text\":\"from the fallback\"}]}");
	char run[80];
	submit(&h, "s", "hi", run);
	cJSON *d = finish_of(&h, run, 10000);
	cr_assert_str_eq(jstr(d, "phase"), "end");
	cr_assert_str_eq(payload_text(d), "from the fallback");
	char trace[256];
	trace_text(d, trace, sizeof(trace));
	cr_assert_str_eq(trace, "rotate_profile:rate_limit,fallback_model:rate_limit,success", "trace %s", trace);
	cJSON_Delete(d);
	cJSON *reqs = mock_requests(&h);
	char m[3][32];
	cr_assert_eq(cJSON_GetArraySize(reqs), 3);
	for (int i = 0; i < 3; i++)
		request_model(reqs, i, m[i], sizeof(m[i]));
	cr_assert_str_eq(m[0], "m1");
	cr_assert_str_eq(m[1], "m1");
	cr_assert_str_eq(m[2], "m2");
	cJSON_Delete(reqs);
	harness_stop(&h);
}

Test(agent_loop, empty_response_is_retried_once)
{
	harness_t h;
	harness_start(&h, "{\"steps\":[{\"kind\":\"empty\"},{\"text\":\"now I answer\"}]}");
	char run[80];
	submit(&h, "s", "hi", run);
	cJSON *d = finish_of(&h, run, 10000);
	cr_assert_str_eq(payload_text(d), "now I answer");
	cJSON_Delete(d);
	cJSON *reqs = mock_requests(&h);
	cr_assert_eq(cJSON_GetArraySize(reqs), 2);
	cJSON_Delete(reqs);
	harness_stop(&h);
}

Test(agent_loop, reasoning_only_retries_up_to_the_cap_then_fail)
{
	harness_t h;
	harness_start(&h, "{\"default\":{\"kind\":\"reasoning\",\"reasoning\":\"hmm\"}}");
	char run[80];
	submit(&h, "s", "hi", run);
	cJSON *d = finish_of(&h, run, 10000);
	cr_assert_str_eq(jstr(d, "phase"), "error");
	cr_assert_str_eq(jstr(d, "errorKind"), "incomplete_turn");
	cJSON_Delete(d);
	cJSON *reqs = mock_requests(&h);
	/* the first try and PC_RUN_MAX_REASONING_ONLY_RETRIES more, on each model */
	cr_assert_eq(cJSON_GetArraySize(reqs), 1 + PC_RUN_MAX_REASONING_ONLY_RETRIES);
	cJSON_Delete(reqs);
	harness_stop(&h);
}

Test(agent_loop, unknown_tool_is_a_tool_error_the_model_reads)
{
	harness_t h;
	harness_start(&h, "{\"steps\":[{\"kind\":\"tool_calls\",\"tool_calls\":[{\"name\":\"nope\"}]},"
			  "{\"text\":\"sorry\"}]}");
	char run[80];
	submit(&h, "s", "hi", run);
	cJSON *d = finish_of(&h, run, 10000);
	cr_assert_str_eq(payload_text(d), "sorry");
	cJSON_Delete(d);
	/* the second request carries the error result */
	cJSON *reqs = mock_requests(&h);
	char *all = cJSON_PrintUnformatted(cJSON_GetArrayItem(reqs, 1));
	cr_assert_not_null(strstr(all, "not found"));
	cJSON_free(all);
	cJSON_Delete(reqs);
	harness_stop(&h);
}

/* A tool whose invocation crashes (its timer handler fails). */
static int crash_start(void *user, pc_tool_task_t *t, const cJSON *args, const pc_tool_env_t *env)
{
	(void)user, (void)args, (void)env;
	return pc_tool_task_after(t, 1, 7);
}
static int crash_timer(void *user, pc_tool_task_t *t, uint64_t token)
{
	(void)user, (void)t, (void)token;
	return PC_ESTATE;
}

Test(agent_loop, a_crashing_tool_is_a_tool_error_not_a_dead_session)
{
	pc_tool_registry_t *tools = NULL;
	cr_assert_eq(pc_tool_registry_new(&tools), 0);
	cr_assert_eq(pc_tool_register_builtins(tools), 0);
	pc_tool_def_t boom = {.name = "boom", .description = "crashes", .start = crash_start,
			      .on_timer = crash_timer};
	cr_assert_eq(pc_tool_register(tools, &boom), 0);
	harness_t h;
	harness_start_with(&h, HARNESS_CONFIG,
			   "{\"steps\":[{\"kind\":\"tool_calls\",\"tool_calls\":[{\"name\":\"boom\"}]},"
			   "{\"text\":\"the tool failed\"}]}",
			   tools);
	char run[80];
	submit(&h, "s", "hi", run);
	cJSON *d = finish_of(&h, run, 10000);
	cr_assert_str_eq(jstr(d, "phase"), "end");
	cr_assert_str_eq(payload_text(d), "the tool failed");
	cJSON_Delete(d);
	cJSON *reqs = mock_requests(&h);
	char *all = cJSON_PrintUnformatted(cJSON_GetArrayItem(reqs, 1));
	cr_assert_not_null(strstr(all, "crashed"), "the model read the crash: %s", all);
	cJSON_free(all);
	cJSON_Delete(reqs);
	/* the session still works */
	submit(&h, "s", "still there?", run);
	d = finish_of(&h, run, 10000);
	cr_assert_str_eq(jstr(d, "phase"), "end");
	cJSON_Delete(d);
	harness_stop(&h);
	pc_tool_registry_free(tools);
}

Test(agent_loop, wait_timeout_does_not_stop_the_run)
{
	harness_t h;
	harness_start(&h, "{\"default\":{\"text\":\"slow\",\"ttft_ms\":400}}");
	char run[80];
	submit(&h, "s", "hi", run);
	pc_agent_wait_result_t w;
	cr_assert_eq(pc_agent_wait(h.agent, run, 50, &w), 0);
	cr_assert_eq(w.status, PC_AGENT_WAIT_TIMEOUT);
	cr_assert_eq(w.run.status, PC_RUN_STATUS_RUNNING);
	cr_assert_eq(pc_agent_wait(h.agent, run, 10000, &w), 0);
	cr_assert_eq(w.status, PC_AGENT_WAIT_OK);
	harness_stop(&h);
}

Test(agent_loop, idempotency_key_gives_the_first_run)
{
	harness_t h;
	harness_start(&h, "{\"default\":{\"text\":\"once\"}}");
	pc_agent_params_t p = {.session_key = "s", .message = "hi", .idempotency_key = "k-1"};
	pc_agent_accepted_t a1, a2;
	cr_assert_eq(pc_agent_submit(h.agent, &p, &a1), 0);
	cr_assert_eq(pc_agent_submit(h.agent, &p, &a2), 0);
	cr_assert_eq(a2.disposition, PC_AGENT_DUPLICATE);
	cr_assert_str_eq(a1.run_id, a2.run_id);
	cJSON *d = finish_of(&h, a1.run_id, 10000);
	cJSON_Delete(d);
	cJSON *reqs = mock_requests(&h);
	cr_assert_eq(cJSON_GetArraySize(reqs), 1);
	cJSON_Delete(reqs);
	harness_stop(&h);
}

/* A run's own thinking level reaches its model request; without one, the
 * configured level (off) sends no reasoning effort. */
Test(agent_loop, a_runs_thinking_level_reaches_the_request)
{
	harness_t h;
	harness_start(&h, "{\"default\":{\"text\":\"ok\"}}");
	pc_agent_params_t p = {.session_key = "think", .message = "hi", .thinking = "High"};
	pc_agent_accepted_t a;
	cr_assert_eq(pc_agent_submit(h.agent, &p, &a), 0);
	cJSON_Delete(finish_of(&h, a.run_id, 10000));
	p.thinking = NULL;
	cr_assert_eq(pc_agent_submit(h.agent, &p, &a), 0);
	cJSON_Delete(finish_of(&h, a.run_id, 10000));
	p.thinking = "lots";
	cr_assert_eq(pc_agent_submit(h.agent, &p, &a), PC_EINVAL);
	cJSON *reqs = mock_requests(&h);
	cr_assert_eq(cJSON_GetArraySize(reqs), 2, "%d requests", cJSON_GetArraySize(reqs));
	cJSON *owned = NULL;
	const cJSON *b = request_body(reqs, 0, &owned);
	cr_assert_str_eq(jstr(b, "reasoning_effort"), "high");
	cJSON_Delete(owned);
	b = request_body(reqs, 1, &owned);
	cr_assert_null(cJSON_GetObjectItemCaseSensitive(b, "reasoning_effort"));
	cJSON_Delete(owned);
	cJSON_Delete(reqs);
	harness_stop(&h);
}

Test(agent_loop, bad_input_is_refused_cleanly)
{
	harness_t h;
	harness_start(&h, NULL);
	pc_agent_params_t p = {.session_key = "s", .message = NULL};
	pc_agent_accepted_t a;
	cr_assert_eq(pc_agent_submit(h.agent, &p, &a), PC_EINVAL);
	char key[400];
	memset(key, 'k', sizeof(key) - 1);
	key[sizeof(key) - 1] = '\0';
	p = (pc_agent_params_t){.session_key = key, .message = "x"};
	cr_assert_eq(pc_agent_submit(h.agent, &p, &a), PC_EINVAL);
	p = (pc_agent_params_t){.session_key = "bad\nkey", .message = "x"};
	cr_assert_eq(pc_agent_submit(h.agent, &p, &a), PC_EINVAL);
	/* an unknown model ends the run with an error, not a crash */
	p = (pc_agent_params_t){.session_key = "s", .message = "x", .model = "nosuch/model"};
	cr_assert_eq(pc_agent_submit(h.agent, &p, &a), 0);
	pc_agent_wait_result_t w;
	cr_assert_eq(pc_agent_wait(h.agent, a.run_id, 10000, &w), 0);
	cr_assert_eq(w.status, PC_AGENT_WAIT_ERROR);
	cr_assert_eq(pc_agent_wait(h.agent, "no-such-run", 100, &w), PC_ENOTFOUND);
	harness_stop(&h);
}

Test(agent_loop, stalled_run_is_aborted_and_the_queue_drains)
{
	harness_t h;
	harness_start_with(&h,
			   "{\"providers\":{\"mock\":{\"api\":\"openai-completions\",\"embedded\":true}},"
			   "\"agents\":{\"defaults\":{\"model\":\"mock/m\"}},"
			   "\"messages\":{\"queue\":{\"mode\":\"followup\",\"debounceMs\":0}},"
			   "\"diagnostics\":{\"enabled\":true,\"stuckSessionWarnMs\":1000,"
			   "\"stuckSessionAbortMs\":2000}}",
			   /* the first run's model never answers (a local provider has no
			    * idle watchdog); the next one answers */
			   "{\"default\":{\"text\":\"next\"}}", NULL);
	pc_event_sub_t *sub = NULL;
	pc_event_sub_config_t sc = {.capacity = 256};
	cr_assert_eq(pc_event_sub_new(&sc, &sub), 0);
	cr_assert_eq(pc_agent_subscribe_session(h.agent, "s", sub), 0);
	char run1[80], run2[80];
	cr_assert_eq(submit(&h, "s", "first [[mock:{\"kind\":\"stall\"}]]", run1), PC_AGENT_STARTED);
	cr_assert_eq(submit(&h, "s", "second", run2), PC_AGENT_QUEUED);
	pc_agent_wait_result_t w;
	cr_assert_eq(pc_agent_wait(h.agent, run1, 15000, &w), 0);
	cr_assert_eq(w.run.status, PC_RUN_STATUS_ABORTED);
	cr_assert_eq(pc_agent_wait(h.agent, run2, 15000, &w), 0);
	cr_assert_eq(w.status, PC_AGENT_WAIT_OK, "the queued message ran after the recovery: %s %s %s",
		     pc_run_status_name(w.run.status), w.run.error, w.run.error_kind);
	pc_agent_stats_t st;
	pc_agent_stats(h.agent, &st);
	cr_assert_geq(st.long_running, 1);
	cr_assert_geq(st.stalled, 1);
	cr_assert_eq(st.recoveries, 1);
	pc_event_t *ev[256];
	size_t n = pc_event_sub_take(sub, ev, 256);
	int diag = 0;
	for (size_t i = 0; i < n; i++) {
		if (ev[i]->stream == PC_EVENT_DIAGNOSTIC && strstr(ev[i]->data, "session.stalled"))
			diag++;
		pc_event_release(ev[i]);
	}
	cr_assert_geq(diag, 1);
	pc_agent_unsubscribe_session(h.agent, "s", sub);
	pc_event_sub_release(sub);
	harness_stop(&h);
}

/* §7.1 item 1 and §2.6: the context grows past window - reserve between
 * two model calls, so the attempt compacts before calling again; the run
 * budget runs out while it compacts and is extended once instead of
 * aborting the run. */
Test(agent_loop, threshold_compaction_inside_the_attempt_extends_the_budget)
{
	harness_t h;
	harness_start_with(&h,
			   "{\"providers\":{\"mock\":{\"api\":\"openai-completions\",\"embedded\":true,"
			   "\"contextTokens\":16000}},"
			   "\"agents\":{\"defaults\":{\"model\":\"mock/m\","
			   "\"compaction\":{\"keepRecentTokens\":10}}}}",
			   "{\"steps\":[{\"kind\":\"tool_calls\",\"tool_calls\":[{\"name\":\"clock\"}],"
			   "\"usage\":{\"input_tokens\":9000,\"output_tokens\":10}},"
			   "{\"text\":\"SUMMARY of the work\",\"ttft_ms\":1500},{\"text\":\"done\"}]}",
			   NULL);
	pc_event_sub_t *sub = NULL;
	pc_event_sub_config_t sc = {.capacity = 256};
	cr_assert_eq(pc_event_sub_new(&sc, &sub), 0);
	cr_assert_eq(pc_agent_subscribe_session(h.agent, "s", sub), 0);
	pc_agent_params_t p = {.session_key = "s", .message = "do the work", .timeout_ms = 1000};
	pc_agent_accepted_t acc;
	cr_assert_eq(pc_agent_submit(h.agent, &p, &acc), 0);
	cJSON *d = finish_of(&h, acc.run_id, 20000);
	cr_assert_str_eq(jstr(d, "phase"), "end", "%s", jstr(d, "error"));
	cr_assert_str_eq(payload_text(d), "done");
	cJSON_Delete(d);
	pc_event_t *ev[256];
	size_t n = pc_event_sub_take(sub, ev, 256);
	int starts = 0, retries = 0;
	for (size_t i = 0; i < n; i++) {
		if (ev[i]->stream == PC_EVENT_COMPACTION && strstr(ev[i]->data, "\"phase\":\"start\""))
			starts++;
		if (ev[i]->stream == PC_EVENT_COMPACTION && strstr(ev[i]->data, "\"willRetry\":true"))
			retries++;
		pc_event_release(ev[i]);
	}
	cr_assert_eq(starts, 1);
	cr_assert_eq(retries, 1);
	pc_agent_unsubscribe_session(h.agent, "s", sub);
	pc_event_sub_release(sub);
	pc_store_history_t *hist = NULL;
	cr_assert_eq(pc_store_history(h.store, "s", &hist), 0);
	pc_store_msg_t m;
	pc_store_history_get(hist, 0, &m);
	cr_assert_str_eq(m.role, "compactionSummary");
	pc_store_history_free(hist);
	harness_stop(&h);
}

/* §1.11: a profile that failed in one run is in cooldown for the next,
 * in any session of the process. */
Test(agent_loop, profile_cooldown_is_shared_by_later_runs)
{
	harness_t h;
	harness_start(&h, "{\"steps\":[{\"kind\":\"error\",\"status\":429,"
			  "\"message\":\"Daily request limit reached\"},{\"text\":\"ok\"}]}");
	char run[80];
	submit(&h, "s1", "first", run);
	cJSON *d = finish_of(&h, run, 10000);
	char trace[128];
	trace_text(d, trace, sizeof(trace));
	cr_assert_str_eq(trace, "rotate_profile:rate_limit,success");
	cJSON_Delete(d);
	/* the marker answers every request of this run with a text */
	submit(&h, "s2", "second [[mock:{\"text\":\"ok\"}]]", run);
	d = finish_of(&h, run, 10000);
	cr_assert_str_eq(payload_text(d), "ok");
	trace_text(d, trace, sizeof(trace));
	/* it went straight to the good profile; the one passed over is in its
	 * trace with the reason of its cooldown, marked as not asked (§1.11) */
	cr_assert_str_eq(trace, "rotate_profile:rate_limit,success", "%s", trace);
	const cJSON *skip = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(d, "attempts"), 0);
	cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(skip, "skipped")));
	cr_assert_eq(cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(skip, "profile")), 0);
	cr_assert_eq(cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(skip, "status")), 429);
	cJSON_Delete(d);
	cJSON *reqs = mock_requests(&h);
	int n = cJSON_GetArraySize(reqs);
	cr_assert_eq(n, 3);
	char *last = cJSON_PrintUnformatted(cJSON_GetArrayItem(reqs, n - 1));
	cr_assert_not_null(strstr(last, "key-b"), "the later run used profile b");
	cr_assert_null(strstr(last, "key-a"));
	cJSON_free(last);
	cJSON_Delete(reqs);
	harness_stop(&h);
}

/* §2.1 steps 3, 5, 7: the system prompt carries the workspace's context
 * files and its skills list. */
Test(agent_loop, system_prompt_has_context_files_and_skills)
{
	char ws[] = "/tmp/pincer-ws-XXXXXX";
	cr_assert_not_null(mkdtemp(ws));
	char path[256], cfg[1024];
	snprintf(path, sizeof(path), "%s/skills/weather", ws);
	char cmd[1024];
	snprintf(cmd, sizeof(cmd), "mkdir -p %s && printf 'Always answer in French.\\n' > %s/AGENTS.md && "
		 "printf -- '---\\nname: weather\\ndescription: look up the weather\\n---\\n' > %s/SKILL.md",
		 path, ws, path);
	cr_assert_eq(system(cmd), 0);
	snprintf(cfg, sizeof(cfg),
		 "{\"providers\":{\"mock\":{\"api\":\"openai-completions\",\"embedded\":true}},"
		 "\"agents\":{\"defaults\":{\"model\":\"mock/m\",\"workspace\":\"%s\"}}}", ws);
	harness_t h;
	harness_start_with(&h, cfg, "{\"default\":{\"text\":\"ok\"}}", NULL);
	char run[80];
	submit(&h, "s", "hi", run);
	cJSON *d = finish_of(&h, run, 10000);
	cJSON_Delete(d);
	cJSON *reqs = mock_requests(&h);
	char *all = cJSON_PrintUnformatted(reqs);
	cr_assert_not_null(strstr(all, "Always answer in French."));
	cr_assert_not_null(strstr(all, "## Skills"));
	cr_assert_not_null(strstr(all, "weather: look up the weather"));
	cJSON_free(all);
	cJSON_Delete(reqs);
	harness_stop(&h);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", ws);
	cr_assert_eq(system(cmd), 0);
}

/* §1.16: after an overflow compaction the model calls the same tool with
 * the same arguments and gets the same result three times: the guard ends
 * the run (no retry, no fallback). */
Test(agent_loop, post_compaction_loop_guard_stops_a_persisting_loop)
{
	harness_t h;
	harness_start_with(&h,
			   "{\"providers\":{\"mock\":{\"api\":\"openai-completions\",\"embedded\":true}},"
			   "\"agents\":{\"defaults\":{\"model\":\"mock/m\",\"compaction\":{\"keepRecentTokens\":50}}}}",
			   "{\"steps\":[{\"kind\":\"context_overflow\"},{\"text\":\"SUMMARY\"}],"
			   "\"default\":{\"kind\":\"tool_calls\",\"tool_calls\":[{\"name\":\"sleep\","
			   "\"arguments\":{\"ms\":0}}]}}",
			   NULL);
	seed_history(&h, "s", 30);
	char run[80];
	submit(&h, "s", "go", run);
	cJSON *d = finish_of(&h, run, 20000);
	cr_assert_str_eq(jstr(d, "phase"), "error");
	cr_assert_str_eq(jstr(d, "errorKind"), "compaction_loop_persisted", "%s", jstr(d, "error"));
	cr_assert_not_null(strstr(jstr(d, "error"), "repeated"), "%s", jstr(d, "error"));
	cJSON_Delete(d);
	/* overflow, summary, then the loop: three identical tool rounds, and
	 * at most one more request before the abort landed */
	int n = request_count(&h);
	cr_assert_geq(n, 5);
	cr_assert_leq(n, 6);
	harness_stop_no_leaks(&h);
}

/* Between runs of a busy session the transcript stays in memory (it equals
 * the stored one): the next run does not read it back; after the keep
 * time, or a rewrite, it is read from the store again. */
Test(agent_loop, busy_session_keeps_its_transcript_between_runs)
{
	harness_t h;
	harness_start(&h, "{\"default\":{\"text\":\"ok\"}}");
	pc_store_stats_t s0, s1, s2;
	char run[80];
	pc_store_stats(h.store, &s0);
	submit(&h, "s", "first message", run);
	cJSON_Delete(finish_of(&h, run, 10000));
	submit(&h, "s", "second message", run);
	cJSON_Delete(finish_of(&h, run, 10000));
	pc_store_stats(h.store, &s1);
	cr_assert_eq(s1.reads - s0.reads, 1, "the second run started from the kept transcript");
	/* and it saw the first turn */
	cJSON *reqs = mock_requests(&h);
	char *second = cJSON_PrintUnformatted(cJSON_GetArrayItem(reqs, cJSON_GetArraySize(reqs) - 1));
	cr_assert_not_null(strstr(second, "first message"));
	cr_assert_not_null(strstr(second, "second message"));
	cJSON_free(second);
	cJSON_Delete(reqs);
	/* idle past the keep time: read from the store again */
	sleep_ms(PC__TRANSCRIPT_KEEP_MS + 1500);
	submit(&h, "s", "third message", run);
	cJSON *d = finish_of(&h, run, 10000);
	cr_assert_str_eq(jstr(d, "phase"), "end");
	cJSON_Delete(d);
	pc_store_stats(h.store, &s2);
	cr_assert_eq(s2.reads - s1.reads, 1);
	cr_assert_eq(request_count(&h), 3);
	harness_stop_no_leaks(&h);
}

/* Whoever learns from agent.wait that a run ended finds the session free:
 * the next message starts a run of its own (it is never steered into the
 * run that just ended, whatever the queue mode). */
Test(agent_loop, a_message_after_wait_starts_its_own_run)
{
	harness_t h;
	harness_start(&h, "{\"default\":{\"text\":\"ok\"}}");
	for (int i = 0; i < 200; i++) {
		char run[80];
		cr_assert_eq(submit(&h, "s", "again", run), PC_AGENT_STARTED, "message %d", i);
		pc_agent_wait_result_t w;
		cr_assert_eq(pc_agent_wait(h.agent, run, 10000, &w), 0);
		cr_assert_eq(w.status, PC_AGENT_WAIT_OK);
	}
	harness_stop_no_leaks(&h);
}
