/*
 * Auth-profile cooldowns across runs of one process, through the whole
 * loop against the embedded mock LLM (spec §1.8, §1.11, §1.12): a profile
 * put in cooldown by one run is passed over by the next run until it
 * expires, and the next run's attempts trace says so with the reason.
 */
#include <criterion/criterion.h>

#include "agent_harness.h"
#include "runtime/clock.h"

TestSuite(agent_cooldowns, .timeout = 90);

/* A daily window: not a short one, so the profile does cool down (§1.10). */
#define DAILY_LIMIT "{\"kind\":\"error\",\"status\":429,\"message\":\"Daily request limit reached\"}"
#define NO_CREDITS "{\"kind\":\"error\",\"status\":402,\"message\":\"Insufficient credits\"}"

/* The embedded mock keeps a scenario cursor per run, so a later run that
 * must get a given answer names it in its message (a marker). */
#define ANSWER(text) "[[mock:{\"text\":\"" text "\"}]]"

static cJSON *run_once(harness_t *h, const char *msg, char trace[], size_t cap)
{
	char run[80];
	submit(h, "s", msg, run);
	cJSON *d = finish_of(h, run, 30000);
	trace_text(d, trace, cap);
	return d;
}

/* (The single-profile skip is in test_agent_loop.c:
 * profile_cooldown_is_shared_by_later_runs.) */

/* Request i's header `name`, into out ("" when absent). */
static void request_header(harness_t *h, int i, const char *name, char *out, size_t cap)
{
	cJSON *reqs = mock_requests(h);
	const cJSON *r = cJSON_GetArrayItem(reqs, i);
	snprintf(out, cap, "%s", jstr(cJSON_GetObjectItemCaseSensitive(r, "headers"), name));
	cJSON_Delete(reqs);
}

/* Entry i of the attempts trace. */
static const cJSON *attempt(const cJSON *d, int i)
{
	return cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(d, "attempts"), i);
}

/* §1.12: when billing has disabled every profile of the primary, the next
 * run skips that model without a request and goes straight to the
 * fallback; the skip is in its trace with the reason. */
Test(agent_cooldowns, a_model_whose_profiles_are_all_disabled_by_billing_is_skipped_by_the_next_run)
{
	harness_t h;
	harness_start(&h, "{\"steps\":[" NO_CREDITS "," NO_CREDITS ",{\"text\":\"fb one\"}]}");
	char trace[256];
	cJSON *d = run_once(&h, "hello", trace, sizeof(trace));
	cr_assert_str_eq(jstr(d, "phase"), "end", "%s [%s]", jstr(d, "error"), trace);
	cr_assert_str_eq(trace, "rotate_profile:billing,fallback_model:billing,success", "first run %s", trace);
	cJSON_Delete(d);

	d = run_once(&h, ANSWER("fb two"), trace, sizeof(trace));
	cr_assert_str_eq(jstr(d, "phase"), "end", "%s [%s]", jstr(d, "error"), trace);
	cr_assert_str_eq(payload_text(d), "fb two");
	cr_assert_str_eq(trace, "fallback_model:billing,success", "second run %s", trace);
	const cJSON *skip = attempt(d, 0);
	cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(skip, "skipped")));
	cr_assert_str_eq(jstr(skip, "model"), "m1");
	cr_assert_eq(cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(skip, "status")), 402);
	cr_assert_str_eq(jstr(attempt(d, 1), "model"), "m2");
	cJSON_Delete(d);

	cr_assert_eq(request_count(&h), 4);
	char auth[64];
	request_header(&h, 3, "authorization", auth, sizeof(auth));
	cr_assert_str_eq(auth, "Bearer key-fb");
	harness_stop(&h);
}

/* §1.12: a model whose profiles all cool down for a transient reason is
 * probed, not skipped: the next run still asks it (on the profile whose
 * cooldown ends first). */
