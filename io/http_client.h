/*
 * HTTP client requests on the I/O threads (libcurl multi interface).
 *
 * pc_http_fetch hands a request to an I/O thread; its owner actor then
 * receives, in order:
 *   PC_MSG_HTTP_RESPONSE_HEAD  once, when the status line and headers are in
 *   PC_MSG_HTTP_RESPONSE_DATA  zero or more body chunks
 *   PC_MSG_HTTP_RESPONSE_END   exactly once, with the outcome
 * END always arrives, also after a cancel (transport PC_HTTP_CANCELLED) or
 * when pc_io_free ends the transfer; its memory is reserved when the
 * request starts, so it cannot be lost to an allocation failure. Every
 * message carries the request's `tag`.
 *
 * Backpressure: bytes delivered in DATA messages count as outstanding
 * until the owner reports them consumed (pc_http_call_consumed). Past
 * `max_buffered` outstanding bytes the transfer pauses (CURLPAUSE_RECV);
 * it resumes when the owner has consumed at least half. An owner that
 * handles each chunk in its handler calls consumed there.
 *
 * Ownership: the pc_http_call_t handle belongs to the caller, who releases
 * it exactly once with pc_http_call_release, after END or after cancel.
 * Cancel is a message to the I/O thread and always frees the transfer.
 *
 * HTTP versions: https:// negotiates HTTP/2 by ALPN and falls back to
 * HTTP/1.1; http:// speaks HTTP/1.1 unless the request asks for HTTP/2
 * with prior knowledge (h2c, for a server known to speak it). HTTP/2
 * requests of one I/O thread to the same host share connections, up to
 * max_concurrent_streams (io.h) each; one that starts while a connection
 * is being opened waits for it rather than open another. A cancel resets
 * only the request's stream. With libcurl before 8.0, which cannot reuse a
 * prior-knowledge connection (curl issue 10634), an h2c connection starts
 * with an HTTP/1.1 upgrade instead (RFC 7540 section 3.2), and a host gets
 * one h2c connection per I/O thread, further requests waiting for a free
 * stream; see docs/providers.md.
 */
#ifndef PINCER_IO_HTTP_CLIENT_H
#define PINCER_IO_HTTP_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "io.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pc_http_call pc_http_call_t;

typedef struct pc_http_client_request {
	const char *method;              /* NULL: POST with a body, else GET */
	const char *url;                 /* http:// or https:// */
	const char *const *headers;      /* "Name: value" lines; may be NULL */
	size_t header_count;
	const void *body;                /* copied; may be NULL */
	size_t body_len;
	bool take_body;                  /* body came from malloc and the call takes
					  * it over instead of copying it (also when
					  * pc_http_fetch fails): one copy less of a
					  * large prompt */
	uint32_t connect_timeout_ms;     /* 0: 10 s */
	uint32_t total_timeout_ms;       /* 0: none */
	uint32_t idle_timeout_ms;        /* no byte received for this long ends it; 0: none */
	size_t max_buffered;             /* outstanding bytes before pausing; 0: 1 MiB */
	uint64_t tag;                    /* echoed in every message */
	bool http2_prior_knowledge;      /* http://: HTTP/2 in cleartext (h2c), see above */
} pc_http_client_request_t;

/* Why a transfer ended, in terms the failover classifier uses. */
typedef enum pc_http_transport {
	PC_HTTP_OK = 0,           /* the response arrived whole */
	PC_HTTP_DNS,              /* name resolution failed */
	PC_HTTP_CONNECT,          /* refused, unreachable, reset while connecting */
	PC_HTTP_CONNECT_TIMEOUT,
	PC_HTTP_TIMEOUT,          /* total_timeout_ms ran out */
	PC_HTTP_IDLE,             /* idle_timeout_ms passed with no byte */
	PC_HTTP_TLS,
	PC_HTTP_CLOSED,           /* the peer closed or reset mid-response (or reset
				   * the HTTP/2 stream) */
	PC_HTTP_MALFORMED,        /* not HTTP, or a broken framing */
	PC_HTTP_CANCELLED,        /* pc_http_call_cancel or pc_io_free */
	PC_HTTP_OTHER,
} pc_http_transport_t;

const char *pc_http_transport_name(pc_http_transport_t t);

/* PC_MSG_HTTP_RESPONSE_HEAD. `headers` is the raw header block, one
 * "Name: value" per line, each ending in '\n', NUL-terminated. */
typedef struct pc_http_head_msg {
	uint64_t tag;
	int32_t status;
	uint32_t headers_len;
	char headers[];
} pc_http_head_msg_t;

/* The value of header `name` (case-insensitive) in a HEAD message, copied
 * into buf (NUL-terminated, truncated to cap); returns its length or -1. */
long pc_http_head_get(const pc_http_head_msg_t *head, const char *name, char *buf, size_t cap);

/* PC_MSG_HTTP_RESPONSE_DATA. */
typedef struct pc_http_data_msg {
	uint64_t tag;
	uint32_t len;
	char data[];
} pc_http_data_msg_t;

/* PC_MSG_HTTP_RESPONSE_END. */
typedef struct pc_http_end_msg {
	uint64_t tag;
	int32_t status;         /* the HTTP status, 0 if none arrived */
	int32_t result;         /* 0, or PC_ETIMEDOUT / PC_ESYS / PC_ESTOPPED / ... */
	pc_http_transport_t transport;
	int32_t curl_code;      /* CURLcode, for logs */
	uint64_t bytes;         /* body bytes received */
	char error[128];        /* curl's message, or "" */
} pc_http_end_msg_t;

/* Starts a request; messages go to `owner`. On success *out is the
 * caller's handle. */
int pc_http_fetch(pc_io_t *io, const pc_http_client_request_t *req, pc_actor_t *owner,
		  pc_http_call_t **out);

/* Reports `n` delivered body bytes as consumed (see Backpressure). */
void pc_http_call_consumed(pc_http_call_t *call, size_t n);

/* Asks the I/O thread to stop the transfer and free it. Idempotent. */
void pc_http_call_cancel(pc_http_call_t *call);

/* Drops the caller's handle. Releasing a call still running also cancels
 * it. NULL is a no-op. */
void pc_http_call_release(pc_http_call_t *call);

#ifdef __cplusplus
}
#endif
#endif
