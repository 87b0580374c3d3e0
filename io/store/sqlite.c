/*
 * The SQLite backend's writer: the schema and its migrations, the write
 * operations of a batch, and opening and closing the store. One writer
 * connection, used by one blocking thread at a time (the store actor keeps
 * one batch in flight); the readers, a pool of connections opened on
 * demand, are sqlite_read.c's, and WAL mode lets them see the last
 * committed state while a batch is being written. Statements are prepared
 * once per connection and reused (sqlite_stmt.c).
 *
 * Durability: journal_mode=WAL with synchronous=FULL, so every COMMIT
 * fsyncs the WAL before it returns (and SQLite fsyncs the directory when
 * it creates the WAL file). The store answers a write only after COMMIT
 * returned SQLITE_OK.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sqlite_internal.h"
#include "wal_vfs.h"
#include "runtime/clock.h"

#define APP_ID 0x50434e52 /* "PCNR": marks a Pincer store */
#define SCHEMA_VERSION 12
#define PC__XSTR(x) #x
#define PC__STR(x) PC__XSTR(x)

/* Migrations: entry v takes a database at version v-1 to version v. Each
 * runs in its own transaction with the version bump. */
static const char *const migrations[SCHEMA_VERSION + 1] = {
	NULL,
	"CREATE TABLE sessions("
	" key TEXT PRIMARY KEY,"
	" id TEXT NOT NULL,"
	" agent TEXT,"
	" created_ms INTEGER NOT NULL,"
	" updated_ms INTEGER NOT NULL,"
	" metadata TEXT CHECK (metadata IS NULL OR json_valid(metadata)),"
	" last_seq INTEGER NOT NULL DEFAULT 0,"
	" lease_owner TEXT,"
	" lease_epoch INTEGER NOT NULL DEFAULT 0,"
	" lease_expires_ms INTEGER NOT NULL DEFAULT 0);"
	"CREATE TABLE messages("
	" session_key TEXT NOT NULL,"
	" seq INTEGER NOT NULL,"
	" role TEXT NOT NULL,"
	" content TEXT NOT NULL CHECK (json_valid(content)),"
	" tool_call_ids TEXT CHECK (tool_call_ids IS NULL OR json_valid(tool_call_ids)),"
	" run_id TEXT,"
	" created_ms INTEGER NOT NULL,"
	" UNIQUE (session_key, seq));"
	"CREATE TABLE runs("
	" run_id TEXT PRIMARY KEY,"
	" session_key TEXT NOT NULL,"
	" idem_key TEXT UNIQUE,"
	" status TEXT NOT NULL,"
	" started_ms INTEGER NOT NULL,"
	" ended_ms INTEGER,"
	" error_code TEXT,"
	" usage TEXT CHECK (usage IS NULL OR json_valid(usage)));"
	"CREATE INDEX runs_session ON runs(session_key, started_ms);"
	"CREATE TABLE attempts("
	" run_id TEXT NOT NULL,"
	" idx INTEGER NOT NULL,"
	" provider TEXT, model TEXT, profile TEXT, reason TEXT,"
	" status TEXT NOT NULL,"
	" code TEXT,"
	" duration_ms INTEGER NOT NULL,"
	" created_ms INTEGER NOT NULL,"
	" PRIMARY KEY (run_id, idx));"
	"CREATE TABLE audit("
	" id INTEGER PRIMARY KEY AUTOINCREMENT,"
	" ts_ms INTEGER NOT NULL,"
	" kind TEXT NOT NULL CHECK (kind IN ('agent_run', 'tool_action')),"
	" status TEXT NOT NULL CHECK (status IN ('started', 'succeeded', 'failed', 'cancelled',"
	"  'timed_out', 'blocked', 'unknown')),"
	" run_id TEXT NOT NULL,"
	" session_key TEXT,"
	" tool_name TEXT,"
	" tool_call_id TEXT,"
	" code TEXT,"
	" CHECK (status IN ('started', 'succeeded') OR coalesce(code, '') LIKE 'run\\_%' ESCAPE '\\'"
	"  OR coalesce(code, '') LIKE 'tool\\_%' ESCAPE '\\'));"
	"CREATE INDEX audit_ts ON audit(ts_ms);",
	/* 2: message content, tool-call ids and run usage are validated before
	 * they reach the writer (pc_store_req_*), not by CHECK json_valid():
	 * SQLite parsed every message again on the single writer thread. */
	"CREATE TABLE messages2("
	" session_key TEXT NOT NULL,"
	" seq INTEGER NOT NULL,"
	" role TEXT NOT NULL,"
	" content TEXT NOT NULL,"
	" tool_call_ids TEXT,"
	" run_id TEXT,"
	" created_ms INTEGER NOT NULL,"
	" UNIQUE (session_key, seq));"
	"INSERT INTO messages2 SELECT session_key, seq, role, content, tool_call_ids, run_id, created_ms"
	" FROM messages;"
	"DROP TABLE messages;"
	"ALTER TABLE messages2 RENAME TO messages;"
	"CREATE TABLE runs2("
	" run_id TEXT PRIMARY KEY,"
	" session_key TEXT NOT NULL,"
	" idem_key TEXT UNIQUE,"
	" status TEXT NOT NULL,"
	" started_ms INTEGER NOT NULL,"
	" ended_ms INTEGER,"
	" error_code TEXT,"
	" usage TEXT);"
	"INSERT INTO runs2 SELECT run_id, session_key, idem_key, status, started_ms, ended_ms, error_code, usage"
	" FROM runs;"
	"DROP TABLE runs;"
	"ALTER TABLE runs2 RENAME TO runs;"
	"CREATE INDEX runs_session ON runs(session_key, started_ms);",
	/* 3: a session's run count and latest run live on its row, kept by
	 * run_begin. The runs_session index they came from put one more
	 * scattered page (one per busy session) into every commit. */
	"ALTER TABLE sessions ADD COLUMN run_count INTEGER NOT NULL DEFAULT 0;"
	"ALTER TABLE sessions ADD COLUMN last_run_id TEXT;"
	"UPDATE sessions SET"
	" run_count = (SELECT count(*) FROM runs r WHERE r.session_key = sessions.key),"
	" last_run_id = (SELECT r.run_id FROM runs r WHERE r.session_key = sessions.key"
	"  ORDER BY r.started_ms DESC, r.rowid DESC LIMIT 1);"
	"DROP INDEX runs_session;",
	/* 4: messages name their session by a number, not the key: an index
	 * entry a third the size, and sessions made one after another sit
	 * together in it. The number is an INTEGER PRIMARY KEY, which VACUUM
	 * keeps (a bare rowid it may renumber). */
	"CREATE TABLE sessions4("
	" sid INTEGER PRIMARY KEY,"
	" key TEXT NOT NULL UNIQUE,"
	" id TEXT NOT NULL,"
	" agent TEXT,"
	" created_ms INTEGER NOT NULL,"
	" updated_ms INTEGER NOT NULL,"
	" metadata TEXT CHECK (metadata IS NULL OR json_valid(metadata)),"
	" last_seq INTEGER NOT NULL DEFAULT 0,"
	" lease_owner TEXT,"
	" lease_epoch INTEGER NOT NULL DEFAULT 0,"
	" lease_expires_ms INTEGER NOT NULL DEFAULT 0,"
	" run_count INTEGER NOT NULL DEFAULT 0,"
	" last_run_id TEXT);"
	"INSERT INTO sessions4(sid, key, id, agent, created_ms, updated_ms, metadata, last_seq, lease_owner,"
	" lease_epoch, lease_expires_ms, run_count, last_run_id)"
	" SELECT rowid, key, id, agent, created_ms, updated_ms, metadata, last_seq, lease_owner, lease_epoch,"
	" lease_expires_ms, run_count, last_run_id FROM sessions;"
	/* a transcript whose session row is missing keeps its messages */
	"INSERT INTO sessions4(key, id, created_ms, updated_ms, last_seq)"
	" SELECT session_key, lower(hex(randomblob(16))), min(created_ms), max(created_ms), max(seq)"
	" FROM messages WHERE session_key NOT IN (SELECT key FROM sessions4) GROUP BY session_key;"
	"DROP TABLE sessions;"
	"ALTER TABLE sessions4 RENAME TO sessions;"
	"CREATE TABLE messages4("
	" session_id INTEGER NOT NULL,"
	" seq INTEGER NOT NULL,"
	" role TEXT NOT NULL,"
	" content TEXT NOT NULL,"
	" tool_call_ids TEXT,"
	" run_id TEXT,"
	" created_ms INTEGER NOT NULL,"
	" UNIQUE (session_id, seq));"
	"INSERT INTO messages4 SELECT s.sid, m.seq, m.role, m.content, m.tool_call_ids, m.run_id, m.created_ms"
	" FROM messages m JOIN sessions s ON s.key = m.session_key ORDER BY s.sid, m.seq;"
	"DROP TABLE messages;"
	"ALTER TABLE messages4 RENAME TO messages;",
	/* 5: an idempotency key is indexed only when there is one (most runs
	 * have none, and the column's UNIQUE constraint indexed every NULL);
	 * an attempt row lives in its primary key's b-tree alone. Two fewer
	 * b-trees written per run. */
	"CREATE TABLE runs5("
	" run_id TEXT PRIMARY KEY,"
	" session_key TEXT NOT NULL,"
	" idem_key TEXT,"
	" status TEXT NOT NULL,"
	" started_ms INTEGER NOT NULL,"
	" ended_ms INTEGER,"
	" error_code TEXT,"
	" usage TEXT);"
	"INSERT INTO runs5 SELECT run_id, session_key, idem_key, status, started_ms, ended_ms, error_code, usage"
	" FROM runs;"
	"DROP TABLE runs;"
	"ALTER TABLE runs5 RENAME TO runs;"
	"CREATE UNIQUE INDEX runs_idem ON runs(idem_key) WHERE idem_key IS NOT NULL;"
	"CREATE TABLE attempts5("
	" run_id TEXT NOT NULL,"
	" idx INTEGER NOT NULL,"
	" provider TEXT, model TEXT, profile TEXT, reason TEXT,"
	" status TEXT NOT NULL,"
	" code TEXT,"
	" duration_ms INTEGER NOT NULL,"
	" created_ms INTEGER NOT NULL,"
	" PRIMARY KEY (run_id, idx)) WITHOUT ROWID;"
	"INSERT INTO attempts5 SELECT run_id, idx, provider, model, profile, reason, status, code, duration_ms,"
	" created_ms FROM attempts;"
	"DROP TABLE attempts;"
	"ALTER TABLE attempts5 RENAME TO attempts;",
	/* 6: a run knows the process that accepted it and, until it ends,
	 * what running it takes, so a restart finds the runs it must run or
	 * end (runs_open holds only those); an idempotency key is the
	 * session's and remembers what its request asked. */
	"ALTER TABLE runs ADD COLUMN owner TEXT;"
	"ALTER TABLE runs ADD COLUMN prompt TEXT;"
	"ALTER TABLE runs ADD COLUMN fingerprint TEXT;"
	"DROP INDEX runs_idem;"
	"CREATE UNIQUE INDEX runs_idem ON runs(session_key, idem_key) WHERE idem_key IS NOT NULL;"
	"CREATE INDEX runs_open ON runs(status) WHERE status = 'accepted';",
	/* 7: every model call's usage is a row of its own, so a run's or a
	 * session's tokens (and their cost) are exact sums of what the
	 * providers reported, whatever the run's own summary shows. */
	"CREATE TABLE usage("
	" run_id TEXT NOT NULL,"
	" attempt_idx INTEGER NOT NULL,"
	" call_idx INTEGER NOT NULL,"
	" session_key TEXT NOT NULL,"
	" provider TEXT, model TEXT,"
	" input INTEGER NOT NULL, output INTEGER NOT NULL,"
	" cache_read INTEGER NOT NULL, cache_write INTEGER NOT NULL,"
	" total INTEGER NOT NULL,"
	" created_ms INTEGER NOT NULL,"
	" PRIMARY KEY (run_id, attempt_idx, call_idx)) WITHOUT ROWID;"
	"CREATE INDEX usage_session ON usage(session_key, created_ms);",
	/* 8: the devices the gateway paired survive a restart; a device token
	 * is kept as its SHA-256 only, so the file does not hand it out. */
	"CREATE TABLE devices("
	" id TEXT PRIMARY KEY,"
	" public_key TEXT NOT NULL,"
	" token_hash TEXT NOT NULL,"
	" scopes TEXT,"
	" approved_ms INTEGER NOT NULL,"
	" issued_ms INTEGER NOT NULL) WITHOUT ROWID;",
	/* 9: the gateways sharing the store record heartbeats, so each can
	 * tell which others are live (a node's row expires with its lease). */
	"CREATE TABLE nodes("
	" id TEXT PRIMARY KEY,"
	" url TEXT,"
	" started_ms INTEGER NOT NULL,"
	" heartbeat_ms INTEGER NOT NULL,"
	" expires_ms INTEGER NOT NULL) WITHOUT ROWID;",
	/* 10: a node's row names the process beating for it, so that a lease
	 * held while a node is live (PC_STORE_LEASE_NODE) is bound to that
	 * process, and two processes given one node id never share a row. */
	"ALTER TABLE nodes ADD COLUMN owner TEXT;",
	/* 11: a run's end says whether running it again could repeat what a
	 * tool of it did, for whoever reads the run back (another node). */
	"ALTER TABLE runs ADD COLUMN replay_invalid INTEGER NOT NULL DEFAULT 0;",
	/* 12: a listed session names its first open run (the one running, or
	 * next), looked up by session among the open ones */
	"CREATE INDEX runs_open_session ON runs(session_key) WHERE status = 'accepted';",
};

