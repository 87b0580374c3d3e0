/*
 * The SSE parser. Bytes are cut into lines; a line is processed only once
 * its line end has been seen, so where the input was split never matters.
 * A line that lies whole inside one feed is parsed in place; only a line
 * that straddles feeds is copied into the line buffer.
 */
#include "sse.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../runtime/error.h"

typedef struct pc__sse_buf {
	char *p;
	size_t len;
	size_t cap;
} pc__sse_buf_t;

struct pc_sse_parser {
	pc_sse_event_fn fn;
	void *user;
	size_t max_line;
	size_t max_data;
	int err;        /* sticky: nonzero stops the parser until reset */
	bool finished;  /* pc_sse_finish was called */
	bool in_cb;     /* a callback is running: refuse re-entry */
	bool cr;        /* the last byte was a CR: an LF next ends no new line */
	uint8_t bom;    /* bytes of a leading BOM matched so far; BOM_DONE after */
	pc__sse_buf_t line;    /* a line that straddles feeds */
	pc__sse_buf_t data;    /* the data buffer, LF after each data line */
	pc__sse_buf_t type;    /* the event type buffer */
	pc__sse_buf_t id;      /* the last event ID buffer */
	pc__sse_buf_t last_id; /* the last event ID string (set at blank lines) */
};

#define BOM_DONE 3
static const uint8_t bom_bytes[3] = {0xEF, 0xBB, 0xBF};
static const char replacement[3] = {(char)0xEF, (char)0xBF, (char)0xBD}; /* U+FFFD */

/* Makes room for `need` bytes plus a NUL. Grows geometrically but never
 * past `limit` + 1, which the callers have already checked `need` against. */
static int buf_reserve(pc__sse_buf_t *b, size_t need, size_t limit)
{
	if (need + 1 <= b->cap)
		return 0;
	size_t cap = b->cap ? b->cap * 2 : 64;
	if (cap < need + 1)
		cap = need + 1;
	if (cap > limit + 1)
		cap = limit + 1;
	char *np = realloc(b->p, cap);
	if (!np)
		return PC_ENOMEM;
	b->p = np;
	b->cap = cap;
	return 0;
}

/* The length of the ASCII run `s` starts with, eight bytes at a time: the
 * decoder below runs over every byte of a stream, twice, and model output
 * is mostly ASCII. */
static size_t ascii_run(const uint8_t *s, size_t n)
{
	size_t i = 0;
	for (uint64_t w; i + 8 <= n; i += 8) {
		memcpy(&w, s + i, 8);
		if (w & 0x8080808080808080u)
			break;
	}
	while (i < n && s[i] < 0x80)
		i++;
	return i;
}

/* The WHATWG UTF-8 decoder, run over one value: valid sequences are kept
 * as they are, each maximal invalid subpart becomes U+FFFD. Writes to
 * `dst` when it is not NULL; returns the decoded length either way. */
static size_t utf8_fix(char *dst, const uint8_t *s, size_t n)
{
	size_t out = 0, i = 0;
	while (i < n) {
		size_t run = i + ascii_run(s + i, n - i);
		if (run > i) {
			if (dst)
				memcpy(dst + out, s + i, run - i);
			out += run - i;
			i = run;
			if (i == n)
				break;
		}
		uint8_t c = s[i], lo = 0x80, hi = 0xBF;
		size_t need;
		if (c >= 0xC2 && c <= 0xDF) {
			need = 1;
		} else if (c >= 0xE0 && c <= 0xEF) {
			need = 2;
			if (c == 0xE0)
				lo = 0xA0;
			else if (c == 0xED)
				hi = 0x9F;
		} else if (c >= 0xF0 && c <= 0xF4) {
			need = 3;
			if (c == 0xF0)
				lo = 0x90;
			else if (c == 0xF4)
				hi = 0x8F;
		} else {
			need = 0; /* never a lead byte */
		}
		size_t j = 1;
		if (need) {
			while (j <= need && i + j < n && s[i + j] >= lo && s[i + j] <= hi) {
				lo = 0x80;
				hi = 0xBF;
				j++;
			}
		}
		if (need && j > need) {
			if (dst)
				memcpy(dst + out, s + i, j);
			out += j;
		} else {
			/* The offending byte (s[i + j]) is not consumed: it may
			 * start the next sequence. */
			if (dst)
				memcpy(dst + out, replacement, sizeof(replacement));
			out += sizeof(replacement);
		}
		i += j;
	}
	return out;
}

