/*
 * Workspace confinement: every way out of the root (".." and absolute
 * paths, symbolic links at the last or a middle component, chains, magic
 * links, dangling links) is refused, every way that stays inside works,
 * and malformed paths (empty, NUL, too long, "~") get a clear refusal.
 *
 * Each test builds a fresh tree under /tmp:
 *   <root>/inside.txt          "IN"
 *   <root>/sub/deep.txt        "DEEP"
 *   <out>/secret.txt           "SECRET"   (a sibling directory: outside)
 * and removes both at the end.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agents/tools/workspace.h"
#include "deny_openat2.h"
#include "file_util.h"
#include "test_util.h"

typedef struct tree {
	char root[64];
	char out[64];
	pc_workspace_t *ws;
	char err[PC_WORKSPACE_ERR_MAX];
	int fds; /* open before the handle: every test ends with as many */
} tree_t;

static void put(const char *dir, const char *rel, const char *text)
{
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s/%s", dir, rel);
	FILE *f = fopen(p, "w");
	cr_assert_not_null(f, "%s", p);
	cr_assert_eq(fputs(text, f) >= 0, true);
	cr_assert_eq(fclose(f), 0);
}

static void link_at(const char *dir, const char *rel, const char *target)
{
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s/%s", dir, rel);
	cr_assert_eq(symlink(target, p), 0, "symlink %s -> %s: %s", p, target, strerror(errno));
}

static void mkdir_at(const char *dir, const char *rel)
{
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s/%s", dir, rel);
	cr_assert_eq(mkdir(p, 0755), 0, "%s", p);
}

static bool exists_at(const char *dir, const char *rel)
{
	char p[PATH_MAX];
	struct stat st;
	snprintf(p, sizeof(p), "%s/%s", dir, rel);
	return lstat(p, &st) == 0;
}

static tree_t *tree_new(void)
{
	tree_t *t = calloc(1, sizeof(*t));
	cr_assert_not_null(t);
	snprintf(t->root, sizeof(t->root), "/tmp/pc-ws-XXXXXX");
	snprintf(t->out, sizeof(t->out), "/tmp/pc-out-XXXXXX");
	cr_assert_not_null(mkdtemp(t->root));
	cr_assert_not_null(mkdtemp(t->out));
	put(t->root, "inside.txt", "IN");
	mkdir_at(t->root, "sub");
	put(t->root, "sub/deep.txt", "DEEP");
	put(t->out, "secret.txt", "SECRET");
	t->fds = open_fds();
	cr_assert_eq(pc_workspace_open(t->root, &t->ws, t->err, sizeof(t->err)), 0, "%s", t->err);
	return t;
}

static void tree_free(tree_t *t)
{
	pc_workspace_free(t->ws);
	cr_assert_eq(open_fds(), t->fds, "file descriptors leaked");
	rm_tree(t->root);
	rm_tree(t->out);
	free(t);
	ASSERT_NO_LEAKS();
}

/* Opens path read-only; on success returns its first bytes in buf. */
static int try_read(tree_t *t, const char *path, char *buf, size_t n)
{
	int fd = -1;
	t->err[0] = '\0';
	int rc = pc_workspace_open_file(t->ws, path, O_RDONLY, 0, &fd, t->err, sizeof(t->err));
	if (rc != 0)
		return rc;
	ssize_t got = read(fd, buf, n - 1);
	close(fd);
	cr_assert_geq(got, 0);
	buf[got] = '\0';
	return 0;
}

static void assert_refused(tree_t *t, const char *path, const char *why)
{
	char buf[64];
	int rc = try_read(t, path, buf, sizeof(buf));
	cr_assert_eq(rc, PC_EINVAL, "%s: rc %d (%s)", path, rc, rc == 0 ? buf : t->err);
	cr_assert_not_null(strstr(t->err, why), "%s: message \"%s\" lacks \"%s\"", path, t->err, why);
}

static void assert_reads(tree_t *t, const char *path, const char *want)
{
	char buf[64];
	int rc = try_read(t, path, buf, sizeof(buf));
	cr_assert_eq(rc, 0, "%s: rc %d: %s", path, rc, t->err);
	cr_assert_str_eq(buf, want, "%s", path);
}

