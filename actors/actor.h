/*
 * Actors: a behaviour, a private state, and a mailbox. An actor handles one
 * message at a time, on at most one worker at a time; its state needs no
 * locks.
 *
 * Handles. pc_actor_t is reference counted. pc_spawn hands the caller one
 * reference; pc_actor_retain adds one, pc_actor_release drops one. Holding a
 * reference keeps the handle valid (sending to a stopped actor is safe: the
 * message is freed as a dead letter), not the actor alive. Inside a handler
 * pc_self is borrowed: valid until the handler returns.
 *
 * Contexts. A pc_ctx_t is given to a handler and is valid only during that
 * call, on that thread. Functions taking a ctx are for the running actor.
 *
 * Threads: functions without a ctx may be called from any thread.
 */
#ifndef PINCER_ACTORS_ACTOR_H
#define PINCER_ACTORS_ACTOR_H

#include <stdbool.h>
#include <stdint.h>

#include "../mailbox/msg.h"
#include "../runtime/error.h"
#include "../runtime/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pc_actor pc_actor_t;
typedef struct pc_ctx pc_ctx_t;

/* Why an actor stopped. */
enum {
	PC_EXIT_NORMAL = 0,   /* pc_exit(ctx, PC_EXIT_NORMAL) or a normal stop */
	PC_EXIT_ERROR = 1,    /* the handler returned a negative code */
	PC_EXIT_KILLED = 2,   /* pc_actor_stop(..., PC_EXIT_KILLED) */
	PC_EXIT_LINKED = 3,   /* a linked actor stopped abnormally */
	PC_EXIT_SHUTDOWN = 4, /* its supervisor or the runtime shut it down */
};

/* Messages the runtime delivers to behaviours. */
enum {
	PC_MSG_DOWN = PC_MSG_TYPE_SYSTEM + 1, /* payload pc_down_t: a monitor fired */
	PC_MSG_EXIT = PC_MSG_TYPE_SYSTEM + 2, /* payload pc_down_t: a link broke (trap_exit) */
	PC_MSG_TIMEOUT = PC_MSG_TYPE_SYSTEM + 3, /* pc_ask_sync's own use */
};

typedef struct pc_down {
	uint64_t ref;      /* the monitor reference (0 for links) */
	uint64_t actor_id; /* the actor that stopped */
	int32_t reason;    /* PC_EXIT_* */
	int32_t code;      /* the handler's error code for PC_EXIT_ERROR, else 0 */
} pc_down_t;

typedef struct pc_behavior {
	const char *name;
	/* Handles one message. The message is borrowed (freed by the runtime
	 * after return). Return 0 to go on; a negative code stops the actor
	 * with PC_EXIT_ERROR and that code. */
	int (*receive)(pc_ctx_t *ctx, void *state, pc_msg_t *msg);
	/* Runs exactly once when the actor stops, whatever stopped it (exit,
	 * error, stop request, linked exit, runtime shutdown). It owns `state`
	 * and releases it. May be NULL. */
	void (*stop)(pc_ctx_t *ctx, void *state, int reason);
} pc_behavior_t;

/* Spawns an actor running `b` (which must outlive it) on `state`. On
 * success the actor owns `state` (its stop handler releases it) and *out
 * holds one reference owned by the caller; on failure the caller keeps
 * `state`. PC_ESTOPPED if the runtime is stopping. Any thread. */
int pc_spawn(pc_runtime_t *rt, const pc_behavior_t *b, void *state, pc_actor_t **out);
/* pc_spawn, then a message of `start_type` (no payload) sent before the
 * caller can reach the actor, so it is the actor's first message whatever
 * else is sent to it later. On failure (PC_ENOMEM included) nothing was
 * spawned and the caller keeps `state`. `out` may be NULL (the reference
 * is then released). */
int pc_spawn_start(pc_runtime_t *rt, const pc_behavior_t *b, void *state, uint32_t start_type,
		   pc_actor_t **out);

pc_actor_t *pc_actor_retain(pc_actor_t *a);
void pc_actor_release(pc_actor_t *a); /* NULL is a no-op */

/* A process-unique id, never reused. */
uint64_t pc_actor_id(const pc_actor_t *a);
pc_runtime_t *pc_actor_runtime(const pc_actor_t *a);

