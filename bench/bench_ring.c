/*
 * ring: 1,000 actors in a ring pass one token carrying the number of hops
 * left; 10,000,000 hops by default (--n scales the hops). Each hop is one
 * message from an actor to its successor. Main sends the token to actor 0;
 * the actor that receives 0 signals the end. Reports ns per hop.
 *
 * Checked: the token ends at actor (hops % 1000), and the actors received
 * hops + 1 messages in all.
 */
#include <stdio.h>
#include <stdlib.h>

#include "benchlib.h"

#define RING_SIZE 1000u

enum { MSG_TOKEN = 1 };

typedef struct node {
	pc_actor_t *next; /* borrowed: main holds every handle until the end */
	uint32_t index;
	uint64_t received;
	bench_latch_t *done;
	uint32_t *final_index;
} node_t;

static int node_receive(pc_ctx_t *ctx, void *state, pc_msg_t *m)
{
	(void)ctx;
	node_t *n = state;
	uint64_t left = pc_msg_u64(m);
	n->received++;
	if (left == 0) {
		*n->final_index = n->index;
		bench_latch_signal(n->done);
		return 0;
	}
	return pc_send_u64(n->next, MSG_TOKEN, left - 1);
}

static const pc_behavior_t node_beh = {"ring-node", node_receive, NULL};

int main(int argc, char **argv)
{
	bench_opts_t o;
	bench_parse(argc, argv, &o);
	uint64_t hops = o.n ? o.n : 10000000;
	pc_runtime_t *rt = bench_runtime(&o);
	node_t *nodes = calloc(RING_SIZE, sizeof(*nodes));
	pc_actor_t **actors = calloc(RING_SIZE, sizeof(*actors));
	if (!nodes || !actors)
		bench_fail("out of memory");
	bench_latch_t done;
	bench_latch_init(&done);
	uint32_t final_index = UINT32_MAX;
	for (uint32_t i = 0; i < RING_SIZE; i++) {
		nodes[i].index = i;
		nodes[i].done = &done;
		nodes[i].final_index = &final_index;
		int rc = pc_spawn(rt, &node_beh, &nodes[i], &actors[i]);
		if (rc)
			bench_fail("spawn: %s", pc_strerror(rc));
	}
	/* No message has been sent yet: the states are still ours to write. */
	for (uint32_t i = 0; i < RING_SIZE; i++)
		nodes[i].next = actors[(i + 1) % RING_SIZE];

	double t0 = bench_now_s();
	int rc = pc_send_u64(actors[0], MSG_TOKEN, hops);
	if (rc)
		bench_fail("send: %s", pc_strerror(rc));
	bench_latch_wait(&done, BENCH_TIMEOUT_S, "ring");
	double wall = bench_now_s() - t0;
	uint32_t workers = pc_runtime_workers(rt);

	for (uint32_t i = 0; i < RING_SIZE; i++)
		pc_actor_release(actors[i]);
	/* Stopping joins the workers: their writes to the states are visible. */
	pc_runtime_stop(rt);
	uint64_t received = 0;
	for (uint32_t i = 0; i < RING_SIZE; i++)
		received += nodes[i].received;
	if (final_index != hops % RING_SIZE)
		bench_fail("token ended at actor %u, expected %llu", final_index,
			   (unsigned long long)(hops % RING_SIZE));
	if (received != hops + 1)
		bench_fail("actors received %llu messages, expected %llu", (unsigned long long)received,
			   (unsigned long long)(hops + 1));

	char extra[96];
	snprintf(extra, sizeof(extra), "\"ns_per_hop\":%.1f,\"actors\":%u", wall * 1e9 / (double)hops, RING_SIZE);
	bench_report("ring", workers, wall, hops, extra);
	pc_runtime_free(rt);
	bench_latch_destroy(&done);
	free(actors);
	free(nodes);
	return 0;
}
