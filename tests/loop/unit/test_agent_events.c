/*
 * The event layer (agents/events/event_bus.c): seq numbering, the one
 * terminal event, late subscribers, the drop policy of a slow reader,
 * actor notification once per empty-to-non-empty transition, plain-thread
 * waits, session hubs, the wire form, and a many-thread stress run.
 */
#include <criterion/criterion.h>

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "agents/events/event_bus.h"
#include "pincer.h"
#include "test_util.h"

/* ---- helpers ---- */

static pc_event_sub_t *new_sub(size_t capacity)
{
	pc_event_sub_config_t cfg = {.capacity = capacity};
	pc_event_sub_t *s = NULL;
	cr_assert_eq(pc_event_sub_new(&cfg, &s), 0);
	return s;
}

static pc_event_bus_t *new_bus(const char *run, const char *session, pc_event_hub_t *hub)
{
	pc_event_bus_t *b = NULL;
	cr_assert_eq(pc_event_bus_new(run, session, hub, &b), 0);
	return b;
}

static void emit(pc_event_bus_t *b, pc_event_stream_t st, bool droppable, bool terminal)
{
	cr_assert_eq(pc_event_bus_emit(b, st, NULL, 0, droppable, terminal, NULL), 0);
}

/* Takes everything buffered into `out` (cap entries). */
static size_t take_all(pc_event_sub_t *s, pc_event_t **out, size_t cap)
{
	size_t n = 0, k;
	while (n < cap && (k = pc_event_sub_take(s, out + n, cap - n)) > 0)
		n += k;
	return n;
}

static void release_all(pc_event_t **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		pc_event_release(v[i]);
}

/* ---- basics ---- */

Test(events, stream_names)
{
	cr_assert_str_eq(pc_event_stream_name(PC_EVENT_LIFECYCLE), "lifecycle");
	cr_assert_str_eq(pc_event_stream_name(PC_EVENT_ASSISTANT), "assistant");
	cr_assert_str_eq(pc_event_stream_name(PC_EVENT_COMPACTION), "compaction");
	cr_assert_str_eq(pc_event_stream_name(PC_EVENT_ERROR), "error");
	cr_assert_str_eq(pc_event_stream_name(PC_EVENT_STREAM_COUNT), "unknown");
}

Test(events, bad_arguments)
{
	pc_event_bus_t *b = NULL;
	cr_assert_eq(pc_event_bus_new(NULL, "s", NULL, &b), PC_EINVAL);
	cr_assert_eq(pc_event_bus_new("", "s", NULL, &b), PC_EINVAL);
	cr_assert_eq(pc_event_sub_new(NULL, NULL), PC_EINVAL);
	b = new_bus("r", NULL, NULL);
	cr_assert_eq(pc_event_bus_emit(b, PC_EVENT_STREAM_COUNT, NULL, 0, false, false, NULL), PC_EINVAL);
	cr_assert_eq(pc_event_bus_emit(b, PC_EVENT_TOOL, "{\"a\":1}\0x", 9, false, false, NULL), PC_EINVAL);
	cr_assert_eq(pc_event_bus_seq(b), 0);
	pc_event_bus_release(b);
	ASSERT_NO_LEAKS();
}

Test(events, seq_monotonic_from_one)
{
	pc_event_bus_t *b = new_bus("run-1", "main", NULL);
	pc_event_sub_t *s = new_sub(0);
	cr_assert_eq(pc_event_bus_attach(b, s, false), 0);
	cr_assert_eq(pc_event_bus_seq(b), 0);
	for (uint64_t i = 1; i <= 5; i++) {
		uint64_t seq = 0;
		cr_assert_eq(pc_event_bus_emit(b, PC_EVENT_ASSISTANT, "{\"delta\":\"x\"}", 0, true, false, &seq), 0);
		cr_assert_eq(seq, i);
	}
	cr_assert_eq(pc_event_bus_seq(b), 5);
	pc_event_t *ev[8];
	size_t n = take_all(s, ev, 8);
	cr_assert_eq(n, 5);
	for (size_t i = 0; i < n; i++) {
		cr_assert_eq(ev[i]->seq, i + 1);
		cr_assert_str_eq(ev[i]->run_id, "run-1");
		cr_assert_str_eq(ev[i]->session_key, "main");
		cr_assert_str_eq(ev[i]->data, "{\"delta\":\"x\"}");
		cr_assert_eq(ev[i]->data_len, strlen(ev[i]->data));
		cr_assert(ev[i]->droppable);
		cr_assert_not(ev[i]->terminal);
		cr_assert_gt(ev[i]->ts_ms, (int64_t)1600000000000);
	}
	release_all(ev, n);
	pc_event_sub_release(s);
	pc_event_bus_release(b);
	ASSERT_NO_LEAKS();
}

