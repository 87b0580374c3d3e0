/*
 * What the agent layer's actors share: the agent host, the session
 * directory, and the messages between sessions, runs and attempts.
 * Private to agents/.
 *
 *   session actor ──spawns──▶ run actor ──spawns, one at a time──▶ attempt actor
 *        ▲   RUN_DONE / RUN_PHASE │ ▲           ATTEMPT_DONE (flat)      │
 *        └────────────────────────┘ └────────────────────────────────────┘
 *
 * Every message here is flat (no pointers to heap objects), so one that
 * reaches an actor that has already stopped is freed as a dead letter
 * without leaking anything.
 */
#ifndef PINCER_AGENTS_AGENT_INTERNAL_H
#define PINCER_AGENTS_AGENT_INTERNAL_H

#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "actors/actor.h"
#include "actors/timer.h"
#include "agent.h"
#include "agents/obs/obs.h"
#include "agents/providers/providers.h"
#include "run/run_decide.h"
#include "session/lane.h"
#include "session/queue_policy.h"
#include "slab.h"
#include "agents/tools/tools.h"

#define PC__SESSION_SHARDS 64u
#define PC__KEY_MAX 255u
#define PC__CONTEXT_TTL_MS 2000u
/* A session's transcript stays in memory this long after its last run. */
#define PC__TRANSCRIPT_KEEP_MS 2000u

enum {
	/* to a session actor (through the directory) */
	PC__MSG_SESSION_SUBMIT = PC_MSG_TYPE_SYSTEM + 0x2500,
	PC__MSG_SESSION_ABORT_RUN,  /* payload: run id (NUL-terminated) */
	PC__MSG_SESSION_ABORT_ALL,
	PC__MSG_SESSION_STEER,      /* payload: text; asked (reply: rc as int64) */
	PC__MSG_SESSION_IDLE,       /* the reaper: idle long enough to retire */
	PC__MSG_SESSION_DRAIN,      /* its debounce timer */
	PC__MSG_SESSION_INTERRUPT_WAIT, /* interrupt: the aborted run did not end in time */
	PC__MSG_SESSION_DIAG,       /* its stalled-session watchdog tick (§9.2) */
	PC__MSG_SESSION_LEASE,      /* its lease's timer (session/lease.h) */
	PC__MSG_SESSION_LAPSED,     /* the cluster node's deadline passed (pc_agent_node_lapsed) */
	/* run -> session */
	PC__MSG_RUN_DONE,           /* pc__run_done_t */
	PC__MSG_RUN_PHASE,          /* u64: pc_run_phase_t */
	PC__MSG_STEER_REJECTED,     /* steer (pc__steer_msg): the run could not take it */
	PC__MSG_STEER_TAKEN,        /* text: the run id of a steer the attempt injected
				     * (attempt -> run -> session) */
	/* to a run actor */
	PC__MSG_RUN_START,
	PC__MSG_RUN_ABORT,
	PC__MSG_RUN_STEER,          /* steer (pc__steer_msg) */
	PC__MSG_RUN_DELAY,          /* its backoff timer */
	PC__MSG_RUN_NOTICE,         /* its overload-retry notice timer (§1.12) */
	PC__MSG_RUN_TRUNCATED,      /* the truncation job's result: int64 count or code */
	/* to an attempt actor */
	PC__MSG_ATTEMPT_START,
	PC__MSG_ATTEMPT_ABORT,
	PC__MSG_ATTEMPT_STEER,      /* steer (pc__steer_msg) */
	PC__MSG_ATTEMPT_TIMEOUT,    /* its deadline */
	PC__MSG_ATTEMPT_CONTEXT,    /* the context files job's result */
	/* attempt -> run */
	PC__MSG_ATTEMPT_DONE,       /* pc__attempt_done_t */
	PC__MSG_ATTEMPT_PHASE,      /* u64: pc_run_phase_t */
	/* u64: the store's answer (0, or the first refusal) to the writes an
	 * attempt reported before they were durable (pc__attempt_done_t's
	 * `unsettled`) */
	PC__MSG_ATTEMPT_SETTLED,
	PC__MSG_TOOL_OUTCOME,       /* pc__tool_outcome_t: for the loop guard (§1.16) */
};

/* One live tool outcome, as the post-compaction loop guard compares them. */
typedef struct pc__tool_outcome {
	uint64_t args_hash;
	uint64_t result_hash;
	char name[64];
} pc__tool_outcome_t;


