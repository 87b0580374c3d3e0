/*
 * The deadline actor: fires once after arm, re-arm supersedes (older fire
 * messages are stale), extend moves it later, cancel prevents firing, and
 * the timer actor goes away with its owner.
 *
 * The owner is a test actor driven by messages; what it sees (fired or
 * stale, when, with which due time) is recorded for the main thread. The
 * "busy" commands wait until a fire message is already sitting in the
 * owner's mailbox before acting, which makes the stale cases deterministic.
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


/* ---- the owner --------------------------------------------------------- */

#define FIRE 0x1234u

enum {
	O_ARM = 1,       /* arm(value) */
	O_EXTEND,        /* extend(value) */
	O_CANCEL,
	O_FREE,          /* pc_deadline_free */
	O_BUSY_ARM,      /* once a fire message waits in the mailbox: arm(value) */
	O_BUSY_EXTEND,   /* ... extend(value) */
	O_BUSY_CANCEL,   /* ... cancel */
	O_BURST,         /* arm value times with delays of 0..3 ms */
	O_EXIT,
	O_PROBE,         /* fired() on a message that is not a fire */
	O_ARM_ARM,       /* arm(value & 0xffff), then arm(value >> 16), at once */
	O_ARM_EXTEND,    /* arm(value & 0xffff), then extend(value >> 16), at once */
};

typedef struct owner {
	pc_deadline_t *d;
	int new_rc;
	int rc;            /* result of the last command (1 = none yet) */
	int cmds;          /* commands handled */
	uint64_t due;      /* pc_deadline_due after the last command */
	uint64_t first_due; /* after the first half of O_ARM_ARM / O_ARM_EXTEND */
	int armed;         /* pc_deadline_armed after the last command */
	int fired;         /* fire messages for which pc_deadline_fired was true */
	int stale;         /* ... false */
	uint64_t fired_at; /* pc_runtime_now_ms() at the (last) true fire */
	uint64_t due_at_fire;
	int armed_after_fire;
	int bad_type;
	int keep_on_stop;  /* do not free the deadline when stopping */
	pc_deadline_t *leftover;
	int stops;
} owner_t;

static bool wait_for_mail(pc_ctx_t *ctx)
{
	uint64_t until = now_ms() + 10000;
	while (pc__mailbox_peek_empty(&pc_self(ctx)->mq))
		if (now_ms() > until)
			return false;
	return true;
}

static uint32_t burst_rng = 12345;

