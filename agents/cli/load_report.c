/*
 * What `pincer load` prints at the end (load.h): the summary table, the
 * --json object, and the --threshold verdict. The grammar of a threshold
 * (docs/load.md):
 *
 *   thresholds := clause { "," clause }
 *   clause     := metric op number          spaces allowed around each part
 *   metric     := stat "(" series ")" | "rate(errors)" | "rate(dropped)" | "turns_per_s"
 *               | "goodput_per_s"                  (with --slo)
 *   stat       := "p" percentile | "max" | "mean"     (p50, p99, p99.9; p999 is p99.9)
 *   series     := "turn_ms" | "ttft_ms" | "tpot_ms" | "itl_ms" | "accepted_ms"
 *   op         := "<" | "<=" | ">" | ">="
 *
 * A latency clause on a series with no value (no turn succeeded, a
 * non-streamed target's ttft_ms) does not hold.
 */
#include "load.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "runtime/version.h"
#include "commands.h"

/* The format of --json's object; it changes when a key changes meaning. */
#define JSON_VERSION 1

static const char *const series_names[PC_LOAD_HISTS] = {
	[PC_LOAD_ACCEPTED] = "accepted_ms", [PC_LOAD_TTFT] = "ttft_ms", [PC_LOAD_TPOT] = "tpot_ms",
	[PC_LOAD_ITL] = "itl_ms", [PC_LOAD_TURN] = "turn_ms"};

/* The percentiles every series reports, and their names. */
static const double quantiles[] = {50, 90, 99, 99.9, 100};
static const char *const quantile_keys[] = {"p50", "p90", "p99", "p999", "max"};
#define QUANTILES (sizeof(quantiles) / sizeof(quantiles[0]))

const char *pc_load_series_name(int series) { return series_names[series]; }

static double ms(uint64_t us) { return (double)us / 1000.0; }

static double seconds(uint64_t ns) { return (double)ns / 1e9; }

static uint64_t ended(const pc_load_stats_t *st) { return atomic_load(&st->ok) + atomic_load(&st->failed); }

static double rate_of(uint64_t n, uint64_t of) { return of ? (double)n / (double)of : 0.0; }

static double turns_per_s(const pc_load_stats_t *st)
{
	return st->wall_ns ? (double)atomic_load(&st->ok) / seconds(st->wall_ns) : 0.0;
}

/* --slo: the good turns per second. */
static double goodput(const pc_load_stats_t *st)
{
	return st->wall_ns ? (double)atomic_load(&st->good) / seconds(st->wall_ns) : 0.0;
}

/* Turns that ended well (not in warmup). */
static uint64_t tool_turns(const pc_load_stats_t *st)
{
	uint64_t n = 0;
	for (int i = 0; i < PC_LOAD_TOOL_BUCKETS; i++)
		n += atomic_load(&st->tool_turns[i]);
	return n;
}

/* A tool-call bucket's name: its number, the last "N+". */
static void bucket_name(int i, char *out, size_t n)
{
	snprintf(out, n, "%d%s", i, i == PC_LOAD_TOOL_BUCKETS - 1 ? "+" : "");
}

/* ---- the summary ---- */

static void tools_text(FILE *f, const pc_load_stats_t *st)
{
	uint64_t calls = atomic_load(&st->tool_calls), turns = tool_turns(st);
	if (!calls)
		return;
	fprintf(f, "tool calls   %llu in %llu turns, %.2f per turn, at most %llu; turns by calls:",
		(unsigned long long)calls, (unsigned long long)turns, rate_of(calls, turns),
		(unsigned long long)atomic_load(&st->tool_calls_max));
	for (int i = 0; i < PC_LOAD_TOOL_BUCKETS; i++) {
		uint64_t n = atomic_load(&st->tool_turns[i]);
		char name[8];
		bucket_name(i, name, sizeof(name));
		if (n)
			fprintf(f, " %s: %llu", name, (unsigned long long)n);
	}
	fputc('\n', f);
}

