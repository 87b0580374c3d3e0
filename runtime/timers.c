/*
 * The timer thread and timer entries.
 *
 * One thread owns the hierarchical wheel (timer_wheel.c) and sleeps on a
 * condition variable until the earliest deadline, or indefinitely when no
 * timer is armed: an idle runtime wakes for nothing. Arming an earlier
 * deadline than the one slept for signals it.
 *
 * The wheel's cascading (moving timers down its levels as their time
 * nears) is done ahead, a chunk per round of the thread, the lock let go
 * in between.
 *
 * The wheel counts milliseconds; a timer's exact due time is kept in
 * nanoseconds. The wheel hands over every timer due within the current
 * millisecond, and those not yet due wait on a short "soon" list, ordered by
 * due time, that the thread sleeps on with nanosecond precision, waking at
 * most once per PC__TIMER_SLACK_NS for them: timers are never early and
 * not rounded up to the next millisecond either.
 *
 * An entry lives from arm until its message has been claimed at delivery
 * (one-shot) or until cancel (periodic). A fired message carries its
 * entry's index; while it is in flight the entry is pinned, so the check at
 * delivery (pc__timer_claim) sees a cancel that happened after the fire:
 * a cancelled timer is never handled. Ids carry a generation so a stale id
 * never cancels a later timer that reuses the slot.
 */
#include "runtime_internal.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../actors/timer.h"
#include "../mailbox/atomics.h"
#include "clock.h"

#define CHUNK_BITS 12
#define CHUNK (1u << CHUNK_BITS)
/* The timer thread wakes at most once per this many ns for sub-millisecond
 * due times: the bound on lateness it adds. */
#define PC__TIMER_SLACK_NS 200000u
/* The wheel's cascading done ahead of time (pc__tw_drain_ahead): at most
 * this many nodes per round of the thread, tens of microseconds, and a
 * round at least this often while some are left. 256 a millisecond moves
 * a 64 ms slot of 16,000 timers before it is due. */
#define PC__TIMER_DRAIN_BUDGET 256u
#define PC__TIMER_DRAIN_EVERY_NS 1000000u

struct pc__timer_entry {
	pc__tw_node_t node;
	pc_actor_t *target;  /* retained */
	pc_msg_t *msg;       /* one-shot: the message; periodic: the template */
	pc_msg_t *out;       /* fired, not yet sent */
	pc__timer_entry_t *fired_next;
	pc__timer_entry_t *soon_prev, *soon_next;
	uint64_t due_ns;     /* exact due time; the wheel holds it in ms, floored */
	uint64_t fired_due_ns; /* the due time it fired for (a periodic one's
				* due_ns has moved on by then) */
	uint64_t period_ms;  /* 0 = one-shot */
	uint32_t gen;
	uint32_t next_free;  /* index + 1 */
	uint32_t index;
	bool live, in_wheel, in_soon, in_flight, cancelled;
};

static pc__timer_entry_t *entry_at(pc__timers_t *t, uint32_t idx)
{
	return &t->chunks[idx >> CHUNK_BITS][idx & (CHUNK - 1)];
}

static pc__timer_entry_t *entry_alloc(pc__timers_t *t)
{
	if (t->free_head == 0) {
		pc__timer_entry_t **chunks = realloc(t->chunks, sizeof(*chunks) * (t->nchunks + 1));
		if (!chunks)
			return NULL;
		t->chunks = chunks;
		pc__timer_entry_t *c = calloc(CHUNK, sizeof(*c));
		if (!c)
			return NULL;
		uint32_t base = t->nchunks * CHUNK;
		for (uint32_t i = 0; i < CHUNK; i++) {
			c[i].index = base + i;
			c[i].next_free = i + 1 < CHUNK ? base + i + 2 : 0;
		}
		t->chunks[t->nchunks++] = c;
		t->free_head = base + 1;
	}
	pc__timer_entry_t *e = entry_at(t, t->free_head - 1);
	t->free_head = e->next_free;
	e->live = true;
	pc_atomic_faa_u64(&t->pending, 1);
	return e;
}

