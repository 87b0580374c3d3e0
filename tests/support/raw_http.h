/*
 * Loopback sockets by hand: one HTTP/1.x request written on a fresh
 * connection, for tests that must choose every header (or leave one out:
 * Host, Origin, forwarding headers, duplicates), and a port nothing
 * listens on. Header-only, like the other test helpers.
 */
#ifndef PC_TESTS_RAW_HTTP_H
#define PC_TESTS_RAW_HTTP_H

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

/* Sends `head` (request line and headers, each ending in \r\n, without the
 * blank line) and `body` on a fresh connection; returns the status, with
 * the answer in `out`. */
static inline int raw_http(uint16_t port, const char *head, const char *body, char *out, size_t cap)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	cr_assert_geq(fd, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
	inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
	cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	char req[4096];
	size_t blen = body ? strlen(body) : 0;
	int n = snprintf(req, sizeof(req), "%sConnection: close\r\nContent-Length: %zu\r\n\r\n%s", head, blen,
			 body ? body : "");
	cr_assert(n > 0 && (size_t)n < sizeof(req));
	cr_assert_eq(write(fd, req, (size_t)n), n);
	struct timeval tv = {.tv_sec = 30};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	size_t got = 0;
	ssize_t k;
	while (got + 1 < cap && (k = read(fd, out + got, cap - 1 - got)) > 0)
		got += (size_t)k;
	out[got] = '\0';
	close(fd);
	int status = 0;
	cr_assert_eq(sscanf(out, "HTTP/1.%*d %d", &status), 1, "no answer: %s", out);
	return status;
}

/* A loopback port free a moment ago (bound, then released): for a
 * server the test starts, or a port where nothing answers. */
static inline uint16_t free_loopback_port(void)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	cr_assert_geq(fd, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	cr_assert_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
	close(fd);
	return ntohs(a.sin_port);
}

#endif
