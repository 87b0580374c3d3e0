/*
 * HTTP/2 over cleartext TCP (h2c) on a server connection. http_conn.c
 * hands a connection over when its first bytes are the client preface
 * (prior knowledge), or when an HTTP/1.1 request asks to upgrade to h2c
 * (RFC 7540 section 3.2: that request becomes stream 1, answered over
 * HTTP/2 after a 101). From then on nghttp2 does the framing, HPACK, flow
 * control and protocol checks, and this file maps its streams onto the
 * server's request plumbing.
 *
 * A stream is a request like an HTTP/1.1 one: when its END_STREAM arrives
 * it goes to its route's actor as PC_MSG_HTTP_REQUEST (built by
 * pc__request_msg, :authority becoming Host), under an id of its own in the
 * loop's id table, and the same answer calls reach it: http_server.c finds
 * the stream by the id's table entry and calls the pc__h2_* answers below.
 * The id leaves the table when the answer is complete (pc_http_respond, or
 * pc_http_respond_end) or when the stream closes first, which is when the
 * actor gets GONE. The stream object itself lives from its HEADERS until
 * nghttp2 closes the stream (its response body may still be leaving after
 * the answer is complete) or the connection ends.
 *
 * Input is handed to nghttp2_session_mem_recv straight from the loop's read
 * buffer. Output goes through nghttp2_session_send into the connection's
 * output queue (pc__conn_queue, one flush per batch; the answers posted in
 * one batch of the loop's commands are flushed once, at its end) and is
 * pulled only while that queue is short, so frames wait inside nghttp2
 * rather than pile up in front of a slow socket; input is not read
 * meanwhile either.
 * Response bodies wait in their stream's buffer until the peer's
 * flow-control window lets nghttp2 take them. Those bytes count against
 * max_output_bytes together with the queue, and the stall clock runs while
 * they wait: a peer that stops reading, or stops granting window, is
 * dropped as an HTTP/1.1 one is.
 *
 * Per stream: header and body limits (431 / 413 answered on the stream,
 * then RST_STREAM NO_ERROR if the peer is still sending), the header and
 * body deadlines (408). Per connection: the request bodies still arriving
 * together (conn_body_cap: past it the stream that would grow them gets
 * 503; otherwise one connection could hold max_concurrent_streams bodies
 * of max_body_bytes each), SETTINGS_MAX_CONCURRENT_STREAMS
 * (nghttp2 refuses streams past it), the output cap, the idle deadline when
 * no stream is open (GOAWAY, then close), and a cap on the peer's resets of
 * streams still open (rapid reset). Malformed HTTP/2 is nghttp2's to find:
 * a stream error resets the stream, a connection error sends GOAWAY and
 * the connection ends.
 *
 * nghttp2's calls are never nested: the session is driven (mem_recv, send)
 * only from the top of an event, a timer or an answer command, never from
 * inside one of its callbacks, and nothing touches a stream after a call
 * that may close it.
 */
#include "http2_internal.h"

#include "base64.h"
#include "runtime/clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include <nghttp2/nghttp2.h>

#define PREFACE "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
#define PREFACE_LEN (sizeof(PREFACE) - 1)
/* A read buffer's worth of reads per event, then other connections' turn. */
#define READS_PER_EVENT 8
/* Queued output past which nghttp2 is asked for no more frames and input
 * waits: the socket sets the pace. */
#define OUT_HIGH ((size_t)64 << 10)
/* The flow-control windows granted to the peer, per stream and for the
 * connection: a prompt of a few hundred KiB arrives in one round trip. */
#define STREAM_WINDOW (256 << 10)
#define CONN_WINDOW (1 << 20)
/* A response buffer larger than this is given back once drained. */
#define KEEP_OUT_BUF ((size_t)64 << 10)


struct pc__h2_stream {
	pc__srv_ent_t ent;   /* in the id table from dispatch until the answer is complete */
	pc__http_conn_t *c;
	pc__h2_stream_t *prev, *next; /* h2->streams */
	int32_t sid;
	pc__h2_stage_t stage; /* stream_set only */
	pc_actor_t *handler;  /* borrowed from the route while ent is in the table */
	pc_io_timer_t timer;  /* the request's arrival deadline */
	pc__buf_t fields;     /* name NUL value NUL per field, pseudo-headers included */
	uint32_t nfields;
	size_t field_bytes;   /* as HTTP/1.1 counts them: name, value, ": ", CRLF */
	pc__buf_t body;
	size_t trailer_bytes;
	size_t counted;       /* body bytes in h2->receiving */
	pc__buf_t out;        /* response body nghttp2 has not taken, from out_off */
	size_t out_off;
	int refuse;           /* the status to refuse the request with once its head is in */
	bool has_host;
	bool no_body;         /* a HEAD request, or a 204 / 304 answer */
	bool out_end;         /* the body is complete once `out` drains */
	bool deferred;        /* the body's reader waits for `out` */
	bool end_sent;        /* our END_STREAM went out */
	/* for the access hook (only when the server has one) */
	uint64_t t0_ns, bytes;
	int status;
	char req_id[65];
	char *access_line; /* "METHOD\0target": the fields go at dispatch */
};

struct pc__h2 {
	nghttp2_session *ss;
	pc__h2_stream_t *streams; /* every stream nghttp2 has open */
	uint32_t nstreams;
	size_t held;              /* response bytes in the streams' `out` */
	size_t receiving;         /* request body bytes held by streams still arriving */
	size_t high;              /* OUT_HIGH, or less under a small output cap */
	uint64_t reset_tokens;    /* resets of open streams the peer may still send */
	uint64_t reset_ns;        /* when reset_tokens was last refilled */
};

int pc__h2_sniff(const char *p, size_t n)
{
	size_t k = n < PREFACE_LEN ? n : PREFACE_LEN;
	if (memcmp(p, PREFACE, k) != 0)
		return -1;
	return n >= PREFACE_LEN ? 1 : 0;
}

