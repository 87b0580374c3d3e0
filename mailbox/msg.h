/*
 * Messages: one allocation holding an intrusive header and the payload.
 *
 * Ownership: pc_msg_new hands the caller a message it owns. Sending it
 * (pc_send, pc_ask, pc_reply, a timer) passes ownership to the runtime; the
 * runtime frees it after the receiving handler returns. A handler must not
 * keep a pointer to a delivered message past its return: copy what it needs.
 * A message that was never sent is freed with pc_msg_free.
 *
 * Threads: every function here may be called from any thread. Allocation on
 * a worker thread is served from that worker's free lists (no lock, no
 * atomic); other threads use malloc.
 */
#ifndef PINCER_MAILBOX_MSG_H
#define PINCER_MAILBOX_MSG_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct pc_actor;

/* The header. Applications read `type`, `corr` and `reply_to`; the runtime
 * owns the rest. Message types at or above PC_MSG_TYPE_SYSTEM are reserved
 * for the runtime. */
typedef struct pc_msg {
	struct pc_msg *next;       /* mailbox link (runtime) */
	uint32_t type;             /* application tag */
	uint32_t size;             /* payload bytes */
	struct pc_actor *reply_to; /* set by pc_ask: where pc_reply sends */
	uint64_t corr;             /* correlation id of an ask and its reply */
	uint16_t flags;            /* runtime */
	uint16_t size_class;       /* runtime */
	uint32_t reserved;         /* runtime */
} pc_msg_t;

#define PC_MSG_TYPE_SYSTEM 0xFFFF0000u

/* Largest payload served from the per-worker free lists; larger payloads
 * come straight from malloc. */
#define PC_MSG_SMALL_PAYLOAD (256 - sizeof(pc_msg_t))
#define PC_MSG_MAX_PAYLOAD ((size_t)UINT32_MAX)

/* A new message with `payload_size` bytes of uninitialised payload, or NULL
 * when memory is exhausted or the size exceeds PC_MSG_MAX_PAYLOAD. The caller
 * owns it. */
pc_msg_t *pc_msg_new(uint32_t type, size_t payload_size);

/* Frees a message the caller owns (one that was never sent). NULL is a no-op. */
void pc_msg_free(pc_msg_t *msg);

/* The payload, 8-byte aligned, valid while the message is owned. */
static inline void *pc_msg_data(pc_msg_t *msg) { return (void *)(msg + 1); }
static inline const void *pc_msg_cdata(const pc_msg_t *msg) { return (const void *)(msg + 1); }

#ifdef __cplusplus
}
#endif
#endif