/* The outside file is still exactly as the test made it. */
static void assert_outside_intact(tree_t *t)
{
	char p[PATH_MAX], buf[32] = {0};
	snprintf(p, sizeof(p), "%s/secret.txt", t->out);
	FILE *f = fopen(p, "r");
	cr_assert_not_null(f);
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	cr_assert_str_eq(buf, "SECRET");
}

/* "/tmp/pc-out-xxx" as seen from the root: "../pc-out-xxx". */
static void out_rel(tree_t *t, char *buf, size_t n, const char *rest)
{
	snprintf(buf, n, "../%s%s", strrchr(t->out, '/') + 1, rest);
}

/* ---- dot-dot ------------------------------------------------------------------ */

Test(workspace, dotdot_escapes)
{
	tree_t *t = tree_new();
	assert_refused(t, "../x", "path escapes the workspace: ../x");
	assert_refused(t, "..", "escapes");
	char p[PATH_MAX];
	out_rel(t, p, sizeof(p), "/secret.txt");
	assert_refused(t, p, "escapes");
	assert_refused(t, "sub/../../x", "escapes");
	assert_refused(t, "sub/../sub/../../inside.txt", "escapes");
	assert_outside_intact(t);
	tree_free(t);
}

Test(workspace, dotdot_inside)
{
	tree_t *t = tree_new();
	assert_reads(t, "sub/../inside.txt", "IN");
	assert_reads(t, "sub/./../sub/deep.txt", "DEEP");
	assert_reads(t, "./inside.txt", "IN");
	assert_reads(t, "sub//deep.txt", "DEEP");
	tree_free(t);
}

/* ---- absolute paths --------------------------------------------------------------- */

Test(workspace, absolute_outside)
{
	tree_t *t = tree_new();
	assert_refused(t, "/etc/passwd", "outside the workspace");
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s/secret.txt", t->out);
	assert_refused(t, p, "outside the workspace");
	/* A sibling whose name starts with the root's is not under it. */
	snprintf(p, sizeof(p), "%sx/inside.txt", t->root);
	assert_refused(t, p, "outside the workspace");
	/* Under the root as text, but ".." climbs back out. */
	snprintf(p, sizeof(p), "%s/../%s/secret.txt", t->root, strrchr(t->out, '/') + 1);
	assert_refused(t, p, "escapes");
	assert_refused(t, "/", "outside the workspace");
	assert_outside_intact(t);
	tree_free(t);
}

Test(workspace, absolute_inside)
{
	tree_t *t = tree_new();
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s/inside.txt", pc_workspace_root(t->ws));
	assert_reads(t, p, "IN");
	/* Extra slashes and "." components are not a way out, nor in. */
	snprintf(p, sizeof(p), "/%s//sub/./deep.txt", t->root);
	assert_reads(t, p, "DEEP");
	char rel[PATH_MAX];
	cr_assert_eq(pc_workspace_resolve(t->ws, t->root, strlen(t->root), rel, sizeof(rel), t->err, sizeof(t->err)), 0);
	cr_assert_str_eq(rel, ".");
	snprintf(p, sizeof(p), "%s/sub/", t->root);
	cr_assert_eq(pc_workspace_resolve(t->ws, p, strlen(p), rel, sizeof(rel), t->err, sizeof(t->err)), 0);
	cr_assert_str_eq(rel, "sub");
	tree_free(t);
}

/* A root given through a symbolic link: absolute paths under either
 * spelling are inside. */
Test(workspace, root_through_link)
{
	tree_t *t = tree_new();
	char alias[PATH_MAX];
	snprintf(alias, sizeof(alias), "%s/alias", t->out);
	cr_assert_eq(symlink(t->root, alias), 0);
	pc_workspace_t *ws = NULL;
	cr_assert_eq(pc_workspace_open(alias, &ws, t->err, sizeof(t->err)), 0, "%s", t->err);
	cr_assert_str_eq(pc_workspace_root(ws), pc_workspace_root(t->ws));
	char p[PATH_MAX + 16], rel[PATH_MAX];
	snprintf(p, sizeof(p), "%s/inside.txt", alias);
	cr_assert_eq(pc_workspace_resolve(ws, p, strlen(p), rel, sizeof(rel), t->err, sizeof(t->err)), 0, "%s", t->err);
	cr_assert_str_eq(rel, "inside.txt");
	snprintf(p, sizeof(p), "%s/sub/deep.txt", t->root);
	cr_assert_eq(pc_workspace_resolve(ws, p, strlen(p), rel, sizeof(rel), t->err, sizeof(t->err)), 0, "%s", t->err);
	cr_assert_str_eq(rel, "sub/deep.txt");
	pc_workspace_free(ws);
	tree_free(t);
}

