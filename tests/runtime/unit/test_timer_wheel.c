/*
 * Timing wheel: firing time and order, removal, next_deadline against a
 * brute-force minimum, long jumps, far deadlines, callbacks that modify the
 * wheel. Random cases use a fixed-seed xorshift so every run is the same.
 */
#include <criterion/criterion.h>

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/timer_wheel_internal.h"

#define HORIZON ((uint64_t)1 << 36) /* what the six levels cover */
#define HOURS_10 (10ull * 3600 * 1000)

static uint64_t rng;

static uint64_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static uint64_t rnd_below(uint64_t n)
{
	return rnd() % n;
}

/* Spread over every scale up to 2^max_bits, so that all levels get used. */
static uint64_t rnd_scale(unsigned max_bits)
{
	return rnd() >> (64 - 1 - rnd_below(max_bits));
}

typedef struct tnode {
	pc__tw_node_t node;
	unsigned fired;
	unsigned removed;
} tnode_t;

static tnode_t *tnode_of(pc__tw_node_t *n)
{
	return (tnode_t *)((char *)n - offsetof(tnode_t, node));
}

/* What the recording callback checks against. */
typedef struct rec {
	pc__timer_wheel_t *tw;
	uint64_t prev_now;  /* target of the previous advance */
	uint64_t now;       /* target of the current advance */
	uint64_t last;      /* deadline of the last node fired */
	int strict;         /* every deadline was in the future when added */
	size_t fired;
} rec_t;

static void rec_fire(pc__tw_node_t *n, void *arg)
{
	rec_t *r = arg;

	cr_assert(!pc__tw_linked(n), "fired node still linked");
	cr_assert_leq(n->deadline, r->now, "fired early: deadline %" PRIu64
		      " now %" PRIu64, n->deadline, r->now);
	cr_assert_geq(n->deadline, r->last, "out of order: %" PRIu64 " after %"
		      PRIu64, n->deadline, r->last);
	if (r->strict)
		cr_assert_gt(n->deadline, r->prev_now, "fired late: deadline %"
			     PRIu64 " was due at the advance to %" PRIu64,
			     n->deadline, r->prev_now);
	r->last = n->deadline;
	r->fired++;
	tnode_of(n)->fired++;
}

static void rec_init(rec_t *r, pc__timer_wheel_t *tw, uint64_t now, int strict)
{
	memset(r, 0, sizeof(*r));
	r->tw = tw;
	r->prev_now = r->now = now;
	r->strict = strict;
}

/* Tells the checks about an advance to `now`. */
static void rec_target(rec_t *r, uint64_t now)
{
	r->prev_now = r->now;
	r->now = now;
}

static void advance(rec_t *r, uint64_t now)
{
	rec_target(r, now);
	pc__tw_advance(r->tw, now, rec_fire, r);
}

Test(timer_wheel, zeroed_node_is_unlinked)
{
	pc__timer_wheel_t tw;
	tnode_t a, b;
	rec_t r;

	memset(&a, 0, sizeof(a));
	memset(&b, 0, sizeof(b));
	pc__tw_init(&tw, 0);
	rec_init(&r, &tw, 0, 1);
	cr_assert_eq(pc__tw_linked(&a.node), 0);
	cr_assert_eq(pc__tw_next_deadline(&tw), UINT64_MAX);
	pc__tw_add(&tw, &a.node, 10);
	pc__tw_add(&tw, &b.node, 20);
	cr_assert_eq(pc__tw_linked(&a.node), 1);
	cr_assert_eq(pc__tw_count(&tw), 2);
	pc__tw_remove(&tw, &b.node);
	cr_assert_eq(pc__tw_linked(&b.node), 0);
	advance(&r, 10);
	cr_assert_eq(pc__tw_linked(&a.node), 0);
	cr_assert_eq(a.fired, 1);
	cr_assert_eq(pc__tw_count(&tw), 0);
	cr_assert_eq(pc__tw_next_deadline(&tw), UINT64_MAX);
}

