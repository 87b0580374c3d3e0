/*
 * The store: sessions, transcripts, runs, attempts, model-call usage,
 * leases and the audit ledger, behind one interface whose backend today is SQLite (WAL mode).
 * Schema, durability promise and limits: docs/store.md.
 *
 * Shape. A pc_store_t owns a backend and a store actor. Every write is a
 * message to that actor; the actor groups writes that arrive close together
 * into one transaction (group commit) and runs it on the blocking pool.
 * Every reply to a write is sent only after its transaction has committed
 * durably, so "acknowledged" means "on disk". Reads (history snapshots) run
 * on the blocking pool too, on reader connections of their own, and are
 * answered from there. No SQLite call ever runs on a worker.
 *
 * Two ways in:
 *   - From actors: build a request with pc_store_req_* (the message is the
 *     caller's until sent), pc_ask it to pc_store_actor(), and read the
 *     reply with pc_store_reply_get / pc_store_history_take.
 *   - From plain threads (main, the CLI, tests): the pc_store_<verb>
 *     wrappers below do the same through pc_ask_sync and wait. They must
 *     not be called on a worker thread (PC_ESTATE).
 *
 * What the store decides (so a PostgreSQL backend can decide it the same
 * way, and callers never re-implement it): transcript sequence numbers,
 * idempotency of run creation, lease epochs and fencing checks, and the
 * atomicity of transcript rewrites.
 *
 * Threads: functions without a pc_store_t may be called from any thread;
 * pc_store_open and pc_store_close not from a runtime thread.
 */
#ifndef PINCER_IO_STORE_STORE_H
#define PINCER_IO_STORE_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "actors/actor.h"
#include "mailbox/msg.h"
#include "runtime/error.h"
#include "runtime/runtime.h"
#include "../lock/session_lock.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pc_store pc_store_t;

/* Store error codes, beyond runtime/error.h's (pc_store_strerror names
 * them all, and the PC_E* ones too). */
enum {
	PC_STORE_ECORRUPT = -100,  /* the file is not a database, or is damaged */
	PC_STORE_EFOREIGN = -101,  /* a database, but not a Pincer store */
	PC_STORE_EVERSION = -102,  /* a Pincer store newer than this build */
	PC_STORE_EFULL = -103,     /* disk full or file size limit reached */
	PC_STORE_EREADONLY = -104, /* the file or its directory cannot be written */
	PC_STORE_EIO = -105,       /* an I/O error from the OS */
	PC_STORE_ETOOBIG = -106,   /* content over the configured limit: refused */
	PC_STORE_EFENCED = -107,   /* a write carried a stale lease epoch */
	PC_STORE_ECONFLICT = -108, /* a rewrite's expected last sequence was stale */
	PC_STORE_ECANTOPEN = -109, /* the file could not be opened or created */
	PC_STORE_EUNAVAIL = -110,  /* the database server cannot be reached (or
				    * went away): nothing of the write was kept */
	PC_STORE_EUNKNOWN = -111,  /* the connection was lost after COMMIT was
				    * sent and the outcome could not be proved:
				    * the write may or may not be there */
};

const char *pc_store_strerror(int code);

/* Defaults. */
#define PC_STORE_DEFAULT_GROUP_MAX 256u
#define PC_STORE_DEFAULT_LAZY_MS 20u
/* How long a write transaction the database certainly did not keep, for it
 * could not be reached, is held and sent again before its writes fail
 * (PC_STORE_EUNAVAIL): a restart or a failover costs writers a wait. */
#define PC_STORE_DEFAULT_HOLD_MS 10000u
#define PC_STORE_DEFAULT_MAX_CONTENT ((size_t)8 << 20) /* 8 MiB per message */
#define PC_STORE_DEFAULT_AUDIT_MAX 100000u
#define PC_STORE_DEFAULT_AUDIT_DAYS 30u
#define PC_STORE_DEFAULT_TIMEOUT_MS 30000
#define PC_STORE_DEFAULT_IDEM_TTL_MS ((int64_t)24 * 3600 * 1000)
#define PC_STORE_DEFAULT_STATEMENT_TIMEOUT_MS 10000u
/* Longest session key, session id, run id, owner, role, kind... (bytes). */
#define PC_STORE_NAME_MAX 255u
#define PC_STORE_ID_MAX 128u
#define PC_STORE_CODE_MAX 63u /* a run's error code as read back (longer is cut) */

