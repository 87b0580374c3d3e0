/*
 * A model call's lifecycle table (model_call_lifecycle.h).
 */
#include "model_call_lifecycle.h"

#define N PC_MC_LC_COUNT
#define BIT(s) (1u << (s))
#define ABORT BIT(PC_MC_LC_ABORTING)

static const char *const names[N] = {
	[PC_MC_LC_PENDING] = "pending",       [PC_MC_LC_REQUESTING] = "requesting",
	[PC_MC_LC_STREAMING] = "streaming",   [PC_MC_LC_ERROR_BODY] = "error_body",
	[PC_MC_LC_ABORTING] = "aborting",     [PC_MC_LC_DONE] = "done",
	[PC_MC_LC_FAILED] = "failed",         [PC_MC_LC_ABORTED] = "aborted",
};

/* next[from]: the states `from` may go to. */
static const unsigned next[N] = {
	[PC_MC_LC_PENDING] = BIT(PC_MC_LC_REQUESTING) | BIT(PC_MC_LC_FAILED) | ABORT,
	/* a transport error ends a call before any head */
	[PC_MC_LC_REQUESTING] = BIT(PC_MC_LC_STREAMING) | BIT(PC_MC_LC_ERROR_BODY) | BIT(PC_MC_LC_FAILED) | ABORT,
	[PC_MC_LC_STREAMING] = BIT(PC_MC_LC_DONE) | BIT(PC_MC_LC_FAILED) | ABORT,
	[PC_MC_LC_ERROR_BODY] = BIT(PC_MC_LC_FAILED) | ABORT,
	[PC_MC_LC_ABORTING] = BIT(PC_MC_LC_ABORTED),
};

const char *pc_mc_lc_name(pc_mc_lc_t s)
{
	return (unsigned)s < N ? names[s] : "unknown";
}

bool pc_mc_lc_legal(pc_mc_lc_t from, pc_mc_lc_t to)
{
	return (unsigned)from < N && (unsigned)to < N && (next[from] & BIT(to));
}
