/*
 * The SQLite backend's reading side: a pool of read-only connections,
 * opened on demand, each with its statements prepared once, and the reads
 * the store answers from them (history, a run, a page of sessions, the
 * open runs, usage, devices, nodes). WAL mode lets them see the last
 * committed state while the writer (sqlite.c) is in a batch.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sqlite_internal.h"
#include "runtime/clock.h"

enum { R_BEGIN, R_COMMIT, R_ROLLBACK, R_LAST, R_MSGS, R_RUN, R_LIST_UPDATED, R_LIST_CREATED, R_LIST_KEY, R_LIST_ID,
       R_OPEN, R_USAGE_RUN, R_USAGE_KEY, R_USAGE_SUM_RUN, R_USAGE_SUM_KEY, R_USAGE_DAYS, R_USAGE_SUM_WINDOW,
       R_DEVICES, R_NODES, R_N };

/* A usage record's columns. */
#define USAGE_COLUMNS                                                                                       \
	"SELECT attempt_idx, call_idx, input, output, cache_read, cache_write, total, created_ms, run_id,"   \
	" session_key, provider, model FROM usage "
#define USAGE_SUMS                                                                                          \
	"SELECT count(*), coalesce(sum(input), 0), coalesce(sum(output), 0), coalesce(sum(cache_read), 0),"  \
	" coalesce(sum(cache_write), 0), coalesce(sum(total), 0), coalesce(max(created_ms), 0) FROM usage "

/* A listed session's columns. ?1 the cursor key (NULL: the first page),
 * ?2 the cursor time, ?3 the page size plus one (to tell whether more
 * follow). */
#define LIST_COLUMNS                                                                                       \
	"SELECT s.key, s.id, s.agent, s.created_ms, s.updated_ms, s.last_seq, s.run_count, s.last_run_id," \
	" (SELECT r.run_id FROM runs r WHERE r.session_key = s.key AND r.status = 'accepted'"            \
	"  ORDER BY r.rowid LIMIT 1)"                                                                     \
	" FROM sessions s "

static const char *const rsql[R_N] = {
	[R_BEGIN] = "BEGIN",
	[R_COMMIT] = "COMMIT",
	[R_ROLLBACK] = "ROLLBACK",
	[R_LAST] = "SELECT last_seq, id, agent, metadata, created_ms, updated_ms FROM sessions WHERE key = ?1",
	[R_MSGS] = "SELECT m.seq, m.created_ms, m.role, m.content, m.tool_call_ids, m.run_id, r.idem_key"
		   " FROM messages m LEFT JOIN runs r ON r.run_id = m.run_id"
		   " WHERE m.session_id = (SELECT sid FROM sessions WHERE key = ?1) ORDER BY m.seq",
	[R_RUN] = "SELECT status, started_ms, ended_ms, error_code, replay_invalid FROM runs WHERE run_id = ?1",
	/* started: the transcript holds a message of it (a rare read: it
	 * scans the session's messages) */
	[R_OPEN] = "SELECT r.run_id, r.session_key, r.owner, r.prompt, r.started_ms,"
		   " EXISTS (SELECT 1 FROM messages m JOIN sessions s ON m.session_id = s.sid"
		   "  WHERE s.key = r.session_key AND m.run_id = r.run_id)"
		   " FROM runs r WHERE r.status = 'accepted' ORDER BY r.rowid LIMIT ?1",
	[R_LIST_UPDATED] = LIST_COLUMNS "WHERE ?1 IS NULL OR s.updated_ms < ?2 OR (s.updated_ms = ?2 AND s.key > ?1)"
				       " ORDER BY s.updated_ms DESC, s.key LIMIT ?3",
	[R_LIST_CREATED] = LIST_COLUMNS "WHERE ?1 IS NULL OR s.created_ms < ?2 OR (s.created_ms = ?2 AND s.key > ?1)"
				       " ORDER BY s.created_ms DESC, s.key LIMIT ?3",
	[R_LIST_KEY] = LIST_COLUMNS "WHERE ?1 IS NULL OR s.key > ?1 ORDER BY s.key LIMIT ?3",
	/* ?4: a session id (ids are random, so at most one; no cursor) */
	[R_LIST_ID] = LIST_COLUMNS "WHERE s.id = ?4 ORDER BY s.key LIMIT ?3",
	/* ?2: the listing's size plus one (to tell whether more follow) */
	[R_USAGE_RUN] = USAGE_COLUMNS "WHERE run_id = ?1 ORDER BY attempt_idx, call_idx LIMIT ?2",
	[R_USAGE_KEY] = USAGE_COLUMNS "WHERE session_key = ?1 ORDER BY created_ms, run_id, attempt_idx, call_idx"
				      " LIMIT ?2",
	[R_USAGE_SUM_RUN] = USAGE_SUMS "WHERE run_id = ?1",
	[R_USAGE_SUM_KEY] = USAGE_SUMS "WHERE session_key = ?1",
	/* a window [?1, ?2) by UTC day (created_ms is never negative) */
	[R_USAGE_DAYS] = "SELECT count(*), 0, sum(input), sum(output), sum(cache_read), sum(cache_write), sum(total),"
			 " created_ms / 86400000 AS day FROM usage WHERE created_ms >= ?1 AND created_ms < ?2"
			 " GROUP BY day ORDER BY day",
	[R_USAGE_SUM_WINDOW] = USAGE_SUMS "WHERE created_ms >= ?1 AND created_ms < ?2",
	[R_DEVICES] = "SELECT id, public_key, token_hash, scopes, approved_ms, issued_ms FROM devices"
		      " ORDER BY issued_ms DESC, id LIMIT ?1",
	/* ?1: the wall clock now, what a node's lease is measured against */
	[R_NODES] = "SELECT id, url, owner, started_ms, heartbeat_ms, expires_ms, expires_ms > ?1 AS live FROM nodes"
		    " ORDER BY live DESC, id LIMIT ?2",
};

