/*
 * Structured logging (agents/obs/log.h): the exact JSON and text lines
 * with an injected clock, escaping (control characters, quotes,
 * backslashes, invalid UTF-8, random bytes), level filtering, line
 * length limits, the C locale for numbers, FILE output, write errors,
 * many threads writing into one pipe (every line parses, none
 * interleave), drop mode against a full pipe, and blocking mode waiting
 * for its reader.
 */
#include <criterion/criterion.h>

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <locale.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "agents/obs/log.h"
#include "comma_locale.h"

/* ---- helpers ----------------------------------------------------------------------- */

#define FIXED_MS 1796029200123ll /* 2026-11-30T09:00:00.123Z */
#define TS "2026-11-30T09:00:00.123Z"

static int64_t fixed_clock(void *arg)
{
	return arg ? *(const int64_t *)arg : FIXED_MS;
}

typedef struct sink {
	int rd, wr; /* a pipe; the logger writes into wr */
	pc_log_t *lg;
} sink_t;

static void make_pipe(int fds[2], int pipe_size)
{
	cr_assert_eq(pipe(fds), 0);
	if (pipe_size)
		cr_assert_geq(fcntl(fds[1], F_SETPIPE_SZ, pipe_size), pipe_size);
}

static sink_t open_sink(pc_log_config_t cfg)
{
	int fds[2];
	make_pipe(fds, 0);
	cr_assert_eq(fcntl(fds[0], F_SETFL, O_NONBLOCK), 0);
	sink_t s = {.rd = fds[0], .wr = fds[1]};
	cfg.fd = s.wr;
	if (!cfg.clock)
		cfg.clock = fixed_clock;
	cr_assert_eq(pc_log_new(&cfg, &s.lg), 0);
	return s;
}

static pc_log_config_t config(pc_log_format_t format, pc_log_level_t level)
{
	pc_log_config_t cfg;
	pc_log_config_init(&cfg);
	cfg.format = format;
	cfg.level = level;
	return cfg;
}

/* Everything written so far (the read end is non-blocking). Caller frees. */
static char *drain(int fd)
{
	size_t cap = 1 << 16, len = 0;
	char *buf = malloc(cap);
	cr_assert_not_null(buf);
	for (;;) {
		if (len + 4096 > cap) {
			cap *= 2;
			buf = realloc(buf, cap);
			cr_assert_not_null(buf);
		}
		ssize_t n = read(fd, buf + len, cap - len - 1);
		if (n <= 0) {
			cr_assert(n == 0 || errno == EAGAIN, "read: %s", strerror(errno));
			break;
		}
		len += (size_t)n;
	}
	buf[len] = '\0';
	return buf;
}

static void close_sink(sink_t *s)
{
	pc_log_free(s->lg);
	close(s->rd);
	close(s->wr);
}

static void expect_out(sink_t *s, const char *want)
{
	char *got = drain(s->rd);
	cr_expect_str_eq(got, want, "\ngot:  %s\nwant: %s", got, want);
	free(got);
}

/* Whether s is valid UTF-8 without control characters but '\n' at the end. */
static bool clean_utf8_line(const char *str)
{
	const unsigned char *s = (const unsigned char *)str;
	while (*s) {
		unsigned c = *s;
		if (c == '\n')
			return s[1] == '\0';
		if (c < 0x20 || c == 0x7F)
			return false;
		int len = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
		if (!len)
			return false;
		for (int i = 1; i < len; i++)
			if ((s[i] & 0xC0) != 0x80)
				return false;
		if ((c == 0xE0 && s[1] < 0xA0) || (c == 0xED && s[1] > 0x9F) || (c == 0xF0 && s[1] < 0x90) ||
		    (c == 0xF4 && s[1] > 0x8F))
			return false;
		s += len;
	}
	return false; /* no newline */
}

/* The one JSON line in `text`, parsed. Caller deletes. */
static cJSON *parse_line(const char *text)
{
	cr_assert(clean_utf8_line(text), "not one clean UTF-8 line: [%s]", text);
	cJSON *j = cJSON_Parse(text);
	cr_assert_not_null(j, "not JSON: [%s]", text);
	return j;
}

/* ---- exact output --------------------------------------------------------------------- */

