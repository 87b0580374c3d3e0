/*
 * The SSE parser (io/sse.c): the WHATWG event stream rules one by one,
 * limits, callback stops, UTF-8 repair, samples shaped like provider
 * streams, and a property test that any way of splitting a stream into
 * feeds gives the same events (and the same final result) as one feed.
 */
#include <criterion/criterion.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "io/sse.h"

/* ---- collecting what the callback sees ---- */

typedef struct rec {
	int kind;
	char *type, *data, *id;
	size_t type_len, data_len, id_len;
	uint64_t retry_ms;
} rec_t;

typedef struct coll {
	rec_t *v;
	size_t n, cap;
	size_t stop_at; /* return stop_rc from the callback for event #stop_at (1-based); 0 = never */
	int stop_rc;
	pc_sse_parser_t *self; /* for the re-entry test */
	int reentry_rc;
} coll_t;

static char *dup_n(const char *s, size_t n)
{
	char *d = malloc(n + 1);
	cr_assert(d);
	memcpy(d, s, n);
	d[n] = 0;
	return d;
}

static int collect(void *user, const pc_sse_event_t *ev)
{
	coll_t *c = user;
	/* Promised: never NULL, NUL-terminated. */
	cr_assert(ev->type && ev->data && ev->id);
	cr_assert_eq(ev->type[ev->type_len], 0);
	cr_assert_eq(ev->data[ev->data_len], 0);
	cr_assert_eq(ev->id[ev->id_len], 0);
	if (c->n == c->cap) {
		c->cap = c->cap ? c->cap * 2 : 8;
		c->v = realloc(c->v, c->cap * sizeof(*c->v));
		cr_assert(c->v);
	}
	c->v[c->n++] = (rec_t){
		.kind = ev->kind,
		.type = dup_n(ev->type, ev->type_len),
		.data = dup_n(ev->data, ev->data_len),
		.id = dup_n(ev->id, ev->id_len),
		.type_len = ev->type_len,
		.data_len = ev->data_len,
		.id_len = ev->id_len,
		.retry_ms = ev->retry_ms,
	};
	if (c->self)
		c->reentry_rc = pc_sse_feed(c->self, "x", 1);
	if (c->stop_at && c->n == c->stop_at)
		return c->stop_rc;
	return 0;
}

static void coll_free(coll_t *c)
{
	for (size_t i = 0; i < c->n; i++) {
		free(c->v[i].type);
		free(c->v[i].data);
		free(c->v[i].id);
	}
	free(c->v);
	memset(c, 0, sizeof(*c));
}

static bool same_events(const coll_t *a, const coll_t *b)
{
	if (a->n != b->n)
		return false;
	for (size_t i = 0; i < a->n; i++) {
		const rec_t *x = &a->v[i], *y = &b->v[i];
		if (x->kind != y->kind || x->retry_ms != y->retry_ms || x->type_len != y->type_len ||
		    x->data_len != y->data_len || x->id_len != y->id_len ||
		    memcmp(x->type, y->type, x->type_len) || memcmp(x->data, y->data, x->data_len) ||
		    memcmp(x->id, y->id, x->id_len))
			return false;
	}
	return true;
}

/* Feeds `s` cut at the (ascending) offsets in `cuts`, then finishes. Returns
 * the first nonzero result, or 0. */
static int parse_split(const char *s, size_t n, const size_t *cuts, size_t ncuts,
		       const pc_sse_limits_t *lim, coll_t *c)
{
	pc_sse_parser_t *p = NULL;
	cr_assert_eq(pc_sse_parser_new(lim, collect, c, &p), 0);
	size_t at = 0;
	int rc = 0;
	for (size_t i = 0; i <= ncuts && rc == 0; i++) {
		size_t end = i < ncuts ? cuts[i] : n;
		rc = pc_sse_feed(p, s + at, end - at);
		at = end;
	}
	if (rc == 0)
		rc = pc_sse_finish(p);
	pc_sse_parser_free(p);
	return rc;
}

static int parse(const char *s, size_t n, const pc_sse_limits_t *lim, coll_t *c)
{
	return parse_split(s, n, NULL, 0, lim, c);
}

#define PARSE(lit, c) parse((lit), sizeof(lit) - 1, NULL, (c))

static void expect_msg(const coll_t *c, size_t i, const char *type, const char *data, const char *id)
{
	cr_assert_lt(i, c->n, "only %zu events", c->n);
	const rec_t *r = &c->v[i];
	cr_assert_eq(r->kind, PC_SSE_MESSAGE, "event %zu is not a message", i);
	cr_assert_str_eq(r->type, type, "event %zu type", i);
	cr_assert_eq(r->type_len, strlen(type));
	cr_assert_str_eq(r->data, data, "event %zu data", i);
	cr_assert_eq(r->data_len, strlen(data), "event %zu data length", i);
	cr_assert_str_eq(r->id, id, "event %zu id", i);
	cr_assert_eq(r->id_len, strlen(id));
}

/* ---- the rules ---- */

Test(sse, simple_event)
{
	coll_t c = {0};
	cr_assert_eq(PARSE("data: hello\n\n", &c), 0);
	cr_assert_eq(c.n, 1);
	expect_msg(&c, 0, "message", "hello", "");
	coll_free(&c);
	ASSERT_NO_LEAKS();
}

