/*
 * The configuration module (agents/config): defaults, a full file, the
 * provider class rules of §9.1, apiKeyEnv, environment overrides, every
 * kind of validation error (all of them reported at once, each with its
 * JSON path), malformed JSON, the load search order, and `show`'s JSON.
 *
 * Every test starts and ends with the PINCER_* variables unset and the
 * original working directory, so the runner's environment cannot leak in.
 */
#include <criterion/criterion.h>

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "agents/config/config.h"
#include "agents/run/idle_breaker.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#define ASSERT_NO_LEAKS() cr_assert_eq(__lsan_do_recoverable_leak_check(), 0, "LeakSanitizer found leaks")
#else
#define ASSERT_NO_LEAKS() ((void)0)
#endif

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

static char saved_cwd[PATH_MAX];

static void clean_env(void)
{
	static const char *const vars[] = {"PINCER_MODEL",   "PINCER_MAX_CONCURRENT", "PINCER_TIMEOUT_SECONDS",
					   "PINCER_WORKSPACE", "PINCER_CONFIG",       "PINCER_HOME",
					   "PC_TEST_KEY_A",  "PC_TEST_KEY_B",         "PC_TEST_KEY_EMPTY",
					   "PINCER_GATEWAY_BIND", "PINCER_GATEWAY_PORT", "PINCER_GATEWAY_TOKEN",
					   "PINCER_GATEWAY_PASSWORD", "PINCER_STORE_URL", "PINCER_CLUSTER_SECRET"};
	for (size_t i = 0; i < N_OF(vars); i++)
		unsetenv(vars[i]);
}

static void suite_init(void)
{
	clean_env();
	if (!getcwd(saved_cwd, sizeof(saved_cwd)))
		saved_cwd[0] = 0;
}

static void suite_fini(void)
{
	clean_env();
	if (saved_cwd[0] && chdir(saved_cwd) != 0)
		perror("chdir");
}

TestSuite(config, .init = suite_init, .fini = suite_fini);

/* ---- helpers ---- */

static int parse(const char *json, pc_config_t **c, pc_config_errors_t *e)
{
	return pc_config_parse(json, strlen(json), "test.json", c, e);
}

static bool has_error(const pc_config_errors_t *e, const char *want)
{
	for (size_t i = 0; i < e->count; i++)
		if (strcmp(e->items[i], want) == 0)
			return true;
	return false;
}

static void dump_errors(const pc_config_errors_t *e)
{
	for (size_t i = 0; i < e->count; i++)
		cr_log_info("  error: %s", e->items[i]);
}

/* Parses `json`, which must fail with exactly the errors `want`. */
static void expect_errors(const char *json, const char *const *want, size_t n)
{
	pc_config_t *c = (pc_config_t *)1;
	pc_config_errors_t e;
	int rc = parse(json, &c, &e);
	if (rc != PC_EINVAL || e.count != n)
		dump_errors(&e);
	cr_assert_eq(rc, PC_EINVAL, "%s", json);
	cr_assert_null(c, "%s", json);
	for (size_t i = 0; i < n; i++) {
		if (!has_error(&e, want[i]))
			dump_errors(&e);
		cr_assert(has_error(&e, want[i]), "missing \"%s\" for %s", want[i], json);
	}
	cr_assert_eq(e.count, n, "%s: %zu errors, want %zu", json, e.count, n);
	pc_config_errors_free(&e);
}

/* A valid provider "p" to build invalid files around. */
#define P_OK "\"p\":{\"api\":\"openai-completions\",\"baseUrl\":\"https://api.example.com/v1\"}"
#define WITH_P(providers_extra, defaults)                                                                   \
	"{\"providers\":{" P_OK providers_extra "},\"agents\":{\"defaults\":{\"model\":\"p/m\"" defaults "}}}"

static void check_default_values(const pc_config_t *c)
{
	const pc_agent_defaults_t *a = &c->agent;
	cr_assert_eq(a->run_timeout_ms, PC_CONFIG_DEFAULT_RUN_TIMEOUT_MS);
	cr_assert_eq(a->run_timeout_ms, (uint64_t)172800000);
	cr_assert_geq(a->max_concurrent, 8u);
	cr_assert_leq(a->max_concurrent, 16u);
	cr_assert_eq(a->think, PC_THINK_OFF);
	cr_assert_null(a->system_prompt);
	cr_assert_null(a->workspace);
	cr_assert_eq(a->tool_mode, PC_TOOLS_SEQUENTIAL);
	cr_assert_null(a->tools_allow);
	cr_assert_eq(a->fallback_count, 0);
	cr_assert(a->compaction.enabled);
	cr_assert_eq(a->compaction.keep_recent_tokens, PC_CONFIG_DEFAULT_KEEP_RECENT_TOKENS);
	cr_assert_null(a->compaction.model.provider);
	cr_assert_eq(a->compaction.max_transcript_bytes, 0);
	pc_queue_settings_t q;
	pc_queue_settings_default(&q);
	cr_assert_eq(a->queue.mode, q.mode);
	cr_assert_eq(a->queue.debounce_ms, q.debounce_ms);
	cr_assert_eq(a->queue.cap, q.cap);
	cr_assert_eq(a->queue.drop, q.drop);
	cr_assert_not(a->retries.has_base || a->retries.has_per_profile || a->retries.has_min ||
		      a->retries.has_max);
	cr_assert_eq(a->rate_limit_rotations, PC_RUN_DEFAULT_RATE_LIMIT_ROTATIONS);
	cr_assert_eq(a->overload_rotations, PC_RUN_DEFAULT_OVERLOAD_ROTATIONS);
	cr_assert_eq(a->overloaded_backoff_ms, PC_RUN_DEFAULT_OVERLOADED_BACKOFF_MS);
	cr_assert_eq(a->idle_breaker_cap, PC_IDLE_BREAKER_DEFAULT_CAP);
	cr_assert(a->loop_guard);
	cr_assert_eq(a->session_idle_ms, PC_CONFIG_DEFAULT_SESSION_IDLE_MS);
	cr_assert_eq(c->diagnostics.warn_ms, 120000);
	cr_assert_eq(c->diagnostics.abort_ms, 360000);
	cr_assert_null(c->store_path);
	cr_assert(c->store_window_ms == 0 && c->store_group_max == 0 && c->store_lazy_ms == 0, "the store's defaults");
}

static void check_mock_only(const pc_config_t *c)
{
	cr_assert_eq(c->provider_count, 1);
	const pc_provider_config_t *p = &c->providers[0];
	cr_assert_str_eq(p->id, "mock");
	cr_assert_eq(p->api, PC_API_OPENAI_COMPLETIONS);
	cr_assert(p->embedded);
	cr_assert_null(p->base_url);
	cr_assert_eq(p->cls, PC_PROVIDER_LOCAL);
	cr_assert_eq(p->idle_timeout_ms, 0);
	cr_assert_eq(p->profile_count, 1);
	cr_assert_str_eq(p->profiles[0].id, "default");
	cr_assert_null(p->profiles[0].api_key);
	cr_assert_eq(p->model_count, 0);
	cr_assert_eq(pc_config_provider(c, "mock"), p);
}

/* ================= defaults ================= */

Test(config, defaults_without_a_file)
{
	pc_config_t *c = NULL;
	cr_assert_eq(pc_config_default(&c), 0);
	check_mock_only(c);
	cr_assert_str_eq(c->agent.model.provider, "mock");
	cr_assert_str_eq(c->agent.model.model, "mock-model");
	cr_assert_null(c->source);
	check_default_values(c);
	pc_config_free(c);
	ASSERT_NO_LEAKS();
}

Test(config, empty_object_and_blank_text_are_the_defaults)
{
	static const char *const texts[] = {"{}", "", "  \n\t", "{\"providers\":{}}", "{\"agents\":{}}"};
	for (size_t i = 0; i < N_OF(texts); i++) {
		pc_config_t *c = NULL;
		pc_config_errors_t e;
		cr_assert_eq(parse(texts[i], &c, &e), 0, "\"%s\"", texts[i]);
		cr_assert_eq(e.count, 0);
		check_mock_only(c);
		cr_assert_str_eq(c->agent.model.model, "mock-model");
		cr_assert_str_eq(c->source, "test.json");
		check_default_values(c);
		pc_config_free(c);
		pc_config_errors_free(&e);
	}
	ASSERT_NO_LEAKS();
}

Test(config, mock_with_another_model_and_unknown_provider)
{
	pc_config_t *c = NULL;
	pc_config_errors_t e;
	cr_assert_eq(parse("{\"agents\":{\"defaults\":{\"model\":\"mock/other\"}}}", &c, &e), 0);
	check_mock_only(c);
	cr_assert_str_eq(c->agent.model.model, "other");
	pc_config_free(c);
	pc_config_errors_free(&e);

	static const char *const want[] = {"agents.defaults.model: unknown provider \"openai\""};
	expect_errors("{\"agents\":{\"defaults\":{\"model\":\"openai/gpt-4o\"}}}", want, 1);
	ASSERT_NO_LEAKS();
}

Test(config, the_null_argument_checks)
{
	pc_config_t *c = NULL;
	pc_config_errors_t e;
	cr_assert_eq(pc_config_parse("{}", 2, NULL, NULL, &e), PC_EINVAL);
	cr_assert_eq(pc_config_parse(NULL, 3, NULL, &c, NULL), PC_EINVAL);
	cr_assert_eq(pc_config_load(NULL, NULL, NULL), PC_EINVAL);
	cr_assert_eq(pc_config_to_json(NULL, NULL), PC_EINVAL);
	cr_assert_null(pc_config_provider(NULL, "x"));
	cr_assert_null(pc_config_model(NULL, "x"));
	pc_config_free(NULL);
	pc_config_errors_free(NULL);
}

/* ================= a full file ================= */

