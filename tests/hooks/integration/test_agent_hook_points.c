/*
 * The hook points of the session, run and compaction actors, through the
 * whole loop against the embedded mock LLM: message_received and
 * session_start / session_end (idle and shutdown) from the session;
 * before_model_resolve (switches the model, ignores an unknown one, and
 * an abort during it still ends the run), message_sending (cancel,
 * rewrite) and message_sent, agent_end for every kind of end, from the
 * run; before_compaction / after_compaction around overflow and threshold
 * compactions. A registry with no handler for these points changes
 * nothing. And `pincer agent --local` loads the configured plugins.
 */
#include <criterion/criterion.h>

#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent_harness.h"
#include "agents/hooks/hooks.h"

/* ---- a C handler that records every event ---------------------------------- */

#define PROBE_EVENTS 16

typedef struct probe {
	pthread_mutex_t lock;
	const char *result; /* the JSON this handler returns, or NULL */
	uint32_t delay_ms;  /* sleeps this long first */
	uint32_t calls, returned;
	char events[PROBE_EVENTS][2048];
} probe_t;

static probe_t *probe_new(const char *result)
{
	probe_t *p = calloc(1, sizeof(*p));
	cr_assert_not_null(p);
	cr_assert_eq(pthread_mutex_init(&p->lock, NULL), 0);
	p->result = result;
	return p;
}

static void probe_free(probe_t *p)
{
	pthread_mutex_destroy(&p->lock);
	free(p);
}

static int probe_fn(void *user, const pc_hook_call_t *call, cJSON **result)
{
	probe_t *p = user;
	char *ev = cJSON_PrintUnformatted(call->event);
	pthread_mutex_lock(&p->lock);
	if (p->calls < PROBE_EVENTS)
		snprintf(p->events[p->calls], sizeof(p->events[0]), "%s", ev ? ev : "");
	p->calls++;
	const char *r = p->result;
	uint32_t delay = p->delay_ms;
	pthread_mutex_unlock(&p->lock);
	cJSON_free(ev);
	if (delay)
		sleep_ms(delay);
	*result = r ? cJSON_Parse(r) : NULL;
	pthread_mutex_lock(&p->lock);
	p->returned++;
	pthread_mutex_unlock(&p->lock);
	return 0;
}

static uint32_t probe_calls(probe_t *p)
{
	pthread_mutex_lock(&p->lock);
	uint32_t n = p->calls;
	pthread_mutex_unlock(&p->lock);
	return n;
}

/* Observation handlers run on the pool: their call may land just after
 * the run. Waits (bounded) until `p` has been called n times. */
static uint32_t await_calls(probe_t *p, uint32_t n, int64_t timeout_ms)
{
	uint64_t until = now_ms() + (uint64_t)timeout_ms;
	while (probe_calls(p) < n && now_ms() < until)
		sleep_ms(5);
	return probe_calls(p);
}

/* Event i as parsed JSON (the caller deletes it). */
static cJSON *probe_event(probe_t *p, uint32_t i)
{
	cr_assert_lt(i, PROBE_EVENTS);
	pthread_mutex_lock(&p->lock);
	cJSON *e = cJSON_Parse(p->events[i]);
	pthread_mutex_unlock(&p->lock);
	cr_assert_not_null(e, "event %u: %s", i, p->events[i]);
	return e;
}

static void add_probe(pc_hooks_t *h, pc_hook_point_t point, probe_t *p)
{
	pc_hook_def_t d = {.point = point, .fn = probe_fn, .user = p, .timeout_ms = 5000};
	cr_assert_eq(pc_hooks_register(h, &d), 0);
}

static pc_hooks_t *hooks_new(void)
{
	pc_hooks_t *h = NULL;
	cr_assert_eq(pc_hooks_new(&h), 0);
	return h;
}

