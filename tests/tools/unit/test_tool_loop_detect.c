/*
 * Tool-call loop detection (agents/tools/loop_detect.h, spec §4.2): every
 * detector at its threshold edges, their order, ping-pong with and without
 * no-progress evidence, progress resetting streaks, the window, warning
 * buckets and their 256-key eviction, config normalisation, unknown-tool
 * retries, and the stable JSON that identifies a call.
 *
 * Calls are numbered from 1: call k is checked with k - 1 calls already
 * in the history.
 */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agents/tools/loop_detect.h"

/* ---- helpers ------------------------------------------------------------------- */

static pc_loop_config_t enabled(void)
{
	pc_loop_config_t c;
	pc_loop_config_default(&c);
	c.enabled = true;
	return c;
}

static pc_loop_history_t *history(const pc_loop_config_t *c)
{
	pc_loop_history_t *h = NULL;
	cr_assert_eq(pc_loop_history_new(c, &h), 0);
	cr_assert_not_null(h);
	return h;
}

/* JSON with ' for ". NULL stays NULL. */
static cJSON *args_of(const char *text)
{
	if (!text)
		return NULL;
	char *t = strdup(text);
	cr_assert_not_null(t);
	for (char *p = t; *p; p++)
		if (*p == '\'')
			*p = '"';
	cJSON *v = cJSON_Parse(t);
	cr_assert_not_null(v, "not JSON: %s", t);
	free(t);
	return v;
}

/* One call: the check, then, unless blocked, its outcome (none when
 * `result` is NULL). */
static pc_loop_verdict_t call_ex(pc_loop_history_t *h, const char *tool, const char *args, const char *result,
				 bool is_error)
{
	cJSON *a = args_of(args);
	pc_loop_verdict_t v;
	cr_assert_eq(pc_loop_check(h, tool, a, NULL, &v), 0);
	if (v.action != PC_LOOP_BLOCK && result)
		cr_assert_eq(pc_loop_record_outcome(h, tool, a, NULL, result, is_error), 0);
	cJSON_Delete(a);
	return v;
}

static pc_loop_verdict_t call(pc_loop_history_t *h, const char *tool, const char *args, const char *result)
{
	return call_ex(h, tool, args, result, false);
}

/* A result that differs on every call: the call makes progress. */
static const char *fresh(int i)
{
	static char buf[32];
	snprintf(buf, sizeof(buf), "result %d", i);
	return buf;
}

static void expect_none(const pc_loop_verdict_t *v, int k)
{
	cr_expect_eq(v->action, PC_LOOP_NONE, "call %d: %s %s", k, v->detector ? v->detector : "", v->message);
	cr_expect_null(v->detector, "call %d", k);
	cr_expect_str_eq(v->message, "", "call %d", k);
}

static void expect(const pc_loop_verdict_t *v, int k, pc_loop_action_t action, const char *detector, uint32_t count,
		   bool log)
{
	cr_expect_eq(v->action, action, "call %d: action %d, want %d (%s)", k, v->action, action, v->message);
	cr_expect(v->detector && strcmp(v->detector, detector) == 0, "call %d: detector %s, want %s", k,
		  v->detector ? v->detector : "(none)", detector);
	cr_expect_eq(v->count, count, "call %d: count %u, want %u", k, v->count, count);
	cr_expect_eq(v->log, log, "call %d: log %d, want %d", k, v->log, log);
}

/* ---- config ------------------------------------------------------------------------ */

Test(loop_config, defaults)
{
	pc_loop_config_t c;
	memset(&c, 0xAB, sizeof(c));
	pc_loop_config_default(&c);
	cr_assert_not(c.enabled);
	cr_assert_eq(c.history_size, 30u);
	cr_assert_eq(c.warning_threshold, 10u);
	cr_assert_eq(c.critical_threshold, 20u);
	cr_assert_eq(c.global_threshold, 30u);
	cr_assert(c.generic_repeat && c.known_poll_no_progress && c.ping_pong);
	pc_loop_config_default(NULL);
	pc_loop_config_normalize(NULL);
}

Test(loop_config, normalize)
{
	pc_loop_config_t c = {.enabled = true};
	pc_loop_config_normalize(&c);
	cr_assert(c.enabled);
	cr_assert_eq(c.history_size, 30u);
	cr_assert_eq(c.warning_threshold, 10u);
	cr_assert_eq(c.critical_threshold, 20u);
	cr_assert_eq(c.global_threshold, 30u);
	cr_assert_not(c.generic_repeat, "booleans are left alone");

	c = (pc_loop_config_t){
		.history_size = 5, .warning_threshold = 10, .critical_threshold = 5, .global_threshold = 3};
	pc_loop_config_normalize(&c);
	cr_assert_eq(c.history_size, 5u);
	cr_assert_eq(c.critical_threshold, 11u, "critical >= warning + 1");
	cr_assert_eq(c.global_threshold, 12u, "global >= critical + 1");

	c = (pc_loop_config_t){.warning_threshold = 4, .critical_threshold = 4, .global_threshold = 5};
	pc_loop_config_normalize(&c);
	cr_assert_eq(c.critical_threshold, 5u);
	cr_assert_eq(c.global_threshold, 6u);

	c = (pc_loop_config_t){.warning_threshold = 7, .critical_threshold = 50, .global_threshold = 40};
	pc_loop_config_normalize(&c);
	cr_assert_eq(c.warning_threshold, 7u);
	cr_assert_eq(c.critical_threshold, 50u);
	cr_assert_eq(c.global_threshold, 51u);

	c = (pc_loop_config_t){.history_size = 100000, .warning_threshold = UINT32_MAX};
	pc_loop_config_normalize(&c);
	cr_assert_eq(c.history_size, PC_LOOP_MAX_HISTORY);
	cr_assert_eq(c.warning_threshold, UINT32_MAX - 2);
	cr_assert_eq(c.critical_threshold, UINT32_MAX - 1);
	cr_assert_eq(c.global_threshold, UINT32_MAX);
}