/* Every level boundary, from starts that sit on and just before them. */
Test(timer_wheel, fires_exactly_at_deadline)
{
	static const uint64_t starts[] = {
		0, 1, 63, 64, 4095, 262143, HORIZON - 2, HORIZON - 1,
		HORIZON, 12345678901ull,
	};
	static const uint64_t deltas[] = {
		1, 2, 63, 64, 65, 4095, 4096, 4097, 262147, 16777215,
		(uint64_t)1 << 30, HORIZON - 1, HORIZON, HORIZON + 1,
		5 * HORIZON + 17,
	};

	for (size_t i = 0; i < sizeof(starts) / sizeof(starts[0]); i++) {
		for (size_t j = 0; j < sizeof(deltas) / sizeof(deltas[0]); j++) {
			pc__timer_wheel_t tw;
			tnode_t a = { 0 };
			uint64_t d = starts[i] + deltas[j];
			rec_t r;

			pc__tw_init(&tw, starts[i]);
			rec_init(&r, &tw, starts[i], 1);
			pc__tw_add(&tw, &a.node, d);
			cr_assert_eq(pc__tw_next_deadline(&tw), d);
			/* Stop at the halfway point too: time passing in
			 * steps must not fire it either. */
			advance(&r, starts[i] + deltas[j] / 2);
			advance(&r, d - 1);
			cr_assert_eq(a.fired, 0, "start %" PRIu64 " delta %"
				     PRIu64 " fired early", starts[i], deltas[j]);
			cr_assert_eq(pc__tw_next_deadline(&tw), d);
			cr_assert_eq(pc__tw_count(&tw), 1);
			advance(&r, d);
			cr_assert_eq(a.fired, 1, "start %" PRIu64 " delta %"
				     PRIu64 " did not fire", starts[i], deltas[j]);
			cr_assert_eq(pc__tw_count(&tw), 0);
			cr_assert_eq(pc__tw_next_deadline(&tw), UINT64_MAX);
		}
	}
}

Test(timer_wheel, ties_fire_together)
{
	pc__timer_wheel_t tw;
	tnode_t n[5] = { 0 };
	rec_t r;

	pc__tw_init(&tw, 100);
	rec_init(&r, &tw, 100, 1);
	for (int i = 0; i < 5; i++)
		pc__tw_add(&tw, &n[i].node, 5000);
	advance(&r, 4999);
	cr_assert_eq(r.fired, 0);
	advance(&r, 5000);
	cr_assert_eq(r.fired, 5);
	for (int i = 0; i < 5; i++)
		cr_assert_eq(n[i].fired, 1);
}

Test(timer_wheel, ordering_across_levels)
{
	enum { N = 20000 };
	pc__timer_wheel_t tw;
	tnode_t *n = calloc(N, sizeof(*n));
	uint64_t now = 777;
	rec_t r;

	cr_assert_not_null(n);
	rng = 0x9e3779b97f4a7c15ull;
	pc__tw_init(&tw, now);
	rec_init(&r, &tw, now, 1);
	for (int i = 0; i < N; i++)
		pc__tw_add(&tw, &n[i].node, now + 1 + rnd_below(10000));
	while (now < 777 + 10001) {
		now += 1 + rnd_below(300);
		advance(&r, now);
		cr_assert(pc__tw_next_deadline(&tw) > now);
	}
	cr_assert_eq(r.fired, N);
	for (int i = 0; i < N; i++)
		cr_assert_eq(n[i].fired, 1);
	cr_assert_eq(pc__tw_count(&tw), 0);
	free(n);
}

Test(timer_wheel, remove_prevents_firing)
{
	pc__timer_wheel_t tw;
	tnode_t n[6] = { 0 };
	const uint64_t d[6] = { 5, 5, 100, 5000, 300000, HORIZON * 3 };
	rec_t r;

	pc__tw_init(&tw, 0);
	rec_init(&r, &tw, 0, 1);
	for (int i = 0; i < 6; i++)
		pc__tw_add(&tw, &n[i].node, d[i]);
	for (int i = 1; i < 6; i += 2)
		pc__tw_remove(&tw, &n[i].node);
	cr_assert_eq(pc__tw_count(&tw), 3);
	cr_assert_eq(pc__tw_next_deadline(&tw), 5);
	advance(&r, UINT64_MAX);
	for (int i = 0; i < 6; i++)
		cr_assert_eq(n[i].fired, i % 2 == 0, "node %d", i);
	cr_assert_eq(pc__tw_count(&tw), 0);
}

