/*
 * The HTTP/1.1 + WebSocket server (io/http_server.h) against raw blocking
 * sockets on 127.0.0.1: request shapes, keep-alive and pipelining,
 * streaming, every limit and timeout, slow and vanishing clients, the
 * WebSocket handshake and framing, many connections, and shutdown with
 * live connections. Every socket read has a timeout, so a test that
 * misbehaves fails instead of hanging.
 */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "io/http_server.h"
#include "io/io.h"
#include "test_util.h"

#define IO_TIMEOUT_MS 5000

/* ---- the application actor ------------------------------------------------ */

enum { MSG_FLOOD = 1, MSG_DELAYED = 2 };

/* What the actor saw; the test thread reads it with atomics. */
typedef struct app {
	uint32_t requests;
	uint32_t held;
	uint64_t held_id;
	uint32_t gone;
	int32_t gone_reason;
	uint64_t gone_id;
	uint32_t closed;
	int32_t closed_reason;
	uint32_t closed_code;
	uint64_t closed_id;
	uint32_t ws_msgs;
	uint32_t ws_accepted;
	uint64_t ws_id;
	uint64_t flood_bytes;
	uint64_t flood_limit; /* stop writing (without ending) after this */
	int32_t flood_rc;
	uint32_t flood_done;
} app_t;

static app_t app;

#define FLOOD_CHUNK 65536
#define FLOOD_LIMIT (512u << 20) /* a failing test must still end */
#define BIG_LINES 600 /* /big-stream: 600 lines of 500 bytes */
#define BIG_LINE 500

static void respond_text(const pc_http_request_msg_t *req, int status, const char *text)
{
	int rc = pc_http_respond(req->server, req->id, status, "Content-Type: text/plain\r\n", text, strlen(text));
	CHECK(rc == 0, "respond: %d", rc);
}

static void on_request(pc_ctx_t *ctx, const pc_http_request_msg_t *req)
{
	INC(app.requests);
	pc_http_server_t *srv = req->server;
	if (strcmp(req->path, "/echo") == 0 || strncmp(req->path, "/pre/", 5) == 0 ||
	    strcmp(req->path, "/post-only") == 0) {
		const char *foo = pc_http_request_header(req, "x-foo");
		size_t cap = strlen(req->method) + strlen(req->target) + strlen(req->query) + req->body_len + 128;
		char *out = malloc(cap);
		CHECK(out != NULL, "malloc");
		int n = snprintf(out, cap, "%s %s q=%s foo=%s len=%zu\n", req->method, req->path, req->query,
				 foo ? foo : "-", req->body_len);
		memcpy(out + n, req->body, req->body_len);
		CHECK(req->body[req->body_len] == 0, "body not NUL-terminated");
		int rc = pc_http_respond(srv, req->id, 200, "X-Test: yes\r\n", out, (size_t)n + req->body_len);
		CHECK(rc == 0, "respond: %d", rc);
		free(out);
	} else if (strcmp(req->path, "/stream") == 0) {
		CHECK(pc_http_respond_start(srv, req->id, 200, "Content-Type: text/plain\r\n") == 0, "start");
		for (int i = 0; i < 5; i++) {
			char part[16];
			int n = snprintf(part, sizeof(part), "part-%d\n", i);
			CHECK(pc_http_respond_write(srv, req->id, part, (size_t)n) == 0, "write");
		}
		CHECK(pc_http_respond_end(srv, req->id) == 0, "end");
	} else if (strcmp(req->path, "/big-stream") == 0) {
		/* Far more than the I/O thread holds back for the end of a
		 * batch of answers, all posted in one turn. */
		CHECK(pc_http_respond_start(srv, req->id, 200, NULL) == 0, "start");
		for (int i = 0; i < BIG_LINES; i++) {
			char line[BIG_LINE + 1];
			snprintf(line, sizeof(line), "%06d%0*d\n", i, BIG_LINE - 7, 0);
			CHECK(pc_http_respond_write(srv, req->id, line, BIG_LINE) == 0, "write");
		}
		CHECK(pc_http_respond_end(srv, req->id) == 0, "end");
	} else if (strcmp(req->path, "/hold") == 0 || strcmp(req->path, "/hold-stream") == 0) {
		if (req->path[5])
			CHECK(pc_http_respond_start(srv, req->id, 200, NULL) == 0, "start");
		STORE(app.held_id, req->id);
		INC(app.held);
	} else if (strcmp(req->path, "/delay") == 0) {
		pc_msg_t *m = pc_msg_new(MSG_DELAYED, sizeof(uint64_t) + sizeof(void *));
		memcpy(pc_msg_data(m), &req->id, sizeof(uint64_t));
		memcpy((char *)pc_msg_data(m) + sizeof(uint64_t), &srv, sizeof(srv));
		CHECK(pc_timer_after(pc_self(ctx), 150, m, NULL) == 0, "timer");
	} else if (strcmp(req->path, "/flood") == 0) {
		/* The client may be gone already (the racing test). */
		int rc = pc_http_respond_start(srv, req->id, 200, NULL);
		if (rc != 0) {
			STORE(app.flood_rc, rc);
			STORE(app.flood_done, 1);
			return;
		}
		pc_msg_t *m = pc_msg_new(MSG_FLOOD, sizeof(uint64_t) + sizeof(void *));
		memcpy(pc_msg_data(m), &req->id, sizeof(uint64_t));
		memcpy((char *)pc_msg_data(m) + sizeof(uint64_t), &srv, sizeof(srv));
		pc_send(pc_self(ctx), m);
	} else if (strcmp(req->path, "/ws") == 0) {
		if (!req->upgrade) {
			respond_text(req, 400, "not an upgrade\n");
			return;
		}
		const char *proto = pc_http_request_header(req, "sec-websocket-protocol");
		int rc = pc_ws_accept(srv, req->id, pc_self(ctx), proto && strstr(proto, "chat") ? "chat" : NULL);
		CHECK(rc == 0, "accept: %d", rc);
		STORE(app.ws_id, req->id);
		INC(app.ws_accepted);
	} else {
		respond_text(req, 500, "unexpected path\n");
	}
}

static void unpack(const pc_msg_t *msg, uint64_t *id, pc_http_server_t **srv)
{
	memcpy(id, pc_msg_cdata(msg), sizeof(*id));
	memcpy(srv, (const char *)pc_msg_cdata(msg) + sizeof(*id), sizeof(*srv));
}

static void on_flood(pc_ctx_t *ctx, pc_msg_t *msg)
{
	static char chunk[FLOOD_CHUNK];
	uint64_t id;
	pc_http_server_t *srv;
	unpack(msg, &id, &srv);
	int rc = pc_http_respond_write(srv, id, chunk, sizeof(chunk));
	uint64_t limit = ld(&app.flood_limit) ? ld(&app.flood_limit) : FLOOD_LIMIT;
	if (rc == 0 && ld(&app.flood_bytes) < limit) {
		add(&app.flood_bytes, sizeof(chunk));
		pc_msg_t *m = pc_msg_new(MSG_FLOOD, msg->size);
		memcpy(pc_msg_data(m), pc_msg_cdata(msg), msg->size);
		pc_send(pc_self(ctx), m);
		return;
	}
	STORE(app.flood_rc, rc);
	STORE(app.flood_done, 1);
}

static void on_ws_message(const pc_ws_message_msg_t *wm)
{
	INC(app.ws_msgs);
	CHECK(wm->data[wm->len] == 0, "ws data not NUL-terminated");
	if (wm->opcode == PC_WS_TEXT && wm->len == 5 && memcmp(wm->data, "close", 5) == 0) {
		CHECK(pc_ws_close(wm->server, wm->id, 4000, "bye") == 0, "ws close");
		return;
	}
	if (wm->opcode == PC_WS_TEXT && wm->len == 5 && memcmp(wm->data, "burst", 5) == 0) {
		/* Three messages and a close in one turn: they reach the I/O
		 * thread in one batch. */
		const char *words[] = {"one", "two", "three"};
		for (int i = 0; i < 3; i++)
			CHECK(pc_ws_send(wm->server, wm->id, PC_WS_TEXT, words[i], strlen(words[i])) == 0, "ws send");
		CHECK(pc_ws_close(wm->server, wm->id, 4000, "bye") == 0, "ws close");
		return;
	}
	int rc = pc_ws_send(wm->server, wm->id, wm->opcode, wm->data, wm->len);
	CHECK(rc == 0, "ws send: %d", rc);
}

