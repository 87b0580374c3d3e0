/*
 * The actor core: spawn, send, a turn of message handling, exit, and the
 * end of an actor's life.
 *
 * Life and death. An actor starts with two references: the spawner's and
 * its own ("alive"). It drops its own when it stops. Memory is freed only
 * by the worker running the actor, when its mailbox is provably quiet:
 * - if the alive reference was the last, right after the stop handler (no
 *   reference left means no sender left);
 * - otherwise the thread that drops the last reference pushes the embedded
 *   stub as a DESTROY message; it is the last message the mailbox will ever
 *   receive, so the turn that pops it frees the actor.
 * A stopped actor with references left is a zombie: messages sent to it are
 * freed as dead letters.
 */
#include "actor_internal.h"

#include <stdlib.h>
#include <string.h>

#include "../mailbox/atomics.h"

static void count(uint64_t *c)
{
	pc_atomic_store_u64(c, *c + 1);
}

void pc__count_dead_letter(pc_runtime_t *rt)
{
	pc__worker_t *w = pc__current_worker();
	if (w && w->rt == rt)
		count(&w->c.dead_letters);
	else
		pc_atomic_faa_u64(&rt->ext_dead, 1);
}

/* Releases what a message holds besides its memory. */
static void release_refs(pc_runtime_t *rt, pc_msg_t *m)
{
	if (m->flags & PC_MSGF_TIMER) {
		pc__timer_claim(rt, m);
		m->flags &= (uint16_t)~PC_MSGF_TIMER;
	}
	if (m->flags & PC_MSGF_REPLY_REF) {
		pc_actor_t *r = m->reply_to;
		m->reply_to = NULL;
		m->flags &= (uint16_t)~PC_MSGF_REPLY_REF;
		pc_actor_release(r);
	}
}

void pc__msg_dispose(pc_runtime_t *rt, pc_msg_t *m)
{
	release_refs(rt, m);
	pc_msg_free(m);
}

/* The mailbox depth, approximate while others push. */
static uint32_t depth_of(const pc_actor_t *a)
{
	return pc_atomic_load_u32(&a->pushed) - pc_atomic_load_u32(&a->popped);
}

static void add_depth(pc_actor_t *a, void *arg)
{
	pc_mailbox_stats_t *s = arg;
	uint32_t d = depth_of(a);
	/* a slot reclaimed and reused under us can read as a wrapped count */
	if (d > UINT32_MAX / 2)
		d = 0;
	s->actors++;
	s->queued += d;
	if (d > s->deepest)
		s->deepest = d;
}

void pc_runtime_mailbox_stats(pc_runtime_t *rt, pc_mailbox_stats_t *out)
{
	*out = (pc_mailbox_stats_t){0};
	if (rt)
		pc__actor_pool_each_live(rt, add_depth, out);
}

/* Every push goes through here, so `pushed` counts them all. Appends the
 * chain first..last of n messages; returns the depth before it and whether
 * the actor must now be scheduled. */
static uint32_t enqueue(pc_actor_t *a, pc_msg_t *first, pc_msg_t *last, uint32_t n, bool *schedule)
{
	uint32_t d = pc_atomic_faa_u32(&a->pushed, n) - pc_atomic_load_u32(&a->popped);
	*schedule = pc__mailbox_push_chain(&a->mq, first, last);
	return d;
}

/* Pushes the running actor's outbox, and drops the outbox's reference to
 * its receiver. Runs before sending elsewhere, so causal order is kept,
 * and when the handler returns. */
static void flush_outbox(pc_ctx_t *ctx)
{
	pc_actor_t *to = ctx->out_to;
	if (!to)
		return;
	bool schedule;
	uint32_t n = ctx->out_n;
	uint32_t depth = enqueue(to, ctx->out_first, ctx->out_last, n, &schedule) + n;
	ctx->out_to = NULL;
	ctx->out_first = ctx->out_last = NULL;
	ctx->out_n = 0;
	if (schedule)
		pc__schedule(to->rt, to);
	/* Backpressure: remember a receiver that is too far behind (the
	 * outbox's reference becomes the mute's); the sender is held back at
	 * the end of its turn. */
	if (depth >= PC__DEPTH_HIGH && ctx->actor != to && !ctx->mute_target)
		ctx->mute_target = to;
	else
		pc_actor_release(to);
}

