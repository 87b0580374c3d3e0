/*
 * The words a configuration speaks, and their defaults: the provider APIs,
 * thinking levels, queue modes, the run-retry overrides, the tool mode, the
 * idle breaker's cap and the stuck-session thresholds. They are config's,
 * so config parses and validates without knowing the parts that use them;
 * those parts (providers, the loop) take them from here.
 *
 * Pure: no I/O, no state. Any thread.
 */
#ifndef PINCER_AGENTS_CONFIG_VOCAB_H
#define PINCER_AGENTS_CONFIG_VOCAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- provider APIs (the providers' wire formats, providers/wire.h) ---- */

typedef enum pc_provider_api {
	PC_API_NONE = 0,
	PC_API_OPENAI_COMPLETIONS = 1, /* "openai-completions": OpenAI chat completions
					* and every compatible server (vLLM, llama.cpp,
					* Ollama, LM Studio, OpenRouter, ...) */
	PC_API_ANTHROPIC_MESSAGES = 2, /* "anthropic-messages" */
	PC_API_COUNT                   /* one past the last */
} pc_provider_api_t;

/* The spec's id for `api` ("openai-completions", "anthropic-messages"), or
 * "none" for anything else. Static, never NULL. */
const char *pc_provider_api_name(pc_provider_api_t api);

/* The reverse of pc_provider_api_name. PC_EINVAL for NULL arguments,
 * PC_ENOTFOUND for a name it does not know. */
int pc_provider_api_parse(const char *name, pc_provider_api_t *out);

/* Every API's name, in the registry's order, joined with `sep`, into `out`
 * (`cap` bytes, truncated, always NUL-terminated when cap > 0). For
 * messages that list what is accepted. */
void pc_provider_api_names(const char *sep, char *out, size_t cap);

/* ---- thinking levels (§11.2) ---- */

/* The spec's ThinkLevel (§11.2). */
typedef enum pc_think_level {
	PC_THINK_OFF = 0,
	PC_THINK_MINIMAL,
	PC_THINK_LOW,
	PC_THINK_MEDIUM,
	PC_THINK_HIGH,
	PC_THINK_XHIGH,
	PC_THINK_ADAPTIVE,
	PC_THINK_MAX,
} pc_think_level_t;

/* "off", "minimal", "low", "medium", "high", "xhigh", "adaptive", "max";
 * "off" for anything else. Static. */
const char *pc_think_level_name(pc_think_level_t l);
/* Reads a level, case-insensitively, with the spec's aliases ("x-high",
 * "x_high", "extra-high", "extra high", "extra_high" -> xhigh; "highest" ->
 * high). PC_EINVAL for NULL arguments, PC_ENOTFOUND for anything else. */
int pc_think_level_parse(const char *s, pc_think_level_t *out);

/* ---- queue modes (session/queue_policy.h) ---- */

#define PC_QUEUE_DEFAULT_DEBOUNCE_MS ((uint32_t)500) /* DEFAULT_QUEUE_DEBOUNCE_MS */
#define PC_QUEUE_DEFAULT_CAP ((uint32_t)20)          /* DEFAULT_QUEUE_CAP */

typedef enum pc_queue_mode {
	PC_QUEUE_STEER = 0,     /* inject into the running turn at its next boundary */
	PC_QUEUE_FOLLOWUP,      /* run as its own turn after the active one */
	PC_QUEUE_COLLECT,       /* batch everything queued into one turn */
	PC_QUEUE_INTERRUPT,     /* abort the active run, run this one */
	PC_QUEUE_STEER_BACKLOG, /* steer and also keep a followup */
	PC_QUEUE_MODE_COUNT
} pc_queue_mode_t;

typedef enum pc_queue_drop {
	PC_QUEUE_DROP_OLD = 0,  /* drop the oldest queued messages */
	PC_QUEUE_DROP_NEW,      /* refuse the new message */
	PC_QUEUE_DROP_SUMMARIZE, /* drop the oldest, keep a summary line for each */
	PC_QUEUE_DROP_COUNT
} pc_queue_drop_t;

/* "steer", "followup", "collect", "interrupt", "steer-backlog". Static. */
const char *pc_queue_mode_name(pc_queue_mode_t m);
/* normalizeQueueMode: the names and their aliases (steering, queue, queued;
 * follow-ups, followups; coalesce; interrupts, abort; steer+backlog,
 * steer_backlog), case-insensitive, surrounding spaces ignored.
 * PC_EINVAL for NULL, PC_ENOTFOUND for anything else. */