Test(log_format, json_exact)
{
	sink_t s = open_sink(config(PC_LOG_FORMAT_JSON, PC_LOG_INFO));
	cr_assert_eq(pc_log_kv(s.lg, PC_LOG_INFO, "run started", PC_LF_STR("run_id", "r-1"),
			       PC_LF_STR("session_key", "agent:main:main"), PC_LF_INT("n", 3), PC_LF_INT("neg", -42),
			       PC_LF_DOUBLE("ratio", 0.25), PC_LF_BOOL("ok", true), PC_LF_BOOL("retry", false)),
		     0);
	expect_out(&s, "{\"ts\":\"" TS "\",\"level\":\"info\",\"msg\":\"run started\",\"run_id\":\"r-1\","
		       "\"session_key\":\"agent:main:main\",\"n\":3,\"neg\":-42,\"ratio\":0.25,\"ok\":true,"
		       "\"retry\":false}\n");
	cr_assert_eq(pc_log_kv(s.lg, PC_LOG_ERROR, "boom"), 0);
	expect_out(&s, "{\"ts\":\"" TS "\",\"level\":\"error\",\"msg\":\"boom\"}\n");
	cr_assert_eq(pc_log_kv(s.lg, PC_LOG_WARN, NULL, PC_LF_INT("max", INT64_MAX), PC_LF_INT("min", INT64_MIN),
			       PC_LF_DOUBLE("third", 1.0 / 3.0), PC_LF_DOUBLE("big", 1e300)),
		     0);
	expect_out(&s, "{\"ts\":\"" TS "\",\"level\":\"warn\",\"msg\":\"\",\"max\":9223372036854775807,"
		       "\"min\":-9223372036854775808,\"third\":0.3333333333333333,\"big\":1e+300}\n");
	/* the array form, with an early end */
	const pc_log_field_t f[] = {PC_LF_STR("a", "1"), PC_LF_END, PC_LF_STR("b", "2")};
	cr_assert_eq(pc_log_fields(s.lg, PC_LOG_INFO, "arr", f, 3), 0);
	expect_out(&s, "{\"ts\":\"" TS "\",\"level\":\"info\",\"msg\":\"arr\",\"a\":\"1\"}\n");
	close_sink(&s);
}

Test(log_format, text_exact)
{
	sink_t s = open_sink(config(PC_LOG_FORMAT_TEXT, PC_LOG_DEBUG));
	cr_assert_eq(pc_log_kv(s.lg, PC_LOG_DEBUG, "run started", PC_LF_STR("run_id", "r-1"),
			       PC_LF_STR("session_key", "agent:main"), PC_LF_INT("n", 3), PC_LF_DOUBLE("ratio", 0.25),
			       PC_LF_BOOL("ok", true), PC_LF_STR("empty", ""), PC_LF_STR("none", NULL),
			       PC_LF_STR("sp", "a b"), PC_LF_STR("eq", "a=b"), PC_LF_STR("q", "say \"hi\"\n"),
			       PC_LF_STR("bad key!", "v"), PC_LF_STR("", "k"), PC_LF_DOUBLE("nan", NAN),
			       PC_LF_DOUBLE("inf", -INFINITY)),
		     0);
	expect_out(&s, "ts=" TS " level=debug msg=\"run started\" run_id=r-1 session_key=agent:main n=3 ratio=0.25 "
		       "ok=true empty=\"\" none=\"\" sp=\"a b\" eq=\"a=b\" q=\"say \\\"hi\\\"\\n\" bad_key_=v _=k "
		       "nan=NaN inf=-Inf\n");
	cr_assert_eq(pc_log_kv(s.lg, PC_LOG_INFO, "plain"), 0);
	expect_out(&s, "ts=" TS " level=info msg=plain\n");
	close_sink(&s);
}