/* Returns the target reference for the caller to hand to let_go outside
 * the lock. */
static pc_actor_t *entry_free(pc__timers_t *t, pc__timer_entry_t *e)
{
	pc_actor_t *target = e->target;
	pc_msg_free(e->msg);
	pc_msg_free(e->out);
	uint32_t gen = e->gen + 1;
	uint32_t index = e->index;
	memset(e, 0, sizeof(*e));
	e->gen = gen;
	e->index = index;
	e->next_free = t->free_head;
	t->free_head = index + 1;
	return target;
}

/* A freed entry's last act. The target reference goes before the count
 * the quiescence check reads: dropping the last one queues the actor's
 * end, so a runtime seen quiet keeps no actor that only a timer held. */
static void let_go(pc_runtime_t *rt, pc_actor_t *target)
{
	pc_actor_release(target);
	if (pc_atomic_faa_u64(&rt->timers.pending, (uint64_t)-1) == 1)
		pc__quiet_signal(rt);
}

static void soon_insert(pc__timers_t *t, pc__timer_entry_t *e)
{
	/* Entries arrive in roughly increasing order: search from the back. */
	pc__timer_entry_t *after = t->soon_tail;
	while (after && after->due_ns > e->due_ns)
		after = after->soon_prev;
	e->soon_prev = after;
	e->soon_next = after ? after->soon_next : t->soon_head;
	if (e->soon_next)
		e->soon_next->soon_prev = e;
	else
		t->soon_tail = e;
	if (after)
		after->soon_next = e;
	else
		t->soon_head = e;
	e->in_soon = true;
}

/* Takes a timer off the wheel or the soon list, wherever it waits. */
static void unschedule(pc__timers_t *t, pc__timer_entry_t *e)
{
	if (e->in_wheel) {
		pc__tw_remove(&t->wheel, &e->node);
		e->in_wheel = false;
	}
	if (e->in_soon) {
		if (e->soon_prev)
			e->soon_prev->soon_next = e->soon_next;
		else
			t->soon_head = e->soon_next;
		if (e->soon_next)
			e->soon_next->soon_prev = e->soon_prev;
		else
			t->soon_tail = e->soon_prev;
		e->soon_prev = e->soon_next = NULL;
		e->in_soon = false;
	}
}

static void wheel_add(pc__timers_t *t, pc__timer_entry_t *e)
{
	pc__tw_add(&t->wheel, &e->node, e->due_ns / 1000000u);
	e->in_wheel = true;
}

int pc__timers_init(pc_runtime_t *rt)
{
	pc__timers_t *t = &rt->timers;
	if (pc__cond_init_monotonic(&t->cond) != 0)
		return PC_ESYS;
	/* Adaptive: a thread arming timers in a tight loop re-takes a plain
	 * mutex before a sleeping waiter (the timer thread) gets to it; a
	 * short spin lets the timer thread in between. */
	pthread_mutexattr_t ma;
	pthread_mutexattr_init(&ma);
	pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_ADAPTIVE_NP);
	pthread_mutex_init(&t->lock, &ma);
	pthread_mutexattr_destroy(&ma);
	pc__tw_init(&t->wheel, pc_runtime_now_ms());
	t->sleep_until = UINT64_MAX;
	return 0;
}

struct fire_ctx {
	pc__timers_t *t;
	uint64_t now_ns;
	pc__timer_entry_t *fired;  /* in firing order ... */
	pc__timer_entry_t **tail;  /* ... appended here */
	uint64_t last_due_ns;      /* of the last one appended */
	bool out_of_order;         /* one came before a later due one */
};

