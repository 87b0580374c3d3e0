/*
 * What this host offers for the cgroup layer of exec (exec_cgroup.h),
 * seen without the code under test: the cgroup2 mount, this process's
 * cgroup under it, whether a child cgroup can be made there, and the
 * command cgroups a given Pincer process left there. A host that can make
 * a cgroup (root with cgroup2 writable, as the CI machines) must see
 * commands contained; one that cannot skips those checks, saying so.
 */
#ifndef PC_TESTS_TOOL_CGROUP_HOST_H
#define PC_TESTS_TOOL_CGROUP_HOST_H

#include <criterion/criterion.h>

#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

static char host_mount[1024]; /* the cgroup2 mount point; "" if none */

/* The cgroup2 mount point (in host_mount) and this process's cgroup
 * directory under it; false if either is missing. */
static inline bool host_own_cgroup(char *dir, size_t cap)
{
	FILE *f = fopen("/proc/self/mountinfo", "r");
	cr_assert_not_null(f);
	char line[4096];
	host_mount[0] = '\0';
	while (!host_mount[0] && fgets(line, sizeof(line), f))
		if (strstr(line, " - cgroup2 ") && sscanf(line, "%*s %*s %*s %*s %1023s", host_mount) != 1)
			host_mount[0] = '\0';
	fclose(f);
	f = fopen("/proc/self/cgroup", "r");
	cr_assert_not_null(f);
	char own[2048] = "";
	while (!own[0] && fgets(line, sizeof(line), f))
		if (strncmp(line, "0::", 3) == 0 && sscanf(line + 3, "%2047s", own) != 1)
			own[0] = '\0';
	fclose(f);
	if (!host_mount[0] || !own[0])
		return false;
	snprintf(dir, cap, "%s%s", host_mount, strcmp(own, "/") ? own : "");
	return true;
}

/* Whether a child cgroup can be made in this process's cgroup. */
static inline bool host_can_make_cgroup(void)
{
	char dir[4096], probe[4200];
	if (!host_own_cgroup(dir, sizeof(dir)))
		return false;
	snprintf(probe, sizeof(probe), "%s/pc-test-probe-%d", dir, (int)getpid());
	if (mkdir(probe, 0755) != 0)
		return false;
	cr_assert_eq(rmdir(probe), 0, "rmdir %s: %s", probe, strerror(errno));
	return true;
}

/* How many command cgroups of the Pincer process `pid` (a child of this
 * one, so in the same cgroup) are there. */
static inline size_t host_cgroups_of(pid_t pid)
{
	char dir[4096], prefix[64];
	if (!host_own_cgroup(dir, sizeof(dir)))
		return 0;
	snprintf(prefix, sizeof(prefix), "pincer-exec-%d-", (int)pid);
	DIR *d = opendir(dir);
	cr_assert_not_null(d, "opendir %s: %s", dir, strerror(errno));
	size_t n = 0;
	for (struct dirent *e; (e = readdir(d));)
		n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
	closedir(d);
	return n;
}

/* Whether the process `pid` runs in a command cgroup. */
static inline bool host_in_command_cgroup(pid_t pid)
{
	char path[64], line[2048];
	snprintf(path, sizeof(path), "/proc/%d/cgroup", (int)pid);
	FILE *f = fopen(path, "r");
	bool in = false;
	while (f && !in && fgets(line, sizeof(line), f))
		in = strncmp(line, "0::", 3) == 0 && strstr(line, "/pincer-exec-");
	if (f)
		fclose(f);
	return in;
}

#endif
