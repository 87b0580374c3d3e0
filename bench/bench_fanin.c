/*
 * fanin: 8 producers each send 0..999,999 to one consumer as fast as they
 * can (--n sets the count per producer). A producer's handler sends a chunk
 * of 256 values and then a "continue" message to itself, so the runtime can
 * interleave producers and apply backpressure (a sender to a receiver too
 * far behind is held back at the end of its turn). The consumer sums; the sum
 * must be 8 * n(n-1)/2.
 *
 * consumer_peak_depth is measured here, not by the runtime: each producer
 * publishes how many values it has sent (relaxed store on its own cache
 * line, after every send); every 1024 messages the consumer computes
 * sum(sent) - received and keeps the peak. `mutes` comes from
 * pc_runtime_stats.
 */
#include <stdio.h>
#include <stdlib.h>

#include "benchlib.h"

#define PRODUCERS 8u
#define CHUNK 256u
#define SAMPLE_EVERY 1024u

enum { MSG_VALUE = 1, MSG_CONTINUE = 2 };

typedef struct sent_slot {
	uint64_t sent;
} __attribute__((aligned(64))) sent_slot_t;

static sent_slot_t sent_slots[PRODUCERS];

typedef struct producer {
	pc_actor_t *consumer; /* borrowed: main holds it until the end */
	sent_slot_t *slot;
	uint64_t next, limit;
} producer_t;

typedef struct consumer {
	uint64_t sum, received, expect;
	uint64_t peak_depth;
	bench_latch_t *done;
} consumer_t;

static int producer_receive(pc_ctx_t *ctx, void *state, pc_msg_t *m)
{
	(void)m;
	producer_t *p = state;
	uint64_t end = p->next + CHUNK < p->limit ? p->next + CHUNK : p->limit;
	while (p->next < end) {
		int rc = pc_send_u64(p->consumer, MSG_VALUE, p->next);
		if (rc)
			return rc;
		p->next++;
		__atomic_store_n(&p->slot->sent, p->next, __ATOMIC_RELAXED);
	}
	if (p->next < p->limit)
		return pc_send_u64(pc_self(ctx), MSG_CONTINUE, 0);
	pc_exit(ctx, PC_EXIT_NORMAL);
	return 0;
}

static void sample_depth(consumer_t *c)
{
	uint64_t sent = 0;
	for (uint32_t i = 0; i < PRODUCERS; i++)
		sent += __atomic_load_n(&sent_slots[i].sent, __ATOMIC_RELAXED);
	/* A producer's store may lag its send: never count below zero. */
	uint64_t depth = sent > c->received ? sent - c->received : 0;
	if (depth > c->peak_depth)
		c->peak_depth = depth;
}

static int consumer_receive(pc_ctx_t *ctx, void *state, pc_msg_t *m)
{
	(void)ctx;
	consumer_t *c = state;
	c->sum += pc_msg_u64(m);
	c->received++;
	if (c->received % SAMPLE_EVERY == 1)
		sample_depth(c);
	if (c->received == c->expect)
		bench_latch_signal(c->done);
	return 0;
}

static const pc_behavior_t producer_beh = {"producer", producer_receive, NULL};
static const pc_behavior_t consumer_beh = {"consumer", consumer_receive, NULL};

int main(int argc, char **argv)
{
	bench_opts_t o;
	bench_parse(argc, argv, &o);
	uint64_t per = o.n ? o.n : 1000000;
	uint64_t total = per * PRODUCERS;
	uint64_t expect_sum = (uint64_t)PRODUCERS * (per * (per - 1) / 2);
	pc_runtime_t *rt = bench_runtime(&o);
	bench_latch_t done;
	bench_latch_init(&done);

	consumer_t cons = {0, 0, total, 0, &done};
	producer_t prods[PRODUCERS];
	pc_actor_t *ch, *ph[PRODUCERS];
	int rc = pc_spawn(rt, &consumer_beh, &cons, &ch);
	for (uint32_t i = 0; rc == 0 && i < PRODUCERS; i++) {
		prods[i] = (producer_t){ch, &sent_slots[i], 0, per};
		rc = pc_spawn(rt, &producer_beh, &prods[i], &ph[i]);
	}
	if (rc)
		bench_fail("spawn: %s", pc_strerror(rc));

	double t0 = bench_now_s();
	for (uint32_t i = 0; i < PRODUCERS; i++)
		if ((rc = pc_send_u64(ph[i], MSG_CONTINUE, 0)))
			bench_fail("send: %s", pc_strerror(rc));
	bench_latch_wait(&done, BENCH_TIMEOUT_S, "fanin");
	double wall = bench_now_s() - t0;

	pc_runtime_stats_t st;
	pc_runtime_stats(rt, &st, NULL, 0);
	uint32_t workers = pc_runtime_workers(rt);
	pc_actor_release(ch);
	for (uint32_t i = 0; i < PRODUCERS; i++)
		pc_actor_release(ph[i]);
	pc_runtime_stop(rt); /* joins the workers: the states are ours again */
	if (cons.sum != expect_sum)
		bench_fail("sum %llu, expected %llu", (unsigned long long)cons.sum, (unsigned long long)expect_sum);
	for (uint32_t i = 0; i < PRODUCERS; i++)
		if (prods[i].next != per)
			bench_fail("producer %u sent %llu values, expected %llu", i,
				   (unsigned long long)prods[i].next, (unsigned long long)per);

	char extra[192];
	snprintf(extra, sizeof(extra),
		 "\"consumer_peak_depth\":%llu,\"mutes\":%llu,\"sum\":%llu,\"producers\":%u,\"ns_per_msg\":%.2f",
		 (unsigned long long)cons.peak_depth, (unsigned long long)st.mutes, (unsigned long long)cons.sum,
		 PRODUCERS, wall * 1e9 / (double)total);
	bench_report("fanin", workers, wall, total, extra);
	pc_runtime_free(rt);
	bench_latch_destroy(&done);
	return 0;
}
