/*
 * The PostgreSQL backend's reading side: a pool of reader connections,
 * opened on demand, each with its statements prepared once, and the reads
 * the store answers from them (history, a run, a page of sessions, the
 * open runs, usage, devices), as sqlite_read.c answers them. A read that
 * reads several things (history; usage and its sums) sends them in one
 * pipeline inside one REPEATABLE READ transaction: one round trip, one
 * snapshot. Every wait has a deadline (pc__pg_next).
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pg_internal.h"

enum { R_BEGIN, R_COMMIT, R_LAST, R_MSGS, R_RUN, R_LIST_UPDATED, R_LIST_CREATED, R_LIST_KEY, R_LIST_ID, R_OPEN,
       R_USAGE_RUN, R_USAGE_KEY, R_USAGE_SUM_RUN, R_USAGE_SUM_KEY, R_USAGE_DAYS, R_USAGE_SUM_WINDOW, R_DEVICES,
       R_N };

/* A usage record's columns. */
#define USAGE_COLUMNS                                                                                       \
	"SELECT attempt_idx, call_idx, input, output, cache_read, cache_write, total, created_ms, run_id,"   \
	" session_key, provider, model FROM usage "
/* Sums as bigint, not numeric: plain integers to parse, and an overflow is
 * an error, as SQLite's sum() makes it. */
#define USAGE_SUMS                                                                                          \
	"SELECT count(*), coalesce(sum(input), 0)::bigint, coalesce(sum(output), 0)::bigint,"               \
	" coalesce(sum(cache_read), 0)::bigint, coalesce(sum(cache_write), 0)::bigint,"                     \
	" coalesce(sum(total), 0)::bigint, coalesce(max(created_ms), 0) FROM usage "

/* A listed session's columns. */
#define LIST_COLUMNS                                                                                       \
	"SELECT s.key, s.id, s.agent, s.created_ms, s.updated_ms, s.last_seq, s.run_count, s.last_run_id" \
	" FROM sessions s "

