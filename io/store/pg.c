/*
 * The PostgreSQL backend's writer, and opening and closing the store.
 *
 * A batch is one transaction sent as one libpq pipeline: BEGIN, the
 * transaction's id, one call of a schema function per write
 * (pg_schema.c), COMMIT and a sync point, written in one go and answered
 * in one go — one round trip, however many writes. A write the rules
 * refuse says so in its row, so it fails alone and the others commit. A
 * statement that fails for another reason (invalid UTF-8, a statement
 * timeout) aborts the transaction: then the batch runs again guarded, each
 * write a transaction of its own.
 *
 * A connection lost after COMMIT was sent leaves the outcome open: the
 * transaction's id, read back on a new connection with pg_xact_status,
 * says whether it committed. Writes are acknowledged only when it did;
 * when that cannot be proved, they are answered PC_STORE_EUNKNOWN.
 *
 * The writer connection is used by one blocking thread at a time (the
 * store actor keeps one batch in flight); readers have their own
 * (pg_read.c).
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "pg_internal.h"
#include "runtime/clock.h"

/* Reconnect backoff: after a failed connect, writes fail at once (the
 * database is down) until the wait has passed; it doubles up to the cap. */
#define BACKOFF_MIN_MS 100u
#define BACKOFF_MAX_MS 5000u
/* The most parameters a write statement takes. */
#define PARAMS_MAX 13

enum { P_BEGIN, P_XID, P_COMMIT, P_ROLLBACK, P_SESSION, P_APPEND, P_REWRITE, P_RUN_BEGIN, P_RUN_END, P_RUN_ADOPT, P_ATTEMPT,
       P_USAGE, P_DEVICE_PUT, P_DEVICE_DELETE, P_AUDIT, P_AUDIT_TRIM, P_LEASE_ACQUIRE, P_LEASE_RELEASE,
       P_SESSION_SET, P_PROBE, P_NODE_BEAT, P_N };

static const struct {
	const char *name, *sql;
	int nparams;
} stmts[P_N] = {
	[P_BEGIN] = {"w_begin", "BEGIN", 0},
	/* assigns the transaction its id now: what decides a lost commit */
	[P_XID] = {"w_xid", "SELECT pg_current_xact_id()::text", 0},
	[P_COMMIT] = {"w_commit", "COMMIT", 0},
	[P_ROLLBACK] = {"w_rollback", "ROLLBACK", 0},
	[P_SESSION] = {"w_session", "SELECT * FROM pincer_session($1, $2, $3, $4)", 4},
	[P_APPEND] = {"w_append", "SELECT * FROM pincer_append($1, $2, $3, $4, $5, $6, $7)", 7},
	[P_REWRITE] = {"w_rewrite", "SELECT * FROM pincer_rewrite($1, $2, $3, $4, $5)", 5},
	[P_RUN_BEGIN] = {"w_run_begin", "SELECT * FROM pincer_run_begin($1, $2, $3, $4, $5, $6, $7)", 7},
	[P_RUN_END] = {"w_run_end", "SELECT * FROM pincer_run_end($1, $2, $3, $4, $5, $6, $7)", 7},
	[P_RUN_ADOPT] = {"w_run_adopt", "SELECT * FROM pincer_run_adopt($1, $2, $3)", 3},
	[P_ATTEMPT] = {"w_attempt", "SELECT * FROM pincer_attempt($1, $2, $3, $4, $5, $6, $7, $8, $9)", 9},
	[P_USAGE] = {"w_usage",
		     "SELECT * FROM pincer_usage_add($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)", 13},
	[P_DEVICE_PUT] = {"w_device_put", "SELECT * FROM pincer_device_put($1, $2, $3, $4, $5, $6, $7)", 7},
	[P_DEVICE_DELETE] = {"w_device_delete", "SELECT * FROM pincer_device_delete($1)", 1},
	[P_AUDIT] = {"w_audit", "SELECT * FROM pincer_audit($1, $2, $3, $4, $5, $6, $7, $8)", 8},
	[P_AUDIT_TRIM] = {"w_audit_trim", "SELECT * FROM pincer_audit_trim($1, $2)", 2},
	[P_LEASE_ACQUIRE] = {"w_lease_acquire", "SELECT * FROM pincer_lease_acquire($1, $2, $3, $4)", 4},
	[P_LEASE_RELEASE] = {"w_lease_release", "SELECT * FROM pincer_lease_release($1, $2, $3)", 3},
	[P_SESSION_SET] = {"w_session_set", "SELECT * FROM pincer_session_set($1, $2, $3)", 3},
	/* a round trip through a transaction: the server is there and takes
	 * writes (a standby refuses the xid) */
	[P_PROBE] = {"w_probe", "SELECT NULL::text, NULL::bigint, NULL::text, NULL::text, NULL::bool, NULL::bool", 0},
	[P_NODE_BEAT] = {"w_node_beat", "SELECT * FROM pincer_node_beat($1, $2, $3, $4, $5)", 5},
};

/* ---- a write's parameters ---- */

typedef struct params {
	int n, stmt;
	const char *v[PARAMS_MAX];
	int len[PARAMS_MAX];
	char num[PARAMS_MAX][24];
	char *json; /* owned: a rewrite's messages */
} params_t;

