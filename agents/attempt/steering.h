/*
 * Steering at boundaries (spec §3.4, §3.1): when a user message steered
 * into a running turn (queue mode steer, agents/session/queue_policy.h)
 * takes effect. Steering never interrupts a running tool; it skips the
 * calls that have not started yet, each of which still gets its start/end
 * events and the synthetic error result PC_STEER_SKIPPED_TEXT, in
 * assistant source order; then the steering text is appended as a user
 * message before the next model call, so the transcript stays append-only
 * and paired.
 *
 * Pure: the attempt actor asks at each boundary. No I/O, no globals.
 */
#ifndef PINCER_AGENTS_ATTEMPT_STEERING_H
#define PINCER_AGENTS_ATTEMPT_STEERING_H

#include <stdbool.h>
#include <stddef.h>

#include "runtime/error.h"
#include "agents/config/config.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The synthetic result of a call skipped by steering. */
#define PC_STEER_SKIPPED_TEXT "Skipped due to queued user message."

typedef enum pc_steer_drain {
	PC_STEER_DRAIN_ONE = 0, /* one steering message per boundary (the default) */
	PC_STEER_DRAIN_ALL,     /* the whole FIFO batch together */
} pc_steer_drain_t;

typedef enum pc_steer_boundary {
	PC_STEER_AT_CALL_START,   /* sequential: call `index` is about to start (after
				   * argument resolution, validation and pre-hooks) */
	PC_STEER_AT_BATCH_LAUNCH, /* parallel: the prepared batch is about to launch */
	PC_STEER_AT_TOOLS_DONE,   /* every call of the turn has its (real or skipped) result */
	PC_STEER_AT_TURN_END,     /* the assistant answered without tool calls */
} pc_steer_boundary_t;

typedef struct pc_steer_decision {
	size_t skip_from;   /* calls [skip_from, n_calls) are skipped; n_calls = none */
	size_t inject;      /* steering messages to append now, oldest first */
	bool continue_loop; /* TURN_END: steering arrived, so call the model again */
} pc_steer_decision_t;

/*
 * The decision at one boundary, with `pending` steering messages queued.
 * index is the call about to start (CALL_START only); n_calls the calls in
 * the assistant message. PC_EINVAL for NULL, a boundary that does not
 * exist in `mode` (CALL_START in parallel, BATCH_LAUNCH in sequential) or
 * index >= n_calls at CALL_START.
 */
int pc_steer_at(pc_tool_mode_t mode, pc_steer_drain_t drain, pc_steer_boundary_t at, size_t index,
		size_t n_calls, size_t pending, pc_steer_decision_t *out);

#ifdef __cplusplus
}
#endif
#endif
