/*
 * Tool-call loop detection (spec §4.2): a rolling history of one run's tool
 * calls and their outcomes, and the detectors that read it before each
 * call to warn the model, or block the call, when the run is going round
 * in circles.
 *
 * A call's identity is its tool name and a SHA-256 of its arguments in a
 * stable form (pc_json_stable: keys sorted, no whitespace), so the same
 * arguments in another key order are the same call. An outcome is the
 * SHA-256 of the result text ("error:" + the hash for errors). Tools whose
 * text holds volatile data would defeat the no-progress detectors, so the
 * exec and process tools keep durations, pids and timestamps out of the
 * text they return; their text is hashed as is.
 *
 * Detectors, evaluated in this order before the call runs; the first hit
 * wins (thresholds are the config's; the defaults in brackets):
 *   0. unknown_tool_repeat: the newest PC_LOOP_UNKNOWN_TOOL_THRESHOLD
 *      outcomes of this tool name all said the tool does not exist
 *      (`Tool "x" not found`, `Unknown tool: x`) -> block;
 *   1. global_circuit_breaker: no-progress streak >= global [30] -> block;
 *   2. known_poll_no_progress: a poll call, streak >= critical [20] -> block;
 *   3. known_poll_no_progress: a poll call, streak >= warning [10] -> warn;
 *   4. ping_pong: alternating count >= critical with no-progress evidence
 *      -> block;
 *   5. ping_pong: alternating count >= warning -> warn;
 *   6. generic_repeat: not a poll call, the same call >= warning times in
 *      the window -> warn (never blocks).
 * The no-progress streak counts, newest first, the outcomes of this exact
 * call that are identical to its latest one. Poll calls are
 * "command_status", and "process" with action "poll" or "log". Ping-pong:
 * with A the newest call's identity and B the most recent other one, the
 * alternating tail A,B,A,... at the end of the history must be at least 2
 * long and the new call must be B; the count is the tail + 1. Its
 * no-progress evidence: every call of the tail has an outcome, and all of
 * A's are identical and all of B's are identical.
 *
 * A warning is logged (verdict.log) when floor(count / 10) passes the last
 * bucket logged for its key (generic:<call>, poll:<call>:<outcome>,
 * pingpong:<the two calls, sorted>), so a warning at 10 is logged again at
 * 20, not at 11..19; at most 256 keys are kept, the oldest dropped first.
 * A block is always logged. The call proceeds after a warning; a blocked
 * call is not recorded (it never runs), as in OpenClaw.
 *
 * Everything is a no-op while the config is disabled (the default).
 *
 * Threads: a history belongs to one run and is used by one thread at a
 * time (the run's actor); it has no lock. pc_json_stable and the config
 * functions: any thread.
 */
#ifndef PINCER_AGENTS_TOOLS_LOOP_DETECT_H
#define PINCER_AGENTS_TOOLS_LOOP_DETECT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "runtime/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The spec's defaults (TOOL_CALL_HISTORY_SIZE, WARNING_THRESHOLD, ...). */
#define PC_LOOP_HISTORY_SIZE 30u
#define PC_LOOP_WARNING_THRESHOLD 10u
#define PC_LOOP_CRITICAL_THRESHOLD 20u
#define PC_LOOP_GLOBAL_THRESHOLD 30u
#define PC_LOOP_WARNING_BUCKET_SIZE 10u
#define PC_LOOP_MAX_WARNING_KEYS 256u
#define PC_LOOP_UNKNOWN_TOOL_THRESHOLD 10u
/* A longer configured window is cut to this (each check scans the window). */
#define PC_LOOP_MAX_HISTORY 1024u
/* Arguments nested deeper than this cannot be identified (PC_EINVAL). */
#define PC_LOOP_MAX_JSON_DEPTH 1000u

/* tools.loopDetection. */
typedef struct pc_loop_config {
	bool enabled;
	uint32_t history_size;
	uint32_t warning_threshold;
	uint32_t critical_threshold;
	uint32_t global_threshold; /* globalCircuitBreakerThreshold */
	bool generic_repeat;       /* detectors.genericRepeat */
	bool known_poll_no_progress;
	bool ping_pong;
} pc_loop_config_t;

/* The defaults: disabled, 30 / 10 / 20 / 30, every detector on. */
void pc_loop_config_default(pc_loop_config_t *c);
/* Zero numbers take their default; history_size is cut to
 * PC_LOOP_MAX_HISTORY; critical becomes at least warning + 1 and global at
 * least critical + 1. NULL is ignored. */
void pc_loop_config_normalize(pc_loop_config_t *c);

/* One run's history. */
typedef struct pc_loop_history pc_loop_history_t;

/* A history with a normalized copy of `c` (NULL: the defaults, i.e.
 * disabled). The caller owns *out (pc_loop_history_free). */
int pc_loop_history_new(const pc_loop_config_t *c, pc_loop_history_t **out);
void pc_loop_history_free(pc_loop_history_t *h);
/* The calls in the window (for diagnostics and tests). */
size_t pc_loop_history_count(const pc_loop_history_t *h);

typedef enum pc_loop_action {
	PC_LOOP_NONE = 0,
	PC_LOOP_WARN,  /* tell the model (message), run the call */
	PC_LOOP_BLOCK, /* do not run the call: its result is the message, as an error */
} pc_loop_action_t;

typedef struct pc_loop_verdict {
	pc_loop_action_t action;
	const char *detector; /* "unknown_tool_repeat", "global_circuit_breaker", "known_poll_no_progress",
			       * "ping_pong", "generic_repeat"; NULL with PC_LOOP_NONE. Static. */
	uint32_t count;
	bool log;              /* log this verdict (a block, or a warning that reached a new bucket) */
	char paired_tool[128]; /* ping_pong: the tool it alternates with; else "" */
	char message[512];     /* "WARNING: ..." / "CRITICAL: ..." as OpenClaw words them; else "" */
} pc_loop_verdict_t;

/*
 * Before running a call: runs the detectors, then records the call unless
 * it is blocked. `args` NULL reads as {}; `tool_call_id` may be NULL.
 * PC_EINVAL for NULL h, tool or out, or arguments nested deeper than
 * PC_LOOP_MAX_JSON_DEPTH; PC_ENOMEM (nothing recorded) when memory runs out.
 */
int pc_loop_check(pc_loop_history_t *h, const char *tool, const cJSON *args, const char *tool_call_id,
		  pc_loop_verdict_t *out);

/*
 * After the call: attaches its outcome (the hash of result_text, NULL
 * read as "") to the newest recorded call with the same tool and
 * arguments that has none yet, and the same tool_call_id when one is
 * given; when there is no such call, appends a new entry. The window is
 * then trimmed to history_size. Same errors as pc_loop_check.
 */
int pc_loop_record_outcome(pc_loop_history_t *h, const char *tool, const cJSON *args, const char *tool_call_id,
			   const char *result_text, bool is_error);

/*
 * JSON text with object keys sorted (byte order, recursively; duplicate
 * keys keep their relative order) and no whitespace; numbers in their
 * shortest form that reads back the same (-0 as 0; NaN and infinities as
 * null). NULL is "null". NULL on allocation failure or nesting deeper
 * than PC_LOOP_MAX_JSON_DEPTH. The caller frees.
 */
char *pc_json_stable(const cJSON *v);

#ifdef __cplusplus
}
#endif
#endif
