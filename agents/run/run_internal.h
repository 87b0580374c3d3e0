/*
 * The run actor's state and what its files share: run_actor.c (the loop,
 * attempts, recovery, the end) and run_hooks.c (its hook points). Private
 * to agents/run/.
 */
#ifndef PINCER_AGENTS_RUN_RUN_INTERNAL_H
#define PINCER_AGENTS_RUN_RUN_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "actors/timer.h"
#include "../agent_internal.h"
#include "run_decide.h"
#include "run_lifecycle.h"

typedef struct candidate {
	const pc_provider_config_t *provider;
	const char *model;        /* borrowed from the config, or from `model_buf` */
	uint64_t context_tokens;
	int64_t max_tokens;
} candidate_t;

typedef struct run {
	pc_agent_t *agent;
	pc_actor_t *session;
	pc_actor_t *self;         /* borrowed, from the start on */
	pc_event_bus_t *bus;
	char *run_id, *key, *prompt, *extra, *model_buf;
	char *idem; /* the request's idempotency key, or NULL: names the prompt to clients */
	int64_t epoch; /* the session's lease, carried by every transcript write */
	uint64_t timeout_ms;
	uint64_t lane_ticket;
	candidate_t cand[PC_RUN_MAX_CANDIDATES];
	uint32_t n_cand;
	pc_run_state_t rs;

	pc__loop_box_t *loop; /* the tool-loop detectors' history (§4.2), or NULL */
	char *revision;       /* the last before_agent_finalize revision request */
	char *hook_model;     /* before_model_resolve's model, for cand[0] */
	bool reply_checked;   /* message_sending has had its say */
	pc_run_action_t *final_act; /* the ok finish waiting for message_sending */
	/* The last attempt reported before its writes were durable
	 * (pc__attempt_done_t's `unsettled`): until PC__MSG_ATTEMPT_SETTLED,
	 * what would read the transcript again waits (`deferred`, with a sync
	 * asked), and so does the end's telling (`end_answered`, `end_rc`:
	 * the store's answer to the end's row, which commits them). */
	bool unsettled, end_answered, end_fenced;
	int end_rc, settle_rc;
	uint64_t end_corr;
	pc_run_action_t *deferred;

	/* The run's one state (run_lifecycle.h): queued from calloc, then
	 * written by run_set only (scripts/check-lifecycles). */
	pc_run_lc_t state;
	pc_run_phase_t activity;  /* the last work reported (pc_run_lc_session_phase) */
	pc_run_phase_t told;      /* the session's view, as last sent */
	pc_actor_t *attempt;
	pc_actor_t *compaction;
	pc_run_compaction_t compaction_kind;
	pc_timer_t delay;
	pc_timer_t notice;        /* the overload-retry notice, once armed */
	bool notice_armed;
	uint32_t attempts;
	uint32_t seeded;          /* 1 + the candidate whose cooldowns were seeded */
	bool user_persisted, cancelled, streaming;
	bool loop_persisted;      /* the post-compaction guard aborted the attempt */
	uint64_t started_ms;      /* runtime clock */
	int64_t started_wall;

	/* the last attempt */
	pc_run_outcome_t outcome;
	char *error_text, *payloads, *stop_reason;
	int provider_status;      /* the provider's error status that ended it, or 0 */
	char *provider_message;   /* and its message (NULL: none) */
	char *guard_text;         /* the loop guard's message, once it tripped */

	/* The candidates the run left with a failover error, in order (§1.12
	 * runWithModelFallback's attempts): what the run's error lists when
	 * every candidate failed. */
	struct {
		uint32_t candidate;
		pc_failover_reason_t reason;
		int status;
		char *error;
	} failed[PC_RUN_MAX_CANDIDATES];
	uint32_t n_failed;

	/* the end, kept while its row commits (ending) */
	pc_run_status_t end_status;
	const char *end_kind;     /* static */
	char *end_message;        /* the error payload of a failed run */
	cJSON *end_data;          /* the terminal event's data */
} run_t;

/*
 * The run's end: the store's row first, asked like any durable write (an
 * urgent one: it commits with the transcript writes queued before it),
 * and its answer tells the session (tell_end). Until then nobody learns
 * of the end, so no answer can outlive a crash that loses it.
 * `message` is the user-facing error payload, if any.
 */
void pc__run_finish(pc_ctx_t *ctx, run_t *r, pc_run_status_t status, const char *message,
		   const pc_run_action_t *act);
/* The run's time so far (runtime clock); 0 before it started. */
uint64_t pc__run_ms(const run_t *r);
/*
 * The run's one transition (run_lifecycle.h): every change of r->state
 * goes through here. One the table does not allow is refused (the state
 * stays), counted and logged. An allowed one is traced (PINCER_TRACE=run)
 * and carried to the views projected from the state: the registry's
 * entry when the run starts (it finishes from the session, once the end
 * is told), the session's view whenever it changes.
 */
void pc__run_set(run_t *r, pc_run_lc_t to, const char *why);
/* The merged message_sending result: cancel drops the reply (the run
 * ends ok and silent); content replaces it with one payload of that text
 * (none when the text is empty). A rewrite that cannot be made drops the
 * reply rather than send what a hook replaced. */
void pc__run_apply_message_sending(run_t *r, const pc_hook_done_msg_t *d);
/* {providerOverride?, modelOverride?}: each replaces its half of the
 * primary model; a modelOverride "provider/model" naming a configured
 * provider gives both. An override that names no configured provider is
 * ignored, as are the hook's failures (§10.2). */
void pc__run_apply_model_override(run_t *r, const pc_hook_done_msg_t *d);
/* agent_end: every end of the run, observed. `payloads` (borrowed) are
 * the terminal event's. */
void pc__run_hook_agent_end(const run_t *r, pc_run_status_t status, const char *error, const cJSON *payloads);
/* message_sending, once, for an ok run with a reply (not a silent one):
 * true when its chain runs; pc__run_finish() is called again at its DONE. */
bool pc__run_hook_message_sending(pc_ctx_t *ctx, run_t *r, const pc_run_action_t *act);
bool pc__run_hook_model_resolve(pc_ctx_t *ctx, run_t *r);

/* The tags of the run's hook chains. */
enum { PC__RUN_TAG_MODEL_RESOLVE = 1, PC__RUN_TAG_MESSAGE_SENDING };

#endif
