/*
 * gateway: the agent loop through the gateway (agents/gateway/gateway.h),
 * against the mock LLM, with a load client speaking the WebSocket
 * protocol (docs/gateway.md) and the OpenAI endpoint; each figure next to
 * the same work driven in-process (pc_agent_submit_async) in the same run,
 * so the difference is the gateway's own.
 *
 *   gateway_idle      ready time (pc_gateway_new + pc_gateway_start), the
 *                     process's RSS idle, RSS per connected idle client
 *                     (--clients, default 5,000) and per idle session
 *                     (10,000 sessions after one turn each) against the
 *                     same sessions made in-process;
 *   gateway_turns     turns/s (the `agent` request to its final answer),
 *                     p50/p99 turn latency and CPU per turn for 1, 100,
 *                     1,000 and 10,000 sessions kept busy against a mock
 *                     with no latency; sessions are multiplexed 100 to a
 *                     connection (100 sessions also as 100 connections of
 *                     one); the in-process figures at the same concurrency;
 *   gateway_openai    POST /v1/chat/completions, 100 at once, plain and
 *                     streamed: requests/s, latency, CPU per request;
 *   gateway_inflight  10,000 turns at once against a mock answering after
 *                     --latency-ms (2,000): all must end well; memory per
 *                     turn in flight; and in-process.
 *
 * The load client is one thread of this process: a compact WebSocket
 * client (masked frames, ping answered) multiplexing its connections on
 * epoll, or for the OpenAI endpoint a curl-multi loop. Its CPU is read
 * with clock_gettime(CLOCK_THREAD_CPUTIME_ID) in that thread when the
 * measured window opens and closes, and taken off the process's CPU: the
 * rest (server_cpu_us_per_turn) is the gateway, the agent and the mock
 * (plus the mock child's CPU when it runs in a child). The gateway's own
 * share is that minus the in-process CPU per run (gateway_cpu_us_per_turn).
 *
 * The mock is the agent's embedded one, except when the server ends of
 * its connections would not fit in the open-file limit (10,000 turns at
 * once): then it runs in a forked child, as in bench_agent, and its CPU
 * counts. Session keys move to a fresh key every --turns turns (8) so the
 * history stays short, as in bench_agent.
 *
 *   bench_gateway [--workers W] [--seconds S] [--sessions N] [--turns K]
 *                 [--clients C] [--latency-ms L] [--only idle|turns|openai|inflight]
 *
 * --seconds caps each measured window (default 3; 3 x S at 10,000
 * sessions, where one round of every session takes seconds); --sessions
 * runs one session count only.
 *
 * One JSON line per figure set. Loopback only; the temporary store
 * directory is removed at the end.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "agent_env.h"
#include "agents/agent_internal.h" /* the run registry, to sweep its terminal cache */
#include "runtime/clock.h"
#include "agents/gateway/gateway.h"
#include "agents/obs/histogram.h"

#define SCENARIO "{\"default\":{\"text\":\"ok\",\"chunks\":1}}"
#define TOKEN "bench-token"
#define GATEWAY_JSON ",\"gateway\":{\"auth\":{\"mode\":\"token\",\"token\":\"" TOKEN "\"}}}"
#define PER_CONN 100u /* sessions multiplexed on one connection */

typedef struct params {
	uint32_t workers, sessions, turns, clients, latency_ms;
	double seconds;
	const char *only; /* NULL: everything */
} params_t;

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void nap_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

static pc_hist_t *hist_new(void)
{
	pc_hist_t *h = NULL;
	if (pc_hist_new(NULL, &h) != 0)
		bench_fail("pc_hist_new");
	return h;
}

static double pct_us(const pc_hist_t *h, double q)
{
	uint64_t v = 0;
	pc_hist_percentile(h, q, &v);
	return (double)v;
}

/* ---- the environment: agent layer + gateway ------------------------------- */

typedef struct genv {
	agent_env_t e;
	pc_gateway_t *g;
	uint16_t port;
	pid_t mock;      /* the mock's process when a child, else 0 */
	double ready_ms; /* pc_gateway_new + pc_gateway_start */
	double agent_ms; /* env_agent_start (pc_agent_new, the embedded mock) */
	uint64_t rss_agent_kib, rss_gateway_kib; /* trimmed, before and after the gateway */
} genv_t;

/* The agent with the mock embedded, or (mock_port != 0) at that address,
 * and a gateway with token auth on an ephemeral loopback port.
 * `concurrency`: model calls that may be in flight at once. */
static void genv_start(genv_t *v, const params_t *p, uint32_t concurrency, pid_t mock, uint16_t mock_port)
{
	memset(v, 0, sizeof(*v));
	v->mock = mock;
	pc_io_config_t icfg = {.threads = 1, .max_host_connections = concurrency + 64,
			       .max_idle_connections = concurrency + 64};
	env_base_start(&v->e, p->workers, &icfg);
	char provider[128], json[1024];
	if (mock_port)
		snprintf(provider, sizeof(provider), "\"baseUrl\":\"http://127.0.0.1:%u/v1\"", (unsigned)mock_port);
	else
		snprintf(provider, sizeof(provider), "\"embedded\":true");
	snprintf(json, sizeof(json),
		 "{\"providers\":{\"mock\":{\"api\":\"openai-completions\",%s}},"
		 "\"agents\":{\"defaults\":{\"model\":\"mock/m1\",\"workspace\":\"%s\","
		 "\"maxConcurrent\":4096,\"sessionIdleSeconds\":60}}" GATEWAY_JSON,
		 provider, v->e.dir);
	double t0 = bench_now_s();
	env_agent_start(&v->e, json, concurrency > 4096 ? concurrency : 0, mock_port ? NULL : SCENARIO);
	v->agent_ms = (bench_now_s() - t0) * 1e3;
	v->rss_agent_kib = env_trimmed_rss_kib();
	pc_gateway_options_t o = {.rt = v->e.rt, .io = v->e.io, .agent = v->e.agent, .config = v->e.cfg,
				  .port = 0};
	t0 = bench_now_s();
	int rc = pc_gateway_new(&o, &v->g);
	if (rc == 0)
		rc = pc_gateway_start(v->g);
	v->ready_ms = (bench_now_s() - t0) * 1e3;
	if (rc != 0)
		bench_fail("gateway: %s", pc_strerror(rc));
	v->port = pc_gateway_port(v->g);
	v->rss_gateway_kib = env_trimmed_rss_kib();
}

static void genv_stop(genv_t *v)
{
	pc_gateway_free(v->g);
	env_stop(&v->e, NULL, 0);
	bench_mock_child_stop(v->mock);
}

/* ---- the WebSocket load client: framing ----------------------------------- */

typedef struct buf {
	char *p;
	size_t off, len, cap; /* bytes [off, len) are pending */
} buf_t;

static void buf_reserve(buf_t *b, size_t more)
{
	if (b->off && b->off == b->len)
		b->off = b->len = 0;
	if (b->len + more <= b->cap)
		return;
	if (b->off) { /* compact before growing */
		memmove(b->p, b->p + b->off, b->len - b->off);
		b->len -= b->off;
		b->off = 0;
		if (b->len + more <= b->cap)
			return;
	}
	size_t cap = b->cap ? b->cap : 4096;
	while (cap < b->len + more)
		cap *= 2;
	char *p = realloc(b->p, cap);
	if (!p)
		bench_fail("out of memory");
	b->p = p;
	b->cap = cap;
}

