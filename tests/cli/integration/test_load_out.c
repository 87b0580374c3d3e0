/*
 * `pincer load --out DIR` end to end: the built binary against `pincer
 * mock-llm` on loopback, into a new directory, whose files are then read
 * as a user would: turns.csv has one row per turn with the columns
 * docs/load.md lists, seconds.csv and percentiles.csv agree with the
 * run's figures, and every plot parses (a PNG's signature and IHDR; an
 * SVG's XML declaration, <svg> root and balanced tags). Without gnuplot
 * the plot checks are skipped, except under CI=true, where that is a
 * failure (as tests/clients/run treats a missing tool). Also: warmup
 * turns and turns in flight at the end have rows that say so; a DIR that
 * is not a new or empty directory is refused before the run (exit 2); and
 * a gnuplot missing from PATH leaves the data files and exit 0.
 */
#include <criterion/criterion.h>

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "load_child.h"

/* 4 words: the first after 100 ms, then one every 20 ms. */
#define SCRIPTED "hi {session}/{turn} [[mock:{\"text\":\"one two three four\",\"ttft_ms\":100,\"delay_ms\":20}]]"
#define TURNS_HEADER "session,turn,intended_ms,start_ms,accepted_ms,ttft_ms,turn_ms,tokens,tool_calls,outcome,error,warmup"
#define CELLS 12
#define MAX_ROWS 64

static const char *const plots[] = {"latency", "percentiles", "throughput", "in_flight"};
#define N_PLOTS (sizeof(plots) / sizeof(plots[0]))

/* --out's directory in the test's own: `run`, not yet made. */
static void out_dir(const ctx_t *t, char *out, size_t cap)
{
	snprintf(out, cap, "%s/run", t->dir);
}

/* Runs `pincer load args...` with PATH `path` to its end. */
static result_t load_path(ctx_t *t, const char *path, const char *const *args)
{
	running_t run = pincer_start_path(t, "load", path, args);
	return pincer_finish(&run);
}

/* ---- the data files ---- */

/* The lines of `text` after its header (which must be `header`), cut in
 * place; their number. */
static size_t rows_of(char *text, const char *header, char **rows, size_t max)
{
	size_t n = strlen(header);
	cr_assert(!strncmp(text, header, n) && text[n] == '\n', "header: %.200s", text);
	size_t count = 0;
	for (char *line = text + n + 1; *line; count++) {
		char *nl = strchr(line, '\n');
		cr_assert_not_null(nl, "an unfinished row: %s", line);
		cr_assert_lt(count, max, "more than %zu rows", max);
		*nl = '\0';
		rows[count] = line;
		line = nl + 1;
	}
	return count;
}

/* A row's comma-separated cells, cut in place (none of these is quoted);
 * their number. */
static size_t cells_of(char *row, char **cells, size_t max)
{
	size_t n = 0;
	for (char *c = row;; c++) {
		cr_assert_lt(n, max, "too many cells");
		cells[n++] = c;
		c = strchr(c, ',');
		if (!c)
			return n;
		*c = '\0';
	}
}

static double number(const char *cell)
{
	char *end = NULL;
	double v = strtod(cell, &end);
	cr_assert(end != cell && !*end, "'%s' is not a number", cell);
	return v;
}

static double json_num(const cJSON *j, const char *k)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, k);
	cr_assert(cJSON_IsNumber(v), "'%s' is not a number", k);
	return v->valuedouble;
}

/* turns.csv of `sessions` × `turns` streamed turns of SCRIPTED, each
 * there once; the largest turn_ms. */