/* Sends `msg` (ownership passes, on every path). FIFO per sender. Returns
 * 0, or PC_ESTOPPED when the receiver had already stopped (the message was
 * freed). A stopped receiver may also be detected only later, in which case
 * the message is freed as a dead letter. Any thread. */
int pc_send(pc_actor_t *to, pc_msg_t *msg);

/* Shorthand: a message of `type` carrying one 64-bit value. PC_ENOMEM if it
 * could not be allocated. */
int pc_send_u64(pc_actor_t *to, uint32_t type, uint64_t value);
/* Shorthand: a message of `type` with no payload (a signal: abort, tick).
 * PC_ENOMEM if it could not be allocated. */
int pc_send_signal(pc_actor_t *to, uint32_t type);
static inline uint64_t pc_msg_u64(const pc_msg_t *m) { return *(const uint64_t *)pc_msg_cdata(m); }

/* Asks the running actor's question: `msg` goes to `to` with reply_to set
 * to self and a fresh correlation id (written to *corr if not NULL). The
 * reply arrives as an ordinary message with the same corr. */
int pc_ask(pc_ctx_t *ctx, pc_actor_t *to, pc_msg_t *msg, uint64_t *corr);

/* Sends `msg` to `to` as a request whose reply goes to `reply_to` (held
 * until the message is freed) with correlation id `corr`: how an actor
 * forwards a question it was asked, so the one who will answer replies to
 * the one who asked. Ownership of `msg` passes, on every path. Any thread. */
int pc_ask_as(pc_actor_t *to, pc_msg_t *msg, pc_actor_t *reply_to, uint64_t corr);
/* Replies to `request` (which must have come from pc_ask or pc_ask_sync):
 * `reply` goes to its reply_to with its corr. Ownership of `reply` passes.
 * PC_EINVAL if the request expects no reply. The request's reply_to stays
 * valid only while the handler runs: to answer later, retain it and send
 * a message carrying the request's corr. Any thread. */
int pc_reply(const pc_msg_t *request, pc_msg_t *reply);

/* From a thread that is not a worker: sends `msg` as an ask and waits up to
 * `timeout_ms` (< 0: for ever) for the reply, which is returned in *reply
 * and owned by the caller (pc_msg_free). PC_ETIMEDOUT on timeout (a late
 * reply is then dropped); PC_ESTOPPED if `to` stopped without replying.
 * PC_ESTATE if called on a worker thread. */
int pc_ask_sync(pc_actor_t *to, pc_msg_t *msg, int64_t timeout_ms, pc_msg_t **reply);

/* The running actor, borrowed. */
pc_actor_t *pc_self(pc_ctx_t *ctx);
pc_runtime_t *pc_ctx_runtime(pc_ctx_t *ctx);

/* Stops the running actor once the current handler returns. */
void pc_exit(pc_ctx_t *ctx, int reason);

/* Asks `a` to stop with `reason`: a message queued behind those already
 * sent, after which the actor stops. Any thread. */
int pc_actor_stop(pc_actor_t *a, int reason);

/* True once the actor has stopped: its stop handler has returned (a
 * handler that reports its own end is seen before this turns true). */
bool pc_actor_stopped(const pc_actor_t *a);

/* Links the running actor with `other`, both ways: when either stops with
 * a reason other than PC_EXIT_NORMAL, the other stops with PC_EXIT_LINKED,
 * or receives PC_MSG_EXIT if it traps exits. Linking to a stopped actor
 * acts at once. */
int pc_link(pc_ctx_t *ctx, pc_actor_t *other);
int pc_unlink(pc_ctx_t *ctx, pc_actor_t *other);
void pc_trap_exit(pc_ctx_t *ctx, bool on);

/* Monitors `target`: when it stops (or if it already has), the running
 * actor receives PC_MSG_DOWN carrying *ref and the exit reason. Monitors
 * the running actor holds are removed when it stops. */
int pc_monitor(pc_ctx_t *ctx, pc_actor_t *target, uint64_t *ref);
/* Removes a monitor; no DOWN for it is delivered afterwards. PC_ENOTFOUND
 * if there is no such monitor (or its DOWN was already delivered). */
int pc_demonitor(pc_ctx_t *ctx, uint64_t ref);

#ifdef __cplusplus
}
#endif
#endif
