/*
 * `pincer load` as a child process in tests: a temporary directory, a
 * `pincer gateway` to drive, and runs of `pincer load` read back (exit
 * status, stdout, stderr, the JSON).
 */
#ifndef PC_TESTS_LOAD_CHILD_H
#define PC_TESTS_LOAD_CHILD_H

#include <signal.h>

#include "pincer_child.h"

#define TOKEN "load-s3cret"
#define EXIT_WAIT_MS 90000 /* generous: sanitizer builds start slowly */
/* A run with --duration S must end within S and this. */
#define END_SLACK_MS 8000

typedef struct ctx {
	char dir[64], pincer[PATH_MAX];
	pid_t server;
	char target[96];
	unsigned runs;
} ctx_t;

typedef struct result {
	int status;
	uint64_t ms; /* how long it ran */
	char *out, *err;
	cJSON *json;  /* stdout parsed, when it is JSON */
} result_t;

static inline void result_free(result_t *r)
{
	free(r->out);
	free(r->err);
	cJSON_Delete(r->json);
}

static inline void dir_only(ctx_t *t)
{
	memset(t, 0, sizeof(*t));
	snprintf(t->dir, sizeof(t->dir), "/tmp/pincer-load-XXXXXX");
	cr_assert_not_null(mkdtemp(t->dir));
	find_pincer(t->pincer, sizeof(t->pincer));
}

/* `pincer gateway` on a free port with token auth and `extra` (more keys
 * of its "gateway" object, each after a comma, or ""): ws:// target. */
static inline void gateway_up_with(ctx_t *t, const char *extra)
{
	dir_only(t);
	char cfg[128], out[128], err[128], json[512];
	snprintf(cfg, sizeof(cfg), "%s/gateway.json", t->dir);
	snprintf(out, sizeof(out), "%s/gw.out", t->dir);
	snprintf(err, sizeof(err), "%s/gw.err", t->dir);
	snprintf(json, sizeof(json), "{\"gateway\":{\"auth\":{\"mode\":\"token\",\"token\":\"" TOKEN "\"}%s}}", extra);
	write_file(cfg, json);
	uint16_t port = start_gateway_child(t->pincer, t->dir, cfg, out, err, EXIT_WAIT_MS, &t->server);
	snprintf(t->target, sizeof(t->target), "ws://127.0.0.1:%u", (unsigned)port);
}

static inline void gateway_up(ctx_t *t) { gateway_up_with(t, ""); }

/* `pincer mock-llm` on a free port: http://.../v1 target. */
static inline void mock_up(ctx_t *t)
{
	dir_only(t);
	char out[128], err[128];
	snprintf(out, sizeof(out), "%s/mock.out", t->dir);
	snprintf(err, sizeof(err), "%s/mock.err", t->dir);
	uint16_t port = start_mock_llm_child(t->pincer, t->dir, out, err, EXIT_WAIT_MS, &t->server);
	snprintf(t->target, sizeof(t->target), "http://127.0.0.1:%u/v1", (unsigned)port);
}

static inline void down(ctx_t *t)
{
	if (t->server) {
		cr_assert_eq(kill(t->server, SIGTERM), 0);
		int st = child_wait(&t->server, EXIT_WAIT_MS);
		cr_assert_eq(st, 0, "the server exited %d", st);
	}
	rm_tree(t->dir);
}

/* A run under way: its process and where its output goes. */
typedef struct running {
	pid_t pid;
	uint64_t t0;
	char out[128], err[128];
} running_t;

/* Starts `pincer CMD args...` with PATH `path` and the variables `env`
 * ("NAME=value", NULL-terminated; may be NULL). */
static inline running_t pincer_start_env(ctx_t *t, const char *cmd, const char *path, const char *const *env,
					 const char *const *args)
{
	char *argv[48] = {t->pincer, (char *)cmd};
	size_t n = 2;
	for (size_t i = 0; args[i]; i++) {
		cr_assert_lt(n, 47);
		argv[n++] = (char *)args[i];
	}
	argv[n] = NULL;
	running_t run;
	unsigned id = ++t->runs;
	snprintf(run.out, sizeof(run.out), "%s/load.out.%u", t->dir, id);
	snprintf(run.err, sizeof(run.err), "%s/load.err.%u", t->dir, id);
	write_file(run.out, "");
	write_file(run.err, "");
	char env_path[128];
	snprintf(env_path, sizeof(env_path), "PATH=%s", path);
	char *envp[16] = {env_path};
	for (size_t i = 0; env && env[i]; i++) {
		cr_assert_lt(i + 2, sizeof(envp) / sizeof(envp[0]));
		envp[i + 1] = (char *)env[i];
	}
	run.t0 = now_ms();
	run.pid = start_child(t->pincer, argv, envp, t->dir, run.out, run.err);
	return run;
}

/* Starts `pincer CMD args...` with PATH `path`. */
static inline running_t pincer_start_path(ctx_t *t, const char *cmd, const char *path, const char *const *args)
{
	return pincer_start_env(t, cmd, path, NULL, args);
}

/* Starts `pincer CMD args...`. */
static inline running_t pincer_start(ctx_t *t, const char *cmd, const char *const *args)
{
	return pincer_start_path(t, cmd, "/usr/bin:/bin", args);
}

/* Waits for a run's end and reads what it wrote. */
static inline result_t pincer_finish(running_t *run)
{
	result_t r = {.status = child_wait(&run->pid, EXIT_WAIT_MS)};
	r.ms = now_ms() - run->t0;
	r.out = read_file(run->out);
	r.err = read_file(run->err);
	r.json = cJSON_Parse(r.out);
	return r;
}

/* Runs `pincer CMD args...` to its end. */
static inline result_t pincer_run(ctx_t *t, const char *cmd, const char *const *args)
{
	running_t run = pincer_start(t, cmd, args);
	return pincer_finish(&run);
}

/* Starts `pincer load args...`. */
static inline running_t load_start(ctx_t *t, const char *const *args) { return pincer_start(t, "load", args); }

/* Runs `pincer load args...` to its end. */
static inline result_t load(ctx_t *t, const char *const *args) { return pincer_run(t, "load", args); }

#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})

static inline double num(const cJSON *j, const char *k)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, k);
	cr_assert(cJSON_IsNumber(v), "'%s' is not a number", k);
	return v->valuedouble;
}

#endif
