/*
 * The idle-timeout cost-runaway breaker (spec §1.15, OpenClaw issue #76293):
 * a run whose model keeps going silent until the idle watchdog fires is
 * stopped after a few such attempts in a row, because each one is a paid
 * call that produced nothing (one heartbeat once made ~1000 calls a minute).
 *
 * The state lives in the run, not in an attempt or a profile, so rotating
 * the auth profile (or falling back to another model) does not reset it;
 * only completed model progress does.
 *
 * Pure: no I/O, no clock, no globals. Any thread.
 */
#ifndef PINCER_AGENTS_RUN_IDLE_BREAKER_H
#define PINCER_AGENTS_RUN_IDLE_BREAKER_H

#include <stdbool.h>
#include <stdint.h>

#include "agents/config/config.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pc_idle_breaker {
	uint32_t consecutive; /* idle timeouts in a row without completed progress */
	uint32_t cap;         /* trips at consecutive >= cap; 0 never trips */
} pc_idle_breaker_t;

/* What one attempt showed the breaker. `completed_progress` is the spec's
 * hasCompletedModelProgressForIdleBreaker: visible assistant text, a tool
 * call or client tool call, outbound delivery, or a completed item. Output
 * token counts are deliberately not an input: partial tool-call argument
 * deltas are billed but are not progress. */
typedef struct pc_idle_breaker_input {
	bool idle_timed_out;
	bool completed_progress;
} pc_idle_breaker_input_t;

/* A fresh breaker with the given cap (PC_IDLE_BREAKER_DEFAULT_CAP normally;
 * 0 disables it). NULL is ignored. */
void pc_idle_breaker_init(pc_idle_breaker_t *b, uint32_t cap);

/*
 * One step (stepIdleTimeoutBreaker):
 *   idle timeout, no progress  -> counter + 1
 *   any completed progress     -> counter = 0
 *   neither                    -> unchanged (other errors neither poison nor heal)
 * Returns whether the breaker is tripped after the step. NULL `b` or `in`
 * is false and changes nothing.
 */
bool pc_idle_breaker_step(pc_idle_breaker_t *b, const pc_idle_breaker_input_t *in);

/* cap > 0 && consecutive >= cap. NULL is false. */
bool pc_idle_breaker_tripped(const pc_idle_breaker_t *b);

#ifdef __cplusplus
}
#endif
#endif
