/*
 * The clock: the one place the project reads the time. Two clocks, kept
 * apart on purpose (and a thread's CPU time, below):
 *   - monotonic (CLOCK_MONOTONIC): for durations, deadlines and timeouts;
 *     it never jumps, so a wall-clock change cannot stretch or cut a wait;
 *   - wall (CLOCK_REALTIME): for timestamps people and clients read (ms
 *     since the epoch); it may jump, so never subtract two for a duration.
 * The runtime's, for every part above it (not installed: applications
 * have pc_runtime_now_ms). A module that lets a test fake its time (the
 * log's pc_log_clock_fn) takes these as its default.
 */
#ifndef PC_RUNTIME_CLOCK_H
#define PC_RUNTIME_CLOCK_H

#include <stdint.h>
#include <time.h>

/* Now on the monotonic clock, in ns since an arbitrary start. */
static inline uint64_t pc__clock_mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Now on the monotonic clock, in ms (signed, so "no deadline" can be < 0
 * and differences need no casts). */
static inline int64_t pc__clock_mono_ms(void)
{
	return (int64_t)(pc__clock_mono_ns() / 1000000u);
}

/* Now on the wall clock, in ms since the epoch; 0 ("unknown") if the
 * clock cannot be read, which on Linux it always can. */
static inline int64_t pc__clock_wall_ms(void)
{
	struct timespec ts;
	if (clock_gettime(CLOCK_REALTIME, &ts) != 0)
		return 0;
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The calling thread's CPU time (user and system), in ns; 0 if it cannot
 * be read: what a piece of work cost on whichever thread ran it. */
static inline uint64_t pc__clock_thread_cpu_ns(void)
{
	struct timespec ts;
	if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0)
		return 0;
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

#endif