Test(sse, default_type_is_message)
{
	coll_t c = {0};
	/* An empty event field leaves the type buffer empty. */
	cr_assert_eq(PARSE("event:\ndata: a\n\nevent\ndata: b\n\n", &c), 0);
	cr_assert_eq(c.n, 2);
	expect_msg(&c, 0, "message", "a", "");
	expect_msg(&c, 1, "message", "b", "");
	coll_free(&c);
	ASSERT_NO_LEAKS();
}

Test(sse, named_event_and_type_reset)
{
	coll_t c = {0};
	cr_assert_eq(PARSE("event: update\ndata: x\n\ndata: y\n\nevent: a\nevent: b\ndata: z\n\n", &c), 0);
	cr_assert_eq(c.n, 3);
	expect_msg(&c, 0, "update", "x", "");
	expect_msg(&c, 1, "message", "y", ""); /* the type buffer was reset */
	expect_msg(&c, 2, "b", "z", "");       /* the last event field wins */
	coll_free(&c);
	ASSERT_NO_LEAKS();
}

Test(sse, multiline_data_joined_with_lf)
{
	coll_t c = {0};
	cr_assert_eq(PARSE("data: a\ndata: b\ndata:c\n\n", &c), 0);
	cr_assert_eq(c.n, 1);
	expect_msg(&c, 0, "message", "a\nb\nc", "");
	coll_free(&c);
	ASSERT_NO_LEAKS();
}

Test(sse, only_one_leading_space_stripped)
{
	coll_t c = {0};
	cr_assert_eq(PARSE("data:  two\n\ndata:none\n\ndata:\tx\n\ndata: trail \n\n", &c), 0);
	cr_assert_eq(c.n, 4);
	expect_msg(&c, 0, "message", " two", "");
	expect_msg(&c, 1, "message", "none", "");
	expect_msg(&c, 2, "message", "\tx", "");
	expect_msg(&c, 3, "message", "trail ", "");
	coll_free(&c);
	ASSERT_NO_LEAKS();
}

Test(sse, field_without_colon)
{
	coll_t c = {0};
	/* "data" alone appends an empty line; "event" alone empties the type;
	 * a value after the first colon keeps later colons. */
	cr_assert_eq(PARSE("event: x\nevent\ndata\ndata: a:b\n\n", &c), 0);
	cr_assert_eq(c.n, 1);
	expect_msg(&c, 0, "message", "\na:b", "");
	coll_free(&c);
	ASSERT_NO_LEAKS();
}

Test(sse, comments_ignored)
{
	coll_t c = {0};
	cr_assert_eq(PARSE(": hello\n:\ndata: x\n: data: y\n\n:only a comment\n\n", &c), 0);
	cr_assert_eq(c.n, 1);
	expect_msg(&c, 0, "message", "x", "");
	coll_free(&c);
	ASSERT_NO_LEAKS();
}

Test(sse, unknown_fields_ignored)
{
	coll_t c = {0};
	cr_assert_eq(PARSE("Data: no\nfoo: bar\ndata : no\n data: no\ndata: yes\n\n", &c), 0);
	cr_assert_eq(c.n, 1);
	expect_msg(&c, 0, "message", "yes", "");
	coll_free(&c);
	ASSERT_NO_LEAKS();
}

Test(sse, line_ends_cr_lf_crlf_and_mixes)
{
	static const char *const streams[] = {
		"data: a\ndata: b\n\ndata: c\n\n",
		"data: a\rdata: b\r\rdata: c\r\r",
		"data: a\r\ndata: b\r\n\r\ndata: c\r\n\r\n",
		"data: a\rdata: b\n\r\ndata: c\r\n\r",
		"data: a\r\ndata: b\r\ndata: c\r\n\n",
	};
	for (size_t k = 0; k < sizeof(streams) / sizeof(streams[0]); k++) {
		coll_t c = {0};
		cr_assert_eq(parse(streams[k], strlen(streams[k]), NULL, &c), 0);
		if (k < 4) {
			cr_assert_eq(c.n, 2, "stream %zu: %zu events", k, c.n);
			expect_msg(&c, 0, "message", "a\nb", "");
			expect_msg(&c, 1, "message", "c", "");
		} else {
			cr_assert_eq(c.n, 1, "stream %zu: %zu events", k, c.n);
			expect_msg(&c, 0, "message", "a\nb\nc", "");
		}
		coll_free(&c);
	}
	/* LF CR is two line ends, so a blank line between. */
	coll_t c = {0};
	cr_assert_eq(PARSE("data: a\n\rdata: b\n\n", &c), 0);
	cr_assert_eq(c.n, 2);
	expect_msg(&c, 0, "message", "a", "");
	expect_msg(&c, 1, "message", "b", "");
	coll_free(&c);
	ASSERT_NO_LEAKS();
}

Test(sse, crlf_split_across_feeds)
{
	/* Were the LF after a chunk-final CR taken as its own line end, the
	 * first event would be dispatched early, with data "a" only. */
	const char s[] = "data: a\r\ndata: b\r\n\r\n";
	size_t cut1[] = {8};          /* after the first CR */
	size_t cut2[] = {8, 17, 19};  /* after every CR */
	size_t cut3[] = {8, 9, 17, 18, 19}; /* lone LFs as their own feeds */
	const size_t *cuts[] = {cut1, cut2, cut3};
	size_t ncuts[] = {1, 3, 5};
	for (size_t k = 0; k < 3; k++) {
		coll_t c = {0};
		cr_assert_eq(parse_split(s, sizeof(s) - 1, cuts[k], ncuts[k], NULL, &c), 0);
		cr_assert_eq(c.n, 1, "split %zu: %zu events", k, c.n);
		expect_msg(&c, 0, "message", "a\nb", "");
		coll_free(&c);
	}
	/* A CR at the end of a feed followed by a CR: two line ends. */
	const char t[] = "data: a\r\rdata: b\r\r";
	size_t cut4[] = {8, 17};
	coll_t c = {0};
	cr_assert_eq(parse_split(t, sizeof(t) - 1, cut4, 2, NULL, &c), 0);
	cr_assert_eq(c.n, 2);
	expect_msg(&c, 0, "message", "a", "");
	expect_msg(&c, 1, "message", "b", "");
	coll_free(&c);
	ASSERT_NO_LEAKS();
}