typedef struct pc_store_config {
	/* The database file. NULL: $PINCER_HOME/state.db, where PINCER_HOME
	 * defaults to ./.pincer (created, mode 0700, if missing). */
	const char *path;
	/* A PostgreSQL database instead of the file: a postgresql:// URI or a
	 * libpq conninfo string (docs/store.md, "PostgreSQL"). NULL: SQLite
	 * at `path`. */
	const char *url;
	uint32_t statement_timeout_ms; /* PostgreSQL: the server cancels a
					* statement after this long. 0 = default
					* PC_STORE_DEFAULT_STATEMENT_TIMEOUT_MS */
	/* PostgreSQL: the I/O layer (borrowed; it must outlive the store)
	 * whose loops poll the writer connection's socket, so a batch holds
	 * no thread while the server answers. NULL: a blocking thread waits
	 * for the answers. */
	struct pc_io *io;
	uint32_t window_ms;  /* group commit: how long the first write of an
			      * idle store waits for company before its
			      * transaction starts. 0 (the default) = no wait:
			      * writes that arrive while a transaction commits
			      * still share the next one; a window costs a lone
			      * writer ~window_ms per write (docs/store.md). */
	uint32_t lazy_ms;    /* how long a lazy write (pc_store_req_lazy) waits
			      * for a write that commits it. 0 = default
			      * PC_STORE_DEFAULT_LAZY_MS. */
	uint32_t hold_ms;    /* PostgreSQL: a transaction refused because the
			      * server could not be reached is sent again
			      * (100 ms doubling to 1 s apart; the writes
			      * behind it wait) for this long before its
			      * writes fail. 0 = default PC_STORE_DEFAULT_HOLD_MS */
	uint32_t group_max;  /* most writes in one transaction; 1 = one
			      * transaction per write. 0 = default 256. */
	size_t max_content;  /* bytes of one message's content (JSON) and of a
			      * run's usage/metadata JSON; larger is refused
			      * with PC_STORE_ETOOBIG. 0 = default 8 MiB. */
	uint32_t audit_max;  /* audit ledger rows kept (oldest go first). 0 =
			      * default 100 000. */
	uint32_t audit_days; /* audit rows older than this go. 0 = default 30. */
	/* Called when writes start failing (rc: the code) or succeed again
	 * (rc 0), on the store's writer thread: must not block. NULL: none. */
	void (*on_health)(void *user, int rc);
	void *health_user;
	int64_t idem_ttl_ms; /* how long an idempotency key is kept; 0 = default
			      * PC_STORE_DEFAULT_IDEM_TTL_MS (24 h) */
	int64_t timeout_ms;  /* how long the sync wrappers wait; 0 = default
			      * 30 s, < 0 = for ever. PC_ETIMEDOUT means the
			      * outcome is unknown, not that nothing happened. */
	/* Tests only, not a setting: the answers to lease acquires of session
	 * `test_lease_delay_key` (borrowed: it must outlive the store) go
	 * `test_lease_delay_ms` late, as from a slow store round trip; other
	 * answers are not held up. NULL or 0: none. */
	const char *test_lease_delay_key;
	uint32_t test_lease_delay_ms;
} pc_store_config_t;

void pc_store_config_init(pc_store_config_t *cfg);

/* The default database path for the current environment, written to `buf`
 * (NUL-terminated). PC_ELIMIT if it does not fit. */
int pc_store_default_path(char *buf, size_t len);

/* Opens (creating if needed) and migrates the database, then spawns the
 * store actor on `rt` (which must run until pc_store_close). Errors name the
 * cause: PC_STORE_ECORRUPT, _EFOREIGN, _EVERSION, _EREADONLY, _ECANTOPEN,
 * _EFULL, _EIO. On success *out is the caller's, released by
 * pc_store_close. Not on a worker thread: it does file I/O. */
int pc_store_open(pc_runtime_t *rt, const pc_store_config_t *cfg, pc_store_t **out);

/* Commits every write already sent, answers it, stops the actor, waits
 * for reads in flight, closes the database and frees the store. Writes
 * sent afterwards are answered PC_ESTOPPED (or dropped as dead letters).
 * The runtime must still be running. Returns 0, or (nothing done, the
 * store still open) PC_ESTATE on a worker thread or PC_ENOMEM. NULL is a
 * no-op. */
int pc_store_close(pc_store_t *s);

/* The store actor, borrowed (valid until pc_store_close). */
pc_actor_t *pc_store_actor(pc_store_t *s);

typedef struct pc_store_stats {
	uint64_t batches;        /* write transactions attempted */
	uint64_t writes;         /* writes in them */
	uint64_t failed_batches; /* transactions that failed as a whole */
	uint64_t reads;          /* reads served (histories, runs, listings) */
	uint64_t polled_reads;   /* of those, read over a connection the I/O
				  * loop polled, no thread waiting (PostgreSQL) */
	uint64_t write_cpu_ns;   /* CPU time (user and system) the writer spent
				  * in write transactions, checkpoints included */
	uint64_t retried_batches; /* transactions that failed and ran again, each
				   * write alone (a write the database rejected) */
	uint64_t unknown_writes;  /* writes answered PC_STORE_EUNKNOWN: the
				   * connection was lost during their commit */
	uint64_t fenced_writes;   /* writes refused PC_STORE_EFENCED: a stale
				   * lease epoch, a run another owner took or ended */
	uint64_t held_batches;    /* transactions sent again after the database
				   * could not be reached (hold_ms) */
} pc_store_stats_t;

/* Counters since open (each read atomically). Any thread. */
void pc_store_stats(pc_store_t *s, pc_store_stats_t *out);

/* Whether writes succeed: the outcome of the latest write transaction (0,
 * or the code it failed with: PC_STORE_EFULL for a full disk or a file
 * size limit, _EREADONLY, _EIO, PC_EBUSY for a database another process
 * kept locked...) and since when it has been so (wall ms; 0: since open).
 * Any thread. */
typedef struct pc_store_health {
	int32_t rc;
	int64_t since_ms;
} pc_store_health_t;
void pc_store_health(pc_store_t *s, pc_store_health_t *out);

/* A write that only touches the file (the database header), so that a
 * store whose writes failed learns whether they succeed again without
 * waiting for traffic. Urgent even when sent without a reply address. */
int pc_store_req_probe(pc_msg_t **out);

/* ---- records ---- */

/* A transcript message as written and as read back. Strings are UTF-8 and
 * NUL-terminated; NULL means absent (content and role are required). */
typedef struct pc_store_msg {
	int64_t seq;               /* read: the message's sequence number */
	int64_t created_ms;        /* wall clock ms; 0 on write = now */
	const char *role;          /* "user", "assistant", "toolResult", "system", ... */
	const char *content;       /* the message, JSON (validated when the request is
				    * built, unless json_checked) */
	const char *tool_call_ids; /* JSON array of tool-call ids: for an assistant
				    * message the calls it makes, in call order;
				    * for a toolResult the one id it answers */
	const char *run_id;        /* the run that produced it, if any */
	const char *idem_key;      /* read: the idempotency key that run was
				    * accepted under, if any (ignored on write) */
	bool json_checked;         /* write: content and tool_call_ids were printed by a
				    * JSON library, so they are not parsed again (the
				    * agent's own messages); otherwise malformed JSON is
				    * refused with PC_EINVAL before anything is sent */
} pc_store_msg_t;

