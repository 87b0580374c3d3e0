/*
 * Waiting on a condition variable with a timeout, as every blocking call of
 * the project does: against CLOCK_MONOTONIC, so a wall-clock change never
 * stretches or cuts a wait. The runtime's, for every part above it (not
 * installed).
 */
#ifndef PC_RUNTIME_SYNC_H
#define PC_RUNTIME_SYNC_H

#include <pthread.h>
#include <stdint.h>
#include <time.h>

/* A condition variable whose timed waits use CLOCK_MONOTONIC. 0 or PC_ESYS. */
int pc__cond_init_monotonic(pthread_cond_t *c);

/* The monotonic instant `timeout_ms` from now; UINT64_MAX (never) for a
 * negative timeout or one too long to represent. */
uint64_t pc__deadline_ns(int64_t timeout_ms);
/* An instant in ns as pthread_cond_timedwait wants it. */
static inline struct timespec pc__timespec_ns(uint64_t ns)
{
	return (struct timespec){(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
}

#endif
