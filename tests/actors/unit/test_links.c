/*
 * Links and monitors: exit propagation along links (and its absence for
 * normal exits), trap_exit, linking to the dead, unlink; DOWN messages,
 * demonitor, and the bookkeeping (references between watcher and target)
 * that must neither leak nor keep a stopped actor alive.
 */
#include <criterion/criterion.h>

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "actors/actor_internal.h"
#include "pincer.h"
#include "test_util.h"

/* ---- helpers ----------------------------------------------------------- */


/* ---- the probe actor --------------------------------------------------- */

enum {
	T_INC = 1,
	T_EXIT,          /* pc_exit(value) */
	T_FAIL,          /* return value */
	T_LINK,          /* pc_link(value) */
	T_UNLINK,        /* pc_unlink(value) */
	T_MONITOR,       /* pc_monitor(value), ref kept */
	T_DEMONITOR,     /* pc_demonitor(kept ref) */
	T_TRAP,          /* pc_trap_exit(value) */
	T_AWAIT_EXIT,    /* block until the runtime counted `want_exited` exits */
	T_UNLINK_LATE,   /* T_AWAIT_EXIT, then pc_unlink(value) */
	T_DEMONITOR_LATE, /* T_AWAIT_EXIT, then pc_demonitor(kept ref) */
	T_GATE,          /* block until `gate` opens */
};

#define MAX_DOWNS 8

typedef struct probe {
	int received;
	int stops;
	int reason;
	int rc;        /* result of the last link/unlink/monitor/demonitor */
	uint64_t ref;  /* the last monitor ref */
	int exits;     /* PC_MSG_EXIT received */
	pc_down_t exit;
	int downs;
	pc_down_t down[MAX_DOWNS];
} probe_t;

typedef struct pstate {
	probe_t *p;
	char *junk;
} pstate_t;

static uint64_t want_exited;
static int gate;

static void await_exits(pc_ctx_t *ctx)
{
	uint64_t until = now_ms() + 10000;
	while (stats(pc_ctx_runtime(ctx)).exited < LOAD(want_exited) && now_ms() < until)
		sleep_ms(1);
}

static int probe_receive(pc_ctx_t *ctx, void *state, pc_msg_t *m)
{
	probe_t *p = ((pstate_t *)state)->p;
	pc_actor_t *other = (pc_actor_t *)(uintptr_t)(m->size == 8 ? pc_msg_u64(m) : 0);
	switch (m->type) {
	case T_INC:
		INC(p->received);
		return 0;
	case T_EXIT:
		pc_exit(ctx, (int)pc_msg_u64(m));
		return 0;
	case T_FAIL:
		return (int)(int64_t)pc_msg_u64(m);
	case T_LINK:
		STORE(p->rc, pc_link(ctx, other));
		return 0;
	case T_UNLINK:
		STORE(p->rc, pc_unlink(ctx, other));
		return 0;
	case T_MONITOR: {
		uint64_t ref = 0;
		int rc = pc_monitor(ctx, other, &ref);
		STORE(p->ref, ref);
		STORE(p->rc, rc);
		return 0;
	}
	case T_DEMONITOR:
		STORE(p->rc, pc_demonitor(ctx, LOAD(p->ref)));
		return 0;
	case T_TRAP:
		pc_trap_exit(ctx, pc_msg_u64(m) != 0);
		return 0;
	case T_AWAIT_EXIT:
		await_exits(ctx);
		return 0;
	case T_UNLINK_LATE:
		await_exits(ctx);
		STORE(p->rc, pc_unlink(ctx, other));
		return 0;
	case T_DEMONITOR_LATE:
		await_exits(ctx);
		STORE(p->rc, pc_demonitor(ctx, LOAD(p->ref)));
		return 0;
	case T_GATE: {
		uint64_t until = now_ms() + 10000;
		while (!LOAD(gate) && now_ms() < until)
			sleep_ms(1);
		return 0;
	}
	case PC_MSG_EXIT:
		memcpy(&p->exit, pc_msg_cdata(m), sizeof(p->exit));
		INC(p->exits);
		return 0;
	case PC_MSG_DOWN: {
		int i = LOAD(p->downs);
		if (i < MAX_DOWNS)
			memcpy(&p->down[i], pc_msg_cdata(m), sizeof(pc_down_t));
		INC(p->downs);
		return 0;
	}
	default:
		return 0;
	}
}