/* ---- symbolic links ------------------------------------------------------------------- */

Test(workspace, link_file_outside)
{
	tree_t *t = tree_new();
	char target[PATH_MAX];
	snprintf(target, sizeof(target), "%s/secret.txt", t->out);
	link_at(t->root, "abs_out", target);
	out_rel(t, target, sizeof(target), "/secret.txt");
	link_at(t->root, "rel_out", target);
	assert_refused(t, "abs_out", "escapes");
	assert_refused(t, "rel_out", "escapes");
	/* Opening for writing through it must not touch the outside file. */
	int fd = -1;
	cr_assert_eq(pc_workspace_open_file(t->ws, "rel_out", O_WRONLY | O_TRUNC, 0, &fd, t->err, sizeof(t->err)),
		     PC_EINVAL);
	cr_assert_eq(fd, -1);
	assert_outside_intact(t);
	tree_free(t);
}

Test(workspace, link_dir_outside_in_the_middle)
{
	tree_t *t = tree_new();
	char target[PATH_MAX];
	out_rel(t, target, sizeof(target), "");
	char from_sub[PATH_MAX + 4];
	snprintf(from_sub, sizeof(from_sub), "../%s", target);
	link_at(t->root, "sub/up", from_sub);
	link_at(t->root, "abs_dir", t->out);
	assert_refused(t, "sub/up/secret.txt", "escapes");
	assert_refused(t, "abs_dir/secret.txt", "escapes");
	int fd = -1;
	cr_assert_eq(pc_workspace_open_file(t->ws, "sub/up/new.txt", O_WRONLY | O_CREAT, 0644, &fd, t->err,
					    sizeof(t->err)),
		     PC_EINVAL);
	cr_assert_not(exists_at(t->out, "new.txt"));
	cr_assert_eq(pc_workspace_make_parents(t->ws, "sub/up/newdir/f.txt", t->err, sizeof(t->err)), PC_EINVAL);
	cr_assert_not(exists_at(t->out, "newdir"));
	assert_outside_intact(t);
	tree_free(t);
}

Test(workspace, links_inside_are_followed)
{
	tree_t *t = tree_new();
	link_at(t->root, "to_inside", "inside.txt");
	link_at(t->root, "sub/to_parent_file", "../inside.txt");
	link_at(t->root, "to_sub", "sub");
	assert_reads(t, "to_inside", "IN");
	assert_reads(t, "sub/to_parent_file", "IN");
	assert_reads(t, "to_sub/deep.txt", "DEEP");
	assert_reads(t, "to_sub/../inside.txt", "IN");
	tree_free(t);
}

/* Absolute links are refused even when they point inside: the kernel's
 * RESOLVE_BENEATH cannot tell. */
Test(workspace, absolute_link_inside_refused)
{
	tree_t *t = tree_new();
	char target[PATH_MAX];
	snprintf(target, sizeof(target), "%s/inside.txt", t->root);
	link_at(t->root, "abs_in", target);
	assert_refused(t, "abs_in", "absolute");
	int dfd = -1;
	char name[NAME_MAX + 1];
	cr_assert_eq(pc_workspace_open_parent(t->ws, "abs_in", &dfd, name, t->err, sizeof(t->err)), PC_EINVAL);
	tree_free(t);
}

Test(workspace, link_chains)
{
	tree_t *t = tree_new();
	char target[PATH_MAX];
	out_rel(t, target, sizeof(target), "/secret.txt");
	link_at(t->root, "c3", target);
	link_at(t->root, "c2", "c3");
	link_at(t->root, "sub/c1", "../c2");
	assert_refused(t, "sub/c1", "escapes");
	link_at(t->root, "i3", "sub/deep.txt");
	link_at(t->root, "i2", "i3");
	link_at(t->root, "sub/i1", "../i2");
	assert_reads(t, "sub/i1", "DEEP");
	link_at(t->root, "loop1", "loop2");
	link_at(t->root, "loop2", "loop1");
	assert_refused(t, "loop1", "symbolic link loop");
	assert_outside_intact(t);
	tree_free(t);
}

