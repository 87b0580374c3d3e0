/*
 * The run-scoped state of layer 1 (spec §1.3): every counter that survives
 * from one attempt to the next, with its cap; the think level and the levels
 * already tried; where the run is in the model fallback chain and in the
 * current model's auth profiles; the sticky prompt additions of §1.5; the
 * idle breaker (§1.15) and the post-compaction guard (§1.16); accumulated
 * usage; liveness (§1.14); and the attempts trace (§1.19).
 *
 * The run actor owns one pc_run_state_t and changes it only through the
 * decision functions in run_decide.h. Pure data: no I/O, no clock (the
 * caller passes the time), no globals, no allocation. Any thread.
 *
 * Scopes. OpenClaw's model fallback chain calls the whole run loop again
 * for every candidate, so its "run-scoped" counters are really per
 * candidate. Here one state walks the whole chain: `cand` holds what starts
 * afresh on every candidate (iteration budget, retry counters, think level,
 * profile position, sticky additions), the rest (usage, trace, breaker,
 * compaction count, replay state) covers the whole run.
 */
#ifndef PINCER_AGENTS_RUN_RUN_STATE_H
#define PINCER_AGENTS_RUN_RUN_STATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/error.h"
#include "agents/providers/providers.h"
#include "idle_breaker.h"
#include "loop_guard.h"
#include "agents/config/config.h"

#ifdef __cplusplus
extern "C" {
#endif


/* ---- §1.3 caps of the independent retry counters ---- */
#define PC_RUN_MAX_OVERFLOW_COMPACTIONS 3     /* MAX_OVERFLOW_COMPACTION_ATTEMPTS */
#define PC_RUN_MAX_TIMEOUT_COMPACTIONS 2      /* MAX_TIMEOUT_COMPACTION_ATTEMPTS */
#define PC_RUN_MAX_REASONING_ONLY_RETRIES 2   /* DEFAULT_REASONING_ONLY_RETRY_LIMIT */
#define PC_RUN_MAX_EMPTY_RESPONSE_RETRIES 1   /* DEFAULT_EMPTY_RESPONSE_RETRY_LIMIT */
#define PC_RUN_MAX_EMPTY_ERROR_RETRIES 3      /* MAX_EMPTY_ERROR_RETRIES */
#define PC_RUN_MAX_MISSING_ASSISTANT_RETRIES 1 /* MAX_MISSING_ASSISTANT_RETRIES */
#define PC_RUN_MAX_COMPACTION_CONTINUATIONS 1 /* compactionContinuationRetryAttempts cap */
#define PC_RUN_MAX_FINALIZE_REVISIONS 3       /* MAX_BEFORE_AGENT_FINALIZE_REVISIONS */
#define PC_RUN_MAX_SAME_MODEL_IDLE_RETRIES 1  /* MAX_SAME_MODEL_IDLE_TIMEOUT_RETRIES */
#define PC_RUN_MAX_SAME_MODEL_RATE_LIMIT_RETRIES 3 /* MAX_SAME_MODEL_RATE_LIMIT_RETRIES */

/* ---- §1.11 / §1.8 auth-profile cooldowns (markAuthProfileFailure) ---- */
#define PC_AUTH_COOLDOWN_FIRST_MS 30000u            /* 1st error: 30 s */
#define PC_AUTH_COOLDOWN_SECOND_MS 60000u           /* 2nd error: 60 s */
#define PC_AUTH_COOLDOWN_MAX_MS (5u * 60u * 1000u)  /* 3rd and later: 5 min */
#define PC_AUTH_BILLING_BASE_MS ((uint64_t)5 * 3600 * 1000)  /* billingBackoffHours = 5 */
#define PC_AUTH_BILLING_MAX_MS ((uint64_t)24 * 3600 * 1000)  /* billingMaxHours = 24 */
#define PC_AUTH_PERMANENT_BASE_MS ((uint64_t)10 * 60 * 1000) /* auth_permanent: 10 min */
#define PC_AUTH_PERMANENT_MAX_MS ((uint64_t)60 * 60 * 1000)  /* auth_permanent: 60 min */

/* Storage bounds of this implementation (not from the spec). */
#define PC_RUN_PROBE_INTERVAL_MS 30000u      /* MIN_PROBE_INTERVAL_MS: one primary probe per provider */
#define PC_RUN_PROBE_MARGIN_MS (2u * 60u * 1000u) /* PROBE_MARGIN_MS: probed this close to expiry */

#define PC_RUN_TRACE_MAX 256u     /* trace entries kept (past the largest iteration
				   * budget); later ones are counted only */
