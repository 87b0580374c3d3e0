/*
 * The supervisor of one `exec` command (process_table.h starts it): a small
 * process between Pincer and the command that makes the command's lifetime
 * the lifetime of everything it started.
 *
 *   Pincer --fork--> supervisor --fork+exec--> the command
 *
 * The supervisor is a child subreaper (PR_SET_CHILD_SUBREAPER), so every
 * process the command leaves behind, however it detached itself (`&`,
 * `nohup`, `setsid`, a double fork), stays in the supervisor's subtree:
 * an orphan is adopted by it, not by init. When the command ends, the
 * supervisor SIGKILLs its process group and every process of that
 * subtree, reaps them, reports how the command ended and exits. It has no
 * children but the command and what it adopted from it, so it may reap
 * whatever it finds; Pincer itself never becomes a subreaper and never
 * reaps a pid it did not start, so the exit statuses of an embedding
 * program's own children stay its own.
 *
 * Pincer talks to the supervisor only: it signals the supervisor's pid
 * (which it reaps itself, so the pid is never a reused one), and the
 * supervisor passes the request on to the command's tree:
 *   - PC_EXEC_SUP_TERM (SIGTERM): SIGTERM to the command's group and to
 *     the processes the supervisor adopted;
 *   - PC_EXEC_SUP_KILL (SIGUSR1): the same with SIGKILL.
 * If Pincer dies, even by SIGKILL, the supervisor learns it from its
 * parent-death signal (PR_SET_PDEATHSIG), kills the whole subtree and
 * exits. The command's own parent-death signal is SIGKILL, for the case
 * where the supervisor itself is killed.
 *
 * What it does not stop: a command that kills or stops its own supervisor
 * (it runs as the same user) before leaving processes behind; those are
 * adopted by init as before. Where a cgroup can be made, the command also
 * runs in one of its own (exec_cgroup.h), which whoever reaps the
 * supervisor empties: that closes this hole. The supervisor gives
 * ordinary commands a lifetime either way.
 *
 * Reports, on the status pipe, each one write of a pc_exec_report_t:
 * first PC_EXEC_REPORT_STARTED (value: the command's pid, also its
 * process group) or PC_EXEC_REPORT_FAILED (value: the errno of the step
 * that failed, exec included); after STARTED, once the tree is gone,
 * PC_EXEC_REPORT_EXITED (value: the exit status) or
 * PC_EXEC_REPORT_SIGNALED (value: the signal).
 */
#ifndef PINCER_AGENTS_TOOLS_EXEC_SUPERVISOR_H
#define PINCER_AGENTS_TOOLS_EXEC_SUPERVISOR_H

#include <signal.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PC_EXEC_SUP_TERM SIGTERM
#define PC_EXEC_SUP_KILL SIGUSR1

typedef enum pc_exec_report_kind {
	PC_EXEC_REPORT_STARTED = 1,
	PC_EXEC_REPORT_FAILED,
	PC_EXEC_REPORT_EXITED,
	PC_EXEC_REPORT_SIGNALED,
} pc_exec_report_kind_t;

typedef struct pc_exec_report {
	int32_t kind;
	int32_t value;
} pc_exec_report_t;

typedef struct pc_exec_sup_req {
	const char *path;  /* the program, an absolute path */
	char *const *argv; /* NULL-terminated */
	char *const *envp; /* NULL-terminated */
	const char *cwd;
	int out_fd;        /* the command's stdout and stderr */
	int status_fd;     /* where the reports go */
	const char *cgroup; /* the command's cgroup (exec_cgroup.h), which it joins before exec
			     * (and which the supervisor removes, emptied, if Pincer dies first);
			     * NULL: none */
} pc_exec_sup_req_t;

/*
 * Forks the supervisor, which starts the command. Everything the child
 * does before exec is async-signal-safe (the caller may be one thread of
 * many), and it keeps none of the caller's descriptors but the two of
 * `req`. Returns 0 with *pid the supervisor's, or an errno value when the
 * fork failed; whether the command started is the first report.
 */
int pc__exec_supervisor_start(const pc_exec_sup_req_t *req, pid_t *pid);

#ifdef __cplusplus
}
#endif
#endif
