/*
 * Hierarchical timing wheel; the layout and the rule it keeps are described
 * in timer_wheel_internal.h. With T = tw->now and B_k(x) = x >> 6(k+1), the
 * level-k block of x, the code relies on:
 * (1) a node on level k was placed with B_k(deadline) <= B_k(T') + 1 for
 *     some T' <= T, and has deadline >= T; so the level's slots, read as a
 *     ring from T's slot, are in time order (they span fewer than 128
 *     slots from T's);
 * (2) once T has moved (move_to), no node on a level above k has
 *     B_k(deadline) == B_k(T): T's own slot on every level above 0 is
 *     empty, and what is due in T's level-0 block is on level 0;
 * (3) every overflow deadline is beyond the top level's two blocks as of
 *     the last time T entered a top-level block, so beyond every level.
 * place() puts a node on the lowest level its deadline fits, so it never
 * lands in a slot that (2) or drain_ahead is emptying.
 */
#include "timer_wheel_internal.h"

#include <assert.h>

#define BITS 6                                  /* log2 of a block's slots */
#define RING_MASK ((unsigned)PC__TW_SLOTS - 1)
#define TOP (PC__TW_LEVELS - 1)
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

static uint64_t block_of(uint64_t t, unsigned level)
{
	return t >> (BITS * (level + 1));
}

static unsigned slot_of(uint64_t deadline, unsigned level)
{
	return (unsigned)(deadline >> (BITS * level)) & RING_MASK;
}

static uint64_t slot_bit(unsigned slot)
{
	return (uint64_t)1 << (slot & 63);
}

static int bit_set(const uint64_t bits[2], unsigned slot)
{
	return (bits[slot >> 6] & slot_bit(slot)) != 0;
}

/* Where `slot` of `level` starts, read as a ring from T's slot; no
 * overflow for an occupied slot, which starts before a deadline. */
static uint64_t slot_start(uint64_t now, unsigned level, unsigned slot)
{
	unsigned shift = BITS * level;
	uint64_t ahead = (slot - slot_of(now, level)) & RING_MASK;

	return ((now >> shift) + ahead) << shift;
}

/* First set bit of a 128-slot ring read from `from` onwards; -1 if none. */
static int ring_first(const uint64_t bits[2], unsigned from)
{
	unsigned w = from >> 6;
	uint64_t here = bits[w] & (~(uint64_t)0 << (from & 63));

	if (here)
		return (int)(w * 64 + (unsigned)__builtin_ctzll(here));
	if (bits[w ^ 1])
		return (int)((w ^ 1) * 64 + (unsigned)__builtin_ctzll(bits[w ^ 1]));
	if (bits[w])
		return (int)(w * 64 + (unsigned)__builtin_ctzll(bits[w]));
	return -1;
}

/* Links `n`, whose deadline is >= T, on the lowest level that holds it. */
static void place(pc__timer_wheel_t *tw, pc__tw_node_t *n)
{
	unsigned level = 0;

	while (level < PC__TW_LEVELS &&
	       block_of(n->deadline, level) - block_of(tw->now, level) > 1)
		level++;
	if (level == PC__TW_LEVELS) {
		n->level = LEVEL_OVERFLOW;
		list_add_tail(&tw->overflow, n);
		return;
	}
	unsigned slot = slot_of(n->deadline, level);
	uint64_t bit = slot_bit(slot);
	unsigned w = slot >> 6;

	n->level = (uint8_t)level;
	/* even a stale minimum is a bound below every node left */
	if (!(tw->occupied[level][w] & bit) ||
	    n->deadline < tw->slot_min[level][slot]) {
		tw->slot_min[level][slot] = n->deadline;
		tw->min_stale[level][w] &= ~bit;
	}
	list_add_tail(&tw->slots[level][slot], n);
	tw->occupied[level][w] |= bit;
}

/* Unlinks `n` and keeps the bitmaps true; count is the caller's business
 * since moving a node down relinks it at once. */
