/*
 * The "openai-completions" wire format: OpenAI chat completions and every
 * compatible server (vLLM, llama.cpp, Ollama, LM Studio, OpenRouter, ...).
 * Its table (wire.h) is at the end.
 *
 * Requests: `stream:true` with `stream_options.include_usage`, the system
 * prompt as the first message, assistant tool calls as `tool_calls`
 * (arguments as a JSON string), tool results as role "tool" messages,
 * thinking blocks dropped, the thinking level as `reasoning_effort`.
 *
 * Streams: each SSE data line is a chat.completion.chunk, `[DONE]` ends it.
 *
 * Tool calls arrive as fragments keyed by `index`: the first fragment of a
 * call carries its id and name, later ones only pieces of the arguments,
 * and fragments of parallel calls may interleave. A call's end is only
 * known from finish_reason (or [DONE]), so TOOL_CALL_END events come then.
 * Servers that leave out `index` are keyed by id instead; a fragment with
 * neither continues the latest call.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "request_internal.h"
#include "stream_internal.h"
#include "wire.h"

/* ---- requests ---- */

/* OpenAI's reasoning_effort; adaptive is medium at this layer (spec:
 * mapThinkingLevel), max is the highest effort there is. */
static const char *effort(pc_think_level_t l)
{
	switch (l) {
	case PC_THINK_MINIMAL: return "minimal";
	case PC_THINK_LOW: return "low";
	case PC_THINK_MEDIUM:
	case PC_THINK_ADAPTIVE: return "medium";
	case PC_THINK_HIGH: return "high";
	case PC_THINK_XHIGH:
	case PC_THINK_MAX: return "xhigh";
	default: return NULL;
	}
}

/* A tool call's arguments as the JSON string OpenAI wants. */
static char *args_string(const cJSON *args)
{
	if (cJSON_IsString(args))
		return strdup(args->valuestring);
	if (cJSON_IsObject(args)) {
		char *s = cJSON_PrintUnformatted(args);
		char *c = s ? strdup(s) : NULL;
		cJSON_free(s);
		return c;
	}
	return strdup("{}");
}

static cJSON *oa_image(const cJSON *blk)
{
	const char *data = pc__req_str(blk, "data");
	const char *mime = pc__req_str(blk, "mimeType");
	if (!data || !mime)
		return NULL;
	size_t n = strlen(data) + strlen(mime) + 16;
	char *url = malloc(n);
	if (!url)
		return NULL;
	snprintf(url, n, "data:%s;base64,%s", mime, data);
	cJSON *part = cJSON_CreateObject();
	cJSON *iu = cJSON_CreateObject();
	bool ok = part && iu && cJSON_AddStringToObject(part, "type", "image_url") &&
		  cJSON_AddStringToObject(iu, "url", url) &&
		  cJSON_AddItemToObject(part, "image_url", iu);
	free(url);
	if (!ok) {
		if (!part || !cJSON_GetObjectItemCaseSensitive(part, "image_url"))
			cJSON_Delete(iu);
		cJSON_Delete(part);
		return NULL;
	}
	return part;
}

static int oa_user(const cJSON *m, cJSON *msgs)
{
	const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
	if (!cJSON_IsString(content) && !cJSON_IsArray(content))
		return PC_EINVAL;
	cJSON *om = cJSON_CreateObject();
	int rc = om ? pc__req_add_str(om, "role", "user") : PC_ENOMEM;
	if (!rc && cJSON_IsString(content)) {
		rc = pc__req_add_str(om, "content", content->valuestring);
	} else if (!rc) {
		cJSON *parts = cJSON_AddArrayToObject(om, "content");
		rc = parts ? 0 : PC_ENOMEM;
		const cJSON *blk;
		cJSON_ArrayForEach(blk, content)
		{
			if (rc)
				break;
			if (pc__req_is_type(blk, "text") && pc__req_str(blk, "text")) {
				cJSON *part = cJSON_CreateObject();
				rc = pc__req_attach(parts, NULL, part);
				if (!rc)
					rc = pc__req_add_str(part, "type", "text");
				if (!rc)
					rc = pc__req_add_str(part, "text", pc__req_str(blk, "text"));
			} else if (pc__req_is_type(blk, "image")) {
				rc = pc__req_str(blk, "data") && pc__req_str(blk, "mimeType")
					     ? pc__req_attach(parts, NULL, oa_image(blk))
					     : PC_EINVAL;
			} else {
				rc = PC_EINVAL;
			}
		}
	}
	if (!rc)
		rc = pc__req_attach(msgs, NULL, om);
	else
		cJSON_Delete(om);
	return rc;
}