#define CONFIG_WITH(extra)                                                                          \
	"{\"providers\":{\"mock\":{\"api\":\"openai-completions\",\"embedded\":true}},"              \
	"\"agents\":{\"defaults\":{\"model\":\"mock/m1\",\"maxConcurrent\":4,"                       \
	"\"sessionIdleSeconds\":1" extra "}}}"
#define CONFIG CONFIG_WITH("")

#define TEXT(t) "{\"steps\":[{\"kind\":\"text\",\"text\":\"" t "\"}]}"

static bool jbool(const cJSON *o, const char *k)
{
	return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, k));
}

static double jnum(const cJSON *o, const char *k)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
	cr_assert(cJSON_IsNumber(v), "%s is not a number", k);
	return v->valuedouble;
}

static int payload_count(const cJSON *o)
{
	const cJSON *p = cJSON_GetObjectItemCaseSensitive(o, "payloads");
	cr_assert(cJSON_IsArray(p), "no payloads array");
	return cJSON_GetArraySize(p);
}

/* ---- the session: message_received, session_start / session_end ------------ */

Test(agent_hook_points, message_received_and_the_session_lifecycle)
{
	probe_t *recv = probe_new(NULL), *start = probe_new(NULL), *end = probe_new(NULL);
	pc_hooks_t *hooks = hooks_new();
	add_probe(hooks, PC_HOOK_MESSAGE_RECEIVED, recv);
	add_probe(hooks, PC_HOOK_SESSION_START, start);
	add_probe(hooks, PC_HOOK_SESSION_END, end);
	harness_t h;
	harness_start_hooked(&h, CONFIG, NULL, NULL, hooks);

	pc_agent_params_t p = {.session_key = "s", .message = "hello there", .idempotency_key = "idem-1",
			       .queue_mode = "followup"};
	pc_agent_accepted_t acc;
	cr_assert_eq(pc_agent_submit(h.agent, &p, &acc), 0);
	wait_run(&h, acc.run_id, 20000);
	cr_assert_eq(await_calls(recv, 1, 5000), 1);
	cJSON *e = probe_event(recv, 0);
	cr_assert_str_eq(jstr(e, "content"), "hello there");
	cr_assert_str_eq(jstr(e, "sessionKey"), "s");
	cr_assert_str_eq(jstr(e, "runId"), acc.run_id);
	cr_assert_str_eq(jstr(e, "idempotencyKey"), "idem-1");
	cr_assert_str_eq(jstr(e, "queueMode"), "followup");
	cJSON_Delete(e);
	/* an idempotent duplicate is not a new message */
	pc_agent_accepted_t dup;
	cr_assert_eq(pc_agent_submit(h.agent, &p, &dup), 0);
	cr_assert_eq(dup.disposition, PC_AGENT_DUPLICATE);
	cr_assert_eq(await_calls(start, 1, 5000), 1);
	e = probe_event(start, 0);
	cr_assert_str_eq(jstr(e, "sessionKey"), "s");
	cr_assert_str_eq(jstr(e, "reason"), "start");
	cJSON_Delete(e);

	/* sessionIdleSeconds 1: the idle session retires */
	cr_assert_eq(await_calls(end, 1, 8000), 1, "the idle session did not retire");
	e = probe_event(end, 0);
	cr_assert_str_eq(jstr(e, "sessionKey"), "s");
	cr_assert_str_eq(jstr(e, "reason"), "idle");
	cr_assert_geq(jnum(e, "durationMs"), 0);
	cJSON_Delete(e);
	cr_assert_eq(probe_calls(recv), 1, "the duplicate was not received as a message");

	/* a message after that brings a new session actor up; stopping the
	 * agent ends it as a shutdown */
	char run[PC_RUN_ID_MAX + 1];
	submit(&h, "s", "again", run);
	wait_run(&h, run, 20000);
	cr_assert_eq(await_calls(start, 2, 5000), 2);
	pc_agent_free(h.agent, 10000);
	h.agent = NULL;
	cr_assert_eq(await_calls(end, 2, 5000), 2);
	e = probe_event(end, 1);
	cr_assert_str_eq(jstr(e, "reason"), "shutdown");
	cJSON_Delete(e);
	cr_assert_eq(probe_calls(recv), 2);
	harness_stop(&h);
	pc_hooks_free(hooks);
	probe_free(recv);
	probe_free(start);
	probe_free(end);
}

