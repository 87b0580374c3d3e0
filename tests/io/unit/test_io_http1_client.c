/*
 * The keep-alive HTTP/1.1 client connection (io/http1_client.h) against a
 * scripted raw-socket server on 127.0.0.1 that sends exact bytes and
 * closes when told: requests one after another on one connection, chunked
 * and EOF-ended answers, `Connection: close`, a kept connection the server
 * closed (and the one resend), one request at a time, a refused connect,
 * a cut, a malformed and an interim answer, HEAD, release and pc_io_free
 * with a request in flight, backpressure, bad input, the lifecycle table,
 * and many owners at once. Every wait is bounded.
 */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "io/http1_client.h"
#include "io/http_client.h"
#include "io/io.h"
#include "test_util.h"

/* ---- the server: one thread per connection, answers by script ---- */

#define MAX_CONNS 64
#define MAX_REQS 16

typedef struct req {
	uint32_t conn;  /* which accepted connection, from 1 */
	char head[2048]; /* the request line and headers, NUL-terminated */
	char body[1024];
	size_t body_len;
} req_t;

/* Answers request `nth` (from 0) of connection `r->conn`; false closes
 * the connection. */
typedef bool (*answer_fn)(int fd, const req_t *r, uint32_t nth);

static struct server {
	int lfd;
	uint16_t port;
	int stop_pipe[2]; /* readable once server_stop begins: every wait ends */
	answer_fn answer;
	bool stop;          /* atomic */
	bool gate;          /* atomic: answer_gated waits for it */
	bool big_done;      /* atomic: answer_big wrote all of its answer */
	uint32_t accepted;  /* atomic */
	uint32_t closed;    /* atomic: connections ended on the server's side */
	uint32_t requests;  /* under mu, read atomically */
	uint64_t written;   /* atomic: bytes sent */
	pthread_t acceptor;
	pthread_t conns[MAX_CONNS];
	int fds[MAX_CONNS];
	uint32_t nconns; /* acceptor only */
	pthread_mutex_t mu;
	req_t reqs[MAX_REQS]; /* the first requests, under mu */
} srv = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* The value of header `name` in a request head, or false. */
static bool header_value(const char *head, const char *name, char *out, size_t cap)
{
	size_t nl = strlen(name);
	for (const char *p = strstr(head, "\r\n"); p; p = strstr(p + 2, "\r\n")) {
		const char *line = p + 2;
		if (strncasecmp(line, name, nl) != 0 || line[nl] != ':')
			continue;
		const char *v = line + nl + 1;
		while (*v == ' ')
			v++;
		size_t vl = strcspn(v, "\r\n");
		if (vl >= cap)
			vl = cap - 1;
		memcpy(out, v, vl);
		out[vl] = 0;
		return true;
	}
	return false;
}

/* Waits up to 20 ms for `events` on fd; false once the server stops. */
static bool wait_fd(int fd, short events)
{
	struct pollfd pf[2] = {{fd, events, 0}, {srv.stop_pipe[0], POLLIN, 0}};
	(void)poll(pf, 2, 20);
	return !LOAD(srv.stop);
}

/* Sends all of p, counting it; false when the peer went or the server
 * stops (a client that does not read cannot hold a thread for ever). */
static bool put(int fd, const void *p, size_t n)
{
	const char *s = p;
	while (n) {
		ssize_t w = send(fd, s, n, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (w > 0) {
			s += w;
			n -= (size_t)w;
			add(&srv.written, (uint64_t)w);
		} else if (w < 0 && errno == EINTR) {
			continue;
		} else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			if (!wait_fd(fd, POLLOUT))
				return false;
		} else {
			return false;
		}
	}
	return true;
}

static bool put_str(int fd, const char *s) { return put(fd, s, strlen(s)); }

static bool respond(int fd, int status, const char *extra, const void *body, size_t len)
{
	char head[256];
	snprintf(head, sizeof(head), "HTTP/1.1 %d X\r\n%sContent-Length: %zu\r\n\r\n", status, extra, len);
	return put_str(fd, head) && put(fd, body, len);
}

static void *conn_main(void *arg)
{
	uint32_t i = (uint32_t)(uintptr_t)arg;
	int fd = srv.fds[i];
	char buf[8192];
	size_t have = 0;
	uint32_t nth = 0;
	for (;;) {
		/* a whole request in the buffer: record it, answer it */
		char *end = memmem(buf, have, "\r\n\r\n", 4);
		if (end) {
			size_t hlen = (size_t)(end - buf) + 4;
			req_t r = {.conn = i + 1};
			CHECK(hlen < sizeof(r.head), "request head too long");
			if (hlen >= sizeof(r.head))
				break;
			memcpy(r.head, buf, hlen);
			char cl[32];
			size_t blen = header_value(r.head, "Content-Length", cl, sizeof(cl)) ? strtoul(cl, NULL, 10) : 0;
			CHECK(blen < sizeof(r.body), "request body too long");
			if (blen >= sizeof(r.body))
				break;
			if (have >= hlen + blen) {
				memcpy(r.body, buf + hlen, blen);
				r.body_len = blen;
				memmove(buf, buf + hlen + blen, have - hlen - blen);
				have -= hlen + blen;
				pthread_mutex_lock(&srv.mu);
				if (srv.requests < MAX_REQS)
					srv.reqs[srv.requests] = r;
				INC(srv.requests);
				pthread_mutex_unlock(&srv.mu);
				if (!srv.answer(fd, &r, nth++))
					break;
				continue;
			}
		}
		if (have == sizeof(buf) || !wait_fd(fd, POLLIN))
			break;
		ssize_t n = recv(fd, buf + have, sizeof(buf) - have, MSG_DONTWAIT);
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
			continue;
		if (n <= 0)
			break;
		have += (size_t)n;
	}
	close(fd);
	INC(srv.closed);
	return NULL;
}

