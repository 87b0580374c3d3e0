/*
 * How big the context is and what to do when it is too big:
 *
 *   - the character / token estimates (§3.3 tool-result-char-estimator),
 *   - the live context guard run before every model call (§3.3): truncate
 *     oversized tool results in a copy, or say "overflow",
 *   - the session truncation rule for tool results (§3.3), used by overflow
 *     recovery and the preflight route,
 *   - the preflight overflow check and its route (§2.7),
 *   - the compaction trigger decision (§7.1 with §1.7 steps 6–7).
 *
 * Messages are cJSON objects in the transcript's shape: {"role", "content"}
 * where content is a string or an array of blocks {"type":"text","text"},
 * {"type":"image",...}, {"type":"thinking","thinking"},
 * {"type":"toolCall","name","arguments"}; tool results have role
 * "toolResult". Characters are UTF-8 bytes (see docs/agent-loop-policies.md).
 *
 * Pure: no I/O, no clock, no globals; inputs are never modified. Any thread.
 */
#ifndef PINCER_AGENTS_ATTEMPT_CONTEXT_GUARD_H
#define PINCER_AGENTS_ATTEMPT_CONTEXT_GUARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "runtime/error.h"
#include "../run/run_state.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- §3.3 estimates ---- */

#define PC_CTX_CHARS_PER_TOKEN 4             /* CHARS_PER_TOKEN_ESTIMATE */
#define PC_CTX_TOOL_RESULT_CHARS_PER_TOKEN 2 /* TOOL_RESULT_CHARS_PER_TOKEN_ESTIMATE */
#define PC_CTX_IMAGE_CHARS 8000              /* an image block counts as this many chars */

/* Estimated chars of one message in CHARS_PER_TOKEN units: text, thinking
 * and tool-call chars as they are, tool-result text doubled (tool output
 * tokenises at 2 chars/token), images PC_CTX_IMAGE_CHARS. 0 for NULL.
 * The count is remembered on the message object (its valuedouble, which
 * cJSON does not use for objects); whoever edits a counted message in
 * place calls pc_ctx_message_changed, which also forgets the message's
 * wire form (pc_request_message_changed). */
size_t pc_ctx_message_chars(const cJSON *msg);
void pc_ctx_message_changed(cJSON *msg);
/* ceil(chars / PC_CTX_CHARS_PER_TOKEN). */
uint64_t pc_ctx_chars_to_tokens(size_t chars);
/* The sum over an array of messages, in tokens. 0 for NULL / non-array. */
uint64_t pc_ctx_messages_tokens(const cJSON *messages);

/* ---- §3.3 live context guard ---- */

#define PC_CTX_PREEMPTIVE_OVERFLOW_RATIO 0.9 /* PREEMPTIVE_OVERFLOW_RATIO */
#define PC_CTX_SINGLE_TOOL_RESULT_SHARE 0.5  /* SINGLE_TOOL_RESULT_CONTEXT_SHARE */
#define PC_CTX_GUARD_MIN_CHARS ((size_t)1024) /* floor of both guard limits */
/* The guard cuts at a newline when one lies in the last 30 % of what it keeps. */
#define PC_CTX_GUARD_NEWLINE_SHARE 0.3
/* Appended to every truncated text (N = characters removed). */
#define PC_CTX_TRUNCATION_NOTICE_FMT "\n\n[... %zu more characters truncated]"
/* §3.2 item 4: the guard's overflow error. */
#define PC_CTX_PREEMPTIVE_OVERFLOW_MESSAGE                                                         \
	"Context overflow: estimated context size exceeds safe threshold during tool loop."

typedef struct pc_ctx_guard_limits {
	size_t max_context_chars;            /* max(1024, ctx × 4 × 0.9) */
	size_t max_single_tool_result_chars; /* max(1024, ctx × 2 × 0.5) */
} pc_ctx_guard_limits_t;

void pc_ctx_guard_limits(uint64_t ctx_tokens, pc_ctx_guard_limits_t *out);

typedef struct pc_ctx_guard_result {
	size_t total_chars;    /* the estimate after the truncations */
	size_t truncated;      /* tool results cut to the single-result cap */
	bool overflow;         /* total_chars > max_context_chars: fail with
				* PC_CTX_PREEMPTIVE_OVERFLOW_MESSAGE */
	pc_ctx_guard_limits_t limits;
} pc_ctx_guard_result_t;

/*
 * The transformContext guard. When any tool result is over the single-
 * result cap, *out_messages is a new array (owned by the caller,
 * cJSON_Delete) with those results truncated; otherwise it is NULL and the
 * input is to be used as it is. PC_EINVAL for NULL arguments or a
 * non-array; PC_ENOMEM.
 */
int pc_ctx_guard(const cJSON *messages, uint64_t ctx_tokens, cJSON **out_messages, pc_ctx_guard_result_t *out);

/* ---- §3.3 session truncation of tool results ---- */

