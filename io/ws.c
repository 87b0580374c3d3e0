/*
 * WebSocket: the upgrade handshake (RFC 6455 section 4.2) and framing by
 * wslay's event API on the connection's nonblocking socket.
 *
 * wslay runs unbuffered: it checks every frame against max_frame_bytes
 * (and answers 1009 itself) and hands payload over in chunks, which are
 * joined here. Memory thus follows the bytes that actually arrived, not
 * what a frame header claims, and max_message_bytes is checked when a
 * frame starts, before any of its payload is kept. Ping, pong, UTF-8
 * checks of text and the close handshake are wslay's.
 *
 * CLOSED goes to the owner exactly once, when the connection ends or, if
 * it lingers after our close frame, when that frame has been sent.
 */
#include "ws_internal.h"
#include "wslay_fd_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include <openssl/evp.h>
#include <openssl/sha.h>
#include <wslay/wslay.h>

/* How long a close we started waits for the peer's close frame. */
#define CLOSE_GRACE_MS 2000
/* A reassembly buffer larger than this is given back after its message. */
#define KEEP_MSG_BUF 65536

struct pc__ws {
	wslay_event_context_ptr ctx;
	pc_actor_t *owner;
	pc__buf_t msg;        /* the data message being joined */
	uint8_t msg_opcode;   /* its first frame's opcode */
	uint8_t frame_opcode; /* the frame being received */
	bool ignore;          /* a limit was hit: take no more data */
	bool gather;          /* ws_send queues frames for one sendmsg (ws_pump) */
	pc__ws_state_t ws_state; /* set only by ws_set */
	bool local_close;     /* the close was ours */
	bool drain_wanted;    /* the owner waits for PC_MSG_WS_DRAINED */
	uint16_t local_code;
	uint32_t cap;         /* this connection's message cap; 0: the server's */
	uint32_t msg_cap;     /* the cap of the message being joined */
	int reason;
};

/* Frames gathered for one sendmsg: what a held batch may hold (http_conn.c),
 * with room for the frames' headers. */
#define GATHER_MAX (2 * PC__CONN_HOLD_MAX)

/* ---- the machine ---------------------------------------------------------------- */

#define BIT(s) (1u << (s))

static const char *const lc_names[PC__WS_COUNT] = {
	[PC__WS_NEW] = "new",
	[PC__WS_OPEN] = "open",
	[PC__WS_CLOSING] = "closing",
	[PC__WS_CLOSED] = "closed",
};

static const unsigned lc_next[PC__WS_COUNT] = {
	[PC__WS_NEW] = BIT(PC__WS_OPEN) | BIT(PC__WS_CLOSED),
	[PC__WS_OPEN] = BIT(PC__WS_CLOSING) | BIT(PC__WS_CLOSED),
	[PC__WS_CLOSING] = BIT(PC__WS_CLOSED),
};

const char *pc__ws_lc_name(pc__ws_state_t s)
{
	return (unsigned)s < PC__WS_COUNT ? lc_names[s] : "unknown";
}

bool pc__ws_lc_legal(pc__ws_state_t from, pc__ws_state_t to)
{
	return (unsigned)from < PC__WS_COUNT && (unsigned)to < PC__WS_COUNT && (lc_next[from] & BIT(to));
}

/* The one place a WebSocket's state changes (pc__conn_set's rules). */
static void ws_set(pc__http_conn_t *c, pc__ws_state_t to, const char *why)
{
	struct pc__ws *ws = c->ws;
	pc__ws_state_t from = ws->ws_state;
	if (!pc__ws_lc_legal(from, to)) {
		PC__IO_STAT_ADD(c->sl->loop, transitions_refused, 1);
		if (pc__io_traced(PC__IO_TRACE_WS))
			pc__io_trace("ws", c->serial, pc__ws_lc_name(from), pc__ws_lc_name(to), "refused");
#ifdef PC__LC_STRICT
		abort();
#endif
		return;
	}
	ws->ws_state = to;
	if (pc__io_traced(PC__IO_TRACE_WS))
		pc__io_trace("ws", c->serial, pc__ws_lc_name(from), pc__ws_lc_name(to), why);
}

