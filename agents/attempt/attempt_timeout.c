/*
 * The compaction-aware attempt timer as a step function. The one rule that
 * matters: the grace is spent once per attempt, so a second expiry during
 * a (possibly different) compaction aborts; a compaction cannot keep the
 * attempt alive forever.
 */
#include "attempt_timeout.h"

#include <stddef.h>

static uint64_t sat_add(uint64_t a, uint64_t b)
{
	return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* now + ms, clamped to int64. */
static int64_t at(int64_t now_ms, uint64_t ms)
{
	if (ms > (uint64_t)(INT64_MAX - (now_ms > 0 ? now_ms : 0)))
		return INT64_MAX;
	return now_ms + (int64_t)ms;
}

pc_attempt_timeout_verdict_t pc_attempt_timeout_verdict(bool compaction_pending, bool compaction_in_flight,
							  bool grace_used)
{
	if ((compaction_pending || compaction_in_flight) && !grace_used)
		return PC_ATTEMPT_TIMEOUT_EXTEND;
	return PC_ATTEMPT_TIMEOUT_ABORT;
}

bool pc_attempt_timeout_flags_compaction(bool is_timeout, bool compaction_pending, bool compaction_in_flight)
{
	return is_timeout && (compaction_pending || compaction_in_flight);
}

uint64_t pc_attempt_timeout_with_grace_ms(uint64_t run_timeout_ms, uint64_t compaction_timeout_ms)
{
	return sat_add(run_timeout_ms, compaction_timeout_ms);
}

uint64_t pc_attempt_lock_max_hold_ms(uint64_t run_timeout_ms, uint64_t compaction_timeout_ms)
{
	uint64_t hold = sat_add(pc_attempt_timeout_with_grace_ms(run_timeout_ms, compaction_timeout_ms),
				PC_ATTEMPT_LOCK_HOLD_SLACK_MS);
	if (hold < PC_ATTEMPT_LOCK_HOLD_MIN_MS)
		hold = PC_ATTEMPT_LOCK_HOLD_MIN_MS;
	return hold > PC_ATTEMPT_LOCK_HOLD_MAX_MS ? PC_ATTEMPT_LOCK_HOLD_MAX_MS : hold;
}

int pc_attempt_timeout_init(pc_attempt_timeout_t *t, uint64_t run_timeout_ms, uint64_t compaction_timeout_ms,
			    int64_t now_ms)
{
	if (!t)
		return PC_EINVAL;
	*t = (pc_attempt_timeout_t){
		.compaction_timeout_ms = compaction_timeout_ms ? compaction_timeout_ms
							       : PC_ATTEMPT_COMPACTION_TIMEOUT_MS,
		.unlimited = run_timeout_ms == 0 || run_timeout_ms >= PC_ATTEMPT_TIMER_MAX_MS,
	};
	if (!t->unlimited)
		t->deadline_ms = at(now_ms, run_timeout_ms);
	return 0;
}

bool pc_attempt_timeout_armed(const pc_attempt_timeout_t *t, int64_t *deadline_ms)
{
	if (!t || t->unlimited || t->paused || t->expired)
		return false;
	if (deadline_ms)
		*deadline_ms = t->deadline_ms;
	return true;
}

int pc_attempt_timeout_fire(pc_attempt_timeout_t *t, int64_t now_ms, bool compaction_pending,
			    bool compaction_in_flight, pc_attempt_timeout_step_t *out)
{
	if (!t || !out)
		return PC_EINVAL;
	*out = (pc_attempt_timeout_step_t){.action = PC_ATTEMPT_TIMER_IGNORE};
	if (!pc_attempt_timeout_armed(t, NULL) || now_ms < t->deadline_ms)
		return 0;
	if (pc_attempt_timeout_verdict(compaction_pending, compaction_in_flight, t->grace_used) ==
	    PC_ATTEMPT_TIMEOUT_EXTEND) {
		t->grace_used = true;
		t->deadline_ms = at(now_ms, t->compaction_timeout_ms);
		out->action = PC_ATTEMPT_TIMER_EXTEND;
		out->new_deadline_ms = t->deadline_ms;
		return 0;
	}
	t->expired = true;
	out->action = PC_ATTEMPT_TIMER_ABORT;
	out->streaming_warn_at_ms = at(now_ms, PC_ATTEMPT_ABORT_STREAMING_WARN_MS);
	out->timed_out_during_compaction =
		pc_attempt_timeout_flags_compaction(true, compaction_pending, compaction_in_flight);
	out->timed_out_by_run_budget = true;
	return 0;
}

void pc_attempt_timeout_pause(pc_attempt_timeout_t *t, int64_t now_ms)
{
	if (!pc_attempt_timeout_armed(t, NULL))
		return;
	t->paused_remaining_ms = t->deadline_ms > now_ms ? (uint64_t)(t->deadline_ms - now_ms) : 0;
	t->paused = true;
}

void pc_attempt_timeout_resume(pc_attempt_timeout_t *t, int64_t now_ms)
{
	if (!t || !t->paused || t->expired)
		return;
	t->paused = false;
	t->deadline_ms = at(now_ms, t->paused_remaining_ms);
}
