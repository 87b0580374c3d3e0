/*
 * Hierarchical timing wheel behind the runtime's timers: millisecond ticks,
 * intrusive nodes, no allocation. Not thread-safe; the caller holds a lock.
 *
 * Six levels of 64 slots. A slot of level k spans 64^k ms, so level k covers
 * 64^(k+1) ms and the six levels together 2^36 ms (~2.2 years). A node goes
 * to the level of the highest 6-bit digit in which its deadline differs from
 * the wheel's time `now`, in the slot named by the deadline's digit at that
 * level. So every node of level k shares all digits above k with `now` and
 * has a larger digit k: levels never wrap, the earliest slot of a level is
 * its lowest set bit, and any slot of level j < k ends before the first
 * slot of level k begins.
 *
 * Cascading: time only ever moves to the start of the earliest occupied
 * slot (or to the target of advance, when that comes first). When it
 * reaches a slot of level k, the slot's nodes whose deadline is now fire
 * and the others are re-inserted relative to the new time, which puts them
 * on a level below k. A node thus moves at most five times before firing.
 *
 * The per-level occupancy bitmaps find that earliest slot with one ctz per
 * level, so advance over a long idle gap costs one step per occupied slot,
 * not one per millisecond, and next_deadline never walks empty slots. A
 * slot above level 0 keeps its earliest deadline, so that next_deadline,
 * asked after every idle moment of the timer thread, does not walk a slot
 * of thousands of nodes each time (a 64 ms slot holds 6,400 timers at a
 * hundred a millisecond): it walks one only when the node that was the
 * earliest has been removed, once.
 *
 * Two lists sit outside the levels:
 * - pending: deadline <= now when added; fired (in deadline order) at the
 *   start of the next advance. Adding an overdue node from a callback thus
 *   cannot make advance loop forever.
 * - overflow: deadline beyond the top level's window. All of it is
 *   re-inserted when time reaches the window that holds the earliest of
 *   them, never firing from there, so a far deadline is never early.
 *
 * Node order within a slot is insertion order; ties fire in any order.
 * The wheel holds pointers into itself: it must not be copied after init.
 */
#ifndef PC_RUNTIME_TIMER_WHEEL_INTERNAL_H
#define PC_RUNTIME_TIMER_WHEEL_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#define PC__TW_LEVELS 6
#define PC__TW_SLOTS 64

typedef struct pc__tw_node {
	struct pc__tw_node *next, *prev; /* NULL while not in the wheel */
	uint64_t deadline;  /* ms, absolute, same clock as `now` */
	uint8_t level;      /* 0..5, or the pending/overflow list */
} pc__tw_node_t;

typedef struct pc__timer_wheel {
	uint64_t now;               /* every deadline <= now has fired or is pending */
	size_t count;               /* nodes in the wheel, all lists included */
	uint64_t overflow_min;      /* <= every overflow deadline (UINT64_MAX: none added) */
	uint64_t occupied[PC__TW_LEVELS];       /* bit s: slot s is non-empty */
	/* Levels 1 and up: the earliest deadline of each non-empty slot, true
	 * unless the slot's bit in min_stale is set (its earliest node left). */
	uint64_t slot_min[PC__TW_LEVELS][PC__TW_SLOTS];
	uint64_t min_stale[PC__TW_LEVELS];
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
/* Earliest deadline in the wheel, exact; UINT64_MAX when empty. O(1)
 * unless the earliest slot's earliest node was removed since it was last
 * asked (then it scans that slot once) or it lies on the pending or
 * overflow list. */
uint64_t pc__tw_next_deadline(pc__timer_wheel_t *tw);
size_t pc__tw_count(const pc__timer_wheel_t *tw);

#endif
