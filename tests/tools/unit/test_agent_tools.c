/*
 * Tools: the registry's checks and schemas, the built-in "clock" and
 * "sleep", and the invocation actor's promise: exactly one DONE per
 * invocation, on every path (result, error, timeout, abort, kill, crash,
 * unknown tool, bad arguments, blocking jobs that outlive their actor,
 * runtime shutdown), with nothing leaked.
 *
 * An "owner" actor records every DONE it gets under a lock; the test
 * thread polls the record with AWAIT.
 */
#include <criterion/criterion.h>

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "agents/tools/tool.h"
#include "test_util.h"
#include "tool_owner.h"

/* ---- test tools ------------------------------------------------------------ */

static int fail_call(void *user, const cJSON *args, const pc_tool_env_t *env, pc_tool_output_t *out)
{
	(void)user;
	(void)args;
	(void)env;
	(void)out;
	return PC_ENOTFOUND;
}

static int echo_call(void *user, const cJSON *args, const pc_tool_env_t *env, pc_tool_output_t *out)
{
	(void)user;
	char *j = cJSON_PrintUnformatted(args);
	if (!j)
		return PC_ENOMEM;
	if (asprintf(&out->text, "%s|%s|%s", j, env->tool_call_id ? env->tool_call_id : "-",
		     env->workspace ? env->workspace : "-") < 0)
		out->text = NULL;
	cJSON_free(j);
	out->terminate = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(args, "terminate"));
	out->is_error = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(args, "error"));
	return out->text ? 0 : PC_ENOMEM;
}

/* 100 two-byte characters: 200 bytes. */
static int big_call(void *user, const cJSON *args, const pc_tool_env_t *env, pc_tool_output_t *out)
{
	(void)user;
	(void)args;
	(void)env;
	out->text = malloc(201);
	if (!out->text)
		return PC_ENOMEM;
	for (int i = 0; i < 100; i++)
		memcpy(out->text + 2 * i, "\xc3\xa9", 2); /* é */
	out->text[200] = '\0';
	return 0;
}

/* Sleeps {"ms": n} on the blocking pool. */
static int block_call(void *user, const cJSON *args, const pc_tool_env_t *env, pc_tool_output_t *out)
{
	(void)user;
	(void)env;
	const cJSON *ms = cJSON_GetObjectItemCaseSensitive(args, "ms");
	unsigned n = cJSON_IsNumber(ms) ? (unsigned)ms->valuedouble : 0;
	sleep_ms(n);
	return asprintf(&out->text, "blocked %u ms", n) < 0 ? PC_ENOMEM : 0;
}

/* An asynchronous tool whose timer callback fails: the actor crashes. */
static int crash_start(void *user, pc_tool_task_t *t, const cJSON *args, const pc_tool_env_t *env)
{
	(void)user;
	(void)args;
	(void)env;
	return pc_tool_task_after(t, 1, 7);
}

static int crash_timer(void *user, pc_tool_task_t *t, uint64_t token)
{
	(void)user;
	(void)t;
	return token == 7 ? PC_ENOTFOUND : 0;
}

/* An asynchronous tool that never finishes by itself. */
static int hang_start(void *user, pc_tool_task_t *t, const cJSON *args, const pc_tool_env_t *env)
{
	(void)user;
	(void)t;
	(void)args;
	(void)env;
	return 0;
}

static pc_tool_registry_t *test_registry(void)
{
	pc_tool_registry_t *r = NULL;
	cr_assert_eq(pc_tool_registry_new(&r), 0);
	cr_assert_eq(pc_tool_register_builtins(r), 0);
	const pc_tool_def_t defs[] = {
		{.name = "fail", .call = fail_call},
		{.name = "echo", .call = echo_call, .mutating = true},
		{.name = "typed", .call = echo_call,
		 .parameters = "{\"type\":\"object\",\"properties\":{\"path\":{\"type\":\"string\"},"
			       "\"n\":{\"type\":\"integer\",\"minimum\":1}},\"required\":[\"path\"]}"},
		{.name = "big", .call = big_call, .max_output = 101},
		{.name = "block", .call = block_call, .blocking = true},
		{.name = "crash", .start = crash_start, .on_timer = crash_timer},
		{.name = "hang", .start = hang_start, .timeout_ms = 60000},
	};
	for (size_t i = 0; i < sizeof(defs) / sizeof(defs[0]); i++)
		cr_assert_eq(pc_tool_register(r, &defs[i]), 0, "%s", defs[i].name);
	return r;
}

/* ---- fixture ----------------------------------------------------------------- */

typedef struct fx {
	pc_runtime_t *rt;
	pc_tool_registry_t *reg;
	seen_t *seen;
	pc_actor_t *owner;
	uint64_t live0; /* actors_live with only the owner */
} fx_t;

static fx_t *fx_keep; /* keeps the fixture reachable for LeakSanitizer */

static fx_t *fx_new(uint32_t workers)
{
	fx_t *f = calloc(1, sizeof(*f));
	cr_assert_not_null(f);
	fx_keep = f;
	f->rt = start_rt(workers);
	f->reg = test_registry();
	f->seen = calloc(1, sizeof(*f->seen));
	cr_assert_not_null(f->seen);
	pthread_mutex_init(&f->seen->lock, NULL);
	cr_assert_eq(pc_spawn(f->rt, &owner_b, f->seen, &f->owner), 0);
	f->live0 = stats(f->rt).actors_live;
	return f;
}

