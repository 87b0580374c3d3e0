/*
 * The `pincer` command end to end: the real binary (built next to this
 * test) as child processes on loopback. `pincer gateway --port 0` serves
 * the embedded mock LLM; `pincer agent` talks to it over the WebSocket
 * RPC; `health`, `sessions`, `devices`, `config`, `version`; flags from the
 * environment; usage errors and --help everywhere; signals to the agent
 * (the run is aborted in the gateway) and to the gateway (the run ends,
 * the gateway exits 0); a lost gateway is never replaced by a local run.
 *
 * Every child runs in a fresh directory with PINCER_HOME there and every
 * other PINCER_ variable removed; every wait is bounded; only this test's
 * own children are signalled.
 */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gateway_device.h"
#include "gateway_harness.h"
#include "pincer_child.h"
#include "raw_http.h"
#include "runtime/version.h"

#define TOKEN "cli-s3cret"
#define EXIT_WAIT_MS 60000 /* generous: sanitizer builds start slowly */
/* A message the mock answers slowly: 12 words, 400 ms apart (~4.4 s). */
#define SLOW_MSG                                                                                   \
	"slow [[mock:{\"text\":\"one two three four five six seven eight nine ten eleven twelve\","    \
	"\"delay_ms\":400}]]"

/* ---- children ---- */

typedef struct child {
	pid_t pid;
	char out[PATH_MAX], err[PATH_MAX]; /* where its stdout and stderr go */
} child_t;

typedef struct ctx {
	char dir[64];
	char pincer[PATH_MAX];
	char url[64];
	uint16_t port;
	child_t gw;
	unsigned runs; /* names the output files */
} ctx_t;

/* The environment without PINCER_ variables, plus PINCER_HOME and `extra`
 * (NULL-terminated "NAME=value" strings, may be NULL). */
static char **child_env(const ctx_t *t, const char *const *extra, char *home)
{
	extern char **environ;
	size_t n = 0, k = 0, m = 0;
	while (environ[n])
		n++;
	while (extra && extra[m])
		m++;
	char **env = calloc(n + m + 2, sizeof(*env));
	cr_assert_not_null(env);
	for (size_t i = 0; i < n; i++)
		if (strncmp(environ[i], "PINCER_", 7))
			env[k++] = environ[i];
	snprintf(home, PATH_MAX, "PINCER_HOME=%s", t->dir);
	env[k++] = home;
	for (size_t i = 0; i < m; i++)
		env[k++] = (char *)extra[i];
	return env;
}

/* Starts `pincer args...` in the test's directory. */
static void spawn(ctx_t *t, child_t *c, const char *const *args, const char *const *env_extra)
{
	char *argv[32];
	size_t n = 0;
	argv[n++] = t->pincer;
	for (; args[n - 1] && n < 31; n++)
		argv[n] = (char *)args[n - 1];
	argv[n] = NULL;
	unsigned id = ++t->runs;
	snprintf(c->out, sizeof(c->out), "%s/out.%u", t->dir, id);
	snprintf(c->err, sizeof(c->err), "%s/err.%u", t->dir, id);
	/* made here, so readers never race the child to them */
	write_file(c->out, "");
	write_file(c->err, "");
	char home[PATH_MAX];
	char **env = child_env(t, env_extra, home);
	c->pid = start_child(t->pincer, argv, env, t->dir, c->out, c->err);
	free(env);
}

typedef struct result {
	int status;
	char *out, *err;
} result_t;

static void result_free(result_t *r)
{
	free(r->out);
	free(r->err);
}

/* Runs `pincer args...` to its end. */
static result_t run_env(ctx_t *t, const char *const *args, const char *const *env)
{
	child_t c;
	spawn(t, &c, args, env);
	result_t r = {.status = child_wait(&c.pid, EXIT_WAIT_MS)};
	r.out = read_file(c.out);
	r.err = read_file(c.err);
	return r;
}

static result_t run(ctx_t *t, const char *const *args) { return run_env(t, args, NULL); }

#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})

/* Waits until the file holds `needle` (true), or timeout_ms. */
static bool await_text(const char *path, const char *needle, uint64_t timeout_ms)
{
	uint64_t until = now_ms() + timeout_ms;
	do {
		char *s = read_file(path);
		bool found = strstr(s, needle) != NULL;
		free(s);
		if (found)
			return true;
		sleep_ms(20);
	} while (now_ms() < until);
	return false;
}

/* ---- the gateway ---- */

/* A fresh directory for the children (no gateway). */
static void dir_only(ctx_t *t)
{
	memset(t, 0, sizeof(*t));
	snprintf(t->dir, sizeof(t->dir), "/tmp/pincer-cli-XXXXXX");
	cr_assert_not_null(mkdtemp(t->dir));
	find_pincer(t->pincer, sizeof(t->pincer));
}

/* A directory, and a gateway on a free loopback port serving the embedded
 * mock with token auth (`gateway` goes into the gateway section). */