Test(timer_wheel, many_nodes_most_removed)
{
	enum { N = 100000, REMOVE = N / 10 * 9, ROUNDS = 10, GAP = 1000 };
	pc__timer_wheel_t tw;
	tnode_t *n = calloc(N, sizeof(*n));
	uint32_t *order = malloc(N * sizeof(*order));
	uint64_t now = 1000, max = 0;
	size_t removed = 0, next = 0;
	rec_t r;

	cr_assert(n && order);
	rng = 0x2545f4914f6cdd1dull;
	pc__tw_init(&tw, now);
	rec_init(&r, &tw, now, 1);
	for (uint32_t i = 0; i < N; i++) {
		uint64_t d = now + GAP + 1 + rnd_scale(38);

		pc__tw_add(&tw, &n[i].node, d);
		max = d > max ? d : max;
		order[i] = i;
	}
	for (uint32_t i = N - 1; i > 0; i--) {
		uint32_t j = (uint32_t)rnd_below(i + 1), t = order[i];

		order[i] = order[j];
		order[j] = t;
	}
	/* Remove in rounds between advances that stay short of every deadline
	 * but cascade some slots, so removal also meets nodes that moved. */
	for (int round = 0; round < ROUNDS; round++) {
		for (; next < (size_t)REMOVE * (round + 1) / ROUNDS; next++) {
			tnode_t *t = &n[order[next]];

			cr_assert(pc__tw_linked(&t->node));
			pc__tw_remove(&tw, &t->node);
			t->removed = 1;
			removed++;
		}
		now += GAP / ROUNDS;
		advance(&r, now);
		cr_assert_eq(pc__tw_count(&tw), N - removed);
	}
	cr_assert_eq(r.fired, 0);
	while (now < max) {
		now += 1 + rnd_scale(36);
		advance(&r, now);
	}
	for (uint32_t i = 0; i < N; i++)
		cr_assert_eq(n[i].fired, !n[i].removed, "node %u", i);
	cr_assert_eq(r.fired, N - removed);
	cr_assert_eq(pc__tw_count(&tw), 0);
	free(order);
	free(n);
}

/* Random adds (past, near, far, near UINT64_MAX), removes and advances;
 * after each, next_deadline and count must match a scan of all nodes, and
 * nothing due may remain. */
Test(timer_wheel, next_deadline_is_exact)
{
	enum { N = 1000, OPS = 50000 };
	pc__timer_wheel_t tw;
	tnode_t *n = calloc(N, sizeof(*n));
	uint64_t now = 5;
	rec_t r;

	cr_assert_not_null(n);
	rng = 0xdeadbeefcafef00dull;
	pc__tw_init(&tw, now);
	rec_init(&r, &tw, now, 0);
	for (int op = 0; op < OPS; op++) {
		uint64_t k = rnd_below(100), min = UINT64_MAX;
		tnode_t *t = &n[rnd_below(N)];
		size_t linked = 0;

		if (k < 45 && !pc__tw_linked(&t->node)) {
			uint64_t kind = rnd_below(10), d;

			if (kind == 0)
				d = now - rnd_below(now < 100 ? now + 1 : 100);
			else if (kind < 3)
				d = now + rnd_below(64);
			else if (kind < 9)
				d = now + rnd_scale(40);
			else
				d = UINT64_MAX - rnd_below(3);
			pc__tw_add(&tw, &t->node, d);
		} else if (k < 75 && pc__tw_linked(&t->node)) {
			pc__tw_remove(&tw, &t->node);
		} else if (k >= 75) {
			now += rnd_scale(rnd_below(4) ? 12 : 38);
			r.last = 0; /* overdue adds reorder across advances */
			advance(&r, now);
		}
		for (int i = 0; i < N; i++) {
			if (!pc__tw_linked(&n[i].node))
				continue;
			linked++;
			if (n[i].node.deadline < min)
				min = n[i].node.deadline;
			if (k >= 75)
				cr_assert_gt(n[i].node.deadline, now,
					     "op %d: due node left behind", op);
		}
		cr_assert_eq(pc__tw_next_deadline(&tw), min, "op %d: %" PRIu64
			     " != %" PRIu64, op, pc__tw_next_deadline(&tw), min);
		cr_assert_eq(pc__tw_count(&tw), linked, "op %d", op);
	}
	free(n);
}