static void fx_free(fx_t *f)
{
	pc_actor_stop(f->owner, PC_EXIT_NORMAL);
	pc_actor_release(f->owner);
	pc_runtime_free(f->rt);
	pc_tool_registry_free(f->reg);
	free(f->seen->last.text);
	pthread_mutex_destroy(&f->seen->lock);
	free(f->seen);
	free(f);
	fx_keep = NULL;
	ASSERT_NO_LEAKS();
}

static pc_actor_t *invoke(fx_t *f, const char *name, const char *args, uint64_t tag, uint64_t timeout_ms)
{
	pc_tool_invoke_t req = {
		.name = name,
		.tool_call_id = "call_1",
		.arguments = args,
		.env = {.workspace = "/tmp/ws", .session_key = "s", .run_id = "r"},
		.timeout_ms = timeout_ms,
		.tag = tag,
	};
	pc_actor_t *a = NULL;
	cr_assert_eq(pc_tool_invoke_start(f->rt, f->reg, &req, f->owner, &a), 0, "invoke %s", name);
	return a;
}

/* Invokes, waits for the one DONE, and returns it (caller frees .text). */
static rec_t run_one(fx_t *f, const char *name, const char *args, uint64_t timeout_ms)
{
	uint32_t before = done_count(f->seen);
	pc_actor_t *a = invoke(f, name, args, 1, timeout_ms);
	AWAIT(done_count(f->seen) == before + 1, 10000);
	pc_actor_release(a);
	return last_done(f->seen);
}

static bool starts_with(const char *s, const char *prefix)
{
	return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* ---- registry ------------------------------------------------------------------ */

Test(tools, registry_checks)
{
	pc_tool_registry_t *r = NULL;
	cr_assert_eq(pc_tool_registry_new(&r), 0);
	pc_tool_def_t d = {.name = "ok_name-1", .call = fail_call};
	cr_assert_eq(pc_tool_register(r, &d), 0);
	cr_assert_eq(pc_tool_register(r, &d), PC_EEXIST);
	char n65[66];
	memset(n65, 'c', 65);
	n65[65] = '\0';
	const char *bad[] = {"", "has space", "dot.name", "\xc3\xa9", n65};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		pc_tool_def_t b = {.name = bad[i], .call = fail_call};
		cr_assert_eq(pc_tool_register(r, &b), PC_EINVAL, "%s", bad[i]);
	}
	pc_tool_def_t max = {.name = "a12345678901234567890123456789012345678901234567890123456789012",
			     .call = fail_call};
	cr_assert_eq(strlen(max.name), 63u);
	cr_assert_eq(pc_tool_register(r, &max), 0);
	char n64[65];
	memset(n64, 'b', 64);
	n64[64] = '\0';
	pc_tool_def_t m64 = {.name = n64, .call = fail_call};
	cr_assert_eq(pc_tool_register(r, &m64), 0);
	pc_tool_def_t none = {.name = "none"};
	cr_assert_eq(pc_tool_register(r, &none), PC_EINVAL);
	pc_tool_def_t both = {.name = "both", .call = fail_call, .start = hang_start};
	cr_assert_eq(pc_tool_register(r, &both), PC_EINVAL);
	pc_tool_def_t arr = {.name = "arr", .call = fail_call, .parameters = "[1]"};
	cr_assert_eq(pc_tool_register(r, &arr), PC_EINVAL);
	pc_tool_def_t broken = {.name = "broken", .call = fail_call, .parameters = "{\"type\":"};
	pc_tool_def_t bad_kw = {.name = "bad_kw", .call = fail_call, .parameters = "{\"type\":\"strin\"}"};
	cr_assert_eq(pc_tool_register(r, &bad_kw), PC_EINVAL, "a schema that does not compile");
	pc_tool_def_t boolean = {.name = "boolean", .call = fail_call, .parameters = "true"};
	cr_assert_eq(pc_tool_register(r, &boolean), PC_EINVAL, "providers want an object schema");
	cr_assert_eq(pc_tool_register(r, &broken), PC_EINVAL);
	cr_assert_eq(pc_tool_count(r), 3u);
	cr_assert_not_null(pc_tool_find(r, "ok_name-1"));
	cr_assert_null(pc_tool_find(r, "arr"));
	pc_tool_registry_free(r);
}

Test(tools, schemas)
{
	pc_tool_registry_t *r = test_registry();
	cJSON *all = NULL;
	cr_assert_eq(pc_tool_schemas(r, NULL, 0, &all), 0);
	cr_assert_eq(cJSON_GetArraySize(all), (int)pc_tool_count(r));
	const cJSON *first = cJSON_GetArrayItem(all, 0);
	cr_assert_str_eq(cJSON_GetObjectItemCaseSensitive(first, "name")->valuestring, "clock");
	cr_assert(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(first, "description")));
	const cJSON *sleep_s = cJSON_GetArrayItem(all, 1);
	const cJSON *params = cJSON_GetObjectItemCaseSensitive(sleep_s, "parameters");
	cr_assert(cJSON_IsObject(params));
	cr_assert_not_null(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(params, "properties"), "ms"));
	/* A definition without a schema gets {"type":"object"}. */
	const cJSON *fail_s = cJSON_GetArrayItem(all, 2);
	cr_assert_str_eq(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(fail_s, "parameters"),
							   "type")->valuestring,
			 "object");
	cJSON_Delete(all);

	const char *allow[] = {"sleep", "nope", "echo"};
	cJSON *some = NULL;
	cr_assert_eq(pc_tool_schemas(r, allow, 3, &some), 0);
	cr_assert_eq(cJSON_GetArraySize(some), 2);
	cr_assert_str_eq(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(some, 0), "name")->valuestring, "sleep");
	cr_assert_str_eq(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(some, 1), "name")->valuestring, "echo");
	cJSON_Delete(some);
	pc_tool_registry_free(r);
}