static int oa_assistant(const cJSON *m, cJSON *msgs)
{
	const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
	if (!cJSON_IsString(content) && !cJSON_IsArray(content))
		return PC_EINVAL;
	char *text = NULL;
	cJSON *om = NULL, *calls = NULL;
	int rc = pc__req_join_text(content, "", &text);
	if (rc)
		goto out;
	calls = cJSON_CreateArray();
	if (!calls) {
		rc = PC_ENOMEM;
		goto out;
	}
	const cJSON *blocks = cJSON_IsArray(content) ? content : NULL;
	const cJSON *blk;
	cJSON_ArrayForEach(blk, blocks)
	{
		if (pc__req_is_type(blk, "text") || pc__req_is_type(blk, "thinking"))
			continue; /* thinking is not replayed to chat completions */
		if (!pc__req_is_type(blk, "toolCall")) {
			rc = PC_EINVAL;
			goto out;
		}
		const char *id = pc__req_str(blk, "id"), *name = pc__req_str(blk, "name");
		if (!id || !*id || !name || !*name) {
			rc = PC_EINVAL;
			goto out;
		}
		cJSON *call = cJSON_CreateObject();
		cJSON *fn = cJSON_CreateObject();
		char *args = args_string(cJSON_GetObjectItemCaseSensitive(blk, "arguments"));
		rc = pc__req_attach(calls, NULL, call);
		if (!rc)
			rc = pc__req_add_str(call, "id", id);
		if (!rc)
			rc = pc__req_add_str(call, "type", "function");
		if (!rc)
			rc = pc__req_attach(call, "function", fn);
		else
			cJSON_Delete(fn);
		if (!rc)
			rc = pc__req_add_str(fn, "name", name);
		if (!rc)
			rc = args ? pc__req_add_copy(fn, "arguments", args) : PC_ENOMEM;
		free(args);
		if (rc)
			goto out;
	}
	bool has_calls = cJSON_GetArraySize(calls) > 0;
	if (!*text && !has_calls)
		goto out; /* nothing to replay: chat completions rejects it */
	om = cJSON_CreateObject();
	rc = om ? pc__req_add_str(om, "role", "assistant") : PC_ENOMEM;
	if (!rc)
		rc = *text ? pc__req_add_copy(om, "content", text)
			   : (cJSON_AddNullToObject(om, "content") ? 0 : PC_ENOMEM);
	if (!rc && has_calls) {
		rc = pc__req_attach(om, "tool_calls", calls);
		calls = NULL;
	}
	if (!rc) {
		rc = pc__req_attach(msgs, NULL, om);
		om = NULL;
	}
out:
	cJSON_Delete(om);
	cJSON_Delete(calls);
	free(text);
	return rc;
}

static int oa_tool_result(const cJSON *m, cJSON *msgs)
{
	const char *id = pc__req_str(m, "toolCallId");
	const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
	if (!id || !*id || (content && !cJSON_IsString(content) && !cJSON_IsArray(content)))
		return PC_EINVAL;
	char *text = NULL;
	int rc = pc__req_join_text(content, "\n", &text);
	if (rc)
		return rc;
	cJSON *om = cJSON_CreateObject();
	rc = om ? pc__req_add_str(om, "role", "tool") : PC_ENOMEM;
	if (!rc)
		rc = pc__req_add_str(om, "tool_call_id", id);
	if (!rc)
		rc = pc__req_add_copy(om, "content", text);
	free(text);
	if (!rc)
		rc = pc__req_attach(msgs, NULL, om);
	else
		cJSON_Delete(om);
	return rc;
}

static const pc__converters_t openai_messages = {oa_user, oa_assistant, oa_tool_result};

static int oa_tools(const cJSON *tools, cJSON *body)
{
	return pc__req_tools(tools, body, "parameters", true);
}

