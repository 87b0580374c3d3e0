/*
 * The post-compaction loop guard (spec §1.16, OpenClaw issue #77474): after
 * an auto-compaction the run watches the next few tool outcomes; if the same
 * tool is called with the same arguments and gets the same result as many
 * times as the window is long, compaction did not break the loop, and the
 * run is aborted instead of burning more paid calls.
 *
 * Tools are compared by (name, hash of arguments, hash of result); the
 * caller computes the two hashes (any stable 64-bit hash of the canonical
 * JSON). Pure: no I/O, no globals. Any thread.
 */
#ifndef PINCER_AGENTS_RUN_LOOP_GUARD_H
#define PINCER_AGENTS_RUN_LOOP_GUARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* DEFAULT_WINDOW_SIZE (§1.16). */
#define PC_LOOP_GUARD_DEFAULT_WINDOW 3u
/* Larger configured windows are clamped to this (the spec has no upper
 * bound; a window this long would never trip in practice anyway). */
#define PC_LOOP_GUARD_MAX_WINDOW 64u

/* Windows up to this long keep their history inside the guard. */
#define PC_LOOP_GUARD_SMALL 8u

typedef struct pc_loop_guard_entry {
	uint64_t tool_hash;
	uint64_t args_hash;
	uint64_t result_hash;
} pc_loop_guard_entry_t;

typedef struct pc_loop_guard {
	bool enabled;       /* tools.loopDetection.enabled != false */
	uint32_t window;    /* postCompactionGuard.windowSize */
	uint32_t remaining; /* observations left while armed; 0 = not armed */
	uint32_t count;     /* entries in the history */
	/* The history: `small` for windows up to PC_LOOP_GUARD_SMALL (the
	 * default is 3), else `large`, from the heap once armed
	 * (pc_loop_guard_fini frees it): every run carries a guard, few arm it. */
	pc_loop_guard_entry_t *large;
	pc_loop_guard_entry_t small[PC_LOOP_GUARD_SMALL];
} pc_loop_guard_t;

/* The result of one observation. */
typedef struct pc_loop_guard_verdict {
	bool abort;       /* compaction_loop_persisted: abort the run, no retry */
	uint32_t repeats; /* identical observations in the window, this one included */
	uint32_t window;
} pc_loop_guard_verdict_t;

/* Initialises a disarmed guard. `window` 0 means the default; larger than
 * PC_LOOP_GUARD_MAX_WINDOW is clamped. NULL is ignored. */
void pc_loop_guard_init(pc_loop_guard_t *g, bool enabled, uint32_t window);

/* Frees a long window's history; init may follow. NULL is ignored. */
void pc_loop_guard_fini(pc_loop_guard_t *g);

/* armPostCompaction: the next `window` observations are watched; history
 * from an earlier arming is forgotten. Called after a timeout compaction,
 * an overflow compaction, and a compaction-continuation retry. A window
 * longer than PC_LOOP_GUARD_SMALL whose history cannot be allocated leaves
 * the guard unarmed. */
void pc_loop_guard_arm(pc_loop_guard_t *g);

/* True while observations are still being watched. */
bool pc_loop_guard_armed(const pc_loop_guard_t *g);

/*
 * Feeds one live tool outcome (presentation-only outcomes are not fed).
 * Disabled or not armed: *out says no abort and nothing changes. Otherwise
 * one watched slot is used up, and *out->abort is set when this exact
 * (tool, args, result) now occurs `window` times.
 * PC_EINVAL for NULL g, tool or out.
 */
int pc_loop_guard_observe(pc_loop_guard_t *g, const char *tool, uint64_t args_hash,
			  uint64_t result_hash, pc_loop_guard_verdict_t *out);

/*
 * The user-visible message for an abort verdict ("CRITICAL: tool T repeated
 * N times ..."), written NUL-terminated into buf. PC_EINVAL for NULL
 * arguments, a zero `cap` or a verdict that is not an abort; PC_ELIMIT when
 * the message was truncated to fit.
 */
int pc_loop_guard_message(const pc_loop_guard_verdict_t *v, const char *tool, char *buf,
			  size_t cap);

#ifdef __cplusplus
}
#endif
#endif