static pc__h2_stream_t *stream_of(nghttp2_session *ss, int32_t sid)
{
	return nghttp2_session_get_stream_user_data(ss, sid);
}

static void h2_pump(pc__http_conn_t *c);

/* ---- response bodies held for the peer's window ---------------------------------- */

static bool over_cap(const pc__http_conn_t *c, size_t more)
{
	return c->out_bytes + c->h2->held + more > c->srv->lim.max_output_bytes;
}

static int out_add(pc__h2_stream_t *s, const char *p, size_t n)
{
	if (pc__buf_append(&s->out, p, n) != 0)
		return PC_ENOMEM;
	s->c->h2->held += n;
	PC__IO_STAT_ADD(s->c->sl->loop, output_queued, n);
	return 0;
}

static void out_taken(pc__h2_stream_t *s, size_t n)
{
	s->out_off += n;
	s->c->h2->held -= n;
	PC__IO_STAT_SUB(s->c->sl->loop, output_queued, n);
	size_t left = s->out.len - s->out_off;
	if (!left && s->out.cap > KEEP_OUT_BUF) {
		pc__buf_free(&s->out);
		s->out_off = 0;
	} else if (s->out.p && (!left || (s->out_off > KEEP_OUT_BUF && s->out_off > s->out.len / 2))) {
		/* What was taken is given back before the buffer grows more. */
		memmove(s->out.p, s->out.p + s->out_off, left);
		s->out.len = left;
		s->out.p[left] = '\0'; /* as pc__buf keeps it */
		s->out_off = 0;
	}
}

static void out_drop(pc__h2_stream_t *s)
{
	out_taken(s, s->out.len - s->out_off);
	pc__buf_free(&s->out);
}

/* nghttp2's data source for a response body: what is held, then EOF once
 * the answer is complete, or "later" (resumed by the next write or end). */
static ssize_t read_body(nghttp2_session *ss, int32_t sid, uint8_t *buf, size_t length,
			 uint32_t *flags, nghttp2_data_source *src, void *user)
{
	(void)ss;
	(void)sid;
	pc__h2_stream_t *s = src->ptr;
	size_t avail = s->out.len - s->out_off;
	size_t n = avail < length ? avail : length;
	if (n) {
		memcpy(buf, s->out.p + s->out_off, n);
		out_taken(s, n);
		pc__conn_progress(user);
	}
	if (n == avail && s->out_end) {
		*flags |= NGHTTP2_DATA_FLAG_EOF;
		return (ssize_t)n;
	}
	if (!n) {
		s->deferred = true;
		return NGHTTP2_ERR_DEFERRED;
	}
	return (ssize_t)n;
}

/* Wakes the body's reader after new bytes or the end. */
static void stream_resume(pc__h2_stream_t *s)
{
	if (!s->deferred)
		return;
	s->deferred = false;
	/* The only other failure, "nothing deferred", cannot be: the flag
	 * says the reader waits. Short of memory, the stream stays silent
	 * until the connection ends. */
	(void)nghttp2_session_resume_data(s->c->h2->ss, s->sid);
}

/* ---- response heads ---------------------------------------------------------------- */

typedef struct resp_head {
	nghttp2_nv *nv;
	size_t n;
	char *text;      /* the actor's lines, names lower-cased in place */
	char status[12];
	char clen[24];
} resp_head_t;

static nghttp2_nv make_nv(const char *name, size_t nl, const char *value, size_t vl)
{
	return (nghttp2_nv){(uint8_t *)name, (uint8_t *)value, nl, vl, NGHTTP2_NV_FLAG_NONE};
}

/* Headers HTTP/2 forbids (RFC 9113 section 8.2.2); the server's own
 * framing replaces them. */
static bool connection_specific(const char *name, size_t n)
{
	static const char *const names[] = {"connection", "keep-alive", "proxy-connection",
					    "transfer-encoding", "upgrade"};
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		if (strlen(names[i]) == n && memcmp(names[i], name, n) == 0)
			return true;
	}
	return false;
}

/* One "Name: value\r\n" line of the actor's into the head, name in lower
 * case (HTTP/2 requires it), surrounding blanks off the value. */
static void head_line(resp_head_t *h, char *line, char *eol)
{
	char *colon = memchr(line, ':', (size_t)(eol - line));
	if (!colon || colon == line)
		return;
	size_t nl = (size_t)(colon - line);
	for (size_t i = 0; i < nl; i++) {
		if (line[i] >= 'A' && line[i] <= 'Z')
			line[i] = (char)(line[i] - 'A' + 'a');
	}
	char *v = colon + 1;
	while (v < eol && (*v == ' ' || *v == '\t'))
		v++;
	char *ve = eol;
	while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
		ve--;
	if (!connection_specific(line, nl))
		h->nv[h->n++] = make_nv(line, nl, v, (size_t)(ve - v));
}

/* The response head as nghttp2 takes it: :status, the actor's lines and,
 * when clen >= 0, content-length. */
static int head_build(resp_head_t *h, int status, const char *hdrs, size_t hlen, long long clen)
{
	size_t lines = 0;
	for (size_t i = 0; i + 1 < hlen; i++)
		lines += hdrs[i] == '\r' && hdrs[i + 1] == '\n';
	*h = (resp_head_t){0};
	h->nv = malloc((lines + 2) * sizeof(*h->nv));
	h->text = malloc(hlen + 1);
	if (!h->nv || !h->text)
		return PC_ENOMEM;
	memcpy(h->text, hdrs, hlen);
	int sl = snprintf(h->status, sizeof(h->status), "%d", status);
	h->nv[h->n++] = make_nv(":status", 7, h->status, (size_t)sl);
	char *line = h->text, *end = h->text + hlen;
	char *eol;
	while (line < end && (eol = memmem(line, (size_t)(end - line), "\r\n", 2)) != NULL) {
		head_line(h, line, eol);
		line = eol + 2;
	}
	if (clen >= 0) {
		int cl = snprintf(h->clen, sizeof(h->clen), "%lld", clen);
		h->nv[h->n++] = make_nv("content-length", 14, h->clen, (size_t)cl);
	}
	return 0;
}

