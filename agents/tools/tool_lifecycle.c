/*
 * A tool invocation's lifecycle table (tool_lifecycle.h).
 */
#include "tool_lifecycle.h"

#define N PC_TOOL_LC_COUNT
#define BIT(s) (1u << (s))
/* whatever runs, the invocation can end (or fail to say so) */
#define END (BIT(PC_TOOL_LC_DONE) | BIT(PC_TOOL_LC_LOST))

static const char *const names[N] = {
	[PC_TOOL_LC_STARTING] = "starting", [PC_TOOL_LC_CALLING] = "calling", [PC_TOOL_LC_JOB] = "job",
	[PC_TOOL_LC_TASK] = "task",         [PC_TOOL_LC_LOST] = "lost",       [PC_TOOL_LC_DONE] = "done",
};

/* next[from]: the states `from` may go to. */
static const unsigned next[N] = {
	[PC_TOOL_LC_STARTING] = BIT(PC_TOOL_LC_CALLING) | BIT(PC_TOOL_LC_JOB) | BIT(PC_TOOL_LC_TASK) | END,
	[PC_TOOL_LC_CALLING] = END,
	[PC_TOOL_LC_JOB] = END,
	[PC_TOOL_LC_TASK] = END,
	[PC_TOOL_LC_LOST] = BIT(PC_TOOL_LC_DONE),
};

const char *pc_tool_lc_name(pc_tool_lc_t s)
{
	return (unsigned)s < N ? names[s] : "unknown";
}

bool pc_tool_lc_legal(pc_tool_lc_t from, pc_tool_lc_t to)
{
	return (unsigned)from < N && (unsigned)to < N && (next[from] & BIT(to));
}