static const char *const wsql[W_N] = {
	[W_SAVE] = "SAVEPOINT op",
	[W_RELEASE] = "RELEASE op",
	[W_ROLLBACK_TO] = "ROLLBACK TO op",
	[W_BEGIN] = "BEGIN IMMEDIATE",
	[W_COMMIT] = "COMMIT",
	[W_ROLLBACK] = "ROLLBACK",
	/* a generated id comes from SQLite's own generator: no system call for
	 * the common case where the row already exists */
	[W_SESS_INSERT] = "INSERT OR IGNORE INTO sessions(key, id, agent, created_ms, updated_ms, metadata)"
			  " VALUES (?1, coalesce(?2, lower(hex(randomblob(16)))), ?3, ?4, ?4, ?5)",
	[W_SESS_ID] = "SELECT id FROM sessions WHERE key = ?1",
	/* read, then write by number: UPDATE ... RETURNING builds an ephemeral
	 * table on every execution and cost several times the pair */
	[W_APP_SEQ] = "SELECT sid, last_seq, lease_epoch FROM sessions WHERE key = ?1",
	[W_APP_SET] = "UPDATE sessions SET last_seq = ?2, updated_ms = ?3 WHERE sid = ?1",
	[W_MSG_INSERT] = "INSERT INTO messages(session_id, seq, role, content, tool_call_ids, run_id, created_ms)"
			 " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
	[W_SESS_STATE] = "SELECT last_seq, lease_epoch, lease_owner, lease_expires_ms, sid FROM sessions WHERE key = ?1",
	[W_MSG_DELETE_FROM] = "DELETE FROM messages WHERE session_id = ?1 AND seq >= ?2",
	[W_SESS_SET_LAST] = "UPDATE sessions SET last_seq = ?2, updated_ms = ?3 WHERE key = ?1",
	[W_RUN_BY_IDEM] = "SELECT run_id, status, started_ms, fingerprint FROM runs"
			  " WHERE session_key = ?1 AND idem_key = ?2",
	[W_RUN_FORGET_IDEM] = "UPDATE runs SET idem_key = NULL WHERE run_id = ?1",
	[W_RUN_INSERT] = "INSERT INTO runs(run_id, session_key, idem_key, status, started_ms, fingerprint, owner, prompt)"
			 " VALUES (?1, ?2, ?3, 'accepted', ?4, ?5, ?6, ?7)",
	[W_RUN_ADOPT] = "UPDATE runs SET owner = ?3 WHERE run_id = ?1 AND status = 'accepted' AND owner IS ?2",
	/* a run's session has its row from the run's acceptance on */
	[W_RUN_SESSION] = "INSERT INTO sessions(key, id, created_ms, updated_ms, run_count, last_run_id)"
			  " VALUES (?1, lower(hex(randomblob(16))), ?3, ?3, 1, ?2)"
			  " ON CONFLICT(key) DO UPDATE SET run_count = run_count + 1, last_run_id = excluded.last_run_id",
	/* what running it took is no longer needed once it ended; the first
	 * end stands (a node that lost the run to another ends it late) */
	[W_RUN_END] = "UPDATE runs SET status = ?2, ended_ms = ?3, error_code = ?4, usage = ?5, replay_invalid = ?6,"
		      " prompt = NULL WHERE run_id = ?1 AND status = 'accepted'",
	[W_RUN_EXISTS] = "SELECT 1 FROM runs WHERE run_id = ?1",
	[W_ATTEMPT] = "INSERT OR REPLACE INTO attempts(run_id, idx, provider, model, profile, reason, status, code,"
		      " duration_ms, created_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
	[W_AUDIT] = "INSERT INTO audit(ts_ms, kind, status, run_id, session_key, tool_name, tool_call_id, code)"
		    " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
	[W_AUDIT_TRIM_N] = "DELETE FROM audit WHERE id <= (SELECT max(id) FROM audit) - ?1",
	[W_AUDIT_TRIM_T] = "DELETE FROM audit WHERE ts_ms < ?1",
	[W_SESS_SET] = "UPDATE sessions SET metadata = ?2, updated_ms = ?3"
		       " WHERE key = ?1 AND (?4 = 0 OR lease_epoch = ?4)",
	[W_LEASE_SET] = "UPDATE sessions SET lease_owner = ?2, lease_epoch = ?3, lease_expires_ms = ?4 WHERE key = ?1",
	/* a cached session's changes (session_cache.h); ?3 0: not appended to */
	[W_SESS_FLUSH] = "UPDATE sessions SET last_seq = ?2,"
			 " updated_ms = CASE WHEN ?3 > 0 THEN ?3 ELSE updated_ms END,"
			 " run_count = run_count + ?4, last_run_id = coalesce(?5, last_run_id) WHERE sid = ?1",
	[W_DATA_VERSION] = "PRAGMA data_version",
	/* writes the header page, changing nothing: a probe of the file */
	[W_PROBE] = "PRAGMA user_version = " PC__STR(SCHEMA_VERSION),
	[W_USAGE] = "INSERT OR REPLACE INTO usage(run_id, attempt_idx, call_idx, session_key, provider, model, input,"
		    " output, cache_read, cache_write, total, created_ms)"
		    " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
	[W_DEVICE_PUT] = "INSERT OR REPLACE INTO devices(id, public_key, token_hash, scopes, approved_ms, issued_ms)"
			 " VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
	[W_DEVICE_UPDATE] = "UPDATE devices SET public_key = ?2, token_hash = ?3, scopes = ?4, approved_ms = ?5,"
			    " issued_ms = ?6 WHERE id = ?1",
	[W_DEVICE_DELETE] = "DELETE FROM devices WHERE id = ?1",
	[W_NODE_ROW] = "SELECT started_ms, owner, expires_ms FROM nodes WHERE id = ?1",
	[W_NODE_PUT] = "INSERT OR REPLACE INTO nodes(id, url, started_ms, heartbeat_ms, expires_ms, owner)"
		       " VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
	/* a scan: the table holds a row per gateway sharing the store */
	[W_OWNER_LIVE] = "SELECT 1 FROM nodes WHERE owner = ?1 AND expires_ms > ?2 LIMIT 1",
};

