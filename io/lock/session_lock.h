/*
 * The session write lock: one writer per session across threads and
 * processes, taken before a transcript is rewritten (compaction,
 * truncation, repair) and by an attempt for its whole run
 * (spec/agent-loop.md §6.4, docs/session-lock.md).
 *
 * Mechanism: each session has a lock file `<dir>/<sha256(session key)>.lock`
 * (64 hex digits: no session key can name a path outside `dir`). The lock is
 * an open file description lock (fcntl F_OFD_SETLK, whole file, write) on it,
 * so the kernel drops it the moment the holder's last descriptor closes --
 * when the holder releases, exits or is killed. A lock file nobody holds is
 * free, whatever it says: a dead holder's lock is reclaimed at once, with
 * no guessing from ages or pids. While held, the file holds a one-line
 * JSON record of the holder -- pid, process start time, acquired-at, max
 * hold -- for reporting: who holds a session, since when, whether that
 * process still exists, and whether it has held the lock past its maximum
 * hold time. Files stay after release, the record voided (one per session);
 * pc_session_lock_sweep removes those nobody holds.
 *
 * Not reentrant by default: a second acquire of a lock this process already
 * holds waits and fails like any other contender (another thread may be
 * about to release it). An acquire with allow_reentrant set, while this
 * process holds the lock, succeeds at once and is counted; the lock is
 * released when every handle has been released.
 *
 * Threads: acquire, query and sweep block (acquire up to its timeout). Call them
 * from the blocking pool (pc_blocking_submit) or a thread of your own, never
 * on a worker thread: there they return PC_ESTATE. Release never waits and
 * may be called from any thread. Everything here is thread-safe.
 *
 * Processes: descriptors are close-on-exec. A child forked without exec
 * shares the parent's lock descriptions (so a lock outlives a dead parent
 * while such a child lives); it holds no handle of its own: releasing an
 * inherited handle in the child only frees it (PC_ESTATE) and never touches
 * the parent's lock. The lock directory must be on a local file system.
 */
#ifndef PINCER_IO_LOCK_SESSION_LOCK_H
#define PINCER_IO_LOCK_SESSION_LOCK_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "runtime/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pc_session_lock pc_session_lock_t;

/* Defaults (spec §6.4, §9.1). Each is overridden by its environment
 * variable when that holds a decimal safe integer (digits only, at most
 * 2^53 - 1); any other value is ignored. */
#define PC_SESSION_LOCK_ACQUIRE_TIMEOUT_MS 60000  /* PINCER_SESSION_WRITE_LOCK_ACQUIRE_TIMEOUT_MS */
#define PC_SESSION_LOCK_MAX_HOLD_MS 300000        /* PINCER_SESSION_WRITE_LOCK_MAX_HOLD_MS */

/* Waiting: a release, or a holder's death, wakes waiters at once (inotify
 * on the lock directory); between wake-ups a waiter polls with a backoff
 * from MIN to MAX, which bounds the delay if inotify is unavailable. */
#define PC_SESSION_LOCK_POLL_MIN_MS 2
#define PC_SESSION_LOCK_POLL_MAX_MS 100

/* The longest session key accepted, in bytes. */
#define PC_SESSION_LOCK_MAX_KEY 4096

typedef struct pc_session_lock_opts {
	int64_t timeout_ms;   /* how long to wait; 0 = try once; < 0 = the default */
	int64_t max_hold_ms;  /* past this the hold is reported as overdue; < 0 = the
			       * default; 0 is invalid */
	bool allow_reentrant; /* succeed at once (counted) if this process holds it */
} pc_session_lock_opts_t;

/* Sets the defaults: timeout and max hold -1 (the environment variable or
 * the constant, read at each acquire), not reentrant. */
void pc_session_lock_opts_init(pc_session_lock_opts_t *o);

/* What is known about a session's lock (from pc_session_lock_query, or
 * about the holder when an acquire ran out of time). */
typedef struct pc_session_lock_info {
	bool held;              /* a process holds the lock now */
	bool record_ok;         /* the holder's record was read (fields below valid) */
	int32_t pid;            /* the holder's pid as recorded */
	uint64_t starttime;     /* its start time, clock ticks after boot (/proc stat
				 * field 22); 0 if the holder could not read it */
	int64_t acquired_at_ms; /* when it took the lock, Unix epoch ms */
	int64_t held_ms;        /* for how long, as of the query */
	int64_t max_hold_ms;    /* the holder's maximum hold time */
	bool holder_alive;      /* the recorded process still exists (same pid and
				 * start time); false while `held` means another
				 * process inherited the lock from it (fork) */
	bool overdue;           /* held_ms > max_hold_ms */
	int64_t timeout_ms;     /* acquire: the timeout that ran out; query: 0 */
	char path[PATH_MAX];    /* the lock file */
} pc_session_lock_info_t;

