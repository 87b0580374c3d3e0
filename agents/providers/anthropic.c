/*
 * The "anthropic-messages" wire format. Its table (wire.h) is at the end.
 *
 * Requests: `stream:true`, the system prompt top-level, tool calls as
 * tool_use blocks (ids made safe for Anthropic's id pattern), runs of tool
 * results grouped into one user message of tool_result blocks, signed
 * thinking replayed with its signature (unsigned thinking as text), the
 * thinking level as a `thinking` budget.
 *
 * Streams: typed events, message_start, then for each
 * content block content_block_start / _delta... / _stop (keyed by `index`),
 * message_delta with the stop reason and output usage, message_stop. ping
 * is a keep-alive; `error` ends the stream with the provider's error.
 *
 * Blocks we do not keep (server-tool use and results, and whatever types
 * come later) are skipped whole; a delta for an index that never started,
 * or of the wrong kind for its block, is a malformed stream.
 */
#include <ctype.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "request_internal.h"
#include "stream_internal.h"
#include "wire.h"

/* ---- requests ---- */

/* A tool call's arguments as the object Anthropic wants (borrowed when
 * they are one); a string that is not an object becomes {} (the tool
 * already answered it with an error). */
static cJSON *args_object(const cJSON *args)
{
	if (cJSON_IsObject(args))
		return cJSON_CreateObjectReference(args->child);
	if (cJSON_IsString(args)) {
		cJSON *j = cJSON_Parse(args->valuestring);
		if (cJSON_IsObject(j))
			return j;
		cJSON_Delete(j);
	}
	return cJSON_CreateObject();
}

/* Anthropic ids must match ^[a-zA-Z0-9_-]+$. */
static char *safe_id(const char *id)
{
	char *s = strdup(id);
	if (!s)
		return NULL;
	for (char *p = s; *p; p++)
		if (!isalnum((unsigned char)*p) && *p != '_' && *p != '-')
			*p = '_';
	return s;
}

static cJSON *an_image(const cJSON *blk)
{
	const char *data = pc__req_str(blk, "data");
	const char *mime = pc__req_str(blk, "mimeType");
	cJSON *img = cJSON_CreateObject();
	cJSON *src = cJSON_CreateObject();
	bool ok = data && mime && img && src && cJSON_AddStringToObject(img, "type", "image") &&
		  cJSON_AddStringToObject(src, "type", "base64") &&
		  cJSON_AddStringToObject(src, "media_type", mime) && pc__req_add_str(src, "data", data) == 0 &&
		  cJSON_AddItemToObject(img, "source", src);
	if (!ok) {
		if (!img || !cJSON_GetObjectItemCaseSensitive(img, "source"))
			cJSON_Delete(src);
		cJSON_Delete(img);
		return NULL;
	}
	return img;
}

static int an_text_block(cJSON *arr, const char *text)
{
	cJSON *b = cJSON_CreateObject();
	int rc = pc__req_attach(arr, NULL, b);
	if (!rc)
		rc = pc__req_add_str(b, "type", "text");
	if (!rc)
		rc = pc__req_add_str(b, "text", text);
	return rc;
}

/* Text and image blocks (user messages and tool results). Anthropic
 * rejects empty text blocks, so they are skipped. */
static int an_media_blocks(const cJSON *content, cJSON *arr)
{
	const cJSON *blk;
	cJSON_ArrayForEach(blk, content)
	{
		int rc;
		if (pc__req_is_type(blk, "text") && pc__req_str(blk, "text")) {
			const char *t = pc__req_str(blk, "text");
			rc = *t ? an_text_block(arr, t) : 0;
		} else if (pc__req_is_type(blk, "image")) {
			bool whole = pc__req_str(blk, "data") && pc__req_str(blk, "mimeType");
			rc = whole ? pc__req_attach(arr, NULL, an_image(blk)) : PC_EINVAL;
		} else {
			rc = PC_EINVAL;
		}
		if (rc)
			return rc;
	}
	return 0;
}