/* ---- the handshake ---------------------------------------------------------- */

static bool key_ok(const char *key)
{
	static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	/* 16 bytes in base64: 22 characters, the last carrying 2 bits, "==". */
	if (strlen(key) != 24 || key[22] != '=' || key[23] != '=')
		return false;
	for (int i = 0; i < 22; i++) {
		if (!key[i] || !strchr(b64, key[i]))
			return false;
	}
	return strchr("AQgw", key[21]) != NULL;
}

int pc__ws_check(pc__http_conn_t *c, const pc_http_request_msg_t *req)
{
	const pc_http_server_t *srv = c->srv;
	if (strcmp(req->method, "GET") != 0 || req->http_minor < 1)
		return 400;
	const char *ver = pc_http_request_header(req, "sec-websocket-version");
	if (!ver || strcmp(ver, "13") != 0)
		return 426;
	const char *key = pc_http_request_header(req, "sec-websocket-key");
	if (!key || !key_ok(key))
		return 400;
	if (srv->origin_check && !srv->origin_check(srv->origin_user, pc_http_request_header(req, "origin"), req))
		return 403;
	memcpy(c->ws_key, key, 25);
	return 0;
}

/* Sec-WebSocket-Accept for `key`: 28 characters and a NUL. */
static int accept_value(const char *key, char out[29])
{
	static const char guid[] = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
	unsigned char in[24 + sizeof(guid) - 1];
	unsigned char md[SHA_DIGEST_LENGTH];
	if (strlen(key) != 24)
		return PC_EINVAL;
	memcpy(in, key, 24);
	memcpy(in + 24, guid, sizeof(guid) - 1);
	if (!SHA1(in, sizeof(in), md))
		return PC_ESYS;
	/* 20 bytes are 28 base64 characters; EVP_EncodeBlock adds the NUL. */
	if (EVP_EncodeBlock((unsigned char *)out, md, (int)sizeof(md)) != 28)
		return PC_ESYS;
	return 0;
}

/* ---- close bookkeeping ---------------------------------------------------------- */

static uint16_t ws_code(const struct pc__ws *ws)
{
	if (ws->local_close)
		return ws->local_code;
	if (wslay_event_get_close_received(ws->ctx))
		return wslay_event_get_status_code_received(ws->ctx);
	if (wslay_event_get_close_sent(ws->ctx))
		return wslay_event_get_status_code_sent(ws->ctx);
	return WSLAY_CODE_ABNORMAL_CLOSURE;
}

static int ws_reason(const struct pc__ws *ws)
{
	if (ws->reason)
		return ws->reason;
	/* wslay refused an oversized frame on its own. */
	if (wslay_event_get_close_sent(ws->ctx) &&
	    wslay_event_get_status_code_sent(ws->ctx) == WSLAY_CODE_MESSAGE_TOO_BIG)
		return PC_ELIMIT;
	return 0;
}

/* Queues our close frame (unless a close is already on its way). With
 * `stop_reading`, whatever else the peer sends is ignored. */
static void ws_local_close(pc__http_conn_t *c, uint16_t code, int reason, const char *text,
			   bool stop_reading)
{
	struct pc__ws *ws = c->ws;
	if (!ws->local_close &&
	    wslay_event_queue_close(ws->ctx, code, (const uint8_t *)text, strlen(text)) == 0) {
		ws->local_close = true;
		ws->local_code = code;
		ws->reason = reason;
		if (ws->ws_state == PC__WS_OPEN)
			ws_set(c, PC__WS_CLOSING, text);
	}
	if (stop_reading) {
		ws->ignore = true;
		wslay_event_shutdown_read(ws->ctx);
	}
}

