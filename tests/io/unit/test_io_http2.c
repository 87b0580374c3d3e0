/*
 * HTTP/2 over cleartext (h2c, prior knowledge) between the HTTP client
 * (io/http_client.h) and the HTTP server (io/http_server.h) on 127.0.0.1:
 * requests and answers, many streams multiplexed on one connection,
 * streamed answers, backpressure on one stream, a stream reset mid-answer,
 * the per-stream limits, SETTINGS_MAX_CONCURRENT_STREAMS, a peer that
 * grants no window, malformed HTTP/2, idle and shutdown, HTTP/1.1 on the
 * same server, and a stress run with random resets. A small nghttp2 client
 * plays the peers curl will not (one that never grants window, one that
 * trickles its preface). Every wait is bounded.
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
#include <sys/socket.h>
#include <unistd.h>

#include <nghttp2/nghttp2.h>

#include "io/http_client.h"
#include "io/http_server.h"
#include "io/io.h"
#include "test_util.h"

#define WAIT_MS 10000
#define MAX_CALLS 4096

/* ---- the server's route actor ------------------------------------------------- */

enum { MSG_LATER = 1, MSG_FLOOD };

/* What the route actor saw; the test thread reads it with atomics. */
typedef struct app {
	uint32_t requests;
	uint32_t h2_requests;
	uint32_t in_service; /* requests not yet answered nor gone */
	uint32_t peak;       /* the most in service at once */
	uint32_t held;
	uint64_t held_id;
	uint32_t gone;
	int32_t gone_reason;
	uint64_t gone_id;
	uint32_t refused;    /* answers that found their request gone */
	uint64_t flood_bytes;
	int32_t flood_rc;
	uint32_t flood_done;
} app_t;

static app_t app;

#define FLOOD_CHUNK 65536
#define FLOOD_LIMIT (64u << 20) /* a failing test must still end */
#define BIG_BODY (256u << 10)

/* A later step of an answer, sent by the actor to itself on a timer. */
typedef struct later {
	pc_http_server_t *srv;
	uint64_t id;
	uint32_t kind; /* 0: respond "delayed"; 1: a tick of /slow; 2: a stress step */
	uint32_t step;
	uint32_t tag;
} later_t;

