/*
 * Layer 1's decisions. The post-attempt pipeline (pc_run_decide) is one
 * function whose numbered comments follow the steps of spec §1.7; the
 * helpers above it are §1.9 (failover tables), §1.10 (assistant failover),
 * §1.11 (profile rotation and cooldowns), §1.12 (fallback advance), §1.13
 * (retry-limit exhaustion), §1.14 (liveness), §1.18 (backoff) and §11.2
 * (thinking fallback).
 */
#include "run_decide.h"

#include "../attempt/context_guard.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* §1.7 step 7d. */
#define MSG_CONTEXT_OVERFLOW                                                                       \
	"Context overflow: prompt too large for the model. Try /reset (or /new) to start a "      \
	"fresh session, or use a larger-context model."
/* §1.7 step 10.4. */
#define MSG_ROLE_ORDERING                                                                          \
	"Message ordering conflict - please try again. If this persists, use /new to start a "    \
	"fresh session."
/* §1.13. */
#define MSG_RETRY_LIMIT                                                                            \
	"Request failed after repeated internal retries. Please try again, or use /new to start " \
	"a fresh session."
/* §1.7 steps 26-27. */
#define MSG_INCOMPLETE "⚠️ Agent couldn't generate a response. Please try again."
#define MSG_INCOMPLETE_DETAIL "Agent couldn't generate a response."
#define MSG_INCOMPLETE_SIDE_EFFECTS                                                                \
	"⚠️ Agent couldn't generate a response. Note: some tool actions may have already been "      \
	"executed — please verify before retrying."
/* §1.7 step 18. */
#define MSG_IDLE_TIMEOUT                                                                           \
	"The model did not produce a response before the model idle timeout. Please try again, "  \
	"or increase `models.providers.<id>.timeoutSeconds` for slow local or self-hosted "       \
	"providers. If `agents.defaults.timeoutSeconds` or a run-specific timeout is lower, "     \
	"raise that ceiling too; provider timeouts cannot extend the whole agent run."
#define MSG_RUN_TIMEOUT                                                                            \
	"Request timed out before a response was generated. Please try again, or increase "       \
	"`agents.defaults.timeoutSeconds` in your config."
/* §1.10 escalation texts. */
#define MSG_OVERLOADED "The AI service is temporarily overloaded. Please try again in a moment."
#define MSG_RATE_LIMITED "The AI service is temporarily rate-limited. Please try again in a moment."

/* ---- small helpers ---- */

static bool ci_contains(const char *hay, const char *needle)
{
	if (!hay)
		return false;
	size_t n = strlen(needle);
	for (; *hay; hay++)
		if (strncasecmp(hay, needle, n) == 0)
			return true;
	return false;
}

static bool ci_contains_any(const char *hay, const char *const *needles, size_t count)
{
	for (size_t i = 0; i < count; i++)
		if (ci_contains(hay, needles[i]))
			return true;
	return false;
}

#define COUNT_OF(a) (sizeof(a) / sizeof((a)[0]))