/* The history normalizes its copy: zero thresholds still detect. */
Test(loop_config, history_normalizes)
{
	pc_loop_config_t c = {.enabled = true, .generic_repeat = true};
	pc_loop_history_t *h = history(&c);
	for (int k = 1; k <= 10; k++) {
		pc_loop_verdict_t v = call(h, "read", "{}", fresh(k));
		expect_none(&v, k);
	}
	pc_loop_verdict_t v = call(h, "read", "{}", fresh(11));
	expect(&v, 11, PC_LOOP_WARN, "generic_repeat", 10, true);
	pc_loop_history_free(h);
}

Test(loop_config, disabled_does_nothing)
{
	pc_loop_history_t *h = history(NULL);
	for (int k = 1; k <= 60; k++) {
		pc_loop_verdict_t v = call(h, "command_status", "{}", "same");
		expect_none(&v, k);
	}
	cr_assert_eq(pc_loop_history_count(h), 0u, "nothing is recorded");
	pc_loop_history_free(h);

	pc_loop_config_t c = enabled();
	c.enabled = false;
	h = history(&c);
	cr_assert_eq(pc_loop_record_outcome(h, "x", NULL, "id", "r", false), 0);
	cr_assert_eq(pc_loop_history_count(h), 0u);
	pc_loop_history_free(h);
}

Test(loop_config, bad_arguments)
{
	pc_loop_config_t c = enabled();
	pc_loop_history_t *h = history(&c);
	pc_loop_verdict_t v;
	cr_assert_eq(pc_loop_check(NULL, "t", NULL, NULL, &v), PC_EINVAL);
	cr_assert_eq(pc_loop_check(h, NULL, NULL, NULL, &v), PC_EINVAL);
	cr_assert_eq(pc_loop_check(h, "t", NULL, NULL, NULL), PC_EINVAL);
	cr_assert_eq(pc_loop_record_outcome(NULL, "t", NULL, NULL, "r", false), PC_EINVAL);
	cr_assert_eq(pc_loop_record_outcome(h, NULL, NULL, NULL, "r", false), PC_EINVAL);
	cr_assert_eq(pc_loop_history_new(&c, NULL), PC_EINVAL);
	cr_assert_eq(pc_loop_history_count(NULL), 0u);
	pc_loop_history_free(NULL);
	/* arguments too deep to identify: refused, nothing recorded */
	cJSON *deep = cJSON_CreateArray(), *at = deep;
	for (int i = 0; i < (int)PC_LOOP_MAX_JSON_DEPTH; i++) {
		cJSON *next = cJSON_CreateArray();
		cr_assert(cJSON_AddItemToArray(at, next));
		at = next;
	}
	cr_assert_eq(pc_loop_check(h, "t", deep, NULL, &v), PC_EINVAL);
	cr_assert_eq(v.action, PC_LOOP_NONE);
	cr_assert_eq(pc_loop_record_outcome(h, "t", deep, NULL, "r", false), PC_EINVAL);
	cr_assert_eq(pc_loop_history_count(h), 0u);
	cJSON_Delete(deep);
	pc_loop_history_free(h);
}

/* ---- generic_repeat --------------------------------------------------------------- */

Test(loop_generic, thresholds_and_buckets)
{
	pc_loop_config_t c = enabled();
	pc_loop_history_t *h = history(&c);
	/* 9 earlier calls: nothing; 10: a warning, logged */
	for (int k = 1; k <= 10; k++) {
		pc_loop_verdict_t v = call(h, "read", "{'path':'a.txt'}", fresh(k));
		expect_none(&v, k);
	}
	pc_loop_verdict_t v = call(h, "read", "{'path':'a.txt'}", fresh(11));
	expect(&v, 11, PC_LOOP_WARN, "generic_repeat", 10, true);
	cr_assert_str_eq(v.message, "WARNING: You have called read 10 times with identical arguments. If this is not "
				    "making progress, stop retrying and report the task as failed.");
	cr_assert_str_eq(v.paired_tool, "");
	/* not logged again until the next bucket (20), then 30 */
	for (int k = 12; k <= 40; k++) {
		v = call(h, "read", "{'path':'a.txt'}", fresh(k));
		uint32_t count = k - 1 > 30 ? 30 : (uint32_t)(k - 1);
		expect(&v, k, PC_LOOP_WARN, "generic_repeat", count, k == 21 || k == 31);
	}
	/* other arguments are another call */
	v = call(h, "read", "{'path':'b.txt'}", fresh(41));
	expect_none(&v, 41);
	/* and the same arguments under another tool name too */
	v = call(h, "write", "{'path':'a.txt'}", fresh(42));
	expect_none(&v, 42);
	pc_loop_history_free(h);
}

