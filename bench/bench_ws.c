/*
 * ws: WebSocket echo on Pincer's server with many idle connections held
 * open. Opens --idle connections (default 10,000) and completes their
 * handshakes, measures the resident memory they cost, then runs --active
 * (default 64) connections in a closed loop (send one frame, wait for its
 * echo, repeat) for --seconds and reports frames/s and the latency
 * percentiles. The client is one epoll thread of raw sockets in the same
 * process (it holds only file descriptors, so the RSS growth is the
 * server's).
 *
 *   bench_ws [--idle N] [--active N] [--seconds S] [--size BYTES] [--workers W]
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "benchlib.h"
#include "io/http_server.h"

/* ---- the server side: one actor accepts and echoes ------------------------ */

static int echo(pc_ctx_t *ctx, void *state, pc_msg_t *msg)
{
	(void)state;
	if (msg->type == PC_MSG_HTTP_REQUEST) {
		const pc_http_request_msg_t *r = pc_msg_cdata(msg);
		if (r->upgrade)
			pc_ws_accept(r->server, r->id, pc_self(ctx), NULL);
		else
			pc_http_respond(r->server, r->id, 400, NULL, "websocket only\n", 15);
	} else if (msg->type == PC_MSG_WS_MESSAGE) {
		const pc_ws_message_msg_t *m = pc_msg_cdata(msg);
		pc_ws_send(m->server, m->id, m->opcode, m->data, m->len);
	}
	return 0;
}

static const pc_behavior_t echo_b = {"ws_echo", echo, NULL};

/* ---- the client side ------------------------------------------------------- */

static const char HANDSHAKE[] = "GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
				"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
				"Sec-WebSocket-Version: 13\r\n\r\n";

static int connect_to(uint16_t port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		bench_fail("socket: %s (raise the open-file limit)", strerror(errno));
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0)
		bench_fail("connect: %s", strerror(errno));
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

/* Sends the upgrade and reads the 101 (blocking). */
static void handshake(int fd)
{
	if (write(fd, HANDSHAKE, sizeof(HANDSHAKE) - 1) != (ssize_t)(sizeof(HANDSHAKE) - 1))
		bench_fail("write handshake");
	char buf[512];
	size_t len = 0;
	while (len < sizeof(buf) - 1) {
		ssize_t n = read(fd, buf + len, 1);
		if (n <= 0)
			bench_fail("handshake: closed");
		len++;
		if (len >= 4 && !memcmp(buf + len - 4, "\r\n\r\n", 4))
			break;
	}
	buf[len] = 0;
	if (strncmp(buf, "HTTP/1.1 101", 12) != 0)
		bench_fail("handshake refused: %.40s", buf);
}

