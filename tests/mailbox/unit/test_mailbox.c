/*
 * The mailbox (pc__mailbox_*) used directly: single-threaded semantics, then
 * many producer threads against one consumer thread that follows the
 * scheduling protocol of the runtime:
 *
 *   a push that returns true "schedules" the consumer (it must not already
 *   be scheduled); the consumer drains (in batches), and only when it
 *   re-arms the mailbox with mark_empty does it give up the schedule.
 *
 * Every message carries (producer, sequence): each one must arrive exactly
 * once, in per-producer FIFO order. Counts and yields come from a seeded
 * PRNG; the seed is printed on failure (set PINCER_TEST_SEED to replay).
 *
 * Assertions made on other threads are recorded and checked on the test
 * thread (Criterion's cr_assert must not longjmp from another thread).
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
#include "mailbox/mailbox.h"
#include "mailbox/msg_pool.h"

/* Criterion does not fail a test for leaks LSan reports at exit, so the
 * tests that promise "no leak" ask LSan themselves. */

/* ---- helpers ---------------------------------------------------------- */

/* Failures seen on helper threads; the first message is kept. */
static void assert_no_failures_in_run(uint64_t seed)
{
	uint32_t f = __atomic_load_n(&failures, __ATOMIC_ACQUIRE);
	cr_assert_eq(f, 0, "%u failure(s) on helper threads, first: %s (run seed 0x%" PRIx64 ", PINCER_TEST_SEED=0x%" PRIx64 ")", f,
		     first_failure, seed, top_seed);
}

typedef struct payload {
	uint32_t producer;
	uint32_t seq;
} payload_t;

static pc_msg_t *make_msg(uint32_t producer, uint32_t seq)
{
	pc_msg_t *m = pc_msg_new(7, sizeof(payload_t));
	cr_assert_not_null(m);
	payload_t *p = pc_msg_data(m);
	p->producer = producer;
	p->seq = seq;
	return m;
}

static pc_msg_t *new_stub(void)
{
	pc_msg_t *stub = pc_msg_new(0, 0);
	cr_assert_not_null(stub);
	return stub;
}

/* ---- single-threaded semantics ---------------------------------------- */

Test(mailbox, starts_empty_and_unscheduled)
{
	pc__mailbox_t q;
	pc__mailbox_init(&q, new_stub());
	cr_assert(pc__mailbox_peek_empty(&q));
	cr_assert_null(pc__mailbox_pop(&q));
	cr_assert(pc__mailbox_push(&q, make_msg(0, 0)), "first push into an idle mailbox must schedule");
	pc_msg_t *m = pc__mailbox_pop(&q);
	cr_assert_not_null(m);
	cr_assert_eq(((payload_t *)pc_msg_data(m))->seq, 0);
	cr_assert(pc__mailbox_mark_empty(&q));
	pc__mailbox_destroy(&q);
}

Test(mailbox, fifo_and_transitions)
{
	pc__mailbox_t q;
	pc__mailbox_init(&q, new_stub());
	for (uint32_t round = 0; round < 50; round++) {
		uint32_t n = 1 + round * 3;
		for (uint32_t i = 0; i < n; i++) {
			bool t = pc__mailbox_push(&q, make_msg(0, i));
			cr_assert_eq(t, i == 0, "round %u push %u returned %d", round, i, t);
		}
		cr_assert(!pc__mailbox_peek_empty(&q));
		/* Drain half, then re-arming must fail: messages remain. */
		uint32_t i = 0;
		for (; i < n / 2; i++) {
			pc_msg_t *m = pc__mailbox_pop(&q);
			cr_assert_not_null(m);
			cr_assert_eq(((payload_t *)pc_msg_data(m))->seq, i);
		}
		if (i < n)
			cr_assert(!pc__mailbox_mark_empty(&q), "mark_empty with %u messages left", n - i);
		/* A push while still scheduled does not report a transition. */
		cr_assert(!pc__mailbox_push(&q, make_msg(0, n)));
		for (; i <= n; i++) {
			pc_msg_t *m = pc__mailbox_pop(&q);
			cr_assert_not_null(m, "message %u of %u missing", i, n + 1);
			cr_assert_eq(((payload_t *)pc_msg_data(m))->seq, i);
		}
		cr_assert_null(pc__mailbox_pop(&q));
		cr_assert(pc__mailbox_peek_empty(&q));
		cr_assert(pc__mailbox_mark_empty(&q), "drained mailbox must re-arm");
	}
	pc__mailbox_destroy(&q);
}

