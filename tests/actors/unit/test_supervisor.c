/*
 * Supervisors: restart strategies, restart types, the restart-intensity
 * limit, named children across restarts, start failures, and shutdown of
 * whole trees. Every child incarnation has its own probe, so the tests
 * see exactly which incarnation was started, stopped, and why.
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


/* ---- probe actor (children and the test's watcher) --------------------- */

enum { T_INC = 1, T_EXIT, T_FAIL, T_MONITOR };

typedef struct probe {
	int received;
	int stops;
	int reason;
	int downs;
	pc_down_t down;
} probe_t;

typedef struct pstate {
	probe_t *p;
	char *junk;
} pstate_t;

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
	case T_MONITOR:
		return pc_monitor(ctx, (pc_actor_t *)(uintptr_t)pc_msg_u64(m), NULL);
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

static int spawn_probe_on(pc_runtime_t *rt, probe_t *p, pc_actor_t **out)
{
	memset(p, 0, sizeof(*p));
	STORE(p->reason, -1);
	pstate_t *s = malloc(sizeof(*s));
	if (!s)
		return PC_ENOMEM;
	s->p = p;
	s->junk = malloc(16);
	int rc = pc_spawn(rt, &probe_behavior, s, out);
	if (rc != 0) {
		free(s->junk);
		free(s);
	}
	return rc;
}

/* ---- children ---------------------------------------------------------- */

#define MAX_INC 256

typedef struct cinfo {
	const char *name;
	int starts;          /* successful starts */
	int attempts;        /* calls of start */
	int fail_attempt;    /* this attempt (1-based) returns fail_code; 0 never */
	int fail_code;
	int die_at_start;    /* the first incarnation stops before start returns */
	uint64_t last_id;    /* id of the newest incarnation */
	probe_t probe[MAX_INC];
} cinfo_t;

static void *kill_from_outside(void *arg)
{
	pc_send_u64(arg, T_FAIL, (uint64_t)(int64_t)-99);
	return NULL;
}

static int child_start(pc_runtime_t *rt, void *arg, pc_actor_t **out)
{
	cinfo_t *c = arg;
	int attempt = INC(c->attempts);
	if (attempt == c->fail_attempt)
		return c->fail_code;
	int k = LOAD(c->starts);
	if (k >= MAX_INC)
		return PC_ELIMIT; /* no cr_assert here: this runs on a worker */
	int rc = spawn_probe_on(rt, &c->probe[k], out);
	if (rc != 0)
		return rc;
	if (c->die_at_start && k == 0) {
		/* Make the child die before the supervisor can register or
		 * monitor it: the kill comes from another thread (so another
		 * worker runs it) and we wait until it has stopped. */
		pthread_t th;
		pthread_create(&th, NULL, kill_from_outside, *out);
		pthread_join(th, NULL);
		uint64_t until = now_ms() + 5000;
		while (!pc_actor_stopped(*out) && now_ms() < until)
			sleep_ms(1);
	}
	STORE(c->last_id, pc_actor_id(*out));
	INC(c->starts);
	return 0;
}

static cinfo_t *new_info(const char *name)
{
	cinfo_t *c = calloc(1, sizeof(*c));
	c->name = name;
	return c;
}

static pc_child_spec_t spec_of(cinfo_t *c, pc_child_restart_t restart)
{
	return (pc_child_spec_t){c->name, child_start, c, restart};
}

/* The newest incarnation of a named child, once it is registered. */
static pc_actor_t *current(pc_runtime_t *rt, cinfo_t *c, int starts)
{
	AWAIT(LOAD(c->starts) >= starts, 5000);
	uint64_t until = now_ms() + 5000;
	for (;;) {
		pc_actor_t *a = pc_whereis(rt, c->name);
		if (a && pc_actor_id(a) == LOAD(c->last_id))
			return a;
		pc_actor_release(a);
		cr_assert(now_ms() < until, "%s incarnation %d never registered", c->name, starts);
		sleep_ms(1);
	}
}

