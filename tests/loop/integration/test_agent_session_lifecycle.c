/*
 * The session's lifecycle (agents/session/session_lifecycle.h): its
 * transition table, the queue policy's view as a projection of its state,
 * and PINCER_TRACE=session's lines from live sessions: one that runs a
 * turn and retires, one whose run is aborted while it waits for the lane,
 * and many going idle at once.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdlib.h>

#include "agent_harness.h"
#include "agents/session/session_lifecycle.h"
#include "trace_capture.h"

TestSuite(session_lifecycle, .timeout = 60);

Test(session_lifecycle, every_state_has_a_name)
{
	for (int s = 0; s < PC_SESS_LC_COUNT; s++)
		cr_assert_str_neq(pc_sess_lc_name((pc_sess_lc_t)s), "unknown", "state %d", s);
	cr_assert_str_eq(pc_sess_lc_name(PC_SESS_LC_COUNT), "unknown");
	cr_assert_str_eq(pc_sess_lc_name(PC_SESS_LC_LEASE), "lease");
	cr_assert_eq(pc_trace_parse("session"), (unsigned)PC_TRACE_SESSION);
}

Test(session_lifecycle, the_table_allows_a_run_through_and_refuses_the_rest)
{
	static const struct {
		pc_sess_lc_t from, to;
		bool legal;
	} cases[] = {
		{PC_SESS_LC_NEW, PC_SESS_LC_IDLE, true},
		{PC_SESS_LC_NEW, PC_SESS_LC_LANE, false}, /* its first message makes it idle first */
		{PC_SESS_LC_IDLE, PC_SESS_LC_LANE, true},
		{PC_SESS_LC_IDLE, PC_SESS_LC_RUNNING, false}, /* never without the lane's permit */
		{PC_SESS_LC_LANE, PC_SESS_LC_RUNNING, true},
		{PC_SESS_LC_LANE, PC_SESS_LC_LEASE, true},
		{PC_SESS_LC_LEASE, PC_SESS_LC_LANE, true}, /* the lease is held elsewhere */
		{PC_SESS_LC_LEASE, PC_SESS_LC_RUNNING, true},
		{PC_SESS_LC_RUNNING, PC_SESS_LC_IDLE, true},
		{PC_SESS_LC_RUNNING, PC_SESS_LC_LANE, false},
		{PC_SESS_LC_RUNNING, PC_SESS_LC_RETIRING, false}, /* only an idle session retires */
		{PC_SESS_LC_IDLE, PC_SESS_LC_RETIRING, true},
		{PC_SESS_LC_RETIRING, PC_SESS_LC_IDLE, false},
		{PC_SESS_LC_RETIRING, PC_SESS_LC_STOPPED, true},
		{PC_SESS_LC_RUNNING, PC_SESS_LC_STOPPED, true}, /* shutdown */
		{PC_SESS_LC_STOPPED, PC_SESS_LC_STOPPED, false},
		{PC_SESS_LC_IDLE, PC_SESS_LC_IDLE, false},
		{PC_SESS_LC_COUNT, PC_SESS_LC_IDLE, false},
		{PC_SESS_LC_IDLE, PC_SESS_LC_COUNT, false},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		cr_assert_eq(pc_sess_lc_legal(cases[i].from, cases[i].to), cases[i].legal, "%s -> %s",
			     pc_sess_lc_name(cases[i].from), pc_sess_lc_name(cases[i].to));
	for (int f = 0; f < PC_SESS_LC_COUNT; f++)
		cr_assert_eq(pc_sess_lc_legal((pc_sess_lc_t)f, PC_SESS_LC_STOPPED), f != PC_SESS_LC_STOPPED, "%s",
			     pc_sess_lc_name((pc_sess_lc_t)f));
}

Test(session_lifecycle, the_queue_sees_the_active_run_as_a_projection)
{
	for (int s = 0; s < PC_SESS_LC_COUNT; s++) {
		pc_sess_lc_t st = (pc_sess_lc_t)s;
		pc_run_phase_t v = pc_sess_lc_queue_phase(st, PC_RUN_COMPACTING, false);
		if (st == PC_SESS_LC_RUNNING)
			cr_assert_eq(v, PC_RUN_COMPACTING);
		else if (pc_sess_lc_active(st))
			cr_assert_eq(v, PC_RUN_STARTING, "%s", pc_sess_lc_name(st));
		else
			cr_assert_eq(v, PC_RUN_IDLE, "%s", pc_sess_lc_name(st));
	}
	/* an interrupting message waits for the aborted run to end */
	cr_assert_eq(pc_sess_lc_queue_phase(PC_SESS_LC_IDLE, PC_RUN_STREAMING, true), PC_RUN_ENDING);
	cr_assert_eq(pc_sess_lc_queue_phase(PC_SESS_LC_RUNNING, PC_RUN_STREAMING, true), PC_RUN_STREAMING);
}

/* The session's way through one turn up to its lane permit: the lease may
 * come before the permit or after it. */
static void assert_started(const char *got, const char *rest, const char *log)
{
	char direct[1024], via_lease[1024];
	snprintf(direct, sizeof(direct),
		 "new -> idle (first message); idle -> lane (next message); lane -> running (run started)%s", rest);
	snprintf(via_lease, sizeof(via_lease),
		 "new -> idle (first message); idle -> lane (next message); lane -> lease (granted); "
		 "lease -> running (run started)%s",
		 rest);
	cr_assert(!strcmp(got, direct) || !strcmp(got, via_lease), "got: %s\nlog:\n%s", got, log);
}

