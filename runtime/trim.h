/*
 * Giving free heap memory back (runtime.h, trim_after_ms): the allocator
 * call, and the clock that says when a thread is due to make it.
 *
 * A thread that did work trims trim_after_ms after it first had nothing
 * to do. Light work that wakes it in between does not restart that wait:
 * a periodic tick (the session reaper's, a gateway's) every second or so
 * would otherwise keep whichever thread takes it from ever trimming, and
 * that thread's heap would keep whatever a burst left in it.
 */
#ifndef PINCER_RUNTIME_TRIM_H
#define PINCER_RUNTIME_TRIM_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime.h"

typedef struct pc__trim_clock {
	uint64_t due_ns;  /* when the trim falls due; 0: not armed */
	uint64_t late_ns; /* a trim put off for the timers (park.c) goes ahead
			   * from here on; 0: not put off */
	bool worked;      /* did work since the last trim */
} pc__trim_clock_t;

/* The thread did some work. */
static inline void pc__trim_worked(pc__trim_clock_t *c)
{
	c->worked = true;
}

/* At now_ns the thread has nothing to do. True: its trim is due, so trim
 * (pc_runtime_trim_heap) and call pc__trim_done. Else *wait_ms is how long
 * it may wait before one falls due (-1: none pending, wait for work). */
bool pc__trim_due(pc__trim_clock_t *c, int64_t after_ms, uint64_t now_ns, int64_t *wait_ms);

/* The thread trimmed: nothing is due until it works again. */
void pc__trim_done(pc__trim_clock_t *c);

/* mimalloc's calls, looked up at run time: the runtime does not link it,
 * a program that embeds it chooses its allocator (docs/allocator.md). */
typedef struct pc__mimalloc {
	void (*collect)(bool force); /* NULL: mimalloc is not the allocator */
	void (*option_set)(int option, long value);
	long decommit_delay; /* as configured; 0: nothing to lower for a trim */
} pc__mimalloc_t;

/* Finds the allocator's collect call (mimalloc's, when it is the
 * process's allocator) for pc_runtime_trim_heap. */
void pc__trim_init(pc_runtime_t *rt);

#endif
