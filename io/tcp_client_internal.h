/*
 * The client side of a TCP connection on a loop, shared by the WebSocket
 * client (ws_client.c) and the HTTP/1.1 client (http1_client.c): a name's
 * addresses resolved on the caller's thread, a non-blocking connect to
 * each in turn, and a request's bytes sent as the socket takes them.
 */
#ifndef PC_IO_TCP_CLIENT_INTERNAL_H
#define PC_IO_TCP_CLIENT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "loop_internal.h"

/* Addresses of a name tried in turn. */
#define PC__TCP_MAX_ADDRS 4

typedef struct pc__tcp_addrs {
	struct sockaddr_storage addrs[PC__TCP_MAX_ADDRS];
	socklen_t lens[PC__TCP_MAX_ADDRS];
	int n;    /* resolved */
	int next; /* the next to try */
} pc__tcp_addrs_t;

/* Any thread (a blocking lookup). 0, or PC_ESYS when nothing resolves. */
int pc__tcp_resolve(pc__tcp_addrs_t *a, const char *host, uint16_t port);

/* Loop thread. Starts a non-blocking connect to the next address and
 * watches it for EPOLLOUT with fn(arg): the descriptor, or -1 when no
 * address is left (*err: the last failure's errno). */
int pc__tcp_connect_next(pc_ioloop_t *loop, pc__tcp_addrs_t *a, pc_io_watch_t *w, pc_io_event_fn fn,
			 void *arg, int *err);

/* Loop thread, when the connect's descriptor turns writable: 0 once
 * connected (TCP_NODELAY set), else the connect's errno. */
int pc__tcp_connected(int fd);

/* Sends buf[*off, len) until the socket takes no more, advancing *off: 0,
 * or -1 with *err when the socket failed. */
int pc__tcp_send_rest(int fd, const char *buf, size_t len, size_t *off, int *err);

#endif