Test(events, seq_counts_without_subscribers)
{
	pc_event_bus_t *b = new_bus("run-q", NULL, NULL);
	for (int i = 0; i < 3; i++)
		emit(b, PC_EVENT_ASSISTANT, true, false);
	cr_assert_eq(pc_event_bus_seq(b), 3);
	pc_event_sub_t *s = new_sub(0);
	cr_assert_eq(pc_event_bus_attach(b, s, false), 0);
	uint64_t seq = 0;
	cr_assert_eq(pc_event_bus_emit(b, PC_EVENT_TOOL, "{}", 2, false, false, &seq), 0);
	cr_assert_eq(seq, 4);
	pc_event_t *ev[2];
	cr_assert_eq(take_all(s, ev, 2), 1);
	cr_assert_eq(ev[0]->seq, 4);
	cr_assert_eq(ev[0]->stream, PC_EVENT_TOOL);
	release_all(ev, 1);
	pc_event_sub_release(s);
	pc_event_bus_release(b);
	ASSERT_NO_LEAKS();
}

/* A bus is listened to while a subscription is attached to it or to its
 * session's hub; a run's own subscriptions go at its end. */
Test(events, listened_follows_subscriptions)
{
	pc_event_hub_t *h = NULL;
	cr_assert_eq(pc_event_hub_new("main", &h), 0);
	pc_event_bus_t *b = new_bus("run-l", "main", h), *alone = new_bus("run-m", NULL, NULL);
	cr_assert_not(pc_event_bus_listened(b));
	cr_assert_not(pc_event_bus_listened(alone));
	cr_assert_not(pc_event_bus_listened(NULL));
	pc_event_sub_t *s = new_sub(0), *hs = new_sub(0);
	cr_assert_eq(pc_event_bus_attach(b, s, false), 0);
	cr_assert(pc_event_bus_listened(b));
	pc_event_bus_detach(b, s);
	cr_assert_not(pc_event_bus_listened(b));
	cr_assert_eq(pc_event_hub_attach(h, hs), 0);
	cr_assert(pc_event_bus_listened(b), "through the hub");
	cr_assert_not(pc_event_bus_listened(alone));
	pc_event_hub_detach(h, hs);
	cr_assert_eq(pc_event_bus_attach(b, s, false), 0);
	emit(b, PC_EVENT_LIFECYCLE, false, true);
	cr_assert_not(pc_event_bus_listened(b), "the run ended");
	pc_event_sub_release(s);
	pc_event_sub_release(hs);
	pc_event_bus_release(b);
	pc_event_bus_release(alone);
	pc_event_hub_release(h);
	ASSERT_NO_LEAKS();
}

Test(events, exactly_one_terminal)
{
	pc_event_bus_t *b = new_bus("run-t", NULL, NULL);
	pc_event_sub_t *s = new_sub(0);
	cr_assert_eq(pc_event_bus_attach(b, s, false), 0);
	emit(b, PC_EVENT_LIFECYCLE, false, false);
	cr_assert_not(pc_event_bus_ended(b));
	uint64_t seq = 0;
	/* droppable is ignored for the terminal event. */
	cr_assert_eq(pc_event_bus_emit(b, PC_EVENT_LIFECYCLE, "{\"phase\":\"end\"}", 0, true, true, &seq), 0);
	cr_assert_eq(seq, 2);
	cr_assert(pc_event_bus_ended(b));
	cr_assert_eq(pc_event_bus_emit(b, PC_EVENT_ASSISTANT, NULL, 0, true, false, NULL), PC_ESTATE);
	cr_assert_eq(pc_event_bus_emit(b, PC_EVENT_LIFECYCLE, NULL, 0, false, true, NULL), PC_ESTATE);
	cr_assert_eq(pc_event_bus_seq(b), 2);
	pc_event_t *ev[4];
	size_t n = take_all(s, ev, 4);
	cr_assert_eq(n, 2);
	cr_assert(ev[1]->terminal);
	cr_assert_not(ev[1]->droppable);
	cr_assert_not(ev[0]->terminal);
	/* Not asked to close on the terminal event. */
	cr_assert_not(pc_event_sub_closed(s));
	release_all(ev, n);
	pc_event_sub_release(s);
	pc_event_bus_release(b);
	ASSERT_NO_LEAKS();
}

Test(events, late_attach_gets_terminal)
{
	pc_event_bus_t *b = new_bus("run-late", "sess", NULL);
	emit(b, PC_EVENT_LIFECYCLE, false, false);
	emit(b, PC_EVENT_ASSISTANT, true, false);
	cr_assert_eq(pc_event_bus_emit(b, PC_EVENT_LIFECYCLE, "{\"phase\":\"error\"}", 0, false, true, NULL), 0);

	pc_event_sub_t *closing = new_sub(0), *open = new_sub(0);
	cr_assert_eq(pc_event_bus_attach(b, closing, true), 0);
	cr_assert_eq(pc_event_bus_attach(b, open, false), 0);
	cr_assert(pc_event_sub_closed(closing));
	cr_assert_not(pc_event_sub_closed(open));
	pc_event_t *ev[4];
	for (int k = 0; k < 2; k++) {
		pc_event_sub_t *s = k ? open : closing;
		cr_assert_eq(pc_event_sub_wait(s, 0), 0);
		size_t n = take_all(s, ev, 4);
		cr_assert_eq(n, 1);
		cr_assert(ev[0]->terminal);
		cr_assert_eq(ev[0]->seq, 3);
		cr_assert_str_eq(ev[0]->data, "{\"phase\":\"error\"}");
		release_all(ev, n);
	}
	cr_assert_eq(pc_event_sub_wait(closing, 0), PC_ESTOPPED);
	cr_assert_eq(pc_event_sub_wait(open, 0), PC_ETIMEDOUT);
	/* Detaching what the ended bus never kept is harmless. */
	pc_event_bus_detach(b, open);
	pc_event_sub_release(closing);
	pc_event_sub_release(open);
	pc_event_bus_release(b);
	ASSERT_NO_LEAKS();
}

