/*
 * A tool call's lifecycle (agents/attempt/tool_call_lifecycle.h): its
 * transition table, and PINCER_TRACE=tool_call's lines from live turns: a
 * call that runs, one the agent's allow-list refuses, and one aborted
 * while its tool runs.
 */
#include <criterion/criterion.h>

#include "agent_harness.h"
#include "agents/attempt/tool_call_lifecycle.h"
#include "agents/hooks/hooks.h"
#include "trace_capture.h"

TestSuite(tool_call_lifecycle, .timeout = 60);

Test(tool_call_lifecycle, every_state_has_a_name)
{
	for (int s = 0; s < PC_TC_LC_COUNT; s++)
		cr_assert_str_neq(pc_tc_lc_name((pc_tc_lc_t)s), "unknown", "state %d", s);
	cr_assert_str_eq(pc_tc_lc_name(PC_TC_LC_COUNT), "unknown");
	cr_assert_str_eq(pc_tc_lc_name(PC_TC_LC_PERSIST), "persist");
	cr_assert_eq(pc_trace_parse("tool_call"), (unsigned)PC_TRACE_TOOL_CALL);
}

Test(tool_call_lifecycle, the_table_allows_a_call_through_and_refuses_the_rest)
{
	static const struct {
		pc_tc_lc_t from, to;
		bool legal;
	} cases[] = {
		{PC_TC_LC_WAITING, PC_TC_LC_RUNNING, true},
		{PC_TC_LC_WAITING, PC_TC_LC_GATE, true},
		{PC_TC_LC_WAITING, PC_TC_LC_REFUSED, true}, /* not allowed, a loop block */
		{PC_TC_LC_WAITING, PC_TC_LC_SKIPPED, true},
		{PC_TC_LC_WAITING, PC_TC_LC_ABORTED, true}, /* its batch waiting to be durable */
		{PC_TC_LC_WAITING, PC_TC_LC_DONE, false},   /* no result without its tool */
		{PC_TC_LC_GATE, PC_TC_LC_RUNNING, true},
		{PC_TC_LC_GATE, PC_TC_LC_ABORTED, true},
		{PC_TC_LC_GATE, PC_TC_LC_SKIPPED, false},
		{PC_TC_LC_RUNNING, PC_TC_LC_DONE, true},
		{PC_TC_LC_RUNNING, PC_TC_LC_PERSIST, true},
		{PC_TC_LC_RUNNING, PC_TC_LC_ABORTED, false}, /* a running tool answers, aborted or not */
		{PC_TC_LC_RUNNING, PC_TC_LC_GATE, false},
		{PC_TC_LC_PERSIST, PC_TC_LC_DONE, true},
		{PC_TC_LC_PERSIST, PC_TC_LC_RUNNING, false},
		{PC_TC_LC_DONE, PC_TC_LC_DONE, false},
		{PC_TC_LC_REFUSED, PC_TC_LC_RUNNING, false},
		{PC_TC_LC_COUNT, PC_TC_LC_DONE, false},
		{PC_TC_LC_WAITING, PC_TC_LC_COUNT, false},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		cr_assert_eq(pc_tc_lc_legal(cases[i].from, cases[i].to), cases[i].legal, "%s -> %s",
			     pc_tc_lc_name(cases[i].from), pc_tc_lc_name(cases[i].to));
	for (int f = 0; f < PC_TC_LC_COUNT; f++)
		for (int t = 0; pc_tc_lc_terminal((pc_tc_lc_t)f) && t < PC_TC_LC_COUNT; t++)
			cr_assert(!pc_tc_lc_legal((pc_tc_lc_t)f, (pc_tc_lc_t)t), "%s", pc_tc_lc_name((pc_tc_lc_t)f));
}

#define SLEEP_CALL(ms)                                                                             \
	"{\"steps\":[{\"kind\":\"tool_calls\",\"tool_calls\":[{\"name\":\"sleep\","                    \
	"\"arguments\":{\"ms\":" #ms "}}]},{\"text\":\"slept\"}]}"

/* The traced calls of run `run`'s first attempt (one call in each test). */
static void calls_of(const char *log, const char *run, char *got, size_t cap)
{
	char id[128];
	snprintf(id, sizeof(id), "%s/0/", run);
	trace_of(log, "tool_call", id, got, cap);
}

Test(tool_call_lifecycle, a_call_runs_then_is_done)
{
	trace_capture_t c;
	trace_capture_begin(&c, "tool_call");
	harness_t h;
	harness_start(&h, SLEEP_CALL(1));
	trace_capture_started(&c);
	char run[80];
	cr_assert_eq(submit(&h, "s", "nap", run), PC_AGENT_STARTED);
	cJSON *d = finish_of(&h, run, 30000);
	cr_assert_str_eq(jstr(d, "status"), "ok");
	cJSON_Delete(d);
	harness_stop(&h);
	char *log = trace_capture_end(&c);
	char got[1024];
	calls_of(log, run, got, sizeof(got));
	cr_assert_str_eq(got, "waiting -> running (launch); running -> done (ok)", "log:\n%s", log);
	free(log);
}

#define ALLOW_READ_CONFIG                                                                          \
	"{\"providers\":{\"mock\":{\"api\":\"openai-completions\",\"embedded\":true,\"apiKey\":\"k\"}}," \
	"\"agents\":{\"defaults\":{\"model\":\"mock/m1\",\"tools\":{\"allow\":[\"read\"]}}}}"

Test(tool_call_lifecycle, a_call_the_agent_does_not_allow_is_refused_before_it_runs)
{
	trace_capture_t c;
	trace_capture_begin(&c, "tool_call");
	harness_t h;
	harness_start_with(&h, ALLOW_READ_CONFIG, SLEEP_CALL(1), NULL);
	trace_capture_started(&c);
	char run[80];
	cr_assert_eq(submit(&h, "s", "nap", run), PC_AGENT_STARTED);
	cJSON_Delete(finish_of(&h, run, 30000));
	harness_stop(&h);
	char *log = trace_capture_end(&c);
	char got[1024];
	calls_of(log, run, got, sizeof(got));
	cr_assert_str_eq(got, "waiting -> refused (not allowed)", "log:\n%s", log);
	free(log);
}

Test(tool_call_lifecycle, an_aborted_tool_answers_and_its_call_is_done)
{
	trace_capture_t c;
	trace_capture_begin(&c, "tool_call,attempt");
	harness_t h;
	harness_start(&h, SLEEP_CALL(5000));
	trace_capture_started(&c);
	pc_event_sub_t *sub = session_sub(&h, "s");
	char run[80];
	cr_assert_eq(submit(&h, "s", "nap", run), PC_AGENT_STARTED);
	cr_assert(await_event(sub, PC_EVENT_TOOL, "\"phase\":\"start\"", 10000, NULL, 0), "no tool start");
	cr_assert_eq(pc_agent_abort_run(h.agent, run), 0);
	cJSON *d = finish_of(&h, run, 10000);
	cr_assert_str_eq(jstr(d, "status"), "aborted");
	cJSON_Delete(d);
	session_unsub(&h, "s", sub);
	harness_stop(&h);
	char *log = trace_capture_end(&c);
	char got[1024];
	calls_of(log, run, got, sizeof(got));
	cr_assert_str_eq(got, "waiting -> running (launch); running -> done (aborted)", "log:\n%s", log);
	/* its attempt finished from its tools */
	trace_of(log, "attempt", run, got, sizeof(got));
	cr_assert_str_eq(got,
			 "loading -> model (start); model -> tools (tool calls); tools -> finishing (aborted); "
			 "finishing -> done (reported)",
			 "log:\n%s", log);
	free(log);
}

/* ---- through before_tool_call ---- */

static int gate_fn(void *user, const pc_hook_call_t *call, cJSON **result)
{
	(void)call;
	const char *answer = user;
	*result = answer ? cJSON_Parse(answer) : NULL;
	return 0;
}

/* The call's trace with a before_tool_call handler answering `answer`
 * (JSON, or NULL: nothing to say). */
static void gated(const char *answer, char *got, size_t cap)
{
	pc_hooks_t *hooks = NULL;
	cr_assert_eq(pc_hooks_new(&hooks), 0);
	pc_hook_def_t def = {.point = PC_HOOK_BEFORE_TOOL_CALL, .fn = gate_fn, .user = (void *)answer,
			     .timeout_ms = 5000};
	cr_assert_eq(pc_hooks_register(hooks, &def), 0);
	trace_capture_t c;
	trace_capture_begin(&c, "tool_call");
	harness_t h;
	harness_start_hooked(&h, HARNESS_CONFIG, SLEEP_CALL(1), NULL, hooks);
	trace_capture_started(&c);
	char run[80];
	cr_assert_eq(submit(&h, "s", "nap", run), PC_AGENT_STARTED);
	cJSON *d = finish_of(&h, run, 30000);
	cr_assert_str_eq(jstr(d, "status"), "ok");
	cJSON_Delete(d);
	harness_stop(&h);
	pc_hooks_free(hooks);
	char *log = trace_capture_end(&c);
	calls_of(log, run, got, cap);
	free(log);
}

Test(tool_call_lifecycle, a_gated_call_runs_once_its_hooks_pass_it)
{
	char got[1024];
	gated(NULL, got, sizeof(got));
	cr_assert_str_eq(got, "waiting -> gate (before_tool_call); gate -> running (launch); running -> done (ok)");
}

Test(tool_call_lifecycle, a_call_its_hooks_block_never_runs)
{
	char got[1024];
	gated("{\"block\":true,\"blockReason\":\"not now\"}", got, sizeof(got));
	cr_assert_str_eq(got, "waiting -> gate (before_tool_call); gate -> refused (blocked)");
}