static void buf_free(buf_t *b)
{
	free(b->p);
	memset(b, 0, sizeof(*b));
}

static uint32_t xorshift(uint32_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 17;
	*s ^= *s << 5;
	return *s;
}

/* Appends one frame from the client: masked, as RFC 6455 §5.3 requires. */
static void frame_put(buf_t *b, uint32_t *rng, int opcode, const char *payload, size_t len)
{
	unsigned char h[14];
	size_t n = 0;
	h[n++] = (unsigned char)(0x80 | opcode);
	if (len < 126) {
		h[n++] = (unsigned char)(0x80 | len);
	} else if (len < 65536) {
		h[n++] = 0x80 | 126;
		h[n++] = (unsigned char)(len >> 8);
		h[n++] = (unsigned char)len;
	} else {
		h[n++] = 0x80 | 127;
		for (int i = 7; i >= 0; i--)
			h[n++] = (unsigned char)((uint64_t)len >> (8 * i));
	}
	uint32_t key = xorshift(rng);
	unsigned char *mask = h + n;
	memcpy(mask, &key, 4);
	n += 4;
	buf_reserve(b, n + len);
	memcpy(b->p + b->len, h, n);
	char *dst = b->p + b->len + n;
	for (size_t i = 0; i < len; i++)
		dst[i] = (char)(payload[i] ^ mask[i & 3]);
	b->len += n + len;
}

typedef struct frame {
	int opcode;
	const char *data; /* inside the connection's input buffer */
	size_t len;
	size_t size; /* header and payload */
} frame_t;

/* A whole server frame at the head of `b`: 1; 0 when more bytes are
 * needed. Fails on what a server may not send here (a masked frame, a
 * fragment: the gateway sends every message whole). */
static int frame_next(const buf_t *b, frame_t *f)
{
	const unsigned char *p = (const unsigned char *)b->p + b->off;
	size_t have = b->len - b->off, h = 2;
	if (have < 2)
		return 0;
	if (!(p[0] & 0x80) || (p[1] & 0x80))
		bench_fail("unexpected frame from the gateway (fragment or masked): %02x %02x", p[0], p[1]);
	uint64_t len = p[1] & 0x7f;
	if (len == 126) {
		if (have < 4)
			return 0;
		len = (uint64_t)p[2] << 8 | p[3];
		h = 4;
	} else if (len == 127) {
		if (have < 10)
			return 0;
		len = 0;
		for (int i = 0; i < 8; i++)
			len = len << 8 | p[2 + i];
		h = 10;
	}
	if (len > (64u << 20))
		bench_fail("a %" PRIu64 "-byte frame from the gateway", len);
	if (have < h + len)
		return 0;
	f->opcode = p[0] & 0x0f;
	f->data = (const char *)p + h;
	f->len = (size_t)len;
	f->size = h + (size_t)len;
	return 1;
}

/* ---- the WebSocket load client: connections -------------------------------- */

typedef struct wsconn {
	int fd;
	buf_t in, out;
	bool dirty; /* output waiting for this turn of the loop's flush */
	bool want_out; /* EPOLLOUT armed: the socket was full */
} wsconn_t;

static const char UPGRADE[] = "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
			      "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
			      "Sec-WebSocket-Version: 13\r\n\r\n";

static const char CONNECT[] =
	"{\"type\":\"req\",\"id\":\"connect\",\"method\":\"connect\",\"params\":{\"minProtocol\":3,"
	"\"maxProtocol\":4,\"client\":{\"id\":\"bench\",\"version\":\"1.0.0\",\"platform\":\"linux\","
	"\"mode\":\"cli\"},\"role\":\"operator\",\"scopes\":[\"operator.read\",\"operator.write\"],"
	"\"auth\":{\"token\":\"" TOKEN "\"}}}";

static void write_all(int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			bench_fail("write: %s", strerror(errno));
		p += w;
		n -= (size_t)w;
	}
}

/* Reads what is there into c->in, blocking (the socket has a receive
 * timeout, so a silent gateway fails the run). */
static void read_blocking(wsconn_t *c)
{
	buf_reserve(&c->in, 16384);
	/* one byte kept for the NUL the upgrade's header search needs */
	ssize_t n = read(c->fd, c->in.p + c->in.len, c->in.cap - c->in.len - 1);
	if (n <= 0)
		bench_fail("handshake: %s", n == 0 ? "the gateway closed the connection" : strerror(errno));
	c->in.len += (size_t)n;
}

static void frame_blocking(wsconn_t *c, frame_t *f)
{
	while (!frame_next(&c->in, f))
		read_blocking(c);
	c->in.off += f->size;
}

/* Connects, upgrades, reads the challenge, connects with the token and
 * reads hello-ok, blocking; then the socket turns non-blocking and the
 * buffers are given back (so idle clients hold nothing but the socket). */
static void ws_open(uint16_t port, wsconn_t *c, uint32_t *rng)
{
	memset(c, 0, sizeof(*c));
	c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (c->fd < 0)
		bench_fail("socket: %s (the open-file limit?)", strerror(errno));
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	struct timeval tv = {10, 0};
	int one = 1;
	setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)) != 0)
		bench_fail("connect: %s", strerror(errno));
	write_all(c->fd, UPGRADE, sizeof(UPGRADE) - 1);
	char *end = NULL;
	while (!end) {
		read_blocking(c);
		c->in.p[c->in.len] = '\0';
		end = strstr(c->in.p, "\r\n\r\n");
	}
	if (strncmp(c->in.p, "HTTP/1.1 101", 12) != 0)
		bench_fail("upgrade refused: %.40s", c->in.p);
	c->in.off = (size_t)(end + 4 - c->in.p);
	frame_t f;
	frame_blocking(c, &f);
	if (f.opcode != 1 || !memmem(f.data, f.len, "connect.challenge", 17))
		bench_fail("no connect.challenge: %.*s", (int)f.len, f.data);
	frame_put(&c->out, rng, 1, CONNECT, sizeof(CONNECT) - 1);
	write_all(c->fd, c->out.p, c->out.len);
	frame_blocking(c, &f);
	if (f.opcode != 1 || !memmem(f.data, f.len, "\"hello-ok\"", 10))
		bench_fail("connect refused: %.*s", (int)f.len, f.data);
	if (c->in.off != c->in.len)
		bench_fail("unexpected frames after hello-ok");
	buf_free(&c->in);
	buf_free(&c->out);
	tv.tv_sec = 0;
	setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) | O_NONBLOCK) != 0)
		bench_fail("fcntl: %s", strerror(errno));
}

/* ---- the WebSocket load client: sessions over connections ------------------ */

typedef struct slot {
	uint32_t conn;
	uint32_t gen, turn; /* the session key's generation; turns on it */
	uint64_t seq;       /* requests sent */
	uint64_t sent_ns;
	bool busy;
} slot_t;

typedef struct load {
	uint16_t port;
	uint32_t nconns, sessions;
	wsconn_t *conns;
	slot_t *slots;
	uint32_t *dirty; /* connections with output to flush */
	uint32_t ndirty;
	int ep;
	uint32_t rng;
	/* one run */
	char prefix[24];
	uint32_t turns;   /* per session key; 0: one key for ever */
	bool once;        /* one turn per slot, then stop */
	window_t w;
	pc_hist_t *lat;   /* µs, completions inside the window */
	uint64_t submitted, finished, ok, errors, accepted;
	double tcpu0, tcpu1; /* this thread's CPU as the window opened and closed */
	bool stop;
} load_t;