/* A push between the consumer's last pop and its mark_empty keeps the
 * consumer scheduled and is then visible. */
Test(mailbox, push_after_last_pop_defeats_mark_empty)
{
	pc__mailbox_t q;
	pc__mailbox_init(&q, new_stub());
	cr_assert(pc__mailbox_push(&q, make_msg(0, 0)));
	cr_assert_not_null(pc__mailbox_pop(&q));
	cr_assert_null(pc__mailbox_pop(&q));
	cr_assert(!pc__mailbox_push(&q, make_msg(0, 1)));
	cr_assert(!pc__mailbox_mark_empty(&q));
	pc_msg_t *m = pc__mailbox_pop(&q);
	cr_assert_not_null(m);
	cr_assert_eq(((payload_t *)pc_msg_data(m))->seq, 1);
	cr_assert(pc__mailbox_mark_empty(&q));
	cr_assert(pc__mailbox_push(&q, make_msg(0, 2)));
	cr_assert_not_null(pc__mailbox_pop(&q));
	cr_assert(pc__mailbox_mark_empty(&q));
	pc__mailbox_destroy(&q);
}

/* Embedded messages (the actor's stub) are never freed by the mailbox;
 * the stub can go round again once it is out of the queue. */
Test(mailbox, embedded_stub_reused)
{
	pc_msg_t stub;
	memset(&stub, 0, sizeof(stub));
	stub.flags = PC_MSGF_EMBEDDED;
	stub.size_class = PC_MSG_CLASS_HEAP;
	pc__mailbox_t q;
	pc__mailbox_init(&q, &stub);
	cr_assert(pc__mailbox_push(&q, make_msg(0, 0)));
	cr_assert_not_null(pc__mailbox_pop(&q)); /* retires the embedded stub */
	stub.type = 99;
	cr_assert(!pc__mailbox_push(&q, &stub));
	pc_msg_t *m = pc__mailbox_pop(&q);
	cr_assert_eq(m, &stub);
	cr_assert_eq(m->type, 99);
	cr_assert(pc__mailbox_mark_empty(&q));
	pc__mailbox_destroy(&q); /* must not free &stub (ASan would say so) */
}

/* ---- many producers, one consumer ------------------------------------- */

typedef struct mpsc {
	pc__mailbox_t q;
	uint32_t nproducers;
	uint32_t *count;    /* messages per producer */
	uint64_t seed;
	uint32_t started;   /* producers release on this */
	uint32_t scheduled; /* 1 while the consumer holds the schedule */
	uint32_t producers_done;
	uint64_t push_true; /* pushes that reported a transition */
	uint64_t rearmed;   /* successful mark_empty calls */
	uint64_t received;
	uint32_t *expect;   /* next sequence per producer (consumer only) */
	uint32_t max_batch;
	bool consumer_cache;
} mpsc_t;

typedef struct producer_arg {
	mpsc_t *s;
	uint32_t id;
} producer_arg_t;

