/*
 * The file tools where the kernel refuses openat2, as on Linux before 5.6
 * or under a seccomp profile that denies it: every test of this program
 * runs with openat2 answered by ENOSYS (a seccomp filter on all its
 * threads), so the workspace walks paths one component at a time
 * (beneath.h). Everything that works with openat2 works, every way out is
 * refused, and the swap race of tool_fs_race.h never gets out either.
 */
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#include <linux/filter.h>
#include <linux/seccomp.h>

#include "tool_fs_race.h"

/* Installs the filter once for the process, on every thread (TSYNC), and
 * checks that it holds. */
static void deny_openat2(void)
{
	static bool denied;
	if (!denied) {
		struct sock_filter filter[] = {
			BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
			BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_openat2, 0, 1),
			BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA)),
			BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		};
		struct sock_fprog prog = {.len = sizeof(filter) / sizeof(filter[0]), .filter = filter};
		cr_assert_eq(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0, "%s", strerror(errno));
		cr_assert_eq(syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &prog), 0, "%s",
			     strerror(errno));
		denied = true;
	}
	cr_assert_lt(syscall(SYS_openat2, AT_FDCWD, ".", NULL, 0), 0);
	cr_assert_eq(errno, ENOSYS);
}

TestSuite(fs_fallback, .init = deny_openat2);

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
	for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
		const char *q = paths[i];
		rec_t r = call_obj(f, "read", args_path(q, NULL, NULL));
		cr_assert_null(strstr(r.text, "SECRET"), "read %s: %s", q, r.text);
		expect_error(r, q);
		expect_error(call_obj(f, "write", args_path(q, "content", "PWNED")), q);
		cJSON *o = args_path(q, "oldText", "SECRET");
		cr_assert_not_null(cJSON_AddStringToObject(o, "newText", "PWNED"));
		expect_error(call_obj(f, "edit", o), q);
		expect_error(call_obj(f, "list", args_path(q, NULL, NULL)), q);
		assert_outside_intact(f);
	}
	fx_free(f);
}

Test(fs_fallback, race_never_leaves)
{
	fx_t *f = fx_new();
	race_read_write(f);
	fx_free(f);
}
