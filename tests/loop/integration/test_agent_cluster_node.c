/*
 * The agent as a node of a cluster (agents/agent.h, pc_agent_cluster_join;
 * docs/cluster.md), through the real session, run and attempt actors, the
 * embedded mock LLM and a store whose node table the test writes as the
 * node's heartbeat would:
 *
 * - past its deadline a node starts no tool (the model reads why), and
 *   starts tools again once renewed;
 * - a lapse stops the session's run; a queued run is claimed before it
 *   starts: one another node took over meanwhile ends here without
 *   running and without a word to the store, one still the node's own
 *   runs;
 * - a node out of the node table takes no session lease: its run waits
 *   until the node is live again, and is claimed before it starts (another
 *   node may have taken it meanwhile);
 * - a run that began on a node lost meanwhile ends node_lost where it is
 *   taken over, replay-invalid when a call of a mutating tool of it is in
 *   the transcript (its result written or not), not when it called none or
 *   only read-only ones.
 */
#include <criterion/criterion.h>

#include "agent_harness.h"

TestSuite(agent_cluster_node, .timeout = 90);

static int touched, hung;

/* A mutating tool of the embedding program: counts its calls. */
static int touch_call(void *user, const cJSON *args, const pc_tool_env_t *env, pc_tool_output_t *out)
{
	(void)user, (void)args, (void)env;
	__atomic_add_fetch(&touched, 1, __ATOMIC_RELAXED);
	out->text = strdup("touched");
	return out->text ? 0 : PC_ENOMEM;
}

/* A read-only one. */
static int peek_call(void *user, const cJSON *args, const pc_tool_env_t *env, pc_tool_output_t *out)
{
	(void)user, (void)args, (void)env;
	out->text = strdup("peeked");
	return out->text ? 0 : PC_ENOMEM;
}

/* A mutating one that never finishes (its run's abort ends it): a node
 * lost during it leaves its call without a result. */
static int hang_start(void *user, pc_tool_task_t *t, const cJSON *args, const pc_tool_env_t *env)
{
	(void)user, (void)t, (void)args, (void)env;
	__atomic_add_fetch(&hung, 1, __ATOMIC_RELAXED);
	return 0;
}

#define NODE_LEASE_MS 600000

typedef struct node_fx {
	harness_t h;
	pc_tool_registry_t *tools;
	/* the node that took this one's runs over (lose_node), or NULL */
	pc_agent_t *taker;
	pc_tool_registry_t *taker_tools;
} node_fx_t;

/* The node's heartbeat as the cluster's actor records it. */
static void beat(node_fx_t *f, int64_t lease_ms)
{
	cr_assert_eq(pc_store_node_beat(f->h.store, "node-1", "http://127.0.0.1:1", pc_agent_owner(f->h.agent),
					lease_ms, false, NULL),
		     0);
}

/* A node's tools (each node has its own registry). */
static pc_tool_registry_t *node_tools(void)
{
	pc_tool_registry_t *r = NULL;
	cr_assert_eq(pc_tool_registry_new(&r), 0);
	const pc_tool_def_t defs[] = {
		{.name = "touch", .description = "touches", .call = touch_call, .mutating = true},
		{.name = "peek", .description = "peeks", .call = peek_call},
		{.name = "hang", .description = "hangs", .start = hang_start, .mutating = true},
	};
	for (size_t i = 0; i < sizeof(defs) / sizeof(defs[0]); i++)
		cr_assert_eq(pc_tool_register(r, &defs[i]), 0);
	return r;
}

static void node_start(node_fx_t *f, const char *scenario)
{
	memset(f, 0, sizeof(*f));
	__atomic_store_n(&touched, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&hung, 0, __ATOMIC_RELAXED);
	f->tools = node_tools();
	harness_start_with(&f->h, HARNESS_CONFIG, scenario, f->tools);
	pc_agent_cluster_join(f->h.agent);
	beat(f, NODE_LEASE_MS);
	pc_agent_node_renewed(f->h.agent, pc_runtime_now_ms() + NODE_LEASE_MS);
}

static void node_stop(node_fx_t *f)
{
	pc_agent_free(f->taker, 10000);
	harness_stop_no_leaks(&f->h);
	pc_tool_registry_free(f->tools);
	pc_tool_registry_free(f->taker_tools);
}

#define TOUCH_THEN(text) \
	"{\"kind\":\"tool_calls\",\"tool_calls\":[{\"name\":\"touch\"}]},{\"text\":\"" text "\"}"