struct pc_session_slot;

/* A run's tool-loop history (§4.2; run/loop_box.c), shared with its
 * attempts: they are one at a time, but an attempt can outlive its run's
 * state, so the box is counted. Only the attempt in flight touches `h`. */
typedef struct pc__loop_box {
	uint32_t refs; /* atomic */
	pc_loop_history_t *h;
} pc__loop_box_t;

/* A box for a new run (refs 1), or NULL when the detectors are off (or on
 * allocation failure: the run then goes without them). */
pc__loop_box_t *pc__loop_box_new(const pc_config_t *cfg);
pc__loop_box_t *pc__loop_box_retain(pc__loop_box_t *b);
void pc__loop_box_release(pc__loop_box_t *b);

/* Outcomes of runs, in pc_run_status_t order from PC_RUN_STATUS_OK. */
#define PC__RUN_OUTCOMES 4u
/* Token kinds counted: input, output, cache read, cache write. */
#define PC__TOKEN_KINDS 4u

/* The lifecycle machines whose refused transitions are counted, as
 * pincer_lifecycle_illegal_total{machine=<pc__lc_machine_name>}
 * (docs/architecture.md, "one state machine per lifecycle"). */
typedef enum pc__lc_machine {
	PC__LC_RUN = 0,
	PC__LC_ATTEMPT,
	PC__LC_SESSION,
	PC__LC_MODEL_CALL,
	PC__LC_TOOL_CALL,
	PC__LC_TOOL,
	PC__LC_GWCLIENT, /* the gateway's WebSocket client (gateway/ws.c), counted via
			  * pc_agent_lifecycle_illegal */
	PC__LC_MACHINES,
} pc__lc_machine_t;

/* The agent's metric series (pc_agent_metrics), made once by
 * pc_agent_new. Actors record through these handles: lock-free atomics, no
 * lookup, no allocation. */
typedef struct pc__agent_metrics {
	pc_metrics_t *reg;
	pc_metric_t *runs[PC__RUN_OUTCOMES];
	pc_metric_t *run_seconds;
	pc_metric_t *attempt_seconds;
	pc_metric_t *attempt_errors[PC_FAILOVER_REASON_COUNT];
	pc_metric_family_t *tokens, *ttft; /* by provider and model (pc__metrics_model) */
	pc_metric_t *queue_wait_seconds; /* in the session's queue, before the lane */
	pc_metric_t *lane_wait_seconds;
	pc_metric_t *lock_overdue; /* write lock holds reported past their max hold */
	/* refused transitions, one series per lifecycle machine (pc__lc_machine_t) */
	pc_metric_t *illegal[PC__LC_MACHINES];
	/* run_seconds' sum and count as integers (atomic), for the typical
	 * run a refused client is told to wait for (the histogram is
	 * write-only) */
	uint64_t run_ms_sum, run_ms_count;
} pc__agent_metrics_t;

/* Records milliseconds in a histogram of seconds. A metric update can fail
 * only for a misuse (a NULL or mistyped series), never at run time. */
static inline void pc__observe_ms(pc_metric_t *m, uint64_t ms) { (void)pc_metric_observe(m, (double)ms / 1000.0); }

/* A run ended with `status` (terminal); one that `started` is timed too,
 * `ms` long (0 for a run quicker than the clock's tick). */
void pc__metrics_run_end(pc_agent_t *a, pc_run_status_t status, bool started, uint64_t ms);

/* A lifecycle refused a transition its table does not allow. */
static inline void pc__metrics_illegal(pc__agent_metrics_t *m, pc__lc_machine_t machine)
{
	(void)pc_metric_inc(m->illegal[machine]);
}

/* One provider and model's series: time to first token, tokens by kind. */
typedef struct pc__model_series {
	pc_metric_t *ttft;
	pc_metric_t *tokens[PC__TOKEN_KINDS];
} pc__model_series_t;
/* At most this many provider/model pairs get series of their own; later
 * pairs count under provider="other", model="other", so names from the
 * configuration (or a client's model override) cannot grow /metrics
 * without bound. */
#define PC__MODEL_SERIES_MAX 64u
/* The series of `provider`/`model`, made on first use (takes the
 * registry's lock: look up once per attempt, not per event). */
/* Registers the agent's metric families in a->metrics (agent_metrics.c). */
int pc__agent_metrics_new(pc_agent_t *a);
void pc__metrics_model(pc_agent_t *a, const char *provider, const char *model, pc__model_series_t *out);

