/*
 * The agent API: Pincer's in-process entry to the agent loop (spec §1–§3,
 * §5–§7, §8.3–§8.4). The CLI, the gateway and C programs embedding Pincer
 * all go through it, so they all run the identical session / run / attempt
 * actors.
 *
 *   pc_agent_submit   "agent": the message is durably accepted (its run is
 *                     in the store, the idempotency key honoured) and a run
 *                     id comes back at once; the run goes on in actors.
 *   pc_agent_wait     "agent.wait": waits for a run's end; a wait that
 *                     times out never stops the run.
 *   pc_agent_subscribe_run / _session
 *                     the run's (or every run of a session's) events.
 *   pc_agent_subscribe_feed
 *                     what changes in every session: runs queued, started
 *                     and ended, messages appended to transcripts.
 *   pc_agent_abort_run / _session, pc_agent_steer
 *
 * A pc_agent_t borrows a running runtime, an I/O layer, a store, a
 * configuration and a tool registry, all of which must outlive it. With a
 * provider marked "embedded" (the default with no providers configured),
 * it starts the caller's in-process model server (pc_agent_embedded_llm_t,
 * the mock LLM in pincer's commands) on a loopback port.
 *
 * Threads: pc_agent_new and pc_agent_free from a plain thread (not a
 * worker); the sync calls (submit, wait) from a plain thread; the others
 * from any thread.
 */
#ifndef PINCER_AGENTS_AGENT_H
#define PINCER_AGENTS_AGENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "actors/actor.h"
#include "io/io.h"
#include "io/store/store.h"
#include "agents/config/config.h"
#include "events/event_bus.h"
#include "agents/hooks/hooks.h"
#include "agents/obs/obs.h"
#include "run/run_registry.h"
#include "agents/tools/tools.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pc_agent pc_agent_t;

/*
 * A model server the agent runs in-process for the providers its
 * configuration marks "embedded" (upward by registration: the agent does
 * not know which server it is). pincer's commands and the tests give the
 * mock LLM's (pc_mock_server_embedded_start / _stop, agents/mock/).
 */
typedef struct pc_agent_embedded_llm {
	/* Starts it on loopback with `scenario` (JSON, never NULL): *server
	 * and *port out. 0, or a code with a message in err. */
	int (*start)(pc_io_t *io, const char *scenario, void **server, uint16_t *port, char *err, size_t errcap);
	void (*stop)(void *server); /* NULL is a no-op */
} pc_agent_embedded_llm_t;

typedef struct pc_agent_options {
	pc_runtime_t *rt;                 /* required, started */
	pc_io_t *io;                      /* required */
	pc_store_t *store;                /* required */
	const pc_config_t *config;        /* required */
	const pc_tool_registry_t *tools;  /* NULL: the built-in tools; complete before
					   * pc_agent_new (the schemas offered are read once) */
	const pc_hooks_t *hooks;          /* plugin and C hooks (§10), sealed by first use;
					   * NULL: none. Must outlive the agent */
	const char *lock_dir;             /* session write locks; NULL: next to the store */
	const pc_agent_embedded_llm_t *embedded_llm; /* the server of providers marked
					   * "embedded"; NULL: such a provider is refused */
	const char *mock_scenario;        /* its scenario JSON; NULL: the demo */
	pc_log_t *log;                    /* where runs' starts and ends, recoveries and lost
					   * leases are logged (borrowed; a drop-mode logger
					   * keeps workers from waiting on it); NULL: nowhere */
	bool log_content;                 /* lines may carry message text (the prompt);
					   * off: never */
} pc_agent_options_t;

/* The I/O layer's configuration (pc_io_new) for an agent with `cfg`, on
 * `threads` I/O threads (0: one). Every run the global lane admits may
 * have a model call in flight, and over HTTP/1.1 each call holds a
 * connection of its own: so each I/O thread may open, and keep, as many
 * connections to one host as the lane admits runs, and never fewer than
 * the I/O layer's defaults. Without that, runs past 64 would wait in the
 * I/O layer for a connection, their model watchdogs already running. */
void pc_agent_io_config(const pc_config_t *cfg, uint32_t threads, pc_io_config_t *out);

