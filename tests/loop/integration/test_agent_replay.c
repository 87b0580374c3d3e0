/*
 * Replay safety and incomplete turns through the whole loop (spec §1.14,
 * §1.7 steps 21-27): a mutating tool whose body ran makes the run
 * `replayInvalid`, keeps the non-visible retries from repeating the turn,
 * and turns an empty ending into the side-effect warning; a read-only
 * tool does none of that. agent.wait's answer and the run's row say
 * what its end event says. A mutating tool starts only once the message
 * asking for it is durable, so that a crash under it leaves the call on
 * record and the run replay-invalid; the next run writes the call's
 * made-up result, so the stored transcript is paired again.
 */
#include <criterion/criterion.h>
#include <sqlite3.h>

#include "agent_harness.h"

TestSuite(agent_replay, .timeout = 60);

/* One provider, no fallback, so a failure ends the run. */
#define SOLO_CONFIG                                                                                \
	"{\"providers\":{\"mock\":{\"api\":\"openai-completions\",\"embedded\":true,"               \
	"\"apiKey\":\"key-a\"}},"                                                                     \
	"\"agents\":{\"defaults\":{\"model\":\"mock/m1\",\"maxConcurrent\":4,"                      \
	"\"sessionIdleSeconds\":1}}}"

static int ok_call(void *user, const cJSON *args, const pc_tool_env_t *env, pc_tool_output_t *out)
{
	(void)user, (void)args, (void)env;
	out->text = strdup("done");
	return out->text ? 0 : PC_ENOMEM;
}

static bool replay_invalid(const cJSON *d)
{
	return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(d, "replayInvalid"));
}

/* Runs one message: the model calls the tool `touch` (mutating or not),
 * then answers with `then` (scenario steps, JSON, after the tool call).
 * Returns the run's terminal data; *requests gets the mock's count. */
static cJSON *run_with_tool(bool mutating, const char *schema, const char *args, const char *then, int *requests)
{
	pc_tool_registry_t *tools = NULL;
	cr_assert_eq(pc_tool_registry_new(&tools), 0);
	pc_tool_def_t def = {.name = "touch", .description = "touches a thing", .call = ok_call,
			     .mutating = mutating, .parameters = schema};
	cr_assert_eq(pc_tool_register(tools, &def), 0);
	char scenario[1024];
	snprintf(scenario, sizeof(scenario),
		 "{\"steps\":[{\"kind\":\"tool_calls\",\"tool_calls\":[{\"name\":\"touch\",\"arguments\":%s}]},%s}",
		 args, then);
	harness_t h;
	harness_start_with(&h, SOLO_CONFIG, scenario, tools);
	char run[80];
	cr_assert_eq(submit(&h, "s", "go", run), PC_AGENT_STARTED);
	cJSON *d = finish_of(&h, run, 30000);
	*requests = request_count(&h);
	cr_assert_eq(wait_run(&h, run, 1000).run.replay_invalid, replay_invalid(d));
	pc_store_reply_t r;
	cr_assert_eq(pc_store_run_get(h.store, run, &r), 0);
	cr_assert_eq((r.flags & PC_STORE_REPLAY_INVALID) != 0, replay_invalid(d));
	harness_stop_no_leaks(&h);
	pc_tool_registry_free(tools);
	return d;
}

/* §1.14: the provider fails after a mutating tool ran: the run is not safe
 * to replay, and says so. */
Test(agent_replay, a_failure_after_a_mutating_tool_is_replay_invalid)
{
	int n;
	cJSON *d = run_with_tool(true, NULL, "\"{}\"",
				 "{\"kind\":\"error\",\"status\":400,\"type\":\"invalid_request_error\","
				 "\"message\":\"Invalid 'messages[2].content': string too long.\"}]", &n);
	cr_assert_str_eq(jstr(d, "phase"), "error");
	cr_assert(replay_invalid(d), "replayInvalid missing: %s", jstr(d, "error"));
	cr_assert_str_eq(jstr(d, "livenessState"), "blocked");
	cJSON_Delete(d);
}

/* The same failure after a read-only tool: replaying is safe. */
Test(agent_replay, a_failure_after_a_read_only_tool_is_replayable)
{
	int n;
	cJSON *d = run_with_tool(false, NULL, "\"{}\"",
				 "{\"kind\":\"error\",\"status\":400,\"type\":\"invalid_request_error\","
				 "\"message\":\"Invalid 'messages[2].content': string too long.\"}]", &n);
	cr_assert_str_eq(jstr(d, "phase"), "error");
	cr_assert_not(replay_invalid(d));
	cJSON_Delete(d);
}

/* §1.7 steps 23 and 27, §1.14: an empty answer after a mutating tool is not
 * retried (the retry could act twice); the user is told actions may have run. */
