/*
 * The blocking pool: a bounded set of threads for work that blocks
 * (SQLite, waitpid, reading files). Workers never block; they hand such
 * work here and get the result back as a message.
 */
#ifndef PINCER_RUNTIME_BLOCKING_H
#define PINCER_RUNTIME_BLOCKING_H

#include "../actors/actor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Runs on a pool thread; returns the message to send back (may be NULL
 * for none). `arg` is the job's: the function releases it. */
typedef pc_msg_t *(*pc_blocking_fn)(void *arg);
/* Releases `arg` of a job that will never run (runtime stopped first). */
typedef void (*pc_blocking_discard_fn)(void *arg);

/* Queues `fn(arg)`; its result goes to `reply_to` (retained until then;
 * may be NULL). Exactly one of fn or discard is eventually called with
 * `arg`, unless this returns an error, in which case neither is and the
 * caller keeps `arg`. PC_EBUSY when the queue is full, PC_ESTOPPED when the
 * runtime is stopping. Any thread. */
int pc_blocking_submit(pc_runtime_t *rt, pc_blocking_fn fn, pc_blocking_discard_fn discard, void *arg,
		       pc_actor_t *reply_to);

#ifdef __cplusplus
}
#endif
#endif
