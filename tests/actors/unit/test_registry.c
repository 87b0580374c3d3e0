/*
 * The name registry: register / whereis / unregister and their errors,
 * the registry's own reference, automatic unregistration when an actor
 * stops (before anyone hears of the stop), and races between threads.
 */
#include <criterion/criterion.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "actors/actor_internal.h"
#include "pincer.h"
#include "test_util.h"

/* ---- helpers ----------------------------------------------------------- */


/* ---- actors ------------------------------------------------------------ */

enum {
	T_INC = 1,
	T_EXIT,
	T_MONITOR_NAMED, /* monitor the actor named watched_name */
	T_SPIN_UNTIL_MAIL, /* stay busy until a message arrives */
};

typedef struct probe {
	int received;
	int stops;
	int downs;
	int name_still_there; /* whereis found the name when DOWN arrived */
	int reregistered;     /* a new actor took the name on DOWN */
} probe_t;

static char watched_name[64];

static int probe_receive(pc_ctx_t *ctx, void *state, pc_msg_t *m)
{
	probe_t *p = state;
	switch (m->type) {
	case T_INC:
		INC(p->received);
		return 0;
	case T_EXIT:
		pc_exit(ctx, (int)pc_msg_u64(m));
		return 0;
	case T_MONITOR_NAMED: {
		pc_actor_t *t = pc_whereis(pc_ctx_runtime(ctx), watched_name);
		if (!t)
			return -1;
		int rc = pc_monitor(ctx, t, NULL);
		pc_actor_release(t);
		return rc;
	}
	case T_SPIN_UNTIL_MAIL: {
		/* Keeps this actor running on its worker so that the DOWN is
		 * picked up here the moment it is pushed, racing the rest of
		 * the stopping actor's exit. We are the mailbox's consumer. */
		uint64_t until = now_ms() + 5000;
		while (pc__mailbox_peek_empty(&pc_self(ctx)->mq) && now_ms() < until)
			;
		return 0;
	}
	case PC_MSG_DOWN: {
		/* Whoever hears of the stop must find the name free. */
		pc_actor_t *t = pc_whereis(pc_ctx_runtime(ctx), watched_name);
		if (t) {
			INC(p->name_still_there);
			pc_actor_release(t);
		}
		if (pc_register(pc_self(ctx), watched_name) == 0) {
			INC(p->reregistered);
			pc_unregister(pc_ctx_runtime(ctx), watched_name);
		}
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
	(void)reason;
	INC(((probe_t *)state)->stops);
}

static const pc_behavior_t probe_behavior = {"probe", probe_receive, probe_stop};

static pc_actor_t *spawn_probe(pc_runtime_t *rt, probe_t *p)
{
	memset(p, 0, sizeof(*p));
	pc_actor_t *a = NULL;
	cr_assert_eq(pc_spawn(rt, &probe_behavior, p, &a), 0);
	return a;
}

/* ---- basics ------------------------------------------------------------ */

Test(registry, register_whereis_unregister)
{
	pc_runtime_t *rt = start_rt(2);
	/* No registry yet. */
	cr_assert_null(pc_whereis(rt, "a"));
	cr_assert_eq(pc_unregister(rt, "a"), PC_ENOTFOUND);
	probe_t p, q;
	pc_actor_t *a = spawn_probe(rt, &p), *b = spawn_probe(rt, &q);
	cr_assert_eq(pc_register(a, "a"), 0);
	cr_assert_eq(pc_register(b, "b"), 0);
	pc_actor_t *f = pc_whereis(rt, "a");
	cr_assert_eq(f, a);
	cr_assert_eq(pc_send_u64(f, T_INC, 0), 0);
	pc_actor_release(f);
	f = pc_whereis(rt, "b");
	cr_assert_eq(f, b);
	pc_actor_release(f);
	cr_assert_null(pc_whereis(rt, "c"));
	cr_assert_null(pc_whereis(rt, "ab"));
	cr_assert_eq(pc_unregister(rt, "a"), 0);
	cr_assert_null(pc_whereis(rt, "a"));
	cr_assert_eq(pc_unregister(rt, "a"), PC_ENOTFOUND);
	/* Unregistered, it may take a name again. */
	cr_assert_eq(pc_register(a, "a2"), 0);
	f = pc_whereis(rt, "a2");
	cr_assert_eq(f, a);
	pc_actor_release(f);
	AWAIT(LOAD(p.received) == 1, 5000);
	pc_actor_release(a);
	pc_actor_release(b);
	FREE_RUNTIME_CHECKED(rt); /* LSan: the registry's entries and references */
}

Test(registry, errors)
{
	pc_runtime_t *rt = start_rt(2);
	probe_t p, q, r;
	pc_actor_t *a = spawn_probe(rt, &p), *b = spawn_probe(rt, &q), *c = spawn_probe(rt, &r);
	cr_assert_eq(pc_register(a, "x"), 0);
	cr_assert_eq(pc_register(b, "x"), PC_EEXIST);
	cr_assert_eq(pc_register(a, "x"), PC_EEXIST);
	cr_assert_eq(pc_register(a, "y"), PC_ESTATE, "one name per actor");
	cr_assert_null(pc_whereis(rt, "y"));
	cr_assert_eq(pc_register(NULL, "z"), PC_EINVAL);
	cr_assert_eq(pc_register(b, NULL), PC_EINVAL);
	cr_assert_eq(pc_register(b, ""), PC_EINVAL);
	char longest[257];
	memset(longest, 'n', 256);
	longest[256] = 0;
	cr_assert_eq(pc_register(b, longest), PC_EINVAL);
	longest[255] = 0;
	cr_assert_eq(pc_register(b, longest), 0);
	pc_actor_t *f = pc_whereis(rt, longest);
	cr_assert_eq(f, b);
	pc_actor_release(f);
	cr_assert_null(pc_whereis(NULL, "x"));
	cr_assert_null(pc_whereis(rt, NULL));
	cr_assert_eq(pc_unregister(rt, NULL), PC_ENOTFOUND);
	/* A stopped actor cannot take a name. */
	cr_assert_eq(pc_send_u64(c, T_EXIT, PC_EXIT_NORMAL), 0);
	AWAIT(pc_actor_stopped(c), 5000);
	quiesce(rt);
	cr_assert_eq(pc_register(c, "c"), PC_ESTOPPED);
	cr_assert_null(pc_whereis(rt, "c"));
	pc_actor_release(a);
	pc_actor_release(b);
	pc_actor_release(c);
	quiesce(rt);
	cr_assert_eq(live_count(rt), 2);
	FREE_RUNTIME_CHECKED(rt);
}

Test(registry, holds_its_own_reference)
{
	pc_runtime_t *rt = start_rt(2);
	probe_t p;
	pc_actor_t *a = spawn_probe(rt, &p);
	cr_assert_eq(pc_register(a, "kept"), 0);
	pc_actor_release(a);
	pc_actor_t *f = pc_whereis(rt, "kept");
	cr_assert_not_null(f);
	cr_assert_eq(pc_send_u64(f, T_INC, 0), 0);
	AWAIT(LOAD(p.received) == 1, 5000);
	/* Stopping unregisters it and drops the registry's reference. */
	cr_assert_eq(pc_send_u64(f, T_EXIT, PC_EXIT_NORMAL), 0);
	AWAIT(LOAD(p.stops) == 1, 5000);
	AWAIT(pc_whereis(rt, "kept") == NULL, 5000);
	pc_actor_release(f);
	quiesce(rt);
	cr_assert_eq(live_count(rt), 0);
	FREE_RUNTIME_CHECKED(rt);
}

Test(registry, auto_unregister_on_stop)
{
	pc_runtime_t *rt = start_rt(2);
	for (int i = 0; i < 50; i++) {
		probe_t p;
		pc_actor_t *a = spawn_probe(rt, &p);
		cr_assert_eq(pc_register(a, "svc"), 0);
		cr_assert_eq(pc_actor_stop(a, i % 2 ? PC_EXIT_NORMAL : PC_EXIT_KILLED), 0);
		AWAIT(LOAD(p.stops) == 1, 5000);
		quiesce(rt);
		cr_assert_null(pc_whereis(rt, "svc"), "round %d", i);
		cr_assert_eq(pc_unregister(rt, "svc"), PC_ENOTFOUND);
		pc_actor_release(a);
	}
	quiesce(rt);
	cr_assert_eq(live_count(rt), 0);
	FREE_RUNTIME_CHECKED(rt);
}

/* The name is gone before the monitors hear of the stop, so whoever reacts
 * to a DOWN (a supervisor restarting the child) can take it at once. */
Test(registry, name_free_when_down_arrives)
{
	pc_runtime_t *rt = start_rt(2);
	snprintf(watched_name, sizeof(watched_name), "watched");
	enum { ROUNDS = 300 };
	probe_t w;
	pc_actor_t *watcher = spawn_probe(rt, &w);
	for (int i = 0; i < ROUNDS; i++) {
		probe_t p;
		pc_actor_t *a = spawn_probe(rt, &p);
		cr_assert_eq(pc_register(a, watched_name), 0);
		cr_assert_eq(pc_send_u64(watcher, T_MONITOR_NAMED, 0), 0);
		quiesce(rt);
		cr_assert_eq(pc_send_u64(watcher, T_SPIN_UNTIL_MAIL, 0), 0);
		cr_assert_eq(pc_send_u64(a, T_EXIT, PC_EXIT_KILLED), 0);
		AWAIT(LOAD(w.downs) == i + 1, 5000);
		pc_actor_release(a);
	}
	quiesce(rt);
	cr_assert_eq(LOAD(w.name_still_there), 0);
	cr_assert_eq(LOAD(w.reregistered), ROUNDS);
	cr_assert_eq(LOAD(w.stops), 0);
	pc_actor_release(watcher);
	FREE_RUNTIME_CHECKED(rt);
}

Test(registry, many_names)
{
	pc_runtime_t *rt = start_rt(2);
	enum { N = 1500 };
	static probe_t p[N];
	pc_actor_t **a = calloc(N, sizeof(*a));
	char name[32];
	for (int i = 0; i < N; i++) {
		a[i] = spawn_probe(rt, &p[i]);
		snprintf(name, sizeof(name), "actor-%d", i);
		cr_assert_eq(pc_register(a[i], name), 0);
	}
	for (int i = 0; i < N; i++) {
		snprintf(name, sizeof(name), "actor-%d", i);
		pc_actor_t *f = pc_whereis(rt, name);
		cr_assert_eq(f, a[i], "%s", name);
		pc_actor_release(f);
	}
	for (int i = 0; i < N; i += 2) {
		snprintf(name, sizeof(name), "actor-%d", i);
		cr_assert_eq(pc_unregister(rt, name), 0);
	}
	for (int i = 1; i < N; i += 4)
		cr_assert_eq(pc_actor_stop(a[i], PC_EXIT_NORMAL), 0);
	quiesce(rt);
	for (int i = 0; i < N; i++) {
		snprintf(name, sizeof(name), "actor-%d", i);
		pc_actor_t *f = pc_whereis(rt, name);
		bool present = i % 2 == 1 && i % 4 != 1;
		cr_assert_eq(f != NULL, present, "%s", name);
		pc_actor_release(f);
		pc_actor_release(a[i]);
	}
	free(a);
	FREE_RUNTIME_CHECKED(rt);
}

/* ---- races ------------------------------------------------------------- */

enum { THREADS = 8 };

typedef struct racer {
	pc_actor_t *a;
	const char *name;
	pthread_barrier_t *go;
	int rc;
} racer_t;

static void *race_register(void *arg)
{
	racer_t *r = arg;
	/* A barrier, not a spin: on two cores spinning threads would starve
	 * the creation of the others. */
	pthread_barrier_wait(r->go);
	r->rc = pc_register(r->a, r->name);
	return NULL;
}

static void race(pc_actor_t **actors, const char *name, int *winner)
{
	pthread_barrier_t go;
	pthread_barrier_init(&go, NULL, THREADS + 1);
	racer_t r[THREADS];
	pthread_t th[THREADS];
	for (int i = 0; i < THREADS; i++) {
		r[i] = (racer_t){actors[i], name, &go, 1};
		pthread_create(&th[i], NULL, race_register, &r[i]);
	}
	pthread_barrier_wait(&go);
	int wins = 0;
	*winner = -1;
	for (int i = 0; i < THREADS; i++) {
		pthread_join(th[i], NULL);
		if (r[i].rc == 0) {
			wins++;
			*winner = i;
		} else {
			cr_assert(r[i].rc == PC_EEXIST, "loser got %d", r[i].rc);
		}
	}
	pthread_barrier_destroy(&go);
	cr_assert_eq(wins, 1);
}

Test(registry, concurrent_registration_one_wins)
{
	pc_runtime_t *rt = start_rt(2);
	probe_t p[THREADS];
	pc_actor_t *a[THREADS];
	for (int i = 0; i < THREADS; i++)
		a[i] = spawn_probe(rt, &p[i]);
	for (int round = 0; round < 100; round++) {
		int winner;
		race(a, "contested", &winner);
		pc_actor_t *f = pc_whereis(rt, "contested");
		cr_assert_eq(f, a[winner]);
		pc_actor_release(f);
		cr_assert_eq(pc_unregister(rt, "contested"), 0);
	}
	/* The same actor from every thread: still exactly one success. */
	pc_actor_t *same[THREADS];
	for (int i = 0; i < THREADS; i++)
		same[i] = a[0];
	for (int round = 0; round < 50; round++) {
		int winner;
		race(same, "mine", &winner);
		cr_assert_eq(pc_unregister(rt, "mine"), 0);
	}
	for (int i = 0; i < THREADS; i++)
		pc_actor_release(a[i]);
	FREE_RUNTIME_CHECKED(rt);
}

/* Registration, lookup and unregistration from several threads while the
 * named actors stop on their own: no crash, no leak, and once everything
 * has settled no name points at a stopped actor. */
typedef struct churner {
	pc_runtime_t *rt;
	pc_actor_t **actors;
	int n;
	int seed;
	int bad;
} churner_t;

static void *churn_main(void *arg)
{
	churner_t *c = arg;
	uint32_t x = (uint32_t)c->seed * 2654435761u + 1;
	char name[16];
	for (int i = 0; i < 3000; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		int k = (int)(x % (uint32_t)c->n);
		snprintf(name, sizeof(name), "n%d", (int)((x >> 8) % 6));
		switch ((x >> 16) % 4) {
		case 0:
		case 1: {
			int rc = pc_register(c->actors[k], name);
			if (!(rc == 0 || rc == PC_EEXIST || rc == PC_ESTATE || rc == PC_ESTOPPED))
				c->bad++; /* asserted on the main thread */
			break;
		}
		case 2:
			pc_unregister(c->rt, name);
			break;
		default:
			pc_actor_release(pc_whereis(c->rt, name));
			break;
		}
	}
	return NULL;
}

Test(registry, churn_with_stopping_actors)
{
	pc_runtime_t *rt = start_rt(2);
	enum { N = 12, T = 3 };
	probe_t p[N];
	pc_actor_t *a[N];
	for (int i = 0; i < N; i++)
		a[i] = spawn_probe(rt, &p[i]);
	churner_t c[T];
	pthread_t th[T];
	for (int i = 0; i < T; i++) {
		c[i] = (churner_t){rt, a, N, i + 1, 0};
		pthread_create(&th[i], NULL, churn_main, &c[i]);
	}
	for (int i = 0; i < N; i += 2) {
		sleep_ms(2);
		pc_actor_stop(a[i], PC_EXIT_KILLED);
	}
	for (int i = 0; i < T; i++) {
		pthread_join(th[i], NULL);
		cr_assert_eq(c[i].bad, 0);
	}
	quiesce(rt);
	char name[16];
	for (int i = 0; i < 6; i++) {
		snprintf(name, sizeof(name), "n%d", i);
		pc_actor_t *f = pc_whereis(rt, name);
		if (f)
			cr_assert_not(pc_actor_stopped(f), "%s names a stopped actor", name);
		pc_actor_release(f);
	}
	for (int i = 0; i < N; i++)
		pc_actor_release(a[i]);
	quiesce(rt);
	cr_assert_eq(live_count(rt), N / 2);
	FREE_RUNTIME_CHECKED(rt);
}