static const char full_file[] =
	"{\n"
	"  \"providers\": {\n"
	"    \"openai\": {\n"
	"      \"api\": \"openai-completions\",\n"
	"      \"baseUrl\": \"https://api.openai.com/v1\",\n"
	"      \"profiles\": [ {\"id\": \"p1\", \"apiKey\": \"sk-secret-1\"}, {\"id\": \"p2\", \"apiKeyEnv\": \"PC_TEST_KEY_A\"} ],\n"
	"      \"timeoutSeconds\": 90,\n"
	"      \"contextTokens\": 128000,\n"
	"      \"models\": [ {\"id\": \"gpt-4o\", \"contextTokens\": 64000, \"maxTokens\": 4096, \"reasoning\": false},\n"
	"                  {\"id\": \"o3\", \"reasoning\": true} ]\n"
	"    },\n"
	"    \"anthropic\": {\n"
	"      \"api\": \"anthropic-messages\",\n"
	"      \"baseUrl\": \"https://api.anthropic.com\",\n"
	"      \"apiKey\": \"sk-ant-secret\",\n"
	"      \"idleTimeoutSeconds\": 45,\n"
	"      \"class\": \"self-hosted\"\n"
	"    },\n"
	"    \"ollama\": { \"api\": \"openai-completions\", \"baseUrl\": \"http://gpu-box:11434/v1\" },\n"
	"    \"mock\": { \"embedded\": true }\n"
	"  },\n"
	"  \"agents\": { \"defaults\": {\n"
	"    \"model\": \"openai/gpt-4o\",\n"
	"    \"fallbacks\": [\"anthropic/claude-sonnet\", \"ollama/qwen3:32b\", \"mock/mock-model\"],\n"
	"    \"timeoutSeconds\": 600,\n"
	"    \"maxConcurrent\": 3,\n"
	"    \"thinking\": \"medium\",\n"
	"    \"systemPrompt\": \"You are terse.\",\n"
	"    \"workspace\": \"/srv/work\",\n"
	"    \"bootstrapMaxChars\": 1000,\n"
	"    \"bootstrapTotalMaxChars\": 5000,\n"
	"    \"toolMode\": \"parallel\",\n"
	"    \"tools\": { \"allow\": [\"read\", \"write\", \"exec\"] },\n"
	"    \"compaction\": { \"enabled\": false, \"reserveTokens\": 30000, \"keepRecentTokens\": 10000,\n"
	"                    \"timeoutSeconds\": 120, \"model\": \"anthropic/claude-haiku\",\n"
	"                    \"maxActiveTranscriptBytes\": \"20mb\" },\n"
	"    \"runRetries\": { \"base\": 10, \"perProfile\": 2, \"min\": 12, \"max\": 40 },\n"
	"    \"idleBreaker\": 0,\n"
	"    \"loopDetection\": { \"enabled\": false },\n"
	"    \"sessionIdleSeconds\": 5\n"
	"  } },\n"
	"  \"auth\": { \"cooldowns\": { \"rateLimitedProfileRotations\": 2, \"overloadedProfileRotations\": 3,\n"
	"                             \"overloadedBackoffMs\": 250 } },\n"
	"  \"messages\": { \"queue\": { \"mode\": \"collect\", \"debounceMs\": 1000, \"cap\": 5, \"drop\": \"old\" } },\n"
	"  \"diagnostics\": { \"enabled\": false, \"stuckSessionWarnMs\": 60000, \"stuckSessionAbortMs\": 90000 },\n"
	"  \"store\": { \"path\": \"/var/lib/pincer/pincer.db\", \"windowMs\": 2, \"groupMax\": 64, \"lazyMs\": 50,\n"
	"             \"idempotencyHours\": 48 }\n"
	"}\n";

static void check_full(const pc_config_t *c, bool reparsed)
{
	cr_assert_eq(c->provider_count, 4);
	const pc_provider_config_t *o = pc_config_provider(c, "openai");
	cr_assert_not_null(o);
	cr_assert_eq(o->api, PC_API_OPENAI_COMPLETIONS);
	cr_assert_str_eq(o->base_url, "https://api.openai.com/v1");
	cr_assert_not(o->embedded);
	cr_assert_eq(o->cls, PC_PROVIDER_CLOUD);
	cr_assert_eq(o->idle_timeout_ms, 120000);
	cr_assert_eq(o->request_timeout_ms, 90000);
	cr_assert_eq(o->context_tokens, 128000);
	cr_assert_eq(o->profile_count, 2);
	cr_assert_str_eq(o->profiles[0].id, "p1");
	cr_assert_str_eq(o->profiles[1].id, "p2");
	if (!reparsed) {
		cr_assert_str_eq(o->profiles[0].api_key, "sk-secret-1");
		cr_assert_str_eq(o->profiles[1].api_key, "sk-from-env");
	} else {
		cr_assert_str_eq(o->profiles[0].api_key, "***");
	}
	cr_assert_eq(o->model_count, 2);
	const pc_model_config_t *m = pc_config_model(o, "gpt-4o");
	cr_assert_not_null(m);
	cr_assert_eq(m->context_tokens, 64000);
	cr_assert_eq(m->max_tokens, 4096);
	cr_assert_not(m->reasoning);
	m = pc_config_model(o, "o3");
	cr_assert_not_null(m);
	cr_assert(m->reasoning);
	cr_assert_null(pc_config_model(o, "gpt-5"));

	const pc_provider_config_t *a = pc_config_provider(c, "anthropic");
	cr_assert_not_null(a);
	cr_assert_eq(a->api, PC_API_ANTHROPIC_MESSAGES);
	cr_assert_eq(a->cls, PC_PROVIDER_SELF_HOSTED);
	cr_assert_eq(a->idle_timeout_ms, 45000);
	cr_assert_eq(a->profile_count, 1);
	cr_assert_str_eq(a->profiles[0].id, "default");
	cr_assert_str_eq(a->profiles[0].api_key, reparsed ? "***" : "sk-ant-secret");

	const pc_provider_config_t *ol = pc_config_provider(c, "ollama");
	cr_assert_eq(ol->cls, PC_PROVIDER_SELF_HOSTED);
	cr_assert_eq(ol->idle_timeout_ms, 300000);
	cr_assert_null(ol->profiles[0].api_key);
	const pc_provider_config_t *mk = pc_config_provider(c, "mock");
	cr_assert(mk->embedded);
	cr_assert_eq(mk->api, PC_API_OPENAI_COMPLETIONS);
	cr_assert_eq(mk->cls, PC_PROVIDER_LOCAL);
	cr_assert_eq(mk->idle_timeout_ms, 0);

	const pc_agent_defaults_t *d = &c->agent;
	cr_assert_str_eq(d->model.provider, "openai");
	cr_assert_str_eq(d->model.model, "gpt-4o");
	cr_assert_eq(d->fallback_count, 3);
	cr_assert_str_eq(d->fallbacks[0].provider, "anthropic");
	cr_assert_str_eq(d->fallbacks[0].model, "claude-sonnet");
	cr_assert_str_eq(d->fallbacks[1].provider, "ollama");
	cr_assert_str_eq(d->fallbacks[1].model, "qwen3:32b");
	cr_assert_str_eq(d->fallbacks[2].provider, "mock");
	cr_assert_eq(d->run_timeout_ms, 600000);
	cr_assert_eq(d->max_concurrent, 3);
	cr_assert_eq(d->think, PC_THINK_MEDIUM);
	cr_assert_str_eq(d->system_prompt, "You are terse.");
	cr_assert_str_eq(d->workspace, "/srv/work");
	cr_assert_eq(d->bootstrap_max_chars, 1000);
	cr_assert_eq(d->bootstrap_total_chars, 5000);
	cr_assert_eq(d->tool_mode, PC_TOOLS_PARALLEL);
	cr_assert_eq(d->tools_allow_count, 3);
	cr_assert_str_eq(d->tools_allow[0], "read");
	cr_assert_str_eq(d->tools_allow[2], "exec");
	cr_assert_not(d->compaction.enabled);
	cr_assert_eq(d->compaction.reserve_tokens, 30000);
	cr_assert_eq(d->compaction.keep_recent_tokens, 10000);
	cr_assert_eq(d->compaction.timeout_ms, 120000);
	cr_assert_str_eq(d->compaction.model.provider, "anthropic");
	cr_assert_str_eq(d->compaction.model.model, "claude-haiku");
	cr_assert_eq(d->compaction.max_transcript_bytes, (uint64_t)20 << 20);
	cr_assert(d->retries.has_base && d->retries.has_per_profile && d->retries.has_min && d->retries.has_max);
	cr_assert_eq(d->retries.base, 10);
	cr_assert_eq(d->retries.per_profile, 2);
	cr_assert_eq(d->retries.min, 12);
	cr_assert_eq(d->retries.max, 40);
	cr_assert_eq(d->idle_breaker_cap, 0);
	cr_assert_not(d->loop_guard);
	cr_assert_eq(d->session_idle_ms, 5000);
	cr_assert_eq(d->rate_limit_rotations, 2);
	cr_assert_eq(d->overload_rotations, 3);
	cr_assert_eq(d->overloaded_backoff_ms, 250);
	cr_assert_eq(d->queue.mode, PC_QUEUE_COLLECT);
	cr_assert_eq(d->queue.debounce_ms, 1000);
	cr_assert_eq(d->queue.cap, 5);
	cr_assert_eq(d->queue.drop, PC_QUEUE_DROP_OLD);
	cr_assert_not(c->diagnostics.enabled);
	cr_assert_eq(c->diagnostics.warn_ms, 60000);
	cr_assert_eq(c->diagnostics.abort_ms, 90000);
	cr_assert_str_eq(c->store_path, "/var/lib/pincer/pincer.db");
	cr_assert_eq(c->store_window_ms, 2);
	cr_assert_eq(c->store_group_max, 64);
	cr_assert_eq(c->store_lazy_ms, 50);
	cr_assert_eq(c->store_idem_hours, 48);
}

Test(config, a_full_file)
{
	setenv("PC_TEST_KEY_A", "sk-from-env", 1);
	pc_config_t *c = NULL;
	pc_config_errors_t e;
	int rc = parse(full_file, &c, &e);
	dump_errors(&e);
	cr_assert_eq(rc, 0);
	cr_assert_eq(e.count, 0);
	/* The key was copied: the environment may change after load. */
	setenv("PC_TEST_KEY_A", "changed", 1);
	check_full(c, false);
	pc_config_free(c);
	pc_config_errors_free(&e);
	ASSERT_NO_LEAKS();
}

