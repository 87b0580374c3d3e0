/*
 * The idle-timeout cost-runaway breaker (agents/run/idle_breaker.c, spec
 * §1.15), the post-compaction loop guard (agents/run/loop_guard.c, §1.16)
 * and the run's iteration budget (pc_run_budget, §1.4).
 */
#include <criterion/criterion.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "agents/run/idle_breaker.h"
#include "agents/run/loop_guard.h"
#include "agents/run/run_decide.h"
#include "agents/run/run_state.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#define ASSERT_NO_LEAKS() cr_assert_eq(__lsan_do_recoverable_leak_check(), 0, "LeakSanitizer found leaks")
#else
#define ASSERT_NO_LEAKS() ((void)0)
#endif

/* ---- breaker ---- */

Test(idle_breaker, step_table)
{
	static const struct {
		bool idle, progress;
		uint32_t before, after;
	} rows[] = {
		{true, false, 2, 3},  /* idle, nothing completed: +1 */
		{true, true, 2, 0},   /* idle after progress: healed */
		{false, true, 2, 0},  /* progress: healed */
		{false, false, 2, 2}, /* other errors neither poison nor heal */
	};
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		pc_idle_breaker_t b;
		pc_idle_breaker_init(&b, PC_IDLE_BREAKER_DEFAULT_CAP);
		b.consecutive = rows[i].before;
		pc_idle_breaker_input_t in = {rows[i].idle, rows[i].progress};
		bool tripped = pc_idle_breaker_step(&b, &in);
		cr_assert_eq(b.consecutive, rows[i].after, "row %zu", i);
		cr_assert_not(tripped, "row %zu", i);
	}
}

Test(idle_breaker, trips_at_cap_not_before)
{
	pc_idle_breaker_t b;
	pc_idle_breaker_init(&b, PC_IDLE_BREAKER_DEFAULT_CAP);
	pc_idle_breaker_input_t idle = {true, false};
	for (uint32_t i = 1; i < PC_IDLE_BREAKER_DEFAULT_CAP; i++)
		cr_assert_not(pc_idle_breaker_step(&b, &idle), "step %u", i);
	cr_assert(pc_idle_breaker_step(&b, &idle), "the fifth idle timeout trips");
	cr_assert(pc_idle_breaker_tripped(&b));
	/* output that completed heals it */
	pc_idle_breaker_input_t out = {true, true};
	cr_assert_not(pc_idle_breaker_step(&b, &out));
	cr_assert_eq(b.consecutive, 0u);
}

Test(idle_breaker, output_between_timeouts_never_trips)
{
	pc_idle_breaker_t b;
	pc_idle_breaker_init(&b, PC_IDLE_BREAKER_DEFAULT_CAP);
	pc_idle_breaker_input_t idle = {true, false};
	pc_idle_breaker_input_t progress = {false, true};
	for (int i = 0; i < 50; i++) {
		pc_idle_breaker_step(&b, &idle);
		pc_idle_breaker_step(&b, &idle);
		cr_assert_not(pc_idle_breaker_step(&b, &progress));
	}
}

Test(idle_breaker, disabled_and_null)
{
	pc_idle_breaker_t b;
	pc_idle_breaker_init(&b, 0);
	pc_idle_breaker_input_t idle = {true, false};
	for (int i = 0; i < 20; i++)
		cr_assert_not(pc_idle_breaker_step(&b, &idle), "cap 0 never trips");
	cr_assert_not(pc_idle_breaker_step(NULL, &idle));
	cr_assert_not(pc_idle_breaker_step(&b, NULL));
	cr_assert_not(pc_idle_breaker_tripped(NULL));
	pc_idle_breaker_init(NULL, 5);
}


/* A state from mkstate (or calloc and pc_run_state_init), with its trace. */
static void freestate(pc_run_state_t *s)
{
	pc_run_state_fini(s);
	free(s);
}
static pc_run_outcome_t idle_outcome(void)
{
	pc_run_outcome_t o;
	memset(&o, 0, sizeof(o));
	o.now_ms = 1700000000000ull;
	o.timed_out = true;
	o.idle_timed_out = true;
	o.context_tokens = 100000;
	o.prompt_tokens = 100;
	return o;
}

/* Through the run: idle timeouts rotate the profile each time, and the
 * breaker keeps counting across the rotations until it trips. */
