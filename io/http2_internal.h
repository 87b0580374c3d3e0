/*
 * HTTP/2 on a server connection (http2_server.c): cleartext (h2c), by
 * prior knowledge or by an HTTP/1.1 upgrade; framing, HPACK and flow
 * control by nghttp2. http_conn.c hands a connection over when its first
 * bytes are the client preface or a request asks to upgrade; http_server.c
 * hands over the answers whose id names a stream. Loop thread only.
 */
#ifndef PC_IO_HTTP2_INTERNAL_H
#define PC_IO_HTTP2_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "http_conn_internal.h"

typedef struct pc__h2_stream pc__h2_stream_t;

/*
 * A stream's lifecycle ("h2stream" in PINCER_TRACE; one line per
 * transition, the id <connection serial>/<stream id>):
 *   new -> recv          its request's HEADERS began (or an h2c upgrade)
 *   recv -> service      the request is whole and with its route's actor
 *   recv -> done         refused here (4xx, 503) or the connection ended
 *   service -> stream    the actor started a streamed answer
 *   service|stream -> done  answered whole, failed, or the connection ended
 *   any but closed -> closed  nghttp2 closed the stream (after its answer,
 *                        or a reset), or the connection was freed
 * http2_server.c's one transition function (stream_set) refuses (counted
 * in pc_io_stats_t.transitions_refused, traced "refused") what the table
 * does not allow.
 */
typedef enum pc__h2_stage {
	PC__H2_S_NEW,
	PC__H2_S_RECV,    /* the request is arriving */
	PC__H2_S_SERVICE, /* with its actor, no answer yet */
	PC__H2_S_STREAM,  /* a streamed answer is under way */
	PC__H2_S_DONE,    /* answered, by the actor or here; the body may still be leaving */
	PC__H2_S_CLOSED,  /* nghttp2 is done with it; its memory goes next */
	PC__H2_S_COUNT
} pc__h2_stage_t;

/* The stage's name ("unknown" out of range); whether the table allows
 * from -> to. */
const char *pc__h2_lc_name(pc__h2_stage_t s);
bool pc__h2_lc_legal(pc__h2_stage_t from, pc__h2_stage_t to);

/* Tells the first bytes of a connection apart: 1 when they begin with the
 * HTTP/2 client preface, 0 when they are a proper prefix of it (wait for
 * more), -1 when they are something else (HTTP/1.1). */
int pc__h2_sniff(const char *p, size_t n);

/* Serves c as HTTP/2 from now on. `data` is the input so far, preface
 * first (copied as needed). Check c->closed afterwards. */
void pc__h2_start(pc__http_conn_t *c, const char *data, size_t n);

/* The HTTP/1.1 request in service on c asks to upgrade to h2c with
 * `settings` (its HTTP2-Settings). 0: c answered 101, speaks HTTP/2 from
 * now on and the request is stream 1 (c's body taken; check c->closed);
 * else the status to refuse it with (400: a bad HTTP2-Settings; 503), c
 * unchanged. `fields` is the head's name NUL value NUL, `nfields` times. */
int pc__h2_upgrade(pc__http_conn_t *c, const char *method, const char *target, const char *fields,
		   uint32_t nfields, const char *settings);

/* An epoll event on an HTTP/2 connection. */
void pc__h2_on_event(pc__http_conn_t *c, uint32_t events);
/* The phase timer fired: no stream for the idle time (or, on a new
 * connection, for the header time). */
void pc__h2_on_timer(pc__http_conn_t *c);
/* Whether to watch for input: nghttp2 wants it and our output is short. */
bool pc__h2_want_read(const pc__http_conn_t *c);
/* Response bytes wait in streams for the peer's flow-control window: the
 * stall clock runs as for queued output. */
bool pc__h2_holding(const pc__http_conn_t *c);

/* The connection is ending: every stream's id leaves the table and the
 * actor of each unanswered request gets GONE with `reason`. On
 * PC_ESTOPPED a GOAWAY is sent if the socket takes it. Idempotent. */
void pc__h2_finish(pc__http_conn_t *c, int reason);
void pc__h2_free(struct pc__h2 *h2);

/* Answers for a stream's request (pc_http_respond and the rest). */
void pc__h2_respond(pc__h2_stream_t *s, int status, const char *hdrs, size_t hlen,
		    const char *body, size_t len);
void pc__h2_stream_start(pc__h2_stream_t *s, int status, const char *hdrs, size_t hlen);
void pc__h2_stream_write(pc__h2_stream_t *s, const char *data, size_t len);
void pc__h2_stream_end(pc__h2_stream_t *s);
/* pc_http_abort: resets the stream; the actor gets no GONE. */
void pc__h2_abort(pc__h2_stream_t *s);

#endif
