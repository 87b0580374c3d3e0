/*
 * Structured logging (log.h).
 *
 * A line is built in a buffer that never grows past max_line plus a few
 * bytes: every string is escaped against the room left, so a hostile
 * 100 MB message costs max_line bytes of work, not 100 MB. A line that
 * does not fit is built a second time, now keeping room for the cut
 * ending (",\"truncated\":true}\n") after the message; meanwhile the
 * builder remembers the last field boundary where that ending still fits,
 * and the line goes back to it, so a cut line is still whole JSON (or
 * logfmt).
 */
#include "log.h"

#include <errno.h>
#include <locale.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "io/io.h"
#include "runtime/clock.h"

struct pc_log {
	pthread_mutex_t lock; /* held for the write only */
	int fd;
	uint32_t level; /* pc_log_level_t (atomic) */
	pc_log_format_t format;
	bool drop;
	size_t max_line;
	pc_log_clock_fn clock;
	void *clock_arg;
	uint64_t dropped; /* atomic */
	locale_t c_locale; /* number formatting whatever the process locale */
};

static const char *const level_names[] = {"debug", "info", "warn", "error"};

const char *pc_log_level_name(pc_log_level_t level)
{
	return (unsigned)level <= PC_LOG_ERROR ? level_names[level] : "unknown";
}

int pc_log_level_from_name(const char *name, pc_log_level_t *out)
{
	if (!name || !out)
		return PC_EINVAL;
	for (unsigned i = 0; i <= PC_LOG_ERROR; i++) {
		if (strcasecmp(name, level_names[i]) == 0) {
			*out = (pc_log_level_t)i;
			return 0;
		}
	}
	if (strcasecmp(name, "warning") == 0) {
		*out = PC_LOG_WARN;
		return 0;
	}
	return PC_ENOTFOUND;
}

int pc_log_format_from_name(const char *name, pc_log_format_t *out)
{
	if (!name || !out)
		return PC_EINVAL;
	if (strcasecmp(name, "json") == 0)
		*out = PC_LOG_FORMAT_JSON;
	else if (strcasecmp(name, "text") == 0)
		*out = PC_LOG_FORMAT_TEXT;
	else
		return PC_ENOTFOUND;
	return 0;
}

/* ---- lifetime ------------------------------------------------------------------ */

void pc_log_config_init(pc_log_config_t *cfg)
{
	*cfg = (pc_log_config_t){.fd = 2, .level = PC_LOG_INFO, .format = PC_LOG_FORMAT_JSON};
}

static int64_t realtime_ms(void *arg)
{
	(void)arg;
	return pc__clock_wall_ms();
}

/* The descriptor cfg names, or -1. */
static int config_fd(const pc_log_config_t *cfg)
{
	if (!cfg->file)
		return cfg->fd;
	if (fflush(cfg->file) != 0)
		return -1;
	return fileno(cfg->file);
}

int pc_log_new(const pc_log_config_t *cfg, pc_log_t **out)
{
	pc_log_config_t def;
	if (!cfg) {
		pc_log_config_init(&def);
		cfg = &def;
	}
	if (!out || (unsigned)cfg->level > PC_LOG_ERROR || (unsigned)cfg->format > PC_LOG_FORMAT_TEXT ||
	    (cfg->max_line && cfg->max_line < PC_LOG_LINE_MIN))
		return PC_EINVAL;
	int fd = config_fd(cfg);
	if (fd < 0)
		return PC_EINVAL;
	pc_log_t *lg = calloc(1, sizeof(*lg));
	if (!lg)
		return PC_ENOMEM;
	*lg = (pc_log_t){
		.fd = fd,
		.level = cfg->level,
		.format = cfg->format,
		.drop = cfg->drop_when_full,
		.max_line = cfg->max_line ? cfg->max_line : PC_LOG_LINE_DEFAULT,
		.clock = cfg->clock ? cfg->clock : realtime_ms,
		.clock_arg = cfg->clock_arg,
		.c_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0),
	};
	if (!lg->c_locale || pthread_mutex_init(&lg->lock, NULL) != 0) {
		if (lg->c_locale)
			freelocale(lg->c_locale);
		free(lg);
		return PC_ESYS;
	}
	*out = lg;
	return 0;
}

