/*
 * cgroup v2 containment of exec commands (exec_cgroup.h).
 */
#include "exec_cgroup.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define NAME_PREFIX "pincer-exec-"
/* pc__exec_cgroup_end gives up after this many rounds of this length. */
#define END_ROUNDS 400
#define END_ROUND_NS 5000000L

/* Numbers the cgroups of this process. */
static uint64_t next_n;

/* ---- finding the cgroup ------------------------------------------------------ */

/* The mount point and root (the hierarchy's path mounted there) of the
 * first cgroup2 mount in /proc/self/mountinfo; false if there is none, or
 * its mount point has escaped characters (a space reads as \040). */
static bool cgroup2_mount(char *mnt, size_t mnt_cap, char *root, size_t root_cap)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	if (!f)
		return false;
	char line[4096];
	bool found = false;
	while (!found && fgets(line, sizeof(line), f)) {
		/* "id parent maj:min root mountpoint options... - fstype source opts" */
		char r[1024], m[1024];
		const char *sep = strstr(line, " - ");
		found = sep && strncmp(sep + 3, "cgroup2 ", 8) == 0 &&
			sscanf(line, "%*s %*s %*s %1023s %1023s", r, m) == 2 && !strchr(m, '\\') && !strchr(r, '\\') &&
			strlen(m) < mnt_cap && strlen(r) < root_cap;
		if (found) {
			strcpy(mnt, m);
			strcpy(root, r);
		}
	}
	fclose(f);
	return found;
}

/* This process's cgroup in the v2 hierarchy: the "0::" line of
 * /proc/self/cgroup. */
static bool own_cgroup(char *path, size_t cap)
{
	FILE *f = fopen("/proc/self/cgroup", "re");
	if (!f)
		return false;
	char line[4096];
	bool found = false;
	while (!found && fgets(line, sizeof(line), f)) {
		if (strncmp(line, "0::/", 4) != 0)
			continue;
		size_t n = strcspn(line + 3, "\n");
		/* A cgroup removed under us reads "... (deleted)": unusable. */
		found = n < cap && !strstr(line, " (deleted)");
		if (found) {
			memcpy(path, line + 3, n);
			path[n] = '\0';
		}
	}
	fclose(f);
	return found;
}

/* Whether a child cgroup can be made in `dir`. */
static bool can_make_child(const char *dir)
{
	char probe[4096];
	int n = snprintf(probe, sizeof(probe), "%s/" NAME_PREFIX "probe-%ld", dir, (long)getpid());
	if (n < 0 || (size_t)n >= sizeof(probe) || mkdir(probe, 0755) != 0)
		return false;
	return rmdir(probe) == 0;
}

char *pc__exec_cgroup_base(void)
{
	char mnt[1024], root[1024], own[2048];
	if (!cgroup2_mount(mnt, sizeof(mnt), root, sizeof(root)) || !own_cgroup(own, sizeof(own)))
		return NULL;
	/* The mount shows the hierarchy from `root` down (a container may
	 * mount only its part): the own cgroup must be below it. */
	size_t rl = strcmp(root, "/") == 0 ? 0 : strlen(root);
	if (strncmp(own, root, rl) != 0 || (own[rl] != '/' && own[rl] != '\0'))
		return NULL;
	const char *rel = own + rl;
	char *base = NULL;
	if (asprintf(&base, "%s%s", mnt, strcmp(rel, "/") == 0 ? "" : rel) < 0)
		return NULL;
	if (!can_make_child(base)) {
		free(base);
		return NULL;
	}
	return base;
}

int pc__exec_cgroup_make(const char *base, char **path)
{
	uint64_t n = __atomic_add_fetch(&next_n, 1, __ATOMIC_RELAXED);
	char *p = NULL;
	if (asprintf(&p, "%s/" NAME_PREFIX "%ld-%llu", base, (long)getpid(), (unsigned long long)n) < 0)
		return ENOMEM;
	if (mkdir(p, 0755) != 0) {
		int err = errno;
		free(p);
		return err;
	}
	*path = p;
	return 0;
}

/* ---- ending one -------------------------------------------------------------- */

/* Writes `value` into the cgroup's `file`; false if it cannot. */
static bool write_file(const char *dir, const char *file, const char *value)
{
	char path[4096];
	int n = snprintf(path, sizeof(path), "%s/%s", dir, file);
	if (n < 0 || (size_t)n >= sizeof(path))
		return false;
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	size_t len = strlen(value);
	ssize_t w;
	do
		w = write(fd, value, len);
	while (w < 0 && errno == EINTR);
	close(fd);
	return w == (ssize_t)len;
}

int pc__exec_cgroup_kill_listed(const char *path)
{
	/* Frozen members (cgroup.freeze, 5.2) cannot exit on their own, so
	 * a pid read below is not freed and reused before its SIGKILL;
	 * without the freezer that window is left, and small. */
	(void)write_file(path, "cgroup.freeze", "1");
	char procs[4096];
	int n = snprintf(procs, sizeof(procs), "%s/cgroup.procs", path);
	if (n < 0 || (size_t)n >= sizeof(procs))
		return -1;
	FILE *f = fopen(procs, "re");
	if (!f)
		return -1;
	int found = 0;
	long pid;
	while (fscanf(f, "%ld", &pid) == 1) {
		/* ESRCH: it has ended meanwhile. */
		(void)kill((pid_t)pid, SIGKILL);
		found++;
	}
	fclose(f);
	return found;
}

void pc__exec_cgroup_end(const char *path)
{
	for (int round = 0; round < END_ROUNDS; round++) {
		/* Again each round: a member may have been forking while the
		 * last one was killed (cgroup.kill itself leaves none). */
		if (!write_file(path, "cgroup.kill", "1"))
			(void)pc__exec_cgroup_kill_listed(path);
		/* EBUSY while a killed member has not exited yet; anything
		 * else will not change by waiting. */
		if (rmdir(path) == 0 || errno != EBUSY)
			return;
		struct timespec ts = {0, END_ROUND_NS};
		(void)nanosleep(&ts, NULL);
	}
}
