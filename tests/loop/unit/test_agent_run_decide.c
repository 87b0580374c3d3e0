/*
 * Layer 1 decisions (agents/run/run_decide.c): every branch of the §1.7
 * pipeline on its own and in order of precedence, every retry counter up to
 * its cap and one past it, rotation before fallback, retry-limit exhaustion
 * with and without a further model, user aborts that never fail over, the
 * §1.9 tables, and the backoff / cooldown arithmetic of §1.10-§1.18.
 */
#include <criterion/criterion.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agents/run/run_decide.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#define ASSERT_NO_LEAKS() cr_assert_eq(__lsan_do_recoverable_leak_check(), 0, "LeakSanitizer found leaks")
#else
#define ASSERT_NO_LEAKS() ((void)0)
#endif

#define NOW ((uint64_t)1700000000000ull)


/* A state from mkstate (or calloc and pc_run_state_init), with its trace. */
static void freestate(pc_run_state_t *s)
{
	pc_run_state_fini(s);
	free(s);
}
static pc_run_state_t *mkstate(uint32_t candidates, uint32_t profiles)
{
	pc_run_config_t cfg;
	pc_run_config_defaults(&cfg);
	cfg.candidate_count = candidates;
	for (uint32_t i = 0; i < candidates; i++)
		cfg.profile_counts[i] = profiles;
	pc_run_state_t *s = calloc(1, sizeof(*s));
	cr_assert_not_null(s);
	cr_assert_eq(pc_run_state_init(s, &cfg), 0);
	return s;
}

static pc_run_state_t *mkstate_cfg(const pc_run_config_t *cfg)
{
	pc_run_state_t *s = calloc(1, sizeof(*s));
	cr_assert_not_null(s);
	cr_assert_eq(pc_run_state_init(s, cfg), 0);
	return s;
}

/* A clean successful attempt. */
static pc_run_outcome_t good(void)
{
	pc_run_outcome_t o;
	memset(&o, 0, sizeof(o));
	o.now_ms = NOW;
	o.duration_ms = 1234;
	o.has_assistant = true;
	o.visible_text = true;
	o.completed_progress = true;
	o.payload_count = 1;
	o.assistant_texts = 0;
	o.context_tokens = 100000;
	o.prompt_tokens = 1000;
	o.usage = (pc_usage_t){.input = 10, .output = 5, .total = 15};
	return o;
}

static pc_failover_result_t failure(pc_failover_reason_t r)
{
	pc_failover_result_t f;
	memset(&f, 0, sizeof(f));
	f.reason = r;
	f.status = pc_failover_reason_status(r);
	f.failover = r != PC_FAILOVER_CONTEXT_OVERFLOW && r != PC_FAILOVER_UNCLASSIFIED &&
		     r != PC_FAILOVER_UNKNOWN;
	f.compact = r == PC_FAILOVER_CONTEXT_OVERFLOW;
	f.detail = "test";
	return f;
}

/* An assistant message that ended with stopReason error, reason r. */
static pc_run_outcome_t assistant_error(pc_failover_reason_t r, const char *text)
{
	pc_run_outcome_t o = good();
	o.visible_text = false;
	o.completed_progress = false;
	o.payload_count = 0;
	o.assistant_stop_error = true;
	o.output_tokens = 3;
	o.has_failure = true;
	o.failure = failure(r);
	o.error_text = text;
	return o;
}

/* The provider call threw (source "prompt"). */
static pc_run_outcome_t prompt_failure(pc_failover_reason_t r, const char *text)
{
	pc_run_outcome_t o = good();
	o.has_assistant = false;
	o.visible_text = false;
	o.completed_progress = false;
	o.payload_count = 0;
	o.prompt_error = PC_PROMPT_ERR_PROVIDER;
	o.has_failure = true;
	o.failure = failure(r);
	o.error_text = text;
	return o;
}

static pc_run_action_t decide(pc_run_state_t *s, const pc_run_outcome_t *o)
{
	pc_run_action_t a;
	memset(&a, 0xA5, sizeof(a)); /* every field must be written */
	cr_assert_eq(pc_run_decide(s, o, &a), 0);
	return a;
}

static pc_run_action_t begin(pc_run_state_t *s)
{
	pc_run_action_t a;
	memset(&a, 0xA5, sizeof(a));
	cr_assert_eq(pc_run_begin_iteration(s, &a), 0);
	return a;
}

/* ---- every branch of §1.7, one at a time, in the spec's order ---- */

typedef void (*mutate_fn)(pc_run_state_t *s, pc_run_outcome_t *o);

static void m_cancel(pc_run_state_t *s, pc_run_outcome_t *o) { (void)s; o->cancelled = true; }
static void m_guard(pc_run_state_t *s, pc_run_outcome_t *o) { (void)s; o->loop_guard_abort = true; }
static void m_breaker(pc_run_state_t *s, pc_run_outcome_t *o)
{
	s->breaker.consecutive = PC_IDLE_BREAKER_DEFAULT_CAP - 1;
	o->idle_timed_out = true;
	o->completed_progress = false;
}
static void m_preflight(pc_run_state_t *s, pc_run_outcome_t *o) { (void)s; o->preflight_handled = true; }
static void m_live(pc_run_state_t *s, pc_run_outcome_t *o) { (void)s; o->live_switch_requested = true; }
static void m_timeout_compact(pc_run_state_t *s, pc_run_outcome_t *o)
{
	(void)s;
	o->timed_out = true;
	o->prompt_tokens = 70000; /* 70 % > 65 % */
}
static void m_overflow_in_attempt(pc_run_state_t *s, pc_run_outcome_t *o)
{
	(void)s;
	o->has_failure = true;
	o->failure = failure(PC_FAILOVER_CONTEXT_OVERFLOW);
	o->compaction_count = 1;
}
static void m_overflow(pc_run_state_t *s, pc_run_outcome_t *o)
{
	(void)s;
	o->has_failure = true;
	o->failure = failure(PC_FAILOVER_CONTEXT_OVERFLOW);
}
static void m_overflow_truncate(pc_run_state_t *s, pc_run_outcome_t *o)
{
	m_overflow(s, o);
	o->compaction_failure_text = true;
	o->oversized_tool_results = true;
}
static void m_overflow_cf(pc_run_state_t *s, pc_run_outcome_t *o)
{
	m_overflow(s, o);
	o->compaction_failure_text = true;
}
static void m_overflow_exhausted(pc_run_state_t *s, pc_run_outcome_t *o)
{
	m_overflow(s, o);
	s->cand.overflow_compactions = PC_RUN_MAX_OVERFLOW_COMPACTIONS;
}
static void m_hook(pc_run_state_t *s, pc_run_outcome_t *o)
{
	(void)s;
	o->prompt_error = PC_PROMPT_ERR_HOOK_BLOCK;
	o->error_text = "blocked by policy";
}
static void m_prompt_auth(pc_run_state_t *s, pc_run_outcome_t *o)
{
	s->cfg.runtime_auth = true;
	*o = prompt_failure(PC_FAILOVER_AUTH, "401 invalid token");
}
static void m_prompt_role(pc_run_state_t *s, pc_run_outcome_t *o)
{
	(void)s;
	*o = prompt_failure(PC_FAILOVER_FORMAT, "400 roles must alternate between user and assistant");
}
static void m_prompt_image(pc_run_state_t *s, pc_run_outcome_t *o)
{
	(void)s;
	*o = prompt_failure(PC_FAILOVER_FORMAT, "image exceeds 5 MB maximum");
	o->image_too_large_mb = 5;
}
static void m_prompt_rotate(pc_run_state_t *s, pc_run_outcome_t *o)
{
	(void)s;
	*o = prompt_failure(PC_FAILOVER_BILLING, "insufficient credits");
}
static void m_prompt_think(pc_run_state_t *s, pc_run_outcome_t *o)
{
	(void)s;
	*o = prompt_failure(PC_FAILOVER_FORMAT, "thinking level \"high\" is not supported for this model");
}
static void m_prompt_fallback(pc_run_state_t *s, pc_run_outcome_t *o)
{
	(void)s;
	*o = prompt_failure(PC_FAILOVER_TIMEOUT, "connection timed out");
}
static void m_prompt_surface(pc_run_state_t *s, pc_run_outcome_t *o)
{
	(void)s;
	*o = prompt_failure(PC_FAILOVER_UNCLASSIFIED, "something odd");
}
static void m_assistant_think(pc_run_state_t *s, pc_run_outcome_t *o)
{
	(void)s;
	*o = assistant_error(PC_FAILOVER_FORMAT,
			     "Unsupported value: reasoning effort. Supported values are: 'low', 'medium'.");
}
static void m_silent_error(pc_run_state_t *s, pc_run_outcome_t *o)
{
	(void)s;
	*o = assistant_error(PC_FAILOVER_EMPTY_RESPONSE, NULL);
	o->output_tokens = 0;
	o->has_failure = false;
}
static void m_assistant_auth(pc_run_state_t *s, pc_run_outcome_t *o)
{
	s->cfg.runtime_auth = true;
	*o = assistant_error(PC_FAILOVER_AUTH, "401 unauthorized");
}
static void m_assistant_rotate(pc_run_state_t *s, pc_run_outcome_t *o)
{
	(void)s;
	*o = assistant_error(PC_FAILOVER_SERVER_ERROR, "stop reason: error");
}
static void m_assistant_fallback(pc_run_state_t *s, pc_run_outcome_t *o)
{
	s->cand.profile_count = 1;
	*o = assistant_error(PC_FAILOVER_SERVER_ERROR, "stop reason: error");
}
static void m_timeout_result(pc_run_state_t *s, pc_run_outcome_t *o)
{
	s->cfg.candidate_count = 1; /* nothing to fall back to */
	s->cand.profile_count = 1;
	o->timed_out = true;
	o->payload_count = 0;
	o->visible_text = false;
}
static void nonvisible(pc_run_outcome_t *o)
{
	o->visible_text = false;
	o->payload_count = 0;
	o->completed_progress = false;
	o->nonvisible_retry_eligible = true;
}
static void m_reasoning_only(pc_run_state_t *s, pc_run_outcome_t *o)
{
	(void)s;
	nonvisible(o);
	o->reasoning_only = true;
}
static void m_missing(pc_run_state_t *s, pc_run_outcome_t *o)
{
	(void)s;
	nonvisible(o);
	o->nonvisible_retry_eligible = false;
	o->has_assistant = false;
	o->nothing_returned = true;
}
static void m_empty(pc_run_state_t *s, pc_run_outcome_t *o)
{
	(void)s;
	nonvisible(o);
	o->empty_response = true;
}
static void m_continuation(pc_run_state_t *s, pc_run_outcome_t *o)
{
	(void)s;
	o->compaction_count = 1;
	o->payload_count = 0;
}
static void m_reasoning_exhausted(pc_run_state_t *s, pc_run_outcome_t *o)
{
	m_reasoning_only(s, o);
	s->cand.reasoning_only_retries = PC_RUN_MAX_REASONING_ONLY_RETRIES;
}
static void m_incomplete(pc_run_state_t *s, pc_run_outcome_t *o) { (void)s; o->incomplete_turn = true; }
static void m_finalize(pc_run_state_t *s, pc_run_outcome_t *o) { (void)s; o->finalize_revision_requested = true; }
static void m_success(pc_run_state_t *s, pc_run_outcome_t *o) { (void)s; (void)o; }