struct pc_agent {
	pc_runtime_t *rt;
	pc_io_t *io;
	pc_store_t *store;
	const pc_config_t *cfg;
	const pc_tool_registry_t *tools;
	pc_tool_registry_t *own_tools;
	pc_process_table_t *processes; /* exec's background processes (own tools only) */
	const pc_hooks_t *hooks; /* the embedder's, or NULL */
	cJSON *tool_schemas;  /* what every request offers the model (read-only), or NULL */
	char *tools_json[PC_API_COUNT]; /* tool_schemas as each api prints them, or NULL */
	char *lock_dir;
	/* the embedded providers' server (pc_agent_embedded_llm_t), or NULL */
	const pc_agent_embedded_llm_t *embedded_llm;
	void *embedded;
	uint16_t embedded_port;
	char mock_base_url[64];
	char mock_root_url[64]; /* the same without /v1: Anthropic's paths carry it */
	pc_lane_t *lane;
	pc_run_registry_t *runs;
	pc_event_bus_t *feed; /* pc_agent_subscribe_feed's (agent_feed.c) */
	/* Retires idle sessions and drops their kept transcripts: one timer
	 * for all of them, armed for the earliest thing due (none: no timer),
	 * `reaper_due` (runtime ms, atomic; UINT64_MAX: none), which a session
	 * going idle with something due earlier lowers, waking the reaper. */
	pc_actor_t *reaper;
	uint64_t reaper_due;
	pc_timer_t reaper_tick; /* the reaper's own */
	uint64_t reaper_gen;    /* the reaper's own: its armed tick's */
	pc_timer_t lock_tick; /* the write lock watchdog's, on the reaper (§6.4) */
	pc__slab_t session_slab; /* session actors' state */
	pc__slab_t slot_slab;    /* directory slots */
	char id_prefix[17];  /* random, per process: run ids are <prefix>-<counter> */
	char owner[128];     /* this agent as an owner of leases and runs (session/lease.h) */
	/* A node of a cluster (pc_agent_cluster_join): leases held while the
	 * node is live, and nothing started past `node_deadline_ms` (runtime
	 * clock, atomic; 0: no heartbeat recorded yet). */
	bool node_bound;
	uint64_t node_deadline_ms;
	pc_log_t *log;       /* borrowed; NULL: no lines */
	bool log_content;
	unsigned trace;      /* pc_trace_machine_t bits: PINCER_TRACE, read by pc_agent_new */
	pc_agent_recovery_t recovered; /* what pc_agent_new recovered */
	uint64_t next_id;    /* atomic */
	bool stopping;       /* atomic */
	struct {
		pthread_mutex_t lock;
		struct pc_session_slot **table;
		size_t cap, count;
	} shards[PC__SESSION_SHARDS];
	/* Auth-profile cooldowns (§1.11), shared by every run of the process:
	 * a profile that failed in one session is skipped by the others. */
	pc_cooldowns_t *cooldowns;
	/* The workspace context files (AGENTS.md, ...), read on the blocking
	 * pool and reused for PC__CONTEXT_TTL_MS. */
	struct {
		pthread_mutex_t lock;
		char *text;          /* NULL: none read yet */
		uint64_t loaded_ms;  /* runtime clock */
		bool loading;
	} context;
	struct {
		uint64_t sessions_live, runs_started, runs_finished, attempts, tool_calls;
		uint64_t tool_loops_blocked;
		/* actors and jobs that touch the agent: pc_agent_free waits for 0 */
		uint64_t runs_live, attempts_live, jobs_live;
		uint64_t diag[4];   /* by pc_diag_class_t: warnings emitted */
		uint64_t diag_recoveries;
		uint64_t usage_write_errors; /* model-call usage records the store refused */
		uint64_t node_lapses, tools_fenced, runs_taken_over; /* a cluster node's (pc_agent_cluster_join) */
		uint64_t leases_held; /* sessions whose store lease this agent holds (session/lease.c) */
	} stats; /* atomics */
	pc__agent_metrics_t metrics;
};

/* ---- the session directory (session/session_directory.c) ---- */

/* Sets up the directory's shards and slot slab (pc_agent_new). */
void pc__session_dir_init(pc_agent_t *a);
/* Frees every slot and the shards, once no session actor runs. */
void pc__session_dir_free(pc_agent_t *a);
/* Every session actor, retained (the caller releases them and frees *out);
 * how many. For shutdown and abort-all. */
