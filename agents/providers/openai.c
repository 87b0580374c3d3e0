/*
 * OpenAI chat-completions streams (and every compatible server): each SSE
 * data line is a chat.completion.chunk, `[DONE]` ends the stream.
 *
 * Tool calls arrive as fragments keyed by `index`: the first fragment of a
 * call carries its id and name, later ones only pieces of the arguments,
 * and fragments of parallel calls may interleave. A call's end is only
 * known from finish_reason (or [DONE]), so TOOL_CALL_END events come then.
 * Servers that leave out `index` are keyed by id instead; a fragment with
 * neither continues the latest call.
 */
#include "stream_internal.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

int pc__openai_feed(pc_stream_decoder_t *d, const pc_sse_event_t *ev)
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