static int app_receive(pc_ctx_t *ctx, void *state, pc_msg_t *msg)
{
	(void)state;
	switch (msg->type) {
	case PC_MSG_HTTP_REQUEST:
		on_request(ctx, pc_msg_cdata(msg));
		break;
	case PC_MSG_HTTP_GONE: {
		const pc_http_gone_msg_t *g = pc_msg_cdata(msg);
		STORE(app.gone_reason, g->reason);
		STORE(app.gone_id, g->id);
		INC(app.gone);
		break;
	}
	case PC_MSG_WS_CLOSED: {
		const pc_http_gone_msg_t *g = pc_msg_cdata(msg);
		STORE(app.closed_reason, g->reason);
		STORE(app.closed_code, (uint32_t)g->ws_code);
		STORE(app.closed_id, g->id);
		INC(app.closed);
		break;
	}
	case PC_MSG_WS_MESSAGE:
		on_ws_message(pc_msg_cdata(msg));
		break;
	case MSG_FLOOD:
		on_flood(ctx, msg);
		break;
	case MSG_DELAYED: {
		uint64_t id;
		pc_http_server_t *srv;
		unpack(msg, &id, &srv);
		CHECK(pc_http_respond(srv, id, 200, NULL, "delayed\n", 8) == 0, "delayed respond");
		break;
	}
	}
	return 0;
}

static const pc_behavior_t app_b = {.name = "http-app", .receive = app_receive};

/* ---- the server under test ---------------------------------------------------- */

static pc_runtime_t *rt;
static pc_io_t *io;
static pc_http_server_t *srv;
static pc_actor_t *app_actor;
static uint16_t port;

static bool origin_check(void *user, const char *origin, const pc_http_request_msg_t *req)
{
	(void)user;
	CHECK(req && req->path && strcmp(req->path, "/ws") == 0, "origin hook sees the request");
	return !origin || strcmp(origin, "http://evil.example") != 0;
}

static void start_server(const pc_http_server_limits_t *lim)
{
	memset(&app, 0, sizeof(app));
	reset_failures();
	rt = start_rt(4);
	pc_io_config_t ic = {.threads = 2};
	cr_assert_eq(pc_io_new(rt, &ic, &io), 0);
	pc_http_server_config_t cfg = {.host = "127.0.0.1", .origin_check = origin_check};
	if (lim)
		cfg.limits = *lim;
	cr_assert_eq(pc_http_server_new(io, &cfg, &srv), 0);
	cr_assert_eq(pc_spawn(rt, &app_b, NULL, &app_actor), 0);
	cr_assert_eq(pc_http_server_route(srv, NULL, "/echo", app_actor), 0);
	cr_assert_eq(pc_http_server_route(srv, "POST", "/post-only", app_actor), 0);
	cr_assert_eq(pc_http_server_route(srv, NULL, "/pre/*", app_actor), 0);
	const char *paths[] = {"/stream", "/big-stream", "/hold", "/hold-stream", "/delay", "/flood", "/ws"};
	for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++)
		cr_assert_eq(pc_http_server_route(srv, NULL, paths[i], app_actor), 0);
	cr_assert_eq(pc_http_server_start(srv), 0);
	cr_assert_eq(pc_http_server_route(srv, NULL, "/late", app_actor), PC_ESTATE);
	port = pc_http_server_port(srv);
	cr_assert_neq(port, 0);
}

static pc_io_stats_t iost(void)
{
	pc_io_stats_t s;
	pc_io_stats(io, &s);
	return s;
}

static void stop_server(void)
{
	pc_http_server_free(srv);
	srv = NULL;
	pc_io_free(io);
	io = NULL;
	pc_actor_release(app_actor);
	assert_no_failures();
	FREE_RUNTIME_CHECKED(rt);
}

/* ---- a blocking client --------------------------------------------------------- */

static void set_timeout(int fd, unsigned ms)
{
	struct timeval tv = {ms / 1000, (long)(ms % 1000) * 1000};
	cr_assert_eq(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
	cr_assert_eq(setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)), 0);
}

static int connect_rcvbuf(int rcvbuf)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	cr_assert_geq(fd, 0, "socket: %s", strerror(errno));
	if (rcvbuf)
		cr_assert_eq(setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf)), 0);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0, "connect: %s", strerror(errno));
	set_timeout(fd, IO_TIMEOUT_MS);
	return fd;
}

static int cconnect(void)
{
	return connect_rcvbuf(0);
}

static void send_all(int fd, const void *p, size_t n)
{
	const char *s = p;
	while (n) {
		ssize_t w = send(fd, s, n, MSG_NOSIGNAL);
		cr_assert_gt(w, 0, "send: %s", strerror(errno));
		s += w;
		n -= (size_t)w;
	}
}

static void send_str(int fd, const char *s)
{
	send_all(fd, s, strlen(s));
}

typedef struct rd {
	int fd;
	size_t off, len;
	char buf[16384];
} rd_t;

static void rd_init(rd_t *r, int fd)
{
	r->fd = fd;
	r->off = r->len = 0;
}

static int rd_fill(rd_t *r)
{
	if (r->off) {
		memmove(r->buf, r->buf + r->off, r->len - r->off);
		r->len -= r->off;
		r->off = 0;
	}
	if (r->len == sizeof(r->buf))
		return -1;
	ssize_t n = recv(r->fd, r->buf + r->len, sizeof(r->buf) - r->len, 0);
	if (n <= 0)
		return -1;
	r->len += (size_t)n;
	return 0;
}

/* A line without its CRLF; -1 on EOF or timeout. */
static int rd_line(rd_t *r, char *out, size_t cap)
{
	for (;;) {
		char *nl = memchr(r->buf + r->off, '\n', r->len - r->off);
		if (nl) {
			size_t n = (size_t)(nl - (r->buf + r->off));
			size_t m = n && nl[-1] == '\r' ? n - 1 : n;
			if (m >= cap)
				m = cap - 1;
			memcpy(out, r->buf + r->off, m);
			out[m] = 0;
			r->off += n + 1;
			return 0;
		}
		if (rd_fill(r) != 0)
			return -1;
	}
}

static int rd_n(rd_t *r, char *out, size_t n)
{
	while (n) {
		if (r->off == r->len && rd_fill(r) != 0)
			return -1;
		size_t k = r->len - r->off < n ? r->len - r->off : n;
		memcpy(out, r->buf + r->off, k);
		r->off += k;
		out += k;
		n -= k;
	}
	return 0;
}

typedef struct resp {
	int status;
	char headers[4096]; /* "name: value\n" lines */
	char *body;
	size_t body_len;
} resp_t;

static const char *resp_header(const resp_t *r, const char *name, char *val, size_t cap)
{
	size_t nl = strlen(name);
	for (const char *s = r->headers; *s;) {
		const char *e = strchr(s, '\n');
		if (strncasecmp(s, name, nl) == 0 && s[nl] == ':') {
			const char *v = s + nl + 1;
			while (*v == ' ')
				v++;
			size_t n = (size_t)(e - v) < cap - 1 ? (size_t)(e - v) : cap - 1;
			memcpy(val, v, n);
			val[n] = 0;
			return val;
		}
		s = e + 1;
	}
	return NULL;
}

static void body_add(resp_t *r, const char *p, size_t n)
{
	r->body = realloc(r->body, r->body_len + n + 1);
	cr_assert(r->body);
	memcpy(r->body + r->body_len, p, n);
	r->body_len += n;
	r->body[r->body_len] = 0;
}

/* One response; `head` says the request was HEAD (no body). 0 or -1. */
static int read_resp_ex(rd_t *r, resp_t *out, bool head)
{
	char line[8192], v[64];
	memset(out, 0, sizeof(*out));
	if (rd_line(r, line, sizeof(line)) != 0 || sscanf(line, "HTTP/1.%*d %d", &out->status) != 1)
		return -1;
	size_t hl = 0;
	for (;;) {
		if (rd_line(r, line, sizeof(line)) != 0)
			return -1;
		if (!line[0])
			break;
		hl += (size_t)snprintf(out->headers + hl, sizeof(out->headers) - hl, "%s\n", line);
	}
	body_add(out, "", 0);
	if (head || out->status < 200 || out->status == 204 || out->status == 304 || out->status == 101)
		return 0;
	if (resp_header(out, "content-length", v, sizeof(v))) {
		size_t n = strtoull(v, NULL, 10);
		char *b = malloc(n + 1);
		cr_assert(b);
		int rc = rd_n(r, b, n);
		body_add(out, b, rc == 0 ? n : 0);
		free(b);
		return rc;
	}
	if (resp_header(out, "transfer-encoding", v, sizeof(v))) {
		for (;;) {
			if (rd_line(r, line, sizeof(line)) != 0)
				return -1;
			size_t n = strtoull(line, NULL, 16);
			if (n == 0) {
				do {
					if (rd_line(r, line, sizeof(line)) != 0)
						return -1;
				} while (line[0]);
				return 0;
			}
			char *b = malloc(n + 2);
			cr_assert(b);
			int rc = rd_n(r, b, n + 2);
			if (rc == 0)
				body_add(out, b, n);
			free(b);
			if (rc != 0)
				return -1;
		}
	}
	/* Close-delimited. */
	for (;;) {
		if (r->off < r->len) {
			body_add(out, r->buf + r->off, r->len - r->off);
			r->off = r->len;
		}
		if (rd_fill(r) != 0)
			return 0;
	}
}