static int an_user(const cJSON *m, cJSON *msgs)
{
	const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
	if (!cJSON_IsString(content) && !cJSON_IsArray(content))
		return PC_EINVAL;
	cJSON *am = cJSON_CreateObject();
	int rc = am ? pc__req_add_str(am, "role", "user") : PC_ENOMEM;
	if (!rc && cJSON_IsString(content)) {
		rc = pc__req_add_str(am, "content", content->valuestring);
	} else if (!rc) {
		cJSON *arr = cJSON_AddArrayToObject(am, "content");
		rc = arr ? an_media_blocks(content, arr) : PC_ENOMEM;
	}
	if (!rc)
		rc = pc__req_attach(msgs, NULL, am);
	else
		cJSON_Delete(am);
	return rc;
}

static int an_assistant_block(const cJSON *blk, cJSON *arr)
{
	int rc = 0;
	if (pc__req_is_type(blk, "text")) {
		const char *t = pc__req_str(blk, "text");
		if (!t)
			return PC_EINVAL;
		return *t ? an_text_block(arr, t) : 0;
	}
	if (pc__req_is_type(blk, "thinking")) {
		const char *t = pc__req_str(blk, "thinking");
		const char *sig = pc__req_str(blk, "thinkingSignature");
		bool redacted = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(blk, "redacted"));
		if (!t)
			t = "";
		cJSON *b = NULL;
		if (redacted && sig && *sig) {
			b = cJSON_CreateObject();
			rc = pc__req_attach(arr, NULL, b);
			if (!rc)
				rc = pc__req_add_str(b, "type", "redacted_thinking");
			if (!rc)
				rc = pc__req_add_str(b, "data", sig);
		} else if (sig && *sig) {
			b = cJSON_CreateObject();
			rc = pc__req_attach(arr, NULL, b);
			if (!rc)
				rc = pc__req_add_str(b, "type", "thinking");
			if (!rc)
				rc = pc__req_add_str(b, "thinking", t);
			if (!rc)
				rc = pc__req_add_str(b, "signature", sig);
		} else if (*t && !redacted) {
			/* Unsigned thinking (another model's) would be rejected
			 * as thinking; it still tells the model what it thought. */
			rc = an_text_block(arr, t);
		}
		return rc;
	}
	if (pc__req_is_type(blk, "toolCall")) {
		const char *id = pc__req_str(blk, "id"), *name = pc__req_str(blk, "name");
		if (!id || !*id || !name || !*name)
			return PC_EINVAL;
		char *sid = safe_id(id);
		if (!sid)
			return PC_ENOMEM;
		cJSON *b = cJSON_CreateObject();
		rc = pc__req_attach(arr, NULL, b);
		if (!rc)
			rc = pc__req_add_str(b, "type", "tool_use");
		if (!rc)
			rc = pc__req_add_copy(b, "id", sid);
		if (!rc)
			rc = pc__req_add_str(b, "name", name);
		const cJSON *args = cJSON_GetObjectItemCaseSensitive(blk, "arguments");
		if (!rc)
			rc = pc__req_attach(b, "input", args_object(args));
		free(sid);
		return rc;
	}
	return PC_EINVAL;
}

static int an_assistant(const cJSON *m, cJSON *msgs)
{
	const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
	if (!cJSON_IsString(content) && !cJSON_IsArray(content))
		return PC_EINVAL;
	cJSON *am = cJSON_CreateObject();
	cJSON *arr = cJSON_CreateArray();
	int rc = am && arr ? pc__req_add_str(am, "role", "assistant") : PC_ENOMEM;
	if (!rc && cJSON_IsString(content)) {
		if (*content->valuestring)
			rc = an_text_block(arr, content->valuestring);
	} else if (!rc) {
		const cJSON *blk;
		cJSON_ArrayForEach(blk, content)
		{
			rc = an_assistant_block(blk, arr);
			if (rc)
				break;
		}
	}
	if (!rc && cJSON_GetArraySize(arr) > 0) {
		/* An assistant turn with nothing left in it is dropped. */
		rc = pc__req_attach(am, "content", arr);
		arr = NULL;
		if (!rc) {
			rc = pc__req_attach(msgs, NULL, am);
			am = NULL;
		}
	}
	cJSON_Delete(arr);
	cJSON_Delete(am);
	return rc;
}