typedef enum pc_store_run_status {
	PC_STORE_RUN_ACCEPTED = 0,
	PC_STORE_RUN_RUNNING = 1,
	PC_STORE_RUN_OK = 2,
	PC_STORE_RUN_ERROR = 3,
	PC_STORE_RUN_ABORTED = 4,
	PC_STORE_RUN_TIMEOUT = 5,
} pc_store_run_status_t;

typedef struct pc_store_attempt {
	const char *run_id;
	uint32_t index;       /* 0-based within the run */
	const char *provider, *model, *profile; /* may be NULL */
	const char *reason;   /* failover reason that led to it, or NULL */
	const char *status;   /* "ok", "error", "aborted", "timeout", ... */
	const char *code;     /* a short error code, never a raw message; may be NULL */
	int64_t duration_ms;
} pc_store_attempt_t;

/* One audit ledger record: metadata only. There is deliberately no field
 * for prompts, messages, tool arguments, tool results or raw errors. */
typedef struct pc_store_audit {
	const char *kind;        /* "agent_run" or "tool_action" */
	const char *status;      /* started|succeeded|failed|cancelled|timed_out|blocked|unknown */
	const char *run_id;
	const char *session_key; /* may be NULL */
	const char *tool_name;   /* tool_action only; may be NULL */
	const char *tool_call_id;/* may be NULL */
	const char *code;        /* run_* / tool_* outcome code, or NULL */
	int64_t ts_ms;           /* 0 = now */
} pc_store_audit_t;

/* One model call's token usage (spec §11.3, normalized: `input` never
 * includes cached tokens), as written and as read back. A run's calls are
 * numbered by attempt and, within it, by call (both from 0); a call
 * written twice keeps its last record. */
typedef struct pc_store_usage {
	const char *run_id;      /* required */
	const char *session_key; /* required */
	uint32_t attempt;        /* the attempt's index in the run */
	uint32_t call;           /* the model call's index in the attempt */
	const char *provider, *model; /* may be NULL */
	int64_t input, output, cache_read, cache_write, total; /* each >= 0 */
	int64_t created_ms;      /* wall clock ms; 0 on write = now */
} pc_store_usage_t;

/* ---- requests (for actors) ---- */

/* Message types. Requests go to pc_store_actor(); every request asked
 * with pc_ask gets exactly one reply: PC_STORE_MSG_HISTORY for
 * PC_STORE_REQ_HISTORY, PC_STORE_MSG_SESSIONS for PC_STORE_REQ_SESSIONS,
 * PC_STORE_MSG_RUNS for PC_STORE_REQ_RUNS_OPEN, PC_STORE_MSG_USAGE for
 * PC_STORE_REQ_USAGE_LIST and _DAYS, PC_STORE_MSG_DEVICES for
 * PC_STORE_REQ_DEVICES, PC_STORE_MSG_NODES for PC_STORE_REQ_NODES,
 * PC_STORE_MSG_REPLY for everything else. */
enum {
	PC_STORE_REQ_SESSION = 0x53540001u, /* ensure a session row */
	PC_STORE_REQ_APPEND,
	PC_STORE_REQ_REWRITE,
	PC_STORE_REQ_RUN_BEGIN,
	PC_STORE_REQ_RUN_END,
	PC_STORE_REQ_ATTEMPT,
	PC_STORE_REQ_AUDIT,
	PC_STORE_REQ_LEASE_ACQUIRE,
	PC_STORE_REQ_LEASE_RELEASE,
	PC_STORE_REQ_HISTORY,
	PC_STORE_REQ_RUN_GET,
	PC_STORE_REQ_SESSION_SET,
	PC_STORE_REQ_SESSIONS,
	PC_STORE_REQ_SYNC,
	PC_STORE_REQ_RUN_ADOPT,
	PC_STORE_REQ_RUNS_OPEN,
	PC_STORE_REQ_PROBE,
	PC_STORE_REQ_USAGE_ADD,
	PC_STORE_REQ_USAGE_LIST,
	PC_STORE_REQ_USAGE_DAYS,
	PC_STORE_REQ_DEVICE_PUT,
	PC_STORE_REQ_DEVICE_DELETE,
	PC_STORE_REQ_DEVICES,
	PC_STORE_REQ_NODE_BEAT,
	PC_STORE_REQ_NODES,
	PC_STORE_MSG_REPLY = 0x53540100u,
	PC_STORE_MSG_HISTORY,
	PC_STORE_MSG_SESSIONS,
	PC_STORE_MSG_RUNS,
	PC_STORE_MSG_USAGE,
	PC_STORE_MSG_DEVICES,
	PC_STORE_MSG_NODES,
};

/* The payload of a PC_STORE_MSG_REPLY. */
typedef struct pc_store_reply {
	int32_t rc;      /* 0 or a negative code */
	uint32_t flags;  /* PC_STORE_CREATED */
	int64_t seq;     /* APPEND: the new message's seq; REWRITE: the new last seq */
	int64_t epoch;   /* LEASE_ACQUIRE: the lease's fencing epoch */
	int32_t status;  /* RUN_BEGIN, RUN_GET: the run's status (pc_store_run_status_t) */
	uint32_t pad;
	int64_t started_ms, ended_ms; /* RUN_GET (ended_ms 0 while it runs); NODE_BEAT: the node's
				       * started_ms, and the beat's time (its heartbeat_ms) */
	char id[PC_STORE_ID_MAX + 1]; /* SESSION: the session id; RUN_BEGIN, RUN_GET: the run id;
				       * LEASE_ACQUIRE refused (PC_EBUSY): the holder; granted: the
				       * owner it was taken from ("" if none, or the same owner);
				       * NODE_BEAT refused (PC_EBUSY): the id's live owner */
	char code[PC_STORE_CODE_MAX + 1]; /* RUN_GET: its error code ("" if none) */
} pc_store_reply_t;