static int owner_receive(pc_ctx_t *ctx, void *state, pc_msg_t *m)
{
	owner_t *o = state;
	int rc = 0;
	switch (m->type) {
	case FIRE: {
		uint64_t due = pc_deadline_due(o->d);
		if (m->size != sizeof(uint64_t))
			INC(o->bad_type);
		if (pc_deadline_fired(o->d, m)) {
			o->fired_at = pc_runtime_now_ms();
			o->due_at_fire = due;
			o->armed_after_fire = pc_deadline_armed(o->d);
			INC(o->fired);
		} else {
			INC(o->stale);
		}
		return 0;
	}
	case O_ARM:
		rc = pc_deadline_arm(o->d, pc_msg_u64(m));
		break;
	case O_EXTEND:
		rc = pc_deadline_extend(o->d, pc_msg_u64(m));
		break;
	case O_CANCEL:
		rc = pc_deadline_cancel(o->d);
		break;
	case O_FREE:
		pc_deadline_free(o->d);
		o->d = NULL;
		break;
	case O_BUSY_ARM:
	case O_BUSY_EXTEND:
	case O_BUSY_CANCEL:
		if (!wait_for_mail(ctx))
			return -1;
		if (m->type == O_BUSY_ARM)
			rc = pc_deadline_arm(o->d, pc_msg_u64(m));
		else if (m->type == O_BUSY_EXTEND)
			rc = pc_deadline_extend(o->d, pc_msg_u64(m));
		else
			rc = pc_deadline_cancel(o->d);
		break;
	case O_BURST:
		for (uint64_t i = 0; i < pc_msg_u64(m) && rc == 0; i++) {
			burst_rng = burst_rng * 1103515245u + 12345u;
			rc = pc_deadline_arm(o->d, (burst_rng >> 16) % 4);
		}
		break;
	case O_EXIT:
		pc_exit(ctx, PC_EXIT_NORMAL);
		return 0;
	case O_ARM_ARM:
	case O_ARM_EXTEND:
		/* Both in one handler: no fire can get in between, however
		 * slow the machine. */
		rc = pc_deadline_arm(o->d, pc_msg_u64(m) & 0xffff);
		o->first_due = pc_deadline_due(o->d);
		if (rc == 0 && m->type == O_ARM_ARM)
			rc = pc_deadline_arm(o->d, pc_msg_u64(m) >> 16);
		else if (rc == 0)
			rc = pc_deadline_extend(o->d, pc_msg_u64(m) >> 16);
		break;
	case O_PROBE: {
		pc_msg_t *fake = pc_msg_new(FIRE, 3);
		rc = pc_deadline_fired(o->d, fake) ? 1 : 0;
		pc_msg_free(fake);
		break;
	}
	default:
		return 0;
	}
	o->due = pc_deadline_due(o->d);
	o->armed = pc_deadline_armed(o->d);
	STORE(o->rc, rc);
	INC(o->cmds);
	return 0;
}

static void owner_stop(pc_ctx_t *ctx, void *state, int reason)
{
	(void)ctx;
	(void)reason;
	owner_t *o = state;
	if (o->keep_on_stop)
		STORE(o->leftover, o->d);
	else
		pc_deadline_free(o->d);
	o->d = NULL;
	INC(o->stops);
}

/* The deadline is created by the owner's first message, in its context. */
enum { O_INIT = 99 };

static int owner_init_receive(pc_ctx_t *ctx, void *state, pc_msg_t *m)
{
	owner_t *o = state;
	if (m->type == O_INIT) {
		STORE(o->new_rc, pc_deadline_new(ctx, FIRE, &o->d));
		return 0;
	}
	return owner_receive(ctx, state, m);
}

static const pc_behavior_t owner_init_behavior = {"owner", owner_init_receive, owner_stop};

static pc_actor_t *spawn_owner(pc_runtime_t *rt, owner_t *o)
{
	memset(o, 0, sizeof(*o));
	STORE(o->new_rc, 1);
	STORE(o->rc, 1);
	pc_actor_t *a = NULL;
	cr_assert_eq(pc_spawn(rt, &owner_init_behavior, o, &a), 0);
	cr_assert_eq(pc_send_u64(a, O_INIT, 0), 0);
	AWAIT(LOAD(o->new_rc) != 1, 5000);
	cr_assert_eq(LOAD(o->new_rc), 0);
	return a;
}

/* Sends a command and waits until it has been handled; its result. */
static int cmd(pc_actor_t *a, owner_t *o, uint32_t type, uint64_t v)
{
	int n = LOAD(o->cmds);
	cr_assert_eq(pc_send_u64(a, type, v), 0);
	AWAIT(LOAD(o->cmds) == n + 1, 15000);
	return LOAD(o->rc);
}

/* ---- tests ------------------------------------------------------------- */