Test(sse, bom_skipped_once)
{
	const char s[] = "\xEF\xBB\xBF" "data: x\n\n";
	for (size_t cut = 0; cut <= 4; cut++) {
		coll_t c = {0};
		cr_assert_eq(parse_split(s, sizeof(s) - 1, &cut, 1, NULL, &c), 0);
		cr_assert_eq(c.n, 1, "cut at %zu", cut);
		expect_msg(&c, 0, "message", "x", "");
		coll_free(&c);
	}
	/* A second BOM is content: the field name becomes "\uFEFFdata". */
	coll_t c = {0};
	cr_assert_eq(PARSE("\xEF\xBB\xBF\xEF\xBB\xBF" "data: x\n\ndata: y\n\n", &c), 0);
	cr_assert_eq(c.n, 1);
	expect_msg(&c, 0, "message", "y", "");
	coll_free(&c);
	/* A BOM that is not at the very start is content, even in a value. */
	cr_assert_eq(PARSE("data: \xEF\xBB\xBF" "z\n\n", &c), 0);
	cr_assert_eq(c.n, 1);
	expect_msg(&c, 0, "message", "\xEF\xBB\xBF" "z", "");
	coll_free(&c);
	/* A BOM prefix that breaks off is replayed as content: "\xEF\xBB" then
	 * "data" makes an unknown field (and the replay keeps line ends). */
	const char u[] = "\xEF\xBB\n" "data: w\n\n";
	for (size_t cut = 0; cut <= 3; cut++) {
		cr_assert_eq(parse_split(u, sizeof(u) - 1, &cut, 1, NULL, &c), 0);
		cr_assert_eq(c.n, 1, "cut at %zu", cut);
		expect_msg(&c, 0, "message", "w", "");
		coll_free(&c);
	}
	ASSERT_NO_LEAKS();
}

Test(sse, bom_again_after_reset)
{
	coll_t c = {0};
	pc_sse_parser_t *p = NULL;
	cr_assert_eq(pc_sse_parser_new(NULL, collect, &c, &p), 0);
	const char s[] = "\xEF\xBB\xBF" "data: x\n\n";
	cr_assert_eq(pc_sse_feed(p, s, sizeof(s) - 1), 0);
	cr_assert_eq(pc_sse_feed(p, s, sizeof(s) - 1), 0); /* mid-stream: not skipped */
	cr_assert_eq(c.n, 1);
	pc_sse_reset(p);
	cr_assert_eq(pc_sse_feed(p, s, sizeof(s) - 1), 0); /* a new stream: skipped */
	cr_assert_eq(c.n, 2);
	expect_msg(&c, 1, "message", "x", "");
	pc_sse_parser_free(p);
	coll_free(&c);
	ASSERT_NO_LEAKS();
}

Test(sse, id_persists_and_nul_ignored)
{
	const char s[] = "id: 1\ndata: a\n\n"
			 "data: b\n\n"
			 "id: 2\0x\ndata: c\n\n" /* NUL: ignored, id stays 1 */
			 "id\ndata: d\n\n"       /* an empty id resets it */
			 "id: 7\n\n"             /* set without dispatch */
			 "data: e\n\n";
	coll_t c = {0};
	pc_sse_parser_t *p = NULL;
	cr_assert_eq(pc_sse_parser_new(NULL, collect, &c, &p), 0);
	cr_assert_eq(pc_sse_feed(p, s, sizeof(s) - 1), 0);
	cr_assert_eq(c.n, 5);
	expect_msg(&c, 0, "message", "a", "1");
	expect_msg(&c, 1, "message", "b", "1");
	expect_msg(&c, 2, "message", "c", "1");
	expect_msg(&c, 3, "message", "d", "");
	expect_msg(&c, 4, "message", "e", "7");
	size_t n = 99;
	cr_assert_str_eq(pc_sse_last_event_id(p, &n), "7");
	cr_assert_eq(n, 1);
	/* The string follows the buffer only at a blank line... */
	cr_assert_eq(pc_sse_feed(p, "id: 8\n", 6), 0);
	cr_assert_str_eq(pc_sse_last_event_id(p, NULL), "7");
	cr_assert_eq(pc_sse_feed(p, "\n", 1), 0);
	cr_assert_str_eq(pc_sse_last_event_id(p, NULL), "8");
	/* ...survives finish and is cleared by reset. */
	cr_assert_eq(pc_sse_finish(p), 0);
	cr_assert_str_eq(pc_sse_last_event_id(p, NULL), "8");
	pc_sse_reset(p);
	cr_assert_str_eq(pc_sse_last_event_id(p, &n), "");
	cr_assert_eq(n, 0);
	pc_sse_parser_free(p);
	coll_free(&c);
	ASSERT_NO_LEAKS();
}