Test(config, show_json_redacts_keys_and_parses_back)
{
	setenv("PC_TEST_KEY_A", "sk-from-env", 1);
	pc_config_t *c = NULL, *c2 = NULL;
	pc_config_errors_t e;
	char *j1 = NULL, *j2 = NULL;
	cr_assert_eq(parse(full_file, &c, &e), 0);
	cr_assert_eq(pc_config_to_json(c, &j1), 0);
	cr_assert_null(strstr(j1, "sk-secret-1"));
	cr_assert_null(strstr(j1, "sk-ant-secret"));
	cr_assert_null(strstr(j1, "sk-from-env"));
	cr_assert_not_null(strstr(j1, "\"***\""));

	/* Every default is filled in and the output is itself a valid file
	 * that reads back to the same values (keys now "***"). */
	cJSON *root = cJSON_Parse(j1);
	cr_assert_not_null(root);
	const cJSON *d = cJSON_GetObjectItem(cJSON_GetObjectItem(root, "agents"), "defaults");
	cr_assert_eq(cJSON_GetObjectItem(d, "maxConcurrent")->valuedouble, 3);
	cr_assert_str_eq(cJSON_GetObjectItem(d, "thinking")->valuestring, "medium");
	cJSON_Delete(root);

	pc_config_errors_t e2;
	int rc = parse(j1, &c2, &e2);
	dump_errors(&e2);
	cr_assert_eq(rc, 0, "%s", j1);
	check_full(c2, true);
	cr_assert_eq(pc_config_to_json(c2, &j2), 0);
	cr_assert_str_eq(j1, j2);

	free(j1);
	free(j2);
	pc_config_free(c);
	pc_config_free(c2);
	pc_config_errors_free(&e);
	pc_config_errors_free(&e2);
	ASSERT_NO_LEAKS();
}

Test(config, show_json_of_the_defaults)
{
	pc_config_t *c = NULL;
	char *j = NULL;
	cr_assert_eq(pc_config_default(&c), 0);
	cr_assert_eq(pc_config_to_json(c, &j), 0);
	cJSON *root = cJSON_Parse(j);
	cr_assert_not_null(root);
	const cJSON *mock = cJSON_GetObjectItem(cJSON_GetObjectItem(root, "providers"), "mock");
	cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(mock, "embedded")));
	cr_assert_str_eq(cJSON_GetObjectItem(mock, "class")->valuestring, "local");
	const cJSON *d = cJSON_GetObjectItem(cJSON_GetObjectItem(root, "agents"), "defaults");
	cr_assert_str_eq(cJSON_GetObjectItem(d, "model")->valuestring, "mock/mock-model");
	cr_assert_eq(cJSON_GetObjectItem(d, "timeoutSeconds")->valuedouble, 172800);
	const cJSON *q = cJSON_GetObjectItem(cJSON_GetObjectItem(root, "messages"), "queue");
	cr_assert_str_eq(cJSON_GetObjectItem(q, "mode")->valuestring, "steer");
	cr_assert_str_eq(cJSON_GetObjectItem(q, "drop")->valuestring, "summarize");
	cJSON_Delete(root);
	free(j);
	pc_config_free(c);
	ASSERT_NO_LEAKS();
}

/* ================= provider classes (§9.1) ================= */

Test(config, provider_class_rules)
{
	static const struct {
		const char *id, *url;
		pc_provider_class_t cls;
		uint64_t idle_ms;
	} rows[] = {
		{"openai", "https://api.openai.com/v1", PC_PROVIDER_CLOUD, 120000},
		{"openrouter", "https://openrouter.ai/api/v1", PC_PROVIDER_CLOUD, 120000},
		{"ollama", "http://gpu-box:11434/v1", PC_PROVIDER_SELF_HOSTED, 300000},
		{"ollama-remote", "http://gpu-box:11434", PC_PROVIDER_SELF_HOSTED, 300000},
		{"OLLAMA", "https://ollama.example.com", PC_PROVIDER_SELF_HOSTED, 300000},
		{"lmstudio", "http://studio.example.com:1234/v1", PC_PROVIDER_SELF_HOSTED, 300000},
		{"vllm", "https://vllm.example.com/v1", PC_PROVIDER_SELF_HOSTED, 300000},
		{"sglang-a", "https://sg.example.com", PC_PROVIDER_SELF_HOSTED, 300000},
		{"llama-cpp", "http://llama.example.com:8080", PC_PROVIDER_SELF_HOSTED, 300000},
		{"ollamax", "https://x.example.com", PC_PROVIDER_CLOUD, 120000},
		{"myollama", "https://x.example.com", PC_PROVIDER_CLOUD, 120000},
		{"custom", "http://host.docker.internal:11434/v1", PC_PROVIDER_SELF_HOSTED, 300000},
		{"custom", "http://host.orb.internal:1", PC_PROVIDER_SELF_HOSTED, 300000},
		{"custom", "http://localhost:8080/v1", PC_PROVIDER_LOCAL, 0},
		{"custom", "http://LOCALHOST", PC_PROVIDER_LOCAL, 0},
		{"custom", "http://user:pw@localhost:1/v1", PC_PROVIDER_LOCAL, 0},
		{"custom", "http://127.0.0.1:18790/v1", PC_PROVIDER_LOCAL, 0},
		{"custom", "http://127.9.8.7", PC_PROVIDER_LOCAL, 0},
		{"custom", "http://0.0.0.0:8000", PC_PROVIDER_LOCAL, 0},
		{"custom", "http://10.1.2.3/v1", PC_PROVIDER_LOCAL, 0},
		{"custom", "http://172.16.0.1", PC_PROVIDER_LOCAL, 0},
		{"custom", "http://172.31.255.255", PC_PROVIDER_LOCAL, 0},
		{"custom", "http://172.32.0.1", PC_PROVIDER_CLOUD, 120000},
		{"custom", "http://172.15.0.1", PC_PROVIDER_CLOUD, 120000},
		{"custom", "http://192.168.1.5:8000", PC_PROVIDER_LOCAL, 0},
		{"custom", "http://192.169.1.5", PC_PROVIDER_CLOUD, 120000},
		{"custom", "http://100.64.0.1", PC_PROVIDER_LOCAL, 0},
		{"custom", "http://100.127.255.255", PC_PROVIDER_LOCAL, 0},
		{"custom", "http://100.128.0.1", PC_PROVIDER_CLOUD, 120000},
		{"custom", "http://8.8.8.8", PC_PROVIDER_CLOUD, 120000},
		{"custom", "http://[::1]:8080/v1", PC_PROVIDER_LOCAL, 0},
		{"custom", "http://[fd12:3456::1]/v1", PC_PROVIDER_LOCAL, 0},
		{"custom", "http://[fc00::1]", PC_PROVIDER_LOCAL, 0},
		{"custom", "http://[fe80::1]", PC_PROVIDER_LOCAL, 0},
		{"custom", "http://[febf::1]", PC_PROVIDER_LOCAL, 0},
		{"custom", "http://[fec0::1]", PC_PROVIDER_CLOUD, 120000},
		{"custom", "http://[::ffff:192.168.0.1]", PC_PROVIDER_LOCAL, 0},
		{"custom", "http://[2001:db8::1]:443", PC_PROVIDER_CLOUD, 120000},
		{"custom", "http://printer.local:80/v1", PC_PROVIDER_LOCAL, 0},
		{"custom", "http://example.local.com", PC_PROVIDER_CLOUD, 120000},
		{"custom", "http://localhost.example.com", PC_PROVIDER_CLOUD, 120000},
		/* §9.1 resolves a genuinely local address before the self-hosted ids. */
		{"ollama", "http://127.0.0.1:11434/v1", PC_PROVIDER_LOCAL, 0},
	};
	for (size_t i = 0; i < N_OF(rows); i++) {
		char json[512];
		snprintf(json, sizeof(json),
			 "{\"providers\":{\"%s\":{\"api\":\"openai-completions\",\"baseUrl\":\"%s\"}},"
			 "\"agents\":{\"defaults\":{\"model\":\"%s/m\"}}}",
			 rows[i].id, rows[i].url, rows[i].id);
		pc_config_t *c = NULL;
		pc_config_errors_t e;
		int rc = parse(json, &c, &e);
		dump_errors(&e);
		cr_assert_eq(rc, 0, "%s", json);
		cr_assert_eq(c->providers[0].cls, rows[i].cls, "%s %s: class %d", rows[i].id, rows[i].url,
			     (int)c->providers[0].cls);
		cr_assert_eq(c->providers[0].idle_timeout_ms, rows[i].idle_ms, "%s %s", rows[i].id, rows[i].url);
		pc_config_free(c);
		pc_config_errors_free(&e);
	}
	ASSERT_NO_LEAKS();
}

Test(config, explicit_class_and_idle_timeout_win)
{
	static const struct {
		const char *extra;
		pc_provider_class_t cls;
		uint64_t idle_ms;
	} rows[] = {
		{",\"class\":\"cloud\"", PC_PROVIDER_CLOUD, 120000},
		{",\"class\":\"self-hosted\"", PC_PROVIDER_SELF_HOSTED, 300000},
		{",\"class\":\"local\",\"idleTimeoutSeconds\":30", PC_PROVIDER_LOCAL, 30000},
		{",\"idleTimeoutSeconds\":0", PC_PROVIDER_LOCAL, 0},
		{",\"class\":\"cloud\",\"idleTimeoutSeconds\":0", PC_PROVIDER_CLOUD, 0},
		{",\"idleTimeoutSeconds\":7", PC_PROVIDER_LOCAL, 7000},
	};
	for (size_t i = 0; i < N_OF(rows); i++) {
		char json[512];
		snprintf(json, sizeof(json),
			 "{\"providers\":{\"p\":{\"api\":\"openai-completions\",\"baseUrl\":\"http://127.0.0.1:1\"%s}},"
			 "\"agents\":{\"defaults\":{\"model\":\"p/m\"}}}",
			 rows[i].extra);
		pc_config_t *c = NULL;
		pc_config_errors_t e;
		cr_assert_eq(parse(json, &c, &e), 0, "%s", json);
		cr_assert_eq(c->providers[0].cls, rows[i].cls, "%s", json);
		cr_assert_eq(c->providers[0].idle_timeout_ms, rows[i].idle_ms, "%s", json);
		pc_config_free(c);
		pc_config_errors_free(&e);
	}
	ASSERT_NO_LEAKS();
}

