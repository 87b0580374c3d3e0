/*
 * One keep-alive HTTP/1.1 connection to one plain http:// origin, owned
 * by one actor that sends its requests one after another: the client of
 * `pincer load`, where the client's own cost per request is the product.
 *
 * Why not pc_http_fetch (http_client.h): libcurl's work per transfer (the
 * connection cache's search and its liveness poll(), matching every
 * response header, proxy lookups in the environment) was a quarter of the
 * load client's CPU at 64 connections. Here llhttp parses the answer (as
 * it parses the server's requests) and the socket is the loop's own. There
 * is no TLS, no HTTP/2, no proxy and no redirect; the model providers keep
 * libcurl for those.
 *
 *   pc_h1c_open(io, &o, owner, &c);       resolves; connects at the first request
 *   pc_h1c_request(c, &rq);               owner gets, with rq.tag:
 *     PC_MSG_HTTP_RESPONSE_HEAD           once, when the status line and headers are in
 *     PC_MSG_HTTP_RESPONSE_DATA           zero or more body chunks
 *     PC_MSG_HTTP_RESPONSE_END            exactly once, with the outcome
 *   pc_h1c_request(c, &rq2);              after END: the same connection if the server kept it
 *   pc_h1c_release(c);                    a request in flight ends (END, PC_HTTP_CANCELLED)
 *
 * The messages are pc_http_fetch's (http_client.h); END's curl_code is 0.
 * One request at a time: another before END is refused (PC_ESTATE). The
 * connection is opened for a request when none is open, kept while the
 * server allows (llhttp_should_keep_alive), and closed after a failed
 * request. A request sent on a kept connection that the server had
 * closed meanwhile, so that no byte of an answer came, is sent once more
 * on a new connection (what browsers and libcurl do).
 *
 * Backpressure: DATA bytes count as outstanding until the owner reports
 * them consumed (pc_h1c_consumed); past `max_buffered` the connection stops
 * reading, and reads again once at least half is consumed.
 *
 * Timeouts: only the connect's. A request's own deadline is the owner's
 * (a timer, then pc_h1c_release).
 *
 * Threads: pc_h1c_* from any one thread at a time (the owner's turns);
 * the connection lives on one I/O thread.
 */
#ifndef PINCER_IO_HTTP1_CLIENT_H
#define PINCER_IO_HTTP1_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "io.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pc_h1c pc_h1c_t;

typedef struct pc_h1c_options {
	const char *url;             /* http://HOST[:PORT][/PATH]: every request goes to PATH */
	uint32_t connect_timeout_ms; /* 0: 10 s */
	size_t max_buffered;         /* outstanding DATA bytes before pausing; 0: 1 MiB */
} pc_h1c_options_t;

/* Resolves the URL's host (a blocking lookup, as pc_wsc_open's) and makes
 * the handle. PC_EINVAL for a URL that is not http://, PC_ESYS when the
 * host does not resolve. */
int pc_h1c_open(pc_io_t *io, const pc_h1c_options_t *o, pc_actor_t *owner, pc_h1c_t **out);

typedef struct pc_h1c_request {
	const char *method;         /* NULL: POST */
	const char *const *headers; /* "Name: value" lines, no CR or LF; may be NULL */
	size_t header_count;
	const void *body;           /* copied; may be NULL */
	size_t body_len;
	uint64_t tag;               /* echoed in every message */
} pc_h1c_request_t;

/* Sends a request. 0, or PC_EINVAL (a header with CR or LF), PC_ESTATE (a
 * request is in flight), PC_ESTOPPED (released, or the I/O layer stopped),
 * PC_ENOMEM; no message follows a refusal. */
int pc_h1c_request(pc_h1c_t *c, const pc_h1c_request_t *rq);

/* Reports `n` delivered body bytes as consumed (see Backpressure). */
void pc_h1c_consumed(pc_h1c_t *c, size_t n);

/* Drops the caller's handle and closes the connection; a request in
 * flight ends with END (PC_HTTP_CANCELLED). After pc_io_free, which has
 * closed every connection, it only drops the handle. NULL is a no-op. */
void pc_h1c_release(pc_h1c_t *c);

/* The connection's machine, for traces (PINCER_TRACE=h1client) and tests. */
typedef enum pc_h1c_state {
	PC_H1C_IDLE,       /* no connection */
	PC_H1C_CONNECTING, /* a request waits for the connect */
	PC_H1C_BUSY,       /* a request is written and its answer read */
	PC_H1C_READY,      /* connected, kept alive, no request */
	PC_H1C_CLOSED,     /* released, or the I/O layer stopped */
	PC_H1C_COUNT
} pc_h1c_state_t;

const char *pc_h1c_state_name(pc_h1c_state_t s);
/* Whether the machine allows from -> to. */
bool pc_h1c_state_legal(pc_h1c_state_t from, pc_h1c_state_t to);
/* The connections this handle has opened so far (any thread). */
uint64_t pc_h1c_connections(const pc_h1c_t *c);

#ifdef __cplusplus
}
#endif
#endif
