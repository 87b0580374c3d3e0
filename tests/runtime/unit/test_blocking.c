/*
 * The blocking pool (runtime/blocking.c): results come back as messages to
 * reply_to, more jobs than threads all complete on pool threads, a full
 * queue says PC_EBUSY, jobs still queued at stop are discarded exactly once,
 * and the references to reply_to actors are released.
 */
#include <criterion/criterion.h>

#include <dirent.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pincer.h"
#include "test_util.h"
#include "actors/actor_internal.h"
#include "runtime/runtime_internal.h"


static bool wait_geq(const uint64_t *p, uint64_t target, uint64_t timeout_ms)
{
	uint64_t end = pc_runtime_now_ms() + timeout_ms;
	while (ld(p) < target) {
		if (pc_runtime_now_ms() > end)
			return false;
		sleep_ms(1);
	}
	return true;
}

static pc_runtime_t *start_pool_rt(uint32_t workers, uint32_t threads, uint32_t queue)
{
	pc_runtime_config_t cfg;
	pc_runtime_config_init(&cfg);
	cfg.workers = workers;
	cfg.blocking_threads = threads;
	cfg.blocking_queue = queue;
	pc_runtime_t *rt = NULL;
	cr_assert_eq(pc_runtime_new(&cfg, &rt), 0);
	cr_assert_eq(pc_runtime_start(rt), 0);
	return rt;
}

/* Live actors of a runtime (memory held), reclaimed ones excluded. */
static uint32_t live_actors(pc_runtime_t *rt)
{
	pc_runtime_stats_t s;
	pc_runtime_stats(rt, &s, NULL, 0);
	return (uint32_t)s.actors_live;
}

/* A gate jobs can wait on. */
typedef struct gate {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool open;
	uint32_t waiting;
} gate_t;

static void gate_init(gate_t *g)
{
	pthread_mutex_init(&g->mu, NULL);
	pthread_cond_init(&g->cv, NULL);
	g->open = false;
	g->waiting = 0;
}

static void gate_pass(gate_t *g)
{
	pthread_mutex_lock(&g->mu);
	g->waiting++;
	pthread_cond_broadcast(&g->cv);
	while (!g->open)
		pthread_cond_wait(&g->cv, &g->mu);
	g->waiting--;
	pthread_mutex_unlock(&g->mu);
}

static void gate_open(gate_t *g)
{
	pthread_mutex_lock(&g->mu);
	g->open = true;
	pthread_cond_broadcast(&g->cv);
	pthread_mutex_unlock(&g->mu);
}

static bool gate_wait_waiting(gate_t *g, uint32_t n, int timeout_ms)
{
	for (int i = 0; i < timeout_ms; i++) {
		pthread_mutex_lock(&g->mu);
		bool ok = g->waiting >= n;
		pthread_mutex_unlock(&g->mu);
		if (ok)
			return true;
		sleep_ms(1);
	}
	return false;
}

static void gate_destroy(gate_t *g)
{
	pthread_cond_destroy(&g->cv);
	pthread_mutex_destroy(&g->mu);
}

enum { T_RESULT = 1 };

/* One job's argument. */
typedef struct job {
	uint32_t index;
	uint32_t fn_calls;      /* atomic */
	uint32_t discard_calls; /* atomic */
	pthread_t ran_on;
	char thread_name[16];
	bool on_worker;
	gate_t *gate;
	bool null_result;
} job_t;

static pc_msg_t *job_fn(void *arg)
{
	job_t *j = arg;
	__atomic_fetch_add(&j->fn_calls, 1, __ATOMIC_ACQ_REL);
	j->ran_on = pthread_self();
	if (pthread_getname_np(j->ran_on, j->thread_name, sizeof(j->thread_name)) != 0)
		j->thread_name[0] = 0;
	j->on_worker = pc_runtime_on_worker();
	if (j->gate)
		gate_pass(j->gate);
	if (j->null_result)
		return NULL;
	pc_msg_t *m = pc_msg_new(T_RESULT, sizeof(uint64_t));
	if (m)
		*(uint64_t *)pc_msg_data(m) = (uint64_t)j->index * 2 + 1;
	return m;
}

