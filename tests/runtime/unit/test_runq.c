/*
 * Per-worker run queues (runtime/runq.c) and the injection queue
 * (runtime/inject.c), driven directly on the workers of a runtime that is
 * created but never started: the test's threads play the workers. The
 * queues only store pointers, so the "actors" are addresses inside an
 * array, and each carries an "in a queue" flag that the thread obtaining it
 * clears with an exchange: a second hand-out of the same entry is caught on
 * the spot, and a lost entry shows in the final count.
 */
#include <criterion/criterion.h>

#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "test_util.h"
#include "runtime/runtime_internal.h"

/* Fake actors: addresses into this array. */
#define MAX_ITEMS 200000
static char item_base[MAX_ITEMS];

static pc_actor_t *item(uint32_t i)
{
	return (pc_actor_t *)(void *)&item_base[i];
}

static uint32_t index_of(pc_actor_t *a)
{
	return (uint32_t)((char *)(void *)a - item_base);
}

static pc_runtime_t *new_rt(uint32_t workers)
{
	pc_runtime_config_t cfg;
	pc_runtime_config_init(&cfg);
	cfg.workers = workers;
	pc_runtime_t *rt = NULL;
	cr_assert_eq(pc_runtime_new(&cfg, &rt), 0);
	cr_assert_eq(pc_runtime_workers(rt), workers);
	return rt;
}

/* ---- single-threaded ------------------------------------------------- */

Test(runq, fifo_for_the_owner)
{
	pc_runtime_t *rt = new_rt(1);
	pc__worker_t *w = &rt->workers[0];
	cr_assert_null(pc__runq_pop(w));
	cr_assert_eq(pc__runq_len(&w->runq), 0);
	/* Several laps around the ring. */
	uint32_t next_in = 0, next_out = 0;
	for (int lap = 0; lap < 20; lap++) {
		uint32_t n = 50 + (uint32_t)lap * 10; /* <= 256: no overflow */
		for (uint32_t i = 0; i < n; i++)
			pc__runq_push(w, item(next_in++));
		cr_assert_eq(pc__runq_len(&w->runq), n);
		for (uint32_t i = 0; i < n; i++) {
			pc_actor_t *a = pc__runq_pop(w);
			cr_assert_not_null(a);
			cr_assert_eq(index_of(a), next_out, "popped %u, expected %u", index_of(a), next_out);
			next_out++;
		}
		cr_assert_null(pc__runq_pop(w));
	}
	cr_assert_null(pc__inject_pop(rt), "nothing may have overflowed");
	FREE_RUNTIME_CHECKED(rt);
}

Test(runq, overflow_moves_half_to_inject)
{
	pc_runtime_t *rt = new_rt(2);
	pc__worker_t *w = &rt->workers[0];
	for (uint32_t i = 0; i < PC__RUNQ_SIZE; i++)
		pc__runq_push(w, item(i));
	cr_assert_eq(pc__runq_len(&w->runq), PC__RUNQ_SIZE);
	cr_assert_eq(rt->inject_len, 0);
	pc__runq_push(w, item(PC__RUNQ_SIZE)); /* the one that does not fit */
	cr_assert_eq(pc__runq_len(&w->runq), PC__RUNQ_SIZE / 2);
	cr_assert_eq(rt->inject_len, PC__RUNQ_SIZE / 2 + 1);
	/* The oldest half, then the new one, in order, in the inject queue. */
	for (uint32_t i = 0; i < PC__RUNQ_SIZE / 2; i++) {
		pc_actor_t *a = pc__inject_pop(rt);
		cr_assert_not_null(a);
		cr_assert_eq(index_of(a), i);
	}
	pc_actor_t *a = pc__inject_pop(rt);
	cr_assert_not_null(a);
	cr_assert_eq(index_of(a), PC__RUNQ_SIZE);
	cr_assert_null(pc__inject_pop(rt));
	for (uint32_t i = PC__RUNQ_SIZE / 2; i < PC__RUNQ_SIZE; i++) {
		a = pc__runq_pop(w);
		cr_assert_not_null(a);
		cr_assert_eq(index_of(a), i);
	}
	cr_assert_null(pc__runq_pop(w));
	FREE_RUNTIME_CHECKED(rt);
}

