/*
 * The attempt's compaction-aware abort timer (spec §2.6, §7.4, §9.1): when
 * the run budget runs out while compaction is pending or in flight, the
 * deadline is extended once by the compaction timeout; any later expiry
 * (or an expiry with no compaction running) aborts the attempt as a run
 * budget timeout. While an approval is pending the deadline is paused.
 *
 * Pure: the attempt actor owns a pc_attempt_timeout_t, arms its timer
 * actor at `deadline_ms`, and feeds every firing (with the clock and the
 * compaction flags) to pc_attempt_timeout_fire, which says what to do.
 * No I/O, no clock, no globals. Any thread.
 */
#ifndef PINCER_AGENTS_ATTEMPT_ATTEMPT_TIMEOUT_H
#define PINCER_AGENTS_ATTEMPT_ATTEMPT_TIMEOUT_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* §2.6 EMBEDDED_COMPACTION_TIMEOUT_MS: the compaction grace, and the
 * default single-compaction timeout (15 min). */
#define PC_ATTEMPT_COMPACTION_TIMEOUT_MS ((uint64_t)900000)
/* §2.6: a budget at or over the largest timer delay means "unlimited"
 * (no timer); so does 0 (§9.1 "0 = unlimited"). */
#define PC_ATTEMPT_TIMER_MAX_MS ((uint64_t)2147483647)
/* §2.6 / §9.1: warn when the run is still streaming this long after the abort. */
#define PC_ATTEMPT_ABORT_STREAMING_WARN_MS ((uint64_t)10000)
/* §2.1 step 4: the session write lock's max hold for a run is
 * max(5 min, run timeout + compaction grace + 2 min), capped. */
#define PC_ATTEMPT_LOCK_HOLD_MIN_MS ((uint64_t)300000)
#define PC_ATTEMPT_LOCK_HOLD_SLACK_MS ((uint64_t)120000)
#define PC_ATTEMPT_LOCK_HOLD_MAX_MS ((uint64_t)2147000000)

/* resolveRunTimeoutDuringCompaction's answer. */
typedef enum pc_attempt_timeout_verdict {
	PC_ATTEMPT_TIMEOUT_ABORT = 0,
	PC_ATTEMPT_TIMEOUT_EXTEND,
} pc_attempt_timeout_verdict_t;

/* The timer's state. Fields are read-only for the caller. */
typedef struct pc_attempt_timeout {
	uint64_t compaction_timeout_ms; /* the grace an extension adds */
	int64_t deadline_ms;            /* when the timer should fire; valid when armed */
	uint64_t paused_remaining_ms;   /* the budget left when paused */
	bool unlimited;                 /* no timer at all */
	bool grace_used;                /* the one extension is spent */
	bool paused;                    /* an approval wait holds the deadline */
	bool expired;                   /* the abort was decided; nothing fires again */
} pc_attempt_timeout_t;

/* What one firing means. */
typedef enum pc_attempt_timeout_action {
	PC_ATTEMPT_TIMER_IGNORE = 0, /* stale or early firing, paused, or already expired */
	PC_ATTEMPT_TIMER_EXTEND,     /* re-arm at new_deadline_ms; log the extension */
	PC_ATTEMPT_TIMER_ABORT,      /* abortRun(isTimeout = true) */
} pc_attempt_timeout_action_t;

typedef struct pc_attempt_timeout_step {
	pc_attempt_timeout_action_t action;
	int64_t new_deadline_ms;           /* EXTEND: where to re-arm */
	int64_t streaming_warn_at_ms;      /* ABORT: when to check "still streaming" */
	bool timed_out_during_compaction;  /* ABORT: compaction was running */
	bool timed_out_by_run_budget;      /* ABORT: always true (newer attempts) */
} pc_attempt_timeout_step_t;

/* resolveRunTimeoutDuringCompaction: EXTEND only while compaction is
 * pending or in flight and the grace is unused. */
pc_attempt_timeout_verdict_t pc_attempt_timeout_verdict(bool compaction_pending, bool compaction_in_flight,
							  bool grace_used);

/* shouldFlagCompactionTimeout: a timeout abort (also a parent abort whose
 * reason is a timeout) that lands while compaction runs. */
bool pc_attempt_timeout_flags_compaction(bool is_timeout, bool compaction_pending, bool compaction_in_flight);

/* run + compaction grace, saturating (resolveRunTimeoutWithCompactionGraceMs). */
uint64_t pc_attempt_timeout_with_grace_ms(uint64_t run_timeout_ms, uint64_t compaction_timeout_ms);

/* The write lock's max hold for a run (§2.1 step 4). */
uint64_t pc_attempt_lock_max_hold_ms(uint64_t run_timeout_ms, uint64_t compaction_timeout_ms);

/* Arms the timer at now + run_timeout_ms. run_timeout_ms 0 or at least
 * PC_ATTEMPT_TIMER_MAX_MS: unlimited (nothing to arm). compaction_timeout_ms
 * 0: PC_ATTEMPT_COMPACTION_TIMEOUT_MS. PC_EINVAL for NULL. */
int pc_attempt_timeout_init(pc_attempt_timeout_t *t, uint64_t run_timeout_ms, uint64_t compaction_timeout_ms,
			    int64_t now_ms);

/* Should the caller's timer be armed, and where? false while unlimited,
 * paused or expired. */
bool pc_attempt_timeout_armed(const pc_attempt_timeout_t *t, int64_t *deadline_ms);

/* The timer fired at now_ms. A firing before the deadline (a stale timer
 * from before an extension or a pause) is ignored. PC_EINVAL for NULL. */
int pc_attempt_timeout_fire(pc_attempt_timeout_t *t, int64_t now_ms, bool compaction_pending,
			    bool compaction_in_flight, pc_attempt_timeout_step_t *out);

/* An approval wait starts / ends (§2.6 newer): the remaining budget is kept
 * while paused and restarts from now on resume. Both are no-ops when they
 * do not apply (unlimited, expired, already paused / not paused). */
void pc_attempt_timeout_pause(pc_attempt_timeout_t *t, int64_t now_ms);
void pc_attempt_timeout_resume(pc_attempt_timeout_t *t, int64_t now_ms);

#ifdef __cplusplus
}
#endif
#endif