static void crash(pc_runtime_t *rt, cinfo_t *c, int starts, int code)
{
	pc_actor_t *a = current(rt, c, starts);
	cr_assert_eq(pc_send_u64(a, T_FAIL, (uint64_t)(int64_t)code), 0);
	pc_actor_release(a);
}

static pc_actor_t *start_sup(pc_runtime_t *rt, pc_sup_strategy_t strategy, uint32_t max_restarts,
			     uint32_t period_ms, pc_child_spec_t *children, uint32_t n)
{
	pc_supervisor_spec_t spec = {strategy, max_restarts, period_ms, children, n};
	pc_actor_t *sup = NULL;
	cr_assert_eq(pc_supervisor_start(rt, &spec, &sup), 0);
	cr_assert_not_null(sup);
	return sup;
}

/* A test actor monitoring `target`; its probe gets the DOWN. */
static pc_actor_t *watch(pc_runtime_t *rt, probe_t *p, pc_actor_t *target)
{
	pc_actor_t *w = NULL;
	cr_assert_eq(spawn_probe_on(rt, p, &w), 0);
	cr_assert_eq(pc_send_u64(w, T_MONITOR, (uint64_t)(uintptr_t)target), 0);
	return w;
}

/* ---- strategies -------------------------------------------------------- */

Test(supervisor, one_for_one_restarts_only_the_failed_child)
{
	pc_runtime_t *rt = start_rt(2);
	cinfo_t *c[3] = {new_info("c0"), new_info("c1"), new_info("c2")};
	pc_child_spec_t specs[3];
	for (int i = 0; i < 3; i++)
		specs[i] = spec_of(c[i], PC_CHILD_PERMANENT);
	pc_actor_t *sup = start_sup(rt, PC_SUP_ONE_FOR_ONE, 10, 60000, specs, 3);
	for (int i = 0; i < 3; i++)
		pc_actor_release(current(rt, c[i], 1));
	uint64_t old_id = LOAD(c[1]->last_id);
	crash(rt, c[1], 1, -5);
	pc_actor_t *fresh = current(rt, c[1], 2);
	cr_assert_neq(pc_actor_id(fresh), old_id, "whereis finds the new incarnation");
	cr_assert_eq(pc_send_u64(fresh, T_INC, 0), 0);
	AWAIT(LOAD(c[1]->probe[1].received) == 1, 5000);
	pc_actor_release(fresh);
	quiesce(rt);
	cr_assert_eq(LOAD(c[0]->starts), 1);
	cr_assert_eq(LOAD(c[1]->starts), 2);
	cr_assert_eq(LOAD(c[2]->starts), 1);
	cr_assert_eq(c[1]->probe[0].reason, PC_EXIT_ERROR);
	cr_assert_eq(LOAD(c[0]->probe[0].stops), 0);
	cr_assert_eq(LOAD(c[2]->probe[0].stops), 0);
	/* Stopping the supervisor stops the children it runs. */
	cr_assert_eq(pc_actor_stop(sup, PC_EXIT_SHUTDOWN), 0);
	AWAIT(LOAD(c[0]->probe[0].stops) == 1 && LOAD(c[1]->probe[1].stops) == 1 &&
		      LOAD(c[2]->probe[0].stops) == 1, 5000);
	cr_assert_eq(c[0]->probe[0].reason, PC_EXIT_SHUTDOWN);
	cr_assert_eq(c[1]->probe[1].reason, PC_EXIT_SHUTDOWN);
	cr_assert_eq(c[2]->probe[0].reason, PC_EXIT_SHUTDOWN);
	quiesce(rt);
	for (int i = 0; i < 3; i++)
		cr_assert_null(pc_whereis(rt, c[i]->name));
	pc_actor_release(sup);
	quiesce(rt);
	cr_assert_eq(live_count(rt), 0, "the tree was reclaimed");
	FREE_RUNTIME_CHECKED(rt);
	for (int i = 0; i < 3; i++)
		free(c[i]);
}