Test(loop_generic, key_order_and_number_form_do_not_matter)
{
	pc_loop_config_t c = enabled();
	pc_loop_history_t *h = history(&c);
	static const char *const forms[] = {
		"{'a':1,'b':{'x':[1,2],'y':null}}",
		"{'b':{'y':null,'x':[1.0,2]},'a':1.0}",
		"{ 'b' : { 'y' : null , 'x' : [ 1e0 , 20e-1 ] } , 'a' : 10E-1 }",
	};
	for (int k = 1; k <= 10; k++) {
		pc_loop_verdict_t v = call(h, "t", forms[k % 3], fresh(k));
		expect_none(&v, k);
	}
	pc_loop_verdict_t v = call(h, "t", forms[2], fresh(11));
	expect(&v, 11, PC_LOOP_WARN, "generic_repeat", 10, true);
	pc_loop_history_free(h);

	/* NULL arguments are {} */
	h = history(&c);
	for (int k = 1; k <= 10; k++)
		call(h, "t", k % 2 ? NULL : "{}", fresh(k));
	v = call(h, "t", NULL, fresh(11));
	expect(&v, 11, PC_LOOP_WARN, "generic_repeat", 10, true);
	pc_loop_history_free(h);
}

/* ---- global_circuit_breaker ------------------------------------------------------ */

Test(loop_global, blocks_at_thirty)
{
	pc_loop_config_t c = enabled();
	pc_loop_history_t *h = history(&c);
	for (int k = 1; k <= 30; k++) {
		pc_loop_verdict_t v = call(h, "read", "{'path':'a'}", "same");
		if (k <= 10)
			expect_none(&v, k);
		else /* 29 identical outcomes (call 30) only warn */
			expect(&v, k, PC_LOOP_WARN, "generic_repeat", (uint32_t)k - 1, k == 11 || k == 21);
	}
	pc_loop_verdict_t v = call(h, "read", "{'path':'a'}", "same");
	expect(&v, 31, PC_LOOP_BLOCK, "global_circuit_breaker", 30, true);
	cr_assert_str_eq(v.message, "CRITICAL: read has repeated identical no-progress outcomes 30 times. Session "
				    "execution blocked by global circuit breaker to prevent runaway loops.");
	/* a blocked call is not recorded, and stays blocked */
	cr_assert_eq(pc_loop_history_count(h), 30u);
	v = call(h, "read", "{'path':'a'}", "same");
	expect(&v, 32, PC_LOOP_BLOCK, "global_circuit_breaker", 30, true);
	/* another call is not affected */
	v = call(h, "read", "{'path':'b'}", "same");
	expect_none(&v, 33);
	pc_loop_history_free(h);
}

/* ---- known_poll_no_progress --------------------------------------------------------- */

static void poll_run(const char *tool, const char *args)
{
	pc_loop_config_t c = enabled();
	pc_loop_history_t *h = history(&c);
	for (int k = 1; k <= 20; k++) {
		pc_loop_verdict_t v = call(h, tool, args, "still running");
		if (k <= 10)
			expect_none(&v, k); /* poll calls never count as generic repeats */
		else
			expect(&v, k, PC_LOOP_WARN, "known_poll_no_progress", (uint32_t)k - 1, k == 11);
		char want[512];
		snprintf(want, sizeof(want), "WARNING: You have called %s 10 times with identical arguments and no "
					     "progress. Stop polling and either (1) increase wait time between checks, "
					     "or (2) report the task as failed if the process is stuck.", tool);
		if (k == 11)
			cr_assert_str_eq(v.message, want);
	}
	pc_loop_verdict_t v = call(h, tool, args, "still running");
	expect(&v, 21, PC_LOOP_BLOCK, "known_poll_no_progress", 20, true);
	char want[512];
	snprintf(want, sizeof(want), "CRITICAL: Called %s with identical arguments and no progress 20 times. This "
				     "appears to be a stuck polling loop. Session execution blocked to prevent "
				     "resource waste.", tool);
	cr_assert_str_eq(v.message, want);
	pc_loop_history_free(h);
}

/* 9 vs 10 identical outcomes, 19 vs 20 */
Test(loop_poll, command_status)
{
	poll_run("command_status", "{'id':1}");
}

Test(loop_poll, process_poll_and_log)
{
	poll_run("process", "{'action':'poll','sessionId':'s1'}");
	pc_loop_config_t c = enabled();
	pc_loop_history_t *h = history(&c);
	pc_loop_verdict_t v;
	for (int k = 1; k <= 10; k++)
		call(h, "process", "{'action':'log','sessionId':'s1'}", "line 1");
	v = call(h, "process", "{'action':'log','sessionId':'s1'}", "line 1");
	expect(&v, 11, PC_LOOP_WARN, "known_poll_no_progress", 10, true);
	pc_loop_history_free(h);

	/* other process actions are ordinary calls */
	h = history(&c);
	for (int k = 1; k <= 10; k++)
		call(h, "process", "{'action':'kill','sessionId':'s1'}", "gone");
	v = call(h, "process", "{'action':'kill','sessionId':'s1'}", "gone");
	expect(&v, 11, PC_LOOP_WARN, "generic_repeat", 10, true);
	pc_loop_history_free(h);

	h = history(&c);
	for (int k = 1; k <= 10; k++)
		call(h, "process", NULL, "?");
	v = call(h, "process", NULL, "?");
	expect(&v, 11, PC_LOOP_WARN, "generic_repeat", 10, true);
	pc_loop_history_free(h);
}

