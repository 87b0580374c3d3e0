/*
 * Plugin hooks (spec §10, §4.3): a registry of handlers per hook point and
 * the chains that run them.
 *
 * A handler is a C function (pc_hook_fn) registered directly, or a plugin's
 * function registered through the plugin ABI (plugin.h, pincer_plugin.h);
 * both live in the same registry and follow the same rules.
 *
 * Order. Handlers of a point run by descending priority, in registration
 * order within equal priority.
 *
 * Two kinds of points:
 *   - decision points (before_model_resolve, before_prompt_build,
 *     before_agent_run, before_agent_reply, before_agent_finalize,
 *     before_tool_call, tool_result_persist, message_sending): handlers run
 *     one after the other and their results are merged by the point's rule
 *     (below). pc_hooks_run sends the merged result to the caller in one
 *     PC_MSG_HOOK_DONE.
 *   - observation points (the others): handlers run in parallel, their
 *     results are ignored. pc_hooks_notify is fire-and-forget; pc_hooks_run
 *     on an observation point sends a DONE once every handler has finished
 *     or timed out (how a shutdown drain waits for gateway_stop).
 *
 * Every handler runs on the blocking pool (runtime/blocking.h), never on a
 * scheduler worker, bounded by its timeout. When the timeout fires the
 * handler counts as timed out, the chain goes on (or stops) by the point's
 * rule, and the handler's late result is dropped when it comes. The timeout
 * runs from the moment the handler is queued, so a saturated pool delays a
 * chain by at most the timeout. A handler that never returns keeps one pool
 * thread for as long as it runs.
 *
 * Failure. A handler "fails" when it returns a negative code, times out, or
 * returns a result of the wrong shape for its point (a result that is not
 * a JSON object, or a known field of the wrong type). Failures are reported
 * through the registry's report callback and handled by the point's rule;
 * they never abort the process. A C handler that crashes (a segfault) does
 * take the process down: in-process code cannot be isolated.
 *
 * Merge rules (the merged result is a JSON object; "{}" when no handler
 * decided anything). A field that is JSON null counts as absent.
 *   before_tool_call   {params?, block?, blockReason?, requireApproval?}
 *     block:true is terminal: lower-priority handlers do not run; its
 *     reason is blockReason (the latest given by any handler so far) or
 *     PC_HOOK_REASON_TOOL_BLOCKED. block:false is no decision and never
 *     clears a block. params is shallow-merged over the event's params, and
 *     later handlers see the merged params in their event; the merged
 *     result's "params" is the full merged object (absent when no handler
 *     gave params). requireApproval: this runtime has no approval route, so
 *     a chain that ends with an approval request and no block is blocked
 *     with PC_HOOK_REASON_APPROVAL_UNAVAILABLE (a later handler may still
 *     block first). A handler that fails or times out blocks the call
 *     (fail closed): PC_HOOK_REASON_TOOL_HOOK_FAILED, terminal.
 *   message_sending    {content?, cancel?, cancelReason?}
 *     cancel:true is terminal (blocked is set, reason = cancelReason or "");
 *     cancel:false is no decision. content replaces the event's content
 *     for later handlers; the merged "content" is the last one. Failures
 *     are ignored (that handler changes nothing).
 *   before_model_resolve {providerOverride?, modelOverride?}
 *     for each field the first non-empty string wins (the highest
 *     priority). Failures are ignored.
 *   before_prompt_build {prependContext?, appendContext?, systemPrompt?,
 *                        prependSystemContext?, appendSystemContext?,
 *                        toolsAllow?}
 *     the four context fields are concatenated in handler order, joined
 *     with "\n\n" (empty strings add nothing); systemPrompt: the first one
 *     given wins (the highest priority); toolsAllow only narrows: the
 *     intersection over every handler that gave one (in the first list's
 *     order; "*" in one list means "the other list"; [] = no optional
 *     tools; absent from the merged result when no handler gave one or
 *     the intersection is still "*"). Failures are ignored, except that a
 *     toolsAllow that is not an array of strings narrows to [] (a
 *     restriction that cannot be read restricts everything).
 *   before_agent_run   {outcome:"pass"} | {outcome:"block", reason, message?,
 *                       category?, metadata?}
 *     block is terminal. A result of any other shape blocks with
 *     PC_HOOK_REASON_RUN_INVALID; a failure blocks with
 *     PC_HOOK_REASON_RUN_FAILED or PC_HOOK_REASON_RUN_TIMEOUT (fail closed).
 *     No result is no decision. The merged result is the block, or
 *     {"outcome":"pass"} when some handler passed, or {}.
 *   before_agent_reply {handled:true, reply?, reason?}
 *     the first handled:true claims the turn (terminal); its result is the
 *     merged result. Failures are ignored.
 *   before_agent_finalize {action:"revise", reason?, retry?} |
 *                         {action:"finalize", reason?} | {action:"continue"}
 *     every handler runs. "finalize" from any handler wins; otherwise the
 *     revise requests combine (reasons joined with "\n\n", the first retry
 *     whose "instruction" is a non-empty string is kept, trimmed);
 *     otherwise "continue". Failures are ignored.
 *   tool_result_persist {message?, content?}
 *     each field replaces the same field of the event for later handlers;
 *     the merged result holds the final value of each field some handler
 *     replaced. Failures are ignored (that handler changes nothing).
 *
 * Ownership and lifetime. The registry is reference counted: every chain
 * and every handler still running on the blocking pool holds it, so
 * pc_hooks_free only drops the caller's reference, and the registry (with
 * its plugins: fini, then dlclose) goes when the last of them lets go. A C
 * handler's `user` must stay valid until then: in practice, until the
 * runtime that ran the chains has been freed.
 *
 * Threads. The registry is built (pc_hooks_register, pc_plugin_load,
 * pc_hooks_set_report) on one thread before use; the first pc_hooks_run or
 * pc_hooks_notify seals it, after which registering fails with PC_ESTATE
 * and everything else may be called from any thread, actor handlers
 * included.
 */