Test(timer_wheel, long_jump_fires_everything_due)
{
	enum { N = 10000 };
	pc__timer_wheel_t tw;
	tnode_t *n = calloc(N, sizeof(*n));
	uint64_t start = 987654321, end = start + HOURS_10;
	size_t due = 0;
	rec_t r;

	cr_assert_not_null(n);
	rng = 0x0123456789abcdefull;
	pc__tw_init(&tw, start);
	rec_init(&r, &tw, start, 1);
	for (int i = 0; i < N; i++) {
		uint64_t d = start + 1 + rnd_below(2 * HOURS_10);

		pc__tw_add(&tw, &n[i].node, d);
		due += d <= end;
	}
	advance(&r, end);
	cr_assert_eq(r.fired, due);
	for (int i = 0; i < N; i++)
		cr_assert_eq(n[i].fired, n[i].node.deadline <= end, "node %d", i);
	advance(&r, end + HOURS_10);
	cr_assert_eq(r.fired, N);
	free(n);
}

/* Beyond the six levels and up to UINT64_MAX: exact, never early, also
 * when time crawls over the horizon in big random steps. */
Test(timer_wheel, far_deadlines_never_early)
{
	static const uint64_t d[] = {
		HORIZON + 7, 3 * HORIZON + 12345, (uint64_t)1 << 50,
		UINT64_MAX - 1, UINT64_MAX,
	};
	enum { N = sizeof(d) / sizeof(d[0]) };
	pc__timer_wheel_t tw;
	tnode_t n[N] = { 0 };
	uint64_t now = 3;
	rec_t r;

	rng = 0x5555aaaa5555aaaaull;
	pc__tw_init(&tw, now);
	rec_init(&r, &tw, now, 1);
	for (int i = 0; i < N; i++)
		pc__tw_add(&tw, &n[i].node, d[i]);
	for (int i = 0; i < N; i++) {
		for (int step = 0; step < 50 && now < d[i] - 1; step++) {
			uint64_t s = rnd_scale(40);

			now = d[i] - 1 - now < s ? d[i] - 1 : now + s;
			advance(&r, now);
			cr_assert_eq(pc__tw_next_deadline(&tw), d[i]);
		}
		advance(&r, d[i] - 1);
		cr_assert_eq(n[i].fired, 0, "deadline %" PRIu64 " early", d[i]);
		cr_assert_eq(pc__tw_next_deadline(&tw), d[i]);
		now = d[i];
		advance(&r, now);
		cr_assert_eq(n[i].fired, 1, "deadline %" PRIu64 " late", d[i]);
	}
	cr_assert_eq(pc__tw_count(&tw), 0);
}

Test(timer_wheel, time_near_uint64_max)
{
	pc__timer_wheel_t tw;
	tnode_t a = { 0 }, b = { 0 }, c = { 0 };
	uint64_t start = UINT64_MAX - 100;
	rec_t r;

	pc__tw_init(&tw, start);
	rec_init(&r, &tw, start, 1);
	pc__tw_add(&tw, &a.node, UINT64_MAX);
	pc__tw_add(&tw, &b.node, UINT64_MAX - 50);
	pc__tw_add(&tw, &c.node, UINT64_MAX - 1);
	cr_assert_eq(pc__tw_next_deadline(&tw), UINT64_MAX - 50);
	advance(&r, UINT64_MAX - 51);
	cr_assert_eq(r.fired, 0);
	advance(&r, UINT64_MAX - 2);
	cr_assert_eq(r.fired, 1);
	cr_assert_eq(b.fired, 1);
	advance(&r, UINT64_MAX);
	cr_assert_eq(r.fired, 3);
}

/* A clock that starts far ahead, and one that jumps far ahead. */
Test(timer_wheel, huge_jump_with_far_nodes)
{
	pc__timer_wheel_t tw;
	tnode_t a = { 0 }, b = { 0 };
	rec_t r;

	pc__tw_init(&tw, 0);
	rec_init(&r, &tw, 0, 1);
	/* b sits on the first ms of a 2^36 ms window. */
	pc__tw_add(&tw, &a.node, UINT64_MAX / 2);
	pc__tw_add(&tw, &b.node, UINT64_MAX / 2 + HORIZON + 1);
	advance(&r, UINT64_MAX / 2 + HORIZON);
	cr_assert_eq(a.fired, 1);
	cr_assert_eq(b.fired, 0);
	cr_assert_eq(pc__tw_next_deadline(&tw), UINT64_MAX / 2 + HORIZON + 1);
	advance(&r, UINT64_MAX / 2 + HORIZON + 1);
	cr_assert_eq(b.fired, 1);
}