Test(workspace, dangling_links)
{
	tree_t *t = tree_new();
	link_at(t->root, "dangle", "nothing_here");
	char buf[8];
	cr_assert_eq(try_read(t, "dangle", buf, sizeof(buf)), PC_ENOTFOUND);
	cr_assert_eq(errno, ENOENT);
	cr_assert_not_null(strstr(t->err, "dangle"), "%s", t->err);
	/* Creating through a dangling link that points outside creates nothing. */
	char target[PATH_MAX];
	out_rel(t, target, sizeof(target), "/created.txt");
	link_at(t->root, "dangle_out", target);
	int fd = -1;
	cr_assert_eq(pc_workspace_open_file(t->ws, "dangle_out", O_WRONLY | O_CREAT, 0644, &fd, t->err,
					    sizeof(t->err)),
		     PC_EINVAL);
	cr_assert_not(exists_at(t->out, "created.txt"));
	/* Creating through one that points inside creates its target. */
	cr_assert_eq(pc_workspace_open_file(t->ws, "dangle", O_WRONLY | O_CREAT, 0644, &fd, t->err, sizeof(t->err)), 0,
		     "%s", t->err);
	close(fd);
	cr_assert(exists_at(t->root, "nothing_here"));
	tree_free(t);
}

/* ---- magic links ---------------------------------------------------------------------------- */

Test(workspace, proc_magic_links)
{
	tree_t *t = tree_new();
	assert_refused(t, "/proc/self/root/etc/passwd", "outside the workspace");
	assert_refused(t, "/proc/self/fd/0", "outside the workspace");
	link_at(t->root, "proc_root", "/proc/self/root");
	assert_refused(t, "proc_root/etc/passwd", "escapes");
	pc_workspace_free(t->ws);
	/* Even with the root inside /proc, its magic links are not followed. */
	cr_assert_eq(pc_workspace_open("/proc/self", &t->ws, t->err, sizeof(t->err)), 0, "%s", t->err);
	assert_refused(t, "root/etc/passwd", "symbolic link");
	assert_refused(t, "cwd", "symbolic link");
	char p[32];
	int fd = open("/etc/hostname", O_RDONLY | O_CLOEXEC);
	cr_assert_geq(fd, 0);
	snprintf(p, sizeof(p), "fd/%d", fd);
	assert_refused(t, p, "symbolic link");
	close(fd);
	tree_free(t);
}

/* ---- malformed paths ------------------------------------------------------------------------- */

Test(workspace, malformed_paths)
{
	tree_t *t = tree_new();
	assert_refused(t, "", "path is empty");
	char rel[PATH_MAX];
	const char nul[] = "inside.txt\0../../etc/passwd";
	cr_assert_eq(pc_workspace_resolve(t->ws, nul, sizeof(nul) - 1, rel, sizeof(rel), t->err, sizeof(t->err)),
		     PC_EINVAL);
	cr_assert_not_null(strstr(t->err, "NUL"), "%s", t->err);
	assert_refused(t, "~", "'~' is not expanded");
	assert_refused(t, "~/.ssh/id_rsa", "'~' is not expanded");
	/* A name that merely starts with '~' is an ordinary name. */
	cr_assert_eq(pc_workspace_resolve(t->ws, "~notes", 6, rel, sizeof(rel), t->err, sizeof(t->err)), 0);
	cr_assert_str_eq(rel, "~notes");
	/* The output buffer is too small for the normalised path. */
	cr_assert_eq(pc_workspace_resolve(t->ws, "sub/deep.txt", 12, rel, 4, t->err, sizeof(t->err)), PC_EINVAL);
	tree_free(t);
}

Test(workspace, very_long_paths)
{
	tree_t *t = tree_new();
	size_t n = PATH_MAX + 16;
	char *p = malloc(n + 1);
	cr_assert_not_null(p);
	for (size_t i = 0; i < n; i += 2)
		memcpy(p + i, "a/", 2);
	p[n] = '\0';
	assert_refused(t, p, "path is too long");
	/* A single name over NAME_MAX is the kernel's to refuse. */
	memset(p, 'b', 300);
	p[300] = '\0';
	assert_refused(t, p, "too long");
	/* Long but well-formed: simply not there. */
	for (size_t i = 0; i < 2000; i += 2)
		memcpy(p + i, "a/", 2);
	p[1999] = '\0';
	char buf[8];
	cr_assert_eq(try_read(t, p, buf, sizeof(buf)), PC_ENOTFOUND);
	free(p);
	tree_free(t);
}

