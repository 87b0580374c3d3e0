/*
 * A session's lease on its transcript: the one-writer rule across
 * processes (docs/session-lock.md). The session actor takes its session's
 * lease in the store before it runs anything, renews it while it has
 * work, and gives it back once it has been idle a moment; every
 * transcript write carries the lease's epoch, and the store refuses a
 * write whose epoch is no longer the session's (PC_STORE_EFENCED).
 *
 * This is the lease's state machine, kept by the session actor and driven
 * by it: its store replies and its timer (PC__MSG_SESSION_LEASE) come to
 * the session, which hands them here. Owners name a process (below), so
 * a lease held by a process on this machine that has died is taken at
 * once rather than after its time runs out.
 */
#ifndef PINCER_AGENTS_SESSION_LEASE_H
#define PINCER_AGENTS_SESSION_LEASE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "actors/actor.h"
#include "actors/timer.h"
#include "io/store/store.h"

#define PC__LEASE_TTL_MS 30000u       /* a holder that stops renewing loses it after this */
#define PC__LEASE_RENEW_MS 10000u     /* renewed this often while the session has work */
#define PC__LEASE_IDLE_MS 1000u       /* given back after the session was idle this long */
#define PC__LEASE_RETRY_MIN_MS 10u    /* a busy lease is asked for again after this, */
#define PC__LEASE_RETRY_MAX_MS 1000u  /* doubling up to this */

typedef enum pc__lease_state {
	PC__LEASE_NONE = 0, /* not held, not asked for */
	PC__LEASE_ASKING,   /* an acquire is in flight */
	PC__LEASE_WAITING,  /* another process holds it: asked again when the timer fires */
	PC__LEASE_HELD,
} pc__lease_state_t;

typedef struct pc__lease {
	pc__lease_state_t state;
	bool renewing;       /* the acquire in flight renews a held lease */
	bool idle;           /* the timer is the idle release, not the renewal */
	bool out;            /* node-bound: refused while this node was out of the
			      * cluster (its runs may have been taken over meanwhile) */
	int64_t epoch;       /* held: its fencing epoch; otherwise the last one held */
	uint64_t corr;       /* the acquire in flight */
	pc_timer_t timer;    /* WAITING: the retry; HELD: renewal or idle release */
	uint32_t backoff_ms;
} pc__lease_t;

/* What a reply meant for the session. */
typedef enum pc__lease_event {
	PC__LEASE_EV_NONE = 0, /* nothing to do (still waiting, or renewed) */
	PC__LEASE_EV_GRANTED,  /* held now: runs may start */
	PC__LEASE_EV_LOST,     /* it was held and is not any more: stop the session's runs */
	PC__LEASE_EV_FAILED,   /* the store could not take the request: the waiting runs fail */
} pc__lease_event_t;

/* Everything the lease's messages need. */
typedef struct pc__lease_ctx {
	pc_ctx_t *ctx;
	pc__lease_t *lease;
	const char *owner, *key;
	pc_actor_t *store;
	bool node; /* held while this cluster node is live: never renewed here */
	uint64_t *held; /* counts the leases held (atomic; may be NULL) */
} pc__lease_ctx_t;

/* Asks for the lease unless it is held or already asked for. Returns true
 * when it is held now. */
bool pc__lease_want(const pc__lease_ctx_t *c);

/* A store reply with the lease's corr (true: it was the lease's, *ev says
 * what it meant; *fresh on GRANTED: another holder came between, so what
 * the process kept of the transcript may be stale). */
bool pc__lease_on_reply(const pc__lease_ctx_t *c, const pc_msg_t *msg, pc__lease_event_t *ev, bool *fresh);

/* The lease's timer fired: retries a waiting acquire, renews a held lease
 * when `busy`, gives it back when idle. */
void pc__lease_on_tick(const pc__lease_ctx_t *c, bool busy);

/* The session went idle (arms the release) or has work again (arms the
 * renewal). Nothing when the lease is not held. */
void pc__lease_idle(const pc__lease_ctx_t *c);
void pc__lease_busy(const pc__lease_ctx_t *c);

/* Renews a held lease now: a run that failed may have failed because the
 * lease was lost (a fenced write), which the renewal's answer tells. */
void pc__lease_check(const pc__lease_ctx_t *c);

/* Gives the lease back now (stop, or idle long enough); fire and forget. */
void pc__lease_release(const pc__lease_ctx_t *c);

/* The cluster node's deadline passed (pc_agent_node_lapsed): another node
 * may own the session now, so a held lease is forgotten (and given back,
 * which the store refuses if it changed hands). True when it was held. */
bool pc__lease_lapse(const pc__lease_ctx_t *c);

/* This process as an owner of leases and runs: "<pid>.<start time>@<host>
 * #<nonce>" (the nonce tells two agents of one process apart). PC_ELIMIT
 * when it does not fit `len`. */
#define PC__OWNER_MAX 128u
int pc__owner_make(char *buf, size_t len, const char *nonce);

/* True when `owner` names a process of this machine that has ended (its
 * pid is gone, or now names a process started at another time). An owner
 * of another machine, or not in that shape, is never known to be gone. */
bool pc__owner_gone(const char *owner);

/* The epoch transcript writes carry: the held lease's, or 0 when none is
 * held (callers only write while it is). */
int64_t pc__lease_epoch(const pc__lease_t *l);

#endif