static void *accept_main(void *arg)
{
	(void)arg;
	while (wait_fd(srv.lfd, POLLIN)) {
		int fd = accept(srv.lfd, NULL, NULL);
		if (fd < 0)
			continue;
		if (srv.nconns == MAX_CONNS) {
			CHECK(false, "more than %d connections", MAX_CONNS);
			close(fd);
			continue;
		}
		/* so that separate writes reach the client as separate reads */
		int one = 1;
		(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		/* counted before the connection can answer anything */
		INC(srv.accepted);
		uint32_t i = srv.nconns;
		srv.fds[i] = fd;
		if (pthread_create(&srv.conns[i], NULL, conn_main, (void *)(uintptr_t)i) != 0) {
			CHECK(false, "pthread_create");
			close(fd);
			continue;
		}
		srv.nconns = i + 1;
	}
	return NULL;
}

static void server_start(answer_fn answer)
{
	pthread_mutex_lock(&srv.mu);
	memset(srv.reqs, 0, sizeof(srv.reqs));
	srv.requests = 0;
	pthread_mutex_unlock(&srv.mu);
	srv.answer = answer;
	srv.nconns = 0;
	STORE(srv.stop, false);
	STORE(srv.gate, false);
	STORE(srv.big_done, false);
	STORE(srv.accepted, 0);
	STORE(srv.closed, 0);
	STORE(srv.written, 0);
	cr_assert_eq(pipe(srv.stop_pipe), 0);
	srv.lfd = socket(AF_INET, SOCK_STREAM, 0);
	cr_assert_geq(srv.lfd, 0);
	int one = 1;
	(void)setsockopt(srv.lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	/* a connection reset between poll and accept must not block accept */
	cr_assert_eq(fcntl(srv.lfd, F_SETFL, O_NONBLOCK), 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof(a);
	cr_assert_eq(bind(srv.lfd, (struct sockaddr *)&a, sizeof(a)), 0);
	cr_assert_eq(listen(srv.lfd, 128), 0);
	cr_assert_eq(getsockname(srv.lfd, (struct sockaddr *)&a, &al), 0);
	srv.port = ntohs(a.sin_port);
	cr_assert_eq(pthread_create(&srv.acceptor, NULL, accept_main, NULL), 0);
}

static void server_stop(void)
{
	STORE(srv.stop, true);
	cr_assert_eq(write(srv.stop_pipe[1], "x", 1), 1);
	pthread_join(srv.acceptor, NULL);
	for (uint32_t i = 0; i < srv.nconns; i++)
		pthread_join(srv.conns[i], NULL);
	close(srv.lfd);
	close(srv.stop_pipe[0]);
	close(srv.stop_pipe[1]);
}

/* Request i as the server read it (a copy). */
static req_t server_req(uint32_t i)
{
	cr_assert_lt(i, MAX_REQS);
	pthread_mutex_lock(&srv.mu);
	req_t r = srv.reqs[i];
	pthread_mutex_unlock(&srv.mu);
	return r;
}

/* ---- the scripts ---- */

/* Keep-alive, Content-Length: "re:" and the request's body, with the
 * status the request's X-Status asks for. */
static bool answer_keep(int fd, const req_t *r, uint32_t nth)
{
	(void)nth;
	char st[16], body[sizeof(r->body) + 3];
	int status = header_value(r->head, "X-Status", st, sizeof(st)) ? atoi(st) : 200;
	memcpy(body, "re:", 3);
	memcpy(body + 3, r->body, r->body_len);
	return respond(fd, status, "", body, r->body_len + 3);
}

/* A chunked answer in pieces that cut through the size lines and the
 * data, each its own write. */
static bool answer_chunked(int fd, const req_t *r, uint32_t nth)
{
	(void)r;
	(void)nth;
	static const char *const pieces[] = {
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel", "lo\r\n", "6", "\r\n wor",
		"ld\r\n", "a\r\n0123456789\r\n0\r", "\n\r\n",
	};
	for (size_t i = 0; i < sizeof(pieces) / sizeof(pieces[0]); i++) {
		if (!put_str(fd, pieces[i]))
			return false;
		/* not a synchronisation: a pause so the pieces are read apart */
		sleep_ms(2);
	}
	return true;
}

static bool answer_close(int fd, const req_t *r, uint32_t nth)
{
	(void)nth;
	respond(fd, 200, "Connection: close\r\n", r->body, r->body_len);
	return false;
}

/* A keep-alive answer, then the server closes the kept connection. */
static bool answer_keep_then_close(int fd, const req_t *r, uint32_t nth)
{
	answer_keep(fd, r, nth);
	return false;
}

/* Connection 1 answers its first request and drops its second unanswered
 * (closed meanwhile, as a kept connection is); connection 2 answers, or
 * with X-Drop drops that too. */
static bool answer_drop_second(int fd, const req_t *r, uint32_t nth)
{
	char v[8];
	if ((r->conn == 1 && nth == 1) || (r->conn > 1 && header_value(r->head, "X-Drop", v, sizeof(v))))
		return false;
	return answer_keep(fd, r, nth);
}

/* Answers once the test opens the gate. */
static bool answer_gated(int fd, const req_t *r, uint32_t nth)
{
	while (!LOAD(srv.gate))
		if (!wait_fd(srv.stop_pipe[0], POLLIN))
			return false;
	return answer_keep(fd, r, nth);
}

static bool answer_cut(int fd, const req_t *r, uint32_t nth)
{
	(void)r;
	(void)nth;
	put_str(fd, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789");
	return false;
}

static bool answer_garbage(int fd, const req_t *r, uint32_t nth)
{
	(void)r;
	(void)nth;
	put_str(fd, "garbage\r\n\r\n");
	return true;
}

/* No length: the body ends where the connection does. */
static bool answer_until_eof(int fd, const req_t *r, uint32_t nth)
{
	(void)r;
	(void)nth;
	if (put_str(fd, "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nthe body, ")) {
		sleep_ms(2); /* not a synchronisation: two reads */
		put_str(fd, "to the end");
	}
	return false;
}

static bool answer_silent(int fd, const req_t *r, uint32_t nth)
{
	(void)fd;
	(void)r;
	(void)nth;
	return true;
}

#define BIG ((size_t)1 << 20)

static uint8_t big_byte(size_t i) { return (uint8_t)(i * 31u + (i >> 13)); }

/* 1 MiB in 16 KiB writes, as fast as the client takes it. */
static bool answer_big(int fd, const req_t *r, uint32_t nth)
{
	(void)r;
	(void)nth;
	char head[128];
	snprintf(head, sizeof(head), "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\n\r\n", BIG);
	if (!put_str(fd, head))
		return false;
	uint8_t piece[16384];
	for (size_t off = 0; off < BIG; off += sizeof(piece)) {
		for (size_t i = 0; i < sizeof(piece); i++)
			piece[i] = big_byte(off + i);
		if (!put(fd, piece, sizeof(piece)))
			return false;
	}
	STORE(srv.big_done, true);
	return true;
}

static bool answer_early_hints(int fd, const req_t *r, uint32_t nth)
{
	(void)r;
	(void)nth;
	/* a 1xx has no body, whatever a length in it says (RFC 9110 15.2) */
	if (!put_str(fd, "HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\nContent-Length: 3\r\n\r\n"))
		return false;
	sleep_ms(2); /* not a synchronisation: the interim answer read alone */
	return put_str(fd, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
}

/* A HEAD gets the length its GET would have, and no body. */
static bool answer_head(int fd, const req_t *r, uint32_t nth)
{
	if (strncmp(r->head, "HEAD ", 5) == 0)
		return put_str(fd, "HTTP/1.1 200 OK\r\nContent-Length: 1234\r\n\r\n");
	return answer_keep(fd, r, nth);
}

/* ---- the owner: records what it gets ---- */

enum { MSG_CONSUME = 1, MSG_GO };

#define MAX_ANSWERS 8

/* What came for one request: the messages between two ENDs, and END. */
typedef struct answer {
	uint32_t heads, datas;
	int32_t status;     /* HEAD's */
	char headers[512];
	bool tagged;
	uint64_t tag;       /* the first message's */
	bool mixed;         /* a message with another tag */
	char *body;         /* every DATA byte, in order */
	size_t len, cap;
	pc_http_end_msg_t end;
} answer_t;

static struct seen {
	pc_h1c_t *c;         /* for pc_h1c_consumed; NULL once released */
	bool consume;        /* report DATA consumed as it comes */
	uint64_t unconsumed;
	uint32_t heads, datas, ends; /* atomic */
	uint64_t bytes;      /* atomic: DATA bytes */
	answer_t a[MAX_ANSWERS];
} seen;
static pthread_mutex_t seen_mu = PTHREAD_MUTEX_INITIALIZER;

static void note_tag(answer_t *a, uint64_t tag)
{
	if (!a->tagged) {
		a->tagged = true;
		a->tag = tag;
	} else if (a->tag != tag) {
		a->mixed = true;
	}
}

static void consume_all(void)
{
	if (seen.c && seen.unconsumed)
		pc_h1c_consumed(seen.c, seen.unconsumed);
	seen.unconsumed = 0;
}

static int owner_receive(pc_ctx_t *ctx, void *state, pc_msg_t *msg)
{
	(void)ctx;
	(void)state;
	pthread_mutex_lock(&seen_mu);
	uint32_t i = LOAD(seen.ends);
	answer_t *a = i < MAX_ANSWERS ? &seen.a[i] : NULL;
	if (msg->type == MSG_CONSUME) {
		seen.consume = true;
		consume_all();
	} else if (!a) {
		CHECK(false, "more than %d answers", MAX_ANSWERS);
	} else if (msg->type == PC_MSG_HTTP_RESPONSE_HEAD) {
		const pc_http_head_msg_t *h = pc_msg_cdata(msg);
		note_tag(a, h->tag);
		CHECK(!a->heads && !a->datas, "HEAD after HEAD or DATA");
		CHECK(h->headers[h->headers_len] == 0, "headers NUL-terminated");
		a->status = h->status;
		snprintf(a->headers, sizeof(a->headers), "%s", h->headers);
		a->heads++;
		INC(seen.heads);
	} else if (msg->type == PC_MSG_HTTP_RESPONSE_DATA) {
		const pc_http_data_msg_t *d = pc_msg_cdata(msg);
		note_tag(a, d->tag);
		CHECK(a->heads == 1, "DATA before HEAD");
		if (a->len + d->len > a->cap) {
			a->cap = 2 * (a->len + d->len);
			a->body = realloc(a->body, a->cap);
		}
		memcpy(a->body + a->len, d->data, d->len);
		a->len += d->len;
		a->datas++;
		seen.unconsumed += d->len;
		if (seen.consume)
			consume_all();
		add(&seen.bytes, d->len);
		INC(seen.datas);
	} else if (msg->type == PC_MSG_HTTP_RESPONSE_END) {
		memcpy(&a->end, pc_msg_cdata(msg), sizeof(a->end));
		note_tag(a, a->end.tag);
		INC(seen.ends);
	}
	pthread_mutex_unlock(&seen_mu);
	return 0;
}

static const pc_behavior_t owner_b = {.name = "h1c-owner", .receive = owner_receive};

static pc_runtime_t *rt;
static pc_io_t *io;
static pc_actor_t *owner;
static char url[128];

static void start(answer_fn answer)
{
	pthread_mutex_lock(&seen_mu);
	memset(&seen, 0, sizeof(seen));
	seen.consume = true;
	pthread_mutex_unlock(&seen_mu);
	reset_failures();
	server_start(answer);
	snprintf(url, sizeof(url), "http://127.0.0.1:%u/v1/chat?x=1#frag", (unsigned)srv.port);
	rt = start_rt(2);
	pc_io_config_t ic = {.threads = 2};
	cr_assert_eq(pc_io_new(rt, &ic, &io), 0);
	cr_assert_eq(pc_spawn(rt, &owner_b, NULL, &owner), 0);
}

static void stop(void)
{
	pc_io_free(io); /* first: the server's threads then see their peers go */
	io = NULL;
	server_stop();
	pc_actor_release(owner);
	assert_no_failures();
	FREE_RUNTIME_CHECKED(rt);
	for (int i = 0; i < MAX_ANSWERS; i++)
		free(seen.a[i].body);
}

static pc_h1c_t *open_c(size_t max_buffered)
{
	pc_h1c_options_t o = {.url = url, .connect_timeout_ms = 3000, .max_buffered = max_buffered};
	pc_h1c_t *c = NULL;
	cr_assert_eq(pc_h1c_open(io, &o, owner, &c), 0);
	pthread_mutex_lock(&seen_mu);
	seen.c = c;
	pthread_mutex_unlock(&seen_mu);
	return c;
}

/* The owner stops using the handle before it goes. */
static void release_c(pc_h1c_t *c)
{
	pthread_mutex_lock(&seen_mu);
	seen.c = NULL;
	pthread_mutex_unlock(&seen_mu);
	pc_h1c_release(c);
}

static int request(pc_h1c_t *c, uint64_t tag, const char *method, const char *body, const char *const *headers,
		   size_t header_count)
{
	pc_h1c_request_t rq = {.method = method, .headers = headers, .header_count = header_count, .body = body,
			       .body_len = body ? strlen(body) : 0, .tag = tag};
	return pc_h1c_request(c, &rq);
}

/* Answer i, once its END is in (no message for it comes after END). */
static const answer_t *answer_at(uint32_t i)
{
	cr_assert_lt(i, MAX_ANSWERS);
	AWAIT(LOAD(seen.ends) > i, 5000);
	return &seen.a[i];
}

/* Answer i ended with `transport` after one HEAD (status) and this body;
 * status 0: no HEAD. */
static void expect_answer(uint32_t i, uint64_t tag, pc_http_transport_t transport, int32_t status, const char *body)
{
	const answer_t *a = answer_at(i);
	cr_assert(!a->mixed, "answer %u: messages with different tags", i);
	cr_assert_eq(a->end.tag, tag, "answer %u: tag %llu, want %llu", i, (unsigned long long)a->end.tag,
		     (unsigned long long)tag);
	cr_assert_eq(a->end.transport, transport, "answer %u: transport %s (%s), want %s", i,
		     pc_http_transport_name(a->end.transport), a->end.error, pc_http_transport_name(transport));
	cr_assert_eq(a->end.status, status, "answer %u: status %d", i, a->end.status);
	cr_assert_eq(a->end.curl_code, 0);
	cr_assert_eq(a->heads, status ? 1u : 0u, "answer %u: %u HEADs", i, a->heads);
	if (status)
		cr_assert_eq(a->status, status);
	if (transport == PC_HTTP_OK)
		cr_assert_eq(a->end.result, 0);
	else
		cr_assert_neq(a->end.result, 0);
	if (body) {
		cr_assert_eq(a->len, strlen(body), "answer %u: %zu body bytes, want %zu", i, a->len, strlen(body));
		cr_assert(a->len == 0 || memcmp(a->body, body, a->len) == 0, "answer %u: body %.*s", i, (int)a->len,
			  a->body);
		cr_assert_eq(a->end.bytes, a->len);
	}
}

/* ---- the tests ---- */

Test(http1_client, requests_one_after_another_share_one_connection)
{
	start(answer_keep);
	pc_h1c_t *c = open_c(0);
	static const char *const hdrs[][2] = {
		{"Authorization: Bearer k", "X-Status: 200"},
		{"Authorization: Bearer k", "X-Status: 201"},
		{"Authorization: Bearer k", "X-Status: 404"},
	};
	static const char *const bodies[] = {"one", "two", "three"};
	for (uint32_t i = 0; i < 3; i++) {
		cr_assert_eq(request(c, 100 + i, NULL, bodies[i], hdrs[i], 2), 0);
		AWAIT(LOAD(seen.ends) == i + 1, 5000);
	}
	expect_answer(0, 100, PC_HTTP_OK, 200, "re:one");
	expect_answer(1, 101, PC_HTTP_OK, 201, "re:two");
	expect_answer(2, 102, PC_HTTP_OK, 404, "re:three");
	cr_assert(strstr(seen.a[0].headers, "Content-Length: 6\n"), "headers: %s", seen.a[0].headers);
	cr_assert_eq(LOAD(srv.accepted), 1);
	cr_assert_eq(pc_h1c_connections(c), 1);
	char host[64];
	snprintf(host, sizeof(host), "\r\nHost: 127.0.0.1:%u\r\n", (unsigned)srv.port);
	for (uint32_t i = 0; i < 3; i++) {
		req_t r = server_req(i);
		cr_assert_eq(r.conn, 1);
		/* the URL's path and query, not its fragment */
		cr_assert_eq(strncmp(r.head, "POST /v1/chat?x=1 HTTP/1.1\r\n", 28), 0, "request: %s", r.head);
		cr_assert(strstr(r.head, host), "request: %s", r.head);
		cr_assert(strstr(r.head, "\r\nAuthorization: Bearer k\r\n"), "request: %s", r.head);
		char want[64];
		snprintf(want, sizeof(want), "\r\n%s\r\n", hdrs[i][1]);
		cr_assert(strstr(r.head, want), "request: %s", r.head);
		snprintf(want, sizeof(want), "\r\nContent-Length: %zu\r\n", strlen(bodies[i]));
		cr_assert(strstr(r.head, want), "request: %s", r.head);
		cr_assert_eq(r.body_len, strlen(bodies[i]));
		cr_assert_eq(memcmp(r.body, bodies[i], r.body_len), 0);
	}
	release_c(c);
	stop();
}

Test(http1_client, a_chunked_answer_in_pieces_arrives_whole)
{
	start(answer_chunked);
	pc_h1c_t *c = open_c(0);
	cr_assert_eq(request(c, 7, "GET", NULL, NULL, 0), 0);
	expect_answer(0, 7, PC_HTTP_OK, 200, "hello world0123456789");
	/* the connection outlives a chunked answer too */
	cr_assert_eq(request(c, 8, "GET", NULL, NULL, 0), 0);
	expect_answer(1, 8, PC_HTTP_OK, 200, "hello world0123456789");
	cr_assert_eq(LOAD(srv.accepted), 1);
	cr_assert_eq(pc_h1c_connections(c), 1);
	/* a GET without a body says no length */
	req_t r = server_req(0);
	cr_assert_eq(strncmp(r.head, "GET /v1/chat?x=1 HTTP/1.1\r\n", 27), 0, "request: %s", r.head);
	cr_assert_null(strstr(r.head, "Content-Length"), "request: %s", r.head);
	release_c(c);
	stop();
}

Test(http1_client, connection_close_answers_take_a_new_connection_each)
{
	start(answer_close);
	pc_h1c_t *c = open_c(0);
	for (uint32_t i = 0; i < 3; i++) {
		cr_assert_eq(request(c, i, NULL, "x", NULL, 0), 0);
		AWAIT(LOAD(seen.ends) == i + 1, 5000);
		expect_answer(i, i, PC_HTTP_OK, 200, "x");
	}
	cr_assert_eq(LOAD(srv.accepted), 3);
	cr_assert_eq(pc_h1c_connections(c), 3);
	for (uint32_t i = 0; i < 3; i++)
		cr_assert_eq(server_req(i).conn, i + 1);
	release_c(c);
	stop();
}

Test(http1_client, a_kept_connection_the_server_closed_is_replaced)
{
	start(answer_keep_then_close);
	pc_h1c_t *c = open_c(0);
	cr_assert_eq(request(c, 1, NULL, "a", NULL, 0), 0);
	expect_answer(0, 1, PC_HTTP_OK, 200, "re:a");
	/* the server has closed the kept connection before the next request */
	AWAIT(LOAD(srv.closed) == 1, 5000);
	cr_assert_eq(request(c, 2, NULL, "b", NULL, 0), 0);
	expect_answer(1, 2, PC_HTTP_OK, 200, "re:b");
	cr_assert_eq(LOAD(srv.accepted), 2);
	cr_assert_eq(pc_h1c_connections(c), 2);
	release_c(c);
	stop();
}

Test(http1_client, a_request_the_kept_connection_dropped_is_sent_once_more)
{
	start(answer_drop_second);
	pc_h1c_t *c = open_c(0);
	cr_assert_eq(request(c, 1, NULL, "a", NULL, 0), 0);
	expect_answer(0, 1, PC_HTTP_OK, 200, "re:a");
	/* read on the kept connection, closed without an answer: sent again */
	cr_assert_eq(request(c, 2, NULL, "b", NULL, 0), 0);
	expect_answer(1, 2, PC_HTTP_OK, 200, "re:b");
	cr_assert_eq(LOAD(srv.requests), 3);
	cr_assert_eq(server_req(1).conn, 1);
	cr_assert_eq(server_req(2).conn, 2);
	cr_assert_eq(pc_h1c_connections(c), 2);
	/* on connection 2 (kept), dropped again and again: only once more */
	static const char *const drop[] = {"X-Drop: 1"};
	cr_assert_eq(request(c, 3, NULL, "c", drop, 1), 0);
	expect_answer(2, 3, PC_HTTP_CLOSED, 0, "");
	cr_assert_eq(LOAD(srv.requests), 5);
	cr_assert_eq(LOAD(srv.accepted), 3);
	cr_assert_eq(pc_h1c_connections(c), 3);
	release_c(c);
	stop();
}

Test(http1_client, one_request_at_a_time)
{
	start(answer_gated);
	pc_h1c_t *c = open_c(0);
	cr_assert_eq(request(c, 1, NULL, "a", NULL, 0), 0);
	AWAIT(LOAD(srv.requests) == 1, 5000);
	cr_assert_eq(request(c, 2, NULL, "b", NULL, 0), PC_ESTATE);
	STORE(srv.gate, true);
	expect_answer(0, 1, PC_HTTP_OK, 200, "re:a");
	cr_assert_eq(request(c, 3, NULL, "c", NULL, 0), 0);
	expect_answer(1, 3, PC_HTTP_OK, 200, "re:c");
	/* the refused one said nothing and sent nothing */
	cr_assert_eq(LOAD(seen.ends), 2);
	cr_assert_eq(LOAD(srv.requests), 2);
	release_c(c);
	stop();
}

Test(http1_client, a_refused_connect_is_a_connect_failure)
{
	start(answer_keep);
	/* a port nobody listens on: bound, then closed */
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof(a);
	cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	cr_assert_eq(getsockname(fd, (struct sockaddr *)&a, &al), 0);
	close(fd);
	snprintf(url, sizeof(url), "http://127.0.0.1:%u/", (unsigned)ntohs(a.sin_port));
	pc_h1c_t *c = open_c(0);
	cr_assert_eq(request(c, 9, NULL, "a", NULL, 0), 0);
	expect_answer(0, 9, PC_HTTP_CONNECT, 0, "");
	cr_assert_eq(seen.a[0].end.result, PC_ESYS);
	cr_assert(strstr(seen.a[0].end.error, strerror(ECONNREFUSED)), "error: %s", seen.a[0].end.error);
	cr_assert_eq(LOAD(seen.heads), 0);
	cr_assert_eq(pc_h1c_connections(c), 0);
	release_c(c);
	stop();
}

Test(http1_client, an_answer_cut_mid_body_is_closed)
{
	start(answer_cut);
	pc_h1c_t *c = open_c(0);
	cr_assert_eq(request(c, 4, NULL, "a", NULL, 0), 0);
	expect_answer(0, 4, PC_HTTP_CLOSED, 200, "0123456789");
	/* the cut answer was not sent again */
	cr_assert_eq(LOAD(srv.requests), 1);
	release_c(c);
	stop();
}

Test(http1_client, a_malformed_answer_is_malformed)
{
	start(answer_garbage);
	pc_h1c_t *c = open_c(0);
	cr_assert_eq(request(c, 5, NULL, "a", NULL, 0), 0);
	expect_answer(0, 5, PC_HTTP_MALFORMED, 0, "");
	cr_assert_eq(seen.a[0].end.result, PC_EINVAL);
	/* the connection is not kept after it */
	AWAIT(LOAD(srv.closed) == 1, 5000);
	release_c(c);
	stop();
}

Test(http1_client, an_answer_without_a_length_ends_at_eof)
{
	start(answer_until_eof);
	pc_h1c_t *c = open_c(0);
	cr_assert_eq(request(c, 6, NULL, "a", NULL, 0), 0);
	expect_answer(0, 6, PC_HTTP_OK, 200, "the body, to the end");
	/* and the next request takes a new connection */
	cr_assert_eq(request(c, 7, NULL, "b", NULL, 0), 0);
	expect_answer(1, 7, PC_HTTP_OK, 200, "the body, to the end");
	cr_assert_eq(LOAD(srv.accepted), 2);
	release_c(c);
	stop();
}

Test(http1_client, release_with_a_request_in_flight_cancels_it)
{
	start(answer_silent);
	int fds = open_fds();
	pc_h1c_t *c = open_c(0);
	cr_assert_eq(request(c, 10, NULL, "a", NULL, 0), 0);
	AWAIT(LOAD(srv.requests) == 1, 5000);
	release_c(c);
	expect_answer(0, 10, PC_HTTP_CANCELLED, 0, "");
	cr_assert_eq(seen.a[0].end.result, PC_ESTOPPED);
	/* the socket is closed: the server sees its end */
	AWAIT(LOAD(srv.closed) == 1, 5000);
	AWAIT(open_fds() == fds, 5000);
	stop();
}

Test(http1_client, io_free_with_a_request_in_flight_ends_it)
{
	start(answer_silent);
	pc_h1c_t *c = open_c(0);
	cr_assert_eq(request(c, 11, NULL, "a", NULL, 0), 0);
	AWAIT(LOAD(srv.requests) == 1, 5000);
	pc_io_free(io);
	io = NULL;
	expect_answer(0, 11, PC_HTTP_CANCELLED, 0, "");
	cr_assert_eq(seen.a[0].end.result, PC_ESTOPPED);
	/* the handle outlives the I/O layer: released without harm */
	release_c(c);
	stop();
}

Test(http1_client, a_request_after_io_free_is_refused)
{
	start(answer_keep);
	pc_h1c_t *c = open_c(0);
	cr_assert_eq(request(c, 1, NULL, "a", NULL, 0), 0);
	expect_answer(0, 1, PC_HTTP_OK, 200, "re:a");
	pc_io_free(io);
	io = NULL;
	/* "PC_ESTOPPED (released, or the I/O layer stopped)" */
	cr_assert_eq(request(c, 2, NULL, "b", NULL, 0), PC_ESTOPPED);
	release_c(c);
	cr_assert_eq(LOAD(seen.ends), 1);
	stop();
}

Test(http1_client, backpressure_stops_reading_until_the_owner_consumes)
{
	start(answer_big);
	pthread_mutex_lock(&seen_mu);
	seen.consume = false;
	pthread_mutex_unlock(&seen_mu);
	pc_h1c_t *c = open_c(4096);
	cr_assert_eq(request(c, 12, "GET", NULL, NULL, 0), 0);
	AWAIT(LOAD(seen.heads) == 1, 5000);
	/* The server writes what the sockets take (all of it or until they
	 * are full) and the client delivers what it read: wait until both
	 * stand still for 100 ms, within 5 s. */
	uint64_t until = now_ms() + 5000, still_since = now_ms();
	uint64_t last_w = LOAD(srv.written), last_b = LOAD(seen.bytes);
	while (now_ms() < until && now_ms() - still_since < 100) {
		sleep_ms(5);
		uint64_t w = LOAD(srv.written), b = LOAD(seen.bytes);
		if (w != last_w || b != last_b)
			still_since = now_ms();
		last_w = w;
		last_b = b;
	}
	cr_assert_geq(now_ms() - still_since, 100, "the transfer never stood still");
	uint64_t delivered = LOAD(seen.bytes);
	cr_assert_gt(delivered, 0);
	cr_assert_lt(delivered, 256 * 1024, "%llu bytes delivered with none consumed",
		     (unsigned long long)delivered);
	cr_assert_eq(LOAD(seen.ends), 0);
	cr_assert_eq(pc_send_signal(owner, MSG_CONSUME), 0);
	AWAIT(LOAD(seen.ends) == 1, 20000);
	expect_answer(0, 12, PC_HTTP_OK, 200, NULL);
	const answer_t *a = &seen.a[0];
	cr_assert_eq(a->len, BIG, "%zu body bytes", a->len);
	cr_assert_eq(a->end.bytes, BIG);
	for (size_t i = 0; i < BIG; i++)
		if ((uint8_t)a->body[i] != big_byte(i))
			cr_assert_fail("byte %zu out of order", i);
	AWAIT(LOAD(srv.big_done), 5000); /* the server's last write returned */
	release_c(c);
	stop();
}

Test(http1_client, bad_input_is_refused)
{
	start(answer_keep);
	pc_h1c_t *c = NULL;
	static const char *const bad[] = {
		"https://127.0.0.1/", "ws://127.0.0.1/", "garbage", "", "http://127.0.0.1/a b",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		pc_h1c_options_t o = {.url = bad[i]};
		cr_assert_eq(pc_h1c_open(io, &o, owner, &c), PC_EINVAL, "url %s", bad[i]);
	}
	pc_h1c_options_t none = {.url = NULL};
	cr_assert_eq(pc_h1c_open(io, &none, owner, &c), PC_EINVAL);
	c = open_c(0);
	static const char *const crlf[] = {"X-Ok: 1", "X-Bad: a\r\nInjected: 1"};
	cr_assert_eq(request(c, 1, NULL, "a", crlf, 2), PC_EINVAL);
	static const char *const lf[] = {"X-Bad: a\nInjected: 1"};
	cr_assert_eq(request(c, 2, NULL, "a", lf, 1), PC_EINVAL);
	cr_assert_eq(request(c, 3, "GET /x", NULL, NULL, 0), PC_EINVAL);
	/* no message followed the refusals: the next request's END is the first */
	cr_assert_eq(request(c, 4, NULL, "b", crlf, 1), 0);
	expect_answer(0, 4, PC_HTTP_OK, 200, "re:b");
	cr_assert_eq(LOAD(seen.ends), 1);
	cr_assert_eq(LOAD(srv.requests), 1);
	cr_assert_null(strstr(server_req(0).head, "Injected"));
	release_c(c);
	stop();
}

Test(http1_client, an_interim_answer_is_not_reported)
{
	start(answer_early_hints);
	pc_h1c_t *c = open_c(0);
	cr_assert_eq(request(c, 14, NULL, "a", NULL, 0), 0);
	expect_answer(0, 14, PC_HTTP_OK, 200, "ok");
	cr_assert_eq(LOAD(seen.heads), 1);
	cr_assert_null(strstr(seen.a[0].headers, "Link"), "headers: %s", seen.a[0].headers);
	release_c(c);
	stop();
}

Test(http1_client, a_head_request_has_no_body_and_keeps_the_connection)
{
	start(answer_head);
	pc_h1c_t *c = open_c(0);
	cr_assert_eq(request(c, 15, "HEAD", NULL, NULL, 0), 0);
	expect_answer(0, 15, PC_HTTP_OK, 200, "");
	cr_assert_eq(seen.a[0].datas, 0);
	cr_assert(strstr(seen.a[0].headers, "Content-Length: 1234\n"), "headers: %s", seen.a[0].headers);
	req_t r = server_req(0);
	cr_assert_eq(strncmp(r.head, "HEAD /v1/chat?x=1 HTTP/1.1\r\n", 28), 0, "request: %s", r.head);
	cr_assert_null(strstr(r.head, "Content-Length"), "request: %s", r.head);
	cr_assert_eq(request(c, 16, NULL, "b", NULL, 0), 0);
	expect_answer(1, 16, PC_HTTP_OK, 200, "re:b");
	cr_assert_eq(LOAD(srv.accepted), 1);
	cr_assert_eq(pc_h1c_connections(c), 1);
	release_c(c);
	stop();
}

Test(http1_client_lifecycle, the_table)
{
	cr_assert(pc_h1c_state_legal(PC_H1C_IDLE, PC_H1C_CONNECTING));
	cr_assert(pc_h1c_state_legal(PC_H1C_CONNECTING, PC_H1C_BUSY));
	cr_assert(pc_h1c_state_legal(PC_H1C_BUSY, PC_H1C_READY));
	cr_assert(pc_h1c_state_legal(PC_H1C_READY, PC_H1C_BUSY));
	cr_assert(pc_h1c_state_legal(PC_H1C_BUSY, PC_H1C_CONNECTING), "a dropped kept connection: sent again");
	for (int s = 0; s < PC_H1C_CLOSED; s++)
		cr_assert(pc_h1c_state_legal((pc_h1c_state_t)s, PC_H1C_CLOSED), "%s -> closed",
			  pc_h1c_state_name((pc_h1c_state_t)s));
	cr_assert(!pc_h1c_state_legal(PC_H1C_IDLE, PC_H1C_BUSY), "a request needs a connection");
	cr_assert(!pc_h1c_state_legal(PC_H1C_READY, PC_H1C_CONNECTING), "a kept connection needs no connect");
	for (int s = 0; s <= PC_H1C_COUNT; s++) {
		cr_assert(!pc_h1c_state_legal(PC_H1C_CLOSED, (pc_h1c_state_t)s));
		cr_assert(!pc_h1c_state_legal(PC_H1C_COUNT, (pc_h1c_state_t)s));
		cr_assert(!pc_h1c_state_legal((pc_h1c_state_t)s, PC_H1C_COUNT));
	}
	static const char *const names[] = {"idle", "connecting", "busy", "ready", "closed"};
	for (int s = 0; s < PC_H1C_COUNT; s++)
		cr_assert_str_eq(pc_h1c_state_name((pc_h1c_state_t)s), names[s]);
	cr_assert_str_eq(pc_h1c_state_name(PC_H1C_COUNT), "unknown");
}

/* ---- many owners at once ---- */

#define RUNNERS 32
#define ROUNDS 200

/* One owner with its own connection: it sends its next request on each
 * END, and checks every message against the request it sent. */
typedef struct runner {
	uint32_t index;
	pc_h1c_t *c;    /* the owner's; the test's once done */
	uint32_t round;
	uint32_t heads;
	char body[64];
	size_t len;
	uint32_t ends;  /* atomic */
	bool done;      /* atomic */
} runner_t;

static runner_t runners[RUNNERS];

static uint64_t runner_tag(const runner_t *r) { return (uint64_t)r->index << 32 | r->round; }

static void runner_send(runner_t *r)
{
	char body[32];
	snprintf(body, sizeof(body), "tag=%llu", (unsigned long long)runner_tag(r));
	r->heads = 0;
	r->len = 0;
	CHECK(request(r->c, runner_tag(r), NULL, body, NULL, 0) == 0, "runner %u: request refused", r->index);
}

static int runner_receive(pc_ctx_t *ctx, void *state, pc_msg_t *msg)
{
	runner_t *r = state;
	uint64_t tag = runner_tag(r);
	if (msg->type == MSG_GO) {
		pc_h1c_options_t o = {.url = url, .connect_timeout_ms = 5000};
		CHECK(pc_h1c_open(io, &o, pc_self(ctx), &r->c) == 0, "runner %u: open", r->index);
		if (r->c)
			runner_send(r);
	} else if (msg->type == PC_MSG_HTTP_RESPONSE_HEAD) {
		const pc_http_head_msg_t *h = pc_msg_cdata(msg);
		CHECK(h->tag == tag, "runner %u: HEAD tag %llx, want %llx", r->index, (unsigned long long)h->tag,
		      (unsigned long long)tag);
		CHECK(h->status == 200, "runner %u: status %d", r->index, h->status);
		r->heads++;
	} else if (msg->type == PC_MSG_HTTP_RESPONSE_DATA) {
		const pc_http_data_msg_t *d = pc_msg_cdata(msg);
		CHECK(d->tag == tag, "runner %u: DATA tag %llx, want %llx", r->index, (unsigned long long)d->tag,
		      (unsigned long long)tag);
		if (r->len + d->len < sizeof(r->body)) {
			memcpy(r->body + r->len, d->data, d->len);
			r->len += d->len;
		}
		pc_h1c_consumed(r->c, d->len);
	} else if (msg->type == PC_MSG_HTTP_RESPONSE_END) {
		const pc_http_end_msg_t *e = pc_msg_cdata(msg);
		char want[48];
		snprintf(want, sizeof(want), "re:tag=%llu", (unsigned long long)tag);
		CHECK(e->tag == tag, "runner %u: END tag %llx, want %llx", r->index, (unsigned long long)e->tag,
		      (unsigned long long)tag);
		CHECK(e->transport == PC_HTTP_OK && e->status == 200, "runner %u: %s %d (%s)", r->index,
		      pc_http_transport_name(e->transport), e->status, e->error);
		CHECK(r->heads == 1, "runner %u: %u HEADs", r->index, r->heads);
		CHECK(r->len == strlen(want) && !memcmp(r->body, want, r->len), "runner %u: body %.*s, want %s",
		      r->index, (int)r->len, r->body, want);
		INC(r->ends);
		if (++r->round < ROUNDS)
			runner_send(r);
		else
			STORE(r->done, true);
	}
	return 0;
}

static const pc_behavior_t runner_b = {.name = "h1c-runner", .receive = runner_receive};

Test(http1_client, many_owners_each_with_its_connection)
{
	reset_failures();
	server_start(answer_keep);
	snprintf(url, sizeof(url), "http://127.0.0.1:%u/load", (unsigned)srv.port);
	rt = start_rt(4);
	pc_io_config_t ic = {.threads = 2};
	cr_assert_eq(pc_io_new(rt, &ic, &io), 0);
	pc_actor_t *actors[RUNNERS];
	memset(runners, 0, sizeof(runners));
	uint64_t t0 = now_ms();
	for (uint32_t i = 0; i < RUNNERS; i++) {
		runners[i].index = i;
		cr_assert_eq(pc_spawn(rt, &runner_b, &runners[i], &actors[i]), 0);
		cr_assert_eq(pc_send_signal(actors[i], MSG_GO), 0);
	}
	for (uint32_t i = 0; i < RUNNERS; i++)
		AWAIT(LOAD(runners[i].done) || LOAD(failures), 30000);
	uint64_t took = now_ms() - t0;
	assert_no_failures();
	uint32_t sum = 0;
	for (uint32_t i = 0; i < RUNNERS; i++) {
		cr_assert_eq(LOAD(runners[i].ends), ROUNDS);
		cr_assert_eq(pc_h1c_connections(runners[i].c), 1, "runner %u reconnected", i);
		sum += LOAD(runners[i].ends);
	}
	cr_assert_eq(sum, RUNNERS * ROUNDS);
	cr_assert_eq(LOAD(srv.requests), RUNNERS * ROUNDS);
	cr_assert_eq(LOAD(srv.accepted), RUNNERS);
	cr_log_info("%u requests on %u connections in %llu ms", sum, RUNNERS, (unsigned long long)took);
	for (uint32_t i = 0; i < RUNNERS; i++)
		pc_h1c_release(runners[i].c);
	pc_io_free(io);
	io = NULL;
	server_stop();
	for (uint32_t i = 0; i < RUNNERS; i++)
		pc_actor_release(actors[i]);
	assert_no_failures();
	FREE_RUNTIME_CHECKED(rt);
}
