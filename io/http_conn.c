/*
 * One HTTP connection, on the thread of the loop that accepted it.
 *
 * Input is parsed by llhttp straight out of the loop's read buffer. When a
 * request completes, on_message_complete pauses the parser, so a connection
 * has at most one request in service; bytes after it (pipelined requests)
 * wait in `pending` and are parsed only once the answer has been queued,
 * which keeps responses in request order.
 *
 * Output is written at once when nothing is queued; what the socket does not
 * take is queued and flushed with sendmsg (writev with MSG_NOSIGNAL) on
 * EPOLLOUT. Output written by a command (an actor's answer) waits for the
 * end of the loop's batch of commands, up to PC__CONN_HOLD_MAX: a streamed
 * answer's head, chunks and end posted together then leave in one
 * sendmsg, not one each (WebSocket messages and HTTP/2 frames likewise).
 * Queued bytes past max_output_bytes drop the connection, and so does
 * queued output that makes no progress for idle_timeout_ms: a client that
 * stops reading costs a bounded amount of memory, for a bounded time.
 *
 * Two timers: the phase deadline (request head, body, keep-alive idle,
 * linger, or the WebSocket's / HTTP/2's) and the output stall timer.
 *
 * A connection whose first bytes are the HTTP/2 client preface never meets
 * llhttp, and one whose request asks to upgrade to h2c leaves it after
 * that request: from then on it is http2_server.c's, which uses the
 * output, close and request-message plumbing here.
 */
#include "http_conn_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <time.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "http2_internal.h"
#include "ws_internal.h"
#include "runtime/clock.h"

/* A read buffer's worth of reads per event, then other connections' turn. */
#define READS_PER_EVENT 8
#define OUT_MIN_CHUNK 4096
/* A head buffer larger than this is given back between requests. */
#define KEEP_HEAD_BUF 4096

static const char continue_100[] = "HTTP/1.1 100 Continue\r\n\r\n";

/* ---- small helpers ---------------------------------------------------------- */

static const char *reason_phrase(int status)
{
	switch (status) {
	case 100: return "Continue";
	case 101: return "Switching Protocols";
	case 200: return "OK";
	case 201: return "Created";
	case 202: return "Accepted";
	case 204: return "No Content";
	case 206: return "Partial Content";
	case 301: return "Moved Permanently";
	case 302: return "Found";
	case 303: return "See Other";
	case 304: return "Not Modified";
	case 307: return "Temporary Redirect";
	case 308: return "Permanent Redirect";
	case 400: return "Bad Request";
	case 401: return "Unauthorized";
	case 403: return "Forbidden";
	case 404: return "Not Found";
	case 405: return "Method Not Allowed";
	case 408: return "Request Timeout";
	case 409: return "Conflict";
	case 413: return "Content Too Large";
	case 415: return "Unsupported Media Type";
	case 422: return "Unprocessable Content";
	case 426: return "Upgrade Required";
	case 429: return "Too Many Requests";
	case 431: return "Request Header Fields Too Large";
	case 500: return "Internal Server Error";
	case 501: return "Not Implemented";
	case 502: return "Bad Gateway";
	case 503: return "Service Unavailable";
	case 504: return "Gateway Timeout";
	case 505: return "HTTP Version Not Supported";
	default: return "Status";
	}
}

static const char *conn_token(const pc__http_conn_t *c)
{
	return c->keep_alive ? "keep-alive" : "close";
}

static void on_phase_timer(pc_ioloop_t *loop, void *arg);
static void on_stall(pc_ioloop_t *loop, void *arg);

void pc__conn_arm(pc__http_conn_t *c, uint64_t ms)
{
	pc__ioloop_timer_arm(c->sl->loop, &c->timer, ms, on_phase_timer, c);
}

void pc__conn_disarm(pc__http_conn_t *c)
{
	pc__ioloop_timer_cancel(c->sl->loop, &c->timer);
}

void pc__conn_drop(pc__http_conn_t *c)
{
	if (c->dropped)
		return;
	c->dropped = true;
	PC__IO_STAT_ADD(c->sl->loop, connections_dropped, 1);
}

void pc__conn_notify(pc_actor_t *to, uint32_t type, pc_http_server_t *srv, uint64_t id,
		     int reason, uint16_t ws_code)
{
	pc_msg_t *m = pc_msg_new(type, sizeof(pc_http_gone_msg_t));
	if (!m)
		return;
	*(pc_http_gone_msg_t *)pc_msg_data(m) = (pc_http_gone_msg_t){
		.server = srv, .id = id, .reason = reason, .ws_code = ws_code};
	/* An actor that has stopped has nothing left to be told. */
	(void)pc_send(to, m);
}

/* True when the comma-separated `list` holds `token` (case-insensitive). */
static bool has_token(const char *list, const char *token)
{
	size_t tl = strlen(token);
	while (list && *list) {
		list += strspn(list, " \t,");
		size_t n = strcspn(list, ",");
		size_t m = n;
		while (m && (list[m - 1] == ' ' || list[m - 1] == '\t'))
			m--;
		if (m == tl && strncasecmp(list, token, tl) == 0)
			return true;
		list += n;
	}
	return false;
}

/* The first request header named `name` (case-insensitive), or NULL. */
static const char *conn_header(const pc__http_conn_t *c, const char *name)
{
	if (!c->head.len)
		return NULL;
	const char *s = c->head.p;
	s += strlen(s) + 1; /* the target */
	for (uint32_t i = 0; i < c->nheaders; i++) {
		const char *v = s + strlen(s) + 1;
		if (strcasecmp(s, name) == 0)
			return v;
		s = v + strlen(v) + 1;
	}
	return NULL;
}

/* ---- output ------------------------------------------------------------------ */

void pc__conn_progress(pc__http_conn_t *c)
{
	if (pc__ioloop_timer_armed(&c->wtimer))
		pc__ioloop_timer_arm(c->sl->loop, &c->wtimer, c->srv->lim.idle_timeout_ms, on_stall, c);
}