/* Decoded values are at most 3 bytes per input byte of a line. */
static int buf_set(pc__sse_buf_t *b, const uint8_t *s, size_t n, size_t line_max)
{
	size_t m = utf8_fix(NULL, s, n);
	int rc = buf_reserve(b, m, line_max * 3);
	if (rc)
		return rc;
	utf8_fix(b->p, s, n);
	b->len = m;
	b->p[m] = 0;
	return 0;
}

static int deliver(pc_sse_parser_t *p, const pc_sse_event_t *ev)
{
	p->in_cb = true;
	int rc = p->fn(p->user, ev);
	p->in_cb = false;
	return rc;
}

static const char *str_or_empty(const pc__sse_buf_t *b)
{
	return b->p ? b->p : "";
}

/* A blank line. */
static int dispatch(pc_sse_parser_t *p)
{
	/* The last event ID string follows the buffer even when nothing is
	 * dispatched (it is what a reconnect sends). */
	if (p->id.len != p->last_id.len || (p->id.len && memcmp(p->id.p, p->last_id.p, p->id.len))) {
		int rc = buf_reserve(&p->last_id, p->id.len, p->max_line * 3);
		if (rc)
			return rc;
		if (p->id.len)
			memcpy(p->last_id.p, p->id.p, p->id.len);
		p->last_id.len = p->id.len;
		p->last_id.p[p->id.len] = 0;
	}
	if (p->data.len == 0) {
		p->type.len = 0;
		return 0;
	}
	p->data.len--; /* the LF after the last data line */
	p->data.p[p->data.len] = 0;
	pc_sse_event_t ev = {
		.kind = PC_SSE_MESSAGE,
		.type = p->type.len ? p->type.p : "message",
		.type_len = p->type.len ? p->type.len : 7,
		.data = p->data.p,
		.data_len = p->data.len,
		.id = str_or_empty(&p->last_id),
		.id_len = p->last_id.len,
	};
	int rc = deliver(p, &ev);
	p->data.len = 0;
	p->type.len = 0;
	return rc;
}

static bool name_is(const uint8_t *name, size_t n, const char *lit)
{
	size_t l = strlen(lit);
	return n == l && memcmp(name, lit, l) == 0;
}

/* One complete line, without its line end. */
static int process_line(pc_sse_parser_t *p, const uint8_t *l, size_t n)
{
	if (n == 0)
		return dispatch(p);
	if (l[0] == ':')
		return 0; /* a comment */
	const uint8_t *colon = memchr(l, ':', n);
	size_t name_len = colon ? (size_t)(colon - l) : n;
	const uint8_t *v = colon ? colon + 1 : l + n;
	size_t vlen = n - (size_t)(v - l);
	if (vlen && v[0] == ' ') {
		v++;
		vlen--;
	}

	if (name_is(l, name_len, "data")) {
		size_t m = utf8_fix(NULL, v, vlen);
		/* Checked piecewise so the sum cannot overflow. */
		if (m >= p->max_data || p->data.len > p->max_data - m - 1)
			return PC_ELIMIT;
		int rc = buf_reserve(&p->data, p->data.len + m + 1, p->max_data);
		if (rc)
			return rc;
		utf8_fix(p->data.p + p->data.len, v, vlen);
		p->data.len += m;
		p->data.p[p->data.len++] = '\n';
		p->data.p[p->data.len] = 0;
		return 0;
	}
	if (name_is(l, name_len, "event"))
		return buf_set(&p->type, v, vlen, p->max_line);
	if (name_is(l, name_len, "id")) {
		if (memchr(v, 0, vlen))
			return 0; /* an id with NUL is ignored */
		return buf_set(&p->id, v, vlen, p->max_line);
	}
	if (name_is(l, name_len, "retry")) {
		if (vlen == 0)
			return 0;
		uint64_t ms = 0;
		for (size_t i = 0; i < vlen; i++) {
			if (v[i] < '0' || v[i] > '9')
				return 0; /* not all ASCII digits: ignored */
			unsigned d = (unsigned)(v[i] - '0');
			ms = ms > (UINT64_MAX - d) / 10 ? UINT64_MAX : ms * 10 + d;
		}
		pc_sse_event_t ev = {
			.kind = PC_SSE_RETRY,
			.type = "",
			.data = "",
			.id = str_or_empty(&p->last_id),
			.id_len = p->last_id.len,
			.retry_ms = ms,
		};
		return deliver(p, &ev);
	}
	return 0; /* any other field is ignored */
}

static int fail(pc_sse_parser_t *p, int rc)
{
	p->err = rc;
	return rc;
}

