/*
 * Hooks and tool guard rails through the whole loop (session, run, attempt
 * and tool actors against the embedded mock LLM): before_tool_call blocks
 * (and fails closed) or rewrites arguments, after_tool_call observes,
 * tool_result_persist transforms what the transcript and the model get,
 * before_agent_run blocks a run, before_agent_reply answers instead of the
 * model, before_agent_finalize asks for revisions (at most 3),
 * before_prompt_build shapes the prompt and narrows the tools; the
 * allow-list holds at call time; the loop detectors stop a model that
 * calls the same tool for ever.
 */
#include <criterion/criterion.h>

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "agent_harness.h"
#include "agents/hooks/hooks.h"

/* ---- C handlers: what each returns is set by the test ---------------------- */

typedef struct probe {
	pthread_mutex_t lock;
	const char *result;   /* the JSON this handler returns, or NULL */
	const char *results[4]; /* per call, when set (then `result` after) */
	int fail;             /* return this code instead (< 0) */
	uint32_t calls;
	char last_event[2048];
} probe_t;

static probe_t *probe_new(const char *result)
{
	probe_t *p = calloc(1, sizeof(*p));
	cr_assert_not_null(p);
	pthread_mutex_init(&p->lock, NULL);
	p->result = result;
	return p;
}

static void probe_free(probe_t *p)
{
	pthread_mutex_destroy(&p->lock);
	free(p);
}

static uint32_t probe_calls(probe_t *p)
{
	pthread_mutex_lock(&p->lock);
	uint32_t n = p->calls;
	pthread_mutex_unlock(&p->lock);
	return n;
}

static int probe_fn(void *user, const pc_hook_call_t *call, cJSON **result)
{
	probe_t *p = user;
	pthread_mutex_lock(&p->lock);
	uint32_t n = p->calls++;
	char *ev = cJSON_PrintUnformatted(call->event);
	snprintf(p->last_event, sizeof(p->last_event), "%s", ev ? ev : "");
	cJSON_free(ev);
	const char *r = n < 4 && p->results[n] ? p->results[n] : p->result;
	int fail = p->fail;
	pthread_mutex_unlock(&p->lock);
	if (fail)
		return fail;
	*result = r ? cJSON_Parse(r) : NULL;
	return 0;
}

static pc_hooks_t *hooks_with(pc_hook_point_t point, probe_t *p)
{
	pc_hooks_t *h = NULL;
	cr_assert_eq(pc_hooks_new(&h), 0);
	pc_hook_def_t d = {.point = point, .fn = probe_fn, .user = p, .timeout_ms = 5000};
	cr_assert_eq(pc_hooks_register(h, &d), 0);
	return h;
}

/* A tool that always answers the same: loops make no progress. */
static int same_call(void *user, const cJSON *args, const pc_tool_env_t *env, pc_tool_output_t *out)
{
	(void)user;
	(void)args;
	(void)env;
	out->text = strdup("same");
	return out->text ? 0 : PC_ENOMEM;
}

static pc_tool_registry_t *tools_with_same(void)
{
	pc_tool_registry_t *r = NULL;
	cr_assert_eq(pc_tool_registry_new(&r), 0);
	cr_assert_eq(pc_tool_register_builtins(r), 0);
	pc_tool_def_t d = {.name = "same", .description = "Answers the same.", .parallel_safe = true,
			   .call = same_call};
	cr_assert_eq(pc_tool_register(r, &d), 0);
	return r;
}

#define CONFIG_WITH(extra)                                                                          \
	"{\"providers\":{\"mock\":{\"api\":\"openai-completions\",\"embedded\":true}},"              \
	"\"agents\":{\"defaults\":{\"model\":\"mock/m1\",\"maxConcurrent\":4,"                       \
	"\"sessionIdleSeconds\":1" extra "}}}"

/* No script: every request gets the echo of its last user message. */
#define ECHO "[]"

#define CALL_THEN_DONE(call)                                                                        \
	"{\"steps\":[{\"kind\":\"tool_calls\",\"tool_calls\":[" call "]},{\"kind\":\"text\",\"text\":\"done\"}]}"

/* Request i's whole body contains `needle`. */
static bool request_has(harness_t *h, int i, const char *needle)
{
	cJSON *reqs = mock_requests(h);
	char *text = request_text(reqs, i);
	bool found = text && strstr(text, needle);
	cJSON_free(text);
	cJSON_Delete(reqs);
	return found;
}

