/*
 * The store's insides: the request encoding shared by the builders, the
 * store actor and the backends, and the backend interface.
 */
#ifndef PINCER_IO_STORE_STORE_INTERNAL_H
#define PINCER_IO_STORE_STORE_INTERNAL_H

#include "store.h"

/*
 * A request payload: a header, nint int64 values, nstr string lengths
 * (PC__STR_NULL for an absent string), then the strings back to back, each
 * NUL-terminated. One flat message, so it can be copied, cloned or dropped
 * without knowing what it holds.
 */
typedef struct pc__store_req {
	uint32_t nint;
	uint32_t nstr;
	uint32_t flags;    /* PC__STORE_LAZY, PC__STORE_URGENT */
	uint32_t reserved; /* keeps the ints that follow 8-aligned */
} pc__store_req_t;

#define PC__STORE_LAZY 1u   /* set by pc_store_req_lazy */
#define PC__STORE_URGENT 2u /* set by pc_store_req_urgent */

#define PC__STR_NULL UINT32_MAX

/* A decoded request: a pending write (or read) and where its answer goes. */
typedef struct pc__store_op {
	struct pc__store_op *next;
	uint32_t kind;           /* PC_STORE_REQ_* */
	uint32_t nint, nstr;
	const int64_t *i;
	const char **s;          /* nstr entries; NULL = absent */
	const uint32_t *len;     /* byte lengths (PC__STR_NULL for absent) */
	pc_actor_t *reply_to;    /* retained, or NULL */
	uint64_t corr;
	pc_store_reply_t res;    /* filled by the backend */
	bool told_early;         /* the provisional answer went (PC_STORE_REQ_EARLY) */
	bool lazy;               /* need not start a transaction (pc_store_req_lazy) */
	/* the copied payload and the pointer array follow */
} pc__store_op_t;

/* Decodes a request message into a new op (owned by the caller,
 * pc__store_op_free); reply_to is retained. PC_EINVAL for a malformed one. */
int pc__store_op_from_msg(const pc_msg_t *m, pc__store_op_t **out);
void pc__store_op_free(pc__store_op_t *op);

/* Message i'th string length or 0. */
static inline size_t pc__store_len(const pc__store_op_t *op, uint32_t i)
{
	return (i < op->nstr && op->len[i] != PC__STR_NULL) ? op->len[i] : 0;
}

/* String layouts per kind (indexes into op->s / op->i). */
enum { S_SESS_KEY = 0, S_SESS_AGENT, S_SESS_ID, S_SESS_META, S_SESS_N };
enum { S_APP_KEY = 0, S_APP_ROLE, S_APP_CONTENT, S_APP_TCIDS, S_APP_RUN, S_APP_N };
enum { I_APP_EPOCH = 0, I_APP_CREATED, I_APP_N };
/* Rewrite: s[0] = key, then 4 per message (role, content, tcids, run);
 * i: epoch, expected, from, n, then created_ms per message. */
