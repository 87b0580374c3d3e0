/*
 * The PostgreSQL backend's reading side: a pool of reader connections,
 * opened on demand, each with its statements prepared once, and the reads
 * the store answers from them (history, a run, a page of sessions, the
 * open runs, usage, devices, nodes), as sqlite_read.c answers them. A
 * read that reads several things (history; usage and its sums) sends them
 * in one pipeline inside one REPEATABLE READ transaction: one round trip,
 * one snapshot. Every wait has a deadline (pc__pg_next).
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pg_internal.h"

enum { R_BEGIN, R_COMMIT, R_LAST, R_MSGS, R_RUN, R_LIST_UPDATED, R_LIST_CREATED, R_LIST_KEY, R_LIST_ID, R_OPEN,
       R_USAGE_RUN, R_USAGE_KEY, R_USAGE_SUM_RUN, R_USAGE_SUM_KEY, R_USAGE_DAYS, R_USAGE_SUM_WINDOW, R_DEVICES,
       R_NODES, R_N };

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

/* A listed session's columns, and how many. */
#define LIST_COLUMNS                                                                                       \
	"SELECT s.key, s.id, s.agent, s.created_ms, s.updated_ms, s.last_seq, s.run_count, s.last_run_id," \
	" (SELECT r.run_id FROM runs r WHERE r.session_key = s.key AND r.status = 'accepted'"            \
	"  ORDER BY r.n LIMIT 1)"                                                                         \
	" FROM sessions s "
#define LIST_FIELDS 9

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
	[R_RUN] = {"pc_r_run",
		   "SELECT status, started_ms, ended_ms, error_code, replay_invalid FROM runs WHERE run_id = $1::text"},
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
	/* live: by the database's clock, read once (the clock beats are
	 * written with) */
	[R_NODES] = {"pc_r_nodes", "SELECT id, url, owner, started_ms, heartbeat_ms, expires_ms, expires_ms > c.ms AS live"
				   " FROM nodes, (SELECT pincer_clock_ms() AS ms) c"
				   " ORDER BY live DESC, id LIMIT $1::bigint"},
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

/* An idle reader that is still alive, or NULL. */
static pc__pg_reader_t *reader_idle(pc__pg_be_t *be)
{
	for (;;) {
		pthread_mutex_lock(&be->lock);
		pc__pg_reader_t *r = be->idle;
		if (r)
			be->idle = r->next;
		pthread_mutex_unlock(&be->lock);
		if (!r || pc__pg_idle_alive(r->c))
			return r;
		reader_free(r); /* the server went away meanwhile */
	}
}

