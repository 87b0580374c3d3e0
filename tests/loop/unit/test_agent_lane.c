/*
 * The global lane: the cap holds, permits go highest priority first and
 * FIFO within a priority, queued tickets can be withdrawn, release is
 * idempotent, WAITING / GRANTED notices say where a request stood, the task
 * timeout takes a permit back (and progress postpones it), set_max grants
 * at once, and a thousand tickets from several threads with random holds
 * are each granted exactly once without the cap ever being exceeded.
 *
 * "Holder" actors record the notices under a lock. A ticket marked `auto`
 * is released by its holder once it has held the permit for its hold time;
 * the others are released by the test thread. `active_obs` counts the
 * permits the holders believe they hold: it drops before the release is
 * sent, so it can never be below the lane's own count, and its maximum
 * must stay within the cap.
 */
#include <criterion/criterion.h>

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "agents/session/lane.h"
#include "agents/session/queue_policy.h"
#include "test_util.h"

#define NT 1100u

enum { RELEASE_ME = 0x5100 };

typedef struct lt {
	pthread_mutex_t lock;
	pc_lane_t *lane;
	bool auto_rel[NT];
	uint32_t hold_ms[NT];
	uint32_t granted[NT];
	uint32_t waiting[NT];
	uint32_t expired[NT];
	pc_lane_notice_t grant_n[NT];
	pc_lane_notice_t wait_n[NT];
	uint64_t granted_at[NT];
	uint64_t expired_at[NT];
	uint32_t order[NT]; /* tickets in grant order */
	uint32_t norder;
	uint32_t total_granted;
	uint32_t active_obs;
	uint32_t max_obs;
	uint32_t bad;
} lt_t;

static lt_t *keep; /* reachable for LeakSanitizer */

static int holder_receive(pc_ctx_t *ctx, void *state, pc_msg_t *msg)
{
	lt_t *t = state;
	if (msg->type == RELEASE_ME) {
		pthread_mutex_lock(&t->lock);
		t->active_obs--;
		pthread_mutex_unlock(&t->lock);
		return pc_lane_release(t->lane, pc_msg_u64(msg));
	}
	if (msg->size != sizeof(pc_lane_notice_t))
		return 0;
	const pc_lane_notice_t *n = pc_msg_cdata(msg);
	if (n->ticket >= NT || n->tag != n->ticket + 1000) {
		pthread_mutex_lock(&t->lock);
		t->bad++;
		pthread_mutex_unlock(&t->lock);
		return 0;
	}
	uint32_t k = (uint32_t)n->ticket;
	int rc = 0;
	pthread_mutex_lock(&t->lock);
	switch (msg->type) {
	case PC_MSG_LANE_GRANTED:
		t->granted[k]++;
		t->grant_n[k] = *n;
		t->granted_at[k] = now_ms();
		if (t->norder < NT)
			t->order[t->norder++] = k;
		t->total_granted++;
		if (++t->active_obs > t->max_obs)
			t->max_obs = t->active_obs;
		if (t->auto_rel[k]) {
			pc_msg_t *m = pc_msg_new(RELEASE_ME, sizeof(uint64_t));
			if (!m) {
				rc = PC_ENOMEM;
				break;
			}
			*(uint64_t *)pc_msg_data(m) = k;
			rc = pc_timer_after(pc_self(ctx), t->hold_ms[k], m, NULL);
		}
		break;
	case PC_MSG_LANE_WAITING:
		t->waiting[k]++;
		t->wait_n[k] = *n;
		break;
	case PC_MSG_LANE_EXPIRED:
		t->expired[k]++;
		t->expired_at[k] = now_ms();
		t->active_obs--;
		break;
	default:
		t->bad++;
		break;
	}
	pthread_mutex_unlock(&t->lock);
	return rc;
}

static const pc_behavior_t holder_b = {.name = "holder", .receive = holder_receive};

typedef struct fx {
	pc_runtime_t *rt;
	lt_t *t;
	pc_actor_t *holders[8];
	uint32_t nholders;
} fx_t;

static fx_t fx_new(uint32_t cap, uint32_t nholders)
{
	fx_t f = {.rt = start_rt(2), .nholders = nholders};
	f.t = calloc(1, sizeof(*f.t));
	cr_assert_not_null(f.t);
	keep = f.t;
	pthread_mutex_init(&f.t->lock, NULL);
	cr_assert_eq(pc_lane_new(f.rt, cap, &f.t->lane), 0);
	for (uint32_t i = 0; i < nholders; i++)
		cr_assert_eq(pc_spawn(f.rt, &holder_b, f.t, &f.holders[i]), 0);
	return f;
}

