/*
 * Hierarchical timing wheel; the layout and the cascading rule are described
 * in timer_wheel_internal.h. Invariants the code relies on, with T = tw->now:
 * (1) a node on level k differs from T in digit k and agrees above it, so
 *     its slot is above T's digit k and starts after T;
 * (2) the next slot to expire is the lowest set bit of the lowest non-empty
 *     level, and time never moves past it without running it, which keeps
 *     (1) true as T moves;
 * (3) every overflow deadline is at or after the end of T's 2^36 ms window,
 *     and overflow_min is at most the smallest of them.
 */
#include "timer_wheel_internal.h"

#include <assert.h>

#define BITS 6                                  /* log2(PC__TW_SLOTS) */
#define SLOT_MASK ((uint64_t)PC__TW_SLOTS - 1)
#define WHEEL_MASK (((uint64_t)1 << (BITS * PC__TW_LEVELS)) - 1)
#define LEVEL_PENDING PC__TW_LEVELS
#define LEVEL_OVERFLOW (PC__TW_LEVELS + 1)

static void list_init(pc__tw_node_t *head)
{
	head->next = head->prev = head;
}

static int list_empty(const pc__tw_node_t *head)
{
	return head->next == head;
}

static void list_add_tail(pc__tw_node_t *head, pc__tw_node_t *n)
{
	n->prev = head->prev;
	n->next = head;
	head->prev->next = n;
	head->prev = n;
}

/* Moves all of the non-empty list `from` to `to`, whose head is unset. */
static void list_move_all(pc__tw_node_t *from, pc__tw_node_t *to)
{
	to->next = from->next;
	to->prev = from->prev;
	to->next->prev = to;
	to->prev->next = to;
	list_init(from);
}

static uint64_t list_min(const pc__tw_node_t *head)
{
	uint64_t min = UINT64_MAX;

	for (const pc__tw_node_t *n = head->next; n != head; n = n->next)
		if (n->deadline < min)
			min = n->deadline;
	return min;
}

static unsigned slot_of(uint64_t deadline, unsigned level)
{
	return (unsigned)((deadline >> (BITS * level)) & SLOT_MASK);
}

/* Links `n`, whose deadline is set, where it belongs relative to tw->now. */
static void place(pc__timer_wheel_t *tw, pc__tw_node_t *n)
{
	unsigned level, slot;

	if (n->deadline <= tw->now) {
		n->level = LEVEL_PENDING;
		list_add_tail(&tw->pending, n);
		return;
	}
	level = (unsigned)(63 - __builtin_clzll(n->deadline ^ tw->now)) / BITS;
	if (level >= PC__TW_LEVELS) {
		n->level = LEVEL_OVERFLOW;
		list_add_tail(&tw->overflow, n);
		if (n->deadline < tw->overflow_min)
			tw->overflow_min = n->deadline;
		return;
	}
	slot = slot_of(n->deadline, level);
	n->level = (uint8_t)level;
	uint64_t bit = (uint64_t)1 << slot;
	if (!(tw->occupied[level] & bit)) {
		tw->slot_min[level][slot] = n->deadline;
		tw->min_stale[level] &= ~bit;
	} else if (n->deadline < tw->slot_min[level][slot]) {
		/* even a stale minimum is a bound below every node left */
		tw->slot_min[level][slot] = n->deadline;
		tw->min_stale[level] &= ~bit;
	}
	list_add_tail(&tw->slots[level][slot], n);
	tw->occupied[level] |= bit;
}

/* Unlinks `n` and keeps the bitmaps and overflow_min true; count is the
 * caller's business since cascading relinks at once. */
static void unlink_node(pc__timer_wheel_t *tw, pc__tw_node_t *n)
{
	n->prev->next = n->next;
	n->next->prev = n->prev;
	n->next = n->prev = NULL;
	if (n->level < PC__TW_LEVELS) {
		unsigned slot = slot_of(n->deadline, n->level);
		uint64_t bit = (uint64_t)1 << slot;

		if (list_empty(&tw->slots[n->level][slot]))
			tw->occupied[n->level] &= ~bit;
		else if (n->deadline == tw->slot_min[n->level][slot])
			tw->min_stale[n->level] |= bit; /* another may share it */
	} else if (n->level == LEVEL_OVERFLOW && list_empty(&tw->overflow)) {
		/* A stale bound could lie behind a later T and break (3). */
		tw->overflow_min = UINT64_MAX;
	}
}

static void fire_node(pc__timer_wheel_t *tw, pc__tw_node_t *n,
		      pc__tw_fire_fn fire, void *arg)
{
	unlink_node(tw, n);
	tw->count--;
	fire(n, arg);
}

/* Merge sort of a NULL-terminated chain by deadline; depth is log2(n). */
static pc__tw_node_t *sort_chain(pc__tw_node_t *a)
{
	pc__tw_node_t *slow, *fast, *b, *out, **tail = &out;

	if (!a || !a->next)
		return a;
	slow = a;
	for (fast = a->next; fast && fast->next; fast = fast->next->next)
		slow = slow->next;
	b = slow->next;
	slow->next = NULL;
	a = sort_chain(a);
	b = sort_chain(b);
	while (a && b) {
		pc__tw_node_t **min = b->deadline < a->deadline ? &b : &a;

		*tail = *min;
		tail = &(*min)->next;
		*min = (*min)->next;
	}
	*tail = a ? a : b;
	return out;
}

