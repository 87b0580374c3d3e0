/*
 * Runtime timers: order, never early, cancel (before, after, and while the
 * fired message waits in a busy actor's mailbox), a large random mix of
 * timers and cancels, periodic timers (repeat, skip, cancel), what happens
 * to timers whose target stops, and timers at runtime shutdown.
 *
 * Timing assertions are one-sided: "never early" is exact (the timer's own
 * contract, measured with CLOCK_MONOTONIC); lateness only gets generous
 * bounds.
 */
#include <criterion/criterion.h>

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "actors/actor_internal.h"
#include "pincer.h"
#include "test_util.h"

/* ---- helpers ----------------------------------------------------------- */

static pc_runtime_t *new_rt(uint32_t workers)
{
	pc_runtime_config_t cfg;
	pc_runtime_config_init(&cfg);
	cfg.workers = workers;
	pc_runtime_t *rt = NULL;
	cr_assert_eq(pc_runtime_new(&cfg, &rt), 0);
	return rt;
}

static uint64_t pending_timers(pc_runtime_t *rt)
{
	return __atomic_load_n(&rt->timers.pending, __ATOMIC_ACQUIRE);
}


/* ---- the recording actor ----------------------------------------------- */

enum {
	T_TICK = 1,      /* payload: index; recorded */
	T_CANCEL_STALE,  /* wait until mail arrives, then cancel timer stale_id */
	T_WAIT_GATE,     /* wait until mail arrives, say so, wait for the gate */
	T_MARK,          /* everything sent before has been handled */
	T_EXIT,
	T_ARM_SELF,      /* arm a timer to self from the worker */
};

typedef struct rec {
	uint32_t n;           /* capacity of the arrays */
	int *count;           /* deliveries per index */
	uint64_t *at_ns;      /* delivery time per index */
	uint32_t *order;      /* indices in delivery order */
	uint32_t norder;
	int total;
	/* periodic test */
	int cancel_at;        /* cancel `every_id` on this tick (0: never) */
	pc_timer_t every_id;
	int every_cancel_rc;
	int block_first_ms;   /* on the first tick: wait for mail, then this long */
	int ticks_before_mark;
	int marked;
	/* stale tests */
	int cancel_rc;
	pc_timer_t stale_id;
	int mail_seen;
	int gate;
	int stops;
} rec_t;

static rec_t *new_rec(uint32_t n)
{
	rec_t *r = calloc(1, sizeof(*r));
	r->n = n;
	r->count = calloc(n, sizeof(int));
	r->at_ns = calloc(n, sizeof(uint64_t));
	r->order = calloc(n, sizeof(uint32_t));
	r->cancel_rc = -1;
	r->every_cancel_rc = -1;
	return r;
}

static void free_rec(rec_t *r)
{
	free(r->count);
	free(r->at_ns);
	free(r->order);
	free(r);
}

/* We are the mailbox's consumer while our handler runs. */
static bool wait_for_mail(pc_ctx_t *ctx)
{
	uint64_t until = now_ms() + 10000;
	while (pc__mailbox_peek_empty(&pc_self(ctx)->mq))
		if (now_ms() > until)
			return false;
	return true;
}