void pc_log_free(pc_log_t *lg)
{
	if (!lg)
		return;
	pthread_mutex_destroy(&lg->lock);
	freelocale(lg->c_locale);
	free(lg);
}

bool pc_log_enabled(const pc_log_t *lg, pc_log_level_t level)
{
	return lg && (unsigned)level <= PC_LOG_ERROR && (uint32_t)level >= __atomic_load_n(&lg->level, __ATOMIC_RELAXED);
}

int pc_log_set_level(pc_log_t *lg, pc_log_level_t level)
{
	if (!lg || (unsigned)level > PC_LOG_ERROR)
		return PC_EINVAL;
	__atomic_store_n(&lg->level, (uint32_t)level, __ATOMIC_RELAXED);
	return 0;
}

uint64_t pc_log_dropped(const pc_log_t *lg)
{
	return lg ? __atomic_load_n(&lg->dropped, __ATOMIC_RELAXED) : 0;
}

/* ---- escaping ------------------------------------------------------------------ */

/* The length of the valid UTF-8 sequence at s, or minus the length of its
 * maximal invalid prefix (at least 1). s is NUL-terminated: a NUL is never
 * a continuation byte, so the scan stops there. */
static int utf8_seq(const unsigned char *s)
{
	unsigned c = s[0], len, lo = 0x80, hi = 0xBF;
	if (c < 0x80)
		return 1;
	if (c >= 0xC2 && c <= 0xDF) {
		len = 2;
	} else if (c >= 0xE0 && c <= 0xEF) {
		len = 3;
		lo = c == 0xE0 ? 0xA0 : 0x80;
		hi = c == 0xED ? 0x9F : 0xBF;
	} else if (c >= 0xF0 && c <= 0xF4) {
		len = 4;
		lo = c == 0xF0 ? 0x90 : 0x80;
		hi = c == 0xF4 ? 0x8F : 0xBF;
	} else {
		return -1;
	}
	for (unsigned i = 1; i < len; i++) {
		if (s[i] < lo || s[i] > hi)
			return -(int)i;
		lo = 0x80;
		hi = 0xBF;
	}
	return (int)len;
}

/* The escaped form of the character at s into u; returns how many bytes
 * of s it stands for. */
static size_t escape_unit(const unsigned char *s, char u[8], size_t *ulen)
{
	static const char named[] = {['"'] = '"', ['\\'] = '\\', ['\n'] = 'n', ['\r'] = 'r',
				     ['\t'] = 't', ['\b'] = 'b', ['\f'] = 'f'};
	unsigned c = s[0];
	if (c < sizeof(named) && named[c]) {
		u[0] = '\\';
		u[1] = named[c];
		*ulen = 2;
		return 1;
	}
	if (c < 0x20 || c == 0x7F) {
		*ulen = (size_t)snprintf(u, 8, "\\u%04x", c);
		return 1;
	}
	int k = utf8_seq(s);
	if (k < 0) {
		memcpy(u, "\xEF\xBF\xBD", 3); /* U+FFFD */
		*ulen = 3;
		return (size_t)-k;
	}
	memcpy(u, s, (size_t)k);
	*ulen = (size_t)k;
	return (size_t)k;
}

/* Appends s escaped, whole characters only, at most `room` bytes; false
 * when it had to stop short. */
static bool put_escaped(pc__buf_t *b, const char *str, size_t room)
{
	const unsigned char *s = (const unsigned char *)str;
	size_t used = 0;
	while (*s) {
		char u[8];
		size_t ulen, adv = escape_unit(s, u, &ulen);
		if (used + ulen > room)
			return false;
		pc__buf_append(b, u, ulen);
		used += ulen;
		s += adv;
	}
	return true;
}

/* Whether a text-mode value needs quotes; a value longer than `room`
 * will be cut anyway, so the scan stops there. */
static bool needs_quotes(const char *s, size_t room)
{
	if (!*s)
		return true;
	for (size_t i = 0; s[i] && i <= room; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c <= ' ' || c == '=' || c == '"' || c == '\\' || c == 0x7F)
			return true;
	}
	return false;
}

/* ---- building a line ---------------------------------------------------------------- */

/* What a line says. */
typedef struct line_in {
	int64_t ms;
	pc_log_level_t level;
	const char *msg;
	const pc_log_field_t *fields;
	size_t n;
} line_in_t;

