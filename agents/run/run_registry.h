/*
 * The run registry (spec §2.5, §8.4): every run the process knows, by run
 * id, and the active run of each session.
 *
 * A run is added when it is accepted (status queued), becomes the
 * session's active run when it starts, and finishes with a status. Steer
 * and abort find the run's actor here; agent.wait waits here. Clearing a
 * session's active run matches the run id, so the late cleanup of an old
 * run never removes a newer one (§2.5 handle_mismatch). Finished runs stay
 * for the terminal cache time (10 min, §9.1) so a late agent.wait still
 * gets the outcome, then are swept; at most PC_RUN_REGISTRY_TERMINAL_MAX of
 * them are kept (the oldest go first), so memory stays bounded under load.
 * An evicted run is still answered from the store by the agent layer.
 *
 * Each entry can carry one attachment (the run's event bus) with its
 * release function, released when the entry is swept or the registry is
 * freed.
 *
 * Threads: every function may be called from any thread (sharded locks).
 */
#ifndef PINCER_AGENTS_RUN_RUN_REGISTRY_H
#define PINCER_AGENTS_RUN_RUN_REGISTRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "actors/actor.h"
#include "runtime/error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PC_RUN_REGISTRY_TERMINAL_TTL_MS ((uint64_t)600000) /* terminal cache: 10 min */
#define PC_RUN_REGISTRY_TERMINAL_MAX 16384u /* ... and at most this many finished runs */
#define PC_RUN_ID_MAX 64u
#define PC_RUN_ERROR_MAX 384u

typedef enum pc_run_status {
	PC_RUN_STATUS_QUEUED = 0,
	PC_RUN_STATUS_RUNNING,
	PC_RUN_STATUS_OK,
	PC_RUN_STATUS_ERROR,
	PC_RUN_STATUS_ABORTED,
	PC_RUN_STATUS_TIMEOUT,
} pc_run_status_t;

/* "queued", "running", "ok", "error", "aborted", "timeout". Static. */
const char *pc_run_status_name(pc_run_status_t s);
static inline bool pc_run_status_terminal(pc_run_status_t s) { return s >= PC_RUN_STATUS_OK; }

/* A copy of what the registry knows of a run. */
typedef struct pc_run_info {
	char run_id[PC_RUN_ID_MAX + 1];
	char session_key[256];
	pc_run_status_t status;
	int64_t accepted_ms, started_ms, ended_ms; /* wall clock; 0 = not yet */
	char error[PC_RUN_ERROR_MAX];              /* "" when none */
	char error_kind[32];                       /* "timeout", "context_overflow", ... or "" */
	bool replay_invalid;                       /* running it again could repeat what a
						    * mutating tool of it did (spec §1.14) */
} pc_run_info_t;

typedef struct pc_run_registry pc_run_registry_t;

int pc_run_registry_new(pc_run_registry_t **out);
/* Frees every entry (releasing attachments and actor references) and
 * wakes every waiter with PC_ESTOPPED. */
void pc_run_registry_free(pc_run_registry_t *r);

/* Told of every run's transitions (added: queued; started: running;
 * finished: its terminal status) with a copy of its entry, outside the
 * registry's locks, on the thread that made the transition: a run's
 * transitions come in their order. Set once, before the registry is used
 * (`fn` NULL: nobody). */
typedef void (*pc_run_registry_observer_fn)(void *ud, const pc_run_info_t *info);
void pc_run_registry_observe(pc_run_registry_t *r, pc_run_registry_observer_fn fn, void *ud);

/* Adds run `run_id` of `session_key`, status queued. `attachment` (may be
 * NULL) is released with `release` when the entry goes. PC_EEXIST if the
 * id is known (the attachment then stays the caller's). */
int pc_run_registry_add(pc_run_registry_t *r, const char *run_id, const char *session_key, int64_t accepted_ms,
			void *attachment, void (*release)(void *));

/* The run started: status running, `actor` (retained) is where steer and
 * abort go, and it becomes its session's active run (replacing any other,
 * which is logged by the caller). PC_ENOTFOUND, PC_ESTATE if finished
 * or already started. */
int pc_run_registry_start(pc_run_registry_t *r, const char *run_id, pc_actor_t *actor, int64_t started_ms);

/* The run ended with `status` (terminal), an error text and kind (may be
 * NULL), replay-invalid or not. Drops the actor reference, clears the
 * session's active run only if it is still this run, and wakes waiters.
 * Idempotent: a second finish is ignored (PC_ESTATE). */
int pc_run_registry_finish(pc_run_registry_t *r, const char *run_id, pc_run_status_t status, int64_t ended_ms,
			   const char *error, const char *error_kind, bool replay_invalid);

/* A copy of the entry. PC_ENOTFOUND. */
int pc_run_registry_get(pc_run_registry_t *r, const char *run_id, pc_run_info_t *out);

/* The run's actor (a new reference, the caller's), or NULL when it is not
 * running. */
pc_actor_t *pc_run_registry_actor(pc_run_registry_t *r, const char *run_id);
/* The attachment of a run, retained with `retain` (may be NULL: borrowed
 * under the caller's own guarantee), or NULL. */
void *pc_run_registry_attachment(pc_run_registry_t *r, const char *run_id, void *(*retain)(void *));

/* The active run of a session: its id into `run_id` (PC_RUN_ID_MAX + 1
 * bytes; may be NULL) and its actor as a new reference (may be NULL when
 * `actor` is NULL). PC_ENOTFOUND when the session has none. */
int pc_run_registry_active(pc_run_registry_t *r, const char *session_key, char *run_id, pc_actor_t **actor);

/* Runs started and not finished. */
size_t pc_run_registry_active_count(pc_run_registry_t *r);

/* From a plain thread: waits until the run is finished (0, *out filled),
 * `timeout_ms` passed (PC_ETIMEDOUT, *out holds the current state; the run
 * goes on), the run is unknown (PC_ENOTFOUND) or the registry is freed
 * (PC_ESTOPPED). timeout_ms < 0 waits for ever. */
int pc_run_registry_wait(pc_run_registry_t *r, const char *run_id, int64_t timeout_ms, pc_run_info_t *out);

/* For actors: when the run finishes (or at once if it has), `who` gets a
 * message of `type` whose payload is a pc_run_info_t, with corr = `corr`.
 * PC_ENOTFOUND for an unknown run. */
int pc_run_registry_watch(pc_run_registry_t *r, const char *run_id, pc_actor_t *who, uint32_t type, uint64_t corr);

/* Removes finished runs older than the terminal cache time (now_ms -
 * ended_ms > the TTL) that no thread is waiting on; returns how many. Also
 * done by add, for the shard it adds to, with accepted_ms as now (when > 0),
 * at most once per 10 s of that clock. */
size_t pc_run_registry_sweep(pc_run_registry_t *r, int64_t now_ms);

#ifdef __cplusplus
}
#endif
#endif