static int rec_receive(pc_ctx_t *ctx, void *state, pc_msg_t *m)
{
	rec_t *r = state;
	switch (m->type) {
	case T_TICK: {
		uint64_t t = pc__clock_mono_ns();
		uint32_t i = (uint32_t)pc_msg_u64(m);
		if (i >= r->n)
			return -1;
		r->at_ns[i] = t;
		if (r->norder < r->n)
			r->order[r->norder++] = i;
		INC(r->count[i]);
		int total = INC(r->total);
		if (total == 1 && r->block_first_ms) {
			/* A slow handler: the next tick arrives meanwhile, later
			 * ones must be skipped, not queued. */
			if (!wait_for_mail(ctx))
				return -2;
			sleep_ms((unsigned)r->block_first_ms);
			pc_send_u64(pc_self(ctx), T_MARK, 0);
		}
		if (LOAD(r->marked) == 0 && total > 1)
			INC(r->ticks_before_mark);
		if (r->cancel_at && total == r->cancel_at) {
			/* Published by the arming thread after arm returned. */
			uint64_t until = now_ms() + 10000;
			while (!LOAD(r->every_id) && now_ms() < until)
				sleep_ms(1);
			STORE(r->every_cancel_rc, pc_timer_cancel(pc_ctx_runtime(ctx), LOAD(r->every_id)));
		}
		return 0;
	}
	case T_CANCEL_STALE: {
		if (!wait_for_mail(ctx))
			return -3;
		/* The id is published by the arming thread after arm returned,
		 * which may be after the timer fired. */
		uint64_t until = now_ms() + 10000;
		while (!LOAD(r->stale_id) && now_ms() < until)
			;
		STORE(r->cancel_rc, pc_timer_cancel(pc_ctx_runtime(ctx), LOAD(r->stale_id)));
		return 0;
	}
	case T_WAIT_GATE: {
		if (!wait_for_mail(ctx))
			return -4;
		STORE(r->mail_seen, 1);
		uint64_t until = now_ms() + 10000;
		while (!LOAD(r->gate) && now_ms() < until)
			sleep_ms(1);
		return 0;
	}
	case T_MARK:
		STORE(r->marked, 1);
		return 0;
	case T_EXIT:
		pc_exit(ctx, PC_EXIT_NORMAL);
		return 0;
	case T_ARM_SELF: {
		pc_msg_t *t = pc_msg_new(T_TICK, 8);
		uint64_t idx = pc_msg_u64(m);
		memcpy(pc_msg_data(t), &idx, 8);
		return pc_timer_after(pc_self(ctx), 5, t, NULL);
	}
	default:
		return 0;
	}
}

static void rec_stop(pc_ctx_t *ctx, void *state, int reason)
{
	(void)ctx;
	(void)reason;
	INC(((rec_t *)state)->stops);
}

static const pc_behavior_t rec_behavior = {"rec", rec_receive, rec_stop};

static pc_actor_t *spawn_rec(pc_runtime_t *rt, rec_t *r)
{
	pc_actor_t *a = NULL;
	cr_assert_eq(pc_spawn(rt, &rec_behavior, r, &a), 0);
	return a;
}

static pc_msg_t *tick(uint64_t i)
{
	pc_msg_t *m = pc_msg_new(T_TICK, sizeof(i));
	cr_assert_not_null(m);
	memcpy(pc_msg_data(m), &i, sizeof(i));
	return m;
}

static pc_timer_t after(pc_actor_t *a, uint64_t ms, uint64_t i)
{
	pc_timer_t id = 0;
	cr_assert_eq(pc_timer_after(a, ms, tick(i), &id), 0);
	cr_assert_neq(id, 0);
	return id;
}

/* ---- order and timing -------------------------------------------------- */

/* Armed before the runtime starts, all are overdue at the first advance and
 * fire in one batch: delivery must still follow the deadlines. */
Test(timers, order_within_one_batch)
{
	pc_runtime_t *rt = new_rt(2);
	enum { N = 50 };
	rec_t *r = new_rec(N + 1);
	pc_actor_t *a = spawn_rec(rt, r);
	/* Armed in increasing order so that deadlines strictly increase
	 * (arming in reverse could cross a millisecond and make a tie). */
	for (int i = 1; i <= N; i++)
		after(a, (uint64_t)i, (uint64_t)i);
	sleep_ms(N + 30);
	cr_assert_eq(pc_runtime_start(rt), 0);
	AWAIT(LOAD(r->total) == N, 5000);
	quiesce(rt);
	for (uint32_t k = 0; k < N; k++)
		cr_assert_eq(r->order[k], k + 1, "position %u holds timer %u", k, r->order[k]);
	pc_actor_release(a);
	FREE_RUNTIME_CHECKED(rt);
	free_rec(r);
}

