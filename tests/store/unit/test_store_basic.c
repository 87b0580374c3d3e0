/*
 * The store (io/store): transcripts, sessions, runs and idempotency,
 * attempts, the audit ledger, leases and fencing, rewrites, history
 * repair, session listings (orders, ties, paging), group commit from
 * threads and from actors, paired devices, cluster nodes' heartbeats,
 * refusals of bad input, and files that are not (our) databases.
 *
 * On SQLite, and on PostgreSQL when PINCER_TEST_PG_URL is set (ctest's
 * test_store_basic_pg): each fixture then opens the store on a schema of
 * its own (support/pg_test.h), reopens it on the same schema, and reads
 * and writes the tables behind the store's back through libpq. Tests of
 * SQLite's files (damage, old schema versions, the default path, a file
 * size limit) are skipped there.
 */
#include <criterion/criterion.h>

#include <signal.h>
#include <sys/resource.h>

#include <fcntl.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pg_test.h"
#include "test_util.h"
#include "io/io.h"
#include "io/store/store.h"
#include "io/store/store_internal.h"

/* ---- fixtures ---- */

typedef struct fx {
	char dir[64];
	char path[128];
	bool pg;       /* the store is on PostgreSQL, at url */
	char url[512]; /* a schema of this fixture's own */
	pc_runtime_t *rt;
	pc_io_t *io;   /* PostgreSQL: polls the writer's connection */
	pc_store_t *s;
} fx_t;

/* Skips a test of SQLite's own files under PostgreSQL. */
#define SQLITE_ONLY(why)                                                                           \
	do {                                                                                       \
		if (pg_test_enabled())                                                             \
			cr_skip_test("SQLite only: " why);                                         \
	} while (0)

static void rm_dir(const char *dir)
{
	static const char *const names[] = {"state.db", "state.db-wal", "state.db-shm", "junk.db", "other.db",
					    "other.db-wal", "other.db-shm", "home/state.db", "home/state.db-wal",
					    "home/state.db-shm", "home"};
	char p[256];
	for (size_t k = 0; k < sizeof(names) / sizeof(*names); k++) {
		snprintf(p, sizeof(p), "%s/%s", dir, names[k]);
		if (unlink(p) != 0)
			rmdir(p);
	}
	rmdir(dir);
}

/* Opens the fixture's store (again: the same file or schema) with `cfg`. */
static void fx_open_cfg(fx_t *f, pc_store_config_t *cfg)
{
	cfg->path = f->path;
	cfg->url = f->pg ? f->url : NULL;
	cfg->io = f->io;
	int rc = pc_store_open(f->rt, cfg, &f->s);
	cr_assert_eq(rc, 0, "%s", pc_store_strerror(rc));
}

/* The fixture without a store yet: a directory, a runtime, and under
 * PostgreSQL a fresh schema. */
static void fx_setup(fx_t *f)
{
	memset(f, 0, sizeof(*f));
	snprintf(f->dir, sizeof(f->dir), "/tmp/pc-store-XXXXXX");
	cr_assert_not_null(mkdtemp(f->dir));
	snprintf(f->path, sizeof(f->path), "%s/state.db", f->dir);
	f->pg = pg_test_url(f->url, sizeof(f->url));
	f->rt = start_rt(2);
	pc_io_config_t io = {.threads = 1};
	if (f->pg)
		cr_assert_eq(pc_io_new(f->rt, &io, &f->io), 0);
}

static void fx_init(fx_t *f)
{
	fx_setup(f);
	pc_store_config_t cfg;
	pc_store_config_init(&cfg);
	fx_open_cfg(f, &cfg);
}

static void fx_fini(fx_t *f)
{
	pc_store_close(f->s);
	pc_io_free(f->io);
	FREE_RUNTIME_CHECKED(f->rt);
	rm_dir(f->dir);
}

static int64_t append(pc_store_t *s, const char *key, const char *role, const char *content, const char *ids)
{
	pc_store_msg_t m = {.role = role, .content = content, .tool_call_ids = ids};
	int64_t seq = -1;
	cr_assert_eq(pc_store_append(s, key, 0, &m, &seq), 0);
	return seq;
}

/* The first column of the first row of `sql`, read from the store's
 * database behind its back. */