/* ---- the run: before_model_resolve ------------------------------------------ */

static void model_of_run(harness_t *h, const char *msg, char *model, size_t cap)
{
	int before = request_count(h);
	char run[PC_RUN_ID_MAX + 1];
	submit(h, "s", msg, run);
	cJSON *d = finish_of(h, run, 20000);
	cr_assert_str_eq(jstr(d, "status"), "ok", "%s", jstr(d, "error"));
	cJSON_Delete(d);
	cJSON *reqs = mock_requests(h);
	cr_assert_eq(cJSON_GetArraySize(reqs), before + 1);
	request_model(reqs, before, model, cap);
	cJSON_Delete(reqs);
}

Test(agent_hook_points, before_model_resolve_switches_the_model)
{
	probe_t *p = probe_new("{\"modelOverride\":\"m9\"}");
	pc_hooks_t *hooks = hooks_new();
	add_probe(hooks, PC_HOOK_BEFORE_MODEL_RESOLVE, p);
	harness_t h;
	harness_start_hooked(&h, HARNESS_CONFIG, TEXT("answer"), NULL, hooks);
	char model[64];
	model_of_run(&h, "which model?", model, sizeof(model));
	cr_assert_str_eq(model, "m9");
	cJSON *e = probe_event(p, 0);
	cr_assert_str_eq(jstr(e, "prompt"), "which model?");
	cr_assert_str_eq(jstr(e, "sessionKey"), "s");
	cJSON_Delete(e);

	/* "provider/model" names both: the fallback provider's own key goes out */
	p->result = "{\"modelOverride\":\"fb/m7\"}";
	model_of_run(&h, "second", model, sizeof(model));
	cr_assert_str_eq(model, "m7");
	cJSON *reqs = mock_requests(&h);
	const cJSON *hd = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(reqs, 1), "headers");
	cr_assert_str_eq(jstr(hd, "authorization"), "Bearer key-fb");
	cJSON_Delete(reqs);

	/* a provider the configuration does not know: ignored */
	p->result = "{\"providerOverride\":\"nope\",\"modelOverride\":\"m9\"}";
	model_of_run(&h, "third", model, sizeof(model));
	cr_assert_str_eq(model, "m1");
	/* no override at all: the configured model */
	p->result = "{}";
	model_of_run(&h, "fourth", model, sizeof(model));
	cr_assert_str_eq(model, "m1");
	cr_assert_eq(probe_calls(p), 4);
	harness_stop(&h);
	pc_hooks_free(hooks);
	probe_free(p);
}

Test(agent_hook_points, an_abort_during_before_model_resolve_ends_the_run)
{
	probe_t *p = probe_new("{\"modelOverride\":\"m9\"}");
	p->delay_ms = 2000;
	pc_hooks_t *hooks = hooks_new();
	add_probe(hooks, PC_HOOK_BEFORE_MODEL_RESOLVE, p);
	harness_t h;
	harness_start_hooked(&h, CONFIG, NULL, NULL, hooks);
	char run[PC_RUN_ID_MAX + 1];
	submit(&h, "s", "never mind", run);
	cr_assert_eq(await_calls(p, 1, 5000), 1);
	uint64_t t0 = now_ms();
	cr_assert_eq(pc_agent_abort_run(h.agent, run), 0);
	cJSON *d = finish_of(&h, run, 20000);
	cr_assert_str_eq(jstr(d, "status"), "aborted");
	cr_assert_lt(now_ms() - t0, 1500, "the abort did not wait for the hook");
	cJSON_Delete(d);
	/* the hook's late answer starts nothing */
	uint64_t until = now_ms() + 5000;
	while (now_ms() < until) {
		pthread_mutex_lock(&p->lock);
		bool back = p->returned == 1;
		pthread_mutex_unlock(&p->lock);
		if (back)
			break;
		sleep_ms(5);
	}
	sleep_ms(200);
	cr_assert_eq(request_count(&h), 0);
	harness_stop(&h);
	pc_hooks_free(hooks);
	probe_free(p);
}