/* ================= keys ================= */

Test(config, api_key_env)
{
	setenv("PC_TEST_KEY_A", "sk-a", 1);
	setenv("PC_TEST_KEY_EMPTY", "", 1);
	static const char json[] =
		"{\"providers\":{"
		"\"a\":{\"api\":\"openai-completions\",\"baseUrl\":\"https://a.example.com\",\"apiKeyEnv\":\"PC_TEST_KEY_A\"},"
		"\"b\":{\"api\":\"openai-completions\",\"baseUrl\":\"http://localhost:1\",\"apiKeyEnv\":\"PC_TEST_KEY_B\"},"
		"\"c\":{\"api\":\"openai-completions\",\"baseUrl\":\"http://localhost:2\",\"apiKeyEnv\":\"PC_TEST_KEY_EMPTY\"},"
		"\"d\":{\"api\":\"anthropic-messages\",\"baseUrl\":\"https://d.example.com\",\"profiles\":["
		"{\"id\":\"x\",\"apiKeyEnv\":\"PC_TEST_KEY_A\"},{\"id\":\"y\",\"apiKeyEnv\":\"PC_TEST_KEY_B\"},"
		"{\"id\":\"z\",\"apiKey\":\"\"}]}},"
		"\"agents\":{\"defaults\":{\"model\":\"a/m\"}}}";
	pc_config_t *c = NULL;
	pc_config_errors_t e;
	int rc = parse(json, &c, &e);
	dump_errors(&e);
	cr_assert_eq(rc, 0);
	cr_assert_str_eq(pc_config_provider(c, "a")->profiles[0].api_key, "sk-a");
	/* Unset or empty: no key, and no error (a local server may need none). */
	cr_assert_null(pc_config_provider(c, "b")->profiles[0].api_key);
	cr_assert_null(pc_config_provider(c, "c")->profiles[0].api_key);
	const pc_provider_config_t *d = pc_config_provider(c, "d");
	cr_assert_eq(d->profile_count, 3);
	cr_assert_str_eq(d->profiles[0].api_key, "sk-a");
	cr_assert_null(d->profiles[1].api_key);
	cr_assert_str_eq(d->profiles[2].api_key, "");
	pc_config_free(c);
	pc_config_errors_free(&e);
	ASSERT_NO_LEAKS();
}

/* ================= environment overrides ================= */

#define TWO_PROVIDERS                                                                                      \
	"{\"providers\":{" P_OK ",\"q\":{\"api\":\"anthropic-messages\",\"baseUrl\":\"https://q.example.com\"}}," \
	"\"agents\":{\"defaults\":{\"model\":\"p/m\",\"maxConcurrent\":3,\"timeoutSeconds\":60,"                  \
	"\"workspace\":\"/file/ws\"}}}"

Test(config, environment_overrides_win_over_the_file)
{
	setenv("PINCER_MODEL", "q/claude/with/slashes", 1);
	setenv("PINCER_MAX_CONCURRENT", "12", 1);
	setenv("PINCER_TIMEOUT_SECONDS", "0", 1);
	setenv("PINCER_WORKSPACE", "/env/ws", 1);
	pc_config_t *c = NULL;
	pc_config_errors_t e;
	int rc = parse(TWO_PROVIDERS, &c, &e);
	dump_errors(&e);
	cr_assert_eq(rc, 0);
	unsetenv("PINCER_WORKSPACE"); /* copied at load */
	cr_assert_str_eq(c->agent.model.provider, "q");
	cr_assert_str_eq(c->agent.model.model, "claude/with/slashes");
	cr_assert_eq(c->agent.max_concurrent, 12);
	cr_assert_eq(c->agent.run_timeout_ms, 0);
	cr_assert_str_eq(c->agent.workspace, "/env/ws");
	pc_config_free(c);
	pc_config_errors_free(&e);

	/* Empty counts as unset. */
	setenv("PINCER_MODEL", "", 1);
	setenv("PINCER_MAX_CONCURRENT", "", 1);
	setenv("PINCER_TIMEOUT_SECONDS", "", 1);
	cr_assert_eq(parse(TWO_PROVIDERS, &c, &e), 0);
	cr_assert_str_eq(c->agent.model.provider, "p");
	cr_assert_eq(c->agent.max_concurrent, 3);
	cr_assert_eq(c->agent.run_timeout_ms, 60000);
	cr_assert_str_eq(c->agent.workspace, "/file/ws");
	pc_config_free(c);
	pc_config_errors_free(&e);

	/* And pc_config_default applies them too. */
	setenv("PINCER_MAX_CONCURRENT", "2", 1);
	cr_assert_eq(pc_config_default(&c), 0);
	cr_assert_eq(c->agent.max_concurrent, 2);
	pc_config_free(c);
	ASSERT_NO_LEAKS();
}

Test(config, bad_environment_values_are_errors)
{
	static const struct {
		const char *var, *value, *want;
	} rows[] = {
		{"PINCER_MAX_CONCURRENT", "0", "env.PINCER_MAX_CONCURRENT: must be an integer from 1 to 1000000"},
		{"PINCER_MAX_CONCURRENT", "1000001", "env.PINCER_MAX_CONCURRENT: must be an integer from 1 to 1000000"},
		{"PINCER_MAX_CONCURRENT", "eight", "env.PINCER_MAX_CONCURRENT: must be an integer from 1 to 1000000"},
		{"PINCER_MAX_CONCURRENT", "8 ", "env.PINCER_MAX_CONCURRENT: must be an integer from 1 to 1000000"},
		{"PINCER_TIMEOUT_SECONDS", "-3", "env.PINCER_TIMEOUT_SECONDS: must be a non-negative integer (0 = unlimited)"},
		{"PINCER_TIMEOUT_SECONDS", "1.5", "env.PINCER_TIMEOUT_SECONDS: must be a non-negative integer (0 = unlimited)"},
		{"PINCER_MODEL", "nosuch/x", "env.PINCER_MODEL: unknown provider \"nosuch\""},
		{"PINCER_MODEL", "p", "env.PINCER_MODEL: must be \"provider/model\""},
		{"PINCER_MODEL", "p/", "env.PINCER_MODEL: must be \"provider/model\""},
	};
	for (size_t i = 0; i < N_OF(rows); i++) {
		setenv(rows[i].var, rows[i].value, 1);
		const char *want[] = {rows[i].want};
		expect_errors(TWO_PROVIDERS, want, 1);
		unsetenv(rows[i].var);
	}
	ASSERT_NO_LEAKS();
}

/* ================= validation ================= */