static int read_resp(rd_t *r, resp_t *out)
{
	return read_resp_ex(r, out, false);
}

static void resp_free(resp_t *r)
{
	free(r->body);
	r->body = NULL;
}

/* True when the server closes the connection within `ms` (input is
 * drained and dropped meanwhile). */
static bool closed_within(int fd, unsigned ms)
{
	set_timeout(fd, ms);
	char buf[4096];
	uint64_t until = now_ms() + ms;
	for (;;) {
		ssize_t n = recv(fd, buf, sizeof(buf), 0);
		if (n == 0 || (n < 0 && errno == ECONNRESET))
			return true;
		if (n < 0 || now_ms() >= until)
			return false;
	}
}

/* Sends one request and reads its response on a fresh connection. */
static void roundtrip(const char *req, resp_t *out)
{
	int fd = cconnect();
	rd_t *r = malloc(sizeof(*r));
	cr_assert(r);
	rd_init(r, fd);
	send_str(fd, req);
	cr_assert_eq(read_resp(r, out), 0, "no response to %s", req);
	free(r);
	close(fd);
}

/* ---- HTTP ---------------------------------------------------------------------------- */

Test(http_server, get_post_and_404)
{
	start_server(NULL);
	resp_t r;
	char v[64];
	roundtrip("GET /echo?x=1&y=2 HTTP/1.1\r\nHost: t\r\nX-Foo:  bar baz  \r\nConnection: close\r\n\r\n", &r);
	cr_assert_eq(r.status, 200);
	cr_assert_str_eq(r.body, "GET /echo q=x=1&y=2 foo=bar baz len=0\n");
	cr_assert_str_eq(resp_header(&r, "x-test", v, sizeof(v)), "yes");
	cr_assert_str_eq(resp_header(&r, "connection", v, sizeof(v)), "close");
	resp_free(&r);

	roundtrip("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 11\r\n\r\nhello world", &r);
	cr_assert_eq(r.status, 200);
	cr_assert_str_eq(r.body, "POST /echo q= foo=- len=11\nhello world");
	resp_free(&r);

	/* Routes: prefix match, a method-restricted route, unrouted. */
	roundtrip("GET /pre/a/b HTTP/1.1\r\nHost: t\r\n\r\n", &r);
	cr_assert_eq(r.status, 200);
	cr_assert_str_eq(r.body, "GET /pre/a/b q= foo=- len=0\n");
	resp_free(&r);
	roundtrip("GET /post-only HTTP/1.1\r\nHost: t\r\n\r\n", &r);
	cr_assert_eq(r.status, 404);
	resp_free(&r);
	roundtrip("POST /post-only HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n", &r);
	cr_assert_eq(r.status, 200);
	resp_free(&r);
	roundtrip("GET /nowhere HTTP/1.1\r\nHost: t\r\n\r\n", &r);
	cr_assert_eq(r.status, 404);
	resp_free(&r);
	roundtrip("GET /pre HTTP/1.1\r\nHost: t\r\n\r\n", &r);
	cr_assert_eq(r.status, 404, "a prefix route needs its '/'");
	resp_free(&r);

	/* HEAD: the headers of a GET, no body. */
	int fd = cconnect();
	rd_t rd;
	rd_init(&rd, fd);
	send_str(fd, "HEAD /echo HTTP/1.1\r\nHost: t\r\n\r\nGET /echo?again HTTP/1.1\r\nHost: t\r\n\r\n");
	cr_assert_eq(read_resp_ex(&rd, &r, true), 0);
	cr_assert_eq(r.status, 200);
	cr_assert_str_eq(resp_header(&r, "content-length", v, sizeof(v)), "26");
	resp_free(&r);
	cr_assert_eq(read_resp(&rd, &r), 0, "the next response follows at once: no body was sent");
	cr_assert_str_eq(r.body, "GET /echo q=again foo=- len=0\n");
	resp_free(&r);
	close(fd);
	AWAIT(iost().connections_live == 0, 2000);
	cr_assert_eq(LOAD(app.gone), 0);
	cr_assert_eq(pc_http_server_start(srv), PC_ESTATE);
	cr_assert_eq(pc_http_server_route(NULL, NULL, "/x", app_actor), PC_EINVAL);
	pc_http_server_t *other = NULL;
	pc_http_server_config_t bad = {.host = "not-an-address"};
	cr_assert_eq(pc_http_server_new(io, &bad, &other), PC_EINVAL);
	/* A fixed port that is taken fails, rather than being shared. */
	pc_http_server_config_t taken = {.port = port};
	cr_assert_eq(pc_http_server_new(io, &taken, &other), PC_ESYS);
	cr_assert_null(other);
	stop_server();
}

Test(http_server, chunked_request_and_expect_continue)
{
	start_server(NULL);
	resp_t r;
	roundtrip("POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
		  "5\r\nhello\r\n1;ext=1\r\n \r\n6\r\nworld!\r\n0\r\nX-Trailer: t\r\n\r\n",
		  &r);
	cr_assert_eq(r.status, 200);
	cr_assert_str_eq(r.body, "POST /echo q= foo=- len=12\nhello world!");
	resp_free(&r);

	/* Expect: 100-continue gets its interim answer before the body is sent. */
	int fd = cconnect();
	rd_t rd;
	rd_init(&rd, fd);
	send_str(fd, "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n");
	cr_assert_eq(read_resp(&rd, &r), 0);
	cr_assert_eq(r.status, 100);
	resp_free(&r);
	send_str(fd, "abcd");
	cr_assert_eq(read_resp(&rd, &r), 0);
	cr_assert_eq(r.status, 200);
	cr_assert_str_eq(r.body, "POST /echo q= foo=- len=4\nabcd");
	resp_free(&r);
	close(fd);
	stop_server();
}