static void up_with(ctx_t *t, const char *gateway)
{
	dir_only(t);
	char cfg[128], text[512];
	snprintf(cfg, sizeof(cfg), "%s/gateway.json", t->dir);
	snprintf(text, sizeof(text), "{\"gateway\":{\"auth\":{\"mode\":\"token\",\"token\":\"" TOKEN "\"}%s}}",
		 gateway);
	write_file(cfg, text);
	/* --json is accepted (the output is JSON lines anyway) */
	spawn(t, &t->gw, ARGS("gateway", "--port", "0", "--config", cfg, "--json"), NULL);
	cr_assert(await_text(t->gw.out, "\"listening\"", EXIT_WAIT_MS), "the gateway did not start");
	char *line = read_file(t->gw.out);
	cJSON *j = cJSON_Parse(line);
	free(line);
	cr_assert_not_null(j);
	t->port = (uint16_t)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(j, "port"));
	cr_assert_gt(t->port, 0);
	cJSON_Delete(j);
	snprintf(t->url, sizeof(t->url), "ws://127.0.0.1:%u", (unsigned)t->port);
}

static void up(ctx_t *t) { up_with(t, ""); }

/* Stops the gateway if there is one (SIGTERM: it must exit 0) and removes
 * the directory. */
static void down(ctx_t *t)
{
	if (t->gw.pid) {
		cr_assert_eq(kill(t->gw.pid, SIGTERM), 0);
		int st = child_wait(&t->gw.pid, EXIT_WAIT_MS);
		char *err = read_file(t->gw.err);
		cr_assert_eq(st, 0, "the gateway exited %d:\n%s", st, err);
		free(err);
	}
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", t->dir);
	cr_assert_eq(system(cmd), 0);
}

/* ---- JSON lines ---- */

/* Parses every line of `text` (each must be a JSON object) into an array. */
static cJSON *json_lines(const char *text)
{
	cJSON *all = cJSON_CreateArray();
	const char *p = text;
	while (*p) {
		const char *nl = strchr(p, '\n');
		cr_assert_not_null(nl, "the last line is not terminated: %s", p);
		cJSON *j = cJSON_ParseWithLength(p, (size_t)(nl - p));
		cr_assert(cJSON_IsObject(j), "not a JSON object: %.*s", (int)(nl - p), p);
		cJSON_AddItemToArray(all, j);
		p = nl + 1;
	}
	return all;
}

static cJSON *last(cJSON *arr) { return cJSON_GetArrayItem(arr, cJSON_GetArraySize(arr) - 1); }

/* ---- agent through the gateway ---- */

Test(agent_cli, agent_answers_through_the_gateway)
{
	ctx_t t;
	up(&t);
	result_t r = run(&t, ARGS("agent", "-m", "hello", "--url", t.url, "--token", TOKEN));
	cr_assert_eq(r.status, 0, "exit %d, stderr:\n%s", r.status, r.err);
	/* the embedded mock calls the clock tool, then echoes the message */
	cr_assert_str_eq(r.out, "Let me check the time.\nhello\n");
	cr_assert_not_null(strstr(r.err, "[tool clock] "), "%s", r.err);
	result_free(&r);

	r = run(&t, ARGS("agent", "-m", "hello json", "--url", t.url, "--token", TOKEN, "--json", "--session", "js"));
	cr_assert_eq(r.status, 0, "%s", r.err);
	cJSON *lines = json_lines(r.out);
	cr_assert_gt(cJSON_GetArraySize(lines), 3);
	cJSON *res = last(lines), *first = cJSON_GetArrayItem(lines, 0), *e;
	cr_assert_str_eq(jstr(res, "type"), "result");
	cr_assert_str_eq(jstr(res, "status"), "ok");
	cr_assert_str_eq(jstr(res, "summary"), "completed");
	const cJSON *payloads = jget(jget(res, "result"), "payloads");
	cr_assert_str_eq(jstr(cJSON_GetArrayItem(payloads, 0), "text"), "hello json");
	cr_assert_str_eq(jstr(first, "stream"), "lifecycle");
	cr_assert_str_eq(jstr(jget(first, "data"), "phase"), "start");
	bool tool_result = false;
	cJSON_ArrayForEach(e, lines) {
		cr_assert_str_eq(jstr(e, "runId"), jstr(res, "runId"), "one run's lines only");
		if (e != res)
			cr_assert_str_eq(jstr(e, "sessionKey"), "js");
		tool_result |= !strcmp(jstr(e, "stream"), "tool") && jget(jget(e, "data"), "result");
	}
	cr_assert(tool_result, "tool events carry their results");
	cJSON_Delete(lines);
	result_free(&r);
	down(&t);
}

/* A run the provider refused: exit 1, the user-facing text (for billing,
 * the spec's generic one), and on the next line the provider's own words
 * (meta.error.message); --json gives them in result.meta.error. */