Test(loop_poll, progress_resets_the_streak)
{
	pc_loop_config_t c = enabled();
	pc_loop_history_t *h = history(&c);
	for (int k = 1; k <= 15; k++)
		call(h, "command_status", "{}", "running");
	pc_loop_verdict_t v = call(h, "command_status", "{}", "done: 3 files");
	expect(&v, 16, PC_LOOP_WARN, "known_poll_no_progress", 15, false);
	/* the new outcome starts a new streak */
	for (int k = 17; k <= 25; k++) {
		v = call(h, "command_status", "{}", "done: 3 files");
		expect_none(&v, k);
	}
	v = call(h, "command_status", "{}", "done: 3 files");
	expect(&v, 26, PC_LOOP_WARN, "known_poll_no_progress", 10, true);
	pc_loop_history_free(h);
}

Test(loop_poll, calls_without_outcome_do_not_count)
{
	pc_loop_config_t c = enabled();
	pc_loop_history_t *h = history(&c);
	for (int k = 1; k <= 9; k++)
		call(h, "command_status", "{}", "running");
	/* still in flight: no outcome, neither counted nor breaking the streak */
	call(h, "command_status", "{}", NULL);
	pc_loop_verdict_t v = call(h, "command_status", "{}", "running");
	expect_none(&v, 11);
	v = call(h, "command_status", "{}", "running");
	expect(&v, 12, PC_LOOP_WARN, "known_poll_no_progress", 10, true);
	pc_loop_history_free(h);
}

Test(loop_poll, an_error_is_another_outcome)
{
	pc_loop_config_t c = enabled();
	pc_loop_history_t *h = history(&c);
	for (int k = 1; k <= 30; k++) {
		pc_loop_verdict_t v = call_ex(h, "command_status", "{}", "timed out", k % 2 == 0);
		expect_none(&v, k);
	}
	pc_loop_history_free(h);
	h = history(&c);
	for (int k = 1; k <= 10; k++)
		call_ex(h, "command_status", "{}", "timed out", true);
	pc_loop_verdict_t v = call(h, "command_status", "{}", NULL);
	expect(&v, 11, PC_LOOP_WARN, "known_poll_no_progress", 10, true);
	pc_loop_history_free(h);
}

/* ---- ping_pong ---------------------------------------------------------------------- */

/* Alternates read a / read b; `stable` outcomes (else fresh ones, or none). */
static pc_loop_verdict_t pingpong_call(pc_loop_history_t *h, int k, int outcomes)
{
	const char *args = k % 2 ? "{'path':'a'}" : "{'path':'b'}";
	const char *result = outcomes == 0 ? NULL : outcomes == 1 ? (k % 2 ? "ra" : "rb") : fresh(k);
	return call(h, "read", args, result);
}

Test(loop_pingpong, blocks_with_evidence)
{
	pc_loop_config_t c = enabled();
	pc_loop_history_t *h = history(&c);
	for (int k = 1; k <= 9; k++) {
		pc_loop_verdict_t v = pingpong_call(h, k, 1);
		expect_none(&v, k);
	}
	pc_loop_verdict_t v = pingpong_call(h, 10, 1);
	expect(&v, 10, PC_LOOP_WARN, "ping_pong", 10, true);
	cr_assert_str_eq(v.message, "WARNING: You are alternating between repeated tool-call patterns (10 consecutive "
				    "calls). This looks like a ping-pong loop; stop retrying and report the task as "
				    "failed.");
	cr_assert_str_eq(v.paired_tool, "read");
	/* both directions share one warning key */
	for (int k = 11; k <= 19; k++) {
		v = pingpong_call(h, k, 1);
		expect(&v, k, PC_LOOP_WARN, "ping_pong", (uint32_t)k, false);
	}
	v = pingpong_call(h, 20, 1);
	expect(&v, 20, PC_LOOP_BLOCK, "ping_pong", 20, true);
	cr_assert_str_eq(v.message, "CRITICAL: You are alternating between repeated tool-call patterns (20 "
				    "consecutive calls) with no progress. This appears to be a stuck ping-pong loop. "
				    "Session execution blocked to prevent resource waste.");
	cr_assert_str_eq(v.paired_tool, "read");
	pc_loop_history_free(h);
}

Test(loop_pingpong, warns_only_without_evidence)
{
	pc_loop_config_t c = enabled();
	for (int outcomes = 0; outcomes <= 2; outcomes += 2) {
		/* 0: no outcome is ever recorded; 2: each outcome differs */
		pc_loop_history_t *h = history(&c);
		for (int k = 1; k <= 40; k++) {
			pc_loop_verdict_t v = pingpong_call(h, k, outcomes);
			if (k <= 9) {
				expect_none(&v, k);
				continue;
			}
			uint32_t count = k > 31 ? 31 : (uint32_t)k; /* the window holds 30 */
			expect(&v, k, PC_LOOP_WARN, "ping_pong", count, k == 10 || k == 20 || k == 30);
		}
		pc_loop_history_free(h);
	}
}

