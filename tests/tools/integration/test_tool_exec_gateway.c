/*
 * exec's processes and the life of the real `pincer gateway` (the binary
 * built next to this test, on a free loopback port, with its embedded
 * mock LLM): a chat completion whose model answer calls exec with
 * `background: true`, the command leaving a process in a session of its
 * own; then
 *   - SIGTERM to the gateway: it exits 0, and neither is left;
 *   - SIGKILL to the gateway: nothing can clean up in it, and still
 *     neither is left (each command's supervisor learns of the death from
 *     its parent-death signal and takes its tree along), nor the
 *     command's cgroup where one was made;
 *   - an idle session whose background command runs does not retire
 *     (which would end it): the command's time limit ends both.
 *
 * Every wait is bounded; only this test's own children and the pids the
 * commands wrote down are signalled, by pid.
 */
#include <criterion/criterion.h>

#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "curl_client.h"
#include "pincer_child.h"
#include "test_util.h"
#include "tool_cgroup_host.h"
#include "tool_proc_watch.h"

#define TOKEN "exec-s3cret"
#define START_MS 60000 /* sanitizer builds start slowly */
#define GONE_MS 10000
/* The command: a process in a session of its own (esc.pid), then the
 * command itself goes on (main.pid). */
#define COMMAND                                                                                    \
	"setsid sh -c 'echo $$ > esc.pid; exec sleep 99' >/dev/null 2>&1 & "                        \
	"i=0; while ! test -s esc.pid && test $i -lt 500; do sleep 0.01; i=$((i+1)); done; "         \
	"echo $$ > main.pid; exec sleep 98"

typedef struct gwp {
	char dir[64];
	char pincer[PATH_MAX];
	char out[PATH_MAX], err[PATH_MAX];
	pid_t pid;
	pid_t started; /* the gateway's pid, kept once it was reaped */
	uint16_t port;
} gwp_t;

static char gw_dir[64]; /* the current test's directory, for kill_leftovers */

/* After each test, even one that failed half-way: SIGKILL what the
 * command wrote down and is still alive. */
static void kill_leftovers(void)
{
	kill_pid_files(gw_dir[0] ? gw_dir : NULL, (const char *const[]){"main.pid", "esc.pid", NULL});
}

TestSuite(exec_gateway, .fini = kill_leftovers);

/* Starts `pincer gateway --port 0` in a fresh directory (its workspace,
 * its PINCER_HOME), sessions retiring after `idle_s` idle seconds. */
static void gw_up(gwp_t *g, unsigned idle_s)
{
	memset(g, 0, sizeof(*g));
	snprintf(g->dir, sizeof(g->dir), "/tmp/pincer-exec-gw-XXXXXX");
	cr_assert_not_null(mkdtemp(g->dir));
	memcpy(gw_dir, g->dir, sizeof(gw_dir));
	find_pincer(g->pincer, sizeof(g->pincer));
	char cfg[128], text[1024];
	snprintf(cfg, sizeof(cfg), "%s/pincer-test.json", g->dir);
	snprintf(text, sizeof(text),
		 "{\"providers\":{\"mock\":{\"api\":\"openai-completions\",\"embedded\":true,\"apiKey\":\"k\"}},"
		 "\"agents\":{\"defaults\":{\"model\":\"mock/m1\",\"sessionIdleSeconds\":%u,\"workspace\":\"%s\"}},"
		 "\"gateway\":{\"auth\":{\"mode\":\"token\",\"token\":\"" TOKEN "\"}}}",
		 idle_s, g->dir);
	write_file(cfg, text);
	snprintf(g->out, sizeof(g->out), "%s/gw.out", g->dir);
	snprintf(g->err, sizeof(g->err), "%s/gw.err", g->dir);
	g->port = start_gateway_child(g->pincer, g->dir, cfg, g->out, g->err, START_MS, &g->pid);
	g->started = g->pid;
}

static void gw_down(gwp_t *g)
{
	if (g->pid) {
		kill(g->pid, SIGTERM);
		child_wait(&g->pid, START_MS);
	}
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", g->dir);
	gw_dir[0] = '\0';
	cr_assert_eq(system(cmd), 0);
}

/* One chat completion in session `key` whose model answer calls exec with
 * `args`; returns once the run has answered. */
static void chat_exec(gwp_t *g, const char *key, cJSON *args)
{
	cJSON *step = cJSON_CreateObject();
	cJSON_AddStringToObject(step, "kind", "tool_calls");
	cJSON *calls = cJSON_AddArrayToObject(step, "tool_calls");
	cJSON *call = cJSON_CreateObject();
	cJSON_AddStringToObject(call, "name", "exec");
	cJSON_AddItemToObject(call, "arguments", args);
	cJSON_AddItemToArray(calls, call);
	char *s = cJSON_PrintUnformatted(step);
	cJSON_Delete(step);
	cr_assert_not_null(s);
	char *msg = NULL;
	cr_assert_geq(asprintf(&msg, "run it [[mock:%s]]", s), 0);
	cJSON_free(s);
	cJSON *body = cJSON_CreateObject();
	cJSON_AddStringToObject(body, "model", "pincer");
	cJSON *m = cJSON_CreateObject();
	cJSON_AddStringToObject(m, "role", "user");
	cJSON_AddStringToObject(m, "content", msg);
	free(msg);
	cJSON *msgs = cJSON_AddArrayToObject(body, "messages");
	cJSON_AddItemToArray(msgs, m);
	char *b = cJSON_PrintUnformatted(body);
	cJSON_Delete(body);
	char keyh[128];
	snprintf(keyh, sizeof(keyh), "x-pincer-session-key: %s", key);
	const char *hdrs[] = {"Authorization: Bearer " TOKEN, keyh, NULL};
	resp_t r = {0};
	curl_request(g->port, "POST", "/v1/chat/completions", hdrs, b, strlen(b), 60000, &r);
	cJSON_free(b);
	cr_assert_eq(r.code, CURLE_OK, "%s", curl_easy_strerror(r.code));
	cr_assert_eq(r.status, 200, "status %ld: %s", r.status, r.body);
	resp_free(&r);
}

