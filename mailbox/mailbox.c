#include "mailbox.h"

#include "atomics.h"

#define EMPTY_BIT ((uintptr_t)1)

#if defined(PC_ATOMICS_BUILTIN)
uint32_t pc__tsan_fence_word;
#endif

void pc__mailbox_init(pc__mailbox_t *q, pc_msg_t *stub)
{
	stub->next = NULL;
	q->tail = stub;
	q->head = (uintptr_t)stub | EMPTY_BIT;
}

bool pc__mailbox_push_chain(pc__mailbox_t *q, pc_msg_t *first, pc_msg_t *last)
{
	/* (1) last->next (and the links inside the chain) are written before
	 * the exchange publishes the chain; nobody reads them until (3) makes
	 * it reachable from the consumer side. */
	pc_atomic_store_ptr((void **)&last->next, NULL);
	/* (2) The exchange orders pushes: every producer gets a distinct
	 * predecessor, so each chain is linked exactly once, whole. */
	uintptr_t prev = pc_atomic_xchg_uptr(&q->head, (uintptr_t)last);
	pc_msg_t *p = (pc_msg_t *)(prev & ~EMPTY_BIT);
	/* (3) Release: the payloads and chain links written before the send
	 * are visible to the consumer that acquires p->next. */
	pc_atomic_store_ptr_rel((void **)&p->next, first);
	return (prev & EMPTY_BIT) != 0;
}

bool pc__mailbox_push(pc__mailbox_t *q, pc_msg_t *msg)
{
	return pc__mailbox_push_chain(q, msg, msg);
}

pc_msg_t *pc__mailbox_pop(pc__mailbox_t *q)
{
	pc_msg_t *tail = q->tail;
	/* (4) Acquire pairs with (3). */
	pc_msg_t *next = pc_atomic_load_ptr_acq((void *const *)&tail->next);
	if (!next)
		return NULL;
	q->tail = next;
	pc_msg_free(tail);
	return next;
}

bool pc__mailbox_peek_empty(const pc__mailbox_t *q)
{
	return pc_atomic_load_ptr_acq((void *const *)&q->tail->next) == NULL;
}

bool pc__mailbox_mark_empty(pc__mailbox_t *q)
{
	/* (5) Succeeds only if head still is the stub, i.e. no exchange (2)
	 * happened since; a failed CAS means a producer got in and its message
	 * will be (or already is) visible, and the actor stays scheduled. */
	pc_msg_t *tail = q->tail;
	return pc_atomic_cas_uptr(&q->head, (uintptr_t)tail, (uintptr_t)tail | EMPTY_BIT);
}

void pc__mailbox_destroy(pc__mailbox_t *q)
{
	pc_msg_free(q->tail);
	q->tail = NULL;
	q->head = 0;
}
