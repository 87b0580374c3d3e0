/*
 * Stalled-session classification. The split that matters: work an active
 * run owns gets until the abort threshold before it is called stalled (a
 * slow, non-streaming provider is not a hang), while leftovers nobody owns
 * are reported at the warn threshold, because nothing will ever clean them
 * up but recovery.
 */
#include "diagnostics.h"

#include <stddef.h>



const char *pc_diag_class_name(pc_diag_class_t c)
{
	switch (c) {
	case PC_DIAG_OK: return "ok";
	case PC_DIAG_LONG_RUNNING: return "session.long_running";
	case PC_DIAG_STALLED: return "session.stalled";
	case PC_DIAG_STUCK: return "session.stuck";
	default: return "unknown";
	}
}

static uint64_t since(int64_t now, int64_t then)
{
	/* Unsigned difference: no overflow for any pair of clocks. */
	return now > then ? (uint64_t)now - (uint64_t)then : 0;
}

static int result(pc_diag_result_t *out, pc_diag_class_t c, pc_diag_recovery_t r, const char *reason)
{
	out->cls = c;
	out->recovery = r;
	out->reason = reason;
	return 0;
}

int pc_diag_classify(const pc_diag_input_t *in, pc_diag_result_t *out)
{
	if (!in || !out)
		return PC_EINVAL;
	*out = (pc_diag_result_t){.keep_queued = true, .idle_if_generation = in->generation};
	out->run_ms = since(in->now_ms, in->started_ms);
	int64_t progress = in->last_progress_ms > in->started_ms ? in->last_progress_ms : in->started_ms;
	out->age_ms = since(in->now_ms, progress);
	if (!in->processing)
		return result(out, PC_DIAG_OK, PC_DIAG_RECOVER_NONE, "idle");
	if (out->age_ms < in->warn_ms) {
		if (in->has_run && out->run_ms >= in->warn_ms)
			return result(out, PC_DIAG_LONG_RUNNING, PC_DIAG_RECOVER_NONE, "active_run_progressing");
		return result(out, PC_DIAG_OK, PC_DIAG_RECOVER_NONE, "progressing");
	}
	bool past_abort = out->age_ms >= in->abort_ms;
	if (!in->has_run) {
		if (in->queued > 0)
			return result(out, PC_DIAG_STUCK, PC_DIAG_RECOVER_RELEASE_LANE,
				      "queued_work_without_active_run");
		if (in->activity == PC_DIAG_ACT_NONE)
			return result(out, PC_DIAG_STUCK, PC_DIAG_RECOVER_RELEASE_LANE,
				      "processing_without_active_run");
		return result(out, PC_DIAG_STALLED,
			      past_abort ? PC_DIAG_RECOVER_RELEASE_LANE : PC_DIAG_RECOVER_NONE,
			      in->activity == PC_DIAG_ACT_MODEL_CALL ? "ownerless_model_call"
								      : "ownerless_tool_call");
	}
	if (!past_abort)
		return result(out, PC_DIAG_LONG_RUNNING, PC_DIAG_RECOVER_NONE,
			      in->activity == PC_DIAG_ACT_MODEL_CALL  ? "silent_model_call"
			      : in->activity == PC_DIAG_ACT_TOOL_CALL ? "tool_call_without_progress"
								      : "run_without_progress");
	return result(out, PC_DIAG_STALLED, PC_DIAG_RECOVER_ABORT_RUN,
		      in->activity == PC_DIAG_ACT_MODEL_CALL  ? "stalled_model_call"
		      : in->activity == PC_DIAG_ACT_TOOL_CALL ? "blocked_tool_call"
							      : "stalled_agent_run");
}

bool pc_diag_should_warn(uint32_t repeats, int64_t last_warn_ms, int64_t now_ms, uint64_t warn_ms)
{
	uint32_t shift = repeats < PC_DIAG_BACKOFF_MAX_SHIFT ? repeats : PC_DIAG_BACKOFF_MAX_SHIFT;
	return since(now_ms, last_warn_ms) >= (warn_ms << shift);
}
