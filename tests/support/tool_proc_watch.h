/*
 * Watching processes a command left behind, for the exec tests: a pid read
 * from a file the command wrote, whether that very process (same start
 * time) still lives, a bounded wait for its end, and a SIGKILL by pid for
 * one that outlived the wait, so a failing test leaves nothing running.
 */
#ifndef PC_TESTS_TOOL_PROC_WATCH_H
#define PC_TESTS_TOOL_PROC_WATCH_H

#include <criterion/criterion.h>

#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>

#include "test_util.h"

typedef struct watched {
	pid_t pid;
	unsigned long long start; /* /proc/<pid>/stat field 22: tells a reused pid apart */
} watched_t;

/* Every process watched in this test, for watched_kill_all. */
static watched_t watched_seen[64];
static size_t watched_n;

/* Reads /proc/<pid>/stat: its state letter and start time. False if the
 * process is gone. */
static inline bool proc_stat(pid_t pid, char *state, unsigned long long *start)
{
	char path[64], buf[1024];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return false;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	/* The name, in parentheses, may hold anything: parse after the last ')'. */
	char *p = strrchr(buf, ')');
	if (!p || sscanf(p + 2, "%c", state) != 1)
		return false;
	for (int field = 3; field <= 22 && p; field++) /* to the space before field 22 */
		p = strchr(p + 1, ' ');
	return p && sscanf(p + 1, "%llu", start) == 1;
}

/* Alive: there, not a zombie, and the same process as when watched. */
static inline bool watched_alive(const watched_t *w)
{
	char state = 0;
	unsigned long long start = 0;
	return w->start && proc_stat(w->pid, &state, &start) && state != 'Z' && start == w->start;
}

/* The pid in `path` once the file holds one (a command writes it), with its
 * start time (0 when it is gone already: never alive again); waits at most
 * `ms`. pid 0 if the file never held one. */
static inline watched_t watch_pid_file(const char *path, uint64_t ms)
{
	watched_t w = {0};
	uint64_t until = now_ms() + ms;
	do {
		FILE *f = fopen(path, "r");
		int pid = 0;
		if (f) {
			if (fscanf(f, "%d", &pid) != 1)
				pid = 0;
			fclose(f);
		}
		char state;
		if (pid > 0) {
			w.pid = pid;
			if (!proc_stat(pid, &state, &w.start) || state == 'Z')
				w.start = 0;
			if (watched_n < sizeof(watched_seen) / sizeof(watched_seen[0]))
				watched_seen[watched_n++] = w;
			return w;
		}
		sleep_ms(10);
	} while (now_ms() < until);
	return w;
}

/* Waits up to `ms` for the process to end; if it does not, SIGKILLs it
 * (by pid, still the same process) and returns false. */
static inline bool await_gone_or_kill(const watched_t *w, uint64_t ms)
{
	uint64_t until = now_ms() + ms;
	while (watched_alive(w)) {
		if (now_ms() >= until) {
			kill(w->pid, SIGKILL);
			return false;
		}
		sleep_ms(10);
	}
	return true;
}

/* SIGKILLs (by pid) every watched process still alive: a suite's fini,
 * so that a test that failed half-way leaves nothing running. */
static inline void watched_kill_all(void)
{
	for (size_t i = 0; i < watched_n; i++)
		if (watched_alive(&watched_seen[i]))
			kill(watched_seen[i].pid, SIGKILL);
	watched_n = 0;
}

/* The process whose pid a command wrote into `dir`/`name` (waiting up to
 * `ms` for the file); the test fails when none comes. */
static inline watched_t watch_pid_in(const char *dir, const char *name, uint64_t ms)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	watched_t w = watch_pid_file(path, ms);
	cr_assert_gt(w.pid, 0, "no pid in %s", name);
	return w;
}

/* A suite's fini: watches the pids the commands wrote into `names`
 * (NULL-terminated) under `dir` (NULL: nothing ran), then SIGKILLs
 * whatever is still alive, so a test that failed half-way leaves nothing
 * behind. */
static inline void kill_pid_files(const char *dir, const char *const *names)
{
	for (size_t i = 0; dir && names[i]; i++) {
		char path[PATH_MAX];
		snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
		(void)watch_pid_file(path, 0);
	}
	watched_kill_all();
}

#endif