Test(log_format, timestamps)
{
	static const struct {
		int64_t ms;
		const char *ts;
	} cases[] = {
		{0, "1970-01-01T00:00:00.000Z"},
		{FIXED_MS, TS},
		{951782400999, "2000-02-29T00:00:00.999Z"},
		{-1, "1969-12-31T23:59:59.999Z"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		pc_log_config_t cfg = config(PC_LOG_FORMAT_TEXT, PC_LOG_INFO);
		cfg.clock = fixed_clock;
		cfg.clock_arg = (void *)&cases[i].ms;
		sink_t s = open_sink(cfg);
		pc_log_kv(s.lg, PC_LOG_INFO, "t");
		char want[80];
		snprintf(want, sizeof(want), "ts=%s level=info msg=t\n", cases[i].ts);
		expect_out(&s, want);
		close_sink(&s);
	}
	/* the default clock: now, in UTC */
	pc_log_config_t cfg = config(PC_LOG_FORMAT_JSON, PC_LOG_INFO);
	int fds[2];
	make_pipe(fds, 0);
	cr_assert_eq(fcntl(fds[0], F_SETFL, O_NONBLOCK), 0);
	cfg.fd = fds[1];
	pc_log_t *lg = NULL;
	cr_assert_eq(pc_log_new(&cfg, &lg), 0);
	time_t before = time(NULL);
	pc_log_kv(lg, PC_LOG_INFO, "now");
	char *out = drain(fds[0]);
	cJSON *j = parse_line(out);
	const char *ts = cJSON_GetStringValue(cJSON_GetObjectItem(j, "ts"));
	cr_assert_not_null(ts);
	struct tm tm = {0};
	const char *rest = strptime(ts, "%Y-%m-%dT%H:%M:%S", &tm);
	cr_assert_not_null(rest, "ts %s", ts);
	cr_expect_eq(strlen(rest), 5, "ts %s: .mmmZ", ts);
	time_t t = timegm(&tm);
	cr_expect(t >= before - 1 && t <= before + 2, "ts %s is not now", ts);
	cJSON_Delete(j);
	free(out);
	pc_log_free(lg);
	close(fds[0]);
	close(fds[1]);
}

/* ---- escaping ------------------------------------------------------------------------ */

Test(log_escape, control_quotes_backslash_and_bad_utf8)
{
	sink_t s = open_sink(config(PC_LOG_FORMAT_JSON, PC_LOG_INFO));
	pc_log_kv(s.lg, PC_LOG_INFO, "\x01\x1f\x7f\"\\\n\r\t\b\f/", PC_LF_STR("k\"ey\n", "v\\"));
	expect_out(&s, "{\"ts\":\"" TS "\",\"level\":\"info\",\"msg\":\"\\u0001\\u001f\\u007f\\\"\\\\\\n\\r\\t\\b\\f/\","
		       "\"k\\\"ey\\n\":\"v\\\\\"}\n");
	/* one U+FFFD per maximal invalid sequence; valid sequences kept */
	pc_log_kv(s.lg, PC_LOG_INFO, "a\xff" "b\xe2\x82" "c\xf0\x9f\x98\x80" "d\xc0\xaf" "e\xed\xa0\x80" "f\xf4\x90\x80\x80"
				     "g\xe2\x82\xac");
	expect_out(&s, "{\"ts\":\"" TS "\",\"level\":\"info\",\"msg\":\"a\xef\xbf\xbd" "b\xef\xbf\xbd"
		       "c\xf0\x9f\x98\x80" "d\xef\xbf\xbd\xef\xbf\xbd" "e\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"
		       "f\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd" "g\xe2\x82\xac\"}\n");
	/* not JSON numbers: null */
	pc_log_kv(s.lg, PC_LOG_INFO, "n", PC_LF_DOUBLE("a", NAN), PC_LF_DOUBLE("b", INFINITY), PC_LF_STR("c", NULL));
	expect_out(&s, "{\"ts\":\"" TS "\",\"level\":\"info\",\"msg\":\"n\",\"a\":null,\"b\":null,\"c\":null}\n");
	close_sink(&s);
}

Test(log_escape, strings_read_back_exactly)
{
	sink_t s = open_sink(config(PC_LOG_FORMAT_JSON, PC_LOG_INFO));
	static const char *const vals[] = {"plain", "tab\there", "quote\"back\\slash", "ünï ✓ 😀", "\x01\x02",
					   "new\nline", ""};
	for (size_t i = 0; i < sizeof(vals) / sizeof(vals[0]); i++) {
		pc_log_kv(s.lg, PC_LOG_INFO, vals[i], PC_LF_STR("v", vals[i]));
		char *out = drain(s.rd);
		cJSON *j = parse_line(out);
		cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(j, "msg")), vals[i]);
		cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(j, "v")), vals[i]);
		cJSON_Delete(j);
		free(out);
	}
	close_sink(&s);
}

