/*
 * skynet: the root spawns 10 children, each of those spawns 10, and so on
 * for 6 levels, down to 1,000,000 leaves (1,111,111 actors in all). Leaf i
 * sends i to its parent; a parent sums its 10 replies and sends the sum up;
 * the root's sum must be 499,999,500,000. (--n sets the number of leaves;
 * it must be a power of 10, at least 10.)
 *
 * Every actor holds a reference to its parent (released by its stop
 * handler) and none to its children (the spawner drops its reference right
 * after sending the start message), and stops once it has replied, so each
 * actor is freed as soon as it is done. Checked at the end: every spawned
 * actor has stopped.
 *
 * Inner actors have a malloc'd state (sum, replies pending); a leaf's state
 * is just its parent's handle and its number comes in the start message,
 * so the benchmark itself allocates nothing per leaf and the figure is the
 * runtime's.
 */
#include <stdio.h>
#include <stdlib.h>

#include "benchlib.h"

#define FANOUT 10u

enum { MSG_START = 1, MSG_SUM = 2 };

typedef struct node {
	pc_actor_t *parent; /* retained; NULL for the root */
	uint64_t num;       /* the first leaf number below this actor */
	uint64_t size;      /* leaves below this actor */
	uint64_t sum;
	uint32_t pending;
} node_t;

static struct {
	bench_latch_t done;
	uint64_t result;
	int failed;
} g;

static const pc_behavior_t node_beh, leaf_beh;

static void note_error(int reason)
{
	if (reason != PC_EXIT_NORMAL && reason != PC_EXIT_SHUTDOWN) {
		/* An error stopped an actor: its subtree's sum is lost. */
		g.failed = 1;
		bench_latch_signal(&g.done);
	}
}

/* A leaf: the state is the parent's handle (retained). */
static int leaf_receive(pc_ctx_t *ctx, void *state, pc_msg_t *m)
{
	int rc = pc_send_u64(state, MSG_SUM, pc_msg_u64(m));
	if (rc == 0)
		pc_exit(ctx, PC_EXIT_NORMAL);
	return rc;
}

static void leaf_stop(pc_ctx_t *ctx, void *state, int reason)
{
	(void)ctx;
	note_error(reason);
	pc_actor_release(state);
}

static const pc_behavior_t leaf_beh = {"skynet-leaf", leaf_receive, leaf_stop};

static int spawn_child(pc_ctx_t *ctx, uint64_t num, uint64_t size)
{
	pc_actor_t *self = pc_actor_retain(pc_self(ctx));
	void *state = self;
	uint64_t start_value = num;
	if (size > 1) {
		node_t *c = malloc(sizeof(*c));
		if (!c) {
			pc_actor_release(self);
			return PC_ENOMEM;
		}
		*c = (node_t){self, num, size, 0, 0};
		state = c;
		start_value = 0;
	}
	pc_actor_t *h;
	int rc = pc_spawn(pc_ctx_runtime(ctx), size > 1 ? &node_beh : &leaf_beh, state, &h);
	if (rc) {
		pc_actor_release(self);
		if (size > 1)
			free(state);
		return rc;
	}
	rc = pc_send_u64(h, MSG_START, start_value);
	pc_actor_release(h);
	return rc;
}

static int start(pc_ctx_t *ctx, node_t *n)
{
	uint64_t child_size = n->size / FANOUT;
	for (uint32_t i = 0; i < FANOUT; i++) {
		int rc = spawn_child(ctx, n->num + i * child_size, child_size);
		if (rc)
			return rc;
	}
	n->pending = FANOUT;
	return 0;
}

static int node_receive(pc_ctx_t *ctx, void *state, pc_msg_t *m)
{
	node_t *n = state;
	if (m->type == MSG_START)
		return start(ctx, n);
	n->sum += pc_msg_u64(m);
	if (--n->pending > 0)
		return 0;
	if (n->parent) {
		int rc = pc_send_u64(n->parent, MSG_SUM, n->sum);
		if (rc == 0)
			pc_exit(ctx, PC_EXIT_NORMAL);
		return rc;
	}
	pc_exit(ctx, PC_EXIT_NORMAL);
	g.result = n->sum;
	bench_latch_signal(&g.done);
	return 0;
}

static void node_stop(pc_ctx_t *ctx, void *state, int reason)
{
	(void)ctx;
	node_t *n = state;
	note_error(reason);
	pc_actor_release(n->parent);
	free(n);
}

static const pc_behavior_t node_beh = {"skynet-node", node_receive, node_stop};

int main(int argc, char **argv)
{
	bench_opts_t o;
	bench_parse(argc, argv, &o);
	uint64_t leaves = o.n ? o.n : 1000000;
	uint64_t actors = 0;
	if (leaves < FANOUT)
		bench_fail("--n must be a power of %u, at least %u", FANOUT, FANOUT);
	for (uint64_t s = leaves; s >= 1; s /= FANOUT) {
		actors += leaves / s;
		if (s == 1)
			break;
		if (s % FANOUT)
			bench_fail("--n must be a power of %u", FANOUT);
	}
	uint64_t expect = leaves * (leaves - 1) / 2;
	bench_latch_init(&g.done);
	pc_runtime_t *rt = bench_runtime(&o);

	node_t *root = calloc(1, sizeof(*root));
	if (!root)
		bench_fail("out of memory");
	root->size = leaves;
	pc_actor_t *h;
	int rc = pc_spawn(rt, &node_beh, root, &h);
	if (rc)
		bench_fail("spawn: %s", pc_strerror(rc));

	double t0 = bench_now_s();
	if ((rc = pc_send_u64(h, MSG_START, 0)))
		bench_fail("send: %s", pc_strerror(rc));
	bench_latch_wait(&g.done, BENCH_TIMEOUT_S, "skynet");
	double wall = bench_now_s() - t0;
	if (g.failed)
		bench_fail("an actor stopped with an error (out of memory?)");

	pc_actor_release(h);
	/* The last actors are still stopping; once quiet, all must be gone. */
	if ((rc = pc_runtime_wait_quiescent(rt, (int64_t)(BENCH_TIMEOUT_S * 1000))))
		bench_fail("wait_quiescent: %s", pc_strerror(rc));
	pc_runtime_stats_t st;
	pc_runtime_stats(rt, &st, NULL, 0);
	uint32_t workers = pc_runtime_workers(rt);
	if (g.result != expect)
		bench_fail("result %llu, expected %llu", (unsigned long long)g.result, (unsigned long long)expect);
	if (st.spawned != actors || st.exited != actors)
		bench_fail("spawned %llu and exited %llu actors, expected %llu of each",
			   (unsigned long long)st.spawned, (unsigned long long)st.exited, (unsigned long long)actors);
	uint64_t rss_end = bench_rss_kib();

	char extra[160];
	snprintf(extra, sizeof(extra), "\"result\":%llu,\"actors\":%llu,\"ns_per_actor\":%.1f,\"rss_end_kib\":%llu",
		 (unsigned long long)g.result, (unsigned long long)actors, wall * 1e9 / (double)actors,
		 (unsigned long long)rss_end);
	bench_report("skynet", workers, wall, actors, extra);
	pc_runtime_free(rt);
	bench_latch_destroy(&g.done);
	return 0;
}
