/*
 * Context overflow recovery through the whole loop (spec §1.7 step 7,
 * §3.3, §7): an overflow the provider reports is met by a compaction; when
 * that does not help, oversized tool results already in the session are
 * cut and the run retried before it gives up; an overflow after the
 * attempt's own compaction failed ends as `compaction_failure`.
 */
#include <criterion/criterion.h>

#include "agent_harness.h"

TestSuite(agent_overflow, .timeout = 60);

/* One provider with a 64 000-token window (tool results over 40 000 chars
 * are oversized, §3.3) and keepRecentTokens large enough that compaction
 * finds nothing to summarise in a short session. */
#define OVERFLOW_CONFIG(ctx, compaction)                                                           \
	"{\"providers\":{\"mock\":{\"api\":\"openai-completions\",\"embedded\":true,"               \
	"\"apiKey\":\"key-a\",\"contextTokens\":" ctx "}},"                                            \
	"\"agents\":{\"defaults\":{\"model\":\"mock/m1\",\"maxConcurrent\":4,"                      \
	"\"sessionIdleSeconds\":1,\"compaction\":" compaction "}}}"

#define BIG_CHARS 60000u

/* Prints {"chars": N} characters (BIG_CHARS when not given), in lines. */
static int big_call(void *user, const cJSON *args, const pc_tool_env_t *env, pc_tool_output_t *out)
{
	(void)user, (void)env;
	const cJSON *c = cJSON_GetObjectItemCaseSensitive(args, "chars");
	size_t n = cJSON_IsNumber(c) ? (size_t)c->valuedouble : BIG_CHARS;
	out->text = malloc(n + 1);
	if (!out->text)
		return PC_ENOMEM;
	for (size_t i = 0; i < n; i++)
		out->text[i] = i % 80 == 79 ? '\n' : 'x';
	out->text[n] = '\0';
	return 0;
}

static pc_tool_registry_t *big_tool(void)
{
	pc_tool_registry_t *tools = NULL;
	cr_assert_eq(pc_tool_registry_new(&tools), 0);
	pc_tool_def_t def = {.name = "dump", .description = "prints a lot", .call = big_call};
	cr_assert_eq(pc_tool_register(tools, &def), 0);
	return tools;
}

/* The longest tool result text stored for session `key`, in chars. */
static size_t longest_stored_tool_result(harness_t *h, const char *key)
{
	pc_store_history_t *hist = NULL;
	cr_assert_eq(pc_store_history(h->store, key, &hist), 0);
	size_t longest = 0;
	for (size_t i = 0; i < pc_store_history_count(hist); i++) {
		pc_store_msg_t m;
		pc_store_history_get(hist, i, &m);
		cJSON *msg = cJSON_Parse(m.content);
		if (msg && !strcmp(jstr(msg, "role"), "toolResult")) {
			const cJSON *b;
			cJSON_ArrayForEach(b, cJSON_GetObjectItemCaseSensitive(msg, "content")) {
				size_t n = strlen(jstr(b, "text"));
				longest = n > longest ? n : longest;
			}
		}
		cJSON_Delete(msg);
	}
	pc_store_history_free(hist);
	return longest;
}

/* §1.7 7b then 7c: the overflow compaction has nothing to summarise, so the
 * oversized tool result in the session is cut and the run retried, and
 * the retry's answer ends it well. */
Test(agent_overflow, oversized_tool_results_are_truncated_and_the_run_retried)
{
	pc_tool_registry_t *tools = big_tool();
	harness_t h;
	harness_start_with(&h, OVERFLOW_CONFIG("64000", "{\"keepRecentTokens\":60000}"),
			   "{\"steps\":[{\"kind\":\"tool_calls\",\"tool_calls\":[{\"name\":\"dump\"}]},"
			   "{\"kind\":\"context_overflow\",\"max_tokens\":64000,\"prompt_tokens\":70210},"
			   "{\"text\":\"fine\"}]}",
			   tools);
	char run[80];
	cr_assert_eq(submit(&h, "s", "go", run), PC_AGENT_STARTED);
	cJSON *d = finish_of(&h, run, 30000);
	cr_assert_str_eq(jstr(d, "phase"), "end", "%s: %s", jstr(d, "errorKind"), jstr(d, "error"));
	cr_assert_str_eq(payload_text(d), "fine");
	cJSON_Delete(d);
	size_t longest = longest_stored_tool_result(&h, "s");
	cr_assert(longest < BIG_CHARS && longest <= 40000 + 200, "stored tool result: %zu chars", longest);
	cr_assert_eq(request_count(&h), 3);
	harness_stop_no_leaks(&h);
	pc_tool_registry_free(tools);
}

