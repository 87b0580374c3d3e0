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

/* ---- the owner ----------------------------------------------------------- */

#define MAX_TAGS 1024u

typedef struct rec {
	uint64_t tag;
	pc_tool_status_t status;
	bool is_error;
	bool terminate;
	bool mutating;
	uint64_t duration_us;
	char id[80];
	char name[80];
	char *text;
	size_t text_len;
} rec_t;

typedef struct seen {
	pthread_mutex_t lock;
	uint32_t n;        /* DONE messages, all tags */
	rec_t last;        /* the latest one (text owned) */
	uint32_t per_tag[MAX_TAGS];
	uint32_t bad;      /* malformed DONE messages */
	uint32_t others;   /* messages of any other type */
} seen_t;

static int owner_receive(pc_ctx_t *ctx, void *state, pc_msg_t *msg)
{
	(void)ctx;
	seen_t *s = state;
	pthread_mutex_lock(&s->lock);
	if (msg->type == PC_MSG_TOOL_DONE) {
		const pc_tool_done_msg_t *d = pc_msg_cdata(msg);
		if (!d->text || !d->name || !d->tool_call_id || strlen(d->text) != d->text_len)
			s->bad++;
		free(s->last.text);
		s->last = (rec_t){
			.tag = d->tag,
			.status = d->status,
			.is_error = d->is_error,
			.terminate = d->terminate,
			.mutating = d->mutating,
			.duration_us = d->duration_us,
			.text = strdup(d->text ? d->text : ""),
			.text_len = d->text_len,
		};
		snprintf(s->last.id, sizeof(s->last.id), "%s", d->tool_call_id ? d->tool_call_id : "");
		snprintf(s->last.name, sizeof(s->last.name), "%s", d->name ? d->name : "");
		if (d->tag < MAX_TAGS)
			s->per_tag[d->tag]++;
		s->n++;
	} else {
		s->others++;
	}
	pthread_mutex_unlock(&s->lock);
	return 0;
}

static const pc_behavior_t owner_b = {.name = "owner", .receive = owner_receive};

static uint32_t done_count(seen_t *s)
{
	pthread_mutex_lock(&s->lock);
	uint32_t n = s->n;
	pthread_mutex_unlock(&s->lock);
	return n;
}

/* A copy of the latest DONE; the caller frees .text. */
static rec_t last_done(seen_t *s)
{
	pthread_mutex_lock(&s->lock);
	rec_t r = s->last;
	r.text = strdup(s->last.text ? s->last.text : "");
	pthread_mutex_unlock(&s->lock);
	return r;
}

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
		cr_assert_eq(r.status, PC_TOOL_ERROR, "%s: %s", bad[i], r.text);
		cr_assert(r.is_error);
		cr_assert(starts_with(r.text, "Invalid arguments for tool sleep: expected {\"ms\""), "%s", r.text);
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
	cr_assert_str_eq(r.text, "Tool \"nope\" not found. Available tools: clock, sleep, fail, echo, big, block, "
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
