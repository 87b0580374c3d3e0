/*
 * The WebSocket client on the I/O threads (ws_client.h): a non-blocking
 * connect, the upgrade written and its answer parsed here, then framing
 * by wslay's event API in client mode. Everything below "the loop side"
 * runs on the connection's loop thread only.
 */
#include "ws_client.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <wslay/wslay.h>

#include "buf.h"
#include "http_server.h"
#include "loop_internal.h"
#include "tcp_client_internal.h"
#include "wslay_fd_internal.h"

#define DEFAULT_OPEN_TIMEOUT_MS 10000
#define DEFAULT_MAX_MESSAGE ((size_t)64 << 20)
#define DEFAULT_MAX_OUTPUT ((size_t)64 << 20)
/* The upgrade's answer may not be longer than this. */
#define MAX_HEAD 16384
/* How long a close we started waits for the server's close frame. */
#define CLOSE_GRACE_MS 2000
#define READ_CHUNK 65536

struct pc_wsc {
	uint32_t refs;        /* atomic: the caller's, the loop's, commands' */
	pc_ioloop_t *loop;
	uint64_t serial;
	pc_wsc_state_t state; /* set only by wsc_set; read anywhere atomically */
	bool close_asked;     /* atomic: pc_wsc_close or release was called */

	pc_actor_t *owner;    /* held until CLOSED is sent */
	void *user;
	size_t max_message, max_output;
	uint32_t open_timeout_ms;

	pc__tcp_addrs_t addrs;

	char *request;        /* the upgrade request */
	size_t request_len, request_off;
	char accept[29];      /* the Sec-WebSocket-Accept to expect */

	int fd;
	pc_io_watch_t watch;
	pc_io_timer_t timer;  /* the open deadline, then the close grace */
	pc_io_hook_t hook;    /* pc_io_free ends the connection */
	bool hooked;

	pc__buf_t in;         /* the answer's head; then bytes for wslay */
	size_t in_off;        /* bytes of `in` already handed to wslay */
	wslay_event_context_ptr ctx;
	bool close_received;
	uint16_t close_code;  /* the server's close frame's; 0 until one came */
	char close_text[124];
	int reason, sys_errno, http_status;
};

/* ---- the machine -------------------------------------------------------------- */

#define BIT(s) (1u << (s))
#define FAIL BIT(PC_WSC_FAILED)

static const char *const names[PC_WSC_COUNT] = {
	[PC_WSC_CONNECTING] = "connecting", [PC_WSC_HANDSHAKING] = "handshaking",
	[PC_WSC_OPEN] = "open",             [PC_WSC_CLOSING] = "closing",
	[PC_WSC_CLOSED] = "closed",         [PC_WSC_FAILED] = "failed",
};

static const unsigned next_states[PC_WSC_COUNT] = {
	[PC_WSC_CONNECTING] = BIT(PC_WSC_HANDSHAKING) | FAIL,
	[PC_WSC_HANDSHAKING] = BIT(PC_WSC_OPEN) | FAIL,
	[PC_WSC_OPEN] = BIT(PC_WSC_CLOSING) | BIT(PC_WSC_CLOSED) | FAIL,
	[PC_WSC_CLOSING] = BIT(PC_WSC_CLOSED) | FAIL,
};

const char *pc_wsc_state_name(pc_wsc_state_t s)
{
	return (unsigned)s < PC_WSC_COUNT ? names[s] : "unknown";
}

bool pc_wsc_state_legal(pc_wsc_state_t from, pc_wsc_state_t to)
{
	return (unsigned)from < PC_WSC_COUNT && (unsigned)to < PC_WSC_COUNT && (next_states[from] & BIT(to));
}

/* The one place the client's state changes. False when refused. */
static bool wsc_set(pc_wsc_t *c, pc_wsc_state_t to, const char *why)
{
	pc_wsc_state_t from = c->state;
	if (!pc_wsc_state_legal(from, to)) {
		PC__IO_STAT_ADD(c->loop, transitions_refused, 1);
		if (pc__io_traced(PC__IO_TRACE_WSCLIENT))
			pc__io_trace("wsclient", c->serial, pc_wsc_state_name(from), pc_wsc_state_name(to), "refused");
		return false;
	}
	__atomic_store_n(&c->state, to, __ATOMIC_RELEASE);
	if (pc__io_traced(PC__IO_TRACE_WSCLIENT))
		pc__io_trace("wsclient", c->serial, pc_wsc_state_name(from), pc_wsc_state_name(to), why);
	return true;
}

