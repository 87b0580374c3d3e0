/*
 * The HTTP client on the I/O loops, against a scripted raw TCP server:
 * message order, every transport outcome, cancel, backpressure, shutdown
 * with live transfers, and many concurrent transfers.
 */
#include <criterion/criterion.h>
#include <stdio.h>

#include <curl/curl.h>

#include "io/http_client.h"
#include "gate_server.h"
#include "io/io.h"
#include "raw_server.h"
#include "test_util.h"

/* ---- a collecting owner actor ------------------------------------------- */

typedef struct collector {
	pthread_mutex_t lock;
	int heads, ends, datas;
	int order_ok;     /* HEAD before DATA before END, END last */
	int status;
	char retry_after[32];
	char *body;
	size_t body_len, body_cap;
	size_t max_unconsumed;
	size_t unconsumed;
	bool consume;     /* report chunks consumed as they arrive */
	pc_http_end_msg_t end;
	pc_http_call_t *call; /* set by the test after fetch */
} collector_t;

static int collect(pc_ctx_t *ctx, void *state, pc_msg_t *msg)
{
	(void)ctx;
	collector_t *c = state;
	pthread_mutex_lock(&c->lock);
	switch (msg->type) {
	case PC_MSG_HTTP_RESPONSE_HEAD: {
		const pc_http_head_msg_t *h = pc_msg_data(msg);
		if (c->heads || c->datas || c->ends)
			c->order_ok = 0;
		c->heads++;
		c->status = h->status;
		pc_http_head_get(h, "Retry-After", c->retry_after, sizeof(c->retry_after));
		break;
	}
	case PC_MSG_HTTP_RESPONSE_DATA: {
		const pc_http_data_msg_t *d = pc_msg_data(msg);
		if (!c->heads || c->ends)
			c->order_ok = 0;
		c->datas++;
		/* Doubling: a realloc per chunk copies an 8 MiB body hundreds of
		 * times, which under TSan takes longer than the test waits. */
		if (c->body_len + d->len + 1 > c->body_cap) {
			c->body_cap = 2 * (c->body_len + d->len + 1);
			c->body = realloc(c->body, c->body_cap);
		}
		memcpy(c->body + c->body_len, d->data, d->len);
		c->body_len += d->len;
		c->body[c->body_len] = '\0';
		c->unconsumed += d->len;
		if (c->unconsumed > c->max_unconsumed)
			c->max_unconsumed = c->unconsumed;
		if (c->consume && c->call) {
			pc_http_call_consumed(c->call, c->unconsumed);
			c->unconsumed = 0;
		}
		break;
	}
	case PC_MSG_HTTP_RESPONSE_END:
		if (c->ends)
			c->order_ok = 0;
		c->ends++;
		c->end = *(const pc_http_end_msg_t *)pc_msg_data(msg);
		break;
	}
	pthread_mutex_unlock(&c->lock);
	return 0;
}

static const pc_behavior_t collector_b = {.name = "collector", .receive = collect};

static pc_runtime_t *rt;
static pc_io_t *io;
static int fds_before; /* descriptors open before the I/O layer started */

/* The I/O thread's trims, after light work (runtime/trim.h): 32 x 50 ms. */
#define TRIM_AFTER_MS 50

static void setup(void)
{
	fds_before = open_fds();
	pc_runtime_config_t rc;
	pc_runtime_config_init(&rc);
	rc.workers = 2;
	rc.trim_after_ms = TRIM_AFTER_MS;
	cr_assert_eq(pc_runtime_new(&rc, &rt), 0);
	cr_assert_eq(pc_runtime_start(rt), 0);
	pc_io_config_t cfg = {.threads = 1};
	cr_assert_eq(pc_io_new(rt, &cfg, &io), 0);
}

static void teardown(void)
{
	pc_io_free(io);
	pc_runtime_stop(rt);
	FREE_RUNTIME_CHECKED(rt);
	/* Every socket, epoll and eventfd the layer opened is closed again. */
	cr_assert_eq(open_fds(), fds_before, "file descriptors leaked");
}

TestSuite(io_client, .init = setup, .fini = teardown, .timeout = 60);

