/*
 * What the agent benchmarks share: a whole agent layer in-process
 * (runtime, I/O, a store in a fresh temporary directory, a configuration,
 * the agent host), as tests/support/agent_harness.h builds it, but failing with
 * bench_fail instead of assertions; the open-file limit; RSS after giving
 * freed memory back; a driver actor keeping N sessions busy and the
 * measured window it closes.
 */
#ifndef PC_BENCH_AGENT_ENV_H
#define PC_BENCH_AGENT_ENV_H

#include <dlfcn.h>
#include <malloc.h>
#include <stdbool.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <curl/curl.h>

#include <cjson/cJSON.h>

#include "agents/agent.h"
#include "agents/providers/request.h"
#include "agents/mock/mock_server.h"
#include "benchlib.h"
#include "stream_common.h"

typedef struct agent_env {
	char dir[64];
	pc_runtime_t *rt;
	pc_io_t *io;
	pc_store_t *store;
	pc_config_t *cfg;
	pc_agent_t *agent;
	/* Set between env_base_start and env_agent_start; NULL: the agent's
	 * own tools, no hooks. Borrowed: they must outlive env_stop. */
	const pc_tool_registry_t *tools;
	const pc_hooks_t *hooks;
} agent_env_t;

/* One embedded mock provider; the workspace (%s) is the (empty) temporary
 * directory so no context file of the current directory joins the prompt. */
#define ENV_CONFIG_EMBEDDED                                                                        \
	"{\"providers\":{\"mock\":{\"api\":\"openai-completions\",\"embedded\":true}},"           \
	"\"agents\":{\"defaults\":{\"model\":\"mock/m1\",\"workspace\":\"%s\","                     \
	"\"maxConcurrent\":4096,\"sessionIdleSeconds\":60}}}"

/* Raises the open-file limit as far as allowed (root: up to `want`, else
 * the hard limit). Returns the soft limit now in force. */
static inline rlim_t env_raise_nofile(rlim_t want)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
		return 1024;
	if (rl.rlim_cur >= want)
		return rl.rlim_cur;
	struct rlimit up = {want, want > rl.rlim_max ? want : rl.rlim_max};
	if (setrlimit(RLIMIT_NOFILE, &up) != 0) {
		up.rlim_cur = rl.rlim_max;
		up.rlim_max = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &up);
	}
	getrlimit(RLIMIT_NOFILE, &rl);
	return rl.rlim_cur;
}

/* Resident set after returning free heap pages to the OS, KiB: glibc's
 * malloc_trim, or mimalloc's mi_collect when it is the process's
 * allocator (found at run time, so the bench builds with either). */
static inline uint64_t env_trimmed_rss_kib(void)
{
	void (*mi_collect)(bool) = (void (*)(bool))dlsym(RTLD_DEFAULT, "mi_collect");
	if (mi_collect)
		mi_collect(true);
	else
		malloc_trim(0);
	return bench_rss_kib();
}

/* The temporary directory in use, removed at exit even when a run fails
 * (bench_fail exits). */
static char env_dir_in_use[64];

static void env_remove_dir(void)
{
	if (env_dir_in_use[0]) {
		char cmd[128];
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", env_dir_in_use);
		if (system(cmd) != 0)
			fprintf(stderr, "could not remove %s\n", env_dir_in_use);
		env_dir_in_use[0] = '\0';
	}
}

/* Runtime, I/O and store (in a new temporary directory). */
static inline void env_base_start(agent_env_t *e, uint32_t workers, const pc_io_config_t *icfg)
{
	static bool registered;
	memset(e, 0, sizeof(*e));
	snprintf(e->dir, sizeof(e->dir), "/tmp/pincer-bench-agent-XXXXXX");
	if (!mkdtemp(e->dir))
		bench_fail("mkdtemp");
	snprintf(env_dir_in_use, sizeof(env_dir_in_use), "%s", e->dir);
	if (!registered && atexit(env_remove_dir) == 0)
		registered = true;
	pc_runtime_config_t rc;
	pc_runtime_config_init(&rc);
	rc.workers = workers;
	int r = pc_runtime_new(&rc, &e->rt);
	if (r == 0)
		r = pc_runtime_start(e->rt);
	if (r == 0)
		r = pc_io_new(e->rt, icfg, &e->io);
	if (r != 0)
		bench_fail("runtime / I/O: %s", pc_strerror(r));
	char path[128];
	snprintf(path, sizeof(path), "%s/state.db", e->dir);
	pc_store_config_t scfg;
	pc_store_config_init(&scfg);
	scfg.path = path;
	if ((r = pc_store_open(e->rt, &scfg, &e->store)) != 0)
		bench_fail("store: %s", pc_store_strerror(r));
}