/* Sessions the writer keeps rows of (session_cache.h). */
#define SESSION_CACHE_CAP 4096u

/* Codes after which the open transaction cannot be trusted. (PC_EBUSY is
 * not one: inside BEGIN IMMEDIATE SQLite has the write lock, and the code
 * also means "lease held by another owner", which fails only its op.) */
static bool batch_fatal(int rc)
{
	return rc == PC_ENOMEM || rc == PC_STORE_ECORRUPT || rc == PC_STORE_EFULL || rc == PC_STORE_EREADONLY ||
	       rc == PC_STORE_EIO || rc == PC_STORE_ECANTOPEN;
}

/* ---- write operations (inside the batch transaction) ---- */

static int ensure_session(pc__sq_be_t *be, const char *key, int klen, const char *agent, const char *id,
			  const char *meta, bool *created)
{
	int berr = 0;
	sqlite3_stmt *st = be->st[W_SESS_INSERT];
	pc__sq_bind_t(&berr, st, 1, key, klen);
	pc__sq_bind_str(&berr, st, 2, id);
	pc__sq_bind_str(&berr, st, 3, agent);
	pc__sq_bind_i(&berr, st, 4, pc__clock_wall_ms());
	pc__sq_bind_str(&berr, st, 5, meta);
	int rc = pc__sq_exec_b(be->db, st, berr);
	if (rc == 0 && created)
		*created = sqlite3_changes(be->db) == 1;
	return rc;
}

static int op_session(pc__sq_be_t *be, pc__store_op_t *op)
{
	int berr = 0;
	bool created = false;
	int rc = ensure_session(be, op->s[S_SESS_KEY], (int)op->len[S_SESS_KEY], op->s[S_SESS_AGENT],
				op->s[S_SESS_ID], op->s[S_SESS_META], &created);
	if (rc != 0)
		return rc;
	sqlite3_stmt *st = be->st[W_SESS_ID];
	pc__sq_bind_s(&berr, st, 1, op, S_SESS_KEY);
	rc = pc__sq_step_b(be->db, st, berr);
	if (rc == 1) {
		const char *id = (const char *)sqlite3_column_text(st, 0);
		snprintf(op->res.id, sizeof(op->res.id), "%s", id ? id : "");
		op->res.flags = created ? PC_STORE_CREATED : 0;
		rc = 0;
		pc__sq_done(st);
	} else if (rc == 0) {
		rc = PC_STORE_EIO; /* inserted or present, yet not found */
	}
	return rc;
}

/* ---- the session cache (session_cache.h) ---- */

/* Writes the cached sessions' changes into the open transaction. */
static int sessions_flush(pc__sq_be_t *be)
{
	int rc = 0;
	for (size_t k = 0; k < pc__sc_dirty_count(be->sessions) && rc == 0; k++) {
		const pc__sc_entry_t *e = pc__sc_dirty(be->sessions, k);
		int berr = 0;
		sqlite3_stmt *st = be->st[W_SESS_FLUSH];
		pc__sq_bind_i(&berr, st, 1, e->sid);
		pc__sq_bind_i(&berr, st, 2, e->last_seq);
		pc__sq_bind_i(&berr, st, 3, e->updated_ms);
		pc__sq_bind_i(&berr, st, 4, e->runs_added);
		pc__sq_bind_str(&berr, st, 5, e->last_run);
		rc = pc__sq_exec_b(be->db, st, berr);
		if (rc == 0 && sqlite3_changes(be->db) != 1)
			rc = PC_STORE_EIO; /* the row went away under the cache */
	}
	if (rc == 0)
		pc__sc_written(be->sessions);
	return rc;
}

/* Before SQL of an operation's own reads or writes session rows. */
static int sessions_settle(pc__sq_be_t *be)
{
	int rc = sessions_flush(be);
	pc__sc_clear(be->sessions);
	return rc;
}

/* A session row as the writer sees it; `cached` when the cache holds it. */
typedef struct session_row {
	int64_t sid, last_seq, epoch;
	pc__sc_entry_t *cached;
} session_row_t;

