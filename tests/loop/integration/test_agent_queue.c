/*
 * The session lane and the queue modes (spec §6.1-§6.3) through the whole
 * loop against the embedded mock LLM: one run at a time per session, the
 * four modes for a message that arrives while the session is busy
 * (followup, collect, steer, interrupt), the global lane's cap over many
 * sessions, and the queue cap with its drop policies.
 *
 * A slow first answer is scripted with a marker in the first message
 * ([[mock:{...}]] only fires for the request whose last message carries
 * it), so every later run gets the echo of its own prompt.
 */
#include <criterion/criterion.h>

#include "agent_harness.h"
#include "gate_server.h"

TestSuite(agent_queue, .timeout = 60);

/* The harness's providers, with a short debounce so queued turns drain fast. */
#define QUEUE_CONFIG(queue)                                                                        \
	"{\"providers\":{"                                                                          \
	"\"mock\":{\"api\":\"openai-completions\",\"embedded\":true,"                               \
	"\"profiles\":[{\"id\":\"a\",\"apiKey\":\"key-a\"},{\"id\":\"b\",\"apiKey\":\"key-b\"}]},"   \
	"\"fb\":{\"api\":\"openai-completions\",\"embedded\":true,\"apiKey\":\"key-fb\"}},"         \
	"\"agents\":{\"defaults\":{\"model\":\"mock/m1\",\"fallbacks\":[\"fb/m2\"],"                \
	"\"maxConcurrent\":16,\"sessionIdleSeconds\":1}},"                                          \
	"\"messages\":{\"queue\":" queue "}}"

#define SLOW(ms) "first [[mock:{\"text\":\"first answer\",\"ttft_ms\":" #ms "}]]"

/* The last message of request i must be a user message with `text`. */
static void assert_last_user(const cJSON *reqs, int i, const char *text)
{
	char role[32], got[4096];
	request_last_message(reqs, i, role, sizeof(role), got, sizeof(got));
	cr_assert_str_eq(role, "user", "request %d ends with a %s message", i, role);
	cr_assert_str_eq(got, text, "request %d's last user message: %s", i, got);
}

Test(agent_queue, two_messages_to_one_session_are_serialised)
{
	harness_t h;
	harness_start_with(&h, QUEUE_CONFIG("{\"debounceMs\":20}"), "{}", NULL);
	char r1[80], r2[80];
	cr_assert_eq(submit_mode(&h, "s", SLOW(300), "followup", r1), PC_AGENT_STARTED);
	cr_assert_eq(submit_mode(&h, "s", "second", "followup", r2), PC_AGENT_QUEUED);
	pc_agent_wait_result_t w1 = wait_run(&h, r1, 20000);
	pc_agent_wait_result_t w2 = wait_run(&h, r2, 20000);
	cr_assert_eq(w1.status, PC_AGENT_WAIT_OK);
	cr_assert_eq(w2.status, PC_AGENT_WAIT_OK);
	cr_assert_gt(w1.run.started_ms, 0);
	cr_assert_gt(w1.run.ended_ms, 0);
	cr_assert_gt(w2.run.started_ms, 0);
	/* the slow answer took its 300 ms; the second run only began after */
	cr_assert_geq(w1.run.ended_ms - w1.run.started_ms, 250);
	cr_assert_geq(w2.run.started_ms, w1.run.ended_ms, "second started at %lld, first ended at %lld",
		      (long long)w2.run.started_ms, (long long)w1.run.ended_ms);
	cJSON *reqs = mock_requests(&h);
	cr_assert_eq(cJSON_GetArraySize(reqs), 2);
	assert_last_user(reqs, 1, "second");
	cJSON_Delete(reqs);
	harness_stop_no_leaks(&h);
}