/* The turns that ended between the first and the last sample: the
 * warmup's too, as the samples take it in. */
static uint64_t sampled_turns(const pc_load_stats_t *st)
{
	return atomic_load(&st->ok) + atomic_load(&st->failed) + atomic_load(&st->warmup);
}

/* A process's line: its CPU and wake-ups between two samples, the same
 * per turn, and its memory at the last. */
static void proc_text(FILE *f, const char *label, const pc_load_proc_t *a, const pc_load_proc_t *b, uint64_t turns)
{
	double cpu = b->cpu_s - a->cpu_s, wakeups = (double)(b->wakeups - a->wakeups);
	fprintf(f, "%-12s CPU %.2f s (%.1f%% of one core), RSS %.1f MiB (peak %.1f MiB), %.0f wake-ups", label, cpu,
		pc_load_proc_cpu_pct(a, b), b->rss_mib, b->peak_mib, wakeups);
	if (turns)
		fprintf(f, "; a turn %.0f us CPU, %.1f wake-ups", cpu * 1e6 / (double)turns, wakeups / (double)turns);
}

static void procs_text(FILE *f, const pc_load_opts_t *o, const pc_load_stats_t *st)
{
	const pc_load_procs_t *p = &st->procs;
	if (o->target_pid && p->target_first.at_ns) {
		char label[32];
		snprintf(label, sizeof(label), "pid %d", o->target_pid);
		proc_text(f, label, &p->target_first, &p->target_last, sampled_turns(st));
		fprintf(f, "%s\n", p->target_gone ? ", ended during the run" : "");
	} else if (o->target_pid) {
		fprintf(f, "pid %-8d ended before the run\n", o->target_pid);
	}
	if (p->self_first.at_ns) {
		proc_text(f, "harness", &p->self_first, &p->self_last, sampled_turns(st));
		fputc('\n', f);
	}
}

void pc_load_report_text(FILE *f, const pc_load_opts_t *o, const pc_load_stats_t *st)
{
	const char *how = o->proto == PC_LOAD_HTTP ? (o->stream ? ", streamed" : ", not streamed")
			  : o->via_chat          ? ", chat.send"
			  : o->via_wait          ? ", agent + agent.wait"
						 : ", agent";
	fprintf(f, "target       %s (%s%s)\n", o->target,
		o->proto == PC_LOAD_WS ? "OpenClaw WebSocket RPC" : "OpenAI chat completions", how);
	if (o->n_stages)
		fprintf(f, "load         open loop, %zu stages (%s), %u sessions\n", o->n_stages,
			o->poisson ? "poisson" : "constant", o->sessions);
	else if (o->open)
		fprintf(f, "load         open loop, %.1f turns/s (%s), %u sessions\n", o->rate,
			o->poisson ? "poisson" : "constant", o->sessions);
	else if (o->n_session_stages)
		fprintf(f, "load         closed loop, %zu stages of up to %u sessions, think %llu ms\n",
			o->n_session_stages, o->sessions, (unsigned long long)o->think_ms);
	else
		fprintf(f, "load         closed loop, %u sessions, think %llu ms\n", o->sessions,
			(unsigned long long)o->think_ms);
	fprintf(f, "wall         %.2f s%s\n", seconds(st->wall_ns), st->interrupted ? " (interrupted)" : "");
	fprintf(f, "turns        %llu ok, %llu failed, %llu dropped, %llu in flight at the end, %llu in warmup\n",
		(unsigned long long)atomic_load(&st->ok), (unsigned long long)atomic_load(&st->failed),
		(unsigned long long)atomic_load(&st->dropped), (unsigned long long)st->in_flight_at_end,
		(unsigned long long)atomic_load(&st->warmup));
	fprintf(f, "throughput   %.1f turns/s, %llu tokens\n", turns_per_s(st),
		(unsigned long long)atomic_load(&st->tokens));
	if (o->slo)
		fprintf(f, "goodput      %.1f turns/s within the SLO (%llu of %llu turns)\n", goodput(st),
			(unsigned long long)atomic_load(&st->good), (unsigned long long)ended(st));
	tools_text(f, st);
	procs_text(f, o, st);
	for (size_t i = 0; i < st->error_kinds; i++)
		fprintf(f, "error        %-20s %llu\n", st->errors[i].code, (unsigned long long)st->errors[i].n);
	fprintf(f, "\n%-12s %8s %10s %10s %10s %10s %10s\n", "ms", "count", "p50", "p90", "p99", "p99.9", "max");
	for (int h = 0; h < PC_LOAD_HISTS; h++) {
		pc_hist_stats_t hs = {0};
		(void)pc_hist_stats(st->hist[h], &hs);
		if (h == PC_LOAD_ACCEPTED && o->proto != PC_LOAD_WS)
			continue;
		fprintf(f, "%-12s %8llu", series_names[h], (unsigned long long)hs.count);
		for (size_t q = 0; q < QUANTILES; q++) {
			uint64_t v = 0;
			(void)pc_hist_percentile(st->hist[h], quantiles[q], &v);
			if (hs.count)
				fprintf(f, " %10.2f", ms(v));
			else
				fprintf(f, " %10s", "-");
		}
		fputc('\n', f);
	}
}