void pc__ws_finish(pc__http_conn_t *c, uint64_t id, int reason)
{
	struct pc__ws *ws = c->ws;
	if (ws->ws_state == PC__WS_CLOSED)
		return;
	ws_set(c, PC__WS_CLOSED, reason ? pc_strerror(reason) : "connection ends");
	if (c->id)
		pc__srv_id_remove(c->sl, c); /* before CLOSED: see pc__conn_close */
	if (reason == PC_ESTOPPED && !wslay_event_get_close_sent(ws->ctx)) {
		ws_local_close(c, WSLAY_CODE_GOING_AWAY, PC_ESTOPPED, "server closing", true);
		/* Best effort: the connection closes right after. */
		(void)wslay_event_send(ws->ctx);
	}
	pc__conn_notify(ws->owner, PC_MSG_WS_CLOSED, c->srv, id, reason ? reason : ws_reason(ws), ws_code(ws));
	pc__conn_access_ws(c, ws_code(ws), reason ? reason : ws_reason(ws));
	pc_actor_release(ws->owner);
	ws->owner = NULL;
}

/* ---- wslay callbacks ------------------------------------------------------------- */

static ssize_t ws_recv(wslay_event_context_ptr ctx, uint8_t *buf, size_t len, int flags, void *user)
{
	(void)flags;
	pc__http_conn_t *c = user;
	if (c->pending.len) {
		/* Frames that came before the upgrade was accepted. */
		size_t n = len < c->pending.len ? len : c->pending.len;
		memcpy(buf, c->pending.p, n);
		memmove(c->pending.p, c->pending.p + n, c->pending.len - n);
		c->pending.len -= n;
		return (ssize_t)n;
	}
	/* EOF or a reset: the peer is gone, and wslay_event_recv fails. */
	return pc__wslay_fd_recv(ctx, c->fd, buf, len);
}

static ssize_t ws_send(wslay_event_context_ptr ctx, const uint8_t *data, size_t len, int flags,
		       void *user)
{
	pc__http_conn_t *c = user;
	if (c->ws->gather && (c->out_head || len <= GATHER_MAX)) {
		/* Behind what is queued (the 101 first), up to the bound;
		 * then ws_pump flushes and asks for more. */
		if (c->out_head && c->out_bytes + len > GATHER_MAX) {
			wslay_event_set_error(ctx, WSLAY_ERR_WOULDBLOCK);
			return -1;
		}
		if (pc__conn_queue(c, (const char *)data, len) != 0) {
			wslay_event_set_error(ctx, WSLAY_ERR_CALLBACK_FAILURE);
			return -1;
		}
		return (ssize_t)len;
	}
	/* The 101 response goes first. */
	if (c->out_head && pc__conn_flush(c) != 0) {
		wslay_event_set_error(ctx, WSLAY_ERR_CALLBACK_FAILURE);
		return -1;
	}
	if (c->out_head) {
		wslay_event_set_error(ctx, WSLAY_ERR_WOULDBLOCK);
		return -1;
	}
	ssize_t n = pc__wslay_fd_send(ctx, c->fd, data, len, flags);
	if (n >= 0)
		pc__conn_progress(c);
	return n;
}

static void on_frame_start(wslay_event_context_ptr ctx, const struct wslay_event_on_frame_recv_start_arg *arg,
			   void *user)
{
	(void)ctx;
	pc__http_conn_t *c = user;
	struct pc__ws *ws = c->ws;
	const pc_http_server_limits_t *l = &c->srv->lim;
	if (l->ws_idle_timeout_ms && !ws->local_close)
		pc__conn_arm(c, l->ws_idle_timeout_ms);
	ws->frame_opcode = arg->opcode;
	if (wslay_is_ctrl_frame(arg->opcode) || ws->ignore)
		return;
	if (arg->opcode != WSLAY_CONTINUATION_FRAME) {
		ws->msg.len = 0;
		ws->msg_opcode = arg->opcode;
		/* A message keeps the cap it started under. */
		ws->msg_cap = ws->cap && ws->cap < l->max_message_bytes ? ws->cap : l->max_message_bytes;
	}
	if (ws->msg.len > ws->msg_cap || arg->payload_length > ws->msg_cap - ws->msg.len)
		ws_local_close(c, WSLAY_CODE_MESSAGE_TOO_BIG, PC_ELIMIT, "message too big", true);
}