static collector_t *collector_new(bool consume)
{
	collector_t *c = calloc(1, sizeof(*c));
	pthread_mutex_init(&c->lock, NULL);
	c->order_ok = 1;
	c->consume = consume;
	return c;
}

static int ends_of(collector_t *c)
{
	pthread_mutex_lock(&c->lock);
	int e = c->ends;
	pthread_mutex_unlock(&c->lock);
	return e;
}

static int datas_of(collector_t *c)
{
	pthread_mutex_lock(&c->lock);
	int d = c->datas;
	pthread_mutex_unlock(&c->lock);
	return d;
}

static void collector_free(collector_t *c)
{
	pthread_mutex_destroy(&c->lock);
	free(c->body);
	free(c);
}

/* The actor's state is the test's; the actor never frees it. */
static pc_actor_t *spawn_collector(collector_t *c)
{
	pc_actor_t *a = NULL;
	cr_assert_eq(pc_spawn(rt, &collector_b, c, &a), 0);
	return a;
}

static pc_http_call_t *fetch(const char *url, const char *body, collector_t *c, pc_actor_t *a,
			     pc_http_client_request_t *extra)
{
	pc_http_client_request_t req = extra ? *extra : (pc_http_client_request_t){0};
	req.url = url;
	if (body) {
		req.body = body;
		req.body_len = strlen(body);
	}
	pc_http_call_t *call = NULL;
	pthread_mutex_lock(&c->lock);
	cr_assert_eq(pc_http_fetch(io, &req, a, &call), 0);
	c->call = call;
	pthread_mutex_unlock(&c->lock);
	return call;
}

static void finish(collector_t *c, pc_actor_t *a)
{
	AWAIT(ends_of(c) == 1, 10000);
	quiesce(rt);
	pc_http_call_release(c->call);
	pc_actor_stop(a, PC_EXIT_NORMAL);
	pc_actor_release(a);
	quiesce(rt);
}

static char url[128];

static void set_url(const raw_server_t *s, const char *path)
{
	snprintf(url, sizeof(url), "http://127.0.0.1:%u%s", s->port, path);
}

/* ---- scripted servers --------------------------------------------------- */

static void serve_hello(int fd, void *arg)
{
	(void)arg;
	char buf[8192];
	while (raw_read_request(fd, buf, sizeof(buf)) > 0) {
		const char *body = strstr(buf, "\r\n\r\n") + 4;
		char out[9000];
		int n = snprintf(out, sizeof(out),
				 "HTTP/1.1 200 OK\r\nRetry-After: 7\r\nContent-Length: %zu\r\n\r\nhello:%s",
				 strlen(body) + 6, body);
		raw_write_all(fd, out, (size_t)n);
	}
}

Test(io_client, get_and_post_arrive_in_order_with_headers)
{
	raw_server_t s;
	raw_server_start(&s, serve_hello, NULL);
	set_url(&s, "/x");
	for (int i = 0; i < 2; i++) {
		collector_t *c = collector_new(true);
		pc_actor_t *a = spawn_collector(c);
		fetch(url, i ? "a body" : NULL, c, a, NULL);
		finish(c, a);
		cr_assert_eq(c->heads, 1);
		cr_assert_eq(c->ends, 1);
		cr_assert(c->order_ok);
		cr_assert_eq(c->status, 200);
		cr_assert_str_eq(c->retry_after, "7");
		cr_assert_str_eq(c->body, i ? "hello:a body" : "hello:");
		cr_assert_eq(c->end.result, 0);
		cr_assert_eq(c->end.transport, PC_HTTP_OK);
		cr_assert_eq(c->end.status, 200);
		cr_assert_eq(c->end.bytes, c->body_len);
		collector_free(c);
	}
	raw_server_stop(&s);
	/* Both requests went over one kept-alive connection. */
	cr_assert_eq(s.accepted, 1);
}

/* One GET of `url` (serve_hello at "/x"), answered in full. */
static void get_hello(void)
{
	collector_t *c = collector_new(true);
	pc_actor_t *a = spawn_collector(c);
	fetch(url, NULL, c, a, NULL);
	finish(c, a);
	cr_assert_eq(c->end.result, 0, "%s", c->end.error);
	cr_assert_eq(c->status, 200);
	cr_assert_str_eq(c->body, "hello:");
	collector_free(c);
}