Test(timers, order_and_never_early)
{
	pc_runtime_t *rt = start_rt(2);
	static const uint64_t delays[] = {0, 1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144};
	enum { N = sizeof(delays) / sizeof(delays[0]), REP = 3 };
	rec_t *r = new_rec(N * REP);
	pc_actor_t *a = spawn_rec(rt, r);
	uint64_t armed_ns[N * REP];
	for (int rep = 0; rep < REP; rep++) {
		for (int i = 0; i < N; i++) {
			int k = rep * N + i;
			armed_ns[k] = pc__clock_mono_ns();
			after(a, delays[i], (uint64_t)k);
		}
		AWAIT(LOAD(r->total) == (rep + 1) * N, 5000);
	}
	quiesce(rt);
	for (int rep = 0; rep < REP; rep++) {
		uint64_t prev = 0;
		for (int i = 0; i < N; i++) {
			int k = rep * N + i;
			cr_assert_eq(r->count[k], 1);
			uint64_t waited = r->at_ns[k] - armed_ns[k];
			cr_assert_geq(waited, delays[i] * 1000000u, "timer of %llu ms delivered after %llu ns",
				      (unsigned long long)delays[i], (unsigned long long)waited);
			cr_assert_lt(waited, 5000000000ull, "absurdly late");
			/* Later deadlines (armed later, longer delay) never come first. */
			cr_assert_geq(r->at_ns[k], prev);
			prev = r->at_ns[k];
		}
	}
	cr_assert_eq(stats(rt).timers_fired, (uint64_t)N * REP);
	pc_actor_release(a);
	FREE_RUNTIME_CHECKED(rt);
	free_rec(r);
}

Test(timers, timer_from_a_worker)
{
	pc_runtime_t *rt = start_rt(2);
	rec_t *r = new_rec(4);
	pc_actor_t *a = spawn_rec(rt, r);
	cr_assert_eq(pc_send_u64(a, T_ARM_SELF, 3), 0);
	AWAIT(LOAD(r->count[3]) == 1, 5000);
	pc_actor_release(a);
	FREE_RUNTIME_CHECKED(rt);
	free_rec(r);
}

Test(timers, wait_quiescent_waits_for_timers)
{
	pc_runtime_t *rt = start_rt(2);
	rec_t *r = new_rec(2);
	pc_actor_t *a = spawn_rec(rt, r);
	uint64_t t0 = pc__clock_mono_ns();
	after(a, 120, 1);
	cr_assert_eq(pc_runtime_wait_quiescent(rt, 10000), 0);
	cr_assert_eq(LOAD(r->count[1]), 1, "quiescent before the timer was handled");
	cr_assert_geq(pc__clock_mono_ns() - t0, 120000000u);
	cr_assert_eq(pending_timers(rt), 0);
	/* With a timer still far away, it is not quiescent. */
	pc_timer_t id = after(a, 60000, 0);
	cr_assert_eq(pc_runtime_wait_quiescent(rt, 30), PC_ETIMEDOUT);
	cr_assert(pc_timer_cancel(rt, id));
	cr_assert_eq(pc_runtime_wait_quiescent(rt, 10000), 0);
	pc_actor_release(a);
	FREE_RUNTIME_CHECKED(rt);
	free_rec(r);
}

/* ---- cancel ------------------------------------------------------------ */

Test(timers, cancel_before_fire)
{
	pc_runtime_t *rt = start_rt(2);
	rec_t *r = new_rec(16);
	pc_actor_t *a = spawn_rec(rt, r);
	pc_timer_t ids[16];
	/* The ones to cancel are far away, so that cancel surely comes first
	 * however slow this machine; the others fire soon. */
	for (int i = 0; i < 16; i++)
		ids[i] = after(a, i % 2 ? 20 + (uint64_t)i : 600000, (uint64_t)i);
	for (int i = 0; i < 16; i += 2)
		cr_assert(pc_timer_cancel(rt, ids[i]), "cancel %d", i);
	for (int i = 0; i < 16; i += 2)
		cr_assert_not(pc_timer_cancel(rt, ids[i]), "second cancel %d", i);
	quiesce(rt);
	for (int i = 0; i < 16; i++)
		cr_assert_eq(r->count[i], i % 2, "timer %d", i);
	/* After delivery: too late. */
	for (int i = 1; i < 16; i += 2)
		cr_assert_not(pc_timer_cancel(rt, ids[i]));
	cr_assert_not(pc_timer_cancel(rt, 0));
	cr_assert_not(pc_timer_cancel(rt, 0xFFFFFFFFull));
	cr_assert_not(pc_timer_cancel(rt, ((uint64_t)7 << 32) | 1));
	cr_assert_not(pc_timer_cancel(NULL, ids[1]));
	pc_actor_release(a);
	FREE_RUNTIME_CHECKED(rt);
	free_rec(r);
}

