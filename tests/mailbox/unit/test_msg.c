/*
 * The message pool (mailbox/msg.c): size classes, header initialisation,
 * clone, per-thread caches and the depot behind them, and messages that
 * cross threads (allocated on one, freed on another) between threads with
 * a cache (worker-like) and without (plain threads). Leaks are left to
 * ASan/LSan: every test returns caches and trims the depot at the end.
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

#define HDR sizeof(pc_msg_t)

/* The size class a payload must land in: 48, 64, 128, 256 bytes in all. */
static unsigned expected_class(size_t payload)
{
	size_t total = HDR + payload;
	if (total <= 48)
		return 0;
	if (total <= 64)
		return 1;
	if (total <= 128)
		return 2;
	if (total <= 256)
		return 3;
	return PC_MSG_CLASS_HEAP;
}

static uint8_t pattern(uint64_t key, size_t i)
{
	return (uint8_t)((key * 131u + i * 7u) ^ (key >> 8));
}

static void fill(pc_msg_t *m, uint64_t key)
{
	uint8_t *p = pc_msg_data(m);
	for (size_t i = 0; i < m->size; i++)
		p[i] = pattern(key, i);
}

static bool verify(const pc_msg_t *m, uint64_t key)
{
	const uint8_t *p = pc_msg_cdata(m);
	for (size_t i = 0; i < m->size; i++)
		if (p[i] != pattern(key, i))
			return false;
	return true;
}

/* Payload sizes around every class boundary, and beyond. */
static const size_t sizes[] = {
	0, 1, 7, 8, 9, 16, 23, 24, 25, 40, 87, 88, 89, 120, 200, 215, 216, 217, 218, 255, 256, 1000, 4096, 65536,
};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

static void check_new(size_t payload, uint32_t type)
{
	pc_msg_t *m = pc_msg_new(type, payload);
	cr_assert_not_null(m, "pc_msg_new(%zu)", payload);
	cr_assert_eq(m->type, type);
	cr_assert_eq(m->size, payload, "size %u for payload %zu", m->size, payload);
	cr_assert_eq(m->size_class, expected_class(payload), "payload %zu: class %u, expected %u", payload,
		     m->size_class, expected_class(payload));
	cr_assert_null(m->next);
	cr_assert_null(m->reply_to);
	cr_assert_eq(m->corr, 0);
	cr_assert_eq(m->flags, 0);
	cr_assert_eq(((uintptr_t)pc_msg_data(m)) % 8, 0, "payload not 8-byte aligned");
	/* The whole payload is usable (ASan catches a short block). */
	fill(m, payload ^ type);
	cr_assert(verify(m, payload ^ type));
	pc_msg_free(m);
}

Test(msg, header_sizes_and_classes)
{
	cr_assert_eq(HDR, 40, "header layout changed: class boundaries below assume 40 bytes");
	cr_assert_eq(PC_MSG_SMALL_PAYLOAD, 256 - HDR);
	for (size_t i = 0; i < NSIZES; i++)
		check_new(sizes[i], (uint32_t)i + 1);
	/* Same again with a cache attached: blocks now come from the pool. */
	pc__msg_cache_t cache;
	pc__msg_cache_attach(&cache);
	for (int round = 0; round < 3; round++)
		for (size_t i = 0; i < NSIZES; i++)
			check_new(sizes[i], (uint32_t)i + 100);
	pc__msg_cache_detach();
	pc__msg_depot_trim(0);
	ASSERT_NO_LEAKS();
}

Test(msg, large_payload)
{
	size_t big = (size_t)8 << 20;
	pc_msg_t *m = pc_msg_new(5, big);
	cr_assert_not_null(m);
	cr_assert_eq(m->size, big);
	cr_assert_eq(m->size_class, PC_MSG_CLASS_HEAP);
	uint8_t *p = pc_msg_data(m);
	p[0] = 1;
	p[big - 1] = 2;
	pc_msg_t *c = pc__msg_clone(m);
	cr_assert_not_null(c);
	cr_assert_eq(c->size, big);
	cr_assert_eq(((uint8_t *)pc_msg_data(c))[big - 1], 2);
	pc_msg_free(c);
	pc_msg_free(m);
	/* Freed on a thread with a cache: heap blocks never enter the pool. */
	pc__msg_cache_t cache;
	pc__msg_cache_attach(&cache);
	m = pc_msg_new(5, 100000);
	cr_assert_not_null(m);
	cr_assert_eq(m->size_class, PC_MSG_CLASS_HEAP);
	pc_msg_free(m);
	pc__msg_cache_detach();
	pc__msg_depot_trim(0);
	ASSERT_NO_LEAKS();
}