size_t pc__sessions_collect(pc_agent_t *a, pc_actor_t ***out);
/* 0 when `key` can name a session (1..PC__KEY_MAX bytes of UTF-8, no
 * control character), else PC_EINVAL. */
int pc__session_key_ok(const char *key);
/* Starts the reaper (idle retirement, kept transcripts, the §6.4 lock
 * watchdog) on its two timers; stops it, when started. */
int pc__reaper_start(pc_agent_t *a);
void pc__reaper_stop(pc_agent_t *a);

/* Sends `msg` to the session actor of `key`, spawning it if needed
 * (unless `spawn` is false: PC_ENOTFOUND then). Ownership of `msg`
 * passes. With `reply_to`, as a request answered to it with `corr`. */
int pc__session_send(pc_agent_t *a, const char *key, pc_msg_t *msg, bool spawn, pc_actor_t *reply_to,
		     uint64_t corr);
/* The session actor of `key`, retained, with one message counted as on its
 * way to it: the caller sends it one, which the actor marks handled with
 * pc__session_consumed (as the caller does if the send fails). Spawned
 * when needed if `spawn`, else PC_ENOTFOUND. */
int pc__session_target(pc_agent_t *a, const char *key, bool spawn, pc_actor_t **out);
/* pc_ask_sync through the directory. */
int pc__session_ask_sync(pc_agent_t *a, const char *key, pc_msg_t *msg, int64_t timeout_ms, pc_msg_t **reply);
/* The session actor handled one message that came through the directory. */
void pc__session_consumed(pc_agent_t *a, const char *key);
/* The session is idle (nothing active, queued or pending) from now, or
 * busy again; the reaper tells it to retire once idle long enough. */
void pc__session_set_idle(pc_agent_t *a, const char *key, bool idle);
/* The session actor wants to stop because it is idle: true if it may (no
 * message is on its way to it; its slot is then detached), false if it
 * must stay. */
bool pc__session_may_retire(pc_agent_t *a, const char *key, pc_actor_t *self);
/*
 * The transcript kept between runs of a busy session (the model context an
 * attempt ended with, which equals the stored transcript: every message in
 * it was acknowledged by the store). The next attempt takes it instead of
 * reading and parsing the transcript again. Ownership moves under the
 * directory's lock; anything that rewrites the transcript (compaction,
 * truncation) drops it first; the reaper drops it PC__TRANSCRIPT_KEEP_MS
 * after the session went idle.
 */
cJSON *pc__transcript_take(pc_agent_t *a, const char *key);
void pc__transcript_keep(pc_agent_t *a, const char *key, cJSON *messages);
void pc__transcript_drop(pc_agent_t *a, const char *key);

/* The session's event hub (a new reference), created if needed: hubs
 * exist only for sessions somebody subscribed to. */
pc_event_hub_t *pc__session_hub(pc_agent_t *a, const char *key);
/* The session's hub if it has one (a new reference), else NULL. */
pc_event_hub_t *pc__session_hub_peek(pc_agent_t *a, const char *key);


/* §6.4 watchdog, every PC__LOCK_WATCHDOG_MS: reports (log line, metric)
 * each session write lock this process has held past its max hold, and
 * returns how many. It releases nothing (docs/session-lock.md). */
#define PC__LOCK_WATCHDOG_MS 60000u
size_t pc__lock_watchdog(pc_agent_t *a);

/* A fresh run id. */
void pc__agent_run_id(pc_agent_t *a, char out[PC_RUN_ID_MAX + 1]);

/* The feed (agent_feed.c): made after the run registry, whose transitions
 * it publishes; freed with the agent. pc__agent_feed_message publishes a
 * message stored in session `key`'s transcript under `seq` (`json`: the
 * stored content, `role` its column; `idem`: for a run's prompt, the key
 * its request came with, or NULL), when anyone listens (which
 * pc__agent_feed_listened tells, so that a writer keeps nothing for it
 * otherwise). */
int pc__agent_feed_new(pc_agent_t *a);
void pc__agent_feed_free(pc_agent_t *a);
bool pc__agent_feed_listened(const pc_agent_t *a);
void pc__agent_feed_message(pc_agent_t *a, const char *key, const char *run_id, int64_t seq, const char *idem,
			    const char *role, const char *json);