/* PC_ENOTFOUND when the session has no row. */
static int session_row(pc__sq_be_t *be, const pc__store_op_t *op, uint32_t key, session_row_t *out)
{
	const char *k = op->s[key];
	size_t kl = op->len[key];
	pc__sc_entry_t *e = be->cache_on ? pc__sc_get(be->sessions, k, kl) : NULL;
	if (!e) {
		int berr = 0;
		sqlite3_stmt *st = be->st[W_APP_SEQ];
		pc__sq_bind_s(&berr, st, 1, op, key);
		int rc = pc__sq_step_b(be->db, st, berr);
		if (rc == 0)
			return PC_ENOTFOUND;
		if (rc < 0)
			return rc;
		*out = (session_row_t){.sid = sqlite3_column_int64(st, 0),
				       .last_seq = sqlite3_column_int64(st, 1),
				       .epoch = sqlite3_column_int64(st, 2)};
		pc__sq_done(st);
		if (!be->cache_on)
			return 0;
		e = pc__sc_add(be->sessions, k, kl, out->sid, out->last_seq, out->epoch);
		if (!e) { /* full: write it out and start again */
			rc = sessions_settle(be);
			if (rc != 0)
				return rc;
			e = pc__sc_add(be->sessions, k, kl, out->sid, out->last_seq, out->epoch);
		}
		out->cached = e; /* NULL (out of memory): written directly */
		return 0;
	}
	*out = (session_row_t){.sid = e->sid, .last_seq = e->last_seq, .epoch = e->epoch, .cached = e};
	return 0;
}

/* The session's last seq is now `seq`. */
static int session_set_seq(pc__sq_be_t *be, const session_row_t *row, int64_t seq)
{
	int64_t now = pc__clock_wall_ms();
	if (row->cached) {
		row->cached->last_seq = seq;
		row->cached->updated_ms = now;
		pc__sc_touch(be->sessions, row->cached);
		return 0;
	}
	int berr = 0;
	sqlite3_stmt *st = be->st[W_APP_SET];
	pc__sq_bind_i(&berr, st, 1, row->sid);
	pc__sq_bind_i(&berr, st, 2, seq);
	pc__sq_bind_i(&berr, st, 3, now);
	return pc__sq_exec_b(be->db, st, berr);
}

static int insert_msg(pc__sq_be_t *be, const pc__store_op_t *op, int64_t sid, int64_t seq, uint32_t first,
		      int64_t created)
{
	int berr = 0;
	sqlite3_stmt *st = be->st[W_MSG_INSERT];
	pc__sq_bind_i(&berr, st, 1, sid);
	pc__sq_bind_i(&berr, st, 2, seq);
	pc__sq_bind_s(&berr, st, 3, op, first);
	pc__sq_bind_s(&berr, st, 4, op, first + 1);
	pc__sq_bind_s(&berr, st, 5, op, first + 2);
	pc__sq_bind_s(&berr, st, 6, op, first + 3);
	pc__sq_bind_i(&berr, st, 7, created > 0 ? created : pc__clock_wall_ms());
	return pc__sq_exec_b(be->db, st, berr);
}

static int op_append(pc__sq_be_t *be, pc__store_op_t *op)
{
	if (op->nint < I_APP_N || op->nstr < S_APP_N)
		return PC_EINVAL;
	/* The session usually exists; only when it has no row is it created
	 * (and then a fenced write still fails). */
	session_row_t row;
	int rc = session_row(be, op, S_APP_KEY, &row);
	if (rc == PC_ENOTFOUND) {
		bool created = false;
		rc = ensure_session(be, op->s[S_APP_KEY], (int)op->len[S_APP_KEY], NULL, NULL, NULL, &created);
		if (rc == 0)
			rc = created ? session_row(be, op, S_APP_KEY, &row) : PC_STORE_EFENCED;
	}
	int64_t epoch = op->i[I_APP_EPOCH];
	if (rc == 0 && epoch != 0 && epoch != row.epoch)
		rc = PC_STORE_EFENCED;
	int64_t seq = rc == 0 ? row.last_seq + 1 : 0;
	if (rc == 0)
		rc = insert_msg(be, op, row.sid, seq, S_APP_ROLE, op->i[I_APP_CREATED]);
	if (rc == 0)
		rc = session_set_seq(be, &row, seq);
	if (rc == 0)
		op->res.seq = seq;
	return rc;
}

typedef struct sess_state {
	int64_t last_seq, epoch, expires, sid;
	char owner[PC_STORE_NAME_MAX + 1];
	bool has_owner;
} sess_state_t;

static int session_state(pc__sq_be_t *be, const pc__store_op_t *op, uint32_t key, sess_state_t *out)
{
	int berr = 0;
	sqlite3_stmt *st = be->st[W_SESS_STATE];
	pc__sq_bind_s(&berr, st, 1, op, key);
	int rc = pc__sq_step_b(be->db, st, berr);
	if (rc == 0)
		return PC_ENOTFOUND;
	if (rc < 0)
		return rc;
	out->last_seq = sqlite3_column_int64(st, 0);
	out->epoch = sqlite3_column_int64(st, 1);
	const char *o = (const char *)sqlite3_column_text(st, 2);
	out->has_owner = o != NULL;
	snprintf(out->owner, sizeof(out->owner), "%s", o ? o : "");
	out->expires = sqlite3_column_int64(st, 3);
	out->sid = sqlite3_column_int64(st, 4);
	pc__sq_done(st);
	return 0;
}

static int op_rewrite(pc__sq_be_t *be, pc__store_op_t *op)
{
	int berr = 0;
	if (op->nint < I_RW_FIRST)
		return PC_EINVAL;
	int64_t n = op->i[I_RW_COUNT], epoch = op->i[I_RW_EPOCH];
	if (n < 0 || op->nint != I_RW_FIRST + (uint64_t)n || op->nstr != S_RW_FIRST + (uint64_t)n * S_RW_PER)
		return PC_EINVAL;
	sess_state_t ss;
	int rc = session_state(be, op, S_RW_KEY, &ss);
	if (rc != 0)
		return rc;
	if (epoch != 0 && epoch != ss.epoch)
		return PC_STORE_EFENCED;
	if (ss.last_seq != op->i[I_RW_EXPECTED])
		return PC_STORE_ECONFLICT;
	sqlite3_stmt *st = be->st[W_MSG_DELETE_FROM];
	pc__sq_bind_i(&berr, st, 1, ss.sid);
	pc__sq_bind_i(&berr, st, 2, op->i[I_RW_FROM]);
	rc = pc__sq_exec_b(be->db, st, berr);
	int64_t seq = ss.last_seq;
	for (int64_t k = 0; k < n && rc == 0; k++)
		rc = insert_msg(be, op, ss.sid, ++seq, S_RW_FIRST + (uint32_t)k * S_RW_PER,
				op->i[I_RW_FIRST + k]);
	/* Even a pure truncation moves last_seq on, so a rewrite planned on
	 * an older snapshot sees the change. */
	if (n == 0)
		seq++;
	if (rc == 0) {
		st = be->st[W_SESS_SET_LAST];
		pc__sq_bind_s(&berr, st, 1, op, S_RW_KEY);
		pc__sq_bind_i(&berr, st, 2, seq);
		pc__sq_bind_i(&berr, st, 3, pc__clock_wall_ms());
		rc = pc__sq_exec_b(be->db, st, berr);
	}
	if (rc == 0)
		op->res.seq = seq;
	return rc;
}

/* The run joins its session's count and is its latest. */
static int count_run(pc__sq_be_t *be, const pc__store_op_t *op, int64_t now)
{
	pc__sc_entry_t *e = be->cache_on ? pc__sc_get(be->sessions, op->s[S_RB_KEY], op->len[S_RB_KEY]) : NULL;
	if (e) {
		char *id = strdup(op->s[S_RB_RUN]);
		if (!id)
			return PC_ENOMEM;
		free(e->last_run);
		e->last_run = id;
		e->runs_added++;
		pc__sc_touch(be->sessions, e);
		return 0;
	}
	int berr = 0;
	sqlite3_stmt *st = be->st[W_RUN_SESSION];
	pc__sq_bind_s(&berr, st, 1, op, S_RB_KEY);
	pc__sq_bind_s(&berr, st, 2, op, S_RB_RUN);
	pc__sq_bind_i(&berr, st, 3, now);
	return pc__sq_exec_b(be->db, st, berr);
}

/* A repeat of a kept idempotency key: the first run stands, nothing
 * starts (1); a key older than the store keeps keys is forgotten (0). */
