/*
 * The global lane (lane.h): a fair semaphore as an actor.
 *
 * State, owned by the actor alone:
 *   - one entry per known ticket (queued or holding a permit), found by a
 *     small chained hash table keyed by ticket, so release, progress and
 *     expiry are O(1) whatever the queue length;
 *   - three FIFO queues (doubly linked through the entries), one per
 *     priority, served foreground, normal, background;
 *   - the holders' references, one per entry, released when the entry goes.
 *
 * The counters callers may read from any thread (pc_lane_stats) live in the
 * pc_lane_t handle, written by the actor with atomic stores. The handle is
 * shared by the caller and the actor (a reference count of two), so a
 * message still queued when pc_lane_free is called can be handled safely.
 *
 * Expiry: a granted entry with a task timeout has one timer to the lane,
 * carrying the ticket and the entry's generation. Progress re-arms it with
 * a new generation; a fire whose generation or ticket no longer matches is
 * stale and ignored, which covers the window in which a cancelled timer's
 * message is already on its way.
 */
#include "lane.h"

#include <stdlib.h>
#include <string.h>

#include "actors/timer.h"

enum {
	MSG_ACQUIRE = PC_MSG_TYPE_SYSTEM + 0x2310, /* acquire_msg_t */
	MSG_RELEASE,                               /* u64 ticket */
	MSG_PROGRESS,                              /* u64 ticket */
	MSG_SET_MAX,                               /* u64 max */
	MSG_EXPIRE,                                /* expire_msg_t */
};

#define NPRIO 3

typedef struct acquire_msg {
	uint64_t ticket;
	uint64_t tag;
	uint64_t timeout_ms;
	uint64_t sent_ms; /* when the caller asked: the wait is measured from here */
	pc_actor_t *holder; /* a reference, handed to the lane */
	int32_t priority;
} acquire_msg_t;

typedef struct expire_msg {
	uint64_t ticket;
	uint64_t gen;
} expire_msg_t;

struct pc_lane {
	pc_actor_t *actor;
	uint32_t refs; /* the caller's and the actor's */
	/* Written by the actor only; read anywhere (atomics). */
	uint32_t max;
	uint32_t active;
	uint32_t queued;
	uint32_t peak_active;
	uint64_t granted;
	uint64_t expired;
};

typedef struct entry entry_t;
struct entry {
	uint64_t ticket;
	uint64_t tag;
	uint64_t timeout_ms;
	uint64_t enq_ms;
	uint64_t gen;
	pc_timer_t timer;
	pc_actor_t *holder;
	uint32_t ahead;
	int prio; /* queue index: 0 foreground .. NPRIO-1 background */
	bool granted;
	entry_t *prev, *next; /* queue links, while queued */
	entry_t *hnext;       /* hash chain */
};

typedef struct queue {
	entry_t *head, *tail;
	uint32_t n;
} queue_t;

typedef struct lane_state {
	pc_lane_t *l;
	pc_runtime_t *rt;
	entry_t **buckets;
	size_t nbuckets; /* a power of two */
	size_t nentries;
	queue_t q[NPRIO];
	uint32_t max;
	uint32_t active;
	uint32_t queued;
} lane_state_t;

static void lane_unref(pc_lane_t *l)
{
	if (__atomic_sub_fetch(&l->refs, 1, __ATOMIC_ACQ_REL) == 0)
		free(l);
}

/* ---- the ticket table ----------------------------------------------------- */

static size_t slot(const lane_state_t *s, uint64_t ticket)
{
	uint64_t h = ticket * 0x9E3779B97F4A7C15ull;
	return (size_t)(h >> 32) & (s->nbuckets - 1);
}

static entry_t *find(const lane_state_t *s, uint64_t ticket)
{
	entry_t *e = s->buckets[slot(s, ticket)];
	while (e && e->ticket != ticket)
		e = e->hnext;
	return e;
}

/* Doubles the table when it is full on average. A failed grow only makes
 * chains longer. */