/* Statement names are per connection: each reader prepares its own. */
static const struct {
	const char *name, *sql;
} rsql[R_N] = {
	[R_BEGIN] = {"pc_r_begin", "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"},
	[R_COMMIT] = {"pc_r_commit", "COMMIT"},
	[R_LAST] = {"pc_r_last",
		    "SELECT last_seq, id, agent, metadata, created_ms, updated_ms FROM sessions WHERE key = $1::text"},
	[R_MSGS] = {"pc_r_msgs",
		    "SELECT m.seq, m.created_ms, m.role, m.content, m.tool_call_ids, m.run_id, r.idem_key"
		    " FROM messages m LEFT JOIN runs r ON r.run_id = m.run_id"
		    " WHERE m.session_id = (SELECT sid FROM sessions WHERE key = $1::text) ORDER BY m.seq"},
	[R_RUN] = {"pc_r_run", "SELECT status, started_ms, ended_ms, error_code FROM runs WHERE run_id = $1::text"},
	/* $1 the cursor key (NULL: the first page), $2 the cursor time, $3
	 * the page size plus one (to tell whether more follow) */
	[R_LIST_UPDATED] = {"pc_r_list_updated",
			    LIST_COLUMNS "WHERE $1::text IS NULL OR s.updated_ms < $2::bigint"
					 " OR (s.updated_ms = $2::bigint AND s.key > $1::text)"
					 " ORDER BY s.updated_ms DESC, s.key LIMIT $3::bigint"},
	[R_LIST_CREATED] = {"pc_r_list_created",
			    LIST_COLUMNS "WHERE $1::text IS NULL OR s.created_ms < $2::bigint"
					 " OR (s.created_ms = $2::bigint AND s.key > $1::text)"
					 " ORDER BY s.created_ms DESC, s.key LIMIT $3::bigint"},
	/* $1 the cursor key, $2 the page size plus one */
	[R_LIST_KEY] = {"pc_r_list_key",
			LIST_COLUMNS "WHERE $1::text IS NULL OR s.key > $1::text ORDER BY s.key LIMIT $2::bigint"},
	/* $1 a session id (ids are random, so at most one; no cursor) */
	[R_LIST_ID] = {"pc_r_list_id", LIST_COLUMNS "WHERE s.id = $1::text ORDER BY s.key LIMIT $2::bigint"},
	/* started: the transcript holds a message of it (a rare read: it
	 * scans the session's messages); n is the acceptance order */
	[R_OPEN] = {"pc_r_open",
		    "SELECT r.run_id, r.session_key, r.owner, r.prompt, r.started_ms,"
		    " EXISTS (SELECT 1 FROM messages m JOIN sessions s ON m.session_id = s.sid"
		    "  WHERE s.key = r.session_key AND m.run_id = r.run_id)"
		    " FROM runs r WHERE r.status = 'accepted' ORDER BY r.n LIMIT $1::bigint"},
	/* $2: the listing's size plus one (to tell whether more follow) */
	[R_USAGE_RUN] = {"pc_r_usage_run",
			 USAGE_COLUMNS "WHERE run_id = $1::text ORDER BY attempt_idx, call_idx LIMIT $2::bigint"},
	[R_USAGE_KEY] = {"pc_r_usage_key",
			 USAGE_COLUMNS "WHERE session_key = $1::text ORDER BY created_ms, run_id, attempt_idx, call_idx"
				       " LIMIT $2::bigint"},
	[R_USAGE_SUM_RUN] = {"pc_r_usage_sum_run", USAGE_SUMS "WHERE run_id = $1::text"},
	[R_USAGE_SUM_KEY] = {"pc_r_usage_sum_key", USAGE_SUMS "WHERE session_key = $1::text"},
	/* a window [$1, $2) by UTC day (created_ms is never negative) */
	[R_USAGE_DAYS] = {"pc_r_usage_days",
			  "SELECT count(*), 0, sum(input)::bigint, sum(output)::bigint, sum(cache_read)::bigint,"
			  " sum(cache_write)::bigint, sum(total)::bigint, created_ms / 86400000 AS day FROM usage"
			  " WHERE created_ms >= $1::bigint AND created_ms < $2::bigint GROUP BY day ORDER BY day"},
	[R_USAGE_SUM_WINDOW] = {"pc_r_usage_sum_window",
				USAGE_SUMS "WHERE created_ms >= $1::bigint AND created_ms < $2::bigint"},
	[R_DEVICES] = {"pc_r_devices", "SELECT id, public_key, token_hash, scopes, approved_ms, issued_ms FROM devices"
				       " ORDER BY issued_ms DESC, id LIMIT $1::bigint"},
};

struct pc__pg_reader {
	struct pc__pg_reader *next;
	PGconn *c;
};

/* One statement to run: its parameters as text (NULL: SQL NULL) and the
 * columns its rows must have. */
typedef struct call {
	int st;
	int n;
	const char *v[3];
	int nfields;
} call_t;

/* A libpq call that failed before any result: the connection is gone,
 * or something else went wrong on our side. */
static int send_code(const PGconn *c)
{
	return PQstatus(c) == CONNECTION_BAD ? PC_STORE_EUNAVAIL : PC_STORE_EIO;
}

/* The current query's one result, of status `want` (with `nfields`
 * columns, unless negative), and the NULL that ends it. */
static int next_result(pc__pg_be_t *be, PGconn *c, ExecStatusType want, int nfields, PGresult **out)
{
	*out = NULL;
	PGresult *res = NULL, *end = NULL;
	int rc = pc__pg_next(c, pc__pg_wait_ms(be), &res);
	if (rc != 0)
		return rc;
	if (!res)
		return send_code(c); /* no result where one was due */
	if (PQresultStatus(res) != want) {
		rc = pc__pg_code(res, c);
		PQclear(res);
		return rc;
	}
	if (nfields >= 0 && PQnfields(res) != nfields)
		rc = PC_STORE_EIO;
	if (rc == 0)
		rc = pc__pg_next(c, pc__pg_wait_ms(be), &end);
	if (rc == 0 && end) { /* a second result: not a query of ours */
		PQclear(end);
		rc = PC_STORE_EIO;
	}
	if (rc != 0) {
		PQclear(res);
		return rc;
	}
	*out = res;
	return 0;
}

