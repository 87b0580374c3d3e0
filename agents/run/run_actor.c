/*
 * The run actor (spec layer 1, §1, Appendix A): the retry / failover state
 * machine around attempts. It owns the run's pc_run_state_t and does what
 * the pure decisions of run_decide.h say: dispatch an attempt (one at a
 * time), sleep a backoff (a timer message), compact (a compaction actor),
 * move to the next profile or model, or finish.
 *
 *   ITER_CHECK  pc_run_begin_iteration -> DISPATCH | FALLBACK | FINISH | FAIL
 *   WAIT        the attempt's PC__MSG_ATTEMPT_DONE
 *   EVAL        pc_run_decide -> RETRY | COMPACT | TRUNCATE | FALLBACK | FINISH | FAIL
 *
 * Finishing records the end in the store and, once that is durable, tells
 * the session, which publishes the run's one terminal lifecycle event (with
 * the payloads, usage and attempts trace) and finishes the registry entry:
 * nobody learns of an end that a crash could still lose. An abort is a
 * message: it goes down to the attempt or compaction in flight, cancels a
 * backoff, and never enters fallback. The stop handler releases the global-lane permit and anything
 * still running, exactly once, whatever stopped the run.
 *
 * Hooks (§10.2): before_model_resolve may replace the primary model
 * before the first iteration; message_sending may rewrite or cancel the
 * reply before the terminal event; agent_end observes every end. Each
 * costs a pc_hooks_active check when nothing is registered.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "actors/timer.h"
#include "../agent_internal.h"
#include "../attempt/attempt_timeout.h"
#include "../compaction/compaction.h"
#include "agents/obs/obs.h"
#include "agents/providers/providers.h"
#include "io/io.h"
#include "run_decide.h"
#include "run_lifecycle.h"
#include "run_internal.h"
#include "runtime/clock.h"

static void iterate(pc_ctx_t *ctx, run_t *r);
static void tell_view(run_t *r);
static void decide(pc_ctx_t *ctx, run_t *r);
static void fall_back(pc_ctx_t *ctx, run_t *r, const pc_run_action_t *act);

static const char *base_url(const run_t *r, const pc_provider_config_t *p)
{
	if (!p->embedded)
		return p->base_url;
	/* as the real services: OpenAI's base ends in /v1, Anthropic's does not */
	const pc_provider_wire_t *w = pc_provider_wire(p->api);
	return w && !w->base_has_version ? r->agent->mock_root_url : r->agent->mock_base_url;
}

/* The run's time so far (runtime clock); 0 before it started. */
uint64_t pc__run_ms(const run_t *r)
{
	uint64_t now = pc_runtime_now_ms();
	return r->started_ms && now > r->started_ms ? now - r->started_ms : 0;
}

/* ---- the run's state ---- */

/*
 * The run's one transition (run_lifecycle.h): every change of r->state
 * goes through here. One the table does not allow is refused (the state
 * stays), counted and logged. An allowed one is traced (PINCER_TRACE=run)
 * and carried to the views projected from the state: the registry's
 * entry when the run starts (it finishes from the session, once the end
 * is told), the session's view whenever it changes.
 */
void pc__run_set(run_t *r, pc_run_lc_t to, const char *why)
{
	pc_run_lc_t from = r->state;
	if (!pc_run_lc_legal(from, to)) {
		pc__metrics_illegal(&r->agent->metrics, PC__LC_RUN);
		(void)pc_log_kv(r->agent->log, PC_LOG_WARN, "illegal run transition", PC_LF_STR("runId", r->run_id),
				PC_LF_STR("from", pc_run_lc_name(from)), PC_LF_STR("to", pc_run_lc_name(to)),
				PC_LF_STR("why", why));
		return;
	}
	r->state = to;
	if (r->agent->trace & PC_TRACE_RUN)
		pc_trace_transition(r->agent->log, "run", r->run_id, pc_run_lc_name(from), pc_run_lc_name(to), why);
	if (pc_run_lc_registry_status(from) == PC_RUN_STATUS_QUEUED &&
	    pc_run_lc_registry_status(to) == PC_RUN_STATUS_RUNNING)
		pc_run_registry_start(r->agent->runs, r->run_id, r->self, r->started_wall);
	tell_view(r);
}

/* The session's view of the run, sent when its projection changed. */
static void tell_view(run_t *r)
{
	pc_run_phase_t v = pc_run_lc_session_phase(r->state, r->activity);
	if (v == r->told)
		return;
	r->told = v;
	pc_send_u64(r->session, PC__MSG_RUN_PHASE, v);
}

/* ---- finishing ---- */

/* A run whose last attempt the provider refused with an error status:
 * that status and the provider's message (secrets masked: the event goes
 * to clients), so that an entry can answer with the provider's kind of
 * error rather than a generic one. */
static void add_provider_error(const run_t *r, cJSON *d)
{
	if (r->provider_status < 400)
		return;
	cJSON *pe = cJSON_AddObjectToObject(d, "providerError");
	char *msg = r->provider_message ? pc_redact(r->provider_message) : NULL;
	if (pe) {
		cJSON_AddNumberToObject(pe, "status", r->provider_status);
		if (msg && msg[0])
			cJSON_AddStringToObject(pe, "message", msg);
	}
	free(msg);
}

/* meta.error.message (§1.13): what actually failed, e.g. the idle breaker's
 * count and cap, when the payload carries a generic text. Redacted: it can
 * quote a provider's error. */
static void add_error_detail(cJSON *d, const char *message, const pc_run_action_t *a)
{
	if (!a || !a->detail[0] || (message && !strcmp(message, a->detail)))
		return;
	char *detail = pc_redact(a->detail);
	if (detail && detail[0])
		cJSON_AddStringToObject(d, "errorDetail", detail);
	free(detail);
}

/* The candidates that failed, as runWithModelFallback records them
 * ({provider, model, error, reason, status}), when the chain had more than
 * one. */
static void add_fallback_attempts(const run_t *r, cJSON *d)
{
	if (r->n_failed < 2)
		return;
	cJSON *arr = cJSON_AddArrayToObject(d, "fallbackAttempts");
	for (uint32_t i = 0; arr && i < r->n_failed; i++) {
		const candidate_t *c = &r->cand[r->failed[i].candidate];
		cJSON *o = cJSON_CreateObject();
		if (!o || !cJSON_AddItemToArray(arr, o)) {
			cJSON_Delete(o);
			return;
		}
		char *msg = r->failed[i].error ? pc_redact(r->failed[i].error) : NULL;
		cJSON_AddStringToObject(o, "provider", c->provider->id);
		cJSON_AddStringToObject(o, "model", c->model);
		cJSON_AddStringToObject(o, "error", msg ? msg : "");
		cJSON_AddStringToObject(o, "reason", pc_failover_reason_name(r->failed[i].reason));
		if (r->failed[i].status)
			cJSON_AddNumberToObject(o, "status", r->failed[i].status);
		free(msg);
	}
}

/* FallbackSummaryError's message: every failed candidate with its error
 * and reason (malloc'd), or NULL when the chain had one candidate. */
static char *fallback_summary(const run_t *r)
{
	if (r->n_failed < 2)
		return NULL;
	size_t n = 64;
	for (uint32_t i = 0; i < r->n_failed; i++) {
		const candidate_t *c = &r->cand[r->failed[i].candidate];
		n += strlen(c->provider->id) + strlen(c->model) + 48 +
		     (r->failed[i].error ? strlen(r->failed[i].error) : 0);
	}
	char *out = malloc(n);
	if (!out)
		return NULL;
	size_t off = (size_t)snprintf(out, n, "All models failed (%u): ", (unsigned)r->n_failed);
	for (uint32_t i = 0; i < r->n_failed && off < n; i++) {
		const candidate_t *c = &r->cand[r->failed[i].candidate];
		off += (size_t)snprintf(out + off, n - off, "%s%s/%s: %s (%s)", i ? " | " : "",
					c->provider->id, c->model,
					r->failed[i].error ? r->failed[i].error : "failed",
					pc_failover_reason_name(r->failed[i].reason));
	}
	return out;
}

