/*
 * A WebSocket client on the I/O threads (RFC 6455, client side; ws://,
 * no TLS): the non-blocking counterpart of the server's WebSockets, for
 * the `pincer` commands and for load harnesses that hold thousands of
 * sessions in one process.
 *
 *   pc_wsc_options_t o = {.host = "127.0.0.1", .port = 18789, .user = me};
 *   pc_wsc_t *c;
 *   pc_wsc_open(io, &o, owner, &c);        owner gets PC_MSG_WSC_OPEN,
 *                                          then PC_MSG_WSC_MESSAGE per
 *                                          message, then PC_MSG_WSC_CLOSED
 *   pc_wsc_send(c, PC_WS_TEXT, text, n);   from any thread, once open
 *   pc_wsc_close(c, 1000, "bye");
 *   ... after PC_MSG_WSC_CLOSED: pc_wsc_release(c);
 *
 * The connection lives on one I/O thread (io.h): a non-blocking connect
 * watched by its epoll, the HTTP/1.1 upgrade with a fresh
 * Sec-WebSocket-Key whose Sec-WebSocket-Accept is checked, then wslay in
 * client mode (frames masked; pings answered; fragments joined; the close
 * handshake). Sends and closes from other threads reach it as commands on
 * the loop's queue; what it receives goes to the owner actor as messages.
 *
 * Its lifecycle ("wsclient" in PINCER_TRACE; io.h, pc_io_trace_set):
 *
 *   connecting -> handshaking      the TCP connection is up; the upgrade goes out
 *   handshaking -> open            101 with the right Sec-WebSocket-Accept
 *   open -> closing                a close frame was sent or received
 *   open | closing -> closed       the close handshake completed
 *   every state but closed -> failed   no connection, upgrade refused, a
 *                                  timeout, the connection lost, a
 *                                  protocol error, pc_io_free
 *
 * one enum changed by one function, which refuses and counts (in
 * pc_io_stats_t.transitions_refused) what the table does not allow.
 *
 * Threads and ownership: every function here may be called from any
 * thread, an actor's handler included. pc_wsc_open gives the caller one
 * reference to the handle; messages name the handle and stay readable
 * while the caller holds it, so release it after PC_MSG_WSC_CLOSED (or
 * stop looking at what names it). Releasing a connection that has not
 * ended ends it at once (failed, PC_ESTOPPED, no close frame), and
 * CLOSED still comes. The connection holds a reference to the owner until
 * it has sent CLOSED, which comes exactly once and last, also when
 * pc_io_free stops the loop (failed, PC_ESTOPPED).
 */
#ifndef PINCER_IO_WS_CLIENT_H
#define PINCER_IO_WS_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "io.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pc_wsc pc_wsc_t;

typedef enum pc_wsc_state {
	PC_WSC_CONNECTING = 0,
	PC_WSC_HANDSHAKING,
	PC_WSC_OPEN,
	PC_WSC_CLOSING,
	PC_WSC_CLOSED, /* ended by the close handshake */
	PC_WSC_FAILED, /* ended any other way */
	PC_WSC_COUNT,
} pc_wsc_state_t;

/* "connecting", ..., "failed"; "unknown" out of range. */
const char *pc_wsc_state_name(pc_wsc_state_t s);
/* Whether the table allows `from` -> `to`. */
bool pc_wsc_state_legal(pc_wsc_state_t from, pc_wsc_state_t to);

typedef struct pc_wsc_options {
	const char *host;         /* numeric address or a name (resolved on the
				   * calling thread); NULL: "127.0.0.1" */
	uint16_t port;            /* required */
	const char *path;         /* NULL: "/" */
	const char *origin;       /* the Origin header, or NULL for none */
	const char *headers;      /* extra header lines, each "Name: value\r\n", or NULL */
	uint32_t open_timeout_ms; /* the connect and the upgrade; 0: 10 s */
	size_t max_message;       /* a received message's largest size; 0: 64 MiB */
	size_t max_output;        /* bytes queued for the server past which the
				   * connection fails (PC_ELIMIT); 0: 64 MiB */
	void *user;               /* carried in every message, for an owner of many */
} pc_wsc_options_t;

/* The messages the owner gets (io.h's range). */
enum {
	PC_MSG_WSC_OPEN = PC_MSG_TYPE_SYSTEM + 0x1200, /* pc_wsc_event_msg_t */
	PC_MSG_WSC_MESSAGE,                             /* pc_wsc_message_msg_t */
	PC_MSG_WSC_CLOSED,                              /* pc_wsc_closed_msg_t */
};

typedef struct pc_wsc_event_msg {
	pc_wsc_t *client;
	void *user;
} pc_wsc_event_msg_t;

typedef struct pc_wsc_message_msg {
	pc_wsc_t *client;
	void *user;
	uint8_t opcode; /* PC_WS_TEXT (1) or PC_WS_BINARY (2) */
	size_t len;
	char data[];    /* NUL-terminated after len */
} pc_wsc_message_msg_t;

typedef struct pc_wsc_closed_msg {
	pc_wsc_t *client;
	void *user;
	pc_wsc_state_t outcome; /* PC_WSC_CLOSED or PC_WSC_FAILED */
	int reason;           /* 0 after a close handshake; else PC_ESYS (no
			       * connection: sys_errno says why), PC_ETIMEDOUT,
			       * PC_ESTATE (the upgrade was refused: http_status),
			       * PC_ESTOPPED (the connection was lost, released or
			       * the loop stopped), PC_ELIMIT, PC_EINVAL (the server
			       * broke the protocol), PC_ENOMEM */
	int sys_errno;
	int http_status;      /* the upgrade's answer; 0 when none came */
	uint16_t code;        /* the close code the server sent (1005 when its
			       * frame had none); 1006 when no close frame came */
	char text[124];       /* the close frame's reason, "" when none */
} pc_wsc_closed_msg_t;

/* Starts a connection on one of io's threads; `owner` (retained) gets its
 * messages. PC_EINVAL for bad options; PC_ESYS when the host does not
 * resolve; PC_ESTOPPED when the I/O threads are stopping; PC_ENOMEM. The
 * caller owns *out (pc_wsc_release). Failures after this call come as
 * PC_MSG_WSC_CLOSED. */
int pc_wsc_open(pc_io_t *io, const pc_wsc_options_t *o, pc_actor_t *owner, pc_wsc_t **out);

/* Queues one message (copied). PC_ESTATE before the connection is open;
 * PC_ESTOPPED once it is closing or ended; PC_EINVAL; PC_ENOMEM. A
 * message queued while the connection ends is dropped. */
int pc_wsc_send(pc_wsc_t *c, int opcode, const void *data, size_t len);

/* Starts the close handshake (code and reason, at most 123 bytes, go in
 * the close frame); CLOSED follows when the server answers, or after a
 * grace period. Before the connection is open it fails at once
 * (PC_ESTOPPED). Idempotent. */
int pc_wsc_close(pc_wsc_t *c, uint16_t code, const char *reason);

/* The state now, as the I/O thread last set it. */
pc_wsc_state_t pc_wsc_state(const pc_wsc_t *c);

/* The number naming the connection in traces. */
uint64_t pc_wsc_serial(const pc_wsc_t *c);

/* Drops the caller's reference (see the top). NULL is a no-op. */
void pc_wsc_release(pc_wsc_t *c);

#ifdef __cplusplus
}
#endif
#endif