typedef struct line {
	pc__buf_t b;
	const pc_log_t *lg;
	bool json;
	size_t close; /* bytes of the normal ending */
	size_t cut;   /* bytes of the cut ending */
	size_t safe;  /* the last length where the cut ending fits */
} line_t;

static const char json_close[] = "}\n", json_cut[] = ",\"truncated\":true}\n";
static const char text_close[] = "\n", text_cut[] = " truncated=true\n";

/* Bytes left for content when `reserve` more must still fit. */
static size_t room(const line_t *l, size_t reserve)
{
	size_t used = l->b.len + reserve;
	return used >= l->lg->max_line ? 0 : l->lg->max_line - used;
}

/* A string value (quoted in JSON, quoted when needed in text), escaped
 * against `reserve`. False when cut. */
static bool put_string(line_t *l, const char *s, size_t reserve)
{
	if (!s) {
		pc__buf_append_str(&l->b, l->json ? "null" : "\"\"");
		return true;
	}
	size_t r = room(l, reserve + 2);
	bool quote = l->json || needs_quotes(s, r);
	if (quote)
		pc__buf_append_str(&l->b, "\"");
	bool whole = put_escaped(&l->b, s, r);
	if (quote)
		pc__buf_append_str(&l->b, "\"");
	return whole;
}

/* The shortest of %.15g, %.16g, %.17g that reads back as v. */
static void put_double(line_t *l, double v)
{
	char s[40];
	if (!isfinite(v)) {
		pc__buf_append_str(&l->b, l->json ? "null" : isnan(v) ? "NaN" : v > 0 ? "+Inf" : "-Inf");
		return;
	}
	locale_t old = uselocale(l->lg->c_locale);
	for (int prec = 15; prec <= 17; prec++) {
		snprintf(s, sizeof(s), "%.*g", prec, v);
		if (strtod(s, NULL) == v)
			break;
	}
	uselocale(old);
	pc__buf_append_str(&l->b, s);
}

/* A text-mode key: characters outside [A-Za-z0-9_.-] as '_'. */
static bool put_text_key(line_t *l, const char *key)
{
	size_t r = room(l, l->close + 1), n = 0;
	if (!*key)
		key = "_";
	for (; key[n]; n++) {
		char c = key[n];
		bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
			  c == '.' || c == '-';
		if (n == r)
			return false;
		pc__buf_append(&l->b, ok ? &c : "_", 1);
	}
	return true;
}

/* Appends ",\"key\":value" or " key=value". False when it did not fit. */
static bool put_field(line_t *l, const pc_log_field_t *f)
{
	bool whole;
	if (l->json) {
		pc__buf_append_str(&l->b, ",\"");
		whole = put_escaped(&l->b, f->key, room(l, l->close + 2));
		pc__buf_append_str(&l->b, "\":");
	} else {
		pc__buf_append_str(&l->b, " ");
		whole = put_text_key(l, f->key);
		pc__buf_append_str(&l->b, "=");
	}
	char num[24];
	switch (f->type) {
	case PC_LF__STR:
		whole = whole && put_string(l, f->v.s, l->close);
		break;
	case PC_LF__INT:
		snprintf(num, sizeof(num), "%lld", (long long)f->v.i);
		pc__buf_append_str(&l->b, num);
		break;
	case PC_LF__DOUBLE:
		put_double(l, f->v.d);
		break;
	default:
		pc__buf_append_str(&l->b, f->v.b ? "true" : "false");
		break;
	}
	return whole && l->b.len + l->close <= l->lg->max_line;
}

static void put_ts(pc__buf_t *b, int64_t ms)
{
	int64_t sec = ms / 1000, rem = ms % 1000;
	if (rem < 0) {
		rem += 1000;
		sec--;
	}
	time_t t = (time_t)sec;
	struct tm tm;
	char s[64];
	if (!gmtime_r(&t, &tm))
		tm = (struct tm){.tm_year = 70, .tm_mday = 1};
	snprintf(s, sizeof(s), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
		 tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)rem);
	pc__buf_append_str(b, s);
}

/* ts, level and msg, which leaves `reserve` bytes free; false when the
 * message was cut. */