static int count_rows(const fx_t *f, const char *sql)
{
	if (f->pg) {
		long long v = 0;
		cr_assert(pg_test_query_int(f->url, sql, &v), "no value: %s", sql);
		return (int)v;
	}
	sqlite3 *db = NULL;
	cr_assert_eq(sqlite3_open_v2(f->path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
	sqlite3_stmt *st = NULL;
	cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
	cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
	int n = sqlite3_column_int(st, 0);
	sqlite3_finalize(st);
	sqlite3_close(db);
	return n;
}

/* ---- transcripts ---- */

Test(store, append_and_history_roundtrip)
{
	fx_t f;
	fx_init(&f);
	cr_assert_eq(append(f.s, "agent:main:main", "user", "{\"text\":\"hi\"}", NULL), 1);
	cr_assert_eq(append(f.s, "agent:main:main", "assistant", "{\"text\":\"hello\"}", "[]"), 2);
	cr_assert_eq(append(f.s, "other", "user", "\"x\"", NULL), 1);
	pc_store_history_t *h = NULL;
	cr_assert_eq(pc_store_history(f.s, "agent:main:main", &h), 0);
	cr_assert_eq(pc_store_history_count(h), 2);
	cr_assert_eq(pc_store_history_last_seq(h), 2);
	pc_store_msg_t m;
	pc_store_history_get(h, 0, &m);
	cr_assert_eq(m.seq, 1);
	cr_assert_str_eq(m.role, "user");
	cr_assert_str_eq(m.content, "{\"text\":\"hi\"}");
	cr_assert_null(m.tool_call_ids);
	cr_assert_gt(m.created_ms, 0);
	pc_store_history_get(h, 1, &m);
	cr_assert_str_eq(m.tool_call_ids, "[]");
	pc_store_history_free(h);
	cr_assert_eq(pc_store_history(f.s, "nope", &h), PC_ENOTFOUND);
	cr_assert_null(h);
	fx_fini(&f);
}

Test(store, bad_input_is_refused_and_leaves_nothing)
{
	fx_t f;
	fx_init(&f);
	pc_store_msg_t m = {.role = "user", .content = "{not json"};
	int64_t seq = 0;
	cr_assert_eq(pc_store_append(f.s, "k", 0, &m, &seq), PC_EINVAL);
	m.content = NULL;
	cr_assert_eq(pc_store_append(f.s, "k", 0, &m, &seq), PC_EINVAL);
	m.content = "{}";
	m.tool_call_ids = "not json";
	cr_assert_eq(pc_store_append(f.s, "k", 0, &m, &seq), PC_EINVAL);
	cr_assert_eq(pc_store_append(f.s, NULL, 0, &m, &seq), PC_EINVAL);
	char longkey[PC_STORE_NAME_MAX + 2];
	memset(longkey, 'k', sizeof(longkey) - 1);
	longkey[sizeof(longkey) - 1] = 0;
	m.tool_call_ids = NULL;
	cr_assert_eq(pc_store_append(f.s, longkey, 0, &m, &seq), PC_EINVAL);
	/* The failed appends took no sequence numbers. */
	cr_assert_eq(append(f.s, "k", "user", "{}", NULL), 1);
	fx_fini(&f);
}

Test(store, oversized_content_is_refused_not_dropped)
{
	fx_t f;
	fx_init(&f);
	/* A 50 MB tool result: over the 8 MiB default, refused with a code
	 * the caller can act on (truncate per spec §3.3 and retry). */
	size_t big = 50u << 20;
	char *content = malloc(big + 3);
	cr_assert_not_null(content);
	content[0] = '"';
	memset(content + 1, 'a', big);
	content[big + 1] = '"';
	content[big + 2] = 0;
	pc_store_msg_t m = {.role = "toolResult", .content = content, .tool_call_ids = "[\"c1\"]"};
	int64_t seq = 0;
	cr_assert_eq(pc_store_append(f.s, "k", 0, &m, &seq), PC_STORE_ETOOBIG);
	/* Up to the limit is kept whole. */
	size_t ok = PC_STORE_DEFAULT_MAX_CONTENT - 2;
	content[ok + 1] = '"';
	content[ok + 2] = 0;
	cr_assert_eq(pc_store_append(f.s, "k", 0, &m, &seq), 0);
	cr_assert_eq(seq, 1);
	pc_store_history_t *h = NULL;
	cr_assert_eq(pc_store_history(f.s, "k", &h), 0);
	pc_store_msg_t r;
	pc_store_history_get(h, 0, &r);
	cr_assert_eq(strlen(r.content), ok + 2);
	pc_store_history_free(h);
	free(content);
	fx_fini(&f);
}

Test(store, data_survives_reopen)
{
	fx_t f;
	fx_init(&f);
	pc_store_reply_t r;
	cr_assert_eq(pc_store_session(f.s, "s1", "main", NULL, "{\"a\":1}", &r), 0);
	cr_assert_eq(r.flags & PC_STORE_CREATED, PC_STORE_CREATED);
	char id[sizeof(r.id)];
	memcpy(id, r.id, sizeof(id));
	cr_assert_eq(strlen(id), 32);
	for (int k = 1; k <= 50; k++)
		cr_assert_eq(append(f.s, "s1", "user", "{}", NULL), k);
	pc_store_close(f.s);
	pc_store_config_t cfg;
	pc_store_config_init(&cfg);
	fx_open_cfg(&f, &cfg);
	cr_assert_eq(pc_store_session(f.s, "s1", "other", NULL, NULL, &r), 0);
	cr_assert_eq(r.flags & PC_STORE_CREATED, 0);
	cr_assert_str_eq(r.id, id);
	cr_assert_eq(append(f.s, "s1", "user", "{}", NULL), 51);
	/* The session row comes with the snapshot. */
	cr_assert_eq(pc_store_session_set(f.s, "s1", 0, "{\"compactionCount\":2}"), 0);
	pc_store_history_t *h = NULL;
	cr_assert_eq(pc_store_history(f.s, "s1", &h), 0);
	pc_store_session_t si;
	pc_store_history_session(h, &si);
	cr_assert_str_eq(si.id, id);
	cr_assert_str_eq(si.agent, "main");
	cr_assert_str_eq(si.metadata, "{\"compactionCount\":2}");
	cr_assert_geq(si.updated_ms, si.created_ms);
	cr_assert_eq(pc_store_history_count(h), 51);
	pc_store_history_free(h);
	cr_assert_eq(pc_store_session_set(f.s, "s1", 0, "{bad"), PC_EINVAL);
	cr_assert_eq(pc_store_session_set(f.s, "nope", 0, "{}"), PC_ENOTFOUND);
	cr_assert_eq(pc_store_session_set(f.s, "s1", 0, NULL), PC_EINVAL);
	int64_t e = 0;
	cr_assert_eq(pc_store_lease_acquire(f.s, "s1", "me", 60000, NULL, &e, NULL), 0);
	cr_assert_eq(pc_store_session_set(f.s, "s1", e + 1, "{}"), PC_STORE_EFENCED);
	cr_assert_eq(pc_store_session_set(f.s, "s1", e, "{}"), 0);
	fx_fini(&f);
}

Test(store, default_path_uses_pincer_home)
{
	SQLITE_ONLY("the default is a file under PINCER_HOME");
	fx_t f;
	fx_init(&f);
	char home[128], buf[256];
	snprintf(home, sizeof(home), "%s/home", f.dir);
	cr_assert_eq(setenv("PINCER_HOME", home, 1), 0);
	cr_assert_eq(pc_store_default_path(buf, sizeof(buf)), 0);
	cr_assert_eq(strncmp(buf, home, strlen(home)), 0);
	cr_assert_eq(pc_store_default_path(buf, 4), PC_ELIMIT);
	pc_store_t *s2 = NULL;
	cr_assert_eq(pc_store_open(f.rt, NULL, &s2), 0);
	cr_assert_eq(append(s2, "x", "user", "{}", NULL), 1);
	pc_store_close(s2);
	struct stat st;
	snprintf(buf, sizeof(buf), "%s/state.db", home);
	cr_assert_eq(stat(buf, &st), 0);
	unsetenv("PINCER_HOME");
	fx_fini(&f);
}

/* ---- runs, attempts, audit ---- */

Test(store, idempotency_key_returns_the_first_run)
{
	fx_t f;
	fx_init(&f);
	pc_store_reply_t r1, r2;
	cr_assert_eq(pc_store_run_begin(f.s, &(pc_store_run_new_t){.key = "s", .run_id = "run-1", .idem_key = "idem-A"}, &r1), 0);
	cr_assert_eq(r1.flags, PC_STORE_CREATED);
	cr_assert_str_eq(r1.id, "run-1");
	cr_assert_eq(r1.status, PC_STORE_RUN_ACCEPTED);
	cr_assert_eq(pc_store_run_end(f.s, &(pc_store_run_end_t){.run_id = "run-1", .status = PC_STORE_RUN_OK, .usage = "{\"input\":3,\"output\":5}"}), 0);
	/* Same key, another proposed run: the first run, not a new one. */
	cr_assert_eq(pc_store_run_begin(f.s, &(pc_store_run_new_t){.key = "s", .run_id = "run-2", .idem_key = "idem-A"}, &r2), 0);
	cr_assert_eq(r2.flags, 0);
	cr_assert_str_eq(r2.id, "run-1");
	cr_assert_eq(r2.status, PC_STORE_RUN_OK);
	/* Another key starts another run; a reused run id is refused. */
	cr_assert_eq(pc_store_run_begin(f.s, &(pc_store_run_new_t){.key = "s", .run_id = "run-2", .idem_key = "idem-B"}, &r2), 0);
	cr_assert_eq(r2.flags, PC_STORE_CREATED);
	cr_assert_eq(pc_store_run_begin(f.s, &(pc_store_run_new_t){.key = "s", .run_id = "run-2", .idem_key = NULL}, &r2), PC_EEXIST);
	cr_assert_eq(pc_store_run_end(f.s, &(pc_store_run_end_t){.run_id = "nope", .status = PC_STORE_RUN_ERROR, .error_code = "run_timeout"}), PC_ENOTFOUND);
	cr_assert_eq(pc_store_run_end(f.s, &(pc_store_run_end_t){.run_id = "run-2", .status = PC_STORE_RUN_ERROR, .error_code = "run_provider_error"}), 0);
	pc_store_reply_t g;
	cr_assert_eq(pc_store_run_get(f.s, "run-2", &g), 0);
	cr_assert_eq(g.status, PC_STORE_RUN_ERROR);
	cr_assert_str_eq(g.code, "run_provider_error");
	cr_assert_gt(g.ended_ms, 0);
	cr_assert_geq(g.ended_ms, g.started_ms);
	cr_assert_eq(pc_store_run_get(f.s, "run-1", &g), 0);
	cr_assert_eq(g.status, PC_STORE_RUN_OK);
	cr_assert_str_eq(g.code, "");
	cr_assert_eq(pc_store_run_get(f.s, "nope", &g), PC_ENOTFOUND);
	cr_assert_eq(pc_store_run_end(f.s, &(pc_store_run_end_t){.run_id = "run-2", .status = PC_STORE_RUN_OK, .usage = "{bad"}), PC_EINVAL);
	/* usage printed by the caller's JSON library is taken as it is */
	pc_msg_t *req = NULL;
	pc_store_run_end_t e = {.run_id = "run-2", .status = PC_STORE_RUN_OK, .usage = "{bad"};
	cr_assert_eq(pc_store_req_run_end(&e, &req), PC_EINVAL);
	cr_assert_null(req);
	e.flags = PC_STORE_REQ_JSON_CHECKED;
	cr_assert_eq(pc_store_req_run_end(&e, &req), 0);
	cr_assert_not_null(req);
	pc_msg_free(req);
	pc_store_attempt_t a = {.run_id = "run-1", .index = 0, .provider = "mock", .model = "m", .status = "ok",
				.duration_ms = 12};
	cr_assert_eq(pc_store_attempt(f.s, &a), 0);
	a.status = NULL;
	cr_assert_eq(pc_store_attempt(f.s, &a), PC_EINVAL);
	fx_fini(&f);
}

/* Concurrent duplicates: many threads race the same key; exactly one run
 * is created and all of them see it. */
typedef struct race {
	pc_store_t *s;
	int idx;
	pc_store_reply_t r;
	int rc;
} race_t;

static void *race_main(void *arg)
{
	race_t *x = arg;
	char run[32];
	snprintf(run, sizeof(run), "run-%d", x->idx);
	x->rc = pc_store_run_begin(x->s, &(pc_store_run_new_t){.key = "s", .run_id = run, .idem_key = "same-key"}, &x->r);
	return NULL;
}

Test(store, idempotency_under_concurrency)
{
	fx_t f;
	fx_init(&f);
	enum { N = 16 };
	pthread_t t[N];
	race_t x[N];
	for (int k = 0; k < N; k++) {
		x[k] = (race_t){.s = f.s, .idx = k};
		cr_assert_eq(pthread_create(&t[k], NULL, race_main, &x[k]), 0);
	}
	int created = 0;
	for (int k = 0; k < N; k++) {
		pthread_join(t[k], NULL);
		cr_assert_eq(x[k].rc, 0);
		created += (x[k].r.flags & PC_STORE_CREATED) != 0;
		cr_assert_str_eq(x[k].r.id, x[0].r.id);
	}
	cr_assert_eq(created, 1);
	fx_fini(&f);
}

Test(store, audit_ledger_is_metadata_only_and_bounded)
{
	fx_t f;
	fx_init(&f);
	pc_store_close(f.s);
	pc_store_config_t cfg;
	pc_store_config_init(&cfg);
	cfg.audit_max = 10;
	fx_open_cfg(&f, &cfg);
	pc_store_audit_t a = {.kind = "agent_run", .status = "started", .run_id = "r1", .session_key = "s"};
	for (int k = 0; k < 25; k++)
		cr_assert_eq(pc_store_audit(f.s, &a), 0);
	cr_assert_eq(count_rows(&f, "SELECT count(*) FROM audit"), 10);
	/* Non-success needs a run_* / tool_* code; kinds and statuses are closed sets. */
	a.status = "failed";
	cr_assert_eq(pc_store_audit(f.s, &a), PC_EINVAL);
	a.code = "boom: raw error text";
	cr_assert_eq(pc_store_audit(f.s, &a), PC_EINVAL);
	a.code = "run_timeout";
	cr_assert_eq(pc_store_audit(f.s, &a), 0);
	a.kind = "tool_action";
	a.tool_name = "exec";
	a.status = "weird";
	cr_assert_eq(pc_store_audit(f.s, &a), PC_EINVAL);
	/* Old records age out. */
	a.status = "succeeded";
	a.code = NULL;
	a.ts_ms = 1000;
	cr_assert_eq(pc_store_audit(f.s, &a), 0);
	cr_assert_eq(count_rows(&f, "SELECT count(*) FROM audit WHERE ts_ms = 1000"), 0);
	fx_fini(&f);
}

Test(store, idempotency_keys_are_the_sessions_and_remember_what_was_asked)
{
	fx_t f;
	fx_init(&f);
	pc_store_reply_t r;
	pc_store_run_new_t a = {.key = "s1", .run_id = "r1", .idem_key = "k", .fingerprint = "fp-1"};
	cr_assert_eq(pc_store_run_begin(f.s, &a, &r), 0);
	cr_assert_eq(r.flags, PC_STORE_CREATED);
	/* the same key in another session is another request */
	pc_store_run_new_t b = {.key = "s2", .run_id = "r2", .idem_key = "k", .fingerprint = "fp-1"};
	cr_assert_eq(pc_store_run_begin(f.s, &b, &r), 0);
	cr_assert_eq(r.flags, PC_STORE_CREATED);
	/* a repeat asking the same: the first run, no mismatch */
	pc_store_run_new_t same = {.key = "s1", .run_id = "r3", .idem_key = "k", .fingerprint = "fp-1"};
	cr_assert_eq(pc_store_run_begin(f.s, &same, &r), 0);
	cr_assert_eq(r.flags, 0);
	cr_assert_str_eq(r.id, "r1");
	/* a repeat asking something else: the first run, flagged */
	pc_store_run_new_t other = {.key = "s1", .run_id = "r3", .idem_key = "k", .fingerprint = "fp-2"};
	cr_assert_eq(pc_store_run_begin(f.s, &other, &r), 0);
	cr_assert_eq(r.flags, PC_STORE_MISMATCH);
	cr_assert_str_eq(r.id, "r1");
	fx_fini(&f);
}

Test(store, idempotency_keys_are_forgotten_after_their_time)
{
	fx_t f;
	fx_init(&f);
	pc_store_close(f.s);
	pc_store_config_t cfg;
	pc_store_config_init(&cfg);
	cfg.idem_ttl_ms = 30;
	fx_open_cfg(&f, &cfg);
	pc_store_reply_t r;
	cr_assert_eq(pc_store_run_begin(f.s, &(pc_store_run_new_t){.key = "s", .run_id = "r1", .idem_key = "k"}, &r), 0);
	cr_assert_eq(pc_store_run_begin(f.s, &(pc_store_run_new_t){.key = "s", .run_id = "r2", .idem_key = "k"}, &r), 0);
	cr_assert_str_eq(r.id, "r1", "kept within its time");
	sleep_ms(60);
	cr_assert_eq(pc_store_run_begin(f.s, &(pc_store_run_new_t){.key = "s", .run_id = "r2", .idem_key = "k"}, &r), 0);
	cr_assert_eq(r.flags, PC_STORE_CREATED, "an expired key starts a new run");
	cr_assert_eq(pc_store_run_begin(f.s, &(pc_store_run_new_t){.key = "s", .run_id = "r3", .idem_key = "k"}, &r), 0);
	cr_assert_str_eq(r.id, "r2", "and the new run holds the key from then on");
	fx_fini(&f);
}

Test(store, open_runs_list_what_a_restart_must_run_or_end)
{
	fx_t f;
	fx_init(&f);
	pc_store_reply_t r;
	pc_store_run_new_t q1 = {.key = "s", .run_id = "r1", .owner = "p1", .prompt = "{\"message\":\"a\"}"};
	pc_store_run_new_t q2 = {.key = "s", .run_id = "r2", .owner = "p1", .prompt = "{\"message\":\"b\"}"};
	pc_store_run_new_t q3 = {.key = "t", .run_id = "r3", .owner = "p2"};
	cr_assert_eq(pc_store_run_begin(f.s, &q1, &r), 0);
	cr_assert_eq(pc_store_run_begin(f.s, &q2, &r), 0);
	cr_assert_eq(pc_store_run_begin(f.s, &q3, &r), 0);
	pc_store_msg_t m = {.role = "user", .content = "{}", .run_id = "r1"};
	cr_assert_eq(pc_store_append(f.s, "s", 0, &m, NULL), 0);
	cr_assert_eq(pc_store_run_end(f.s, &(pc_store_run_end_t){.run_id = "r3", .status = PC_STORE_RUN_OK}), 0);
	pc_store_open_runs_t *l = NULL;
	cr_assert_eq(pc_store_runs_open(f.s, &l), 0);
	cr_assert_eq(pc_store_open_runs_count(l), 2, "an ended run is not open");
	pc_store_open_run_t o;
	pc_store_open_runs_get(l, 0, &o);
	cr_assert_str_eq(o.run_id, "r1");
	cr_assert_str_eq(o.key, "s");
	cr_assert_str_eq(o.owner, "p1");
	cr_assert_str_eq(o.prompt, "{\"message\":\"a\"}");
	cr_assert(o.started, "its user turn is in the transcript");
	cr_assert_gt(o.accepted_ms, 0);
	pc_store_open_runs_get(l, 1, &o);
	cr_assert_str_eq(o.run_id, "r2");
	cr_assert_not(o.started);
	pc_store_open_runs_free(l);
	/* one adopter wins; an ended run is nobody's to adopt */
	cr_assert_eq(pc_store_run_adopt(f.s, "r2", "p1", "p3"), 0);
	cr_assert_eq(pc_store_run_adopt(f.s, "r2", "p1", "p4"), PC_STORE_EFENCED);
	cr_assert_eq(pc_store_run_adopt(f.s, "r3", "p2", "p4"), PC_STORE_EFENCED);
	/* the prompt goes with the run's end */
	cr_assert_eq(pc_store_run_end(f.s, &(pc_store_run_end_t){.run_id = "r2", .status = PC_STORE_RUN_OK}), 0);
	cr_assert_eq(pc_store_runs_open(f.s, &l), 0);
	cr_assert_eq(pc_store_open_runs_count(l), 1);
	pc_store_open_runs_free(l);
	cr_assert_eq(pc_store_req_run_begin(&(pc_store_run_new_t){.key = "s", .run_id = "r9", .prompt = "{"}, &(pc_msg_t *){NULL}),
		     PC_EINVAL, "a prompt must be JSON");
	fx_fini(&f);
}

/* In a cluster a run moves from a node only once that node is gone, a node
 * claims its own run only while it is live, and the first end of a run
 * stands (a node that lost the run ends it late). */
Test(store, a_run_leaves_a_node_only_once_the_node_is_gone)
{
	fx_t f;
	fx_init(&f);
	cr_assert_eq(pc_store_node_beat(f.s, "node-a", NULL, "proc-a", 60000, true, NULL), 0);
	cr_assert_eq(pc_store_node_beat(f.s, "node-b", NULL, "proc-b", 60000, true, NULL), 0);
	for (int i = 1; i <= 3; i++) {
		char id[8];
		snprintf(id, sizeof(id), "r%d", i);
		cr_assert_eq(pc_store_run_begin(f.s, &(pc_store_run_new_t){.key = "s", .run_id = id, .owner = "proc-a",
									   .prompt = "{}"}, NULL),
			     0);
	}
	cr_assert_eq(pc_store_run_adopt(f.s, "r1", "proc-a", "proc-b"), PC_EBUSY, "a live node's run is its own");
	cr_assert_eq(pc_store_run_adopt(f.s, "r1", "proc-a", "proc-a"), 0, "a live node claims its own");
	cr_assert_eq(pc_store_run_adopt(f.s, "r1", "proc-b", "proc-b"), PC_STORE_EFENCED, "not its run");
	/* node-a leaves: its runs go to the first node that asks, once */
	cr_assert_eq(pc_store_node_beat(f.s, "node-a", NULL, "proc-a", 0, false, NULL), 0);
	cr_assert_eq(pc_store_run_adopt(f.s, "r1", "proc-a", "proc-a"), PC_ESTATE, "a node out claims nothing");
	cr_assert_eq(pc_store_run_adopt(f.s, "r1", "proc-a", "proc-b"), 0);
	cr_assert_eq(pc_store_run_adopt(f.s, "r1", "proc-a", "proc-c"), PC_STORE_EFENCED);
	/* an owner that never was a node (a process of this machine) is adopted as before */
	cr_assert_eq(pc_store_run_begin(f.s, &(pc_store_run_new_t){.key = "s", .run_id = "r4", .owner = "gone-proc",
								   .prompt = "{}"}, NULL),
		     0);
	cr_assert_eq(pc_store_run_adopt(f.s, "r4", "gone-proc", "proc-b"), 0);
	/* the first end stands */
	cr_assert_eq(pc_store_run_end(f.s, &(pc_store_run_end_t){.run_id = "r2", .status = PC_STORE_RUN_ERROR,
								  .error_code = "node_lost"}),
		     0);
	cr_assert_eq(pc_store_run_end(f.s, &(pc_store_run_end_t){.run_id = "r2", .status = PC_STORE_RUN_ABORTED,
								  .error_code = "run_aborted"}),
		     PC_STORE_EFENCED);
	pc_store_reply_t r;
	cr_assert_eq(pc_store_run_get(f.s, "r2", &r), 0);
	cr_assert_eq(r.status, PC_STORE_RUN_ERROR);
	cr_assert_str_eq(r.code, "node_lost");
	cr_assert_eq(pc_store_run_end(f.s, &(pc_store_run_end_t){.run_id = "r-none", .status = PC_STORE_RUN_OK}),
		     PC_ENOTFOUND);
	fx_fini(&f);
}

/* A run's end keeps whether running it again could repeat what its tools
 * did, and a run read back says so; a later end refused changes nothing. */
Test(store, a_run_s_end_keeps_whether_it_is_replay_invalid)
{
	fx_t f;
	fx_init(&f);
	for (int i = 1; i <= 3; i++) {
		char id[8];
		snprintf(id, sizeof(id), "r%d", i);
		cr_assert_eq(pc_store_run_begin(f.s, &(pc_store_run_new_t){.key = "s", .run_id = id}, NULL), 0);
	}
	cr_assert_eq(pc_store_run_end(f.s, &(pc_store_run_end_t){.run_id = "r1", .status = PC_STORE_RUN_ERROR,
								  .error_code = "node_lost", .replay_invalid = true}),
		     0);
	cr_assert_eq(pc_store_run_end(f.s, &(pc_store_run_end_t){.run_id = "r2", .status = PC_STORE_RUN_ERROR,
								  .error_code = "node_lost"}),
		     0);
	cr_assert_eq(pc_store_run_end(f.s, &(pc_store_run_end_t){.run_id = "r2", .status = PC_STORE_RUN_ERROR,
								  .replay_invalid = true}),
		     PC_STORE_EFENCED);
	pc_store_reply_t r;
	cr_assert_eq(pc_store_run_get(f.s, "r1", &r), 0);
	cr_assert_eq(r.flags & PC_STORE_REPLAY_INVALID, PC_STORE_REPLAY_INVALID);
	cr_assert_str_eq(r.code, "node_lost");
	cr_assert_eq(pc_store_run_get(f.s, "r2", &r), 0);
	cr_assert_eq(r.flags & PC_STORE_REPLAY_INVALID, 0u);
	cr_assert_eq(pc_store_run_get(f.s, "r3", &r), 0);
	cr_assert_eq(r.flags & PC_STORE_REPLAY_INVALID, 0u, "a run still open");
	fx_fini(&f);
}

Test(store, a_lease_names_its_holder_and_can_be_taken_from_a_gone_one)
{
	fx_t f;
	fx_init(&f);
	int64_t e1 = 0, e2 = 0;
	char busy[PC_STORE_ID_MAX + 1];
	cr_assert_eq(pc_store_lease_acquire(f.s, "s", "node-a", 60000, NULL, &e1, NULL), 0);
	cr_assert_eq(pc_store_lease_acquire(f.s, "s", "node-b", 60000, NULL, &e2, busy), PC_EBUSY);
	cr_assert_str_eq(busy, "node-a");
	/* only the holder named can be stolen from */
	cr_assert_eq(pc_store_lease_acquire(f.s, "s", "node-b", 60000, "node-x", &e2, busy), PC_EBUSY);
	cr_assert_eq(pc_store_lease_acquire(f.s, "s", "node-b", 60000, "node-a", &e2, busy), 0);
	cr_assert_eq(e2, e1 + 1, "a new holder fences the old one");
	pc_store_msg_t m = {.role = "user", .content = "{}"};
	cr_assert_eq(pc_store_append(f.s, "s", e1, &m, NULL), PC_STORE_EFENCED);
	fx_fini(&f);
}

/* ---- leases and fencing ---- */

/* The test hook: one session's lease answers go late, nobody else's. */
Test(store, the_test_hook_delays_one_sessions_lease_answers)
{
	fx_t f;
	fx_setup(&f);
	pc_store_config_t cfg;
	pc_store_config_init(&cfg);
	cfg.test_lease_delay_key = "slow";
	cfg.test_lease_delay_ms = 300;
	fx_open_cfg(&f, &cfg);
	int64_t e = 0;
	uint64_t t0 = now_ms();
	cr_assert_eq(pc_store_lease_acquire(f.s, "fast", "me", 60000, NULL, &e, NULL), 0);
	cr_assert_lt(now_ms() - t0, 250u);
	t0 = now_ms();
	cr_assert_eq(pc_store_lease_acquire(f.s, "slow", "me", 60000, NULL, &e, NULL), 0);
	cr_assert_geq(now_ms() - t0, 300u);
	cr_assert_eq(e, 1, "late, not lost");
	fx_fini(&f);
}

Test(store, lease_epochs_fence_stale_writers)
{
	fx_t f;
	fx_init(&f);
	int64_t e1 = 0, e2 = 0, seq = 0;
	cr_assert_eq(pc_store_lease_acquire(f.s, "s", "node-a", 60000, NULL, &e1, NULL), 0);
	cr_assert_eq(e1, 1);
	cr_assert_eq(pc_store_lease_acquire(f.s, "s", "node-b", 60000, NULL, &e2, NULL), PC_EBUSY);
	cr_assert_eq(pc_store_lease_acquire(f.s, "s", "node-a", 60000, NULL, &e2, NULL), 0);
	cr_assert_eq(e2, e1, "a renewal keeps the epoch");
	pc_store_msg_t m = {.role = "user", .content = "{}"};
	cr_assert_eq(pc_store_append(f.s, "s", e1, &m, &seq), 0);
	cr_assert_eq(pc_store_lease_release(f.s, "s", "node-a", e1), 0);
	cr_assert_eq(pc_store_lease_acquire(f.s, "s", "node-b", 1, NULL, &e2, NULL), 0);
	cr_assert_eq(e2, 2);
	/* node-a still thinks it owns the session: its writes are refused. */
	cr_assert_eq(pc_store_append(f.s, "s", e1, &m, &seq), PC_STORE_EFENCED);
	cr_assert_eq(pc_store_rewrite(f.s, "s", e1, 1, 1, NULL, 0, &seq), PC_STORE_EFENCED);
	cr_assert_eq(pc_store_lease_release(f.s, "s", "node-a", e1), PC_STORE_EFENCED);
	cr_assert_eq(pc_store_append(f.s, "s", e2, &m, &seq), 0);
	cr_assert_eq(seq, 2);
	/* so is a run's end fenced by its session's lease, the row untouched */
	pc_store_reply_t r;
	cr_assert_eq(pc_store_run_begin(f.s, &(pc_store_run_new_t){.key = "s", .run_id = "fr"}, &r), 0);
	pc_store_run_end_t end = {.run_id = "fr", .status = PC_STORE_RUN_OK, .key = "s", .epoch = e1};
	cr_assert_eq(pc_store_run_end(f.s, &end), PC_STORE_EFENCED);
	cr_assert_eq(pc_store_run_get(f.s, "fr", &r), 0);
	cr_assert_eq(r.status, PC_STORE_RUN_ACCEPTED);
	end.key = NULL;
	cr_assert_eq(pc_store_run_end(f.s, &end), PC_EINVAL, "an epoch without its session");
	end.key = "s";
	end.epoch = e2;
	cr_assert_eq(pc_store_run_end(f.s, &end), 0);
	cr_assert_eq(pc_store_run_get(f.s, "fr", &r), 0);
	cr_assert_eq(r.status, PC_STORE_RUN_OK);
	/* An expired lease can be taken by anyone, with a new epoch. */
	sleep_ms(5);
	int64_t e3 = 0;
	cr_assert_eq(pc_store_lease_acquire(f.s, "s", "node-c", 1000, NULL, &e3, NULL), 0);
	cr_assert_eq(e3, 3);
	cr_assert_eq(pc_store_lease_acquire(f.s, "s", "node-a", 0, NULL, &e3, NULL), PC_EINVAL);
	fx_fini(&f);
}

/* Refused writes fail alone: a batch holding a refused lease take and
 * fenced appends commits everything else in it (bad JSON never gets in). */
Test(store, a_refused_write_does_not_fail_its_batch)
{
	fx_t f;
	fx_init(&f);
	pc_store_close(f.s);
	pc_store_config_t cfg;
	pc_store_config_init(&cfg);
	cfg.window_ms = 200; /* everything below lands in one batch */
	fx_open_cfg(&f, &cfg);
	int64_t e = 0;
	cr_assert_eq(pc_store_lease_acquire(f.s, "s", "node-a", 60000, NULL, &e, NULL), 0);
	pc_actor_t *st = pc_store_actor(f.s);
	for (int k = 0; k < 20; k++) {
		pc_store_msg_t m = {.role = "user", .content = k % 5 == 4 ? "{bad" : "{}"};
		pc_msg_t *req = NULL;
		/* malformed JSON is refused before it is sent */
		int rc = pc_store_req_append("s", k % 7 == 6 ? e + 1 : 0, &m, &req);
		cr_assert_eq(rc, k % 5 == 4 ? PC_EINVAL : 0);
		if (rc == 0)
			cr_assert_eq(pc_send(st, req), 0);
	}
	cr_assert_eq(pc_store_lease_acquire(f.s, "s", "node-b", 60000, NULL, &e, NULL), PC_EBUSY);
	pc_store_stats_t stats;
	pc_store_stats(f.s, &stats);
	cr_assert_eq(stats.failed_batches, 0);
	cr_assert_leq(stats.batches, 3);
	/* 20 sends: 4 with bad JSON (k = 4, 9, 14, 19), 2 fenced (k = 6, 13). */
	cr_assert_eq(count_rows(&f, "SELECT count(*) FROM messages"), 14);
	fx_fini(&f);
}

/* ---- the writer's session cache ---- */

/* Runs SQL on the store's database, as another writer would. */
static void exec_at(const fx_t *f, const char *sql)
{
	if (f->pg) {
		pg_test_exec(f->url, sql);
		return;
	}
	sqlite3 *db = NULL;
	cr_assert_eq(sqlite3_open(f->path, &db), SQLITE_OK);
	cr_assert_eq(sqlite3_busy_timeout(db, 5000), SQLITE_OK);
	cr_assert_eq(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK, "%s", sqlite3_errmsg(db));
	sqlite3_close(db);
}

static void assert_no_failed_batch(pc_store_t *s)
{
	pc_store_stats_t stats;
	pc_store_stats(s, &stats);
	cr_assert_eq(stats.failed_batches, 0);
}

/* Another connection (another process sharing the file, or another
 * gateway on the same PostgreSQL database) takes the lease and appends
 * between two of this writer's transactions: the writer's cached view of
 * the session is dropped, so the stale epoch is fenced and the seq goes on
 * from the other writer's. */
Test(store, another_writers_commit_is_seen)
{
	fx_t f;
	fx_init(&f);
	int64_t e1 = 0, seq = 0;
	cr_assert_eq(pc_store_lease_acquire(f.s, "s", "node-a", 60000, NULL, &e1, NULL), 0);
	pc_store_msg_t m = {.role = "user", .content = "{}"};
	cr_assert_eq(pc_store_append(f.s, "s", e1, &m, &seq), 0);
	cr_assert_eq(seq, 1);
	exec_at(&f, "UPDATE sessions SET lease_owner = 'node-b', lease_epoch = lease_epoch + 1 WHERE key = 's'");
	cr_assert_eq(pc_store_append(f.s, "s", e1, &m, &seq), PC_STORE_EFENCED);
	cr_assert_eq(pc_store_append(f.s, "s", e1 + 1, &m, &seq), 0);
	cr_assert_eq(seq, 2);
#define ANOTHER_APPEND                                                                             \
	"INSERT INTO messages(session_id, seq, role, content, created_ms)"                         \
	" SELECT sid, 3, 'user', '{}', 1 FROM sessions WHERE key = 's';"                           \
	"UPDATE sessions SET last_seq = 3 WHERE key = 's';"                                        \
	"COMMIT;"
	exec_at(&f, f.pg ? "BEGIN;" ANOTHER_APPEND : "BEGIN IMMEDIATE;" ANOTHER_APPEND);
#undef ANOTHER_APPEND
	cr_assert_eq(pc_store_append(f.s, "s", e1 + 1, &m, &seq), 0);
	cr_assert_eq(seq, 4);
	assert_no_failed_batch(f.s);
	fx_fini(&f);
}

/* Run counts kept in the cache reach the session rows at commit, for
 * sessions the writer holds and for those it does not. */
Test(store, run_counts_of_cached_sessions_are_written)
{
	fx_t f;
	fx_init(&f);
	append(f.s, "a", "user", "{}", NULL);
	pc_store_reply_t r;
	cr_assert_eq(pc_store_run_begin(f.s, &(pc_store_run_new_t){.key = "a", .run_id = "r1", .idem_key = NULL}, &r), 0);
	cr_assert_eq(pc_store_run_begin(f.s, &(pc_store_run_new_t){.key = "a", .run_id = "r2", .idem_key = NULL}, &r), 0);
	cr_assert_eq(append(f.s, "a", "assistant", "{}", NULL), 2);
	cr_assert_eq(pc_store_run_begin(f.s, &(pc_store_run_new_t){.key = "b", .run_id = "r3", .idem_key = NULL}, &r), 0);
	cr_assert_eq(count_rows(&f, "SELECT run_count FROM sessions WHERE key = 'a'"), 2);
	cr_assert_eq(count_rows(&f, "SELECT last_run_id = 'r2' FROM sessions WHERE key = 'a'"), 1);
	cr_assert_eq(count_rows(&f, "SELECT last_seq FROM sessions WHERE key = 'a'"), 2);
	cr_assert_eq(count_rows(&f, "SELECT run_count FROM sessions WHERE key = 'b'"), 1);
	cr_assert_eq(count_rows(&f, "SELECT last_seq FROM sessions WHERE key = 'b'"), 0);
	fx_fini(&f);
}

/* More sessions than the cache holds (4,096), two appends each, sent
 * without waiting: every seq is right and every row says so. */
Test(store, more_sessions_than_the_cache_holds)
{
	fx_t f;
	fx_init(&f);
	pc_actor_t *st = pc_store_actor(f.s);
	enum { N = 5000 };
	for (int round = 0; round < 2; round++) {
		for (int k = 0; k < N; k++) {
			char key[32];
			snprintf(key, sizeof(key), "s%d", k);
			pc_store_msg_t m = {.role = "user", .content = "{}"};
			pc_msg_t *req = NULL;
			cr_assert_eq(pc_store_req_append(key, 0, &m, &req), 0);
			cr_assert_eq(pc_send(st, req), 0);
		}
	}
	/* answered after everything sent before it */
	cr_assert_eq(append(f.s, "last", "user", "{}", NULL), 1);
	cr_assert_eq(count_rows(&f, "SELECT count(*) FROM messages"), 2 * N + 1);
	cr_assert_eq(count_rows(&f, "SELECT count(*) FROM sessions WHERE last_seq = 2"), N);
	cr_assert_eq(count_rows(&f, "SELECT count(*) FROM (SELECT session_id FROM messages"
				    " GROUP BY session_id HAVING min(seq) = 1 AND max(seq) = 2) AS t"),
		     N);
	assert_no_failed_batch(f.s);
	fx_fini(&f);
}

/* ---- rewrite and repair ---- */

Test(store, rewrite_is_atomic_and_guarded)
{
	fx_t f;
	fx_init(&f);
	for (int k = 0; k < 6; k++)
		append(f.s, "s", k % 2 ? "assistant" : "user", "{\"n\":0}", NULL);
	pc_store_history_t *h = NULL;
	cr_assert_eq(pc_store_history(f.s, "s", &h), 0);
	int64_t last = pc_store_history_last_seq(h);
	cr_assert_eq(last, 6);
	/* Compaction: messages 1..4 become one summary, 5 and 6 are kept. */
	pc_store_msg_t nm[3] = {{.role = "system", .content = "{\"summary\":\"s\"}"}};
	pc_store_history_get(h, 4, &nm[1]);
	pc_store_history_get(h, 5, &nm[2]);
	int64_t new_last = 0;
	/* Something was appended since the snapshot: refused, unchanged. */
	append(f.s, "s", "user", "{\"late\":1}", NULL);
	cr_assert_eq(pc_store_rewrite(f.s, "s", 0, last, 1, nm, 3, &new_last), PC_STORE_ECONFLICT);
	cr_assert_eq(pc_store_rewrite(f.s, "s", 0, last + 1, 1, nm, 3, &new_last), 0);
	cr_assert_eq(new_last, 10);
	pc_store_history_free(h);
	cr_assert_eq(pc_store_history(f.s, "s", &h), 0);
	cr_assert_eq(pc_store_history_count(h), 3);
	pc_store_msg_t m;
	pc_store_history_get(h, 0, &m);
	cr_assert_str_eq(m.content, "{\"summary\":\"s\"}");
	cr_assert_eq(m.seq, 8);
	pc_store_history_free(h);
	/* A rewrite with one bad message changes nothing at all. */
	pc_store_msg_t bad[2] = {{.role = "user", .content = "{}"}, {.role = "user", .content = "{oops"}};
	cr_assert_eq(pc_store_rewrite(f.s, "s", 0, 10, 1, bad, 2, &new_last), PC_EINVAL);
	cr_assert_eq(pc_store_history(f.s, "s", &h), 0);
	cr_assert_eq(pc_store_history_count(h), 3);
	cr_assert_eq(pc_store_history_last_seq(h), 10);
	pc_store_history_free(h);
	/* Truncation (no new messages) still moves last_seq on. */
	cr_assert_eq(pc_store_rewrite(f.s, "s", 0, 10, 10, NULL, 0, &new_last), 0);
	cr_assert_eq(new_last, 11);
	cr_assert_eq(pc_store_rewrite(f.s, "nope", 0, 0, 1, NULL, 0, &new_last), PC_ENOTFOUND);
	fx_fini(&f);
}

Test(store, a_rewrite_waits_for_the_session_write_lock)
{
	fx_t f;
	fx_init(&f);
	for (int k = 0; k < 4; k++)
		append(f.s, "s", "user", "{\"n\":1}", NULL);
	char locks[300];
	snprintf(locks, sizeof(locks), "%s/locks", f.dir);
	/* Someone else holds the session (the lock is not reentrant, so this
	 * process's own hold excludes the rewrite like another process's). */
	pc_session_lock_opts_t o;
	pc_session_lock_opts_init(&o);
	o.timeout_ms = 0;
	pc_session_lock_t *held = NULL;
	cr_assert_eq(pc_session_lock_acquire(locks, "s", &o, &held, NULL), 0);
	o.timeout_ms = 150;
	pc_store_msg_t summary = {.role = "system", .content = "{\"summary\":1}"};
	int64_t last = 0;
	pc_session_lock_info_t busy;
	uint64_t t0 = now_ms();
	cr_assert_eq(pc_store_rewrite_locked(f.s, locks, &o, "s", 0, 4, 1, &summary, 1, &last, &busy), PC_EBUSY);
	cr_assert(now_ms() - t0 >= 150);
	cr_assert_eq(busy.pid, getpid());
	pc_store_history_t *h = NULL;
	cr_assert_eq(pc_store_history(f.s, "s", &h), 0);
	cr_assert_eq(pc_store_history_count(h), 4, "a refused rewrite changed the transcript");
	pc_store_history_free(h);
	/* Released: the rewrite goes through, and leaves the lock free. */
	cr_assert_eq(pc_session_lock_release(held), 0);
	cr_assert_eq(pc_store_rewrite_locked(f.s, locks, &o, "s", 0, 4, 1, &summary, 1, &last, NULL), 0);
	cr_assert_eq(pc_store_history(f.s, "s", &h), 0);
	cr_assert_eq(pc_store_history_count(h), 1);
	pc_store_history_free(h);
	o.timeout_ms = 0;
	cr_assert_eq(pc_session_lock_acquire(locks, "s", &o, &held, NULL), 0);
	cr_assert_eq(pc_session_lock_release(held), 0);
	cr_assert_eq(pc_session_lock_sweep(locks, NULL), 0);
	rmdir(locks);
	fx_fini(&f);
}

static pc_store_msg_t M(const char *role, const char *content, const char *ids)
{
	return (pc_store_msg_t){.role = role, .content = content, .tool_call_ids = ids};
}

Test(store, repair_tool_pairs)
{
	pc_store_msg_t in[] = {
		M("user", "{}", NULL),
		M("toolResult", "{\"o\":0}", "[\"zz\"]"),                  /* orphan: no call */
		M("assistant", "{}", "[\"a\",\"b\",\"c\"]"),
		M("toolResult", "{\"r\":\"b\"}", "[\"b\"]"),               /* out of order: moved */
		M("user", "{\"steer\":1}", NULL),                          /* stays after the results */
		M("toolResult", "{\"r\":\"a\"}", "\"a\""),                 /* plain string id */
		M("toolResult", "{\"r\":\"a2\"}", "[\"a\"]"),              /* duplicate */
		M("assistant", "{\"stopReason\":\"aborted\"}", "[\"d\"]"), /* errored turn */
		M("toolResult", "{\"r\":\"d\"}", "[\"d\"]"),
		M("assistant", "{}", "[\"e\"]"),                            /* result never came */
	};
	size_t n = sizeof(in) / sizeof(*in);
	pc_store_repaired_t *r = NULL;
	pc_store_repair_stats_t st;
	cr_assert_eq(pc_store_repair_tool_pairs(in, n, &r, &st), 0);
	const pc_store_msg_t *o = pc_store_repaired_msgs(r);
	cr_assert_eq(pc_store_repaired_count(r), 9);
	cr_assert_str_eq(o[0].role, "user");
	cr_assert_str_eq(o[1].role, "assistant");
	cr_assert_str_eq(o[2].content, "{\"r\":\"a\"}");
	cr_assert_str_eq(o[3].content, "{\"r\":\"b\"}");
	cr_assert_str_eq(o[4].role, "toolResult"); /* c: synthetic */
	cr_assert(strstr(o[4].content, "missing tool result in session history"));
	cr_assert_str_eq(o[4].tool_call_ids, "[\"c\"]");
	cr_assert_str_eq(o[5].content, "{\"steer\":1}");
	cr_assert_str_eq(o[6].content, "{\"stopReason\":\"aborted\"}");
	cr_assert_str_eq(o[7].role, "assistant");
	cr_assert_str_eq(o[8].tool_call_ids, "[\"e\"]");
	cr_assert_eq(st.orphans, 1);
	cr_assert_eq(st.duplicates, 1);
	cr_assert_eq(st.synthesized, 2);
	cr_assert_eq(st.errored, 1);
	cr_assert_eq(st.moved, 2);
	pc_store_repaired_free(r);
	/* A clean transcript comes out as it went in. */
	pc_store_msg_t ok[] = {M("user", "{}", NULL), M("assistant", "{}", "[\"x\"]"),
			       M("toolResult", "{}", "[\"x\"]"), M("assistant", "{}", NULL)};
	cr_assert_eq(pc_store_repair_tool_pairs(ok, 4, &r, &st), 0);
	cr_assert_eq(pc_store_repaired_count(r), 4);
	cr_assert_eq(st.moved + st.synthesized + st.orphans + st.duplicates + st.errored, 0);
	pc_store_repaired_free(r);
	cr_assert_eq(pc_store_repair_tool_pairs(NULL, 0, &r, NULL), 0);
	cr_assert_eq(pc_store_repaired_count(r), 0);
	pc_store_repaired_free(r);
	cr_assert_eq(pc_store_repair_tool_pairs(NULL, 1, &r, NULL), PC_EINVAL);
	ASSERT_NO_LEAKS();
}

Test(store, repaired_history_round_trips_through_rewrite)
{
	fx_t f;
	fx_init(&f);
	append(f.s, "s", "user", "{}", NULL);
	append(f.s, "s", "assistant", "{}", "[\"c1\"]");
	append(f.s, "s", "user", "{\"next\":1}", NULL);
	pc_store_history_t *h = NULL;
	cr_assert_eq(pc_store_history(f.s, "s", &h), 0);
	size_t n = pc_store_history_count(h);
	pc_store_msg_t v[3];
	for (size_t k = 0; k < n; k++)
		pc_store_history_get(h, k, &v[k]);
	pc_store_repaired_t *r = NULL;
	cr_assert_eq(pc_store_repair_tool_pairs(v, n, &r, NULL), 0);
	cr_assert_eq(pc_store_repaired_count(r), 4);
	int64_t last = 0;
	cr_assert_eq(pc_store_rewrite(f.s, "s", 0, pc_store_history_last_seq(h), 1, pc_store_repaired_msgs(r),
				      pc_store_repaired_count(r), &last),
		     0);
	pc_store_repaired_free(r);
	pc_store_history_free(h);
	cr_assert_eq(pc_store_history(f.s, "s", &h), 0);
	cr_assert_eq(pc_store_history_count(h), 4);
	pc_store_msg_t m;
	pc_store_history_get(h, 2, &m);
	cr_assert_str_eq(m.role, "toolResult");
	pc_store_history_free(h);
	fx_fini(&f);
}

/* ---- group commit ---- */

typedef struct writer {
	pc_store_t *s;
	int idx, n;
	int fails;
} writer_t;

static void *writer_main(void *arg)
{
	writer_t *w = arg;
	char key[32], content[64];
	snprintf(key, sizeof(key), "sess-%d", w->idx % 4);
	for (int k = 0; k < w->n; k++) {
		snprintf(content, sizeof(content), "{\"w\":%d,\"k\":%d}", w->idx, k);
		pc_store_msg_t m = {.role = "user", .content = content};
		int64_t seq = 0;
		if (pc_store_append(w->s, key, 0, &m, &seq) != 0 || seq <= 0)
			w->fails++;
	}
	return NULL;
}

Test(store, concurrent_appends_from_threads_get_unique_contiguous_seqs)
{
	fx_t f;
	fx_init(&f);
	enum { T = 8, N = 200 };
	pthread_t t[T];
	writer_t w[T];
	for (int k = 0; k < T; k++) {
		w[k] = (writer_t){.s = f.s, .idx = k, .n = N};
		cr_assert_eq(pthread_create(&t[k], NULL, writer_main, &w[k]), 0);
	}
	for (int k = 0; k < T; k++) {
		pthread_join(t[k], NULL);
		cr_assert_eq(w[k].fails, 0);
	}
	for (int sidx = 0; sidx < 4; sidx++) {
		char key[32];
		snprintf(key, sizeof(key), "sess-%d", sidx);
		pc_store_history_t *h = NULL;
		cr_assert_eq(pc_store_history(f.s, key, &h), 0);
		cr_assert_eq(pc_store_history_count(h), (size_t)(T / 4 * N));
		for (size_t k = 0; k < pc_store_history_count(h); k++) {
			pc_store_msg_t m;
			pc_store_history_get(h, k, &m);
			cr_assert_eq(m.seq, (int64_t)k + 1);
		}
		pc_store_history_free(h);
	}
	/* Fewer transactions than appends: writes were grouped. */
	pc_store_stats_t st;
	pc_store_stats(f.s, &st);
	cr_assert_eq(st.writes, (uint64_t)(T * N));
	cr_assert_lt(st.batches, st.writes);
	cr_assert_eq(st.failed_batches, 0);
	fx_fini(&f);
}

/* ---- session listings ---- */

/* Runs SQL on the closed store's file (times chosen by the test, ties
 * included, rather than what the clock gave). */
static void exec_sql(const fx_t *f, const char *sql)
{
	if (f->pg) {
		pg_test_exec(f->url, sql);
		return;
	}
	sqlite3 *db = NULL;
	cr_assert_eq(sqlite3_open(f->path, &db), SQLITE_OK);
	cr_assert_eq(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK, "%s", sqlite3_errmsg(db));
	sqlite3_close(db);
}

/*
 * Five sessions:   key  created  updated  messages  runs
 *                  a    100      500      2         r-a1, r-a2
 *                  b    200      500      0         r-b1
 *                  c    200      300      1         -
 *                  d    50       900      0         -
 *                  e    300      100      0         -
 */
static void fx_five(fx_t *f)
{
	fx_init(f);
	pc_store_reply_t r;
	const char *keys[] = {"a", "b", "c", "d", "e"};
	for (size_t i = 0; i < 5; i++)
		cr_assert_eq(pc_store_session(f->s, keys[i], i == 0 ? "main" : NULL, NULL, NULL, &r), 0);
	append(f->s, "a", "user", "{}", NULL);
	append(f->s, "a", "user", "{}", NULL);
	append(f->s, "c", "user", "{}", NULL);
	cr_assert_eq(pc_store_run_begin(f->s, &(pc_store_run_new_t){.key = "a", .run_id = "r-a1", .idem_key = NULL}, &r), 0);
	cr_assert_eq(pc_store_run_begin(f->s, &(pc_store_run_new_t){.key = "a", .run_id = "r-a2", .idem_key = NULL}, &r), 0);
	cr_assert_eq(pc_store_run_begin(f->s, &(pc_store_run_new_t){.key = "b", .run_id = "r-b1", .idem_key = NULL}, &r), 0);
	cr_assert_eq(pc_store_close(f->s), 0);
	exec_sql(f, "UPDATE sessions SET created_ms = 100, updated_ms = 500 WHERE key = 'a';"
		    "UPDATE sessions SET created_ms = 200, updated_ms = 500 WHERE key = 'b';"
		    "UPDATE sessions SET created_ms = 200, updated_ms = 300 WHERE key = 'c';"
		    "UPDATE sessions SET created_ms = 50, updated_ms = 900 WHERE key = 'd';"
		    "UPDATE sessions SET created_ms = 300, updated_ms = 100 WHERE key = 'e';"
		    "UPDATE runs SET started_ms = 1000 WHERE session_key = 'a';");
	pc_store_config_t cfg;
	pc_store_config_init(&cfg);
	fx_open_cfg(f, &cfg);
}

/* The keys of one page, joined ("dab"). */
static void page_keys(pc_store_sessions_t *l, char *out, size_t cap)
{
	size_t n = pc_store_sessions_count(l), k = 0;
	for (size_t i = 0; i < n && k + 1 < cap; i++) {
		pc_store_session_entry_t e;
		pc_store_sessions_get(l, i, &e);
		k += (size_t)snprintf(out + k, cap - k, "%s", e.key);
	}
	out[k] = '\0';
}

/* Every page of `order` at `limit` a page, joined with "|". */
static void all_pages(pc_store_t *s, pc_store_sessions_order_t order, uint32_t limit, char *out, size_t cap)
{
	pc_store_sessions_query_t q = {.limit = limit, .order = order};
	char last[64] = "";
	size_t k = 0;
	out[0] = '\0';
	for (int guard = 0; guard < 10; guard++) {
		pc_store_sessions_t *l = NULL;
		cr_assert_eq(pc_store_sessions(s, &q, &l), 0);
		char keys[64];
		page_keys(l, keys, sizeof(keys));
		k += (size_t)snprintf(out + k, cap - k, "%s%s", k ? "|" : "", keys);
		size_t n = pc_store_sessions_count(l);
		bool more = pc_store_sessions_more(l);
		if (n > 0) {
			pc_store_session_entry_t e;
			pc_store_sessions_get(l, n - 1, &e);
			snprintf(last, sizeof(last), "%s", e.key);
			q.after_key = last;
			q.after_ms = order == PC_STORE_SESSIONS_CREATED ? e.created_ms : e.updated_ms;
		}
		pc_store_sessions_free(l);
		if (!more)
			return;
	}
	cr_assert_fail("paging did not end");
}

Test(store, sessions_entries_carry_ids_times_seq_and_runs)
{
	fx_t f;
	fx_five(&f);
	pc_store_sessions_query_t q = {.order = PC_STORE_SESSIONS_KEY};
	pc_store_sessions_t *l = NULL;
	cr_assert_eq(pc_store_sessions(f.s, &q, &l), 0);
	cr_assert_eq(pc_store_sessions_count(l), 5);
	cr_assert_not(pc_store_sessions_more(l));
	pc_store_session_entry_t e;
	pc_store_sessions_get(l, 0, &e);
	cr_assert_str_eq(e.key, "a");
	cr_assert_str_eq(e.agent, "main");
	cr_assert_eq(strlen(e.id), 32, "a generated session id: %s", e.id);
	cr_assert_eq(e.created_ms, 100);
	cr_assert_eq(e.updated_ms, 500);
	cr_assert_eq(e.last_seq, 2);
	cr_assert_eq(e.runs, 2);
	/* both runs began in the same millisecond: the later one is the latest */
	cr_assert_str_eq(e.last_run_id, "r-a2");
	pc_store_sessions_get(l, 1, &e);
	cr_assert_null(e.agent);
	cr_assert_eq(e.last_seq, 0);
	cr_assert_eq(e.runs, 1);
	cr_assert_str_eq(e.last_run_id, "r-b1");
	pc_store_sessions_get(l, 2, &e);
	cr_assert_eq(e.last_seq, 1);
	cr_assert_eq(e.runs, 0);
	cr_assert_null(e.last_run_id);
	cr_assert_null(e.open_run_id);
	/* out of range: all zero */
	pc_store_sessions_get(l, 5, &e);
	cr_assert_null(e.key);
	pc_store_sessions_free(l);
	fx_fini(&f);
}

/* A listed session names its first run not yet ended: the one running, or
 * the next to; none once every run ended. */
Test(store, sessions_entries_name_their_first_open_run)
{
	fx_t f;
	fx_five(&f);
	static const struct {
		const char *end; /* ended before the listing (NULL: none) */
		const char *a, *b;
	} steps[] = {{NULL, "r-a1", "r-b1"}, {"r-a1", "r-a2", "r-b1"}, {"r-b1", "r-a2", NULL}, {"r-a2", NULL, NULL}};
	for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
		if (steps[i].end)
			cr_assert_eq(pc_store_run_end(f.s, &(pc_store_run_end_t){.run_id = steps[i].end,
										  .status = PC_STORE_RUN_OK}),
				     0);
		pc_store_sessions_query_t q = {.order = PC_STORE_SESSIONS_KEY};
		pc_store_sessions_t *l = NULL;
		cr_assert_eq(pc_store_sessions(f.s, &q, &l), 0);
		pc_store_session_entry_t a, b;
		pc_store_sessions_get(l, 0, &a);
		pc_store_sessions_get(l, 1, &b);
		const char *want[2] = {steps[i].a, steps[i].b}, *got[2] = {a.open_run_id, b.open_run_id};
		for (int k = 0; k < 2; k++) {
			if (want[k])
				cr_assert_str_eq(got[k] ? got[k] : "(none)", want[k], "step %zu", i);
			else
				cr_assert_null(got[k], "step %zu: %s", i, got[k]);
		}
		pc_store_sessions_free(l);
	}
	fx_fini(&f);
}

/* A session found by its id: the one entry, or none. */
Test(store, sessions_by_id_finds_the_one_session)
{
	fx_t f;
	fx_five(&f);
	pc_store_sessions_query_t q = {.order = PC_STORE_SESSIONS_KEY};
	pc_store_sessions_t *l = NULL;
	cr_assert_eq(pc_store_sessions(f.s, &q, &l), 0);
	pc_store_session_entry_t e;
	pc_store_sessions_get(l, 2, &e);
	char key[64], id[64];
	snprintf(key, sizeof(key), "%s", e.key);
	snprintf(id, sizeof(id), "%s", e.id);
	pc_store_sessions_free(l);
	q = (pc_store_sessions_query_t){.id = id};
	cr_assert_eq(pc_store_sessions(f.s, &q, &l), 0);
	cr_assert_eq(pc_store_sessions_count(l), 1);
	pc_store_sessions_get(l, 0, &e);
	cr_assert_str_eq(e.key, key);
	cr_assert_str_eq(e.id, id);
	pc_store_sessions_free(l);
	q.id = "no-session-has-this-id";
	cr_assert_eq(pc_store_sessions(f.s, &q, &l), 0);
	cr_assert_eq(pc_store_sessions_count(l), 0);
	pc_store_sessions_free(l);
	char long_id[PC_STORE_NAME_MAX + 2];
	memset(long_id, 'x', sizeof(long_id) - 1);
	long_id[sizeof(long_id) - 1] = '\0';
	q.id = long_id;
	cr_assert_eq(pc_store_sessions(f.s, &q, &l), PC_EINVAL);
	fx_fini(&f);
}

/* Time ties break by key; pages of two cross the ties by the cursor; a
 * page that ends at the last session says no more follow. */
Test(store, sessions_list_in_three_orders_and_in_pages)
{
	static const struct {
		pc_store_sessions_order_t order;
		uint32_t limit;
		const char *want;
	} cases[] = {
		{PC_STORE_SESSIONS_UPDATED, 10, "dabce"}, {PC_STORE_SESSIONS_CREATED, 10, "ebcad"},
		{PC_STORE_SESSIONS_KEY, 10, "abcde"},     {PC_STORE_SESSIONS_UPDATED, 2, "da|bc|e"},
		{PC_STORE_SESSIONS_CREATED, 2, "eb|ca|d"}, {PC_STORE_SESSIONS_KEY, 2, "ab|cd|e"},
		{PC_STORE_SESSIONS_KEY, 5, "abcde"},
	};
	fx_t f;
	fx_five(&f);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char got[64];
		all_pages(f.s, cases[i].order, cases[i].limit, got, sizeof(got));
		cr_assert_str_eq(got, cases[i].want, "case %zu", i);
	}
	fx_fini(&f);
}

