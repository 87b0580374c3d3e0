/*
 * What the attempt actor's files share: its state and the steps one file
 * calls in another. attempt_actor.c is the actor (loading, the model call,
 * compaction, the report); attempt_tools.c runs the model's tool calls
 * (§3.1-§3.4, §4.1). Everything here runs on the attempt's actor.
 */
#ifndef PINCER_AGENTS_ATTEMPT_ATTEMPT_INTERNAL_H
#define PINCER_AGENTS_ATTEMPT_ATTEMPT_INTERNAL_H

#include <cjson/cJSON.h>

#include "actors/timer.h"
#include "io/io.h"
#include "../agent_internal.h"
#include "agents/hooks/hooks.h"
#include "attempt_lifecycle.h"
#include "attempt_timeout.h"
#include "tool_call_lifecycle.h"

/* §3.3 event-side cap of tool results on the `tool` stream. */
#define TOOL_EVENT_MAX_CHARS 8000u
#define TOOL_EVENT_TRUNCATED "\n\u2026(truncated)\u2026"

/* One tool call of the batch (§4.1). */
typedef struct tool_slot {
	pc_actor_t *actor;  /* NULL: not started (or finished) */
	pc_tc_lc_t stage;   /* changed only by call_set (tool_call_lifecycle.h) */
	/* the result while tool_result_persist runs */
	bool is_error, mutating;
	char *text;
} tool_slot_t;

/* A hook chain's tag: the call's slot and what the chain is for. */
enum {
	HOOK_KIND_GATE = 1,     /* before_tool_call */
	HOOK_KIND_PERSIST = 2,  /* tool_result_persist */
	HOOK_KIND_PROMPT = 3,   /* before_prompt_build */
	HOOK_KIND_RUN = 4,      /* before_agent_run */
	HOOK_KIND_REPLY = 5,    /* before_agent_reply */
	HOOK_KIND_FINALIZE = 6, /* before_agent_finalize */
};
#define HOOK_TAG(slot, kind) (((uint64_t)(slot) << 8) | (uint64_t)(kind))
#define HOOK_TAG_SLOT(tag) ((size_t)((tag) >> 8))
#define HOOK_TAG_KIND(tag) ((unsigned)((tag)&0xFFu))

typedef struct attempt {
	pc_agent_t *agent;
	pc_actor_t *run;
	pc_event_bus_t *bus;
	char *run_id, *key, *model, *url, *prompt, *continuation, *extra;
	char *idem; /* the run's idempotency key, or NULL */
	int64_t epoch; /* the session's lease, carried by every transcript write */
	pc__model_series_t series; /* its provider and model's metrics */
	const pc_provider_config_t *provider;
	const char *const *additions;
	size_t addition_count;
	char **headers;
	uint32_t index, profile;
	pc_think_level_t think;
	uint64_t context_tokens;
	int64_t max_tokens;
	uint64_t timeout_ms;
	uint64_t lock_max_hold_ms; /* the run's write lock max hold (§6.4); 0: the default */

	pc_att_lc_t state; /* changed only by pc__att_set (attempt_lifecycle.h) */
	bool have_history, have_context;
	cJSON *messages;      /* the model context: unified messages */
	char *context_text;   /* context files section */
	char *system_prompt;
	const cJSON *tools;   /* schemas offered (the agent's, shared), or NULL */

	pc_actor_t *call;     /* the model call in flight */
	uint64_t call_seq;
	pc__buf_t text;       /* cumulative assistant text of the current message */
	pc__buf_t thinking;
	size_t text_sent, thinking_sent; /* bytes of each already on the bus */

	pc__loop_box_t *loop; /* the run's tool-loop history (§4.2), or NULL */
	/* what the run-shaping hooks decided (attempt_hooks.c) */
	unsigned hook_wait;   /* the attempt-level chain awaited (HOOK_KIND_*), 0: none */
	char *turn;           /* this attempt's user turn, with hook context around it */
	char *sys_replace, *sys_prepend, *sys_append;
	cJSON *hook_tools;    /* the offered schemas narrowed by toolsAllow (owned), or NULL */
	cJSON *hook_allow;    /* the toolsAllow names (owned), or NULL: not narrowed */
	bool finalize_revise;
	char *finalize_reason;
	bool loop_stopped;    /* the global circuit breaker blocked a call (§4.2) */
	cJSON *calls;         /* the toolCall blocks being run (borrowed from messages) */
	tool_slot_t *slots;
	size_t n_calls, next_call, calls_done;
	/* the sync the batch waits for before it starts: a mutating tool runs
	 * only once the message asking for it is durable, so that recovery
	 * after a crash sees the call (replayInvalid). 0: none awaited */
	uint64_t calls_sync;

	char **steer; /* queued steers, each a pc__steer_msg payload */
	size_t steer_n, steer_cap;

	uint32_t appends_pending; /* transcript writes (and syncs) not yet answered */
	/* usage records (one per model call that reported usage) not yet
	 * answered, by the corr of their ask: their failures are counted and
	 * logged, never the attempt's */
	uint64_t *usage_corrs;
	size_t usage_n, usage_cap;
	/* transcript writes told to the agent's feed once the store has
	 * answered them, by the corr of their ask: the feed names a message by
	 * the seq the store gave it. Kept only while the feed has a listener. */
	struct pc__att_fed *fed;
	size_t fed_n, fed_cap;
	uint32_t lazy_unsynced;   /* lazy writes sent since the last sync */
	int store_error;
	/* reported with its writes unsettled (maybe_finish): the answers are
	 * awaited after the report, then told to the run once */
	bool settling, settled;

	pc_timer_t timer;
	pc_attempt_timeout_t budget; /* the compaction-aware run-budget timer (§2.6) */
	pc_actor_t *compaction;      /* in flight, or NULL */
	uint32_t compactions;        /* done inside this attempt */
	bool timed_out_in_compaction;
	int64_t started_ms;
	bool aborting, cancelled, timed_out, idle_timed_out, timed_out_in_tool;
	bool user_persisted;
	uint32_t tool_calls_run;

	/* the outcome so far */
	pc_usage_t usage, last_usage;
	bool completed_call, has_assistant, assistant_error, has_failure;
	/* non-blank assistant text reached the client: progress for the idle
	 * breaker (§1.15) even if the call then went silent */
	bool streamed_text;
	pc_failover_result_t failure;
	pc_run_prompt_error_t prompt_error;
	char *error_text;
	char *stop_reason;
	/* a model call the provider refused with an error status: the status
	 * and the provider's message (or NULL), for the run's end */
	int provider_status;
	char *provider_message;
	cJSON *final_message;  /* the last assistant message */
	char *tool_error_name, *tool_error_text;
	bool tool_error_mutating;
	/* a mutating tool's body ran (success or not): replaying the turn could
	 * repeat what it did (§1.14 replay metadata) */
	bool side_effects;
	/* the attempt's own compaction failed; an overflow after it is a
	 * compaction failure (§1.7 step 7, isCompactionFailureError) */
	bool compaction_failed;
	/* the context holds tool results session truncation could cut (§1.7 7c) */
	bool oversized_results;
} attempt_t;

