/*
 * timers: 1,000,000 one-shot timers (--n) with random delays of 1..1000 ms
 * spread over 4 target actors; 90% of them are cancelled; the lateness of
 * the rest is measured.
 *
 * Arming and cancelling is done by the main thread (not a worker), in
 * rounds of 1000: arm 1000 timers, then cancel 900 of them (every timer
 * whose number is not a multiple of 10), so each cancel comes microseconds
 * after its arm, well before its deadline (>= 1 ms). A cancel that returns
 * false (the timer already fired) leaves the timer counted as not
 * cancelled: it must then be delivered.
 *
 * Lateness = delivery time (CLOCK_MONOTONIC, taken when the handler starts)
 * minus the intended deadline (CLOCK_MONOTONIC taken just before
 * pc_timer_after, plus the delay).
 *
 * Checked: delivered == armed - cancelled, no cancelled timer is handled,
 * no timer is handled twice, and none is early (`early` must be 0).
 * wall_s: from the first arm until the runtime is quiescent (the last
 * timer handled).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "benchlib.h"

#define TARGETS 4u
#define ROUND 1000u
#define MAX_DELAY_MS 1000u

enum { MSG_TIMER = 1 };

typedef struct fire {
	uint64_t intended_ns; /* arm time + delay */
	uint64_t idx;
} fire_t;

/* Indexed by timer number; each timer goes to one target, so each slot is
 * written by one actor at most. */
static int64_t *lateness_ns;
static uint8_t *handled_count;

typedef struct target {
	uint64_t delivered, early, duplicate;
} target_t;

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int target_receive(pc_ctx_t *ctx, void *state, pc_msg_t *m)
{
	(void)ctx;
	uint64_t now = now_ns();
	target_t *t = state;
	if (m->type != MSG_TIMER)
		return PC_EINVAL;
	const fire_t *f = pc_msg_cdata(m);
	int64_t late = (int64_t)(now - f->intended_ns);
	lateness_ns[f->idx] = late;
	if (handled_count[f->idx]++)
		t->duplicate++;
	t->delivered++;
	if (late < 0)
		t->early++;
	return 0;
}

static const pc_behavior_t target_beh = {"timer-target", target_receive, NULL};

