/*
 * Hierarchical timing wheel behind the runtime's timers: millisecond ticks,
 * intrusive nodes, no allocation. Not thread-safe; the caller holds a lock.
 *
 * Six levels, each a ring of 128 slots: two blocks of 64. A slot of level k
 * spans 64^k ms and a block 64^(k+1) ms. With T the wheel's time `now`, a
 * node goes to the lowest level whose two blocks starting at T's block
 * hold its deadline: level 0 takes what is due before the end of the next
 * 64 ms block, level 1 before the end of the next 4,096 ms block, and so
 * on; a level-0 slot is one millisecond, so all its nodes are due at once.
 *
 * The rule that makes timers fire on time: a level-k slot may not hold
 * anything once T is inside the span of that slot (the level-(k-1) block
 * it stands for); its nodes must by then sit on lower levels, and the due
 * ones on level 0. Moving them down is the wheel's cascading. A classic
 * wheel does it when T reaches the slot, all of it at once: a 64 ms slot
 * holding thousands of timers stalls every timer due meanwhile. Here the
 * ring has room for the next block, so a slot can be moved down a whole
 * block ahead of time, a little at a time (pc__tw_drain_ahead, which the
 * timer thread calls between deliveries with the lock let go in between).
 * Only what is still there when T arrives is moved then.
 *
 * The per-level occupancy bitmaps find a level's earliest slot with a few
 * ctz, so advance over a long idle gap costs one step per due deadline,
 * not one per millisecond. A slot above level 0 keeps its earliest
 * deadline, so next_deadline, asked after every idle moment of the timer
 * thread, walks a slot of thousands of nodes only after the node that
 * was its earliest has been removed, once, and only if nothing on a
 * lower level comes before the slot starts. (With most timers cancelled,
 * as timeouts are, nearly every slot's earliest goes; walking one on every
 * block's last millisecond, cold, was a stall of a millisecond and more.)
 *
 * Two lists sit outside the levels:
 * - pending: deadline <= now when added; fired (in deadline order) at the
 *   start of the next advance. Adding an overdue node from a callback thus
 *   cannot make advance loop forever.
 * - overflow: deadline beyond the top level's two blocks (2^37 ms). It is
 *   placed anew each time T enters another top-level block.
 *
 * Node order within a slot is insertion order; ties fire in any order.
 * The wheel holds pointers into itself: it must not be copied after init.
 */
#ifndef PC_RUNTIME_TIMER_WHEEL_INTERNAL_H
#define PC_RUNTIME_TIMER_WHEEL_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#define PC__TW_LEVELS 6
#define PC__TW_SLOTS 128 /* two blocks of 64 */

typedef struct pc__tw_node {
	struct pc__tw_node *next, *prev; /* NULL while not in the wheel */
	uint64_t deadline;  /* ms, absolute, same clock as `now` */
	uint8_t level;      /* 0..5, or the pending/overflow list */
} pc__tw_node_t;

typedef struct pc__timer_wheel {
	uint64_t now;               /* every deadline <= now has fired or is pending */
	size_t count;               /* nodes in the wheel, all lists included */
	uint64_t moved;             /* nodes moved down a level since init */
	uint64_t occupied[PC__TW_LEVELS][2];    /* bit s: slot s is non-empty */
	/* Levels 1 and up: the earliest deadline of each non-empty slot, true
	 * unless the slot's bit in min_stale is set (its earliest node left). */
	uint64_t slot_min[PC__TW_LEVELS][PC__TW_SLOTS];
	uint64_t min_stale[PC__TW_LEVELS][2];
	pc__tw_node_t pending;      /* list heads: circular, sentinel nodes */
	pc__tw_node_t overflow;
	pc__tw_node_t slots[PC__TW_LEVELS][PC__TW_SLOTS];
} pc__timer_wheel_t;

void pc__tw_init(pc__timer_wheel_t *tw, uint64_t now_ms);
/* `node` must not be in the wheel. A deadline <= now fires at the next
 * advance. */
void pc__tw_add(pc__timer_wheel_t *tw, pc__tw_node_t *node, uint64_t deadline_ms);
void pc__tw_remove(pc__timer_wheel_t *tw, pc__tw_node_t *node); /* node must be in the wheel */
int pc__tw_linked(const pc__tw_node_t *node); /* 1 while in the wheel; nodes start zeroed */

/* Called with the node already unlinked; may add and remove any node,
 * including re-adding this one, but must not call advance. */
typedef void (*pc__tw_fire_fn)(pc__tw_node_t *node, void *arg);
/* Fires every node with deadline <= now_ms, in non-decreasing deadline
 * order. Nodes a callback adds with a deadline in (wheel time, now_ms] fire
 * in this call; those at or before the deadline being fired wait for the
 * next advance. The wheel's time never moves backwards. */
void pc__tw_advance(pc__timer_wheel_t *tw, uint64_t now_ms, pc__tw_fire_fn fire, void *arg);
/* Moves at most `budget` nodes down from the slots the wheel's time enters
 * next, so that advance finds them in place. Returns 1 while such nodes
 * are left, 0 when there is nothing to move ahead of time. */
int pc__tw_drain_ahead(pc__timer_wheel_t *tw, size_t budget);
/* Earliest deadline in the wheel, exact; UINT64_MAX when empty. A few
 * bit scans, unless a slot's earliest node was removed since it was last
 * asked (then it scans that slot once) or it lies on the pending or
 * overflow list. */
uint64_t pc__tw_next_deadline(pc__timer_wheel_t *tw);
size_t pc__tw_count(const pc__timer_wheel_t *tw);

#endif