Test(idle_breaker, survives_profile_rotation)
{
	pc_run_config_t cfg;
	pc_run_config_defaults(&cfg);
	cfg.profile_counts[0] = 8;
	pc_run_state_t *s = calloc(1, sizeof(*s));
	cr_assert_not_null(s);
	cr_assert_eq(pc_run_state_init(s, &cfg), 0);
	pc_run_outcome_t o = idle_outcome();
	pc_run_action_t a;
	for (uint32_t i = 1; i < PC_IDLE_BREAKER_DEFAULT_CAP; i++) {
		cr_assert_eq(pc_run_decide(s, &o, &a), 0);
		cr_assert_eq(a.retry, PC_RETRY_ROTATE_PROFILE, "timeout %u rotates", i);
		cr_assert_eq(s->cand.profile, i);
		cr_assert_eq(s->breaker.consecutive, i, "rotation keeps the count");
	}
	cr_assert_eq(pc_run_decide(s, &o, &a), 0);
	cr_assert_eq(a.next, PC_RUN_FINISH_ERROR);
	cr_assert_eq(a.error, PC_RUN_ERR_RETRY_LIMIT);
	cr_assert_eq(a.liveness, PC_LIVENESS_BLOCKED);
	cr_assert(strstr(a.detail, "cost-runaway breaker") != NULL);
	cr_assert(strstr(a.detail, "(cap=5)") != NULL);
	freestate(s);
}

Test(idle_breaker, no_trip_when_output_arrived)
{
	pc_run_config_t cfg;
	pc_run_config_defaults(&cfg);
	cfg.profile_counts[0] = 16;
	pc_run_state_t *s = calloc(1, sizeof(*s));
	cr_assert_not_null(s);
	cr_assert_eq(pc_run_state_init(s, &cfg), 0);
	pc_run_outcome_t o = idle_outcome();
	o.completed_progress = true; /* a tool completed before the model went silent */
	pc_run_action_t a;
	for (int i = 0; i < 10; i++) {
		cr_assert_eq(pc_run_decide(s, &o, &a), 0);
		cr_assert_neq(a.error, PC_RUN_ERR_RETRY_LIMIT, "attempt %d", i + 1);
	}
	cr_assert_eq(s->breaker.consecutive, 0u);
	freestate(s);
}

/* ---- loop guard ---- */

Test(loop_guard, identical_triple_aborts)
{
	pc_loop_guard_t g;
	pc_loop_guard_init(&g, true, 0);
	cr_assert_eq(g.window, PC_LOOP_GUARD_DEFAULT_WINDOW);
	pc_loop_guard_arm(&g);
	pc_loop_guard_verdict_t v;
	cr_assert_eq(pc_loop_guard_observe(&g, "exec", 1, 2, &v), 0);
	cr_assert_not(v.abort);
	cr_assert_eq(pc_loop_guard_observe(&g, "exec", 1, 2, &v), 0);
	cr_assert_not(v.abort);
	cr_assert_eq(pc_loop_guard_observe(&g, "exec", 1, 2, &v), 0);
	cr_assert(v.abort, "three identical outcomes within three attempts");
	cr_assert_eq(v.repeats, 3u);
	char msg[512];
	cr_assert_eq(pc_loop_guard_message(&v, "exec", msg, sizeof(msg)), 0);
	cr_assert_str_eq(msg, "CRITICAL: tool exec repeated 3 times with identical arguments and "
			      "identical results within 3 attempts after auto-compaction. The "
			      "compaction did not break the loop. Aborting to prevent runaway "
			      "resource use.");
	cr_assert_eq(pc_loop_guard_message(&v, "exec", msg, 10), PC_ELIMIT);
	cr_assert_eq(strlen(msg), 9u);
}

Test(loop_guard, differences_do_not_abort)
{
	static const struct {
		const char *tool;
		uint64_t args, result;
	} third[] = {{"read", 1, 2}, {"exec", 9, 2}, {"exec", 1, 9}};
	for (size_t i = 0; i < 3; i++) {
		pc_loop_guard_t g;
		pc_loop_guard_init(&g, true, 3);
		pc_loop_guard_arm(&g);
		pc_loop_guard_verdict_t v;
		pc_loop_guard_observe(&g, "exec", 1, 2, &v);
		pc_loop_guard_observe(&g, "exec", 1, 2, &v);
		cr_assert_eq(pc_loop_guard_observe(&g, third[i].tool, third[i].args, third[i].result, &v), 0);
		cr_assert_not(v.abort, "case %zu", i);
		cr_assert_not(pc_loop_guard_armed(&g), "the window is used up");
		/* disarmed: further identical outcomes are not watched */
		pc_loop_guard_observe(&g, "exec", 1, 2, &v);
		cr_assert_not(v.abort);
	}
}