/* Reads the pipeline's sync point and leaves pipeline mode. */
static int pipeline_end(pc__pg_be_t *be, PGconn *c)
{
	PGresult *res = NULL;
	int rc = pc__pg_next(c, pc__pg_wait_ms(be), &res);
	if (rc == 0 && PQresultStatus(res) != PGRES_PIPELINE_SYNC)
		rc = res ? pc__pg_code(res, c) : send_code(c);
	PQclear(res);
	if (rc == 0 && !PQexitPipelineMode(c))
		rc = send_code(c);
	return rc;
}

/* Prepares every statement, in one round trip. */
static int prepare_all(pc__pg_be_t *be, PGconn *c)
{
	if (!PQenterPipelineMode(c))
		return send_code(c);
	for (int k = 0; k < R_N; k++)
		if (!PQsendPrepare(c, rsql[k].name, rsql[k].sql, 0, NULL))
			return send_code(c);
	if (!PQpipelineSync(c))
		return send_code(c);
	for (int k = 0; k < R_N; k++) {
		PGresult *res = NULL;
		int rc = next_result(be, c, PGRES_COMMAND_OK, -1, &res);
		PQclear(res);
		if (rc != 0)
			return rc;
	}
	return pipeline_end(be, c);
}

static void reader_free(pc__pg_reader_t *r)
{
	if (!r)
		return;
	PQfinish(r->c);
	free(r);
}

static int reader_get(pc__pg_be_t *be, pc__pg_reader_t **out)
{
	pc__pg_reader_t *r;
	for (;;) {
		pthread_mutex_lock(&be->lock);
		r = be->idle;
		if (r)
			be->idle = r->next;
		pthread_mutex_unlock(&be->lock);
		if (!r)
			break;
		if (pc__pg_idle_alive(r->c)) {
			*out = r;
			return 0;
		}
		reader_free(r); /* the server went away meanwhile */
	}
	r = calloc(1, sizeof(*r));
	if (!r)
		return PC_ENOMEM;
	int rc = pc__pg_connect(be, "reader", &r->c);
	if (rc == 0)
		rc = prepare_all(be, r->c);
	if (rc != 0) {
		reader_free(r);
		return rc;
	}
	*out = r;
	return 0;
}

/* Back to the pool after a read that ended with `rc`, unless the
 * connection may be broken: a failed read (a lost server, a deadline
 * passed with a query in flight, an aborted transaction) closes it, so
 * that the next read opens a fresh one. */
static void reader_put(pc__pg_be_t *be, pc__pg_reader_t *r, int rc)
{
	bool ok = (rc == 0 || rc == PC_ENOTFOUND) && PQstatus(r->c) == CONNECTION_OK &&
		  PQtransactionStatus(r->c) == PQTRANS_IDLE && PQpipelineStatus(r->c) == PQ_PIPELINE_OFF;
	if (!ok) {
		reader_free(r);
		return;
	}
	pthread_mutex_lock(&be->lock);
	r->next = be->idle;
	be->idle = r;
	pthread_mutex_unlock(&be->lock);
}

/* One statement, its rows in *out. */
static int query(pc__pg_be_t *be, PGconn *c, const call_t *q, PGresult **out)
{
	*out = NULL;
	if (!PQsendQueryPrepared(c, rsql[q->st].name, q->n, q->v, NULL, NULL, 0))
		return send_code(c);
	return next_result(be, c, PGRES_TUPLES_OK, q->nfields, out);
}

