/*
 * libFuzzer target for the streaming response decoders
 * (agents/providers/stream.c, openai.c, anthropic.c) behind the SSE parser
 * (io/sse.c). See fuzz/README.md.
 *
 * Input layout: byte 0 is the plan (bit 0: the API, OpenAI chat
 * completions or Anthropic messages; bits 1-3: how many chunk-size bytes
 * follow; bit 4: small decoder limits, scaled by bits 5-7; without bit 4,
 * bits 5-7 = k > 0 make the event callback stop the decoder at event k*k),
 * then the chunk sizes, then the SSE stream. The stream is decoded whole,
 * in those chunks and (for short inputs) byte by byte; the runs must agree
 * on every event, the assembled result and its JSON. Every event and the
 * result are checked against the decoder's promises; any difference or
 * broken promise traps.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "agents/providers/stream.h"
#include "io/sse.h"
#include "runtime/error.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(c)                                                                                   \
	do {                                                                                       \
		if (!(c))                                                                          \
			__builtin_trap();                                                          \
	} while (0)

/* What the callback returns to stop the decoder: distinct from every
 * PC_E* code, so a stray one cannot pass for it. */
#define STOP_RC 4242

/* What the events said about one block. */
typedef struct seen {
	uint8_t *text, *sig;       /* TEXT/THINKING_DELTA and SIGNATURE_DELTA, joined */
	size_t text_len, sig_len;
	char *end_text, *end_id;   /* TOOL_CALL_END */
	size_t end_len;
	int starts, ends;
} seen_t;

typedef struct run {
	uint8_t *log;
	size_t len, cap;
	pc_stream_decoder_t *d;
	const pc_stream_limits_t *lim; /* the effective limits */
	int stop_at;                   /* stop at this event (1-based), 0: never */
	int events;
	bool stopped;                  /* STOP was seen: nothing may follow */
	bool error_seen;               /* ERROR was seen: STOP must follow */
	size_t starts;                 /* TOOL_CALL_START events */
	bool frozen;                   /* the decoder failed: no more events */
	seen_t *seen;                  /* per block */
	size_t nseen;
} run_t;

static void log_put(run_t *r, const void *s, size_t n)
{
	if (r->len + n > r->cap) {
		size_t cap = r->cap ? r->cap : 512;
		while (cap < r->len + n)
			cap *= 2;
		uint8_t *p = realloc(r->log, cap);
		CHECK(p);
		r->log = p;
		r->cap = cap;
	}
	if (n)
		memcpy(r->log + r->len, s, n);
	r->len += n;
}

static void cat(uint8_t **p, size_t *len, const char *s, size_t n)
{
	uint8_t *q = realloc(*p, *len + n + 1);
	CHECK(q);
	memcpy(q + *len, s, n);
	*len += n;
	*p = q;
}

static seen_t *seen_at(run_t *r, size_t block)
{
	if (block >= r->nseen) {
		size_t n = block + 1;
		seen_t *p = realloc(r->seen, n * sizeof(*p));
		CHECK(p);
		memset(p + r->nseen, 0, (n - r->nseen) * sizeof(*p));
		r->seen = p;
		r->nseen = n;
	}
	return &r->seen[block];
}

static void seen_free(run_t *r)
{
	for (size_t i = 0; i < r->nseen; i++) {
		free(r->seen[i].text);
		free(r->seen[i].sig);
		free(r->seen[i].end_text);
		free(r->seen[i].end_id);
	}
	free(r->seen);
	r->seen = NULL;
	r->nseen = 0;
}

static void log_u64(run_t *r, uint64_t v)
{
	log_put(r, &v, sizeof(v));
}

/* A string with its length; NULL is logged apart from "". */
static void log_str(run_t *r, const char *s, size_t n)
{
	log_u64(r, s ? n : UINT64_MAX);
	if (s)
		log_put(r, s, n);
}

static void log_cstr(run_t *r, const char *s)
{
	log_str(r, s, s ? strlen(s) : 0);
}