#define PC_RUN_TRACE_CODE_MAX 32u /* bytes kept of an error code, NUL included */

/* "No reason": the spec's null FailoverReason. */
#define PC_RUN_REASON_NONE PC_FAILOVER_REASON_COUNT

/* §11.2 think levels: pc_think_level_t is the provider layer's
 * (agents/providers/request.h); this many levels exist. */
#define PC_RUN_THINK_COUNT ((unsigned)PC_THINK_MAX + 1u)

/* ---- §1.14 liveness ---- */
typedef enum pc_run_liveness {
	PC_LIVENESS_WORKING = 0,
	PC_LIVENESS_BLOCKED,
	PC_LIVENESS_PAUSED,
	PC_LIVENESS_ABANDONED
} pc_run_liveness_t;

const char *pc_run_liveness_name(pc_run_liveness_t l);

/* ---- §1.5 sticky prompt additions and overrides ---- */
typedef enum pc_run_instruction {
	PC_RUN_INSTR_REASONING_ONLY = 0,   /* REASONING_ONLY_RETRY_INSTRUCTION */
	PC_RUN_INSTR_EMPTY_RESPONSE,       /* EMPTY_RESPONSE_RETRY_INSTRUCTION */
	PC_RUN_INSTR_COMPACTION_CONTINUATION, /* COMPACTION_CONTINUATION_RETRY_INSTRUCTION */
	PC_RUN_INSTR_COUNT
} pc_run_instruction_t;

/* What replaces the user's prompt on the next attempt (not appended). */
typedef enum pc_run_prompt_override {
	PC_RUN_PROMPT_USER = 0,          /* the user's prompt */
	PC_RUN_PROMPT_MID_TURN,          /* MID_TURN_PRECHECK_CONTINUATION_PROMPT */
	PC_RUN_PROMPT_FINALIZE_REVISION, /* BEFORE_AGENT_FINALIZE_RETRY_PROMPT_PREFIX + reason */
} pc_run_prompt_override_t;

/* Pincer's wording of the fixed texts (the spec paraphrases OpenClaw's).
 * Static, never NULL; "" out of range. */
const char *pc_run_instruction_text(pc_run_instruction_t i);
const char *pc_run_prompt_override_text(pc_run_prompt_override_t p);

/* ---- §1.19 attempts trace ---- */
typedef enum pc_run_trace_result {
	PC_TRACE_SUCCESS = 0,
	PC_TRACE_ROTATE_PROFILE,
	PC_TRACE_FALLBACK_MODEL,
	PC_TRACE_TIMEOUT,
	PC_TRACE_SURFACE_ERROR,
	PC_TRACE_SAME_MODEL_RATE_LIMIT,
	PC_TRACE_ERROR,
} pc_run_trace_result_t;

typedef enum pc_run_stage {
	PC_STAGE_PROMPT = 0,
	PC_STAGE_ASSISTANT,
	PC_STAGE_RUN, /* the run itself: retry limit or breaker exhaustion */
} pc_run_stage_t;

/* "success", "rotate_profile", ... (the spec's strings); "unknown" out of range. */
const char *pc_run_trace_result_name(pc_run_trace_result_t r);

typedef struct pc_run_trace_entry {
	pc_run_trace_result_t result;
	pc_run_stage_t stage;
	pc_failover_reason_t reason; /* PC_RUN_REASON_NONE when none */
	int status;                  /* HTTP-like status, 0 when none */
	char code[PC_RUN_TRACE_CODE_MAX]; /* provider error code, "" when none */
	uint32_t candidate;          /* index of the provider/model in the chain */
	uint32_t profile;            /* index of the auth profile of that candidate */
	int64_t duration_ms;         /* of the attempt */
	uint64_t delay_ms;           /* the wait decided before the next attempt, 0: none */
	bool skipped;                /* no request: the profile or model was in cooldown */
	bool probe;                  /* asked while every profile cooled down (§1.12 probe) */
} pc_run_trace_entry_t;