/* Builds the agent layer: the lane, the run registry, the session
 * directory; starts the embedded model server when configured; recovers what
 * gone processes left in the store (pc_agent_recovered). The caller owns
 * *out (pc_agent_free). Not on a worker. */
int pc_agent_new(const pc_agent_options_t *opts, pc_agent_t **out);

/* What pc_agent_new found left by processes that are gone (a crash, a
 * kill): runs accepted that never began run again, in order, under their
 * own run ids; runs that began end with the error code run_interrupted
 * (docs/agent-loop.md, "Persistence"). */
typedef struct pc_agent_recovery {
	uint32_t rerun;       /* accepted, never begun: running again */
	uint32_t interrupted; /* begun: ended as run_interrupted */
} pc_agent_recovery_t;
void pc_agent_recovered(const pc_agent_t *a, pc_agent_recovery_t *out);

/*
 * This agent as a node of a cluster (docs/cluster.md). After
 * pc_agent_cluster_join its sessions take their leases for as long as the
 * node is live in the store's node table (PC_STORE_LEASE_NODE) rather
 * than renewing each one, so a session costs no writes to keep, and the
 * node's heartbeat keeps them all. The heartbeat's keeper tells the agent
 * how long the node's last recorded heartbeat holds (pc_agent_node_renewed,
 * a runtime-clock deadline a safety margin short of the lease the store
 * counts); past it no tool starts, and pc_agent_node_lapsed stops every
 * session's run and drops its lease, since another node may take the
 * sessions at any moment. Join before any message is submitted.
 */
void pc_agent_cluster_join(pc_agent_t *a);
void pc_agent_node_renewed(pc_agent_t *a, uint64_t deadline_ms);
/* Returns how many sessions were told. Any thread. */
size_t pc_agent_node_lapsed(pc_agent_t *a);
/* True unless a joined node is past its deadline (or has none yet). */
bool pc_agent_node_live(const pc_agent_t *a);

/* Takes over, on the blocking pool, the open runs that `pick` chooses
 * among the store's (runs a lost node accepted): each is adopted first (a
 * run another node adopted first is skipped), then one that never began
 * runs here under its own run id, in order, and one that began ends with
 * the error code node_lost (running it again could repeat what its tools
 * did), replay-invalid when its transcript holds a call of a mutating
 * tool. `arg` is the job's: `release(arg)` runs once it is done or will
 * never run. Then `reply_to` (may be NULL) gets a message of `reply_type`
 * whose u64 is the outcome (0 or a store code, as int64). pc_agent_free
 * waits for the job. PC_EBUSY / PC_ESTOPPED when the pool cannot take it
 * (the caller keeps arg). Any thread. */
typedef bool (*pc_agent_run_pick_fn)(void *arg, const pc_store_open_run_t *run);
int pc_agent_take_over(pc_agent_t *a, pc_agent_run_pick_fn pick, void *arg, void (*release)(void *arg),
		       pc_actor_t *reply_to, uint32_t reply_type);

/* A run's outcome as the store has it (pc_store_run_get), for a run the
 * registry no longer holds. Status PC_RUN_STATUS_RUNNING when it has not
 * ended: another process on the state directory has it. */
void pc_agent_run_info_from_store(const pc_store_reply_t *r, pc_run_info_t *out);

/*
 * A finished run as OpenClaw's `agent` method answers it (§1.19, §8.3):
 * {payloads, meta: {durationMs, status, aborted?, stopReason, errorKind,
 * livenessState, replayInvalid, usage, attempts, error?}}, from the run's
 * terminal lifecycle data `d` and its status ("ok", "error", "aborted",
 * "timeout"). NULL when out of memory; the caller owns it.
 */
struct cJSON *pc_agent_run_result(const struct cJSON *d, const char *status);
/* meta.error of a run that did not end well: {kind, message, reason?,
 * providerStatus?, fallbackAttempts?}, message being the most specific
 * words there are (the loop's detail, the provider's own message, the
 * user-facing text; secrets already masked). NULL when the run ended
 * well (or out of memory); the caller owns it. */