Test(config, invalid_files_name_the_offending_path)
{
	static const struct {
		const char *json;
		const char *want[3];
	} rows[] = {
		{"{\"providers\":{\"openai\":{\"api\":\"openai-completions\",\"bseUrl\":\"https://x.example.com\"}},"
		 "\"agents\":{\"defaults\":{\"model\":\"openai/gpt\"}}}",
		 {"providers.openai.bseUrl: unknown key", "providers.openai.baseUrl: required unless embedded is true"}},
		{"{\"provider\":{}}", {"provider: unknown key"}},
		{"{\"store\":{\"path\":\"a\"},\"store\":{\"path\":\"b\"}}", {"store: duplicate key"}},
		{"{\"store\":{\"groupMax\":0,\"lazyMs\":0,\"windowMs\":1001}}",
		 {"store.windowMs: must be at most 1000", "store.groupMax: must be at least 1",
		  "store.lazyMs: must be at least 1"}},
		{"{\"store\":{\"idempotencyHours\":1}}", {"store.idempotencyHours: must be at least 24"}},
		{"[1,2]", {"test.json: must be a JSON object"}},
		{"\"text\"", {"test.json: must be a JSON object"}},
		{"{\"providers\":[]}", {"providers: must be an object"}},
		{"{\"agents\":{\"list\":[]}}", {"agents.list: unknown key"}},
		{"{\"agents\":{\"defaults\":[]}}", {"agents.defaults: must be an object"}},
		{"{\"agents\":{\"defaults\":{\"compaction\":{\"memoryFlush\":{}}}}}",
		 {"agents.defaults.compaction.memoryFlush: unknown key"}},
		{"{\"messages\":{\"queue\":{\"byChannel\":{}}}}", {"messages.queue.byChannel: unknown key"}},
		{"{\"agents\":{\"defaults\":{\"maxConcurrent\":\"8\"}}}",
		 {"agents.defaults.maxConcurrent: must be an integer"}},
		{"{\"agents\":{\"defaults\":{\"maxConcurrent\":0}}}", {"agents.defaults.maxConcurrent: must be at least 1"}},
		{"{\"agents\":{\"defaults\":{\"maxConcurrent\":1000001}}}",
		 {"agents.defaults.maxConcurrent: must be at most 1000000"}},
		{"{\"agents\":{\"defaults\":{\"maxConcurrent\":2.5}}}", {"agents.defaults.maxConcurrent: must be an integer"}},
		{"{\"agents\":{\"defaults\":{\"timeoutSeconds\":-5}}}", {"agents.defaults.timeoutSeconds: must not be negative"}},
		{"{\"agents\":{\"defaults\":{\"timeoutSeconds\":null}}}", {"agents.defaults.timeoutSeconds: must be an integer"}},
		{"{\"agents\":{\"defaults\":{\"systemPrompt\":42}}}", {"agents.defaults.systemPrompt: must be a string"}},
		{"{\"agents\":{\"defaults\":{\"workspace\":\"\"}}}", {"agents.defaults.workspace: must not be empty"}},
		{"{\"agents\":{\"defaults\":{\"thinking\":\"loud\"}}}",
		 {"agents.defaults.thinking: must be one of off, minimal, low, medium, high, xhigh, adaptive, max"}},
		{"{\"agents\":{\"defaults\":{\"toolMode\":\"batch\"}}}",
		 {"agents.defaults.toolMode: must be one of sequential, parallel"}},
		{"{\"agents\":{\"defaults\":{\"tools\":{\"allow\":[\"read\",\"\",3]}}}}",
		 {"agents.defaults.tools.allow[1]: must be a non-empty string",
		  "agents.defaults.tools.allow[2]: must be a non-empty string"}},
		{"{\"agents\":{\"defaults\":{\"loopDetection\":{\"enabled\":\"no\"}}}}",
		 {"agents.defaults.loopDetection.enabled: must be true or false"}},
		{"{\"agents\":{\"defaults\":{\"loopDetection\":{\"warningThreshold\":0,\"detectors\":{\"x\":1}}}}}",
		 {"agents.defaults.loopDetection.warningThreshold: must be at least 1",
		  "agents.defaults.loopDetection.detectors.x: unknown key"}},
		{"{\"agents\":{\"defaults\":{\"tools\":{\"exec\":{\"mode\":\"some\"}}}}}",
		 {"agents.defaults.tools.exec.mode: must be one of full, allowlist, off"}},
		{"{\"agents\":{\"defaults\":{\"tools\":{\"exec\":{\"cgroup\":\"on\"}}}}}",
		 {"agents.defaults.tools.exec.cgroup: must be one of auto, off"}},
		{"{\"agents\":{\"defaults\":{\"tools\":{\"exec\":{\"mode\":\"allowlist\"}}}}}",
		 {"agents.defaults.tools.exec.allow: required (non-empty) when mode is allowlist"}},
		{"{\"agents\":{\"defaults\":{\"tools\":{\"exec\":{\"timeoutSeconds\":0,\"env\":[1]}}}}}",
		 {"agents.defaults.tools.exec.timeoutSeconds: must be at least 1",
		  "agents.defaults.tools.exec.env[0]: must be a non-empty string"}},
		{"{\"plugins\":{\"entries\":{\"a b\":{\"path\":\"x.so\"}}}}",
		 {"plugins.entries.a b: a plugin id is letters, digits, '_', '-' and '.'"}},
		{"{\"plugins\":{\"entries\":{\"p\":{\"enabled\":true}}}}", {"plugins.entries.p.path: required"}},
		{"{\"plugins\":{\"entries\":{\"p\":{\"path\":\"x.so\",\"config\":[]}}}}",
		 {"plugins.entries.p.config: must be an object"}},
		{"{\"plugins\":{\"load\":{}}}", {"plugins.load: unknown key"}},
		{"{\"gateway\":{\"bind\":\"0.0.0.0\"}}",
		 {"gateway.bind: binding beyond loopback requires auth (a token or a password)"}},
		{"{\"gateway\":{\"auth\":{\"mode\":\"token\"}}}",
		 {"gateway.auth.token: required when auth.mode is token (or set PINCER_GATEWAY_TOKEN)"}},
		{"{\"gateway\":{\"port\":70000,\"auth\":{\"mode\":\"key\"}}}",
		 {"gateway.port: must be at most 65535", "gateway.auth.mode: must be one of none, token, password"}},
		{"{\"agents\":{\"defaults\":{\"model\":\"gpt4\"}}}", {"agents.defaults.model: must be \"provider/model\""}},
		{"{\"agents\":{\"defaults\":{\"model\":\"/gpt4\"}}}", {"agents.defaults.model: must be \"provider/model\""}},
		{WITH_P("", ",\"fallbacks\":[\"p/a\",\"x/b\"]"), {"agents.defaults.fallbacks[1]: unknown provider \"x\""}},
		{WITH_P("", ",\"fallbacks\":\"p/a\""), {"agents.defaults.fallbacks: must be an array of strings"}},
		{WITH_P("", ",\"fallbacks\":[\"p/1\",\"p/2\",\"p/3\",\"p/4\",\"p/5\",\"p/6\",\"p/7\",\"p/8\",\"p/9\","
			    "\"p/10\",\"p/11\",\"p/12\",\"p/13\",\"p/14\",\"p/15\",\"p/16\"]"),
		 {"agents.defaults.fallbacks: at most 15 entries"}},
		{WITH_P("", ",\"compaction\":{\"model\":\"z/m\"}"), {"agents.defaults.compaction.model: unknown provider \"z\""}},
		{WITH_P("", ",\"compaction\":{\"maxActiveTranscriptBytes\":\"20 parsecs\"}"),
		 {"agents.defaults.compaction.maxActiveTranscriptBytes: must be a byte count or a size like \"20mb\""}},
		{WITH_P("", ",\"compaction\":{\"maxActiveTranscriptBytes\":true}"),
		 {"agents.defaults.compaction.maxActiveTranscriptBytes: must be a byte count or a size like \"20mb\""}},
		{WITH_P("", ",\"runRetries\":{\"min\":50,\"max\":40}"), {"agents.defaults.runRetries.max: must not be below min (50)"}},
		{WITH_P("", ",\"runRetries\":{\"base\":0}"), {"agents.defaults.runRetries.base: must be at least 1"}},
		{WITH_P(",\"q\":{\"api\":\"openai-completions\",\"baseUrl\":\"ftp://q.example.com\"}", ""),
		 {"providers.q.baseUrl: must start with http:// or https://"}},
		{WITH_P(",\"q\":{\"api\":\"openai-completions\",\"baseUrl\":\"http://\"}", ""), {"providers.q.baseUrl: has no host"}},
		{WITH_P(",\"bad id\":{\"api\":\"openai-completions\",\"baseUrl\":\"http://x.example.com\"}", ""),
		 {"providers.bad id: invalid provider id (use letters, digits, '.', '_' and '-')"}},
		{WITH_P(",\"q\":{\"api\":\"openai-responses\",\"baseUrl\":\"http://x.example.com\"}", ""),
		 {"providers.q.api: must be one of openai-completions, anthropic-messages"}},
		{WITH_P(",\"q\":{\"baseUrl\":\"http://x.example.com\"}", ""),
		 {"providers.q.api: required (openai-completions or anthropic-messages)"}},
		{WITH_P(",\"q\":{\"embedded\":true,\"baseUrl\":\"http://127.0.0.1:1\"}", ""),
		 {"providers.q.baseUrl: not allowed on an embedded provider (its address is set at start)"}},
		{WITH_P(",\"q\":{\"embedded\":\"yes\"}", ""),
		 {"providers.q.embedded: must be true or false",
		  "providers.q.api: required (openai-completions or anthropic-messages)",
		  "providers.q.baseUrl: required unless embedded is true"}},
		{WITH_P(",\"q\":\"http://x\"", ""), {"providers.q: must be an object"}},
		{WITH_P(",\"q\":{\"embedded\":true,\"class\":\"edge\"}", ""),
		 {"providers.q.class: must be one of cloud, self-hosted, local"}},
		{WITH_P(",\"q\":{\"embedded\":true,\"contextTokens\":8000}", ""),
		 {"providers.q.contextTokens: below the minimum of 16000 tokens (spec §1.2)"}},
		{WITH_P(",\"q\":{\"embedded\":true,\"models\":[{\"id\":\"m\",\"contextTokens\":0}]}", ""),
		 {"providers.q.models[0].contextTokens: below the minimum of 16000 tokens (spec §1.2)"}},
		{WITH_P(",\"q\":{\"embedded\":true,\"models\":[{\"id\":\"m\"},{\"id\":\"n\"},{\"id\":\"m\"}]}", ""),
		 {"providers.q.models[2].id: duplicate model id \"m\""}},
		{WITH_P(",\"q\":{\"embedded\":true,\"models\":[{\"contextTokens\":32000},{\"id\":\"n\",\"reasoning\":1}]}", ""),
		 {"providers.q.models[0].id: required", "providers.q.models[1].reasoning: must be true or false"}},
		{WITH_P(",\"q\":{\"embedded\":true,\"models\":[{\"id\":\"n\",\"maxTokens\":-1}]}", ""),
		 {"providers.q.models[0].maxTokens: must not be negative"}},
		{WITH_P(",\"q\":{\"embedded\":true,\"models\":{}}", ""), {"providers.q.models: must be an array of objects"}},
		{WITH_P(",\"q\":{\"embedded\":true,\"profiles\":[{\"id\":\"a\"},{\"id\":\"a\",\"token\":\"t\"}]}", ""),
		 {"providers.q.profiles[1].id: duplicate profile id \"a\"", "providers.q.profiles[1].token: unknown key"}},
		{WITH_P(",\"q\":{\"embedded\":true,\"profiles\":[]}", ""), {"providers.q.profiles: must list at least one profile"}},
		{WITH_P(",\"q\":{\"embedded\":true,\"profiles\":[{\"id\":\"a\"}],\"apiKey\":\"k\"}", ""),
		 {"providers.q.apiKey: not allowed together with profiles"}},
		{WITH_P(",\"q\":{\"embedded\":true,\"apiKey\":\"k\",\"apiKeyEnv\":\"K\"}", ""),
		 {"providers.q.apiKeyEnv: not allowed together with apiKey"}},
		{WITH_P(",\"q\":{\"embedded\":true,\"profiles\":[{\"id\":\"a\",\"apiKey\":\"k\",\"apiKeyEnv\":\"K\"}]}", ""),
		 {"providers.q.profiles[0].apiKeyEnv: not allowed together with apiKey"}},
		{WITH_P(",\"q\":{\"embedded\":true,\"timeoutSeconds\":1.25}", ""), {"providers.q.timeoutSeconds: must be an integer"}},
		{WITH_P(",\"q\":{\"embedded\":true,\"idleTimeoutSeconds\":-1}", ""),
		 {"providers.q.idleTimeoutSeconds: must not be negative"}},
		{"{\"providers\":{" P_OK "}}", {"agents.defaults.model: required (no provider lists a model to default to)"}},
		{"{\"auth\":{\"cooldowns\":{\"overloadedBackoffMs\":-1,\"rateLimitedProfileRotations\":\"1\"}}}",
		 {"auth.cooldowns.overloadedBackoffMs: must not be negative",
		  "auth.cooldowns.rateLimitedProfileRotations: must be an integer"}},
		{"{\"messages\":{\"queue\":{\"mode\":\"shout\",\"cap\":0,\"drop\":\"middle\"}}}",
		 {"messages.queue.mode: must be one of steer, followup, collect, interrupt, steer-backlog",
		  "messages.queue.cap: must be at least 1", "messages.queue.drop: must be one of old, new, summarize"}},
		{"{\"diagnostics\":{\"stuckSessionWarnMs\":10}}", {"diagnostics.stuckSessionWarnMs: must be at least 1000"}},
		{"{\"diagnostics\":{\"stuckSessionWarnMs\":60000,\"stuckSessionAbortMs\":30000}}",
		 {"diagnostics.stuckSessionAbortMs: must not be below stuckSessionWarnMs (60000)"}},
		{"{\"store\":{\"path\":\"\"}}", {"store.path: must not be empty"}},
		{"{\"store\":{\"file\":\"x.db\"}}", {"store.file: unknown key"}},
		{"{\"store\":{\"url\":\"mysql://db/x\"}}", {"store.url: must be a postgresql:// URI"}},
		{"{\"store\":{\"url\":\"postgresql://db/x\",\"statementTimeoutMs\":5}}",
		 {"store.statementTimeoutMs: must be at least 100"}},
		{"{\"cluster\":{\"secret\":\"0123456789abcdef\"}}",
		 {"cluster: needs store.url (PostgreSQL): the nodes share one database"}},
		{"{\"store\":{\"url\":\"postgresql://db/x\"},\"cluster\":{}}",
		 {"cluster.secret: required (or set PINCER_CLUSTER_SECRET): the nodes authenticate with it"}},
		{"{\"store\":{\"url\":\"postgresql://db/x\"},\"cluster\":{\"secret\":\"short\",\"leaseMs\":10,"
		 "\"advertiseUrl\":\"ftp://x\"}}",
		 {"cluster.advertiseUrl: must be an http:// URL (node-to-node TLS is not built: a private network)",
		  "cluster.leaseMs: must be at least 1000",
		  "cluster.secret: at least 16 bytes"}},
	};
	for (size_t i = 0; i < N_OF(rows); i++) {
		size_t n = 0;
		while (n < 3 && rows[i].want[n])
			n++;
		expect_errors(rows[i].json, rows[i].want, n);
	}
	ASSERT_NO_LEAKS();
}

