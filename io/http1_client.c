/*
 * The keep-alive HTTP/1.1 client connection (http1_client.h): a
 * non-blocking connect, the request written, the answer parsed by llhttp.
 * Everything below "the loop side" runs on the connection's loop thread.
 */
#include "http1_client.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <llhttp.h>

#include "buf.h"
#include "http_client.h"
#include "loop_internal.h"
#include "tcp_client_internal.h"
#include "uri.h"

#define DEFAULT_CONNECT_TIMEOUT_MS 10000
#define DEFAULT_MAX_BUFFERED ((size_t)1 << 20)
/* An answer's head may not be longer than this. */
#define MAX_HEAD 65536
#define READ_CHUNK 16384

struct pc_h1c {
	uint32_t refs;          /* atomic: the caller's, the loop's, commands' */
	pc_ioloop_t *loop;
	uint64_t serial;
	bool busy;              /* atomic: a request is outstanding; the loop clears it before END */
	bool released;          /* atomic: pc_h1c_release was called */
	bool shut;              /* atomic: the loop closed it for good; after
				 * pc_io_free the loop is gone, so nothing is
				 * posted to it any more */
	bool read_paused;       /* atomic: the loop stopped reading for backpressure */
	bool resume_posted;     /* atomic */
	uint64_t outstanding;   /* atomic: DATA bytes not yet consumed */
	uint64_t connections;   /* atomic */
	size_t max_buffered;
	uint32_t connect_timeout_ms;
	char *authority;        /* for Host: */
	char *path;
	pc__tcp_addrs_t addrs;   /* resolved at open; `next` is the loop's */

	pc_actor_t *owner;      /* held until the handle is freed */

	/* Loop thread only from here. */
	pc_h1c_state_t state;   /* set only by h1c_set */
	int fd;
	pc_io_watch_t watch;
	pc_io_timer_t timer;    /* the connect's deadline */
	pc_io_hook_t hook;      /* pc_io_free closes the connection */
	bool hooked;
	bool reused;            /* this connection answered a request before */
	/* the request in flight */
	char *req;
	size_t req_len, req_off;
	pc_msg_t *end;          /* allocated with the request: END always goes out */
	uint64_t tag;
	bool head_only;
	bool answered;          /* a byte of the answer came */
	bool retried;           /* sent again after a kept connection was found closed */
	bool head_sent;
	bool complete;
	bool keep_alive;
	int32_t status;
	uint64_t bytes;
	int sys_errno;
	llhttp_t parser;
	pc__buf_t head;         /* the header block, "Name: value\n" lines */
	pc__buf_t body;         /* body bytes of one read, sent as one DATA */
};

/* ---- the machine -------------------------------------------------------------- */

#define BIT(s) (1u << (s))
#define CLOSE BIT(PC_H1C_CLOSED)

static const char *const names[PC_H1C_COUNT] = {
	[PC_H1C_IDLE] = "idle",   [PC_H1C_CONNECTING] = "connecting", [PC_H1C_BUSY] = "busy",
	[PC_H1C_READY] = "ready", [PC_H1C_CLOSED] = "closed",
};

static const unsigned next_states[PC_H1C_COUNT] = {
	[PC_H1C_IDLE] = BIT(PC_H1C_CONNECTING) | CLOSE,
	[PC_H1C_CONNECTING] = BIT(PC_H1C_BUSY) | BIT(PC_H1C_IDLE) | CLOSE,
	/* back to connecting: the kept connection had been closed, sent again */
	[PC_H1C_BUSY] = BIT(PC_H1C_READY) | BIT(PC_H1C_IDLE) | BIT(PC_H1C_CONNECTING) | CLOSE,
	[PC_H1C_READY] = BIT(PC_H1C_BUSY) | BIT(PC_H1C_IDLE) | CLOSE,
};

const char *pc_h1c_state_name(pc_h1c_state_t s)
{
	return (unsigned)s < PC_H1C_COUNT ? names[s] : "unknown";
}

bool pc_h1c_state_legal(pc_h1c_state_t from, pc_h1c_state_t to)
{
	return (unsigned)from < PC_H1C_COUNT && (unsigned)to < PC_H1C_COUNT && (next_states[from] & BIT(to));
}