static void job_discard(void *arg)
{
	job_t *j = arg;
	__atomic_fetch_add(&j->discard_calls, 1, __ATOMIC_ACQ_REL);
}

/* The reply_to actor: records each result once. */
typedef struct collector {
	uint32_t n;
	uint8_t *seen;   /* plain: only the actor */
	uint64_t got;    /* atomic */
	uint64_t others; /* atomic: messages that were not results */
} collector_t;

static int collector_receive(pc_ctx_t *ctx, void *state, pc_msg_t *m)
{
	(void)ctx;
	collector_t *c = state;
	CHECK(pc_runtime_on_worker(), "an actor's turn is not on a worker");
	if (m->type != T_RESULT) {
		add(&c->others, 1);
		return 0;
	}
	uint64_t v = pc_msg_u64(m);
	CHECK(v % 2 == 1, "bad result %" PRIu64, v);
	uint64_t k = v / 2;
	CHECK(k < c->n, "result for unknown job %" PRIu64, k);
	if (k < c->n) {
		CHECK(c->seen[k] == 0, "result of job %" PRIu64 " twice", k);
		c->seen[k]++;
	}
	add(&c->got, 1);
	return 0;
}

static const pc_behavior_t collector_beh = {"collector", collector_receive, NULL};

/* Whether a thread of this process has the name `want`. */
static bool thread_named(const char *want)
{
	DIR *d = opendir("/proc/self/task");
	cr_assert_not_null(d);
	bool found = false;
	struct dirent *e;
	while (!found && (e = readdir(d))) {
		char path[300], name[32] = "";
		snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
		FILE *f = e->d_name[0] != '.' ? fopen(path, "r") : NULL;
		if (!f)
			continue;
		if (fgets(name, sizeof(name), f))
			name[strcspn(name, "\n")] = 0;
		fclose(f);
		found = !strcmp(name, want);
	}
	closedir(d);
	return found;
}

Test(blocking, results_come_back_as_messages)
{
	reset_failures();
	uint32_t threads = 3, n = 300;
	pc_runtime_t *rt = start_pool_rt(2, threads, 0);
	collector_t c = {n, calloc(n, 1), 0, 0};
	cr_assert_not_null(c.seen);
	pc_actor_t *col;
	cr_assert_eq(pc_spawn(rt, &collector_beh, &c, &col), 0);
	job_t *jobs = calloc(n, sizeof(job_t));
	cr_assert_not_null(jobs);
	for (uint32_t i = 0; i < n; i++) {
		jobs[i].index = i;
		cr_assert_eq(pc_blocking_submit(rt, job_fn, job_discard, &jobs[i], col), 0);
	}
	cr_assert(wait_geq(&c.got, n, 30000), "%" PRIu64 " of %u results", ld(&c.got), n);
	cr_assert_eq(pc_runtime_wait_quiescent(rt, 30000), 0);
	assert_no_failures();
	/* Each ran once, on a pool thread (not a worker, not this thread),
	 * and no more pool threads than configured were used. */
	pthread_t seen_threads[16];
	uint32_t nthreads = 0;
	for (uint32_t i = 0; i < n; i++) {
		cr_assert_eq(jobs[i].fn_calls, 1);
		cr_assert_eq(jobs[i].discard_calls, 0);
		cr_assert(!jobs[i].on_worker, "job %u ran on a worker", i);
		cr_assert(!pthread_equal(jobs[i].ran_on, pthread_self()));
		cr_assert(!strncmp(jobs[i].thread_name, "pc-blocking-", 12), "job %u ran on \"%s\"", i,
			  jobs[i].thread_name);
		bool known = false;
		for (uint32_t k = 0; k < nthreads; k++)
			known |= pthread_equal(seen_threads[k], jobs[i].ran_on) != 0;
		if (!known) {
			cr_assert_lt(nthreads, threads, "more pool threads than blocking_threads");
			seen_threads[nthreads++] = jobs[i].ran_on;
		}
		cr_assert_eq(c.seen[i], 1);
	}
	/* The workers are named too, for top -H, perf and gdb. */
	cr_assert(thread_named("pc-worker-0") && thread_named("pc-worker-1"));
	pc_runtime_stats_t s;
	pc_runtime_stats(rt, &s, NULL, 0);
	cr_assert_eq(s.blocking_done, n);
	/* Results are sent from pool threads: external sends. */
	cr_assert_eq(s.sent_external, n);
	cr_assert_eq(ld(&c.others), 0);
	pc_actor_release(col);
	FREE_RUNTIME_CHECKED(rt);
	free(jobs);
	free(c.seen);
	ASSERT_NO_LEAKS();
}