static int run_by_idem(pc__sq_be_t *be, pc__store_op_t *op, int64_t now)
{
	int berr = 0;
	sqlite3_stmt *st = be->st[W_RUN_BY_IDEM];
	pc__sq_bind_s(&berr, st, 1, op, S_RB_KEY);
	pc__sq_bind_s(&berr, st, 2, op, S_RB_IDEM);
	int rc = pc__sq_step_b(be->db, st, berr);
	if (rc <= 0)
		return rc;
	const char *id = (const char *)sqlite3_column_text(st, 0);
	snprintf(op->res.id, sizeof(op->res.id), "%s", id ? id : "");
	op->res.status = pc__store_status_from_name((const char *)sqlite3_column_text(st, 1));
	bool kept = sqlite3_column_int64(st, 2) >= now - be->cfg.idem_ttl_ms;
	const char *fp = (const char *)sqlite3_column_text(st, 3);
	const char *asked = op->s[S_RB_FP];
	if (kept && fp && asked && strcmp(fp, asked) != 0)
		op->res.flags = PC_STORE_MISMATCH;
	pc__sq_done(st);
	if (kept)
		return 1;
	st = be->st[W_RUN_FORGET_IDEM];
	pc__sq_bind_str(&berr, st, 1, op->res.id);
	rc = pc__sq_exec_b(be->db, st, berr);
	op->res = (pc_store_reply_t){0};
	return rc;
}

static int op_run_begin(pc__sq_be_t *be, pc__store_op_t *op)
{
	int berr = 0;
	int64_t now = pc__clock_wall_ms();
	if (op->s[S_RB_IDEM]) {
		int rc = run_by_idem(be, op, now);
		if (rc != 0)
			return rc < 0 ? rc : 0;
	}
	sqlite3_stmt *st = be->st[W_RUN_INSERT];
	pc__sq_bind_s(&berr, st, 1, op, S_RB_RUN);
	pc__sq_bind_s(&berr, st, 2, op, S_RB_KEY);
	pc__sq_bind_s(&berr, st, 3, op, S_RB_IDEM);
	pc__sq_bind_i(&berr, st, 4, now);
	pc__sq_bind_s(&berr, st, 5, op, S_RB_FP);
	pc__sq_bind_s(&berr, st, 6, op, S_RB_OWNER);
	pc__sq_bind_s(&berr, st, 7, op, S_RB_PROMPT);
	int rc = pc__sq_exec_b(be->db, st, berr);
	if (rc == 0)
		rc = count_run(be, op, now);
	if (rc == 0) {
		snprintf(op->res.id, sizeof(op->res.id), "%s", op->s[S_RB_RUN]);
		op->res.flags = PC_STORE_CREATED;
		op->res.status = PC_STORE_RUN_ACCEPTED;
	}
	return rc;
}

/* Fenced like a transcript write: only the holder of the lease on the
 * session op->s[key] names, at `epoch`, writes (0: unfenced). */
static int fence(pc__sq_be_t *be, const pc__store_op_t *op, uint32_t key, int64_t epoch)
{
	if (epoch == 0)
		return 0;
	session_row_t row;
	int rc = session_row(be, op, key, &row);
	if (rc == PC_ENOTFOUND || (rc == 0 && row.epoch != epoch))
		return PC_STORE_EFENCED;
	return rc;
}

static int op_run_end(pc__sq_be_t *be, pc__store_op_t *op)
{
	int berr = 0;
	if (op->nint < I_RE_N || op->i[I_RE_STATUS] < 0 || op->i[I_RE_STATUS] > PC_STORE_RUN_TIMEOUT ||
	    (op->i[I_RE_EPOCH] && !op->s[S_RE_KEY]))
		return PC_EINVAL;
	int frc = fence(be, op, S_RE_KEY, op->i[I_RE_EPOCH]);
	if (frc != 0)
		return frc;
	sqlite3_stmt *st = be->st[W_RUN_END];
	pc__sq_bind_s(&berr, st, 1, op, S_RE_RUN);
	pc__sq_bind_t(&berr, st, 2, pc__store_run_status_names[op->i[I_RE_STATUS]], -1);
	pc__sq_bind_i(&berr, st, 3, pc__clock_wall_ms());
	pc__sq_bind_s(&berr, st, 4, op, S_RE_CODE);
	pc__sq_bind_s(&berr, st, 5, op, S_RE_USAGE);
	pc__sq_bind_i(&berr, st, 6, op->i[I_RE_REPLAY_INVALID] != 0);
	int rc = pc__sq_exec_b(be->db, st, berr);
	if (rc != 0 || sqlite3_changes(be->db) != 0)
		return rc;
	st = be->st[W_RUN_EXISTS];
	berr = 0;
	pc__sq_bind_s(&berr, st, 1, op, S_RE_RUN);
	rc = pc__sq_step_b(be->db, st, berr);
	if (rc == 1)
		pc__sq_done(st);
	return rc < 0 ? rc : rc == 1 ? PC_STORE_EFENCED : PC_ENOTFOUND;
}

static int op_attempt(pc__sq_be_t *be, pc__store_op_t *op)
{
	int berr = 0;
	if (op->nint < I_AT_N)
		return PC_EINVAL;
	sqlite3_stmt *st = be->st[W_ATTEMPT];
	pc__sq_bind_s(&berr, st, 1, op, S_AT_RUN);
	pc__sq_bind_i(&berr, st, 2, op->i[I_AT_INDEX]);
	pc__sq_bind_s(&berr, st, 3, op, S_AT_PROVIDER);
	pc__sq_bind_s(&berr, st, 4, op, S_AT_MODEL);
	pc__sq_bind_s(&berr, st, 5, op, S_AT_PROFILE);
	pc__sq_bind_s(&berr, st, 6, op, S_AT_REASON);
	pc__sq_bind_s(&berr, st, 7, op, S_AT_STATUS);
	pc__sq_bind_s(&berr, st, 8, op, S_AT_CODE);
	pc__sq_bind_i(&berr, st, 9, op->i[I_AT_DURATION]);
	pc__sq_bind_i(&berr, st, 10, pc__clock_wall_ms());
	return pc__sq_exec_b(be->db, st, berr);
}

static int op_usage_add(pc__sq_be_t *be, pc__store_op_t *op)
{
	if (op->nint < I_UA_N || op->nstr < S_UA_N || !op->s[S_UA_KEY])
		return PC_EINVAL;
	int rc = fence(be, op, S_UA_KEY, op->i[I_UA_EPOCH]);
	if (rc != 0)
		return rc;
	int berr = 0;
	sqlite3_stmt *st = be->st[W_USAGE];
	pc__sq_bind_s(&berr, st, 1, op, S_UA_RUN);
	pc__sq_bind_i(&berr, st, 2, op->i[I_UA_ATTEMPT]);
	pc__sq_bind_i(&berr, st, 3, op->i[I_UA_CALL]);
	pc__sq_bind_s(&berr, st, 4, op, S_UA_KEY);
	pc__sq_bind_s(&berr, st, 5, op, S_UA_PROVIDER);
	pc__sq_bind_s(&berr, st, 6, op, S_UA_MODEL);
	for (int k = 0; k < 5; k++)
		pc__sq_bind_i(&berr, st, 7 + k, op->i[I_UA_INPUT + k]);
	pc__sq_bind_i(&berr, st, 12, op->i[I_UA_CREATED] > 0 ? op->i[I_UA_CREATED] : pc__clock_wall_ms());
	return pc__sq_exec_b(be->db, st, berr);
}

static int op_device_put(pc__sq_be_t *be, pc__store_op_t *op)
{
	if (op->nint < I_DV_N)
		return PC_EINVAL;
	int berr = 0;
	bool update = op->i[I_DV_UPDATE] != 0;
	sqlite3_stmt *st = be->st[update ? W_DEVICE_UPDATE : W_DEVICE_PUT];
	for (uint32_t k = 0; k < S_DV_N; k++)
		pc__sq_bind_s(&berr, st, (int)k + 1, op, k);
	int64_t now = pc__clock_wall_ms();
	pc__sq_bind_i(&berr, st, 5, op->i[I_DV_APPROVED] > 0 ? op->i[I_DV_APPROVED] : now);
	pc__sq_bind_i(&berr, st, 6, op->i[I_DV_ISSUED] > 0 ? op->i[I_DV_ISSUED] : now);
	int rc = pc__sq_exec_b(be->db, st, berr);
	if (rc == 0 && update && sqlite3_changes(be->db) == 0)
		rc = PC_ENOTFOUND;
	return rc;
}