Test(deadline, fires_once_after_arm)
{
	pc_runtime_t *rt = start_rt(2);
	owner_t o;
	pc_actor_t *a = spawn_owner(rt, &o);
	uint64_t t0 = pc_runtime_now_ms();
	cr_assert_eq(cmd(a, &o, O_ARM, 50), 0);
	uint64_t due = o.due;
	cr_assert(o.armed);
	cr_assert_geq(due, t0 + 50);
	cr_assert_leq(due, pc_runtime_now_ms() + 50);
	AWAIT(LOAD(o.fired) == 1, 5000);
	cr_assert_geq(o.fired_at, due, "fired %llu ms early", (unsigned long long)(due - o.fired_at));
	cr_assert_eq(o.due_at_fire, due);
	cr_assert_not(o.armed_after_fire, "a fired deadline is disarmed");
	sleep_ms(80);
	quiesce(rt);
	cr_assert_eq(LOAD(o.fired), 1);
	cr_assert_eq(LOAD(o.stale), 0);
	cr_assert_eq(LOAD(o.bad_type), 0);
	/* Disarmed now: extend is refused, cancel is a no-op. */
	cr_assert_eq(cmd(a, &o, O_EXTEND, 10), PC_ESTATE);
	cr_assert_eq(cmd(a, &o, O_CANCEL, 0), 0);
	cr_assert_eq(o.due, 0);
	/* It can be armed again. */
	cr_assert_eq(cmd(a, &o, O_ARM, 5), 0);
	AWAIT(LOAD(o.fired) == 2, 5000);
	pc_actor_release(a);
	FREE_RUNTIME_CHECKED(rt);
}

Test(deadline, zero_delay_fires)
{
	pc_runtime_t *rt = start_rt(2);
	owner_t o;
	pc_actor_t *a = spawn_owner(rt, &o);
	cr_assert_eq(cmd(a, &o, O_ARM, 0), 0);
	AWAIT(LOAD(o.fired) == 1, 5000);
	pc_actor_release(a);
	FREE_RUNTIME_CHECKED(rt);
}

/* "Never" (or close to it) must not wrap around into "now". */
Test(deadline, huge_delays_saturate)
{
	pc_runtime_t *rt = start_rt(2);
	owner_t o;
	pc_actor_t *a = spawn_owner(rt, &o);
	uint64_t now = pc_runtime_now_ms();
	cr_assert_eq(cmd(a, &o, O_ARM, UINT64_MAX), 0);
	cr_assert(o.armed);
	cr_assert_gt(o.due, now + 1000000000ull, "due %llu wrapped", (unsigned long long)o.due);
	cr_assert_eq(cmd(a, &o, O_EXTEND, UINT64_MAX), 0);
	cr_assert_gt(o.due, now + 1000000000ull, "due %llu wrapped", (unsigned long long)o.due);
	cr_assert_eq(cmd(a, &o, O_ARM, 10000), 0);
	cr_assert_eq(cmd(a, &o, O_EXTEND, UINT64_MAX - 5000), 0);
	cr_assert_gt(o.due, now + 1000000000ull, "due %llu wrapped", (unsigned long long)o.due);
	sleep_ms(50);
	cr_assert_eq(LOAD(o.fired) + LOAD(o.stale), 0, "fired at once");
	cr_assert_eq(cmd(a, &o, O_CANCEL, 0), 0);
	quiesce(rt);
	cr_assert_eq(LOAD(o.fired), 0);
	pc_actor_release(a);
	FREE_RUNTIME_CHECKED(rt);
}

Test(deadline, rearm_supersedes)
{
	pc_runtime_t *rt = start_rt(2);
	owner_t o;
	pc_actor_t *a = spawn_owner(rt, &o);
	cr_assert_eq(cmd(a, &o, O_ARM_ARM, 30 | (120 << 16)), 0);
	uint64_t due2 = o.due;
	cr_assert_geq(due2, o.first_due + 90);
	AWAIT(LOAD(o.fired) == 1, 5000);
	cr_assert_geq(o.fired_at, due2, "the superseded arm fired");
	cr_assert_eq(o.due_at_fire, due2);
	sleep_ms(50);
	quiesce(rt);
	cr_assert_eq(LOAD(o.fired), 1);
	pc_actor_release(a);
	FREE_RUNTIME_CHECKED(rt);
}

/* The old fire message is already in the owner's mailbox when it re-arms:
 * it arrives, and pc_deadline_fired calls it stale. */