static void service_begin(void)
{
	uint32_t n = INC(app.in_service);
	uint32_t p = LOAD(app.peak);
	while (n > p && !__atomic_compare_exchange_n(&app.peak, &p, n, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
		;
}

static void service_end(int rc)
{
	__atomic_sub_fetch(&app.in_service, 1, __ATOMIC_ACQ_REL);
	if (rc == PC_ENOTFOUND)
		INC(app.refused);
	else
		CHECK(rc == 0, "answer: %d", rc);
}

static void later(pc_ctx_t *ctx, const pc_http_request_msg_t *req, uint32_t kind, uint32_t step,
		  uint32_t tag, uint64_t ms)
{
	pc_msg_t *m = pc_msg_new(MSG_LATER, sizeof(later_t));
	CHECK(m != NULL, "msg");
	*(later_t *)pc_msg_data(m) = (later_t){req->server, req->id, kind, step, tag};
	CHECK(pc_timer_after(pc_self(ctx), ms, m, NULL) == 0, "timer");
}

static void on_echo(const pc_http_request_msg_t *req)
{
	const char *foo = pc_http_request_header(req, "x-foo");
	const char *host = pc_http_request_header(req, "host");
	char head[512];
	int n = snprintf(head, sizeof(head), "%s %s q=%s host=%s foo=%s h=%u len=%zu\n", req->method, req->path,
			 req->query, host ? host : "-", foo ? foo : "-", req->http_major, req->body_len);
	char *out = malloc((size_t)n + req->body_len + 1);
	CHECK(out != NULL, "malloc");
	memcpy(out, head, (size_t)n);
	memcpy(out + n, req->body, req->body_len);
	CHECK(req->body[req->body_len] == 0, "body not NUL-terminated");
	/* Connection is HTTP/1.1's: the server leaves it out of an HTTP/2
	 * answer (a client would refuse the stream otherwise). */
	service_end(pc_http_respond(req->server, req->id, 200, "X-Test: Yes\r\nConnection: close\r\n", out,
				    (size_t)n + req->body_len));
	free(out);
}

/* The stress route: the query says how to answer ("t=<tag>&m=<mode>"). */
static void stress_step(pc_ctx_t *ctx, const pc_http_request_msg_t *req);

static void on_request(pc_ctx_t *ctx, const pc_http_request_msg_t *req)
{
	INC(app.requests);
	if (req->http_major == 2)
		INC(app.h2_requests);
	service_begin();
	pc_http_server_t *srv = req->server;
	const char *p = req->path;
	if (strcmp(p, "/echo") == 0) {
		on_echo(req);
	} else if (strcmp(p, "/stream") == 0) {
		CHECK(pc_http_respond_start(srv, req->id, 200, "Content-Type: text/event-stream\r\n") == 0, "start");
		for (int i = 0; i < 5; i++) {
			char part[16];
			int n = snprintf(part, sizeof(part), "part-%d\n", i);
			CHECK(pc_http_respond_write(srv, req->id, part, (size_t)n) == 0, "write");
		}
		service_end(pc_http_respond_end(srv, req->id));
	} else if (strcmp(p, "/slow") == 0) {
		CHECK(pc_http_respond_start(srv, req->id, 200, NULL) == 0, "start");
		later(ctx, req, 1, 0, 0, 10);
	} else if (strcmp(p, "/delay") == 0) {
		later(ctx, req, 0, 0, 0, 150);
	} else if (strcmp(p, "/hold") == 0 || strcmp(p, "/hold-stream") == 0) {
		if (p[5])
			CHECK(pc_http_respond_start(srv, req->id, 200, NULL) == 0, "start");
		STORE(app.held_id, req->id);
		INC(app.held);
	} else if (strcmp(p, "/big") == 0) {
		char *big = malloc(BIG_BODY);
		CHECK(big != NULL, "malloc");
		memset(big, 'b', BIG_BODY);
		service_end(pc_http_respond(srv, req->id, 200, NULL, big, BIG_BODY));
		free(big);
	} else if (strcmp(p, "/flood") == 0) {
		/* "n=<chunks>": that many, then the end; else until refused. */
		unsigned n = 0;
		(void)sscanf(req->query, "n=%u", &n);
		CHECK(pc_http_respond_start(srv, req->id, 200, NULL) == 0, "start");
		pc_msg_t *m = pc_msg_new(MSG_FLOOD, sizeof(later_t));
		*(later_t *)pc_msg_data(m) = (later_t){srv, req->id, 0, 0, n};
		pc_send(pc_self(ctx), m);
	} else if (strcmp(p, "/stress") == 0) {
		stress_step(ctx, req);
	} else {
		service_end(pc_http_respond(srv, req->id, 500, NULL, "unexpected\n", 11));
	}
}

/* The body a stress request with tag t ends with, whatever its mode. */
static void stress_body(uint32_t tag, char *out, size_t cap)
{
	snprintf(out, cap, "stress-%u-%s\n", tag, "abcdefghijklmnopqrstuvwxyz");
}

static void stress_step(pc_ctx_t *ctx, const pc_http_request_msg_t *req)
{
	unsigned tag = 0, mode = 0;
	CHECK(sscanf(req->query, "t=%u&m=%u", &tag, &mode) == 2, "stress query %s", req->query);
	char body[96];
	stress_body(tag, body, sizeof(body));
	size_t len = strlen(body);
	switch (mode) {
	case 0: /* at once */
		service_end(pc_http_respond(req->server, req->id, 200, NULL, body, len));
		break;
	case 1: { /* streamed at once, in three pieces; the stream may be reset already */
		int rc = pc_http_respond_start(req->server, req->id, 200, NULL);
		if (rc != 0) {
			service_end(rc);
			break;
		}
		(void)pc_http_respond_write(req->server, req->id, body, 5);
		(void)pc_http_respond_write(req->server, req->id, body + 5, 5);
		(void)pc_http_respond_write(req->server, req->id, body + 10, len - 10);
		service_end(pc_http_respond_end(req->server, req->id));
		break;
	}
	default: /* later: whole (2) or streamed over a few ticks (3) */
		if (mode == 3 && pc_http_respond_start(req->server, req->id, 200, NULL) != 0) {
			service_end(PC_ENOTFOUND);
			break;
		}
		later(ctx, req, 2, mode == 3 ? 1 : 0, tag, 5 + tag % 40);
		break;
	}
}

static void on_later(pc_ctx_t *ctx, const later_t *l)
{
	if (l->kind == 0) {
		service_end(pc_http_respond(l->srv, l->id, 200, NULL, "delayed\n", 8));
		return;
	}
	if (l->kind == 1) { /* /slow: five ticks, 10 ms apart */
		char tick[16];
		int n = snprintf(tick, sizeof(tick), "tick-%u\n", l->step);
		int rc = pc_http_respond_write(l->srv, l->id, tick, (size_t)n);
		if (rc == 0 && l->step < 4) {
			pc_msg_t *m = pc_msg_new(MSG_LATER, sizeof(later_t));
			later_t next = *l;
			next.step++;
			*(later_t *)pc_msg_data(m) = next;
			CHECK(pc_timer_after(pc_self(ctx), 10, m, NULL) == 0, "timer");
			return;
		}
		service_end(rc == 0 ? pc_http_respond_end(l->srv, l->id) : rc);
		return;
	}
	char body[96];
	stress_body(l->tag, body, sizeof(body));
	size_t len = strlen(body);
	if (l->step == 0) {
		service_end(pc_http_respond(l->srv, l->id, 200, NULL, body, len));
		return;
	}
	/* Streamed: the body in two writes, a tick apart, then the end. */
	size_t half = len / 2;
	int rc = pc_http_respond_write(l->srv, l->id, l->step == 1 ? body : body + half,
				       l->step == 1 ? half : len - half);
	if (rc == 0 && l->step == 1) {
		pc_msg_t *m = pc_msg_new(MSG_LATER, sizeof(later_t));
		later_t next = *l;
		next.step = 2;
		*(later_t *)pc_msg_data(m) = next;
		CHECK(pc_timer_after(pc_self(ctx), 10, m, NULL) == 0, "timer");
		return;
	}
	service_end(rc == 0 ? pc_http_respond_end(l->srv, l->id) : rc);
}

/* One chunk per turn (a message to itself), as a streaming actor should. */
static void on_flood(pc_ctx_t *ctx, const later_t *l)
{
	static char chunk[FLOOD_CHUNK];
	int rc = pc_http_respond_write(l->srv, l->id, chunk, sizeof(chunk));
	uint32_t sent = l->step + 1;
	bool more = l->tag ? sent < l->tag : ld(&app.flood_bytes) < FLOOD_LIMIT;
	if (rc == 0)
		add(&app.flood_bytes, sizeof(chunk));
	if (rc == 0 && more) {
		pc_msg_t *m = pc_msg_new(MSG_FLOOD, sizeof(later_t));
		later_t next = *l;
		next.step = sent;
		*(later_t *)pc_msg_data(m) = next;
		pc_send(pc_self(ctx), m);
		return;
	}
	if (rc == 0 && l->tag)
		rc = pc_http_respond_end(l->srv, l->id);
	STORE(app.flood_rc, rc);
	STORE(app.flood_done, 1);
	service_end(rc);
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
	case MSG_LATER:
		on_later(ctx, pc_msg_cdata(msg));
		break;
	case MSG_FLOOD:
		on_flood(ctx, pc_msg_cdata(msg));
		break;
	}
	return 0;
}

static const pc_behavior_t app_b = {.name = "h2-app", .receive = app_receive};

/* ---- the client's owner actor: one record per call, by tag ------------------------ */

typedef struct rec {
	uint32_t heads, datas, ends;
	bool order_bad;
	int32_t status;
	int32_t result;
	pc_http_transport_t transport;
	char ctype[64];
	char xtest[16];
	char conn[16];
	char error[160];   /* curl's code and message, for failure messages */
	char *body;
	size_t len;
	uint64_t unconsumed; /* atomic: delivered, not yet reported consumed */
} rec_t;

static rec_t recs[MAX_CALLS];
static pc_http_call_t *calls[MAX_CALLS]; /* atomic: set by the test after the fetch */
static uint32_t ends_total;              /* atomic */
static uint32_t consume;                 /* atomic: the owner reports bytes consumed */

/* Reports what call i has delivered as consumed (owner or test thread). */
static void consume_call(uint32_t i)
{
	pc_http_call_t *call = __atomic_load_n(&calls[i], __ATOMIC_ACQUIRE);
	uint64_t n = call ? __atomic_exchange_n(&recs[i].unconsumed, 0, __ATOMIC_ACQ_REL) : 0;
	if (n)
		pc_http_call_consumed(call, n);
}

static int owner_receive(pc_ctx_t *ctx, void *state, pc_msg_t *msg)
{
	(void)ctx;
	(void)state;
	switch (msg->type) {
	case PC_MSG_HTTP_RESPONSE_HEAD: {
		const pc_http_head_msg_t *h = pc_msg_cdata(msg);
		rec_t *r = &recs[h->tag];
		r->order_bad |= r->heads || r->datas || r->ends;
		r->heads++;
		r->status = h->status;
		pc_http_head_get(h, "content-type", r->ctype, sizeof(r->ctype));
		pc_http_head_get(h, "x-test", r->xtest, sizeof(r->xtest));
		pc_http_head_get(h, "connection", r->conn, sizeof(r->conn));
		break;
	}
	case PC_MSG_HTTP_RESPONSE_DATA: {
		const pc_http_data_msg_t *d = pc_msg_cdata(msg);
		rec_t *r = &recs[d->tag];
		r->order_bad |= !r->heads || r->ends;
		r->datas++;
		char *b = realloc(r->body, r->len + d->len + 1);
		CHECK(b != NULL, "realloc");
		memcpy(b + r->len, d->data, d->len);
		r->body = b;
		r->len += d->len;
		b[r->len] = 0;
		__atomic_add_fetch(&r->unconsumed, d->len, __ATOMIC_ACQ_REL);
		if (LOAD(consume))
			consume_call((uint32_t)d->tag);
		break;
	}
	case PC_MSG_HTTP_RESPONSE_END: {
		const pc_http_end_msg_t *e = pc_msg_cdata(msg);
		rec_t *r = &recs[e->tag];
		r->order_bad |= r->ends != 0;
		r->ends++;
		r->result = e->result;
		r->transport = e->transport;
		snprintf(r->error, sizeof(r->error), "%d %s", e->curl_code, e->error);
		if (!r->status)
			r->status = e->status;
		INC(ends_total);
		break;
	}
	}
	return 0;
}

static const pc_behavior_t owner_b = {.name = "h2-owner", .receive = owner_receive};

/* ---- the stage ----------------------------------------------------------------------- */

static pc_runtime_t *rt;
static pc_io_t *io;
static pc_http_server_t *srv;
static pc_actor_t *app_actor, *owner;
static uint16_t port;

typedef struct stage {
	uint32_t threads;
	uint32_t client_streams;    /* pc_io_config_t.max_concurrent_streams */
	uint32_t host_connections;  /* pc_io_config_t.max_host_connections */
	pc_http_server_limits_t lim;
} stage_t;

static void start(const stage_t *st)
{
	memset(&app, 0, sizeof(app));
	memset(recs, 0, sizeof(recs));
	memset(calls, 0, sizeof(calls));
	STORE(ends_total, 0);
	STORE(consume, 1);
	reset_failures();
	rt = start_rt(4);
	pc_io_config_t ic = {.threads = st->threads ? st->threads : 1,
			     .max_concurrent_streams = st->client_streams,
			     .max_host_connections = st->host_connections};
	cr_assert_eq(pc_io_new(rt, &ic, &io), 0);
	pc_http_server_config_t cfg = {.host = "127.0.0.1", .limits = st->lim};
	cr_assert_eq(pc_http_server_new(io, &cfg, &srv), 0);
	cr_assert_eq(pc_spawn(rt, &app_b, NULL, &app_actor), 0);
	cr_assert_eq(pc_spawn(rt, &owner_b, NULL, &owner), 0);
	cr_assert_eq(pc_http_server_route(srv, NULL, "/*", app_actor), 0);
	cr_assert_eq(pc_http_server_start(srv), 0);
	port = pc_http_server_port(srv);
}

static pc_io_stats_t iost(void)
{
	pc_io_stats_t s;
	pc_io_stats(io, &s);
	return s;
}

static void stop(void)
{
	pc_http_server_free(srv);
	srv = NULL;
	for (uint32_t i = 0; i < MAX_CALLS; i++) {
		pc_http_call_release(calls[i]);
		calls[i] = NULL;
	}
	pc_io_free(io);
	io = NULL;
	pc_actor_release(app_actor);
	pc_actor_release(owner);
	assert_no_failures();
	FREE_RUNTIME_CHECKED(rt);
	for (uint32_t i = 0; i < MAX_CALLS; i++)
		free(recs[i].body);
}

TestSuite(io_http2, .timeout = 120);

typedef struct fetch_opts {
	const char *method;
	const char *body;
	size_t body_len;
	const char *const *headers;
	size_t header_count;
	bool http1;          /* plain HTTP/1.1 rather than h2c */
	size_t max_buffered; /* 0: the default */
} fetch_opts_t;

static void fetch_with(uint32_t i, const char *path, const fetch_opts_t *o)
{
	char url[256];
	snprintf(url, sizeof(url), "http://127.0.0.1:%u%s", port, path);
	pc_http_client_request_t req = {
		.method = o->method,
		.url = url,
		.headers = o->headers,
		.header_count = o->header_count,
		.body = o->body,
		.body_len = o->body ? (o->body_len ? o->body_len : strlen(o->body)) : 0,
		.max_buffered = o->max_buffered,
		.tag = i,
		.http2_prior_knowledge = !o->http1,
	};
	pc_http_call_t *call = NULL;
	cr_assert_eq(pc_http_fetch(io, &req, owner, &call), 0);
	__atomic_store_n(&calls[i], call, __ATOMIC_RELEASE);
}

static void fetch(uint32_t i, const char *path)
{
	fetch_with(i, path, &(fetch_opts_t){0});
}

static void await_ends(uint32_t n)
{
	AWAIT(LOAD(ends_total) >= n, WAIT_MS);
}

/* ---- a small nghttp2 client, for the peers curl will not play ---------------------- */

#define RAW_STREAMS 32

typedef struct rawc {
	int fd;
	nghttp2_session *ss;
	bool eof;        /* the server closed the connection */
	bool failed;     /* nghttp2 gave up on the session */
	bool goaway;
	uint32_t goaway_code;
	uint32_t trickle; /* bytes still to send one at a time */
	int32_t status[RAW_STREAMS];
	size_t body[RAW_STREAMS];
	bool closed[RAW_STREAMS];
	uint32_t close_code[RAW_STREAMS];
} rawc_t;

static int raw_index(int32_t sid)
{
	int i = (sid - 1) / 2;
	return sid > 0 && i < RAW_STREAMS ? i : 0;
}

static ssize_t raw_send(nghttp2_session *ss, const uint8_t *data, size_t len, int flags, void *user)
{
	(void)ss;
	(void)flags;
	rawc_t *r = user;
	if (r->trickle) {
		r->trickle--;
		len = 1;
		sleep_ms(2);
	}
	ssize_t w = send(r->fd, data, len, MSG_NOSIGNAL);
	return w > 0 ? w : NGHTTP2_ERR_CALLBACK_FAILURE;
}

static int raw_header(nghttp2_session *ss, const nghttp2_frame *frame, const uint8_t *name, size_t nl,
		      const uint8_t *value, size_t vl, uint8_t flags, void *user)
{
	(void)ss;
	(void)flags;
	(void)vl;
	rawc_t *r = user;
	if (nl == 7 && memcmp(name, ":status", 7) == 0)
		r->status[raw_index(frame->hd.stream_id)] = atoi((const char *)value);
	return 0;
}

static int raw_data(nghttp2_session *ss, uint8_t flags, int32_t sid, const uint8_t *data, size_t len,
		    void *user)
{
	(void)ss;
	(void)flags;
	(void)data;
	((rawc_t *)user)->body[raw_index(sid)] += len;
	return 0;
}

static int raw_close(nghttp2_session *ss, int32_t sid, uint32_t code, void *user)
{
	(void)ss;
	rawc_t *r = user;
	r->closed[raw_index(sid)] = true;
	r->close_code[raw_index(sid)] = code;
	return 0;
}

static int raw_frame(nghttp2_session *ss, const nghttp2_frame *frame, void *user)
{
	(void)ss;
	rawc_t *r = user;
	if (frame->hd.type == NGHTTP2_GOAWAY) {
		r->goaway = true;
		r->goaway_code = frame->goaway.error_code;
	}
	return 0;
}

static int raw_connect(void)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	cr_assert_geq(fd, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0, "connect: %s", strerror(errno));
	int one = 1;
	cr_assert_eq(setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)), 0);
	struct timeval tv = {5, 0};
	cr_assert_eq(setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)), 0);
	return fd;
}