/* Opens `nconns` connections for `sessions` session slots (slot i on
 * connection i % nconns); everything is allocated here, before any
 * measurement. */
static void load_new(load_t *l, uint16_t port, uint32_t nconns, uint32_t sessions)
{
	memset(l, 0, sizeof(*l));
	l->port = port;
	l->nconns = nconns;
	l->sessions = sessions;
	l->rng = 0x9e3779b9u;
	l->conns = calloc(nconns, sizeof(*l->conns));
	l->slots = calloc(sessions, sizeof(*l->slots));
	l->dirty = calloc(nconns, sizeof(*l->dirty));
	l->ep = epoll_create1(EPOLL_CLOEXEC);
	if (!l->conns || !l->slots || !l->dirty || l->ep < 0)
		bench_fail("load client setup");
	bench_touch(l->conns, nconns * sizeof(*l->conns));
	bench_touch(l->slots, sessions * sizeof(*l->slots));
	for (uint32_t i = 0; i < nconns; i++) {
		wsconn_t *c = &l->conns[i];
		ws_open(port, c, &l->rng);
		/* room for a burst of requests and answers, resident from now */
		buf_reserve(&c->in, 2 * 65536);
		buf_reserve(&c->out, 65536);
		bench_touch(c->in.p, c->in.cap);
		bench_touch(c->out.p, c->out.cap);
		struct epoll_event ev = {.events = EPOLLIN, .data.u32 = i};
		if (epoll_ctl(l->ep, EPOLL_CTL_ADD, c->fd, &ev) != 0)
			bench_fail("epoll_ctl: %s", strerror(errno));
	}
	for (uint32_t i = 0; i < sessions; i++)
		l->slots[i].conn = i % nconns;
}

static void load_free(load_t *l)
{
	for (uint32_t i = 0; i < l->nconns; i++) {
		close(l->conns[i].fd);
		buf_free(&l->conns[i].in);
		buf_free(&l->conns[i].out);
	}
	close(l->ep);
	free(l->conns);
	free(l->slots);
	free(l->dirty);
}

static void send_turn(load_t *l, uint32_t i)
{
	slot_t *s = &l->slots[i];
	wsconn_t *c = &l->conns[s->conn];
	char req[320];
	int n = snprintf(req, sizeof(req),
			 "{\"type\":\"req\",\"id\":\"%u\",\"method\":\"agent\",\"params\":{\"message\":\"hello\","
			 "\"idempotencyKey\":\"%s-%u-%" PRIu64 "\",\"sessionKey\":\"%s-s%u-g%u\"}}",
			 i, l->prefix, i, s->seq, l->prefix, i, s->gen);
	s->seq++;
	s->busy = true;
	s->sent_ns = now_ns();
	l->submitted++;
	frame_put(&c->out, &l->rng, 1, req, (size_t)n);
	if (!c->dirty) {
		c->dirty = true;
		l->dirty[l->ndirty++] = s->conn;
	}
}

static void flush_conn(load_t *l, uint32_t ci)
{
	wsconn_t *c = &l->conns[ci];
	while (c->out.off < c->out.len) {
		ssize_t w = write(c->fd, c->out.p + c->out.off, c->out.len - c->out.off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && errno == EAGAIN)
			break;
		if (w <= 0)
			bench_fail("write to the gateway: %s", strerror(errno));
		c->out.off += (size_t)w;
	}
	bool full = c->out.off < c->out.len;
	if (full != c->want_out) {
		struct epoll_event ev = {.events = EPOLLIN | (full ? EPOLLOUT : 0), .data.u32 = ci};
		if (epoll_ctl(l->ep, EPOLL_CTL_MOD, c->fd, &ev) != 0)
			bench_fail("epoll_ctl: %s", strerror(errno));
		c->want_out = full;
	}
}

/* The window opened or closed at this completion: this thread's CPU then. */
static void note_window(load_t *l, int before)
{
	if (l->w.state == before)
		return;
	if (l->w.state == 1)
		l->tcpu0 = bench_thread_cpu_s();
	else
		l->tcpu1 = bench_thread_cpu_s();
}

static void turn_done(load_t *l, uint32_t i, bool ok, const frame_t *f)
{
	slot_t *s = &l->slots[i];
	if (!s->busy)
		bench_fail("a final answer for slot %u, which has no turn going", i);
	s->busy = false;
	if (l->w.state == 1)
		pc_hist_record(l->lat, (now_ns() - s->sent_ns) / 1000);
	l->ok += ok;
	l->errors += !ok;
	if (!ok && l->errors <= 3)
		fprintf(stderr, "bench_gateway: failed turn: %.*s\n", (int)(f->len < 400 ? f->len : 400), f->data);
	l->finished++;
	int before = l->w.state;
	if (!l->stop && window_tick(&l->w, l->finished))
		l->stop = true;
	note_window(l, before);
	if (l->turns && ++s->turn >= l->turns) {
		s->turn = 0;
		s->gen++;
	}
	if (!l->stop)
		send_turn(l, i);
}

/* A text frame: events are skipped unparsed (every event frame starts
 * so); answers are the `agent` request's `accepted` and then its final
 * one. */
static void on_text(load_t *l, const frame_t *f)
{
	static const char event_head[] = "{\"type\":\"event\"";
	if (f->len >= sizeof(event_head) - 1 && !memcmp(f->data, event_head, sizeof(event_head) - 1))
		return;
	cJSON *j = cJSON_ParseWithLength(f->data, f->len);
	const char *type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "type"));
	const char *id = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "id"));
	if (!type || strcmp(type, "res") != 0 || !id) {
		cJSON_Delete(j);
		if (type && !strcmp(type, "event"))
			return;
		bench_fail("unexpected frame: %.*s", (int)(f->len < 400 ? f->len : 400), f->data);
	}
	char *endp = NULL;
	unsigned long slot = strtoul(id, &endp, 10);
	if (*endp || slot >= l->sessions)
		bench_fail("an answer to an unknown request: %.*s", (int)(f->len < 400 ? f->len : 400), f->data);
	bool ok = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "ok"));
	const cJSON *pl = cJSON_GetObjectItemCaseSensitive(j, "payload");
	const char *status = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(pl, "status"));
	bool accepted = ok && status && !strcmp(status, "accepted");
	bool done_ok = ok && status && !strcmp(status, "ok");
	cJSON_Delete(j);
	if (accepted)
		l->accepted++;
	else
		turn_done(l, (uint32_t)slot, done_ok, f);
}

static void on_readable(load_t *l, uint32_t ci)
{
	wsconn_t *c = &l->conns[ci];
	for (;;) {
		buf_reserve(&c->in, 65536);
		size_t room = c->in.cap - c->in.len;
		ssize_t n = read(c->fd, c->in.p + c->in.len, room);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			break;
		if (n <= 0)
			bench_fail("the gateway closed a connection (%s)", n == 0 ? "end of stream" : strerror(errno));
		c->in.len += (size_t)n;
		frame_t f;
		while (frame_next(&c->in, &f)) {
			c->in.off += f.size;
			if (f.opcode == 1 || f.opcode == 2)
				on_text(l, &f);
			else if (f.opcode == 9)
				frame_put(&c->out, &l->rng, 10, f.data, f.len); /* pong, flushed below */
			else if (f.opcode == 8)
				bench_fail("the gateway closed a connection (close frame)");
		}
		if ((size_t)n < room)
			break; /* a short read: drained */
	}
	if (c->out.off < c->out.len && !c->dirty) {
		c->dirty = true;
		l->dirty[l->ndirty++] = ci;
	}
}