static bool ended(const pc_wsc_t *c) { return c->state == PC_WSC_CLOSED || c->state == PC_WSC_FAILED; }

/* ---- references ------------------------------------------------------------------- */

static void retain(pc_wsc_t *c) { __atomic_add_fetch(&c->refs, 1, __ATOMIC_RELAXED); }

static void destroy(pc_wsc_t *c)
{
	if (c->ctx)
		wslay_event_context_free(c->ctx);
	pc__buf_free(&c->in);
	free(c->request);
	free(c);
}

static void unref(pc_wsc_t *c)
{
	if (__atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL) == 0)
		destroy(c);
}

static void unref_deferred(void *arg) { unref(arg); }

/* ---- the loop side: the end -------------------------------------------------------------- */

static void on_shutdown(pc_ioloop_t *loop, pc_io_hook_t *hook);

/* Ends the connection: `to` is closed or failed. The owner gets CLOSED
 * and is let go; the loop's reference goes after the batch. */
static void finish(pc_wsc_t *c, pc_wsc_state_t to, int reason, const char *why)
{
	if (ended(c) || !wsc_set(c, to, why))
		return;
	if (!c->reason)
		c->reason = reason;
	if (c->fd >= 0) {
		pc__ioloop_unwatch(c->loop, &c->watch);
		(void)close(c->fd);
		c->fd = -1;
	}
	pc__ioloop_timer_cancel(c->loop, &c->timer);
	if (c->hooked) {
		pc__ioloop_off_shutdown(c->loop, &c->hook);
		c->hooked = false;
	}
	pc_msg_t *m = pc_msg_new(PC_MSG_WSC_CLOSED, sizeof(pc_wsc_closed_msg_t));
	if (m) {
		pc_wsc_closed_msg_t *cm = pc_msg_data(m);
		memset(cm, 0, sizeof(*cm));
		cm->client = c;
		cm->user = c->user;
		cm->outcome = to;
		cm->reason = c->reason;
		cm->sys_errno = c->sys_errno;
		cm->http_status = c->http_status;
		cm->code = c->close_code ? c->close_code : WSLAY_CODE_ABNORMAL_CLOSURE;
		memcpy(cm->text, c->close_text, sizeof(cm->text));
		(void)pc_send(c->owner, m);
	}
	pc_actor_release(c->owner);
	c->owner = NULL;
	/* If even that cannot be queued, c is leaked rather than risked. */
	(void)pc__ioloop_defer(c->loop, unref_deferred, c);
}

static void fail(pc_wsc_t *c, int reason, const char *why) { finish(c, PC_WSC_FAILED, reason, why); }

static void on_shutdown(pc_ioloop_t *loop, pc_io_hook_t *hook)
{
	(void)loop;
	pc_wsc_t *c = (pc_wsc_t *)((char *)hook - offsetof(pc_wsc_t, hook));
	c->hooked = false;
	fail(c, PC_ESTOPPED, "I/O stopping");
}

/* ---- the loop side: framing ------------------------------------------------------------- */

static ssize_t ws_recv(wslay_event_context_ptr ctx, uint8_t *buf, size_t len, int flags, void *user)
{
	(void)flags;
	pc_wsc_t *c = user;
	if (c->in_off < c->in.len) {
		/* Frames that came with the upgrade's answer. */
		size_t n = c->in.len - c->in_off;
		if (n > len)
			n = len;
		memcpy(buf, c->in.p + c->in_off, n);
		c->in_off += n;
		if (c->in_off == c->in.len) {
			pc__buf_free(&c->in);
			c->in_off = 0;
		}
		return (ssize_t)n;
	}
	return pc__wslay_fd_recv(ctx, c->fd, buf, len);
}

static ssize_t ws_send(wslay_event_context_ptr ctx, const uint8_t *data, size_t len, int flags, void *user)
{
	pc_wsc_t *c = user;
	return pc__wslay_fd_send(ctx, c->fd, data, len, flags);
}

static int ws_genmask(wslay_event_context_ptr ctx, uint8_t *buf, size_t len, void *user)
{
	(void)user;
	if (RAND_bytes(buf, (int)len) != 1) {
		wslay_event_set_error(ctx, WSLAY_ERR_CALLBACK_FAILURE);
		return -1;
	}
	return 0;
}