#ifndef PINCER_AGENTS_HOOKS_HOOKS_H
#define PINCER_AGENTS_HOOKS_HOOKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "actors/actor.h"
#include "runtime/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Default per-handler timeouts (pc_hook_def_t.timeout_ms == 0). */
#define PC_HOOK_DECISION_TIMEOUT_MS 15000u     /* every decision point */
#define PC_HOOK_OBSERVE_TIMEOUT_MS 30000u      /* observation points... */
#define PC_HOOK_GATEWAY_STOP_TIMEOUT_MS 5000u  /* ...but gateway_stop */

/* Reasons the chains write; the exact texts the model or user sees. */
#define PC_HOOK_REASON_TOOL_BLOCKED "Tool call blocked by plugin hook"
#define PC_HOOK_REASON_TOOL_HOOK_FAILED "Tool call blocked because before_tool_call hook failed"
#define PC_HOOK_REASON_APPROVAL_UNAVAILABLE "Plugin approval unavailable (no approval route)"
#define PC_HOOK_REASON_RUN_INVALID "before_agent_run returned an invalid decision"
#define PC_HOOK_REASON_RUN_FAILED "before_agent_run hook failed"
#define PC_HOOK_REASON_RUN_TIMEOUT "before_agent_run hook timed out"

typedef enum pc_hook_point {
	PC_HOOK_BEFORE_MODEL_RESOLVE = 0,
	PC_HOOK_BEFORE_PROMPT_BUILD,
	PC_HOOK_BEFORE_AGENT_RUN,
	PC_HOOK_BEFORE_AGENT_REPLY,
	PC_HOOK_BEFORE_AGENT_FINALIZE,
	PC_HOOK_AGENT_END,
	PC_HOOK_BEFORE_COMPACTION,
	PC_HOOK_AFTER_COMPACTION,
	PC_HOOK_BEFORE_TOOL_CALL,
	PC_HOOK_AFTER_TOOL_CALL,
	PC_HOOK_TOOL_RESULT_PERSIST,
	PC_HOOK_MESSAGE_RECEIVED,
	PC_HOOK_MESSAGE_SENDING,
	PC_HOOK_MESSAGE_SENT,
	PC_HOOK_SESSION_START,
	PC_HOOK_SESSION_END,
	PC_HOOK_GATEWAY_START,
	PC_HOOK_GATEWAY_STOP,
	PC_HOOK__COUNT /* not a point: the number of points, and "no point" in reports */
} pc_hook_point_t;