/* After a busy stretch the I/O thread gives its free heap back once, a
 * while of nothing later (a few requests are light work: 32 trim_after_ms,
 * 1.6 s), and then sleeps: no wake-up of its own while nothing happens. */
Test(io_client, an_idle_io_thread_trims_once_then_sleeps)
{
	raw_server_t s;
	raw_server_start(&s, serve_hello, NULL);
	set_url(&s, "/x");
	pc_io_stats_t st0, st1, st2;
	pc_io_stats(io, &st0);
	for (int i = 0; i < 5; i++)
		get_hello();
	raw_server_stop(&s);
	uint64_t until = now_ms() + 5000;
	do {
		sleep_ms(50);
		pc_io_stats(io, &st1);
	} while (st1.trims == st0.trims && now_ms() < until);
	cr_assert_eq(st1.trims, st0.trims + 1, "one trim after the busy stretch");
	sleep_ms(1500);
	pc_io_stats(io, &st2);
	cr_assert_eq(st2.trims, st1.trims, "no second trim without work");
	cr_assert_eq(st2.wakeups, st1.wakeups, "asleep while nothing happens");
}

/* Requests more often than the trim's wait (1.6 s for light work) do not
 * put the I/O thread's trim off for ever: it falls due that long after
 * the thread first went idle. */
Test(io_client, requests_more_often_than_the_trim_wait_do_not_put_it_off)
{
	raw_server_t s;
	raw_server_start(&s, serve_hello, NULL);
	set_url(&s, "/x");
	pc_io_stats_t st0, st1;
	pc_io_stats(io, &st0);
	uint64_t until = now_ms() + 6000;
	int requests = 0;
	do {
		get_hello();
		requests++;
		sleep_ms(300);
		pc_io_stats(io, &st1);
	} while (st1.trims == st0.trims && now_ms() < until);
	raw_server_stop(&s);
	cr_assert_gt(st1.trims, st0.trims, "no trim in %d requests 300 ms apart", requests);
}

Test(io_client, a_body_handed_over_is_sent_and_released)
{
	raw_server_t s;
	raw_server_start(&s, serve_hello, NULL);
	set_url(&s, "/x");
	collector_t *c = collector_new(true);
	pc_actor_t *a = spawn_collector(c);
	pc_http_client_request_t opt = {.take_body = true};
	opt.body = strdup("taken");
	opt.body_len = 5;
	pc_http_call_t *call = NULL;
	opt.url = url;
	pthread_mutex_lock(&c->lock);
	cr_assert_eq(pc_http_fetch(io, &opt, a, &call), 0);
	c->call = call;
	pthread_mutex_unlock(&c->lock);
	finish(c, a);
	cr_assert_str_eq(c->body, "hello:taken");
	raw_server_stop(&s);
	collector_free(c);
}

Test(io_client, refused_connection_is_a_connect_failure)
{
	raw_server_t s;
	raw_server_start(&s, serve_hello, NULL);
	uint16_t port = s.port;
	raw_server_stop(&s); /* the port is now closed */
	snprintf(url, sizeof(url), "http://127.0.0.1:%u/", port);
	collector_t *c = collector_new(true);
	pc_actor_t *a = spawn_collector(c);
	fetch(url, NULL, c, a, NULL);
	finish(c, a);
	cr_assert_eq(c->heads, 0);
	cr_assert_eq(c->end.transport, PC_HTTP_CONNECT);
	cr_assert_eq(c->end.result, PC_ESYS);
	cr_assert_eq(c->end.status, 0);
	cr_assert_neq(c->end.error[0], '\0');
	collector_free(c);
}

static uint32_t peer_closed; /* serve_headers_then_silence saw the client close */