int pc__conn_queue(pc__http_conn_t *c, const char *p, size_t n)
{
	pc__out_t *t = c->out_tail;
	if (t && t->cap - t->len >= n) {
		memcpy(t->data + t->len, p, n);
		t->len += n;
	} else {
		size_t cap = n < OUT_MIN_CHUNK ? OUT_MIN_CHUNK : n;
		pc__out_t *o = malloc(sizeof(*o) + cap);
		if (!o)
			return PC_ENOMEM;
		o->next = NULL;
		o->off = 0;
		o->len = n;
		o->cap = cap;
		memcpy(o->data, p, n);
		if (t)
			t->next = o;
		else
			c->out_head = o;
		c->out_tail = o;
	}
	c->out_bytes += n;
	PC__IO_STAT_ADD(c->sl->loop, output_queued, n);
	return 0;
}

static void conn_on_event(pc_ioloop_t *loop, void *arg, uint32_t events);

/* The batch is done: the held output goes as if the socket had asked. */
static void flush_held(void *arg)
{
	pc__http_conn_t *c = arg;
	c->flush_due = false;
	if (!pc__conn_closed(c))
		conn_on_event(c->sl->loop, c, EPOLLOUT);
}

/* The flush is deferred like the connection's own free, so it runs before
 * a close later in the batch frees it. */
bool pc__conn_hold(pc__http_conn_t *c, size_t pending)
{
	pc_ioloop_t *loop = c->sl->loop;
	if (!pc__ioloop_in_commands(loop) || pending > PC__CONN_HOLD_MAX)
		return false;
	if (!c->flush_due) {
		if (pc__ioloop_defer(loop, flush_held, c) != 0)
			return false;
		c->flush_due = true;
	}
	return true;
}

void pc__conn_send(pc__http_conn_t *c, const struct iovec *iov, int n)
{
	if (pc__conn_closed(c) || c->state == PC__C_LINGER)
		return;
	size_t total = 0;
	for (int i = 0; i < n; i++)
		total += iov[i].iov_len;
	bool hold = pc__conn_hold(c, c->out_bytes + total);
	/* Too much to hold: what was held goes first. */
	if (!hold && c->flush_due && c->out_head && pc__conn_flush(c) != 0) {
		pc__conn_close(c, 0);
		return;
	}
	size_t skip = 0;
	if (!c->out_head && !hold) {
		struct msghdr mh = {.msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)n};
		ssize_t w;
		do
			w = sendmsg(c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
		while (w < 0 && errno == EINTR);
		if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
			pc__conn_close(c, 0);
			return;
		}
		if (w > 0)
			skip = (size_t)w;
	}
	for (int i = 0; i < n; i++) {
		size_t len = iov[i].iov_len;
		if (skip >= len) {
			skip -= len;
			continue;
		}
		if (pc__conn_queue(c, (const char *)iov[i].iov_base + skip, len - skip) != 0) {
			pc__conn_close(c, PC_ENOMEM);
			return;
		}
		skip = 0;
	}
	if (c->out_bytes > c->srv->lim.max_output_bytes) {
		pc__conn_drop(c);
		pc__conn_close(c, PC_ELIMIT);
		return;
	}
	if (c->out_head && !hold)
		pc__conn_rewatch(c);
}

int pc__conn_flush(pc__http_conn_t *c)
{
	while (c->out_head) {
		struct iovec iov[64];
		int n = 0;
		for (pc__out_t *o = c->out_head; o && n < 64; o = o->next)
			iov[n++] = (struct iovec){o->data + o->off, o->len - o->off};
		struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
		ssize_t w = sendmsg(c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return 0;
			return PC_ESYS;
		}
		pc__conn_progress(c);
		size_t left = (size_t)w;
		c->out_bytes -= left;
		PC__IO_STAT_SUB(c->sl->loop, output_queued, left);
		while (left) {
			pc__out_t *o = c->out_head;
			size_t rest = o->len - o->off;
			if (left < rest) {
				o->off += left;
				break;
			}
			left -= rest;
			c->out_head = o->next;
			free(o);
		}
		if (!c->out_head)
			c->out_tail = NULL;
	}
	return 0;
}

void pc__conn_rewatch(pc__http_conn_t *c)
{
	if (pc__conn_closed(c))
		return;
	uint32_t ev = 0;
	/* Held output does not wait on the socket: its flush comes anyway,
	 * and that flush settles the stall timer. */
	bool held = c->flush_due;
	bool out = c->out_head != NULL && !held;
	bool stall = false; /* output waits on the peer in some other way */
	switch (c->state) {
	case PC__C_HEAD:
	case PC__C_BODY:
	case PC__C_LINGER:
		ev = EPOLLIN | EPOLLRDHUP;
		break;
	case PC__C_SERVICE:
	case PC__C_STREAM:
		/* A hang-up now means the client is gone; reading stops while
		 * the pipelining buffer is full. */
		ev = EPOLLRDHUP;
		if (c->pending.len < PC__HTTP_PENDING_MAX)
			ev |= EPOLLIN;
		break;
	case PC__C_CLOSING:
		/* No EPOLLRDHUP: a client that half-closes still reads. */
		break;
	case PC__C_WS:
		if (pc__ws_want_read(c))
			ev = EPOLLIN | EPOLLRDHUP;
		out = out || pc__ws_want_write(c);
		break;
	case PC__C_H2:
		if (pc__h2_want_read(c))
			ev = EPOLLIN | EPOLLRDHUP;
		/* Bodies held for the peer's flow-control window: no
		 * EPOLLOUT (the socket has nothing to take), but the peer
		 * must make progress all the same. */
		stall = pc__h2_holding(c);
		break;
	case PC__C_NEW:
	case PC__C_CLOSED:
	case PC__C_COUNT:
		break;
	}
	if (out)
		ev |= EPOLLOUT;
	if (!out && !stall) {
		if (!held)
			pc__ioloop_timer_cancel(c->sl->loop, &c->wtimer);
	} else if (!pc__ioloop_timer_armed(&c->wtimer))
		pc__ioloop_timer_arm(c->sl->loop, &c->wtimer, c->srv->lim.idle_timeout_ms, on_stall, c);
	if (pc__ioloop_rewatch(c->sl->loop, &c->watch, ev) != 0)
		pc__conn_close(c, PC_ESYS);
}

/* ---- the connection's machine ------------------------------------------------- */

#define BIT(s) (1u << (s))
/* every state but closed may close */
#define CLOSE BIT(PC__C_CLOSED)

