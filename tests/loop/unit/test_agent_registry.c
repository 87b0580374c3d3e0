/*
 * The run registry (agents/run/run_registry.c): the run lifecycle, the
 * session's active run and its handle-matched clearing, plain-thread
 * waits, actor watchers, the terminal cache sweep, freeing with waiters
 * blocked, and a many-thread stress run.
 */
#include <criterion/criterion.h>

#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "agents/run/run_registry.h"
#include "pincer.h"
#include "test_util.h"

static pc_run_registry_t *new_registry(void)
{
	pc_run_registry_t *r = NULL;
	cr_assert_eq(pc_run_registry_new(&r), 0);
	return r;
}

/* An attachment that counts its releases. */
static uint32_t released;

static void att_release(void *p)
{
	INC(released);
	free(p);
}

static void *att_retain(void *p)
{
	return p;
}

Test(registry, status_names)
{
	cr_assert_str_eq(pc_run_status_name(PC_RUN_STATUS_QUEUED), "queued");
	cr_assert_str_eq(pc_run_status_name(PC_RUN_STATUS_RUNNING), "running");
	cr_assert_str_eq(pc_run_status_name(PC_RUN_STATUS_OK), "ok");
	cr_assert_str_eq(pc_run_status_name(PC_RUN_STATUS_TIMEOUT), "timeout");
	cr_assert_str_eq(pc_run_status_name((pc_run_status_t)99), "unknown");
	cr_assert_not(pc_run_status_terminal(PC_RUN_STATUS_RUNNING));
	cr_assert(pc_run_status_terminal(PC_RUN_STATUS_ABORTED));
}

Test(registry, add_start_finish_get)
{
	STORE(released, 0);
	pc_run_registry_t *r = new_registry();
	pc_run_info_t info;
	int *att = malloc(sizeof(int));
	cr_assert_eq(pc_run_registry_add(r, "r1", "sess", 100, att, att_release), 0);
	int *other = malloc(sizeof(int));
	cr_assert_eq(pc_run_registry_add(r, "r1", "sess", 101, other, att_release), PC_EEXIST);
	free(other); /* still ours */
	cr_assert_eq(pc_run_registry_add(r, "", "sess", 100, NULL, NULL), PC_EINVAL);
	char long_id[PC_RUN_ID_MAX + 2];
	memset(long_id, 'x', sizeof(long_id) - 1);
	long_id[sizeof(long_id) - 1] = 0;
	cr_assert_eq(pc_run_registry_add(r, long_id, "sess", 100, NULL, NULL), PC_EINVAL);

	cr_assert_eq(pc_run_registry_get(r, "r1", &info), 0);
	cr_assert_str_eq(info.run_id, "r1");
	cr_assert_str_eq(info.session_key, "sess");
	cr_assert_eq(info.status, PC_RUN_STATUS_QUEUED);
	cr_assert_eq(info.accepted_ms, 100);
	cr_assert_eq(info.started_ms, 0);
	cr_assert_eq(pc_run_registry_active(r, "sess", NULL, NULL), PC_ENOTFOUND);
	cr_assert_eq(pc_run_registry_attachment(r, "r1", att_retain), att);
	cr_assert_null(pc_run_registry_attachment(r, "nope", NULL));

	cr_assert_eq(pc_run_registry_start(r, "nope", NULL, 1), PC_ENOTFOUND);
	cr_assert_eq(pc_run_registry_start(r, "r1", NULL, 200), 0);
	cr_assert_eq(pc_run_registry_start(r, "r1", NULL, 201), PC_ESTATE);
	cr_assert_eq(pc_run_registry_get(r, "r1", &info), 0);
	cr_assert_eq(info.status, PC_RUN_STATUS_RUNNING);
	cr_assert_eq(info.started_ms, 200);
	char id[PC_RUN_ID_MAX + 1];
	cr_assert_eq(pc_run_registry_active(r, "sess", id, NULL), 0);
	cr_assert_str_eq(id, "r1");
	cr_assert_eq(pc_run_registry_active_count(r), 1);

	cr_assert_eq(pc_run_registry_finish(r, "r1", PC_RUN_STATUS_RUNNING, 300, NULL, NULL, false), PC_EINVAL);
	cr_assert_eq(pc_run_registry_finish(r, "nope", PC_RUN_STATUS_OK, 300, NULL, NULL, false), PC_ENOTFOUND);
	cr_assert_eq(pc_run_registry_finish(r, "r1", PC_RUN_STATUS_TIMEOUT, 300, "took too long", "timeout", true), 0);
	cr_assert_eq(pc_run_registry_finish(r, "r1", PC_RUN_STATUS_OK, 301, NULL, NULL, false), PC_ESTATE);
	cr_assert_eq(pc_run_registry_start(r, "r1", NULL, 302), PC_ESTATE);
	cr_assert_eq(pc_run_registry_get(r, "r1", &info), 0);
	cr_assert_eq(info.status, PC_RUN_STATUS_TIMEOUT);
	cr_assert_eq(info.ended_ms, 300);
	cr_assert_str_eq(info.error, "took too long");
	cr_assert_str_eq(info.error_kind, "timeout");
	cr_assert(info.replay_invalid);
	cr_assert_eq(pc_run_registry_active(r, "sess", id, NULL), PC_ENOTFOUND);
	cr_assert_eq(pc_run_registry_active_count(r), 0);

	/* A run finished while queued never counted as active. */
	cr_assert_eq(pc_run_registry_add(r, "r2", NULL, 400, NULL, NULL), 0);
	cr_assert_eq(pc_run_registry_finish(r, "r2", PC_RUN_STATUS_ABORTED, 401, NULL, NULL, false), 0);
	cr_assert_eq(pc_run_registry_active_count(r), 0);
	cr_assert_eq(pc_run_registry_get(r, "r2", &info), 0);
	cr_assert_str_eq(info.session_key, "");
	cr_assert_str_eq(info.error, "");
	cr_assert_not(info.replay_invalid);

	cr_assert_eq(LOAD(released), 0);
	pc_run_registry_free(r);
	cr_assert_eq(LOAD(released), 1);
	ASSERT_NO_LEAKS();
}