static void probe_stop(pc_ctx_t *ctx, void *state, int reason)
{
	(void)ctx;
	pstate_t *s = state;
	STORE(s->p->reason, reason);
	INC(s->p->stops);
	free(s->junk);
	free(s);
}

static const pc_behavior_t probe_behavior = {"probe", probe_receive, probe_stop};

static pc_actor_t *spawn_probe(pc_runtime_t *rt, probe_t *p)
{
	memset(p, 0, sizeof(*p));
	STORE(p->reason, -1);
	STORE(p->rc, 1);
	pstate_t *s = malloc(sizeof(*s));
	s->p = p;
	s->junk = malloc(16);
	pc_actor_t *a = NULL;
	cr_assert_eq(pc_spawn(rt, &probe_behavior, s, &a), 0);
	return a;
}

static void send(pc_actor_t *a, uint32_t type, uint64_t v)
{
	cr_assert_eq(pc_send_u64(a, type, v), 0);
}

static void send_ptr(pc_actor_t *a, uint32_t type, pc_actor_t *p)
{
	send(a, type, (uint64_t)(uintptr_t)p);
}

/* Makes `a` do `type` with `other` and waits for its result. */
static int do_with(pc_runtime_t *rt, pc_actor_t *a, probe_t *p, uint32_t type, pc_actor_t *other)
{
	STORE(p->rc, 1);
	send_ptr(a, type, other);
	AWAIT(LOAD(p->rc) != 1, 5000);
	quiesce(rt);
	return LOAD(p->rc);
}

/* ---- links ------------------------------------------------------------- */

enum { CHAIN = 8 };

static void make_chain(pc_runtime_t *rt, pc_actor_t **a, probe_t *p)
{
	for (int i = 0; i < CHAIN; i++)
		a[i] = spawn_probe(rt, &p[i]);
	for (int i = 0; i + 1 < CHAIN; i++)
		cr_assert_eq(do_with(rt, a[i], &p[i], T_LINK, a[i + 1]), 0);
}

static void check_chain_failure(int failing)
{
	pc_runtime_t *rt = start_rt(2);
	pc_actor_t *a[CHAIN];
	probe_t p[CHAIN];
	make_chain(rt, a, p);
	send(a[failing], T_FAIL, (uint64_t)(int64_t)-5);
	for (int i = 0; i < CHAIN; i++)
		AWAIT(LOAD(p[i].stops) == 1, 5000);
	quiesce(rt);
	for (int i = 0; i < CHAIN; i++) {
		cr_assert_eq(LOAD(p[i].stops), 1);
		cr_assert_eq(LOAD(p[i].reason), i == failing ? PC_EXIT_ERROR : PC_EXIT_LINKED, "actor %d", i);
		pc_actor_release(a[i]);
	}
	/* The links' mutual references are gone with them. */
	quiesce(rt);
	cr_assert_eq(live_count(rt), 0);
	FREE_RUNTIME_CHECKED(rt);
}

Test(links, abnormal_exit_propagates_along_chain)
{
	check_chain_failure(0);
}

Test(links, abnormal_exit_propagates_both_ways)
{
	check_chain_failure(CHAIN / 2);
}