static int op_device_delete(pc__sq_be_t *be, pc__store_op_t *op)
{
	int berr = 0;
	sqlite3_stmt *st = be->st[W_DEVICE_DELETE];
	pc__sq_bind_s(&berr, st, 1, op, 0);
	int rc = pc__sq_exec_b(be->db, st, berr);
	if (rc == 0 && sqlite3_changes(be->db) == 0)
		rc = PC_ENOTFOUND;
	return rc;
}

/* Node op->s[S_NB_ID]'s row as of `now`: PC_EBUSY (its owner named in
 * the reply) while it is live and another owner's; else 0, with the
 * started_ms the beat keeps in *started (unchanged for a new row) and
 * *created. */
static int node_row(pc__sq_be_t *be, pc__store_op_t *op, int64_t now, int64_t *started, bool *created)
{
	int berr = 0;
	sqlite3_stmt *st = be->st[W_NODE_ROW];
	pc__sq_bind_s(&berr, st, 1, op, S_NB_ID);
	int rc = pc__sq_step_b(be->db, st, berr);
	*created = rc == 0;
	if (rc <= 0)
		return rc;
	const char *owner = (const char *)sqlite3_column_text(st, 1);
	/* a row from before owners were kept has none to defend */
	if (owner && sqlite3_column_int64(st, 2) > now && strcmp(owner, op->s[S_NB_OWNER]) != 0) {
		snprintf(op->res.id, sizeof(op->res.id), "%.*s", (int)PC_STORE_ID_MAX, owner);
		rc = PC_EBUSY;
	} else {
		rc = 0;
		if (!op->i[I_NB_FRESH])
			*started = sqlite3_column_int64(st, 0);
	}
	pc__sq_done(st);
	return rc;
}

/* A node's heartbeat at the wall clock: its row written anew, keeping
 * started_ms unless the node has just started (or is new). */
static int op_node_beat(pc__sq_be_t *be, pc__store_op_t *op)
{
	if (op->nint < I_NB_N || op->i[I_NB_LEASE] < 0 || !op->s[S_NB_OWNER])
		return PC_EINVAL;
	int berr = 0;
	int64_t now = pc__clock_wall_ms(), lease = op->i[I_NB_LEASE], started = now;
	bool created = false;
	int rc = node_row(be, op, now, &started, &created);
	if (rc != 0)
		return rc;
	sqlite3_stmt *st = be->st[W_NODE_PUT];
	pc__sq_bind_s(&berr, st, 1, op, S_NB_ID);
	pc__sq_bind_s(&berr, st, 2, op, S_NB_URL);
	pc__sq_bind_i(&berr, st, 3, started);
	pc__sq_bind_i(&berr, st, 4, now);
	/* a lease too long for the clock never runs out */
	pc__sq_bind_i(&berr, st, 5, lease > INT64_MAX - now ? INT64_MAX : now + lease);
	pc__sq_bind_s(&berr, st, 6, op, S_NB_OWNER);
	rc = pc__sq_exec_b(be->db, st, berr);
	if (rc == 0) {
		op->res.started_ms = started;
		op->res.ended_ms = now;
		op->res.flags = created ? PC_STORE_CREATED : 0;
	}
	return rc;
}

static int op_audit(pc__sq_be_t *be, pc__store_op_t *op)
{
	int berr = 0;
	if (op->nint < I_AU_N)
		return PC_EINVAL;
	sqlite3_stmt *st = be->st[W_AUDIT];
	pc__sq_bind_i(&berr, st, 1, op->i[I_AU_TS] > 0 ? op->i[I_AU_TS] : pc__clock_wall_ms());
	pc__sq_bind_s(&berr, st, 2, op, S_AU_KIND);
	pc__sq_bind_s(&berr, st, 3, op, S_AU_STATUS);
	pc__sq_bind_s(&berr, st, 4, op, S_AU_RUN);
	pc__sq_bind_s(&berr, st, 5, op, S_AU_SESSION);
	pc__sq_bind_s(&berr, st, 6, op, S_AU_TOOL);
	pc__sq_bind_s(&berr, st, 7, op, S_AU_CALL);
	pc__sq_bind_s(&berr, st, 8, op, S_AU_CODE);
	int rc = pc__sq_exec_b(be->db, st, berr);
	if (rc == 0)
		be->audit_dirty = true;
	return rc;
}

/* The lease columns are the row's alone: the cache's pending changes (seq,
 * counts) go to other columns, so a lease op writes around the cache and
 * only brings a cached epoch up to date, rather than flushing and
 * forgetting every cached session (which cost every busy session a read
 * after each lease taken or given back). */
static int lease_set(pc__sq_be_t *be, const pc__store_op_t *op, const char *owner, int64_t epoch, int64_t expires)
{
	int berr = 0;
	sqlite3_stmt *st = be->st[W_LEASE_SET];
	pc__sq_bind_s(&berr, st, 1, op, S_LS_KEY);
	pc__sq_bind_str(&berr, st, 2, owner);
	pc__sq_bind_i(&berr, st, 3, epoch);
	pc__sq_bind_i(&berr, st, 4, expires);
	int rc = pc__sq_exec_b(be->db, st, berr);
	pc__sc_entry_t *e = rc == 0 ? pc__sc_get(be->sessions, op->s[S_LS_KEY], op->len[S_LS_KEY]) : NULL;
	if (e)
		e->epoch = epoch;
	return rc;
}

/* Whether a node row beaten by `owner` is live at `now` (1, 0, or < 0). */
static int owner_live(pc__sq_be_t *be, const char *owner, int64_t now)
{
	int berr = 0;
	sqlite3_stmt *st = be->st[W_OWNER_LIVE];
	pc__sq_bind_str(&berr, st, 1, owner);
	pc__sq_bind_i(&berr, st, 2, now);
	int rc = pc__sq_step_b(be->db, st, berr);
	if (rc == 1)
		pc__sq_done(st);
	return rc;
}

/* A run moves from a cluster node only once that node is gone, and a node
 * claims its own run only while it is live (store.h). */
static int op_run_adopt(pc__sq_be_t *be, pc__store_op_t *op)
{
	const char *from = op->s[S_AD_FROM], *to = op->s[S_AD_TO];
	bool claim = from && to && strcmp(from, to) == 0;
	int rc = from ? owner_live(be, from, pc__clock_wall_ms()) : 0;
	if (rc < 0)
		return rc;
	if (claim != (rc == 1))
		return claim ? PC_ESTATE : PC_EBUSY;
	int berr = 0;
	sqlite3_stmt *st = be->st[W_RUN_ADOPT];
	pc__sq_bind_s(&berr, st, 1, op, S_AD_RUN);
	pc__sq_bind_s(&berr, st, 2, op, S_AD_FROM);
	pc__sq_bind_s(&berr, st, 3, op, S_AD_TO);
	rc = pc__sq_exec_b(be->db, st, berr);
	if (rc == 0 && sqlite3_changes(be->db) == 0)
		rc = PC_STORE_EFENCED;
	return rc;
}

/* Whether the session's lease holder still holds it at `now`: a timed
 * lease until it expires, a node-bound one while its owner's node is live
 * (`mine_live`: the holder is the asker, whose node is known live). */
static int holder_live(pc__sq_be_t *be, const sess_state_t *ss, int64_t now, bool mine_live)
{
	if (!ss->has_owner)
		return 0;
	if (ss->expires != PC_STORE_LEASE_NODE)
		return ss->expires > now;
	return mine_live ? 1 : owner_live(be, ss->owner, now);
}

