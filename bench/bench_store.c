/*
 * store: transcript appends through the store actor (SQLite, WAL,
 * synchronous=FULL: every acknowledged append is on disk), and history
 * loads.
 *
 * Appends: S session actors (S = 1, 10, 100, 1000), each appending ~200
 * byte messages to its own session one after another (ask, wait for the
 * durable reply, ask again) for --n milliseconds (default 1500) per
 * configuration, in three commit modes:
 *   - eager:     group commit, the default: an idle store commits at once;
 *                appends arriving during a commit share the next one (at
 *                most 256 a transaction);
 *   - window1ms: group commit that also waits 1 ms for company after the
 *                first append of an idle store;
 *   - single:    one transaction per append (group_max 1).
 * Reported: appends/s, the latency from ask to durable reply (p50, p99,
 * max; a log-linear histogram, ~6% resolution), transactions and appends
 * per transaction.
 *
 * History: one session of 10, 1,000 and 100,000 messages (~200 bytes of
 * content each; written with one rewrite), loaded as a snapshot through
 * pc_store_history from the main thread: mean and p99 time per load. On
 * PostgreSQL 10 and 1,000, polled (the reader's rows collected on the
 * I/O loop) and unpolled (a blocking thread waiting for them).
 *
 * Turns: S sessions (1, 10, 100, 1000), each running agent-turn-shaped
 * writes back to back: a run row (waited for), then its user and
 * assistant messages (lazy) and the run's end (waited for): turns/s, the
 * p99 time of a turn, transactions per turn.
 *
 * Every configuration uses a fresh database in a temporary directory
 * under /tmp (removed at the end). Figures depend on the disk's fsync
 * latency: that is the cost group commit amortises.
 *
 * With PINCER_BENCH_PG_URL set (bench/run store starts a PostgreSQL
 * server for it), the eager appends and the turns run again against
 * PostgreSQL, each configuration in a fresh schema, with the writer's
 * connection polled on an I/O loop (and the appends at 1 and 100 sessions
 * once more with a blocking thread waiting instead: eager-unpolled); the rows add the
 * server's own commits per second and per append or turn
 * (pg_stat_database) and the statements per append or turn the store
 * sent (a batch is BEGIN, the transaction's id, its writes and COMMIT on
 * one pipeline: one round trip).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "benchlib.h"
#include "io/io.h"
#include "io/store/store.h"

enum { MSG_GO = 1 };

#define HSUB 16
#define HBUCKETS (64 * HSUB)

typedef struct hist {
	uint64_t b[HBUCKETS];
	uint64_t n;
} hist_t;

static int h_index(uint64_t ns)
{
	if (ns < HSUB)
		return (int)ns;
	int msb = 63 - __builtin_clzll(ns);
	int sub = (int)((ns >> (msb - 4)) - HSUB);
	return (msb - 3) * HSUB + sub;
}

/* The upper bound of bucket i. */
static uint64_t h_value(int i)
{
	if (i < HSUB)
		return (uint64_t)i;
	int msb = i / HSUB + 3, sub = i % HSUB;
	return ((uint64_t)(HSUB + sub + 1) << (msb - 4)) - 1;
}

static void h_add(hist_t *h, uint64_t ns)
{
	h->b[h_index(ns)]++;
	h->n++;
}

static void h_merge(hist_t *into, const hist_t *h)
{
	for (int i = 0; i < HBUCKETS; i++)
		into->b[i] += h->b[i];
	into->n += h->n;
}

