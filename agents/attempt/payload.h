/*
 * What the user gets to read (spec §5.3–§5.7, §5.9):
 *
 *   - stripping reasoning tags (<think>, <thinking>, <thought>,
 *     <antthinking>) and, when asked, keeping only <final>…</final>;
 *   - the silent token NO_REPLY: exact-match suppression of final
 *     payloads, and leading / partial matches for streaming drafts;
 *   - messaging-tool dedup: the committed texts, and whether a reply
 *     repeats one of them;
 *   - final payload shaping, with the tool-error warning as the reply of
 *     last resort;
 *   - the terminal ordering of agent_end (lifecycle emitted exactly once,
 *     after every flush).
 *
 * Pure: no I/O, no clock, no globals. Strings are UTF-8; only ASCII is case
 * folded. Any thread.
 */
#ifndef PINCER_AGENTS_ATTEMPT_PAYLOAD_H
#define PINCER_AGENTS_ATTEMPT_PAYLOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "runtime/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- §5.3 tags ---- */

/*
 * A copy of `text` (malloc'd, the caller frees) without reasoning blocks:
 * everything inside <think>, <thinking>, <thought> and <antthinking>
 * (names case-insensitive, attributes allowed) is dropped, an unclosed one
 * drops the rest of the text; <final> tags are removed. With
 * enforce_final, only text inside <final>…</final> is kept (nothing at all
 * when no <final> opens). Tags inside `code` spans and ``` fences are
 * text. The result is trimmed. PC_EINVAL, PC_ENOMEM.
 */
int pc_payload_strip_tags(const char *text, bool enforce_final, char **out);

/* ---- §5.5 the silent token ---- */

#define PC_SILENT_REPLY_TOKEN "NO_REPLY" /* SILENT_REPLY_TOKEN */
#define PC_HEARTBEAT_TOKEN "HEARTBEAT_OK" /* HEARTBEAT_TOKEN */

/* isSilentReplyPayloadText: the whole text is the token, case-insensitive,
 * with any surrounding whitespace. Text that merely starts or ends with it
 * is not silent (#19537). false for NULL. */
bool pc_payload_is_silent(const char *text);

/* For a streaming draft: the text (after leading whitespace) could still
 * grow into the token: upper-case letters and '_' only, at least one '_',
 * and a prefix of NO_REPLY ("NO_", "NO_REP"). Hold such a draft back. */
bool pc_payload_is_silent_prefix(const char *text);

/* Chat deltas strip a leading token: when `text` starts (after whitespace)
 * with NO_REPLY, case-insensitive, followed by the end or a non-word
 * character, returns the rest after the token and its following
 * whitespace; otherwise `text` itself. NULL for NULL. */
const char *pc_payload_skip_silent(const char *text);

/* ---- §5.6 messaging-tool dedup ---- */

#define PC_PAYLOAD_SENT_CAP 200 /* each committed-send list keeps the newest 200 */

/* The comparison form: trimmed, whitespace runs made one space, ASCII
 * lower case. *out is malloc'd (the caller frees). PC_EINVAL, PC_ENOMEM. */
int pc_payload_normalize(const char *text, char **out);

/* A messaging tool succeeded: append the normalised `text` to `sent` (a
 * cJSON array of strings the caller owns), dropping the oldest past
 * PC_PAYLOAD_SENT_CAP. Whitespace-only texts are not recorded. Pending
 * sends are never committed (a failed tool must not suppress the reply).
 * PC_EINVAL, PC_ENOMEM. */
int pc_payload_sent_commit(cJSON *sent, const char *text);

/* Does `text`, normalised, equal a committed send? false for empty text or
 * a NULL / empty list. */
bool pc_payload_is_sent_duplicate(const cJSON *sent, const char *text);

/* ---- §5.7 final payloads ---- */