static void serve_headers_then_silence(int fd, void *arg)
{
	int ms = *(int *)arg;
	__atomic_store_n(&peer_closed, 0, __ATOMIC_RELEASE);
	char buf[8192];
	if (raw_read_request(fd, buf, sizeof(buf)) <= 0)
		return;
	raw_write_str(fd, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
			  "Transfer-Encoding: chunked\r\n\r\n5\r\nfirst\r\n");
	if (raw_wait_closed(fd, ms))
		__atomic_store_n(&peer_closed, 1, __ATOMIC_RELEASE);
}

Test(io_client, idle_timeout_ends_a_stalled_stream)
{
	int stall = 5000;
	raw_server_t s;
	raw_server_start(&s, serve_headers_then_silence, &stall);
	set_url(&s, "/");
	collector_t *c = collector_new(true);
	pc_actor_t *a = spawn_collector(c);
	pc_http_client_request_t opt = {.idle_timeout_ms = 150};
	uint64_t t0 = now_ms();
	fetch(url, NULL, c, a, &opt);
	finish(c, a);
	uint64_t took = now_ms() - t0;
	cr_assert_eq(c->end.transport, PC_HTTP_IDLE);
	cr_assert_eq(c->end.result, PC_ETIMEDOUT);
	cr_assert_eq(c->status, 200);
	cr_assert_str_eq(c->body, "first");
	cr_assert(took >= 150 && took < 3000, "took %" PRIu64 " ms", took);
	AWAIT(__atomic_load_n(&peer_closed, __ATOMIC_ACQUIRE), 4000);
	raw_server_stop(&s);
	collector_free(c);
}

Test(io_client, total_timeout_is_a_timeout)
{
	int stall = 5000;
	raw_server_t s;
	raw_server_start(&s, serve_headers_then_silence, &stall);
	set_url(&s, "/");
	collector_t *c = collector_new(true);
	pc_actor_t *a = spawn_collector(c);
	pc_http_client_request_t opt = {.total_timeout_ms = 200};
	fetch(url, NULL, c, a, &opt);
	finish(c, a);
	cr_assert_eq(c->end.transport, PC_HTTP_TIMEOUT);
	cr_assert_eq(c->end.result, PC_ETIMEDOUT);
	raw_server_stop(&s);
	collector_free(c);
}

Test(io_client, cancel_mid_stream_releases_everything)
{
	int stall = 5000;
	raw_server_t s;
	raw_server_start(&s, serve_headers_then_silence, &stall);
	set_url(&s, "/");
	collector_t *c = collector_new(true);
	pc_actor_t *a = spawn_collector(c);
	pc_http_call_t *call = fetch(url, NULL, c, a, NULL);
	AWAIT(datas_of(c) >= 1, 5000);
	pc_http_call_cancel(call);
	pc_http_call_cancel(call); /* idempotent */
	finish(c, a);
	cr_assert_eq(c->end.transport, PC_HTTP_CANCELLED);
	cr_assert_eq(c->end.result, PC_ESTOPPED);
	/* The connection was closed, not parked for reuse mid-response. */
	AWAIT(__atomic_load_n(&peer_closed, __ATOMIC_ACQUIRE), 4000);
	raw_server_stop(&s);
	pc_io_stats_t st;
	pc_io_stats(io, &st);
	cr_assert_eq(st.transfers_live, 0);
	collector_free(c);
}

static void serve_partial(int fd, void *arg)
{
	(void)arg;
	char buf[8192];
	if (raw_read_request(fd, buf, sizeof(buf)) <= 0)
		return;
	raw_write_str(fd, "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\nonly part");
}

Test(io_client, peer_closing_mid_body_is_closed)
{
	raw_server_t s;
	raw_server_start(&s, serve_partial, NULL);
	set_url(&s, "/");
	collector_t *c = collector_new(true);
	pc_actor_t *a = spawn_collector(c);
	fetch(url, NULL, c, a, NULL);
	finish(c, a);
	cr_assert_eq(c->end.transport, PC_HTTP_CLOSED);
	cr_assert_str_eq(c->body, "only part");
	raw_server_stop(&s);
	collector_free(c);
}

static void serve_garbage(int fd, void *arg)
{
	(void)arg;
	char buf[8192];
	if (raw_read_request(fd, buf, sizeof(buf)) <= 0)
		return;
	raw_write_str(fd, "this is not http at all\r\n\r\n");
}

