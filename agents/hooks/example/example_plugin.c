/*
 * An example Pincer plugin (pincer_plugin.h), configured by JSON:
 *
 *   {
 *     "blockTool":   "exec",                     block this tool...
 *     "blockReason": "exec is disabled here",    ...with this reason
 *     "rewrite":     {"arg": "path", "value": "/tmp/safe"},
 *                                                set this argument of any
 *                                                other call that has it
 *     "priority":    10,                         of its before_tool_call hook
 *     "failInit":    true                        refuse to load (after
 *                                                registering its hooks)
 *   }
 *
 * It also counts after_tool_call observations: example_plugin_after_count
 * returns the count, and each observation is logged at debug level.
 *
 * It parses JSON with cJSON, its own choice: the ABI itself is plain text.
 * Built with PINCER_EXAMPLE_BAD_ABI it claims another ABI version, so a
 * host must refuse it before calling anything.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "../pincer_plugin.h"

#ifdef PINCER_EXAMPLE_BAD_ABI
PINCER_PLUGIN_EXPORT const uint32_t pincer_plugin_abi = PINCER_PLUGIN_ABI_VERSION + 1000u;
#else
PINCER_PLUGIN_EXPORT const uint32_t pincer_plugin_abi = PINCER_PLUGIN_ABI_VERSION;
#endif

/* How many after_tool_call observations this plugin has seen. */
PINCER_PLUGIN_EXPORT uint64_t example_plugin_after_count(void);

/* The plugin's state: written by init, read-only while hooks run. */
static struct {
	const pincer_plugin_host_t *host;
	char *block_tool;
	char *block_reason;
	char *rewrite_arg;
	cJSON *rewrite_value;
	uint64_t after_count; /* atomic: hooks run on several threads */
} st;

uint64_t example_plugin_after_count(void)
{
	return __atomic_load_n(&st.after_count, __ATOMIC_ACQUIRE);
}

static void say(int level, const char *msg)
{
	st.host->log(st.host->host_ctx, level, msg);
}

static int answer(pincer_hook_result_t *result, cJSON *out)
{
	char *text = cJSON_PrintUnformatted(out);
	int rc = text ? st.host->set_result(result, text, strlen(text)) : PINCER_PLUGIN_ENOMEM;
	cJSON_free(text);
	return rc;
}

/* {"block":true,"blockReason":...} */
static int answer_block(pincer_hook_result_t *result)
{
	cJSON *out = cJSON_CreateObject();
	int rc = PINCER_PLUGIN_ENOMEM;
	if (out && cJSON_AddTrueToObject(out, "block") &&
	    cJSON_AddStringToObject(out, "blockReason", st.block_reason ? st.block_reason : "blocked by example"))
		rc = answer(result, out);
	cJSON_Delete(out);
	return rc;
}

/* {"params":{<arg>: <value>}} */
static int answer_rewrite(pincer_hook_result_t *result)
{
	cJSON *out = cJSON_CreateObject();
	cJSON *params = cJSON_AddObjectToObject(out, "params");
	cJSON *value = cJSON_Duplicate(st.rewrite_value, true);
	int rc = PINCER_PLUGIN_ENOMEM;
	if (params && value && cJSON_AddItemToObject(params, st.rewrite_arg, value)) {
		value = NULL;
		rc = answer(result, out);
	}
	cJSON_Delete(value);
	cJSON_Delete(out);
	return rc;
}

static int before_tool_call(void *user, const char *input, size_t len, pincer_hook_result_t *result)
{
	(void)user;
	cJSON *in = cJSON_ParseWithLength(input, len);
	const cJSON *event = cJSON_GetObjectItemCaseSensitive(in, "event");
	const cJSON *tool = cJSON_GetObjectItemCaseSensitive(event, "toolName");
	const cJSON *params = cJSON_GetObjectItemCaseSensitive(event, "params");
	int rc = 0;
	if (!cJSON_IsString(tool))
		rc = PINCER_PLUGIN_EINVAL;
	else if (st.block_tool && strcmp(tool->valuestring, st.block_tool) == 0)
		rc = answer_block(result);
	else if (st.rewrite_arg && cJSON_GetObjectItemCaseSensitive(params, st.rewrite_arg))
		rc = answer_rewrite(result);
	cJSON_Delete(in);
	return rc;
}