Test(config, every_error_is_reported_at_once)
{
	static const char json[] =
		"{\"providers\":{\"p\":{\"api\":\"openai-completions\",\"baseUrl\":\"https://x.example.com\","
		"\"timeoutSeconds\":-1}},"
		"\"agents\":{\"defaults\":{\"model\":\"p/m\",\"thinking\":\"loud\"}},"
		"\"messages\":{\"queue\":{\"cap\":0}}}";
	static const char *const want[] = {
		"providers.p.timeoutSeconds: must not be negative",
		"agents.defaults.thinking: must be one of off, minimal, low, medium, high, xhigh, adaptive, max",
		"messages.queue.cap: must be at least 1",
	};
	expect_errors(json, want, 3);
	ASSERT_NO_LEAKS();
}

Test(config, valid_edge_values)
{
	static const char json[] =
		"{\"providers\":{\"a.b_c-D9\":{\"api\":\"openai-completions\",\"baseUrl\":\"HTTPS://Example.COM:8443/v1\","
		"\"contextTokens\":16000,\"models\":[]}},"
		"\"agents\":{\"defaults\":{\"model\":\"a.b_c-D9/x\",\"maxConcurrent\":4096,\"thinking\":\"X-High\","
		"\"timeoutSeconds\":0,\"fallbacks\":[],"
		"\"compaction\":{\"maxActiveTranscriptBytes\":1048576,\"reserveTokens\":0,\"timeoutSeconds\":0},"
		"\"tools\":{\"allow\":[]}}},"
		"\"messages\":{\"queue\":{\"mode\":\"steer+backlog\",\"drop\":\"newest\",\"debounceMs\":0}}}";
	pc_config_t *c = NULL;
	pc_config_errors_t e;
	int rc = parse(json, &c, &e);
	dump_errors(&e);
	cr_assert_eq(rc, 0);
	cr_assert_eq(c->providers[0].context_tokens, 16000);
	cr_assert_eq(c->providers[0].cls, PC_PROVIDER_CLOUD);
	cr_assert_eq(c->agent.max_concurrent, 4096);
	cr_assert_eq(c->agent.think, PC_THINK_XHIGH);
	cr_assert_eq(c->agent.run_timeout_ms, 0);
	cr_assert_eq(c->agent.compaction.max_transcript_bytes, 1048576);
	cr_assert_eq(c->agent.compaction.reserve_tokens, 20000); /* 0: the floor */
	cr_assert_eq(c->agent.compaction.timeout_ms, 900000);   /* 0: 900 s */
	cr_assert_not_null(c->agent.tools_allow); /* an empty allow list allows nothing */
	cr_assert_eq(c->agent.tools_allow_count, 0);
	cr_assert_eq(c->agent.queue.mode, PC_QUEUE_STEER_BACKLOG);
	cr_assert_eq(c->agent.queue.drop, PC_QUEUE_DROP_NEW);
	cr_assert_eq(c->agent.queue.debounce_ms, 0);
	pc_config_free(c);
	pc_config_errors_free(&e);

	static const struct {
		const char *text;
		uint64_t bytes;
	} sizes[] = {{"\"512\"", 512},        {"\"512b\"", 512},       {"\"4k\"", 4096},
		     {"\"4 KB\"", 4096},      {"\"20mb\"", 20u << 20}, {"\"1G\"", (uint64_t)1 << 30},
		     {"\"0\"", 0}};
	for (size_t i = 0; i < N_OF(sizes); i++) {
		char j[256];
		snprintf(j, sizeof(j), "{\"agents\":{\"defaults\":{\"compaction\":{\"maxActiveTranscriptBytes\":%s}}}}",
			 sizes[i].text);
		cr_assert_eq(parse(j, &c, &e), 0, "%s", j);
		cr_assert_eq(c->agent.compaction.max_transcript_bytes, sizes[i].bytes, "%s", j);
		pc_config_free(c);
		pc_config_errors_free(&e);
	}
	ASSERT_NO_LEAKS();
}

Test(config, the_first_listed_model_is_the_default)
{
	static const char json[] =
		"{\"providers\":{" P_OK ",\"q\":{\"embedded\":true,\"models\":[{\"id\":\"first\"},{\"id\":\"second\"}]}}}";
	pc_config_t *c = NULL;
	pc_config_errors_t e;
	cr_assert_eq(parse(json, &c, &e), 0);
	cr_assert_str_eq(c->agent.model.provider, "q");
	cr_assert_str_eq(c->agent.model.model, "first");
	pc_config_free(c);
	pc_config_errors_free(&e);
	ASSERT_NO_LEAKS();
}

Test(config, malformed_json_names_line_and_column)
{
	static const struct {
		const char *json;
		const char *want;
	} rows[] = {
		{"{\n  \"providers\": {\n    \"p\": ,\n  }\n}\n", "test.json: invalid JSON near line 3 column 10"},
		{"{\"a\": tru}", "test.json: invalid JSON near line 1 column 7"},
		{"{\n\"a\": 1\n} trailing", "test.json: invalid JSON near line 3 column 3"},
		{"{", "test.json: invalid JSON near line 1 column 2"},
	};
	for (size_t i = 0; i < N_OF(rows); i++) {
		const char *want[] = {rows[i].want};
		expect_errors(rows[i].json, want, 1);
	}
	/* Text that stops at a NUL byte inside the given length. */
	pc_config_t *c = NULL;
	pc_config_errors_t e;
	cr_assert_eq(pc_config_parse("{}\0{}", 5, NULL, &c, &e), PC_EINVAL);
	cr_assert_eq(e.count, 1);
	cr_assert_str_eq(e.items[0], "(config): invalid JSON: contains a NUL byte");
	pc_config_errors_free(&e);
	/* Text without a terminating NUL is fine. */
	cr_assert_eq(pc_config_parse("{}xxxx", 2, NULL, &c, &e), 0);
	pc_config_free(c);
	pc_config_errors_free(&e);
	ASSERT_NO_LEAKS();
}

/* ================= lookups ================= */

Test(config, model_ref_parse)
{
	pc_model_ref_t r;
	char *buf = NULL;
	cr_assert_eq(pc_config_model_ref_parse("openrouter/anthropic/claude", &r, &buf), 0);
	cr_assert_str_eq(r.provider, "openrouter");
	cr_assert_str_eq(r.model, "anthropic/claude");
	free(buf);
	static const char *const bad[] = {"", "gpt-4o", "/m", "p/"};
	for (size_t i = 0; i < N_OF(bad); i++) {
		buf = NULL;
		cr_assert_eq(pc_config_model_ref_parse(bad[i], &r, &buf), PC_EINVAL, "\"%s\"", bad[i]);
		cr_assert_null(buf);
	}
	cr_assert_eq(pc_config_model_ref_parse(NULL, &r, &buf), PC_EINVAL);
	ASSERT_NO_LEAKS();
}