static void maybe_grow(lane_state_t *s)
{
	if (s->nentries < s->nbuckets)
		return;
	size_t n = s->nbuckets * 2;
	entry_t **b = calloc(n, sizeof(*b));
	if (!b)
		return;
	entry_t **old = s->buckets;
	size_t on = s->nbuckets;
	s->buckets = b;
	s->nbuckets = n;
	for (size_t i = 0; i < on; i++) {
		entry_t *e = old[i];
		while (e) {
			entry_t *next = e->hnext;
			size_t k = slot(s, e->ticket);
			e->hnext = b[k];
			b[k] = e;
			e = next;
		}
	}
	free(old);
}

static void table_add(lane_state_t *s, entry_t *e)
{
	maybe_grow(s);
	size_t k = slot(s, e->ticket);
	e->hnext = s->buckets[k];
	s->buckets[k] = e;
	s->nentries++;
}

static void table_remove(lane_state_t *s, entry_t *e)
{
	entry_t **pp = &s->buckets[slot(s, e->ticket)];
	while (*pp && *pp != e)
		pp = &(*pp)->hnext;
	if (*pp) {
		*pp = e->hnext;
		s->nentries--;
	}
}

/* ---- queues ------------------------------------------------------------- */

static void q_push(queue_t *q, entry_t *e)
{
	e->next = NULL;
	e->prev = q->tail;
	if (q->tail)
		q->tail->next = e;
	else
		q->head = e;
	q->tail = e;
	q->n++;
}

static void q_unlink(queue_t *q, entry_t *e)
{
	if (e->prev)
		e->prev->next = e->next;
	else
		q->head = e->next;
	if (e->next)
		e->next->prev = e->prev;
	else
		q->tail = e->prev;
	e->prev = e->next = NULL;
	q->n--;
}

static int prio_index(int32_t priority)
{
	return priority > 0 ? 0 : priority == 0 ? 1 : 2;
}

/* ---- stats ---------------------------------------------------------------- */

static void publish(lane_state_t *s)
{
	pc_lane_t *l = s->l;
	__atomic_store_n(&l->max, s->max, __ATOMIC_RELAXED);
	__atomic_store_n(&l->active, s->active, __ATOMIC_RELAXED);
	__atomic_store_n(&l->queued, s->queued, __ATOMIC_RELAXED);
	if (s->active > __atomic_load_n(&l->peak_active, __ATOMIC_RELAXED))
		__atomic_store_n(&l->peak_active, s->active, __ATOMIC_RELAXED);
}

/* ---- notices -------------------------------------------------------------- */

static void notify(lane_state_t *s, const entry_t *e, uint32_t type, uint64_t wait_ms)
{
	pc_msg_t *m = pc_msg_new(type, sizeof(pc_lane_notice_t));
	if (!m)
		return; /* the holder misses a notice; the permit itself stands */
	pc_lane_notice_t *n = pc_msg_data(m);
	*n = (pc_lane_notice_t){
		.ticket = e->ticket,
		.tag = e->tag,
		.wait_ms = wait_ms,
		.queued_ahead = e->ahead,
		.active = s->active,
	};
	pc_send(e->holder, m);
}

/* ---- the semaphore -------------------------------------------------------- */

static void entry_free(lane_state_t *s, entry_t *e)
{
	if (e->timer)
		pc_timer_cancel(s->rt, e->timer);
	pc_actor_release(e->holder);
	free(e);
}

/* Arms (or re-arms) the task timeout of a granted entry. A timer that
 * cannot be armed leaves the permit without a timeout: the holder still
 * releases it as usual. */
static void arm_expiry(pc_ctx_t *ctx, lane_state_t *s, entry_t *e)
{
	if (e->timer) {
		pc_timer_cancel(s->rt, e->timer);
		e->timer = 0;
	}
	if (!e->timeout_ms)
		return;
	pc_msg_t *m = pc_msg_new(MSG_EXPIRE, sizeof(expire_msg_t));
	if (!m)
		return;
	expire_msg_t *x = pc_msg_data(m);
	x->ticket = e->ticket;
	x->gen = ++e->gen;
	if (pc_timer_after(pc_self(ctx), e->timeout_ms, m, &e->timer) != 0)
		e->timer = 0;
}