Test(agent_queue, followup_runs_after_the_active_run_with_its_answer_in_context)
{
	harness_t h;
	harness_start_with(&h, QUEUE_CONFIG("{\"mode\":\"followup\",\"debounceMs\":20}"), "{}", NULL);
	char r1[80], r2[80];
	cr_assert_eq(submit(&h, "s", SLOW(300), r1), PC_AGENT_STARTED);
	cr_assert_eq(submit(&h, "s", "and then?", r2), PC_AGENT_QUEUED);
	pc_agent_wait_result_t w2 = wait_run(&h, r2, 20000);
	pc_agent_wait_result_t w1 = wait_run(&h, r1, 20000);
	cr_assert_eq(w1.status, PC_AGENT_WAIT_OK);
	cr_assert_eq(w2.status, PC_AGENT_WAIT_OK);
	cr_assert_geq(w2.run.started_ms, w1.run.ended_ms);
	cJSON *d = finish_of(&h, r2, 1000);
	cr_assert_str_eq(payload_text(d), "and then?");
	cJSON_Delete(d);
	cJSON *reqs = mock_requests(&h);
	cr_assert_eq(cJSON_GetArraySize(reqs), 2);
	assert_last_user(reqs, 1, "and then?");
	/* the followup's context holds the first turn and its answer */
	char *body = request_text(reqs, 1);
	cr_assert_not_null(strstr(body, "first answer"), "second request: %s", body);
	cJSON_free(body);
	cr_assert_str_neq(request_session(reqs, 0), request_session(reqs, 1));
	cJSON_Delete(reqs);
	char roles[256];
	cr_assert_eq(history_roles(&h, "s", roles, sizeof(roles)), 4);
	cr_assert_str_eq(roles, "user,assistant,user,assistant");
	harness_stop_no_leaks(&h);
}

Test(agent_queue, collect_turns_queued_messages_into_one_run)
{
	harness_t h;
	harness_start_with(&h, QUEUE_CONFIG("{\"mode\":\"collect\",\"debounceMs\":50}"), "{}", NULL);
	char r1[80], r[3][80];
	const char *msgs[3] = {"alpha one", "bravo two", "charlie three"};
	cr_assert_eq(submit(&h, "s", SLOW(600), r1), PC_AGENT_STARTED);
	for (int i = 0; i < 3; i++)
		cr_assert_eq(submit(&h, "s", msgs[i], r[i]), PC_AGENT_QUEUED, "message %d", i);
	cr_assert_eq(wait_run(&h, r1, 20000).status, PC_AGENT_WAIT_OK);
	for (int i = 0; i < 3; i++)
		cr_assert_eq(wait_run(&h, r[i], 20000).status, PC_AGENT_WAIT_OK, "run %d", i);
	/* one run for the three: the mock saw two requests in all */
	cJSON *reqs = mock_requests(&h);
	cr_assert_eq(cJSON_GetArraySize(reqs), 2);
	char role[32], text[4096];
	request_last_message(reqs, 1, role, sizeof(role), text, sizeof(text));
	cr_assert_str_eq(role, "user");
	cr_assert_eq(strncmp(text, PC_QUEUE_COLLECT_TITLE, strlen(PC_QUEUE_COLLECT_TITLE)), 0, "prompt: %s", text);
	const char *a = strstr(text, "Queued #1\nalpha one");
	const char *b = strstr(text, "Queued #2\nbravo two");
	const char *c = strstr(text, "Queued #3\ncharlie three");
	cr_assert(a && b && c && a < b && b < c, "prompt: %s", text);
	cJSON_Delete(reqs);
	/* the batch ran as the last message's run: the echo is its answer */
	cJSON *d = finish_of(&h, r[2], 1000);
	cr_assert_str_eq(jstr(d, "phase"), "end");
	cr_assert_eq(strncmp(payload_text(d), PC_QUEUE_COLLECT_TITLE, strlen(PC_QUEUE_COLLECT_TITLE)), 0,
		     "payload: %s", payload_text(d));
	cJSON_Delete(d);
	harness_stop_no_leaks(&h);
}

/* A slow story under way (its answer streamed as `scenario` says) and
 * `steer` steered into it; r1 is the story's run, r2 the steer's. */
static pc_event_sub_t *steer_into_story(harness_t *h, const char *scenario, const char *steer, char r1[80],
					char r2[80])
{
	harness_start(h, scenario);
	pc_event_sub_t *sub = session_sub(h, "s");
	cr_assert_eq(submit_mode(h, "s", "tell me a story", "steer", r1), PC_AGENT_STARTED);
	cr_assert(await_event(sub, PC_EVENT_ASSISTANT, NULL, 10000, NULL, 0), "no delta from the slow answer");
	cr_assert_eq(submit_mode(h, "s", steer, "steer", r2), PC_AGENT_STEERED);
	return sub;
}