Test(loop_pingpong, one_side_changing_is_progress)
{
	pc_loop_config_t c = enabled();
	pc_loop_history_t *h = history(&c);
	for (int k = 1; k <= 25; k++) {
		/* a is stable, b changes */
		pc_loop_verdict_t v = call(h, "read", k % 2 ? "{'path':'a'}" : "{'path':'b'}", k % 2 ? "ra" : fresh(k));
		cr_expect_neq(v.action, PC_LOOP_BLOCK, "call %d", k);
	}
	pc_loop_history_free(h);
}

Test(loop_pingpong, a_third_call_breaks_the_pattern)
{
	pc_loop_config_t c = enabled();
	pc_loop_history_t *h = history(&c);
	for (int k = 1; k <= 12; k++)
		pingpong_call(h, k, 1);
	pc_loop_verdict_t v = call(h, "list", "{}", "x");
	expect_none(&v, 13);
	/* the alternating tail is now list,b... too short, and a is not the other side */
	v = call(h, "read", "{'path':'a'}", "ra");
	expect_none(&v, 14);
	/* the pattern must also continue: after a,b,a the next must be b */
	pc_loop_history_free(h);
	h = history(&c);
	for (int k = 1; k <= 11; k++)
		pingpong_call(h, k, 1);
	v = call(h, "read", "{'path':'a'}", "ra");
	expect_none(&v, 12);
	pc_loop_history_free(h);
}

Test(loop_pingpong, across_tools)
{
	pc_loop_config_t c = enabled();
	pc_loop_history_t *h = history(&c);
	for (int k = 1; k <= 19; k++)
		call(h, k % 2 ? "read" : "write", "{'path':'a'}", "ok");
	pc_loop_verdict_t v = call(h, "write", "{'path':'a'}", "ok");
	expect(&v, 20, PC_LOOP_BLOCK, "ping_pong", 20, true);
	cr_assert_str_eq(v.paired_tool, "read");
	pc_loop_history_free(h);
}

/* ---- detector order ---------------------------------------------------------------- */

Test(loop_order, global_before_poll)
{
	pc_loop_config_t c = enabled();
	pc_loop_history_t *h = history(&c);
	/* outcomes without checks append entries: a streak of 30 */
	for (int k = 1; k <= 30; k++)
		cr_assert_eq(pc_loop_record_outcome(h, "command_status", NULL, NULL, "running", false), 0);
	pc_loop_verdict_t v = call(h, "command_status", NULL, NULL);
	expect(&v, 31, PC_LOOP_BLOCK, "global_circuit_breaker", 30, true);
	pc_loop_history_free(h);
}

Test(loop_order, poll_before_ping_pong)
{
	pc_loop_config_t c = enabled();
	pc_loop_history_t *h = history(&c);
	/* 20 alternating outcomes, appended without checks (checks would have
	 * blocked the ping-pong on the way) */
	cJSON *s1 = args_of("{'action':'poll','sessionId':'1'}"), *s2 = args_of("{'action':'poll','sessionId':'2'}");
	for (int k = 1; k <= 20; k++)
		cr_assert_eq(pc_loop_record_outcome(h, "process", k % 2 ? s1 : s2, NULL, "running", false), 0);
	/* a ping-pong of 21 with evidence, but the poll warning (a streak of 10) comes first */
	pc_loop_verdict_t v;
	cr_assert_eq(pc_loop_check(h, "process", s1, NULL, &v), 0);
	expect(&v, 21, PC_LOOP_WARN, "known_poll_no_progress", 10, true);
	/* without the poll detector, the ping-pong blocks */
	pc_loop_history_free(h);
	c.known_poll_no_progress = false;
	h = history(&c);
	for (int k = 1; k <= 20; k++)
		cr_assert_eq(pc_loop_record_outcome(h, "process", k % 2 ? s1 : s2, NULL, "running", false), 0);
	cr_assert_eq(pc_loop_check(h, "process", s1, NULL, &v), 0);
	expect(&v, 21, PC_LOOP_BLOCK, "ping_pong", 21, true);
	cJSON_Delete(s1);
	cJSON_Delete(s2);
	pc_loop_history_free(h);
}

Test(loop_order, ping_pong_before_generic)
{
	pc_loop_config_t c = enabled();
	pc_loop_history_t *h = history(&c);
	for (int k = 1; k <= 20; k++)
		pingpong_call(h, k, 2);
	/* read a has 10 occurrences, but the ping-pong warning comes first */
	pc_loop_verdict_t v = pingpong_call(h, 21, 2);
	expect(&v, 21, PC_LOOP_WARN, "ping_pong", 21, false);
	pc_loop_history_free(h);

	c.ping_pong = false;
	h = history(&c);
	for (int k = 1; k <= 20; k++)
		pingpong_call(h, k, 2);
	v = pingpong_call(h, 21, 2);
	expect(&v, 21, PC_LOOP_WARN, "generic_repeat", 10, true);
	pc_loop_history_free(h);
}

