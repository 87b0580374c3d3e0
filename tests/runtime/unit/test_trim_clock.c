/*
 * When a thread is due to give its free heap back (runtime/trim.h): a
 * pure clock, walked here through every branch.
 */
#include <criterion/criterion.h>

#include "runtime/trim.h"

#define MS 1000000ull

static bool due(pc__trim_clock_t *c, int64_t after_ms, uint64_t now_ns, int64_t *wait_ms)
{
	return pc__trim_due(c, after_ms, now_ns, wait_ms);
}

/* As much work as a burst: what it leaves is given back after after_ms. */
static void burst(pc__trim_clock_t *c)
{
	for (unsigned i = 0; i < PC__TRIM_BURST; i++)
		pc__trim_worked(c);
}

Test(trim_clock, nothing_is_due_without_work)
{
	pc__trim_clock_t c = {0};
	int64_t w = 0;
	cr_assert_not(due(&c, 100, 5 * MS, &w));
	cr_assert_eq(w, -1, "no trim pending: wait for work");
	cr_assert_not(due(&c, 100, 500 * MS, &w));
	cr_assert_eq(w, -1);
}

Test(trim_clock, falls_due_after_the_first_idle_moment_and_never_early)
{
	pc__trim_clock_t c = {0};
	int64_t w = 0;
	burst(&c);
	cr_assert_not(due(&c, 100, 1000 * MS, &w));
	cr_assert_eq(w, 100);
	cr_assert_not(due(&c, 100, 1099 * MS + MS / 2, &w));
	cr_assert_eq(w, 1, "rounded up: a wait never ends before the trim is due");
	cr_assert(due(&c, 100, 1100 * MS, &w));
	cr_assert(due(&c, 100, 1700 * MS, &w), "still due until done");
}

Test(trim_clock, light_work_in_between_does_not_put_it_off)
{
	pc__trim_clock_t c = {0};
	int64_t w = 0;
	burst(&c);
	cr_assert_not(due(&c, 100, 0, &w));
	/* a tick every 30 ms: each one is work, then idle again */
	for (uint64_t t = 30; t < 100; t += 30) {
		pc__trim_worked(&c);
		cr_assert_not(due(&c, 100, t * MS, &w), "%llu ms", (unsigned long long)t);
		cr_assert_eq(w, (int64_t)(100 - t), "%llu ms: the deadline stays", (unsigned long long)t);
	}
	pc__trim_worked(&c);
	cr_assert(due(&c, 100, 100 * MS, &w));
}

Test(trim_clock, after_a_trim_only_new_work_arms_it_again)
{
	pc__trim_clock_t c = {0};
	int64_t w = 0;
	burst(&c);
	cr_assert_not(due(&c, 50, 10 * MS, &w));
	cr_assert(due(&c, 50, 60 * MS, &w));
	pc__trim_done(&c);
	cr_assert_not(due(&c, 50, 500 * MS, &w));
	cr_assert_eq(w, -1, "idle since the trim: sleep");
	burst(&c);
	cr_assert_not(due(&c, 50, 600 * MS, &w));
	cr_assert_eq(w, 50, "armed from the first idle moment after the new work");
	cr_assert(due(&c, 50, 650 * MS, &w));
}

Test(trim_clock, never_when_turned_off)
{
	pc__trim_clock_t c = {0};
	int64_t w = 0;
	pc__trim_worked(&c);
	cr_assert_not(due(&c, -1, 10 * MS, &w));
	cr_assert_eq(w, -1);
	cr_assert_not(due(&c, -1, 100000 * MS, &w));
}

Test(trim_clock, zero_means_at_the_first_idle_moment)
{
	pc__trim_clock_t c = {0};
	int64_t w = 0;
	pc__trim_worked(&c);
	cr_assert(due(&c, 0, 7 * MS, &w));
}

/* A trickle of work (one turn a second) is not worth a trim a second: it
 * waits PC__TRIM_LIGHT_FACTOR times as long, unless it adds up to a burst
 * meanwhile, which brings the trim back to after_ms from the same idle
 * moment. */
Test(trim_clock, light_work_waits_longer_until_it_adds_up)
{
	pc__trim_clock_t c = {0};
	int64_t w = 0;
	pc__trim_worked(&c);
	cr_assert_not(due(&c, 100, 1000 * MS, &w));
	cr_assert_eq(w, 100 * PC__TRIM_LIGHT_FACTOR);
	cr_assert_not(due(&c, 100, 1200 * MS, &w), "after_ms is not enough for light work");
	for (unsigned i = 1; i < PC__TRIM_BURST - 1; i++)
		pc__trim_worked(&c);
	cr_assert_not(due(&c, 100, 1300 * MS, &w), "one unit short of a burst");
	pc__trim_worked(&c);
	cr_assert(due(&c, 100, 1300 * MS, &w), "a burst by now: due since 1100 ms");
	pc__trim_done(&c);
	pc__trim_worked(&c);
	cr_assert_not(due(&c, 100, 5000 * MS, &w));
	cr_assert(due(&c, 100, (5000 + 100 * PC__TRIM_LIGHT_FACTOR) * MS, &w));
}