Test(agent_queue, steer_is_injected_at_the_next_model_boundary)
{
	harness_t h;
	char r1[80], r2[80];
	pc_event_sub_t *sub = steer_into_story(&h, "{\"steps\":[{\"text\":\"a b c d e f\",\"delay_ms\":200}]}",
					       "make it shorter", r1, r2);
	/* the steered message's own run id ends, well, once its text is in */
	cr_assert_eq(wait_run(&h, r2, 5000).status, PC_AGENT_WAIT_OK);
	cJSON *d = finish_of(&h, r1, 20000);
	cr_assert_str_eq(jstr(d, "phase"), "end");
	cr_assert_str_eq(payload_text(d), "make it shorter");
	cJSON_Delete(d);
	cJSON *reqs = mock_requests(&h);
	cr_assert_eq(cJSON_GetArraySize(reqs), 2);
	/* the same run asked again, with the steer as its last user turn */
	cr_assert_str_eq(request_session(reqs, 0), request_session(reqs, 1));
	assert_last_user(reqs, 1, "make it shorter");
	char *body = request_text(reqs, 1);
	cr_assert_not_null(strstr(body, "a b c d e f"), "the streamed answer is in the context: %s", body);
	cJSON_free(body);
	cJSON_Delete(reqs);
	char roles[256];
	history_roles(&h, "s", roles, sizeof(roles));
	cr_assert_str_eq(roles, "user,assistant,user,assistant");
	session_unsub(&h, "s", sub);
	harness_stop_no_leaks(&h);
}

/* A steered message whose text the run never took (the attempt streaming
 * when it arrived failed, and the run went on to its fallback model) is
 * neither lost nor reported done: it runs after that run, as its own run
 * id, which ends with its own answer, ahead of a followup sent after it. */
#define SHORTER "make it shorter [[mock:{\"text\":\"the short one\"}]]"
#define LATER "and then [[mock:{\"text\":\"later\"}]]"
Test(agent_queue, a_steer_the_run_never_took_runs_under_its_own_id)
{
	harness_t h;
	char r1[80], r2[80];
	pc_event_sub_t *sub = steer_into_story(&h, "{\"steps\":[{\"text\":\"a b c d e f\",\"delay_ms\":300,\"error_after\":4,"
					       "\"type\":\"invalid_request_error\",\"message\":\"bad request\"},"
					       "{\"text\":\"the fallback's story\"}]}",
					       SHORTER, r1, r2);
	char r3[80];
	cr_assert_eq(submit_mode(&h, "s", LATER, "followup", r3), PC_AGENT_QUEUED);
	cJSON *d = finish_of(&h, r1, 20000);
	cr_assert_str_eq(payload_text(d), "the fallback's story");
	cJSON_Delete(d);
	cr_assert_eq(wait_run(&h, r2, 20000).status, PC_AGENT_WAIT_OK);
	d = finish_of(&h, r2, 20000);
	cr_assert_str_eq(jstr(d, "phase"), "end");
	cr_assert_str_eq(payload_text(d), "the short one");
	cJSON_Delete(d);
	cr_assert_eq(wait_run(&h, r3, 20000).status, PC_AGENT_WAIT_OK);
	cJSON *reqs = mock_requests(&h);
	cr_assert_eq(cJSON_GetArraySize(reqs), 4);
	assert_last_user(reqs, 1, "tell me a story");
	/* it goes back in the order the messages came: before the followup
	 * sent after it, though that one was queued first */
	assert_last_user(reqs, 2, SHORTER);
	assert_last_user(reqs, 3, LATER);
	cJSON_Delete(reqs);
	char roles[256];
	history_roles(&h, "s", roles, sizeof(roles));
	cr_assert_str_eq(roles, "user,assistant,user,assistant,user,assistant");
	session_unsub(&h, "s", sub);
	harness_stop_no_leaks(&h);
}

/* A message steered into a run that is then aborted ends with it, as a
 * queued one would: aborted, and never run afterwards. */
