/*
 * The fixed list of launchers and interpreters (exec_launchers.h).
 */
#include "exec_launchers.h"

#include <string.h>

/* Each runs a program or code named by its arguments, its input or its
 * environment. Grouped by how. */
static const char *const launchers[] = {
	/* shells */
	"sh", "bash", "rbash", "dash", "ash", "zsh", "ksh", "mksh", "pdksh", "csh", "tcsh", "fish", "yash",
	"pwsh", "busybox", "toybox",
	/* interpreters */
	"python", "pypy", "perl", "ruby", "irb", "node", "nodejs", "deno", "bun", "php", "lua", "luajit",
	"tclsh", "wish", "expect", "awk", "gawk", "mawk", "nawk", "guile", "racket", "julia",
	"Rscript", "R", "escript", "elixir", "groovy", "jshell", "osascript",
	/* run a command they are given */
	"env", "xargs", "find", "parallel", "nice", "nohup", "setsid", "timeout", "stdbuf", "ionice",
	"chrt", "taskset", "time", "numactl", "prlimit", "flock", "script", "watch", "unbuffer", "chpst",
	"start-stop-daemon", "daemonize", "systemd-run", "cgexec",
	/* with other rights or in another root or namespace */
	"sudo", "su", "doas", "pkexec", "runuser", "sg", "newgrp", "setpriv", "capsh", "chroot", "unshare",
	"nsenter", "firejail", "bwrap",
	/* tracers and debuggers (they start the program, or run commands) */
	"strace", "ltrace", "gdb", "lldb", "valgrind", "perf",
	/* elsewhere */
	"ssh", "rsh",
};

static bool listed(const char *s, size_t n)
{
	for (size_t i = 0; i < sizeof(launchers) / sizeof(launchers[0]); i++)
		if (strlen(launchers[i]) == n && memcmp(launchers[i], s, n) == 0)
			return true;
	return false;
}

bool pc_exec_is_launcher(const char *name)
{
	if (!name)
		return false;
	const char *slash = strrchr(name, '/');
	const char *base = slash ? slash + 1 : name;
	size_t n = strlen(base);
	if (listed(base, n))
		return true;
	/* A version after the name: digits and dots, maybe after a '-'. */
	size_t k = n;
	while (k > 0 && ((base[k - 1] >= '0' && base[k - 1] <= '9') || base[k - 1] == '.'))
		k--;
	if (k == n || k == 0)
		return false;
	if (base[k - 1] == '-' && k > 1)
		k--;
	return listed(base, k);
}