Test(events, close_on_terminal)
{
	pc_event_bus_t *b = new_bus("run-c", NULL, NULL);
	pc_event_sub_t *c = new_sub(0), *o = new_sub(0);
	cr_assert_eq(pc_event_bus_attach(b, c, true), 0);
	cr_assert_eq(pc_event_bus_attach(b, o, false), 0);
	emit(b, PC_EVENT_TOOL, false, false);
	cr_assert_not(pc_event_sub_closed(c));
	emit(b, PC_EVENT_LIFECYCLE, false, true);
	cr_assert(pc_event_sub_closed(c));
	cr_assert_not(pc_event_sub_closed(o));
	/* What is buffered can still be taken after the close. */
	cr_assert_eq(pc_event_sub_wait(c, 1000), 0);
	pc_event_t *ev[4];
	size_t n = take_all(c, ev, 4);
	cr_assert_eq(n, 2);
	cr_assert(ev[1]->terminal);
	release_all(ev, n);
	cr_assert_eq(pc_event_sub_wait(c, -1), PC_ESTOPPED);
	n = take_all(o, ev, 4);
	cr_assert_eq(n, 2);
	release_all(ev, n);
	cr_assert_eq(pc_event_sub_wait(o, 5), PC_ETIMEDOUT);
	/* Closing is idempotent and keeps a closed subscription empty. */
	pc_event_sub_close(o);
	pc_event_sub_close(o);
	cr_assert(pc_event_sub_closed(o));
	pc_event_sub_release(c);
	pc_event_sub_release(o);
	pc_event_bus_release(b);
	ASSERT_NO_LEAKS();
}

Test(events, detach_stops_delivery)
{
	pc_event_bus_t *b = new_bus("run-d", NULL, NULL);
	pc_event_sub_t *s = new_sub(0);
	cr_assert_eq(pc_event_bus_attach(b, s, false), 0);
	cr_assert_eq(pc_event_bus_attach(b, s, false), 0); /* twice: still once */
	emit(b, PC_EVENT_TOOL, false, false);
	pc_event_bus_detach(b, s);
	emit(b, PC_EVENT_TOOL, false, false);
	pc_event_t *ev[4];
	size_t n = take_all(s, ev, 4);
	cr_assert_eq(n, 1);
	cr_assert_eq(ev[0]->seq, 1);
	release_all(ev, n);
	pc_event_sub_release(s);
	pc_event_bus_release(b);
	ASSERT_NO_LEAKS();
}

/* ---- the drop policy ---- */

Test(events, drop_oldest_delta_keeps_the_rest)
{
	pc_event_bus_t *b = new_bus("run-slow", NULL, NULL);
	pc_event_sub_t *s = new_sub(4);
	cr_assert_eq(pc_event_bus_attach(b, s, false), 0);
	/* start, 10 deltas, tool start, 10 deltas, tool result, end */
	emit(b, PC_EVENT_LIFECYCLE, false, false);
	for (int i = 0; i < 10; i++)
		emit(b, PC_EVENT_ASSISTANT, true, false);
	emit(b, PC_EVENT_TOOL, false, false);
	for (int i = 0; i < 10; i++)
		emit(b, PC_EVENT_THINKING, true, false);
	emit(b, PC_EVENT_TOOL, false, false);
	emit(b, PC_EVENT_LIFECYCLE, false, true);
	uint64_t emitted = pc_event_bus_seq(b);
	cr_assert_eq(emitted, 24);

	pc_event_t *ev[32];
	size_t n = take_all(s, ev, 32);
	uint64_t dropped = pc_event_sub_dropped(s);
	cr_assert_eq(n + dropped, emitted, "taken %zu + dropped %" PRIu64 " != %" PRIu64, n, dropped, emitted);
	cr_assert_gt(dropped, 0);
	/* Every non-droppable event is there, in order, the terminal last:
	 * each full buffer gave up its oldest delta. */
	uint64_t want[] = {1, 12, 23, 24};
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		if (i)
			cr_assert_gt(ev[i]->seq, ev[i - 1]->seq);
		if (!ev[i]->droppable) {
			cr_assert_lt(k, 4);
			cr_assert_eq(ev[i]->seq, want[k]);
			k++;
		}
	}
	cr_assert_eq(k, 4);
	cr_assert(ev[n - 1]->terminal);
	release_all(ev, n);
	pc_event_sub_release(s);
	pc_event_bus_release(b);
	ASSERT_NO_LEAKS();
}