static void ws_on_msg(wslay_event_context_ptr ctx, const struct wslay_event_on_msg_recv_arg *arg, void *user)
{
	(void)ctx;
	pc_wsc_t *c = user;
	if (arg->opcode == WSLAY_CONNECTION_CLOSE) {
		c->close_received = true;
		c->close_code = arg->status_code ? arg->status_code : WSLAY_CODE_NO_STATUS_RCVD;
		size_t tl = arg->msg_length > 2 ? arg->msg_length - 2 : 0;
		if (tl >= sizeof(c->close_text))
			tl = sizeof(c->close_text) - 1;
		memcpy(c->close_text, arg->msg + 2, tl);
		c->close_text[tl] = '\0';
		if (c->state == PC_WSC_OPEN)
			wsc_set(c, PC_WSC_CLOSING, "server close");
		return;
	}
	if (wslay_is_ctrl_frame(arg->opcode) || c->state != PC_WSC_OPEN)
		return;
	pc_msg_t *m = pc_msg_new(PC_MSG_WSC_MESSAGE, sizeof(pc_wsc_message_msg_t) + arg->msg_length + 1);
	if (!m) {
		c->reason = PC_ENOMEM;
		(void)wslay_event_queue_close(c->ctx, WSLAY_CODE_INTERNAL_SERVER_ERROR, NULL, 0);
		wslay_event_shutdown_read(c->ctx);
		return;
	}
	pc_wsc_message_msg_t *wm = pc_msg_data(m);
	wm->client = c;
	wm->user = c->user;
	wm->opcode = arg->opcode;
	wm->len = arg->msg_length;
	if (arg->msg_length)
		memcpy(wm->data, arg->msg, arg->msg_length);
	wm->data[arg->msg_length] = 0;
	(void)pc_send(c->owner, m);
}

static const struct wslay_event_callbacks ws_callbacks = {
	.recv_callback = ws_recv,
	.send_callback = ws_send,
	.genmask_callback = ws_genmask,
	.on_msg_recv_callback = ws_on_msg,
};

/* Why the framing ended when it was not by the close handshake. */
static int framing_reason(const pc_wsc_t *c)
{
	if (c->reason)
		return c->reason;
	if (wslay_event_get_close_sent(c->ctx)) {
		uint16_t sent = wslay_event_get_status_code_sent(c->ctx);
		if (sent == WSLAY_CODE_MESSAGE_TOO_BIG)
			return PC_ELIMIT;
		if (sent == WSLAY_CODE_PROTOCOL_ERROR || sent == WSLAY_CODE_INVALID_FRAME_PAYLOAD_DATA)
			return PC_EINVAL;
	}
	return PC_ESTOPPED;
}

/* Sends what wslay holds, ends the connection once both directions are
 * done, and sets the epoll mask. */
static void pump(pc_wsc_t *c)
{
	if (wslay_event_send(c->ctx) != 0) {
		fail(c, framing_reason(c), "send failed");
		return;
	}
	bool r = wslay_event_want_read(c->ctx), w = wslay_event_want_write(c->ctx);
	if (!r && !w) {
		if (c->close_received && wslay_event_get_close_sent(c->ctx) && !c->reason)
			finish(c, PC_WSC_CLOSED, 0, "close handshake done");
		else
			fail(c, framing_reason(c), "closed without a handshake");
		return;
	}
	uint32_t ev = (r ? EPOLLIN | EPOLLRDHUP : 0) | (w ? EPOLLOUT : 0);
	if (pc__ioloop_rewatch(c->loop, &c->watch, ev) != 0)
		fail(c, PC_ESYS, "epoll");
}

static void on_frames(pc_wsc_t *c, uint32_t events)
{
	if ((events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) && wslay_event_want_read(c->ctx) &&
	    wslay_event_recv(c->ctx) != 0) {
		if (c->close_received && wslay_event_get_close_sent(c->ctx))
			finish(c, PC_WSC_CLOSED, 0, "connection ended after the close");
		else
			fail(c, framing_reason(c), "connection lost");
		return;
	}
	if (ended(c))
		return;
	if ((events & (EPOLLERR | EPOLLHUP)) && !(events & EPOLLIN)) {
		fail(c, PC_ESTOPPED, "connection lost");
		return;
	}
	pump(c);
}