/* ---- --json ---- */

/* The format of --json's object; it changes when a key changes meaning
 * (load_compare.c reads this one). */

/* {count, mean, p50, ..., max} in ms; the figures are null when nothing
 * was measured. */
static bool add_series(cJSON *o, const char *key, const pc_hist_t *h)
{
	pc_hist_stats_t hs = {0};
	cJSON *s = cJSON_AddObjectToObject(o, key);
	bool ok = s && pc_hist_stats(h, &hs) == 0 && cJSON_AddNumberToObject(s, "count", (double)hs.count);
	for (size_t q = 0; ok && q < QUANTILES; q++) {
		uint64_t v = 0;
		(void)pc_hist_percentile(h, quantiles[q], &v);
		ok = hs.count ? cJSON_AddNumberToObject(s, quantile_keys[q], ms(v)) != NULL
			      : cJSON_AddNullToObject(s, quantile_keys[q]) != NULL;
	}
	if (ok)
		ok = hs.count ? cJSON_AddNumberToObject(s, "mean", ms(hs.sum) / (double)hs.count) != NULL
			      : cJSON_AddNullToObject(s, "mean") != NULL;
	return ok;
}

/* "tool_calls" and "tool_calls_per_turn": {mean, max, turns: {calls: turns}}. */
static bool add_tools(cJSON *j, const pc_load_stats_t *st)
{
	uint64_t calls = atomic_load(&st->tool_calls), turns = tool_turns(st);
	cJSON *per = NULL, *by = NULL;
	bool ok = cJSON_AddNumberToObject(j, "tool_calls", (double)calls) &&
		  (per = cJSON_AddObjectToObject(j, "tool_calls_per_turn")) != NULL &&
		  (turns ? cJSON_AddNumberToObject(per, "mean", rate_of(calls, turns))
			 : cJSON_AddNullToObject(per, "mean")) &&
		  cJSON_AddNumberToObject(per, "max", (double)atomic_load(&st->tool_calls_max)) &&
		  (by = cJSON_AddObjectToObject(per, "turns")) != NULL;
	for (int i = 0; ok && i < PC_LOAD_TOOL_BUCKETS; i++) {
		uint64_t n = atomic_load(&st->tool_turns[i]);
		char name[8];
		bucket_name(i, name, sizeof(name));
		ok = !n || cJSON_AddNumberToObject(by, name, (double)n);
	}
	return ok;
}

/* "<who>_cpu_s", "_cpu_pct", "_rss_mib", "_rss_peak_mib", "_wakeups",
 * "_cpu_us_per_turn", "_wakeups_per_turn": null when there is no sample
 * (the last two also without a turn). */