static void set_text(char *dst, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_text(char *dst, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(dst, PC_RUN_MESSAGE_MAX, fmt, ap);
	va_end(ap);
}

static void action_reset(pc_run_action_t *a)
{
	memset(a, 0, sizeof(*a));
	a->reason = PC_RUN_REASON_NONE;
	a->profile_failure_reason = PC_RUN_REASON_NONE;
	a->liveness = PC_LIVENESS_WORKING;
}

static bool fallback_available(const pc_run_state_t *s)
{
	return s->cand.index + 1 < s->cfg.candidate_count;
}

static int reason_status(pc_failover_reason_t r)
{
	return r == PC_RUN_REASON_NONE ? 0 : pc_failover_reason_status(r);
}

const char *pc_run_error_kind_name(pc_run_error_kind_t k)
{
	switch (k) {
	case PC_RUN_ERR_NONE: return "none";
	case PC_RUN_ERR_CONTEXT_OVERFLOW: return "context_overflow";
	case PC_RUN_ERR_COMPACTION_FAILURE: return "compaction_failure";
	case PC_RUN_ERR_ROLE_ORDERING: return "role_ordering";
	case PC_RUN_ERR_IMAGE_SIZE: return "image_size";
	case PC_RUN_ERR_HOOK_BLOCK: return "hook_block";
	case PC_RUN_ERR_RETRY_LIMIT: return "retry_limit";
	case PC_RUN_ERR_INCOMPLETE_TURN: return "incomplete_turn";
	case PC_RUN_ERR_TIMEOUT: return "timeout";
	case PC_RUN_ERR_ABORTED: return "aborted";
	case PC_RUN_ERR_LIVE_MODEL_SWITCH: return "live_model_switch";
	case PC_RUN_ERR_LOOP_PERSISTED: return "compaction_loop_persisted";
	case PC_RUN_ERR_FAILOVER: return "failover";
	case PC_RUN_ERR_PROMPT_FAILED: return "prompt_failed";
	}
	return "unknown";
}

/* ---- §1.9 ---- */

bool pc_run_should_escalate_retry_limit(pc_failover_reason_t r)
{
	return r != PC_RUN_REASON_NONE && r != PC_FAILOVER_TIMEOUT &&
	       r != PC_FAILOVER_MODEL_NOT_FOUND && r != PC_FAILOVER_FORMAT &&
	       r != PC_FAILOVER_SESSION_EXPIRED;
}

pc_failover_reason_t pc_run_merge_retry_reason(pc_failover_reason_t previous,
					       pc_failover_reason_t current, bool timed_out)
{
	if (current != PC_RUN_REASON_NONE)
		return current;
	if (previous != PC_RUN_REASON_NONE)
		return previous; /* a concrete older reason beats a synthetic timeout */
	return timed_out ? PC_FAILOVER_TIMEOUT : PC_RUN_REASON_NONE;
}

static void decided(pc_run_failover_decision_t *out, pc_run_failover_action_t act,
		    pc_failover_reason_t r)
{
	out->action = act;
	out->reason = r;
}

int pc_run_failover_decide(const pc_run_failover_input_t *in, pc_run_failover_decision_t *out)
{
	if (!in || !out)
		return PC_EINVAL;
	pc_failover_reason_t r = in->reason;
	bool terminal_format = in->failover_failure && r == PC_FAILOVER_FORMAT &&
			       !in->allow_format_retry;
	switch (in->stage) {
	case PC_FAILOVER_STAGE_RETRY_LIMIT:
		if (in->fallback_configured && pc_run_should_escalate_retry_limit(r))
			decided(out, PC_FAILOVER_ACT_FALLBACK_MODEL, r);
		else
			decided(out, PC_FAILOVER_ACT_RETURN_ERROR_PAYLOAD, r);
		return 0;
	case PC_FAILOVER_STAGE_PROMPT: {
		bool rotate = in->failover_failure && r != PC_FAILOVER_TIMEOUT &&
			      r != PC_FAILOVER_TLS_CERTIFICATE && !terminal_format;
		if (in->aborted || in->timed_out_by_run_budget)
			decided(out, PC_FAILOVER_ACT_SURFACE_ERROR, r);
		else if (!in->profile_rotated && rotate)
			decided(out, PC_FAILOVER_ACT_ROTATE_PROFILE, r);
		else if (in->fallback_configured && in->failover_failure && !terminal_format)
			decided(out, PC_FAILOVER_ACT_FALLBACK_MODEL,
				r == PC_RUN_REASON_NONE ? PC_FAILOVER_UNKNOWN : r);
		else
			decided(out, PC_FAILOVER_ACT_SURFACE_ERROR, r);
		return 0;
	}
	case PC_FAILOVER_STAGE_ASSISTANT: {
		bool timeout_failure = in->idle_timed_out ||
				       (in->timed_out && !in->timed_out_during_compaction &&
					!in->timed_out_during_tool);
		bool rotate = !in->timed_out_by_run_budget &&
			      ((!in->aborted && in->failover_failure) || timeout_failure);
		pc_failover_reason_t fallback_reason;
		if (r != PC_RUN_REASON_NONE && r != PC_FAILOVER_TIMEOUT)
			fallback_reason = r;
		else if (timeout_failure)
			fallback_reason = PC_FAILOVER_TIMEOUT;
		else
			fallback_reason = r == PC_RUN_REASON_NONE ? PC_FAILOVER_UNKNOWN : r;
		if (in->aborted || terminal_format)
			decided(out, PC_FAILOVER_ACT_SURFACE_ERROR, r);
		else if (in->failover_failure && r == PC_FAILOVER_TLS_CERTIFICATE)
			decided(out, in->fallback_configured ? PC_FAILOVER_ACT_FALLBACK_MODEL
							     : PC_FAILOVER_ACT_SURFACE_ERROR, r);
		else if (!in->profile_rotated && rotate)
			decided(out, PC_FAILOVER_ACT_ROTATE_PROFILE, r);
		else if (rotate && in->fallback_configured)
			decided(out, PC_FAILOVER_ACT_FALLBACK_MODEL, fallback_reason);
		else if (!rotate)
			decided(out, PC_FAILOVER_ACT_CONTINUE_NORMAL, r);
		else
			decided(out, PC_FAILOVER_ACT_SURFACE_ERROR, r);
		return 0;
	}
	}
	return PC_EINVAL;
}

/* ---- §1.10 / §1.18 backoff ---- */

static const char *const long_window_words[] = {
	"daily", "weekly", "monthly", "tokens per day", "requests per day", "usage limit",
	"subscription", "insufficient_quota", "current quota", "quota exceeded",
};
static const char *const short_window_words[] = {
	"requests per minute", "tokens per minute", "per-minute", "per minute", "rpm", "tpm",
	"model_cooldown", "请求过于频繁", "调用频率", "频率限制",
};

bool pc_run_is_short_window_rate_limit(const char *text, uint64_t retry_after_ms)
{
	if (retry_after_ms > PC_RUN_RATE_LIMIT_RETRY_MAX_MS)
		return false;
	bool hint = ci_contains_any(text, short_window_words, COUNT_OF(short_window_words));
	if (!hint && ci_contains_any(text, long_window_words, COUNT_OF(long_window_words)))
		return false;
	return hint || retry_after_ms > 0;
}

uint64_t pc_run_same_model_rate_limit_delay_ms(uint32_t retries_so_far, uint64_t retry_after_ms)
{
	uint64_t step = (uint64_t)PC_RUN_RATE_LIMIT_RETRY_STEP_MS * ((uint64_t)retries_so_far + 1);
	if (step > PC_RUN_RATE_LIMIT_RETRY_MAX_MS)
		step = PC_RUN_RATE_LIMIT_RETRY_MAX_MS;
	uint64_t after = retry_after_ms > PC_RUN_RATE_LIMIT_RETRY_MAX_MS
				 ? PC_RUN_RATE_LIMIT_RETRY_MAX_MS
				 : retry_after_ms;
	return step > after ? step : after;
}

uint64_t pc_run_overload_retry_delay_ms(uint32_t attempt)
{
	if (attempt == 0 || attempt > PC_RUN_MAX_OVERLOAD_RETRIES)
		return 0;
	uint64_t d = PC_RUN_OVERLOAD_RETRY_BASE_MS;
	for (uint32_t i = 1; i < attempt && d < PC_RUN_OVERLOAD_RETRY_MAX_MS; i++)
		d *= 2;
	return d > PC_RUN_OVERLOAD_RETRY_MAX_MS ? PC_RUN_OVERLOAD_RETRY_MAX_MS : d;
}

uint64_t pc_backoff_compute(const pc_backoff_policy_t *p, uint32_t attempt, double rand01)
{
	if (!p)
		return 0;
	if (attempt == 0)
		attempt = 1;
	if (!(rand01 >= 0.0)) /* also catches NaN */
		rand01 = 0.0;
	if (rand01 > 1.0)
		rand01 = 1.0;
	/* factor^(attempt-1) by repeated multiplication: no libm in this library */
	double v = (double)p->initial_ms;
	for (uint32_t i = 1; i < attempt && v < (double)p->max_ms; i++)
		v *= p->factor;
	v *= 1.0 + p->jitter * rand01;
	if (!(v < (double)p->max_ms))
		return p->max_ms;
	return (uint64_t)(v + 0.5);
}

/* ---- §1.11 cooldowns and rotation ---- */

static uint64_t doubled(uint64_t base, uint32_t n, uint64_t cap)
{
	uint64_t d = base;
	for (uint32_t i = 1; i < n && d < cap; i++)
		d *= 2;
	return d > cap ? cap : d;
}

uint64_t pc_auth_cooldown_ms(pc_failover_reason_t r, uint32_t error_count, uint64_t billing_base_ms)
{
	if (error_count == 0)
		error_count = 1;
	if (r == PC_FAILOVER_BILLING)
		return doubled(billing_base_ms ? billing_base_ms : PC_AUTH_BILLING_BASE_MS,
			       error_count, PC_AUTH_BILLING_MAX_MS);
	if (r == PC_FAILOVER_AUTH_PERMANENT)
		return doubled(PC_AUTH_PERMANENT_BASE_MS, error_count, PC_AUTH_PERMANENT_MAX_MS);
	if (error_count == 1)
		return PC_AUTH_COOLDOWN_FIRST_MS;
	if (error_count == 2)
		return PC_AUTH_COOLDOWN_SECOND_MS;
	return PC_AUTH_COOLDOWN_MAX_MS;
}

/* resolveAuthProfileFailureReason: which failures put the profile in
 * cooldown. Only problems of the account or the provider do; a timeout
 * only when the provider had started; a rate limit that clears within a
 * minute does not. */
static pc_failover_reason_t profile_failure_reason(pc_failover_reason_t r, bool provider_started,
						   bool short_window)
{
	switch (r) {
	case PC_FAILOVER_AUTH:
	case PC_FAILOVER_AUTH_PERMANENT:
	case PC_FAILOVER_BILLING:
	case PC_FAILOVER_OVERLOADED:
	case PC_FAILOVER_SERVER_ERROR:
		return r;
	case PC_FAILOVER_RATE_LIMIT:
		return short_window ? PC_RUN_REASON_NONE : r;
	case PC_FAILOVER_TIMEOUT:
		return provider_started ? r : PC_RUN_REASON_NONE;
	default:
		return PC_RUN_REASON_NONE;
	}
}

/* markAuthProfileFailure on the current profile (once per decision). */
static void mark_failed(pc_run_state_t *s, const pc_run_outcome_t *o, pc_run_action_t *a,
			pc_failover_reason_t r)
{
	if (r == PC_RUN_REASON_NONE || a->mark_profile_failed)
		return;
	pc_run_candidate_state_t *c = &s->cand;
	uint32_t p = c->profile;
	if (c->last_failure_ms[p] && o->now_ms >= c->last_failure_ms[p] &&
	    o->now_ms - c->last_failure_ms[p] >= PC_AUTH_FAILURE_WINDOW_MS)
		c->error_count[p] = 0; /* the failure window has passed */
	if (c->error_count[p] < UINT32_MAX)
		c->error_count[p]++;
	c->last_failure_ms[p] = o->now_ms;
	uint64_t cd = pc_auth_cooldown_ms(r, c->error_count[p], s->cfg.billing_backoff_ms);
	c->cooldown_until_ms[p] = o->now_ms + cd;
	c->cooldown_reason[p] = r;
	a->mark_profile_failed = true;
	a->failed_candidate = c->index;
	a->failed_profile = p;
	a->profile_failure_reason = r;
	a->profile_cooldown_ms = cd;
}

/* advanceAuthProfile, first half: the next profile not in cooldown. */
static bool next_profile(const pc_run_state_t *s, uint64_t now_ms, uint32_t *out)
{
	const pc_run_candidate_state_t *c = &s->cand;
	if (s->cfg.profile_locked)
		return false;
	for (uint32_t i = c->profile + 1; i < c->profile_count; i++) {
		if (c->cooldown_until_ms[i] <= now_ms) {
			*out = i;
			return true;
		}
	}
	return false;
}

/* advanceAuthProfile, second half: a rotation resets the think level and
 * the levels tried (§11.2). */
static void enter_profile(pc_run_state_t *s, uint32_t profile)
{
	s->cand.profile = profile;
	s->cand.think = s->cfg.think_level;
	s->cand.attempted_thinking = 0;
}

/* ---- §11.2 thinking fallback ---- */

static bool is_word_char(char ch)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
	       ch == '_';
}

/* Does `p` (at a word start) read "<head><sep><tail>" as a whole token? */
static bool param_at(const char *p, const char *head, const char *const *tails, size_t ntails)
{
	size_t hl = strlen(head);
	if (strncasecmp(p, head, hl) != 0)
		return false;
	p += hl;
	if (*p == '.' || *p == '_')
		p++;
	else if (*p == ' ' || *p == '\t')
		while (*p == ' ' || *p == '\t')
			p++;
	else
		return false;
	for (size_t i = 0; i < ntails; i++) {
		size_t tl = strlen(tails[i]);
		if (strncasecmp(p, tails[i], tl) != 0)
			continue;
		char after = p[tl];
		if (is_word_char(after) || after == '-' || after == '/' ||
		    (after == '.' && (is_word_char(p[tl + 1]) || p[tl + 1] == '-')))
			continue;
		return true;
	}
	return false;
}