/* The counter of finished jobs is final once the runtime is quiet. */
Test(blocking, done_counter_is_final_at_quiescence)
{
	reset_failures();
	pc_runtime_t *rt = start_pool_rt(1, 4, 0);
	for (uint32_t round = 0; round < 300; round++) {
		job_t j = {.index = round, .null_result = true};
		cr_assert_eq(pc_blocking_submit(rt, job_fn, job_discard, &j, NULL), 0);
		cr_assert_eq(pc_runtime_wait_quiescent(rt, 10000), 0);
		pc_runtime_stats_t s;
		pc_runtime_stats(rt, &s, NULL, 0);
		cr_assert_eq(s.blocking_done, round + 1, "round %u: blocking_done %" PRIu64 " after quiescence",
			     round, s.blocking_done);
		cr_assert_eq(j.fn_calls, 1);
	}
	FREE_RUNTIME_CHECKED(rt);
}

Test(blocking, null_result_and_null_reply_to)
{
	reset_failures();
	pc_runtime_t *rt = start_pool_rt(2, 2, 0);
	collector_t c = {4, calloc(4, 1), 0, 0};
	pc_actor_t *col;
	cr_assert_eq(pc_spawn(rt, &collector_beh, &c, &col), 0);
	job_t j[4] = {{.index = 0, .null_result = true},
		      {.index = 1},
		      {.index = 2, .null_result = true},
		      {.index = 3}};
	cr_assert_eq(pc_blocking_submit(rt, job_fn, NULL, &j[0], col), 0);  /* no message */
	cr_assert_eq(pc_blocking_submit(rt, job_fn, NULL, &j[1], NULL), 0); /* result freed */
	cr_assert_eq(pc_blocking_submit(rt, job_fn, NULL, &j[2], NULL), 0);
	cr_assert_eq(pc_blocking_submit(rt, job_fn, NULL, &j[3], col), 0);
	cr_assert_eq(pc_runtime_wait_quiescent(rt, 10000), 0);
	for (int i = 0; i < 4; i++)
		cr_assert_eq(j[i].fn_calls, 1);
	cr_assert_eq(ld(&c.got), 1);
	cr_assert_eq(c.seen[3], 1);
	cr_assert_eq(pc_blocking_submit(NULL, job_fn, NULL, &j[0], NULL), PC_EINVAL);
	cr_assert_eq(pc_blocking_submit(rt, NULL, NULL, &j[0], NULL), PC_EINVAL);
	assert_no_failures();
	pc_actor_release(col);
	FREE_RUNTIME_CHECKED(rt);
	free(c.seen);
	ASSERT_NO_LEAKS();
}

/* One worker and one blocking thread that trims after 100 ms idle. */
static pc_runtime_t *start_trim_rt(void)
{
	pc_runtime_config_t cfg;
	pc_runtime_config_init(&cfg);
	cfg.workers = 1;
	cfg.blocking_threads = 1;
	cfg.trim_after_ms = 100;
	pc_runtime_t *rt = NULL;
	cr_assert_eq(pc_runtime_new(&cfg, &rt), 0);
	cr_assert_eq(pc_runtime_start(rt), 0);
	return rt;
}

/* A blocking thread that ran a job gives its free heap back once it has
 * had nothing to do for trim_after_ms, once, and then sleeps. */
