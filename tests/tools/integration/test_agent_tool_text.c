/*
 * Tool results are text: whatever bytes a tool hands back (a command's
 * output, a tool of the embedding program), what is not UTF-8 reaches the
 * transcript and the next model request as U+FFFD, one per maximal
 * ill-formed subpart, through the real session, run and attempt actors and
 * the embedded mock LLM.
 */
#include <criterion/criterion.h>

#include "agent_harness.h"
#include "io/utf8.h"

TestSuite(agent_tool_text, .timeout = 60);

#define R PC_UTF8_REPLACEMENT

/* The content of session `key`'s first toolResult message (the caller
 * frees), or NULL. */
static char *tool_result_row(harness_t *h, const char *key)
{
	pc_store_history_t *hist = NULL;
	cr_assert_eq(pc_store_history(h->store, key, &hist), 0);
	char *content = NULL;
	for (size_t i = 0; i < pc_store_history_count(hist) && !content; i++) {
		pc_store_msg_t m;
		pc_store_history_get(hist, i, &m);
		if (!strcmp(m.role, "toolResult"))
			content = strdup(m.content);
	}
	pc_store_history_free(hist);
	return content;
}

/* Runs `message` in session `key` to its end, then checks that the tool's
 * result, in the transcript and in the model's second request, holds
 * `want` and is UTF-8 throughout. */
static void expect_result_text(harness_t *h, const char *key, const char *want)
{
	char run[80];
	submit(h, key, "go", run);
	cJSON *d = finish_of(h, run, 20000);
	cr_assert_str_eq(jstr(d, "phase"), "end", "%s", cJSON_PrintUnformatted(d));
	cJSON_Delete(d);
	char *row = tool_result_row(h, key);
	cr_assert_not_null(row, "no tool result stored");
	cr_assert(pc_utf8_valid(row, strlen(row)), "the stored row is not UTF-8: %s", row);
	cr_assert_not_null(strstr(row, want), "stored: %s", row);
	free(row);
	cJSON *reqs = mock_requests(h);
	cr_assert_eq(cJSON_GetArraySize(reqs), 2);
	char *second = request_text(reqs, 1);
	cr_assert(pc_utf8_valid(second, strlen(second)), "the model's request is not UTF-8");
	cr_assert_not_null(strstr(second, want), "sent: %s", second);
	cJSON_free(second);
	cJSON_Delete(reqs);
}

/* A tool of the embedding program that answers bytes which are not text:
 * two stray bytes, then a letter, then a sequence cut short. */
static int bytes_call(void *user, const cJSON *args, const pc_tool_env_t *env, pc_tool_output_t *out)
{
	(void)user, (void)args, (void)env;
	out->text = strdup("\xff\xfe" "A\xe2\x82");
	return out->text ? 0 : PC_ENOMEM;
}

Test(agent_tool_text, any_tools_bytes_that_are_not_utf8_become_replacement_characters)
{
	pc_tool_registry_t *tools = NULL;
	cr_assert_eq(pc_tool_registry_new(&tools), 0);
	pc_tool_def_t bytes = {.name = "bytes", .description = "answers bytes", .call = bytes_call};
	cr_assert_eq(pc_tool_register(tools, &bytes), 0);
	harness_t h;
	harness_start_with(&h, HARNESS_CONFIG,
			   "{\"steps\":[{\"kind\":\"tool_calls\",\"tool_calls\":[{\"name\":\"bytes\"}]},"
			   "{\"text\":\"read it\"}]}",
			   tools);
	expect_result_text(&h, "s", R R "A" R);
	harness_stop(&h);
	pc_tool_registry_free(tools);
}

Test(agent_tool_text, exec_output_that_is_not_utf8_reaches_the_model_as_replacement_characters)
{
	char ws[] = "/tmp/pincer-ws-XXXXXX";
	cr_assert_not_null(mkdtemp(ws));
	char cfg[1024];
	snprintf(cfg, sizeof(cfg),
		 "{\"providers\":{\"mock\":{\"api\":\"openai-completions\",\"embedded\":true}},"
		 "\"agents\":{\"defaults\":{\"model\":\"mock/m\",\"workspace\":\"%s\"}}}",
		 ws);
	harness_t h;
	/* printf's octal escapes: 0xFF 0xFE "A", a NUL, then "z". */
	harness_start_with(&h, cfg,
			   "{\"steps\":[{\"kind\":\"tool_calls\",\"tool_calls\":[{\"name\":\"exec\","
			   "\"arguments\":{\"command\":\"printf '\\\\377\\\\376A\\\\000z'\"}}]},"
			   "{\"text\":\"ran it\"}]}",
			   NULL);
	expect_result_text(&h, "s", R R "A" R "z");
	harness_stop(&h);
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", ws);
	cr_assert_eq(system(cmd), 0);
}
