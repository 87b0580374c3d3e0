/*
 * What a new user meets when starting the `pincer` command (the real
 * binary as child processes on loopback): a taken port named with its
 * cause, `localhost` accepted where an address is wanted and names
 * refused clearly, "did you mean" for mistyped commands and options,
 * "pincer <command>:" in getopt's complaints, and the gateway's listening
 * line saying where the OpenAI API is, the auth mode (never the secret)
 * and the configuration in force.
 *
 * Every child runs in a fresh directory with PINCER_HOME there and only
 * PATH besides; every wait is bounded; only this test's children are
 * signalled, by pid.
 */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "pincer_child.h"

#define WAIT_MS 60000 /* generous: sanitizer builds start slowly */
#define SECRET "start-s3cret"

typedef struct ctx {
	char dir[64], pincer[PATH_MAX], out[PATH_MAX], err[PATH_MAX], home[PATH_MAX + 16];
} ctx_t;

static void setup(ctx_t *t)
{
	memset(t, 0, sizeof(*t));
	snprintf(t->dir, sizeof(t->dir), "/tmp/pincer-start-XXXXXX");
	cr_assert_not_null(mkdtemp(t->dir));
	find_pincer(t->pincer, sizeof(t->pincer));
	snprintf(t->out, sizeof(t->out), "%s/out", t->dir);
	snprintf(t->err, sizeof(t->err), "%s/err", t->dir);
	snprintf(t->home, sizeof(t->home), "PINCER_HOME=%s", t->dir);
}

static void teardown(ctx_t *t)
{
	rm_tree(t->dir);
}

#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})

/* Starts `pincer args...` in the test's directory; its pid. */
static pid_t spawn(ctx_t *t, const char *const *args)
{
	char *argv[16];
	size_t n = 0;
	argv[n++] = t->pincer;
	while (args[n - 1] && n < 15) {
		argv[n] = (char *)args[n - 1];
		n++;
	}
	argv[n] = NULL;
	char *envp[] = {t->home, "PATH=/usr/bin:/bin", NULL};
	write_file(t->out, "");
	write_file(t->err, "");
	return start_child(t->pincer, argv, envp, t->dir, t->out, t->err);
}

/* Runs `pincer args...` to its end: the exit status; *err its stderr
 * (the caller frees). */
static int run(ctx_t *t, const char *const *args, char **err)
{
	pid_t pid = spawn(t, args);
	int st = child_wait(&pid, WAIT_MS);
	*err = read_file(t->err);
	return st;
}

/* The first line on the child's stdout once it holds `"listening"`,
 * parsed; NULL when it does not come within WAIT_MS. */
static cJSON *await_listening(ctx_t *t)
{
	uint64_t until = now_ms() + WAIT_MS;
	cJSON *j = NULL;
	while (!j && now_ms() < until) {
		char *s = read_file(t->out);
		if (strstr(s, "\"listening\"") && strchr(s, '\n'))
			j = cJSON_Parse(s);
		free(s);
		if (!j)
			sleep_ms(20);
	}
	return j;
}

/* SIGTERM to a child that listens: it must exit 0. */
static void stop(ctx_t *t, pid_t *pid)
{
	cr_assert_eq(kill(*pid, SIGTERM), 0);
	int st = child_wait(pid, WAIT_MS);
	char *err = read_file(t->err);
	cr_assert_eq(st, 0, "exit %d:\n%s", st, err);
	free(err);
}

static const char *str(const cJSON *j, const char *key)
{
	return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, key));
}

/* A loopback socket that listens on a port the system chose. */
static int occupy(uint16_t *port)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	cr_assert_geq(fd, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	cr_assert_eq(listen(fd, 1), 0);
	cr_assert_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
	*port = ntohs(a.sin_port);
	return fd;
}