typedef struct branch {
	const char *name;
	mutate_fn mutate;
	pc_run_next_t next;
	int kind; /* retry kind, error kind or compaction, by `next` */
} branch_t;

static const branch_t branches[] = {
	{"0 cancelled", m_cancel, PC_RUN_FAIL, PC_RUN_ERR_ABORTED},
	{"0 loop guard", m_guard, PC_RUN_FAIL, PC_RUN_ERR_LOOP_PERSISTED},
	{"2 breaker", m_breaker, PC_RUN_FINISH_ERROR, PC_RUN_ERR_RETRY_LIMIT},
	{"4 preflight", m_preflight, PC_RUN_RETRY, PC_RETRY_PREFLIGHT},
	{"5 live switch", m_live, PC_RUN_FAIL, PC_RUN_ERR_LIVE_MODEL_SWITCH},
	{"6 timeout compaction", m_timeout_compact, PC_RUN_COMPACT, PC_COMPACTION_TIMEOUT_RECOVERY},
	{"7a overflow, compacted in attempt", m_overflow_in_attempt, PC_RUN_RETRY, PC_RETRY_OVERFLOW_COMPACTED},
	{"7b overflow compaction", m_overflow, PC_RUN_COMPACT, PC_COMPACTION_OVERFLOW},
	{"7c truncation", m_overflow_truncate, PC_RUN_TRUNCATE, 0},
	{"7d compaction failure", m_overflow_cf, PC_RUN_FINISH_ERROR, PC_RUN_ERR_COMPACTION_FAILURE},
	{"7d overflow", m_overflow_exhausted, PC_RUN_FINISH_ERROR, PC_RUN_ERR_CONTEXT_OVERFLOW},
	{"8 hook block", m_hook, PC_RUN_FINISH_ERROR, PC_RUN_ERR_HOOK_BLOCK},
	{"10.3 auth refresh", m_prompt_auth, PC_RUN_RETRY, PC_RETRY_AUTH_REFRESH},
	{"10.4 role ordering", m_prompt_role, PC_RUN_FINISH_ERROR, PC_RUN_ERR_ROLE_ORDERING},
	{"10.5 image size", m_prompt_image, PC_RUN_FINISH_ERROR, PC_RUN_ERR_IMAGE_SIZE},
	{"10.8 rotate", m_prompt_rotate, PC_RUN_RETRY, PC_RETRY_ROTATE_PROFILE},
	{"10.10 thinking", m_prompt_think, PC_RUN_RETRY, PC_RETRY_THINKING_FALLBACK},
	{"10.11 fallback", m_prompt_fallback, PC_RUN_FALLBACK, 0},
	{"10.12 surface", m_prompt_surface, PC_RUN_FAIL, PC_RUN_ERR_PROMPT_FAILED},
	{"11 assistant thinking", m_assistant_think, PC_RUN_RETRY, PC_RETRY_THINKING_FALLBACK},
	{"13 silent error", m_silent_error, PC_RUN_RETRY, PC_RETRY_EMPTY_ERROR},
	{"14 assistant auth refresh", m_assistant_auth, PC_RUN_RETRY, PC_RETRY_AUTH_REFRESH},
	{"16 assistant rotate", m_assistant_rotate, PC_RUN_RETRY, PC_RETRY_ROTATE_PROFILE},
	{"16 assistant fallback", m_assistant_fallback, PC_RUN_FALLBACK, 0},
	{"18 timeout result", m_timeout_result, PC_RUN_FINISH_ERROR, PC_RUN_ERR_TIMEOUT},
	{"21 reasoning only", m_reasoning_only, PC_RUN_RETRY, PC_RETRY_REASONING_ONLY},
	{"22 missing assistant", m_missing, PC_RUN_RETRY, PC_RETRY_MISSING_ASSISTANT},
	{"23 empty response", m_empty, PC_RUN_RETRY, PC_RETRY_EMPTY_RESPONSE},
	{"25 compaction continuation", m_continuation, PC_RUN_RETRY, PC_RETRY_COMPACTION_CONTINUATION},
	{"26 reasoning only exhausted", m_reasoning_exhausted, PC_RUN_FINISH_ERROR, PC_RUN_ERR_INCOMPLETE_TURN},
	{"27 incomplete turn", m_incomplete, PC_RUN_FINISH_ERROR, PC_RUN_ERR_INCOMPLETE_TURN},
	{"28 finalize revision", m_finalize, PC_RUN_RETRY, PC_RETRY_FINALIZE_REVISION},
	{"29 success", m_success, PC_RUN_FINISH_OK, 0},
};

static int action_kind(const pc_run_action_t *a)
{
	switch (a->next) {
	case PC_RUN_RETRY: return (int)a->retry;
	case PC_RUN_COMPACT: return (int)a->compaction;
	case PC_RUN_FINISH_ERROR:
	case PC_RUN_FAIL: return (int)a->error;
	default: return 0;
	}
}

static void check_branch(const branch_t *b, const pc_run_action_t *a)
{
	cr_assert_eq(a->next, b->next, "%s: next %d, want %d", b->name, (int)a->next, (int)b->next);
	cr_assert_eq(action_kind(a), b->kind, "%s: kind %d, want %d", b->name, action_kind(a), b->kind);
}

Test(run_decide, every_branch_alone)
{
	for (size_t i = 0; i < sizeof(branches) / sizeof(branches[0]); i++) {
		pc_run_state_t *s = mkstate(2, 2);
		pc_run_outcome_t o = good();
		branches[i].mutate(s, &o);
		pc_run_action_t a = decide(s, &o);
		check_branch(&branches[i], &a);
		freestate(s);
	}
}

/* Order matters: with the conditions of every later branch also present,
 * the earlier branch still wins. Branches whose conditions replace the
 * whole outcome (prompt/assistant errors) start the chain afresh. */
Test(run_decide, earlier_branch_wins)
{
	static const struct {
		size_t first, second; /* indices into branches[], first < second */
	} pairs[] = {
		{0, 3},  {0, 9},  {1, 3},  {2, 3},  {2, 11}, {3, 4},  {3, 7},  {4, 5},
		{5, 7},  {7, 11}, {9, 11}, {11, 12}, {25, 26}, {26, 27}, {27, 28}, {28, 31},
		{29, 31}, {30, 31}, {31, 32}, {24, 25}, {12, 15}, {13, 15},
	};
	for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++) {
		const branch_t *first = &branches[pairs[i].first];
		const branch_t *second = &branches[pairs[i].second];
		pc_run_state_t *s = mkstate(2, 2);
		pc_run_outcome_t o = good();
		second->mutate(s, &o);
		first->mutate(s, &o);
		pc_run_action_t a = decide(s, &o);
		cr_assert_eq(a.next, first->next, "%s over %s: next %d, want %d", first->name,
			     second->name, (int)a.next, (int)first->next);
		cr_assert_eq(action_kind(&a), first->kind, "%s over %s: kind %d", first->name,
			     second->name, action_kind(&a));
		freestate(s);
	}
}

Test(run_decide, null_arguments)
{
	pc_run_state_t *s = mkstate(1, 1);
	pc_run_outcome_t o = good();
	pc_run_action_t a;
	cr_assert_eq(pc_run_decide(NULL, &o, &a), PC_EINVAL);
	cr_assert_eq(pc_run_decide(s, NULL, &a), PC_EINVAL);
	cr_assert_eq(pc_run_decide(s, &o, NULL), PC_EINVAL);
	cr_assert_eq(pc_run_begin_iteration(NULL, &a), PC_EINVAL);
	cr_assert_eq(pc_run_begin_iteration(s, NULL), PC_EINVAL);
	pc_run_config_t cfg;
	pc_run_config_defaults(&cfg);
	cfg.candidate_count = 0;
	cr_assert_eq(pc_run_state_init(s, &cfg), PC_EINVAL);
	cfg.candidate_count = PC_RUN_MAX_CANDIDATES + 1;
	cr_assert_eq(pc_run_state_init(s, &cfg), PC_EINVAL);
	cfg.candidate_count = 1;
	cfg.profile_counts[0] = PC_RUN_MAX_PROFILES + 1;
	cr_assert_eq(pc_run_state_init(s, &cfg), PC_EINVAL);
	freestate(s);
}

/* ---- success details ---- */

Test(run_decide, success_bookkeeping_and_trace)
{
	pc_run_state_t *s = mkstate(1, 1);
	pc_run_action_t a = begin(s);
	cr_assert_eq(a.next, PC_RUN_DISPATCH);
	pc_run_outcome_t o = good();
	a = decide(s, &o);
	cr_assert_eq(a.next, PC_RUN_FINISH_OK);
	cr_assert(a.mark_profile_success);
	cr_assert_eq(a.liveness, PC_LIVENESS_WORKING);
	cr_assert_eq(s->usage.total, 15);
	cr_assert_eq(s->trace_count, 1u);
	cr_assert_eq(s->trace[0].result, PC_TRACE_SUCCESS);
	cr_assert_eq(s->trace[0].duration_ms, 1234);
	/* a yielded turn is paused, a silent one says so */
	o.yielded = true;
	o.silent = true;
	a = decide(s, &o);
	cr_assert_eq(a.liveness, PC_LIVENESS_PAUSED);
	cr_assert(a.silent);
	cr_assert_eq(s->usage.total, 30, "usage accumulates over attempts");
	freestate(s);
}

/* The run's latest call is the attempt's latest call, not its sum; an
 * attempt without usage leaves it as it was. */
Test(run_decide, last_call_usage_is_the_latest_call)
{
	pc_run_state_t *s = mkstate(1, 1);
	pc_run_outcome_t o = good();
	o.usage = (pc_usage_t){.input = 30, .output = 8, .total = 38};
	o.last_call = (pc_usage_t){.input = 20, .output = 3, .total = 23};
	decide(s, &o);
	cr_assert_eq(s->usage.total, 38);
	cr_assert_eq(s->last_call_usage.input, 20);
	cr_assert_eq(s->last_call_usage.total, 23);
	o.usage = (pc_usage_t){0};
	o.last_call = (pc_usage_t){0};
	decide(s, &o);
	cr_assert_eq(s->last_call_usage.total, 23);
	freestate(s);
}