static void fx_free(fx_t *f)
{
	/* the holders go first: one may still be releasing a ticket (the lane
	 * handle must outlive every call on it) */
	for (uint32_t i = 0; i < f->nholders; i++)
		pc_actor_stop(f->holders[i], PC_EXIT_NORMAL);
	for (uint32_t i = 0; i < f->nholders; i++) {
		AWAIT(pc_actor_stopped(f->holders[i]), 5000);
		pc_actor_release(f->holders[i]);
	}
	pc_lane_free(f->t->lane);
	pc_runtime_free(f->rt);
	pthread_mutex_destroy(&f->t->lock);
	free(f->t);
	keep = NULL;
	ASSERT_NO_LEAKS();
}

static uint32_t get(fx_t *f, const uint32_t *field)
{
	pthread_mutex_lock(&f->t->lock);
	uint32_t v = *field;
	pthread_mutex_unlock(&f->t->lock);
	return v;
}

/* Asks for `ticket`; auto-released after hold_ms when `hold_ms` >= 0. */
static void acquire(fx_t *f, uint32_t ticket, int prio, int hold_ms, uint64_t timeout_ms)
{
	pthread_mutex_lock(&f->t->lock);
	f->t->auto_rel[ticket] = hold_ms >= 0;
	f->t->hold_ms[ticket] = hold_ms >= 0 ? (uint32_t)hold_ms : 0;
	pthread_mutex_unlock(&f->t->lock);
	cr_assert_eq(pc_lane_acquire(f->t->lane, ticket, prio, f->holders[ticket % f->nholders], ticket + 1000,
				     timeout_ms),
		     0);
}

/* The test thread gives back a permit it holds. */
static void release(fx_t *f, uint32_t ticket)
{
	pthread_mutex_lock(&f->t->lock);
	f->t->active_obs--;
	pthread_mutex_unlock(&f->t->lock);
	cr_assert_eq(pc_lane_release(f->t->lane, ticket), 0);
}

static pc_lane_stats_t lstats(fx_t *f)
{
	pc_lane_stats_t s;
	pc_lane_stats(f->t->lane, &s);
	return s;
}

/* ---- tests ------------------------------------------------------------------ */

Test(lane, argument_checks)
{
	pc_runtime_t *rt = start_rt(1);
	pc_lane_t *l = NULL;
	cr_assert_eq(pc_lane_new(rt, 0, &l), PC_EINVAL);
	cr_assert_eq(pc_lane_new(NULL, 1, &l), PC_EINVAL);
	cr_assert_eq(pc_lane_new(rt, 1, &l), 0);
	cr_assert_eq(pc_lane_acquire(l, 1, 0, NULL, 0, 0), PC_EINVAL);
	cr_assert_eq(pc_lane_set_max(l, 0), PC_EINVAL);
	cr_assert_eq(pc_lane_release(NULL, 1), PC_EINVAL);
	pc_lane_stats_t s;
	pc_lane_stats(l, &s);
	cr_assert_eq(s.max, 1u);
	cr_assert_eq(s.active, 0u);
	pc_lane_free(l);
	pc_lane_free(NULL);
	pc_runtime_free(rt);
	ASSERT_NO_LEAKS();
}

Test(lane, cap_respected)
{
	fx_t f = fx_new(3, 4);
	for (uint32_t i = 0; i < 60; i++)
		acquire(&f, i, PC_QUEUE_NORMAL, (int)(i % 5), 0);
	AWAIT(get(&f, &f.t->total_granted) == 60, 10000);
	AWAIT(lstats(&f).active == 0, 5000);
	pc_lane_stats_t s = lstats(&f);
	cr_assert_leq(get(&f, &f.t->max_obs), 3u);
	cr_assert_leq(s.peak_active, 3u);
	cr_assert_geq(s.peak_active, 1u);
	cr_assert_eq(s.granted, 60u);
	cr_assert_eq(s.queued, 0u);
	for (uint32_t i = 0; i < 60; i++)
		cr_assert_eq(get(&f, &f.t->granted[i]), 1u, "ticket %u", i);
	cr_assert_eq(get(&f, &f.t->bad), 0u);
	fx_free(&f);
}

