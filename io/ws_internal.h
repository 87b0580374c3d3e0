/*
 * WebSocket on a server connection: the upgrade handshake and, after it,
 * framing by wslay's event API on the connection's nonblocking socket.
 * Loop thread only.
 */
#ifndef PC_IO_WS_INTERNAL_H
#define PC_IO_WS_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "http_conn_internal.h"

/*
 * A server WebSocket's lifecycle ("ws"), next to its connection's (which
 * stays in PC__C_WS until it lingers or closes):
 *
 *   new -> open                 the 101 is queued, frames flow
 *   open -> closing             a close frame was queued or received
 *   new | open | closing -> closed   CLOSED was sent to the owner
 *
 * Only pc__ws_set assigns it; scripts/check-lifecycles checks.
 */
typedef enum pc__ws_state {
	PC__WS_NEW,
	PC__WS_OPEN,
	PC__WS_CLOSING,
	PC__WS_CLOSED,
	PC__WS_COUNT,
} pc__ws_state_t;

const char *pc__ws_lc_name(pc__ws_state_t s);
bool pc__ws_lc_legal(pc__ws_state_t from, pc__ws_state_t to);

/* Checks a request that asked to upgrade to websocket: 0 when it is a
 * valid handshake that the origin hook accepts (the key is kept in the
 * connection), else the HTTP status to refuse it with (400, 403, 426). */
int pc__ws_check(pc__http_conn_t *c, const pc_http_request_msg_t *req);

/* Completes the upgrade of the request in service on c: answers 101 and
 * hands frames to `owner` (whose reference passes to the connection). When
 * c cannot be upgraded, owner gets CLOSED at once. `cap` is the
 * connection's own message cap (0: the server's). */
void pc__ws_start(pc__http_conn_t *c, pc_actor_t *owner, const char *protocol, uint32_t cap);
/* Sets the connection's own message cap (0: the server's). */
void pc__ws_set_cap(pc__http_conn_t *c, uint32_t cap);
/* The owner wants PC_MSG_WS_DRAINED once the output is written. */
void pc__ws_want_drained(pc__http_conn_t *c);

/* An epoll event on an upgraded connection. */
void pc__ws_on_event(pc__http_conn_t *c, uint32_t events);
/* The phase timer fired: idle timeout or the close grace period. */
void pc__ws_on_timer(pc__http_conn_t *c);

bool pc__ws_want_read(const pc__http_conn_t *c);
bool pc__ws_want_write(const pc__http_conn_t *c);

void pc__ws_send(pc__http_conn_t *c, int opcode, const char *data, size_t len);
void pc__ws_close(pc__http_conn_t *c, uint16_t code, const char *reason, size_t rlen);

/* The connection is ending: `id` leaves the table, CLOSED goes to the
 * owner (once) and the owner's reference is dropped. On PC_ESTOPPED a 1001
 * close frame is sent if the socket takes it. */
void pc__ws_finish(pc__http_conn_t *c, uint64_t id, int reason);
void pc__ws_free(struct pc__ws *ws);

#endif
