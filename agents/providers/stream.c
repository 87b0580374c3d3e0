/*
 * The API-neutral half of the stream decoders: the assistant message under
 * construction (ordered blocks, tool-call bookkeeping, usage, stop reason,
 * error), the limits, the event callback, and the final result. Each wire
 * format's `feed` (wire.h) turns its events into calls on this.
 */
#include "stream_internal.h"
#include "io/io.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *pc_stop_reason_name(pc_stop_reason_t r)
{
	switch (r) {
	case PC_STOP_STOP: return "stop";
	case PC_STOP_LENGTH: return "length";
	case PC_STOP_TOOL_USE: return "toolUse";
	case PC_STOP_ERROR: return "error";
	case PC_STOP_ABORTED: return "aborted";
	default: return "";
	}
}

/* ---- strings ---- */

const char *pc__json_str(const cJSON *obj, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
	return cJSON_IsString(v) ? v->valuestring : NULL;
}

int pc__stream_fail(pc_stream_decoder_t *d, int rc, const char *msg)
{
	if (!d->err)
		d->err = rc;
	if (!d->error_message && msg)
		d->error_message = strdup(msg); /* best effort: NULL is survivable */
	return rc;
}

int pc__stream_malformed(pc_stream_decoder_t *d, const char *what, const char *data, size_t len)
{
	char msg[160];
	int shown = len > 64 ? 64 : (int)len;
	snprintf(msg, sizeof(msg), "malformed stream: %s: %.*s%s", what, shown, data ? data : "",
		 len > 64 ? "..." : "");
	return pc__stream_fail(d, PC_EINVAL, msg);
}

int pc__stream_set_str(pc_stream_decoder_t *d, char **field, const char *s)
{
	char *c = strdup(s ? s : "");
	if (!c)
		return pc__stream_fail(d, PC_ENOMEM, NULL);
	free(*field);
	*field = c;
	return 0;
}

int pc__stream_merge_str(pc_stream_decoder_t *d, char **field, const char *s)
{
	if (!s || !*s)
		return 0;
	if (!*field || !**field)
		return pc__stream_set_str(d, field, s);
	if (strcmp(*field, s) == 0)
		return 0;
	size_t a = strlen(*field), b = strlen(s);
	if (a + b > 4096)
		return pc__stream_fail(d, PC_ELIMIT, "stream limit: tool call id or name too long");
	char *c = realloc(*field, a + b + 1);
	if (!c)
		return pc__stream_fail(d, PC_ENOMEM, NULL);
	memcpy(c + a, s, b + 1);
	*field = c;
	return 0;
}

/* ---- events ---- */

int pc__stream_emit(pc_stream_decoder_t *d, pc_stream_event_t *ev)
{
	if (!d->fn)
		return 0;
	if (!ev->text)
		ev->text = "";
	if (!ev->id)
		ev->id = "";
	if (!ev->name)
		ev->name = "";
	if (!ev->raw_stop_reason)
		ev->raw_stop_reason = "";
	if (!ev->error_type)
		ev->error_type = "";
	d->in_cb = true;
	int rc = d->fn(d->user, ev);
	d->in_cb = false;
	if (rc)
		return pc__stream_fail(d, rc, "stopped by the event callback");
	return 0;
}

/* ---- blocks ---- */

int pc__stream_new_block(pc_stream_decoder_t *d, pc_content_kind_t kind, int key, size_t *out)
{
	if (d->nblocks >= d->lim.max_blocks)
		return pc__stream_fail(d, PC_ELIMIT, "stream limit: too many content blocks");
	if (kind == PC_CONTENT_TOOL_CALL && d->ntools >= d->lim.max_tool_calls)
		return pc__stream_fail(d, PC_ELIMIT, "stream limit: too many tool calls");
	if (PC__GROW(d->blocks, d->cap, d->nblocks + 1, 8))
		return pc__stream_fail(d, PC_ENOMEM, NULL);
	pc__block_t *b = &d->blocks[d->nblocks];
	memset(b, 0, sizeof(*b));
	b->kind = kind;
	b->key = key;
	if (kind == PC_CONTENT_TOOL_CALL)
		d->ntools++;
	*out = d->nblocks++;
	return 0;
}