/* ---- the loop side: connecting and the upgrade ------------------------------------------------ */

static void on_event(pc_ioloop_t *loop, void *arg, uint32_t events);
static void on_timer(pc_ioloop_t *loop, void *arg);

/* Starts a connect to the next address; false when none is left. */
static bool connect_next(pc_wsc_t *c)
{
	c->fd = pc__tcp_connect_next(c->loop, &c->addrs, &c->watch, on_event, c, &c->sys_errno);
	return c->fd >= 0;
}

/* Writes what is left of the upgrade request. <0: the socket failed. */
static int write_request(pc_wsc_t *c)
{
	return pc__tcp_send_rest(c->fd, c->request, c->request_len, &c->request_off, &c->sys_errno);
}

/* The value of header `name` in the head at `h` (lines after the status
 * line), into out; false when absent. */
static bool head_value(const char *h, const char *name, char *out, size_t cap)
{
	size_t nl = strlen(name);
	for (const char *line = strstr(h, "\r\n"); line && line[2] && !(line[2] == '\r' && line[3] == '\n');
	     line = strstr(line + 2, "\r\n")) {
		const char *p = line + 2;
		if (strncasecmp(p, name, nl) != 0 || p[nl] != ':')
			continue;
		p += nl + 1;
		while (*p == ' ' || *p == '\t')
			p++;
		const char *e = strstr(p, "\r\n");
		size_t n = e ? (size_t)(e - p) : strlen(p);
		while (n && (p[n - 1] == ' ' || p[n - 1] == '\t'))
			n--;
		if (n >= cap)
			n = cap - 1;
		memcpy(out, p, n);
		out[n] = '\0';
		return true;
	}
	return false;
}

static bool has_token(const char *list, const char *token)
{
	size_t tl = strlen(token);
	for (const char *p = list; *p;) {
		while (*p == ' ' || *p == '\t' || *p == ',')
			p++;
		size_t n = strcspn(p, ",");
		size_t k = n;
		while (k && (p[k - 1] == ' ' || p[k - 1] == '\t'))
			k--;
		if (k == tl && !strncasecmp(p, token, tl))
			return true;
		p += n;
	}
	return false;
}

/* The upgrade's answer is whole in c->in up to `end` (past its blank
 * line): 101 with the right headers opens the connection. */
static void on_head(pc_wsc_t *c, size_t end)
{
	char *h = c->in.p;
	h[end - 2] = '\0'; /* cut after the last header line's CRLF */
	int status = 0;
	if (sscanf(h, "HTTP/1.%*1[01] %3d", &status) != 1) {
		fail(c, PC_ESTATE, "not an HTTP answer");
		return;
	}
	c->http_status = status;
	char v[128];
	if (status != 101) {
		fail(c, PC_ESTATE, "upgrade refused");
		return;
	}
	if (!head_value(h, "upgrade", v, sizeof(v)) || strcasecmp(v, "websocket") != 0 ||
	    !head_value(h, "connection", v, sizeof(v)) || !has_token(v, "upgrade") ||
	    !head_value(h, "sec-websocket-accept", v, sizeof(v)) || strcmp(v, c->accept) != 0) {
		fail(c, PC_ESTATE, "bad upgrade answer");
		return;
	}
	wslay_event_context_ptr ctx;
	if (wslay_event_context_client_init(&ctx, &ws_callbacks, c) != 0) {
		fail(c, PC_ENOMEM, "out of memory");
		return;
	}
	c->ctx = ctx;
	wslay_event_config_set_max_recv_msg_length(ctx, c->max_message);
	c->in_off = end; /* what follows the head is frames */
	free(c->request);
	c->request = NULL;
	pc__ioloop_timer_cancel(c->loop, &c->timer);
	wsc_set(c, PC_WSC_OPEN, "101");
	pc_msg_t *m = pc_msg_new(PC_MSG_WSC_OPEN, sizeof(pc_wsc_event_msg_t));
	if (!m) {
		fail(c, PC_ENOMEM, "out of memory");
		return;
	}
	pc_wsc_event_msg_t *em = pc_msg_data(m);
	em->client = c;
	em->user = c->user;
	(void)pc_send(c->owner, m);
	/* A close asked for before the open: it goes now. */
	if (__atomic_load_n(&c->close_asked, __ATOMIC_ACQUIRE) && !wslay_event_get_close_sent(ctx)) {
		(void)wslay_event_queue_close(ctx, WSLAY_CODE_NORMAL_CLOSURE, NULL, 0);
		wsc_set(c, PC_WSC_CLOSING, "owner close");
		pc__ioloop_timer_arm(c->loop, &c->timer, CLOSE_GRACE_MS, on_timer, c);
	}
	on_frames(c, EPOLLIN);
}