/* Notes the candidate an action leaves with a failover error: a fallback
 * (the state is already on the next one) or the run's failover failure.
 * `error` is what failed (the provider's words after an attempt; the
 * action's own text when no attempt was made, or when the FailoverError
 * has its own text, §1.10), NULL: the action's text. */
static void note_candidate_failed(run_t *r, const pc_run_action_t *act, const char *error)
{
	if (act->chain_replay) {
		/* a new pass over the chain: its failures are the ones an end lists */
		for (uint32_t i = 0; i < r->n_failed; i++)
			free(r->failed[i].error);
		r->n_failed = 0;
		return;
	}
	bool fell = act->next == PC_RUN_FALLBACK;
	if ((!fell && !(act->next == PC_RUN_FAIL && act->error == PC_RUN_ERR_FAILOVER)) ||
	    r->n_failed >= PC_RUN_MAX_CANDIDATES)
		return;
	uint32_t idx = fell ? r->rs.cand.index - 1 : r->rs.cand.index;
	const char *text = error ? error : act->message[0] ? act->message : pc_failover_reason_name(act->reason);
	r->failed[r->n_failed].candidate = idx;
	r->failed[r->n_failed].reason = act->reason == PC_RUN_REASON_NONE ? PC_FAILOVER_UNKNOWN : act->reason;
	r->failed[r->n_failed].status = act->status;
	r->failed[r->n_failed].error = strdup(text); /* NULL: listed as "failed" */
	r->n_failed++;
}

static const char *status_error_kind(const pc_run_action_t *a)
{
	return a && a->error != PC_RUN_ERR_NONE ? pc_run_error_kind_name(a->error) : NULL;
}

/* Usage as §1.19's agentMeta names it: {input, output, cacheRead,
 * cacheWrite, total}. */
static cJSON *usage_json(const pc_usage_t *u)
{
	cJSON *o = cJSON_CreateObject();
	if (!o)
		return NULL;
	cJSON_AddNumberToObject(o, "input", (double)u->input);
	cJSON_AddNumberToObject(o, "output", (double)u->output);
	cJSON_AddNumberToObject(o, "cacheRead", (double)u->cache_read);
	cJSON_AddNumberToObject(o, "cacheWrite", (double)u->cache_write);
	cJSON_AddNumberToObject(o, "total", (double)u->total);
	return o;
}

/* The run's usage (§11.3), printed, or NULL when no call reported any:
 * `usage` holds the latest call's prompt side and total with the output
 * of every call; lastCallUsage that call alone; promptTokens its prompt. */
static char *usage_text(const run_t *r, pc_usage_t *last)
{
	const pc_run_state_t *s = &r->rs;
	*last = pc_usage_is_nonzero(&s->last_call_usage) ? s->last_call_usage : s->usage;
	if (!pc_usage_is_nonzero(&s->usage) && !pc_usage_is_nonzero(last))
		return NULL;
	pc_usage_t rep;
	pc_usage_report(&s->usage, last, &rep);
	cJSON *u = usage_json(&rep);
	char *text = u ? pc_json_print(u) : NULL;
	cJSON_Delete(u);
	return text;
}

static cJSON *trace_json(const run_t *r)
{
	const pc_run_state_t *s = &r->rs;
	cJSON *arr = cJSON_CreateArray();
	for (uint32_t i = 0; arr && i < s->trace_count; i++) {
		const pc_run_trace_entry_t *e = &s->trace[i];
		cJSON *o = cJSON_CreateObject();
		if (!o)
			break;
		if (e->candidate < r->n_cand) {
			cJSON_AddStringToObject(o, "provider", r->cand[e->candidate].provider->id);
			cJSON_AddStringToObject(o, "model", r->cand[e->candidate].model);
		}
		cJSON_AddStringToObject(o, "result", pc_run_trace_result_name(e->result));
		if (e->skipped)
			cJSON_AddBoolToObject(o, "skipped", true);
		if (e->probe)
			cJSON_AddBoolToObject(o, "probe", true);
		if (e->reason != PC_RUN_REASON_NONE)
			cJSON_AddStringToObject(o, "reason", pc_failover_reason_name(e->reason));
		if (e->status)
			cJSON_AddNumberToObject(o, "status", e->status);
		if (e->code[0])
			cJSON_AddStringToObject(o, "code", e->code);
		cJSON_AddNumberToObject(o, "candidate", e->candidate);
		cJSON_AddNumberToObject(o, "profile", e->profile);
		cJSON_AddNumberToObject(o, "durationMs", (double)e->duration_ms);
		cJSON_AddNumberToObject(o, "delayMs", (double)e->delay_ms);
		cJSON_AddItemToArray(arr, o);
	}
	return arr;
}

void pc__run_done_send(pc_actor_t *session, const char *run_id, pc_run_status_t status, const char *kind,
		       bool replay_invalid, const char *error, const char *data)
{
	size_t el = error ? strlen(error) + 1 : 0, dl = strlen(data) + 1;
	pc_msg_t *m = pc_msg_new(PC__MSG_RUN_DONE, sizeof(pc__run_done_t) + 1 + el + dl);
	if (!m)
		return;
	pc__run_done_t *rd = pc_msg_data(m);
	memset(rd, 0, sizeof(*rd));
	snprintf(rd->run_id, sizeof(rd->run_id), "%s", run_id);
	snprintf(rd->kind, sizeof(rd->kind), "%s", kind ? kind : "");
	rd->status = status;
	rd->replay_invalid = replay_invalid;
	size_t off = 1;
	rd->buf[0] = '\0';
	if (error) {
		memcpy(rd->buf + off, error, el);
		rd->error = (uint32_t)off;
		off += el;
	}
	memcpy(rd->buf + off, data, dl);
	rd->data = (uint32_t)off;
	pc_send(session, m);
}

/*
 * Tells the session that the run ended (it publishes the terminal event
 * and wakes the waiters), once the end's row is durable or could not be
 * recorded: `store_rc` is the store's answer. A failed write does not
 * change the run's outcome (the client still hears it); the terminal
 * event names the failure as storeError, because a restart will then find
 * the run unfinished.
 */
/* The run's start and end lines (the agent's logger; nothing without). */
static void log_start(const run_t *r)
{
	if (!pc_log_enabled(r->agent->log, PC_LOG_INFO))
		return;
	const candidate_t *c = &r->cand[0];
	(void)pc_log_kv(r->agent->log, PC_LOG_INFO, "run started", PC_LF_STR("runId", r->run_id),
			PC_LF_STR("sessionKey", r->key), PC_LF_STR("provider", c->provider->id),
			PC_LF_STR("model", c->model),
			PC_LF_STR("prompt", r->agent->log_content ? r->prompt : NULL));
}

static void log_end(const run_t *r, int store_rc)
{
	bool ok = r->end_status == PC_RUN_STATUS_OK || r->end_status == PC_RUN_STATUS_ABORTED;
	pc_log_level_t level = ok && !store_rc ? PC_LOG_INFO : PC_LOG_WARN;
	if (!pc_log_enabled(r->agent->log, level))
		return;
	(void)pc_log_kv(r->agent->log, level, "run ended", PC_LF_STR("runId", r->run_id),
			PC_LF_STR("sessionKey", r->key), PC_LF_STR("status", pc_run_status_name(r->end_status)),
			PC_LF_INT("attempts", r->attempts), PC_LF_INT("durationMs", (int64_t)pc__run_ms(r)),
			PC_LF_STR("errorKind", r->end_kind && r->end_kind[0] ? r->end_kind : NULL),
			PC_LF_STR("error", r->end_status == PC_RUN_STATUS_OK ? NULL : r->end_message),
			PC_LF_STR("storeError", store_rc ? pc_store_strerror(store_rc) : NULL));
}