Test(deadline, rearm_makes_queued_fire_stale)
{
	pc_runtime_t *rt = start_rt(2);
	owner_t o;
	pc_actor_t *a = spawn_owner(rt, &o);
	cr_assert_eq(cmd(a, &o, O_ARM, 5), 0);
	cr_assert_eq(cmd(a, &o, O_BUSY_ARM, 60), 0);
	uint64_t due2 = o.due;
	AWAIT(LOAD(o.stale) == 1, 5000);
	cr_assert_eq(LOAD(o.fired), 0);
	AWAIT(LOAD(o.fired) == 1, 5000);
	cr_assert_geq(o.fired_at, due2);
	quiesce(rt);
	cr_assert_eq(LOAD(o.stale), 1);
	cr_assert_eq(LOAD(o.fired), 1);
	pc_actor_release(a);
	FREE_RUNTIME_CHECKED(rt);
}

Test(deadline, burst_of_rearms_fires_once)
{
	pc_runtime_t *rt = start_rt(2);
	owner_t o;
	pc_actor_t *a = spawn_owner(rt, &o);
	for (int round = 1; round <= 5; round++) {
		cr_assert_eq(cmd(a, &o, O_BURST, 300), 0);
		uint64_t due = o.due;
		AWAIT(LOAD(o.fired) == round, 5000);
		cr_assert_geq(o.fired_at, due);
		quiesce(rt);
		cr_assert_eq(LOAD(o.fired), round, "more than the newest arm fired");
	}
	pc_actor_release(a);
	FREE_RUNTIME_CHECKED(rt);
}

Test(deadline, extend_moves_it_later)
{
	pc_runtime_t *rt = start_rt(2);
	owner_t o;
	pc_actor_t *a = spawn_owner(rt, &o);
	cr_assert_eq(cmd(a, &o, O_ARM_EXTEND, 60 | (100 << 16)), 0);
	uint64_t due1 = o.first_due;
	uint64_t due2 = o.due;
	cr_assert_eq(due2, due1 + 100);
	cr_assert(o.armed);
	AWAIT(LOAD(o.fired) == 1, 5000);
	/* Not at the original time: at (or after) the extended one. */
	cr_assert_geq(o.fired_at, due2, "fired at %llu, extended due %llu (original %llu)",
		      (unsigned long long)o.fired_at, (unsigned long long)due2, (unsigned long long)due1);
	sleep_ms(30);
	quiesce(rt);
	cr_assert_eq(LOAD(o.fired), 1);
	cr_assert_eq(LOAD(o.stale), 0);
	pc_actor_release(a);
	FREE_RUNTIME_CHECKED(rt);
}

Test(deadline, extend_after_fire_queued_is_stale_then_fires_later)
{
	pc_runtime_t *rt = start_rt(2);
	owner_t o;
	pc_actor_t *a = spawn_owner(rt, &o);
	cr_assert_eq(cmd(a, &o, O_ARM, 5), 0);
	uint64_t due1 = o.due;
	cr_assert_eq(cmd(a, &o, O_BUSY_EXTEND, 50), 0);
	uint64_t due2 = o.due;
	cr_assert_eq(due2, due1 + 50);
	AWAIT(LOAD(o.stale) == 1, 5000);
	AWAIT(LOAD(o.fired) == 1, 5000);
	cr_assert_geq(o.fired_at, due2);
	pc_actor_release(a);
	FREE_RUNTIME_CHECKED(rt);
}