static void *producer_main(void *arg)
{
	producer_arg_t *pa = arg;
	mpsc_t *s = pa->s;
	uint64_t rng = s->seed ^ (0xA24BAED4963EE407ull * (pa->id + 1));
	while (!__atomic_load_n(&s->started, __ATOMIC_ACQUIRE))
		sched_yield();
	uint32_t n = s->count[pa->id];
	for (uint32_t i = 0; i < n; i++) {
		pc_msg_t *m = pc_msg_new(7, sizeof(payload_t));
		CHECK(m != NULL, "pc_msg_new failed");
		if (!m)
			return NULL;
		payload_t *p = pc_msg_data(m);
		p->producer = pa->id;
		p->seq = i;
		if (pc__mailbox_push(&s->q, m)) {
			__atomic_fetch_add(&s->push_true, 1, __ATOMIC_RELAXED);
			uint32_t was = __atomic_exchange_n(&s->scheduled, 1, __ATOMIC_ACQ_REL);
			CHECK(was == 0, "producer %u seq %u: push returned true while the consumer was scheduled",
			      pa->id, i);
		}
		uint32_t r = rnd_below(&rng, 64);
		if (r == 0)
			sched_yield();
		else if (r < 4)
			for (uint32_t k = rnd_below(&rng, 200); k > 0; k--)
				__asm__ __volatile__("" ::: "memory");
	}
	return NULL;
}

static void consume_one(mpsc_t *s, pc_msg_t *m)
{
	const payload_t *p = pc_msg_cdata(m);
	CHECK(m->type == 7 && m->size == sizeof(payload_t), "corrupt header: type %u size %u", m->type, m->size);
	if (p->producer >= s->nproducers) {
		CHECK(false, "bad producer id %u", p->producer);
		return;
	}
	CHECK(p->seq == s->expect[p->producer], "producer %u: got seq %u, expected %u (loss, duplicate or reorder)",
	      p->producer, p->seq, s->expect[p->producer]);
	s->expect[p->producer] = p->seq + 1;
	__atomic_fetch_add(&s->received, 1, __ATOMIC_RELAXED);
}

static void *consumer_main(void *arg)
{
	mpsc_t *s = arg;
	pc__msg_cache_t cache;
	if (s->consumer_cache)
		pc__msg_cache_attach(&cache);
	uint64_t rng = s->seed ^ 0xC0FFEEull;
	for (;;) {
		/* Wait to be scheduled (or for the end). `producers_done` first:
		 * once it is set, every push and its "schedule" are visible. */
		bool done = __atomic_load_n(&s->producers_done, __ATOMIC_ACQUIRE);
		if (!__atomic_load_n(&s->scheduled, __ATOMIC_ACQUIRE)) {
			if (done)
				break;
			sched_yield();
			continue;
		}
		/* One "turn": up to a batch of messages. */
		uint32_t batch = 1 + rnd_below(&rng, s->max_batch);
		uint32_t n = 0;
		pc_msg_t *m;
		while (n < batch && (m = pc__mailbox_pop(&s->q))) {
			consume_one(s, m);
			n++;
		}
		if (n == batch)
			continue; /* full batch: still scheduled, run again */
		if (rnd_below(&rng, 8) == 0)
			sched_yield(); /* widen the pop -> mark_empty window */
		/* Give up the schedule, then re-arm. Until the CAS succeeds no
		 * push can report a transition, so clearing first is safe. */
		__atomic_store_n(&s->scheduled, 0, __ATOMIC_RELEASE);
		if (pc__mailbox_mark_empty(&s->q)) {
			__atomic_fetch_add(&s->rearmed, 1, __ATOMIC_RELAXED);
		} else {
			uint32_t was = __atomic_exchange_n(&s->scheduled, 1, __ATOMIC_ACQ_REL);
			CHECK(was == 0, "consumer scheduled twice: a push reported a transition while "
					"mark_empty had failed");
		}
	}
	/* Everything is in: the mailbox must be drained and re-armed. */
	CHECK(pc__mailbox_peek_empty(&s->q), "messages left after the end");
	CHECK(pc__mailbox_pop(&s->q) == NULL, "message popped after the end");
	if (s->consumer_cache)
		pc__msg_cache_detach();
	return NULL;
}