#define PC_STORE_CREATED 1u     /* SESSION / RUN_BEGIN / NODE_BEAT: this request created the row */
#define PC_STORE_PROVISIONAL 2u /* RUN_BEGIN with PC_STORE_REQ_EARLY: not yet durable */
#define PC_STORE_MISMATCH 4u    /* RUN_BEGIN: a repeated key whose fingerprint differs */
#define PC_STORE_REPLAY_INVALID 8u /* RUN_GET: the run ended replay-invalid (pc_store_run_end_t) */

/* Each builder writes a new message (owned by the caller until sent) to
 * *out. Strings are copied. PC_EINVAL for a missing required field or a
 * name over PC_STORE_NAME_MAX; PC_ENOMEM. */

/* Ensures a session `key` exists (agent and metadata JSON are used only
 * when creating; `session_id` NULL = generate one). Reply: id, CREATED. */
int pc_store_req_session(const char *key, const char *agent, const char *session_id, const char *metadata,
			 pc_msg_t **out);
/* Replaces session `key`'s metadata JSON (the loop's counters, overrides
 * and toggles live there). `epoch` as for append. PC_ENOTFOUND if there
 * is no such session. */
int pc_store_req_session_set(const char *key, int64_t epoch, const char *metadata, pc_msg_t **out);
/* Appends one message to `key`'s transcript (creating the session row if
 * needed). `epoch` > 0: refused with PC_STORE_EFENCED unless it is the
 * session's current lease epoch. Reply: seq. */
int pc_store_req_append(const char *key, int64_t epoch, const pc_store_msg_t *m, pc_msg_t **out);
/* Replaces the messages with seq >= from_seq by msgs[0..n) (which get new,
 * higher sequence numbers; n may be 0: truncation), in one transaction,
 * only if the session's last seq is still `expected_last_seq` (else
 * PC_STORE_ECONFLICT: something was appended since the snapshot). `epoch`
 * as for append. Reply: seq = the new last seq. */
int pc_store_req_rewrite(const char *key, int64_t epoch, int64_t expected_last_seq, int64_t from_seq,
			 const pc_store_msg_t *msgs, size_t n, pc_msg_t **out);
/* A run to create. Strings are copied; key and run_id are required. */
typedef struct pc_store_run_new {
	const char *key, *run_id;
	/* The caller's idempotency key (NULL: none). Keys are scoped to the
	 * session and kept for the store's idem_ttl_ms: a key seen within it
	 * creates nothing and the reply names the first run (id, status)
	 * without CREATED, with PC_STORE_MISMATCH when `fingerprint` differs
	 * from the first request's. An older key is forgotten and a new run
	 * is created. */
	const char *idem_key;
	const char *fingerprint; /* what the request asked, for that comparison; may be NULL */
	const char *owner;       /* the process that accepted it (pc_store_req_runs_open); may be NULL */
	const char *prompt;      /* JSON: what running it takes, kept until it ends, so a
				  * restart can run it; may be NULL */
	uint32_t flags;          /* PC_STORE_REQ_EARLY */
} pc_store_run_new_t;
/* With PC_STORE_REQ_EARLY the asker hears twice under the same corr: once
 * the row's statement has run in its batch, before the commit (PROVISIONAL
 * set, rc 0: what the final reply will say unless the commit fails), then
 * as usual once it is durable or failed. A caller that may act before
 * durability (start the run) saves a commit's wait without losing the
 * duplicate check. PC_EINVAL for a missing key or run id, a name over
 * PC_STORE_NAME_MAX, or a prompt that is not JSON. */
#define PC_STORE_REQ_EARLY 1u
int pc_store_req_run_begin(const pc_store_run_new_t *r, pc_msg_t **out);
/* A run's end: status, a short error code (never a raw message; may be
 * NULL) and usage JSON (may be NULL; malformed: PC_EINVAL at once, unless
 * `flags` has PC_STORE_REQ_JSON_CHECKED: the caller printed it with a JSON
 * library, as json_checked says of a message). `epoch` > 0 fences it by
 * session `key`'s lease as a transcript write is (PC_STORE_EFENCED, the
 * row unchanged): an end that commits with the run's last transcript
 * writes lands only if they do. The first end stands: a run that has
 * ended already is left as it is (PC_STORE_EFENCED: another process, a
 * cluster node that took the run over, ended it). PC_ENOTFOUND for an
 * unknown run. */
#define PC_STORE_REQ_JSON_CHECKED 2u
typedef struct pc_store_run_end {
	const char *run_id;
	pc_store_run_status_t status;
	const char *error_code, *usage;
	const char *key; /* with epoch > 0; else may be NULL */
	int64_t epoch;
	uint32_t flags;
	bool replay_invalid; /* a mutating tool of the run ran, or may have: running
			      * it again could repeat that (spec §1.14) */
} pc_store_run_end_t;
int pc_store_req_run_end(const pc_store_run_end_t *e, pc_msg_t **out);
int pc_store_req_attempt(const pc_store_attempt_t *a, pc_msg_t **out);
/* Records one model call's usage. `epoch` > 0: refused with
 * PC_STORE_EFENCED unless it is the session's current lease epoch (as for
 * append; a session without a row is fenced too). PC_EINVAL for a missing
 * run id or session key, or a negative count. */
