/*
 * Tools (spec layer 4): a registry of tool definitions and one actor per
 * invocation.
 *
 * A definition names the tool, describes it to the model (description and
 * a JSON-Schema for its arguments), and says how it runs:
 *   - `call`: a synchronous function. It runs inside the tool actor, or on
 *     the blocking pool when `blocking` is set (file I/O, processes);
 *   - `start` (+ `on_timer`): an asynchronous tool driven by the tool
 *     actor's messages; it finishes with pc_tool_task_complete.
 *
 * pc_tool_invoke spawns the invocation's actor. Its owner receives exactly
 * one PC_MSG_TOOL_DONE, whatever happens: a result, an error result, the
 * timeout, an abort (pc_tool_abort, a message), an unknown tool, arguments
 * that are not a JSON object, or the tool actor failing (a crash of the
 * invocation is an error result the model can read, never a dead attempt).
 * The actor's cleanup runs exactly once on every path.
 *
 * How each path reads in the DONE:
 *   - `call` (or `start`) returning a negative code: PC_TOOL_ERROR, with the
 *     tool's text if it gave one, else "Tool x failed: <pc_strerror>";
 *   - a result with is_error set: PC_TOOL_ERROR with the tool's text;
 *   - on_timer returning a negative code, or the actor failing in any other
 *     way: PC_TOOL_CRASHED, "Tool x failed: the invocation crashed (...)";
 *   - the actor stopped from outside (pc_actor_stop, runtime shutdown):
 *     PC_TOOL_ABORTED, sent from its stop handler;
 *   - empty (or all-blank) `arguments` read as "{}".
 * A blocking `call` may still be running when the invocation ends (timeout,
 * abort): it then runs to completion on copies of the arguments and the
 * environment, and its result is dropped. `user` must outlive it.
 *
 * An asynchronous tool that holds something outside the actor (a child
 * process, a blocking job) gets two more hooks:
 *   - `on_cancel`, its one chance to let go when the invocation ends
 *     without the tool having completed it (see pc_tool_cancel_fn);
 *   - a waker (pc_tool_task_waker), with which another thread makes the
 *     invocation call `on_timer` with a token (pc_tool_wake).
 *
 * Threads: the registry is built before use and then read-only (any
 * thread). Everything else: any thread, unless it takes a task (then only
 * from the tool's own callbacks).
 */
#ifndef PINCER_AGENTS_TOOLS_TOOL_H
#define PINCER_AGENTS_TOOLS_TOOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "actors/actor.h"
#include "agents/obs/obs.h"
#include "runtime/error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PC_TOOL_DEFAULT_TIMEOUT_MS ((uint64_t)600000) /* 10 min */
#define PC_TOOL_DEFAULT_MAX_OUTPUT ((size_t)400000)   /* bytes of result text */
#define PC_TOOL_NAME_MAX 64u

enum {
	PC_MSG_TOOL_DONE = PC_MSG_TYPE_SYSTEM + 0x2100,
};

/* Where and for whom a tool runs. Strings are borrowed for the call. */
typedef struct pc_tool_env {
	const char *workspace;   /* the agent's workspace root */
	const char *session_key;
	const char *run_id;
	const char *tool_call_id;
} pc_tool_env_t;

/* What a tool produced. `text` is malloc'd (the tool actor takes it);
 * what in it is not UTF-8 goes on as U+FFFD. */
typedef struct pc_tool_output {
	char *text;
	bool is_error;
	bool terminate; /* the tool ends the run intentionally (§3.2 item 7) */
} pc_tool_output_t;

typedef int (*pc_tool_call_fn)(void *user, const cJSON *args, const pc_tool_env_t *env, pc_tool_output_t *out);

/* An asynchronous invocation, valid from start until it completes. */
typedef struct pc_tool_task pc_tool_task_t;
typedef int (*pc_tool_start_fn)(void *user, pc_tool_task_t *t, const cJSON *args, const pc_tool_env_t *env);
typedef int (*pc_tool_timer_fn)(void *user, pc_tool_task_t *t, uint64_t token);

