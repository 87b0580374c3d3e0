/*
 * libFuzzer target for the keep-alive HTTP/1.1 client connection
 * (io/http1_client.c, llhttp): arbitrary bytes as a server's answers. See
 * fuzz/README.md.
 *
 * One runtime, one I/O thread, one owner actor and a listening socket on
 * 127.0.0.1 (the fuzzing thread is the server) are started with the first
 * input and live for the whole run. Per input the owner opens a handle and
 * sends a request; the fuzzing thread accepts the connection, reads the
 * request, writes the input's bytes in the planned chunks and ends the
 * connection as planned (close, half-close, reset or keep it open). With
 * the plan's second request (sent by the owner on the first one's END), a
 * connection the client opens again gets a fixed, valid answer. Then
 * every request must have ended with exactly one END, within a bounded
 * time, the messages before it in order and consistent with it; the
 * handle is released and every descriptor closed again. A broken promise
 * traps; ASan and UBSan watch the I/O and worker threads meanwhile.
 *
 * Input layout: byte 0 is the plan (bits 0-2: how many chunk-size bytes
 * follow; bits 3-4: how the connection ends after the bytes: 0 close, 1
 * half-close, 2 reset, 3 kept open, the handle released once the owner
 * hears nothing for a while; bit 5: a second request (GET) after the
 * first one's END; bit 6: the owner reports DATA consumed only once the
 * bytes are written, with max_buffered 16, so that backpressure engages;
 * bit 7: the first request is a HEAD, else a POST with a body), then the
 * chunk sizes (used in turn; 0 counts as 1), then the server's bytes.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "io/http1_client.h"
#include "io/http_client.h"
#include "io/io.h"
#include "pincer.h"

#define FUZZ_NAME "fuzz_http1_client"
#include "fuzz_net.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* How long the client may take to connect, send, end a request or close
 * its socket: far more than it needs, far less than a hang. */
#define SETTLE_MS 5000
#define QUIET_MS 10        /* kept open: the owner heard nothing this long, release */
#define STALL_MS 20        /* writes blocked this long: the late owner consumes */
#define PAUSE_US 200       /* between the first chunks, so the client reads them apart */
#define MAX_PAUSES 32
#define LATE_MAX_BUFFERED 16
#define REQ_CAP 4096       /* what a connection's requests may take */
#define PATH "/fz?x=1"
#define BODY1 "q1"
#define FIXED "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfixed"

enum { MSG_START = 1, MSG_CONSUME, MSG_RELEASE };
enum { END_CLOSE, END_HALF, END_RESET, END_KEEP };

static pc_runtime_t *rt;
static pc_io_t *io;
static pc_actor_t *owner;
static int lfd = -1;
static uint16_t port;
static char url[64];
static uint64_t serial; /* inputs run, for the tags */
static int verbose;

/* ---- the owner ------------------------------------------------------------------- */

/* The plan, written by the fuzzing thread before MSG_START. */
static struct plan {
	uint64_t tag[2];
	bool head;   /* request 1 is a HEAD */
	bool second; /* request 2 after request 1's END */
	bool late;   /* consume only on MSG_CONSUME */
	bool keep;   /* the server keeps its connection open */
	size_t max_buffered;
} pl;

/* What came for one request: written by the owner, read by the fuzzing
 * thread once `ends` counts the request's END. */
typedef struct rec {
	uint32_t heads, datas, over;  /* over: DATAs that came while past max_buffered */
	int32_t head_status;
	char *head;                   /* the header block */
	uint8_t *body;                /* every DATA byte, in order */
	size_t len, cap;
	pc_http_end_msg_t end;
	uint64_t connections;         /* pc_h1c_connections at END, if not released */
} rec_t;

static struct owner_state {
	/* the owner's own */
	pc_h1c_t *c;         /* NULL once released */
	int cur;             /* the request in flight: 0, 1, or -1 for none */
	bool consume;        /* report DATA consumed as it comes */
	uint64_t unconsumed;
	rec_t r[2];
	/* atomic: read by the fuzzing thread */
	uint32_t sent, ends, msgs;
	bool released;
} own;

