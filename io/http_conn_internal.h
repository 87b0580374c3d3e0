/*
 * The HTTP server's insides, shared by http_server.c (the server, its
 * listeners, the id tables, the answer API), http_conn.c (one connection's
 * HTTP state machine), http2_server.c (a connection that speaks HTTP/2)
 * and ws.c (a connection after a WebSocket upgrade).
 *
 * Threads: a connection belongs to the loop that accepted it and is touched
 * only on that thread. Other threads see a loop's share of the server only
 * through its id table and its `open` flag, both under that share's mutex.
 */
#ifndef PC_IO_HTTP_CONN_INTERNAL_H
#define PC_IO_HTTP_CONN_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <llhttp.h>

#include "buf.h"
#include "http_server.h"
#include "id_map.h"
#include "loop_internal.h"

/* Bytes taken from the socket per read (one buffer per loop and server). */
#define PC__HTTP_RBUF 65536
/* Unparsed input a connection holds while a request is in service
 * (pipelined requests, early WebSocket frames); past it reading stops. */
#define PC__HTTP_PENDING_MAX 65536
/* How long a closing connection drains the peer's input after its last
 * response, so that the response is not lost to a reset. */
#define PC__HTTP_LINGER_MS 2000
/* The loop index lives in the top byte of an id (loop.c allows 256). */
#define PC__HTTP_ID_SHIFT 56


typedef struct pc__http_route {
	char *method; /* NULL: any */
	char *path;
	size_t path_len; /* without the trailing '*' of a prefix */
	bool prefix;
	pc_actor_t *handler; /* a reference the server holds */
} pc__http_route_t;

typedef struct pc__http_conn pc__http_conn_t;
struct pc__h2_stream;

/* What an id in a loop's table names: a connection's request in service
 * or its WebSocket (`stream` NULL), or one HTTP/2 stream of a connection.
 * Embedded in what it names. */
typedef struct pc__srv_ent {
	pc__id_link_t link;           /* id 0: not in the table (under sl->mu) */
	pc__http_conn_t *conn;
	struct pc__h2_stream *stream;
} pc__srv_ent_t;

/* The server's share of one loop. */
typedef struct pc__srv_loop {
	pc_http_server_t *srv;
	pc_ioloop_t *loop;
	uint32_t index;
	int fd; /* the listening socket */
	pc_io_watch_t watch;
	pc_io_timer_t retry;    /* re-arms accept after EMFILE and the like */
	pc_io_hook_t hook;      /* closes everything when the loop stops */
	pc__http_conn_t *conns; /* live connections, doubly linked */
	char *rbuf;             /* PC__HTTP_RBUF bytes of read scratch */
	int start_rc;           /* what starting on the loop returned */

	/* Shared with answering threads. */
	pthread_mutex_t mu;
	pc__id_map_t ids;          /* id -> pc__srv_ent_t */
	bool open;    /* answers may be posted to the loop */
	bool started; /* listening on the loop, shutdown hook registered */
	bool shut;    /* listener off, every connection closed */
} pc__srv_loop_t;

struct pc_http_server {
	pc_http_server_t *reg_next; /* the registry of live servers */
	pc_io_t *io;
	pc_http_server_limits_t lim; /* defaults filled in */
	pc_ws_origin_fn origin_check;
	void *origin_user;
	pc_http_access_fn on_access;
	void *access_user;
	uint16_t port;
	bool started; /* the controlling thread's view */
	pc__http_route_t *routes;
	size_t nroutes;
	uint32_t nconns; /* atomic: live connections over every loop */

	/* Start and free wait here for the loops' acknowledgements. */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	uint32_t acks;

	uint32_t nloops;
	pc__srv_loop_t loops[];
};

/*
 * A server connection's lifecycle ("http"; docs/architecture.md, "one
 * state machine per lifecycle"):
 *
 *   new -> head                           accepted
 *   head -> body -> service               a request's head, then its body
 *   head | service -> h2                  the preface, or an h2c upgrade
 *   service -> stream                     a streamed answer starts
 *   service | stream -> head              answered, kept alive
 *   service -> ws                         upgraded (ws.c)
 *   head | body | service | stream -> closing   the last answer flushes
 *   closing | ws | h2 | ... -> linger     write side shut, input drained
 *   any but closed -> closed              the socket is closed
 *
 * Only pc__conn_set assigns it (it refuses and counts what the table
 * does not allow, and traces); scripts/check-lifecycles checks.
 */
typedef enum pc__conn_state {
	PC__C_NEW,     /* accepted, not yet set up */
	PC__C_HEAD,    /* waiting for, or reading, a request head */
	PC__C_BODY,    /* reading a request body */
	PC__C_SERVICE, /* a request is with its actor, no answer yet */
	PC__C_STREAM,  /* a streamed response is under way */
	PC__C_CLOSING, /* the last response is being flushed */
	PC__C_LINGER,  /* write side shut, draining input until EOF */
	PC__C_WS,      /* a WebSocket (ws.c) */
	PC__C_H2,      /* HTTP/2 (http2_server.c) */
	PC__C_CLOSED,  /* the socket is closed; memory goes after the batch */
	PC__C_COUNT,
} pc__conn_state_t;