Test(store, sessions_an_empty_store_lists_nothing)
{
	fx_t f;
	fx_init(&f);
	pc_store_sessions_t *l = NULL;
	cr_assert_eq(pc_store_sessions(f.s, NULL, &l), 0);
	cr_assert_eq(pc_store_sessions_count(l), 0);
	cr_assert_not(pc_store_sessions_more(l));
	pc_store_sessions_free(l);
	fx_fini(&f);
}

Test(store, sessions_the_default_limit_applies)
{
	fx_t f;
	fx_init(&f);
	for (unsigned i = 0; i < PC_STORE_SESSIONS_DEFAULT + 1; i++) {
		char key[16];
		snprintf(key, sizeof(key), "k%03u", i);
		append(f.s, key, "user", "{}", NULL);
	}
	pc_store_sessions_t *l = NULL;
	cr_assert_eq(pc_store_sessions(f.s, NULL, &l), 0);
	cr_assert_eq(pc_store_sessions_count(l), PC_STORE_SESSIONS_DEFAULT);
	cr_assert(pc_store_sessions_more(l));
	pc_store_sessions_free(l);
	fx_fini(&f);
}

Test(store, sessions_bad_queries_are_refused)
{
	pc_msg_t *m = NULL;
	pc_store_sessions_query_t q = {.limit = PC_STORE_SESSIONS_MAX + 1};
	cr_assert_eq(pc_store_req_sessions(&q, &m), PC_EINVAL);
	cr_assert_null(m);
	q = (pc_store_sessions_query_t){.order = (pc_store_sessions_order_t)3};
	cr_assert_eq(pc_store_req_sessions(&q, &m), PC_EINVAL);
	char key[PC_STORE_NAME_MAX + 2];
	memset(key, 'k', sizeof(key) - 1);
	key[sizeof(key) - 1] = '\0';
	q = (pc_store_sessions_query_t){.after_key = key};
	cr_assert_eq(pc_store_req_sessions(&q, &m), PC_EINVAL);
	cr_assert_eq(pc_store_req_sessions(NULL, NULL), PC_EINVAL);
	q = (pc_store_sessions_query_t){.limit = PC_STORE_SESSIONS_MAX};
	cr_assert_eq(pc_store_req_sessions(&q, &m), 0);
	/* a request is not a reply */
	pc_store_sessions_t *l = NULL;
	cr_assert_eq(pc_store_sessions_take(m, &l), PC_EINVAL);
	cr_assert_null(l);
	pc_msg_free(m);
	cr_assert_eq(pc_store_sessions(NULL, NULL, &l), PC_EINVAL);
}

