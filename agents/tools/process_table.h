/*
 * Child processes of the `exec` and `process` tools (exec_tool.h): how one
 * is started, read, timed out, killed and reaped, and the table that keeps
 * them so that a process can outlive the tool call that started it.
 *
 * A process runs in its own process group (its pid is the group id), with
 * stdin from /dev/null and stdout and stderr merged into one pipe, under a
 * supervisor of its own (exec_supervisor.h) that adopts whatever the
 * process leaves behind and kills all of it when the process ends, or
 * when Pincer dies. A job on the runtime's blocking pool
 * (runtime/blocking.h) reads that pipe until EOF, keeping the last
 * `max_output` bytes, then reaps the supervisor with waitpid (by pid: no
 * other child is touched), kills whatever is left in the command's cgroup
 * when it has one (exec_cgroup.h: where a child cgroup can be made, each
 * command runs in its own) and wakes the tool invocation that asked
 * (pc_tool_wake). Killing signals the whole tree: SIGTERM, then SIGKILL
 * after a grace. A process that got out of the tree (its supervisor was
 * killed under it) and still holds the pipe is not waited for: the reader
 * gives the pipe up after a bounded wait.
 *
 * Each running process holds one blocking-pool thread (the runtime's
 * `blocking_threads`, 4 by default), so the table's `max_running` (3 by
 * default) should stay below it, leaving threads for other blocking work
 * (and for the other agents' tables, when several share a runtime).
 *
 * Ownership: the embedder owns the table (one per agent). No invocation of
 * the tools that use it may be starting while or after it is freed (stop
 * taking runs first); invocations already waiting on a process are fine:
 * their processes are killed, and they report it.
 * Free it before the runtime whose pool runs its readers: the runtime's
 * stop waits for every blocking job, and a reader ends only when its
 * process does (at its timeout at the latest). Records are reference
 * counted (pc_process_retain / _release): a record handed out stays valid
 * after the table dropped it, or was freed.
 *
 * Threads: everything here may be called from any thread.
 */
#ifndef PINCER_AGENTS_TOOLS_PROCESS_TABLE_H
#define PINCER_AGENTS_TOOLS_PROCESS_TABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "actors/actor.h"
#include "runtime/error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PC_PROCESS_DEFAULT_MAX ((size_t)16)
#define PC_PROCESS_DEFAULT_RUNNING ((size_t)3)
#define PC_PROCESS_DEFAULT_TTL_MS ((uint64_t)30 * 60 * 1000) /* 30 min */
#define PC_PROCESS_DEFAULT_OUTPUT ((size_t)200 * 1024)       /* bytes kept per process */
#define PC_PROCESS_DEFAULT_GRACE_MS ((uint64_t)2000)          /* SIGTERM -> SIGKILL */
#define PC_PROCESS_ID_MAX 24u

typedef struct pc_process_table pc_process_table_t;
typedef struct pc_process pc_process_t;

typedef struct pc_process_table_config {
	size_t max_processes; /* records kept, running or finished; 0: PC_PROCESS_DEFAULT_MAX */
	size_t max_running;   /* processes running at once (each holds a blocking-pool thread);
			       * 0: PC_PROCESS_DEFAULT_RUNNING */
	uint64_t ttl_ms;      /* a finished process is forgotten this long after it ended;
			       * 0: PC_PROCESS_DEFAULT_TTL_MS */
	bool no_cgroup;       /* true: no command gets a cgroup of its own, even where one
			       * could be made (exec.cgroup "off") */
} pc_process_table_config_t;

/* `cfg` may be NULL (the defaults). The caller owns *out. */
int pc_process_table_new(const pc_process_table_config_t *cfg, pc_process_table_t **out);
/* The session `session_key` has ended: every process of it still running
 * is killed as pc_process_kill does (SIGTERM, SIGKILL after the grace).
 * Returns how many were. NULL arguments are a no-op. */
size_t pc_process_table_end_session(pc_process_table_t *t, const char *session_key);
/* How many processes of session `session_key` are running now (a session
 * that has some is not idle). NULL arguments: 0. */
size_t pc_process_table_session_running(pc_process_table_t *t, const char *session_key);
/* The cgroup under which each command gets one of its own (exec_cgroup.h),
 * probed when the table was made; NULL: commands run without (none could
 * be made, or `no_cgroup`). Valid while the table is. */
const char *pc_process_table_cgroup(const pc_process_table_t *t);
/* Kills every process still running (SIGTERM, then SIGKILL after its
 * grace) and waits, bounded by the longest grace plus a few seconds, for
 * their readers to reap them; then drops every record. */