Test(http_server, keep_alive_and_pipelining)
{
	start_server(NULL);
	int fd = cconnect();
	rd_t rd;
	rd_init(&rd, fd);
	resp_t r;
	char want[64], v[64];
	for (int i = 0; i < 5; i++) {
		char req[128];
		snprintf(req, sizeof(req), "GET /echo?n=%d HTTP/1.1\r\nHost: t\r\n\r\n", i);
		send_str(fd, req);
		cr_assert_eq(read_resp(&rd, &r), 0);
		snprintf(want, sizeof(want), "GET /echo q=n=%d foo=- len=0\n", i);
		cr_assert_str_eq(r.body, want);
		cr_assert_str_eq(resp_header(&r, "connection", v, sizeof(v)), "keep-alive");
		resp_free(&r);
	}
	cr_assert_eq(iost().connections_accepted, 1, "one connection served them all");

	/* Pipelined: the first answer is late, yet answers come in order, and
	 * the second request is not even handed out before the first is done. */
	send_str(fd, "GET /delay HTTP/1.1\r\nHost: t\r\n\r\n"
		     "GET /echo?n=a HTTP/1.1\r\nHost: t\r\n\r\n"
		     "POST /echo?n=b HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\nxyz"
		     "GET /echo?n=c HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
	AWAIT(LOAD(app.requests) == 6, 2000);
	sleep_ms(50);
	cr_assert_eq(LOAD(app.requests), 6, "a pipelined request was dispatched early");
	cr_assert_eq(read_resp(&rd, &r), 0);
	cr_assert_str_eq(r.body, "delayed\n");
	resp_free(&r);
	cr_assert_eq(read_resp(&rd, &r), 0);
	cr_assert_str_eq(r.body, "GET /echo q=n=a foo=- len=0\n");
	resp_free(&r);
	cr_assert_eq(read_resp(&rd, &r), 0);
	cr_assert_str_eq(r.body, "POST /echo q=n=b foo=- len=3\nxyz");
	resp_free(&r);
	cr_assert_eq(read_resp(&rd, &r), 0);
	cr_assert_str_eq(r.body, "GET /echo q=n=c foo=- len=0\n");
	cr_assert_str_eq(resp_header(&r, "connection", v, sizeof(v)), "close");
	resp_free(&r);
	cr_assert(closed_within(fd, 2000), "Connection: close was not honoured");
	close(fd);
	stop_server();
}

Test(http_server, streamed_responses)
{
	start_server(NULL);
	resp_t r;
	char v[64];
	roundtrip("GET /stream HTTP/1.1\r\nHost: t\r\n\r\n", &r);
	cr_assert_eq(r.status, 200);
	cr_assert_str_eq(resp_header(&r, "transfer-encoding", v, sizeof(v)), "chunked");
	cr_assert_str_eq(r.body, "part-0\npart-1\npart-2\npart-3\npart-4\n");
	resp_free(&r);

	/* HTTP/1.0 has no chunks: the body ends with the connection. */
	int fd = cconnect();
	rd_t rd;
	rd_init(&rd, fd);
	send_str(fd, "GET /stream HTTP/1.0\r\n\r\n");
	cr_assert_eq(read_resp(&rd, &r), 0);
	cr_assert_null(resp_header(&r, "transfer-encoding", v, sizeof(v)));
	cr_assert_str_eq(r.body, "part-0\npart-1\npart-2\npart-3\npart-4\n");
	resp_free(&r);
	close(fd);

	/* HTTP/1.0 keep-alive, by request. */
	fd = cconnect();
	rd_init(&rd, fd);
	send_str(fd, "GET /echo HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET /echo?2 HTTP/1.0\r\n\r\n");
	cr_assert_eq(read_resp(&rd, &r), 0);
	cr_assert_str_eq(resp_header(&r, "connection", v, sizeof(v)), "keep-alive");
	resp_free(&r);
	cr_assert_eq(read_resp(&rd, &r), 0);
	cr_assert_str_eq(r.body, "GET /echo q=2 foo=- len=0\n");
	resp_free(&r);
	cr_assert(closed_within(fd, 2000));
	close(fd);
	stop_server();
}

static void check_big_body(const char *body)
{
	cr_assert_eq(strlen(body), (size_t)BIG_LINES * BIG_LINE);
	for (int i = 0; i < BIG_LINES; i++) {
		char want[8];
		snprintf(want, sizeof(want), "%06d", i);
		cr_assert(memcmp(body + (size_t)i * BIG_LINE, want, 6) == 0, "line %d out of place", i);
	}
}

/* Answers posted together leave together, held back to the end of the
 * I/O thread's batch up to a bound: however large, they arrive whole and
 * in order, on a kept-alive connection (the next request is served), and
 * on one that closes after the answer (HTTP/1.0: the body ends with it). */
Test(http_server, streamed_answers_of_any_size_arrive_whole_and_in_order)
{
	start_server(NULL);
	int fd = cconnect();
	rd_t rd;
	rd_init(&rd, fd);
	resp_t r;
	send_str(fd, "GET /big-stream HTTP/1.1\r\nHost: t\r\n\r\nGET /stream HTTP/1.1\r\nHost: t\r\n\r\n");
	cr_assert_eq(read_resp(&rd, &r), 0);
	cr_assert_eq(r.status, 200);
	check_big_body(r.body);
	resp_free(&r);
	cr_assert_eq(read_resp(&rd, &r), 0);
	cr_assert_str_eq(r.body, "part-0\npart-1\npart-2\npart-3\npart-4\n");
	resp_free(&r);
	close(fd);

	fd = cconnect();
	rd_init(&rd, fd);
	send_str(fd, "GET /big-stream HTTP/1.0\r\n\r\n");
	cr_assert_eq(read_resp(&rd, &r), 0);
	check_big_body(r.body);
	resp_free(&r);
	cr_assert(closed_within(fd, 2000));
	close(fd);
	cr_assert_eq(iost().output_queued, 0);
	stop_server();
}

Test(http_server, malformed_requests_get_400_and_close)
{
	start_server(NULL);
	const char *bad[] = {
		"GARBAGE\r\n\r\n",
		"GET / HTTP/1.1\r\nBad Header Line\r\n\r\n",
		"GET / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 7\r\n\r\n",
		"POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
		"GET / HTTP/1.1\r\nX: a\0b\r\n\r\n",
		"POST /echo HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
		"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n", /* a broken HTTP/2 preface */
		"GET /echo HTTP/0.9\r\n\r\n",
	};
	size_t lens[] = {0, 0, 0, 0, 27, 0, 0, 0};
	int want[] = {400, 400, 400, 400, 400, 400, 400, 505};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int fd = cconnect();
		rd_t rd;
		rd_init(&rd, fd);
		send_all(fd, bad[i], lens[i] ? lens[i] : strlen(bad[i]));
		resp_t r;
		cr_assert_eq(read_resp(&rd, &r), 0, "case %zu", i);
		cr_assert_eq(r.status, want[i], "case %zu: %d", i, r.status);
		resp_free(&r);
		cr_assert(closed_within(fd, 3000), "case %zu: not closed", i);
		close(fd);
	}
	cr_assert_eq(LOAD(app.requests), 0);
	AWAIT(iost().connections_live == 0, 3000);
	stop_server();
}

Test(http_server, header_and_body_limits)
{
	pc_http_server_limits_t lim = {.max_header_bytes = 1024, .max_body_bytes = 100};
	start_server(&lim);
	char big[2048];
	memset(big, 'a', sizeof(big));
	big[sizeof(big) - 1] = 0;
	char req[4096];
	resp_t r;

	/* One long header, many small ones, and a long target. */
	snprintf(req, sizeof(req), "GET /echo HTTP/1.1\r\nX-Big: %s\r\n\r\n", big);
	roundtrip(req, &r);
	cr_assert_eq(r.status, 431);
	resp_free(&r);
	size_t n = (size_t)snprintf(req, sizeof(req), "GET /echo HTTP/1.1\r\n");
	for (int i = 0; i < 200; i++)
		n += (size_t)snprintf(req + n, sizeof(req) - n, "X%d: y\r\n", i);
	snprintf(req + n, sizeof(req) - n, "\r\n");
	roundtrip(req, &r);
	cr_assert_eq(r.status, 431);
	resp_free(&r);
	snprintf(req, sizeof(req), "GET /echo?%s HTTP/1.1\r\n\r\n", big);
	roundtrip(req, &r);
	cr_assert_eq(r.status, 431);
	resp_free(&r);
	/* Padding the parser hands to no callback counts as well. */
	snprintf(req, sizeof(req), "GET /echo HTTP/1.1\r\nX-Pad:%*s\r\n\r\n", 1500, "v");
	roundtrip(req, &r);
	cr_assert_eq(r.status, 431);
	resp_free(&r);
	/* Just under the limit passes. */
	snprintf(req, sizeof(req), "GET /echo HTTP/1.1\r\nX-Big: %.900s\r\n\r\n", big);
	roundtrip(req, &r);
	cr_assert_eq(r.status, 200);
	resp_free(&r);

	/* Bodies: declared too long (refused before it is sent), chunked too long. */
	roundtrip("POST /echo HTTP/1.1\r\nContent-Length: 101\r\n\r\n", &r);
	cr_assert_eq(r.status, 413);
	resp_free(&r);
	n = (size_t)snprintf(req, sizeof(req), "POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n");
	for (int i = 0; i < 6; i++)
		n += (size_t)snprintf(req + n, sizeof(req) - n, "14\r\n%.20s\r\n", big);
	roundtrip(req, &r);
	cr_assert_eq(r.status, 413);
	resp_free(&r);
	snprintf(req, sizeof(req), "POST /echo HTTP/1.1\r\nContent-Length: 100\r\n\r\n%.100s", big);
	roundtrip(req, &r);
	cr_assert_eq(r.status, 200);
	resp_free(&r);

	/* Refused while the body is still arriving: a client that goes on
	 * sending is drained after the answer, not reset (which could cost
	 * it the answer). */
	int fd = cconnect();
	rd_t rd;
	rd_init(&rd, fd);
	char body[30000];
	memset(body, 'b', sizeof(body));
	send_str(fd, "POST /echo HTTP/1.1\r\nContent-Length: 300000\r\n\r\n");
	cr_assert_eq(read_resp(&rd, &r), 0);
	cr_assert_eq(r.status, 413);
	resp_free(&r);
	for (int i = 0; i < 10; i++) {
		cr_assert_eq(send(fd, body, sizeof(body), MSG_NOSIGNAL), (ssize_t)sizeof(body),
			     "send %d after the answer: %s", i, strerror(errno));
		sleep_ms(5);
	}
	cr_assert(closed_within(fd, 3000));
	close(fd);

	cr_assert_eq(LOAD(app.requests), 2, "only the requests within limits reach the actor");
	AWAIT(iost().connections_live == 0, 3000);
	cr_assert_eq(iost().connections_dropped, 7);
	stop_server();
}

