/*
 * Steering boundaries. Skipping and injecting are separate steps on
 * purpose: the skipped calls' results must be in the transcript before the
 * user message, or the next request would carry calls without results.
 */
#include "steering.h"

int pc_steer_at(pc_tool_mode_t mode, pc_steer_drain_t drain, pc_steer_boundary_t at, size_t index,
		size_t n_calls, size_t pending, pc_steer_decision_t *out)
{
	if (!out)
		return PC_EINVAL;
	*out = (pc_steer_decision_t){.skip_from = n_calls};
	size_t inject = drain == PC_STEER_DRAIN_ALL ? pending : (pending ? 1 : 0);
	switch (at) {
	case PC_STEER_AT_CALL_START:
		if (mode != PC_TOOLS_SEQUENTIAL || index >= n_calls)
			return PC_EINVAL;
		/* The calls before `index` ran; this one and the rest never start. */
		if (pending)
			out->skip_from = index;
		return 0;
	case PC_STEER_AT_BATCH_LAUNCH:
		if (mode != PC_TOOLS_PARALLEL)
			return PC_EINVAL;
		/* One atomic checkpoint: all of the batch or none of it. */
		if (pending)
			out->skip_from = 0;
		return 0;
	case PC_STEER_AT_TOOLS_DONE:
		out->inject = inject;
		return 0;
	case PC_STEER_AT_TURN_END:
		out->inject = inject;
		out->continue_loop = inject > 0;
		return 0;
	default:
		return PC_EINVAL;
	}
}