/* ---- the run: message_sending, message_sent, agent_end --------------------- */

Test(agent_hook_points, message_sending_cancels_or_rewrites_and_message_sent_follows)
{
	probe_t *sending = probe_new("{\"cancel\":true}"), *sent = probe_new(NULL);
	pc_hooks_t *hooks = hooks_new();
	add_probe(hooks, PC_HOOK_MESSAGE_SENDING, sending);
	add_probe(hooks, PC_HOOK_MESSAGE_SENT, sent);
	harness_t h;
	harness_start_hooked(&h, CONFIG, "{\"default\":{\"kind\":\"text\",\"text\":\"the original reply\"}}", NULL,
			     hooks);
	char run[PC_RUN_ID_MAX + 1];
	submit(&h, "s", "first", run);
	cJSON *d = finish_of(&h, run, 20000);
	cr_assert_str_eq(jstr(d, "status"), "ok");
	cr_assert_eq(payload_count(d), 0, "a cancelled reply is dropped");
	cJSON_Delete(d);
	cJSON *e = probe_event(sending, 0);
	cr_assert_str_eq(jstr(e, "content"), "the original reply");
	cr_assert_eq(payload_count(e), 1);
	cr_assert_str_eq(payload_text(e), "the original reply");
	cr_assert_str_eq(jstr(e, "sessionKey"), "s");
	cr_assert_str_eq(jstr(e, "runId"), run);
	cJSON_Delete(e);

	sending->result = "{\"content\":\"a rewritten reply\"}";
	submit(&h, "s", "second", run);
	d = finish_of(&h, run, 20000);
	cr_assert_str_eq(jstr(d, "status"), "ok");
	cr_assert_eq(payload_count(d), 1);
	cr_assert_str_eq(payload_text(d), "a rewritten reply");
	cJSON_Delete(d);
	/* only the delivered reply is sent; the cancelled one never was */
	cr_assert_eq(await_calls(sent, 1, 5000), 1);
	sleep_ms(100);
	cr_assert_eq(probe_calls(sent), 1);
	e = probe_event(sent, 0);
	cr_assert_str_eq(jstr(e, "content"), "a rewritten reply");
	cr_assert(jbool(e, "success"));
	cr_assert_str_eq(jstr(e, "runId"), run);
	cJSON_Delete(e);
	cr_assert_eq(probe_calls(sending), 2);
	harness_stop(&h);
	pc_hooks_free(hooks);
	probe_free(sending);
	probe_free(sent);
}