/* The one place the connection's state changes. */
static void h1c_set(pc_h1c_t *c, pc_h1c_state_t to, const char *why)
{
	pc_h1c_state_t from = c->state;
	if (!pc_h1c_state_legal(from, to)) {
		PC__IO_STAT_ADD(c->loop, transitions_refused, 1);
		if (pc__io_traced(PC__IO_TRACE_H1CLIENT))
			pc__io_trace("h1client", c->serial, pc_h1c_state_name(from), pc_h1c_state_name(to), "refused");
		return;
	}
	c->state = to;
	if (pc__io_traced(PC__IO_TRACE_H1CLIENT))
		pc__io_trace("h1client", c->serial, pc_h1c_state_name(from), pc_h1c_state_name(to), why);
}

uint64_t pc_h1c_connections(const pc_h1c_t *c)
{
	return __atomic_load_n(&c->connections, __ATOMIC_RELAXED);
}

/* ---- references ------------------------------------------------------------------- */

static void retain(pc_h1c_t *c) { __atomic_add_fetch(&c->refs, 1, __ATOMIC_RELAXED); }

static void destroy(pc_h1c_t *c)
{
	pc_actor_release(c->owner);
	pc__buf_free(&c->head);
	pc__buf_free(&c->body);
	free(c->authority);
	free(c->path);
	free(c);
}

static void unref(pc_h1c_t *c)
{
	if (__atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL) == 0)
		destroy(c);
}

static void unref_deferred(void *arg) { unref(arg); }

/* ---- the loop side: the end of a request and of the connection ------------------------ */

/* Empties b and keeps its memory for the next bytes: the head and body
 * buffers serve every request of the connection. */
static void buf_empty(pc__buf_t *b)
{
	if (b->err) {
		pc__buf_free(b); /* a failed append sticks: start afresh */
		return;
	}
	b->len = 0;
	if (b->p)
		b->p[0] = '\0';
}

static void close_fd(pc_h1c_t *c)
{
	if (c->fd >= 0) {
		pc__ioloop_unwatch(c->loop, &c->watch);
		(void)close(c->fd);
		c->fd = -1;
	}
	pc__ioloop_timer_cancel(c->loop, &c->timer);
	__atomic_store_n(&c->read_paused, false, __ATOMIC_SEQ_CST);
}

/* Ends the request in flight with END; the connection is kept only after
 * a whole answer the server let it outlive. */
static void end_request(pc_h1c_t *c, pc_http_transport_t transport, int result, const char *why)
{
	pc_msg_t *m = c->end;
	c->end = NULL;
	pc_http_end_msg_t *e = pc_msg_data(m);
	memset(e, 0, sizeof(*e));
	e->tag = c->tag;
	e->status = c->status;
	e->result = result;
	e->transport = transport;
	e->bytes = c->bytes;
	if (transport != PC_HTTP_OK)
		snprintf(e->error, sizeof(e->error), "%s%s%s", why, c->sys_errno ? ": " : "",
			 c->sys_errno ? strerror(c->sys_errno) : "");
	free(c->req);
	c->req = NULL;
	buf_empty(&c->head);
	buf_empty(&c->body);
	if (c->state != PC_H1C_CLOSED) {
		if (transport == PC_HTTP_OK && c->keep_alive && c->fd >= 0) {
			c->reused = true;
			h1c_set(c, PC_H1C_READY, why);
		} else {
			close_fd(c);
			h1c_set(c, PC_H1C_IDLE, why);
		}
	}
	/* Cleared before END goes out, so the owner may send the next request
	 * as soon as it has END. */
	__atomic_store_n(&c->busy, false, __ATOMIC_RELEASE);
	(void)pc_send(c->owner, m);
}

/* Closes the connection for good: the handle was released or the I/O
 * layer stops. The loop's reference goes after the batch; the owner stays
 * held until the handle is freed, so a request that comes to a closed
 * connection still gets its END. */
static void shut(pc_h1c_t *c, const char *why)
{
	if (c->state == PC_H1C_CLOSED)
		return;
	h1c_set(c, PC_H1C_CLOSED, why);
	__atomic_store_n(&c->shut, true, __ATOMIC_RELEASE);
	if (c->end)
		end_request(c, PC_HTTP_CANCELLED, PC_ESTOPPED, why);
	close_fd(c);
	if (c->hooked) {
		pc__ioloop_off_shutdown(c->loop, &c->hook);
		c->hooked = false;
	}
	/* If even that cannot be queued, c is leaked rather than risked. */
	(void)pc__ioloop_defer(c->loop, unref_deferred, c);
}

