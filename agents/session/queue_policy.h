/*
 * Queue modes for messages that arrive while a session is busy (spec §6.3,
 * priorities from §1.1): what to do with an incoming message, and, when a
 * run ends, what runs next.
 *
 * The session actor owns the queue (its items, the pending overflow
 * summary, the debounce timer); these functions only read a view of it and
 * decide. Pure: no I/O, no clock (the caller passes now_ms), no globals.
 * Any thread.
 */
#ifndef PINCER_AGENTS_SESSION_QUEUE_POLICY_H
#define PINCER_AGENTS_SESSION_QUEUE_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/error.h"
#include "agents/config/config.h"

#ifdef __cplusplus
extern "C" {
#endif

/* §6.3 defaults. The debounce is the newest value (500 ms; April used 1000). */
/* One summary line per dropped message, whitespace-collapsed, elided to this. */
#define PC_QUEUE_SUMMARY_LINE_MAX ((size_t)160)
/* The recent message-id cache the session keeps for dedupe (TTL, size). */
#define PC_QUEUE_DEDUPE_TTL_MS ((uint64_t)300000)
#define PC_QUEUE_DEDUPE_MAX_KEYS ((size_t)10000)
/* Interrupt: how long to wait for the aborted run to end before refusing. */
#define PC_QUEUE_RUN_END_WAIT_MS ((uint64_t)15000)
#define PC_QUEUE_STILL_SHUTTING_DOWN_TEXT                                                          \
	"\u26a0\ufe0f Previous run is still shutting down. Please try again in a moment."
#define PC_QUEUE_COLLECT_TITLE "[Queued messages while agent was busy]"

/* §1.1 item 4: higher is dequeued first. */
typedef enum pc_queue_priority {
	PC_QUEUE_BACKGROUND = -1,
	PC_QUEUE_NORMAL = 0,
	PC_QUEUE_FOREGROUND = 1,
} pc_queue_priority_t;

/* user, manual → foreground; cron, heartbeat, memory, overflow →
 * background; anything else (and NULL) → normal. */
pc_queue_priority_t pc_queue_priority_for_trigger(const char *trigger);

/* One source of settings; unset fields are skipped. */
typedef struct pc_queue_layer {
	const char *mode;    /* NULL = unset; an unknown name is skipped too */
	int64_t debounce_ms; /* < 0 = unset */
	int64_t cap;         /* < 1 = unset ("cap < 1 ignored") */
	const char *drop;    /* NULL = unset */
} pc_queue_layer_t;

/* Resolves each field from the first layer that sets it, highest
 * precedence first (inline /queue or the session's stored override, then
 * per channel, plugin default, global config), falling back to the
 * defaults. PC_EINVAL for a NULL out, or NULL layers with n > 0. */
int pc_queue_settings_resolve(const pc_queue_layer_t *layers, size_t n, pc_queue_settings_t *out);

/* One queued message, borrowed from the session actor. */
typedef struct pc_queue_item {
	const char *message_id; /* may be NULL */
	const char *prompt;     /* required */
	const char *route;      /* channel/thread it came from; NULL = unknown */
	int priority;           /* pc_queue_priority_t */
	int64_t enqueued_ms;
} pc_queue_item_t;

/* The session's queue, oldest first. */
typedef struct pc_queue_view {
	const pc_queue_item_t *items;
	size_t n;
	uint32_t dropped;        /* summarised drops not yet reported */
	int64_t last_enqueue_ms; /* for the debounce quiet window */
	bool individual;         /* this drain went one-by-one after a cross-route batch */
} pc_queue_view_t;

/* The active run, as the session sees it. */
typedef enum pc_run_phase {
	PC_RUN_IDLE = 0,     /* no active run */
	PC_RUN_STARTING,     /* admitted, not streaming yet */
	PC_RUN_STREAMING,    /* in the model ⇄ tools loop: steering is accepted */
	PC_RUN_COMPACTING,   /* compaction in flight: steering is refused */
	PC_RUN_ENDING,       /* finalising */
} pc_run_phase_t;

typedef struct pc_queue_incoming {
	pc_queue_mode_t mode;  /* the resolved mode for this message */
	int priority;          /* pc_queue_priority_t */
	bool heartbeat;        /* a heartbeat turn */
	const char *message_id;
	bool seen_recently;    /* the dedupe cache already holds message_id */
} pc_queue_incoming_t;

typedef enum pc_queue_action {
	PC_QUEUE_RUN_NOW = 0, /* the session is free: start a run with it */
	PC_QUEUE_INJECT,      /* steer: hand it to the active run for its next boundary */
	PC_QUEUE_ENQUEUE,     /* queue it (after dropping drop_count victims) */
	PC_QUEUE_ABORT_THEN_RUN, /* abort the active run; when it has ended (at
				  * most PC_QUEUE_RUN_END_WAIT_MS), run it; still
				  * active → reply PC_QUEUE_STILL_SHUTTING_DOWN_TEXT */
	PC_QUEUE_DROP,        /* a heartbeat while busy, or a duplicate */
	PC_QUEUE_REFUSE,      /* the queue is full and the policy is "new" */
} pc_queue_action_t;

typedef struct pc_queue_decision {
	pc_queue_action_t action;
	bool also_enqueue;   /* INJECT of steer-backlog: also queue a followup (after
			      * dropping drop_count victims, as for ENQUEUE) */
	size_t drop_count;   /* ENQUEUE: victims to drop first (pc_queue_victims) */
	bool summarize;      /* ... and keep a summary line for each */
	int64_t drain_at_ms; /* ENQUEUE: the end of the debounce window */
	const char *detail;  /* static: the rule that decided, for logs */
} pc_queue_decision_t;

/* A message arrives. PC_EINVAL for NULL arguments or a mode out of range. */
int pc_queue_on_message(const pc_queue_settings_t *s, const pc_queue_view_t *q, pc_run_phase_t phase,
			const pc_queue_incoming_t *msg, int64_t now_ms, pc_queue_decision_t *out);

/* The `count` victims to drop, written to idx[0..count) in queue order:
 * the oldest of the lowest priority first, so a background turn never
 * pushes out a user's message. Returns how many were written
 * (min(count, q->n)). */
size_t pc_queue_victims(const pc_queue_view_t *q, size_t count, size_t *idx);

/* The next item to run on its own: highest priority, oldest first.
 * PC_ENOTFOUND when the queue is empty. */
int pc_queue_pick(const pc_queue_view_t *q, size_t *idx);

typedef enum pc_queue_next_kind {
	PC_QUEUE_NEXT_IDLE = 0,   /* nothing queued: the lane is free */
	PC_QUEUE_NEXT_WAIT,       /* debounce: ask again at wait_until_ms */
	PC_QUEUE_NEXT_RUN_ITEM,   /* run items[index] as its own turn, remove it */
	PC_QUEUE_NEXT_RUN_BATCH,  /* collect: run every item as one prompt
				   * (pc_queue_collect_prompt), with the overflow
				   * summary when dropped > 0; remove them all */
	PC_QUEUE_NEXT_RUN_OVERFLOW, /* run the overflow summary (pc_queue_overflow_prompt),
				     * then clear it */
} pc_queue_next_kind_t;

typedef struct pc_queue_next {
	pc_queue_next_kind_t kind;
	int64_t wait_until_ms;
	size_t index;
	bool individual; /* the drain must stay one-by-one from now on */
} pc_queue_next_t;

/* The active run ended (or the debounce timer fired): what now. A batch
 * spanning several routes is drained one by one, and the rest of that
 * drain stays one by one (ordering across channels). PC_EINVAL. */
int pc_queue_next(const pc_queue_settings_t *s, const pc_queue_view_t *q, int64_t now_ms, pc_queue_next_t *out);

/* A summary line for a dropped prompt: whitespace runs collapsed, trimmed,
 * cut to PC_QUEUE_SUMMARY_LINE_MAX characters with "…" (UTF-8 safe).
 * malloc'd. PC_EINVAL, PC_ENOMEM. */
int pc_queue_summary_line(const char *prompt, char **out);

/* "[Queue overflow] Dropped N message(s) due to cap." then "Summary:" and
 * "- <line>" for the last `cap` lines (cap 0 = all). *out NULL when
 * dropped is 0. PC_EINVAL, PC_ENOMEM. */
int pc_queue_overflow_prompt(uint32_t dropped, const char *const *lines, size_t n_lines, uint32_t cap,
			     char **out);

/* The collect prompt: PC_QUEUE_COLLECT_TITLE, the overflow summary when
 * given, then "---\nQueued #<i>\n<prompt>" for each item (i from 1),
 * blocks joined by blank lines. PC_EINVAL, PC_ENOMEM. */
int pc_queue_collect_prompt(const pc_queue_item_t *items, size_t n, const char *overflow_summary, char **out);

#ifdef __cplusplus
}
#endif
#endif