static uint64_t rng_next(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

Test(log_escape, random_bytes_always_give_clean_lines)
{
	for (int mode = 0; mode < 2; mode++) {
		pc_log_config_t cfg = config(mode ? PC_LOG_FORMAT_TEXT : PC_LOG_FORMAT_JSON, PC_LOG_INFO);
		cfg.max_line = 512;
		sink_t s = open_sink(cfg);
		uint64_t seed = 0x1234567 + (uint64_t)mode;
		for (int i = 0; i < 2000; i++) {
			char msg[700], val[300], key[12];
			size_t n = rng_next(&seed) % sizeof(msg);
			for (size_t k = 0; k < n; k++)
				msg[k] = (char)(rng_next(&seed) % 255 + 1);
			msg[n] = '\0';
			n = rng_next(&seed) % sizeof(val);
			for (size_t k = 0; k < n; k++)
				val[k] = (char)(rng_next(&seed) % 255 + 1);
			val[n] = '\0';
			for (size_t k = 0; k < sizeof(key) - 1; k++)
				key[k] = (char)(rng_next(&seed) % 255 + 1);
			key[sizeof(key) - 1] = '\0';
			cr_assert_eq(pc_log_kv(s.lg, PC_LOG_INFO, msg, PC_LF_STR(key, val), PC_LF_INT("i", i)), 0);
			char *out = drain(s.rd);
			cr_assert_leq(strlen(out), 512);
			if (mode == 0)
				cJSON_Delete(parse_line(out));
			else
				cr_assert(clean_utf8_line(out), "[%s]", out);
			free(out);
		}
		close_sink(&s);
	}
}

/* ---- levels and names ------------------------------------------------------------------- */

Test(log_level, filtering)
{
	sink_t s = open_sink(config(PC_LOG_FORMAT_TEXT, PC_LOG_WARN));
	cr_expect_not(pc_log_enabled(s.lg, PC_LOG_INFO));
	cr_expect(pc_log_enabled(s.lg, PC_LOG_WARN));
	cr_expect_eq(pc_log_kv(s.lg, PC_LOG_DEBUG, "d"), 0);
	cr_expect_eq(pc_log_kv(s.lg, PC_LOG_INFO, "i"), 0);
	cr_expect_eq(pc_log_kv(s.lg, PC_LOG_WARN, "w"), 0);
	cr_expect_eq(pc_log_kv(s.lg, PC_LOG_ERROR, "e"), 0);
	expect_out(&s, "ts=" TS " level=warn msg=w\nts=" TS " level=error msg=e\n");
	cr_assert_eq(pc_log_set_level(s.lg, PC_LOG_DEBUG), 0);
	cr_expect(pc_log_enabled(s.lg, PC_LOG_DEBUG));
	pc_log_kv(s.lg, PC_LOG_DEBUG, "d");
	expect_out(&s, "ts=" TS " level=debug msg=d\n");
	cr_expect_eq(pc_log_set_level(s.lg, (pc_log_level_t)9), PC_EINVAL);
	cr_expect_eq(pc_log_kv(s.lg, (pc_log_level_t)9, "x"), PC_EINVAL);
	cr_expect_not(pc_log_enabled(s.lg, (pc_log_level_t)9));
	cr_expect_not(pc_log_enabled(NULL, PC_LOG_ERROR));
	expect_out(&s, "");
	close_sink(&s);
}

Test(log_level, names)
{
	pc_log_level_t l;
	pc_log_format_t f;
	cr_expect_str_eq(pc_log_level_name(PC_LOG_WARN), "warn");
	cr_expect_str_eq(pc_log_level_name((pc_log_level_t)7), "unknown");
	cr_expect_eq(pc_log_level_from_name("debug", &l), 0);
	cr_expect_eq(l, PC_LOG_DEBUG);
	cr_expect_eq(pc_log_level_from_name("WARNING", &l), 0);
	cr_expect_eq(l, PC_LOG_WARN);
	cr_expect_eq(pc_log_level_from_name("error", &l), 0);
	cr_expect_eq(l, PC_LOG_ERROR);
	cr_expect_eq(pc_log_level_from_name("loud", &l), PC_ENOTFOUND);
	cr_expect_eq(pc_log_level_from_name(NULL, &l), PC_EINVAL);
	cr_expect_eq(pc_log_format_from_name("text", &f), 0);
	cr_expect_eq(f, PC_LOG_FORMAT_TEXT);
	cr_expect_eq(pc_log_format_from_name("json", &f), 0);
	cr_expect_eq(f, PC_LOG_FORMAT_JSON);
	cr_expect_eq(pc_log_format_from_name("xml", &f), PC_ENOTFOUND);
}

Test(log_level, bad_arguments)
{
	pc_log_t *lg = NULL;
	pc_log_config_t cfg;
	pc_log_config_init(&cfg);
	cr_expect_eq(cfg.fd, 2);
	cr_expect_eq(cfg.level, PC_LOG_INFO);
	cr_expect_eq(cfg.format, PC_LOG_FORMAT_JSON);
	cr_expect_eq(pc_log_new(&cfg, NULL), PC_EINVAL);
	cfg.max_line = PC_LOG_LINE_MIN - 1;
	cr_expect_eq(pc_log_new(&cfg, &lg), PC_EINVAL);
	pc_log_config_init(&cfg);
	cfg.fd = -1;
	cr_expect_eq(pc_log_new(&cfg, &lg), PC_EINVAL);
	pc_log_config_init(&cfg);
	cfg.level = (pc_log_level_t)5;
	cr_expect_eq(pc_log_new(&cfg, &lg), PC_EINVAL);
	pc_log_config_init(&cfg);
	cfg.format = (pc_log_format_t)5;
	cr_expect_eq(pc_log_new(&cfg, &lg), PC_EINVAL);
	cr_expect_null(lg);

	sink_t s = open_sink(config(PC_LOG_FORMAT_JSON, PC_LOG_INFO));
	cr_expect_eq(pc_log_kv(NULL, PC_LOG_INFO, "x"), PC_EINVAL);
	cr_expect_eq(pc_log_kv(s.lg, PC_LOG_INFO, "x", PC_LF_STR(NULL, "v")), PC_EINVAL);
	pc_log_field_t odd = PC_LF_INT("k", 1);
	odd.type = (pc_log_field_type_t)42;
	cr_expect_eq(pc_log_fields(s.lg, PC_LOG_INFO, "x", &odd, 1), PC_EINVAL);
	cr_expect_eq(pc_log_fields(s.lg, PC_LOG_INFO, "x", NULL, 2), PC_EINVAL);
	cr_expect_eq(pc_log_fields(s.lg, PC_LOG_INFO, "x", NULL, 0), 0);
	expect_out(&s, "{\"ts\":\"" TS "\",\"level\":\"info\",\"msg\":\"x\"}\n");
	close_sink(&s);
	pc_log_free(NULL);
	cr_expect_eq(pc_log_dropped(NULL), 0);
}

/* ---- length ---------------------------------------------------------------------- */

static char *repeat(const char *unit, size_t times)
{
	size_t u = strlen(unit);
	char *s = malloc(u * times + 1);
	cr_assert_not_null(s);
	for (size_t i = 0; i < times; i++)
		memcpy(s + i * u, unit, u);
	s[u * times] = '\0';
	return s;
}

/* Logs msg (and the fields) and returns the line. Caller frees. */
#define LINE_OF(s, ...) (pc_log_kv((s)->lg, PC_LOG_INFO, __VA_ARGS__), drain((s)->rd))

Test(log_length, exact_fit_is_not_cut)
{
	pc_log_config_t cfg = config(PC_LOG_FORMAT_JSON, PC_LOG_INFO);
	cfg.max_line = 256;
	sink_t s = open_sink(cfg);
	const char *head = "{\"ts\":\"" TS "\",\"level\":\"info\",\"msg\":\"m\",\"v\":\"";
	size_t fill = 256 - strlen(head) - strlen("\"}\n");
	char *v = repeat("x", fill);
	char *out = LINE_OF(&s, "m", PC_LF_STR("v", v));
	cr_expect_eq(strlen(out), 256);
	cr_expect_null(strstr(out, "truncated"), "%s", out);
	free(out);
	free(v);
	/* one byte more: the field goes */
	v = repeat("x", fill + 1);
	out = LINE_OF(&s, "m", PC_LF_STR("v", v));
	cr_expect_str_eq(out, "{\"ts\":\"" TS "\",\"level\":\"info\",\"msg\":\"m\",\"truncated\":true}\n");
	free(out);
	free(v);
	/* a message alone, exactly fitting */
	head = "{\"ts\":\"" TS "\",\"level\":\"info\",\"msg\":\"";
	v = repeat("y", 256 - strlen(head) - strlen("\"}\n"));
	out = LINE_OF(&s, v);
	cr_expect_eq(strlen(out), 256);
	cr_expect_null(strstr(out, "truncated"));
	free(out);
	free(v);
	close_sink(&s);
}

Test(log_length, long_message_and_many_fields)
{
	for (int mode = 0; mode < 2; mode++) {
		pc_log_config_t cfg = config(mode ? PC_LOG_FORMAT_TEXT : PC_LOG_FORMAT_JSON, PC_LOG_INFO);
		cfg.max_line = 300;
		sink_t s = open_sink(cfg);
		const char *cut_end = mode ? " truncated=true\n" : ",\"truncated\":true}\n";
		static const char *const units[] = {"x", "é", "\x01", "😀", "\""};
		for (size_t u = 0; u < sizeof(units) / sizeof(units[0]); u++) {
			char *msg = repeat(units[u], 1000);
			char *out = LINE_OF(&s, msg, PC_LF_STR("after", "gone"));
			size_t n = strlen(out);
			cr_expect_leq(n, 300, "unit %zu: %zu bytes", u, n);
			cr_expect_geq(n, 300 - 8, "unit %zu: cut where it had to, not before", u);
			cr_expect(n > strlen(cut_end) && strcmp(out + n - strlen(cut_end), cut_end) == 0, "%s", out);
			cr_expect_null(strstr(out, "gone"));
			if (mode == 0) {
				cJSON *j = parse_line(out);
				const char *m = cJSON_GetStringValue(cJSON_GetObjectItem(j, "msg"));
				cr_expect(strlen(m) > 0 && strncmp(msg, m, strlen(m)) == 0, "a prefix of the message");
				cJSON_Delete(j);
			} else {
				cr_expect(clean_utf8_line(out), "%s", out);
			}
			free(out);
			free(msg);
		}
		/* many fields: the leading ones that fit, in order */
		pc_log_field_t f[60];
		char keys[60][16];
		for (int i = 0; i < 60; i++) {
			snprintf(keys[i], sizeof(keys[i]), "f%02d", i);
			f[i] = PC_LF_INT(keys[i], i);
		}
		cr_assert_eq(pc_log_fields(s.lg, PC_LOG_INFO, "many", f, 60), 0);
		char *out = drain(s.rd);
		cr_expect_leq(strlen(out), 300);
		cr_expect_not_null(strstr(out, cut_end), "%s", out);
		int kept = 0;
		for (int i = 0; i < 60; i++) {
			char probe[16];
			snprintf(probe, sizeof(probe), mode ? " f%02d=%d" : "\"f%02d\":%d", i, i);
			if (strstr(out, probe))
				cr_expect_eq(kept++, i, "fields kept in order, none skipped: %s", out);
		}
		cr_expect_gt(kept, 10);
		cr_expect_lt(kept, 60);
		if (mode == 0)
			cJSON_Delete(parse_line(out));
		free(out);
		close_sink(&s);
	}
}

/* A string of `n` 'z' bytes with no NUL: the byte after it is the first of
 * an unreadable page, so reading the string whole faults. */
static char *unterminated(size_t n, void **map, size_t *maplen)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE), len = (n + page - 1) / page * page + page;
	char *base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	cr_assert_neq(base, MAP_FAILED);
	cr_assert_eq(mprotect(base + len - page, page, PROT_NONE), 0);
	char *s = base + len - page - n;
	memset(s, 'z', n);
	*map = base;
	*maplen = len;
	return s;
}

