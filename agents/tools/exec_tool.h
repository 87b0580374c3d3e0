/*
 * The `exec` and `process` tools: run a command in the agent's workspace,
 * and follow the ones left running in the background.
 *
 * exec {command, workdir?, env?, timeout?, background?, yieldMs?}
 *   - command: in PC_EXEC_FULL mode run by `/bin/sh -c`; in
 *     PC_EXEC_ALLOWLIST mode split into words without a shell ('...' and
 *     "..." group words; ; | & $ < > ` ( ) { } \ and newlines are refused),
 *     its program a plain name (no '/') from the allow-list, looked up on
 *     the child's PATH (absolute directories only); PC_EXEC_OFF refuses
 *     every command ("exec is disabled by policy").
 *   - workdir: a directory inside the workspace (relative to it, or
 *     absolute); both are resolved with realpath, so no symlink or ".."
 *     leads out. Default: the workspace. No workspace: an error.
 *   - env: {NAME: "value"} added to the child's environment. PATH and the
 *     variables that change how programs are loaded or run (LD_*, DYLD_*,
 *     BASH_FUNC_*, IFS, BASH_ENV, ENV, NODE_OPTIONS, PYTHONPATH, ...) are
 *     refused with an error rather than dropped, so the model knows.
 *   - timeout: seconds (fractions allowed), default and maximum from the
 *     policy (1800 and 7200). Then SIGTERM to the command's tree (its
 *     process group and everything it started), SIGKILL after the grace.
 *     It holds in the background too.
 *   - background: return at once with a process id ("p1").
 *   - yieldMs: wait this long; a command still running then goes on in
 *     the background and its id is returned, with the output so far.
 *     Without it exec waits for the command to end (or time out).
 *
 * The child's environment: the parent's variables whose names the policy
 * keeps (default PATH HOME LANG LC_* TERM TZ USER LOGNAME SHELL TMPDIR),
 * then the `env` argument, then the policy's extras (which may set
 * anything, PATH included). The parent's environment is read when a
 * command starts; it must not be changed concurrently (setenv).
 *
 * The result reads "exit code N" / "killed by signal N" / "timed out after
 * N s", then a newline and the output (stdout and stderr as one stream):
 * the last max_output bytes, after "[... N bytes truncated]" when more came.
 * It holds nothing volatile (no pid, no duration), so identical runs read
 * identically. A command that did not exit with 0 is an error result. So
 * is a command refused because the table already runs its max_running
 * processes (process_table.h).
 *
 * process {action, id?, offset?, limit?}
 *   - list: every process of the table, with its status;
 *   - poll {id}: the status and the output since the previous poll;
 *   - log {id, offset?, limit?}: the status, how much output there was,
 *     and the output kept, or `limit` lines of it from line `offset`;
 *   - kill {id}: SIGTERM to the tree (SIGKILL on a second kill, or after
 *     the grace).
 * Whatever a command leaves behind (`cmd &`, nohup, setsid, a daemon) is
 * killed when the command ends (process_table.h); background processes
 * also end with their session (pc_process_table_end_session).
 * A foreground command is in the table while it runs; it leaves when its
 * exec returns. A background one stays until the table forgets it
 * (process_table.h: its TTL after it ended, or to make room).
 */
#ifndef PINCER_AGENTS_TOOLS_EXEC_TOOL_H
#define PINCER_AGENTS_TOOLS_EXEC_TOOL_H

#include <stddef.h>
#include <stdint.h>

#include "process_table.h"
#include "tool.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PC_EXEC_DEFAULT_TIMEOUT_S 1800u
#define PC_EXEC_MAX_TIMEOUT_S 7200u

typedef enum pc_exec_mode {
	PC_EXEC_OFF = 0,   /* exec refuses every command */
	PC_EXEC_ALLOWLIST, /* no shell; only the programs in `allow` */
	PC_EXEC_FULL,      /* any command, through /bin/sh -c */
} pc_exec_mode_t;

/* Strings and arrays are copied at registration. */
typedef struct pc_exec_policy {
	pc_exec_mode_t mode;
	const char *const *allow;     /* PC_EXEC_ALLOWLIST: program names */
	size_t n_allow;
	const char *const *env_keep;  /* names kept from the parent's environment; "LC_*" keeps a
				       * prefix; NULL: the default list above */
	size_t n_env_keep;
	const char *const *env_keep_also; /* kept as well (agents.defaults.tools.exec.env) */
	size_t n_env_keep_also;
	const char *const *env_extra; /* "NAME=value", set in every child's environment */
	size_t n_env_extra;
	size_t max_output;            /* bytes of output kept; 0: PC_PROCESS_DEFAULT_OUTPUT */
	uint32_t default_timeout_s;   /* 0: PC_EXEC_DEFAULT_TIMEOUT_S */
	uint32_t max_timeout_s;       /* 0: PC_EXEC_MAX_TIMEOUT_S */
	uint64_t kill_grace_ms;       /* SIGTERM -> SIGKILL; 0: PC_PROCESS_DEFAULT_GRACE_MS */
} pc_exec_policy_t;

/*
 * Registers "exec" and "process". `table` is borrowed: no invocation of
 * either may start after it is freed (process_table.h says when). The
 * registry owns the copy of the policy. exec's invocation timeout is the
 * policy's maximum plus the grace and a minute, so that its own timeout
 * ends it first. PC_EINVAL for a NULL argument, an unknown mode, a NULL
 * string in a list, a program in `allow` that runs other programs
 * (exec_launchers.h), an env_extra entry without '=', or a default
 * timeout above the maximum; PC_EEXIST if either name is taken (when "process" is
 * the one, "exec" stays registered).
 */
int pc_tool_register_exec(pc_tool_registry_t *r, const pc_exec_policy_t *policy, pc_process_table_t *table);

#ifdef __cplusplus
}
#endif
#endif
