/*
 * The process's own figures (process_stats.h).
 */
#include "process_stats.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "io/store/store.h"
#include "runtime/error.h"

/* The boot time (Unix seconds), from /proc/stat's btime line; 0 unknown. */
static double boot_time(void)
{
	FILE *f = fopen("/proc/stat", "re");
	if (!f)
		return 0;
	char line[256];
	double t = 0;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "btime ", 6)) {
			t = strtod(line + 6, NULL);
			break;
		}
	fclose(f);
	return t;
}

static double resident(void)
{
	FILE *f = fopen("/proc/self/statm", "re");
	if (!f)
		return 0;
	unsigned long size = 0, rss = 0;
	int n = fscanf(f, "%lu %lu", &size, &rss);
	fclose(f);
	long page = sysconf(_SC_PAGESIZE);
	return n == 2 && page > 0 ? (double)rss * (double)page : 0;
}

/* Entries of /proc/self/fd but its own directory's descriptor. */
static double open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	if (!d)
		return 0;
	double n = 0;
	struct dirent *e;
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n > 0 ? n - 1 : 0;
}

int pc_process_stats(pc_process_stats_t *out)
{
	memset(out, 0, sizeof(*out));
	int got = 0;
	struct rusage ru;
	if (getrusage(RUSAGE_SELF, &ru) == 0) {
		out->cpu_seconds = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
				   (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
		got++;
	}
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
		out->max_fds = rl.rlim_cur == RLIM_INFINITY ? -1 : (double)rl.rlim_cur;
		got++;
	}
	uint64_t ticks = 0;
	long hz = sysconf(_SC_CLK_TCK);
	double boot = boot_time();
	if (pc_proc_starttime(getpid(), &ticks) == 0 && hz > 0 && boot > 0) {
		out->start_time_seconds = boot + (double)ticks / (double)hz;
		got++;
	}
	out->resident_bytes = resident();
	out->open_fds = open_fds();
	got += out->resident_bytes > 0;
	got += out->open_fds > 0;
	return got ? 0 : PC_ESYS;
}