static int on_event(void *user, const pc_stream_event_t *ev)
{
	run_t *r = user;
	CHECK(!r->frozen);
	CHECK(!r->stopped); /* STOP is always the last event */
	CHECK(ev->kind >= PC_STREAM_TEXT_DELTA && ev->kind <= PC_STREAM_ERROR);
	CHECK(ev->text && ev->id && ev->name && ev->raw_stop_reason && ev->error_type);
	CHECK(ev->text[ev->text_len] == 0);
	/* Re-entry is refused and changes nothing. */
	pc_sse_event_t e = {.kind = PC_SSE_MESSAGE, .type = "message", .data = "{}", .data_len = 2, .id = ""};
	CHECK(pc_stream_decoder_feed_sse(r->d, &e) == PC_ESTATE);
	pc_stream_result_t res;
	CHECK(pc_stream_decoder_finish(r->d, &res) == PC_ESTATE);
	if (r->error_seen)
		CHECK(ev->kind == PC_STREAM_STOP && ev->stop_reason == PC_STOP_ERROR);
	switch (ev->kind) {
	case PC_STREAM_TEXT_DELTA:
	case PC_STREAM_THINKING_DELTA:
	case PC_STREAM_SIGNATURE_DELTA:
	case PC_STREAM_TOOL_CALL_ARGS: {
		CHECK(ev->text_len > 0);
		CHECK(ev->block < r->lim->max_blocks);
		seen_t *b = seen_at(r, ev->block);
		if (ev->kind == PC_STREAM_SIGNATURE_DELTA)
			cat(&b->sig, &b->sig_len, ev->text, ev->text_len);
		else if (ev->kind != PC_STREAM_TOOL_CALL_ARGS)
			cat(&b->text, &b->text_len, ev->text, ev->text_len);
		else
			CHECK(b->starts == 1 && b->ends == 0); /* arguments of an open call */
		break;
	}
	case PC_STREAM_TOOL_CALL_START:
		CHECK(ev->block < r->lim->max_blocks);
		CHECK(++r->starts <= r->lim->max_tool_calls);
		CHECK(++seen_at(r, ev->block)->starts == 1);
		break;
	case PC_STREAM_TOOL_CALL_END: {
		CHECK(ev->block < r->lim->max_blocks);
		CHECK(ev->text_len > 0); /* "{}" at least */
		seen_t *b = seen_at(r, ev->block);
		CHECK(b->starts == 1 && ++b->ends == 1);
		b->end_text = strndup(ev->text, ev->text_len);
		b->end_id = strdup(ev->id);
		CHECK(b->end_text && b->end_id);
		b->end_len = ev->text_len;
		break;
	}
	case PC_STREAM_USAGE:
		CHECK(ev->usage);
		CHECK(ev->usage->input >= 0 && ev->usage->output >= 0 && ev->usage->cache_read >= 0 &&
		      ev->usage->cache_write >= 0 && ev->usage->total >= 0);
		break;
	case PC_STREAM_STOP:
		CHECK(ev->stop_reason >= PC_STOP_STOP && ev->stop_reason <= PC_STOP_ERROR);
		r->stopped = true;
		break;
	case PC_STREAM_ERROR:
		CHECK(ev->text_len > 0);
		r->error_seen = true;
		break;
	}
	uint8_t k = (uint8_t)ev->kind;
	log_put(r, &k, 1);
	log_u64(r, ev->block);
	log_u64(r, (uint64_t)(int64_t)ev->tool_index);
	log_str(r, ev->text, ev->text_len);
	log_cstr(r, ev->id);
	log_cstr(r, ev->name);
	log_cstr(r, ev->raw_stop_reason);
	log_cstr(r, ev->error_type);
	log_u64(r, ev->args_object);
	log_u64(r, ev->stop_reason);
	if (ev->usage)
		log_put(r, ev->usage, sizeof(*ev->usage));
	if (r->stop_at && ++r->events == r->stop_at)
		return STOP_RC;
	return 0;
}

static int to_decoder(void *user, const pc_sse_event_t *ev)
{
	run_t *r = user;
	return pc_stream_decoder_feed_sse(r->d, ev);
}

static bool nul_terminated(const char *s, size_t n)
{
	return s && s[n] == 0;
}

