/*
 * Helpers shared by the test programs (each tests/test_*.c is its own
 * executable, so these are static inline).
 */
#ifndef PC_TESTS_TEST_UTIL_H
#define PC_TESTS_TEST_UTIL_H

#include <stdint.h>
#include <time.h>

#include "pincer.h"

#define LOAD(x) __atomic_load_n(&(x), __ATOMIC_ACQUIRE)
#define STORE(x, v) __atomic_store_n(&(x), (v), __ATOMIC_RELEASE)
#define INC(x) __atomic_add_fetch(&(x), 1, __ATOMIC_ACQ_REL)

static inline uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
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

/* Frees the test's runtime, then checks that nothing leaked. */
#define FREE_RUNTIME_CHECKED(rt)                                                                   \
	do {                                                                                       \
		pc_runtime_free(rt);                                                               \
		ASSERT_NO_LEAKS();                                                                 \
	} while (0)

#endif
