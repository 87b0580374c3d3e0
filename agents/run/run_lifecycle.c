/*
 * The run's lifecycle table and projections (run_lifecycle.h).
 */
#include "run_lifecycle.h"

#define N PC_RUN_LC_COUNT
#define BIT(s) (1u << (s))
/* stopped without finishing: every state before the end may go here */
#define STOPPED BIT(PC_RUN_LC_ERROR)

static const char *const names[N] = {
	[PC_RUN_LC_QUEUED] = "queued",         [PC_RUN_LC_IDLE] = "idle",
	[PC_RUN_LC_RESOLVING] = "resolving",   [PC_RUN_LC_ATTEMPT] = "attempt",
	[PC_RUN_LC_DELAY] = "delay",           [PC_RUN_LC_COMPACTING] = "compacting",
	[PC_RUN_LC_TRUNCATING] = "truncating", [PC_RUN_LC_SENDING] = "sending",
	[PC_RUN_LC_ENDING] = "ending",         [PC_RUN_LC_OK] = "ok",
	[PC_RUN_LC_ERROR] = "error",           [PC_RUN_LC_ABORTED] = "aborted",
	[PC_RUN_LC_TIMEOUT] = "timeout",
};

/* next[from]: the states `from` may go to. */
static const unsigned next[N] = {
	[PC_RUN_LC_QUEUED] = BIT(PC_RUN_LC_IDLE) | STOPPED,
	[PC_RUN_LC_IDLE] = BIT(PC_RUN_LC_RESOLVING) | BIT(PC_RUN_LC_ATTEMPT) | BIT(PC_RUN_LC_DELAY) |
			   BIT(PC_RUN_LC_COMPACTING) | BIT(PC_RUN_LC_TRUNCATING) | BIT(PC_RUN_LC_SENDING) |
			   BIT(PC_RUN_LC_ENDING) | STOPPED,
	/* an abort ends a run that waits for a hook chain or sleeps */
	[PC_RUN_LC_RESOLVING] = BIT(PC_RUN_LC_IDLE) | BIT(PC_RUN_LC_ENDING) | STOPPED,
	[PC_RUN_LC_DELAY] = BIT(PC_RUN_LC_IDLE) | BIT(PC_RUN_LC_ENDING) | STOPPED,
	[PC_RUN_LC_SENDING] = BIT(PC_RUN_LC_IDLE) | BIT(PC_RUN_LC_ENDING) | STOPPED,
	/* work in flight: its answer comes back first, even after an abort */
	[PC_RUN_LC_ATTEMPT] = BIT(PC_RUN_LC_IDLE) | STOPPED,
	[PC_RUN_LC_COMPACTING] = BIT(PC_RUN_LC_IDLE) | STOPPED,
	[PC_RUN_LC_TRUNCATING] = BIT(PC_RUN_LC_IDLE) | STOPPED,
	[PC_RUN_LC_ENDING] = BIT(PC_RUN_LC_OK) | BIT(PC_RUN_LC_ERROR) | BIT(PC_RUN_LC_ABORTED) |
			     BIT(PC_RUN_LC_TIMEOUT),
};

const char *pc_run_lc_name(pc_run_lc_t s)
{
	return (unsigned)s < N ? names[s] : "unknown";
}

bool pc_run_lc_legal(pc_run_lc_t from, pc_run_lc_t to)
{
	return (unsigned)from < N && (unsigned)to < N && (next[from] & BIT(to));
}

pc_run_lc_t pc_run_lc_done(pc_run_status_t status)
{
	switch (status) {
	case PC_RUN_STATUS_OK: return PC_RUN_LC_OK;
	case PC_RUN_STATUS_ABORTED: return PC_RUN_LC_ABORTED;
	case PC_RUN_STATUS_TIMEOUT: return PC_RUN_LC_TIMEOUT;
	default: return PC_RUN_LC_ERROR;
	}
}

pc_run_status_t pc_run_lc_registry_status(pc_run_lc_t s)
{
	switch (s) {
	case PC_RUN_LC_QUEUED: return PC_RUN_STATUS_QUEUED;
	case PC_RUN_LC_OK: return PC_RUN_STATUS_OK;
	case PC_RUN_LC_ERROR: return PC_RUN_STATUS_ERROR;
	case PC_RUN_LC_ABORTED: return PC_RUN_STATUS_ABORTED;
	case PC_RUN_LC_TIMEOUT: return PC_RUN_STATUS_TIMEOUT;
	default: return PC_RUN_STATUS_RUNNING;
	}
}

pc_store_run_status_t pc_run_lc_store_status(pc_run_lc_t s)
{
	switch (s) {
	case PC_RUN_LC_OK: return PC_STORE_RUN_OK;
	case PC_RUN_LC_ERROR: return PC_STORE_RUN_ERROR;
	case PC_RUN_LC_ABORTED: return PC_STORE_RUN_ABORTED;
	case PC_RUN_LC_TIMEOUT: return PC_STORE_RUN_TIMEOUT;
	default: return PC_STORE_RUN_ACCEPTED;
	}
}

pc_run_phase_t pc_run_lc_session_phase(pc_run_lc_t s, pc_run_phase_t activity)
{
	switch (s) {
	case PC_RUN_LC_QUEUED:
	case PC_RUN_LC_RESOLVING: return PC_RUN_STARTING;
	case PC_RUN_LC_COMPACTING: return PC_RUN_COMPACTING;
	default: return activity;
	}
}
