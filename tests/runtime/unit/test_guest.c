/*
 * Guests (runtime.h): a thread outside the pool made a guest runs the
 * actors its holds made runnable itself when every worker is parked,
 * within its budget, and hands the rest to the workers; with a worker
 * awake, or without a guest, it hands everything over. A blocking job's held answers run
 * on its pool thread the same way, and a job an answer submits is taken by
 * that thread. The counters of what guests ran reach the stats, and many
 * guests at once lose and duplicate nothing.
 */
#include <criterion/criterion.h>

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "pincer.h"
#include "test_util.h"
#include "runtime/blocking.h"

#define WAIT_MS 10000

/* ---- an actor that notes where it ran, and passes a token on ---- */

typedef struct hop {
	_Atomic(pthread_t) ran_on;
	atomic_uint handled;
	pc_actor_t *next; /* the next hop, or NULL */
} hop_t;

static int hop_receive(pc_ctx_t *ctx, void *state, pc_msg_t *m)
{
	(void)ctx;
	(void)m;
	hop_t *h = state;
	atomic_store(&h->ran_on, pthread_self());
	if (h->next)
		cr_assert_eq(pc_send(h->next, pc_msg_new(1, 0)), 0);
	atomic_fetch_add(&h->handled, 1);
	return 0;
}

static const pc_behavior_t hop_b = {.name = "hop", .receive = hop_receive};

/* A chain of n hops, the first returned. */
static pc_actor_t *chain(pc_runtime_t *rt, hop_t *hops, uint32_t n)
{
	pc_actor_t *next = NULL;
	for (uint32_t i = n; i-- > 0;) {
		hops[i].next = next;
		cr_assert_eq(pc_spawn(rt, &hop_b, &hops[i], &next), 0);
	}
	return next;
}

static void parked(pc_runtime_t *rt)
{
	cr_assert_eq(pc_runtime_wait_quiescent(rt, WAIT_MS), 0);
}

/* A guest of rt on this thread, with the budget given. */
static pc_runtime_guest_t *guest_here(pc_runtime_t *rt, uint64_t budget_ns)
{
	pc_runtime_guest_t *g = NULL;
	cr_assert_eq(pc_runtime_guest_new(rt, budget_ns, &g), 0);
	return g;
}

static void send_held(pc_actor_t *to)
{
	pc_runtime_hold_begin();
	cr_assert_eq(pc_send(to, pc_msg_new(1, 0)), 0);
	pc_runtime_hold_end();
}

Test(guest, every_worker_parked_the_burst_runs_here_before_the_call_returns)
{
	pc_runtime_t *rt = start_rt(2);
	hop_t hops[3] = {0};
	pc_actor_t *first = chain(rt, hops, 3);
	pc_runtime_guest_t *g = guest_here(rt, 1000000000u);
	cr_assert_eq(pc_runtime_guest_new(rt, 1000, &(pc_runtime_guest_t *){NULL}), PC_ESTATE, "one guest a thread");
	parked(rt);
	uint64_t turns = stats(rt).guest_turns;
	send_held(first);
	cr_assert_eq(stats(rt).guest_turns - turns, 3, "a turn a hop, counted as the guest's");
	/* handled, and what it sent too, on this thread, already */
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(atomic_load(&hops[i].handled), 1, "hop %d", i);
		cr_assert(pthread_equal(atomic_load(&hops[i].ran_on), pthread_self()), "hop %d ran elsewhere", i);
	}
	cr_assert_not(pc_runtime_on_worker(), "the thread is no worker once the run is over");
	pc_runtime_guest_free(g);
	pc_runtime_free(rt);
}

Test(guest, the_budget_spent_the_rest_goes_to_the_workers)
{
	pc_runtime_t *rt = start_rt(2);
	hop_t hops[3] = {0};
	pc_actor_t *first = chain(rt, hops, 3);
	pc_runtime_guest_t *g = guest_here(rt, 0);
	parked(rt);
	send_held(first);
	/* one turn here, then the budget is spent */
	cr_assert_eq(atomic_load(&hops[0].handled), 1);
	cr_assert(pthread_equal(atomic_load(&hops[0].ran_on), pthread_self()));
	AWAIT(atomic_load(&hops[2].handled) == 1, WAIT_MS);
	cr_assert_not(pthread_equal(atomic_load(&hops[1].ran_on), pthread_self()), "hop 1 ran here");
	cr_assert_not(pthread_equal(atomic_load(&hops[2].ran_on), pthread_self()), "hop 2 ran here");
	pc_runtime_guest_free(g);
	pc_runtime_free(rt);
}

/* ---- a worker kept busy ---- */

typedef struct busy {
	atomic_bool running, release;
} busy_t;

