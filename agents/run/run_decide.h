/*
 * The decisions of layer 1, the run loop (spec §1.4, §1.7, §1.9-§1.13,
 * §1.14, §1.18, §11.2): after every attempt the run actor describes what
 * happened in a pc_run_outcome_t and asks pc_run_decide() what to do next;
 * before every attempt it asks pc_run_begin_iteration(). Both apply their
 * state changes to the pc_run_state_t and say what they did in a
 * pc_run_action_t. Everything the actor must do (compact, truncate, sleep,
 * persist a cooldown, dispatch) is named in the action; nothing is done here.
 *
 * Recovery that needs I/O in the middle of the pipeline (timeout
 * compaction, overflow compaction, tool-result truncation) is a round trip:
 * the action asks for it, the actor performs it, writes the result into
 * outcome.recovery and calls pc_run_decide() again with the same outcome.
 * The second call skips the bookkeeping already done and resumes the
 * pipeline where OpenClaw would have continued after the await.
 *
 * Pure: no I/O, no clock (outcome.now_ms), no globals, no allocation.
 */
#ifndef PINCER_AGENTS_RUN_RUN_DECIDE_H
#define PINCER_AGENTS_RUN_RUN_DECIDE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/error.h"
#include "agents/providers/providers.h"
#include "run_state.h"

