/*
 * Per-worker run queue: a bounded ring in the shape of Go's runq and
 * Tokio's local queue. The owner pushes at tail (plain store + release) and
 * pops at head (CAS); thieves copy up to half of [head, tail) into their own
 * ring, then claim it with one CAS on the victim's head. When the ring is
 * full, half of it moves to the injection queue in one locked batch.
 *
 * Ordering (numbers match docs/architecture.md, "Run queues"):
 * (1) the owner writes buf[tail] before the release store of tail, so a
 *     thief that acquires tail sees the slot filled;
 * (2) a slot is read before the CAS that claims it; if the CAS fails the
 *     read value is discarded, so a slot overwritten by the owner after
 *     head moved past it is never used;
 * (3) the owner reuses a slot only when tail - head < size with head read
 *     with acquire, i.e. after the consumer that took it has claimed it.
 */
#include "runtime_internal.h"

#include "../mailbox/atomics.h"

#define MASK (PC__RUNQ_SIZE - 1)

uint32_t pc__runq_len(const pc__runq_t *q)
{
	uint32_t h = pc_atomic_load_u32_acq(&q->head);
	uint32_t t = pc_atomic_load_u32_acq(&q->tail);
	return t - h;
}

/* Ring full: move half of it plus `a` to the injection queue. False if a
 * thief got in first (the ring has room again). */
static bool push_overflow(pc__worker_t *w, pc_actor_t *a, uint32_t h, uint32_t t)
{
	pc__runq_t *q = &w->runq;
	pc_actor_t *batch[PC__RUNQ_SIZE / 2 + 1];
	uint32_t n = (t - h) / 2;
	for (uint32_t i = 0; i < n; i++)
		batch[i] = pc_atomic_load_ptr((void *const *)&q->buf[(h + i) & MASK]);
	if (!pc_atomic_cas_u32(&q->head, h, h + n))
		return false;
	batch[n] = a;
	pc__inject_push(w->rt, batch, n + 1);
	return true;
}

void pc__runq_push(pc__worker_t *w, pc_actor_t *a)
{
	pc__runq_t *q = &w->runq;
	for (;;) {
		uint32_t h = pc_atomic_load_u32_acq(&q->head);
		uint32_t t = q->tail;
		if (t - h < PC__RUNQ_SIZE) {
			pc_atomic_store_ptr((void **)&q->buf[t & MASK], a);
			pc_atomic_store_u32_rel(&q->tail, t + 1); /* (1) */
			return;
		}
		if (push_overflow(w, a, h, t))
			return;
	}
}

pc_actor_t *pc__runq_pop(pc__worker_t *w)
{
	pc__runq_t *q = &w->runq;
	for (;;) {
		uint32_t h = pc_atomic_load_u32_acq(&q->head);
		uint32_t t = q->tail;
		if (t == h)
			return NULL;
		pc_actor_t *a = pc_atomic_load_ptr((void *const *)&q->buf[h & MASK]);
		if (pc_atomic_cas_u32(&q->head, h, h + 1)) /* (2) */
			return a;
	}
}

pc_actor_t *pc__runq_steal(pc__worker_t *thief, pc__worker_t *victim)
{
	pc__runq_t *src = &victim->runq;
	pc__runq_t *dst = &thief->runq;
	uint32_t dt = dst->tail;
	uint32_t n;
	for (;;) {
		uint32_t h = pc_atomic_load_u32_acq(&src->head);
		uint32_t t = pc_atomic_load_u32_acq(&src->tail);
		n = t - h;
		n -= n / 2;
		if (n == 0)
			return NULL;
		if (n > PC__RUNQ_SIZE / 2)
			continue; /* head and tail read at different moments */
		uint32_t room = PC__RUNQ_SIZE - (dt - pc_atomic_load_u32_acq(&dst->head));
		if (n > room)
			n = room;
		if (n == 0)
			return NULL;
		for (uint32_t i = 0; i < n; i++) {
			pc_actor_t *a = pc_atomic_load_ptr((void *const *)&src->buf[(h + i) & MASK]);
			pc_atomic_store_ptr((void **)&dst->buf[(dt + i) & MASK], a);
		}
		if (pc_atomic_cas_u32(&src->head, h, h + n)) /* (2) */
			break;
	}
	/* Run the newest stolen actor at once; publish the rest. */
	n--;
	pc_actor_t *a = pc_atomic_load_ptr((void *const *)&dst->buf[(dt + n) & MASK]);
	if (n > 0)
		pc_atomic_store_u32_rel(&dst->tail, dt + n);
	return a;
}