/* Thousands of entries through overflow: the injection queue grows and
 * wraps. Checked against a model: a full ring moves its oldest half, then
 * the new entry, to the back of the injection queue. */
Test(runq, inject_grows_and_keeps_order)
{
	pc_runtime_t *rt = new_rt(1);
	pc__worker_t *w = &rt->workers[0];
	uint32_t n = 20000;
	/* The model: a ring (deque) and a FIFO. */
	uint32_t *ring = calloc(n, sizeof(uint32_t)), rh = 0, rt_ = 0;
	uint32_t *inj = calloc(n, sizeof(uint32_t)), ih = 0, it = 0;
	cr_assert(ring && inj);
	uint64_t rng = 12345;
	for (uint32_t i = 0; i < n; i++) {
		pc__runq_push(w, item(i));
		if (rt_ - rh == PC__RUNQ_SIZE) {
			for (uint32_t k = 0; k < PC__RUNQ_SIZE / 2; k++)
				inj[it++] = ring[rh++];
			inj[it++] = i;
		} else {
			ring[rt_++] = i;
		}
		cr_assert_eq(pc__runq_len(&w->runq), rt_ - rh);
		cr_assert_eq(rt->inject_len, it - ih);
		/* Interleave pops of both so the injection ring wraps. */
		uint32_t r = rnd_below(&rng, 8);
		if (r == 0 && ih < it) {
			pc_actor_t *a = pc__inject_pop(rt);
			cr_assert_not_null(a);
			cr_assert_eq(index_of(a), inj[ih], "inject gave %u, expected %u", index_of(a), inj[ih]);
			ih++;
		} else if (r == 1 && rh < rt_) {
			pc_actor_t *a = pc__runq_pop(w);
			cr_assert_not_null(a);
			cr_assert_eq(index_of(a), ring[rh], "runq gave %u, expected %u", index_of(a), ring[rh]);
			rh++;
		}
	}
	cr_assert_gt(it, n / 2, "the overflow path was hardly taken");
	for (; ih < it; ih++) {
		pc_actor_t *a = pc__inject_pop(rt);
		cr_assert_not_null(a);
		cr_assert_eq(index_of(a), inj[ih]);
	}
	cr_assert_null(pc__inject_pop(rt));
	for (; rh < rt_; rh++) {
		pc_actor_t *a = pc__runq_pop(w);
		cr_assert_not_null(a);
		cr_assert_eq(index_of(a), ring[rh]);
	}
	cr_assert_null(pc__runq_pop(w));
	free(ring);
	free(inj);
	FREE_RUNTIME_CHECKED(rt);
}

Test(runq, steal_takes_half_and_runs_the_newest)
{
	pc_runtime_t *rt = new_rt(2);
	pc__worker_t *v = &rt->workers[0], *t = &rt->workers[1];
	cr_assert_null(pc__runq_steal(t, v), "stealing from an empty queue");
	for (uint32_t i = 0; i < 10; i++)
		pc__runq_push(v, item(i));
	pc_actor_t *a = pc__runq_steal(t, v);
	cr_assert_not_null(a);
	/* Half of 10 = items 0..4; the newest of those runs at once. */
	cr_assert_eq(index_of(a), 4);
	cr_assert_eq(pc__runq_len(&v->runq), 5);
	cr_assert_eq(pc__runq_len(&t->runq), 4);
	for (uint32_t i = 0; i < 4; i++) {
		a = pc__runq_pop(t);
		cr_assert_not_null(a);
		cr_assert_eq(index_of(a), i);
	}
	cr_assert_null(pc__runq_pop(t));
	/* Odd counts round up: 5 -> 3 stolen. */
	a = pc__runq_steal(t, v);
	cr_assert_not_null(a);
	cr_assert_eq(index_of(a), 7);
	cr_assert_eq(pc__runq_len(&t->runq), 2);
	cr_assert_eq(pc__runq_len(&v->runq), 2);
	/* One left after popping one: a steal of one item returns it and
	 * publishes nothing. */
	cr_assert_eq(index_of(pc__runq_pop(v)), 8);
	a = pc__runq_steal(t, v);
	cr_assert_eq(index_of(a), 9);
	cr_assert_eq(pc__runq_len(&t->runq), 2);
	cr_assert_eq(pc__runq_len(&v->runq), 0);
	FREE_RUNTIME_CHECKED(rt);
}