Test(loop_guard, not_armed_disabled_rearmed)
{
	pc_loop_guard_t g;
	pc_loop_guard_verdict_t v;
	pc_loop_guard_init(&g, true, 2);
	for (int i = 0; i < 5; i++) {
		pc_loop_guard_observe(&g, "exec", 1, 2, &v);
		cr_assert_not(v.abort, "not armed: no-op");
	}
	pc_loop_guard_init(&g, false, 2);
	pc_loop_guard_arm(&g);
	cr_assert_not(pc_loop_guard_armed(&g));
	pc_loop_guard_observe(&g, "exec", 1, 2, &v);
	pc_loop_guard_observe(&g, "exec", 1, 2, &v);
	cr_assert_not(v.abort, "disabled");
	/* re-arming forgets the earlier history */
	pc_loop_guard_init(&g, true, 2);
	pc_loop_guard_arm(&g);
	pc_loop_guard_observe(&g, "exec", 1, 2, &v);
	pc_loop_guard_arm(&g);
	pc_loop_guard_observe(&g, "exec", 1, 2, &v);
	cr_assert_not(v.abort);
	pc_loop_guard_observe(&g, "exec", 1, 2, &v);
	cr_assert(v.abort);
	/* windows are clamped; bad arguments refused */
	pc_loop_guard_init(&g, true, 1000);
	cr_assert_eq(g.window, PC_LOOP_GUARD_MAX_WINDOW);
	cr_assert_eq(pc_loop_guard_observe(NULL, "x", 0, 0, &v), PC_EINVAL);
	cr_assert_eq(pc_loop_guard_observe(&g, NULL, 0, 0, &v), PC_EINVAL);
	cr_assert_eq(pc_loop_guard_observe(&g, "x", 0, 0, NULL), PC_EINVAL);
	pc_loop_guard_verdict_t no = {0};
	char buf[8];
	cr_assert_eq(pc_loop_guard_message(&no, "x", buf, sizeof(buf)), PC_EINVAL);
}

Test(loop_guard, long_window_fills_exactly)
{
	pc_loop_guard_t g;
	pc_loop_guard_init(&g, true, PC_LOOP_GUARD_MAX_WINDOW);
	pc_loop_guard_arm(&g);
	pc_loop_guard_verdict_t v;
	for (uint32_t i = 0; i < PC_LOOP_GUARD_MAX_WINDOW; i++) {
		cr_assert_eq(pc_loop_guard_observe(&g, "t", 7, 7, &v), 0);
		cr_assert_eq(v.abort, i + 1 == PC_LOOP_GUARD_MAX_WINDOW, "observation %u", i + 1);
	}
	pc_loop_guard_observe(&g, "t", 7, 7, &v);
	cr_assert_not(v.abort);
	/* armed again: the same history is reused */
	pc_loop_guard_arm(&g);
	cr_assert(pc_loop_guard_armed(&g));
	pc_loop_guard_fini(&g);
	cr_assert_not(pc_loop_guard_armed(&g));
	pc_loop_guard_fini(&g);
	pc_loop_guard_fini(NULL);
}

/* ---- budget ---- */

Test(run_budget, defaults)
{
	static const struct {
		size_t profiles;
		uint32_t want;
	} rows[] = {{0, 32}, {1, 32}, {2, 40}, {3, 48}, {5, 64}, {16, 152}, {17, 160}, {40, 160}, {1000, 160}};
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
		cr_assert_eq(pc_run_budget(rows[i].profiles, NULL), rows[i].want, "%zu profiles", rows[i].profiles);
}

Test(run_budget, overrides)
{
	pc_run_retries_config_t c = {0};
	cr_assert_eq(pc_run_budget(2, &c), 40u, "nothing set: defaults");
	c = (pc_run_retries_config_t){.has_base = true, .base = 100};
	cr_assert_eq(pc_run_budget(2, &c), 116u);
	c = (pc_run_retries_config_t){.has_per_profile = true, .per_profile = -5};
	cr_assert_eq(pc_run_budget(10, &c), 32u, "per_profile clamps to 0");
	c = (pc_run_retries_config_t){.has_min = true, .min = 50};
	cr_assert_eq(pc_run_budget(1, &c), 50u);
	c = (pc_run_retries_config_t){.has_max = true, .max = 10};
	cr_assert_eq(pc_run_budget(1, &c), 32u, "max below min becomes min");
	c = (pc_run_retries_config_t){.has_min = true, .min = -3, .has_max = true, .max = 5, .has_base = true, .base = 0, .has_per_profile = true, .per_profile = 0};
	cr_assert_eq(pc_run_budget(1, &c), 1u, "min and base clamp to 1");
	c = (pc_run_retries_config_t){.has_base = true, .base = INT64_MAX, .has_max = true, .max = INT64_MAX};
	cr_assert_eq(pc_run_budget(64, &c), (uint32_t)INT32_MAX, "huge values saturate");
}

Test(run_budget, state_uses_candidate_profiles)
{
	pc_run_config_t cfg;
	pc_run_config_defaults(&cfg);
	cfg.candidate_count = 2;
	cfg.profile_counts[0] = 5;
	cfg.profile_counts[1] = 0;
	pc_run_state_t *s = calloc(1, sizeof(*s));
	cr_assert_not_null(s);
	cr_assert_eq(pc_run_state_init(s, &cfg), 0);
	cr_assert_eq(s->cand.budget, 64u);
	cr_assert_eq(pc_run_enter_candidate(s, 1), 0);
	cr_assert_eq(s->cand.budget, 32u);
	cr_assert_eq(s->cand.profile_count, 1u, "no profiles: one env/config key");
	cr_assert_eq(pc_run_enter_candidate(s, 2), PC_EINVAL);
	freestate(s);
	ASSERT_NO_LEAKS();
}