static void head_free(resp_head_t *h)
{
	free(h->nv);
	free(h->text);
}

/* Submits the response head; its body (if `with_body`) comes from the
 * stream's `out`. nghttp2 copies the head. */
static int submit_head(pc__h2_stream_t *s, int status, const char *hdrs, size_t hlen, long long clen,
		       bool with_body)
{
	resp_head_t h;
	int rc = head_build(&h, status, hdrs, hlen, clen);
	if (rc == 0) {
		nghttp2_data_provider body = {.source.ptr = s, .read_callback = read_body};
		if (nghttp2_submit_response(s->c->h2->ss, s->sid, h.nv, h.n, with_body ? &body : NULL) != 0)
			rc = PC_ENOMEM;
	}
	head_free(&h);
	return rc;
}

/* ---- streams ---------------------------------------------------------------------- */

static void on_stream_timer(pc_ioloop_t *loop, void *arg);

/* The stream's request body is let go: no longer counted. */
static void body_drop(pc__h2_stream_t *s)
{
	if (s->counted && s->c->h2)
		s->c->h2->receiving -= s->counted;
	s->counted = 0;
	pc__buf_free(&s->body);
}

/* ---- the stream's machine ------------------------------------------------------------- */

#define BIT(s) (1u << (s))
/* every stage but closed may close: nghttp2 closes a stream when its peer
 * resets it, whatever we were doing */
#define CLOSE BIT(PC__H2_S_CLOSED)

static const char *const lc_names[PC__H2_S_COUNT] = {
	[PC__H2_S_NEW] = "new",       [PC__H2_S_RECV] = "recv", [PC__H2_S_SERVICE] = "service",
	[PC__H2_S_STREAM] = "stream", [PC__H2_S_DONE] = "done", [PC__H2_S_CLOSED] = "closed",
};

/* lc_next[from]: the stages `from` may go to. */
static const unsigned lc_next[PC__H2_S_COUNT] = {
	[PC__H2_S_NEW] = BIT(PC__H2_S_RECV) | CLOSE,
	[PC__H2_S_RECV] = BIT(PC__H2_S_SERVICE) | BIT(PC__H2_S_DONE) | CLOSE,
	[PC__H2_S_SERVICE] = BIT(PC__H2_S_STREAM) | BIT(PC__H2_S_DONE) | CLOSE,
	[PC__H2_S_STREAM] = BIT(PC__H2_S_DONE) | CLOSE,
	[PC__H2_S_DONE] = CLOSE,
};

const char *pc__h2_lc_name(pc__h2_stage_t s)
{
	return (unsigned)s < PC__H2_S_COUNT ? lc_names[s] : "unknown";
}

bool pc__h2_lc_legal(pc__h2_stage_t from, pc__h2_stage_t to)
{
	return (unsigned)from < PC__H2_S_COUNT && (unsigned)to < PC__H2_S_COUNT && (lc_next[from] & BIT(to));
}

/* The one place a stream's stage changes: what the table does not allow
 * is refused (the stage stays), counted and traced. */
static void stream_set(pc__h2_stream_t *s, pc__h2_stage_t to, const char *why)
{
	pc__h2_stage_t from = s->stage;
	uint64_t serial = s->c ? s->c->serial : 0;
	if (!pc__h2_lc_legal(from, to)) {
		if (s->c)
			PC__IO_STAT_ADD(s->c->sl->loop, transitions_refused, 1);
		if (pc__io_traced(PC__IO_TRACE_H2STREAM))
			pc__io_trace_sub("h2stream", serial, (uint64_t)s->sid, pc__h2_lc_name(from), pc__h2_lc_name(to),
					 "refused");
#ifdef PC__LC_STRICT
		abort();
#endif
		return;
	}
	s->stage = to;
	if (pc__io_traced(PC__IO_TRACE_H2STREAM))
		pc__io_trace_sub("h2stream", serial, (uint64_t)s->sid, pc__h2_lc_name(from), pc__h2_lc_name(to), why);
}

/* A stream that is answered already stays so. */
static void stream_settle(pc__h2_stream_t *s, const char *why)
{
	if (s->stage != PC__H2_S_DONE && s->stage != PC__H2_S_CLOSED)
		stream_set(s, PC__H2_S_DONE, why);
}

static void stream_free(pc__h2_stream_t *s)
{
	free(s->access_line);
	pc__buf_free(&s->fields);
	body_drop(s);
	pc__buf_free(&s->out);
	free(s);
}

/* nghttp2 closed the stream: out of the list, its memory released. */
static void stream_close(pc__h2_stream_t *s)
{
	pc__http_conn_t *c = s->c;
	struct pc__h2 *h2 = c->h2;
	pc__ioloop_timer_cancel(c->sl->loop, &s->timer);
	out_drop(s);
	if (s->prev)
		s->prev->next = s->next;
	else
		h2->streams = s->next;
	if (s->next)
		s->next->prev = s->prev;
	h2->nstreams--;
	stream_set(s, PC__H2_S_CLOSED, s->end_sent ? "closed" : "reset");
	stream_free(s);
}

/* Takes the stream's id out of the table; its actor, if it still waited
 * for the answer, gets GONE with `reason`. */
static void stream_forget(pc__h2_stream_t *s, int reason)
{
	if (!s->ent.link.id)
		return;
	uint64_t id = s->ent.link.id;
	pc_actor_t *to = s->handler;
	/* Out of the table before the actor hears: after GONE every answer
	 * for the id is refused. */
	pc__srv_ent_remove(s->c->sl, &s->ent);
	s->handler = NULL;
	if (to)
		pc__conn_notify(to, PC_MSG_HTTP_GONE, s->c->srv, id, reason, 0);
}

