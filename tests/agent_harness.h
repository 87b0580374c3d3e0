/*
 * A whole agent layer for tests: runtime, I/O, a store in a fresh temporary
 * directory, a configuration whose providers are the embedded mock LLM
 * (scripted per test), and the agent host. Runs go through the real
 * session / run / attempt actors over loopback HTTP.
 */
#ifndef PC_TESTS_AGENT_HARNESS_H
#define PC_TESTS_AGENT_HARNESS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "agents/agent.h"
#include "agents/agent_internal.h"
#include "test_util.h"

typedef struct harness {
	pc_runtime_t *rt;
	pc_io_t *io;
	pc_store_t *store;
	pc_config_t *cfg;
	pc_agent_t *agent;
	char dir[64];
	uint64_t actors_before;
} harness_t;

/* The default configuration: one embedded provider "mock" with two auth
 * profiles, a fallback provider "fb" (the same mock), and small retries. */
#define HARNESS_CONFIG                                                                             \
	"{\"providers\":{"                                                                          \
	"\"mock\":{\"api\":\"openai-completions\",\"embedded\":true,"                               \
	"\"profiles\":[{\"id\":\"a\",\"apiKey\":\"key-a\"},{\"id\":\"b\",\"apiKey\":\"key-b\"}]},"   \
	"\"fb\":{\"api\":\"openai-completions\",\"embedded\":true,\"apiKey\":\"key-fb\"}},"         \
	"\"agents\":{\"defaults\":{\"model\":\"mock/m1\",\"fallbacks\":[\"fb/m2\"],"                \
	"\"maxConcurrent\":16,\"sessionIdleSeconds\":1}}}"

static inline void harness_start_with(harness_t *h, const char *config, const char *scenario,
				      const pc_tool_registry_t *tools)
{
	memset(h, 0, sizeof(*h));
	snprintf(h->dir, sizeof(h->dir), "/tmp/pincer-agent-XXXXXX");
	cr_assert_not_null(mkdtemp(h->dir));
	h->rt = start_rt(2);
	pc_io_config_t icfg = {.threads = 1, .max_host_connections = 4096};
	cr_assert_eq(pc_io_new(h->rt, &icfg, &h->io), 0);
	char path[128], locks[128];
	snprintf(path, sizeof(path), "%s/state.db", h->dir);
	snprintf(locks, sizeof(locks), "%s/locks", h->dir);
	pc_store_config_t scfg;
	pc_store_config_init(&scfg);
	scfg.path = path;
	cr_assert_eq(pc_store_open(h->rt, &scfg, &h->store), 0);
	pc_config_errors_t errs = {0};
	int rc = pc_config_parse(config, strlen(config), "test", &h->cfg, &errs);
	for (size_t i = 0; i < errs.count; i++)
		fprintf(stderr, "config: %s\n", errs.items[i]);
	pc_config_errors_free(&errs);
	cr_assert_eq(rc, 0);
	pc_agent_options_t o = {.rt = h->rt, .io = h->io, .store = h->store, .config = h->cfg,
				.tools = tools, .lock_dir = locks, .mock_scenario = scenario};
	cr_assert_eq(pc_agent_new(&o, &h->agent), 0);
}

static inline void harness_start(harness_t *h, const char *scenario)
{
	harness_start_with(h, HARNESS_CONFIG, scenario, NULL);
}

static inline void harness_stop(harness_t *h)
{
	pc_agent_free(h->agent, 10000);
	cr_assert_eq(pc_store_close(h->store), 0);
	pc_io_free(h->io);
	/* every actor of the agent layer is gone: nothing leaked */
	pc_runtime_stats_t st;
	pc_runtime_stats(h->rt, &st, NULL, 0);
	pc_runtime_free(h->rt);
	pc_config_free(h->cfg);
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", h->dir);
	cr_assert_eq(system(cmd), 0);
}

/* Submits `msg` to session `key` and returns the run id in `run`. */
static inline pc_agent_disposition_t submit(harness_t *h, const char *key, const char *msg, char *run)
{
	pc_agent_params_t p = {.session_key = key, .message = msg};
	pc_agent_accepted_t acc;
	int rc = pc_agent_submit(h->agent, &p, &acc);
	cr_assert_eq(rc, 0, "submit: %s", pc_strerror(rc));
	strcpy(run, acc.run_id);
	return acc.disposition;
}

/* Waits for the run and returns its terminal data (the caller frees). */
static inline cJSON *finish_of(harness_t *h, const char *run, int64_t timeout_ms)
{
	pc_agent_wait_result_t w;
	cr_assert_eq(pc_agent_wait(h->agent, run, timeout_ms, &w), 0);
	cr_assert_neq(w.status, PC_AGENT_WAIT_TIMEOUT, "run %s did not end in time", run);
	char *json = NULL;
	cr_assert_eq(pc_agent_result(h->agent, run, &json), 0);
	cJSON *d = cJSON_Parse(json);
	free(json);
	cr_assert_not_null(d);
	return d;
}

static inline const char *jstr(const cJSON *o, const char *k)
{
	const char *s = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, k));
	return s ? s : "";
}

/* The first payload's text, or "". */
static inline const char *payload_text(const cJSON *d)
{
	const cJSON *p = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(d, "payloads"), 0);
	return jstr(p, "text");
}

/* The attempts trace as "result:reason,..." (reason omitted when none). */
static inline void trace_text(const cJSON *d, char *out, size_t cap)
{
	out[0] = '\0';
	const cJSON *e;
	cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(d, "attempts")) {
		size_t n = strlen(out);
		snprintf(out + n, cap - n, "%s%s%s%s", n ? "," : "", jstr(e, "result"),
			 jstr(e, "reason")[0] ? ":" : "", jstr(e, "reason"));
	}
}

/* The requests the mock saw, as a JSON array (the caller frees). */
static inline cJSON *mock_requests(harness_t *h)
{
	cJSON *r = NULL;
	cr_assert_eq(pc_mock_server_requests(h->agent->mock, &r), 0);
	return r;
}

/* The model named in request i's body, into out. */
static inline void request_model(const cJSON *reqs, int i, char *out, size_t cap)
{
	const cJSON *r = cJSON_GetArrayItem(reqs, i);
	const cJSON *body = cJSON_GetObjectItemCaseSensitive(r, "body");
	cJSON *parsed = cJSON_IsString(body) ? cJSON_Parse(body->valuestring) : NULL;
	const cJSON *b = parsed ? parsed : body;
	snprintf(out, cap, "%s", jstr(b, "model"));
	cJSON_Delete(parsed);
}

#endif