struct pc__sq_reader {
	struct pc__sq_reader *next;
	sqlite3 *db;
	sqlite3_stmt *st[R_N];
};

static void reader_free(pc__sq_reader_t *r)
{
	if (!r)
		return;
	pc__sq_finalize_all(r->st, R_N);
	sqlite3_close_v2(r->db);
	free(r);
}

static int reader_get(pc__sq_be_t *be, pc__sq_reader_t **out)
{
	pthread_mutex_lock(&be->lock);
	pc__sq_reader_t *r = be->idle;
	if (r)
		be->idle = r->next;
	pthread_mutex_unlock(&be->lock);
	if (r) {
		*out = r;
		return 0;
	}
	r = calloc(1, sizeof(*r));
	if (!r)
		return PC_ENOMEM;
	int rc = sqlite3_open_v2(be->path, &r->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_EXRESCODE,
				 NULL);
	rc = pc__sq_map_rc(r->db, rc);
	if (rc == 0)
		rc = pc__sq_map_rc(r->db, sqlite3_busy_timeout(r->db, PC__SQ_BUSY_TIMEOUT_MS));
	if (rc == 0)
		rc = pc__sq_map_rc(r->db, sqlite3_exec(r->db, "PRAGMA query_only = 1", NULL, NULL, NULL));
	if (rc == 0)
		rc = pc__sq_prepare_all(r->db, rsql, r->st, R_N);
	if (rc != 0) {
		reader_free(r);
		return rc;
	}
	*out = r;
	return 0;
}

static void reader_put(pc__sq_be_t *be, pc__sq_reader_t *r)
{
	pthread_mutex_lock(&be->lock);
	r->next = be->idle;
	be->idle = r;
	pthread_mutex_unlock(&be->lock);
}

/* n columns of the current row from `first` on, as text, and their
 * lengths. */
static void text_columns(sqlite3_stmt *st, int first, int n, const char **str, size_t *len)
{
	for (int k = 0; k < n; k++) {
		str[k] = (const char *)sqlite3_column_text(st, first + k);
		len[k] = (size_t)sqlite3_column_bytes(st, first + k);
	}
}