/* One statement on a pooled reader: its rows in *out (the caller's). */
static int read_one(pc__pg_be_t *be, const call_t *q, PGresult **out)
{
	*out = NULL;
	pc__pg_reader_t *r = NULL;
	int rc = reader_get(be, &r);
	if (rc == 0) {
		rc = query(be, r->c, q, out);
		reader_put(be, r, rc);
	}
	return rc;
}

/* n statements in one read-only REPEATABLE READ transaction, sent as one
 * pipeline: their rows (out[k]) are one snapshot. */
static int snapshot(pc__pg_be_t *be, PGconn *c, const call_t *q, int n, PGresult **out)
{
	for (int k = 0; k < n; k++)
		out[k] = NULL;
	if (!PQenterPipelineMode(c))
		return send_code(c);
	bool sent = PQsendQueryPrepared(c, rsql[R_BEGIN].name, 0, NULL, NULL, NULL, 0);
	for (int k = 0; k < n && sent; k++)
		sent = PQsendQueryPrepared(c, rsql[q[k].st].name, q[k].n, q[k].v, NULL, NULL, 0);
	sent = sent && PQsendQueryPrepared(c, rsql[R_COMMIT].name, 0, NULL, NULL, NULL, 0);
	if (!sent || !PQpipelineSync(c))
		return send_code(c);
	/* On a failure the rest of the pipeline is left unread: the
	 * connection is closed (reader_put), not drained. */
	PGresult *res = NULL;
	int rc = next_result(be, c, PGRES_COMMAND_OK, -1, &res);
	PQclear(res);
	for (int k = 0; k < n && rc == 0; k++)
		rc = next_result(be, c, PGRES_TUPLES_OK, q[k].nfields, &out[k]);
	if (rc == 0) {
		rc = next_result(be, c, PGRES_COMMAND_OK, -1, &res);
		PQclear(res);
	}
	if (rc == 0)
		rc = pipeline_end(be, c);
	if (rc != 0) {
		for (int k = 0; k < n; k++) {
			PQclear(out[k]);
			out[k] = NULL;
		}
	}
	return rc;
}

/* Column `col` of row `row` as text (NULL for SQL NULL) and its length. */
static const char *col_s(const PGresult *res, int row, int col, size_t *len)
{
	if (PQgetisnull(res, row, col)) {
		*len = 0;
		return NULL;
	}
	*len = (size_t)PQgetlength(res, row, col);
	return PQgetvalue(res, row, col);
}

/* n text columns of a row from `first` on. */
static void text_columns(const PGresult *res, int row, int first, int n, const char **str, size_t *len)
{
	for (int k = 0; k < n; k++)
		str[k] = col_s(res, row, first + k, &len[k]);
}

/* An integer column (0 for SQL NULL, as SQLite reads one). */
static int64_t col_i(const PGresult *res, int row, int col)
{
	if (PQgetisnull(res, row, col))
		return 0;
	return (int64_t)strtoll(PQgetvalue(res, row, col), NULL, 10);
}

/* A boolean column ('t' / 'f' in text format). */
static bool col_b(const PGresult *res, int row, int col)
{
	return !PQgetisnull(res, row, col) && PQgetvalue(res, row, col)[0] == 't';
}

static void num(char buf[24], int64_t v)
{
	snprintf(buf, 24, "%" PRId64, v);
}

static int build_history(const PGresult *last, const PGresult *msgs, pc__store_hist_builder_t *b, int64_t *seq)
{
	if (PQntuples(last) == 0)
		return PC_ENOTFOUND; /* no such session (the key is UNIQUE: one row at most) */
	*seq = col_i(last, 0, 0);
	const char *ss[3];
	size_t sl[3];
	text_columns(last, 0, 1, 3, ss, sl);
	int rc = pc__store_hist_session(b, ss, sl, col_i(last, 0, 4), col_i(last, 0, 5));
	for (int k = 0, n = PQntuples(msgs); k < n && rc == 0; k++) {
		const char *s[PC__STORE_HIST_STRS];
		size_t l[PC__STORE_HIST_STRS];
		text_columns(msgs, k, 2, PC__STORE_HIST_STRS, s, l);
		rc = pc__store_hist_add(b, col_i(msgs, k, 0), col_i(msgs, k, 1), s, l);
	}
	return rc;
}