Test(events, full_of_non_droppable_grows)
{
	pc_event_bus_t *b = new_bus("run-tools", NULL, NULL);
	pc_event_sub_t *s = new_sub(2);
	cr_assert_eq(pc_event_bus_attach(b, s, true), 0);
	for (int i = 0; i < 40; i++)
		emit(b, PC_EVENT_TOOL, false, false);
	/* A delta arriving at a buffer full of non-droppable events is the
	 * oldest droppable one: it goes itself. */
	emit(b, PC_EVENT_ASSISTANT, true, false);
	emit(b, PC_EVENT_LIFECYCLE, false, true);
	pc_event_t *ev[64];
	size_t n = take_all(s, ev, 64);
	cr_assert_eq(n, 41);
	cr_assert_eq(pc_event_sub_dropped(s), 1);
	for (size_t i = 0; i < 40; i++)
		cr_assert_eq(ev[i]->seq, i + 1);
	cr_assert(ev[40]->terminal);
	cr_assert_eq(ev[40]->seq, 42);
	release_all(ev, n);
	pc_event_sub_release(s);
	pc_event_bus_release(b);
	ASSERT_NO_LEAKS();
}

/* ---- actor notification ---- */

enum { T_EVENTS = 100 };

typedef struct reader {
	pc_event_sub_t *sub; /* set before the first event */
	uint64_t tag;
	uint32_t drain;      /* take on notification (else only count) */
	uint32_t notes;
	uint32_t taken;
	uint32_t bad_tag;
	uint64_t last_seq;
	uint32_t out_of_order;
} reader_t;

static int reader_receive(pc_ctx_t *ctx, void *state, pc_msg_t *m)
{
	(void)ctx;
	reader_t *r = state;
	if (m->type != T_EVENTS)
		return 0;
	INC(r->notes);
	if (pc_msg_u64(m) != r->tag)
		INC(r->bad_tag);
	if (!LOAD(r->drain))
		return 0;
	pc_event_sub_t *s = __atomic_load_n(&r->sub, __ATOMIC_ACQUIRE);
	pc_event_t *ev[16];
	size_t n;
	while ((n = pc_event_sub_take(s, ev, 16)) > 0) {
		for (size_t i = 0; i < n; i++) {
			if (ev[i]->seq <= r->last_seq)
				INC(r->out_of_order);
			r->last_seq = ev[i]->seq;
			pc_event_release(ev[i]);
		}
		__atomic_add_fetch(&r->taken, (uint32_t)n, __ATOMIC_ACQ_REL);
	}
	return 0;
}

static const pc_behavior_t reader_behavior = {.name = "event_reader", .receive = reader_receive};

Test(events, notify_once_per_transition)
{
	pc_runtime_t *rt = start_rt(2);
	reader_t *st = calloc(1, sizeof(*st));
	st->tag = 0xabcdef;
	pc_actor_t *a = NULL;
	cr_assert_eq(pc_spawn(rt, &reader_behavior, st, &a), 0);
	pc_event_sub_config_t cfg = {.capacity = 64, .notify = a, .notify_type = T_EVENTS, .tag = 0xabcdef};
	pc_event_sub_t *s = NULL;
	cr_assert_eq(pc_event_sub_new(&cfg, &s), 0);
	__atomic_store_n(&st->sub, s, __ATOMIC_RELEASE);
	pc_event_bus_t *b = new_bus("run-n", NULL, NULL);
	cr_assert_eq(pc_event_bus_attach(b, s, false), 0);

	/* The reader does not take: ten events, one notification. */
	for (int i = 0; i < 10; i++)
		emit(b, PC_EVENT_ASSISTANT, true, false);
	quiesce(rt);
	cr_assert_eq(LOAD(st->notes), 1);
	/* Emptied by a take: the next event notifies again, once. */
	pc_event_t *ev[16];
	cr_assert_eq(pc_event_sub_take(s, ev, 4), 4);
	release_all(ev, 4);
	emit(b, PC_EVENT_ASSISTANT, true, false);
	quiesce(rt);
	cr_assert_eq(LOAD(st->notes), 1, "not emptied yet: no new notification");
	size_t n = take_all(s, ev, 16);
	cr_assert_eq(n, 7);
	release_all(ev, n);
	emit(b, PC_EVENT_ASSISTANT, true, false);
	emit(b, PC_EVENT_ASSISTANT, true, false);
	quiesce(rt);
	cr_assert_eq(LOAD(st->notes), 2);
	cr_assert_eq(LOAD(st->bad_tag), 0);

	/* Now the reader drains on each notification while we emit. */
	n = take_all(s, ev, 16);
	release_all(ev, n);
	st->last_seq = pc_event_bus_seq(b);
	STORE(st->drain, 1);
	uint32_t before = LOAD(st->notes);
	for (int i = 0; i < 2000; i++)
		emit(b, i % 10 ? PC_EVENT_ASSISTANT : PC_EVENT_TOOL, i % 10 != 0, false);
	emit(b, PC_EVENT_LIFECYCLE, false, true);
	AWAIT(LOAD(st->taken) + pc_event_sub_dropped(s) == 2001, 10000);
	quiesce(rt);
	uint32_t notes = LOAD(st->notes) - before;
	cr_assert_geq(notes, 1);
	cr_assert_leq(notes, 2001);
	cr_assert_eq(LOAD(st->out_of_order), 0);
	cr_assert_eq(pc_event_sub_take(s, ev, 16), 0);

	/* The subscription holds the actor: free it before the runtime. */
	pc_event_bus_release(b);
	pc_event_sub_release(s);
	pc_actor_release(a);
	pc_runtime_free(rt);
	free(st);
	ASSERT_NO_LEAKS();
}

/* ---- plain-thread waits ---- */

