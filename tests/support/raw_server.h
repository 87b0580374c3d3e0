/*
 * A scripted TCP server for client tests: it listens on 127.0.0.1 (an
 * ephemeral port) and runs `serve(fd, arg)` on its own thread for each
 * connection, so a test can answer with anything at all: broken framing,
 * stalls, resets. Bounded: serve functions must return by themselves, and
 * raw_server_stop joins every thread.
 */
#ifndef PC_TESTS_RAW_SERVER_H
#define PC_TESTS_RAW_SERVER_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

typedef void (*raw_serve_fn)(int fd, void *arg);

/* Readable once raw_server_stop begins: waits in serve functions end. */
static int raw_stop_fd = -1;

#define RAW_MAX_CONN 64

typedef struct raw_server {
	int lfd;
	uint16_t port;
	raw_serve_fn serve;
	void *arg;
	pthread_t acceptor;
	pthread_t conns[RAW_MAX_CONN];
	int nconns;
	int stop_pipe[2];
	uint32_t accepted;
} raw_server_t;

typedef struct raw_conn_arg {
	raw_server_t *srv;
	int fd;
} raw_conn_arg_t;

static void *raw_conn_main(void *p)
{
	raw_conn_arg_t a = *(raw_conn_arg_t *)p;
	free(p);
	a.srv->serve(a.fd, a.srv->arg);
	close(a.fd);
	return NULL;
}

static void *raw_accept_main(void *p)
{
	raw_server_t *s = p;
	for (;;) {
		struct pollfd pf[2] = {{s->lfd, POLLIN, 0}, {s->stop_pipe[0], POLLIN, 0}};
		if (poll(pf, 2, -1) < 0 && errno != EINTR)
			break;
		if (pf[1].revents)
			break;
		if (!(pf[0].revents & POLLIN))
			continue;
		int fd = accept(s->lfd, NULL, NULL);
		if (fd < 0)
			continue;
		if (s->nconns == RAW_MAX_CONN) {
			close(fd);
			continue;
		}
		int one = 1;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		raw_conn_arg_t *a = malloc(sizeof(*a));
		a->srv = s;
		a->fd = fd;
		__atomic_add_fetch(&s->accepted, 1, __ATOMIC_RELAXED);
		pthread_create(&s->conns[s->nconns++], NULL, raw_conn_main, a);
	}
	return NULL;
}

static inline void raw_server_start(raw_server_t *s, raw_serve_fn serve, void *arg)
{
	memset(s, 0, sizeof(*s));
	s->serve = serve;
	s->arg = arg;
	s->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int one = 1;
	setsockopt(s->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	bind(s->lfd, (struct sockaddr *)&sa, sizeof(sa));
	listen(s->lfd, 128);
	socklen_t sl = sizeof(sa);
	getsockname(s->lfd, (struct sockaddr *)&sa, &sl);
	s->port = ntohs(sa.sin_port);
	if (pipe(s->stop_pipe) != 0)
		abort();
	raw_stop_fd = s->stop_pipe[0];
	pthread_create(&s->acceptor, NULL, raw_accept_main, s);
}

static inline void raw_server_stop(raw_server_t *s)
{
	if (write(s->stop_pipe[1], "x", 1) != 1)
		abort();
	pthread_join(s->acceptor, NULL);
	for (int i = 0; i < s->nconns; i++)
		pthread_join(s->conns[i], NULL);
	close(s->lfd);
	close(s->stop_pipe[0]);
	close(s->stop_pipe[1]);
}

/* Reads one request head (and a Content-Length body) into buf; returns
 * the total length, or -1 when the peer closed or 5 s passed. */
static inline long raw_read_request(int fd, char *buf, size_t cap)
{
	size_t len = 0;
	long want = -1;
	while (len + 1 < cap) {
		struct pollfd pf[2] = {{fd, POLLIN, 0}, {raw_stop_fd, POLLIN, 0}};
		if (poll(pf, 2, 5000) <= 0 || pf[1].revents)
			return -1;
		ssize_t n = read(fd, buf + len, cap - 1 - len);
		if (n <= 0)
			return -1;
		len += (size_t)n;
		buf[len] = '\0';
		char *eoh = strstr(buf, "\r\n\r\n");
		if (eoh && want < 0) {
			long body = 0;
			const char *cl = strcasestr(buf, "content-length:");
			if (cl && cl < eoh)
				body = strtol(cl + 15, NULL, 10);
			want = (long)(eoh + 4 - buf) + body;
		}
		if (want >= 0 && (long)len >= want)
			return (long)len;
	}
	return -1;
}

static inline bool raw_write_all(int fd, const void *p, size_t len)
{
	const char *c = p;
	while (len) {
		ssize_t n = send(fd, c, len, MSG_NOSIGNAL);
		if (n <= 0)
			return false;
		c += n;
		len -= (size_t)n;
	}
	return true;
}

static inline bool raw_write_str(int fd, const char *s) { return raw_write_all(fd, s, strlen(s)); }

/* Waits up to ms for the peer to close; true when it did. */
static inline bool raw_wait_closed(int fd, int ms)
{
	char b[4096];
	for (;;) {
		struct pollfd pf[2] = {{fd, POLLIN, 0}, {raw_stop_fd, POLLIN, 0}};
		if (poll(pf, 2, ms) <= 0 || pf[1].revents)
			return false;
		ssize_t n = read(fd, b, sizeof(b));
		if (n <= 0)
			return true;
	}
}

#endif