/* ---- configuration ---- */

/* §1.4: 24 + 8 x max(1, profiles), clamped to 32..160, each constant
 * overridable through `cfg` (NULL: the defaults). Always >= 1. */
uint32_t pc_run_budget(size_t profile_count, const pc_run_retries_config_t *cfg);

typedef struct pc_run_config {
	/* The fallback chain: how many auth profiles each candidate model has
	 * (0 counts as one: the env/config key). candidate_count >= 1. */
	uint32_t candidate_count;
	uint32_t profile_counts[PC_RUN_MAX_CANDIDATES];
	pc_run_retries_config_t retries;
	uint32_t rate_limit_rotations;  /* auth.cooldowns.rateLimitedProfileRotations */
	uint32_t overload_rotations;    /* auth.cooldowns.overloadedProfileRotations */
	uint64_t overloaded_backoff_ms; /* auth.cooldowns.overloadedBackoffMs */
	uint64_t billing_backoff_ms;    /* billingBackoffHours(ByProvider), as ms */
	uint32_t idle_breaker_cap;      /* 0 disables the breaker */
	bool loop_guard_enabled;        /* tools.loopDetection.enabled != false */
	uint32_t loop_guard_window;     /* 0: the default */
	pc_think_level_t think_level;   /* the initial level (§1.2 step 11) */
	bool runtime_auth;              /* credentials can be refreshed (token exchange) */
	bool has_session_key;           /* FailoverErrors may ask to suspend the session */
	bool profile_locked;            /* authProfileIdSource == "user": never rotate */
	/* Which provider each candidate is of: candidates with one id share
	 * the run's one transient cooldown probe of that provider (§1.12).
	 * Ids are < PC_RUN_MAX_CANDIDATES; all zero: one provider. */
	uint8_t provider_id[PC_RUN_MAX_CANDIDATES];
} pc_run_config_t;

/* Fills every field with the spec's defaults and a one-candidate,
 * one-profile chain. NULL is ignored. */
void pc_run_config_defaults(pc_run_config_t *cfg);

/* ---- the state ---- */

/* What starts afresh on every model candidate. */
typedef struct pc_run_candidate_state {
	uint32_t index;         /* position in the fallback chain */
	uint32_t profile;       /* current auth profile */
	uint32_t profile_count; /* >= 1 */
	uint32_t budget;        /* pc_run_budget(profile_count, retries) */
	uint32_t iterations;    /* runLoopIterations */

	uint32_t overflow_compactions;
	uint32_t timeout_compactions;
	bool truncation_attempted;
	uint32_t reasoning_only_retries;
	uint32_t empty_response_retries;
	uint32_t empty_error_retries;
	uint32_t missing_assistant_retries;
	uint32_t compaction_continuations;
	uint32_t finalize_revisions;
	uint32_t same_model_idle_retries;
	uint32_t same_model_rate_limit_retries; /* consecutive */
	uint32_t rate_limit_rotations;
	uint32_t overload_rotations;
	bool auth_refresh_pending;

	pc_think_level_t think;
	uint32_t attempted_thinking; /* bit (1 << level) per level tried */
	pc_failover_reason_t last_retry_reason; /* PC_RUN_REASON_NONE when none */

	bool instructions[PC_RUN_INSTR_COUNT]; /* sticky additions, in order */
	pc_run_prompt_override_t prompt_override; /* for the next attempt only */
	bool suppress_user_persist;

	/* Cooldowns of this candidate's profiles, seeded by the caller from the
	 * auth-profile store (pc_run_profile_seed) and updated when a profile is
	 * marked failed. */
	uint64_t cooldown_until_ms[PC_RUN_MAX_PROFILES];
	uint64_t last_failure_ms[PC_RUN_MAX_PROFILES];
	uint32_t error_count[PC_RUN_MAX_PROFILES];
	pc_failover_reason_t cooldown_reason[PC_RUN_MAX_PROFILES]; /* NONE: unknown */
	/* When the process last probed this candidate's provider while it
	 * cooled down (wall ms, 0: never), seeded by the caller (§1.12). */
	uint64_t last_probe_ms;
	bool probing;         /* it runs although every profile cools down (a probe) */
	bool transient_probe; /* ... as its provider's one transient probe */
} pc_run_candidate_state_t;