/* lastToolError, as the attempt saw it. */
typedef struct pc_tool_error {
	const char *tool_name; /* required */
	const char *meta;      /* short description of the call ("ls -la"), or NULL */
	const char *error;     /* the error text, or NULL */
	bool mutating;         /* the call changed (or tried to change) state */
	bool exec_like;        /* exec / process tools */
} pc_tool_error_t;

typedef struct pc_payload_input {
	const cJSON *assistant_texts;   /* array of strings (already tag-stripped), or NULL */
	const char *reasoning;          /* reasoning text when reasoning is on, else NULL */
	const cJSON *tool_summaries;    /* verbose inline tool summaries (strings), or NULL */
	const char *assistant_error;    /* formatted model error text, or NULL */
	const pc_tool_error_t *last_tool_error; /* or NULL */
	const cJSON *sent_texts;        /* committed messaging-tool texts, or NULL */
	bool delivered_to_source;       /* a messaging tool answered the source conversation */
	bool did_send_via_messaging_tool;
	bool suppress_tool_error_warnings; /* suppressToolErrorWarnings */
	bool suppress_tool_errors;      /* messages.suppressToolErrors */
	bool tool_error_details;        /* verbose full, or an exec timeout in a cron run:
					 * the warning carries the error text, and exec-like
					 * failures are reported at all */
} pc_payload_input_t;

/*
 * buildEmbeddedRunPayloads: reasoning, assistant texts, tool summaries,
 * the assistant error, then the tool-error warning; texts trimmed; empty,
 * exact-NO_REPLY and messaging-duplicate texts removed. *out is a new
 * array (the caller's, cJSON_Delete) of {"text", "isError"?: true,
 * "isReasoning"?: true}; it may be empty. The rules for the warning are
 * at the top of payload.c. PC_EINVAL, PC_ENOMEM.
 */
int pc_payload_build(const pc_payload_input_t *in, cJSON **out);

/* Whether a tool is exec-like for §5.7 (exec, and bash, its other name):
 * its failure shows in its own output, so the warning needs details. */
bool pc_payload_tool_is_exec_like(const char *name);

/* The warning's text: "⚠️ <tool>[ (<meta>)] failed[: <error>]", the error
 * only with include_details. malloc'd. PC_EINVAL, PC_ENOMEM. */
int pc_payload_tool_error_text(const pc_tool_error_t *e, bool include_details, char **out);

/* A failure the model can fix by calling again differently: the error
 * mentions required / missing / invalid / must be / must have / needs /
 * requires (case-insensitive). Such failures get no fallback warning. */
bool pc_payload_tool_error_recoverable(const char *error);

/* ---- §5.9 terminal ordering ---- */

typedef enum pc_terminal_step {
	PC_TERMINAL_FLUSH_BLOCKS = 0,       /* flush the block-reply buffer */
	PC_TERMINAL_RESOLVE_COMPACTION,     /* resolve the compaction wait (one pending retry less) */
	PC_TERMINAL_FLUSH_MEDIA,            /* flush pending tool media, then the block buffer again */
	PC_TERMINAL_BLOCK_REPLY_FLUSH,      /* call onBlockReplyFlush */
	PC_TERMINAL_EMIT_LIFECYCLE,         /* emit lifecycle end / error */
	PC_TERMINAL_DONE,
} pc_terminal_step_t;

typedef struct pc_terminal {
	uint8_t next;
	bool emitted;
} pc_terminal_t;

/* The next step of agent_end handling; a failed flush does not stop the
 * sequence (the caller just advances). EMIT_LIFECYCLE is returned exactly
 * once; DONE afterwards. A zeroed pc_terminal_t starts the sequence. */
pc_terminal_step_t pc_terminal_advance(pc_terminal_t *t);

/* The lifecycle phase to emit: "error" when the last assistant message
 * stopped with an error, else "end". */
const char *pc_terminal_phase(bool assistant_errored);

/* Whether the caller must emit a fallback terminal event because the loop
 * never did (docs/concepts/agent-loop.md). */
bool pc_terminal_needs_fallback(const pc_terminal_t *t);

#ifdef __cplusplus
}
#endif
#endif
