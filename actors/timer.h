/*
 * Timers: a message delivered to an actor after a delay, once or every
 * period. Delays are in milliseconds and kept to the nanosecond: a timer is
 * never early and typically a fraction of a millisecond late.
 *
 * Stale timers are harmless: once pc_timer_cancel returns true, the
 * timer's message will never be handled, even if it had already fired and
 * was waiting in the mailbox. Any thread.
 */
#ifndef PINCER_ACTORS_TIMER_H
#define PINCER_ACTORS_TIMER_H

#include <stdbool.h>
#include <stdint.h>

#include "actor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A timer id; 0 is never a timer. Ids are not reused. */
typedef uint64_t pc_timer_t;

/* Delivers `msg` (ownership passes, also on failure) to `target` after
 * `delay_ms`. The timer holds a reference to `target` until it is
 * delivered or cancelled. PC_ESTOPPED once the runtime is stopping. */
int pc_timer_after(pc_actor_t *target, uint64_t delay_ms, pc_msg_t *msg, pc_timer_t *id);

/* Delivers a copy of `msg` (a template, owned by the timer from now on)
 * every `period_ms` (> 0) until cancelled. A tick that comes while the
 * previous copy is still unhandled is skipped, so a slow actor never
 * accumulates ticks. */
int pc_timer_every(pc_actor_t *target, uint64_t period_ms, pc_msg_t *msg, pc_timer_t *id);

/* Cancels a timer. True if this call stopped a delivery (for a periodic
 * timer: all further ones); false if the timer had already been handled,
 * cancelled, or never existed. */
bool pc_timer_cancel(pc_runtime_t *rt, pc_timer_t id);

#ifdef __cplusplus
}
#endif
#endif