static int read_history(pc__sq_reader_t *r, const char *key, pc__store_hist_builder_t *b, int64_t *last)
{
	int berr = 0;
	sqlite3_stmt *st = r->st[R_LAST];
	pc__sq_bind_t(&berr, st, 1, key, -1);
	int rc = pc__sq_step_b(r->db, st, berr);
	if (rc == 0)
		return PC_ENOTFOUND;
	if (rc < 0)
		return rc;
	*last = sqlite3_column_int64(st, 0);
	const char *ss[3];
	size_t sl[3];
	for (int k = 0; k < 3; k++) {
		ss[k] = (const char *)sqlite3_column_text(st, 1 + k);
		sl[k] = (size_t)sqlite3_column_bytes(st, 1 + k);
	}
	rc = pc__store_hist_session(b, ss, sl, sqlite3_column_int64(st, 4), sqlite3_column_int64(st, 5));
	pc__sq_done(st);
	if (rc != 0)
		return rc;
	st = r->st[R_MSGS];
	pc__sq_bind_t(&berr, st, 1, key, -1);
	while ((rc = pc__sq_step_b(r->db, st, berr)) == 1) {
		const char *s[PC__STORE_HIST_STRS];
		size_t l[PC__STORE_HIST_STRS];
		text_columns(st, 2, PC__STORE_HIST_STRS, s, l);
		rc = pc__store_hist_add(b, sqlite3_column_int64(st, 0), sqlite3_column_int64(st, 1), s, l);
		if (rc != 0) {
			pc__sq_done(st);
			return rc;
		}
	}
	return rc;
}

static pc_msg_t *run_get(void *p, const pc__store_op_t *op)
{
	pc__sq_be_t *be = p;
	int berr = 0;
	pc_store_reply_t res = {0};
	pc__sq_reader_t *r = NULL;
	int rc = reader_get(be, &r);
	if (rc == 0) {
		sqlite3_stmt *st = r->st[R_RUN];
		pc__sq_bind_s(&berr, st, 1, op, S_RG_RUN);
		rc = pc__sq_step_b(r->db, st, berr);
		if (rc == 1) {
			const char *code = (const char *)sqlite3_column_text(st, 3);
			res.status = pc__store_status_from_name((const char *)sqlite3_column_text(st, 0));
			res.started_ms = sqlite3_column_int64(st, 1);
			res.ended_ms = sqlite3_column_int64(st, 2);
			res.flags = sqlite3_column_int(st, 4) ? PC_STORE_REPLAY_INVALID : 0;
			snprintf(res.id, sizeof(res.id), "%s", op->s[S_RG_RUN]);
			snprintf(res.code, sizeof(res.code), "%s", code ? code : "");
			pc__sq_done(st);
			rc = 0;
		} else if (rc == 0) {
			rc = PC_ENOTFOUND;
		}
		reader_put(be, r);
	}
	res.rc = rc;
	return pc__store_reply_msg(&res);
}

static pc_msg_t *history(void *p, const pc__store_op_t *op)
{
	pc__sq_be_t *be = p;
	const char *key = op->s[S_HI_KEY];
	pc__sq_reader_t *r = NULL;
	pc__store_hist_builder_t b = {0};
	int64_t last = 0;
	int rc = reader_get(be, &r);
	if (rc != 0)
		return pc__store_hist_error(rc);
	/* One read transaction: last_seq and the rows are one snapshot. */
	rc = pc__sq_exec_st(r->db, r->st[R_BEGIN]);
	if (rc == 0) {
		rc = read_history(r, key, &b, &last);
		if (rc == 0)
			rc = pc__sq_exec_st(r->db, r->st[R_COMMIT]);
		if (rc != 0 && !sqlite3_get_autocommit(r->db))
			pc__sq_exec_st(r->db, r->st[R_ROLLBACK]);
	}
	reader_put(be, r);
	if (rc != 0) {
		pc__store_hist_clear(&b);
		return pc__store_hist_error(rc);
	}
	pc_msg_t *m = pc__store_hist_finish(&b, last);
	return m ? m : pc__store_hist_error(PC_ENOMEM);
}

