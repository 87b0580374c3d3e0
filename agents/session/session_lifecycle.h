/*
 * The session actor's lifecycle: one enum of its states, the transitions
 * allowed between them, and the queue policy's view of the session as a
 * projection of that state (docs/architecture.md, "one state machine per
 * lifecycle").
 *
 *   new -> idle                       its first message
 *   idle -> lane                      a message becomes the active run
 *   lane -> lease | running           the global lane's permit (the lease
 *                                     held: the run starts at once)
 *   lease -> running | lane           the lease held, or held elsewhere
 *                                     (the permit goes back)
 *   lane | lease | running -> idle    the active run ended (or never ran)
 *   idle -> retiring                  idle for long enough: it leaves
 *   any state -> stopped              its stop handler (retired or shut down)
 *
 * The queue (followups, collected batches), the interrupting item and the
 * pending submits are the session's data, not its state: the state is
 * where the session's one active run is.
 *
 * Only the session actor changes its state, through its session_set
 * (session_actor.c: checks pc_sess_lc_legal, counts and refuses what is
 * not, traces); scripts/check-lifecycles fails the build's tests when
 * anything else assigns it.
 *
 * Pure functions, callable from any thread.
 */
#ifndef PINCER_AGENTS_SESSION_SESSION_LIFECYCLE_H
#define PINCER_AGENTS_SESSION_SESSION_LIFECYCLE_H

#include <stdbool.h>

#include "queue_policy.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum pc_sess_lc {
	PC_SESS_LC_NEW = 0,  /* spawned; no message seen yet */
	PC_SESS_LC_IDLE,     /* no active run */
	PC_SESS_LC_LANE,     /* the active run waits for the global lane's permit */
	PC_SESS_LC_LEASE,    /* the permit is held; the run waits for the session's lease */
	PC_SESS_LC_RUNNING,  /* the run actor runs */
	PC_SESS_LC_RETIRING, /* idle long enough: it exits */
	PC_SESS_LC_STOPPED,  /* its stop handler ran (terminal) */
	PC_SESS_LC_COUNT,
} pc_sess_lc_t;

/* "new", "idle", ..., "stopped"; "unknown" out of range. Static. */
const char *pc_sess_lc_name(pc_sess_lc_t s);

/* Whether the table allows `from` -> `to`. */
bool pc_sess_lc_legal(pc_sess_lc_t from, pc_sess_lc_t to);

/* Whether the session has an active run (waiting for the lane or the
 * lease, or running). */
static inline bool pc_sess_lc_active(pc_sess_lc_t s)
{
	return s == PC_SESS_LC_LANE || s == PC_SESS_LC_LEASE || s == PC_SESS_LC_RUNNING;
}

/* What the queue policy sees (pc_queue_on_message's phase): the active
 * run's view (`run_view`, the last PC__MSG_RUN_PHASE of a running run;
 * starting until the run actor runs); without one, ending while an
 * interrupting message waits for the aborted run to end (`interrupt`),
 * else idle. */
pc_run_phase_t pc_sess_lc_queue_phase(pc_sess_lc_t s, pc_run_phase_t run_view, bool interrupt);

#ifdef __cplusplus
}
#endif
#endif
