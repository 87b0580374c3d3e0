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
#include "agents/mock/mock_server.h"
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

/* Providers marked "embedded" are served by the mock LLM. */
static const pc_agent_embedded_llm_t harness_mock_llm = {pc_mock_server_embedded_start,
							 pc_mock_server_embedded_stop};

/* The store's lazy_ms for the next harness_start (0: the default). */
static uint32_t harness_store_lazy_ms;
/* The next harness_start's store answers the lease acquires of session
 * `harness_lease_delay_key` this much late (io/store test hook). */
static const char *harness_lease_delay_key;
static uint32_t harness_lease_delay_ms;
/* The next harness_start sizes the I/O layer as `pincer` does
 * (pc_agent_io_config) instead of 4096 connections per host. */
static bool harness_io_as_configured;
/* The next harness_start's agent logs here (borrowed; NULL: no logger). */
static pc_log_t *harness_log;

/* The default configuration: one embedded provider "mock" with two auth
 * profiles, a fallback provider "fb" (the same mock), and small retries. */
#define HARNESS_CONFIG                                                                             \
	"{\"providers\":{"                                                                          \
	"\"mock\":{\"api\":\"openai-completions\",\"embedded\":true,"                               \
	"\"profiles\":[{\"id\":\"a\",\"apiKey\":\"key-a\"},{\"id\":\"b\",\"apiKey\":\"key-b\"}]},"   \
	"\"fb\":{\"api\":\"openai-completions\",\"embedded\":true,\"apiKey\":\"key-fb\"}},"         \
	"\"agents\":{\"defaults\":{\"model\":\"mock/m1\",\"fallbacks\":[\"fb/m2\"],"                \
	"\"maxConcurrent\":16,\"sessionIdleSeconds\":1}}}"

/* Opens the store in h->dir and the agent on it. */
static inline void harness_open_agent(harness_t *h, const char *scenario, const pc_tool_registry_t *tools,
				      const pc_hooks_t *hooks)
{
	char path[128], locks[128];
	snprintf(path, sizeof(path), "%s/state.db", h->dir);
	snprintf(locks, sizeof(locks), "%s/locks", h->dir);
	pc_store_config_t scfg;
	pc_store_config_init(&scfg);
	scfg.path = path;
	scfg.lazy_ms = harness_store_lazy_ms;
	scfg.test_lease_delay_key = harness_lease_delay_key;
	scfg.test_lease_delay_ms = harness_lease_delay_ms;
	cr_assert_eq(pc_store_open(h->rt, &scfg, &h->store), 0);
	pc_agent_options_t o = {.rt = h->rt, .io = h->io, .store = h->store, .config = h->cfg,
				.embedded_llm = &harness_mock_llm,
				.tools = tools, .hooks = hooks, .lock_dir = locks, .mock_scenario = scenario,
				.log = harness_log};
	cr_assert_eq(pc_agent_new(&o, &h->agent), 0);
}

/* A restart as the store sees it: the agent stops, the store closes (every
 * write committed), both open again on the same file. */
static inline void harness_restart_agent(harness_t *h, const char *scenario)
{
	pc_agent_free(h->agent, 10000);
	cr_assert_eq(pc_store_close(h->store), 0);
	harness_open_agent(h, scenario, NULL, NULL);
}

static inline void harness_start_hooked(harness_t *h, const char *config, const char *scenario,
					const pc_tool_registry_t *tools, const pc_hooks_t *hooks)
{
	memset(h, 0, sizeof(*h));
	snprintf(h->dir, sizeof(h->dir), "/tmp/pincer-agent-XXXXXX");
	cr_assert_not_null(mkdtemp(h->dir));
	h->rt = start_rt(2);
	pc_config_errors_t errs = {0};
	int rc = pc_config_parse(config, strlen(config), "test", &h->cfg, &errs);
	for (size_t i = 0; i < errs.count; i++)
		fprintf(stderr, "config: %s\n", errs.items[i]);
	pc_config_errors_free(&errs);
	cr_assert_eq(rc, 0);
	pc_io_config_t icfg = {.threads = 1, .max_host_connections = 4096};
	if (harness_io_as_configured)
		pc_agent_io_config(h->cfg, 1, &icfg);
	cr_assert_eq(pc_io_new(h->rt, &icfg, &h->io), 0);
	harness_open_agent(h, scenario, tools, hooks);
}

