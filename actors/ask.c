/*
 * pc_ask_sync: a thread outside the runtime asks an actor and waits. A
 * short-lived waiter actor receives the reply, copies it for the caller
 * and signals; the waiter's state is shared by the caller and the actor
 * and freed by whichever lets go last. The waiter monitors the target, so
 * a target that stops without replying ends the wait at once.
 */
#include <stdlib.h>
#include <time.h>

#include "../mailbox/atomics.h"
#include "../runtime/clock.h"
#include "actor_internal.h"

typedef struct waiter {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	uint64_t corr;
	pc_actor_t *target; /* retained until the waiter stops */
	pc_msg_t *reply;
	int result;         /* PC_ESTOPPED when the target stopped first */
	bool done;
	uint32_t refs;
} waiter_t;

static void waiter_release(waiter_t *w)
{
	if (pc_atomic_faa_u32(&w->refs, (uint32_t)-1) != 1)
		return;
	pc_msg_free(w->reply);
	pc_actor_release(w->target);
	pthread_cond_destroy(&w->cond);
	pthread_mutex_destroy(&w->lock);
	free(w);
}

enum { WAITER_WATCH = PC_MSG_TYPE_SYSTEM + 0x400 };

static int waiter_receive(pc_ctx_t *ctx, void *state, pc_msg_t *msg)
{
	waiter_t *w = state;
	pc_msg_t *copy = NULL;
	int result = 0;
	if (msg->type == WAITER_WATCH) {
		/* The first message, queued before the request went out. */
		return pc_monitor(ctx, w->target, NULL);
	} else if (msg->type == PC_MSG_DOWN) {
		result = PC_ESTOPPED;
	} else if (msg->corr == w->corr) {
		copy = pc__msg_clone(msg);
		result = copy ? 0 : PC_ENOMEM;
	} else {
		return 0;
	}
	pthread_mutex_lock(&w->lock);
	w->reply = copy;
	w->result = result;
	w->done = true;
	pthread_cond_signal(&w->cond);
	pthread_mutex_unlock(&w->lock);
	pc_exit(ctx, PC_EXIT_NORMAL);
	return 0;
}

static void waiter_stop(pc_ctx_t *ctx, void *state, int reason)
{
	(void)ctx;
	(void)reason;
	waiter_t *w = state;
	/* Stopped before any answer (the runtime is shutting down): the
	 * caller must not wait for one. */
	pthread_mutex_lock(&w->lock);
	if (!w->done) {
		w->result = PC_ESTOPPED;
		w->done = true;
		pthread_cond_signal(&w->cond);
	}
	pthread_mutex_unlock(&w->lock);
	waiter_release(w);
}

static const pc_behavior_t waiter_behavior = {"ask_sync", waiter_receive, waiter_stop};

int pc_ask_sync(pc_actor_t *to, pc_msg_t *msg, int64_t timeout_ms, pc_msg_t **reply)
{
	if (reply)
		*reply = NULL;
	if (!to || !msg || !reply) {
		pc_msg_free(msg);
		return PC_EINVAL;
	}
	if (pc__current_worker()) {
		pc_msg_free(msg);
		return PC_ESTATE;
	}
	waiter_t *w = calloc(1, sizeof(*w));
	if (!w) {
		pc_msg_free(msg);
		return PC_ENOMEM;
	}
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	int rc = pthread_cond_init(&w->cond, &ca);
	pthread_condattr_destroy(&ca);
	if (rc != 0) {
		free(w);
		pc_msg_free(msg);
		return PC_ESYS;
	}
	pthread_mutex_init(&w->lock, NULL);
	w->refs = 2;
	w->corr = pc__next_id(to->rt);
	pc_actor_t *tmp = NULL;
	rc = pc_spawn(to->rt, &waiter_behavior, w, &tmp);
	if (rc != 0) {
		w->refs = 1;
		waiter_release(w);
		pc_msg_free(msg);
		return rc;
	}
	w->target = pc_actor_retain(to);
	pc_msg_t *watch = pc_msg_new(WAITER_WATCH, 0);
	if (!watch || pc_send(tmp, watch) != 0) {
		pc_msg_free(msg);
		pc_actor_stop(tmp, PC_EXIT_NORMAL);
		pc_actor_release(tmp);
		waiter_release(w);
		return PC_ENOMEM;
	}
	msg->reply_to = pc_actor_retain(tmp);
	msg->flags |= PC_MSGF_REPLY_REF;
	msg->corr = w->corr;
	rc = pc_send(to, msg);
	if (rc == 0) {
		uint64_t deadline = pc__deadline_ns(timeout_ms);
		pthread_mutex_lock(&w->lock);
		while (!w->done) {
			if (deadline == UINT64_MAX) {
				pthread_cond_wait(&w->cond, &w->lock);
				continue;
			}
			if (pc__clock_mono_ns() >= deadline)
				break;
			struct timespec ts = pc__timespec_ns(deadline);
			pthread_cond_timedwait(&w->cond, &w->lock, &ts);
		}
		if (w->done) {
			*reply = w->reply;
			w->reply = NULL;
			rc = w->result;
		} else {
			rc = PC_ETIMEDOUT;
		}
		pthread_mutex_unlock(&w->lock);
	}
	pc_actor_stop(tmp, PC_EXIT_NORMAL);
	pc_actor_release(tmp);
	waiter_release(w);
	return rc;
}