Test(links, killed_and_shutdown_propagate)
{
	int reasons[] = {PC_EXIT_KILLED, PC_EXIT_SHUTDOWN, PC_EXIT_LINKED};
	for (int k = 0; k < 3; k++) {
		pc_runtime_t *rt = start_rt(2);
		probe_t p, q;
		pc_actor_t *a = spawn_probe(rt, &p), *b = spawn_probe(rt, &q);
		cr_assert_eq(do_with(rt, a, &p, T_LINK, b), 0);
		cr_assert_eq(pc_actor_stop(b, reasons[k]), 0);
		AWAIT(LOAD(p.stops) == 1, 5000);
		cr_assert_eq(LOAD(q.reason), reasons[k]);
		cr_assert_eq(LOAD(p.reason), PC_EXIT_LINKED);
		pc_actor_release(a);
		pc_actor_release(b);
		FREE_RUNTIME_CHECKED(rt);
	}
}

Test(links, normal_exit_does_not_propagate)
{
	pc_runtime_t *rt = start_rt(2);
	pc_actor_t *a[CHAIN];
	probe_t p[CHAIN];
	make_chain(rt, a, p);
	send(a[0], T_EXIT, PC_EXIT_NORMAL);
	AWAIT(LOAD(p[0].stops) == 1, 5000);
	quiesce(rt);
	for (int i = 1; i < CHAIN; i++) {
		cr_assert_eq(LOAD(p[i].stops), 0, "actor %d stopped", i);
		send(a[i], T_INC, 0);
	}
	quiesce(rt);
	for (int i = 1; i < CHAIN; i++)
		cr_assert_eq(LOAD(p[i].received), 1);
	/* a[1] dropped its link (and its reference) to the stopped a[0]. */
	pc_actor_release(a[0]);
	quiesce(rt);
	cr_assert_eq(live_count(rt), CHAIN - 1);
	/* The rest of the chain is still linked. */
	send(a[CHAIN - 1], T_FAIL, (uint64_t)(int64_t)-1);
	for (int i = 1; i < CHAIN; i++)
		AWAIT(LOAD(p[i].stops) == 1, 5000);
	for (int i = 1; i < CHAIN - 1; i++)
		cr_assert_eq(LOAD(p[i].reason), PC_EXIT_LINKED);
	for (int i = 1; i < CHAIN; i++)
		pc_actor_release(a[i]);
	quiesce(rt);
	cr_assert_eq(live_count(rt), 0);
	FREE_RUNTIME_CHECKED(rt);
}

Test(links, trap_exit_turns_exit_into_message)
{
	pc_runtime_t *rt = start_rt(2);
	probe_t p, q, r;
	pc_actor_t *a = spawn_probe(rt, &p), *b = spawn_probe(rt, &q), *c = spawn_probe(rt, &r);
	send(a, T_TRAP, 1);
	cr_assert_eq(do_with(rt, a, &p, T_LINK, b), 0);
	cr_assert_eq(do_with(rt, a, &p, T_LINK, c), 0);
	send(b, T_FAIL, (uint64_t)(int64_t)-9);
	AWAIT(LOAD(p.exits) == 1, 5000);
	cr_assert_eq(p.exit.actor_id, pc_actor_id(b));
	cr_assert_eq(p.exit.reason, PC_EXIT_ERROR);
	cr_assert_eq(p.exit.code, -9);
	cr_assert_eq(p.exit.ref, 0);
	/* A normal exit is reported too, with its reason. */
	send(c, T_EXIT, PC_EXIT_NORMAL);
	AWAIT(LOAD(p.exits) == 2, 5000);
	cr_assert_eq(p.exit.actor_id, pc_actor_id(c));
	cr_assert_eq(p.exit.reason, PC_EXIT_NORMAL);
	cr_assert_eq(p.exit.code, 0);
	quiesce(rt);
	cr_assert_eq(LOAD(p.stops), 0);
	send(a, T_INC, 0);
	AWAIT(LOAD(p.received) == 1, 5000);
	pc_actor_release(a);
	pc_actor_release(b);
	pc_actor_release(c);
	FREE_RUNTIME_CHECKED(rt);
	cr_assert_eq(p.reason, PC_EXIT_SHUTDOWN);
}