/* Periodic node re-adds itself; it kills one pending node; another node's
 * callback removes it in the end. */
typedef struct periodic {
	rec_t rec;
	tnode_t tick, victim, stopper;
	uint64_t period;
	uint64_t kill_at;
} periodic_t;

static void periodic_fire(pc__tw_node_t *n, void *arg)
{
	periodic_t *p = arg;

	rec_fire(n, &p->rec);
	if (n == &p->tick.node) {
		if (n->deadline == p->kill_at)
			pc__tw_remove(p->rec.tw, &p->victim.node);
		pc__tw_add(p->rec.tw, n, n->deadline + p->period);
	} else if (n == &p->stopper.node) {
		pc__tw_remove(p->rec.tw, &p->tick.node);
	}
}

Test(timer_wheel, periodic_readd_and_remove_in_callback)
{
	pc__timer_wheel_t tw;
	periodic_t p = { .period = 70, .kill_at = 70 * 10 };

	pc__tw_init(&tw, 0);
	rec_init(&p.rec, &tw, 0, 1);
	pc__tw_add(&tw, &p.tick.node, 70);
	pc__tw_add(&tw, &p.victim.node, 70 * 10 + 1);
	pc__tw_add(&tw, &p.stopper.node, 70 * 100 + 35);
	/* One advance covers many periods: each re-add lands ahead of the
	 * time being processed and fires again in this same call. */
	rec_target(&p.rec, 5000);
	pc__tw_advance(&tw, 5000, periodic_fire, &p);
	cr_assert_eq(p.tick.fired, 5000 / 70);
	cr_assert_eq(p.victim.fired, 0);
	cr_assert_eq(pc__tw_linked(&p.victim.node), 0);
	cr_assert_eq(pc__tw_next_deadline(&tw), 5000 / 70 * 70 + 70);
	rec_target(&p.rec, 100000);
	pc__tw_advance(&tw, 100000, periodic_fire, &p);
	cr_assert_eq(p.tick.fired, 100);
	cr_assert_eq(p.stopper.fired, 1);
	cr_assert_eq(pc__tw_count(&tw), 0);
}

/* Two nodes in one slot each remove the other and a later node: exactly
 * one of the pair fires, the later node never does. */
typedef struct rivals {
	rec_t rec;
	tnode_t a, b, later;
} rivals_t;

static void rivals_fire(pc__tw_node_t *n, void *arg)
{
	rivals_t *v = arg;
	pc__tw_node_t *other = n == &v->a.node ? &v->b.node : &v->a.node;

	rec_fire(n, &v->rec);
	if (pc__tw_linked(other))
		pc__tw_remove(v->rec.tw, other);
	if (pc__tw_linked(&v->later.node))
		pc__tw_remove(v->rec.tw, &v->later.node);
}

Test(timer_wheel, callback_removes_pending_nodes)
{
	static const uint64_t at[] = { 40, 5000, 400000 };

	for (size_t i = 0; i < sizeof(at) / sizeof(at[0]); i++) {
		pc__timer_wheel_t tw;
		rivals_t v = { 0 };

		pc__tw_init(&tw, 0);
		rec_init(&v.rec, &tw, 0, 1);
		pc__tw_add(&tw, &v.a.node, at[i]);
		pc__tw_add(&tw, &v.b.node, at[i]);
		pc__tw_add(&tw, &v.later.node, at[i] + 1);
		rec_target(&v.rec, UINT64_MAX);
		pc__tw_advance(&tw, UINT64_MAX, rivals_fire, &v);
		cr_assert_eq(v.a.fired + v.b.fired, 1);
		cr_assert_eq(v.later.fired, 0);
		cr_assert_eq(pc__tw_count(&tw), 0);
	}
}

/* Callback adds: ahead of the deadline being fired but due by the target,
 * it fires in this advance; at or before it, in the next one. */
typedef struct adder {
	rec_t rec;
	tnode_t first, ahead, same, behind;
} adder_t;

static void adder_fire(pc__tw_node_t *n, void *arg)
{
	adder_t *a = arg;

	rec_fire(n, &a->rec);
	if (n == &a->first.node) {
		pc__tw_add(a->rec.tw, &a->ahead.node, n->deadline + 5);
		pc__tw_add(a->rec.tw, &a->same.node, n->deadline);
		pc__tw_add(a->rec.tw, &a->behind.node, n->deadline - 3);
	}
}