/* "one 'Name: value' per line, each ending in '\n', NUL-terminated". The
 * names are llhttp's: this version takes a space in a response's header
 * name, even an empty name, so only what would break the lines is
 * checked: a ':' in a name, a CR or NUL anywhere (an LF would make a line
 * without ": "). */
static void check_header_block(const char *h, uint32_t len)
{
	CHECK(h[len] == '\0', "HEAD's header block not NUL-terminated");
	CHECK(len == 0 || h[len - 1] == '\n', "HEAD's header block does not end in a newline");
	for (const char *p = h, *end = h + len; p < end;) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *colon = NULL;
		for (const char *q = p; q + 1 < nl; q++)
			if (q[0] == ':' && q[1] == ' ') {
				colon = q;
				break;
			}
		CHECK(colon, "HEAD's header line without \": \": \"%.*s\"", (int)(nl - p), p);
		for (const char *q = p; q < colon; q++)
			CHECK(*q != ':' && *q != '\r' && *q != '\0', "HEAD's header name with byte 0x%02x: \"%.*s\"",
			      (unsigned char)*q, (int)(nl - p), p);
		for (const char *q = colon + 2; q < nl; q++)
			CHECK(*q != '\r' && *q != '\0', "HEAD's header value with byte 0x%02x", (unsigned char)*q);
		p = nl + 1;
	}
}

static void consume_all(void)
{
	if (own.c && own.unconsumed)
		pc_h1c_consumed(own.c, own.unconsumed);
	own.unconsumed = 0;
}

/* The request in flight, which `tag` must be. */
static rec_t *current(uint64_t tag, const char *what)
{
	CHECK(own.cur >= 0, "%s (tag %llx) with no request in flight: after its END?", what, (unsigned long long)tag);
	CHECK(tag == pl.tag[own.cur], "%s with tag %llx, the request in flight is %llx", what, (unsigned long long)tag,
	      (unsigned long long)pl.tag[own.cur]);
	return &own.r[own.cur];
}

static void send_request(int i)
{
	static const char *const hdrs[2][1] = {{"X-Req: 1"}, {"X-Req: 2"}};
	pc_h1c_request_t rq = {.headers = hdrs[i], .header_count = 1, .tag = pl.tag[i]};
	if (i == 0 && pl.head) {
		rq.method = "HEAD";
	} else if (i == 0) {
		rq.method = "POST";
		rq.body = BODY1;
		rq.body_len = strlen(BODY1);
	} else {
		rq.method = "GET";
	}
	own.cur = i;
	/* counted before END can be: the fuzzing thread waits for ends == sent */
	__atomic_add_fetch(&own.sent, 1, __ATOMIC_ACQ_REL);
	int rc = pc_h1c_request(own.c, &rq);
	CHECK(rc == 0, "request %d refused: %d (after END, the next request is taken)", i + 1, rc);
}

static void on_start(pc_ctx_t *ctx)
{
	memset(own.r, 0, sizeof(own.r));
	own.cur = -1;
	own.consume = !pl.late;
	own.unconsumed = 0;
	pc_h1c_options_t o = {.url = url, .connect_timeout_ms = SETTLE_MS, .max_buffered = pl.max_buffered};
	int rc = pc_h1c_open(io, &o, pc_self(ctx), &own.c);
	CHECK(rc == 0, "pc_h1c_open: %d", rc);
	send_request(0);
}

static void on_head(const pc_http_head_msg_t *h)
{
	rec_t *r = current(h->tag, "HEAD");
	CHECK(r->heads == 0, "a second HEAD (status %d, the first %d)", h->status, r->head_status);
	CHECK(r->datas == 0, "HEAD after DATA");
	CHECK(h->status < 100 || h->status > 199, "an interim answer (%d) reported as HEAD", h->status);
	check_header_block(h->headers, h->headers_len);
	r->heads++;
	r->head_status = h->status;
	r->head = strndup(h->headers, h->headers_len);
	CHECK(r->head, "strndup");
}