Test(agent_hook_points, agent_end_sees_every_end)
{
	probe_t *p = probe_new(NULL);
	pc_hooks_t *hooks = hooks_new();
	add_probe(hooks, PC_HOOK_AGENT_END, p);
	harness_t h;
	harness_start_hooked(&h, CONFIG, "{\"default\":{\"kind\":\"text\",\"text\":\"fine\"}}", NULL, hooks);
	char run[PC_RUN_ID_MAX + 1];
	submit(&h, "s", "one", run);
	cJSON *d = finish_of(&h, run, 20000);
	cr_assert_str_eq(jstr(d, "status"), "ok");
	cJSON_Delete(d);
	cr_assert_eq(await_calls(p, 1, 5000), 1);
	cJSON *e = probe_event(p, 0);
	cr_assert(jbool(e, "success"));
	cr_assert_str_eq(jstr(e, "status"), "ok");
	cr_assert_str_eq(jstr(e, "runId"), run);
	cr_assert_str_eq(jstr(e, "sessionKey"), "s");
	cr_assert_geq(jnum(e, "durationMs"), 0);
	cr_assert_str_eq(payload_text(e), "fine");
	cr_assert_null(cJSON_GetObjectItemCaseSensitive(e, "error"));
	cJSON_Delete(e);

	/* the prompt's marker picks the mock's answer */
	submit(&h, "s", "[[mock:{\"kind\":\"error\",\"status\":400,\"message\":\"bad request here\"}]]", run);
	d = finish_of(&h, run, 20000);
	cr_assert_str_eq(jstr(d, "status"), "error");
	cJSON_Delete(d);
	cr_assert_eq(await_calls(p, 2, 5000), 2);
	e = probe_event(p, 1);
	cr_assert_not(jbool(e, "success"));
	cr_assert_str_eq(jstr(e, "status"), "error");
	cr_assert_neq(jstr(e, "error")[0], '\0', "the error is given");
	cJSON_Delete(e);

	submit(&h, "s", "[[mock:{\"kind\":\"text\",\"text\":\"too late\",\"ttft_ms\":3000}]]", run);
	uint64_t until = now_ms() + 5000;
	while (request_count(&h) < 3 && now_ms() < until)
		sleep_ms(5);
	cr_assert_eq(pc_agent_abort_run(h.agent, run), 0);
	d = finish_of(&h, run, 20000);
	cr_assert_str_eq(jstr(d, "status"), "aborted");
	cJSON_Delete(d);
	cr_assert_eq(await_calls(p, 3, 5000), 3);
	e = probe_event(p, 2);
	cr_assert_not(jbool(e, "success"));
	cr_assert_str_eq(jstr(e, "status"), "aborted");
	cr_assert_str_eq(jstr(e, "runId"), run);
	cJSON_Delete(e);
	harness_stop(&h);
	pc_hooks_free(hooks);
	probe_free(p);
}

/* ---- compaction ------------------------------------------------------------- */

/* The events of one compaction that wrote the summary "SUMMARY";
 * `shrinks`: the transcript was long enough to end up shorter. */
static void check_compaction_events(probe_t *before, probe_t *after, const char *trigger, const char *run,
				    bool shrinks)
{
	cr_assert_eq(await_calls(before, 1, 5000), 1);
	cr_assert_eq(await_calls(after, 1, 5000), 1);
	cJSON *b = probe_event(before, 0), *a = probe_event(after, 0);
	cr_assert_str_eq(jstr(b, "trigger"), trigger);
	cr_assert_str_eq(jstr(b, "sessionKey"), "s");
	cr_assert_str_eq(jstr(b, "runId"), run);
	cr_assert_gt(jnum(b, "messageCount"), 0);
	cr_assert_gt(jnum(b, "tokensBefore"), 0);
	cr_assert_str_eq(jstr(a, "trigger"), trigger);
	cr_assert_str_eq(jstr(a, "runId"), run);
	cr_assert(jbool(a, "compacted"), "%s", jstr(a, "error"));
	cr_assert_eq(jnum(a, "summaryChars"), strlen("SUMMARY"));
	cr_assert_gt(jnum(a, "messageCount"), 0);
	cr_assert_gt(jnum(a, "compactedCount"), 0);
	cr_assert_gt(jnum(a, "tokensAfter"), 0);
	if (shrinks)
		cr_assert_lt(jnum(a, "messageCount"), jnum(b, "messageCount"));
	cJSON_Delete(b);
	cJSON_Delete(a);
}

static pc_hooks_t *compaction_hooks(probe_t *before, probe_t *after)
{
	pc_hooks_t *hooks = hooks_new();
	add_probe(hooks, PC_HOOK_BEFORE_COMPACTION, before);
	add_probe(hooks, PC_HOOK_AFTER_COMPACTION, after);
	return hooks;
}