/* Adds integer `v` to `o`: a number when it fits an int (cJSON prints
 * those with %d), else its digits as raw text, since cJSON prints any
 * other number with %1.15g and a scanf to check it (a millisecond
 * timestamp cost about a microsecond). For trees that are only printed. */
static inline bool pc__json_add_int(cJSON *o, const char *key, int64_t v)
{
	if (v >= INT_MIN && v <= INT_MAX)
		return cJSON_AddNumberToObject(o, key, (double)v) != NULL;
	char digits[24];
	snprintf(digits, sizeof(digits), "%" PRId64, v);
	return cJSON_AddRawToObject(o, key, digits) != NULL;
}


/* ---- the session actor (session/session_actor.c) ---- */

/* The SUBMIT payload: the params flattened into buf (offsets 0 = absent). */
typedef struct pc__submit {
	uint32_t key, message, idem, model, trigger, queue_mode, extra;
	uint32_t recover;     /* a run recovered after a crash (its row adopted): its id */
	uint32_t run_id;      /* the caller's run id (pc_agent_params_t.run_id) */
	uint64_t timeout_ms;
	bool has_think;       /* the run's own thinking level */
	pc_think_level_t think;
	char buf[];
} pc__submit_t;
/* recover_run: NULL, or the id of a run recovered after a crash (its row
 * exists and is this process's; session/recovery_internal.h). */
int pc__submit_encode(const pc_agent_params_t *p, const char *key, const char *recover_run, pc_msg_t **out);

int pc__session_spawn(pc_agent_t *a, const char *key, pc_actor_t **out);
/* sizeof the session actor's state, for its slab. */
size_t pc__session_state_size(void);

/* ---- the run actor (run/run_actor.c) ---- */

/* The run's end, told to its session, which frees the lane, then
 * publishes the terminal event and finishes the registry entry: so whoever
 * learns that the run ended (an agent.wait, a subscriber) and sends the
 * session its next message finds the lane free. (Sends from a handler are
 * batched per destination, so "sent first" would not mean "seen first".) */
typedef struct pc__run_done {
	char run_id[PC_RUN_ID_MAX + 1];
	pc_run_status_t status;
	char kind[32];       /* error kind, "" none */
	bool replay_invalid; /* the terminal event's replayInvalid */
	uint32_t error;      /* offset in buf of the error text, 0 none */
	uint32_t data;       /* offset in buf of the terminal event's data */
	char buf[];
} pc__run_done_t;

/* Sends the session a run's end. */
void pc__run_done_send(pc_actor_t *session, const char *run_id, pc_run_status_t status, const char *kind,
		       bool replay_invalid, const char *error, const char *data);

/* What the session hands a new run (copied). */
typedef struct pc__run_params {
	const char *run_id;
	const char *session_key;
	const char *prompt;
	const char *model;            /* "provider/model" or NULL */
	const char *extra_system_prompt;
	const char *idempotency_key;  /* the request's, or NULL */
	uint64_t timeout_ms;          /* 0: configured */
	bool has_think;               /* else the configured thinking level */
	pc_think_level_t think;
	uint64_t lane_ticket;         /* released when the run stops */
	pc_event_bus_t *bus;          /* retained by the run */
	int64_t epoch;                /* the session's lease: every transcript write carries it */
} pc__run_params_t;

/* Spawns a run actor for `p`; it reports to `session`. */
int pc__run_spawn(pc_agent_t *a, const pc__run_params_t *p, pc_actor_t *session, pc_actor_t **out);

/* Cuts oversized tool results in the session's transcript on the blocking
 * pool; `reply_to` gets PC__MSG_RUN_TRUNCATED with an int64 payload: how
 * many were cut, or a negative code. */
int pc__truncate_start(pc_agent_t *a, const char *key, int64_t epoch, uint64_t context_tokens,
		       uint64_t lock_max_hold_ms, pc_actor_t *reply_to);

/* The session write lock options of a run's rewrites (§6.4): the default
 * timeout, and the run's max hold, max(5 min, run timeout + compaction
 * timeout + 2 min) (pc_attempt_lock_max_hold_ms); `max_hold_ms` 0: the
 * default. */
static inline void pc__run_lock_opts(uint64_t max_hold_ms, pc_session_lock_opts_t *out)
{
	pc_session_lock_opts_init(out);
	if (max_hold_ms)
		out->max_hold_ms = max_hold_ms > INT64_MAX ? INT64_MAX : (int64_t)max_hold_ms;
}