/* A tool result becomes a tool_result block; the body groups runs of them
 * into one user message. */
static int an_tool_result(const cJSON *m, cJSON *blocks)
{
	const char *id = pc__req_str(m, "toolCallId");
	const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
	if (!id || !*id || (content && !cJSON_IsString(content) && !cJSON_IsArray(content)))
		return PC_EINVAL;
	char *sid = safe_id(id);
	if (!sid)
		return PC_ENOMEM;
	cJSON *tr = cJSON_CreateObject();
	int rc = pc__req_attach(blocks, NULL, tr);
	if (!rc)
		rc = pc__req_add_str(tr, "type", "tool_result");
	if (!rc)
		rc = pc__req_add_copy(tr, "tool_use_id", sid);
	free(sid);
	if (!rc && cJSON_IsString(content) && *content->valuestring) {
		cJSON *arr = cJSON_AddArrayToObject(tr, "content");
		rc = arr ? an_text_block(arr, content->valuestring) : PC_ENOMEM;
	} else if (!rc && cJSON_IsArray(content)) {
		cJSON *arr = cJSON_CreateArray();
		rc = arr ? an_media_blocks(content, arr) : PC_ENOMEM;
		if (!rc && cJSON_GetArraySize(arr) > 0) {
			rc = pc__req_attach(tr, "content", arr);
			arr = NULL;
		}
		cJSON_Delete(arr);
	}
	bool is_error = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(m, "isError"));
	if (!rc && !cJSON_AddBoolToObject(tr, "is_error", is_error))
		rc = PC_ENOMEM;
	return rc;
}

static const pc__converters_t anthropic_messages = {an_user, an_assistant, an_tool_result};

static int an_tools(const cJSON *tools, cJSON *body)
{
	return pc__req_tools(tools, body, "input_schema", false);
}

static int anthropic_body(const pc_request_params_t *p, cJSON *body)
{
	int64_t max_tokens = p->max_tokens > 0 ? p->max_tokens : PC_REQUEST_DEFAULT_MAX_TOKENS;
	int64_t budget = pc_think_budget_tokens(p->thinking);
	if (budget >= max_tokens)
		budget = max_tokens - 1024;
	if (budget < 1024)
		budget = 0;
	int rc = pc__req_add_str(body, "model", p->model);
	if (!rc && !cJSON_AddNumberToObject(body, "max_tokens", (double)max_tokens))
		rc = PC_ENOMEM;
	if (!rc && !cJSON_AddTrueToObject(body, "stream"))
		rc = PC_ENOMEM;
	if (!rc && p->system_prompt && *p->system_prompt)
		rc = pc__req_add_str(body, "system", p->system_prompt);
	if (!rc)
		rc = pc__req_messages(body, p, &anthropic_messages, true, NULL);
	if (!rc)
		rc = p->tools_json ? pc__req_add_raw(body, "tools", p->tools_json) : an_tools(p->tools, body);
	if (!rc && budget) {
		cJSON *th = cJSON_AddObjectToObject(body, "thinking");
		if (!th || !cJSON_AddStringToObject(th, "type", "enabled") ||
		    !cJSON_AddNumberToObject(th, "budget_tokens", (double)budget))
			rc = PC_ENOMEM;
	}
	if (!rc && p->has_temperature && !budget &&
	    !cJSON_AddNumberToObject(body, "temperature", p->temperature))
		rc = PC_ENOMEM;
	return rc;
}

/* ---- streams ---- */

static int block_index(pc_stream_decoder_t *d, const cJSON *j, int *out)
{
	const cJSON *ix = cJSON_GetObjectItemCaseSensitive(j, "index");
	if (!cJSON_IsNumber(ix) || !(ix->valuedouble >= 0 && ix->valuedouble < INT_MAX / 2))
		return pc__stream_malformed(d, "content block without a valid index", "", 0);
	*out = (int)ix->valuedouble;
	return 0;
}