static void tell_end(run_t *r, int store_rc, const char *why)
{
	pc__run_set(r, pc_run_lc_done(r->end_status), why);
	const cJSON *d = r->end_data;
	pc__run_hook_agent_end(r, r->end_status, cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(d, "error")),
			       cJSON_GetObjectItemCaseSensitive(d, "payloads"));
	if (store_rc != 0 && r->end_data)
		cJSON_AddStringToObject(r->end_data, "storeError", pc_store_strerror(store_rc));
	char *data = r->end_data ? pc_json_print(r->end_data) : NULL;
	/* counted before anyone can learn that the run ended */
	pc__metrics_run_end(r->agent, r->end_status, r->started_ms != 0, pc__run_ms(r));
	pc__run_done_send(r->session, r->run_id, pc_run_lc_registry_status(r->state), r->end_kind, r->rs.replay_invalid,
			  r->end_message, data ? data : "{}");
	cJSON_free(data);
	log_end(r, store_rc);
	__atomic_add_fetch(&r->agent->stats.runs_finished, 1, __ATOMIC_RELAXED);
}

/* The end as the terminal event tells it and the store's row holds it;
 * the row asked for, fenced by the session's lease at `epoch` (0: not). */
static void end_with(pc_ctx_t *ctx, run_t *r, pc_run_status_t status, const char *message,
		     const pc_run_action_t *act, int64_t epoch)
{
	bool ok = status == PC_RUN_STATUS_OK;
	const char *kind = status == PC_RUN_STATUS_ABORTED ? "aborted" : status_error_kind(act);
	/* printed once: for the terminal event and for the store */
	pc_usage_t last;
	char *usage = usage_text(r, &last);
	cJSON *d = cJSON_CreateObject();
	if (d) {
		cJSON_AddStringToObject(d, "phase", ok ? "end" : "error");
		cJSON_AddStringToObject(d, "status", pc_run_status_name(status));
		pc__json_add_int(d, "startedAt", r->started_wall);
		pc__json_add_int(d, "endedAt", pc__clock_wall_ms());
		cJSON *payloads = NULL;
		if (ok && r->payloads)
			payloads = pc_json_raw_ref(r->payloads); /* printed by the attempt */
		if (!ok && message && message[0]) {
			payloads = cJSON_CreateArray();
			cJSON *p = cJSON_CreateObject();
			cJSON_AddStringToObject(p, "text", message);
			cJSON_AddBoolToObject(p, "isError", true);
			cJSON_AddItemToArray(payloads, p);
		}
		if (ok && act && act->silent) {
			cJSON_Delete(payloads);
			payloads = cJSON_CreateArray();
			cJSON *p = cJSON_CreateObject();
			cJSON_AddStringToObject(p, "text", "NO_REPLY");
			cJSON_AddItemToArray(payloads, p);
		}
		cJSON_AddItemToObject(d, "payloads", payloads ? payloads : cJSON_CreateArray());
		if (!ok)
			cJSON_AddStringToObject(d, "error", message && message[0] ? message : "run failed");
		if (kind)
			cJSON_AddStringToObject(d, "errorKind", kind);
		if (!ok) {
			add_provider_error(r, d);
			add_error_detail(d, message, act);
			add_fallback_attempts(r, d);
		}
		if (r->stop_reason && ok)
			cJSON_AddStringToObject(d, "stopReason", r->stop_reason);
		cJSON_AddStringToObject(d, "livenessState",
					pc_run_liveness_name(act ? act->liveness : r->rs.liveness));
		if (r->rs.replay_invalid)
			cJSON_AddBoolToObject(d, "replayInvalid", true);
		if (usage) {
			cJSON_AddRawToObject(d, "usage", usage);
			cJSON_AddItemToObject(d, "lastCallUsage", usage_json(&last));
			pc__json_add_int(d, "promptTokens", pc_usage_prompt_tokens(&last));
		}
		cJSON_AddItemToObject(d, "attempts", trace_json(r));
	}
	cJSON_Delete(r->end_data);
	free(r->end_message);
	r->end_status = status;
	r->end_kind = kind;
	r->end_message = !ok && message ? strdup(message) : NULL;
	r->end_data = d;
	r->end_answered = false;
	r->end_rc = 0;
	r->end_fenced = epoch != 0;

	char code[64];
	snprintf(code, sizeof(code), "run_%s", kind ? kind : "error");
	pc_msg_t *req = NULL;
	/* the row holds what the store projects from the state the run ends in */
	pc_store_run_end_t e = {.run_id = r->run_id, .status = pc_run_lc_store_status(pc_run_lc_done(status)),
				.error_code = ok ? NULL : code, .usage = usage, .key = r->key, .epoch = epoch,
				.flags = PC_STORE_REQ_JSON_CHECKED, .replay_invalid = r->rs.replay_invalid};
	int rc = pc_store_req_run_end(&e, &req);
	if (rc == 0)
		rc = pc_ask(ctx, pc_store_actor(r->agent->store), req, &r->end_corr);
	cJSON_free(usage);
	if (rc != 0) {
		/* no answer will come: the end is told now, as unrecorded */
		tell_end(r, rc, "store refused");
		pc_exit(ctx, PC_EXIT_NORMAL);
	}
}

/*
 * The run's end: the store's row first, asked like any durable write (an
 * urgent one: it commits with the transcript writes queued before it, and
 * with those of an attempt that reported before they were durable it is
 * fenced as they are), and its answer tells the session (tell_end). Until
 * then nobody learns of the end, so no answer can outlive a crash that
 * loses it. `message` is the user-facing error payload, if any.
 */
void pc__run_finish(pc_ctx_t *ctx, run_t *r, pc_run_status_t status, const char *message,
		   const pc_run_action_t *act)
{
	if (pc_run_lc_ending(r->state))
		return;
	if (status == PC_RUN_STATUS_OK && r->settle_rc) {
		/* the last attempt's writes were refused after it reported */
		status = PC_RUN_STATUS_ERROR;
		message = pc_store_strerror(r->settle_rc);
		act = NULL;
	}
	if (status == PC_RUN_STATUS_OK && pc__run_hook_message_sending(ctx, r, act))
		return;
	pc__run_set(r, PC_RUN_LC_ENDING, pc_run_status_name(status));
	free(r->deferred);
	r->deferred = NULL;
	end_with(ctx, r, status, message, act, r->unsettled ? r->epoch : 0);
}

/* The end's row and the last attempt's writes are both answered. Refused
 * together by the lease (another owner took the session), the run fails,
 * as one whose write is fenced does, and that end is written unfenced. */
static void end_answered(pc_ctx_t *ctx, run_t *r)
{
	if (r->end_fenced && r->end_rc == PC_STORE_EFENCED) {
		end_with(ctx, r, PC_RUN_STATUS_ERROR, pc_store_strerror(PC_STORE_EFENCED), NULL, 0);
		return;
	}
	tell_end(r, r->end_rc, r->end_rc ? "end unrecorded" : "end recorded");
	pc_exit(ctx, PC_EXIT_NORMAL);
}

