/*
 * The plots of `pincer load --out DIR` (load_out.h): a gnuplot script,
 * DIR/plots.gp, that reads the data files beside it (so `cd DIR &&
 * gnuplot plots.gp` makes them again, or edited), run by gnuplot
 * (Debian's gnuplot-nox) as a child in DIR. Each plot is written as SVG,
 * then the same again as PNG:
 *
 *   latency      turn_ms and ttft_ms of every turn by its intended start
 *                (failed turns: the time to the failure), from turns.csv
 *   percentiles  each series' latency by percentile, on a log axis of
 *                nines, from percentiles.csv
 *   throughput   turns ok, failed (and dropped) per second, from seconds.csv
 *   in_flight    turns queued or running, each second, from seconds.csv
 *
 * The script names only series with points: gnuplot stops at a plot whose
 * every point is missing.
 */
#include "load_out.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/wait.h>

#include "commands.h"

extern char **environ;

#define SCRIPT "plots.gp"
#define GNUPLOT "gnuplot"
/* The Debian package a missing gnuplot is in. */
#define GNUPLOT_PACKAGE "gnuplot-nox"

/* A plot's start: its settings reset, the SVG terminal, its title. */
static void begin(FILE *f, const char *name, const char *title, const char *xlabel, const char *ylabel)
{
	fprintf(f,
		"\nreset\n"
		"set datafile separator ','\n"
		"set terminal svg size 900,500 dynamic noenhanced font 'sans,11' background '#ffffff'\n"
		"set output '%s.svg'\n"
		"set title '%s'\n"
		"set xlabel '%s'\n"
		"set ylabel '%s'\n"
		"set grid\n"
		"set key outside right top\n"
		"set xrange [0:*]\n"
		"set offsets 0, 0, graph 0.05, 0\n",
		name, title, xlabel, ylabel);
}

/* Its end: the same plot again as PNG. */
static void end(FILE *f, const char *name)
{
	fprintf(f,
		"set terminal pngcairo size 900,500 noenhanced font 'sans,10' background '#ffffff'\n"
		"set output '%s.png'\n"
		"replot\n"
		"unset output\n",
		name);
}

/* One series of the scatter: `column` of the turns with `outcome`. */
static void scatter(FILE *f, bool *first, const char *column, const char *outcome, const char *style,
		    const char *title)
{
	fprintf(f, "%s 'turns.csv' using (column('intended_ms') / 1000):"
		   "(strcol('outcome') eq '%s' ? column('%s') : NaN) with points %s title '%s'",
		*first ? "plot" : ", \\\n    ", outcome, column, style, title);
	*first = false;
}

static void latency(FILE *f, const pc_load_rows_t *rows)
{
	begin(f, "latency", "Latency of each turn", "intended start (s since the run began)", "ms");
	bool first = true;
	if (rows->ok)
		scatter(f, &first, "turn_ms", "ok", "pt 7 ps 0.5", "turn_ms");
	if (rows->with_ttft)
		scatter(f, &first, "ttft_ms", "ok", "pt 7 ps 0.5", "ttft_ms");
	if (rows->failed)
		scatter(f, &first, "turn_ms", "failed", "pt 2 ps 0.6", "failed (time to the failure)");
	fputc('\n', f);
	end(f, "latency");
}

/* The percentile curves, up to the nines the data reach. */
static void percentiles(FILE *f, const pc_load_stats_t *st)
{
	begin(f, "percentiles", "Latency by percentile", "percentile", "ms");
	uint64_t most = 0;
	for (int s = 0; s < PC_LOAD_HISTS; s++) {
		pc_hist_stats_t hs = {0};
		if (pc_hist_stats(st->hist[s], &hs) == 0 && hs.count > most)
			most = hs.count;
	}
	int nines = most > 10 ? (int)ceil(log10((double)most)) : 1;
	fputs("set logscale x\nset yrange [0:1<*]\nset xtics (", f);
	/* a tic's label is a format: %% is a percent sign */
	static const char *const labels[] = {"0%%", "90%%", "99%%", "99.9%%", "99.99%%", "99.999%%", "99.9999%%",
					     "99.99999%%", "99.999999%%", "99.9999999%%"};
	for (int k = 0; k <= nines && k < (int)(sizeof(labels) / sizeof(labels[0])); k++)
		fprintf(f, "%s'%s' 1e%d", k ? ", " : "", labels[k], k);
	fprintf(f, ")\nset xrange [1:1e%d]\n", nines);
	bool first = true;
	for (int s = PC_LOAD_HISTS - 1; s >= 0; s--) {
		pc_hist_stats_t hs = {0};
		if (pc_hist_stats(st->hist[s], &hs) != 0 || !hs.count)
			continue;
		fprintf(f, "%s 'percentiles.csv' using 'nines':'%s' with linespoints pt 7 ps 0.4 lw 2 title '%s'",
			first ? "plot" : ", \\\n    ", pc_load_series_name(s), pc_load_series_name(s));
		first = false;
	}
	fputc('\n', f);
	end(f, "percentiles");
}

/* A count of seconds.csv over its row's length (the last may be
 * shorter than a second), at the middle of the row's time. */
static void per_second(FILE *f, bool *first, const char *column, const char *title)
{
	fprintf(f, "%s prev = 0, 'seconds.csv' using (dt = column('elapsed_s') - prev, prev = column('elapsed_s'), "
		   "prev - dt / 2):(dt > 0 ? column('%s') / dt : NaN) with linespoints pt 7 ps 0.5 title '%s'",
		*first ? "plot" : ", \\\n    ", column, title);
	*first = false;
}

