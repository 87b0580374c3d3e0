/*
 * Sends from a handler are gathered per receiver and pushed as one chain
 * (the outbox). What a user can observe must not change: per-sender FIFO,
 * causal order across receivers, every message delivered or counted as a
 * dead letter, and no use of a receiver after its last reference went.
 */
#include <criterion/criterion.h>

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pincer.h"
#include "test_util.h"

/* ---- order ------------------------------------------------------------ */

enum { T_SEQ = 1, T_PROBE, T_KICK };

typedef struct recorder {
	uint64_t next[2];   /* next expected sequence per stream */
	uint64_t got;       /* atomic */
	int out_of_order;   /* atomic */
	int probe_before;   /* atomic: a probe overtook an earlier message */
	uint64_t last_seq;  /* last T_SEQ value seen from stream 0 */
} recorder_t;

static int recorder_receive(pc_ctx_t *ctx, void *state, pc_msg_t *m)
{
	(void)ctx;
	recorder_t *r = state;
	if (m->type == T_SEQ) {
		uint64_t v = pc_msg_u64(m);
		unsigned stream = (unsigned)(v >> 32);
		uint64_t seq = v & 0xFFFFFFFFu;
		if (stream > 1 || seq != r->next[stream])
			INC(r->out_of_order);
		r->next[stream < 2 ? stream : 0] = seq + 1;
		if (stream == 0)
			r->last_seq = seq;
		INC(r->got);
	} else if (m->type == T_PROBE) {
		/* Sent by the other receiver after it got message `v` from the
		 * sender, which the sender had sent us (stream 0) before that. */
		if (r->next[0] <= pc_msg_u64(m))
			INC(r->probe_before);
	}
	return 0;
}

static const pc_behavior_t recorder_beh = {"recorder", recorder_receive, NULL};

typedef struct relay {
	pc_actor_t *x; /* borrowed */
	uint64_t got;  /* atomic */
} relay_t;

/* Y: on each message from the sender, probes X with the sequence number
 * the sender had already sent to X. */
static int relay_receive(pc_ctx_t *ctx, void *state, pc_msg_t *m)
{
	(void)ctx;
	relay_t *y = state;
	if (m->type == T_SEQ) {
		INC(y->got);
		return pc_send_u64(y->x, T_PROBE, pc_msg_u64(m));
	}
	return 0;
}

static const pc_behavior_t relay_beh = {"relay", relay_receive, NULL};

typedef struct sender {
	pc_actor_t *x, *y; /* borrowed */
	uint32_t seed;
	uint64_t sent_x, sent_y;
} sender_t;

static uint32_t rnd(uint32_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 17;
	*s ^= *s << 5;
	return *s;
}

/* One handler call sends runs of random length to X, each followed by a
 * message to Y carrying the last sequence number sent to X. */
static int sender_receive(pc_ctx_t *ctx, void *state, pc_msg_t *m)
{
	(void)ctx;
	sender_t *s = state;
	if (m->type != T_KICK)
		return 0;
	for (int run = 0; run < 50; run++) {
		uint32_t len = 1 + rnd(&s->seed) % 200; /* across the 64-message chains */
		for (uint32_t i = 0; i < len; i++) {
			int rc = pc_send_u64(s->x, T_SEQ, s->sent_x++);
			if (rc != 0)
				return rc;
		}
		int rc = pc_send_u64(s->y, T_SEQ, s->sent_x - 1);
		if (rc != 0)
			return rc;
		s->sent_y++;
	}
	return 0;
}

static const pc_behavior_t sender_beh = {"sender", sender_receive, NULL};

