/*
 * Workspace confinement (workspace.h): a text check of each path, then the
 * kernel's openat2(2) with RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS from the
 * root's directory fd, or, where openat2 is missing, a walk that opens one
 * component at a time (beneath.h). Regular files with more than one hard
 * link are refused on the opened fd.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "beneath.h"
#include "workspace.h"

/* Symbolic links followed at the last component (as the kernel's MAXSYMLINKS). */
#define MAX_LINK_HOPS 40
/* What EXDEV means once the text check has passed. */
#define ESCAPE_BY_LINK "path escapes the workspace (a symbolic link in it leads outside or is absolute)"
/* How much of a path a message quotes. */
#define SHOWN_MAX 200

struct pc_workspace {
	int rootfd;    /* O_PATH | O_DIRECTORY */
	bool openat2;  /* the kernel offers openat2; else paths are walked */
	char *real;    /* realpath of the root */
	char *given;   /* the root as given, normalised, when it is absolute; else NULL */
};

/* ---- messages ------------------------------------------------------------- */

static void set_err(char *err, size_t errlen, const char *why, const char *path, size_t len)
{
	if (!err || errlen == 0)
		return;
	int shown = len > SHOWN_MAX ? SHOWN_MAX : (int)len;
	snprintf(err, errlen, "%s: %.*s%s", why, shown, path, len > SHOWN_MAX ? "..." : "");
}

/* Maps a failed system call on `path` to a code and a message; errno is
 * kept for the caller. */
static int fail_errno(int e, const char *path, char *err, size_t errlen)
{
	size_t len = strlen(path);
	int rc = PC_ESYS;
	switch (e) {
	case EXDEV:
		rc = PC_EINVAL;
		set_err(err, errlen, ESCAPE_BY_LINK, path, len);
		break;
	case ELOOP:
		rc = PC_EINVAL;
		set_err(err, errlen, "path has a symbolic link loop or a link that cannot be followed safely", path,
			len);
		break;
	case ENOENT:
		rc = PC_ENOTFOUND;
		set_err(err, errlen, "no such file or directory", path, len);
		break;
	case ENAMETOOLONG:
		rc = PC_EINVAL;
		set_err(err, errlen, "path or one of its names is too long", path, len);
		break;
	case ENOTDIR:
		set_err(err, errlen, "not a directory (a component of the path is a file)", path, len);
		break;
	case EISDIR:
		set_err(err, errlen, "is a directory", path, len);
		break;
	case EACCES:
	case EPERM:
		set_err(err, errlen, "permission denied", path, len);
		break;
	default:
		set_err(err, errlen, strerror(e), path, len);
		break;
	}
	errno = e;
	return rc;
}

/* ---- the text check ---------------------------------------------------------- */

/*
 * Copies path[0..len) into out without empty and "." components, with a
 * leading '/' when absolute. The result is at most len + 1 bytes.
 */
static void normalize(const char *path, size_t len, char *out, bool *absolute)
{
	size_t o = 0;
	*absolute = len > 0 && path[0] == '/';
	size_t i = 0;
	while (i < len) {
		while (i < len && path[i] == '/')
			i++;
		size_t start = i;
		while (i < len && path[i] != '/')
			i++;
		size_t n = i - start;
		if (n == 0 || (n == 1 && path[start] == '.'))
			continue;
		if (o > 0 || *absolute)
			out[o++] = '/';
		memcpy(out + o, path + start, n);
		o += n;
	}
	if (o == 0 && *absolute)
		out[o++] = '/';
	out[o] = '\0';
}

/* The rest of normalised absolute `abs` below `root` (also normalised),
 * or NULL when it is not under it. "" for the root itself. */
static const char *under_root(const char *abs, const char *root)
{
	if (!root)
		return NULL;
	if (strcmp(root, "/") == 0)
		return abs + 1;
	size_t n = strlen(root);
	if (strncmp(abs, root, n) != 0 || (abs[n] != '\0' && abs[n] != '/'))
		return NULL;
	return abs[n] == '/' ? abs + n + 1 : abs + n;
}