static void *load_main(void *arg)
{
	load_t *l = arg;
	if (l->w.state == 1)
		l->tcpu0 = bench_thread_cpu_s();
	for (uint32_t i = 0; i < l->sessions; i++)
		send_turn(l, i);
	l->stop = l->once;
	double deadline = bench_now_s() + 4 * BENCH_TIMEOUT_S;
	struct epoll_event evs[256];
	while (!l->stop || l->finished < l->submitted) {
		for (uint32_t k = 0; k < l->ndirty; k++) {
			l->conns[l->dirty[k]].dirty = false;
			flush_conn(l, l->dirty[k]);
		}
		l->ndirty = 0;
		int n = epoll_wait(l->ep, evs, 256, 100);
		if (n < 0 && errno != EINTR)
			bench_fail("epoll_wait: %s", strerror(errno));
		for (int k = 0; k < n; k++) {
			if (evs[k].events & EPOLLOUT)
				flush_conn(l, evs[k].data.u32);
			if (evs[k].events & (EPOLLIN | EPOLLERR | EPOLLHUP))
				on_readable(l, evs[k].data.u32);
		}
		if (bench_now_s() > deadline)
			bench_fail("the WebSocket load timed out (%" PRIu64 " of %" PRIu64 " turns ended)",
				   l->finished, l->submitted);
	}
	if (l->w.state == 1) /* never closed (once) */
		l->tcpu1 = bench_thread_cpu_s();
	return NULL;
}

typedef struct lres {
	result_t r;
	double client_cpu; /* the load thread's CPU in the window, s */
} lres_t;

/* Keeps every slot busy (a fresh session key each `turns` turns, keys
 * starting with `prefix`) until the window `w` closes and every turn sent
 * has its final answer; `once`: one turn per slot (w: window_once). */
static pthread_t load_start(load_t *l, const char *prefix, uint32_t turns, bool once, window_t w, pc_hist_t *lat)
{
	snprintf(l->prefix, sizeof(l->prefix), "%s", prefix);
	l->turns = turns;
	l->once = once;
	l->w = w;
	l->lat = lat;
	l->submitted = l->finished = l->ok = l->errors = l->accepted = 0;
	l->tcpu0 = l->tcpu1 = 0;
	l->stop = false;
	for (uint32_t i = 0; i < l->sessions; i++)
		l->slots[i].gen = l->slots[i].turn = 0;
	pthread_t t;
	if (pthread_create(&t, NULL, load_main, l) != 0)
		bench_fail("pthread_create");
	return t;
}

static void load_join(load_t *l, pthread_t t, lres_t *out)
{
	pthread_join(t, NULL);
	memset(out, 0, sizeof(*out));
	window_result(&l->w, &out->r);
	out->r.ok = l->ok;
	out->r.errors = l->errors;
	out->client_cpu = l->tcpu1 - l->tcpu0;
	/* each turn that ended well was answered twice (docs/gateway.md) */
	if (l->accepted < l->ok)
		bench_fail("%" PRIu64 " turns ended well but only %" PRIu64 " were accepted first", l->ok, l->accepted);
}

static void load_run(load_t *l, const char *prefix, uint32_t turns, bool once, window_t w, pc_hist_t *lat,
		     lres_t *out)
{
	load_join(l, load_start(l, prefix, turns, once, w, lat), out);
}

/* For one turn per slot: a window already open, which nothing closes, so
 * every turn's latency is recorded. */
static window_t window_once(pid_t mock)
{
	window_t w = {.state = 1, .runs = UINT64_MAX, .seconds = 4 * BENCH_TIMEOUT_S, .mock = mock};
	w.t0 = bench_now_s();
	w.c0 = window_cpu(&w);
	return w;
}

/* ---- the in-process comparison: bench_agent's driver, timed --------------- */

typedef struct ldrv {
	adrv_t d;
	bool once; /* one run per slot */
	uint64_t *t0; /* per slot: when its run was submitted, ns */
	pc_hist_t *lat;
} ldrv_t;

/* Whether agent_drive counts `msg` as the end of a run: its RUN_INFO, or
 * an ACCEPTED that refused it. */
static bool ends_run(const pc_msg_t *msg)
{
	if (msg->type == PC_MSG_AGENT_RUN_INFO)
		return true;
	if (msg->type != PC_MSG_AGENT_ACCEPTED)
		return false;
	const pc_agent_submit_reply_t *r = pc_msg_cdata(msg);
	return r->rc != 0 || r->accepted.disposition != PC_AGENT_STARTED;
}

/* agent_drive, noting when each slot's run was submitted (the message
 * that ends one run submits the next) and recording each run's latency
 * while the window measures. Everything here happens before agent_drive:
 * the last run's end signals the waiting thread, which then frees `l`. */
static int timed_drive(pc_ctx_t *ctx, void *state, pc_msg_t *msg)
{
	ldrv_t *l = state;
	uint64_t now = now_ns();
	if (msg->type == ENV_MSG_GO) {
		for (uint32_t i = 0; i < l->d.sessions; i++)
			l->t0[i] = now;
		l->d.stop = l->once; /* the first runs go out whatever stop says */
	} else if (ends_run(msg)) {
		uint32_t slot = (uint32_t)msg->corr;
		if (l->d.w.state == 1)
			pc_hist_record(l->lat, (now - l->t0[slot]) / 1000);
		l->t0[slot] = now;
	}
	return agent_drive(ctx, &l->d, msg);
}

/* run_agent (agent_env.h) with latencies; `once` as for load_start. */
static void run_inproc(agent_env_t *e, uint32_t sessions, uint32_t turns, bool once, window_t w, pc_hist_t *lat,
		       result_t *out)
{
	static const pc_behavior_t timed_b = {"bench-gateway-inproc", timed_drive, NULL};
	ldrv_t l = {.d = {.agent = e->agent, .sessions = sessions, .turns = turns, .w = w}, .once = once, .lat = lat};
	l.d.gen = calloc(sessions, sizeof(uint32_t));
	l.d.turn = calloc(sessions, sizeof(uint32_t));
	l.t0 = calloc(sessions, sizeof(uint64_t));
	if (!l.d.gen || !l.d.turn || !l.t0)
		bench_fail("out of memory");
	bench_latch_init(&l.d.done);
	pc_actor_t *a = NULL;
	if (pc_spawn(e->rt, &timed_b, &l, &a))
		bench_fail("spawn");
	pc_send(a, pc_msg_new(ENV_MSG_GO, 0));
	bench_latch_wait(&l.d.done, 4 * BENCH_TIMEOUT_S, "in-process runs");
	pc_actor_stop(a, PC_EXIT_NORMAL);
	pc_actor_release(a);
	window_result(&l.d.w, out);
	out->ok = l.d.ok;
	out->errors = l.d.errors;
	out->refused = l.d.refused;
	bench_latch_destroy(&l.d.done);
	free(l.d.gen);
	free(l.d.turn);
	free(l.t0);
}

