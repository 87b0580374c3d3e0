/*
 * A tool call's lifecycle table (tool_call_lifecycle.h).
 */
#include "tool_call_lifecycle.h"

#define N PC_TC_LC_COUNT
#define BIT(s) (1u << (s))

static const char *const names[N] = {
	[PC_TC_LC_WAITING] = "waiting", [PC_TC_LC_GATE] = "gate",       [PC_TC_LC_RUNNING] = "running",
	[PC_TC_LC_PERSIST] = "persist", [PC_TC_LC_DONE] = "done",       [PC_TC_LC_REFUSED] = "refused",
	[PC_TC_LC_SKIPPED] = "skipped", [PC_TC_LC_ABORTED] = "aborted",
};

/* next[from]: the states `from` may go to. */
static const unsigned next[N] = {
	[PC_TC_LC_WAITING] = BIT(PC_TC_LC_GATE) | BIT(PC_TC_LC_RUNNING) | BIT(PC_TC_LC_REFUSED) | BIT(PC_TC_LC_SKIPPED) |
			     BIT(PC_TC_LC_ABORTED),
	[PC_TC_LC_GATE] = BIT(PC_TC_LC_RUNNING) | BIT(PC_TC_LC_REFUSED) | BIT(PC_TC_LC_ABORTED),
	[PC_TC_LC_RUNNING] = BIT(PC_TC_LC_PERSIST) | BIT(PC_TC_LC_DONE) | BIT(PC_TC_LC_REFUSED),
	[PC_TC_LC_PERSIST] = BIT(PC_TC_LC_DONE),
};

const char *pc_tc_lc_name(pc_tc_lc_t s)
{
	return (unsigned)s < N ? names[s] : "unknown";
}

bool pc_tc_lc_legal(pc_tc_lc_t from, pc_tc_lc_t to)
{
	return (unsigned)from < N && (unsigned)to < N && (next[from] & BIT(to));
}
