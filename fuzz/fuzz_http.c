/*
 * libFuzzer target for the HTTP/1.1 + WebSocket + h2c server
 * (io/http_server.c, http_conn.c, ws.c, http2_server.c, llhttp, wslay,
 * nghttp2). See fuzz/README.md.
 *
 * One runtime, one I/O thread and one server on 127.0.0.1 (small limits
 * and timeouts, so the limit paths are reached) are started with the first
 * input and live for the whole run. A route actor answers every request
 * (the path picks how: echo, streamed, held, aborted, bodiless, too big to
 * queue) and accepts every WebSocket upgrade, echoing its messages.
 *
 * Input layout: byte 0 is the plan (bits 0-2: how many chunk-size bytes
 * follow; bit 3: half-close after writing; bit 4: end with a reset
 * instead of a close; bit 5: close without reading; bit 6: a tiny receive
 * buffer; bit 7: read patiently, past the server's timeouts, or with bit
 * 5, stay 200 ms without reading), then the chunk sizes, then the
 * client's bytes. One connection per input: the bytes are written in
 * those chunks, the response is read until the server closes or goes
 * quiet, and the socket is closed. Then, within a bounded time, the
 * server must have accepted it and closed it again (connections_live back
 * to 0), and every WebSocket the actor accepted must have been reported
 * CLOSED exactly once. Anything the server sends must start with an
 * HTTP/1.1 status line, or, when the client's bytes start with the HTTP/2
 * preface, with the server's SETTINGS frame. A broken promise traps; ASan
 * and UBSan watch the
 * server's threads meanwhile.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "io/http_server.h"
#include "io/io.h"
#include "pincer.h"

#define FUZZ_NAME "fuzz_http"
#include "fuzz_net.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* How long the server may take to accept and to close a connection after
 * the client has gone: far more than it needs, far less than a hang. */
#define SETTLE_MS 5000
#define READ_QUIET_MS 30
#define READ_TOTAL_MS 250
#define READ_PATIENT_MS 500 /* past every timeout of the server below */
#define STALL_MS 200        /* a client that neither reads nor leaves */
#define BIG_BODY (256u << 10)
#define MAX_OUTPUT (256u << 10) /* queued bytes: room to flush, or be dropped */

static pc_runtime_t *rt;
static pc_io_t *io;
static pc_http_server_t *srv;
static pc_actor_t *app;
static uint16_t port;

/* Counted by the actor, read by the fuzzing thread. */
static uint64_t ws_accepted, ws_closed;

/* ---- the application ---------------------------------------------------------- */

static void answered(int rc)
{
	/* The client may be gone already; nothing else may fail. */
	CHECK(rc == 0 || rc == PC_ENOTFOUND, "answer failed: %d", rc);
}

static void on_request(pc_ctx_t *ctx, const pc_http_request_msg_t *req)
{
	pc_http_server_t *s = req->server;
	CHECK(req->body[req->body_len] == 0, "body not NUL-terminated");
	CHECK(req->method && req->target && req->path && req->query, "request strings");
	for (size_t i = 0; i < req->header_count; i++)
		CHECK(req->headers[i].name && req->headers[i].value, "header strings");
	if (req->upgrade) {
		const char *proto = pc_http_request_header(req, "sec-websocket-protocol");
		int rc = pc_ws_accept(s, req->id, pc_self(ctx), proto && strstr(proto, "chat") ? "chat" : NULL);
		answered(rc);
		if (rc == 0)
			__atomic_add_fetch(&ws_accepted, 1, __ATOMIC_ACQ_REL);
		return;
	}
	char c = req->path[0] == '/' ? req->path[1] : 0;
	switch (c) {
	case 's': /* streamed: the body echoed in two pieces */
		answered(pc_http_respond_start(s, req->id, 200, "Content-Type: text/event-stream\r\n"));
		answered(pc_http_respond_write(s, req->id, req->body, req->body_len / 2));
		answered(pc_http_respond_write(s, req->id, req->body + req->body_len / 2,
					       req->body_len - req->body_len / 2));
		answered(pc_http_respond_end(s, req->id));
		break;
	case 'h': /* held: never answered */
		break;
	case 'a':
		answered(pc_http_abort(s, req->id));
		break;
	case 'n':
		answered(pc_http_respond(s, req->id, 204, NULL, NULL, 0));
		break;
	case 'u': /* a stream left open */
		answered(pc_http_respond_start(s, req->id, 200, NULL));
		answered(pc_http_respond_write(s, req->id, "x", 1));
		break;
	case 'b': { /* more than max_output_bytes, for a client that does not read:
		     * "/b<digit>" is 16 KiB << digit */
		char d = req->path[2];
		size_t len = d >= '0' && d <= '9' ? (size_t)16384 << (d - '0') : BIG_BODY;
		char *big = calloc(1, len);
		CHECK(big, "calloc");
		answered(pc_http_respond(s, req->id, 200, NULL, big, len));
		free(big);
		break;
	}
	default: {
		char head[160];
		int n = snprintf(head, sizeof(head), "%s %s q=%s h=%zu len=%zu ka=%d\n", req->method, req->path,
				 req->query, req->header_count, req->body_len, req->keep_alive);
		CHECK(n > 0, "snprintf");
		size_t hn = (size_t)n < sizeof(head) ? (size_t)n : sizeof(head) - 1;
		char *out = malloc(hn + req->body_len);
		CHECK(out, "malloc");
		memcpy(out, head, hn);
		memcpy(out + hn, req->body, req->body_len);
		answered(pc_http_respond(s, req->id, 200, "X-Fuzz: 1\r\n", out, hn + req->body_len));
		free(out);
	}
	}
}