static void on_handshake(pc_wsc_t *c, uint32_t events)
{
	if ((events & EPOLLOUT) && write_request(c) != 0) {
		fail(c, PC_ESYS, "write failed");
		return;
	}
	if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
		for (;;) {
			char buf[4096];
			ssize_t n = recv(c->fd, buf, sizeof(buf), MSG_DONTWAIT);
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
				break;
			if (n <= 0) {
				fail(c, PC_ESTATE, "connection ended during the upgrade");
				return;
			}
			if (pc__buf_append(&c->in, buf, (size_t)n) != 0) {
				fail(c, PC_ENOMEM, "out of memory");
				return;
			}
			char *e = strstr(c->in.p, "\r\n\r\n");
			if (e) {
				on_head(c, (size_t)(e - c->in.p) + 4);
				return;
			}
			if (c->in.len > MAX_HEAD) {
				fail(c, PC_ESTATE, "upgrade answer too long");
				return;
			}
		}
	}
	uint32_t ev = EPOLLIN | EPOLLRDHUP | (c->request_off < c->request_len ? EPOLLOUT : 0);
	if (pc__ioloop_rewatch(c->loop, &c->watch, ev) != 0)
		fail(c, PC_ESYS, "epoll");
}

static void on_connected(pc_wsc_t *c)
{
	int err = pc__tcp_connected(c->fd);
	if (err) {
		c->sys_errno = err;
		pc__ioloop_unwatch(c->loop, &c->watch);
		(void)close(c->fd);
		c->fd = -1;
		if (!connect_next(c))
			fail(c, PC_ESYS, "connect failed");
		return;
	}
	c->sys_errno = 0;
	wsc_set(c, PC_WSC_HANDSHAKING, "connected");
	on_handshake(c, EPOLLOUT);
}

static void on_event(pc_ioloop_t *loop, void *arg, uint32_t events)
{
	(void)loop;
	pc_wsc_t *c = arg;
	switch (c->state) {
	case PC_WSC_CONNECTING:
		on_connected(c);
		break;
	case PC_WSC_HANDSHAKING:
		on_handshake(c, events);
		break;
	case PC_WSC_OPEN:
	case PC_WSC_CLOSING:
		on_frames(c, events);
		break;
	case PC_WSC_CLOSED:
	case PC_WSC_FAILED:
	case PC_WSC_COUNT:
		break;
	}
}

static void on_timer(pc_ioloop_t *loop, void *arg)
{
	(void)loop;
	pc_wsc_t *c = arg;
	if (c->state == PC_WSC_CLOSING)
		fail(c, PC_ETIMEDOUT, "no close from the server");
	else if (!ended(c))
		fail(c, PC_ETIMEDOUT, "open timed out");
}

/* ---- commands ------------------------------------------------------------------------- */

enum { CMD_START, CMD_SEND, CMD_CLOSE, CMD_ABORT };

typedef struct wsc_cmd {
	pc_wsc_t *c; /* a reference the command holds */
	int kind;
	uint16_t code; /* CMD_CLOSE */
	uint8_t opcode; /* CMD_SEND */
	size_t len;
	char data[];
} wsc_cmd_t;

static void cmd_start(pc_wsc_t *c)
{
	if (pc__ioloop_stopping(c->loop)) {
		fail(c, PC_ESTOPPED, "I/O stopping");
		return;
	}
	c->hook.fn = on_shutdown;
	pc__ioloop_on_shutdown(c->loop, &c->hook);
	c->hooked = true;
	if (__atomic_load_n(&c->close_asked, __ATOMIC_ACQUIRE)) {
		fail(c, PC_ESTOPPED, "closed before open");
		return;
	}
	pc__ioloop_timer_arm(c->loop, &c->timer, c->open_timeout_ms, on_timer, c);
	if (!connect_next(c))
		fail(c, PC_ESYS, "connect failed");
}