static void on_frame_chunk(wslay_event_context_ptr ctx, const struct wslay_event_on_frame_recv_chunk_arg *arg,
			   void *user)
{
	(void)ctx;
	pc__http_conn_t *c = user;
	struct pc__ws *ws = c->ws;
	if (ws->ignore || wslay_is_ctrl_frame(ws->frame_opcode))
		return;
	if (pc__buf_append(&ws->msg, arg->data, arg->data_length) != 0)
		ws_local_close(c, WSLAY_CODE_INTERNAL_SERVER_ERROR, PC_ENOMEM, "out of memory", true);
}

static void on_msg(wslay_event_context_ptr ctx, const struct wslay_event_on_msg_recv_arg *arg, void *user)
{
	(void)ctx;
	pc__http_conn_t *c = user;
	struct pc__ws *ws = c->ws;
	if (arg->opcode == WSLAY_CONNECTION_CLOSE && ws->ws_state == PC__WS_OPEN)
		ws_set(c, PC__WS_CLOSING, "peer close");
	if (ws->ignore || wslay_is_ctrl_frame(arg->opcode))
		return;
	size_t len = ws->msg.len;
	pc_msg_t *m = pc_msg_new(PC_MSG_WS_MESSAGE, sizeof(pc_ws_message_msg_t) + len + 1);
	if (!m) {
		ws_local_close(c, WSLAY_CODE_INTERNAL_SERVER_ERROR, PC_ENOMEM, "out of memory", true);
		return;
	}
	pc_ws_message_msg_t *wm = pc_msg_data(m);
	wm->server = c->srv;
	wm->id = c->id;
	wm->opcode = ws->msg_opcode;
	wm->len = len;
	if (len)
		memcpy(wm->data, ws->msg.p, len);
	wm->data[len] = 0;
	ws->msg.len = 0;
	if (ws->msg.cap > KEEP_MSG_BUF)
		pc__buf_free(&ws->msg);
	if (pc_send(ws->owner, m) != 0)
		ws_local_close(c, WSLAY_CODE_GOING_AWAY, 0, "going away", true); /* nobody listens */
}

static const struct wslay_event_callbacks ws_callbacks = {
	.recv_callback = ws_recv,
	.send_callback = ws_send,
	.on_frame_recv_start_callback = on_frame_start,
	.on_frame_recv_chunk_callback = on_frame_chunk,
	.on_msg_recv_callback = on_msg,
};

/* ---- driving ---------------------------------------------------------------------- */

/* Turns what wslay has queued into bytes on the connection's output
 * queue, up to GATHER_MAX. False: the connection was closed. */
static bool ws_gather(pc__http_conn_t *c)
{
	struct pc__ws *ws = c->ws;
	ws->gather = true;
	int rc = wslay_event_send(ws->ctx);
	ws->gather = false;
	if (rc != 0) {
		pc__conn_close(c, 0);
		return false;
	}
	return true;
}

/* Tells the owner, if it asked, that nothing is left to write: no bytes
 * queued or held for the socket, no frame in wslay. */
static void ws_drained(pc__http_conn_t *c)
{
	struct pc__ws *ws = c->ws;
	if (!ws->drain_wanted || !ws->owner || c->out_head || c->flush_due || wslay_event_want_write(ws->ctx))
		return;
	ws->drain_wanted = false;
	pc__conn_notify(ws->owner, PC_MSG_WS_DRAINED, c->srv, c->id, 0, 0);
}