/*
 * Overdue nodes fire first: their deadlines are <= T, below everything on
 * the levels. They move to a private list so that nodes the callbacks add
 * as overdue wait for the next advance; they stay marked pending, so a
 * callback can still remove them from the private list.
 */
static void fire_pending(pc__timer_wheel_t *tw, pc__tw_fire_fn fire, void *arg)
{
	pc__tw_node_t due, *n, *next;

	if (list_empty(&tw->pending))
		return;
	tw->pending.prev->next = NULL;
	n = sort_chain(tw->pending.next);
	list_init(&tw->pending);
	list_init(&due);
	for (; n; n = next) {
		next = n->next;
		list_add_tail(&due, n);
	}
	while (!list_empty(&due))
		fire_node(tw, due.next, fire, arg);
}

/*
 * T has reached the start of the slot (or overflow window) whose nodes are
 * on `head`: those due now fire, the rest are placed anew, on lower levels.
 * Neither they nor anything a callback adds can land on `head` again (a
 * deadline in this slot, after T, differs from T below its level), so the
 * loop ends. Popping one node at a time lets callbacks remove the others.
 */
static void run_list(pc__timer_wheel_t *tw, pc__tw_node_t *head,
		     pc__tw_fire_fn fire, void *arg)
{
	while (!list_empty(head)) {
		pc__tw_node_t *n = head->next;

		if (n->deadline <= tw->now) {
			fire_node(tw, n, fire, arg);
		} else {
			unlink_node(tw, n);
			place(tw, n);
		}
	}
}

/*
 * T has reached the start of the 2^36 ms window of the earliest overflow
 * deadline, and the levels are empty. A deadline on that first ms is due
 * now; the rest move down or, if still beyond this window, back to a fresh
 * overflow list, which is why the old one is emptied first.
 */
static void run_overflow(pc__timer_wheel_t *tw, pc__tw_fire_fn fire, void *arg)
{
	pc__tw_node_t moving;

	list_move_all(&tw->overflow, &moving);
	tw->overflow_min = UINT64_MAX;
	run_list(tw, &moving, fire, arg);
}

void pc__tw_init(pc__timer_wheel_t *tw, uint64_t now_ms)
{
	tw->now = now_ms;
	tw->count = 0;
	tw->overflow_min = UINT64_MAX;
	list_init(&tw->pending);
	list_init(&tw->overflow);
	for (unsigned l = 0; l < PC__TW_LEVELS; l++) {
		tw->occupied[l] = 0;
		for (unsigned s = 0; s < PC__TW_SLOTS; s++)
			list_init(&tw->slots[l][s]);
	}
}

void pc__tw_add(pc__timer_wheel_t *tw, pc__tw_node_t *node, uint64_t deadline_ms)
{
	assert(!pc__tw_linked(node));
	node->deadline = deadline_ms;
	place(tw, node);
	tw->count++;
}

void pc__tw_remove(pc__timer_wheel_t *tw, pc__tw_node_t *node)
{
	assert(pc__tw_linked(node));
	unlink_node(tw, node);
	tw->count--;
}

int pc__tw_linked(const pc__tw_node_t *node)
{
	return node->next != NULL;
}

void pc__tw_advance(pc__timer_wheel_t *tw, uint64_t now_ms,
		    pc__tw_fire_fn fire, void *arg)
{
	if (now_ms < tw->now)
		now_ms = tw->now;
	fire_pending(tw, fire, arg);
	for (;;) {
		unsigned level = 0, slot, shift;
		uint64_t delta;

		while (level < PC__TW_LEVELS && !tw->occupied[level])
			level++;
		if (level == PC__TW_LEVELS) {
			/* Levels empty: jump straight to the overflow's window,
			 * which (3) puts after T. */
			uint64_t start = tw->overflow_min & ~WHEEL_MASK;

			if (list_empty(&tw->overflow) || start > now_ms)
				break;
			tw->now = start;
			run_overflow(tw, fire, arg);
			continue;
		}
		/* Distance to the slot's start, computed from T's offset so it
		 * cannot overflow near UINT64_MAX. */
		slot = (unsigned)__builtin_ctzll(tw->occupied[level]);
		shift = BITS * level;
		delta = ((uint64_t)(slot - slot_of(tw->now, level)) << shift) -
			(tw->now & (((uint64_t)1 << shift) - 1));
		if (delta > now_ms - tw->now)
			break;
		tw->now += delta;
		run_list(tw, &tw->slots[level][slot], fire, arg);
	}
	tw->now = now_ms;
}

uint64_t pc__tw_next_deadline(pc__timer_wheel_t *tw)
{
	if (!list_empty(&tw->pending))
		return list_min(&tw->pending);
	for (unsigned level = 0; level < PC__TW_LEVELS; level++) {
		if (!tw->occupied[level])
			continue;
		unsigned slot = (unsigned)__builtin_ctzll(tw->occupied[level]);
		uint64_t bit = (uint64_t)1 << slot;
		/* A level-0 slot spans one ms: all its nodes share a deadline. */
		if (level == 0)
			return tw->slots[0][slot].next->deadline;
		if (tw->min_stale[level] & bit) {
			tw->slot_min[level][slot] = list_min(&tw->slots[level][slot]);
			tw->min_stale[level] &= ~bit;
		}
		return tw->slot_min[level][slot];
	}
	return list_min(&tw->overflow);
}

size_t pc__tw_count(const pc__timer_wheel_t *tw)
{
	return tw->count;
}