int pc_store_req_usage_add(const pc_store_usage_t *u, int64_t epoch, pc_msg_t **out);
int pc_store_req_audit(const pc_store_audit_t *a, pc_msg_t **out);
/* Marks a write request (built above, not yet sent) as one that need not
 * start a transaction of its own: it waits in the queue for the next write
 * that does, a sync, or at most lazy_ms, and then commits with them. Its
 * reply still comes once it is durable. A write sent without a reply
 * address (pc_send) is lazy anyway: nobody waits for it. For writes whose
 * durability matters only later, as a transcript's during a turn: one sync
 * at the end then costs one commit instead of one per write. */
void pc_store_req_lazy(pc_msg_t *req);
/* Marks a write request (built, not yet sent) that nobody waits for as one
 * that commits at once all the same, as a waited-for write does: for a
 * write whose durability bounds what a crash can undo. */
void pc_store_req_urgent(pc_msg_t *req);
/* Commits every write queued before it now. Reply (rc 0, or the commit's
 * error) once they are durable. */
int pc_store_req_sync(pc_msg_t **out);
/* Takes (or renews, for the same owner) the lease on session `key` for
 * `ttl_ms`, or, with PC_STORE_LEASE_NODE, for as long as the owner's
 * cluster node is live. Every take by a new owner raises the epoch.
 * PC_EBUSY, with the holder in the reply's id, while another owner holds a
 * live lease, unless that owner is `steal_from` (may be NULL): the caller
 * knows it is gone (a dead process on this machine) and takes the lease
 * now. A timed lease is live until it expires; a node-bound one while a
 * live node row (pc_store_req_node_beat) has its holder as owner.
 * PC_STORE_LEASE_NODE from an owner with no live node row: PC_ESTATE (a
 * node out of the cluster takes nothing). Reply: epoch, and in id the
 * owner the lease was taken from when that was another one (its lease ran
 * out, its node is gone, or it was stolen): that owner's writes are
 * fenced from now on. Time is the store's clock (PostgreSQL: the
 * database's clock_timestamp(), as the nodes'). */
#define PC_STORE_LEASE_NODE (-1)
int pc_store_req_lease_acquire(const char *key, const char *owner, int64_t ttl_ms, const char *steal_from,
			       pc_msg_t **out);
/* Releases it if `owner` still holds it at `epoch` (else PC_STORE_EFENCED). */
int pc_store_req_lease_release(const char *key, const char *owner, int64_t epoch, pc_msg_t **out);
/* Makes `to_owner` the owner of accepted run `run_id` if `from_owner`
 * (NULL: none) still is and the run has not ended: recovery takes over a
 * gone process's runs so that only one process runs or ends each.
 * PC_STORE_EFENCED when another process took it first or it ended. In a
 * cluster: PC_EBUSY while `from_owner` owns a live node row (a live node's
 * runs are its own); `from_owner` == `to_owner` claims the run for a node
 * that may have been counted out, PC_ESTATE unless its row is live. */
int pc_store_req_run_adopt(const char *run_id, const char *from_owner, const char *to_owner, pc_msg_t **out);
/* Reads run `run_id` (a read: answered from a reader connection).
 * PC_ENOTFOUND if there is none. Reply: id, status, started/ended, code,
 * PC_STORE_REPLAY_INVALID. */
int pc_store_req_run_get(const char *run_id, pc_msg_t **out);
/* A consistent snapshot of `key`'s session row and transcript
 * (PC_ENOTFOUND if no such session). Reply: PC_STORE_MSG_HISTORY. */
int pc_store_req_history(const char *key, pc_msg_t **out);

/* Reads a PC_STORE_MSG_REPLY (PC_EINVAL if `m` is not one). */
int pc_store_reply_get(const pc_msg_t *m, pc_store_reply_t *out);

/* ---- history snapshots ---- */

typedef struct pc_store_history pc_store_history_t;

/* Takes a copy of a PC_STORE_MSG_HISTORY reply (borrowed) as a snapshot
 * the caller owns (pc_store_history_free). Returns the reply's code when
 * the read failed (then *out is NULL). */
int pc_store_history_take(const pc_msg_t *m, pc_store_history_t **out);
size_t pc_store_history_count(const pc_store_history_t *h);
/* The session's last seq at the time of the snapshot (for rewrite). */
int64_t pc_store_history_last_seq(const pc_store_history_t *h);
/* The session row as of the snapshot; strings point into the snapshot. */
typedef struct pc_store_session {
	const char *id, *agent, *metadata; /* agent, metadata may be NULL */
	int64_t created_ms, updated_ms;
} pc_store_session_t;
void pc_store_history_session(const pc_store_history_t *h, pc_store_session_t *out);
/* Message i (< count); strings point into the snapshot. */
void pc_store_history_get(const pc_store_history_t *h, size_t i, pc_store_msg_t *out);
void pc_store_history_free(pc_store_history_t *h);

/* ---- session listings ---- */

/*
 * Sessions in pages. A page holds at most `limit` sessions in `order`;
 * the next page starts after the last entry of this one: pass its key as
 * after_key and, for the two time orders, its updated_ms (UPDATED) or
 * created_ms (CREATED) as after_ms. Paging by cursor rather than by offset
 * neither skips nor repeats a session that keeps its place while the
 * caller pages; a session updated meanwhile moves (UPDATED) and may be
 * seen twice or not at all. A page reads every session row (its cost
 * grows with the number of sessions) plus, per listed session, its runs'
 * index entries.
 */
typedef enum pc_store_sessions_order {
	PC_STORE_SESSIONS_UPDATED = 0, /* most recently updated first; ties by key */
	PC_STORE_SESSIONS_CREATED,     /* most recently created first; ties by key */
	PC_STORE_SESSIONS_KEY,         /* by key, bytewise ascending */
} pc_store_sessions_order_t;

#define PC_STORE_SESSIONS_DEFAULT 100u
#define PC_STORE_SESSIONS_MAX 1000u

