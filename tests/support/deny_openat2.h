/*
 * A seccomp filter that answers openat2 with ENOSYS, as a kernel before
 * 5.6 or a container runtime's profile would: for the tests of the path
 * walk that works without openat2 (beneath.h). It cannot be undone, so a
 * test installs it in a child or for a whole test program.
 */
#ifndef PC_TESTS_DENY_OPENAT2_H
#define PC_TESTS_DENY_OPENAT2_H

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <linux/filter.h>
#include <linux/seccomp.h>

/* Installs the filter with seccomp `flags` (SECCOMP_FILTER_FLAG_TSYNC: on
 * every thread of the process, 0: on the calling one) and checks that
 * openat2 now fails with ENOSYS. Uses no test assertions, so a forked
 * child may call it; false (errno set) when it did not take. */
static inline bool deny_openat2(unsigned flags)
{
	struct sock_filter filter[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_openat2, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA)),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = {.len = sizeof(filter) / sizeof(filter[0]), .filter = filter};
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, flags, &prog) != 0)
		return false;
	if (syscall(SYS_openat2, AT_FDCWD, ".", NULL, 0) >= 0)
		return false;
	return errno == ENOSYS;
}

#endif
