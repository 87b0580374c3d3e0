/*
 * An incremental Server-Sent Events parser, following the WHATWG HTML
 * "event stream interpretation" rules: bytes go in as they arrive, split
 * anywhere (inside a CRLF pair, inside a UTF-8 sequence), and complete
 * events come out through a callback, exactly as if the whole stream had
 * been fed at once.
 *
 * Text: the stream is UTF-8. A BOM at the very start is skipped once;
 * invalid UTF-8 in a value is replaced with U+FFFD the way the WHATWG
 * decoder does it, so every string handed out is valid UTF-8. Values may
 * still contain U+0000 (a 0x00 byte in the stream), so lengths are explicit;
 * each string is also NUL-terminated for convenience.
 *
 * Limits: one line (without its line end) and one event's data buffer are
 * bounded, so hostile input cannot grow memory without bound. Going over a
 * limit fails with PC_ELIMIT.
 *
 * Errors are sticky: after pc_sse_feed or pc_sse_finish returns nonzero
 * (PC_ELIMIT, PC_ENOMEM, or a callback's nonzero return), the parser is
 * stopped and every later feed or finish returns that same value until
 * pc_sse_reset.
 *
 * Threads: not thread-safe. A parser belongs to one stream and is used by
 * one thread (or one actor's handlers) at a time.
 */
#ifndef PINCER_IO_SSE_H
#define PINCER_IO_SSE_H

#include <stddef.h>
#include <stdint.h>

#include "../runtime/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pc_sse_parser pc_sse_parser_t;

/* Defaults when a limit is 0 (or no limits are given). */
#define PC_SSE_DEFAULT_MAX_LINE ((size_t)1 << 20) /* 1 MiB */
#define PC_SSE_DEFAULT_MAX_DATA ((size_t)8 << 20) /* 8 MiB */

typedef struct pc_sse_limits {
	size_t max_line; /* bytes in one line, line end excluded */
	size_t max_data; /* bytes in one event's data buffer, counting the LF
			  * after each data line (so delivered data is at most
			  * max_data - 1 bytes) */
} pc_sse_limits_t;

/* What a callback is told about. */
enum {
	PC_SSE_MESSAGE = 0, /* an event was dispatched: type, data, id */
	PC_SSE_RETRY = 1,   /* a valid `retry` field: retry_ms; type and data
			     * are empty, id is the last event id */
};

/* Valid only during the callback: copy what you keep. type/data/id are
 * never NULL. */
typedef struct pc_sse_event {
	int kind;          /* PC_SSE_MESSAGE or PC_SSE_RETRY */
	const char *type;  /* "message" when the stream named no type */
	size_t type_len;
	const char *data;  /* data lines joined with LF, no trailing LF */
	size_t data_len;
	const char *id;    /* the last event id ("" if none) */
	size_t id_len;
	uint64_t retry_ms; /* PC_SSE_RETRY: the reconnection time (saturates) */
} pc_sse_event_t;

/* Called on the feeding thread, from inside pc_sse_feed. Return 0 to go
 * on; anything else stops the parser and is returned from pc_sse_feed
 * (and stays: see "Errors are sticky"). The callback must not feed, reset
 * or free the parser that called it. */
typedef int (*pc_sse_event_fn)(void *user, const pc_sse_event_t *ev);

/* Creates a parser at the start of a stream. `limits` may be NULL (the
 * defaults); a zero field means its default. PC_EINVAL for a NULL `fn` or
 * `out` or an absurd limit (over SIZE_MAX / 8). The caller owns the parser. */
int pc_sse_parser_new(const pc_sse_limits_t *limits, pc_sse_event_fn fn, void *user,
		      pc_sse_parser_t **out);

/* Parses the next `len` bytes of the stream (the parser copies what it
 * needs to keep; `buf` may be reused as soon as this returns). Returns 0,
 * the sticky error, PC_EINVAL for bad arguments (not sticky), or PC_ESTATE
 * after pc_sse_finish or from inside a callback. */
int pc_sse_feed(pc_sse_parser_t *p, const void *buf, size_t len);

/* Ends the stream. A trailing line without a line end and an event
 * without its terminating blank line are discarded, as the spec says.
 * Returns 0 or the sticky error. Afterwards feeds fail with PC_ESTATE
 * until pc_sse_reset; pc_sse_last_event_id still answers. */
int pc_sse_finish(pc_sse_parser_t *p);

/* Returns the parser to the start of a new stream: buffers, last event
 * id, error and finished state are cleared; limits and callback are kept.
 * A reconnecting client reads pc_sse_last_event_id first (for the
 * Last-Event-ID header). */
void pc_sse_reset(pc_sse_parser_t *p);

/* The event source's "last event ID string": the id buffer as of the last
 * blank line, whether or not that line dispatched an event. Never NULL;
 * valid until the next feed, reset or free. `len` may be NULL. */
const char *pc_sse_last_event_id(const pc_sse_parser_t *p, size_t *len);

/* Frees the parser and everything it holds. NULL is a no-op. */
void pc_sse_parser_free(pc_sse_parser_t *p);

#ifdef __cplusplus
}
#endif
#endif
