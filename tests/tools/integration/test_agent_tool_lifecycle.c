/*
 * A tool invocation's lifecycle (agents/tools/tool_lifecycle.h): its
 * transition table, and PINCER_TRACE=tool's lines from live turns, one
 * for each kind of tool (inline, blocking, task), an unknown tool and an
 * abort while a task runs.
 */
#include <criterion/criterion.h>

#include "agent_harness.h"
#include "agents/tools/tool_lifecycle.h"
#include "trace_capture.h"

TestSuite(tool_lifecycle, .timeout = 60);

Test(tool_lifecycle, every_state_has_a_name)
{
	for (int s = 0; s < PC_TOOL_LC_COUNT; s++)
		cr_assert_str_neq(pc_tool_lc_name((pc_tool_lc_t)s), "unknown", "state %d", s);
	cr_assert_str_eq(pc_tool_lc_name(PC_TOOL_LC_COUNT), "unknown");
	cr_assert_str_eq(pc_tool_lc_name(PC_TOOL_LC_JOB), "job");
	cr_assert_eq(pc_trace_parse("tool"), (unsigned)PC_TRACE_TOOL);
	cr_assert_eq(pc_trace_parse("tool_call"), (unsigned)PC_TRACE_TOOL_CALL);
}

Test(tool_lifecycle, the_table_allows_one_done_and_refuses_the_rest)
{
	static const struct {
		pc_tool_lc_t from, to;
		bool legal;
	} cases[] = {
		{PC_TOOL_LC_STARTING, PC_TOOL_LC_CALLING, true},
		{PC_TOOL_LC_STARTING, PC_TOOL_LC_JOB, true},
		{PC_TOOL_LC_STARTING, PC_TOOL_LC_TASK, true},
		{PC_TOOL_LC_STARTING, PC_TOOL_LC_DONE, true}, /* not found, bad arguments */
		{PC_TOOL_LC_CALLING, PC_TOOL_LC_DONE, true},
		{PC_TOOL_LC_CALLING, PC_TOOL_LC_JOB, false},
		{PC_TOOL_LC_JOB, PC_TOOL_LC_TASK, false},
		{PC_TOOL_LC_TASK, PC_TOOL_LC_DONE, true},
		{PC_TOOL_LC_TASK, PC_TOOL_LC_LOST, true},
		{PC_TOOL_LC_LOST, PC_TOOL_LC_DONE, true},
		{PC_TOOL_LC_LOST, PC_TOOL_LC_LOST, false},
		{PC_TOOL_LC_DONE, PC_TOOL_LC_DONE, false}, /* exactly one DONE */
		{PC_TOOL_LC_DONE, PC_TOOL_LC_LOST, false},
		{PC_TOOL_LC_COUNT, PC_TOOL_LC_DONE, false},
		{PC_TOOL_LC_STARTING, PC_TOOL_LC_COUNT, false},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		cr_assert_eq(pc_tool_lc_legal(cases[i].from, cases[i].to), cases[i].legal, "%s -> %s",
			     pc_tool_lc_name(cases[i].from), pc_tool_lc_name(cases[i].to));
}

#define ONE_CALL(call) "{\"steps\":[{\"kind\":\"tool_calls\",\"tool_calls\":[" call "]},{\"text\":\"ok\"}]}"

/* The invocations traced for run `run`'s first attempt, the run ended. */
static void traced_run(const char *scenario, char *got, size_t cap)
{
	trace_capture_t c;
	trace_capture_begin(&c, "tool");
	harness_t h;
	harness_start(&h, scenario);
	trace_capture_started(&c);
	char run[80];
	cr_assert_eq(submit(&h, "s", "go", run), PC_AGENT_STARTED);
	cJSON *d = finish_of(&h, run, 30000);
	cr_assert_str_eq(jstr(d, "status"), "ok");
	cJSON_Delete(d);
	harness_stop(&h);
	char *log = trace_capture_end(&c);
	char id[128];
	snprintf(id, sizeof(id), "%s/0/", run);
	trace_of(log, "tool", id, got, cap);
	free(log);
}

Test(tool_lifecycle, an_inline_call_is_done_in_its_start)
{
	char got[1024];
	traced_run(ONE_CALL("{\"name\":\"clock\",\"arguments\":{}}"), got, sizeof(got));
	cr_assert_str_eq(got, "starting -> calling (call); calling -> done (ok)");
}

Test(tool_lifecycle, a_blocking_call_runs_as_a_job)
{
	char got[1024];
	traced_run(ONE_CALL("{\"name\":\"list\",\"arguments\":{}}"), got, sizeof(got));
	cr_assert_eq(strncmp(got, "starting -> job (blocking); job -> done (", 41), 0, "%s", got);
}

Test(tool_lifecycle, a_task_runs_until_it_completes)
{
	char got[1024];
	traced_run(ONE_CALL("{\"name\":\"sleep\",\"arguments\":{\"ms\":1}}"), got, sizeof(got));
	cr_assert_str_eq(got, "starting -> task (start); task -> done (ok)");
}

Test(tool_lifecycle, an_unknown_tool_is_done_at_its_start)
{
	char got[1024];
	traced_run(ONE_CALL("{\"name\":\"no_such_tool\",\"arguments\":{}}"), got, sizeof(got));
	cr_assert_str_eq(got, "starting -> done (invalid)");
}

Test(tool_lifecycle, an_aborted_task_is_done_once)
{
	trace_capture_t c;
	trace_capture_begin(&c, "tool");
	harness_t h;
	harness_start(&h, ONE_CALL("{\"name\":\"sleep\",\"arguments\":{\"ms\":5000}}"));
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
	char id[128], got[1024];
	snprintf(id, sizeof(id), "%s/0/", run);
	trace_of(log, "tool", id, got, sizeof(got));
	cr_assert_str_eq(got, "starting -> task (start); task -> done (aborted)", "log:\n%s", log);
	free(log);
}