static void run_ok(harness_t *h, const char *msg, cJSON **data)
{
	char run[PC_RUN_ID_MAX];
	submit(h, "s", msg, run);
	*data = finish_of(h, run, 20000);
	cr_assert_str_eq(jstr(*data, "status"), "ok", "run: %s", jstr(*data, "error"));
}

/* ---- before_tool_call ------------------------------------------------------ */

Test(agent_hooks, before_tool_call_blocks_and_the_model_reads_why)
{
	probe_t *p = probe_new("{\"block\":true,\"blockReason\":\"no clocks here\"}");
	pc_hooks_t *hooks = hooks_with(PC_HOOK_BEFORE_TOOL_CALL, p);
	harness_t h;
	harness_start_hooked(&h, CONFIG_WITH(""), CALL_THEN_DONE("{\"name\":\"clock\",\"arguments\":{}}"), NULL,
			     hooks);
	cJSON *d = NULL;
	run_ok(&h, "time?", &d);
	cr_assert_str_eq(payload_text(d), "done");
	cr_assert_eq(probe_calls(p), 1);
	cr_assert(strstr(p->last_event, "\"toolName\":\"clock\""), "%s", p->last_event);
	cr_assert_eq(request_count(&h), 2);
	cr_assert(request_has(&h, 1, "no clocks here"), "the model reads the block reason");
	cr_assert(request_has(&h, 1, "\"content\":\"no clocks here\"}"), "the result is the reason alone: the clock never ran");
	cJSON_Delete(d);
	harness_stop(&h);
	pc_hooks_free(hooks);
	probe_free(p);
}

Test(agent_hooks, before_tool_call_failure_fails_closed)
{
	probe_t *p = probe_new(NULL);
	p->fail = PC_EINVAL;
	pc_hooks_t *hooks = hooks_with(PC_HOOK_BEFORE_TOOL_CALL, p);
	harness_t h;
	harness_start_hooked(&h, CONFIG_WITH(""), CALL_THEN_DONE("{\"name\":\"clock\",\"arguments\":{}}"), NULL,
			     hooks);
	cJSON *d = NULL;
	run_ok(&h, "time?", &d);
	cr_assert(request_has(&h, 1, PC_HOOK_REASON_TOOL_HOOK_FAILED));
	cJSON_Delete(d);
	harness_stop(&h);
	pc_hooks_free(hooks);
	probe_free(p);
}

Test(agent_hooks, before_tool_call_rewrites_arguments)
{
	probe_t *p = probe_new("{\"params\":{\"ms\":1}}");
	pc_hooks_t *hooks = hooks_with(PC_HOOK_BEFORE_TOOL_CALL, p);
	harness_t h;
	harness_start_hooked(&h, CONFIG_WITH(""),
			     CALL_THEN_DONE("{\"name\":\"sleep\",\"arguments\":{\"ms\":600000}}"), NULL, hooks);
	cJSON *d = NULL;
	run_ok(&h, "nap", &d);
	cr_assert(request_has(&h, 1, "slept 1 ms"), "the tool ran with the rewritten arguments");
	cJSON_Delete(d);
	harness_stop(&h);
	pc_hooks_free(hooks);
	probe_free(p);
}

/* ---- after_tool_call / tool_result_persist ---------------------------------- */

Test(agent_hooks, after_tool_call_observes_and_persist_transforms)
{
	probe_t *after = probe_new(NULL);
	probe_t *persist = probe_new("{\"message\":{\"content\":[{\"type\":\"text\",\"text\":\"[redacted]\"}]}}");
	pc_hooks_t *hooks = hooks_with(PC_HOOK_AFTER_TOOL_CALL, after);
	pc_hook_def_t d2 = {.point = PC_HOOK_TOOL_RESULT_PERSIST, .fn = probe_fn, .user = persist};
	cr_assert_eq(pc_hooks_register(hooks, &d2), 0);
	harness_t h;
	harness_start_hooked(&h, CONFIG_WITH(""), CALL_THEN_DONE("{\"name\":\"clock\",\"arguments\":{}}"), NULL,
			     hooks);
	cJSON *d = NULL;
	run_ok(&h, "time?", &d);
	cr_assert(request_has(&h, 1, "[redacted]"), "the model reads the transformed result");
	pc_store_history_t *hist = NULL;
	cr_assert_eq(pc_store_history(h.store, "s", &hist), 0);
	bool stored = false;
	for (size_t i = 0; i < pc_store_history_count(hist); i++) {
		pc_store_msg_t m;
		pc_store_history_get(hist, i, &m);
		if (!strcmp(m.role, "toolResult"))
			stored = strstr(m.content, "[redacted]") != NULL;
	}
	pc_store_history_free(hist);
	cr_assert(stored, "the transcript holds the transformed result");
	/* observation runs on the pool: it may land just after the run */
	for (int i = 0; i < 200 && probe_calls(after) == 0; i++)
		sleep_ms(10);
	cr_assert_eq(probe_calls(after), 1);
	cr_assert(strstr(after->last_event, "\"durationMs\""), "%s", after->last_event);
	cr_assert(strstr(after->last_event, "\"result\""), "%s", after->last_event);
	cJSON_Delete(d);
	harness_stop(&h);
	pc_hooks_free(hooks);
	probe_free(after);
	probe_free(persist);
}