Test(deadline, cancel_prevents_firing)
{
	pc_runtime_t *rt = start_rt(2);
	owner_t o;
	pc_actor_t *a = spawn_owner(rt, &o);
	/* Far enough that the cancel surely comes first, however slow the
	 * machine; quiescence then proves no runtime timer is left behind,
	 * i.e. it can never fire. */
	cr_assert_eq(cmd(a, &o, O_ARM, 3000), 0);
	cr_assert_eq(cmd(a, &o, O_CANCEL, 0), 0);
	cr_assert_not(o.armed);
	cr_assert_eq(o.due, 0);
	quiesce(rt);
	cr_assert_eq(LOAD(o.fired), 0);
	cr_assert_eq(cmd(a, &o, O_EXTEND, 10), PC_ESTATE);
	/* A fire already queued when cancelling is stale. */
	int stale0 = LOAD(o.stale);
	cr_assert_eq(cmd(a, &o, O_ARM, 5), 0);
	cr_assert_eq(cmd(a, &o, O_BUSY_CANCEL, 0), 0);
	AWAIT(LOAD(o.stale) == stale0 + 1, 5000);
	sleep_ms(30);
	quiesce(rt);
	cr_assert_eq(LOAD(o.fired), 0);
	cr_assert_eq(LOAD(o.stale), stale0 + 1);
	pc_actor_release(a);
	FREE_RUNTIME_CHECKED(rt);
}

Test(deadline, fired_rejects_other_messages)
{
	pc_runtime_t *rt = start_rt(2);
	owner_t o;
	pc_actor_t *a = spawn_owner(rt, &o);
	cr_assert_eq(cmd(a, &o, O_ARM, 10000), 0);
	cr_assert_eq(cmd(a, &o, O_PROBE, 0), 0, "a 3-byte message is no fire");
	cr_assert(o.armed);
	cr_assert_not(pc_deadline_fired(NULL, NULL));
	cr_assert_not(pc_deadline_armed(NULL));
	cr_assert_eq(pc_deadline_due(NULL), 0);
	cr_assert_eq(pc_deadline_arm(NULL, 1), PC_EINVAL);
	cr_assert_eq(pc_deadline_extend(NULL, 1), PC_EINVAL);
	cr_assert_eq(pc_deadline_cancel(NULL), PC_EINVAL);
	pc_deadline_free(NULL);
	pc_deadline_t *d = (pc_deadline_t *)1;
	cr_assert_eq(pc_deadline_new(NULL, FIRE, &d), PC_EINVAL);
	pc_actor_release(a);
	FREE_RUNTIME_CHECKED(rt); /* armed at shutdown: LSan */
}

Test(deadline, free_stops_the_timer_actor)
{
	pc_runtime_t *rt = start_rt(2);
	owner_t o;
	pc_actor_t *a = spawn_owner(rt, &o);
	cr_assert_eq(cmd(a, &o, O_ARM, 3000), 0);
	cr_assert_eq(cmd(a, &o, O_FREE, 0), 0);
	quiesce(rt); /* the timer actor's runtime timer went with it */
	cr_assert_eq(LOAD(o.fired), 0);
	cr_assert_eq(live_count(rt), 1, "only the owner is left");
	pc_actor_release(a);
	FREE_RUNTIME_CHECKED(rt);
}

/* The owner stops without freeing its deadline: the timer actor notices
 * (it monitors the owner), cancels its timer and stops. */
Test(deadline, timer_actor_stops_with_owner)
{
	pc_runtime_t *rt = start_rt(2);
	owner_t o;
	pc_actor_t *a = spawn_owner(rt, &o);
	o.keep_on_stop = 1; /* read by the owner's stop handler, after the sends below */
	cr_assert_eq(cmd(a, &o, O_ARM, 60000), 0);
	pc_runtime_stats_t s0 = stats(rt);
	cr_assert_eq(pc_send_u64(a, O_EXIT, 0), 0);
	AWAIT(stats(rt).exited == s0.exited + 2, 5000);
	quiesce(rt); /* no runtime timer left pending */
	cr_assert_eq(LOAD(o.stops), 1);
	/* The handle outlived both: freeing it now only lets go of memory. */
	pc_deadline_t *d = LOAD(o.leftover);
	cr_assert_not_null(d);
	pc_actor_release(a);
	pc_deadline_free(d);
	quiesce(rt);
	cr_assert_eq(live_count(rt), 0);
	FREE_RUNTIME_CHECKED(rt);
}