int pc__stream_append(pc_stream_decoder_t *d, size_t block, bool signature, const char *s,
		      size_t n)
{
	if (n > d->lim.max_bytes || d->bytes > d->lim.max_bytes - n)
		return pc__stream_fail(d, PC_ELIMIT, "stream limit: response too large");
	pc__block_t *b = &d->blocks[block];
	int rc = pc__buf_append(signature ? &b->sig : &b->text, s, n);
	if (rc)
		return pc__stream_fail(d, rc, NULL);
	if (signature)
		b->has_sig = true;
	d->bytes += n;
	return 0;
}

int pc__stream_block_delta(pc_stream_decoder_t *d, size_t block, bool signature, const char *s,
			   size_t n)
{
	if (n == 0)
		return 0;
	int rc = pc__stream_append(d, block, signature, s, n);
	if (rc)
		return rc;
	const pc__block_t *b = &d->blocks[block];
	const pc__buf_t *buf = signature ? &b->sig : &b->text;
	pc_stream_event_t ev = {
		.kind = signature                     ? PC_STREAM_SIGNATURE_DELTA
			: b->kind == PC_CONTENT_TEXT ? PC_STREAM_TEXT_DELTA
						     : PC_STREAM_THINKING_DELTA,
		.block = block,
		.tool_index = b->key,
		.text = buf->p + buf->len - n,
		.text_len = n,
	};
	return pc__stream_emit(d, &ev);
}

int pc__stream_delta(pc_stream_decoder_t *d, pc_content_kind_t kind, const char *s, size_t n)
{
	if (n == 0)
		return 0;
	size_t blk;
	if (d->nblocks && d->blocks[d->nblocks - 1].kind == kind &&
	    !d->blocks[d->nblocks - 1].redacted) {
		blk = d->nblocks - 1;
	} else {
		int rc = pc__stream_new_block(d, kind, -1, &blk);
		if (rc)
			return rc;
	}
	return pc__stream_block_delta(d, blk, false, s, n);
}

int pc__stream_tool_start(pc_stream_decoder_t *d, size_t block)
{
	pc__block_t *b = &d->blocks[block];
	pc_stream_event_t ev = {
		.kind = PC_STREAM_TOOL_CALL_START,
		.block = block,
		.tool_index = b->key,
		.id = b->id,
		.name = b->name,
	};
	return pc__stream_emit(d, &ev);
}

int pc__stream_tool_args(pc_stream_decoder_t *d, size_t block, const char *s, size_t n)
{
	if (n == 0)
		return 0;
	int rc = pc__stream_append(d, block, false, s, n);
	if (rc)
		return rc;
	pc__block_t *b = &d->blocks[block];
	b->args_streamed = true;
	pc_stream_event_t ev = {
		.kind = PC_STREAM_TOOL_CALL_ARGS,
		.block = block,
		.tool_index = b->key,
		.text = b->text.p + b->text.len - n,
		.text_len = n,
		.id = b->id,
		.name = b->name,
	};
	return pc__stream_emit(d, &ev);
}

/* Arguments that are only whitespace mean "no arguments": "{}". */
static int normalize_args(pc_stream_decoder_t *d, pc__block_t *b)
{
	size_t i = 0;
	while (i < b->text.len && strchr(" \t\r\n", b->text.p[i]))
		i++;
	if (i < b->text.len)
		return 0;
	b->text.len = 0;
	int rc = pc__buf_append(&b->text, "{}", 2);
	return rc ? pc__stream_fail(d, rc, NULL) : 0;
}

static bool args_are_object(const pc__block_t *b)
{
	cJSON *j = cJSON_ParseWithLength(b->text.p, b->text.len);
	bool ok = cJSON_IsObject(j);
	cJSON_Delete(j);
	return ok;
}

static int close_tool(pc_stream_decoder_t *d, size_t block, bool emit)
{
	pc__block_t *b = &d->blocks[block];
	if (b->kind != PC_CONTENT_TOOL_CALL || b->complete)
		return 0;
	int rc = normalize_args(d, b);
	if (rc)
		return rc;
	b->args_object = args_are_object(b);
	if (!emit)
		return 0;
	b->complete = true;
	pc_stream_event_t ev = {
		.kind = PC_STREAM_TOOL_CALL_END,
		.block = block,
		.tool_index = b->key,
		.id = b->id,
		.name = b->name,
		.text = b->text.p,
		.text_len = b->text.len,
		.args_object = b->args_object,
	};
	return pc__stream_emit(d, &ev);
}

