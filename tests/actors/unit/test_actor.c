/*
 * Actors: spawn, send, the ways an actor stops (each must run the stop
 * handler exactly once with the right reason), dead letters, and the
 * reference counting that reclaims an actor's memory.
 *
 * Leaks are part of the assertions: actor states are malloc'd and freed
 * only by the stop handler, so a stop handler that never runs shows up in
 * LeakSanitizer, and `live_count` reads the runtime's actors_live counter to see
 * whether a stopped, released actor was really reclaimed (shutdown frees
 * zombies too, so LSan alone would not notice).
 */
#include <criterion/criterion.h>

#include <malloc.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "actors/actor_internal.h"
#include "pincer.h"
#include "test_util.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
/* the sanitizers' runtime has it; GCC ships no header for it */
size_t __sanitizer_get_current_allocated_bytes(void);
#define HEAP_IN_USE() __sanitizer_get_current_allocated_bytes()
#else
#define HEAP_IN_USE() mallinfo2().uordblks
#endif

/* ---- helpers (each test file is its own program) ---------------------- */


/* ---- the probe actor --------------------------------------------------- */

enum {
	T_INC = 1,  /* received++ */
	T_EXIT,     /* pc_exit(value) */
	T_FAIL,     /* return (int)value (negative) */
	T_GATE,     /* block until `gate` opens */
	T_SLEEP,    /* sleep value ms */
	T_LINK,     /* pc_link to the actor in value */
	T_MONITOR,  /* pc_monitor the actor in value */
	T_EXIT_AND_FAIL, /* pc_exit(NORMAL) then return an error: exit wins */
	T_SEND_AND_GATE, /* send T_INC to the actor in value, then as T_GATE */
};

typedef struct probe {
	int received;
	int stops;
	int reason;
	int entered; /* a blocking handler has started */
	int left;    /* ... and returned */
	int downs;
	pc_down_t down;
	int rc;      /* last pc_link / pc_monitor result */
} probe_t;

typedef struct pstate {
	probe_t *p;
	char *junk; /* an allocation only the stop handler frees */
} pstate_t;

static int gate;