/* message_delta's counts are cumulative and may name input and cache
 * counters too: they replace message_start's, except that a 0 or null
 * never erases a count already known. */
static int merge_usage(pc_stream_decoder_t *d, const cJSON *u)
{
	if (!cJSON_IsObject(u))
		return 0;
	if (!d->usage_raw) {
		d->usage_raw = cJSON_CreateObject();
		if (!d->usage_raw)
			return pc__stream_fail(d, PC_ENOMEM, NULL);
	}
	const cJSON *item;
	cJSON_ArrayForEach(item, u)
	{
		if (!item->string || cJSON_IsNull(item))
			continue;
		cJSON *old = cJSON_GetObjectItemCaseSensitive(d->usage_raw, item->string);
		if (old && cJSON_IsNumber(item) && item->valuedouble <= 0 && cJSON_IsNumber(old) &&
		    old->valuedouble > 0)
			continue;
		cJSON *dup = cJSON_Duplicate(item, true);
		if (!dup)
			return pc__stream_fail(d, PC_ENOMEM, NULL);
		cJSON *raw = d->usage_raw;
		bool ok = old ? cJSON_ReplaceItemInObjectCaseSensitive(raw, item->string, dup)
			      : cJSON_AddItemToObject(raw, item->string, dup);
		if (!ok) {
			cJSON_Delete(dup);
			return pc__stream_fail(d, PC_ENOMEM, NULL);
		}
	}
	return pc__stream_usage(d, d->usage_raw);
}

static int message_start(pc_stream_decoder_t *d, const cJSON *j)
{
	const cJSON *m = cJSON_GetObjectItemCaseSensitive(j, "message");
	if (!cJSON_IsObject(m))
		return 0;
	int rc = 0;
	const char *id = pc__json_str(m, "id");
	if (id && !d->response_id)
		rc = pc__stream_set_str(d, &d->response_id, id);
	const char *model = pc__json_str(m, "model");
	if (!rc && model && !d->model)
		rc = pc__stream_set_str(d, &d->model, model);
	if (!rc)
		rc = merge_usage(d, cJSON_GetObjectItemCaseSensitive(m, "usage"));
	return rc;
}

static int block_start(pc_stream_decoder_t *d, const cJSON *j)
{
	int key = 0;
	int rc = block_index(d, j, &key);
	if (rc)
		return rc;
	const cJSON *cb = cJSON_GetObjectItemCaseSensitive(j, "content_block");
	const char *type = pc__json_str(cb, "type");
	if (!type)
		return pc__stream_malformed(d, "content_block_start without a block type", "", 0);
	size_t blk = PC__NO_BLOCK;
	if (strcmp(type, "text") == 0) {
		rc = pc__stream_new_block(d, PC_CONTENT_TEXT, key, &blk);
		const char *t = pc__json_str(cb, "text");
		if (!rc && t)
			rc = pc__stream_block_delta(d, blk, false, t, strlen(t));
	} else if (strcmp(type, "thinking") == 0) {
		rc = pc__stream_new_block(d, PC_CONTENT_THINKING, key, &blk);
		const char *t = pc__json_str(cb, "thinking");
		if (!rc && t)
			rc = pc__stream_block_delta(d, blk, false, t, strlen(t));
		const char *sig = pc__json_str(cb, "signature");
		if (!rc && sig)
			rc = pc__stream_block_delta(d, blk, true, sig, strlen(sig));
	} else if (strcmp(type, "redacted_thinking") == 0) {
		rc = pc__stream_new_block(d, PC_CONTENT_THINKING, key, &blk);
		if (!rc) {
			d->blocks[blk].redacted = true;
			const char *data = pc__json_str(cb, "data");
			if (!data)
				data = "";
			rc = pc__stream_append(d, blk, true, data, strlen(data));
		}
	} else if (strcmp(type, "tool_use") == 0) {
		rc = pc__stream_new_block(d, PC_CONTENT_TOOL_CALL, key, &blk);
		if (!rc)
			rc = pc__stream_set_str(d, &d->blocks[blk].id, pc__json_str(cb, "id"));
		if (!rc)
			rc = pc__stream_set_str(d, &d->blocks[blk].name, pc__json_str(cb, "name"));
		/* The input usually starts as {} and streams as input_json_delta;
		 * a complete input here is kept unless fragments follow. */
		const cJSON *input = cJSON_GetObjectItemCaseSensitive(cb, "input");
		if (!rc && cJSON_IsObject(input) && input->child) {
			char *s = cJSON_PrintUnformatted(input);
			if (!s)
				return pc__stream_fail(d, PC_ENOMEM, NULL);
			rc = pc__stream_append(d, blk, false, s, strlen(s));
			cJSON_free(s);
		}
		if (!rc)
			rc = pc__stream_tool_start(d, blk);
	}
	/* Any other block type is skipped, but its index is known. */
	if (!rc)
		rc = pc__stream_key_put(d, key, blk);
	return rc;
}