static int busy_receive(pc_ctx_t *ctx, void *state, pc_msg_t *m)
{
	(void)ctx;
	(void)m;
	busy_t *b = state;
	atomic_store(&b->running, true);
	while (!atomic_load(&b->release))
		sleep_ms(1);
	return 0;
}

static const pc_behavior_t busy_b = {.name = "busy", .receive = busy_receive};

Test(guest, a_worker_awake_everything_is_handed_over)
{
	pc_runtime_t *rt = start_rt(2);
	busy_t busy = {0};
	pc_actor_t *spinner = NULL;
	cr_assert_eq(pc_spawn(rt, &busy_b, &busy, &spinner), 0);
	hop_t hops[2] = {0};
	pc_actor_t *first = chain(rt, hops, 2);
	pc_runtime_guest_t *g = guest_here(rt, 1000000000u);
	cr_assert_eq(pc_send(spinner, pc_msg_new(1, 0)), 0);
	AWAIT(atomic_load(&busy.running), WAIT_MS);
	send_held(first);
	AWAIT(atomic_load(&hops[1].handled) == 1, WAIT_MS);
	for (int i = 0; i < 2; i++)
		cr_assert_not(pthread_equal(atomic_load(&hops[i].ran_on), pthread_self()), "hop %d ran here", i);
	atomic_store(&busy.release, true);
	/* no longer a guest: a hold is handed over, as on any thread */
	pc_runtime_guest_free(g);
	hop_t lone = {0};
	pc_actor_t *a = chain(rt, &lone, 1);
	parked(rt);
	send_held(a);
	AWAIT(atomic_load(&lone.handled) == 1, WAIT_MS);
	cr_assert_not(pthread_equal(atomic_load(&lone.ran_on), pthread_self()));
	pc_runtime_free(rt);
}

/* ---- the stats ---- */

static void hop_free(pc_ctx_t *ctx, void *state, int reason)
{
	(void)ctx;
	(void)reason;
	free(state);
}

static const pc_behavior_t owned_hop_b = {.name = "hop", .receive = hop_receive, .stop = hop_free};

static int spawner_receive(pc_ctx_t *ctx, void *state, pc_msg_t *m)
{
	(void)state;
	(void)m;
	for (int i = 0; i < 10; i++) {
		pc_actor_t *a = NULL;
		hop_t *h = calloc(1, sizeof(*h));
		cr_assert_not_null(h);
		cr_assert_eq(pc_spawn(pc_ctx_runtime(ctx), &owned_hop_b, h, &a), 0);
		cr_assert_eq(pc_actor_stop(a, 0), 0);
		pc_actor_release(a);
	}
	return 0;
}

Test(guest, what_a_guest_spawns_is_counted_and_reclaimed)
{
	pc_runtime_t *rt = start_rt(2);
	pc_behavior_t spawner_b = {.name = "spawner", .receive = spawner_receive};
	pc_actor_t *spawner = NULL;
	cr_assert_eq(pc_spawn(rt, &spawner_b, NULL, &spawner), 0);
	parked(rt);
	pc_runtime_stats_t before = stats(rt);
	pc_runtime_guest_t *g = guest_here(rt, 1000000000u);
	send_held(spawner);
	parked(rt);
	pc_runtime_stats_t during = stats(rt);
	cr_assert_eq(during.spawned - before.spawned, 10);
	cr_assert_eq(during.exited - before.exited, 10);
	pc_runtime_guest_free(g);
	pc_runtime_stats_t after = stats(rt);
	cr_assert_eq(after.spawned, during.spawned, "freeing the guest keeps its counts");
	cr_assert_eq(after.exited, during.exited);
	cr_assert_leq(after.actors_live, before.actors_live, "the slots are reclaimed");
	pc_runtime_free(rt);
}

/* ---- many guests at once, with the workers busy or not ---- */

#define RING 64
#define GUESTS 4
#define BURSTS 1500

typedef struct counter {
	atomic_uint_fast64_t got;
	uint64_t seen; /* the actor's own: a data race if two threads ran it */
	pc_actor_t **ring;
	uint32_t index;
} counter_t;

/* A message carries how many hops it has left. */
static int counter_receive(pc_ctx_t *ctx, void *state, pc_msg_t *m)
{
	(void)ctx;
	counter_t *c = state;
	c->seen++;
	atomic_fetch_add(&c->got, 1);
	uint32_t left = *(const uint32_t *)pc_msg_cdata(m);
	if (left > 0) {
		pc_msg_t *n = pc_msg_new(1, sizeof(uint32_t));
		cr_assert_not_null(n);
		uint32_t l = left - 1;
		memcpy(pc_msg_data(n), &l, sizeof(l));
		cr_assert_eq(pc_send(c->ring[(c->index * 7 + left) % RING], n), 0);
	}
	return 0;
}

static const pc_behavior_t counter_b = {.name = "counter", .receive = counter_receive};

