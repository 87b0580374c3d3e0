/*
 * I/O threads: the OS edge of the runtime.
 *
 * Each I/O thread owns one epoll, an eventfd by which any thread wakes it,
 * its own timers, its share of the listening sockets, and one libcurl multi
 * handle driven on the same epoll. Actors never touch sockets or curl: they
 * hand an I/O thread a command (start a request, write a frame, cancel) and
 * get messages back.
 *
 * This is the I/O part's one public header: it gathers the rest at its
 * end (the HTTP client on libcurl, http_client.h; the WebSocket client,
 * ws_client.h; the HTTP/1.1 + WebSocket + h2c server, http_server.h; the
 * byte buffer and grow-array, buf.h; JSON printing and checking,
 * json_print.h, json_text.h; UTF-8, base64, percent-encoding, addresses
 * and origins; the
 * SSE parser), each of which states its own rules.
 *
 * Threads: pc_io_new and pc_io_free from one controlling thread; everything
 * else in io/ may be called from any thread unless it says otherwise.
 */
#ifndef PINCER_IO_IO_H
#define PINCER_IO_IO_H

#include <stdint.h>

#include "actors/actor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pc_io pc_io_t;

typedef struct pc_io_config {
	uint32_t threads;              /* 0: one per two cores, at least one */
	uint32_t max_host_connections; /* per host and I/O thread; 0: 64 */
	uint32_t max_total_connections; /* per I/O thread; 0: no cap */
	uint32_t max_idle_connections; /* kept-alive connections per I/O thread; 0: 256 */
	uint32_t max_concurrent_streams; /* HTTP/2 requests multiplexed on one client
					  * connection (the server's SETTINGS may
					  * lower it); 0: 1000 */
} pc_io_config_t;

/* Message types the I/O layer delivers to actors (see the module headers
 * for their payloads). */
enum {
	PC_MSG_HTTP_RESPONSE_HEAD = PC_MSG_TYPE_SYSTEM + 0x1000,
	PC_MSG_HTTP_RESPONSE_DATA,
	PC_MSG_HTTP_RESPONSE_END,
	PC_MSG_HTTP_REQUEST = PC_MSG_TYPE_SYSTEM + 0x1100,
	PC_MSG_HTTP_GONE,
	PC_MSG_WS_MESSAGE,
	PC_MSG_WS_CLOSED,
	PC_MSG_WS_DRAINED,
};

/* Starts the I/O threads for runtime `rt` (which must be started and must
 * outlive the I/O layer). NULL cfg takes the defaults. */
int pc_io_new(pc_runtime_t *rt, const pc_io_config_t *cfg, pc_io_t **out);

/* Stops the I/O threads after closing every server and cancelling every
 * transfer: owners of live transfers get their END message (PC_ESTOPPED),
 * owners of live connections their GONE / CLOSED message. Call before
 * pc_runtime_stop. NULL is a no-op. */
void pc_io_free(pc_io_t *io);

uint32_t pc_io_threads(const pc_io_t *io);
pc_runtime_t *pc_io_runtime(const pc_io_t *io);

typedef struct pc_io_stats {
	uint64_t transfers_started;  /* client requests handed to curl */
	uint64_t transfers_live;     /* not yet finished or cancelled */
	uint64_t transfers_paused;   /* paused now by consumer backpressure */
	uint64_t connections_accepted;
	uint64_t connections_live;   /* server-side connections open now */
	uint64_t connections_dropped; /* closed for a limit, timeout or slow reader */
	uint64_t commands;           /* commands run by the I/O threads */
	uint64_t wakeups;            /* epoll returns */
	uint64_t output_queued;      /* bytes server connections hold for their peers now
				      * (written, not yet taken by the socket) */
	uint64_t trims;              /* times an I/O thread gave free heap memory back
				      * after a busy stretch (runtime.h, trim_after_ms) */
	uint64_t transitions_refused; /* illegal lifecycle transitions of a connection
				       * (HTTP, WebSocket, WebSocket client) or an
				       * HTTP/2 stream refused */
} pc_io_stats_t;