Test(agent_hook_points, compaction_hooks_around_an_overflow_compaction)
{
	probe_t *before = probe_new(NULL), *after = probe_new(NULL);
	pc_hooks_t *hooks = compaction_hooks(before, after);
	harness_t h;
	harness_start_hooked(&h, CONFIG_WITH(",\"compaction\":{\"keepRecentTokens\":50}"),
			     "{\"steps\":[{\"kind\":\"context_overflow\"},{\"text\":\"SUMMARY\"},"
			     "{\"text\":\"after\"}]}",
			     NULL, hooks);
	seed_history(&h, "s", 30);
	char run[PC_RUN_ID_MAX + 1];
	submit(&h, "s", "what is on shelf B5?", run);
	cJSON *d = finish_of(&h, run, 20000);
	cr_assert_str_eq(jstr(d, "status"), "ok", "%s", jstr(d, "error"));
	cr_assert_str_eq(payload_text(d), "after");
	cJSON_Delete(d);
	check_compaction_events(before, after, "overflow", run, true);
	harness_stop(&h);
	pc_hooks_free(hooks);
	probe_free(before);
	probe_free(after);
}

Test(agent_hook_points, compaction_hooks_around_a_threshold_compaction)
{
	probe_t *before = probe_new(NULL), *after = probe_new(NULL);
	pc_hooks_t *hooks = compaction_hooks(before, after);
	harness_t h;
	harness_start_hooked(&h,
			     "{\"providers\":{\"mock\":{\"api\":\"openai-completions\",\"embedded\":true,"
			     "\"contextTokens\":16000}},"
			     "\"agents\":{\"defaults\":{\"model\":\"mock/m\","
			     "\"compaction\":{\"keepRecentTokens\":10}}}}",
			     "{\"steps\":[{\"kind\":\"tool_calls\",\"tool_calls\":[{\"name\":\"clock\"}],"
			     "\"usage\":{\"input_tokens\":9000,\"output_tokens\":10}},"
			     "{\"text\":\"SUMMARY\"},{\"text\":\"done\"}]}",
			     NULL, hooks);
	char run[PC_RUN_ID_MAX + 1];
	submit(&h, "s", "do the work", run);
	cJSON *d = finish_of(&h, run, 20000);
	cr_assert_str_eq(jstr(d, "status"), "ok", "%s", jstr(d, "error"));
	cr_assert_str_eq(payload_text(d), "done");
	cJSON_Delete(d);
	check_compaction_events(before, after, "threshold", run, false);
	harness_stop(&h);
	pc_hooks_free(hooks);
	probe_free(before);
	probe_free(after);
}

/* ---- nothing registered for these points ------------------------------------ */

Test(agent_hook_points, a_registry_without_these_points_changes_nothing)
{
	probe_t *p = probe_new(NULL);
	pc_hooks_t *hooks = hooks_new();
	add_probe(hooks, PC_HOOK_GATEWAY_START, p);
	harness_t h;
	harness_start_hooked(&h, HARNESS_CONFIG, TEXT("plain"), NULL, hooks);
	char model[64];
	model_of_run(&h, "hello", model, sizeof(model));
	cr_assert_str_eq(model, "m1");
	char run[PC_RUN_ID_MAX + 1];
	submit(&h, "s", "again", run);
	cJSON *d = finish_of(&h, run, 20000);
	cr_assert_str_eq(jstr(d, "status"), "ok");
	cr_assert_eq(payload_count(d), 1);
	cJSON_Delete(d);
	harness_stop(&h);
	cr_assert_eq(probe_calls(p), 0);
	pc_hooks_free(hooks);
	probe_free(p);
}

/* ---- `pincer agent --local` loads the configured plugins --------------------- */

/* dirname(this test)/../rel: the build tree's layout. */
static void build_path(const char *rel, char *out, size_t n)
{
	char exe[PATH_MAX];
	ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	cr_assert_gt(len, 0);
	exe[len] = '\0';
	snprintf(out, n, "%s/../%s", dirname(exe), rel);
	cr_assert_eq(access(out, R_OK), 0, "%s is missing: build pincer and pincer_example_plugin", out);
}