Test(run_decide, cancelled_attempt_usage_still_counted)
{
	pc_run_state_t *s = mkstate(1, 1);
	pc_run_outcome_t o = good();
	o.cancelled = true;
	pc_run_action_t a = decide(s, &o);
	cr_assert_eq(a.error, PC_RUN_ERR_ABORTED);
	cr_assert_eq(s->usage.total, 15);
	freestate(s);
}

/* ---- a user abort never fails over ---- */

Test(run_decide, abort_never_fails_over)
{
	for (int r = 0; r < PC_FAILOVER_REASON_COUNT; r++) {
		for (int how = 0; how < 4; how++) {
			pc_run_state_t *s = mkstate(3, 3);
			pc_run_outcome_t o = how < 2 ? assistant_error((pc_failover_reason_t)r, "x")
						     : prompt_failure((pc_failover_reason_t)r, "x");
			if (how % 2 == 0)
				o.cancelled = true;
			else
				o.aborted = true;
			o.timed_out = r == PC_FAILOVER_TIMEOUT;
			o.idle_timed_out = r == PC_FAILOVER_TIMEOUT;
			pc_run_action_t a = decide(s, &o);
			cr_assert_neq(a.next, PC_RUN_FALLBACK, "reason %s how %d", pc_failover_reason_name((pc_failover_reason_t)r), how);
			cr_assert_neq(a.retry, PC_RETRY_ROTATE_PROFILE, "reason %s how %d", pc_failover_reason_name((pc_failover_reason_t)r), how);
			cr_assert_eq(s->cand.index, 0u);
			cr_assert_eq(s->cand.profile, 0u);
			if (how % 2 == 0)
				cr_assert_eq(a.error, PC_RUN_ERR_ABORTED);
			freestate(s);
		}
	}
	/* the classifier's own abort verdict counts too */
	pc_run_state_t *s = mkstate(3, 3);
	pc_run_outcome_t o = assistant_error(PC_FAILOVER_UNKNOWN, "aborted");
	o.failure.aborted = true;
	pc_run_action_t a = decide(s, &o);
	cr_assert_neq(a.next, PC_RUN_FALLBACK);
	cr_assert_neq(a.retry, PC_RETRY_ROTATE_PROFILE);
	freestate(s);
}

/* ---- caps: every retry kind up to its cap and one past ---- */

Test(run_decide, overflow_compactions_capped)
{
	pc_run_state_t *s = mkstate(1, 1);
	pc_run_outcome_t o = good();
	m_overflow(s, &o);
	for (int i = 0; i < PC_RUN_MAX_OVERFLOW_COMPACTIONS; i++) {
		pc_run_action_t a = decide(s, &o);
		cr_assert_eq(a.next, PC_RUN_COMPACT, "compaction %d", i + 1);
		/* the actor compacts, then decides again with the result */
		pc_run_outcome_t r = o;
		r.recovery.overflow_compaction = PC_RECOVERY_DONE;
		a = decide(s, &r);
		cr_assert_eq(a.retry, PC_RETRY_OVERFLOW_COMPACTED);
		cr_assert(pc_loop_guard_armed(&s->guard), "compaction arms the guard");
	}
	cr_assert_eq(s->auto_compactions, (uint32_t)PC_RUN_MAX_OVERFLOW_COMPACTIONS);
	pc_run_action_t a = decide(s, &o);
	cr_assert_eq(a.next, PC_RUN_FINISH_ERROR);
	cr_assert_eq(a.error, PC_RUN_ERR_CONTEXT_OVERFLOW);
	cr_assert_eq(a.liveness, PC_LIVENESS_BLOCKED);
	cr_assert(strstr(a.message, "Context overflow") != NULL);
	freestate(s);
}

Test(run_decide, overflow_compaction_failed_then_truncation_once)
{
	pc_run_state_t *s = mkstate(1, 1);
	pc_run_outcome_t o = good();
	m_overflow(s, &o);
	o.oversized_tool_results = true;
	cr_assert_eq(decide(s, &o).next, PC_RUN_COMPACT);
	o.recovery.overflow_compaction = PC_RECOVERY_NOTHING;
	cr_assert_eq(decide(s, &o).next, PC_RUN_TRUNCATE);
	o.recovery.truncation = PC_RECOVERY_DONE;
	cr_assert_eq(decide(s, &o).retry, PC_RETRY_TRUNCATED);
	/* next attempt overflows again: compaction once more, truncation never again */
	pc_run_outcome_t o2 = good();
	m_overflow(s, &o2);
	o2.oversized_tool_results = true;
	cr_assert_eq(decide(s, &o2).next, PC_RUN_COMPACT);
	o2.recovery.overflow_compaction = PC_RECOVERY_NOTHING;
	pc_run_action_t a = decide(s, &o2);
	cr_assert_eq(a.error, PC_RUN_ERR_CONTEXT_OVERFLOW, "truncation is once per run");
	/* a resumed evaluation does not count usage twice */
	cr_assert_eq(s->usage.total, 30);
	freestate(s);
}

Test(run_decide, overflow_mid_turn_prompt)
{
	pc_run_state_t *s = mkstate(1, 1);
	pc_run_outcome_t o = good();
	m_overflow(s, &o);
	o.user_turn_persisted = true;
	o.recovery.overflow_compaction = PC_RECOVERY_DONE;
	decide(s, &o);
	pc_run_action_t a = begin(s);
	cr_assert_eq(a.prompt, PC_RUN_PROMPT_MID_TURN);
	cr_assert(a.suppress_user_persist);
	a = begin(s);
	cr_assert_eq(a.prompt, PC_RUN_PROMPT_USER, "the override is for one attempt");
	cr_assert_not(a.suppress_user_persist);
	freestate(s);
}

Test(run_decide, timeout_compactions_capped)
{
	pc_run_state_t *s = mkstate(1, 1);
	pc_run_outcome_t o = good();
	m_timeout_compact(s, &o);
	for (int i = 0; i < PC_RUN_MAX_TIMEOUT_COMPACTIONS; i++) {
		pc_run_action_t a = decide(s, &o);
		cr_assert_eq(a.compaction, PC_COMPACTION_TIMEOUT_RECOVERY, "compaction %d", i + 1);
		pc_run_outcome_t r = o;
		r.recovery.timeout_compaction = PC_RECOVERY_NOTHING; /* failed: still counted */
		a = decide(s, &r);
		cr_assert_neq(a.next, PC_RUN_COMPACT);
	}
	pc_run_action_t a = decide(s, &o);
	cr_assert_neq(a.next, PC_RUN_COMPACT, "third timeout compaction refused");
	/* at or below 65 % no compaction */
	pc_run_state_t *s2 = mkstate(1, 1);
	o.prompt_tokens = 65000;
	cr_assert_neq(decide(s2, &o).next, PC_RUN_COMPACT);
	/* a success re-decides to retry and arms the guard */
	o.prompt_tokens = 90000;
	cr_assert_eq(decide(s2, &o).next, PC_RUN_COMPACT);
	o.recovery.timeout_compaction = PC_RECOVERY_DONE;
	a = decide(s2, &o);
	cr_assert_eq(a.retry, PC_RETRY_TIMEOUT_COMPACTED);
	cr_assert(pc_loop_guard_armed(&s2->guard));
	/* without a count from the attempt, the last call's usage decides */
	pc_run_state_t *s3 = mkstate(1, 1);
	pc_run_outcome_t u = good();
	m_timeout_compact(s3, &u);
	u.prompt_tokens = 0;
	u.usage = (pc_usage_t){.input = 60000, .cache_read = 6000, .output = 9000, .total = 75000};
	cr_assert_eq(decide(s3, &u).next, PC_RUN_COMPACT, "66 %% of the window");
	freestate(s3);
	s3 = mkstate(1, 1);
	u.usage = (pc_usage_t){.input = 60000, .output = 9000, .total = 69000};
	cr_assert_neq(decide(s3, &u).next, PC_RUN_COMPACT, "output tokens do not count");
	freestate(s3);
	/* not for timeouts during compaction, tool execution or of the run budget */
	pc_run_outcome_t t = good();
	m_timeout_compact(s2, &t);
	t.timed_out_by_run_budget = true;
	cr_assert_neq(decide(s2, &t).next, PC_RUN_COMPACT);
	t.timed_out_by_run_budget = false;
	t.timed_out_during_tool = true;
	cr_assert_neq(decide(s2, &t).next, PC_RUN_COMPACT);
	freestate(s);
	freestate(s2);
}

typedef struct cap_case {
	const char *name;
	mutate_fn mutate;
	pc_run_retry_kind_t kind;
	int cap;
} cap_case_t;

static void m_idle(pc_run_state_t *s, pc_run_outcome_t *o)
{
	(void)s;
	o->timed_out = true;
	o->idle_timed_out = true;
	o->visible_text = false;
	o->payload_count = 0;
	o->completed_progress = false;
}
static void m_rate_limit_short(pc_run_state_t *s, pc_run_outcome_t *o)
{
	(void)s;
	*o = assistant_error(PC_FAILOVER_RATE_LIMIT, "429 tokens per minute exceeded");
}

static const cap_case_t caps[] = {
	{"reasoning only", m_reasoning_only, PC_RETRY_REASONING_ONLY, PC_RUN_MAX_REASONING_ONLY_RETRIES},
	{"empty response", m_empty, PC_RETRY_EMPTY_RESPONSE, PC_RUN_MAX_EMPTY_RESPONSE_RETRIES},
	{"missing assistant", m_missing, PC_RETRY_MISSING_ASSISTANT, PC_RUN_MAX_MISSING_ASSISTANT_RETRIES},
	{"silent error", m_silent_error, PC_RETRY_EMPTY_ERROR, PC_RUN_MAX_EMPTY_ERROR_RETRIES},
	{"compaction continuation", m_continuation, PC_RETRY_COMPACTION_CONTINUATION, PC_RUN_MAX_COMPACTION_CONTINUATIONS},
	{"finalize revision", m_finalize, PC_RETRY_FINALIZE_REVISION, PC_RUN_MAX_FINALIZE_REVISIONS},
	{"same-model idle", m_idle, PC_RETRY_SAME_MODEL_IDLE, PC_RUN_MAX_SAME_MODEL_IDLE_RETRIES},
	{"same-model rate limit", m_rate_limit_short, PC_RETRY_SAME_MODEL_RATE_LIMIT, PC_RUN_MAX_SAME_MODEL_RATE_LIMIT_RETRIES},
	{"auth refresh", m_assistant_auth, PC_RETRY_AUTH_REFRESH, 1},
	{"prompt auth refresh", m_prompt_auth, PC_RETRY_AUTH_REFRESH, 1},
};