static void unlink_node(pc__timer_wheel_t *tw, pc__tw_node_t *n)
{
	n->prev->next = n->next;
	n->next->prev = n->prev;
	n->next = n->prev = NULL;
	if (n->level < PC__TW_LEVELS) {
		unsigned slot = slot_of(n->deadline, n->level);
		uint64_t bit = slot_bit(slot);
		unsigned w = slot >> 6;

		if (list_empty(&tw->slots[n->level][slot]))
			tw->occupied[n->level][w] &= ~bit;
		else if (n->deadline == tw->slot_min[n->level][slot])
			tw->min_stale[n->level][w] |= bit; /* another may share it */
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

/* Moves at most `budget` nodes of a slot down; returns how many. */
static size_t drain_slot(pc__timer_wheel_t *tw, unsigned level, unsigned slot,
			 size_t budget)
{
	pc__tw_node_t *head = &tw->slots[level][slot];
	size_t moved = 0;

	while (moved < budget && !list_empty(head)) {
		pc__tw_node_t *n = head->next;

		unlink_node(tw, n);
		place(tw, n);
		moved++;
	}
	tw->moved += moved;
	return moved;
}

/*
 * T moves to `to`, which no deadline in the wheel precedes, and (2) is
 * made true again: T's own slot on each level above 0 is emptied, top
 * down, so that what falls from one level is already where it belongs when
 * the level below is looked at. After drain_ahead has run, there is
 * nothing left to move here.
 */
static void move_to(pc__timer_wheel_t *tw, uint64_t to)
{
	uint64_t from = tw->now;

	tw->now = to;
	if (block_of(to, TOP) != block_of(from, TOP) && !list_empty(&tw->overflow)) {
		pc__tw_node_t moving;

		list_move_all(&tw->overflow, &moving);
		while (!list_empty(&moving)) {
			pc__tw_node_t *n = moving.next;

			unlink_node(tw, n);
			place(tw, n);
		}
	}
	for (unsigned level = TOP; level >= 1; level--) {
		unsigned slot = slot_of(to, level);

		if (bit_set(tw->occupied[level], slot))
			drain_slot(tw, level, slot, SIZE_MAX);
	}
}

/* The exact earliest deadline on the levels and the overflow list; 0 when
 * they are empty. */
static int earliest(pc__timer_wheel_t *tw, uint64_t *out)
{
	uint64_t best = UINT64_MAX;
	int found = 0;

	for (unsigned level = 0; level < PC__TW_LEVELS; level++) {
		/* By (2), the levels from here up hold nothing in T's block of
		 * the level below. */
		if (found && block_of(best, level - 1) == block_of(tw->now, level - 1))
			break;
		int slot = ring_first(tw->occupied[level], slot_of(tw->now, level));

		if (slot < 0)
			continue;
		uint64_t min;
		if (level == 0) {
			min = tw->slots[0][slot].next->deadline;
		} else {
			unsigned w = (unsigned)slot >> 6;
			uint64_t bit = slot_bit((unsigned)slot);

			/* Nothing in the slot precedes its start: when that is
			 * past the best so far, its minimum is not needed, and a
			 * stale one (thousands of nodes) is not scanned for it. */
			if (found && best <= slot_start(tw->now, level, (unsigned)slot))
				continue;
			if (tw->min_stale[level][w] & bit) {
				tw->slot_min[level][slot] = list_min(&tw->slots[level][slot]);
				tw->min_stale[level][w] &= ~bit;
			}
			min = tw->slot_min[level][slot];
		}
		if (!found || min < best)
			best = min;
		found = 1;
	}
	if (!found && !list_empty(&tw->overflow)) {
		best = list_min(&tw->overflow);
		found = 1;
	}
	*out = best;
	return found;
}

void pc__tw_init(pc__timer_wheel_t *tw, uint64_t now_ms)
{
	tw->now = now_ms;
	tw->count = 0;
	tw->moved = 0;
	list_init(&tw->pending);
	list_init(&tw->overflow);
	for (unsigned l = 0; l < PC__TW_LEVELS; l++) {
		tw->occupied[l][0] = tw->occupied[l][1] = 0;
		tw->min_stale[l][0] = tw->min_stale[l][1] = 0;
		for (unsigned s = 0; s < PC__TW_SLOTS; s++)
			list_init(&tw->slots[l][s]);
	}
}

void pc__tw_add(pc__timer_wheel_t *tw, pc__tw_node_t *node, uint64_t deadline_ms)
{
	assert(!pc__tw_linked(node));
	node->deadline = deadline_ms;
	if (deadline_ms <= tw->now) {
		node->level = LEVEL_PENDING;
		list_add_tail(&tw->pending, node);
	} else {
		place(tw, node);
	}
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

/*
 * T steps from one due deadline to the next. After move_to, (2) puts every
 * node due at T on level 0, in T's slot, and only there: a callback's node
 * due at T or before goes to pending, so the slot empties and the loop
 * ends.
 */
void pc__tw_advance(pc__timer_wheel_t *tw, uint64_t now_ms,
		    pc__tw_fire_fn fire, void *arg)
{
	uint64_t due;

	if (now_ms < tw->now)
		now_ms = tw->now;
	fire_pending(tw, fire, arg);
	while (earliest(tw, &due) && due <= now_ms) {
		move_to(tw, due);
		pc__tw_node_t *head = &tw->slots[0][slot_of(due, 0)];

		while (!list_empty(head))
			fire_node(tw, head->next, fire, arg);
	}
	move_to(tw, now_ms);
}

/* The slot after T's on each level above 0 is the next to be emptied by
 * move_to; its nodes fit on lower levels already. Nearest first. */
int pc__tw_drain_ahead(pc__timer_wheel_t *tw, size_t budget)
{
	int left = 0;

	for (unsigned level = 1; level < PC__TW_LEVELS; level++) {
		unsigned slot = (slot_of(tw->now, level) + 1) & RING_MASK;

		if (!bit_set(tw->occupied[level], slot))
			continue;
		budget -= drain_slot(tw, level, slot, budget);
		if (bit_set(tw->occupied[level], slot))
			left = 1;
	}
	return left;
}

uint64_t pc__tw_next_deadline(pc__timer_wheel_t *tw)
{
	uint64_t due;

	if (!list_empty(&tw->pending))
		return list_min(&tw->pending);
	return earliest(tw, &due) ? due : UINT64_MAX;
}

size_t pc__tw_count(const pc__timer_wheel_t *tw)
{
	return tw->count;
}
