/*
 * A finished run's answer in the shape OpenClaw's `agent` method returns
 * it (spec §1.19, §8.3): {payloads, meta}, from the run's terminal
 * lifecycle data. The gateway's `agent` answer and `pincer agent --local`
 * both give it, so they cannot drift apart.
 */
#include <string.h>

#include <cjson/cJSON.h>

#include "../agent.h"

static const cJSON *item(const cJSON *o, const char *k)
{
	return cJSON_GetObjectItemCaseSensitive(o, k);
}

static const char *text(const cJSON *o, const char *k)
{
	const char *s = cJSON_GetStringValue(item(o, k));
	return s ? s : "";
}

static bool copy(cJSON *to, const cJSON *from, const char *k)
{
	const cJSON *it = item(from, k);
	return !it || cJSON_AddItemToObject(to, k, cJSON_Duplicate(it, true));
}

/* The reason of the last attempt that failed, from the attempts trace;
 * for a run that never ran, why (model_not_found, queue_overflow, ...). */
static const char *last_reason(const cJSON *d)
{
	const char *reason = text(d, "reason");
	const cJSON *e;
	cJSON_ArrayForEach(e, item(d, "attempts")) {
		if (text(e, "reason")[0])
			reason = text(e, "reason");
	}
	return reason;
}

cJSON *pc_agent_error_meta(const cJSON *d)
{
	const char *kind = text(d, "errorKind"), *status = text(d, "status");
	if (!kind[0] && (!status[0] || !strcmp(status, "ok") || !strcmp(status, "aborted")))
		return NULL;
	const cJSON *pe = item(d, "providerError");
	/* the most specific words: the loop's detail (already redacted), the
	 * provider's own message, the user-facing text */
	const char *message = text(d, "errorDetail");
	if (!message[0])
		message = text(pe, "message");
	if (!message[0])
		message = text(d, "error");
	cJSON *e = cJSON_CreateObject();
	bool ok = e && cJSON_AddStringToObject(e, "kind", kind[0] ? kind : status) &&
		  cJSON_AddStringToObject(e, "message", message[0] ? message : "the run failed");
	if (ok && last_reason(d)[0])
		ok = cJSON_AddStringToObject(e, "reason", last_reason(d)) != NULL;
	if (ok && cJSON_IsNumber(item(pe, "status")))
		ok = cJSON_AddNumberToObject(e, "providerStatus", item(pe, "status")->valuedouble) != NULL;
	if (ok)
		ok = copy(e, d, "fallbackAttempts");
	if (!ok) {
		cJSON_Delete(e);
		return NULL;
	}
	return e;
}

cJSON *pc_agent_run_result(const cJSON *d, const char *status)
{
	static const char *const keys[] = {"stopReason", "errorKind", "livenessState", "replayInvalid", "usage",
					   "lastCallUsage", "promptTokens", "attempts"};
	cJSON *res = cJSON_CreateObject();
	const cJSON *p = item(d, "payloads");
	cJSON *meta = cJSON_CreateObject();
	bool ok = res && meta &&
		  cJSON_AddItemToObject(res, "payloads", cJSON_IsArray(p) ? cJSON_Duplicate(p, true) : cJSON_CreateArray());
	if (ok && cJSON_AddItemToObject(res, "meta", meta))
		ok = true;
	else {
		cJSON_Delete(meta);
		ok = false;
	}
	double started = cJSON_GetNumberValue(item(d, "startedAt")), ended = cJSON_GetNumberValue(item(d, "endedAt"));
	if (ok && started > 0 && ended >= started)
		ok = cJSON_AddNumberToObject(meta, "durationMs", ended - started) != NULL;
	if (ok)
		ok = cJSON_AddStringToObject(meta, "status", status) != NULL;
	if (ok && !strcmp(status, "aborted"))
		ok = cJSON_AddTrueToObject(meta, "aborted") != NULL;
	for (size_t i = 0; ok && i < sizeof(keys) / sizeof(keys[0]); i++)
		ok = copy(meta, d, keys[i]);
	cJSON *error = ok ? pc_agent_error_meta(d) : NULL;
	if (error && !cJSON_AddItemToObject(meta, "error", error)) {
		cJSON_Delete(error);
		ok = false;
	}
	if (!ok) {
		cJSON_Delete(res);
		return NULL;
	}
	return res;
}