Test(http_server, slowloris_and_body_timeouts)
{
	pc_http_server_limits_t lim = {.header_timeout_ms = 200, .body_timeout_ms = 200};
	start_server(&lim);
	/* A head trickled a line every 50 ms never completes. */
	int fd = cconnect();
	rd_t rd;
	rd_init(&rd, fd);
	uint64_t t0 = now_ms();
	send_str(fd, "GET /echo HTTP/1.1\r\n");
	bool answered = false;
	for (int i = 0; i < 40 && !answered; i++) {
		sleep_ms(50);
		struct pollfd pf = {fd, POLLIN, 0};
		if (poll(&pf, 1, 0) == 1)
			answered = true;
		else if (send(fd, "X-Drip: 1\r\n", 11, MSG_NOSIGNAL) < 0)
			answered = true;
	}
	uint64_t took = now_ms() - t0;
	cr_assert(answered, "the trickling head was never cut off");
	cr_assert_geq(took, 150);
	cr_assert_lt(took, 1500, "cut off after %llu ms", (unsigned long long)took);
	resp_t r;
	cr_assert_eq(read_resp(&rd, &r), 0);
	cr_assert_eq(r.status, 408);
	resp_free(&r);
	cr_assert(closed_within(fd, 3000));
	close(fd);

	/* The same on a kept-alive connection's second request. */
	fd = cconnect();
	rd_init(&rd, fd);
	send_str(fd, "GET /echo HTTP/1.1\r\n\r\n");
	cr_assert_eq(read_resp(&rd, &r), 0);
	cr_assert_eq(r.status, 200);
	resp_free(&r);
	send_str(fd, "GET /echo HTTP/1.1\r\n");
	t0 = now_ms();
	answered = false;
	for (int i = 0; i < 40 && !answered; i++) {
		sleep_ms(50);
		struct pollfd pf = {fd, POLLIN, 0};
		if (poll(&pf, 1, 0) == 1)
			answered = true;
		else if (send(fd, "X-Drip: 1\r\n", 11, MSG_NOSIGNAL) < 0)
			answered = true;
	}
	cr_assert(answered, "the second trickling head was never cut off");
	cr_assert_lt(now_ms() - t0, 1500);
	cr_assert_eq(read_resp(&rd, &r), 0);
	cr_assert_eq(r.status, 408);
	resp_free(&r);
	cr_assert(closed_within(fd, 3000));
	close(fd);

	/* A body that stops halfway. */
	fd = cconnect();
	rd_init(&rd, fd);
	send_str(fd, "POST /echo HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc");
	cr_assert_eq(read_resp(&rd, &r), 0);
	cr_assert_eq(r.status, 408);
	resp_free(&r);
	cr_assert(closed_within(fd, 3000));
	close(fd);

	/* A connection that never says anything is closed without a word. */
	fd = cconnect();
	cr_assert(closed_within(fd, 3000));
	close(fd);

	cr_assert_eq(LOAD(app.requests), 1);
	AWAIT(iost().connections_live == 0, 3000);
	cr_assert_eq(iost().connections_dropped, 4);
	stop_server();
}

Test(http_server, idle_keep_alive_timeout)
{
	pc_http_server_limits_t lim = {.idle_timeout_ms = 200};
	start_server(&lim);
	int fd = cconnect();
	rd_t rd;
	rd_init(&rd, fd);
	send_str(fd, "GET /echo HTTP/1.1\r\nHost: t\r\n\r\n");
	resp_t r;
	cr_assert_eq(read_resp(&rd, &r), 0);
	cr_assert_eq(r.status, 200);
	resp_free(&r);
	uint64_t t0 = now_ms();
	cr_assert(closed_within(fd, 3000), "an idle keep-alive connection stayed open");
	uint64_t took = now_ms() - t0;
	cr_assert_geq(took, 150);
	cr_assert_lt(took, 1500);
	close(fd);
	AWAIT(iost().connections_live == 0, 2000);
	cr_assert_eq(iost().connections_dropped, 0, "an idle close after service is not a drop");
	stop_server();
}

Test(http_server, reader_that_never_reads_is_dropped)
{
	pc_http_server_limits_t lim = {.max_output_bytes = 256 << 10};
	start_server(&lim);
	int fd = connect_rcvbuf(16384);
	send_str(fd, "GET /flood HTTP/1.1\r\nHost: t\r\n\r\n");
	AWAIT(LOAD(app.flood_done), 20000);
	cr_assert_eq(LOAD(app.flood_rc), PC_ENOTFOUND, "writes after the drop: %d", LOAD(app.flood_rc));
	/* Kernel buffers take a few MB; the server holds at most the cap. */
	cr_assert_lt(ld(&app.flood_bytes), 64u << 20, "%llu bytes accepted",
		     (unsigned long long)ld(&app.flood_bytes));
	AWAIT(LOAD(app.gone) == 1, 2000);
	cr_assert_eq(LOAD(app.gone_reason), PC_ELIMIT);
	cr_assert_eq(iost().connections_dropped, 1);
	cr_assert_eq(iost().connections_live, 0);
	close(fd);
	stop_server();
}

Test(http_server, stalled_output_times_out)
{
	/* Under the cap, but the client reads nothing: the stall timer ends it. */
	pc_http_server_limits_t lim = {.max_output_bytes = 64u << 20, .idle_timeout_ms = 300};
	start_server(&lim);
	STORE(app.flood_limit, 16u << 20);
	int fd = connect_rcvbuf(16384);
	send_str(fd, "GET /flood HTTP/1.1\r\nHost: t\r\n\r\n");
	/* A slow producer (a sanitizer build) may be cut off mid-way: the
	 * output stalls either way. */
	AWAIT(LOAD(app.flood_done), 20000);
	int rc = LOAD(app.flood_rc);
	cr_assert(rc == 0 || rc == PC_ENOTFOUND, "flood: %d", rc);
	AWAIT(LOAD(app.gone) == 1, 5000);
	cr_assert_eq(LOAD(app.gone_reason), PC_ETIMEDOUT, "not the stall: %d", LOAD(app.gone_reason));
	cr_assert_eq(iost().connections_dropped, 1);
	close(fd);
	stop_server();
}

Test(http_server, vanishing_clients)
{
	start_server(NULL);
	/* Mid-request: the body never finishes; no actor is involved. */
	int fd = cconnect();
	send_str(fd, "POST /echo HTTP/1.1\r\nContent-Length: 100\r\n\r\nhalf");
	sleep_ms(50);
	close(fd);
	AWAIT(iost().connections_live == 0, 2000);
	cr_assert_eq(LOAD(app.requests), 0);

	/* Waiting for its answer. */
	fd = cconnect();
	send_str(fd, "GET /hold HTTP/1.1\r\nHost: t\r\n\r\n");
	AWAIT(LOAD(app.held) == 1, 2000);
	uint64_t id = ld(&app.held_id);
	close(fd);
	AWAIT(LOAD(app.gone) == 1, 2000);
	cr_assert_eq(LOAD(app.gone_reason), 0);
	cr_assert_eq(ld(&app.gone_id), id);
	cr_assert_eq(pc_http_respond(srv, id, 200, NULL, "late", 4), PC_ENOTFOUND);

	/* Mid-response: the head has been read, the body is unfinished. */
	fd = cconnect();
	rd_t rd;
	rd_init(&rd, fd);
	send_str(fd, "GET /hold-stream HTTP/1.1\r\nHost: t\r\n\r\n");
	char line[256];
	cr_assert_eq(rd_line(&rd, line, sizeof(line)), 0);
	cr_assert_str_eq(line, "HTTP/1.1 200 OK");
	AWAIT(LOAD(app.held) == 2, 2000);
	id = ld(&app.held_id);
	cr_assert_eq(pc_http_respond_write(srv, id, "more", 4), 0);
	close(fd);
	AWAIT(LOAD(app.gone) == 2, 2000);
	cr_assert_eq(ld(&app.gone_id), id);
	cr_assert_eq(pc_http_respond_write(srv, id, "more", 4), PC_ENOTFOUND);
	cr_assert_eq(pc_http_respond_end(srv, id), PC_ENOTFOUND);

	/* pc_http_abort: the connection goes, and the asker gets no GONE. */
	fd = cconnect();
	send_str(fd, "GET /hold HTTP/1.1\r\nHost: t\r\n\r\n");
	AWAIT(LOAD(app.held) == 3, 2000);
	cr_assert_eq(pc_http_abort(srv, ld(&app.held_id)), 0);
	cr_assert(closed_within(fd, 2000));
	close(fd);
	AWAIT(iost().connections_live == 0, 2000);
	sleep_ms(50);
	cr_assert_eq(LOAD(app.gone), 2);
	cr_assert_eq(pc_http_respond(srv, 12345, 200, NULL, NULL, 0), PC_ENOTFOUND);
	cr_assert_eq(pc_http_respond(srv, UINT64_MAX, 200, NULL, NULL, 0), PC_ENOTFOUND);
	cr_assert_eq(pc_http_respond(srv, 1, 99, NULL, NULL, 0), PC_EINVAL);
	cr_assert_eq(pc_http_respond(srv, 1, 200, "No-CRLF", NULL, 0), PC_EINVAL);
	cr_assert_eq(pc_http_respond(srv, 1, 200, "A: b\r\n\r\nInjected: x\r\n", NULL, 0), PC_EINVAL);
	stop_server();
}