static int reader_get(pc__pg_be_t *be, pc__pg_reader_t **out)
{
	pc__pg_reader_t *r = reader_idle(be);
	if (r) {
		*out = r;
		return 0;
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

/* One page of sessions into b; *more when a row beyond it exists. */
static int build_sessions(const PGresult *res, int64_t limit, pc__store_list_builder_t *b, bool *more)
{
	for (int k = 0, n = PQntuples(res); k < n; k++) {
		if ((int64_t)b->rows.n == limit) {
			*more = true;
			return 0;
		}
		static const int text_cols[PC__STORE_LIST_STRS] = {0, 1, 2, 7, 8};
		const char *str[PC__STORE_LIST_STRS];
		size_t len[PC__STORE_LIST_STRS];
		for (int j = 0; j < PC__STORE_LIST_STRS; j++)
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

static int build_nodes(const PGresult *res, pc__store_nodes_builder_t *b)
{
	for (int k = 0, n = PQntuples(res); k < n; k++) {
		const char *str[3];
		size_t len[3];
		text_columns(res, k, 0, 3, str, len);
		pc__store_node_ent_t e = {.started_ms = col_i(res, k, 3), .heartbeat_ms = col_i(res, k, 4),
					  .expires_ms = col_i(res, k, 5), .live = col_b(res, k, 6)};
		int rc = pc__store_nodes_add(b, &e, str, len);
		if (rc != 0)
			return rc;
	}
	return 0;
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

/* ---- each read: what it asks, and its answer from the rows ---- */

/* A read's statements (several: in one REPEATABLE READ snapshot) and the
 * text of its number parameters. */
typedef struct plan {
	call_t q[2];
	int n;
	bool snap;
	char num[2][24];
} plan_t;

static void plan_of(const pc__store_op_t *op, plan_t *p)
{
	*p = (plan_t){.n = 1};
	switch (op->kind) {
	case PC_STORE_REQ_HISTORY: /* last_seq and the rows: one snapshot */
		p->q[0] = (call_t){R_LAST, 1, {op->s[S_HI_KEY]}, 6};
		p->q[1] = (call_t){R_MSGS, 1, {op->s[S_HI_KEY]}, 7};
		p->n = 2;
		break;
	case PC_STORE_REQ_RUN_GET:
		p->q[0] = (call_t){R_RUN, 1, {op->s[S_RG_RUN]}, 5};
		break;
	case PC_STORE_REQ_SESSIONS: {
		int64_t order = op->i[I_SL_ORDER];
		num(p->num[0], op->i[I_SL_LIMIT] + 1);
		num(p->num[1], op->i[I_SL_AFTER_MS]);
		if (op->s[S_SL_ID])
			p->q[0] = (call_t){R_LIST_ID, 2, {op->s[S_SL_ID], p->num[0]}, LIST_FIELDS};
		else if (order == PC_STORE_SESSIONS_KEY)
			p->q[0] = (call_t){R_LIST_KEY, 2, {op->s[S_SL_AFTER], p->num[0]}, LIST_FIELDS};
		else
			p->q[0] = (call_t){order == PC_STORE_SESSIONS_CREATED ? R_LIST_CREATED : R_LIST_UPDATED, 3,
					   {op->s[S_SL_AFTER], p->num[1], p->num[0]}, LIST_FIELDS};
		break;
	}
	case PC_STORE_REQ_RUNS_OPEN:
		num(p->num[0], PC_STORE_RUNS_OPEN_MAX);
		p->q[0] = (call_t){R_OPEN, 1, {p->num[0]}, 6};
		break;
	case PC_STORE_REQ_DEVICES:
		num(p->num[0], PC_STORE_DEVICES_MAX);
		p->q[0] = (call_t){R_DEVICES, 1, {p->num[0]}, 6};
		break;
	case PC_STORE_REQ_NODES:
		num(p->num[0], PC_STORE_NODES_MAX);
		p->q[0] = (call_t){R_NODES, 1, {p->num[0]}, 7};
		break;
	case PC_STORE_REQ_USAGE_DAYS: /* the sums and the rows: one snapshot */
		num(p->num[0], op->i[I_UD_FROM]);
		num(p->num[1], op->i[I_UD_TO]);
		p->q[0] = (call_t){R_USAGE_SUM_WINDOW, 2, {p->num[0], p->num[1]}, 7};
		p->q[1] = (call_t){R_USAGE_DAYS, 2, {p->num[0], p->num[1]}, 8};
		p->n = 2;
		break;
	default: { /* a usage listing, by run or by session */
		bool by_run = op->s[S_UL_RUN] != NULL;
		const char *key = op->s[by_run ? S_UL_RUN : S_UL_KEY];
		num(p->num[0], (int64_t)PC_STORE_USAGE_LIST_MAX + 1);
		p->q[0] = (call_t){by_run ? R_USAGE_SUM_RUN : R_USAGE_SUM_KEY, 1, {key}, 7};
		p->q[1] = (call_t){by_run ? R_USAGE_RUN : R_USAGE_KEY, 2, {key, p->num[0]}, 12};
		p->n = 2;
		break;
	}
	}
	p->snap = p->n > 1;
}

static pc_msg_t *history_answer(PGresult *const *res)
{
	pc__store_hist_builder_t b = {0};
	int64_t last = 0;
	int rc = build_history(res[0], res[1], &b, &last);
	if (rc != 0) {
		pc__store_hist_clear(&b);
		return pc__store_hist_error(rc);
	}
	return pc__store_hist_finish(&b, last);
}

static pc_msg_t *run_answer(const pc__store_op_t *op, const PGresult *row)
{
	if (PQntuples(row) == 0)
		return pc__store_error_reply(op->kind, PC_ENOTFOUND);
	size_t len;
	const char *code = col_s(row, 0, 3, &len);
	pc_store_reply_t res = {
		.status = pc__store_status_from_name(col_s(row, 0, 0, &len)),
		.started_ms = col_i(row, 0, 1),
		.ended_ms = col_i(row, 0, 2),
		.flags = col_b(row, 0, 4) ? PC_STORE_REPLAY_INVALID : 0,
	};
	snprintf(res.id, sizeof(res.id), "%s", op->s[S_RG_RUN]);
	snprintf(res.code, sizeof(res.code), "%s", code ? code : "");
	return pc__store_reply_msg(&res);
}

static pc_msg_t *sessions_answer(const pc__store_op_t *op, const PGresult *res)
{
	pc__store_list_builder_t b = {0};
	bool more = false;
	int rc = build_sessions(res, op->i[I_SL_LIMIT], &b, &more);
	if (rc != 0) {
		pc__store_list_clear(&b);
		return pc__store_error_reply(op->kind, rc);
	}
	return pc__store_list_finish(&b, more);
}

static pc_msg_t *open_runs_answer(const pc__store_op_t *op, const PGresult *res)
{
	pc__store_runs_builder_t b = {0};
	int rc = build_open_runs(res, &b);
	if (rc != 0) {
		pc__store_runs_clear(&b);
		return pc__store_error_reply(op->kind, rc);
	}
	return pc__store_runs_finish(&b);
}

static pc_msg_t *devices_answer(const pc__store_op_t *op, const PGresult *res)
{
	pc__store_devices_builder_t b = {0};
	int rc = build_devices(res, &b);
	if (rc != 0) {
		pc__store_devices_clear(&b);
		return pc__store_error_reply(op->kind, rc);
	}
	return pc__store_devices_finish(&b);
}

static pc_msg_t *nodes_answer(const pc__store_op_t *op, const PGresult *res)
{
	pc__store_nodes_builder_t b = {0};
	int rc = build_nodes(res, &b);
	if (rc != 0) {
		pc__store_nodes_clear(&b);
		return pc__store_error_reply(op->kind, rc);
	}
	return pc__store_nodes_finish(&b);
}

static pc_msg_t *usage_answer(const pc__store_op_t *op, PGresult *const *res)
{
	pc__store_usage_builder_t b = {0};
	bool more = false;
	int rc = usage_head(res[0], &b);
	if (rc == 0)
		rc = op->kind == PC_STORE_REQ_USAGE_DAYS ? build_usage_days(res[1], &b) : build_usage(res[1], &b, &more);
	if (rc != 0) {
		pc__store_usage_clear(&b);
		return pc__store_error_reply(op->kind, rc);
	}
	return pc__store_usage_finish(&b, more);
}

/* The reply to `op`: its answer from the rows when the read went well
 * (`rc` 0), else its failure; the rows are cleared. */
static pc_msg_t *answer(const pc__store_op_t *op, int rc, PGresult **res, int n)
{
	pc_msg_t *m = NULL;
	if (rc == 0) {
		switch (op->kind) {
		case PC_STORE_REQ_HISTORY:
			m = history_answer(res);
			break;
		case PC_STORE_REQ_RUN_GET:
			m = run_answer(op, res[0]);
			break;
		case PC_STORE_REQ_SESSIONS:
			m = sessions_answer(op, res[0]);
			break;
		case PC_STORE_REQ_RUNS_OPEN:
			m = open_runs_answer(op, res[0]);
			break;
		case PC_STORE_REQ_DEVICES:
			m = devices_answer(op, res[0]);
			break;
		case PC_STORE_REQ_NODES:
			m = nodes_answer(op, res[0]);
			break;
		default:
			m = usage_answer(op, res);
			break;
		}
		rc = PC_ENOMEM; /* what a NULL answer means */
	}
	for (int k = 0; k < n; k++)
		PQclear(res[k]);
	return m ? m : pc__store_error_reply(op->kind, rc);
}

/* ---- one read on a reader: sent as one pipeline, its results collected
 * as they come (polled on an I/O loop) or waited for (blocking) ---- */

typedef struct pg_read {
	pc__pg_be_t *be;
	const pc__store_op_t *op;
	pc__pg_reader_t *r;
	plan_t plan;
	PGresult *res[2];
	int nstmt;      /* statements sent: the plan's, with BEGIN and COMMIT around a snapshot */
	int at;         /* the statement answered next; nstmt: the sync point */
	bool need_null; /* a result came; the NULL ending it not yet */
	bool flushing;  /* polled: the pipeline is not all in the socket yet */
	int rc;         /* polled: 1 all in, a negative code, or 0: the rest is the pool's to read */
	void (*done)(void *arg, void *job);
	void *arg;
} pg_read_t;

static void read_plan(pg_read_t *j)
{
	plan_of(j->op, &j->plan);
	j->nstmt = j->plan.n + (j->plan.snap ? 2 : 0);
}

static bool read_send(pg_read_t *j)
{
	PGconn *c = j->r->c;
	const plan_t *p = &j->plan;
	if (!PQenterPipelineMode(c))
		return false;
	bool ok = !p->snap || PQsendQueryPrepared(c, rsql[R_BEGIN].name, 0, NULL, NULL, NULL, 0);
	for (int k = 0; k < p->n && ok; k++)
		ok = PQsendQueryPrepared(c, rsql[p->q[k].st].name, p->q[k].n, p->q[k].v, NULL, NULL, 0);
	ok = ok && (!p->snap || PQsendQueryPrepared(c, rsql[R_COMMIT].name, 0, NULL, NULL, NULL, 0));
	return ok && PQpipelineSync(c) == 1;
}

/* Statement `at`'s result (or the sync point's). On a failure the rest of
 * the pipeline is left unread: the connection is closed (reader_put), not
 * drained. */
static int read_take(pg_read_t *j, PGresult *r)
{
	PGconn *c = j->r->c;
	int at = j->at++, k = j->plan.snap ? at - 1 : at;
	bool rows = at < j->nstmt && k >= 0 && k < j->plan.n; /* else BEGIN, COMMIT or the sync */
	ExecStatusType want = at == j->nstmt ? PGRES_PIPELINE_SYNC : rows ? PGRES_TUPLES_OK : PGRES_COMMAND_OK;
	int rc = 0;
	if (PQresultStatus(r) != want)
		rc = pc__pg_code(r, c);
	else if (rows && PQnfields(r) != j->plan.q[k].nfields)
		rc = PC_STORE_EIO;
	j->need_null = at < j->nstmt;
	if (rc == 0 && rows)
		j->res[k] = r;
	else
		PQclear(r);
	return rc;
}

/* Collects the answers as far as they have come (wait_ms 0) or to the end:
 * 1 when all are in, 0 when more are due, or a negative code. */
static int read_step(pg_read_t *j, int wait_ms)
{
	PGconn *c = j->r->c;
	while (j->at <= j->nstmt || j->need_null) {
		PGresult *r = NULL;
		int rc = pc__pg_next(c, wait_ms, &r);
		if (rc == PC_ETIMEDOUT && wait_ms == 0)
			return 0;
		if (rc != 0)
			return rc;
		if (j->need_null) {
			j->need_null = false;
			if (r) { /* a second result: not a query of ours */
				PQclear(r);
				return PC_STORE_EIO;
			}
			continue;
		}
		if (!r) /* an answer was due */
			return send_code(c);
		rc = read_take(j, r);
		if (rc != 0)
			return rc;
	}
	return PQexitPipelineMode(c) ? 1 : send_code(c);
}

/* The blocking pool's read: a pooled reader (opened if none is idle), the
 * pipeline, its results waited for. */
static pc_msg_t *read_blocking(void *p, const pc__store_op_t *op)
{
	pg_read_t j = {.be = p, .op = op};
	read_plan(&j);
	int rc = reader_get(j.be, &j.r);
	if (rc == 0) {
		rc = read_send(&j) ? read_step(&j, pc__pg_wait_ms(j.be)) : send_code(j.r->c);
		rc = rc == 1 ? 0 : rc;
		reader_put(j.be, j.r, rc);
	}
	return answer(op, rc, j.res, j.plan.n);
}

/* The loop thread: the reader's connection is ready, or the deadline
 * passed, or the I/O layer is shutting down (the pool reads the rest). */
static void read_ready(pc_io_fd_t *w, void *arg, uint32_t events)
{
	pg_read_t *j = arg;
	PGconn *c = j->r->c;
	int rc = events == 0 ? PC_ETIMEDOUT : 0;
	if (events && !(events & PC_IO_FD_STOPPED)) {
		if (j->flushing) {
			int fl = PQflush(c);
			rc = fl < 0 ? send_code(c) : 0;
			j->flushing = fl == 1;
		}
		if (rc == 0)
			rc = read_step(j, 0);
		if (rc == 0 && pc_io_fd_want(w, PC_IO_FD_READ | (j->flushing ? PC_IO_FD_WRITE : 0)) == 0)
			return;
	}
	pc_io_fd_stop(w);
	j->rc = rc;
	j->done(j->arg, j);
}

/* Sends a read on an idle reader and leaves its results to the I/O loop;
 * connecting stays on the blocking path. */
static int read_start(void *p, const pc__store_op_t *op, void (*done)(void *arg, void *job), void *arg)
{
	pc__pg_be_t *be = p;
	if (!be->cfg.io)
		return PC_ESTATE;
	pc__pg_reader_t *r = reader_idle(be);
	if (!r)
		return PC_ESTATE;
	pg_read_t *j = calloc(1, sizeof(*j));
	if (!j) {
		reader_put(be, r, 0);
		return PC_ENOMEM;
	}
	*j = (pg_read_t){.be = be, .op = op, .r = r, .done = done, .arg = arg};
	read_plan(j);
	int fl = -1;
	if (PQsetnonblocking(r->c, 1) == 0 && read_send(j))
		fl = PQflush(r->c);
	if (fl < 0) { /* this reader is broken: the pool's read opens another */
		reader_put(be, r, PC_STORE_EUNAVAIL);
		free(j);
		return PC_STORE_EUNAVAIL;
	}
	j->flushing = fl == 1;
	if (pc_io_fd_start(be->cfg.io, PQsocket(r->c), PC_IO_FD_READ | (j->flushing ? PC_IO_FD_WRITE : 0),
			   (uint32_t)pc__pg_wait_ms(be), read_ready, j, NULL) != 0)
		done(arg, j); /* sent: the pool reads it */
	return 0;
}

/* A polled read's answer, on a blocking thread: the rows turned into it,
 * after what the loop left unread is waited for. */
static pc_msg_t *read_finish(void *job)
{
	pg_read_t *j = job;
	int rc = j->rc;
	if (PQsetnonblocking(j->r->c, 0) != 0 && rc == 0)
		rc = send_code(j->r->c);
	if (rc == 0)
		rc = read_step(j, pc__pg_wait_ms(j->be));
	rc = rc == 1 ? 0 : rc;
	reader_put(j->be, j->r, rc);
	pc_msg_t *m = answer(j->op, rc, j->res, j->plan.n);
	free(j);
	return m;
}

const pc__store_reads_t pc__pg_reads = {
	.history = read_blocking,
	.run_get = read_blocking,
	.sessions = read_blocking,
	.open_runs = read_blocking,
	.devices = read_blocking,
	.nodes = read_blocking,
	.usage = read_blocking,
	.start = read_start,
	.finish = read_finish,
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