Test(lane, priority_order_and_waiting_notices)
{
	fx_t f = fx_new(1, 1);
	acquire(&f, 0, PC_QUEUE_NORMAL, -1, 0);
	AWAIT(get(&f, &f.t->granted[0]) == 1, 5000);
	cr_assert_eq(get(&f, &f.t->waiting[0]), 0u, "granted at once: no WAITING");
	const int prio[] = {0, PC_QUEUE_BACKGROUND, PC_QUEUE_NORMAL, PC_QUEUE_FOREGROUND,
			    PC_QUEUE_NORMAL, PC_QUEUE_FOREGROUND, PC_QUEUE_BACKGROUND};
	const uint32_t ahead[] = {0, 0, 0, 0, 2, 1, 5};
	for (uint32_t i = 1; i <= 6; i++)
		acquire(&f, i, prio[i], 0, 0);
	for (uint32_t i = 1; i <= 6; i++) {
		AWAIT(get(&f, &f.t->waiting[i]) == 1, 5000);
		pthread_mutex_lock(&f.t->lock);
		pc_lane_notice_t n = f.t->wait_n[i];
		pthread_mutex_unlock(&f.t->lock);
		cr_assert_eq(n.ticket, i);
		cr_assert_eq(n.tag, i + 1000u);
		cr_assert_eq(n.queued_ahead, ahead[i], "ticket %u", i);
		cr_assert_eq(n.active, 1u);
	}
	cr_assert_eq(lstats(&f).queued, 6u);
	sleep_ms(60);
	release(&f, 0);
	AWAIT(get(&f, &f.t->total_granted) == 7, 5000);
	const uint32_t want[] = {0, 3, 5, 2, 4, 1, 6};
	pthread_mutex_lock(&f.t->lock);
	for (uint32_t i = 0; i < 7; i++)
		cr_assert_eq(f.t->order[i], want[i], "grant %u", i);
	for (uint32_t i = 1; i <= 6; i++) {
		cr_assert_eq(f.t->grant_n[i].queued_ahead, ahead[i], "ticket %u", i);
		cr_assert_geq(f.t->grant_n[i].wait_ms, 50u, "ticket %u", i);
	}
	cr_assert_eq(f.t->max_obs, 1u);
	pthread_mutex_unlock(&f.t->lock);
	fx_free(&f);
}

Test(lane, fifo_within_priority)
{
	fx_t f = fx_new(1, 3);
	acquire(&f, 0, PC_QUEUE_BACKGROUND, -1, 0);
	AWAIT(get(&f, &f.t->granted[0]) == 1, 5000);
	for (uint32_t i = 1; i <= 30; i++)
		acquire(&f, i, PC_QUEUE_BACKGROUND, 0, 0);
	AWAIT(get(&f, &f.t->waiting[30]) == 1, 5000);
	release(&f, 0);
	AWAIT(get(&f, &f.t->total_granted) == 31, 5000);
	pthread_mutex_lock(&f.t->lock);
	for (uint32_t i = 0; i <= 30; i++)
		cr_assert_eq(f.t->order[i], i);
	pthread_mutex_unlock(&f.t->lock);
	fx_free(&f);
}

Test(lane, cancel_queued_ticket)
{
	fx_t f = fx_new(1, 1);
	acquire(&f, 0, PC_QUEUE_NORMAL, -1, 0);
	for (uint32_t i = 1; i <= 3; i++)
		acquire(&f, i, PC_QUEUE_NORMAL, 0, 0);
	AWAIT(get(&f, &f.t->waiting[3]) == 1, 5000);
	cr_assert_eq(pc_lane_release(f.t->lane, 2), 0); /* withdrawn while queued */
	AWAIT(lstats(&f).queued == 2, 5000);
	release(&f, 0);
	AWAIT(get(&f, &f.t->total_granted) == 3, 5000);
	AWAIT(lstats(&f).active == 0, 5000);
	sleep_ms(30);
	pthread_mutex_lock(&f.t->lock);
	cr_assert_eq(f.t->granted[2], 0u);
	cr_assert_eq(f.t->order[1], 1u);
	cr_assert_eq(f.t->order[2], 3u);
	pthread_mutex_unlock(&f.t->lock);
	cr_assert_eq(lstats(&f).granted, 3u);
	fx_free(&f);
}