static void on_shutdown(pc_ioloop_t *loop, pc_io_hook_t *hook)
{
	(void)loop;
	pc_h1c_t *c = (pc_h1c_t *)((char *)hook - offsetof(pc_h1c_t, hook));
	c->hooked = false;
	shut(c, "I/O stopping");
}

/* ---- the loop side: the answer ------------------------------------------------------------ */

static int on_header_field(llhttp_t *p, const char *at, size_t len)
{
	pc_h1c_t *c = p->data;
	return c->head.len + len > MAX_HEAD || pc__buf_append(&c->head, at, len) != 0 ? -1 : 0;
}

static int on_header_field_complete(llhttp_t *p)
{
	pc_h1c_t *c = p->data;
	return pc__buf_append(&c->head, ": ", 2) != 0 ? -1 : 0;
}

static int on_header_value_complete(llhttp_t *p)
{
	pc_h1c_t *c = p->data;
	return pc__buf_append(&c->head, "\n", 1) != 0 ? -1 : 0;
}

static int on_headers_complete(llhttp_t *p)
{
	pc_h1c_t *c = p->data;
	int status = llhttp_get_status_code(p);
	if (status == 101)
		return -1; /* an upgrade nobody asked for */
	if (status >= 100 && status < 200) {
		/* an interim answer (103 Early Hints, say): no body (RFC 9110
		 * 15.2), whatever its headers say; the real one follows */
		buf_empty(&c->head);
		return 1;
	}
	c->status = status;
	pc_msg_t *m = pc_msg_new(PC_MSG_HTTP_RESPONSE_HEAD, sizeof(pc_http_head_msg_t) + c->head.len + 1);
	if (!m)
		return -1;
	pc_http_head_msg_t *h = pc_msg_data(m);
	h->tag = c->tag;
	h->status = status;
	h->headers_len = (uint32_t)c->head.len;
	if (c->head.len)
		memcpy(h->headers, c->head.p, c->head.len);
	h->headers[c->head.len] = '\0';
	c->head_sent = true;
	(void)pc_send(c->owner, m);
	return c->head_only ? 1 : 0;
}

static int on_body(llhttp_t *p, const char *at, size_t len)
{
	pc_h1c_t *c = p->data;
	if (!c->head_sent)
		return -1; /* only the final answer has a body */
	c->bytes += len;
	return pc__buf_append(&c->body, at, len) != 0 ? -1 : 0;
}

static int on_message_complete(llhttp_t *p)
{
	pc_h1c_t *c = p->data;
	if (!c->head_sent)
		return 0; /* the end of an interim answer */
	c->complete = true;
	c->keep_alive = llhttp_should_keep_alive(p) != 0;
	return HPE_PAUSED;
}

static const llhttp_settings_t parser_settings = {
	.on_header_field = on_header_field,
	.on_header_value = on_header_field, /* both go to the block as they come */
	.on_header_field_complete = on_header_field_complete,
	.on_header_value_complete = on_header_value_complete,
	.on_headers_complete = on_headers_complete,
	.on_body = on_body,
	.on_message_complete = on_message_complete,
};

/* Sends the body bytes of this read as one DATA, and stops reading when
 * the owner has too much outstanding. */
static void flush_body(pc_h1c_t *c)
{
	if (!c->body.len)
		return;
	pc_msg_t *m = pc_msg_new(PC_MSG_HTTP_RESPONSE_DATA, sizeof(pc_http_data_msg_t) + c->body.len);
	if (!m) {
		buf_empty(&c->body);
		return;
	}
	pc_http_data_msg_t *d = pc_msg_data(m);
	d->tag = c->tag;
	d->len = (uint32_t)c->body.len;
	memcpy(d->data, c->body.p, c->body.len);
	uint64_t out = __atomic_add_fetch(&c->outstanding, c->body.len, __ATOMIC_SEQ_CST);
	buf_empty(&c->body);
	(void)pc_send(c->owner, m);
	if (out <= c->max_buffered)
		return;
	__atomic_store_n(&c->read_paused, true, __ATOMIC_SEQ_CST);
	/* The owner may have consumed meanwhile without seeing the pause. */
	if (__atomic_load_n(&c->outstanding, __ATOMIC_SEQ_CST) <= c->max_buffered / 2)
		__atomic_store_n(&c->read_paused, false, __ATOMIC_SEQ_CST);
	else if (pc__ioloop_rewatch(c->loop, &c->watch, 0) != 0)
		c->sys_errno = errno;
}