/* Model ids contain "thinking" too, so only a thinking / reasoning
 * *parameter* counts: think(ing) value|level|budget, reasoning
 * effort|level|budget. */
static bool mentions_thinking_param(const char *msg)
{
	static const char *const think_tails[] = {"value", "level", "budget"};
	static const char *const reason_tails[] = {"effort", "level", "budget"};
	for (const char *p = msg; *p; p++) {
		if (p != msg && (is_word_char(p[-1]) || p[-1] == '.' || p[-1] == '/' || p[-1] == '-'))
			continue;
		if (param_at(p, "thinking", think_tails, COUNT_OF(think_tails)) ||
		    param_at(p, "think", think_tails, COUNT_OF(think_tails)) ||
		    param_at(p, "reasoning", reason_tails, COUNT_OF(reason_tails)))
			return true;
	}
	return false;
}

static const char *const reasoning_required_words[] = {
	"requires non-zero reasoning", "reasoning is required", "reasoning is mandatory",
	"thinking is required", "reasoning cannot be disabled",
};

/* The first untried level of a "supported values[ are]: ..." list, or
 * PC_RUN_THINK_COUNT when there is none; *found says whether a list was there at all. */
static unsigned pick_from_list(const char *msg, uint32_t attempted, bool *found)
{
	*found = false;
	const char *start = NULL;
	for (const char *p = msg; *p && !start; p++) {
		if (strncasecmp(p, "supported values are:", 21) == 0)
			start = p + 21;
		else if (strncasecmp(p, "supported values:", 17) == 0)
			start = p + 17;
	}
	if (!start)
		return PC_RUN_THINK_COUNT;
	while (*start == ' ' || *start == '\t')
		start++;
	size_t flen = strcspn(start, "\n.");
	bool quoted = memchr(start, '\'', flen) || memchr(start, '"', flen);
	size_t i = 0;
	while (i < flen) {
		size_t b, e;
		if (quoted) {
			while (i < flen && start[i] != '\'' && start[i] != '"')
				i++;
			if (i >= flen)
				break;
			char q = start[i++];
			b = i;
			while (i < flen && start[i] != q)
				i++;
			e = i++;
		} else {
			b = i;
			while (i < flen && start[i] != ',' &&
			       !(strncasecmp(start + i, "and", 3) == 0 &&
				 (i == 0 || !is_word_char(start[i - 1])) &&
				 !is_word_char(start[i + 3])))
				i++;
			e = i;
			i += (i < flen && start[i] == ',') ? 1 : 3;
			/* trim everything that is not a letter at both ends */
			while (b < e && !((start[b] | 0x20) >= 'a' && (start[b] | 0x20) <= 'z'))
				b++;
			while (e > b &&
			       !((start[e - 1] | 0x20) >= 'a' && (start[e - 1] | 0x20) <= 'z'))
				e--;
		}
		while (b < e && (start[b] == ' ' || start[b] == '\t'))
			b++;
		while (e > b && (start[e - 1] == ' ' || start[e - 1] == '\t'))
			e--;
		if (b >= e)
			continue;
		*found = true;
		char word[32];
		if (e - b >= sizeof(word))
			continue; /* longer than any level */
		memcpy(word, start + b, e - b);
		word[e - b] = 0;
		pc_think_level_t t;
		if (pc_think_level_parse(word, &t) == 0 && !(attempted & (1u << t)))
			return t;
	}
	return PC_RUN_THINK_COUNT;
}

bool pc_run_pick_fallback_thinking(const char *message, uint32_t attempted, pc_think_level_t *out)
{
	if (!message || !out)
		return false;
	bool required = ci_contains_any(message, reasoning_required_words,
					COUNT_OF(reasoning_required_words));
	/* mandatory-reasoning endpoints need the smallest enabled level, never off */
	if (required && !(attempted & (1u << PC_THINK_MINIMAL))) {
		*out = PC_THINK_MINIMAL;
		return true;
	}
	/* §11.2: a list of supported values names its first untried level
	 * whatever parameter it is about; only entries that are think levels
	 * count (OpenClaw's thinking.test.ts: 'Supported values are: "high",
	 * "medium"' alone picks high, then medium) */
	bool listed;
	unsigned t = pick_from_list(message, attempted, &listed);
	if (t != PC_RUN_THINK_COUNT) {
		*out = (pc_think_level_t)t;
		return true;
	}
	/* "... not supported" turns thinking off only when it is about thinking */
	if (!mentions_thinking_param(message))
		return false;
	if (!listed && ci_contains(message, "not supported") &&
	    !(attempted & (1u << PC_THINK_OFF))) {
		*out = PC_THINK_OFF;
		return true;
	}
	return false;
}

/* ---- §1.14 ---- */

pc_run_liveness_t pc_run_liveness(const pc_run_liveness_input_t *in)
{
	if (!in)
		return PC_LIVENESS_WORKING;
	if (in->incomplete_turn)
		return PC_LIVENESS_ABANDONED;
	if (in->compaction_interrupted)
		return PC_LIVENESS_PAUSED;
	if ((in->aborted || in->timed_out) && in->payload_count == 0)
		return PC_LIVENESS_BLOCKED;
	if (in->assistant_stop_error)
		return PC_LIVENESS_BLOCKED;
	return PC_LIVENESS_WORKING;
}

static pc_run_liveness_t outcome_liveness(const pc_run_outcome_t *o, bool incomplete)
{
	pc_run_liveness_input_t in = {
		.incomplete_turn = incomplete,
		.compaction_interrupted = o->prompt_error == PC_PROMPT_ERR_COMPACTION ||
					  o->timed_out_during_compaction,
		.aborted = o->aborted,
		.timed_out = o->timed_out,
		.payload_count = o->payload_count,
		.assistant_stop_error = o->assistant_stop_error,
	};
	return pc_run_liveness(&in);
}

/* ---- outcomes of the pipeline ---- */

static int retry(pc_run_action_t *a, pc_run_retry_kind_t kind, uint64_t delay_ms)
{
	a->next = PC_RUN_RETRY;
	a->retry = kind;
	a->delay_ms = delay_ms;
	return 0;
}

static int finish_error(const pc_run_state_t *s, pc_run_action_t *a, pc_run_error_kind_t kind,
			pc_run_liveness_t liveness)
{
	a->next = PC_RUN_FINISH_ERROR;
	a->error = kind;
	a->liveness = liveness;
	a->replay_invalid = s->replay_invalid;
	return 0;
}

static int fail(pc_run_action_t *a, pc_run_error_kind_t kind)
{
	a->next = PC_RUN_FAIL;
	a->error = kind;
	/* the subscription's derivation at the error end: an error is never
	 * "working" (§1.14) */
	a->liveness = PC_LIVENESS_BLOCKED;
	return 0;
}

static bool preserves_probe(pc_failover_reason_t r);

/* The reply runner's answer to a chain that failed as a whole (§1.12,
 * agent-runner-error-handler): a chain whose every failure was an overload
 * is replayed up to 10 times, 2.5 s doubling to 30 s; another transient
 * failure (timeout, server error) once after 2.5 s; never once visible
 * text or a tool has started. True when it replays. */
static bool replay_chain(pc_run_state_t *s, pc_run_action_t *a, pc_failover_reason_t r)
{
	if (s->output_started)
		return false;
	bool overloaded = s->chain_failures > 0 && s->chain_overloads == s->chain_failures;
	uint64_t delay;
	if (overloaded && s->overload_replays < PC_RUN_MAX_OVERLOAD_RETRIES) {
		a->overload_retry = ++s->overload_replays;
		delay = pc_run_overload_retry_delay_ms(s->overload_replays);
	} else if (!overloaded && (r == PC_FAILOVER_TIMEOUT || r == PC_FAILOVER_SERVER_ERROR) &&
		   !s->transient_replay_used) {
		s->transient_replay_used = true;
		delay = PC_RUN_TRANSIENT_HTTP_RETRY_MS;
	} else {
		return false;
	}
	/* a new pass is a new fallback run: its own transient probes */
	s->chain_failures = s->chain_overloads = 0;
	s->probe_used = 0;
	pc_run_enter_candidate(s, 0);
	a->next = PC_RUN_FALLBACK;
	a->chain_replay = true;
	a->delay_ms = delay;
	return true;
}

