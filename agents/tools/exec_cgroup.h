/*
 * cgroup v2 containment of `exec` commands: a layer over the supervisor
 * (exec_supervisor.h), used where a cgroup can be made, never required.
 *
 * The supervisor's subtree holds everything a command starts unless the
 * command kills or stops the supervisor itself (it runs as the same
 * user); what it left behind then goes to init. A cgroup has no such
 * hole: a process cannot leave it without write access to another
 * cgroup's cgroup.procs, and whoever reaps the supervisor kills what is
 * left in it, so the tree ends even when the supervisor died first.
 *
 * Where: a child of Pincer's own cgroup (the "0::" line of
 * /proc/self/cgroup, under the cgroup2 mount of /proc/self/mountinfo),
 * one per command, named pincer-exec-<pid>-<n>. Whether such a child can
 * be made is probed once (pc__exec_cgroup_base); a command whose cgroup
 * cannot be made (EACCES, ENOSPC, ...) runs without one. Only cgroups
 * made here are ever killed or removed.
 *
 * Threads: any; nothing here is async-signal-safe (the command's child
 * joins its cgroup itself: exec_supervisor.c).
 */
#ifndef PINCER_AGENTS_TOOLS_EXEC_CGROUP_H
#define PINCER_AGENTS_TOOLS_EXEC_CGROUP_H

#ifdef __cplusplus
extern "C" {
#endif

/* The cgroup under which commands' cgroups can be made (probed with a
 * mkdir and rmdir there), or NULL when there is none: no cgroup2 mount,
 * no "0::" line, no right to make a child. The caller frees it. */
char *pc__exec_cgroup_base(void);

/* Makes a new command cgroup under `base`; 0 with *path (the caller's, to
 * give to pc__exec_cgroup_end), or an errno value. */
int pc__exec_cgroup_make(const char *base, char **path);

/* SIGKILLs every process in the cgroup at `path`, with cgroup.kill where
 * the kernel has it (5.14), else pid by pid from cgroup.procs, until it is
 * empty, and removes it; bounded (about 2 s). Frees nothing. */
void pc__exec_cgroup_end(const char *path);

/* The fallback of pc__exec_cgroup_end for kernels without cgroup.kill:
 * SIGKILLs each pid listed in `path`/cgroup.procs once. How many it
 * found, or -1 when the list cannot be read. */
int pc__exec_cgroup_kill_listed(const char *path);

#ifdef __cplusplus
}
#endif
#endif
