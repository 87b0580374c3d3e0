/*
 * Opening a path beneath a directory (beneath.h): openat2(2), or a walk of
 * one component at a time that never lets the kernel follow a link.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <linux/openat2.h>

#include "beneath.h"

/* openat2 returns EAGAIN when a concurrent rename or mount might have
 * fooled its ".." check; it is safe to simply try again. */
#define MAX_EAGAIN_RETRIES 16
/* Symbolic links followed in one walk (as the kernel's MAXSYMLINKS). */
#define MAX_LINK_HOPS 40

int pc__beneath_openat2(int dirfd, const char *rel, int flags, mode_t mode)
{
	struct open_how how = {
		.flags = (uint64_t)(unsigned)(flags | O_CLOEXEC),
		/* openat2 wants mode 0 unless a file may be created. */
		.mode = ((flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE) ? mode : 0,
		.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS,
	};
	for (int i = 0;; i++) {
		long fd = syscall(SYS_openat2, dirfd, rel, &how, sizeof(how));
		if (fd >= 0)
			return (int)fd;
		if ((errno != EAGAIN && errno != EINTR) || i >= MAX_EAGAIN_RETRIES)
			return -1;
	}
}

/* ---- the walk ---------------------------------------------------------------- */

typedef struct walk {
	int start;           /* the directory everything stays beneath (not owned) */
	int cur;             /* the directory reached: start, or an owned O_PATH fd */
	char done[PATH_MAX]; /* the names from start to cur, '/'-separated; only directories, never links */
	size_t done_len;
	char left[PATH_MAX]; /* what is left to resolve */
	size_t pos;          /* the next component of left */
	int hops;
} walk_t;

static int fail(int e)
{
	errno = e;
	return -1;
}

static void set_cur(walk_t *w, int fd)
{
	if (w->cur != w->start)
		close(w->cur);
	w->cur = fd;
}

/* Opens the directory `names` ('/'-separated, not empty) below start, one
 * name at a time with O_NOFOLLOW: a name that is no longer a directory (a
 * link swapped in, say) makes it fail. */
static int reopen(int start, const char *names)
{
	int d = start;
	const char *p = names;
	while (*p) {
		const char *slash = strchr(p, '/');
		size_t n = slash ? (size_t)(slash - p) : strlen(p);
		char name[NAME_MAX + 1];
		memcpy(name, p, n);
		name[n] = '\0';
		int next = openat(d, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		int e = errno;
		if (d != start)
			close(d);
		if (next < 0)
			return fail(e);
		d = next;
		p += n + (slash ? 1 : 0);
	}
	return d;
}

/* "..": back to the directory before cur, refused above start. */
static int climb(walk_t *w)
{
	if (w->done_len == 0)
		return fail(EXDEV);
	char *slash = strrchr(w->done, '/');
	w->done_len = slash ? (size_t)(slash - w->done) : 0;
	w->done[w->done_len] = '\0';
	int d = w->done_len ? reopen(w->start, w->done) : w->start;
	if (d < 0)
		return -1;
	set_cur(w, d);
	return 0;
}

/* Replaces the component just taken, a link (name in dirfd) in cur, by
 * the link's target: left becomes target/rest. */
static int follow(walk_t *w, int dirfd, const char *name)
{
	char target[PATH_MAX];
	ssize_t n = readlinkat(dirfd, name, target, sizeof(target));
	if (n < 0)
		return -1;
	if ((size_t)n >= sizeof(target))
		return fail(ENAMETOOLONG);
	if (n == 0)
		return fail(ENOENT);
	target[n] = '\0';
	if (++w->hops > MAX_LINK_HOPS)
		return fail(ELOOP);
	if (target[0] == '/')
		return fail(EXDEV);
	const char *rest = w->left + w->pos;
	size_t rl = strlen(rest);
	size_t sep = rl ? 1 : 0;
	if ((size_t)n + sep + rl >= sizeof(w->left))
		return fail(ENAMETOOLONG);
	/* rest lies inside left: move it first, then put the target (and a
	 * '/' when something follows) in front of it. */
	memmove(w->left + n + sep, rest, rl + 1);
	memcpy(w->left, target, (size_t)n);
	if (sep)
		w->left[n] = '/';
	w->pos = 0;
	return 0;
}

/* A component before the last one: a directory to enter, or a link to
 * follow. */
static int step(walk_t *w, const char *name)
{
	int fd = openat(w->cur, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -1;
	struct stat st;
	int rc = fstat(fd, &st);
	int e = errno;
	if (rc == 0 && S_ISLNK(st.st_mode)) {
		/* An O_PATH fd of a link reads it with an empty name. */
		rc = follow(w, fd, "");
		e = errno;
	} else if (rc == 0 && !S_ISDIR(st.st_mode)) {
		rc = -1;
		e = ENOTDIR;
	} else if (rc == 0) {
		size_t n = strlen(name);
		if (w->done_len + 1 + n >= sizeof(w->done)) {
			rc = -1;
			e = ENAMETOOLONG;
		} else {
			w->done_len += (size_t)sprintf(w->done + w->done_len, "%s%s", w->done_len ? "/" : "", name);
			set_cur(w, fd);
			return 0;
		}
	}
	close(fd);
	return rc == 0 ? 0 : fail(e);
}

/* The last component, opened with O_NOFOLLOW. When the caller did not ask
 * for O_NOFOLLOW and it is a link, *fd stays -1 and left holds the link's
 * target: the walk goes on. */
static int last(walk_t *w, const char *name, int flags, mode_t mode, int *fd)
{
	*fd = openat(w->cur, name, flags | O_NOFOLLOW | O_CLOEXEC, mode);
	if (flags & O_NOFOLLOW)
		return *fd < 0 ? -1 : 0;
	int e = errno;
	bool maybe_link;
	if (*fd < 0) {
		/* A link under O_NOFOLLOW is ELOOP, or ENOTDIR with O_DIRECTORY. */
		maybe_link = e == ELOOP || e == ENOTDIR;
	} else {
		struct stat st = {0};
		if ((flags & O_PATH) && fstat(*fd, &st) != 0) {
			e = errno;
			close(*fd);
			*fd = -1;
			return fail(e);
		}
		/* Only an O_PATH open succeeds on a link itself. */
		maybe_link = (flags & O_PATH) && S_ISLNK(st.st_mode);
	}
	if (!maybe_link)
		return *fd < 0 ? fail(e) : 0;
	if (*fd >= 0) {
		close(*fd);
		*fd = -1;
	}
	if (follow(w, w->cur, name) != 0)
		/* Not a link after all (EINVAL): the first answer stands. */
		return errno == EINVAL ? fail(e) : -1;
	return 0;
}

int pc__beneath_walk(int dirfd, const char *rel, int flags, mode_t mode)
{
	walk_t w = {.start = dirfd, .cur = dirfd};
	if (rel[0] == '/')
		return fail(EXDEV);
	if (strlen(rel) >= sizeof(w.left))
		return fail(ENAMETOOLONG);
	strcpy(w.left, rel);
	int fd = -1, rc = 0;
	while (rc == 0 && fd < 0) {
		while (w.left[w.pos] == '/')
			w.pos++;
		size_t n = strcspn(w.left + w.pos, "/");
		if (n == 0) {
			/* Nothing left: the answer is the directory reached
			 * ("", ".", or a path ending in ".."). */
			fd = openat(w.cur, ".", flags | O_NOFOLLOW | O_CLOEXEC, mode);
			rc = fd < 0 ? -1 : 0;
			break;
		}
		if (n > NAME_MAX) {
			rc = fail(ENAMETOOLONG);
			break;
		}
		char name[NAME_MAX + 1];
		memcpy(name, w.left + w.pos, n);
		name[n] = '\0';
		w.pos += n;
		while (w.left[w.pos] == '/')
			w.pos++;
		bool final = w.left[w.pos] == '\0';
		if (strcmp(name, ".") == 0)
			continue;
		if (strcmp(name, "..") == 0)
			rc = climb(&w);
		else if (!final)
			rc = step(&w, name);
		else
			rc = last(&w, name, flags, mode, &fd);
	}
	int e = errno;
	set_cur(&w, -1);
	if (rc != 0)
		return fail(e);
	return fd;
}