/* ---- gateway_idle ------------------------------------------------------------ */

/* Forgets finished runs (the run registry's 10-minute terminal cache) and
 * waits past the time a session keeps its transcript: what is left is the
 * idle sessions. Trimmed RSS, KiB. */
static uint64_t settled_rss(genv_t *v)
{
	pc_run_registry_sweep(v->e.agent->runs, pc__clock_wall_ms() + (int64_t)PC_RUN_REGISTRY_TERMINAL_TTL_MS + 60000);
	nap_ms(PC__TRANSCRIPT_KEEP_MS + 1500);
	return env_trimmed_rss_kib();
}

static double kib_per(uint64_t after, uint64_t before, uint64_t n)
{
	return n ? ((double)after - (double)before) / (double)n : 0;
}

/* RSS per connected idle client, KiB: `n` clients through the handshake,
 * then left alone (this side holds only their sockets). */
static double idle_clients_kib(genv_t *v, uint32_t n, uint32_t *rng)
{
	wsconn_t *cl = calloc(n, sizeof(*cl));
	if (!cl)
		bench_fail("out of memory");
	bench_touch(cl, n * sizeof(*cl));
	nap_ms(200);
	uint64_t rss0 = env_trimmed_rss_kib();
	for (uint32_t i = 0; i < n; i++)
		ws_open(v->port, &cl[i], rng);
	pc_runtime_wait_quiescent(v->e.rt, 10000);
	nap_ms(200);
	uint64_t rss1 = env_trimmed_rss_kib();
	for (uint32_t i = 0; i < n; i++)
		close(cl[i].fd);
	free(cl);
	return kib_per(rss1, rss0, n);
}

typedef struct idle_sessions {
	uint64_t n_gw, n_ip;          /* sessions made (one turn each) */
	double kib_gw, kib_ip;        /* RSS per idle session */
	double kib_freed_on_close;    /* per gateway session, when its connections closed */
	uint64_t live_gw, live_ip, live; /* session actors */
} idle_sessions_t;

/* One turn in each of about `n` fresh sessions, `slots` at a time over
 * slots / PER_CONN connections; the same in-process; RSS per session once
 * they are idle. Then the connections close: what that gives back. */
static void idle_sessions(genv_t *v, uint32_t slots, uint32_t n, idle_sessions_t *out)
{
	load_t l;
	load_new(&l, v->port, slots / PER_CONN, slots);
	pc_hist_t *lat = hist_new();
	window_t w = {.runs = n, .seconds = BENCH_TIMEOUT_S};
	lres_t warm, gw;
	result_t ip;
	memset(&ip, 0, sizeof(ip));
	pc_agent_stats_t st0, st1, st2;
	/* both paths warm (the store's page cache, the allocator's arenas)
	 * before the first measurement, so neither pays for the other; the
	 * in-process warm-up has half the slots, hence keys of its own
	 * (b<slots>-s<slot>-g<gen>) */
	load_run(&l, "warm", 1, false, (window_t){.runs = slots, .seconds = BENCH_TIMEOUT_S}, lat, &warm);
	result_t ipwarm;
	run_inproc(&v->e, slots / 2, 1, false, (window_t){.runs = slots, .seconds = BENCH_TIMEOUT_S}, lat, &ipwarm);
	uint64_t s0 = settled_rss(v);
	pc_agent_stats(v->e.agent, &st0);
	load_run(&l, "idle", 1, false, w, lat, &gw);
	uint64_t s1 = settled_rss(v);
	pc_agent_stats(v->e.agent, &st1);
	run_inproc(&v->e, slots, 1, false, w, lat, &ip);
	uint64_t s2 = settled_rss(v);
	pc_agent_stats(v->e.agent, &st2);
	load_free(&l);
	pc_hist_free(lat);
	uint64_t s3 = settled_rss(v);
	if (warm.r.errors || gw.r.errors || ipwarm.errors || ip.errors)
		bench_fail("idle sessions: %" PRIu64 " gateway and %" PRIu64 " in-process turns failed",
			   warm.r.errors + gw.r.errors, ipwarm.errors + ip.errors);
	*out = (idle_sessions_t){
		.n_gw = gw.r.ok, .n_ip = ip.ok,
		.kib_gw = kib_per(s1, s0, gw.r.ok), .kib_ip = kib_per(s2, s1, ip.ok),
		.kib_freed_on_close = kib_per(s2, s3, gw.r.ok),
		.live_gw = st1.sessions_live - st0.sessions_live, .live_ip = st2.sessions_live - st1.sessions_live,
		.live = st2.sessions_live,
	};
}

static void bench_idle(const params_t *p, rlim_t nofile)
{
	genv_t v;
	genv_start(&v, p, 1000, 0, 0);

	/* the first client: from a cold gateway to hello-ok */
	wsconn_t first;
	uint32_t rng = 1;
	double t0 = bench_now_s();
	ws_open(v.port, &first, &rng);
	double first_ms = (bench_now_s() - t0) * 1e3;
	close(first.fd);

	uint32_t nclients = p->clients;
	if ((rlim_t)nclients * 2 + 512 > nofile) {
		nclients = nofile > 1024 ? (uint32_t)((nofile - 512) / 2) : 0;
		fprintf(stderr, "bench_gateway: open-file limit %lu: %u idle clients\n", (unsigned long)nofile, nclients);
	}
	double kib_client = idle_clients_kib(&v, nclients, &rng);
	idle_sessions_t is;
	idle_sessions(&v, 1000, 10000, &is);

	char extra[1536];
	snprintf(extra, sizeof(extra),
		 "\"ready_ms\":%.2f,\"agent_new_ms\":%.2f,\"first_hello_ms\":%.2f,\"rss_idle_kib\":%" PRIu64
		 ",\"rss_before_gateway_kib\":%" PRIu64 ",\"gateway_rss_kib\":%" PRId64 ",\"idle_clients\":%u,"
		 "\"kib_per_idle_client\":%.2f,\"idle_sessions\":%" PRIu64 ",\"kib_per_idle_session\":%.2f,"
		 "\"inproc_idle_sessions\":%" PRIu64 ",\"inproc_kib_per_idle_session\":%.2f,"
		 "\"gateway_kib_per_idle_session\":%.2f,\"kib_freed_per_session_on_close\":%.2f,"
		 "\"sessions_live\":%" PRIu64 ",\"sessions_live_gateway\":%" PRIu64 ",\"sessions_live_inproc\":%" PRIu64,
		 v.ready_ms, v.agent_ms, first_ms, v.rss_gateway_kib, v.rss_agent_kib,
		 (int64_t)v.rss_gateway_kib - (int64_t)v.rss_agent_kib, nclients, kib_client, is.n_gw, is.kib_gw,
		 is.n_ip, is.kib_ip, is.kib_gw - is.kib_ip, is.kib_freed_on_close, is.live, is.live_gw, is.live_ip);
	bench_report("gateway_idle", p->workers, v.ready_ms / 1e3, 0, extra);
	genv_stop(&v);
}

/* ---- gateway_turns ------------------------------------------------------------ */