static const char *const lc_names[PC__C_COUNT] = {
	[PC__C_NEW] = "new",         [PC__C_HEAD] = "head",       [PC__C_BODY] = "body",
	[PC__C_SERVICE] = "service", [PC__C_STREAM] = "stream",   [PC__C_CLOSING] = "closing",
	[PC__C_LINGER] = "linger",   [PC__C_WS] = "ws",           [PC__C_H2] = "h2",
	[PC__C_CLOSED] = "closed",
};

/* lc_next[from]: the states `from` may go to. */
static const unsigned lc_next[PC__C_COUNT] = {
	[PC__C_NEW] = BIT(PC__C_HEAD) | CLOSE,
	[PC__C_HEAD] = BIT(PC__C_BODY) | BIT(PC__C_H2) | BIT(PC__C_CLOSING) | BIT(PC__C_LINGER) | CLOSE,
	/* a refused head answers from body */
	[PC__C_BODY] = BIT(PC__C_SERVICE) | BIT(PC__C_CLOSING) | BIT(PC__C_LINGER) | CLOSE,
	/* an h2c upgrade leaves from service */
	[PC__C_SERVICE] = BIT(PC__C_HEAD) | BIT(PC__C_STREAM) | BIT(PC__C_WS) | BIT(PC__C_H2) | BIT(PC__C_CLOSING) |
			  BIT(PC__C_LINGER) | CLOSE,
	[PC__C_STREAM] = BIT(PC__C_HEAD) | BIT(PC__C_CLOSING) | BIT(PC__C_LINGER) | CLOSE,
	[PC__C_CLOSING] = BIT(PC__C_LINGER) | CLOSE,
	[PC__C_LINGER] = CLOSE,
	/* a close frame sent with reading stopped: drain the peer */
	[PC__C_WS] = BIT(PC__C_LINGER) | CLOSE,
	[PC__C_H2] = BIT(PC__C_CLOSING) | BIT(PC__C_LINGER) | CLOSE,
};

const char *pc__conn_lc_name(pc__conn_state_t s)
{
	return (unsigned)s < PC__C_COUNT ? lc_names[s] : "unknown";
}

bool pc__conn_lc_legal(pc__conn_state_t from, pc__conn_state_t to)
{
	return (unsigned)from < PC__C_COUNT && (unsigned)to < PC__C_COUNT && (lc_next[from] & BIT(to));
}

void pc__conn_set(pc__http_conn_t *c, pc__conn_state_t to, const char *why)
{
	pc__conn_state_t from = c->state;
	if (!pc__conn_lc_legal(from, to)) {
		PC__IO_STAT_ADD(c->sl->loop, transitions_refused, 1);
		if (pc__io_traced(PC__IO_TRACE_HTTP))
			pc__io_trace("http", c->serial, pc__conn_lc_name(from), pc__conn_lc_name(to), "refused");
#ifdef PC__LC_STRICT
		abort();
#endif
		return;
	}
	c->state = to;
	if (pc__io_traced(PC__IO_TRACE_HTTP))
		pc__io_trace("http", c->serial, pc__conn_lc_name(from), pc__conn_lc_name(to), why);
}

/* ---- lifecycle ---------------------------------------------------------------- */

static void conn_destroy(void *arg)
{
	pc__http_conn_t *c = arg;
	pc__buf_free(&c->head);
	pc__buf_free(&c->body);
	pc__buf_free(&c->pending);
	while (c->out_head) {
		pc__out_t *o = c->out_head;
		c->out_head = o->next;
		free(o);
	}
	pc__ws_free(c->ws);
	pc__h2_free(c->h2);
	free(c);
}

void pc__conn_close(pc__http_conn_t *c, int reason)
{
	if (pc__conn_closed(c))
		return;
	pc__srv_loop_t *sl = c->sl;
	uint64_t id = c->id;
	/* Out of the table before the actor hears: after GONE / CLOSED every
	 * answer for the id is refused. */
	if (id)
		pc__srv_id_remove(sl, c);
	if (c->state == PC__C_SERVICE || c->state == PC__C_STREAM)
		pc__conn_access(c, false);
	if (c->ws)
		pc__ws_finish(c, id, reason);
	else if (c->h2)
		pc__h2_finish(c, reason);
	else if (c->handler)
		pc__conn_notify(c->handler, PC_MSG_HTTP_GONE, c->srv, id, reason, 0);
	/* Output held for the batch's end would have gone out already without
	 * the hold: it still goes, as far as the socket takes it. */
	if (c->flush_due && c->out_head)
		(void)pc__conn_flush(c);
	pc__conn_set(c, PC__C_CLOSED, reason ? pc_strerror(reason) : "closed");
	c->handler = NULL;
	pc__ioloop_unwatch(sl->loop, &c->watch);
	pc__ioloop_timer_cancel(sl->loop, &c->timer);
	pc__ioloop_timer_cancel(sl->loop, &c->wtimer);
	/* What was never written is dropped with the socket. */
	PC__IO_STAT_SUB(sl->loop, output_queued, c->out_bytes);
	c->out_bytes = 0;
	/* Linux releases the descriptor even when close reports an error,
	 * and there is nothing else to do with one. */
	(void)close(c->fd);
	c->fd = -1;
	if (c->prev)
		c->prev->next = c->next;
	else
		sl->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	__atomic_fetch_sub(&c->srv->nconns, 1, __ATOMIC_RELAXED);
	PC__IO_STAT_SUB(sl->loop, connections_live, 1);
	/* Freed after the batch: a later event of it may still name c. If
	 * even that cannot be queued, c is leaked rather than risked. */
	(void)pc__ioloop_defer(sl->loop, conn_destroy, c);
}

void pc__conn_linger(pc__http_conn_t *c)
{
	pc__conn_set(c, PC__C_LINGER, "linger");
	pc__ioloop_timer_cancel(c->sl->loop, &c->wtimer);
	if (shutdown(c->fd, SHUT_WR) != 0) {
		pc__conn_close(c, 0);
		return;
	}
	pc__conn_arm(c, PC__HTTP_LINGER_MS);
	pc__conn_rewatch(c);
}

/* The last response is queued: flush it, then linger. */
void pc__conn_closing(pc__http_conn_t *c)
{
	pc__conn_set(c, PC__C_CLOSING, "last response");
	pc__conn_disarm(c);
	if (!c->out_head)
		pc__conn_linger(c);
	else
		pc__conn_rewatch(c);
}

