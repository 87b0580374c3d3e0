/*
 * HTTP/1.1, HTTP/2 (cleartext, prior knowledge) and WebSocket server on the
 * I/O threads.
 *
 * Routes are served by actors. A request arrives at its route's actor as a
 * PC_MSG_HTTP_REQUEST message; the actor answers with pc_http_respond (one
 * shot) or pc_http_respond_start / _write / _end (streaming, e.g. SSE), from
 * any thread, at any later time. A WebSocket upgrade arrives the same way
 * (`upgrade` set); the actor accepts it with pc_ws_accept and from then on
 * owns the connection: messages arrive as PC_MSG_WS_MESSAGE, go out with
 * pc_ws_send, and PC_MSG_WS_CLOSED says it is over.
 *
 * Requests and WebSockets are named by 64-bit ids, not pointers: an answer
 * for a connection that has gone is dropped (PC_ENOTFOUND), so an actor
 * never holds memory the server may free. When a client goes away before a
 * response is complete, the route's actor gets PC_MSG_HTTP_GONE.
 *
 * A connection whose first bytes are the HTTP/2 client preface is served
 * as HTTP/2 (h2c with prior knowledge, nghttp2): each stream is a request
 * with an id of its own, delivered and answered exactly as above. There is
 * no WebSocket over HTTP/2, and pc_http_abort resets only its stream.
 *
 * Limits are enforced on the I/O thread: header and body sizes (431 / 413),
 * frame and message sizes (close 1009), header/body arrival timeouts
 * (slowloris; 408), keep-alive idle timeout, HTTP/2 streams per connection,
 * and a per-connection output cap: a client that stops reading is
 * disconnected, so memory stays bounded. Bad HTTP gets a 400 and a close,
 * bad HTTP/2 a GOAWAY and a close; nothing from the network can crash the
 * process.
 */
#ifndef PINCER_IO_HTTP_SERVER_H
#define PINCER_IO_HTTP_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "io.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pc_http_server pc_http_server_t;

typedef struct pc_http_server_limits {
	uint32_t max_header_bytes;   /* request line + headers; 0: 16 KiB */
	uint32_t max_body_bytes;     /* 0: 1 MiB */
	uint32_t max_frame_bytes;    /* one WebSocket frame payload; 0: 1 MiB */
	uint32_t max_message_bytes;  /* one reassembled WebSocket message; 0: 4 MiB */
	uint32_t max_output_bytes;   /* queued, unsent bytes per connection; 0: 8 MiB */
	uint32_t max_connections;    /* per server; 0: 100000 */
	uint32_t header_timeout_ms;  /* a request head must arrive within; 0: 10 s */
	uint32_t body_timeout_ms;    /* a request body must arrive within; 0: 30 s */
	uint32_t idle_timeout_ms;    /* keep-alive idle between requests; 0: 60 s */
	uint32_t ws_idle_timeout_ms; /* WebSocket with no frame in; 0: never */
	uint32_t max_concurrent_streams; /* HTTP/2 streams open at once on one connection
					  * (SETTINGS_MAX_CONCURRENT_STREAMS); 0: 1000 */
} pc_http_server_limits_t;

typedef struct pc_http_request_msg pc_http_request_msg_t;

/* Decides on the I/O thread whether a WebSocket upgrade from `origin`
 * (NULL when the header is absent) may proceed; false answers 403. Must be
 * fast and must not block. */
typedef bool (*pc_ws_origin_fn)(void *user, const char *origin, const pc_http_request_msg_t *req);

/* One HTTP request served (its answer ended, or the connection closed
 * first), or one WebSocket closed: what an access log writes. Strings are
 * borrowed for the call. */
typedef enum pc_http_access_kind {
	PC_HTTP_ACCESS_REQUEST = 0,
	PC_HTTP_ACCESS_WS_CLOSE,
} pc_http_access_kind_t;

typedef struct pc_http_access {
	pc_http_access_kind_t kind;
	const char *method;     /* REQUEST: "GET", ...; "" when the head never parsed */
	const char *path;       /* REQUEST: the target without its query (which may hold secrets) */
	const char *peer;       /* "addr:port" */
	const char *request_id; /* REQUEST: the answer's x-request-id; "" none */
	int status;             /* REQUEST: the answer's status, 0 if none began; WS_CLOSE: the close code */
	int reason;             /* WS_CLOSE: the runtime code of why (0: the peer closed) */
	bool completed;         /* REQUEST: the answer ended (false: the connection closed first) */
	uint64_t bytes;         /* REQUEST: body bytes answered */
	uint64_t duration_us;   /* REQUEST: from the request to the answer's end; WS_CLOSE: the connection's life */
} pc_http_access_t;

