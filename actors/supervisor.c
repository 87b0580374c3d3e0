/*
 * The supervisor actor. It monitors each child; a DOWN tells it which
 * child stopped and why, and the child's restart type and the strategy
 * decide what happens. Restart times are kept in a ring of
 * max_restarts + 1 entries: when the oldest of them is still inside the
 * period, the intensity is exceeded.
 */
#include "supervisor.h"

#include <stdlib.h>
#include <string.h>

#include "actor_internal.h"
#include "registry.h"

enum { SUP_INIT = PC_MSG_TYPE_SYSTEM + 0x200 };

typedef struct child {
	pc_child_spec_t spec;
	char *name;
	pc_actor_t *actor; /* retained; NULL while not running */
	uint64_t mon;      /* monitor ref of the running incarnation */
} child_t;

typedef struct sup {
	pc_sup_strategy_t strategy;
	uint32_t max_restarts, period_ms;
	child_t *children;
	uint32_t n;
	uint64_t *ring; /* restart times, max_restarts + 1 of them */
	uint32_t ring_next, ring_used;
} sup_t;

static void sup_free(sup_t *s)
{
	for (uint32_t i = 0; s->children && i < s->n; i++)
		free(s->children[i].name);
	free(s->children);
	free(s->ring);
	free(s);
}

static int start_child(pc_ctx_t *ctx, child_t *c)
{
	pc_actor_t *a = NULL;
	int rc = c->spec.start(pc_ctx_runtime(ctx), c->spec.arg, &a);
	if (rc != 0)
		return rc;
	if (!a)
		return PC_EINVAL;
	if ((rc = pc_monitor(ctx, a, &c->mon)) != 0) {
		pc_actor_stop(a, PC_EXIT_SHUTDOWN);
		pc_actor_release(a);
		return rc;
	}
	/* A child that already stopped cannot take its name (PC_ESTOPPED):
	 * it is a child that failed, not a failed start. The monitor set up
	 * above brings its DOWN, which restarts it by policy and counts
	 * against the intensity. */
	if (c->name && (rc = pc_register(a, c->name)) != 0 && rc != PC_ESTOPPED) {
		pc_demonitor(ctx, c->mon);
		pc_actor_stop(a, PC_EXIT_SHUTDOWN);
		pc_actor_release(a);
		return rc;
	}
	c->actor = a;
	return 0;
}

/* Stops a running child without hearing about it. */
static void stop_child(pc_ctx_t *ctx, child_t *c)
{
	if (!c->actor)
		return;
	pc_demonitor(ctx, c->mon);
	/* Free the name now, not when the child gets to its stop message, so
	 * that a new incarnation can take it at once (one-for-all restarts).
	 * Only if it still names this child: a look-up followed by
	 * pc_unregister could remove someone else's registration. */
	if (c->name)
		pc__registry_forget(pc_ctx_runtime(ctx), c->name, c->actor);
	pc_actor_stop(c->actor, PC_EXIT_SHUTDOWN);
	pc_actor_release(c->actor);
	c->actor = NULL;
}

static void stop_all(pc_ctx_t *ctx, sup_t *s)
{
	for (uint32_t i = s->n; i-- > 0;)
		stop_child(ctx, &s->children[i]);
}

/* Records a restart; false when the intensity is exceeded. */
static bool note_restart(sup_t *s)
{
	uint64_t now = pc_runtime_now_ms();
	uint32_t cap = s->max_restarts + 1;
	s->ring[s->ring_next] = now;
	s->ring_next = (s->ring_next + 1) % cap;
	if (s->ring_used < cap)
		s->ring_used++;
	if (s->ring_used < cap)
		return true;
	uint64_t oldest = s->ring[s->ring_next]; /* the slot written next is the oldest */
	return now - oldest > s->period_ms;
}

