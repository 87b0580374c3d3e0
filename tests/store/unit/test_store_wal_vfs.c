/*
 * The writer's VFS (io/store/wal_vfs.c), which gathers a commit's log
 * writes into one write at sync time: every acknowledged commit is in the
 * file when the process dies without closing the database; a transaction
 * larger than the page cache (frames spilled to the log and read back)
 * commits whole; writes past the unix VFS's 128 KiB per-call limit go out
 * whole; another connection sees each commit as it returns.
 */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "io/store/wal_vfs.h"

static void remove_db(const char *path);

static void db_path(char *out, size_t len, const char *name)
{
	snprintf(out, len, "/tmp/pincer-walvfs-%d-%s.db", (int)getpid(), name);
	remove_db(out);
}

static void remove_db(const char *path)
{
	char side[600];
	unlink(path);
	snprintf(side, sizeof(side), "%s-wal", path);
	unlink(side);
	snprintf(side, sizeof(side), "%s-shm", path);
	unlink(side);
}

static sqlite3 *open_db(const char *path, const char *vfs)
{
	sqlite3 *db = NULL;
	cr_assert_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, vfs), SQLITE_OK);
	return db;
}

static void exec(sqlite3 *db, const char *sql)
{
	char *err = NULL;
	int rc = sqlite3_exec(db, sql, NULL, NULL, &err);
	cr_assert_eq(rc, SQLITE_OK, "%s: %s", sql, err ? err : "");
}

static int64_t one_int(sqlite3 *db, const char *sql)
{
	sqlite3_stmt *st = NULL;
	cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK, "%s", sql);
	cr_assert_eq(sqlite3_step(st), SQLITE_ROW, "%s", sql);
	int64_t v = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	return v;
}

static sqlite3 *open_writer(const char *path)
{
	cr_assert_eq(pc__wal_vfs_register(), SQLITE_OK);
	sqlite3 *db = open_db(path, PC__WAL_VFS_NAME);
	exec(db, "PRAGMA journal_mode = WAL");
	exec(db, "PRAGMA synchronous = FULL");
	exec(db, "CREATE TABLE IF NOT EXISTS t(id INTEGER PRIMARY KEY, body BLOB NOT NULL)");
	return db;
}

/* Row i's body: its length varies from a few bytes to past 300 KiB (three
 * calls' worth of the unix VFS's limit), its bytes follow from i. */
static size_t body_len(int i)
{
	return i % 17 == 0 ? 300000u + (size_t)i : (size_t)(i * 37 % 5000 + 1);
}

static void fill_body(char *b, size_t n, int i)
{
	for (size_t k = 0; k < n; k++)
		b[k] = (char)('a' + (k + (size_t)i) % 26);
}

static void insert(sqlite3_stmt *st, int i, char *buf)
{
	size_t n = body_len(i);
	fill_body(buf, n, i);
	sqlite3_bind_int(st, 1, i);
	sqlite3_bind_blob(st, 2, buf, (int)n, SQLITE_STATIC);
	cr_assert_eq(sqlite3_step(st), SQLITE_DONE);
	sqlite3_reset(st);
}

/* Every row 1..n is there with the body insert() gave it. */
static void expect_rows(sqlite3 *db, int n, char *buf)
{
	cr_assert_eq(one_int(db, "SELECT count(*) FROM t"), n);
	sqlite3_stmt *st = NULL;
	cr_assert_eq(sqlite3_prepare_v2(db, "SELECT id, body FROM t ORDER BY id", -1, &st, NULL), SQLITE_OK);
	for (int i = 1; i <= n; i++) {
		cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
		cr_assert_eq(sqlite3_column_int(st, 0), i);
		size_t len = body_len(i);
		cr_assert_eq((size_t)sqlite3_column_bytes(st, 1), len, "row %d", i);
		fill_body(buf, len, i);
		cr_assert_eq(memcmp(sqlite3_column_blob(st, 1), buf, len), 0, "row %d", i);
	}
	sqlite3_finalize(st);
	sqlite3_stmt *ic = NULL;
	cr_assert_eq(sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &ic, NULL), SQLITE_OK);
	cr_assert_eq(sqlite3_step(ic), SQLITE_ROW);
	cr_assert_str_eq((const char *)sqlite3_column_text(ic, 0), "ok");
	sqlite3_finalize(ic);
}