/* Parses n bytes of the answer. */
static void feed(pc_h1c_t *c, const char *data, size_t n)
{
	llhttp_errno_t e = llhttp_execute(&c->parser, data, n);
	if (e == HPE_PAUSED && c->complete) {
		/* bytes after the answer that no request asked for */
		if (llhttp_get_error_pos(&c->parser) != data + n)
			c->keep_alive = false;
		flush_body(c);
		end_request(c, PC_HTTP_OK, 0, "answered");
		return;
	}
	if (e != HPE_OK) {
		flush_body(c);
		c->sys_errno = 0;
		end_request(c, PC_HTTP_MALFORMED, PC_EINVAL, llhttp_errno_name(e));
		return;
	}
	flush_body(c);
}

static bool connect_next(pc_h1c_t *c);
static void on_event(pc_ioloop_t *loop, void *arg, uint32_t events);
static void on_connect_timer(pc_ioloop_t *loop, void *arg);

/* Opens a connection for the request in flight, or ends it. */
static void connect_for_request(pc_h1c_t *c)
{
	h1c_set(c, PC_H1C_CONNECTING, "request");
	c->addrs.next = 0;
	c->sys_errno = 0;
	pc__ioloop_timer_arm(c->loop, &c->timer, c->connect_timeout_ms, on_connect_timer, c);
	if (!connect_next(c))
		end_request(c, PC_HTTP_CONNECT, PC_ESYS, "connect failed");
}

/* The connection ended before the answer did (err: recv's errno, or 0 at
 * EOF). A kept connection the server had closed gets the request again. */
static void on_lost(pc_h1c_t *c, int err)
{
	if (!c->answered && c->reused && !c->retried) {
		close_fd(c);
		c->retried = true;
		c->reused = false;
		c->req_off = 0;
		connect_for_request(c);
		return;
	}
	llhttp_errno_t e = c->answered ? llhttp_finish(&c->parser) : HPE_INVALID_EOF_STATE;
	if ((e == HPE_OK || e == HPE_PAUSED) && c->complete) {
		c->keep_alive = false;
		flush_body(c);
		end_request(c, PC_HTTP_OK, 0, "answered to the close");
		return;
	}
	flush_body(c);
	c->sys_errno = err;
	end_request(c, PC_HTTP_CLOSED, PC_ESTOPPED, "the connection ended before the answer");
}

/* Writes what is left of the request; false when the socket failed. */
static bool write_request(pc_h1c_t *c)
{
	if (pc__tcp_send_rest(c->fd, c->req, c->req_len, &c->req_off, &c->sys_errno) != 0)
		return false;
	uint32_t ev = (__atomic_load_n(&c->read_paused, __ATOMIC_SEQ_CST) ? 0 : EPOLLIN | EPOLLRDHUP) |
		      (c->req_off < c->req_len ? EPOLLOUT : 0);
	if (pc__ioloop_rewatch(c->loop, &c->watch, ev) != 0) {
		c->sys_errno = errno;
		return false;
	}
	return true;
}

/* A request goes out on the connection just made or kept. */
static void send_request(pc_h1c_t *c)
{
	h1c_set(c, PC_H1C_BUSY, "sending");
	llhttp_init(&c->parser, HTTP_RESPONSE, &parser_settings);
	c->parser.data = c;
	if (!write_request(c))
		on_lost(c, c->sys_errno);
}