static void p_str(params_t *p, const pc__store_op_t *op, uint32_t k)
{
	bool there = k < op->nstr && op->s[k];
	p->v[p->n] = there ? op->s[k] : NULL;
	p->len[p->n++] = there ? (int)op->len[k] : 0;
}

static void p_cstr(params_t *p, const char *s)
{
	p->v[p->n] = s;
	p->len[p->n++] = s ? (int)strlen(s) : 0;
}

static void p_int(params_t *p, int64_t v)
{
	int n = snprintf(p->num[p->n], sizeof(p->num[0]), "%lld", (long long)v);
	p->v[p->n] = p->num[p->n];
	p->len[p->n++] = n;
}

/* A rewrite's new messages as one JSON array of [role, content,
 * tool_call_ids, run_id, created_ms] (pincer_rewrite unpacks it). */
static int rewrite_json(const pc__store_op_t *op, int64_t n, char **out)
{
	cJSON *arr = cJSON_CreateArray();
	bool ok = arr != NULL;
	for (int64_t k = 0; k < n && ok; k++) {
		uint32_t first = S_RW_FIRST + (uint32_t)k * S_RW_PER;
		cJSON *m = cJSON_CreateArray();
		ok = m && cJSON_AddItemToArray(arr, m);
		for (uint32_t f = 0; f < S_RW_PER && ok; f++) {
			const char *s = op->s[first + f];
			ok = cJSON_AddItemToArray(m, s ? cJSON_CreateString(s) : cJSON_CreateNull());
		}
		char created[24];
		snprintf(created, sizeof(created), "%lld", (long long)op->i[I_RW_FIRST + k]);
		ok = ok && cJSON_AddItemToArray(m, cJSON_CreateString(created));
	}
	*out = ok ? cJSON_PrintUnformatted(arr) : NULL;
	cJSON_Delete(arr);
	return *out ? 0 : PC_ENOMEM;
}

static bool strs(const pc__store_op_t *op, uint32_t n)
{
	return op->nstr >= n && op->s[0] != NULL;
}

/* A session's metadata must be JSON (SQLite's table checks it; a check
 * here fails the write alone, where one in the server would abort the
 * batch's transaction). */
static bool json_or_absent(const pc__store_op_t *op, uint32_t k)
{
	if (!op->s[k])
		return true;
	cJSON *j = cJSON_ParseWithLength(op->s[k], op->len[k]);
	cJSON_Delete(j);
	return j != NULL;
}

/* The statement and parameters of one write, checked as the SQLite
 * backend checks them: PC_EINVAL for a malformed op (then nothing is
 * sent for it). */