#define PC_CTX_MAX_TOOL_RESULT_CONTEXT_SHARE 0.3 /* MAX_TOOL_RESULT_CONTEXT_SHARE */
#define PC_CTX_MAX_LIVE_TOOL_RESULT_CHARS ((size_t)40000) /* DEFAULT_MAX_LIVE_TOOL_RESULT_CHARS */
#define PC_CTX_MIN_KEEP_CHARS ((size_t)2000)     /* MIN_KEEP_CHARS */
#define PC_CTX_TAIL_SHARE 0.3                    /* head+tail: tail = min(30 % of budget, */
#define PC_CTX_TAIL_MAX_CHARS ((size_t)4000)     /*                     4000) chars       */
#define PC_CTX_HEAD_NEWLINE_SHARE 0.2            /* head only: newline cut in the last 20 % */
#define PC_CTX_MIDDLE_OMITTED_MARKER                                                               \
	"\n\n\u26a0\ufe0f [... middle content omitted \u2014 showing head and tail ...]\n\n"

/* calculateMaxToolResultChars: min(floor(ctx × 0.3) × 4, 40 000), or
 * `override` when it is non-zero (resolveLiveToolResultMaxChars). */
size_t pc_ctx_tool_result_max_chars(uint64_t ctx_tokens, size_t override_chars);

/*
 * truncateToolResultText: text[0..len) cut to max(max_chars, 2000) chars
 * plus the notice; head and tail when the tail looks important (errors,
 * a closing brace, a summary) and the budget is over 2 × 2000, else the
 * head, cut at a newline in its last 20 %. *out (malloc'd, NUL-terminated,
 * the caller frees) is NULL when the text already fits. Never splits a
 * UTF-8 sequence. PC_EINVAL, PC_ENOMEM.
 */
int pc_ctx_truncate_text(const char *text, size_t len, size_t max_chars, char **out, size_t *out_len);

/* estimateToolResultReductionPotential: the chars truncation to max_chars
 * could remove from the tool results in `messages`. */
size_t pc_ctx_reducible_chars(const cJSON *messages, size_t max_chars);

/*
 * truncateOversizedToolResultsInSession over a copy: every tool result over
 * max_chars is cut by pc_ctx_truncate_text (its text blocks joined by
 * newlines into one). protect_trailing keeps the results after the last
 * assistant message intact (protectTrailingToolResults). *out is a new
 * array (the caller's) or NULL when nothing was cut; *truncated counts the
 * messages cut. PC_EINVAL, PC_ENOMEM.
 */
int pc_ctx_truncate_messages(const cJSON *messages, size_t max_chars, bool protect_trailing, cJSON **out,
			     size_t *truncated);

/* ---- §2.7 preflight ---- */

#define PC_PREFLIGHT_SAFETY_MARGIN 1.2               /* SAFETY_MARGIN */
#define PC_PREFLIGHT_MIN_PROMPT_BUDGET ((uint64_t)8000) /* min prompt budget cap */
#define PC_PREFLIGHT_MIN_PROMPT_SHARE 0.5            /* ... or 50 % of the budget */
#define PC_PREFLIGHT_SLACK_TOKENS ((uint64_t)512)    /* threshold = max(over×4 + 512×4, */
#define PC_PREFLIGHT_THRESHOLD_FACTOR 1.5            /*                 ceil(over×4 × 1.5)) */
#define PC_PREFLIGHT_ERROR_MESSAGE "Context overflow: prompt too large for the model (precheck)."

typedef enum pc_preflight_route {
	PC_PREFLIGHT_FITS = 0,
	PC_PREFLIGHT_COMPACT_ONLY,
	PC_PREFLIGHT_TRUNCATE_TOOL_RESULTS_ONLY,
	PC_PREFLIGHT_COMPACT_THEN_TRUNCATE,
} pc_preflight_route_t;

/* "fits", "compact_only", "truncate_tool_results_only",
 * "compact_then_truncate"; "unknown" out of range. Static. */
const char *pc_preflight_route_name(pc_preflight_route_t r);

typedef struct pc_preflight_input {
	uint64_t history_tokens;  /* pc_ctx_messages_tokens(history) */
	uint64_t system_tokens;   /* tokens of the system prompt */
	uint64_t prompt_tokens;   /* tokens of the new prompt */
	uint64_t context_tokens;  /* the model's context budget */
	uint64_t reserve_tokens;  /* compaction reserve */
	size_t reducible_chars;   /* pc_ctx_reducible_chars(history, ...) */
} pc_preflight_input_t;

typedef struct pc_preflight_result {
	pc_preflight_route_t route;
	uint64_t estimated_tokens; /* ceil(sum × 1.2) */
	uint64_t prompt_budget;
	uint64_t overflow_tokens;
	uint64_t threshold_chars;  /* reducible chars needed for truncation alone */
} pc_preflight_result_t;

/* The route (§2.7). PC_EINVAL for NULL. */
int pc_preflight_check(const pc_preflight_input_t *in, pc_preflight_result_t *out);

/* The reserve the preflight leaves: min(reserve, max(0, budget − min prompt
 * budget)) where min prompt budget = min(8000, max(1, budget / 2)). */
