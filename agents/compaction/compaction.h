/*
 * Compaction (spec §7): summarise the older part of a session's transcript
 * through the model, keep the recent tail verbatim, and rewrite the
 * transcript as [summary, tail...] under the session write lock.
 *
 * With hooks, before_compaction fires once the history is read (the
 * trigger, the session and run, messageCount, tokensBefore) and
 * after_compaction with the outcome, whatever it is: compacted,
 * summaryChars when a summary was written, messageCount / compactedCount /
 * tokensBefore / tokensAfter, error, aborted, timedOut.
 *
 * The summary is stored as a message of role "compactionSummary" whose
 * content is {"role":"compactionSummary","summary":"...","tokensBefore":N,
 * "trigger":"overflow"}; pc_compaction_context_message turns it into the
 * user-side text the model reads in place of the history it replaces.
 *
 * The pure part (cut point, prompt) is separate from the actor so both can
 * be tested alone.
 */
#ifndef PINCER_AGENTS_COMPACTION_COMPACTION_H
#define PINCER_AGENTS_COMPACTION_COMPACTION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "actors/actor.h"
#include "io/io.h"
#include "io/store/store.h"
#include "agents/hooks/hooks.h"
#include "agents/providers/providers.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PC_COMPACTION_ROLE "compactionSummary"
#define PC_COMPACTION_EMPTY_SUMMARY "No prior history."
/* The text placed before a summary when it is replayed to the model. */
#define PC_COMPACTION_CONTEXT_PREFIX                                                               \
	"The conversation history before this point was compacted into the following summary:\n\n"

enum {
	PC_MSG_COMPACTION_DONE = PC_MSG_TYPE_SYSTEM + 0x2200,
};

/*
 * The cut point (§7.2): keep the newest messages whose estimated tokens
 * add up to at most keep_recent_tokens (at least the last message), and
 * never separate an assistant tool call from its tool results: a boundary
 * that would fall between them moves back to the assistant message.
 * `messages` is an array of unified messages. *first_kept is the index of
 * the first message kept; 0 means there is nothing to summarise.
 * Tokens are estimated as pc_ctx_message_chars / pc_ctx_chars_to_tokens
 * (a summary message counts as its context message). A run of tool results
 * with no call before it stays whole in the tail. A leading
 * compactionSummary is never the first kept message unless it is the only
 * one: when everything else fits, *first_kept is 1 (the old summary is
 * folded into the new). PC_EINVAL for a non-array or NULL first_kept;
 * PC_ENOMEM.
 */
int pc_compaction_cut_point(const cJSON *messages, uint64_t keep_recent_tokens, size_t *first_kept);

/*
 * The summarisation request's messages for messages[0..n): one user
 * message holding the transcript as plain text (tool-result details
 * stripped, previous summaries included) and the instructions: preserve
 * active tasks and their status, the last user request, decisions and
 * rationale, TODOs, open questions, constraints, promised follow-ups, and
 * identifiers (ids, hashes, URLs, file names) exactly. *out is an array
 * (the caller's). `instructions` (may be NULL) is added for a manual
 * compaction.
 * Rendering: "User: ...", "Assistant: ...", "Assistant called tool
 * NAME(args)", "Tool NAME result: ..." (or "error:"), "Earlier summary:
 * ..."; thinking blocks are left out, tool results and tool-call arguments
 * are cut to 2000 bytes. PC_EINVAL for a non-array or n past its end;
 * PC_ENOMEM.
 */
int pc_compaction_prompt(const cJSON *messages, size_t n, const char *instructions, cJSON **out);

/* The stored content JSON of a summary message, malloc'd (the caller
 * frees). `trigger` NULL: the key is left out. */
int pc_compaction_summary_content(const char *summary, uint64_t tokens_before, const char *trigger,
				  char **out);

/* A stored summary message's content (an object) -> the unified user
 * message the model reads, a new object (the caller's). PC_EINVAL when
 * `content` has no "summary" string. */