static void on_data(const pc_http_data_msg_t *d)
{
	rec_t *r = current(d->tag, "DATA");
	CHECK(r->heads == 1, "DATA (%u bytes) before HEAD", d->len);
	CHECK(own.cur == 1 || !pl.head, "DATA (%u bytes) for a HEAD request", d->len);
	if (r->len + d->len > r->cap) {
		r->cap = 2 * (r->len + d->len);
		r->body = realloc(r->body, r->cap);
		CHECK(r->body, "realloc");
	}
	memcpy(r->body + r->len, d->data, d->len);
	r->len += d->len;
	r->datas++;
	if (!own.consume && own.unconsumed > pl.max_buffered)
		r->over++;
	own.unconsumed += d->len;
	if (own.consume)
		consume_all();
}

static void on_end(const pc_http_end_msg_t *e)
{
	rec_t *r = current(e->tag, "END");
	int i = own.cur;
	own.cur = -1;
	r->end = *e;
	CHECK(memchr(e->error, 0, sizeof(e->error)), "END's error not NUL-terminated");
	CHECK(e->curl_code == 0, "END's curl_code %d", e->curl_code);
	CHECK(e->status == (r->heads ? r->head_status : 0), "END's status %d, HEAD's %d (%u HEADs)", e->status,
	      r->head_status, r->heads);
	CHECK(e->bytes == r->len, "END counts %llu body bytes, DATA brought %zu", (unsigned long long)e->bytes, r->len);
	bool released = __atomic_load_n(&own.released, __ATOMIC_ACQUIRE);
	switch (e->transport) {
	case PC_HTTP_OK:
		CHECK(e->result == 0 && !e->error[0], "END OK with result %d, error \"%s\"", e->result, e->error);
		CHECK(r->heads == 1, "END OK without HEAD");
		break;
	case PC_HTTP_CLOSED:
		/* only the server's close or reset ends a connection mid-answer */
		CHECK(!pl.keep, "END CLOSED (%s) while the server kept its connection", e->error);
		break;
	case PC_HTTP_MALFORMED:
		break;
	case PC_HTTP_CANCELLED:
		CHECK(released, "END CANCELLED (%s) without a release", e->error);
		break;
	default:
		CHECK(0, "END with transport %s (%s)", pc_http_transport_name(e->transport), e->error);
	}
	if (e->transport != PC_HTTP_OK)
		CHECK(e->result != 0, "END %s with result 0", pc_http_transport_name(e->transport));
	if (own.c)
		r->connections = pc_h1c_connections(own.c);
	if (verbose)
		fprintf(stderr, "  END %d: %s %d \"%s\", %u HEAD, %u DATA, %zu bytes\n", i + 1,
			pc_http_transport_name(e->transport), e->status, e->error, r->heads, r->datas, r->len);
	if (i == 0 && pl.second && !released)
		send_request(1);
	__atomic_add_fetch(&own.ends, 1, __ATOMIC_ACQ_REL);
}

static int owner_receive(pc_ctx_t *ctx, void *state, pc_msg_t *msg)
{
	(void)state;
	__atomic_add_fetch(&own.msgs, 1, __ATOMIC_ACQ_REL);
	switch (msg->type) {
	case MSG_START:
		on_start(ctx);
		break;
	case MSG_CONSUME:
		own.consume = true;
		consume_all();
		break;
	case MSG_RELEASE:
		pc_h1c_release(own.c);
		own.c = NULL;
		__atomic_store_n(&own.released, true, __ATOMIC_RELEASE);
		break;
	case PC_MSG_HTTP_RESPONSE_HEAD:
		on_head(pc_msg_cdata(msg));
		break;
	case PC_MSG_HTTP_RESPONSE_DATA:
		on_data(pc_msg_cdata(msg));
		break;
	case PC_MSG_HTTP_RESPONSE_END:
		on_end(pc_msg_cdata(msg));
		break;
	default:
		CHECK(0, "unexpected message type %x", msg->type);
	}
	return 0;
}