int pc__stream_tool_end(pc_stream_decoder_t *d, size_t block)
{
	return close_tool(d, block, true);
}

int pc__stream_tool_end_all(pc_stream_decoder_t *d)
{
	for (size_t i = 0; i < d->nblocks; i++) {
		int rc = close_tool(d, i, true);
		if (rc)
			return rc;
	}
	return 0;
}

int pc__stream_key_put(pc_stream_decoder_t *d, int key, size_t block)
{
	for (size_t i = 0; i < d->nkeys; i++) {
		if (d->keys[i].key == key) {
			d->keys[i].block = block;
			return 0;
		}
	}
	if (PC__GROW(d->keys, d->keycap, d->nkeys + 1, 8))
		return pc__stream_fail(d, PC_ENOMEM, NULL);
	d->keys[d->nkeys++] = (pc__key_t){.key = key, .block = block};
	return 0;
}

size_t pc__stream_key_get(const pc_stream_decoder_t *d, int key)
{
	/* Newest first: a provider may reuse an index after a block ended. */
	for (size_t i = d->nkeys; i-- > 0;)
		if (d->keys[i].key == key)
			return d->keys[i].block;
	return PC__NO_BLOCK;
}

/* ---- usage, stop, error ---- */

int pc__stream_usage(pc_stream_decoder_t *d, const cJSON *usage)
{
	pc_usage_t u;
	if (pc_usage_from_json(usage, &u) != 0)
		return 0; /* no counters in it: nothing to report */
	d->usage = u;
	d->has_usage = true;
	pc_stream_event_t ev = {.kind = PC_STREAM_USAGE, .usage = &d->usage, .tool_index = -1};
	return pc__stream_emit(d, &ev);
}

int pc__stream_set_stop(pc_stream_decoder_t *d, pc_stop_reason_t r, const char *raw,
			const char *error_message)
{
	d->stop = r;
	if (raw) {
		int rc = pc__stream_set_str(d, &d->raw_stop, raw);
		if (rc)
			return rc;
	}
	if (error_message && !d->error_message) {
		int rc = pc__stream_set_str(d, &d->error_message, error_message);
		if (rc)
			return rc;
	}
	return 0;
}

int pc__stream_terminal(pc_stream_decoder_t *d)
{
	d->terminal = true;
	if (d->stop == PC_STOP_NONE)
		d->stop = d->ntools ? PC_STOP_TOOL_USE : PC_STOP_STOP;
	pc_stream_event_t ev = {
		.kind = PC_STREAM_STOP,
		.stop_reason = d->stop,
		.raw_stop_reason = d->raw_stop,
		.tool_index = -1,
	};
	return pc__stream_emit(d, &ev);
}

int pc__stream_error(pc_stream_decoder_t *d, const char *message, const char *type,
		     const char *body, size_t body_len)
{
	int rc = 0;
	if (!message || !*message)
		message = type && *type ? type : "provider error";
	if (!d->error_message)
		rc = pc__stream_set_str(d, &d->error_message, message);
	if (!rc && type && *type && !d->error_type)
		rc = pc__stream_set_str(d, &d->error_type, type);
	if (!rc && body && !d->error_body) {
		d->error_body = strndup(body, body_len);
		if (!d->error_body)
			rc = pc__stream_fail(d, PC_ENOMEM, NULL);
	}
	if (rc)
		return rc;
	d->stop = PC_STOP_ERROR;
	pc_stream_event_t ev = {
		.kind = PC_STREAM_ERROR,
		.text = d->error_message,
		.text_len = strlen(d->error_message),
		.error_type = d->error_type,
		.tool_index = -1,
	};
	rc = pc__stream_emit(d, &ev);
	if (rc)
		return rc;
	return pc__stream_terminal(d);
}

/* ---- the public surface ---- */