enum { S_RW_KEY = 0, S_RW_FIRST = 1, S_RW_PER = 4 };
enum { I_RW_EPOCH = 0, I_RW_EXPECTED, I_RW_FROM, I_RW_COUNT, I_RW_FIRST };
enum { S_RB_KEY = 0, S_RB_RUN, S_RB_IDEM, S_RB_FP, S_RB_OWNER, S_RB_PROMPT, S_RB_N };
enum { I_RB_FLAGS = 0, I_RB_N };
enum { S_RE_RUN = 0, S_RE_KEY, S_RE_CODE, S_RE_USAGE, S_RE_N };
enum { I_RE_STATUS = 0, I_RE_EPOCH, I_RE_REPLAY_INVALID, I_RE_N };
enum { S_AT_RUN = 0, S_AT_PROVIDER, S_AT_MODEL, S_AT_PROFILE, S_AT_REASON, S_AT_STATUS, S_AT_CODE, S_AT_N };
enum { I_AT_INDEX = 0, I_AT_DURATION, I_AT_N };
enum { S_AU_KIND = 0, S_AU_STATUS, S_AU_RUN, S_AU_SESSION, S_AU_TOOL, S_AU_CALL, S_AU_CODE, S_AU_N };
enum { I_AU_TS = 0, I_AU_N };
enum { S_LS_KEY = 0, S_LS_OWNER, S_LS_STEAL, S_LS_N };
enum { S_AD_RUN = 0, S_AD_FROM, S_AD_TO, S_AD_N };
enum { I_LS_VALUE = 0, I_LS_N }; /* acquire: ttl; release: epoch */
enum { S_HI_KEY = 0, S_HI_N };
enum { S_RG_RUN = 0, S_RG_N };
enum { S_SS_KEY = 0, S_SS_META, S_SS_N };
enum { I_SS_EPOCH = 0, I_SS_N };
enum { S_SL_AFTER = 0, S_SL_ID, S_SL_N };
enum { I_SL_LIMIT = 0, I_SL_ORDER, I_SL_AFTER_MS, I_SL_N };
enum { S_UA_RUN = 0, S_UA_KEY, S_UA_PROVIDER, S_UA_MODEL, S_UA_N };
enum { I_UA_EPOCH = 0, I_UA_ATTEMPT, I_UA_CALL, I_UA_INPUT, I_UA_OUTPUT, I_UA_CACHE_READ, I_UA_CACHE_WRITE,
       I_UA_TOTAL, I_UA_CREATED, I_UA_N };
enum { S_UL_RUN = 0, S_UL_KEY, S_UL_N };
enum { I_UD_FROM = 0, I_UD_TO, I_UD_N };
enum { S_DV_ID = 0, S_DV_KEY, S_DV_HASH, S_DV_SCOPES, S_DV_N };
enum { I_DV_APPROVED = 0, I_DV_ISSUED, I_DV_UPDATE, I_DV_N };
enum { S_NB_ID = 0, S_NB_URL, S_NB_OWNER, S_NB_N };
enum { I_NB_LEASE = 0, I_NB_FRESH, I_NB_N };

/* Strings appended back to back (each NUL-terminated) to one byte area,
 * found by their offsets from its start (PC__STR_NULL = absent). */
typedef struct pc__store_strs {
	char *bytes;
	size_t len, cap;
} pc__store_strs_t;

/* The entries of a read answer being built on a blocking thread: each of
 * `size` bytes with its strings packed once into `strs` (its offsets at
 * the entry's `off` field). */
typedef struct pc__store_rows {
	void *ents;
	size_t n, cap;
	pc__store_strs_t strs;
} pc__store_rows_t;

/*
 * A history reply payload: the header, `count` entries, then the string
 * bytes. Offsets are from the start of the bytes; PC__STR_NULL = absent.
 */
typedef struct pc__store_hist {
	int32_t rc;
	uint32_t count;
	int64_t last_seq;
	int64_t created_ms, updated_ms; /* the session row */
	uint32_t sess_off[3];           /* its id, agent, metadata */
	uint32_t pad;
} pc__store_hist_t;

/* The most strings a row of a listing reply carries. */
#define PC__STORE_ROW_STRS_MAX 5
/* role, content, tool_call_ids, run_id, the run's idempotency key */
#define PC__STORE_HIST_STRS 5

typedef struct pc__store_hist_ent {
	int64_t seq, created_ms;
	uint32_t off[PC__STORE_HIST_STRS];
	uint32_t pad;
} pc__store_hist_ent_t;

/* Builds a history reply on a blocking thread. */
typedef struct pc__store_hist_builder {
	pc__store_rows_t rows;
	pc__store_hist_t head; /* rc, count and last_seq are set by finish */
} pc__store_hist_builder_t;

/* Records the session row (call once, before or after the messages). */
int pc__store_hist_session(pc__store_hist_builder_t *b, const char *str[3], const size_t len[3], int64_t created_ms,
			   int64_t updated_ms);
int pc__store_hist_add(pc__store_hist_builder_t *b, int64_t seq, int64_t created_ms,
		       const char *str[PC__STORE_HIST_STRS], const size_t len[PC__STORE_HIST_STRS]);