Test(loop_order, detectors_switched_off)
{
	pc_loop_config_t c = enabled();
	c.known_poll_no_progress = false;
	pc_loop_history_t *h = history(&c);
	for (int k = 1; k <= 30; k++) {
		pc_loop_verdict_t v = call(h, "command_status", "{}", "running");
		expect_none(&v, k);
	}
	/* the global breaker cannot be switched off */
	pc_loop_verdict_t v = call(h, "command_status", "{}", "running");
	expect(&v, 31, PC_LOOP_BLOCK, "global_circuit_breaker", 30, true);
	pc_loop_history_free(h);

	c = enabled();
	c.generic_repeat = false;
	h = history(&c);
	for (int k = 1; k <= 40; k++) {
		v = call(h, "read", "{}", fresh(k));
		expect_none(&v, k);
	}
	pc_loop_history_free(h);
}

/* ---- the window ---------------------------------------------------------------------- */

Test(loop_window, trimmed_to_history_size)
{
	pc_loop_config_t c = enabled();
	pc_loop_history_t *h = history(&c);
	for (int k = 1; k <= 45; k++)
		call(h, "read", "{}", fresh(k));
	cr_assert_eq(pc_loop_history_count(h), 30u);
	pc_loop_history_free(h);

	c.history_size = 12;
	h = history(&c);
	for (int k = 1; k <= 20; k++) {
		pc_loop_verdict_t v = call(h, "read", "{}", fresh(k));
		if (k <= 10)
			expect_none(&v, k);
		else /* counted within the window only */
			expect(&v, k, PC_LOOP_WARN, "generic_repeat", k - 1 > 12 ? 12 : (uint32_t)k - 1, k == 11);
	}
	cr_assert_eq(pc_loop_history_count(h), 12u);
	pc_loop_history_free(h);

	/* a window shorter than a threshold never reaches it */
	c.history_size = 20;
	h = history(&c);
	for (int k = 1; k <= 60; k++) {
		pc_loop_verdict_t v = call(h, "read", "{}", "same");
		cr_expect_neq(v.action, PC_LOOP_BLOCK, "call %d", k);
	}
	pc_loop_history_free(h);
}

Test(loop_window, outcomes_attach_to_their_call)
{
	pc_loop_config_t c = enabled();
	pc_loop_history_t *h = history(&c);
	pc_loop_verdict_t v;
	cJSON *a = args_of("{'path':'x'}"), *b = args_of("{'path':'y'}");
	cr_assert_eq(pc_loop_check(h, "read", a, "c1", &v), 0);
	cr_assert_eq(pc_loop_check(h, "read", a, "c2", &v), 0);
	cr_assert_eq(pc_loop_history_count(h), 2u);
	/* matched by id: attached */
	cr_assert_eq(pc_loop_record_outcome(h, "read", a, "c2", "r", false), 0);
	cr_assert_eq(pc_loop_history_count(h), 2u);
	/* an id no pending call has: a new entry, though c1 waits with the same arguments */
	cr_assert_eq(pc_loop_record_outcome(h, "read", a, "c9", "r", false), 0);
	cr_assert_eq(pc_loop_history_count(h), 3u);
	/* other arguments: a new entry */
	cr_assert_eq(pc_loop_record_outcome(h, "read", b, "c1", "r", false), 0);
	cr_assert_eq(pc_loop_history_count(h), 4u);
	/* no id: the newest pending call of that identity (c1) */
	cr_assert_eq(pc_loop_record_outcome(h, "read", a, NULL, "r", false), 0);
	cr_assert_eq(pc_loop_history_count(h), 4u);
	/* nothing pending any more */
	cr_assert_eq(pc_loop_record_outcome(h, "read", a, "c1", "r", false), 0);
	cr_assert_eq(pc_loop_history_count(h), 5u);
	cJSON_Delete(a);
	cJSON_Delete(b);
	pc_loop_history_free(h);
}

/* Parallel calls: each outcome lands on its own call (by id), so the
 * streak reads them in call order. */
Test(loop_window, parallel_outcomes_by_id)
{
	pc_loop_config_t c = enabled();
	pc_loop_history_t *h = history(&c);
	cJSON *a = args_of("{}");
	pc_loop_verdict_t v;
	for (int k = 0; k < 12; k++) {
		char id[16];
		snprintf(id, sizeof(id), "c%d", k);
		cr_assert_eq(pc_loop_check(h, "command_status", a, id, &v), 0);
	}
	/* outcomes in call order; only the newest call ("c11") got "new".
	 * Attached to the newest pending call instead, "old" would make a
	 * streak of 11 and warn below. */
	for (int k = 0; k < 12; k++) {
		char id[16];
		snprintf(id, sizeof(id), "c%d", k);
		cr_assert_eq(pc_loop_record_outcome(h, "command_status", a, id, k == 11 ? "new" : "old", false), 0);
	}
	cr_assert_eq(pc_loop_history_count(h), 12u);
	for (int k = 13; k <= 21; k++) {
		v = call(h, "command_status", "{}", "new");
		expect_none(&v, k);
	}
	v = call(h, "command_status", "{}", "new");
	expect(&v, 22, PC_LOOP_WARN, "known_poll_no_progress", 10, true);
	cJSON_Delete(a);
	pc_loop_history_free(h);
}

/* ---- warning buckets -------------------------------------------------------------- */

/* 10 calls of `t` with {"k":key}, then a check: the verdict of that check.
 * The window is first filled with other calls, so that earlier calls of
 * this key are not counted (and cannot warn on the way). */