static bool add_proc(cJSON *j, const char *who, const pc_load_proc_t *a, const pc_load_proc_t *b, uint64_t turns)
{
	char key[48];
	const char *const names[] = {"cpu_s",   "cpu_pct",         "rss_mib",          "rss_peak_mib",
				     "wakeups", "cpu_us_per_turn", "wakeups_per_turn"};
	double cpu = b->cpu_s - a->cpu_s, wakeups = (double)(b->wakeups - a->wakeups);
	double per_turn = turns ? 1.0 / (double)turns : NAN; /* NaN: null */
	double v[] = {cpu,     pc_load_proc_cpu_pct(a, b), b->rss_mib,         b->peak_mib,
		      wakeups, cpu * 1e6 * per_turn,       wakeups * per_turn};
	bool ok = true;
	for (size_t i = 0; ok && i < sizeof(v) / sizeof(v[0]); i++) {
		snprintf(key, sizeof(key), "%s_%s", who, names[i]);
		ok = a->at_ns && !isnan(v[i]) ? cJSON_AddNumberToObject(j, key, v[i]) != NULL
					     : cJSON_AddNullToObject(j, key) != NULL;
	}
	return ok;
}

static bool add_procs(cJSON *j, const pc_load_opts_t *o, const pc_load_stats_t *st)
{
	const pc_load_procs_t *p = &st->procs;
	return (o->target_pid ? cJSON_AddNumberToObject(j, "target_pid", o->target_pid)
			      : cJSON_AddNullToObject(j, "target_pid")) &&
	       cJSON_AddBoolToObject(j, "target_exited", p->target_gone) &&
	       add_proc(j, "target", &p->target_first, &p->target_last, sampled_turns(st)) &&
	       add_proc(j, "harness", &p->self_first, &p->self_last, sampled_turns(st));
}

cJSON *pc_load_report_object(const pc_load_opts_t *o, const pc_load_stats_t *st)
{
	cJSON *j = cJSON_CreateObject(), *errors = NULL;
	bool ok = j && cJSON_AddNumberToObject(j, "version", JSON_VERSION) &&
		  cJSON_AddStringToObject(j, "pincer", pc_version()) &&
		  cJSON_AddStringToObject(j, "target", o->target) &&
		  cJSON_AddStringToObject(j, "protocol", o->proto == PC_LOAD_WS ? "ws" : "http") &&
		  (o->proto != PC_LOAD_WS || cJSON_AddStringToObject(j, "via", o->via_chat ? "chat" : o->via_wait ? "wait" : "agent")) &&
		  (o->proto != PC_LOAD_HTTP || cJSON_AddStringToObject(j, "model", o->model ? o->model : "mock")) &&
		  cJSON_AddStringToObject(j, "loop", o->open ? "open" : "closed") &&
		  cJSON_AddNumberToObject(j, "sessions", o->sessions) &&
		  cJSON_AddNumberToObject(j, "turns_ok", (double)atomic_load(&st->ok)) &&
		  cJSON_AddNumberToObject(j, "turns_failed", (double)atomic_load(&st->failed)) &&
		  cJSON_AddNumberToObject(j, "dropped", (double)atomic_load(&st->dropped)) &&
		  cJSON_AddNumberToObject(j, "in_flight_at_end", (double)st->in_flight_at_end) &&
		  cJSON_AddNumberToObject(j, "warmup_turns", (double)atomic_load(&st->warmup)) &&
		  cJSON_AddNumberToObject(j, "arrivals", (double)st->arrivals) &&
		  cJSON_AddNumberToObject(j, "tokens", (double)atomic_load(&st->tokens)) &&
		  (!o->https
			   ? cJSON_AddNumberToObject(j, "connections", (double)atomic_load(&st->connections)) != NULL
			   : cJSON_AddNullToObject(j, "connections") != NULL) &&
		  cJSON_AddBoolToObject(j, "interrupted", st->interrupted) &&
		  (errors = cJSON_AddObjectToObject(j, "errors")) != NULL;
	for (size_t i = 0; ok && i < st->error_kinds; i++)
		ok = cJSON_AddNumberToObject(errors, st->errors[i].code, (double)st->errors[i].n) != NULL;
	ok = ok && cJSON_AddNumberToObject(j, "wall_s", seconds(st->wall_ns)) &&
	     cJSON_AddNumberToObject(j, "turns_per_s", turns_per_s(st));
	if (ok && o->slo)
		ok = cJSON_AddNumberToObject(j, "turns_good", (double)atomic_load(&st->good)) &&
		     cJSON_AddNumberToObject(j, "goodput_per_s", goodput(st));
	else if (ok)
		ok = cJSON_AddNullToObject(j, "turns_good") && cJSON_AddNullToObject(j, "goodput_per_s");
	ok = ok && add_tools(j, st) && add_procs(j, o, st);
	for (int h = 0; ok && h < PC_LOAD_HISTS; h++)
		ok = add_series(j, series_names[h], st->hist[h]);
	if (!ok) {
		cJSON_Delete(j);
		return NULL;
	}
	return j;
}

