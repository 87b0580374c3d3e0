/*
 * The session's lifecycle table and projection (session_lifecycle.h).
 */
#include "session_lifecycle.h"

#define N PC_SESS_LC_COUNT
#define BIT(s) (1u << (s))
/* its stop handler runs whatever the session was doing */
#define STOPPED BIT(PC_SESS_LC_STOPPED)

static const char *const names[N] = {
	[PC_SESS_LC_NEW] = "new",         [PC_SESS_LC_IDLE] = "idle",
	[PC_SESS_LC_LANE] = "lane",       [PC_SESS_LC_LEASE] = "lease",
	[PC_SESS_LC_RUNNING] = "running", [PC_SESS_LC_RETIRING] = "retiring",
	[PC_SESS_LC_STOPPED] = "stopped",
};

/* next[from]: the states `from` may go to. */
static const unsigned next[N] = {
	[PC_SESS_LC_NEW] = BIT(PC_SESS_LC_IDLE) | STOPPED,
	[PC_SESS_LC_IDLE] = BIT(PC_SESS_LC_LANE) | BIT(PC_SESS_LC_RETIRING) | STOPPED,
	[PC_SESS_LC_LANE] = BIT(PC_SESS_LC_LEASE) | BIT(PC_SESS_LC_RUNNING) | BIT(PC_SESS_LC_IDLE) | STOPPED,
	[PC_SESS_LC_LEASE] = BIT(PC_SESS_LC_RUNNING) | BIT(PC_SESS_LC_LANE) | BIT(PC_SESS_LC_IDLE) | STOPPED,
	[PC_SESS_LC_RUNNING] = BIT(PC_SESS_LC_IDLE) | STOPPED,
	[PC_SESS_LC_RETIRING] = STOPPED,
};

const char *pc_sess_lc_name(pc_sess_lc_t s)
{
	return (unsigned)s < N ? names[s] : "unknown";
}

bool pc_sess_lc_legal(pc_sess_lc_t from, pc_sess_lc_t to)
{
	return (unsigned)from < N && (unsigned)to < N && (next[from] & BIT(to));
}

pc_run_phase_t pc_sess_lc_queue_phase(pc_sess_lc_t s, pc_run_phase_t run_view, bool interrupt)
{
	switch (s) {
	case PC_SESS_LC_LANE:
	case PC_SESS_LC_LEASE: return PC_RUN_STARTING;
	case PC_SESS_LC_RUNNING: return run_view;
	default: return interrupt ? PC_RUN_ENDING : PC_RUN_IDLE;
	}
}