/* Sends what wslay has queued, its frames gathered into one sendmsg at a
 * time; ends the connection once both directions are done, and sets the
 * epoll mask. */
static void ws_pump(pc__http_conn_t *c)
{
	struct pc__ws *ws = c->ws;
	for (;;) {
		if (c->out_head && pc__conn_flush(c) != 0) {
			pc__conn_close(c, 0);
			return;
		}
		/* The socket is full (EPOLLOUT resumes), or nothing is left. */
		if (c->out_head || !wslay_event_want_write(ws->ctx))
			break;
		if (!ws_gather(c))
			return;
		if (!c->out_head)
			break; /* sent straight (a frame past the bound), or blocked */
	}
	if (!wslay_event_want_read(ws->ctx) && !wslay_event_want_write(ws->ctx) && !c->out_head) {
		if (wslay_event_get_close_sent(ws->ctx) && !wslay_event_get_close_received(ws->ctx)) {
			/* Our close went out and reading stopped (a limit or a
			 * protocol error): drain the peer rather than reset it,
			 * so the close frame is read. */
			pc__ws_finish(c, c->id, 0);
			pc__conn_linger(c);
		} else {
			pc__conn_close(c, 0); /* the closing handshake is complete */
		}
		return;
	}
	ws_drained(c);
	pc__conn_rewatch(c);
}

void pc__ws_on_event(pc__http_conn_t *c, uint32_t events)
{
	struct pc__ws *ws = c->ws;
	if ((events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) && wslay_event_want_read(ws->ctx) &&
	    wslay_event_recv(ws->ctx) != 0) {
		pc__conn_close(c, 0);
		return;
	}
	if (events & (EPOLLERR | EPOLLHUP)) {
		pc__conn_close(c, 0);
		return;
	}
	ws_pump(c);
}

void pc__ws_on_timer(pc__http_conn_t *c)
{
	struct pc__ws *ws = c->ws;
	if (ws->local_close) {
		pc__conn_close(c, 0); /* the peer never answered our close */
		return;
	}
	/* No frame for ws_idle_timeout_ms. */
	pc__conn_drop(c);
	ws_local_close(c, WSLAY_CODE_GOING_AWAY, PC_ETIMEDOUT, "idle", true);
	pc__conn_arm(c, CLOSE_GRACE_MS);
	ws_pump(c);
}

bool pc__ws_want_read(const pc__http_conn_t *c)
{
	return c->ws && wslay_event_want_read(c->ws->ctx);
}

bool pc__ws_want_write(const pc__http_conn_t *c)
{
	return c->ws && wslay_event_want_write(c->ws->ctx);
}