static void cmd_send(pc_wsc_t *c, wsc_cmd_t *p)
{
	if (c->state != PC_WSC_OPEN)
		return; /* closing or ended: nowhere to go */
	size_t queued = wslay_event_get_queued_msg_length(c->ctx);
	if (p->len > c->max_output || queued > c->max_output - p->len) {
		fail(c, PC_ELIMIT, "output cap");
		return;
	}
	struct wslay_event_msg m = {p->opcode, (const uint8_t *)p->data, p->len};
	if (wslay_event_queue_msg(c->ctx, &m) == WSLAY_ERR_NOMEM) {
		fail(c, PC_ENOMEM, "out of memory");
		return;
	}
	pump(c);
}

static void cmd_close(pc_wsc_t *c, wsc_cmd_t *p)
{
	if (c->state == PC_WSC_CONNECTING || c->state == PC_WSC_HANDSHAKING) {
		fail(c, PC_ESTOPPED, "closed before open");
		return;
	}
	if (c->state != PC_WSC_OPEN)
		return;
	size_t rl = p->len > 123 ? 123 : p->len;
	if (wslay_event_queue_close(c->ctx, p->code, (const uint8_t *)p->data, rl) == 0) {
		wsc_set(c, PC_WSC_CLOSING, "owner close");
		pc__ioloop_timer_arm(c->loop, &c->timer, CLOSE_GRACE_MS, on_timer, c);
	}
	pump(c);
}

static void run_cmd(pc_ioloop_t *loop, pc_msg_t *msg)
{
	(void)loop;
	wsc_cmd_t *p = (wsc_cmd_t *)((pc_io_cmd_t *)pc_msg_data(msg) + 1);
	pc_wsc_t *c = p->c;
	if (!ended(c)) {
		switch (p->kind) {
		case CMD_START: cmd_start(c); break;
		case CMD_SEND: cmd_send(c, p); break;
		case CMD_CLOSE: cmd_close(c, p); break;
		case CMD_ABORT: fail(c, PC_ESTOPPED, "released"); break;
		}
	}
	unref(c);
}

/* Posts a command holding a reference to c. */
static int post(pc_wsc_t *c, int kind, uint8_t opcode, uint16_t code, const void *data, size_t len)
{
	wsc_cmd_t *p;
	pc_msg_t *m = pc__io_cmd_new(run_cmd, sizeof(*p) + len, (void **)&p);
	if (!m)
		return PC_ENOMEM;
	p->c = c;
	p->kind = kind;
	p->opcode = opcode;
	p->code = code;
	p->len = len;
	if (len)
		memcpy(p->data, data, len);
	retain(c);
	int rc = pc__ioloop_post(c->loop, m);
	if (rc != 0)
		unref(c);
	return rc;
}

/* ---- the caller's side ---------------------------------------------------------------- */

/* The request with a fresh key; the Accept to expect goes to c->accept. */
static int build_request(pc_wsc_t *c, const pc_wsc_options_t *o, const char *host)
{
	static const char guid[] = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
	unsigned char raw[16];
	char key[25];
	unsigned char in[24 + sizeof(guid) - 1];
	unsigned char md[SHA_DIGEST_LENGTH];
	if (RAND_bytes(raw, sizeof(raw)) != 1 || EVP_EncodeBlock((unsigned char *)key, raw, sizeof(raw)) != 24)
		return PC_ESYS;
	memcpy(in, key, 24);
	memcpy(in + 24, guid, sizeof(guid) - 1);
	if (!SHA1(in, sizeof(in), md) || EVP_EncodeBlock((unsigned char *)c->accept, md, sizeof(md)) != 28)
		return PC_ESYS;
	bool v6 = strchr(host, ':') != NULL;
	pc__buf_t b = {0};
	pc__buf_printf(&b,
		       "GET %s HTTP/1.1\r\nHost: %s%s%s:%u\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
		       "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n",
		       o->path ? o->path : "/", v6 ? "[" : "", host, v6 ? "]" : "", (unsigned)o->port, key);
	if (o->origin)
		pc__buf_printf(&b, "Origin: %s\r\n", o->origin);
	if (o->headers)
		pc__buf_append_str(&b, o->headers);
	pc__buf_append_str(&b, "\r\n");
	size_t len = b.len;
	c->request = pc__buf_take(&b);
	if (!c->request)
		return PC_ENOMEM;
	c->request_len = len;
	return 0;
}