/* Runs exec with `args` (COMMAND) through a chat; the two it leaves. */
static void start_with(gwp_t *g, const char *key, cJSON *args, watched_t *main_w, watched_t *esc)
{
	chat_exec(g, key, args);
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/main.pid", g->dir);
	*main_w = watch_pid_file(path, GONE_MS);
	snprintf(path, sizeof(path), "%s/esc.pid", g->dir);
	*esc = watch_pid_file(path, GONE_MS);
	cr_assert(main_w->pid > 0 && esc->pid > 0, "the command did not run");
	cr_assert(watched_alive(main_w) && watched_alive(esc), "the background command did not stay");
	/* exec.cgroup is "auto": where a cgroup can be made, the command
	 * runs in one of its own. */
	if (host_can_make_cgroup())
		cr_assert(host_in_command_cgroup(esc->pid), "cgroup2 is writable here, but the command has no cgroup");
}

/* Starts COMMAND in the background through a chat; the two it leaves. */
static void start_background(gwp_t *g, const char *key, watched_t *main_w, watched_t *esc)
{
	cJSON *args = cJSON_CreateObject();
	cJSON_AddStringToObject(args, "command", COMMAND);
	cJSON_AddBoolToObject(args, "background", true);
	start_with(g, key, args, main_w, esc);
}

/* A gateway running COMMAND in the background for session `key`, then
 * sent `sig`: how it exited (see child_wait). */
static int signal_with_background(gwp_t *g, const char *key, int sig, watched_t *main_w, watched_t *esc)
{
	gw_up(g, 3600);
	start_background(g, key, main_w, esc);
	cr_assert_eq(kill(g->pid, sig), 0);
	return child_wait(&g->pid, START_MS);
}

/* Both processes COMMAND left end within `ms`; `what` ended them. */
static void expect_both_gone(const watched_t *main_w, const watched_t *esc, uint64_t ms, const char *what)
{
	bool main_gone = await_gone_or_kill(main_w, ms), esc_gone = await_gone_or_kill(esc, ms);
	cr_assert(main_gone, "the background command outlived %s", what);
	cr_assert(esc_gone, "the background command's escape outlived %s", what);
}

Test(exec_gateway, sigterm_kills_every_tree_before_exit)
{
	gwp_t g;
	watched_t main_w, esc;
	int st = signal_with_background(&g, "term-1", SIGTERM, &main_w, &esc);
	/* Gone by the time the gateway has exited: no wait needed. */
	expect_both_gone(&main_w, &esc, 0, "the gateway");
	cr_assert_eq(st, 0, "the gateway exited %d", st);
	gw_down(&g);
}

Test(exec_gateway, sigkill_leaves_no_process)
{
	gwp_t g;
	watched_t main_w, esc;
	cr_assert_eq(signal_with_background(&g, "kill-1", SIGKILL, &main_w, &esc), 128 + SIGKILL);
	expect_both_gone(&main_w, &esc, GONE_MS, "the SIGKILLed gateway");
	/* Nobody is left in Pincer to remove the command's cgroup: its
	 * supervisor does, once the tree is gone. */
	AWAIT(host_cgroups_of(g.started) == 0, GONE_MS);
	gw_down(&g);
}

/* A session whose background command runs is in use: it does not retire
 * (which would end the command) however long it is idle; the command's
 * time limit ends it and everything it left, and then the session may
 * retire. */
Test(exec_gateway, a_background_command_keeps_its_session_until_its_time_limit)
{
	gwp_t g;
	gw_up(&g, 1);
	cJSON *args = cJSON_CreateObject();
	cJSON_AddStringToObject(args, "command", COMMAND);
	cJSON_AddBoolToObject(args, "background", true);
	cJSON_AddNumberToObject(args, "timeout", 4);
	watched_t main_w, esc;
	start_with(&g, "idle-1", args, &main_w, &esc);
	uint64_t started = now_ms();
	/* three idle periods later, both still run */
	sleep_ms(3000);
	cr_assert(watched_alive(&main_w), "the background command ended with its idle session");
	cr_assert(watched_alive(&esc), "the background command's escape ended with its idle session");
	/* the time limit (4 s, then SIGKILL after a 2 s grace) takes them */
	expect_both_gone(&main_w, &esc, GONE_MS, "its time limit");
	cr_assert_geq(now_ms() - started, 3500, "ended before its time limit");
	gw_down(&g);
}