static uint64_t h_quantile(const hist_t *h, double q)
{
	uint64_t want = (uint64_t)((double)h->n * q), seen = 0;
	for (int i = 0; i < HBUCKETS; i++) {
		seen += h->b[i];
		if (seen > want || (seen == h->n && h->b[i]))
			return h_value(i);
	}
	return 0;
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- append workload ---- */

typedef struct shared {
	int stop;         /* __atomic: stop asking */
	uint32_t running; /* __atomic: sessions still waiting for a reply */
	bench_latch_t latch;
} shared_t;

typedef struct sess {
	pc_actor_t *store;
	shared_t *sh;
	char key[32];
	uint64_t sent_ns, done, fails, k;
	uint32_t waiting; /* replies still due in this append or turn */
	bool begun;       /* turns: the run row came; its end is asked */
	hist_t h;
} sess_t;

static void bench_content(sess_t *s, char *buf, size_t n)
{
	snprintf(buf, n,
		 "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"message %llu of the benchmark, "
		 "about two hundred bytes of text to look like a short chat turn\"}]}",
		 (unsigned long long)s->k++);
}

static int ask_append(pc_ctx_t *ctx, sess_t *s, bool lazy)
{
	char content[256];
	bench_content(s, content, sizeof(content));
	pc_store_msg_t m = {.role = "user", .content = content};
	pc_msg_t *req = NULL;
	int rc = pc_store_req_append(s->key, 0, &m, &req);
	if (rc != 0)
		return rc;
	if (lazy)
		pc_store_req_lazy(req);
	return pc_ask(ctx, s->store, req, NULL);
}

static int ask_one(pc_ctx_t *ctx, sess_t *s)
{
	s->sent_ns = now_ns();
	s->waiting = 1;
	return ask_append(ctx, s, false);
}

/* A turn's first write: its run row. */
static int ask_turn(pc_ctx_t *ctx, sess_t *s)
{
	char run[48];
	snprintf(run, sizeof(run), "%s-%llu", s->key, (unsigned long long)s->k);
	pc_store_run_new_t r = {.key = s->key, .run_id = run};
	pc_msg_t *req = NULL;
	int rc = pc_store_req_run_begin(&r, &req);
	if (rc != 0)
		return rc;
	s->sent_ns = now_ns();
	s->waiting = 1;
	s->begun = false;
	return pc_ask(ctx, s->store, req, NULL);
}

/* The rest of the turn: its messages, lazily, and the run's end, which
 * commits them. */
static int ask_turn_end(pc_ctx_t *ctx, sess_t *s)
{
	char run[48];
	snprintf(run, sizeof(run), "%s-%llu", s->key, (unsigned long long)s->k);
	s->begun = true;
	int rc = ask_append(ctx, s, true);
	if (rc == 0)
		rc = ask_append(ctx, s, true);
	pc_store_run_end_t e = {.run_id = run, .status = PC_STORE_RUN_OK};
	pc_msg_t *req = NULL;
	if (rc == 0)
		rc = pc_store_req_run_end(&e, &req);
	if (rc == 0)
		rc = pc_ask(ctx, s->store, req, NULL);
	s->waiting = 4; /* three replies, and the mark that the run row came */
	return rc;
}

static void finished(sess_t *s)
{
	if (__atomic_sub_fetch(&s->sh->running, 1, __ATOMIC_ACQ_REL) == 0)
		bench_latch_signal(&s->sh->latch);
}

static int sess_receive(pc_ctx_t *ctx, void *state, pc_msg_t *m, bool turns)
{
	sess_t *s = state;
	if (m->type == MSG_GO)
		return turns ? ask_turn(ctx, s) : ask_one(ctx, s);
	if (m->type != PC_STORE_MSG_REPLY)
		return 0;
	pc_store_reply_t r;
	if (pc_store_reply_get(m, &r) != 0 || r.rc != 0)
		s->fails++;
	if (turns && !s->begun && ask_turn_end(ctx, s) != 0)
		s->fails++;
	if (--s->waiting > 0)
		return 0;
	h_add(&s->h, now_ns() - s->sent_ns);
	s->done++;
	if (__atomic_load_n(&s->sh->stop, __ATOMIC_ACQUIRE)) {
		finished(s);
		return 0;
	}
	int rc = turns ? ask_turn(ctx, s) : ask_one(ctx, s);
	if (rc != 0) {
		s->fails++;
		finished(s);
	}
	return 0;
}

static int append_receive(pc_ctx_t *ctx, void *state, pc_msg_t *m)
{
	return sess_receive(ctx, state, m, false);
}

static int turn_receive(pc_ctx_t *ctx, void *state, pc_msg_t *m)
{
	return sess_receive(ctx, state, m, true);
}

static const pc_behavior_t append_beh = {"bench-appends", append_receive, NULL};
static const pc_behavior_t turn_beh = {"bench-turns", turn_receive, NULL};

typedef struct mode {
	const char *name;
	uint32_t window_ms, group_max;
	bool unpolled; /* PostgreSQL: a blocking thread waits for each batch */
} commit_mode_t;

static const commit_mode_t modes[] = {
	{"eager", 0, 0, false},
	{"window1ms", 1, 0, false},
	{"single", 0, 1, false},
	/* PostgreSQL only: eager without an I/O layer polling the connection */
	{"eager-unpolled", 0, 0, true},
};

static char tmpdir[64];

static void rm_db(void)
{
	static const char *const names[] = {"state.db", "state.db-wal", "state.db-shm"};
	char p[128];
	for (int k = 0; k < 3; k++) {
		snprintf(p, sizeof(p), "%s/%s", tmpdir, names[k]);
		unlink(p);
	}
}

/* ---- PostgreSQL ---- */

static const char *pg_base; /* PINCER_BENCH_PG_URL, or NULL */
static char pg_url[1024];   /* the configuration's schema */
static unsigned pg_schemas;

static void pg_quiet(void *arg, const char *message)
{
	(void)arg;
	(void)message; /* DROP ... CASCADE lists every object it drops */
}

static PGresult *pg_exec(const char *url, const char *sql)
{
	PGconn *c = PQconnectdb(url);
	PQsetNoticeProcessor(c, pg_quiet, NULL);
	if (PQstatus(c) != CONNECTION_OK)
		bench_fail("postgresql: %s", PQerrorMessage(c));
	PGresult *r = PQexec(c, sql);
	ExecStatusType st = PQresultStatus(r);
	if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK)
		bench_fail("postgresql: %s: %s", sql, PQerrorMessage(c));
	PQfinish(c);
	return r;
}