Test(wal_vfs, acknowledged_commits_survive_a_process_that_dies)
{
	char path[512];
	db_path(path, sizeof(path), "die");
	const int n = 120;
	int pipefd[2];
	cr_assert_eq(pipe(pipefd), 0);
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		close(pipefd[0]);
		sqlite3 *db = open_writer(path);
		sqlite3_stmt *st = NULL;
		if (sqlite3_prepare_v2(db, "INSERT INTO t(id, body) VALUES (?1, ?2)", -1, &st, NULL) != SQLITE_OK)
			_exit(2);
		char *buf = malloc(400000);
		for (int i = 1; i <= n; i++) {
			size_t len = body_len(i);
			fill_body(buf, len, i);
			sqlite3_bind_int(st, 1, i);
			sqlite3_bind_blob(st, 2, buf, (int)len, SQLITE_STATIC);
			if (sqlite3_step(st) != SQLITE_DONE)
				_exit(3);
			sqlite3_reset(st);
			/* acknowledged: autocommit returned */
			if (write(pipefd[1], &i, sizeof(i)) != (ssize_t)sizeof(i))
				_exit(4);
		}
		_exit(0); /* no close, no checkpoint: the log holds everything */
	}
	close(pipefd[1]);
	int acked = 0, i;
	while (read(pipefd[0], &i, sizeof(i)) == (ssize_t)sizeof(i))
		acked = i;
	close(pipefd[0]);
	int status = 0;
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
	cr_assert_eq(acked, n);
	sqlite3 *db = open_db(path, NULL);
	char *buf = malloc(400000);
	expect_rows(db, n, buf);
	free(buf);
	sqlite3_close(db);
	remove_db(path);
}

/* A writer through the VFS and a second connection through the default. */
typedef struct fx {
	char path[512];
	sqlite3 *db, *other;
	sqlite3_stmt *ins;
	char *buf;
} fx_t;

static void fx_open(fx_t *f, const char *name)
{
	db_path(f->path, sizeof(f->path), name);
	f->db = open_writer(f->path);
	f->other = open_db(f->path, NULL);
	cr_assert_eq(sqlite3_prepare_v2(f->db, "INSERT INTO t(id, body) VALUES (?1, ?2)", -1, &f->ins, NULL),
		     SQLITE_OK);
	f->buf = malloc(400000);
	cr_assert_not_null(f->buf);
}

static void fx_close(fx_t *f)
{
	sqlite3_finalize(f->ins);
	sqlite3_close(f->db);
	sqlite3_close(f->other);
	free(f->buf);
	remove_db(f->path);
}

Test(wal_vfs, a_transaction_larger_than_the_cache_spills_and_reads_back)
{
	fx_t f;
	fx_open(&f, "spill");
	exec(f.db, "PRAGMA cache_size = 8");
	const int n = 400;
	exec(f.db, "BEGIN IMMEDIATE");
	for (int i = 1; i <= n; i++) {
		insert(f.ins, i, f.buf);
		/* reads pages the small cache let go of: from the log, mid-transaction */
		if (i % 50 == 0)
			cr_assert_eq(one_int(f.db, "SELECT sum(length(body)) > 0 FROM t"), 1);
	}
	cr_assert_eq(one_int(f.other, "SELECT count(*) FROM t"), 0, "nothing shows before the commit");
	exec(f.db, "COMMIT");
	expect_rows(f.other, n, f.buf);
	fx_close(&f);
}

Test(wal_vfs, another_connection_sees_each_commit)
{
	fx_t f;
	fx_open(&f, "see");
	for (int i = 1; i <= 60; i++) {
		insert(f.ins, i, f.buf);
		cr_assert_eq(one_int(f.other, "SELECT count(*) FROM t"), i);
		cr_assert_eq(one_int(f.other, "SELECT length(body) FROM t WHERE id = (SELECT max(id) FROM t)"),
			     (int64_t)body_len(i));
	}
	/* a checkpoint copies the log into the database; writing goes on after it */
	exec(f.db, "PRAGMA wal_checkpoint(TRUNCATE)");
	for (int i = 61; i <= 80; i++)
		insert(f.ins, i, f.buf);
	expect_rows(f.other, 80, f.buf);
	fx_close(&f);
}