/* One page of sessions into b; *more when a row beyond it exists. */
static int read_sessions(pc__sq_reader_t *r, const pc__store_op_t *op, pc__store_list_builder_t *b, bool *more)
{
	int64_t limit = op->i[I_SL_LIMIT], order = op->i[I_SL_ORDER];
	bool by_id = op->s[S_SL_ID] != NULL;
	sqlite3_stmt *st = r->st[by_id				? R_LIST_ID
				 : order == PC_STORE_SESSIONS_KEY	? R_LIST_KEY
				 : order == PC_STORE_SESSIONS_CREATED ? R_LIST_CREATED
								      : R_LIST_UPDATED];
	int berr = 0;
	if (by_id)
		pc__sq_bind_s(&berr, st, 4, op, S_SL_ID);
	else
		pc__sq_bind_s(&berr, st, 1, op, S_SL_AFTER);
	if (!by_id && order != PC_STORE_SESSIONS_KEY)
		pc__sq_bind_i(&berr, st, 2, op->i[I_SL_AFTER_MS]);
	pc__sq_bind_i(&berr, st, 3, limit + 1);
	int rc;
	while ((rc = pc__sq_step_b(r->db, st, berr)) == 1) {
		if ((int64_t)b->rows.n == limit) {
			*more = true;
			pc__sq_done(st);
			return 0;
		}
		static const int text_cols[PC__STORE_LIST_STRS] = {0, 1, 2, 7, 8};
		const char *str[PC__STORE_LIST_STRS];
		size_t len[PC__STORE_LIST_STRS];
		for (int k = 0; k < PC__STORE_LIST_STRS; k++) {
			str[k] = (const char *)sqlite3_column_text(st, text_cols[k]);
			len[k] = (size_t)sqlite3_column_bytes(st, text_cols[k]);
		}
		pc__store_list_ent_t e = {
			.created_ms = sqlite3_column_int64(st, 3),
			.updated_ms = sqlite3_column_int64(st, 4),
			.last_seq = sqlite3_column_int64(st, 5),
			.runs = (uint64_t)sqlite3_column_int64(st, 6),
		};
		rc = pc__store_list_add(b, &e, str, len);
		if (rc != 0) {
			pc__sq_done(st);
			return rc;
		}
	}
	return rc;
}

static pc_msg_t *sessions(void *p, const pc__store_op_t *op)
{
	pc__sq_be_t *be = p;
	pc__sq_reader_t *r = NULL;
	pc__store_list_builder_t b = {0};
	bool more = false;
	int rc = reader_get(be, &r);
	if (rc != 0)
		return pc__store_error_reply(PC_STORE_REQ_SESSIONS, rc);
	rc = read_sessions(r, op, &b, &more);
	reader_put(be, r);
	if (rc != 0) {
		pc__store_list_clear(&b);
		return pc__store_error_reply(PC_STORE_REQ_SESSIONS, rc);
	}
	pc_msg_t *m = pc__store_list_finish(&b, more);
	return m ? m : pc__store_error_reply(PC_STORE_REQ_SESSIONS, PC_ENOMEM);
}

static int read_open_runs(pc__sq_reader_t *r, pc__store_runs_builder_t *b)
{
	int berr = 0;
	sqlite3_stmt *st = r->st[R_OPEN];
	pc__sq_bind_i(&berr, st, 1, PC_STORE_RUNS_OPEN_MAX);
	int rc;
	while ((rc = pc__sq_step_b(r->db, st, berr)) == 1) {
		const char *str[4];
		size_t len[4];
		text_columns(st, 0, 4, str, len);
		pc__store_run_ent_t e = {.accepted_ms = sqlite3_column_int64(st, 4),
					 .started = sqlite3_column_int(st, 5) != 0};
		rc = pc__store_runs_add(b, &e, str, len);
		if (rc != 0) {
			pc__sq_done(st);
			return rc;
		}
	}
	return rc;
}

static pc_msg_t *open_runs(void *p, const pc__store_op_t *op)
{
	(void)op;
	pc__sq_be_t *be = p;
	pc__sq_reader_t *r = NULL;
	pc__store_runs_builder_t b = {0};
	int rc = reader_get(be, &r);
	if (rc == 0) {
		rc = read_open_runs(r, &b);
		reader_put(be, r);
	}
	if (rc != 0) {
		pc__store_runs_clear(&b);
		return pc__store_error_reply(PC_STORE_REQ_RUNS_OPEN, rc);
	}
	pc_msg_t *m = pc__store_runs_finish(&b);
	return m ? m : pc__store_error_reply(PC_STORE_REQ_RUNS_OPEN, PC_ENOMEM);
}