Test(agent_cooldowns, a_model_whose_profiles_all_cool_down_for_a_rate_limit_is_probed)
{
	harness_t h;
	harness_start(&h, "{\"steps\":[" DAILY_LIMIT "," DAILY_LIMIT ",{\"text\":\"fb\"}]}");
	char trace[256];
	cJSON *d = run_once(&h, "hello", trace, sizeof(trace));
	cr_assert_str_eq(jstr(d, "phase"), "end", "%s [%s]", jstr(d, "error"), trace);
	cJSON_Delete(d);

	d = run_once(&h, ANSWER("probe"), trace, sizeof(trace));
	cr_assert_str_eq(jstr(d, "phase"), "end", "%s [%s]", jstr(d, "error"), trace);
	cr_assert_str_eq(payload_text(d), "probe");
	cr_assert_str_eq(trace, "success", "second run %s", trace);
	cr_assert_str_eq(jstr(attempt(d, 0), "model"), "m1");
	cJSON_Delete(d);
	char auth[64];
	request_header(&h, 3, "authorization", auth, sizeof(auth));
	cr_assert_str_eq(auth, "Bearer key-a");
	harness_stop(&h);
}

/* ---- §1.12 the fallback chain ---- */

/* Runs "hello" on session "s" with the per-run model `model` (NULL: the
 * configured one) and returns its terminal data. */
static cJSON *submit_model(harness_t *h, const char *model, char trace[], size_t cap)
{
	pc_agent_params_t p = {.session_key = "s", .message = "hello", .model = model};
	pc_agent_accepted_t acc;
	cr_assert_eq(pc_agent_submit(h->agent, &p, &acc), 0);
	cJSON *d = finish_of(h, acc.run_id, 30000);
	trace_text(d, trace, cap);
	return d;
}

/* A per-run model is first in its chain; the configured fallbacks follow
 * (once each) and the configured primary ends it. */
Test(agent_cooldowns, a_per_run_model_falls_back_to_the_configured_primary_last)
{
	harness_t h;
	harness_start(&h, "{\"steps\":[" NO_CREDITS ",{\"text\":\"from the primary\"}]}");
	char trace[256];
	cJSON *d = submit_model(&h, "fb/m2", trace, sizeof(trace));
	cr_assert_str_eq(jstr(d, "phase"), "end", "%s [%s]", jstr(d, "error"), trace);
	cr_assert_str_eq(payload_text(d), "from the primary");
	cr_assert_str_eq(trace, "fallback_model:billing,success", "%s", trace);
	cr_assert_str_eq(jstr(attempt(d, 0), "model"), "m2");
	cr_assert_str_eq(jstr(attempt(d, 1), "model"), "m1");
	cJSON_Delete(d);
	cJSON *reqs = mock_requests(&h);
	cr_assert_eq(cJSON_GetArraySize(reqs), 2, "fb/m2 is not asked twice");
	char m[32];
	request_model(reqs, 1, m, sizeof(m));
	cr_assert_str_eq(m, "m1");
	cJSON_Delete(reqs);
	harness_stop(&h);
}

/* When every candidate fails, the run's error lists each of them with its
 * error and reason (FallbackSummaryError's attempt list). */
Test(agent_cooldowns, when_every_candidate_fails_the_error_lists_each_with_its_reason)
{
	harness_t h;
	harness_start(&h, "{\"steps\":[" DAILY_LIMIT "," DAILY_LIMIT "," NO_CREDITS "]}");
	char trace[256];
	cJSON *d = submit_model(&h, NULL, trace, sizeof(trace));
	cr_assert_str_neq(jstr(d, "phase"), "end", "[%s]", trace);
	const char *err = jstr(d, "error");
	cr_assert_not_null(strstr(err, "mock/m1: "), "%s", err);
	/* §1.10: the primary's rotations ran out, so its FailoverError has its own text */
	cr_assert_not_null(strstr(err, "mock/m1: The AI service is temporarily rate-limited. Please try "
				       "again in a moment. (rate_limit)"), "%s", err);
	cr_assert_not_null(strstr(err, "(rate_limit)"), "%s", err);
	cr_assert_not_null(strstr(err, "fb/m2: "), "%s", err);
	cr_assert_not_null(strstr(err, "Insufficient credits"), "%s", err);
	cr_assert_not_null(strstr(err, "(billing)"), "%s", err);
	cr_assert(strstr(err, "mock/m1") < strstr(err, "fb/m2"), "in chain order: %s", err);
	cr_assert_str_eq(payload_text(d), err);
	const cJSON *fa = cJSON_GetObjectItemCaseSensitive(d, "fallbackAttempts");
	cr_assert_eq(cJSON_GetArraySize(fa), 2);
	const cJSON *a0 = cJSON_GetArrayItem(fa, 0), *a1 = cJSON_GetArrayItem(fa, 1);
	cr_assert_str_eq(jstr(a0, "provider"), "mock");
	cr_assert_str_eq(jstr(a0, "model"), "m1");
	cr_assert_str_eq(jstr(a0, "reason"), "rate_limit");
	cr_assert_eq(cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(a0, "status")), 429);
	cr_assert_str_eq(jstr(a1, "provider"), "fb");
	cr_assert_str_eq(jstr(a1, "reason"), "billing");
	cr_assert_eq(cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(a1, "status")), 402);
	cJSON_Delete(d);
	harness_stop(&h);
}