static int params_of(const pc_store_config_t *cfg, const pc__store_op_t *op, params_t *p)
{
	memset(p, 0, offsetof(params_t, num));
	p->json = NULL;
	switch (op->kind) {
	case PC_STORE_REQ_SESSION:
		if (!strs(op, S_SESS_N) || !json_or_absent(op, S_SESS_META))
			return PC_EINVAL;
		p->stmt = P_SESSION;
		p_str(p, op, S_SESS_KEY);
		p_str(p, op, S_SESS_AGENT);
		p_str(p, op, S_SESS_ID);
		p_str(p, op, S_SESS_META);
		return 0;
	case PC_STORE_REQ_APPEND:
		if (!strs(op, S_APP_N) || op->nint < I_APP_N)
			return PC_EINVAL;
		p->stmt = P_APPEND;
		p_str(p, op, S_APP_KEY);
		p_int(p, op->i[I_APP_EPOCH]);
		for (uint32_t k = S_APP_ROLE; k <= S_APP_RUN; k++)
			p_str(p, op, k);
		p_int(p, op->i[I_APP_CREATED]);
		return 0;
	case PC_STORE_REQ_REWRITE: {
		if (!strs(op, S_RW_FIRST) || op->nint < I_RW_FIRST)
			return PC_EINVAL;
		int64_t n = op->i[I_RW_COUNT];
		if (n < 0 || op->nint != I_RW_FIRST + (uint64_t)n || op->nstr != S_RW_FIRST + (uint64_t)n * S_RW_PER)
			return PC_EINVAL;
		int rc = rewrite_json(op, n, &p->json);
		if (rc != 0)
			return rc;
		p->stmt = P_REWRITE;
		p_str(p, op, S_RW_KEY);
		p_int(p, op->i[I_RW_EPOCH]);
		p_int(p, op->i[I_RW_EXPECTED]);
		p_int(p, op->i[I_RW_FROM]);
		p_cstr(p, p->json);
		return 0;
	}
	case PC_STORE_REQ_RUN_BEGIN:
		if (!strs(op, S_RB_N))
			return PC_EINVAL;
		p->stmt = P_RUN_BEGIN;
		p_str(p, op, S_RB_RUN);
		p_str(p, op, S_RB_KEY);
		p_str(p, op, S_RB_IDEM);
		p_str(p, op, S_RB_FP);
		p_str(p, op, S_RB_OWNER);
		p_str(p, op, S_RB_PROMPT);
		p_int(p, cfg->idem_ttl_ms);
		return 0;
	case PC_STORE_REQ_RUN_END:
		if (!strs(op, S_RE_N) || op->nint < I_RE_N || op->i[I_RE_STATUS] < 0 ||
		    op->i[I_RE_STATUS] > PC_STORE_RUN_TIMEOUT || (op->i[I_RE_EPOCH] && !op->s[S_RE_KEY]))
			return PC_EINVAL;
		p->stmt = P_RUN_END;
		p_str(p, op, S_RE_RUN);
		p_str(p, op, S_RE_KEY);
		p_int(p, op->i[I_RE_EPOCH]);
		p_cstr(p, pc__store_run_status_names[op->i[I_RE_STATUS]]);
		p_str(p, op, S_RE_CODE);
		p_str(p, op, S_RE_USAGE);
		p_cstr(p, op->i[I_RE_REPLAY_INVALID] ? "t" : "f");
		return 0;
	case PC_STORE_REQ_RUN_ADOPT:
		if (!strs(op, S_AD_N))
			return PC_EINVAL;
		p->stmt = P_RUN_ADOPT;
		for (uint32_t k = 0; k < S_AD_N; k++)
			p_str(p, op, k);
		return 0;
	case PC_STORE_REQ_ATTEMPT:
		if (!strs(op, S_AT_N) || op->nint < I_AT_N)
			return PC_EINVAL;
		p->stmt = P_ATTEMPT;
		p_str(p, op, S_AT_RUN);
		p_int(p, op->i[I_AT_INDEX]);
		for (uint32_t k = S_AT_PROVIDER; k <= S_AT_CODE; k++)
			p_str(p, op, k);
		p_int(p, op->i[I_AT_DURATION]);
		return 0;
	case PC_STORE_REQ_USAGE_ADD:
		if (!strs(op, S_UA_N) || op->nint < I_UA_N || !op->s[S_UA_KEY])
			return PC_EINVAL;
		p->stmt = P_USAGE;
		p_str(p, op, S_UA_RUN);
		p_str(p, op, S_UA_KEY);
		p_int(p, op->i[I_UA_EPOCH]);
		p_int(p, op->i[I_UA_ATTEMPT]);
		p_int(p, op->i[I_UA_CALL]);
		p_str(p, op, S_UA_PROVIDER);
		p_str(p, op, S_UA_MODEL);
		for (uint32_t k = I_UA_INPUT; k <= I_UA_CREATED; k++)
			p_int(p, op->i[k]);
		return 0;
	case PC_STORE_REQ_DEVICE_PUT:
		if (!strs(op, S_DV_N) || op->nint < I_DV_N)
			return PC_EINVAL;
		p->stmt = P_DEVICE_PUT;
		for (uint32_t k = 0; k < S_DV_N; k++)
			p_str(p, op, k);
		p_int(p, op->i[I_DV_APPROVED]);
		p_int(p, op->i[I_DV_ISSUED]);
		p_cstr(p, op->i[I_DV_UPDATE] ? "t" : "f");
		return 0;
	case PC_STORE_REQ_DEVICE_DELETE:
		if (!strs(op, 1))
			return PC_EINVAL;
		p->stmt = P_DEVICE_DELETE;
		p_str(p, op, 0);
		return 0;
	case PC_STORE_REQ_AUDIT:
		if (!strs(op, S_AU_N) || op->nint < I_AU_N)
			return PC_EINVAL;
		p->stmt = P_AUDIT;
		p_int(p, op->i[I_AU_TS]);
		for (uint32_t k = 0; k < S_AU_N; k++)
			p_str(p, op, k);
		return 0;
	case PC_STORE_REQ_LEASE_ACQUIRE:
	case PC_STORE_REQ_LEASE_RELEASE: {
		bool acquire = op->kind == PC_STORE_REQ_LEASE_ACQUIRE;
		if (!strs(op, S_LS_N) || op->nint < I_LS_N || !op->s[S_LS_OWNER])
			return PC_EINVAL;
		p->stmt = acquire ? P_LEASE_ACQUIRE : P_LEASE_RELEASE;
		p_str(p, op, S_LS_KEY);
		p_str(p, op, S_LS_OWNER);
		p_int(p, op->i[I_LS_VALUE]);
		if (acquire)
			p_str(p, op, S_LS_STEAL);
		return 0;
	}
	case PC_STORE_REQ_SESSION_SET:
		if (!strs(op, S_SS_N) || op->nint < I_SS_N || !json_or_absent(op, S_SS_META))
			return PC_EINVAL;
		p->stmt = P_SESSION_SET;
		p_str(p, op, S_SS_KEY);
		p_str(p, op, S_SS_META);
		p_int(p, op->i[I_SS_EPOCH]);
		return 0;
	case PC_STORE_REQ_PROBE:
		p->stmt = P_PROBE;
		return 0;
	case PC_STORE_REQ_NODE_BEAT:
		if (!strs(op, S_NB_N) || op->nint < I_NB_N || op->i[I_NB_LEASE] < 0 || !op->s[S_NB_OWNER])
			return PC_EINVAL;
		p->stmt = P_NODE_BEAT;
		p_str(p, op, S_NB_ID);
		p_str(p, op, S_NB_URL);
		p_str(p, op, S_NB_OWNER);
		p_int(p, op->i[I_NB_LEASE]);
		p_cstr(p, op->i[I_NB_FRESH] ? "t" : "f");
		return 0;
	default: return PC_EINVAL;
	}
}

/* ---- a write's answer ---- */