Test(agent_cli, a_failed_run_says_what_the_provider_said)
{
	ctx_t t;
	up(&t);
#define BILLING "bad [[mock:{\"kind\":\"error\",\"status\":400,\"type\":\"invalid_request_error\"," \
	"\"message\":\"Your credit balance is too low to access the Anthropic API.\"}]]"
	/* this one first: the billing refusal below puts the profile in cooldown */
	result_t r = run(&t, ARGS("agent", "-m", "bad [[mock:{\"kind\":\"error\",\"status\":400,\"message\":"
			 "\"Invalid value for 'temperature': must be at most 2.\"}]]",
			 "--url", t.url, "--token", TOKEN, "--json", "--session", "fmt"));
	cr_assert_eq(r.status, 1, "%s", r.err);
	cJSON *lines = json_lines(r.out);
	const cJSON *err = jget(jget(jget(last(lines), "result"), "meta"), "error");
	cr_assert_str_eq(jstr(err, "reason"), "format", "%s", r.out);
	cr_assert_not_null(strstr(jstr(err, "message"), "Invalid value for 'temperature'"), "%s", r.out);
	cr_assert_eq(cJSON_GetNumberValue(jget(err, "providerStatus")), 400);
	cJSON_Delete(lines);
	result_free(&r);
	r = run(&t, ARGS("agent", "-m", BILLING, "--url", t.url, "--token", TOKEN, "--session", "bill"));
	cr_assert_eq(r.status, 1, "exit %d, stderr:\n%s", r.status, r.err);
	cr_assert_not_null(strstr(r.err, "Your credit balance is too low"), "%s", r.err);
	result_free(&r);

#undef BILLING
	down(&t);
}

Test(agent_cli, health_and_sessions_ask_the_gateway)
{
	ctx_t t;
	up(&t);
	result_t r = run(&t, ARGS("agent", "-m", "first", "--url", t.url, "--token", TOKEN, "--session", "s1"));
	cr_assert_eq(r.status, 0, "%s", r.err);
	result_free(&r);

	r = run(&t, ARGS("health", "--json", "--url", t.url, "--token", TOKEN));
	cr_assert_eq(r.status, 0, "%s", r.err);
	cJSON *lines = json_lines(r.out);
	cr_assert_eq(cJSON_GetArraySize(lines), 1);
	cr_assert(cJSON_IsTrue(jget(last(lines), "ok")));
	cr_assert_str_eq(jstr(last(lines), "state"), "ready");
	cJSON_Delete(lines);
	result_free(&r);
	r = run(&t, ARGS("health", "--url", t.url, "--token", TOKEN));
	cr_assert_eq(r.status, 0);
	cr_assert_eq(strncmp(r.out, "ok: ready", 9), 0, "%s", r.out);
	result_free(&r);

	r = run(&t, ARGS("sessions", "list", "--json", "--url", t.url, "--token", TOKEN));
	cr_assert_eq(r.status, 0, "%s", r.err);
	lines = json_lines(r.out);
	cr_assert_eq(cJSON_GetArraySize(lines), 1);
	const cJSON *s = cJSON_GetArrayItem(jget(last(lines), "sessions"), 0);
	cr_assert_str_eq(jstr(s, "key"), "s1");
	cr_assert_eq(jnum(s, "runs"), 1);
	cr_assert_str_neq(jstr(s, "lastRunId"), "");
	cJSON_Delete(lines);
	result_free(&r);
	r = run(&t, ARGS("sessions", "list", "--url", t.url, "--token", TOKEN));
	cr_assert_eq(r.status, 0);
	cr_assert_not_null(strstr(r.out, "\ns1 "), "%s", r.out);
	result_free(&r);

	r = run(&t, ARGS("sessions", "show", "s1", "--json", "--url", t.url, "--token", TOKEN));
	cr_assert_eq(r.status, 0, "%s", r.err);
	lines = json_lines(r.out);
	const cJSON *msgs = jget(last(lines), "messages");
	cr_assert_geq(cJSON_GetArraySize(msgs), 2);
	cr_assert_str_eq(jstr(cJSON_GetArrayItem(msgs, 0), "role"), "user");
	cJSON_Delete(lines);
	result_free(&r);
	r = run(&t, ARGS("sessions", "show", "s1", "--url", t.url, "--token", TOKEN));
	cr_assert_eq(r.status, 0);
	cr_assert_eq(strncmp(r.out, "user: first\n", 12), 0, "%s", r.out);
	result_free(&r);
	down(&t);
}

/* A device on another machine, as a proxy on loopback the gateway trusts
 * names it, connects with the shared token: the answer. */
static cJSON *remote_device_connect(const ctx_t *t, const device_t *d)
{
	tws_options_t o = {.port = t->port, .headers = "X-Forwarded-For: 203.0.113.7\r\n"};
	cl_t *c = cl_open_with(&o);
	cJSON *r = dev_connect(c, d, &(dev_opts_t){.token = TOKEN});
	cl_free(c);
	return r;
}

/* The request id a refused remote device was given (64 bytes). */
static void remote_request(const ctx_t *t, const device_t *d, char *rid)
{
	cJSON *r = remote_device_connect(t, d);
	cr_assert_str_eq(jdetail(r), "PAIRING_REQUIRED", "%s", cJSON_PrintUnformatted(r));
	snprintf(rid, 64, "%s", jstr(jget(jget(r, "error"), "details"), "requestId"));
	cr_assert_neq(rid[0], '\0');
	cJSON_Delete(r);
}