Test(links, trap_exit_off_again)
{
	pc_runtime_t *rt = start_rt(2);
	probe_t p, q;
	pc_actor_t *a = spawn_probe(rt, &p), *b = spawn_probe(rt, &q);
	send(a, T_TRAP, 1);
	send(a, T_TRAP, 0);
	cr_assert_eq(do_with(rt, a, &p, T_LINK, b), 0);
	send(b, T_FAIL, (uint64_t)(int64_t)-1);
	AWAIT(LOAD(p.stops) == 1, 5000);
	cr_assert_eq(LOAD(p.reason), PC_EXIT_LINKED);
	cr_assert_eq(LOAD(p.exits), 0);
	pc_actor_release(a);
	pc_actor_release(b);
	FREE_RUNTIME_CHECKED(rt);
}

Test(links, link_to_stopped_actor_acts_at_once)
{
	pc_runtime_t *rt = start_rt(2);
	probe_t p, q, r, t, dead_ok, dead_bad;
	pc_actor_t *ok = spawn_probe(rt, &dead_ok), *bad = spawn_probe(rt, &dead_bad);
	send(ok, T_EXIT, PC_EXIT_NORMAL);
	send(bad, T_FAIL, (uint64_t)(int64_t)-3);
	AWAIT(pc_actor_stopped(ok) && pc_actor_stopped(bad), 5000);
	quiesce(rt);
	pc_actor_t *a = spawn_probe(rt, &p), *b = spawn_probe(rt, &q);
	pc_actor_t *c = spawn_probe(rt, &r), *d = spawn_probe(rt, &t);
	/* To one that failed: stops at once. */
	cr_assert_eq(do_with(rt, a, &p, T_LINK, bad), 0);
	AWAIT(LOAD(p.stops) == 1, 5000);
	cr_assert_eq(LOAD(p.reason), PC_EXIT_LINKED);
	/* To one that stopped normally: nothing happens. */
	cr_assert_eq(do_with(rt, b, &q, T_LINK, ok), 0);
	quiesce(rt);
	cr_assert_eq(LOAD(q.stops), 0);
	/* Trapping: the EXIT message arrives at once, with the reason and code. */
	send(c, T_TRAP, 1);
	cr_assert_eq(do_with(rt, c, &r, T_LINK, bad), 0);
	AWAIT(LOAD(r.exits) == 1, 5000);
	cr_assert_eq(r.exit.actor_id, pc_actor_id(bad));
	cr_assert_eq(r.exit.reason, PC_EXIT_ERROR);
	cr_assert_eq(r.exit.code, -3);
	/* Linking twice to the dead before the signal is handled acts once;
	 * linking again afterwards acts again (it is a new link). */
	send(d, T_TRAP, 1);
	STORE(gate, 0);
	send(d, T_GATE, 0); /* both links queue up behind this */
	send_ptr(d, T_LINK, bad);
	send_ptr(d, T_LINK, bad);
	STORE(gate, 1);
	quiesce(rt);
	cr_assert_eq(LOAD(t.exits), 1);
	cr_assert_eq(do_with(rt, d, &t, T_LINK, bad), 0);
	AWAIT(LOAD(t.exits) == 2, 5000);
	cr_assert_eq(LOAD(r.stops) + LOAD(t.stops), 0);
	pc_actor_t *all[] = {ok, bad, a, b, c, d};
	for (int i = 0; i < 6; i++)
		pc_actor_release(all[i]);
	quiesce(rt);
	cr_assert_eq(live_count(rt), 3, "the stopped ones are reclaimed, links included");
	FREE_RUNTIME_CHECKED(rt);
}