/* 7d: nothing left to cut (no tool results): the spec's overflow text,
 * kind context_overflow, blocked. */
Test(agent_overflow, an_overflow_nothing_can_shrink_ends_with_the_spec_text)
{
	harness_t h;
	harness_start_with(&h, OVERFLOW_CONFIG("64000", "{\"keepRecentTokens\":60000}"),
			   "{\"then\":\"loop\",\"steps\":[{\"kind\":\"context_overflow\",\"max_tokens\":64000,"
			   "\"prompt_tokens\":70210}]}",
			   NULL);
	char run[80];
	cr_assert_eq(submit(&h, "s", "go", run), PC_AGENT_STARTED);
	cJSON *d = finish_of(&h, run, 30000);
	cr_assert_str_eq(jstr(d, "phase"), "error");
	cr_assert_str_eq(jstr(d, "errorKind"), "context_overflow");
	cr_assert_str_eq(payload_text(d), "Context overflow: prompt too large for the model. Try /reset (or "
					  "/new) to start a fresh session, or use a larger-context model.");
	cr_assert_str_eq(jstr(d, "livenessState"), "blocked");
	cJSON_Delete(d);
	harness_stop_no_leaks(&h);
}

/* §1.7 7, §7: three tool results (none oversized) push the context past
 * the compaction threshold; the attempt's own compaction fails at the
 * model, and the context still overflows: that is a compaction failure,
 * not retried by compacting again, and nothing is left to truncate. */
Test(agent_overflow, an_overflow_after_a_failed_compaction_is_a_compaction_failure)
{
	pc_tool_registry_t *tools = big_tool();
	harness_t h;
	harness_start_with(&h, OVERFLOW_CONFIG("16000", "{\"reserveTokens\":4000,\"keepRecentTokens\":2000}"),
			   "{\"steps\":[{\"kind\":\"tool_calls\",\"tool_calls\":["
			   "{\"name\":\"dump\",\"arguments\":{\"chars\":18000}},"
			   "{\"name\":\"dump\",\"arguments\":{\"chars\":18000}},"
			   "{\"name\":\"dump\",\"arguments\":{\"chars\":18000}}]},"
			   "{\"kind\":\"error\",\"status\":500,\"type\":\"server_error\","
			   "\"message\":\"The server had an error while processing your request.\"}],"
			   "\"then\":\"default\",\"default\":{\"text\":\"never\"}}",
			   tools);
	char run[80];
	cr_assert_eq(submit(&h, "s", "go", run), PC_AGENT_STARTED);
	cJSON *d = finish_of(&h, run, 30000);
	cr_assert_str_eq(jstr(d, "phase"), "error");
	cr_assert_str_eq(jstr(d, "errorKind"), "compaction_failure", "%s: %s", jstr(d, "error"), jstr(d, "errorDetail"));
	cr_assert_str_eq(payload_text(d), "Context overflow: prompt too large for the model. Try /reset (or "
					  "/new) to start a fresh session, or use a larger-context model.");
	cr_assert_str_eq(jstr(d, "livenessState"), "blocked");
	cJSON_Delete(d);
	/* the tool call and the failed summary: the precheck (§2.7) saw the
	 * overflow, and nothing compacted or called the model again */
	cr_assert_eq(request_count(&h), 2);
	harness_stop_no_leaks(&h);
	pc_tool_registry_free(tools);
}
