/*
 * The client side of a TCP connection on a loop (tcp_client_internal.h).
 */
#include "tcp_client_internal.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

int pc__tcp_resolve(pc__tcp_addrs_t *a, const char *host, uint16_t port)
{
	char ps[8];
	snprintf(ps, sizeof(ps), "%u", (unsigned)port);
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
	struct addrinfo *res = NULL;
	a->n = a->next = 0;
	if (getaddrinfo(host, ps, &hints, &res) != 0 || !res)
		return PC_ESYS;
	for (struct addrinfo *ai = res; ai && a->n < PC__TCP_MAX_ADDRS; ai = ai->ai_next) {
		if (ai->ai_addrlen > sizeof(a->addrs[0]))
			continue;
		memcpy(&a->addrs[a->n], ai->ai_addr, ai->ai_addrlen);
		a->lens[a->n++] = ai->ai_addrlen;
	}
	freeaddrinfo(res);
	return a->n ? 0 : PC_ESYS;
}

int pc__tcp_connect_next(pc_ioloop_t *loop, pc__tcp_addrs_t *a, pc_io_watch_t *w, pc_io_event_fn fn,
			 void *arg, int *err)
{
	while (a->next < a->n) {
		int i = a->next++;
		const struct sockaddr *sa = (const struct sockaddr *)&a->addrs[i];
		int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (fd < 0) {
			*err = errno;
			continue;
		}
		if ((connect(fd, sa, a->lens[i]) != 0 && errno != EINPROGRESS) ||
		    pc__ioloop_watch(loop, w, fd, EPOLLOUT, fn, arg) != 0) {
			*err = errno;
			(void)close(fd);
			continue;
		}
		return fd;
	}
	return -1;
}

int pc__tcp_connected(int fd)
{
	int err = 0;
	socklen_t len = sizeof(err);
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
		return errno;
	if (err)
		return err;
	int one = 1;
	(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return 0;
}

int pc__tcp_send_rest(int fd, const char *buf, size_t len, size_t *off, int *err)
{
	while (*off < len) {
		ssize_t n = send(fd, buf + *off, len - *off, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n > 0) {
			*off += (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return 0;
		*err = errno;
		return -1;
	}
	return 0;
}