/* ---- the access hook ---------------------------------------------------------- */

void pc__note_request_id(char *dst, size_t cap, const char *h, size_t hlen)
{
	static const char name[] = "x-request-id:";
	const size_t nl = sizeof(name) - 1;
	dst[0] = '\0';
	for (size_t i = 0; h && i + nl <= hlen; i++) {
		if ((i == 0 || h[i - 1] == '\n') && strncasecmp(h + i, name, nl) == 0) {
			size_t v = i + nl;
			while (v < hlen && h[v] == ' ')
				v++;
			size_t e = v;
			while (e < hlen && h[e] != '\r' && e - v < cap - 1)
				e++;
			memcpy(dst, h + v, e - v);
			dst[e - v] = '\0';
			return;
		}
	}
}

void pc__access_request(pc_http_server_t *srv, const char *method, const char *target, const char *peer,
			const char *request_id, int status, bool completed, uint64_t bytes, uint64_t t0_ns)
{
	if (!srv->on_access)
		return;
	char path[512] = "";
	if (target) {
		size_t n = strcspn(target, "?");
		snprintf(path, sizeof(path), "%.*s", (int)(n < sizeof(path) ? n : sizeof(path) - 1), target);
	}
	uint64_t now = pc__clock_mono_ns();
	pc_http_access_t a = {
		.kind = PC_HTTP_ACCESS_REQUEST,
		.method = method ? method : "",
		.path = path,
		.peer = peer,
		.request_id = request_id ? request_id : "",
		.status = status,
		.completed = completed,
		.bytes = bytes,
		.duration_us = t0_ns && now > t0_ns ? (now - t0_ns) / 1000u : 0,
	};
	srv->on_access(srv->access_user, &a);
}

void pc__conn_access(pc__http_conn_t *c, bool completed)
{
	if (!c->srv->on_access)
		return;
	bool parsed = c->head.len > 0;
	pc__access_request(c->srv, parsed ? llhttp_method_name((llhttp_method_t)c->parser.method) : "",
			   parsed ? c->head.p : "", c->peer, c->req_id, c->resp_status, completed, c->resp_bytes,
			   c->req_t0_ns);
}

void pc__conn_access_ws(pc__http_conn_t *c, uint16_t code, int reason)
{
	if (!c->srv->on_access)
		return;
	uint64_t now = pc__clock_mono_ns();
	pc_http_access_t a = {
		.kind = PC_HTTP_ACCESS_WS_CLOSE,
		.method = "",
		.path = "",
		.peer = c->peer,
		.request_id = "",
		.status = code,
		.reason = reason,
		.completed = true,
		.duration_us = c->req_t0_ns && now > c->req_t0_ns ? (now - c->req_t0_ns) / 1000u : 0,
	};
	c->srv->on_access(c->srv->access_user, &a);
}

void pc__server_request_id(char line[64], char *id)
{
	uint8_t r[12];
	if (getrandom(r, sizeof(r), GRND_NONBLOCK) != (ssize_t)sizeof(r))
		memset(r, 0, sizeof(r)); /* no entropy yet: an id that is still well-formed */
	char hex[25];
	for (size_t i = 0; i < sizeof(r); i++)
		snprintf(hex + 2 * i, 3, "%02x", r[i]);
	snprintf(line, 64, "x-request-id: req_%s\r\n", hex);
	if (id)
		snprintf(id, 29, "req_%s", hex);
}

/* A response the server makes itself, without a body: every answer names
 * its request, these too. */
static void conn_reply(pc__http_conn_t *c, int status, const char *extra)
{
	c->resp_status = status;
	char rid[64];
	pc__server_request_id(rid, c->req_id);
	char head[320];
	int n = snprintf(head, sizeof(head), "HTTP/1.1 %d %s\r\n%s%sContent-Length: 0\r\nConnection: %s\r\n\r\n",
			 status, reason_phrase(status), rid, extra ? extra : "", conn_token(c));
	if (n < 0 || (size_t)n >= sizeof(head)) {
		pc__conn_close(c, PC_ESYS);
		return;
	}
	struct iovec iov = {head, (size_t)n};
	pc__conn_send(c, &iov, 1);
}

/* The request cannot be served: answer `status` and close. */
static void conn_fail(pc__http_conn_t *c, int status)
{
	if (pc__conn_closed(c))
		return;
	c->keep_alive = false;
	if (status == 408 || status == 413 || status == 431)
		pc__conn_drop(c);
	conn_reply(c, status, NULL);
	pc__conn_access(c, true);
	if (!pc__conn_closed(c))
		pc__conn_closing(c);
}

static void conn_drive(pc__http_conn_t *c);

/* The answer to the request in service is fully queued. */
static void conn_response_done(pc__http_conn_t *c)
{
	pc__conn_access(c, true);
	if (c->id)
		pc__srv_id_remove(c->sl, c);
	c->handler = NULL;
	c->head.len = 0;
	if (c->head.cap > KEEP_HEAD_BUF)
		pc__buf_free(&c->head);
	c->nheaders = 0;
	pc__buf_free(&c->body); /* up to max_body_bytes: not kept while idle */
	c->trailer_bytes = 0;
	c->head_raw = 0;
	c->err_status = 0;
	c->begun = c->head_timed = c->upgrade = c->ws_ok = c->no_body = c->chunked = false;
	c->served = true;
	if (!c->keep_alive) {
		pc__conn_closing(c);
		return;
	}
	pc__conn_set(c, PC__C_HEAD, "keep-alive");
	llhttp_resume(&c->parser);
	/* The idle clock starts once the response has left. */
	if (!c->out_head)
		pc__conn_arm(c, c->srv->lim.idle_timeout_ms);
	else
		pc__conn_disarm(c);
	conn_drive(c);
	pc__conn_rewatch(c);
}

static void conn_reply_done(pc__http_conn_t *c, int status, const char *extra)
{
	conn_reply(c, status, extra);
	if (!pc__conn_closed(c))
		conn_response_done(c);
}

/* ---- parser callbacks ------------------------------------------------------------ */

static int refuse(pc__http_conn_t *c, int status)
{
	c->err_status = status;
	return HPE_USER;
}