uint64_t pc_preflight_effective_reserve(uint64_t context_tokens, uint64_t reserve_tokens);

/* What the attempt does with a route. */
typedef enum pc_preflight_next {
	PC_PREFLIGHT_NEXT_PROMPT = 0, /* fits: submit the prompt */
	PC_PREFLIGHT_NEXT_TRUNCATE,   /* truncate tool results, then ask again */
	PC_PREFLIGHT_NEXT_RETRY,      /* handled by truncation: skip the prompt, the
				       * run loop retries (preflightRecovery.handled) */
	PC_PREFLIGHT_NEXT_OVERFLOW,   /* fail the prompt with PC_PREFLIGHT_ERROR_MESSAGE,
				       * source "precheck": the run loop compacts */
} pc_preflight_next_t;

/* truncated_count is read only when truncation_done. A truncate-only route
 * whose truncation cut nothing falls back to compact_only (OVERFLOW). */
pc_preflight_next_t pc_preflight_next(pc_preflight_route_t route, bool truncation_done, size_t truncated_count);

/* ---- §7.1 compaction triggers ---- */

#define PC_COMPACT_RESERVE_TOKENS_FLOOR ((uint64_t)20000) /* DEFAULT_PI_COMPACTION_RESERVE_TOKENS_FLOOR */
#define PC_COMPACT_TIMEOUT_PROMPT_RATIO 0.65 /* timeout recovery: prompt side over 65 % */
#define PC_COMPACT_TIMEOUT_MAX_ATTEMPTS PC_RUN_MAX_TIMEOUT_COMPACTIONS /* per run */
#define PC_COMPACT_OVERFLOW_MAX_ATTEMPTS 3u  /* overflow compactions per run */

typedef enum pc_compact_trigger {
	PC_COMPACT_TRIGGER_NONE = 0,
	PC_COMPACT_TRIGGER_THRESHOLD,        /* after a turn: context over window − reserve */
	PC_COMPACT_TRIGGER_OVERFLOW,         /* the provider said the context overflowed */
	PC_COMPACT_TRIGGER_TIMEOUT_RECOVERY, /* an LLM timeout with a big prompt */
	PC_COMPACT_TRIGGER_PREFLIGHT,        /* the precheck's synthetic overflow */
	PC_COMPACT_TRIGGER_TRANSCRIPT_BYTES, /* the active transcript byte guard */
} pc_compact_trigger_t;

/* "none", "threshold", "overflow", "timeout_recovery", "preflight",
 * "transcript_bytes"; "unknown" out of range. Static. */
const char *pc_compact_trigger_name(pc_compact_trigger_t t);

typedef enum pc_compact_action {
	PC_COMPACT_NONE = 0,   /* no compaction; the caller goes on (failover, truncation, give up) */
	PC_COMPACT_RUN,        /* compact with `trigger`, count the attempt, retry */
	PC_COMPACT_RETRY_ONLY, /* overflow after an in-attempt compaction: count
				* the attempt and retry without compacting again */
} pc_compact_action_t;

typedef struct pc_compact_input {
	uint64_t context_window;       /* tokens */
	/* threshold (1) */
	bool auto_enabled;             /* agents.defaults.compaction.enabled */
	bool turn_succeeded;
	uint64_t context_tokens;       /* after the turn */
	uint64_t reserve_tokens;       /* configured reserve; 0 = the floor */
	/* overflow (2) and preflight (4) */
	bool context_overflow;         /* the prompt or assistant error is an overflow */
	bool compaction_failure;       /* ... and says summarisation itself failed */
	bool attempt_compacted;        /* the attempt already auto-compacted */
	bool aborted;
	uint32_t overflow_attempts;    /* overflow compactions so far this run */
	pc_preflight_route_t preflight_route; /* the route that raised the overflow, if any */
	/* timeout (3) */
	bool timed_out;
	bool timed_out_during_compaction;
	bool timed_out_during_tool_execution;
	bool timed_out_by_run_budget;
	uint64_t prompt_side_tokens;   /* input + cache read + cache write of the last call */
	uint32_t timeout_attempts;     /* timeout compactions so far this run */
	/* transcript byte guard (5) */
	uint64_t transcript_bytes;
	uint64_t max_transcript_bytes; /* 0 = disabled */
} pc_compact_input_t;

typedef struct pc_compact_decision {
	pc_compact_action_t action;
	pc_compact_trigger_t trigger;
	bool truncate_after;  /* compact_then_truncate: truncate tool results after compacting */
	const char *detail;   /* static: the rule that decided, for logs */
} pc_compact_decision_t;

/* The reserve used by the threshold trigger: max(configured, 20 000), capped
 * like the preflight's effective reserve. */
uint64_t pc_compact_reserve_tokens(uint64_t context_window, uint64_t configured_reserve);

/* Rules in order: timeout recovery (§1.7 step 6), overflow / preflight
 * (step 7a/7b), threshold, transcript bytes. PC_EINVAL for NULL. */
int pc_compact_decide(const pc_compact_input_t *in, pc_compact_decision_t *out);

#ifdef __cplusplus
}
#endif
#endif