static int code_of(const char *rc)
{
	static const struct {
		const char *name;
		int code;
	} codes[] = {
		{"fenced", PC_STORE_EFENCED}, {"conflict", PC_STORE_ECONFLICT}, {"notfound", PC_ENOTFOUND},
		{"exists", PC_EEXIST},        {"busy", PC_EBUSY},                {"invalid", PC_EINVAL},
		{"state", PC_ESTATE},
	};
	for (size_t k = 0; k < sizeof(codes) / sizeof(*codes); k++)
		if (strcmp(rc, codes[k].name) == 0)
			return codes[k].code;
	return PC_STORE_EIO;
}

/* A beat's answer: pincer_res has one number, so pincer_node_beat puts
 * the beat's time in n and the node's started_ms, as text, in id. */
static void beat_res(pc_store_reply_t *res, int64_t n)
{
	res->ended_ms = n;
	res->started_ms = strtoll(res->id, NULL, 10);
	res->id[0] = 0;
}

/* A pincer_res row (rc, n, id, status, created, mismatch) into op->res. */
static void take_row(const PGresult *r, pc__store_op_t *op)
{
	pc_store_reply_t res = {0};
	if (PQntuples(r) != 1 || PQnfields(r) != 6) {
		op->res = (pc_store_reply_t){.rc = PC_STORE_EIO};
		return;
	}
	if (!PQgetisnull(r, 0, 2))
		snprintf(res.id, sizeof(res.id), "%s", PQgetvalue(r, 0, 2));
	if (!PQgetisnull(r, 0, 0)) {
		/* a refusal may name why (a lease's holder); nothing else stands */
		res.rc = code_of(PQgetvalue(r, 0, 0));
		op->res = res;
		return;
	}
	int64_t n = PQgetisnull(r, 0, 1) ? 0 : strtoll(PQgetvalue(r, 0, 1), NULL, 10);
	if (op->kind == PC_STORE_REQ_LEASE_ACQUIRE)
		res.epoch = n;
	else if (op->kind == PC_STORE_REQ_NODE_BEAT)
		beat_res(&res, n);
	else
		res.seq = n;
	if (!PQgetisnull(r, 0, 3))
		res.status = pc__store_status_from_name(PQgetvalue(r, 0, 3));
	if (PQgetvalue(r, 0, 4)[0] == 't')
		res.flags |= PC_STORE_CREATED;
	if (PQgetvalue(r, 0, 5)[0] == 't')
		res.flags |= PC_STORE_MISMATCH;
	op->res = res;
}

/* ---- the writer connection ---- */

static void writer_down(pc__pg_be_t *be)
{
	PQfinish(be->w);
	be->w = NULL;
}

/* Prepares the writer's statements in one round trip and leaves the
 * connection in pipeline mode. */
static int writer_prepare(pc__pg_be_t *be, PGconn *c)
{
	if (!PQenterPipelineMode(c))
		return PC_STORE_EIO;
	for (int k = 0; k < P_N; k++)
		if (!PQsendPrepare(c, stmts[k].name, stmts[k].sql, stmts[k].nparams, NULL))
			return PC_STORE_EUNAVAIL;
	if (!PQpipelineSync(c))
		return PC_STORE_EUNAVAIL;
	int rc = 0;
	for (int k = 0; k <= P_N; k++) {
		PGresult *r = NULL;
		int wrc = pc__pg_next(c, pc__pg_wait_ms(be), &r);
		if (wrc != 0)
			return wrc;
		ExecStatusType st = PQresultStatus(r);
		if (k < P_N && st != PGRES_COMMAND_OK && rc == 0)
			rc = pc__pg_code(r, c);
		if (k == P_N && st != PGRES_PIPELINE_SYNC && rc == 0)
			rc = PC_STORE_EIO;
		PQclear(r);
		if (k < P_N) { /* the NULL that ends a query's results */
			wrc = pc__pg_next(c, pc__pg_wait_ms(be), &r);
			PQclear(r);
			if (wrc != 0)
				return wrc;
		}
	}
	return rc;
}

/* A writer connection, made now unless the last attempt failed less than
 * the backoff ago: then the write fails at once, with why. */
static int writer_up(pc__pg_be_t *be)
{
	/* found dead now, the batch goes on a new connection instead of into
	 * the old one with its outcome unknown */
	if (be->w && !pc__pg_idle_alive(be->w))
		writer_down(be);
	if (be->w)
		return 0;
	int64_t now = pc__clock_mono_ms();
	if (now < be->retry_ms)
		return be->down_rc;
	PGconn *c = NULL;
	int rc = pc__pg_connect(be, "writer", &c);
	if (rc == 0)
		rc = writer_prepare(be, c);
	if (rc != 0) {
		PQfinish(c);
		be->down_rc = rc;
		be->retry_ms = pc__clock_mono_ms() + be->backoff_ms;
		be->backoff_ms = be->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : be->backoff_ms * 2;
		return rc;
	}
	be->backoff_ms = BACKOFF_MIN_MS;
	be->retry_ms = 0;
	be->w = c;
	return 0;
}

/* ---- a unit: one transaction on the pipeline ---- */

typedef enum { UNIT_MORE, UNIT_COMMITTED, UNIT_FAILED, UNIT_LOST } unit_end_t;

/* The statement whose answer a unit reads next. */
enum { AT_BEGIN, AT_XID, AT_OPS, AT_TRIM, AT_COMMIT, AT_SYNC, AT_END };