Test(io_client, garbage_response_is_malformed)
{
	raw_server_t s;
	raw_server_start(&s, serve_garbage, NULL);
	set_url(&s, "/");
	collector_t *c = collector_new(true);
	pc_actor_t *a = spawn_collector(c);
	fetch(url, NULL, c, a, NULL);
	finish(c, a);
	cr_assert(c->end.transport == PC_HTTP_MALFORMED || c->end.transport == PC_HTTP_CLOSED,
		  "transport %s", pc_http_transport_name(c->end.transport));
	cr_assert_neq(c->end.result, 0);
	raw_server_stop(&s);
	collector_free(c);
}

#define BIG (8u << 20)

static void serve_big(int fd, void *arg)
{
	(void)arg;
	char buf[8192];
	if (raw_read_request(fd, buf, sizeof(buf)) <= 0)
		return;
	char head[128];
	snprintf(head, sizeof(head), "HTTP/1.1 200 OK\r\nContent-Length: %u\r\n\r\n", BIG);
	raw_write_str(fd, head);
	char *block = malloc(65536);
	for (unsigned i = 0; i < 65536; i++)
		block[i] = (char)('a' + i % 26);
	for (unsigned sent = 0; sent < BIG; sent += 65536)
		if (!raw_write_all(fd, block, 65536))
			break;
	free(block);
}

Test(io_client, slow_consumer_pauses_the_transfer_then_it_completes)
{
	raw_server_t s;
	raw_server_start(&s, serve_big, NULL);
	set_url(&s, "/");
	collector_t *c = collector_new(false); /* consumes nothing for now */
	pc_actor_t *a = spawn_collector(c);
	pc_http_client_request_t opt = {.max_buffered = 256 * 1024};
	pc_http_call_t *call = fetch(url, NULL, c, a, &opt);
	/* Give the server time to push far more than the cap. */
	sleep_ms(300);
	pthread_mutex_lock(&c->lock);
	size_t held = c->unconsumed;
	pthread_mutex_unlock(&c->lock);
	pc_io_stats_t st;
	pc_io_stats(io, &st);
	cr_assert_eq(st.transfers_paused, 1);
	/* At most the cap plus one curl buffer's worth went past the pause. */
	cr_assert(held >= 256 * 1024 && held <= 256 * 1024 + CURL_MAX_WRITE_SIZE, "held %zu", held);
	/* Now drain: consume what is held and everything that follows. */
	pthread_mutex_lock(&c->lock);
	c->consume = true;
	pc_http_call_consumed(call, c->unconsumed);
	c->unconsumed = 0;
	pthread_mutex_unlock(&c->lock);
	finish(c, a);
	cr_assert_eq(c->end.result, 0);
	cr_assert_eq(c->body_len, BIG);
	cr_assert_eq(c->body[BIG - 1], (char)('a' + (BIG - 1) % 65536 % 26));
	pc_io_stats(io, &st);
	cr_assert_eq(st.transfers_paused, 0);
	raw_server_stop(&s);
	collector_free(c);
}

Test(io_client, io_free_ends_live_transfers)
{
	int stall = 5000;
	raw_server_t s;
	raw_server_start(&s, serve_headers_then_silence, &stall);
	set_url(&s, "/");
	collector_t *c = collector_new(true);
	pc_actor_t *a = spawn_collector(c);
	pc_http_call_t *call = fetch(url, NULL, c, a, NULL);
	AWAIT(datas_of(c) >= 1, 5000);
	pc_io_free(io);
	io = NULL;
	AWAIT(ends_of(c) == 1, 5000);
	cr_assert_eq(c->end.transport, PC_HTTP_CANCELLED);
	/* Releasing after the I/O layer is gone touches only the handle. */
	pc_http_call_release(call);
	pc_actor_stop(a, PC_EXIT_NORMAL);
	pc_actor_release(a);
	quiesce(rt);
	raw_server_stop(&s);
	collector_free(c);
}