/* §1.8: a rate limit cools the profile down for its model only; the same
 * profile stays usable for another model of the provider, while a later
 * run on the limited model still passes it over. */
Test(agent_cooldowns, a_rate_limit_cools_the_profile_down_for_its_model_only)
{
	harness_t h;
	harness_start(&h, "{\"steps\":[" DAILY_LIMIT ",{\"text\":\"one\"}]}");
	char trace[256], auth[64];
	cJSON *d = run_once(&h, "hello", trace, sizeof(trace));
	cr_assert_str_eq(trace, "rotate_profile:rate_limit,success", "first run %s", trace);
	cJSON_Delete(d);

	pc_agent_params_t p = {.session_key = "s", .message = ANSWER("other"), .model = "mock/m3"};
	pc_agent_accepted_t acc;
	cr_assert_eq(pc_agent_submit(h.agent, &p, &acc), 0);
	d = finish_of(&h, acc.run_id, 30000);
	trace_text(d, trace, sizeof(trace));
	cr_assert_str_eq(trace, "success", "another model: %s", trace);
	cJSON_Delete(d);
	request_header(&h, 2, "authorization", auth, sizeof(auth));
	cr_assert_str_eq(auth, "Bearer key-a", "the profile is free for m3");

	d = run_once(&h, ANSWER("three"), trace, sizeof(trace));
	cr_assert_str_eq(trace, "rotate_profile:rate_limit,success", "the limited model: %s", trace);
	cJSON_Delete(d);
	request_header(&h, 3, "authorization", auth, sizeof(auth));
	cr_assert_str_eq(auth, "Bearer key-b");
	harness_stop(&h);
}

/* ---- §1.12 probing a cooled-down candidate ---- */

#define OVERLOADED "{\"kind\":\"error\",\"status\":529}"

/* mock (one profile) is the primary; fb the fallback. */
#define ONE_PROFILE_CONFIG(fallbacks)                                                          \
	"{\"providers\":{"                                                                      \
	"\"mock\":{\"api\":\"openai-completions\",\"embedded\":true,"                           \
	"\"profiles\":[{\"id\":\"a\",\"apiKey\":\"key-a\"}]},"                                  \
	"\"fb\":{\"api\":\"openai-completions\",\"embedded\":true,\"apiKey\":\"key-fb\"}},"     \
	"\"agents\":{\"defaults\":{\"model\":\"mock/m1\",\"fallbacks\":[" fallbacks "],"        \
	"\"maxConcurrent\":16,\"sessionIdleSeconds\":1}}}"

static void set_scenario(harness_t *h, const char *json)
{
	char err[256] = "";
	cr_assert_eq(pc_mock_server_set_scenario(h->agent->embedded, json, strlen(json), err, sizeof(err)), 0, "%s",
		     err);
}

static bool flag(const cJSON *e, const char *k)
{
	return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, k));
}

/* The models the mock was asked for, from request `from` on, comma-separated. */
static void asked_models(harness_t *h, int from, char *out, size_t cap)
{
	cJSON *reqs = mock_requests(h);
	out[0] = '\0';
	for (int i = from; i < cJSON_GetArraySize(reqs); i++) {
		char m[32];
		request_model(reqs, i, m, sizeof(m));
		size_t n = strlen(out);
		snprintf(out + n, cap - n, "%s%s", n ? "," : "", m);
	}
	cJSON_Delete(reqs);
}