/* Sums the counters of every I/O thread; each is read without stopping
 * the threads, so the sum is a snapshot, not an atomic cut. */
void pc_io_stats(pc_io_t *io, pc_io_stats_t *out);

/*
 * A descriptor another library drives (a database client's socket),
 * polled on one of the I/O loops like the layer's own connections: fn(w,
 * arg, events) runs on that loop's thread when the descriptor is readable
 * (PC_IO_FD_READ, also for an error or a hang-up, which a read finds),
 * writable (PC_IO_FD_WRITE, when asked for), when the deadline passes
 * (events 0), or once when the I/O layer shuts down (PC_IO_FD_STOPPED).
 * The owner does its non-blocking I/O inside fn, asks for what it waits
 * for next with pc_io_fd_want, and ends with pc_io_fd_stop; the
 * descriptor stays open (it is the owner's).
 */
typedef struct pc_io_fd pc_io_fd_t;
typedef void (*pc_io_fd_fn)(pc_io_fd_t *w, void *arg, uint32_t events);
#define PC_IO_FD_READ 1u
#define PC_IO_FD_WRITE 2u
#define PC_IO_FD_STOPPED 4u
/* Any thread: starts watching `fd` for `want` (PC_IO_FD_READ and/or
 * _WRITE) with a deadline `timeout_ms` from when the loop takes it (0:
 * none). fn may run before this returns; *out (may be NULL) is for use
 * inside fn. */
int pc_io_fd_start(pc_io_t *io, int fd, uint32_t want, uint32_t timeout_ms, pc_io_fd_fn fn, void *arg,
		   pc_io_fd_t **out);
/* Loop thread, inside fn: what to wait for next (the deadline stays). */
int pc_io_fd_want(pc_io_fd_t *w, uint32_t want);
/* Loop thread, inside fn: stops watching; fn is not called again and w
 * is freed. */
void pc_io_fd_stop(pc_io_fd_t *w);

/*
 * Lifecycle traces of the connection machines ("http": a server
 * connection, "ws": a server WebSocket, "wsclient": a client WebSocket,
 * "h2stream": an HTTP/2 stream, whose id is <connection serial>/<stream>,
 * "h1client": a client HTTP/1.1 connection, http1_client.h).
 * With a machine traced, each transition writes one line
 *   trace <machine> <connection serial> <from> -> <to> (<why>)
 * to `fn(user, line)`, or to standard error when fn is NULL. `spec` is a
 * comma list of machine names or "all"; NULL takes PINCER_TRACE (which is
 * read on first use when this is never called). Other names are ignored.
 * Any thread; set it before the traffic it should see. fn is called on
 * the I/O threads and must be thread-safe.
 */
typedef void (*pc_io_trace_fn)(void *user, const char *line);
void pc_io_trace_set(const char *spec, pc_io_trace_fn fn, void *user);

/*
 * The sink without the machine set, for an owner of a logger (the
 * gateway): the set stays what PINCER_TRACE or pc_io_trace_set made it.
 * The sink is one per process, and the first claim wins: a claim while
 * another holder's sink is set returns false and changes nothing, so with
 * two agents in one process the lines go to the first one's logger (and
 * to standard error again once it releases). Release drops the sink only
 * when `user` still holds it; once it returns, fn is not running and is
 * not called again with `user`, so the holder may free what `user` points
 * to. pc_io_trace_set replaces any sink, claimed or not. A successful
 * claim reads PINCER_TRACE again (unless pc_io_trace_set chose the set),
 * as an agent reads it when it is made.
 */
bool pc_io_trace_claim(pc_io_trace_fn fn, void *user);
void pc_io_trace_release(void *user);

#ifdef __cplusplus
}
#endif

/* The rest of the I/O part: including io/io.h is enough for any of it. */
#include "base64.h"
#include "buf.h"
#include "http1_client.h"
#include "http_client.h"
#include "http_server.h"
#include "json_print.h"
#include "json_text.h"
#include "netaddr.h"
#include "origin.h"
#include "sse.h"
#include "uri.h"
#include "utf8.h"
#include "ws_client.h"

#endif