static int read_devices(pc__sq_reader_t *r, pc__store_devices_builder_t *b)
{
	int berr = 0;
	sqlite3_stmt *st = r->st[R_DEVICES];
	pc__sq_bind_i(&berr, st, 1, PC_STORE_DEVICES_MAX);
	int rc;
	while ((rc = pc__sq_step_b(r->db, st, berr)) == 1) {
		const char *str[4];
		size_t len[4];
		text_columns(st, 0, 4, str, len);
		pc__store_device_ent_t e = {.approved_ms = sqlite3_column_int64(st, 4),
					    .issued_ms = sqlite3_column_int64(st, 5)};
		rc = pc__store_devices_add(b, &e, str, len);
		if (rc != 0) {
			pc__sq_done(st);
			return rc;
		}
	}
	return rc;
}

static pc_msg_t *devices(void *p, const pc__store_op_t *op)
{
	(void)op;
	pc__sq_be_t *be = p;
	pc__sq_reader_t *r = NULL;
	pc__store_devices_builder_t b = {0};
	int rc = reader_get(be, &r);
	if (rc == 0) {
		rc = read_devices(r, &b);
		reader_put(be, r);
	}
	if (rc != 0) {
		pc__store_devices_clear(&b);
		return pc__store_error_reply(PC_STORE_REQ_DEVICES, rc);
	}
	pc_msg_t *m = pc__store_devices_finish(&b);
	return m ? m : pc__store_error_reply(PC_STORE_REQ_DEVICES, PC_ENOMEM);
}

static int read_nodes(pc__sq_reader_t *r, pc__store_nodes_builder_t *b)
{
	int berr = 0;
	sqlite3_stmt *st = r->st[R_NODES];
	pc__sq_bind_i(&berr, st, 1, pc__clock_wall_ms());
	pc__sq_bind_i(&berr, st, 2, PC_STORE_NODES_MAX);
	int rc;
	while ((rc = pc__sq_step_b(r->db, st, berr)) == 1) {
		const char *str[3];
		size_t len[3];
		text_columns(st, 0, 3, str, len);
		pc__store_node_ent_t e = {.started_ms = sqlite3_column_int64(st, 3),
					  .heartbeat_ms = sqlite3_column_int64(st, 4),
					  .expires_ms = sqlite3_column_int64(st, 5),
					  .live = sqlite3_column_int(st, 6) != 0};
		rc = pc__store_nodes_add(b, &e, str, len);
		if (rc != 0) {
			pc__sq_done(st);
			return rc;
		}
	}
	return rc;
}

static pc_msg_t *nodes(void *p, const pc__store_op_t *op)
{
	(void)op;
	pc__sq_be_t *be = p;
	pc__sq_reader_t *r = NULL;
	pc__store_nodes_builder_t b = {0};
	int rc = reader_get(be, &r);
	if (rc == 0) {
		rc = read_nodes(r, &b);
		reader_put(be, r);
	}
	if (rc != 0) {
		pc__store_nodes_clear(&b);
		return pc__store_error_reply(PC_STORE_REQ_NODES, rc);
	}
	pc_msg_t *m = pc__store_nodes_finish(&b);
	return m ? m : pc__store_error_reply(PC_STORE_REQ_NODES, PC_ENOMEM);
}

/* The listing's records and the sums over all of them, in one read
 * transaction so that both are one snapshot. */
static int read_usage(pc__sq_reader_t *r, const pc__store_op_t *op, pc__store_usage_builder_t *b, bool *more)
{
	bool by_run = op->s[S_UL_RUN] != NULL;
	uint32_t key = by_run ? S_UL_RUN : S_UL_KEY;
	int berr = 0;
	sqlite3_stmt *st = r->st[by_run ? R_USAGE_SUM_RUN : R_USAGE_SUM_KEY];
	pc__sq_bind_s(&berr, st, 1, op, key);
	int rc = pc__sq_step_b(r->db, st, berr);
	if (rc != 1)
		return rc < 0 ? rc : PC_STORE_EIO; /* an aggregate always has its row */
	b->head.records = sqlite3_column_int64(st, 0);
	for (int k = 0; k < 5; k++)
		b->head.sum[k] = sqlite3_column_int64(st, 1 + k);
	b->head.latest_ms = sqlite3_column_int64(st, 6);
	pc__sq_done(st);
	st = r->st[by_run ? R_USAGE_RUN : R_USAGE_KEY];
	pc__sq_bind_s(&berr, st, 1, op, key);
	pc__sq_bind_i(&berr, st, 2, (int64_t)PC_STORE_USAGE_LIST_MAX + 1);
	while ((rc = pc__sq_step_b(r->db, st, berr)) == 1) {
		if (b->rows.n == PC_STORE_USAGE_LIST_MAX) {
			*more = true;
			pc__sq_done(st);
			return 0;
		}
		pc__store_usage_ent_t e = {.created_ms = sqlite3_column_int64(st, 7)};
		for (int k = 0; k < 7; k++)
			e.n[k] = sqlite3_column_int64(st, k);
		const char *str[4];
		size_t len[4];
		for (int k = 0; k < 4; k++) {
			str[k] = (const char *)sqlite3_column_text(st, 8 + k);
			len[k] = (size_t)sqlite3_column_bytes(st, 8 + k);
		}
		rc = pc__store_usage_add(b, &e, str, len);
		if (rc != 0) {
			pc__sq_done(st);
			return rc;
		}
	}
	return rc;
}