static void finish_action(pc_ctx_t *ctx, run_t *r, const pc_run_action_t *act)
{
	switch (act->next) {
	case PC_RUN_FINISH_OK:
		pc__run_finish(ctx, r, PC_RUN_STATUS_OK, NULL, act);
		return;
	case PC_RUN_FINISH_ERROR:
		pc__run_finish(ctx, r, act->error == PC_RUN_ERR_TIMEOUT ? PC_RUN_STATUS_TIMEOUT : PC_RUN_STATUS_ERROR,
		       act->message, act);
		return;
	default: {
		/* FAIL: the error itself is the message; when every candidate of a
		 * chain failed, all of them are (§1.12 FallbackSummaryError) */
		bool aborted = act->error == PC_RUN_ERR_ABORTED;
		char *summary = act->error == PC_RUN_ERR_FAILOVER ? fallback_summary(r) : NULL;
		if (act->summary_as_detail) {
			/* the user reads the spec's text; meta.error what failed */
			pc_run_action_t told = *act;
			snprintf(told.detail, sizeof(told.detail), "%s",
				 summary ? summary : r->error_text ? r->error_text : act->message);
			pc__run_finish(ctx, r, PC_RUN_STATUS_ERROR, act->message, &told);
			free(summary);
			return;
		}
		const char *msg = summary ? summary
			: act->message[0] ? act->message
			: act->error == PC_RUN_ERR_LOOP_PERSISTED && r->guard_text ? r->guard_text
			: (r->error_text ? r->error_text : pc_run_error_kind_name(act->error));
		pc__run_finish(ctx, r, aborted ? PC_RUN_STATUS_ABORTED : PC_RUN_STATUS_ERROR, msg, act);
		free(summary);
		return;
	}
	}
}

/* The max hold of the session write lock for this run's rewrites (§6.4:
 * max(5 min, run timeout + compaction timeout + 2 min grace)). */
static uint64_t lock_max_hold(const run_t *r)
{
	uint64_t comp = r->agent->cfg->agent.compaction.timeout_ms;
	return pc_attempt_lock_max_hold_ms(r->timeout_ms, comp ? comp : PC_ATTEMPT_COMPACTION_TIMEOUT_MS);
}

/* ---- attempts ---- */

/* The profile bookkeeping an action asks for goes to the process-wide
 * cooldown table, so other runs skip a failing profile too. */
static void book_profiles(run_t *r, const pc_run_action_t *act)
{
	if (act->mark_profile_failed && act->failed_candidate < r->n_cand)
		pc_cooldowns_failed(r->agent->cooldowns, r->cand[act->failed_candidate].provider, act->failed_profile,
				    r->cand[act->failed_candidate].model, act->profile_failure_reason, act->profile_cooldown_ms, (uint64_t)pc__clock_wall_ms());
	if (act->mark_profile_success)
		pc_cooldowns_succeeded(r->agent->cooldowns, r->cand[r->rs.cand.index].provider, r->rs.cand.profile,
				       r->cand[r->rs.cand.index].model);
}

/* A candidate's profiles start from the process's cooldowns (§1.11): true
 * when the candidate is new, with its start decided in `act`. */
static bool seed_profiles(run_t *r, pc_run_action_t *act)
{
	uint32_t idx = r->rs.cand.index;
	if (r->seeded == idx + 1)
		return false;
	r->seeded = idx + 1;
	for (uint32_t p = 0; p < r->rs.cand.profile_count; p++) {
		uint64_t until, last;
		uint32_t errors;
		pc_failover_reason_t reason;
		pc_cooldowns_get(r->agent->cooldowns, r->cand[idx].provider, p, r->cand[idx].model, &until, &last, &errors,
				 &reason);
		if (errors) {
			pc_run_profile_seed(&r->rs, p, until, last, errors);
			pc_run_profile_seed_reason(&r->rs, p, reason);
		}
	}
	r->rs.cand.last_probe_ms = pc_cooldowns_probe_last(r->agent->cooldowns, r->cand[idx].provider);
	uint64_t now = (uint64_t)pc__clock_wall_ms();
	pc_run_start_candidate(&r->rs, now, act);
	if (act->mark_probe)
		pc_cooldowns_probe_mark(r->agent->cooldowns, r->cand[idx].provider, now);
	return true;
}

static void dispatch(pc_ctx_t *ctx, run_t *r, const pc_run_action_t *act)
{
	const candidate_t *c = &r->cand[r->rs.cand.index];
	const char *additions[PC_RUN_INSTR_COUNT];
	size_t n_add = 0;
	pc_run_prompt_additions(&r->rs, additions, PC_RUN_INSTR_COUNT, &n_add);
	const char *continuation = act->prompt != PC_RUN_PROMPT_USER ? pc_run_prompt_override_text(act->prompt)
								       : NULL;
	/* a revision request travels with its reason (§10.2) */
	char *revised = NULL;
	if (act->prompt == PC_RUN_PROMPT_FINALIZE_REVISION && r->revision) {
		size_t n = strlen(continuation) + strlen(r->revision) + 3;
		revised = malloc(n);
		if (revised) {
			snprintf(revised, n, "%s\n\n%s", continuation, r->revision);
			continuation = revised;
		}
	}
	uint64_t budget = 0;
	if (r->timeout_ms) {
		uint64_t spent = pc_runtime_now_ms() - r->started_ms;
		budget = spent >= r->timeout_ms ? 1 : r->timeout_ms - spent;
	}
	pc__attempt_params_t p = {
		.run_id = r->run_id,
		.session_key = r->key,
		.index = r->attempts,
		.provider = c->provider,
		.base_url = base_url(r, c->provider),
		.model = c->model,
		.profile = r->rs.cand.profile,
		.think = r->rs.cand.think,
		.context_tokens = c->context_tokens,
		.max_tokens = c->max_tokens,
		.prompt = r->user_persisted || act->suppress_user_persist ? NULL : r->prompt,
		.continuation = continuation && continuation[0] ? continuation : NULL,
		.additions = additions,
		.addition_count = n_add,
		.extra_system_prompt = r->extra,
		.idempotency_key = r->idem,
		.timeout_ms = budget,
		.bus = r->bus,
		.loop = r->loop,
		.epoch = r->epoch,
		.lock_max_hold_ms = lock_max_hold(r),
	};
	int rc = pc__attempt_spawn(r->agent, &p, pc_self(ctx), &r->attempt);
	free(revised);
	if (rc != 0) {
		pc_run_action_t fail = {.next = PC_RUN_FAIL, .error = PC_RUN_ERR_PROMPT_FAILED};
		snprintf(fail.message, sizeof(fail.message), "could not start an attempt: %s", pc_strerror(rc));
		finish_action(ctx, r, &fail);
		return;
	}
	r->attempts++;
	pc__run_set(r, PC_RUN_LC_ATTEMPT, "dispatch");
}

static void iterate(pc_ctx_t *ctx, run_t *r)
{
	/* A fallback moves to the next candidate and checks again; the
	 * chain is finite, so this ends. */
	for (uint32_t guard = 0; guard <= PC_RUN_MAX_CANDIDATES; guard++) {
		if (r->cancelled) {
			pc_run_action_t a = {.next = PC_RUN_FAIL, .error = PC_RUN_ERR_ABORTED};
			snprintf(a.message, sizeof(a.message), "Operation aborted");
			finish_action(ctx, r, &a);
			return;
		}
		pc_run_action_t act;
		if (seed_profiles(r, &act) && act.next != PC_RUN_DISPATCH) {
			note_candidate_failed(r, &act, NULL);
			if (act.next != PC_RUN_FALLBACK) {
				finish_action(ctx, r, &act);
				return;
			}
			if (act.chain_replay || act.delay_ms) {
				fall_back(ctx, r, &act);
				return;
			}
			continue;
		}
		pc_run_begin_iteration(&r->rs, &act);
		book_profiles(r, &act);
		note_candidate_failed(r, &act, NULL);
		if (act.next == PC_RUN_DISPATCH) {
			dispatch(ctx, r, &act);
			return;
		}
		if (act.next != PC_RUN_FALLBACK) {
			finish_action(ctx, r, &act);
			return;
		}
		if (act.chain_replay || act.delay_ms) {
			fall_back(ctx, r, &act);
			return;
		}
	}
}