static const pc_behavior_t owner_b = {.name = "fuzz-h1c-owner", .receive = owner_receive};

static void tell(uint32_t type)
{
	int rc = pc_send_signal(owner, type);
	CHECK(rc == 0, "pc_send_signal: %d", rc);
}

static void teardown(void)
{
	pc_io_free(io);
	pc_actor_release(owner);
	pc_runtime_free(rt);
	if (lfd >= 0)
		close(lfd);
}

static void setup(void)
{
	verbose = getenv("FUZZ_H1C_VERBOSE") != NULL;
	start_runtime_io(&rt, &io);
	CHECK(pc_spawn(rt, &owner_b, NULL, &owner) == 0, "spawn");
	lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	CHECK(lfd >= 0, "socket: %s", strerror(errno));
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof(a);
	CHECK(bind(lfd, (struct sockaddr *)&a, sizeof(a)) == 0 && listen(lfd, 16) == 0 &&
		      getsockname(lfd, (struct sockaddr *)&a, &al) == 0,
	      "listen: %s", strerror(errno));
	port = ntohs(a.sin_port);
	snprintf(url, sizeof(url), "http://127.0.0.1:%u" PATH, (unsigned)port);
	atexit(teardown);
}

/* ---- the server ------------------------------------------------------------------ */

/* One accepted connection and the bytes the client sent on it. */
typedef struct sconn {
	int fd;
	int index;            /* 0: the first of the input */
	char in[REQ_CAP];
	size_t in_len;
	size_t parsed;        /* the whole requests in `in` end here */
	uint32_t reqs[2];     /* whole requests seen, by request */
	bool eof;
} sconn_t;

static struct server {
	uint64_t written;     /* bytes sent on every connection */
	uint32_t accepted;
	uint32_t reqs[2];     /* whole requests seen, on all connections */
	bool req2_elsewhere;  /* request 2 read on a connection of its own */
} sv;

/* The whole requests in c->in past c->parsed: each must be one of the
 * input's, as sent (method, path, X-Req, body), request 1 first and only
 * on the first connection, request 2 at most once a connection. */
static void parse_requests(sconn_t *c)
{
	for (;;) {
		const char *p = c->in + c->parsed;
		size_t n = c->in_len - c->parsed;
		const char *end = memmem(p, n, "\r\n\r\n", 4);
		if (!end)
			return;
		size_t hlen = (size_t)(end - p) + 4;
		size_t blen = 0;
		int req = -1;
		/* the header lines, after the request line */
		const char *hend = p + hlen;
		for (const char *l = (const char *)memmem(p, hlen, "\r\n", 2) + 2; l < hend;
		     l = (const char *)memmem(l, (size_t)(hend - l), "\r\n", 2) + 2) {
			if (!strncasecmp(l, "Content-Length:", 15))
				blen = strtoul(l + 15, NULL, 10);
			else if (!strncmp(l, "X-Req: ", 7))
				req = l[7] - '1';
		}
		if (n < hlen + blen)
			return;
		CHECK(req == 0 || req == 1, "a request without X-Req: %.*s", (int)hlen, p);
		const char *method = req == 1 ? "GET" : pl.head ? "HEAD" : "POST";
		char line[64];
		int ll = snprintf(line, sizeof(line), "%s " PATH " HTTP/1.1\r\n", method);
		CHECK(!strncmp(p, line, (size_t)ll), "request %d on connection %d: %.*s", req + 1, c->index + 1,
		      (int)hlen, p);
		const char *body = req == 0 && !pl.head ? BODY1 : "";
		CHECK(blen == strlen(body) && !memcmp(p + hlen, body, blen), "request %d's body: %.*s", req + 1,
		      (int)blen, p + hlen);
		CHECK(req == 1 || (c->index == 0 && c->reqs[0] == 0 && c->reqs[1] == 0),
		      "request 1 again, or on connection %d", c->index + 1);
		CHECK(req == 0 || pl.second, "request 2 not sent, yet read");
		CHECK(req == 0 || c->reqs[1] == 0, "request 2 twice on connection %d", c->index + 1);
		c->reqs[req]++;
		sv.reqs[req]++;
		CHECK(sv.reqs[1] <= 2, "request 2 sent %u times (once more at most)", sv.reqs[1]);
		if (req == 1 && c->index > 0)
			sv.req2_elsewhere = true;
		c->parsed += hlen + blen;
	}
}