Test(cli_start, a_taken_port_is_named_with_its_cause)
{
	ctx_t t;
	setup(&t);
	uint16_t port;
	int fd = occupy(&port);
	char p[8];
	snprintf(p, sizeof(p), "%u", (unsigned)port);
	static const char *const cmds[] = {"gateway", "mock-llm"};
	for (size_t i = 0; i < 2; i++) {
		char want[128], *err;
		snprintf(want, sizeof(want), "pincer %s: cannot listen on 127.0.0.1:%s: address already in use\n",
			 cmds[i], p);
		int st = run(&t, ARGS(cmds[i], "--port", p), &err);
		cr_assert_eq(st, 1, "%s exited %d:\n%s", cmds[i], st, err);
		cr_assert_not_null(strstr(err, want), "%s said:\n%s", cmds[i], err);
		free(err);
	}
	cr_assert_eq(close(fd), 0);
	teardown(&t);
}

Test(cli_start, localhost_is_loopback_and_names_are_refused)
{
	ctx_t t;
	setup(&t);
	static const char *const args[][6] = { /* NULL-terminated */
		{"gateway", "--bind", "localhost", "--port", "0"},
		{"mock-llm", "--host", "localhost", "--port", "0"},
	};
	for (size_t i = 0; i < 2; i++) {
		pid_t pid = spawn(&t, args[i]);
		cJSON *j = await_listening(&t);
		cr_assert_not_null(j, "%s --bind localhost did not start", args[i][0]);
		cr_assert_str_eq(str(j, "host"), "127.0.0.1");
		cJSON_Delete(j);
		stop(&t, &pid);
	}
	char *err;
	int st = run(&t, ARGS("gateway", "--bind", "gateway.example", "--port", "0"), &err);
	cr_assert_eq(st, 2, "exit %d:\n%s", st, err);
	cr_assert_not_null(strstr(err, "pincer gateway: cannot listen on 'gateway.example': numeric address only"),
			   "%s", err);
	free(err);
	st = run(&t, ARGS("mock-llm", "--host", "mock.example", "--port", "0"), &err);
	cr_assert_eq(st, 2, "exit %d:\n%s", st, err);
	cr_assert_not_null(strstr(err, "pincer mock-llm: cannot listen on 'mock.example': numeric address only"),
			   "%s", err);
	free(err);
	teardown(&t);
}

Test(cli_start, typos_get_a_suggestion)
{
	ctx_t t;
	setup(&t);
	char *err;
	int st = run(&t, ARGS("gatway"), &err);
	cr_assert_eq(st, 2);
	cr_assert_not_null(strstr(err, "pincer: unknown command 'gatway'; did you mean 'gateway'?\n"), "%s", err);
	free(err);
	st = run(&t, ARGS("help", "mock-lm"), &err);
	cr_assert_eq(st, 2);
	cr_assert_not_null(strstr(err, "did you mean 'mock-llm'?"), "%s", err);
	free(err);
	/* nothing close: no guess */
	st = run(&t, ARGS("frobnicate"), &err);
	cr_assert_eq(st, 2);
	cr_assert_not_null(strstr(err, "pincer: unknown command 'frobnicate'\n"), "%s", err);
	free(err);
	st = run(&t, ARGS("gateway", "--prot", "0"), &err);
	cr_assert_eq(st, 2);
	cr_assert_not_null(strstr(err, "pincer gateway: did you mean '--port'?\n"), "%s", err);
	free(err);
	st = run(&t, ARGS("mock-llm", "--scenaro", "x.json"), &err);
	cr_assert_eq(st, 2);
	cr_assert_not_null(strstr(err, "pincer mock-llm: did you mean '--scenario'?\n"), "%s", err);
	free(err);
	/* a known option without its value is not a typo */
	st = run(&t, ARGS("gateway", "--port"), &err);
	cr_assert_eq(st, 2);
	cr_assert_null(strstr(err, "did you mean"), "%s", err);
	free(err);
	teardown(&t);
}