static pc_msg_t *history(void *p, const char *key)
{
	pc__pg_be_t *be = p;
	pc__pg_reader_t *r = NULL;
	pc__store_hist_builder_t b = {0};
	int64_t last = 0;
	int rc = reader_get(be, &r);
	if (rc != 0)
		return pc__store_hist_error(rc);
	/* last_seq and the rows are one snapshot */
	const call_t q[2] = {{R_LAST, 1, {key}, 6}, {R_MSGS, 1, {key}, 7}};
	PGresult *res[2];
	rc = snapshot(be, r->c, q, 2, res);
	reader_put(be, r, rc);
	if (rc == 0)
		rc = build_history(res[0], res[1], &b, &last);
	PQclear(res[0]);
	PQclear(res[1]);
	if (rc != 0) {
		pc__store_hist_clear(&b);
		return pc__store_hist_error(rc);
	}
	pc_msg_t *m = pc__store_hist_finish(&b, last);
	return m ? m : pc__store_hist_error(PC_ENOMEM);
}

static pc_msg_t *run_get(void *p, const pc__store_op_t *op)
{
	pc__pg_be_t *be = p;
	pc_store_reply_t res = {0};
	const call_t q = {R_RUN, 1, {op->s[S_RG_RUN]}, 4};
	PGresult *row = NULL;
	int rc = read_one(be, &q, &row);
	if (rc == 0 && PQntuples(row) == 0) {
		rc = PC_ENOTFOUND;
	} else if (rc == 0) {
		size_t len;
		const char *code = col_s(row, 0, 3, &len);
		res.status = pc__store_status_from_name(col_s(row, 0, 0, &len));
		res.started_ms = col_i(row, 0, 1);
		res.ended_ms = col_i(row, 0, 2);
		snprintf(res.id, sizeof(res.id), "%s", op->s[S_RG_RUN]);
		snprintf(res.code, sizeof(res.code), "%s", code ? code : "");
	}
	PQclear(row);
	res.rc = rc;
	return pc__store_reply_msg(&res);
}

/* One page of sessions into b; *more when a row beyond it exists. */
static int build_sessions(const PGresult *res, int64_t limit, pc__store_list_builder_t *b, bool *more)
{
	for (int k = 0, n = PQntuples(res); k < n; k++) {
		if ((int64_t)b->rows.n == limit) {
			*more = true;
			return 0;
		}
		static const int text_cols[4] = {0, 1, 2, 7};
		const char *str[4];
		size_t len[4];
		for (int j = 0; j < 4; j++)
			str[j] = col_s(res, k, text_cols[j], &len[j]);
		pc__store_list_ent_t e = {
			.created_ms = col_i(res, k, 3),
			.updated_ms = col_i(res, k, 4),
			.last_seq = col_i(res, k, 5),
			.runs = (uint64_t)col_i(res, k, 6),
		};
		int rc = pc__store_list_add(b, &e, str, len);
		if (rc != 0)
			return rc;
	}
	return 0;
}