static int openai_body(const pc_request_params_t *p, cJSON *body)
{
	int rc = pc__req_add_str(body, "model", p->model);
	char *system = NULL;
	if (!rc && p->system_prompt && *p->system_prompt) {
		cJSON *sm = cJSON_CreateObject();
		rc = sm ? pc__req_add_str(sm, "role", "system") : PC_ENOMEM;
		if (!rc)
			rc = pc__req_add_str(sm, "content", p->system_prompt);
		if (!rc && !(system = pc_json_print(sm)))
			rc = PC_ENOMEM;
		cJSON_Delete(sm);
	}
	if (!rc)
		rc = pc__req_messages(body, p, &openai_messages, false, system);
	cJSON_free(system);
	if (!rc && !cJSON_AddTrueToObject(body, "stream"))
		rc = PC_ENOMEM;
	if (!rc) {
		cJSON *so = cJSON_AddObjectToObject(body, "stream_options");
		if (!so || !cJSON_AddTrueToObject(so, "include_usage"))
			rc = PC_ENOMEM;
	}
	const char *limit = p->openai_max_tokens ? "max_tokens" : "max_completion_tokens";
	if (!rc && p->max_tokens > 0 &&
	    !cJSON_AddNumberToObject(body, limit, (double)p->max_tokens))
		rc = PC_ENOMEM;
	if (!rc && p->has_temperature &&
	    !cJSON_AddNumberToObject(body, "temperature", p->temperature))
		rc = PC_ENOMEM;
	if (!rc && effort(p->thinking))
		rc = pc__req_add_str(body, "reasoning_effort", effort(p->thinking));
	if (!rc)
		rc = p->tools_json ? pc__req_add_raw(body, "tools", p->tools_json) : oa_tools(p->tools, body);
	return rc;
}

/* ---- streams ---- */

/* Keys for calls without an index, far from any real one. */
#define KEY_UNINDEXED (INT_MAX / 2)
#define KEY_FUNCTION_CALL (-2) /* the legacy delta.function_call */

static size_t find_tool_by_id(const pc_stream_decoder_t *d, const char *id)
{
	for (size_t i = d->nblocks; i-- > 0;) {
		const pc__block_t *b = &d->blocks[i];
		bool open_call = b->kind == PC_CONTENT_TOOL_CALL && !b->complete;
		if (open_call && b->id && strcmp(b->id, id) == 0)
			return i;
	}
	return PC__NO_BLOCK;
}

static size_t last_open_tool(const pc_stream_decoder_t *d)
{
	for (size_t i = d->nblocks; i-- > 0;)
		if (d->blocks[i].kind == PC_CONTENT_TOOL_CALL && !d->blocks[i].complete)
			return i;
	return PC__NO_BLOCK;
}

/* One tool_calls[] element (or the legacy function_call object, which is
 * shaped like its `function`). */
static int tool_fragment(pc_stream_decoder_t *d, const cJSON *tc, const cJSON *fn, int forced_key)
{
	const char *id = pc__json_str(tc, "id");
	const char *name = cJSON_IsObject(fn) ? pc__json_str(fn, "name") : NULL;
	const char *args = cJSON_IsObject(fn) ? pc__json_str(fn, "arguments") : NULL;
	const cJSON *ix = cJSON_GetObjectItemCaseSensitive(tc, "index");
	size_t blk = PC__NO_BLOCK;
	int key;
	if (forced_key != INT_MIN) {
		key = forced_key;
		blk = pc__stream_key_get(d, key);
	} else if (cJSON_IsNumber(ix)) {
		double v = ix->valuedouble;
		if (!(v >= 0 && v < KEY_UNINDEXED))
			return pc__stream_malformed(d, "tool call index out of range", "", 0);
		key = (int)v;
		blk = pc__stream_key_get(d, key);
	} else {
		key = KEY_UNINDEXED + (int)(d->ntools & 0xFFFFF);
		blk = id && *id ? find_tool_by_id(d, id) : last_open_tool(d);
	}
	if (blk != PC__NO_BLOCK) {
		const pc__block_t *b = &d->blocks[blk];
		/* A different id on a known index is a new call: some servers
		 * number every call 0. A closed call is not reopened. */
		bool other_id = id && *id && b->id && *b->id && strcmp(b->id, id) != 0;
		if (b->complete || other_id) {
			int rc = pc__stream_tool_end(d, blk);
			if (rc)
				return rc;
			blk = PC__NO_BLOCK;
		}
	}
	int rc = 0;
	if (blk == PC__NO_BLOCK) {
		rc = pc__stream_new_block(d, PC_CONTENT_TOOL_CALL, key, &blk);
		if (!rc)
			rc = pc__stream_key_put(d, key, blk);
		if (!rc)
			rc = pc__stream_merge_str(d, &d->blocks[blk].id, id);
		if (!rc)
			rc = pc__stream_merge_str(d, &d->blocks[blk].name, name);
		if (!rc)
			rc = pc__stream_tool_start(d, blk);
	} else {
		/* Ids are whole when they come; names may come in pieces. */
		if (id && *id && (!d->blocks[blk].id || !*d->blocks[blk].id))
			rc = pc__stream_set_str(d, &d->blocks[blk].id, id);
		if (!rc)
			rc = pc__stream_merge_str(d, &d->blocks[blk].name, name);
	}
	if (!rc && args)
		rc = pc__stream_tool_args(d, blk, args, strlen(args));
	return rc;
}

