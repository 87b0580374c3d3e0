/*
 * Rendezvous placement (agents/gateway/placement.h): every node computes
 * the same preferred node from the same list, in any order; sessions
 * spread evenly; a node leaving moves only the sessions that preferred
 * it, and a node joining takes only sessions from the others, about its
 * share.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "agents/gateway/placement.h"

#define KEYS 30000

static const char *const three[] = {"node-a", "node-b", "node-c"};

static const char *pick(const char *const *nodes, size_t n, const char *key)
{
	size_t i = pc__placement_pick(nodes, n, key);
	cr_assert_lt(i, n);
	return nodes[i];
}

Test(placement, the_same_answer_whatever_the_order)
{
	static const char *const shuffled[] = {"node-c", "node-a", "node-b"};
	char key[32];
	for (int k = 0; k < 1000; k++) {
		snprintf(key, sizeof(key), "session-%d", k);
		cr_assert_str_eq(pick(three, 3, key), pick(shuffled, 3, key));
	}
	cr_assert_eq(pc__placement_pick(three, 0, "s"), 0);
}

Test(placement, sessions_spread_evenly)
{
	size_t count[3] = {0};
	char key[32];
	for (int k = 0; k < KEYS; k++) {
		snprintf(key, sizeof(key), "agent:main:%d", k);
		count[pc__placement_pick(three, 3, key)]++;
	}
	for (int i = 0; i < 3; i++)
		cr_assert(count[i] > KEYS / 3 * 9 / 10 && count[i] < KEYS / 3 * 11 / 10, "node %d has %zu of %d", i,
			  count[i], KEYS);
}

Test(placement, a_node_leaving_or_joining_moves_only_its_share)
{
	static const char *const four[] = {"node-a", "node-b", "node-c", "node-d"};
	size_t moved_join = 0;
	char key[32];
	for (int k = 0; k < KEYS; k++) {
		snprintf(key, sizeof(key), "s%d", k);
		const char *before = pick(three, 3, key);
		const char *after = pick(four, 4, key);
		if (strcmp(before, after) != 0) {
			/* a session moves only to the new node */
			cr_assert_str_eq(after, "node-d", "%s moved from %s to %s", key, before, after);
			moved_join++;
		}
		/* node-c leaves: only its sessions move */
		const char *without = pick(three, 2, key);
		if (strcmp(before, "node-c") != 0)
			cr_assert_str_eq(without, before, "%s moved though its node stayed", key);
	}
	cr_assert(moved_join > KEYS / 4 * 9 / 10 && moved_join < KEYS / 4 * 11 / 10, "%zu of %d moved", moved_join,
		  KEYS);
}
