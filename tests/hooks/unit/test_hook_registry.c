/*
 * The hook registry: point names both ways, which points decide, the
 * checks on registration, run order (descending priority, registration
 * order within a priority, observed by running a chain), matchers and
 * pc_hooks_active, and sealing after the first run.
 */
#include <criterion/criterion.h>

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "agents/hooks/hooks.h"
#include "test_util.h"

static pthread_mutex_t order_lock = PTHREAD_MUTEX_INITIALIZER;
static char order[256]; /* names of the handlers as they ran */

/* Appends its name (user) to `order`; answers nothing. */
static int record(void *user, const pc_hook_call_t *call, cJSON **result)
{
	(void)call;
	(void)result;
	pthread_mutex_lock(&order_lock);
	size_t n = strlen(order);
	snprintf(order + n, sizeof(order) - n, "%s%s", n ? "," : "", (const char *)user);
	pthread_mutex_unlock(&order_lock);
	return 0;
}

static void take_order(char *out, size_t n)
{
	pthread_mutex_lock(&order_lock);
	snprintf(out, n, "%s", order);
	order[0] = '\0';
	pthread_mutex_unlock(&order_lock);
}

static uint32_t dones;

static int owner_receive(pc_ctx_t *ctx, void *state, pc_msg_t *msg)
{
	(void)ctx;
	(void)state;
	if (msg->type == PC_MSG_HOOK_DONE)
		INC(dones);
	return 0;
}

static const pc_behavior_t owner_b = {.name = "owner", .receive = owner_receive};

static void reg(pc_hooks_t *h, pc_hook_point_t p, int priority, const char *name)
{
	pc_hook_def_t d = {.point = p, .priority = priority, .fn = record, .user = (void *)name};
	cr_assert_eq(pc_hooks_register(h, &d), 0, "%s", name);
}

static void reg_matched(pc_hooks_t *h, pc_hook_point_t p, const char *name, const char *const *m, size_t n)
{
	pc_hook_def_t d = {.point = p, .matcher = m, .matcher_count = n, .fn = record, .user = (void *)name};
	cr_assert_eq(pc_hooks_register(h, &d), 0, "%s", name);
}

/* Runs the chain and returns the order its handlers ran in. */
static void run_order(pc_runtime_t *rt, pc_actor_t *owner, pc_hooks_t *h, pc_hook_point_t p, const char *match,
		      char *out, size_t n)
{
	uint32_t before = LOAD(dones);
	cr_assert_eq(pc_hooks_run(rt, h, p, NULL, NULL, match, owner, 0), 0);
	AWAIT(LOAD(dones) == before + 1, 5000);
	take_order(out, n);
}

Test(hook_registry, point_names_both_ways)
{
	for (unsigned i = 0; i < PC_HOOK__COUNT; i++) {
		const char *name = pc_hook_point_name((pc_hook_point_t)i);
		pc_hook_point_t back = PC_HOOK__COUNT;
		cr_assert_eq(pc_hook_point_from_name(name, &back), 0, "%s", name);
		cr_assert_eq(back, (pc_hook_point_t)i);
	}
	cr_assert_str_eq(pc_hook_point_name(PC_HOOK_BEFORE_TOOL_CALL), "before_tool_call");
	cr_assert_str_eq(pc_hook_point_name(PC_HOOK_GATEWAY_STOP), "gateway_stop");
	cr_assert_str_eq(pc_hook_point_name(PC_HOOK__COUNT), "none");
	cr_assert_str_eq(pc_hook_point_name((pc_hook_point_t)-1), "none");
	pc_hook_point_t p;
	cr_assert_eq(pc_hook_point_from_name("before_install", &p), PC_ENOTFOUND);
	cr_assert_eq(pc_hook_point_from_name("Before_Tool_Call", &p), PC_ENOTFOUND);
	cr_assert_eq(pc_hook_point_from_name(NULL, &p), PC_EINVAL);
	cr_assert_eq(pc_hook_point_from_name("agent_end", NULL), PC_EINVAL);
}

Test(hook_registry, decision_points)
{
	const pc_hook_point_t decide[] = {PC_HOOK_BEFORE_MODEL_RESOLVE, PC_HOOK_BEFORE_PROMPT_BUILD,
					  PC_HOOK_BEFORE_AGENT_RUN,     PC_HOOK_BEFORE_AGENT_REPLY,
					  PC_HOOK_BEFORE_AGENT_FINALIZE, PC_HOOK_BEFORE_TOOL_CALL,
					  PC_HOOK_TOOL_RESULT_PERSIST,  PC_HOOK_MESSAGE_SENDING};
	unsigned n = 0;
	for (unsigned i = 0; i < PC_HOOK__COUNT; i++)
		n += pc_hook_point_is_decision((pc_hook_point_t)i);
	cr_assert_eq(n, sizeof(decide) / sizeof(decide[0]));
	for (size_t i = 0; i < sizeof(decide) / sizeof(decide[0]); i++)
		cr_assert(pc_hook_point_is_decision(decide[i]), "%s", pc_hook_point_name(decide[i]));
	cr_assert_not(pc_hook_point_is_decision(PC_HOOK_AFTER_TOOL_CALL));
	cr_assert(pc_hook_point_has_matcher(PC_HOOK_BEFORE_TOOL_CALL));
	cr_assert(pc_hook_point_has_matcher(PC_HOOK_AFTER_TOOL_CALL));
	cr_assert_not(pc_hook_point_has_matcher(PC_HOOK_TOOL_RESULT_PERSIST));
}