static int finish_reason(pc_stream_decoder_t *d, const char *fr)
{
	pc_stop_reason_t r = PC_STOP_ERROR;
	const char *msg = NULL;
	char buf[160];
	if (strcmp(fr, "stop") == 0) {
		/* Ollama and some vLLM builds say "stop" after tool calls. */
		r = d->ntools ? PC_STOP_TOOL_USE : PC_STOP_STOP;
	} else if (strcmp(fr, "length") == 0) {
		r = PC_STOP_LENGTH;
	} else if (strcmp(fr, "tool_calls") == 0 || strcmp(fr, "function_call") == 0) {
		r = PC_STOP_TOOL_USE;
	} else if (strcmp(fr, "content_filter") == 0 || strcmp(fr, "error") == 0) {
		snprintf(buf, sizeof(buf), "Provider finish_reason: %.100s", fr);
		msg = buf;
	} else {
		snprintf(buf, sizeof(buf), "Unhandled stop reason: %.100s", fr);
		msg = buf;
	}
	int rc = pc__stream_set_stop(d, r, fr, msg);
	if (rc)
		return rc;
	return pc__stream_tool_end_all(d);
}

static int choice(pc_stream_decoder_t *d, const cJSON *c)
{
	const cJSON *ix = cJSON_GetObjectItemCaseSensitive(c, "index");
	if (cJSON_IsNumber(ix) && ix->valuedouble != 0)
		return 0; /* n > 1 was never asked for: only the first choice counts */
	int rc = 0;
	const cJSON *delta = cJSON_GetObjectItemCaseSensitive(c, "delta");
	if (cJSON_IsObject(delta)) {
		/* Reasoning comes before the answer; servers name it differently,
		 * and a few send it under two names at once. */
		static const char *const rkeys[] = {"reasoning_content", "reasoning",
						    "reasoning_text"};
		for (size_t i = 0; i < sizeof(rkeys) / sizeof(rkeys[0]); i++) {
			const char *r = pc__json_str(delta, rkeys[i]);
			if (r && *r) {
				rc = pc__stream_delta(d, PC_CONTENT_THINKING, r, strlen(r));
				break;
			}
		}
		const char *text = pc__json_str(delta, "content");
		if (!rc && text)
			rc = pc__stream_delta(d, PC_CONTENT_TEXT, text, strlen(text));
		const cJSON *tcs = cJSON_GetObjectItemCaseSensitive(delta, "tool_calls");
		if (!cJSON_IsArray(tcs))
			tcs = NULL;
		const cJSON *tc;
		cJSON_ArrayForEach(tc, tcs)
		{
			if (rc)
				break;
			if (!cJSON_IsObject(tc))
				return pc__stream_malformed(d, "tool call is not an object", "", 0);
			rc = tool_fragment(d, tc, cJSON_GetObjectItemCaseSensitive(tc, "function"),
					   INT_MIN);
		}
		const cJSON *fc = cJSON_GetObjectItemCaseSensitive(delta, "function_call");
		if (!rc && cJSON_IsObject(fc))
			rc = tool_fragment(d, fc, fc, KEY_FUNCTION_CALL);
	}
	const char *fr = pc__json_str(c, "finish_reason");
	if (!rc && fr)
		rc = finish_reason(d, fr);
	return rc;
}