Test(sse, retry_digits_only)
{
	coll_t c = {0};
	cr_assert_eq(PARSE("retry: 1500\n"
			   "retry: 15a\nretry: -1\nretry:\nretry: 1.5\nretry:  15\nretry: +3\nretry: 0x10\n"
			   "retry:0\n"
			   "retry: 99999999999999999999999999\n"
			   "id: 4\nretry: 7\n",
			   &c),
		     0);
	cr_assert_eq(c.n, 4);
	uint64_t want[] = {1500, 0, UINT64_MAX, 7};
	for (size_t i = 0; i < 4; i++) {
		cr_assert_eq(c.v[i].kind, PC_SSE_RETRY);
		cr_assert_eq(c.v[i].retry_ms, want[i], "retry %zu: %llu", i, (unsigned long long)c.v[i].retry_ms);
		cr_assert_eq(c.v[i].data_len, 0);
		cr_assert_eq(c.v[i].type_len, 0);
	}
	/* The id it carries is the committed one, not the pending "4". */
	cr_assert_str_eq(c.v[3].id, "");
	coll_free(&c);
	ASSERT_NO_LEAKS();
}

Test(sse, empty_data_lines)
{
	coll_t c = {0};
	cr_assert_eq(PARSE("data\ndata\n\ndata:\n\ndata\n\n", &c), 0);
	cr_assert_eq(c.n, 3);
	expect_msg(&c, 0, "message", "\n", "");
	expect_msg(&c, 1, "message", "", "");
	expect_msg(&c, 2, "message", "", "");
	coll_free(&c);
	ASSERT_NO_LEAKS();
}

Test(sse, blank_line_without_data_dispatches_nothing)
{
	coll_t c = {0};
	/* The named type is dropped with the empty event, so y is a "message". */
	cr_assert_eq(PARSE("\n\n\r\nevent: x\n\nid: 3\n\ndata: y\n\n", &c), 0);
	cr_assert_eq(c.n, 1);
	expect_msg(&c, 0, "message", "y", "3");
	coll_free(&c);
	ASSERT_NO_LEAKS();
}

Test(sse, incomplete_trailing_event_discarded)
{
	static const char *const streams[] = {
		"data: a\n\ndata: b\n",
		"data: a\n\ndata: b",
		"data: a\n\ndata: b\r", /* a CR ends the line, but no blank line follows */
		"data: a\n\nevent: x\ndata: b\n",
	};
	for (size_t k = 0; k < sizeof(streams) / sizeof(streams[0]); k++) {
		coll_t c = {0};
		cr_assert_eq(parse(streams[k], strlen(streams[k]), NULL, &c), 0);
		cr_assert_eq(c.n, 1, "stream %zu: %zu events", k, c.n);
		expect_msg(&c, 0, "message", "a", "");
		coll_free(&c);
	}
	/* After finish the parser takes no more input, until reset. */
	coll_t c = {0};
	pc_sse_parser_t *p = NULL;
	cr_assert_eq(pc_sse_parser_new(NULL, collect, &c, &p), 0);
	cr_assert_eq(pc_sse_feed(p, "data: b\n", 8), 0);
	cr_assert_eq(pc_sse_finish(p), 0);
	cr_assert_eq(pc_sse_feed(p, "\n", 1), PC_ESTATE);
	cr_assert_eq(c.n, 0);
	pc_sse_reset(p);
	cr_assert_eq(pc_sse_feed(p, "\n", 1), 0);
	cr_assert_eq(c.n, 0, "the discarded event came back after reset");
	pc_sse_parser_free(p);
	coll_free(&c);
	ASSERT_NO_LEAKS();
}

Test(sse, callback_nonzero_stops_parsing)
{
	coll_t c = {.stop_at = 2, .stop_rc = 42};
	pc_sse_parser_t *p = NULL;
	cr_assert_eq(pc_sse_parser_new(NULL, collect, &c, &p), 0);
	const char s[] = "data: 1\n\ndata: 2\n\ndata: 3\n\n";
	cr_assert_eq(pc_sse_feed(p, s, sizeof(s) - 1), 42);
	cr_assert_eq(c.n, 2);
	/* Sticky. */
	cr_assert_eq(pc_sse_feed(p, "data: 4\n\n", 9), 42);
	cr_assert_eq(pc_sse_finish(p), 42);
	cr_assert_eq(c.n, 2);
	/* Reset starts over. */
	c.stop_at = 0;
	pc_sse_reset(p);
	cr_assert_eq(pc_sse_feed(p, "data: 5\n\n", 9), 0);
	cr_assert_eq(c.n, 3);
	expect_msg(&c, 2, "message", "5", "");
	/* A retry report can stop it too. */
	c.stop_at = 4;
	c.stop_rc = -1234;
	cr_assert_eq(pc_sse_feed(p, "retry: 5\ndata: 6\n\n", 18), -1234);
	cr_assert_eq(c.n, 4);
	pc_sse_parser_free(p);
	coll_free(&c);
	ASSERT_NO_LEAKS();
}

Test(sse, no_reentry_from_callback)
{
	coll_t c = {0};
	pc_sse_parser_t *p = NULL;
	cr_assert_eq(pc_sse_parser_new(NULL, collect, &c, &p), 0);
	c.self = p;
	cr_assert_eq(pc_sse_feed(p, "data: 1\n\n", 9), 0);
	cr_assert_eq(c.reentry_rc, PC_ESTATE);
	pc_sse_parser_free(p);
	coll_free(&c);
	ASSERT_NO_LEAKS();
}