Test(blocking, an_idle_thread_trims_once)
{
	pc_runtime_t *rt = start_trim_rt();
	pc_runtime_stats_t st;
	pc_runtime_stats(rt, &st, NULL, 0);
	cr_assert_eq(st.blocking_trims, 0u, "no work, no trim");
	job_t j = {.index = 0, .null_result = true};
	cr_assert_eq(pc_blocking_submit(rt, job_fn, NULL, &j, NULL), 0);
	uint64_t until = pc_runtime_now_ms() + 5000;
	do {
		sleep_ms(10);
		pc_runtime_stats(rt, &st, NULL, 0);
	} while (st.blocking_trims == 0 && pc_runtime_now_ms() < until);
	cr_assert_eq(st.blocking_trims, 1u);
	sleep_ms(400);
	pc_runtime_stats(rt, &st, NULL, 0);
	cr_assert_eq(st.blocking_trims, 1u, "once per busy stretch");
	cr_assert_eq(pc_blocking_submit(rt, job_fn, NULL, &j, NULL), 0);
	until = pc_runtime_now_ms() + 5000;
	do {
		sleep_ms(10);
		pc_runtime_stats(rt, &st, NULL, 0);
	} while (st.blocking_trims == 1 && pc_runtime_now_ms() < until);
	cr_assert_eq(st.blocking_trims, 2u, "and again after the next one");
	cr_assert_eq(pc_runtime_wait_quiescent(rt, 10000), 0);
	cr_assert_eq(j.fn_calls, 2);
	FREE_RUNTIME_CHECKED(rt);
	ASSERT_NO_LEAKS();
}

/* Small jobs more often than trim_after_ms do not put the trim off for
 * ever: it falls due trim_after_ms after the thread first went idle. */
Test(blocking, jobs_more_often_than_the_trim_wait_do_not_put_it_off)
{
	pc_runtime_t *rt = start_trim_rt();
	job_t j = {.index = 0, .null_result = true};
	pc_runtime_stats_t st;
	uint64_t until = pc_runtime_now_ms() + 5000;
	uint32_t jobs = 0;
	do {
		cr_assert_eq(pc_blocking_submit(rt, job_fn, NULL, &j, NULL), 0);
		jobs++;
		sleep_ms(30);
		pc_runtime_stats(rt, &st, NULL, 0);
	} while (st.blocking_trims == 0 && pc_runtime_now_ms() < until);
	cr_assert_geq(st.blocking_trims, 1u, "no trim in %u jobs 30 ms apart", jobs);
	cr_assert_eq(pc_runtime_wait_quiescent(rt, 10000), 0);
	cr_assert_eq(j.fn_calls, jobs);
	FREE_RUNTIME_CHECKED(rt);
	ASSERT_NO_LEAKS();
}

Test(blocking, full_queue_is_busy)
{
	reset_failures();
	uint32_t qcap = 4;
	pc_runtime_t *rt = start_pool_rt(1, 1, qcap);
	gate_t g;
	gate_init(&g);
	collector_t c = {16, calloc(16, 1), 0, 0};
	pc_actor_t *col;
	cr_assert_eq(pc_spawn(rt, &collector_beh, &c, &col), 0);
	job_t j[16];
	memset(j, 0, sizeof(j));
	for (uint32_t i = 0; i < 16; i++)
		j[i].index = i;
	/* The only pool thread is held inside job 0, which left the queue. */
	j[0].gate = &g;
	cr_assert_eq(pc_blocking_submit(rt, job_fn, job_discard, &j[0], col), 0);
	cr_assert(gate_wait_waiting(&g, 1, 10000), "job 0 never started");
	for (uint32_t i = 1; i <= qcap; i++)
		cr_assert_eq(pc_blocking_submit(rt, job_fn, job_discard, &j[i], col), 0, "job %u", i);
	/* Full: refused, and the job is left alone (the caller keeps it). */
	for (uint32_t i = qcap + 1; i < qcap + 4; i++)
		cr_assert_eq(pc_blocking_submit(rt, job_fn, job_discard, &j[i], col), PC_EBUSY, "job %u", i);
	cr_assert_eq(pc_runtime_wait_quiescent(rt, 20), PC_ETIMEDOUT, "jobs are pending");
	gate_open(&g);
	cr_assert(wait_geq(&c.got, qcap + 1, 10000));
	cr_assert_eq(pc_runtime_wait_quiescent(rt, 10000), 0);
	for (uint32_t i = 0; i <= qcap; i++)
		cr_assert_eq(j[i].fn_calls, 1);
	for (uint32_t i = qcap + 1; i < qcap + 4; i++) {
		cr_assert_eq(j[i].fn_calls, 0);
		cr_assert_eq(j[i].discard_calls, 0);
	}
	/* Room again. */
	cr_assert_eq(pc_blocking_submit(rt, job_fn, job_discard, &j[qcap + 1], col), 0);
	cr_assert_eq(pc_runtime_wait_quiescent(rt, 10000), 0);
	cr_assert_eq(j[qcap + 1].fn_calls, 1);
	cr_assert_eq(ld(&c.got), qcap + 2);
	assert_no_failures();
	pc_actor_release(col);
	FREE_RUNTIME_CHECKED(rt);
	gate_destroy(&g);
	free(c.seen);
	ASSERT_NO_LEAKS();
}