int pc_stream_decoder_new(pc_provider_api_t api, pc_stream_event_fn fn, void *user,
			  pc_stream_decoder_t **out)
{
	const pc_provider_wire_t *w = pc_provider_wire(api);
	if (!out || !w)
		return PC_EINVAL;
	pc_stream_decoder_t *d = calloc(1, sizeof(*d));
	if (!d)
		return PC_ENOMEM;
	d->wire = w;
	d->fn = fn;
	d->user = user;
	pc_stream_decoder_set_limits(d, NULL);
	*out = d;
	return 0;
}

int pc_stream_decoder_set_limits(pc_stream_decoder_t *d, const pc_stream_limits_t *limits)
{
	if (!d)
		return PC_EINVAL;
	if (d->fed)
		return PC_ESTATE;
	d->lim.max_tool_calls = limits && limits->max_tool_calls ? limits->max_tool_calls
								: PC_STREAM_DEFAULT_MAX_TOOL_CALLS;
	d->lim.max_blocks = limits && limits->max_blocks ? limits->max_blocks
							: PC_STREAM_DEFAULT_MAX_BLOCKS;
	d->lim.max_bytes = limits && limits->max_bytes ? limits->max_bytes
						      : PC_STREAM_DEFAULT_MAX_BYTES;
	return 0;
}

int pc_stream_decoder_feed_sse(pc_stream_decoder_t *d, const pc_sse_event_t *ev)
{
	if (!d || !ev)
		return PC_EINVAL;
	if (d->in_cb || d->finished || d->aborted)
		return PC_ESTATE;
	if (d->err)
		return d->err;
	d->fed = true;
	if (d->terminal || ev->kind != PC_SSE_MESSAGE || !ev->data || ev->data_len == 0)
		return 0;
	return d->wire->feed(d, ev);
}

void pc_stream_decoder_abort(pc_stream_decoder_t *d)
{
	if (d && !d->finished)
		d->aborted = true;
}

static int build_result(pc_stream_decoder_t *d)
{
	for (size_t i = 0; i < d->nblocks; i++) {
		int rc = close_tool(d, i, false);
		if (rc)
			return rc;
		pc__block_t *b = &d->blocks[i];
		if (b->kind == PC_CONTENT_TOOL_CALL && (!b->id || !*b->id)) {
			char id[32];
			snprintf(id, sizeof(id), "call_%zu", i);
			rc = pc__stream_set_str(d, &b->id, id);
			if (rc)
				return rc;
		}
		if (b->kind == PC_CONTENT_TOOL_CALL && !b->name) {
			rc = pc__stream_set_str(d, &b->name, "");
			if (rc)
				return rc;
		}
		if (!b->text.p) { /* an empty block still hands out "" */
			rc = pc__buf_append(&b->text, "", 0);
			if (rc)
				return pc__stream_fail(d, rc, NULL);
		}
	}
	d->pub = calloc(d->nblocks ? d->nblocks : 1, sizeof(*d->pub));
	if (!d->pub)
		return pc__stream_fail(d, PC_ENOMEM, NULL);
	for (size_t i = 0; i < d->nblocks; i++) {
		const pc__block_t *b = &d->blocks[i];
		d->pub[i] = (pc_content_block_t){
			.kind = b->kind,
			.text = b->text.p,
			.text_len = b->text.len,
			.signature = b->has_sig ? b->sig.p : NULL,
			.redacted = b->redacted,
			.id = b->id,
			.name = b->name,
			.args_object = b->args_object,
			.complete = b->complete,
		};
	}
	return 0;
}

int pc_stream_decoder_finish(pc_stream_decoder_t *d, pc_stream_result_t *out)
{
	if (!d || !out)
		return PC_EINVAL;
	if (d->in_cb)
		return PC_ESTATE;
	if (!d->finished) {
		d->finished = true;
		if (d->aborted) {
			d->stop = PC_STOP_ABORTED;
		} else if (d->err || !d->terminal) {
			d->stop = PC_STOP_ERROR;
			if (!d->error_message)
				pc__stream_set_str(d, &d->error_message, d->wire->cut_short);
		}
		int rc = build_result(d);
		if (rc) {
			free(d->pub);
			d->pub = NULL;
			d->finished = false;
			return rc;
		}
	}
	*out = (pc_stream_result_t){
		.api = d->wire->api,
		.blocks = d->pub,
		.nblocks = d->nblocks,
		.stop_reason = d->stop,
		.raw_stop_reason = d->raw_stop,
		.usage = d->usage,
		.has_usage = d->has_usage,
		.error_message = d->error_message,
		.error_type = d->error_type,
		.error_body = d->error_body,
		.decode_error = d->err,
		.complete = d->terminal && !d->err,
		.response_id = d->response_id,
		.model = d->model,
	};
	return 0;
}