static void run_mpsc(uint64_t seed, uint32_t nproducers, uint32_t max_msgs, uint32_t max_batch, bool cache)
{
	failures = 0; /* the TSan runner runs every test in one process */
	mpsc_t s;
	memset(&s, 0, sizeof(s));
	s.seed = seed;
	s.nproducers = nproducers;
	s.max_batch = max_batch;
	s.consumer_cache = cache;
	s.count = calloc(nproducers, sizeof(uint32_t));
	s.expect = calloc(nproducers, sizeof(uint32_t));
	cr_assert(s.count && s.expect);
	uint64_t rng = seed;
	uint64_t total = 0;
	for (uint32_t i = 0; i < nproducers; i++) {
		s.count[i] = max_msgs / 4 + rnd_below(&rng, max_msgs - max_msgs / 4 + 1);
		total += s.count[i];
	}
	pc__mailbox_init(&s.q, new_stub());

	pthread_t cons, *prod = calloc(nproducers, sizeof(pthread_t));
	producer_arg_t *args = calloc(nproducers, sizeof(producer_arg_t));
	cr_assert(prod && args);
	cr_assert_eq(pthread_create(&cons, NULL, consumer_main, &s), 0);
	for (uint32_t i = 0; i < nproducers; i++) {
		args[i] = (producer_arg_t){&s, i};
		cr_assert_eq(pthread_create(&prod[i], NULL, producer_main, &args[i]), 0);
	}
	__atomic_store_n(&s.started, 1, __ATOMIC_RELEASE);
	for (uint32_t i = 0; i < nproducers; i++)
		pthread_join(prod[i], NULL);
	__atomic_store_n(&s.producers_done, 1, __ATOMIC_RELEASE);
	pthread_join(cons, NULL);

	assert_no_failures_in_run(seed);
	cr_assert_eq(s.received, total, "received %" PRIu64 " of %" PRIu64 " (seed 0x%" PRIx64 ")", s.received,
		     total, seed);
	for (uint32_t i = 0; i < nproducers; i++)
		cr_assert_eq(s.expect[i], s.count[i], "producer %u: %u of %u delivered (seed 0x%" PRIx64 ")", i,
			     s.expect[i], s.count[i], seed);
	/* Every transition reported by a push was re-armed by the consumer
	 * (the initial arming is matched by the final one). */
	cr_assert_eq(s.push_true, s.rearmed, "%" PRIu64 " scheduling pushes but %" PRIu64 " re-arms (seed 0x%" PRIx64 ")",
		     s.push_true, s.rearmed, seed);
	cr_assert_geq(s.push_true, 1);
	/* The final state is idle: the next push must report a transition. */
	cr_assert(pc__mailbox_push(&s.q, make_msg(0, 0)));
	cr_assert_not_null(pc__mailbox_pop(&s.q));
	pc__mailbox_destroy(&s.q);
	free(prod);
	free(args);
	free(s.count);
	free(s.expect);
	pc__msg_depot_trim(0);
}

Test(mailbox, mpsc_exactly_once_fifo_small_batches)
{
	uint64_t seed = test_seed();
	uint64_t rng = seed;
	for (int round = 0; round < 8; round++) {
		uint32_t np = 2 + rnd_below(&rng, 7);
		run_mpsc(xs(&rng) | 1, np, 20000, 4, round & 1);
	}
	ASSERT_NO_LEAKS();
}

Test(mailbox, mpsc_exactly_once_fifo_large_batches)
{
	uint64_t seed = test_seed();
	uint64_t rng = seed;
	for (int round = 0; round < 6; round++) {
		uint32_t np = 4 + rnd_below(&rng, 5);
		run_mpsc(xs(&rng) | 1, np, 40000, 128, round & 1);
	}
	ASSERT_NO_LEAKS();
}

/* Bursty: one message per producer per round, many rounds, so the mailbox
 * keeps going idle and the transition path is exercised most. */
Test(mailbox, mpsc_many_transitions)
{
	uint64_t seed = test_seed();
	uint64_t rng = seed;
	for (int round = 0; round < 300; round++)
		run_mpsc(xs(&rng) | 1, 2 + rnd_below(&rng, 3), 40, 1 + rnd_below(&rng, 3), round & 1);
	ASSERT_NO_LEAKS();
}