/* The configuration `json` and the agent host. `max_concurrent` (0: the
 * file's) is set on the parsed struct, past the file's limit (4096), as a
 * CLI flag would. */
static inline void env_agent_start(agent_env_t *e, const char *json, uint32_t max_concurrent,
				   const char *scenario)
{
	pc_config_errors_t errs = {0};
	int r = pc_config_parse(json, strlen(json), "bench", &e->cfg, &errs);
	for (size_t i = 0; i < errs.count; i++)
		fprintf(stderr, "config: %s\n", errs.items[i]);
	pc_config_errors_free(&errs);
	if (r != 0)
		bench_fail("config: %s", pc_strerror(r));
	if (max_concurrent)
		e->cfg->agent.max_concurrent = max_concurrent;
	char locks[128];
	snprintf(locks, sizeof(locks), "%s/locks", e->dir);
	static const pc_agent_embedded_llm_t mock_llm = {pc_mock_server_embedded_start,
							 pc_mock_server_embedded_stop};
	pc_agent_options_t o = {.rt = e->rt, .io = e->io, .store = e->store, .config = e->cfg,
				.tools = e->tools, .hooks = e->hooks, .lock_dir = locks, .embedded_llm = &mock_llm,
				.mock_scenario = scenario};
	if ((r = pc_agent_new(&o, &e->agent)) != 0)
		bench_fail("agent: %s", pc_strerror(r));
}

/* A child's CPU time (user + system) so far, seconds; 0 for pid <= 0. */
static inline double env_child_cpu_s(pid_t pid)
{
	if (pid <= 0)
		return 0;
	char path[64], buf[1024];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "r");
	size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
	if (f)
		fclose(f);
	buf[n] = '\0';
	char *p = strrchr(buf, ')'); /* fields after the command name */
	unsigned long long ut = 0, st = 0;
	if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
		return 0;
	return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* A child's resident set, KiB. */
static inline uint64_t env_child_rss_kib(pid_t pid)
{
	char path[64], line[256];
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "r");
	uint64_t v = 0;
	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, "VmRSS:", 6))
			v = strtoull(line + 6, NULL, 10);
	if (f)
		fclose(f);
	return v;
}

/* ---- the measured window ---------------------------------------------------- */

/* The measured window, shared by the drivers: the first `warm`
 * completions warm up; the window closes after `runs` more or `seconds`. */
typedef struct window {
	uint64_t warm, runs;
	double seconds;
	uint64_t n0, n1;
	double t0, c0, t1, c1;
	int state; /* 0 warming, 1 measuring, 2 closed */
	pid_t mock; /* the mock's process, when a child: its CPU counts too */
} window_t;

static inline double window_cpu(const window_t *w) { return bench_cpu_s() + env_child_cpu_s(w->mock); }

/* Called at each completion with the total so far; true once it closed. */
static inline bool window_tick(window_t *w, uint64_t finished)
{
	if (w->state == 0 && finished >= w->warm) {
		w->state = 1;
		w->n0 = finished;
		w->t0 = bench_now_s();
		w->c0 = window_cpu(w);
	} else if (w->state == 1) {
		double now = bench_now_s();
		if (finished - w->n0 >= w->runs || now - w->t0 >= w->seconds) {
			w->state = 2;
			w->n1 = finished;
			w->t1 = now;
			w->c1 = window_cpu(w);
		}
	}
	return w->state == 2;
}

typedef struct result {
	uint64_t n;            /* completions in the window */
	double wall, cpu;      /* the window's, seconds */
	uint64_t ok, errors;   /* every completion, warm-up included */
	uint64_t refused;      /* agent submissions not started */
} result_t;