static int probe_receive(pc_ctx_t *ctx, void *state, pc_msg_t *m)
{
	probe_t *p = ((pstate_t *)state)->p;
	switch (m->type) {
	case T_INC:
		INC(p->received);
		return 0;
	case T_EXIT:
		pc_exit(ctx, (int)pc_msg_u64(m));
		return 0;
	case T_FAIL:
		return (int)(int64_t)pc_msg_u64(m);
	case T_EXIT_AND_FAIL:
		pc_exit(ctx, PC_EXIT_NORMAL);
		return PC_EINVAL;
	case T_SEND_AND_GATE:
		STORE(p->rc, pc_send_u64((pc_actor_t *)(uintptr_t)pc_msg_u64(m), T_INC, 0));
		/* fall through */
	case T_GATE: {
		STORE(p->entered, 1);
		uint64_t until = now_ms() + 10000;
		while (!LOAD(gate) && now_ms() < until)
			sleep_ms(1);
		STORE(p->left, 1);
		return 0;
	}
	case T_SLEEP:
		STORE(p->entered, 1);
		sleep_ms((unsigned)pc_msg_u64(m));
		STORE(p->left, 1);
		return 0;
	case T_LINK:
		STORE(p->rc, pc_link(ctx, (pc_actor_t *)(uintptr_t)pc_msg_u64(m)));
		return 0;
	case T_MONITOR:
		STORE(p->rc, pc_monitor(ctx, (pc_actor_t *)(uintptr_t)pc_msg_u64(m), NULL));
		return 0;
	case PC_MSG_DOWN:
		memcpy(&p->down, pc_msg_cdata(m), sizeof(p->down));
		INC(p->downs);
		return 0;
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
	pstate_t *s = malloc(sizeof(*s));
	cr_assert_not_null(s);
	s->p = p;
	s->junk = malloc(32);
	pc_actor_t *a = NULL;
	cr_assert_eq(pc_spawn(rt, &probe_behavior, s, &a), 0);
	cr_assert_not_null(a);
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

/* ---- spawn / send / stop ---------------------------------------------- */

Test(actor, spawn_send_stop)
{
	pc_runtime_t *rt = start_rt(2);
	probe_t p;
	pc_actor_t *a = spawn_probe(rt, &p);
	cr_assert_eq(pc_actor_runtime(a), rt);
	cr_assert_not(pc_actor_stopped(a));
	for (int i = 0; i < 500; i++)
		send(a, T_INC, 0);
	cr_assert_eq(pc_actor_stop(a, PC_EXIT_NORMAL), 0);
	AWAIT(LOAD(p.stops) == 1, 5000);
	cr_assert_eq(LOAD(p.received), 500, "messages before the stop request are handled first");
	cr_assert_eq(LOAD(p.reason), PC_EXIT_NORMAL);
	/* The flag is set once the stop handler has returned, just after the
	 * handler counted itself. */
	AWAIT(pc_actor_stopped(a), 5000);
	pc_actor_release(a);
	quiesce(rt);
	cr_assert_eq(LOAD(p.stops), 1);
	FREE_RUNTIME_CHECKED(rt);
}

/* The last message an actor handled stays as its mailbox's stub until the
 * next one arrives. An actor going idle on a large one must not keep it:
 * 200 idle actors that each handled a 64 KiB message hold far less than
 * those messages. */
Test(actor, an_idle_actor_keeps_no_large_message)
{
	enum { N = 200, BIG = 64 * 1024 };
	pc_runtime_t *rt = start_rt(2);
	static probe_t p[N];
	pc_actor_t *a[N];
	for (int i = 0; i < N; i++)
		a[i] = spawn_probe(rt, &p[i]);
	quiesce(rt);
	size_t before = HEAP_IN_USE();
	for (int i = 0; i < N; i++) {
		pc_msg_t *m = pc_msg_new(T_INC, BIG);
		cr_assert_not_null(m);
		memset(pc_msg_data(m), 'x', BIG);
		cr_assert_eq(pc_send(a[i], m), 0);
	}
	for (int i = 0; i < N; i++)
		AWAIT(LOAD(p[i].received) == 1, 5000);
	quiesce(rt);
	size_t after = HEAP_IN_USE();
	size_t kept = after > before ? after - before : 0;
	cr_assert_lt(kept, (size_t)N * BIG / 8, "%d idle actors keep %zu bytes", N, kept);
	for (int i = 0; i < N; i++) {
		cr_assert_eq(pc_actor_stop(a[i], PC_EXIT_NORMAL), 0);
		pc_actor_release(a[i]);
	}
	quiesce(rt);
	FREE_RUNTIME_CHECKED(rt);
}

Test(actor, spawn_rejects_bad_arguments)
{
	pc_runtime_t *rt = start_rt(1);
	pc_actor_t *a = (pc_actor_t *)1;
	static const pc_behavior_t no_receive = {"none", NULL, NULL};
	cr_assert_eq(pc_spawn(rt, &no_receive, NULL, &a), PC_EINVAL);
	cr_assert_eq(pc_spawn(NULL, &probe_behavior, NULL, &a), PC_EINVAL);
	cr_assert_eq(pc_spawn(rt, NULL, NULL, &a), PC_EINVAL);
	cr_assert_eq(pc_send(NULL, NULL), PC_EINVAL);
	cr_assert_eq(pc_send(NULL, pc_msg_new(1, 8)), PC_EINVAL); /* freed: LSan */
	cr_assert_eq(pc_actor_stop(NULL, 0), PC_EINVAL);
	pc_actor_release(NULL);
	FREE_RUNTIME_CHECKED(rt);
}

Test(actor, ids_are_unique)
{
	pc_runtime_t *rt = start_rt(2);
	enum { N = 64 };
	probe_t p[N];
	pc_actor_t *a[N];
	for (int i = 0; i < N; i++) {
		a[i] = spawn_probe(rt, &p[i]);
		cr_assert_neq(pc_actor_id(a[i]), 0);
		for (int j = 0; j < i; j++)
			cr_assert_neq(pc_actor_id(a[i]), pc_actor_id(a[j]));
	}
	for (int i = 0; i < N; i++)
		pc_actor_release(a[i]);
	FREE_RUNTIME_CHECKED(rt);
	for (int i = 0; i < N; i++)
		cr_assert_eq(p[i].stops, 1);
}

Test(actor, spawn_before_start_runs_after_start)
{
	pc_runtime_t *rt = NULL;
	pc_runtime_config_t cfg;
	pc_runtime_config_init(&cfg);
	cfg.workers = 2;
	cr_assert_eq(pc_runtime_new(&cfg, &rt), 0);
	probe_t p;
	pc_actor_t *a = spawn_probe(rt, &p);
	for (int i = 0; i < 10; i++)
		send(a, T_INC, 0);
	sleep_ms(20);
	cr_assert_eq(LOAD(p.received), 0);
	cr_assert_eq(pc_runtime_start(rt), 0);
	cr_assert_eq(pc_runtime_start(rt), PC_ESTATE);
	AWAIT(LOAD(p.received) == 10, 5000);
	pc_actor_release(a);
	FREE_RUNTIME_CHECKED(rt);
	cr_assert_eq(p.stops, 1);
	cr_assert_eq(p.reason, PC_EXIT_SHUTDOWN);
}

/* ---- every way of stopping runs the stop handler exactly once ---------- */

Test(actor, stop_by_pc_exit)
{
	pc_runtime_t *rt = start_rt(2);
	probe_t p;
	pc_actor_t *a = spawn_probe(rt, &p);
	send(a, T_EXIT, PC_EXIT_KILLED);
	/* A dead letter (0 or PC_ESTOPPED, by timing): no second stop. */
	(void)pc_send_u64(a, T_EXIT, PC_EXIT_NORMAL);
	AWAIT(LOAD(p.stops) == 1, 5000);
	quiesce(rt);
	cr_assert_eq(LOAD(p.stops), 1);
	cr_assert_eq(LOAD(p.reason), PC_EXIT_KILLED);
	pc_actor_release(a);
	FREE_RUNTIME_CHECKED(rt);
	cr_assert_eq(p.stops, 1, "shutdown must not stop it again");
}

Test(actor, first_exit_request_wins)
{
	pc_runtime_t *rt = start_rt(2);
	probe_t p, w;
	pc_actor_t *a = spawn_probe(rt, &p);
	pc_actor_t *watcher = spawn_probe(rt, &w);
	send_ptr(watcher, T_MONITOR, a);
	quiesce(rt);
	cr_assert_eq(LOAD(w.rc), 0);
	send(a, T_EXIT_AND_FAIL, 0);
	AWAIT(LOAD(w.downs) == 1, 5000);
	cr_assert_eq(LOAD(p.reason), PC_EXIT_NORMAL);
	cr_assert_eq(w.down.reason, PC_EXIT_NORMAL);
	cr_assert_eq(w.down.code, 0);
	pc_actor_release(a);
	pc_actor_release(watcher);
	FREE_RUNTIME_CHECKED(rt);
}

/* The watcher reads the exit code, which the stop handler does not see. */
static void check_error_stop(int code)
{
	pc_runtime_t *rt = start_rt(2);
	probe_t p, w, other;
	pc_actor_t *a = spawn_probe(rt, &p);
	pc_actor_t *watcher = spawn_probe(rt, &w);
	pc_actor_t *b = spawn_probe(rt, &other);
	send_ptr(watcher, T_MONITOR, a);
	quiesce(rt);
	cr_assert_eq(LOAD(w.rc), 0);
	send(b, T_INC, 0);
	send(a, T_INC, 0);
	send(a, T_FAIL, (uint64_t)(int64_t)code);
	(void)pc_send_u64(a, T_INC, 0); /* after the failure: a dead letter */
	AWAIT(LOAD(w.downs) == 1, 5000);
	cr_assert_eq(LOAD(p.stops), 1);
	cr_assert_eq(LOAD(p.reason), PC_EXIT_ERROR);
	cr_assert_eq(LOAD(p.received), 1);
	cr_assert_eq(w.down.reason, PC_EXIT_ERROR);
	cr_assert_eq(w.down.code, code);
	cr_assert_eq(w.down.actor_id, pc_actor_id(a));
	/* The failure is the actor's alone: its neighbour keeps working. */
	for (int i = 0; i < 100; i++)
		send(b, T_INC, 0);
	AWAIT(LOAD(other.received) == 101, 5000);
	cr_assert_not(pc_actor_stopped(b));
	cr_assert_eq(LOAD(other.stops), 0);
	pc_actor_release(a);
	pc_actor_release(b);
	pc_actor_release(watcher);
	FREE_RUNTIME_CHECKED(rt);
	cr_assert_eq(p.stops, 1);
	cr_assert_eq(other.reason, PC_EXIT_SHUTDOWN);
}

Test(actor, stop_by_error_return)
{
	check_error_stop(-42);
}

Test(actor, allocation_failure_stops_only_that_actor)
{
	check_error_stop(PC_ENOMEM);
}

Test(actor, stop_from_outside)
{
	pc_runtime_t *rt = start_rt(2);
	probe_t p;
	pc_actor_t *a = spawn_probe(rt, &p);
	cr_assert_eq(pc_actor_stop(a, PC_EXIT_KILLED), 0);
	(void)pc_actor_stop(a, PC_EXIT_NORMAL); /* queued behind the first: no effect */
	AWAIT(LOAD(p.stops) == 1, 5000);
	quiesce(rt);
	cr_assert_eq(LOAD(p.reason), PC_EXIT_KILLED);
	/* Once stopped, a stop request is refused and freed. */
	cr_assert_eq(pc_actor_stop(a, PC_EXIT_NORMAL), PC_ESTOPPED);
	cr_assert_eq(LOAD(p.stops), 1);
	pc_actor_release(a);
	FREE_RUNTIME_CHECKED(rt);
}

Test(actor, stop_by_linked_failure)
{
	pc_runtime_t *rt = start_rt(2);
	probe_t p, q;
	pc_actor_t *a = spawn_probe(rt, &p);
	pc_actor_t *b = spawn_probe(rt, &q);
	send_ptr(a, T_LINK, b);
	quiesce(rt);
	cr_assert_eq(LOAD(p.rc), 0);
	send(b, T_FAIL, (uint64_t)(int64_t)-7);
	AWAIT(LOAD(p.stops) == 1 && LOAD(q.stops) == 1, 5000);
	cr_assert_eq(LOAD(q.reason), PC_EXIT_ERROR);
	cr_assert_eq(LOAD(p.reason), PC_EXIT_LINKED);
	quiesce(rt);
	pc_actor_release(a);
	pc_actor_release(b);
	FREE_RUNTIME_CHECKED(rt);
	cr_assert_eq(p.stops, 1);
	cr_assert_eq(q.stops, 1);
}

Test(actor, stop_by_shutdown_while_idle)
{
	pc_runtime_t *rt = start_rt(2);
	enum { N = 50 };
	probe_t p[N];
	for (int i = 0; i < N; i++) {
		pc_actor_t *a = spawn_probe(rt, &p[i]);
		send(a, T_INC, 0);
		if (i % 2)
			pc_actor_release(a); /* the runtime still owns the living */
	}
	quiesce(rt);
	FREE_RUNTIME_CHECKED(rt);
	for (int i = 0; i < N; i++) {
		cr_assert_eq(p[i].stops, 1);
		cr_assert_eq(p[i].reason, PC_EXIT_SHUTDOWN);
	}
}

Test(actor, stop_by_shutdown_while_busy)
{
	pc_runtime_t *rt = start_rt(2);
	probe_t p;
	pc_actor_t *a = spawn_probe(rt, &p);
	send(a, T_SLEEP, 200);
	/* A backlog behind the busy handler (one heap-sized): freed at stop. */
	for (int i = 0; i < 300; i++)
		send(a, T_INC, 0);
	cr_assert_eq(pc_send(a, pc_msg_new(T_INC, 1000)), 0);
	AWAIT(LOAD(p.entered) == 1, 5000);
	pc_actor_release(a);
	pc_runtime_stop(rt);
	/* stop waited for the handler, then ran the stop handler once. */
	cr_assert_eq(p.left, 1);
	cr_assert_eq(p.stops, 1);
	cr_assert_eq(p.reason, PC_EXIT_SHUTDOWN);
	pc_runtime_stop(rt); /* idempotent */
	FREE_RUNTIME_CHECKED(rt);
	cr_assert_eq(p.stops, 1);
}

/* ---- dead letters ------------------------------------------------------ */

Test(actor, send_to_stopped_actor)
{
	pc_runtime_t *rt = start_rt(2);
	probe_t p;
	pc_actor_t *a = spawn_probe(rt, &p);
	send(a, T_EXIT, PC_EXIT_NORMAL);
	AWAIT(pc_actor_stopped(a), 5000);
	quiesce(rt);
	uint64_t dead0 = stats(rt).dead_letters;
	cr_assert_eq(pc_send_u64(a, T_INC, 0), PC_ESTOPPED);
	pc_msg_t *big = pc_msg_new(T_INC, 4096); /* heap-sized: LSan sees a leak */
	cr_assert_eq(pc_send(a, big), PC_ESTOPPED);
	cr_assert_eq(stats(rt).dead_letters, dead0 + 2);
	cr_assert_eq(LOAD(p.received), 0);
	pc_actor_release(a);
	FREE_RUNTIME_CHECKED(rt);
}

/* Messages queued behind the one that stops the actor are freed and
 * counted, whether the actor lingers as a zombie (someone holds a
 * reference) or is reclaimed at once (its own reference was the last). */
static void check_backlog(bool release_first)
{
	pc_runtime_t *rt = start_rt(2);
	STORE(gate, 0);
	probe_t p;
	pc_actor_t *a = spawn_probe(rt, &p);
	send(a, T_GATE, 0);
	AWAIT(LOAD(p.entered) == 1, 5000);
	uint64_t dead0 = stats(rt).dead_letters;
	send(a, T_EXIT, PC_EXIT_NORMAL);
	for (int i = 0; i < 40; i++)
		send(a, T_INC, 0);
	for (int i = 0; i < 10; i++) /* heap-sized ones too */
		cr_assert_eq(pc_send(a, pc_msg_new(T_INC, 1000)), 0);
	if (release_first)
		pc_actor_release(a);
	STORE(gate, 1);
	quiesce(rt);
	cr_assert_eq(LOAD(p.stops), 1);
	cr_assert_eq(LOAD(p.received), 0);
	cr_assert_eq(stats(rt).dead_letters, dead0 + 50);
	if (release_first) {
		cr_assert_eq(live_count(rt), 0, "the stopped actor was not reclaimed");
	} else {
		cr_assert_eq(live_count(rt), 1, "a zombie stays while referenced");
		pc_actor_release(a);
		quiesce(rt);
		cr_assert_eq(live_count(rt), 0);
	}
	FREE_RUNTIME_CHECKED(rt);
}

Test(actor, backlog_of_zombie_is_dead_letters)
{
	check_backlog(false);
}

Test(actor, backlog_of_reclaimed_actor_is_dead_letters)
{
	check_backlog(true);
}

Test(actor, shutdown_frees_backlog)
{
	pc_runtime_t *rt = start_rt(2);
	STORE(gate, 0);
	probe_t p;
	pc_actor_t *a = spawn_probe(rt, &p);
	send(a, T_GATE, 0);
	AWAIT(LOAD(p.entered) == 1, 5000);
	for (int i = 0; i < 200; i++)
		cr_assert_eq(pc_send(a, pc_msg_new(T_INC, (size_t)(i * 7) % 600)), 0);
	STORE(gate, 1);
	pc_actor_release(a);
	pc_runtime_stop(rt);
	/* What the actor did not handle was freed (LSan) and counted. */
	cr_assert_eq((uint64_t)p.received + stats(rt).dead_letters, 200);
	cr_assert_eq(p.stops, 1);
	FREE_RUNTIME_CHECKED(rt);
}

/* ---- references -------------------------------------------------------- */

Test(actor, reclaimed_after_last_reference)
{
	pc_runtime_t *rt = start_rt(2);
	probe_t p;
	pc_actor_t *a = spawn_probe(rt, &p);
	pc_actor_t *extra[3];
	for (int i = 0; i < 3; i++)
		extra[i] = pc_actor_retain(a);
	cr_assert_eq(extra[0], a);
	send(a, T_EXIT, PC_EXIT_NORMAL);
	AWAIT(LOAD(p.stops) == 1, 5000);
	quiesce(rt);
	cr_assert_eq(live_count(rt), 1);
	pc_actor_release(a);
	for (int i = 0; i < 2; i++) {
		pc_actor_release(extra[i]);
		cr_assert_eq(pc_send_u64(extra[2], T_INC, 0), PC_ESTOPPED, "a held handle stays valid");
	}
	quiesce(rt);
	cr_assert_eq(live_count(rt), 1);
	pc_actor_release(extra[2]);
	quiesce(rt);
	cr_assert_eq(live_count(rt), 0);
	FREE_RUNTIME_CHECKED(rt);
}

/* A handler's send waits in its outbox until the turn ends. The reference
 * it was sent under may be shared (an event subscription's, a registry's)
 * and dropped meanwhile by another thread: the receiver must outlive the
 * outbox anyway, and the message is then a dead letter. */
Test(actor, a_send_outlives_the_shared_reference_it_went_under)
{
	pc_runtime_t *rt = start_rt(2);
	STORE(gate, 0);
	probe_t tp, sp;
	pc_actor_t *target = spawn_probe(rt, &tp); /* its reference: the shared one */
	pc_actor_t *sender = spawn_probe(rt, &sp);
	send_ptr(sender, T_SEND_AND_GATE, target);
	AWAIT(LOAD(sp.entered) == 1, 5000);
	cr_assert_eq(LOAD(sp.rc), 0);
	send(target, T_EXIT, PC_EXIT_NORMAL);
	AWAIT(LOAD(tp.stops) == 1, 5000);
	pc_actor_release(target);
	/* give the other worker time to reclaim it, were nothing holding it */
	for (int i = 0; i < 50 && live_count(rt) > 1; i++)
		sleep_ms(2);
	cr_assert_eq(live_count(rt), 2, "the receiver of a pending send was reclaimed");
	STORE(gate, 1);
	AWAIT(LOAD(sp.left) == 1, 5000);
	quiesce(rt);
	cr_assert_eq(LOAD(tp.received), 0);
	cr_assert_eq(stats(rt).dead_letters, 1);
	cr_assert_eq(live_count(rt), 1);
	pc_actor_release(sender);
	FREE_RUNTIME_CHECKED(rt);
}

Test(actor, released_before_stop_is_still_alive)
{
	pc_runtime_t *rt = start_rt(2);
	probe_t p;
	pc_actor_t *a = spawn_probe(rt, &p);
	pc_actor_t *keep = pc_actor_retain(a);
	pc_actor_release(a);
	send(keep, T_INC, 0);
	AWAIT(LOAD(p.received) == 1, 5000);
	cr_assert_not(pc_actor_stopped(keep));
	send(keep, T_EXIT, PC_EXIT_NORMAL);
	pc_actor_release(keep); /* races the exit: either order reclaims it */
	quiesce(rt);
	cr_assert_eq(LOAD(p.stops), 1);
	cr_assert_eq(live_count(rt), 0);
	FREE_RUNTIME_CHECKED(rt);
}

/* The mailbox gauge sees messages wait behind a busy handler, names the
 * deepest mailbox, and falls back to nothing once they are handled; a
 * scrape racing spawns and stops on other threads stays sane. */
static void *spawn_churn(void *arg)
{
	pc_runtime_t *rt = arg;
	for (int i = 0; i < 2000; i++) {
		probe_t p = {0};
		pc_actor_t *a = spawn_probe(rt, &p);
		send(a, T_INC, 0);
		cr_assert_eq(pc_actor_stop(a, PC_EXIT_NORMAL), 0);
		pc_actor_release(a);
		AWAIT(LOAD(p.stops) == 1, 5000);
	}
	return NULL;
}

Test(actor, mailbox_stats_count_what_waits)
{
	pc_runtime_t *rt = start_rt(2);
	probe_t p = {0}, q = {0};
	pc_actor_t *a = spawn_probe(rt, &p), *b = spawn_probe(rt, &q);
	STORE(gate, 0);
	send(a, T_GATE, 0);
	AWAIT(LOAD(p.entered), 5000);
	for (int i = 0; i < 50; i++)
		send(a, T_INC, 0);
	pc_mailbox_stats_t m;
	pc_runtime_mailbox_stats(rt, &m);
	cr_assert_geq(m.actors, 2);
	cr_assert_geq(m.queued, 50);
	cr_assert_geq(m.deepest, 50);
	cr_assert_lt(m.deepest, 60);
	STORE(gate, 1);
	AWAIT(LOAD(p.received) == 50, 5000);
	quiesce(rt);
	pc_runtime_mailbox_stats(rt, &m);
	cr_assert_eq(m.queued, 0);
	cr_assert_eq(m.deepest, 0);
	pthread_t t;
	cr_assert_eq(pthread_create(&t, NULL, spawn_churn, rt), 0);
	for (int i = 0; i < 500; i++) {
		pc_runtime_mailbox_stats(rt, &m);
		cr_assert_lt(m.deepest, 1000u);
	}
	cr_assert_eq(pthread_join(t, NULL), 0);
	cr_assert_eq(pc_actor_stop(a, PC_EXIT_NORMAL), 0);
	cr_assert_eq(pc_actor_stop(b, PC_EXIT_NORMAL), 0);
	pc_actor_release(a);
	pc_actor_release(b);
	quiesce(rt);
	FREE_RUNTIME_CHECKED(rt);
}

/* A worker gives memory back once after it falls idle, not again while
 * it stays idle (no periodic wake-ups), and again after new work; never
 * when asked not to. */
static uint64_t trims(pc_runtime_t *rt)
{
	pc_worker_stats_t ws[2];
	uint32_t n = pc_runtime_stats(rt, NULL, ws, 2);
	uint64_t t = 0;
	for (uint32_t i = 0; i < n && i < 2; i++)
		t += ws[i].trims;
	return t;
}

static pc_runtime_t *start_rt_trim(int64_t trim_after_ms)
{
	pc_runtime_config_t cfg;
	pc_runtime_config_init(&cfg);
	cfg.workers = 2;
	cfg.trim_after_ms = trim_after_ms;
	pc_runtime_t *rt = NULL;
	cr_assert_eq(pc_runtime_new(&cfg, &rt), 0);
	cr_assert_eq(pc_runtime_start(rt), 0);
	return rt;
}

Test(actor, an_idle_worker_trims_once_per_idle_stretch)
{
	pc_runtime_t *rt = start_rt_trim(30);
	probe_t p = {0};
	pc_actor_t *a = spawn_probe(rt, &p);
	send(a, T_INC, 0);
	AWAIT(LOAD(p.received) == 1, 5000);
	AWAIT(trims(rt) >= 1, 5000);
	uint64_t first = trims(rt);
	cr_assert_leq(first, 2, "at most one per worker that ran");
	sleep_ms(300);
	cr_assert_eq(trims(rt), first, "an idle worker stays asleep");
	send(a, T_INC, 0);
	AWAIT(LOAD(p.received) == 2, 5000);
	AWAIT(trims(rt) > first, 5000);
	pc_actor_release(a);
	quiesce(rt);
	FREE_RUNTIME_CHECKED(rt);

	rt = start_rt_trim(-1);
	probe_t q = {0};
	a = spawn_probe(rt, &q);
	send(a, T_INC, 0);
	AWAIT(LOAD(q.received) == 1, 5000);
	sleep_ms(200);
	cr_assert_eq(trims(rt), 0);
	pc_actor_release(a);
	quiesce(rt);
	FREE_RUNTIME_CHECKED(rt);
}

/* A tick more often than trim_after_ms must not keep the worker that takes
 * it from ever trimming: each worker that ran turns trims, ticks or not. */
Test(actor, a_worker_woken_by_a_frequent_tick_still_trims)
{
	pc_runtime_t *rt = start_rt_trim(60);
	probe_t p = {0};
	pc_actor_t *a = spawn_probe(rt, &p);
	pc_timer_t tick = 0;
	pc_msg_t *m = pc_msg_new(T_INC, 0);
	cr_assert_not_null(m);
	cr_assert_eq(pc_timer_every(a, 15, m, &tick), 0);
	AWAIT(LOAD(p.received) >= 3, 5000);
	uint64_t until = pc_runtime_now_ms() + 5000;
	bool all = false;
	while (!all && pc_runtime_now_ms() < until) {
		sleep_ms(20);
		pc_worker_stats_t ws[2];
		uint32_t n = pc_runtime_stats(rt, NULL, ws, 2);
		all = true;
		for (uint32_t i = 0; i < n && i < 2; i++)
			all = all && (ws[i].turns == 0 || ws[i].trims > 0);
	}
	uint64_t ticks = LOAD(p.received);
	cr_assert(pc_timer_cancel(rt, tick));
	cr_assert(all, "a worker that ran turns never trimmed (%llu ticks)", (unsigned long long)ticks);
	cr_assert_geq(ticks, 4, "the ticks kept coming while the workers trimmed");
	pc_actor_release(a);
	quiesce(rt);
	FREE_RUNTIME_CHECKED(rt);
}

/* A burst of actors leaves the slot chunks its peak needed; once the
 * actors are gone, the workers' trims give back every chunk whose slots
 * are all free (one actor kept alive pins only its own). */
Test(actor, a_trim_gives_back_the_slot_chunks_a_burst_emptied)
{
	enum { N = 16384 };
	pc_runtime_t *rt = start_rt_trim(20);
	quiesce(rt);
	size_t before = HEAP_IN_USE();
	pc_actor_t **a = calloc(N, sizeof(*a));
	probe_t *p = calloc(N, sizeof(*p));
	cr_assert(a && p);
	for (int i = 0; i < N; i++)
		a[i] = spawn_probe(rt, &p[i]);
	size_t burst = HEAP_IN_USE() - before;
	for (int i = 1; i < N; i++) {
		cr_assert_eq(pc_actor_stop(a[i], PC_EXIT_NORMAL), 0);
		pc_actor_release(a[i]);
	}
	quiesce(rt);
	size_t now = 0;
	uint64_t until = pc_runtime_now_ms() + 5000;
	/* the 16 chunks are ~80% of what the burst grew; with them all kept
	 * ~80% stays, with all but the kept actor's and the last ~35% */
	while ((now = HEAP_IN_USE()) >= before + burst / 2 && pc_runtime_now_ms() < until)
		sleep_ms(10);
	cr_assert_lt(now, before + burst / 2, "the burst grew the heap by %zu bytes; %zu stay", burst, now - before);
	send(a[0], T_INC, 0);
	AWAIT(LOAD(p[0].received) == 1, 5000);
	cr_assert_eq(pc_actor_stop(a[0], PC_EXIT_NORMAL), 0);
	pc_actor_release(a[0]);
	quiesce(rt);
	cr_assert_eq(live_count(rt), 0);
	FREE_RUNTIME_CHECKED(rt);
	free(a);
	free(p);
}

/* Actors spawned, used and stopped from several threads while trims give
 * slot chunks back all the time: every actor runs, stops and is reclaimed
 * exactly once (and the sanitizers see no slot used after its chunk went). */
typedef struct churn {
	pc_runtime_t *rt;
	probe_t *p;
	int n;
	unsigned seed;
} churn_t;

static void *churn_main(void *arg)
{
	churn_t *c = arg;
	for (int i = 0; i < c->n; i++) {
		pc_actor_t *a = spawn_probe(c->rt, &c->p[i]);
		send(a, T_INC, 0);
		if (rand_r(&c->seed) % 2)
			cr_assert_eq(pc_actor_stop(a, PC_EXIT_NORMAL), 0);
		else
			send(a, T_EXIT, PC_EXIT_KILLED);
		pc_actor_release(a);
		if (rand_r(&c->seed) % 64 == 0)
			sleep_ms(1);
	}
	return NULL;
}

static void *trimmer_main(void *arg)
{
	churn_t *c = arg;
	while (!LOAD(c->n)) {
		pc_runtime_trim_heap(c->rt);
		sleep_ms(1);
	}
	return NULL;
}

Test(actor, trims_while_actors_come_and_go)
{
	enum { THREADS = 4, PER = 3000 };
	pc_runtime_t *rt = start_rt_trim(1);
	pc_runtime_stats_t s0 = stats(rt);
	churn_t c[THREADS];
	pthread_t th[THREADS], trimmer;
	churn_t stop = {.rt = rt, .n = 0};
	cr_assert_eq(pthread_create(&trimmer, NULL, trimmer_main, &stop), 0);
	for (int i = 0; i < THREADS; i++) {
		c[i] = (churn_t){.rt = rt, .p = calloc(PER, sizeof(probe_t)), .n = PER, .seed = (unsigned)(i * 7919 + 1)};
		cr_assert_not_null(c[i].p);
		cr_assert_eq(pthread_create(&th[i], NULL, churn_main, &c[i]), 0);
	}
	for (int i = 0; i < THREADS; i++)
		cr_assert_eq(pthread_join(th[i], NULL), 0);
	quiesce(rt);
	STORE(stop.n, 1);
	cr_assert_eq(pthread_join(trimmer, NULL), 0);
	pc_runtime_stats_t s = stats(rt);
	cr_assert_eq(s.spawned - s0.spawned, THREADS * PER);
	cr_assert_eq(s.exited - s0.exited, THREADS * PER);
	cr_assert_eq(live_count(rt), 0);
	for (int i = 0; i < THREADS; i++) {
		for (int j = 0; j < PER; j++) {
			cr_assert_eq(c[i].p[j].stops, 1);
			cr_assert_eq(c[i].p[j].received, 1);
		}
		free(c[i].p);
	}
	FREE_RUNTIME_CHECKED(rt);
}

/* Many cycles of spawn / use / stop / release, in every order, from the
 * main thread; the counters and the live list must balance. */
Test(actor, spawn_stop_release_cycles)
{
	pc_runtime_t *rt = start_rt(2);
	pc_runtime_stats_t s0 = stats(rt);
	enum { N = 3000 };
	probe_t *p = calloc(N, sizeof(*p));
	for (int i = 0; i < N; i++) {
		pc_actor_t *a = spawn_probe(rt, &p[i]);
		send(a, T_INC, 0);
		switch (i % 3) {
		case 0: /* stop then release */
			cr_assert_eq(pc_actor_stop(a, PC_EXIT_NORMAL), 0);
			pc_actor_release(a);
			break;
		case 1: /* exit from inside, release later */
			send(a, T_EXIT, PC_EXIT_KILLED);
			if (i % 100 == 1)
				AWAIT(pc_actor_stopped(a), 5000);
			pc_actor_release(a);
			break;
		default: /* release first, then stop through another handle */ {
			pc_actor_t *b = pc_actor_retain(a);
			pc_actor_release(a);
			send(b, T_FAIL, (uint64_t)(int64_t)PC_ENOMEM);
			pc_actor_release(b);
			break;
		}
		}
	}
	quiesce(rt);
	pc_runtime_stats_t s = stats(rt);
	cr_assert_eq(s.spawned - s0.spawned, N);
	cr_assert_eq(s.exited - s0.exited, N);
	cr_assert_eq(live_count(rt), 0);
	for (int i = 0; i < N; i++) {
		cr_assert_eq(p[i].stops, 1);
		cr_assert_eq(p[i].received, 1);
	}
	FREE_RUNTIME_CHECKED(rt);
	free(p);
}

/* Actors spawning and stopping actors on the workers (the per-worker
 * spawn and exit counters, and frees racing other workers' sends). */
enum { SPAWNER_CHILDREN = 400 };
static probe_t spawner_probes[SPAWNER_CHILDREN];

static int spawner_receive(pc_ctx_t *ctx, void *state, pc_msg_t *m)
{
	(void)state;
	int i = (int)pc_msg_u64(m);
	pstate_t *s = malloc(sizeof(*s));
	s->p = &spawner_probes[i];
	s->junk = NULL;
	STORE(s->p->reason, -1);
	pc_actor_t *c = NULL;
	int rc = pc_spawn(pc_ctx_runtime(ctx), &probe_behavior, s, &c);
	if (rc != 0) {
		free(s);
		return rc;
	}
	pc_send_u64(c, T_INC, 0);
	pc_send_u64(c, T_INC, 0);
	pc_actor_stop(c, PC_EXIT_NORMAL);
	pc_send_u64(c, T_INC, 0); /* may or may not be refused: both are fine */
	pc_actor_release(c);
	return 0;
}

static const pc_behavior_t spawner_behavior = {"spawner", spawner_receive, NULL};

Test(actor, spawn_and_stop_on_workers)
{
	pc_runtime_t *rt = start_rt(2);
	memset(spawner_probes, 0, sizeof(spawner_probes));
	pc_runtime_stats_t s0 = stats(rt);
	pc_actor_t *sp[2];
	for (int k = 0; k < 2; k++)
		cr_assert_eq(pc_spawn(rt, &spawner_behavior, NULL, &sp[k]), 0);
	for (int i = 0; i < SPAWNER_CHILDREN; i++)
		send(sp[i % 2], 1, (uint64_t)i);
	quiesce(rt);
	pc_runtime_stats_t s = stats(rt);
	cr_assert_eq(s.spawned - s0.spawned, SPAWNER_CHILDREN + 2);
	cr_assert_eq(s.exited - s0.exited, SPAWNER_CHILDREN);
	cr_assert_eq(live_count(rt), 2);
	for (int i = 0; i < SPAWNER_CHILDREN; i++) {
		cr_assert_eq(spawner_probes[i].stops, 1);
		cr_assert_eq(spawner_probes[i].received, 2);
	}
	for (int k = 0; k < 2; k++)
		pc_actor_release(sp[k]);
	FREE_RUNTIME_CHECKED(rt);
}

/* Senders on several threads racing the actor's stop: every message is
 * either handled or counted as a dead letter, never both, never lost. */
typedef struct flood {
	pc_actor_t *to;
	int n;
	int refused;
} flood_t;

static void *flood_main(void *arg)
{
	flood_t *f = arg;
	for (int i = 0; i < f->n; i++)
		if (pc_send_u64(f->to, T_INC, 0) == PC_ESTOPPED)
			f->refused++;
	return NULL;
}

Test(actor, senders_racing_stop)
{
	pc_runtime_t *rt = start_rt(2);
	for (int round = 0; round < 10; round++) {
		probe_t p;
		pc_actor_t *a = spawn_probe(rt, &p);
		uint64_t dead0 = stats(rt).dead_letters;
		enum { T = 3, N = 2000 };
		flood_t f[T];
		pthread_t th[T];
		for (int i = 0; i < T; i++) {
			f[i] = (flood_t){pc_actor_retain(a), N, 0};
			pthread_create(&th[i], NULL, flood_main, &f[i]);
		}
		send(a, T_EXIT, PC_EXIT_NORMAL);
		for (int i = 0; i < T; i++) {
			pthread_join(th[i], NULL);
			pc_actor_release(f[i].to);
		}
		pc_actor_release(a);
		quiesce(rt);
		cr_assert_eq(LOAD(p.stops), 1);
		uint64_t dead = stats(rt).dead_letters - dead0;
		cr_assert_eq((uint64_t)LOAD(p.received) + dead, (uint64_t)T * N,
			     "handled %d + dead %llu != sent", p.received, (unsigned long long)dead);
		cr_assert_eq(live_count(rt), 0);
	}
	FREE_RUNTIME_CHECKED(rt);
}

/* Backpressure: producers that keep themselves busy (each turn ends with
 * more in their own mailbox) flood a slow consumer. They must be held back
 * (muted) at times, whatever the length of their turns. */
typedef struct bp {
	pc_actor_t *consumer;
	uint64_t sent, handled;
} bp_t;

enum { BP_PRODUCERS = 4, BP_EACH = 20000, BP_CHUNK = 16 };

typedef struct bp_producer {
	bp_t *bp;
	int left;
} bp_producer_t;

static int bp_producer_receive(pc_ctx_t *ctx, void *state, pc_msg_t *m)
{
	(void)m;
	bp_producer_t *p = state;
	for (int i = 0; i < BP_CHUNK && p->left > 0; i++, p->left--) {
		__atomic_add_fetch(&p->bp->sent, 1, __ATOMIC_RELAXED);
		if (pc_send_u64(p->bp->consumer, T_INC, 0) != 0)
			return -1;
	}
	return p->left > 0 ? pc_send_u64(pc_self(ctx), T_INC, 0) : 0;
}

static int bp_consumer_receive(pc_ctx_t *ctx, void *state, pc_msg_t *m)
{
	(void)ctx;
	(void)m;
	for (volatile int i = 0; i < 200; i++)
		;
	__atomic_add_fetch(&((bp_t *)state)->handled, 1, __ATOMIC_RELAXED);
	return 0;
}

static const pc_behavior_t bp_producer_behavior = {"bp_producer", bp_producer_receive, NULL};
static const pc_behavior_t bp_consumer_behavior = {"bp_consumer", bp_consumer_receive, NULL};

Test(actor, self_driven_producers_are_muted)
{
	pc_runtime_t *rt = start_rt(2);
	bp_t bp = {NULL, 0, 0};
	cr_assert_eq(pc_spawn(rt, &bp_consumer_behavior, &bp, &bp.consumer), 0);
	bp_producer_t ps[BP_PRODUCERS];
	pc_actor_t *p[BP_PRODUCERS];
	for (int i = 0; i < BP_PRODUCERS; i++) {
		ps[i] = (bp_producer_t){&bp, BP_EACH};
		cr_assert_eq(pc_spawn(rt, &bp_producer_behavior, &ps[i], &p[i]), 0);
	}
	for (int i = 0; i < BP_PRODUCERS; i++)
		send(p[i], T_INC, 0);
	quiesce(rt);
	cr_assert_eq(LOAD(bp.handled), (uint64_t)BP_PRODUCERS * BP_EACH);
	cr_assert_gt(stats(rt).mutes, 0, "no producer was ever held back");
	for (int i = 0; i < BP_PRODUCERS; i++)
		pc_actor_release(p[i]);
	pc_actor_release(bp.consumer);
	FREE_RUNTIME_CHECKED(rt);
}

/* pc_spawn_start: the start message is the actor's first, whatever else
 * is sent to it at once; pc_send_signal carries no payload. */
typedef struct order_state {
	uint32_t first;
	uint32_t count;
	uint32_t empty;
} order_state_t;

static int order_receive(pc_ctx_t *ctx, void *state, pc_msg_t *msg)
{
	(void)ctx;
	order_state_t *s = state;
	if (INC(s->count) == 1)
		STORE(s->first, msg->type);
	if (msg->size == 0)
		INC(s->empty);
	return 0;
}

Test(actor, spawn_start_message_comes_first)
{
	pc_runtime_t *rt = start_rt(2);
	static const pc_behavior_t b = {"order", order_receive, NULL};
	for (int i = 0; i < 200; i++) {
		order_state_t s = {0};
		pc_actor_t *a = NULL;
		cr_assert_eq(pc_spawn_start(rt, &b, &s, 7, &a), 0);
		cr_assert_eq(pc_send_u64(a, 8, 1), 0);
		cr_assert_eq(pc_send_signal(a, 9), 0);
		AWAIT(LOAD(s.count) == 3, 5000);
		cr_assert_eq(LOAD(s.first), 7u);
		cr_assert_eq(LOAD(s.empty), 2u, "the start and the signal carry nothing");
		pc_actor_stop(a, PC_EXIT_NORMAL);
		pc_actor_release(a);
		cr_assert_eq(pc_runtime_wait_quiescent(rt, 5000), 0);
	}
	static order_state_t loose;
	cr_assert_eq(pc_spawn_start(rt, &b, &loose, 7, NULL), 0, "without a handle");
	AWAIT(LOAD(loose.count) == 1, 5000);
	cr_assert_eq(LOAD(loose.first), 7u);
	cr_assert_eq(pc_send_signal(NULL, 9), PC_EINVAL);
	pc_runtime_free(rt);
}
