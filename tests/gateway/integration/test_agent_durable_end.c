/*
 * Done means done, across a crash: the real `pincer gateway` (the binary
 * built next to this test, on a free loopback port, with its embedded
 * mock LLM) answers a chat completion 200, is SIGKILLed the moment the
 * answer arrives, and is started again on the same PINCER_HOME. Every
 * run it answered must be recorded as finished ok, never left running
 * (which reads back as "the run did not finish (process restarted)").
 * Several rounds make the window before the end's commit likely to show.
 *
 * Every wait is bounded; only this test's own children are signalled, by
 * pid.
 */
#include <criterion/criterion.h>

#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "curl_client.h"
#include "io/store/store.h"
#include "pincer_child.h"
#include "test_util.h"

#define TOKEN "durable-s3cret"
#define START_MS 60000 /* sanitizer builds start slowly */
#define ROUNDS 10

typedef struct gw {
	char dir[64];
	char cfg[PATH_MAX], out[PATH_MAX], err[PATH_MAX];
	char pincer[PATH_MAX];
	pid_t pid;
	uint16_t port;
} gw_t;

/* Starts `pincer gateway --port 0` with PINCER_HOME (and workspace) in
 * g->dir, which the config was written to by gw_init. */
static void gw_start(gw_t *g)
{
	g->port = start_gateway_child(g->pincer, g->dir, g->cfg, g->out, g->err, START_MS, &g->pid);
}

static void gw_init(gw_t *g)
{
	memset(g, 0, sizeof(*g));
	snprintf(g->dir, sizeof(g->dir), "/tmp/pincer-durable-XXXXXX");
	cr_assert_not_null(mkdtemp(g->dir));
	find_pincer(g->pincer, sizeof(g->pincer));
	snprintf(g->cfg, sizeof(g->cfg), "%s/pincer-test.json", g->dir);
	snprintf(g->out, sizeof(g->out), "%s/gw.out", g->dir);
	snprintf(g->err, sizeof(g->err), "%s/gw.err", g->dir);
	char text[1024];
	snprintf(text, sizeof(text),
		 "{\"providers\":{\"mock\":{\"api\":\"openai-completions\",\"embedded\":true,\"apiKey\":\"k\"}},"
		 "\"agents\":{\"defaults\":{\"model\":\"mock/m1\",\"workspace\":\"%s\"}},"
		 "\"gateway\":{\"auth\":{\"mode\":\"token\",\"token\":\"" TOKEN "\"}}}",
		 g->dir);
	write_file(g->cfg, text);
}

/* One chat completion in session `key`: its run id, read from the
 * answer's id (chatcmpl-<run id>), into `run_id`. */
static void chat(const gw_t *g, const char *key, char *run_id, size_t n)
{
	static const char body[] =
		"{\"model\":\"pincer\",\"messages\":[{\"role\":\"user\",\"content\":\"say something\"}]}";
	char keyh[128];
	snprintf(keyh, sizeof(keyh), "x-pincer-session-key: %s", key);
	/* curl_request sends the body as application/json */
	const char *hdrs[] = {"Authorization: Bearer " TOKEN, keyh, NULL};
	resp_t r = {0};
	curl_request(g->port, "POST", "/v1/chat/completions", hdrs, body, strlen(body), 60000, &r);
	cJSON *j = r.code == CURLE_OK && r.status == 200 ? cJSON_Parse(r.body) : NULL;
	const char *id = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "id"));
	bool have = id && strncmp(id, "chatcmpl-", 9) == 0;
	snprintf(run_id, n, "%s", have ? id + 9 : "");
	cJSON_Delete(j);
	long status = r.status;
	CURLcode code = r.code;
	resp_free(&r);
	cr_assert_eq(code, CURLE_OK, "%s", curl_easy_strerror(code));
	cr_assert_eq(status, 200, "status %ld", status);
	cr_assert(have, "the answer has no chatcmpl- id");
}

Test(durable_end, a_run_answered_before_a_sigkill_is_recorded_as_finished, .timeout = 600)
{
	gw_t g;
	gw_init(&g);
	char runs[ROUNDS][PC_STORE_ID_MAX];
	gw_start(&g);
	for (int i = 0; i < ROUNDS; i++) {
		char key[32];
		snprintf(key, sizeof(key), "durable-%d", i);
		chat(&g, key, runs[i], sizeof(runs[i]));
		/* the answer is in: nothing after it may be needed for the end */
		cr_assert_eq(kill(g.pid, SIGKILL), 0);
		cr_assert_eq(child_wait(&g.pid, START_MS), 128 + SIGKILL);
		gw_start(&g);
	}
	kill(g.pid, SIGTERM);
	cr_assert_eq(child_wait(&g.pid, START_MS), 0, "the gateway did not stop on SIGTERM");

	/* the gateway is gone: its store, read directly */
	pc_runtime_t *rt = start_rt(2);
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/state.db", g.dir);
	pc_store_config_t cfg;
	pc_store_config_init(&cfg);
	cfg.path = path;
	pc_store_t *s = NULL;
	cr_assert_eq(pc_store_open(rt, &cfg, &s), 0);
	int unfinished = 0;
	for (int i = 0; i < ROUNDS; i++) {
		pc_store_reply_t rep;
		cr_assert_eq(pc_store_run_get(s, runs[i], &rep), 0, "run %s is not in the store", runs[i]);
		if (rep.status != PC_STORE_RUN_OK) {
			cr_log_error("round %d: run %s has status %d", i, runs[i], (int)rep.status);
			unfinished++;
		}
	}
	cr_assert_eq(pc_store_close(s), 0);
	FREE_RUNTIME_CHECKED(rt);
	cr_assert_eq(unfinished, 0, "%d of %d answered runs are not recorded as finished ok", unfinished, ROUNDS);

	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", g.dir);
	cr_assert_eq(system(cmd), 0);
}