/* The spec's name ("before_tool_call"); "none" for PC_HOOK__COUNT and
 * anything out of range. Static. */
const char *pc_hook_point_name(pc_hook_point_t p);
/* The point named `name`: 0, or PC_ENOTFOUND (PC_EINVAL for NULL). */
int pc_hook_point_from_name(const char *name, pc_hook_point_t *out);
/* True for the decision points listed above. */
bool pc_hook_point_is_decision(pc_hook_point_t p);
/* True for before_tool_call and after_tool_call, the points with matchers. */
bool pc_hook_point_has_matcher(pc_hook_point_t p);

/* What a handler receives. Everything is borrowed for the call; the event
 * and ctx are the handler's own copies (it may read them after the chain
 * has given up on it, until it returns). */
typedef struct pc_hook_call {
	pc_hook_point_t point;
	const cJSON *event;     /* a JSON object */
	const cJSON *ctx;       /* a JSON object */
	const char *match_name; /* the tool name for tool hooks; NULL when none */
	const char *owner;      /* the handler's owner ("c" or the plugin id) */
} pc_hook_call_t;

/* A handler. Runs on a blocking-pool thread. Returns 0 (or > 0) on success
 * and may then set *result to a JSON object it allocates (the hook system
 * takes it; NULL = no result); a negative code means it failed (a *result
 * it set anyway is freed). */
typedef int (*pc_hook_fn)(void *user, const pc_hook_call_t *call, cJSON **result);

typedef struct pc_hook_def {
	pc_hook_point_t point;
	int priority;               /* higher runs first; ties by registration order */
	const char *const *matcher; /* tool names; tool points only; NULL = all */
	size_t matcher_count;
	uint32_t timeout_ms;        /* 0: the point's default (above) */
	pc_hook_fn fn;
	void *user;
	const char *owner;          /* "c" or the plugin id, for reports; NULL = "c" */
} pc_hook_def_t;

/* Reports: what the embedder logs. */
typedef enum pc_hook_report_kind {
	PC_HOOK_REPORT_FAILED = 0, /* the handler returned an error (code) or could not be queued */
	PC_HOOK_REPORT_MALFORMED,  /* its result had the wrong shape */
	PC_HOOK_REPORT_TIMEOUT,    /* it did not answer within its timeout */
	PC_HOOK_REPORT_LOG,        /* a plugin's log line (level) */
} pc_hook_report_kind_t;

enum { PC_HOOK_LOG_DEBUG = 0, PC_HOOK_LOG_INFO = 1, PC_HOOK_LOG_WARN = 2, PC_HOOK_LOG_ERROR = 3 };

/* One report; everything borrowed for the callback. */
typedef struct pc_hook_report {
	pc_hook_report_kind_t kind;
	pc_hook_point_t point; /* PC_HOOK__COUNT for a log line */
	const char *owner;     /* "c" or the plugin id */
	int code;              /* FAILED: the handler's code; TIMEOUT: PC_ETIMEDOUT */
	int level;             /* PC_HOOK_LOG_*: ERROR for failures */
	const char *message;   /* one line, for humans */
} pc_hook_report_t;

/* Called on any thread (a worker, a pool thread, the loading thread);
 * keep it short and thread-safe. */
typedef void (*pc_hook_report_fn)(void *user, const pc_hook_report_t *r);

typedef struct pc_hooks pc_hooks_t;