/* "new", "head", ..., "closed"; "unknown" out of range. */
const char *pc__conn_lc_name(pc__conn_state_t s);
/* Whether the table allows `from` -> `to`. */
bool pc__conn_lc_legal(pc__conn_state_t from, pc__conn_state_t to);

/* A piece of queued output. */
typedef struct pc__out {
	struct pc__out *next;
	size_t off; /* already sent */
	size_t len;
	size_t cap;
	char data[];
} pc__out_t;

struct pc__ws;
struct pc__h2;

struct pc__http_conn {
	pc__srv_loop_t *sl;
	pc_http_server_t *srv;
	pc__http_conn_t *prev, *next; /* sl->conns */
	pc__srv_ent_t ent;            /* the connection's own id-table entry */
	uint64_t id;                  /* the request in service or the WebSocket; 0: none
				       * (mirrors ent.link.id; set only by pc__srv_id_*) */
	int fd;
	uint64_t serial;              /* names the connection in traces */
	pc__conn_state_t state;       /* set only by pc__conn_set */
	pc_io_watch_t watch;
	pc_io_timer_t timer;  /* the current phase's deadline */
	pc_io_timer_t wtimer; /* output that makes no progress */

	llhttp_t parser;
	pc__buf_t head;     /* url NUL, then name NUL value NUL per header */
	size_t val_start;   /* where the header value being parsed starts */
	uint32_t nheaders;
	size_t head_raw;    /* raw head bytes in earlier chunks */
	const char *chunk;     /* the input being parsed now */
	const char *span_end;  /* where the parser's last head span ended in it */
	pc__buf_t body;
	size_t trailer_bytes;
	pc__buf_t pending;  /* input read but not parsed */

	pc__out_t *out_head, *out_tail;
	size_t out_bytes;

	pc_actor_t *handler; /* borrowed from the route while a request is in service */
	struct pc__ws *ws;
	struct pc__h2 *h2;
	int err_status;      /* set by a parser callback that refuses the request */
	uint8_t http_minor;
	bool sniffed;    /* the first bytes were told apart: HTTP/1.1 or HTTP/2 */
	bool begun;      /* a request's first byte has arrived */
	bool done;       /* the parser completed a request, not yet dispatched */
	bool head_timed; /* the header deadline runs for this request */
	bool served;     /* at least one response went out */
	bool keep_alive;
	bool upgrade;    /* the parser saw Connection: upgrade + Upgrade */
	bool ws_ok;      /* the request is a valid WebSocket handshake */
	bool no_body;    /* HEAD request or a status without a body */
	bool chunked;    /* the streamed response uses chunked encoding */
	bool in_drive;
	bool dropped;    /* counted in connections_dropped */
	bool flush_due;  /* output held for the end of the loop's command batch */
	char peer[48];
	char ws_key[32];
	/* the request in service, for the access hook */
	uint64_t req_t0_ns, resp_bytes;
	int resp_status;
	char req_id[65];
};

/* Reports the request in service (or, for a WebSocket, its close) to the
 * server's access hook, if any (http_conn.c). */
void pc__conn_access(pc__http_conn_t *c, bool completed);
void pc__conn_access_ws(pc__http_conn_t *c, uint16_t code, int reason);
/* The same for any request: `target` may carry a query (it is cut off);
 * t0_ns is the request's dispatch (CLOCK_MONOTONIC), 0 unknown. */
void pc__access_request(pc_http_server_t *srv, const char *method, const char *target, const char *peer,
			const char *request_id, int status, bool completed, uint64_t bytes, uint64_t t0_ns);
/* The answer's x-request-id among header lines `h` (CRLF-ended), into
 * `dst` (cap bytes; "" when none). */
void pc__note_request_id(char *dst, size_t cap, const char *h, size_t hlen);
/* "x-request-id: req_<24 hex>\r\n" for an answer the server makes itself
 * (an error before any route saw the request), into `line` (64 bytes);
 * the id alone into `id` (may be NULL; 29 bytes). */
void pc__server_request_id(char line[64], char *id);

/* ---- http_server.c (loop thread unless noted) ---- */