Test(tools, status_names)
{
	cr_assert_str_eq(pc_tool_status_name(PC_TOOL_OK), "ok");
	cr_assert_str_eq(pc_tool_status_name(PC_TOOL_ERROR), "error");
	cr_assert_str_eq(pc_tool_status_name(PC_TOOL_INVALID), "invalid");
	cr_assert_str_eq(pc_tool_status_name(PC_TOOL_TIMEOUT), "timeout");
	cr_assert_str_eq(pc_tool_status_name(PC_TOOL_ABORTED), "aborted");
	cr_assert_str_eq(pc_tool_status_name(PC_TOOL_CRASHED), "crashed");
}

/* ---- built-ins ------------------------------------------------------------------ */

Test(tools, clock_shape)
{
	fx_t *f = fx_new(2);
	rec_t r = run_one(f, "clock", "{}", 0);
	cr_assert_eq(r.status, PC_TOOL_OK);
	cr_assert_not(r.is_error);
	cr_assert_str_eq(r.name, "clock");
	cr_assert_str_eq(r.id, "call_1");
	cr_assert_eq(strlen(r.text), 20u, "%s", r.text);
	for (int i = 0; i < 20; i++) {
		char c = r.text[i];
		if (i == 4 || i == 7)
			cr_assert_eq(c, '-', "%s", r.text);
		else if (i == 10)
			cr_assert_eq(c, 'T', "%s", r.text);
		else if (i == 13 || i == 16)
			cr_assert_eq(c, ':', "%s", r.text);
		else if (i == 19)
			cr_assert_eq(c, 'Z', "%s", r.text);
		else
			cr_assert(c >= '0' && c <= '9', "%s", r.text);
	}
	free(r.text);
	/* Empty arguments mean none. */
	r = run_one(f, "clock", "", 0);
	cr_assert_eq(r.status, PC_TOOL_OK);
	free(r.text);
	fx_free(f);
}

Test(tools, sleep_completes)
{
	fx_t *f = fx_new(2);
	uint64_t t0 = now_ms();
	rec_t r = run_one(f, "sleep", "{\"ms\": 120}", 0);
	uint64_t took = now_ms() - t0;
	cr_assert_eq(r.status, PC_TOOL_OK, "%s", r.text);
	cr_assert_str_eq(r.text, "slept 120 ms");
	cr_assert_geq(took, 120u);
	cr_assert_geq(r.duration_us, 120000u);
	free(r.text);
	r = run_one(f, "sleep", "{\"ms\": 0}", 0);
	cr_assert_str_eq(r.text, "slept 0 ms");
	free(r.text);
	AWAIT(stats(f->rt).actors_live == f->live0, 5000);
	fx_free(f);
}

Test(tools, sleep_bad_arguments)
{
	fx_t *f = fx_new(2);
	const char *bad[] = {"{}", "{\"ms\": -1}", "{\"ms\": \"10\"}", "{\"ms\": 1.5}", "{\"ms\": 600001}",
			     "{\"ms\": null}"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		rec_t r = run_one(f, "sleep", bad[i], 0);
		/* the schema refuses them before the tool runs */
		cr_assert_eq(r.status, PC_TOOL_INVALID, "%s: %s", bad[i], r.text);
		cr_assert(r.is_error);
		cr_assert(starts_with(r.text, "Invalid arguments for tool sleep: ") && strstr(r.text, "ms"), "%s",
			  r.text);
		free(r.text);
	}
	fx_free(f);
}

/* Arguments are checked against the tool's schema before it runs; a NUL
 * inside a string (which cJSON would cut) is refused as well. */
Test(tools, arguments_checked_against_the_schema)
{
	fx_t *f = fx_new(2);
	static const struct {
		const char *tool, *args, *want; /* want: NULL = accepted */
	} rows[] = {
		{"typed", "{\"n\":1}", "missing required property \"path\""},
		{"typed", "{\"path\":\"a\",\"n\":0}", "/n"},
		{"typed", "{\"path\":7}", "/path: expected string"},
		{"typed", "{\"path\":\"a\",\"n\":2}", NULL},
		{"echo", "{\"s\":\"a\\u0000b\"}", "NUL"},
		{"echo", "{\"s\":\"a\\\\u0000b\"}", NULL}, /* an escaped backslash, then text */
	};
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		rec_t r = run_one(f, rows[i].tool, rows[i].args, 0);
		if (rows[i].want) {
			cr_assert_eq(r.status, PC_TOOL_INVALID, "%s: %s", rows[i].args, r.text);
			cr_assert(strstr(r.text, rows[i].want), "%s: %s", rows[i].args, r.text);
		} else {
			cr_assert_eq(r.status, PC_TOOL_OK, "%s: %s", rows[i].args, r.text);
		}
		free(r.text);
	}
	fx_free(f);
}

/* ---- outcomes ------------------------------------------------------------------- */