/* The actor's answer is complete: no GONE from here on. */
static void answer_done(pc__h2_stream_t *s)
{
	s->handler = NULL;
	stream_forget(s, 0);
	stream_set(s, PC__H2_S_DONE, "answered");
	s->c->served = true;
}

/* The answer cannot go out: the actor hears GONE (`reason`), the peer gets
 * RST_STREAM. */
static void stream_fail(pc__h2_stream_t *s, int reason)
{
	stream_forget(s, reason);
	stream_settle(s, "failed");
	out_drop(s);
	/* Short of memory even for that, the stream waits for the
	 * connection's end. */
	(void)nghttp2_submit_rst_stream(s->c->h2->ss, NGHTTP2_FLAG_NONE, s->sid, NGHTTP2_INTERNAL_ERROR);
}

/* What was kept of the request while it arrived is not needed now. */
static void request_drop(pc__h2_stream_t *s)
{
	pc__buf_free(&s->fields);
	s->nfields = 0;
	body_drop(s);
}

/* Answers the request here, with `status` and no body. */
static void stream_refuse(pc__h2_stream_t *s, int status)
{
	pc__ioloop_timer_cancel(s->c->sl->loop, &s->timer);
	request_drop(s);
	char why[16];
	snprintf(why, sizeof(why), "refused %d", status);
	stream_set(s, PC__H2_S_DONE, why);
	s->c->served = true;
	char rid[64];
	pc__server_request_id(rid, NULL);
	if (submit_head(s, status, rid, strlen(rid), 0, false) != 0)
		stream_fail(s, 0);
}

static const char *field(const pc__h2_stream_t *s, const char *name)
{
	const char *f = s->fields.p;
	for (uint32_t i = 0; i < s->nfields; i++) {
		const char *v = f + strlen(f) + 1;
		if (strcmp(f, name) == 0)
			return v;
		f = v + strlen(v) + 1;
	}
	return NULL;
}

/* The request is whole: hand it to its route's actor, or answer it here. */
static void stream_dispatch(pc__h2_stream_t *s)
{
	pc__http_conn_t *c = s->c;
	pc__ioloop_timer_cancel(c->sl->loop, &s->timer);
	const char *method = field(s, ":method");
	const char *target = field(s, ":path");
	if (!method || !target) {
		stream_refuse(s, 400); /* CONNECT: no path to route */
		return;
	}
	const pc__http_route_t *r = pc__srv_route(c->srv, method, target, strcspn(target, "?"));
	if (!r) {
		stream_refuse(s, 404);
		return;
	}
	s->no_body = strcmp(method, "HEAD") == 0;
	pc__req_parts_t parts = {
		.method = method,
		.target = target,
		.fields = s->fields.p,
		.fields_len = s->fields.len,
		.nfields = s->nfields,
		.host = s->has_host ? NULL : field(s, ":authority"),
		.body = s->body.p,
		.body_len = s->body.len,
		.keep_alive = true,
		.http_major = 2,
		.peer = c->peer,
	};
	pc_msg_t *m = pc__request_msg(c->srv, &parts);
	if (!m) {
		stream_refuse(s, 503);
		return;
	}
	if (c->srv->on_access) {
		size_t ml = strlen(method), tl = strlen(target);
		s->access_line = malloc(ml + tl + 2);
		if (s->access_line) {
			memcpy(s->access_line, method, ml + 1);
			memcpy(s->access_line + ml + 1, target, tl + 1);
		}
	}
	request_drop(s); /* the message has its own copy */
	pc_http_request_msg_t *req = pc_msg_data(m);
	req->id = pc__srv_new_id(c->sl);
	/* In the table before the actor can answer. */
	pc__srv_ent_add(c->sl, &s->ent, req->id);
	s->handler = r->handler;
	stream_set(s, PC__H2_S_SERVICE, "request complete");
	s->t0_ns = s->c->srv->on_access ? pc__clock_mono_ns() : 0;
	c->served = true;
	if (pc_send(r->handler, m) != 0) {
		s->handler = NULL;
		stream_forget(s, 0);
		stream_refuse(s, 503);
	}
}

/* A declared Content-Length past the limit is refused before any body. */
static bool declared_too_long(const pc__h2_stream_t *s)
{
	const char *cl = field(s, "content-length");
	/* nghttp2 checked the value's form (digits only). */
	return cl && strtoull(cl, NULL, 10) > s->c->srv->lim.max_body_bytes;
}

/* Appends one field (name NUL value NUL). */
static int fields_add(pc__h2_stream_t *s, const char *name, size_t nl, const char *value, size_t vl)
{
	pc__buf_t *f = &s->fields;
	if (pc__buf_append(f, name, nl) != 0 || pc__buf_append_char(f, 0) != 0 ||
	    pc__buf_append(f, value, vl) != 0 || pc__buf_append_char(f, 0) != 0)
		return PC_ENOMEM;
	s->nfields++;
	if (nl == 4 && strncasecmp(name, "host", 4) == 0)
		s->has_host = true;
	return 0;
}

static void on_stream_timer(pc_ioloop_t *loop, void *arg)
{
	(void)loop;
	pc__h2_stream_t *s = arg;
	pc__http_conn_t *c = s->c;
	if (s->stage != PC__H2_S_RECV)
		return;
	stream_refuse(s, 408);
	h2_pump(c);
}

/* ---- nghttp2 callbacks --------------------------------------------------------------- */