Test(agent_cluster_node, past_its_deadline_a_node_starts_no_tool)
{
	node_fx_t f;
	/* each run reads the steps from the first (the mock keeps a cursor
	 * per session of its own, one per run here) */
	node_start(&f, "{\"steps\":[" TOUCH_THEN("done") "]}");
	/* the deadline passed; the store still counts the node live (its
	 * lease there runs longer), so the run has its session lease */
	pc_agent_node_renewed(f.h.agent, 1);
	cr_assert_not(pc_agent_node_live(f.h.agent));
	char run[80];
	cr_assert_eq(submit(&f.h, "s", "go", run), PC_AGENT_STARTED);
	cJSON *d = finish_of(&f.h, run, 20000);
	cr_assert_str_eq(payload_text(d), "done");
	cJSON_Delete(d);
	cr_assert_eq(__atomic_load_n(&touched, __ATOMIC_RELAXED), 0, "the tool ran past the deadline");
	cJSON *reqs = mock_requests(&f.h);
	char *body = request_text(reqs, 1);
	cr_assert_not_null(strstr(body, "lease lapsed"), "the model was not told why: %s", body);
	cJSON_free(body);
	cJSON_Delete(reqs);
	pc_agent_stats_t st;
	pc_agent_stats(f.h.agent, &st);
	cr_assert_eq(st.tools_fenced, 1);
	/* renewed: tools start again */
	pc_agent_node_renewed(f.h.agent, pc_runtime_now_ms() + NODE_LEASE_MS);
	cr_assert_eq(submit(&f.h, "s", "again", run), PC_AGENT_STARTED);
	d = finish_of(&f.h, run, 20000);
	cr_assert_str_eq(payload_text(d), "done");
	cJSON_Delete(d);
	cr_assert_eq(__atomic_load_n(&touched, __ATOMIC_RELAXED), 1);
	node_stop(&f);
}

#define SLOW_FIRST "first [[mock:{\"text\":\"never\",\"ttft_ms\":20000}]]"

/* r1 running (its model still thinking), r2 queued behind it. */
static void running_and_queued(node_fx_t *f, char *r1, char *r2)
{
	cr_assert_eq(submit(&f->h, "s", SLOW_FIRST, r1), PC_AGENT_STARTED);
	AWAIT(request_count(&f->h) == 1, 10000);
	cr_assert_eq(submit_mode(&f->h, "s", "second [[mock:{\"text\":\"the second\"}]]", "followup", r2),
		     PC_AGENT_QUEUED);
	pc_agent_stats_t st;
	pc_agent_stats(f->h.agent, &st);
	cr_assert_eq(st.leases_held, 1);
}

Test(agent_cluster_node, a_run_taken_over_during_a_lapse_does_not_start_here)
{
	node_fx_t f;
	node_start(&f, "{}");
	char r1[80], r2[80];
	running_and_queued(&f, r1, r2);
	/* the node is gone for the others, and one of them takes r2 over */
	beat(&f, 0);
	cr_assert_eq(pc_store_run_adopt(f.h.store, r2, pc_agent_owner(f.h.agent), "another-node"), 0);
	cr_assert_eq(pc_agent_node_lapsed(f.h.agent), 1);
	pc_agent_wait_result_t w1 = wait_run(&f.h, r1, 20000);
	cr_assert_eq(w1.run.status, PC_RUN_STATUS_ABORTED, "r1: %s", pc_run_status_name(w1.run.status));
	/* out of the node table, it takes no lease: r2 waits */
	sleep_ms(300);
	pc_run_info_t info;
	cr_assert_eq(pc_agent_run_info(f.h.agent, r2, &info), 0);
	cr_assert_eq(info.status, PC_RUN_STATUS_QUEUED, "r2 went on while the node was out: %s",
		     pc_run_status_name(info.status));
	pc_agent_stats_t st;
	pc_agent_stats(f.h.agent, &st);
	cr_assert_eq(st.leases_held, 0, "the lapse left a lease counted");
	/* live again: r2 is claimed, found another node's, and ends here */
	beat(&f, NODE_LEASE_MS);
	pc_agent_node_renewed(f.h.agent, pc_runtime_now_ms() + NODE_LEASE_MS);
	pc_agent_wait_result_t w2 = wait_run(&f.h, r2, 20000);
	cr_assert_eq(w2.run.status, PC_RUN_STATUS_ERROR, "r2: %s", pc_run_status_name(w2.run.status));
	cr_assert_not_null(strstr(w2.run.error, "taken over"), "%s", w2.run.error);
	cr_assert_eq(request_count(&f.h), 1, "r2 ran here too");
	/* its row is the other node's, still open */
	pc_store_reply_t r;
	cr_assert_eq(pc_store_run_get(f.h.store, r2, &r), 0);
	cr_assert_eq(r.status, PC_STORE_RUN_ACCEPTED);
	pc_agent_stats(f.h.agent, &st);
	cr_assert_eq(st.node_lapses, 1);
	node_stop(&f);
}