/* Runs argv with stderr into `err_path` and PINCER_HOME set to `home`
 * (the store and the session locks go there); its exit status (-1: it
 * had to be killed after 60 s). */
static int run_cli(char *const argv[], const char *err_path, const char *home)
{
	extern char **environ;
	size_t n = 0;
	while (environ[n])
		n++;
	char **env = calloc(n + 2, sizeof(*env));
	cr_assert_not_null(env);
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		if (strncmp(environ[i], "PINCER_", 7))
			env[k++] = environ[i];
	char home_var[PATH_MAX];
	snprintf(home_var, sizeof(home_var), "PINCER_HOME=%s", home);
	env[k] = home_var;
	posix_spawn_file_actions_t fa;
	cr_assert_eq(posix_spawn_file_actions_init(&fa), 0);
	cr_assert_eq(posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0), 0);
	cr_assert_eq(posix_spawn_file_actions_addopen(&fa, 2, err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600), 0);
	pid_t pid;
	cr_assert_eq(posix_spawn(&pid, argv[0], &fa, NULL, argv, env), 0);
	posix_spawn_file_actions_destroy(&fa);
	free(env);
	int status = 0;
	uint64_t until = now_ms() + 60000;
	while (waitpid(pid, &status, WNOHANG) == 0) {
		if (now_ms() >= until) {
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
			return -1;
		}
		sleep_ms(10);
	}
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

Test(agent_hook_points, the_cli_loads_enabled_plugins_and_reports_the_rest)
{
	char pincer[PATH_MAX + 16], plugin[PATH_MAX + 48];
	build_path("agents/pincer", pincer, sizeof(pincer));
	build_path("plugins/pincer_example_plugin.so", plugin, sizeof(plugin));
	char dir[] = "/tmp/pincer-cli-XXXXXX";
	cr_assert_not_null(mkdtemp(dir));
	char cfg_path[64], err_path[64], config[2 * PATH_MAX];
	snprintf(cfg_path, sizeof(cfg_path), "%s/pincer.json", dir);
	snprintf(err_path, sizeof(err_path), "%s/stderr", dir);
	/* the embedded mock's demo calls the clock tool: the plugin blocks it */
	snprintf(config, sizeof(config),
		 "{\"plugins\":{\"entries\":{"
		 "\"ex\":{\"path\":\"%s\",\"config\":{\"blockTool\":\"clock\",\"blockReason\":\"no clocks here\"}},"
		 "\"missing\":{\"path\":\"%s/none.so\"},"
		 "\"off\":{\"path\":\"%s/none.so\",\"enabled\":false}}}}",
		 plugin, dir, dir);
	FILE *f = fopen(cfg_path, "w");
	cr_assert_not_null(f);
	cr_assert_gt(fputs(config, f), -1);
	cr_assert_eq(fclose(f), 0);
	char *argv[] = {pincer, "agent", "--local", "-m", "what time is it?", "--config", cfg_path, NULL};
	int rc = run_cli(argv, err_path, dir);
	char err[8192] = "";
	f = fopen(err_path, "r");
	cr_assert_not_null(f);
	size_t n = fread(err, 1, sizeof(err) - 1, f);
	err[n] = '\0';
	fclose(f);
	cr_assert_eq(rc, 0, "exit %d, stderr:\n%s", rc, err);
	cr_assert_not_null(strstr(err, "plugin missing: "), "%s", err);
	cr_assert_null(strstr(err, "plugin off"), "a disabled plugin is not loaded: %s", err);
	cr_assert_not_null(strstr(err, "\"type\":\"hook.report\",\"kind\":\"log\",\"owner\":\"ex\""), "%s", err);
	cr_assert_not_null(strstr(err, "example plugin loaded"), "%s", err);
	cr_assert_not_null(strstr(err, "no clocks here"), "the plugin's hook blocked the tool: %s", err);
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	cr_assert_eq(system(cmd), 0);
}
