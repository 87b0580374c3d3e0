/*
 * Giving free heap memory back (runtime.h, trim_after_ms): the allocator
 * call, and the clock that says when a thread is due to make it.
 *
 * A thread that did work trims trim_after_ms after it first had nothing
 * to do. Light work that wakes it in between does not restart that wait:
 * a periodic tick (the session reaper's, a gateway's) every second or so
 * would otherwise keep whichever thread takes it from ever trimming, and
 * that thread's heap would keep whatever a burst left in it.
 *
 * What a burst leaves is worth a trim at once; what a trickle leaves (one
 * session's turn a second) is not: each trim costs a wake-up and ~100 us,
 * and at one turn a second every thread that took part would pay it for
 * every turn. So a thread that did less than PC__TRIM_BURST units of work
 * (actor turns, jobs, loop passes with events) since its last trim waits
 * PC__TRIM_LIGHT_FACTOR times as long.
 */
#ifndef PINCER_RUNTIME_TRIM_H
#define PINCER_RUNTIME_TRIM_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime.h"

#define PC__TRIM_BURST 1024u
#define PC__TRIM_LIGHT_FACTOR 32

typedef struct pc__trim_clock {
	uint64_t idle_ns; /* the first idle moment since work, when `idle` */
	uint64_t due_ns;  /* a put-off trim's next look (park.c); 0: none */
	uint64_t late_ns; /* a trim put off for the timers (park.c) goes ahead
			   * from here on; 0: not put off */
	uint32_t work;    /* units of work since the last trim (saturating) */
	bool idle;
} pc__trim_clock_t;

/* The thread did a unit of work. */
static inline void pc__trim_worked(pc__trim_clock_t *c)
{
	c->work += c->work < UINT32_MAX;
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
