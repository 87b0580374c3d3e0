/*
 * The run's lifecycle: one enum of its states, the transitions allowed
 * between them, and the views other parts keep of a run as projections of
 * that one state (docs/architecture.md, "one state machine per
 * lifecycle").
 *
 *   queued -> idle                          the run actor starts
 *   idle -> resolving | attempt | delay | compacting | truncating
 *         | sending | ending                one step of the retry loop
 *   resolving | delay | sending -> idle | ending   (ending: an abort)
 *   attempt | compacting | truncating -> idle
 *   ending -> ok | error | aborted | timeout        the end's row committed
 *   any state before ending -> error        stopped without finishing
 *
 * Only the run actor changes a run's state, through its run_set (which
 * checks pc_run_lc_legal, counts and refuses what is not, and traces);
 * scripts/check-lifecycles fails the build's tests when anything else
 * assigns it. The projections below are the only places that turn a run
 * state into a registry status, a store status or the session's view.
 *
 * Pure functions, callable from any thread.
 */
#ifndef PINCER_AGENTS_RUN_RUN_LIFECYCLE_H
#define PINCER_AGENTS_RUN_RUN_LIFECYCLE_H

#include <stdbool.h>

#include "io/store/store.h"
#include "../session/queue_policy.h"
#include "run_registry.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum pc_run_lc {
	PC_RUN_LC_QUEUED = 0,  /* accepted; the actor has not started */
	PC_RUN_LC_IDLE,        /* between steps */
	PC_RUN_LC_RESOLVING,   /* before_model_resolve's chain */
	PC_RUN_LC_ATTEMPT,     /* an attempt in flight */
	PC_RUN_LC_DELAY,       /* a backoff sleep */
	PC_RUN_LC_COMPACTING,  /* the run's own compaction */
	PC_RUN_LC_TRUNCATING,  /* the transcript's tool results being cut */
	PC_RUN_LC_SENDING,     /* message_sending's chain */
	PC_RUN_LC_ENDING,      /* the end's store row is committing */
	/* terminal, in pc_run_status_t order from PC_RUN_STATUS_OK */
	PC_RUN_LC_OK,
	PC_RUN_LC_ERROR,
	PC_RUN_LC_ABORTED,
	PC_RUN_LC_TIMEOUT,
	PC_RUN_LC_COUNT,
} pc_run_lc_t;

/* "queued", "idle", ..., "timeout"; "unknown" out of range. Static. */
const char *pc_run_lc_name(pc_run_lc_t s);

/* Whether the table allows `from` -> `to`. */
bool pc_run_lc_legal(pc_run_lc_t from, pc_run_lc_t to);

/* Ending or ended: the end is decided, nothing else may start. */
static inline bool pc_run_lc_ending(pc_run_lc_t s) { return s >= PC_RUN_LC_ENDING; }
static inline bool pc_run_lc_terminal(pc_run_lc_t s) { return s > PC_RUN_LC_ENDING; }

/* The terminal state of an end with `status` (a terminal status; anything
 * else is an error). */
pc_run_lc_t pc_run_lc_done(pc_run_status_t status);

/* The registry's status: queued, running, then the outcome. */
pc_run_status_t pc_run_lc_registry_status(pc_run_lc_t s);

/* The store's status: accepted until the end, then the outcome. The store
 * never records "running" (its rows say accepted until they end; a
 * restart recovers accepted runs), so the values on disk are what they
 * were before this machine existed. */
pc_store_run_status_t pc_run_lc_store_status(pc_run_lc_t s);

/* The session's view of its active run. `activity` is the last work the
 * run saw reported: an attempt's PC__MSG_ATTEMPT_PHASE (starting,
 * streaming or compacting) or its own compaction; it stands through the
 * steps between attempts. Before the first step the view is starting;
 * once the run ends the session drops it (the session's own state). */
pc_run_phase_t pc_run_lc_session_phase(pc_run_lc_t s, pc_run_phase_t activity);

#ifdef __cplusplus
}
#endif
#endif