int pc_spawn(pc_runtime_t *rt, const pc_behavior_t *b, void *state, pc_actor_t **out)
{
	if (!rt || !b || !b->receive || !out)
		return PC_EINVAL;
	*out = NULL;
	if (pc_atomic_load_u32_acq(&rt->state) >= PC__RT_STOPPING)
		return PC_ESTOPPED;
	pc__worker_t *w = pc__current_worker();
	bool local = w && w->rt == rt;
	pc_actor_t *a = pc__actor_alloc(rt, local ? w : NULL);
	if (!a)
		return PC_ENOMEM;
	memset(&a->stub, 0, sizeof(a->stub));
	a->stub.flags = PC_MSGF_EMBEDDED;
	a->stub.size_class = PC_MSG_CLASS_HEAP;
	pc__mailbox_init(&a->mq, &a->stub);
	a->aflags = 0;
	a->refs = 2;
	/* atomic: pc_runtime_mailbox_stats reads them from other threads */
	pc_atomic_store_u32(&a->pushed, 0);
	pc_atomic_store_u32(&a->popped, 0);
	a->beh = b;
	a->state = state;
	__atomic_store_n(&a->rt, rt, __ATOMIC_RELAXED);
	a->ext = NULL;
	a->id = pc__next_id(rt);
	a->exit_reason = 0;
	a->exit_code = 0;
	if (local)
		count(&w->c.spawned);
	else
		pc_atomic_faa_u64(&rt->ext_spawned, 1);
	*out = a;
	return 0;
}

pc_actor_t *pc_actor_retain(pc_actor_t *a)
{
	if (a)
		pc_atomic_faa_u32(&a->refs, 1);
	return a;
}

void pc_actor_release(pc_actor_t *a)
{
	if (!a)
		return;
	if (pc_atomic_faa_u32(&a->refs, (uint32_t)-1) != 1)
		return;
	/* Shutdown frees every actor itself, mailboxes included. */
	if (pc_atomic_load_u32_acq(&a->rt->state) >= PC__RT_STOPPING)
		return;
	/* The alive reference is gone, so the actor has stopped and its stub
	 * is out of the mailbox (an actor stops only while handling a
	 * message, and the first pop retires the stub). */
	a->stub.type = PC__MSG_DESTROY;
	bool schedule;
	enqueue(a, &a->stub, &a->stub, 1, &schedule);
	if (schedule)
		pc__schedule(a->rt, a);
}

uint64_t pc_actor_id(const pc_actor_t *a)
{
	return a->id;
}

pc_runtime_t *pc_actor_runtime(const pc_actor_t *a)
{
	return a->rt;
}

bool pc_actor_stopped(const pc_actor_t *a)
{
	return (pc_atomic_load_u32_acq(&a->aflags) & PC__AF_STOPPED) != 0;
}

pc_actor_t *pc_self(pc_ctx_t *ctx)
{
	return ctx->actor;
}

pc_runtime_t *pc_ctx_runtime(pc_ctx_t *ctx)
{
	return ctx->rt;
}

int pc_send(pc_actor_t *to, pc_msg_t *m)
{
	if (!m)
		return PC_EINVAL;
	if (!to) {
		pc_msg_free(m);
		return PC_EINVAL;
	}
	pc_runtime_t *rt = to->rt;
	uint32_t f = pc_atomic_load_u32(&to->aflags);
	if (f & PC__AF_STOPPED) {
		pc__count_dead_letter(rt);
		pc__msg_dispose(rt, m);
		return PC_ESTOPPED;
	}
	pc__worker_t *w = pc__current_worker();
	if (w && w->rt == rt && w->ctx.actor) {
		/* From a handler: into the outbox, pushed as one chain. */
		pc_ctx_t *ctx = &w->ctx;
		count(&w->c.sent);
		ctx->sends++;
		if (ctx->out_to != to)
			flush_outbox(ctx);
		if (ctx->out_to) {
			pc_atomic_store_ptr((void **)&ctx->out_last->next, m);
		} else {
			/* The outbox holds a reference of its own: the one the
			 * message was sent under may be shared, and dropped by
			 * another thread before the turn ends. */
			ctx->out_first = m;
			ctx->out_to = pc_actor_retain(to);
		}
		ctx->out_last = m;
		if (++ctx->out_n == PC__OUTBOX_MAX)
			flush_outbox(ctx);
		return 0;
	}
	if (!w || w->rt != rt)
		pc_atomic_faa_u64(&rt->ext_sent, 1);
	else
		count(&w->c.sent);
	bool schedule;
	enqueue(to, m, m, 1, &schedule);
	if (schedule)
		pc__schedule(rt, to);
	return 0;
}