static void start_compaction(pc_ctx_t *ctx, run_t *r, pc_run_compaction_t kind)
{
	const pc_compaction_config_t *cc = &r->agent->cfg->agent.compaction;
	const candidate_t *c = &r->cand[r->rs.cand.index];
	char **headers = NULL;
	const char *path = pc_provider_api_path(c->provider->api);
	char url[512];
	snprintf(url, sizeof(url), "%s%s", base_url(r, c->provider), path ? path : "");
	int rc = pc_request_provider_headers(c->provider, r->rs.cand.profile, r->run_id, &headers);
	size_t nh = 0;
	while (headers && headers[nh])
		nh++;
	pc_compaction_request_t req = {
		.io = r->agent->io,
		.store = r->agent->store,
		.lock_dir = r->agent->lock_dir,
		.session_key = r->key,
		.epoch = r->epoch,
		.run_id = r->run_id,
		.trigger = kind == PC_COMPACTION_OVERFLOW ? "overflow" : "timeout_recovery",
		.api = c->provider->api,
		.url = url,
		.headers = (const char *const *)headers,
		.header_count = nh,
		.provider = c->provider->id,
		.model = c->model,
		.keep_recent_tokens = cc->keep_recent_tokens,
		.timeout_ms = cc->timeout_ms,
		.idle_timeout_ms = c->provider->idle_timeout_ms,
		.http2_prior_knowledge = c->provider->http2 == PC_PROVIDER_HTTP2_PRIOR_KNOWLEDGE,
		.hooks = r->agent->hooks,
		.tag = r->attempts,
	};
	pc_session_lock_opts_t lo;
	pc__run_lock_opts(lock_max_hold(r), &lo);
	req.lock_opts = &lo;
	if (rc == 0) {
		pc__transcript_drop(r->agent, r->key); /* it is about to be rewritten */
		rc = pc_compaction_start(r->agent->rt, &req, pc_self(ctx), &r->compaction);
	}
	pc_request_headers_free(headers);
	/* the session learns before anyone sees the event: steering is refused
	 * from the moment a compaction is visible (§7.4); the view stays
	 * compacting until the next attempt reports */
	if (rc == 0) {
		r->compaction_kind = kind;
		r->activity = PC_RUN_COMPACTING;
		pc__run_set(r, PC_RUN_LC_COMPACTING, req.trigger);
	}
	cJSON *d = cJSON_CreateObject();
	if (d) {
		cJSON_AddStringToObject(d, "phase", "start");
		cJSON_AddStringToObject(d, "trigger", req.trigger);
		char *s = pc_json_print(d);
		if (s)
			pc_event_bus_emit(r->bus, PC_EVENT_COMPACTION, s, strlen(s), false, false, NULL);
		cJSON_free(s);
		cJSON_Delete(d);
	}
	if (rc != 0) {
		/* Could not compact: the decision goes on as after a failed compaction. */
		if (kind == PC_COMPACTION_OVERFLOW)
			r->outcome.recovery.overflow_compaction = PC_RECOVERY_NOTHING;
		else
			r->outcome.recovery.timeout_compaction = PC_RECOVERY_NOTHING;
		decide(ctx, r);
		return;
	}
}

static void on_compaction_done(pc_ctx_t *ctx, run_t *r, const pc_compaction_done_msg_t *d)
{
	pc_actor_release(r->compaction);
	r->compaction = NULL;
	bool done = d->rc == 0 && d->compacted;
	cJSON *e = cJSON_CreateObject();
	if (e) {
		cJSON_AddStringToObject(e, "phase", "end");
		cJSON_AddBoolToObject(e, "willRetry", done && !r->cancelled);
		cJSON_AddBoolToObject(e, "completed", done);
		if (d->rc != 0 && d->error[0])
			cJSON_AddStringToObject(e, "error", d->error);
		char *s = pc_json_print(e);
		if (s)
			pc_event_bus_emit(r->bus, PC_EVENT_COMPACTION, s, strlen(s), false, false, NULL);
		cJSON_free(s);
		cJSON_Delete(e);
	}
	pc_run_recovery_result_t res = done ? PC_RECOVERY_DONE : PC_RECOVERY_NOTHING;
	if (r->compaction_kind == PC_COMPACTION_OVERFLOW)
		r->outcome.recovery.overflow_compaction = res;
	else
		r->outcome.recovery.timeout_compaction = res;
	pc__run_set(r, PC_RUN_LC_IDLE, done ? "compacted" : "compaction failed");
	if (r->cancelled)
		r->outcome.cancelled = true;
	decide(ctx, r);
}

/* The overload retries' one status notice (§1.12): 30 s after the run
 * began, if it is still retrying by then. Not assistant text: a lifecycle
 * event {phase: "notice"} the gateway passes on. */
#define NOTICE_AFTER_MS 30000u
#define NOTICE_TEXT "The AI service is temporarily overloaded. I’m still retrying; this may take a few minutes."

/* Tests shorten the waits (never what is decided or recorded). */
static uint32_t test_delay_divisor = 1;

void pc__agent_test_delay_divisor(uint32_t d)
{
	__atomic_store_n(&test_delay_divisor, d ? d : 1, __ATOMIC_RELAXED);
}

uint64_t pc__agent_test_delay(uint64_t ms)
{
	return ms / __atomic_load_n(&test_delay_divisor, __ATOMIC_RELAXED);
}

static void arm_notice(pc_ctx_t *ctx, run_t *r, const pc_run_action_t *act)
{
	(void)pc_log_kv(r->agent->log, PC_LOG_WARN, "retrying the model chain", PC_LF_STR("runId", r->run_id),
			PC_LF_STR("reason", pc_failover_reason_name(act->reason)),
			PC_LF_INT("overloadRetry", act->overload_retry), PC_LF_INT("delayMs", (int64_t)act->delay_ms));
	if (!act->overload_retry || r->notice_armed)
		return;
	uint64_t ran = pc__run_ms(r);
	uint64_t wait = ran < NOTICE_AFTER_MS ? NOTICE_AFTER_MS - ran : 0;
	pc_msg_t *m = pc_msg_new(PC__MSG_RUN_NOTICE, 0);
	if (m && pc_timer_after(pc_self(ctx), pc__agent_test_delay(wait), m, &r->notice) == 0)
		r->notice_armed = true;
}

static void send_notice(run_t *r)
{
	r->notice = 0;
	if (pc_run_lc_ending(r->state) || r->cancelled || r->rs.output_started)
		return;
	cJSON *d = cJSON_CreateObject();
	if (d && cJSON_AddStringToObject(d, "phase", "notice") &&
	    cJSON_AddStringToObject(d, "kind", "overload_retry") && cJSON_AddStringToObject(d, "text", NOTICE_TEXT) &&
	    cJSON_AddNumberToObject(d, "retryCount", r->rs.overload_replays)) {
		char *s = pc_json_print(d);
		if (s)
			pc_event_bus_emit(r->bus, PC_EVENT_LIFECYCLE, s, strlen(s), false, false, NULL);
		cJSON_free(s);
	}
	cJSON_Delete(d);
	(void)pc_log_kv(r->agent->log, PC_LOG_WARN, "overload notice sent", PC_LF_STR("runId", r->run_id),
			PC_LF_INT("retryCount", r->rs.overload_replays));
}

/* The next iteration, after an abort-aware sleep of delay_ms. */
static void iterate_after(pc_ctx_t *ctx, run_t *r, uint64_t delay_ms)
{
	if (delay_ms > 0) {
		pc_msg_t *m = pc_msg_new(PC__MSG_RUN_DELAY, 0);
		if (m && pc_timer_after(pc_self(ctx), pc__agent_test_delay(delay_ms), m, &r->delay) == 0) {
			pc__run_set(r, PC_RUN_LC_DELAY, "backoff");
			return;
		}
	}
	iterate(ctx, r);
}