Test(http_server, connection_cap_answers_503)
{
	pc_http_server_limits_t lim = {.max_connections = 2};
	start_server(&lim);
	int a = cconnect(), b = cconnect();
	rd_t ra, rb;
	rd_init(&ra, a);
	rd_init(&rb, b);
	resp_t r;
	send_str(a, "GET /echo HTTP/1.1\r\n\r\n");
	send_str(b, "GET /echo HTTP/1.1\r\n\r\n");
	cr_assert_eq(read_resp(&ra, &r), 0);
	resp_free(&r);
	cr_assert_eq(read_resp(&rb, &r), 0);
	resp_free(&r);
	int c = cconnect();
	rd_t rc;
	rd_init(&rc, c);
	cr_assert_eq(read_resp(&rc, &r), 0);
	cr_assert_eq(r.status, 503);
	resp_free(&r);
	cr_assert(closed_within(c, 2000));
	close(c);
	close(a);
	AWAIT(iost().connections_live == 1, 2000);
	c = cconnect();
	rd_init(&rc, c);
	send_str(c, "GET /echo HTTP/1.1\r\n\r\n");
	cr_assert_eq(read_resp(&rc, &r), 0);
	cr_assert_eq(r.status, 200, "a slot freed up");
	resp_free(&r);
	close(b);
	close(c);
	stop_server();
}

/* ---- WebSocket ------------------------------------------------------------------------ */

static const char ws_key[] = "dGhlIHNhbXBsZSBub25jZQ=="; /* RFC 6455's sample */

static void ws_frame(int fd, bool fin, int op, const void *data, size_t len)
{
	uint8_t h[14];
	size_t n = 0;
	h[n++] = (uint8_t)((fin ? 0x80 : 0) | op);
	if (len < 126) {
		h[n++] = (uint8_t)(0x80 | len);
	} else if (len < 65536) {
		h[n++] = 0x80 | 126;
		h[n++] = (uint8_t)(len >> 8);
		h[n++] = (uint8_t)len;
	} else {
		h[n++] = 0x80 | 127;
		for (int i = 7; i >= 0; i--)
			h[n++] = (uint8_t)((uint64_t)len >> (8 * i));
	}
	static const uint8_t mask[4] = {0x12, 0x34, 0x56, 0x78};
	memcpy(h + n, mask, 4);
	n += 4;
	uint8_t *p = malloc(n + len + 1);
	cr_assert(p);
	memcpy(p, h, n);
	for (size_t i = 0; i < len; i++)
		p[n + i] = ((const uint8_t *)data)[i] ^ mask[i & 3];
	send_all(fd, p, n + len);
	free(p);
}

/* One unfragmented server frame; -1 on EOF or timeout. */
static int ws_read(rd_t *r, int *op, char **data, size_t *len)
{
	uint8_t h[2];
	if (rd_n(r, (char *)h, 2) != 0)
		return -1;
	cr_assert(h[0] & 0x80, "server frames are unfragmented");
	cr_assert_eq(h[1] & 0x80, 0, "server frames are not masked");
	*op = h[0] & 0x0f;
	uint64_t n = h[1] & 0x7f;
	uint8_t ext[8];
	if (n == 126) {
		if (rd_n(r, (char *)ext, 2) != 0)
			return -1;
		n = (uint64_t)ext[0] << 8 | ext[1];
	} else if (n == 127) {
		if (rd_n(r, (char *)ext, 8) != 0)
			return -1;
		n = 0;
		for (int i = 0; i < 8; i++)
			n = n << 8 | ext[i];
	}
	*data = malloc(n + 1);
	cr_assert(*data);
	(*data)[n] = 0;
	*len = n;
	return rd_n(r, *data, n);
}

static uint16_t close_code(const char *p, size_t len)
{
	return len >= 2 ? (uint16_t)((uint8_t)p[0] << 8 | (uint8_t)p[1]) : 0;
}

