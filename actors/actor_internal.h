/* The actor core, shared by actors/ and the scheduler. Never installed. */
#ifndef PC_ACTORS_ACTOR_INTERNAL_H
#define PC_ACTORS_ACTOR_INTERNAL_H

#include <pthread.h>

#include "../mailbox/mailbox.h"
#include "../runtime/runtime_internal.h"
#include "actor.h"

/* Runtime-internal message types. */
enum {
	PC__MSG_STOP = PC_MSG_TYPE_SYSTEM + 0x100, /* payload int32 reason */
	PC__MSG_LINK_EXIT,                       /* payload pc_down_t */
	PC__MSG_DESTROY,                         /* the embedded stub: last reference gone */
	PC__MSG_SHRINK,                          /* a no-op that takes a large stub's place */
};

/* Shared flags (atomic). */
enum {
	PC__AF_HAS_MUTED = 1u << 0,  /* senders are held in ext->muted */
	PC__AF_STOPPED = 1u << 1,    /* the stop handler has run */
	PC__AF_TRAP_EXIT = 1u << 2,  /* links deliver PC_MSG_EXIT */
};

typedef struct pc__monitor {
	uint64_t ref;
	pc_actor_t *actor; /* retained */
	pc_msg_t *note;    /* links and watchers: the exit notice, allocated up
			    * front so that telling of a death never fails */
} pc__monitor_t;

typedef struct pc__actor_vec {
	pc__monitor_t *v;
	uint32_t n, cap;
} pc__actor_vec_t;

/* Rarely used parts, allocated on first use and guarded by `lock`. */
typedef struct pc__actor_ext {
	pthread_mutex_t lock;
	bool dead;
	pc__actor_vec_t links;   /* linked actors (ref 0) */
	pc__actor_vec_t watchers; /* who monitors us, by monitor ref */
	pc__actor_vec_t watching; /* whom we monitor, by monitor ref */
	pc__actor_vec_t muted;   /* senders held back until we drain (not retained) */
	char *name;              /* registered name */
} pc__actor_ext_t;

struct pc_actor {
	pc__mailbox_t mq;        /* head is written by every sender ... */
	uint32_t aflags;         /* ... and these sit on the same line */
	uint32_t refs;
	uint32_t pushed;         /* messages ever pushed (atomic add by senders) */
	uint32_t popped;         /* messages ever popped (stored by the consumer);
				  * pushed - popped is the mailbox depth, and
				  * the consumer pays no atomic for it */
	const pc_behavior_t *beh;
	void *state;
	pc_runtime_t *rt;
	pc__actor_ext_t *ext;    /* installed once with CAS */
	uint64_t id;
	int32_t exit_reason, exit_code;
	pc_msg_t stub;           /* first stub; later the DESTROY message */
} __attribute__((aligned(64))); /* two cache lines, in a pool chunk */

/* The ext block, installing it on first use (NULL: out of memory). */
pc__actor_ext_t *pc__actor_ext(pc_actor_t *a);
/* The ext block if installed, else NULL. Another thread may install it at
 * any moment (linking to or monitoring this actor), hence the atomic load. */
pc__actor_ext_t *pc__actor_ext_peek(const pc_actor_t *a);
int pc__vec_add(pc__actor_vec_t *v, uint64_t ref, pc_actor_t *a, pc_msg_t *note);
/* Removes entry `ref`, freeing its note; its actor goes to *out. */
bool pc__vec_take(pc__actor_vec_t *v, uint64_t ref, pc_actor_t **out);

/* links.c: what happens to links, monitors and muted senders when `a`
 * stops; and the handling of the system messages they send. */
void pc__actor_notify_exit(pc_actor_t *a);
void pc__actor_ext_free(pc_actor_t *a);
bool pc__actor_take_watching(pc_actor_t *a, uint64_t ref);
/* Removes a's side of its link to actor `id`; false if there was none
 * (unlinked meanwhile, or the exit signal was already handled). */
bool pc__actor_drop_link(pc_actor_t *a, uint64_t id);

/* actor_pool.c: slots for actors. `w` is the calling worker of this
 * runtime, or NULL on any other thread. A slot is in use while its rt is
 * set. */
pc_actor_t *pc__actor_alloc(pc_runtime_t *rt, pc__worker_t *w);
void pc__actor_free(pc_runtime_t *rt, pc__worker_t *w, pc_actor_t *a);
void pc__actor_pool_each(pc_runtime_t *rt, void (*fn)(pc_actor_t *a, void *arg), void *arg);
/* The same while the runtime runs: under the pool's lock, each slot's rt
 * read atomically; a slot may be reclaimed while fn looks at it. */
void pc__actor_pool_each_live(pc_runtime_t *rt, void (*fn)(pc_actor_t *a, void *arg), void *arg);

/* At a trim: gives back the chunks whose every slot is free, after moving
 * the free slots of `w`'s cache (the calling worker's, or NULL) to the
 * depot. Any thread. */
void pc__actor_pool_shrink(const pc_runtime_t *rt, pc__worker_t *w);

/* registry.c */
void pc__registry_forget(pc_runtime_t *rt, const char *name, pc_actor_t *a);
void pc__registry_free(pc_runtime_t *rt);

void pc__unmute_all(pc_actor_t *a);

#endif