/* The next candidate, or (chain_replay) the chain again from its first,
 * after the action's delay. */
static void fall_back(pc_ctx_t *ctx, run_t *r, const pc_run_action_t *act)
{
	if (act->chain_replay) {
		r->seeded = 0; /* the first candidate's cooldowns are read again */
		arm_notice(ctx, r, act);
	}
	iterate_after(ctx, r, act->delay_ms);
}

static void act_on(pc_ctx_t *ctx, run_t *r, const pc_run_action_t *act);

/* What reads the transcript next waits for the last attempt's writes: a
 * sync commits them now, and PC__MSG_ATTEMPT_SETTLED carries on. */
static void defer(pc_ctx_t *ctx, run_t *r, const pc_run_action_t *act)
{
	pc_msg_t *req = NULL;
	r->deferred = malloc(sizeof(*act));
	if (r->deferred)
		*r->deferred = *act;
	if (!r->deferred || pc_store_req_sync(&req) != 0 ||
	    pc_ask(ctx, pc_store_actor(r->agent->store), req, NULL) != 0) {
		free(r->deferred);
		r->deferred = NULL;
		pc__run_finish(ctx, r, PC_RUN_STATUS_ERROR, "the transcript could not be committed", NULL);
	}
}

static void decide(pc_ctx_t *ctx, run_t *r)
{
	r->outcome.error_text = r->error_text;
	pc_run_action_t act;
	pc_run_decide(&r->rs, &r->outcome, &act);
	book_profiles(r, &act);
	note_candidate_failed(r, &act, act.own_message ? NULL : r->error_text);
	act_on(ctx, r, &act);
}

/* The last attempt's writes are durable (rc 0) or were refused: the end
 * waiting for them is told, or what waited goes on. */
static void on_settled(pc_ctx_t *ctx, run_t *r, int rc)
{
	if (!r->unsettled)
		return;
	r->unsettled = false;
	if (r->state == PC_RUN_LC_ENDING) {
		if (rc != 0 && r->end_rc == 0)
			r->end_rc = rc;
		if (r->end_answered)
			end_answered(ctx, r);
		return;
	}
	pc_run_action_t *act = r->deferred;
	r->deferred = NULL;
	if (!act) {
		r->settle_rc = rc; /* the end, when it comes, fails */
		return;
	}
	if (rc != 0)
		pc__run_finish(ctx, r, PC_RUN_STATUS_ERROR, pc_store_strerror(rc), NULL);
	else
		act_on(ctx, r, act);
	free(act);
}

/* Does what the decision says. Anything but the run's end reads the
 * transcript again, so with the last attempt's writes unsettled it waits
 * for them (defer). */
static void act_on(pc_ctx_t *ctx, run_t *r, const pc_run_action_t *act)
{
	bool ends = act->next == PC_RUN_FINISH_OK || act->next == PC_RUN_FINISH_ERROR || act->next == PC_RUN_FAIL;
	if (r->unsettled && !ends) {
		defer(ctx, r, act);
		return;
	}
	switch (act->next) {
	case PC_RUN_FALLBACK:
		fall_back(ctx, r, act);
		return;
	case PC_RUN_RETRY:
		iterate_after(ctx, r, act->delay_ms);
		return;
	case PC_RUN_COMPACT:
		start_compaction(ctx, r, act->compaction);
		return;
	case PC_RUN_TRUNCATE:
		pc__transcript_drop(r->agent, r->key); /* it is about to be rewritten */
		if (pc__truncate_start(r->agent, r->key, r->epoch, r->cand[r->rs.cand.index].context_tokens,
				       lock_max_hold(r), pc_self(ctx)) != 0) {
			r->outcome.recovery.truncation = PC_RECOVERY_NOTHING;
			decide(ctx, r);
			return;
		}
		pc__run_set(r, PC_RUN_LC_TRUNCATING, "truncate");
		return;
	case PC_RUN_DISPATCH:
		dispatch(ctx, r, act);
		return;
	default:
		finish_action(ctx, r, act);
		return;
	}
}

/* What an attempt adds to the agent's metrics: its time, its tokens (by
 * provider and model) and, when it failed, the reason the classifier gave. */
static void attempt_metrics(pc_agent_t *a, const candidate_t *c, const pc_run_outcome_t *o)
{
	const pc__agent_metrics_t *m = &a->metrics;
	pc__observe_ms(m->attempt_seconds, o->duration_ms > 0 ? (uint64_t)o->duration_ms : 0);
	const int64_t tokens[PC__TOKEN_KINDS] = {o->usage.input, o->usage.output, o->usage.cache_read,
						 o->usage.cache_write};
	pc__model_series_t s;
	bool any = false;
	for (size_t i = 0; i < PC__TOKEN_KINDS; i++)
		any = any || tokens[i] > 0;
	if (any)
		pc__metrics_model(a, c->provider->id, c->model, &s);
	for (size_t i = 0; any && i < PC__TOKEN_KINDS; i++)
		if (tokens[i] > 0)
			(void)pc_metric_add_u64(s.tokens[i], (uint64_t)tokens[i]);
	if (o->has_failure && (unsigned)o->failure.reason < PC_FAILOVER_REASON_COUNT)
		(void)pc_metric_inc(m->attempt_errors[o->failure.reason]);
}

static void on_attempt_done(pc_ctx_t *ctx, run_t *r, const pc_msg_t *msg)
{
	const pc__attempt_done_t *d = pc_msg_cdata(msg);
	pc_actor_release(r->attempt);
	r->attempt = NULL;
	pc__run_set(r, PC_RUN_LC_IDLE, "attempt done");
	r->streaming = false;
	free(r->error_text);
	free(r->payloads);
	free(r->stop_reason);
	free(r->provider_message);
	r->provider_status = d->provider_status;
	r->provider_message = d->provider_message ? strdup(d->buf + d->provider_message) : NULL;
	r->error_text = d->error_text ? strdup(d->buf + d->error_text) : NULL;
	r->payloads = d->payloads ? strdup(d->buf + d->payloads) : NULL;
	r->stop_reason = d->stop_reason ? strdup(d->buf + d->stop_reason) : NULL;
	free(r->revision);
	r->revision = d->revision ? strdup(d->buf + d->revision) : NULL;
	if (d->user_persisted)
		r->user_persisted = true;
	r->outcome = d->outcome;
	r->unsettled = d->unsettled;
	r->outcome.error_text = NULL;
	r->outcome.error_code = NULL;
	if (d->outcome.loop_guard_abort && !r->guard_text && r->error_text)
		r->guard_text = strdup(r->error_text); /* the attempt's breaker (§4.2) */
	if (r->loop_persisted) {
		/* the attempt ended because the guard aborted it, not the user */
		r->outcome.cancelled = false;
		r->outcome.loop_guard_abort = true;
	}
	if (r->cancelled)
		r->outcome.cancelled = true;

	/* the attempt's row (fire and forget: the reply is ignored) */
	const candidate_t *c = &r->cand[r->rs.cand.index];
	pc_store_attempt_t row = {
		.run_id = r->run_id,
		.index = r->attempts ? r->attempts - 1 : 0,
		.provider = c->provider->id,
		.model = c->model,
		.profile = r->rs.cand.profile < c->provider->profile_count
			? c->provider->profiles[r->rs.cand.profile].id : NULL,
		.reason = d->outcome.has_failure ? pc_failover_reason_name(d->outcome.failure.reason) : NULL,
		.status = d->outcome.cancelled ? "aborted"
			: d->outcome.timed_out ? "timeout"
			: (d->outcome.has_failure || d->outcome.prompt_error) ? "error" : "ok",
		.duration_ms = d->outcome.duration_ms,
	};
	pc_msg_t *req = NULL;
	if (pc_store_req_attempt(&row, &req) == 0)
		pc_send(pc_store_actor(r->agent->store), req);
	attempt_metrics(r->agent, c, &d->outcome);
	decide(ctx, r);
}