Test(io_client, bad_arguments_are_rejected)
{
	pc_http_call_t *call = NULL;
	pc_http_client_request_t req = {0};
	collector_t *c = collector_new(true);
	pc_actor_t *a = spawn_collector(c);
	cr_assert_eq(pc_http_fetch(io, &req, a, &call), PC_EINVAL); /* no url */
	req.url = "http://127.0.0.1:1/";
	cr_assert_eq(pc_http_fetch(io, &req, NULL, &call), PC_EINVAL);
	req.header_count = 1;
	cr_assert_eq(pc_http_fetch(io, &req, a, &call), PC_EINVAL);
	req.header_count = 0;
	req.url = "file:///etc/passwd"; /* only http and https are reachable */
	cr_assert_eq(pc_http_fetch(io, &req, a, &call), PC_EINVAL);
	/* A body handed over is released even when the request is refused
	 * (LeakSanitizer at teardown would see it otherwise). */
	req.body = strdup("{\"x\":1}");
	req.body_len = 7;
	req.take_body = true;
	cr_assert_eq(pc_http_fetch(io, &req, a, &call), PC_EINVAL);
	req.body = NULL;
	req.body_len = 0;
	req.take_body = false;
	req.url = "http://127.0.0.1:1/";
	req.method = "BREW";
	cr_assert_eq(pc_http_fetch(io, &req, a, &call), 0);
	c->call = call;
	finish(c, a);
	cr_assert_eq(c->end.transport, PC_HTTP_CONNECT);
	collector_free(c);
}

/* A listener that never accepts, with its backlog already full: the
 * kernel drops further SYNs, so a connect can only time out. */
