#include "benchlib.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static const char *prog_name = "bench";

void bench_parse(int argc, char **argv, bench_opts_t *o)
{
	const char *slash = strrchr(argv[0], '/');
	prog_name = slash ? slash + 1 : argv[0];
	o->workers = 2;
	o->n = 0;
	for (int i = 1; i < argc; i += 2) {
		if (i + 1 >= argc) {
			fprintf(stderr, "usage: %s [--workers N] [--n N]\n", argv[0]);
			exit(2);
		}
		if (strcmp(argv[i], "--workers") == 0)
			o->workers = (uint32_t)strtoul(argv[i + 1], NULL, 10);
		else if (strcmp(argv[i], "--n") == 0)
			o->n = strtoull(argv[i + 1], NULL, 10);
		else {
			fprintf(stderr, "usage: %s [--workers N] [--n N]\n", argv[0]);
			exit(2);
		}
	}
}

double bench_now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t status_kib(const char *key)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	uint64_t v = 0;
	size_t klen = strlen(key);
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, key, klen) == 0)
			v = strtoull(line + klen, NULL, 10);
	fclose(f);
	return v;
}

uint64_t bench_rss_kib(void)
{
	return status_kib("VmRSS:");
}

uint64_t bench_peak_rss_kib(void)
{
	return status_kib("VmHWM:");
}

double bench_cpu_s(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 + (double)ru.ru_stime.tv_sec +
	       (double)ru.ru_stime.tv_usec * 1e-6;
}

double bench_thread_cpu_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void bench_touch(void *p, size_t bytes)
{
	volatile unsigned char *b = p;
	for (size_t i = 0; i < bytes; i++)
		b[i] = 0;
}

pc_runtime_t *bench_runtime(const bench_opts_t *o)
{
	pc_runtime_config_t cfg;
	pc_runtime_config_init(&cfg);
	cfg.workers = o->workers;
	pc_runtime_t *rt = NULL;
	int rc = pc_runtime_new(&cfg, &rt);
	if (rc == 0)
		rc = pc_runtime_start(rt);
	if (rc != 0) {
		fprintf(stderr, "runtime: %s\n", pc_strerror(rc));
		exit(1);
	}
	return rt;
}

void bench_report(const char *name, uint32_t workers, double wall_s, uint64_t ops, const char *extra)
{
	printf("{\"bench\":\"%s\",\"workers\":%u,\"wall_s\":%.6f,\"ops\":%llu,\"ops_per_s\":%.1f,"
	       "\"peak_rss_kib\":%llu%s%s}\n",
	       name, workers, wall_s, (unsigned long long)ops, wall_s > 0 ? (double)ops / wall_s : 0.0,
	       (unsigned long long)bench_peak_rss_kib(), extra ? "," : "", extra ? extra : "");
	fflush(stdout);
}

void bench_fail(const char *fmt, ...)
{
	va_list ap;
	fflush(stdout);
	fprintf(stderr, "%s: ", prog_name);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

void bench_latch_init(bench_latch_t *l)
{
	pthread_condattr_t a;
	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	pthread_mutex_init(&l->lock, NULL);
	pthread_cond_init(&l->cond, &a);
	pthread_condattr_destroy(&a);
	l->done = 0;
}

void bench_latch_destroy(bench_latch_t *l)
{
	pthread_cond_destroy(&l->cond);
	pthread_mutex_destroy(&l->lock);
}

void bench_latch_signal(bench_latch_t *l)
{
	pthread_mutex_lock(&l->lock);
	l->done = 1;
	pthread_cond_broadcast(&l->cond);
	pthread_mutex_unlock(&l->lock);
}

void bench_latch_wait(bench_latch_t *l, double timeout_s, const char *what)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	double end = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9 + timeout_s;
	ts.tv_sec = (time_t)end;
	ts.tv_nsec = (long)((end - (double)ts.tv_sec) * 1e9);
	pthread_mutex_lock(&l->lock);
	int rc = 0;
	while (!l->done && rc != ETIMEDOUT)
		rc = pthread_cond_timedwait(&l->cond, &l->lock, &ts);
	int done = l->done;
	pthread_mutex_unlock(&l->lock);
	if (!done)
		bench_fail("%s timed out after %.0f s", what, timeout_s);
}