Test(registry, handle_matched_clear)
{
	pc_run_registry_t *r = new_registry();
	char id[PC_RUN_ID_MAX + 1];
	cr_assert_eq(pc_run_registry_add(r, "A", "s", 1, NULL, NULL), 0);
	cr_assert_eq(pc_run_registry_add(r, "B", "s", 2, NULL, NULL), 0);
	cr_assert_eq(pc_run_registry_start(r, "A", NULL, 3), 0);
	cr_assert_eq(pc_run_registry_start(r, "B", NULL, 4), 0);
	cr_assert_eq(pc_run_registry_active(r, "s", id, NULL), 0);
	cr_assert_str_eq(id, "B");
	cr_assert_eq(pc_run_registry_active_count(r), 2);
	/* A's late cleanup must not clear B. */
	cr_assert_eq(pc_run_registry_finish(r, "A", PC_RUN_STATUS_ABORTED, 5, "replaced", NULL, false), 0);
	cr_assert_eq(pc_run_registry_active(r, "s", id, NULL), 0);
	cr_assert_str_eq(id, "B");
	cr_assert_eq(pc_run_registry_finish(r, "B", PC_RUN_STATUS_OK, 6, NULL, NULL, false), 0);
	cr_assert_eq(pc_run_registry_active(r, "s", id, NULL), PC_ENOTFOUND);
	cr_assert_eq(pc_run_registry_active_count(r), 0);
	pc_run_registry_free(r);
	ASSERT_NO_LEAKS();
}

/* ---- waiting ---- */

typedef struct waiter {
	pc_run_registry_t *r;
	const char *id;
	int64_t timeout;
	int rc;
	pc_run_info_t info;
	uint32_t started;
} waiter_t;

static void *wait_thread(void *arg)
{
	waiter_t *w = arg;
	STORE(w->started, 1);
	w->rc = pc_run_registry_wait(w->r, w->id, w->timeout, &w->info);
	return NULL;
}