/* The finished reply (rc 0), or NULL on ENOMEM; frees the builder's memory
 * either way. */
pc_msg_t *pc__store_hist_finish(pc__store_hist_builder_t *b, int64_t last_seq);
/* Frees what the builder holds. */
void pc__store_hist_clear(pc__store_hist_builder_t *b);
/* A history reply carrying only a failure code (NULL on ENOMEM). */
pc_msg_t *pc__store_hist_error(int rc);

/*
 * A sessions reply payload (PC_STORE_REQ_SESSIONS): the header, `count`
 * entries, then the string bytes, as for history.
 */
typedef struct pc__store_list {
	int32_t rc;
	uint32_t count;
	uint32_t more; /* 1: rows beyond this page */
	uint32_t pad;
} pc__store_list_t;

#define PC__STORE_LIST_STRS 5 /* key, id, agent, last run id, open run id */
typedef struct pc__store_list_ent {
	int64_t created_ms, updated_ms, last_seq;
	uint64_t runs;
	uint32_t off[PC__STORE_LIST_STRS];
} pc__store_list_ent_t;

/* Builds a sessions reply on a blocking thread. */
typedef struct pc__store_list_builder {
	pc__store_rows_t rows;
} pc__store_list_builder_t;

/* Adds one session: `e`'s numbers and the strings (key, id, agent, last
 * run id, open run id; NULL = absent). */
int pc__store_list_add(pc__store_list_builder_t *b, const pc__store_list_ent_t *e,
		       const char *str[PC__STORE_LIST_STRS], const size_t len[PC__STORE_LIST_STRS]);
/* The finished reply (rc 0), or NULL on ENOMEM; frees the builder's memory
 * either way. */
pc_msg_t *pc__store_list_finish(pc__store_list_builder_t *b, bool more);
void pc__store_list_clear(pc__store_list_builder_t *b);

/* A PC_STORE_MSG_RUNS reply (PC_STORE_REQ_RUNS_OPEN): the pc__store_list_t
 * header, `count` entries, then the string bytes. */
typedef struct pc__store_run_ent {
	int64_t accepted_ms;
	uint32_t started;
	uint32_t off[4]; /* run id, session key, owner, prompt */
	uint32_t pad;
} pc__store_run_ent_t;

typedef struct pc__store_runs_builder {
	pc__store_rows_t rows;
} pc__store_runs_builder_t;

int pc__store_runs_add(pc__store_runs_builder_t *b, const pc__store_run_ent_t *e, const char *str[4],
		       const size_t len[4]);
/* The finished reply (rc 0), or NULL on ENOMEM; frees the builder's memory
 * either way. */
pc_msg_t *pc__store_runs_finish(pc__store_runs_builder_t *b);
void pc__store_runs_clear(pc__store_runs_builder_t *b);

/*
 * A PC_STORE_MSG_USAGE reply (PC_STORE_REQ_USAGE_LIST): this header,
 * `count` entries, then the string bytes. The header starts as a
 * pc__store_list_t does (rc first), so an error reply is read the same.
 */
typedef struct pc__store_usage_head {
	int32_t rc;
	uint32_t count;
	uint32_t more; /* 1: records beyond those listed */
	uint32_t pad;
	int64_t records;    /* every matching record */
	int64_t sum[5];     /* input, output, cache_read, cache_write, total */
	int64_t latest_ms;  /* the latest record's created_ms */
} pc__store_usage_head_t;

typedef struct pc__store_usage_ent {
	/* attempt, call, input, output, cache_read, cache_write, total; a day
	 * (PC_STORE_REQ_USAGE_DAYS): its records' count, 0, then its sums,
	 * with created_ms its first ms and no strings */
	int64_t n[7];
	int64_t created_ms;
	uint32_t off[4]; /* run id, session key, provider, model */
} pc__store_usage_ent_t;

typedef struct pc__store_usage_builder {
	pc__store_rows_t rows;
	pc__store_usage_head_t head; /* records, sum and latest_ms set by the backend */
} pc__store_usage_builder_t;

int pc__store_usage_add(pc__store_usage_builder_t *b, const pc__store_usage_ent_t *e, const char *str[4],
			const size_t len[4]);