uint64_t pc__srv_new_id(pc__srv_loop_t *sl);
/* Puts `e` in the table under `id` / takes it out (its id becomes 0). */
void pc__srv_ent_add(pc__srv_loop_t *sl, pc__srv_ent_t *e, uint64_t id);
void pc__srv_ent_remove(pc__srv_loop_t *sl, pc__srv_ent_t *e);
/* The same for a connection's own entry, keeping c->id in step. */
void pc__srv_id_add(pc__srv_loop_t *sl, pc__http_conn_t *c, uint64_t id);
void pc__srv_id_remove(pc__srv_loop_t *sl, pc__http_conn_t *c);
const pc__http_route_t *pc__srv_route(const pc_http_server_t *srv, const char *method,
				      const char *path, size_t path_len);

/* ---- http_conn.c (loop thread) ---- */

/* What a PC_MSG_HTTP_REQUEST is made of, borrowed while it is built. */
typedef struct pc__req_parts {
	const char *method;
	const char *target;   /* path and query */
	const char *fields;   /* name NUL value NUL, `nfields` times; names that
			       * begin with ':' (HTTP/2 pseudo-headers) are left out */
	size_t fields_len;
	uint32_t nfields;
	const char *host;     /* a Host header to add (HTTP/2's :authority), or NULL */
	const char *body;
	size_t body_len;
	bool keep_alive;
	uint8_t http_major, http_minor;
	const char *peer;
} pc__req_parts_t;

/* The request as one self-contained message (id 0, for the caller to
 * set), or NULL when memory is short. */
pc_msg_t *pc__request_msg(pc_http_server_t *srv, const pc__req_parts_t *p);

/* The one place a connection's state changes: refuses (and counts in
 * transitions_refused) what pc__conn_lc_legal does not allow, and writes
 * a trace line when "http" is traced. `why` says what moved it. */
void pc__conn_set(pc__http_conn_t *c, pc__conn_state_t to, const char *why);
static inline bool pc__conn_closed(const pc__http_conn_t *c) { return c->state == PC__C_CLOSED; }

/* Takes over an accepted socket (closing it on failure). */
void pc__conn_accept(pc__srv_loop_t *sl, int fd, const struct sockaddr *sa, socklen_t salen);
/* Closes at once: the actor in charge gets GONE / CLOSED with `reason`;
 * memory goes after the current batch. Idempotent. */
void pc__conn_close(pc__http_conn_t *c, int reason);
/* One non-blocking read for a connection's read loop: > 0 bytes read; 0
 * to try again (interrupted); < 0 to stop reading: nothing more now, or
 * the connection closed (an error, or the peer is done). */
ssize_t pc__conn_recv(pc__http_conn_t *c, char *buf, size_t len);
/* Shuts the write side and drains input until EOF or a deadline. */
void pc__conn_linger(pc__http_conn_t *c);
/* Reads no more: flushes what is queued, then lingers. */
void pc__conn_closing(pc__http_conn_t *c);
/* Sends what the socket takes and queues the rest; past the output cap the
 * connection is dropped. Check pc__conn_closed(c) afterwards. */
void pc__conn_send(pc__http_conn_t *c, const struct iovec *iov, int n);
/* Queues bytes without writing them, for a caller that flushes once after
 * a batch (and checks the output cap itself). PC_ENOMEM. */
int pc__conn_queue(pc__http_conn_t *c, const char *p, size_t n);
/* Writes queued output; a negative code when the peer is gone (the caller
 * closes). */
int pc__conn_flush(pc__http_conn_t *c);
/* Output held for the end of the loop's batch of commands goes at most
 * this far; past it, it goes at once. */
#define PC__CONN_HOLD_MAX (64u * 1024u)
/* Inside a command, with `pending` bytes waiting to go: true when they may
 * wait for the end of the batch, whose flush is then due (an EPOLLOUT
 * event, as the socket would give). */
bool pc__conn_hold(pc__http_conn_t *c, size_t pending);
/* Sets the epoll mask and the stall timer from the state. Check pc__conn_closed(c). */
void pc__conn_rewatch(pc__http_conn_t *c);
/* Output made progress (re-arms the stall timer). */
void pc__conn_progress(pc__http_conn_t *c);
/* Counts the connection in connections_dropped (once). */
void pc__conn_drop(pc__http_conn_t *c);
/* (Re)arms or cancels the phase deadline. */
void pc__conn_arm(pc__http_conn_t *c, uint64_t ms);
void pc__conn_disarm(pc__http_conn_t *c);
/* Sends GONE or CLOSED; a message that cannot be allocated is lost. */
void pc__conn_notify(pc_actor_t *to, uint32_t type, pc_http_server_t *srv, uint64_t id,
		     int reason, uint16_t ws_code);

/* Answers, run from the commands the answer API posts. */
void pc__conn_respond(pc__http_conn_t *c, int status, const char *hdrs, size_t hlen,
		      const char *body, size_t len);
void pc__conn_stream_start(pc__http_conn_t *c, int status, const char *hdrs, size_t hlen);
void pc__conn_stream_write(pc__http_conn_t *c, const char *data, size_t len);
void pc__conn_stream_end(pc__http_conn_t *c);

#endif