void pc_process_table_free(pc_process_table_t *t);

typedef enum pc_process_state {
	PC_PROCESS_RUNNING = 0,
	PC_PROCESS_EXITED,    /* code: the exit status */
	PC_PROCESS_SIGNALED,  /* code: the signal that ended it */
	PC_PROCESS_TIMED_OUT, /* killed at its timeout; code: the signal */
} pc_process_state_t;

/* A snapshot of one record. */
typedef struct pc_process_info {
	char id[PC_PROCESS_ID_MAX]; /* "p1", "p2", ... in the order started */
	int pid;                    /* also the process group's id */
	pc_process_state_t state;
	int code;
	uint64_t timeout_ms;
	uint64_t total_bytes;       /* output produced so far */
	char command[120];          /* the start of the command, for lists */
} pc_process_info_t;

typedef struct pc_process_spawn {
	const char *path;        /* the program, an absolute path */
	char *const *argv;       /* NULL-terminated */
	char *const *envp;       /* NULL-terminated: the whole environment */
	const char *cwd;         /* the working directory */
	const char *command;     /* as the user gave it, for lists */
	const char *session_key; /* the session it belongs to (pc_process_table_end_session);
				  * may be NULL: none */
	size_t max_output;       /* bytes of output kept (the tail); 0: PC_PROCESS_DEFAULT_OUTPUT */
	uint64_t timeout_ms;     /* killed (SIGTERM, SIGKILL) after this; 0: never */
	uint64_t kill_grace_ms;  /* SIGTERM -> SIGKILL; 0: PC_PROCESS_DEFAULT_GRACE_MS */
	pc_actor_t *notify;      /* a tool invocation woken (pc_tool_wake) with `token` once the
				  * process has been reaped; may be NULL. Retained. */
	uint64_t token;
} pc_process_spawn_t;

/*
 * Starts a process and its reader on `rt`'s blocking pool, and records it
 * in `t`. On success *out is a reference the caller owns. PC_ELIMIT when
 * max_running processes run, or the table holds max_processes records
 * none of which has finished;
 * PC_ESYS when the process could not be started (errno tells why);
 * PC_EBUSY / PC_ESTOPPED from the blocking pool (the child is then killed
 * and reaped before this returns).
 */
int pc_process_spawn(pc_process_table_t *t, pc_runtime_t *rt, const pc_process_spawn_t *req,
		     pc_process_t **out);

pc_process_t *pc_process_retain(pc_process_t *p);
void pc_process_release(pc_process_t *p); /* NULL is a no-op */

/* The record named `id`, retained for the caller; PC_ENOTFOUND if none. */
int pc_process_find(pc_process_table_t *t, const char *id, pc_process_t **out);
/* Snapshots of every record, in the order started. The caller frees *out
 * (NULL when *n is 0). */
int pc_process_list(pc_process_table_t *t, pc_process_info_t **out, size_t *n);
/* Takes the record out of sight: find and list no longer see it, and the
 * table drops it once the process has ended. The process is left alone.
 * Needs no table: the record may outlive it. */
void pc_process_forget(pc_process_t *p);

void pc_process_info(pc_process_t *p, pc_process_info_t *out);
/* Stops waking the invocation: the process goes on unattended. False (and
 * nothing changes) if it has already finished. */
bool pc_process_detach(pc_process_t *p);
/* Signals the group: SIGTERM now, SIGKILL after the grace if it has not
 * ended by then. PC_ESTATE if it has already finished. */
int pc_process_kill(pc_process_t *p);

/*
 * Output, as text the model can read: a NUL byte, and each maximal
 * subpart that is not UTF-8 (io/utf8.h), reads as U+FFFD. When bytes were lost (more came than max_output),
 * the text starts with "[... N bytes truncated]\n".
 *   - _output: everything kept; `from_line` (0-based) and `max_lines`
 *     (0: all) select lines of it;
 *   - _poll: what came since the previous poll.
 * The caller frees *text.
 */
int pc_process_output(pc_process_t *p, size_t from_line, size_t max_lines, char **text);
int pc_process_poll(pc_process_t *p, char **text);

/* The state as one line without volatile data: "running", "exit code 0",
 * "killed by signal 9", "timed out after 1.5 s". */
void pc_process_status_text(const pc_process_info_t *info, char *buf, size_t n);

#ifdef __cplusplus
}
#endif
#endif