static void on_busy(pc_h1c_t *c, uint32_t events)
{
	if ((events & EPOLLOUT) && c->req_off < c->req_len && !write_request(c)) {
		on_lost(c, c->sys_errno);
		return;
	}
	if (!(events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)))
		return;
	/* Paused, only the end of the connection comes (epoll always reports
	 * it): what is left in the socket is read then, lest it spin. */
	bool ending = events & (EPOLLHUP | EPOLLERR);
	if (!ending && __atomic_load_n(&c->read_paused, __ATOMIC_SEQ_CST))
		return;
	char buf[READ_CHUNK];
	for (;;) {
		ssize_t n = recv(c->fd, buf, sizeof(buf), MSG_DONTWAIT);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		if (n <= 0) {
			on_lost(c, n < 0 ? errno : 0);
			return;
		}
		c->answered = true;
		feed(c, buf, (size_t)n);
		/* A short read took all there was: level-triggered epoll says
		 * when more comes, without a recv that finds nothing. */
		if (c->state != PC_H1C_BUSY || (!ending && ((size_t)n < sizeof(buf) ||
							     __atomic_load_n(&c->read_paused, __ATOMIC_SEQ_CST))))
			return;
	}
}

static void on_connected(pc_h1c_t *c)
{
	int err = pc__tcp_connected(c->fd);
	if (err) {
		c->sys_errno = err;
		close_fd(c);
		pc__ioloop_timer_arm(c->loop, &c->timer, c->connect_timeout_ms, on_connect_timer, c);
		if (!connect_next(c))
			end_request(c, PC_HTTP_CONNECT, PC_ESYS, "connect failed");
		return;
	}
	pc__ioloop_timer_cancel(c->loop, &c->timer);
	__atomic_add_fetch(&c->connections, 1, __ATOMIC_RELAXED);
	c->sys_errno = 0;
	send_request(c);
}

/* Starts a connect to the next address; false when none is left. */
static bool connect_next(pc_h1c_t *c)
{
	c->fd = pc__tcp_connect_next(c->loop, &c->addrs, &c->watch, on_event, c, &c->sys_errno);
	return c->fd >= 0;
}

static void on_event(pc_ioloop_t *loop, void *arg, uint32_t events)
{
	(void)loop;
	pc_h1c_t *c = arg;
	switch (c->state) {
	case PC_H1C_CONNECTING:
		on_connected(c);
		break;
	case PC_H1C_BUSY:
		on_busy(c, events);
		break;
	case PC_H1C_READY:
		/* a kept connection the server closed, or sent what nobody asked
		 * for (or, paused, its end) */
		close_fd(c);
		h1c_set(c, PC_H1C_IDLE, "closed while kept");
		break;
	case PC_H1C_IDLE:
	case PC_H1C_CLOSED:
	case PC_H1C_COUNT:
		break;
	}
}

static void on_connect_timer(pc_ioloop_t *loop, void *arg)
{
	(void)loop;
	pc_h1c_t *c = arg;
	if (c->state != PC_H1C_CONNECTING)
		return;
	c->sys_errno = 0;
	end_request(c, PC_HTTP_CONNECT_TIMEOUT, PC_ETIMEDOUT, "connect timed out");
}

/* ---- commands ------------------------------------------------------------------------- */

enum { CMD_START, CMD_REQUEST, CMD_RESUME, CMD_RELEASE };

typedef struct h1c_cmd {
	pc_h1c_t *c; /* a reference the command holds */
	int kind;
	char *req;   /* CMD_REQUEST: the bytes, taken */
	size_t req_len;
	pc_msg_t *end;
	uint64_t tag;
	bool head_only;
} h1c_cmd_t;

static void cmd_request(pc_h1c_t *c, h1c_cmd_t *p)
{
	c->req = p->req;
	c->req_len = p->req_len;
	c->req_off = 0;
	c->end = p->end;
	c->tag = p->tag;
	c->head_only = p->head_only;
	c->answered = c->retried = c->head_sent = c->complete = c->keep_alive = false;
	c->status = 0;
	c->bytes = 0;
	c->sys_errno = 0;
	p->req = NULL;
	p->end = NULL;
	if (c->state == PC_H1C_CLOSED || pc__ioloop_stopping(c->loop)) {
		end_request(c, PC_HTTP_CANCELLED, PC_ESTOPPED, "the I/O layer is stopping");
		return;
	}
	if (c->state == PC_H1C_READY)
		send_request(c);
	else
		connect_for_request(c);
}