Test(tools, abort_mid_sleep)
{
	fx_t *f = fx_new(2);
	pc_actor_t *a = invoke(f, "sleep", "{\"ms\": 10000}", 5, 0);
	sleep_ms(50);
	cr_assert_eq(done_count(f->seen), 0u);
	cr_assert_eq(pc_tool_abort(a), 0);
	AWAIT(done_count(f->seen) == 1, 5000);
	rec_t r = last_done(f->seen);
	cr_assert_eq(r.status, PC_TOOL_ABORTED);
	cr_assert(r.is_error);
	cr_assert_eq(r.tag, 5u);
	cr_assert_str_eq(r.text, "Tool sleep was aborted");
	free(r.text);
	/* A second abort finds it finished: no second DONE. */
	pc_tool_abort(a);
	sleep_ms(100);
	cr_assert_eq(done_count(f->seen), 1u);
	pc_actor_release(a);
	AWAIT(stats(f->rt).actors_live == f->live0, 5000);
	fx_free(f);
}

Test(tools, abort_right_away)
{
	fx_t *f = fx_new(2);
	pc_actor_t *a = invoke(f, "hang", "{}", 0, 0);
	cr_assert_eq(pc_tool_abort(a), 0);
	AWAIT(done_count(f->seen) == 1, 5000);
	rec_t r = last_done(f->seen);
	cr_assert_eq(r.status, PC_TOOL_ABORTED);
	free(r.text);
	sleep_ms(50);
	cr_assert_eq(done_count(f->seen), 1u);
	pc_actor_release(a);
	fx_free(f);
}

Test(tools, killed_from_outside)
{
	fx_t *f = fx_new(2);
	pc_actor_t *a = invoke(f, "sleep", "{\"ms\": 10000}", 0, 0);
	sleep_ms(20);
	cr_assert_eq(pc_actor_stop(a, PC_EXIT_KILLED), 0);
	AWAIT(done_count(f->seen) == 1, 5000);
	rec_t r = last_done(f->seen);
	cr_assert_eq(r.status, PC_TOOL_ABORTED);
	cr_assert(strstr(r.text, "killed"), "%s", r.text);
	free(r.text);
	sleep_ms(50);
	cr_assert_eq(done_count(f->seen), 1u);
	pc_actor_release(a);
	AWAIT(stats(f->rt).actors_live == f->live0, 5000);
	fx_free(f);
}

Test(tools, timeout)
{
	fx_t *f = fx_new(2);
	uint64_t t0 = now_ms();
	rec_t r = run_one(f, "sleep", "{\"ms\": 10000}", 50);
	cr_assert_geq(now_ms() - t0, 50u);
	cr_assert_eq(r.status, PC_TOOL_TIMEOUT);
	cr_assert(r.is_error);
	cr_assert_str_eq(r.text, "Tool sleep timed out after 50 ms");
	free(r.text);
	r = run_one(f, "hang", "{}", 30);
	cr_assert_eq(r.status, PC_TOOL_TIMEOUT);
	free(r.text);
	sleep_ms(50);
	cr_assert_eq(done_count(f->seen), 2u);
	AWAIT(stats(f->rt).actors_live == f->live0, 5000);
	fx_free(f);
}

Test(tools, unknown_tool)
{
	fx_t *f = fx_new(2);
	rec_t r = run_one(f, "nope", "{}", 0);
	cr_assert_eq(r.status, PC_TOOL_INVALID);
	cr_assert(r.is_error);
	cr_assert_str_eq(r.name, "nope");
	cr_assert_str_eq(r.text, "Tool \"nope\" not found. Available tools: clock, sleep, fail, echo, typed, big, block, "
				 "crash, hang");
	free(r.text);
	fx_free(f);
}

static int badstart_start(void *user, pc_tool_task_t *t, const cJSON *args, const pc_tool_env_t *env)
{
	(void)user;
	(void)t;
	(void)args;
	(void)env;
	return PC_EBUSY;
}

/* A registry of its own: an empty one lists "none"; a `start` that fails
 * is an error result, not a crash. */
Test(tools, other_registries)
{
	fx_t *f = fx_new(2);
	pc_tool_registry_t *r = NULL;
	cr_assert_eq(pc_tool_registry_new(&r), 0);
	pc_tool_invoke_t req = {.name = "clock", .arguments = "{}"};
	cr_assert_eq(pc_tool_invoke_start(f->rt, r, &req, f->owner, NULL), 0);
	AWAIT(done_count(f->seen) == 1, 5000);
	rec_t d = last_done(f->seen);
	cr_assert_eq(d.status, PC_TOOL_INVALID);
	cr_assert_str_eq(d.text, "Tool \"clock\" not found. Available tools: none");
	free(d.text);

	pc_tool_def_t def = {.name = "badstart", .start = badstart_start};
	cr_assert_eq(pc_tool_register(r, &def), 0);
	req.name = "badstart";
	cr_assert_eq(pc_tool_invoke_start(f->rt, r, &req, f->owner, NULL), 0);
	AWAIT(done_count(f->seen) == 2, 5000);
	d = last_done(f->seen);
	cr_assert_eq(d.status, PC_TOOL_ERROR);
	char want[128];
	snprintf(want, sizeof(want), "Tool badstart failed: %s", pc_strerror(PC_EBUSY));
	cr_assert_str_eq(d.text, want);
	free(d.text);
	AWAIT(stats(f->rt).actors_live == f->live0, 5000);
	pc_tool_registry_free(r);
	fx_free(f);
}

Test(tools, bad_arguments)
{
	fx_t *f = fx_new(2);
	const char *not_object[] = {"[1,2]", "42", "\"ms\"", "null"};
	for (size_t i = 0; i < sizeof(not_object) / sizeof(not_object[0]); i++) {
		rec_t r = run_one(f, "sleep", not_object[i], 0);
		cr_assert_eq(r.status, PC_TOOL_INVALID, "%s", not_object[i]);
		cr_assert_str_eq(r.text, "Invalid arguments for tool sleep: expected a JSON object");
		free(r.text);
	}
	rec_t r = run_one(f, "sleep", "{\"ms\": ", 0);
	cr_assert_eq(r.status, PC_TOOL_INVALID);
	cr_assert(starts_with(r.text, "Invalid arguments for tool sleep: expected a JSON object"), "%s", r.text);
	free(r.text);
	fx_free(f);
}

