/*
 * The post-compaction loop guard: a short, bounded history of tool outcomes
 * that exists only while the guard is armed.
 */
#include "loop_guard.h"
#include "actors/hash.h"

#include <stdio.h>
#include <stdlib.h>

void pc_loop_guard_init(pc_loop_guard_t *g, bool enabled, uint32_t window)
{
	if (!g)
		return;
	g->enabled = enabled;
	if (window == 0)
		window = PC_LOOP_GUARD_DEFAULT_WINDOW;
	g->window = window > PC_LOOP_GUARD_MAX_WINDOW ? PC_LOOP_GUARD_MAX_WINDOW : window;
	g->remaining = 0;
	g->count = 0;
	g->large = NULL;
}

void pc_loop_guard_fini(pc_loop_guard_t *g)
{
	if (!g)
		return;
	free(g->large);
	g->large = NULL;
	g->remaining = 0;
}

void pc_loop_guard_arm(pc_loop_guard_t *g)
{
	if (!g || !g->enabled)
		return;
	g->count = 0;
	g->remaining = 0;
	if (g->window > PC_LOOP_GUARD_SMALL && !g->large &&
	    !(g->large = malloc(g->window * sizeof(*g->large))))
		return;
	g->remaining = g->window;
}

static pc_loop_guard_entry_t *history(pc_loop_guard_t *g)
{
	return g->window > PC_LOOP_GUARD_SMALL ? g->large : g->small;
}

bool pc_loop_guard_armed(const pc_loop_guard_t *g)
{
	return g && g->enabled && g->remaining > 0;
}

int pc_loop_guard_observe(pc_loop_guard_t *g, const char *tool, uint64_t args_hash,
			  uint64_t result_hash, pc_loop_guard_verdict_t *out)
{
	if (!g || !tool || !out)
		return PC_EINVAL;
	out->abort = false;
	out->repeats = 0;
	out->window = g->window;
	if (!pc_loop_guard_armed(g))
		return 0;
	pc_loop_guard_entry_t e = {pc__hash64_str(tool), args_hash, result_hash};
	g->remaining--;
	/* remaining starts at window and count grows with it, so this fits */
	pc_loop_guard_entry_t *hist = history(g);
	hist[g->count++] = e;
	uint32_t same = 0;
	for (uint32_t i = 0; i < g->count; i++) {
		const pc_loop_guard_entry_t *h = &hist[i];
		if (h->tool_hash == e.tool_hash && h->args_hash == e.args_hash &&
		    h->result_hash == e.result_hash)
			same++;
	}
	out->repeats = same;
	out->abort = same >= g->window;
	return 0;
}

int pc_loop_guard_message(const pc_loop_guard_verdict_t *v, const char *tool, char *buf,
			  size_t cap)
{
	if (!v || !tool || !buf || cap == 0 || !v->abort)
		return PC_EINVAL;
	int n = snprintf(buf, cap,
			 "CRITICAL: tool %s repeated %u times with identical arguments and "
			 "identical results within %u attempts after auto-compaction. The "
			 "compaction did not break the loop. Aborting to prevent runaway "
			 "resource use.",
			 tool, (unsigned)v->repeats, (unsigned)v->window);
	return (n < 0 || (size_t)n >= cap) ? PC_ELIMIT : 0;
}
