/*
 * Structured logging: one line per event, as JSON or as key=value text,
 * with a minimum level and typed fields.
 *
 *   pc_log_kv(lg, PC_LOG_INFO, "run started",
 *             PC_LF_STR("run_id", id), PC_LF_INT("attempt", 2));
 *
 * JSON (the default), one object per line, keys in this order:
 *   {"ts":"2026-11-30T09:00:00.123Z","level":"info","msg":"run started","run_id":"r1","attempt":2}
 * Text (--log-format text), logfmt style; a value is quoted when it is
 * empty or holds a space, '=', '"' or a character that is escaped:
 *   ts=2026-11-30T09:00:00.123Z level=info msg="run started" run_id=r1 attempt=2
 *
 * Escaping. ^Every string (message, keys, values) is written as JSON
 * escapes it: '"' and '\' with a backslash, \n \r \t \b \f by name, other
 * bytes below 0x20 and 0x7F as \u00XX. ^Bytes that are not valid UTF-8
 * become U+FFFD (one per maximal invalid sequence), so every line is
 * valid UTF-8 and, in JSON mode, valid JSON. Text mode escapes the same
 * way inside its quotes and writes characters other than [A-Za-z0-9_.-]
 * in a key as '_'. ^A double that is not finite is written null (JSON) or
 * NaN/+Inf/-Inf (text); a NULL string is null (JSON) or an empty value.
 *
 * Length. ^A line is at most max_line bytes. ^One that would be longer is
 * cut: it keeps its leading fields up to the first that does not fit
 * (with room for the ending), its message shortened at a character
 * boundary when the message alone is too long, and ends with
 * "truncated":true (JSON) or truncated=true (text). It stays whole JSON
 * (or logfmt). ^Building a line reads at most about max_line bytes of
 * each string, so a huge string costs no more than a short one.
 *
 * Writing. ^A line is built in memory, then written with one write(2)
 * under the logger's lock, so lines of one logger never interleave; lines
 * of at most PIPE_BUF bytes (4096 on Linux, max_line's default) are also
 * atomic against other processes writing to the same pipe. The lock is
 * held only for the write, so the cost to a caller is that write:
 *   - blocking mode (the default): a full pipe, or a slow terminal, blocks
 *     the caller until the reader makes room;
 *   - drop mode (`drop_when_full`): the logger polls the descriptor with a
 *     zero timeout first and drops the line when it is not writable (or
 *     when the write says EAGAIN), counting it in pc_log_dropped. A pipe
 *     is writable when it has room for PIPE_BUF bytes, so a line that fits
 *     max_line's default never waits. The descriptor's flags are not
 *     changed. A write that the kernel accepts only in part (a line over
 *     PIPE_BUF, a socket) is completed, waiting if need be, so that the
 *     stream never holds half a line.
 * A write to a pipe whose reader has gone raises SIGPIPE like any write;
 * a program that logs to a pipe ignores SIGPIPE, and then the line fails
 * with PC_ESYS.
 *
 * Threads: pc_log_fields (pc_log_kv), pc_log_enabled, pc_log_set_level and
 * pc_log_dropped may be called from any thread at once; pc_log_free when
 * no other call is in flight.
 */
#ifndef PINCER_AGENTS_OBS_LOG_H
#define PINCER_AGENTS_OBS_LOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "runtime/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pc_log pc_log_t;

typedef enum pc_log_level {
	PC_LOG_DEBUG = 0,
	PC_LOG_INFO,
	PC_LOG_WARN,
	PC_LOG_ERROR,
} pc_log_level_t;

typedef enum pc_log_format {
	PC_LOG_FORMAT_JSON = 0,
	PC_LOG_FORMAT_TEXT,
} pc_log_format_t;

/* The wall clock in milliseconds since the Unix epoch. */
typedef int64_t (*pc_log_clock_fn)(void *arg);

#define PC_LOG_LINE_MIN 256u
#define PC_LOG_LINE_DEFAULT 4096u