/* A fresh schema for the next configuration: pg_url names it. */
static void pg_fresh(void)
{
	char sql[96];
	snprintf(sql, sizeof(sql), "CREATE SCHEMA bench_%d_%u", (int)getpid(), ++pg_schemas);
	PQclear(pg_exec(pg_base, sql));
	snprintf(pg_url, sizeof(pg_url), "%s%coptions=-csearch_path%%3Dbench_%d_%u", pg_base,
		 strchr(pg_base, '?') ? '&' : '?', (int)getpid(), pg_schemas);
}

static void pg_drop_schemas(void)
{
	for (unsigned k = 1; k <= pg_schemas; k++) {
		char sql[96];
		snprintf(sql, sizeof(sql), "DROP SCHEMA bench_%d_%u CASCADE", (int)getpid(), k);
		PQclear(pg_exec(pg_base, sql));
	}
}

/* The server's commits so far (every database). */
static int64_t pg_commits(void)
{
	PGresult *r = pg_exec(pg_base, "SELECT sum(xact_commit)::bigint FROM pg_stat_database");
	int64_t n = PQntuples(r) == 1 ? strtoll(PQgetvalue(r, 0, 0), NULL, 10) : 0;
	PQclear(r);
	return n;
}

/* The statistics collector publishes a backend's counts when it goes
 * idle, within a second: wait until the count stops moving. */
static int64_t pg_commits_settled(void)
{
	int64_t a = pg_commits(), b;
	for (int k = 0; k < 40; k++) {
		usleep(100 * 1000);
		b = pg_commits();
		if (b == a && k >= 10)
			break;
		a = b;
	}
	return a;
}

static pc_io_t *pg_io; /* polls the PostgreSQL writer's connection, as the gateway's does */

static pc_store_t *open_fresh(pc_runtime_t *rt, const commit_mode_t *md, bool pg)
{
	char path[128];
	rm_db();
	snprintf(path, sizeof(path), "%s/state.db", tmpdir);
	pc_store_config_t cfg;
	pc_store_config_init(&cfg);
	cfg.path = path;
	if (pg) {
		pg_fresh();
		pc_io_config_t io = {.threads = 1};
		if (!md->unpolled && pc_io_new(rt, &io, &pg_io) != 0)
			bench_fail("pc_io_new");
		cfg.url = pg_url;
		cfg.io = pg_io;
	}
	cfg.window_ms = md->window_ms;
	cfg.group_max = md->group_max;
	pc_store_t *s = NULL;
	int rc = pc_store_open(rt, &cfg, &s);
	if (rc != 0)
		bench_fail("open %s: %s", pg ? "postgresql" : path, pc_store_strerror(rc));
	return s;
}