Test(run_decide, retry_caps)
{
	for (size_t i = 0; i < sizeof(caps) / sizeof(caps[0]); i++) {
		pc_run_state_t *s = mkstate(1, 1); /* nothing to rotate to, no fallback */
		for (int n = 0; n <= caps[i].cap; n++) {
			pc_run_outcome_t o = good();
			caps[i].mutate(s, &o);
			pc_run_action_t a = decide(s, &o);
			if (n < caps[i].cap) {
				cr_assert_eq(a.next, PC_RUN_RETRY, "%s #%d", caps[i].name, n + 1);
				cr_assert_eq(a.retry, caps[i].kind, "%s #%d: kind %d", caps[i].name, n + 1, (int)a.retry);
			} else {
				cr_assert(a.next != PC_RUN_RETRY || a.retry != caps[i].kind,
					  "%s: one past the cap must not retry the same way", caps[i].name);
			}
		}
		freestate(s);
	}
}

Test(run_decide, sticky_instructions)
{
	pc_run_state_t *s = mkstate(1, 1);
	pc_run_outcome_t o = good();
	m_reasoning_only(s, &o);
	decide(s, &o);
	o = good();
	m_empty(s, &o);
	decide(s, &o);
	const char *parts[4];
	size_t n;
	cr_assert_eq(pc_run_prompt_additions(s, parts, 4, &n), 0);
	cr_assert_eq(n, 2u, "both instructions stay until cleared");
	cr_assert_str_eq(parts[0], pc_run_instruction_text(PC_RUN_INSTR_REASONING_ONLY));
	cr_assert_str_eq(parts[1], pc_run_instruction_text(PC_RUN_INSTR_EMPTY_RESPONSE));
	/* compaction continuation: set, then cleared by the next check */
	o = good();
	m_continuation(s, &o);
	decide(s, &o);
	cr_assert(s->cand.instructions[PC_RUN_INSTR_COMPACTION_CONTINUATION]);
	cr_assert(pc_loop_guard_armed(&s->guard));
	o = good();
	o.finalize_revision_requested = true;
	pc_run_action_t a = decide(s, &o);
	cr_assert_eq(a.retry, PC_RETRY_FINALIZE_REVISION);
	cr_assert_not(s->cand.instructions[PC_RUN_INSTR_COMPACTION_CONTINUATION]);
	/* a finalize revision clears all three and overrides the prompt */
	cr_assert_eq(pc_run_prompt_additions(s, parts, 4, &n), 0);
	cr_assert_eq(n, 0u);
	a = begin(s);
	cr_assert_eq(a.prompt, PC_RUN_PROMPT_FINALIZE_REVISION);
	cr_assert(a.suppress_user_persist);
	freestate(s);
}

Test(run_decide, nonvisible_retries_need_clean_turn)
{
	static const char *const why[] = {"aborted", "timed out", "tool calls", "pending", "yield", "not eligible"};
	for (int i = 0; i < 6; i++) {
		pc_run_state_t *s = mkstate(1, 1);
		pc_run_outcome_t o = good();
		m_reasoning_only(s, &o);
		switch (i) {
		case 0: o.aborted = true; break;
		case 1: o.timed_out = true; o.recovered_final_assistant = true; break;
		case 2: o.client_tool_calls = true; break;
		case 3: o.pending_work = true; break;
		case 4: o.yielded = true; break;
		default: o.nonvisible_retry_eligible = false; break;
		}
		pc_run_action_t a = decide(s, &o);
		cr_assert_neq(a.retry, PC_RETRY_REASONING_ONLY, "%s", why[i]);
		freestate(s);
	}
}

/* ---- rotation, then fallback ---- */

Test(run_decide, rotation_then_fallback)
{
	pc_run_state_t *s = mkstate(2, 2);
	s->cand.think = PC_THINK_HIGH;
	pc_run_action_t a = begin(s);
	pc_run_outcome_t o = assistant_error(PC_FAILOVER_OVERLOADED, "overloaded_error");
	a = decide(s, &o);
	cr_assert_eq(a.next, PC_RUN_RETRY);
	cr_assert_eq(a.retry, PC_RETRY_ROTATE_PROFILE);
	cr_assert_eq(s->cand.profile, 1u);
	cr_assert_eq(s->cand.think, PC_THINK_OFF, "rotation resets the think level");
	cr_assert_eq(s->cand.attempted_thinking, 0u);
	cr_assert(a.mark_profile_failed);
	cr_assert_eq(a.failed_profile, 0u);
	cr_assert_eq(a.profile_cooldown_ms, (uint64_t)PC_AUTH_COOLDOWN_FIRST_MS);
	cr_assert_eq(s->cand.cooldown_until_ms[0], NOW + PC_AUTH_COOLDOWN_FIRST_MS);
	cr_assert_eq(s->trace[0].result, PC_TRACE_ROTATE_PROFILE);
	cr_assert_eq(s->trace[0].profile, 0u, "the trace names the failed profile");
	cr_assert_eq(s->cand.last_retry_reason, PC_FAILOVER_OVERLOADED);
	/* second overload: past the rotation limit -> next model */
	s->cand.iterations = 7;
	a = decide(s, &o);
	cr_assert_eq(a.next, PC_RUN_FALLBACK);
	cr_assert_eq(a.reason, PC_FAILOVER_OVERLOADED);
	cr_assert_eq(a.status, 503);
	cr_assert(a.own_message, "§1.10: the FailoverError has its own text");
	cr_assert_str_eq(a.message, "The AI service is temporarily overloaded. Please try again in a moment.");
	cr_assert_eq(s->cand.index, 1u);
	cr_assert_eq(s->cand.profile, 0u);
	cr_assert_eq(s->cand.iterations, 0u, "a new candidate has a fresh budget");
	cr_assert_eq(s->cand.overload_rotations, 0u);
	cr_assert_eq(s->trace_count, 2u);
	cr_assert_eq(s->trace[1].result, PC_TRACE_FALLBACK_MODEL);
	cr_assert_eq(s->trace[1].candidate, 0u);
	/* last candidate: the same failures end the pass over the chain; every
	 * failure was an overload, so the reply runner replays it (§1.12) */
	a = decide(s, &o);
	cr_assert_eq(a.retry, PC_RETRY_ROTATE_PROFILE);
	a = decide(s, &o);
	cr_assert_eq(a.next, PC_RUN_FALLBACK);
	cr_assert(a.chain_replay);
	cr_assert_eq(a.overload_retry, 1u);
	cr_assert_eq(s->cand.index, 0u);
	freestate(s);
}

/* Fails every candidate of `s` with `o` until the run leaves the chain:
 * the action that left it. */
static pc_run_action_t fail_chain(pc_run_state_t *s, const pc_run_outcome_t *o)
{
	for (int i = 0; i < 64; i++) {
		pc_run_action_t a = decide(s, o);
		if (a.next != PC_RUN_RETRY && !(a.next == PC_RUN_FALLBACK && !a.chain_replay))
			return a;
	}
	cr_assert_fail("the chain never ended");
	return (pc_run_action_t){0};
}

/* §1.12 / §1.18: a chain that failed only with overloads is replayed 10
 * times, 2.5 s doubling to 30 s, then the run fails with it. */
Test(run_decide, an_all_overloaded_chain_is_replayed_ten_times_with_backoff)
{
	pc_run_state_t *s = mkstate(2, 1);
	begin(s);
	pc_run_outcome_t o = assistant_error(PC_FAILOVER_OVERLOADED, "overloaded_error");
	static const uint64_t delays[] = {2500, 5000, 10000, 20000, 30000, 30000, 30000, 30000, 30000, 30000};
	for (uint32_t i = 0; i < 10; i++) {
		pc_run_action_t a = fail_chain(s, &o);
		cr_assert(a.chain_replay, "replay %u", i + 1);
		cr_assert_eq(a.overload_retry, i + 1);
		cr_assert_eq(a.delay_ms, delays[i], "replay %u waits %llu", i + 1, (unsigned long long)a.delay_ms);
	}
	pc_run_action_t a = fail_chain(s, &o);
	cr_assert_eq(a.next, PC_RUN_FAIL);
	cr_assert_eq(a.error, PC_RUN_ERR_FAILOVER);
	cr_assert_eq(a.liveness, PC_LIVENESS_BLOCKED, "§1.14: ended on a provider error");
	freestate(s);
}

/* §1.7 steps 13 and 17: an unclassified error with nothing visible is
 * retried silently three times, then ends the run with its own words. */
Test(run_decide, unclassified_error_retries_silently_then_shows_the_error)
{
	pc_run_state_t *s = mkstate(1, 1);
	pc_run_action_t a = begin(s);
	pc_run_outcome_t o = assistant_error(PC_FAILOVER_UNCLASSIFIED, "some random error");
	o.output_tokens = 0;
	for (int i = 0; i < 3; i++) {
		a = decide(s, &o);
		cr_assert_eq(a.retry, PC_RETRY_EMPTY_ERROR, "retry %d", i + 1);
	}
	a = decide(s, &o);
	cr_assert_eq(a.next, PC_RUN_FAIL);
	cr_assert_eq(a.error, PC_RUN_ERR_PROMPT_FAILED);
	cr_assert_str_eq(a.message, "some random error");
	cr_assert_eq(a.liveness, PC_LIVENESS_BLOCKED);
	freestate(s);
}

/* A transient failure (server error, timeout) replays the chain once,
 * after 2.5 s; a chain with another kind of failure among its overloads
 * is no pure overload. */
Test(run_decide, a_transient_failure_replays_the_chain_once)
{
	pc_run_state_t *s = mkstate(1, 1);
	begin(s);
	pc_run_outcome_t o = assistant_error(PC_FAILOVER_SERVER_ERROR, "Internal server error");
	pc_run_action_t a = fail_chain(s, &o);
	cr_assert(a.chain_replay);
	cr_assert_eq(a.overload_retry, 0u);
	cr_assert_eq(a.delay_ms, (uint64_t)PC_RUN_TRANSIENT_HTTP_RETRY_MS);
	a = fail_chain(s, &o);
	cr_assert_eq(a.next, PC_RUN_FAIL);
	freestate(s);

	s = mkstate(2, 1);
	begin(s);
	pc_run_outcome_t over = assistant_error(PC_FAILOVER_OVERLOADED, "overloaded_error");
	pc_run_outcome_t billing = assistant_error(PC_FAILOVER_BILLING, "insufficient credits");
	a = decide(s, &over);
	while (a.next == PC_RUN_RETRY)
		a = decide(s, &over);
	cr_assert_eq(a.next, PC_RUN_FALLBACK);
	cr_assert_not(a.chain_replay);
	a = fail_chain(s, &billing);
	cr_assert_eq(a.next, PC_RUN_FAIL, "billing among the failures: no replay");
	freestate(s);
}