/* A chain's answer, if the run still waits for it (an abort meanwhile
 * has already ended the run). */
static void on_hook_done(pc_ctx_t *ctx, run_t *r, const pc_hook_done_msg_t *d)
{
	if (d->tag == PC__RUN_TAG_MODEL_RESOLVE && r->state == PC_RUN_LC_RESOLVING) {
		pc__run_set(r, PC_RUN_LC_IDLE, "model resolved");
		pc__run_apply_model_override(r, d);
		iterate(ctx, r);
	} else if (d->tag == PC__RUN_TAG_MESSAGE_SENDING && r->state == PC_RUN_LC_SENDING) {
		pc__run_set(r, PC_RUN_LC_IDLE, d->blocked ? "reply cancelled" : "reply checked");
		pc__run_apply_message_sending(r, d);
		pc__run_finish(ctx, r, PC_RUN_STATUS_OK, NULL, r->final_act);
	}
}

/* ---- the behaviour ---- */

static int run_receive(pc_ctx_t *ctx, void *state, pc_msg_t *msg)
{
	run_t *r = state;
	switch (msg->type) {
	case PC__MSG_RUN_START:
		r->started_ms = pc_runtime_now_ms();
		r->started_wall = pc__clock_wall_ms();
		r->self = pc_self(ctx);
		pc__run_set(r, PC_RUN_LC_IDLE, "start"); /* the registry's entry starts */
		__atomic_add_fetch(&r->agent->stats.runs_started, 1, __ATOMIC_RELAXED);
		log_start(r);
		if (!pc__run_hook_model_resolve(ctx, r))
			iterate(ctx, r);
		return 0;
	case PC_MSG_HOOK_DONE:
		on_hook_done(ctx, r, pc_msg_cdata(msg));
		return 0;
	case PC__MSG_ATTEMPT_DONE:
		on_attempt_done(ctx, r, msg);
		return 0;
	case PC__MSG_ATTEMPT_PHASE:
		r->streaming = pc_msg_u64(msg) == PC_RUN_STREAMING;
		r->activity = (pc_run_phase_t)pc_msg_u64(msg);
		tell_view(r);
		return 0;
	case PC_MSG_COMPACTION_DONE:
		if (r->state == PC_RUN_LC_COMPACTING)
			on_compaction_done(ctx, r, pc_msg_cdata(msg));
		return 0;
	case PC__MSG_TOOL_OUTCOME: {
		const pc__tool_outcome_t *o = pc_msg_cdata(msg);
		pc_loop_guard_verdict_t v;
		if (r->loop_persisted || !r->attempt ||
		    pc_loop_guard_observe(&r->rs.guard, o->name, o->args_hash, o->result_hash, &v) != 0 ||
		    !v.abort)
			return 0;
		/* §1.16: compaction did not break the loop; stop paying for it */
		char text[PC_RUN_MESSAGE_MAX];
		pc_loop_guard_message(&v, o->name, text, sizeof(text));
		free(r->guard_text);
		r->guard_text = strdup(text);
		r->loop_persisted = true;
		pc_send_signal(r->attempt, PC__MSG_ATTEMPT_ABORT);
		return 0;
	}
	case PC__MSG_RUN_TRUNCATED:
		if (r->state != PC_RUN_LC_TRUNCATING)
			return 0;
		pc__run_set(r, PC_RUN_LC_IDLE, "truncated");
		r->outcome.recovery.truncation = *(const int64_t *)pc_msg_cdata(msg) > 0 ? PC_RECOVERY_DONE
											: PC_RECOVERY_NOTHING;
		if (r->cancelled)
			r->outcome.cancelled = true;
		decide(ctx, r);
		return 0;
	case PC__MSG_RUN_NOTICE:
		send_notice(r);
		return 0;
	case PC__MSG_RUN_DELAY:
		r->delay = 0;
		if (r->state == PC_RUN_LC_DELAY) {
			pc__run_set(r, PC_RUN_LC_IDLE, "backoff over");
			iterate(ctx, r);
		}
		return 0;
	case PC_STORE_MSG_REPLY: {
		/* the question the run waits for: its end's row (a sync's answer
		 * comes through the attempt, PC__MSG_ATTEMPT_SETTLED) */
		if (r->state != PC_RUN_LC_ENDING || r->end_answered || msg->corr != r->end_corr)
			return 0;
		pc_store_reply_t rep;
		int rc = pc_store_reply_get(msg, &rep);
		rc = rc != 0 ? rc : rep.rc;
		r->end_answered = true;
		r->end_rc = rc != 0 ? rc : r->end_rc;
		if (!r->unsettled) /* else told with the attempt's writes' answer */
			end_answered(ctx, r);
		return 0;
	}
	case PC__MSG_ATTEMPT_SETTLED:
		on_settled(ctx, r, (int)(int64_t)pc_msg_u64(msg));
		return 0;
	case PC__MSG_RUN_ABORT:
		if (r->cancelled || pc_run_lc_ending(r->state))
			return 0;
		r->cancelled = true;
		if (r->attempt) {
			pc_send_signal(r->attempt, PC__MSG_ATTEMPT_ABORT);
		} else if (r->compaction) {
			pc_compaction_abort(r->compaction);
		} else if (r->state == PC_RUN_LC_TRUNCATING) {
			/* the rewrite finishes (it is short); its answer ends the run */
		} else {
			/* idle, sleeping, or waiting for a hook chain (whose
			 * answer then finds the run gone) */
			if (r->delay)
				pc_timer_cancel(pc_ctx_runtime(ctx), r->delay);
			r->delay = 0;
			iterate(ctx, r); /* finishes as aborted */
		}
		return 0;
	case PC__MSG_STEER_REJECTED:
		/* a steer the attempt could not inject before it ended */
		pc_send(r->session, pc__steer_copy(PC__MSG_STEER_REJECTED, pc_msg_cdata(msg)));
		return 0;
	case PC__MSG_STEER_TAKEN:
		/* or did: the session ends the message's run */
		pc_send(r->session, pc__text_msg(PC__MSG_STEER_TAKEN, pc_msg_cdata(msg)));
		return 0;
	case PC__MSG_RUN_STEER: {
		/* only a streaming attempt takes steering (never while compacting) */
		bool take = r->attempt && r->streaming && !r->cancelled;
		if (take)
			pc_send(r->attempt, pc__steer_copy(PC__MSG_ATTEMPT_STEER, pc_msg_cdata(msg)));
		if (msg->reply_to) {
			/* pc_agent_steer asked: the caller learns the answer */
			pc_msg_t *rep = pc_msg_new(PC__MSG_SESSION_STEER, sizeof(int64_t));
			if (rep) {
				*(int64_t *)pc_msg_data(rep) = take ? 0 : PC_ESTATE;
				pc_reply(msg, rep);
			}
		} else if (!take) {
			/* a steer-mode message: it runs after this run instead */
			pc_send(r->session, pc__steer_copy(PC__MSG_STEER_REJECTED, pc_msg_cdata(msg)));
		}
		return 0;
	}
	default:
		return 0;
	}
}

