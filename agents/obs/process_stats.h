/*
 * The process's own figures, in the shape of the standard Prometheus
 * `process_*` series: CPU time, resident memory, open and allowed file
 * descriptors, start time. Read from the kernel at each call (getrusage,
 * /proc/self, getrlimit): a scrape's cost, not a hot path's.
 */
#ifndef PINCER_AGENTS_OBS_PROCESS_STATS_H
#define PINCER_AGENTS_OBS_PROCESS_STATS_H

#include <stdint.h>

typedef struct pc_process_stats {
	double cpu_seconds;        /* user + system, all threads */
	double start_time_seconds; /* Unix time the process started */
	double resident_bytes;
	double open_fds;
	double max_fds;            /* the soft limit */
} pc_process_stats_t;

/* Fills *out; a figure the system does not give is left 0. Returns 0, or
 * PC_ESYS when none could be read. Any thread. */
int pc_process_stats(pc_process_stats_t *out);

#endif