/* Line splitting, after the BOM has been dealt with. */
static int feed_lines(pc_sse_parser_t *p, const uint8_t *s, size_t n)
{
	size_t i = 0;
	if (p->cr && n) {
		p->cr = false;
		if (s[0] == '\n')
			i = 1; /* the LF of a CRLF split across feeds */
	}
	while (i < n) {
		size_t e = i;
		while (e < n && s[e] != '\n' && s[e] != '\r')
			e++;
		size_t seg = e - i;
		if (seg > p->max_line || p->line.len > p->max_line - seg)
			return fail(p, PC_ELIMIT);
		if (e == n) {
			/* No line end yet: keep the partial line. */
			int rc = buf_reserve(&p->line, p->line.len + seg, p->max_line);
			if (rc)
				return fail(p, rc);
			memcpy(p->line.p + p->line.len, s + i, seg);
			p->line.len += seg;
			return 0;
		}
		int rc;
		if (p->line.len == 0) {
			rc = process_line(p, s + i, seg);
		} else {
			rc = buf_reserve(&p->line, p->line.len + seg, p->max_line);
			if (rc)
				return fail(p, rc);
			if (seg)
				memcpy(p->line.p + p->line.len, s + i, seg);
			size_t len = p->line.len + seg;
			p->line.len = 0;
			rc = process_line(p, (const uint8_t *)p->line.p, len);
		}
		if (rc)
			return fail(p, rc);
		i = e + 1;
		if (s[e] == '\r') {
			if (i < n) {
				if (s[i] == '\n')
					i++;
			} else {
				p->cr = true;
			}
		}
	}
	return 0;
}

int pc_sse_parser_new(const pc_sse_limits_t *limits, pc_sse_event_fn fn, void *user,
		      pc_sse_parser_t **out)
{
	if (!fn || !out)
		return PC_EINVAL;
	size_t ml = limits && limits->max_line ? limits->max_line : PC_SSE_DEFAULT_MAX_LINE;
	size_t md = limits && limits->max_data ? limits->max_data : PC_SSE_DEFAULT_MAX_DATA;
	/* Keeps 3 * max_line and the +1 for the NUL from overflowing. */
	if (ml > SIZE_MAX / 8 || md > SIZE_MAX / 8)
		return PC_EINVAL;
	pc_sse_parser_t *p = calloc(1, sizeof(*p));
	if (!p)
		return PC_ENOMEM;
	p->fn = fn;
	p->user = user;
	p->max_line = ml;
	p->max_data = md;
	*out = p;
	return 0;
}

int pc_sse_feed(pc_sse_parser_t *p, const void *buf, size_t len)
{
	if (!p || (!buf && len))
		return PC_EINVAL;
	if (p->in_cb)
		return PC_ESTATE;
	if (p->err)
		return p->err;
	if (p->finished)
		return PC_ESTATE;
	const uint8_t *s = buf;
	/* A BOM may itself arrive split: hold the matched prefix back until
	 * it is clearly a BOM (dropped) or not (replayed as content). */
	while (p->bom != BOM_DONE && len) {
		if (*s == bom_bytes[p->bom]) {
			p->bom++;
			s++;
			len--;
			continue; /* BOM_DONE after the third byte */
		}
		uint8_t matched = p->bom;
		p->bom = BOM_DONE;
		if (matched) {
			int rc = feed_lines(p, bom_bytes, matched);
			if (rc)
				return rc;
		}
	}
	if (!len)
		return 0;
	return feed_lines(p, s, len);
}

int pc_sse_finish(pc_sse_parser_t *p)
{
	if (!p)
		return PC_EINVAL;
	if (p->in_cb)
		return PC_ESTATE;
	if (p->err)
		return p->err;
	/* Pending data is discarded; the last event ID string stays. */
	p->finished = true;
	p->line.len = 0;
	p->data.len = 0;
	p->type.len = 0;
	p->cr = false;
	return 0;
}

void pc_sse_reset(pc_sse_parser_t *p)
{
	if (!p)
		return;
	/* Capacity is kept: it is bounded by the limits anyway. */
	p->err = 0;
	p->finished = false;
	p->cr = false;
	p->bom = 0;
	p->line.len = 0;
	p->data.len = 0;
	p->type.len = 0;
	p->id.len = 0;
	p->last_id.len = 0;
	if (p->last_id.p)
		p->last_id.p[0] = 0;
}

const char *pc_sse_last_event_id(const pc_sse_parser_t *p, size_t *len)
{
	if (len)
		*len = p && p->last_id.p ? p->last_id.len : 0;
	return p && p->last_id.p ? p->last_id.p : "";
}

void pc_sse_parser_free(pc_sse_parser_t *p)
{
	if (!p)
		return;
	free(p->line.p);
	free(p->data.p);
	free(p->type.p);
	free(p->id.p);
	free(p->last_id.p);
	free(p);
}
