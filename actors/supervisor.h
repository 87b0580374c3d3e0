/*
 * Supervisors: an actor that starts children, watches them, and restarts
 * them by policy, giving up when they fail too often.
 */
#ifndef PINCER_ACTORS_SUPERVISOR_H
#define PINCER_ACTORS_SUPERVISOR_H

#include "actor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum pc_sup_strategy {
	PC_SUP_ONE_FOR_ONE, /* restart only the child that stopped */
	PC_SUP_ONE_FOR_ALL, /* stop all children and start them all again */
} pc_sup_strategy_t;

typedef enum pc_child_restart {
	PC_CHILD_PERMANENT, /* always restarted */
	PC_CHILD_TRANSIENT, /* restarted unless it stopped normally or was shut down */
	PC_CHILD_TEMPORARY, /* never restarted */
} pc_child_restart_t;

typedef struct pc_child_spec {
	/* Registered under this name (if not NULL), so that others reach the
	 * current incarnation with pc_whereis. Copied. */
	const char *name;
	/* Spawns the child on `rt`; returns 0 and a reference in *out (the
	 * supervisor takes it), or a negative code. Runs on the supervisor. */
	int (*start)(pc_runtime_t *rt, void *arg, pc_actor_t **out);
	void *arg; /* borrowed: must outlive the supervisor */
	pc_child_restart_t restart;
} pc_child_spec_t;

typedef struct pc_supervisor_spec {
	pc_sup_strategy_t strategy;
	/* Restart intensity: more than max_restarts restarts within period_ms
	 * and the supervisor stops its children and itself stops with
	 * PC_EXIT_ERROR, code PC_ELIMIT (so its own supervisor sees a failure). */
	uint32_t max_restarts;
	uint32_t period_ms;
	const pc_child_spec_t *children; /* copied */
	uint32_t nchildren;
} pc_supervisor_spec_t;

/* Spawns a supervisor, which then starts the children in order. If a
 * child fails to start, the supervisor stops the ones it started and stops
 * with PC_EXIT_ERROR and that child's code. *out gets a reference owned by
 * the caller. When the supervisor stops, it stops its children
 * (PC_EXIT_SHUTDOWN). Any thread. */
int pc_supervisor_start(pc_runtime_t *rt, const pc_supervisor_spec_t *spec, pc_actor_t **out);

#ifdef __cplusplus
}
#endif
#endif