/* A client that grants `window` bytes per stream and, unless `grant`,
 * never any more. */
static void raw_open(rawc_t *r, int32_t window, bool grant, uint32_t trickle)
{
	memset(r, 0, sizeof(*r));
	r->fd = raw_connect();
	r->trickle = trickle;
	nghttp2_session_callbacks *cbs;
	nghttp2_option *opt;
	cr_assert_eq(nghttp2_session_callbacks_new(&cbs), 0);
	cr_assert_eq(nghttp2_option_new(&opt), 0);
	nghttp2_session_callbacks_set_send_callback(cbs, raw_send);
	nghttp2_session_callbacks_set_on_header_callback(cbs, raw_header);
	nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, raw_data);
	nghttp2_session_callbacks_set_on_stream_close_callback(cbs, raw_close);
	nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, raw_frame);
	nghttp2_option_set_no_auto_window_update(opt, grant ? 0 : 1);
	cr_assert_eq(nghttp2_session_client_new2(&r->ss, cbs, r, opt), 0);
	nghttp2_session_callbacks_del(cbs);
	nghttp2_option_del(opt);
	nghttp2_settings_entry iv[] = {{NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, (uint32_t)window}};
	cr_assert_eq(nghttp2_submit_settings(r->ss, NGHTTP2_FLAG_NONE, iv, 1), 0);
}

