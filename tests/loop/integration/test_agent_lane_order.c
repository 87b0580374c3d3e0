/*
 * The global lane admits runs in the order they were accepted (spec §6.1,
 * §6.2), whatever each session's store round trip costs, through the real
 * session / run / attempt actors and the embedded mock LLM. The store's
 * test hook answers one session's lease acquires late, as a slow store
 * round trip would; maxConcurrent is 1, so the order the mock is asked in
 * is the order the lane admitted the runs in.
 */
#include <criterion/criterion.h>

#include "agent_harness.h"

TestSuite(agent_lane_order, .timeout = 60);

#define ONE_AT_A_TIME_CONFIG                                                                       \
	"{\"providers\":{"                                                                          \
	"\"mock\":{\"api\":\"openai-completions\",\"embedded\":true,\"apiKey\":\"key-a\"}},"       \
	"\"agents\":{\"defaults\":{\"model\":\"mock/m1\",\"maxConcurrent\":1,"                      \
	"\"sessionIdleSeconds\":1}}}"

/* Starts the harness with session "A"'s store round trip `delay_ms` slow. */
static void start_slow_a(harness_t *h, uint32_t delay_ms)
{
	harness_lease_delay_key = "A";
	harness_lease_delay_ms = delay_ms;
	harness_start_with(h, ONE_AT_A_TIME_CONFIG, "{\"steps\":[]}", NULL);
	harness_lease_delay_key = NULL;
	harness_lease_delay_ms = 0;
}

static pc_lane_stats_t lane_stats(harness_t *h)
{
	pc_lane_stats_t st;
	pc_lane_stats(h->agent->lane, &st);
	return st;
}

/* The lane settles: nothing held, nothing queued. */
static void expect_lane_idle(harness_t *h)
{
	uint64_t until = now_ms() + 5000;
	pc_lane_stats_t st = lane_stats(h);
	while ((st.active || st.queued) && now_ms() < until) {
		sleep_ms(5);
		st = lane_stats(h);
	}
	cr_assert_eq(st.active, 0u, "a permit is still held");
	cr_assert_eq(st.queued, 0u, "a request is still queued");
	cr_assert_leq(st.peak_active, 1u);
}

/* A (slow store), then B and C (fast) are each accepted before the next
 * is submitted: the lane runs them A, B, C. */
Test(agent_lane_order, runs_are_admitted_in_acceptance_order_whatever_the_store_costs)
{
	harness_t h;
	start_slow_a(&h, 400);
	char a[80], b[80], c[80];
	submit(&h, "A", "from a", a);
	submit(&h, "B", "from b", b);
	submit(&h, "C", "from c", c);
	const char *runs[3] = {a, b, c};
	for (int i = 0; i < 3; i++) {
		cJSON *d = finish_of(&h, runs[i], 20000);
		cr_assert_str_eq(jstr(d, "phase"), "end", "%s: %s", runs[i], jstr(d, "error"));
		cJSON_Delete(d);
	}
	cJSON *reqs = mock_requests(&h);
	cr_assert_eq(cJSON_GetArraySize(reqs), 3);
	for (int i = 0; i < 3; i++)
		cr_assert_str_eq(request_session(reqs, i), runs[i], "request %d is of run %s, expected %s", i,
				 request_session(reqs, i), runs[i]);
	cJSON_Delete(reqs);
	expect_lane_idle(&h);
	cr_assert_eq(lane_stats(&h).granted, 3u);
	harness_stop(&h);
}

/* A run aborted while it holds its place in the lane, its store answer
 * still on the way, gives the place back once: the next run is admitted,
 * the late answer starts nothing, and the session runs again later. */
Test(agent_lane_order, a_run_aborted_while_its_store_answer_is_late_frees_its_place_once)
{
	harness_t h;
	start_slow_a(&h, 500);
	char a[80], b[80], a2[80];
	submit(&h, "A", "from a", a);
	submit(&h, "B", "from b", b);
	cr_assert_eq(pc_agent_abort_run(h.agent, a), 0);
	cJSON *d = finish_of(&h, a, 10000);
	cr_assert_str_eq(jstr(d, "status"), "aborted", "%s", jstr(d, "status"));
	cJSON_Delete(d);
	d = finish_of(&h, b, 10000);
	cr_assert_str_eq(jstr(d, "phase"), "end", "%s", jstr(d, "error"));
	cJSON_Delete(d);
	sleep_ms(700); /* A's late lease answer arrives */
	submit(&h, "A", "again", a2);
	d = finish_of(&h, a2, 10000);
	cr_assert_str_eq(jstr(d, "phase"), "end", "%s", jstr(d, "error"));
	cJSON_Delete(d);
	cJSON *reqs = mock_requests(&h);
	cr_assert_eq(cJSON_GetArraySize(reqs), 2, "the aborted run asked nothing");
	cr_assert_str_eq(request_session(reqs, 0), b);
	cr_assert_str_eq(request_session(reqs, 1), a2);
	cJSON_Delete(reqs);
	expect_lane_idle(&h);
	harness_stop(&h);
}

/* Another process holding a session's lease is a wait of unknown length,
 * not a round trip: the session's run gives its lane permit back meanwhile
 * (B runs), and asks again once the lease is its own (A runs after). */
Test(agent_lane_order, a_run_waiting_for_a_lease_another_process_holds_gives_its_permit_back)
{
	harness_t h;
	harness_start_with(&h, ONE_AT_A_TIME_CONFIG, "{\"steps\":[]}", NULL);
	/* an owner of another machine: never taken over as a dead process */
	static const char other[] = "4242.1@elsewhere#x";
	int64_t epoch = 0;
	char busy[256] = "";
	cr_assert_eq(pc_store_lease_acquire(h.store, "A", other, 30000, NULL, &epoch, busy), 0);
	char a[80], b[80];
	submit(&h, "A", "from a", a);
	submit(&h, "B", "from b", b);
	cJSON *d = finish_of(&h, b, 10000);
	cr_assert_str_eq(jstr(d, "phase"), "end", "B ran while A waited: %s", jstr(d, "error"));
	cJSON_Delete(d);
	pc_agent_wait_result_t w;
	cr_assert_eq(pc_agent_wait(h.agent, a, 200, &w), 0);
	cr_assert_eq(w.status, PC_AGENT_WAIT_TIMEOUT, "A waits for its lease");
	cr_assert_eq(pc_store_lease_release(h.store, "A", other, epoch), 0);
	d = finish_of(&h, a, 10000);
	cr_assert_str_eq(jstr(d, "phase"), "end", "%s", jstr(d, "error"));
	cJSON_Delete(d);
	cJSON *reqs = mock_requests(&h);
	cr_assert_eq(cJSON_GetArraySize(reqs), 2);
	cr_assert_str_eq(request_session(reqs, 0), b);
	cr_assert_str_eq(request_session(reqs, 1), a);
	cJSON_Delete(reqs);
	expect_lane_idle(&h);
	harness_stop(&h);
}