/* The first command: from here pc_io_free closes the connection. */
static void cmd_start(pc_h1c_t *c)
{
	c->hook.fn = on_shutdown;
	pc__ioloop_on_shutdown(c->loop, &c->hook);
	c->hooked = true;
	if (pc__ioloop_stopping(c->loop))
		shut(c, "I/O stopping");
}

static void cmd_resume(pc_h1c_t *c)
{
	__atomic_store_n(&c->resume_posted, false, __ATOMIC_SEQ_CST);
	if (!__atomic_load_n(&c->read_paused, __ATOMIC_SEQ_CST) ||
	    __atomic_load_n(&c->outstanding, __ATOMIC_SEQ_CST) > c->max_buffered / 2)
		return;
	__atomic_store_n(&c->read_paused, false, __ATOMIC_SEQ_CST);
	if (c->state == PC_H1C_BUSY) {
		if (write_request(c))
			on_busy(c, EPOLLIN); /* what arrived while paused */
		else
			on_lost(c, c->sys_errno);
	} else if (c->state == PC_H1C_READY && pc__ioloop_rewatch(c->loop, &c->watch, EPOLLIN | EPOLLRDHUP) != 0) {
		close_fd(c);
		h1c_set(c, PC_H1C_IDLE, "epoll");
	}
}

static void run_cmd(pc_ioloop_t *loop, pc_msg_t *msg)
{
	(void)loop;
	h1c_cmd_t *p = (h1c_cmd_t *)((pc_io_cmd_t *)pc_msg_data(msg) + 1);
	pc_h1c_t *c = p->c;
	switch (p->kind) {
	case CMD_START: cmd_start(c); break;
	case CMD_REQUEST: cmd_request(c, p); break;
	case CMD_RESUME: cmd_resume(c); break;
	case CMD_RELEASE: shut(c, "released"); break;
	}
	unref(c);
}

/* Posts a command holding a reference to c; on failure the command's
 * request bytes and END stay the caller's. */
static int post(pc_h1c_t *c, h1c_cmd_t *tmpl)
{
	h1c_cmd_t *p;
	pc_msg_t *m = pc__io_cmd_new(run_cmd, sizeof(*p), (void **)&p);
	if (!m)
		return PC_ENOMEM;
	*p = *tmpl;
	p->c = c;
	retain(c);
	int rc = pc__ioloop_post(c->loop, m);
	if (rc != 0)
		unref(c);
	return rc;
}

/* ---- the caller's side ---------------------------------------------------------------- */

/* The authority and the path of an http:// URL (without its fragment). */
static int parse_url(pc_h1c_t *c, const char *url, char *host, size_t cap, uint16_t *port)
{
	if (strncasecmp(url, "http://", 7) != 0)
		return PC_EINVAL;
	const char *auth = url + 7, *rest;
	*port = 80;
	if (pc_uri_authority(auth, host, cap, port, &rest, NULL) != 0)
		return PC_EINVAL;
	size_t plen = strcspn(rest, "#");
	for (size_t i = 0; i < plen; i++)
		if ((unsigned char)rest[i] <= ' ' || rest[i] == 0x7f)
			return PC_EINVAL;
	if (plen && rest[0] != '/' && rest[0] != '?')
		return PC_EINVAL;
	c->authority = strndup(auth, (size_t)(rest - auth));
	c->path = malloc(plen + 2);
	if (!c->authority || !c->path)
		return PC_ENOMEM;
	/* "?q" alone asks for "/?q" */
	snprintf(c->path, plen + 2, "%s%.*s", plen && rest[0] == '/' ? "" : "/", (int)plen, rest);
	return 0;
}