static void grant(pc_ctx_t *ctx, lane_state_t *s, entry_t *e)
{
	uint64_t now = pc_runtime_now_ms();
	e->granted = true;
	s->active++;
	__atomic_add_fetch(&s->l->granted, 1, __ATOMIC_RELAXED);
	arm_expiry(ctx, s, e);
	publish(s);
	notify(s, e, PC_MSG_LANE_GRANTED, now > e->enq_ms ? now - e->enq_ms : 0);
}

/* Grants permits while there are free ones and requests waiting, highest
 * priority first. */
static void pump(pc_ctx_t *ctx, lane_state_t *s)
{
	for (int p = 0; p < NPRIO && s->active < s->max; p++) {
		while (s->q[p].head && s->active < s->max) {
			entry_t *e = s->q[p].head;
			q_unlink(&s->q[p], e);
			s->queued--;
			grant(ctx, s, e);
		}
	}
	publish(s);
}

static void on_acquire(pc_ctx_t *ctx, lane_state_t *s, const acquire_msg_t *a)
{
	if (find(s, a->ticket)) {
		/* Tickets are unique per lane: a second request for a live one
		 * is a caller's mistake and changes nothing. */
		pc_actor_release(a->holder);
		return;
	}
	entry_t *e = calloc(1, sizeof(*e));
	if (!e) {
		pc_actor_release(a->holder);
		return;
	}
	*e = (entry_t){
		.ticket = a->ticket,
		.tag = a->tag,
		.timeout_ms = a->timeout_ms,
		.enq_ms = a->sent_ms,
		.holder = a->holder,
		.prio = prio_index(a->priority),
	};
	table_add(s, e);
	if (s->queued == 0 && s->active < s->max) {
		grant(ctx, s, e);
		return;
	}
	/* Served before it: everything queued at its priority or above. */
	for (int p = 0; p <= e->prio; p++)
		e->ahead += s->q[p].n;
	q_push(&s->q[e->prio], e);
	s->queued++;
	publish(s);
	notify(s, e, PC_MSG_LANE_WAITING, 0);
}

static void on_release(pc_ctx_t *ctx, lane_state_t *s, uint64_t ticket)
{
	entry_t *e = find(s, ticket);
	if (!e)
		return; /* released twice, expired, or never asked: idempotent */
	table_remove(s, e);
	if (e->granted) {
		s->active--;
	} else {
		q_unlink(&s->q[e->prio], e);
		s->queued--;
	}
	entry_free(s, e);
	pump(ctx, s);
}

static void on_progress(pc_ctx_t *ctx, lane_state_t *s, uint64_t ticket)
{
	entry_t *e = find(s, ticket);
	if (e && e->granted && e->timeout_ms)
		arm_expiry(ctx, s, e);
}

static void on_expire(pc_ctx_t *ctx, lane_state_t *s, const expire_msg_t *x)
{
	entry_t *e = find(s, x->ticket);
	if (!e || !e->granted || e->gen != x->gen)
		return; /* stale: released, re-armed, or a new ticket */
	e->timer = 0; /* this was it */
	table_remove(s, e);
	s->active--;
	__atomic_add_fetch(&s->l->expired, 1, __ATOMIC_RELAXED);
	notify(s, e, PC_MSG_LANE_EXPIRED, 0);
	entry_free(s, e);
	pump(ctx, s);
}

static int receive(pc_ctx_t *ctx, void *state, pc_msg_t *msg)
{
	lane_state_t *s = state;
	switch (msg->type) {
	case MSG_ACQUIRE:
		on_acquire(ctx, s, pc_msg_cdata(msg));
		break;
	case MSG_RELEASE:
		on_release(ctx, s, pc_msg_u64(msg));
		break;
	case MSG_PROGRESS:
		on_progress(ctx, s, pc_msg_u64(msg));
		break;
	case MSG_SET_MAX:
		s->max = (uint32_t)pc_msg_u64(msg);
		pump(ctx, s);
		break;
	case MSG_EXPIRE:
		on_expire(ctx, s, pc_msg_cdata(msg));
		break;
	default:
		break;
	}
	return 0;
}

/* Releases every holder's reference and cancels every timer: nothing the
 * lane held survives it. */