struct cJSON *pc_agent_error_meta(const struct cJSON *d);

/* Aborts every run, waits (at most `grace_ms`; < 0 for ever) for the runs
 * to end, stops every session actor, frees. Before the I/O layer, store and
 * runtime go. NULL is a no-op. Not on a worker. */
void pc_agent_free(pc_agent_t *a, int64_t grace_ms);

typedef struct pc_agent_params {
	const char *session_key;     /* NULL or "": "main" */
	const char *message;         /* required */
	const char *idempotency_key; /* may be NULL */
	const char *model;           /* "provider/model" for this run; NULL: the configured */
	const char *trigger;         /* "user" (default), "cron", "heartbeat", ... (priority) */
	const char *queue_mode;      /* how to treat it if the session is busy; NULL: configured */
	const char *extra_system_prompt; /* per-run addition; may be NULL */
	const char *thinking;        /* this run's thinking level ("off", "low", ...,
				      * pc_think_level_parse); NULL: configured */
	uint64_t timeout_ms;         /* run timeout; 0: configured */
	const char *run_id;          /* the run's id, when the caller names it (the `agent` RPC
				      * uses its idempotency key, as OpenClaw does, §8.3): at
				      * most PC_RUN_ID_MAX bytes of printable ASCII, unique in
				      * the store (a run id another session holds: PC_EEXIST);
				      * NULL: a generated one */
} pc_agent_params_t;

/* Whether `id` can be a caller's run id (pc_agent_params_t.run_id): 1 to
 * PC_RUN_ID_MAX bytes of printable ASCII without spaces (it goes into
 * URLs, logs and the store as it is). */
bool pc_agent_run_id_ok(const char *id);

/* What happened to a submitted message. */
typedef enum pc_agent_disposition {
	PC_AGENT_STARTED = 0, /* a run starts now (or when the global lane admits it) */
	PC_AGENT_QUEUED,      /* the session is busy: queued (followup / collect) */
	PC_AGENT_STEERED,     /* injected into the active run (its own run id ends at once) */
	PC_AGENT_DUPLICATE,   /* the idempotency key was seen: run_id is the first run's */
	PC_AGENT_DROPPED,     /* refused by the queue policy (cap, heartbeat while busy) */
} pc_agent_disposition_t;
const char *pc_agent_disposition_name(pc_agent_disposition_t d);

typedef struct pc_agent_accepted {
	char run_id[PC_RUN_ID_MAX + 1];
	int64_t accepted_ms;          /* wall clock */
	pc_agent_disposition_t disposition;
} pc_agent_accepted_t;

/* "agent" from a plain thread: accepts the message (durably) and returns.
 * PC_EINVAL for a missing message, a bad key, an unknown thinking level or
 * a string of `p` that is not UTF-8 (sessions hold text only), PC_ESTOPPED
 * while shutting down, a store error code when the message could not be
 * persisted. */
int pc_agent_submit(pc_agent_t *a, const pc_agent_params_t *p, pc_agent_accepted_t *out);

/* "agent" for actors: the answer comes to `reply_to` as a message of type
 * PC_MSG_AGENT_ACCEPTED with `corr`, payload pc_agent_submit_reply_t. */
enum { PC_MSG_AGENT_ACCEPTED = PC_MSG_TYPE_SYSTEM + 0x2400, PC_MSG_AGENT_RUN_INFO };
typedef struct pc_agent_submit_reply {
	int32_t rc;
	pc_agent_accepted_t accepted;
} pc_agent_submit_reply_t;
int pc_agent_submit_async(pc_agent_t *a, const pc_agent_params_t *p, pc_actor_t *reply_to, uint64_t corr);