/* The y axis from 0 for a series of seconds.csv; [0:1] when every value
 * is 0, where gnuplot's autoscale has no range to draw and warns (on each
 * output), as a run shorter than a second does for its turns in flight. */
static void y_from_zero(FILE *f, const char *expr)
{
	fprintf(f,
		"STATS_max = 0\n"
		"stats 'seconds.csv' using %s nooutput\n"
		"if (STATS_max <= 0) { set yrange [0:1] } else { set yrange [0:*] }\n",
		expr);
}

static void throughput(FILE *f, const pc_load_stats_t *st)
{
	begin(f, "throughput", "Turns per second", "s since the run began", "turns/s");
	y_from_zero(f, "(column('ok') + column('failed') + column('dropped'))");
	bool first = true;
	per_second(f, &first, "ok", "ok");
	per_second(f, &first, "failed", "failed");
	if (atomic_load(&st->dropped))
		per_second(f, &first, "dropped", "dropped (--max-in-flight)");
	fputc('\n', f);
	end(f, "throughput");
}

static void in_flight(FILE *f)
{
	begin(f, "in_flight", "Turns in flight", "s since the run began", "turns queued or running");
	y_from_zero(f, "'in_flight'");
	fputs("plot 'seconds.csv' using 'elapsed_s':'in_flight' with linespoints pt 7 ps 0.5 title 'in flight'\n", f);
	end(f, "in_flight");
}

/* DIR/plots.gp: false (printed) when it could not be written. */
static bool write_script(const char *path, const pc_load_stats_t *st, const pc_load_rows_t *rows)
{
	FILE *f = fopen(path, "w");
	if (!f) {
		fprintf(stderr, PC_LOAD_CMD ": %s: %s\n", path, strerror(errno));
		return false;
	}
	fputs("# pincer load --out: the plots of the data files beside this one (docs/load.md).\n"
	      "# Again: gnuplot " SCRIPT " in this directory.\n",
	      f);
	if (rows->ok || rows->failed)
		latency(f, rows);
	else
		fprintf(stderr, PC_LOAD_CMD ": no turn ended: no latency plot\n");
	pc_hist_stats_t hs = {0};
	if (pc_hist_stats(st->hist[PC_LOAD_TURN], &hs) == 0 && hs.count)
		percentiles(f, st);
	else
		fprintf(stderr, PC_LOAD_CMD ": no turn succeeded: no percentile plot\n");
	throughput(f, st);
	in_flight(f);
	int err = ferror(f) ? (errno ? errno : EIO) : 0;
	if (fclose(f) != 0 && !err)
		err = errno;
	if (err)
		fprintf(stderr, PC_LOAD_CMD ": %s: %s\n", path, strerror(err));
	return !err;
}

/* The child's setup: in DIR, no stdin, its stdout on our stderr (stdout
 * may be --json's), signals as a fresh program has them (the run blocks
 * SIGINT and SIGTERM; SIGPIPE may be ignored). */
static int spawn_setup(posix_spawn_file_actions_t *fa, posix_spawnattr_t *at, const char *dir)
{
	sigset_t none, dfl;
	sigemptyset(&none);
	sigemptyset(&dfl);
	sigaddset(&dfl, SIGPIPE);
	int rc = posix_spawn_file_actions_addopen(fa, 0, "/dev/null", O_RDONLY, 0);
	if (rc == 0)
		rc = posix_spawn_file_actions_adddup2(fa, 2, 1);
	if (rc == 0)
		rc = posix_spawn_file_actions_addchdir_np(fa, dir);
	if (rc == 0)
		rc = posix_spawnattr_setsigmask(at, &none);
	if (rc == 0)
		rc = posix_spawnattr_setsigdefault(at, &dfl);
	if (rc == 0)
		rc = posix_spawnattr_setflags(at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
	return rc;
}

/* gnuplot plots.gp in DIR, to its end: true when it made the plots. */
static bool run_gnuplot(const char *dir)
{
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t at;
	int rc = posix_spawn_file_actions_init(&fa);
	if (rc == 0 && (rc = posix_spawnattr_init(&at)) != 0)
		(void)posix_spawn_file_actions_destroy(&fa);
	if (rc != 0) {
		fprintf(stderr, PC_LOAD_CMD ": cannot run " GNUPLOT ": %s\n", strerror(rc));
		return false;
	}
	pid_t pid = 0;
	char *argv[] = {GNUPLOT, SCRIPT, NULL};
	rc = spawn_setup(&fa, &at, dir);
	if (rc == 0)
		rc = posix_spawnp(&pid, GNUPLOT, &fa, &at, argv, environ);
	(void)posix_spawnattr_destroy(&at);
	(void)posix_spawn_file_actions_destroy(&fa);
	if (rc == ENOENT) {
		fprintf(stderr, PC_LOAD_CMD ": " GNUPLOT " is not installed: no plots (Debian: apt-get install "
			GNUPLOT_PACKAGE ")\n");
		return false;
	}
	if (rc != 0) {
		fprintf(stderr, PC_LOAD_CMD ": cannot run " GNUPLOT ": %s\n", strerror(rc));
		return false;
	}
	int status = 0;
	pid_t got;
	while ((got = waitpid(pid, &status, 0)) < 0 && errno == EINTR)
		;
	if (got == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0)
		return true;
	fprintf(stderr, PC_LOAD_CMD ": " GNUPLOT " failed (its message is above): plots are missing\n");
	return false;
}

bool pc_load_plot(const char *dir, const pc_load_stats_t *st, const pc_load_rows_t *rows)
{
	char script[PATH_MAX];
	return pc_load_out_path(script, sizeof(script), dir, SCRIPT) && write_script(script, st, rows) &&
	       run_gnuplot(dir);
}