Test(registry, wait_returns_at_finish)
{
	pc_run_registry_t *r = new_registry();
	cr_assert_eq(pc_run_registry_add(r, "w1", "s", 1, NULL, NULL), 0);
	cr_assert_eq(pc_run_registry_start(r, "w1", NULL, 2), 0);
	waiter_t w = {.r = r, .id = "w1", .timeout = -1, .rc = 1};
	pthread_t th;
	cr_assert_eq(pthread_create(&th, NULL, wait_thread, &w), 0);
	AWAIT(LOAD(w.started), 5000);
	sleep_ms(20);
	cr_assert_eq(pc_run_registry_finish(r, "w1", PC_RUN_STATUS_ERROR, 3, "bad", "context_overflow", false), 0);
	cr_assert_eq(pthread_join(th, NULL), 0);
	cr_assert_eq(w.rc, 0);
	cr_assert_eq(w.info.status, PC_RUN_STATUS_ERROR);
	cr_assert_str_eq(w.info.error_kind, "context_overflow");
	/* Finished already: at once. */
	pc_run_info_t info;
	cr_assert_eq(pc_run_registry_wait(r, "w1", 0, &info), 0);
	cr_assert_eq(info.ended_ms, 3);
	pc_run_registry_free(r);
	ASSERT_NO_LEAKS();
}

Test(registry, wait_times_out_or_not_found)
{
	pc_run_registry_t *r = new_registry();
	cr_assert_eq(pc_run_registry_add(r, "w2", "s", 1, NULL, NULL), 0);
	cr_assert_eq(pc_run_registry_start(r, "w2", NULL, 2), 0);
	pc_run_info_t info;
	uint64_t t0 = now_ms();
	cr_assert_eq(pc_run_registry_wait(r, "w2", 30, &info), PC_ETIMEDOUT);
	cr_assert_geq(now_ms() - t0, 29);
	cr_assert_eq(info.status, PC_RUN_STATUS_RUNNING, "the run goes on");
	cr_assert_eq(pc_run_registry_active_count(r), 1);
	cr_assert_eq(pc_run_registry_wait(r, "ghost", 30, &info), PC_ENOTFOUND);
	cr_assert_eq(pc_run_registry_wait(r, "w2", 0, NULL), PC_ETIMEDOUT);
	pc_run_registry_free(r);
	ASSERT_NO_LEAKS();
}

Test(registry, free_wakes_waiters_with_stopped)
{
	pc_run_registry_t *r = new_registry();
	cr_assert_eq(pc_run_registry_add(r, "w3", "s", 1, NULL, NULL), 0);
	cr_assert_eq(pc_run_registry_add(r, "w4", "t", 1, NULL, NULL), 0);
	cr_assert_eq(pc_run_registry_start(r, "w3", NULL, 2), 0);
	waiter_t w[3] = {
		{.r = r, .id = "w3", .timeout = -1, .rc = 1},
		{.r = r, .id = "w4", .timeout = 60000, .rc = 1}, /* queued, never started */
		{.r = r, .id = "w3", .timeout = 60000, .rc = 1},
	};
	pthread_t th[3];
	for (int i = 0; i < 3; i++)
		cr_assert_eq(pthread_create(&th[i], NULL, wait_thread, &w[i]), 0);
	for (int i = 0; i < 3; i++)
		AWAIT(LOAD(w[i].started), 5000);
	sleep_ms(50); /* let them block */
	uint64_t t0 = now_ms();
	pc_run_registry_free(r);
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(pthread_join(th[i], NULL), 0);
		cr_assert_eq(w[i].rc, PC_ESTOPPED, "waiter %d: %d", i, w[i].rc);
	}
	cr_assert_lt(now_ms() - t0, 10000);
	ASSERT_NO_LEAKS();
}

/* ---- actors ---- */

enum { T_DONE = 7 };

typedef struct watch_probe {
	uint32_t got;
	uint32_t bad;
	uint64_t corr_sum;
	pc_run_status_t last_status;
	char last_run[PC_RUN_ID_MAX + 1];
} watch_probe_t;