static ssize_t on_send(nghttp2_session *ss, const uint8_t *data, size_t len, int flags, void *user)
{
	(void)ss;
	(void)flags;
	pc__http_conn_t *c = user;
	if (c->out_bytes >= c->h2->high)
		return NGHTTP2_ERR_WOULDBLOCK; /* kept by nghttp2 until the socket drains */
	if (pc__conn_queue(c, (const char *)data, len) != 0)
		return NGHTTP2_ERR_CALLBACK_FAILURE;
	return (ssize_t)len;
}

static int on_begin_headers(nghttp2_session *ss, const nghttp2_frame *frame, void *user)
{
	pc__http_conn_t *c = user;
	if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
		return 0;
	pc__h2_stream_t *s = calloc(1, sizeof(*s));
	if (!s || nghttp2_session_set_stream_user_data(ss, frame->hd.stream_id, s) != 0) {
		free(s);
		return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* nghttp2 resets the stream */
	}
	struct pc__h2 *h2 = c->h2;
	s->c = c;
	s->sid = frame->hd.stream_id;
	s->ent.conn = c;
	s->ent.stream = s;
	stream_set(s, PC__H2_S_RECV, "headers");
	s->next = h2->streams;
	if (h2->streams)
		h2->streams->prev = s;
	h2->streams = s;
	h2->nstreams++;
	pc__conn_disarm(c); /* a stream is open: the connection is not idle */
	pc__ioloop_timer_arm(c->sl->loop, &s->timer, c->srv->lim.header_timeout_ms, on_stream_timer, s);
	return 0;
}

/* Trailers count as body, as on HTTP/1.1, and are not kept. */
static void trailer_field(pc__h2_stream_t *s, size_t cost)
{
	s->trailer_bytes += cost;
	if (s->body.len + s->trailer_bytes > s->c->srv->lim.max_body_bytes)
		s->refuse = 413;
}

static int on_header(nghttp2_session *ss, const nghttp2_frame *frame, const uint8_t *name, size_t nl,
		     const uint8_t *value, size_t vl, uint8_t flags, void *user)
{
	(void)flags;
	pc__http_conn_t *c = user;
	pc__h2_stream_t *s = stream_of(ss, frame->hd.stream_id);
	if (!s || s->stage != PC__H2_S_RECV || s->refuse)
		return 0;
	size_t cost = nl + vl + 4;
	if (frame->headers.cat != NGHTTP2_HCAT_REQUEST) {
		trailer_field(s, cost);
		return 0;
	}
	if (s->field_bytes + cost > c->srv->lim.max_header_bytes) {
		s->refuse = 431;
		return 0;
	}
	s->field_bytes += cost;
	/* Strings are NUL-separated here and in the request message. */
	if (memchr(name, 0, nl) || memchr(value, 0, vl))
		s->refuse = 400;
	else if (fields_add(s, (const char *)name, nl, (const char *)value, vl) != 0)
		s->refuse = 503;
	return 0;
}

/* Request bodies a connection may have arriving at once: four of the
 * largest, and never less than 16 MiB (many smaller uploads in parallel). */
static size_t conn_body_cap(const pc__http_conn_t *c)
{
	size_t four = (size_t)c->srv->lim.max_body_bytes * 4;
	return four > ((size_t)16 << 20) ? four : (size_t)16 << 20;
}

static int on_data_chunk(nghttp2_session *ss, uint8_t flags, int32_t sid, const uint8_t *data,
			 size_t len, void *user)
{
	(void)flags;
	pc__http_conn_t *c = user;
	pc__h2_stream_t *s = stream_of(ss, sid);
	if (!s || s->stage != PC__H2_S_RECV || s->refuse)
		return 0;
	/* Refused as soon as it is too long, or too much arrives at once on
	 * the connection; the rest is read and dropped (nghttp2 still returns
	 * its window). */
	if (len > c->srv->lim.max_body_bytes - s->body.len) {
		stream_refuse(s, 413);
	} else if (len > conn_body_cap(c) - c->h2->receiving || pc__buf_append(&s->body, data, len) != 0) {
		stream_refuse(s, 503);
	} else {
		c->h2->receiving += len;
		s->counted += len;
	}
	return 0;
}

/*
 * Rapid reset (CVE-2023-44487): a peer that opens streams and resets them
 * at once makes work (each request is dispatched) without ever holding
 * many streams open. Resets of streams still open on our side are allowed
 * max_concurrent_streams at once and as many again per second; past that
 * the connection ends with ENHANCE_YOUR_CALM. Resets of streams already
 * answered cost nothing and are not counted: libcurl 7.88 sends one after
 * every stream, which is why nghttp2's own limiter (which counts them all)
 * is off.
 */
static bool reset_allowed(pc__http_conn_t *c)
{
	struct pc__h2 *h2 = c->h2;
	uint64_t cap = c->srv->lim.max_concurrent_streams;
	uint64_t now = pc__ioloop_now_ns(c->sl->loop);
	uint64_t elapsed = now - h2->reset_ns;
	uint64_t refill = elapsed >= 1000000000u ? cap : elapsed * cap / 1000000000u;
	if (refill) {
		h2->reset_tokens = h2->reset_tokens + refill < cap ? h2->reset_tokens + refill : cap;
		h2->reset_ns = now;
	}
	if (!h2->reset_tokens)
		return false;
	h2->reset_tokens--;
	return true;
}

static int on_reset_recv(nghttp2_session *ss, pc__http_conn_t *c, int32_t sid)
{
	pc__h2_stream_t *s = stream_of(ss, sid);
	if (!s || s->end_sent || reset_allowed(c))
		return 0;
	pc__conn_drop(c);
	/* Short of memory for the GOAWAY, the session fails and closes. */
	return nghttp2_session_terminate_session(ss, NGHTTP2_ENHANCE_YOUR_CALM) == 0 ? 0
										     : NGHTTP2_ERR_CALLBACK_FAILURE;
}