Test(config, context_tokens_resolution)
{
	static const char json[] =
		"{\"providers\":{"
		"\"capped\":{\"embedded\":true,\"contextTokens\":100000,"
		"\"models\":[{\"id\":\"small\",\"contextTokens\":50000},{\"id\":\"big\",\"contextTokens\":1000000}]},"
		"\"free\":{\"embedded\":true,\"models\":[{\"id\":\"big\",\"contextTokens\":1000000},{\"id\":\"plain\"}]}},"
		"\"agents\":{\"defaults\":{\"model\":\"free/big\"}}}";
	pc_config_t *c = NULL;
	pc_config_errors_t e;
	cr_assert_eq(parse(json, &c, &e), 0);
	static const struct {
		const char *p, *m;
		uint64_t want;
	} rows[] = {
		{"capped", "small", 50000},  {"capped", "big", 100000},    {"capped", "other", 100000},
		{"free", "big", 1000000},    {"free", "plain", 200000},    {"free", "other", 200000},
		{"nosuch", "x", 200000},
	};
	for (size_t i = 0; i < N_OF(rows); i++) {
		pc_model_ref_t r = {rows[i].p, rows[i].m};
		cr_assert_eq(pc_config_context_tokens(c, &r), rows[i].want, "%s/%s", rows[i].p, rows[i].m);
	}
	cr_assert_eq(pc_config_context_tokens(c, NULL), PC_CONFIG_DEFAULT_CONTEXT_TOKENS);
	cr_assert_null(pc_config_provider(c, "nosuch"));
	pc_config_free(c);
	pc_config_errors_free(&e);
	ASSERT_NO_LEAKS();
}

/* ================= loading ================= */

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	cr_assert_not_null(f, "%s", path);
	cr_assert_eq(fputs(text, f) >= 0, true);
	cr_assert_eq(fclose(f), 0);
}

static const char *load_model(const char *path, int *rc)
{
	static char model[64];
	pc_config_t *c = NULL;
	pc_config_errors_t e;
	*rc = pc_config_load(path, &c, &e);
	model[0] = 0;
	if (*rc == 0)
		snprintf(model, sizeof(model), "%s", c->agent.model.model);
	else
		dump_errors(&e);
	pc_config_free(c);
	pc_config_errors_free(&e);
	return model;
}

Test(config, load_a_missing_explicit_path)
{
	pc_config_t *c = (pc_config_t *)1;
	pc_config_errors_t e;
	cr_assert_eq(pc_config_load("/nonexistent/dir/pincer.json", &c, &e), PC_ENOTFOUND);
	cr_assert_null(c);
	cr_assert_eq(e.count, 1);
	cr_assert_str_eq(e.items[0], "/nonexistent/dir/pincer.json: no such file");
	pc_config_errors_free(&e);
	cr_assert_eq(pc_config_load("/nonexistent/dir/pincer.json", &c, NULL), PC_ENOTFOUND);
	ASSERT_NO_LEAKS();
}

Test(config, load_reports_errors_with_the_file_name)
{
	char dir[] = "/tmp/pc-config-XXXXXX";
	char path[PATH_MAX];
	cr_assert_not_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/bad.json", dir);
	write_file(path, "{\n  \"agents\": {\n    \"defaults\": { \"model\": \"mock/m\" \n  }\n");
	pc_config_t *c = NULL;
	pc_config_errors_t e;
	cr_assert_eq(pc_config_load(path, &c, &e), PC_EINVAL);
	cr_assert_eq(e.count, 1);
	char want[PATH_MAX + 64];
	snprintf(want, sizeof(want), "%s: invalid JSON near line 5 column 1", path);
	cr_assert_str_eq(e.items[0], want);
	pc_config_errors_free(&e);

	write_file(path, "{\"agents\":{\"defaults\":{\"model\":\"mock/m\"}}}");
	cr_assert_eq(pc_config_load(path, &c, &e), 0);
	cr_assert_str_eq(c->source, path);
	pc_config_free(c);
	pc_config_errors_free(&e);
	cr_assert_eq(unlink(path), 0);
	cr_assert_eq(rmdir(dir), 0);
	ASSERT_NO_LEAKS();
}

Test(config, load_search_order)
{
	char dir[] = "/tmp/pc-config-XXXXXX";
	char home[256], home_file[PATH_MAX], env_file[PATH_MAX], arg_file[PATH_MAX], missing[PATH_MAX];
	int rc;
	cr_assert_not_null(mkdtemp(dir));
	cr_assert_eq(chdir(dir), 0);
	snprintf(home, sizeof(home), "%s/home", dir);
	snprintf(home_file, sizeof(home_file), "%s/pincer.json", home);
	snprintf(env_file, sizeof(env_file), "%s/env.json", dir);
	snprintf(arg_file, sizeof(arg_file), "%s/arg.json", dir);
	snprintf(missing, sizeof(missing), "%s/missing.json", dir);

	/* Nothing anywhere: the defaults, from no file. */
	pc_config_t *c = NULL;
	pc_config_errors_t e;
	cr_assert_eq(pc_config_load(NULL, &c, &e), 0);
	cr_assert_null(c->source);
	check_mock_only(c);
	pc_config_free(c);
	pc_config_errors_free(&e);

	/* PINCER_HOME unset: ./.pincer. */
	cr_assert_eq(mkdir(".pincer", 0700), 0);
	write_file(".pincer/pincer.json", "{\"agents\":{\"defaults\":{\"model\":\"mock/dot-home\"}}}");
	cr_assert_str_eq(load_model(NULL, &rc), "dot-home");
	cr_assert_eq(rc, 0);

	/* $PINCER_HOME/pincer.json. */
	cr_assert_eq(mkdir(home, 0700), 0);
	write_file(home_file, "{\"agents\":{\"defaults\":{\"model\":\"mock/home\"}}}");
	setenv("PINCER_HOME", home, 1);
	cr_assert_str_eq(load_model(NULL, &rc), "home");

	/* ./pincer.json wins over the home. */
	write_file("pincer.json", "{\"agents\":{\"defaults\":{\"model\":\"mock/cwd\"}}}");
	cr_assert_str_eq(load_model(NULL, &rc), "cwd");
	cr_assert_eq(pc_config_load(NULL, &c, &e), 0);
	cr_assert_str_eq(c->source, "pincer.json");
	pc_config_free(c);
	pc_config_errors_free(&e);

	/* $PINCER_CONFIG wins over ./pincer.json ... */
	write_file(env_file, "{\"agents\":{\"defaults\":{\"model\":\"mock/env\"}}}");
	setenv("PINCER_CONFIG", env_file, 1);
	cr_assert_str_eq(load_model(NULL, &rc), "env");

	/* ... and an explicit path wins over $PINCER_CONFIG. */
	write_file(arg_file, "{\"agents\":{\"defaults\":{\"model\":\"mock/arg\"}}}");
	cr_assert_str_eq(load_model(arg_file, &rc), "arg");

	/* $PINCER_CONFIG naming a missing file is an error, not a fallback. */
	setenv("PINCER_CONFIG", missing, 1);
	load_model(NULL, &rc);
	cr_assert_eq(rc, PC_ENOTFOUND);
	setenv("PINCER_CONFIG", "", 1);
	cr_assert_str_eq(load_model(NULL, &rc), "cwd");

	/* A broken file found by the search is reported, not skipped. */
	write_file("pincer.json", "{\"agents\":{\"defaults\":{\"modle\":\"mock/x\"}}}");
	load_model(NULL, &rc);
	cr_assert_eq(rc, PC_EINVAL);

	cr_assert_eq(unlink("pincer.json"), 0);
	cr_assert_eq(unlink(".pincer/pincer.json"), 0);
	cr_assert_eq(rmdir(".pincer"), 0);
	cr_assert_eq(unlink(home_file), 0);
	cr_assert_eq(rmdir(home), 0);
	cr_assert_eq(unlink(env_file), 0);
	cr_assert_eq(unlink(arg_file), 0);
	cr_assert_eq(chdir(saved_cwd), 0);
	cr_assert_eq(rmdir(dir), 0);
	ASSERT_NO_LEAKS();
}

/* Tools, loop detection and plugins: values read, defaults kept, and
 * `show` gives back a file that means the same. */
Test(config, tools_loop_detection_and_plugins)
{
	pc_config_t *c = NULL;
	pc_config_errors_t e;
	cr_assert_eq(parse("{}", &c, &e), 0);
	cr_assert_eq(c->agent.exec.mode, PC_CONFIG_EXEC_FULL);
	cr_assert_not(c->agent.loop_detection.enabled);
	cr_assert(c->agent.loop_guard, "the post-compaction guard is on unless disabled explicitly");
	cr_assert(c->agent.loop_detection.ping_pong && c->agent.loop_detection.generic_repeat &&
		  c->agent.loop_detection.known_poll_no_progress);
	cr_assert_eq(c->plugin_count, 0);
	pc_config_free(c);
	pc_config_errors_free(&e);

	cr_assert_eq(parse("{\"agents\":{\"defaults\":{\"loopDetection\":{\"enabled\":false}}}}", &c, &e), 0);
	cr_assert_not(c->agent.loop_guard, "explicit false also turns off §1.16");
	pc_config_free(c);
	pc_config_errors_free(&e);

	const char *json =
		"{\"agents\":{\"defaults\":{\"tools\":{\"exec\":{\"mode\":\"allowlist\",\"allow\":[\"ls\",\"git\"],"
		"\"env\":[\"GIT_DIR\"],\"timeoutSeconds\":60,\"cgroup\":\"off\"}},\"loopDetection\":{\"enabled\":true,\"historySize\":40,"
		"\"warningThreshold\":5,\"criticalThreshold\":8,\"globalCircuitBreakerThreshold\":12,"
		"\"detectors\":{\"pingPong\":false},\"postCompactionGuard\":{\"windowSize\":4}}}},"
		"\"plugins\":{\"entries\":{\"audit\":{\"path\":\"/opt/p/audit.so\",\"config\":{\"deny\":[\"exec\"]}},"
		"\"off\":{\"path\":\"off.so\",\"enabled\":false}}}}";
	for (int round = 0; round < 2; round++) {
		cr_assert_eq(parse(json, &c, &e), 0);
		const pc_agent_defaults_t *a = &c->agent;
		cr_assert_eq(a->exec.mode, PC_CONFIG_EXEC_ALLOWLIST);
		cr_assert_eq(a->exec.allow_count, 2);
		cr_assert_str_eq(a->exec.allow[1], "git");
		cr_assert_eq(a->exec.env_count, 1);
		cr_assert_eq(a->exec.timeout_ms, 60000);
		cr_assert(a->exec.cgroup_off);
		cr_assert(a->loop_detection.enabled && a->loop_guard);
		cr_assert_eq(a->loop_detection.history_size, 40);
		cr_assert_eq(a->loop_detection.warning_threshold, 5);
		cr_assert_eq(a->loop_detection.critical_threshold, 8);
		cr_assert_eq(a->loop_detection.global_threshold, 12);
		cr_assert_not(a->loop_detection.ping_pong);
		cr_assert(a->loop_detection.generic_repeat);
		cr_assert_eq(a->loop_detection.post_compaction_window, 4);
		cr_assert_eq(c->plugin_count, 2);
		cr_assert_str_eq(c->plugins[0].id, "audit");
		cr_assert(c->plugins[0].enabled);
		cr_assert_str_eq(c->plugins[0].config_json, "{\"deny\":[\"exec\"]}");
		cr_assert_str_eq(c->plugins[1].config_json, "{}");
		cr_assert_not(c->plugins[1].enabled);
		/* the second round reads what `show` printed */
		char *shown = NULL;
		cr_assert_eq(pc_config_to_json(c, &shown), 0);
		pc_config_free(c);
		pc_config_errors_free(&e);
		static char again[4096];
		cr_assert_lt(strlen(shown), sizeof(again));
		strcpy(again, shown);
		free(shown);
		json = again;
	}
	ASSERT_NO_LEAKS();
}