Test(log_length, huge_strings_are_read_only_up_to_max_line)
{
	void *map;
	size_t maplen;
	char *big = unterminated(8u << 20, &map, &maplen);
	for (int mode = 0; mode < 2; mode++) {
		sink_t s = open_sink(config(mode ? PC_LOG_FORMAT_TEXT : PC_LOG_FORMAT_JSON, PC_LOG_INFO));
		char *out = LINE_OF(&s, big, PC_LF_STR("v", big));
		size_t n = strlen(out);
		/* filled up to max_line (text leaves the message unquoted: 2 less) */
		cr_expect(n <= PC_LOG_LINE_DEFAULT && n + 2 >= PC_LOG_LINE_DEFAULT, "%zu", n);
		cr_expect_not_null(strstr(out, "truncated"));
		free(out);
		out = LINE_OF(&s, "m", PC_LF_STR("v", big));
		cr_expect_leq(strlen(out), PC_LOG_LINE_DEFAULT);
		cr_expect_not_null(strstr(out, "truncated"));
		free(out);
		close_sink(&s);
	}
	munmap(map, maplen);
}

/* ---- locale and FILE output -------------------------------------------------------------- */

Test(log_format, numbers_ignore_the_process_locale, .timeout = 60, .fini = locale_end)
{
	if (!comma_locale())
		cr_skip_test("no locale with a decimal comma, and localedef cannot make one");
	char probe[16];
	snprintf(probe, sizeof(probe), "%.1f", 0.5);
	cr_expect_str_eq(probe, "0,5", "the locale is in force");
	sink_t s = open_sink(config(PC_LOG_FORMAT_JSON, PC_LOG_INFO));
	pc_log_kv(s.lg, PC_LOG_INFO, "n", PC_LF_DOUBLE("x", 1.25));
	expect_out(&s, "{\"ts\":\"" TS "\",\"level\":\"info\",\"msg\":\"n\",\"x\":1.25}\n");
	close_sink(&s);
}

