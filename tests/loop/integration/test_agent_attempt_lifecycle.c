/*
 * The attempt's lifecycle (agents/attempt/attempt_lifecycle.h): its
 * transition table, and PINCER_TRACE=attempt's lines from live runs, one
 * that runs a tool and one aborted while the model streams.
 */
#include <criterion/criterion.h>

#include "agent_harness.h"
#include "agents/attempt/attempt_lifecycle.h"
#include "trace_capture.h"

TestSuite(attempt_lifecycle, .timeout = 60);

Test(attempt_lifecycle, every_state_has_a_name)
{
	for (int s = 0; s < PC_ATT_LC_COUNT; s++)
		cr_assert_str_neq(pc_att_lc_name((pc_att_lc_t)s), "unknown", "state %d", s);
	cr_assert_str_eq(pc_att_lc_name(PC_ATT_LC_COUNT), "unknown");
	cr_assert_str_eq(pc_att_lc_name(PC_ATT_LC_COMPACTING), "compacting");
}

Test(attempt_lifecycle, the_table_allows_the_loop_and_refuses_the_rest)
{
	static const struct {
		pc_att_lc_t from, to;
		bool legal;
	} cases[] = {
		{PC_ATT_LC_LOADING, PC_ATT_LC_MODEL, true},
		{PC_ATT_LC_LOADING, PC_ATT_LC_FINISHING, true}, /* a setup failure, a hook's block */
		{PC_ATT_LC_LOADING, PC_ATT_LC_TOOLS, false},
		{PC_ATT_LC_LOADING, PC_ATT_LC_COMPACTING, false},
		{PC_ATT_LC_MODEL, PC_ATT_LC_TOOLS, true},
		{PC_ATT_LC_MODEL, PC_ATT_LC_MODEL, true}, /* steering at the turn's end */
		{PC_ATT_LC_MODEL, PC_ATT_LC_COMPACTING, false},
		{PC_ATT_LC_TOOLS, PC_ATT_LC_COMPACTING, true},
		{PC_ATT_LC_TOOLS, PC_ATT_LC_TOOLS, false},
		{PC_ATT_LC_COMPACTING, PC_ATT_LC_MODEL, true},
		{PC_ATT_LC_COMPACTING, PC_ATT_LC_TOOLS, false},
		{PC_ATT_LC_FINISHING, PC_ATT_LC_DONE, true},
		{PC_ATT_LC_FINISHING, PC_ATT_LC_MODEL, false}, /* the end is decided */
		{PC_ATT_LC_FINISHING, PC_ATT_LC_FINISHING, false},
		{PC_ATT_LC_MODEL, PC_ATT_LC_DONE, true}, /* stopped without finishing */
		{PC_ATT_LC_DONE, PC_ATT_LC_DONE, false},
		{PC_ATT_LC_DONE, PC_ATT_LC_LOADING, false},
		{PC_ATT_LC_COUNT, PC_ATT_LC_MODEL, false},
		{PC_ATT_LC_MODEL, PC_ATT_LC_COUNT, false},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		cr_assert_eq(pc_att_lc_legal(cases[i].from, cases[i].to), cases[i].legal, "%s -> %s",
			     pc_att_lc_name(cases[i].from), pc_att_lc_name(cases[i].to));
}

Test(attempt_lifecycle, done_leads_nowhere_and_every_other_state_can_stop)
{
	for (int f = 0; f < PC_ATT_LC_COUNT; f++) {
		int out = 0;
		for (int t = 0; t < PC_ATT_LC_COUNT; t++)
			out += pc_att_lc_legal((pc_att_lc_t)f, (pc_att_lc_t)t);
		if (f == PC_ATT_LC_DONE)
			cr_assert_eq(out, 0);
		else
			cr_assert(pc_att_lc_legal((pc_att_lc_t)f, PC_ATT_LC_DONE), "%s", pc_att_lc_name((pc_att_lc_t)f));
	}
	cr_assert_eq(pc_trace_parse("attempt"), (unsigned)PC_TRACE_ATTEMPT);
}

/* A turn with one tool call: model, tools, model again, the end, which
 * the attempt reports before its writes commit (with the run's end). */
Test(attempt_lifecycle, a_traced_attempt_with_a_tool_writes_each_transition)
{
	trace_capture_t c;
	trace_capture_begin(&c, "attempt");
	harness_t h;
	harness_store_lazy_ms = 600000; /* the writes wait for the run's end, however slow the turn */
	harness_start(&h, "{\"steps\":[{\"kind\":\"tool_calls\",\"tool_calls\":[{\"name\":\"sleep\","
			  "\"arguments\":{\"ms\":1}}]},{\"text\":\"slept\"}]}");
	harness_store_lazy_ms = 0;
	trace_capture_started(&c);
	char run[80];
	cr_assert_eq(submit(&h, "s", "nap", run), PC_AGENT_STARTED);
	cJSON *d = finish_of(&h, run, 30000);
	cr_assert_str_eq(jstr(d, "status"), "ok");
	cJSON_Delete(d);
	harness_stop(&h);
	char *log = trace_capture_end(&c);
	char got[1024];
	trace_of(log, "attempt", run, got, sizeof(got));
	cr_assert_str_eq(got,
			 "loading -> model (start); model -> tools (tool calls); tools -> model (tool results); "
			 "model -> finishing (answered); finishing -> done (reported, writes unsettled)",
			 "log:\n%s", log);
	/* the id is the run's and the attempt's index */
	char id[128];
	snprintf(id, sizeof(id), "msg=\"trace attempt %s/", run);
	cr_assert_not_null(strstr(log, id), "log:\n%s", log);
	free(log);
}

/* An abort while the model streams: the call's answer ends the attempt. */
Test(attempt_lifecycle, an_aborted_attempt_finishes_from_its_model_call)
{
	trace_capture_t c;
	trace_capture_begin(&c, "attempt,run");
	harness_t h;
	harness_start(&h, "{}");
	trace_capture_started(&c);
	pc_event_sub_t *sub = session_sub(&h, "s");
	char run[80];
	cr_assert_eq(submit(&h, "s",
			    "story [[mock:{\"text\":\"one two three four five six seven eight\",\"delay_ms\":400}]]",
			    run),
		     PC_AGENT_STARTED);
	cr_assert(await_event(sub, PC_EVENT_ASSISTANT, NULL, 10000, NULL, 0), "no delta");
	cr_assert_eq(pc_agent_abort_run(h.agent, run), 0);
	cJSON *d = finish_of(&h, run, 10000);
	cr_assert_str_eq(jstr(d, "status"), "aborted");
	cJSON_Delete(d);
	session_unsub(&h, "s", sub);
	harness_stop(&h);
	char *log = trace_capture_end(&c);
	char got[1024];
	trace_of(log, "attempt", run, got, sizeof(got));
	cr_assert_str_eq(got, "loading -> model (start); model -> finishing (aborted); finishing -> done (reported)",
			 "log:\n%s", log);
	/* both machines traced, side by side */
	trace_of(log, "run", run, got, sizeof(got));
	cr_assert_not_null(strstr(got, "attempt -> idle (attempt done)"), "run: %s", got);
	free(log);
}