Test(agent_cli, devices_lists_approves_and_rejects_pairing_requests)
{
	ctx_t t;
	up_with(&t, ",\"trustedProxies\":[\"127.0.0.1\"]");
	device_t d, e;
	dev_new(&d);
	dev_new(&e);
	char rid[64], rid2[64];
	remote_request(&t, &d, rid);

	result_t r = run(&t, ARGS("devices", "list", "--json", "--url", t.url, "--token", TOKEN));
	cr_assert_eq(r.status, 0, "%s", r.err);
	cJSON *lines = json_lines(r.out);
	const cJSON *p = cJSON_GetArrayItem(jget(last(lines), "pending"), 0);
	cr_assert_str_eq(jstr(p, "requestId"), rid);
	cr_assert_str_eq(jstr(p, "deviceId"), d.id);
	cJSON_Delete(lines);
	result_free(&r);
	r = run(&t, ARGS("devices", "list", "--url", t.url, "--token", TOKEN));
	cr_assert_eq(r.status, 0, "%s", r.err);
	cr_assert_not_null(strstr(r.out, rid), "%s", r.out);
	cr_assert_not_null(strstr(r.out, "203.0.113.7"), "%s", r.out);
	cr_assert_not_null(strstr(r.out, "no paired devices"), "%s", r.out);
	result_free(&r);

	r = run(&t, ARGS("devices", "approve", rid, "--url", t.url, "--token", TOKEN));
	cr_assert_eq(r.status, 0, "%s", r.err);
	cr_assert_not_null(strstr(r.out, d.id), "%s", r.out);
	result_free(&r);
	cJSON *c = remote_device_connect(&t, &d);
	cr_assert(jok(c), "approved: %s", cJSON_PrintUnformatted(c));
	cr_assert_geq(strlen(jstr(jget(jget(c, "payload"), "auth"), "deviceToken")), 40);
	cJSON_Delete(c);

	remote_request(&t, &e, rid2);
	r = run(&t, ARGS("devices", "reject", rid2, "--url", t.url, "--token", TOKEN));
	cr_assert_eq(r.status, 0, "%s", r.err);
	result_free(&r);
	r = run(&t, ARGS("devices", "approve", rid2, "--url", t.url, "--token", TOKEN));
	cr_assert_eq(r.status, 1);
	cr_assert_not_null(strstr(r.err, "unknown requestId"), "%s", r.err);
	result_free(&r);
	c = remote_device_connect(&t, &e);
	cr_assert_str_eq(jdetail(c), "PAIRING_REQUIRED", "rejected: %s", cJSON_PrintUnformatted(c));
	cJSON_Delete(c);
	r = run(&t, ARGS("devices", "list", "--json", "--url", t.url, "--token", TOKEN));
	cr_assert_eq(r.status, 0, "%s", r.err);
	lines = json_lines(r.out);
	cr_assert_str_eq(jstr(cJSON_GetArrayItem(jget(last(lines), "paired"), 0), "deviceId"), d.id);
	cJSON_Delete(lines);
	result_free(&r);

	/* usage errors */
	r = run(&t, ARGS("devices", "approve", "--url", t.url));
	cr_assert_eq(r.status, 2);
	result_free(&r);
	r = run(&t, ARGS("devices", "frobnicate"));
	cr_assert_eq(r.status, 2);
	result_free(&r);
	EVP_PKEY_free(d.key);
	EVP_PKEY_free(e.key);
	down(&t);
}

/* Sessions written straight into the gateway's store (a connection of
 * our own to the same file). */
static void seed_sessions(const ctx_t *t, int n)
{
	pc_runtime_t *rt = start_rt(1);
	pc_store_config_t cfg;
	pc_store_config_init(&cfg);
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/state.db", t->dir);
	cfg.path = path;
	pc_store_t *s = NULL;
	cr_assert_eq(pc_store_open(rt, &cfg, &s), 0);
	for (int i = 0; i < n; i++) {
		char key[32];
		snprintf(key, sizeof(key), "seed-%04d", i);
		pc_store_reply_t r;
		cr_assert_eq(pc_store_session(s, key, NULL, NULL, NULL, &r), 0);
	}
	pc_store_close(s);
	FREE_RUNTIME_CHECKED(rt);
}

/* Listing the number of keys in a `sessions list --json` answer, and
 * whether it says more follow. */
static int listed(ctx_t *t, const char *limit, bool *more)
{
	result_t r = limit ? run(t, ARGS("sessions", "list", "--json", "--limit", limit, "--url", t->url, "--token", TOKEN))
			   : run(t, ARGS("sessions", "list", "--json", "--url", t->url, "--token", TOKEN));
	cr_assert_eq(r.status, 0, "%s", r.err);
	cJSON *lines = json_lines(r.out);
	cr_assert_eq(cJSON_GetArraySize(lines), 1);
	const cJSON *list = jget(last(lines), "sessions");
	int n = cJSON_GetArraySize(list);
	/* each key once */
	cJSON *seen = cJSON_CreateObject();
	const cJSON *e;
	cJSON_ArrayForEach(e, list) {
		cr_assert_null(cJSON_GetObjectItemCaseSensitive(seen, jstr(e, "key")), "%s twice", jstr(e, "key"));
		cJSON_AddTrueToObject(seen, jstr(e, "key"));
	}
	cJSON_Delete(seen);
	cr_assert_eq(jnum(last(lines), "count"), n);
	*more = jget(last(lines), "nextCursor") != NULL;
	cJSON_Delete(lines);
	result_free(&r);
	return n;
}

Test(agent_cli, sessions_list_follows_the_pages_up_to_its_limit)
{
	ctx_t t;
	up(&t);
	seed_sessions(&t, 1500);
	bool more = false;
	cr_assert_eq(listed(&t, NULL, &more), 1000, "one page by default");
	cr_assert(more);
	cr_assert_eq(listed(&t, "1200", &more), 1200, "a page and a part");
	cr_assert(more);
	cr_assert_eq(listed(&t, "10000", &more), 1500, "every page");
	cr_assert_not(more);
	down(&t);
}