Test(agent_queue, a_steer_into_an_aborted_run_ends_with_it)
{
	harness_t h;
	char r1[80], r2[80];
	pc_event_sub_t *sub = steer_into_story(&h, "{\"steps\":[{\"text\":\"a b c d e f g h\",\"delay_ms\":2000}]}",
					       SHORTER, r1, r2);
	cr_assert_eq(pc_agent_abort_session(h.agent, "s"), 0);
	cr_assert_eq(wait_run(&h, r1, 20000).run.status, PC_RUN_STATUS_ABORTED);
	cr_assert_eq(wait_run(&h, r2, 20000).run.status, PC_RUN_STATUS_ABORTED);
	/* a message requeued by mistake would run before the next one */
	char r3[80];
	cr_assert_eq(submit(&h, "s", "next [[mock:{\"text\":\"next\"}]]", r3), PC_AGENT_STARTED);
	cr_assert_eq(wait_run(&h, r3, 20000).status, PC_AGENT_WAIT_OK);
	cJSON *reqs = mock_requests(&h);
	cr_assert_eq(cJSON_GetArraySize(reqs), 2, "the steered message ran after the abort");
	cJSON_Delete(reqs);
	session_unsub(&h, "s", sub);
	harness_stop_no_leaks(&h);
}

/* Interrupts back to back: whether the second finds the first still
 * waiting for the aborted run to end (and replaces it) or already running
 * (and aborts it), every run but the last ends aborted and the last runs. */
Test(agent_queue, interrupts_back_to_back_leave_only_the_last)
{
	harness_t h;
	harness_start(&h, "{}");
	pc_event_sub_t *sub = session_sub(&h, "s");
	char r1[80], r2[80], r3[80];
	cr_assert_eq(submit(&h, "s", SLOW(3000), r1), PC_AGENT_STARTED);
	cr_assert(await_event(sub, PC_EVENT_LIFECYCLE, "\"phase\":\"start\"", 10000, NULL, 0));
	AWAIT(request_count(&h) == 1, 5000);
	cr_assert_eq(submit_mode(&h, "s", SLOW(3000), "interrupt", r2), PC_AGENT_STARTED);
	cr_assert_eq(submit_mode(&h, "s", "last word", "interrupt", r3), PC_AGENT_STARTED);
	pc_agent_wait_result_t w1 = wait_run(&h, r1, 20000), w2 = wait_run(&h, r2, 20000);
	cr_assert_eq(w1.run.status, PC_RUN_STATUS_ABORTED, "first run: %s", pc_run_status_name(w1.run.status));
	cr_assert_eq(w2.run.status, PC_RUN_STATUS_ABORTED, "second run: %s", pc_run_status_name(w2.run.status));
	pc_agent_wait_result_t w3 = wait_run(&h, r3, 20000);
	cr_assert_eq(w3.status, PC_AGENT_WAIT_OK);
	cJSON *d = finish_of(&h, r3, 1000);
	cr_assert_str_eq(payload_text(d), "last word");
	cJSON_Delete(d);
	/* an interrupt waiting behind a run that is being aborted can itself be
	 * aborted (or, started already, it is aborted as the active run) */
	char r4[80], r5[80];
	cr_assert_eq(submit(&h, "s", SLOW(3000), r4), PC_AGENT_STARTED);
	cr_assert_eq(submit_mode(&h, "s", SLOW(3000), "interrupt", r5), PC_AGENT_STARTED);
	cr_assert_eq(pc_agent_abort_session(h.agent, "s"), 0);
	cr_assert_eq(wait_run(&h, r4, 20000).run.status, PC_RUN_STATUS_ABORTED);
	cr_assert_eq(wait_run(&h, r5, 20000).run.status, PC_RUN_STATUS_ABORTED);
	session_unsub(&h, "s", sub);
	harness_stop_no_leaks(&h);
}