Test(outbox, fifo_and_causal_order)
{
	pc_runtime_t *rt = start_rt(2);
	recorder_t x = {0};
	relay_t y = {0};
	sender_t s = {0};
	s.seed = 0x9E3779B9u;
	pc_actor_t *ax, *ay, *as;
	cr_assert_eq(pc_spawn(rt, &recorder_beh, &x, &ax), 0);
	cr_assert_eq(pc_spawn(rt, &relay_beh, &y, &ay), 0);
	cr_assert_eq(pc_spawn(rt, &sender_beh, &s, &as), 0);
	y.x = ax;
	s.x = ax;
	s.y = ay;
	for (int k = 0; k < 20; k++)
		cr_assert_eq(pc_send_u64(as, T_KICK, 0), 0);
	cr_assert_eq(pc_runtime_wait_quiescent(rt, 30000), 0);
	cr_assert_eq(LOAD(x.got), s.sent_x);
	cr_assert_eq(LOAD(y.got), s.sent_y);
	cr_assert_eq(LOAD(x.out_of_order), 0, "per-sender FIFO broken");
	cr_assert_eq(LOAD(x.probe_before), 0, "a message sent later, elsewhere, overtook an earlier one");
	pc_actor_release(ax);
	pc_actor_release(ay);
	pc_actor_release(as);
	FREE_RUNTIME_CHECKED(rt);
}

/* ---- release after send ----------------------------------------------- */

enum { T_DATA = 10, T_GO };

static int sink_receive(pc_ctx_t *ctx, void *state, pc_msg_t *m)
{
	(void)ctx;
	if (m->type == T_DATA)
		INC(*(uint64_t *)state);
	return 0;
}

static const pc_behavior_t sink_beh = {"sink", sink_receive, NULL};

typedef struct pusher {
	pc_actor_t *target; /* retained: the only reference besides the target's own */
	int sent;           /* atomic: the burst is in the outbox */
	int released;       /* atomic */
} pusher_t;

/* Sends a short burst (it stays in the outbox), waits until the target has
 * stopped, then drops its reference: the last one. The burst must reach the
 * mailbox before that reference goes, or it would be pushed onto a freed
 * actor. */
static int pusher_receive(pc_ctx_t *ctx, void *state, pc_msg_t *m)
{
	pusher_t *p = state;
	if (m->type != T_GO)
		return 0;
	for (int i = 0; i < 10; i++)
		pc_send_u64(p->target, T_DATA, (uint64_t)i);
	__atomic_store_n(&p->sent, 1, __ATOMIC_RELEASE);
	uint64_t until = now_ms() + 5000;
	while (!pc_actor_stopped(p->target) && now_ms() < until)
		;
	pc_actor_release(p->target);
	p->target = NULL;
	__atomic_store_n(&p->released, 1, __ATOMIC_RELEASE);
	pc_exit(ctx, PC_EXIT_NORMAL);
	return 0;
}

static const pc_behavior_t pusher_beh = {"pusher", pusher_receive, NULL};

Test(outbox, release_right_after_sending)
{
	pc_runtime_t *rt = start_rt(2); /* the pusher waits on one, the target stops on the other */
	for (int r = 0; r < 50; r++) {
		uint64_t handled = 0;
		pc_actor_t *t, *p;
		pusher_t ps = {0};
		pc_runtime_stats_t before, after;
		pc_runtime_stats(rt, &before, NULL, 0);
		cr_assert_eq(pc_spawn(rt, &sink_beh, &handled, &t), 0);
		ps.target = t; /* the pusher takes our reference */
		cr_assert_eq(pc_spawn(rt, &pusher_beh, &ps, &p), 0);
		cr_assert_eq(pc_send_u64(p, T_GO, 0), 0);
		uint64_t until = now_ms() + 5000;
		while (!__atomic_load_n(&ps.sent, __ATOMIC_ACQUIRE) && now_ms() < until)
			;
		cr_assert_eq(pc_actor_stop(t, PC_EXIT_NORMAL), 0);
		cr_assert_eq(pc_runtime_wait_quiescent(rt, 10000), 0);
		cr_assert(__atomic_load_n(&ps.released, __ATOMIC_ACQUIRE));
		pc_actor_release(p);
		cr_assert_eq(pc_runtime_wait_quiescent(rt, 10000), 0);
		pc_runtime_stats(rt, &after, NULL, 0);
		/* The burst arrived after the stop: ten dead letters, counted
		 * by the target before it was freed. */
		cr_assert_eq(LOAD(handled), 0);
		cr_assert_eq(after.dead_letters - before.dead_letters, 10, "round %d", r);
		cr_assert_eq(after.actors_live, 0, "round %d", r);
	}
	FREE_RUNTIME_CHECKED(rt);
}