/* Appends (turns false) or turns from nsess sessions for dur_ms. */
static void run_load(const bench_opts_t *o, const commit_mode_t *md, uint32_t nsess, uint64_t dur_ms, bool pg,
		     bool turns)
{
	pc_runtime_t *rt = bench_runtime(o);
	pc_store_t *st = open_fresh(rt, md, pg);
	shared_t sh = {0};
	bench_latch_init(&sh.latch);
	sh.running = nsess;
	sess_t **ss = calloc(nsess, sizeof(*ss));
	pc_actor_t **as = calloc(nsess, sizeof(*as));
	if (!ss || !as)
		bench_fail("out of memory");
	for (uint32_t k = 0; k < nsess; k++) {
		ss[k] = calloc(1, sizeof(sess_t));
		if (!ss[k])
			bench_fail("out of memory");
		ss[k]->store = pc_store_actor(st);
		ss[k]->sh = &sh;
		snprintf(ss[k]->key, sizeof(ss[k]->key), "agent:bench:%u", k);
		if (pc_spawn(rt, turns ? &turn_beh : &append_beh, ss[k], &as[k]) != 0)
			bench_fail("spawn");
	}
	int64_t commits0 = pg ? pg_commits_settled() : 0;
	double t0 = bench_now_s();
	for (uint32_t k = 0; k < nsess; k++)
		if (pc_send_u64(as[k], MSG_GO, 0) != 0)
			bench_fail("send");
	usleep((useconds_t)(dur_ms * 1000));
	__atomic_store_n(&sh.stop, 1, __ATOMIC_RELEASE);
	bench_latch_wait(&sh.latch, BENCH_TIMEOUT_S, turns ? "turns" : "appends");
	double wall = bench_now_s() - t0;
	hist_t all = {0};
	uint64_t done = 0, fails = 0;
	for (uint32_t k = 0; k < nsess; k++) {
		h_merge(&all, &ss[k]->h);
		done += ss[k]->done;
		fails += ss[k]->fails;
	}
	pc_store_stats_t stats;
	pc_store_stats(st, &stats);
	if (fails)
		bench_fail("%llu %s failed", (unsigned long long)fails, turns ? "turns" : "appends");
	char extra[768];
	int n = snprintf(extra, sizeof(extra),
			 "\"backend\":\"%s\",\"mode\":\"%s\",\"sessions\":%u,\"%s\":%.0f,\"p50_us\":%.1f,"
			 "\"p99_us\":%.1f,\"max_us\":%.1f,\"txns\":%llu,\"%s\":%.2f,\"writes_per_txn\":%.1f",
			 pg ? "postgresql" : "sqlite", md->name, nsess, turns ? "turns_per_s" : "appends_per_s",
			 (double)done / wall, (double)h_quantile(&all, 0.50) / 1e3, (double)h_quantile(&all, 0.99) / 1e3,
			 (double)h_quantile(&all, 1.0) / 1e3, (unsigned long long)stats.batches,
			 turns ? "txns_per_turn" : "txns_per_append", done ? (double)stats.batches / (double)done : 0.0,
			 stats.batches ? (double)stats.writes / (double)stats.batches : 0.0);
	/* closed first: the last commits are counted, and the server's
	 * statistics see the connections go idle */
	for (uint32_t k = 0; k < nsess; k++)
		pc_actor_release(as[k]);
	pc_store_close(st);
	pc_io_free(pg_io);
	pg_io = NULL;
	if (pg && n > 0 && (size_t)n < sizeof(extra)) {
		int64_t commits = pg_commits_settled() - commits0;
		/* per batch: BEGIN, the transaction's id, COMMIT, and each write */
		snprintf(extra + n, sizeof(extra) - (size_t)n,
			 ",\"server_commits_per_s\":%.0f,\"server_commits_per_%s\":%.3f,\"statements_per_%s\":%.2f,"
			 "\"round_trips_per_%s\":%.2f",
			 (double)commits / wall, turns ? "turn" : "append", done ? (double)commits / (double)done : 0.0,
			 turns ? "turn" : "append",
			 done ? (double)(stats.writes + 3 * stats.batches) / (double)done : 0.0, turns ? "turn" : "append",
			 done ? (double)stats.batches / (double)done : 0.0);
	}
	bench_report(turns ? "store_turn" : "store_append", o->workers, wall, done, extra);
	pc_runtime_free(rt);
	bench_latch_destroy(&sh.latch);
	free(as);
	for (uint32_t k = 0; k < nsess; k++)
		free(ss[k]);
	free(ss);
}

/* ---- history loads ---- */