static pc_msg_t *sessions(void *p, const pc__store_op_t *op)
{
	pc__pg_be_t *be = p;
	int64_t limit = op->i[I_SL_LIMIT], order = op->i[I_SL_ORDER];
	char after_ms[24], lim[24];
	num(after_ms, op->i[I_SL_AFTER_MS]);
	num(lim, limit + 1);
	call_t q;
	if (op->s[S_SL_ID])
		q = (call_t){R_LIST_ID, 2, {op->s[S_SL_ID], lim}, 8};
	else if (order == PC_STORE_SESSIONS_KEY)
		q = (call_t){R_LIST_KEY, 2, {op->s[S_SL_AFTER], lim}, 8};
	else
		q = (call_t){order == PC_STORE_SESSIONS_CREATED ? R_LIST_CREATED : R_LIST_UPDATED, 3,
			     {op->s[S_SL_AFTER], after_ms, lim}, 8};
	pc__store_list_builder_t b = {0};
	bool more = false;
	PGresult *res = NULL;
	int rc = read_one(be, &q, &res);
	if (rc == 0)
		rc = build_sessions(res, limit, &b, &more);
	PQclear(res);
	if (rc != 0) {
		pc__store_list_clear(&b);
		return pc__store_error_reply(PC_STORE_REQ_SESSIONS, rc);
	}
	pc_msg_t *m = pc__store_list_finish(&b, more);
	return m ? m : pc__store_error_reply(PC_STORE_REQ_SESSIONS, PC_ENOMEM);
}

static int build_open_runs(const PGresult *res, pc__store_runs_builder_t *b)
{
	for (int k = 0, n = PQntuples(res); k < n; k++) {
		const char *str[4];
		size_t len[4];
		text_columns(res, k, 0, 4, str, len);
		pc__store_run_ent_t e = {.accepted_ms = col_i(res, k, 4), .started = col_b(res, k, 5)};
		int rc = pc__store_runs_add(b, &e, str, len);
		if (rc != 0)
			return rc;
	}
	return 0;
}

static pc_msg_t *open_runs(void *p)
{
	pc__pg_be_t *be = p;
	char lim[24];
	num(lim, PC_STORE_RUNS_OPEN_MAX);
	const call_t q = {R_OPEN, 1, {lim}, 6};
	pc__store_runs_builder_t b = {0};
	PGresult *res = NULL;
	int rc = read_one(be, &q, &res);
	if (rc == 0)
		rc = build_open_runs(res, &b);
	PQclear(res);
	if (rc != 0) {
		pc__store_runs_clear(&b);
		return pc__store_error_reply(PC_STORE_REQ_RUNS_OPEN, rc);
	}
	pc_msg_t *m = pc__store_runs_finish(&b);
	return m ? m : pc__store_error_reply(PC_STORE_REQ_RUNS_OPEN, PC_ENOMEM);
}

static int build_devices(const PGresult *res, pc__store_devices_builder_t *b)
{
	for (int k = 0, n = PQntuples(res); k < n; k++) {
		const char *str[4];
		size_t len[4];
		text_columns(res, k, 0, 4, str, len);
		pc__store_device_ent_t e = {.approved_ms = col_i(res, k, 4), .issued_ms = col_i(res, k, 5)};
		int rc = pc__store_devices_add(b, &e, str, len);
		if (rc != 0)
			return rc;
	}
	return 0;
}

static pc_msg_t *devices(void *p)
{
	pc__pg_be_t *be = p;
	char lim[24];
	num(lim, PC_STORE_DEVICES_MAX);
	const call_t q = {R_DEVICES, 1, {lim}, 6};
	pc__store_devices_builder_t b = {0};
	PGresult *res = NULL;
	int rc = read_one(be, &q, &res);
	if (rc == 0)
		rc = build_devices(res, &b);
	PQclear(res);
	if (rc != 0) {
		pc__store_devices_clear(&b);
		return pc__store_error_reply(PC_STORE_REQ_DEVICES, rc);
	}
	pc_msg_t *m = pc__store_devices_finish(&b);
	return m ? m : pc__store_error_reply(PC_STORE_REQ_DEVICES, PC_ENOMEM);
}

/* The sums row (count, five sums, the latest time) into the header. */
static int usage_head(const PGresult *sums, pc__store_usage_builder_t *b)
{
	if (PQntuples(sums) != 1)
		return PC_STORE_EIO; /* an aggregate always has its row */
	b->head.records = col_i(sums, 0, 0);
	for (int k = 0; k < 5; k++)
		b->head.sum[k] = col_i(sums, 0, 1 + k);
	b->head.latest_ms = col_i(sums, 0, 6);
	return 0;
}