/* Whether the ".." components of normalised relative `rel` ever climb
 * above its start. */
static bool climbs_out(const char *rel)
{
	long depth = 0;
	const char *p = rel;
	while (*p) {
		const char *slash = strchr(p, '/');
		size_t n = slash ? (size_t)(slash - p) : strlen(p);
		depth += (n == 2 && p[0] == '.' && p[1] == '.') ? -1 : 1;
		if (depth < 0)
			return true;
		p += n + (slash ? 1 : 0);
	}
	return false;
}

static int check_text(const char *path, size_t len, char *err, size_t errlen)
{
	if (len == 0) {
		set_err(err, errlen, "path is empty", "", 0);
		return PC_EINVAL;
	}
	if (memchr(path, '\0', len)) {
		set_err(err, errlen, "path contains a NUL byte", path, strlen(path));
		return PC_EINVAL;
	}
	if (len >= PATH_MAX) {
		set_err(err, errlen, "path is too long", path, len);
		return PC_EINVAL;
	}
	if (path[0] == '~' && (len == 1 || path[1] == '/')) {
		set_err(err, errlen, "'~' is not expanded; give a path relative to the workspace", path, len);
		return PC_EINVAL;
	}
	return 0;
}

int pc_workspace_resolve(const pc_workspace_t *ws, const char *path, size_t len, char *rel, size_t rellen, char *err,
			 size_t errlen)
{
	if (!ws || !path || !rel || rellen == 0) {
		set_err(err, errlen, "invalid argument", "", 0);
		return PC_EINVAL;
	}
	int rc = check_text(path, len, err, errlen);
	if (rc != 0)
		return rc;
	char norm[PATH_MAX + 1];
	bool absolute = false;
	normalize(path, len, norm, &absolute);
	const char *r = norm;
	if (absolute) {
		r = under_root(norm, ws->real);
		if (!r)
			r = under_root(norm, ws->given);
		if (!r) {
			char why[PATH_MAX + 64];
			snprintf(why, sizeof(why), "path is outside the workspace (%s)", ws->real);
			set_err(err, errlen, why, path, len);
			return PC_EINVAL;
		}
	}
	if (climbs_out(r)) {
		set_err(err, errlen, "path escapes the workspace", path, len);
		return PC_EINVAL;
	}
	if (r[0] == '\0')
		r = ".";
	if (strlen(r) >= rellen) {
		set_err(err, errlen, "path is too long", path, len);
		return PC_EINVAL;
	}
	strcpy(rel, r);
	return 0;
}

/* ---- opening beneath the root ------------------------------------------------ */

/* Opens rel beneath the root, the kernel's way or by the walk. */
static int beneath(const pc_workspace_t *ws, const char *rel, int flags, mode_t mode)
{
	return ws->openat2 ? pc__beneath_openat2(ws->rootfd, rel, flags, mode)
			   : pc__beneath_walk(ws->rootfd, rel, flags, mode);
}

int pc_workspace_check_fd(int fd, const char *path, struct stat *st, char *err, size_t errlen)
{
	if (fstat(fd, st) != 0)
		return fail_errno(errno, path, err, errlen);
	if (S_ISREG(st->st_mode) && st->st_nlink > 1) {
		char why[128];
		snprintf(why, sizeof(why),
			 "file refused: it has %ju hard links, and another of its names may lie outside the workspace",
			 (uintmax_t)st->st_nlink);
		set_err(err, errlen, why, path, strlen(path));
		return PC_EINVAL;
	}
	return 0;
}

int pc_workspace_open_file(const pc_workspace_t *ws, const char *path, int flags, mode_t mode, int *fd, char *err,
			   size_t errlen)
{
	if (!ws || !path || !fd) {
		set_err(err, errlen, "invalid argument", "", 0);
		return PC_EINVAL;
	}
	char rel[PATH_MAX];
	int rc = pc_workspace_resolve(ws, path, strlen(path), rel, sizeof(rel), err, errlen);
	if (rc != 0)
		return rc;
	/* O_TRUNC waits for the link check: the kernel would truncate a
	 * hard-linked file before it could be refused. */
	int f = beneath(ws, rel, flags & ~O_TRUNC, mode);
	if (f < 0)
		return fail_errno(errno, path, err, errlen);
	struct stat st;
	rc = pc_workspace_check_fd(f, path, &st, err, errlen);
	if (rc == 0 && (flags & O_TRUNC) && S_ISREG(st.st_mode) && ftruncate(f, 0) != 0)
		rc = fail_errno(errno, path, err, errlen);
	if (rc != 0) {
		int e = errno;
		close(f);
		errno = e;
		return rc;
	}
	*fd = f;
	return 0;
}