Test(agent_queue, interrupt_aborts_the_active_run_and_runs_the_new_one)
{
	harness_t h;
	harness_start(&h, "{}");
	pc_event_sub_t *sub = session_sub(&h, "s");
	char r1[80], r2[80];
	uint64_t t0 = now_ms();
	cr_assert_eq(submit(&h, "s", SLOW(3000), r1), PC_AGENT_STARTED);
	cr_assert(await_event(sub, PC_EVENT_LIFECYCLE, "\"phase\":\"start\"", 10000, NULL, 0));
	/* the model has the first request before the interrupt arrives */
	AWAIT(request_count(&h) == 1, 5000);
	cr_assert_eq(submit_mode(&h, "s", "never mind", "interrupt", r2), PC_AGENT_STARTED);
	pc_agent_wait_result_t w1 = wait_run(&h, r1, 20000);
	cr_assert_eq(w1.status, PC_AGENT_WAIT_ERROR);
	cr_assert_eq(w1.run.status, PC_RUN_STATUS_ABORTED, "first run: %s", pc_run_status_name(w1.run.status));
	pc_agent_wait_result_t w2 = wait_run(&h, r2, 20000);
	cr_assert_eq(w2.status, PC_AGENT_WAIT_OK);
	cr_assert_geq(w2.run.started_ms, w1.run.ended_ms);
	cr_assert_lt(now_ms() - t0, 2500, "the interrupted answer was not waited for");
	cJSON *d = finish_of(&h, r2, 1000);
	cr_assert_str_eq(payload_text(d), "never mind");
	cJSON_Delete(d);
	d = finish_of(&h, r1, 1000);
	cr_assert_str_eq(jstr(d, "errorKind"), "aborted");
	cJSON_Delete(d);
	cJSON *reqs = mock_requests(&h);
	cr_assert_eq(cJSON_GetArraySize(reqs), 2);
	assert_last_user(reqs, 1, "never mind");
	cJSON_Delete(reqs);
	session_unsub(&h, "s", sub);
	harness_stop_no_leaks(&h);
}

#define CAP_SESSIONS 1000

Test(agent_queue, global_lane_caps_a_thousand_sessions_at_sixteen)
{
	harness_t h;
	harness_start(&h, "{\"default\":{\"text\":\"ok\",\"ttft_ms\":30}}");
	static char runs[CAP_SESSIONS][80];
	for (int i = 0; i < CAP_SESSIONS; i++) {
		char key[32];
		snprintf(key, sizeof(key), "cap-%d", i);
		/* the first sixteen answer slowly, so the lane fills however slow
		 * submitting is (a sanitizer build takes milliseconds a submit) */
		cr_assert_eq(submit(&h, key, i < 16 ? SLOW(1500) : "hi", runs[i]), PC_AGENT_STARTED);
		pc_agent_stats_t st;
		pc_agent_stats(h.agent, &st);
		cr_assert_leq(st.lane_active, 16);
	}
	int ok = 0;
	for (int i = 0; i < CAP_SESSIONS; i++) {
		pc_agent_wait_result_t w = wait_run(&h, runs[i], 50000);
		ok += w.status == PC_AGENT_WAIT_OK;
	}
	cr_assert_eq(ok, CAP_SESSIONS);
	pc_agent_stats_t st;
	pc_agent_stats(h.agent, &st);
	cr_assert_eq(st.lane_max, 16);
	cr_assert_leq(st.lane_peak, 16, "peak %u", st.lane_peak);
	cr_assert_eq(st.lane_peak, 16, "the lane never filled: peak %u", st.lane_peak);
	AWAIT((pc_agent_stats(h.agent, &st), st.lane_active == 0 && st.lane_queued == 0 &&
	       st.runs_finished == CAP_SESSIONS), 5000);
	/* one attempt each (the embedded mock keeps only its latest requests) */
	cr_assert_eq(st.attempts, CAP_SESSIONS, "%llu attempts", (unsigned long long)st.attempts);
	harness_stop_no_leaks(&h);
}

Test(agent_queue, queue_cap_with_drop_new_refuses_the_newest)
{
	harness_t h;
	harness_start_with(&h, QUEUE_CONFIG("{\"mode\":\"followup\",\"cap\":2,\"drop\":\"new\",\"debounceMs\":20}"),
			   "{}", NULL);
	char r1[80], r[3][80];
	cr_assert_eq(submit(&h, "s", SLOW(500), r1), PC_AGENT_STARTED);
	cr_assert_eq(submit(&h, "s", "m2", r[0]), PC_AGENT_QUEUED);
	cr_assert_eq(submit(&h, "s", "m3", r[1]), PC_AGENT_QUEUED);
	cr_assert_eq(submit(&h, "s", "m4", r[2]), PC_AGENT_DROPPED);
	cr_assert_eq(wait_run(&h, r[2], 5000).status, PC_AGENT_WAIT_ERROR);
	cr_assert_eq(wait_run(&h, r1, 20000).status, PC_AGENT_WAIT_OK);
	cr_assert_eq(wait_run(&h, r[0], 20000).status, PC_AGENT_WAIT_OK);
	cr_assert_eq(wait_run(&h, r[1], 20000).status, PC_AGENT_WAIT_OK);
	cJSON *reqs = mock_requests(&h);
	cr_assert_eq(cJSON_GetArraySize(reqs), 3);
	assert_last_user(reqs, 1, "m2");
	assert_last_user(reqs, 2, "m3");
	cJSON_Delete(reqs);
	harness_stop_no_leaks(&h);
}