Test(runq, steal_bounded_by_thief_room)
{
	pc_runtime_t *rt = new_rt(2);
	pc__worker_t *v = &rt->workers[0], *t = &rt->workers[1];
	for (uint32_t i = 0; i < PC__RUNQ_SIZE - 2; i++)
		pc__runq_push(t, item(1000 + i));
	for (uint32_t i = 0; i < 100; i++)
		pc__runq_push(v, item(i));
	pc_actor_t *a = pc__runq_steal(t, v);
	cr_assert_not_null(a);
	cr_assert_eq(pc__runq_len(&v->runq), 98, "only the thief's room (2) may be taken");
	cr_assert_eq(pc__runq_len(&t->runq), PC__RUNQ_SIZE - 1);
	cr_assert_eq(index_of(a), 1);
	pc__runq_push(t, item(5000));
	cr_assert_eq(pc__runq_len(&t->runq), PC__RUNQ_SIZE);
	/* A full thief takes nothing. */
	cr_assert_null(pc__runq_steal(t, v));
	cr_assert_eq(pc__runq_len(&v->runq), 98);
	cr_assert_null(pc__inject_pop(rt));
	FREE_RUNTIME_CHECKED(rt);
}

/* ---- concurrent: owners, thieves, overflow, injection ----------------- */

#define NTHREADS 4

typedef struct conc {
	pc_runtime_t *rt;
	uint32_t nitems;
	uint8_t *queued;    /* 1 while the item sits in some queue */
	uint8_t *hops;      /* re-pushes left before it is consumed */
	uint32_t *consumed; /* per item */
	uint64_t nconsumed;
	uint64_t from_inject, from_steal, from_pop, overflow_pushes;
	uint32_t go;
	uint32_t producer_done;
	uint64_t seed;
} conc_t;

typedef struct conc_arg {
	conc_t *c;
	uint32_t id;
} conc_arg_t;

/* The thread obtained `a` (it is now the only one that may have it). */
static void obtained(conc_t *c, pc__worker_t *w, pc_actor_t *a, uint64_t *rng)
{
	uint32_t k = index_of(a);
	if (k >= c->nitems) {
		CHECK(false, "foreign entry %p", (void *)a);
		return;
	}
	uint8_t was = __atomic_exchange_n(&c->queued[k], 0, __ATOMIC_ACQ_REL);
	CHECK(was == 1, "item %u handed out twice (or never queued)", k);
	if (c->hops[k] > 0) {
		/* "Reschedule" it on our own queue, sometimes in a burst that
		 * overflows. */
		c->hops[k]--;
		__atomic_store_n(&c->queued[k], 1, __ATOMIC_RELEASE);
		pc__runq_push(w, a);
		(void)rng;
		return;
	}
	c->consumed[k]++;
	__atomic_fetch_add(&c->nconsumed, 1, __ATOMIC_ACQ_REL);
}

static bool all_consumed(conc_t *c)
{
	return __atomic_load_n(&c->nconsumed, __ATOMIC_ACQUIRE) == c->nitems;
}

/* One step of a worker-like thread: own queue, maybe inject, maybe steal. */
static bool worker_step(conc_t *c, uint32_t id, uint64_t *rng)
{
	pc__worker_t *w = &c->rt->workers[id];
	pc_actor_t *a;
	uint32_t r = rnd_below(rng, 100);
	if (r < 8 && (a = pc__inject_pop(c->rt))) {
		__atomic_fetch_add(&c->from_inject, 1, __ATOMIC_RELAXED);
		obtained(c, w, a, rng);
		return true;
	}
	if (r < 60 && (a = pc__runq_pop(w))) {
		__atomic_fetch_add(&c->from_pop, 1, __ATOMIC_RELAXED);
		obtained(c, w, a, rng);
		return true;
	}
	uint32_t v = rnd_below(rng, NTHREADS);
	if (v != id && (a = pc__runq_steal(w, &c->rt->workers[v]))) {
		__atomic_fetch_add(&c->from_steal, 1, __ATOMIC_RELAXED);
		obtained(c, w, a, rng);
		return true;
	}
	if ((a = pc__runq_pop(w))) {
		__atomic_fetch_add(&c->from_pop, 1, __ATOMIC_RELAXED);
		obtained(c, w, a, rng);
		return true;
	}
	if ((a = pc__inject_pop(c->rt))) {
		__atomic_fetch_add(&c->from_inject, 1, __ATOMIC_RELAXED);
		obtained(c, w, a, rng);
		return true;
	}
	return false;
}