#ifdef __cplusplus
extern "C" {
#endif

/* §1.10 same-model rate-limit retry: 10 s per retry so far + 1, and a
 * retry-after honoured, both capped at 60 s (MAX_SHORT_WINDOW_RETRY_AFTER). */
#define PC_RUN_RATE_LIMIT_RETRY_STEP_MS 10000u
#define PC_RUN_RATE_LIMIT_RETRY_MAX_MS 60000u
/* §1.12 / §1.18 reply-runner retries around the whole chain. */
#define PC_RUN_OVERLOAD_RETRY_BASE_MS 2500u  /* OVERLOAD_RETRY_BASE_DELAY_MS */
#define PC_RUN_OVERLOAD_RETRY_MAX_MS 30000u  /* OVERLOAD_RETRY_MAX_DELAY_MS */
#define PC_RUN_MAX_OVERLOAD_RETRIES 10u      /* MAX_OVERLOAD_RETRIES */
#define PC_RUN_TRANSIENT_HTTP_RETRY_MS 2500u /* TRANSIENT_HTTP_RETRY_DELAY_MS, once */

/* ---- §1.9 resolveRunFailoverDecision ---- */

typedef enum pc_run_failover_action {
	PC_FAILOVER_ACT_CONTINUE_NORMAL = 0,
	PC_FAILOVER_ACT_ROTATE_PROFILE,
	PC_FAILOVER_ACT_FALLBACK_MODEL,
	PC_FAILOVER_ACT_SURFACE_ERROR,
	PC_FAILOVER_ACT_RETURN_ERROR_PAYLOAD,
} pc_run_failover_action_t;

typedef enum pc_run_failover_stage {
	PC_FAILOVER_STAGE_RETRY_LIMIT = 0,
	PC_FAILOVER_STAGE_PROMPT,
	PC_FAILOVER_STAGE_ASSISTANT,
} pc_run_failover_stage_t;

typedef struct pc_run_failover_input {
	pc_run_failover_stage_t stage;
	pc_failover_reason_t reason; /* PC_RUN_REASON_NONE when none */
	bool failover_failure;       /* the failure is failover-eligible */
	bool fallback_configured;    /* another model candidate is left */
	bool profile_rotated;        /* rotation was already tried (or impossible) */
	bool allow_format_retry;
	bool aborted;                /* external abort */
	bool timed_out;
	bool idle_timed_out;
	bool timed_out_during_compaction;
	bool timed_out_during_tool;
	bool timed_out_by_run_budget;
} pc_run_failover_input_t;

typedef struct pc_run_failover_decision {
	pc_run_failover_action_t action;
	pc_failover_reason_t reason; /* PC_RUN_REASON_NONE when none */
} pc_run_failover_decision_t;

/* The stage's decision table, first match wins (§1.9). PC_EINVAL for NULL. */
int pc_run_failover_decide(const pc_run_failover_input_t *in, pc_run_failover_decision_t *out);

/* mergeRetryFailoverReason (newest): current ?? previous ?? (timed out ? timeout : none). */
pc_failover_reason_t pc_run_merge_retry_reason(pc_failover_reason_t previous,
					       pc_failover_reason_t current, bool timed_out);

/* shouldEscalateRetryLimit: r not in {none, timeout, model_not_found, format,
 * session_expired}. */
bool pc_run_should_escalate_retry_limit(pc_failover_reason_t r);

/* ---- §1.10 / §1.18 backoff ---- */

/* resolveShortWindowRateLimitRetry: a rate limit that clears within a
 * minute (retry-after <= 60 s, or per-minute wording without long-window
 * wording). `text` may be NULL. */
bool pc_run_is_short_window_rate_limit(const char *text, uint64_t retry_after_ms);

/* resolveSameModelRateLimitRetryDelayMs: max(min(60 s, 10 s x (n + 1)),
 * min(60 s, retry_after)): 10 s, 20 s, 30 s with no retry-after. */
uint64_t pc_run_same_model_rate_limit_delay_ms(uint32_t retries_so_far, uint64_t retry_after_ms);

/* The reply runner's overload retry before retry `attempt` (1-based):
 * 2.5 s doubling to 30 s; 0 once attempt > PC_RUN_MAX_OVERLOAD_RETRIES
 * (no more retries) or for attempt 0. */
uint64_t pc_run_overload_retry_delay_ms(uint32_t attempt);

/* computeBackoff: min(max, round(initial x factor^(attempt-1) x (1 + jitter x
 * rand01))), attempt >= 1 (0 counts as 1); `rand01` in [0, 1] comes from
 * the caller so the function stays pure. */
typedef struct pc_backoff_policy {
	uint64_t initial_ms;
	uint64_t max_ms;
	double factor;
	double jitter;
} pc_backoff_policy_t;
uint64_t pc_backoff_compute(const pc_backoff_policy_t *p, uint32_t attempt, double rand01);

/* ---- §1.11 auth-profile cooldowns ---- */

/* The cooldown after the `error_count`-th failure (1-based; 0 counts as 1)
 * with reason `r`: billing billing_base_ms doubling up to 24 h;
 * auth_permanent 10 min doubling up to 60 min; any other 30 s, 60 s, then
 * 5 min. */
uint64_t pc_auth_cooldown_ms(pc_failover_reason_t r, uint32_t error_count, uint64_t billing_base_ms);

/* ---- §11.2 thinking fallback ---- */

/* pickFallbackThinkingLevel: from a provider's error text, a think level not
 * yet tried (bit 1 << level set in `attempted`): a reasoning-constraint
 * error ("requires non-zero reasoning") -> minimal; a "supported values"
 * list -> its first untried level; "not supported" without a list -> off.
 * Only texts about a thinking / reasoning parameter count (model names
 * contain such words too). Returns true with *out set, else false. */
bool pc_run_pick_fallback_thinking(const char *message, uint32_t attempted, pc_think_level_t *out);

/* ---- §1.14 liveness ---- */

typedef struct pc_run_liveness_input {
	bool incomplete_turn;
	bool compaction_interrupted; /* prompt error from compaction, or timed out during it */
	bool aborted;
	bool timed_out;
	uint32_t payload_count;
	bool assistant_stop_error;
} pc_run_liveness_input_t;

/* resolveRunLivenessState, first match: incomplete -> abandoned; compaction
 * interrupted -> paused; (aborted or timed out) and no payload -> blocked;
 * assistant error -> blocked; else working. NULL is working. */
pc_run_liveness_t pc_run_liveness(const pc_run_liveness_input_t *in);

/* ---- the attempt outcome ---- */

/* Where a prompt error came from (promptErrorSource). */
typedef enum pc_run_prompt_error {
	PC_PROMPT_ERR_NONE = 0,
	PC_PROMPT_ERR_PROVIDER,   /* the provider call failed after it started ("prompt") */
	PC_PROMPT_ERR_SETUP,      /* failed before the provider was reached */
	PC_PROMPT_ERR_COMPACTION, /* compaction inside the attempt failed */
	PC_PROMPT_ERR_HOOK_BLOCK, /* before_agent_run hook refused the run */
} pc_run_prompt_error_t;

typedef enum pc_run_recovery_result {
	PC_RECOVERY_NOT_RUN = 0, /* not requested (yet) */
	PC_RECOVERY_DONE,        /* compacted / truncated something */
	PC_RECOVERY_NOTHING,     /* failed, or nothing to do */
} pc_run_recovery_result_t;

typedef struct pc_run_outcome {
	uint64_t now_ms;      /* for cooldowns */
	int64_t duration_ms;  /* of the attempt, for the trace */

	/* step 0 and the loop guard */
	bool cancelled;        /* the user aborted: never failed over */
	bool loop_guard_abort; /* the post-compaction guard aborted the attempt */
	bool aborted;          /* any other external abort of the attempt */

	/* step 1 and 3 bookkeeping */
	pc_usage_t usage;      /* this attempt's usage, summed over its calls; zero when none */
	pc_usage_t last_call;  /* its latest call that reported usage; zero: none (then
				* `usage` stands for it) */
	uint32_t compaction_count; /* compactions inside the attempt */
	bool replay_unsafe;    /* replay metadata: a mutating tool ran */
	bool had_side_effects;

	/* step 2 breaker */
	bool idle_timed_out;
	bool completed_progress; /* hasCompletedModelProgressForIdleBreaker */
	bool output_started;     /* visible text streamed or a tool started: a
				  * replay of the turn is no longer safe (§1.12) */

	/* timeouts (steps 6, 16, 18) */
	bool timed_out;
	bool timed_out_during_compaction;
	bool timed_out_during_tool;
	bool timed_out_by_run_budget;
	int64_t prompt_tokens;  /* prompt side of the latest call (input + cache);
				 * 0: taken from the last usage recorded */
	int64_t context_tokens; /* the effective context window */

	/* step 4 and 5 */
	bool preflight_handled;   /* the attempt truncated tool results before prompting */
	bool mid_turn;            /* recovery happened mid-turn */
	bool live_switch_requested;
	bool outbound_delivered;  /* canRestartForLiveSwitch inputs */
	bool approval_prompt_sent;
	bool tool_error;
	uint32_t tool_metas;
	uint32_t assistant_texts;

	/* step 7 context overflow: failure.reason == context_overflow */
	bool compaction_failure_text; /* isCompactionFailureError */
	bool oversized_tool_results;  /* sessionLikelyHasOversizedToolResults */
	bool user_turn_persisted;     /* the failed attempt already stored the user turn */

	/* steps 8 and 10 */
	pc_run_prompt_error_t prompt_error;
	bool has_failure;             /* `failure` describes the prompt or assistant error */
	pc_failover_result_t failure; /* the classifier's verdict on it */
	const char *error_text;       /* its text (hook message, provider error); may be NULL */
	const char *error_code;       /* provider error code for the trace; may be NULL */
	bool allow_format_retry;
	uint32_t image_too_large_mb;  /* parseImageSizeError matched: the limit; 0 none */

	/* steps 11-16: the assistant message */
	bool has_assistant;
	bool assistant_stop_error;    /* stopReason == "error" */
	bool visible_text;
	bool reasoning_only;
	int64_t output_tokens;
	bool image_dimension_error;
	bool terminal_state;          /* the turn reached an intentional terminal state */

	/* steps 18-29 */
	bool recovered_final_assistant; /* a completed final message despite the timeout */
	bool messaging_delivered;
	uint32_t payload_count;
	bool silent;                  /* NO_REPLY / silent empty reply */
	bool nonvisible_retry_eligible; /* shouldApplyNonVisibleTurnRetryGuard */
	bool empty_response;          /* zero-content response */
	bool nothing_returned;        /* no assistant, payloads, tools, items or side effects */
	bool pending_work;            /* client tool calls, yield, approval, tool error, side effects */
	bool incomplete_turn;         /* resolveIncompleteTurnPayloadText gave a text */
	bool finalize_revision_requested;
	bool client_tool_calls;
	bool yielded;

	/* results of recovery requested by an earlier call for this attempt */
	struct {
		pc_run_recovery_result_t timeout_compaction;
		pc_run_recovery_result_t overflow_compaction;
		pc_run_recovery_result_t truncation;
	} recovery;
} pc_run_outcome_t;

/* ---- the action ---- */

typedef enum pc_run_next {
	PC_RUN_DISPATCH = 0, /* run the next attempt now */
	PC_RUN_RETRY,        /* back to the iteration check, same model (after delay_ms) */
	PC_RUN_COMPACT,      /* compact (`compaction`), then decide again with the result */
	PC_RUN_TRUNCATE,     /* truncate oversized tool results, then decide again */
	PC_RUN_FALLBACK,     /* the state moved to the next model candidate; iteration check */
	PC_RUN_FINISH_OK,    /* return the attempt's payloads */
	PC_RUN_FINISH_ERROR, /* return an error payload (`error`, `message`) */
	PC_RUN_FAIL,         /* the run fails with `error` (no payload) */
} pc_run_next_t;

typedef enum pc_run_retry_kind {
	PC_RETRY_NONE = 0,
	PC_RETRY_PREFLIGHT,             /* step 4 */
	PC_RETRY_TIMEOUT_COMPACTED,     /* step 6 */
	PC_RETRY_OVERFLOW_COMPACTED,    /* step 7a/7b */
	PC_RETRY_TRUNCATED,             /* step 7c */
	PC_RETRY_AUTH_REFRESH,          /* steps 10.3 and 14 */
	PC_RETRY_ROTATE_PROFILE,        /* steps 10.8 and 16 */
	PC_RETRY_THINKING_FALLBACK,     /* steps 10.10 and 11 */
	PC_RETRY_EMPTY_ERROR,           /* step 13 */
	PC_RETRY_SAME_MODEL_RATE_LIMIT, /* step 16 */
	PC_RETRY_SAME_MODEL_IDLE,       /* step 16 */
	PC_RETRY_REASONING_ONLY,        /* step 21 */
	PC_RETRY_MISSING_ASSISTANT,     /* step 22 */
	PC_RETRY_EMPTY_RESPONSE,        /* step 23 */
	PC_RETRY_COMPACTION_CONTINUATION, /* step 25 */
	PC_RETRY_FINALIZE_REVISION,     /* step 28 */
} pc_run_retry_kind_t;

typedef enum pc_run_compaction {
	PC_COMPACTION_NONE = 0,
	PC_COMPACTION_TIMEOUT_RECOVERY, /* trigger "timeout_recovery", target "budget" */
	PC_COMPACTION_OVERFLOW,         /* trigger "overflow" */
} pc_run_compaction_t;

typedef enum pc_run_error_kind {
	PC_RUN_ERR_NONE = 0,
	/* FINISH_ERROR (meta.error.kind) */
	PC_RUN_ERR_CONTEXT_OVERFLOW,
	PC_RUN_ERR_COMPACTION_FAILURE,
	PC_RUN_ERR_ROLE_ORDERING,
	PC_RUN_ERR_IMAGE_SIZE,
	PC_RUN_ERR_HOOK_BLOCK,
	PC_RUN_ERR_RETRY_LIMIT,
	PC_RUN_ERR_INCOMPLETE_TURN,
	PC_RUN_ERR_TIMEOUT,           /* step 18's timeout payload (no kind in OpenClaw) */
	/* FAIL */
	PC_RUN_ERR_ABORTED,           /* user abort: never failed over */
	PC_RUN_ERR_LIVE_MODEL_SWITCH, /* restart with the newly selected model */
	PC_RUN_ERR_LOOP_PERSISTED,    /* PostCompactionLoopPersistedError */
	PC_RUN_ERR_FAILOVER,          /* a failover error with no candidate left */
	PC_RUN_ERR_PROMPT_FAILED,     /* a prompt error surfaced as is */
} pc_run_error_kind_t;

/* "context_overflow", "retry_limit", ... (the spec's kinds where it has
 * one); "none"; "unknown" out of range. Static. */
const char *pc_run_error_kind_name(pc_run_error_kind_t k);

#define PC_RUN_MESSAGE_MAX 384u

typedef struct pc_run_action {
	pc_run_next_t next;
	pc_run_retry_kind_t retry;
	pc_run_compaction_t compaction;
	pc_run_error_kind_t error;
	pc_failover_reason_t reason; /* the failure reason acted on; NONE when none */
	int status;                  /* HTTP-like status of a failover error, 0 none */
	uint64_t delay_ms;           /* sleep (abort-aware) before the next attempt */
	pc_run_liveness_t liveness;  /* for FINISH_* */
	bool replay_invalid;         /* for FINISH_* */
	bool suspend_session;        /* rate_limit / billing failover with a session key */
	bool silent;                 /* FINISH_OK: reply NO_REPLY */
	bool idle_timeout;           /* PC_RUN_ERR_TIMEOUT: the idle watchdog, not the run timer */
	/* FALLBACK: the reply runner's replay of the whole chain from its first
	 * candidate (§1.12), after delay_ms; the candidates' profiles start
	 * from the process's cooldowns again */
	bool chain_replay;
	uint32_t overload_retry;     /* chain_replay: the overload retry number, 0 transient */
	bool summary_as_detail;      /* FAIL: `message` is what the user reads; the chain's
				      * summary is meta.error.message (a pure overload, §1.12) */
	bool own_message;            /* FALLBACK / FAIL: `message` is the FailoverError's own
				      * text (§1.10's overloaded / rate-limited escalation),
				      * which is the candidate's error, not the provider's words */

	/* Profile bookkeeping for the auth-profile store. */
	bool mark_profile_failed;
	uint32_t failed_profile;
	pc_failover_reason_t profile_failure_reason;
	uint64_t profile_cooldown_ms;
	uint32_t failed_candidate;   /* the candidate `failed_profile` belongs to */
	bool mark_profile_success;
	/* start_candidate probed a cooled-down primary: the caller records now
	 * as its provider's last probe (the 30 s throttle, §1.12) */
	bool mark_probe;

	/* DISPATCH: what the next prompt is (then cleared in the state). */
	pc_run_prompt_override_t prompt;
	bool suppress_user_persist;

	char message[PC_RUN_MESSAGE_MAX]; /* the user-facing payload text, or the
					   * error message of a FAIL; "" none */
	char detail[PC_RUN_MESSAGE_MAX];  /* FINISH_ERROR: meta.error.message */
} pc_run_action_t;

/*
 * ITER_CHECK (§1.4, Appendix A): before every attempt. Budget left: counts
 * the iteration, records the think level as tried, -> PC_RUN_DISPATCH.
 * Exhausted: the retry_limit decision (§1.13) -> PC_RUN_FALLBACK /
 * PC_RUN_FAIL (failover to a further model), or PC_RUN_FINISH_ERROR
 * retry_limit, liveness blocked. PC_EINVAL for NULL.
 */
int pc_run_begin_iteration(pc_run_state_t *s, pc_run_action_t *a);

/*
 * A candidate's start (§1.11, §1.12), once its cooldowns (and its
 * provider's last probe, cand.last_probe_ms) are seeded: it begins with
 * its first profile out of cooldown, the profiles passed over traced as
 * skipped rotate_profile entries with their cooldown reasons ->
 * PC_RUN_DISPATCH. When all are in cooldown, resolveCooldownDecision
 * decides on the profiles' reason (the most severe: auth_permanent,
 * billing, auth, else the soonest to expire's):
 *   - auth, auth_permanent: skipped;
 *   - billing: probed only as the primary, when a primary probe is due
 *     (below) or, with no fallback, when the throttle is open;
 *   - others: the primary is probed only when a probe is due; a fallback
 *     candidate is probed for a transient reason (rate_limit, overloaded,
 *     timeout, server_error, unknown...), at most once per provider per
 *     run (a probe that failed for model_not_found, format, auth or
 *     session_expired gives the slot back).
 * A primary probe is due when there are fallbacks, the provider's last
 * probe is PC_RUN_PROBE_INTERVAL_MS old or more, and the soonest cooldown
 * ends within PC_RUN_PROBE_MARGIN_MS (a.mark_probe then). A probe starts
 * on the profile whose cooldown ends first (-> PC_RUN_DISPATCH); a skip
 * is a skipped fallback_model entry -> PC_RUN_FALLBACK, or PC_RUN_FAIL
 * when no candidate is left. A locked profile is never passed over.
 * PC_EINVAL for NULL.
 */
int pc_run_start_candidate(pc_run_state_t *s, uint64_t now_ms, pc_run_action_t *a);

/*
 * EVAL (§1.7): the ordered post-attempt pipeline, first match wins. Applies
 * its state changes to `s` and describes the next step in `a`.
 * PC_EINVAL for NULL arguments.
 */
int pc_run_decide(pc_run_state_t *s, const pc_run_outcome_t *o, pc_run_action_t *a);

#ifdef __cplusplus
}
#endif
#endif