Test(lane, release_idempotent)
{
	fx_t f = fx_new(1, 1);
	acquire(&f, 0, PC_QUEUE_NORMAL, -1, 0);
	AWAIT(get(&f, &f.t->granted[0]) == 1, 5000);
	release(&f, 0);
	cr_assert_eq(pc_lane_release(f.t->lane, 0), 0); /* again: nothing */
	cr_assert_eq(pc_lane_release(f.t->lane, 77), 0); /* never asked: nothing */
	acquire(&f, 1, PC_QUEUE_NORMAL, -1, 0);
	acquire(&f, 2, PC_QUEUE_NORMAL, -1, 0);
	AWAIT(get(&f, &f.t->granted[1]) == 1, 5000);
	/* Had the second release counted, the cap would let 2 in too. */
	AWAIT(get(&f, &f.t->waiting[2]) == 1, 5000);
	cr_assert_eq(get(&f, &f.t->granted[2]), 0u);
	pc_lane_stats_t s = lstats(&f);
	cr_assert_eq(s.active, 1u);
	cr_assert_eq(s.queued, 1u);
	release(&f, 1);
	AWAIT(get(&f, &f.t->granted[2]) == 1, 5000);
	release(&f, 2);
	AWAIT(lstats(&f).active == 0, 5000);
	fx_free(&f);
}

Test(lane, task_timeout_expires_and_slot_reused)
{
	fx_t f = fx_new(1, 1);
	uint64_t t0 = now_ms();
	acquire(&f, 0, PC_QUEUE_NORMAL, -1, 80);
	acquire(&f, 1, PC_QUEUE_NORMAL, -1, 0);
	AWAIT(get(&f, &f.t->expired[0]) == 1, 5000);
	AWAIT(get(&f, &f.t->granted[1]) == 1, 5000);
	pthread_mutex_lock(&f.t->lock);
	cr_assert_geq(f.t->expired_at[0] - t0, 80u);
	cr_assert_eq(f.t->order[1], 1u);
	pthread_mutex_unlock(&f.t->lock);
	pc_lane_stats_t s = lstats(&f);
	cr_assert_eq(s.expired, 1u);
	cr_assert_eq(s.active, 1u);
	/* A late release of the expired ticket changes nothing. */
	cr_assert_eq(pc_lane_release(f.t->lane, 0), 0);
	acquire(&f, 2, PC_QUEUE_NORMAL, -1, 0);
	AWAIT(get(&f, &f.t->waiting[2]) == 1, 5000);
	cr_assert_eq(get(&f, &f.t->granted[2]), 0u);
	release(&f, 1);
	AWAIT(get(&f, &f.t->granted[2]) == 1, 5000);
	release(&f, 2);
	sleep_ms(120);
	cr_assert_eq(get(&f, &f.t->expired[0]), 1u);
	cr_assert_eq(lstats(&f).expired, 1u);
	fx_free(&f);
}

Test(lane, progress_postpones_expiry)
{
	fx_t f = fx_new(1, 1);
	acquire(&f, 0, PC_QUEUE_NORMAL, -1, 400);
	AWAIT(get(&f, &f.t->granted[0]) == 1, 5000);
	uint64_t t0 = now_ms();
	while (now_ms() - t0 < 900) {
		cr_assert_eq(pc_lane_progress(f.t->lane, 0), 0);
		sleep_ms(40);
	}
	cr_assert_eq(get(&f, &f.t->expired[0]), 0u, "expired despite progress");
	cr_assert_eq(pc_lane_progress(f.t->lane, 0), 0);
	uint64_t last = now_ms();
	AWAIT(get(&f, &f.t->expired[0]) == 1, 5000);
	pthread_mutex_lock(&f.t->lock);
	cr_assert_geq(f.t->expired_at[0] - last, 400u - 5u);
	pthread_mutex_unlock(&f.t->lock);
	fx_free(&f);
}

Test(lane, set_max_grows_and_grants)
{
	fx_t f = fx_new(1, 2);
	for (uint32_t i = 0; i < 5; i++)
		acquire(&f, i, PC_QUEUE_NORMAL, -1, 0);
	AWAIT(get(&f, &f.t->waiting[4]) == 1, 5000);
	cr_assert_eq(get(&f, &f.t->total_granted), 1u);
	cr_assert_eq(pc_lane_set_max(f.t->lane, 3), 0);
	AWAIT(get(&f, &f.t->total_granted) == 3, 5000);
	sleep_ms(30);
	cr_assert_eq(get(&f, &f.t->granted[3]), 0u);
	cr_assert_eq(lstats(&f).max, 3u);
	cr_assert_eq(pc_lane_set_max(f.t->lane, 5), 0);
	AWAIT(get(&f, &f.t->total_granted) == 5, 5000);
	pc_lane_stats_t s = lstats(&f);
	cr_assert_eq(s.active, 5u);
	cr_assert_eq(s.peak_active, 5u);
	cr_assert_eq(s.queued, 0u);
	/* Shrinking takes nothing back; new requests wait below the cap. */
	cr_assert_eq(pc_lane_set_max(f.t->lane, 2), 0);
	for (uint32_t i = 0; i < 4; i++)
		release(&f, i);
	acquire(&f, 5, PC_QUEUE_NORMAL, -1, 0);
	AWAIT(get(&f, &f.t->granted[5]) == 1, 5000);
	acquire(&f, 6, PC_QUEUE_NORMAL, -1, 0);
	AWAIT(get(&f, &f.t->waiting[6]) == 1, 5000);
	release(&f, 4);
	release(&f, 5);
	AWAIT(get(&f, &f.t->granted[6]) == 1, 5000);
	release(&f, 6);
	fx_free(&f);
}