static uint64_t xorshift(uint64_t *s)
{
	uint64_t x = *s;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return *s = x;
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	bench_opts_t o;
	bench_parse(argc, argv, &o);
	uint64_t n = o.n ? o.n : 1000000;
	pc_runtime_t *rt = bench_runtime(&o);
	lateness_ns = calloc(n, sizeof(*lateness_ns));
	handled_count = calloc(n, 1);
	uint8_t *cancelled = calloc(n, 1);
	pc_timer_t *ids = calloc(ROUND, sizeof(*ids));
	if (!lateness_ns || !handled_count || !cancelled || !ids)
		bench_fail("out of memory");
	/* The targets write these at random places: fault them in first. */
	bench_touch(lateness_ns, n * sizeof(*lateness_ns));
	bench_touch(handled_count, n);
	target_t targets[TARGETS];
	pc_actor_t *th[TARGETS];
	memset(targets, 0, sizeof(targets));
	int rc;
	for (uint32_t i = 0; i < TARGETS; i++)
		if ((rc = pc_spawn(rt, &target_beh, &targets[i], &th[i])))
			bench_fail("spawn: %s", pc_strerror(rc));

	uint64_t rng = 0x2545F4914F6CDD1Dull;
	uint64_t ncancelled = 0, cancel_missed = 0;
	double t0 = bench_now_s();
	for (uint64_t base = 0; base < n; base += ROUND) {
		uint64_t end = base + ROUND < n ? base + ROUND : n;
		for (uint64_t i = base; i < end; i++) {
			uint64_t r = xorshift(&rng);
			uint64_t delay = 1 + r % MAX_DELAY_MS;
			pc_actor_t *to = th[(r >> 32) % TARGETS];
			pc_msg_t *m = pc_msg_new(MSG_TIMER, sizeof(fire_t));
			if (!m)
				bench_fail("out of memory");
			fire_t *f = pc_msg_data(m);
			uint64_t t = now_ns();
			f->idx = i;
			f->intended_ns = t + delay * 1000000u;
			if ((rc = pc_timer_after(to, delay, m, &ids[i - base])))
				bench_fail("pc_timer_after: %s", pc_strerror(rc));
		}
		for (uint64_t i = base; i < end; i++) {
			if (i % 10 == 0)
				continue;
			if (pc_timer_cancel(rt, ids[i - base])) {
				cancelled[i] = 1;
				ncancelled++;
			} else {
				cancel_missed++;
			}
		}
	}
	double t_armed = bench_now_s();
	if ((rc = pc_runtime_wait_quiescent(rt, (int64_t)(BENCH_TIMEOUT_S * 1000))))
		bench_fail("wait_quiescent: %s", pc_strerror(rc));
	double wall = bench_now_s() - t0;
	double arm_cancel_s = t_armed - t0;
	pc_runtime_stats_t st;
	pc_runtime_stats(rt, &st, NULL, 0);
	uint32_t workers = pc_runtime_workers(rt);

	for (uint32_t i = 0; i < TARGETS; i++)
		pc_actor_release(th[i]);
	pc_runtime_stop(rt); /* joins the workers: their writes are visible */

	uint64_t delivered = 0, early = 0, dup = 0;
	for (uint32_t i = 0; i < TARGETS; i++) {
		delivered += targets[i].delivered;
		early += targets[i].early;
		dup += targets[i].duplicate;
	}
	uint64_t expect = n - ncancelled;
	int64_t *lat = malloc((delivered ? delivered : 1) * sizeof(*lat));
	if (!lat)
		bench_fail("out of memory");
	uint64_t k = 0, handled_cancelled = 0, lost = 0;
	for (uint64_t i = 0; i < n; i++) {
		if (handled_count[i] && cancelled[i])
			handled_cancelled++;
		if (!handled_count[i] && !cancelled[i])
			lost++;
		if (handled_count[i] && k < delivered)
			lat[k++] = lateness_ns[i];
	}
	qsort(lat, k, sizeof(*lat), cmp_i64);
	double p50 = k ? (double)lat[k / 2] / 1e6 : 0, p99 = k ? (double)lat[(k * 99) / 100] / 1e6 : 0;
	double lmax = k ? (double)lat[k - 1] / 1e6 : 0;

	char extra[384];
	snprintf(extra, sizeof(extra),
		 "\"lateness_p50_ms\":%.3f,\"lateness_p99_ms\":%.3f,\"lateness_max_ms\":%.3f,\"delivered\":%llu,"
		 "\"early\":%llu,\"cancelled\":%llu,\"cancel_missed\":%llu,\"arm_cancel_s\":%.6f,"
		 "\"ns_per_arm_cancel\":%.1f,\"timers_fired\":%llu",
		 p50, p99, lmax, (unsigned long long)delivered, (unsigned long long)early,
		 (unsigned long long)ncancelled, (unsigned long long)cancel_missed, arm_cancel_s,
		 arm_cancel_s * 1e9 / (double)(n + ncancelled + cancel_missed), (unsigned long long)st.timers_fired);
	bench_report("timers", workers, wall, n, extra);

	int bad = 0;
	if (delivered != expect) {
		fprintf(stderr, "bench_timers: delivered %llu, expected %llu (armed %llu - cancelled %llu)\n",
			(unsigned long long)delivered, (unsigned long long)expect, (unsigned long long)n,
			(unsigned long long)ncancelled);
		bad = 1;
	}
	if (early) {
		fprintf(stderr, "bench_timers: %llu timers delivered before their deadline\n", (unsigned long long)early);
		bad = 1;
	}
	if (dup || handled_cancelled || lost) {
		fprintf(stderr, "bench_timers: %llu handled twice, %llu handled after a successful cancel, %llu lost\n",
			(unsigned long long)dup, (unsigned long long)handled_cancelled, (unsigned long long)lost);
		bad = 1;
	}
	pc_runtime_free(rt);
	free(lat);
	free(ids);
	free(cancelled);
	free(handled_count);
	free(lateness_ns);
	return bad;
}