/* An actor that pc_asks many appends at once and counts the replies. */
typedef struct asker {
	pc_actor_t *store;
	int n, replies, fails;
	int64_t max_seq;
	int hist_rc;
	size_t hist_count;
	int list_rc;
	size_t list_count;
	int64_t list_seq; /* the listed session's last seq */
	volatile int done;
} asker_t;

enum { ASK_GO = 1 };

static int asker_receive(pc_ctx_t *ctx, void *state, pc_msg_t *m)
{
	asker_t *a = state;
	if (m->type == ASK_GO) {
		for (int k = 0; k < a->n; k++) {
			pc_store_msg_t sm = {.role = "user", .content = "{\"actor\":true}"};
			pc_msg_t *req = NULL;
			CHECK(pc_store_req_append("actor-sess", 0, &sm, &req) == 0, "build");
			CHECK(pc_ask(ctx, a->store, req, NULL) == 0, "ask");
		}
		return 0;
	}
	if (m->type == PC_STORE_MSG_REPLY) {
		pc_store_reply_t r;
		CHECK(pc_store_reply_get(m, &r) == 0, "reply");
		if (r.rc != 0)
			a->fails++;
		if (r.seq > a->max_seq)
			a->max_seq = r.seq;
		if (++a->replies == a->n) {
			pc_msg_t *req = NULL;
			CHECK(pc_store_req_history("actor-sess", &req) == 0, "build history");
			CHECK(pc_ask(ctx, a->store, req, NULL) == 0, "ask history");
		}
		return 0;
	}
	if (m->type == PC_STORE_MSG_HISTORY) {
		pc_store_history_t *h = NULL;
		a->hist_rc = pc_store_history_take(m, &h);
		a->hist_count = pc_store_history_count(h);
		pc_store_history_free(h);
		pc_msg_t *req = NULL;
		CHECK(pc_store_req_sessions(NULL, &req) == 0, "build sessions");
		CHECK(pc_ask(ctx, a->store, req, NULL) == 0, "ask sessions");
		return 0;
	}
	if (m->type == PC_STORE_MSG_SESSIONS) {
		pc_store_sessions_t *l = NULL;
		a->list_rc = pc_store_sessions_take(m, &l);
		a->list_count = pc_store_sessions_count(l);
		pc_store_session_entry_t e;
		pc_store_sessions_get(l, 0, &e);
		a->list_seq = e.last_seq;
		pc_store_sessions_free(l);
		STORE(a->done, 1);
	}
	return 0;
}