/* A FailoverError leaves this candidate (§1.12): the next model when there
 * is one (the state moves there), else the reply runner's replay or the
 * run fails with it; a session suspension is only asked for once no
 * candidate is left. */
static int throw_failover(pc_run_state_t *s, pc_run_action_t *a, pc_failover_reason_t r,
			  int status, uint64_t delay_ms)
{
	a->reason = r;
	a->status = status;
	s->chain_failures++;
	if (r == PC_FAILOVER_OVERLOADED)
		s->chain_overloads++;
	pc_run_candidate_state_t *c = &s->cand;
	if (c->transient_probe && preserves_probe(r))
		s->probe_used &= ~(1u << (s->cfg.provider_id[c->index] % PC_RUN_MAX_CANDIDATES));
	if (fallback_available(s)) {
		pc_run_enter_candidate(s, s->cand.index + 1);
		a->next = PC_RUN_FALLBACK;
		a->delay_ms = delay_ms;
		return 0;
	}
	if (replay_chain(s, a, r))
		return 0;
	if (s->chain_failures > 0 && s->chain_overloads == s->chain_failures) {
		/* the reply runner's copy for a pure overload summary */
		set_text(a->message, "%s", MSG_OVERLOADED);
		a->summary_as_detail = true;
	}
	a->suspend_session = s->cfg.has_session_key &&
			     (r == PC_FAILOVER_RATE_LIMIT || r == PC_FAILOVER_BILLING);
	/* §1.14: a run that ends on a provider failure is blocked (the last
	 * assistant turn is an error; every exhausted-retry exit is blocked) */
	a->liveness = PC_LIVENESS_BLOCKED;
	return fail(a, PC_RUN_ERR_FAILOVER);
}

/* §1.13 handleRetryLimitExhaustion; `a->detail` holds the error message. */
static int exhaust(pc_run_state_t *s, pc_run_action_t *a)
{
	pc_run_failover_input_t fin = {
		.stage = PC_FAILOVER_STAGE_RETRY_LIMIT,
		.reason = s->cand.last_retry_reason,
		.fallback_configured = fallback_available(s),
	};
	pc_run_failover_decision_t d;
	pc_run_failover_decide(&fin, &d);
	a->liveness = PC_LIVENESS_BLOCKED;
	if (d.action == PC_FAILOVER_ACT_FALLBACK_MODEL) {
		memcpy(a->message, a->detail, sizeof(a->message));
		pc_run_trace_add(s, PC_TRACE_FALLBACK_MODEL, PC_STAGE_RUN, d.reason,
				 reason_status(d.reason), NULL, 0);
		return throw_failover(s, a, d.reason, reason_status(d.reason), 0);
	}
	set_text(a->message, "%s", MSG_RETRY_LIMIT);
	return finish_error(s, a, PC_RUN_ERR_RETRY_LIMIT, PC_LIVENESS_BLOCKED);
}

int pc_run_begin_iteration(pc_run_state_t *s, pc_run_action_t *a)
{
	if (!s || !a)
		return PC_EINVAL;
	action_reset(a);
	pc_run_candidate_state_t *c = &s->cand;
	if (c->iterations >= c->budget) {
		set_text(a->detail, "Exceeded retry limit after %u attempts (max=%u).",
			 (unsigned)c->iterations, (unsigned)c->budget);
		return exhaust(s, a);
	}
	c->iterations++;
	c->attempted_thinking |= 1u << c->think;
	a->next = PC_RUN_DISPATCH;
	a->prompt = c->prompt_override;
	a->suppress_user_persist = c->suppress_user_persist;
	c->prompt_override = PC_RUN_PROMPT_USER; /* the override is for one attempt */
	c->suppress_user_persist = false;
	return 0;
}

/* A trace entry for a profile passed over without a request. */
static void trace_skip(pc_run_state_t *s, pc_run_trace_result_t result, uint32_t profile)
{
	pc_failover_reason_t r = s->cand.cooldown_reason[profile];
	if (r == PC_RUN_REASON_NONE)
		r = PC_FAILOVER_UNKNOWN;
	uint32_t before = s->trace_count;
	pc_run_trace_add(s, result, PC_STAGE_PROMPT, r, reason_status(r), NULL, 0);
	if (s->trace_count > before) {
		s->trace[before].profile = profile;
		s->trace[before].skipped = true;
	}
}

/* §1.12 shouldUseTransientCooldownProbeSlot: a cooldown that waiting out
 * may cure; a candidate cooling down for it may be probed, once per
 * provider per run. (server_error is Pincer's: it cools a profile down.) */
static bool transient_cooldown(pc_failover_reason_t r)
{
	switch (r) {
	case PC_FAILOVER_RATE_LIMIT:
	case PC_FAILOVER_OVERLOADED:
	case PC_FAILOVER_TIMEOUT:
	case PC_FAILOVER_SERVER_ERROR:
	case PC_FAILOVER_EMPTY_RESPONSE:
	case PC_FAILOVER_NO_ERROR_DETAILS:
	case PC_FAILOVER_UNCLASSIFIED:
	case PC_FAILOVER_UNKNOWN:
		return true;
	default:
		return false;
	}
}

/* shouldPreserveTransientCooldownProbeSlot: a probe that failed for this
 * says nothing of the cooldown, so the provider keeps its probe. */
static bool preserves_probe(pc_failover_reason_t r)
{
	return r == PC_FAILOVER_MODEL_NOT_FOUND || r == PC_FAILOVER_FORMAT || r == PC_FAILOVER_AUTH ||
	       r == PC_FAILOVER_AUTH_PERMANENT || r == PC_FAILOVER_SESSION_EXPIRED ||
	       r == PC_FAILOVER_TLS_CERTIFICATE;
}

/* resolveProfilesUnavailableReason, simplified: a disabling reason
 * (auth_permanent, then billing) outweighs a cooldown, auth outweighs a
 * transient one; else the reason of the profile whose cooldown ends
 * first. */
static pc_failover_reason_t unavailable_reason(const pc_run_candidate_state_t *c, uint32_t soonest)
{
	static const pc_failover_reason_t severe[] = {PC_FAILOVER_AUTH_PERMANENT, PC_FAILOVER_BILLING,
						       PC_FAILOVER_AUTH};
	for (size_t k = 0; k < sizeof(severe) / sizeof(severe[0]); k++)
		for (uint32_t i = 0; i < c->profile_count; i++)
			if (c->cooldown_reason[i] == severe[k])
				return severe[k];
	pc_failover_reason_t r = c->cooldown_reason[soonest];
	return r == PC_RUN_REASON_NONE ? PC_FAILOVER_UNKNOWN : r;
}

/* A candidate whose profiles all cool down, skipped: its trace entry, then
 * the next candidate (or the run's failure). */
static int skip_candidate(pc_run_state_t *s, pc_run_action_t *a, pc_failover_reason_t r, const char *why)
{
	uint32_t before = s->trace_count;
	pc_run_trace_add(s, PC_TRACE_FALLBACK_MODEL, PC_STAGE_PROMPT, r, reason_status(r), NULL, 0);
	if (s->trace_count > before) {
		s->trace[before].profile = s->cand.profile;
		s->trace[before].skipped = true;
	}
	set_text(a->message, "%s (%s).", why, pc_failover_reason_name(r));
	return throw_failover(s, a, r, reason_status(r), 0);
}

static int start_candidate(pc_run_state_t *s, uint64_t now_ms, pc_run_action_t *a);
static void record_delay(pc_run_state_t *s, uint32_t before, int rc, const pc_run_action_t *a);

int pc_run_start_candidate(pc_run_state_t *s, uint64_t now_ms, pc_run_action_t *a)
{
	if (!s || !a)
		return PC_EINVAL;
	uint32_t before = s->trace_count;
	int rc = start_candidate(s, now_ms, a);
	record_delay(s, before, rc, a);
	return rc;
}

