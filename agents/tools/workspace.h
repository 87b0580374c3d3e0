/*
 * Workspace confinement: every path a tool receives is resolved inside the
 * agent's workspace root, and nothing outside it can be opened, created or
 * replaced through it.
 *
 * A path is first checked as text (pc_workspace_resolve):
 *   - empty, containing a NUL byte, or PATH_MAX bytes or longer: refused;
 *   - "~" and "~/...": refused ("~" is not expanded; other names that
 *     start with '~', such as "~notes", are ordinary names);
 *   - absolute: accepted only when it lies under the root (the root as
 *     given or its realpath), then made relative to it;
 *   - "//" and "." components are dropped; a ".." that climbs above the
 *     root is refused ("a/../b" is fine; "a/../../b" is not). A ".." that
 *     would stay inside only after following a symbolic link is refused
 *     too: the text check cannot see links and errs on the safe side.
 * Then the kernel resolves it with openat2(2), RESOLVE_BENEATH |
 * RESOLVE_NO_MAGICLINKS, from a directory fd of the root opened once per
 * handle. So a symbolic link anywhere in the path (last component or a
 * middle one, directly or through a chain) that leads outside the root is
 * refused, relative links that stay inside are followed, and procfs magic
 * links (/proc/self/root, /proc/self/fd/N) are never followed. Absolute
 * symbolic links are refused wherever they point, as RESOLVE_BENEATH does:
 * the kernel cannot tell which of them stay inside. The check and the use
 * are one system call: nothing can swap a component in between.
 *
 * Without openat2 (Linux before 5.6, or a seccomp filter that answers it
 * with ENOSYS or EPERM), decided once in pc_workspace_open, paths are
 * walked one component at a time from the root fd, each opened with
 * O_NOFOLLOW (beneath.h). Links are then resolved by hand with the same
 * outcome: relative ones that stay inside are followed, absolute ones and
 * ones that lead out are refused, magic links are never followed. A
 * component swapped for a link during the walk makes the open fail.
 *
 * A regular file with more than one hard link is refused (PC_EINVAL)
 * wherever it is opened: another of its names may lie outside the
 * workspace, where no path check can see it. The check is made on the
 * opened fd (pc_workspace_check_fd), so a file swapped in after the path
 * was resolved is checked too. Directories are not concerned.
 *
 * Errors: 0, or
 *   - PC_EINVAL: the path is refused (escape, magic link, symbolic link
 *     loop, malformed path, hard-linked file); the message says why;
 *   - PC_ENOTFOUND: a component does not exist (errno ENOENT);
 *   - PC_ESYS: any other failure, errno tells which (ENOTDIR, EISDIR,
 *     EACCES, ...);
 *   - PC_ENOMEM.
 * Every failure writes a message naming the path and the reason into
 * err[0..errlen) ("path escapes the workspace: ../x"), when err is not
 * NULL. PC_WORKSPACE_ERR_MAX bytes are always enough.
 *
 * Threads: a handle may be used from any one thread at a time; nothing in
 * it changes after pc_workspace_open, so concurrent calls on one handle
 * are safe too.
 */
#ifndef PINCER_AGENTS_TOOLS_WORKSPACE_H
#define PINCER_AGENTS_TOOLS_WORKSPACE_H

#include <limits.h>
#include <stddef.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "runtime/error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PC_WORKSPACE_ERR_MAX 512u

typedef struct pc_workspace pc_workspace_t;

/* Opens the workspace rooted at `root`, which must exist and be a
 * directory (a symbolic link to one is followed once, here). The caller
 * frees *out with pc_workspace_free. */
int pc_workspace_open(const char *root, pc_workspace_t **out, char *err, size_t errlen);
void pc_workspace_free(pc_workspace_t *ws);

/* The root's canonical absolute path (realpath), owned by `ws`. */
const char *pc_workspace_root(const pc_workspace_t *ws);

/* The text check alone: path[0..len) (any bytes) as a normalised path
 * relative to the root, "." for the root itself, into rel[0..rellen)
 * (PATH_MAX bytes are enough). Touches no file. */
int pc_workspace_resolve(const pc_workspace_t *ws, const char *path, size_t len, char *rel, size_t rellen, char *err,
			 size_t errlen);

/* Opens `path` confined to the workspace, with open(2) `flags` (O_CLOEXEC
 * is added) and `mode` (used with O_CREAT). Symbolic links are followed
 * while they stay inside; O_NOFOLLOW keeps its meaning for the last
 * component. A regular file with more than one hard link is refused, and
 * with O_TRUNC it is truncated only once it passed that check. The caller
 * closes *fd. */
int pc_workspace_open_file(const pc_workspace_t *ws, const char *path, int flags, mode_t mode, int *fd, char *err,
			   size_t errlen);

/* Checks a file opened through the workspace (with openat relative to a
 * directory from pc_workspace_open_parent, say): its fstat into *st, and
 * PC_EINVAL, with a message naming `path`, when it is a regular file with
 * more than one hard link. */
int pc_workspace_check_fd(int fd, const char *path, struct stat *st, char *err, size_t errlen);

/* Creates the missing directories above the last component of `path`
 * (mode 0777 less the umask), each one inside the workspace: mkdirat with
 * a single name in its parent, itself opened beneath the root. Components
 * are created in order, so "a/../b/f" creates "a" as well as "b". */
int pc_workspace_make_parents(const pc_workspace_t *ws, const char *path, char *err, size_t errlen);

/* Where a file at `path` lives, for replacing it: opens its parent
 * directory (O_RDONLY | O_DIRECTORY, confined) into *dirfd and writes the
 * last component into name[0..NAME_MAX]. When that last component is a
 * symbolic link, it is followed (at most 40 links) as long as it stays
 * inside, and the link's final target is returned instead; one that leads
 * outside, or is absolute, is refused. A target that does not exist yet
 * is fine. The last component must name an entry, not "." or "..".
 * Operations relative to *dirfd with that single name (openat with
 * O_NOFOLLOW or O_EXCL, renameat, unlinkat) cannot leave the workspace.
 * The caller closes *dirfd. */
int pc_workspace_open_parent(const pc_workspace_t *ws, const char *path, int *dirfd, char name[NAME_MAX + 1],
			     char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