Test(timer_wheel, callback_adds)
{
	pc__timer_wheel_t tw;
	adder_t a = { 0 };

	pc__tw_init(&tw, 0);
	rec_init(&a.rec, &tw, 0, 0);
	pc__tw_add(&tw, &a.first.node, 100);
	rec_target(&a.rec, 1000);
	pc__tw_advance(&tw, 1000, adder_fire, &a);
	cr_assert_eq(a.first.fired, 1);
	cr_assert_eq(a.ahead.fired, 1);
	cr_assert_eq(a.same.fired, 0);
	cr_assert_eq(a.behind.fired, 0);
	cr_assert_eq(pc__tw_next_deadline(&tw), 97);
	a.rec.last = 0;
	rec_target(&a.rec, 1000);
	pc__tw_advance(&tw, 1000, adder_fire, &a);
	cr_assert_eq(a.same.fired, 1);
	cr_assert_eq(a.behind.fired, 1);
	cr_assert_eq(a.rec.last, 100, "behind (97) must fire before same (100)");
}

/* A clock read before the last advance must not move the wheel back,
 * nor fire anything that is not due by the wheel's own time. */
Test(timer_wheel, stale_now_fires_nothing_new)
{
	pc__timer_wheel_t tw;
	tnode_t a = { 0 }, b = { 0 };
	rec_t r;

	pc__tw_init(&tw, 0);
	rec_init(&r, &tw, 0, 1);
	pc__tw_add(&tw, &a.node, 2000);
	pc__tw_add(&tw, &b.node, 1500);
	advance(&r, 1000);
	advance(&r, 900);
	cr_assert_eq(r.fired, 0);
	cr_assert_eq(pc__tw_next_deadline(&tw), 1500);
	advance(&r, 1500);
	cr_assert_eq(b.fired, 1);
	cr_assert_eq(a.fired, 0);
}

Test(timer_wheel, past_deadline_fires_on_next_advance)
{
	static const uint64_t d[] = { 500, 0, 1000, 999, 500, 3 };
	enum { N = sizeof(d) / sizeof(d[0]) };
	pc__timer_wheel_t tw;
	tnode_t n[N] = { 0 }, future = { 0 };
	rec_t r;

	pc__tw_init(&tw, 0);
	rec_init(&r, &tw, 0, 0);
	advance(&r, 1000);
	pc__tw_add(&tw, &future.node, 1001);
	for (int i = 0; i < N; i++)
		pc__tw_add(&tw, &n[i].node, d[i]);
	pc__tw_remove(&tw, &n[5].node);
	cr_assert_eq(pc__tw_next_deadline(&tw), 0);
	cr_assert_eq(pc__tw_count(&tw), N);
	/* The same time again: all that is overdue fires, in order. */
	advance(&r, 1000);
	for (int i = 0; i < N - 1; i++)
		cr_assert_eq(n[i].fired, 1, "node %d", i);
	cr_assert_eq(n[5].fired, 0);
	cr_assert_eq(future.fired, 0);
	cr_assert_eq(pc__tw_next_deadline(&tw), 1001);
	advance(&r, 1001);
	cr_assert_eq(future.fired, 1);
}

/* A slot above level 0 remembers its earliest deadline: removing the node
 * that held it, or one of two that share it, and adding an earlier one
 * all leave next_deadline exact. */
Test(timer_wheel, a_slot_s_earliest_survives_removals_and_adds)
{
	pc__timer_wheel_t tw;
	pc__tw_node_t a = {0}, b = {0}, c = {0}, d = {0};
	pc__tw_init(&tw, 0);
	pc__tw_add(&tw, &a, 200); /* 200 = 3 * 64 + 8: past level 0's two blocks */
	pc__tw_add(&tw, &b, 200);
	pc__tw_add(&tw, &c, 220);
	cr_assert_eq(a.level, 1);
	cr_assert_eq(pc__tw_next_deadline(&tw), 200);
	pc__tw_remove(&tw, &a);
	cr_assert_eq(pc__tw_next_deadline(&tw), 200, "b shares the earliest");
	pc__tw_remove(&tw, &b);
	cr_assert_eq(pc__tw_next_deadline(&tw), 220);
	pc__tw_add(&tw, &d, 210);
	cr_assert_eq(pc__tw_next_deadline(&tw), 210);
	pc__tw_remove(&tw, &c);
	cr_assert_eq(pc__tw_next_deadline(&tw), 210);
	pc__tw_remove(&tw, &d);
	cr_assert_eq(pc__tw_next_deadline(&tw), UINT64_MAX);
}

