/*
 * What bench_agent and bench_agent_inflight share: a whole agent layer
 * in-process (runtime, I/O, a store in a fresh temporary directory, a
 * configuration, the agent host), as tests/agent_harness.h builds it, but
 * failing with bench_fail instead of assertions; the open-file limit; RSS
 * after giving freed memory back.
 */
#ifndef PC_BENCH_AGENT_ENV_H
#define PC_BENCH_AGENT_ENV_H

#include <malloc.h>
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
} agent_env_t;

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

/* Resident set after returning free heap pages to the OS, KiB. */
static inline uint64_t env_trimmed_rss_kib(void)
{
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
	pc_agent_options_t o = {.rt = e->rt, .io = e->io, .store = e->store, .config = e->cfg,
				.lock_dir = locks, .mock_scenario = scenario};
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