int pc_queue_mode_parse(const char *s, pc_queue_mode_t *out);
/* "old", "new", "summarize". Static. */
const char *pc_queue_drop_name(pc_queue_drop_t d);
/* Also "oldest", "newest". PC_EINVAL, PC_ENOTFOUND. */
int pc_queue_drop_parse(const char *s, pc_queue_drop_t *out);

typedef struct pc_queue_settings {
	pc_queue_mode_t mode;
	uint32_t debounce_ms;
	uint32_t cap;
	pc_queue_drop_t drop;
} pc_queue_settings_t;

/* steer, 500 ms, 20, summarize. */
void pc_queue_settings_default(pc_queue_settings_t *out);

/* ---- runs (run/run_state.h) ---- */

#define PC_RUN_MAX_CANDIDATES 16u /* models in the fallback chain */
#define PC_RUN_MAX_PROFILES 16u   /* auth profiles of one candidate */

/* §1.4 iteration budget (resolveMaxRunRetryIterations), each overridable */
#define PC_RUN_BUDGET_BASE 24        /* §1.4 BASE */
#define PC_RUN_BUDGET_PER_PROFILE 8  /* §1.4 PER_PROFILE */
#define PC_RUN_BUDGET_MIN 32         /* §1.4 MIN */
#define PC_RUN_BUDGET_MAX 160        /* §1.4 MAX */

/* §1.8, §1.10 auth.cooldowns defaults */
#define PC_AUTH_FAILURE_WINDOW_MS ((uint64_t)24 * 3600 * 1000) /* failureWindowHours = 24 */
#define PC_RUN_DEFAULT_RATE_LIMIT_ROTATIONS 1 /* DEFAULT_MAX_RATE_LIMIT_PROFILE_ROTATIONS */
#define PC_RUN_DEFAULT_OVERLOAD_ROTATIONS 1   /* DEFAULT_MAX_OVERLOAD_PROFILE_ROTATIONS */
#define PC_RUN_DEFAULT_OVERLOADED_BACKOFF_MS 0 /* §1.10 auth.cooldowns.overloadedBackoffMs */


/* agents.*.runRetries (§1.4): each field is used only when its has_* is set. */
typedef struct pc_run_retries_config {
	bool has_base, has_per_profile, has_min, has_max;
	int64_t base, per_profile, min, max;
} pc_run_retries_config_t;

/* ---- tools (attempt/steering.h) ---- */

typedef enum pc_tool_mode {
	PC_TOOLS_SEQUENTIAL = 0, /* one call at a time, in source order */
	PC_TOOLS_PARALLEL,       /* the prepared batch launches at once */
} pc_tool_mode_t;

/* ---- the idle-timeout breaker (run/idle_breaker.h) ---- */

/* MAX_CONSECUTIVE_IDLE_TIMEOUTS_BEFORE_OUTPUT (§1.15). */
#define PC_IDLE_BREAKER_DEFAULT_CAP 5u

/* ---- stuck-session diagnostics (session/diagnostics.h) ---- */

/* §9.2 diagnostics.stuckSessionWarnMs: default 2 min, valid 1 s – 24 h. */
#define PC_DIAG_WARN_DEFAULT_MS ((uint64_t)120000) /* DEFAULT_STUCK_SESSION_WARN_MS */
#define PC_DIAG_WARN_MIN_MS ((uint64_t)1000)
#define PC_DIAG_WARN_MAX_MS ((uint64_t)24 * 3600 * 1000)
/* §9.2 diagnostics.stuckSessionAbortMs: default max(5 min, 3 × warn). */
#define PC_DIAG_ABORT_FLOOR_MS ((uint64_t)300000)
#define PC_DIAG_ABORT_WARN_FACTOR 3u

/* The warn threshold: `configured` when in range, else the default. */
uint64_t pc_diag_warn_ms(uint64_t configured);
/* The abort threshold: `configured` when non-zero (never below warn), else
 * max(PC_DIAG_ABORT_FLOOR_MS, 3 × warn). */
uint64_t pc_diag_abort_ms(uint64_t warn_ms, uint64_t configured);

#ifdef __cplusplus
}
#endif
#endif
