/*
 * Message pools: per-thread caches and the shared depot behind them. The
 * mailbox part's header for the threads that make messages (workers, the
 * I/O loops); not installed.
 */
#ifndef PC_MAILBOX_MSG_POOL_H
#define PC_MAILBOX_MSG_POOL_H

#include "magazine.h"
#include "msg.h"

/* Runtime-owned header flags. */
enum {
	PC_MSGF_EMBEDDED = 1u << 0,  /* lives inside another object: never freed */
	PC_MSGF_REPLY_REF = 1u << 1, /* reply_to holds a reference to release */
	PC_MSGF_TIMER = 1u << 2,     /* fired timer: payload is a pc__timer_fire */
};

#define PC_MSG_CLASSES 4
#define PC_MSG_CLASS_HEAP 0xFFFFu
#define PC_MSG_MAG_SIZE 128u

/* One thread's cache: two magazines per size class (magazine.h). */
typedef struct pc__msg_cache {
	pc__mags_t cls[PC_MSG_CLASSES];
} pc__msg_cache_t;

/* A copy of `m`: type, corr and payload (no reply reference). */
pc_msg_t *pc__msg_clone(const pc_msg_t *m);

/* Installs a cache for the calling thread (a worker at start). */
void pc__msg_cache_attach(pc__msg_cache_t *cache);
/* Returns the calling thread's cache to the depot and detaches it. */
void pc__msg_cache_detach(void);
/* Frees the magazines the shared depot holds beyond `keep` per size class:
 * 0 when the last runtime is gone; a few when the process goes idle, since
 * a burst can leave it holding megabytes of free messages. */
void pc__msg_depot_trim(uint32_t keep);

/* Magazines per class the depot keeps through an idle trim. */
#define PC__MSG_DEPOT_IDLE_KEEP 4u
/* Full magazines the depot holds for size class `cls`. */
uint32_t pc__msg_depot_mags(unsigned cls);

#endif