/* An id whose slot was reused by a later timer cancels nothing. */
Test(timers, stale_id_does_not_cancel_reused_slot)
{
	pc_runtime_t *rt = start_rt(2);
	rec_t *r = new_rec(4);
	pc_actor_t *a = spawn_rec(rt, r);
	pc_timer_t t1 = after(a, 50000, 1);
	cr_assert(pc_timer_cancel(rt, t1));
	pc_timer_t t2 = after(a, 20, 2);
	cr_assert_neq(t1, t2);
	cr_assert_not(pc_timer_cancel(rt, t1));
	AWAIT(LOAD(r->count[2]) == 1, 5000);
	cr_assert_not(pc_timer_cancel(rt, t2));
	pc_actor_release(a);
	FREE_RUNTIME_CHECKED(rt);
	free_rec(r);
}

/* The timer has fired and its message waits in the mailbox of an actor
 * busy in a handler; that handler cancels it: it must never be handled. */
Test(timers, cancel_stale_from_inside)
{
	pc_runtime_t *rt = start_rt(2);
	for (int round = 0; round < 5; round++) {
		rec_t *r = new_rec(2);
		pc_actor_t *a = spawn_rec(rt, r);
		uint64_t fired0 = stats(rt).timers_fired;
		/* Busy first, so that the timer cannot be handled before. */
		cr_assert_eq(pc_send_u64(a, T_CANCEL_STALE, 0), 0);
		STORE(r->stale_id, after(a, (uint64_t)round, 1));
		AWAIT(LOAD(r->cancel_rc) != -1, 15000);
		cr_assert_eq(LOAD(r->cancel_rc), 1, "cancel of the in-flight timer returned false");
		cr_assert_eq(pc_send_u64(a, T_MARK, 0), 0);
		AWAIT(LOAD(r->marked) == 1, 5000);
		quiesce(rt);
		cr_assert_eq(r->count[1], 0, "a cancelled timer was handled");
		cr_assert_eq(stats(rt).timers_fired, fired0);
		cr_assert_eq(pending_timers(rt), 0);
		cr_assert_eq(LOAD(r->stops), 0);
		cr_assert_eq(pc_send_u64(a, T_EXIT, 0), 0);
		pc_actor_release(a);
		quiesce(rt);
		cr_assert_eq(live_count(rt), 0);
		free_rec(r);
	}
	FREE_RUNTIME_CHECKED(rt);
}

Test(timers, cancel_stale_from_outside)
{
	pc_runtime_t *rt = start_rt(2);
	for (int round = 0; round < 5; round++) {
		rec_t *r = new_rec(2);
		pc_actor_t *a = spawn_rec(rt, r);
		cr_assert_eq(pc_send_u64(a, T_WAIT_GATE, 0), 0);
		pc_timer_t id = after(a, (uint64_t)round * 2, 1);
		AWAIT(LOAD(r->mail_seen) == 1, 15000);
		/* Fired and queued; not handled yet. */
		cr_assert(pc_timer_cancel(rt, id));
		cr_assert_not(pc_timer_cancel(rt, id));
		STORE(r->gate, 1);
		cr_assert_eq(pc_send_u64(a, T_MARK, 0), 0);
		AWAIT(LOAD(r->marked) == 1, 5000);
		quiesce(rt);
		cr_assert_eq(r->count[1], 0, "a cancelled timer was handled");
		cr_assert_eq(pending_timers(rt), 0);
		cr_assert_eq(pc_send_u64(a, T_EXIT, 0), 0);
		pc_actor_release(a);
		quiesce(rt);
		cr_assert_eq(live_count(rt), 0);
		free_rec(r);
	}
	FREE_RUNTIME_CHECKED(rt);
}