Test(links, bad_arguments)
{
	pc_runtime_t *rt = start_rt(1);
	probe_t p;
	pc_actor_t *a = spawn_probe(rt, &p);
	cr_assert_eq(do_with(rt, a, &p, T_LINK, a), PC_EINVAL);
	cr_assert_eq(do_with(rt, a, &p, T_LINK, NULL), PC_EINVAL);
	cr_assert_eq(do_with(rt, a, &p, T_MONITOR, a), PC_EINVAL);
	cr_assert_eq(do_with(rt, a, &p, T_MONITOR, NULL), PC_EINVAL);
	pc_actor_release(a);
	FREE_RUNTIME_CHECKED(rt);
}

Test(links, double_link_breaks_once)
{
	pc_runtime_t *rt = start_rt(2);
	probe_t p, q;
	pc_actor_t *a = spawn_probe(rt, &p), *b = spawn_probe(rt, &q);
	send(a, T_TRAP, 1);
	cr_assert_eq(do_with(rt, a, &p, T_LINK, b), 0);
	cr_assert_eq(do_with(rt, a, &p, T_LINK, b), 0);
	cr_assert_eq(do_with(rt, b, &q, T_LINK, a), 0);
	send(b, T_FAIL, (uint64_t)(int64_t)-1);
	AWAIT(LOAD(q.stops) == 1, 5000);
	quiesce(rt);
	cr_assert_eq(LOAD(p.exits), 1);
	pc_actor_release(a);
	pc_actor_release(b);
	quiesce(rt);
	cr_assert_eq(live_count(rt), 1);
	FREE_RUNTIME_CHECKED(rt);
}

Test(links, unlink_stops_propagation)
{
	pc_runtime_t *rt = start_rt(2);
	probe_t p, q, r;
	pc_actor_t *a = spawn_probe(rt, &p), *b = spawn_probe(rt, &q), *c = spawn_probe(rt, &r);
	cr_assert_eq(do_with(rt, a, &p, T_LINK, b), 0);
	cr_assert_eq(do_with(rt, c, &r, T_LINK, b), 0);
	cr_assert_eq(do_with(rt, a, &p, T_UNLINK, b), 0);
	cr_assert_eq(do_with(rt, a, &p, T_UNLINK, b), PC_ENOTFOUND);
	/* Unlinking from the other side works as well. */
	cr_assert_eq(do_with(rt, b, &q, T_UNLINK, c), 0);
	send(b, T_FAIL, (uint64_t)(int64_t)-1);
	AWAIT(LOAD(q.stops) == 1, 5000);
	quiesce(rt);
	cr_assert_eq(LOAD(p.stops), 0);
	cr_assert_eq(LOAD(r.stops), 0);
	pc_actor_release(a);
	pc_actor_release(b);
	pc_actor_release(c);
	quiesce(rt);
	cr_assert_eq(live_count(rt), 2);
	FREE_RUNTIME_CHECKED(rt);
}

/* The partner has already stopped and its exit signal is in our mailbox
 * when we unlink: once pc_unlink returned, the link must have no effect. */
Test(links, unlink_after_partner_died_but_before_signal_handled)
{
	pc_runtime_t *rt = start_rt(2);
	for (int trap = 0; trap < 2; trap++) {
		probe_t p, q;
		pc_actor_t *a = spawn_probe(rt, &p), *b = spawn_probe(rt, &q);
		if (trap)
			send(a, T_TRAP, 1);
		cr_assert_eq(do_with(rt, a, &p, T_LINK, b), 0);
		STORE(want_exited, stats(rt).exited + 1);
		STORE(p.rc, 1);
		send_ptr(a, T_UNLINK_LATE, b); /* blocks until b's exit is out */
		send(b, T_FAIL, (uint64_t)(int64_t)-1);
		AWAIT(LOAD(p.rc) != 1, 5000);
		quiesce(rt);
		cr_assert_eq(LOAD(q.stops), 1);
		cr_assert_eq(LOAD(p.rc), 0);
		cr_assert_eq(LOAD(p.stops), 0, "an unlinked actor died of the link");
		if (!trap)
			cr_assert_eq(LOAD(p.exits), 0);
		send(a, T_INC, 0);
		AWAIT(LOAD(p.received) == 1, 5000);
		send(a, T_EXIT, PC_EXIT_NORMAL);
		pc_actor_release(a);
		pc_actor_release(b);
		quiesce(rt);
		cr_assert_eq(live_count(rt), 0);
	}
	FREE_RUNTIME_CHECKED(rt);
}