typedef struct pc_store_sessions_query {
	uint32_t limit;                  /* 0: PC_STORE_SESSIONS_DEFAULT; at most _MAX */
	pc_store_sessions_order_t order;
	const char *after_key;           /* the previous page's last key; NULL: the first page */
	int64_t after_ms;                /* that entry's updated_ms / created_ms (time orders) */
	/* non-NULL: only the session whose id this is (no paging; ids are not
	 * indexed: a scan of the sessions) */
	const char *id;
} pc_store_sessions_query_t;

/* The request for a page (a read, answered from a reader connection);
 * q NULL: the first page with the defaults. PC_EINVAL for a limit over
 * PC_STORE_SESSIONS_MAX, an unknown order or a cursor key or id over
 * PC_STORE_NAME_MAX. Reply: PC_STORE_MSG_SESSIONS. */
int pc_store_req_sessions(const pc_store_sessions_query_t *q, pc_msg_t **out);

/* One listed session; strings point into the listing. */
typedef struct pc_store_session_entry {
	const char *key, *id;
	const char *agent;         /* may be NULL */
	int64_t created_ms, updated_ms; /* wall clock ms; updated by appends and metadata */
	int64_t last_seq;          /* the transcript's last seq (0: no message yet); a
				    * rewrite gives new numbers, so it is not a count */
	uint64_t runs;             /* runs recorded for the session */
	const char *last_run_id;   /* the most recently begun run, or NULL */
	const char *open_run_id;   /* the first run accepted and not ended: the one
				    * running, or the next to (on a cluster, on
				    * whichever node runs the session), or NULL */
} pc_store_session_entry_t;

typedef struct pc_store_sessions pc_store_sessions_t;

/* Takes a copy of a PC_STORE_MSG_SESSIONS reply (borrowed) as a listing the
 * caller owns (pc_store_sessions_free). Returns the reply's code when the
 * read failed (then *out is NULL). */
int pc_store_sessions_take(const pc_msg_t *m, pc_store_sessions_t **out);
size_t pc_store_sessions_count(const pc_store_sessions_t *l);
/* True when sessions beyond this page exist (at the time of the read). */
bool pc_store_sessions_more(const pc_store_sessions_t *l);
/* Entry i (< count). */
void pc_store_sessions_get(const pc_store_sessions_t *l, size_t i, pc_store_session_entry_t *out);
void pc_store_sessions_free(pc_store_sessions_t *l);

/* ---- open runs ---- */

/* Runs accepted and not ended, oldest first: what a restart must run or
 * end. At most PC_STORE_RUNS_OPEN_MAX are listed (the oldest). */
#define PC_STORE_RUNS_OPEN_MAX 65536u
int pc_store_req_runs_open(pc_msg_t **out);

typedef struct pc_store_open_run {
	const char *run_id, *key;
	const char *owner;   /* may be NULL (a run from before owners were kept) */
	const char *prompt;  /* may be NULL */
	int64_t accepted_ms;
	bool started;        /* the transcript holds a message of it: it began */
} pc_store_open_run_t;

typedef struct pc_store_open_runs pc_store_open_runs_t;

/* Takes a copy of a PC_STORE_MSG_RUNS reply (borrowed); returns the
 * reply's code when the read failed (then *out is NULL). */
int pc_store_open_runs_take(const pc_msg_t *m, pc_store_open_runs_t **out);
size_t pc_store_open_runs_count(const pc_store_open_runs_t *l);
/* Entry i (< count); strings point into the listing. */
void pc_store_open_runs_get(const pc_store_open_runs_t *l, size_t i, pc_store_open_run_t *out);
void pc_store_open_runs_free(pc_store_open_runs_t *l);

/* ---- usage records ---- */

/*
 * The usage records of run `run_id` (by attempt, then call), or, with
 * run_id NULL, of session `session_key` (oldest first). A listing holds at
 * most PC_STORE_USAGE_LIST_MAX records; its totals cover every matching
 * record, listed or not, and are exact sums. A read: answered from a
 * reader connection. PC_EINVAL when neither is given or a name is over
 * PC_STORE_NAME_MAX. Reply: PC_STORE_MSG_USAGE.
 */
#define PC_STORE_USAGE_LIST_MAX 10000u
int pc_store_req_usage_list(const char *run_id, const char *session_key, pc_msg_t **out);

typedef struct pc_store_usage_list pc_store_usage_list_t;

/* Takes a copy of a PC_STORE_MSG_USAGE reply (borrowed) as a listing the
 * caller owns (pc_store_usage_list_free). Returns the reply's code when the
 * read failed (then *out is NULL). */
int pc_store_usage_list_take(const pc_msg_t *m, pc_store_usage_list_t **out);
/* Records listed. */
size_t pc_store_usage_list_count(const pc_store_usage_list_t *l);
/* Record i (< count); strings point into the listing. */
void pc_store_usage_list_get(const pc_store_usage_list_t *l, size_t i, pc_store_usage_t *out);
/* The sums of every matching record's counts (strings NULL, attempt 0,
 * created_ms the latest record's), and in *records (may be NULL) how many
 * records there are. */
void pc_store_usage_list_totals(const pc_store_usage_list_t *l, pc_store_usage_t *out, uint64_t *records);
void pc_store_usage_list_free(pc_store_usage_list_t *l);

/*
 * The usage records made in [from_ms, to_ms) (wall clock ms), summed by
 * UTC day: a listing whose entries are the days that have records, oldest
 * first (read them with pc_store_usage_day_get), and whose totals
 * (pc_store_usage_list_totals) are the window's. A read: answered from a
 * reader connection; it scans the usage records. PC_EINVAL when from_ms >
 * to_ms. Reply: PC_STORE_MSG_USAGE.
 */
int pc_store_req_usage_days(int64_t from_ms, int64_t to_ms, pc_msg_t **out);