typedef struct unit {
	pc__store_op_t *first, *end; /* its ops: [first, end) */
	bool *sent;                  /* per op of the batch, by position */
	size_t base;                 /* first's position */
	bool trim;                   /* audit rows were added: trim before COMMIT */
	char xid[32];                /* the transaction's id, once read */
	int rc;                      /* UNIT_FAILED: the failing statement's code */
	/* reading, resumable (a batch polled on an I/O loop reads what has
	 * come and goes on when more does) */
	int at;                      /* AT_* */
	pc__store_op_t *op;          /* AT_OPS: the op answered next */
	size_t k;                    /* its position */
	bool need_null;              /* a result came; the NULL ending it not yet */
	bool committed;              /* COMMIT answered COMMIT */
	bool conn_bad;               /* the connection failed after the outcome was known */
} unit_t;

static bool send_stmt(PGconn *c, int stmt, const params_t *p)
{
	return PQsendQueryPrepared(c, stmts[stmt].name, p ? p->n : 0, p ? p->v : NULL, p ? p->len : NULL, NULL,
				   0) == 1;
}

/* Sends the unit's statements and a sync. false: the connection broke. */
static bool unit_send(pc__pg_be_t *be, unit_t *u)
{
	PGconn *c = be->w;
	/* the server flushes the transaction's id at once (it would hold its
	 * output until the sync point): a connection lost before COMMIT
	 * arrives leaves the id with us, and the outcome decidable */
	bool ok = send_stmt(c, P_BEGIN, NULL) && send_stmt(c, P_XID, NULL) && PQsendFlushRequest(c) == 1;
	size_t k = u->base;
	bool early = false;
	for (pc__store_op_t *op = u->first; op != u->end && ok; op = op->next, k++) {
		if (!u->sent[k])
			continue;
		params_t p;
		int rc = params_of(&be->cfg, op, &p);
		ok = rc == 0 && send_stmt(c, p.stmt, &p);
		free(p.json);
		if (rc != 0) { /* malformed (or no memory): it fails alone */
			u->sent[k] = false;
			op->res = (pc_store_reply_t){.rc = rc};
			ok = true;
		}
		early = early || (u->sent[k] && pc__store_wants_early(op));
	}
	if (ok && u->trim) {
		params_t p = {0};
		p_int(&p, be->cfg.audit_max);
		p_int(&p, be->cfg.audit_days);
		ok = send_stmt(c, P_AUDIT_TRIM, &p);
	}
	/* a provisional answer is due when its row's statement ran: the
	 * server flushes the rows' results before it waits for the commit */
	if (ok && early)
		ok = PQsendFlushRequest(c) == 1;
	return ok && send_stmt(c, P_COMMIT, NULL) && PQpipelineSync(c) == 1;
}

/* The next query's result and the NULL after it. 0, or the wait failed
 * (timeout, lost connection). */
static int query_result(pc__pg_be_t *be, PGresult **out)
{
	int rc = pc__pg_next(be->w, pc__pg_wait_ms(be), out);
	if (rc == 0 && !*out)
		rc = PC_STORE_EUNAVAIL; /* a result was due */
	if (rc == 0 && PQresultStatus(*out) != PGRES_PIPELINE_SYNC) {
		PGresult *end = NULL;
		rc = pc__pg_next(be->w, pc__pg_wait_ms(be), &end);
		PQclear(end);
	}
	if (rc != 0) {
		PQclear(*out);
		*out = NULL;
	}
	return rc;
}

/* One statement's result: true when it ran (its status is `want`); else
 * records the first failure in u->rc. */
static bool result_ok(pc__pg_be_t *be, unit_t *u, PGresult *r, ExecStatusType want)
{
	ExecStatusType st = PQresultStatus(r);
	if (st == want)
		return true;
	if (u->rc == 0)
		u->rc = st == PGRES_PIPELINE_ABORTED ? PC_STORE_EIO : pc__pg_code(r, be->w);
	return false;
}

/* After a statement failed, the sync point does not end a transaction
 * opened with BEGIN: it stays open, refusing everything, until ROLLBACK. */
static void unit_abandon(pc__pg_be_t *be)
{
	PGresult *r = NULL;
	bool ok = send_stmt(be->w, P_ROLLBACK, NULL) && PQpipelineSync(be->w) == 1 && query_result(be, &r) == 0 &&
		  PQresultStatus(r) == PGRES_COMMAND_OK;
	PQclear(r);
	r = NULL;
	ok = ok && query_result(be, &r) == 0 && PQresultStatus(r) == PGRES_PIPELINE_SYNC;
	PQclear(r);
	if (!ok)
		writer_down(be);
}

/* The next answer of the unit's pipeline, waiting at most wait_ms (0:
 * only what has come): 1 with *out, 0 when it has not come yet (wait_ms
 * 0 only), or a negative code when the connection failed or the wait ran
 * out. */