static window_t turns_window(const params_t *p, uint32_t sessions, pid_t mock)
{
	uint64_t warm = sessions >= 1000 ? sessions : (sessions * 4 > 400 ? sessions * 4 : 400);
	/* at 10,000 one round of every session takes seconds: a window of
	 * several rounds */
	double seconds = sessions >= 10000 ? 3 * p->seconds : p->seconds;
	return (window_t){.warm = warm, .runs = sessions == 1 ? 3000 : sessions >= 10000 ? 100000 : 30000, .seconds = seconds, .mock = mock};
}

/* Server CPU per turn (process + mock child - the load thread), µs. */
static double server_us(const lres_t *r)
{
	return r->r.n ? (r->r.cpu - r->client_cpu) * 1e6 / (double)r->r.n : 0;
}

static double per_s(const result_t *r) { return r->wall > 0 ? (double)r->n / r->wall : 0; }

static void report_turns(const params_t *p, uint32_t sessions, uint32_t conns, bool child, const lres_t *g,
			 const pc_hist_t *glat, const result_t *ip, const pc_hist_t *iplat)
{
	double ip_us = ip->n ? ip->cpu * 1e6 / (double)ip->n : 0;
	char extra[1536];
	snprintf(extra, sizeof(extra),
		 "\"sessions\":%u,\"connections\":%u,\"sessions_per_connection\":%u,\"mock\":\"%s\","
		 "\"turns_per_session_key\":%u,\"turns\":%" PRIu64 ",\"turns_per_s\":%.0f,\"p50_us\":%.0f,"
		 "\"p99_us\":%.0f,\"server_cpu_us_per_turn\":%.1f,\"client_cpu_us_per_turn\":%.1f,"
		 "\"turns_ok\":%" PRIu64 ",\"turns_failed\":%" PRIu64 ",\"inproc_runs\":%" PRIu64
		 ",\"inproc_runs_per_s\":%.0f,\"inproc_p50_us\":%.0f,\"inproc_p99_us\":%.0f,"
		 "\"inproc_cpu_us_per_run\":%.1f,\"inproc_failed\":%" PRIu64 ",\"gateway_cpu_us_per_turn\":%.1f,"
		 "\"turns_per_s_vs_inproc\":%.2f",
		 sessions, conns, (sessions + conns - 1) / conns, child ? "child_process" : "in_process", p->turns,
		 g->r.n, per_s(&g->r), pct_us(glat, 50), pct_us(glat, 99), server_us(g),
		 g->r.n ? g->client_cpu * 1e6 / (double)g->r.n : 0, g->r.ok, g->r.errors, ip->n, per_s(ip),
		 pct_us(iplat, 50), pct_us(iplat, 99), ip_us, ip->errors, server_us(g) - ip_us,
		 per_s(ip) > 0 ? per_s(&g->r) / per_s(ip) : 0);
	bench_report("gateway_turns", p->workers, g->r.wall, g->r.n, extra);
}

static void bench_openai(const params_t *p, genv_t *v, const result_t *ip);

/* One session count: the in-process driver, then the gateway, in one
 * environment; at 100 sessions also 100 one-session connections and the
 * OpenAI endpoint. */
static void bench_turns(const params_t *p, uint32_t sessions, rlim_t nofile, bool ws, bool openai)
{
	/* in-process, both ends of each mock connection are here; plus one
	 * socket per client connection at each end */
	uint32_t conns = (sessions + PER_CONN - 1) / PER_CONN;
	bool child = (rlim_t)sessions * 2 + (rlim_t)conns * 2 + 512 > nofile;
	if ((rlim_t)sessions + (rlim_t)conns * 2 + 512 > nofile) {
		fprintf(stderr, "bench_gateway: skipping %u sessions (open-file limit %lu)\n", sessions,
			(unsigned long)nofile);
		return;
	}
	uint16_t mport = 0;
	pid_t mock = child ? bench_mock_child(SCENARIO, 1, &mport) : 0;
	genv_t v;
	genv_start(&v, p, sessions > 100 ? sessions : 100, mock, mport);
	window_t w = turns_window(p, sessions, mock);
	pc_hist_t *iplat = hist_new(), *glat = hist_new();
	result_t ip;
	memset(&ip, 0, sizeof(ip));
	run_inproc(&v.e, sessions, p->turns, false, w, iplat, &ip);
	if (ip.errors)
		bench_fail("in-process: %" PRIu64 " of %" PRIu64 " runs failed", ip.errors, ip.ok + ip.errors);
	uint32_t layouts[2] = {conns, sessions == 100 ? sessions : 0};
	for (int k = 0; ws && k < 2 && layouts[k]; k++) {
		load_t l;
		load_new(&l, v.port, layouts[k], sessions);
		char prefix[24];
		snprintf(prefix, sizeof(prefix), "g%ux%u", sessions, layouts[k]);
		lres_t g;
		pc_hist_reset(glat);
		load_run(&l, prefix, p->turns, false, w, glat, &g);
		load_free(&l);
		report_turns(p, sessions, layouts[k], child, &g, glat, &ip, iplat);
		if (g.r.errors)
			bench_fail("%u sessions: %" PRIu64 " of %" PRIu64 " turns failed", sessions, g.r.errors,
				   g.r.ok + g.r.errors);
	}
	if (openai)
		bench_openai(p, &v, &ip);
	pc_hist_free(iplat);
	pc_hist_free(glat);
	genv_stop(&v);
}

/* ---- gateway_openai: POST /v1/chat/completions over curl-multi --------------- */

typedef struct oslot {
	CURL *easy;
	uint32_t idx, gen, turn;
	uint64_t t0;
	size_t got;
	bool done_seen; /* the stream's data: [DONE] */
} oslot_t;

typedef struct ojob {
	uint16_t port;
	uint32_t conc, turns;
	bool stream;
	window_t w;
	pc_hist_t *lat;
	uint64_t ok, errors;
	double tcpu0, tcpu1;
} ojob_t;

static size_t oa_write(char *data, size_t size, size_t n, void *arg)
{
	oslot_t *s = arg;
	size_t len = size * n;
	s->got += len;
	if (memmem(data, len, "[DONE]", 6))
		s->done_seen = true;
	return len;
}

static void oa_start(CURLM *multi, ojob_t *j, oslot_t *s, struct curl_slist *h)
{
	char url[96], body[256];
	snprintf(url, sizeof(url), "http://127.0.0.1:%u/v1/chat/completions", (unsigned)j->port);
	/* `user` names the session (agent:main:openai-user:<user>) */
	snprintf(body, sizeof(body),
		 "{\"model\":\"pincer\",\"stream\":%s,\"user\":\"oa%d-%u-g%u\","
		 "\"messages\":[{\"role\":\"user\",\"content\":\"hello\"}]}",
		 j->stream ? "true" : "false", j->stream, s->idx, s->gen);
	if (!s->easy) {
		s->easy = curl_easy_init();
		if (!s->easy)
			bench_fail("curl_easy_init");
		curl_easy_setopt(s->easy, CURLOPT_URL, url);
		curl_easy_setopt(s->easy, CURLOPT_HTTPHEADER, h);
		curl_easy_setopt(s->easy, CURLOPT_WRITEFUNCTION, oa_write);
		curl_easy_setopt(s->easy, CURLOPT_WRITEDATA, s);
		curl_easy_setopt(s->easy, CURLOPT_PRIVATE, s);
		curl_easy_setopt(s->easy, CURLOPT_NOSIGNAL, 1L);
	}
	curl_easy_setopt(s->easy, CURLOPT_COPYPOSTFIELDS, body);
	s->got = 0;
	s->done_seen = false;
	s->t0 = now_ns();
	if (curl_multi_add_handle(multi, s->easy) != CURLM_OK)
		bench_fail("curl_multi_add_handle");
}