/* Stable merge sort of a fired list by the due time each fired for. */
static pc__timer_entry_t *sort_fired(pc__timer_entry_t *a)
{
	if (!a || !a->fired_next)
		return a;
	pc__timer_entry_t *slow = a, *fast = a->fired_next;
	while (fast && fast->fired_next) {
		slow = slow->fired_next;
		fast = fast->fired_next->fired_next;
	}
	pc__timer_entry_t *b = slow->fired_next;
	slow->fired_next = NULL;
	a = sort_fired(a);
	b = sort_fired(b);
	pc__timer_entry_t *head = NULL, **tail = &head;
	while (a && b) {
		pc__timer_entry_t **min = b->fired_due_ns < a->fired_due_ns ? &b : &a;
		*tail = *min;
		tail = &(*min)->fired_next;
		*min = (*min)->fired_next;
	}
	*tail = a ? a : b;
	return head;
}

/* A timer is due: queue its message for delivery (a periodic one is first
 * put back for its next tick). Lock held; e is neither in the wheel nor on
 * the soon list. */
static void fire(struct fire_ctx *fc, pc__timer_entry_t *e)
{
	e->fired_due_ns = e->due_ns;
	if (e->period_ms == 0) {
		e->out = e->msg;
		e->msg = NULL;
	} else {
		/* Next tick on the original cadence, skipping missed ones. */
		uint64_t period = e->period_ms * 1000000u;
		uint64_t d = e->due_ns + period;
		if (d <= fc->now_ns)
			d += ((fc->now_ns - d) / period + 1) * period;
		e->due_ns = d;
		wheel_add(fc->t, e);
		if (e->in_flight)
			return; /* the last tick is still unhandled: skip this one */
		e->out = pc__msg_clone(e->msg);
		if (!e->out)
			return; /* no memory: this tick is lost, the next may do */
	}
	e->in_flight = true;
	e->out->flags |= PC_MSGF_TIMER;
	e->out->reserved = e->index;
	/* Appended, not pushed: deliver() sends in this order, and a batch
	 * (a late wake-up, timers armed before start) must still arrive in
	 * due order. The wheel's and the soon list's are each in order, but
	 * one armed into the current millisecond after the soon list took
	 * it can fire from the wheel ahead of earlier soon ones: then the
	 * batch is sorted before delivery. */
	if (fc->fired && e->fired_due_ns < fc->last_due_ns)
		fc->out_of_order = true;
	fc->last_due_ns = e->fired_due_ns;
	e->fired_next = NULL;
	*fc->tail = e;
	fc->tail = &e->fired_next;
}

/* Called by the wheel, lock held, node already unlinked: the timer is due
 * within the current millisecond; it fires now or waits on the soon list. */
static void on_wheel(pc__tw_node_t *node, void *arg)
{
	struct fire_ctx *fc = arg;
	pc__timer_entry_t *e = (pc__timer_entry_t *)node;
	e->in_wheel = false;
	if (e->due_ns <= fc->now_ns)
		fire(fc, e);
	else
		soon_insert(fc->t, e);
}

/* Sends what fired, outside the lock, handed over together (one wake).
 * The entries are pinned by in_flight. */
static void deliver(pc__timer_entry_t *e)
{
	pc_runtime_hold_begin();
	while (e) {
		pc__timer_entry_t *next = e->fired_next;
		pc_msg_t *m = e->out;
		e->out = NULL;
		pc_send(e->target, m);
		e = next;
	}
	pc_runtime_hold_end();
}