static const pc_behavior_t asker_beh = {"asker", asker_receive, NULL};

Test(store, actors_ask_and_get_replies_after_commit)
{
	fx_t f;
	fx_init(&f);
	reset_failures();
	asker_t *a = calloc(1, sizeof(*a));
	cr_assert_not_null(a);
	a->store = pc_store_actor(f.s);
	a->n = 1000;
	pc_actor_t *act = NULL;
	cr_assert_eq(pc_spawn(f.rt, &asker_beh, a, &act), 0);
	cr_assert_eq(pc_send_u64(act, ASK_GO, 0), 0);
	AWAIT(LOAD(a->done), 20000);
	assert_no_failures();
	cr_assert_eq(a->fails, 0);
	cr_assert_eq(a->max_seq, 1000);
	cr_assert_eq(a->hist_rc, 0);
	cr_assert_eq(a->hist_count, 1000);
	cr_assert_eq(a->list_rc, 0);
	cr_assert_eq(a->list_count, 1);
	cr_assert_eq(a->list_seq, 1000);
	pc_actor_stop(act, PC_EXIT_NORMAL);
	pc_actor_release(act);
	quiesce(f.rt);
	free(a);
	fx_fini(&f);
}

/* Run rows asked for with PC_STORE_REQ_EARLY: a provisional answer before
 * the commit, then the final one; without the flag, one answer. Both
 * backends. */
typedef struct early_asker {
	pc_actor_t *store;
	uint64_t corr[4];
	uint32_t flags[4][2]; /* per request: the replies' flags, in order */
	int32_t rcs[4][2];
	int count[4];
	int replies;
	volatile int done;
} early_asker_t;

static void early_ask(pc_ctx_t *ctx, early_asker_t *a, int k, const char *run, const char *idem, uint32_t flags)
{
	pc_msg_t *req = NULL;
	CHECK(pc_store_req_run_begin(&(pc_store_run_new_t){.key = "early", .run_id = run, .idem_key = idem, .flags = flags}, &req) == 0, "build");
	CHECK(pc_ask(ctx, a->store, req, &a->corr[k]) == 0, "ask");
}

static int early_receive(pc_ctx_t *ctx, void *state, pc_msg_t *m)
{
	early_asker_t *a = state;
	if (m->type == ASK_GO) {
		early_ask(ctx, a, 0, "r-new", "key-new", PC_STORE_REQ_EARLY);
		early_ask(ctx, a, 1, "r-plain", "key-plain", 0);
		early_ask(ctx, a, 2, "r-nokey", NULL, PC_STORE_REQ_EARLY);
		return 0;
	}
	if (m->type != PC_STORE_MSG_REPLY)
		return 0;
	pc_store_reply_t r;
	CHECK(pc_store_reply_get(m, &r) == 0, "reply");
	for (int k = 0; k < 4; k++) {
		if (a->corr[k] != m->corr || a->count[k] >= 2)
			continue;
		a->flags[k][a->count[k]] = r.flags;
		a->rcs[k][a->count[k]++] = r.rc;
	}
	/* the first three answered in full: a repeat of the first key */
	if (++a->replies == 5)
		early_ask(ctx, a, 3, "r-again", "key-new", PC_STORE_REQ_EARLY);
	if (a->replies == 7)
		STORE(a->done, 1);
	return 0;
}

static const pc_behavior_t early_beh = {"early-asker", early_receive, NULL};

Test(store, an_early_run_row_is_told_before_its_commit_then_after)
{
	fx_t f;
	fx_init(&f);
	reset_failures();
	early_asker_t *a = calloc(1, sizeof(*a));
	cr_assert_not_null(a);
	a->store = pc_store_actor(f.s);
	pc_actor_t *act = NULL;
	cr_assert_eq(pc_spawn(f.rt, &early_beh, a, &act), 0);
	cr_assert_eq(pc_send_u64(act, ASK_GO, 0), 0);
	AWAIT(LOAD(a->done), 20000);
	struct timespec ts = {0, 50 * 1000000}; /* no third answer comes late */
	nanosleep(&ts, NULL);
	assert_no_failures();
	/* new key: provisional CREATED, then durable CREATED */
	cr_assert_eq(a->count[0], 2);
	cr_assert_eq(a->flags[0][0], PC_STORE_CREATED | PC_STORE_PROVISIONAL);
	cr_assert_eq(a->flags[0][1], PC_STORE_CREATED);
	/* no flag: one answer */
	cr_assert_eq(a->count[1], 1);
	cr_assert_eq(a->flags[1][0], PC_STORE_CREATED);
	/* no key, flag or not: early too (nothing to refuse, but the asker asked) */
	cr_assert_eq(a->count[2], 2);
	cr_assert_eq(a->flags[2][0], PC_STORE_CREATED | PC_STORE_PROVISIONAL);
	/* the key again: both answers name no new row */
	cr_assert_eq(a->count[3], 2);
	cr_assert_eq(a->flags[3][0], PC_STORE_PROVISIONAL);
	cr_assert_eq(a->flags[3][1], 0);
	for (int k = 0; k < 4; k++)
		for (int j = 0; j < a->count[k]; j++)
			cr_assert_eq(a->rcs[k][j], 0);
	pc_store_reply_t g;
	cr_assert_eq(pc_store_run_get(f.s, "r-again", &g), PC_ENOTFOUND);
	pc_actor_stop(act, PC_EXIT_NORMAL);
	pc_actor_release(act);
	quiesce(f.rt);
	free(a);
	fx_fini(&f);
}

/* Closing from a worker would block it and free the store under the
 * actor: refused, and the store stays usable. */
typedef struct closer {
	pc_store_t *s;
	int rc;
	int done;
} closer_t;

static int closer_receive(pc_ctx_t *ctx, void *state, pc_msg_t *m)
{
	(void)ctx;
	(void)m;
	closer_t *c = state;
	c->rc = pc_store_close(c->s);
	STORE(c->done, 1);
	return 0;
}

static const pc_behavior_t closer_beh = {"closer", closer_receive, NULL};

Test(store, close_on_a_worker_is_refused)
{
	fx_t f;
	fx_init(&f);
	closer_t *c = calloc(1, sizeof(*c));
	cr_assert_not_null(c);
	c->s = f.s;
	pc_actor_t *act = NULL;
	cr_assert_eq(pc_spawn(f.rt, &closer_beh, c, &act), 0);
	cr_assert_eq(pc_send_u64(act, 1, 0), 0);
	AWAIT(LOAD(c->done), 5000);
	cr_assert_eq(c->rc, PC_ESTATE);
	cr_assert_eq(append(f.s, "k", "user", "{}", NULL), 1);
	pc_actor_stop(act, PC_EXIT_NORMAL);
	pc_actor_release(act);
	quiesce(f.rt);
	free(c);
	fx_fini(&f);
}

Test(store, one_transaction_per_append_mode_works)
{
	fx_t f;
	fx_init(&f);
	pc_store_close(f.s);
	pc_store_config_t cfg;
	pc_store_config_init(&cfg);
	cfg.group_max = 1;
	fx_open_cfg(&f, &cfg);
	enum { T = 4, N = 50 };
	pthread_t t[T];
	writer_t w[T];
	for (int k = 0; k < T; k++) {
		w[k] = (writer_t){.s = f.s, .idx = k, .n = N};
		cr_assert_eq(pthread_create(&t[k], NULL, writer_main, &w[k]), 0);
	}
	for (int k = 0; k < T; k++) {
		pthread_join(t[k], NULL);
		cr_assert_eq(w[k].fails, 0);
	}
	cr_assert_eq(count_rows(&f, "SELECT count(*) FROM messages"), T * N);
	pc_store_stats_t st;
	pc_store_stats(f.s, &st);
	cr_assert_eq(st.batches, st.writes, "group_max 1: one transaction per append");
	fx_fini(&f);
}

Test(store, commit_window_groups_writes)
{
	fx_t f;
	fx_init(&f);
	pc_store_close(f.s);
	pc_store_config_t cfg;
	pc_store_config_init(&cfg);
	cfg.window_ms = 2;
	cfg.group_max = 8;
	fx_open_cfg(&f, &cfg);
	enum { T = 8, N = 40 };
	pthread_t t[T];
	writer_t w[T];
	for (int k = 0; k < T; k++) {
		w[k] = (writer_t){.s = f.s, .idx = k, .n = N};
		cr_assert_eq(pthread_create(&t[k], NULL, writer_main, &w[k]), 0);
	}
	for (int k = 0; k < T; k++) {
		pthread_join(t[k], NULL);
		cr_assert_eq(w[k].fails, 0);
	}
	pc_store_stats_t st;
	pc_store_stats(f.s, &st);
	cr_assert_eq(st.writes, (uint64_t)(T * N));
	cr_assert_lt(st.batches, st.writes);
	cr_assert_geq(st.batches, st.writes / 8, "group_max bounds a transaction");
	/* A lone write still gets through (after the window). */
	cr_assert_eq(append(f.s, "lone", "user", "{}", NULL), 1);
	fx_fini(&f);
}

/* Lazy writes: an actor sends `lazy` appends marked lazy (asked), `quiet`
 * appends with no reply address, then, with `sync`, a sync, or with
 * `urgent`, one ordinary append; it records the order of the answers. */
typedef struct lazy_asker {
	pc_actor_t *store;
	int lazy, quiet;
	bool sync, urgent;
	int replies, fails;
	int sync_at;          /* the sync's place among the answers (1-based) */
	uint64_t sync_corr;
	volatile int done;
} lazy_asker_t;

static int lazy_receive(pc_ctx_t *ctx, void *state, pc_msg_t *m)
{
	lazy_asker_t *a = state;
	int expect = a->lazy + (a->sync || a->urgent);
	if (m->type == ASK_GO) {
		for (int k = 0; k < a->lazy + a->quiet + a->urgent; k++) {
			pc_store_msg_t sm = {.role = "user", .content = "{\"lazy\":true}"};
			pc_msg_t *req = NULL;
			CHECK(pc_store_req_append("lazy-sess", 0, &sm, &req) == 0, "build");
			if (k < a->lazy) {
				pc_store_req_lazy(req);
				CHECK(pc_ask(ctx, a->store, req, NULL) == 0, "ask");
			} else if (k < a->lazy + a->quiet) {
				CHECK(pc_send(a->store, req) == 0, "send");
			} else {
				CHECK(pc_ask(ctx, a->store, req, NULL) == 0, "ask urgent");
			}
		}
		if (a->sync) {
			pc_msg_t *req = NULL;
			CHECK(pc_store_req_sync(&req) == 0, "build sync");
			CHECK(pc_ask(ctx, a->store, req, &a->sync_corr) == 0, "ask sync");
		}
		return 0;
	}
	if (m->type == PC_STORE_MSG_REPLY) {
		pc_store_reply_t r;
		CHECK(pc_store_reply_get(m, &r) == 0, "reply");
		a->fails += r.rc != 0;
		a->replies++;
		if (a->sync && m->corr == a->sync_corr)
			a->sync_at = a->replies;
		if (a->replies == expect)
			STORE(a->done, 1);
	}
	return 0;
}

static const pc_behavior_t lazy_beh = {"lazy asker", lazy_receive, NULL};

static void run_lazy(fx_t *f, lazy_asker_t *a)
{
	reset_failures();
	a->store = pc_store_actor(f->s);
	pc_actor_t *act = NULL;
	cr_assert_eq(pc_spawn(f->rt, &lazy_beh, a, &act), 0);
	cr_assert_eq(pc_send_u64(act, ASK_GO, 0), 0);
	AWAIT(LOAD(a->done), 20000);
	assert_no_failures();
	cr_assert_eq(a->fails, 0);
	pc_actor_stop(act, PC_EXIT_NORMAL);
	pc_actor_release(act);
	quiesce(f->rt);
}

static void reopen_lazy(fx_t *f, uint32_t lazy_ms)
{
	pc_store_close(f->s);
	pc_store_config_t cfg;
	pc_store_config_init(&cfg);
	cfg.lazy_ms = lazy_ms;
	fx_open_cfg(f, &cfg);
}

Test(store, lazy_writes_wait_for_a_sync_and_share_its_commit)
{
	fx_t f;
	fx_init(&f);
	reopen_lazy(&f, 600000); /* only the sync can commit them */
	lazy_asker_t a = {.lazy = 20, .quiet = 5, .sync = true};
	run_lazy(&f, &a);
	cr_assert_eq(a.sync_at, 21, "the sync is answered after the writes before it");
	pc_store_stats_t st;
	pc_store_stats(f.s, &st);
	cr_assert_eq(st.batches, 1, "one transaction for the 25 writes and the sync");
	cr_assert_eq(st.writes, 25, "a sync is not a write");
	cr_assert_eq(count_rows(&f, "SELECT count(*) FROM messages"), 25);
	fx_fini(&f);
}

Test(store, lazy_writes_go_with_the_next_write_someone_waits_for)
{
	fx_t f;
	fx_init(&f);
	reopen_lazy(&f, 600000);
	lazy_asker_t a = {.lazy = 3, .quiet = 3, .urgent = true};
	run_lazy(&f, &a);
	pc_store_stats_t st;
	pc_store_stats(f.s, &st);
	cr_assert_eq(st.batches, 1);
	cr_assert_eq(st.writes, 7);
	fx_fini(&f);
}

Test(store, a_lone_lazy_write_commits_after_lazy_ms)
{
	fx_t f;
	fx_init(&f);
	reopen_lazy(&f, 30);
	lazy_asker_t a = {.lazy = 1};
	run_lazy(&f, &a);
	cr_assert_eq(count_rows(&f, "SELECT count(*) FROM messages"), 1);
	fx_fini(&f);
}

Test(store, close_commits_what_was_sent)
{
	fx_t f;
	fx_init(&f);
	/* Fire-and-forget sends (no reply wanted) are still committed by close. */
	for (int k = 0; k < 300; k++) {
		pc_store_msg_t m = {.role = "user", .content = "{}"};
		pc_msg_t *req = NULL;
		cr_assert_eq(pc_store_req_append("ff", 0, &m, &req), 0);
		cr_assert_eq(pc_send(pc_store_actor(f.s), req), 0);
	}
	pc_store_close(f.s);
	f.s = NULL;
	cr_assert_eq(count_rows(&f, "SELECT count(*) FROM messages"), 300);
	pc_io_free(f.io);
	FREE_RUNTIME_CHECKED(f.rt);
	rm_dir(f.dir);
}

/* ---- files that are not our store ---- */

static int open_at(fx_t *f, const char *name)
{
	char p[192];
	snprintf(p, sizeof(p), "%s/%s", f->dir, name);
	pc_store_config_t cfg;
	pc_store_config_init(&cfg);
	cfg.path = p;
	pc_store_t *s = NULL;
	int rc = pc_store_open(f->rt, &cfg, &s);
	if (rc == 0)
		pc_store_close(s);
	else
		cr_assert_null(s);
	return rc;
}

static void write_file(fx_t *f, const char *name, const void *data, size_t len)
{
	char p[192];
	snprintf(p, sizeof(p), "%s/%s", f->dir, name);
	int fd = open(p, O_CREAT | O_TRUNC | O_WRONLY, 0600);
	cr_assert_geq(fd, 0);
	cr_assert_eq(write(fd, data, len), (ssize_t)len);
	close(fd);
}

/* PostgreSQL's counterpart: a schema holding someone else's tables, or
 * ours from the future, is refused. */
static void pg_foreign_and_newer_schemas_are_refused(fx_t *f)
{
	char url[512];
	cr_assert(pg_test_url(url, sizeof(url)));
	pg_test_exec(url, "CREATE TABLE sessions(x int)");
	pc_store_config_t cfg;
	pc_store_config_init(&cfg);
	cfg.url = url;
	pc_store_t *s = NULL;
	cr_assert_eq(pc_store_open(f->rt, &cfg, &s), PC_STORE_EFOREIGN);
	cr_assert_null(s);
	pc_store_close(f->s);
	f->s = NULL;
	pg_test_exec(f->url, "UPDATE pincer_schema SET version = 99");
	cfg.url = f->url;
	cr_assert_eq(pc_store_open(f->rt, &cfg, &s), PC_STORE_EVERSION);
	cr_assert_null(s);
	cr_assert_str_neq(pc_store_strerror(PC_STORE_EVERSION), pc_strerror(-12345));
	pc_io_free(f->io);
	FREE_RUNTIME_CHECKED(f->rt);
	rm_dir(f->dir);
}

