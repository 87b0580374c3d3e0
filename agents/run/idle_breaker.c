/*
 * The idle-timeout breaker: a saturating counter with a reset on progress.
 */
#include "idle_breaker.h"

void pc_idle_breaker_init(pc_idle_breaker_t *b, uint32_t cap)
{
	if (!b)
		return;
	b->consecutive = 0;
	b->cap = cap;
}

bool pc_idle_breaker_tripped(const pc_idle_breaker_t *b)
{
	return b && b->cap > 0 && b->consecutive >= b->cap;
}

bool pc_idle_breaker_step(pc_idle_breaker_t *b, const pc_idle_breaker_input_t *in)
{
	if (!b || !in)
		return false;
	if (in->completed_progress)
		b->consecutive = 0; /* progress heals, with or without a timeout */
	else if (in->idle_timed_out && b->consecutive < UINT32_MAX)
		b->consecutive++;
	return pc_idle_breaker_tripped(b);
}