int pc_send_u64(pc_actor_t *to, uint32_t type, uint64_t value)
{
	pc_msg_t *m = pc_msg_new(type, sizeof(value));
	if (!m)
		return PC_ENOMEM;
	memcpy(pc_msg_data(m), &value, sizeof(value));
	return pc_send(to, m);
}

int pc_send_signal(pc_actor_t *to, uint32_t type)
{
	pc_msg_t *m = pc_msg_new(type, 0);
	return m ? pc_send(to, m) : PC_ENOMEM;
}

int pc_spawn_start(pc_runtime_t *rt, const pc_behavior_t *b, void *state, uint32_t start_type,
		   pc_actor_t **out)
{
	if (out)
		*out = NULL;
	/* allocated first: once spawned, the actor owns `state` */
	pc_msg_t *start = pc_msg_new(start_type, 0);
	if (!start)
		return PC_ENOMEM;
	pc_actor_t *a = NULL;
	int rc = pc_spawn(rt, b, state, &a);
	if (rc != 0) {
		pc_msg_free(start);
		return rc;
	}
	pc_send(a, start);
	if (out)
		*out = a;
	else
		pc_actor_release(a);
	return 0;
}

int pc_ask(pc_ctx_t *ctx, pc_actor_t *to, pc_msg_t *m, uint64_t *corr)
{
	/* Checked before the reply reference is taken: pc_send cannot give
	 * it back for a NULL receiver (it does not know the runtime). */
	if (!ctx || !m || !to) {
		pc_msg_free(m);
		return PC_EINVAL;
	}
	m->reply_to = pc_actor_retain(ctx->actor);
	m->flags |= PC_MSGF_REPLY_REF;
	m->corr = pc__next_id(ctx->rt);
	if (corr)
		*corr = m->corr;
	return pc_send(to, m);
}

int pc_ask_as(pc_actor_t *to, pc_msg_t *m, pc_actor_t *reply_to, uint64_t corr)
{
	if (!m || !to || !reply_to) {
		pc_msg_free(m);
		return PC_EINVAL;
	}
	m->reply_to = pc_actor_retain(reply_to);
	m->flags |= PC_MSGF_REPLY_REF;
	m->corr = corr;
	return pc_send(to, m);
}

int pc_reply(const pc_msg_t *req, pc_msg_t *reply)
{
	if (!reply)
		return PC_EINVAL;
	if (!req || !req->reply_to) {
		pc_msg_free(reply);
		return PC_EINVAL;
	}
	reply->corr = req->corr;
	return pc_send(req->reply_to, reply);
}

void pc_exit(pc_ctx_t *ctx, int reason)
{
	if (!ctx->exit_req) {
		ctx->exit_req = true;
		ctx->exit_reason = reason;
		ctx->exit_code = 0;
	}
}

int pc_actor_stop(pc_actor_t *a, int reason)
{
	if (!a)
		return PC_EINVAL;
	pc_msg_t *m = pc_msg_new(PC__MSG_STOP, sizeof(int32_t));
	if (!m)
		return PC_ENOMEM;
	*(int32_t *)pc_msg_data(m) = reason;
	return pc_send(a, m);
}

void pc_trap_exit(pc_ctx_t *ctx, bool on)
{
	if (on)
		pc_atomic_or_u32(&ctx->actor->aflags, PC__AF_TRAP_EXIT);
	else
		pc_atomic_and_u32(&ctx->actor->aflags, ~(uint32_t)PC__AF_TRAP_EXIT);
}

static void handle(pc_ctx_t *ctx, pc_actor_t *a, pc_msg_t *m)
{
	if ((m->flags & PC_MSGF_TIMER)) {
		bool live = pc__timer_claim(a->rt, m);
		m->flags &= (uint16_t)~PC_MSGF_TIMER;
		if (!live)
			return;
	}
	if (m->type >= PC_MSG_TYPE_SYSTEM) {
		switch (m->type) {
		case PC__MSG_STOP:
			pc_exit(ctx, *(const int32_t *)pc_msg_cdata(m));
			return;
		case PC__MSG_LINK_EXIT: {
			const pc_down_t *d = pc_msg_cdata(m);
			/* No link left: pc_unlink ran after the partner died but
			 * before this signal was handled. Once pc_unlink returned
			 * the link must have no effect. */
			if (!pc__actor_drop_link(a, d->actor_id))
				return;
			if (pc_atomic_load_u32(&a->aflags) & PC__AF_TRAP_EXIT) {
				m->type = PC_MSG_EXIT;
				break;
			}
			if (d->reason != PC_EXIT_NORMAL)
				pc_exit(ctx, PC_EXIT_LINKED);
			return;
		}
		case PC_MSG_DOWN:
			if (!pc__actor_take_watching(a, ((const pc_down_t *)pc_msg_cdata(m))->ref))
				return; /* demonitored meanwhile */
			break;
		default:
			break;
		}
	}
	count(&ctx->w->c.handled);
	int rc = a->beh->receive(ctx, a->state, m);
	if (rc < 0 && !ctx->exit_req) {
		pc_exit(ctx, PC_EXIT_ERROR);
		ctx->exit_code = rc;
	}
}