/* Once text was streamed or a tool started, replaying the turn could
 * repeat it: the chain fails as it is. */
Test(run_decide, no_replay_after_output_started)
{
	pc_run_state_t *s = mkstate(1, 1);
	begin(s);
	pc_run_outcome_t o = assistant_error(PC_FAILOVER_OVERLOADED, "overloaded_error");
	o.output_started = true;
	pc_run_action_t a = fail_chain(s, &o);
	cr_assert_eq(a.next, PC_RUN_FAIL);
	freestate(s);
}

Test(run_decide, rotation_skips_cooldown_and_locked)
{
	pc_run_state_t *s = mkstate(1, 3);
	cr_assert_eq(pc_run_profile_seed(s, 1, NOW + 1000, NOW - 10, 1), 0);
	cr_assert_eq(pc_run_profile_seed(s, 5, 0, 0, 0), PC_EINVAL);
	pc_run_outcome_t o = assistant_error(PC_FAILOVER_BILLING, "insufficient credits");
	pc_run_action_t a = decide(s, &o);
	cr_assert_eq(a.retry, PC_RETRY_ROTATE_PROFILE);
	cr_assert_eq(s->cand.profile, 2u, "profile 1 is in cooldown");
	cr_assert_eq(a.profile_cooldown_ms, PC_AUTH_BILLING_BASE_MS);
	pc_run_config_t cfg;
	pc_run_config_defaults(&cfg);
	cfg.profile_counts[0] = 3;
	cfg.profile_locked = true;
	pc_run_state_t *l = mkstate_cfg(&cfg);
	a = decide(l, &o);
	cr_assert_neq(a.retry, PC_RETRY_ROTATE_PROFILE, "a user-locked profile never rotates");
	cr_assert_eq(l->cand.profile, 0u);
	freestate(s);
	freestate(l);
}

Test(run_decide, prompt_rate_limit_rotation_then_fallback)
{
	pc_run_state_t *s = mkstate(2, 3);
	pc_run_outcome_t o = prompt_failure(PC_FAILOVER_RATE_LIMIT, "429 daily limit reached");
	pc_run_action_t a = decide(s, &o);
	cr_assert_eq(a.retry, PC_RETRY_ROTATE_PROFILE);
	cr_assert_eq(s->cand.profile, 1u);
	a = decide(s, &o);
	cr_assert_eq(a.next, PC_RUN_FALLBACK, "rate-limit rotations past the limit fall back");
	cr_assert_eq(a.status, 429);
	freestate(s);
}

Test(run_decide, same_model_rate_limit_delays)
{
	pc_run_state_t *s = mkstate(1, 2);
	pc_run_outcome_t o = assistant_error(PC_FAILOVER_RATE_LIMIT, "rate limit: requests per minute");
	static const uint64_t want[] = {10000, 20000, 30000};
	for (int i = 0; i < 3; i++) {
		pc_run_action_t a = decide(s, &o);
		cr_assert_eq(a.retry, PC_RETRY_SAME_MODEL_RATE_LIMIT);
		cr_assert_eq(a.delay_ms, want[i], "retry %d: %llu", i + 1, (unsigned long long)a.delay_ms);
		cr_assert_eq(s->trace[s->trace_count - 1].delay_ms, want[i], "the trace keeps the delay");
		cr_assert_eq(s->cand.profile, 0u);
	}
	pc_run_action_t a = decide(s, &o);
	cr_assert_eq(a.retry, PC_RETRY_ROTATE_PROFILE, "after three, rotate");
	cr_assert_eq(s->trace[s->trace_count - 1].delay_ms, 0u, "a rotation without backoff waits nothing");
	cr_assert_eq(s->cand.same_model_rate_limit_retries, 0u, "other retries reset the streak");
	freestate(s);
}

Test(run_decide, prompt_thinking_fallback_each_level_once)
{
	pc_run_config_t cfg;
	pc_run_config_defaults(&cfg);
	cfg.think_level = PC_THINK_HIGH;
	pc_run_state_t *s = mkstate_cfg(&cfg);
	pc_run_outcome_t o = prompt_failure(PC_FAILOVER_FORMAT,
		"Invalid thinking level. Supported values are: 'high', 'medium', 'low'.");
	static const pc_think_level_t want[] = {PC_THINK_MEDIUM, PC_THINK_LOW};
	for (int i = 0; i < 2; i++) {
		begin(s);
		pc_run_action_t a = decide(s, &o);
		cr_assert_eq(a.retry, PC_RETRY_THINKING_FALLBACK);
		cr_assert_eq(s->cand.think, want[i]);
	}
	begin(s);
	pc_run_action_t a = decide(s, &o);
	cr_assert_neq(a.retry, PC_RETRY_THINKING_FALLBACK, "every listed level tried");
	freestate(s);
}

/* ---- retry-limit exhaustion ---- */

Test(run_decide, budget_exhaustion)
{
	/* without a further model: the retry_limit payload */
	pc_run_state_t *s = mkstate(1, 1);
	for (uint32_t i = 0; i < PC_RUN_BUDGET_MIN; i++)
		cr_assert_eq(begin(s).next, PC_RUN_DISPATCH, "iteration %u", i + 1);
	s->cand.last_retry_reason = PC_FAILOVER_RATE_LIMIT;
	pc_run_action_t a = begin(s);
	cr_assert_eq(a.next, PC_RUN_FINISH_ERROR);
	cr_assert_eq(a.error, PC_RUN_ERR_RETRY_LIMIT);
	cr_assert_eq(a.liveness, PC_LIVENESS_BLOCKED);
	cr_assert_str_eq(a.detail, "Exceeded retry limit after 32 attempts (max=32).");
	cr_assert(strstr(a.message, "repeated internal retries") != NULL);
	freestate(s);

	/* with one, an escalating reason falls back; a timeout does not */
	s = mkstate(2, 1);
	s->cand.iterations = s->cand.budget;
	s->cand.last_retry_reason = PC_FAILOVER_RATE_LIMIT;
	a = begin(s);
	cr_assert_eq(a.next, PC_RUN_FALLBACK);
	cr_assert_eq(a.reason, PC_FAILOVER_RATE_LIMIT);
	cr_assert_eq(s->cand.index, 1u);
	cr_assert_eq(s->trace[0].stage, PC_STAGE_RUN);
	freestate(s);
	s = mkstate(2, 1);
	s->cand.iterations = s->cand.budget;
	s->cand.last_retry_reason = PC_FAILOVER_TIMEOUT;
	a = begin(s);
	cr_assert_eq(a.next, PC_RUN_FINISH_ERROR);
	cr_assert_eq(s->cand.index, 0u);
	freestate(s);
}

Test(run_decide, iteration_records_thinking)
{
	pc_run_state_t *s = mkstate(1, 1);
	s->cand.think = PC_THINK_LOW;
	begin(s);
	cr_assert(pc_run_thinking_attempted(s, PC_THINK_LOW));
	cr_assert_not(pc_run_thinking_attempted(s, PC_THINK_HIGH));
	cr_assert_eq(s->cand.iterations, 1u);
	freestate(s);
}

/* ---- §1.9 decision tables ---- */

typedef struct fo_case {
	pc_run_failover_input_t in;
	pc_run_failover_action_t want;
	pc_failover_reason_t want_reason;
} fo_case_t;

#define NONE PC_RUN_REASON_NONE
#define RL PC_FAILOVER_STAGE_RETRY_LIMIT
#define PR PC_FAILOVER_STAGE_PROMPT
#define AS PC_FAILOVER_STAGE_ASSISTANT

