/*
 * The attempt's lifecycle: one enum of its states and the transitions
 * allowed between them (docs/architecture.md, "one state machine per
 * lifecycle").
 *
 *   loading -> model | finishing           the first call, or an end before it
 *   model -> model                         the next call (steering at the turn's end)
 *   model -> tools | finishing             the answer's tool calls, or the end
 *   tools -> model | compacting | finishing
 *   compacting -> model | finishing        compacted (or not), the context goes on
 *   finishing -> done                      nothing in flight, every write answered
 *   any state before done -> done          stopped without finishing
 *
 * Only the attempt actor changes an attempt's state, through its
 * pc__att_set (attempt_actor.c: checks pc_att_lc_legal, counts and refuses
 * what is not, traces); scripts/check-lifecycles fails the build's tests
 * when anything else assigns it.
 *
 * Pure functions, callable from any thread.
 */
#ifndef PINCER_AGENTS_ATTEMPT_ATTEMPT_LIFECYCLE_H
#define PINCER_AGENTS_ATTEMPT_ATTEMPT_LIFECYCLE_H

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum pc_att_lc {
	PC_ATT_LC_LOADING = 0, /* history, context files, the hooks before the first call */
	PC_ATT_LC_MODEL,       /* a model call in flight, or the hooks after its answer */
	PC_ATT_LC_TOOLS,       /* the answer's tool calls */
	PC_ATT_LC_COMPACTING,  /* threshold compaction between two model calls (§7.1 item 1) */
	PC_ATT_LC_FINISHING,   /* the end decided: waiting for what is in flight */
	PC_ATT_LC_DONE,        /* reported to the run (terminal) */
	PC_ATT_LC_COUNT,
} pc_att_lc_t;

/* "loading", "model", ..., "done"; "unknown" out of range. Static. */
const char *pc_att_lc_name(pc_att_lc_t s);

/* Whether the table allows `from` -> `to`. */
bool pc_att_lc_legal(pc_att_lc_t from, pc_att_lc_t to);

#ifdef __cplusplus
}
#endif
#endif