Test(supervisor, one_for_all_restarts_all)
{
	pc_runtime_t *rt = start_rt(2);
	cinfo_t *c[3] = {new_info("a0"), new_info("a1"), new_info("a2")};
	pc_child_spec_t specs[3];
	for (int i = 0; i < 3; i++)
		specs[i] = spec_of(c[i], PC_CHILD_PERMANENT);
	pc_actor_t *sup = start_sup(rt, PC_SUP_ONE_FOR_ALL, 10, 60000, specs, 3);
	for (int i = 0; i < 3; i++)
		pc_actor_release(current(rt, c[i], 1));
	crash(rt, c[1], 1, -5);
	for (int i = 0; i < 3; i++) {
		pc_actor_t *a = current(rt, c[i], 2);
		cr_assert_eq(pc_send_u64(a, T_INC, 0), 0);
		pc_actor_release(a);
	}
	quiesce(rt);
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(LOAD(c[i]->starts), 2);
		cr_assert_eq(LOAD(c[i]->probe[0].stops), 1);
		cr_assert_eq(LOAD(c[i]->probe[1].received), 1);
		cr_assert_eq(LOAD(c[i]->probe[1].stops), 0);
	}
	cr_assert_eq(c[0]->probe[0].reason, PC_EXIT_SHUTDOWN);
	cr_assert_eq(c[1]->probe[0].reason, PC_EXIT_ERROR);
	cr_assert_eq(c[2]->probe[0].reason, PC_EXIT_SHUTDOWN);
	/* Once more, through another child. */
	crash(rt, c[2], 2, -6);
	for (int i = 0; i < 3; i++)
		pc_actor_release(current(rt, c[i], 3));
	quiesce(rt);
	for (int i = 0; i < 3; i++)
		cr_assert_eq(LOAD(c[i]->starts), 3);
	pc_actor_release(sup);
	FREE_RUNTIME_CHECKED(rt);
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(c[i]->probe[2].reason, PC_EXIT_SHUTDOWN);
		free(c[i]);
	}
}

/* ---- restart types ----------------------------------------------------- */

Test(supervisor, permanent_restarts_after_normal_exit)
{
	pc_runtime_t *rt = start_rt(2);
	cinfo_t *c = new_info("perm");
	pc_child_spec_t s = spec_of(c, PC_CHILD_PERMANENT);
	pc_actor_t *sup = start_sup(rt, PC_SUP_ONE_FOR_ONE, 10, 60000, &s, 1);
	pc_actor_t *a = current(rt, c, 1);
	cr_assert_eq(pc_send_u64(a, T_EXIT, PC_EXIT_NORMAL), 0);
	pc_actor_release(a);
	pc_actor_release(current(rt, c, 2));
	pc_actor_release(sup);
	FREE_RUNTIME_CHECKED(rt);
	free(c);
}