/* "agent.wait": PC_AGENT_WAIT_DEFAULT_MS when timeout_ms is 0. */
#define PC_AGENT_WAIT_DEFAULT_MS ((int64_t)30000)
typedef enum pc_agent_wait_status {
	PC_AGENT_WAIT_OK = 0,  /* the run ended well */
	PC_AGENT_WAIT_ERROR,   /* the run ended with an error, an abort or its own timeout */
	PC_AGENT_WAIT_TIMEOUT, /* the wait ran out; the run goes on */
} pc_agent_wait_status_t;
const char *pc_agent_wait_status_name(pc_agent_wait_status_t s);
typedef struct pc_agent_wait_result {
	pc_agent_wait_status_t status;
	pc_run_info_t run;
} pc_agent_wait_result_t;
/* From a plain thread. PC_ENOTFOUND for a run neither in memory nor in the store. */
int pc_agent_wait(pc_agent_t *a, const char *run_id, int64_t timeout_ms, pc_agent_wait_result_t *out);
/* For actors: PC_MSG_AGENT_RUN_INFO (payload pc_run_info_t, corr) when the run ends. */
int pc_agent_watch(pc_agent_t *a, const char *run_id, pc_actor_t *who, uint64_t corr);
/* The same for a run this process does not hold (another process on the
 * state directory runs it): the store is read until it has the run ended
 * (every 25 ms at first, backing off to every second), then `who` gets
 * PC_MSG_AGENT_RUN_INFO with `corr` (status error when the run cannot be
 * read). After `max_ms` without an end it stops and sends nothing: the
 * caller's own deadline answers. */
int pc_agent_watch_stored(pc_agent_t *a, const char *run_id, pc_actor_t *who, uint64_t corr, uint64_t max_ms);

/* The run's final result as JSON text (the terminal lifecycle event's
 * data: phase, payloads, usage, attempts, error), malloc'd. PC_ESTATE while
 * the run goes on; PC_ENOTFOUND when unknown or swept. */
int pc_agent_result(pc_agent_t *a, const char *run_id, char **json);

/* Subscribes `s` to run `run_id` (closed after the run's terminal event)
 * or to every run of a session from now on. */
int pc_agent_subscribe_run(pc_agent_t *a, const char *run_id, pc_event_sub_t *s);
int pc_agent_subscribe_session(pc_agent_t *a, const char *session_key, pc_event_sub_t *s);
void pc_agent_unsubscribe_session(pc_agent_t *a, const char *session_key, pc_event_sub_t *s);

/*
 * Subscribes `s` to the agent's feed: what changes in every session, in
 * the order it happened, from now on. Each event's stream is lifecycle,
 * its data {"sessionKey","runId","phase",...}:
 *   queued    a run was accepted (a session's first makes the session)
 *   start     it started; end: it ended, with "status" ("ok", "error",
 *             "aborted", "timeout") and "error" when it failed
 *   message   a message was appended to the session's transcript (the
 *             user's turn, an assistant message, a tool result): "message"
 *             as stored, "ts"; runId is the message's run, as the
 *             history names it (a result made up for a call a crash cut
 *             off is that run's, though the next run wrote it)
 * Every feed event may be dropped for a slow reader (the oldest first, as
 * deltas are): the gap in seq says so, and the reader reads again what it
 * shows. A message is in the feed when its write is sent, before the
 * store commits it (it commits at the latest with the run's end).
 */
int pc_agent_subscribe_feed(pc_agent_t *a, pc_event_sub_t *s);
void pc_agent_unsubscribe_feed(pc_agent_t *a, pc_event_sub_t *s);

/* Aborts a run, queued or active (a user abort: never failed over).
 * PC_ENOTFOUND, PC_ESTATE when it already ended. */
int pc_agent_abort_run(pc_agent_t *a, const char *run_id);
/* Aborts the session's active run and withdraws its queued messages. */
int pc_agent_abort_session(pc_agent_t *a, const char *session_key);
/* pc_agent_abort_session for every session in memory (a gateway's drain
 * deadline). Returns how many sessions were told. Not on a worker. */
size_t pc_agent_abort_all(pc_agent_t *a);
/* Steers `text` into the session's active run at its next model boundary.
 * PC_ENOTFOUND with no active run; PC_ESTATE when the run cannot take it
 * now (not streaming, compacting); PC_EINVAL when it is not UTF-8. */
int pc_agent_steer(pc_agent_t *a, const char *session_key, const char *text);