static int next_answer(pc__pg_be_t *be, unit_t *u, int wait_ms, PGresult **out)
{
	*out = NULL;
	PGresult *r = NULL;
	int rc = 0;
	if (u->need_null) {
		rc = pc__pg_next(be->w, wait_ms, &r);
		if (rc == PC_ETIMEDOUT && wait_ms == 0)
			return 0;
		if (rc != 0 || r) {
			PQclear(r);
			return rc ? rc : PC_STORE_EUNAVAIL;
		}
		u->need_null = false;
	}
	rc = pc__pg_next(be->w, wait_ms, &r);
	if (rc == PC_ETIMEDOUT && wait_ms == 0)
		return 0;
	if (rc != 0 || !r) /* an answer was due */
		return rc ? rc : PC_STORE_EUNAVAIL;
	u->need_null = PQresultStatus(r) != PGRES_PIPELINE_SYNC;
	*out = r;
	return 1;
}

/* The next op from u->op on that was sent, or on to the statements after
 * the ops. */
static void seek_op(unit_t *u)
{
	while (u->op != u->end && !u->sent[u->k]) {
		u->op = u->op->next;
		u->k++;
	}
	if (u->op == u->end)
		u->at = u->trim ? AT_TRIM : AT_COMMIT;
}

/* Reads the unit's answers into its ops, as far as they have come
 * (wait_ms 0) or to the end (an op not answered keeps PC_STORE_EUNKNOWN). */
static unit_end_t unit_step(pc__pg_be_t *be, unit_t *u, int wait_ms)
{
	while (u->at != AT_END) {
		PGresult *r = NULL;
		int got = next_answer(be, u, wait_ms, &r);
		if (got == 0)
			return UNIT_MORE;
		if (got < 0) {
			if (u->at != AT_SYNC)
				return UNIT_LOST;
			/* the sync point's answer: the outcome is known already, the
			 * connection is for the next batch to replace */
			u->conn_bad = true;
			break;
		}
		switch (u->at) {
		case AT_BEGIN:
			result_ok(be, u, r, PGRES_COMMAND_OK);
			u->at = AT_XID;
			break;
		case AT_XID:
			if (result_ok(be, u, r, PGRES_TUPLES_OK) && PQntuples(r) == 1)
				snprintf(u->xid, sizeof(u->xid), "%s", PQgetvalue(r, 0, 0));
			u->at = AT_OPS;
			u->op = u->first;
			u->k = u->base;
			seek_op(u);
			break;
		case AT_OPS:
			if (result_ok(be, u, r, PGRES_TUPLES_OK)) {
				take_row(r, u->op);
				pc__store_tell_early(u->op);
			} else if (PQresultStatus(r) != PGRES_PIPELINE_ABORTED)
				u->op->res = (pc_store_reply_t){.rc = pc__pg_code(r, be->w)};
			u->op = u->op->next;
			u->k++;
			seek_op(u);
			break;
		case AT_TRIM:
			result_ok(be, u, r, PGRES_TUPLES_OK);
			u->at = AT_COMMIT;
			break;
		case AT_COMMIT:
			/* COMMIT of an aborted transaction answers "ROLLBACK" */
			u->committed = result_ok(be, u, r, PGRES_COMMAND_OK) && strcmp(PQcmdStatus(r), "COMMIT") == 0;
			u->at = AT_SYNC;
			break;
		default:
			u->conn_bad = PQresultStatus(r) != PGRES_PIPELINE_SYNC;
			u->at = AT_END;
			break;
		}
		PQclear(r);
	}
	if (u->committed)
		return UNIT_COMMITTED;
	if (u->rc == 0)
		u->rc = PC_STORE_EIO;
	return UNIT_FAILED;
}

/* What the writer's connection needs after a unit ended: replaced when
 * it failed, rolled back when the transaction failed in it. */
static void unit_settle(pc__pg_be_t *be, unit_t *u, unit_end_t end)
{
	if (u->conn_bad)
		writer_down(be);
	if (end == UNIT_FAILED && be->w)
		unit_abandon(be);
}

/* After a lost answer: did transaction `xid` commit? 1 yes, 0 no, or
 * PC_STORE_EUNKNOWN when that cannot be learnt in time. Asked on a
 * connection of its own: the old backend may still hold the transaction
 * until it notices its client is gone, so "in progress" is asked again. */
static int xact_committed(pc__pg_be_t *be, const char *xid)
{
	if (!xid[0])
		return PC_STORE_EUNKNOWN;
	int64_t deadline = pc__clock_mono_ms() + pc__pg_wait_ms(be);
	int out = PC_STORE_EUNKNOWN;
	do {
		PGconn *c = NULL;
		if (pc__pg_connect(be, "resolver", &c) == 0) {
			const char *v[1] = {xid};
			PGresult *r = PQexecParams(c, "SELECT pg_xact_status($1::xid8)", 1, NULL, v, NULL, NULL, 0);
			if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1) {
				const char *st = PQgetisnull(r, 0, 0) ? "" : PQgetvalue(r, 0, 0);
				if (strcmp(st, "committed") == 0)
					out = 1;
				else if (strcmp(st, "aborted") == 0)
					out = 0;
				else if (strcmp(st, "in progress") != 0)
					deadline = 0; /* too old or unknown: it will not tell */
			}
			PQclear(r);
			PQfinish(c);
		}
		if (out == PC_STORE_EUNKNOWN && pc__clock_mono_ms() < deadline)
			nanosleep(&(struct timespec){0, 50 * 1000000L}, NULL);
	} while (out == PC_STORE_EUNKNOWN && pc__clock_mono_ms() < deadline);
	return out;
}