Test(supervisor, transient_restarts_only_after_failure)
{
	pc_runtime_t *rt = start_rt(2);
	cinfo_t *c = new_info("trans");
	pc_child_spec_t s = spec_of(c, PC_CHILD_TRANSIENT);
	pc_actor_t *sup = start_sup(rt, PC_SUP_ONE_FOR_ONE, 10, 60000, &s, 1);
	/* Abnormal (error, killed): restarted. */
	crash(rt, c, 1, -1);
	pc_actor_t *a = current(rt, c, 2);
	cr_assert_eq(pc_actor_stop(a, PC_EXIT_KILLED), 0);
	pc_actor_release(a);
	/* Shut down: not restarted. */
	a = current(rt, c, 3);
	cr_assert_eq(pc_actor_stop(a, PC_EXIT_SHUTDOWN), 0);
	pc_actor_release(a);
	AWAIT(LOAD(c->probe[2].stops) == 1, 5000);
	quiesce(rt);
	cr_assert_eq(LOAD(c->starts), 3);
	cr_assert_null(pc_whereis(rt, "trans"));
	pc_actor_release(sup);
	FREE_RUNTIME_CHECKED(rt);
	free(c);

	/* Normal exit: not restarted. */
	rt = start_rt(2);
	c = new_info("trans");
	s = spec_of(c, PC_CHILD_TRANSIENT);
	sup = start_sup(rt, PC_SUP_ONE_FOR_ONE, 10, 60000, &s, 1);
	a = current(rt, c, 1);
	cr_assert_eq(pc_send_u64(a, T_EXIT, PC_EXIT_NORMAL), 0);
	pc_actor_release(a);
	AWAIT(LOAD(c->probe[0].stops) == 1, 5000);
	quiesce(rt);
	cr_assert_eq(LOAD(c->starts), 1);
	cr_assert_eq(LOAD(c->attempts), 1);
	cr_assert_not(pc_actor_stopped(sup));
	pc_actor_release(sup);
	FREE_RUNTIME_CHECKED(rt);
	free(c);
}

Test(supervisor, temporary_never_restarts)
{
	pc_runtime_t *rt = start_rt(2);
	cinfo_t *t = new_info("temp"), *p = new_info("perm");
	pc_child_spec_t s[2] = {spec_of(t, PC_CHILD_TEMPORARY), spec_of(p, PC_CHILD_PERMANENT)};
	pc_actor_t *sup = start_sup(rt, PC_SUP_ONE_FOR_ONE, 10, 60000, s, 2);
	pc_actor_release(current(rt, p, 1));
	crash(rt, t, 1, -1);
	AWAIT(LOAD(t->probe[0].stops) == 1, 5000);
	quiesce(rt);
	cr_assert_eq(LOAD(t->attempts), 1);
	cr_assert_null(pc_whereis(rt, "temp"));
	/* Under one-for-all too, a temporary child is not brought back. */
	pc_actor_release(sup);
	FREE_RUNTIME_CHECKED(rt);
	free(t);
	free(p);

	rt = start_rt(2);
	t = new_info("temp");
	p = new_info("perm");
	s[0] = spec_of(t, PC_CHILD_TEMPORARY);
	s[1] = spec_of(p, PC_CHILD_PERMANENT);
	sup = start_sup(rt, PC_SUP_ONE_FOR_ALL, 10, 60000, s, 2);
	pc_actor_release(current(rt, p, 1));
	pc_actor_t *a = current(rt, t, 1);
	cr_assert_eq(pc_send_u64(a, T_EXIT, PC_EXIT_NORMAL), 0);
	pc_actor_release(a);
	AWAIT(LOAD(t->probe[0].stops) == 1, 5000);
	quiesce(rt);
	cr_assert_eq(LOAD(t->attempts), 1);
	cr_assert_eq(LOAD(p->attempts), 1);
	pc_actor_release(sup);
	FREE_RUNTIME_CHECKED(rt);
	free(t);
	free(p);
}

/* ---- restart intensity ------------------------------------------------- */