/* A wheel at `now` with its recorder, n[] unlinked, the random seeded. */
static void start(pc__timer_wheel_t *tw, rec_t *r, tnode_t *n, size_t count,
		  uint64_t now, uint64_t seed)
{
	memset(n, 0, count * sizeof(*n));
	rng = seed;
	pc__tw_init(tw, now);
	rec_init(r, tw, now, 1);
}

/*
 * What makes the tail short: a slot of thousands of timers is moved down a
 * level in bounded chunks while the block before it runs, so the advance
 * that enters its block moves nothing and fires its first timer at once.
 * Without drain_ahead the same advance would move all of them.
 */
Test(timer_wheel, drain_ahead_moves_the_next_slot_in_chunks)
{
	enum { N = 6400, BUDGET = 256 };
	static tnode_t n[N];
	pc__timer_wheel_t tw;
	rec_t r;

	start(&tw, &r, n, N, 1000, 0x9e3779b97f4a7c15ull);
	/* All due in the block 128..191 ms after T's: level 1, one slot. */
	uint64_t block = ((1000 >> 6) + 2) << 6;
	for (unsigned i = 0; i < N; i++) {
		pc__tw_add(&tw, &n[i].node, block + rnd_below(64));
		cr_assert_eq(n[i].node.level, 1);
	}
	cr_assert_eq(pc__tw_drain_ahead(&tw, BUDGET), 0,
		     "not the next slot yet: nothing to move ahead");
	cr_assert_eq(tw.moved, 0);
	advance(&r, block - 64); /* the block before theirs */
	cr_assert_eq(tw.moved, 0);
	unsigned chunks = 0;
	uint64_t before = tw.moved;
	while (pc__tw_drain_ahead(&tw, BUDGET)) {
		cr_assert_eq(tw.moved - before, BUDGET, "a chunk moves its budget");
		before = tw.moved;
		chunks++;
	}
	cr_assert_eq(tw.moved, N);
	cr_assert_eq(chunks, N / BUDGET - 1);
	for (unsigned i = 0; i < N; i++)
		cr_assert_eq(n[i].node.level, 0);
	advance(&r, block);
	cr_assert_eq(tw.moved, N, "entering the block moved nothing more");
	advance(&r, block + 64);
	cr_assert_eq(r.fired, N);
	cr_assert_eq(pc__tw_count(&tw), 0);
}

/* Removing nodes and adding new ones while a slot is being moved down in
 * chunks, then jumping past it: everything fires exactly once, on time,
 * in order, and every deadline added lands where next_deadline sees it. */
Test(timer_wheel, drain_ahead_interleaved_with_adds_and_removes)
{
	enum { N = 20000 };
	static tnode_t n[N];
	pc__timer_wheel_t tw;
	rec_t r;

	start(&tw, &r, n, N, 5000, 0x2545f4914f6cdd1dull);
	uint64_t now = 5000;
	unsigned added = 0, removed = 0;
	while (added < N) {
		for (unsigned k = 0; k < 100 && added < N; k++, added++)
			pc__tw_add(&tw, &n[added].node, now + 1 + rnd_scale(14));
		for (unsigned k = 0; k < 40; k++) {
			tnode_t *v = &n[rnd_below(added)];
			if (pc__tw_linked(&v->node)) {
				pc__tw_remove(&tw, &v->node);
				v->removed = 1;
				removed++;
			}
		}
		pc__tw_drain_ahead(&tw, 1 + rnd_below(64));
		uint64_t next = pc__tw_next_deadline(&tw), min = UINT64_MAX;
		for (unsigned i = 0; i < added; i++)
			if (pc__tw_linked(&n[i].node) && n[i].node.deadline < min)
				min = n[i].node.deadline;
		cr_assert_eq(next, min);
		now += rnd_below(3) ? rnd_below(8) : rnd_below(300);
		advance(&r, now);
	}
	advance(&r, now + (1u << 15));
	cr_assert_eq(r.fired + removed, N);
	for (unsigned i = 0; i < N; i++)
		cr_assert_eq(n[i].fired + n[i].removed, 1, "node %u", i);
}