static void *timer_main(void *arg)
{
	pc_runtime_t *rt = arg;
	pc__timers_t *t = &rt->timers;
	pc_thread_name("timers", 0);
	pthread_mutex_lock(&t->lock);
	while (!t->stopping) {
		struct fire_ctx fc = {t, pc__clock_mono_ns(), NULL, NULL, 0, false};
		fc.tail = &fc.fired;
		pc_atomic_store_u64(&t->sleep_until, 0); /* awake: arming need not signal */
		pc__tw_advance(&t->wheel, fc.now_ns / 1000000u, on_wheel, &fc);
		while (t->soon_head && t->soon_head->due_ns <= fc.now_ns) {
			pc__timer_entry_t *e = t->soon_head;
			unschedule(t, e);
			fire(&fc, e);
		}
		if (fc.fired) {
			if (fc.out_of_order)
				fc.fired = sort_fired(fc.fired);
			pthread_mutex_unlock(&t->lock);
			deliver(fc.fired);
			pthread_mutex_lock(&t->lock);
			/* rounds that always fire must move the wheel on too */
			(void)pc__tw_drain_ahead(&t->wheel, PC__TIMER_DRAIN_BUDGET);
			continue;
		}
		/* A chunk of the wheel's cascading each time round, ahead of
		 * when it is due; while more is left, round again within a
		 * millisecond. Moving a slot of thousands in one go took a core
		 * for a millisecond and more, and the deliveries waited for it. */
		bool more = pc__tw_drain_ahead(&t->wheel, PC__TIMER_DRAIN_BUDGET);
		uint64_t next_ms = pc__tw_next_deadline(&t->wheel);
		uint64_t next = next_ms < UINT64_MAX / 1000000u ? next_ms * 1000000u : UINT64_MAX;
		if (more && next > fc.now_ns + PC__TIMER_DRAIN_EVERY_NS)
			next = fc.now_ns + PC__TIMER_DRAIN_EVERY_NS;
		if (t->soon_head && t->soon_head->due_ns < next) {
			/* Timers due close together are fired together: waking for
			 * each would cost a context switch per timer. */
			uint64_t earliest = fc.now_ns + PC__TIMER_SLACK_NS;
			next = t->soon_head->due_ns > earliest ? t->soon_head->due_ns : earliest;
		}
		pc_atomic_store_u64(&t->sleep_until, next);
		if (next == UINT64_MAX) {
			pthread_cond_wait(&t->cond, &t->lock);
		} else if (next > fc.now_ns) {
			struct timespec ts = pc__timespec_ns(next);
			pthread_cond_timedwait(&t->cond, &t->lock, &ts);
		}
	}
	pthread_mutex_unlock(&t->lock);
	return NULL;
}

int pc__timers_start(pc_runtime_t *rt)
{
	pc__timers_t *t = &rt->timers;
	if (pthread_create(&t->thread, NULL, timer_main, rt) != 0)
		return PC_ESYS;
	t->thread_started = true;
	return 0;
}

void pc__timers_stop(pc_runtime_t *rt)
{
	pc__timers_t *t = &rt->timers;
	pthread_mutex_lock(&t->lock);
	t->stopping = true;
	pthread_cond_signal(&t->cond);
	pthread_mutex_unlock(&t->lock);
	if (t->thread_started) {
		pthread_join(t->thread, NULL);
		t->thread_started = false;
	}
}

/* After every thread has stopped and every mailbox is drained. */
void pc__timers_free(pc_runtime_t *rt)
{
	pc__timers_t *t = &rt->timers;
	for (uint32_t c = 0; c < t->nchunks; c++) {
		for (uint32_t i = 0; i < CHUNK; i++) {
			pc__timer_entry_t *e = &t->chunks[c][i];
			if (e->live) {
				unschedule(t, e);
				let_go(rt, entry_free(t, e));
			}
		}
		free(t->chunks[c]);
	}
	free(t->chunks);
	t->chunks = NULL;
	t->nchunks = 0;
	t->free_head = 0;
	t->soon_head = t->soon_tail = NULL;
}

bool pc__timers_quiet_for(pc_runtime_t *rt, uint64_t now_ns, uint64_t ns)
{
	/* 0: the thread is awake, firing or about to sleep: not quiet */
	uint64_t next = pc_atomic_load_u64(&rt->timers.sleep_until);
	return next != 0 && next > now_ns && next - now_ns >= ns;
}

bool pc__timer_claim(pc_runtime_t *rt, pc_msg_t *msg)
{
	pc__timers_t *t = &rt->timers;
	bool freed = false;
	pc_actor_t *release = NULL;
	pthread_mutex_lock(&t->lock);
	pc__timer_entry_t *e = entry_at(t, msg->reserved);
	/* A handler claims only messages sent to its own, running actor; a
	 * stopped target means the message is being thrown away (dead letter
	 * or shutdown): it is not handled, and a periodic timer is retired,
	 * or it would tick into a dead mailbox for ever, holding its target. */
	bool target_gone = pc_actor_stopped(e->target);
	bool live = !e->cancelled && !target_gone;
	e->in_flight = false;
	if (target_gone)
		unschedule(t, e);
	if (!e->in_wheel && !e->in_soon) {
		release = entry_free(t, e);
		freed = true;
	}
	pthread_mutex_unlock(&t->lock);
	if (live)
		pc_atomic_faa_u64(&rt->timers_fired, 1);
	if (freed)
		let_go(rt, release);
	return live;
}