static inline void window_result(const window_t *w, result_t *r)
{
	r->n = w->n1 - w->n0;
	r->wall = w->t1 - w->t0;
	r->cpu = w->c1 - w->c0;
}

/* ---- the agent: a driver actor keeping every session busy ---------------- */

enum { ENV_MSG_GO = 1 };

typedef struct adrv {
	pc_agent_t *agent;
	uint32_t sessions, turns;
	uint32_t *gen, *turn;
	uint64_t submitted, finished, ok, errors, refused;
	bool stop;
	window_t w;
	bench_latch_t done;
} adrv_t;

static inline void agent_submit(pc_ctx_t *ctx, adrv_t *d, uint32_t slot)
{
	char key[64];
	snprintf(key, sizeof(key), "b%u-s%u-g%u", d->sessions, slot, d->gen[slot]);
	pc_agent_params_t ap = {.session_key = key, .message = "hello"};
	d->submitted++;
	int rc = pc_agent_submit_async(d->agent, &ap, pc_self(ctx), slot);
	if (rc != 0)
		bench_fail("pc_agent_submit_async: %s", pc_strerror(rc));
}

static inline void agent_finished(pc_ctx_t *ctx, adrv_t *d, uint32_t slot, bool ok)
{
	d->finished++;
	d->ok += ok;
	d->errors += !ok;
	if (d->turns && ++d->turn[slot] >= d->turns) {
		d->turn[slot] = 0;
		d->gen[slot]++;
	}
	if (!d->stop && window_tick(&d->w, d->finished))
		d->stop = true;
	if (!d->stop)
		agent_submit(ctx, d, slot);
	else if (d->finished == d->submitted)
		bench_latch_signal(&d->done);
}

static inline int agent_drive(pc_ctx_t *ctx, void *state, pc_msg_t *msg)
{
	adrv_t *d = state;
	if (msg->type == ENV_MSG_GO) {
		for (uint32_t i = 0; i < d->sessions; i++)
			agent_submit(ctx, d, i);
	} else if (msg->type == PC_MSG_AGENT_ACCEPTED) {
		const pc_agent_submit_reply_t *r = pc_msg_cdata(msg);
		uint32_t slot = (uint32_t)msg->corr;
		if (r->rc != 0 || r->accepted.disposition != PC_AGENT_STARTED) {
			d->refused++;
			agent_finished(ctx, d, slot, false);
		} else if (pc_agent_watch(d->agent, r->accepted.run_id, pc_self(ctx), slot) != 0) {
			bench_fail("pc_agent_watch");
		}
	} else if (msg->type == PC_MSG_AGENT_RUN_INFO) {
		const pc_run_info_t *info = pc_msg_cdata(msg);
		agent_finished(ctx, d, (uint32_t)msg->corr, info->status == PC_RUN_STATUS_OK);
	}
	return 0;
}

/* Keeps `sessions` session slots busy with one message each ("hello"),
 * each slot moving to a fresh session key every `turns` runs (0: never),
 * until the window `w` closes and every run submitted has ended. Each
 * `round` starts on session keys of its own. */
static inline void run_agent(agent_env_t *e, uint32_t sessions, uint32_t turns, uint32_t round, window_t w,
			     result_t *out)
{
	static const pc_behavior_t agent_driver_b = {"bench-agent-driver", agent_drive, NULL};
	adrv_t d = {.agent = e->agent, .sessions = sessions, .turns = turns, .w = w};
	d.gen = calloc(sessions, sizeof(uint32_t));
	d.turn = calloc(sessions, sizeof(uint32_t));
	if (!d.gen || !d.turn)
		bench_fail("out of memory");
	for (uint32_t i = 0; i < sessions; i++)
		d.gen[i] = round * 1000000u;
	bench_latch_init(&d.done);
	pc_actor_t *a = NULL;
	if (pc_spawn(e->rt, &agent_driver_b, &d, &a))
		bench_fail("spawn");
	pc_send(a, pc_msg_new(ENV_MSG_GO, 0));
	bench_latch_wait(&d.done, 4 * BENCH_TIMEOUT_S, "agent runs");
	pc_actor_stop(a, PC_EXIT_NORMAL);
	pc_actor_release(a);
	window_result(&d.w, out);
	out->ok = d.ok;
	out->errors = d.errors;
	out->refused = d.refused;
	bench_latch_destroy(&d.done);
	free(d.gen);
	free(d.turn);
}

