/*
 * What the attempt actor's files share: its state and the steps one file
 * calls in another. attempt_actor.c is the actor (loading, the model call,
 * compaction, the report); attempt_tools.c runs the model's tool calls
 * (§3.1-§3.4, §4.1). Everything here runs on the attempt's actor.
 */
#ifndef PINCER_AGENTS_ATTEMPT_ATTEMPT_INTERNAL_H
#define PINCER_AGENTS_ATTEMPT_ATTEMPT_INTERNAL_H

#include <cjson/cJSON.h>

#include "../../actors/timer.h"
#include "../../io/buf_internal.h"
#include "../agent_internal.h"
#include "attempt_timeout.h"

/* §3.3 event-side cap of tool results on the `tool` stream. */
#define TOOL_EVENT_MAX_CHARS 8000u
#define TOOL_EVENT_TRUNCATED "\n\u2026(truncated)\u2026"

typedef enum phase {
	PH_LOADING = 0,
	PH_MODEL,
	PH_TOOLS,
	PH_COMPACTING, /* threshold compaction between two model calls (§7.1 item 1) */
	PH_FINISHING,
} phase_t;

typedef struct tool_slot {
	pc_actor_t *actor;  /* NULL: not started (or finished) */
	bool done;
	bool skipped;
} tool_slot_t;

typedef struct attempt {
	pc_agent_t *agent;
	pc_actor_t *run;
	pc_event_bus_t *bus;
	char *run_id, *key, *model, *url, *prompt, *continuation, *extra;
	const pc_provider_config_t *provider;
	const char *const *additions;
	size_t addition_count;
	char **headers;
	uint32_t index, profile;
	pc_think_level_t think;
	uint64_t context_tokens;
	int64_t max_tokens;
	uint64_t timeout_ms;

	phase_t phase;
	bool have_history, have_context;
	cJSON *messages;      /* the model context: unified messages */
	char *context_text;   /* context files section */
	char *system_prompt;
	const cJSON *tools;   /* schemas offered (the agent's, shared), or NULL */

	pc_actor_t *call;     /* the model call in flight */
	uint64_t call_seq;
	pc__buf_t text;       /* cumulative assistant text of the current message */
	pc__buf_t thinking;

	cJSON *calls;         /* the toolCall blocks being run (borrowed from messages) */
	tool_slot_t *slots;
	size_t n_calls, next_call, calls_done;

	char **steer;
	size_t steer_n, steer_cap;

	uint32_t appends_pending;
	int store_error;

	pc_timer_t timer;
	pc_attempt_timeout_t budget; /* the compaction-aware run-budget timer (§2.6) */
	pc_actor_t *compaction;      /* in flight, or NULL */
	uint32_t compactions;        /* done inside this attempt */
	bool timed_out_in_compaction;
	int64_t started_ms;
	bool aborting, cancelled, timed_out, idle_timed_out, timed_out_in_tool;
	bool user_persisted, reported;
	uint32_t tool_calls_run;

	/* the outcome so far */
	pc_usage_t usage, last_usage;
	bool completed_call, has_assistant, assistant_error, has_failure;
	pc_failover_result_t failure;
	pc_run_prompt_error_t prompt_error;
	char *error_text;
	char *stop_reason;
	cJSON *final_message;  /* the last assistant message */
	char *tool_error_name, *tool_error_text;
	bool tool_error_mutating;
} attempt_t;

/* attempt_actor.c */
void pc__att_set_error(attempt_t *t, const char *text);
/* Publishes `data` (consumed) on the run's bus. */
void pc__att_emit(attempt_t *t, pc_event_stream_t stream, cJSON *data, bool droppable);
cJSON *pc__att_obj_phase(const char *phase);
/* Appends `msg` (borrowed) to the transcript; the acknowledgement is counted. */
int pc__att_persist(pc_ctx_t *ctx, attempt_t *t, const char *role, const cJSON *msg, const char *tool_ids);
bool pc__att_has_block(const cJSON *msg, const char *kind);
void pc__att_finish(pc_ctx_t *ctx, attempt_t *t);
void pc__att_fail_setup(pc_ctx_t *ctx, attempt_t *t, const char *why);
int pc__att_model_call(pc_ctx_t *ctx, attempt_t *t);
/* Starts threshold compaction when the context wants it; true if it did. */
bool pc__att_maybe_compact(pc_ctx_t *ctx, attempt_t *t);

/* attempt_tools.c */
const char *pc__att_block_str(const cJSON *b, const char *name);
pc_tool_mode_t pc__att_tool_mode(const attempt_t *t);
/* Runs the tool calls of `assistant` (borrowed; kept in t->messages). */
void pc__att_run_tools(pc_ctx_t *ctx, attempt_t *t, cJSON *assistant);
void pc__att_on_tool_done(pc_ctx_t *ctx, attempt_t *t, const pc_tool_done_msg_t *d);
/* Appends `n` queued steering messages as user turns. */
void pc__att_inject_steering(pc_ctx_t *ctx, attempt_t *t, size_t n);

#endif