/* A primary cooling down for a rate limit (left by the previous run) is
 * probed by the next run, because its cooldown ends within the 2 min
 * margin; a third run less than 30 s later finds the probe throttled and
 * skips the primary without a request. */
Test(agent_cooldowns, a_primary_probe_is_throttled_to_one_per_30_seconds)
{
	harness_t h;
	harness_start_with(&h, ONE_PROFILE_CONFIG("\"fb/m2\""), "{\"steps\":[" DAILY_LIMIT ",{\"text\":\"fb\"}]}",
			   NULL);
	char trace[256], models[128];
	cJSON *d = run_once(&h, "hello", trace, sizeof(trace));
	cr_assert_str_eq(trace, "fallback_model:rate_limit,success", "first run %s", trace);
	cr_assert_not(flag(attempt(d, 0), "probe"), "no cooldown yet: a plain attempt");
	cJSON_Delete(d);

	/* the probe: asked although its one profile cools down, and failing
	 * again, the run goes on to the fallback */
	d = run_once(&h, "hello", trace, sizeof(trace));
	cr_assert_str_eq(jstr(d, "phase"), "end", "%s [%s]", jstr(d, "error"), trace);
	cr_assert_str_eq(trace, "fallback_model:rate_limit,success", "second run %s", trace);
	cr_assert(flag(attempt(d, 0), "probe"));
	cr_assert_not(flag(attempt(d, 0), "skipped"));
	cr_assert_str_eq(jstr(attempt(d, 0), "model"), "m1");
	cJSON_Delete(d);
	asked_models(&h, 2, models, sizeof(models));
	cr_assert_str_eq(models, "m1,m2");

	/* within 30 s of that probe: skipped, no request */
	d = run_once(&h, ANSWER("fb three"), trace, sizeof(trace));
	cr_assert_str_eq(payload_text(d), "fb three");
	cr_assert_str_eq(trace, "fallback_model:rate_limit,success", "third run %s", trace);
	cr_assert(flag(attempt(d, 0), "skipped"));
	cr_assert_not(flag(attempt(d, 0), "probe"));
	cr_assert_str_eq(jstr(attempt(d, 0), "model"), "m1");
	cJSON_Delete(d);
	asked_models(&h, 4, models, sizeof(models));
	cr_assert_str_eq(models, "m2", "the primary was not asked");
	harness_stop(&h);
}

/* A primary whose cooldown ends more than 2 min from now (a third failure
 * cools a profile for 5 min) is not probed: the run goes to the fallback
 * without asking it. */
Test(agent_cooldowns, a_primary_cooling_down_beyond_the_margin_is_not_probed)
{
	harness_t h;
	harness_start_with(&h, ONE_PROFILE_CONFIG("\"fb/m2\""), "{\"steps\":[]}", NULL);
	/* what three failed runs leave: the third failure's 5 min */
	const pc_provider_config_t *mock = pc_config_provider(h.cfg, "mock");
	uint64_t now = (uint64_t)pc__clock_wall_ms();
	for (uint32_t i = 1; i <= 3; i++)
		pc_cooldowns_failed(h.agent->cooldowns, mock, 0, "m1", PC_FAILOVER_RATE_LIMIT,
				    pc_auth_cooldown_ms(PC_FAILOVER_RATE_LIMIT, i, 0), now);
	char trace[256], models[128];
	cJSON *d = run_once(&h, ANSWER("fb"), trace, sizeof(trace));
	cr_assert_str_eq(payload_text(d), "fb");
	cr_assert_str_eq(trace, "fallback_model:rate_limit,success", "%s", trace);
	cr_assert(flag(attempt(d, 0), "skipped"));
	cJSON_Delete(d);
	asked_models(&h, 0, models, sizeof(models));
	cr_assert_str_eq(models, "m2");
	harness_stop(&h);
}

/* With no fallback, a primary disabled by billing is probed on the 30 s
 * throttle alone (however far its 5 h cooldown), so a single-provider
 * setup recovers without a restart; a run within 30 s of the probe fails
 * without a request. */