Test(tools, call_error_and_flags)
{
	fx_t *f = fx_new(2);
	rec_t r = run_one(f, "fail", "{}", 0);
	cr_assert_eq(r.status, PC_TOOL_ERROR);
	cr_assert(r.is_error);
	cr_assert(starts_with(r.text, "Tool fail failed: "), "%s", r.text);
	free(r.text);

	r = run_one(f, "echo", "{\"a\":1,\"terminate\":true}", 0);
	cr_assert_eq(r.status, PC_TOOL_OK);
	cr_assert_not(r.is_error);
	cr_assert(r.terminate);
	cr_assert(r.mutating);
	cr_assert_str_eq(r.text, "{\"a\":1,\"terminate\":true}|call_1|/tmp/ws");
	free(r.text);

	r = run_one(f, "echo", "{\"error\":true}", 0);
	cr_assert_eq(r.status, PC_TOOL_ERROR);
	cr_assert(r.is_error);
	free(r.text);
	fx_free(f);
}

Test(tools, crash_gives_one_done)
{
	fx_t *f = fx_new(2);
	rec_t r = run_one(f, "crash", "{}", 0);
	cr_assert_eq(r.status, PC_TOOL_CRASHED);
	cr_assert(r.is_error);
	char want[128];
	snprintf(want, sizeof(want), "Tool crash failed: the invocation crashed (%s)", pc_strerror(PC_ENOTFOUND));
	cr_assert_str_eq(r.text, want);
	free(r.text);
	sleep_ms(50);
	cr_assert_eq(done_count(f->seen), 1u);
	AWAIT(stats(f->rt).actors_live == f->live0, 5000);
	fx_free(f);
}

Test(tools, blocking_tool)
{
	fx_t *f = fx_new(2);
	rec_t r = run_one(f, "block", "{\"ms\": 30}", 0);
	cr_assert_eq(r.status, PC_TOOL_OK, "%s", r.text);
	cr_assert_str_eq(r.text, "blocked 30 ms");
	cr_assert_geq(r.duration_us, 30000u);
	free(r.text);
	fx_free(f);
}

/* The job outlives its actor: its result is a dead letter, its memory is
 * freed by the job itself, and the owner hears only the timeout. */
Test(tools, blocking_job_outlives_actor)
{
	fx_t *f = fx_new(2);
	uint64_t jobs0 = stats(f->rt).blocking_done;
	rec_t r = run_one(f, "block", "{\"ms\": 300}", 30);
	cr_assert_eq(r.status, PC_TOOL_TIMEOUT);
	free(r.text);
	pc_actor_t *a = invoke(f, "block", "{\"ms\": 300}", 2, 0);
	sleep_ms(30);
	pc_tool_abort(a);
	pc_actor_release(a);
	AWAIT(done_count(f->seen) == 2, 5000);
	AWAIT(stats(f->rt).blocking_done >= jobs0 + 2, 5000);
	cr_assert_eq(done_count(f->seen), 2u);
	AWAIT(stats(f->rt).actors_live == f->live0, 5000);
	fx_free(f);
}

Test(tools, output_truncated_at_utf8_boundary)
{
	fx_t *f = fx_new(2);
	rec_t r = run_one(f, "big", "{}", 0);
	cr_assert_eq(r.status, PC_TOOL_OK);
	char want[256];
	size_t n = 0;
	for (int i = 0; i < 50; i++, n += 2)
		memcpy(want + n, "\xc3\xa9", 2);
	snprintf(want + n, sizeof(want) - n, "\n\xe2\x80\xa6(truncated 100 bytes)");
	cr_assert_str_eq(r.text, want);
	cr_assert_eq(r.text_len, strlen(want));
	free(r.text);
	fx_free(f);
}

Test(tools, thousand_concurrent)
{
	fx_t *f = fx_new(2);
	uint64_t seed = test_seed();
	const char *names[] = {"clock", "sleep", "block", "echo", "fail", "crash"};
	for (uint64_t i = 0; i < 1000; i++) {
		uint32_t k = rnd_below(&seed, 6);
		char args[64];
		snprintf(args, sizeof(args), "{\"ms\": %u}", k == 2 ? rnd_below(&seed, 3) : rnd_below(&seed, 30));
		pc_tool_invoke_t req = {.name = names[k], .arguments = args, .tag = i};
		cr_assert_eq(pc_tool_invoke_start(f->rt, f->reg, &req, f->owner, NULL), 0);
	}
	AWAIT(done_count(f->seen) == 1000, 30000);
	sleep_ms(100);
	cr_assert_eq(done_count(f->seen), 1000u);
	pthread_mutex_lock(&f->seen->lock);
	for (uint32_t i = 0; i < 1000; i++)
		cr_assert_eq(f->seen->per_tag[i], 1u, "tag %u: %u DONE (PINCER_TEST_SEED=0x%llx)", i,
			     f->seen->per_tag[i], (unsigned long long)top_seed);
	cr_assert_eq(f->seen->bad, 0u);
	cr_assert_eq(f->seen->others, 0u);
	pthread_mutex_unlock(&f->seen->lock);
	AWAIT(stats(f->rt).actors_live == f->live0, 10000);
	fx_free(f);
}

