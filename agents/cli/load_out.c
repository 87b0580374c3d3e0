/*
 * `pincer load --out DIR` (load_out.h): the directory, made (or found
 * empty) before the run so nothing is overwritten and a long run is not
 * lost to a bad path; after the run its files: turns.csv
 * (load_records.c), seconds.csv (written during the run by load_csv.c),
 * percentiles.csv, and the plots (load_plot.c).
 *
 * percentiles.csv: the run's histograms at percentiles spaced evenly on
 * a log axis of "nines", ten points from one nine to the next (0 %, 20.6
 * %, … 90 %, … 99 %, …), as HdrHistogram's percentile distribution; up
 * to where one value in the largest series is left beyond (no finer
 * percentile is measured). Columns:
 *
 *   percentile   in %
 *   nines        1 / (1 - percentile / 100): 1, 10, 100 at 0, 90, 99 %
 *   accepted_ms, ttft_ms, tpot_ms, itl_ms, turn_ms
 *                the series' value there; empty when it has none
 */
#include "load_out.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>

#include "commands.h"

#define POINTS_PER_NINE 10

int pc_load_out_prepare(const char *dir)
{
	if (mkdir(dir, 0777) == 0)
		return 0;
	if (errno != EEXIST) {
		fprintf(stderr, PC_LOAD_CMD ": --out %s: cannot make it: %s\n", dir, strerror(errno));
		return PC_CLI_USAGE;
	}
	DIR *d = opendir(dir);
	if (!d) {
		fprintf(stderr, PC_LOAD_CMD ": --out %s: %s\n", dir, strerror(errno));
		return PC_CLI_USAGE;
	}
	const struct dirent *e;
	errno = 0;
	while ((e = readdir(d)) && (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")))
		;
	int err = errno;
	(void)closedir(d);
	if (e || err) {
		/* another run's files are not overwritten, nor mixed with this one's */
		fprintf(stderr, PC_LOAD_CMD ": --out %s: %s\n", dir,
			err ? strerror(err) : "not empty: give a new or empty directory");
		return PC_CLI_USAGE;
	}
	return 0;
}

bool pc_load_out_path(char *buf, size_t n, const char *dir, const char *name)
{
	if (snprintf(buf, n, "%s/%s", dir, name) < (int)n)
		return true;
	fprintf(stderr, PC_LOAD_CMD ": --out %s: the path is too long\n", dir);
	return false;
}

/* The row of percentile q: its cells, empty for a series without values. */
static void percentile_row(FILE *f, const pc_load_stats_t *st, double q, double nines)
{
	fprintf(f, "%.6f,%.3f", q, nines);
	for (int s = 0; s < PC_LOAD_HISTS; s++) {
		pc_hist_stats_t hs = {0};
		uint64_t v = 0;
		if (pc_hist_stats(st->hist[s], &hs) == 0 && hs.count && pc_hist_percentile(st->hist[s], q, &v) == 0)
			fprintf(f, ",%.3f", (double)v / 1000);
		else
			fputc(',', f);
	}
	fputc('\n', f);
}

static int write_percentiles(const char *path, const pc_load_stats_t *st)
{
	FILE *f = fopen(path, "w");
	if (!f) {
		fprintf(stderr, PC_LOAD_CMD ": %s: %s\n", path, strerror(errno));
		return PC_CLI_FAIL;
	}
	fputs("percentile,nines", f);
	uint64_t most = 0;
	for (int s = 0; s < PC_LOAD_HISTS; s++) {
		pc_hist_stats_t hs = {0};
		if (pc_hist_stats(st->hist[s], &hs) == 0 && hs.count > most)
			most = hs.count;
		fprintf(f, ",%s", pc_load_series_name(s));
	}
	fputc('\n', f);
	/* nines up to the count: one value left beyond the last point */
	for (int k = 0; most && pow(10, (double)k / POINTS_PER_NINE) <= (double)most; k++) {
		double nines = pow(10, (double)k / POINTS_PER_NINE);
		percentile_row(f, st, 100 * (1 - 1 / nines), nines);
	}
	int err = ferror(f) ? (errno ? errno : EIO) : 0;
	if (fclose(f) != 0 && !err)
		err = errno;
	if (!err)
		return 0;
	fprintf(stderr, PC_LOAD_CMD ": %s: %s\n", path, strerror(err));
	return PC_CLI_FAIL;
}

int pc_load_out_write(const char *dir, const pc_load_records_t *r, const pc_load_stats_t *st)
{
	char turns[PATH_MAX], percentiles[PATH_MAX];
	if (!pc_load_out_path(turns, sizeof(turns), dir, "turns.csv") ||
	    !pc_load_out_path(percentiles, sizeof(percentiles), dir, "percentiles.csv"))
		return PC_CLI_FAIL;
	pc_load_rows_t rows;
	int rc = pc_load_records_write(r, st, turns, &rows);
	if (rc == 0)
		rc = write_percentiles(percentiles, st);
	/* without plots the data are still there: not a failure of the run */
	if (rc == 0 && !pc_load_plot(dir, st, &rows))
		fprintf(stderr, PC_LOAD_CMD ": the data files are in %s\n", dir);
	return rc;
}