/* 100,000 timers with random delays, a random half of them cancelled
 * right away: exactly those whose cancel returned false arrive, once. */
static uint64_t rng = 0x2545F4914F6CDD1Dull;

static uint64_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

Test(timers, many_random_timers_with_cancels, .timeout = 120)
{
	pc_runtime_t *rt = start_rt(2);
	enum { N = 100000, TARGETS = 4 };
	rec_t *r[TARGETS];
	pc_actor_t *a[TARGETS];
	for (int t = 0; t < TARGETS; t++) {
		r[t] = new_rec(N);
		a[t] = spawn_rec(rt, r[t]);
	}
	pc_timer_t *ids = calloc(N, sizeof(*ids));
	bool *cancelled = calloc(N, sizeof(bool));
	bool *victim = calloc(N, sizeof(bool));
	for (uint32_t i = 0; i < N; i++)
		victim[i] = rnd() & 1;
	uint64_t fired0 = stats(rt).timers_fired;
	for (uint32_t i = 0; i < N; i++) {
		ids[i] = after(a[i % TARGETS], rnd() % 201, i);
		/* Cancel a random earlier victim now and then, the rest below. */
		if (i % 16 == 15) {
			uint32_t j = (uint32_t)(rnd() % (i + 1));
			if (!cancelled[j] && victim[j])
				cancelled[j] = pc_timer_cancel(rt, ids[j]);
		}
	}
	int true_cancels = 0, false_cancels = 0;
	for (uint32_t i = 0; i < N; i++) {
		if (!victim[i])
			continue;
		if (!cancelled[i])
			cancelled[i] = pc_timer_cancel(rt, ids[i]);
		if (cancelled[i])
			true_cancels++;
		else
			false_cancels++;
	}
	quiesce(rt);
	cr_assert_eq(pending_timers(rt), 0);
	uint64_t delivered = 0;
	for (uint32_t i = 0; i < N; i++) {
		int c = r[i % TARGETS]->count[i];
		cr_assert_eq(c, cancelled[i] ? 0 : 1, "timer %u: cancelled %d, delivered %d times", i,
			     cancelled[i], c);
		delivered += (uint64_t)c;
	}
	cr_assert_gt(true_cancels, 0);
	cr_assert_eq(delivered, (uint64_t)N - (uint64_t)true_cancels);
	cr_assert_eq(stats(rt).timers_fired - fired0, delivered);
	for (int t = 0; t < TARGETS; t++)
		pc_actor_release(a[t]);
	FREE_RUNTIME_CHECKED(rt);
	for (int t = 0; t < TARGETS; t++)
		free_rec(r[t]);
	free(ids);
	free(cancelled);
	free(victim);
	cr_log_info("%d cancelled in time, %d too late", true_cancels, false_cancels);
}

/* ---- periodic ---------------------------------------------------------- */

Test(timers, every_repeats_skips_and_cancels_from_inside)
{
	pc_runtime_t *rt = start_rt(2);
	rec_t *r = new_rec(2);
	r->block_first_ms = 100; /* ~10 periods */
	r->cancel_at = 6;
	pc_actor_t *a = spawn_rec(rt, r);
	pc_timer_t id = 0;
	cr_assert_eq(pc_timer_every(a, 10, tick(0), &id), 0);
	STORE(r->every_id, id);
	AWAIT(LOAD(r->every_cancel_rc) != -1, 10000);
	cr_assert_eq(LOAD(r->every_cancel_rc), 1);
	cr_assert_eq(LOAD(r->ticks_before_mark), 1,
		     "ticks accumulated while the handler was busy (%d queued)", r->ticks_before_mark);
	/* Cancelled from inside on tick 6: nothing more, ever. */
	sleep_ms(60);
	quiesce(rt);
	cr_assert_eq(LOAD(r->total), 6);
	cr_assert_eq(pending_timers(rt), 0);
	cr_assert_not(pc_timer_cancel(rt, id));
	pc_actor_release(a);
	FREE_RUNTIME_CHECKED(rt);
	free_rec(r);
}

