/*
 * One I/O thread ("loop"): epoll, an eventfd, a command queue, a timer
 * heap, and deferred frees. Modules of io/ (the HTTP client, the server)
 * build on this; nothing outside io/ sees it.
 *
 * Threads: functions marked "loop thread" run only on the loop's own thread
 * (inside a watch callback, a timer, a command or a deferred call); the
 * rest are safe from any thread.
 */
#ifndef PC_IO_LOOP_INTERNAL_H
#define PC_IO_LOOP_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "io.h"

typedef struct pc_ioloop pc_ioloop_t;

/* ---- file descriptors ------------------------------------------------ */

typedef void (*pc_io_event_fn)(pc_ioloop_t *loop, void *arg, uint32_t events);

/* Embedded in its owner. While watched, events (EPOLLIN, EPOLLOUT,
 * EPOLLERR, EPOLLHUP, EPOLLRDHUP) call fn(loop, arg, events). An owner that
 * unwatches and frees itself inside a callback must free through
 * pc_ioloop_defer: later events of the same epoll batch may still name it
 * and are dropped only because the watch was unwatched. */
typedef struct pc_io_watch {
	int fd;
	uint32_t events;
	bool active;
	pc_io_event_fn fn;
	void *arg;
} pc_io_watch_t;

/* Loop thread. Registers fd (level-triggered unless events has EPOLLET). */
int pc__ioloop_watch(pc_ioloop_t *loop, pc_io_watch_t *w, int fd, uint32_t events,
		     pc_io_event_fn fn, void *arg);
/* Loop thread. Changes the event mask (no-op when unchanged). */
int pc__ioloop_rewatch(pc_ioloop_t *loop, pc_io_watch_t *w, uint32_t events);
/* Loop thread. Stops watching; does not close fd. Idempotent. */
void pc__ioloop_unwatch(pc_ioloop_t *loop, pc_io_watch_t *w);

/* ---- timers ---------------------------------------------------------- */

typedef void (*pc_io_timer_fn)(pc_ioloop_t *loop, void *arg);

/* Embedded in its owner; zero-initialise before first use. */
typedef struct pc_io_timer {
	uint64_t deadline_ns;
	uint32_t heap_index; /* 0: not armed; else 1-based slot */
	pc_io_timer_fn fn;
	void *arg;
} pc_io_timer_t;

/* Loop thread. (Re)arms t to fire once after `after_ms`; replaces an
 * earlier arming. */
void pc__ioloop_timer_arm(pc_ioloop_t *loop, pc_io_timer_t *t, uint64_t after_ms,
			  pc_io_timer_fn fn, void *arg);
/* Loop thread. Disarms t; idempotent. */
void pc__ioloop_timer_cancel(pc_ioloop_t *loop, pc_io_timer_t *t);
static inline bool pc__ioloop_timer_armed(const pc_io_timer_t *t) { return t->heap_index != 0; }

/* Loop thread. The loop's clock (CLOCK_MONOTONIC), read once per turn. */
uint64_t pc__ioloop_now_ns(const pc_ioloop_t *loop);

/* ---- commands from any thread ----------------------------------------- */

/* A command is a message whose payload begins with this header; the loop
 * calls run(loop, msg) on its thread and then frees msg. */
typedef void (*pc_io_cmd_fn)(pc_ioloop_t *loop, pc_msg_t *msg);
typedef struct pc_io_cmd {
	pc_io_cmd_fn run;
} pc_io_cmd_t;

/* A new command message with `payload` bytes after the header (returned in
 * *payload_out), or NULL on allocation failure. */
pc_msg_t *pc__io_cmd_new(pc_io_cmd_fn run, size_t payload, void **payload_out);

/* Any thread. Queues msg (ownership passes) and wakes the loop if it was
 * idle. PC_ESTOPPED (msg freed) once the loop has shut down. */
int pc__ioloop_post(pc_ioloop_t *loop, pc_msg_t *msg);

/* ---- deferred work ------------------------------------------------------ */

typedef void (*pc_io_defer_fn)(void *arg);
/* Loop thread. Calls fn(arg) after the current batch of events, timers and
 * commands; the safe place to free an object that owned a watch. */
int pc__ioloop_defer(pc_ioloop_t *loop, pc_io_defer_fn fn, void *arg);

/* ---- shutdown hooks ---------------------------------------------------- */