/* ---- the request the agent sent, for the baselines ----------------------- */

typedef struct request {
	char url[128];
	char *body;            /* malloc'd */
	char **headers;        /* pc_request_headers + x-mock-session, NULL-terminated */
	size_t header_count;
} request_t;

static inline size_t env_collect(char *data, size_t size, size_t n, void *arg)
{
	size_t len = size * n;
	char **buf = arg;
	size_t old = *buf ? strlen(*buf) : 0;
	char *grown = realloc(*buf, old + len + 1);
	if (!grown)
		return 0;
	memcpy(grown + old, data, len);
	grown[old + len] = '\0';
	*buf = grown;
	return len;
}

/* Reads the mock's log of recent requests (GET /__mock/requests) and keeps
 * the body of median length among the agent's chat requests. */
static inline void capture_request(uint16_t port, request_t *r)
{
	snprintf(r->url, sizeof(r->url), "http://127.0.0.1:%u/v1/chat/completions", (unsigned)port);
	char url[128], *text = NULL;
	snprintf(url, sizeof(url), "http://127.0.0.1:%u/__mock/requests", (unsigned)port);
	CURL *c = curl_easy_init();
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, env_collect);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &text);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	if (curl_easy_perform(c) != CURLE_OK || !text)
		bench_fail("GET /__mock/requests");
	curl_easy_cleanup(c);
	cJSON *arr = cJSON_Parse(text);
	free(text);
	char *bodies[128];
	size_t nb = 0;
	const cJSON *rec;
	cJSON_ArrayForEach(rec, arr) {
		const cJSON *path = cJSON_GetObjectItemCaseSensitive(rec, "path");
		const cJSON *body = cJSON_GetObjectItemCaseSensitive(rec, "body");
		if (!cJSON_IsString(path) || !strstr(path->valuestring, "/chat/completions") || !body ||
		    nb == sizeof(bodies) / sizeof(bodies[0]))
			continue;
		bodies[nb++] = cJSON_IsString(body) ? strdup(body->valuestring) : cJSON_PrintUnformatted(body);
	}
	cJSON_Delete(arr);
	if (!nb)
		bench_fail("the mock recorded no chat request");
	/* the median length */
	for (size_t i = 1; i < nb; i++)
		for (size_t j = i; j > 0 && strlen(bodies[j]) < strlen(bodies[j - 1]); j--) {
			char *t = bodies[j];
			bodies[j] = bodies[j - 1];
			bodies[j - 1] = t;
		}
	r->body = bodies[nb / 2];
	for (size_t i = 0; i < nb; i++)
		if (i != nb / 2)
			free(bodies[i]);
	char **h = NULL;
	if (pc_request_headers(PC_API_OPENAI_COMPLETIONS, NULL, &h) != 0)
		bench_fail("pc_request_headers");
	size_t n = 0;
	while (h[n])
		n++;
	h = realloc(h, (n + 2) * sizeof(*h));
	h[n] = strdup("x-mock-session: bench-baseline");
	h[n + 1] = NULL;
	r->headers = h;
	r->header_count = n + 1;
}

static inline void request_free(request_t *r)
{
	free(r->body);
	pc_request_headers_free(r->headers);
}

static inline void env_stop(agent_env_t *e, pc_mock_server_t **mocks, size_t nmocks)
{
	pc_agent_free(e->agent, 10000);
	for (size_t i = 0; i < nmocks; i++)
		pc_mock_server_free(mocks[i]);
	int r = pc_store_close(e->store);
	if (r != 0)
		fprintf(stderr, "store close: %s\n", pc_store_strerror(r));
	pc_io_free(e->io);
	pc_runtime_stop(e->rt);
	pc_runtime_free(e->rt);
	pc_config_free(e->cfg);
	env_remove_dir();
}

#endif