typedef struct pc_log_config {
	int fd;                  /* where lines go; default 2 (standard error) */
	FILE *file;              /* when not NULL: its descriptor instead of fd
	                          * (flushed once at pc_log_new; the stream's
	                          * buffer is not used after) */
	pc_log_level_t level;    /* lines below it are skipped; default info */
	pc_log_format_t format;  /* default JSON */
	bool drop_when_full;     /* drop mode (see Writing) */
	size_t max_line;         /* bytes, newline included; 0: PC_LOG_LINE_DEFAULT;
	                          * at least PC_LOG_LINE_MIN */
	pc_log_clock_fn clock;   /* NULL: CLOCK_REALTIME */
	void *clock_arg;
} pc_log_config_t;

/* A field: build it with the PC_LF_ macros. Strings are borrowed for the
 * call only. */
typedef enum pc_log_field_type {
	PC_LF__END = 0,
	PC_LF__STR,
	PC_LF__INT,
	PC_LF__DOUBLE,
	PC_LF__BOOL,
} pc_log_field_type_t;

typedef struct pc_log_field {
	const char *key;
	pc_log_field_type_t type;
	union {
		const char *s;
		int64_t i;
		double d;
		bool b;
	} v;
} pc_log_field_t;

#define PC_LF_STR(k, val) ((pc_log_field_t){.key = (k), .type = PC_LF__STR, .v.s = (val)})
#define PC_LF_INT(k, val) ((pc_log_field_t){.key = (k), .type = PC_LF__INT, .v.i = (val)})
#define PC_LF_DOUBLE(k, val) ((pc_log_field_t){.key = (k), .type = PC_LF__DOUBLE, .v.d = (val)})
#define PC_LF_BOOL(k, val) ((pc_log_field_t){.key = (k), .type = PC_LF__BOOL, .v.b = (val)})
/* Ends a field list (pc_log_kv appends one itself). */
#define PC_LF_END ((pc_log_field_t){.type = PC_LF__END})

/* Logs `msg` with the PC_LF_ fields that follow it, if any:
 *   pc_log_kv(lg, PC_LOG_WARN, "slow tool", PC_LF_STR("tool", name));
 * Anything but a field after the message fails to compile. Returns what
 * pc_log_fields returns. */
#define pc_log_kv(lg, level, ...) PC__LOG_KV((lg), (level), __VA_ARGS__, PC_LF_END)
#define PC__LOG_KV(lg, level, msg, ...)                                                            \
	pc_log_fields((lg), (level), (msg), (const pc_log_field_t[]){__VA_ARGS__},                 \
		      sizeof((const pc_log_field_t[]){__VA_ARGS__}) / sizeof(pc_log_field_t) - 1)

/* Fills the defaults above. */
void pc_log_config_init(pc_log_config_t *cfg);

/* A logger (cfg NULL: defaults). The descriptor stays the caller's: it is
 * not closed by pc_log_free. Caller frees with pc_log_free. PC_EINVAL (a
 * bad level, format or max_line, a negative fd, a FILE without one),
 * PC_ENOMEM, PC_ESYS. */
int pc_log_new(const pc_log_config_t *cfg, pc_log_t **out);
/* NULL is ignored. */
void pc_log_free(pc_log_t *lg);

/* Writes one line: `msg` and the first n fields (a PC_LF_END among them
 * ends the list early). 0 when written or below the level; PC_EBUSY when
 * dropped (drop mode); PC_ESYS when the write failed (the line counts as
 * dropped); PC_EINVAL (lg NULL, a bad level, a field without a key or of
 * an unknown type); PC_ENOMEM. msg NULL is an empty message. */
int pc_log_fields(pc_log_t *lg, pc_log_level_t level, const char *msg, const pc_log_field_t *fields, size_t n);

/* Whether a line at `level` would be written (to skip costly fields). */
bool pc_log_enabled(const pc_log_t *lg, pc_log_level_t level);
/* Changes the minimum level. PC_EINVAL. */
int pc_log_set_level(pc_log_t *lg, pc_log_level_t level);
/* Lines dropped or failed since pc_log_new. */
uint64_t pc_log_dropped(const pc_log_t *lg);

/* "debug", "info", "warn", "error"; "unknown" out of range. Static. */
const char *pc_log_level_name(pc_log_level_t level);
/* The level of a name above ("warning" too). PC_EINVAL, PC_ENOTFOUND. */
int pc_log_level_from_name(const char *name, pc_log_level_t *out);
/* "json" or "text". PC_EINVAL, PC_ENOTFOUND. */
int pc_log_format_from_name(const char *name, pc_log_format_t *out);

#ifdef __cplusplus
}
#endif
#endif