/* TEST ONLY, not a setting: every wait a run decides (same-model
 * rate-limit steps, overload backoff, chain replays, the overload notice)
 * is divided by `d` (0 and 1: the real wait) for every run of the process,
 * so live tests of the 10-30 s steps finish quickly. The attempts trace
 * still records the decided delayMs. pc__agent_test_delay applies it. */
void pc__agent_test_delay_divisor(uint32_t d);
uint64_t pc__agent_test_delay(uint64_t ms);

/* ---- the attempt actor (attempt/attempt_actor.c) ---- */

typedef struct pc__attempt_params {
	const char *run_id;
	const char *session_key;
	uint32_t index;                   /* attempt number in the run, from 0 */
	const pc_provider_config_t *provider;
	const char *base_url;             /* resolved (embedded mock filled in) */
	const char *model;
	uint32_t profile;                 /* index into provider->profiles */
	pc_think_level_t think;
	uint64_t context_tokens;
	int64_t max_tokens;
	const char *prompt;               /* the user's prompt, or NULL when already persisted */
	const char *continuation;         /* a prompt override to append as a new user turn, or NULL */
	const char *const *additions;     /* sticky retry instructions (static strings) */
	size_t addition_count;
	const char *extra_system_prompt;
	const char *idempotency_key;      /* the run's request's, or NULL: what its
					   * prompt is named by in the feed */
	uint64_t timeout_ms;              /* the attempt's budget; 0: unlimited */
	pc_event_bus_t *bus;
	pc__loop_box_t *loop;             /* retained by the attempt; may be NULL */
	int64_t epoch;                    /* the session's lease: every transcript write carries it */
	uint64_t lock_max_hold_ms;        /* the run's write lock max hold (§6.4); 0: the default */
} pc__attempt_params_t;

/* The attempt's flat report. Strings and JSON are in buf at the offsets
 * (0 = absent). */
typedef struct pc__attempt_done {
	pc_run_outcome_t outcome;   /* pointers inside are NULL; texts below */
	uint32_t error_text;        /* prompt / assistant error text */
	uint32_t error_code;
	uint32_t payloads;          /* JSON array of final payload objects {text, isError?} */
	uint32_t stop_reason;       /* the final stop reason name */
	uint32_t revision;          /* before_agent_finalize's revision request, or 0 */
	int32_t provider_status;    /* the provider's error status that ended it, or 0 */
	uint32_t provider_message;  /* and its message, or 0 */
	bool user_persisted;        /* the user's prompt is in the transcript now */
	uint32_t tool_calls;        /* tool calls run in the attempt */
	/* its transcript writes and usage records are not durable yet: they
	 * commit with the next write the run waits for (its end's row, or a
	 * sync), and PC__MSG_ATTEMPT_SETTLED follows once they have */
	bool unsettled;
	char buf[];
} pc__attempt_done_t;

int pc__attempt_spawn(pc_agent_t *a, const pc__attempt_params_t *p, pc_actor_t *run, pc_actor_t **out);

/* The system prompt's context-files section (attempt/context_files.c): a
 * new string, the caller's, or NULL when it must first be read: then a
 * blocking job is queued that answers `reply_to` with
 * PC__MSG_ATTEMPT_CONTEXT. */
int pc__context_get(pc_agent_t *a, pc_actor_t *reply_to, char **out);

/* Builds a message of `type` with a NUL-terminated text payload. */
pc_msg_t *pc__text_msg(uint32_t type, const char *text);
/* A steering message: the run id of the message it came from (empty for
 * pc_agent_steer's, which has none), then its text, each NUL-terminated.
 * The id travels so that the message's own run ends when its text is
 * injected, or runs as a followup under that id when it is not. */
pc_msg_t *pc__steer_msg(uint32_t type, const char *run_id, const char *text);
static inline const char *pc__steer_id(const char *payload) { return payload; }
static inline const char *pc__steer_text(const char *payload) { return payload + strlen(payload) + 1; }
/* The payload's size: both strings with their NULs. */
static inline size_t pc__steer_size(const char *payload)
{
	const char *t = pc__steer_text(payload);
	return (size_t)(t - payload) + strlen(t) + 1;
}
/* The same steer, passed on as a message of `type`. */
pc_msg_t *pc__steer_copy(uint32_t type, const char *payload);

#endif