/*
 * Called exactly once, on the invocation's actor, when the invocation ends
 * and the tool has not completed it: the timeout, pc_tool_abort, the actor
 * stopped from outside or by the runtime's shutdown (then from its stop
 * handler), `on_timer` failing, or `start` returning an error. Never
 * called once pc_tool_task_complete has been called, for a `call` tool, or
 * when `start` never ran (unknown tool, bad arguments). The owner's DONE
 * has not been sent yet when it runs. The task is valid during the call
 * only: pc_tool_task_data works, pc_tool_task_after / _complete / _waker
 * return PC_ESTATE. It must not block: it asks its work to stop (e.g.
 * signals a process group) and releases the task's data.
 */
typedef void (*pc_tool_cancel_fn)(void *user, pc_tool_task_t *t);

/* Asks for on_timer(token) after `ms`. Only from the tool's own callbacks
 * (else PC_ESTATE, as after completion); PC_EINVAL if the tool has no
 * on_timer. Timers still pending when the invocation ends are cancelled. */
int pc_tool_task_after(pc_tool_task_t *t, uint64_t ms, uint64_t token);
/* Finishes the invocation with `out` (its text is taken, on every path).
 * Once only, from the tool's own callbacks: PC_ESTATE otherwise. */
int pc_tool_task_complete(pc_tool_task_t *t, pc_tool_output_t *out);
/* The tool's own data for this invocation (NULL until set). The tool owns
 * it and releases it before completing, or in on_cancel. */
void pc_tool_task_set_data(pc_tool_task_t *t, void *data);
void *pc_tool_task_data(const pc_tool_task_t *t);
/* A handle with which any thread wakes this invocation (pc_tool_wake).
 * *out is a reference the caller owns (pc_actor_release); it stays valid
 * after the invocation ends. Only from the tool's own callbacks (else
 * PC_ESTATE); PC_EINVAL if the tool has no on_timer. */
int pc_tool_task_waker(pc_tool_task_t *t, pc_actor_t **out);
/* Makes the invocation call on_timer(token) on its own actor, after the
 * messages already queued to it. Any thread. A wake that arrives after the
 * invocation ended (completed, cancelled, stopped) is dropped: nothing is
 * called. Returns 0, PC_ESTOPPED when the invocation's actor is already
 * gone (the wake is dropped all the same), PC_ENOMEM. */
int pc_tool_wake(pc_actor_t *invocation, uint64_t token);

typedef struct pc_tool_def {
	const char *name;        /* [A-Za-z0-9_-], 1..PC_TOOL_NAME_MAX */
	const char *description;
	const char *parameters;  /* JSON-Schema of the arguments; NULL: {"type":"object"} */
	bool parallel_safe;      /* may run in a parallel batch */
	bool blocking;           /* `call` runs on the blocking pool */
	bool mutating;           /* changes state (§5.7: its failures are always shown) */
	uint64_t timeout_ms;     /* 0: PC_TOOL_DEFAULT_TIMEOUT_MS */
	size_t max_output;       /* 0: PC_TOOL_DEFAULT_MAX_OUTPUT; longer text is cut (at a UTF-8
				  * boundary, to at most max_output bytes) and the marker
				  * "\n…(truncated N bytes)" appended */
	pc_tool_call_fn call;    /* exactly one of call / start */
	pc_tool_start_fn start;
	pc_tool_timer_fn on_timer;
	pc_tool_cancel_fn on_cancel; /* `start` tools only; may be NULL */
	void *user;
	/* Releases `user` when the registry is freed; NULL: `user` is borrowed.
	 * Not called when pc_tool_register fails (the caller keeps `user`). */
	void (*free_user)(void *user);
} pc_tool_def_t;

typedef struct pc_tool_registry pc_tool_registry_t;