/* A new, empty registry; the caller owns one reference (pc_hooks_free). */
int pc_hooks_new(pc_hooks_t **out);
/* Drops the caller's reference (see "Ownership and lifetime"). NULL is a
 * no-op. */
void pc_hooks_free(pc_hooks_t *h);
/* One more reference, for a holder that outlives the caller's (an actor
 * that runs chains later); each is dropped with pc_hooks_release. NULL is
 * a no-op for both. */
void pc_hooks_retain(const pc_hooks_t *h);
void pc_hooks_release(const pc_hooks_t *h);
/* Where reports go; NULL (the default) writes them to stderr. Before use. */
void pc_hooks_set_report(pc_hooks_t *h, pc_hook_report_fn fn, void *user);

/* Copies the definition (matcher and owner strings; `user` is borrowed).
 * PC_EINVAL for a point out of range, no fn, a matcher on a point without
 * matchers, or an empty matcher name; PC_ESTATE once the registry is
 * sealed. */
int pc_hooks_register(pc_hooks_t *h, const pc_hook_def_t *def);

/* True if some handler of `p` would run for `match_name` (NULL matches
 * every handler). NULL h: false. A couple of loads when `p` has no handler
 * (the common case, checked per tool call). */
bool pc_hooks_active(const pc_hooks_t *h, pc_hook_point_t p, const char *match_name);
/* Handlers registered for `p`, matchers ignored. */
size_t pc_hooks_count(const pc_hooks_t *h, pc_hook_point_t p);

/* ---- running ------------------------------------------------------------- */

enum {
	PC_MSG_HOOK_DONE = PC_MSG_TYPE_SYSTEM + 0x2A00, /* pc_hook_done_msg_t */
};

/* PC_MSG_HOOK_DONE. Strings live in the message. */
typedef struct pc_hook_done_msg {
	uint64_t tag;          /* pc_hooks_run's */
	pc_hook_point_t point;
	int status;            /* 0: the chain ran to its end (handlers may have
				* failed: see the counts); PC_ESTOPPED: it was
				* stopped first (runtime shutdown), and the point's
				* failure rule was applied (before_tool_call and
				* before_agent_run are then blocked) */
	bool blocked;          /* before_tool_call blocked, message_sending
				* cancelled, before_agent_run blocked */
	uint32_t ran;          /* handlers started */
	uint32_t failed;       /* ...that failed (error, malformed, not queued) */
	uint32_t timed_out;    /* ...that timed out */
	uint64_t duration_us;
	const char *reason;    /* why blocked; "" otherwise; never NULL */
	const char *result;    /* the merged result, a JSON object; never NULL */
	size_t result_len;
	char buf[];
} pc_hook_done_msg_t;

/* Runs the chain of `p` for `match_name` (the tool name for tool hooks;
 * NULL matches every handler) in a short-lived actor. `event` and `ctx`
 * (JSON objects; NULL reads as {}) are taken, on every path. `owner`
 * receives exactly one PC_MSG_HOOK_DONE carrying `tag`. If no handler
 * matches, returns PC_ENOTFOUND at once and sends nothing (callers check
 * pc_hooks_active first). PC_EINVAL for a bad argument (an event or ctx
 * that is not an object included); PC_ESTOPPED if the runtime is stopping.
 * On any error nothing is sent. `h` is retained by the chain. */
int pc_hooks_run(pc_runtime_t *rt, const pc_hooks_t *h, pc_hook_point_t p, cJSON *event, cJSON *ctx,
		 const char *match_name, pc_actor_t *owner, uint64_t tag);

/* Fires the handlers of observation point `p` in parallel and returns:
 * failures and timeouts go to the report callback, nothing is sent back.
 * Same arguments and errors as pc_hooks_run; PC_EINVAL for a decision
 * point. */
int pc_hooks_notify(pc_runtime_t *rt, const pc_hooks_t *h, pc_hook_point_t p, cJSON *event, cJSON *ctx,
		    const char *match_name);

#ifdef __cplusplus
}
#endif

/* Loading plugins is part of the hooks' API. */
#include "plugin.h"

#endif