typedef struct delayed {
	pc_event_bus_t *bus;
	unsigned ms;
	int rc;
} delayed_t;

static void *emit_later(void *arg)
{
	delayed_t *d = arg;
	sleep_ms(d->ms);
	d->rc = pc_event_bus_emit(d->bus, PC_EVENT_LIFECYCLE, "{\"phase\":\"end\"}", 0, false, true, NULL);
	return NULL;
}

Test(events, wait_from_a_thread)
{
	pc_event_bus_t *b = new_bus("run-w", NULL, NULL);
	pc_event_sub_t *s = new_sub(0);
	cr_assert_eq(pc_event_bus_attach(b, s, true), 0);
	uint64_t t0 = now_ms();
	cr_assert_eq(pc_event_sub_wait(s, 30), PC_ETIMEDOUT);
	cr_assert_geq(now_ms() - t0, 29);

	delayed_t d = {b, 30, -1};
	pthread_t th;
	cr_assert_eq(pthread_create(&th, NULL, emit_later, &d), 0);
	cr_assert_eq(pc_event_sub_wait(s, 10000), 0);
	cr_assert_eq(pthread_join(th, NULL), 0);
	cr_assert_eq(d.rc, 0);
	pc_event_t *ev[2];
	cr_assert_eq(take_all(s, ev, 2), 1);
	cr_assert(ev[0]->terminal);
	release_all(ev, 1);
	/* Closed by the terminal event and empty: waiting for ever returns. */
	cr_assert_eq(pc_event_sub_wait(s, -1), PC_ESTOPPED);
	pc_event_sub_release(s);
	pc_event_bus_release(b);
	ASSERT_NO_LEAKS();
}

static void *close_later(void *arg)
{
	sleep_ms(20);
	pc_event_sub_close(arg);
	return NULL;
}

Test(events, close_wakes_a_waiter)
{
	pc_event_sub_t *s = new_sub(0);
	pthread_t th;
	cr_assert_eq(pthread_create(&th, NULL, close_later, s), 0);
	cr_assert_eq(pc_event_sub_wait(s, -1), PC_ESTOPPED);
	cr_assert_eq(pthread_join(th, NULL), 0);
	pc_event_sub_release(s);
	ASSERT_NO_LEAKS();
}

/* ---- hubs ---- */

Test(events, hub_sees_two_runs)
{
	pc_event_hub_t *h = NULL;
	cr_assert_eq(pc_event_hub_new("main", &h), 0);
	pc_event_sub_t *hs = new_sub(0), *both = new_sub(0);
	cr_assert_eq(pc_event_hub_attach(h, hs), 0);
	cr_assert_eq(pc_event_hub_attach(h, hs), 0); /* idempotent */
	cr_assert_eq(pc_event_hub_attach(h, both), 0);
	cr_assert_eq(pc_event_hub_subscribers(h), 2);
	pc_event_bus_t *b1 = new_bus("run-a", "main", h), *b2 = new_bus("run-b", "main", h);
	/* Attached to the bus and the hub: each event once. */
	cr_assert_eq(pc_event_bus_attach(b1, both, true), 0);
	emit(b1, PC_EVENT_LIFECYCLE, false, false);
	emit(b2, PC_EVENT_LIFECYCLE, false, false);
	emit(b1, PC_EVENT_ASSISTANT, true, false);
	emit(b2, PC_EVENT_ASSISTANT, true, false);
	emit(b1, PC_EVENT_LIFECYCLE, false, true);
	emit(b2, PC_EVENT_LIFECYCLE, false, true);

	pc_event_t *ev[16];
	size_t n = take_all(hs, ev, 16);
	cr_assert_eq(n, 6);
	uint64_t last_a = 0, last_b = 0;
	int terminals = 0;
	for (size_t i = 0; i < n; i++) {
		uint64_t *last = strcmp(ev[i]->run_id, "run-a") == 0 ? &last_a : &last_b;
		cr_assert_gt(ev[i]->seq, *last);
		*last = ev[i]->seq;
		cr_assert_str_eq(ev[i]->session_key, "main");
		terminals += ev[i]->terminal;
	}
	cr_assert_eq(last_a, 3);
	cr_assert_eq(last_b, 3);
	cr_assert_eq(terminals, 2);
	release_all(ev, n);
	/* Hub subscriptions are not closed by a run's end... */
	cr_assert_not(pc_event_sub_closed(hs));
	/* ...but `both` asked run-a to close it; run-b's events before that
	 * were buffered, its terminal event came after the close. */
	cr_assert(pc_event_sub_closed(both));
	n = take_all(both, ev, 16);
	cr_assert_eq(n, 5);
	release_all(ev, n);

	pc_event_hub_detach(h, hs);
	cr_assert_eq(pc_event_hub_subscribers(h), 1);
	pc_event_bus_release(b1);
	pc_event_bus_release(b2);
	pc_event_hub_release(h);
	pc_event_sub_release(hs);
	pc_event_sub_release(both);
	ASSERT_NO_LEAKS();
}

/* ---- the wire form ---- */