static bool put_head(line_t *l, const line_in_t *in, size_t reserve)
{
	pc__buf_append_str(&l->b, l->json ? "{\"ts\":\"" : "ts=");
	put_ts(&l->b, in->ms);
	pc__buf_append_str(&l->b, l->json ? "\",\"level\":\"" : " level=");
	pc__buf_append_str(&l->b, level_names[in->level]);
	pc__buf_append_str(&l->b, l->json ? "\",\"msg\":" : " msg=");
	return put_string(l, in->msg ? in->msg : "", reserve);
}

static bool fields_valid(const pc_log_field_t *fields, size_t n)
{
	for (size_t i = 0; i < n && fields[i].type != PC_LF__END; i++)
		if (!fields[i].key || fields[i].type > PC_LF__BOOL)
			return false;
	return true;
}

/* The head and the fields; false at the first thing that did not fit.
 * The message leaves `msg_reserve` bytes free. */
static bool put_all(line_t *l, const line_in_t *in, size_t msg_reserve)
{
	l->b.len = 0;
	bool whole = put_head(l, in, msg_reserve);
	l->safe = l->b.len;
	for (size_t i = 0; whole && i < in->n && in->fields[i].type != PC_LF__END; i++) {
		whole = put_field(l, &in->fields[i]);
		if (whole && l->b.len + l->cut <= l->lg->max_line)
			l->safe = l->b.len;
	}
	return whole;
}

/* Builds the line, newline included, into l->b: whole when it fits, else
 * again with room kept for the cut ending after the message, back to the
 * last field boundary where that ending fits. Both passes are bounded by
 * max_line. */
static int build(line_t *l, const line_in_t *in)
{
	bool whole = put_all(l, in, l->close);
	if (!whole) {
		put_all(l, in, l->cut);
		if (l->b.err == 0) {
			l->b.len = l->safe;
			l->b.p[l->b.len] = '\0';
		}
	}
	pc__buf_append_str(&l->b, whole ? (l->json ? json_close : text_close) : (l->json ? json_cut : text_cut));
	return l->b.err;
}

/* ---- writing ------------------------------------------------------------------ */

static int wait_writable(int fd, int timeout_ms)
{
	struct pollfd p = {.fd = fd, .events = POLLOUT};
	int r;
	while ((r = poll(&p, 1, timeout_ms)) < 0 && errno == EINTR)
		;
	return r;
}

/* Writes all n bytes; in drop mode gives up with PC_EBUSY while nothing is
 * written yet, and completes a line once it is begun. */
static int write_line(const pc_log_t *lg, const char *p, size_t n)
{
	if (lg->drop && wait_writable(lg->fd, 0) == 0)
		return PC_EBUSY;
	size_t done = 0;
	while (done < n) {
		ssize_t w = write(lg->fd, p + done, n - done);
		if (w > 0) {
			done += (size_t)w;
		} else if (w < 0 && errno == EINTR) {
			continue;
		} else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			if (lg->drop && done == 0)
				return PC_EBUSY;
			if (wait_writable(lg->fd, -1) < 0)
				return PC_ESYS;
		} else {
			return PC_ESYS;
		}
	}
	return 0;
}

int pc_log_fields(pc_log_t *lg, pc_log_level_t level, const char *msg, const pc_log_field_t *fields, size_t n)
{
	if (!lg || (unsigned)level > PC_LOG_ERROR || (n && !fields) || !fields_valid(fields, n))
		return PC_EINVAL;
	if (!pc_log_enabled(lg, level))
		return 0;
	bool json = lg->format == PC_LOG_FORMAT_JSON;
	line_t l = {
		.lg = lg,
		.json = json,
		.close = json ? sizeof(json_close) - 1 : sizeof(text_close) - 1,
		.cut = json ? sizeof(json_cut) - 1 : sizeof(text_cut) - 1,
	};
	line_in_t in = {lg->clock(lg->clock_arg), level, msg, fields, n};
	int rc = build(&l, &in);
	if (rc == 0) {
		pthread_mutex_lock(&lg->lock);
		rc = write_line(lg, l.b.p, l.b.len);
		pthread_mutex_unlock(&lg->lock);
	}
	if (rc == PC_EBUSY || rc == PC_ESYS)
		__atomic_fetch_add(&lg->dropped, 1, __ATOMIC_RELAXED);
	pc__buf_free(&l.b);
	return rc;
}
