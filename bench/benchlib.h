/* Shared helpers for the benchmark programs: timing, memory, JSON output. */
#ifndef PC_BENCH_BENCHLIB_H
#define PC_BENCH_BENCHLIB_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "pincer.h"

typedef struct bench_opts {
	uint32_t workers; /* --workers N (default 2) */
	uint64_t n;       /* --n N: the workload size (0 = the benchmark's default) */
} bench_opts_t;

void bench_parse(int argc, char **argv, bench_opts_t *o);
double bench_now_s(void);
/* Current and peak resident set, KiB (from /proc/self/status). */
uint64_t bench_rss_kib(void);
uint64_t bench_peak_rss_kib(void);
/* Process CPU time (user + system), seconds. */
double bench_cpu_s(void);
/* The calling thread's CPU time, seconds. */
double bench_thread_cpu_s(void);
pc_runtime_t *bench_runtime(const bench_opts_t *o);
/* Writes zeros over [p, p + bytes) so the pages are resident before the
 * measurement (page faults inside a measured handler would be ours, not the
 * runtime's; and malloc + memset(0) may be turned into an untouched calloc). */
void bench_touch(void *p, size_t bytes);

/* Prints one JSON line: the standard fields, then `extra` (already
 * formatted as `"key":value,...`, or NULL). */
void bench_report(const char *name, uint32_t workers, double wall_s, uint64_t ops, const char *extra);

/* Prints "<prog>: <message>" on stderr and exits 1. */
void bench_fail(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));

/* A one-shot latch: the actor that finishes the work signals it, the main
 * thread waits for it (with a timeout, so a lost message fails the run
 * instead of hanging it). Signalling also publishes everything the
 * signaller wrote before (mutex hand-off). */
typedef struct bench_latch {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int done;
} bench_latch_t;

void bench_latch_init(bench_latch_t *l);
void bench_latch_destroy(bench_latch_t *l);
void bench_latch_signal(bench_latch_t *l);
/* Waits up to timeout_s seconds; on timeout, fails with "`what` timed out". */
void bench_latch_wait(bench_latch_t *l, double timeout_s, const char *what);

/* Default time limit for one phase of a benchmark. */
#define BENCH_TIMEOUT_S 60.0

#endif