Test(supervisor, intensity_limit_stops_supervisor)
{
	pc_runtime_t *rt = start_rt(2);
	cinfo_t *c = new_info("flaky"), *b = new_info("bystander");
	pc_child_spec_t s[2] = {spec_of(c, PC_CHILD_PERMANENT), spec_of(b, PC_CHILD_PERMANENT)};
	pc_actor_t *sup = start_sup(rt, PC_SUP_ONE_FOR_ONE, 2, 60000, s, 2);
	probe_t w;
	pc_actor_t *watcher = watch(rt, &w, sup);
	pc_actor_release(current(rt, b, 1));
	crash(rt, c, 1, -1); /* restart 1 */
	crash(rt, c, 2, -1); /* restart 2 */
	crash(rt, c, 3, -1); /* a third within the period: too many */
	AWAIT(LOAD(w.downs) == 1, 5000);
	cr_assert_eq(w.down.actor_id, pc_actor_id(sup));
	cr_assert_eq(w.down.reason, PC_EXIT_ERROR);
	cr_assert_eq(w.down.code, PC_ELIMIT);
	AWAIT(LOAD(b->probe[0].stops) == 1, 5000);
	cr_assert_eq(b->probe[0].reason, PC_EXIT_SHUTDOWN);
	quiesce(rt);
	cr_assert_eq(LOAD(c->starts), 3);
	cr_assert_eq(LOAD(b->starts), 1);
	cr_assert(pc_actor_stopped(sup));
	cr_assert_null(pc_whereis(rt, "flaky"));
	cr_assert_null(pc_whereis(rt, "bystander"));
	pc_actor_release(sup);
	pc_actor_release(watcher);
	quiesce(rt);
	cr_assert_eq(live_count(rt), 1);
	FREE_RUNTIME_CHECKED(rt);
	free(c);
	free(b);
}

Test(supervisor, zero_restarts_allowed)
{
	pc_runtime_t *rt = start_rt(2);
	cinfo_t *c = new_info("once");
	pc_child_spec_t s = spec_of(c, PC_CHILD_PERMANENT);
	pc_actor_t *sup = start_sup(rt, PC_SUP_ONE_FOR_ALL, 0, 60000, &s, 1);
	probe_t w;
	pc_actor_t *watcher = watch(rt, &w, sup);
	crash(rt, c, 1, -1);
	AWAIT(LOAD(w.downs) == 1, 5000);
	cr_assert_eq(w.down.reason, PC_EXIT_ERROR);
	cr_assert_eq(w.down.code, PC_ELIMIT);
	cr_assert_eq(LOAD(c->attempts), 1);
	pc_actor_release(sup);
	pc_actor_release(watcher);
	FREE_RUNTIME_CHECKED(rt);
	free(c);
}

Test(supervisor, restarts_spread_over_time_are_fine)
{
	pc_runtime_t *rt = start_rt(2);
	cinfo_t *c = new_info("slow");
	pc_child_spec_t s = spec_of(c, PC_CHILD_PERMANENT);
	pc_actor_t *sup = start_sup(rt, PC_SUP_ONE_FOR_ONE, 1, 30, &s, 1);
	for (int i = 1; i <= 4; i++) {
		crash(rt, c, i, -1);
		pc_actor_release(current(rt, c, i + 1));
		sleep_ms(80); /* well outside the 30 ms period */
	}
	quiesce(rt);
	cr_assert_not(pc_actor_stopped(sup));
	cr_assert_eq(LOAD(c->starts), 5);
	pc_actor_release(sup);
	FREE_RUNTIME_CHECKED(rt);
	free(c);
}

/* A supervisor under a supervisor: the inner one giving up counts as a
 * failure of the outer one's child, which is restarted with its children. */
static pc_child_spec_t inner_children[1];

static int inner_start(pc_runtime_t *rt, void *arg, pc_actor_t **out)
{
	INC(*(int *)arg);
	pc_supervisor_spec_t spec = {PC_SUP_ONE_FOR_ONE, 1, 60000, inner_children, 1};
	return pc_supervisor_start(rt, &spec, out);
}

