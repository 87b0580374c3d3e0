/*
 * PINCER_TRACE's lines of a live agent, for the lifecycle tests: the
 * agent's logger writes to a temporary file, read back once the agent is
 * gone (docs/architecture.md, "The trace").
 *
 *   trace_capture_t c;
 *   trace_capture_begin(&c, "attempt");    before harness_start
 *   harness_start(&h, ...);
 *   trace_capture_started(&c);
 *   ... runs ...
 *   harness_stop(&h);
 *   char *log = trace_capture_end(&c);
 *   trace_of(log, "attempt", run, got, sizeof(got));
 */
#ifndef PC_TESTS_TRACE_CAPTURE_H
#define PC_TESTS_TRACE_CAPTURE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent_harness.h"

typedef struct trace_capture {
	FILE *out;
	pc_log_t *lg;
} trace_capture_t;

/* Traces `machines` (PINCER_TRACE's syntax) in the next harness's agent. */
static inline void trace_capture_begin(trace_capture_t *c, const char *machines)
{
	c->out = tmpfile();
	cr_assert_not_null(c->out);
	pc_log_config_t lc;
	pc_log_config_init(&lc);
	lc.file = c->out;
	lc.format = PC_LOG_FORMAT_TEXT;
	c->lg = NULL;
	cr_assert_eq(pc_log_new(&lc, &c->lg), 0);
	cr_assert_eq(setenv("PINCER_TRACE", machines, 1), 0);
	harness_log = c->lg;
}

/* The agent is made: it read PINCER_TRACE and holds the logger. */
static inline void trace_capture_started(trace_capture_t *c)
{
	(void)c;
	harness_log = NULL;
}

/* After harness_stop: the log's whole text (malloc'd). PINCER_TRACE is
 * unset only now, with no thread left that could read the environment. */
static inline char *trace_capture_end(trace_capture_t *c)
{
	unsetenv("PINCER_TRACE");
	pc_log_free(c->lg);
	/* the logger writes to the descriptor: the stream only reads */
	cr_assert_eq(fseek(c->out, 0, SEEK_END), 0);
	long n = ftell(c->out);
	cr_assert_geq(n, 0);
	char *buf = calloc(1, (size_t)n + 1);
	cr_assert_not_null(buf);
	rewind(c->out);
	cr_assert_eq(fread(buf, 1, (size_t)n, c->out), (size_t)n);
	fclose(c->out);
	return buf;
}

/* The transitions `machine` traced for ids that start with `id_prefix`, in
 * order, as "from -> to (why)" joined by "; " into `out`. Checks each
 * line's shape: trace <machine> <id> <from> -> <to> (<why>). */
static inline void trace_of(const char *log, const char *machine, const char *id_prefix, char *out, size_t cap)
{
	char head[128];
	snprintf(head, sizeof(head), "msg=\"trace %s ", machine);
	size_t used = 0;
	out[0] = '\0';
	for (const char *p = log; (p = strstr(p, head)); p++) {
		const char *id = p + strlen(head);
		const char *sp = strchr(id, ' ');
		const char *end = strchr(id, '"');
		cr_assert(sp && end && sp < end, "a trace line without its fields: %.120s", p);
		if (strncmp(id, id_prefix, strlen(id_prefix)) != 0)
			continue;
		const char *t = sp + 1;
		size_t len = (size_t)(end - t);
		/* <from> -> <to> (<why>) */
		const char *arrow = strstr(t, " -> ");
		cr_assert(arrow && arrow < end, "no transition in: %.*s", (int)len, t);
		cr_assert(len >= 2 && t[len - 1] == ')' && memchr(arrow, '(', (size_t)(end - arrow)),
			  "no reason in: %.*s", (int)len, t);
		int w = snprintf(out + used, cap - used, "%s%.*s", used ? "; " : "", (int)len, t);
		cr_assert(w > 0 && (size_t)w < cap - used, "trace longer than %zu bytes", cap);
		used += (size_t)w;
	}
}

#endif