typedef struct driver {
	pc_runtime_t *rt;
	pc_actor_t **ring;
	uint64_t seed, sent;
} driver_t;

static uint64_t next_rand(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static void *drive(void *arg)
{
	driver_t *d = arg;
	pc_runtime_guest_t *g = NULL;
	for (int i = 0; i < BURSTS; i++) {
		/* a new guest, with a random budget, every 100 bursts */
		if (i % 100 == 0) {
			pc_runtime_guest_free(g);
			g = guest_here(d->rt, next_rand(&d->seed) % 50000);
		}
		uint32_t k = 1 + (uint32_t)(next_rand(&d->seed) % 8);
		pc_runtime_hold_begin();
		for (uint32_t j = 0; j < k; j++) {
			uint32_t hops = (uint32_t)(next_rand(&d->seed) % 6);
			pc_msg_t *m = pc_msg_new(1, sizeof(uint32_t));
			cr_assert_not_null(m);
			memcpy(pc_msg_data(m), &hops, sizeof(hops));
			cr_assert_eq(pc_send(d->ring[next_rand(&d->seed) % RING], m), 0);
			d->sent += hops + 1;
		}
		pc_runtime_hold_end();
		if (i % 100 == 0)
			sleep_ms(1); /* let the workers park now and then */
	}
	pc_runtime_guest_free(g);
	return NULL;
}

Test(guest, many_guests_lose_and_duplicate_nothing, .timeout = 120)
{
	pc_runtime_t *rt = start_rt(2);
	static counter_t counters[RING];
	pc_actor_t *ring[RING];
	for (uint32_t i = 0; i < RING; i++) {
		counters[i] = (counter_t){.ring = ring, .index = i};
		cr_assert_eq(pc_spawn(rt, &counter_b, &counters[i], &ring[i]), 0);
	}
	pthread_t th[GUESTS];
	driver_t d[GUESTS];
	for (int i = 0; i < GUESTS; i++) {
		d[i] = (driver_t){rt, ring, 0x9E3779B97F4A7C15ull * (uint64_t)(i + 1) + (uint64_t)now_ms(), 0};
		cr_assert_eq(pthread_create(&th[i], NULL, drive, &d[i]), 0);
	}
	uint64_t sent = 0;
	for (int i = 0; i < GUESTS; i++) {
		cr_assert_eq(pthread_join(th[i], NULL), 0);
		sent += d[i].sent;
	}
	parked(rt);
	uint64_t got = 0;
	for (uint32_t i = 0; i < RING; i++) {
		got += atomic_load(&counters[i].got);
		cr_assert_eq(counters[i].seen, atomic_load(&counters[i].got));
	}
	cr_assert_eq(got, sent, "every message handled once: %llu of %llu", (unsigned long long)got,
		     (unsigned long long)sent);
	pc_runtime_free(rt);
}

/* ---- a blocking job's answers ---- */

/* A job's answer, sent as the store answers a commit: in a hold. */
static void answer_in_hold(pc_actor_t *to)
{
	pc_runtime_hold_begin();
	cr_assert_eq(pc_send(to, pc_msg_new(1, 0)), 0);
	pc_runtime_hold_end();
}

static void submit(pc_runtime_t *rt, pc_blocking_fn fn, void *arg)
{
	int rc;
	while ((rc = pc_blocking_submit(rt, fn, NULL, arg, NULL)) == PC_EBUSY)
		sched_yield();
	cr_assert_eq(rc, 0);
}

typedef struct job_seen {
	pc_runtime_t *rt;
	pc_actor_t *answer_to;
	_Atomic(pthread_t) job_on[2];
	_Atomic(pthread_t) answer_on;
	atomic_uint jobs;
} job_seen_t;

static pc_msg_t *job_run(void *arg)
{
	job_seen_t *s = arg;
	uint32_t i = atomic_fetch_add(&s->jobs, 1);
	atomic_store(&s->job_on[i < 2 ? i : 1], pthread_self());
	if (i == 0)
		answer_in_hold(s->answer_to);
	return NULL;
}

/* The answer's handler: notes its thread and submits a second job. */
static int answer_receive(pc_ctx_t *ctx, void *state, pc_msg_t *m)
{
	(void)ctx;
	(void)m;
	job_seen_t *s = state;
	atomic_store(&s->answer_on, pthread_self());
	submit(s->rt, job_run, s);
	return 0;
}

Test(guest, a_jobs_answer_runs_on_its_pool_thread_and_the_next_job_too)
{
	pc_runtime_t *rt = start_rt(2);
	job_seen_t s = {.rt = rt};
	pc_behavior_t answer_b = {.name = "answer", .receive = answer_receive};
	cr_assert_eq(pc_spawn(rt, &answer_b, &s, &s.answer_to), 0);
	parked(rt);
	submit(rt, job_run, &s);
	AWAIT(atomic_load(&s.jobs) == 2, WAIT_MS);
	parked(rt);
	pthread_t pool = atomic_load(&s.job_on[0]);
	cr_assert(pthread_equal(atomic_load(&s.answer_on), pool), "the answer ran on another thread");
	cr_assert(pthread_equal(atomic_load(&s.job_on[1]), pool), "the second job went to another thread");
	pc_runtime_free(rt);
}

/* ---- jobs and answers in chains, many at once ---- */

#define CHAINS 64
#define STEPS 200

typedef struct link {
	pc_runtime_t *rt;
	pc_actor_t *self;
	uint32_t left;           /* the actor's own */
	atomic_uint_fast64_t *done;
} link_t;

static pc_msg_t *link_job(void *arg)
{
	link_t *l = arg;
	atomic_fetch_add(l->done, 1);
	answer_in_hold(l->self);
	return NULL;
}

static int link_receive(pc_ctx_t *ctx, void *state, pc_msg_t *m)
{
	(void)ctx;
	(void)m;
	link_t *l = state;
	if (l->left == 0)
		return 0;
	l->left--;
	submit(l->rt, link_job, l);
	return 0;
}

Test(guest, chains_of_jobs_and_answers_lose_nothing, .timeout = 120)
{
	pc_runtime_t *rt = start_rt(2);
	static link_t links[CHAINS];
	atomic_uint_fast64_t done = 0;
	pc_behavior_t link_b = {.name = "link", .receive = link_receive};
	for (uint32_t i = 0; i < CHAINS; i++) {
		links[i] = (link_t){.rt = rt, .left = STEPS, .done = &done};
		cr_assert_eq(pc_spawn(rt, &link_b, &links[i], &links[i].self), 0);
	}
	/* some start together, some alone: pool threads answer as guests or
	 * hand over as the workers are busy or parked */
	for (uint32_t i = 0; i < CHAINS; i++) {
		cr_assert_eq(pc_send(links[i].self, pc_msg_new(1, 0)), 0);
		if (i % 8 == 0)
			sleep_ms(2);
	}
	AWAIT(atomic_load(&done) == (uint64_t)CHAINS * STEPS, 60000);
	parked(rt);
	for (uint32_t i = 0; i < CHAINS; i++)
		cr_assert_eq(links[i].left, 0);
	cr_assert_eq(atomic_load(&done), (uint64_t)CHAINS * STEPS);
	pc_runtime_free(rt);
}

/* ---- the stop, while guests run ---- */

typedef struct spinner {
	pc_actor_t *self;
	pc_runtime_t *rt;
	atomic_bool in_receive;
	atomic_bool *overlap;
} spinner_t;

static pc_msg_t *spinner_job(void *arg)
{
	spinner_t *sp = arg;
	/* as a store answers: in a hold; a stopped runtime refuses it */
	pc_runtime_hold_begin();
	(void)pc_send(sp->self, pc_msg_new(1, 0));
	pc_runtime_hold_end();
	return NULL;
}

static int spinner_receive(pc_ctx_t *ctx, void *state, pc_msg_t *m)
{
	(void)ctx;
	(void)m;
	spinner_t *sp = state;
	atomic_store(&sp->in_receive, true);
	uint64_t until = now_ms() + 1;
	while (now_ms() < until)
		;
	(void)pc_blocking_submit(sp->rt, spinner_job, NULL, sp, NULL);
	atomic_store(&sp->in_receive, false);
	return 0;
}

/* A stop handler never runs while a turn of its actor is under way. */
static void spinner_stop(pc_ctx_t *ctx, void *state, int reason)
{
	(void)ctx;
	(void)reason;
	spinner_t *sp = state;
	if (atomic_load(&sp->in_receive))
		atomic_store(sp->overlap, true);
}

Test(guest, the_stop_waits_for_a_guests_turn, .timeout = 120)
{
	static spinner_t spinners[8];
	atomic_bool overlap = false;
	pc_behavior_t spinner_b = {.name = "spinner", .receive = spinner_receive, .stop = spinner_stop};
	for (int round = 0; round < 30 && !atomic_load(&overlap); round++) {
		pc_runtime_t *rt = start_rt(2);
		for (int i = 0; i < 8; i++) {
			spinners[i] = (spinner_t){.rt = rt, .overlap = &overlap};
			cr_assert_eq(pc_spawn(rt, &spinner_b, &spinners[i], &spinners[i].self), 0);
			cr_assert_eq(pc_blocking_submit(rt, spinner_job, NULL, &spinners[i], NULL), 0);
		}
		sleep_ms(3 + (unsigned)round % 7);
		pc_runtime_free(rt);
	}
	cr_assert_not(atomic_load(&overlap), "a stop handler ran during its actor's turn");
}
