/*
 * `pincer load --out DIR` (docs/load.md): every turn's record and the
 * plots. load_records.c keeps the records while the run goes on and
 * writes turns.csv; load_out.c makes DIR and writes the rest there
 * (seconds.csv through load_csv.c, percentiles.csv); load_plot.c writes
 * the gnuplot script and runs gnuplot on it.
 */
#ifndef PC_AGENTS_CLI_LOAD_OUT_H
#define PC_AGENTS_CLI_LOAD_OUT_H

#include <stdbool.h>
#include <stdint.h>

#include "load.h"

/* How a recorded turn ended. 0 is no outcome: a slot never written. */
typedef enum pc_load_outcome {
	PC_LOAD_OUTCOME_OK = 1,
	PC_LOAD_OUTCOME_FAILED,
	PC_LOAD_OUTCOME_IN_FLIGHT, /* running or queued when the run ended */
} pc_load_outcome_t;

/* One turn: 56 bytes, so a million turns keep 56 MB. Times are the
 * monotonic clock's, in ns; 0 where there is none. */
typedef struct pc_load_rec {
	uint64_t intended, started, accepted, first, end;
	uint32_t session, turn; /* both from 0, as {session} and {turn} */
	uint32_t tokens;
	uint32_t tool_calls;
	uint8_t outcome;        /* pc_load_outcome_t */
	uint8_t code;           /* a failed turn's error: an index kept by the records */
	bool warmup;
} pc_load_rec_t;

typedef struct pc_load_records pc_load_records_t;

/* What turns.csv held: the plots leave out a series without points. */
typedef struct pc_load_rows {
	uint64_t ok, failed, with_ttft;
} pc_load_rows_t;

/* 0, or PC_ENOMEM. */
int pc_load_records_new(pc_load_records_t **out);
void pc_load_records_free(pc_load_records_t *r);
/* Keeps `rec` (its `code` is set here from `error`, NULL unless it
 * failed). Any thread, without a lock unless the turn failed; NULL r is a
 * no-op. */
void pc_load_records_add(pc_load_records_t *r, const pc_load_rec_t *rec, const char *error);
/* Writes turns.csv at `path` once the run's threads are gone: 0, or
 * PC_CLI_FAIL with the reason printed. */
int pc_load_records_write(const pc_load_records_t *r, const pc_load_stats_t *st, const char *path,
			  pc_load_rows_t *rows);

/* ---- DIR (load_out.c) ---- */

/* Makes DIR, or takes it when it is an empty directory: 0, or
 * PC_CLI_USAGE with the reason printed. Before the run. */
int pc_load_out_prepare(const char *dir);
/* DIR/name into buf: false (printed) when it does not fit. */
bool pc_load_out_path(char *buf, size_t n, const char *dir, const char *name);
/* After the run: turns.csv, percentiles.csv, then the plots. 0, or
 * PC_CLI_FAIL when a data file could not be written; a plot that could
 * not be made is said on stderr and is not a failure. */
int pc_load_out_write(const char *dir, const pc_load_records_t *r, const pc_load_stats_t *st);

/* ---- plots (load_plot.c) ---- */

/* Writes DIR/plots.gp for what the run has (no latency plot when no turn
 * ended, say) and runs gnuplot on it in DIR: true when gnuplot made them;
 * else the reason is on stderr. */
bool pc_load_plot(const char *dir, const pc_load_stats_t *st, const pc_load_rows_t *rows);

#endif
