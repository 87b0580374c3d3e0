/*
 * The store on PostgreSQL, where the network can fail: one write of a
 * batch failing alone in the server, the statement timeout, a writer
 * connection terminated mid-transaction, a COMMIT whose answer is lost
 * (decided by the transaction's id), an answer lost before the id came
 * (unknown, never acknowledged), an unreachable server (writes held and
 * sent again, failed past the hold, health says why, and come back; a
 * write held while it is away lands once it is back), a server restarted
 * or crashed under load (nothing acknowledged lost), two stores creating
 * one schema at once, a node's heartbeat on the database's clock, and
 * older schemas migrated forward (the nodes table, node owners,
 * replay-invalid runs).
 *
 * Runs under ctest's "pg" fixture (tests/support/pg_cluster), which sets
 * PINCER_TEST_PG_URL (and, for the restart, PINCER_TEST_PG_CLUSTER and
 * PINCER_TEST_PG_DIR); skipped without it.
 */
#include <criterion/criterion.h>

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pg_proxy.h"
#include "pg_test.h"
#include "test_util.h"
#include "io/io.h"
#include "io/store/store.h"

/* ---- fixture ---- */

typedef struct fx {
	char url[1024], schema[64];
	pc_runtime_t *rt;
	pc_io_t *io; /* polls the writer's connection (NULL: a blocking thread waits) */
	pc_store_t *s;
	pg_proxy_t *proxy;
} fx_t;

/* The server's unix socket, from PINCER_TEST_PG_URL's host=DIR. */
static void server_socket(char *buf, size_t n)
{
	const char *base = getenv("PINCER_TEST_PG_URL");
	const char *h = strstr(base, "host=");
	cr_assert_not_null(h, "PINCER_TEST_PG_URL names no host directory");
	h += 5;
	snprintf(buf, n, "%.*s/.s.PGSQL.5432", (int)strcspn(h, "&"), h);
}

/* A fresh schema; with `via_proxy`, the store reaches it through a proxy
 * that can drop the connection on cue. */
static void fx_init(fx_t *f, bool via_proxy)
{
	memset(f, 0, sizeof(*f));
	if (!pg_test_url_schema(f->url, sizeof(f->url), f->schema))
		cr_skip_test("PINCER_TEST_PG_URL is not set (ctest runs this under the pg fixture)");
	if (via_proxy) {
		char sock[512], extra[128];
		server_socket(sock, sizeof(sock));
		f->proxy = pg_proxy_start(sock);
		cr_assert_not_null(f->proxy);
		snprintf(extra, sizeof(extra), "options=-csearch_path%%3D%s", f->schema);
		pg_proxy_url(f->proxy, "pincer", "postgres", extra, f->url, sizeof(f->url));
	}
	f->rt = start_rt(2);
	pc_io_config_t io = {.threads = 1};
	cr_assert_eq(pc_io_new(f->rt, &io, &f->io), 0);
}

static void fx_open_holding(fx_t *f, uint32_t statement_timeout_ms, uint32_t hold_ms)
{
	pc_store_config_t cfg;
	pc_store_config_init(&cfg);
	cfg.url = f->url;
	cfg.io = f->io;
	cfg.statement_timeout_ms = statement_timeout_ms;
	cfg.hold_ms = hold_ms;
	cfg.window_ms = 100; /* writes sent together share a batch */
	cr_assert_eq(pc_store_open(f->rt, &cfg, &f->s), 0);
}

static void fx_open(fx_t *f, uint32_t statement_timeout_ms)
{
	fx_open_holding(f, statement_timeout_ms, 0);
}

static void fx_fini(fx_t *f)
{
	pc_store_close(f->s);
	pc_io_free(f->io);
	FREE_RUNTIME_CHECKED(f->rt);
	pg_proxy_stop(f->proxy);
}

/* The fixture's schema straight on the server, not through the proxy. */
static void direct_url(const fx_t *f, char *url, size_t n)
{
	snprintf(url, n, "%s%coptions=-csearch_path%%3D%s", getenv("PINCER_TEST_PG_URL"),
		 strchr(getenv("PINCER_TEST_PG_URL"), '?') ? '&' : '?', f->schema);
}

static long long q_int(const fx_t *f, const char *sql)
{
	char url[1200];
	direct_url(f, url, sizeof(url));
	long long v = -1;
	cr_assert(pg_test_query_int(url, sql, &v), "no value: %s", sql);
	return v;
}

static pc_msg_t *append_req(const char *key, int64_t epoch, const char *role, const char *content)
{
	pc_store_msg_t m = {.role = role, .content = content};
	pc_msg_t *req = NULL;
	cr_assert_eq(pc_store_req_append(key, epoch, &m, &req), 0);
	return req;
}

static pc_msg_t *run_req(const char *key, const char *run)
{
	pc_store_run_new_t r = {.key = key, .run_id = run};
	pc_msg_t *req = NULL;
	cr_assert_eq(pc_store_req_run_begin(&r, &req), 0);
	return req;
}

/* Appends an empty message to `key`, which must succeed: its seq. */
static int64_t append_ok(pc_store_t *s, const char *key)
{
	pc_store_msg_t m = {.role = "user", .content = "{}"};
	int64_t seq = 0;
	int rc = pc_store_append(s, key, 0, &m, &seq);
	cr_assert_eq(rc, 0, "append to %s: %s", key, pc_store_strerror(rc));
	return seq;
}

/* ---- asking several writes at once and collecting the answers ---- */

#define ASK_MAX 16
enum { ASK_GO = 0x7e570001u };

typedef struct asks {
	pc_actor_t *store;
	pc_msg_t *req[ASK_MAX];
	int n;
	uint64_t corr[ASK_MAX];
	pc_store_reply_t res[ASK_MAX];
	int got; /* __atomic */
} asks_t;