static int block_delta(pc_stream_decoder_t *d, const cJSON *j)
{
	int key = 0;
	int rc = block_index(d, j, &key);
	if (rc)
		return rc;
	size_t blk = PC__NO_BLOCK;
	bool known = false;
	for (size_t i = d->nkeys; i-- > 0;) {
		if (d->keys[i].key == key) {
			blk = d->keys[i].block;
			known = true;
			break;
		}
	}
	if (!known)
		return pc__stream_malformed(d, "delta for a block that never started", "", 0);
	if (blk == PC__NO_BLOCK)
		return 0;
	const cJSON *delta = cJSON_GetObjectItemCaseSensitive(j, "delta");
	const char *type = pc__json_str(delta, "type");
	if (!type)
		return pc__stream_malformed(d, "content_block_delta without a delta type", "", 0);
	pc__block_t *b = &d->blocks[blk];
	const char *s = NULL;
	if (strcmp(type, "text_delta") == 0) {
		if (b->kind != PC_CONTENT_TEXT)
			return pc__stream_malformed(d, "text_delta for a non-text block", "", 0);
		s = pc__json_str(delta, "text");
		return s ? pc__stream_block_delta(d, blk, false, s, strlen(s)) : 0;
	}
	if (strcmp(type, "thinking_delta") == 0 || strcmp(type, "signature_delta") == 0) {
		if (b->kind != PC_CONTENT_THINKING || b->redacted)
			return pc__stream_malformed(d, "thinking delta for another block", "", 0);
		bool sig = type[0] == 's';
		s = pc__json_str(delta, sig ? "signature" : "thinking");
		return s ? pc__stream_block_delta(d, blk, sig, s, strlen(s)) : 0;
	}
	if (strcmp(type, "input_json_delta") == 0) {
		if (b->kind != PC_CONTENT_TOOL_CALL || b->complete)
			return pc__stream_malformed(d, "input_json_delta for another block", "", 0);
		s = pc__json_str(delta, "partial_json");
		if (!s || !*s)
			return 0;
		if (!b->args_streamed && b->text.len) {
			/* Fragments replace an input given at the start. */
			d->bytes -= b->text.len;
			b->text.len = 0;
		}
		return pc__stream_tool_args(d, blk, s, strlen(s));
	}
	return 0; /* citations_delta and later kinds carry nothing we keep */
}

static int block_stop(pc_stream_decoder_t *d, const cJSON *j)
{
	int key = 0;
	int rc = block_index(d, j, &key);
	if (rc)
		return rc;
	size_t blk = pc__stream_key_get(d, key);
	if (blk == PC__NO_BLOCK)
		return 0;
	return pc__stream_tool_end(d, blk); /* no-op for text and thinking */
}