static int start_candidate(pc_run_state_t *s, uint64_t now_ms, pc_run_action_t *a)
{
	action_reset(a);
	a->next = PC_RUN_DISPATCH;
	if (s->cfg.profile_locked)
		return 0;
	pc_run_candidate_state_t *c = &s->cand;
	uint32_t first = pc_run_start_profile(s, now_ms);
	if (c->cooldown_until_ms[first] <= now_ms) {
		for (uint32_t i = 0; i < first; i++)
			trace_skip(s, PC_TRACE_ROTATE_PROFILE, i);
		return 0;
	}
	/* every profile cools down: resolveCooldownDecision. A probe asks the
	 * profile whose cooldown ends first. */
	uint32_t soonest = 0;
	for (uint32_t i = 0; i < c->profile_count; i++)
		if (c->cooldown_until_ms[i] < c->cooldown_until_ms[soonest])
			soonest = i;
	c->profile = soonest;
	pc_failover_reason_t r = unavailable_reason(c, soonest);
	bool primary = c->index == 0;
	bool has_fallback = s->cfg.candidate_count > 1;
	bool throttle_open = c->last_probe_ms == 0 || now_ms < c->last_probe_ms ||
			     now_ms - c->last_probe_ms >= PC_RUN_PROBE_INTERVAL_MS;
	/* without fallbacks the primary is probed on every open throttle slot:
	 * a rolling cap can recover before its reported reset (OpenClaw #90702) */
	bool probe_due = primary && throttle_open &&
			 (!has_fallback || now_ms + PC_RUN_PROBE_MARGIN_MS >= c->cooldown_until_ms[soonest]);
	bool attempt;
	if (r == PC_FAILOVER_AUTH || r == PC_FAILOVER_AUTH_PERMANENT)
		attempt = false;
	else if (r == PC_FAILOVER_BILLING)
		attempt = primary && (probe_due || (!has_fallback && throttle_open));
	else
		attempt = primary ? probe_due : transient_cooldown(r);
	if (!attempt)
		return skip_candidate(s, a, r, "All auth profiles are in cooldown");
	a->mark_probe = primary;
	c->probing = true;
	if (transient_cooldown(r)) {
		uint32_t bit = 1u << (s->cfg.provider_id[c->index] % PC_RUN_MAX_CANDIDATES);
		if (s->probe_used & bit) {
			c->probing = false;
			return skip_candidate(s, a, r, "The provider is in cooldown (probe already attempted this run)");
		}
		s->probe_used |= bit;
		c->transient_probe = true;
	}
	return 0;
}

/* ---- §1.10 handleAssistantFailover ---- */

typedef struct assistant_ctx {
	pc_run_failover_input_t fin;
	pc_failover_reason_t profile_reason; /* cooldown reason, NONE: no cooldown */
	bool can_restart;                    /* canRestartForLiveSwitch */
	uint64_t retry_after_ms;
} assistant_ctx_t;

static const char *default_failover_text(pc_failover_reason_t r)
{
	switch (r) {
	case PC_FAILOVER_TIMEOUT: return "LLM request timed out.";
	case PC_FAILOVER_RATE_LIMIT: return "LLM request rate limited.";
	case PC_FAILOVER_BILLING:
		return "LLM request failed: the provider account is out of credits or its "
		       "billing needs attention.";
	case PC_FAILOVER_AUTH:
	case PC_FAILOVER_AUTH_PERMANENT: return "LLM request unauthorized.";
	default: return "LLM request failed.";
	}
}

/* The message and status of a FailoverError built from the attempt. */
static void failover_error(const pc_run_outcome_t *o, pc_run_action_t *a, pc_failover_reason_t r,
			   int *status)
{
	if (o->error_text && *o->error_text)
		set_text(a->message, "%s", o->error_text);
	else
		set_text(a->message, "%s", default_failover_text(r));
	*status = reason_status(r);
	if (*status == 0 && (ci_contains(o->error_text, "timed out") ||
			     ci_contains(o->error_text, "timeout")))
		*status = pc_failover_reason_status(PC_FAILOVER_TIMEOUT);
}

static void same_model_retry_done(pc_run_state_t *s, pc_failover_reason_t r, bool timed_out)
{
	s->cand.last_retry_reason = pc_run_merge_retry_reason(s->cand.last_retry_reason, r, timed_out);
}

/* Returns true when it decided (retry or throw), false for continue_normal. */
static bool assistant_failover(pc_run_state_t *s, const pc_run_outcome_t *o, pc_run_action_t *a,
			       assistant_ctx_t *x)
{
	pc_run_candidate_state_t *c = &s->cand;
	pc_run_failover_input_t *fin = &x->fin;
	pc_failover_reason_t r = fin->reason;
	uint64_t overload_backoff = r == PC_FAILOVER_OVERLOADED ? s->cfg.overloaded_backoff_ms : 0;
	bool allow_idle = o->timed_out && o->idle_timed_out && !o->timed_out_during_compaction &&
			  !fin->fallback_configured && x->can_restart &&
			  c->same_model_idle_retries < PC_RUN_MAX_SAME_MODEL_IDLE_RETRIES;
	pc_run_failover_decision_t d;
	pc_run_failover_decide(fin, &d);
	a->reason = r;

	if (d.action == PC_FAILOVER_ACT_ROTATE_PROFILE) {
		if (r == PC_FAILOVER_OVERLOADED) {
			c->overload_rotations++;
			if (c->overload_rotations > s->cfg.overload_rotations && fin->fallback_configured) {
				mark_failed(s, o, a, x->profile_reason);
				set_text(a->message, "%s", MSG_OVERLOADED);
				a->own_message = true;
				pc_run_trace_add(s, PC_TRACE_FALLBACK_MODEL, PC_STAGE_ASSISTANT, r,
						 reason_status(r), o->error_code, o->duration_ms);
				c->same_model_rate_limit_retries = 0;
				throw_failover(s, a, r, reason_status(r), overload_backoff);
				return true;
			}
		}
		if (r == PC_FAILOVER_RATE_LIMIT) {
			if (pc_run_is_short_window_rate_limit(o->error_text, x->retry_after_ms) &&
			    c->rate_limit_rotations < s->cfg.rate_limit_rotations &&
			    c->same_model_rate_limit_retries < PC_RUN_MAX_SAME_MODEL_RATE_LIMIT_RETRIES) {
				uint64_t delay = pc_run_same_model_rate_limit_delay_ms(
					c->same_model_rate_limit_retries, x->retry_after_ms);
				c->same_model_rate_limit_retries++;
				same_model_retry_done(s, r, o->timed_out);
				pc_run_trace_add(s, PC_TRACE_SAME_MODEL_RATE_LIMIT, PC_STAGE_ASSISTANT, r,
						 reason_status(r), o->error_code, o->duration_ms);
				return retry(a, PC_RETRY_SAME_MODEL_RATE_LIMIT, delay), true;
			}
			c->rate_limit_rotations++;
			if (c->rate_limit_rotations > s->cfg.rate_limit_rotations &&
			    fin->fallback_configured) {
				mark_failed(s, o, a, x->profile_reason);
				set_text(a->message, "%s", MSG_RATE_LIMITED);
				a->own_message = true;
				pc_run_trace_add(s, PC_TRACE_FALLBACK_MODEL, PC_STAGE_ASSISTANT, r,
						 reason_status(r), o->error_code, o->duration_ms);
				c->same_model_rate_limit_retries = 0;
				throw_failover(s, a, r, reason_status(r), 0);
				return true;
			}
		}
		mark_failed(s, o, a, x->profile_reason);
		bool timeout = r == PC_FAILOVER_TIMEOUT || (r == PC_RUN_REASON_NONE && o->timed_out);
		uint32_t next;
		if (next_profile(s, o->now_ms, &next)) {
			pc_run_trace_add(s, timeout ? PC_TRACE_TIMEOUT : PC_TRACE_ROTATE_PROFILE,
					 PC_STAGE_ASSISTANT, r, reason_status(r), o->error_code,
					 o->duration_ms);
			enter_profile(s, next);
			c->same_model_rate_limit_retries = 0;
			same_model_retry_done(s, r, o->timed_out);
			return retry(a, PC_RETRY_ROTATE_PROFILE, overload_backoff), true;
		}
		if (allow_idle) {
			c->same_model_idle_retries++;
			c->same_model_rate_limit_retries = 0;
			same_model_retry_done(s, r, o->timed_out);
			pc_run_trace_add(s, PC_TRACE_TIMEOUT, PC_STAGE_ASSISTANT, r, reason_status(r),
					 o->error_code, o->duration_ms);
			return retry(a, PC_RETRY_SAME_MODEL_IDLE, 0), true;
		}
		fin->profile_rotated = true;
		pc_run_failover_decide(fin, &d);
	}
	c->same_model_rate_limit_retries = 0;

	if (d.action == PC_FAILOVER_ACT_FALLBACK_MODEL) {
		int status;
		mark_failed(s, o, a, x->profile_reason);
		failover_error(o, a, d.reason, &status);
		pc_run_trace_add(s,
				 d.reason == PC_FAILOVER_TIMEOUT ? PC_TRACE_TIMEOUT
								 : PC_TRACE_FALLBACK_MODEL,
				 PC_STAGE_ASSISTANT, d.reason, status, o->error_code, o->duration_ms);
		throw_failover(s, a, d.reason, status,
			       d.reason == PC_FAILOVER_OVERLOADED ? s->cfg.overloaded_backoff_ms : 0);
		return true;
	}
	if (d.action == PC_FAILOVER_ACT_SURFACE_ERROR) {
		if (allow_idle && !fin->aborted) {
			c->same_model_idle_retries++;
			same_model_retry_done(s, r, o->timed_out);
			pc_run_trace_add(s, PC_TRACE_TIMEOUT, PC_STAGE_ASSISTANT, r, reason_status(r),
					 o->error_code, o->duration_ms);
			return retry(a, PC_RETRY_SAME_MODEL_IDLE, 0), true;
		}
		if (!fin->aborted && !o->timed_out && fin->failover_failure) {
			int status;
			failover_error(o, a, r, &status);
			pc_run_trace_add(s, PC_TRACE_ERROR, PC_STAGE_ASSISTANT, r, status,
					 o->error_code, o->duration_ms);
			throw_failover(s, a, r, status, 0);
			return true;
		}
	}
	return false; /* continue_normal: the payload path reports the error */
}