Test(agent_cluster_node, a_lapsed_node_claims_its_own_queued_run_and_runs_it)
{
	node_fx_t f;
	node_start(&f, "{}");
	char r1[80], r2[80];
	running_and_queued(&f, r1, r2);
	cr_assert_eq(pc_agent_node_lapsed(f.h.agent), 1);
	cr_assert_eq(wait_run(&f.h, r1, 20000).run.status, PC_RUN_STATUS_ABORTED);
	pc_agent_wait_result_t w2 = wait_run(&f.h, r2, 20000);
	cr_assert_eq(w2.status, PC_AGENT_WAIT_OK, "r2: %s %s", pc_run_status_name(w2.run.status), w2.run.error);
	cr_assert_eq(request_count(&f.h), 2);
	pc_store_reply_t r;
	cr_assert_eq(pc_store_run_get(f.h.store, r2, &r), 0);
	cr_assert_eq(r.status, PC_STORE_RUN_OK);
	node_stop(&f);
}

Test(agent_cluster_node, a_run_accepted_while_out_of_the_cluster_is_claimed_before_it_starts)
{
	node_fx_t f;
	node_start(&f, "{}");
	beat(&f, 0); /* the store counts the node out */
	char r1[80];
	cr_assert_eq(submit(&f.h, "s", "hello", r1), PC_AGENT_STARTED);
	sleep_ms(200);
	pc_run_info_t info;
	cr_assert_eq(pc_agent_run_info(f.h.agent, r1, &info), 0);
	cr_assert_neq(info.status, PC_RUN_STATUS_RUNNING, "it ran with no lease");
	/* another node, seeing no live owner, takes the run */
	cr_assert_eq(pc_store_run_adopt(f.h.store, r1, pc_agent_owner(f.h.agent), "another-node"), 0);
	beat(&f, NODE_LEASE_MS);
	pc_agent_wait_result_t w = wait_run(&f.h, r1, 20000);
	cr_assert_eq(w.run.status, PC_RUN_STATUS_ERROR, "r1: %s", pc_run_status_name(w.run.status));
	cr_assert_not_null(strstr(w.run.error, "taken over"), "%s", w.run.error);
	cr_assert_eq(request_count(&f.h), 0, "it ran here too");
	/* the next message is the node's own, and runs */
	char r2[80];
	cr_assert_eq(submit(&f.h, "s", "again", r2), PC_AGENT_STARTED);
	cr_assert_eq(wait_run(&f.h, r2, 20000).status, PC_AGENT_WAIT_OK);
	node_stop(&f);
}

/* A run waiting for the global lane when the node lapses asks for its
 * lease again and runs once the lane lets it, rather than wait for a lease
 * answer that never comes. */
Test(agent_cluster_node, a_run_waiting_for_the_lane_through_a_lapse_still_runs)
{
	node_fx_t f = {0};
	__atomic_store_n(&touched, 0, __ATOMIC_RELAXED);
	cr_assert_eq(pc_tool_registry_new(&f.tools), 0);
	harness_start_with(&f.h,
			   "{\"providers\":{\"mock\":{\"api\":\"openai-completions\",\"embedded\":true,\"apiKey\":\"k\"}},"
			   "\"agents\":{\"defaults\":{\"model\":\"mock/m1\",\"maxConcurrent\":1}}}",
			   "{}", f.tools);
	pc_agent_cluster_join(f.h.agent);
	beat(&f, NODE_LEASE_MS);
	pc_agent_node_renewed(f.h.agent, pc_runtime_now_ms() + NODE_LEASE_MS);
	char r1[80], r2[80];
	cr_assert_eq(submit(&f.h, "a", SLOW_FIRST, r1), PC_AGENT_STARTED);
	AWAIT(request_count(&f.h) == 1, 10000);
	cr_assert_eq(submit(&f.h, "b", "second [[mock:{\"text\":\"the second\"}]]", r2), PC_AGENT_STARTED);
	sleep_ms(100); /* b has its lease, and waits for the lane */
	cr_assert_eq(pc_agent_node_lapsed(f.h.agent), 2);
	cr_assert_eq(wait_run(&f.h, r1, 20000).run.status, PC_RUN_STATUS_ABORTED);
	pc_agent_wait_result_t w2 = wait_run(&f.h, r2, 20000);
	cr_assert_eq(w2.status, PC_AGENT_WAIT_OK, "r2: %s %s", pc_run_status_name(w2.run.status), w2.run.error);
	node_stop(&f);
}

/* ---- a begun run of a lost node ---- */

/* Each run's first model call answers as its message's marker says; a
 * second one (after a tool) thinks until the run is stopped. */
#define SLOW_AFTER_A_TOOL "{\"steps\":[{\"text\":\"never\",\"ttft_ms\":20000}]}"
#define CALLING(tool) "go [[mock:{\"kind\":\"tool_calls\",\"tool_calls\":[{\"name\":\"" tool "\"}]}]]"