/* ---- monitors ---------------------------------------------------------- */

Test(monitors, down_carries_ref_id_reason_code)
{
	pc_runtime_t *rt = start_rt(2);
	probe_t w, t;
	pc_actor_t *watcher = spawn_probe(rt, &w), *target = spawn_probe(rt, &t);
	cr_assert_eq(do_with(rt, watcher, &w, T_MONITOR, target), 0);
	uint64_t ref = LOAD(w.ref);
	cr_assert_neq(ref, 0);
	send(target, T_FAIL, (uint64_t)(int64_t)-17);
	AWAIT(LOAD(w.downs) == 1, 5000);
	cr_assert_eq(w.down[0].ref, ref);
	cr_assert_eq(w.down[0].actor_id, pc_actor_id(target));
	cr_assert_eq(w.down[0].reason, PC_EXIT_ERROR);
	cr_assert_eq(w.down[0].code, -17);
	quiesce(rt);
	cr_assert_eq(LOAD(w.downs), 1);
	cr_assert_eq(LOAD(w.stops), 0, "monitors do not kill");
	/* Its DOWN delivered, the monitor is gone. */
	cr_assert_eq(do_with(rt, watcher, &w, T_DEMONITOR, NULL), PC_ENOTFOUND);
	pc_actor_release(watcher);
	pc_actor_release(target);
	quiesce(rt);
	cr_assert_eq(live_count(rt), 1);
	FREE_RUNTIME_CHECKED(rt);
}

Test(monitors, down_for_each_reason)
{
	pc_runtime_t *rt = start_rt(2);
	int reasons[] = {PC_EXIT_NORMAL, PC_EXIT_KILLED, PC_EXIT_SHUTDOWN};
	probe_t w;
	pc_actor_t *watcher = spawn_probe(rt, &w);
	for (int k = 0; k < 3; k++) {
		probe_t t;
		pc_actor_t *target = spawn_probe(rt, &t);
		cr_assert_eq(do_with(rt, watcher, &w, T_MONITOR, target), 0);
		cr_assert_eq(pc_actor_stop(target, reasons[k]), 0);
		AWAIT(LOAD(w.downs) == k + 1, 5000);
		cr_assert_eq(w.down[k].reason, reasons[k]);
		cr_assert_eq(w.down[k].code, 0);
		cr_assert_eq(w.down[k].ref, LOAD(w.ref));
		pc_actor_release(target);
	}
	pc_actor_release(watcher);
	FREE_RUNTIME_CHECKED(rt);
}

Test(monitors, monitor_stopped_actor_gives_down_at_once)
{
	pc_runtime_t *rt = start_rt(2);
	probe_t w, t;
	pc_actor_t *watcher = spawn_probe(rt, &w), *target = spawn_probe(rt, &t);
	send(target, T_FAIL, (uint64_t)(int64_t)-4);
	AWAIT(pc_actor_stopped(target), 5000);
	quiesce(rt);
	cr_assert_eq(do_with(rt, watcher, &w, T_MONITOR, target), 0);
	AWAIT(LOAD(w.downs) == 1, 5000);
	cr_assert_eq(w.down[0].ref, LOAD(w.ref));
	cr_assert_eq(w.down[0].actor_id, pc_actor_id(target));
	cr_assert_eq(w.down[0].reason, PC_EXIT_ERROR);
	cr_assert_eq(w.down[0].code, -4);
	pc_actor_release(watcher);
	pc_actor_release(target);
	quiesce(rt);
	cr_assert_eq(live_count(rt), 1);
	FREE_RUNTIME_CHECKED(rt);
}