Test(log_format, to_a_file_stream)
{
	FILE *fp = tmpfile();
	cr_assert_not_null(fp);
	cr_assert_geq(fputs("earlier\n", fp), 0); /* buffered in the stream */
	pc_log_config_t cfg = config(PC_LOG_FORMAT_TEXT, PC_LOG_INFO);
	cfg.file = fp;
	cfg.fd = -1; /* ignored when file is set */
	cfg.clock = fixed_clock;
	pc_log_t *lg = NULL;
	cr_assert_eq(pc_log_new(&cfg, &lg), 0);
	cr_assert_eq(pc_log_kv(lg, PC_LOG_INFO, "to file"), 0);
	pc_log_free(lg);
	rewind(fp);
	char buf[256] = "";
	size_t n = fread(buf, 1, sizeof(buf) - 1, fp);
	buf[n] = '\0';
	cr_expect_str_eq(buf, "earlier\nts=" TS " level=info msg=\"to file\"\n");
	fclose(fp);
}

Test(log_format, write_errors_count_as_dropped)
{
	cr_assert_neq(signal(SIGPIPE, SIG_IGN), SIG_ERR);
	int fds[2];
	make_pipe(fds, 0);
	close(fds[0]); /* no reader */
	pc_log_config_t cfg = config(PC_LOG_FORMAT_JSON, PC_LOG_INFO);
	cfg.fd = fds[1];
	pc_log_t *lg = NULL;
	cr_assert_eq(pc_log_new(&cfg, &lg), 0);
	cr_expect_eq(pc_log_kv(lg, PC_LOG_INFO, "lost"), PC_ESYS);
	cr_expect_eq(pc_log_kv(lg, PC_LOG_INFO, "lost"), PC_ESYS);
	cr_expect_eq(pc_log_dropped(lg), 2);
	pc_log_free(lg);
	close(fds[1]);
}

