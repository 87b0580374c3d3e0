/*
 * What the SQLite backend's files share, private to the store: the
 * backend's state, the writer's statement ids, the statement helpers and
 * error mapping (sqlite_stmt.c), and the reading side (sqlite_read.c) that
 * sqlite.c, the writer with open and close, plugs into the backend.
 */
#ifndef PC_STORE_SQLITE_INTERNAL_H
#define PC_STORE_SQLITE_INTERNAL_H

#include <pthread.h>
#include <sqlite3.h>
#include <stdbool.h>
#include <stdint.h>

#include "session_cache.h"
#include "store_internal.h"

/* How long a connection waits on another's lock before PC_EBUSY. */
#define PC__SQ_BUSY_TIMEOUT_MS 5000

/* The writer's statements (sqlite.c's wsql), prepared once. */
enum {
	W_SAVE, W_RELEASE, W_ROLLBACK_TO, W_BEGIN, W_COMMIT, W_ROLLBACK,
	W_SESS_INSERT, W_SESS_ID, W_APP_SEQ, W_APP_SET, W_MSG_INSERT, W_SESS_STATE, W_MSG_DELETE_FROM,
	W_SESS_SET_LAST, W_RUN_BY_IDEM, W_RUN_INSERT, W_RUN_SESSION, W_RUN_END, W_RUN_EXISTS, W_ATTEMPT, W_AUDIT, W_AUDIT_TRIM_N,
	W_AUDIT_TRIM_T, W_LEASE_SET, W_SESS_SET, W_SESS_FLUSH, W_DATA_VERSION, W_RUN_FORGET_IDEM, W_RUN_ADOPT,
	W_PROBE, W_USAGE, W_DEVICE_PUT, W_DEVICE_UPDATE, W_DEVICE_DELETE, W_NODE_ROW, W_NODE_PUT,
	W_OWNER_LIVE,
	W_N
};

/* A pooled reader connection with its statements (sqlite_read.c). */
typedef struct pc__sq_reader pc__sq_reader_t;

/* The backend: one writer connection, used by one blocking thread at a
 * time, and a pool of reader connections opened on demand. */
typedef struct pc__sq_be {
	char *path;
	sqlite3 *db;
	sqlite3_stmt *st[W_N];
	pc_store_config_t cfg;
	bool audit_dirty; /* the open batch added audit rows: trim before commit */
	pc__sc_t *sessions;   /* see session_cache.h */
	bool cache_on;        /* the pass uses it: not a guarded one (a savepoint
			       * rolled back would leave the cache ahead) */
	int64_t data_version; /* at the last check: another connection's commit
			       * changes it (our own do not) */
	pthread_mutex_t lock; /* guards idle */
	pc__sq_reader_t *idle;
} pc__sq_be_t;

/* ---- errors and statements (sqlite_stmt.c) ---- */

/* A SQLite result code as a PC_* / PC_STORE_* code (0 for OK, ROW and
 * DONE); `os_errno` is errno right after the failing call. */
int pc__sq_map_rc_errno(sqlite3 *db, int rc, int os_errno);
int pc__sq_map_rc(sqlite3 *db, int rc);

/* Binders: each records the first failure in *err (bindings are never
 * copied: they point into the op, which outlives the statement's use).
 * _s binds the op's string k (NULL when absent), _str a C string (NULL:
 * SQL NULL), _t `len` bytes, _i an integer. */
void pc__sq_bind_rc(int *err, int rc);
void pc__sq_bind_s(int *err, sqlite3_stmt *st, int idx, const pc__store_op_t *op, uint32_t k);
void pc__sq_bind_str(int *err, sqlite3_stmt *st, int idx, const char *s);
void pc__sq_bind_t(int *err, sqlite3_stmt *st, int idx, const char *s, int len);
void pc__sq_bind_i(int *err, sqlite3_stmt *st, int idx, int64_t v);

/* Steps `st` once: 1 a row (read it, then step on or call pc__sq_done),
 * 0 finished, < 0 an error; unless a row came, the statement is reset and
 * its bindings cleared. */
int pc__sq_step(sqlite3 *db, sqlite3_stmt *st);
/* Resets `st` and clears its bindings. */
void pc__sq_done(sqlite3_stmt *st);
/* Runs `st` to its end (rows, if any, skipped). */
int pc__sq_exec_st(sqlite3 *db, sqlite3_stmt *st);
/* pc__sq_step / pc__sq_exec_st for a statement whose binding may have
 * failed (`berr`, from the binders). */
int pc__sq_step_b(sqlite3 *db, sqlite3_stmt *st, int berr);
int pc__sq_exec_b(sqlite3 *db, sqlite3_stmt *st, int berr);
/* Prepares (persistent) or finalizes `n` statements. */
int pc__sq_prepare_all(sqlite3 *db, const char *const *sql, sqlite3_stmt **st, int n);
void pc__sq_finalize_all(sqlite3_stmt **st, int n);

/* ---- the reading side (sqlite_read.c) ---- */

/* The backend's reads, answered from a pooled reader connection. */
extern const pc__store_reads_t pc__sq_reads;
/* Closes the idle reader connections (the backend's close). */
void pc__sq_readers_free(pc__sq_be_t *be);

#endif