static inline void harness_start_with(harness_t *h, const char *config, const char *scenario,
				      const pc_tool_registry_t *tools)
{
	harness_start_hooked(h, config, scenario, tools, NULL);
}

static inline void harness_start(harness_t *h, const char *scenario)
{
	harness_start_with(h, HARNESS_CONFIG, scenario, NULL);
}

static inline void harness_stop(harness_t *h)
{
	/* every lifecycle's state changed only as its table allows (a test
	 * that freed the agent itself has no counter left to read) */
	for (int m = 0; h->agent && m < PC__LC_MACHINES; m++) {
		double illegal = 0;
		cr_assert_eq(pc_metric_value(h->agent->metrics.illegal[m], &illegal), 0);
		cr_assert_eq(illegal, 0, "%.0f illegal transitions of lifecycle machine %d", illegal, m);
	}
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
	cr_assert_eq(pc_mock_server_requests(h->agent->embedded, &r), 0);
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

/* ---- scenario helpers (queue / abort / recovery tests) ---- */

/* harness_stop, and also: once the agent, the store and the I/O layer are
 * gone, no actor of the runtime is left (none leaked by the runs). The
 * embedded mock's answer timers outlive it (an actor per delayed answer,
 * until its ttft/delay passes), so keep scripted delays of aborted
 * requests under a few seconds. */
static inline void harness_stop_no_leaks(harness_t *h)
{
	pc_agent_free(h->agent, 10000);
	cr_assert_eq(pc_store_close(h->store), 0);
	pc_io_free(h->io);
	uint64_t until = now_ms() + 8000;
	pc_runtime_stats_t st;
	do {
		pc_runtime_stats(h->rt, &st, NULL, 0);
		if (st.actors_live == 0)
			break;
		sleep_ms(2);
	} while (now_ms() < until);
	cr_assert_eq(st.actors_live, 0, "%llu actors still live after the agent stopped",
		     (unsigned long long)st.actors_live);
	pc_runtime_free(h->rt);
	pc_config_free(h->cfg);
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", h->dir);
	cr_assert_eq(system(cmd), 0);
}

/* Submits with an explicit queue mode (NULL: the configured one). */
static inline pc_agent_disposition_t submit_mode(harness_t *h, const char *key, const char *msg,
						 const char *mode, char *run)
{
	pc_agent_params_t p = {.session_key = key, .message = msg, .queue_mode = mode};
	pc_agent_accepted_t acc;
	int rc = pc_agent_submit(h->agent, &p, &acc);
	cr_assert_eq(rc, 0, "submit: %s", pc_strerror(rc));
	strcpy(run, acc.run_id);
	return acc.disposition;
}

/* pc_agent_wait that must not time out; the result is returned. */
static inline pc_agent_wait_result_t wait_run(harness_t *h, const char *run, int64_t timeout_ms)
{
	pc_agent_wait_result_t w;
	memset(&w, 0, sizeof(w));
	cr_assert_eq(pc_agent_wait(h->agent, run, timeout_ms, &w), 0);
	cr_assert_neq(w.status, PC_AGENT_WAIT_TIMEOUT, "run %s did not end in time", run);
	return w;
}

/* A subscription to every run of session `key` (pc_event_sub_release). */
static inline pc_event_sub_t *session_sub(harness_t *h, const char *key)
{
	pc_event_sub_t *sub = NULL;
	pc_event_sub_config_t sc = {.capacity = 4096};
	cr_assert_eq(pc_event_sub_new(&sc, &sub), 0);
	cr_assert_eq(pc_agent_subscribe_session(h->agent, key, sub), 0);
	return sub;
}

static inline void session_unsub(harness_t *h, const char *key, pc_event_sub_t *sub)
{
	pc_agent_unsubscribe_session(h->agent, key, sub);
	pc_event_sub_release(sub);
}

/* Takes events from `sub` until one of `stream` whose data contains
 * `needle` (NULL: any) arrives: true, or false after timeout_ms. The
 * events taken (up to and including that one) are released; the data of
 * those of `stream` is appended, one per line, to `log` when given. */
static inline bool await_event(pc_event_sub_t *sub, pc_event_stream_t stream, const char *needle,
			       int64_t timeout_ms, char *log, size_t cap)
{
	uint64_t until = now_ms() + (uint64_t)timeout_ms;
	for (;;) {
		pc_event_t *ev = NULL;
		while (pc_event_sub_take(sub, &ev, 1) == 1) {
			bool hit = ev->stream == stream && (!needle || strstr(ev->data, needle));
			if (log && ev->stream == stream) {
				size_t n = strlen(log);
				snprintf(log + n, cap - n, "%s\n", ev->data);
			}
			pc_event_release(ev);
			if (hit)
				return true;
		}
		uint64_t now = now_ms();
		if (now >= until)
			return false;
		if (pc_event_sub_wait(sub, (int64_t)(until - now)) == PC_ESTOPPED)
			return false;
	}
}

/* Appends `n` messages (user, assistant, user, ...) of a few dozen words
 * each to session `key`'s transcript. */
static inline void seed_history(harness_t *h, const char *key, int n)
{
	for (int i = 0; i < n; i++) {
		char content[512];
		if (i % 2 == 0)
			snprintf(content, sizeof(content),
				 "{\"role\":\"user\",\"content\":\"question %d: tell me about item %d of the "
				 "inventory, its colour, its weight, its price and where it is stored today\"}",
				 i, i);
		else
			snprintf(content, sizeof(content),
				 "{\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"answer %d: "
				 "item %d is blue, weighs three kilograms, costs twelve euros and sits on shelf "
				 "B%d in the north warehouse\"}],\"stopReason\":\"stop\"}",
				 i, i - 1, i);
		pc_store_msg_t m = {.role = i % 2 == 0 ? "user" : "assistant", .content = content};
		int64_t seq = 0;
		cr_assert_eq(pc_store_append(h->store, key, 0, &m, &seq), 0);
	}
}

/* The roles of session `key`'s transcript, comma-separated, into out;
 * returns the number of messages. */
static inline int history_roles(harness_t *h, const char *key, char *out, size_t cap)
{
	pc_store_history_t *hist = NULL;
	out[0] = '\0';
	int rc = pc_store_history(h->store, key, &hist);
	if (rc == PC_ENOTFOUND)
		return 0;
	cr_assert_eq(rc, 0);
	size_t n = pc_store_history_count(hist);
	for (size_t i = 0; i < n; i++) {
		pc_store_msg_t m;
		pc_store_history_get(hist, i, &m);
		size_t l = strlen(out);
		snprintf(out + l, cap - l, "%s%s", i ? "," : "", m.role);
	}
	pc_store_history_free(hist);
	return (int)n;
}

/* The number of requests the mock saw. */
static inline int request_count(harness_t *h)
{
	cJSON *r = mock_requests(h);
	int n = cJSON_GetArraySize(r);
	cJSON_Delete(r);
	return n;
}

/* Request i's body as an object (a new one when the log holds a string;
 * the caller deletes *owned when set). */
static inline const cJSON *request_body(const cJSON *reqs, int i, cJSON **owned)
{
	const cJSON *body = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(reqs, i), "body");
	*owned = cJSON_IsString(body) ? cJSON_Parse(body->valuestring) : NULL;
	return *owned ? *owned : body;
}