void pc_stream_decoder_free(pc_stream_decoder_t *d)
{
	if (!d)
		return;
	for (size_t i = 0; i < d->nblocks; i++) {
		free(d->blocks[i].text.p);
		free(d->blocks[i].sig.p);
		free(d->blocks[i].id);
		free(d->blocks[i].name);
	}
	free(d->blocks);
	free(d->keys);
	free(d->raw_stop);
	cJSON_Delete(d->usage_raw);
	free(d->error_message);
	free(d->error_type);
	free(d->error_body);
	free(d->response_id);
	free(d->model);
	free(d->pub);
	free(d);
}

/* ---- the unified message ---- */

static cJSON *block_json(const pc_content_block_t *b)
{
	cJSON *o = cJSON_CreateObject();
	if (!o)
		return NULL;
	bool ok = true;
	switch (b->kind) {
	case PC_CONTENT_TEXT:
		ok = cJSON_AddStringToObject(o, "type", "text") &&
		     cJSON_AddStringToObject(o, "text", b->text);
		break;
	case PC_CONTENT_THINKING:
		ok = cJSON_AddStringToObject(o, "type", "thinking") &&
		     cJSON_AddStringToObject(o, "thinking", b->text) &&
		     (!b->signature ||
		      cJSON_AddStringToObject(o, "thinkingSignature", b->signature)) &&
		     (!b->redacted || cJSON_AddTrueToObject(o, "redacted"));
		break;
	case PC_CONTENT_TOOL_CALL: {
		ok = cJSON_AddStringToObject(o, "type", "toolCall") &&
		     cJSON_AddStringToObject(o, "id", b->id) &&
		     cJSON_AddStringToObject(o, "name", b->name);
		if (!ok)
			break;
		cJSON *args = b->args_object ? cJSON_ParseWithLength(b->text, b->text_len) : NULL;
		if (!args)
			args = cJSON_CreateString(b->text);
		if (!args || !cJSON_AddItemToObject(o, "arguments", args)) {
			cJSON_Delete(args);
			ok = false;
		}
		break;
	}
	default:
		ok = false;
	}
	if (!ok) {
		cJSON_Delete(o);
		return NULL;
	}
	return o;
}

int pc_stream_result_to_json(const pc_stream_result_t *r, cJSON **out)
{
	if (!r || !out || (r->nblocks && !r->blocks))
		return PC_EINVAL;
	int rc = PC_ENOMEM;
	cJSON *m = cJSON_CreateObject();
	cJSON *content = NULL;
	if (!m || !cJSON_AddStringToObject(m, "role", "assistant"))
		goto out;
	if (r->api != PC_API_NONE &&
	    !cJSON_AddStringToObject(m, "api", pc_provider_api_name(r->api)))
		goto out;
	content = cJSON_AddArrayToObject(m, "content");
	if (!content)
		goto out;
	for (size_t i = 0; i < r->nblocks; i++) {
		cJSON *b = block_json(&r->blocks[i]);
		if (!b || !cJSON_AddItemToArray(content, b)) {
			cJSON_Delete(b);
			goto out;
		}
	}
	pc_stop_reason_t stop = r->stop_reason == PC_STOP_NONE ? PC_STOP_STOP : r->stop_reason;
	if (!cJSON_AddStringToObject(m, "stopReason", pc_stop_reason_name(stop)))
		goto out;
	cJSON *usage = pc_usage_to_json(&r->usage);
	if (!usage || !cJSON_AddItemToObject(m, "usage", usage)) {
		cJSON_Delete(usage); /* not attached: still ours */
		goto out;
	}
	if (r->error_message && !cJSON_AddStringToObject(m, "errorMessage", r->error_message))
		goto out;
	*out = m;
	m = NULL;
	rc = 0;
out:
	cJSON_Delete(m);
	return rc;
}