Test(config, gateway_defaults_file_and_environment)
{
	pc_config_t *c = NULL;
	pc_config_errors_t e;
	cr_assert_eq(parse("{}", &c, &e), 0);
	cr_assert_str_eq(c->gateway.bind, "127.0.0.1");
	cr_assert_eq(c->gateway.port, 18789);
	cr_assert_eq(c->gateway.auth, PC_GATEWAY_AUTH_NONE);
	cr_assert_eq(c->gateway.tick_ms, 30000);
	cr_assert_eq(c->gateway.max_payload, (uint64_t)25 << 20);
	cr_assert_eq(c->gateway.max_buffered, (uint64_t)50 << 20);
	cr_assert_eq(c->gateway.sse_keepalive_ms, 15000);
	pc_config_free(c);
	pc_config_errors_free(&e);
	/* SSE keep-alives: any period from 10 ms, or 0 for none */
	cr_assert_eq(parse("{\"gateway\":{\"http\":{\"sseKeepAliveMs\":100}}}", &c, &e), 0);
	cr_assert_eq(c->gateway.sse_keepalive_ms, 100);
	pc_config_free(c);
	pc_config_errors_free(&e);
	cr_assert_eq(parse("{\"gateway\":{\"http\":{\"sseKeepAliveMs\":0}}}", &c, &e), 0);
	cr_assert_eq(c->gateway.sse_keepalive_ms, 0);
	pc_config_free(c);
	pc_config_errors_free(&e);
	const char *short_period[] = {"gateway.http.sseKeepAliveMs: must be 0 (off) or at least 10"};
	expect_errors("{\"gateway\":{\"http\":{\"sseKeepAliveMs\":5}}}", short_period, 1);
	const char *unknown[] = {"gateway.http.keepAlive: unknown key"};
	expect_errors("{\"gateway\":{\"http\":{\"keepAlive\":5}}}", unknown, 1);
	/* a token makes token auth, and then any address may be bound */
	cr_assert_eq(parse("{\"gateway\":{\"bind\":\"0.0.0.0\",\"port\":0,\"auth\":{\"token\":\"t0k\"}}}", &c, &e), 0);
	cr_assert_eq(c->gateway.auth, PC_GATEWAY_AUTH_TOKEN);
	cr_assert_str_eq(c->gateway.token, "t0k");
	cr_assert_eq(c->gateway.port, 0);
	char *shown = NULL;
	cr_assert_eq(pc_config_to_json(c, &shown), 0);
	cr_assert_null(strstr(shown, "t0k"), "secrets are not shown");
	free(shown);
	pc_config_free(c);
	pc_config_errors_free(&e);
	setenv("PINCER_GATEWAY_TOKEN", "from-env", 1);
	setenv("PINCER_GATEWAY_PORT", "19000", 1);
	cr_assert_eq(parse("{\"gateway\":{\"bind\":\"0.0.0.0\"}}", &c, &e), 0);
	cr_assert_eq(c->gateway.auth, PC_GATEWAY_AUTH_TOKEN);
	cr_assert_str_eq(c->gateway.token, "from-env");
	cr_assert_eq(c->gateway.port, 19000);
	pc_config_free(c);
	pc_config_errors_free(&e);
	setenv("PINCER_GATEWAY_PORT", "x", 1);
	const char *want[] = {"env.PINCER_GATEWAY_PORT: must be an integer from 0 to 65535"};
	expect_errors("{}", want, 1);
	clean_env();
	ASSERT_NO_LEAKS();
}

Test(config, a_store_url_comes_from_the_file_or_the_environment_and_is_shown_masked)
{
	pc_config_t *c = NULL;
	pc_config_errors_t e;
	cr_assert_eq(parse("{\"store\":{\"url\":\"postgresql://app:s3cret@db:5432/pincer?sslmode=require\","
			   "\"statementTimeoutMs\":2500}}",
			   &c, &e),
		     0);
	cr_assert_str_eq(c->store_url, "postgresql://app:s3cret@db:5432/pincer?sslmode=require");
	cr_assert_eq(c->store_statement_timeout_ms, 2500);
	char *shown = NULL;
	cr_assert_eq(pc_config_to_json(c, &shown), 0);
	cr_assert_null(strstr(shown, "s3cret"), "%s", shown);
	cr_assert_not_null(strstr(shown, "postgresql://app:***@db:5432/pincer?sslmode=require"), "%s", shown);
	free(shown);
	pc_config_free(c);
	pc_config_errors_free(&e);
	/* the environment wins, and a password given as a parameter is masked too */
	setenv("PINCER_STORE_URL", "postgres:///pincer?host=/run/pg&password=pw&user=app", 1);
	cr_assert_eq(parse("{\"store\":{\"url\":\"postgresql://db/x\"}}", &c, &e), 0);
	cr_assert_str_eq(c->store_url, "postgres:///pincer?host=/run/pg&password=pw&user=app");
	cr_assert_eq(pc_config_to_json(c, &shown), 0);
	cr_assert_not_null(strstr(shown, "postgres:///pincer?host=/run/pg&password=***&user=app"), "%s", shown);
	free(shown);
	pc_config_free(c);
	pc_config_errors_free(&e);
	setenv("PINCER_STORE_URL", "sqlite:///tmp/x", 1);
	const char *want[] = {"env.PINCER_STORE_URL: must be a postgresql:// URI"};
	expect_errors("{}", want, 1);
	clean_env();
	ASSERT_NO_LEAKS();
}

Test(config, a_cluster_node_has_defaults_its_secret_from_the_environment_and_shown_masked)
{
	pc_config_t *c = NULL;
	pc_config_errors_t e;
	cr_assert_eq(parse("{\"store\":{\"url\":\"postgresql://db/x\"},\"cluster\":{\"secret\":\"0123456789abcdef\"}}",
			   &c, &e),
		     0);
	cr_assert(c->cluster.enabled);
	cr_assert_null(c->cluster.node_id, "the host name and port, at start");
	cr_assert_null(c->cluster.advertise_url);
	cr_assert_eq(c->cluster.lease_ms, PC_CLUSTER_DEFAULT_LEASE_MS);
	cr_assert(c->cluster.forward, "requests go to the node a session prefers, unless told not to");
	pc_config_free(c);
	pc_config_errors_free(&e);
	setenv("PINCER_CLUSTER_SECRET", "from the environment, long enough", 1);
	cr_assert_eq(parse("{\"store\":{\"url\":\"postgresql://db/x\"},\"cluster\":{\"nodeId\":\"n1\","
			   "\"advertiseUrl\":\"http://n1.internal:18789\",\"leaseMs\":2000,\"forward\":false}}",
			   &c, &e),
		     0);
	cr_assert_str_eq(c->cluster.secret, "from the environment, long enough");
	cr_assert_str_eq(c->cluster.node_id, "n1");
	cr_assert_eq(c->cluster.lease_ms, 2000);
	cr_assert(!c->cluster.forward);
	char *shown = NULL;
	cr_assert_eq(pc_config_to_json(c, &shown), 0);
	cr_assert_null(strstr(shown, "from the environment"), "%s", shown);
	cJSON *j = cJSON_Parse(shown);
	const cJSON *cl = cJSON_GetObjectItemCaseSensitive(j, "cluster");
	cr_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cl, "nodeId")), "n1", "%s", shown);
	cr_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cl, "secret")), "***", "%s", shown);
	cJSON_Delete(j);
	free(shown);
	pc_config_free(c);
	pc_config_errors_free(&e);
	/* no section: not a node */
	cr_assert_eq(parse("{}", &c, &e), 0);
	cr_assert(!c->cluster.enabled);
	pc_config_free(c);
	pc_config_errors_free(&e);
	clean_env();
	ASSERT_NO_LEAKS();
}

Test(config, long_keys_are_cut_in_messages)
{
	char id[1001], json[1400];
	memset(id, 'x', sizeof(id) - 1);
	id[sizeof(id) - 1] = 0;
	id[10] = '!';
	snprintf(json, sizeof(json), "{\"providers\":{\"%s\":{\"embedded\":true,\"bseUrl\":1}}}", id);
	pc_config_t *c = NULL;
	pc_config_errors_t e;
	cr_assert_eq(parse(json, &c, &e), PC_EINVAL);
	dump_errors(&e);
	cr_assert_eq(e.count, 3); /* the id, the key, and no model to default to */
	cr_assert_str_eq(e.items[2], "agents.defaults.model: required (no provider lists a model to default to)");
	for (size_t i = 0; i < 2; i++) {
		cr_assert_eq(strncmp(e.items[i], "providers.xxxxxxxxxx!", 21), 0, "%s", e.items[i]);
		cr_assert_lt(strlen(e.items[i]), 1000);
	}
	cr_assert_not_null(strstr(e.items[1], "...: unknown key"), "%s", e.items[1]);
	pc_config_errors_free(&e);
	ASSERT_NO_LEAKS();
}