void pc__ws_start(pc__http_conn_t *c, pc_actor_t *owner, const char *protocol, uint32_t cap)
{
	uint64_t id = c->id;
	struct pc__ws *ws = NULL;
	wslay_event_context_ptr ctx;
	char accept[29];
	char head[192];
	if (c->state != PC__C_SERVICE || !c->ws_ok)
		goto refuse; /* not an upgrade, or answered already */
	if (accept_value(c->ws_key, accept) != 0)
		goto fail;
	int n = snprintf(head, sizeof(head),
			 "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
			 "Sec-WebSocket-Accept: %s\r\n%s",
			 accept, protocol ? "Sec-WebSocket-Protocol: " : "");
	if (n < 0 || (size_t)n >= sizeof(head))
		goto fail;
	ws = calloc(1, sizeof(*ws));
	/* Through a local: wslay leaves its out pointer dangling on failure. */
	if (!ws || wslay_event_context_server_init(&ctx, &ws_callbacks, c) != 0)
		goto fail;
	ws->ctx = ctx;
	wslay_event_config_set_no_buffering(ctx, 1);
	wslay_event_config_set_max_recv_msg_length(ctx, c->srv->lim.max_frame_bytes);
	const char *proto = protocol ? protocol : "";
	struct iovec iov[3] = {
		{head, (size_t)n},
		{(void *)proto, strlen(proto)},
		{(void *)(protocol ? "\r\n\r\n" : "\r\n"), protocol ? 4 : 2},
	};
	ws->owner = owner;
	ws->cap = cap;
	c->ws = ws;
	c->handler = NULL; /* from now on the owner hears about this id */
	c->keep_alive = false;
	c->resp_status = 101;
	pc__conn_access(c, true); /* the upgrade; its close is reported apart */
	pc__conn_set(c, PC__C_WS, "upgrade");
	ws_set(c, PC__WS_OPEN, "upgrade");
	if (c->srv->lim.ws_idle_timeout_ms)
		pc__conn_arm(c, c->srv->lim.ws_idle_timeout_ms);
	else
		pc__conn_disarm(c);
	pc__conn_send(c, iov, 3);
	if (!pc__conn_closed(c))
		pc__ws_on_event(c, EPOLLIN); /* frames that came early */
	return;
fail:
	free(ws);
	pc__conn_respond(c, 503, NULL, 0, NULL, 0);
refuse:
	pc__conn_notify(owner, PC_MSG_WS_CLOSED, c->srv, id, PC_ESTATE, WSLAY_CODE_ABNORMAL_CLOSURE);
	pc_actor_release(owner);
}

void pc__ws_send(pc__http_conn_t *c, int opcode, const char *data, size_t len)
{
	if (c->state != PC__C_WS)
		return;
	struct pc__ws *ws = c->ws;
	size_t cap = c->srv->lim.max_output_bytes;
	size_t queued = wslay_event_get_queued_msg_length(ws->ctx) + c->out_bytes;
	if (len > cap || queued > cap - len) {
		/* A peer that does not read is dropped, not buffered for. */
		pc__conn_drop(c);
		pc__conn_close(c, PC_ELIMIT);
		return;
	}
	struct wslay_event_msg m = {(uint8_t)opcode, (const uint8_t *)data, len};
	int rc = wslay_event_queue_msg(ws->ctx, &m);
	if (rc == WSLAY_ERR_NOMEM) {
		pc__conn_close(c, PC_ENOMEM);
		return;
	}
	/* WSLAY_ERR_NO_MORE_MSG: closing, so the message has nowhere to go.
	 * Messages posted in one batch of commands leave together at its end:
	 * framed now, in the order they came (a close queued after them must
	 * not overtake them inside wslay), and written then. */
	if (pc__conn_hold(c, wslay_event_get_queued_msg_length(ws->ctx) + c->out_bytes))
		(void)ws_gather(c);
	else
		ws_pump(c);
}

void pc__ws_want_drained(pc__http_conn_t *c)
{
	if (c->state != PC__C_WS)
		return;
	c->ws->drain_wanted = true;
	ws_drained(c);
}

void pc__ws_set_cap(pc__http_conn_t *c, uint32_t cap)
{
	if (c->state == PC__C_WS)
		c->ws->cap = cap;
}

void pc__ws_close(pc__http_conn_t *c, uint16_t code, const char *reason, size_t rlen)
{
	if (c->state != PC__C_WS)
		return;
	struct pc__ws *ws = c->ws;
	if (!ws->local_close &&
	    wslay_event_queue_close(ws->ctx, code, (const uint8_t *)reason, rlen) == 0) {
		ws->local_close = true;
		ws->local_code = code;
		if (ws->ws_state == PC__WS_OPEN)
			ws_set(c, PC__WS_CLOSING, "owner close");
		pc__conn_arm(c, CLOSE_GRACE_MS);
	}
	ws_pump(c);
}

void pc__ws_free(struct pc__ws *ws)
{
	if (!ws)
		return;
	wslay_event_context_free(ws->ctx);
	pc__buf_free(&ws->msg);
	free(ws);
}