Test(sse, bad_arguments)
{
	pc_sse_parser_t *p = NULL;
	coll_t c = {0};
	cr_assert_eq(pc_sse_parser_new(NULL, NULL, NULL, &p), PC_EINVAL);
	cr_assert_eq(pc_sse_parser_new(NULL, collect, NULL, NULL), PC_EINVAL);
	pc_sse_limits_t huge = {.max_line = SIZE_MAX};
	cr_assert_eq(pc_sse_parser_new(&huge, collect, &c, &p), PC_EINVAL);
	cr_assert_eq(pc_sse_parser_new(NULL, collect, &c, &p), 0);
	cr_assert_eq(pc_sse_feed(p, NULL, 1), PC_EINVAL);
	cr_assert_eq(pc_sse_feed(p, NULL, 0), 0);
	cr_assert_eq(pc_sse_feed(NULL, "x", 1), PC_EINVAL);
	cr_assert_eq(pc_sse_feed(p, "data: x\n\n", 9), 0, "EINVAL must not stick");
	cr_assert_eq(c.n, 1);
	pc_sse_parser_free(p);
	pc_sse_parser_free(NULL);
	coll_free(&c);
	ASSERT_NO_LEAKS();
}

/* ---- limits ---- */

Test(sse, overlong_line_is_an_error_that_sticks)
{
	pc_sse_limits_t lim = {.max_line = 8};
	coll_t c = {0};
	/* Exactly 8 bytes is allowed. */
	cr_assert_eq(parse("data: 12\n\n", 10, &lim, &c), 0);
	cr_assert_eq(c.n, 1);
	coll_free(&c);

	pc_sse_parser_t *p = NULL;
	cr_assert_eq(pc_sse_parser_new(&lim, collect, &c, &p), 0);
	cr_assert_eq(pc_sse_feed(p, "data: 1\n\ndata: 123\n\n", 20), PC_ELIMIT);
	cr_assert_eq(c.n, 1, "the event before the long line is delivered");
	cr_assert_eq(pc_sse_feed(p, "data: x\n\n", 9), PC_ELIMIT);
	cr_assert_eq(pc_sse_finish(p), PC_ELIMIT);
	cr_assert_eq(c.n, 1);
	pc_sse_parser_free(p);
	coll_free(&c);

	/* A line without an end yet, arriving byte by byte, fails as soon as
	 * it is one byte too long: the buffer never holds more. */
	cr_assert_eq(pc_sse_parser_new(&lim, collect, &c, &p), 0);
	for (int i = 0; i < 8; i++)
		cr_assert_eq(pc_sse_feed(p, ":", 1), 0, "byte %d", i);
	cr_assert_eq(pc_sse_feed(p, ":", 1), PC_ELIMIT);
	cr_assert_eq(pc_sse_feed(p, "\n", 1), PC_ELIMIT);
	pc_sse_parser_free(p);
	coll_free(&c);

	/* Default limit: a 1 MiB + 1 line fails, a 1 MiB one does not. */
	size_t big = PC_SSE_DEFAULT_MAX_LINE;
	char *s = malloc(big + 3);
	cr_assert(s);
	memcpy(s, "data:", 5);
	memset(s + 5, 'x', big - 5);
	memcpy(s + big, "\n\n", 2);
	cr_assert_eq(parse(s, big + 2, NULL, &c), 0);
	cr_assert_eq(c.n, 1);
	cr_assert_eq(c.v[0].data_len, big - 5);
	coll_free(&c);
	memmove(s + 1, s, big + 2);
	s[0] = 'd';
	cr_assert_eq(parse(s, big + 3, NULL, &c), PC_ELIMIT);
	cr_assert_eq(c.n, 0);
	free(s);
	coll_free(&c);
	ASSERT_NO_LEAKS();
}

Test(sse, oversized_event_is_an_error_that_sticks)
{
	pc_sse_limits_t lim = {.max_data = 8};
	coll_t c = {0};
	/* "1234567\n" is 8 bytes: allowed. */
	cr_assert_eq(parse("data: 1234567\n\n", 15, &lim, &c), 0);
	cr_assert_eq(c.n, 1);
	expect_msg(&c, 0, "message", "1234567", "");
	coll_free(&c);

	pc_sse_parser_t *p = NULL;
	cr_assert_eq(pc_sse_parser_new(&lim, collect, &c, &p), 0);
	/* 5 + 4 = 9 bytes across two lines, each line well within limits. */
	cr_assert_eq(pc_sse_feed(p, "data: 1234\n", 11), 0);
	cr_assert_eq(pc_sse_feed(p, "data: 123\n\n", 11), PC_ELIMIT);
	cr_assert_eq(pc_sse_feed(p, "data: x\n\n", 9), PC_ELIMIT);
	cr_assert_eq(pc_sse_finish(p), PC_ELIMIT);
	cr_assert_eq(c.n, 0);
	pc_sse_parser_free(p);
	coll_free(&c);

	/* One line whose value alone is 8 bytes: with its LF, 9. */
	cr_assert_eq(parse("data: 12345678\n\n", 16, &lim, &c), PC_ELIMIT);
	cr_assert_eq(parse("data: 123456789abc\n\n", 20, &lim, &c), PC_ELIMIT);
	cr_assert_eq(c.n, 0);

	/* Many empty data lines count their LFs. */
	cr_assert_eq(parse("data\ndata\ndata\ndata\ndata\ndata\ndata\ndata\ndata\n\n", 46, &lim, &c), PC_ELIMIT);
	cr_assert_eq(c.n, 0);
	coll_free(&c);
	ASSERT_NO_LEAKS();
}

/* ---- text ---- */