Test(timers, every_cancel_from_outside)
{
	pc_runtime_t *rt = start_rt(2);
	rec_t *r = new_rec(2);
	pc_actor_t *a = spawn_rec(rt, r);
	pc_timer_t id = 0;
	uint64_t t0 = pc__clock_mono_ns();
	cr_assert_eq(pc_timer_every(a, 5, tick(1), &id), 0);
	AWAIT(LOAD(r->total) >= 4, 10000);
	/* Never early: the fourth tick is at least four periods in. */
	cr_assert_geq(pc__clock_mono_ns() - t0, 4 * 5000000u);
	cr_assert(pc_timer_cancel(rt, id));
	cr_assert_not(pc_timer_cancel(rt, id));
	quiesce(rt);
	int n = LOAD(r->total);
	sleep_ms(30);
	quiesce(rt);
	cr_assert_eq(LOAD(r->total), n);
	cr_assert_eq(pending_timers(rt), 0);
	pc_actor_release(a);
	FREE_RUNTIME_CHECKED(rt);
	free_rec(r);
}

Test(timers, bad_arguments)
{
	pc_runtime_t *rt = start_rt(1);
	rec_t *r = new_rec(2);
	pc_actor_t *a = spawn_rec(rt, r);
	pc_timer_t id = 77;
	cr_assert_eq(pc_timer_every(a, 0, tick(0), &id), PC_EINVAL); /* msg freed: LSan */
	cr_assert_eq(id, 0);
	cr_assert_eq(pc_timer_after(NULL, 5, tick(0), &id), PC_EINVAL);
	cr_assert_eq(pc_timer_after(a, 5, NULL, &id), PC_EINVAL);
	cr_assert_eq(pc_timer_every(NULL, 5, tick(0), NULL), PC_EINVAL);
	cr_assert_eq(pc_timer_after(a, UINT64_MAX, tick(0), &id), PC_EINVAL);
	/* An enormous but finite delay is accepted and can be cancelled. */
	cr_assert_eq(pc_timer_after(a, UINT64_MAX / 2, tick(0), &id), 0);
	cr_assert(pc_timer_cancel(rt, id));
	pc_actor_release(a);
	FREE_RUNTIME_CHECKED(rt);
	free_rec(r);
}

/* ---- targets that stop, runtimes that stop ------------------------------ */

Test(timers, one_shot_to_stopped_target_is_released)
{
	pc_runtime_t *rt = start_rt(2);
	rec_t *r = new_rec(2);
	pc_actor_t *a = spawn_rec(rt, r);
	cr_assert_eq(pc_send_u64(a, T_EXIT, 0), 0);
	AWAIT(LOAD(r->stops) == 1, 5000);
	quiesce(rt);
	uint64_t dead0 = stats(rt).dead_letters;
	after(a, 30, 1);
	pc_actor_release(a); /* only the timer holds it now */
	quiesce(rt);
	cr_assert_eq(pending_timers(rt), 0);
	cr_assert_eq(stats(rt).dead_letters, dead0 + 1);
	cr_assert_eq(r->count[1], 0);
	cr_assert_eq(live_count(rt), 0, "the timer kept its stopped target");
	FREE_RUNTIME_CHECKED(rt);
	free_rec(r);
}