Test(cli_start, getopt_complaints_name_the_command)
{
	ctx_t t;
	setup(&t);
	char *err;
	int st = run(&t, ARGS("gateway", "--no-such-flag"), &err);
	cr_assert_eq(st, 2);
	cr_assert_eq(strncmp(err, "pincer gateway: unrecognized option '--no-such-flag'\n", 52), 0, "%s", err);
	free(err);
	st = run(&t, ARGS("sessions", "--limit"), &err);
	cr_assert_eq(st, 2);
	cr_assert_eq(strncmp(err, "pincer sessions: option '--limit' requires an argument", 54), 0, "%s", err);
	free(err);
	teardown(&t);
}

/* Starts the gateway with `extra` arguments, checks its listening line
 * against the expected auth mode and configuration (NULL: none), stops
 * it, and returns its stderr (the caller frees). */
static char *check_listening(ctx_t *t, const char *config, const char *auth)
{
	pid_t pid = config ? spawn(t, ARGS("gateway", "--port", "0", "--config", config))
			   : spawn(t, ARGS("gateway", "--port", "0"));
	cJSON *j = await_listening(t);
	cr_assert_not_null(j, "the gateway did not start");
	char *line = read_file(t->out);
	cr_assert_null(strstr(line, SECRET), "the secret is printed: %s", line);
	free(line);
	/* the fields programs already read */
	cr_assert_str_eq(str(j, "event"), "listening");
	cr_assert_str_eq(str(j, "service"), "gateway");
	cr_assert_str_eq(str(j, "host"), "127.0.0.1");
	double port = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(j, "port"));
	cr_assert(port > 0 && port < 65536);
	cr_assert(cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(j, "readyMs")));
	const cJSON *rec = cJSON_GetObjectItemCaseSensitive(j, "recovered");
	cr_assert(cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(rec, "rerun")));
	cr_assert(cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(rec, "interrupted")));
	char want[96];
	snprintf(want, sizeof(want), "ws://127.0.0.1:%u", (unsigned)port);
	cr_assert_str_eq(str(j, "url"), want);
	/* and the new ones */
	snprintf(want, sizeof(want), "http://127.0.0.1:%u/v1", (unsigned)port);
	cr_assert_str_eq(str(j, "openaiUrl"), want);
	cr_assert_str_eq(str(j, "auth"), auth);
	const cJSON *c = cJSON_GetObjectItemCaseSensitive(j, "config");
	if (config)
		cr_assert_str_eq(cJSON_GetStringValue(c), config);
	else
		cr_assert(cJSON_IsNull(c));
	cJSON_Delete(j);
	stop(t, &pid);
	char *err = read_file(t->err);
	cr_assert_null(strstr(err, SECRET), "the secret is printed: %s", err);
	/* the log says it too, in its format (JSON by default) */
	snprintf(want, sizeof(want), "\"openaiUrl\":\"http://127.0.0.1:%u/v1\"", (unsigned)port);
	cr_assert_not_null(strstr(err, "\"msg\":\"listening\""), "%s", err);
	cr_assert_not_null(strstr(err, want), "%s", err);
	return err;
}

Test(cli_start, the_listening_line_says_how_to_connect)
{
	ctx_t t;
	setup(&t);
	char *err = check_listening(&t, NULL, "none");
	cr_assert_not_null(strstr(err, "\"auth\":\"none\",\"config\":\"built-in defaults\""), "%s", err);
	free(err);
	char cfg[PATH_MAX], want[PATH_MAX + 64];
	snprintf(cfg, sizeof(cfg), "%s/pincer.json", t.dir);
	write_file(cfg, "{\"gateway\":{\"auth\":{\"mode\":\"token\",\"token\":\"" SECRET "\"}}}");
	err = check_listening(&t, cfg, "token");
	snprintf(want, sizeof(want), "\"auth\":\"token\",\"config\":\"%s\"", cfg);
	cr_assert_not_null(strstr(err, want), "%s", err);
	free(err);
	teardown(&t);
}