/* A masked client frame (the mask is zero: legal, and the payload stays as is). */
static size_t frame(char *out, const char *payload, size_t len)
{
	size_t h = 0;
	out[h++] = (char)0x82; /* FIN + binary */
	if (len < 126) {
		out[h++] = (char)(0x80 | len);
	} else {
		out[h++] = (char)(0x80 | 126);
		out[h++] = (char)(len >> 8);
		out[h++] = (char)len;
	}
	memset(out + h, 0, 4);
	h += 4;
	memcpy(out + h, payload, len);
	return h + len;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static uint64_t now_ns(void) { return (uint64_t)(bench_now_s() * 1e9); }

int main(int argc, char **argv)
{
	uint32_t idle = 10000, active = 64, workers = 2, size = 64;
	double seconds = 3.0;
	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--idle"))
			idle = (uint32_t)strtoul(argv[i + 1], NULL, 10);
		else if (!strcmp(argv[i], "--active"))
			active = (uint32_t)strtoul(argv[i + 1], NULL, 10);
		else if (!strcmp(argv[i], "--seconds"))
			seconds = strtod(argv[i + 1], NULL);
		else if (!strcmp(argv[i], "--size"))
			size = (uint32_t)strtoul(argv[i + 1], NULL, 10);
		else if (!strcmp(argv[i], "--workers"))
			workers = (uint32_t)strtoul(argv[i + 1], NULL, 10);
		else
			bench_fail("usage: bench_ws [--idle N] [--active N] [--seconds S] [--size B] [--workers W]");
	}
	if (!active || size > 60000)
		bench_fail("--active must be positive and --size at most 60000");
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
		uint64_t need = 2ull * (idle + active) + 64;
		if (rl.rlim_cur < need) {
			idle = rl.rlim_cur > 2ull * active + 64 ? (uint32_t)((rl.rlim_cur - 64) / 2 - active) : 0;
			fprintf(stderr, "bench_ws: open-file limit %lu: --idle lowered to %u\n",
				(unsigned long)rl.rlim_cur, idle);
		}
	}

	pc_runtime_config_t rc;
	pc_runtime_config_init(&rc);
	rc.workers = workers;
	pc_runtime_t *rt = NULL;
	pc_io_t *io = NULL;
	pc_http_server_t *srv = NULL;
	pc_actor_t *a = NULL;
	pc_io_config_t ioc = {.threads = 1};
	pc_http_server_config_t sc = {.limits = {.max_connections = idle + active + 16}};
	if (pc_runtime_new(&rc, &rt) || pc_runtime_start(rt) || pc_io_new(rt, &ioc, &io) ||
	    pc_spawn(rt, &echo_b, NULL, &a) || pc_http_server_new(io, &sc, &srv) ||
	    pc_http_server_route(srv, "GET", "/ws", a) || pc_http_server_start(srv))
		bench_fail("server setup");
	uint16_t port = pc_http_server_port(srv);

	/* Idle connections: their cost in memory. */
	uint64_t rss0 = bench_rss_kib();
	int *idle_fds = calloc(idle ? idle : 1, sizeof(int));
	for (uint32_t i = 0; i < idle; i++) {
		idle_fds[i] = connect_to(port);
		handshake(idle_fds[i]);
	}
	pc_runtime_wait_quiescent(rt, 10000);
	uint64_t rss1 = bench_rss_kib();
	double kib_per_idle = idle ? (double)(rss1 > rss0 ? rss1 - rss0 : 0) / idle : 0;

	/* Active connections in a closed loop. */
	int ep = epoll_create1(EPOLL_CLOEXEC);
	int *fds = calloc(active, sizeof(int));
	uint64_t *sent_at = calloc(active, sizeof(uint64_t));
	size_t *got = calloc(active, sizeof(size_t));
	size_t cap_lat = 1 << 22, nlat = 0;
	uint64_t *lat = malloc(cap_lat * sizeof(uint64_t));
	char *payload = calloc(1, size ? size : 1);
	char out[65536], in[65536];
	size_t flen = frame(out, payload, size);
	size_t echo_len = size + (size < 126 ? 2 : 4); /* server frames are unmasked */
	for (uint32_t i = 0; i < active; i++) {
		fds[i] = connect_to(port);
		handshake(fds[i]);
		struct epoll_event ev = {.events = EPOLLIN, .data.u32 = i};
		epoll_ctl(ep, EPOLL_CTL_ADD, fds[i], &ev);
	}
	double t0 = bench_now_s();
	for (uint32_t i = 0; i < active; i++) {
		sent_at[i] = now_ns();
		if (write(fds[i], out, flen) != (ssize_t)flen)
			bench_fail("write frame");
	}
	uint64_t frames = 0;
	double c0 = bench_cpu_s();
	while (bench_now_s() - t0 < seconds) {
		struct epoll_event evs[256];
		int n = epoll_wait(ep, evs, 256, 1000);
		for (int k = 0; k < n; k++) {
			uint32_t i = evs[k].data.u32;
			ssize_t r = read(fds[i], in, sizeof(in));
			if (r <= 0)
				bench_fail("echo connection closed");
			got[i] += (size_t)r;
			while (got[i] >= echo_len) {
				got[i] -= echo_len;
				uint64_t now = now_ns();
				if (nlat < cap_lat)
					lat[nlat++] = now - sent_at[i];
				frames++;
				sent_at[i] = now;
				if (write(fds[i], out, flen) != (ssize_t)flen)
					bench_fail("write frame");
			}
		}
	}
	double wall = bench_now_s() - t0;
	double cpu = bench_cpu_s() - c0;
	qsort(lat, nlat, sizeof(uint64_t), cmp_u64);
	double p50 = nlat ? (double)lat[nlat / 2] / 1e3 : 0;
	double p99 = nlat ? (double)lat[(size_t)((double)nlat * 0.99)] / 1e3 : 0;
	double p999 = nlat ? (double)lat[(size_t)((double)nlat * 0.999)] / 1e3 : 0;
	char extra[384];
	snprintf(extra, sizeof(extra),
		 "\"idle_connections\":%u,\"active\":%u,\"frame_bytes\":%u,\"frames_per_s\":%.0f,"
		 "\"p50_us\":%.1f,\"p99_us\":%.1f,\"p999_us\":%.1f,\"kib_per_idle_connection\":%.2f,"
		 "\"cpu_us_per_frame\":%.2f",
		 idle, active, size, (double)frames / wall, p50, p99, p999, kib_per_idle,
		 frames ? cpu * 1e6 / (double)frames : 0);
	bench_report("ws_echo", workers, wall, frames, extra);

	for (uint32_t i = 0; i < active; i++)
		close(fds[i]);
	for (uint32_t i = 0; i < idle; i++)
		close(idle_fds[i]);
	close(ep);
	pc_http_server_free(srv);
	pc_io_free(io);
	pc_actor_release(a);
	pc_runtime_stop(rt);
	pc_runtime_free(rt);
	free(idle_fds);
	free(fds);
	free(sent_at);
	free(got);
	free(lat);
	free(payload);
	return 0;
}