Test(agent_replay, an_empty_answer_after_a_mutating_tool_warns_instead_of_retrying)
{
	int n;
	cJSON *d = run_with_tool(true, NULL, "\"{}\"", "{\"kind\":\"empty\"},{\"text\":\"never\"}]", &n);
	cr_assert_str_eq(jstr(d, "phase"), "error");
	cr_assert_str_eq(jstr(d, "errorKind"), "incomplete_turn");
	cr_assert_str_eq(payload_text(d), "⚠️ Agent couldn't generate a response. Note: some tool actions "
					  "may have already been executed — please verify before retrying.");
	cr_assert(replay_invalid(d));
	cr_assert_str_eq(jstr(d, "livenessState"), "abandoned");
	cr_assert_eq(n, 2, "the turn was replayed: %d requests", n);
	cJSON_Delete(d);
}

/* After a read-only tool the empty answer is retried once, with the
 * instruction, and the retry's answer ends the run well. */
Test(agent_replay, an_empty_answer_after_a_read_only_tool_is_retried)
{
	int n;
	cJSON *d = run_with_tool(false, NULL, "\"{}\"", "{\"kind\":\"empty\"},{\"text\":\"here it is\"}]", &n);
	cr_assert_str_eq(jstr(d, "phase"), "end", "%s: %s", jstr(d, "errorKind"), jstr(d, "error"));
	cr_assert_str_eq(payload_text(d), "here it is");
	cr_assert_not(replay_invalid(d));
	cr_assert_eq(n, 3);
	cJSON_Delete(d);
}

/* A mutating tool refused before its body ran (bad arguments) did
 * nothing: the turn stays replayable. The refusal is a tool error, so the
 * empty answer is not retried (§1.7: no non-visible retry after a tool
 * error) and the warning is what the user reads (§5.7). */
Test(agent_replay, a_mutating_tool_refused_before_running_has_no_side_effects)
{
	int n;
	cJSON *d = run_with_tool(true,
				 "{\"type\":\"object\",\"properties\":{\"path\":{\"type\":\"string\"}},"
				 "\"required\":[\"path\"]}",
				 "\"{}\"", "{\"kind\":\"empty\"},{\"text\":\"never\"}]", &n);
	cr_assert_not(replay_invalid(d));
	cr_assert_str_eq(payload_text(d), "\u26a0\ufe0f touch failed", "%s: %s", jstr(d, "errorKind"), jstr(d, "error"));
	cr_assert_eq(n, 2);
	cJSON_Delete(d);
}

/* Without any tool, an empty answer that stays empty after its one retry
 * is an incomplete turn with the plain text (§1.14), abandoned. */
Test(agent_replay, an_answer_that_stays_empty_is_an_incomplete_turn)
{
	harness_t h;
	harness_start_with(&h, SOLO_CONFIG, "{\"then\":\"loop\",\"steps\":[{\"kind\":\"empty\"}]}", NULL);
	char run[80];
	cr_assert_eq(submit(&h, "s", "go", run), PC_AGENT_STARTED);
	cJSON *d = finish_of(&h, run, 30000);
	cr_assert_str_eq(jstr(d, "phase"), "error");
	cr_assert_str_eq(jstr(d, "errorKind"), "incomplete_turn");
	cr_assert_str_eq(payload_text(d), "⚠️ Agent couldn't generate a response. Please try again.");
	cr_assert_str_eq(jstr(d, "livenessState"), "abandoned");
	cr_assert_not(replay_invalid(d));
	cr_assert_eq(request_count(&h), 2);
	cJSON_Delete(d);
	harness_stop_no_leaks(&h);
}

/* What the tool `look` saw of its own request in the database file,
 * through a connection of its own: the tool-call messages committed. */