static int on_frame_recv(nghttp2_session *ss, const nghttp2_frame *frame, void *user)
{
	pc__http_conn_t *c = user;
	if (frame->hd.type == NGHTTP2_RST_STREAM)
		return on_reset_recv(ss, c, frame->hd.stream_id);
	if (frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA)
		return 0;
	pc__h2_stream_t *s = stream_of(ss, frame->hd.stream_id);
	if (!s || s->stage != PC__H2_S_RECV)
		return 0;
	bool end = frame->hd.flags & NGHTTP2_FLAG_END_STREAM;
	bool head = frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat == NGHTTP2_HCAT_REQUEST;
	if (head && !s->refuse && declared_too_long(s))
		s->refuse = 413;
	if (s->refuse && (head || end)) {
		stream_refuse(s, s->refuse);
		return 0;
	}
	if (end)
		stream_dispatch(s);
	else if (head) /* the body's deadline runs from the end of the head */
		pc__ioloop_timer_arm(c->sl->loop, &s->timer, c->srv->lim.body_timeout_ms, on_stream_timer, s);
	return 0;
}

static int on_frame_send(nghttp2_session *ss, const nghttp2_frame *frame, void *user)
{
	(void)user;
	if ((frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA) ||
	    !(frame->hd.flags & NGHTTP2_FLAG_END_STREAM))
		return 0;
	int32_t sid = frame->hd.stream_id;
	pc__h2_stream_t *s = stream_of(ss, sid);
	if (s)
		s->end_sent = true;
	/* Answered before the request was whole (a refusal): ask the peer to
	 * stop sending it (RFC 9113 section 8.1). Short of memory, the rest
	 * of it is read and dropped. */
	if (nghttp2_session_get_stream_remote_close(ss, sid) == 0)
		(void)nghttp2_submit_rst_stream(ss, NGHTTP2_FLAG_NONE, sid, NGHTTP2_NO_ERROR);
	return 0;
}

static int on_stream_close(nghttp2_session *ss, int32_t sid, uint32_t error_code, void *user)
{
	(void)error_code;
	(void)user;
	pc__h2_stream_t *s = stream_of(ss, sid);
	if (!s)
		return 0;
	/* After our END_STREAM the answer went out whole, even if the actor
	 * has not ended it yet (no body to send). Before it, the peer reset
	 * the stream (or we did, and the actor was told already). */
	if (s->end_sent)
		s->handler = NULL;
	if (s->access_line)
		pc__access_request(s->c->srv, s->access_line, s->access_line + strlen(s->access_line) + 1, s->c->peer,
				   s->req_id, s->status, s->end_sent, s->bytes, s->t0_ns);
	stream_forget(s, 0);
	/* Cannot fail for a stream that exists. */
	(void)nghttp2_session_set_stream_user_data(ss, sid, NULL);
	stream_close(s);
	return 0;
}

/* ---- the connection ---------------------------------------------------------------------- */

/* Feeds input to nghttp2; false when the connection had to close. */
static bool h2_input(pc__http_conn_t *c, const char *p, size_t n)
{
	ssize_t rv = nghttp2_session_mem_recv(c->h2->ss, (const uint8_t *)p, n);
	if (rv >= 0)
		return true;
	/* Fatal: flooding, a failed callback, memory. Protocol errors are
	 * not fatal: nghttp2 queues a GOAWAY and stops reading. */
	pc__conn_close(c, rv == NGHTTP2_ERR_NOMEM ? PC_ENOMEM : 0);
	return false;
}

static void h2_read(pc__http_conn_t *c)
{
	char *rbuf = c->sl->rbuf;
	for (int i = 0; i < READS_PER_EVENT && !pc__conn_closed(c) && pc__h2_want_read(c); i++) {
		/* the peer being done leaves its unanswered requests gone */
		ssize_t n = pc__conn_recv(c, rbuf, PC__HTTP_RBUF);
		if (n == 0)
			continue;
		if (n < 0)
			return;
		if (!h2_input(c, rbuf, (size_t)n) || (size_t)n < PC__HTTP_RBUF)
			return;
	}
}

/* Moves nghttp2's frames to the socket, a batch at a time, while the
 * socket takes them; then either ends the connection (nghttp2 is done
 * with it) or sets the idle deadline and the epoll mask. */
static void h2_pump(pc__http_conn_t *c)
{
	struct pc__h2 *h2 = c->h2;
	for (;;) {
		size_t before = c->out_bytes;
		int rv = nghttp2_session_send(h2->ss);
		if (rv != 0) {
			pc__conn_close(c, rv == NGHTTP2_ERR_NOMEM ? PC_ENOMEM : PC_ESYS);
			return;
		}
		bool more = c->out_bytes > before;
		/* Inside a batch of commands the frames wait for its end (the
		 * rest of this then runs from that flush): framed now, in the
		 * order the answers came, written together. */
		if (c->out_head && pc__conn_hold(c, c->out_bytes))
			return;
		if (c->out_head && pc__conn_flush(c) != 0) {
			pc__conn_close(c, 0);
			return;
		}
		/* Nothing new, or the socket is full (EPOLLOUT resumes). */
		if (!more || c->out_head)
			break;
	}
	if (over_cap(c, 0)) {
		pc__conn_drop(c);
		pc__conn_close(c, PC_ELIMIT);
		return;
	}
	if (!nghttp2_session_want_read(h2->ss) && !nghttp2_session_want_write(h2->ss)) {
		/* GOAWAY went out (ours or in answer to the peer's). */
		pc__h2_finish(c, 0);
		pc__conn_closing(c);
		return;
	}
	if (!h2->nstreams && !pc__ioloop_timer_armed(&c->timer))
		pc__conn_arm(c, c->served ? c->srv->lim.idle_timeout_ms : c->srv->lim.header_timeout_ms);
	pc__conn_rewatch(c);
}

/* A server session for c with our SETTINGS queued, or NULL when memory
 * is short. */