static int op_lease_acquire(pc__sq_be_t *be, pc__store_op_t *op)
{
	if (op->nint < I_LS_N)
		return PC_EINVAL;
	int64_t now = pc__clock_wall_ms();
	bool node = op->i[I_LS_VALUE] == PC_STORE_LEASE_NODE;
	int rc = node ? owner_live(be, op->s[S_LS_OWNER], now) : 1;
	if (rc <= 0)
		return rc < 0 ? rc : PC_ESTATE; /* a node out of the cluster takes nothing */
	rc = ensure_session(be, op->s[S_LS_KEY], (int)op->len[S_LS_KEY], NULL, NULL, NULL, NULL);
	sess_state_t ss;
	if (rc == 0)
		rc = session_state(be, op, S_LS_KEY, &ss);
	if (rc != 0)
		return rc;
	bool mine = ss.has_owner && strcmp(ss.owner, op->s[S_LS_OWNER]) == 0;
	bool gone = ss.has_owner && op->s[S_LS_STEAL] && strcmp(ss.owner, op->s[S_LS_STEAL]) == 0;
	int live = holder_live(be, &ss, now, mine && node);
	if (live < 0)
		return live;
	if (live && !mine && !gone) {
		snprintf(op->res.id, sizeof(op->res.id), "%.*s", (int)PC_STORE_ID_MAX, ss.owner);
		return PC_EBUSY;
	}
	/* A renewal by the live holder keeps its epoch; any new holder
	 * fences out every earlier one. */
	int64_t epoch = (live && mine) ? ss.epoch : ss.epoch + 1;
	rc = lease_set(be, op, op->s[S_LS_OWNER], epoch, node ? PC_STORE_LEASE_NODE : now + op->i[I_LS_VALUE]);
	if (rc != 0)
		return rc;
	op->res.epoch = epoch;
	/* the owner whose writes are fenced from now on */
	if (ss.has_owner && !mine)
		snprintf(op->res.id, sizeof(op->res.id), "%.*s", (int)PC_STORE_ID_MAX, ss.owner);
	return 0;
}

static int op_lease_release(pc__sq_be_t *be, pc__store_op_t *op)
{
	if (op->nint < I_LS_N)
		return PC_EINVAL;
	sess_state_t ss;
	int rc = session_state(be, op, S_LS_KEY, &ss);
	if (rc != 0)
		return rc;
	if (!ss.has_owner || strcmp(ss.owner, op->s[S_LS_OWNER]) != 0 || ss.epoch != op->i[I_LS_VALUE])
		return PC_STORE_EFENCED;
	return lease_set(be, op, NULL, ss.epoch, 0);
}

static int op_session_set(pc__sq_be_t *be, pc__store_op_t *op)
{
	int berr = 0;
	if (op->nint < I_SS_N)
		return PC_EINVAL;
	sqlite3_stmt *st = be->st[W_SESS_SET];
	pc__sq_bind_s(&berr, st, 1, op, S_SS_KEY);
	pc__sq_bind_s(&berr, st, 2, op, S_SS_META);
	pc__sq_bind_i(&berr, st, 3, pc__clock_wall_ms());
	pc__sq_bind_i(&berr, st, 4, op->i[I_SS_EPOCH]);
	int rc = pc__sq_exec_b(be->db, st, berr);
	if (rc == 0 && sqlite3_changes(be->db) == 0) {
		sess_state_t ss;
		rc = session_state(be, op, S_SS_KEY, &ss);
		if (rc == 0)
			rc = PC_STORE_EFENCED; /* it exists: the epoch was stale */
	}
	return rc;
}

static int dispatch(pc__sq_be_t *be, pc__store_op_t *op)
{
	switch (op->kind) {
	case PC_STORE_REQ_SESSION:
	case PC_STORE_REQ_REWRITE:
	case PC_STORE_REQ_SESSION_SET: {
		int rc = sessions_settle(be);
		if (rc != 0)
			return rc;
		break;
	}
	default: break;
	}
	switch (op->kind) {
	case PC_STORE_REQ_SESSION: return op_session(be, op);
	case PC_STORE_REQ_APPEND: return op_append(be, op);
	case PC_STORE_REQ_REWRITE: return op_rewrite(be, op);
	case PC_STORE_REQ_RUN_BEGIN: return op_run_begin(be, op);
	case PC_STORE_REQ_RUN_END: return op_run_end(be, op);
	case PC_STORE_REQ_ATTEMPT: return op_attempt(be, op);
	case PC_STORE_REQ_AUDIT: return op_audit(be, op);
	case PC_STORE_REQ_LEASE_ACQUIRE: return op_lease_acquire(be, op);
	case PC_STORE_REQ_LEASE_RELEASE: return op_lease_release(be, op);
	case PC_STORE_REQ_SESSION_SET: return op_session_set(be, op);
	case PC_STORE_REQ_RUN_ADOPT: return op_run_adopt(be, op);
	case PC_STORE_REQ_PROBE: return pc__sq_exec_st(be->db, be->st[W_PROBE]);
	case PC_STORE_REQ_USAGE_ADD: return op_usage_add(be, op);
	case PC_STORE_REQ_DEVICE_PUT: return op_device_put(be, op);
	case PC_STORE_REQ_DEVICE_DELETE: return op_device_delete(be, op);
	case PC_STORE_REQ_NODE_BEAT: return op_node_beat(be, op);
	default: return PC_EINVAL;
	}
}

/* Checks that a decoded op has the strings its kind needs. */
static bool shape_ok(const pc__store_op_t *op)
{
	static const struct {
		uint32_t kind, nstr;
	} need[] = {
		{PC_STORE_REQ_SESSION, S_SESS_N}, {PC_STORE_REQ_APPEND, S_APP_N}, {PC_STORE_REQ_RUN_BEGIN, S_RB_N},
		{PC_STORE_REQ_RUN_END, S_RE_N}, {PC_STORE_REQ_ATTEMPT, S_AT_N}, {PC_STORE_REQ_AUDIT, S_AU_N},
		{PC_STORE_REQ_LEASE_ACQUIRE, S_LS_N}, {PC_STORE_REQ_LEASE_RELEASE, S_LS_N},
		{PC_STORE_REQ_REWRITE, S_RW_FIRST}, {PC_STORE_REQ_SESSION_SET, S_SS_N},
		{PC_STORE_REQ_RUN_ADOPT, S_AD_N}, {PC_STORE_REQ_USAGE_ADD, S_UA_N},
		{PC_STORE_REQ_DEVICE_PUT, S_DV_N}, {PC_STORE_REQ_DEVICE_DELETE, 1},
		{PC_STORE_REQ_NODE_BEAT, S_NB_N},
	};
	if (op->kind == PC_STORE_REQ_PROBE)
		return true;
	for (size_t k = 0; k < sizeof(need) / sizeof(*need); k++)
		if (need[k].kind == op->kind)
			return op->nstr >= need[k].nstr && op->s[0] != NULL;
	return false;
}

static int sq_apply(void *p, pc__store_op_t *op, bool guarded)
{
	pc__sq_be_t *be = p;
	op->res = (pc_store_reply_t){0};
	be->cache_on = !guarded;
	if (!guarded) {
		int orc = shape_ok(op) ? dispatch(be, op) : PC_EINVAL;
		op->res.rc = orc;
		return orc;
	}
	int rc = pc__sq_exec_st(be->db, be->st[W_SAVE]);
	if (rc != 0)
		return rc;
	int orc = shape_ok(op) ? dispatch(be, op) : PC_EINVAL;
	if (orc == 0)
		return pc__sq_exec_st(be->db, be->st[W_RELEASE]);
	/* a refusal may name why (a lease's holder); nothing else stands */
	pc_store_reply_t failed = {.rc = orc};
	memcpy(failed.id, op->res.id, sizeof(failed.id));
	op->res = failed;
	/* A failure that took the transaction with it fails the batch. */
	if (batch_fatal(orc) || sqlite3_get_autocommit(be->db))
		return orc;
	rc = pc__sq_exec_st(be->db, be->st[W_ROLLBACK_TO]);
	if (rc == 0)
		rc = pc__sq_exec_st(be->db, be->st[W_RELEASE]);
	return rc;
}

static int sq_begin(void *p)
{
	pc__sq_be_t *be = p;
	be->audit_dirty = false;
	int rc = pc__sq_exec_st(be->db, be->st[W_BEGIN]);
	/* with the write lock held: has another connection committed since? */
	sqlite3_stmt *st = be->st[W_DATA_VERSION];
	if (rc == 0 && (rc = pc__sq_step(be->db, st)) == 1) {
		int64_t v = sqlite3_column_int64(st, 0);
		pc__sq_done(st);
		if (v != be->data_version)
			pc__sc_clear(be->sessions);
		be->data_version = v;
		rc = 0;
	} else if (rc == 0) {
		rc = PC_STORE_EIO; /* the pragma always answers */
	}
	return rc;
}