/* The finished reply (rc 0), or NULL on ENOMEM; frees the builder's memory
 * either way. */
pc_msg_t *pc__store_usage_finish(pc__store_usage_builder_t *b, bool more);
void pc__store_usage_clear(pc__store_usage_builder_t *b);

/* A PC_STORE_MSG_DEVICES reply (PC_STORE_REQ_DEVICES): the
 * pc__store_list_t header, `count` entries, then the string bytes. */
typedef struct pc__store_device_ent {
	int64_t approved_ms, issued_ms;
	uint32_t off[4]; /* id, public key, token hash, scopes */
} pc__store_device_ent_t;

typedef struct pc__store_devices_builder {
	pc__store_rows_t rows;
} pc__store_devices_builder_t;

int pc__store_devices_add(pc__store_devices_builder_t *b, const pc__store_device_ent_t *e, const char *str[4],
			  const size_t len[4]);
/* The finished reply (rc 0), or NULL on ENOMEM; frees the builder's memory
 * either way. */
pc_msg_t *pc__store_devices_finish(pc__store_devices_builder_t *b);
void pc__store_devices_clear(pc__store_devices_builder_t *b);

/* A PC_STORE_MSG_NODES reply (PC_STORE_REQ_NODES): the pc__store_list_t
 * header, `count` entries, then the string bytes. */
typedef struct pc__store_node_ent {
	int64_t started_ms, heartbeat_ms, expires_ms;
	uint32_t live;
	uint32_t off[3]; /* id, url, owner */
} pc__store_node_ent_t;

typedef struct pc__store_nodes_builder {
	pc__store_rows_t rows;
} pc__store_nodes_builder_t;

int pc__store_nodes_add(pc__store_nodes_builder_t *b, const pc__store_node_ent_t *e, const char *str[3],
			const size_t len[3]);
/* The finished reply (rc 0), or NULL on ENOMEM; frees the builder's memory
 * either way. */
pc_msg_t *pc__store_nodes_finish(pc__store_nodes_builder_t *b);
void pc__store_nodes_clear(pc__store_nodes_builder_t *b);

/* The reply a request of `kind` gets when it failed with `rc`: a history,
 * a sessions list or a plain reply carrying only the code (NULL on
 * ENOMEM). */
pc_msg_t *pc__store_error_reply(uint32_t kind, int rc);

/* A PC_STORE_MSG_REPLY carrying `r` (NULL on ENOMEM). */
pc_msg_t *pc__store_reply_msg(const pc_store_reply_t *r);

/* A run row that asked for a provisional answer (PC_STORE_REQ_EARLY). */
bool pc__store_wants_early(const pc__store_op_t *op);
/* Tells that answer, once, after the row's statement ran with success
 * (in either pass: a redo runs the same ops in the same order, so what it
 * told stands unless the commit fails). */
void pc__store_tell_early(pc__store_op_t *op);


/* A reply travels as its fixed fields, then its id and its code as C
 * strings: most replies have neither, and fit a small message from the
 * worker's cache instead of the heap. */
#define PC__STORE_REPLY_HEAD offsetof(pc_store_reply_t, id)

/* A backend's start (below) saying: run this batch on the blocking pool. */
#define PC__STORE_TO_POOL PC_ESTATE

/*
 * A backend's reads, each called on a blocking thread (several at once,
 * beside a batch) with an op the store has checked, and answering with
 * its reply message (NULL only on ENOMEM): history, a PC_STORE_MSG_HISTORY
 * snapshot; run_get, a PC_STORE_MSG_REPLY; sessions, a
 * PC_STORE_MSG_SESSIONS page; open_runs, a PC_STORE_MSG_RUNS listing;
 * devices, a PC_STORE_MSG_DEVICES listing; nodes, a PC_STORE_MSG_NODES
 * listing; usage (PC_STORE_REQ_USAGE_LIST and _DAYS), a PC_STORE_MSG_USAGE
 * listing.
 */