static struct pc__h2 *h2_new(pc__http_conn_t *c)
{
	const pc_http_server_limits_t *l = &c->srv->lim;
	struct pc__h2 *h2 = calloc(1, sizeof(*h2));
	nghttp2_session_callbacks *cbs = NULL;
	nghttp2_option *opt = NULL;
	int rv = NGHTTP2_ERR_NOMEM;
	if (!h2 || nghttp2_session_callbacks_new(&cbs) != 0 || nghttp2_option_new(&opt) != 0)
		goto out;
	nghttp2_session_callbacks_set_send_callback(cbs, on_send);
	nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, on_begin_headers);
	nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
	nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data_chunk);
	nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, on_frame_recv);
	nghttp2_session_callbacks_set_on_frame_send_callback(cbs, on_frame_send);
	nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_stream_close);
	/* A closed stream is forgotten at once: nothing of ours outlives it. */
	nghttp2_option_set_no_closed_streams(opt, 1);
	/* Off: reset_allowed is the limiter (large, not infinite: nghttp2
	 * multiplies the rate by the elapsed seconds). */
	nghttp2_option_set_stream_reset_rate_limit(opt, (uint64_t)1 << 40, (uint64_t)1 << 40);
	rv = nghttp2_session_server_new2(&h2->ss, cbs, c, opt);
	if (rv == 0) {
		nghttp2_settings_entry iv[] = {
			{NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, l->max_concurrent_streams},
			{NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, STREAM_WINDOW},
		};
		rv = nghttp2_submit_settings(h2->ss, NGHTTP2_FLAG_NONE, iv, sizeof(iv) / sizeof(iv[0]));
	}
	if (rv == 0)
		rv = nghttp2_session_set_local_window_size(h2->ss, NGHTTP2_FLAG_NONE, 0, CONN_WINDOW);
out:
	nghttp2_session_callbacks_del(cbs);
	nghttp2_option_del(opt);
	if (rv != 0) {
		if (h2)
			nghttp2_session_del(h2->ss);
		free(h2);
		return NULL;
	}
	h2->high = l->max_output_bytes / 2 < OUT_HIGH ? l->max_output_bytes / 2 : OUT_HIGH;
	if (!h2->high)
		h2->high = 1;
	h2->reset_tokens = l->max_concurrent_streams;
	h2->reset_ns = pc__ioloop_now_ns(c->sl->loop);
	return h2;
}

/* From now on c speaks HTTP/2 through h2. */
static void h2_attach(pc__http_conn_t *c, struct pc__h2 *h2)
{
	c->h2 = h2;
	pc__conn_set(c, PC__C_H2, "http/2 preface");
	pc__conn_disarm(c); /* HTTP/1.1's deadline; h2_pump sets HTTP/2's */
}

void pc__h2_start(pc__http_conn_t *c, const char *data, size_t n)
{
	struct pc__h2 *h2 = h2_new(c);
	if (!h2) {
		pc__conn_close(c, PC_ENOMEM);
		return;
	}
	h2_attach(c, h2);
	if (h2_input(c, data, n))
		h2_pump(c);
}

/* ---- the h2c upgrade ------------------------------------------------------------------ */

/* Connection-level fields of the upgrade request, not the request's own. */
static bool upgrade_field(const char *name)
{
	return strcasecmp(name, "connection") == 0 || strcasecmp(name, "upgrade") == 0 ||
	       strcasecmp(name, "http2-settings") == 0;
}

/* The upgrade request as stream 1: its method and target as
 * pseudo-headers, its header fields, its body (taken from c). */
static pc__h2_stream_t *upgrade_stream(pc__http_conn_t *c, const char *method, const char *target,
				       const char *fields, uint32_t nfields)
{
	pc__h2_stream_t *s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	int rc = fields_add(s, ":method", 7, method, strlen(method));
	if (rc == 0)
		rc = fields_add(s, ":path", 5, target, strlen(target));
	for (uint32_t i = 0; i < nfields && rc == 0; i++) {
		const char *v = fields + strlen(fields) + 1;
		if (!upgrade_field(fields))
			rc = fields_add(s, fields, strlen(fields), v, strlen(v));
		fields = v + strlen(v) + 1;
	}
	if (rc != 0) {
		stream_free(s);
		return NULL;
	}
	s->c = c;
	s->sid = 1;
	s->ent.conn = c;
	s->ent.stream = s;
	stream_set(s, PC__H2_S_RECV, "upgrade");
	s->body = c->body;
	c->body = (pc__buf_t){0};
	return s;
}

int pc__h2_upgrade(pc__http_conn_t *c, const char *method, const char *target, const char *fields,
		   uint32_t nfields, const char *settings)
{
	static const char switching[] = "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\n"
					"Upgrade: h2c\r\n\r\n";
	uint8_t *payload = malloc(strlen(settings) + 1);
	pc__h2_stream_t *s = upgrade_stream(c, method, target, fields, nfields);
	struct pc__h2 *h2 = s && payload ? h2_new(c) : NULL;
	int status = 503;
	if (h2) {
		long plen = pc_base64_decode(settings, strlen(settings), payload, strlen(settings) + 1);
		/* nghttp2 checks the SETTINGS payload and opens stream 1,
		 * half-closed: its request is whole. */
		status = plen >= 0 && nghttp2_session_upgrade2(h2->ss, payload, (size_t)plen,
							       strcmp(method, "HEAD") == 0, s) == 0 ? 0 : 400;
		/* A server's nghttp2 opens stream 1 without the user data it
		 * was given; without it the stream's close would go unseen
		 * and the connection, a stream still counted, never idle. */
		if (!status && nghttp2_session_set_stream_user_data(h2->ss, 1, s) != 0)
			status = 503;
	}
	free(payload);
	if (status) {
		if (h2)
			pc__h2_free(h2);
		if (s)
			stream_free(s);
		return status;
	}
	h2->streams = s;
	h2->nstreams = 1;
	h2_attach(c, h2);
	struct iovec iov = {(void *)switching, sizeof(switching) - 1};
	pc__conn_send(c, &iov, 1);
	if (pc__conn_closed(c))
		return 0;
	pc__buf_t early = c->pending; /* the client's preface, if it came already */
	c->pending = (pc__buf_t){0};
	stream_dispatch(s);
	bool ok = !early.len || h2_input(c, early.p, early.len);
	pc__buf_free(&early);
	if (ok)
		h2_pump(c);
	return 0;
}