static int probe_receive(pc_ctx_t *ctx, void *state, pc_msg_t *m)
{
	(void)ctx;
	watch_probe_t *p = state;
	if (m->type != T_DONE || m->size != sizeof(pc_run_info_t)) {
		INC(p->bad);
		return 0;
	}
	const pc_run_info_t *info = pc_msg_cdata(m);
	if (!pc_run_status_terminal(info->status))
		INC(p->bad);
	p->last_status = info->status;
	memcpy(p->last_run, info->run_id, sizeof(p->last_run));
	__atomic_add_fetch(&p->corr_sum, m->corr, __ATOMIC_ACQ_REL);
	INC(p->got);
	return 0;
}

static const pc_behavior_t probe_behavior = {.name = "watch_probe", .receive = probe_receive};

Test(registry, watch_delivers_once)
{
	pc_runtime_t *rt = start_rt(2);
	watch_probe_t *p = calloc(1, sizeof(*p));
	pc_actor_t *a = NULL, *runner = NULL;
	cr_assert_eq(pc_spawn(rt, &probe_behavior, p, &a), 0);
	watch_probe_t *rp = calloc(1, sizeof(*rp));
	cr_assert_eq(pc_spawn(rt, &probe_behavior, rp, &runner), 0);
	pc_run_registry_t *r = new_registry();

	cr_assert_eq(pc_run_registry_watch(r, "ghost", a, T_DONE, 1), PC_ENOTFOUND);
	cr_assert_eq(pc_run_registry_add(r, "x", "s", 1, NULL, NULL), 0);
	cr_assert_eq(pc_run_registry_start(r, "x", runner, 2), 0);
	/* The run's actor, and the session's. */
	pc_actor_t *got = pc_run_registry_actor(r, "x");
	cr_assert_eq(got, runner);
	pc_actor_release(got);
	char id[PC_RUN_ID_MAX + 1];
	cr_assert_eq(pc_run_registry_active(r, "s", id, &got), 0);
	cr_assert_eq(got, runner);
	pc_actor_release(got);

	cr_assert_eq(pc_run_registry_watch(r, "x", a, T_DONE, 10), 0);
	quiesce(rt);
	cr_assert_eq(LOAD(p->got), 0);
	cr_assert_eq(pc_run_registry_finish(r, "x", PC_RUN_STATUS_OK, 3, NULL, NULL, false), 0);
	AWAIT(LOAD(p->got) == 1, 5000);
	cr_assert_null(pc_run_registry_actor(r, "x"));
	cr_assert_eq(pc_run_registry_active(r, "s", id, &got), PC_ENOTFOUND);
	cr_assert_null(got);
	/* Registered after the finish: delivered at once. */
	cr_assert_eq(pc_run_registry_watch(r, "x", a, T_DONE, 100), 0);
	AWAIT(LOAD(p->got) == 2, 5000);
	cr_assert_eq(pc_run_registry_finish(r, "x", PC_RUN_STATUS_ERROR, 4, NULL, NULL, false), PC_ESTATE);
	quiesce(rt);
	cr_assert_eq(LOAD(p->got), 2);
	cr_assert_eq(LOAD(p->bad), 0);
	cr_assert_eq(__atomic_load_n(&p->corr_sum, __ATOMIC_ACQUIRE), 110);
	cr_assert_eq(p->last_status, PC_RUN_STATUS_OK);
	cr_assert_str_eq(p->last_run, "x");

	/* A watcher of a run still going when the registry is freed is let go. */
	cr_assert_eq(pc_run_registry_add(r, "y", "s", 5, NULL, NULL), 0);
	cr_assert_eq(pc_run_registry_start(r, "y", runner, 6), 0);
	cr_assert_eq(pc_run_registry_watch(r, "y", a, T_DONE, 1000), 0);
	pc_run_registry_free(r);
	quiesce(rt);
	cr_assert_eq(LOAD(p->got), 2);

	pc_actor_release(a);
	pc_actor_release(runner);
	pc_runtime_free(rt);
	/* No stop handler: the states are ours. */
	free(p);
	free(rp);
	ASSERT_NO_LEAKS();
}

/* ---- the terminal cache ---- */

