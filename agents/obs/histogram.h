/*
 * An HDR-style latency histogram: log-linear buckets over a fixed range,
 * recorded from any number of threads without locks and without
 * allocation once made.
 *
 * Values are unsigned integers in the caller's unit (microseconds by the
 * default configuration: 1 µs .. 1 h). The range is cut into octaves
 * (powers of two); each octave into 2^precision equal sub-buckets, so a
 * bucket is never wider than 1/2^precision of the values in it. Values
 * below `lowest` are kept in units of u, the largest power of two not
 * above `lowest` (u = 1 by default: exact below 2^(precision+1)).
 *
 * Error bound. ^pc_hist_percentile(q) returns a value v' with
 * v <= v' < v + max(v / 2^precision, u), where v is the recorded value of
 * rank ceil(q/100 * count) (the smallest value with at least that many
 * values at or below it): never below the true value, and at most 0.79 %
 * above it with the default precision 7 (two significant decimal digits).
 * ^v' never exceeds the largest value recorded, so the 100th percentile is
 * exact. Values above `highest` are counted in the top bucket: their
 * percentiles saturate there (count, sum, min and max stay exact).
 *
 * Memory: one 8-byte counter per bucket, about
 * (log2(highest / lowest) - precision + 2) * 2^precision of them (3,300,
 * 26 KiB, by default).
 *
 * Threads: pc_hist_record, pc_hist_merge, pc_hist_reset, pc_hist_stats
 * and pc_hist_percentile may be called from any thread at any time;
 * pc_hist_free when no other call is in flight. Every counter is atomic;
 * a reader sees each counter exactly, but counters updated by a record in
 * flight may not yet agree with each other (count with the buckets, sum
 * with count). Once the recording threads are done, every total is exact.
 */
#ifndef PINCER_AGENTS_OBS_HISTOGRAM_H
#define PINCER_AGENTS_OBS_HISTOGRAM_H

#include <stdint.h>

#include "runtime/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pc_hist pc_hist_t;

#define PC_HIST_PRECISION_MIN 1u
#define PC_HIST_PRECISION_MAX 14u

typedef struct pc_hist_config {
	uint64_t lowest;    /* >= 1; default 1 */
	uint64_t highest;   /* >= 2 * lowest; default 3,600,000,000 (1 h in µs) */
	unsigned precision; /* PC_HIST_PRECISION_MIN..MAX; default 7 */
} pc_hist_config_t;

typedef struct pc_hist_stats {
	uint64_t count;
	uint64_t sum; /* wraps past 2^64 */
	uint64_t min; /* 0 when count is 0 */
	uint64_t max;
} pc_hist_stats_t;

/* Fills the defaults above. */
void pc_hist_config_init(pc_hist_config_t *cfg);

/* Makes an empty histogram (cfg NULL: defaults). Caller frees with
 * pc_hist_free. PC_EINVAL (a bound or precision out of range), PC_ENOMEM. */
int pc_hist_new(const pc_hist_config_t *cfg, pc_hist_t **out);
/* NULL is ignored. */
void pc_hist_free(pc_hist_t *h);

/* Counts one value: a few relaxed atomic operations, no lock, no
 * allocation. h NULL is ignored. */
void pc_hist_record(pc_hist_t *h, uint64_t value);

/* Adds everything src holds to dst. ^Both may be recorded into meanwhile.
 * ^With equal configurations the buckets add one to one; otherwise each
 * source bucket goes to the destination bucket of its lowest value, so
 * the source's bucket width adds to the error bound. PC_EINVAL when either
 * is NULL or they are the same histogram. */
int pc_hist_merge(pc_hist_t *dst, const pc_hist_t *src);

/* Empties the histogram. A record running at the same time may be kept in
 * part (its bucket but not its sum, say). h NULL is ignored. */
void pc_hist_reset(pc_hist_t *h);

/* Count, sum, min and max. PC_EINVAL when an argument is NULL. */
int pc_hist_stats(const pc_hist_t *h, pc_hist_stats_t *out);

/* The value at percentile q (0 <= q <= 100), with the error bound in the
 * file comment; 0 when the histogram is empty. PC_EINVAL for a q out of
 * range (or NaN) or a NULL argument. */
int pc_hist_percentile(const pc_hist_t *h, double q, uint64_t *out);

#ifdef __cplusplus
}
#endif
#endif