static int after_tool_call(void *user, const char *input, size_t len, pincer_hook_result_t *result)
{
	(void)user;
	(void)result;
	uint64_t n = __atomic_add_fetch(&st.after_count, 1, __ATOMIC_ACQ_REL);
	cJSON *in = cJSON_ParseWithLength(input, len);
	const cJSON *tool = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(in, "event"), "toolName");
	char line[160];
	snprintf(line, sizeof(line), "after_tool_call #%llu tool=%s", (unsigned long long)n,
		 cJSON_IsString(tool) ? tool->valuestring : "?");
	say(PINCER_LOG_DEBUG, line);
	cJSON_Delete(in);
	return 0;
}

static void clear(void)
{
	free(st.block_tool);
	free(st.block_reason);
	free(st.rewrite_arg);
	cJSON_Delete(st.rewrite_value);
	st.block_tool = st.block_reason = st.rewrite_arg = NULL;
	st.rewrite_value = NULL;
}

static char *string_of(const cJSON *config, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(config, key);
	return cJSON_IsString(v) ? strdup(v->valuestring) : NULL;
}

/* Reads the configuration into st. */
static int configure(const cJSON *config)
{
	st.block_tool = string_of(config, "blockTool");
	st.block_reason = string_of(config, "blockReason");
	const cJSON *rw = cJSON_GetObjectItemCaseSensitive(config, "rewrite");
	if (rw) {
		st.rewrite_arg = string_of(rw, "arg");
		const cJSON *value = cJSON_GetObjectItemCaseSensitive(rw, "value");
		if (!st.rewrite_arg || !value) {
			say(PINCER_LOG_ERROR, "rewrite needs {\"arg\": string, \"value\": any}");
			return PINCER_PLUGIN_EINVAL;
		}
		if (!(st.rewrite_value = cJSON_Duplicate(value, true)))
			return PINCER_PLUGIN_ENOMEM;
	}
	return 0;
}

static int register_hooks(const cJSON *config)
{
	const cJSON *prio = cJSON_GetObjectItemCaseSensitive(config, "priority");
	int priority = cJSON_IsNumber(prio) ? prio->valueint : 0;
	int rc = st.host->register_hook(st.host->host_ctx, "before_tool_call", priority, NULL, 0, before_tool_call,
					NULL);
	if (rc == 0)
		rc = st.host->register_hook(st.host->host_ctx, "after_tool_call", 0, NULL, 0, after_tool_call, NULL);
	return rc;
}

int pincer_plugin_init(const pincer_plugin_host_t *host)
{
	if (!host || host->abi_version != PINCER_PLUGIN_ABI_VERSION || !PINCER_PLUGIN_HOST_HAS(host, set_result))
		return PINCER_PLUGIN_EINVAL;
	st.host = host;
	__atomic_store_n(&st.after_count, 0, __ATOMIC_RELEASE);
	cJSON *config = cJSON_Parse(host->config_json);
	int rc = config ? configure(config) : PINCER_PLUGIN_EINVAL;
	if (rc == 0)
		rc = register_hooks(config);
	if (rc == 0 && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(config, "failInit"))) {
		say(PINCER_LOG_WARN, "refusing to load, as configured (failInit)");
		rc = PINCER_PLUGIN_EINVAL;
	}
	cJSON_Delete(config);
	if (rc != 0) {
		clear();
		return rc;
	}
	say(PINCER_LOG_INFO, "example plugin loaded");
	return 0;
}

void pincer_plugin_fini(void)
{
	say(PINCER_LOG_INFO, "example plugin unloading");
	clear();
}