static void on_ws_message(const pc_ws_message_msg_t *wm)
{
	CHECK(wm->data[wm->len] == 0, "ws data not NUL-terminated");
	CHECK(wm->opcode == PC_WS_TEXT || wm->opcode == PC_WS_BINARY, "ws opcode %u", wm->opcode);
	if (wm->len == 5 && memcmp(wm->data, "close", 5) == 0) {
		answered(pc_ws_close(wm->server, wm->id, 4000, "bye"));
		return;
	}
	if (wm->len >= 3 && memcmp(wm->data, "big", 3) == 0) {
		static char big[MAX_OUTPUT + 1]; /* over max_output_bytes: the peer is dropped */
		answered(pc_ws_send(wm->server, wm->id, PC_WS_BINARY, big, sizeof(big)));
		return;
	}
	answered(pc_ws_send(wm->server, wm->id, wm->opcode, wm->data, wm->len));
}

static int app_receive(pc_ctx_t *ctx, void *state, pc_msg_t *msg)
{
	(void)state;
	switch (msg->type) {
	case PC_MSG_HTTP_REQUEST:
		on_request(ctx, pc_msg_cdata(msg));
		break;
	case PC_MSG_WS_MESSAGE:
		on_ws_message(pc_msg_cdata(msg));
		break;
	case PC_MSG_WS_CLOSED:
		__atomic_add_fetch(&ws_closed, 1, __ATOMIC_ACQ_REL);
		break;
	case PC_MSG_HTTP_GONE:
		break;
	default:
		CHECK(0, "unexpected message type %u", msg->type);
	}
	return 0;
}

static const pc_behavior_t app_b = {.name = "fuzz-http-app", .receive = app_receive};

static bool origin_check(void *user, const char *origin, const pc_http_request_msg_t *req)
{
	(void)user;
	CHECK(req && req->path, "origin hook sees the request");
	return !origin || strcmp(origin, "x") != 0;
}

static void teardown(void)
{
	/* At exit, so LeakSanitizer sees what the server failed to free. */
	pc_http_server_free(srv);
	pc_io_free(io);
	pc_actor_release(app);
	pc_runtime_free(rt);
}

static void setup(void)
{
	start_runtime_io(&rt, &io);
	pc_http_server_config_t cfg = {
		.host = "127.0.0.1",
		.origin_check = origin_check,
		.limits = {
			.max_header_bytes = 512,
			.max_body_bytes = 1024,
			.max_frame_bytes = 256,
			.max_message_bytes = 512,
			.max_output_bytes = MAX_OUTPUT,
			.max_connections = 8,
			.header_timeout_ms = 150,
			.body_timeout_ms = 150,
			.idle_timeout_ms = 150,
			.ws_idle_timeout_ms = 150,
		},
	};
	CHECK(pc_http_server_new(io, &cfg, &srv) == 0, "server");
	CHECK(pc_spawn(rt, &app_b, NULL, &app) == 0, "spawn");
	CHECK(pc_http_server_route(srv, "POST", "/p", app) == 0, "route");
	CHECK(pc_http_server_route(srv, NULL, "/*", app) == 0, "route");
	CHECK(pc_http_server_start(srv) == 0, "start");
	port = pc_http_server_port(srv);
	atexit(teardown);
}

/* ---- the client ------------------------------------------------------------------ */

static pc_io_stats_t stats(void)
{
	pc_io_stats_t s;
	pc_io_stats(io, &s);
	return s;
}

/* Reads until EOF, an error, READ_QUIET_MS without data (unless patient)
 * or READ_TOTAL_MS (READ_PATIENT_MS). Checks that the server's first bytes
 * are a status line, or an HTTP/2 SETTINGS frame's header for `h2`. */
#define H2_PREFACE "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

