/*
 * `pincer load --target-pid PID` (load.h): the target's CPU and memory,
 * and the harness's own, sampled at the run's start, each second and at
 * its end, so the summary can set what the target spent beside what the
 * harness spent to load it. The target's CPU and wake-ups (voluntary
 * context switches) are summed thread by thread over what each did between
 * two samples (/proc/PID/task/TID/schedstat, in ns, and .../status), so a
 * run of a few turns still reads its CPU exactly and a thread that ended
 * takes only its last second along; where the threads cannot be read, the
 * CPU is fields 14 and 15 of /proc/PID/stat, in clock ticks. The
 * harness's are getrusage's; both memories VmRSS and VmHWM of
 * /proc/PID/status.
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

/* One thread's CPU (the first field of its schedstat, in ns) and
 * voluntary context switches: false when it cannot be read (it ended). */
static bool thread_read(int pid, const char *tid, pc_load_thread_t *t)
{
	char path[64], line[256];
	snprintf(path, sizeof(path), "/proc/%d/task/%.16s/schedstat", pid, tid);
	FILE *f = fopen(path, "re");
	if (!f)
		return false;
	unsigned long long ns = 0;
	bool ok = fscanf(f, "%llu", &ns) == 1;
	(void)fclose(f);
	snprintf(path, sizeof(path), "/proc/%d/task/%.16s/status", pid, tid);
	if (!ok || !(f = fopen(path, "re")))
		return false;
	ok = false;
	while (!ok && fgets(line, sizeof(line), f))
		if (!strncmp(line, "voluntary_ctxt_switches:", 24)) {
			t->wakeups = strtoull(line + 24, NULL, 10);
			ok = true;
		}
	(void)fclose(f);
	t->tid = atoi(tid);
	t->cpu_ns = ns;
	return ok;
}

static int by_tid(const void *a, const void *b)
{
	int x = ((const pc_load_thread_t *)a)->tid, y = ((const pc_load_thread_t *)b)->tid;
	return (x > y) - (x < y);
}

/* Reads the target's threads and adds what each did since the last read
 * to the totals (a thread new since then: all it did). A thread that ended
 * since takes its last second along. False when none could be read. */
static bool threads_sample(int pid, pc_load_procs_t *p)
{
	char path[48];
	snprintf(path, sizeof(path), "/proc/%d/task", pid);
	DIR *d = opendir(path);
	if (!d)
		return false;
	size_t n = 0, cap = p->nthreads + 8;
	pc_load_thread_t *cur = malloc(cap * sizeof(*cur));
	const struct dirent *e;
	while (cur && (e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		if (n == cap) {
			pc_load_thread_t *more = realloc(cur, 2 * cap * sizeof(*cur));
			if (!more)
				break;
			cur = more;
			cap *= 2;
		}
		if (thread_read(pid, e->d_name, &cur[n]))
			n++;
	}
	(void)closedir(d);
	if (!cur || n == 0) {
		free(cur);
		return false;
	}
	qsort(cur, n, sizeof(*cur), by_tid);
	bool first = p->threads == NULL;
	for (size_t i = 0; i < n && !first; i++) {
		const pc_load_thread_t *was = bsearch(&cur[i], p->threads, p->nthreads, sizeof(*cur), by_tid);
		uint64_t cpu0 = was ? was->cpu_ns : 0, w0 = was ? was->wakeups : 0;
		p->cpu_ns += cur[i].cpu_ns >= cpu0 ? cur[i].cpu_ns - cpu0 : 0;
		p->wakeups += cur[i].wakeups >= w0 ? cur[i].wakeups - w0 : 0;
	}
	free(p->threads);
	p->threads = cur;
	p->nthreads = n;
	return true;
}

/* The target now: PC_ENOTFOUND once it is gone (or its pid is another
 * process's). Its CPU and wake-ups are summed thread by thread (ns
 * precise) when its threads can be read, else its CPU is the process's
 * clock ticks. */
static int target_sample(const pc_load_opts_t *o, pc_load_procs_t *p, pc_load_proc_t *s)
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
	if (rc != 0)
		return rc;
	bool first = !p->target_first.at_ns;
	bool threads = threads_sample(o->target_pid, p);
	if (first)
		p->per_thread = threads;
	s->cpu_s = p->per_thread ? (double)p->cpu_ns / 1e9 : (double)(v[0] + v[1]) / (double)hz;
	s->wakeups = p->wakeups;
	return 0;
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
	int rc = target_sample(o, p, &s);
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