Test(events, to_json_shape)
{
	pc_event_bus_t *b = new_bus("run-j", "agent:main", NULL);
	pc_event_sub_t *s = new_sub(0);
	cr_assert_eq(pc_event_bus_attach(b, s, false), 0);
	const char *data = "{\"text\":\"h\\u00e9\\\"llo\",\"delta\":\"lo\"}";
	cr_assert_eq(pc_event_bus_emit(b, PC_EVENT_ASSISTANT, data, strlen(data), true, false, NULL), 0);
	pc_event_t *ev[1];
	cr_assert_eq(take_all(s, ev, 1), 1);
	char *text = NULL;
	size_t len = 0;
	cr_assert_eq(pc_event_to_json(ev[0], &text, &len), 0);
	cr_assert_eq(len, strlen(text));
	cJSON *j = cJSON_Parse(text);
	cr_assert_not_null(j, "not JSON: %s", text);
	cr_assert_str_eq(cJSON_GetObjectItem(j, "runId")->valuestring, "run-j");
	cr_assert_eq(cJSON_GetObjectItem(j, "seq")->valuedouble, 1.0);
	cr_assert_str_eq(cJSON_GetObjectItem(j, "stream")->valuestring, "assistant");
	cJSON *ts = cJSON_GetObjectItem(j, "ts");
	cr_assert(cJSON_IsNumber(ts));
	cr_assert_eq((int64_t)ts->valuedouble, ev[0]->ts_ms);
	cJSON *d = cJSON_GetObjectItem(j, "data");
	cr_assert(cJSON_IsObject(d));
	cr_assert_str_eq(cJSON_GetObjectItem(d, "text")->valuestring, "h\xc3\xa9\"llo");
	cr_assert_str_eq(cJSON_GetObjectItem(d, "delta")->valuestring, "lo");
	cr_assert_str_eq(cJSON_GetObjectItem(j, "sessionKey")->valuestring, "agent:main");
	cJSON_Delete(j);
	free(text);
	release_all(ev, 1);
	pc_event_sub_release(s);
	pc_event_bus_release(b);

	/* No session: no sessionKey; no data: {}. */
	b = new_bus("run-k", NULL, NULL);
	s = new_sub(0);
	cr_assert_eq(pc_event_bus_attach(b, s, false), 0);
	emit(b, PC_EVENT_LIFECYCLE, false, true);
	cr_assert_eq(take_all(s, ev, 1), 1);
	cr_assert_eq(pc_event_to_json(ev[0], &text, NULL), 0);
	j = cJSON_Parse(text);
	cr_assert_not_null(j);
	cr_assert_null(cJSON_GetObjectItem(j, "sessionKey"));
	cr_assert_str_eq(cJSON_GetObjectItem(j, "stream")->valuestring, "lifecycle");
	cr_assert(cJSON_IsObject(cJSON_GetObjectItem(j, "data")));
	cr_assert_null(cJSON_GetObjectItem(j, "data")->child);
	cJSON_Delete(j);
	free(text);
	cr_assert_eq(pc_event_to_json(NULL, &text, NULL), PC_EINVAL);
	release_all(ev, 1);
	pc_event_sub_release(s);
	pc_event_bus_release(b);
	ASSERT_NO_LEAKS();
}

/* ---- stress ---- */

#define S_MAX_BUSES 16
#define S_MAX_READERS 8

typedef struct stress {
	pc_event_bus_t *buses[S_MAX_BUSES];
	size_t nbuses;
	uint64_t emitted[S_MAX_BUSES];      /* successful emits, terminal included */
	uint64_t non_droppable[S_MAX_BUSES]; /* of which non-droppable */
	uint32_t per_producer;
	uint64_t seed;
} stress_t;

typedef struct producer {
	stress_t *st;
	uint64_t rng;
} producer_t;

static void *produce(void *arg)
{
	producer_t *p = arg;
	stress_t *st = p->st;
	for (uint32_t i = 0; i < st->per_producer; i++) {
		size_t b = rnd_below(&p->rng, (uint32_t)st->nbuses);
		bool drop = rnd_below(&p->rng, 10) < 8;
		char data[64];
		snprintf(data, sizeof(data), "{\"i\":%u}", i);
		int rc = pc_event_bus_emit(st->buses[b], drop ? PC_EVENT_ASSISTANT : PC_EVENT_TOOL, data, 0, drop,
					   false, NULL);
		CHECK(rc == 0, "emit: %d", rc);
		if (rc == 0) {
			add(&st->emitted[b], 1);
			if (!drop)
				add(&st->non_droppable[b], 1);
		}
		if (rnd_below(&p->rng, 64) == 0)
			sched_yield();
	}
	return NULL;
}

typedef struct consumer {
	stress_t *st;
	pc_event_sub_t *sub;
	uint64_t rng;
	uint64_t taken;
	uint64_t last_seq[S_MAX_BUSES];
	uint64_t non_droppable[S_MAX_BUSES];
	bool terminal[S_MAX_BUSES];
} consumer_t;

static size_t bus_index(stress_t *st, const char *run_id)
{
	for (size_t i = 0; i < st->nbuses; i++)
		if (strcmp(pc_event_bus_run_id(st->buses[i]), run_id) == 0)
			return i;
	return SIZE_MAX;
}