Test(store, corrupt_foreign_and_newer_files_are_refused)
{
	fx_t f;
	fx_init(&f);
	if (f.pg) {
		pg_foreign_and_newer_schemas_are_refused(&f);
		return;
	}
	char junk[8192];
	for (size_t k = 0; k < sizeof(junk); k++)
		junk[k] = (char)(k * 7 + 3);
	write_file(&f, "junk.db", junk, sizeof(junk));
	cr_assert_eq(open_at(&f, "junk.db"), PC_STORE_ECORRUPT);
	/* Someone else's SQLite database. */
	char p[192];
	snprintf(p, sizeof(p), "%s/other.db", f.dir);
	sqlite3 *db = NULL;
	cr_assert_eq(sqlite3_open(p, &db), SQLITE_OK);
	cr_assert_eq(sqlite3_exec(db, "CREATE TABLE t(x)", NULL, NULL, NULL), SQLITE_OK);
	sqlite3_close(db);
	cr_assert_eq(open_at(&f, "other.db"), PC_STORE_EFOREIGN);
	/* Ours, from the future. */
	pc_store_close(f.s);
	f.s = NULL;
	cr_assert_eq(sqlite3_open(f.path, &db), SQLITE_OK);
	cr_assert_eq(sqlite3_exec(db, "PRAGMA user_version = 99", NULL, NULL, NULL), SQLITE_OK);
	sqlite3_close(db);
	cr_assert_eq(open_at(&f, "state.db"), PC_STORE_EVERSION);
	/* Damage in the middle of our own file: a page overwritten. */
	cr_assert_eq(sqlite3_open(f.path, &db), SQLITE_OK);
	cr_assert_eq(sqlite3_exec(db, "PRAGMA user_version = 1", NULL, NULL, NULL), SQLITE_OK);
	sqlite3_close(db);
	int fd = open(f.path, O_WRONLY);
	cr_assert_geq(fd, 0);
	cr_assert_eq(pwrite(fd, junk, 4096, 4096), 4096);
	cr_assert_eq(pwrite(fd, junk, 100, 0), 100);
	close(fd);
	cr_assert_eq(open_at(&f, "state.db"), PC_STORE_ECORRUPT);
	cr_assert_str_neq(pc_store_strerror(PC_STORE_ECORRUPT), pc_strerror(-12345));
	cr_assert_eq(open_at(&f, "no/such/dir/x.db"), PC_STORE_ECANTOPEN);
	FREE_RUNTIME_CHECKED(f.rt);
	rm_dir(f.dir);
}

/* A database written by schema version 1 (JSON checked by CHECK
 * constraints, run counts from an index) is migrated on open, its rows
 * kept: JSON is then checked when requests are built, and a session's run
 * count and latest run are on its row. */
Test(store, version_1_database_is_migrated)
{
	SQLITE_ONLY("SQLite's schema version 1 (PostgreSQL's schema starts later)");
	fx_t f;
	fx_init(&f);
	pc_store_close(f.s);
	f.s = NULL;
	sqlite3 *db = NULL;
	cr_assert_eq(sqlite3_open(f.path, &db), SQLITE_OK);
	static const char v1[] =
		"DROP TABLE messages; DROP TABLE runs; DROP TABLE sessions; DROP TABLE attempts; DROP TABLE usage;"
		"DROP TABLE devices; DROP TABLE nodes;"
		"CREATE TABLE attempts(run_id TEXT NOT NULL, idx INTEGER NOT NULL,"
		" provider TEXT, model TEXT, profile TEXT, reason TEXT, status TEXT NOT NULL, code TEXT,"
		" duration_ms INTEGER NOT NULL, created_ms INTEGER NOT NULL, PRIMARY KEY (run_id, idx));"
		"INSERT INTO attempts VALUES ('r1', 0, 'p', 'm', NULL, 'rate_limit', 'error', NULL, 7, 1);"
		"INSERT INTO attempts VALUES ('r1', 1, 'p', 'm', NULL, NULL, 'ok', NULL, 9, 2);"
		"CREATE TABLE sessions(key TEXT PRIMARY KEY, id TEXT NOT NULL, agent TEXT,"
		" created_ms INTEGER NOT NULL, updated_ms INTEGER NOT NULL,"
		" metadata TEXT CHECK (metadata IS NULL OR json_valid(metadata)),"
		" last_seq INTEGER NOT NULL DEFAULT 0, lease_owner TEXT,"
		" lease_epoch INTEGER NOT NULL DEFAULT 0, lease_expires_ms INTEGER NOT NULL DEFAULT 0);"
		"CREATE TABLE messages(session_key TEXT NOT NULL, seq INTEGER NOT NULL, role TEXT NOT NULL,"
		" content TEXT NOT NULL CHECK (json_valid(content)),"
		" tool_call_ids TEXT CHECK (tool_call_ids IS NULL OR json_valid(tool_call_ids)),"
		" run_id TEXT, created_ms INTEGER NOT NULL, UNIQUE (session_key, seq));"
		"CREATE TABLE runs(run_id TEXT PRIMARY KEY, session_key TEXT NOT NULL, idem_key TEXT UNIQUE,"
		" status TEXT NOT NULL, started_ms INTEGER NOT NULL, ended_ms INTEGER, error_code TEXT,"
		" usage TEXT CHECK (usage IS NULL OR json_valid(usage)));"
		"CREATE INDEX runs_session ON runs(session_key, started_ms);"
		"INSERT INTO sessions(key, id, created_ms, updated_ms, last_seq) VALUES ('old', 'id1', 1, 1, 2);"
		"INSERT INTO messages VALUES ('old', 1, 'user', '{\"content\":\"hi\"}', NULL, 'r1', 1);"
		"INSERT INTO messages VALUES ('old', 2, 'assistant', '{\"content\":\"yo\"}', NULL, 'r1', 2);"
		"INSERT INTO runs VALUES ('r1', 'old', 'k1', 'ok', 1, 2, NULL, '{\"input\":3}');"
		/* a transcript without a session row */
		"INSERT INTO messages VALUES ('orphan', 1, 'user', '{}', NULL, NULL, 5);"
		"PRAGMA user_version = 1;";
	cr_assert_eq(sqlite3_exec(db, v1, NULL, NULL, NULL), SQLITE_OK);
	sqlite3_close(db);
	pc_store_config_t cfg;
	pc_store_config_init(&cfg);
	cfg.idem_ttl_ms = (int64_t)1 << 62; /* the old run is from 1970 */
	fx_open_cfg(&f, &cfg);
	/* the rows survived */
	pc_store_history_t *h = NULL;
	cr_assert_eq(pc_store_history(f.s, "old", &h), 0);
	cr_assert_eq(pc_store_history_count(h), 2);
	pc_store_msg_t m;
	pc_store_history_get(h, 1, &m);
	cr_assert_str_eq(m.content, "{\"content\":\"yo\"}");
	pc_store_history_free(h);
	pc_store_reply_t r;
	cr_assert_eq(pc_store_run_begin(f.s, &(pc_store_run_new_t){.key = "old", .run_id = "r2", .idem_key = "k1"}, &r), 0);
	cr_assert_str_eq(r.id, "r1", "the old run's idempotency key still holds");
	/* the session's run count and latest run came over from the runs */
	pc_store_sessions_t *l = NULL;
	cr_assert_eq(pc_store_sessions(f.s, NULL, &l), 0);
	cr_assert_eq(pc_store_sessions_count(l), 2);
	pc_store_session_entry_t e;
	pc_store_sessions_get(l, 0, &e);
	if (strcmp(e.key, "old") != 0)
		pc_store_sessions_get(l, 1, &e);
	cr_assert_str_eq(e.key, "old");
	cr_assert_eq(e.runs, 1);
	cr_assert_str_eq(e.last_run_id, "r1");
	pc_store_sessions_free(l);
	/* appends go on from the old sequence; bad JSON is refused up front */
	int64_t seq = 0;
	pc_store_msg_t add = {.role = "user", .content = "{\"content\":\"again\"}"};
	cr_assert_eq(pc_store_append(f.s, "old", 0, &add, &seq), 0);
	cr_assert_eq(seq, 3);
	add.content = "{broken";
	cr_assert_eq(pc_store_append(f.s, "old", 0, &add, &seq), PC_EINVAL);
	cr_assert_eq(pc_store_run_end(f.s, &(pc_store_run_end_t){.run_id = "r1", .status = PC_STORE_RUN_OK, .usage = "{broken"}), PC_EINVAL);
	pc_store_close(f.s);
	f.s = NULL;
	cr_assert_eq(count_rows(&f, "PRAGMA user_version"), 12);
	cr_assert_eq(count_rows(&f, "SELECT count(*) FROM attempts WHERE run_id = 'r1'"), 2);
	/* idempotency keys indexed only where there is one; attempts in one b-tree */
	cr_assert_eq(count_rows(&f, "SELECT count(*) FROM sqlite_master WHERE tbl_name = 'runs' AND type = 'index'"
				    " AND sql LIKE '%WHERE idem_key IS NOT NULL%'"),
		     1);
	cr_assert_eq(count_rows(&f, "SELECT count(*) FROM sqlite_master WHERE name = 'sqlite_autoindex_runs_2'"),
		     0);
	cr_assert_eq(count_rows(&f, "SELECT count(*) FROM sqlite_master WHERE name = 'attempts'"
				    " AND sql LIKE '%WITHOUT ROWID%'"),
		     1);
	/* the orphan transcript got a session row; VACUUM keeps the numbers
	 * messages name their sessions by */
	exec_at(&f, "VACUUM");
	pc_store_config_t again;
	pc_store_config_init(&again);
	fx_open_cfg(&f, &again);
	add.content = "{}";
	cr_assert_eq(pc_store_history(f.s, "orphan", &h), 0);
	cr_assert_eq(pc_store_history_count(h), 1);
	pc_store_history_free(h);
	cr_assert_eq(pc_store_history(f.s, "old", &h), 0);
	cr_assert_eq(pc_store_history_count(h), 3);
	pc_store_history_free(h);
	cr_assert_eq(pc_store_append(f.s, "orphan", 0, &add, &seq), 0);
	cr_assert_eq(seq, 2);
	pc_store_close(f.s);
	f.s = NULL;
	cr_assert_eq(count_rows(&f, "SELECT count(*) FROM sqlite_master WHERE name = 'runs_session'"), 0);
	cr_assert_eq(count_rows(&f, "SELECT count(*) FROM sqlite_master WHERE sql LIKE '%json_valid(content)%'"),
		     0);
	fx_fini(&f);
}

/* ---- usage records ---- */

static pc_store_usage_t usage_rec(const char *run, const char *key, uint32_t attempt, uint32_t call, int64_t in,
				  int64_t out, int64_t cr, int64_t cw)
{
	return (pc_store_usage_t){.run_id = run, .session_key = key, .attempt = attempt, .call = call,
				  .provider = "p", .model = "m", .input = in, .output = out, .cache_read = cr,
				  .cache_write = cw, .total = in + out + cr + cw};
}

#define DAY ((int64_t)86400000)

/* A window's records summed by UTC day: only the days that have records,
 * oldest first, each with its count and sums; the window's totals; a
 * record on the window's end is outside it. */
Test(store, usage_days_sum_a_window_by_utc_day)
{
	fx_t f;
	fx_init(&f);
	const int64_t d0 = 20000 * DAY; /* a UTC midnight */
	static const struct {
		const char *run;
		int64_t at, in, out;
	} recs[] = {
		{"r1", 20000 * DAY + 5, 10, 1},      {"r2", 20000 * DAY + DAY - 1, 20, 2},
		{"r3", 20002 * DAY + 7, 300, 30},    {"r4", 19999 * DAY + 3, 4000, 400}, /* before */
		{"r5", 20003 * DAY, 50000, 5000},                                        /* on the end */
	};
	for (size_t i = 0; i < sizeof(recs) / sizeof(recs[0]); i++) {
		pc_store_usage_t u = usage_rec(recs[i].run, "s", 0, 0, recs[i].in, recs[i].out, 0, 0);
		u.created_ms = recs[i].at;
		cr_assert_eq(pc_store_usage_add(f.s, &u, 0), 0);
	}
	pc_store_usage_list_t *l = NULL;
	cr_assert_eq(pc_store_usage_days(f.s, d0, d0 + 3 * DAY, &l), 0);
	cr_assert_eq(pc_store_usage_list_count(l), 2);
	pc_store_usage_day_t d;
	pc_store_usage_day_get(l, 0, &d);
	cr_assert(d.day_ms == d0 && d.records == 2 && d.input == 30 && d.output == 3 && d.total == 33,
		  "%lld %llu %lld", (long long)d.day_ms, (unsigned long long)d.records, (long long)d.input);
	pc_store_usage_day_get(l, 1, &d);
	cr_assert(d.day_ms == d0 + 2 * DAY && d.records == 1 && d.input == 300 && d.total == 330);
	pc_store_usage_t sum;
	uint64_t n = 0;
	pc_store_usage_list_totals(l, &sum, &n);
	cr_assert(n == 3 && sum.input == 330 && sum.output == 33 && sum.total == 363);
	pc_store_usage_list_free(l);
	/* an empty window; a backwards one is refused */
	cr_assert_eq(pc_store_usage_days(f.s, d0 + 10 * DAY, d0 + 11 * DAY, &l), 0);
	cr_assert_eq(pc_store_usage_list_count(l), 0);
	pc_store_usage_list_totals(l, &sum, &n);
	cr_assert(n == 0 && sum.total == 0);
	pc_store_usage_list_free(l);
	cr_assert_eq(pc_store_usage_days(f.s, d0 + DAY, d0, &l), PC_EINVAL);
	cr_assert_null(l);
	fx_fini(&f);
}

/* Every model call's usage is a record: listed by run (by attempt, then
 * call) or by session, with exact sums; a call written again keeps its
 * last record; a write with a stale lease epoch is fenced. */
Test(store, usage_records_list_by_run_and_session_with_exact_sums)
{
	fx_t f;
	fx_init(&f);
	pc_store_usage_t u = usage_rec("r1", "s", 1, 0, 7, 2, 1, 0);
	cr_assert_eq(pc_store_usage_add(f.s, &u, 0), 0);
	u = usage_rec("r1", "s", 0, 1, 30, 4, 20, 5);
	cr_assert_eq(pc_store_usage_add(f.s, &u, 0), 0);
	u = usage_rec("r1", "s", 0, 0, 10, 3, 0, 2);
	cr_assert_eq(pc_store_usage_add(f.s, &u, 0), 0);
	u = usage_rec("r2", "s", 0, 0, 100, 50, 0, 0);
	cr_assert_eq(pc_store_usage_add(f.s, &u, 0), 0);
	u = usage_rec("r3", "other", 0, 0, 1000, 1, 0, 0);
	cr_assert_eq(pc_store_usage_add(f.s, &u, 0), 0);
	/* the same call again: replaced, not counted twice */
	u = usage_rec("r2", "s", 0, 0, 101, 50, 0, 0);
	cr_assert_eq(pc_store_usage_add(f.s, &u, 0), 0);

	pc_store_usage_list_t *l = NULL;
	cr_assert_eq(pc_store_usage_list(f.s, "r1", NULL, &l), 0);
	cr_assert_eq(pc_store_usage_list_count(l), 3);
	static const uint32_t order[3][2] = {{0, 0}, {0, 1}, {1, 0}};
	for (size_t i = 0; i < 3; i++) {
		pc_store_usage_list_get(l, i, &u);
		cr_assert_eq(u.attempt, order[i][0], "record %zu", i);
		cr_assert_eq(u.call, order[i][1], "record %zu", i);
		cr_assert_str_eq(u.run_id, "r1");
		cr_assert_str_eq(u.session_key, "s");
		cr_assert_str_eq(u.provider, "p");
		cr_assert_str_eq(u.model, "m");
		cr_assert_gt(u.created_ms, 0);
	}
	pc_store_usage_list_get(l, 1, &u);
	cr_assert(u.input == 30 && u.output == 4 && u.cache_read == 20 && u.cache_write == 5 && u.total == 59);
	uint64_t n = 0;
	pc_store_usage_list_totals(l, &u, &n);
	cr_assert_eq(n, 3);
	cr_assert(u.input == 47 && u.output == 9 && u.cache_read == 21 && u.cache_write == 7 && u.total == 84,
		  "%lld %lld %lld %lld %lld", (long long)u.input, (long long)u.output, (long long)u.cache_read,
		  (long long)u.cache_write, (long long)u.total);
	pc_store_usage_list_free(l);

	cr_assert_eq(pc_store_usage_list(f.s, NULL, "s", &l), 0);
	cr_assert_eq(pc_store_usage_list_count(l), 4);
	pc_store_usage_list_totals(l, &u, &n);
	cr_assert_eq(n, 4);
	cr_assert_eq(u.input, 148);
	cr_assert_eq(u.output, 59);
	pc_store_usage_list_free(l);

	/* nothing recorded: an empty listing, zero sums */
	cr_assert_eq(pc_store_usage_list(f.s, "nope", NULL, &l), 0);
	cr_assert_eq(pc_store_usage_list_count(l), 0);
	pc_store_usage_list_totals(l, &u, &n);
	cr_assert(n == 0 && u.total == 0);
	pc_store_usage_list_free(l);

	/* fencing: only the lease's current epoch writes */
	int64_t epoch = 0;
	cr_assert_eq(pc_store_lease_acquire(f.s, "s", "owner-a", 60000, NULL, &epoch, NULL), 0);
	u = usage_rec("r4", "s", 0, 0, 1, 1, 0, 0);
	cr_assert_eq(pc_store_usage_add(f.s, &u, epoch + 1), PC_STORE_EFENCED);
	cr_assert_eq(pc_store_usage_add(f.s, &u, epoch), 0);
	u.session_key = "no-such-session";
	cr_assert_eq(pc_store_usage_add(f.s, &u, epoch), PC_STORE_EFENCED);
	cr_assert_eq(pc_store_usage_list(f.s, "r4", NULL, &l), 0);
	cr_assert_eq(pc_store_usage_list_count(l), 1);
	pc_store_usage_list_free(l);

	/* refused up front */
	u = usage_rec("r5", "s", 0, 0, -1, 0, 0, 0);
	cr_assert_eq(pc_store_usage_add(f.s, &u, 0), PC_EINVAL);
	u = usage_rec(NULL, "s", 0, 0, 1, 0, 0, 0);
	cr_assert_eq(pc_store_usage_add(f.s, &u, 0), PC_EINVAL);
	cr_assert_eq(pc_store_usage_list(f.s, NULL, NULL, &l), PC_EINVAL);
	cr_assert_null(l);
	assert_no_failed_batch(f.s);
	fx_fini(&f);
}