/* The window's sums and its days, one snapshot as read_usage's. */
static int read_usage_days(pc__sq_reader_t *r, const pc__store_op_t *op, pc__store_usage_builder_t *b)
{
	int berr = 0;
	sqlite3_stmt *st = r->st[R_USAGE_SUM_WINDOW];
	pc__sq_bind_i(&berr, st, 1, op->i[I_UD_FROM]);
	pc__sq_bind_i(&berr, st, 2, op->i[I_UD_TO]);
	int rc = pc__sq_step_b(r->db, st, berr);
	if (rc != 1)
		return rc < 0 ? rc : PC_STORE_EIO;
	b->head.records = sqlite3_column_int64(st, 0);
	for (int k = 0; k < 5; k++)
		b->head.sum[k] = sqlite3_column_int64(st, 1 + k);
	b->head.latest_ms = sqlite3_column_int64(st, 6);
	pc__sq_done(st);
	st = r->st[R_USAGE_DAYS];
	pc__sq_bind_i(&berr, st, 1, op->i[I_UD_FROM]);
	pc__sq_bind_i(&berr, st, 2, op->i[I_UD_TO]);
	while ((rc = pc__sq_step_b(r->db, st, berr)) == 1) {
		pc__store_usage_ent_t e = {.created_ms = sqlite3_column_int64(st, 7) * 86400000};
		for (int k = 0; k < 7; k++)
			e.n[k] = sqlite3_column_int64(st, k);
		const char *str[4] = {NULL};
		size_t len[4] = {0};
		rc = pc__store_usage_add(b, &e, str, len);
		if (rc != 0) {
			pc__sq_done(st);
			return rc;
		}
	}
	return rc;
}

static pc_msg_t *usage_list(void *p, const pc__store_op_t *op)
{
	pc__sq_be_t *be = p;
	pc__sq_reader_t *r = NULL;
	pc__store_usage_builder_t b = {0};
	bool more = false;
	int rc = reader_get(be, &r);
	if (rc != 0)
		return pc__store_error_reply(op->kind, rc);
	rc = pc__sq_exec_st(r->db, r->st[R_BEGIN]);
	if (rc == 0) {
		rc = op->kind == PC_STORE_REQ_USAGE_DAYS ? read_usage_days(r, op, &b) : read_usage(r, op, &b, &more);
		if (rc == 0)
			rc = pc__sq_exec_st(r->db, r->st[R_COMMIT]);
		if (rc != 0 && !sqlite3_get_autocommit(r->db))
			pc__sq_exec_st(r->db, r->st[R_ROLLBACK]);
	}
	reader_put(be, r);
	if (rc != 0) {
		pc__store_usage_clear(&b);
		return pc__store_error_reply(op->kind, rc);
	}
	pc_msg_t *m = pc__store_usage_finish(&b, more);
	return m ? m : pc__store_error_reply(op->kind, PC_ENOMEM);
}

const pc__store_reads_t pc__sq_reads = {
	.history = history,
	.run_get = run_get,
	.sessions = sessions,
	.open_runs = open_runs,
	.devices = devices,
	.nodes = nodes,
	.usage = usage_list,
};

void pc__sq_readers_free(pc__sq_be_t *be)
{
	while (be->idle) {
		pc__sq_reader_t *r = be->idle;
		be->idle = r->next;
		reader_free(r);
	}
}