int pc_h1c_open(pc_io_t *io, const pc_h1c_options_t *o, pc_actor_t *owner, pc_h1c_t **out)
{
	if (!io || !o || !o->url || !owner || !out)
		return PC_EINVAL;
	pc_h1c_t *c = calloc(1, sizeof(*c));
	if (!c)
		return PC_ENOMEM;
	c->fd = -1;
	c->refs = 2; /* the caller's and the loop's */
	c->serial = pc__io_serial();
	c->max_buffered = o->max_buffered ? o->max_buffered : DEFAULT_MAX_BUFFERED;
	c->connect_timeout_ms = o->connect_timeout_ms ? o->connect_timeout_ms : DEFAULT_CONNECT_TIMEOUT_MS;
	char host[256];
	uint16_t port;
	int rc = parse_url(c, o->url, host, sizeof(host), &port);
	if (rc == 0)
		rc = pc__tcp_resolve(&c->addrs, host, port);
	if (rc != 0) {
		destroy(c);
		return rc;
	}
	c->loop = pc__io_next_loop(io);
	c->owner = pc_actor_retain(owner);
	h1c_cmd_t p = {.kind = CMD_START};
	if ((rc = post(c, &p)) != 0) {
		destroy(c);
		return rc;
	}
	*out = c;
	return 0;
}

/* The request's bytes: its line, Host, the caller's headers, the body's
 * length, the body. NULL when out of memory. */
static char *build_request(const pc_h1c_t *c, const pc_h1c_request_t *rq, const char *method, size_t *len)
{
	pc__buf_t b = {0};
	pc__buf_printf(&b, "%s %s HTTP/1.1\r\nHost: %s\r\n", method, c->path, c->authority);
	for (size_t i = 0; i < rq->header_count; i++) {
		pc__buf_append_str(&b, rq->headers[i]);
		pc__buf_append(&b, "\r\n", 2);
	}
	if (rq->body || (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0))
		pc__buf_printf(&b, "Content-Length: %zu\r\n", rq->body_len);
	pc__buf_append(&b, "\r\n", 2);
	if (rq->body_len)
		pc__buf_append(&b, rq->body, rq->body_len);
	*len = b.len;
	return pc__buf_take(&b);
}

int pc_h1c_request(pc_h1c_t *c, const pc_h1c_request_t *rq)
{
	if (!c || !rq || (rq->header_count && !rq->headers) || (rq->body_len && !rq->body))
		return PC_EINVAL;
	const char *method = rq->method ? rq->method : "POST";
	if (!*method || method[strcspn(method, " \t\r\n")])
		return PC_EINVAL;
	for (size_t i = 0; i < rq->header_count; i++)
		if (!rq->headers[i] || strpbrk(rq->headers[i], "\r\n"))
			return PC_EINVAL;
	if (__atomic_load_n(&c->released, __ATOMIC_ACQUIRE) || __atomic_load_n(&c->shut, __ATOMIC_ACQUIRE))
		return PC_ESTOPPED;
	if (__atomic_exchange_n(&c->busy, true, __ATOMIC_ACQ_REL))
		return PC_ESTATE;
	h1c_cmd_t p = {.kind = CMD_REQUEST, .tag = rq->tag, .head_only = !strcmp(method, "HEAD")};
	p.req = build_request(c, rq, method, &p.req_len);
	p.end = pc_msg_new(PC_MSG_HTTP_RESPONSE_END, sizeof(pc_http_end_msg_t));
	int rc = p.req && p.end ? post(c, &p) : PC_ENOMEM;
	if (rc != 0) {
		free(p.req);
		pc_msg_free(p.end);
		__atomic_store_n(&c->busy, false, __ATOMIC_RELEASE);
	}
	return rc;
}

void pc_h1c_consumed(pc_h1c_t *c, size_t n)
{
	if (!c || !n)
		return;
	uint64_t left = __atomic_sub_fetch(&c->outstanding, n, __ATOMIC_SEQ_CST);
	if (left > c->max_buffered / 2 || !__atomic_load_n(&c->read_paused, __ATOMIC_SEQ_CST) ||
	    __atomic_load_n(&c->shut, __ATOMIC_ACQUIRE) ||
	    __atomic_exchange_n(&c->resume_posted, true, __ATOMIC_SEQ_CST))
		return;
	h1c_cmd_t p = {.kind = CMD_RESUME};
	if (post(c, &p) != 0)
		__atomic_store_n(&c->resume_posted, false, __ATOMIC_SEQ_CST);
}

void pc_h1c_release(pc_h1c_t *c)
{
	if (!c)
		return;
	__atomic_store_n(&c->released, true, __ATOMIC_RELEASE);
	h1c_cmd_t p = {.kind = CMD_RELEASE};
	if (!__atomic_load_n(&c->shut, __ATOMIC_ACQUIRE))
		(void)post(c, &p);
	unref(c);
}