Test(sse, utf8_split_anywhere_and_repaired)
{
	/* é, €, 😀: 2-, 3- and 4-byte sequences, cut at every byte. */
	const char s[] = "event: \xC3\xA9\ndata: \xE2\x82\xAC\xF0\x9F\x98\x80\n\n";
	for (size_t cut = 0; cut <= sizeof(s) - 1; cut++) {
		coll_t c = {0};
		cr_assert_eq(parse_split(s, sizeof(s) - 1, &cut, 1, NULL, &c), 0);
		cr_assert_eq(c.n, 1);
		expect_msg(&c, 0, "\xC3\xA9", "\xE2\x82\xAC\xF0\x9F\x98\x80", "");
		coll_free(&c);
	}
	/* Invalid input becomes U+FFFD, one per maximal subpart (WHATWG). */
	coll_t c = {0};
	cr_assert_eq(PARSE("data: a\xC3(\n"              /* truncated 2-byte */
			   "data: \xF0\x9F\x98\n"          /* truncated 4-byte: one */
			   "data: \xED\xA0\x80\n"          /* surrogate: three */
			   "data: \xC0\xAF\xFF\n"          /* never lead bytes: three */
			   "data: \xE0\x80\x80\n"          /* overlong: three */
			   "data: \xF4\x90\x80\x80\n"      /* past U+10FFFF: four */
			   "id: \x80z\n\n",
			   &c),
		     0);
	cr_assert_eq(c.n, 1);
	expect_msg(&c, 0, "message",
		   "a\xEF\xBF\xBD(\n"
		   "\xEF\xBF\xBD\n"
		   "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\n"
		   "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\n"
		   "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\n"
		   "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD",
		   "\xEF\xBF\xBDz");
	coll_free(&c);
	ASSERT_NO_LEAKS();
}

/* The WHATWG decoder as the Encoding standard words it, one byte at a
 * time: the oracle for the parser's repair, which skips ASCII in words. */
static size_t whatwg_decode(const uint8_t *s, size_t n, uint8_t *out)
{
	static const uint8_t fffd[] = {0xEF, 0xBF, 0xBD};
	size_t o = 0, needed = 0, seen = 0;
	uint8_t lower = 0x80, upper = 0xBF, pending[4];
	for (size_t i = 0; i < n;) {
		uint8_t b = s[i];
		if (needed == 0) {
			i++;
			if (b <= 0x7F) {
				out[o++] = b;
				continue;
			}
			if (b >= 0xC2 && b <= 0xDF) {
				needed = 1;
			} else if (b >= 0xE0 && b <= 0xEF) {
				lower = b == 0xE0 ? 0xA0 : 0x80;
				upper = b == 0xED ? 0x9F : 0xBF;
				needed = 2;
			} else if (b >= 0xF0 && b <= 0xF4) {
				lower = b == 0xF0 ? 0x90 : 0x80;
				upper = b == 0xF4 ? 0x8F : 0xBF;
				needed = 3;
			} else {
				memcpy(out + o, fffd, 3);
				o += 3;
				continue;
			}
			pending[0] = b;
			continue;
		}
		if (b < lower || b > upper) { /* not consumed: it is read again */
			needed = seen = 0;
			lower = 0x80;
			upper = 0xBF;
			memcpy(out + o, fffd, 3);
			o += 3;
			continue;
		}
		i++;
		lower = 0x80;
		upper = 0xBF;
		pending[++seen] = b;
		if (seen == needed) {
			memcpy(out + o, pending, seen + 1);
			o += seen + 1;
			needed = seen = 0;
		}
	}
	if (needed) {
		memcpy(out + o, fffd, 3);
		o += 3;
	}
	return o;
}

/* Random values (ASCII runs long and short, valid sequences, stray and
 * cut bytes, at every alignment) repaired as the oracle repairs them. */
Test(sse, utf8_repair_matches_the_whatwg_decoder_on_random_values)
{
	static const char *const pieces[] = {"\xC3\xA9", "\xE2\x82\xAC", "\xF0\x9F\x98\x80", "\xC3", "\xE2\x82",
					     "\xF0\x9F", "\xED\xA0\x80", "\xC0", "\xFF", "\x80", "\xF4\x90", "\xE0\x80"};
	uint64_t seed = 0x9E3779B97F4A7C15u;
	uint8_t value[512], want[3 * 512 + 8];
	char line[600];
	for (int round = 0; round < 3000; round++) {
		size_t n = 0;
		while (n < 400) {
			seed = seed * 6364136223846793005u + 1442695040888963407u;
			unsigned r = (unsigned)(seed >> 33);
			if (r % 4 == 0)
				break;
			if (r % 3 == 0) {
				const char *p = pieces[(r >> 4) % (sizeof(pieces) / sizeof(pieces[0]))];
				memcpy(value + n, p, strlen(p));
				n += strlen(p);
			} else {
				for (unsigned k = (r >> 4) % 23; k > 0; k--)
					value[n++] = (uint8_t)('a' + k % 26);
			}
		}
		size_t m = whatwg_decode(value, n, want);
		int len = snprintf(line, sizeof(line), "data: ");
		memcpy(line + len, value, n);
		memcpy(line + len + n, "\n\n", 2);
		coll_t c = {0};
		cr_assert_eq(parse(line, (size_t)len + n + 2, NULL, &c), 0);
		cr_assert_eq(c.n, 1);
		cr_assert_eq(c.v[0].data_len, m, "round %d: %zu bytes, want %zu", round, c.v[0].data_len, m);
		cr_assert(memcmp(c.v[0].data, want, m) == 0, "round %d", round);
		coll_free(&c);
	}
	ASSERT_NO_LEAKS();
}

