/*
 * `pincer load --target-pid PID` (load.h): the target's CPU and memory,
 * and the harness's own, sampled at the run's start, each second and at
 * its end, so the summary can set what the target spent beside what the
 * harness spent to load it. The target's CPU is fields 14 and 15 of
 * /proc/PID/stat (the reader the session locks use), the harness's
 * getrusage; both memories VmRSS and VmHWM of /proc/PID/status; the
 * wake-ups are voluntary context switches, the target's summed over
 * /proc/PID/task/TID/status (a thread that ended takes its count along).
 */
#include "load.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "io/store/store.h"
#include "runtime/error.h"

/* VmRSS and VmHWM of /proc/<pid>/status (kB) in MiB: false when they
 * cannot be read. */
static bool memory(int pid, pc_load_proc_t *s)
{
	char path[48], line[256];
	snprintf(path, sizeof(path), "/proc/%d/status", pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return false;
	int got = 0;
	while (got < 2 && fgets(line, sizeof(line), f)) {
		double *slot = !strncmp(line, "VmRSS:", 6) ? &s->rss_mib : !strncmp(line, "VmHWM:", 6) ? &s->peak_mib
												: NULL;
		if (slot) {
			*slot = strtod(line + 6, NULL) / 1024.0;
			got++;
		}
	}
	(void)fclose(f);
	return got == 2;
}

/* Voluntary context switches of pid's living threads. */
static uint64_t wakeups(int pid)
{
	char path[64], line[256];
	snprintf(path, sizeof(path), "/proc/%d/task", pid);
	DIR *d = opendir(path);
	if (!d)
		return 0;
	uint64_t sum = 0;
	const struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%.16s/status", pid, e->d_name);
		FILE *f = fopen(path, "re");
		if (!f)
			continue; /* the thread ended meanwhile */
		while (fgets(line, sizeof(line), f))
			if (!strncmp(line, "voluntary_ctxt_switches:", 24)) {
				sum += strtoull(line + 24, NULL, 10);
				break;
			}
		(void)fclose(f);
	}
	(void)closedir(d);
	return sum;
}

/* The target now: PC_ENOTFOUND once it is gone (or its pid is another
 * process's). */
static int target_sample(const pc_load_opts_t *o, pc_load_proc_t *s)
{
	static const int fields[] = {14, 15, 22}; /* utime, stime, starttime */
	uint64_t v[3];
	int rc = pc_proc_stat_fields(o->target_pid, fields, 3, v);
	if (rc == 0 && v[2] != o->target_starttime)
		rc = PC_ENOTFOUND;
	long hz = sysconf(_SC_CLK_TCK);
	if (rc == 0 && hz <= 0)
		rc = PC_ESYS;
	/* a process that has exited and not yet been reaped (a zombie) has
	 * no memory lines: it ended too */
	if (rc == 0 && !memory(o->target_pid, s))
		rc = PC_ENOTFOUND;
	if (rc == 0) {
		s->cpu_s = (double)(v[0] + v[1]) / (double)hz;
		s->wakeups = wakeups(o->target_pid);
	}
	return rc;
}

static bool self_sample(pc_load_proc_t *s)
{
	struct rusage ru;
	if (getrusage(RUSAGE_SELF, &ru) != 0 || !memory(getpid(), s))
		return false;
	s->cpu_s = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
		   (double)ru.ru_stime.tv_usec / 1e6;
	s->wakeups = (uint64_t)ru.ru_nvcsw;
	return true;
}

int pc_load_proc_check(int pid, uint64_t *starttime)
{
	return pid > 0 ? pc_proc_starttime(pid, starttime) : PC_ENOTFOUND;
}

void pc_load_proc_sample(const pc_load_opts_t *o, pc_load_stats_t *st, uint64_t now_ns)
{
	pc_load_procs_t *p = &st->procs;
	pc_load_proc_t s = {.at_ns = now_ns};
	if (self_sample(&s)) {
		if (!p->self_first.at_ns)
			p->self_first = s;
		p->self_last = s;
	}
	if (!o->target_pid || p->target_gone)
		return;
	s = (pc_load_proc_t){.at_ns = now_ns};
	int rc = target_sample(o, &s);
	if (rc == PC_ENOTFOUND) {
		/* the figures stay those of its last second */
		p->target_gone = true;
		fprintf(stderr, PC_LOAD_CMD ": the target (pid %d) ended during the run\n", o->target_pid);
		return;
	}
	if (rc != 0)
		return;
	if (!p->target_first.at_ns)
		p->target_first = s;
	p->target_prev = p->target_last;
	p->target_last = s;
}

double pc_load_proc_cpu_pct(const pc_load_proc_t *from, const pc_load_proc_t *to)
{
	if (!from->at_ns || to->at_ns <= from->at_ns)
		return 0;
	return (to->cpu_s - from->cpu_s) * 100.0 / ((double)(to->at_ns - from->at_ns) / 1e9);
}
