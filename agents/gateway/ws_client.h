/*
 * A small blocking WebSocket client (RFC 6455, client side): how a C
 * program, the `pincer` command and the tests talk to the gateway.
 *
 *   pc_ws_client_t *ws;
 *   pc_ws_client_options_t o = {.host = "127.0.0.1", .port = 18789};
 *   pc_ws_client_connect(&o, &ws, NULL);
 *   pc_ws_client_send_text(ws, "{\"type\":\"req\",...}", n);
 *   char *msg; size_t len;
 *   pc_ws_client_recv(ws, 5000, &msg, &len);   (free(msg))
 *   pc_ws_client_free(ws);
 *
 * One plain TCP connection (ws://, no TLS), blocking I/O with deadlines.
 * Frames it sends are masked; pings are answered while receiving;
 * fragmented messages are joined; a close from the server is answered and
 * reported (its code and reason stay readable). No compression, no
 * subprotocols.
 *
 * Threads: a client is used by one thread at a time.
 */
#ifndef PINCER_AGENTS_GATEWAY_WS_CLIENT_H
#define PINCER_AGENTS_GATEWAY_WS_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pc_ws_client pc_ws_client_t;

typedef struct pc_ws_client_options {
	const char *host;       /* numeric address or a name; NULL: "127.0.0.1" */
	uint16_t port;          /* required */
	const char *path;       /* NULL: "/" */
	const char *origin;     /* the Origin header, or NULL for none */
	const char *headers;    /* extra header lines, each "Name: value\r\n", or NULL */
	int64_t timeout_ms;     /* connect and upgrade; sends wait as long; 0: 10 s */
	size_t max_message;     /* a received message's largest size; 0: 64 MiB */
	int rcvbuf;             /* SO_RCVBUF before connecting (tests of slow readers); 0: the system's */
} pc_ws_client_options_t;

/* Connects and upgrades. PC_EINVAL for bad options; PC_ESYS when the
 * address cannot be reached; PC_ETIMEDOUT; PC_ESTATE when the server
 * answers anything but 101 with the right Sec-WebSocket-Accept (its HTTP
 * status then goes to *http_status, which may be NULL). The caller owns
 * *out. */
int pc_ws_client_connect(const pc_ws_client_options_t *o, pc_ws_client_t **out, int *http_status);

/* Sends one message (a text or a binary frame). Waits, up to the
 * options' timeout, for the socket to take it all. PC_ESTOPPED once the
 * connection is closed or closing; PC_ESYS, PC_ETIMEDOUT. */
int pc_ws_client_send_text(pc_ws_client_t *c, const char *data, size_t len);
int pc_ws_client_send_binary(pc_ws_client_t *c, const void *data, size_t len);

/* Receives the next message (text or binary), waiting up to timeout_ms
 * (< 0: for ever). *msg is malloc'd, NUL-terminated after *len bytes, the
 * caller's. PC_ETIMEDOUT; PC_ESTOPPED when the server closed (see
 * pc_ws_client_close_code) or the connection ended; PC_ELIMIT for a
 * message over max_message (the connection is then closed with 1009);
 * PC_EINVAL for a protocol error from the server (closed with 1002). */
int pc_ws_client_recv(pc_ws_client_t *c, int64_t timeout_ms, char **msg, size_t *len);

/* Sends a close frame (when none was sent) and waits up to `timeout_ms`
 * for the server's close and the end of the stream. */
int pc_ws_client_close(pc_ws_client_t *c, uint16_t code, const char *reason, int64_t timeout_ms);

/* The close code the server sent (1000, 1008, ...): 0 while open, 1006
 * when the connection ended without a close frame. */
uint16_t pc_ws_client_close_code(const pc_ws_client_t *c);
/* Its reason ("" when none). Valid until the client is freed. */
const char *pc_ws_client_close_reason(const pc_ws_client_t *c);

/* The socket (for poll or shutdown in tests); -1 once closed. */
int pc_ws_client_fd(const pc_ws_client_t *c);

/* Closes the socket at once (no close frame) and frees. NULL is a no-op. */
void pc_ws_client_free(pc_ws_client_t *c);

#ifdef __cplusplus
}
#endif
#endif