/* ---- many writers ---------------------------------------------------------------------- */

enum { W_THREADS = 8, W_LINES = 600, W_PAD = 12000 };

typedef struct writer {
	pc_log_t *lg;
	int id;
	int failures;
} writer_t;

static void *write_lines(void *p)
{
	writer_t *w = p;
	static _Thread_local char pad[W_PAD];
	uint64_t seed = 99 + (uint64_t)w->id;
	for (int i = 0; i < W_LINES; i++) {
		/* up to 12 KB: lines longer than PIPE_BUF, which the kernel
		 * would split and interleave without the logger's lock */
		size_t n = rng_next(&seed) % sizeof(pad);
		memset(pad, 'a' + w->id, n);
		pad[n] = '\0';
		w->failures += pc_log_kv(w->lg, PC_LOG_INFO, "tick", PC_LF_INT("thread", w->id), PC_LF_INT("seq", i),
					 PC_LF_STR("pad", pad)) != 0;
	}
	return NULL;
}

typedef struct reader {
	int fd;
	char *buf;
	size_t len, cap;
	int failed;
} reader_t;

/* Reads until end of file (blocking). */
static void *read_all(void *p)
{
	reader_t *r = p;
	for (;;) {
		if (r->len + 65536 > r->cap) {
			size_t cap = r->cap ? r->cap * 2 : 1 << 20;
			char *b = realloc(r->buf, cap);
			if (!b) {
				r->failed = 1;
				return NULL;
			}
			r->buf = b;
			r->cap = cap;
		}
		ssize_t n = read(r->fd, r->buf + r->len, r->cap - r->len - 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			r->failed = n < 0;
			break;
		}
		r->len += (size_t)n;
	}
	r->buf[r->len] = '\0';
	return NULL;
}

Test(log_threads, concurrent_lines_never_interleave, .timeout = 120)
{
	int fds[2];
	make_pipe(fds, 0);
	pc_log_config_t cfg = config(PC_LOG_FORMAT_JSON, PC_LOG_INFO);
	cfg.fd = fds[1];
	cfg.max_line = 2 * W_PAD;
	pc_log_t *lg = NULL;
	cr_assert_eq(pc_log_new(&cfg, &lg), 0);
	reader_t r = {.fd = fds[0]};
	pthread_t rt, wt[W_THREADS];
	writer_t w[W_THREADS];
	cr_assert_eq(pthread_create(&rt, NULL, read_all, &r), 0);
	for (int t = 0; t < W_THREADS; t++) {
		w[t] = (writer_t){.lg = lg, .id = t};
		cr_assert_eq(pthread_create(&wt[t], NULL, write_lines, &w[t]), 0);
	}
	for (int t = 0; t < W_THREADS; t++)
		pthread_join(wt[t], NULL);
	pc_log_free(lg);
	close(fds[1]);
	pthread_join(rt, NULL);
	close(fds[0]);
	cr_assert_eq(r.failed, 0);
	for (int t = 0; t < W_THREADS; t++)
		cr_expect_eq(w[t].failures, 0);

	static bool seen[W_THREADS][W_LINES];
	memset(seen, 0, sizeof(seen));
	size_t lines = 0;
	for (char *line = r.buf, *nl; *line; line = nl + 1) {
		nl = strchr(line, '\n');
		cr_assert_not_null(nl, "a line without its newline");
		char save = nl[1];
		nl[1] = '\0';
		cJSON *j = parse_line(line);
		nl[1] = save;
		int t = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(j, "thread"));
		int i = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(j, "seq"));
		const char *pad = cJSON_GetStringValue(cJSON_GetObjectItem(j, "pad"));
		cr_assert(t >= 0 && t < W_THREADS && i >= 0 && i < W_LINES && pad);
		cr_assert_not(seen[t][i], "line %d of thread %d twice", i, t);
		seen[t][i] = true;
		for (const char *c = pad; *c; c++)
			cr_assert_eq(*c, 'a' + t, "another thread's bytes inside a line");
		cJSON_Delete(j);
		lines++;
	}
	cr_expect_eq(lines, (size_t)W_THREADS * W_LINES);
	free(r.buf);
}