static int message_delta(pc_stream_decoder_t *d, const cJSON *j)
{
	const cJSON *delta = cJSON_GetObjectItemCaseSensitive(j, "delta");
	const char *sr = pc__json_str(delta, "stop_reason");
	int rc = 0;
	if (sr) {
		pc_stop_reason_t r = PC_STOP_ERROR;
		const char *msg = NULL;
		char buf[160];
		if (strcmp(sr, "end_turn") == 0 || strcmp(sr, "stop_sequence") == 0 ||
		    strcmp(sr, "pause_turn") == 0) {
			r = PC_STOP_STOP; /* pause_turn: resubmitting continues it */
		} else if (strcmp(sr, "max_tokens") == 0) {
			r = PC_STOP_LENGTH;
		} else if (strcmp(sr, "tool_use") == 0) {
			r = PC_STOP_TOOL_USE;
		} else if (strcmp(sr, "refusal") == 0) {
			msg = "The model refused to complete the request";
		} else if (strcmp(sr, "sensitive") == 0) {
			msg = "The response was flagged by safety filters";
		} else {
			snprintf(buf, sizeof(buf), "Unhandled stop reason: %.100s", sr);
			msg = buf;
		}
		rc = pc__stream_set_stop(d, r, sr, msg);
	}
	if (!rc)
		rc = merge_usage(d, cJSON_GetObjectItemCaseSensitive(j, "usage"));
	return rc;
}

static int message_stop(pc_stream_decoder_t *d)
{
	int rc = pc__stream_tool_end_all(d);
	return rc ? rc : pc__stream_terminal(d);
}

static int error_event(pc_stream_decoder_t *d, const cJSON *j, const char *data, size_t len)
{
	const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "error");
	if (!cJSON_IsObject(e))
		e = j;
	return pc__stream_error(d, pc__json_str(e, "message"), pc__json_str(e, "type"), data, len);
}

static int anthropic_feed(pc_stream_decoder_t *d, const pc_sse_event_t *ev)
{
	const char *s = ev->data;
	size_t n = ev->data_len;
	bool sse_error = ev->type && strcmp(ev->type, "error") == 0;
	cJSON *j = cJSON_ParseWithLength(s, n);
	if (!j && sse_error) {
		char *msg = strndup(s, n);
		if (!msg)
			return pc__stream_fail(d, PC_ENOMEM, NULL);
		int rc = pc__stream_error(d, msg, NULL, s, n);
		free(msg);
		return rc;
	}
	if (!j)
		return pc__stream_malformed(d, "invalid JSON", s, n);
	int rc = 0;
	const char *type = pc__json_str(j, "type");
	if (!type)
		type = ev->type ? ev->type : "";
	if (!cJSON_IsObject(j))
		rc = pc__stream_malformed(d, "data is not a JSON object", s, n);
	else if (strcmp(type, "message_start") == 0)
		rc = message_start(d, j);
	else if (strcmp(type, "content_block_start") == 0)
		rc = block_start(d, j);
	else if (strcmp(type, "content_block_delta") == 0)
		rc = block_delta(d, j);
	else if (strcmp(type, "content_block_stop") == 0)
		rc = block_stop(d, j);
	else if (strcmp(type, "message_delta") == 0)
		rc = message_delta(d, j);
	else if (strcmp(type, "message_stop") == 0)
		rc = message_stop(d);
	else if (strcmp(type, "error") == 0 || sse_error)
		rc = error_event(d, j, s, n);
	/* ping and unknown event types: nothing to do. */
	cJSON_Delete(j);
	return rc;
}

/* ---- errors ---- */

static void anthropic_error(int status, const char *body, size_t len, pc_provider_error_t *out)
{
	(void)status;
	pc__wire_error_json(body, len, out); /* {"type":"error","error":{"type","message"}} */
}

/* ---- the table ---- */

static const char *const anthropic_headers[] = {
	"content-type: application/json",
	"accept: text/event-stream",
	"anthropic-version: 2023-06-01",
	NULL,
};

const pc_provider_wire_t pc__wire_anthropic = {
	.api = PC_API_ANTHROPIC_MESSAGES,
	.path = "/v1/messages",
	.base_has_version = false,
	.headers = anthropic_headers,
	.auth_prefix = "x-api-key: ",
	.build_body = anthropic_body,
	.build_tools = an_tools,
	.feed = anthropic_feed,
	.cut_short = "stream ended before message_stop",
	.parse_error = anthropic_error,
};