Test(agent_cli, the_environment_stands_in_for_flags)
{
	ctx_t t;
	up(&t);
	char url[96], bad_url[96];
	snprintf(url, sizeof(url), "PINCER_GATEWAY_URL=%s", t.url);
	snprintf(bad_url, sizeof(bad_url), "PINCER_GATEWAY_URL=ws://127.0.0.1:%u", (unsigned)free_loopback_port());
	const char *const env[] = {url, "PINCER_GATEWAY_TOKEN=" TOKEN, "PINCER_SESSION=from-env",
				   "PINCER_MESSAGE=hi from env", "PINCER_JSON=1", "PINCER_AGENT_TIMEOUT=30", NULL};
	result_t r = run_env(&t, ARGS("agent"), env);
	cr_assert_eq(r.status, 0, "%s", r.err);
	cJSON *lines = json_lines(r.out);
	cr_assert_str_eq(jstr(cJSON_GetArrayItem(lines, 0), "sessionKey"), "from-env");
	cr_assert_str_eq(jstr(cJSON_GetArrayItem(jget(jget(last(lines), "result"), "payloads"), 0), "text"),
			 "hi from env");
	cJSON_Delete(lines);
	result_free(&r);

	/* flags win over the environment */
	const char *const wrong[] = {bad_url, "PINCER_GATEWAY_TOKEN=wrong", "PINCER_JSON=0", NULL};
	r = run_env(&t, ARGS("agent", "-m", "flags", "--url", t.url, "--token", TOKEN), wrong);
	cr_assert_eq(r.status, 0, "%s", r.err);
	cr_assert_not_null(strstr(r.out, "flags\n"), "%s", r.out);
	result_free(&r);
	r = run_env(&t, ARGS("sessions", "list", "--json"), env);
	cr_assert_eq(r.status, 0, "%s", r.err);
	cr_assert_not_null(strstr(r.out, "\"key\":\"from-env\""), "%s", r.out);
	result_free(&r);
	/* a yes/no variable that is neither is a usage error */
	const char *const junk[] = {"PINCER_JSON=maybe", NULL};
	r = run_env(&t, ARGS("version"), junk);
	cr_assert_eq(r.status, 2);
	cr_assert_not_null(strstr(r.err, "PINCER_JSON"), "%s", r.err);
	result_free(&r);
	down(&t);
}

Test(agent_cli, the_configuration_names_the_gateway)
{
	ctx_t t;
	up(&t);
	char cfg[128], text[256];
	snprintf(cfg, sizeof(cfg), "%s/client.json", t.dir);
	snprintf(text, sizeof(text), "{\"gateway\":{\"port\":%u,\"auth\":{\"mode\":\"token\",\"token\":\"" TOKEN "\"}}}",
		 (unsigned)t.port);
	write_file(cfg, text);
	result_t r = run(&t, ARGS("agent", "-m", "configured", "--config", cfg));
	cr_assert_eq(r.status, 0, "%s", r.err);
	cr_assert_not_null(strstr(r.out, "configured\n"), "%s", r.out);
	result_free(&r);
	down(&t);
}

Test(agent_cli, a_wrong_or_missing_token_fails_clearly)
{
	ctx_t t;
	up(&t);
	result_t r = run(&t, ARGS("agent", "-m", "hi", "--url", t.url, "--token", "wrong"));
	cr_assert_eq(r.status, 1);
	cr_assert_str_eq(r.out, "");
	cr_assert_not_null(strstr(r.err, "refused the connection: unauthorized: gateway token mismatch"), "%s", r.err);
	result_free(&r);
	r = run(&t, ARGS("health", "--url", t.url));
	cr_assert_eq(r.status, 1);
	cr_assert_not_null(strstr(r.err, "token missing"), "%s", r.err);
	cr_assert_not_null(strstr(r.err, "PINCER_GATEWAY_TOKEN"), "the way out is named: %s", r.err);
	result_free(&r);
	down(&t);
}

Test(agent_cli, no_gateway_is_a_failure_never_a_local_run)
{
	ctx_t t;
	dir_only(&t);
	char url[64];
	snprintf(url, sizeof(url), "ws://127.0.0.1:%u", (unsigned)free_loopback_port());
	const char *const *cmds[] = {
		ARGS("agent", "-m", "hello", "--url", url, "--token", TOKEN),
		ARGS("agent", "-m", "hello", "--url", url, "--token", TOKEN, "--json"),
		ARGS("health", "--url", url),
		ARGS("sessions", "list", "--url", url),
	};
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
		result_t r = run(&t, cmds[i]);
		cr_assert_eq(r.status, 1, "%s: exit %d", cmds[i][0], r.status);
		cr_assert_str_eq(r.out, "", "nothing ran: %s", r.out);
		cr_assert_not_null(strstr(r.err, "cannot connect"), "%s", r.err);
		result_free(&r);
	}
	down(&t);
}

/* The gateway goes away mid-run: the agent says so and exits 1; the
 * answer is not produced some other way. */
