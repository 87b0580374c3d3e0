/*
 * The tool-error warning in the final payloads (spec §5.7), through the
 * real session, run and attempt actors and the embedded mock LLM: a failed
 * tool's "⚠️ <tool> failed" warning (isError) after the model's texts; always
 * for a mutating tool, even when the model answered; for other tools only
 * when no user-facing reply remains; never for exec without details, whose
 * own output already reported the failure.
 */
#include <criterion/criterion.h>

#include "agent_harness.h"

TestSuite(agent_tool_warnings, .timeout = 60);

/* A tool of the embedding program that always fails. */
static int failing_call(void *user, const cJSON *args, const pc_tool_env_t *env, pc_tool_output_t *out)
{
	(void)user, (void)args, (void)env;
	out->text = strdup("the disk is on fire");
	out->is_error = true;
	return out->text ? 0 : PC_ENOMEM;
}

/* The final payloads of `d`, rendered "text" or "!text" (isError), joined
 * with '|'. */
static void render_payloads(const cJSON *d, char *buf, size_t cap)
{
	buf[0] = '\0';
	const cJSON *p;
	cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(d, "payloads")) {
		size_t l = strlen(buf);
		snprintf(buf + l, cap - l, "%s%s%s", l ? "|" : "",
			 cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(p, "isError")) ? "!" : "", jstr(p, "text"));
	}
}

/* Runs one turn with the tool `name` (mutating or not) failing, then the
 * model answering `answer` (a JSON string); returns the rendered payloads. */
static void run_failing_tool(bool mutating, const char *answer, char *got, size_t cap)
{
	pc_tool_registry_t *tools = NULL;
	cr_assert_eq(pc_tool_registry_new(&tools), 0);
	pc_tool_def_t def = {.name = "flaky", .description = "fails", .call = failing_call, .mutating = mutating};
	cr_assert_eq(pc_tool_register(tools, &def), 0);
	char scenario[512];
	snprintf(scenario, sizeof(scenario),
		 "{\"steps\":[{\"kind\":\"tool_calls\",\"tool_calls\":[{\"name\":\"flaky\"}]},{\"text\":%s}]}",
		 answer);
	harness_t h;
	harness_start_with(&h, HARNESS_CONFIG, scenario, tools);
	char run[80];
	cr_assert_eq(submit(&h, "s", "go", run), PC_AGENT_STARTED);
	cJSON *d = finish_of(&h, run, 20000);
	cr_assert_str_eq(jstr(d, "phase"), "end", "%s: %s", jstr(d, "errorKind"), jstr(d, "error"));
	render_payloads(d, got, cap);
	cJSON_Delete(d);
	harness_stop_no_leaks(&h);
	pc_tool_registry_free(tools);
}

Test(agent_tool_warnings, a_failed_mutating_tool_is_warned_about_even_after_a_reply)
{
	char got[512];
	run_failing_tool(true, "\"All done.\"", got, sizeof(got));
	cr_assert_str_eq(got, "All done.|!\u26a0\ufe0f flaky failed");
}

Test(agent_tool_warnings, a_failed_tool_is_warned_about_when_no_reply_remains)
{
	char got[512];
	run_failing_tool(false, "\"NO_REPLY\"", got, sizeof(got));
	cr_assert_str_eq(got, "!\u26a0\ufe0f flaky failed");
}

Test(agent_tool_warnings, a_reply_stands_alone_after_a_failed_read_only_tool)
{
	char got[512];
	run_failing_tool(false, "\"It did not work, sorry.\"", got, sizeof(got));
	cr_assert_str_eq(got, "It did not work, sorry.");
}

/* exec is mutating, yet without details (verbose full, cron exec timeout)
 * its failure gets no warning: the command's output already told it. */
Test(agent_tool_warnings, a_failed_exec_gets_no_warning_without_details)
{
	char ws[] = "/tmp/pincer-ws-XXXXXX";
	cr_assert_not_null(mkdtemp(ws));
	char cfg[1024];
	snprintf(cfg, sizeof(cfg),
		 "{\"providers\":{\"mock\":{\"api\":\"openai-completions\",\"embedded\":true}},"
		 "\"agents\":{\"defaults\":{\"model\":\"mock/m\",\"workspace\":\"%s\"}}}",
		 ws);
	harness_t h;
	harness_start_with(&h, cfg,
			   "{\"steps\":[{\"kind\":\"tool_calls\",\"tool_calls\":[{\"name\":\"exec\","
			   "\"arguments\":{\"command\":\"echo no such file >&2; exit 3\"}}]},"
			   "{\"text\":\"The command failed with status 3.\"}]}",
			   NULL);
	char run[80];
	cr_assert_eq(submit(&h, "s", "go", run), PC_AGENT_STARTED);
	cJSON *d = finish_of(&h, run, 20000);
	cr_assert_str_eq(jstr(d, "phase"), "end", "%s: %s", jstr(d, "errorKind"), jstr(d, "error"));
	char got[512];
	render_payloads(d, got, sizeof(got));
	cJSON_Delete(d);
	/* the command did fail: its result went back to the model as an error */
	cJSON *reqs = mock_requests(&h);
	cr_assert_eq(cJSON_GetArraySize(reqs), 2);
	char *second = request_text(reqs, 1);
	cr_assert_not_null(strstr(second, "no such file"), "sent: %s", second);
	cJSON_free(second);
	cJSON_Delete(reqs);
	harness_stop(&h);
	cr_assert_str_eq(got, "The command failed with status 3.");
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", ws);
	cr_assert_eq(system(cmd), 0);
}