static int32_t raw_get(rawc_t *r, const char *path)
{
	nghttp2_nv nv[] = {
		{(uint8_t *)":method", (uint8_t *)"GET", 7, 3, NGHTTP2_NV_FLAG_NONE},
		{(uint8_t *)":scheme", (uint8_t *)"http", 7, 4, NGHTTP2_NV_FLAG_NONE},
		{(uint8_t *)":authority", (uint8_t *)"127.0.0.1", 10, 9, NGHTTP2_NV_FLAG_NONE},
		{(uint8_t *)":path", (uint8_t *)path, 5, strlen(path), NGHTTP2_NV_FLAG_NONE},
	};
	int32_t sid = nghttp2_submit_request(r->ss, NULL, nv, 4, NULL, NULL);
	cr_assert_gt(sid, 0);
	return sid;
}

/* One round: send what is queued, wait up to `ms` for input, take it.
 * False once the connection is over. */
static bool raw_step(rawc_t *r, int ms)
{
	if (r->eof || r->failed)
		return false;
	if (nghttp2_session_send(r->ss) != 0) {
		r->failed = true;
		return false;
	}
	struct pollfd pf = {r->fd, POLLIN, 0};
	if (poll(&pf, 1, ms) <= 0)
		return true;
	uint8_t buf[16384];
	ssize_t n = recv(r->fd, buf, sizeof(buf), 0);
	if (n <= 0) {
		r->eof = true;
		return false;
	}
	if (nghttp2_session_mem_recv(r->ss, buf, (size_t)n) < 0)
		r->failed = true;
	return !r->failed;
}