/* The result against the promises of stream.h, then into the log. */
static void check_result(run_t *r, const pc_stream_result_t *res, int rc)
{
	const pc_stream_limits_t *lim = r->lim;
	CHECK(res->nblocks <= lim->max_blocks);
	CHECK(res->nblocks == 0 || res->blocks);
	size_t tools = 0, bytes = 0;
	for (size_t i = 0; i < res->nblocks; i++) {
		const pc_content_block_t *b = &res->blocks[i];
		CHECK(b->kind == PC_CONTENT_TEXT || b->kind == PC_CONTENT_THINKING ||
		      b->kind == PC_CONTENT_TOOL_CALL);
		CHECK(nul_terminated(b->text, b->text_len));
		bytes += b->text_len;
		if (b->signature)
			bytes += strlen(b->signature);
		if (b->kind == PC_CONTENT_TOOL_CALL) {
			tools++;
			CHECK(b->id && b->name && *b->id);
			CHECK(b->text_len > 0);
			bytes -= b->text_len >= 2 ? 2 : b->text_len; /* "{}" is not counted */
		} else {
			CHECK(!b->args_object && !b->complete);
		}
		if (b->kind != PC_CONTENT_THINKING)
			CHECK(!b->redacted && !b->signature);
		/* The events said what the result holds. */
		const seen_t *e = i < r->nseen ? &r->seen[i] : &(seen_t){0};
		if (b->kind == PC_CONTENT_TOOL_CALL) {
			/* (A failed stream may hold a call it could not announce.) */
			CHECK((e->starts == 1 || (rc && e->starts == 0)) && !e->text && !e->sig);
			CHECK(b->complete == (e->ends == 1));
			if (e->ends) {
				CHECK(e->end_len == b->text_len && memcmp(e->end_text, b->text, b->text_len) == 0);
				CHECK(!*e->end_id || strcmp(e->end_id, b->id) == 0);
			}
		} else {
			CHECK(e->starts == 0 && e->ends == 0);
			if (!b->redacted) {
				CHECK(e->text_len == b->text_len && (!b->text_len || memcmp(e->text, b->text, b->text_len) == 0));
				size_t sl = b->signature ? strlen(b->signature) : 0;
				CHECK(e->sig_len == sl && (!sl || memcmp(e->sig, b->signature, sl) == 0));
			} else {
				CHECK(!e->text && !e->sig);
			}
		}
		log_u64(r, b->kind);
		log_str(r, b->text, b->text_len);
		log_cstr(r, b->signature);
		log_cstr(r, b->id);
		log_cstr(r, b->name);
		log_u64(r, (uint64_t)b->redacted | (uint64_t)b->args_object << 1 | (uint64_t)b->complete << 2);
	}
	CHECK(tools <= lim->max_tool_calls);
	CHECK(tools >= r->starts);
	CHECK(bytes <= lim->max_bytes);
	/* The sticky error is what the feeds returned. */
	CHECK(res->decode_error == rc);
	CHECK(res->complete == (r->stopped && rc == 0));
	if (!res->complete) {
		CHECK(res->stop_reason == PC_STOP_ERROR);
		CHECK(res->error_message);
	}
	if (r->error_seen)
		CHECK(res->stop_reason == PC_STOP_ERROR && res->error_message);
	if (res->stop_reason == PC_STOP_ERROR)
		CHECK(res->error_message && *res->error_message);
	CHECK(res->api == PC_API_OPENAI_COMPLETIONS || res->api == PC_API_ANTHROPIC_MESSAGES);
	log_u64(r, res->nblocks);
	log_u64(r, res->stop_reason);
	log_cstr(r, res->raw_stop_reason);
	log_u64(r, res->has_usage);
	log_put(r, &res->usage, sizeof(res->usage));
	log_cstr(r, res->error_message);
	log_cstr(r, res->error_type);
	log_cstr(r, res->error_body);
	log_u64(r, (uint64_t)(int64_t)res->decode_error);
	log_u64(r, res->complete);
	log_cstr(r, res->response_id);
	log_cstr(r, res->model);

	cJSON *j = NULL;
	CHECK(pc_stream_result_to_json(res, &j) == 0);
	CHECK(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(j, "content")) == (int)res->nblocks);
	char *s = cJSON_PrintUnformatted(j);
	CHECK(s);
	cJSON *back = cJSON_Parse(s); /* what we print, we can read */
	CHECK(back);
	cJSON_Delete(back);
	log_cstr(r, s);
	cJSON_free(s);
	cJSON_Delete(j);
}