Test(msg, too_large_is_refused)
{
	if (sizeof(size_t) > sizeof(uint32_t))
		cr_assert_null(pc_msg_new(1, (size_t)PC_MSG_MAX_PAYLOAD + 1));
	pc_msg_free(NULL); /* no-op */
}

Test(msg, embedded_is_never_freed)
{
	pc_msg_t m;
	memset(&m, 0, sizeof(m));
	m.flags = PC_MSGF_EMBEDDED;
	m.size_class = 0; /* even if it claims a pool class */
	pc_msg_free(&m);
	pc__msg_cache_t cache;
	pc__msg_cache_attach(&cache);
	pc_msg_free(&m);
	/* A cache that took it would hand it out again. */
	for (int i = 0; i < 4; i++) {
		pc_msg_t *n = pc_msg_new(0, 0);
		cr_assert_neq(n, &m);
		pc_msg_free(n);
	}
	pc__msg_cache_detach();
	pc__msg_depot_trim(0);
	ASSERT_NO_LEAKS();
}

Test(msg, clone_copies_type_corr_payload_only)
{
	for (size_t i = 0; i < NSIZES; i++) {
		pc_msg_t *m = pc_msg_new(42, sizes[i]);
		cr_assert_not_null(m);
		fill(m, i);
		m->corr = 0xDEADBEEFull + i;
		m->reply_to = (struct pc_actor *)0x1000; /* never dereferenced */
		m->flags = PC_MSGF_REPLY_REF;
		pc_msg_t *c = pc__msg_clone(m);
		cr_assert_not_null(c);
		cr_assert_neq(c, m);
		cr_assert_eq(c->type, 42);
		cr_assert_eq(c->size, sizes[i]);
		cr_assert_eq(c->corr, 0xDEADBEEFull + i);
		cr_assert_null(c->reply_to, "a clone must not carry the reply reference");
		cr_assert_eq(c->flags, 0);
		cr_assert_eq(c->size_class, expected_class(sizes[i]));
		cr_assert(verify(c, i));
		m->flags = 0;
		m->reply_to = NULL;
		pc_msg_free(m);
		pc_msg_free(c);
	}
}

/* A thread with a cache reuses what it freed (LIFO), per class. */
Test(msg, cache_reuses_blocks)
{
	pc__msg_cache_t cache;
	pc__msg_cache_attach(&cache);
	for (unsigned cls = 0; cls < PC_MSG_CLASSES; cls++) {
		static const size_t payload[PC_MSG_CLASSES] = {8, 24, 88, 216};
		pc_msg_t *a = pc_msg_new(1, payload[cls]);
		cr_assert_not_null(a);
		uintptr_t addr = (uintptr_t)a;
		pc_msg_free(a);
		/* A smaller payload of the same class gets the same block, with
		 * a fresh header. */
		pc_msg_t *b = pc_msg_new(2, payload[cls] - 1);
		cr_assert_eq((uintptr_t)b, addr, "class %u: freed block not reused", cls);
		cr_assert_eq(b->size, payload[cls] - 1);
		cr_assert_eq(b->type, 2);
		cr_assert_eq(b->size_class, cls);
		pc_msg_free(b);
	}
	pc__msg_cache_detach();
	pc__msg_depot_trim(0);
	ASSERT_NO_LEAKS();
}

/* Full magazines go to the depot (on overflow and on detach) and another
 * thread's cache takes them from there. */
typedef struct depot_arg {
	unsigned cls;
	size_t payload;
	uint32_t n;
	uintptr_t *addrs; /* blocks freed by the first thread */
	uint32_t reused;
} depot_arg_t;

static int cmp_uptr(const void *a, const void *b)
{
	uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
	return x < y ? -1 : x > y;
}