/* Invocations of every kind in flight when the runtime stops: every stop
 * handler runs, queued blocking jobs are discarded, running ones finish
 * into dead letters, and LeakSanitizer finds nothing (fx_free). */
Test(tools, shutdown_with_invocations_in_flight)
{
	fx_t *f = fx_new(2);
	for (uint64_t i = 0; i < 200; i++) {
		const char *name = i % 4 == 0 ? "block" : i % 4 == 1 ? "hang" : "sleep";
		pc_tool_invoke_t req = {.name = name, .arguments = "{\"ms\": 5000}", .tag = i};
		if (i % 4 == 0)
			req.arguments = "{\"ms\": 50}";
		cr_assert_eq(pc_tool_invoke_start(f->rt, f->reg, &req, f->owner, NULL), 0);
	}
	sleep_ms(30);
	fx_free(f);
}

Test(tools, invoke_argument_checks)
{
	fx_t *f = fx_new(1);
	pc_tool_invoke_t req = {.name = "clock"};
	cr_assert_eq(pc_tool_invoke_start(NULL, f->reg, &req, f->owner, NULL), PC_EINVAL);
	cr_assert_eq(pc_tool_invoke_start(f->rt, NULL, &req, f->owner, NULL), PC_EINVAL);
	cr_assert_eq(pc_tool_invoke_start(f->rt, f->reg, NULL, f->owner, NULL), PC_EINVAL);
	cr_assert_eq(pc_tool_invoke_start(f->rt, f->reg, &req, NULL, NULL), PC_EINVAL);
	req.name = NULL;
	cr_assert_eq(pc_tool_invoke_start(f->rt, f->reg, &req, f->owner, NULL), PC_EINVAL);
	cr_assert_eq(pc_tool_abort(NULL), PC_EINVAL);
	cr_assert_eq(pc_tool_task_after(NULL, 1, 1), PC_EINVAL);
	cr_assert_eq(pc_tool_task_complete(NULL, NULL), PC_EINVAL);
	fx_free(f);
}

/* ---- task cancel and wake ------------------------------------------------- */

/*
 * "probe": an asynchronous tool that keeps its own data on the task,
 * publishes its waker, and counts what it is told. {"after": ms} completes
 * after a timer; {"fail": true} fails `start`; on_timer(666) fails.
 */
typedef struct probe {
	pthread_mutex_t lock;
	pc_actor_t *waker; /* the latest invocation's */
	uint32_t starts;
	uint32_t timers;
	uint32_t cancels;
	uint32_t cancels_with_data; /* on_cancel found the data start set */
	uint32_t cancel_task_usable; /* complete / after / waker worked inside on_cancel (must stay 0) */
	uint32_t freed;
	uint64_t last_token;
} probe_t;

#define PROBE_MARK 0x5eed

static int probe_start(void *user, pc_tool_task_t *t, const cJSON *args, const pc_tool_env_t *env)
{
	(void)env;
	probe_t *p = user;
	int *mark = malloc(sizeof(*mark));
	if (!mark)
		return PC_ENOMEM;
	*mark = PROBE_MARK;
	pc_tool_task_set_data(t, mark);
	pc_actor_t *w = NULL;
	int rc = pc_tool_task_waker(t, &w);
	if (rc != 0)
		return rc;
	pthread_mutex_lock(&p->lock);
	pc_actor_release(p->waker);
	p->waker = w;
	p->starts++;
	pthread_mutex_unlock(&p->lock);
	if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(args, "fail")))
		return PC_EBUSY;
	const cJSON *after = cJSON_GetObjectItemCaseSensitive(args, "after");
	if (cJSON_IsNumber(after))
		return pc_tool_task_after(t, (uint64_t)after->valuedouble, 1000 + (uint64_t)after->valuedouble);
	return 0;
}

static int probe_timer(void *user, pc_tool_task_t *t, uint64_t token)
{
	probe_t *p = user;
	pthread_mutex_lock(&p->lock);
	p->timers++;
	p->last_token = token;
	pthread_mutex_unlock(&p->lock);
	if (token == 666)
		return PC_ENOTFOUND;
	free(pc_tool_task_data(t));
	pc_tool_task_set_data(t, NULL);
	pc_tool_output_t out = {0};
	if (asprintf(&out.text, "woken %llu", (unsigned long long)token) < 0)
		return PC_ENOMEM;
	return pc_tool_task_complete(t, &out);
}

static void probe_cancel(void *user, pc_tool_task_t *t)
{
	probe_t *p = user;
	int *mark = pc_tool_task_data(t);
	pc_tool_output_t out = {.text = strdup("too late")};
	pc_actor_t *w = NULL;
	bool usable = pc_tool_task_complete(t, &out) != PC_ESTATE || pc_tool_task_after(t, 1, 1) != PC_ESTATE ||
		      pc_tool_task_waker(t, &w) != PC_ESTATE;
	pthread_mutex_lock(&p->lock);
	p->cancels++;
	p->cancels_with_data += mark && *mark == PROBE_MARK;
	p->cancel_task_usable += usable;
	pthread_mutex_unlock(&p->lock);
	free(mark);
	pc_tool_task_set_data(t, NULL);
}

static void probe_free(void *user)
{
	probe_t *p = user;
	pthread_mutex_lock(&p->lock);
	p->freed++;
	pthread_mutex_unlock(&p->lock);
}