Test(agent_queue, queue_cap_with_drop_old_drops_the_oldest)
{
	harness_t h;
	harness_start_with(&h, QUEUE_CONFIG("{\"mode\":\"followup\",\"cap\":2,\"drop\":\"old\",\"debounceMs\":20}"),
			   "{}", NULL);
	char r1[80], r[3][80];
	cr_assert_eq(submit(&h, "s", SLOW(500), r1), PC_AGENT_STARTED);
	for (int i = 0; i < 3; i++) {
		char m[8];
		snprintf(m, sizeof(m), "m%d", i + 2);
		cr_assert_eq(submit(&h, "s", m, r[i]), PC_AGENT_QUEUED);
	}
	/* m2 made room for m4 */
	pc_agent_wait_result_t w = wait_run(&h, r[0], 5000);
	cr_assert_eq(w.status, PC_AGENT_WAIT_ERROR);
	cr_assert_eq(w.run.started_ms, 0, "the dropped message never ran");
	cr_assert_eq(wait_run(&h, r1, 20000).status, PC_AGENT_WAIT_OK);
	cr_assert_eq(wait_run(&h, r[1], 20000).status, PC_AGENT_WAIT_OK);
	cr_assert_eq(wait_run(&h, r[2], 20000).status, PC_AGENT_WAIT_OK);
	cJSON *reqs = mock_requests(&h);
	cr_assert_eq(cJSON_GetArraySize(reqs), 3);
	assert_last_user(reqs, 1, "m3");
	assert_last_user(reqs, 2, "m4");
	cJSON_Delete(reqs);
	harness_stop_no_leaks(&h);
}

Test(agent_queue, queue_cap_with_summarize_reports_the_dropped_message)
{
	harness_t h;
	harness_start_with(&h,
			   QUEUE_CONFIG("{\"mode\":\"followup\",\"cap\":2,\"drop\":\"summarize\",\"debounceMs\":20}"),
			   "{}", NULL);
	char r1[80], r[3][80];
	const char *msgs[3] = {"please   water the\tplants", "m3", "m4"};
	cr_assert_eq(submit(&h, "s", SLOW(500), r1), PC_AGENT_STARTED);
	for (int i = 0; i < 3; i++)
		cr_assert_eq(submit(&h, "s", msgs[i], r[i]), PC_AGENT_QUEUED);
	cr_assert_eq(wait_run(&h, r[0], 5000).status, PC_AGENT_WAIT_ERROR);
	cr_assert_eq(wait_run(&h, r1, 20000).status, PC_AGENT_WAIT_OK);
	cr_assert_eq(wait_run(&h, r[1], 20000).status, PC_AGENT_WAIT_OK);
	cr_assert_eq(wait_run(&h, r[2], 20000).status, PC_AGENT_WAIT_OK);
	/* first, the overflow summary (§6.3 step 6), then the kept messages */
	cJSON *reqs = mock_requests(&h);
	cr_assert_eq(cJSON_GetArraySize(reqs), 4);
	char role[32], text[2048];
	request_last_message(reqs, 1, role, sizeof(role), text, sizeof(text));
	cr_assert_str_eq(role, "user");
	cr_assert_not_null(strstr(text, "[Queue overflow] Dropped 1 message due to cap."), "prompt: %s", text);
	cr_assert_not_null(strstr(text, "- please water the plants"), "prompt: %s", text);
	assert_last_user(reqs, 2, "m3");
	assert_last_user(reqs, 3, "m4");
	cJSON_Delete(reqs);
	harness_stop_no_leaks(&h);
}

/* (its own answer by marker: a new run would replay the scenario) */
#define HURRY "hurry up [[mock:{\"text\":\"hurried\"}]]"