static int asks_receive(pc_ctx_t *ctx, void *state, pc_msg_t *m)
{
	asks_t *a = state;
	if (m->type == ASK_GO) {
		for (int k = 0; k < a->n; k++) {
			cr_assert_eq(pc_ask(ctx, a->store, a->req[k], &a->corr[k]), 0);
			a->req[k] = NULL;
		}
		return 0;
	}
	for (int k = 0; k < a->n; k++)
		if (m->type == PC_STORE_MSG_REPLY && a->corr[k] == m->corr) {
			cr_assert_eq(pc_store_reply_get(m, &a->res[k]), 0);
			__atomic_add_fetch(&a->got, 1, __ATOMIC_RELEASE);
		}
	return 0;
}

static const pc_behavior_t asks_beh = {"asks", asks_receive, NULL};

/* Asks a->req[0..n) in that order from one actor (one batch, given the
 * store's window) and waits for every answer. */
static void ask_all(fx_t *f, asks_t *a)
{
	a->store = pc_store_actor(f->s);
	pc_actor_t *actor = NULL;
	cr_assert_eq(pc_spawn(f->rt, &asks_beh, a, &actor), 0);
	cr_assert_eq(pc_send_u64(actor, ASK_GO, 0), 0);
	for (int k = 0; k < 3000 && __atomic_load_n(&a->got, __ATOMIC_ACQUIRE) < a->n; k++)
		usleep(10 * 1000);
	cr_assert_eq(__atomic_load_n(&a->got, __ATOMIC_ACQUIRE), a->n, "answers never came");
	pc_actor_release(actor);
}

/* ---- the connection polled on an I/O loop ---- */

Test(store_pg, a_polled_batch_holds_no_blocking_thread_while_the_server_answers)
{
	fx_t f;
	fx_init(&f, false);
	fx_open(&f, 0);
	append_ok(f.s, "s");
	quiesce(f.rt);
	uint64_t jobs0 = stats(f.rt).blocking_done;
	for (int k = 0; k < 20; k++)
		append_ok(f.s, "s");
	cr_assert_eq(append_ok(f.s, "s"), 22);
	quiesce(f.rt);
	cr_assert_eq(stats(f.rt).blocking_done, jobs0, "a write went to the blocking pool");
	pc_store_stats_t st;
	pc_store_stats(f.s, &st);
	cr_assert_gt(st.write_cpu_ns, 0, "the loop's work on the batches is counted");
	cr_assert_eq(q_int(&f, "SELECT count(*) FROM messages"), 22);
	/* without an I/O layer, a blocking thread waits for each batch */
	pc_store_close(f.s);
	pc_store_config_t cfg;
	pc_store_config_init(&cfg);
	cfg.url = f.url;
	cr_assert_eq(pc_store_open(f.rt, &cfg, &f.s), 0);
	quiesce(f.rt);
	jobs0 = stats(f.rt).blocking_done;
	for (int k = 0; k < 4; k++)
		append_ok(f.s, "s");
	cr_assert_eq(append_ok(f.s, "s"), 27);
	quiesce(f.rt); /* a job is counted once it returned, after its answer */
	cr_assert_geq(stats(f.rt).blocking_done, jobs0 + 5);
	fx_fini(&f);
}

/* ---- one write failing in the server ---- */

Test(store_pg, rule_refusals_share_one_transaction_with_the_writes_that_commit)
{
	fx_t f;
	fx_init(&f, false);
	fx_open(&f, 0);
	int64_t e = 0;
	cr_assert_eq(pc_store_lease_acquire(f.s, "fenced", "node-a", 60000, NULL, &e, NULL), 0);
	cr_assert_eq(pc_store_run_begin(f.s, &(pc_store_run_new_t){.key = "s", .run_id = "taken"}, NULL), 0);
	asks_t a = {.n = 5};
	a.req[0] = append_req("s", 0, "user", "{\"n\":1}");
	a.req[1] = run_req("s", "taken");                          /* a run id in use */
	a.req[2] = append_req("fenced", e + 1, "user", "{\"n\":2}"); /* a stale epoch */
	a.req[3] = run_req("s", "fresh");
	a.req[4] = append_req("s", 0, "user", "{\"n\":3}");
	ask_all(&f, &a);
	cr_assert_eq(a.res[0].rc, 0);
	cr_assert_eq(a.res[0].seq, 1);
	cr_assert_eq(a.res[1].rc, PC_EEXIST);
	cr_assert_eq(a.res[2].rc, PC_STORE_EFENCED);
	cr_assert_eq(a.res[3].rc, 0);
	cr_assert(a.res[3].flags & PC_STORE_CREATED);
	cr_assert_eq(a.res[4].rc, 0);
	cr_assert_eq(a.res[4].seq, 2);
	/* the refusals were answers, not errors: the rows the batch wrote
	 * carry one transaction id */
	cr_assert_eq(q_int(&f, "SELECT count(*) FROM messages"), 2);
	cr_assert_eq(q_int(&f, "SELECT count(DISTINCT xmin::text) FROM messages"), 1);
	pc_store_stats_t st;
	pc_store_stats(f.s, &st);
	cr_assert_eq(st.failed_batches, 0);
	cr_assert_eq(st.retried_batches, 0, "a refusal ran the batch again");
	fx_fini(&f);
}

