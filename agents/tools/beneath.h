/*
 * Opening a path beneath a directory and never outside it, for the
 * workspace (workspace.h). Two ways, with the same answers:
 *
 *   - pc__beneath_openat2: the kernel's openat2(2) with RESOLVE_BENEATH |
 *     RESOLVE_NO_MAGICLINKS (Linux 5.6 and later);
 *   - pc__beneath_walk: a walk for kernels without it, or where a seccomp
 *     filter denies it. One component at a time, each opened with
 *     O_NOFOLLOW relative to the directory fd of the one before, so the
 *     kernel never follows a symbolic link. A link met on the way is read
 *     (readlinkat) and its target resolved as text, as RESOLVE_BENEATH
 *     would: a relative target that stays beneath is followed, an absolute
 *     one is refused wherever it points (EXDEV), ".." above the start is
 *     refused (EXDEV), more than 40 links is ELOOP. A procfs magic link is
 *     only text to the walk ("/", "/etc/hostname", "pipe:[12]"): it is
 *     refused as absolute or simply not found, never followed.
 *
 * `rel` is relative to `dirfd`; `flags` and `mode` are open(2)'s (O_CLOEXEC
 * is added; O_NOFOLLOW keeps its meaning for the last component). Both
 * return the new fd, or -1 with errno set, as open(2) does.
 *
 * Under a concurrent swap of a component for a link, the walk fails (ELOOP
 * or ENOTDIR) rather than follow it; ".." goes back to a directory by
 * opening the names walked so far again from `dirfd`, one at a time with
 * O_NOFOLLOW | O_DIRECTORY, never through the file system's "..".
 */
#ifndef PINCER_AGENTS_TOOLS_BENEATH_H
#define PINCER_AGENTS_TOOLS_BENEATH_H

#include <sys/types.h>

int pc__beneath_openat2(int dirfd, const char *rel, int flags, mode_t mode);
int pc__beneath_walk(int dirfd, const char *rel, int flags, mode_t mode);

#endif
