/*
 * libFuzzer target for the SSE parser (io/sse.c). See fuzz/README.md.
 *
 * Input layout: byte 0 picks the feeding plan and the limits, the next
 * (byte0 & 15) bytes are chunk sizes used in turn, the rest is the stream.
 * The stream is parsed whole and in those chunks; the two runs must give
 * the same events and the same result. Every event is also checked against
 * the parser's promises (limits, valid UTF-8, NUL termination, no NUL in
 * an id). Any difference traps.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "io/sse.h"
#include "runtime/error.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(c)                                                                                   \
	do {                                                                                       \
		if (!(c))                                                                          \
			__builtin_trap();                                                          \
	} while (0)

typedef struct run {
	uint8_t *log;
	size_t len, cap;
	size_t max_line, max_data;
} run_t;

static void log_put(run_t *r, const void *s, size_t n)
{
	if (r->len + n > r->cap) {
		size_t cap = r->cap ? r->cap : 256;
		while (cap < r->len + n)
			cap *= 2;
		uint8_t *p = realloc(r->log, cap);
		CHECK(p);
		r->log = p;
		r->cap = cap;
	}
	memcpy(r->log + r->len, s, n);
	r->len += n;
}

/* An independent strict UTF-8 check (RFC 3629: no overlongs, surrogates
 * or code points past U+10FFFF). */
static bool utf8_valid(const uint8_t *s, size_t n)
{
	size_t i = 0;
	while (i < n) {
		uint8_t c = s[i];
		uint32_t cp;
		size_t k;
		if (c < 0x80) {
			i++;
			continue;
		} else if ((c & 0xE0) == 0xC0) {
			k = 1;
			cp = c & 0x1F;
		} else if ((c & 0xF0) == 0xE0) {
			k = 2;
			cp = c & 0x0F;
		} else if ((c & 0xF8) == 0xF0) {
			k = 3;
			cp = c & 0x07;
		} else {
			return false;
		}
		if (n - i < k + 1)
			return false;
		for (size_t j = 1; j <= k; j++) {
			if ((s[i + j] & 0xC0) != 0x80)
				return false;
			cp = (cp << 6) | (s[i + j] & 0x3F);
		}
		static const uint32_t min[4] = {0, 0x80, 0x800, 0x10000};
		if (cp < min[k] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
			return false;
		i += k + 1;
	}
	return true;
}

static int on_event(void *user, const pc_sse_event_t *ev)
{
	run_t *r = user;
	CHECK(ev->kind == PC_SSE_MESSAGE || ev->kind == PC_SSE_RETRY);
	CHECK(ev->type && ev->data && ev->id);
	CHECK(ev->type[ev->type_len] == 0 && ev->data[ev->data_len] == 0 && ev->id[ev->id_len] == 0);
	CHECK(ev->data_len < r->max_data);
	CHECK(ev->type_len <= 3 * r->max_line && ev->id_len <= 3 * r->max_line);
	CHECK(memchr(ev->id, 0, ev->id_len) == NULL);
	CHECK(utf8_valid((const uint8_t *)ev->type, ev->type_len));
	CHECK(utf8_valid((const uint8_t *)ev->data, ev->data_len));
	CHECK(utf8_valid((const uint8_t *)ev->id, ev->id_len));
	if (ev->kind == PC_SSE_RETRY)
		CHECK(ev->type_len == 0 && ev->data_len == 0);
	else
		CHECK(ev->type_len > 0);
	uint8_t kind = (uint8_t)ev->kind;
	log_put(r, &kind, 1);
	log_put(r, &ev->retry_ms, sizeof(ev->retry_ms));
	log_put(r, &ev->type_len, sizeof(size_t));
	log_put(r, ev->type, ev->type_len);
	log_put(r, &ev->data_len, sizeof(size_t));
	log_put(r, ev->data, ev->data_len);
	log_put(r, &ev->id_len, sizeof(size_t));
	log_put(r, ev->id, ev->id_len);
	return 0;
}

/* Feeds `s` in chunks sized by `sizes` (cycled; none = whole), then
 * finishes. Returns the first nonzero result or 0. */
static int run(const pc_sse_limits_t *lim, const uint8_t *sizes, size_t nsizes, const uint8_t *s,
	       size_t n, run_t *r)
{
	pc_sse_parser_t *p = NULL;
	CHECK(pc_sse_parser_new(lim, on_event, r, &p) == 0);
	int rc = 0;
	size_t at = 0, k = 0;
	if (nsizes == 0) {
		rc = pc_sse_feed(p, s, n);
		at = n;
	}
	while (at < n && rc == 0) {
		size_t c = sizes[k++ % nsizes];
		if (c == 0) {
			rc = pc_sse_feed(p, s + at, 0); /* an empty feed, then one byte */
			CHECK(rc == 0);
			c = 1;
		}
		if (c > n - at)
			c = n - at;
		rc = pc_sse_feed(p, s + at, c);
		at += c;
	}
	if (rc == 0) {
		rc = pc_sse_finish(p);
		CHECK(rc == 0);
		CHECK(pc_sse_feed(p, "\n\n", 2) == PC_ESTATE);
	} else {
		/* Errors stick, and nothing more is delivered. */
		size_t before = r->len;
		CHECK(pc_sse_feed(p, "data: x\n\n", 9) == rc);
		CHECK(pc_sse_finish(p) == rc);
		CHECK(r->len == before);
	}
	CHECK(rc == 0 || rc == PC_ELIMIT); /* the callback never stops it; no ENOMEM expected */
	pc_sse_parser_free(p);
	return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	uint8_t plan = data[0];
	size_t nsizes = plan & 15;
	if (size < 1 + nsizes)
		return 0;
	const uint8_t *sizes = data + 1;
	const uint8_t *s = data + 1 + nsizes;
	size_t n = size - 1 - nsizes;

	pc_sse_limits_t lim = {0};
	if (plan & 16) {
		/* Small limits, so they are hit often. */
		lim.max_line = 1 + ((plan >> 5) & 7) * 5;
		lim.max_data = 1 + ((plan >> 5) & 7) * 7;
	}
	run_t whole = {.max_line = lim.max_line ? lim.max_line : PC_SSE_DEFAULT_MAX_LINE,
		       .max_data = lim.max_data ? lim.max_data : PC_SSE_DEFAULT_MAX_DATA};
	run_t split = whole;
	int rc_whole = run(&lim, NULL, 0, s, n, &whole);
	int rc_split = run(&lim, sizes, nsizes, s, n, &split);
	CHECK(rc_whole == rc_split);
	CHECK(whole.len == split.len);
	CHECK(whole.len == 0 || memcmp(whole.log, split.log, whole.len) == 0);
	if (n <= 512) {
		/* Byte by byte too, for short inputs. */
		static const uint8_t one = 1;
		run_t bytes = {.max_line = whole.max_line, .max_data = whole.max_data};
		CHECK(run(&lim, &one, 1, s, n, &bytes) == rc_whole);
		CHECK(bytes.len == whole.len && (whole.len == 0 || memcmp(bytes.log, whole.log, whole.len) == 0));
		free(bytes.log);
	}
	free(whole.log);
	free(split.log);
	return 0;
}
