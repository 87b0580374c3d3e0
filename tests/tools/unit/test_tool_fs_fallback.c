/*
 * The file tools where the kernel refuses openat2, as on Linux before 5.6
 * or under a seccomp profile that denies it: every test of this program
 * runs with openat2 answered by ENOSYS (a seccomp filter on all its
 * threads), so the workspace walks paths one component at a time
 * (beneath.h). Everything that works with openat2 works, every way out is
 * refused, and the swap race of tool_fs_race.h never gets out either.
 */
#include "deny_openat2.h"
#include "tool_fs_race.h"

/* Installs the filter once for the process, on every thread (TSYNC). */
static void deny_openat2_everywhere(void)
{
	static bool denied;
	if (!denied) {
		cr_assert(deny_openat2(SECCOMP_FILTER_FLAG_TSYNC), "openat2 is not denied: %s", strerror(errno));
		denied = true;
	}
	cr_assert_lt(syscall(SYS_openat2, AT_FDCWD, ".", NULL, 0), 0);
	cr_assert_eq(errno, ENOSYS);
}

TestSuite(fs_fallback, .init = deny_openat2_everywhere);

/* What works with openat2 works: reading, writing with new parents,
 * editing, listing, and links that stay inside. */
Test(fs_fallback, inside_works)
{
	fx_t *f = fx_new();
	expect_ok(call(f, "write", "{\"path\":\"a/b/c.txt\",\"content\":\"one\\n\"}"), "wrote 4 bytes to a/b/c.txt");
	expect_ok(call(f, "read", "{\"path\":\"a/b/../b/c.txt\"}"), "one\n");
	link_at(f->root, "to_b", "a/b");
	link_at(f->root, "a/to_c", "b/c.txt");
	expect_ok(call(f, "read", "{\"path\":\"to_b/c.txt\"}"), "one\n");
	expect_ok(call(f, "edit", "{\"path\":\"a/to_c\",\"oldText\":\"one\",\"newText\":\"two\"}"), NULL);
	assert_content(f->root, "a/b/c.txt", "two\n");
	expect_ok(call(f, "write", "{\"path\":\"to_b/d/e.txt\",\"content\":\"x\"}"), "wrote 1 bytes to to_b/d/e.txt");
	assert_content(f->root, "a/b/d/e.txt", "x");
	expect_ok(call(f, "list", "{\"path\":\"to_b\",\"depth\":2}"), "c.txt\nd/\nd/e.txt\n");
	fx_free(f);
}

/* Every way out, through every tool: none reads, changes or creates
 * anything outside. */
Test(fs_fallback, escapes_through_every_tool)
{
	fx_t *f = fx_new();
	const char *out = strrchr(f->out, '/') + 1;
	char rel_out[128], abs_out[128], up[128], p[PATH_MAX];
	snprintf(rel_out, sizeof(rel_out), "../%s/secret.txt", out);
	snprintf(abs_out, sizeof(abs_out), "%s/secret.txt", f->out);
	link_at(f->root, "file_link", rel_out);
	link_at(f->root, "abs_link", abs_out);
	mkdir_at(f->root, "sub");
	snprintf(up, sizeof(up), "../../%s", out);
	link_at(f->root, "sub/up", up);
	link_at(f->root, "abs_dir", f->out);
	link_at(f->root, "proc_root", "/proc/self/root");
	link_at(f->root, "c2", "file_link");
	link_at(f->root, "sub/c1", "../c2");
	snprintf(p, sizeof(p), "%s/hard", f->root);
	cr_assert_eq(link(abs_out, p), 0);
	const char *paths[] = {
		rel_out, abs_out, "file_link", "abs_link", "sub/up/secret.txt", "sub/up/new.txt", "abs_dir/secret.txt",
		"abs_dir/new/f.txt", "proc_root/etc/hostname", "/proc/self/root/etc/hostname", "sub/c1", "hard",
		"sub/../../x", "..",
	};
	for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++)
		expect_refused_by_every_tool(f, paths[i], paths[i]);
	fx_free(f);
}

Test(fs_fallback, race_never_leaves)
{
	fx_t *f = fx_new();
	race_read_write(f);
	fx_free(f);
}