/* ---- --threshold ---- */

typedef enum metric_kind { M_LATENCY, M_ERROR_RATE, M_DROP_RATE, M_TURNS_PER_S, M_GOODPUT } metric_kind_t;

typedef struct clause {
	metric_kind_t kind;
	int series;     /* M_LATENCY */
	double q;       /* M_LATENCY: 0..100; < 0: the mean */
	char op[3];
	double limit;
} clause_t;

static const char *skip_space(const char *p, const char *end)
{
	while (p < end && isspace((unsigned char)*p))
		p++;
	return p;
}

static bool word(const char **p, const char *end, const char *w)
{
	size_t n = strlen(w);
	if ((size_t)(end - *p) < n || strncmp(*p, w, n) != 0)
		return false;
	*p += n;
	return true;
}

/* The stat before "(": pNN, max or mean. */
static bool parse_stat(const char **p, const char *end, double *q)
{
	if (word(p, end, "max")) {
		*q = 100;
		return true;
	}
	if (word(p, end, "mean")) {
		*q = -1;
		return true;
	}
	if (!word(p, end, "p"))
		return false;
	char *e = NULL;
	if (word(p, end, "999")) {
		*q = 99.9;
		return true;
	}
	double v = strtod(*p, &e);
	if (e == *p || e > end || !(v > 0 && v <= 100))
		return false;
	*p = e;
	*q = v;
	return true;
}

static bool parse_metric(const char **p, const char *end, clause_t *c)
{
	if (word(p, end, "rate(errors)")) {
		c->kind = M_ERROR_RATE;
		return true;
	}
	if (word(p, end, "rate(dropped)")) {
		c->kind = M_DROP_RATE;
		return true;
	}
	if (word(p, end, "turns_per_s")) {
		c->kind = M_TURNS_PER_S;
		return true;
	}
	if (word(p, end, "goodput_per_s")) {
		c->kind = M_GOODPUT;
		return true;
	}
	c->kind = M_LATENCY;
	if (!parse_stat(p, end, &c->q) || !word(p, end, "("))
		return false;
	for (int h = 0; h < PC_LOAD_HISTS; h++) {
		if (word(p, end, series_names[h])) {
			c->series = h;
			return word(p, end, ")");
		}
	}
	return false;
}