/* ---- full pipes ---------------------------------------------------------------------- */

/* Logs 600 ~120-byte lines into a 16 KiB pipe that nobody reads. */
static void fill_in_drop_mode(int rd, int wr)
{
	pc_log_config_t cfg = config(PC_LOG_FORMAT_JSON, PC_LOG_INFO);
	cfg.fd = wr;
	cfg.drop_when_full = true;
	cfg.clock = fixed_clock;
	pc_log_t *lg = NULL;
	cr_assert_eq(pc_log_new(&cfg, &lg), 0);
	int written = 0, busy = 0;
	for (int i = 0; i < 600; i++) {
		int rc = pc_log_kv(lg, PC_LOG_INFO, "filling the pipe", PC_LF_INT("i", i),
				   PC_LF_STR("pad", "0123456789012345678901234567890123456789"));
		cr_assert(rc == 0 || rc == PC_EBUSY, "rc %d", rc);
		written += rc == 0;
		busy += rc == PC_EBUSY;
	}
	cr_expect_gt(written, 30);
	cr_expect_gt(busy, 400);
	cr_expect_eq(pc_log_dropped(lg), (uint64_t)busy);

	char *out = drain(rd);
	int lines = 0;
	for (char *line = out, *nl; *line; line = nl + 1, lines++) {
		nl = strchr(line, '\n');
		cr_assert_not_null(nl, "half a line in the pipe");
		char save = nl[1];
		nl[1] = '\0';
		cJSON *j = parse_line(line);
		cr_expect_eq((int)cJSON_GetNumberValue(cJSON_GetObjectItem(j, "i")), lines, "the first lines went in");
		cJSON_Delete(j);
		nl[1] = save;
	}
	cr_expect_eq(lines, written);
	free(out);
	/* room again: lines go in again */
	cr_expect_eq(pc_log_kv(lg, PC_LOG_INFO, "again"), 0);
	free(drain(rd));
	pc_log_free(lg);
}

Test(log_full_pipe, drop_mode_drops_and_counts, .timeout = 30)
{
	int fds[2];
	make_pipe(fds, 16384);
	cr_assert_eq(fcntl(fds[0], F_SETFL, O_NONBLOCK), 0);
	fill_in_drop_mode(fds[0], fds[1]);
	close(fds[0]);
	close(fds[1]);
}

Test(log_full_pipe, drop_mode_on_a_nonblocking_descriptor, .timeout = 30)
{
	int fds[2];
	make_pipe(fds, 16384);
	cr_assert_eq(fcntl(fds[0], F_SETFL, O_NONBLOCK), 0);
	cr_assert_eq(fcntl(fds[1], F_SETFL, O_NONBLOCK), 0);
	fill_in_drop_mode(fds[0], fds[1]);
	close(fds[0]);
	close(fds[1]);
}

typedef struct blocked {
	pc_log_t *lg;
	int done; /* atomic */
	int failures;
} blocked_t;

static void *log_much(void *p)
{
	blocked_t *b = p;
	for (int i = 0; i < 200; i++)
		b->failures += pc_log_kv(b->lg, PC_LOG_INFO, "waiting for room", PC_LF_INT("i", i)) != 0;
	__atomic_store_n(&b->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

Test(log_full_pipe, blocking_mode_waits_for_the_reader, .timeout = 30)
{
	int fds[2];
	make_pipe(fds, 4096);
	pc_log_config_t cfg = config(PC_LOG_FORMAT_JSON, PC_LOG_INFO);
	cfg.fd = fds[1];
	blocked_t b = {0};
	cr_assert_eq(pc_log_new(&cfg, &b.lg), 0);
	pthread_t th;
	cr_assert_eq(pthread_create(&th, NULL, log_much, &b), 0);
	/* 200 lines of ~90 bytes cannot fit in 4 KiB: the writer must wait */
	struct timespec pause = {0, 200 * 1000 * 1000};
	nanosleep(&pause, NULL);
	cr_expect_not(__atomic_load_n(&b.done, __ATOMIC_ACQUIRE), "the writer did not wait");
	reader_t r = {.fd = fds[0]};
	pthread_t rt;
	cr_assert_eq(pthread_create(&rt, NULL, read_all, &r), 0);
	pthread_join(th, NULL);
	close(fds[1]);
	pthread_join(rt, NULL);
	cr_expect_eq(b.failures, 0);
	cr_expect_eq(pc_log_dropped(b.lg), 0);
	size_t lines = 0;
	for (const char *c = r.buf; *c; c++)
		lines += *c == '\n';
	cr_expect_eq(lines, 200);
	free(r.buf);
	pc_log_free(b.lg);
	close(fds[0]);
}