Test(agent_cooldowns, a_single_provider_billing_primary_is_probed_on_the_throttle)
{
	harness_t h;
	harness_start_with(&h, ONE_PROFILE_CONFIG(""), "{\"steps\":[" NO_CREDITS "]}", NULL);
	char trace[256];
	cJSON *d = run_once(&h, "hello", trace, sizeof(trace));
	cr_assert_str_eq(jstr(d, "phase"), "error", "[%s]", trace);
	cJSON_Delete(d);
	cr_assert_eq(request_count(&h), 1);

	/* probed: asked again, and it answers now */
	d = run_once(&h, ANSWER("credits back"), trace, sizeof(trace));
	cr_assert_str_eq(jstr(d, "phase"), "end", "%s [%s]", jstr(d, "error"), trace);
	cr_assert_str_eq(payload_text(d), "credits back");
	cr_assert(flag(attempt(d, 0), "probe"), "[%s]", trace);
	cJSON_Delete(d);
	cr_assert_eq(request_count(&h), 2);
	harness_stop(&h);

	/* a probe that fails again closes the throttle: the next run fails
	 * without a request */
	harness_start_with(&h, ONE_PROFILE_CONFIG(""), "{\"steps\":[" NO_CREDITS "]}", NULL);
	d = run_once(&h, "hello", trace, sizeof(trace));
	cJSON_Delete(d);
	d = run_once(&h, "hello", trace, sizeof(trace));
	cr_assert_str_eq(jstr(d, "phase"), "error", "[%s]", trace);
	cr_assert(flag(attempt(d, 0), "probe"), "[%s]", trace);
	cJSON_Delete(d);
	cr_assert_eq(request_count(&h), 2);
	d = run_once(&h, "hello", trace, sizeof(trace));
	cr_assert_str_eq(jstr(d, "phase"), "error", "[%s]", trace);
	cr_assert_str_eq(trace, "fallback_model:billing", "%s", trace);
	cr_assert(flag(attempt(d, 0), "skipped"));
	cr_assert_not_null(strstr(jstr(d, "error"), "billing"), "%s", jstr(d, "error"));
	cJSON_Delete(d);
	cr_assert_eq(request_count(&h), 2, "throttled: not asked");
	harness_stop(&h);
}

/* A provider cooling down for a transient reason is probed at most once
 * per run: after the primary's probe failed, a fallback model of the same
 * provider is skipped ("probe already attempted"), one of another
 * provider is asked. */
Test(agent_cooldowns, a_provider_is_probed_at_most_once_per_run)
{
	harness_t h;
	harness_start_with(&h, ONE_PROFILE_CONFIG("\"mock/m3\",\"fb/m2\""),
			   "{\"steps\":[" OVERLOADED "," OVERLOADED ",{\"text\":\"fb\"}]}", NULL);
	char trace[256], models[128];
	/* overloaded cools the whole profile: m1 fails, m3 is probed (a
	 * fallback in cooldown for a transient reason) and fails too */
	cJSON *d = run_once(&h, "hello", trace, sizeof(trace));
	cr_assert_str_eq(jstr(d, "phase"), "end", "%s [%s]", jstr(d, "error"), trace);
	cr_assert_str_eq(trace, "fallback_model:overloaded,fallback_model:overloaded,success", "first run %s",
			 trace);
	cr_assert_not(flag(attempt(d, 0), "probe"));
	cr_assert(flag(attempt(d, 1), "probe"));
	cr_assert_str_eq(jstr(attempt(d, 1), "model"), "m3");
	cJSON_Delete(d);

	set_scenario(&h, "{\"steps\":[" OVERLOADED ",{\"text\":\"fb two\"}]}");
	d = run_once(&h, "hello", trace, sizeof(trace));
	cr_assert_str_eq(payload_text(d), "fb two", "%s [%s]", jstr(d, "error"), trace);
	cr_assert_str_eq(trace, "fallback_model:overloaded,fallback_model:overloaded,success", "second run %s",
			 trace);
	cr_assert(flag(attempt(d, 0), "probe"), "the primary is probed");
	cr_assert_str_eq(jstr(attempt(d, 1), "model"), "m3");
	cr_assert(flag(attempt(d, 1), "skipped"), "m3: mock's probe is spent");
	cJSON_Delete(d);
	asked_models(&h, 3, models, sizeof(models));
	cr_assert_str_eq(models, "m1,m2");
	harness_stop(&h);
}
