/*
 * The actor mailbox: an intrusive, unbounded, lock-free multi-producer
 * single-consumer queue (Vyukov's, in the shape Pony's messageq.c uses).
 *
 * Producers push at `head` with one atomic exchange; the single consumer
 * pops at `tail` with no read-modify-write at all. The low bit of `head`
 * means "empty and not scheduled": the push that clears it is told so
 * (returns true) and must schedule the owner, so an actor is scheduled
 * exactly once per idle -> busy transition. See docs/architecture.md,
 * "Mailbox", for the numbered memory-ordering argument.
 *
 * The queue always holds one stub message at `tail`: the last message
 * popped (or the initial stub). Its memory is released by the next pop, so a
 * popped message stays valid until the consumer pops again.
 *
 * The mailbox part's header for the parts that embed a queue (the actor,
 * the I/O loop's command queue); not installed.
 */
#ifndef PC_MAILBOX_MAILBOX_H
#define PC_MAILBOX_MAILBOX_H

#include <stdbool.h>
#include <stdint.h>

#include "msg.h"

typedef struct pc__mailbox {
	uintptr_t head; /* producers: newest message, low bit = empty+idle */
	pc_msg_t *tail; /* consumer: the stub; tail->next is the oldest */
} pc__mailbox_t;

/* Starts empty and unscheduled with `stub` (which the queue now owns). */
void pc__mailbox_init(pc__mailbox_t *q, pc_msg_t *stub);

/* Any thread. Appends `msg`; returns true when the mailbox was empty and
 * unscheduled, i.e. the caller must now schedule its owner. */
bool pc__mailbox_push(pc__mailbox_t *q, pc_msg_t *msg);

/* Any thread. Appends the chain first..last (linked through next; last's
 * next is overwritten) with one exchange; same result as push. */
bool pc__mailbox_push_chain(pc__mailbox_t *q, pc_msg_t *first, pc_msg_t *last);

/* Consumer only. The oldest message, or NULL when none is visible (a push
 * may be half done; it will be seen on a later pop). Frees the previous
 * stub's memory with pc_msg_free. */
pc_msg_t *pc__mailbox_pop(pc__mailbox_t *q);

/* Consumer only. True when the stub (the last message popped) has a
 * payload too large for the free lists: an idle actor would keep it. */
static inline bool pc__mailbox_stub_large(const pc__mailbox_t *q)
{
	return q->tail->size > PC_MSG_SMALL_PAYLOAD;
}

/* Consumer only. True when no message is visible to the consumer. */
bool pc__mailbox_peek_empty(const pc__mailbox_t *q);

/* Consumer only, last thing in a turn. Marks the mailbox empty+idle if no
 * push happened since the last pop; true on success. On false the caller
 * still owns the schedule and must run the actor again. */
bool pc__mailbox_mark_empty(pc__mailbox_t *q);

/* Consumer only, mailbox idle or owner stopped with no producers left:
 * frees the stub. Messages must have been popped first. */
void pc__mailbox_destroy(pc__mailbox_t *q);

#endif