/* The length of the directory part of `rel` (0 when it has none). */
static size_t dir_len(const char *rel)
{
	const char *slash = strrchr(rel, '/');
	return slash ? (size_t)(slash - rel) : 0;
}

int pc_workspace_make_parents(const pc_workspace_t *ws, const char *path, char *err, size_t errlen)
{
	if (!ws || !path) {
		set_err(err, errlen, "invalid argument", "", 0);
		return PC_EINVAL;
	}
	char rel[PATH_MAX];
	int rc = pc_workspace_resolve(ws, path, strlen(path), rel, sizeof(rel), err, errlen);
	if (rc != 0)
		return rc;
	size_t end = dir_len(rel);
	int parent = ws->rootfd; /* the directory holding the next component */
	size_t i = 0;
	while (rc == 0 && i < end) {
		size_t next = i;
		while (next < end && rel[next] != '/')
			next++;
		char saved = rel[next];
		rel[next] = '\0';
		int d = beneath(ws, rel, O_PATH | O_DIRECTORY, 0);
		if (d < 0 && errno == ENOENT) {
			/* A single name relative to a confined directory: mkdirat
			 * creates it there or fails, it never follows a link. */
			if (mkdirat(parent, rel + i, 0777) != 0 && errno != EEXIST)
				rc = fail_errno(errno, path, err, errlen);
			else
				d = beneath(ws, rel, O_PATH | O_DIRECTORY, 0);
		}
		if (rc == 0 && d < 0)
			rc = fail_errno(errno, path, err, errlen);
		rel[next] = saved;
		if (parent != ws->rootfd)
			close(parent);
		parent = d >= 0 ? d : ws->rootfd;
		i = next + 1;
	}
	if (parent != ws->rootfd)
		close(parent);
	return rc;
}

/*
 * The next path to try after the last component of `rel` turned out to be
 * a link to `target`: the target read from the link's directory. Written
 * back into rel as a normalised relative path; refused when it leads out.
 */
static int follow_link(const pc_workspace_t *ws, char *rel, const char *target, const char *path, char *err,
		       size_t errlen)
{
	char next[2 * PATH_MAX + 2];
	size_t dl = dir_len(rel);
	if (dl == 0)
		snprintf(next, sizeof(next), "%s", target);
	else
		snprintf(next, sizeof(next), "%.*s/%s", (int)dl, rel, target);
	/* Absolute targets are refused as RESOLVE_BENEATH refuses them. */
	int rc = target[0] == '/' ? PC_EINVAL : pc_workspace_resolve(ws, next, strlen(next), rel, PATH_MAX, NULL, 0);
	if (rc != 0)
		set_err(err, errlen, ESCAPE_BY_LINK, path, strlen(path));
	return rc;
}