static int on_message_begin(llhttp_t *p)
{
	pc__http_conn_t *c = p->data;
	c->begun = true;
	/* The head's deadline runs from its first byte, however it trickles. */
	if (!c->head_timed) {
		c->head_timed = true;
		pc__conn_arm(c, c->srv->lim.header_timeout_ms);
	}
	return 0;
}

static int head_add(pc__http_conn_t *c, const char *at, size_t len)
{
	const pc_http_server_limits_t *l = &c->srv->lim;
	if (c->state != PC__C_HEAD) {
		/* Trailers after a chunked body: counted as body, not kept. */
		c->trailer_bytes += len;
		if (c->body.len + c->trailer_bytes > l->max_body_bytes)
			return refuse(c, 413);
		return 0;
	}
	/* What the parser hands over, plus ": " and CRLF per header and the
	 * request line's own framing. */
	if (c->head.len + len + (size_t)c->nheaders * 4 + 16 > l->max_header_bytes)
		return refuse(c, 431);
	if (pc__buf_append(&c->head, at, len) != 0)
		return refuse(c, 503);
	return 0;
}

static int on_head_data(llhttp_t *p, const char *at, size_t len)
{
	pc__http_conn_t *c = p->data;
	c->span_end = at + len;
	/* Strings are NUL-separated here and in the request message. */
	if (memchr(at, 0, len))
		return refuse(c, 400);
	return head_add(c, at, len);
}

static int on_head_end(llhttp_t *p)
{
	return head_add(p->data, "", 1);
}

static int on_header_field_complete(llhttp_t *p)
{
	pc__http_conn_t *c = p->data;
	int rc = head_add(c, "", 1);
	c->val_start = c->head.len;
	return rc;
}

static int on_header_value_complete(llhttp_t *p)
{
	pc__http_conn_t *c = p->data;
	if (c->state == PC__C_HEAD) {
		while (c->head.len > c->val_start &&
		       (c->head.p[c->head.len - 1] == ' ' || c->head.p[c->head.len - 1] == '\t'))
			c->head.len--;
	}
	int rc = head_add(c, "", 1);
	if (rc == 0 && c->state == PC__C_HEAD)
		c->nheaders++;
	return rc;
}

static int on_headers_complete(llhttp_t *p)
{
	pc__http_conn_t *c = p->data;
	const pc_http_server_limits_t *l = &c->srv->lim;
	pc__conn_set(c, PC__C_BODY, "head complete");
	c->http_minor = p->http_minor;
	/* The raw head, padding included, up to its last header value. */
	if (c->head_raw + (size_t)(c->span_end - c->chunk) > l->max_header_bytes)
		return refuse(c, 431);
	if (p->http_major != 1)
		return refuse(c, 505);
	if ((p->flags & F_CONTENT_LENGTH) && p->content_length > l->max_body_bytes)
		return refuse(c, 413);
	if (!(p->flags & F_CHUNKED) && p->content_length == 0)
		return 0;
	const char *expect = conn_header(c, "expect");
	if (expect && c->http_minor >= 1 && strcasecmp(expect, "100-continue") == 0) {
		struct iovec iov = {(void *)continue_100, sizeof(continue_100) - 1};
		pc__conn_send(c, &iov, 1);
		if (pc__conn_closed(c))
			return HPE_USER;
	}
	pc__conn_arm(c, l->body_timeout_ms);
	return 0;
}

static int on_body(llhttp_t *p, const char *at, size_t len)
{
	pc__http_conn_t *c = p->data;
	if (len > c->srv->lim.max_body_bytes - c->body.len)
		return refuse(c, 413);
	if (pc__buf_append(&c->body, at, len) != 0)
		return refuse(c, 503);
	return 0;
}

static int on_message_complete(llhttp_t *p)
{
	pc__http_conn_t *c = p->data;
	c->keep_alive = llhttp_should_keep_alive(p) != 0;
	c->upgrade = p->upgrade != 0;
	c->done = true;
	pc__conn_disarm(c);
	/* One request in service at a time: the rest waits. */
	return HPE_PAUSED;
}

static const llhttp_settings_t parser_settings = {
	.on_message_begin = on_message_begin,
	.on_url = on_head_data,
	.on_header_field = on_head_data,
	.on_header_value = on_head_data,
	.on_headers_complete = on_headers_complete,
	.on_body = on_body,
	.on_message_complete = on_message_complete,
	.on_url_complete = on_head_end,
	.on_header_field_complete = on_header_field_complete,
	.on_header_value_complete = on_header_value_complete,
};

/* ---- requests -------------------------------------------------------------------- */

static char *put_str(char *s, const char *src, size_t n)
{
	memcpy(s, src, n);
	s[n] = 0;
	return s + n + 1;
}

/* Copies the fields that are headers (not pseudo-headers) to `s`, with
 * their table in `hdr`; returns the count. */
static uint32_t put_fields(char **s, pc_http_header_t *hdr, const pc__req_parts_t *p)
{
	const char *f = p->fields;
	uint32_t n = 0;
	for (uint32_t i = 0; i < p->nfields; i++) {
		size_t nl = strlen(f);
		const char *v = f + nl + 1;
		size_t vl = strlen(v);
		if (f[0] != ':') {
			hdr[n].name = *s;
			*s = put_str(*s, f, nl);
			hdr[n].value = *s;
			*s = put_str(*s, v, vl);
			n++;
		}
		f = v + vl + 1;
	}
	return n;
}

