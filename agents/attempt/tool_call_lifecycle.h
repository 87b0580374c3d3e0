/*
 * A tool call's lifecycle: one call of the model's batch, as the attempt
 * runs it (§3.1-§3.4, §4.1; attempt_tools.c). One enum of its states and
 * the transitions allowed between them (docs/architecture.md, "one state
 * machine per lifecycle").
 *
 *   waiting -> gate | running             before_tool_call hooks apply, or not
 *   waiting -> refused | skipped          not allowed, a loop block, its
 *                                         request not saved; steering
 *   waiting -> aborted                    the attempt aborted while the batch
 *                                         waited for its request to be durable
 *   gate -> running | refused | aborted   the hooks passed it, blocked it (or
 *                                         failed: closed), or the attempt aborted
 *   running -> persist | done | refused   tool_result_persist hooks apply, or
 *                                         not; the tool could not start
 *   persist -> done                       the (transformed) result
 *
 * Only the attempt changes a call's state, through its call_set
 * (attempt_tools.c: checks pc_tc_lc_legal, counts and refuses what is not,
 * traces); scripts/check-lifecycles fails the build's tests when anything
 * else assigns it.
 *
 * Pure functions, callable from any thread.
 */
#ifndef PINCER_AGENTS_ATTEMPT_TOOL_CALL_LIFECYCLE_H
#define PINCER_AGENTS_ATTEMPT_TOOL_CALL_LIFECYCLE_H

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum pc_tc_lc {
	PC_TC_LC_WAITING = 0, /* not started (a sequential batch's later calls) */
	PC_TC_LC_GATE,        /* before_tool_call hooks */
	PC_TC_LC_RUNNING,     /* the tool's actor */
	PC_TC_LC_PERSIST,     /* tool_result_persist hooks, the result held */
	/* terminal: the call has its result message */
	PC_TC_LC_DONE,        /* the tool's result (whatever its status) */
	PC_TC_LC_REFUSED,     /* ended before its tool ran: an error result */
	PC_TC_LC_SKIPPED,     /* skipped for steering (§3.4) */
	PC_TC_LC_ABORTED,     /* the attempt aborted before it ran (gated, or
			       * its batch waiting to be durable) */
	PC_TC_LC_COUNT,
} pc_tc_lc_t;

/* "waiting", "gate", ..., "aborted"; "unknown" out of range. Static. */
const char *pc_tc_lc_name(pc_tc_lc_t s);

/* Whether the table allows `from` -> `to`. */
bool pc_tc_lc_legal(pc_tc_lc_t from, pc_tc_lc_t to);

/* The call has its result. */
static inline bool pc_tc_lc_terminal(pc_tc_lc_t s) { return s >= PC_TC_LC_DONE && s < PC_TC_LC_COUNT; }

#ifdef __cplusplus
}
#endif
#endif