Test(agent_queue, steer_while_compacting_becomes_a_followup)
{
	harness_t h;
	harness_start_with(&h,
			   "{\"providers\":{\"mock\":{\"api\":\"openai-completions\",\"embedded\":true}},"
			   "\"agents\":{\"defaults\":{\"model\":\"mock/m1\",\"sessionIdleSeconds\":1,"
			   "\"compaction\":{\"keepRecentTokens\":50}}},"
			   "\"messages\":{\"queue\":{\"mode\":\"steer\",\"debounceMs\":20}}}",
			   "{\"steps\":[{\"kind\":\"context_overflow\"},{\"text\":\"SUMMARY\",\"ttft_ms\":600},"
			   "{\"text\":\"after\"}]}",
			   NULL);
	seed_history(&h, "s", 30);
	pc_event_sub_t *sub = session_sub(&h, "s");
	char r1[80], r2[80];
	cr_assert_eq(submit(&h, "s", "big question", r1), PC_AGENT_STARTED);
	cr_assert(await_event(sub, PC_EVENT_COMPACTION, "\"phase\":\"start\"", 10000, NULL, 0));
	/* the summarising request is in flight (600 ms): the run is compacting */
	AWAIT(request_count(&h) == 2, 5000);
	/* §7.4: a compacting run refuses steering; the message waits its turn */
	cr_assert_eq(pc_agent_steer(h.agent, "s", HURRY), PC_ESTATE);
	cr_assert_eq(submit(&h, "s", HURRY, r2), PC_AGENT_QUEUED);
	pc_agent_wait_result_t w1 = wait_run(&h, r1, 20000);
	pc_agent_wait_result_t w2 = wait_run(&h, r2, 20000);
	cr_assert_eq(w1.status, PC_AGENT_WAIT_OK);
	cr_assert_eq(w2.status, PC_AGENT_WAIT_OK);
	cr_assert_geq(w2.run.started_ms, w1.run.ended_ms);
	cJSON *d = finish_of(&h, r2, 1000);
	cr_assert_str_eq(payload_text(d), "hurried");
	cJSON_Delete(d);
	/* the first run's retry did not carry the message */
	cJSON *reqs = mock_requests(&h);
	cr_assert_eq(cJSON_GetArraySize(reqs), 4);
	char *retry = request_text(reqs, 2);
	cr_assert_eq(strstr(retry, "hurry up"), NULL, "%s", retry);
	cJSON_free(retry);
	char role[32], text[512];
	request_last_message(reqs, 3, role, sizeof(role), text, sizeof(text));
	cr_assert_str_eq(role, "user");
	cr_assert_str_eq(text, HURRY);
	cJSON_Delete(reqs);
	session_unsub(&h, "s", sub);
	harness_stop_no_leaks(&h);
}

Test(agent_queue, heartbeat_while_busy_is_dropped)
{
	harness_t h;
	harness_start_with(&h, QUEUE_CONFIG("{\"mode\":\"followup\",\"debounceMs\":20}"), "{}", NULL);
	char r1[80];
	cr_assert_eq(submit(&h, "s", SLOW(400), r1), PC_AGENT_STARTED);
	pc_agent_params_t p = {.session_key = "s", .message = "heartbeat poll", .trigger = "heartbeat"};
	pc_agent_accepted_t acc;
	cr_assert_eq(pc_agent_submit(h.agent, &p, &acc), 0);
	cr_assert_eq(acc.disposition, PC_AGENT_DROPPED);
	cr_assert_eq(wait_run(&h, acc.run_id, 5000).status, PC_AGENT_WAIT_ERROR);
	cr_assert_eq(wait_run(&h, r1, 10000).status, PC_AGENT_WAIT_OK);
	sleep_ms(100);
	cr_assert_eq(request_count(&h), 1);
	harness_stop_no_leaks(&h);
}

/* The compaction "start" event is the caller's cue that steering is now
 * refused (§7.4): a steer sent on seeing it must get PC_ESTATE, never a
 * "success" whose text then runs as a separate turn. Several sessions, so
 * that an ordering race between the event and the session's view of the
 * run shows. */
#define STEER_ROUNDS 24

