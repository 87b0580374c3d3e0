/*
 * baseline: what this machine does without the runtime, so that the other
 * figures can be read as ratios on a noisy, shared machine.
 *
 * xchg_ns       one uncontended atomic exchange (one thread);
 * line_rtt_ns   one round trip of a cache line between two spinning threads
 *               (A writes, B sees it and writes back, A sees that): the
 *               floor for any cross-thread request/response;
 * malloc_free_ns one malloc(64) + free pair (one thread, glibc);
 * wake_p50_us, wake_p99_us  how late a thread sleeping until an absolute
 *               CLOCK_MONOTONIC deadline (0.5..1.5 ms ahead) wakes up: the
 *               operating system's floor under any timer's lateness.
 *
 * xchg and malloc+free are medians of 7 runs; the round trip is the median
 * (and the minimum) over batches of 256 round trips from 7 runs, so a batch
 * during which a thread was descheduled does not count. --n scales the
 * iterations (default 20,000,000 exchanges; the round trip uses n/100 per
 * run, each cut short after 0.25 s).
 * --workers is accepted and ignored.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "benchlib.h"

#define RUNS 7

#if defined(__x86_64__) || defined(__i386__)
#define cpu_relax() __builtin_ia32_pause()
#else
#define cpu_relax() ((void)0)
#endif

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static double median(double *v, int n)
{
	for (int i = 1; i < n; i++)
		for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
			double t = v[j];
			v[j] = v[j - 1];
			v[j - 1] = t;
		}
	return v[n / 2];
}

static uint64_t xchg_word;

static double xchg_run(uint64_t iters)
{
	double t0 = bench_now_s();
	for (uint64_t i = 0; i < iters; i++)
		__atomic_exchange_n(&xchg_word, i, __ATOMIC_SEQ_CST);
	return (bench_now_s() - t0) * 1e9 / (double)iters;
}

/* The line both threads spin on, alone on its cache line; `stop` ends a
 * run early (a descheduled partner on a busy machine can make one round
 * trip take a whole time slice). */
static struct {
	uint64_t v;
} __attribute__((aligned(64))) line;
static struct {
	uint32_t stop;
} __attribute__((aligned(64))) ctl;
static uint64_t rtt_iters;

#define RTT_RUN_MAX_S 0.25

static void *echo_main(void *arg)
{
	(void)arg;
	for (uint64_t i = 0; i < rtt_iters; i++) {
		uint64_t want = 2 * i + 1;
		while (__atomic_load_n(&line.v, __ATOMIC_ACQUIRE) != want) {
			if (__atomic_load_n(&ctl.stop, __ATOMIC_RELAXED))
				return NULL;
			cpu_relax();
		}
		__atomic_store_n(&line.v, want + 1, __ATOMIC_RELEASE);
	}
	return NULL;
}

/* Round trips are timed in batches of RTT_BATCH; a batch during which a
 * thread was descheduled is an outlier that the median over all batches
 * ignores. Returns the number of batches written to out[]. */
#define RTT_BATCH 256

static int rtt_run(uint64_t iters, double *out, int max_out)
{
	pthread_t t;
	rtt_iters = iters;
	__atomic_store_n(&line.v, 0, __ATOMIC_RELEASE);
	__atomic_store_n(&ctl.stop, 0, __ATOMIC_RELEASE);
	if (pthread_create(&t, NULL, echo_main, NULL) != 0)
		bench_fail("pthread_create failed");
	double deadline = bench_now_s() + RTT_RUN_MAX_S, tb = 0;
	int nb = 0;
	bool late = false;
	/* Round trip 0 waits for the thread to start: batches begin at 1. */
	for (uint64_t i = 0; i < iters && !late && nb < max_out; i++) {
		if (i % RTT_BATCH == 1) {
			double now = bench_now_s();
			if (i > 1)
				out[nb++] = (now - tb) * 1e9 / RTT_BATCH;
			if (now > deadline)
				break;
			tb = now;
		}
		__atomic_store_n(&line.v, 2 * i + 1, __ATOMIC_RELEASE);
		for (uint32_t spins = 1; __atomic_load_n(&line.v, __ATOMIC_ACQUIRE) != 2 * i + 2; spins++) {
			cpu_relax();
			if (spins % 4096 == 0 && bench_now_s() > deadline) {
				late = true;
				break;
			}
		}
	}
	__atomic_store_n(&ctl.stop, 1, __ATOMIC_RELAXED);
	pthread_join(t, NULL);
	return nb;
}

static double malloc_run(uint64_t iters)
{
	double t0 = bench_now_s();
	for (uint64_t i = 0; i < iters; i++) {
		void *p = malloc(64);
		__asm__ volatile("" : : "r"(p) : "memory"); /* keep the pair */
		free(p);
	}
	return (bench_now_s() - t0) * 1e9 / (double)iters;
}

#define WAKES 400

static void wake_run(double *p50_us, double *p99_us)
{
	double late[WAKES];
	uint64_t rng = 88172645463325252ull;
	for (int i = 0; i < WAKES; i++) {
		rng ^= rng << 13;
		rng ^= rng >> 7;
		rng ^= rng << 17;
		struct timespec now, at;
		clock_gettime(CLOCK_MONOTONIC, &now);
		uint64_t target = (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec + 500000u + rng % 1000000u;
		at.tv_sec = (time_t)(target / 1000000000u);
		at.tv_nsec = (long)(target % 1000000000u);
		while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &at, NULL) != 0)
			;
		clock_gettime(CLOCK_MONOTONIC, &now);
		late[i] = (double)((uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec - target) / 1e3;
	}
	qsort(late, WAKES, sizeof(late[0]), cmp_double);
	*p50_us = late[WAKES / 2];
	*p99_us = late[WAKES * 99 / 100];
}

int main(int argc, char **argv)
{
	bench_opts_t o;
	bench_parse(argc, argv, &o);
	uint64_t n = o.n ? o.n : 20000000;
	uint64_t rtt_n = n / 100 > 2 ? n / 100 : 2;
	double xs[RUNS], ms[RUNS];
	int max_batches = (int)(rtt_n / RTT_BATCH) + 1;
	double *rb = malloc(sizeof(double) * (size_t)max_batches * RUNS);
	if (!rb)
		bench_fail("out of memory");
	int nrb = 0;
	double t0 = bench_now_s();
	for (int r = 0; r < RUNS; r++) {
		xs[r] = xchg_run(n / RUNS);
		nrb += rtt_run(rtt_n, rb + nrb, max_batches);
		ms[r] = malloc_run(n / RUNS);
	}
	double wall = bench_now_s() - t0;
	qsort(rb, (size_t)nrb, sizeof(double), cmp_double);
	double rtt = nrb ? rb[nrb / 2] : 0, rtt_min = nrb ? rb[0] : 0;
	free(rb);
	double xchg = median(xs, RUNS), mf = median(ms, RUNS);
	double wake50, wake99;
	wake_run(&wake50, &wake99);
	wall = bench_now_s() - t0;
	char extra[256];
	snprintf(extra, sizeof(extra),
		 "\"xchg_ns\":%.2f,\"line_rtt_ns\":%.1f,\"line_rtt_min_ns\":%.1f,\"malloc_free_ns\":%.2f,"
		 "\"wake_p50_us\":%.1f,\"wake_p99_us\":%.1f",
		 xchg, rtt, rtt_min, mf, wake50, wake99);
	bench_report("baseline", 1, wall, (n / RUNS) * RUNS, extra);
	return 0;
}