static void stop(pc_ctx_t *ctx, void *state, int reason)
{
	(void)ctx;
	(void)reason;
	lane_state_t *s = state;
	for (size_t i = 0; i < s->nbuckets; i++) {
		entry_t *e = s->buckets[i];
		while (e) {
			entry_t *next = e->hnext;
			entry_free(s, e);
			e = next;
		}
	}
	s->active = s->queued = 0;
	publish(s);
	free(s->buckets);
	lane_unref(s->l);
	free(s);
}

static const pc_behavior_t lane_behavior = {
	.name = "lane",
	.receive = receive,
	.stop = stop,
};

int pc_lane_new(pc_runtime_t *rt, uint32_t max_concurrent, pc_lane_t **out)
{
	if (!rt || max_concurrent < 1 || !out)
		return PC_EINVAL;
	int rc = PC_ENOMEM;
	pc_lane_t *l = calloc(1, sizeof(*l));
	lane_state_t *s = calloc(1, sizeof(*s));
	if (!l || !s)
		goto fail;
	s->nbuckets = 64;
	if (!(s->buckets = calloc(s->nbuckets, sizeof(*s->buckets))))
		goto fail;
	s->l = l;
	s->rt = rt;
	s->max = max_concurrent;
	l->max = max_concurrent;
	l->refs = 2;
	if ((rc = pc_spawn(rt, &lane_behavior, s, &l->actor)) != 0)
		goto fail;
	*out = l;
	return 0;
fail:
	if (s)
		free(s->buckets);
	free(s);
	free(l);
	return rc;
}

void pc_lane_free(pc_lane_t *l)
{
	if (!l)
		return;
	pc_actor_t *a = l->actor;
	/* Queued behind what callers already sent: those are handled first. */
	pc_actor_stop(a, PC_EXIT_NORMAL);
	pc_actor_release(a);
	lane_unref(l);
}

int pc_lane_acquire(pc_lane_t *l, uint64_t ticket, int priority, pc_actor_t *holder, uint64_t tag,
		    uint64_t task_timeout_ms)
{
	if (!l || !holder)
		return PC_EINVAL;
	pc_msg_t *m = pc_msg_new(MSG_ACQUIRE, sizeof(acquire_msg_t));
	if (!m)
		return PC_ENOMEM;
	acquire_msg_t *a = pc_msg_data(m);
	*a = (acquire_msg_t){
		.ticket = ticket,
		.tag = tag,
		.timeout_ms = task_timeout_ms,
		.sent_ms = pc_runtime_now_ms(),
		.holder = pc_actor_retain(holder),
		.priority = priority,
	};
	int rc = pc_send(l->actor, m);
	/* Refused at once: the message is gone, the reference is ours to drop.
	 * (A lane that stops later finds it a dead letter; that only happens
	 * after pc_lane_free, when the runtime is about to stop anyway.) */
	if (rc != 0)
		pc_actor_release(holder);
	return rc;
}

int pc_lane_release(pc_lane_t *l, uint64_t ticket)
{
	return l ? pc_send_u64(l->actor, MSG_RELEASE, ticket) : PC_EINVAL;
}

int pc_lane_progress(pc_lane_t *l, uint64_t ticket)
{
	return l ? pc_send_u64(l->actor, MSG_PROGRESS, ticket) : PC_EINVAL;
}

int pc_lane_set_max(pc_lane_t *l, uint32_t max_concurrent)
{
	if (!l || max_concurrent < 1)
		return PC_EINVAL;
	return pc_send_u64(l->actor, MSG_SET_MAX, max_concurrent);
}

void pc_lane_stats(const pc_lane_t *l, pc_lane_stats_t *out)
{
	if (!out)
		return;
	*out = (pc_lane_stats_t){0};
	if (!l)
		return;
	out->max = __atomic_load_n(&l->max, __ATOMIC_RELAXED);
	out->active = __atomic_load_n(&l->active, __ATOMIC_RELAXED);
	out->queued = __atomic_load_n(&l->queued, __ATOMIC_RELAXED);
	out->peak_active = __atomic_load_n(&l->peak_active, __ATOMIC_RELAXED);
	out->granted = __atomic_load_n(&l->granted, __ATOMIC_RELAXED);
	out->expired = __atomic_load_n(&l->expired, __ATOMIC_RELAXED);
}