static bool wants_restart(const child_t *c, int reason)
{
	switch (c->spec.restart) {
	case PC_CHILD_PERMANENT:
		return true;
	case PC_CHILD_TRANSIENT:
		return reason != PC_EXIT_NORMAL && reason != PC_EXIT_SHUTDOWN;
	default:
		return false;
	}
}

static int fail(pc_ctx_t *ctx, sup_t *s, int code)
{
	stop_all(ctx, s);
	return code;
}

static int on_down(pc_ctx_t *ctx, sup_t *s, const pc_down_t *d)
{
	child_t *c = NULL;
	for (uint32_t i = 0; i < s->n && !c; i++)
		if (s->children[i].actor && s->children[i].mon == d->ref)
			c = &s->children[i];
	if (!c)
		return 0;
	pc_actor_release(c->actor);
	c->actor = NULL;
	if (!wants_restart(c, d->reason))
		return 0;
	if (!note_restart(s))
		return fail(ctx, s, PC_ELIMIT);
	if (s->strategy == PC_SUP_ONE_FOR_ALL) {
		stop_all(ctx, s);
		for (uint32_t i = 0; i < s->n; i++) {
			int rc = start_child(ctx, &s->children[i]);
			if (rc != 0)
				return fail(ctx, s, rc);
		}
		return 0;
	}
	int rc = start_child(ctx, c);
	return rc != 0 ? fail(ctx, s, rc) : 0;
}

static int sup_receive(pc_ctx_t *ctx, void *state, pc_msg_t *msg)
{
	sup_t *s = state;
	if (msg->type == SUP_INIT) {
		for (uint32_t i = 0; i < s->n; i++) {
			int rc = start_child(ctx, &s->children[i]);
			if (rc != 0)
				return fail(ctx, s, rc);
		}
		return 0;
	}
	if (msg->type == PC_MSG_DOWN)
		return on_down(ctx, s, pc_msg_cdata(msg));
	return 0;
}

static void sup_stop(pc_ctx_t *ctx, void *state, int reason)
{
	(void)reason;
	stop_all(ctx, state);
	sup_free(state);
}

static const pc_behavior_t sup_behavior = {"supervisor", sup_receive, sup_stop};

int pc_supervisor_start(pc_runtime_t *rt, const pc_supervisor_spec_t *spec, pc_actor_t **out)
{
	if (!rt || !spec || !out || (spec->nchildren && !spec->children))
		return PC_EINVAL;
	for (uint32_t i = 0; i < spec->nchildren; i++)
		if (!spec->children[i].start)
			return PC_EINVAL;
	sup_t *s = calloc(1, sizeof(*s));
	if (!s)
		return PC_ENOMEM;
	s->strategy = spec->strategy;
	s->max_restarts = spec->max_restarts;
	s->period_ms = spec->period_ms;
	s->n = spec->nchildren;
	s->children = calloc(s->n ? s->n : 1, sizeof(child_t));
	s->ring = calloc((size_t)s->max_restarts + 1, sizeof(uint64_t));
	bool ok = s->children && s->ring;
	for (uint32_t i = 0; ok && i < s->n; i++) {
		s->children[i].spec = spec->children[i];
		if (spec->children[i].name) {
			s->children[i].name = strdup(spec->children[i].name);
			ok = s->children[i].name != NULL;
		}
		s->children[i].spec.name = s->children[i].name;
	}
	if (!ok) {
		sup_free(s);
		return PC_ENOMEM;
	}
	pc_actor_t *a = NULL;
	int rc = pc_spawn(rt, &sup_behavior, s, &a);
	if (rc != 0) {
		sup_free(s);
		return rc;
	}
	pc_msg_t *init = pc_msg_new(SUP_INIT, 0);
	if (!init || pc_send(a, init) != 0) {
		/* The actor owns s now; stopping it frees s. */
		pc_actor_stop(a, PC_EXIT_SHUTDOWN);
		pc_actor_release(a);
		return init ? PC_ESTOPPED : PC_ENOMEM;
	}
	*out = a;
	return 0;
}