static void *consume(void *arg)
{
	consumer_t *c = arg;
	stress_t *st = c->st;
	size_t terminals = 0;
	uint64_t until = now_ms() + 60000;
	while (terminals < st->nbuses && now_ms() < until) {
		int rc = pc_event_sub_wait(c->sub, 50);
		CHECK(rc == 0 || rc == PC_ETIMEDOUT, "wait: %d", rc);
		pc_event_t *ev[8];
		size_t n = pc_event_sub_take(c->sub, ev, 1 + rnd_below(&c->rng, 8));
		for (size_t i = 0; i < n; i++) {
			size_t b = bus_index(st, ev[i]->run_id);
			CHECK(b < st->nbuses, "unknown run %s", ev[i]->run_id);
			if (b < st->nbuses) {
				CHECK(ev[i]->seq > c->last_seq[b], "run %zu: seq %" PRIu64 " after %" PRIu64, b,
				      ev[i]->seq, c->last_seq[b]);
				CHECK(!c->terminal[b], "run %zu: event after its terminal", b);
				c->last_seq[b] = ev[i]->seq;
				if (!ev[i]->droppable)
					c->non_droppable[b]++;
				if (ev[i]->terminal) {
					c->terminal[b] = true;
					terminals++;
				}
			}
			pc_event_release(ev[i]);
		}
		c->taken += n;
		/* A slow reader now and then, so buffers fill and drop. */
		if (rnd_below(&c->rng, 16) == 0)
			sleep_ms(1);
	}
	CHECK(terminals == st->nbuses, "saw %zu of %zu terminal events", terminals, st->nbuses);
	return NULL;
}

Test(events_stress, producers_hubs_readers, .timeout = 120)
{
	reset_failures();
	uint64_t rng = test_seed();
	stress_t st = {.seed = rng};
	st.nbuses = 2 + rnd_below(&rng, S_MAX_BUSES - 1);
	size_t nproducers = 2 + rnd_below(&rng, 4);
	size_t nhub_readers = 1 + rnd_below(&rng, S_MAX_READERS - 2);
	st.per_producer = 5000 + rnd_below(&rng, 15000);
	cr_log_info("buses=%zu producers=%zu readers=%zu per_producer=%u", st.nbuses, nproducers, nhub_readers + 1,
		    st.per_producer);

	pc_event_hub_t *h = NULL;
	cr_assert_eq(pc_event_hub_new("stress", &h), 0);
	for (size_t i = 0; i < st.nbuses; i++) {
		char id[32];
		snprintf(id, sizeof(id), "run-%zu", i);
		st.buses[i] = new_bus(id, "stress", h);
	}
	/* Readers: some on the hub, one attached directly to every bus. */
	size_t nreaders = nhub_readers + 1;
	consumer_t cons[S_MAX_READERS];
	memset(cons, 0, sizeof(cons));
	for (size_t r = 0; r < nreaders; r++) {
		cons[r].st = &st;
		cons[r].rng = xs(&rng) | 1;
		cons[r].sub = new_sub(4 + rnd_below(&rng, 60));
		if (r < nhub_readers) {
			cr_assert_eq(pc_event_hub_attach(h, cons[r].sub), 0);
		} else {
			for (size_t i = 0; i < st.nbuses; i++)
				cr_assert_eq(pc_event_bus_attach(st.buses[i], cons[r].sub, false), 0);
		}
	}
	pthread_t rt[S_MAX_READERS], pt[8];
	for (size_t r = 0; r < nreaders; r++)
		cr_assert_eq(pthread_create(&rt[r], NULL, consume, &cons[r]), 0);
	producer_t prods[8];
	for (size_t p = 0; p < nproducers; p++) {
		prods[p] = (producer_t){&st, xs(&rng) | 1};
		cr_assert_eq(pthread_create(&pt[p], NULL, produce, &prods[p]), 0);
	}
	for (size_t p = 0; p < nproducers; p++)
		cr_assert_eq(pthread_join(pt[p], NULL), 0);
	for (size_t i = 0; i < st.nbuses; i++) {
		cr_assert_eq(pc_event_bus_emit(st.buses[i], PC_EVENT_LIFECYCLE, NULL, 0, false, true, NULL), 0);
		st.emitted[i]++;
		st.non_droppable[i]++;
		cr_assert_eq(pc_event_bus_seq(st.buses[i]), st.emitted[i]);
	}
	for (size_t r = 0; r < nreaders; r++)
		cr_assert_eq(pthread_join(rt[r], NULL), 0);
	assert_no_failures();

	uint64_t total = 0;
	for (size_t i = 0; i < st.nbuses; i++)
		total += st.emitted[i];
	cr_assert_eq(total, (uint64_t)nproducers * st.per_producer + st.nbuses);
	for (size_t r = 0; r < nreaders; r++) {
		consumer_t *c = &cons[r];
		uint64_t dropped = pc_event_sub_dropped(c->sub);
		cr_assert_eq(c->taken + dropped, total,
			     "reader %zu: taken %" PRIu64 " + dropped %" PRIu64 " != emitted %" PRIu64
			     " (PINCER_TEST_SEED=0x%" PRIx64 ")",
			     r, c->taken, dropped, total, st.seed);
		for (size_t i = 0; i < st.nbuses; i++) {
			cr_assert_eq(c->non_droppable[i], st.non_droppable[i],
				     "reader %zu run %zu lost non-droppable events (PINCER_TEST_SEED=0x%" PRIx64 ")",
				     r, i, st.seed);
			cr_assert_eq(c->last_seq[i], st.emitted[i]);
		}
	}
	uint64_t dropped = 0;
	for (size_t r = 0; r < nreaders; r++) {
		dropped += pc_event_sub_dropped(cons[r].sub);
		pc_event_sub_release(cons[r].sub);
	}
	cr_log_info("emitted=%" PRIu64 " dropped (all readers)=%" PRIu64, total, dropped);
	for (size_t i = 0; i < st.nbuses; i++)
		pc_event_bus_release(st.buses[i]);
	pc_event_hub_release(h);
	ASSERT_NO_LEAKS();
}