Test(supervisor, nested_supervisors)
{
	pc_runtime_t *rt = start_rt(2);
	cinfo_t *leaf = new_info("leaf");
	inner_children[0] = spec_of(leaf, PC_CHILD_PERMANENT);
	int inner_starts = 0;
	pc_child_spec_t outer_child = {"inner", inner_start, &inner_starts, PC_CHILD_PERMANENT};
	pc_actor_t *outer = start_sup(rt, PC_SUP_ONE_FOR_ONE, 5, 60000, &outer_child, 1);
	crash(rt, leaf, 1, -1);  /* inner restarts it */
	crash(rt, leaf, 2, -1);  /* inner gives up; outer restarts inner */
	pc_actor_release(current(rt, leaf, 3));
	quiesce(rt);
	cr_assert_eq(LOAD(inner_starts), 2);
	cr_assert_eq(LOAD(leaf->starts), 3);
	cr_assert_eq(leaf->probe[1].reason, PC_EXIT_ERROR);
	pc_actor_t *inner = pc_whereis(rt, "inner");
	cr_assert_not_null(inner);
	cr_assert_not(pc_actor_stopped(inner));
	pc_actor_release(inner);
	pc_actor_release(outer);
	FREE_RUNTIME_CHECKED(rt); /* the whole tree, at shutdown */
	cr_assert_eq(leaf->probe[2].stops, 1);
	cr_assert_eq(leaf->probe[2].reason, PC_EXIT_SHUTDOWN);
	free(leaf);
}

/* ---- start failures ---------------------------------------------------- */

Test(supervisor, child_start_failure_at_init)
{
	pc_runtime_t *rt = start_rt(2);
	cinfo_t *c[3] = {new_info("s0"), new_info("s1"), new_info("s2")};
	c[1]->fail_attempt = 1;
	c[1]->fail_code = PC_ENOMEM;
	pc_child_spec_t specs[3];
	for (int i = 0; i < 3; i++)
		specs[i] = spec_of(c[i], PC_CHILD_PERMANENT);
	pc_actor_t *sup = start_sup(rt, PC_SUP_ONE_FOR_ONE, 10, 60000, specs, 3);
	probe_t w;
	pc_actor_t *watcher = watch(rt, &w, sup); /* before or after: DOWN either way */
	AWAIT(LOAD(w.downs) == 1, 5000);
	cr_assert_eq(w.down.reason, PC_EXIT_ERROR);
	cr_assert_eq(w.down.code, PC_ENOMEM);
	AWAIT(LOAD(c[0]->probe[0].stops) == 1, 5000);
	cr_assert_eq(c[0]->probe[0].reason, PC_EXIT_SHUTDOWN);
	quiesce(rt);
	cr_assert_eq(LOAD(c[1]->starts), 0);
	cr_assert_eq(LOAD(c[2]->attempts), 0, "children after the failed one are not started");
	cr_assert_null(pc_whereis(rt, "s0"));
	pc_actor_release(sup);
	pc_actor_release(watcher);
	quiesce(rt);
	cr_assert_eq(live_count(rt), 1);
	FREE_RUNTIME_CHECKED(rt);
	for (int i = 0; i < 3; i++)
		free(c[i]);
}

Test(supervisor, restart_failure_stops_supervisor)
{
	pc_runtime_t *rt = start_rt(2);
	cinfo_t *c = new_info("r0"), *b = new_info("r1");
	c->fail_attempt = 2;
	c->fail_code = -77;
	pc_child_spec_t s[2] = {spec_of(c, PC_CHILD_PERMANENT), spec_of(b, PC_CHILD_PERMANENT)};
	pc_actor_t *sup = start_sup(rt, PC_SUP_ONE_FOR_ONE, 10, 60000, s, 2);
	probe_t w;
	pc_actor_t *watcher = watch(rt, &w, sup);
	pc_actor_release(current(rt, b, 1));
	crash(rt, c, 1, -1);
	AWAIT(LOAD(w.downs) == 1, 5000);
	cr_assert_eq(w.down.reason, PC_EXIT_ERROR);
	cr_assert_eq(w.down.code, -77);
	AWAIT(LOAD(b->probe[0].stops) == 1, 5000);
	cr_assert_eq(b->probe[0].reason, PC_EXIT_SHUTDOWN);
	pc_actor_release(sup);
	pc_actor_release(watcher);
	FREE_RUNTIME_CHECKED(rt);
	free(c);
	free(b);
}

