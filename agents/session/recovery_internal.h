/*
 * What a run row keeps so that an accepted message survives a crash
 * (docs/agent-loop.md, "Persistence"), and the recovery that uses it.
 *
 * A message is acknowledged once its run row is durable; the row carries
 * the message and its options (the "prompt" JSON) until the run ends, and
 * the process that accepted it (its owner). When an agent starts it looks
 * for runs left accepted by processes that are gone: a run that never
 * began runs again, in its session's order, under its own run id; a run
 * that began (the transcript holds its user turn) ends with the error
 * code run_interrupted, since running it again could repeat what its tools
 * did, and is replay-invalid when the transcript holds a call of a
 * mutating tool of it. A run whose owner lives (another process on this
 * state directory) is that process's.
 */
#ifndef PINCER_AGENTS_SESSION_RECOVERY_INTERNAL_H
#define PINCER_AGENTS_SESSION_RECOVERY_INTERNAL_H

#include "../agent_internal.h"

/* The prompt JSON of a submit (cJSON_free), or NULL without memory. */
char *pc__submit_prompt_json(const pc__submit_t *p);

/* What a request asked, as 16 hex digits (and a NUL), for comparing a
 * repeated idempotency key with its first use. */
void pc__submit_fingerprint(const char *prompt_json, char out[17]);

/* Adopts and runs or ends the runs gone processes left accepted (above).
 * From a plain thread, with the agent's runtime running. Counts in *out
 * (may be NULL). A store that cannot be read returns its code; nothing is
 * half done per run: each is adopted before it is run or ended. */
int pc__agent_recover(pc_agent_t *a, pc_agent_recovery_t *out);

#endif