Test(io_client, connect_timeout_is_its_own_outcome)
{
	int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	cr_assert_eq(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	cr_assert_eq(listen(lfd, 0), 0);
	socklen_t sl = sizeof(sa);
	getsockname(lfd, (struct sockaddr *)&sa, &sl);
	int fillers[8];
	int nfill = 0;
	for (; nfill < 8; nfill++) {
		fillers[nfill] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		connect(fillers[nfill], (struct sockaddr *)&sa, sizeof(sa));
	}
	sleep_ms(50); /* let the handshakes that fit complete */
	snprintf(url, sizeof(url), "http://127.0.0.1:%u/", ntohs(sa.sin_port));
	collector_t *c = collector_new(true);
	pc_actor_t *a = spawn_collector(c);
	pc_http_client_request_t opt = {.connect_timeout_ms = 200};
	uint64_t t0 = now_ms();
	fetch(url, NULL, c, a, &opt);
	finish(c, a);
	uint64_t took = now_ms() - t0;
	cr_assert_eq(c->end.transport, PC_HTTP_CONNECT_TIMEOUT, "transport %s",
		     pc_http_transport_name(c->end.transport));
	cr_assert_eq(c->end.result, PC_ETIMEDOUT);
	cr_assert(took >= 200 && took < 3000, "took %" PRIu64 " ms", took);
	for (int i = 0; i < nfill; i++)
		close(fillers[i]);
	close(lfd);
	collector_free(c);
}

static uint32_t conns_now, conns_peak; /* serve_slow's concurrency */

static void serve_slow(int fd, void *arg)
{
	(void)arg;
	uint32_t n = __atomic_add_fetch(&conns_now, 1, __ATOMIC_ACQ_REL);
	uint32_t peak = __atomic_load_n(&conns_peak, __ATOMIC_ACQUIRE);
	while (n > peak && !__atomic_compare_exchange_n(&conns_peak, &peak, n, false, __ATOMIC_ACQ_REL,
							 __ATOMIC_ACQUIRE))
		;
	char buf[8192];
	while (raw_read_request(fd, buf, sizeof(buf)) > 0) {
		sleep_ms(50);
		raw_write_str(fd, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
	}
	__atomic_sub_fetch(&conns_now, 1, __ATOMIC_ACQ_REL);
}

Test(io_client, per_host_connection_limit_queues_the_rest)
{
	/* This test's own I/O layer: two connections per host. */
	pc_io_free(io);
	pc_io_config_t cfg = {.threads = 1, .max_host_connections = 2};
	cr_assert_eq(pc_io_new(rt, &cfg, &io), 0);
	raw_server_t s;
	raw_server_start(&s, serve_slow, NULL);
	set_url(&s, "/");
	enum { N = 6 };
	collector_t *c[N];
	pc_actor_t *a[N];
	for (int i = 0; i < N; i++) {
		c[i] = collector_new(true);
		a[i] = spawn_collector(c[i]);
		fetch(url, NULL, c[i], a[i], NULL);
	}
	for (int i = 0; i < N; i++) {
		finish(c[i], a[i]);
		cr_assert_eq(c[i]->end.result, 0);
		cr_assert_str_eq(c[i]->body, "ok");
		collector_free(c[i]);
	}
	raw_server_stop(&s);
	cr_assert_eq(s.accepted, 2, "connections opened: %u", s.accepted);
	cr_assert_eq(conns_peak, 2);
}

/* ---- a per-host cap in the hundreds ---------------------------------------- */

static uint64_t accepted(void)
{
	pc_io_stats_t st;
	pc_io_stats(io, &st);
	return st.connections_accepted;
}

/* Sends n GETs at once, waits for every answer and checks it. */
static void wave(uint32_t n)
{
	collector_t **c = calloc(n, sizeof(*c));
	pc_actor_t **a = calloc(n, sizeof(*a));
	for (uint32_t i = 0; i < n; i++) {
		c[i] = collector_new(true);
		a[i] = spawn_collector(c[i]);
		fetch(url, NULL, c[i], a[i], NULL);
	}
	for (uint32_t i = 0; i < n; i++) {
		AWAIT(ends_of(c[i]) == 1, 20000);
		cr_assert_eq(c[i]->end.result, 0, "transfer %u: %s", i, c[i]->end.error);
		cr_assert_str_eq(c[i]->body, "ok");
	}
	quiesce(rt);
	for (uint32_t i = 0; i < n; i++) {
		pc_http_call_release(c[i]->call);
		pc_actor_stop(a[i], PC_EXIT_NORMAL);
		pc_actor_release(a[i]);
	}
	quiesce(rt);
	for (uint32_t i = 0; i < n; i++)
		collector_free(c[i]);
	free(c);
	free(a);
}

/* A cap this high is served by several multis of the I/O thread (libcurl
 * 7 walks all of a multi's connections per transfer). To a user it stays
 * one cap: never more connections than it allows, the transfers past it
 * wait for one, and every connection is reused by the next wave. */
Test(io_client, a_per_host_cap_in_the_hundreds_is_one_cap_and_its_connections_are_reused)
{
	enum { CAP = 300, OVER = 50 };
	pc_io_free(io);
	pc_io_config_t cfg = {.threads = 1, .max_host_connections = CAP, .max_idle_connections = CAP};
	cr_assert_eq(pc_io_new(rt, &cfg, &io), 0);
	gate_t g;
	uint16_t port = gate_start(&g, rt, io, "GET", "/", CAP, NULL, "ok");
	snprintf(url, sizeof(url), "http://127.0.0.1:%u/", port);

	/* CAP requests reach the gate together only if CAP connections are
	 * open at once; the OVER more wait for one of them. */
	wave(CAP + OVER);
	cr_assert_eq(accepted(), CAP, "connections opened: %" PRIu64, accepted());
	cr_assert_eq(g.nheld, CAP);
	wave(CAP);
	cr_assert_eq(accepted(), CAP, "connections opened again: %" PRIu64, accepted() - CAP);

	gate_stop(&g, rt);
}

/* The largest caps are accepted as they are (no shard count overflows or
 * runs away with memory) and a request goes through. */
Test(io_client, the_largest_caps_start_and_serve)
{
	pc_io_free(io);
	pc_io_config_t cfg = {.threads = 1, .max_host_connections = UINT32_MAX,
			      .max_total_connections = UINT32_MAX, .max_idle_connections = UINT32_MAX};
	cr_assert_eq(pc_io_new(rt, &cfg, &io), 0);
	raw_server_t s;
	raw_server_start(&s, serve_hello, NULL);
	set_url(&s, "/x");
	get_hello();
	raw_server_stop(&s);
}