/* Decodes `s` fed in chunks sized by `sizes` (cycled; none = whole). */
static void run(pc_provider_api_t api, const pc_stream_limits_t *lim, int stop_at,
		const uint8_t *sizes, size_t nsizes, const uint8_t *s, size_t n, run_t *r)
{
	pc_stream_limits_t eff = {
		.max_tool_calls = lim->max_tool_calls ? lim->max_tool_calls : PC_STREAM_DEFAULT_MAX_TOOL_CALLS,
		.max_blocks = lim->max_blocks ? lim->max_blocks : PC_STREAM_DEFAULT_MAX_BLOCKS,
		.max_bytes = lim->max_bytes ? lim->max_bytes : PC_STREAM_DEFAULT_MAX_BYTES,
	};
	r->lim = &eff;
	r->stop_at = stop_at;
	CHECK(pc_stream_decoder_new(api, on_event, r, &r->d) == 0);
	CHECK(pc_stream_decoder_set_limits(r->d, lim) == 0);
	pc_sse_parser_t *p = NULL;
	CHECK(pc_sse_parser_new(NULL, to_decoder, r, &p) == 0);
	int rc = 0;
	size_t at = 0, k = 0;
	if (nsizes == 0) {
		rc = pc_sse_feed(p, s, n);
		at = n;
	}
	while (at < n && rc == 0) {
		size_t c = sizes[k++ % nsizes];
		if (c == 0)
			c = 1;
		if (c > n - at)
			c = n - at;
		rc = pc_sse_feed(p, s + at, c);
		at += c;
	}
	if (rc == 0)
		rc = pc_sse_finish(p);
	/* Only the decoder can fail here (or the callback through it). */
	CHECK(rc == 0 || rc == PC_EINVAL || rc == PC_ELIMIT || rc == STOP_RC);
	if (rc) {
		/* Errors stick, and nothing more is delivered. */
		r->frozen = true;
		pc_sse_event_t e = {.kind = PC_SSE_MESSAGE, .type = "message",
				    .data = "{\"type\":\"message_stop\"}", .data_len = 24, .id = ""};
		CHECK(pc_stream_decoder_feed_sse(r->d, &e) == rc);
		e.data = "[DONE]";
		e.data_len = 6;
		CHECK(pc_stream_decoder_feed_sse(r->d, &e) == rc);
		r->frozen = false;
	}
	log_u64(r, (uint64_t)(int64_t)rc);
	pc_sse_parser_free(p);

	pc_stream_result_t res, again;
	CHECK(pc_stream_decoder_finish(r->d, &res) == 0);
	check_result(r, &res, rc);
	/* Finish again: the same result; feeds are refused. */
	CHECK(pc_stream_decoder_finish(r->d, &again) == 0);
	CHECK(again.blocks == res.blocks && again.nblocks == res.nblocks &&
	      again.stop_reason == res.stop_reason && again.error_message == res.error_message);
	pc_sse_event_t e = {.kind = PC_SSE_MESSAGE, .type = "message", .data = "[DONE]", .data_len = 6, .id = ""};
	CHECK(pc_stream_decoder_feed_sse(r->d, &e) == PC_ESTATE);
	pc_stream_decoder_free(r->d);
	r->d = NULL;
	seen_free(r);
	r->lim = NULL;
}

static void same(const run_t *a, const run_t *b)
{
	CHECK(a->len == b->len);
	CHECK(a->len == 0 || memcmp(a->log, b->log, a->len) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	uint8_t plan = data[0];
	pc_provider_api_t api = plan & 1 ? PC_API_ANTHROPIC_MESSAGES : PC_API_OPENAI_COMPLETIONS;
	size_t nsizes = (plan >> 1) & 7;
	if (size < 1 + nsizes)
		return 0;
	const uint8_t *sizes = data + 1;
	const uint8_t *s = data + 1 + nsizes;
	size_t n = size - 1 - nsizes;
	unsigned k = (plan >> 5) & 7;

	pc_stream_limits_t lim = {0};
	int stop_at = 0;
	if (plan & 16) {
		/* Small limits, so they are hit often. */
		lim.max_tool_calls = 1 + k / 2;
		lim.max_blocks = 1 + k;
		lim.max_bytes = 1 + k * 9;
	} else if (k) {
		stop_at = (int)(k * k);
	}
	run_t whole = {0}, split = {0};
	run(api, &lim, stop_at, NULL, 0, s, n, &whole);
	run(api, &lim, stop_at, sizes, nsizes, s, n, &split);
	same(&whole, &split);
	if (n <= 1024) {
		static const uint8_t one = 1;
		run_t bytes = {0};
		run(api, &lim, stop_at, &one, 1, s, n, &bytes);
		same(&whole, &bytes);
		free(bytes.log);
	}
	free(whole.log);
	free(split.log);
	return 0;
}
