/*
 * idle: 10,000 actors (--n) that have each handled one message and now
 * have nothing to do, and no messages for 2 s. Measured: the process's CPU
 * time (getrusage: user + system, every thread) over those 2 s, while the
 * main thread sleeps. An idle runtime should not spin or poll.
 *
 * ops = actors; wall_s = the idle window. Also reported: worker wake-ups
 * during the window (from pc_runtime_stats).
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "benchlib.h"

#define IDLE_S 2.0

static int idle_receive(pc_ctx_t *ctx, void *state, pc_msg_t *m)
{
	(void)ctx;
	(void)m;
	(*(uint64_t *)state)++;
	return 0;
}

static const pc_behavior_t idle_beh = {"idle", idle_receive, NULL};

static uint64_t total_wakeups(pc_runtime_t *rt, pc_worker_stats_t *ws, uint32_t n)
{
	pc_runtime_stats(rt, NULL, ws, n);
	uint64_t w = 0;
	for (uint32_t i = 0; i < n; i++)
		w += ws[i].wakeups;
	return w;
}

int main(int argc, char **argv)
{
	bench_opts_t o;
	bench_parse(argc, argv, &o);
	uint64_t n = o.n ? o.n : 10000;
	pc_runtime_t *rt = bench_runtime(&o);
	uint32_t workers = pc_runtime_workers(rt);
	pc_actor_t **actors = calloc(n, sizeof(*actors));
	uint64_t *handled = calloc(n, sizeof(*handled));
	pc_worker_stats_t *ws = calloc(workers, sizeof(*ws));
	if (!actors || !handled || !ws)
		bench_fail("out of memory");
	int rc;
	for (uint64_t i = 0; i < n; i++) {
		if ((rc = pc_spawn(rt, &idle_beh, &handled[i], &actors[i])))
			bench_fail("spawn: %s", pc_strerror(rc));
		if ((rc = pc_send_u64(actors[i], 1, i)))
			bench_fail("send: %s", pc_strerror(rc));
	}
	if ((rc = pc_runtime_wait_quiescent(rt, (int64_t)(BENCH_TIMEOUT_S * 1000))))
		bench_fail("wait_quiescent: %s", pc_strerror(rc));

	uint64_t wake0 = total_wakeups(rt, ws, workers);
	double cpu0 = bench_cpu_s();
	double t0 = bench_now_s();
	struct timespec ts = {(time_t)IDLE_S, (long)((IDLE_S - (double)(time_t)IDLE_S) * 1e9)};
	while (nanosleep(&ts, &ts) != 0)
		;
	double cpu = bench_cpu_s() - cpu0;
	double wall = bench_now_s() - t0;
	uint64_t wakeups = total_wakeups(rt, ws, workers) - wake0;

	for (uint64_t i = 0; i < n; i++)
		pc_actor_release(actors[i]);
	pc_runtime_stop(rt);
	for (uint64_t i = 0; i < n; i++)
		if (handled[i] != 1)
			bench_fail("actor %llu handled %llu messages, expected 1", (unsigned long long)i,
				   (unsigned long long)handled[i]);

	char extra[160];
	snprintf(extra, sizeof(extra), "\"cpu_s\":%.6f,\"cpu_pct_of_one_core\":%.3f,\"wakeups\":%llu", cpu,
		 100.0 * cpu / wall, (unsigned long long)wakeups);
	bench_report("idle", workers, wall, n, extra);
	pc_runtime_free(rt);
	free(ws);
	free(handled);
	free(actors);
	return 0;
}