static pc_loop_verdict_t warn_key(pc_loop_history_t *h, int key)
{
	char args[32];
	for (int k = 0; k < (int)PC_LOOP_HISTORY_SIZE; k++) {
		snprintf(args, sizeof(args), "{'filler':%d}", k);
		call(h, "f", args, "x");
	}
	snprintf(args, sizeof(args), "{'k':%d}", key);
	for (int k = 0; k < 10; k++)
		call(h, "t", args, fresh(k));
	return call(h, "t", args, fresh(10));
}

Test(loop_buckets, at_most_256_keys_oldest_evicted)
{
	pc_loop_config_t c = enabled();
	pc_loop_history_t *h = history(&c);
	for (int key = 0; key < 256; key++) {
		pc_loop_verdict_t v = warn_key(h, key);
		expect(&v, key, PC_LOOP_WARN, "generic_repeat", 10, true);
	}
	/* key 0 is still known: bucket 1 was logged already */
	pc_loop_verdict_t v = warn_key(h, 0);
	expect(&v, 0, PC_LOOP_WARN, "generic_repeat", 10, false);
	/* a 257th key evicts the oldest (key 0; updates do not move a key) */
	v = warn_key(h, 256);
	expect(&v, 256, PC_LOOP_WARN, "generic_repeat", 10, true);
	v = warn_key(h, 0);
	expect(&v, 0, PC_LOOP_WARN, "generic_repeat", 10, true);
	/* which evicted key 1 in turn, while key 255 stays */
	v = warn_key(h, 255);
	expect(&v, 255, PC_LOOP_WARN, "generic_repeat", 10, false);
	v = warn_key(h, 1);
	expect(&v, 1, PC_LOOP_WARN, "generic_repeat", 10, true);
	pc_loop_history_free(h);
}

Test(loop_buckets, poll_key_includes_the_outcome)
{
	pc_loop_config_t c = enabled();
	pc_loop_history_t *h = history(&c);
	for (int k = 1; k <= 10; k++)
		call(h, "command_status", "{}", "running");
	pc_loop_verdict_t v = call(h, "command_status", "{}", "progress 1");
	expect(&v, 11, PC_LOOP_WARN, "known_poll_no_progress", 10, true);
	for (int k = 12; k <= 20; k++)
		call(h, "command_status", "{}", "progress 1");
	/* a streak of another outcome is another warning key: logged */
	v = call(h, "command_status", "{}", NULL);
	expect(&v, 21, PC_LOOP_WARN, "known_poll_no_progress", 10, true);
	pc_loop_history_free(h);
}

/* ---- unknown tools -------------------------------------------------------------------- */

Test(loop_unknown_tool, blocks_after_ten)
{
	pc_loop_config_t c = enabled();
	pc_loop_history_t *h = history(&c);
	for (int k = 1; k <= 10; k++) {
		char args[32];
		snprintf(args, sizeof(args), "{'q':%d}", k); /* the model varies its arguments */
		pc_loop_verdict_t v = call_ex(h, "web_search", args,
					      "Tool \"web_search\" not found. Available tools: clock, sleep", true);
		expect_none(&v, k);
	}
	pc_loop_verdict_t v = call(h, "web_search", "{'q':11}", NULL);
	expect(&v, 11, PC_LOOP_BLOCK, "unknown_tool_repeat", 10, true);
	cr_assert_str_eq(v.message, "CRITICAL: attempted unavailable tool web_search 10 times. Stop retrying that "
				    "missing tool and answer without it.");
	pc_loop_history_free(h);
}

Test(loop_unknown_tool, wording_and_streak)
{
	pc_loop_config_t c = enabled();
	pc_loop_history_t *h = history(&c);
	for (int k = 1; k <= 10; k++)
		call_ex(h, "Grep", NULL, "Unknown tool: 'Grep'", true);
	pc_loop_verdict_t v = call(h, "Grep", NULL, NULL);
	expect(&v, 11, PC_LOOP_BLOCK, "unknown_tool_repeat", 10, true);
	cr_assert_not_null(strstr(v.message, "unavailable tool grep 10 times"), "%s", v.message);
	pc_loop_history_free(h);

	/* another call in between breaks the streak; so does a success; so do
	 * errors that do not say the tool is missing */
	h = history(&c);
	for (int k = 1; k <= 10; k++)
		call_ex(h, "x", NULL, "the tool x is not available right now", true);
	call(h, "clock", NULL, "12:00");
	v = call(h, "x", NULL, NULL);
	cr_assert_neq(v.action, PC_LOOP_BLOCK);
	pc_loop_history_free(h);
	h = history(&c);
	for (int k = 1; k <= 10; k++)
		call_ex(h, "x", "{'n':1}", k == 5 ? "ok" : "Tool x not found", k != 5);
	v = call(h, "x", "{'n':2}", NULL);
	expect_none(&v, 11);
	pc_loop_history_free(h);
	h = history(&c);
	for (int k = 1; k <= 12; k++)
		call_ex(h, "x", "{}", "file not found", true);
	v = call(h, "x", "{'other':1}", NULL);
	expect_none(&v, 13);
	pc_loop_history_free(h);
}