/* ---- §1.7 the pipeline ---- */

static bool is_role_ordering(const char *text)
{
	return ci_contains(text, "incorrect role information") ||
	       ci_contains(text, "roles must alternate");
}

/* The silent-error reasons of step 13: no usable detail at all. */
static bool is_detail_free_reason(pc_failover_reason_t r)
{
	return r == PC_RUN_REASON_NONE || r == PC_FAILOVER_EMPTY_RESPONSE ||
	       r == PC_FAILOVER_NO_ERROR_DETAILS || r == PC_FAILOVER_UNCLASSIFIED ||
	       r == PC_FAILOVER_UNKNOWN;
}

/* Steps 1-3 bookkeeping, once per attempt. */
static void bookkeeping(pc_run_state_t *s, const pc_run_outcome_t *o)
{
	pc_usage_add(&s->usage, &o->usage);
	if (pc_usage_is_nonzero(&o->last_call))
		s->last_call_usage = o->last_call;
	else if (pc_usage_is_nonzero(&o->usage))
		s->last_call_usage = o->usage;
	pc_idle_breaker_input_t bin = {o->idle_timed_out, o->completed_progress};
	pc_idle_breaker_step(&s->breaker, &bin);
	s->auto_compactions += o->compaction_count;
	if (o->replay_unsafe || o->prompt_error == PC_PROMPT_ERR_COMPACTION ||
	    o->timed_out_during_compaction)
		s->replay_invalid = true;
	if (o->had_side_effects)
		s->had_side_effects = true;
	if (o->output_started)
		s->output_started = true;
	/* one runtime-auth refresh per auth error: an attempt without one re-arms it */
	if (!(o->has_failure && o->failure.reason == PC_FAILOVER_AUTH))
		s->cand.auth_refresh_pending = false;
}

/* Step 6's numerator: the latest call's prompt side (output excluded), from
 * the attempt, else the last call that reported usage. */
static int64_t prompt_side_tokens(const pc_run_state_t *s, const pc_run_outcome_t *o)
{
	if (o->prompt_tokens > 0)
		return o->prompt_tokens;
	return pc_usage_prompt_tokens(&s->last_call_usage);
}

static void use_mid_turn_prompt(pc_run_candidate_state_t *c)
{
	c->prompt_override = PC_RUN_PROMPT_MID_TURN;
	c->suppress_user_persist = true;
}

/* Step 10: the provider call failed (source prompt or setup). */
static int prompt_error(pc_run_state_t *s, const pc_run_outcome_t *o, pc_run_action_t *a)
{
	pc_run_candidate_state_t *c = &s->cand;
	pc_failover_reason_t r = o->has_failure ? o->failure.reason : PC_RUN_REASON_NONE;
	bool failover = o->has_failure && o->failure.failover;
	bool provider_started = o->prompt_error == PC_PROMPT_ERR_PROVIDER;
	a->reason = r;
	/* 10.3 runtime-auth refresh, once per auth error */
	if (r == PC_FAILOVER_AUTH && s->cfg.runtime_auth && !c->auth_refresh_pending) {
		c->auth_refresh_pending = true;
		return retry(a, PC_RETRY_AUTH_REFRESH, 0);
	}
	/* 10.4 / 10.5 the conversation itself is the problem: tell the user */
	if (is_role_ordering(o->error_text)) {
		set_text(a->message, "%s", MSG_ROLE_ORDERING);
		set_text(a->detail, "%s", o->error_text);
		return finish_error(s, a, PC_RUN_ERR_ROLE_ORDERING, PC_LIVENESS_BLOCKED);
	}
	if (o->image_too_large_mb > 0) {
		set_text(a->message,
			 "Image too large for the model (max %u MB). Please compress or resize the "
			 "image and try again.",
			 (unsigned)o->image_too_large_mb);
		set_text(a->detail, "%s", o->error_text ? o->error_text : "image too large");
		return finish_error(s, a, PC_RUN_ERR_IMAGE_SIZE, PC_LIVENESS_BLOCKED);
	}
	/* 10.6 */
	bool short_window = r == PC_FAILOVER_RATE_LIMIT &&
			    pc_run_is_short_window_rate_limit(o->error_text, o->failure.retry_after_ms);
	pc_failover_reason_t profile_reason = profile_failure_reason(r, provider_started, short_window);
	bool fallback = fallback_available(s);
	/* 10.7 maybeEscalateRateLimitProfileFallback */
	if (r == PC_FAILOVER_RATE_LIMIT) {
		c->rate_limit_rotations++;
		if (c->rate_limit_rotations > s->cfg.rate_limit_rotations && fallback) {
			mark_failed(s, o, a, profile_reason);
			set_text(a->message, "%s", MSG_RATE_LIMITED);
			a->own_message = true;
			pc_run_trace_add(s, PC_TRACE_FALLBACK_MODEL, PC_STAGE_PROMPT, r, reason_status(r),
					 o->error_code, o->duration_ms);
			return throw_failover(s, a, r, reason_status(r), 0);
		}
	}
	/* 10.8 */
	pc_run_failover_input_t fin = {
		.stage = PC_FAILOVER_STAGE_PROMPT,
		.reason = r,
		.failover_failure = failover,
		.fallback_configured = fallback,
		.allow_format_retry = o->allow_format_retry,
		.aborted = o->aborted,
		.timed_out = o->timed_out,
		.idle_timed_out = o->idle_timed_out,
		.timed_out_by_run_budget = o->timed_out_by_run_budget,
	};
	pc_run_failover_decision_t d;
	pc_run_failover_decide(&fin, &d);
	uint64_t overload_backoff = r == PC_FAILOVER_OVERLOADED ? s->cfg.overloaded_backoff_ms : 0;
	if (d.action == PC_FAILOVER_ACT_ROTATE_PROFILE) {
		uint32_t next;
		if (next_profile(s, o->now_ms, &next)) {
			mark_failed(s, o, a, profile_reason);
			pc_run_trace_add(s,
					 r == PC_FAILOVER_TIMEOUT ? PC_TRACE_TIMEOUT
								  : PC_TRACE_ROTATE_PROFILE,
					 PC_STAGE_PROMPT, r, reason_status(r), o->error_code,
					 o->duration_ms);
			enter_profile(s, next);
			same_model_retry_done(s, r, o->timed_out);
			return retry(a, PC_RETRY_ROTATE_PROFILE, overload_backoff);
		}
		fin.profile_rotated = true;
		pc_run_failover_decide(&fin, &d);
	}
	/* 10.9 */
	mark_failed(s, o, a, profile_reason);
	/* 10.10 */
	pc_think_level_t t;
	if (pc_run_pick_fallback_thinking(o->error_text, c->attempted_thinking, &t)) {
		c->think = t;
		return retry(a, PC_RETRY_THINKING_FALLBACK, 0);
	}
	/* 10.11 */
	if (d.action == PC_FAILOVER_ACT_FALLBACK_MODEL) {
		int status;
		failover_error(o, a, d.reason, &status);
		pc_run_trace_add(s,
				 d.reason == PC_FAILOVER_TIMEOUT ? PC_TRACE_TIMEOUT
								 : PC_TRACE_FALLBACK_MODEL,
				 PC_STAGE_PROMPT, d.reason, status, o->error_code, o->duration_ms);
		return throw_failover(s, a, d.reason, status, overload_backoff);
	}
	/* 10.12 surface_error */
	pc_run_trace_add(s, PC_TRACE_SURFACE_ERROR, PC_STAGE_PROMPT, r, reason_status(r),
			 o->error_code, o->duration_ms);
	a->status = reason_status(r);
	set_text(a->message, "%s", o->error_text && *o->error_text ? o->error_text : "Prompt failed");
	a->liveness = PC_LIVENESS_BLOCKED; /* §1.14, as for a thrown FailoverError */
	return fail(a, PC_RUN_ERR_PROMPT_FAILED);
}

