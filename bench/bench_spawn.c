/*
 * spawn: a root actor spawns 1,000,000 actors (--n) that each wait for one
 * message; then it sends each a `stop`, each replies `ack` to the root and
 * stops. The root works in chunks of 1024 (spawns, or stops) per handler
 * call, sending itself a "continue" between chunks, so acks interleave with
 * the stops.
 *
 * bytes_per_actor: resident memory after the spawn phase minus before it,
 * divided by the actors. The waiting actors have no state of their own
 * (state NULL), so this is the runtime's cost per idle actor; the root's
 * table of handles is allocated and touched before the first measurement.
 * ops_per_s covers the whole (spawn + stop); spawn_s is the spawn phase.
 */
#include <stdio.h>
#include <stdlib.h>

#include "benchlib.h"

#define CHUNK 1024u

enum { MSG_SPAWN_MORE = 1, MSG_STOP_MORE, MSG_STOP, MSG_ACK };

typedef struct root {
	pc_actor_t **handles; /* owned references to the waiters */
	uint64_t n, spawned, stopped, acks;
	int error;
	bench_latch_t spawned_all, acked_all;
} root_t;

static pc_actor_t *g_root; /* borrowed by the waiters; main holds it */

static int waiter_receive(pc_ctx_t *ctx, void *state, pc_msg_t *m)
{
	(void)state;
	if (m->type != MSG_STOP)
		return PC_EINVAL;
	int rc = pc_send_u64(g_root, MSG_ACK, 0);
	if (rc == 0)
		pc_exit(ctx, PC_EXIT_NORMAL);
	return rc;
}

static const pc_behavior_t waiter_beh = {"waiter", waiter_receive, NULL};

static int root_fail(root_t *r, int rc)
{
	r->error = rc;
	bench_latch_signal(&r->spawned_all);
	bench_latch_signal(&r->acked_all);
	return rc;
}

static int root_receive(pc_ctx_t *ctx, void *state, pc_msg_t *m)
{
	root_t *r = state;
	pc_runtime_t *rt = pc_ctx_runtime(ctx);
	int rc = 0;
	switch (m->type) {
	case MSG_SPAWN_MORE: {
		uint64_t end = r->spawned + CHUNK < r->n ? r->spawned + CHUNK : r->n;
		for (; r->spawned < end; r->spawned++)
			if ((rc = pc_spawn(rt, &waiter_beh, NULL, &r->handles[r->spawned])))
				return root_fail(r, rc);
		if (r->spawned < r->n)
			rc = pc_send_u64(pc_self(ctx), MSG_SPAWN_MORE, 0);
		else
			bench_latch_signal(&r->spawned_all);
		break;
	}
	case MSG_STOP_MORE: {
		uint64_t end = r->stopped + CHUNK < r->n ? r->stopped + CHUNK : r->n;
		for (; r->stopped < end; r->stopped++) {
			pc_actor_t *w = r->handles[r->stopped];
			r->handles[r->stopped] = NULL;
			rc = pc_send_u64(w, MSG_STOP, 0);
			pc_actor_release(w);
			if (rc)
				return root_fail(r, rc);
		}
		if (r->stopped < r->n)
			rc = pc_send_u64(pc_self(ctx), MSG_STOP_MORE, 0);
		break;
	}
	case MSG_ACK:
		if (++r->acks == r->n)
			bench_latch_signal(&r->acked_all);
		break;
	default:
		rc = PC_EINVAL;
	}
	return rc ? root_fail(r, rc) : 0;
}

static const pc_behavior_t root_beh = {"spawner", root_receive, NULL};

int main(int argc, char **argv)
{
	bench_opts_t o;
	bench_parse(argc, argv, &o);
	uint64_t n = o.n ? o.n : 1000000;
	pc_runtime_t *rt = bench_runtime(&o);

	root_t r = {0};
	r.n = n;
	r.handles = malloc(n * sizeof(*r.handles));
	if (!r.handles)
		bench_fail("out of memory");
	bench_touch(r.handles, n * sizeof(*r.handles)); /* resident before we measure */
	bench_latch_init(&r.spawned_all);
	bench_latch_init(&r.acked_all);
	int rc = pc_spawn(rt, &root_beh, &r, &g_root);
	if (rc)
		bench_fail("spawn: %s", pc_strerror(rc));
	/* Let the runtime settle (threads started, first allocations made). */
	if ((rc = pc_runtime_wait_quiescent(rt, 10000)))
		bench_fail("wait_quiescent: %s", pc_strerror(rc));

	uint64_t rss0 = bench_rss_kib();
	double t0 = bench_now_s();
	if ((rc = pc_send_u64(g_root, MSG_SPAWN_MORE, 0)))
		bench_fail("send: %s", pc_strerror(rc));
	bench_latch_wait(&r.spawned_all, BENCH_TIMEOUT_S, "spawn phase");
	double t1 = bench_now_s();
	uint64_t rss1 = bench_rss_kib();
	if (r.error)
		bench_fail("spawn phase: %s", pc_strerror(r.error));

	double t2 = bench_now_s();
	if ((rc = pc_send_u64(g_root, MSG_STOP_MORE, 0)))
		bench_fail("send: %s", pc_strerror(rc));
	bench_latch_wait(&r.acked_all, BENCH_TIMEOUT_S, "stop phase");
	double t3 = bench_now_s();
	if (r.error)
		bench_fail("stop phase: %s", pc_strerror(r.error));

	pc_actor_release(g_root);
	if ((rc = pc_runtime_wait_quiescent(rt, (int64_t)(BENCH_TIMEOUT_S * 1000))))
		bench_fail("wait_quiescent: %s", pc_strerror(rc));
	pc_runtime_stats_t st;
	pc_runtime_stats(rt, &st, NULL, 0);
	uint32_t workers = pc_runtime_workers(rt);
	/* Everything but the root has stopped. */
	if (st.spawned != n + 1 || st.exited != n)
		bench_fail("spawned %llu and exited %llu actors, expected %llu and %llu",
			   (unsigned long long)st.spawned, (unsigned long long)st.exited,
			   (unsigned long long)(n + 1), (unsigned long long)n);

	double spawn_s = t1 - t0, stop_s = t3 - t2;
	double bpa = rss1 > rss0 ? (double)(rss1 - rss0) * 1024.0 / (double)n : 0.0;
	char extra[192];
	snprintf(extra, sizeof(extra),
		 "\"bytes_per_actor\":%.1f,\"spawn_s\":%.6f,\"stop_s\":%.6f,\"spawn_per_s\":%.1f,"
		 "\"rss_before_kib\":%llu,\"rss_after_kib\":%llu",
		 bpa, spawn_s, stop_s, (double)n / spawn_s, (unsigned long long)rss0, (unsigned long long)rss1);
	bench_report("spawn", workers, spawn_s + stop_s, n, extra);
	pc_runtime_free(rt);
	bench_latch_destroy(&r.spawned_all);
	bench_latch_destroy(&r.acked_all);
	free(r.handles);
	return 0;
}