pc_msg_t *pc__request_msg(pc_http_server_t *srv, const pc__req_parts_t *p)
{
	size_t mlen = strlen(p->method);
	size_t tlen = strlen(p->target);
	size_t plen = strcspn(p->target, "?");
	size_t qlen = tlen > plen ? tlen - plen - 1 : 0;
	size_t hostlen = p->host ? strlen(p->host) : 0;
	size_t nhdr = (size_t)p->nfields + (p->host ? 1 : 0);
	size_t size = sizeof(pc_http_request_msg_t) + nhdr * sizeof(pc_http_header_t) + mlen + 1 + tlen +
		      1 + plen + 1 + qlen + 1 + p->fields_len + (p->host ? 5 + hostlen + 1 : 0) +
		      p->body_len + 1;
	pc_msg_t *m = pc_msg_new(PC_MSG_HTTP_REQUEST, size);
	if (!m)
		return NULL;
	pc_http_request_msg_t *req = pc_msg_data(m);
	pc_http_header_t *hdr = (pc_http_header_t *)(req + 1);
	char *s = (char *)(hdr + nhdr);
	memset(req, 0, sizeof(*req));
	req->server = srv;
	req->method = s;
	s = put_str(s, p->method, mlen);
	req->target = s;
	s = put_str(s, p->target, tlen);
	req->path = s;
	s = put_str(s, p->target, plen);
	req->query = s;
	s = put_str(s, p->target + tlen - qlen, qlen);
	uint32_t n = put_fields(&s, hdr, p);
	if (p->host) {
		hdr[n].name = s;
		s = put_str(s, "host", 4);
		hdr[n].value = s;
		s = put_str(s, p->host, hostlen);
		n++;
	}
	req->headers = hdr;
	req->header_count = n;
	req->body = s;
	req->body_len = p->body_len;
	put_str(s, p->body_len ? p->body : "", p->body_len);
	req->keep_alive = p->keep_alive;
	req->http_major = p->http_major;
	req->http_minor = p->http_minor;
	snprintf(req->peer, sizeof(req->peer), "%s", p->peer);
	return m;
}

/* An HTTP/1.1 request asking to upgrade to h2c (with its HTTP2-Settings:
 * without them it is served as HTTP/1.1) becomes stream 1 of an HTTP/2
 * connection. True when it was taken care of. */
static bool conn_upgrade_h2c(pc__http_conn_t *c, const char *method, const char *target, size_t tlen)
{
	const char *settings = conn_header(c, "http2-settings");
	if (!c->upgrade || c->http_minor < 1 || !settings || !has_token(conn_header(c, "upgrade"), "h2c"))
		return false;
	int st = pc__h2_upgrade(c, method, target, target + tlen + 1, c->nheaders, settings);
	if (st)
		conn_reply_done(c, st, NULL);
	else
		pc__buf_free(&c->head); /* stream 1 has its own copy */
	return true;
}

/* A request completed: hand it to its route's actor, or answer it here. */
static void conn_dispatch(pc__http_conn_t *c)
{
	pc__conn_set(c, PC__C_SERVICE, "request complete");
	c->req_t0_ns = c->srv->on_access ? pc__clock_mono_ns() : 0;
	c->resp_status = 0;
	c->resp_bytes = 0;
	c->req_id[0] = '\0';
	if (!c->head.len) {
		conn_fail(c, 400);
		return;
	}
	const char *method = llhttp_method_name((llhttp_method_t)c->parser.method);
	const char *target = c->head.p;
	size_t tlen = strlen(target);
	size_t plen = strcspn(target, "?");
	c->no_body = strcmp(method, "HEAD") == 0;
	/* An upgrade that is not completed ends the connection: what follows
	 * on it may be in another protocol. */
	if (c->upgrade)
		c->keep_alive = false;
	if (conn_upgrade_h2c(c, method, target, tlen))
		return;
	const pc__http_route_t *r = pc__srv_route(c->srv, method, target, plen);
	if (!r) {
		conn_reply_done(c, 404, NULL);
		return;
	}
	pc__req_parts_t parts = {
		.method = method,
		.target = target,
		.fields = target + tlen + 1,
		.fields_len = c->head.len - tlen - 1,
		.nfields = c->nheaders,
		.body = c->body.p,
		.body_len = c->body.len,
		.keep_alive = c->keep_alive,
		.http_major = 1,
		.http_minor = c->http_minor,
		.peer = c->peer,
	};
	pc_msg_t *m = pc__request_msg(c->srv, &parts);
	if (!m) {
		conn_reply_done(c, 503, NULL);
		return;
	}
	pc_http_request_msg_t *req = pc_msg_data(m);
	if (c->upgrade && has_token(conn_header(c, "upgrade"), "websocket")) {
		int st = pc__ws_check(c, req);
		if (st) {
			pc_msg_free(m);
			conn_reply_done(c, st, st == 426 ? "Sec-WebSocket-Version: 13\r\n" : NULL);
			return;
		}
		req->upgrade = c->ws_ok = true;
	}
	uint64_t id = pc__srv_new_id(c->sl);
	req->id = id;
	/* In the table before the actor can answer. */
	pc__srv_id_add(c->sl, c, id);
	c->handler = r->handler;
	if (pc_send(r->handler, m) != 0) {
		c->handler = NULL;
		pc__srv_id_remove(c->sl, c);
		conn_reply_done(c, 503, NULL);
	}
}

/* Feeds input to the parser; returns how much it took (all of it unless a
 * request completed or the input was refused). */
static size_t conn_parse(pc__http_conn_t *c, const char *p, size_t n)
{
	bool in_head = c->state == PC__C_HEAD;
	c->chunk = c->span_end = p;
	llhttp_errno_t e = llhttp_execute(&c->parser, p, n);
	if (pc__conn_closed(c))
		return n;
	size_t used = n;
	if (e == HPE_PAUSED || e == HPE_PAUSED_UPGRADE) {
		used = (size_t)(llhttp_get_error_pos(&c->parser) - p);
	} else if (e != HPE_OK) {
		conn_fail(c, c->err_status ? c->err_status : 400);
		return n;
	}
	if (in_head && c->state == PC__C_HEAD) {
		/* Bytes no callback sees (padding) count too; a head that
		 * completes in this chunk is measured at headers-complete. */
		c->head_raw += used;
		if (c->head_raw > c->srv->lim.max_header_bytes)
			conn_fail(c, 431);
	}
	return used;
}

/* Dispatches a completed request, then parses what is pending while the
 * connection is between requests. Re-entry (an answer made during
 * dispatch) returns at once: the outer loop goes on. */
static void conn_drive(pc__http_conn_t *c)
{
	if (c->in_drive)
		return;
	c->in_drive = true;
	for (;;) {
		if (c->done) {
			c->done = false;
			conn_dispatch(c);
		}
		if (pc__conn_closed(c) || (c->state != PC__C_HEAD && c->state != PC__C_BODY) || !c->pending.len)
			break;
		size_t used = conn_parse(c, c->pending.p, c->pending.len);
		if (pc__conn_closed(c))
			break;
		memmove(c->pending.p, c->pending.p + used, c->pending.len - used);
		c->pending.len -= used;
	}
	c->in_drive = false;
	if (!pc__conn_closed(c) && !c->pending.len)
		pc__buf_free(&c->pending);
}