typedef struct pc_agent_stats {
	uint64_t sessions_live;   /* session actors in memory */
	uint64_t runs_started;
	uint64_t runs_finished;
	uint64_t runs_active;
	uint64_t runs_ended[4];  /* by outcome: ok, error, aborted, timeout
				  * (pincer_agent_runs_total) */
	uint64_t attempts;
	uint64_t tool_calls;
	uint64_t tool_loops_blocked; /* calls refused by the loop detectors (§4.2) */
	uint32_t lane_active, lane_queued, lane_peak, lane_max;
	uint64_t long_running;   /* §9.2 session.long_running warnings */
	uint64_t stalled;        /* session.stalled */
	uint64_t stuck;          /* session.stuck */
	uint64_t recoveries;     /* runs aborted or lanes released by the watchdog */
	uint64_t usage_write_errors; /* model-call usage records that could not be
				      * stored (the runs went on; each is logged) */
	/* as a node of a cluster (pc_agent_cluster_join) */
	uint64_t node_lapses;     /* the node's deadline passed without a heartbeat */
	uint64_t tools_fenced;    /* tool calls not started: the node was past its deadline */
	uint64_t runs_taken_over; /* open runs of lost nodes adopted (pc_agent_take_over) */
	uint64_t leases_held;     /* sessions whose store lease this agent holds now */
} pc_agent_stats_t;
void pc_agent_stats(pc_agent_t *a, pc_agent_stats_t *out);

/* The embedded model server's port (0 when none). */
uint16_t pc_agent_mock_port(const pc_agent_t *a);

/* The store the agent was made with (borrowed: the caller's). */
pc_store_t *pc_agent_store(pc_agent_t *a);

/* This process as an owner of leases and runs in the store (the agent's,
 * valid while it lives). */
const char *pc_agent_owner(const pc_agent_t *a);

/* Every model call's usage as the store keeps it (pc_store_usage_list):
 * the records of run `run_id`, or with run_id NULL of session
 * `session_key`, with their exact sums (pc_store_usage_list_totals). A
 * run's records are durable once its end is; those of a run in progress
 * may lag its calls by the store's lazy wait. The caller frees *out
 * (pc_store_usage_list_free). From a plain thread, not a worker. */
int pc_agent_usage(pc_agent_t *a, const char *run_id, const char *session_key, pc_store_usage_list_t **out);

/* A copy of what the agent knows of run `run_id`: runs it accepted, for
 * as long as they are in memory (running, then the terminal cache time,
 * §9.1); older runs are in the store (pc_store_run_get). PC_EINVAL,
 * PC_ENOTFOUND. Any thread. */
int pc_agent_run_info(pc_agent_t *a, const char *run_id, pc_run_info_t *out);

/* How long a message refused by the session's queue (PC_AGENT_DROPPED)
 * should wait before it is sent again: what the session's active run has
 * left of the typical run's duration (the mean of the runs this process
 * timed; a run already past it is given half its age again), plus the
 * queue's debounce. Clamped to [1 s, 1 h]. Any thread. */
uint64_t pc_agent_retry_estimate_ms(pc_agent_t *a, const char *session_key);

/* The id of the session's active run into `run_id` (PC_RUN_ID_MAX + 1
 * bytes). PC_ENOTFOUND when it has none. Any thread. */
int pc_agent_active_run(pc_agent_t *a, const char *session_key, char *run_id);

/*
 * The agent's metrics registry (borrowed, valid until pc_agent_free):
 * runs by outcome, run and attempt durations, attempt errors by failover
 * reason, tokens, session-queue and global-lane waits and the providers'
 * time to first token, recorded by the actors as they go
 * (docs/gateway-http.md lists the families). Render it with
 * pc_metrics_render; the counters pc_agent_stats reads are not in it.
 */
pc_metrics_t *pc_agent_metrics(pc_agent_t *a);

/* The series of pincer_lifecycle_illegal_total for a machine that lives
 * above the agent but counts with the agent's own ("gwclient": the
 * gateway's WebSocket client); NULL for any other name. Valid until
 * pc_agent_free. */
pc_metric_t *pc_agent_lifecycle_illegal(pc_agent_t *a, const char *machine);

#ifdef __cplusplus
}
#endif
#endif
