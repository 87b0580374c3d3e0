/*
 * A run's tool-loop history box (§4.2): the loop detectors' history, made
 * from the configuration when a run starts and shared, counted, with its
 * attempts.
 */
#include <stdlib.h>

#include "../agent_internal.h"

pc__loop_box_t *pc__loop_box_new(const pc_config_t *cfg)
{
	const pc_loop_detection_config_t *l = &cfg->agent.loop_detection;
	if (!l->enabled)
		return NULL;
	pc_loop_config_t lc;
	pc_loop_config_default(&lc);
	lc.enabled = true;
	lc.history_size = l->history_size;
	lc.warning_threshold = l->warning_threshold;
	lc.critical_threshold = l->critical_threshold;
	lc.global_threshold = l->global_threshold;
	lc.generic_repeat = l->generic_repeat;
	lc.known_poll_no_progress = l->known_poll_no_progress;
	lc.ping_pong = l->ping_pong;
	pc_loop_config_normalize(&lc);
	pc__loop_box_t *b = calloc(1, sizeof(*b));
	if (!b || pc_loop_history_new(&lc, &b->h) != 0) {
		free(b);
		return NULL;
	}
	b->refs = 1;
	return b;
}

pc__loop_box_t *pc__loop_box_retain(pc__loop_box_t *b)
{
	if (b)
		__atomic_add_fetch(&b->refs, 1, __ATOMIC_RELAXED);
	return b;
}

void pc__loop_box_release(pc__loop_box_t *b)
{
	if (b && __atomic_sub_fetch(&b->refs, 1, __ATOMIC_ACQ_REL) == 0) {
		pc_loop_history_free(b->h);
		free(b);
	}
}