/* Called on the I/O thread that served it: must not block (a logger in
 * drop mode is fine). An HTTP/2 stream is reported when it closes. */
typedef void (*pc_http_access_fn)(void *user, const pc_http_access_t *a);

typedef struct pc_http_server_config {
	const char *host;  /* numeric address; NULL: "127.0.0.1" */
	uint16_t port;     /* 0: an ephemeral port (see pc_http_server_port) */
	pc_http_server_limits_t limits;
	pc_ws_origin_fn origin_check; /* NULL: every origin passes */
	void *origin_user;
	pc_http_access_fn on_access;  /* NULL: none */
	void *access_user;
} pc_http_server_config_t;

/* Binds and listens (one SO_REUSEPORT socket per I/O thread) but accepts
 * nothing until pc_http_server_start. */
int pc_http_server_new(pc_io_t *io, const pc_http_server_config_t *cfg, pc_http_server_t **out);

/* Before start. Requests whose method matches (NULL: any) and whose path
 * (without the query) equals `path`, or starts with it when `path` ends in
 * '*', go to `handler` (the server keeps a reference). First match wins;
 * unmatched requests get 404. */
int pc_http_server_route(pc_http_server_t *srv, const char *method, const char *path,
			 pc_actor_t *handler);

int pc_http_server_start(pc_http_server_t *srv);
uint16_t pc_http_server_port(const pc_http_server_t *srv);

/* Stops listening and closes every connection (route actors get GONE /
 * CLOSED for what was open), then frees the server. NULL is a no-op. */
void pc_http_server_free(pc_http_server_t *srv);

/* ---- requests ----------------------------------------------------------- */

typedef struct pc_http_header {
	const char *name; /* as received; compare case-insensitively */
	const char *value;
} pc_http_header_t;

/* The payload of PC_MSG_HTTP_REQUEST. Every pointer points into the same
 * message, so it is valid while the handler runs; copy what you keep. */
struct pc_http_request_msg {
	pc_http_server_t *server;
	uint64_t id;           /* answer with this id */
	const char *method;    /* "GET", "POST", ... */
	const char *target;    /* as received: path and query */
	const char *path;      /* target up to '?' */
	const char *query;     /* after '?', or "" */
	const pc_http_header_t *headers;
	size_t header_count;
	const char *body;      /* NUL-terminated for convenience; may hold NULs */
	size_t body_len;
	bool upgrade;          /* a valid WebSocket upgrade request */
	bool keep_alive;       /* always true on HTTP/2 */
	uint8_t http_minor;    /* 0 or 1; 0 on HTTP/2 */
	uint8_t http_major;    /* 1, or 2 for an HTTP/2 stream */
	char peer[48];         /* "address:port" */
};

/* The first header named `name` (case-insensitive) or NULL. */
const char *pc_http_request_header(const pc_http_request_msg_t *req, const char *name);

/* The payload of PC_MSG_HTTP_GONE and PC_MSG_WS_CLOSED. */
typedef struct pc_http_gone_msg {
	pc_http_server_t *server;
	uint64_t id;
	int32_t reason;   /* PC_ESTOPPED (server closing), PC_ELIMIT, PC_ETIMEDOUT, 0 (peer closed) */
	uint16_t ws_code; /* WS_CLOSED: the close code received or sent (1000, 1006, ...) */
} pc_http_gone_msg_t;

/* ---- answers (any thread) ----------------------------------------------- */

/* `headers` is extra header lines, each "Name: value\r\n", or NULL; the
 * server adds Date-free Content-Length / Transfer-Encoding and Connection
 * itself. On HTTP/2 names are sent in lower case and connection-specific
 * headers (Connection, Keep-Alive, Transfer-Encoding, Upgrade, ...) are
 * left out. Returns PC_ENOTFOUND when the request is gone. */
int pc_http_respond(pc_http_server_t *srv, uint64_t id, int status, const char *headers,
		    const void *body, size_t len);

/* A streamed response: chunked transfer encoding on HTTP/1.1, close-delimited
 * on HTTP/1.0, DATA frames on HTTP/2. For SSE pass
 * "Content-Type: text/event-stream\r\n". */
int pc_http_respond_start(pc_http_server_t *srv, uint64_t id, int status, const char *headers);
int pc_http_respond_write(pc_http_server_t *srv, uint64_t id, const void *data, size_t len);
int pc_http_respond_end(pc_http_server_t *srv, uint64_t id);