typedef struct pc__store_reads {
	pc_msg_t *(*history)(void *be, const pc__store_op_t *op);
	pc_msg_t *(*run_get)(void *be, const pc__store_op_t *op);
	pc_msg_t *(*sessions)(void *be, const pc__store_op_t *op);
	pc_msg_t *(*open_runs)(void *be, const pc__store_op_t *op);
	pc_msg_t *(*devices)(void *be, const pc__store_op_t *op);
	pc_msg_t *(*nodes)(void *be, const pc__store_op_t *op);
	pc_msg_t *(*usage)(void *be, const pc__store_op_t *op);
	/* Optional: starts a checked read with no thread of its own (its
	 * connection polled on an I/O loop). 0: under way, and done(arg, job)
	 * follows once, on another thread (or this one), after which
	 * finish(job) gives the reply (its rows turned into the answer, on a
	 * blocking thread: an answer may be large) and frees job. Non-zero:
	 * not started; the functions above answer it on the blocking pool. */
	int (*start)(void *be, const pc__store_op_t *op, void (*done)(void *arg, void *job), void *arg);
	pc_msg_t *(*finish)(void *job);
} pc__store_reads_t;

/*
 * A backend. Writer calls (begin/apply/commit/rollback) come from one
 * blocking thread at a time, in batches; reads may run on several
 * blocking threads at once, beside a batch.
 */
typedef struct pc__store_backend {
	const char *name;
	int (*open)(const char *path, const pc_store_config_t *cfg, void **out);
	void (*close)(void *be);
	int (*begin)(void *be);
	/* Runs one write in the open transaction. Guarded: returns 0 when
	 * the batch may go on (the op's own outcome is in op->res.rc, and a
	 * failed op left nothing behind), or a negative code when the
	 * transaction is lost and the whole batch must fail with it.
	 * Unguarded (no savepoint around the op, for speed): any failure is
	 * returned and the caller rolls the transaction back. */
	int (*apply)(void *be, pc__store_op_t *op, bool guarded);
	int (*commit)(void *be);
	void (*rollback)(void *be);
	/* Instead of begin/apply/commit (then those are NULL): runs the whole
	 * batch (PC_STORE_REQ_SYNC ops included, which ask only for the
	 * commit). Returns 0 when every op's outcome is in its op->res (a
	 * committed op with rc 0; one that failed alone, or whose commit was
	 * lost, with its code), or a negative code when nothing of the batch
	 * was kept (then the store runs it again guarded, and fails it whole
	 * if that fails too). There is no provisional answer. */
	int (*batch)(void *be, pc__store_op_t *ops, bool guarded);
	/* Optional, with batch: starts a batch with no thread of its own (its
	 * connection polled on an I/O loop). 0: under way, and done(arg, rc,
	 * cpu_ns) follows once, on another thread: rc 0 when every op has its
	 * outcome (as batch's 0), PC__STORE_TO_POOL when the batch is to go to
	 * batch on the blocking pool after all (which finishes what was
	 * begun); cpu_ns, the CPU time the batch took so far. Non-zero: not
	 * started; batch runs it. */
	int (*start)(void *be, pc__store_op_t *ops, void (*done)(void *arg, int rc, uint64_t cpu_ns), void *arg);
	const struct pc__store_reads *reads;
} pc__store_backend_t;

extern const pc__store_backend_t pc__store_sqlite;
extern const pc__store_backend_t pc__store_pg;

/* Run statuses as the backends spell them, by pc_store_run_status_t;
 * and back (an unknown name reads as PC_STORE_RUN_ERROR). */
#define PC__STORE_RUN_STATUS_N 6
extern const char *const pc__store_run_status_names[PC__STORE_RUN_STATUS_N];
int pc__store_status_from_name(const char *s);

/* store_replies.c: a failed listing (PC_STORE_MSG_SESSIONS / _RUNS) or
 * usage answer with code rc; a history snapshot taken over from its
 * message (0, or the message's own error code; *out the caller's). */
pc_msg_t *pc__store_list_error(uint32_t type, int rc);
pc_msg_t *pc__store_usage_error(int rc);
int pc__store_history_adopt(pc_msg_t *m, pc_store_history_t **out);

#endif