/* A state.db written at schema version 6 (no usage table) opens: it is
 * migrated to 7, its runs kept, and usage records can be written. */
Test(store, version_6_database_gains_the_usage_table)
{
	SQLITE_ONLY("SQLite's schema version 6 (PostgreSQL's schema starts later)");
	fx_t f;
	fx_init(&f);
	pc_store_reply_t r;
	cr_assert_eq(pc_store_run_begin(f.s, &(pc_store_run_new_t){.key = "s", .run_id = "old"}, &r), 0);
	cr_assert_eq(pc_store_run_end(f.s, &(pc_store_run_end_t){.run_id = "old", .status = PC_STORE_RUN_OK, .usage = "{\"input\":3}"}), 0);
	pc_store_close(f.s);
	f.s = NULL;
	/* what version 6 was: this schema without the tables of versions 7 to
	 * 10 and the column of 11 */
	exec_at(&f, "DROP TABLE usage; DROP TABLE devices; DROP TABLE nodes;"
		    " DROP INDEX runs_open_session; ALTER TABLE runs DROP COLUMN replay_invalid; PRAGMA user_version = 6;");
	cr_assert_eq(count_rows(&f, "SELECT count(*) FROM sqlite_master WHERE name LIKE 'usage%'"), 0);
	pc_store_config_t cfg;
	pc_store_config_init(&cfg);
	fx_open_cfg(&f, &cfg);
	cr_assert_eq(pc_store_run_get(f.s, "old", &r), 0);
	cr_assert_eq(r.status, PC_STORE_RUN_OK);
	pc_store_usage_t u = usage_rec("old", "s", 0, 0, 5, 6, 7, 8);
	cr_assert_eq(pc_store_usage_add(f.s, &u, 0), 0);
	pc_store_usage_list_t *l = NULL;
	cr_assert_eq(pc_store_usage_list(f.s, NULL, "s", &l), 0);
	cr_assert_eq(pc_store_usage_list_count(l), 1);
	pc_store_usage_list_free(l);
	pc_store_close(f.s);
	f.s = NULL;
	cr_assert_eq(count_rows(&f, "PRAGMA user_version"), 12);
	cr_assert_eq(count_rows(&f, "SELECT count(*) FROM sqlite_master WHERE name = 'usage'"
				    " AND sql LIKE '%WITHOUT ROWID%'"),
		     1);
	cr_assert_eq(count_rows(&f, "SELECT count(*) FROM sqlite_master WHERE name = 'usage_session'"), 1);
	fx_fini(&f);
}

/* A reply carries every field through, ids and codes of any length up to
 * their limits included; a message that is not a whole reply is refused. */
Test(store, replies_round_trip_and_refuse_garbage)
{
	pc_store_reply_t r = {.rc = PC_STORE_EFENCED, .flags = PC_STORE_CREATED | PC_STORE_PROVISIONAL, .seq = 42,
			      .epoch = 7, .status = PC_STORE_RUN_TIMEOUT, .started_ms = 1000, .ended_ms = 2000};
	memset(r.id, 'i', PC_STORE_ID_MAX);
	memset(r.code, 'c', PC_STORE_CODE_MAX);
	for (int round = 0; round < 3; round++) {
		if (round == 1)
			r.code[0] = '\0'; /* an id, no code */
		if (round == 2)
			r.id[3] = '\0'; /* a short id */
		pc_msg_t *m = pc__store_reply_msg(&r);
		cr_assert_not_null(m);
		pc_store_reply_t got;
		memset(&got, 0x5a, sizeof(got));
		cr_assert_eq(pc_store_reply_get(m, &got), 0);
		cr_assert_eq(got.rc, r.rc);
		cr_assert_eq(got.flags, r.flags);
		cr_assert_eq(got.seq, r.seq);
		cr_assert_eq(got.epoch, r.epoch);
		cr_assert_eq(got.status, r.status);
		cr_assert_eq(got.started_ms, r.started_ms);
		cr_assert_eq(got.ended_ms, r.ended_ms);
		cr_assert_str_eq(got.id, r.id);
		cr_assert_str_eq(got.code, r.code);
		pc_msg_free(m);
	}
	pc_store_reply_t empty = {0}, got;
	pc_msg_t *m = pc__store_reply_msg(&empty);
	cr_assert_eq(pc_store_reply_get(m, &got), 0);
	cr_assert_str_eq(got.id, "");
	cr_assert_lt(sizeof(pc_msg_t) + m->size, (size_t)128, "a reply without id fits a small message");
	pc_msg_free(m);
	/* cut short, or without the strings' ends */
	pc_msg_t *bad = pc_msg_new(PC_STORE_MSG_REPLY, 16);
	memset(pc_msg_data(bad), 'x', 16);
	cr_assert_eq(pc_store_reply_get(bad, &got), PC_EINVAL);
	pc_msg_free(bad);
	bad = pc_msg_new(PC_STORE_MSG_REPLY, sizeof(pc_store_reply_t) + 8);
	memset(pc_msg_data(bad), 'x', sizeof(pc_store_reply_t) + 8);
	cr_assert_eq(pc_store_reply_get(bad, &got), PC_EINVAL);
	pc_msg_free(bad);
	bad = pc_msg_new(PC_STORE_MSG_HISTORY, 64);
	cr_assert_eq(pc_store_reply_get(bad, &got), PC_EINVAL);
	pc_msg_free(bad);
}

static int probe_store(fx_t *f)
{
	pc_msg_t *probe = NULL, *rep = NULL;
	cr_assert_eq(pc_store_req_probe(&probe), 0);
	cr_assert_eq(pc_ask_sync(pc_store_actor(f->s), probe, 10000, &rep), 0);
	pc_store_reply_t r;
	cr_assert_eq(pc_store_reply_get(rep, &r), 0);
	pc_msg_free(rep);
	return r.rc;
}

/* Health: a write the file refuses (here a file size limit, as a full
 * disk would) marks the store unhealthy with the cause; a probe that
 * writes again once the limit is gone marks it healthy. */
/* What the health callback heard, in order. */
static int health_seen[8], health_n;

static void on_health(void *user, int rc)
{
	(void)user;
	if (health_n < 8)
		health_seen[health_n++] = rc;
}

Test(store, health_follows_whether_writes_succeed)
{
	SQLITE_ONLY("a file size limit (RLIMIT_FSIZE) fails this process's writes, not a server's");
	fx_t f;
	fx_init(&f);
	pc_store_close(f.s);
	pc_store_config_t cfg;
	pc_store_config_init(&cfg);
	cfg.on_health = on_health;
	fx_open_cfg(&f, &cfg);
	pc_store_health_t h;
	pc_store_health(f.s, &h);
	cr_assert_eq(h.rc, 0);
	pc_store_msg_t m = {.role = "user", .content = "{\"content\":\"before\"}"};
	cr_assert_eq(pc_store_append(f.s, "s", 0, &m, NULL), 0);

	cr_assert_neq(signal(SIGXFSZ, SIG_IGN), SIG_ERR);
	struct rlimit old, tiny = {.rlim_cur = 1, .rlim_max = RLIM_INFINITY};
	cr_assert_eq(getrlimit(RLIMIT_FSIZE, &old), 0);
	tiny.rlim_max = old.rlim_max;
	cr_assert_eq(setrlimit(RLIMIT_FSIZE, &tiny), 0);
	char big[8192];
	memset(big, 'x', sizeof(big) - 32);
	snprintf(big + sizeof(big) - 32, 32, "\"}");
	memcpy(big, "{\"content\":\"", 12);
	pc_store_msg_t m2 = {.role = "user", .content = big};
	int rc = pc_store_append(f.s, "s", 0, &m2, NULL);
	cr_assert_eq(rc, PC_STORE_EFULL, "%s", pc_store_strerror(rc));
	pc_store_health(f.s, &h);
	cr_assert_eq(h.rc, PC_STORE_EFULL);
	cr_assert_gt(h.since_ms, 0);

	/* the probe really writes: refused while the limit holds */
	cr_assert_eq(probe_store(&f), PC_STORE_EFULL);
	cr_assert_eq(setrlimit(RLIMIT_FSIZE, &old), 0);
	cr_assert_eq(probe_store(&f), 0);
	pc_store_health(f.s, &h);
	cr_assert_eq(h.rc, 0, "healthy again once a write succeeds");
	/* told once when writes started failing, once when they came back */
	cr_assert_eq(health_n, 2);
	cr_assert_eq(health_seen[0], PC_STORE_EFULL);
	cr_assert_eq(health_seen[1], 0);
	/* nothing acknowledged was lost */
	pc_store_history_t *hist = NULL;
	cr_assert_eq(pc_store_history(f.s, "s", &hist), 0);
	cr_assert_eq(pc_store_history_count(hist), 1);
	pc_store_history_free(hist);
	fx_fini(&f);
}

/* ---- paired devices ---- */

Test(store, paired_devices_survive_a_reopen_and_keep_only_the_token_hash)
{
	fx_t f;
	fx_init(&f);
	pc_store_device_t d = {.id = "dev-a", .public_key = "pk-a", .token_hash = "aa11", .scopes = "operator.read",
			       .approved_ms = 1000, .issued_ms = 2000};
	cr_assert_eq(pc_store_device_put(f.s, &d), 0);
	d = (pc_store_device_t){.id = "dev-b", .public_key = "pk-b", .token_hash = "bb22", .issued_ms = 3000};
	cr_assert_eq(pc_store_device_put(f.s, &d), 0);
	/* a put replaces: a rotated token's hash */
	d.token_hash = "bb33";
	cr_assert_eq(pc_store_device_put(f.s, &d), 0);
	cr_assert_eq(pc_store_device_put(f.s, &(pc_store_device_t){.id = "no-key", .token_hash = "x"}), PC_EINVAL);
	/* a change to a known device does not bring back a row that is gone */
	pc_store_device_t gone = {.id = "dev-c", .public_key = "pk-c", .token_hash = "cc", .update_only = true};
	cr_assert_eq(pc_store_device_put(f.s, &gone), PC_ENOTFOUND);
	d.update_only = true;
	d.scopes = "operator.write";
	cr_assert_eq(pc_store_device_put(f.s, &d), 0);
	cr_assert_eq(pc_store_device_delete(f.s, "never-there"), PC_ENOTFOUND);
	pc_store_close(f.s);
	f.s = NULL;
	cr_assert_eq(count_rows(&f, "SELECT count(*) FROM devices"), 2);

	pc_store_config_t cfg;
	pc_store_config_init(&cfg);
	fx_open_cfg(&f, &cfg);
	pc_store_devices_t *l = NULL;
	cr_assert_eq(pc_store_devices(f.s, &l), 0);
	cr_assert_eq(pc_store_devices_count(l), 2);
	pc_store_device_t got;
	pc_store_devices_get(l, 0, &got); /* most recently issued first */
	cr_assert_str_eq(got.id, "dev-b");
	cr_assert_str_eq(got.token_hash, "bb33");
	cr_assert_str_eq(got.scopes, "operator.write");
	pc_store_devices_get(l, 1, &got);
	cr_assert_str_eq(got.id, "dev-a");
	cr_assert_str_eq(got.public_key, "pk-a");
	cr_assert_str_eq(got.scopes, "operator.read");
	cr_assert_eq(got.approved_ms, 1000);
	cr_assert_eq(got.issued_ms, 2000);
	pc_store_devices_free(l);

	cr_assert_eq(pc_store_device_delete(f.s, "dev-a"), 0);
	cr_assert_eq(pc_store_devices(f.s, &l), 0);
	cr_assert_eq(pc_store_devices_count(l), 1);
	pc_store_devices_free(l);
	fx_fini(&f);
}

/* ---- cluster nodes ---- */

/* Node `id` as listed now: 1 live, 0 not live, -1 not listed. */
static int node_live(pc_store_t *s, const char *id)
{
	pc_store_nodes_t *l = NULL;
	cr_assert_eq(pc_store_nodes(s, &l), 0);
	int live = -1;
	for (size_t k = 0; k < pc_store_nodes_count(l); k++) {
		pc_store_node_t n;
		pc_store_nodes_get(l, k, &n);
		if (strcmp(n.id, id) == 0)
			live = n.live;
	}
	pc_store_nodes_free(l);
	return live;
}

/* Beats node `id` (not fresh) until the store's clock has passed `ms`:
 * that beat's reply. */
static pc_store_reply_t beat_after(pc_store_t *s, const char *id, const char *url, int64_t ms)
{
	pc_store_reply_t r = {0};
	uint64_t until = now_ms() + 10000;
	do {
		sleep_ms(2);
		cr_assert_eq(pc_store_node_beat(s, id, url, "p-1", 60000, false, &r), 0);
	} while (r.ended_ms <= ms && now_ms() < until);
	cr_assert_gt(r.ended_ms, ms, "the store's clock did not move");
	return r;
}

/* A beat makes or renews a node's row; the listing has live nodes first,
 * then by id. A plain beat keeps started_ms, a fresh one (a restart) moves
 * it to the beat; a lease of 0 (a node leaving) or one that ran out leaves
 * the node listed but not live. Both backends. */
Test(store, nodes_beat_list_and_expire)
{
	fx_t f;
	fx_init(&f);
	pc_store_reply_t r;
	cr_assert_eq(pc_store_node_beat(f.s, "node-b", "http://b:18789", "p-1", 60000, true, &r), 0);
	cr_assert(r.flags & PC_STORE_CREATED);
	cr_assert_gt(r.ended_ms, 0);
	cr_assert_eq(r.started_ms, r.ended_ms, "a node starts at its first beat");
	int64_t b_started = r.started_ms;
	cr_assert_eq(pc_store_node_beat(f.s, "node-a", NULL, "p-2", 60000, false, &r), 0);
	cr_assert(r.flags & PC_STORE_CREATED, "a first beat makes the row, fresh or not");
	cr_assert_eq(r.started_ms, r.ended_ms);

	pc_store_nodes_t *l = NULL;
	cr_assert_eq(pc_store_nodes(f.s, &l), 0);
	cr_assert_eq(pc_store_nodes_count(l), 2);
	pc_store_node_t n;
	pc_store_nodes_get(l, 0, &n);
	cr_assert_str_eq(n.id, "node-a");
	cr_assert_null(n.url);
	cr_assert_str_eq(n.owner, "p-2");
	cr_assert(n.live);
	cr_assert_eq(n.expires_ms, n.heartbeat_ms + 60000);
	pc_store_nodes_get(l, 1, &n);
	cr_assert_str_eq(n.id, "node-b");
	cr_assert_str_eq(n.url, "http://b:18789");
	cr_assert_str_eq(n.owner, "p-1");
	cr_assert(n.live);
	cr_assert_eq(n.started_ms, b_started);
	cr_assert_eq(n.heartbeat_ms, b_started);
	pc_store_nodes_free(l);

	r = beat_after(f.s, "node-b", "http://b:18789", b_started);
	cr_assert_eq(r.started_ms, b_started, "a plain beat keeps started_ms");
	cr_assert_eq(r.flags & PC_STORE_CREATED, 0);
	int64_t beat = r.ended_ms;
	cr_assert_eq(pc_store_node_beat(f.s, "node-b", "http://b:18789", "p-1", 60000, true, &r), 0);
	cr_assert_geq(r.ended_ms, beat);
	cr_assert_eq(r.started_ms, r.ended_ms, "a fresh beat restarts it");

	/* node-a leaves: listed still, after the live node-b */
	cr_assert_eq(pc_store_node_beat(f.s, "node-a", NULL, "p-2", 0, false, &r), 0);
	cr_assert_eq(pc_store_nodes(f.s, &l), 0);
	cr_assert_eq(pc_store_nodes_count(l), 2);
	pc_store_nodes_get(l, 0, &n);
	cr_assert_str_eq(n.id, "node-b");
	cr_assert(n.live);
	pc_store_nodes_get(l, 1, &n);
	cr_assert_str_eq(n.id, "node-a");
	cr_assert_not(n.live);
	cr_assert_eq(n.expires_ms, n.heartbeat_ms);
	cr_assert_eq(n.heartbeat_ms, r.ended_ms);
	pc_store_nodes_free(l);

	/* a short lease runs out; a beat's url replaces the row's */
	cr_assert_eq(pc_store_node_beat(f.s, "node-b", "http://b2:18789", "p-1", 200, false, &r), 0);
	AWAIT(node_live(f.s, "node-b") == 0, 10000);
	cr_assert_eq(node_live(f.s, "node-b"), 0, "not live once its lease passed");
	cr_assert_eq(pc_store_nodes(f.s, &l), 0);
	pc_store_nodes_get(l, 0, &n); /* neither is live: by id */
	cr_assert_str_eq(n.id, "node-a");
	pc_store_nodes_get(l, 1, &n);
	cr_assert_str_eq(n.id, "node-b");
	cr_assert_str_eq(n.url, "http://b2:18789");
	cr_assert_eq(n.expires_ms, r.ended_ms + 200);
	pc_store_nodes_free(l);

	/* bad input is refused before anything is sent */
	char name[PC_STORE_NAME_MAX + 2];
	memset(name, 'n', sizeof(name) - 1);
	name[sizeof(name) - 1] = 0;
	cr_assert_eq(pc_store_node_beat(f.s, NULL, NULL, "p-3", 1000, false, NULL), PC_EINVAL);
	cr_assert_eq(pc_store_node_beat(f.s, name, NULL, "p-3", 1000, false, NULL), PC_EINVAL);
	cr_assert_eq(pc_store_node_beat(f.s, "node-c", name, "p-3", 1000, false, NULL), PC_EINVAL);
	cr_assert_eq(pc_store_node_beat(f.s, "node-c", NULL, "p-3", -1, false, NULL), PC_EINVAL);
	cr_assert_eq(pc_store_node_beat(f.s, "node-c", NULL, NULL, 1000, false, NULL), PC_EINVAL);
	cr_assert_eq(pc_store_node_beat(f.s, "node-c", NULL, "", 1000, false, NULL), PC_EINVAL);
	cr_assert_eq(pc_store_node_beat(f.s, "node-c", NULL, name, 1000, false, NULL), PC_EINVAL);
	name[PC_STORE_NAME_MAX] = 0; /* the longest id there may be */
	cr_assert_eq(pc_store_node_beat(f.s, name, NULL, "p-3", 1000, false, NULL), 0);
	cr_assert_eq(pc_store_nodes(NULL, &l), PC_EINVAL);
	pc_store_close(f.s);
	f.s = NULL;
	cr_assert_eq(count_rows(&f, "SELECT count(*) FROM nodes"), 3);
	fx_fini(&f);
}

