/*
 * A model call's lifecycle (model_call.h): one enum of its states and the
 * transitions allowed between them (docs/architecture.md, "one state
 * machine per lifecycle").
 *
 *   pending -> requesting                  the request is on its way
 *   requesting -> streaming | error_body   the response head: 2xx or not
 *   pending | requesting | streaming | error_body -> aborting
 *                                          pc_model_call_abort; the
 *                                          transfer's end follows
 *   streaming -> done | failed             the answer, or what cut it short
 *   pending | requesting | error_body -> failed
 *                                          not started; a transport error
 *                                          before any head; an error status
 *   aborting -> aborted
 *
 * done, failed and aborted are the outcome PC_MSG_MODEL_DONE carries,
 * reached once, when it is sent. Only the call's actor changes the state,
 * through its mc_set (model_call.c: checks pc_mc_lc_legal, counts and
 * refuses what is not, traces); scripts/check-lifecycles fails the build's
 * tests when anything else assigns it.
 *
 * Pure functions, callable from any thread.
 */
#ifndef PINCER_AGENTS_PROVIDERS_MODEL_CALL_LIFECYCLE_H
#define PINCER_AGENTS_PROVIDERS_MODEL_CALL_LIFECYCLE_H

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum pc_mc_lc {
	PC_MC_LC_PENDING = 0, /* spawned; the request not sent */
	PC_MC_LC_REQUESTING,  /* sent; no response head yet */
	PC_MC_LC_STREAMING,   /* a 2xx head: the body goes through the decoder */
	PC_MC_LC_ERROR_BODY,  /* an error status: its body is kept for the classifier */
	PC_MC_LC_ABORTING,    /* aborted: waiting for the cancelled transfer's end */
	/* terminal: what PC_MSG_MODEL_DONE said */
	PC_MC_LC_DONE,
	PC_MC_LC_FAILED,
	PC_MC_LC_ABORTED,
	PC_MC_LC_COUNT,
} pc_mc_lc_t;

/* "pending", "requesting", ..., "aborted"; "unknown" out of range. Static. */
const char *pc_mc_lc_name(pc_mc_lc_t s);

/* Whether the table allows `from` -> `to`. */
bool pc_mc_lc_legal(pc_mc_lc_t from, pc_mc_lc_t to);

static inline bool pc_mc_lc_terminal(pc_mc_lc_t s) { return s >= PC_MC_LC_DONE && s < PC_MC_LC_COUNT; }

#ifdef __cplusplus
}
#endif
#endif