static const fo_case_t fo_cases[] = {
	/* retry_limit */
	{{.stage = RL, .reason = PC_FAILOVER_RATE_LIMIT, .fallback_configured = true}, PC_FAILOVER_ACT_FALLBACK_MODEL, PC_FAILOVER_RATE_LIMIT},
	{{.stage = RL, .reason = PC_FAILOVER_RATE_LIMIT}, PC_FAILOVER_ACT_RETURN_ERROR_PAYLOAD, PC_FAILOVER_RATE_LIMIT},
	{{.stage = RL, .reason = PC_FAILOVER_TIMEOUT, .fallback_configured = true}, PC_FAILOVER_ACT_RETURN_ERROR_PAYLOAD, PC_FAILOVER_TIMEOUT},
	{{.stage = RL, .reason = NONE, .fallback_configured = true}, PC_FAILOVER_ACT_RETURN_ERROR_PAYLOAD, NONE},
	/* prompt */
	{{.stage = PR, .reason = PC_FAILOVER_AUTH, .failover_failure = true, .aborted = true}, PC_FAILOVER_ACT_SURFACE_ERROR, PC_FAILOVER_AUTH},
	{{.stage = PR, .reason = PC_FAILOVER_AUTH, .failover_failure = true, .timed_out_by_run_budget = true}, PC_FAILOVER_ACT_SURFACE_ERROR, PC_FAILOVER_AUTH},
	{{.stage = PR, .reason = PC_FAILOVER_AUTH, .failover_failure = true}, PC_FAILOVER_ACT_ROTATE_PROFILE, PC_FAILOVER_AUTH},
	{{.stage = PR, .reason = PC_FAILOVER_TIMEOUT, .failover_failure = true, .fallback_configured = true}, PC_FAILOVER_ACT_FALLBACK_MODEL, PC_FAILOVER_TIMEOUT},
	{{.stage = PR, .reason = PC_FAILOVER_TLS_CERTIFICATE, .failover_failure = true}, PC_FAILOVER_ACT_SURFACE_ERROR, PC_FAILOVER_TLS_CERTIFICATE},
	{{.stage = PR, .reason = PC_FAILOVER_FORMAT, .failover_failure = true, .fallback_configured = true}, PC_FAILOVER_ACT_SURFACE_ERROR, PC_FAILOVER_FORMAT},
	{{.stage = PR, .reason = PC_FAILOVER_FORMAT, .failover_failure = true, .allow_format_retry = true}, PC_FAILOVER_ACT_ROTATE_PROFILE, PC_FAILOVER_FORMAT},
	{{.stage = PR, .reason = PC_FAILOVER_AUTH, .failover_failure = true, .profile_rotated = true, .fallback_configured = true}, PC_FAILOVER_ACT_FALLBACK_MODEL, PC_FAILOVER_AUTH},
	{{.stage = PR, .reason = NONE, .failover_failure = true, .profile_rotated = true, .fallback_configured = true}, PC_FAILOVER_ACT_FALLBACK_MODEL, PC_FAILOVER_UNKNOWN},
	{{.stage = PR, .reason = PC_FAILOVER_AUTH, .failover_failure = true, .profile_rotated = true}, PC_FAILOVER_ACT_SURFACE_ERROR, PC_FAILOVER_AUTH},
	/* assistant */
	{{.stage = AS, .reason = PC_FAILOVER_AUTH, .failover_failure = true, .aborted = true, .fallback_configured = true}, PC_FAILOVER_ACT_SURFACE_ERROR, PC_FAILOVER_AUTH},
	{{.stage = AS, .reason = PC_FAILOVER_FORMAT, .failover_failure = true, .fallback_configured = true}, PC_FAILOVER_ACT_SURFACE_ERROR, PC_FAILOVER_FORMAT},
	{{.stage = AS, .reason = PC_FAILOVER_TLS_CERTIFICATE, .failover_failure = true, .fallback_configured = true}, PC_FAILOVER_ACT_FALLBACK_MODEL, PC_FAILOVER_TLS_CERTIFICATE},
	{{.stage = AS, .reason = PC_FAILOVER_TLS_CERTIFICATE, .failover_failure = true}, PC_FAILOVER_ACT_SURFACE_ERROR, PC_FAILOVER_TLS_CERTIFICATE},
	{{.stage = AS, .reason = PC_FAILOVER_BILLING, .failover_failure = true}, PC_FAILOVER_ACT_ROTATE_PROFILE, PC_FAILOVER_BILLING},
	{{.stage = AS, .reason = NONE, .idle_timed_out = true}, PC_FAILOVER_ACT_ROTATE_PROFILE, NONE},
	{{.stage = AS, .reason = NONE, .timed_out = true, .profile_rotated = true, .fallback_configured = true}, PC_FAILOVER_ACT_FALLBACK_MODEL, PC_FAILOVER_TIMEOUT},
	{{.stage = AS, .reason = PC_FAILOVER_TIMEOUT, .failover_failure = true, .profile_rotated = true, .fallback_configured = true}, PC_FAILOVER_ACT_FALLBACK_MODEL, PC_FAILOVER_TIMEOUT},
	{{.stage = AS, .reason = PC_FAILOVER_BILLING, .failover_failure = true, .timed_out = true, .profile_rotated = true, .fallback_configured = true}, PC_FAILOVER_ACT_FALLBACK_MODEL, PC_FAILOVER_BILLING},
	{{.stage = AS, .reason = PC_FAILOVER_UNKNOWN, .failover_failure = true, .profile_rotated = true, .fallback_configured = true}, PC_FAILOVER_ACT_FALLBACK_MODEL, PC_FAILOVER_UNKNOWN},
	{{.stage = AS, .reason = NONE, .timed_out = true, .timed_out_during_compaction = true}, PC_FAILOVER_ACT_CONTINUE_NORMAL, NONE},
	{{.stage = AS, .reason = NONE, .timed_out = true, .timed_out_during_tool = true}, PC_FAILOVER_ACT_CONTINUE_NORMAL, NONE},
	{{.stage = AS, .reason = NONE, .idle_timed_out = true, .timed_out_by_run_budget = true}, PC_FAILOVER_ACT_CONTINUE_NORMAL, NONE},
	{{.stage = AS, .reason = PC_FAILOVER_UNCLASSIFIED}, PC_FAILOVER_ACT_CONTINUE_NORMAL, PC_FAILOVER_UNCLASSIFIED},
	{{.stage = AS, .reason = PC_FAILOVER_BILLING, .failover_failure = true, .profile_rotated = true}, PC_FAILOVER_ACT_SURFACE_ERROR, PC_FAILOVER_BILLING},
};

Test(run_decide, failover_tables)
{
	for (size_t i = 0; i < sizeof(fo_cases) / sizeof(fo_cases[0]); i++) {
		pc_run_failover_decision_t d;
		cr_assert_eq(pc_run_failover_decide(&fo_cases[i].in, &d), 0);
		cr_assert_eq(d.action, fo_cases[i].want, "case %zu: action %d, want %d", i, (int)d.action, (int)fo_cases[i].want);
		cr_assert_eq(d.reason, fo_cases[i].want_reason, "case %zu: reason %d", i, (int)d.reason);
	}
	pc_run_failover_decision_t d;
	cr_assert_eq(pc_run_failover_decide(NULL, &d), PC_EINVAL);
	pc_run_failover_input_t bad = {.stage = (pc_run_failover_stage_t)99};
	cr_assert_eq(pc_run_failover_decide(&bad, &d), PC_EINVAL);
}

Test(run_decide, merge_and_escalate)
{
	cr_assert_eq(pc_run_merge_retry_reason(PC_FAILOVER_BILLING, NONE, true), PC_FAILOVER_BILLING);
	cr_assert_eq(pc_run_merge_retry_reason(NONE, NONE, true), PC_FAILOVER_TIMEOUT);
	cr_assert_eq(pc_run_merge_retry_reason(NONE, NONE, false), NONE);
	cr_assert_eq(pc_run_merge_retry_reason(PC_FAILOVER_BILLING, PC_FAILOVER_AUTH, true), PC_FAILOVER_AUTH);
	static const pc_failover_reason_t no[] = {NONE, PC_FAILOVER_TIMEOUT, PC_FAILOVER_MODEL_NOT_FOUND, PC_FAILOVER_FORMAT, PC_FAILOVER_SESSION_EXPIRED};
	for (size_t i = 0; i < 5; i++)
		cr_assert_not(pc_run_should_escalate_retry_limit(no[i]));
	cr_assert(pc_run_should_escalate_retry_limit(PC_FAILOVER_RATE_LIMIT));
	cr_assert(pc_run_should_escalate_retry_limit(PC_FAILOVER_OVERLOADED));
}

/* ---- assistant failover details (§1.10) ---- */

Test(run_decide, idle_retry_only_without_fallback)
{
	/* no fallback, nothing observable: one same-model idle retry */
	pc_run_state_t *s = mkstate(1, 1);
	pc_run_outcome_t o = good();
	m_idle(s, &o);
	cr_assert_eq(decide(s, &o).retry, PC_RETRY_SAME_MODEL_IDLE);
	freestate(s);
	/* with a fallback: the next model instead */
	s = mkstate(2, 1);
	pc_run_action_t a = decide(s, &o);
	cr_assert_eq(a.next, PC_RUN_FALLBACK);
	cr_assert_eq(a.reason, PC_FAILOVER_TIMEOUT);
	cr_assert_eq(a.status, 408);
	cr_assert_eq(s->trace[0].result, PC_TRACE_TIMEOUT);
	freestate(s);
	/* something was observable (a tool ran): no restart, the timeout payload */
	s = mkstate(1, 1);
	o.tool_metas = 1;
	a = decide(s, &o);
	cr_assert_eq(a.error, PC_RUN_ERR_TIMEOUT);
	cr_assert(a.idle_timeout);
	cr_assert_eq(a.liveness, PC_LIVENESS_BLOCKED);
	freestate(s);
}

Test(run_decide, surface_error_throws_failover)
{
	/* rotation impossible, no fallback, a failover failure: the run fails with it */
	pc_run_config_t cfg;
	pc_run_config_defaults(&cfg);
	cfg.has_session_key = true;
	pc_run_state_t *s = mkstate_cfg(&cfg);
	pc_run_outcome_t o = assistant_error(PC_FAILOVER_BILLING, NULL);
	pc_run_action_t a = decide(s, &o);
	cr_assert_eq(a.next, PC_RUN_FAIL);
	cr_assert_eq(a.error, PC_RUN_ERR_FAILOVER);
	cr_assert_eq(a.status, 402);
	cr_assert(a.suspend_session, "billing with a session key suspends");
	cr_assert(strstr(a.message, "billing") != NULL);
	cr_assert_eq(s->trace[0].result, PC_TRACE_ERROR);
	freestate(s);
	/* a terminal format error with a fallback still moves on (FailoverError) */
	s = mkstate(2, 2);
	o = assistant_error(PC_FAILOVER_FORMAT, "400 invalid request");
	a = decide(s, &o);
	cr_assert_eq(a.next, PC_RUN_FALLBACK);
	cr_assert_eq(a.reason, PC_FAILOVER_FORMAT);
	cr_assert_not(a.suspend_session);
	freestate(s);
}

Test(run_decide, overload_backoff_applied)
{
	pc_run_config_t cfg;
	pc_run_config_defaults(&cfg);
	cfg.profile_counts[0] = 2;
	cfg.overloaded_backoff_ms = 750;
	pc_run_state_t *s = mkstate_cfg(&cfg);
	pc_run_outcome_t o = assistant_error(PC_FAILOVER_OVERLOADED, "overloaded");
	pc_run_action_t a = decide(s, &o);
	cr_assert_eq(a.retry, PC_RETRY_ROTATE_PROFILE);
	cr_assert_eq(a.delay_ms, 750u);
	freestate(s);
}

Test(run_decide, timeout_payload_run_timer)
{
	pc_run_state_t *s = mkstate(1, 1);
	pc_run_outcome_t o = good();
	m_timeout_result(s, &o);
	pc_run_action_t a = decide(s, &o);
	cr_assert_eq(a.error, PC_RUN_ERR_TIMEOUT);
	cr_assert_not(a.idle_timeout);
	cr_assert(strstr(a.message, "Request timed out") != NULL);
	/* a recovered final answer is a success */
	o.recovered_final_assistant = true;
	o.payload_count = 1;
	o.visible_text = true;
	cr_assert_eq(decide(s, &o).next, PC_RUN_FINISH_OK);
	freestate(s);
}

/* ---- §1.14 liveness ---- */