/* Loop thread. Called once, on the loop thread, when pc_io_free stops the
 * loop, before it exits: owners close what they hold and notify their
 * actors. Hooks run in reverse order of registration. */
typedef struct pc_io_hook {
	struct pc_io_hook *next;
	void (*fn)(pc_ioloop_t *loop, struct pc_io_hook *hook);
} pc_io_hook_t;
void pc__ioloop_on_shutdown(pc_ioloop_t *loop, pc_io_hook_t *hook);
void pc__ioloop_off_shutdown(pc_ioloop_t *loop, pc_io_hook_t *hook);

/* ---- the loop set --------------------------------------------------------- */

uint32_t pc__io_loop_count(const pc_io_t *io);
pc_ioloop_t *pc__io_loop(pc_io_t *io, uint32_t index);
/* Round robin over the loops; any thread. */
pc_ioloop_t *pc__io_next_loop(pc_io_t *io);

uint32_t pc__ioloop_index(const pc_ioloop_t *loop);
pc_io_t *pc__ioloop_io(pc_ioloop_t *loop);
pc_runtime_t *pc__ioloop_runtime(pc_ioloop_t *loop);
/* The loop's counters (io.h). Only its own thread changes them, through
 * PC__IO_STAT_ADD / PC__IO_STAT_SUB, which are relaxed atomics so that
 * pc_io_stats may read them from any thread. */
pc_io_stats_t *pc__ioloop_stats(pc_ioloop_t *loop);
#define PC__IO_STAT_ADD(loop, field, n) \
	__atomic_fetch_add(&pc__ioloop_stats(loop)->field, (uint64_t)(n), __ATOMIC_RELAXED)
#define PC__IO_STAT_SUB(loop, field, n) \
	__atomic_fetch_sub(&pc__ioloop_stats(loop)->field, (uint64_t)(n), __ATOMIC_RELAXED)
/* True once pc_io_free has begun stopping this loop: commands still
 * arriving must release what they carry and notify their actors rather
 * than start anything. */
bool pc__ioloop_stopping(const pc_ioloop_t *loop);
/* True while the loop runs a command (work posted by other threads); what
 * a command defers runs once the batch of them is done. */
bool pc__ioloop_in_commands(const pc_ioloop_t *loop);
/* True when called on this loop's thread. */
bool pc__ioloop_on_thread(const pc_ioloop_t *loop);

/* ---- lifecycle traces (trace.c) ------------------------------------------ */

/* The machines pc_io_trace_set / PINCER_TRACE may name. */
enum {
	PC__IO_TRACE_HTTP = 1u << 0,     /* a server connection (http_conn.c) */
	PC__IO_TRACE_WS = 1u << 1,       /* a server WebSocket (ws.c) */
	PC__IO_TRACE_WSCLIENT = 1u << 2, /* a client WebSocket (ws_client.c) */
	PC__IO_TRACE_H2STREAM = 1u << 3, /* an HTTP/2 stream (http2_server.c) */
	PC__IO_TRACE_H1CLIENT = 1u << 4, /* a load client's HTTP/1.1 connection (http1_client.c) */
};
/* Any thread. Whether `machine` (one bit) is traced. */
bool pc__io_traced(unsigned machine);
/* Any thread. Writes "trace <machine> <id> <from> -> <to> (<why>)" to the
 * registered sink, else to standard error. `why` may be NULL. */
void pc__io_trace(const char *machine, uint64_t id, const char *from, const char *to, const char *why);
/* The same for a machine within a connection: the id is <id>/<sub>. */
void pc__io_trace_sub(const char *machine, uint64_t id, uint64_t sub, const char *from, const char *to,
		      const char *why);
/* Any thread. A process-wide serial number naming a connection in traces. */
uint64_t pc__io_serial(void);

/* Per-loop state of the HTTP client (http_client.c): created on the loop's
 * thread before its first turn; torn down on that thread after the
 * shutdown hooks, which ends every transfer with an END message. */
struct pc__http_client_loop;
int pc__http_client_loop_init(pc_ioloop_t *loop, const pc_io_config_t *cfg,
			      struct pc__http_client_loop **out);
void pc__http_client_loop_fini(struct pc__http_client_loop *c);
struct pc__http_client_loop *pc__ioloop_client(pc_ioloop_t *loop);

#endif