/* Stop while one job runs and many wait: the running one finishes, every
 * queued one is discarded exactly once, none runs. */
typedef struct stopper {
	pc_runtime_t *rt;
	uint32_t done;
} stopper_t;

static void *stop_thread(void *arg)
{
	stopper_t *s = arg;
	pc_runtime_stop(s->rt);
	__atomic_store_n(&s->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

Test(blocking, queued_jobs_discarded_at_stop)
{
	reset_failures();
	for (int round = 0; round < 10; round++) {
		uint32_t threads = 1 + (uint32_t)round % 3, n = 60;
		pc_runtime_t *rt = start_pool_rt(2, threads, 0);
		gate_t g;
		gate_init(&g);
		collector_t c = {n, calloc(n, 1), 0, 0};
		pc_actor_t *col;
		cr_assert_eq(pc_spawn(rt, &collector_beh, &c, &col), 0);
		job_t *j = calloc(n, sizeof(job_t));
		cr_assert_not_null(j);
		/* The first `threads` jobs hold every pool thread. */
		for (uint32_t i = 0; i < n; i++) {
			j[i].index = i;
			j[i].gate = i < threads ? &g : NULL;
			cr_assert_eq(pc_blocking_submit(rt, job_fn, job_discard, &j[i], col), 0);
			if (i + 1 == threads)
				cr_assert(gate_wait_waiting(&g, threads, 10000), "pool threads did not start");
		}
		pc_actor_release(col);
		stopper_t s = {rt, 0};
		pthread_t t;
		cr_assert_eq(pthread_create(&t, NULL, stop_thread, &s), 0);
		/* Wait until the pool is told to stop, then let the held jobs go. */
		for (int k = 0; k < 10000; k++) {
			pthread_mutex_lock(&rt->blocking.lock);
			bool stopping = rt->blocking.stopping;
			pthread_mutex_unlock(&rt->blocking.lock);
			if (stopping)
				break;
			sleep_ms(1);
		}
		cr_assert_eq(__atomic_load_n(&s.done, __ATOMIC_ACQUIRE), 0, "stop returned with jobs running");
		cr_assert_eq(pc_blocking_submit(rt, job_fn, job_discard, &j[0], NULL), PC_ESTOPPED);
		gate_open(&g);
		pthread_join(t, NULL);
		uint32_t ran = 0, discarded = 0;
		for (uint32_t i = 0; i < n; i++) {
			cr_assert_eq(j[i].fn_calls + j[i].discard_calls, 1, "round %d job %u: fn %u times, discard %u times",
				     round, i, j[i].fn_calls, j[i].discard_calls);
			ran += j[i].fn_calls;
			discarded += j[i].discard_calls;
			if (i < threads)
				cr_assert_eq(j[i].fn_calls, 1);
		}
		cr_assert_eq(ran, threads, "round %d: %u ran", round, ran);
		cr_assert_eq(discarded, n - threads);
		assert_no_failures();
		FREE_RUNTIME_CHECKED(rt);
		gate_destroy(&g);
		free(j);
		free(c.seen);
	}
	ASSERT_NO_LEAKS();
}

/* The job's reference to reply_to is released: an actor whose last
 * reference is the job's is destroyed once the job is done. */
Test(blocking, reply_to_reference_released)
{
	reset_failures();
	pc_runtime_t *rt = start_pool_rt(2, 2, 0);
	uint32_t n = 50;
	job_t *j = calloc(n, sizeof(job_t));
	collector_t *c = calloc(n, sizeof(collector_t));
	cr_assert(j && c);
	gate_t g;
	gate_init(&g);
	for (uint32_t i = 0; i < n; i++) {
		c[i] = (collector_t){n, calloc(n, 1), 0, 0};
		pc_actor_t *col;
		cr_assert_eq(pc_spawn(rt, &collector_beh, &c[i], &col), 0);
		j[i].index = i;
		j[i].gate = &g;
		cr_assert_eq(pc_blocking_submit(rt, job_fn, job_discard, &j[i], col), 0);
		/* Half stop before their result arrives (it becomes a dead
		 * letter); all lose the caller's reference. */
		if (i % 2 == 0)
			cr_assert_eq(pc_actor_stop(col, PC_EXIT_NORMAL), 0);
		pc_actor_release(col);
	}
	/* Let the stop requests land first, so their results are dead letters. */
	pc_runtime_stats_t s;
	for (int k = 0; k < 10000; k++) {
		pc_runtime_stats(rt, &s, NULL, 0);
		if (s.exited == n / 2)
			break;
		sleep_ms(1);
	}
	cr_assert_eq(s.exited, n / 2);
	cr_assert_eq(live_actors(rt), n, "the jobs hold the actors");
	gate_open(&g);
	cr_assert_eq(pc_runtime_wait_quiescent(rt, 30000), 0);
	/* Live ones are still there (alive reference); stopped ones are gone. */
	uint32_t got = 0;
	for (uint32_t i = 0; i < n; i++)
		got += (uint32_t)ld(&c[i].got);
	cr_assert_eq(got, n / 2);
	cr_assert_eq(live_actors(rt), n / 2, "stopped actors whose last reference was a job's must be freed");
	pc_runtime_stats(rt, &s, NULL, 0);
	cr_assert_eq(s.blocking_done, n);
	cr_assert_eq(s.dead_letters, n / 2);
	assert_no_failures();
	FREE_RUNTIME_CHECKED(rt);
	for (uint32_t i = 0; i < n; i++)
		free(c[i].seen);
	free(c);
	free(j);
	gate_destroy(&g);
	ASSERT_NO_LEAKS();
}

/* Submitting from inside actors and from many outside threads at once. */
typedef struct submitter {
	pc_runtime_t *rt;
	pc_actor_t *col;
	job_t *jobs;
	uint32_t from, to;
	uint64_t busy;
} submitter_t;

static void *submit_thread(void *arg)
{
	submitter_t *s = arg;
	for (uint32_t i = s->from; i < s->to; i++) {
		int rc;
		while ((rc = pc_blocking_submit(s->rt, job_fn, job_discard, &s->jobs[i], s->col)) == PC_EBUSY) {
			s->busy++;
			sched_yield();
		}
		CHECK(rc == 0, "submit: %d", rc);
	}
	return NULL;
}

Test(blocking, concurrent_submitters)
{
	reset_failures();
	uint32_t n = 2000, nt = 4;
	pc_runtime_t *rt = start_pool_rt(2, 3, 64);
	collector_t c = {n, calloc(n, 1), 0, 0};
	pc_actor_t *col;
	cr_assert_eq(pc_spawn(rt, &collector_beh, &c, &col), 0);
	job_t *jobs = calloc(n, sizeof(job_t));
	cr_assert_not_null(jobs);
	for (uint32_t i = 0; i < n; i++)
		jobs[i].index = i;
	pthread_t t[4];
	submitter_t s[4];
	for (uint32_t k = 0; k < nt; k++) {
		s[k] = (submitter_t){rt, col, jobs, k * n / nt, (k + 1) * n / nt, 0};
		cr_assert_eq(pthread_create(&t[k], NULL, submit_thread, &s[k]), 0);
	}
	for (uint32_t k = 0; k < nt; k++)
		pthread_join(t[k], NULL);
	cr_assert(wait_geq(&c.got, n, 60000));
	cr_assert_eq(pc_runtime_wait_quiescent(rt, 30000), 0);
	assert_no_failures();
	for (uint32_t i = 0; i < n; i++) {
		cr_assert_eq(jobs[i].fn_calls, 1);
		cr_assert_eq(c.seen[i], 1);
	}
	pc_runtime_stats_t st;
	pc_runtime_stats(rt, &st, NULL, 0);
	cr_assert_eq(st.blocking_done, n);
	pc_actor_release(col);
	FREE_RUNTIME_CHECKED(rt);
	free(jobs);
	free(c.seen);
	ASSERT_NO_LEAKS();
}

/* Jobs run in parallel up to blocking_threads, even when an idle pool
 * thread already exists when they arrive (it can take only one of them). */
Test(blocking, jobs_run_in_parallel_up_to_the_bound)
{
	reset_failures();
	for (uint32_t threads = 2; threads <= 4; threads++) {
		pc_runtime_t *rt = start_pool_rt(1, threads, 0);
		/* Warm up: one pool thread, now idle. */
		job_t w = {.null_result = true};
		cr_assert_eq(pc_blocking_submit(rt, job_fn, NULL, &w, NULL), 0);
		cr_assert_eq(pc_runtime_wait_quiescent(rt, 10000), 0);
		gate_t g;
		gate_init(&g);
		job_t j[8];
		memset(j, 0, sizeof(j));
		for (uint32_t i = 0; i < threads + 2; i++) {
			j[i].gate = &g;
			j[i].null_result = true;
			cr_assert_eq(pc_blocking_submit(rt, job_fn, NULL, &j[i], NULL), 0);
		}
		/* All `threads` jobs must be inside at once (they wait for each
		 * other at the gate); the rest queue behind them. */
		bool all_in = gate_wait_waiting(&g, threads, 5000);
		pthread_mutex_lock(&g.mu);
		uint32_t inside = g.waiting;
		pthread_mutex_unlock(&g.mu);
		gate_open(&g);
		cr_assert(all_in, "%u threads allowed, only %u jobs ran at once", threads, inside);
		cr_assert_eq(inside, threads, "more jobs at once than blocking_threads");
		cr_assert_eq(pc_runtime_wait_quiescent(rt, 10000), 0);
		for (uint32_t i = 0; i < threads + 2; i++)
			cr_assert_eq(j[i].fn_calls, 1);
		FREE_RUNTIME_CHECKED(rt);
		gate_destroy(&g);
	}
	assert_no_failures();
}

/* A job blocked in pc_ask_sync on an actor that never answers does not hold
 * up pc_runtime_free: the waiter's stop ends the wait with PC_ESTOPPED. */
typedef struct asking_job {
	pc_actor_t *silent; /* retained by the job */
	uint64_t started;   /* atomic */
	int rc;             /* atomic */
} asking_job_t;

static int silent_receive(pc_ctx_t *ctx, void *state, pc_msg_t *m)
{
	(void)ctx;
	(void)state;
	(void)m;
	return 0; /* never replies */
}

static const pc_behavior_t silent_beh = {"silent", silent_receive, NULL};

static pc_msg_t *asking_job_fn(void *arg)
{
	asking_job_t *j = arg;
	pc_msg_t *reply = NULL;
	add(&j->started, 1);
	int rc = pc_ask_sync(j->silent, pc_msg_new(T_RESULT, 0), -1, &reply);
	__atomic_store_n(&j->rc, rc, __ATOMIC_RELEASE);
	pc_msg_free(reply);
	pc_actor_release(j->silent);
	return NULL;
}

Test(blocking, ask_sync_in_a_job_ends_at_stop)
{
	pc_runtime_t *rt = start_pool_rt(2, 2, 0);
	asking_job_t j = {0};
	cr_assert_eq(pc_spawn(rt, &silent_beh, NULL, &j.silent), 0);
	cr_assert_eq(pc_blocking_submit(rt, asking_job_fn, NULL, &j, NULL), 0);
	cr_assert(wait_geq(&j.started, 1, 10000), "the job never started");
	sleep_ms(20); /* let it reach the wait */
	FREE_RUNTIME_CHECKED(rt);
	cr_assert_eq(__atomic_load_n(&j.rc, __ATOMIC_ACQUIRE), PC_ESTOPPED);
}