static void conn_input(pc__http_conn_t *c, const char *data, size_t n)
{
	size_t used = conn_parse(c, data, n);
	if (pc__conn_closed(c) || !c->done)
		return;
	if (used < n && pc__buf_append(&c->pending, data + used, n - used) != 0) {
		pc__conn_close(c, PC_ENOMEM);
		return;
	}
	conn_drive(c);
}

/* The connection's first bytes: the HTTP/2 client preface makes it an
 * HTTP/2 connection, anything else HTTP/1.1. A part of the preface waits
 * in `pending` for the rest (under the head deadline). */
static void conn_first_input(pc__http_conn_t *c, const char *data, size_t n)
{
	if (c->pending.len) {
		if (pc__buf_append(&c->pending, data, n) != 0) {
			pc__conn_close(c, PC_ENOMEM);
			return;
		}
		data = c->pending.p;
		n = c->pending.len;
	}
	int kind = pc__h2_sniff(data, n);
	if (kind == 0) {
		if (!c->pending.len && pc__buf_append(&c->pending, data, n) != 0)
			pc__conn_close(c, PC_ENOMEM);
		return;
	}
	c->sniffed = true;
	pc__buf_t held = c->pending; /* the parsers may use `pending` afresh */
	c->pending = (pc__buf_t){0};
	if (kind > 0)
		pc__h2_start(c, data, n);
	else
		conn_input(c, data, n);
	pc__buf_free(&held);
}

ssize_t pc__conn_recv(pc__http_conn_t *c, char *buf, size_t len)
{
	ssize_t n = recv(c->fd, buf, len, MSG_DONTWAIT);
	if (n < 0 && errno == EINTR)
		return 0;
	if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
		pc__conn_close(c, 0);
	else if (n == 0)
		pc__conn_close(c, 0); /* the peer is done */
	return n > 0 ? n : -1;
}

static void conn_readable(pc__http_conn_t *c, uint32_t events)
{
	char *rbuf = c->sl->rbuf;
	for (int i = 0; i < READS_PER_EVENT && !pc__conn_closed(c); i++) {
		if (c->state == PC__C_H2)
			return; /* HTTP/2 now: the rest is read there */
		size_t room = PC__HTTP_RBUF;
		if (c->state == PC__C_SERVICE || c->state == PC__C_STREAM) {
			room = c->pending.len < PC__HTTP_PENDING_MAX ? PC__HTTP_PENDING_MAX - c->pending.len : 0;
			if (!room) {
				if (events & EPOLLRDHUP)
					pc__conn_close(c, 0);
				return;
			}
		} else if (c->state == PC__C_CLOSING) {
			return;
		}
		/* The peer being done is, between requests, a normal end; with
		 * a request in service, a vanished client (GONE). */
		ssize_t n = pc__conn_recv(c, rbuf, room);
		if (n == 0)
			continue;
		if (n < 0)
			return;
		if (!c->sniffed) {
			conn_first_input(c, rbuf, (size_t)n);
		} else if (c->state == PC__C_HEAD || c->state == PC__C_BODY) {
			conn_input(c, rbuf, (size_t)n);
		} else if (c->state == PC__C_SERVICE || c->state == PC__C_STREAM) {
			if (pc__buf_append(&c->pending, rbuf, (size_t)n) != 0)
				pc__conn_close(c, PC_ENOMEM);
		}
		/* PC__C_LINGER: input is drained and dropped. */
		if ((size_t)n < room)
			return;
	}
}

static void conn_on_event(pc_ioloop_t *loop, void *arg, uint32_t events)
{
	(void)loop;
	pc__http_conn_t *c = arg;
	if (c->state == PC__C_WS) {
		pc__ws_on_event(c, events);
		return;
	}
	if (c->state == PC__C_H2) {
		pc__h2_on_event(c, events);
		return;
	}
	if (events & (EPOLLERR | EPOLLHUP)) {
		pc__conn_close(c, 0);
		return;
	}
	if ((events & EPOLLOUT) && c->out_head) {
		if (pc__conn_flush(c) != 0) {
			pc__conn_close(c, 0);
			return;
		}
		if (!c->out_head) {
			if (c->state == PC__C_CLOSING) {
				pc__conn_linger(c);
				return;
			}
			if (c->state == PC__C_HEAD && !c->begun)
				pc__conn_arm(c, c->srv->lim.idle_timeout_ms);
		}
	}
	if (events & (EPOLLIN | EPOLLRDHUP))
		conn_readable(c, events);
	pc__conn_rewatch(c);
}

static void on_phase_timer(pc_ioloop_t *loop, void *arg)
{
	(void)loop;
	pc__http_conn_t *c = arg;
	switch (c->state) {
	case PC__C_HEAD:
		if (c->begun) {
			conn_fail(c, 408);
			break;
		}
		/* Nothing asked: a kept-alive connection's normal end, but a
		 * new one that never spoke is holding a slot. */
		if (!c->served)
			pc__conn_drop(c);
		pc__conn_close(c, PC_ETIMEDOUT);
		break;
	case PC__C_BODY:
		conn_fail(c, 408);
		break;
	case PC__C_LINGER:
		pc__conn_close(c, 0);
		break;
	case PC__C_WS:
		pc__ws_on_timer(c);
		break;
	case PC__C_H2:
		pc__h2_on_timer(c);
		break;
	case PC__C_SERVICE:
	case PC__C_STREAM:
	case PC__C_CLOSING:
	case PC__C_NEW:
	case PC__C_CLOSED:
	case PC__C_COUNT:
		break;
	}
}

static void on_stall(pc_ioloop_t *loop, void *arg)
{
	(void)loop;
	pc__http_conn_t *c = arg;
	pc__conn_drop(c);
	pc__conn_close(c, PC_ETIMEDOUT);
}

/* ---- answers ------------------------------------------------------------------------- */

