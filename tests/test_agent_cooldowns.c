/*
 * Auth-profile cooldowns across runs of one process, through the whole
 * loop against the embedded mock LLM (spec §1.8, §1.11, §1.12): a profile
 * put in cooldown by one run is passed over by the next run until it
 * expires, and the next run's attempts trace says so with the reason.
 */
#include <criterion/criterion.h>

#include "agent_harness.h"

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