int pc_workspace_open_parent(const pc_workspace_t *ws, const char *path, int *dirfd, char name[NAME_MAX + 1],
			     char *err, size_t errlen)
{
	if (!ws || !path || !dirfd || !name) {
		set_err(err, errlen, "invalid argument", "", 0);
		return PC_EINVAL;
	}
	char rel[PATH_MAX];
	int rc = pc_workspace_resolve(ws, path, strlen(path), rel, sizeof(rel), err, errlen);
	for (int hop = 0; rc == 0; hop++) {
		size_t dl = dir_len(rel);
		const char *last = dl ? rel + dl + 1 : rel;
		if (strcmp(last, "..") == 0 || strcmp(last, ".") == 0) {
			set_err(err, errlen, "path names a directory, not a file", path, strlen(path));
			return PC_EINVAL;
		}
		size_t ll = strlen(last);
		if (ll > NAME_MAX)
			return fail_errno(ENAMETOOLONG, path, err, errlen);
		if (hop > MAX_LINK_HOPS) {
			set_err(err, errlen, "too many symbolic links", path, strlen(path));
			return PC_EINVAL;
		}
		char dir[PATH_MAX];
		snprintf(dir, sizeof(dir), "%.*s", (int)(dl ? dl : 1), dl ? rel : ".");
		int d = beneath(ws, dir, O_RDONLY | O_DIRECTORY, 0);
		if (d < 0)
			return fail_errno(errno, path, err, errlen);
		char target[PATH_MAX];
		ssize_t n = readlinkat(d, last, target, sizeof(target));
		if (n < 0 && (errno == EINVAL || errno == ENOENT)) {
			/* Not a link, or nothing there yet: this is the place. */
			memcpy(name, last, ll + 1);
			*dirfd = d;
			return 0;
		}
		int e = errno;
		close(d);
		if (n < 0)
			return fail_errno(e, path, err, errlen);
		if ((size_t)n >= sizeof(target))
			return fail_errno(ENAMETOOLONG, path, err, errlen);
		target[n] = '\0';
		rc = follow_link(ws, rel, target, path, err, errlen);
	}
	return rc;
}

/* ---- the handle ------------------------------------------------------------------- */

/* The root as given, normalised, when it is absolute (else NULL in *out). */
static int given_root(const char *root, char **out)
{
	*out = NULL;
	size_t len = strlen(root);
	if (root[0] != '/' || len >= PATH_MAX)
		return 0;
	char norm[PATH_MAX + 1];
	bool absolute = false;
	normalize(root, len, norm, &absolute);
	*out = strdup(norm);
	return *out ? 0 : PC_ENOMEM;
}

static int open_root(pc_workspace_t *ws, const char *root, char *err, size_t errlen)
{
	ws->rootfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (ws->rootfd < 0) {
		int rc = fail_errno(errno, root, err, errlen);
		if (errno == ENOTDIR)
			set_err(err, errlen, "workspace is not a directory", root, strlen(root));
		else if (errno == ENOENT)
			set_err(err, errlen, "workspace does not exist", root, strlen(root));
		return rc;
	}
	/* Decided once per handle: without openat2 (ENOSYS), or where a
	 * seccomp filter denies it (ENOSYS, or EPERM as older container
	 * runtimes answer unknown system calls), paths are walked instead. */
	int probe = pc__beneath_openat2(ws->rootfd, ".", O_PATH | O_DIRECTORY, 0);
	if (probe < 0 && errno != ENOSYS && errno != EPERM)
		return fail_errno(errno, root, err, errlen);
	ws->openat2 = probe >= 0;
	if (probe >= 0)
		close(probe);
	ws->real = realpath(root, NULL);
	if (!ws->real)
		return errno == ENOMEM ? PC_ENOMEM : fail_errno(errno, root, err, errlen);
	return given_root(root, &ws->given);
}

int pc_workspace_open(const char *root, pc_workspace_t **out, char *err, size_t errlen)
{
	if (!root || !out || root[0] == '\0') {
		set_err(err, errlen, "workspace root is missing", "", 0);
		return PC_EINVAL;
	}
	*out = NULL;
	pc_workspace_t *ws = calloc(1, sizeof(*ws));
	if (!ws)
		return PC_ENOMEM;
	ws->rootfd = -1;
	int rc = open_root(ws, root, err, errlen);
	if (rc != 0) {
		int e = errno;
		pc_workspace_free(ws);
		errno = e;
		return rc;
	}
	*out = ws;
	return 0;
}

void pc_workspace_free(pc_workspace_t *ws)
{
	if (!ws)
		return;
	if (ws->rootfd >= 0)
		close(ws->rootfd);
	free(ws->real);
	free(ws->given);
	free(ws);
}

const char *pc_workspace_root(const pc_workspace_t *ws)
{
	return ws ? ws->real : NULL;
}