/* Closes the connection at once (RST-free close; what was queued is
 * dropped); on HTTP/2 resets only the request's stream (RST_STREAM
 * INTERNAL_ERROR). For tests and mock servers that must simulate a vanished
 * peer. */
int pc_http_abort(pc_http_server_t *srv, uint64_t id);

/* ---- WebSocket ----------------------------------------------------------- */

enum { PC_WS_TEXT = 1, PC_WS_BINARY = 2 };

/* The payload of PC_MSG_WS_MESSAGE: one whole message (fragments joined). */
typedef struct pc_ws_message_msg {
	pc_http_server_t *server;
	uint64_t id;
	uint8_t opcode; /* PC_WS_TEXT or PC_WS_BINARY */
	size_t len;
	char data[];    /* NUL-terminated after len */
} pc_ws_message_msg_t;

/* Completes the upgrade for request `id` (the id names the WebSocket from
 * now on); frames go to `owner` (the server keeps a reference until
 * CLOSED). `protocol` is the Sec-WebSocket-Protocol to answer, or NULL.
 * For a request that is not an upgrade (an HTTP/2 stream, say) owner gets
 * CLOSED (PC_ESTATE, 1006) at once. */
int pc_ws_accept(pc_http_server_t *srv, uint64_t id, pc_actor_t *owner, const char *protocol);
/* pc_ws_accept with a cap of this connection's own on one message (and so
 * on one frame): `max_message_bytes` below the server's max_message_bytes
 * tightens it (a protocol's pre-authentication limit); 0 keeps the
 * server's. Past it the connection is closed with 1009, as for the
 * server's caps. The cap holds from the very first frame, including frames
 * that arrived before the upgrade was accepted. */
int pc_ws_accept_capped(pc_http_server_t *srv, uint64_t id, pc_actor_t *owner, const char *protocol,
			uint32_t max_message_bytes);
/* Changes the connection's own message cap (0: back to the server's; a
 * value above the server's counts as the server's). A message already
 * being received keeps the cap it started under. Commands to one
 * connection run in the order they were made, so frames the peer sends
 * after seeing a reply posted after this call are measured against the new
 * cap. */
int pc_ws_set_max_message(pc_http_server_t *srv, uint64_t id, uint32_t max_message_bytes);
int pc_ws_send(pc_http_server_t *srv, uint64_t id, int opcode, const void *data, size_t len);
/* Asks for PC_MSG_WS_DRAINED (payload pc_http_gone_msg_t, reason 0) to go
 * to the connection's owner once nothing it sent before is left to write
 * to the socket: at once when nothing is. An owner that holds its further
 * output while a request is out sends no faster than its peer reads, and
 * can merge what it holds. One message per request; asking again while
 * one is out makes no second message. PC_ENOTFOUND when the connection is
 * gone (its CLOSED comes). */
int pc_ws_notify_drained(pc_http_server_t *srv, uint64_t id);
/* Sends a close frame with `code` and `reason` and closes after the peer
 * answers (or a short grace period). */
int pc_ws_close(pc_http_server_t *srv, uint64_t id, uint16_t code, const char *reason);

/* ---- requests handed to actors of their own (route side) ---------------- */

/* A route actor that hands each request to an actor of its own keeps them
 * here by request id, so that PC_MSG_HTTP_GONE, which the server sends to
 * the route, reaches the actor serving that request. Belongs to one route
 * actor: not synchronised. */
typedef struct pc_http_handoffs pc_http_handoffs_t;

int pc_http_handoffs_new(pc_http_handoffs_t **out);
/* Stops (PC_EXIT_SHUTDOWN) and releases every actor still in, then frees.
 * NULL is a no-op. */
void pc_http_handoffs_free(pc_http_handoffs_t *h);
/* Request `id` is served by `a` (a reference is kept). PC_ENOMEM. */
int pc_http_handoff_add(pc_http_handoffs_t *h, uint64_t id, pc_actor_t *a);
/* Request `id` is over, its actor said: forgets it (unknown ids too). */
void pc_http_handoff_done(pc_http_handoffs_t *h, uint64_t id);
/* On PC_MSG_HTTP_GONE: forgets the request and sends its actor `type` with
 * the request id as the u64 payload. A request not handed off is ignored. */
void pc_http_handoff_gone(pc_http_handoffs_t *h, const pc_msg_t *gone, uint32_t type);

#ifdef __cplusplus
}
#endif
#endif