Test(run_decide, liveness_table)
{
	static const struct {
		pc_run_liveness_input_t in;
		pc_run_liveness_t want;
	} cases[] = {
		{{.incomplete_turn = true, .compaction_interrupted = true}, PC_LIVENESS_ABANDONED},
		{{.compaction_interrupted = true, .aborted = true}, PC_LIVENESS_PAUSED},
		{{.aborted = true}, PC_LIVENESS_BLOCKED},
		{{.timed_out = true}, PC_LIVENESS_BLOCKED},
		{{.timed_out = true, .payload_count = 1}, PC_LIVENESS_WORKING},
		{{.assistant_stop_error = true, .payload_count = 1}, PC_LIVENESS_BLOCKED},
		{{.payload_count = 1}, PC_LIVENESS_WORKING},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		cr_assert_eq(pc_run_liveness(&cases[i].in), cases[i].want, "case %zu", i);
	cr_assert_eq(pc_run_liveness(NULL), PC_LIVENESS_WORKING);
	cr_assert_str_eq(pc_run_liveness_name(PC_LIVENESS_ABANDONED), "abandoned");
}

/* ---- §11.2 thinking fallback ---- */

Test(run_decide, pick_fallback_thinking)
{
	static const struct {
		const char *msg;
		uint32_t attempted;
		bool ok;
		pc_think_level_t want;
	} cases[] = {
		{"This model requires non-zero reasoning effort", 0, true, PC_THINK_MINIMAL},
		{"This model requires non-zero reasoning effort", 1u << PC_THINK_MINIMAL, false, PC_THINK_OFF},
		{"Unsupported reasoning effort. Supported values are: 'low', 'medium', 'high'.", 1u << PC_THINK_LOW, true, PC_THINK_MEDIUM},
		{"invalid thinking_level; supported values: low and high", 0, true, PC_THINK_LOW},
		{"invalid thinking_level; supported values: \"x-high\", \"off\"", 0, true, PC_THINK_XHIGH},
		{"think value \"low\" is not supported for this model", 0, true, PC_THINK_OFF},
		{"think value \"low\" is not supported for this model", 1u << PC_THINK_OFF, false, PC_THINK_OFF},
		{"model claude-thinking-level-x is not supported", 0, false, PC_THINK_OFF},
		{"feature not supported", 0, false, PC_THINK_OFF},
		{"reasoning.effort: supported values are: minimal, low", (1u << PC_THINK_MINIMAL) | (1u << PC_THINK_LOW), false, PC_THINK_OFF},
		/* OpenClaw's thinking.test.ts: a bare list of levels */
		{"Supported values are: \"high\", \"medium\"", 0, true, PC_THINK_HIGH},
		{"Supported values are: \"high\", \"medium\"", 1u << PC_THINK_HIGH, true, PC_THINK_MEDIUM},
		{"tool_choice: supported values are: 'auto', 'none'", 0, false, PC_THINK_OFF},
		{"", 0, false, PC_THINK_OFF},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		pc_think_level_t t = PC_THINK_OFF;
		bool ok = pc_run_pick_fallback_thinking(cases[i].msg, cases[i].attempted, &t);
		cr_assert_eq(ok, cases[i].ok, "case %zu (%s)", i, cases[i].msg);
		if (ok)
			cr_assert_eq(t, cases[i].want, "case %zu: %s", i, pc_think_level_name(t));
	}
	pc_think_level_t t;
	cr_assert_not(pc_run_pick_fallback_thinking(NULL, 0, &t));
}

/* ---- §1.18 backoff and §1.11 cooldowns ---- */

Test(run_decide, backoff_values)
{
	cr_assert_eq(pc_run_same_model_rate_limit_delay_ms(0, 0), 10000u);
	cr_assert_eq(pc_run_same_model_rate_limit_delay_ms(1, 0), 20000u);
	cr_assert_eq(pc_run_same_model_rate_limit_delay_ms(2, 0), 30000u);
	cr_assert_eq(pc_run_same_model_rate_limit_delay_ms(9, 0), 60000u);
	cr_assert_eq(pc_run_same_model_rate_limit_delay_ms(0, 45000), 45000u);
	cr_assert_eq(pc_run_same_model_rate_limit_delay_ms(0, 90000), 60000u);
	static const uint64_t overload[] = {0, 2500, 5000, 10000, 20000, 30000, 30000, 30000, 30000, 30000, 30000, 0};
	for (uint32_t i = 0; i < 12; i++)
		cr_assert_eq(pc_run_overload_retry_delay_ms(i), overload[i], "overload retry %u", i);
	pc_backoff_policy_t legacy = {250, 1500, 2.0, 0.2};
	cr_assert_eq(pc_backoff_compute(&legacy, 1, 0.0), 250u);
	cr_assert_eq(pc_backoff_compute(&legacy, 2, 0.0), 500u);
	cr_assert_eq(pc_backoff_compute(&legacy, 2, 1.0), 600u);
	cr_assert_eq(pc_backoff_compute(&legacy, 4, 0.0), 1500u);
	cr_assert_eq(pc_backoff_compute(&legacy, 0, 0.0), 250u);
	cr_assert_eq(pc_backoff_compute(NULL, 1, 0.0), 0u);
	cr_assert_eq(PC_RUN_TRANSIENT_HTTP_RETRY_MS, 2500u);
}

Test(run_decide, cooldown_values)
{
	cr_assert_eq(pc_auth_cooldown_ms(PC_FAILOVER_AUTH, 1, 0), 30000u);
	cr_assert_eq(pc_auth_cooldown_ms(PC_FAILOVER_OVERLOADED, 2, 0), 60000u);
	cr_assert_eq(pc_auth_cooldown_ms(PC_FAILOVER_RATE_LIMIT, 3, 0), 300000u);
	cr_assert_eq(pc_auth_cooldown_ms(PC_FAILOVER_RATE_LIMIT, 30, 0), 300000u);
	const uint64_t h = 3600000u;
	cr_assert_eq(pc_auth_cooldown_ms(PC_FAILOVER_BILLING, 1, 0), 5 * h);
	cr_assert_eq(pc_auth_cooldown_ms(PC_FAILOVER_BILLING, 2, 0), 10 * h);
	cr_assert_eq(pc_auth_cooldown_ms(PC_FAILOVER_BILLING, 3, 0), 20 * h);
	cr_assert_eq(pc_auth_cooldown_ms(PC_FAILOVER_BILLING, 4, 0), 24 * h);
	cr_assert_eq(pc_auth_cooldown_ms(PC_FAILOVER_BILLING, 1, 2 * h), 2 * h, "per-provider base");
	const uint64_t m = 60000u;
	cr_assert_eq(pc_auth_cooldown_ms(PC_FAILOVER_AUTH_PERMANENT, 1, 0), 10 * m);
	cr_assert_eq(pc_auth_cooldown_ms(PC_FAILOVER_AUTH_PERMANENT, 2, 0), 20 * m);
	cr_assert_eq(pc_auth_cooldown_ms(PC_FAILOVER_AUTH_PERMANENT, 3, 0), 40 * m);
	cr_assert_eq(pc_auth_cooldown_ms(PC_FAILOVER_AUTH_PERMANENT, 4, 0), 60 * m);
}

Test(run_decide, cooldown_error_count_and_window)
{
	pc_run_state_t *s = mkstate(1, 2);
	/* two earlier failures within the window: the third is 5 min */
	pc_run_profile_seed(s, 0, 0, NOW - 1000, 2);
	pc_run_outcome_t o = assistant_error(PC_FAILOVER_AUTH, "401");
	pc_run_action_t a = decide(s, &o);
	cr_assert_eq(a.profile_cooldown_ms, (uint64_t)PC_AUTH_COOLDOWN_MAX_MS);
	freestate(s);
	/* older than 24 h: counting starts over */
	s = mkstate(1, 2);
	pc_run_profile_seed(s, 0, 0, NOW - PC_AUTH_FAILURE_WINDOW_MS, 2);
	a = decide(s, &o);
	cr_assert_eq(a.profile_cooldown_ms, (uint64_t)PC_AUTH_COOLDOWN_FIRST_MS);
	freestate(s);
	/* a setup-stage timeout never poisons the profile */
	s = mkstate(1, 1);
	o = prompt_failure(PC_FAILOVER_TIMEOUT, "connect timeout");
	o.prompt_error = PC_PROMPT_ERR_SETUP;
	a = decide(s, &o);
	cr_assert_not(a.mark_profile_failed);
	freestate(s);
}

Test(run_decide, short_window_detection)
{
	cr_assert(pc_run_is_short_window_rate_limit("429: tokens per minute (TPM) exceeded", 0));
	cr_assert(pc_run_is_short_window_rate_limit("请求过于频繁", 0));
	cr_assert(pc_run_is_short_window_rate_limit("rate limited", 20000));
	cr_assert_not(pc_run_is_short_window_rate_limit("rate limited", 61000));
	cr_assert_not(pc_run_is_short_window_rate_limit("daily limit reached", 20000));
	cr_assert(pc_run_is_short_window_rate_limit("daily quota; requests per minute exceeded", 0));
	cr_assert_not(pc_run_is_short_window_rate_limit("rate limited", 0));
	cr_assert_not(pc_run_is_short_window_rate_limit(NULL, 0));
}

Test(run_decide, names)
{
	cr_assert_str_eq(pc_run_error_kind_name(PC_RUN_ERR_RETRY_LIMIT), "retry_limit");
	cr_assert_str_eq(pc_run_error_kind_name((pc_run_error_kind_t)99), "unknown");
	cr_assert_str_eq(pc_run_trace_result_name(PC_TRACE_SAME_MODEL_RATE_LIMIT), "same_model_rate_limit");
	cr_assert(strlen(pc_run_prompt_override_text(PC_RUN_PROMPT_MID_TURN)) > 0);
	cr_assert_str_eq(pc_run_prompt_override_text(PC_RUN_PROMPT_USER), "");
}

Test(run_decide, trace_is_bounded)
{
	pc_run_state_t *s = mkstate(1, 1);
	for (uint32_t i = 0; i < PC_RUN_TRACE_MAX + 3; i++)
		pc_run_trace_add(s, PC_TRACE_ERROR, PC_STAGE_PROMPT, NONE, 0,
				 "a-very-long-provider-error-code-that-does-not-fit", 1);
	cr_assert_eq(s->trace_count, PC_RUN_TRACE_MAX);
	cr_assert_eq(s->trace_dropped, 3u);
	cr_assert_eq(strlen(s->trace[0].code), PC_RUN_TRACE_CODE_MAX - 1);
	freestate(s);
	ASSERT_NO_LEAKS();
}

Test(run_decide, start_profile_skips_cooldowns)
{
	pc_run_state_t *s = mkstate(1, 3);
	cr_assert_eq(pc_run_profile_seed(s, 0, 5000, 1000, 1), 0);
	cr_assert_eq(pc_run_profile_seed(s, 1, 3000, 1000, 1), 0);
	cr_assert_eq(pc_run_start_profile(s, 2000), 2u, "the first profile out of cooldown");
	cr_assert_eq(s->cand.profile, 2u);
	cr_assert_eq(pc_run_start_profile(s, 4000), 1u, "profile 1 came out of cooldown");
	cr_assert_eq(pc_run_profile_seed(s, 2, 9000, 1000, 1), 0);
	cr_assert_eq(pc_run_start_profile(s, 2000), 0u, "all in cooldown: the first");
	cr_assert_eq(pc_run_start_profile(NULL, 0), 0u);
	freestate(s);
}

/* §1.11/§1.12 at a candidate's start: profiles passed over are traced as
 * skipped with their reasons; a primary whose profiles all cool down is
 * probed on the profile whose cooldown ends first when a probe is due,
 * skipped otherwise; auth skips it whatever the timing. */
Test(run_decide, start_candidate_traces_skips_and_skips_disabled_models)
{
	pc_run_state_t *s = mkstate(2, 2);
	pc_run_action_t a;
	cr_assert_eq(pc_run_start_candidate(NULL, 0, &a), PC_EINVAL);
	pc_run_profile_seed(s, 0, 5000, 1000, 1);
	pc_run_profile_seed_reason(s, 0, PC_FAILOVER_RATE_LIMIT);
	cr_assert_eq(pc_run_start_candidate(s, 2000, &a), 0);
	cr_assert_eq(a.next, PC_RUN_DISPATCH);
	cr_assert_not(a.mark_probe, "a profile is free: no probe");
	cr_assert_eq(s->cand.profile, 1u);
	cr_assert_eq(s->trace_count, 1u);
	cr_assert(s->trace[0].skipped);
	cr_assert_eq(s->trace[0].result, PC_TRACE_ROTATE_PROFILE);
	cr_assert_eq(s->trace[0].reason, PC_FAILOVER_RATE_LIMIT);
	cr_assert_eq(s->trace[0].status, 429);
	cr_assert_eq(s->trace[0].profile, 0u);

	/* both cool down, one for billing (the reason that counts), ending
	 * within the margin: the primary is probed on the sooner one */
	pc_run_profile_seed(s, 1, 4000, 1000, 1);
	pc_run_profile_seed_reason(s, 1, PC_FAILOVER_BILLING);
	cr_assert_eq(pc_run_start_candidate(s, 2000, &a), 0);
	cr_assert_eq(a.next, PC_RUN_DISPATCH);
	cr_assert(a.mark_probe);
	cr_assert(s->cand.probing);
	cr_assert_not(s->cand.transient_probe, "billing takes no transient slot");
	cr_assert_eq(s->cand.profile, 1u);

	/* auth on one of them: the model is skipped for the next one */
	pc_run_profile_seed_reason(s, 0, PC_FAILOVER_AUTH_PERMANENT);
	uint32_t before = s->trace_count;
	cr_assert_eq(pc_run_start_candidate(s, 2000, &a), 0);
	cr_assert_eq(a.next, PC_RUN_FALLBACK);
	cr_assert_eq(a.reason, PC_FAILOVER_AUTH_PERMANENT);
	cr_assert_eq(s->cand.index, 1u);
	cr_assert_eq(s->trace_count, before + 1);
	cr_assert_eq(s->trace[before].result, PC_TRACE_FALLBACK_MODEL);
	cr_assert(s->trace[before].skipped);

	/* on the last candidate the run fails with the failover */
	pc_run_profile_seed(s, 0, 5000, 1000, 1);
	pc_run_profile_seed(s, 1, 5000, 1000, 1);
	pc_run_profile_seed_reason(s, 0, PC_FAILOVER_AUTH);
	pc_run_profile_seed_reason(s, 1, PC_FAILOVER_AUTH);
	cr_assert_eq(pc_run_start_candidate(s, 2000, &a), 0);
	cr_assert_eq(a.next, PC_RUN_FAIL);
	cr_assert_eq(a.error, PC_RUN_ERR_FAILOVER);
	freestate(s);
}

/* Seeds every profile of the current candidate with a cooldown until
 * `until` for `r`. */
static void cool_all(pc_run_state_t *s, uint64_t until, pc_failover_reason_t r)
{
	for (uint32_t p = 0; p < s->cand.profile_count; p++) {
		pc_run_profile_seed(s, p, until, 1000, 1);
		pc_run_profile_seed_reason(s, p, r);
	}
}

/* §1.12 the primary probe: only with fallbacks, at most once per
 * MIN_PROBE_INTERVAL_MS per provider, and only within PROBE_MARGIN_MS of
 * the soonest expiry; otherwise the primary is skipped without a request. */
Test(run_decide, primary_probe_is_throttled_and_kept_to_the_margin)
{
	const uint64_t now = 10000000;
	pc_run_action_t a;
	pc_run_state_t *s = mkstate(2, 2);
	cool_all(s, now + PC_RUN_PROBE_MARGIN_MS, PC_FAILOVER_RATE_LIMIT);
	s->cand.last_probe_ms = now - PC_RUN_PROBE_INTERVAL_MS;
	cr_assert_eq(pc_run_start_candidate(s, now, &a), 0);
	cr_assert_eq(a.next, PC_RUN_DISPATCH, "due: at the margin, throttle open");
	cr_assert(a.mark_probe);
	cr_assert(s->cand.transient_probe);
	freestate(s);

	s = mkstate(2, 2);
	cool_all(s, now + PC_RUN_PROBE_MARGIN_MS + 1, PC_FAILOVER_RATE_LIMIT);
	cr_assert_eq(pc_run_start_candidate(s, now, &a), 0);
	cr_assert_eq(a.next, PC_RUN_FALLBACK, "beyond the margin: skipped");
	cr_assert_not(a.mark_probe);
	cr_assert_eq(a.reason, PC_FAILOVER_RATE_LIMIT);
	cr_assert(s->trace[0].skipped);
	cr_assert_eq(s->trace[0].result, PC_TRACE_FALLBACK_MODEL);
	freestate(s);

	s = mkstate(2, 2);
	cool_all(s, now + 1000, PC_FAILOVER_RATE_LIMIT);
	s->cand.last_probe_ms = now - PC_RUN_PROBE_INTERVAL_MS + 1;
	cr_assert_eq(pc_run_start_candidate(s, now, &a), 0);
	cr_assert_eq(a.next, PC_RUN_FALLBACK, "probed under 30 s ago: skipped");
	freestate(s);

	/* no fallback: the primary is probed on every open throttle slot,
	 * however far its expiry (OpenClaw #90702), billing too */
	s = mkstate(1, 2);
	cool_all(s, now + 5 * 3600 * 1000ull, PC_FAILOVER_RATE_LIMIT);
	cr_assert_eq(pc_run_start_candidate(s, now, &a), 0);
	cr_assert_eq(a.next, PC_RUN_DISPATCH);
	cr_assert(a.mark_probe);
	freestate(s);
	s = mkstate(1, 2);
	cool_all(s, now + 1000, PC_FAILOVER_RATE_LIMIT);
	s->cand.last_probe_ms = now - 1000;
	cr_assert_eq(pc_run_start_candidate(s, now, &a), 0);
	cr_assert_eq(a.next, PC_RUN_FAIL, "throttled");
	freestate(s);
	s = mkstate(1, 2);
	cool_all(s, now + 5 * 3600 * 1000ull, PC_FAILOVER_BILLING);
	cr_assert_eq(pc_run_start_candidate(s, now, &a), 0);
	cr_assert_eq(a.next, PC_RUN_DISPATCH);
	cr_assert(a.mark_probe);
	s->cand.last_probe_ms = now - 1000;
	cr_assert_eq(pc_run_start_candidate(s, now, &a), 0);
	cr_assert_eq(a.next, PC_RUN_FAIL, "throttled");
	freestate(s);

	/* with fallbacks, billing far from expiry: skipped */
	s = mkstate(2, 2);
	cool_all(s, now + 5 * 3600 * 1000ull, PC_FAILOVER_BILLING);
	cr_assert_eq(pc_run_start_candidate(s, now, &a), 0);
	cr_assert_eq(a.next, PC_RUN_FALLBACK);
	cr_assert_eq(a.reason, PC_FAILOVER_BILLING);
	freestate(s);
}

/* §1.12 fallback candidates: probed for a transient cooldown (whatever the
 * throttle), at most once per provider per run; billing skips them; a
 * probe that failed for a reason unrelated to the cooldown gives the
 * provider's probe back. */
Test(run_decide, fallback_probe_is_once_per_provider_per_run)
{
	const uint64_t now = 10000000;
	pc_run_config_t cfg;
	pc_run_config_defaults(&cfg);
	cfg.candidate_count = 4;
	for (uint32_t i = 0; i < 4; i++)
		cfg.profile_counts[i] = 1;
	cfg.provider_id[0] = cfg.provider_id[1] = cfg.provider_id[2] = 0; /* mock, mock, mock, fb */
	cfg.provider_id[3] = 3;
	pc_run_state_t *s = mkstate_cfg(&cfg);
	pc_run_action_t a;
	pc_run_enter_candidate(s, 1);
	cool_all(s, now + 1000, PC_FAILOVER_RATE_LIMIT);
	s->cand.last_probe_ms = now - 1; /* the throttle is the primary's */
	cr_assert_eq(pc_run_start_candidate(s, now, &a), 0);
	cr_assert_eq(a.next, PC_RUN_DISPATCH);
	cr_assert_not(a.mark_probe, "not the primary: no throttle mark");
	cr_assert(s->cand.transient_probe);

	/* it fails again (a rate limit): the next candidate of the provider is
	 * skipped, the other provider's is probed */
	cr_assert_eq(pc_run_enter_candidate(s, 2), 0);
	cool_all(s, now + 1000, PC_FAILOVER_OVERLOADED);
	cr_assert_eq(pc_run_start_candidate(s, now, &a), 0);
	cr_assert_eq(a.next, PC_RUN_FALLBACK, "mock's probe is spent");
	cr_assert_eq(a.reason, PC_FAILOVER_OVERLOADED);
	cr_assert_eq(s->cand.index, 3u);
	cr_assert_not_null(strstr(a.message, "probe already attempted"), "%s", a.message);
	cool_all(s, now + 1000, PC_FAILOVER_TIMEOUT);
	cr_assert_eq(pc_run_start_candidate(s, now, &a), 0);
	cr_assert_eq(a.next, PC_RUN_DISPATCH, "fb has a probe of its own");
	freestate(s);

	/* a probe that failed with model_not_found keeps the provider's slot */
	s = mkstate_cfg(&cfg);
	pc_run_enter_candidate(s, 1);
	cool_all(s, now + 1000, PC_FAILOVER_RATE_LIMIT);
	cr_assert_eq(pc_run_start_candidate(s, now, &a), 0);
	cr_assert(s->cand.transient_probe);
	pc_run_outcome_t o = good();
	o.now_ms = now;
	o.has_assistant = false;
	o.prompt_error = PC_PROMPT_ERR_PROVIDER;
	o.has_failure = true;
	o.failure.reason = PC_FAILOVER_MODEL_NOT_FOUND;
	o.failure.failover = true;
	o.error_text = "model not found";
	cr_assert_eq(pc_run_decide(s, &o, &a), 0);
	cr_assert_eq(a.next, PC_RUN_FALLBACK, "%d", a.next);
	cr_assert_eq(s->cand.index, 2u);
	cool_all(s, now + 1000, PC_FAILOVER_RATE_LIMIT);
	cr_assert_eq(pc_run_start_candidate(s, now, &a), 0);
	cr_assert_eq(a.next, PC_RUN_DISPATCH, "the slot was given back");

	/* billing on a fallback: skipped */
	pc_run_enter_candidate(s, 3);
	cool_all(s, now + 1000, PC_FAILOVER_BILLING);
	cr_assert_eq(pc_run_start_candidate(s, now, &a), 0);
	cr_assert_eq(a.next, PC_RUN_FAIL);
	freestate(s);
}
