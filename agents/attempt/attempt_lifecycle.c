/*
 * The attempt's lifecycle table (attempt_lifecycle.h).
 */
#include "attempt_lifecycle.h"

#define N PC_ATT_LC_COUNT
#define BIT(s) (1u << (s))
/* stopped without finishing (shutdown, a failed handler): the run still
 * gets its one report, from any state before it */
#define STOPPED BIT(PC_ATT_LC_DONE)

static const char *const names[N] = {
	[PC_ATT_LC_LOADING] = "loading",       [PC_ATT_LC_MODEL] = "model",
	[PC_ATT_LC_TOOLS] = "tools",           [PC_ATT_LC_COMPACTING] = "compacting",
	[PC_ATT_LC_FINISHING] = "finishing",   [PC_ATT_LC_DONE] = "done",
};

/* next[from]: the states `from` may go to. */
static const unsigned next[N] = {
	[PC_ATT_LC_LOADING] = BIT(PC_ATT_LC_MODEL) | BIT(PC_ATT_LC_FINISHING) | STOPPED,
	[PC_ATT_LC_MODEL] = BIT(PC_ATT_LC_MODEL) | BIT(PC_ATT_LC_TOOLS) | BIT(PC_ATT_LC_FINISHING) | STOPPED,
	[PC_ATT_LC_TOOLS] = BIT(PC_ATT_LC_MODEL) | BIT(PC_ATT_LC_COMPACTING) | BIT(PC_ATT_LC_FINISHING) | STOPPED,
	[PC_ATT_LC_COMPACTING] = BIT(PC_ATT_LC_MODEL) | BIT(PC_ATT_LC_FINISHING) | STOPPED,
	[PC_ATT_LC_FINISHING] = BIT(PC_ATT_LC_DONE),
};

const char *pc_att_lc_name(pc_att_lc_t s)
{
	return (unsigned)s < N ? names[s] : "unknown";
}

bool pc_att_lc_legal(pc_att_lc_t from, pc_att_lc_t to)
{
	return (unsigned)from < N && (unsigned)to < N && (next[from] & BIT(to));
}