/* A named child that dies before the supervisor got to register it is a
 * child that failed (restarted, counted against the intensity), not a
 * reason for the supervisor to give up. */
Test(supervisor, child_dying_during_start_is_restarted)
{
	pc_runtime_t *rt = start_rt(2);
	cinfo_t *c = new_info("fragile");
	c->die_at_start = 1;
	pc_child_spec_t s = spec_of(c, PC_CHILD_PERMANENT);
	pc_actor_t *sup = start_sup(rt, PC_SUP_ONE_FOR_ONE, 3, 60000, &s, 1);
	probe_t w;
	pc_actor_t *watcher = watch(rt, &w, sup);
	pc_actor_t *a = current(rt, c, 2);
	cr_assert_eq(pc_send_u64(a, T_INC, 0), 0);
	pc_actor_release(a);
	AWAIT(LOAD(c->probe[1].received) == 1, 5000);
	quiesce(rt);
	cr_assert_eq(LOAD(w.downs), 0, "supervisor stopped: code %d", w.down.code);
	cr_assert_eq(c->probe[0].reason, PC_EXIT_ERROR);
	pc_actor_release(sup);
	pc_actor_release(watcher);
	FREE_RUNTIME_CHECKED(rt);
	free(c);
}

Test(supervisor, bad_specs)
{
	pc_runtime_t *rt = start_rt(1);
	pc_actor_t *sup = NULL;
	pc_supervisor_spec_t spec = {PC_SUP_ONE_FOR_ONE, 1, 1000, NULL, 1};
	cr_assert_eq(pc_supervisor_start(rt, &spec, &sup), PC_EINVAL);
	pc_child_spec_t bad = {"x", NULL, NULL, PC_CHILD_PERMANENT};
	spec.children = &bad;
	cr_assert_eq(pc_supervisor_start(rt, &spec, &sup), PC_EINVAL);
	cr_assert_eq(pc_supervisor_start(NULL, &spec, &sup), PC_EINVAL);
	cr_assert_eq(pc_supervisor_start(rt, NULL, &sup), PC_EINVAL);
	/* No children at all is fine. */
	spec.nchildren = 0;
	spec.children = NULL;
	cr_assert_eq(pc_supervisor_start(rt, &spec, &sup), 0);
	pc_actor_release(sup);
	FREE_RUNTIME_CHECKED(rt);
}

/* ---- stress ------------------------------------------------------------ */

/* Many restarts of named children: each new incarnation must get its name
 * even though the old one is still finishing its exit. */
Test(supervisor, named_restart_churn)
{
	pc_runtime_t *rt = start_rt(2);
	enum { N = 2, ROUNDS = 100 };
	cinfo_t *c[N] = {new_info("churn0"), new_info("churn1")};
	pc_child_spec_t s[N];
	for (int i = 0; i < N; i++)
		s[i] = spec_of(c[i], PC_CHILD_PERMANENT);
	pc_actor_t *sup = start_sup(rt, PC_SUP_ONE_FOR_ONE, 100000, 60000, s, N);
	probe_t w;
	pc_actor_t *watcher = watch(rt, &w, sup);
	for (int r = 1; r <= ROUNDS; r++)
		for (int i = 0; i < N; i++) {
			crash(rt, c[i], r, -1);
			cr_assert_eq(LOAD(w.downs), 0, "supervisor stopped: code %d", w.down.code);
		}
	for (int i = 0; i < N; i++)
		pc_actor_release(current(rt, c[i], ROUNDS + 1));
	quiesce(rt);
	cr_assert_eq(LOAD(w.downs), 0);
	pc_actor_release(sup);
	pc_actor_release(watcher);
	FREE_RUNTIME_CHECKED(rt);
	for (int i = 0; i < N; i++) {
		for (int k = 0; k < ROUNDS; k++)
			cr_assert_eq(c[i]->probe[k].reason, PC_EXIT_ERROR);
		free(c[i]);
	}
}
