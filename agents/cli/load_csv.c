/*
 * `pincer load --csv FILE` (load.h): one row per second of the run, for
 * plots of latency and throughput over time. The columns (docs/load.md):
 *
 *   elapsed_s      seconds since the start (warmup included), at the row's end
 *   ok, failed     turns that ended in the row's second (warmup turns not counted)
 *   dropped        arrivals not sent in it (open loop, --max-in-flight)
 *   in_flight      turns queued or running at its end
 *   turns_per_s    ok over the row's length
 *   turn_p50_ms, turn_p99_ms, ttft_p50_ms, ttft_p99_ms
 *                  of the turns that ended well in it; empty when none did
 *   tool_calls     of the turns that ended well in it
 *   target_cpu_pct, target_rss_mib
 *                  --target-pid's CPU over the row (% of one core) and its
 *                  memory at its end; empty without one, or once it is gone
 */
#include "load.h"

#include <errno.h>
#include <string.h>

#include "commands.h"

int pc_load_csv_open(const char *path, pc_load_csv_t *c)
{
	memset(c, 0, sizeof(*c));
	c->path = path;
	c->f = fopen(path, "w");
	if (!c->f) {
		fprintf(stderr, PC_LOAD_CMD ": --csv %s: %s\n", path, strerror(errno));
		return PC_CLI_FAIL;
	}
	if (fputs("elapsed_s,ok,failed,dropped,in_flight,turns_per_s,turn_p50_ms,turn_p99_ms,ttft_p50_ms,ttft_p99_ms,"
		  "tool_calls,target_cpu_pct,target_rss_mib\n",
		  c->f) < 0)
		c->write_errno = errno;
	return 0;
}

/* ",p50,p99" of a window in ms, or ",," when it is empty; then empties it. */
static void window_cells(FILE *f, pc_hist_t *h)
{
	pc_hist_stats_t hs = {0};
	uint64_t p50 = 0, p99 = 0;
	if (pc_hist_stats(h, &hs) == 0 && hs.count && pc_hist_percentile(h, 50, &p50) == 0 &&
	    pc_hist_percentile(h, 99, &p99) == 0)
		fprintf(f, ",%.3f,%.3f", (double)p50 / 1000, (double)p99 / 1000);
	else
		fputs(",,", f);
	/* a turn recorded between the read and this lands in no row: the
	 * totals still have it */
	pc_hist_reset(h);
}

void pc_load_csv_row(pc_load_csv_t *c, pc_load_stats_t *st, uint64_t now_ns)
{
	if (!c || !c->f)
		return;
	uint64_t ok = atomic_load(&st->ok), failed = atomic_load(&st->failed), dropped = atomic_load(&st->dropped);
	double dt = (double)(now_ns - (c->last_ns ? c->last_ns : st->t0_ns)) / 1e9;
	int n = fprintf(c->f, "%.3f,%llu,%llu,%llu,%llu,%.2f", (double)(now_ns - st->t0_ns) / 1e9,
			(unsigned long long)(ok - c->ok), (unsigned long long)(failed - c->failed),
			(unsigned long long)(dropped - c->dropped), (unsigned long long)atomic_load(&st->in_flight),
			dt > 0 ? (double)(ok - c->ok) / dt : 0.0);
	window_cells(c->f, st->window[PC_LOAD_WINDOW_TURN]);
	window_cells(c->f, st->window[PC_LOAD_WINDOW_TTFT]);
	uint64_t tools = atomic_load(&st->tool_calls);
	const pc_load_procs_t *p = &st->procs;
	/* the driver sampled the target just before this row */
	if (p->target_last.at_ns == now_ns && p->target_prev.at_ns)
		fprintf(c->f, ",%llu,%.1f,%.1f", (unsigned long long)(tools - c->tool_calls),
			pc_load_proc_cpu_pct(&p->target_prev, &p->target_last), p->target_last.rss_mib);
	else
		fprintf(c->f, ",%llu,,", (unsigned long long)(tools - c->tool_calls));
	if (n < 0 || fputc('\n', c->f) == EOF)
		c->write_errno = c->write_errno ? c->write_errno : errno;
	c->ok = ok;
	c->failed = failed;
	c->dropped = dropped;
	c->tool_calls = tools;
	c->last_ns = now_ns;
}

int pc_load_csv_close(pc_load_csv_t *c)
{
	if (!c->f)
		return 0;
	int err = c->write_errno;
	if (fclose(c->f) != 0 && !err)
		err = errno;
	c->f = NULL;
	if (!err)
		return 0;
	fprintf(stderr, PC_LOAD_CMD ": --csv %s: %s\n", c->path, strerror(err));
	return PC_CLI_FAIL;
}