Test(agent_queue, steer_on_the_compaction_start_event_is_refused)
{
	harness_t h;
	harness_start_with(&h,
			   "{\"providers\":{\"mock\":{\"api\":\"openai-completions\",\"embedded\":true}},"
			   "\"agents\":{\"defaults\":{\"model\":\"mock/m1\",\"sessionIdleSeconds\":1,"
			   "\"compaction\":{\"keepRecentTokens\":50}}}}",
			   "{\"steps\":[{\"kind\":\"context_overflow\"},{\"text\":\"SUMMARY\",\"ttft_ms\":100},"
			   "{\"text\":\"after\"}]}",
			   NULL);
	int accepted = 0;
	for (int i = 0; i < STEER_ROUNDS; i++) {
		char key[16], run[80];
		snprintf(key, sizeof(key), "c%d", i);
		seed_history(&h, key, 30);
		pc_event_sub_t *sub = session_sub(&h, key);
		cr_assert_eq(submit(&h, key, "big question", run), PC_AGENT_STARTED);
		cr_assert(await_event(sub, PC_EVENT_COMPACTION, "\"phase\":\"start\"", 10000, NULL, 0));
		int rc = pc_agent_steer(h.agent, key, "hurry [[mock:{\"text\":\"x\"}]]");
		cr_assert(rc == 0 || rc == PC_ESTATE, "steer: %s", pc_strerror(rc));
		accepted += rc == 0;
		cr_assert_eq(wait_run(&h, run, 10000).status, PC_AGENT_WAIT_OK);
		session_unsub(&h, key, sub);
	}
	pc_agent_stats_t st;
	sleep_ms(200);
	pc_agent_stats(h.agent, &st);
	harness_stop_no_leaks(&h);
	cr_assert_eq(accepted, 0, "%d of %d steers were accepted by a compacting run (%llu runs started for %d messages)",
		     accepted, STEER_ROUNDS, (unsigned long long)st.runs_started, STEER_ROUNDS);
}

/* ---- a lane wider than the I/O layer's default connections ---------------- */

#define WIDE_LANE 100 /* past the 64 connections per host an I/O thread opens by default */

/* An OpenAI-compatible answer: "ok". */
#define OK_STREAM                                                                                  \
	"data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"ok\"}}]}\n\n" \
	"data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n"         \
	"data: [DONE]\n\n"

/* Each run the lane admits gets a connection of its own: `pincer` sizes
 * the I/O layer by maxConcurrent (pc_agent_io_config). With the default
 * 64 connections per host, the runs past 64 would wait for one, the
 * upstream would never see all of them at once, and none would end. */
Test(agent_queue, a_lane_wider_than_the_default_connections_has_every_call_in_flight_at_once)
{
	pc_runtime_t *urt = start_rt(1);
	pc_io_t *uio = NULL;
	cr_assert_eq(pc_io_new(urt, NULL, &uio), 0);
	/* The upstream answers only once WIDE_LANE calls are in at once. */
	gate_t up;
	uint16_t port = gate_start(&up, urt, uio, "POST", "/v1/chat/completions", WIDE_LANE,
				   "Content-Type: text/event-stream\r\n", OK_STREAM);
	char config[512];
	snprintf(config, sizeof(config),
		 "{\"providers\":{\"up\":{\"api\":\"openai-completions\","
		 "\"baseUrl\":\"http://127.0.0.1:%u/v1\",\"apiKey\":\"k\"}},"
		 "\"agents\":{\"defaults\":{\"model\":\"up/m\",\"maxConcurrent\":%d,"
		 "\"sessionIdleSeconds\":1}}}",
		 port, WIDE_LANE);

	harness_t h;
	harness_io_as_configured = true;
	harness_start_with(&h, config, NULL, NULL);
	harness_io_as_configured = false;
	static char runs[WIDE_LANE][80];
	for (int i = 0; i < WIDE_LANE; i++) {
		char key[32];
		snprintf(key, sizeof(key), "wide-%d", i);
		/* the first sixteen answer slowly, so the lane fills however slow
		 * submitting is (a sanitizer build takes milliseconds a submit) */
		cr_assert_eq(submit(&h, key, i < 16 ? SLOW(1500) : "hi", runs[i]), PC_AGENT_STARTED);
	}
	for (int i = 0; i < WIDE_LANE; i++) {
		cJSON *d = finish_of(&h, runs[i], 20000);
		cr_assert_str_eq(jstr(d, "status"), "ok", "run %d: %s", i, jstr(d, "status"));
		cr_assert_str_eq(payload_text(d), "ok");
		cJSON_Delete(d);
	}
	harness_stop_no_leaks(&h);

	gate_stop(&up, urt);
	pc_io_free(uio);
	pc_runtime_stop(urt);
	FREE_RUNTIME_CHECKED(urt);
	cr_assert_eq(up.nheld, WIDE_LANE);
}