/* One turn, then idle long enough to retire. */
Test(session_lifecycle, a_traced_session_runs_a_turn_and_retires)
{
	trace_capture_t c;
	trace_capture_begin(&c, "session");
	harness_t h;
	harness_start(&h, "{\"steps\":[{\"text\":\"hello\"}]}");
	trace_capture_started(&c);
	char run[80];
	cr_assert_eq(submit(&h, "s", "hi", run), PC_AGENT_STARTED);
	cJSON *d = finish_of(&h, run, 30000);
	cr_assert_str_eq(jstr(d, "status"), "ok");
	cJSON_Delete(d);
	/* sessionIdleSeconds is 1: the reaper retires it */
	pc_agent_stats_t st;
	AWAIT((pc_agent_stats(h.agent, &st), st.sessions_live == 0), 10000);
	/* then, its kept transcript dropped (2 s after the run), nothing is
	 * due: the idle agent's reaper arms no tick, and nothing fires */
	sleep_ms(1500);
	pc_runtime_stats_t before, after;
	pc_runtime_stats(h.rt, &before, NULL, 0);
	sleep_ms(1500);
	pc_runtime_stats(h.rt, &after, NULL, 0);
	cr_assert_eq(after.timers_fired, before.timers_fired, "%llu timers fired in an idle agent",
		     (unsigned long long)(after.timers_fired - before.timers_fired));
	harness_stop(&h);
	char *log = trace_capture_end(&c);
	char got[1024];
	trace_of(log, "session", "s ", got, sizeof(got));
	assert_started(got, "; running -> idle (run done); idle -> retiring (idle); retiring -> stopped (retired)", log);
	free(log);
}

#define ONE_LANE_CONFIG                                                                            \
	"{\"providers\":{\"mock\":{\"api\":\"openai-completions\",\"embedded\":true,\"apiKey\":\"k\"}}," \
	"\"agents\":{\"defaults\":{\"model\":\"mock/m1\",\"maxConcurrent\":1,\"sessionIdleSeconds\":60}}}"

/* A run aborted while it waits for the global lane never runs: its session
 * goes back to idle, and stops at shutdown. */
Test(session_lifecycle, a_run_aborted_in_the_lane_never_runs)
{
	trace_capture_t c;
	trace_capture_begin(&c, "session");
	harness_t h;
	harness_start_with(&h, ONE_LANE_CONFIG, "{}", NULL);
	trace_capture_started(&c);
	pc_event_sub_t *sub = session_sub(&h, "a");
	char ra[80], rb[80];
	cr_assert_eq(submit(&h, "a", "story [[mock:{\"text\":\"one two three four five six\",\"delay_ms\":400}]]", ra),
		     PC_AGENT_STARTED);
	cr_assert(await_event(sub, PC_EVENT_ASSISTANT, NULL, 10000, NULL, 0), "no delta");
	/* a holds the only permit: b waits for it */
	cr_assert_eq(submit(&h, "b", "me too", rb), PC_AGENT_STARTED);
	cr_assert_eq(pc_agent_abort_run(h.agent, rb), 0);
	cJSON *d = finish_of(&h, rb, 10000);
	cr_assert_str_eq(jstr(d, "status"), "aborted");
	cJSON_Delete(d);
	cr_assert_eq(pc_agent_abort_run(h.agent, ra), 0);
	cJSON_Delete(finish_of(&h, ra, 10000));
	session_unsub(&h, "a", sub);
	harness_stop(&h);
	char *log = trace_capture_end(&c);
	char got[1024];
	trace_of(log, "session", "b ", got, sizeof(got));
	cr_assert_str_eq(got,
			 "new -> idle (first message); idle -> lane (next message); lane -> idle (aborted); "
			 "idle -> stopped (shutdown)",
			 "log:\n%s", log);
	trace_of(log, "session", "a ", got, sizeof(got));
	assert_started(got, "; running -> idle (run done); idle -> stopped (shutdown)", log);
	free(log);
}

/* Sessions going idle on many threads at once, over and over, each time
 * earlier than what the reaper's one tick waits for or later: every one
 * of them is retired, none is left waiting for a tick nobody armed. */
typedef struct idle_driver {
	harness_t *h;
	unsigned id, rounds;
	int failed;
} idle_driver_t;

static void *drive_sessions(void *arg)
{
	idle_driver_t *d = arg;
	unsigned seed = d->id * 7919u + 1;
	for (unsigned r = 0; r < d->rounds; r++) {
		char key[32], run[80];
		snprintf(key, sizeof(key), "idle-%u-%u", d->id, rand_r(&seed) % 6);
		if (submit(d->h, key, "hi", run) != PC_AGENT_STARTED || wait_run(d->h, run, 20000).status != PC_AGENT_WAIT_OK)
			d->failed++;
		if (rand_r(&seed) % 2)
			sleep_ms(rand_r(&seed) % 300);
	}
	return NULL;
}

Test(session_lifecycle, sessions_going_idle_at_once_all_retire)
{
	harness_t h;
	harness_start(&h, "{\"steps\":[{\"text\":\"ok\"}]}");
	enum { THREADS = 4 };
	pthread_t th[THREADS];
	idle_driver_t d[THREADS];
	for (unsigned i = 0; i < THREADS; i++) {
		d[i] = (idle_driver_t){.h = &h, .id = i, .rounds = 12};
		cr_assert_eq(pthread_create(&th[i], NULL, drive_sessions, &d[i]), 0);
	}
	for (unsigned i = 0; i < THREADS; i++) {
		pthread_join(th[i], NULL);
		cr_assert_eq(d[i].failed, 0, "driver %u: %d turns failed", i, d[i].failed);
	}
	/* sessionIdleSeconds is 1 */
	pc_agent_stats_t st;
	AWAIT((pc_agent_stats(h.agent, &st), st.sessions_live == 0), 15000);
	harness_stop(&h);
}