Test(agent_cli, a_lost_gateway_ends_the_agent_with_1)
{
	ctx_t t;
	up(&t);
	child_t a;
	spawn(&t, &a, ARGS("agent", "-m", SLOW_MSG, "--url", t.url, "--token", TOKEN), NULL);
	cr_assert(await_text(a.out, "one", EXIT_WAIT_MS), "the run did not start streaming");
	cr_assert_eq(kill(t.gw.pid, SIGKILL), 0);
	cr_assert_eq(child_wait(&t.gw.pid, EXIT_WAIT_MS), 128 + SIGKILL);
	int st = child_wait(&a.pid, EXIT_WAIT_MS);
	char *out = read_file(a.out), *err = read_file(a.err);
	cr_assert_eq(st, 1, "exit %d: %s", st, err);
	cr_assert_null(strstr(out, "twelve"), "the answer did not complete: %s", out);
	cr_assert(strstr(err, "connection to the gateway was lost") || strstr(err, "closed the connection"), "%s", err);
	cr_assert_not_null(strstr(err, "may still be going"), "%s", err);
	free(out);
	free(err);
	down(&t);
}

/* ---- signals ---- */

/* The run's state as agent.wait tells it, asked over a fresh connection. */
static cJSON *wait_for_run(uint16_t port, const char *run_id)
{
	cl_t *c = cl_open(port);
	cJSON *hello = cl_handshake(c, connect_params(TOKEN, NULL));
	cr_assert(jok(hello));
	cJSON_Delete(hello);
	cJSON *p = cJSON_CreateObject();
	cJSON_AddStringToObject(p, "runId", run_id);
	cJSON_AddNumberToObject(p, "timeoutMs", 3000);
	cJSON *res = cl_call(c, "agent.wait", p);
	cr_assert(jok(res), "%s", cJSON_PrintUnformatted(res));
	cJSON *payload = cJSON_DetachItemFromObject(res, "payload");
	cJSON_Delete(res);
	cl_free(c);
	return payload;
}

Test(agent_cli, sigterm_to_the_agent_aborts_its_run)
{
	ctx_t t;
	up(&t);
	child_t a;
	spawn(&t, &a, ARGS("agent", "-m", SLOW_MSG, "--url", t.url, "--token", TOKEN, "--json", "-s", "slow"), NULL);
	cr_assert(await_text(a.out, "\"delta\":\"one\"", EXIT_WAIT_MS), "the run did not start streaming");
	cr_assert_eq(kill(a.pid, SIGTERM), 0);
	int st = child_wait(&a.pid, EXIT_WAIT_MS);
	char *out = read_file(a.out), *err = read_file(a.err);
	cr_assert_eq(st, 143, "exit %d: %s", st, err);
	cr_assert_not_null(strstr(err, "SIGTERM: aborting the run"), "%s", err);
	cJSON *lines = json_lines(out);
	const char *run_id = jstr(cJSON_GetArrayItem(lines, 0), "runId");
	/* the run ended as aborted (agent.wait says "timeout" for those; a
	 * completed run would say "ok") */
	cJSON *w = wait_for_run(t.port, run_id);
	cr_assert_str_eq(jstr(w, "status"), "timeout", "%s", cJSON_PrintUnformatted(w));
	cr_assert_gt(jnum(w, "endedAt"), 0, "the run ended, the wait did not just run out");
	cr_assert_null(strstr(out, "twelve"));
	cJSON_Delete(w);
	cJSON_Delete(lines);
	free(out);
	free(err);
	down(&t);
}

Test(agent_cli, sigint_to_a_local_agent_aborts_its_run)
{
	ctx_t t;
	up(&t);
	child_t a;
	spawn(&t, &a, ARGS("agent", "--local", "-m", SLOW_MSG, "-s", "local-slow"), NULL);
	cr_assert(await_text(a.out, "one", EXIT_WAIT_MS), "the run did not start streaming");
	cr_assert_eq(kill(a.pid, SIGINT), 0);
	int st = child_wait(&a.pid, EXIT_WAIT_MS);
	char *out = read_file(a.out), *err = read_file(a.err);
	cr_assert_eq(st, 130, "exit %d: %s", st, err);
	cr_assert_not_null(strstr(err, "the run was aborted"), "%s", err);
	cr_assert_null(strstr(out, "twelve"));
	free(out);
	free(err);
	down(&t);
}

Test(agent_cli, sigterm_to_the_gateway_lets_the_run_finish)
{
	ctx_t t;
	up_with(&t, ",\"drainSeconds\":30");
	child_t a;
	spawn(&t, &a, ARGS("agent", "-m", SLOW_MSG, "--url", t.url, "--token", TOKEN), NULL);
	cr_assert(await_text(a.out, "one", EXIT_WAIT_MS), "the run did not start streaming");
	cr_assert_eq(kill(t.gw.pid, SIGTERM), 0);
	int st = child_wait(&a.pid, EXIT_WAIT_MS);
	char *out = read_file(a.out), *err = read_file(a.err);
	cr_assert_not_null(strstr(err, "the gateway is shutting down"), "%s", err);
	/* the drain waits for the final answer to be sent, not only for the run */
	cr_assert_eq(st, 0, "exit %d: %s", st, err);
	cr_assert_str_eq(out, "one two three four five six seven eight nine ten eleven twelve\n");
	int gst = child_wait(&t.gw.pid, EXIT_WAIT_MS);
	char *gerr = read_file(t.gw.err);
	cr_assert_eq(gst, 0, "the gateway exited %d: %s", gst, gerr);
	free(gerr);
	free(out);
	free(err);
	down(&t);
}