/* A task tool without on_timer: it has no waker. */
static int nowake_start(void *user, pc_tool_task_t *t, const cJSON *args, const pc_tool_env_t *env)
{
	(void)user;
	(void)args;
	(void)env;
	pc_actor_t *w = NULL;
	pc_tool_output_t out = {0};
	if (asprintf(&out.text, "waker: %d", pc_tool_task_waker(t, &w)) < 0)
		return PC_ENOMEM;
	return pc_tool_task_complete(t, &out);
}

typedef struct probe_fx {
	fx_t *f;
	probe_t *p;
	pc_tool_registry_t *reg;
} probe_fx_t;

static probe_fx_t probe_fx_new(void)
{
	probe_fx_t px = {.f = fx_new(2), .p = calloc(1, sizeof(probe_t))};
	cr_assert_not_null(px.p);
	pthread_mutex_init(&px.p->lock, NULL);
	cr_assert_eq(pc_tool_registry_new(&px.reg), 0);
	pc_tool_def_t defs[] = {
		{.name = "probe",
		 .start = probe_start,
		 .on_timer = probe_timer,
		 .on_cancel = probe_cancel,
		 .user = px.p,
		 .free_user = probe_free},
		{.name = "nowake", .start = nowake_start},
	};
	for (size_t i = 0; i < sizeof(defs) / sizeof(defs[0]); i++)
		cr_assert_eq(pc_tool_register(px.reg, &defs[i]), 0);
	return px;
}

/* Frees everything; returns the probe's counters (after free_user ran). */
static probe_t probe_fx_free(probe_fx_t *px)
{
	pc_tool_registry_t *reg = px->reg;
	/* Handles go before the runtime that holds their memory. */
	pthread_mutex_lock(&px->p->lock);
	pc_actor_release(px->p->waker);
	px->p->waker = NULL;
	pthread_mutex_unlock(&px->p->lock);
	fx_free(px->f); /* stops the runtime: every invocation has ended */
	pc_tool_registry_free(reg);
	probe_t p = *px->p;
	pthread_mutex_destroy(&px->p->lock);
	free(px->p);
	return p;
}

static probe_t probe_counts(probe_t *p)
{
	pthread_mutex_lock(&p->lock);
	probe_t c = *p;
	pthread_mutex_unlock(&p->lock);
	return c;
}

static pc_actor_t *probe_invoke(probe_fx_t *px, const char *args, uint64_t tag, uint64_t timeout_ms)
{
	pc_tool_invoke_t req = {.name = "probe", .arguments = args, .tag = tag, .timeout_ms = timeout_ms};
	pc_actor_t *a = NULL;
	cr_assert_eq(pc_tool_invoke_start(px->f->rt, px->reg, &req, px->f->owner, &a), 0);
	return a;
}

/* Waits for `n` DONE in all and returns the latest (caller frees .text). */
static rec_t await_done(fx_t *f, uint32_t n)
{
	AWAIT(done_count(f->seen) == n, 10000);
	return last_done(f->seen);
}

Test(tools, task_cancel_on_timeout)
{
	probe_fx_t px = probe_fx_new();
	pc_actor_t *a = probe_invoke(&px, "{}", 1, 50);
	rec_t r = await_done(px.f, 1);
	cr_assert_eq(r.status, PC_TOOL_TIMEOUT, "%s", r.text);
	free(r.text);
	probe_t c = probe_counts(px.p);
	/* on_cancel ran before the DONE went out. */
	cr_assert_eq(c.cancels, 1u);
	cr_assert_eq(c.cancels_with_data, 1u);
	cr_assert_eq(c.timers, 0u);
	pc_tool_abort(a);
	sleep_ms(50);
	pc_actor_release(a);
	c = probe_fx_free(&px);
	cr_assert_eq(c.cancels, 1u);
	cr_assert_eq(c.cancel_task_usable, 0u);
	cr_assert_eq(c.freed, 1u, "free_user runs when the registry is freed");
}

Test(tools, task_cancel_on_abort_and_stop)
{
	probe_fx_t px = probe_fx_new();
	pc_actor_t *a = probe_invoke(&px, "{}", 1, 0);
	AWAIT(probe_counts(px.p).starts == 1, 5000);
	cr_assert_eq(pc_tool_abort(a), 0);
	rec_t r = await_done(px.f, 1);
	cr_assert_eq(r.status, PC_TOOL_ABORTED);
	free(r.text);
	cr_assert_eq(probe_counts(px.p).cancels, 1u);
	pc_tool_abort(a); /* a second abort finds it over */
	pc_actor_release(a);

	a = probe_invoke(&px, "{}", 2, 0);
	AWAIT(probe_counts(px.p).starts == 2, 5000);
	cr_assert_eq(pc_actor_stop(a, PC_EXIT_KILLED), 0);
	r = await_done(px.f, 2);
	cr_assert_eq(r.status, PC_TOOL_ABORTED);
	free(r.text);
	AWAIT(pc_actor_stopped(a), 5000);
	pc_actor_release(a);
	probe_t c = probe_fx_free(&px);
	cr_assert_eq(c.cancels, 2u);
	cr_assert_eq(c.cancels_with_data, 2u);
	cr_assert_eq(c.cancel_task_usable, 0u);
}

Test(tools, task_not_cancelled_after_complete)
{
	probe_fx_t px = probe_fx_new();
	pc_actor_t *a = probe_invoke(&px, "{\"after\": 10}", 1, 0);
	rec_t r = await_done(px.f, 1);
	cr_assert_eq(r.status, PC_TOOL_OK, "%s", r.text);
	cr_assert_str_eq(r.text, "woken 1010");
	free(r.text);
	pc_tool_abort(a);
	AWAIT(pc_actor_stopped(a), 5000);
	sleep_ms(20);
	pc_actor_release(a);
	probe_t c = probe_fx_free(&px);
	cr_assert_eq(c.cancels, 0u);
	cr_assert_eq(c.timers, 1u);
}