Test(registry, sweep_after_ttl)
{
	STORE(released, 0);
	pc_run_registry_t *r = new_registry();
	const int64_t t = 1000000;
	cr_assert_eq(pc_run_registry_add(r, "old", "s", t, malloc(1), att_release), 0);
	cr_assert_eq(pc_run_registry_add(r, "running", "s", t, malloc(1), att_release), 0);
	cr_assert_eq(pc_run_registry_add(r, "queued", "s", t, NULL, NULL), 0);
	cr_assert_eq(pc_run_registry_add(r, "newer", "t", t, NULL, NULL), 0);
	cr_assert_eq(pc_run_registry_start(r, "running", NULL, t), 0);
	cr_assert_eq(pc_run_registry_finish(r, "old", PC_RUN_STATUS_OK, t + 10, NULL, NULL, false), 0);
	cr_assert_eq(pc_run_registry_finish(r, "newer", PC_RUN_STATUS_OK, t + 5000, NULL, NULL, false), 0);

	const int64_t ttl = (int64_t)PC_RUN_REGISTRY_TERMINAL_TTL_MS;
	cr_assert_eq(pc_run_registry_sweep(r, t + 10 + ttl), 0, "not older than the TTL yet");
	cr_assert_eq(pc_run_registry_sweep(r, t + 11 + ttl), 1);
	pc_run_info_t info;
	cr_assert_eq(pc_run_registry_get(r, "old", &info), PC_ENOTFOUND);
	cr_assert_eq(pc_run_registry_wait(r, "old", 0, &info), PC_ENOTFOUND);
	cr_assert_eq(LOAD(released), 1);
	cr_assert_eq(pc_run_registry_get(r, "newer", &info), 0);
	/* Unfinished runs stay whatever their age. */
	cr_assert_eq(pc_run_registry_sweep(r, t + 100 * ttl), 1);
	cr_assert_eq(pc_run_registry_get(r, "running", &info), 0);
	cr_assert_eq(pc_run_registry_get(r, "queued", &info), 0);
	cr_assert_eq(pc_run_registry_get(r, "newer", &info), PC_ENOTFOUND);
	/* A swept id may be added again. */
	cr_assert_eq(pc_run_registry_add(r, "old", "s", t + 100 * ttl, NULL, NULL), 0);
	pc_run_registry_free(r);
	cr_assert_eq(LOAD(released), 2);
	ASSERT_NO_LEAKS();
}

/* ---- stress ---- */

#define S_RUNS 20000u
#define S_SESSIONS 6u
#define S_ADDERS 2

typedef struct rstress {
	pc_run_registry_t *r;
	pc_actor_t *watcher;
	uint32_t nruns;
	uint32_t next;        /* the next run to add */
	uint32_t added;       /* runs 0..added-1 were added (monotonic hint) */
	uint32_t done;        /* producers finished */
	uint32_t finished_ok[S_RUNS];
	uint32_t watches;     /* watch calls that returned 0 */
} rstress_t;

static const char *run_name(char *buf, size_t cap, uint32_t i)
{
	snprintf(buf, cap, "run-%u", i);
	return buf;
}

static pc_run_status_t random_terminal(uint64_t *rng)
{
	return (pc_run_status_t)(PC_RUN_STATUS_OK + rnd_below(rng, 4));
}

typedef struct rworker {
	rstress_t *st;
	uint64_t rng;
} rworker_t;