Test(timers, periodic_to_stopped_target_is_released)
{
	pc_runtime_t *rt = start_rt(2);
	rec_t *r = new_rec(2);
	pc_actor_t *a = spawn_rec(rt, r);
	pc_timer_t id = 0;
	cr_assert_eq(pc_timer_every(a, 5, tick(1), &id), 0);
	AWAIT(LOAD(r->total) >= 2, 5000);
	cr_assert_eq(pc_send_u64(a, T_EXIT, 0), 0);
	pc_actor_release(a);
	AWAIT(LOAD(r->stops) == 1, 5000);
	/* Nobody will ever handle its ticks: the timer must let go. */
	cr_assert_eq(pc_runtime_wait_quiescent(rt, 5000), 0, "a periodic timer to a stopped actor stays armed");
	cr_assert_eq(pending_timers(rt), 0);
	cr_assert_eq(live_count(rt), 0);
	cr_assert_not(pc_timer_cancel(rt, id));
	FREE_RUNTIME_CHECKED(rt);
	free_rec(r);
}

Test(timers, pending_timers_freed_at_stop)
{
	pc_runtime_t *rt = start_rt(2);
	rec_t *r = new_rec(1000);
	pc_actor_t *a = spawn_rec(rt, r);
	for (int i = 0; i < 500; i++)
		after(a, 60000 + (uint64_t)i, (uint64_t)i);
	for (int i = 0; i < 5; i++) {
		pc_timer_t id;
		cr_assert_eq(pc_timer_every(a, 3 + (uint64_t)i, tick(999), &id), 0);
	}
	/* And one that has fired into the mailbox of a busy actor. */
	rec_t *b = new_rec(2);
	pc_actor_t *busy = spawn_rec(rt, b);
	cr_assert_eq(pc_send_u64(busy, T_WAIT_GATE, 0), 0);
	after(busy, 1, 1);
	AWAIT(LOAD(b->mail_seen) == 1, 10000);
	STORE(b->gate, 1);
	pc_actor_release(a);
	pc_actor_release(busy);
	FREE_RUNTIME_CHECKED(rt); /* LSan: entries, messages, templates, targets */
	free_rec(r);
	free_rec(b);
}

/* Timers armed from several threads at once, some cancelled by others. */
typedef struct armer {
	pc_actor_t *to;
	uint32_t base, n;
	pc_timer_t *ids;
} armer_t;

static void *armer_main(void *arg)
{
	armer_t *m = arg;
	for (uint32_t i = 0; i < m->n; i++) {
		pc_msg_t *t = pc_msg_new(T_TICK, 8);
		uint64_t idx = m->base + i;
		memcpy(pc_msg_data(t), &idx, 8);
		pc_timer_t id = 0;
		pc_timer_after(m->to, idx % 7, t, &id);
		__atomic_store_n(&m->ids[m->base + i], id, __ATOMIC_RELEASE);
	}
	return NULL;
}

Test(timers, concurrent_arm_and_cancel)
{
	pc_runtime_t *rt = start_rt(2);
	enum { T = 3, PER = 3000, N = T * PER };
	rec_t *r = new_rec(N);
	pc_actor_t *a = spawn_rec(rt, r);
	pc_timer_t *ids = calloc(N, sizeof(*ids));
	bool *cancelled = calloc(N, sizeof(bool));
	armer_t m[T];
	pthread_t th[T];
	for (int t = 0; t < T; t++) {
		m[t] = (armer_t){a, (uint32_t)t * PER, PER, ids};
		pthread_create(&th[t], NULL, armer_main, &m[t]);
	}
	/* Cancel while they are being armed and firing. */
	for (int pass = 0; pass < 3; pass++)
		for (uint32_t i = 0; i < N; i += 3) {
			pc_timer_t id = __atomic_load_n(&ids[i], __ATOMIC_ACQUIRE);
			if (id && !cancelled[i])
				cancelled[i] = pc_timer_cancel(rt, id);
		}
	for (int t = 0; t < T; t++)
		pthread_join(th[t], NULL);
	quiesce(rt);
	for (uint32_t i = 0; i < N; i++)
		cr_assert_eq(r->count[i], cancelled[i] ? 0 : 1, "timer %u", i);
	pc_actor_release(a);
	FREE_RUNTIME_CHECKED(rt);
	free_rec(r);
	free(ids);
	free(cancelled);
}