static double assert_turns(const char *dir, unsigned sessions, unsigned turns)
{
	char path[160], *rows[MAX_ROWS], *c[CELLS + 1];
	snprintf(path, sizeof(path), "%s/turns.csv", dir);
	char *text = read_file(path);
	size_t n = rows_of(text, TURNS_HEADER, rows, MAX_ROWS);
	cr_assert_eq(n, sessions * turns, "%zu rows for %u turns", n, sessions * turns);
	bool seen[MAX_ROWS] = {0};
	double most = 0;
	for (size_t i = 0; i < n; i++) {
		cr_assert_eq(cells_of(rows[i], c, CELLS + 1), CELLS, "row %zu", i);
		unsigned s = (unsigned)number(c[0]), k = (unsigned)number(c[1]);
		cr_assert(s < sessions && k < turns, "session %u turn %u", s, k);
		cr_assert(!seen[s * turns + k], "session %u turn %u twice", s, k);
		seen[s * turns + k] = true;
		double intended = number(c[2]), start = number(c[3]), ttft = number(c[5]), turn = number(c[6]);
		cr_assert(intended >= 0 && start >= intended, "intended %g, start %g", intended, start);
		cr_assert_str_empty(c[4], "no accepted answer over http");
		/* the mock's floor: the first word after 100 ms, the last 60 ms later */
		cr_assert(ttft >= 100 && turn >= 160 && turn >= ttft, "ttft %g, turn %g", ttft, turn);
		cr_assert_eq(number(c[7]), 4, "tokens");
		cr_assert_eq(number(c[8]), 0, "tool calls");
		cr_assert_str_eq(c[9], "ok");
		cr_assert_str_empty(c[10], "error");
		cr_assert_str_eq(c[11], "0", "warmup");
		if (turn > most)
			most = turn;
	}
	free(text);
	return most;
}

/* seconds.csv: --csv's rows; their ok column adds up to `ok`. */
static void assert_seconds(const char *dir, unsigned ok)
{
	char path[160], *rows[MAX_ROWS], *c[16];
	snprintf(path, sizeof(path), "%s/seconds.csv", dir);
	char *text = read_file(path);
	const char *header = "elapsed_s,ok,failed,dropped,in_flight,turns_per_s,turn_p50_ms,turn_p99_ms,ttft_p50_ms,"
			     "ttft_p99_ms,tool_calls,target_cpu_pct,target_rss_mib";
	size_t n = rows_of(text, header, rows, MAX_ROWS);
	cr_assert_geq(n, 1);
	double sum = 0;
	for (size_t i = 0; i < n; i++) {
		cr_assert_eq(cells_of(rows[i], c, 16), 13, "row %zu", i);
		sum += number(c[1]);
	}
	cr_assert_eq(sum, ok, "the rows' ok add up to %g", sum);
	free(text);
}

/* percentiles.csv: rising percentiles from 0, each series never lower at
 * a higher one, turn_ms's from its floor to the JSON's max. */
static void assert_percentiles(const char *dir, const cJSON *turn_ms)
{
	char path[160], *rows[MAX_ROWS], *c[8];
	snprintf(path, sizeof(path), "%s/percentiles.csv", dir);
	char *text = read_file(path);
	size_t n = rows_of(text, "percentile,nines,accepted_ms,ttft_ms,tpot_ms,itl_ms,turn_ms", rows, MAX_ROWS);
	cr_assert_geq(n, 10, "%zu points for 20 turns", n);
	double first_q = -1, last_q = -1, last_turn = 0;
	for (size_t i = 0; i < n; i++) {
		cr_assert_eq(cells_of(rows[i], c, 8), 7, "row %zu", i);
		double q = number(c[0]), nines = number(c[1]), turn = number(c[6]);
		cr_assert_gt(q, last_q);
		cr_assert(fabs(nines - 1 / (1 - q / 100)) < 0.01 * nines, "%g %% is not %g nines", q, nines);
		cr_assert_str_empty(c[2], "no accepted answer over http");
		cr_assert_geq(turn, last_turn, "turn_ms at %g %%", q);
		cr_assert_leq(turn, json_num(turn_ms, "max"));
		first_q = i ? first_q : q;
		last_q = q;
		last_turn = turn;
	}
	cr_assert_eq(first_q, 0, "the first point is 0 %%");
	cr_assert_geq(last_turn, json_num(turn_ms, "p50"));
	free(text);
}