void pc__h2_on_event(pc__http_conn_t *c, uint32_t events)
{
	if (events & (EPOLLERR | EPOLLHUP)) {
		pc__conn_close(c, 0);
		return;
	}
	if ((events & EPOLLOUT) && c->out_head && pc__conn_flush(c) != 0) {
		pc__conn_close(c, 0);
		return;
	}
	if (events & (EPOLLIN | EPOLLRDHUP)) {
		h2_read(c);
		if (pc__conn_closed(c))
			return;
	}
	h2_pump(c);
}

void pc__h2_on_timer(pc__http_conn_t *c)
{
	struct pc__h2 *h2 = c->h2;
	if (h2->nstreams)
		return;
	/* A new connection that never asked anything is holding a slot; a
	 * served one idling out is a normal end. */
	if (!c->served)
		pc__conn_drop(c);
	if (nghttp2_session_terminate_session(h2->ss, NGHTTP2_NO_ERROR) != 0) {
		pc__conn_close(c, PC_ETIMEDOUT);
		return;
	}
	h2_pump(c);
}

bool pc__h2_want_read(const pc__http_conn_t *c)
{
	return c->h2 && nghttp2_session_want_read(c->h2->ss) && c->out_bytes < c->h2->high;
}

bool pc__h2_holding(const pc__http_conn_t *c)
{
	return c->h2 && c->h2->held > 0;
}

void pc__h2_finish(pc__http_conn_t *c, int reason)
{
	struct pc__h2 *h2 = c->h2;
	for (pc__h2_stream_t *s = h2->streams; s; s = s->next) {
		pc__ioloop_timer_cancel(c->sl->loop, &s->timer);
		out_drop(s);
		stream_forget(s, reason);
		stream_settle(s, "connection ends");
	}
	/* Best effort, once the streams are settled (sending may close
	 * some): the connection closes right after. */
	if (reason == PC_ESTOPPED && nghttp2_session_terminate_session(h2->ss, NGHTTP2_NO_ERROR) == 0 &&
	    nghttp2_session_send(h2->ss) == 0)
		(void)pc__conn_flush(c);
}

void pc__h2_free(struct pc__h2 *h2)
{
	if (!h2)
		return;
	/* nghttp2 calls nothing back from here. */
	nghttp2_session_del(h2->ss);
	while (h2->streams) {
		pc__h2_stream_t *s = h2->streams;
		h2->streams = s->next;
		stream_set(s, PC__H2_S_CLOSED, "connection ends");
		stream_free(s);
	}
	free(h2);
}

/* ---- answers ------------------------------------------------------------------------------ */

void pc__h2_respond(pc__h2_stream_t *s, int status, const char *hdrs, size_t hlen, const char *body,
		    size_t len)
{
	if (s->stage != PC__H2_S_SERVICE)
		return; /* answered already */
	pc__http_conn_t *c = s->c;
	bool bodiless = status == 204 || status == 304;
	bool with_body = !bodiless && !s->no_body && len;
	if (with_body && over_cap(c, len)) {
		pc__conn_drop(c);
		pc__conn_close(c, PC_ELIMIT);
		return;
	}
	s->out_end = true;
	s->status = status;
	s->bytes = with_body ? len : 0;
	pc__note_request_id(s->req_id, sizeof(s->req_id), hdrs, hlen);
	if ((with_body && out_add(s, body, len) != 0) ||
	    submit_head(s, status, hdrs, hlen, bodiless ? -1 : (long long)len, with_body) != 0)
		stream_fail(s, PC_ENOMEM);
	else
		answer_done(s);
	h2_pump(c);
}

void pc__h2_stream_start(pc__h2_stream_t *s, int status, const char *hdrs, size_t hlen)
{
	if (s->stage != PC__H2_S_SERVICE)
		return;
	pc__http_conn_t *c = s->c;
	s->no_body = s->no_body || status == 204 || status == 304;
	stream_set(s, PC__H2_S_STREAM, "stream start");
	s->status = status;
	pc__note_request_id(s->req_id, sizeof(s->req_id), hdrs, hlen);
	if (submit_head(s, status, hdrs, hlen, -1, !s->no_body) != 0)
		stream_fail(s, PC_ENOMEM);
	h2_pump(c);
}

void pc__h2_stream_write(pc__h2_stream_t *s, const char *data, size_t len)
{
	if (s->stage != PC__H2_S_STREAM || s->no_body || !len)
		return;
	pc__http_conn_t *c = s->c;
	if (over_cap(c, len)) {
		/* A peer that does not read is dropped, not buffered for. */
		pc__conn_drop(c);
		pc__conn_close(c, PC_ELIMIT);
		return;
	}
	s->bytes += len;
	if (out_add(s, data, len) != 0)
		stream_fail(s, PC_ENOMEM);
	else
		stream_resume(s);
	h2_pump(c);
}

void pc__h2_stream_end(pc__h2_stream_t *s)
{
	if (s->stage != PC__H2_S_STREAM)
		return;
	pc__http_conn_t *c = s->c;
	s->out_end = true;
	answer_done(s);
	stream_resume(s);
	h2_pump(c);
}

void pc__h2_abort(pc__h2_stream_t *s)
{
	pc__http_conn_t *c = s->c;
	s->handler = NULL; /* the actor asked: no GONE for it */
	stream_fail(s, 0);
	h2_pump(c);
}
