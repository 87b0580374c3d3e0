/*
 * A model call's lifecycle (agents/providers/model_call_lifecycle.h): its
 * transition table, and PINCER_TRACE=model_call's lines from live calls:
 * an answer, an error status and an abort while streaming.
 */
#include <criterion/criterion.h>

#include "agent_harness.h"
#include "agents/providers/model_call_lifecycle.h"
#include "trace_capture.h"

TestSuite(model_call_lifecycle, .timeout = 60);

Test(model_call_lifecycle, every_state_has_a_name)
{
	for (int s = 0; s < PC_MC_LC_COUNT; s++)
		cr_assert_str_neq(pc_mc_lc_name((pc_mc_lc_t)s), "unknown", "state %d", s);
	cr_assert_str_eq(pc_mc_lc_name(PC_MC_LC_COUNT), "unknown");
	cr_assert_str_eq(pc_mc_lc_name(PC_MC_LC_ERROR_BODY), "error_body");
	cr_assert_eq(pc_trace_parse("model_call"), (unsigned)PC_TRACE_MODEL_CALL);
}

Test(model_call_lifecycle, the_table_allows_a_call_through_and_refuses_the_rest)
{
	static const struct {
		pc_mc_lc_t from, to;
		bool legal;
	} cases[] = {
		{PC_MC_LC_PENDING, PC_MC_LC_REQUESTING, true},
		{PC_MC_LC_PENDING, PC_MC_LC_FAILED, true}, /* could not start */
		{PC_MC_LC_PENDING, PC_MC_LC_STREAMING, false},
		{PC_MC_LC_REQUESTING, PC_MC_LC_STREAMING, true},
		{PC_MC_LC_REQUESTING, PC_MC_LC_ERROR_BODY, true},
		{PC_MC_LC_REQUESTING, PC_MC_LC_FAILED, true}, /* no head: a transport error */
		{PC_MC_LC_REQUESTING, PC_MC_LC_DONE, false},  /* no answer without a 2xx head */
		{PC_MC_LC_STREAMING, PC_MC_LC_DONE, true},
		{PC_MC_LC_STREAMING, PC_MC_LC_ERROR_BODY, false},
		{PC_MC_LC_ERROR_BODY, PC_MC_LC_DONE, false},
		{PC_MC_LC_ERROR_BODY, PC_MC_LC_FAILED, true},
		{PC_MC_LC_STREAMING, PC_MC_LC_ABORTING, true},
		{PC_MC_LC_STREAMING, PC_MC_LC_ABORTED, false}, /* the transfer's end comes first */
		{PC_MC_LC_ABORTING, PC_MC_LC_ABORTED, true},
		{PC_MC_LC_ABORTING, PC_MC_LC_FAILED, false},
		{PC_MC_LC_ABORTING, PC_MC_LC_ABORTING, false},
		{PC_MC_LC_DONE, PC_MC_LC_ABORTING, false},
		{PC_MC_LC_COUNT, PC_MC_LC_DONE, false},
		{PC_MC_LC_PENDING, PC_MC_LC_COUNT, false},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		cr_assert_eq(pc_mc_lc_legal(cases[i].from, cases[i].to), cases[i].legal, "%s -> %s",
			     pc_mc_lc_name(cases[i].from), pc_mc_lc_name(cases[i].to));
	for (int f = 0; f < PC_MC_LC_COUNT; f++)
		for (int t = 0; pc_mc_lc_terminal((pc_mc_lc_t)f) && t < PC_MC_LC_COUNT; t++)
			cr_assert(!pc_mc_lc_legal((pc_mc_lc_t)f, (pc_mc_lc_t)t), "%s", pc_mc_lc_name((pc_mc_lc_t)f));
}

/* The first model call of run `run`'s first attempt, as traced. */
static void first_call(const char *log, const char *run, char *got, size_t cap)
{
	char id[128];
	snprintf(id, sizeof(id), "%s/0/1 ", run);
	trace_of(log, "model_call", id, got, cap);
}

Test(model_call_lifecycle, an_answered_call_streams_then_is_done)
{
	trace_capture_t c;
	trace_capture_begin(&c, "model_call");
	harness_t h;
	harness_start(&h, "{\"steps\":[{\"text\":\"hello\"}]}");
	trace_capture_started(&c);
	char run[80];
	cr_assert_eq(submit(&h, "s", "hi", run), PC_AGENT_STARTED);
	cJSON *d = finish_of(&h, run, 30000);
	cr_assert_str_eq(jstr(d, "status"), "ok");
	cJSON_Delete(d);
	harness_stop(&h);
	char *log = trace_capture_end(&c);
	char got[1024];
	first_call(log, run, got, sizeof(got));
	cr_assert_str_eq(got, "pending -> requesting (sent); requesting -> streaming (head); streaming -> done (answer)",
			 "log:\n%s", log);
	free(log);
}

Test(model_call_lifecycle, an_error_status_keeps_the_body_then_fails)
{
	trace_capture_t c;
	trace_capture_begin(&c, "model_call");
	harness_t h;
	harness_start(&h, "{\"steps\":[{\"kind\":\"error\",\"status\":400,\"message\":\"no such thing\"}]}");
	trace_capture_started(&c);
	char run[80];
	cr_assert_eq(submit(&h, "s", "hi", run), PC_AGENT_STARTED);
	/* (the run goes on to another profile, whose call is answered) */
	cJSON_Delete(finish_of(&h, run, 30000));
	harness_stop(&h);
	char *log = trace_capture_end(&c);
	char got[1024];
	first_call(log, run, got, sizeof(got));
	cr_assert_str_eq(got,
			 "pending -> requesting (sent); requesting -> error_body (head); error_body -> failed (error status)",
			 "log:\n%s", log);
	free(log);
}

Test(model_call_lifecycle, an_aborted_call_ends_when_its_transfer_does)
{
	trace_capture_t c;
	trace_capture_begin(&c, "model_call");
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
	first_call(log, run, got, sizeof(got));
	cr_assert_str_eq(got,
			 "pending -> requesting (sent); requesting -> streaming (head); streaming -> aborting (abort); "
			 "aborting -> aborted (transfer ended)",
			 "log:\n%s", log);
	free(log);
}