int pc_compaction_context_message(const cJSON *content, cJSON **out);

/* What to compact and with which model. Strings are copied. */
typedef struct pc_compaction_request {
	pc_io_t *io;
	pc_store_t *store;
	const char *lock_dir;            /* where the session write locks live */
	const pc_session_lock_opts_t *lock_opts; /* NULL: defaults */
	const char *session_key;
	int64_t epoch;                   /* lease epoch for the rewrite; 0 none */
	const char *run_id;              /* stamped on the summary message */
	const char *trigger;             /* "overflow", "timeout_recovery", ... */
	const char *instructions;        /* manual compaction, or NULL */
	/* the summarising model */
	pc_provider_api_t api;
	const char *url;
	const char *const *headers;
	size_t header_count;
	const char *provider;
	const char *model;
	int64_t max_tokens;              /* of the summary; 0: 4096 */
	uint64_t keep_recent_tokens;     /* 0: 20 000 */
	uint64_t timeout_ms;             /* the whole operation; 0: 900 s */
	uint64_t idle_timeout_ms;        /* the model's silence before the call fails
					  * (the provider's idle watchdog); 0: none */
	bool http2_prior_knowledge;      /* the provider's "http2" (model_call.h) */
	const pc_hooks_t *hooks;         /* before_compaction / after_compaction (§7.4);
					  * NULL: none. Held by the actor while it runs */
	uint64_t tag;
} pc_compaction_request_t;

/* PC_MSG_COMPACTION_DONE. rc: PC_ENOTFOUND (no such session), the model
 * call's code with its error text (summarisation failed), PC_EINVAL (the
 * model returned no text: an empty summary is never written), a store or
 * lock code (PC_EBUSY: the write lock stayed taken; PC_STORE_ECONFLICT:
 * appends raced the rewrite twice), PC_ESTOPPED with `aborted`,
 * PC_ETIMEDOUT with `timed_out`. tokens/messages_after equal _before when
 * nothing was written. */
typedef struct pc_compaction_done_msg {
	uint64_t tag;
	int32_t rc;              /* 0, or why it failed (the transcript is unchanged) */
	bool compacted;          /* false with rc 0: nothing to summarise */
	bool aborted;
	bool timed_out;
	uint64_t tokens_before;  /* estimated, of the whole transcript */
	uint64_t tokens_after;
	uint32_t messages_before;
	uint32_t messages_after;
	char error[256];         /* "" when rc == 0 */
} pc_compaction_done_msg_t;

/* Spawns the compaction actor; `owner` receives exactly one
 * PC_MSG_COMPACTION_DONE. *out (may be NULL) is the caller's reference.
 * PC_EINVAL for a missing io, store, lock_dir, session_key, url, model or
 * owner, or an unknown api. `store` and `lock_dir`'s directory must stay
 * usable until DONE; the rewrite runs on the blocking pool, and when the
 * actor is stopped from outside (pc_actor_stop, shutdown) during it, the
 * job finishes on its own after DONE -- close the store only once the
 * runtime's blocking work is done then.
 * A rewrite that conflicts with an append made since the snapshot is
 * retried once from a new read; if only the tail grew, the summary
 * already made is reused (no second model call). */
int pc_compaction_start(pc_runtime_t *rt, const pc_compaction_request_t *req, pc_actor_t *owner,
			pc_actor_t **out);
/* Stops it: DONE with `aborted` follows unless it had finished; a rewrite
 * already committed stays committed. Any thread.
 * An abort (or the timeout) while the model is summarising ends the
 * operation at once. While the rewrite is running, it waits for it (a
 * rewrite cannot be taken back halfway): if the rewrite commits, DONE is a
 * success (compacted, not aborted); if not, DONE says aborted (or
 * timed_out) without a retry. Either way DONE tells the truth about the
 * transcript. */
int pc_compaction_abort(pc_actor_t *compaction);

#ifdef __cplusplus
}
#endif
#endif