static void *adder(void *arg)
{
	rworker_t *w = arg;
	rstress_t *st = w->st;
	char id[32], sess[32];
	uint32_t i;
	while ((i = __atomic_fetch_add(&st->next, 1, __ATOMIC_ACQ_REL)) < st->nruns) {
		run_name(id, sizeof(id), i);
		snprintf(sess, sizeof(sess), "s%u", rnd_below(&w->rng, S_SESSIONS));
		int rc = pc_run_registry_add(st->r, id, sess, 1, NULL, NULL);
		CHECK(rc == 0, "add %s: %d", id, rc);
		/* Publish: others may now act on runs below this one. */
		uint32_t seen = LOAD(st->added);
		while (seen < i + 1 && !__atomic_compare_exchange_n(&st->added, &seen, i + 1, false,
								     __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
			;
		if (rnd_below(&w->rng, 4)) {
			rc = pc_run_registry_start(st->r, id, NULL, 2);
			/* Finished by another thread, maybe swept too. */
			CHECK(rc == 0 || rc == PC_ESTATE || rc == PC_ENOTFOUND, "start %s: %d", id, rc);
		}
		if (rnd_below(&w->rng, 2)) {
			rc = pc_run_registry_finish(st->r, id, random_terminal(&w->rng), 3, "e", "k", false);
			CHECK(rc == 0 || rc == PC_ESTATE || rc == PC_ENOTFOUND, "finish %s: %d", id, rc);
			if (rc == 0)
				INC(st->finished_ok[i]);
		}
		if (rnd_below(&w->rng, 32) == 0)
			sched_yield();
	}
	INC(st->done);
	return NULL;
}

static void *finisher(void *arg)
{
	rworker_t *w = arg;
	rstress_t *st = w->st;
	char id[32];
	while (LOAD(st->done) < S_ADDERS) {
		uint32_t n = LOAD(st->added);
		if (!n) {
			sched_yield();
			continue;
		}
		uint32_t i = rnd_below(&w->rng, n);
		run_name(id, sizeof(id), i);
		int rc = pc_run_registry_finish(st->r, id, random_terminal(&w->rng), 4, NULL, NULL, false);
		CHECK(rc == 0 || rc == PC_ESTATE || rc == PC_ENOTFOUND, "finish %s: %d", id, rc);
		if (rc == 0)
			INC(st->finished_ok[i]);
	}
	return NULL;
}

static void *stress_waiter(void *arg)
{
	rworker_t *w = arg;
	rstress_t *st = w->st;
	char id[32];
	while (LOAD(st->done) < S_ADDERS) {
		uint32_t n = LOAD(st->added);
		if (!n) {
			sched_yield();
			continue;
		}
		uint32_t i = rnd_below(&w->rng, n);
		run_name(id, sizeof(id), i);
		pc_run_info_t info;
		int rc = pc_run_registry_wait(st->r, id, rnd_below(&w->rng, 3), &info);
		CHECK(rc == 0 || rc == PC_ETIMEDOUT || rc == PC_ENOTFOUND, "wait %s: %d", id, rc);
		if (rc == 0)
			CHECK(pc_run_status_terminal(info.status), "wait %s: status %d", id, info.status);
		if (rc == PC_ETIMEDOUT)
			CHECK(!pc_run_status_terminal(info.status), "wait %s timed out on a finished run", id);
		if (rnd_below(&w->rng, 3) == 0) {
			rc = pc_run_registry_watch(st->r, id, st->watcher, T_DONE, i);
			CHECK(rc == 0 || rc == PC_ENOTFOUND, "watch %s: %d", id, rc);
			if (rc == 0)
				INC(st->watches);
		}
		char active[PC_RUN_ID_MAX + 1];
		char sess[32];
		snprintf(sess, sizeof(sess), "s%u", rnd_below(&w->rng, S_SESSIONS));
		rc = pc_run_registry_active(st->r, sess, active, NULL);
		CHECK(rc == 0 || rc == PC_ENOTFOUND, "active: %d", rc);
		if (rnd_below(&w->rng, 16) == 0)
			(void)pc_run_registry_sweep(st->r, 2 + (int64_t)PC_RUN_REGISTRY_TERMINAL_TTL_MS + 10);
	}
	return NULL;
}

Test(registry_stress, add_start_finish_wait, .timeout = 120)
{
	reset_failures();
	uint64_t rng = test_seed();
	pc_runtime_t *rt = start_rt(2);
	watch_probe_t *p = calloc(1, sizeof(*p));
	rstress_t *st = calloc(1, sizeof(*st));
	st->nruns = 2000 + rnd_below(&rng, S_RUNS - 2000);
	cr_log_info("runs=%u", st->nruns);
	cr_assert_eq(pc_spawn(rt, &probe_behavior, p, &st->watcher), 0);
	st->r = new_registry();

	enum { ADDERS = S_ADDERS, FINISHERS = 2, WAITERS = 3 };
	pthread_t th[ADDERS + FINISHERS + WAITERS];
	rworker_t ws[ADDERS + FINISHERS + WAITERS];
	for (int i = 0; i < ADDERS + FINISHERS + WAITERS; i++) {
		ws[i] = (rworker_t){st, xs(&rng) | 1};
		void *(*fn)(void *) = i < ADDERS ? adder : i < ADDERS + FINISHERS ? finisher : stress_waiter;
		cr_assert_eq(pthread_create(&th[i], NULL, fn, &ws[i]), 0);
	}
	for (int i = 0; i < ADDERS + FINISHERS + WAITERS; i++)
		cr_assert_eq(pthread_join(th[i], NULL), 0);
	assert_no_failures();

	/* Finish what is left; every run finished exactly once. */
	char id[32];
	for (uint32_t i = 0; i < st->nruns; i++) {
		int rc = pc_run_registry_finish(st->r, run_name(id, sizeof(id), i), PC_RUN_STATUS_OK, 5, NULL, NULL,
						false);
		cr_assert(rc == 0 || rc == PC_ESTATE || rc == PC_ENOTFOUND, "finish %s: %d", id, rc);
		if (rc == 0)
			st->finished_ok[i]++;
		cr_assert_eq(st->finished_ok[i], 1, "%s finished %u times (PINCER_TEST_SEED=0x%" PRIx64 ")", id,
			     st->finished_ok[i], top_seed);
		pc_run_info_t info;
		rc = pc_run_registry_get(st->r, id, &info);
		cr_assert(rc == PC_ENOTFOUND || pc_run_status_terminal(info.status));
	}
	cr_assert_eq(pc_run_registry_active_count(st->r), 0);
	for (uint32_t s = 0; s < S_SESSIONS; s++) {
		char sess[32];
		snprintf(sess, sizeof(sess), "s%u", s);
		cr_assert_eq(pc_run_registry_active(st->r, sess, NULL, NULL), PC_ENOTFOUND);
	}
	/* Each watch that was accepted delivered once. */
	AWAIT(LOAD(p->got) == LOAD(st->watches), 10000);
	quiesce(rt);
	cr_assert_eq(LOAD(p->got), LOAD(st->watches));
	cr_assert_eq(LOAD(p->bad), 0);

	pc_run_registry_free(st->r);
	pc_actor_release(st->watcher);
	pc_runtime_free(rt);
	free(st);
	free(p);
	ASSERT_NO_LEAKS();
}

Test(registry, terminal_cache_is_capped_oldest_first)
{
	pc_run_registry_t *r = NULL;
	cr_assert_eq(pc_run_registry_new(&r), 0);
	uint32_t n = PC_RUN_REGISTRY_TERMINAL_MAX * 2;
	char id[64];
	for (uint32_t i = 0; i < n; i++) {
		snprintf(id, sizeof(id), "cap-%u", i);
		cr_assert_eq(pc_run_registry_add(r, id, "s", 1, NULL, NULL), 0);
		cr_assert_eq(pc_run_registry_finish(r, id, PC_RUN_STATUS_OK, 2, NULL, NULL, false), 0);
	}
	pc_run_info_t info;
	cr_assert_eq(pc_run_registry_get(r, "cap-0", &info), PC_ENOTFOUND, "the oldest went first");
	snprintf(id, sizeof(id), "cap-%u", n - 1);
	cr_assert_eq(pc_run_registry_get(r, id, &info), 0, "the newest is kept");
	size_t kept = 0;
	for (uint32_t i = 0; i < n; i++) {
		snprintf(id, sizeof(id), "cap-%u", i);
		kept += pc_run_registry_get(r, id, &info) == 0;
	}
	cr_assert_leq(kept, (size_t)PC_RUN_REGISTRY_TERMINAL_MAX);
	cr_assert_geq(kept, (size_t)PC_RUN_REGISTRY_TERMINAL_MAX / 2);
	pc_run_registry_free(r);
}
