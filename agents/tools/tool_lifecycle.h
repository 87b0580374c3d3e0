/*
 * A tool invocation's lifecycle (tool.h: the invocation actor): one enum
 * of its states and the transitions allowed between them
 * (docs/architecture.md, "one state machine per lifecycle").
 *
 *   starting -> calling | job | task   the tool's kind: `call` inline, `call`
 *                                      on the blocking pool, `start`
 *   starting | calling | job | task -> done
 *                                      the one DONE is sent (not found, bad
 *                                      arguments, the result, a timeout, an
 *                                      abort, the stop handler)
 *   starting | calling | job | task -> lost
 *                                      decided, but the DONE could not be
 *                                      built: the stop handler sends it
 *   lost -> done
 *
 * Only the invocation actor changes its state, through its inv_set
 * (tool.c: checks pc_tool_lc_legal, counts and refuses what is not,
 * traces); scripts/check-lifecycles fails the build's tests when anything
 * else assigns it.
 *
 * Pure functions, callable from any thread.
 */
#ifndef PINCER_AGENTS_TOOLS_TOOL_LIFECYCLE_H
#define PINCER_AGENTS_TOOLS_TOOL_LIFECYCLE_H

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum pc_tool_lc {
	PC_TOOL_LC_STARTING = 0, /* spawned; START not handled */
	PC_TOOL_LC_CALLING,      /* the tool's `call` runs on the actor */
	PC_TOOL_LC_JOB,          /* its `call` runs on the blocking pool */
	PC_TOOL_LC_TASK,         /* a `start` tool: until pc_tool_task_complete */
	PC_TOOL_LC_LOST,         /* decided, its DONE not built (no memory) */
	PC_TOOL_LC_DONE,         /* the DONE is sent (terminal) */
	PC_TOOL_LC_COUNT,
} pc_tool_lc_t;

/* "starting", "calling", ..., "done"; "unknown" out of range. Static. */
const char *pc_tool_lc_name(pc_tool_lc_t s);

/* Whether the table allows `from` -> `to`. */
bool pc_tool_lc_legal(pc_tool_lc_t from, pc_tool_lc_t to);

#ifdef __cplusplus
}
#endif
#endif