int pc_wsc_open(pc_io_t *io, const pc_wsc_options_t *o, pc_actor_t *owner, pc_wsc_t **out)
{
	if (!io || !o || !o->port || !owner || !out)
		return PC_EINVAL;
	if (o->path && o->path[0] != '/')
		return PC_EINVAL;
	/* Header text is the caller's own; it must not split the request. */
	for (const char *s = o->path ? o->path : ""; *s; s++)
		if (*s == '\r' || *s == '\n' || *s == ' ')
			return PC_EINVAL;
	if (o->origin && strpbrk(o->origin, "\r\n"))
		return PC_EINVAL;
	const char *host = o->host ? o->host : "127.0.0.1";
	pc_wsc_t *c = calloc(1, sizeof(*c));
	if (!c)
		return PC_ENOMEM;
	c->fd = -1;
	c->refs = 2; /* the caller's and the loop's */
	c->serial = pc__io_serial();
	c->user = o->user;
	c->max_message = o->max_message ? o->max_message : DEFAULT_MAX_MESSAGE;
	c->max_output = o->max_output ? o->max_output : DEFAULT_MAX_OUTPUT;
	c->open_timeout_ms = o->open_timeout_ms ? o->open_timeout_ms : DEFAULT_OPEN_TIMEOUT_MS;
	int rc = pc__tcp_resolve(&c->addrs, host, o->port);
	if (rc == 0)
		rc = build_request(c, o, host);
	if (rc != 0) {
		destroy(c);
		return rc;
	}
	c->loop = pc__io_next_loop(io);
	c->owner = owner;
	pc_actor_retain(owner);
	wsc_cmd_t *p;
	pc_msg_t *m = pc__io_cmd_new(run_cmd, sizeof(*p), (void **)&p);
	if (!m) {
		pc_actor_release(owner);
		destroy(c);
		return PC_ENOMEM;
	}
	memset(p, 0, sizeof(*p));
	p->c = c;
	p->kind = CMD_START;
	retain(c); /* the command's */
	if ((rc = pc__ioloop_post(c->loop, m)) != 0) {
		pc_actor_release(owner);
		destroy(c);
		return rc;
	}
	*out = c;
	return 0;
}

int pc_wsc_send(pc_wsc_t *c, int opcode, const void *data, size_t len)
{
	if (!c || (!data && len) || (opcode != PC_WS_TEXT && opcode != PC_WS_BINARY))
		return PC_EINVAL;
	pc_wsc_state_t s = pc_wsc_state(c);
	if (s == PC_WSC_CONNECTING || s == PC_WSC_HANDSHAKING)
		return PC_ESTATE;
	if (s != PC_WSC_OPEN || __atomic_load_n(&c->close_asked, __ATOMIC_ACQUIRE))
		return PC_ESTOPPED;
	return post(c, CMD_SEND, (uint8_t)opcode, 0, data, len);
}

int pc_wsc_close(pc_wsc_t *c, uint16_t code, const char *reason)
{
	if (!c)
		return PC_EINVAL;
	pc_wsc_state_t s = pc_wsc_state(c);
	if (s == PC_WSC_CLOSED || s == PC_WSC_FAILED)
		return 0; /* ended (pc_io_free ends every connection) */
	if (__atomic_exchange_n(&c->close_asked, true, __ATOMIC_ACQ_REL))
		return 0;
	size_t rl = reason ? strlen(reason) : 0;
	return post(c, CMD_CLOSE, 0, code, reason, rl > 123 ? 123 : rl);
}

pc_wsc_state_t pc_wsc_state(const pc_wsc_t *c)
{
	return __atomic_load_n(&c->state, __ATOMIC_ACQUIRE);
}

uint64_t pc_wsc_serial(const pc_wsc_t *c) { return c->serial; }

void pc_wsc_release(pc_wsc_t *c)
{
	if (!c)
		return;
	pc_wsc_state_t s = pc_wsc_state(c);
	if (s != PC_WSC_CLOSED && s != PC_WSC_FAILED) {
		__atomic_store_n(&c->close_asked, true, __ATOMIC_RELEASE);
		(void)post(c, CMD_ABORT, 0, 0, NULL, 0); /* after pc_io_free nothing is left to end */
	}
	unref(c);
}