static void *depot_filler(void *arg)
{
	depot_arg_t *d = arg;
	pc__msg_cache_t cache;
	pc__msg_cache_attach(&cache);
	pc_msg_t **v = calloc(d->n, sizeof(*v));
	CHECK(v != NULL, "calloc");
	if (!v)
		return NULL;
	for (uint32_t i = 0; i < d->n; i++) {
		v[i] = pc_msg_new(1, d->payload);
		CHECK(v[i] != NULL, "alloc");
		d->addrs[i] = (uintptr_t)v[i];
	}
	for (uint32_t i = 0; i < d->n; i++)
		pc_msg_free(v[i]); /* fills loaded, spare, then overflows to the depot */
	free(v);
	pc__msg_cache_detach(); /* full magazines to the depot, the rest freed */
	return NULL;
}

static void *depot_taker(void *arg)
{
	depot_arg_t *d = arg;
	pc__msg_cache_t cache;
	pc__msg_cache_attach(&cache);
	uint32_t n = d->n;
	pc_msg_t **v = calloc(n, sizeof(*v));
	CHECK(v != NULL, "calloc");
	if (!v)
		return NULL;
	for (uint32_t i = 0; i < n; i++) {
		v[i] = pc_msg_new(3, d->payload);
		CHECK(v[i] != NULL, "alloc");
		uintptr_t key = (uintptr_t)v[i];
		if (bsearch(&key, d->addrs, d->n, sizeof(uintptr_t), cmp_uptr))
			d->reused++;
		CHECK(v[i]->size == d->payload && v[i]->type == 3 && v[i]->size_class == d->cls, "bad header");
	}
	for (uint32_t i = 0; i < n; i++)
		pc_msg_free(v[i]);
	free(v);
	pc__msg_cache_detach();
	return NULL;
}

/* An idle thread's trim leaves the depot a few magazines per class, not
 * what a burst filled it with. */
Test(msg, an_idle_trim_empties_the_depot_down_to_a_few_magazines)
{
	failures = 0;
	pc__msg_depot_trim(0);
	depot_arg_t d = {1, 20, 12 * PC_MSG_MAG_SIZE, NULL, 0};
	d.addrs = calloc(d.n, sizeof(uintptr_t));
	cr_assert_not_null(d.addrs);
	pthread_t t;
	cr_assert_eq(pthread_create(&t, NULL, depot_filler, &d), 0);
	pthread_join(t, NULL);
	assert_no_failures();
	cr_assert_geq(pc__msg_depot_mags(1), 10, "the filler left %u magazines", pc__msg_depot_mags(1));
	pc_runtime_config_t cfg;
	pc_runtime_config_init(&cfg);
	cfg.workers = 1;
	pc_runtime_t *rt = NULL;
	cr_assert_eq(pc_runtime_new(&cfg, &rt), 0);
	pc_runtime_trim_heap(rt);
	cr_assert_eq(pc__msg_depot_mags(1), PC__MSG_DEPOT_IDLE_KEEP);
	pc_runtime_free(rt);
	free(d.addrs);
	pc__msg_depot_trim(0);
	ASSERT_NO_LEAKS();
}

Test(msg, magazines_travel_through_the_depot)
{
	failures = 0;
	static const size_t payload[PC_MSG_CLASSES] = {0, 20, 64, 200};
	for (unsigned cls = 0; cls < PC_MSG_CLASSES; cls++) {
		pc__msg_depot_trim(0);
		/* 5 full magazines + a partial one: two stay cached until
		 * detach, at least three go to the depot on overflow. */
		depot_arg_t d = {cls, payload[cls], 5 * PC_MSG_MAG_SIZE + 17, NULL, 0};
		d.addrs = calloc(d.n, sizeof(uintptr_t));
		cr_assert_not_null(d.addrs);
		pthread_t t;
		cr_assert_eq(pthread_create(&t, NULL, depot_filler, &d), 0);
		pthread_join(t, NULL);
		qsort(d.addrs, d.n, sizeof(uintptr_t), cmp_uptr);
		cr_assert_eq(pthread_create(&t, NULL, depot_taker, &d), 0);
		pthread_join(t, NULL);
		assert_no_failures();
		/* The 5 full magazines are in the depot; the taker gets them all
		 * before it has to malloc. */
		cr_assert_geq(d.reused, 5 * PC_MSG_MAG_SIZE, "class %u: only %u of %u blocks came from the depot",
			      cls, d.reused, 5 * PC_MSG_MAG_SIZE);
		free(d.addrs);
	}
	pc__msg_depot_trim(0);
	ASSERT_NO_LEAKS();
}