/* ---- the other commands ---- */

Test(agent_cli, version_prints_the_library_version)
{
	ctx_t t;
	dir_only(&t);
	char want[64];
	snprintf(want, sizeof(want), "pincer %s\n", pc_version());
	result_t r = run(&t, ARGS("version"));
	cr_assert_eq(r.status, 0);
	cr_assert_str_eq(r.out, want);
	result_free(&r);
	r = run(&t, ARGS("--version"));
	cr_assert_str_eq(r.out, want);
	result_free(&r);
	r = run(&t, ARGS("version", "--json"));
	cr_assert_eq(r.status, 0);
	cJSON *lines = json_lines(r.out);
	cr_assert_str_eq(jstr(last(lines), "version"), pc_version());
	cr_assert_eq(jnum(jget(last(lines), "protocol"), "max"), 4);
	cJSON_Delete(lines);
	result_free(&r);
	down(&t);
}

Test(agent_cli, config_print_is_show_and_json_is_one_line)
{
	ctx_t t;
	dir_only(&t);
	char good[128], bad[128];
	snprintf(good, sizeof(good), "%s/good.json", t.dir);
	snprintf(bad, sizeof(bad), "%s/bad.json", t.dir);
	write_file(good, "{\"gateway\":{\"port\":18999}}");
	write_file(bad, "{\"gateway\":{\"port\":\"many\"}}");
	result_t show = run(&t, ARGS("config", "show", "--config", good));
	result_t print = run(&t, ARGS("config", "print", "--config", good));
	cr_assert_eq(show.status, 0);
	cr_assert_eq(print.status, 0);
	cr_assert_str_eq(print.out, show.out);
	result_free(&print);
	print = run(&t, ARGS("config", "print", "--json", "--config", good));
	cJSON *lines = json_lines(print.out), *pretty = cJSON_Parse(show.out);
	cr_assert_eq(cJSON_GetArraySize(lines), 1);
	cr_assert(cJSON_Compare(last(lines), pretty, true), "the same configuration");
	cJSON_Delete(pretty);
	cJSON_Delete(lines);
	result_free(&show);
	result_free(&print);

	result_t r = run(&t, ARGS("config", "validate", "--json", "--config", good));
	cr_assert_eq(r.status, 0);
	lines = json_lines(r.out);
	cr_assert(cJSON_IsTrue(jget(last(lines), "ok")));
	cr_assert_str_eq(jstr(last(lines), "source"), good);
	cJSON_Delete(lines);
	result_free(&r);
	r = run(&t, ARGS("config", "validate", "--json", "--config", bad));
	cr_assert_eq(r.status, 1);
	lines = json_lines(r.out);
	cr_assert(cJSON_IsFalse(jget(last(lines), "ok")));
	cr_assert_not_null(strstr(cJSON_GetStringValue(cJSON_GetArrayItem(jget(last(lines), "errors"), 0)), "gateway.port"),
			   "%s", r.out);
	cJSON_Delete(lines);
	result_free(&r);
	down(&t);
}

Test(agent_cli, usage_errors_exit_2)
{
	ctx_t t;
	dir_only(&t);
	const char *const *cmds[] = {
		ARGS("nonexistent"),
		ARGS("agent"),
		ARGS("agent", "-m", ""),
		ARGS("agent", "-m", "x", "extra"),
		ARGS("agent", "-m", "x", "--bogus"),
		ARGS("agent", "-m", "x", "--timeout", "soon"),
		ARGS("agent", "-m", "x", "--timeout", "-1"),
		ARGS("agent", "-m", "x", "--agent", "other"),
		ARGS("agent", "-m", "x", "--thinking", "lots"),
		ARGS("agent", "-m", "x", "--url", "http://127.0.0.1:1"),
		ARGS("agent", "-m", "x", "--url", "wss://127.0.0.1:1"),
		ARGS("agent", "-m", "x", "--url", "ws://127.0.0.1:99999"),
		ARGS("health", "extra"),
		ARGS("health", "--json=yes"),
		ARGS("sessions"),
		ARGS("sessions", "forget"),
		ARGS("sessions", "show"),
		ARGS("sessions", "show", "k", "--limit", "0"),
		ARGS("sessions", "list", "extra"),
		ARGS("config"),
		ARGS("config", "frobnicate"),
		ARGS("config", "show", "--config"),
		ARGS("version", "--nope"),
		ARGS("help", "nonexistent"),
		ARGS("gateway", "--port", "http"),
		ARGS("mock-llm", "--port", "-3"),
		ARGS("mock-llm", "--max-streams", "lots"),
	};
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
		result_t r = run(&t, cmds[i]);
		cr_assert_eq(r.status, 2, "pincer %s %s: exit %d", cmds[i][0], cmds[i][1] ? cmds[i][1] : "", r.status);
		cr_assert_str_neq(r.err, "", "a usage error says what is wrong");
		cr_assert_str_eq(r.out, "", "nothing on stdout: %s", r.out);
		result_free(&r);
	}
	/* no command at all */
	const char *const none[] = {NULL};
	result_t r = run(&t, none);
	cr_assert_eq(r.status, 2);
	result_free(&r);
	/* a bad value from the environment is a usage error too, and names it */
	r = run_env(&t, ARGS("mock-llm"), ARGS("PINCER_MOCK_MAX_STREAMS=-1"));
	cr_assert_eq(r.status, 2);
	cr_assert_not_null(strstr(r.err, "PINCER_MOCK_MAX_STREAMS"), "%s", r.err);
	result_free(&r);
	down(&t);
}