static void run_stop(pc_ctx_t *ctx, void *state, int reason)
{
	(void)reason;
	run_t *r = state;
	if (r->state == PC_RUN_LC_ENDING) {
		/* stopped before the store answered: the end is told as
		 * unconfirmed rather than lost */
		tell_end(r, PC_ESTOPPED, "stopped while ending");
	} else if (!pc_run_lc_terminal(r->state)) {
		/* Stopped without finishing (shutdown, a failed handler): the
		 * run still ends once, as an error. */
		pc__run_set(r, PC_RUN_LC_ERROR, "stopped");
		pc__metrics_run_end(r->agent, PC_RUN_STATUS_ERROR, r->started_ms != 0, pc__run_ms(r));
		pc__run_done_send(r->session, r->run_id, pc_run_lc_registry_status(r->state), "stopped", false,
				  "the run was stopped",
				  "{\"phase\":\"error\",\"status\":\"error\",\"error\":\"the run was stopped\","
				  "\"errorKind\":\"stopped\",\"payloads\":[]}");
		pc__run_hook_agent_end(r, PC_RUN_STATUS_ERROR, "the run was stopped", NULL);
		__atomic_add_fetch(&r->agent->stats.runs_finished, 1, __ATOMIC_RELAXED);
	}
	if (r->delay)
		pc_timer_cancel(pc_ctx_runtime(ctx), r->delay);
	if (r->notice)
		pc_timer_cancel(pc_ctx_runtime(ctx), r->notice);
	if (r->attempt) {
		pc_actor_stop(r->attempt, PC_EXIT_SHUTDOWN);
		pc_actor_release(r->attempt);
	}
	if (r->compaction) {
		pc_compaction_abort(r->compaction);
		pc_actor_release(r->compaction);
	}
	pc_lane_release(r->agent->lane, r->lane_ticket);
	pc_actor_release(r->session);
	pc_event_bus_release(r->bus);
	pc__loop_box_release(r->loop);
	pc_run_state_fini(&r->rs);
	free(r->final_act);
	free(r->deferred);
	cJSON_Delete(r->end_data); /* before the payloads it refers to */
	free(r->end_message);
	free(r->revision);
	free(r->hook_model);
	free(r->error_text);
	free(r->payloads);
	free(r->stop_reason);
	free(r->provider_message);
	free(r->guard_text);
	for (uint32_t i = 0; i < r->n_failed; i++)
		free(r->failed[i].error);
	free(r->run_id);
	free(r->key);
	free(r->prompt);
	free(r->extra);
	free(r->idem);
	free(r->model_buf);
	pc_agent_t *a = r->agent;
	free(r);
	__atomic_sub_fetch(&a->stats.runs_live, 1, __ATOMIC_RELEASE);
}

static const pc_behavior_t run_behavior = {"run", run_receive, run_stop};

/* Adds `ref` to the chain unless it is already there or the chain is full. */
static void chain_add(pc_model_ref_t *refs, uint32_t *n, const pc_model_ref_t *ref)
{
	for (uint32_t i = 0; i < *n; i++)
		if (strcmp(refs[i].provider, ref->provider) == 0 && strcmp(refs[i].model, ref->model) == 0)
			return;
	if (*n < PC_RUN_MAX_CANDIDATES)
		refs[(*n)++] = *ref;
}

/* The fallback chain (§1.12): the run's model (or the configured primary),
 * the configured fallbacks, then the configured primary, each once, so a
 * per-run model override still ends on the primary. */
static int resolve_chain(run_t *r, const char *model)
{
	const pc_config_t *c = r->agent->cfg;
	pc_model_ref_t refs[PC_RUN_MAX_CANDIDATES];
	uint32_t n = 0;
	if (model) {
		pc_model_ref_t ref;
		int rc = pc_config_model_ref_parse(model, &ref, &r->model_buf);
		if (rc != 0)
			return rc;
		chain_add(refs, &n, &ref);
	} else {
		chain_add(refs, &n, &c->agent.model);
	}
	for (size_t i = 0; i < c->agent.fallback_count; i++)
		chain_add(refs, &n, &c->agent.fallbacks[i]);
	chain_add(refs, &n, &c->agent.model);
	for (uint32_t i = 0; i < n; i++) {
		const pc_provider_config_t *p = pc_config_provider(c, refs[i].provider);
		if (!p)
			return PC_ENOTFOUND;
		const pc_model_config_t *m = pc_config_model(p, refs[i].model);
		r->cand[i] = (candidate_t){
			.provider = p,
			.model = refs[i].model,
			.context_tokens = pc_config_context_tokens(c, &refs[i]),
			.max_tokens = m ? m->max_tokens : 0,
		};
	}
	r->n_cand = n;
	return 0;
}

int pc__run_spawn(pc_agent_t *a, const pc__run_params_t *p, pc_actor_t *session, pc_actor_t **out)
{
	/* malloc, not a slab: runs come and go, and a slab would keep the
	 * peak of a burst resident for ever */
	run_t *r = calloc(1, sizeof(*r));
	if (!r)
		return PC_ENOMEM;
	r->agent = a;
	r->run_id = strdup(p->run_id);
	r->key = strdup(p->session_key);
	r->epoch = p->epoch;
	r->prompt = strdup(p->prompt);
	r->extra = p->extra_system_prompt ? strdup(p->extra_system_prompt) : NULL;
	r->idem = p->idempotency_key ? strdup(p->idempotency_key) : NULL;
	r->timeout_ms = p->timeout_ms ? p->timeout_ms : a->cfg->agent.run_timeout_ms;
	r->lane_ticket = p->lane_ticket;
	r->activity = r->told = PC_RUN_STARTING; /* as the session admitted it */
	int rc = (!r->run_id || !r->key || !r->prompt || (p->extra_system_prompt && !r->extra) ||
		  (p->idempotency_key && !r->idem))
			 ? PC_ENOMEM
			 : 0;
	if (rc == 0)
		rc = resolve_chain(r, p->model);
	if (rc == 0)
		r->loop = pc__loop_box_new(a->cfg);
	if (rc == 0) {
		const pc_agent_defaults_t *d = &a->cfg->agent;
		pc_run_config_t rc_cfg;
		pc_run_config_defaults(&rc_cfg);
		rc_cfg.candidate_count = r->n_cand;
		for (uint32_t i = 0; i < r->n_cand; i++) {
			rc_cfg.profile_counts[i] = (uint32_t)r->cand[i].provider->profile_count;
			/* §1.12: one transient probe per provider per run */
			uint32_t j = 0;
			while (r->cand[j].provider != r->cand[i].provider)
				j++;
			rc_cfg.provider_id[i] = (uint8_t)j;
		}
		rc_cfg.retries = d->retries;
		rc_cfg.rate_limit_rotations = d->rate_limit_rotations;
		rc_cfg.overload_rotations = d->overload_rotations;
		rc_cfg.overloaded_backoff_ms = d->overloaded_backoff_ms;
		rc_cfg.idle_breaker_cap = d->idle_breaker_cap;
		rc_cfg.loop_guard_enabled = d->loop_guard;
		if (d->loop_detection.post_compaction_window)
			rc_cfg.loop_guard_window = d->loop_detection.post_compaction_window;
		rc_cfg.think_level = p->has_think ? p->think : d->think;
		rc_cfg.has_session_key = true;
		rc = pc_run_state_init(&r->rs, &rc_cfg);
	}
	pc_actor_t *actor = NULL;
	if (rc == 0) {
		r->session = pc_actor_retain(session);
		r->bus = pc_event_bus_retain(p->bus);
		__atomic_add_fetch(&a->stats.runs_live, 1, __ATOMIC_RELAXED);
		rc = pc_spawn_start(a->rt, &run_behavior, r, PC__MSG_RUN_START, &actor);
		if (rc != 0) {
			__atomic_sub_fetch(&a->stats.runs_live, 1, __ATOMIC_RELEASE);
			pc_actor_release(r->session);
			pc_event_bus_release(r->bus);
		}
	}
	if (rc != 0) {
		free(r->run_id);
		free(r->key);
		free(r->prompt);
		free(r->extra);
	free(r->idem);
		free(r->model_buf);
		pc__loop_box_release(r->loop);
		pc_run_state_fini(&r->rs);
		free(r);
		return rc;
	}
	*out = actor;
	return 0;
}