/*
 * Takes the write lock of `session_key` (any non-empty string of at most
 * PC_SESSION_LOCK_MAX_KEY bytes; its bytes never reach a path), with lock
 * files in `dir` (created, mode 0700, if missing; its parent must exist).
 * `opts` may be NULL (the defaults). On success *out is a handle the caller
 * owns and gives back with pc_session_lock_release.
 *
 * Returns 0; PC_EBUSY ("session busy") when the lock is still held by
 * another holder after the timeout, and then fills `busy` (may be NULL)
 * with what is known about the holder; PC_ESTATE on a worker thread;
 * PC_EINVAL for bad arguments; PC_ENOMEM; PC_ESYS when a system call failed
 * (errno tells which). May block for up to the timeout.
 */
int pc_session_lock_acquire(const char *dir, const char *session_key, const pc_session_lock_opts_t *opts,
			    pc_session_lock_t **out, pc_session_lock_info_t *busy);

/*
 * Gives a handle back and frees it. The last handle of a reentrant hold
 * releases the lock, and waiters wake. Returns 0;
 * PC_ESTATE for a handle inherited over fork (freed, the parent's lock
 * untouched); PC_EINVAL for NULL. Any thread; never waits.
 */
int pc_session_lock_release(pc_session_lock_t *lock);

/*
 * Who holds the lock of `session_key` in `dir`, since when, and whether
 * that is past its maximum hold time. A free lock gives 0 with
 * out->held false. Returns 0, PC_EINVAL, PC_ESTATE on a worker thread, or
 * PC_ESYS. Blocks briefly (reads the lock file).
 */
int pc_session_lock_query(const char *dir, const char *session_key, pc_session_lock_info_t *out);

/*
 * Writes the "session busy" message for a failed acquire into `buf`, e.g.
 * "session busy: session file locked (timeout 60000ms): pid=1234
 * /state/locks/<hash>.lock". Returns 0, PC_EINVAL, or PC_ELIMIT when the
 * message did not fit (it is cut and still NUL-terminated).
 */
int pc_session_lock_busy_message(const pc_session_lock_info_t *info, char *buf, size_t cap);

/*
 * Removes the lock files in `dir` that nobody holds (at startup, or from a
 * "doctor"); held ones and other files are left alone. Safe while other
 * threads and processes use the locks. *removed (may be NULL) counts the
 * files removed. Returns 0 (also for a missing directory), PC_EINVAL,
 * PC_ESTATE on a worker thread, or PC_ESYS. Blocks briefly.
 */
int pc_session_lock_sweep(const char *dir, size_t *removed);

/* One lock this process holds, as handed to a pc_session_lock_overdue
 * callback. The strings are valid only during the callback. */
typedef struct pc_session_lock_held {
	const char *session_key;
	const char *path;
	int64_t held_ms;
	int64_t max_hold_ms;
	uint32_t count; /* handles out (more than 1 only for reentrant holds) */
} pc_session_lock_held_t;

/* Returns nonzero to stop the walk. */
typedef int (*pc_session_lock_held_fn)(void *user, const pc_session_lock_held_t *h);

/*
 * Reports the locks this process has held for longer than their maximum
 * hold time: calls `fn` once for each (outside any internal lock, so `fn`
 * may use this API) and sets *count (may be NULL) to how many there were.
 * Nothing is released: the report is for whoever supervises the holder.
 * Returns 0, the first nonzero value `fn` returned, PC_EINVAL or PC_ENOMEM.
 * Any thread; never waits on a lock file.
 */
int pc_session_lock_overdue(pc_session_lock_held_fn fn, void *user, size_t *count);

/* Field 22 of /proc/<pid>/stat: the process's start time in clock ticks
 * after boot, which tells it from a later process given the same pid.
 * PC_ENOTFOUND when there is no such process, PC_ESYS otherwise. */
int pc_proc_starttime(pid_t pid, uint64_t *out);

/* Numeric fields of /proc/<pid>/stat (proc(5) numbers them from 1; each
 * of `fields` from 3 on, ascending) into out[0..n), from one read: e.g.
 * 14 and 15, the user and system CPU time in clock ticks. Errors as
 * pc_proc_starttime's. */
int pc_proc_stat_fields(pid_t pid, const int *fields, size_t n, uint64_t *out);

#ifdef __cplusplus
}
#endif
#endif