/* Request i's last message: its role and text (a string content, or its
 * text parts joined). */
static inline void request_last_message(const cJSON *reqs, int i, char *role, size_t rcap, char *text, size_t tcap)
{
	cJSON *owned = NULL;
	const cJSON *b = request_body(reqs, i, &owned);
	const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(b, "messages");
	const cJSON *last = cJSON_GetArrayItem(msgs, cJSON_GetArraySize(msgs) - 1);
	snprintf(role, rcap, "%s", jstr(last, "role"));
	text[0] = '\0';
	const cJSON *c = cJSON_GetObjectItemCaseSensitive(last, "content");
	if (cJSON_IsString(c)) {
		snprintf(text, tcap, "%s", c->valuestring);
	} else {
		const cJSON *part;
		cJSON_ArrayForEach(part, c) {
			size_t l = strlen(text);
			snprintf(text + l, tcap - l, "%s", jstr(part, "text"));
		}
	}
	cJSON_Delete(owned);
}

/* Request i's body as text (cJSON_free). */
static inline char *request_text(const cJSON *reqs, int i)
{
	cJSON *owned = NULL;
	const cJSON *b = request_body(reqs, i, &owned);
	char *s = cJSON_PrintUnformatted(b);
	cJSON_Delete(owned);
	return s;
}

/* Request i's x-mock-session header (the run it belongs to), or "". */
static inline const char *request_session(const cJSON *reqs, int i)
{
	const cJSON *hd = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(reqs, i), "headers");
	return jstr(hd, "x-mock-session");
}

#endif