/* The listing's records; *more when one beyond the cap exists. */
static int build_usage(const PGresult *res, pc__store_usage_builder_t *b, bool *more)
{
	for (int k = 0, n = PQntuples(res); k < n; k++) {
		if (b->rows.n == PC_STORE_USAGE_LIST_MAX) {
			*more = true;
			return 0;
		}
		pc__store_usage_ent_t e = {.created_ms = col_i(res, k, 7)};
		for (int j = 0; j < 7; j++)
			e.n[j] = col_i(res, k, j);
		const char *str[4];
		size_t len[4];
		text_columns(res, k, 8, 4, str, len);
		int rc = pc__store_usage_add(b, &e, str, len);
		if (rc != 0)
			return rc;
	}
	return 0;
}

/* The window's days: count, 0, the sums, the day number. */
static int build_usage_days(const PGresult *res, pc__store_usage_builder_t *b)
{
	for (int k = 0, n = PQntuples(res); k < n; k++) {
		pc__store_usage_ent_t e = {.created_ms = col_i(res, k, 7) * 86400000};
		for (int j = 0; j < 7; j++)
			e.n[j] = col_i(res, k, j);
		const char *str[4] = {NULL};
		size_t len[4] = {0};
		int rc = pc__store_usage_add(b, &e, str, len);
		if (rc != 0)
			return rc;
	}
	return 0;
}

/* A usage listing (by run or session) or a window's days: the sums and
 * the rows in one snapshot. */
static pc_msg_t *usage_list(void *p, const pc__store_op_t *op)
{
	pc__pg_be_t *be = p;
	bool days = op->kind == PC_STORE_REQ_USAGE_DAYS, by_run = !days && op->s[S_UL_RUN] != NULL;
	char a[24], c[24];
	call_t q[2];
	if (days) {
		num(a, op->i[I_UD_FROM]);
		num(c, op->i[I_UD_TO]);
		q[0] = (call_t){R_USAGE_SUM_WINDOW, 2, {a, c}, 7};
		q[1] = (call_t){R_USAGE_DAYS, 2, {a, c}, 8};
	} else {
		const char *key = op->s[by_run ? S_UL_RUN : S_UL_KEY];
		num(c, (int64_t)PC_STORE_USAGE_LIST_MAX + 1);
		q[0] = (call_t){by_run ? R_USAGE_SUM_RUN : R_USAGE_SUM_KEY, 1, {key}, 7};
		q[1] = (call_t){by_run ? R_USAGE_RUN : R_USAGE_KEY, 2, {key, c}, 12};
	}
	pc__pg_reader_t *r = NULL;
	pc__store_usage_builder_t b = {0};
	bool more = false;
	PGresult *res[2] = {NULL, NULL};
	int rc = reader_get(be, &r);
	if (rc == 0) {
		rc = snapshot(be, r->c, q, 2, res);
		reader_put(be, r, rc);
	}
	if (rc == 0)
		rc = usage_head(res[0], &b);
	if (rc == 0)
		rc = days ? build_usage_days(res[1], &b) : build_usage(res[1], &b, &more);
	PQclear(res[0]);
	PQclear(res[1]);
	if (rc != 0) {
		pc__store_usage_clear(&b);
		return pc__store_error_reply(op->kind, rc);
	}
	pc_msg_t *m = pc__store_usage_finish(&b, more);
	return m ? m : pc__store_error_reply(op->kind, PC_ENOMEM);
}

const pc__store_reads_t pc__pg_reads = {
	.history = history,
	.run_get = run_get,
	.sessions = sessions,
	.open_runs = open_runs,
	.devices = devices,
	.usage = usage_list,
};

/* The backend's close: no read runs any more. */
void pc__pg_readers_free(pc__pg_be_t *be)
{
	while (be->idle) {
		pc__pg_reader_t *r = be->idle;
		be->idle = r->next;
		reader_free(r);
	}
}