/* The connection died with the unit's answers on the way: the writer
 * reconnects later; the unit's ops learn what happened. Returns 0 when
 * each op has its outcome, or PC_STORE_EUNAVAIL when the transaction
 * certainly did not commit (nothing of it was kept). */
static int unit_lost(pc__pg_be_t *be, unit_t *u)
{
	writer_down(be);
	int committed = xact_committed(be, u->xid);
	if (committed == 0)
		return PC_STORE_EUNAVAIL;
	size_t k = u->base;
	for (pc__store_op_t *op = u->first; op != u->end; op = op->next, k++)
		if (u->sent[k] && committed != 1)
			op->res = (pc_store_reply_t){.rc = PC_STORE_EUNKNOWN};
	/* committed: the answered ops stand; the unanswered keep EUNKNOWN */
	return 0;
}

/* A unit about to be sent: its ops' outcomes unknown until answered, its
 * reading at the start. */
static void unit_begin(unit_t *u)
{
	size_t k = u->base;
	u->trim = false;
	u->xid[0] = 0;
	u->rc = 0;
	u->at = AT_BEGIN;
	u->need_null = u->committed = u->conn_bad = false;
	for (pc__store_op_t *op = u->first; op != u->end; op = op->next, k++) {
		if (!u->sent[k])
			continue;
		op->res = (pc_store_reply_t){.rc = PC_STORE_EUNKNOWN};
		u->trim |= op->kind == PC_STORE_REQ_AUDIT;
	}
}

/* A unit that ended as `end`: 0 when each op has its outcome in op->res,
 * or a negative code when nothing was kept. */
static int unit_outcome(pc__pg_be_t *be, unit_t *u, unit_end_t end)
{
	unit_settle(be, u, end);
	switch (end) {
	case UNIT_COMMITTED: return 0;
	case UNIT_FAILED: return u->rc;
	default: return unit_lost(be, u);
	}
}

/* Runs ops [first, end) as one transaction: 0 when each op has its
 * outcome in op->res, or a negative code when nothing was kept. */
static int unit_run(pc__pg_be_t *be, unit_t *u)
{
	int rc = writer_up(be);
	if (rc != 0)
		return rc;
	unit_begin(u);
	/* libpq sends in order: a send that failed did not deliver the
	 * COMMIT and the sync point after it, so nothing can have committed */
	if (!unit_send(be, u)) {
		writer_down(be);
		return PC_STORE_EUNAVAIL;
	}
	return unit_outcome(be, u, unit_step(be, u, pc__pg_wait_ms(be)));
}

/* Which of the batch's ops go to the server (NULL on ENOMEM), and how
 * many: all but syncs, which ask only for the commit. A malformed op is
 * found when its statement is built (unit_send) and fails alone there. */
static bool *batch_check(pc__store_op_t *ops, size_t *live)
{
	size_t n = 0, k = 0;
	for (pc__store_op_t *op = ops; op; op = op->next)
		n++;
	bool *sent = calloc(n ? n : 1, sizeof(*sent));
	*live = 0;
	for (pc__store_op_t *op = ops; op && sent; op = op->next, k++) {
		op->res = (pc_store_reply_t){0};
		sent[k] = op->kind != PC_STORE_REQ_SYNC;
		*live += sent[k];
	}
	return sent;
}

/* ---- a batch polled on an I/O loop ---- */

/* A batch under way on the writer's connection with no thread of its own:
 * its unit, whom to tell, and, when it could not end on the loop, how far
 * it came (`end`), for the blocking path to finish. */
typedef struct pg_async {
	unit_t u;
	void (*done)(void *arg, int rc, uint64_t cpu_ns);
	void *arg;
	uint64_t cpu_ns; /* what sending and reading it cost, on any thread */
	bool flushing; /* the pipeline is not all in the socket yet */
	unit_end_t end;
} pg_async_t;

static void async_free(pg_async_t *a)
{
	free(a->u.sent);
	free(a);
}

/* The loop thread: the connection is ready, or the deadline passed. */
static void async_ready(pc_io_fd_t *w, void *arg, uint32_t events)
{
	pc__pg_be_t *be = arg;
	pg_async_t *a = be->async;
	uint64_t cpu0 = pc__clock_thread_cpu_ns();
	unit_end_t end = UNIT_MORE;
	/* a deadline or the I/O layer's shutdown hands the reading over to
	 * the blocking path, which waits result by result */
	bool give_up = events == 0 || (events & PC_IO_FD_STOPPED);
	if (!give_up && a->flushing) {
		int fl = PQflush(be->w);
		end = fl < 0 ? UNIT_LOST : UNIT_MORE;
		a->flushing = fl == 1;
	}
	if (!give_up && end == UNIT_MORE)
		end = unit_step(be, &a->u, 0);
	if (!give_up && end == UNIT_MORE &&
	    pc_io_fd_want(w, PC_IO_FD_READ | (a->flushing ? PC_IO_FD_WRITE : 0)) == 0) {
		a->cpu_ns += pc__clock_thread_cpu_ns() - cpu0;
		return;
	}
	pc_io_fd_stop(w);
	(void)PQsetnonblocking(be->w, 0); /* a failure shows in the next call */
	if (end == UNIT_COMMITTED)
		unit_settle(be, &a->u, end);
	uint64_t cpu = a->cpu_ns + (pc__clock_thread_cpu_ns() - cpu0);
	void (*done)(void *, int, uint64_t) = a->done;
	void *darg = a->arg;
	if (end == UNIT_COMMITTED) {
		be->async = NULL;
		async_free(a);
		done(darg, 0, cpu);
		return;
	}
	a->end = end;
	done(darg, PC__STORE_TO_POOL, cpu);
}