static void run_history(const bench_opts_t *o, const commit_mode_t *md, size_t nmsg, uint32_t loads, bool pg)
{
	pc_runtime_t *rt = bench_runtime(o);
	pc_store_t *st = open_fresh(rt, md, pg);
	pc_store_msg_t *v = calloc(nmsg, sizeof(*v));
	char *content = malloc(256);
	if (!v || !content)
		bench_fail("out of memory");
	snprintf(content, 256,
		 "{\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"a stored reply of about two "
		 "hundred bytes, the size of a short chat turn in a long session history\"}]}");
	for (size_t k = 0; k < nmsg; k++)
		v[k] = (pc_store_msg_t){.role = k % 2 ? "assistant" : "user", .content = content};
	pc_store_reply_t r;
	int64_t last = 0;
	int rc = pc_store_session(st, "agent:bench:history", "bench", NULL, NULL, &r);
	if (rc == 0)
		rc = pc_store_rewrite(st, "agent:bench:history", 0, 0, 1, v, nmsg, &last);
	if (rc != 0)
		bench_fail("fill: %s", pc_store_strerror(rc));
	hist_t h = {0};
	double t0 = bench_now_s();
	for (uint32_t k = 0; k < loads; k++) {
		uint64_t a = now_ns();
		pc_store_history_t *hs = NULL;
		rc = pc_store_history(st, "agent:bench:history", &hs);
		if (rc != 0 || pc_store_history_count(hs) != nmsg)
			bench_fail("load: %s", pc_store_strerror(rc));
		pc_store_history_free(hs);
		h_add(&h, now_ns() - a);
	}
	double wall = bench_now_s() - t0;
	pc_store_stats_t stats;
	pc_store_stats(st, &stats);
	char extra[256];
	snprintf(extra, sizeof(extra),
		 "\"backend\":\"%s\",\"polled\":%s,\"messages\":%zu,\"loads\":%u,\"mean_ms\":%.3f,\"p99_ms\":%.3f",
		 pg ? "postgresql" : "sqlite", stats.polled_reads ? "true" : "false", nmsg, loads, wall * 1e3 / loads,
		 (double)h_quantile(&h, 0.99) / 1e6);
	bench_report("store_history", o->workers, wall, loads, extra);
	pc_store_close(st);
	pc_io_free(pg_io);
	pg_io = NULL;
	pc_runtime_free(rt);
	free(v);
	free(content);
}

int main(int argc, char **argv)
{
	bench_opts_t o;
	bench_parse(argc, argv, &o);
	uint64_t dur_ms = o.n ? o.n : 1500;
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/pc-bench-store-XXXXXX");
	if (!mkdtemp(tmpdir))
		bench_fail("mkdtemp");
	static const uint32_t sessions[] = {1, 10, 100, 1000};
	const size_t nsizes = sizeof(sessions) / sizeof(*sessions);
	for (size_t m = 0; m < 3; m++) /* the SQLite modes */
		for (size_t k = 0; k < nsizes; k++)
			run_load(&o, &modes[m], sessions[k], dur_ms, false, false);
	for (size_t k = 0; k < nsizes; k++)
		run_load(&o, &modes[0], sessions[k], dur_ms, false, true);
	pg_base = getenv("PINCER_BENCH_PG_URL");
	if (pg_base && *pg_base) {
		for (size_t k = 0; k < nsizes; k++)
			run_load(&o, &modes[0], sessions[k], dur_ms, true, false);
		/* against a blocking thread per batch, at 1 and 100 sessions */
		run_load(&o, &modes[3], 1, dur_ms, true, false);
		run_load(&o, &modes[3], 100, dur_ms, true, false);
		for (size_t k = 0; k < nsizes; k++)
			run_load(&o, &modes[0], sessions[k], dur_ms, true, true);
		/* reads polled on the loop, then a blocking thread waiting */
		for (size_t m = 0; m < 4; m += 3) {
			run_history(&o, &modes[m], 10, 1000, true);
			run_history(&o, &modes[m], 1000, 200, true);
		}
		pg_drop_schemas();
	}
	run_history(&o, &modes[0], 10, 1000, false);
	run_history(&o, &modes[0], 1000, 200, false);
	run_history(&o, &modes[0], 100000, 5, false);
	rm_db();
	rmdir(tmpdir);
	return 0;
}