static int look_call(void *user, const cJSON *args, const pc_tool_env_t *env, pc_tool_output_t *out)
{
	(void)args, (void)env;
	const char *db = user;
	sqlite3 *c = NULL;
	sqlite3_stmt *st = NULL;
	int seen = -1;
	if (sqlite3_open_v2(db, &c, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
	    sqlite3_prepare_v2(c, "SELECT count(*) FROM messages WHERE role = 'assistant' AND tool_call_ids IS NOT NULL",
			       -1, &st, NULL) == SQLITE_OK &&
	    sqlite3_step(st) == SQLITE_ROW)
		seen = sqlite3_column_int(st, 0);
	sqlite3_finalize(st);
	sqlite3_close(c);
	char text[32];
	snprintf(text, sizeof(text), "seen %d", seen);
	out->text = strdup(text);
	return out->text ? 0 : PC_ENOMEM;
}

/* The calls committed when the tool `look` (mutating or not) ran, with
 * the store's lazy writes held for 10 s: only a sync asked for the call
 * commits its request first. */
static int calls_on_record_at_start(bool mutating)
{
	harness_t h;
	harness_store_lazy_ms = 10000;
	char db[160];
	pc_tool_registry_t *tools = NULL;
	cr_assert_eq(pc_tool_registry_new(&tools), 0);
	pc_tool_def_t def = {.name = "look", .description = "looks at the record", .call = look_call,
			     .user = db, .blocking = true, .mutating = mutating};
	cr_assert_eq(pc_tool_register(tools, &def), 0);
	harness_start_with(&h, SOLO_CONFIG,
			   "{\"steps\":[{\"kind\":\"tool_calls\",\"tool_calls\":[{\"name\":\"look\",\"arguments\":{}}]},"
			   "{\"text\":\"looked\"}]}",
			   tools);
	harness_store_lazy_ms = 0;
	snprintf(db, sizeof(db), "%s/state.db", h.dir);
	char run[80];
	cr_assert_eq(submit(&h, "s", "go", run), PC_AGENT_STARTED);
	cJSON *d = finish_of(&h, run, 30000);
	cr_assert_str_eq(jstr(d, "status"), "ok");
	cJSON_Delete(d);
	int seen = -1;
	pc_store_history_t *hist = NULL;
	cr_assert_eq(pc_store_history(h.store, "s", &hist), 0);
	for (size_t i = 0; i < pc_store_history_count(hist); i++) {
		pc_store_msg_t m;
		pc_store_history_get(hist, i, &m);
		const char *at = strcmp(m.role, "toolResult") ? NULL : strstr(m.content, "seen ");
		if (at)
			cr_assert_eq(sscanf(at, "seen %d", &seen), 1, "%s", m.content);
	}
	pc_store_history_free(hist);
	harness_stop_no_leaks(&h);
	pc_tool_registry_free(tools);
	return seen;
}

Test(agent_replay, a_mutating_tool_starts_once_its_request_is_durable)
{
	cr_assert_eq(calls_on_record_at_start(true), 1);
}

/* A read-only tool has nothing to undo: its request commits with the
 * turn's others, no commit of its own. */
Test(agent_replay, a_read_only_tool_does_not_wait_for_a_commit)
{
	cr_assert_eq(calls_on_record_at_start(false), 0);
}

/* A run cut off while its tool ran (a crash, a lost node) left its call
 * without a result. The next run of the session writes the result the
 * repair makes up (§2.2), under the cut-off run, before its own turn: the
 * stored transcript is paired as the model reads it, and the feed names
 * the result by that run, as the history does. */
Test(agent_replay, the_next_run_writes_the_result_of_a_call_cut_off)
{
	harness_t h;
	harness_start_with(&h, SOLO_CONFIG, "{\"steps\":[{\"text\":\"after the crash\"}]}", NULL);
	static const struct {
		const char *role, *content, *ids;
	} cut[] = {
		{"user", "{\"role\":\"user\",\"content\":\"write it\"}", NULL},
		{"assistant",
		 "{\"role\":\"assistant\",\"content\":[{\"type\":\"toolCall\",\"id\":\"c1\",\"name\":\"write\","
		 "\"arguments\":{\"path\":\"a\",\"content\":\"b\"}}],\"stopReason\":\"toolUse\"}",
		 "[\"c1\"]"},
	};
	for (size_t i = 0; i < 2; i++) {
		pc_store_msg_t m = {.role = cut[i].role, .content = cut[i].content, .tool_call_ids = cut[i].ids,
				    .run_id = "cut-off"};
		int64_t seq = 0;
		cr_assert_eq(pc_store_append(h.store, "s", 0, &m, &seq), 0);
	}
	pc_event_sub_t *feed = NULL;
	pc_event_sub_config_t sc = {.capacity = 4096};
	cr_assert_eq(pc_event_sub_new(&sc, &feed), 0);
	cr_assert_eq(pc_agent_subscribe_feed(h.agent, feed), 0);
	char run[80];
	cr_assert_eq(submit(&h, "s", "go on", run), PC_AGENT_STARTED);
	cJSON *d = finish_of(&h, run, 30000);
	cr_assert_str_eq(jstr(d, "status"), "ok");
	cJSON_Delete(d);
	cr_assert(await_event(feed, PC_EVENT_LIFECYCLE, "\"runId\":\"cut-off\",\"message\":{\"role\":\"toolResult\"", 10000,
			      NULL, 0),
		  "the feed never named the made-up result by the cut-off run");
	pc_agent_unsubscribe_feed(h.agent, feed);
	pc_event_sub_release(feed);
	char roles[256];
	cr_assert_eq(history_roles(&h, "s", roles, sizeof(roles)), 5, "%s", roles);
	cr_assert_str_eq(roles, "user,assistant,toolResult,user,assistant");
	pc_store_history_t *hist = NULL;
	cr_assert_eq(pc_store_history(h.store, "s", &hist), 0);
	pc_store_msg_t m;
	pc_store_history_get(hist, 2, &m);
	cr_assert_str_eq(m.run_id, "cut-off");
	cr_assert_str_eq(m.tool_call_ids, "[\"c1\"]");
	cr_assert_not_null(strstr(m.content, "missing tool result"), "%s", m.content);
	pc_store_history_free(hist);
	/* written once: the next run finds nothing to repair */
	cr_assert_eq(submit(&h, "s", "and again", run), PC_AGENT_STARTED);
	cJSON_Delete(finish_of(&h, run, 30000));
	cr_assert_eq(history_roles(&h, "s", roles, sizeof(roles)), 7, "%s", roles);
	harness_stop_no_leaks(&h);
}