/* ---- run-shaping hooks --------------------------------------------------------- */

Test(agent_hooks, before_agent_run_blocks_the_run)
{
	probe_t *p = probe_new("{\"outcome\":\"block\",\"reason\":\"policy says no\",\"message\":\"[withheld]\"}");
	pc_hooks_t *hooks = hooks_with(PC_HOOK_BEFORE_AGENT_RUN, p);
	harness_t h;
	harness_start_hooked(&h, CONFIG_WITH(""), ECHO, NULL, hooks);
	char run[PC_RUN_ID_MAX];
	submit(&h, "s", "a secret prompt", run);
	cJSON *d = finish_of(&h, run, 20000);
	cr_assert_str_eq(jstr(d, "status"), "error");
	cr_assert_str_eq(jstr(d, "errorKind"), "hook_block");
	cr_assert(strstr(jstr(d, "error"), "policy says no"), "%s", jstr(d, "error"));
	cr_assert_eq(request_count(&h), 0, "no model input");
	pc_store_history_t *hist = NULL;
	cr_assert_eq(pc_store_history(h.store, "s", &hist), 0);
	for (size_t i = 0; i < pc_store_history_count(hist); i++) {
		pc_store_msg_t m;
		pc_store_history_get(hist, i, &m);
		cr_assert_null(strstr(m.content, "secret"), "the blocked prompt is not stored");
	}
	cr_assert_eq(pc_store_history_count(hist), 1, "only the replacement message");
	pc_store_history_free(hist);
	cJSON_Delete(d);
	harness_stop(&h);
	pc_hooks_free(hooks);
	probe_free(p);
}

Test(agent_hooks, before_agent_reply_answers_instead_of_the_model)
{
	probe_t *p = probe_new("{\"handled\":true,\"reply\":\"answered by a hook\"}");
	pc_hooks_t *hooks = hooks_with(PC_HOOK_BEFORE_AGENT_REPLY, p);
	harness_t h;
	harness_start_hooked(&h, CONFIG_WITH(""), ECHO, NULL, hooks);
	cJSON *d = NULL;
	run_ok(&h, "hello", &d);
	cr_assert_str_eq(payload_text(d), "answered by a hook");
	cr_assert_eq(request_count(&h), 0);
	cJSON_Delete(d);
	/* handled without a reply: silence */
	pthread_mutex_lock(&p->lock);
	p->result = "{\"handled\":true}";
	pthread_mutex_unlock(&p->lock);
	run_ok(&h, "again", &d);
	cr_assert_str_eq(payload_text(d), "NO_REPLY", "a silent run (§5.5)");
	cJSON_Delete(d);
	/* not handled: the model answers */
	pthread_mutex_lock(&p->lock);
	p->result = "{\"handled\":false}";
	pthread_mutex_unlock(&p->lock);
	run_ok(&h, "third", &d);
	cr_assert_str_eq(payload_text(d), "third");
	cr_assert_eq(request_count(&h), 1);
	cJSON_Delete(d);
	harness_stop(&h);
	pc_hooks_free(hooks);
	probe_free(p);
}

Test(agent_hooks, before_agent_finalize_revises_at_most_three_times)
{
	probe_t *p = probe_new("{\"action\":\"finalize\"}");
	p->results[0] = "{\"action\":\"revise\",\"reason\":\"cite your sources\"}";
	pc_hooks_t *hooks = hooks_with(PC_HOOK_BEFORE_AGENT_FINALIZE, p);
	harness_t h;
	harness_start_hooked(&h, CONFIG_WITH(""), ECHO, NULL, hooks);
	cJSON *d = NULL;
	run_ok(&h, "answer me", &d);
	cr_assert_eq(request_count(&h), 2, "one revision");
	cr_assert(request_has(&h, 1, "cite your sources"), "the revision carries its reason");
	cJSON_Delete(d);
	/* always revise: 1 answer + 3 revisions, then it is accepted */
	pthread_mutex_lock(&p->lock);
	p->calls = 0;
	p->results[0] = NULL;
	p->result = "{\"action\":\"revise\",\"reason\":\"again\"}";
	pthread_mutex_unlock(&p->lock);
	run_ok(&h, "once more", &d);
	cr_assert_eq(request_count(&h), 2 + 4);
	cJSON_Delete(d);
	harness_stop(&h);
	pc_hooks_free(hooks);
	probe_free(p);
}