/* Runs the stop handler and tells everyone who asked. Returns true when the
 * alive reference was the last one. */
static bool stop_actor(pc_ctx_t *ctx, pc_actor_t *a, int reason, int code)
{
	a->exit_reason = reason;
	a->exit_code = code;
	if (a->beh->stop)
		a->beh->stop(ctx, a->state, reason);
	flush_outbox(ctx);
	a->state = NULL;
	pc_atomic_or_u32(&a->aflags, PC__AF_STOPPED);
	pc__actor_notify_exit(a);
	flush_outbox(ctx);
	if (ctx->w)
		count(&ctx->w->c.exited);
	else
		pc_atomic_faa_u64(&a->rt->ext_exited, 1);
	return pc_atomic_faa_u32(&a->refs, (uint32_t)-1) == 1;
}

/* Frees an actor whose mailbox can receive nothing more. What is left in
 * it was sent but never delivered: dead letters, like those popped after
 * the stop (the DESTROY stub is no message). */
static void destroy(pc__worker_t *w, pc_actor_t *a)
{
	pc_msg_t *m;
	while ((m = pc__mailbox_pop(&a->mq))) {
		if (!(m->flags & PC_MSGF_EMBEDDED) && m->type != PC__MSG_SHRINK)
			count(&w->c.dead_letters);
		release_refs(a->rt, m);
	}
	pc__mailbox_destroy(&a->mq);
	pc__actor_ext_free(a);
	count(&w->c.reclaimed);
	pc__actor_free(w->rt, w, a);
}

/* Holds `self` back in target's muted list while the target is deep. */
static bool try_mute(pc_actor_t *self, pc_actor_t *target)
{
	pc__actor_ext_t *x = pc__actor_ext(target);
	if (!x)
		return false;
	bool muted = false;
	pthread_mutex_lock(&x->lock);
	if (!x->dead && depth_of(target) >= PC__DEPTH_HIGH &&
	    pc__vec_add(&x->muted, 0, self, NULL) == 0) {
		pc_atomic_or_u32(&target->aflags, PC__AF_HAS_MUTED);
		muted = true;
	}
	pthread_mutex_unlock(&x->lock);
	return muted;
}