/* ---- cross-thread traffic ------------------------------------------- */

/* Each thread owns a mailbox (it is its only consumer); every thread sends
 * to random threads. Half the threads have caches (worker-like), half do
 * not. Messages carry sender, sequence and a payload pattern keyed on both;
 * the receiver checks them and frees the message (on a thread other than
 * the one that allocated it, most of the time). */
#define XT_THREADS 6

typedef struct xt_thread {
	pc__mailbox_t q;
	uint32_t id;
	bool cache;
	uint32_t to_send;
	uint64_t seed;
	uint32_t *next_seq; /* from each sender (owner only) */
	uint64_t got;
} xt_thread_t;

static xt_thread_t xt[XT_THREADS];
static uint64_t xt_total, xt_received;
static uint32_t xt_go;

typedef struct xt_hdr {
	uint32_t from, seq;
	uint64_t key;
} xt_hdr_t;

static void xt_drain(xt_thread_t *me)
{
	pc_msg_t *m;
	while ((m = pc__mailbox_pop(&me->q))) {
		CHECK(m->size >= sizeof(xt_hdr_t), "short message");
		if (m->size < sizeof(xt_hdr_t))
			continue;
		xt_hdr_t h;
		memcpy(&h, pc_msg_cdata(m), sizeof(h));
		CHECK(h.from < XT_THREADS, "bad sender");
		if (h.from >= XT_THREADS)
			continue;
		CHECK(m->type == h.from + 1000, "type %u from %u", m->type, h.from);
		CHECK(h.seq == me->next_seq[h.from], "thread %u from %u: seq %u, expected %u", me->id, h.from, h.seq,
		      me->next_seq[h.from]);
		me->next_seq[h.from] = h.seq + 1;
		const uint8_t *p = (const uint8_t *)pc_msg_cdata(m) + sizeof(h);
		bool ok = true;
		for (size_t i = 0; i < m->size - sizeof(h); i++)
			ok &= p[i] == pattern(h.key, i);
		CHECK(ok, "payload corrupted (size %u)", m->size);
		CHECK(m->size_class == expected_class(m->size), "size class %u for size %u", m->size_class, m->size);
		me->got++;
		__atomic_fetch_add(&xt_received, 1, __ATOMIC_RELAXED);
	}
}

static void *xt_main(void *arg)
{
	xt_thread_t *me = arg;
	pc__msg_cache_t cache;
	if (me->cache)
		pc__msg_cache_attach(&cache);
	uint64_t rng = me->seed;
	uint32_t seq[XT_THREADS] = {0};
	while (!__atomic_load_n(&xt_go, __ATOMIC_ACQUIRE))
		sched_yield();
	/* Also keep some messages of our own for a while, freed out of order. */
	pc_msg_t *kept[64] = {0};
	for (uint32_t i = 0; i < me->to_send; i++) {
		uint32_t r = rnd_below(&rng, 100);
		size_t payload;
		if (r < 40)
			payload = rnd_below(&rng, 25);
		else if (r < 70)
			payload = rnd_below(&rng, 100);
		else if (r < 97)
			payload = rnd_below(&rng, 230);
		else
			payload = 230 + rnd_below(&rng, 5000);
		payload += sizeof(xt_hdr_t);
		uint32_t to = rnd_below(&rng, XT_THREADS);
		pc_msg_t *m = pc_msg_new(me->id + 1000, payload);
		CHECK(m != NULL, "alloc");
		if (!m)
			return NULL;
		xt_hdr_t h = {me->id, seq[to]++, xs(&rng)};
		memcpy(pc_msg_data(m), &h, sizeof(h));
		uint8_t *p = (uint8_t *)pc_msg_data(m) + sizeof(h);
		for (size_t k = 0; k < payload - sizeof(h); k++)
			p[k] = pattern(h.key, k);
		pc__mailbox_push(&xt[to].q, m);
		/* Local churn: allocate and free out of order. */
		uint32_t slot = rnd_below(&rng, 64);
		pc_msg_free(kept[slot]);
		kept[slot] = pc_msg_new(7, rnd_below(&rng, 300));
		if (rnd_below(&rng, 8) == 0)
			xt_drain(me);
		if (rnd_below(&rng, 256) == 0)
			sched_yield();
	}
	for (int i = 0; i < 64; i++)
		pc_msg_free(kept[i]);
	while (__atomic_load_n(&xt_received, __ATOMIC_RELAXED) < xt_total) {
		xt_drain(me);
		sched_yield();
	}
	xt_drain(me);
	if (me->cache)
		pc__msg_cache_detach();
	return NULL;
}

