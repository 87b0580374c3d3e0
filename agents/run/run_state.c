/*
 * Run-scoped state: initialisation, the iteration budget, names, fixed
 * texts and the trace.
 */
#include "run_state.h"
#include "io/io.h"

#include <stdlib.h>
#include <string.h>

const char *pc_run_liveness_name(pc_run_liveness_t l)
{
	switch (l) {
	case PC_LIVENESS_WORKING: return "working";
	case PC_LIVENESS_BLOCKED: return "blocked";
	case PC_LIVENESS_PAUSED: return "paused";
	case PC_LIVENESS_ABANDONED: return "abandoned";
	}
	return "unknown";
}

const char *pc_run_trace_result_name(pc_run_trace_result_t r)
{
	switch (r) {
	case PC_TRACE_SUCCESS: return "success";
	case PC_TRACE_ROTATE_PROFILE: return "rotate_profile";
	case PC_TRACE_FALLBACK_MODEL: return "fallback_model";
	case PC_TRACE_TIMEOUT: return "timeout";
	case PC_TRACE_SURFACE_ERROR: return "surface_error";
	case PC_TRACE_SAME_MODEL_RATE_LIMIT: return "same_model_rate_limit";
	case PC_TRACE_ERROR: return "error";
	}
	return "unknown";
}

/* §1.5: Pincer's wording of the intents the spec lists. */
const char *pc_run_instruction_text(pc_run_instruction_t i)
{
	switch (i) {
	case PC_RUN_INSTR_REASONING_ONLY:
		return "Your previous turn only contained reasoning and no visible answer. "
		       "Continue from that reasoning and give the visible answer now; do not "
		       "restate the reasoning or start over.";
	case PC_RUN_INSTR_EMPTY_RESPONSE:
		return "Your previous attempt produced no visible answer. Continue from the "
		       "current state and answer now; do not start over.";
	case PC_RUN_INSTR_COMPACTION_CONTINUATION:
		return "The context was compacted before you gave a final answer. Continue "
		       "from the compacted transcript and produce the final answer; do not "
		       "start over, repeat finished work or rerun tools unless evidence is "
		       "missing.";
	case PC_RUN_INSTR_COUNT:
		break;
	}
	return "";
}

const char *pc_run_prompt_override_text(pc_run_prompt_override_t p)
{
	switch (p) {
	case PC_RUN_PROMPT_MID_TURN:
		return "Continue after the latest tool result. Do not repeat the original "
		       "request, and do not rerun tools that already finished unless needed.";
	case PC_RUN_PROMPT_FINALIZE_REVISION:
		return "Apply this revision request before your previous answer is accepted. "
		       "Do not redo work or rerun tools unless the revision requires it.";
	case PC_RUN_PROMPT_USER:
		break;
	}
	return "";
}

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

uint32_t pc_run_budget(size_t profile_count, const pc_run_retries_config_t *cfg)
{
	pc_run_retries_config_t none = {0};
	if (!cfg)
		cfg = &none;
	/* Config values are clamped into int32 first so the sum cannot overflow. */
	int64_t lim = INT32_MAX;
	int64_t base = max64(1, cfg->has_base ? min64(cfg->base, lim) : PC_RUN_BUDGET_BASE);
	int64_t per = max64(0, cfg->has_per_profile ? min64(cfg->per_profile, lim)
						     : PC_RUN_BUDGET_PER_PROFILE);
	int64_t lo = max64(1, cfg->has_min ? min64(cfg->min, lim) : PC_RUN_BUDGET_MIN);
	int64_t hi = max64(lo, cfg->has_max ? min64(cfg->max, lim) : PC_RUN_BUDGET_MAX);
	int64_t profiles = profile_count > (size_t)lim ? lim : (int64_t)profile_count;
	int64_t scaled = base + max64(1, profiles) * per;
	return (uint32_t)min64(hi, max64(lo, scaled));
}

void pc_run_config_defaults(pc_run_config_t *cfg)
{
	if (!cfg)
		return;
	memset(cfg, 0, sizeof(*cfg));
	cfg->candidate_count = 1;
	cfg->profile_counts[0] = 1;
	cfg->rate_limit_rotations = PC_RUN_DEFAULT_RATE_LIMIT_ROTATIONS;
	cfg->overload_rotations = PC_RUN_DEFAULT_OVERLOAD_ROTATIONS;
	cfg->overloaded_backoff_ms = PC_RUN_DEFAULT_OVERLOADED_BACKOFF_MS;
	cfg->billing_backoff_ms = PC_AUTH_BILLING_BASE_MS;
	cfg->idle_breaker_cap = PC_IDLE_BREAKER_DEFAULT_CAP;
	cfg->loop_guard_enabled = true;
	cfg->loop_guard_window = PC_LOOP_GUARD_DEFAULT_WINDOW;
	cfg->think_level = PC_THINK_OFF;
}