Test(monitors, demonitor_prevents_down)
{
	pc_runtime_t *rt = start_rt(2);
	probe_t w, t;
	pc_actor_t *watcher = spawn_probe(rt, &w), *target = spawn_probe(rt, &t);
	/* Nothing monitored yet: not found (not a bad argument). */
	cr_assert_eq(do_with(rt, watcher, &w, T_DEMONITOR, NULL), PC_ENOTFOUND);
	cr_assert_eq(do_with(rt, watcher, &w, T_MONITOR, target), 0);
	cr_assert_eq(do_with(rt, watcher, &w, T_DEMONITOR, NULL), 0);
	cr_assert_eq(do_with(rt, watcher, &w, T_DEMONITOR, NULL), PC_ENOTFOUND);
	send(target, T_FAIL, (uint64_t)(int64_t)-1);
	AWAIT(pc_actor_stopped(target), 5000);
	quiesce(rt);
	cr_assert_eq(LOAD(w.downs), 0);
	pc_actor_release(target);
	quiesce(rt);
	cr_assert_eq(live_count(rt), 1, "the demonitored target is not kept alive");
	pc_actor_release(watcher);
	FREE_RUNTIME_CHECKED(rt);
}

/* The DOWN is already in the watcher's mailbox when it demonitors: it
 * must not be delivered. */
Test(monitors, demonitor_drops_down_in_flight)
{
	pc_runtime_t *rt = start_rt(2);
	probe_t w, t;
	pc_actor_t *watcher = spawn_probe(rt, &w), *target = spawn_probe(rt, &t);
	cr_assert_eq(do_with(rt, watcher, &w, T_MONITOR, target), 0);
	STORE(want_exited, stats(rt).exited + 1);
	STORE(w.rc, 1);
	send(watcher, T_DEMONITOR_LATE, 0);
	send(target, T_FAIL, (uint64_t)(int64_t)-1);
	AWAIT(LOAD(w.rc) != 1, 5000);
	quiesce(rt);
	cr_assert_eq(LOAD(w.rc), 0);
	cr_assert_eq(LOAD(w.downs), 0);
	pc_actor_release(watcher);
	pc_actor_release(target);
	quiesce(rt);
	cr_assert_eq(live_count(rt), 1);
	FREE_RUNTIME_CHECKED(rt);
}

Test(monitors, watcher_stops_first)
{
	pc_runtime_t *rt = start_rt(2);
	probe_t w, t;
	pc_actor_t *watcher = spawn_probe(rt, &w), *target = spawn_probe(rt, &t);
	cr_assert_eq(do_with(rt, watcher, &w, T_MONITOR, target), 0);
	send(watcher, T_EXIT, PC_EXIT_NORMAL);
	pc_actor_release(watcher);
	AWAIT(LOAD(w.stops) == 1, 5000);
	quiesce(rt);
	/* The target no longer holds the watcher. */
	cr_assert_eq(live_count(rt), 1);
	for (int i = 0; i < 10; i++)
		send(target, T_INC, 0);
	AWAIT(LOAD(t.received) == 10, 5000);
	send(target, T_FAIL, (uint64_t)(int64_t)-1);
	AWAIT(pc_actor_stopped(target), 5000);
	pc_actor_release(target);
	quiesce(rt);
	cr_assert_eq(live_count(rt), 0);
	FREE_RUNTIME_CHECKED(rt);
}