/* attempt_actor.c */
/* The one transition of the attempt's state: one the table refuses is
 * counted and logged and the state stays; an allowed one is traced
 * (PINCER_TRACE=attempt) with `why`. */
void pc__att_set(attempt_t *t, pc_att_lc_t to, const char *why);
void pc__att_set_error(attempt_t *t, const char *text);
/* Publishes `data` (consumed) on the run's bus. */
void pc__att_emit(attempt_t *t, pc_event_stream_t stream, cJSON *data, bool droppable);
cJSON *pc__att_obj_phase(const char *phase);
/* Appends `msg` (borrowed) to the transcript; the acknowledgement is counted. */
int pc__att_persist(pc_ctx_t *ctx, attempt_t *t, const char *role, cJSON *msg, const char *tool_ids);
/* The same for a message already printed as JSON by cJSON. */
int pc__att_persist_text(pc_ctx_t *ctx, attempt_t *t, const char *role, const char *json, const char *tool_ids);
bool pc__att_has_block(const cJSON *msg, const char *kind);
/* The end is decided (`why`, for the trace): finishing, then done once
 * nothing is in flight. */
void pc__att_finish(pc_ctx_t *ctx, attempt_t *t, const char *why);
void pc__att_fail_setup(pc_ctx_t *ctx, attempt_t *t, const char *why);
/* The next model call on the context; `why` says what led to it. */
int pc__att_model_call(pc_ctx_t *ctx, attempt_t *t, const char *why);
/* Starts threshold compaction when the context wants it; true if it did. */
bool pc__att_maybe_compact(pc_ctx_t *ctx, attempt_t *t);

/* attempt_hooks.c: each start returns true when a chain was started (its
 * PC_MSG_HOOK_DONE then continues the attempt), false when no handler
 * applies and the attempt goes straight on. */
cJSON *pc__att_hook_ctx(const attempt_t *t, const char *tool_call_id);
bool pc__att_hook_prompt_build(pc_ctx_t *ctx, attempt_t *t, const char *turn);
void pc__att_apply_prompt_build(attempt_t *t, const char *turn, const pc_hook_done_msg_t *d);
bool pc__att_hook_agent_run(pc_ctx_t *ctx, attempt_t *t);
/* A block: the attempt ends with the hook's reason (§1.7 step 8). */
void pc__att_apply_agent_run(pc_ctx_t *ctx, attempt_t *t, const pc_hook_done_msg_t *d);
bool pc__att_hook_agent_reply(pc_ctx_t *ctx, attempt_t *t);
/* True when a handler claimed the turn: its reply is the answer. */
bool pc__att_apply_agent_reply(pc_ctx_t *ctx, attempt_t *t, const pc_hook_done_msg_t *d);
bool pc__att_hook_finalize(pc_ctx_t *ctx, attempt_t *t);
void pc__att_apply_finalize(attempt_t *t, const pc_hook_done_msg_t *d);
/* Frees what the hooks left in the attempt. */
void pc__att_hooks_free(attempt_t *t);

/* attempt_tools.c */
const char *pc__att_block_str(const cJSON *b, const char *name);
pc_tool_mode_t pc__att_tool_mode(const attempt_t *t);
/* Runs the tool calls of `assistant` (borrowed; kept in t->messages). */
void pc__att_run_tools(pc_ctx_t *ctx, attempt_t *t, cJSON *assistant);
void pc__att_on_tool_done(pc_ctx_t *ctx, attempt_t *t, const pc_tool_done_msg_t *d);
void pc__att_on_hook_done(pc_ctx_t *ctx, attempt_t *t, const pc_hook_done_msg_t *d);
/* On abort: calls waiting on a hook chain or on their batch's sync end at
 * once. */
void pc__att_abort_tools(pc_ctx_t *ctx, attempt_t *t);
/* The store answered `corr`: the batch waiting for it starts (or, its
 * message refused, ends without running). */
void pc__att_on_calls_synced(pc_ctx_t *ctx, attempt_t *t, uint64_t corr);
/* Appends `n` queued steering messages as user turns. */
void pc__att_inject_steering(pc_ctx_t *ctx, attempt_t *t, size_t n);

#endif