Test(workspace, resolve_normalises)
{
	tree_t *t = tree_new();
	struct {
		const char *in, *out;
	} cases[] = {
		{".", "."}, {"./", "."}, {"a//b/./c/", "a/b/c"}, {"a/..", "a/.."}, {"a/../b", "a/../b"}, {"./././x", "x"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char rel[PATH_MAX];
		int rc = pc_workspace_resolve(t->ws, cases[i].in, strlen(cases[i].in), rel, sizeof(rel), t->err,
					      sizeof(t->err));
		cr_assert_eq(rc, 0, "%s: %s", cases[i].in, t->err);
		cr_assert_str_eq(rel, cases[i].out, "%s", cases[i].in);
	}
	tree_free(t);
}

/* ---- parents and replacement targets ---------------------------------------------------------- */

Test(workspace, make_parents)
{
	tree_t *t = tree_new();
	cr_assert_eq(pc_workspace_make_parents(t->ws, "n1/n2/n3/f.txt", t->err, sizeof(t->err)), 0, "%s", t->err);
	cr_assert(exists_at(t->root, "n1/n2/n3"));
	cr_assert_not(exists_at(t->root, "n1/n2/n3/f.txt"));
	/* Existing ones are fine; a file in the way is not. */
	cr_assert_eq(pc_workspace_make_parents(t->ws, "n1/n2/g.txt", t->err, sizeof(t->err)), 0, "%s", t->err);
	cr_assert_eq(pc_workspace_make_parents(t->ws, "inside.txt/x/y", t->err, sizeof(t->err)), PC_ESYS);
	cr_assert_eq(errno, ENOTDIR);
	cr_assert_eq(pc_workspace_make_parents(t->ws, "../evil/f", t->err, sizeof(t->err)), PC_EINVAL);
	char p[PATH_MAX];
	out_rel(t, p, sizeof(p), "/made/f");
	cr_assert_eq(pc_workspace_make_parents(t->ws, p, t->err, sizeof(t->err)), PC_EINVAL);
	cr_assert_not(exists_at(t->out, "made"));
	link_at(t->root, "dang_dir", "nowhere");
	cr_assert_eq(pc_workspace_make_parents(t->ws, "dang_dir/x/f", t->err, sizeof(t->err)), PC_ENOTFOUND);
	cr_assert_not(exists_at(t->root, "nowhere"));
	tree_free(t);
}

static int parent_of(tree_t *t, const char *path, char name[NAME_MAX + 1], struct stat *dir)
{
	int dfd = -1;
	int rc = pc_workspace_open_parent(t->ws, path, &dfd, name, t->err, sizeof(t->err));
	if (rc == 0) {
		cr_assert_eq(fstat(dfd, dir), 0);
		close(dfd);
	}
	return rc;
}

Test(workspace, open_parent)
{
	tree_t *t = tree_new();
	char name[NAME_MAX + 1];
	struct stat d, sub, root;
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s/sub", t->root);
	cr_assert_eq(stat(p, &sub), 0);
	cr_assert_eq(stat(t->root, &root), 0);

	cr_assert_eq(parent_of(t, "sub/deep.txt", name, &d), 0, "%s", t->err);
	cr_assert_str_eq(name, "deep.txt");
	cr_assert_eq(d.st_ino, sub.st_ino);
	cr_assert_eq(parent_of(t, "new.txt", name, &d), 0, "%s", t->err);
	cr_assert_str_eq(name, "new.txt");
	cr_assert_eq(d.st_ino, root.st_ino);
	/* A link at the end is followed to its target while it stays inside. */
	link_at(t->root, "to_deep", "sub/deep.txt");
	cr_assert_eq(parent_of(t, "to_deep", name, &d), 0, "%s", t->err);
	cr_assert_str_eq(name, "deep.txt");
	cr_assert_eq(d.st_ino, sub.st_ino);
	link_at(t->root, "sub/to_new", "../fresh.txt");
	cr_assert_eq(parent_of(t, "sub/to_new", name, &d), 0, "%s", t->err);
	cr_assert_str_eq(name, "fresh.txt");
	cr_assert_eq(d.st_ino, root.st_ino);
	/* Refusals. */
	char target[PATH_MAX], from_sub[PATH_MAX + 4];
	out_rel(t, target, sizeof(target), "/secret.txt");
	snprintf(from_sub, sizeof(from_sub), "../%s", target);
	link_at(t->root, "sub/out", from_sub);
	cr_assert_eq(parent_of(t, "sub/out", name, &d), PC_EINVAL);
	cr_assert_not_null(strstr(t->err, "escapes"), "%s", t->err);
	link_at(t->root, "sub/out2", "../../x");
	cr_assert_eq(parent_of(t, "sub/out2", name, &d), PC_EINVAL);
	link_at(t->root, "l1", "l2");
	link_at(t->root, "l2", "l1");
	cr_assert_eq(parent_of(t, "l1", name, &d), PC_EINVAL);
	cr_assert_not_null(strstr(t->err, "too many symbolic links"), "%s", t->err);
	cr_assert_eq(parent_of(t, ".", name, &d), PC_EINVAL);
	cr_assert_eq(parent_of(t, "sub/..", name, &d), PC_EINVAL);
	cr_assert_eq(parent_of(t, t->root, name, &d), PC_EINVAL);
	cr_assert_eq(parent_of(t, "missing_dir/f", name, &d), PC_ENOTFOUND);
	assert_outside_intact(t);
	tree_free(t);
}

/* ---- the handle ----------------------------------------------------------------------------------- */

Test(workspace, open_errors)
{
	tree_t *t = tree_new();
	char err[PC_WORKSPACE_ERR_MAX];
	pc_workspace_t *ws = (pc_workspace_t *)&err; /* must be reset on failure */
	cr_assert_eq(pc_workspace_open("/nonexistent/pincer-ws", &ws, err, sizeof(err)), PC_ENOTFOUND);
	cr_assert_null(ws);
	cr_assert_not_null(strstr(err, "does not exist"), "%s", err);
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s/inside.txt", t->root);
	cr_assert_eq(pc_workspace_open(p, &ws, err, sizeof(err)), PC_ESYS);
	cr_assert_eq(errno, ENOTDIR);
	cr_assert_not_null(strstr(err, "not a directory"), "%s", err);
	cr_assert_eq(pc_workspace_open("", &ws, err, sizeof(err)), PC_EINVAL);
	cr_assert_eq(pc_workspace_open(NULL, &ws, err, sizeof(err)), PC_EINVAL);
	cr_assert_eq(pc_workspace_open(t->root, NULL, err, sizeof(err)), PC_EINVAL);
	/* No message buffer is fine too. */
	cr_assert_eq(pc_workspace_open("/nonexistent/pincer-ws", &ws, NULL, 0), PC_ENOTFOUND);
	int fd = -1;
	cr_assert_eq(pc_workspace_open_file(t->ws, NULL, O_RDONLY, 0, &fd, NULL, 0), PC_EINVAL);
	pc_workspace_free(NULL);
	tree_free(t);
}

/* The root opened once: replacing the directory at the root's path
 * afterwards does not redirect the handle. */
Test(workspace, root_fd_is_pinned)
{
	tree_t *t = tree_new();
	char moved[PATH_MAX];
	snprintf(moved, sizeof(moved), "%s/moved", t->out);
	cr_assert_eq(rename(t->root, moved), 0);
	cr_assert_eq(symlink(t->out, t->root), 0);
	assert_reads(t, "inside.txt", "IN");
	char buf[8];
	cr_assert_eq(try_read(t, "secret.txt", buf, sizeof(buf)), PC_ENOTFOUND);
	cr_assert_eq(unlink(t->root), 0);
	cr_assert_eq(rename(moved, t->root), 0);
	tree_free(t);
}

/* ---- hard links ------------------------------------------------------------------------------- */

Test(workspace, hard_links_refused)
{
	tree_t *t = tree_new();
	char from[PATH_MAX], to[PATH_MAX];
	snprintf(from, sizeof(from), "%s/secret.txt", t->out);
	snprintf(to, sizeof(to), "%s/sub/hl", t->root);
	cr_assert_eq(link(from, to), 0, "%s", strerror(errno));
	assert_refused(t, "sub/hl", "file refused: it has 2 hard links");
	cr_assert_not_null(strstr(t->err, "sub/hl"), "%s", t->err);
	/* O_TRUNC is not applied before the check: the outside file keeps its
	 * content. */
	int fd = -1;
	cr_assert_eq(pc_workspace_open_file(t->ws, "sub/hl", O_WRONLY | O_TRUNC, 0, &fd, t->err, sizeof(t->err)),
		     PC_EINVAL);
	cr_assert_eq(fd, -1);
	assert_outside_intact(t);
	/* Through a link inside, and as O_PATH: the same file, refused. */
	link_at(t->root, "to_hl", "sub/hl");
	assert_refused(t, "to_hl", "hard links");
	cr_assert_eq(pc_workspace_open_file(t->ws, "sub/hl", O_PATH, 0, &fd, t->err, sizeof(t->err)), PC_EINVAL);
	/* Directories have several links by nature and are fine; a single
	 * link is fine, and O_TRUNC then applies. */
	cr_assert_eq(pc_workspace_open_file(t->ws, "sub", O_RDONLY | O_DIRECTORY, 0, &fd, t->err, sizeof(t->err)), 0,
		     "%s", t->err);
	close(fd);
	cr_assert_eq(pc_workspace_open_file(t->ws, "inside.txt", O_WRONLY | O_TRUNC, 0, &fd, t->err, sizeof(t->err)),
		     0, "%s", t->err);
	close(fd);
	assert_reads(t, "inside.txt", "");
	tree_free(t);
}

/* ---- without openat2 ------------------------------------------------------------------------------ */

/* In the child, without Criterion's assertions: whether path opens and
 * starts with want (NULL: whether it is refused as an escape). */
static bool child_open(pc_workspace_t *ws, const char *path, const char *want)
{
	char err[PC_WORKSPACE_ERR_MAX], buf[64];
	int fd = -1;
	int rc = pc_workspace_open_file(ws, path, O_RDONLY, 0, &fd, err, sizeof(err));
	if (!want)
		return rc == PC_EINVAL && fd == -1 && strstr(err, path);
	if (rc != 0)
		return false;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n < 0)
		return false;
	buf[n] = '\0';
	return strcmp(buf, want) == 0;
}

