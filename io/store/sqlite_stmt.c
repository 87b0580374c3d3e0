/*
 * The SQLite backend's statement helpers: SQLite's result codes as the
 * store's, binding, stepping and preparing statements; shared by the
 * writer (sqlite.c) and the readers (sqlite_read.c).
 */
#include <errno.h>
#include <string.h>

#include "sqlite_internal.h"

/* ---- errors ---- */

/* `os_errno` is the thread's errno right after the failing call: SQLite's
 * own record (sqlite3_system_errno) misses some write errors, such as
 * EFBIG, which is what a full disk or a file size limit looks like. */
int pc__sq_map_rc_errno(sqlite3 *db, int rc, int os_errno)
{
	int err = db ? sqlite3_system_errno(db) : 0;
	if (err == 0)
		err = os_errno;
	switch (rc & 0xff) {
	case SQLITE_OK:
	case SQLITE_ROW:
	case SQLITE_DONE:
		return 0;
	case SQLITE_NOMEM: return PC_ENOMEM;
	case SQLITE_NOTADB:
	case SQLITE_CORRUPT: return PC_STORE_ECORRUPT;
	case SQLITE_FULL: return PC_STORE_EFULL;
	case SQLITE_READONLY:
	case SQLITE_PERM:
	case SQLITE_AUTH: return PC_STORE_EREADONLY;
	case SQLITE_CANTOPEN:
		return (err == EACCES || err == EROFS || err == EPERM) ? PC_STORE_EREADONLY : PC_STORE_ECANTOPEN;
	case SQLITE_IOERR:
		if (err == ENOSPC || err == EFBIG || err == EDQUOT)
			return PC_STORE_EFULL;
		if (err == EROFS || err == EACCES)
			return PC_STORE_EREADONLY;
		return PC_STORE_EIO;
	case SQLITE_TOOBIG: return PC_STORE_ETOOBIG;
	case SQLITE_CONSTRAINT:
		return (rc == SQLITE_CONSTRAINT_PRIMARYKEY || rc == SQLITE_CONSTRAINT_UNIQUE) ? PC_EEXIST : PC_EINVAL;
	case SQLITE_BUSY:
	case SQLITE_LOCKED: return PC_EBUSY;
	case SQLITE_MISMATCH:
	case SQLITE_RANGE: return PC_EINVAL;
	default: return PC_STORE_EIO;
	}
}

int pc__sq_map_rc(sqlite3 *db, int rc)
{
	return pc__sq_map_rc_errno(db, rc, 0);
}

/* ---- statement helpers ---- */

/* Binders record the first failure in *err (bindings are never copied:
 * they point into the op, which outlives the statement's use). */
void pc__sq_bind_rc(int *err, int rc)
{
	if (*err == 0 && rc != SQLITE_OK)
		*err = rc == SQLITE_TOOBIG ? PC_STORE_ETOOBIG : rc == SQLITE_NOMEM ? PC_ENOMEM : PC_EINVAL;
}

void pc__sq_bind_s(int *err, sqlite3_stmt *st, int idx, const pc__store_op_t *op, uint32_t k)
{
	if (k < op->nstr && op->s[k])
		pc__sq_bind_rc(err, sqlite3_bind_text(st, idx, op->s[k], (int)op->len[k], SQLITE_STATIC));
	else
		pc__sq_bind_rc(err, sqlite3_bind_null(st, idx));
}

void pc__sq_bind_str(int *err, sqlite3_stmt *st, int idx, const char *s)
{
	if (s)
		pc__sq_bind_rc(err, sqlite3_bind_text(st, idx, s, -1, SQLITE_STATIC));
	else
		pc__sq_bind_rc(err, sqlite3_bind_null(st, idx));
}

void pc__sq_bind_t(int *err, sqlite3_stmt *st, int idx, const char *s, int len)
{
	pc__sq_bind_rc(err, sqlite3_bind_text(st, idx, s, len, SQLITE_STATIC));
}

void pc__sq_bind_i(int *err, sqlite3_stmt *st, int idx, int64_t v)
{
	pc__sq_bind_rc(err, sqlite3_bind_int64(st, idx, v));
}

/* Steps `st` once. 1 = a row (the caller reads it, then steps on or
 * calls done), 0 = finished, < 0 = an error. Unless a row is returned the
 * statement is reset and its bindings cleared, so no binding outlives the
 * op it points into. */
int pc__sq_step(sqlite3 *db, sqlite3_stmt *st)
{
	errno = 0;
	int rc = sqlite3_step(st);
	int os_errno = errno;
	if (rc == SQLITE_ROW)
		return 1;
	int out = rc == SQLITE_DONE ? 0 : pc__sq_map_rc_errno(db, rc, os_errno);
	if (rc != SQLITE_DONE && out == 0)
		out = PC_STORE_EIO;
	sqlite3_reset(st);
	sqlite3_clear_bindings(st);
	return out;
}

void pc__sq_done(sqlite3_stmt *st)
{
	sqlite3_reset(st);
	sqlite3_clear_bindings(st);
}

/* Runs a statement to its end (rows, if any, are skipped). */
int pc__sq_exec_st(sqlite3 *db, sqlite3_stmt *st)
{
	int rc;
	while ((rc = pc__sq_step(db, st)) == 1)
		;
	return rc;
}

/* step / exec_st for a statement whose binding may have failed. */
int pc__sq_step_b(sqlite3 *db, sqlite3_stmt *st, int berr)
{
	if (berr == 0)
		return pc__sq_step(db, st);
	pc__sq_done(st);
	return berr;
}

int pc__sq_exec_b(sqlite3 *db, sqlite3_stmt *st, int berr)
{
	if (berr == 0)
		return pc__sq_exec_st(db, st);
	pc__sq_done(st);
	return berr;
}

int pc__sq_prepare_all(sqlite3 *db, const char *const *sql, sqlite3_stmt **st, int n)
{
	for (int k = 0; k < n; k++) {
		int rc = sqlite3_prepare_v3(db, sql[k], -1, SQLITE_PREPARE_PERSISTENT, &st[k], NULL);
		if (rc != SQLITE_OK)
			return pc__sq_map_rc(db, rc);
	}
	return 0;
}

void pc__sq_finalize_all(sqlite3_stmt **st, int n)
{
	for (int k = 0; k < n; k++) {
		sqlite3_finalize(st[k]);
		st[k] = NULL;
	}
}