/* An actor asks a beat and the listing; a beat sent with no reply address
 * commits at once all the same (a late beat makes a live node look gone),
 * where another write would wait for lazy_ms. Both backends. */
typedef struct node_asker {
	pc_actor_t *store;
	int32_t beat_rc;
	int64_t beat_ms;
	int list_rc;
	size_t count;
	int64_t listed_ms; /* the asked node's heartbeat as listed */
	volatile int done;
} node_asker_t;

static int node_receive(pc_ctx_t *ctx, void *state, pc_msg_t *m)
{
	node_asker_t *a = state;
	pc_msg_t *req = NULL;
	if (m->type == ASK_GO) {
		CHECK(pc_store_req_node_beat("asked", "http://asked:1", "p-1", 60000, true, &req) == 0, "build beat");
		CHECK(pc_ask(ctx, a->store, req, NULL) == 0, "ask beat");
	} else if (m->type == PC_STORE_MSG_REPLY) {
		pc_store_reply_t r;
		CHECK(pc_store_reply_get(m, &r) == 0, "reply");
		a->beat_rc = r.rc;
		a->beat_ms = r.ended_ms;
		CHECK(pc_store_req_nodes(&req) == 0, "build nodes");
		CHECK(pc_ask(ctx, a->store, req, NULL) == 0, "ask nodes");
	} else if (m->type == PC_STORE_MSG_NODES) {
		pc_store_nodes_t *l = NULL;
		a->list_rc = pc_store_nodes_take(m, &l);
		a->count = pc_store_nodes_count(l);
		for (size_t k = 0; k < a->count; k++) {
			pc_store_node_t n;
			pc_store_nodes_get(l, k, &n);
			if (strcmp(n.id, "asked") == 0)
				a->listed_ms = n.heartbeat_ms;
		}
		pc_store_nodes_free(l);
		STORE(a->done, 1);
	}
	return 0;
}

static const pc_behavior_t node_beh = {"node asker", node_receive, NULL};

Test(store, node_beats_commit_at_once_and_actors_list_nodes)
{
	fx_t f;
	fx_init(&f);
	reopen_lazy(&f, 600000); /* a lazy write would wait ten minutes */
	pc_msg_t *req = NULL;
	cr_assert_eq(pc_store_req_node_beat("quiet", NULL, "p-2", 60000, true, &req), 0);
	cr_assert_eq(pc_send(pc_store_actor(f.s), req), 0);
	AWAIT(count_rows(&f, "SELECT count(*) FROM nodes") == 1, 10000);
	cr_assert_eq(count_rows(&f, "SELECT count(*) FROM nodes"), 1, "the beat was committed at once");

	reset_failures();
	node_asker_t *a = calloc(1, sizeof(*a));
	cr_assert_not_null(a);
	a->store = pc_store_actor(f.s);
	pc_actor_t *act = NULL;
	cr_assert_eq(pc_spawn(f.rt, &node_beh, a, &act), 0);
	cr_assert_eq(pc_send_u64(act, ASK_GO, 0), 0);
	AWAIT(LOAD(a->done), 20000);
	assert_no_failures();
	cr_assert_eq(a->beat_rc, 0);
	cr_assert_eq(a->list_rc, 0);
	cr_assert_eq(a->count, 2);
	cr_assert_gt(a->beat_ms, 0);
	cr_assert_eq(a->listed_ms, a->beat_ms);
	pc_actor_stop(act, PC_EXIT_NORMAL);
	pc_actor_release(act);
	quiesce(f.rt);
	free(a);
	fx_fini(&f);
}

/* A node's row is its owner's while it is live: a beat (a leaving one
 * too) from another process given the same id is refused, naming the
 * owner, and the row is unchanged; once the row has run out, the other's
 * beat takes it. Both backends. */
Test(store, a_live_node_row_is_its_owners_alone)
{
	fx_t f;
	fx_init(&f);
	pc_store_reply_t r;
	cr_assert_eq(pc_store_node_beat(f.s, "node-a", "http://a:1", "proc-1", 60000, true, &r), 0);
	int64_t started = r.started_ms;
	cr_assert_eq(pc_store_node_beat(f.s, "node-a", "http://a:2", "proc-2", 60000, true, &r), PC_EBUSY);
	cr_assert_str_eq(r.id, "proc-1");
	cr_assert_eq(pc_store_node_beat(f.s, "node-a", NULL, "proc-2", 0, false, &r), PC_EBUSY, "nor can it leave");
	cr_assert_str_eq(r.id, "proc-1");
	pc_store_nodes_t *l = NULL;
	cr_assert_eq(pc_store_nodes(f.s, &l), 0);
	cr_assert_eq(pc_store_nodes_count(l), 1);
	pc_store_node_t n;
	pc_store_nodes_get(l, 0, &n);
	cr_assert_str_eq(n.owner, "proc-1");
	cr_assert_str_eq(n.url, "http://a:1");
	cr_assert_eq(n.started_ms, started);
	cr_assert(n.live);
	pc_store_nodes_free(l);

	/* proc-1's lease runs out: proc-2 takes the row */
	cr_assert_eq(pc_store_node_beat(f.s, "node-a", "http://a:1", "proc-1", 50, false, &r), 0);
	AWAIT(node_live(f.s, "node-a") == 0, 10000);
	cr_assert_eq(pc_store_node_beat(f.s, "node-a", "http://a:2", "proc-2", 60000, true, &r), 0);
	cr_assert_eq(r.flags & PC_STORE_CREATED, 0);
	cr_assert_eq(pc_store_nodes(f.s, &l), 0);
	pc_store_nodes_get(l, 0, &n);
	cr_assert_str_eq(n.owner, "proc-2");
	cr_assert_str_eq(n.url, "http://a:2");
	cr_assert(n.live);
	pc_store_nodes_free(l);
	/* and now proc-1 is the stranger */
	cr_assert_eq(pc_store_node_beat(f.s, "node-a", NULL, "proc-1", 60000, false, &r), PC_EBUSY);
	cr_assert_str_eq(r.id, "proc-2");
	fx_fini(&f);
}

/* ---- session leases bound to a node's liveness ---- */

/* A node-bound lease (PC_STORE_LEASE_NODE) is held, with no renewal,
 * while a live node row has its holder as owner: an owner without one
 * takes nothing; another owner is refused, naming the holder; once the
 * holder's node has run out (or left), a live node takes the lease with a
 * new epoch, the grant names the owner it was taken from, and the old
 * holder's writes are fenced. Both backends. */
Test(store, a_node_bound_lease_lives_with_its_owners_node)
{
	fx_t f;
	fx_init(&f);
	int64_t e1 = 0, e2 = 0, e3 = 0;
	char holder[PC_STORE_ID_MAX + 1];
	cr_assert_eq(pc_store_lease_acquire(f.s, "s", "proc-a", PC_STORE_LEASE_NODE, NULL, &e1, holder), PC_ESTATE,
		     "an owner out of the cluster takes nothing");
	cr_assert_eq(count_rows(&f, "SELECT count(*) FROM sessions"), 0);
	cr_assert_eq(pc_store_node_beat(f.s, "node-a", NULL, "proc-a", 60000, true, NULL), 0);
	cr_assert_eq(pc_store_node_beat(f.s, "node-b", NULL, "proc-b", 60000, true, NULL), 0);
	cr_assert_eq(pc_store_lease_acquire(f.s, "s", "proc-c", PC_STORE_LEASE_NODE, NULL, &e1, holder), PC_ESTATE,
		     "a node's id is not its owner");
	cr_assert_eq(pc_store_lease_acquire(f.s, "s", "proc-a", PC_STORE_LEASE_NODE, NULL, &e1, holder), 0);
	cr_assert_eq(e1, 1);
	cr_assert_str_eq(holder, "", "nobody held it");

	/* held while node-a is live, against node-bound and timed asks alike */
	cr_assert_eq(pc_store_lease_acquire(f.s, "s", "proc-b", PC_STORE_LEASE_NODE, NULL, &e2, holder), PC_EBUSY);
	cr_assert_str_eq(holder, "proc-a");
	cr_assert_eq(pc_store_lease_acquire(f.s, "s", "proc-b", 60000, NULL, &e2, holder), PC_EBUSY);
	cr_assert_str_eq(holder, "proc-a");
	/* a renewal keeps the epoch and names nobody */
	cr_assert_eq(pc_store_lease_acquire(f.s, "s", "proc-a", PC_STORE_LEASE_NODE, NULL, &e2, holder), 0);
	cr_assert_eq(e2, e1);
	cr_assert_str_eq(holder, "");
	pc_store_msg_t m = {.role = "user", .content = "{}"};
	cr_assert_eq(pc_store_append(f.s, "s", e1, &m, NULL), 0);

	/* node-a's lease runs out: node-b takes the session */
	cr_assert_eq(pc_store_node_beat(f.s, "node-a", NULL, "proc-a", 50, false, NULL), 0);
	AWAIT(node_live(f.s, "node-a") == 0, 10000);
	cr_assert_eq(pc_store_lease_acquire(f.s, "s", "proc-b", PC_STORE_LEASE_NODE, NULL, &e2, holder), 0);
	cr_assert_eq(e2, e1 + 1, "a new holder fences the old one");
	cr_assert_str_eq(holder, "proc-a", "the grant names the owner it took the lease from");
	cr_assert_eq(pc_store_append(f.s, "s", e1, &m, NULL), PC_STORE_EFENCED);
	cr_assert_eq(pc_store_append(f.s, "s", e2, &m, NULL), 0);
	cr_assert_eq(pc_store_lease_acquire(f.s, "s", "proc-a", PC_STORE_LEASE_NODE, NULL, &e3, holder), PC_ESTATE,
		     "a node out of the cluster cannot take it back");

	/* node-a back, node-b leaving: node-a takes it at once */
	cr_assert_eq(pc_store_node_beat(f.s, "node-a", NULL, "proc-a", 60000, true, NULL), 0);
	cr_assert_eq(pc_store_lease_acquire(f.s, "s", "proc-a", PC_STORE_LEASE_NODE, NULL, &e3, holder), PC_EBUSY);
	cr_assert_str_eq(holder, "proc-b");
	cr_assert_eq(pc_store_node_beat(f.s, "node-b", NULL, "proc-b", 0, false, NULL), 0);
	cr_assert_eq(pc_store_lease_acquire(f.s, "s", "proc-a", PC_STORE_LEASE_NODE, NULL, &e3, holder), 0);
	cr_assert_eq(e3, e2 + 1);
	cr_assert_str_eq(holder, "proc-b");
	cr_assert_eq(pc_store_append(f.s, "s", e2, &m, NULL), PC_STORE_EFENCED);
	cr_assert_eq(pc_store_lease_acquire(f.s, "t", "proc-a", -2, NULL, &e3, holder), PC_EINVAL);
	fx_fini(&f);
}

/* A grant names the owner the lease was taken from, whatever the kind of
 * lease: one stolen or run out names its holder; a renewal, a take of a
 * released lease and an owner's retake of its own run-out lease name
 * nobody. Both backends. */
Test(store, a_grant_names_the_owner_it_took_the_lease_from)
{
	fx_t f;
	fx_init(&f);
	int64_t e = 0;
	char holder[PC_STORE_ID_MAX + 1];
	cr_assert_eq(pc_store_lease_acquire(f.s, "s", "proc-a", 60000, NULL, &e, holder), 0);
	cr_assert_str_eq(holder, "");
	cr_assert_eq(pc_store_lease_acquire(f.s, "s", "proc-a", 60000, NULL, &e, holder), 0);
	cr_assert_str_eq(holder, "", "a renewal");
	cr_assert_eq(pc_store_lease_acquire(f.s, "s", "proc-b", 60000, "proc-a", &e, holder), 0);
	cr_assert_str_eq(holder, "proc-a", "stolen");
	cr_assert_eq(e, 2);
	cr_assert_eq(pc_store_lease_release(f.s, "s", "proc-b", e), 0);
	cr_assert_eq(pc_store_lease_acquire(f.s, "s", "proc-c", 1, NULL, &e, holder), 0);
	cr_assert_str_eq(holder, "", "released: nobody held it");
	sleep_ms(5);
	cr_assert_eq(pc_store_lease_acquire(f.s, "s", "proc-c", 1, NULL, &e, holder), 0);
	cr_assert_str_eq(holder, "", "its own, run out");
	cr_assert_eq(e, 4);
	sleep_ms(5);
	cr_assert_eq(pc_store_lease_acquire(f.s, "s", "proc-d", 60000, NULL, &e, holder), 0);
	cr_assert_str_eq(holder, "proc-c", "run out");
	cr_assert_eq(e, 5);
	fx_fini(&f);
}

/* A state.db at schema version 9 (nodes without owners) opens: it is
 * migrated to 10, its node rows kept with no owner, and a row without one
 * is taken by the next beat, live or not. */
Test(store, version_9_database_gains_node_owners)
{
	SQLITE_ONLY("SQLite's schema version 9 (PostgreSQL's has its own test)");
	fx_t f;
	fx_init(&f);
	pc_store_close(f.s);
	f.s = NULL;
	exec_at(&f, "DROP TABLE nodes; CREATE TABLE nodes(id TEXT PRIMARY KEY, url TEXT,"
		    " started_ms INTEGER NOT NULL, heartbeat_ms INTEGER NOT NULL, expires_ms INTEGER NOT NULL)"
		    " WITHOUT ROWID; INSERT INTO nodes VALUES ('old', 'http://old:1', 1, 1, 9000000000000000);"
		    " DROP INDEX runs_open_session; ALTER TABLE runs DROP COLUMN replay_invalid; PRAGMA user_version = 9;");
	pc_store_config_t cfg;
	pc_store_config_init(&cfg);
	fx_open_cfg(&f, &cfg);
	pc_store_nodes_t *l = NULL;
	cr_assert_eq(pc_store_nodes(f.s, &l), 0);
	cr_assert_eq(pc_store_nodes_count(l), 1);
	pc_store_node_t n;
	pc_store_nodes_get(l, 0, &n);
	cr_assert_str_eq(n.id, "old");
	cr_assert_null(n.owner);
	cr_assert(n.live);
	pc_store_nodes_free(l);
	cr_assert_eq(pc_store_node_beat(f.s, "old", NULL, "proc-1", 60000, false, NULL), 0);
	cr_assert_eq(node_live(f.s, "old"), 1);
	pc_store_close(f.s);
	f.s = NULL;
	cr_assert_eq(count_rows(&f, "PRAGMA user_version"), 12);
	cr_assert_eq(count_rows(&f, "SELECT count(*) FROM nodes WHERE owner = 'proc-1' AND started_ms = 1"), 1);
	fx_fini(&f);
}

/* A state.db at schema version 10 (no replay_invalid on runs) opens: it is
 * migrated to 11, and its ended runs read back as not replay-invalid. */
Test(store, version_10_database_gains_replay_invalid_runs)
{
	SQLITE_ONLY("SQLite's schema version 10 (PostgreSQL's has its own test)");
	fx_t f;
	fx_init(&f);
	cr_assert_eq(pc_store_run_begin(f.s, &(pc_store_run_new_t){.key = "s", .run_id = "old"}, NULL), 0);
	cr_assert_eq(pc_store_run_end(f.s, &(pc_store_run_end_t){.run_id = "old", .status = PC_STORE_RUN_ERROR}), 0);
	pc_store_close(f.s);
	f.s = NULL;
	exec_at(&f, "DROP INDEX runs_open_session; ALTER TABLE runs DROP COLUMN replay_invalid; PRAGMA user_version = 10;");
	pc_store_config_t cfg;
	pc_store_config_init(&cfg);
	fx_open_cfg(&f, &cfg);
	pc_store_reply_t r;
	cr_assert_eq(pc_store_run_get(f.s, "old", &r), 0);
	cr_assert_eq(r.status, PC_STORE_RUN_ERROR);
	cr_assert_eq(r.flags & PC_STORE_REPLAY_INVALID, 0u);
	pc_store_close(f.s);
	f.s = NULL;
	cr_assert_eq(count_rows(&f, "PRAGMA user_version"), 12);
	fx_fini(&f);
}