/* The usual way: the owner frees its deadline in its stop handler. */
Test(deadline, owner_frees_on_stop)
{
	pc_runtime_t *rt = start_rt(2);
	for (int i = 0; i < 50; i++) {
		owner_t o;
		pc_actor_t *a = spawn_owner(rt, &o);
		cr_assert_eq(cmd(a, &o, O_ARM, (uint64_t)(i % 3) * 20), 0);
		cr_assert_eq(pc_send_u64(a, O_EXIT, 0), 0);
		pc_actor_release(a);
		AWAIT(LOAD(o.stops) == 1, 5000);
		quiesce(rt);
		cr_assert_eq(live_count(rt), 0, "round %d", i);
	}
	FREE_RUNTIME_CHECKED(rt);
}

Test(deadline, shutdown_with_armed_deadlines)
{
	pc_runtime_t *rt = start_rt(2);
	enum { N = 20 };
	owner_t o[N];
	for (int i = 0; i < N; i++) {
		pc_actor_t *a = spawn_owner(rt, &o[i]);
		cr_assert_eq(cmd(a, &o[i], O_ARM, (uint64_t)i * 3), 0);
		pc_actor_release(a);
	}
	sleep_ms(20);
	FREE_RUNTIME_CHECKED(rt); /* LSan: handles, timer actors, runtime timers */
	for (int i = 0; i < N; i++)
		cr_assert_eq(o[i].stops, 1);
}

/* Two deadlines of one owner with the same fire type: each accepts only its
 * own fires (their generations never coincide). */
enum { TWO_START = 300, TWO_FIRE };

typedef struct two {
	pc_deadline_t *near, *far;
	int near_fired, far_fired_wrongly, stale;
} two_t;

static int two_receive(pc_ctx_t *ctx, void *state, pc_msg_t *m)
{
	two_t *t = state;
	if (m->type == TWO_START) {
		int rc = pc_deadline_new(ctx, TWO_FIRE, &t->near);
		if (rc == 0)
			rc = pc_deadline_new(ctx, TWO_FIRE, &t->far);
		if (rc == 0)
			rc = pc_deadline_arm(t->near, 10);
		if (rc == 0)
			rc = pc_deadline_arm(t->far, 600000);
		return rc;
	}
	if (m->type == TWO_FIRE) {
		/* The far one is asked first: it must refuse the near one's fire. */
		if (pc_deadline_fired(t->far, m))
			INC(t->far_fired_wrongly);
		else if (pc_deadline_fired(t->near, m))
			INC(t->near_fired);
		else
			INC(t->stale);
	}
	return 0;
}

static void two_stop(pc_ctx_t *ctx, void *state, int reason)
{
	(void)ctx;
	(void)reason;
	two_t *t = state;
	pc_deadline_free(t->near);
	pc_deadline_free(t->far);
}

static const pc_behavior_t two_behavior = {"two", two_receive, two_stop};

Test(deadline, two_deadlines_share_a_fire_type)
{
	pc_runtime_t *rt = start_rt(2);
	two_t t = {0};
	pc_actor_t *a = NULL;
	cr_assert_eq(pc_spawn(rt, &two_behavior, &t, &a), 0);
	cr_assert_eq(pc_send_u64(a, TWO_START, 0), 0);
	AWAIT(LOAD(t.near_fired) + LOAD(t.far_fired_wrongly) == 1, 5000);
	cr_assert_eq(LOAD(t.far_fired_wrongly), 0);
	cr_assert_eq(LOAD(t.near_fired), 1);
	cr_assert_eq(LOAD(t.stale), 0);
	pc_actor_release(a);
	FREE_RUNTIME_CHECKED(rt);
}