Test(agent_hooks, before_prompt_build_shapes_prompt_and_narrows_tools)
{
	probe_t *p = probe_new("{\"prependContext\":\"PRE-CONTEXT\",\"appendSystemContext\":\"SYS-APPENDIX\","
			       "\"toolsAllow\":[\"clock\"]}");
	pc_hooks_t *hooks = hooks_with(PC_HOOK_BEFORE_PROMPT_BUILD, p);
	harness_t h;
	harness_start_hooked(&h, CONFIG_WITH(""), CALL_THEN_DONE("{\"name\":\"sleep\",\"arguments\":{\"ms\":1}}"),
			     NULL, hooks);
	cJSON *d = NULL;
	run_ok(&h, "the question", &d);
	cJSON *reqs = mock_requests(&h);
	char role[32], text[512];
	request_last_message(reqs, 0, role, sizeof(role), text, sizeof(text));
	cr_assert_str_eq(role, "user");
	cr_assert_str_eq(text, "PRE-CONTEXT\n\nthe question");
	cJSON *owned = NULL;
	const cJSON *body = request_body(reqs, 0, &owned);
	const cJSON *tools = cJSON_GetObjectItemCaseSensitive(body, "tools");
	cr_assert_eq(cJSON_GetArraySize(tools), 1, "only the allowed tool is offered");
	char *b = cJSON_PrintUnformatted(body);
	cr_assert(strstr(b, "SYS-APPENDIX"));
	cJSON_free(b);
	cJSON_Delete(owned);
	cJSON_Delete(reqs);
	cr_assert(request_has(&h, 1, "is not available"), "a tool outside toolsAllow is refused at call time");
	cJSON_Delete(d);
	harness_stop(&h);
	pc_hooks_free(hooks);
	probe_free(p);
}

/* ---- guard rails without hooks ---------------------------------------------- */

Test(agent_hooks, the_allow_list_holds_at_call_time)
{
	harness_t h;
	harness_start_with(&h, CONFIG_WITH(",\"tools\":{\"allow\":[\"clock\"]}"),
			   CALL_THEN_DONE("{\"name\":\"sleep\",\"arguments\":{\"ms\":1}}"), NULL);
	cJSON *d = NULL;
	run_ok(&h, "nap", &d);
	cr_assert(request_has(&h, 1, "Tool sleep is not available to this agent."));
	cr_assert_not(request_has(&h, 1, "slept"));
	cJSON_Delete(d);
	harness_stop(&h);
}

Test(agent_hooks, loop_detection_stops_a_model_that_never_stops)
{
	pc_tool_registry_t *tools = tools_with_same();
	harness_t h;
	harness_start_with(&h,
			   CONFIG_WITH(",\"loopDetection\":{\"enabled\":true,\"warningThreshold\":3,"
				       "\"criticalThreshold\":5,\"globalCircuitBreakerThreshold\":8}"),
			   "{\"default\":{\"kind\":\"tool_calls\",\"tool_calls\":[{\"name\":\"same\","
			   "\"arguments\":{\"q\":1}}]}}",
			   tools);
	pc_event_sub_t *sub = session_sub(&h, "s");
	char run[PC_RUN_ID_MAX];
	submit(&h, "s", "loop", run);
	cJSON *d = finish_of(&h, run, 30000);
	cr_assert_str_eq(jstr(d, "status"), "error");
	cr_assert(strstr(jstr(d, "error"), "global circuit breaker"), "%s", jstr(d, "error"));
	int n = request_count(&h);
	cr_assert_leq(n, 10, "the breaker stopped the model calls (%d)", n);
	cr_assert_geq(n, 8);
	cr_assert(await_event(sub, PC_EVENT_DIAGNOSTIC, "tool.loop", 1000, NULL, 0), "a loop warning was published");
	pc_agent_stats_t st;
	pc_agent_stats(h.agent, &st);
	cr_assert_geq(st.tool_loops_blocked, 1);
	session_unsub(&h, "s", sub);
	cJSON_Delete(d);
	harness_stop(&h);
	pc_tool_registry_free(tools);
}