static int in_stream_error(pc_stream_decoder_t *d, const cJSON *root, const char *data,
			   size_t len)
{
	const cJSON *e = cJSON_GetObjectItemCaseSensitive(root, "error");
	if (cJSON_IsString(e))
		return pc__stream_error(d, e->valuestring, NULL, data, len);
	if (!cJSON_IsObject(e))
		e = root; /* `event: error` with the fields at the top */
	const char *type = pc__json_str(e, "type");
	const char *code = pc__json_str(e, "code");
	return pc__stream_error(d, pc__json_str(e, "message"), type ? type : code, data, len);
}

static int chunk(pc_stream_decoder_t *d, const cJSON *j)
{
	int rc = 0;
	const char *id = pc__json_str(j, "id");
	if (id && !d->response_id)
		rc = pc__stream_set_str(d, &d->response_id, id);
	const char *model = pc__json_str(j, "model");
	if (!rc && model && !d->model)
		rc = pc__stream_set_str(d, &d->model, model);
	const cJSON *choices = cJSON_GetObjectItemCaseSensitive(j, "choices");
	if (!cJSON_IsArray(choices))
		choices = NULL;
	const cJSON *c;
	cJSON_ArrayForEach(c, choices)
	{
		if (rc)
			break;
		if (!cJSON_IsObject(c))
			return pc__stream_malformed(d, "choice is not an object", "", 0);
		rc = choice(d, c);
	}
	const cJSON *usage = cJSON_GetObjectItemCaseSensitive(j, "usage");
	if (!rc && cJSON_IsObject(usage))
		rc = pc__stream_usage(d, usage);
	return rc;
}

static int openai_feed(pc_stream_decoder_t *d, const pc_sse_event_t *ev)
{
	const char *s = ev->data;
	size_t n = ev->data_len;
	while (n && strchr(" \t\r\n", *s)) {
		s++;
		n--;
	}
	while (n && strchr(" \t\r\n", s[n - 1]))
		n--;
	if (n == 0)
		return 0;
	if (n == 6 && memcmp(s, "[DONE]", 6) == 0) {
		int rc = pc__stream_tool_end_all(d);
		return rc ? rc : pc__stream_terminal(d);
	}
	bool error_event = ev->type && strcmp(ev->type, "error") == 0;
	cJSON *j = cJSON_ParseWithLength(s, n);
	int rc;
	if (!j && error_event) {
		/* `event: error` with plain text. */
		char *msg = strndup(s, n);
		if (!msg)
			return pc__stream_fail(d, PC_ENOMEM, NULL);
		rc = pc__stream_error(d, msg, NULL, s, n);
		free(msg);
		return rc;
	}
	if (!j)
		return pc__stream_malformed(d, "invalid JSON", s, n);
	const cJSON *err = cJSON_GetObjectItemCaseSensitive(j, "error");
	if (!cJSON_IsObject(j))
		rc = pc__stream_malformed(d, "data is not a JSON object", s, n);
	else if (error_event || (err && !cJSON_IsNull(err)))
		rc = in_stream_error(d, j, s, n);
	else
		rc = chunk(d, j);
	cJSON_Delete(j);
	return rc;
}

/* ---- errors ---- */

static void openai_error(int status, const char *body, size_t len, pc_provider_error_t *out)
{
	(void)status;
	pc__wire_error_json(body, len, out); /* {"error":{"message","type","code"}}, and the
					      * shapes compatible servers use */
}

/* ---- the table ---- */

static const char *const openai_headers[] = {
	"Content-Type: application/json",
	"Accept: text/event-stream",
	NULL,
};

const pc_provider_wire_t pc__wire_openai = {
	.api = PC_API_OPENAI_COMPLETIONS,
	.path = "/chat/completions",
	.base_has_version = true,
	.headers = openai_headers,
	.auth_prefix = "Authorization: Bearer ",
	.build_body = openai_body,
	.build_tools = oa_tools,
	.feed = openai_feed,
	.cut_short = "stream ended before [DONE]",
	.parse_error = openai_error,
};