Test(hook_registry, registration_checks)
{
	pc_hooks_t *h = NULL;
	cr_assert_eq(pc_hooks_new(&h), 0);
	cr_assert_eq(pc_hooks_new(NULL), PC_EINVAL);
	const char *names[] = {"exec"};
	const char *empty[] = {""};
	const char *holes[] = {"exec", NULL};
	pc_hook_def_t bad[] = {
		{.point = PC_HOOK_AGENT_END},                                        /* no fn */
		{.point = PC_HOOK__COUNT, .fn = record},                             /* no such point */
		{.point = (pc_hook_point_t)-3, .fn = record},
		{.point = PC_HOOK_AGENT_END, .fn = record, .matcher = names, .matcher_count = 1}, /* not a tool point */
		{.point = PC_HOOK_BEFORE_TOOL_CALL, .fn = record, .matcher = names, .matcher_count = 0},
		{.point = PC_HOOK_BEFORE_TOOL_CALL, .fn = record, .matcher = empty, .matcher_count = 1},
		{.point = PC_HOOK_BEFORE_TOOL_CALL, .fn = record, .matcher = holes, .matcher_count = 2},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		cr_assert_eq(pc_hooks_register(h, &bad[i]), PC_EINVAL, "definition %zu", i);
	cr_assert_eq(pc_hooks_register(h, NULL), PC_EINVAL);
	cr_assert_eq(pc_hooks_register(NULL, &bad[0]), PC_EINVAL);
	for (unsigned i = 0; i < PC_HOOK__COUNT; i++)
		cr_assert_eq(pc_hooks_count(h, (pc_hook_point_t)i), 0u);
	pc_hook_def_t ok = {.point = PC_HOOK_BEFORE_TOOL_CALL, .fn = record, .matcher = names, .matcher_count = 1};
	cr_assert_eq(pc_hooks_register(h, &ok), 0);
	cr_assert_eq(pc_hooks_count(h, PC_HOOK_BEFORE_TOOL_CALL), 1u);
	cr_assert_eq(pc_hooks_count(NULL, PC_HOOK_BEFORE_TOOL_CALL), 0u);
	pc_hooks_free(h);
	pc_hooks_free(NULL);
}

Test(hook_registry, order_by_priority_then_registration)
{
	pc_runtime_t *rt = start_rt(2);
	pc_actor_t *owner = NULL;
	cr_assert_eq(pc_spawn(rt, &owner_b, NULL, &owner), 0);
	pc_hooks_t *h = NULL;
	cr_assert_eq(pc_hooks_new(&h), 0);
	reg(h, PC_HOOK_BEFORE_MODEL_RESOLVE, 0, "a0");
	reg(h, PC_HOOK_BEFORE_MODEL_RESOLVE, 10, "b10");
	reg(h, PC_HOOK_BEFORE_MODEL_RESOLVE, -5, "c-5");
	reg(h, PC_HOOK_BEFORE_MODEL_RESOLVE, 10, "d10");
	reg(h, PC_HOOK_BEFORE_MODEL_RESOLVE, 0, "e0");
	reg(h, PC_HOOK_BEFORE_MODEL_RESOLVE, 3, "f3");
	reg(h, PC_HOOK_BEFORE_MODEL_RESOLVE, 10, "g10");
	reg(h, PC_HOOK_AGENT_END, 0, "other point");
	char got[256];
	run_order(rt, owner, h, PC_HOOK_BEFORE_MODEL_RESOLVE, NULL, got, sizeof(got));
	cr_assert_str_eq(got, "b10,d10,g10,f3,a0,e0,c-5");
	/* The same order every time. */
	run_order(rt, owner, h, PC_HOOK_BEFORE_MODEL_RESOLVE, NULL, got, sizeof(got));
	cr_assert_str_eq(got, "b10,d10,g10,f3,a0,e0,c-5");
	pc_actor_stop(owner, PC_EXIT_NORMAL);
	pc_actor_release(owner);
	pc_runtime_free(rt);
	pc_hooks_free(h);
	ASSERT_NO_LEAKS();
}

Test(hook_registry, matchers_and_active)
{
	pc_hooks_t *h = NULL;
	cr_assert_eq(pc_hooks_new(&h), 0);
	cr_assert_not(pc_hooks_active(NULL, PC_HOOK_BEFORE_TOOL_CALL, "exec"));
	cr_assert_not(pc_hooks_active(h, PC_HOOK_BEFORE_TOOL_CALL, "exec"));
	cr_assert_not(pc_hooks_active(h, PC_HOOK_BEFORE_TOOL_CALL, NULL));
	const char *fs[] = {"read", "write"};
	reg_matched(h, PC_HOOK_BEFORE_TOOL_CALL, "fs", fs, 2);
	cr_assert(pc_hooks_active(h, PC_HOOK_BEFORE_TOOL_CALL, "read"));
	cr_assert(pc_hooks_active(h, PC_HOOK_BEFORE_TOOL_CALL, "write"));
	cr_assert_not(pc_hooks_active(h, PC_HOOK_BEFORE_TOOL_CALL, "exec"));
	cr_assert_not(pc_hooks_active(h, PC_HOOK_BEFORE_TOOL_CALL, "rea"));
	cr_assert(pc_hooks_active(h, PC_HOOK_BEFORE_TOOL_CALL, NULL), "NULL matches every handler");
	cr_assert_not(pc_hooks_active(h, PC_HOOK_AFTER_TOOL_CALL, "read"));
	cr_assert_not(pc_hooks_active(h, PC_HOOK__COUNT, "read"));
	const char *ex[] = {"exec"};
	reg_matched(h, PC_HOOK_BEFORE_TOOL_CALL, "exec only", ex, 1);
	reg(h, PC_HOOK_AFTER_TOOL_CALL, 0, "all after");
	cr_assert(pc_hooks_active(h, PC_HOOK_BEFORE_TOOL_CALL, "exec"));
	cr_assert_not(pc_hooks_active(h, PC_HOOK_BEFORE_TOOL_CALL, "fetch"));
	cr_assert(pc_hooks_active(h, PC_HOOK_AFTER_TOOL_CALL, "fetch"));

	/* The chain runs only the handlers that match. */
	pc_runtime_t *rt = start_rt(2);
	pc_actor_t *owner = NULL;
	cr_assert_eq(pc_spawn(rt, &owner_b, NULL, &owner), 0);
	reg(h, PC_HOOK_BEFORE_TOOL_CALL, -1, "all before");
	char got[256];
	run_order(rt, owner, h, PC_HOOK_BEFORE_TOOL_CALL, "write", got, sizeof(got));
	cr_assert_str_eq(got, "fs,all before");
	run_order(rt, owner, h, PC_HOOK_BEFORE_TOOL_CALL, "exec", got, sizeof(got));
	cr_assert_str_eq(got, "exec only,all before");
	run_order(rt, owner, h, PC_HOOK_BEFORE_TOOL_CALL, NULL, got, sizeof(got));
	cr_assert_str_eq(got, "fs,exec only,all before");
	pc_actor_stop(owner, PC_EXIT_NORMAL);
	pc_actor_release(owner);
	pc_runtime_free(rt);
	pc_hooks_free(h);
	ASSERT_NO_LEAKS();
}

/* The first run seals the registry: its entries are shared from then on. */
Test(hook_registry, sealed_after_first_run)
{
	pc_runtime_t *rt = start_rt(1);
	pc_actor_t *owner = NULL;
	cr_assert_eq(pc_spawn(rt, &owner_b, NULL, &owner), 0);
	pc_hooks_t *h = NULL;
	cr_assert_eq(pc_hooks_new(&h), 0);
	reg(h, PC_HOOK_AGENT_END, 0, "x");
	/* A run that finds nothing to do seals nothing. */
	cr_assert_eq(pc_hooks_run(rt, h, PC_HOOK_SESSION_END, NULL, NULL, NULL, owner, 0), PC_ENOTFOUND);
	reg(h, PC_HOOK_AGENT_END, 0, "y");
	char got[64];
	run_order(rt, owner, h, PC_HOOK_AGENT_END, NULL, got, sizeof(got));
	cr_assert(strcmp(got, "x,y") == 0 || strcmp(got, "y,x") == 0, "%s", got);
	pc_hook_def_t d = {.point = PC_HOOK_AGENT_END, .fn = record, .user = (void *)"late"};
	cr_assert_eq(pc_hooks_register(h, &d), PC_ESTATE);
	cr_assert_eq(pc_hooks_count(h, PC_HOOK_AGENT_END), 2u);
	pc_actor_stop(owner, PC_EXIT_NORMAL);
	pc_actor_release(owner);
	pc_runtime_free(rt);
	pc_hooks_free(h);
	ASSERT_NO_LEAKS();
}

/* The empty chain is the common case, checked per tool call: it must stay
 * a couple of loads (a loose bound that holds under sanitizers). */
Test(hook_registry, active_is_cheap_when_empty)
{
	pc_hooks_t *h = NULL;
	cr_assert_eq(pc_hooks_new(&h), 0);
	reg(h, PC_HOOK_AGENT_END, 0, "elsewhere");
	const char *volatile name = "exec";
	uint64_t hits = 0, t0 = now_ms();
	for (uint32_t i = 0; i < 10000000u; i++)
		hits += pc_hooks_active(h, PC_HOOK_BEFORE_TOOL_CALL, name);
	uint64_t took = now_ms() - t0;
	cr_assert_eq(hits, 0u);
	cr_assert_lt(took, 2000u, "10M empty checks took %llu ms", (unsigned long long)took);
	pc_hooks_free(h);
}