/* One day of such a listing. */
typedef struct pc_store_usage_day {
	int64_t day_ms;   /* the day's first ms (UTC midnight) */
	uint64_t records; /* usage records summed */
	int64_t input, output, cache_read, cache_write, total;
} pc_store_usage_day_t;
/* Day i (< pc_store_usage_list_count) of a listing pc_store_req_usage_days
 * asked for. */
void pc_store_usage_day_get(const pc_store_usage_list_t *l, size_t i, pc_store_usage_day_t *out);

/* ---- paired devices ---- */

/*
 * The devices the gateway paired (docs/gateway.md, "Device identity"), so
 * that a restart keeps them. A device token is kept only as its SHA-256:
 * the store can tell a presented token from others but cannot give it
 * back. One row per device id; a put replaces the row.
 */
typedef struct pc_store_device {
	const char *id;         /* required: the device id */
	const char *public_key; /* required */
	const char *token_hash; /* required: lower-case hex SHA-256 of the device token */
	const char *scopes;     /* the scopes its token grants, names joined by ","; may be NULL */
	int64_t approved_ms;    /* when it was paired */
	int64_t issued_ms;      /* when its token was issued */
	bool update_only;       /* write: change the row only if it exists (else PC_ENOTFOUND): a change
				 * to a known device must not bring back a row a delete sent at the same
				 * time removed first */
} pc_store_device_t;

/* At most this many devices are listed (the most recently issued). */
#define PC_STORE_DEVICES_MAX 4096u

/* Writes (replaces) device d->id's row. PC_EINVAL for a missing id,
 * key or hash, or one over PC_STORE_NAME_MAX. */
int pc_store_req_device_put(const pc_store_device_t *d, pc_msg_t **out);
/* Deletes device `id`'s row: its token no longer works after a restart.
 * PC_ENOTFOUND when there was none. */
int pc_store_req_device_delete(const char *id, pc_msg_t **out);
/* Every device row, most recently issued first (a read). Reply:
 * PC_STORE_MSG_DEVICES. */
int pc_store_req_devices(pc_msg_t **out);

typedef struct pc_store_devices pc_store_devices_t;

/* Takes a copy of a PC_STORE_MSG_DEVICES reply (borrowed); returns the
 * reply's code when the read failed (then *out is NULL). */
int pc_store_devices_take(const pc_msg_t *m, pc_store_devices_t **out);
size_t pc_store_devices_count(const pc_store_devices_t *l);
/* Device i (< count); strings point into the listing. */
void pc_store_devices_get(const pc_store_devices_t *l, size_t i, pc_store_device_t *out);
void pc_store_devices_free(pc_store_devices_t *l);

/* ---- cluster nodes ---- */

/*
 * The gateways sharing this store (docs/cluster.md) record heartbeats
 * here, one row per node id, so that each can tell which of the others
 * are there. A node is live while the store's clock is before its
 * heartbeat_ms plus its lease. Times are the store's clock, ms since the
 * epoch (PostgreSQL: the database's, so nodes on several machines agree;
 * SQLite: this machine's wall clock).
 */
typedef struct pc_store_node {
	const char *id;       /* the node's id (cluster.nodeId) */
	const char *url;      /* how other nodes reach it (cluster.advertiseUrl); may be NULL */
	const char *owner;    /* the process beating for it (its lease-owner string); NULL in a
			       * row from before owners were kept */
	int64_t started_ms;   /* its first heartbeat since it last started (a fresh beat) */
	int64_t heartbeat_ms; /* its latest heartbeat */
	int64_t expires_ms;   /* heartbeat_ms plus its lease */
	bool live;            /* expires_ms is after the store's clock at the read */
} pc_store_node_t;

/* At most this many nodes are listed. */
#define PC_STORE_NODES_MAX 1024u

/* Records node `id`'s heartbeat at the store's clock, live for `lease_ms`
 * after it (0: the node leaves: its row expires now), beaten by process
 * `owner` (its lease-owner string: the node-bound leases it takes,
 * PC_STORE_LEASE_NODE, are held while this row is live). `fresh`: the node
 * has just started (started_ms becomes now). Creates the row if missing;
 * the row's url and owner become `url` and `owner`. PC_EBUSY, the row
 * unchanged and its owner in the reply's id, while the row is live and
 * another owner's (two processes given one node id never share a row; a
 * row from before owners were kept has none and is taken). Urgent:
 * answered once durable, and committed at once even when sent without a
 * reply address (a late beat makes a live node look gone). PC_EINVAL for
 * a missing id or owner, an id, url or owner over PC_STORE_NAME_MAX, an
 * empty owner, a negative lease. Reply (PC_STORE_MSG_REPLY): started_ms,
 * the node's started_ms; ended_ms, the store's clock at the beat (the
 * row's heartbeat_ms); PC_STORE_CREATED when the row is new. */
int pc_store_req_node_beat(const char *id, const char *url, const char *owner, int64_t lease_ms, bool fresh,
			   pc_msg_t **out);
/* Every node row, live ones first, then by id (bytewise), live as of the
 * store's clock at the read. Reply: PC_STORE_MSG_NODES. */
int pc_store_req_nodes(pc_msg_t **out);

typedef struct pc_store_nodes pc_store_nodes_t;

/* Takes a copy of a PC_STORE_MSG_NODES reply (borrowed); returns the
 * reply's code when the read failed (then *out is NULL). */
int pc_store_nodes_take(const pc_msg_t *m, pc_store_nodes_t **out);
size_t pc_store_nodes_count(const pc_store_nodes_t *l);
/* Node i (< count); strings point into the listing. */
void pc_store_nodes_get(const pc_store_nodes_t *l, size_t i, pc_store_node_t *out);
void pc_store_nodes_free(pc_store_nodes_t *l);