int pc_tool_registry_new(pc_tool_registry_t **out);
void pc_tool_registry_free(pc_tool_registry_t *r);
/* Copies the definition (strings included; `user` is borrowed, or owned
 * by the registry from success on when free_user is set). PC_EEXIST
 * for a name already registered, PC_EINVAL for a bad name, a schema that
 * is not a JSON object, not exactly one of call / start, `blocking` with
 * `start` (only `call` runs on the blocking pool), or `on_cancel` with
 * `call`. */
int pc_tool_register(pc_tool_registry_t *r, const pc_tool_def_t *def);
const pc_tool_def_t *pc_tool_find(const pc_tool_registry_t *r, const char *name);
size_t pc_tool_count(const pc_tool_registry_t *r);
/* Invocations of this registry's tools whose actor is still alive: the
 * registry may be freed once this is 0 and no new invocation starts. */
uint64_t pc_tool_registry_live(const pc_tool_registry_t *r);
/* The tools offered to the model, as the request builder wants them: an
 * array of {name, description, parameters}, in registration order, only
 * those named in allow[0..n) when allow is not NULL. The caller owns *out. */
int pc_tool_schemas(const pc_tool_registry_t *r, const char *const *allow, size_t n, cJSON **out);

/* The built-in tools of this layer: "clock" (the current time, UTC, ISO
 * 8601) and "sleep" ({"ms": n}, asynchronous, at most 10 min). */
int pc_tool_register_builtins(pc_tool_registry_t *r);

/* One invocation request. Strings are copied. */
typedef struct pc_tool_invoke {
	const char *name;
	const char *tool_call_id;
	const char *arguments;   /* the JSON text the model produced */
	pc_tool_env_t env;
	uint64_t timeout_ms;     /* 0: the tool's */
	uint64_t tag;            /* echoed in DONE */
	/* The invocation's lifecycle (tool_lifecycle.h), all optional: a
	 * refused transition is logged to `log` and counted in `illegal`;
	 * with `trace`, each transition is one PINCER_TRACE line (machine
	 * tool) naming the invocation `trace_id` (copied). */
	pc_log_t *log;
	pc_metric_t *illegal;
	bool trace;
	const char *trace_id;
} pc_tool_invoke_t;

/* PC_MSG_TOOL_DONE. Strings live in the message. */
typedef enum pc_tool_status {
	PC_TOOL_OK = 0,
	PC_TOOL_ERROR,     /* the tool reported an error */
	PC_TOOL_INVALID,   /* unknown tool or bad arguments */
	PC_TOOL_TIMEOUT,
	PC_TOOL_ABORTED,
	PC_TOOL_CRASHED,   /* the invocation's actor failed */
} pc_tool_status_t;

typedef struct pc_tool_done_msg {
	uint64_t tag;
	pc_tool_status_t status;
	bool is_error;       /* status != OK, or the tool said so */
	bool terminate;
	bool mutating;
	uint64_t duration_us;
	const char *tool_call_id;
	const char *name;
	const char *text;    /* the result text the model will read; never NULL */
	size_t text_len;
	char buf[];
} pc_tool_done_msg_t;

/* "ok", "error", "invalid", "timeout", "aborted", "crashed". Static. */
const char *pc_tool_status_name(pc_tool_status_t s);

/* Spawns the invocation's actor; `owner` gets PC_MSG_TOOL_DONE. On success
 * *out (may be NULL) is a reference the caller owns. `r` must outlive the
 * invocation. */
int pc_tool_invoke_start(pc_runtime_t *rt, const pc_tool_registry_t *r, const pc_tool_invoke_t *req,
			 pc_actor_t *owner, pc_actor_t **out);
/* Asks the invocation to stop: DONE follows with PC_TOOL_ABORTED unless it
 * had already finished (then nothing follows; PC_ESTOPPED may be returned
 * once its actor is gone). Any thread. */
int pc_tool_abort(pc_actor_t *invocation);

#ifdef __cplusplus
}
#endif
#endif
