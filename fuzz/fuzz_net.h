/*
 * What the fuzz targets that drive a socket share (fuzz_http.c, the
 * server's; fuzz_http1_client.c, the client's): the check that traps, the
 * clock, a sleep, the count of open descriptors, the input's layout, and
 * the runtime with one I/O thread they start once. Define FUZZ_NAME (the
 * target's name, for the messages) before including it.
 */
#ifndef PINCER_FUZZ_NET_H
#define PINCER_FUZZ_NET_H

#include <dirent.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include "io/io.h"
#include "pincer.h"

/* A broken promise: say which, and trap. */
#define CHECK(c, ...)                                                                              \
	do {                                                                                       \
		if (!(c)) {                                                                        \
			fprintf(stderr, FUZZ_NAME ": " __VA_ARGS__);                               \
			fprintf(stderr, "\n");                                                     \
			__builtin_trap();                                                          \
		}                                                                                  \
	} while (0)

static inline uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* The process's open descriptors (-1: unknown), to check none leaked. */
static inline int open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;
	if (!d)
		return -1;
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

static inline void sleep_us(long us)
{
	struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
	nanosleep(&ts, NULL);
}

/* Both targets' input: byte 0 the plan, whose bits 0-2 say how many
 * chunk sizes follow, then the sizes, then the bytes to write. */
typedef struct fuzz_input {
	uint8_t plan;
	const uint8_t *sizes;
	size_t nsizes;
	const uint8_t *bytes;
	size_t n;
} fuzz_input_t;

/* False for an input too short to hold its plan and sizes. */
static inline bool fuzz_input_split(const uint8_t *data, size_t size, fuzz_input_t *in)
{
	if (size < 1 || size < 1 + (size_t)(data[0] & 7))
		return false;
	in->plan = data[0];
	in->nsizes = in->plan & 7;
	in->sizes = data + 1;
	in->bytes = data + 1 + in->nsizes;
	in->n = size - 1 - in->nsizes;
	return true;
}

/* Two workers and one I/O thread, for the whole run. */
static inline void start_runtime_io(pc_runtime_t **rt, pc_io_t **io)
{
	pc_runtime_config_t rc;
	pc_runtime_config_init(&rc);
	rc.workers = 2;
	CHECK(pc_runtime_new(&rc, rt) == 0 && pc_runtime_start(*rt) == 0, "runtime");
	pc_io_config_t ic = {.threads = 1};
	CHECK(pc_io_new(*rt, &ic, io) == 0, "io");
}

#endif