static int decide_pipeline(pc_run_state_t *s, const pc_run_outcome_t *o, pc_run_action_t *a);

/* The trace entry a decision added carries the wait it chose before the
 * next attempt (§1.10 same-model steps, §1.18 overload backoff, §1.12
 * chain replays). */
static void record_delay(pc_run_state_t *s, uint32_t before, int rc, const pc_run_action_t *a)
{
	if (rc == 0 && a->delay_ms > 0 && s->trace_count > before &&
	    (a->next == PC_RUN_RETRY || a->next == PC_RUN_FALLBACK))
		s->trace[s->trace_count - 1].delay_ms = a->delay_ms;
}

int pc_run_decide(pc_run_state_t *s, const pc_run_outcome_t *o, pc_run_action_t *a)
{
	if (!s || !o || !a)
		return PC_EINVAL;
	uint32_t before = s->trace_count;
	int rc = decide_pipeline(s, o, a);
	record_delay(s, before, rc, a);
	return rc;
}

static int decide_pipeline(pc_run_state_t *s, const pc_run_outcome_t *o, pc_run_action_t *a)
{
	action_reset(a);
	pc_run_candidate_state_t *c = &s->cand;
	bool resumed = o->recovery.timeout_compaction != PC_RECOVERY_NOT_RUN ||
		       o->recovery.overflow_compaction != PC_RECOVERY_NOT_RUN ||
		       o->recovery.truncation != PC_RECOVERY_NOT_RUN;

	/* 1-3 bookkeeping first, so a cancelled attempt's usage is still billed */
	if (!resumed)
		bookkeeping(s, o);

	/* 0 a user abort ends the run, never failing over; so does the
	 * post-compaction guard's verdict (§1.16) */
	if (o->cancelled)
		return fail(a, PC_RUN_ERR_ABORTED);
	if (o->loop_guard_abort)
		return fail(a, PC_RUN_ERR_LOOP_PERSISTED);

	/* 2 idle-timeout cost breaker (§1.15) */
	if (pc_idle_breaker_tripped(&s->breaker)) {
		set_text(a->detail,
			 "Idle-timeout cost-runaway breaker tripped: %u consecutive idle timeouts "
			 "without completed model progress (cap=%u). Halting further attempts to "
			 "bound paid model calls. See issue #76293.",
			 (unsigned)s->breaker.consecutive, (unsigned)s->breaker.cap);
		return exhaust(s, a);
	}

	/* 3 */
	bool can_restart = !o->outbound_delivered && !o->approval_prompt_sent && !o->tool_error &&
			   o->tool_metas == 0 && o->assistant_texts == 0;
	bool aborted = o->aborted || (o->has_failure && o->failure.aborted);

	/* 4 preflight recovery handled inside the attempt */
	if (o->preflight_handled) {
		if (o->mid_turn)
			use_mid_turn_prompt(c);
		return retry(a, PC_RETRY_PREFLIGHT, 0);
	}

	/* 5 live model switch */
	if (o->live_switch_requested && can_restart)
		return fail(a, PC_RUN_ERR_LIVE_MODEL_SWITCH);

	/* 6 timeout-triggered compaction */
	if (o->recovery.timeout_compaction == PC_RECOVERY_DONE) {
		s->auto_compactions++;
		pc_loop_guard_arm(&s->guard);
		return retry(a, PC_RETRY_TIMEOUT_COMPACTED, 0);
	}
	/* the rule itself (65 % of the window, two per run) is the compaction
	 * trigger's, shared with every other entry to compaction */
	pc_compact_input_t ci = {
		.context_window = o->context_tokens > 0 ? (uint64_t)o->context_tokens : 0,
		.timed_out = o->timed_out,
		.timed_out_during_compaction = o->timed_out_during_compaction,
		.timed_out_during_tool_execution = o->timed_out_during_tool,
		.timed_out_by_run_budget = o->timed_out_by_run_budget,
		.prompt_side_tokens = (uint64_t)(prompt_side_tokens(s, o) > 0 ? prompt_side_tokens(s, o) : 0),
		.timeout_attempts = c->timeout_compactions,
	};
	pc_compact_decision_t cd = {0};
	if (o->recovery.timeout_compaction == PC_RECOVERY_NOT_RUN && !resumed && o->context_tokens > 0 &&
	    pc_compact_decide(&ci, &cd) == 0 && cd.trigger == PC_COMPACT_TRIGGER_TIMEOUT_RECOVERY) {
		c->timeout_compactions++; /* counted even if the compaction fails */
		a->next = PC_RUN_COMPACT;
		a->compaction = PC_COMPACTION_TIMEOUT_RECOVERY;
		return 0;
	}

	/* 7 context overflow (not after an abort) */
	bool overflow = !aborted && o->has_failure &&
			o->failure.reason == PC_FAILOVER_CONTEXT_OVERFLOW;
	if (overflow) {
		bool cf = o->compaction_failure_text;
		if (o->recovery.overflow_compaction == PC_RECOVERY_DONE) {
			s->auto_compactions++;
			pc_loop_guard_arm(&s->guard);
			if (o->mid_turn || o->user_turn_persisted)
				use_mid_turn_prompt(c);
			return retry(a, PC_RETRY_OVERFLOW_COMPACTED, 0);
		}
		if (o->recovery.truncation == PC_RECOVERY_DONE)
			return retry(a, PC_RETRY_TRUNCATED, 0);
		/* 7a the attempt compacted already: retry without a new compaction */
		if (!resumed && !cf && o->compaction_count > 0 &&
		    c->overflow_compactions < PC_RUN_MAX_OVERFLOW_COMPACTIONS) {
			c->overflow_compactions++;
			return retry(a, PC_RETRY_OVERFLOW_COMPACTED, 0);
		}
		/* 7b explicit compaction */
		if (!resumed && !cf && o->compaction_count == 0 &&
		    c->overflow_compactions < PC_RUN_MAX_OVERFLOW_COMPACTIONS) {
			c->overflow_compactions++;
			a->next = PC_RUN_COMPACT;
			a->compaction = PC_COMPACTION_OVERFLOW;
			return 0;
		}
		/* 7c truncate oversized tool results, once per run */
		if (o->recovery.truncation == PC_RECOVERY_NOT_RUN && !c->truncation_attempted &&
		    o->oversized_tool_results) {
			c->truncation_attempted = true;
			a->next = PC_RUN_TRUNCATE;
			return 0;
		}
		/* 7d give up */
		set_text(a->message, "%s", MSG_CONTEXT_OVERFLOW);
		set_text(a->detail, "%s", o->error_text ? o->error_text : "context overflow");
		a->reason = PC_FAILOVER_CONTEXT_OVERFLOW;
		return finish_error(s, a, cf ? PC_RUN_ERR_COMPACTION_FAILURE : PC_RUN_ERR_CONTEXT_OVERFLOW,
				    PC_LIVENESS_BLOCKED);
	}

	/* 8 hook block */
	if (o->prompt_error == PC_PROMPT_ERR_HOOK_BLOCK && !aborted) {
		set_text(a->message, "%s", o->error_text ? o->error_text : "Blocked by a hook.");
		set_text(a->detail, "%s", a->message);
		return finish_error(s, a, PC_RUN_ERR_HOOK_BLOCK, PC_LIVENESS_BLOCKED);
	}

	/* 10 prompt error (9, the Codex app-server recovery, is out of scope) */
	if ((o->prompt_error == PC_PROMPT_ERR_PROVIDER || o->prompt_error == PC_PROMPT_ERR_SETUP) &&
	    !aborted)
		return prompt_error(s, o, a);

	/* 11 thinking fallback for an error carried in the assistant message */
	pc_think_level_t t;
	if (o->assistant_stop_error && !aborted &&
	    pc_run_pick_fallback_thinking(o->error_text, c->attempted_thinking, &t)) {
		c->think = t;
		return retry(a, PC_RETRY_THINKING_FALLBACK, 0);
	}

	/* 12 classify the assistant failure */
	bool assistant_failed = o->has_failure && o->prompt_error == PC_PROMPT_ERR_NONE;
	pc_failover_reason_t r = assistant_failed ? o->failure.reason : PC_RUN_REASON_NONE;
	bool failover = assistant_failed && o->failure.failover;
	bool provider_started = o->has_assistant || o->idle_timed_out || o->timed_out;
	bool timeout_failure = o->idle_timed_out ||
			       (o->timed_out && !o->timed_out_during_compaction &&
				!o->timed_out_during_tool);

	/* 13 silent error: nothing visible, no usable detail */
	bool generic_wrapper = r == PC_FAILOVER_TIMEOUT && o->reasoning_only &&
			       ci_contains(o->error_text, "An unknown error occurred");
	if (o->assistant_stop_error && !o->visible_text &&
	    (o->output_tokens == 0 || o->reasoning_only) &&
	    (is_detail_free_reason(r) || generic_wrapper) && !o->image_dimension_error &&
	    !aborted && o->prompt_error == PC_PROMPT_ERR_NONE && !o->timed_out &&
	    !o->replay_unsafe && !o->terminal_state &&
	    c->empty_error_retries < PC_RUN_MAX_EMPTY_ERROR_RETRIES) {
		c->empty_error_retries++;
		return retry(a, PC_RETRY_EMPTY_ERROR, 0);
	}

	/* 14 runtime-auth refresh, once per auth error */
	if (r == PC_FAILOVER_AUTH && s->cfg.runtime_auth && !c->auth_refresh_pending) {
		c->auth_refresh_pending = true;
		return retry(a, PC_RETRY_AUTH_REFRESH, 0);
	}

	/* 16 assistant failover (15, the image-dimension log line, is the actor's) */
	pc_failover_reason_t profile_r = r;
	if (profile_r == PC_RUN_REASON_NONE && timeout_failure)
		profile_r = PC_FAILOVER_TIMEOUT;
	bool short_window = r == PC_FAILOVER_RATE_LIMIT &&
			    pc_run_is_short_window_rate_limit(o->error_text, o->failure.retry_after_ms);
	assistant_ctx_t x = {
		.fin = {
			.stage = PC_FAILOVER_STAGE_ASSISTANT,
			.reason = r,
			.failover_failure = failover,
			.fallback_configured = fallback_available(s),
			.allow_format_retry = o->allow_format_retry,
			.aborted = aborted,
			.timed_out = o->timed_out,
			.idle_timed_out = o->idle_timed_out,
			.timed_out_during_compaction = o->timed_out_during_compaction,
			.timed_out_during_tool = o->timed_out_during_tool,
			.timed_out_by_run_budget = o->timed_out_by_run_budget,
		},
		.profile_reason = profile_failure_reason(profile_r, provider_started, short_window),
		.can_restart = can_restart,
		.retry_after_ms = assistant_failed ? o->failure.retry_after_ms : 0,
	};
	if (assistant_failover(s, o, a, &x))
		return 0;
	a->reason = PC_RUN_REASON_NONE;

	/* 18 the attempt timed out in the prompt phase */
	if (o->timed_out && !o->timed_out_during_compaction && !o->timed_out_during_tool &&
	    !o->recovered_final_assistant && !o->messaging_delivered) {
		a->idle_timeout = o->idle_timed_out;
		set_text(a->message, "%s", o->idle_timed_out ? MSG_IDLE_TIMEOUT : MSG_RUN_TIMEOUT);
		set_text(a->detail, "%s", a->message);
		return finish_error(s, a, PC_RUN_ERR_TIMEOUT, outcome_liveness(o, false));
	}

	/* 21-23 non-visible turn retries, only for a clean, side-effect-free turn */
	bool clean = !aborted && !o->timed_out && o->prompt_error == PC_PROMPT_ERR_NONE &&
		     !o->pending_work && !o->client_tool_calls && !o->yielded;
	bool nonvisible = clean && o->nonvisible_retry_eligible && !o->visible_text;
	if (nonvisible && o->reasoning_only &&
	    c->reasoning_only_retries < PC_RUN_MAX_REASONING_ONLY_RETRIES) {
		c->reasoning_only_retries++;
		c->instructions[PC_RUN_INSTR_REASONING_ONLY] = true;
		return retry(a, PC_RETRY_REASONING_ONLY, 0);
	}
	if (clean && o->nothing_returned &&
	    c->missing_assistant_retries < PC_RUN_MAX_MISSING_ASSISTANT_RETRIES) {
		c->missing_assistant_retries++;
		return retry(a, PC_RETRY_MISSING_ASSISTANT, 0);
	}
	if (nonvisible && !o->reasoning_only && o->empty_response &&
	    c->empty_response_retries < PC_RUN_MAX_EMPTY_RESPONSE_RETRIES) {
		c->empty_response_retries++;
		c->instructions[PC_RUN_INSTR_EMPTY_RESPONSE] = true;
		return retry(a, PC_RETRY_EMPTY_RESPONSE, 0);
	}

	/* 25 compaction continuation */
	if (o->compaction_count > 0 && o->payload_count == 0 && !o->pending_work &&
	    !o->client_tool_calls && !o->yielded &&
	    c->compaction_continuations < PC_RUN_MAX_COMPACTION_CONTINUATIONS) {
		c->compaction_continuations++;
		c->instructions[PC_RUN_INSTR_COMPACTION_CONTINUATION] = true;
		pc_loop_guard_arm(&s->guard);
		return retry(a, PC_RETRY_COMPACTION_CONTINUATION, 0);
	}
	c->instructions[PC_RUN_INSTR_COMPACTION_CONTINUATION] = false;

	/* 26 reasoning-only retries exhausted, 27 incomplete turn */
	if ((nonvisible && o->reasoning_only) || o->incomplete_turn) {
		if (!o->incomplete_turn)
			mark_failed(s, o, a, PC_FAILOVER_EMPTY_RESPONSE);
		set_text(a->message, "%s", s->had_side_effects ? MSG_INCOMPLETE_SIDE_EFFECTS : MSG_INCOMPLETE);
		set_text(a->detail, "%s", MSG_INCOMPLETE_DETAIL);
		s->liveness = PC_LIVENESS_ABANDONED;
		return finish_error(s, a, PC_RUN_ERR_INCOMPLETE_TURN, PC_LIVENESS_ABANDONED);
	}

	/* 17 a turn that ended in a provider error it did not fail over (an
	 * unclassified one, once the silent retries of step 13 are spent)
	 * still answers with that error: buildEmbeddedRunPayloads turns the
	 * assistant's error into an error payload, and the run is blocked
	 * (§1.14 rule 4). It must not end ok with nothing to show. */
	if (o->assistant_stop_error && o->has_failure && o->payload_count == 0 && !o->silent &&
	    o->error_text && *o->error_text) {
		set_text(a->message, "%s", o->error_text);
		a->status = o->failure.status;
		a->liveness = PC_LIVENESS_BLOCKED;
		return fail(a, PC_RUN_ERR_PROMPT_FAILED);
	}

	/* 28 before_agent_finalize revision */
	if (o->finalize_revision_requested && !aborted && !o->assistant_stop_error &&
	    o->prompt_error == PC_PROMPT_ERR_NONE && !o->timed_out && !o->client_tool_calls &&
	    !o->yielded && !o->silent && c->finalize_revisions < PC_RUN_MAX_FINALIZE_REVISIONS) {
		c->finalize_revisions++;
		c->prompt_override = PC_RUN_PROMPT_FINALIZE_REVISION;
		c->suppress_user_persist = true;
		for (int i = 0; i < PC_RUN_INSTR_COUNT; i++)
			c->instructions[i] = false;
		return retry(a, PC_RETRY_FINALIZE_REVISION, 0);
	}

	/* 29 success */
	a->next = PC_RUN_FINISH_OK;
	a->mark_profile_success = true;
	a->silent = o->silent;
	a->liveness = o->yielded ? PC_LIVENESS_PAUSED : outcome_liveness(o, false);
	a->replay_invalid = s->replay_invalid;
	s->liveness = a->liveness;
	pc_run_trace_add(s, PC_TRACE_SUCCESS, PC_STAGE_ASSISTANT, PC_RUN_REASON_NONE, 0, NULL,
			 o->duration_ms);
	return 0;
}