Test(store_pg, a_write_the_server_rejects_fails_alone_and_the_rest_commit)
{
	fx_t f;
	fx_init(&f, false);
	fx_open(&f, 0);
	asks_t a = {.n = 4};
	a.req[0] = append_req("s", 0, "user", "{\"n\":1}");
	a.req[1] = append_req("s", 0, "us\xff\xfe", "{\"n\":2}"); /* not UTF-8: the server refuses it */
	a.req[2] = run_req("s", "r1");
	a.req[3] = append_req("s", 0, "user", "{\"n\":3}");
	ask_all(&f, &a);
	cr_assert_eq(a.res[0].rc, 0);
	cr_assert_eq(a.res[1].rc, PC_EINVAL);
	cr_assert_eq(a.res[2].rc, 0);
	cr_assert_eq(a.res[3].rc, 0);
	cr_assert_eq(a.res[0].seq, 1);
	cr_assert_eq(a.res[3].seq, 2, "the rejected write left no sequence number behind");
	cr_assert_eq(q_int(&f, "SELECT count(*) FROM messages"), 2);
	cr_assert_eq(q_int(&f, "SELECT count(*) FROM runs WHERE run_id = 'r1'"), 1);
	cr_assert_eq(q_int(&f, "SELECT last_seq FROM sessions WHERE key = 's'"), 2);
	pc_store_stats_t st;
	pc_store_stats(f.s, &st);
	cr_assert_eq(st.retried_batches, 1);
	cr_assert_eq(st.failed_batches, 0);
	/* and the store goes on */
	cr_assert_eq(append_ok(f.s, "s"), 3);
	fx_fini(&f);
}

/* ---- a session row held by another transaction ---- */

typedef struct locker {
	PGconn *c;
	int pid;
} locker_t;

/* Holds session `key`'s row (FOR UPDATE) in an open transaction. */
static void lock_row(const fx_t *f, const char *key, locker_t *l)
{
	char url[1200], sql[256];
	direct_url(f, url, sizeof(url));
	l->c = pg_test_connect(url);
	l->pid = PQbackendPID(l->c);
	snprintf(sql, sizeof(sql), "BEGIN; SELECT 1 FROM sessions WHERE key = '%s' FOR UPDATE", key);
	PGresult *r = PQexec(l->c, sql);
	cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s", PQerrorMessage(l->c));
	cr_assert_eq(PQntuples(r), 1);
	PQclear(r);
}

static void unlock_row(locker_t *l)
{
	PGresult *r = PQexec(l->c, "COMMIT");
	PQclear(r);
	PQfinish(l->c);
	l->c = NULL;
}

typedef struct append_job {
	pc_store_t *s;
	const char *key;
	int rc;
	int64_t seq;
	int done; /* __atomic */
} append_job_t;