typedef struct pc_run_state {
	pc_run_config_t cfg;
	pc_run_candidate_state_t cand;

	pc_idle_breaker_t breaker; /* survives rotation and fallback */
	pc_loop_guard_t guard;
	pc_usage_t usage;          /* accumulated over every attempt */
	pc_usage_t last_call_usage; /* the latest call that reported usage (spec §11.3) */
	uint32_t auto_compactions;
	pc_run_liveness_t liveness;
	bool replay_invalid;
	bool had_side_effects;
	uint32_t probe_used; /* bit per provider id: its transient probe is spent (§1.12) */

	/* The reply runner around the chain (§1.12): the failures of the
	 * current pass over the chain, how many were overloads, the replays
	 * so far, and whether observable work began (no replay after it). */
	uint32_t chain_failures, chain_overloads;
	uint32_t overload_replays;
	bool transient_replay_used;
	bool output_started;

	/* trace_count entries, grown on the heap as attempts end (most runs
	 * have one): pc_run_state_fini frees them */
	pc_run_trace_entry_t *trace;
	uint32_t trace_count, trace_cap;
	uint32_t trace_dropped; /* past PC_RUN_TRACE_MAX, or out of memory */
} pc_run_state_t;

/*
 * Initialises `s` for a run with configuration `cfg` (copied). PC_EINVAL
 * for NULL arguments, candidate_count 0 or > PC_RUN_MAX_CANDIDATES, a
 * profile count > PC_RUN_MAX_PROFILES or a think level out of range.
 */
int pc_run_state_init(pc_run_state_t *s, const pc_run_config_t *cfg);

/* Frees what `s` holds (its trace, a long loop-guard window); init may
 * follow. NULL is ignored. */
void pc_run_state_fini(pc_run_state_t *s);

/* Seeds the cooldown of profile `profile` of the current candidate from the
 * auth-profile store. PC_EINVAL for NULL or an index out of range. */
int pc_run_profile_seed(pc_run_state_t *s, uint32_t profile, uint64_t cooldown_until_ms,
			uint64_t last_failure_ms, uint32_t error_count);

/* The failure that put profile `profile` of the current candidate in its
 * cooldown, so a later skip can say why. PC_EINVAL for NULL or an index
 * out of range. */
int pc_run_profile_seed_reason(pc_run_state_t *s, uint32_t profile, pc_failover_reason_t reason);

/* resolveAuthProfileOrder's start: after seeding, the candidate begins with
 * its first profile not in cooldown at `now_ms` (the first one when all
 * are). Returns the profile chosen. NULL is ignored (0). */
uint32_t pc_run_start_profile(pc_run_state_t *s, uint64_t now_ms);

/*
 * Moves to candidate `index` of the fallback chain (§1.12): everything in
 * `cand` starts afresh (budget from that candidate's profile count, first
 * profile, the initial think level, no counters, no sticky additions, no
 * cooldowns until seeded); the run-wide part is kept. PC_EINVAL for NULL or
 * an index out of range.
 */
int pc_run_enter_candidate(pc_run_state_t *s, uint32_t index);

/* True when the candidate's think level `t` was already tried. */
bool pc_run_thinking_attempted(const pc_run_state_t *s, pc_think_level_t t);

/*
 * The sticky additions (§1.5) to append to the next prompt, in order:
 * writes up to `cap` static texts to `out` and their count to *n.
 * PC_EINVAL for NULL arguments.
 */
int pc_run_prompt_additions(const pc_run_state_t *s, const char **out, size_t cap, size_t *n);

/* Appends a trace entry (dropping it and counting it when the trace is
 * full or out of memory). `code` may be NULL; it is truncated to fit. NULL
 * `s` is ignored. */
void pc_run_trace_add(pc_run_state_t *s, pc_run_trace_result_t result, pc_run_stage_t stage,
		      pc_failover_reason_t reason, int status, const char *code,
		      int64_t duration_ms);

#ifdef __cplusplus
}
#endif
#endif
