/*
 * The deadline timer actor. The owner's handle keeps the generation and
 * the due time; the actor keeps one runtime timer for the newest
 * generation it has heard of. Commands carry (generation, due time); the
 * actor re-arms its runtime timer for each and, when it fires, tells the
 * owner that generation. Ordering per sender makes "newest heard of" the
 * owner's newest command.
 */
#include "deadline.h"

#include <stdlib.h>
#include <string.h>

#include "timer.h"

enum {
	DL_WATCH = PC_MSG_TYPE_SYSTEM + 0x300, /* first message: monitor the owner */
	DL_SET,                                /* payload cmd_t; due 0 = disarm */
	DL_TICK,                               /* payload uint64 generation */
};

typedef struct cmd {
	uint64_t gen;
	uint64_t due;
} cmd_t;

struct pc_deadline {
	pc_actor_t *actor; /* retained */
	uint64_t gen;
	uint64_t due;      /* 0 = disarmed */
};

typedef struct dl_state {
	pc_actor_t *owner; /* retained */
	uint32_t fire_type;
	uint64_t gen;
	pc_timer_t timer;
} dl_state_t;

static int dl_receive(pc_ctx_t *ctx, void *state, pc_msg_t *msg)
{
	dl_state_t *s = state;
	pc_runtime_t *rt = pc_ctx_runtime(ctx);
	switch (msg->type) {
	case DL_WATCH:
		return pc_monitor(ctx, s->owner, NULL);
	case DL_SET: {
		const cmd_t *c = pc_msg_cdata(msg);
		pc_timer_cancel(rt, s->timer);
		s->timer = 0;
		s->gen = c->gen;
		if (c->due == 0)
			return 0;
		uint64_t now = pc_runtime_now_ms();
		pc_msg_t *tick = pc_msg_new(DL_TICK, sizeof(uint64_t));
		if (!tick)
			return PC_ENOMEM;
		memcpy(pc_msg_data(tick), &c->gen, sizeof(c->gen));
		return pc_timer_after(pc_self(ctx), c->due > now ? c->due - now : 0, tick, &s->timer);
	}
	case DL_TICK:
		s->timer = 0;
		if (pc_msg_u64(msg) == s->gen)
			return pc_send_u64(s->owner, s->fire_type, s->gen) == PC_ENOMEM ? PC_ENOMEM : 0;
		return 0;
	case PC_MSG_DOWN: /* the owner stopped */
		pc_exit(ctx, PC_EXIT_NORMAL);
		return 0;
	default:
		return 0;
	}
}

static void dl_stop(pc_ctx_t *ctx, void *state, int reason)
{
	(void)reason;
	dl_state_t *s = state;
	pc_timer_cancel(pc_ctx_runtime(ctx), s->timer);
	pc_actor_release(s->owner);
	free(s);
}

static const pc_behavior_t dl_behavior = {"deadline", dl_receive, dl_stop};

static int send_set(pc_deadline_t *d)
{
	pc_msg_t *m = pc_msg_new(DL_SET, sizeof(cmd_t));
	if (!m)
		return PC_ENOMEM;
	cmd_t c = {d->gen, d->due};
	memcpy(pc_msg_data(m), &c, sizeof(c));
	return pc_send(d->actor, m);
}

int pc_deadline_new(pc_ctx_t *owner, uint32_t fire_type, pc_deadline_t **out)
{
	if (!owner || !out)
		return PC_EINVAL;
	*out = NULL;
	pc_deadline_t *d = calloc(1, sizeof(*d));
	dl_state_t *s = calloc(1, sizeof(*s));
	pc_msg_t *watch = pc_msg_new(DL_WATCH, 0);
	if (!d || !s || !watch) {
		free(d);
		free(s);
		pc_msg_free(watch);
		return PC_ENOMEM;
	}
	s->owner = pc_actor_retain(pc_self(owner));
	s->fire_type = fire_type;
	int rc = pc_spawn(pc_ctx_runtime(owner), &dl_behavior, s, &d->actor);
	if (rc != 0) {
		pc_actor_release(s->owner);
		free(s);
		free(d);
		pc_msg_free(watch);
		return rc;
	}
	pc_send(d->actor, watch);
	/* Generations start from the timer actor's unique id, so deadlines of
	 * one owner that share a fire type never accept each other's fires. */
	d->gen = pc_actor_id(d->actor) << 32;
	*out = d;
	return 0;
}

/* `base + ms`, saturated: a huge delay means "practically never", and
 * must not wrap around into the past (which would fire at once). Never 0,
 * which means disarmed. */
static uint64_t due_after(uint64_t base, uint64_t ms)
{
	uint64_t due = base + ms;
	if (due < base)
		due = UINT64_MAX - 1;
	return due ? due : 1;
}

int pc_deadline_arm(pc_deadline_t *d, uint64_t ms)
{
	if (!d)
		return PC_EINVAL;
	d->gen++;
	d->due = due_after(pc_runtime_now_ms(), ms);
	return send_set(d);
}

int pc_deadline_extend(pc_deadline_t *d, uint64_t ms)
{
	if (!d)
		return PC_EINVAL;
	if (d->due == 0)
		return PC_ESTATE;
	d->gen++;
	d->due = due_after(d->due, ms);
	return send_set(d);
}

int pc_deadline_cancel(pc_deadline_t *d)
{
	if (!d)
		return PC_EINVAL;
	if (d->due == 0)
		return 0;
	d->gen++;
	d->due = 0;
	return send_set(d);
}

bool pc_deadline_fired(pc_deadline_t *d, const pc_msg_t *msg)
{
	if (!d || !msg || msg->size != sizeof(uint64_t) || d->due == 0 || pc_msg_u64(msg) != d->gen)
		return false;
	d->due = 0;
	return true;
}

bool pc_deadline_armed(const pc_deadline_t *d)
{
	return d && d->due != 0;
}

uint64_t pc_deadline_due(const pc_deadline_t *d)
{
	return d ? d->due : 0;
}

void pc_deadline_free(pc_deadline_t *d)
{
	if (!d)
		return;
	pc_actor_stop(d->actor, PC_EXIT_NORMAL);
	pc_actor_release(d->actor);
	free(d);
}