/* One answer: 200 with a body; streamed, ending with data: [DONE]. */
static bool oa_good(const ojob_t *j, const oslot_t *s, CURLcode res)
{
	long code = 0;
	curl_easy_getinfo(s->easy, CURLINFO_RESPONSE_CODE, &code);
	return res == CURLE_OK && code == 200 && s->got > 0 && (!j->stream || s->done_seen);
}

static void oa_done(CURLM *multi, ojob_t *j, oslot_t *s, CURLcode res, uint64_t *finished, bool *stop)
{
	bool good = oa_good(j, s, res);
	curl_multi_remove_handle(multi, s->easy);
	if (j->w.state == 1)
		pc_hist_record(j->lat, (now_ns() - s->t0) / 1000);
	j->ok += good;
	j->errors += !good;
	if (!good && j->errors <= 3)
		fprintf(stderr, "bench_gateway: OpenAI request failed: %s\n", curl_easy_strerror(res));
	int before = j->w.state;
	++*finished;
	if (!*stop && window_tick(&j->w, *finished))
		*stop = true;
	if (j->w.state != before)
		*(j->w.state == 1 ? &j->tcpu0 : &j->tcpu1) = bench_thread_cpu_s();
	if (j->turns && ++s->turn >= j->turns) {
		s->turn = 0;
		s->gen++;
	}
}

static void *oa_thread(void *arg)
{
	ojob_t *j = arg;
	CURLM *multi = curl_multi_init();
	curl_multi_setopt(multi, CURLMOPT_MAX_HOST_CONNECTIONS, (long)j->conc);
	curl_multi_setopt(multi, CURLMOPT_MAXCONNECTS, (long)j->conc);
	struct curl_slist *h = curl_slist_append(NULL, "Expect:");
	h = curl_slist_append(h, "Content-Type: application/json");
	h = curl_slist_append(h, "Authorization: Bearer " TOKEN);
	oslot_t *slots = calloc(j->conc, sizeof(*slots));
	if (!multi || !h || !slots)
		bench_fail("curl setup");
	uint64_t started = 0, finished = 0;
	bool stop = false;
	for (uint32_t i = 0; i < j->conc; i++, started++) {
		slots[i].idx = i;
		oa_start(multi, j, &slots[i], h);
	}
	double deadline = bench_now_s() + 4 * BENCH_TIMEOUT_S;
	while (finished < started) {
		int running, left;
		curl_multi_perform(multi, &running);
		CURLMsg *m;
		while ((m = curl_multi_info_read(multi, &left))) {
			if (m->msg != CURLMSG_DONE)
				continue;
			oslot_t *s;
			curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&s);
			oa_done(multi, j, s, m->data.result, &finished, &stop);
			if (!stop) {
				oa_start(multi, j, s, h);
				started++;
			}
		}
		if (finished < started)
			curl_multi_poll(multi, NULL, 0, 100, NULL);
		if (bench_now_s() > deadline)
			bench_fail("the OpenAI load timed out");
	}
	for (uint32_t i = 0; i < j->conc; i++)
		curl_easy_cleanup(slots[i].easy);
	free(slots);
	curl_slist_free_all(h);
	curl_multi_cleanup(multi);
	return NULL;
}

static void bench_openai(const params_t *p, genv_t *v, const result_t *ip)
{
	const uint32_t conc = 100;
	double ip_us = ip->n ? ip->cpu * 1e6 / (double)ip->n : 0;
	for (int stream = 0; stream < 2; stream++) {
		ojob_t j = {.port = v->port, .conc = conc, .turns = p->turns, .stream = stream,
			    .w = turns_window(p, conc, v->mock), .lat = hist_new()};
		pthread_t t;
		if (pthread_create(&t, NULL, oa_thread, &j) != 0)
			bench_fail("pthread_create");
		pthread_join(t, NULL);
		result_t r;
		window_result(&j.w, &r);
		double client = j.tcpu1 - j.tcpu0;
		double server = r.n ? (r.cpu - client) * 1e6 / (double)r.n : 0;
		char extra[1024];
		snprintf(extra, sizeof(extra),
			 "\"stream\":%s,\"concurrency\":%u,\"requests\":%" PRIu64 ",\"requests_per_s\":%.0f,"
			 "\"p50_us\":%.0f,\"p99_us\":%.0f,\"server_cpu_us_per_request\":%.1f,"
			 "\"client_cpu_us_per_request\":%.1f,\"requests_ok\":%" PRIu64 ",\"requests_failed\":%" PRIu64
			 ",\"inproc_runs_per_s\":%.0f,\"inproc_cpu_us_per_run\":%.1f,\"gateway_cpu_us_per_request\":%.1f",
			 stream ? "true" : "false", conc, r.n, per_s(&r), pct_us(j.lat, 50), pct_us(j.lat, 99), server,
			 r.n ? client * 1e6 / (double)r.n : 0, j.ok, j.errors, per_s(ip), ip_us, server - ip_us);
		bench_report("gateway_openai", p->workers, r.wall, r.n, extra);
		pc_hist_free(j.lat);
		if (j.errors)
			bench_fail("OpenAI (%s): %" PRIu64 " of %" PRIu64 " requests failed", stream ? "streamed" : "plain",
				   j.errors, j.ok + j.errors);
	}
}

/* ---- gateway_inflight ------------------------------------------------------------ */

typedef struct flight {
	uint64_t rss_before, rss_peak; /* KiB; rss_peak at the most transfers live */
	uint64_t max_live;             /* model calls in flight at once */
	double ramp_s;                 /* start to that sample */
} flight_t;

/* Samples transfers in flight and RSS every 20 ms until the first turn
 * ends (after that the set in flight only shrinks). */
static void sample_flight(genv_t *v, const pc_io_stats_t *io0, uint64_t finished0, double t0, flight_t *f)
{
	while (bench_now_s() - t0 < BENCH_TIMEOUT_S) {
		nap_ms(20);
		pc_io_stats_t io;
		pc_agent_stats_t st;
		pc_io_stats(v->e.io, &io);
		uint64_t rss = bench_rss_kib();
		pc_agent_stats(v->e.agent, &st);
		if (st.runs_finished != finished0)
			break;
		uint64_t live = io.transfers_live - io0->transfers_live;
		if (live > f->max_live || (live == f->max_live && rss > f->rss_peak)) {
			f->max_live = live;
			f->rss_peak = rss;
			f->ramp_s = bench_now_s() - t0;
		}
	}
}

static void flight_begin(genv_t *v, flight_t *f, pc_io_stats_t *io0, uint64_t *finished0)
{
	memset(f, 0, sizeof(*f));
	pc_agent_stats_t st;
	pc_io_stats(v->e.io, io0);
	pc_agent_stats(v->e.agent, &st);
	*finished0 = st.runs_finished;
	f->rss_before = env_trimmed_rss_kib();
}

typedef struct ipjob {
	agent_env_t *e;
	uint32_t n;
	window_t w;
	pc_hist_t *lat;
	result_t r;
} ipjob_t;