static int arm(pc_actor_t *target, uint64_t delay_ms, uint64_t period_ms, pc_msg_t *msg, pc_timer_t *id)
{
	if (id)
		*id = 0;
	if (!msg)
		return PC_EINVAL;
	if (!target || msg->flags != 0 || (period_ms == 0 && delay_ms == UINT64_MAX)) {
		pc_msg_free(msg);
		return PC_EINVAL;
	}
	pc_runtime_t *rt = pc_actor_runtime(target);
	pc__timers_t *t = &rt->timers;
	uint64_t due = pc__deadline_ns(delay_ms > INT64_MAX ? -1 : (int64_t)delay_ms);
	if (due == UINT64_MAX)
		due = UINT64_MAX - 1; /* "never" still has to be a time */
	int rc = 0;
	bool wake = false;
	pthread_mutex_lock(&t->lock);
	pc__timer_entry_t *e = NULL;
	if (pc_atomic_load_u32_acq(&rt->state) >= PC__RT_STOPPING)
		rc = PC_ESTOPPED;
	else if (!(e = entry_alloc(t)))
		rc = PC_ENOMEM;
	if (rc == 0) {
		e->target = pc_actor_retain(target);
		e->msg = msg;
		e->period_ms = period_ms;
		e->due_ns = due;
		wheel_add(t, e);
		/* sleep_until is set under the lock before the thread waits,
		 * and the wait gives the lock up atomically: a signal after the
		 * unlock reaches the sleep it was meant for. Signalled under the
		 * lock, the woken thread would block on it at once. */
		wake = due < t->sleep_until;
		if (id)
			*id = ((uint64_t)e->gen << 32) | (uint64_t)(e->index + 1);
	}
	pthread_mutex_unlock(&t->lock);
	if (wake)
		pthread_cond_signal(&t->cond);
	if (rc != 0)
		pc_msg_free(msg);
	return rc;
}

int pc_timer_after(pc_actor_t *target, uint64_t delay_ms, pc_msg_t *msg, pc_timer_t *id)
{
	return arm(target, delay_ms, 0, msg, id);
}

int pc_timer_every(pc_actor_t *target, uint64_t period_ms, pc_msg_t *msg, pc_timer_t *id)
{
	/* A period must fit the nanosecond clock, with room for a cadence. */
	if (period_ms == 0 || period_ms > UINT64_MAX / 4000000u) {
		pc_msg_free(msg);
		if (id)
			*id = 0;
		return PC_EINVAL;
	}
	return arm(target, period_ms, period_ms, msg, id);
}

bool pc_timer_cancel(pc_runtime_t *rt, pc_timer_t id)
{
	if (!rt || id == 0)
		return false;
	pc__timers_t *t = &rt->timers;
	uint32_t idx = (uint32_t)(id & 0xFFFFFFFFu) - 1;
	uint32_t gen = (uint32_t)(id >> 32);
	bool done = false;
	pc_actor_t *release = NULL;
	pthread_mutex_lock(&t->lock);
	bool freed = false;
	pc__timer_entry_t *e = idx < t->nchunks * CHUNK ? entry_at(t, idx) : NULL;
	if (e && e->live && e->gen == gen && !e->cancelled) {
		unschedule(t, e);
		if (e->in_flight) {
			e->cancelled = true; /* freed when its message is claimed */
		} else {
			release = entry_free(t, e);
			freed = true;
		}
		done = true;
	}
	pthread_mutex_unlock(&t->lock);
	if (freed)
		let_go(rt, release);
	return done;
}