int pc_run_enter_candidate(pc_run_state_t *s, uint32_t index)
{
	if (!s || index >= s->cfg.candidate_count)
		return PC_EINVAL;
	pc_run_candidate_state_t *c = &s->cand;
	memset(c, 0, sizeof(*c));
	c->index = index;
	c->profile_count = s->cfg.profile_counts[index] ? s->cfg.profile_counts[index] : 1;
	c->budget = pc_run_budget(c->profile_count, &s->cfg.retries);
	c->think = s->cfg.think_level;
	c->last_retry_reason = PC_RUN_REASON_NONE;
	for (uint32_t i = 0; i < PC_RUN_MAX_PROFILES; i++)
		c->cooldown_reason[i] = PC_RUN_REASON_NONE;
	return 0;
}

int pc_run_state_init(pc_run_state_t *s, const pc_run_config_t *cfg)
{
	if (!s || !cfg || cfg->candidate_count == 0 ||
	    cfg->candidate_count > PC_RUN_MAX_CANDIDATES ||
	    (unsigned)cfg->think_level >= PC_RUN_THINK_COUNT)
		return PC_EINVAL;
	for (uint32_t i = 0; i < cfg->candidate_count; i++)
		if (cfg->profile_counts[i] > PC_RUN_MAX_PROFILES)
			return PC_EINVAL;
	memset(s, 0, sizeof(*s));
	s->cfg = *cfg;
	pc_idle_breaker_init(&s->breaker, cfg->idle_breaker_cap);
	pc_loop_guard_init(&s->guard, cfg->loop_guard_enabled, cfg->loop_guard_window);
	s->liveness = PC_LIVENESS_WORKING;
	return pc_run_enter_candidate(s, 0);
}

int pc_run_profile_seed(pc_run_state_t *s, uint32_t profile, uint64_t cooldown_until_ms,
			uint64_t last_failure_ms, uint32_t error_count)
{
	if (!s || profile >= s->cand.profile_count)
		return PC_EINVAL;
	s->cand.cooldown_until_ms[profile] = cooldown_until_ms;
	s->cand.last_failure_ms[profile] = last_failure_ms;
	s->cand.error_count[profile] = error_count;
	return 0;
}

int pc_run_profile_seed_reason(pc_run_state_t *s, uint32_t profile, pc_failover_reason_t reason)
{
	if (!s || profile >= s->cand.profile_count)
		return PC_EINVAL;
	s->cand.cooldown_reason[profile] = reason;
	return 0;
}

void pc_run_state_fini(pc_run_state_t *s)
{
	if (!s)
		return;
	free(s->trace);
	s->trace = NULL;
	s->trace_count = s->trace_cap = 0;
	pc_loop_guard_fini(&s->guard);
}

uint32_t pc_run_start_profile(pc_run_state_t *s, uint64_t now_ms)
{
	if (!s)
		return 0;
	pc_run_candidate_state_t *c = &s->cand;
	for (uint32_t i = 0; i < c->profile_count; i++) {
		if (c->cooldown_until_ms[i] <= now_ms) {
			c->profile = i;
			return i;
		}
	}
	c->profile = 0;
	return 0;
}

bool pc_run_thinking_attempted(const pc_run_state_t *s, pc_think_level_t t)
{
	return s && (unsigned)t < PC_RUN_THINK_COUNT && (s->cand.attempted_thinking & (1u << t));
}

int pc_run_prompt_additions(const pc_run_state_t *s, const char **out, size_t cap, size_t *n)
{
	if (!s || !out || !n)
		return PC_EINVAL;
	*n = 0;
	for (int i = 0; i < PC_RUN_INSTR_COUNT && *n < cap; i++)
		if (s->cand.instructions[i])
			out[(*n)++] = pc_run_instruction_text((pc_run_instruction_t)i);
	return 0;
}

void pc_run_trace_add(pc_run_state_t *s, pc_run_trace_result_t result, pc_run_stage_t stage,
		      pc_failover_reason_t reason, int status, const char *code,
		      int64_t duration_ms)
{
	if (!s)
		return;
	if (s->trace_count >= PC_RUN_TRACE_MAX) {
		s->trace_dropped++;
		return;
	}
	size_t cap = s->trace_cap;
	if (PC__GROW(s->trace, cap, (size_t)s->trace_count + 1, 2)) {
		s->trace_dropped++;
		return;
	}
	s->trace_cap = (uint32_t)cap;
	pc_run_trace_entry_t *e = &s->trace[s->trace_count++];
	memset(e, 0, sizeof(*e));
	e->result = result;
	e->stage = stage;
	e->reason = reason;
	e->status = status;
	if (code) {
		for (size_t i = 0; i + 1 < PC_RUN_TRACE_CODE_MAX && code[i]; i++)
			e->code[i] = code[i];
	}
	e->candidate = s->cand.index;
	e->profile = s->cand.profile;
	e->probe = s->cand.probing;
	e->duration_ms = duration_ms;
}