Test(monitors, many_watchers_one_target)
{
	pc_runtime_t *rt = start_rt(2);
	enum { N = 40 };
	probe_t w[N], t;
	pc_actor_t *watchers[N];
	pc_actor_t *target = spawn_probe(rt, &t);
	for (int i = 0; i < N; i++) {
		watchers[i] = spawn_probe(rt, &w[i]);
		STORE(w[i].rc, 1);
		send_ptr(watchers[i], T_MONITOR, target);
		if (i % 2) /* a second monitor from half of them */
			send_ptr(watchers[i], T_MONITOR, target);
	}
	for (int i = 0; i < N; i++)
		AWAIT(LOAD(w[i].rc) == 0, 5000);
	quiesce(rt);
	cr_assert_eq(pc_actor_stop(target, PC_EXIT_KILLED), 0);
	for (int i = 0; i < N; i++)
		AWAIT(LOAD(w[i].downs) == (i % 2 ? 2 : 1), 5000);
	quiesce(rt);
	for (int i = 0; i < N; i++) {
		cr_assert_eq(LOAD(w[i].downs), i % 2 ? 2 : 1);
		cr_assert_eq(w[i].down[0].reason, PC_EXIT_KILLED);
		cr_assert_eq(w[i].down[0].actor_id, pc_actor_id(target));
		if (i % 2)
			cr_assert_neq(w[i].down[0].ref, w[i].down[1].ref);
		for (int j = 0; j < i; j++)
			cr_assert_neq(w[i].down[0].ref, w[j].down[0].ref);
	}
	pc_actor_release(target);
	for (int i = 0; i < N; i++)
		pc_actor_release(watchers[i]);
	quiesce(rt);
	cr_assert_eq(live_count(rt), N);
	FREE_RUNTIME_CHECKED(rt);
}

/* Watchers and links formed and broken concurrently with the targets'
 * deaths; afterwards everything stopped must be reclaimed. */
Test(monitors, churn)
{
	pc_runtime_t *rt = start_rt(2);
	enum { ROUNDS = 30, N = 8 };
	for (int round = 0; round < ROUNDS; round++) {
		probe_t p[N];
		pc_actor_t *a[N];
		for (int i = 0; i < N; i++)
			a[i] = spawn_probe(rt, &p[i]);
		for (int i = 0; i < N; i++) {
			send(a[i], T_TRAP, (uint64_t)(i % 2));
			send_ptr(a[i], T_MONITOR, a[(i + 1) % N]);
			send_ptr(a[i], T_LINK, a[(i + 3) % N]);
		}
		send(a[round % N], T_FAIL, (uint64_t)(int64_t)-1);
		for (int i = 0; i < N; i++)
			(void)pc_actor_stop(a[i], PC_EXIT_NORMAL); /* may already be stopped */
		/* The messages carry borrowed handles: keep ours until they
		 * have been handled. */
		quiesce(rt);
		for (int i = 0; i < N; i++)
			pc_actor_release(a[i]);
		quiesce(rt);
		cr_assert_eq(live_count(rt), 0, "round %d", round);
		for (int i = 0; i < N; i++)
			cr_assert_eq(p[i].stops, 1);
	}
	FREE_RUNTIME_CHECKED(rt);
}

Test(monitors, shutdown_with_links_and_monitors)
{
	pc_runtime_t *rt = start_rt(2);
	enum { N = 20 };
	probe_t p[N];
	pc_actor_t *a[N];
	for (int i = 0; i < N; i++)
		a[i] = spawn_probe(rt, &p[i]);
	for (int i = 0; i < N; i++) {
		send(a[i], T_TRAP, 1);
		send_ptr(a[i], T_MONITOR, a[(i + 1) % N]);
		send_ptr(a[i], T_LINK, a[(i + 7) % N]);
	}
	quiesce(rt);
	for (int i = 0; i < N; i++)
		pc_actor_release(a[i]);
	FREE_RUNTIME_CHECKED(rt); /* LSan: every link and monitor freed */
	for (int i = 0; i < N; i++) {
		cr_assert_eq(p[i].stops, 1);
		cr_assert_eq(p[i].reason, PC_EXIT_SHUTDOWN);
	}
}