/* The checks of the walk, each a step number to report. */
static int walk_checks(tree_t *t, pc_workspace_t *ws)
{
	static const struct {
		const char *path, *want;
	} cases[] = {
		{"inside.txt", "IN"}, {"sub/../inside.txt", "IN"}, {"./sub//deep.txt", "DEEP"},
		{"to_inside", "IN"}, {"to_sub/deep.txt", "DEEP"}, {"to_sub/../inside.txt", "IN"},
		{"sub/to_parent_file", "IN"}, {"sub/i1", "DEEP"},
		{"abs_out", NULL}, {"rel_out", NULL}, {"sub/up/secret.txt", NULL}, {"abs_dir/secret.txt", NULL},
		{"proc_root/etc/passwd", NULL}, {"abs_in", NULL}, {"sub/c1", NULL}, {"loop1", NULL},
		{"sub/hl", NULL}, {"../x", NULL}, {"/etc/passwd", NULL},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		if (!child_open(ws, cases[i].path, cases[i].want))
			return 10 + (int)i;
	char err[PC_WORKSPACE_ERR_MAX], name[NAME_MAX + 1];
	int fd = -1;
	if (pc_workspace_open_file(ws, "dangle_out", O_WRONLY | O_CREAT, 0644, &fd, err, sizeof(err)) != PC_EINVAL ||
	    exists_at(t->out, "created.txt"))
		return 50;
	if (pc_workspace_open_file(ws, "sub/up/new.txt", O_WRONLY | O_CREAT, 0644, &fd, err, sizeof(err)) !=
		    PC_EINVAL ||
	    exists_at(t->out, "new.txt"))
		return 51;
	if (pc_workspace_make_parents(ws, "sub/up/newdir/f", err, sizeof(err)) != PC_EINVAL ||
	    exists_at(t->out, "newdir"))
		return 52;
	if (pc_workspace_open_file(ws, "sub/hl", O_WRONLY | O_TRUNC, 0, &fd, err, sizeof(err)) != PC_EINVAL)
		return 53;
	if (pc_workspace_make_parents(ws, "to_sub/n1/n2/f", err, sizeof(err)) != 0 || !exists_at(t->root, "sub/n1/n2"))
		return 54;
	/* A dangling link inside: creating through it makes its target. */
	if (pc_workspace_open_file(ws, "dangle", O_WRONLY | O_CREAT, 0644, &fd, err, sizeof(err)) != 0)
		return 55;
	close(fd);
	if (!exists_at(t->root, "nothing_here"))
		return 56;
	if (pc_workspace_open_parent(ws, "to_inside", &fd, name, err, sizeof(err)) != 0 ||
	    strcmp(name, "inside.txt") != 0)
		return 57;
	close(fd);
	if (pc_workspace_open_file(ws, "missing/x", O_RDONLY, 0, &fd, err, sizeof(err)) != PC_ENOTFOUND)
		return 58;
	return 0;
}

/* Magic links, with the root inside /proc: their text is all the walk
 * sees, and it leads out. */
static int walk_proc_checks(void)
{
	pc_workspace_t *ws = NULL;
	char err[PC_WORKSPACE_ERR_MAX], p[32];
	if (pc_workspace_open("/proc/self", &ws, err, sizeof(err)) != 0)
		return 70;
	int fd = open("/etc/hostname", O_RDONLY | O_CLOEXEC);
	snprintf(p, sizeof(p), "fd/%d", fd);
	int rc = fd < 0 ? 71 : !child_open(ws, "root/etc/passwd", NULL) ? 72 : !child_open(ws, "cwd", NULL) ? 73
		 : !child_open(ws, p, NULL)				       ? 74
										       : 0;
	if (fd >= 0)
		close(fd);
	pc_workspace_free(ws);
	return rc;
}

static int without_openat2(tree_t *t)
{
	if (!deny_openat2(0))
		return 2;
	pc_workspace_t *ws = NULL;
	char err[PC_WORKSPACE_ERR_MAX];
	if (pc_workspace_open(t->root, &ws, err, sizeof(err)) != 0)
		return 3;
	int rc = walk_checks(t, ws);
	pc_workspace_free(ws);
	return rc ? rc : walk_proc_checks();
}

/* Without openat2 the workspace walks paths itself, with the same
 * answers: links inside followed, every way out refused. */
Test(workspace, no_openat2_walks)
{
	tree_t *t = tree_new();
	char target[PATH_MAX], from_sub[PATH_MAX + 4];
	snprintf(target, sizeof(target), "%s/secret.txt", t->out);
	link_at(t->root, "abs_out", target);
	link_at(t->root, "abs_dir", t->out);
	out_rel(t, target, sizeof(target), "/secret.txt");
	link_at(t->root, "rel_out", target);
	link_at(t->root, "c3", target);
	link_at(t->root, "c2", "c3");
	link_at(t->root, "sub/c1", "../c2");
	out_rel(t, target, sizeof(target), "");
	snprintf(from_sub, sizeof(from_sub), "../%s", target);
	link_at(t->root, "sub/up", from_sub);
	out_rel(t, target, sizeof(target), "/created.txt");
	link_at(t->root, "dangle_out", target);
	snprintf(target, sizeof(target), "%s/inside.txt", t->root);
	link_at(t->root, "abs_in", target);
	link_at(t->root, "proc_root", "/proc/self/root");
	link_at(t->root, "to_inside", "inside.txt");
	link_at(t->root, "to_sub", "sub");
	link_at(t->root, "sub/to_parent_file", "../inside.txt");
	link_at(t->root, "i3", "sub/deep.txt");
	link_at(t->root, "i2", "i3");
	link_at(t->root, "sub/i1", "../i2");
	link_at(t->root, "loop1", "loop2");
	link_at(t->root, "loop2", "loop1");
	link_at(t->root, "dangle", "nothing_here");
	char from[PATH_MAX], to[PATH_MAX];
	snprintf(from, sizeof(from), "%s/secret.txt", t->out);
	snprintf(to, sizeof(to), "%s/sub/hl", t->root);
	cr_assert_eq(link(from, to), 0);
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0)
		_exit(without_openat2(t));
	int status = 0;
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status));
	cr_assert_eq(WEXITSTATUS(status), 0, "child failed at step %d", WEXITSTATUS(status));
	assert_outside_intact(t);
	tree_free(t);
}