int pc__actor_turn(pc__worker_t *w, pc_actor_t *a)
{
	pc_ctx_t *ctx = &w->ctx;
	ctx->actor = a;
	ctx->mute_target = NULL;
	ctx->exit_req = false;
	ctx->sends = 0;
	uint32_t batch = w->rt->cfg.batch;
	/* A turn is bounded by work, counted in messages handled and sent
	 * (BEAM charges reductions for sends too): an actor that fans out
	 * thousands of messages per handler yields to the receivers it just
	 * woke instead of burying them. */
	uint32_t send_budget = batch * PC__SENDS_PER_BATCH;
	uint32_t n = 0;
	bool gone = false, drained = false, shrunk = false;
	bool stopped = pc_atomic_load_u32(&a->aflags) & PC__AF_STOPPED;
	while (n < batch) {
		pc_msg_t *m = pc__mailbox_pop(&a->mq);
		if (!m) {
			/* The last message stays as the mailbox's stub until the next
			 * pop: an actor going idle on a large one (a run's final
			 * answer, say) would hold it for as long as it stays idle.
			 * A small no-op popped in its place frees it now. */
			if (!shrunk && !stopped && pc__mailbox_stub_large(&a->mq)) {
				shrunk = true;
				pc_msg_t *small = pc_msg_new(PC__MSG_SHRINK, 0);
				if (small) {
					(void)pc__mailbox_push(&a->mq, small); /* this turn holds the schedule */
					continue;
				}
			}
			drained = true;
			break;
		}
		if (m->type == PC__MSG_SHRINK)
			continue; /* pushed above, not sent: counted nowhere */
		n++;
		if (stopped) {
			if (m->type == PC__MSG_DESTROY && (m->flags & PC_MSGF_EMBEDDED)) {
				gone = true;
				break;
			}
			count(&w->c.dead_letters);
			release_refs(a->rt, m);
			continue;
		}
		handle(ctx, a, m);
		flush_outbox(ctx);
		release_refs(a->rt, m);
		if (ctx->exit_req) {
			stopped = true;
			gone = stop_actor(ctx, a, ctx->exit_reason, ctx->exit_code);
			if (gone)
				break;
		}
		/* It sent to a receiver too far behind: end the turn here, so that
		 * it can be muted below. A sender that always has more to do
		 * (it keeps messaging itself) would otherwise never reach the
		 * mute and flood the receiver without bound. */
		if ((ctx->mute_target && !stopped) || ctx->sends >= send_budget)
			break;
	}
	ctx->actor = NULL;
	pc_actor_t *target = ctx->mute_target;
	ctx->mute_target = NULL;
	int r;
	if (gone) {
		destroy(w, a);
		pc_actor_release(target);
		return PC__TURN_GONE;
	}
	pc_atomic_store_u32(&a->popped, a->popped + n);
	uint32_t depth = depth_of(a);
	/* Caught up: let the senders held back on us go. */
	if (depth < PC__DEPTH_LOW && (pc_atomic_load_u32(&a->aflags) & PC__AF_HAS_MUTED))
		pc__unmute_all(a);
	if (drained && pc__mailbox_mark_empty(&a->mq)) {
		r = PC__TURN_IDLE;
	} else if (target && !stopped && depth < PC__DEPTH_HIGH && try_mute(a, target)) {
		/* Held back. A deep actor is never muted (it must drain), and a
		 * muted one lets its own senders go, so holding back can never
		 * close a cycle. */
		count(&w->c.mutes);
		if (pc_atomic_load_u32(&a->aflags) & PC__AF_HAS_MUTED)
			pc__unmute_all(a);
		r = PC__TURN_MUTED;
	} else {
		r = PC__TURN_AGAIN;
	}
	pc_actor_release(target);
	return r;
}

void pc__unmute_all(pc_actor_t *a)
{
	pc__actor_ext_t *x = pc__actor_ext_peek(a);
	if (!x)
		return;
	pthread_mutex_lock(&x->lock);
	pc__actor_vec_t muted = x->muted;
	memset(&x->muted, 0, sizeof(x->muted));
	pc_atomic_and_u32(&a->aflags, ~(uint32_t)PC__AF_HAS_MUTED);
	pthread_mutex_unlock(&x->lock);
	pc__worker_t *w = pc__current_worker();
	for (uint32_t i = 0; i < muted.n; i++) {
		if (w && w->rt == a->rt)
			pc__runq_push(w, muted.v[i].actor);
		else
			pc__schedule_external(a->rt, muted.v[i].actor);
	}
	if (muted.n && w && w->rt == a->rt)
		w->notify_owed = true;
	free(muted.v);
}

static void shutdown_stop(pc_actor_t *a, void *arg)
{
	if (pc_atomic_load_u32(&a->aflags) & PC__AF_STOPPED)
		return;
	struct pc_ctx *ctx = arg;
	ctx->actor = a;
	stop_actor(ctx, a, PC_EXIT_SHUTDOWN, 0);
}

static void shutdown_drain(pc_actor_t *a, void *arg)
{
	(void)arg;
	pc_msg_t *m;
	while ((m = pc__mailbox_pop(&a->mq))) {
		if (!(m->flags & PC_MSGF_EMBEDDED))
			pc_atomic_faa_u64(&a->rt->ext_dead, 1);
		release_refs(a->rt, m);
	}
	pc__actor_ext_free(a);
}

/* Shutdown, once the workers have stopped: stop handlers for the living.
 * Blocking jobs may still be sending meanwhile; sends to stopped actors
 * are dead letters. */
void pc__actors_stop_all(pc_runtime_t *rt)
{
	struct pc_ctx ctx = {.rt = rt};
	pc__actor_pool_each(rt, shutdown_stop, &ctx);
}

/* Then, with no other thread left: every mailbox drained (releasing what
 * messages hold) while all actor memory still exists. pc__actors_free then
 * frees the memory. */
void pc__actors_drain(pc_runtime_t *rt)
{
	pc__registry_free(rt);
	pc__actor_pool_each(rt, shutdown_drain, NULL);
}

static void shutdown_free(pc_actor_t *a, void *arg)
{
	(void)arg;
	pc__mailbox_destroy(&a->mq);
}

void pc__actors_free(pc_runtime_t *rt)
{
	pc__actor_pool_each(rt, shutdown_free, NULL);
	pc__actor_pool_free(rt);
}