/* A failing `start` or on_timer ends the invocation without a result: the
 * task is cancelled, so whatever it holds is let go. */
Test(tools, task_cancel_on_failures)
{
	probe_fx_t px = probe_fx_new();
	pc_actor_t *a = probe_invoke(&px, "{\"fail\": true}", 1, 0);
	rec_t r = await_done(px.f, 1);
	cr_assert_eq(r.status, PC_TOOL_ERROR, "%s", r.text);
	free(r.text);
	cr_assert_eq(probe_counts(px.p).cancels, 1u);
	pc_actor_release(a);

	a = probe_invoke(&px, "{}", 2, 0);
	AWAIT(probe_counts(px.p).starts == 2, 5000);
	pthread_mutex_lock(&px.p->lock);
	pc_actor_t *w = pc_actor_retain(px.p->waker);
	pthread_mutex_unlock(&px.p->lock);
	cr_assert_eq(pc_tool_wake(w, 666), 0);
	r = await_done(px.f, 2);
	cr_assert_eq(r.status, PC_TOOL_CRASHED, "%s", r.text);
	free(r.text);
	pc_actor_release(w);
	pc_actor_release(a);
	probe_t c = probe_fx_free(&px);
	cr_assert_eq(c.cancels, 2u);
	cr_assert_eq(c.cancels_with_data, 2u);
}

typedef struct waker_arg {
	pc_actor_t *w;
	uint64_t token;
	int rc;
} waker_arg_t;

static void *wake_thread(void *arg)
{
	waker_arg_t *wa = arg;
	sleep_ms(20);
	wa->rc = pc_tool_wake(wa->w, wa->token);
	return NULL;
}

/* A thread that is not a worker wakes the task; later wakes, once the
 * invocation is over, reach nothing. */
Test(tools, task_wake_from_other_thread)
{
	probe_fx_t px = probe_fx_new();
	pc_actor_t *a = probe_invoke(&px, "{}", 1, 0);
	AWAIT(probe_counts(px.p).starts == 1, 5000);
	pthread_mutex_lock(&px.p->lock);
	waker_arg_t wa = {.w = pc_actor_retain(px.p->waker), .token = 42};
	pthread_mutex_unlock(&px.p->lock);
	pthread_t th;
	cr_assert_eq(pthread_create(&th, NULL, wake_thread, &wa), 0);
	rec_t r = await_done(px.f, 1);
	cr_assert_eq(pthread_join(th, NULL), 0);
	cr_assert_eq(wa.rc, 0);
	cr_assert_eq(r.status, PC_TOOL_OK, "%s", r.text);
	cr_assert_str_eq(r.text, "woken 42");
	free(r.text);

	/* Late: the invocation is over (its actor may still be stopping). */
	int rc = pc_tool_wake(wa.w, 43);
	cr_assert(rc == 0 || rc == PC_ESTOPPED, "%d", rc);
	AWAIT(pc_actor_stopped(wa.w), 5000);
	/* Later still: the actor is gone. */
	rc = pc_tool_wake(wa.w, 44);
	cr_assert(rc == 0 || rc == PC_ESTOPPED, "%d", rc);
	sleep_ms(50);
	probe_t c = probe_counts(px.p);
	cr_assert_eq(c.timers, 1u);
	cr_assert_eq(c.last_token, 42u);
	cr_assert_eq(done_count(px.f->seen), 1u);
	pc_actor_release(wa.w);
	pc_actor_release(a);
	c = probe_fx_free(&px);
	cr_assert_eq(c.cancels, 0u);
}

Test(tools, task_cancel_on_shutdown)
{
	probe_fx_t px = probe_fx_new();
	for (uint64_t i = 0; i < 20; i++) {
		pc_tool_invoke_t req = {.name = "probe", .arguments = i % 2 ? "{\"after\": 60000}" : "{}", .tag = i};
		cr_assert_eq(pc_tool_invoke_start(px.f->rt, px.reg, &req, px.f->owner, NULL), 0);
	}
	AWAIT(probe_counts(px.p).starts == 20, 5000);
	probe_t c = probe_fx_free(&px);
	cr_assert_eq(c.cancels, 20u);
	cr_assert_eq(c.cancels_with_data, 20u);
	cr_assert_eq(c.timers, 0u);
}

Test(tools, task_api_checks)
{
	probe_fx_t px = probe_fx_new();
	pc_tool_def_t bad = {.name = "callcancel", .call = fail_call, .on_cancel = probe_cancel};
	cr_assert_eq(pc_tool_register(px.reg, &bad), PC_EINVAL);
	pc_actor_t *w = NULL;
	cr_assert_eq(pc_tool_task_waker(NULL, &w), PC_EINVAL);
	cr_assert_eq(pc_tool_wake(NULL, 1), PC_EINVAL);
	cr_assert_null(pc_tool_task_data(NULL));
	pc_tool_invoke_t req = {.name = "nowake", .arguments = "{}"};
	cr_assert_eq(pc_tool_invoke_start(px.f->rt, px.reg, &req, px.f->owner, NULL), 0);
	rec_t r = await_done(px.f, 1);
	char want[32];
	snprintf(want, sizeof(want), "waker: %d", PC_EINVAL);
	cr_assert_str_eq(r.text, want);
	free(r.text);
	probe_t c = probe_fx_free(&px);
	cr_assert_eq(c.freed, 1u);
}