/* Sends a batch and leaves its answers to an I/O loop: the common case of
 * a healthy connection. Connecting, a connection found dead and whatever
 * follows a failure stay on the blocking path (PC__STORE_TO_POOL). */
static int pg_start(void *p, pc__store_op_t *ops, void (*done)(void *arg, int rc, uint64_t cpu_ns), void *arg)
{
	pc__pg_be_t *be = p;
	uint64_t cpu0 = pc__clock_thread_cpu_ns();
	if (!be->cfg.io || !be->w || !pc__pg_idle_alive(be->w))
		return PC__STORE_TO_POOL;
	size_t live = 0;
	pg_async_t *a = calloc(1, sizeof(*a));
	bool *sent = a ? batch_check(ops, &live) : NULL;
	if (!sent || live == 0) {
		free(sent);
		free(a);
		return PC__STORE_TO_POOL;
	}
	a->u = (unit_t){.first = ops, .sent = sent};
	unit_begin(&a->u);
	int fl = -1;
	if (PQsetnonblocking(be->w, 1) == 0 && unit_send(be, &a->u))
		fl = PQflush(be->w);
	if (fl < 0) { /* nothing can have committed: the blocking path starts over */
		writer_down(be);
		async_free(a);
		return PC__STORE_TO_POOL;
	}
	*a = (pg_async_t){.u = a->u, .done = done, .arg = arg, .flushing = fl == 1, .end = UNIT_MORE,
			  .cpu_ns = pc__clock_thread_cpu_ns() - cpu0};
	be->async = a;
	if (pc_io_fd_start(be->cfg.io, PQsocket(be->w), PC_IO_FD_READ | (a->flushing ? PC_IO_FD_WRITE : 0),
			   (uint32_t)pc__pg_wait_ms(be), async_ready, be, NULL) != 0) {
		(void)PQsetnonblocking(be->w, 0);
		return PC__STORE_TO_POOL; /* sent, and read on the blocking path */
	}
	return 0;
}

/* The blocking path's part of a batch the loop began: reading on, rolling
 * back, or learning what a lost commit did. */
static int async_finish(pc__pg_be_t *be)
{
	pg_async_t *a = be->async;
	be->async = NULL;
	unit_end_t end = a->end;
	if (end == UNIT_MORE)
		end = unit_step(be, &a->u, pc__pg_wait_ms(be));
	int rc = unit_outcome(be, &a->u, end);
	async_free(a);
	return rc;
}

static int pg_batch(void *p, pc__store_op_t *ops, bool guarded)
{
	pc__pg_be_t *be = p;
	if (be->async)
		return async_finish(be);
	size_t live = 0;
	bool *sent = batch_check(ops, &live);
	if (!sent)
		return PC_ENOMEM;
	int rc = 0;
	if (live == 0) {
		free(sent);
		return 0;
	}
	if (!guarded) {
		unit_t u = {.first = ops, .end = NULL, .sent = sent, .base = 0};
		rc = unit_run(be, &u);
	} else {
		/* each write a transaction of its own: one that fails does not
		 * take the others with it */
		size_t k = 0;
		for (pc__store_op_t *op = ops; op; op = op->next, k++) {
			if (!sent[k])
				continue;
			unit_t u = {.first = op, .end = op->next, .sent = sent, .base = k};
			int orc = unit_run(be, &u);
			if (orc != 0)
				op->res = (pc_store_reply_t){.rc = orc};
		}
	}
	free(sent);
	return rc;
}

/* ---- open / close ---- */

static void pg_close(void *p)
{
	pc__pg_be_t *be = p;
	if (!be)
		return;
	pc__pg_readers_free(be);
	if (be->async) /* begun, and dropped with the runtime stopping */
		async_free(be->async);
	writer_down(be);
	pthread_mutex_destroy(&be->lock);
	free(be->url);
	free(be);
}

static int pg_open(const char *url, const pc_store_config_t *cfg, void **out)
{
	*out = NULL;
	pc__pg_be_t *be = calloc(1, sizeof(*be));
	if (!be)
		return PC_ENOMEM;
	if (pthread_mutex_init(&be->lock, NULL) != 0) {
		free(be);
		return PC_ESYS;
	}
	be->cfg = *cfg;
	be->backoff_ms = BACKOFF_MIN_MS;
	be->url = strdup(url);
	int rc = be->url ? 0 : PC_ENOMEM;
	/* the schema first, on a plain connection; then the writer */
	PGconn *c = NULL;
	if (rc == 0)
		rc = pc__pg_connect(be, "migrate", &c);
	if (rc == 0)
		rc = pc__pg_migrate(c);
	PQfinish(c);
	if (rc == 0)
		rc = writer_up(be);
	if (rc != 0) {
		pg_close(be);
		return rc;
	}
	*out = be;
	return 0;
}

const pc__store_backend_t pc__store_pg = {
	.name = "postgresql",
	.open = pg_open,
	.close = pg_close,
	.batch = pg_batch,
	.start = pg_start,
	.reads = &pc__pg_reads,
};
