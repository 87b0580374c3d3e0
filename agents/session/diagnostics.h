/*
 * Stalled-session diagnostics (spec §9.2): from a session's timestamps and
 * what it is doing, classify it as long running, stalled or stuck, and say
 * what recovery does. A session ages only while no progress is observed
 * (a reply, tool, status or block event; typing keepalives do not count).
 *
 * Recovery never drops queued messages (§13.1 #89208): a stuck session's
 * lane is released and its queue drains; a stalled run is aborted and its
 * queue drains after it.
 *
 * Pure: the diagnostics watchdog feeds it the clock and a snapshot on each
 * tick. No I/O, no globals. Any thread.
 */
#ifndef PINCER_AGENTS_SESSION_DIAGNOSTICS_H
#define PINCER_AGENTS_SESSION_DIAGNOSTICS_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/error.h"
#include "agents/config/config.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Repeated unchanged warnings back off exponentially (factor not in the
 * spec, §14 item 10): warn, 2 × warn, 4 × warn, ... capped at this many
 * doublings. */
#define PC_DIAG_BACKOFF_MAX_SHIFT 6u

typedef enum pc_diag_class {
	PC_DIAG_OK = 0,
	PC_DIAG_LONG_RUNNING, /* session.long_running */
	PC_DIAG_STALLED,      /* session.stalled */
	PC_DIAG_STUCK,        /* session.stuck */
} pc_diag_class_t;

/* "ok", "session.long_running", "session.stalled", "session.stuck". Static. */
const char *pc_diag_class_name(pc_diag_class_t c);

/* What the session's active work is. */
typedef enum pc_diag_activity {
	PC_DIAG_ACT_NONE = 0,   /* no model or tool call in flight */
	PC_DIAG_ACT_MODEL_CALL, /* waiting on a model (silent providers included) */
	PC_DIAG_ACT_TOOL_CALL,  /* a tool is running, or blocked (approval, lock) */
} pc_diag_activity_t;

typedef enum pc_diag_recovery {
	PC_DIAG_RECOVER_NONE = 0,
	PC_DIAG_RECOVER_RELEASE_LANE, /* release the session lane now; queued work drains */
	PC_DIAG_RECOVER_ABORT_RUN,    /* abort-drain the active run; queued work resumes after it */
} pc_diag_recovery_t;

typedef struct pc_diag_input {
	bool processing;          /* the session's state is "processing" */
	bool has_run;             /* an active run owns the session's work */
	pc_diag_activity_t activity; /* what is in flight (owned by the run, or left over) */
	uint32_t queued;          /* messages waiting in the session's queue */
	int64_t started_ms;       /* when processing (the run) started */
	int64_t last_progress_ms; /* the last progress event; 0 = none yet */
	int64_t now_ms;
	uint64_t warn_ms;         /* pc_diag_warn_ms() */
	uint64_t abort_ms;        /* pc_diag_abort_ms() */
	uint64_t generation;      /* the processing generation at snapshot time */
} pc_diag_input_t;

typedef struct pc_diag_result {
	pc_diag_class_t cls;
	pc_diag_recovery_t recovery;
	uint64_t age_ms;          /* time without progress */
	uint64_t run_ms;          /* time since processing started */
	bool keep_queued;         /* always true: recovery never discards queued messages */
	uint64_t idle_if_generation; /* mark the session idle only if this generation
				      * is still current (a newer run is left alone) */
	const char *reason;       /* static: "queued_work_without_active_run", ... */
} pc_diag_result_t;

/*
 * One watchdog tick. Rules, first match wins:
 *   - not processing, or no progress for less than warn: ok;
 *   - no active run (ownerless): with queued work, or with nothing in
 *     flight at all, stuck → release the lane at once; with a stale model
 *     or tool activity and no queue, stalled (not hidden as long running)
 *     → release the lane once past the abort threshold;
 *   - an active run: long running below the abort threshold (owned model
 *     and tool calls are not flagged early: slow providers exist), stalled
 *     at or past it → abort the run.
 * Also long running: a run older than warn that is still making progress.
 * PC_EINVAL for NULL.
 */
int pc_diag_classify(const pc_diag_input_t *in, pc_diag_result_t *out);

/* Whether to log an unchanged warning again: the n-th repeat (n from 0)
 * waits warn_ms << min(n, PC_DIAG_BACKOFF_MAX_SHIFT) after the last one.
 * Recovery itself is attempted on every tick regardless. */
bool pc_diag_should_warn(uint32_t repeats, int64_t last_warn_ms, int64_t now_ms, uint64_t warn_ms);

#ifdef __cplusplus
}
#endif
#endif