/* ---- the plots ---- */

static uint32_t be32(const unsigned char *b)
{
	return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

/* The PNG signature, then the IHDR chunk (13 bytes) of a picture. */
static void assert_png(const char *path)
{
	static const unsigned char signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
	unsigned char b[24];
	FILE *f = fopen(path, "rb");
	cr_assert_not_null(f, "%s is missing", path);
	size_t got = fread(b, 1, sizeof(b), f);
	cr_assert_eq(fclose(f), 0);
	cr_assert_eq(got, sizeof(b), "%s: %zu bytes", path, got);
	cr_assert_eq(memcmp(b, signature, 8), 0, "%s: no PNG signature", path);
	cr_assert(be32(b + 8) == 13 && !memcmp(b + 12, "IHDR", 4), "%s: no IHDR first", path);
	cr_assert(be32(b + 16) > 0 && be32(b + 20) > 0, "%s: %ux%u", path, be32(b + 16), be32(b + 20));
}

/* Past the end of the construct at p that ends with `close`. */
static const char *past(const char *p, const char *close, const char *path)
{
	const char *e = strstr(p, close);
	cr_assert_not_null(e, "%s: '%.20s' never ends", path, p);
	return e + strlen(close);
}

/* An XML declaration, then one <svg> element whose tags balance:
 * declarations, comments and CDATA passed over. */
static void assert_svg(const char *path)
{
	char *text = read_file(path);
	cr_assert_eq(strncmp(text, "<?xml ", 6), 0, "%s: no XML declaration", path);
	char stack[64][32];
	size_t depth = 0, roots = 0;
	const char *p = text;
	while ((p = strchr(p, '<'))) {
		if (!strncmp(p, "<?", 2)) {
			p = past(p, "?>", path);
		} else if (!strncmp(p, "<!--", 4)) {
			p = past(p, "-->", path);
		} else if (!strncmp(p, "<![CDATA[", 9)) {
			p = past(p, "]]>", path);
		} else if (p[1] == '!') {
			p = past(p, ">", path);
		} else {
			const char *gt = past(p, ">", path);
			bool closing = p[1] == '/', empty = gt[-2] == '/';
			const char *name = p + 1 + closing;
			size_t len = strcspn(name, " \t\r\n/>");
			cr_assert(len > 0 && len < sizeof(stack[0]), "%s: a tag '%.20s'", path, p);
			if (closing) {
				cr_assert(depth > 0 && strlen(stack[depth - 1]) == len &&
						  !strncmp(stack[depth - 1], name, len),
					  "%s: '%.*s' closed in '%s'", path, (int)len, name,
					  depth ? stack[depth - 1] : "nothing");
				depth--;
			} else {
				if (!depth) {
					cr_assert(len == 3 && !strncmp(name, "svg", 3), "%s: the root is '%.*s'",
						  path, (int)len, name);
					roots++;
				}
				if (!empty) {
					cr_assert_lt(depth, 64, "%s: too deep", path);
					memcpy(stack[depth], name, len);
					stack[depth++][len] = '\0';
				}
			}
			p = gt;
		}
	}
	cr_assert_eq(depth, 0, "%s: '%s' never closed", path, depth ? stack[depth - 1] : "");
	cr_assert_eq(roots, 1, "%s: %zu root elements", path, roots);
	free(text);
}

/* gnuplot where the child's PATH (/usr/bin:/bin) finds it. */
static bool have_gnuplot(void)
{
	return access("/usr/bin/gnuplot", X_OK) == 0 || access("/bin/gnuplot", X_OK) == 0;
}

Test(load_out, records_data_and_plots, .timeout = 240)
{
	ctx_t t;
	mock_up(&t);
	char out[128];
	out_dir(&t, out, sizeof(out));
	result_t r = load_path(&t, "/usr/bin:/bin", ARGS("--target", t.target, "--stream", "--sessions", "4", "--turns",
						    "5", "--message", SCRIPTED, "--out", out, "--json", "--quiet"));
	cr_assert_eq(r.status, 0, "exit %d\n%s", r.status, r.err);
	cJSON *j = cJSON_Parse(r.out);
	cr_assert_not_null(j, "stdout is the JSON alone: %s", r.out);
	cr_assert_eq(json_num(j, "turns_ok"), 20, "%s", r.out);
	const cJSON *turn_ms = cJSON_GetObjectItemCaseSensitive(j, "turn_ms");
	double most = assert_turns(out, 4, 5);
	/* the histogram's max is at most 0.8 % above the true one, never below
	 * (both in whole µs: the slack is the decimals') */
	double max = json_num(turn_ms, "max");
	cr_assert(max >= most - 0.0005 && max <= most * 1.01, "max %.3f, the rows' %.3f", max, most);
	assert_seconds(out, 20);
	assert_percentiles(out, turn_ms);
	char path[192];
	snprintf(path, sizeof(path), "%s/plots.gp", out);
	free(read_file(path));
	cJSON_Delete(j);
	bool plotted = have_gnuplot();
	if (plotted) {
		cr_assert_null(strstr(r.err, "gnuplot"), "%s", r.err);
		/* a run this short has no turn in flight at its one second:
		 * still no complaint from gnuplot about an empty range */
		cr_assert_null(strstr(r.err, "Warning"), "%s", r.err);
		for (size_t i = 0; i < N_PLOTS; i++) {
			snprintf(path, sizeof(path), "%s/%s.png", out, plots[i]);
			assert_png(path);
			snprintf(path, sizeof(path), "%s/%s.svg", out, plots[i]);
			assert_svg(path);
		}
	}
	result_free(&r);
	down(&t);
	const char *ci = getenv("CI");
	if (!plotted && ci && !strcmp(ci, "true"))
		cr_assert_fail("gnuplot is missing (scripts/deps installs gnuplot-nox)");
	if (!plotted)
		cr_skip_test("gnuplot is missing: the plots are not checked");
}

/* Turns in the warmup and turns still running at the end have their
 * rows, marked, and agree with the figures. Closed loop, each turn 400 ms:
 * the first of each session at least is meant for the 0.5 s of warmup,
 * and every session has one running when the duration ends. */
Test(load_out, warmup_and_in_flight_rows, .timeout = 240)
{
	ctx_t t;
	mock_up(&t);
	char out[128];
	out_dir(&t, out, sizeof(out));
	result_t r = load_path(&t, "/nonexistent", ARGS("--target", t.target, "--sessions", "2", "--warmup", "0.5",
						   "--duration", "1", "--message",
						   "x [[mock:{\"text\":\"a\",\"ttft_ms\":400}]]", "--out", out,
						   "--json", "--quiet"));
	cr_assert_eq(r.status, 0, "exit %d\n%s", r.status, r.err);
	cJSON *j = cJSON_Parse(r.out);
	cr_assert_not_null(j, "%s", r.out);
	char path[160], *rows[MAX_ROWS], *c[CELLS + 1];
	snprintf(path, sizeof(path), "%s/turns.csv", out);
	char *text = read_file(path);
	size_t n = rows_of(text, TURNS_HEADER, rows, MAX_ROWS);
	unsigned ok = 0, warm = 0, in_flight = 0, next[2] = {0};
	for (size_t i = 0; i < n; i++) {
		cr_assert_eq(cells_of(rows[i], c, CELLS + 1), CELLS, "row %zu", i);
		unsigned s = (unsigned)number(c[0]);
		cr_assert_lt(s, 2);
		/* a session's rows come in its turns' order */
		cr_assert_eq(number(c[1]), next[s]++, "session %u", s);
		bool warmup = !strcmp(c[11], "1");
		cr_assert(warmup == (number(c[2]) < 500), "intended %s ms, warmup %s", c[2], c[11]);
		if (!strcmp(c[9], "in_flight")) {
			in_flight++;
			cr_assert_str_empty(c[6], "a turn in flight has not ended");
		} else {
			cr_assert_str_eq(c[9], "ok");
			cr_assert_geq(number(c[6]), 400);
			warm += warmup;
			ok += !warmup;
		}
	}
	cr_assert_eq(warm, json_num(j, "warmup_turns"), "%s", r.out);
	cr_assert_geq(warm, 2, "each session's first turn is meant for the warmup: %s", r.out);
	cr_assert_eq(ok, json_num(j, "turns_ok"), "%s", r.out);
	/* one a session, unless the end fell between two turns of one */
	cr_assert(in_flight >= 1 && in_flight <= 2, "%u in flight", in_flight);
	free(text);
	cJSON_Delete(j);
	result_free(&r);
	down(&t);
}

/* A gnuplot missing from PATH: the data files, a message naming the
 * package, and the run's own exit status. */
Test(load_out, without_gnuplot, .timeout = 240)
{
	ctx_t t;
	mock_up(&t);
	char out[128];
	out_dir(&t, out, sizeof(out));
	result_t r = load_path(&t, "/nonexistent", ARGS("--target", t.target, "--stream", "--sessions", "1", "--turns",
						   "3", "--message", SCRIPTED, "--out", out, "--quiet"));
	cr_assert_eq(r.status, 0, "exit %d\n%s", r.status, r.err);
	cr_assert_not_null(strstr(r.err, "gnuplot is not installed"), "%s", r.err);
	cr_assert_not_null(strstr(r.err, "gnuplot-nox"), "%s", r.err);
	cr_assert_not_null(strstr(r.out, "turn_ms"), "the table: %s", r.out);
	assert_turns(out, 1, 3);
	char path[192];
	snprintf(path, sizeof(path), "%s/latency.png", out);
	cr_assert_neq(access(path, F_OK), 0, "no plot without gnuplot");
	result_free(&r);
	down(&t);
}

/* DIR is new or empty, or nothing runs: exit 2 before the run. */
Test(load_out, refuses_a_dir_in_use, .timeout = 120)
{
	ctx_t t;
	dir_only(&t);
	char out[128];
	out_dir(&t, out, sizeof(out));
	char keep[192];
	cr_assert_eq(mkdir(out, 0700), 0);
	snprintf(keep, sizeof(keep), "%s/keep", out);
	write_file(keep, "an earlier run's");
	/* a target that refuses: a run would fail its turns, not exit 2 */
	const char *target = "http://127.0.0.1:1/v1";
	result_t r = load_path(&t, "/usr/bin:/bin", ARGS("--target", target, "--out", out));
	cr_assert_eq(r.status, 2, "exit %d\n%s", r.status, r.err);
	cr_assert_not_null(strstr(r.err, "not empty"), "%s", r.err);
	cr_assert_str_empty(r.out, "nothing ran");
	char *kept = read_file(keep);
	cr_assert_str_eq(kept, "an earlier run's");
	free(kept);
	char other[192];
	snprintf(other, sizeof(other), "%s/turns.csv", out);
	cr_assert_neq(access(other, F_OK), 0, "nothing written into it");
	result_free(&r);

	r = load_path(&t, "/usr/bin:/bin", ARGS("--target", target, "--out", keep));
	cr_assert_eq(r.status, 2, "a file: exit %d\n%s", r.status, r.err);
	cr_assert_not_null(strstr(r.err, "Not a directory"), "%s", r.err);
	result_free(&r);

	snprintf(other, sizeof(other), "%s/new", t.dir);
	r = load_path(&t, "/usr/bin:/bin", ARGS("--target", target, "--out", other, "--csv", keep));
	cr_assert_eq(r.status, 2, "--csv too: exit %d\n%s", r.status, r.err);
	cr_assert_not_null(strstr(r.err, "seconds.csv"), "%s", r.err);
	cr_assert_neq(access(other, F_OK), 0, "a refused run makes no directory");
	result_free(&r);
	down(&t);
}