Test(msg, cross_thread_alloc_free)
{
	failures = 0;
	uint64_t seed = test_seed();
	uint64_t rng = seed;
	for (int round = 0; round < 3; round++) {
		xt_total = 0;
		xt_received = 0;
		xt_go = 0;
		for (uint32_t i = 0; i < XT_THREADS; i++) {
			xt_thread_t *t = &xt[i];
			memset(t, 0, sizeof(*t));
			t->id = i;
			t->cache = (i + (uint32_t)round) % 2 == 0;
			t->to_send = 5000 + rnd_below(&rng, 15000);
			t->seed = xs(&rng) | 1;
			t->next_seq = calloc(XT_THREADS, sizeof(uint32_t));
			cr_assert_not_null(t->next_seq);
			pc_msg_t *stub = pc_msg_new(0, 0);
			cr_assert_not_null(stub);
			pc__mailbox_init(&t->q, stub);
			xt_total += t->to_send;
		}
		pthread_t tid[XT_THREADS];
		for (uint32_t i = 0; i < XT_THREADS; i++)
			cr_assert_eq(pthread_create(&tid[i], NULL, xt_main, &xt[i]), 0);
		__atomic_store_n(&xt_go, 1, __ATOMIC_RELEASE);
		for (uint32_t i = 0; i < XT_THREADS; i++)
			pthread_join(tid[i], NULL);
		assert_no_failures();
		cr_assert_eq(xt_received, xt_total);
		uint64_t got = 0;
		for (uint32_t i = 0; i < XT_THREADS; i++) {
			got += xt[i].got;
			cr_assert(pc__mailbox_peek_empty(&xt[i].q));
			/* The stub (last message popped) is freed here, on yet
			 * another thread. */
			pc__mailbox_destroy(&xt[i].q);
			free(xt[i].next_seq);
		}
		cr_assert_eq(got, xt_total);
	}
	pc__msg_depot_trim(0);
	ASSERT_NO_LEAKS();
}

/* Attach/detach repeatedly on many short-lived threads while others keep
 * running: the depot is shared and locked, magazines are never lost or
 * shared twice (ASan: no double free, no leak). */
static void *churn_main(void *arg)
{
	uint64_t rng = (uint64_t)(uintptr_t)arg | 1;
	for (int life = 0; life < 20; life++) {
		pc__msg_cache_t cache;
		pc__msg_cache_attach(&cache);
		pc_msg_t *held[300];
		uint32_t n = rnd_below(&rng, 300);
		for (uint32_t i = 0; i < n; i++) {
			held[i] = pc_msg_new(1, rnd_below(&rng, 217));
			CHECK(held[i] != NULL, "alloc");
			if (held[i])
				memset(pc_msg_data(held[i]), 0xAB, held[i]->size);
		}
		for (uint32_t i = 0; i < n; i++)
			pc_msg_free(held[n - 1 - i]);
		pc__msg_cache_detach();
	}
	return NULL;
}

Test(msg, attach_detach_churn)
{
	failures = 0;
	uint64_t seed = test_seed();
	pthread_t t[4];
	for (int round = 0; round < 5; round++) {
		for (int i = 0; i < 4; i++)
			cr_assert_eq(pthread_create(&t[i], NULL, churn_main, (void *)(uintptr_t)(xs(&seed))), 0);
		for (int i = 0; i < 4; i++)
			pthread_join(t[i], NULL);
	}
	assert_no_failures();
	pc__msg_depot_trim(0);
	ASSERT_NO_LEAKS();
}