static int sq_commit(void *p)
{
	int berr = 0;
	pc__sq_be_t *be = p;
	int rc = sessions_flush(be);
	if (rc == 0 && be->audit_dirty) {
		sqlite3_stmt *st = be->st[W_AUDIT_TRIM_N];
		pc__sq_bind_i(&berr, st, 1, be->cfg.audit_max);
		rc = pc__sq_exec_b(be->db, st, berr);
		if (rc == 0) {
			st = be->st[W_AUDIT_TRIM_T];
			pc__sq_bind_i(&berr, st, 1, pc__clock_wall_ms() - (int64_t)be->cfg.audit_days * 86400000);
			rc = pc__sq_exec_b(be->db, st, berr);
		}
	}
	if (rc == 0)
		rc = pc__sq_exec_st(be->db, be->st[W_COMMIT]);
	return rc;
}

static void sq_rollback(void *p)
{
	pc__sq_be_t *be = p;
	pc__sc_clear(be->sessions); /* ahead of the rows now */
	/* After some errors SQLite has rolled back already. */
	if (!sqlite3_get_autocommit(be->db))
		pc__sq_exec_st(be->db, be->st[W_ROLLBACK]);
}

/* ---- open / close ---- */

static int query_int(sqlite3 *db, const char *sql, int64_t *out)
{
	sqlite3_stmt *st = NULL;
	int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
	if (rc == SQLITE_OK) {
		rc = sqlite3_step(st);
		if (rc == SQLITE_ROW) {
			*out = sqlite3_column_int64(st, 0);
			rc = SQLITE_OK;
		}
	}
	int out_rc = pc__sq_map_rc(db, rc);
	if (out_rc == 0 && rc != SQLITE_OK)
		out_rc = PC_STORE_EIO;
	sqlite3_finalize(st);
	return out_rc;
}

static int exec_sql(sqlite3 *db, const char *sql)
{
	return pc__sq_map_rc(db, sqlite3_exec(db, sql, NULL, NULL, NULL));
}

static int migrate(sqlite3 *db, int64_t from)
{
	int rc = 0;
	for (int64_t v = from + 1; v <= SCHEMA_VERSION && rc == 0; v++) {
		char bump[96];
		snprintf(bump, sizeof(bump), "PRAGMA user_version = %lld; PRAGMA application_id = %d;", (long long)v,
			 APP_ID);
		rc = exec_sql(db, "BEGIN IMMEDIATE");
		if (rc == 0)
			rc = exec_sql(db, migrations[v]);
		if (rc == 0)
			rc = exec_sql(db, bump);
		if (rc == 0)
			rc = exec_sql(db, "COMMIT");
		if (rc != 0 && !sqlite3_get_autocommit(db))
			exec_sql(db, "ROLLBACK");
	}
	return rc;
}

/* Is this file ours, and how old? Reading the header is also where a file
 * that is not a database shows itself. */
static int identify(sqlite3 *db, int64_t *version)
{
	int64_t app = 0, ver = 0, objects = 0;
	int rc = query_int(db, "SELECT count(*) FROM sqlite_schema", &objects);
	if (rc == 0)
		rc = query_int(db, "PRAGMA application_id", &app);
	if (rc == 0)
		rc = query_int(db, "PRAGMA user_version", &ver);
	if (rc != 0)
		return rc;
	if (app == 0 && ver == 0 && objects == 0)
		*version = 0; /* new and empty */
	else if (app != APP_ID)
		return PC_STORE_EFOREIGN;
	else if (ver > SCHEMA_VERSION)
		return PC_STORE_EVERSION;
	else
		*version = ver;
	return 0;
}

/* The directory holding `path`, as a new string (NULL on ENOMEM). */
static char *dir_of(const char *path)
{
	const char *slash = strrchr(path, '/');
	if (!slash)
		return strdup(".");
	return strndup(path, slash == path ? 1 : (size_t)(slash - path));
}

/* SQLite fsyncs the directory when it creates the WAL, not when it
 * creates the database file: a new store's directory entry is made
 * durable here, before any write can be acknowledged. */
static int sync_dir(const char *path)
{
	char *dir = dir_of(path);
	if (!dir)
		return PC_ENOMEM;
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int rc = 0;
	if (fd < 0 || fsync(fd) != 0)
		rc = errno == EIO ? PC_STORE_EIO : PC_ESYS;
	if (fd >= 0)
		close(fd);
	free(dir);
	return rc;
}

/* SQLite's errno after a failed open is often that of its last fallback
 * attempt; ask the file system which permission was missing. */
static int why_cantopen(const char *path)
{
	if (access(path, F_OK) == 0)
		return access(path, W_OK) == 0 ? PC_STORE_ECANTOPEN : PC_STORE_EREADONLY;
	char *dir = dir_of(path);
	if (!dir)
		return PC_ENOMEM;
	int rc = PC_STORE_ECANTOPEN;
	if (access(dir, F_OK) == 0 && access(dir, W_OK) != 0 && (errno == EACCES || errno == EROFS))
		rc = PC_STORE_EREADONLY;
	free(dir);
	return rc;
}

static void sq_close(void *p)
{
	pc__sq_be_t *be = p;
	if (!be)
		return;
	pc__sq_readers_free(be);
	pc__sq_finalize_all(be->st, W_N);
	sqlite3_close_v2(be->db);
	pc__sc_free(be->sessions);
	pthread_mutex_destroy(&be->lock);
	free(be->path);
	free(be);
}

static int sq_open(const char *path, const pc_store_config_t *cfg, void **out)
{
	*out = NULL;
	pc__sq_be_t *be = calloc(1, sizeof(*be));
	if (!be)
		return PC_ENOMEM;
	if (pthread_mutex_init(&be->lock, NULL) != 0) {
		free(be);
		return PC_ESYS;
	}
	be->cfg = *cfg;
	be->path = strdup(path);
	be->sessions = pc__sc_new(SESSION_CACHE_CAP);
	int rc = be->path && be->sessions ? 0 : PC_ENOMEM;
	if (rc == 0 && pc__wal_vfs_register() != SQLITE_OK)
		rc = PC_STORE_EIO;
	if (rc == 0) {
		int src = sqlite3_open_v2(path, &be->db,
					  SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX |
						  SQLITE_OPEN_EXRESCODE,
					  PC__WAL_VFS_NAME);
		rc = pc__sq_map_rc(be->db, src);
	}
	if (rc == PC_STORE_ECANTOPEN)
		rc = why_cantopen(path);
	/* SQLite quietly falls back to read-only: a store must write. */
	if (rc == 0 && sqlite3_db_readonly(be->db, "main") == 1)
		rc = PC_STORE_EREADONLY;
	int64_t version = 0;
	if (rc == 0)
		rc = pc__sq_map_rc(be->db, sqlite3_busy_timeout(be->db, PC__SQ_BUSY_TIMEOUT_MS));
	if (rc == 0)
		rc = identify(be->db, &version);
	if (rc == 0) {
		sqlite3_stmt *st = NULL;
		int src = sqlite3_prepare_v2(be->db, "PRAGMA journal_mode = WAL", -1, &st, NULL);
		if (src == SQLITE_OK)
			src = sqlite3_step(st);
		if (src == SQLITE_ROW) {
			const char *mode = (const char *)sqlite3_column_text(st, 0);
			/* A store that cannot use WAL (e.g. its directory is
			 * read-only) is refused rather than run differently. */
			rc = (mode && strcmp(mode, "wal") == 0) ? 0 : PC_STORE_EREADONLY;
		} else {
			rc = pc__sq_map_rc(be->db, src);
			if (rc == 0)
				rc = PC_STORE_EIO;
		}
		sqlite3_finalize(st);
	}
	if (rc == 0)
		rc = exec_sql(be->db, "PRAGMA synchronous = FULL");
	if (rc == 0 && version < SCHEMA_VERSION)
		rc = migrate(be->db, version);
	if (rc == 0)
		rc = sync_dir(path);
	if (rc == 0)
		rc = pc__sq_prepare_all(be->db, wsql, be->st, W_N);
	if (rc != 0) {
		sq_close(be);
		return rc;
	}
	*out = be;
	return 0;
}

const pc__store_backend_t pc__store_sqlite = {
	.name = "sqlite",
	.open = sq_open,
	.close = sq_close,
	.begin = sq_begin,
	.apply = sq_apply,
	.commit = sq_commit,
	.rollback = sq_rollback,
	.reads = &pc__sq_reads,
};
