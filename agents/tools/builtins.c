/*
 * The built-in tools of the tool layer (tool.h): "clock" and "sleep".
 *
 * They are small on purpose: "clock" is the simplest synchronous tool and
 * "sleep" the simplest asynchronous one (a task driven by the invocation
 * actor's timer), so that the invocation machinery can be exercised end to
 * end without touching the file system or processes.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tool.h"

#define SLEEP_MAX_MS 600000u
/* Above the longest sleep, so that a valid sleep never meets the timeout. */
#define SLEEP_TIMEOUT_MS ((uint64_t)SLEEP_MAX_MS + 10000u)

#define SLEEP_USAGE "Invalid arguments for tool sleep: expected {\"ms\": <integer from 0 to 600000>}"

static int clock_call(void *user, const cJSON *args, const pc_tool_env_t *env, pc_tool_output_t *out)
{
	(void)user;
	(void)args;
	(void)env;
	struct timespec ts;
	struct tm tm;
	char buf[32];
	if (clock_gettime(CLOCK_REALTIME, &ts) != 0 || !gmtime_r(&ts.tv_sec, &tm))
		return PC_ESYS;
	if (strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
		return PC_ESYS;
	out->text = strdup(buf);
	return out->text ? 0 : PC_ENOMEM;
}

/* The "ms" argument, or false when it is missing, not an integer, or out
 * of range: the schema refuses such calls first; this keeps the tool safe
 * when called directly. */
static bool sleep_ms_arg(const cJSON *args, uint64_t *ms)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(args, "ms");
	if (!cJSON_IsNumber(v))
		return false;
	double d = v->valuedouble;
	if (!isfinite(d) || d != floor(d) || d < 0 || d > (double)SLEEP_MAX_MS)
		return false;
	*ms = (uint64_t)d;
	return true;
}

static int sleep_start(void *user, pc_tool_task_t *t, const cJSON *args, const pc_tool_env_t *env)
{
	(void)user;
	(void)env;
	uint64_t ms = 0;
	if (!sleep_ms_arg(args, &ms)) {
		pc_tool_output_t out = {.text = strdup(SLEEP_USAGE), .is_error = true};
		if (!out.text)
			return PC_ENOMEM;
		return pc_tool_task_complete(t, &out);
	}
	/* The token carries the duration back to on_timer. */
	return pc_tool_task_after(t, ms, ms);
}

static int sleep_timer(void *user, pc_tool_task_t *t, uint64_t token)
{
	(void)user;
	char buf[48];
	snprintf(buf, sizeof(buf), "slept %llu ms", (unsigned long long)token);
	pc_tool_output_t out = {.text = strdup(buf)};
	if (!out.text)
		return PC_ENOMEM;
	return pc_tool_task_complete(t, &out);
}

int pc_tool_register_builtins(pc_tool_registry_t *r)
{
	static const pc_tool_def_t clock_def = {
		.name = "clock",
		.description = "Returns the current date and time in UTC, as ISO 8601 (e.g. 2026-11-30T06:45:12Z).",
		.parameters = "{\"type\":\"object\",\"properties\":{},\"additionalProperties\":false}",
		.parallel_safe = true,
		.call = clock_call,
	};
	static const pc_tool_def_t sleep_def = {
		.name = "sleep",
		.description = "Waits for the given number of milliseconds (at most 600000, i.e. 10 minutes), "
			       "then returns.",
		.parameters = "{\"type\":\"object\",\"properties\":{\"ms\":{\"type\":\"integer\",\"minimum\":0,"
			      "\"maximum\":600000,\"description\":\"How long to wait, in milliseconds.\"}},"
			      "\"required\":[\"ms\"],\"additionalProperties\":false}",
		.parallel_safe = true,
		.timeout_ms = SLEEP_TIMEOUT_MS,
		.start = sleep_start,
		.on_timer = sleep_timer,
	};
	int rc = pc_tool_register(r, &clock_def);
	if (rc == 0)
		rc = pc_tool_register(r, &sleep_def);
	return rc;
}