static void *conc_main(void *arg)
{
	conc_arg_t *ca = arg;
	conc_t *c = ca->c;
	uint64_t rng = c->seed ^ (0x9E3779B97F4A7C15ull * (ca->id + 7));
	while (!__atomic_load_n(&c->go, __ATOMIC_ACQUIRE))
		sched_yield();
	pc__worker_t *w = &c->rt->workers[ca->id];
	if (ca->id == 0) {
		/* The producer: pushes every item in bursts, some longer than
		 * the ring, popping a few in between. */
		uint32_t i = 0;
		while (i < c->nitems) {
			uint32_t burst = 1 + rnd_below(&rng, rnd_below(&rng, 4) == 0 ? 600 : 40);
			for (uint32_t k = 0; k < burst && i < c->nitems; k++, i++) {
				if (pc__runq_len(&w->runq) == PC__RUNQ_SIZE)
					c->overflow_pushes++;
				__atomic_store_n(&c->queued[i], 1, __ATOMIC_RELEASE);
				pc__runq_push(w, item(i));
			}
			uint32_t pops = rnd_below(&rng, 8);
			for (uint32_t k = 0; k < pops; k++)
				worker_step(c, 0, &rng);
			if (rnd_below(&rng, 16) == 0)
				sched_yield();
		}
		__atomic_store_n(&c->producer_done, 1, __ATOMIC_RELEASE);
	}
	uint32_t idle = 0;
	while (!all_consumed(c)) {
		if (worker_step(c, ca->id, &rng)) {
			idle = 0;
		} else if (++idle % 64 == 0) {
			sched_yield();
		}
	}
	return NULL;
}

static uint64_t run_conc(uint64_t seed, uint32_t nitems, uint32_t max_hops)
{
	failures = 0;
	conc_t c;
	memset(&c, 0, sizeof(c));
	c.rt = new_rt(NTHREADS);
	c.nitems = nitems;
	c.seed = seed;
	c.queued = calloc(nitems, 1);
	c.hops = calloc(nitems, 1);
	c.consumed = calloc(nitems, sizeof(uint32_t));
	cr_assert(c.queued && c.hops && c.consumed);
	uint64_t rng = seed;
	uint64_t expect_obtains = nitems;
	for (uint32_t i = 0; i < nitems; i++) {
		c.hops[i] = (uint8_t)rnd_below(&rng, max_hops + 1);
		expect_obtains += c.hops[i];
	}
	pthread_t t[NTHREADS];
	conc_arg_t args[NTHREADS];
	for (uint32_t i = 0; i < NTHREADS; i++) {
		args[i] = (conc_arg_t){&c, i};
		cr_assert_eq(pthread_create(&t[i], NULL, conc_main, &args[i]), 0);
	}
	__atomic_store_n(&c.go, 1, __ATOMIC_RELEASE);
	for (uint32_t i = 0; i < NTHREADS; i++)
		pthread_join(t[i], NULL);
	assert_no_failures();
	for (uint32_t i = 0; i < nitems; i++)
		cr_assert_eq(c.consumed[i], 1, "item %u consumed %u times (PINCER_TEST_SEED=0x%" PRIx64 ")", i,
			     c.consumed[i], top_seed);
	cr_assert_eq(c.from_pop + c.from_steal + c.from_inject, expect_obtains);
	/* Everything is accounted for: every queue is empty. */
	for (uint32_t i = 0; i < NTHREADS; i++)
		cr_assert_eq(pc__runq_len(&c.rt->workers[i].runq), 0);
	cr_assert_null(pc__inject_pop(c.rt));
	fprintf(stderr, "runq: %u items, %" PRIu64 " pops, %" PRIu64 " steals, %" PRIu64 " from inject, %" PRIu64
			" overflowing pushes\n",
		nitems, c.from_pop, c.from_steal, c.from_inject, c.overflow_pushes);
	free(c.queued);
	free(c.hops);
	free(c.consumed);
	pc_runtime_free(c.rt);
	return c.from_steal;
}