static bool roles_are(node_fx_t *f, const char *key, const char *roles)
{
	char got[128];
	history_roles(&f->h, key, got, sizeof(got));
	return !strcmp(got, roles);
}

/* Submits `msg` to session `key` and waits until its transcript's roles
 * are `roles` (committed: what another node would read). */
static void run_until(node_fx_t *f, const char *key, const char *msg, const char *roles, char *run)
{
	cr_assert_eq(submit(&f->h, key, msg, run), PC_AGENT_STARTED);
	AWAIT(roles_are(f, key, roles), 10000);
}

typedef struct lost {
	const char *owner;
	int done;
} lost_t;

static bool lost_owns(void *arg, const pc_store_open_run_t *o)
{
	const lost_t *l = arg;
	return o->owner && !strcmp(o->owner, l->owner);
}

static void lost_done(void *arg)
{
	__atomic_store_n(&((lost_t *)arg)->done, 1, __ATOMIC_RELEASE);
}

/* The node leaves the table (lost, for the others), and another agent on
 * the store (f->taker) takes its runs over, as the cluster's scan has a
 * live node do. */
static void lose_node(node_fx_t *f)
{
	beat(f, 0);
	char locks[128];
	snprintf(locks, sizeof(locks), "%s/locks", f->h.dir);
	f->taker_tools = node_tools();
	pc_agent_options_t o = {.rt = f->h.rt, .io = f->h.io, .store = f->h.store, .config = f->h.cfg,
				.lock_dir = locks, .embedded_llm = &harness_mock_llm, .tools = f->taker_tools};
	cr_assert_eq(pc_agent_new(&o, &f->taker), 0);
	lost_t l = {.owner = pc_agent_owner(f->h.agent)};
	cr_assert_eq(pc_agent_take_over(f->taker, lost_owns, &l, lost_done, NULL, 0), 0);
	AWAIT(__atomic_load_n(&l.done, __ATOMIC_ACQUIRE), 10000);
}

/* Run `run` as the node that took it over reads it, and as its row has it:
 * ended node_lost; returns whether it is replay-invalid, in both. */
static bool ended_node_lost(node_fx_t *f, const char *run)
{
	pc_agent_wait_result_t w;
	cr_assert_eq(pc_agent_wait(f->taker, run, 1000, &w), 0);
	cr_assert_eq(w.status, PC_AGENT_WAIT_ERROR, "%s: %s", run, pc_run_status_name(w.run.status));
	cr_assert_not_null(strstr(w.run.error, "node loss"), "%s", w.run.error);
	pc_store_reply_t r;
	cr_assert_eq(pc_store_run_get(f->h.store, run, &r), 0);
	cr_assert_eq(r.status, PC_STORE_RUN_ERROR);
	cr_assert_str_eq(r.code, "node_lost");
	cr_assert_eq((r.flags & PC_STORE_REPLAY_INVALID) != 0, w.run.replay_invalid);
	return w.run.replay_invalid;
}

Test(agent_cluster_node, a_run_lost_after_a_mutating_call_ends_node_lost_replay_invalid)
{
	node_fx_t f;
	node_start(&f, SLOW_AFTER_A_TOOL);
	char wrote[80], writing[80];
	/* the tool ran and its result is written; the model thinks on */
	run_until(&f, "wrote", CALLING("touch"), "user,assistant,toolResult", wrote);
	cr_assert_eq(__atomic_load_n(&touched, __ATOMIC_RELAXED), 1);
	/* the tool started and has no result yet */
	run_until(&f, "writing", CALLING("hang"), "user,assistant", writing);
	AWAIT(__atomic_load_n(&hung, __ATOMIC_RELAXED) == 1, 10000);
	lose_node(&f);
	cr_assert(ended_node_lost(&f, wrote), "a run whose mutating tool ran is replayable");
	cr_assert(ended_node_lost(&f, writing), "a run whose mutating tool started is replayable");
	pc_agent_stats_t st;
	pc_agent_stats(f.taker, &st);
	cr_assert_eq(st.runs_taken_over, 2);
	node_stop(&f);
}

Test(agent_cluster_node, a_run_lost_before_any_tool_or_after_read_only_ones_is_not_replay_invalid)
{
	node_fx_t f;
	node_start(&f, SLOW_AFTER_A_TOOL);
	char quiet[80], peeked[80];
	run_until(&f, "quiet", SLOW_FIRST, "user", quiet);
	AWAIT(request_count(&f.h) == 1, 10000);
	run_until(&f, "peeked", CALLING("peek"), "user,assistant,toolResult", peeked);
	lose_node(&f);
	cr_assert_not(ended_node_lost(&f, quiet));
	cr_assert_not(ended_node_lost(&f, peeked));
	node_stop(&f);
}
