/*
 * Anthropic messages streams: typed events, message_start, then for each
 * content block content_block_start / _delta... / _stop (keyed by `index`),
 * message_delta with the stop reason and output usage, message_stop. ping
 * is a keep-alive; `error` ends the stream with the provider's error.
 *
 * Blocks we do not keep (server-tool use and results, and whatever types
 * come later) are skipped whole; a delta for an index that never started,
 * or of the wrong kind for its block, is a malformed stream.
 */
#include "stream_internal.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

int pc__anthropic_feed(pc_stream_decoder_t *d, const pc_sse_event_t *ev)
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