Test(sse, nul_in_data_kept_with_length)
{
	coll_t c = {0};
	cr_assert_eq(PARSE("data: a\0b\nevent: t\0u\n\n", &c), 0);
	cr_assert_eq(c.n, 1);
	cr_assert_eq(c.v[0].data_len, 3);
	cr_assert_eq(memcmp(c.v[0].data, "a\0b", 3), 0);
	cr_assert_eq(c.v[0].type_len, 3);
	cr_assert_eq(memcmp(c.v[0].type, "t\0u", 3), 0);
	coll_free(&c);
	ASSERT_NO_LEAKS();
}

/* ---- provider-shaped samples ---- */

static const char openai_stream[] =
	"data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,"
	"\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n"
	"data: {\"id\":\"chatcmpl-1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\n"
	": keep-alive\n\n"
	"data: {\"id\":\"chatcmpl-1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo\"},"
	"\"finish_reason\":\"stop\"}]}\n\n"
	"data: [DONE]\n\n";

static const char anthropic_stream[] =
	"event: message_start\r\n"
	"data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"role\":\"assistant\"}}\r\n\r\n"
	"event: content_block_start\r\n"
	"data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\r\n\r\n"
	"event: ping\r\n"
	"data: {\"type\": \"ping\"}\r\n\r\n"
	"event: content_block_delta\r\n"
	"data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\r\n\r\n"
	"event: content_block_stop\r\n"
	"data: {\"type\":\"content_block_stop\",\"index\":0}\r\n\r\n"
	"event: message_stop\r\n"
	"data: {\"type\":\"message_stop\"}\r\n\r\n";

Test(sse, openai_style_stream)
{
	coll_t c = {0};
	cr_assert_eq(parse(openai_stream, sizeof(openai_stream) - 1, NULL, &c), 0);
	cr_assert_eq(c.n, 4);
	for (size_t i = 0; i < 4; i++)
		cr_assert_str_eq(c.v[i].type, "message");
	cr_assert(strstr(c.v[1].data, "\"content\":\"Hel\""));
	cr_assert_eq(c.v[0].data[0], '{');
	cr_assert_eq(c.v[2].data[c.v[2].data_len - 1], '}');
	expect_msg(&c, 3, "message", "[DONE]", "");
	coll_free(&c);
	ASSERT_NO_LEAKS();
}

Test(sse, anthropic_style_stream)
{
	static const char *const types[] = {"message_start", "content_block_start", "ping",
					    "content_block_delta", "content_block_stop", "message_stop"};
	coll_t c = {0};
	cr_assert_eq(parse(anthropic_stream, sizeof(anthropic_stream) - 1, NULL, &c), 0);
	cr_assert_eq(c.n, 6);
	for (size_t i = 0; i < 6; i++) {
		cr_assert_str_eq(c.v[i].type, types[i]);
		cr_assert_eq(c.v[i].data[0], '{');
		cr_assert_eq(c.v[i].data[c.v[i].data_len - 1], '}', "event %zu: no trailing CR or LF", i);
	}
	expect_msg(&c, 2, "ping", "{\"type\": \"ping\"}", "");
	coll_free(&c);
	ASSERT_NO_LEAKS();
}

/* ---- the property: splitting never changes the outcome ---- */

#define LIT(x) {x, sizeof(x) - 1}
static const struct {
	const char *s;
	size_t n; /* some hold NUL bytes */
} corpus[] = {
	LIT("data: hello\n\n"),
	LIT("\xEF\xBB\xBF" "event: a\r\ndata: x\r\ndata: y\r\n\r\nid: 9\rretry: 10\r\rdata: z\r\r"),
	LIT("data\r\n\r\n:c\r\ndata:  s\n\r\ndata: \xE2\x82\xAC\xF0\x9F\x98\n\n"),
	LIT("\xEF\xBB\xEF\xBB\xBF" "data: q\n\n\xEF\xBB\xBF" "data: r\n\n"),
	LIT("id: a\0b\nid: c\ndata: d\n\nretry: 12x\nretry: 0012\ndata: e\n\ndata: partial"),
	LIT("data: 1234567890123456789012345\n\ndata: 1\ndata: 2\ndata: 3\ndata: 4\n\n"),
};

/* A random stream: fields, values, separators, comments and line ends,
 * with bytes chosen to hit every branch (BOMs, CRs, colons, NUL, bad UTF-8). */