/* The rule that only loopback serves without auth holds on the address
 * the gateway binds, whichever of flag, environment or file chose it. */
Test(agent_cli, a_gateway_without_auth_never_binds_beyond_loopback)
{
	ctx_t t;
	dir_only(&t);
	const char *const binds[] = {"0.0.0.0", "::", "::ffff:0.0.0.0", "10.1.2.3"};
	for (size_t i = 0; i < sizeof(binds) / sizeof(binds[0]); i++) {
		result_t r = run(&t, ARGS("gateway", "--bind", binds[i], "--port", "0"));
		cr_assert_eq(r.status, 1, "--bind %s: exit %d\n%s", binds[i], r.status, r.out);
		cr_assert_not_null(strstr(r.err, "requires gateway.auth"), "--bind %s: %s", binds[i], r.err);
		cr_assert_null(strstr(r.out, "listening"), "%s", r.out);
		result_free(&r);
	}
	/* the environment and the file were refused before; they still are */
	result_t r = run_env(&t, ARGS("gateway", "--port", "0"), ARGS("PINCER_GATEWAY_BIND=0.0.0.0"));
	cr_assert_neq(r.status, 0);
	cr_assert_null(strstr(r.out, "listening"), "%s", r.out);
	result_free(&r);
	down(&t);
}

/* mock-llm takes its flags from PINCER_MOCK_* too: port 0 (any free
 * one, not the default 18790) and a stream limit. */
Test(agent_cli, mock_llm_reads_its_flags_from_the_environment)
{
	ctx_t t;
	dir_only(&t);
	child_t m;
	spawn(&t, &m, ARGS("mock-llm", "--json"), ARGS("PINCER_MOCK_PORT=0", "PINCER_MOCK_MAX_STREAMS=7"));
	cr_assert(await_text(m.out, "\"listening\"", EXIT_WAIT_MS), "the mock did not start");
	char *line = read_file(m.out);
	cJSON *j = cJSON_Parse(line);
	cr_assert_not_null(j, "%s", line);
	cr_assert_gt(jnum(j, "port"), 0);
	cr_assert_neq(jnum(j, "port"), 18790, "the environment's port 0 was used");
	cJSON_Delete(j);
	free(line);
	cr_assert_eq(kill(m.pid, SIGTERM), 0);
	cr_assert_eq(child_wait(&m.pid, EXIT_WAIT_MS), 0);
	down(&t);
}

Test(agent_cli, help_on_every_command_exits_0)
{
	ctx_t t;
	dir_only(&t);
	static const char *const names[] = {"agent",    "config",   "devices", "gateway",
					    "health",   "mock-llm", "sessions", "version"};
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		char want[64];
		snprintf(want, sizeof(want), "usage: pincer %s", names[i]);
		result_t r = run(&t, ARGS(names[i], "--help"));
		cr_assert_eq(r.status, 0, "%s --help: exit %d", names[i], r.status);
		cr_assert_eq(strncmp(r.out, want, strlen(want)), 0, "%s --help:\n%s", names[i], r.out);
		result_free(&r);
		r = run(&t, ARGS("help", names[i]));
		cr_assert_eq(r.status, 0);
		cr_assert_eq(strncmp(r.out, want, strlen(want)), 0, "help %s:\n%s", names[i], r.out);
		result_free(&r);
	}
	result_t r = run(&t, ARGS("--help"));
	cr_assert_eq(r.status, 0);
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		cr_assert_not_null(strstr(r.out, names[i]), "the command list names %s", names[i]);
	result_free(&r);
	down(&t);
}

/* A message that is not UTF-8 is refused before anything is sent or run,
 * through a gateway or locally. */
Test(agent_cli, a_message_that_is_not_utf8_is_a_usage_error)
{
	ctx_t t;
	dir_only(&t);
	char url[64];
	snprintf(url, sizeof(url), "ws://127.0.0.1:%u", (unsigned)free_loopback_port());
	const char *const local[] = {"PINCER_LOCAL=1", NULL};
	result_t r = run(&t, ARGS("agent", "-m", "caf\xe9", "--url", url, "--token", TOKEN));
	cr_assert_eq(r.status, 2, "exit %d: %s", r.status, r.err);
	cr_assert_not_null(strstr(r.err, "the message is not UTF-8 text"), "%s", r.err);
	result_free(&r);
	r = run_env(&t, ARGS("agent", "-m", "\xed\xa0\x80"), local);
	cr_assert_eq(r.status, 2, "exit %d: %s", r.status, r.err);
	cr_assert_not_null(strstr(r.err, "the message is not UTF-8 text"), "%s", r.err);
	result_free(&r);
	r = run(&t, ARGS("agent", "-m", "hi", "--session", "s\xff", "--url", url, "--token", TOKEN));
	cr_assert_eq(r.status, 2, "exit %d: %s", r.status, r.err);
	cr_assert_not_null(strstr(r.err, "--session is not UTF-8 text"), "%s", r.err);
	result_free(&r);
	down(&t);
}
