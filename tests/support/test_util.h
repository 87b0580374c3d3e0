/*
 * Helpers shared by the test programs (each tests/test_*.c is its own
 * executable, so these are static inline).
 */
#ifndef PC_TESTS_TEST_UTIL_H
#define PC_TESTS_TEST_UTIL_H

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "pincer.h"
#include "runtime/clock.h"

#define LOAD(x) __atomic_load_n(&(x), __ATOMIC_ACQUIRE)
#define STORE(x, v) __atomic_store_n(&(x), (v), __ATOMIC_RELEASE)
#define INC(x) __atomic_add_fetch(&(x), 1, __ATOMIC_ACQ_REL)

/* The monotonic clock in ms, unsigned as the tests' deadlines are. */
static inline uint64_t now_ms(void)
{
	return (uint64_t)pc__clock_mono_ms();
}

static inline void sleep_ms(unsigned ms)
{
	struct timespec ts = {ms / 1000u, (long)(ms % 1000u) * 1000000L};
	nanosleep(&ts, NULL);
}

/* Polls `cond` for up to `ms` and fails the test if it never holds. */
#define AWAIT(cond, ms)                                                                            \
	do {                                                                                       \
		uint64_t until_ = now_ms() + (ms);                                                 \
		while (!(cond) && now_ms() < until_)                                               \
			sleep_ms(1);                                                               \
		cr_assert((cond), "timed out waiting for: %s", #cond);                             \
	} while (0)

static inline pc_runtime_t *start_rt(uint32_t workers)
{
	pc_runtime_config_t cfg;
	pc_runtime_config_init(&cfg);
	cfg.workers = workers;
	pc_runtime_t *rt = NULL;
	cr_assert_eq(pc_runtime_new(&cfg, &rt), 0);
	cr_assert_eq(pc_runtime_start(rt), 0);
	return rt;
}

static inline pc_runtime_stats_t stats(pc_runtime_t *rt)
{
	pc_runtime_stats_t s;
	pc_runtime_stats(rt, &s, NULL, 0);
	return s;
}

static inline uint64_t ld(const uint64_t *p)
{
	return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

static inline void add(uint64_t *p, uint64_t d)
{
	__atomic_add_fetch(p, d, __ATOMIC_ACQ_REL);
}

/* Actors whose memory the runtime still holds (not yet reclaimed). */
static inline int live_count(pc_runtime_t *rt)
{
	return (int)stats(rt).actors_live;
}

static inline void quiesce(pc_runtime_t *rt)
{
	cr_assert_eq(pc_runtime_wait_quiescent(rt, 10000), 0, "runtime did not become quiescent");
}

/*
 * Leak checks inside tests. Criterion runs each test in a child process and
 * does not look at how that child exits, so a leak LeakSanitizer reports at
 * exit would pass unnoticed: tests ask LSan themselves, at points where
 * everything they still own is reachable. A no-op without ASan.
 */
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#define ASSERT_NO_LEAKS() cr_assert_eq(__lsan_do_recoverable_leak_check(), 0, "LeakSanitizer found leaks (above)")
#else
#define ASSERT_NO_LEAKS() ((void)0)
#endif

/* Open file descriptors of this process (sockets, epoll, eventfds...). */
#include <dirent.h>
static inline int open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;
	if (!d)
		return -1;
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

/* Frees the test's runtime, then checks that nothing leaked. */
#define FREE_RUNTIME_CHECKED(rt)                                                                   \
	do {                                                                                       \
		pc_runtime_free(rt);                                                               \
		ASSERT_NO_LEAKS();                                                                 \
	} while (0)

/*
 * Randomised tests: the seed comes from PINCER_TEST_SEED when set (to
 * replay a run) and is printed either way.
 */
static uint64_t top_seed;

static inline uint64_t test_seed(void)
{
	const char *s = getenv("PINCER_TEST_SEED");
	if (s && *s) {
		top_seed = strtoull(s, NULL, 0) | 1;
	} else {
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		top_seed = ((uint64_t)ts.tv_nsec * 0x9E3779B97F4A7C15ull ^ (uint64_t)ts.tv_sec) | 1;
	}
	fprintf(stderr, "PINCER_TEST_SEED=0x%" PRIx64 "\n", top_seed);
	return top_seed;
}

static inline uint64_t xs(uint64_t *s)
{
	uint64_t x = *s;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return *s = x;
}

static inline uint32_t rnd_below(uint64_t *s, uint32_t n)
{
	return (uint32_t)(xs(s) % n);
}

/* Failures seen on threads other than the test's own (handlers, helper
 * threads), where a Criterion assertion cannot be used; the test thread
 * reports them with assert_no_failures. */
static uint32_t failures;
static char first_failure[256];

#define CHECK(cond, ...)                                                                   \
	do {                                                                               \
		if (!(cond)) {                                                             \
			if (__atomic_fetch_add(&failures, 1, __ATOMIC_ACQ_REL) == 0)       \
				snprintf(first_failure, sizeof(first_failure), __VA_ARGS__); \
		}                                                                          \
	} while (0)

static inline void reset_failures(void)
{
	__atomic_store_n(&failures, 0, __ATOMIC_RELEASE);
	first_failure[0] = 0;
}

static inline void assert_no_failures(void)
{
	uint32_t f = __atomic_load_n(&failures, __ATOMIC_ACQUIRE);
	cr_assert_eq(f, 0, "%u failure(s) on helper threads, first: %s (PINCER_TEST_SEED=0x%" PRIx64 ")", f,
		     first_failure, top_seed);
}

#endif