static size_t random_stream(uint64_t *seed, char *out, size_t cap)
{
	static const char *const names[] = {"data", "data", "data", "event", "id", "retry", "foo", "",
					    "dat", "Data", ":", "\xEF\xBB\xBF" "data"};
	static const char *const seps[] = {":", ": ", ":  ", "", "::"};
	static const char *const pieces[] = {"a", "bc", " ", ":", "12", "0", "\0", "\xC3\xA9", "\xC3",
					     "\xF0\x9F\x98\x80", "\xF0\x9F", "\xEF\xBB\xBF", "\xFF",
					     "[DONE]", "{\"k\":1}", "\r", "\n", "\r\n"};
	static const size_t piece_len[] = {1, 2, 1, 1, 2, 1, 1, 2, 1, 4, 2, 3, 1, 6, 7, 1, 1, 2};
	static const char *const eols[] = {"\n", "\r", "\r\n"};
	size_t n = 0;
#define PUT(s, l)                                                                                  \
	do {                                                                                       \
		size_t l_ = (l);                                                                   \
		if (n + l_ > cap)                                                                  \
			return n;                                                                  \
		memcpy(out + n, (s), l_);                                                          \
		n += l_;                                                                           \
	} while (0)
	if (rnd_below(seed, 4) == 0)
		PUT("\xEF\xBB\xBF", 1 + rnd_below(seed, 3)); /* a BOM or part of one */
	uint32_t lines = 1 + rnd_below(seed, 30);
	for (uint32_t i = 0; i < lines; i++) {
		uint32_t what = rnd_below(seed, 10);
		if (what == 0) {
			/* blank line */
		} else if (what == 1) {
			PUT(":", 1);
			PUT(" note", rnd_below(seed, 6));
		} else {
			const char *nm = names[rnd_below(seed, sizeof(names) / sizeof(names[0]))];
			PUT(nm, strlen(nm));
			const char *sp = seps[rnd_below(seed, sizeof(seps) / sizeof(seps[0]))];
			PUT(sp, strlen(sp));
			uint32_t np = rnd_below(seed, 6);
			for (uint32_t k = 0; k < np; k++) {
				/* Line-end pieces are rarer, so values stay long enough. */
				uint32_t j = rnd_below(seed, sizeof(pieces) / sizeof(pieces[0]));
				if (j >= 15 && rnd_below(seed, 3))
					j = 0;
				PUT(pieces[j], piece_len[j]);
			}
		}
		const char *e = eols[rnd_below(seed, 3)];
		PUT(e, strlen(e));
		if (rnd_below(seed, 5) == 0)
			PUT(e, strlen(e)); /* dispatch often */
	}
	if (rnd_below(seed, 3) == 0)
		PUT("data: tail", 10);
#undef PUT
	return n;
}

static void check_splits(const char *s, size_t n, const pc_sse_limits_t *lim, uint64_t *seed, const char *what)
{
	coll_t whole = {0};
	int rc_whole = parse(s, n, lim, &whole);
	/* Every single split point. */
	for (size_t cut = 0; cut <= n; cut++) {
		coll_t c = {0};
		int rc = parse_split(s, n, &cut, 1, lim, &c);
		cr_assert_eq(rc, rc_whole, "%s: cut at %zu: rc %d, whole %d", what, cut, rc, rc_whole);
		cr_assert(same_events(&c, &whole), "%s: cut at %zu: %zu events, whole %zu", what, cut, c.n,
			  whole.n);
		coll_free(&c);
	}
	/* Random multi-splits, empty feeds included. */
	size_t cuts[64];
	for (int r = 0; r < 40; r++) {
		size_t nc = rnd_below(seed, 64);
		for (size_t i = 0; i < nc; i++)
			cuts[i] = n ? rnd_below(seed, (uint32_t)n + 1) : 0;
		for (size_t i = 1; i < nc; i++) /* insertion sort */
			for (size_t j = i; j > 0 && cuts[j - 1] > cuts[j]; j--) {
				size_t t = cuts[j];
				cuts[j] = cuts[j - 1];
				cuts[j - 1] = t;
			}
		coll_t c = {0};
		int rc = parse_split(s, n, cuts, nc, lim, &c);
		cr_assert_eq(rc, rc_whole, "%s: multi-split %d: rc %d, whole %d", what, r, rc, rc_whole);
		cr_assert(same_events(&c, &whole), "%s: multi-split %d differs", what, r);
		coll_free(&c);
	}
	/* Byte by byte. */
	coll_t c = {0};
	pc_sse_parser_t *p = NULL;
	cr_assert_eq(pc_sse_parser_new(lim, collect, &c, &p), 0);
	int rc = 0;
	for (size_t i = 0; i < n && rc == 0; i++)
		rc = pc_sse_feed(p, s + i, 1);
	if (rc == 0)
		rc = pc_sse_finish(p);
	pc_sse_parser_free(p);
	cr_assert_eq(rc, rc_whole, "%s: byte by byte", what);
	cr_assert(same_events(&c, &whole), "%s: byte by byte differs", what);
	coll_free(&c);
	coll_free(&whole);
}

Test(sse, any_split_gives_the_same_events)
{
	uint64_t seed = 0x5EE5EED1234567ull; /* fixed: failures replay */
	pc_sse_limits_t small = {.max_line = 16, .max_data = 24};
	size_t limited = 0, evented = 0;
	char what[64];
	for (size_t k = 0; k < sizeof(corpus) / sizeof(corpus[0]); k++) {
		snprintf(what, sizeof(what), "corpus %zu", k);
		check_splits(corpus[k].s, corpus[k].n, NULL, &seed, what);
		check_splits(corpus[k].s, corpus[k].n, &small, &seed, what);
	}
	check_splits(openai_stream, sizeof(openai_stream) - 1, NULL, &seed, "openai");
	check_splits(anthropic_stream, sizeof(anthropic_stream) - 1, NULL, &seed, "anthropic");

	char buf[600];
	for (int i = 0; i < 150; i++) {
		size_t n = random_stream(&seed, buf, sizeof(buf));
		snprintf(what, sizeof(what), "random %d", i);
		check_splits(buf, n, NULL, &seed, what);
		check_splits(buf, n, &small, &seed, what);
		coll_t c = {0};
		if (parse(buf, n, &small, &c) == PC_ELIMIT)
			limited++;
		evented += c.n > 0;
		coll_free(&c);
	}
	/* The generator must exercise both outcomes, or the test proves little. */
	cr_assert_gt(limited, 10, "only %zu streams hit a limit", limited);
	cr_assert_gt(evented, 50, "only %zu streams produced events", evented);
	ASSERT_NO_LEAKS();
}
