/*
 * pingpong: two actors; main sends 1 to B; each replies v+1 to the other
 * until v reaches N (default 1,000,000). Reports ns per round trip (two
 * messages).
 */
#include <stdio.h>

#include "benchlib.h"

typedef struct player {
	pc_actor_t *other; /* borrowed: both live until the end */
	uint64_t limit;
	bench_latch_t *done;
} player_t;

static int play(pc_ctx_t *ctx, void *state, pc_msg_t *m)
{
	(void)ctx;
	player_t *p = state;
	uint64_t v = pc_msg_u64(m);
	if (v >= p->limit) {
		bench_latch_signal(p->done);
		return 0;
	}
	return pc_send_u64(p->other, 1, v + 1);
}

static const pc_behavior_t player = {"player", play, NULL};

int main(int argc, char **argv)
{
	bench_opts_t o;
	bench_parse(argc, argv, &o);
	uint64_t n = o.n ? o.n : 1000000;
	pc_runtime_t *rt = bench_runtime(&o);
	bench_latch_t done;
	bench_latch_init(&done);
	player_t pa = {NULL, n, &done}, pb = pa;
	pc_actor_t *a, *b;
	int rc = pc_spawn(rt, &player, &pa, &a);
	if (rc == 0)
		rc = pc_spawn(rt, &player, &pb, &b);
	if (rc)
		bench_fail("spawn: %s", pc_strerror(rc));
	pa.other = b;
	pb.other = a;
	double t0 = bench_now_s();
	if ((rc = pc_send_u64(b, 1, 1)))
		bench_fail("send: %s", pc_strerror(rc));
	bench_latch_wait(&done, BENCH_TIMEOUT_S, "pingpong");
	double wall = bench_now_s() - t0;
	uint64_t trips = n / 2;
	char extra[64];
	snprintf(extra, sizeof(extra), "\"ns_per_round_trip\":%.1f", wall * 1e9 / (double)trips);
	bench_report("pingpong", pc_runtime_workers(rt), wall, trips, extra);
	pc_actor_release(a);
	pc_actor_release(b);
	pc_runtime_free(rt);
	bench_latch_destroy(&done);
	return 0;
}