Test(runq, concurrent_owner_thieves_exactly_once)
{
	uint64_t seed = test_seed();
	uint64_t rng = seed;
	uint64_t steals = 0;
	for (int round = 0; round < 4; round++)
		steals += run_conc(xs(&rng) | 1, 30000, 0);
	cr_assert_gt(steals, 0, "no steal ever succeeded");
}

Test(runq, concurrent_with_reschedules_exactly_once)
{
	uint64_t seed = test_seed();
	uint64_t rng = seed;
	uint64_t steals = 0;
	for (int round = 0; round < 4; round++)
		steals += run_conc(xs(&rng) | 1, 20000, 3);
	cr_assert_gt(steals, 0, "no steal ever succeeded");
}

/* The overflow path under contention, made certain: the producer fills
 * its ring far beyond 256 while thieves are held back, then everyone
 * drains concurrently (thieves, owner, inject). */
typedef struct ovf {
	pc_runtime_t *rt;
	uint32_t n;
	uint8_t *queued;
	uint64_t got;
	uint32_t go;
} ovf_t;

typedef struct ovf_arg {
	ovf_t *o;
	uint32_t id;
	uint64_t seed;
} ovf_arg_t;

static void *ovf_main(void *arg)
{
	ovf_arg_t *oa = arg;
	ovf_t *o = oa->o;
	uint64_t rng = oa->seed;
	pc__worker_t *w = &o->rt->workers[oa->id];
	while (!__atomic_load_n(&o->go, __ATOMIC_ACQUIRE))
		sched_yield();
	while (__atomic_load_n(&o->got, __ATOMIC_ACQUIRE) < o->n) {
		pc_actor_t *a = pc__runq_pop(w);
		if (!a) {
			uint32_t v = rnd_below(&rng, NTHREADS);
			if (v != oa->id)
				a = pc__runq_steal(w, &o->rt->workers[v]);
		}
		if (!a)
			a = pc__inject_pop(o->rt);
		if (!a) {
			sched_yield();
			continue;
		}
		uint32_t k = index_of(a);
		CHECK(k < o->n, "foreign entry");
		if (k >= o->n)
			continue;
		uint8_t was = __atomic_exchange_n(&o->queued[k], 0, __ATOMIC_ACQ_REL);
		CHECK(was == 1, "item %u handed out twice", k);
		__atomic_fetch_add(&o->got, 1, __ATOMIC_ACQ_REL);
	}
	return NULL;
}

Test(runq, overflow_then_concurrent_drain)
{
	failures = 0;
	uint64_t seed = test_seed();
	for (int round = 0; round < 5; round++) {
		ovf_t o;
		memset(&o, 0, sizeof(o));
		o.rt = new_rt(NTHREADS);
		o.n = 2000 + rnd_below(&seed, 3000);
		o.queued = calloc(o.n, 1);
		cr_assert_not_null(o.queued);
		pthread_t t[NTHREADS];
		ovf_arg_t args[NTHREADS];
		for (uint32_t i = 0; i < NTHREADS; i++) {
			args[i] = (ovf_arg_t){&o, i, xs(&seed) | 1};
			cr_assert_eq(pthread_create(&t[i], NULL, ovf_main, &args[i]), 0);
		}
		/* Worker 0's queue is pushed by this thread while nobody runs;
		 * after go, only thread 0 touches its tail (by popping). */
		for (uint32_t i = 0; i < o.n; i++) {
			o.queued[i] = 1;
			pc__runq_push(&o.rt->workers[0], item(i));
		}
		cr_assert_leq(pc__runq_len(&o.rt->workers[0].runq), PC__RUNQ_SIZE);
		cr_assert_gt(o.rt->inject_len, o.n - PC__RUNQ_SIZE - 1, "overflow must have moved entries to inject");
		__atomic_store_n(&o.go, 1, __ATOMIC_RELEASE);
		for (uint32_t i = 0; i < NTHREADS; i++)
			pthread_join(t[i], NULL);
		assert_no_failures();
		cr_assert_eq(o.got, o.n);
		for (uint32_t i = 0; i < o.n; i++)
			cr_assert_eq(o.queued[i], 0, "item %u never obtained", i);
		free(o.queued);
		pc_runtime_free(o.rt);
	}
}