/* One clause in [p, end). False with *why set when it is not the grammar. */
static bool parse_clause(const char *p, const char *end, clause_t *c, const char **why)
{
	p = skip_space(p, end);
	if (!parse_metric(&p, end, c)) {
		*why = "expected p50(turn_ms), max(ttft_ms), mean(itl_ms), rate(errors), rate(dropped), turns_per_s "
		       "or goodput_per_s";
		return false;
	}
	p = skip_space(p, end);
	size_t n = (p + 1 < end && p[1] == '=') ? 2 : 1;
	if (p >= end || (*p != '<' && *p != '>')) {
		*why = "expected <, <=, > or >= after the metric";
		return false;
	}
	memcpy(c->op, p, n);
	c->op[n] = '\0';
	p = skip_space(p + n, end);
	char num[64], *e = NULL;
	size_t len = (size_t)(end - p);
	while (len && isspace((unsigned char)p[len - 1]))
		len--;
	if (!len || len >= sizeof(num)) {
		*why = "expected a number after the comparison";
		return false;
	}
	memcpy(num, p, len);
	num[len] = '\0';
	c->limit = strtod(num, &e);
	if (*e || !isfinite(c->limit)) {
		*why = "expected a number after the comparison";
		return false;
	}
	return true;
}

/* Calls `fn` on each clause; stops at the first that does not parse
 * (PC_CLI_USAGE, printed). */
static int each_clause(const char *expr, void (*fn)(void *, const clause_t *, const char *, size_t), void *user)
{
	const char *p = expr;
	for (;;) {
		const char *end = strchr(p, ',');
		if (!end)
			end = p + strlen(p);
		clause_t c = {0};
		const char *why = NULL;
		if (!parse_clause(p, end, &c, &why)) {
			fprintf(stderr, PC_LOAD_CMD ": --threshold '%.*s': %s\n", (int)(end - p), p, why);
			return PC_CLI_USAGE;
		}
		if (fn)
			fn(user, &c, p, (size_t)(end - p));
		if (!*end)
			return 0;
		p = end + 1;
	}
}

int pc_load_threshold_check(const char *expr) { return each_clause(expr, NULL, NULL); }

/* The metric's value; false when there is none. */
static bool value_of(const clause_t *c, const pc_load_stats_t *st, double *v)
{
	switch (c->kind) {
	case M_ERROR_RATE: *v = rate_of(atomic_load(&st->failed), ended(st)); return true;
	case M_DROP_RATE: *v = rate_of(atomic_load(&st->dropped), ended(st) + atomic_load(&st->dropped)); return true;
	case M_TURNS_PER_S: *v = turns_per_s(st); return true;
	case M_GOODPUT: *v = goodput(st); return true;
	case M_LATENCY: break;
	}
	pc_hist_stats_t hs = {0};
	if (pc_hist_stats(st->hist[c->series], &hs) != 0 || !hs.count)
		return false;
	if (c->q < 0) {
		*v = ms(hs.sum) / (double)hs.count;
		return true;
	}
	uint64_t us = 0;
	if (pc_hist_percentile(st->hist[c->series], c->q, &us) != 0)
		return false;
	*v = ms(us);
	return true;
}

typedef struct verdict {
	const pc_load_stats_t *st;
	FILE *f;
	bool held;
} verdict_t;

static void judge(void *user, const clause_t *c, const char *text, size_t len)
{
	verdict_t *v = user;
	double x = 0;
	bool have = value_of(c, v->st, &x);
	bool holds = have && (!strcmp(c->op, "<")    ? x < c->limit
			      : !strcmp(c->op, "<=") ? x <= c->limit
			      : !strcmp(c->op, ">")  ? x > c->limit
						     : x >= c->limit);
	if (holds)
		return;
	v->held = false;
	while (len && isspace((unsigned char)*text)) {
		text++;
		len--;
	}
	if (have)
		fprintf(v->f, PC_LOAD_CMD ": threshold '%.*s' crossed: %g\n", (int)len, text, x);
	else
		fprintf(v->f, PC_LOAD_CMD ": threshold '%.*s' crossed: nothing was measured\n", (int)len, text);
}

bool pc_load_threshold_eval(const char *expr, const pc_load_stats_t *st, FILE *f)
{
	verdict_t v = {.st = st, .f = f, .held = true};
	return each_clause(expr, judge, &v) == 0 && v.held;
}