static void *append_main(void *arg)
{
	append_job_t *j = arg;
	pc_store_msg_t m = {.role = "user", .content = "{\"blocked\":true}"};
	j->rc = pc_store_append(j->s, j->key, 0, &m, &j->seq);
	__atomic_store_n(&j->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

/* The pid of the backend that waits for `holder`'s lock (0: none yet). */
static int waiter_of(const fx_t *f, int holder)
{
	char sql[256];
	snprintf(sql, sizeof(sql),
		 "SELECT coalesce(max(pid), 0) FROM pg_stat_activity WHERE %d = ANY (pg_blocking_pids(pid))", holder);
	return (int)q_int(f, sql);
}

static int wait_for_waiter(const fx_t *f, int holder)
{
	int pid = 0;
	for (int k = 0; k < 500 && pid == 0; k++) {
		pid = waiter_of(f, holder);
		if (pid == 0)
			usleep(10 * 1000);
	}
	cr_assert_neq(pid, 0, "the store's writer never waited for the lock");
	return pid;
}

/* A store whose session "held" has a message and a row another
 * transaction holds (*l), and a thread (*t) appending to it (*j). */
static void held_append(fx_t *f, uint32_t statement_timeout_ms, locker_t *l, append_job_t *j, pthread_t *t)
{
	fx_init(f, false);
	fx_open(f, statement_timeout_ms);
	append_ok(f->s, "held");
	lock_row(f, "held", l);
	*j = (append_job_t){.s = f->s, .key = "held"};
	cr_assert_eq(pthread_create(t, NULL, append_main, j), 0);
}

Test(store_pg, a_statement_timeout_fails_the_write_and_leaves_nothing)
{
	fx_t f;
	locker_t l;
	append_job_t j;
	pthread_t t;
	held_append(&f, 300, &l, &j, &t);
	pthread_join(t, NULL);
	cr_assert_eq(j.rc, PC_ETIMEDOUT, "rc %d (%s)", j.rc, pc_store_strerror(j.rc));
	unlock_row(&l);
	cr_assert_eq(q_int(&f, "SELECT count(*) FROM messages"), 1);
	cr_assert_eq(append_ok(f.s, "held"), 2);
	fx_fini(&f);
}

Test(store_pg, a_writer_terminated_mid_transaction_reconnects_and_the_write_lands_once)
{
	fx_t f;
	locker_t l;
	append_job_t j;
	pthread_t t;
	held_append(&f, 0, &l, &j, &t);
	int writer = wait_for_waiter(&f, l.pid);
	char sql[96];
	snprintf(sql, sizeof(sql), "SELECT pg_terminate_backend(%d)::int", writer);
	cr_assert_eq(q_int(&f, sql), 1);
	/* the store learns the transaction aborted and runs the write again
	 * on a new connection, which waits for the lock in turn */
	int again = wait_for_waiter(&f, l.pid);
	cr_assert_neq(again, writer);
	unlock_row(&l);
	pthread_join(t, NULL);
	cr_assert_eq(j.rc, 0, "rc %d (%s)", j.rc, pc_store_strerror(j.rc));
	cr_assert_eq(j.seq, 2);
	cr_assert_eq(q_int(&f, "SELECT count(*) FROM messages"), 2);
	fx_fini(&f);
}

/* ---- lost answers ---- */

static void lost_answer_once(int fault, const char *arg, int want, bool polled)
{
	fx_t f;
	fx_init(&f, true);
	if (!polled) {
		pc_io_free(f.io);
		f.io = NULL;
	}
	fx_open(&f, 0);
	pg_proxy_arm(f.proxy, fault, arg);
	pc_store_msg_t m = {.role = "user", .content = "{}"};
	int64_t seq = 0;
	int rc = pc_store_append(f.s, "s", 0, &m, &seq);
	cr_assert_eq(pg_proxy_fired(f.proxy), 1);
	cr_assert_eq(rc, want, "rc %d (%s)", rc, pc_store_strerror(rc));
	if (want == 0)
		cr_assert_eq(seq, 1);
	/* unknown: the server may have committed before it found its client
	 * gone, or not; whichever, the write is there at most once, once the
	 * old server process has ended (the store has no writer connection
	 * until its next write) */
	for (int k = 0; k < 500 && q_int(&f, "SELECT count(*) FROM pg_stat_activity"
					  " WHERE application_name = 'pincer-writer'") > 0; k++)
		usleep(10 * 1000);
	long long rows = q_int(&f, "SELECT count(*) FROM messages");
	if (want == PC_STORE_EUNKNOWN)
		cr_assert(rows == 0 || rows == 1, "%lld rows", rows);
	else
		cr_assert_eq(rows, 1);
	pc_store_stats_t st;
	pc_store_stats(f.s, &st);
	cr_assert_eq(st.unknown_writes, want == PC_STORE_EUNKNOWN ? 1 : 0);
	cr_assert_eq(append_ok(f.s, "s"), rows + 1);
	fx_fini(&f);
}

/* An append through the proxy armed with `fault`: it answers `want`, and
 * in each case the write is there exactly once (retried after an abort,
 * committed when unknown) and the store goes on with the next seq. Twice:
 * with the connection polled on an I/O loop, and waited on by a blocking
 * thread. */
static void lost_answer(int fault, const char *arg, int want)
{
	for (int polled = 1; polled >= 0; polled--)
		lost_answer_once(fault, arg, want, polled);
}

Test(store_pg, a_commit_whose_answer_is_lost_is_acknowledged_once_proved)
{
	lost_answer(PG_PROXY_CUT_AFTER_COMPLETE, "COMMIT", 0);
}

Test(store_pg, a_commit_that_never_arrived_is_written_again_and_lands_once)
{
	lost_answer(PG_PROXY_CUT_BEFORE_BIND, "w_commit", 0);
}

/* Every answer is lost, the transaction's id with them: nothing tells
 * the store whether the server committed. Unknown, never acknowledged. */
Test(store_pg, an_outcome_that_cannot_be_proved_is_never_acknowledged)
{
	lost_answer(PG_PROXY_CUT_AFTER_COMPLETE, "BEGIN", PC_STORE_EUNKNOWN);
}

/* ---- an unreachable server ---- */

static int health_rc(pc_store_t *s)
{
	pc_store_health_t h;
	pc_store_health(s, &h);
	return h.rc;
}

#define HOLD_MS 400u

Test(store_pg, an_unreachable_server_fails_writes_after_the_hold_and_health_says_why)
{
	fx_t f;
	fx_init(&f, true);
	fx_open_holding(&f, 0, HOLD_MS);
	append_ok(f.s, "s");
	pg_proxy_set_down(f.proxy, true);
	pc_store_msg_t m = {.role = "user", .content = "{}"};
	int64_t seq = 0;
	for (int k = 0; k < 3; k++) {
		uint64_t t0 = pc_runtime_now_ms();
		int rc = pc_store_append(f.s, "s", 0, &m, &seq);
		uint64_t took = pc_runtime_now_ms() - t0;
		cr_assert_eq(rc, PC_STORE_EUNAVAIL, "rc %d (%s)", rc, pc_store_strerror(rc));
		cr_assert_geq(took, HOLD_MS, "a write gave up before its hold: %llu ms", (unsigned long long)took);
		cr_assert_lt(took, HOLD_MS + 3000, "a write waited past its hold: %llu ms", (unsigned long long)took);
		/* held and sent again meanwhile */
		cr_assert_eq(health_rc(f.s), PC_STORE_EUNAVAIL);
	}
	pc_store_stats_t st;
	pc_store_stats(f.s, &st);
	cr_assert_geq(st.held_batches, 3);
	cr_assert_eq(health_rc(f.s), PC_STORE_EUNAVAIL);
	cr_assert_str_eq(pc_store_strerror(PC_STORE_EUNAVAIL), "store: the database server cannot be reached");
	pg_proxy_set_down(f.proxy, false);
	/* the probe a readiness check sends brings health back without
	 * traffic, once the reconnect backoff has passed */
	for (int k = 0; k < 100 && health_rc(f.s) != 0; k++) {
		pc_msg_t *probe = NULL;
		cr_assert_eq(pc_store_req_probe(&probe), 0);
		cr_assert_eq(pc_send(pc_store_actor(f.s), probe), 0);
		usleep(100 * 1000);
	}
	cr_assert_eq(health_rc(f.s), 0);
	cr_assert_eq(append_ok(f.s, "s"), 2, "nothing of the refused writes was kept");
	fx_fini(&f);
}

/* A write sent while the server is away waits for it (hold_ms) and lands
 * once, with those queued behind it, in order. */
typedef struct held_write {
	pc_store_t *s;
	const char *text;
	int rc;
	int64_t seq;
} held_write_t;

static void *held_write(void *arg)
{
	held_write_t *w = arg;
	pc_store_msg_t m = {.role = "user", .content = w->text};
	w->rc = pc_store_append(w->s, "s", 0, &m, &w->seq);
	return NULL;
}

Test(store_pg, a_write_sent_while_the_server_is_away_lands_once_it_is_back)
{
	fx_t f;
	fx_init(&f, true);
	fx_open(&f, 0);
	cr_assert_eq(append_ok(f.s, "s"), 1);
	pg_proxy_set_down(f.proxy, true);
	held_write_t w[2] = {{f.s, "{\"n\":1}", -1, 0}, {f.s, "{\"n\":2}", -1, 0}};
	pthread_t th[2];
	for (int i = 0; i < 2; i++) {
		cr_assert_eq(pthread_create(&th[i], NULL, held_write, &w[i]), 0);
		usleep(100 * 1000); /* in this order */
	}
	usleep(700 * 1000);
	cr_assert_eq(health_rc(f.s), PC_STORE_EUNAVAIL, "the server's absence is told while writes wait");
	pg_proxy_set_down(f.proxy, false);
	for (int i = 0; i < 2; i++) {
		pthread_join(th[i], NULL);
		cr_assert_eq(w[i].rc, 0, "write %d: %s", i, pc_store_strerror(w[i].rc));
	}
	cr_assert_eq(w[0].seq, 2);
	cr_assert_eq(w[1].seq, 3);
	pc_store_stats_t st;
	pc_store_stats(f.s, &st);
	cr_assert_geq(st.held_batches, 1);
	cr_assert_eq(health_rc(f.s), 0);
	cr_assert_eq(append_ok(f.s, "s"), 4, "each held write kept once");
	fx_fini(&f);
}

Test(store_pg, opening_an_unreachable_server_fails_with_a_code)
{
	fx_t f;
	fx_init(&f, true);
	pg_proxy_set_down(f.proxy, true);
	pc_store_config_t cfg;
	pc_store_config_init(&cfg);
	cfg.url = f.url;
	pc_store_t *s = NULL;
	cr_assert_eq(pc_store_open(f.rt, &cfg, &s), PC_STORE_EUNAVAIL);
	cr_assert_null(s);
	fx_fini(&f);
}

/* ---- a restart or a crash under load ---- */

#define LOADERS 4
#define LOAD_MAX 4000

typedef struct loader {
	pc_store_t *s;
	int id;
	int stop; /* __atomic */
	bool acked[LOAD_MAX];
	int ok; /* __atomic: the main thread watches it */
	int sent, unavailable, unknown, other, last_other;
} loader_t;

static void *loader_main(void *arg)
{
	loader_t *l = arg;
	char key[32], content[64];
	snprintf(key, sizeof(key), "load-%d", l->id);
	while (!__atomic_load_n(&l->stop, __ATOMIC_ACQUIRE) && l->sent < LOAD_MAX) {
		snprintf(content, sizeof(content), "{\"w\":%d,\"k\":%d}", l->id, l->sent);
		pc_store_msg_t m = {.role = "user", .content = content};
		int64_t seq = 0;
		int rc = pc_store_append(l->s, key, 0, &m, &seq);
		l->acked[l->sent++] = rc == 0;
		if (rc == 0)
			__atomic_add_fetch(&l->ok, 1, __ATOMIC_RELAXED);
		else if (rc == PC_STORE_EUNAVAIL)
			l->unavailable++;
		else if (rc == PC_STORE_EUNKNOWN)
			l->unknown++;
		else
			l->other++, l->last_other = rc;
		if (rc != 0)
			usleep(20 * 1000);
	}
	return NULL;
}

/* Writers appending to their own sessions while the server goes down
 * (`verb`: a pg_cluster restart or crash) and comes back: writes fail for
 * a while, with a code saying why, then succeed again by themselves; every
 * acknowledged one is there, once. */
static void down_under_load(const char *verb)
{
	fx_t f;
	fx_init(&f, false);
	fx_open(&f, 0);
	static loader_t ls[LOADERS];
	pthread_t t[LOADERS];
	for (int k = 0; k < LOADERS; k++) {
		memset(&ls[k], 0, sizeof(ls[k]));
		ls[k].s = f.s;
		ls[k].id = k;
		cr_assert_eq(pthread_create(&t[k], NULL, loader_main, &ls[k]), 0);
	}
	usleep(500 * 1000);
	pg_test_cluster(verb);
	/* writes succeed again by themselves */
	int ok0 = 0;
	for (int k = 0; k < LOADERS; k++)
		ok0 += __atomic_load_n(&ls[k].ok, __ATOMIC_RELAXED);
	int ok1 = ok0;
	for (int w = 0; w < 200 && ok1 < ok0 + 20; w++) {
		usleep(50 * 1000);
		ok1 = 0;
		for (int k = 0; k < LOADERS; k++)
			ok1 += __atomic_load_n(&ls[k].ok, __ATOMIC_RELAXED);
	}
	for (int k = 0; k < LOADERS; k++)
		__atomic_store_n(&ls[k].stop, 1, __ATOMIC_RELEASE);
	for (int k = 0; k < LOADERS; k++)
		pthread_join(t[k], NULL);
	cr_assert_geq(ok1, ok0 + 20, "writes did not come back after the restart");
	for (int k = 0; k < LOADERS; k++) {
		cr_assert_eq(ls[k].other, 0, "loader %d: %d writes failed with %d (%s)", k, ls[k].other, ls[k].last_other,
			     pc_store_strerror(ls[k].last_other));
		/* every acknowledged write is there, once */
		for (int i = 0; i < ls[k].sent; i++) {
			if (!ls[k].acked[i])
				continue;
			char sql[160];
			snprintf(sql, sizeof(sql), "SELECT count(*) FROM messages WHERE content = '{\"w\":%d,\"k\":%d}'", k,
				 i);
			cr_assert_eq(q_int(&f, sql), 1, "loader %d write %d was acknowledged and is not there", k, i);
		}
	}
	fx_fini(&f);
}

Test(store_pg, a_server_restarted_under_load_loses_nothing_acknowledged, .timeout = 120)
{
	down_under_load("restart");
}

/* An immediate stop is what a crash or a power cut leaves: committed
 * means in the server's log, which its recovery replays
 * (synchronous_commit on). */
Test(store_pg, a_server_crashed_under_load_loses_nothing_acknowledged, .timeout = 120)
{
	down_under_load("crash");
}

/* ---- the schema ---- */

typedef struct opener {
	pc_runtime_t *rt;
	const char *url;
	int rc;
	pc_store_t *s;
} opener_t;

static void *open_main(void *arg)
{
	opener_t *o = arg;
	pc_store_config_t cfg;
	pc_store_config_init(&cfg);
	cfg.url = o->url;
	o->rc = pc_store_open(o->rt, &cfg, &o->s);
	return NULL;
}

Test(store_pg, two_stores_creating_one_schema_at_once_both_open)
{
	fx_t f;
	fx_init(&f, false);
	opener_t o[2] = {{f.rt, f.url, -1, NULL}, {f.rt, f.url, -1, NULL}};
	pthread_t t[2];
	for (int k = 0; k < 2; k++)
		cr_assert_eq(pthread_create(&t[k], NULL, open_main, &o[k]), 0);
	for (int k = 0; k < 2; k++)
		pthread_join(t[k], NULL);
	for (int k = 0; k < 2; k++)
		cr_assert_eq(o[k].rc, 0, "store %d: %s", k, pc_store_strerror(o[k].rc));
	append_ok(o[0].s, "s");
	cr_assert_eq(append_ok(o[1].s, "s"), 2, "two writers, one sequence");
	pc_store_close(o[0].s);
	pc_store_close(o[1].s);
	fx_fini(&f);
}

/* ---- reads polled on an I/O loop ---- */

static uint64_t polled_reads(const fx_t *f)
{
	pc_store_stats_t st;
	pc_store_stats(f->s, &st);
	return st.polled_reads;
}

/* The history of `key`, which must be read: its message count. */
static size_t history_ok(pc_store_t *s, const char *key)
{
	pc_store_history_t *h = NULL;
	int rc = pc_store_history(s, key, &h);
	cr_assert_eq(rc, 0, "history of %s: %s", key, pc_store_strerror(rc));
	size_t n = pc_store_history_count(h);
	pc_store_history_free(h);
	return n;
}

/* A read finds its reader idle (the first read opened it on the blocking
 * pool): its statements go out and its rows come in on the loop, every
 * kind of read, each answering what the store holds. */
Test(store_pg, reads_on_an_idle_reader_are_polled_on_the_loop)
{
	fx_t f;
	fx_init(&f, false);
	fx_open(&f, 0);
	for (int k = 0; k < 5; k++)
		append_ok(f.s, "s");
	cr_assert_eq(history_ok(f.s, "s"), 5);
	uint64_t polled0 = polled_reads(&f);
	for (int k = 0; k < 10; k++)
		cr_assert_eq(history_ok(f.s, "s"), 5);
	pc_store_history_t *h = NULL;
	cr_assert_eq(pc_store_history(f.s, "nope", &h), PC_ENOTFOUND);
	pc_store_reply_t run;
	cr_assert_eq(pc_store_run_get(f.s, "no-run", &run), PC_ENOTFOUND);
	pc_store_sessions_t *page = NULL;
	pc_store_sessions_query_t q = {.limit = 10};
	cr_assert_eq(pc_store_sessions(f.s, &q, &page), 0);
	cr_assert_eq(pc_store_sessions_count(page), 1);
	pc_store_session_entry_t e;
	pc_store_sessions_get(page, 0, &e);
	cr_assert_null(e.open_run_id);
	pc_store_sessions_free(page);
	cr_assert_eq(polled_reads(&f) - polled0, 13, "reads polled: %" PRIu64, polled_reads(&f) - polled0);
	fx_fini(&f);
}

/* A polled read whose connection is cut before its last answer fails with
 * a code, never hangs; the next read opens a new reader and answers. */
Test(store_pg, a_polled_read_whose_connection_is_cut_fails_and_the_next_reconnects)
{
	fx_t f;
	fx_init(&f, true);
	fx_open(&f, 0);
	append_ok(f.s, "s");
	cr_assert_eq(history_ok(f.s, "s"), 1);
	uint64_t polled0 = polled_reads(&f);
	/* no write is under way: the first COMMIT is the history's snapshot's */
	pg_proxy_arm(f.proxy, PG_PROXY_CUT_AFTER_COMPLETE, "COMMIT");
	pc_store_history_t *h = NULL;
	int rc = pc_store_history(f.s, "s", &h);
	cr_assert_eq(pg_proxy_fired(f.proxy), 1);
	cr_assert_eq(rc, PC_STORE_EUNAVAIL, "rc %d (%s)", rc, pc_store_strerror(rc));
	cr_assert_eq(polled_reads(&f) - polled0, 1, "the failed read was polled");
	cr_assert_eq(history_ok(f.s, "s"), 1);
	cr_assert_eq(history_ok(f.s, "s"), 1);
	cr_assert_eq(polled_reads(&f) - polled0, 2, "the next read reconnects on the pool, then polls");
	fx_fini(&f);
}

/* A polled read the server holds up (a lock on what it reads) ends with
 * the statement timeout; once the lock is gone, reads answer again. */
Test(store_pg, a_polled_read_held_up_by_a_lock_ends_at_the_statement_timeout)
{
	fx_t f;
	fx_init(&f, false);
	fx_open(&f, 300);
	append_ok(f.s, "s");
	cr_assert_eq(history_ok(f.s, "s"), 1);
	uint64_t polled0 = polled_reads(&f);
	char url[1200];
	direct_url(&f, url, sizeof(url));
	PGconn *c = pg_test_connect(url);
	PGresult *r = PQexec(c, "BEGIN; LOCK TABLE sessions IN ACCESS EXCLUSIVE MODE");
	cr_assert_eq(PQresultStatus(r), PGRES_COMMAND_OK, "%s", PQerrorMessage(c));
	PQclear(r);
	pc_store_history_t *h = NULL;
	int rc = pc_store_history(f.s, "s", &h);
	cr_assert_eq(rc, PC_ETIMEDOUT, "rc %d (%s)", rc, pc_store_strerror(rc));
	cr_assert_eq(polled_reads(&f) - polled0, 1);
	PQclear(PQexec(c, "COMMIT"));
	PQfinish(c);
	cr_assert_eq(history_ok(f.s, "s"), 1);
	fx_fini(&f);
}

/* ---- cluster nodes ---- */

#define DB_CLOCK_MS "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint"

/* A node's heartbeat is the database's clock when it was written, and the
 * listing measures its lease by that clock too: what lets nodes on several
 * machines agree on which are live. */
Test(store_pg, a_node_heartbeat_is_the_database_clock)
{
	fx_t f;
	fx_init(&f, false);
	fx_open(&f, 0);
	long long before = q_int(&f, DB_CLOCK_MS);
	pc_store_reply_t r;
	cr_assert_eq(pc_store_node_beat(f.s, "n1", "http://n1:18789", "p-1", 60000, true, &r), 0);
	long long after = q_int(&f, DB_CLOCK_MS);
	cr_assert(r.ended_ms >= before && r.ended_ms <= after, "beat %" PRId64 " not in [%lld, %lld]", r.ended_ms,
		  before, after);
	cr_assert_eq(r.started_ms, r.ended_ms);
	cr_assert_eq(q_int(&f, "SELECT heartbeat_ms FROM nodes WHERE id = 'n1'"), r.ended_ms);
	cr_assert_eq(q_int(&f, "SELECT expires_ms FROM nodes WHERE id = 'n1'"), r.ended_ms + 60000);
	/* a row whose expiry the database's clock has passed is not live,
	 * whatever this process's clock says */
	char url[1200];
	direct_url(&f, url, sizeof(url));
	pg_test_exec(url, "UPDATE nodes SET expires_ms = (" DB_CLOCK_MS ") - 1 WHERE id = 'n1'");
	pc_store_nodes_t *l = NULL;
	cr_assert_eq(pc_store_nodes(f.s, &l), 0);
	cr_assert_eq(pc_store_nodes_count(l), 1);
	pc_store_node_t n;
	pc_store_nodes_get(l, 0, &n);
	cr_assert_not(n.live);
	pc_store_nodes_free(l);
	fx_fini(&f);
}

/* A lease is timed by the clock the nodes beat with (clock_timestamp()),
 * not by its transaction's start: a take that waited in its batch behind
 * another write's lock expires its ttl after it was written, and node
 * rows and leases are compared on one clock. */
Test(store_pg, a_lease_is_timed_by_the_nodes_clock)
{
	fx_t f;
	fx_init(&f, false);
	fx_open(&f, 0);
	append_ok(f.s, "held");
	locker_t l;
	lock_row(&f, "held", &l);
	/* sent together (without reply addresses: lazy), they share a batch,
	 * the append first */
	cr_assert_eq(pc_send(pc_store_actor(f.s), append_req("held", 0, "user", "{}")), 0);
	pc_msg_t *req = NULL;
	cr_assert_eq(pc_store_req_lease_acquire("s", "p-1", 60000, NULL, &req), 0);
	cr_assert_eq(pc_send(pc_store_actor(f.s), req), 0);
	wait_for_waiter(&f, l.pid);
	usleep(300 * 1000);
	long long freed = q_int(&f, DB_CLOCK_MS);
	unlock_row(&l);
	AWAIT(q_int(&f, "SELECT count(*) FROM sessions WHERE key = 's' AND lease_owner = 'p-1'") == 1, 10000);
	long long expires = q_int(&f, "SELECT lease_expires_ms FROM sessions WHERE key = 's'");
	cr_assert_geq(expires, freed + 60000, "expires %lld, freed at %lld", expires, freed);
	cr_assert_eq(q_int(&f, "SELECT count(*) FROM messages"), 2);
	fx_fini(&f);
}

/* What version 5 added undone: the index of open runs by session. */
#define UNDO_VERSION_5 "DROP INDEX runs_open_session; "

/* What version 4 added undone: no replay_invalid on runs, and a stand-in
 * for version 3's pincer_run_end, which the migration replaces: it refuses
 * everything. */
#define UNDO_VERSION_4                                                                                      \
	"DROP FUNCTION pincer_run_end(text, text, bigint, text, text, text, boolean);"                         \
	" DROP FUNCTION pincer_run_end(text, text, bigint, text, text, text);"                                 \
	" ALTER TABLE runs DROP COLUMN replay_invalid;"                                                       \
	" CREATE FUNCTION pincer_run_end(p_run text, p_key text, p_epoch bigint, p_status text, p_code text,"  \
	" p_usage text) RETURNS pincer_res LANGUAGE sql AS $$SELECT ROW('invalid', NULL, NULL, NULL, NULL,"   \
	" NULL)::pincer_res$$;"

/* A database at schema version 3 (runs without replay_invalid) gains the
 * column and the new pincer_run_end on open: its ended runs read back as
 * not replay-invalid, and a run's end records it. A node of version 3
 * still running (a cluster upgraded one node at a time) ends its runs
 * with the old form, as not replay-invalid. */
Test(store_pg, a_version_3_schema_gains_replay_invalid_runs)
{
	fx_t f;
	fx_init(&f, false);
	fx_open(&f, 0);
	cr_assert_eq(pc_store_run_begin(f.s, &(pc_store_run_new_t){.key = "s", .run_id = "old"}, NULL), 0);
	cr_assert_eq(pc_store_run_begin(f.s, &(pc_store_run_new_t){.key = "s", .run_id = "open"}, NULL), 0);
	cr_assert_eq(pc_store_run_begin(f.s, &(pc_store_run_new_t){.key = "s", .run_id = "older-node"}, NULL), 0);
	cr_assert_eq(pc_store_run_end(f.s, &(pc_store_run_end_t){.run_id = "old", .status = PC_STORE_RUN_OK}), 0);
	pc_store_close(f.s);
	f.s = NULL;
	char url[1200];
	direct_url(&f, url, sizeof(url));
	pg_test_exec(url, UNDO_VERSION_5 UNDO_VERSION_4 " UPDATE pincer_schema SET version = 3");
	fx_open(&f, 0);
	cr_assert_eq(q_int(&f, "SELECT version FROM pincer_schema"), 5);
	pc_store_reply_t r;
	cr_assert_eq(pc_store_run_get(f.s, "old", &r), 0);
	cr_assert_eq(r.status, PC_STORE_RUN_OK);
	cr_assert_eq(r.flags & PC_STORE_REPLAY_INVALID, 0u);
	cr_assert_eq(pc_store_run_end(f.s, &(pc_store_run_end_t){.run_id = "open", .status = PC_STORE_RUN_ERROR,
								  .replay_invalid = true}),
		     0);
	cr_assert_eq(pc_store_run_get(f.s, "open", &r), 0);
	cr_assert_eq(r.flags & PC_STORE_REPLAY_INVALID, PC_STORE_REPLAY_INVALID);
	pg_test_exec(url, "SELECT pincer_run_end('older-node', 's', 0, 'ok', NULL, NULL)");
	cr_assert_eq(pc_store_run_get(f.s, "older-node", &r), 0);
	cr_assert_eq(r.status, PC_STORE_RUN_OK);
	cr_assert_eq(r.flags & PC_STORE_REPLAY_INVALID, 0u);
	fx_fini(&f);
}

/* A database at schema version 2 (nodes without owners, leases timed by
 * the transaction's start) gains the owner column and the new functions
 * on open; its node rows stay, with no owner, and a row without one is
 * taken by the next beat. */
Test(store_pg, a_version_2_schema_gains_node_owners)
{
	fx_t f;
	fx_init(&f, false);
	fx_open(&f, 0);
	cr_assert_eq(pc_store_node_beat(f.s, "n1", "http://n1:1", "p-1", 60000, true, NULL), 0);
	pc_store_close(f.s);
	f.s = NULL;
	char url[1200];
	direct_url(&f, url, sizeof(url));
	/* stand-ins for version 2's functions, which the migration replaces:
	 * they refuse everything */
	pg_test_exec(url, "DROP FUNCTION pincer_owner_live; DROP FUNCTION pincer_node_beat;"
			  " ALTER TABLE nodes DROP COLUMN owner;"
			  " CREATE FUNCTION pincer_node_beat(p_id text, p_url text, p_lease bigint, p_fresh boolean)"
			  " RETURNS pincer_res LANGUAGE sql AS $$SELECT ROW('invalid', NULL, NULL, NULL, NULL, NULL)::pincer_res$$;"
			  " CREATE OR REPLACE FUNCTION pincer_lease_acquire(p_key text, p_owner text, p_ttl bigint, p_steal text)"
			  " RETURNS pincer_res LANGUAGE sql AS $$SELECT ROW('invalid', NULL, NULL, NULL, NULL, NULL)::pincer_res$$;"
			  " " UNDO_VERSION_5 UNDO_VERSION_4 " UPDATE pincer_schema SET version = 2");
	fx_open(&f, 0);
	cr_assert_eq(q_int(&f, "SELECT version FROM pincer_schema"), 5);
	cr_assert_eq(q_int(&f, "SELECT count(*) FROM nodes WHERE id = 'n1' AND owner IS NULL"), 1);
	cr_assert_eq(pc_store_node_beat(f.s, "n1", NULL, "p-2", 60000, false, NULL), 0);
	int64_t epoch = 0;
	cr_assert_eq(pc_store_lease_acquire(f.s, "s", "p-2", PC_STORE_LEASE_NODE, NULL, &epoch, NULL), 0);
	cr_assert_eq(epoch, 1);
	cr_assert_eq(q_int(&f, "SELECT count(*) FROM nodes WHERE id = 'n1' AND owner = 'p-2'"), 1);
	fx_fini(&f);
}

/* A database at schema version 1 (before nodes) gains the table and its
 * function on open, in the migration's one transaction; its rows stay. */
Test(store_pg, a_version_1_schema_gains_the_nodes_table)
{
	fx_t f;
	fx_init(&f, false);
	fx_open(&f, 0);
	append_ok(f.s, "s");
	pc_store_close(f.s);
	f.s = NULL;
	char url[1200];
	direct_url(&f, url, sizeof(url));
	pg_test_exec(url, "DROP FUNCTION pincer_owner_live; DROP FUNCTION pincer_node_beat; DROP FUNCTION pincer_clock_ms;"
			  " DROP TABLE nodes; " UNDO_VERSION_5 UNDO_VERSION_4 " UPDATE pincer_schema SET version = 1");
	fx_open(&f, 0);
	cr_assert_eq(q_int(&f, "SELECT version FROM pincer_schema"), 5);
	cr_assert_eq(append_ok(f.s, "s"), 2);
	cr_assert_eq(pc_store_node_beat(f.s, "n1", NULL, "p-1", 60000, true, NULL), 0);
	cr_assert_eq(q_int(&f, "SELECT count(*) FROM nodes"), 1);
	fx_fini(&f);
}