void pc__conn_respond(pc__http_conn_t *c, int status, const char *hdrs, size_t hlen,
		      const char *body, size_t len)
{
	if (c->state != PC__C_SERVICE)
		return; /* answered already (or upgraded) */
	bool bodiless = status == 204 || status == 304;
	c->resp_status = status;
	c->resp_bytes = bodiless || c->no_body ? 0 : len;
	pc__note_request_id(c->req_id, sizeof(c->req_id), hdrs, hlen);
	char line[80], tail[96];
	int a = snprintf(line, sizeof(line), "HTTP/1.1 %d %s\r\n", status, reason_phrase(status));
	int b = bodiless ? snprintf(tail, sizeof(tail), "Connection: %s\r\n\r\n", conn_token(c))
			 : snprintf(tail, sizeof(tail), "Content-Length: %zu\r\nConnection: %s\r\n\r\n", len,
				    conn_token(c));
	if (a < 0 || b < 0 || (size_t)a >= sizeof(line) || (size_t)b >= sizeof(tail)) {
		pc__conn_close(c, PC_ESYS);
		return;
	}
	struct iovec iov[4] = {
		{line, (size_t)a},
		{(void *)hdrs, hlen},
		{tail, (size_t)b},
		{(void *)body, bodiless || c->no_body ? 0 : len},
	};
	pc__conn_send(c, iov, 4);
	if (!pc__conn_closed(c))
		conn_response_done(c);
}

void pc__conn_stream_start(pc__http_conn_t *c, int status, const char *hdrs, size_t hlen)
{
	if (c->state != PC__C_SERVICE)
		return;
	bool bodiless = status == 204 || status == 304;
	/* HTTP/1.0 has no chunks: the end of the body is the end of the
	 * connection. */
	bool te = c->http_minor >= 1 && !bodiless;
	if (c->http_minor == 0 && !bodiless)
		c->keep_alive = false;
	c->no_body = c->no_body || bodiless;
	c->chunked = te && !c->no_body;
	c->resp_status = status;
	pc__note_request_id(c->req_id, sizeof(c->req_id), hdrs, hlen);
	char line[80], tail[96];
	int a = snprintf(line, sizeof(line), "HTTP/1.1 %d %s\r\n", status, reason_phrase(status));
	int b = snprintf(tail, sizeof(tail), "%sConnection: %s\r\n\r\n", te ? "Transfer-Encoding: chunked\r\n" : "",
			 conn_token(c));
	if (a < 0 || b < 0 || (size_t)a >= sizeof(line) || (size_t)b >= sizeof(tail)) {
		pc__conn_close(c, PC_ESYS);
		return;
	}
	struct iovec iov[3] = {{line, (size_t)a}, {(void *)hdrs, hlen}, {tail, (size_t)b}};
	pc__conn_set(c, PC__C_STREAM, "stream start");
	pc__conn_send(c, iov, 3);
}

void pc__conn_stream_write(pc__http_conn_t *c, const char *data, size_t len)
{
	if (c->state != PC__C_STREAM || !len || c->no_body)
		return;
	c->resp_bytes += len;
	if (!c->chunked) {
		struct iovec iov = {(void *)data, len};
		pc__conn_send(c, &iov, 1);
		return;
	}
	char hx[24];
	int n = snprintf(hx, sizeof(hx), "%zx\r\n", len);
	if (n < 0 || (size_t)n >= sizeof(hx)) {
		pc__conn_close(c, PC_ESYS);
		return;
	}
	struct iovec iov[3] = {{hx, (size_t)n}, {(void *)data, len}, {(void *)"\r\n", 2}};
	pc__conn_send(c, iov, 3);
}

void pc__conn_stream_end(pc__http_conn_t *c)
{
	if (c->state != PC__C_STREAM)
		return;
	if (c->chunked) {
		struct iovec iov = {(void *)"0\r\n\r\n", 5};
		pc__conn_send(c, &iov, 1);
		if (pc__conn_closed(c))
			return;
	}
	conn_response_done(c);
}

/* ---- accept ----------------------------------------------------------------------------- */

static void format_peer(char out[48], const struct sockaddr *sa)
{
	char addr[INET6_ADDRSTRLEN] = "?";
	unsigned port = 0;
	const void *src = NULL;
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
		src = &in->sin_addr;
		port = ntohs(in->sin_port);
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
		src = &in6->sin6_addr;
		port = ntohs(in6->sin6_port);
	}
	if (src && !inet_ntop(sa->sa_family, src, addr, sizeof(addr)))
		strcpy(addr, "?");
	/* Truncation of a long IPv6 peer is acceptable: it is informative. */
	(void)snprintf(out, 48, "%.41s:%u", addr, port);
}

void pc__conn_accept(pc__srv_loop_t *sl, int fd, const struct sockaddr *sa, socklen_t salen)
{
	static const char busy[] =
		"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
	pc_http_server_t *srv = sl->srv;
	PC__IO_STAT_ADD(sl->loop, connections_accepted, 1);
	if (__atomic_add_fetch(&srv->nconns, 1, __ATOMIC_RELAXED) > srv->lim.max_connections) {
		__atomic_fetch_sub(&srv->nconns, 1, __ATOMIC_RELAXED);
		PC__IO_STAT_ADD(sl->loop, connections_dropped, 1);
		/* Best effort: a new socket's buffer takes this whole, and a
		 * client that gets a reset instead learns the same thing. */
		(void)send(fd, busy, sizeof(busy) - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
		(void)close(fd);
		return;
	}
	int one = 1;
	pc__http_conn_t *c = calloc(1, sizeof(*c));
	if (!c || setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0)
		goto fail;
	c->sl = sl;
	c->srv = srv;
	c->fd = fd;
	c->serial = pc__io_serial();
	pc__conn_set(c, PC__C_HEAD, "accepted");
	llhttp_init(&c->parser, HTTP_REQUEST, &parser_settings);
	c->parser.data = c;
	if (salen >= sizeof(sa_family_t))
		format_peer(c->peer, sa);
	if (pc__ioloop_watch(sl->loop, &c->watch, fd, EPOLLIN | EPOLLRDHUP, conn_on_event, c) != 0)
		goto fail;
	c->next = sl->conns;
	if (sl->conns)
		sl->conns->prev = c;
	sl->conns = c;
	PC__IO_STAT_ADD(sl->loop, connections_live, 1);
	/* A new connection must send a whole head in header_timeout_ms. */
	c->head_timed = true;
	pc__conn_arm(c, srv->lim.header_timeout_ms);
	return;
fail:
	free(c);
	(void)close(fd);
	__atomic_fetch_sub(&srv->nconns, 1, __ATOMIC_RELAXED);
}