/* The lane goes away with permits held and requests queued, timers armed:
 * every holder reference and timer goes with it. */
Test(lane, free_releases_holders)
{
	fx_t f = fx_new(2, 2);
	uint64_t live0 = stats(f.rt).actors_live; /* the lane and two holders among them */
	for (uint32_t i = 0; i < 6; i++)
		acquire(&f, i, PC_QUEUE_NORMAL, -1, 600000);
	AWAIT(get(&f, &f.t->waiting[5]) == 1, 5000);
	pc_lane_free(f.t->lane);
	f.t->lane = NULL;
	/* The lane's memory goes: no 10-minute timer keeps it. */
	AWAIT(stats(f.rt).actors_live == live0 - 1, 5000);
	for (uint32_t i = 0; i < 2; i++) {
		pc_actor_stop(f.holders[i], PC_EXIT_NORMAL);
		pc_actor_release(f.holders[i]);
	}
	f.nholders = 0;
	/* The holders' too: the lane kept no reference to them. */
	AWAIT(stats(f.rt).actors_live == live0 - 3, 5000);
	fx_free(&f);
}

/* ---- stress ----------------------------------------------------------------- */

typedef struct feeder {
	fx_t *f;
	uint32_t first, count;
	uint64_t seed;
	int rc;
} feeder_t;

static void *feed(void *arg)
{
	feeder_t *fd = arg;
	for (uint32_t i = fd->first; i < fd->first + fd->count; i++) {
		int prio = (int)rnd_below(&fd->seed, 3) - 1;
		lt_t *t = fd->f->t;
		pthread_mutex_lock(&t->lock);
		t->auto_rel[i] = true;
		t->hold_ms[i] = rnd_below(&fd->seed, 4);
		pthread_mutex_unlock(&t->lock);
		int rc = pc_lane_acquire(t->lane, i, prio, fd->f->holders[i % fd->f->nholders], i + 1000, 0);
		if (rc != 0)
			fd->rc = rc;
		if (rnd_below(&fd->seed, 8) == 0)
			sleep_ms(1);
	}
	return NULL;
}

Test(lane, stress_thousand_tickets)
{
	uint64_t seed = test_seed();
	fx_t f = fx_new(16, 8);
	enum { THREADS = 4, PER = 250 };
	pthread_t th[THREADS];
	feeder_t fd[THREADS];
	for (uint32_t i = 0; i < THREADS; i++) {
		fd[i] = (feeder_t){.f = &f, .first = i * PER, .count = PER, .seed = xs(&seed) | 1};
		cr_assert_eq(pthread_create(&th[i], NULL, feed, &fd[i]), 0);
	}
	for (uint32_t i = 0; i < THREADS; i++) {
		pthread_join(th[i], NULL);
		cr_assert_eq(fd[i].rc, 0);
	}
	AWAIT(get(&f, &f.t->total_granted) == THREADS * PER, 60000);
	AWAIT(lstats(&f).active == 0, 10000);
	pc_lane_stats_t s = lstats(&f);
	pthread_mutex_lock(&f.t->lock);
	for (uint32_t i = 0; i < THREADS * PER; i++)
		cr_assert_eq(f.t->granted[i], 1u, "ticket %u granted %u times (PINCER_TEST_SEED=0x%llx)", i,
			     f.t->granted[i], (unsigned long long)top_seed);
	cr_assert_leq(f.t->max_obs, 16u, "PINCER_TEST_SEED=0x%llx", (unsigned long long)top_seed);
	cr_assert_eq(f.t->bad, 0u);
	pthread_mutex_unlock(&f.t->lock);
	cr_assert_leq(s.peak_active, 16u);
	cr_assert_eq(s.granted, (uint64_t)THREADS * PER);
	cr_assert_eq(s.queued, 0u);
	cr_assert_eq(s.expired, 0u);
	fx_free(&f);
}