static void drain(int fd, bool patient, bool h2)
{
	static int verbose = -1; /* FUZZ_HTTP_VERBOSE=1: show what the server sent */
	if (verbose < 0)
		verbose = getenv("FUZZ_HTTP_VERBOSE") != NULL;
	char buf[4096];
	char first[9];
	size_t got = 0;
	uint64_t until = now_ms() + (patient ? READ_PATIENT_MS : READ_TOTAL_MS);
	for (;;) {
		uint64_t now = now_ms();
		if (now >= until)
			break;
		struct pollfd p = {.fd = fd, .events = POLLIN};
		int left = (int)(until - now);
		int r = poll(&p, 1, left < READ_QUIET_MS || patient ? left : READ_QUIET_MS);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n <= 0)
			break;
		if (verbose)
			fwrite(buf, 1, (size_t)n, stderr);
		for (ssize_t i = 0; i < n && got < sizeof(first); i++)
			first[got++] = buf[i];
	}
	if (got && h2)
		CHECK(got < 4 || first[3] == 0x04, "the server's first HTTP/2 frame is not SETTINGS");
	else if (got)
		CHECK(memcmp(first, "HTTP/1.1 ", got < sizeof(first) ? got : sizeof(first)) == 0,
		      "the server's first bytes are not a status line");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!rt)
		setup();
	fuzz_input_t in;
	if (!fuzz_input_split(data, size, &in))
		return 0;
	uint8_t plan = in.plan;
	size_t nsizes = in.nsizes;
	const uint8_t *sizes = in.sizes;
	const uint8_t *s = in.bytes;
	size_t n = in.n;

	/* The loop counts a connection accepted a moment before it counts it
	 * live, so the last input's may only now have closed. */
	pc_io_stats_t before = stats();
	uint64_t until = now_ms() + SETTLE_MS;
	while (before.connections_live != 0 && now_ms() < until) {
		sleep_us(200);
		before = stats();
	}
	CHECK(before.connections_live == 0, "connection leaked: %llu live %d ms after the client closed",
	      (unsigned long long)before.connections_live, SETTLE_MS);

	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	CHECK(fd >= 0, "socket: %s", strerror(errno));
	int one = 1;
	(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (plan & 64) {
		int small = 1024;
		(void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
	}
	struct timeval tv = {0, 200 * 1000};
	(void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
		/* libFuzzer's -timeout alarm interrupts; the connect goes on. */
		CHECK(errno == EINTR, "connect: %s", strerror(errno));
		struct pollfd p = {.fd = fd, .events = POLLOUT};
		while (poll(&p, 1, SETTLE_MS) < 0)
			CHECK(errno == EINTR, "poll: %s", strerror(errno));
		int err = 0;
		socklen_t elen = sizeof(err);
		CHECK(getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) == 0 && err == 0, "connect: %s",
		      strerror(err));
	}

	size_t at = 0, k = 0;
	while (at < n) {
		size_t c = nsizes ? sizes[k++ % nsizes] : n;
		if (c == 0)
			c = 1;
		if (c > n - at)
			c = n - at;
		ssize_t w = send(fd, s + at, c, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			break; /* the server closed (or stopped reading): fine */
		at += (size_t)w;
		if (nsizes && at < n)
			sleep_us(300); /* separate reads on the server */
	}
	if (plan & 8)
		(void)shutdown(fd, SHUT_WR);
	if (!(plan & 32))
		drain(fd, plan & 128, n >= sizeof(H2_PREFACE) - 1 && memcmp(s, H2_PREFACE, sizeof(H2_PREFACE) - 1) == 0);
	else if (plan & 128)
		sleep_us(STALL_MS * 1000);
	if (plan & 16) {
		struct linger lg = {1, 0}; /* close with a reset */
		(void)setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	}
	close(fd);

	/* The server has taken the connection and let it go again (checked
	 * once more before the next input). */
	until = now_ms() + SETTLE_MS;
	pc_io_stats_t st = stats();
	while ((st.connections_accepted == before.connections_accepted || st.connections_live != 0) &&
	       now_ms() < until) {
		sleep_us(200);
		st = stats();
	}
	CHECK(st.connections_accepted > before.connections_accepted, "the connection was never accepted");
	CHECK(st.connections_live == 0, "connection leaked: %llu live %d ms after the client closed",
	      (unsigned long long)st.connections_live, SETTLE_MS);
	/* Every accepted WebSocket hears CLOSED, once. */
	while (__atomic_load_n(&ws_closed, __ATOMIC_ACQUIRE) != __atomic_load_n(&ws_accepted, __ATOMIC_ACQUIRE) &&
	       now_ms() < until)
		sleep_us(200);
	uint64_t acc = __atomic_load_n(&ws_accepted, __ATOMIC_ACQUIRE);
	uint64_t clo = __atomic_load_n(&ws_closed, __ATOMIC_ACQUIRE);
	CHECK(acc == clo, "WebSockets accepted %llu, CLOSED %llu", (unsigned long long)acc,
	      (unsigned long long)clo);
	return 0;
}