/* Upgrades a fresh connection on /ws. */
static int ws_open(rd_t *rd, const char *extra)
{
	int fd = cconnect();
	rd_init(rd, fd);
	char req[1024];
	snprintf(req, sizeof(req),
		 "GET /ws HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\nConnection: keep-alive, Upgrade\r\n"
		 "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n%s\r\n",
		 ws_key, extra ? extra : "");
	send_str(fd, req);
	resp_t r;
	char v[64];
	cr_assert_eq(read_resp(rd, &r), 0);
	cr_assert_eq(r.status, 101);
	cr_assert_str_eq(resp_header(&r, "sec-websocket-accept", v, sizeof(v)), "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
	cr_assert_str_eq(resp_header(&r, "upgrade", v, sizeof(v)), "websocket");
	resp_free(&r);
	return fd;
}

static void expect_frame(rd_t *rd, int want_op, const char *want, size_t want_len)
{
	int op;
	char *data;
	size_t len;
	cr_assert_eq(ws_read(rd, &op, &data, &len), 0, "no frame");
	cr_assert_eq(op, want_op, "opcode %d, wanted %d", op, want_op);
	cr_assert_eq(len, want_len, "length %zu, wanted %zu", len, want_len);
	cr_assert_eq(memcmp(data, want, len), 0);
	free(data);
}

static void expect_close(rd_t *rd, uint16_t code)
{
	int op;
	char *data;
	size_t len;
	cr_assert_eq(ws_read(rd, &op, &data, &len), 0, "no close frame");
	cr_assert_eq(op, 8, "opcode %d, wanted close", op);
	cr_assert_eq(close_code(data, len), code, "close code %u, wanted %u", close_code(data, len), code);
	free(data);
}

/* CLOSED came once, and a second one does not follow. */
static void expect_closed_once(uint32_t n, uint16_t code, int reason)
{
	AWAIT(LOAD(app.closed) == n, 3000);
	sleep_ms(100);
	cr_assert_eq(LOAD(app.closed), n, "CLOSED more than once");
	cr_assert_eq(LOAD(app.closed_code), code, "code %u", LOAD(app.closed_code));
	cr_assert_eq(LOAD(app.closed_reason), reason, "reason %d", LOAD(app.closed_reason));
}

/* Messages an actor posts together leave together, and a close posted
 * after them follows them: it never overtakes one. */
Test(websocket, messages_posted_with_a_close_arrive_before_it)
{
	start_server(NULL);
	rd_t rd;
	int fd = ws_open(&rd, "Origin: http://good.example\r\n");
	ws_frame(fd, true, 1, "burst", 5);
	expect_frame(&rd, 1, "one", 3);
	expect_frame(&rd, 1, "two", 3);
	expect_frame(&rd, 1, "three", 5);
	expect_close(&rd, 4000);
	close(fd);
	stop_server();
}

Test(websocket, echo_fragments_ping_and_close)
{
	start_server(NULL);
	rd_t rd;
	int fd = ws_open(&rd, "Origin: http://good.example\r\n");
	ws_frame(fd, true, 1, "hello", 5);
	expect_frame(&rd, 1, "hello", 5);
	ws_frame(fd, true, 2, "\0\1\2", 3);
	expect_frame(&rd, 2, "\0\1\2", 3);
	ws_frame(fd, true, 1, "", 0);
	expect_frame(&rd, 1, "", 0);

	/* Fragments with a ping between them: the pong comes first. */
	ws_frame(fd, false, 1, "foo", 3);
	ws_frame(fd, false, 0, "bar", 3);
	ws_frame(fd, true, 9, "p", 1);
	ws_frame(fd, true, 0, "baz", 3);
	expect_frame(&rd, 10, "p", 1);
	expect_frame(&rd, 1, "foobarbaz", 9);

	/* 16- and 64-bit lengths. */
	size_t big = 100000;
	char *buf = malloc(big);
	cr_assert(buf);
	for (size_t i = 0; i < big; i++)
		buf[i] = (char)(i * 7);
	ws_frame(fd, true, 2, buf, 300);
	expect_frame(&rd, 2, buf, 300);
	ws_frame(fd, true, 2, buf, big);
	expect_frame(&rd, 2, buf, big);
	free(buf);
	cr_assert_eq(LOAD(app.ws_msgs), 6);

	/* The client closes: the server answers with the same code, then
	 * closes the TCP connection itself. */
	ws_frame(fd, true, 8, "\x03\xe8" "done", 6);
	expect_close(&rd, 1000);
	cr_assert(closed_within(fd, 2000));
	close(fd);
	expect_closed_once(1, 1000, 0);
	cr_assert_eq(ld(&app.closed_id), ld(&app.ws_id));
	cr_assert_eq(pc_ws_send(srv, ld(&app.ws_id), PC_WS_TEXT, "x", 1), PC_ENOTFOUND);
	AWAIT(iost().connections_live == 0, 2000);
	cr_assert_eq(LOAD(app.gone), 0, "an upgraded request is not GONE");
	stop_server();
}

Test(websocket, subprotocol_and_invalid_text)
{
	start_server(NULL);
	rd_t rd;
	int fd = cconnect();
	rd_init(&rd, fd);
	char req[512];
	snprintf(req, sizeof(req),
		 "GET /ws HTTP/1.1\r\nHost: t\r\nUpgrade: WebSocket\r\nConnection: Upgrade\r\n"
		 "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: chat, superchat\r\n\r\n",
		 ws_key);
	send_str(fd, req);
	/* A frame sent before the 101 arrives is kept for after the upgrade. */
	ws_frame(fd, true, 1, "early", 5);
	resp_t r;
	char v[64];
	cr_assert_eq(read_resp(&rd, &r), 0);
	cr_assert_eq(r.status, 101);
	cr_assert_str_eq(resp_header(&r, "sec-websocket-protocol", v, sizeof(v)), "chat");
	resp_free(&r);
	expect_frame(&rd, 1, "early", 5);
	/* Text that is not UTF-8 is a protocol error (1007). */
	ws_frame(fd, true, 1, "\xff\xfe", 2);
	expect_close(&rd, 1007);
	cr_assert(closed_within(fd, 3000));
	close(fd);
	expect_closed_once(1, 1007, 0);
	stop_server();
}

Test(websocket, bad_handshakes)
{
	start_server(NULL);
	struct {
		const char *req;
		int status;
	} cases[] = {
		{"GET /ws HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
		 "Sec-WebSocket-Version: 13\r\n\r\n", 400},
		{"GET /ws HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
		 "Sec-WebSocket-Key: short==\r\nSec-WebSocket-Version: 13\r\n\r\n", 400},
		{"GET /ws HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
		 "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 8\r\n\r\n", 426},
		{"GET /ws HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
		 "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
		 "Origin: http://evil.example\r\n\r\n", 403},
		{"POST /ws HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
		 "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
		 "Content-Length: 0\r\n\r\n", 400},
		/* Not an upgrade at all: the route's actor decides. */
		{"GET /ws HTTP/1.1\r\nHost: t\r\n\r\n", 400},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int fd = cconnect();
		rd_t rd;
		rd_init(&rd, fd);
		send_str(fd, cases[i].req);
		resp_t r;
		char v[16];
		cr_assert_eq(read_resp(&rd, &r), 0, "case %zu", i);
		cr_assert_eq(r.status, cases[i].status, "case %zu: %d", i, r.status);
		if (r.status == 426)
			cr_assert_str_eq(resp_header(&r, "sec-websocket-version", v, sizeof(v)), "13");
		resp_free(&r);
		if (i < 5)
			cr_assert(closed_within(fd, 3000), "case %zu: not closed", i);
		close(fd);
	}
	cr_assert_eq(LOAD(app.ws_accepted), 0);
	cr_assert_eq(LOAD(app.requests), 1, "only the plain request reached the actor");
	stop_server();
}

Test(websocket, oversized_frames_and_messages_close_1009)
{
	pc_http_server_limits_t lim = {.max_frame_bytes = 1024, .max_message_bytes = 1500};
	start_server(&lim);
	char buf[2048];
	memset(buf, 'z', sizeof(buf));

	rd_t rd;
	int fd = ws_open(&rd, NULL);
	ws_frame(fd, true, 2, buf, 1024);
	expect_frame(&rd, 2, buf, 1024);
	ws_frame(fd, true, 2, buf, 2000);
	expect_close(&rd, 1009);
	cr_assert(closed_within(fd, 3000));
	close(fd);
	expect_closed_once(1, 1009, PC_ELIMIT);

	/* Frames within the limit, a message beyond it. */
	fd = ws_open(&rd, NULL);
	ws_frame(fd, false, 1, buf, 1000);
	ws_frame(fd, true, 0, buf, 1000);
	expect_close(&rd, 1009);
	cr_assert(closed_within(fd, 3000));
	close(fd);
	expect_closed_once(2, 1009, PC_ELIMIT);
	cr_assert_eq(LOAD(app.ws_msgs), 1);
	AWAIT(iost().connections_live == 0, 2000);
	stop_server();
}

Test(websocket, vanishing_peer_and_server_close)
{
	start_server(NULL);
	/* Gone mid-frame: 100 bytes announced, 10 sent. */
	rd_t rd;
	int fd = ws_open(&rd, NULL);
	uint8_t h[6] = {0x82, 0x80 | 100, 0, 0, 0, 0};
	send_all(fd, h, sizeof(h));
	send_all(fd, "0123456789", 10);
	sleep_ms(20);
	close(fd);
	expect_closed_once(1, 1006, 0);
	cr_assert_eq(LOAD(app.ws_msgs), 0);

	/* The actor closes: the close frame comes, the answer ends it. */
	fd = ws_open(&rd, NULL);
	ws_frame(fd, true, 1, "close", 5);
	int op;
	char *data;
	size_t len;
	cr_assert_eq(ws_read(&rd, &op, &data, &len), 0);
	cr_assert_eq(op, 8);
	cr_assert_eq(close_code(data, len), 4000);
	cr_assert_str_eq(data + 2, "bye");
	free(data);
	ws_frame(fd, true, 8, "\x0f\xa0", 2);
	cr_assert(closed_within(fd, 2000));
	close(fd);
	expect_closed_once(2, 4000, 0);

	/* An actor's close that the peer never answers ends after a grace period. */
	fd = ws_open(&rd, NULL);
	ws_frame(fd, true, 1, "close", 5);
	expect_close(&rd, 4000);
	cr_assert(closed_within(fd, 5000));
	close(fd);
	expect_closed_once(3, 4000, 0);
	AWAIT(iost().connections_live == 0, 2000);
	stop_server();
}

Test(websocket, idle_timeout)
{
	pc_http_server_limits_t lim = {.ws_idle_timeout_ms = 200};
	start_server(&lim);
	rd_t rd;
	int fd = ws_open(&rd, NULL);
	ws_frame(fd, true, 1, "hi", 2);
	expect_frame(&rd, 1, "hi", 2);
	expect_close(&rd, 1001);
	cr_assert(closed_within(fd, 3000));
	close(fd);
	expect_closed_once(1, 1001, PC_ETIMEDOUT);
	stop_server();
}

/* ---- scale and shutdown ------------------------------------------------------------------ */

typedef struct worker_arg {
	int n;
	pthread_barrier_t *barrier;
	uint32_t ok;
} worker_arg_t;

static void *many_worker(void *p)
{
	worker_arg_t *w = p;
	int *fds = calloc((size_t)w->n, sizeof(int));
	rd_t *rd = malloc(sizeof(*rd));
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	struct timeval tv = {IO_TIMEOUT_MS / 1000, 0};
	for (int i = 0; i < w->n; i++) {
		fds[i] = socket(AF_INET, SOCK_STREAM, 0);
		CHECK(fds[i] >= 0, "socket: %s", strerror(errno));
		if (fds[i] < 0)
			continue;
		CHECK(setsockopt(fds[i], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) == 0, "timeout");
		CHECK(connect(fds[i], (struct sockaddr *)&sa, sizeof(sa)) == 0, "connect: %s", strerror(errno));
	}
	/* Every connection open at once before any request. */
	pthread_barrier_wait(w->barrier);
	pthread_barrier_wait(w->barrier);
	for (int i = 0; i < w->n; i++) {
		char req[64];
		int len = snprintf(req, sizeof(req), "GET /echo?%d HTTP/1.1\r\n\r\n", i);
		CHECK(send(fds[i], req, (size_t)len, MSG_NOSIGNAL) == len, "send");
	}
	for (int i = 0; i < w->n; i++) {
		char want[64];
		snprintf(want, sizeof(want), "GET /echo q=%d foo=- len=0\n", i);
		rd_init(rd, fds[i]);
		char line[256], body[64] = {0};
		size_t clen = 0;
		bool ok = rd_line(rd, line, sizeof(line)) == 0 && strcmp(line, "HTTP/1.1 200 OK") == 0;
		while (ok && rd_line(rd, line, sizeof(line)) == 0 && line[0])
			if (strncasecmp(line, "content-length:", 15) == 0)
				clen = strtoul(line + 15, NULL, 10);
		ok = ok && clen == strlen(want) && rd_n(rd, body, clen) == 0 && strcmp(body, want) == 0;
		if (ok)
			w->ok++;
	}
	pthread_barrier_wait(w->barrier);
	pthread_barrier_wait(w->barrier); /* the test counts live connections between */
	for (int i = 0; i < w->n; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	free(rd);
	free(fds);
	return NULL;
}

Test(http_server, many_concurrent_connections, .timeout = 120)
{
	enum { THREADS = 4 };
	int per = 500;
	/* Client and server ends both live in this process. */
	struct rlimit rl;
	cr_assert_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
	rlim_t want = 2 * THREADS * (rlim_t)per + 256;
	if (rl.rlim_cur < want) {
		rl.rlim_cur = rl.rlim_max < want ? rl.rlim_max : want;
		cr_assert_eq(setrlimit(RLIMIT_NOFILE, &rl), 0);
	}
	if (rl.rlim_cur < want) {
		per = (int)((rl.rlim_cur - 256) / (2 * THREADS));
		cr_log_warn("RLIMIT_NOFILE %llu: %d connections per thread", (unsigned long long)rl.rlim_cur, per);
	}
	cr_assert_gt(per, 10);
	start_server(NULL);
	pthread_barrier_t barrier;
	pthread_barrier_init(&barrier, NULL, THREADS + 1);
	pthread_t th[THREADS];
	worker_arg_t args[THREADS];
	for (int i = 0; i < THREADS; i++) {
		args[i] = (worker_arg_t){.n = per, .barrier = &barrier};
		cr_assert_eq(pthread_create(&th[i], NULL, many_worker, &args[i]), 0);
	}
	pthread_barrier_wait(&barrier);
	uint64_t total = (uint64_t)THREADS * (uint64_t)per;
	AWAIT(iost().connections_live == total, 10000);
	pthread_barrier_wait(&barrier);
	pthread_barrier_wait(&barrier);
	pc_io_stats_t st = iost();
	pthread_barrier_wait(&barrier);
	cr_assert_eq(st.connections_live, total, "all open while answered");
	uint32_t ok = 0;
	for (int i = 0; i < THREADS; i++) {
		pthread_join(th[i], NULL);
		ok += args[i].ok;
	}
	pthread_barrier_destroy(&barrier);
	cr_assert_eq(ok, total, "%u of %llu answered", ok, (unsigned long long)total);
	AWAIT(iost().connections_live == 0, 10000);
	cr_assert_eq(iost().connections_accepted, total);
	stop_server();
}

/* Live connections of every kind, for the shutdown tests. */
static void open_live(int *http_fd, int *ws_fd, rd_t *ws_rd)
{
	*http_fd = cconnect();
	send_str(*http_fd, "GET /hold HTTP/1.1\r\nHost: t\r\n\r\n");
	AWAIT(LOAD(app.held) == 1, 2000);
	*ws_fd = ws_open(ws_rd, NULL);
	ws_frame(*ws_fd, true, 1, "hi", 2);
	expect_frame(ws_rd, 1, "hi", 2);
	/* And one that is just connected. */
	AWAIT(iost().connections_live == 2, 2000);
}

Test(shutdown, server_free_with_live_connections)
{
	start_server(NULL);
	int hfd, wfd;
	rd_t rd;
	open_live(&hfd, &wfd, &rd);
	int idle = cconnect();
	AWAIT(iost().connections_live == 3, 2000);
	pc_http_server_free(srv);
	srv = NULL;
	cr_assert_eq(iost().connections_live, 0, "free returns after every connection closed");
	AWAIT(LOAD(app.gone) == 1, 2000);
	cr_assert_eq(LOAD(app.gone_reason), PC_ESTOPPED);
	expect_closed_once(1, 1001, PC_ESTOPPED);
	expect_close(&rd, 1001);
	cr_assert(closed_within(wfd, 2000));
	cr_assert(closed_within(hfd, 2000));
	cr_assert(closed_within(idle, 2000));
	close(wfd);
	close(hfd);
	close(idle);
	stop_server();
}

Test(shutdown, io_free_with_live_connections)
{
	start_server(NULL);
	int hfd, wfd;
	rd_t rd;
	open_live(&hfd, &wfd, &rd);
	/* The loops close everything on the way out; the server is freed
	 * afterwards without touching them. */
	pc_io_free(io);
	io = NULL;
	AWAIT(LOAD(app.gone) == 1, 2000);
	cr_assert_eq(LOAD(app.gone_reason), PC_ESTOPPED);
	expect_closed_once(1, 1001, PC_ESTOPPED);
	cr_assert_eq(pc_http_respond(srv, ld(&app.held_id), 200, NULL, NULL, 0), PC_ENOTFOUND);
	cr_assert_eq(pc_ws_send(srv, ld(&app.ws_id), PC_WS_TEXT, "x", 1), PC_ENOTFOUND);
	pc_http_server_free(srv);
	srv = NULL;
	cr_assert(closed_within(wfd, 2000));
	cr_assert(closed_within(hfd, 2000));
	close(wfd);
	close(hfd);
	pc_actor_release(app_actor);
	assert_no_failures();
	FREE_RUNTIME_CHECKED(rt);
}

/* Answers race with the client going away and the server being freed. */
Test(shutdown, answers_racing_free)
{
	start_server(NULL);
	for (int round = 0; round < 20; round++) {
		int fd = cconnect();
		send_str(fd, "GET /flood HTTP/1.1\r\nHost: t\r\n\r\n");
		sleep_ms(5);
		close(fd);
	}
	int fd = cconnect();
	send_str(fd, "GET /flood HTTP/1.1\r\nHost: t\r\n\r\n");
	sleep_ms(20);
	pc_http_server_free(srv);
	srv = NULL;
	AWAIT(LOAD(app.flood_done), 10000);
	close(fd);
	/* The flood actor may still be mid-step on a worker: let it settle. */
	quiesce(rt);
	stop_server();
}

/* ---- the connection machines ----------------------------------------------------- */

/* Trace lines of the machines, as the I/O threads write them. */
static pthread_mutex_t trace_mu = PTHREAD_MUTEX_INITIALIZER;
static char trace_text[8192];

static void trace_sink(void *user, const char *line)
{
	(void)user;
	pthread_mutex_lock(&trace_mu);
	/* "trace <machine> <serial> " is cut: one connection, one serial */
	const char *p = line;
	for (int i = 0; i < 3 && p; i++) {
		p = strchr(p, ' ');
		if (p)
			p++;
	}
	char m[16] = "";
	sscanf(line, "trace %15s", m);
	size_t used = strlen(trace_text);
	snprintf(trace_text + used, sizeof(trace_text) - used, "%s %s\n", m, p ? p : line);
	pthread_mutex_unlock(&trace_mu);
}

static bool trace_has(const char *tail)
{
	pthread_mutex_lock(&trace_mu);
	bool yes = strstr(trace_text, tail) != NULL;
	pthread_mutex_unlock(&trace_mu);
	return yes;
}

/* One connection through a request, keep-alive, the upgrade to a
 * WebSocket and the close: every transition of its two machines is
 * traced, in order, and none is refused. */
Test(lifecycle, request_keep_alive_upgrade_close_are_traced_in_order)
{
	pc_io_trace_set("http,ws", trace_sink, NULL);
	start_server(NULL);
	int fd = cconnect();
	rd_t rd;
	rd_init(&rd, fd);
	resp_t r;
	send_str(fd, "GET /echo HTTP/1.1\r\nHost: t\r\n\r\n");
	cr_assert_eq(read_resp(&rd, &r), 0);
	cr_assert_eq(r.status, 200);
	resp_free(&r);
	send_str(fd, "GET /ws HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
		     "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n");
	cr_assert_eq(read_resp(&rd, &r), 0);
	cr_assert_eq(r.status, 101);
	resp_free(&r);
	ws_frame(fd, true, 1, "hi", 2);
	expect_frame(&rd, 1, "hi", 2);
	ws_frame(fd, true, 8, "\x03\xe8", 2);
	expect_close(&rd, 1000);
	cr_assert(closed_within(fd, 2000));
	close(fd);
	AWAIT(trace_has("http ws -> closed"), 3000);
	AWAIT(iost().connections_live == 0, 2000);
	pthread_mutex_lock(&trace_mu);
	const char *want = "http new -> head (accepted)\n"
			   "http head -> body (head complete)\n"
			   "http body -> service (request complete)\n"
			   "http service -> head (keep-alive)\n"
			   "http head -> body (head complete)\n"
			   "http body -> service (request complete)\n"
			   "http service -> ws (upgrade)\n"
			   "ws new -> open (upgrade)\n"
			   "ws open -> closing (peer close)\n"
			   "ws closing -> closed (connection ends)\n"
			   "http ws -> closed (closed)\n";
	cr_assert_str_eq(trace_text, want, "traced:\n%s", trace_text);
	pthread_mutex_unlock(&trace_mu);
	cr_assert_eq(iost().transitions_refused, 0);
	stop_server();
}