static void *inproc_thread(void *arg)
{
	ipjob_t *j = arg;
	run_inproc(j->e, j->n, 1, true, j->w, j->lat, &j->r);
	return NULL;
}

static void bench_inflight(const params_t *p, uint32_t n, rlim_t nofile)
{
	uint32_t conns = (n + PER_CONN - 1) / PER_CONN;
	if ((rlim_t)n + (rlim_t)conns * 2 + 512 > nofile) {
		printf("{\"bench\":\"gateway_inflight\",\"sessions\":%u,\"skipped\":true,\"reason\":\"open-file limit "
		       "%lu\"}\n", n, (unsigned long)nofile);
		fflush(stdout);
		return;
	}
	char scenario[128];
	snprintf(scenario, sizeof(scenario), "{\"default\":{\"text\":\"ok\",\"chunks\":1,\"ttft_ms\":%u}}",
		 p->latency_ms);
	uint16_t mport = 0;
	pid_t mock = bench_mock_child(scenario, 1, &mport);
	genv_t v;
	genv_start(&v, p, n, mock, mport);
	load_t l;
	load_new(&l, v.port, conns, n);
	pc_hist_t *glat = hist_new(), *iplat = hist_new();

	/* warm-up: 64 turns through the gateway, 64 in-process */
	load_t wl;
	lres_t wr;
	result_t wip;
	load_new(&wl, v.port, 1, 64);
	load_run(&wl, "fwarm", 1, true, window_once(mock), glat, &wr);
	load_free(&wl);
	run_inproc(&v.e, 64, 1, true, window_once(mock), iplat, &wip);
	if (wr.r.errors || wip.errors)
		bench_fail("in-flight warm-up: turns failed");
	pc_hist_reset(glat);
	pc_hist_reset(iplat);

	/* the gateway: n turns at once over `conns` connections */
	flight_t fg, fi;
	pc_io_stats_t io0;
	uint64_t fin0;
	flight_begin(&v, &fg, &io0, &fin0);
	double t0 = bench_now_s();
	pthread_t t = load_start(&l, "f", 1, true, window_once(mock), glat);
	sample_flight(&v, &io0, fin0, t0, &fg);
	lres_t g;
	load_join(&l, t, &g);
	double gwall = bench_now_s() - t0;

	/* in-process: n runs at once, driven from a thread while this one samples */
	flight_begin(&v, &fi, &io0, &fin0);
	ipjob_t job = {.e = &v.e, .n = n, .w = window_once(mock), .lat = iplat};
	t0 = bench_now_s();
	if (pthread_create(&t, NULL, inproc_thread, &job) != 0)
		bench_fail("pthread_create");
	sample_flight(&v, &io0, fin0, t0, &fi);
	pthread_join(t, NULL);
	double ipwall = bench_now_s() - t0;
	const result_t *ip = &job.r;

	char extra[1536];
	snprintf(extra, sizeof(extra),
		 "\"sessions\":%u,\"connections\":%u,\"latency_ms\":%u,\"turns_ok\":%" PRIu64 ",\"turns_failed\":%" PRIu64
		 ",\"all_completed\":%s,\"max_in_flight\":%" PRIu64 ",\"ramp_s\":%.2f,\"p50_ms\":%.1f,\"p99_ms\":%.1f,"
		 "\"kib_per_inflight_turn\":%.2f,\"inproc_runs_ok\":%" PRIu64 ",\"inproc_runs_failed\":%" PRIu64
		 ",\"inproc_max_in_flight\":%" PRIu64 ",\"inproc_wall_s\":%.2f,\"inproc_p50_ms\":%.1f,"
		 "\"inproc_p99_ms\":%.1f,\"inproc_kib_per_inflight_run\":%.2f",
		 n, conns, p->latency_ms, g.r.ok, g.r.errors, g.r.ok == n && !g.r.errors ? "true" : "false", fg.max_live,
		 fg.ramp_s, pct_us(glat, 50) / 1e3, pct_us(glat, 99) / 1e3, kib_per(fg.rss_peak, fg.rss_before, fg.max_live),
		 ip->ok, ip->errors, fi.max_live, ipwall, pct_us(iplat, 50) / 1e3, pct_us(iplat, 99) / 1e3,
		 kib_per(fi.rss_peak, fi.rss_before, fi.max_live));
	bench_report("gateway_inflight", p->workers, gwall, g.r.ok, extra);
	load_free(&l);
	pc_hist_free(glat);
	pc_hist_free(iplat);
	genv_stop(&v);
	if (g.r.ok != n || ip->ok != n)
		bench_fail("%u in flight: %" PRIu64 " gateway turns and %" PRIu64 " in-process runs of %u ended well", n,
			   g.r.ok, ip->ok, n);
}

/* ---- main ------------------------------------------------------------------------ */

static bool want(const params_t *p, const char *what) { return !p->only || !strcmp(p->only, what); }

#define USAGE                                                                                      \
	"usage: bench_gateway [--workers W] [--seconds S] [--sessions N] [--turns K] [--clients C] "   \
	"[--latency-ms L] [--only idle|turns|openai|inflight]"

int main(int argc, char **argv)
{
	params_t p = {.workers = 2, .turns = 8, .clients = 5000, .latency_ms = 2000, .seconds = 3};
	if ((argc - 1) % 2)
		bench_fail(USAGE);
	for (int i = 1; i + 1 < argc; i += 2) {
		const char *a = argv[i], *val = argv[i + 1];
		if (!strcmp(a, "--workers"))
			p.workers = (uint32_t)strtoul(val, NULL, 10);
		else if (!strcmp(a, "--seconds"))
			p.seconds = strtod(val, NULL);
		else if (!strcmp(a, "--sessions"))
			p.sessions = (uint32_t)strtoul(val, NULL, 10);
		else if (!strcmp(a, "--turns"))
			p.turns = (uint32_t)strtoul(val, NULL, 10);
		else if (!strcmp(a, "--clients"))
			p.clients = (uint32_t)strtoul(val, NULL, 10);
		else if (!strcmp(a, "--latency-ms"))
			p.latency_ms = (uint32_t)strtoul(val, NULL, 10);
		else if (!strcmp(a, "--only") && (!strcmp(val, "idle") || !strcmp(val, "turns") ||
						 !strcmp(val, "openai") || !strcmp(val, "inflight")))
			p.only = val;
		else
			bench_fail(USAGE);
	}
	if (!p.workers || p.seconds <= 0)
		bench_fail(USAGE);
	rlim_t nofile = env_raise_nofile(1 << 17);
	curl_global_init(CURL_GLOBAL_DEFAULT);
	if (want(&p, "idle"))
		bench_idle(&p, nofile);
	const uint32_t set[] = {1, 100, 1000, 10000};
	for (size_t i = 0; i < sizeof(set) / sizeof(set[0]); i++) {
		uint32_t n = p.sessions ? p.sessions : set[i];
		bool ws = want(&p, "turns"), openai = want(&p, "openai") && n == 100;
		if (ws || openai)
			bench_turns(&p, n, nofile, ws, openai);
		if (p.sessions)
			break;
	}
	if (want(&p, "inflight"))
		bench_inflight(&p, p.sessions ? p.sessions : 10000, nofile);
	curl_global_cleanup();
	return 0;
}
