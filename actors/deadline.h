/*
 * A deadline: a small timer actor that owns arm / extend / cancel logic for
 * its owner and sends the owner one message when the deadline passes. The
 * agent layer builds its attempt timeout and idle watchdogs on it.
 *
 * The handle is the owner's and is used only from the owner's handlers
 * (it needs no lock). Every arm or cancel starts a new generation; a fire
 * message of an older generation is stale and pc_deadline_fired says so, so
 * a deadline that was re-armed, extended or cancelled can never be acted
 * on late.
 */
#ifndef PINCER_ACTORS_DEADLINE_H
#define PINCER_ACTORS_DEADLINE_H

#include <stdbool.h>
#include <stdint.h>

#include "actor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pc_deadline pc_deadline_t;

/* Creates a disarmed deadline owned by the running actor; when it fires,
 * the owner receives a message of `fire_type`. The timer actor stops by
 * itself when the owner stops. */
int pc_deadline_new(pc_ctx_t *owner, uint32_t fire_type, pc_deadline_t **out);

/* Arms (or re-arms) to fire `ms` from now, superseding any earlier arm. */
int pc_deadline_arm(pc_deadline_t *d, uint64_t ms);

/* Moves an armed deadline `ms` later than it currently stands (e.g. once,
 * while a compaction runs). PC_ESTATE if not armed. */
int pc_deadline_extend(pc_deadline_t *d, uint64_t ms);

/* Disarms. Any fire message still on its way becomes stale. */
int pc_deadline_cancel(pc_deadline_t *d);

/* For a message of the fire type: true if it is the current deadline's
 * fire (which disarms it); false if stale. */
bool pc_deadline_fired(pc_deadline_t *d, const pc_msg_t *msg);

bool pc_deadline_armed(const pc_deadline_t *d);

/* Absolute deadline on pc_runtime_now_ms's clock, or 0 when disarmed. */
uint64_t pc_deadline_due(const pc_deadline_t *d);

/* Stops the timer actor and frees the handle. NULL is a no-op. */
void pc_deadline_free(pc_deadline_t *d);

#ifdef __cplusplus
}
#endif
#endif