Test(loop_unknown_tool, long_names_are_cut)
{
	pc_loop_config_t c = enabled();
	pc_loop_history_t *h = history(&c);
	char name[301], text[400];
	memset(name, 'n', 300);
	name[300] = '\0';
	snprintf(text, sizeof(text), "Tool \"%s\" not found", name);
	for (int k = 1; k <= 10; k++)
		call_ex(h, name, NULL, text, true);
	pc_loop_verdict_t v = call(h, name, NULL, NULL);
	expect(&v, 11, PC_LOOP_BLOCK, "unknown_tool_repeat", 10, true);
	char want[512];
	snprintf(want, sizeof(want), "CRITICAL: attempted unavailable tool %.100s 10 times. Stop retrying that missing "
				     "tool and answer without it.", name);
	cr_assert_str_eq(v.message, want);
	pc_loop_history_free(h);
}

/* ---- stable JSON ------------------------------------------------------------------------ */

static void stable_is(const char *json, const char *want)
{
	cJSON *v = args_of(json);
	char *s = pc_json_stable(v);
	cr_assert_not_null(s, "%s", json);
	cr_expect_str_eq(s, want, "%s: got %s, want %s", json, s, want);
	free(s);
	cJSON_Delete(v);
}

Test(loop_stable, stringify)
{
	stable_is("{'b':[{'z':1,'a':null}],'a':'x','B':true}", "{\"B\":true,\"a\":\"x\",\"b\":[{\"a\":null,\"z\":1}]}");
	stable_is("{'z':{'y':{'x':{'b':2,'a':1}}},'a':[[],{},[{}]]}",
		  "{\"a\":[[],{},[{}]],\"z\":{\"y\":{\"x\":{\"a\":1,\"b\":2}}}}");
	stable_is("[1.0,-0.0,0.1,-2.5,1e21,1.5e-7,123456789012345678,1e400,-1e400,100,1e15]",
		  "[1,0,0.1,-2.5,1e+21,1.5e-07,1.2345678901234568e+17,null,null,100,1e+15]");
	stable_is("'caf\\u00e9 \\ud83d\\ude00 \\u4e2d'", "\"caf\xc3\xa9 \xf0\x9f\x98\x80 \xe4\xb8\xad\"");
	stable_is("'q\\\" b\\\\ \\n\\r\\t\\b\\f \\u0001\\u001f /'", "\"q\\\" b\\\\ \\n\\r\\t\\b\\f \\u0001\\u001f /\"");
	stable_is("{'\\u00e9':1,'e':2,'f':3,'\\u00e8':4}", "{\"e\":2,\"f\":3,\"\xc3\xa8\":4,\"\xc3\xa9\":1}");
	stable_is("{'a':1,'a':2,'0':3}", "{\"0\":3,\"a\":1,\"a\":2}");
	stable_is("{'a':2,'a':1}", "{\"a\":2,\"a\":1}");
	stable_is("{}", "{}");
	stable_is("[]", "[]");
	stable_is("true", "true");
	stable_is("null", "null");
	stable_is("'a key with spaces'", "\"a key with spaces\"");
	char *s = pc_json_stable(NULL);
	cr_assert_str_eq(s, "null");
	free(s);
}

Test(loop_stable, key_order_does_not_matter)
{
	cJSON *a = args_of("{'path':'/tmp/x','opts':{'recursive':true,'depth':[1,{'b':1,'a':2}]},'mode':'r'}");
	cJSON *b = args_of("{'mode':'r','opts':{'depth':[1,{'a':2,'b':1}],'recursive':true},'path':'/tmp/x'}");
	char *sa = pc_json_stable(a), *sb = pc_json_stable(b);
	cr_assert_str_eq(sa, sb);
	free(sa);
	free(sb);
	cJSON_Delete(a);
	cJSON_Delete(b);
}

Test(loop_stable, depth_limit)
{
	cJSON *root = cJSON_CreateArray(), *at = root;
	for (unsigned i = 1; i < PC_LOOP_MAX_JSON_DEPTH; i++) {
		cJSON *next = cJSON_CreateArray();
		cr_assert(cJSON_AddItemToArray(at, next));
		at = next;
	}
	char *s = pc_json_stable(root); /* exactly the limit */
	cr_assert_not_null(s);
	cr_assert_eq(strlen(s), 2 * (size_t)PC_LOOP_MAX_JSON_DEPTH);
	free(s);
	cr_assert(cJSON_AddItemToArray(at, cJSON_CreateArray()));
	cr_assert_null(pc_json_stable(root));
	cJSON_Delete(root);
}

/* Values a parser never makes. */
Test(loop_stable, hand_built_values)
{
	cJSON invalid = {.type = cJSON_Invalid};
	char *s = pc_json_stable(&invalid);
	cr_assert_str_eq(s, "null");
	free(s);
	cJSON nulls = {.type = cJSON_String, .valuestring = NULL};
	s = pc_json_stable(&nulls);
	cr_assert_str_eq(s, "\"\"");
	free(s);
	cJSON raw = {.type = cJSON_Raw, .valuestring = (char *)"{\"pre\":1}"};
	s = pc_json_stable(&raw);
	cr_assert_str_eq(s, "{\"pre\":1}");
	free(s);
	cJSON unnamed = {.type = cJSON_True};
	cJSON obj = {.type = cJSON_Object, .child = &unnamed};
	unnamed.prev = &unnamed;
	s = pc_json_stable(&obj);
	cr_assert_str_eq(s, "{\"\":true}");
	free(s);
}