/* ---- plain-thread wrappers (pc_ask_sync; not on a worker) ---- */

int pc_store_session(pc_store_t *s, const char *key, const char *agent, const char *session_id,
		     const char *metadata, pc_store_reply_t *out);
int pc_store_session_set(pc_store_t *s, const char *key, int64_t epoch, const char *metadata);
int pc_store_append(pc_store_t *s, const char *key, int64_t epoch, const pc_store_msg_t *m, int64_t *seq);
int pc_store_rewrite(pc_store_t *s, const char *key, int64_t epoch, int64_t expected_last_seq,
		     int64_t from_seq, const pc_store_msg_t *msgs, size_t n, int64_t *last_seq);
/* The rewrite every compaction and truncation goes through: takes the
 * session's write lock in `lock_dir` (io/lock/session_lock.h: other
 * processes are excluded as well as this one), rewrites as
 * pc_store_rewrite does, and releases the lock. `opts` may be NULL (the
 * defaults, 60 s acquire timeout). PC_EBUSY, with the holder in `busy` (may
 * be NULL), when the lock stayed taken for the whole timeout; nothing was
 * changed then. Blocks: from a plain thread or the blocking pool, never a
 * worker (PC_ESTATE). */
int pc_store_rewrite_locked(pc_store_t *s, const char *lock_dir, const pc_session_lock_opts_t *opts,
			    const char *key, int64_t epoch, int64_t expected_last_seq, int64_t from_seq,
			    const pc_store_msg_t *msgs, size_t n, int64_t *last_seq, pc_session_lock_info_t *busy);
int pc_store_run_begin(pc_store_t *s, const pc_store_run_new_t *r, pc_store_reply_t *out);
int pc_store_run_adopt(pc_store_t *s, const char *run_id, const char *from_owner, const char *to_owner);
int pc_store_runs_open(pc_store_t *s, pc_store_open_runs_t **out);
int pc_store_run_end(pc_store_t *s, const pc_store_run_end_t *e);
int pc_store_run_get(pc_store_t *s, const char *run_id, pc_store_reply_t *out);
int pc_store_attempt(pc_store_t *s, const pc_store_attempt_t *a);
int pc_store_usage_add(pc_store_t *s, const pc_store_usage_t *u, int64_t epoch);
int pc_store_usage_list(pc_store_t *s, const char *run_id, const char *session_key, pc_store_usage_list_t **out);
int pc_store_usage_days(pc_store_t *s, int64_t from_ms, int64_t to_ms, pc_store_usage_list_t **out);
int pc_store_audit(pc_store_t *s, const pc_store_audit_t *a);
/* holder (may be NULL; PC_STORE_ID_MAX + 1 bytes): on PC_EBUSY, the
 * holder; on a grant, the owner it was taken from ("" if none). */
int pc_store_lease_acquire(pc_store_t *s, const char *key, const char *owner, int64_t ttl_ms, const char *steal_from,
			   int64_t *epoch, char *holder);
int pc_store_lease_release(pc_store_t *s, const char *key, const char *owner, int64_t epoch);
int pc_store_history(pc_store_t *s, const char *key, pc_store_history_t **out);
int pc_store_device_put(pc_store_t *s, const pc_store_device_t *d);
int pc_store_device_delete(pc_store_t *s, const char *id);
int pc_store_devices(pc_store_t *s, pc_store_devices_t **out);
int pc_store_node_beat(pc_store_t *s, const char *id, const char *url, const char *owner, int64_t lease_ms,
		       bool fresh, pc_store_reply_t *out /* may be NULL */);
int pc_store_nodes(pc_store_t *s, pc_store_nodes_t **out);
/* q NULL: the first page, default limit, most recently updated first. */
int pc_store_sessions(pc_store_t *s, const pc_store_sessions_query_t *q, pc_store_sessions_t **out);

/* ---- transcript hygiene (pure; no store needed) ---- */

/* Counts of what a repair changed. */
typedef struct pc_store_repair_stats {
	uint32_t moved;       /* results moved up to follow their call */
	uint32_t synthesized; /* missing results replaced by a synthetic error */
	uint32_t orphans;     /* results with no matching call, dropped */
	uint32_t duplicates;  /* second results for one id, dropped */
	uint32_t errored;     /* results of error/aborted assistant turns, dropped */
} pc_store_repair_stats_t;

/* The text of a synthetic result (spec §2.2). */
#define PC_STORE_SYNTHETIC_RESULT_TEXT                                                              \
	"[openclaw] missing tool result in session history; inserted synthetic error result for "    \
	"transcript repair."

typedef struct pc_store_repaired pc_store_repaired_t;

/* Tool-call / tool-result pairing repair (spec §2.2 step 5, policy
 * "drop") over msgs[0..n): afterwards every assistant message with tool
 * calls is followed at once by exactly one "toolResult" per call id, in
 * call order (later results are moved up; missing ones become synthetic
 * error results); results without a preceding call, duplicates, and
 * results of assistant turns whose content has "stopReason" "error" or
 * "aborted" are dropped. Call ids come from `tool_call_ids`. The output
 * (owned by the caller, pc_store_repaired_free) borrows the strings of
 * `msgs`, which must outlive it, and owns those of synthetic results; it
 * keeps seq of the messages it kept (0 for synthetic ones) and can be
 * passed to pc_store_rewrite. */
int pc_store_repair_tool_pairs(const pc_store_msg_t *msgs, size_t n, pc_store_repaired_t **out,
			       pc_store_repair_stats_t *stats);
size_t pc_store_repaired_count(const pc_store_repaired_t *r);
const pc_store_msg_t *pc_store_repaired_msgs(const pc_store_repaired_t *r);
void pc_store_repaired_free(pc_store_repaired_t *r);

#ifdef __cplusplus
}
#endif
#endif