#define RAW_UNTIL(r, cond, ms)                                                                    \
	do {                                                                                       \
		uint64_t until_ = now_ms() + (ms);                                                 \
		while (!(cond) && now_ms() < until_ && raw_step((r), 10))                          \
			;                                                                          \
		cr_assert((cond), "timed out waiting for: %s", #cond);                             \
	} while (0)

static void raw_free(rawc_t *r)
{
	nghttp2_session_del(r->ss);
	close(r->fd);
}

/* True when the server closes `fd` within `ms` (what it sends meanwhile
 * is read and dropped); `goaway` says whether a GOAWAY frame was among it
 * (frames are walked from the first byte on). */
static bool closed_within(int fd, int ms, bool *goaway)
{
	static uint8_t buf[1 << 16];
	size_t len = 0;
	uint64_t until = now_ms() + (uint64_t)ms;
	*goaway = false;
	while (now_ms() < until) {
		struct pollfd pf = {fd, POLLIN, 0};
		if (poll(&pf, 1, 20) <= 0)
			continue;
		ssize_t n = recv(fd, buf + len, sizeof(buf) - len, 0);
		if (n <= 0)
			break;
		len += (size_t)n;
		if (len == sizeof(buf))
			len = 0; /* more than a test needs: keep reading */
	}
	for (size_t off = 0; off + 9 <= len;) {
		size_t flen = (size_t)buf[off] << 16 | (size_t)buf[off + 1] << 8 | buf[off + 2];
		if (buf[off + 3] == NGHTTP2_GOAWAY)
			*goaway = true;
		off += 9 + flen;
	}
	return now_ms() < until;
}

/* ---- the tests ---------------------------------------------------------------------------- */

Test(io_http2, requests_and_answers_as_on_http1)
{
	start(&(stage_t){0});
	const char *hdrs[] = {"X-Foo: bar", "Content-Type: text/plain"};
	fetch_with(0, "/echo?a=1&b=2", &(fetch_opts_t){.headers = hdrs, .header_count = 2});
	fetch_with(1, "/echo", &(fetch_opts_t){.body = "hello body"});
	fetch_with(2, "/echo", &(fetch_opts_t){.method = "HEAD"});
	fetch(3, "/stream");
	fetch_with(4, "/echo", &(fetch_opts_t){.http1 = true, .body = "over one"});
	await_ends(5);
	char want[128];
	snprintf(want, sizeof(want), "GET /echo q=a=1&b=2 host=127.0.0.1:%u foo=bar h=2 len=0\n", port);
	cr_assert_eq(recs[0].status, 200);
	cr_assert_str_eq(recs[0].body, want);
	cr_assert_str_eq(recs[0].xtest, "Yes");
	cr_assert_str_eq(recs[0].conn, "", "a Connection header went out on HTTP/2");
	snprintf(want, sizeof(want), "POST /echo q= host=127.0.0.1:%u foo=- h=2 len=10\nhello body", port);
	cr_assert_str_eq(recs[1].body, want);
	cr_assert_eq(recs[2].status, 200);
	cr_assert_eq(recs[2].len, 0, "a HEAD answer has no body");
	cr_assert_eq(recs[3].status, 200);
	cr_assert_str_eq(recs[3].ctype, "text/event-stream");
	cr_assert_str_eq(recs[3].body, "part-0\npart-1\npart-2\npart-3\npart-4\n");
	snprintf(want, sizeof(want), "POST /echo q= host=127.0.0.1:%u foo=- h=1 len=8\nover one", port);
	cr_assert_str_eq(recs[4].body, want);
	for (int i = 0; i < 5; i++) {
		cr_assert_eq(recs[i].transport, PC_HTTP_OK, "call %d: %s", i, pc_http_transport_name(recs[i].transport));
		cr_assert_not(recs[i].order_bad, "call %d: messages out of order", i);
	}
	cr_assert_eq(LOAD(app.h2_requests), 4);
	stop();
}

/* Trace lines of the stream machine, as the I/O thread writes them, with
 * "trace h2stream <serial>/<stream id> " cut: one connection. */
static pthread_mutex_t trace_mu = PTHREAD_MUTEX_INITIALIZER;
static char trace_text[4096];
static unsigned trace_closed;

static void trace_sink(void *user, const char *line)
{
	(void)user;
	pthread_mutex_lock(&trace_mu);
	const char *p = line;
	for (int i = 0; i < 3 && p; i++) {
		p = strchr(p, ' ');
		if (p)
			p++;
	}
	size_t used = strlen(trace_text);
	snprintf(trace_text + used, sizeof(trace_text) - used, "%s\n", p ? p : line);
	if (strstr(line, "-> closed"))
		trace_closed++;
	pthread_mutex_unlock(&trace_mu);
}

static unsigned traced_closed(void)
{
	pthread_mutex_lock(&trace_mu);
	unsigned n = trace_closed;
	pthread_mutex_unlock(&trace_mu);
	return n;
}

/* A plain answer, then a streamed one, each on its own stream, then the
 * connection's end: every transition of the stream machine is traced, in
 * order, and none is refused. */
Test(io_http2, the_stream_machine_traces_each_transition)
{
	pc_io_trace_set("h2stream", trace_sink, NULL);
	start(&(stage_t){0});
	fetch(0, "/echo");
	await_ends(1);
	fetch(1, "/stream");
	await_ends(2);
	cr_assert_eq(recs[0].status, 200);
	cr_assert_eq(recs[1].status, 200);
	AWAIT(traced_closed() >= 1, WAIT_MS);
	cr_assert_eq(iost().transitions_refused, 0);
	stop();
	pc_io_trace_set("", NULL, NULL);
	cr_assert_eq(traced_closed(), 2);
	pthread_mutex_lock(&trace_mu);
	/* The client's first request upgrades (h2c) and is stream 1; each
	 * stream closes as soon as its answer is out, the upgraded one too. */
	const char *want = "new -> recv (upgrade)\n"
			   "recv -> service (request complete)\n"
			   "service -> done (answered)\n"
			   "done -> closed (closed)\n"
			   "new -> recv (headers)\n"
			   "recv -> service (request complete)\n"
			   "service -> stream (stream start)\n"
			   "stream -> done (answered)\n"
			   "done -> closed (closed)\n";
	cr_assert_str_eq(trace_text, want, "traced:\n%s", trace_text);
	pthread_mutex_unlock(&trace_mu);
}

Test(io_http2, many_streams_share_one_connection)
{
	enum { N = 300 };
	start(&(stage_t){.client_streams = 1000});
	for (uint32_t i = 0; i < N; i++)
		fetch(i, "/delay");
	await_ends(N);
	for (uint32_t i = 0; i < N; i++) {
		cr_assert_eq(recs[i].status, 200, "call %u: %d", i, recs[i].status);
		cr_assert_str_eq(recs[i].body, "delayed\n");
	}
	cr_assert_eq(iost().connections_accepted, 1, "%" PRIu64 " connections", iost().connections_accepted);
	cr_assert_eq(LOAD(app.h2_requests), N);
	/* All in service at once (each answer waits 150 ms): multiplexed. */
	cr_assert_geq(LOAD(app.peak), N / 2, "peak %u", LOAD(app.peak));
	stop();
}

Test(io_http2, the_client_caps_streams_per_connection)
{
	/* 10 streams per connection, at most 2 connections (1 on libcurl
	 * before 8.0): 40 requests at once are served 10 per connection at a
	 * time, and the rest wait their turn. */
	enum { N = 40 };
	start(&(stage_t){.client_streams = 10, .host_connections = 2});
	for (uint32_t i = 0; i < N; i++)
		fetch(i, "/delay");
	await_ends(N);
	for (uint32_t i = 0; i < N; i++)
		cr_assert_eq(recs[i].status, 200, "call %u: %s", i, recs[i].error);
	uint64_t conns = iost().connections_accepted;
	cr_assert(conns >= 1 && conns <= 2, "%" PRIu64 " connections", conns);
	cr_assert_leq(LOAD(app.peak), 10 * conns, "peak %u", LOAD(app.peak));
	stop();
}

Test(io_http2, streamed_answers_come_piece_by_piece)
{
	start(&(stage_t){0});
	fetch(0, "/slow");
	fetch(1, "/slow");
	await_ends(2);
	for (int i = 0; i < 2; i++) {
		cr_assert_eq(recs[i].transport, PC_HTTP_OK);
		cr_assert_str_eq(recs[i].body, "tick-0\ntick-1\ntick-2\ntick-3\ntick-4\n");
		/* Written 10 ms apart, each arrived on its own. */
		cr_assert_geq(recs[i].datas, 5, "%u DATA messages", recs[i].datas);
	}
	cr_assert_eq(iost().connections_accepted, 1);
	stop();
}

Test(io_http2, a_paused_stream_does_not_stall_the_others)
{
	start(&(stage_t){0});
	STORE(consume, 0);
	/* 4 MiB the owner does not consume: the client pauses the stream. */
	fetch_with(0, "/flood?n=64", &(fetch_opts_t){.max_buffered = 256u << 10});
	AWAIT(iost().transfers_paused == 1, WAIT_MS);
	fetch(1, "/echo");
	AWAIT(LOAD(ends_total) == 1, WAIT_MS);
	cr_assert_eq(recs[1].status, 200, "the other stream went through");
	/* Consuming resumes the paused one, which completes. */
	STORE(consume, 1);
	consume_call(0);
	await_ends(2);
	cr_assert_eq(recs[0].transport, PC_HTTP_OK, "%s", pc_http_transport_name(recs[0].transport));
	cr_assert_eq(recs[0].len, 64u * FLOOD_CHUNK);
	cr_assert_eq(LOAD(app.flood_rc), 0);
	cr_assert_eq(iost().connections_accepted, 1);
	stop();
}

/* The connection's first request (HTTP/1.1 asking to upgrade, on this
 * libcurl), answered: later ones are ordinary HTTP/2 streams. */
static void warm_up(uint32_t i)
{
	fetch(i, "/echo");
	AWAIT(LOAD(ends_total) == 1, WAIT_MS);
	cr_assert_eq(recs[i].status, 200);
}

Test(io_http2, a_reset_stream_is_gone_and_the_connection_lives_on)
{
	start(&(stage_t){0});
	warm_up(2);
	fetch(0, "/hold-stream");
	AWAIT(LOAD(app.held) == 1, WAIT_MS);
	uint64_t id = LOAD(app.held_id);
	cr_assert_eq(pc_http_respond_write(srv, id, "early\n", 6), 0);
	pc_http_call_cancel(calls[0]);
	await_ends(2);
	cr_assert_eq(recs[0].transport, PC_HTTP_CANCELLED);
	/* libcurl sends the reset with the connection's next frame: here,
	 * the next request's. */
	fetch(1, "/echo");
	AWAIT(LOAD(app.gone) == 1, WAIT_MS);
	cr_assert_eq(LOAD(app.gone_id), id);
	cr_assert_eq(LOAD(app.gone_reason), 0);
	cr_assert_eq(pc_http_respond_write(srv, id, "late\n", 5), PC_ENOTFOUND);
	await_ends(3);
	cr_assert_eq(recs[1].status, 200);
	cr_assert_eq(iost().connections_accepted, 1, "the reset took the connection down");
	stop();
}

Test(io_http2, a_peer_reset_is_gone_at_once)
{
	start(&(stage_t){0});
	rawc_t r;
	raw_open(&r, 65535, true, 0);
	int32_t sid = raw_get(&r, "/hold-stream");
	raw_get(&r, "/hold");
	RAW_UNTIL(&r, LOAD(app.held) == 2, WAIT_MS);
	RAW_UNTIL(&r, r.status[0] == 200, WAIT_MS);
	cr_assert_eq(nghttp2_submit_rst_stream(r.ss, NGHTTP2_FLAG_NONE, sid, NGHTTP2_CANCEL), 0);
	RAW_UNTIL(&r, LOAD(app.gone) == 1, WAIT_MS);
	cr_assert_eq(LOAD(app.gone_reason), 0);
	/* The other stream lives on and is answered. */
	cr_assert_eq(pc_http_respond(srv, LOAD(app.held_id), 200, NULL, "ok", 2), 0);
	RAW_UNTIL(&r, r.closed[1], WAIT_MS);
	cr_assert_eq(r.status[1], 200);
	cr_assert_eq(r.body[1], 2);
	cr_assert_eq(LOAD(app.gone), 1);
	raw_free(&r);
	stop();
}

Test(io_http2, abort_resets_only_its_stream)
{
	start(&(stage_t){0});
	fetch(0, "/hold");
	AWAIT(LOAD(app.held) == 1, WAIT_MS);
	cr_assert_eq(pc_http_abort(srv, LOAD(app.held_id)), 0);
	await_ends(1);
	cr_assert_eq(recs[0].transport, PC_HTTP_CLOSED, "%s", pc_http_transport_name(recs[0].transport));
	fetch(1, "/echo");
	await_ends(2);
	cr_assert_eq(recs[1].status, 200);
	cr_assert_eq(iost().connections_accepted, 1);
	cr_assert_eq(LOAD(app.gone), 0, "the actor asked for it: no GONE");
	stop();
}

Test(io_http2, limits_refuse_the_stream_not_the_connection)
{
	start(&(stage_t){.lim = {.max_body_bytes = 1000, .max_header_bytes = 1024}});
	warm_up(3);
	static char big[5000];
	memset(big, 'x', sizeof(big));
	fetch_with(0, "/echo", &(fetch_opts_t){.body = big, .body_len = sizeof(big)});
	await_ends(2);
	cr_assert_eq(recs[0].status, 413);
	static char hv[2048];
	memset(hv, 'h', sizeof(hv) - 1);
	char line[2100];
	snprintf(line, sizeof(line), "X-Big: %s", hv);
	const char *hdrs[] = {line};
	fetch_with(1, "/echo", &(fetch_opts_t){.headers = hdrs, .header_count = 1});
	await_ends(3);
	cr_assert_eq(recs[1].status, 431);
	/* Exactly at the limit is fine. */
	fetch_with(2, "/echo", &(fetch_opts_t){.body = big, .body_len = 1000});
	await_ends(4);
	cr_assert_eq(recs[2].status, 200);
	cr_assert_eq(LOAD(app.requests), 2, "refused requests reached the actor");
	cr_assert_eq(iost().connections_accepted, 1);
	cr_assert_eq(iost().connections_dropped, 0);
	stop();
}

/* A POST whose body goes out in DATA frames without END_STREAM: the
 * request stays open, its body held by the server. */
static ssize_t raw_body_read(nghttp2_session *ss, int32_t sid, uint8_t *buf, size_t len, uint32_t *flags,
			     nghttp2_data_source *src, void *user)
{
	(void)ss;
	(void)sid;
	(void)user;
	size_t *left = src->ptr;
	size_t n = len < *left ? len : *left;
	memset(buf, 'b', n);
	*left -= n;
	if (*left == 0)
		*flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
	return (ssize_t)n;
}

static int32_t raw_post_open(rawc_t *r, size_t *left)
{
	nghttp2_nv nv[] = {
		{(uint8_t *)":method", (uint8_t *)"POST", 7, 4, NGHTTP2_NV_FLAG_NONE},
		{(uint8_t *)":scheme", (uint8_t *)"http", 7, 4, NGHTTP2_NV_FLAG_NONE},
		{(uint8_t *)":authority", (uint8_t *)"127.0.0.1", 10, 9, NGHTTP2_NV_FLAG_NONE},
		{(uint8_t *)":path", (uint8_t *)"/echo", 5, 5, NGHTTP2_NV_FLAG_NONE},
	};
	nghttp2_data_provider dp = {.source = {.ptr = left}, .read_callback = raw_body_read};
	int32_t sid = nghttp2_submit_request(r->ss, NULL, nv, 4, &dp, NULL);
	cr_assert_gt(sid, 0);
	return sid;
}

/* Bodies arriving at once on one connection are capped together (16 MiB
 * here): the streams past it get 503, the others and the connection go on. */
Test(io_http2, request_bodies_arriving_together_are_capped_per_connection)
{
	enum { N = 20 };
	start(&(stage_t){.lim = {.max_body_bytes = 1 << 20}});
	rawc_t r;
	raw_open(&r, 65535, true, 0);
	static size_t left[N];
	int32_t sid[N];
	for (int i = 0; i < N; i++) {
		left[i] = 900000; /* 18 fit in 16 MiB, 19 do not */
		sid[i] = raw_post_open(&r, &left[i]);
	}
	RAW_UNTIL(&r, ({
			  int refused = 0;
			  for (int i = 0; i < N; i++)
				  refused += r.status[raw_index(sid[i])] != 0;
			  refused >= 2;
		  }),
		  WAIT_MS);
	int refused = 0;
	for (int i = 0; i < N; i++) {
		int st = r.status[raw_index(sid[i])];
		cr_assert(st == 0 || st == 503, "stream %d: %d", sid[i], st);
		refused += st == 503;
	}
	cr_assert_eq(refused, 2, "%d refused", refused);
	cr_assert_not(r.goaway, "the connection stays");
	/* the others let go, the connection serves on */
	for (int i = 0; i < N; i++)
		if (!r.status[raw_index(sid[i])])
			cr_assert_eq(nghttp2_submit_rst_stream(r.ss, NGHTTP2_FLAG_NONE, sid[i], NGHTTP2_CANCEL), 0);
	int32_t g = raw_get(&r, "/echo");
	RAW_UNTIL(&r, r.status[raw_index(g)] != 0, WAIT_MS);
	cr_assert_eq(r.status[raw_index(g)], 200);
	cr_assert_eq(LOAD(app.requests), 1, "no refused or cancelled request reached the actor");
	raw_free(&r);
	stop();
}

Test(io_http2, max_concurrent_streams_is_advertised_and_kept)
{
	start(&(stage_t){.host_connections = 1, .lim = {.max_concurrent_streams = 4}});
	rawc_t r;
	raw_open(&r, 65535, true, 0);
	RAW_UNTIL(&r, nghttp2_session_get_remote_settings(r.ss, NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS) == 4,
		  WAIT_MS);
	raw_free(&r);
	/* curl keeps to it: never more than 4 in service, all answered. */
	for (uint32_t i = 0; i < 12; i++)
		fetch(i, "/delay");
	await_ends(12);
	for (uint32_t i = 0; i < 12; i++)
		cr_assert_eq(recs[i].status, 200, "call %u", i);
	cr_assert_leq(LOAD(app.peak), 4, "peak %u", LOAD(app.peak));
	stop();
}

Test(io_http2, rapid_resets_end_the_connection)
{
	start(&(stage_t){.lim = {.max_concurrent_streams = 4}});
	rawc_t r;
	raw_open(&r, 65535, true, 0);
	/* Each request goes out whole (it is dispatched), then is reset:
	 * 4 at once and 4 a second are allowed, 40 in a row are not. */
	for (int i = 0; i < 40 && raw_step(&r, 0); i++) {
		int32_t sid = raw_get(&r, "/hold");
		if (!raw_step(&r, 0))
			break;
		cr_assert_eq(nghttp2_submit_rst_stream(r.ss, NGHTTP2_FLAG_NONE, sid, NGHTTP2_CANCEL), 0);
	}
	RAW_UNTIL(&r, r.eof, WAIT_MS);
	cr_assert(r.goaway);
	cr_assert_eq(r.goaway_code, NGHTTP2_ENHANCE_YOUR_CALM);
	cr_assert_lt(LOAD(app.requests), 40);
	cr_assert_eq(iost().connections_dropped, 1);
	raw_free(&r);
	stop();
}

Test(io_http2, a_peer_that_grants_no_window_is_dropped)
{
	start(&(stage_t){.lim = {.max_output_bytes = 256u << 10}});
	rawc_t r;
	raw_open(&r, 65535, false, 0);
	raw_get(&r, "/flood");
	RAW_UNTIL(&r, r.eof, WAIT_MS);
	AWAIT(LOAD(app.gone) == 1 && LOAD(app.flood_done), WAIT_MS);
	cr_assert_eq(LOAD(app.gone_reason), PC_ELIMIT);
	cr_assert_eq(LOAD(app.flood_rc), PC_ENOTFOUND);
	cr_assert_lt(r.body[0], 2 * 65535, "the server sent past the window");
	cr_assert_eq(iost().connections_dropped, 1);
	AWAIT(iost().output_queued == 0 && iost().connections_live == 0, WAIT_MS);
	raw_free(&r);
	stop();
}

Test(io_http2, a_window_that_never_opens_stalls_out)
{
	start(&(stage_t){.lim = {.idle_timeout_ms = 400}});
	rawc_t r;
	raw_open(&r, 65535, false, 0);
	raw_get(&r, "/big");
	uint64_t t0 = now_ms();
	RAW_UNTIL(&r, r.eof, WAIT_MS);
	cr_assert_geq(now_ms() - t0, 350, "dropped before the stall timeout");
	cr_assert_eq(r.status[0], 200);
	cr_assert_lt(r.body[0], BIG_BODY);
	cr_assert_eq(iost().connections_dropped, 1);
	AWAIT(iost().output_queued == 0, WAIT_MS);
	raw_free(&r);
	stop();
}

Test(io_http2, malformed_http2_gets_goaway_and_close)
{
	start(&(stage_t){0});
	static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
	/* Garbage where SETTINGS must be; a HEADERS frame on stream 0; a
	 * frame far past the maximum size. */
	static const uint8_t bad[][18] = {
		{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
		{0, 0, 0, 4, 0, 0, 0, 0, 0, /* SETTINGS */ 0, 0, 0, 1, 5, 0, 0, 0, 0},
		{0, 0, 0, 4, 0, 0, 0, 0, 0, /* SETTINGS */ 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 1},
	};
	static const size_t lens[] = {12, 18, 18};
	for (size_t i = 0; i < 3; i++) {
		int fd = raw_connect();
		cr_assert_eq(send(fd, preface, sizeof(preface) - 1, MSG_NOSIGNAL), (ssize_t)sizeof(preface) - 1);
		cr_assert_eq(send(fd, bad[i], lens[i], MSG_NOSIGNAL), (ssize_t)lens[i]);
		bool goaway;
		cr_assert(closed_within(fd, 5000, &goaway), "case %zu: not closed", i);
		cr_assert(goaway, "case %zu: no GOAWAY", i);
		close(fd);
	}
	/* The server still serves, over both protocols. */
	fetch(0, "/echo");
	fetch_with(1, "/echo", &(fetch_opts_t){.http1 = true});
	await_ends(2);
	cr_assert_eq(recs[0].status, 200);
	cr_assert_eq(recs[1].status, 200);
	cr_assert_eq(LOAD(app.requests), 2);
	/* The malformed ones are closed; of the good ones the HTTP/2 one
	 * stays (the HTTP/1.1 answer said Connection: close). */
	AWAIT(iost().connections_live == 1, WAIT_MS);
	stop();
}

Test(io_http2, a_trickled_preface_is_still_http2)
{
	start(&(stage_t){0});
	rawc_t r;
	raw_open(&r, 65535, true, 30);
	raw_get(&r, "/echo");
	RAW_UNTIL(&r, r.closed[0], WAIT_MS);
	cr_assert_eq(r.status[0], 200);
	cr_assert_gt(r.body[0], 0);
	raw_free(&r);
	/* Begun like the preface, then not: HTTP/1.1 after all. */
	int fd = raw_connect();
	const char *parts[] = {"P", "R", "OPFIND /echo HTTP/1.1\r\nHost: x\r\n\r\n"};
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(send(fd, parts[i], strlen(parts[i]), MSG_NOSIGNAL), (ssize_t)strlen(parts[i]));
		sleep_ms(20);
	}
	char buf[64] = {0};
	struct timeval tv = {5, 0};
	cr_assert_eq(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
	cr_assert_gt(recv(fd, buf, sizeof(buf) - 1, 0), 12);
	cr_assert(strncmp(buf, "HTTP/1.1 200", 12) == 0, "%s", buf);
	close(fd);
	stop();
}

/* Sends a raw HTTP/1.1 request; returns the start of the answer. */
static void raw_http1(const char *req, char *buf, size_t cap)
{
	int fd = raw_connect();
	struct timeval tv = {5, 0};
	cr_assert_eq(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
	cr_assert_eq(send(fd, req, strlen(req), MSG_NOSIGNAL), (ssize_t)strlen(req));
	memset(buf, 0, cap);
	cr_assert_gt(recv(fd, buf, cap - 1, 0), 0);
	close(fd);
}

Test(io_http2, the_h2c_upgrade_needs_good_settings)
{
	start(&(stage_t){0});
	char buf[512];
	/* HTTP2-Settings that are not base64url: refused. */
	raw_http1("GET /echo HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\n"
		  "Upgrade: h2c\r\nHTTP2-Settings: !!\r\n\r\n",
		  buf, sizeof(buf));
	cr_assert(strncmp(buf, "HTTP/1.1 400", 12) == 0, "%s", buf);
	/* Base64url, but not a SETTINGS payload (not a multiple of 6). */
	raw_http1("GET /echo HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\n"
		  "Upgrade: h2c\r\nHTTP2-Settings: AAMA\r\n\r\n",
		  buf, sizeof(buf));
	cr_assert(strncmp(buf, "HTTP/1.1 400", 12) == 0, "%s", buf);
	/* No HTTP2-Settings: an HTTP/1.1 request like any other. */
	raw_http1("GET /echo HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n", buf,
		  sizeof(buf));
	cr_assert(strncmp(buf, "HTTP/1.1 200", 12) == 0, "%s", buf);
	cr_assert_not_null(strstr(buf, "h=1"), "%s", buf);
	/* Good settings (an empty payload): 101, then HTTP/2. */
	raw_http1("GET /echo HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\n"
		  "Upgrade: h2c\r\nHTTP2-Settings: \r\n\r\n",
		  buf, sizeof(buf));
	cr_assert(strncmp(buf, "HTTP/1.1 101", 12) == 0, "%s", buf);
	stop();
}

Test(io_http2, an_idle_connection_ends_with_goaway)
{
	start(&(stage_t){.lim = {.idle_timeout_ms = 300, .header_timeout_ms = 300}});
	rawc_t r;
	raw_open(&r, 65535, true, 0);
	raw_get(&r, "/echo");
	RAW_UNTIL(&r, r.closed[0], WAIT_MS);
	uint64_t t0 = now_ms();
	RAW_UNTIL(&r, r.eof, WAIT_MS);
	cr_assert(r.goaway);
	cr_assert_geq(now_ms() - t0, 250);
	raw_free(&r);
	cr_assert_eq(iost().connections_dropped, 0, "served, then idle: a normal end");
	/* One that never asks anything holds a slot: dropped. */
	raw_open(&r, 65535, true, 0);
	RAW_UNTIL(&r, r.eof, WAIT_MS);
	cr_assert(r.goaway);
	raw_free(&r);
	cr_assert_eq(iost().connections_dropped, 1);
	stop();
}

/* An upgraded connection (h2c: its first request is stream 1) idles out
 * like any other once its answers are out. */
Test(io_http2, an_upgraded_connection_idles_out)
{
	start(&(stage_t){.lim = {.idle_timeout_ms = 300}});
	fetch(0, "/echo");
	await_ends(1);
	cr_assert_eq(recs[0].status, 200);
	AWAIT(iost().connections_live == 0, WAIT_MS);
	cr_assert_eq(iost().connections_dropped, 0, "served, then idle: a normal end");
	stop();
}

Test(io_http2, server_free_ends_open_streams_with_gone)
{
	start(&(stage_t){0});
	for (uint32_t i = 0; i < 3; i++)
		fetch(i, "/hold");
	AWAIT(LOAD(app.held) == 3, WAIT_MS);
	pc_http_server_free(srv);
	srv = NULL;
	AWAIT(LOAD(app.gone) == 3, WAIT_MS);
	cr_assert_eq(LOAD(app.gone_reason), PC_ESTOPPED);
	await_ends(3);
	for (uint32_t i = 0; i < 3; i++)
		cr_assert_neq(recs[i].transport, PC_HTTP_OK, "call %u", i);
	AWAIT(iost().connections_live == 0, WAIT_MS);
	stop();
}

/* A few thousand streams over a handful of connections: answers at once,
 * streamed, later; a random third cancelled at a random moment. Every
 * call ends once; every one not cancelled is whole and right; the server
 * reports each request answered or gone, never both. */
Test(io_http2, stress_with_random_resets)
{
	enum { N = 3000 };
	uint64_t seed = test_seed();
	/* Room for every stream on one connection per I/O thread. */
	start(&(stage_t){.threads = 2, .client_streams = 4096, .lim = {.max_concurrent_streams = 4096}});
	/* One request per thread first, so that the connections are HTTP/2
	 * already (no reset can fall on an upgrade still under way). */
	fetch(N, "/echo");
	fetch(N + 1, "/echo");
	await_ends(2);
	static bool cancelled[N];
	memset(cancelled, 0, sizeof(cancelled));
	/* A third are chosen: some cancelled at once (the request may never
	 * leave), the others over the next ~60 ms, mostly mid-answer. */
	for (uint32_t i = 0; i < N; i++) {
		char path[64];
		snprintf(path, sizeof(path), "/stress?t=%u&m=%u", i, rnd_below(&seed, 4));
		fetch(i, path);
		cancelled[i] = rnd_below(&seed, 3) == 0;
		if (cancelled[i] && rnd_below(&seed, 4) == 0)
			pc_http_call_cancel(calls[i]);
	}
	for (uint32_t i = 0; i < N; i++) {
		if (cancelled[i])
			pc_http_call_cancel(calls[i]); /* a second cancel is a no-op */
		if (i % 50 == 49)
			sleep_ms(1);
	}
	await_ends(N + 2);
	uint32_t ncancel = 0;
	for (uint32_t i = 0; i < N; i++) {
		rec_t *r = &recs[i];
		cr_assert_eq(r->ends, 1, "call %u: %u ENDs", i, r->ends);
		cr_assert_not(r->order_bad, "call %u", i);
		ncancel += cancelled[i];
		if (cancelled[i] && r->transport == PC_HTTP_CANCELLED)
			continue;
		char want[96];
		stress_body(i, want, sizeof(want));
		cr_assert_eq(r->transport, PC_HTTP_OK, "call %u: %s (PINCER_TEST_SEED=0x%" PRIx64 ")", i,
			     pc_http_transport_name(r->transport), top_seed);
		cr_assert_str_eq(r->body ? r->body : "", want, "call %u", i);
	}
	/* The actor finished every request; only reset ones went, and an
	 * answer was refused only for a request that went. */
	AWAIT(LOAD(app.in_service) == 0, WAIT_MS);
	cr_assert_leq(LOAD(app.gone), ncancel);
	cr_assert_leq(LOAD(app.refused), LOAD(app.gone));
	cr_assert_eq(LOAD(app.requests), LOAD(app.h2_requests));
	cr_assert_eq(iost().connections_accepted, 2, "%" PRIu64 " connections", iost().connections_accepted);
	stop();
	cr_log_info("stress: %u calls, %u chosen for cancel, %u GONE", N, ncancel, app.gone);
}
