/*
 * wslay's socket callbacks over a non-blocking file descriptor, shared by
 * the server's WebSockets (ws.c) and the client (ws_client.c): one read
 * or write, EINTR retried, and wslay told whether to wait for the socket
 * (WOULDBLOCK) or give up (CALLBACK_FAILURE; for a read, also EOF).
 */
#ifndef PINCER_IO_WSLAY_FD_INTERNAL_H
#define PINCER_IO_WSLAY_FD_INTERNAL_H

#include <errno.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <wslay/wslay.h>

static inline ssize_t pc__wslay_fd_failed(wslay_event_context_ptr ctx, ssize_t n)
{
	wslay_event_set_error(ctx, n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) ? WSLAY_ERR_WOULDBLOCK
										       : WSLAY_ERR_CALLBACK_FAILURE);
	return -1;
}

static inline ssize_t pc__wslay_fd_recv(wslay_event_context_ptr ctx, int fd, uint8_t *buf, size_t len)
{
	for (;;) {
		ssize_t n = recv(fd, buf, len, MSG_DONTWAIT);
		if (n > 0)
			return n;
		if (n < 0 && errno == EINTR)
			continue;
		return pc__wslay_fd_failed(ctx, n);
	}
}

static inline ssize_t pc__wslay_fd_send(wslay_event_context_ptr ctx, int fd, const uint8_t *data, size_t len,
					int flags)
{
	int fl = MSG_NOSIGNAL | MSG_DONTWAIT | ((flags & WSLAY_MSG_MORE) ? MSG_MORE : 0);
	for (;;) {
		ssize_t n = send(fd, data, len, fl);
		if (n >= 0)
			return n;
		if (errno == EINTR)
			continue;
		return pc__wslay_fd_failed(ctx, n);
	}
}

#endif
