/*
 * The global lane (spec §1.1, §6.1, §6.2, §1.17): a fair semaphore capping
 * how many runs are active at once, as an actor.
 *
 * A session actor asks for a permit with a ticket (a number it chooses,
 * unique per lane) and a priority; permits are granted highest priority
 * first, FIFO within a priority. A request that has to wait is told so at
 * once (PC_MSG_LANE_WAITING: how many are queued ahead) and, if it waited
 * at least the warn threshold (2 s), once more when granted, so callers can
 * show a "queued" state (§1.1 item 7). A permit is held until released
 * (PC_LANE_RELEASE, idempotent; releasing a ticket still queued cancels
 * it).
 *
 * Lane task timeout (§1.17): a permit granted with a task timeout is taken
 * back when the timeout passes without a release: its holder is sent
 * PC_MSG_LANE_EXPIRED and the slot goes to the next in line, so a run
 * whose transport ignores its abort cannot wedge the lane. A late release
 * of an expired ticket is ignored. A holder may push the timeout back
 * (progress heartbeat, PC_LANE_PROGRESS).
 *
 * GRANTED is always sent (it is the permit); its wait_ms, measured from the
 * pc_lane_acquire call, tells whether the wait passed the warn threshold.
 * WAITING is sent only when the request could not be granted at once.
 *
 * Threads: every function may be called from any thread.
 */
#ifndef PINCER_AGENTS_SESSION_LANE_H
#define PINCER_AGENTS_SESSION_LANE_H

#include <stdbool.h>
#include <stdint.h>

#include "actors/actor.h"
#include "runtime/error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PC_LANE_WARN_AFTER_MS ((uint64_t)2000) /* §6.1 warnAfterMs */

enum {
	PC_MSG_LANE_GRANTED = PC_MSG_TYPE_SYSTEM + 0x2300, /* pc_lane_notice_t */
	PC_MSG_LANE_WAITING,                               /* pc_lane_notice_t */
	PC_MSG_LANE_EXPIRED,                               /* pc_lane_notice_t */
};

/* What the lane tells a ticket's holder. */
typedef struct pc_lane_notice {
	uint64_t ticket;
	uint64_t tag;
	uint64_t wait_ms;       /* GRANTED: how long it waited */
	uint32_t queued_ahead;  /* WAITING: requests ahead of it; GRANTED: ahead at enqueue */
	uint32_t active;        /* permits held when the notice was sent */
} pc_lane_notice_t;

typedef struct pc_lane pc_lane_t;

/* Spawns the lane actor with `max_concurrent` permits (>= 1). The caller
 * owns *out (pc_lane_free, before the runtime stops). */
int pc_lane_new(pc_runtime_t *rt, uint32_t max_concurrent, pc_lane_t **out);
void pc_lane_free(pc_lane_t *l);

/*
 * Asks for a permit for `ticket`; notices go to `holder` (retained until
 * the ticket is released, cancelled or expired) with `tag`. `priority`
 * is pc_queue_priority_t (higher first; any positive value counts as
 * foreground, any negative one as background). task_timeout_ms 0: none.
 * A ticket already known to the lane (queued or holding) is ignored.
 */
int pc_lane_acquire(pc_lane_t *l, uint64_t ticket, int priority, pc_actor_t *holder, uint64_t tag,
		    uint64_t task_timeout_ms);
/* Gives the permit back, or withdraws a request still queued. */
int pc_lane_release(pc_lane_t *l, uint64_t ticket);
/* The holder made progress: its task timeout restarts from now. */
int pc_lane_progress(pc_lane_t *l, uint64_t ticket);
/* Changes the cap (>= 1); waiting requests are granted at once if it grew. */
int pc_lane_set_max(pc_lane_t *l, uint32_t max_concurrent);

typedef struct pc_lane_stats {
	uint32_t max;
	uint32_t active;       /* permits held now */
	uint32_t queued;       /* requests waiting now */
	uint32_t peak_active;  /* the most ever held at once */
	uint64_t granted;      /* permits granted since start */
	uint64_t expired;      /* permits taken back by the task timeout */
} pc_lane_stats_t;
/* A snapshot (each field read atomically). */
void pc_lane_stats(const pc_lane_t *l, pc_lane_stats_t *out);

#ifdef __cplusplus
}
#endif
#endif