/* Reads what is there (waiting up to ms for it); false at EOF or error. */
static bool read_some(sconn_t *c, int ms)
{
	if (c->eof)
		return false;
	struct pollfd p = {.fd = c->fd, .events = POLLIN};
	if (ms > 0 && poll(&p, 1, ms) <= 0)
		return true;
	for (;;) {
		CHECK(c->in_len < sizeof(c->in), "the client sent more than %d bytes", REQ_CAP);
		ssize_t n = recv(c->fd, c->in + c->in_len, sizeof(c->in) - c->in_len, MSG_DONTWAIT);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			break;
		if (n <= 0) {
			c->eof = true;
			break;
		}
		c->in_len += (size_t)n;
	}
	parse_requests(c);
	return !c->eof;
}

static void conn_close(sconn_t *c, bool reset)
{
	if (c->fd < 0)
		return;
	if (reset) {
		struct linger lg = {1, 0};
		(void)setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	} else {
		(void)read_some(c, 0); /* so that close sends FIN, not a reset */
	}
	close(c->fd);
	c->fd = -1;
}

/* Accepts a connection if one is waiting (up to ms). */
static bool accept_conn(sconn_t *c, int ms)
{
	struct pollfd p = {.fd = lfd, .events = POLLIN};
	if (ms > 0 && poll(&p, 1, ms) <= 0)
		return false;
	int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	if (fd < 0) {
		CHECK(errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED,
		      "accept: %s", strerror(errno));
		return false;
	}
	int one = 1;
	(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	memset(c, 0, sizeof(*c));
	c->fd = fd;
	c->index = (int)sv.accepted++;
	return true;
}

/* Sends p[0..n) whole (non-blocking); false when the client has gone.
 * `late`: the owner has not consumed yet (it is told to when the writes
 * stall, and set false). */
static bool put(sconn_t *c, const void *p, size_t n, bool *late)
{
	const char *s = p;
	uint64_t blocked = 0;
	while (n) {
		ssize_t w = send(c->fd, s, n, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (w > 0) {
			s += w;
			n -= (size_t)w;
			sv.written += (uint64_t)w;
			blocked = 0;
			continue;
		}
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			uint64_t now = now_ms();
			if (!blocked)
				blocked = now;
			if (late && *late && now - blocked >= STALL_MS) {
				tell(MSG_CONSUME);
				*late = false;
				blocked = now;
			}
			/* an owner that consumes lets the client read on */
			CHECK((late && *late) || now - blocked < SETTLE_MS,
			      "the client stopped reading: %zu bytes not taken in %d ms, the owner consuming", n,
			      SETTLE_MS);
			struct pollfd pf = {.fd = c->fd, .events = POLLOUT};
			(void)poll(&pf, 1, 5);
			continue;
		}
		return false;
	}
	return true;
}

/* A connection of the input but the first: its request gets FIXED. */
static void serve_other(sconn_t *c, bool released)
{
	uint64_t until = now_ms() + SETTLE_MS;
	while (c->parsed == 0 && read_some(c, 1)) {
		/* a connection made is a request sent, unless released since */
		CHECK(released || now_ms() < until, "connection %d: no request in %d ms", c->index + 1, SETTLE_MS);
	}
	if (c->parsed)
		(void)put(c, FIXED, strlen(FIXED), NULL);
	conn_close(c, false);
}

/* ---- one input ------------------------------------------------------------------- */

/* The body of a Content-Length answer: its length, or -1 when the head
 * does not frame the body by one Content-Length alone. */
static long long framed_length(const rec_t *r)
{
	if (r->head_status == 204 || r->head_status == 304)
		return -1;
	long long len = -1;
	for (const char *l = r->head; l && *l; l = strchr(l, '\n') + 1) {
		if (!strncasecmp(l, "Transfer-Encoding: ", 19))
			return -1;
		if (strncasecmp(l, "Content-Length: ", 16) != 0)
			continue;
		if (len >= 0)
			return -1;
		const char *v = l + 16;
		size_t digits = strspn(v, "0123456789");
		if (digits == 0 || digits > 15 || v[digits] != '\n')
			return -1;
		len = strtoll(v, NULL, 10);
	}
	return len;
}

static void check_answers(const uint8_t *s, size_t n)
{
	uint32_t sent = __atomic_load_n(&own.sent, __ATOMIC_ACQUIRE);
	uint64_t total = 0;
	for (uint32_t i = 0; i < sent; i++) {
		const rec_t *r = &own.r[i];
		const pc_http_end_msg_t *e = &r->end;
		total += r->len;
		if (i == 1 && sv.req2_elsewhere && e->transport != PC_HTTP_CANCELLED) {
			/* read on a connection of its own, which answers FIXED */
			CHECK(e->transport == PC_HTTP_OK && e->status == 200 && r->len == 5 &&
				      !memcmp(r->body, "fixed", 5),
			      "request 2 on a new connection: %s %d (%s), %zu bytes, want OK 200 \"fixed\"",
			      pc_http_transport_name(e->transport), e->status, e->error, r->len);
		}
		if (e->transport != PC_HTTP_OK || (i == 0 && pl.head))
			continue;
		long long len = framed_length(r);
		if (len < 0)
			continue;
		CHECK((long long)r->len == len, "request %u: an answer of Content-Length %lld delivered %zu bytes",
		      i + 1, len, r->len);
		CHECK(r->len == 0 || memmem(s, n, r->body, r->len) ||
			      (i == 1 && r->len == 5 && !memcmp(r->body, "fixed", 5)),
		      "request %u: the %zu body bytes delivered are not the server's", i + 1, r->len);
	}
	CHECK(total <= sv.written, "%llu body bytes delivered, the server sent %llu", (unsigned long long)total,
	      (unsigned long long)sv.written);
	for (uint32_t i = 0; i < sent; i++)
		CHECK(own.r[i].connections <= sv.accepted, "the handle counts %llu connections, the server accepted %u",
		      (unsigned long long)own.r[i].connections, sv.accepted);
	/* request 1 on a new connection, never sent again; request 2 on the
	 * kept one or a new one, and once more on a new one only after the
	 * kept one dropped it */
	CHECK(sv.accepted <= sent, "%u connections for %u requests", sv.accepted, sent);
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
	int end_mode = (plan >> 3) & 3;

	int fds = open_fds();
	serial++;
	pl = (struct plan){
		.tag = {serial << 8 | 1, serial << 8 | 2},
		.head = plan & 128,
		.second = plan & 32,
		.late = plan & 64,
		.keep = end_mode == END_KEEP,
		.max_buffered = plan & 64 ? LATE_MAX_BUFFERED : 0,
	};
	memset(&sv, 0, sizeof(sv));
	__atomic_store_n(&own.sent, 0, __ATOMIC_RELEASE);
	__atomic_store_n(&own.ends, 0, __ATOMIC_RELEASE);
	__atomic_store_n(&own.released, false, __ATOMIC_RELEASE);
	if (verbose)
		fprintf(stderr, "input %llu: plan %02x, %zu bytes\n", (unsigned long long)serial, plan, n);
	tell(MSG_START);

	/* the client connects and sends request 1 */
	sconn_t c1;
	uint64_t until = now_ms() + SETTLE_MS;
	while (!accept_conn(&c1, 5))
		CHECK(now_ms() < until, "the client did not connect in %d ms", SETTLE_MS);
	while (c1.reqs[0] == 0) {
		CHECK(read_some(&c1, 5), "the client closed before its request was in: %.*s", (int)c1.in_len, c1.in);
		CHECK(now_ms() < until, "request 1 not in after %d ms: %.*s", SETTLE_MS, (int)c1.in_len, c1.in);
	}

	/* the answer, in the planned chunks */
	bool late = pl.late;
	size_t at = 0, k = 0;
	unsigned pauses = 0;
	while (at < n) {
		size_t len = nsizes ? sizes[k++ % nsizes] : n;
		if (len == 0)
			len = 1;
		if (len > n - at)
			len = n - at;
		if (!put(&c1, s + at, len, &late))
			break; /* the client has gone: fine */
		at += len;
		if (nsizes && at < n && pauses < MAX_PAUSES) {
			pauses++;
			sleep_us(PAUSE_US);
		}
	}
	switch (end_mode) {
	case END_CLOSE:
		conn_close(&c1, false);
		break;
	case END_HALF:
		(void)shutdown(c1.fd, SHUT_WR);
		break;
	case END_RESET:
		conn_close(&c1, true);
		break;
	default:
		break;
	}
	if (late)
		tell(MSG_CONSUME);

	/* every request ends; a connection made meanwhile is served */
	sconn_t other;
	bool release_sent = false;
	uint32_t msgs = __atomic_load_n(&own.msgs, __ATOMIC_ACQUIRE);
	uint64_t quiet_since = now_ms();
	until = now_ms() + SETTLE_MS;
	for (;;) {
		uint32_t ends = __atomic_load_n(&own.ends, __ATOMIC_ACQUIRE);
		uint32_t sent = __atomic_load_n(&own.sent, __ATOMIC_ACQUIRE);
		if (ends == sent && !release_sent) {
			tell(MSG_RELEASE);
			release_sent = true;
			until = now_ms() + SETTLE_MS;
		}
		if (ends == sent && __atomic_load_n(&own.released, __ATOMIC_ACQUIRE))
			break;
		CHECK(now_ms() < until, "%u of %u requests ended %d ms after the server %s", ends, sent, SETTLE_MS,
		      release_sent ? "and the release" : "was done");
		if (c1.fd >= 0)
			(void)read_some(&c1, 0);
		if (accept_conn(&other, 1)) {
			serve_other(&other, release_sent);
			quiet_since = now_ms();
		}
		uint32_t m = __atomic_load_n(&own.msgs, __ATOMIC_ACQUIRE);
		if (m != msgs) {
			msgs = m;
			quiet_since = now_ms();
		}
		if (pl.keep && !release_sent && now_ms() - quiet_since >= QUIET_MS) {
			tell(MSG_RELEASE);
			release_sent = true;
			until = now_ms() + SETTLE_MS;
		}
	}
	conn_close(&c1, false);

	/* every descriptor closed again; the connections left in the queue
	 * (made, then given up by the release) counted */
	until = now_ms() + SETTLE_MS;
	int now_fds = open_fds();
	while (now_fds > fds && now_ms() < until) {
		sleep_us(200);
		now_fds = open_fds();
	}
	CHECK(now_fds <= fds, "%d descriptors open, %d before the input", now_fds, fds);
	while (accept_conn(&other, 0))
		conn_close(&other, false);

	/* a late consumer's backpressure: past max_buffered, no more reads
	 * from that connection (request 2 may start on a new one) */
	if (pl.late && pl.keep)
		for (int i = 0; i < 2; i++)
			CHECK(own.r[i].over <= (uint32_t)i, "request %d: %u DATA past max_buffered %d", i + 1,
			      own.r[i].over, LATE_MAX_BUFFERED);
	check_answers(s, n);
	for (int i = 0; i < 2; i++) {
		free(own.r[i].head);
		free(own.r[i].body);
		own.r[i].head = NULL;
		own.r[i].body = NULL;
	}
	return 0;
}