/* ---- streamed text ---- */

/* A delta event's data is its delta alone; its view is the message so far,
 * shared and unchanged while the text grows past its block; a new message
 * starts over. */
Test(events, deltas_share_the_run_text)
{
	pc_event_hub_t *h = NULL;
	cr_assert_eq(pc_event_hub_new("s", &h), 0);
	pc_event_sub_t *s = new_sub(4096);
	cr_assert_eq(pc_event_hub_attach(h, s), 0);
	pc_event_bus_t *b = new_bus("r1", "s", h);
	cr_assert_eq(pc_event_bus_emit_delta(b, PC_EVENT_ASSISTANT, "he\"llo", 0, NULL), 0);
	for (int i = 0; i < 200; i++)
		cr_assert_eq(pc_event_bus_emit_delta(b, PC_EVENT_ASSISTANT, " more text", 0, NULL), 0);
	pc_event_bus_text_reset(b, PC_EVENT_ASSISTANT);
	cr_assert_eq(pc_event_bus_emit_delta(b, PC_EVENT_ASSISTANT, "next", 0, NULL), 0);
	cr_assert_eq(pc_event_bus_emit_delta(b, PC_EVENT_ASSISTANT, "", 0, NULL), PC_EINVAL);
	cr_assert_eq(pc_event_bus_emit_delta(b, PC_EVENT_TOOL, "x", 0, NULL), PC_EINVAL);
	pc_event_t *ev[256];
	size_t n = take_all(s, ev, 256);
	cr_assert_eq(n, 202);
	cr_assert_str_eq(ev[0]->data, "{\"delta\":\"he\\\"llo\"}");
	cr_assert_eq(ev[0]->text_len, 6);
	cr_assert(!memcmp(ev[0]->text, "he\"llo", 6), "the first view changed as the text grew");
	cr_assert_str_eq(ev[200]->data, "{\"delta\":\" more text\"}");
	cr_assert_eq(ev[200]->text_len, 6 + 200 * 10);
	cr_assert_eq(ev[200]->delta_len, 10);
	cr_assert_eq(ev[200]->message, 0);
	cr_assert_eq(ev[201]->message, 1);
	cr_assert_eq(ev[201]->text_len, 4);
	cr_assert(!memcmp(ev[201]->text, "next", 4));
	/* the wire form, deltas merged from an offset */
	char *j = NULL;
	cr_assert_eq(pc_event_delta_to_json(ev[200], 6, &j, NULL), 0);
	cJSON *o = cJSON_Parse(j);
	const cJSON *d = cJSON_GetObjectItem(o, "data");
	cr_assert_eq(strlen(cJSON_GetObjectItem(d, "text")->valuestring), 2006);
	cr_assert_eq(strlen(cJSON_GetObjectItem(d, "delta")->valuestring), 2000);
	cr_assert_str_eq(cJSON_GetObjectItem(o, "stream")->valuestring, "assistant");
	cr_assert_eq(cJSON_GetObjectItem(o, "seq")->valuedouble, 201);
	cJSON_Delete(o);
	free(j);
	cr_assert_eq(pc_event_delta_to_json(ev[201], 5, &j, NULL), PC_EINVAL);
	release_all(ev, n);
	pc_event_bus_release(b);
	pc_event_sub_release(s);
	pc_event_hub_release(h);
}

/* A subscriber attached to the bus of a running run gets the text so far
 * in the data of its first delta; later ones carry the delta alone. The
 * text is kept with nobody listening. */
Test(events, a_late_bus_subscriber_catches_up)
{
	pc_event_bus_t *b = new_bus("r1", NULL, NULL);
	cr_assert_eq(pc_event_bus_emit_delta(b, PC_EVENT_ASSISTANT, "Hello", 0, NULL), 0);
	pc_event_sub_t *s = new_sub(16);
	cr_assert_eq(pc_event_bus_attach(b, s, true), 0);
	cr_assert_eq(pc_event_bus_emit_delta(b, PC_EVENT_ASSISTANT, " world", 0, NULL), 0);
	cr_assert_eq(pc_event_bus_emit_delta(b, PC_EVENT_ASSISTANT, "!", 0, NULL), 0);
	pc_event_t *ev[4];
	cr_assert_eq(take_all(s, ev, 4), 2);
	cr_assert_str_eq(ev[0]->data, "{\"text\":\"Hello world\",\"delta\":\" world\"}");
	cr_assert_eq(ev[0]->seq, 2);
	cr_assert_eq(ev[0]->text_len, 11);
	cr_assert_str_eq(ev[1]->data, "{\"delta\":\"!\"}");
	release_all(ev, 2);
	pc_event_bus_release(b);
	pc_event_sub_release(s);
}
