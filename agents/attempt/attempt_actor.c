/*
 * The attempt actor (spec layers 2 and 3, §2.1, §3.1): one try at the
 * run's prompt against one provider, model, auth profile and think level.
 *
 *   LOADING   the transcript (store) and the context files (cached, or
 *             read on the blocking pool) arrive; history hygiene (§2.2);
 *             the system prompt is built; the preflight check (§2.7)
 *   MODEL     one streaming model call (a provider-stream actor); deltas
 *             become assistant / thinking events
 *   TOOLS     the model asked for tools: each call is a tool actor,
 *             sequential or as a parallel batch; steering is checked at
 *             the boundaries (§3.4); results are appended and the loop
 *             goes back to MODEL
 *   FINISHING every transcript write is acknowledged; then one
 *             PC__MSG_ATTEMPT_DONE goes to the run and the actor stops
 *
 * An abort or the attempt's timer (a runtime timer, never a polled flag)
 * aborts the model call and the tools in flight; the attempt reports once
 * they have answered. Its cleanup runs exactly once in the stop handler,
 * which also reports to the run when the attempt stopped any other way.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "io/io.h"
#include "runtime/blocking.h"
#include "../compaction/compaction.h"
#include "agents/providers/providers.h"
#include "attempt_internal.h"
#include "context_guard.h"
#include "agents/obs/obs.h"
#include "payload.h"
#include "steering.h"
#include "runtime/clock.h"

#define BASE_SYSTEM_PROMPT                                                                         \
	"You are a personal assistant running inside Pincer. Answer the user directly and "    \
	"concisely. Use the tools when they help; never invent tool results."

static int load_history(pc_ctx_t *ctx, attempt_t *t);
static void prompt_ready(pc_ctx_t *ctx, attempt_t *t);

/* ---- small helpers ---- */

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

void pc__att_set_error(attempt_t *t, const char *text)
{
	if (t->error_text || !text)
		return;
	t->error_text = strdup(text);
}

/* Publishes `data` (consumed) on the run's bus. A bus keeps no event but
 * the terminal one, so with nobody subscribed there is nothing to print. */
void pc__att_emit(attempt_t *t, pc_event_stream_t stream, cJSON *data, bool droppable)
{
	if (!data)
		return;
	if (!pc_event_bus_listened(t->bus)) {
		cJSON_Delete(data);
		return;
	}
	char *s = pc_json_print(data);
	cJSON_Delete(data);
	if (!s)
		return;
	pc_event_bus_emit(t->bus, stream, s, strlen(s), droppable, false, NULL);
	cJSON_free(s);
}

cJSON *pc__att_obj_phase(const char *phase)
{
	cJSON *o = cJSON_CreateObject();
	if (o && !cJSON_AddStringToObject(o, "phase", phase)) {
		cJSON_Delete(o);
		return NULL;
	}
	return o;
}

/* ---- persistence ---- */

/* A usage record the store did not take: counted and logged. */
static void usage_write_failed(attempt_t *t, int rc)
{
	__atomic_add_fetch(&t->agent->stats.usage_write_errors, 1, __ATOMIC_RELAXED);
	if (pc_log_enabled(t->agent->log, PC_LOG_WARN))
		(void)pc_log_kv(t->agent->log, PC_LOG_WARN, "usage record not stored", PC_LF_STR("runId", t->run_id),
				PC_LF_STR("sessionKey", t->key), PC_LF_INT("attempt", t->index),
				PC_LF_INT("call", (int64_t)(t->call_seq ? t->call_seq - 1 : 0)),
				PC_LF_STR("error", pc_store_strerror(rc)));
}

/* A stored message the feed hears of once the store has numbered it. */
struct pc__att_fed {
	uint64_t corr;
	char *idem;      /* the run's idempotency key, for its prompt; or NULL */
	char *role_json; /* the role, the content and the run id (or ""), each
			  * ending in its NUL */
};

/* Keeps what the feed is told of the write asked under `corr` (when
 * nobody listens, or memory ran out, the feed misses it: it is bounded and
 * lossy anyway, and its readers see the gap). */
static void feed_later(attempt_t *t, uint64_t corr, const pc_store_msg_t *m, const char *idem)
{
	if (!pc__agent_feed_listened(t->agent) || PC__GROW(t->fed, t->fed_cap, t->fed_n + 1, 4))
		return;
	const char *run = m->run_id ? m->run_id : "";
	size_t rl = strlen(m->role) + 1, jl = strlen(m->content) + 1, nl = strlen(run) + 1;
	char *s = malloc(rl + jl + nl);
	char *k = idem ? strdup(idem) : NULL;
	if (!s || (idem && !k)) {
		free(s);
		free(k);
		return;
	}
	memcpy(s, m->role, rl);
	memcpy(s + rl, m->content, jl);
	memcpy(s + rl + jl, run, nl);
	t->fed[t->fed_n++] = (struct pc__att_fed){corr, k, s};
}

/* The store answered `corr`: a kept write goes to the feed, under the seq
 * it was stored with, if it was. */
static void feed_answered(attempt_t *t, uint64_t corr, const pc_store_reply_t *r, bool stored)
{
	for (size_t i = 0; i < t->fed_n; i++) {
		if (t->fed[i].corr != corr)
			continue;
		char *s = t->fed[i].role_json, *json = s + strlen(s) + 1, *run = json + strlen(json) + 1;
		/* the message's own run: a made-up result is the cut-off run's */
		if (stored)
			pc__agent_feed_message(t->agent, t->key, run, r->seq, t->fed[i].idem, s, json);
		free(s);
		free(t->fed[i].idem);
		/* kept in the order asked, which is the feed's */
		memmove(&t->fed[i], &t->fed[i + 1], (t->fed_n - i - 1) * sizeof(t->fed[0]));
		t->fed_n--;
		return;
	}
}

/* Appends `msg` to the transcript; the reply is counted. The write is
 * lazy: a turn's messages need to be durable only when the attempt ends or
 * compaction reads them (appends_durable), so they share one commit
 * instead of taking one each. `idem`: the key the message is named by in
 * the feed (the run's, for its prompt), or NULL. */
static int persist_msg(pc_ctx_t *ctx, attempt_t *t, const pc_store_msg_t *msg, const char *idem)
{
	pc_store_msg_t m = *msg;
	pc_msg_t *req = NULL;
	uint64_t corr = 0;
	int rc = pc_store_req_append(t->key, t->epoch, &m, &req);
	if (rc == 0) {
		pc_store_req_lazy(req);
		rc = pc_ask(ctx, pc_store_actor(t->agent->store), req, &corr);
	}
	if (rc == 0) {
		t->appends_pending++;
		t->lazy_unsynced++;
		feed_later(t, corr, &m, idem);
	}
	return rc;
}

/* persist_msg of a message of this run, `json` printed by cJSON. */
static int persist(pc_ctx_t *ctx, attempt_t *t, const char *role, const char *json, const char *tool_ids,
		   const char *idem)
{
	pc_store_msg_t m = {.role = role, .content = json, .tool_call_ids = tool_ids, .run_id = t->run_id,
			    .json_checked = true /* printed by cJSON */};
	return persist_msg(ctx, t, &m, idem);
}

int pc__att_persist_text(pc_ctx_t *ctx, attempt_t *t, const char *role, const char *json, const char *tool_ids)
{
	return persist(ctx, t, role, json, tool_ids, NULL);
}

static int persist_json(pc_ctx_t *ctx, attempt_t *t, const char *role, cJSON *msg, const char *tool_ids,
			const char *idem)
{
	char *content = pc_json_print(msg);
	if (!content)
		return PC_ENOMEM;
	int rc = persist(ctx, t, role, content, tool_ids, idem);
	cJSON_free(content);
	return rc;
}

/* As pc__att_persist_text, `msg` (borrowed) printed. */
int pc__att_persist(pc_ctx_t *ctx, attempt_t *t, const char *role, cJSON *msg, const char *tool_ids)
{
	return persist_json(ctx, t, role, msg, tool_ids, NULL);
}

/*
 * Records the usage `u` of the model call just answered (spec §11.3: every
 * call's usage, so a run's tokens are exact sums later), fenced by the
 * session's lease like the transcript. A lazy write: it commits with the
 * turn's messages. Its answer is awaited like theirs, but a refusal only
 * counts and logs: a run is not failed for its bookkeeping.
 */
static void record_usage(pc_ctx_t *ctx, attempt_t *t, const pc_usage_t *u)
{
	if (PC__GROW(t->usage_corrs, t->usage_cap, t->usage_n + 1, 4)) {
		usage_write_failed(t, PC_ENOMEM);
		return;
	}
	pc_store_usage_t rec = {.run_id = t->run_id, .session_key = t->key, .attempt = t->index,
				.call = (uint32_t)(t->call_seq - 1), .provider = t->provider->id,
				.model = t->model, .input = u->input, .output = u->output,
				.cache_read = u->cache_read, .cache_write = u->cache_write, .total = u->total};
	pc_msg_t *req = NULL;
	uint64_t corr = 0;
	int rc = pc_store_req_usage_add(&rec, t->epoch, &req);
	if (rc == 0) {
		pc_store_req_lazy(req);
		rc = pc_ask(ctx, pc_store_actor(t->agent->store), req, &corr);
	}
	if (rc != 0) {
		usage_write_failed(t, rc);
		return;
	}
	t->usage_corrs[t->usage_n++] = corr;
	t->lazy_unsynced++;
}

/* True (and the record forgotten) when `corr` answers a usage record. */
static bool usage_answered(attempt_t *t, uint64_t corr)
{
	for (size_t i = 0; i < t->usage_n; i++) {
		if (t->usage_corrs[i] == corr) {
			t->usage_corrs[i] = t->usage_corrs[--t->usage_n];
			return true;
		}
	}
	return false;
}

/* Whether every transcript write and usage record is acknowledged. If not,
 * the lazy ones sent since the last sync are asked to commit now rather
 * than after the store's lazy wait (which still commits them should the
 * sync fail to go). */
static bool appends_durable(pc_ctx_t *ctx, attempt_t *t)
{
	if (!t->appends_pending && !t->usage_n)
		return true;
	pc_msg_t *req = NULL;
	if (t->lazy_unsynced && pc_store_req_sync(&req) == 0 &&
	    pc_ask(ctx, pc_store_actor(t->agent->store), req, NULL) == 0) {
		t->appends_pending++;
		t->lazy_unsynced = 0;
	}
	return false;
}

/* The ids of an assistant message's tool calls as a JSON array text, or NULL. */
static char *tool_call_ids(const cJSON *msg)
{
	const cJSON *content = cJSON_GetObjectItemCaseSensitive(msg, "content");
	cJSON *ids = cJSON_CreateArray();
	const cJSON *b;
	cJSON_ArrayForEach(b, content) {
		const cJSON *type = cJSON_GetObjectItemCaseSensitive(b, "type");
		const cJSON *id = cJSON_GetObjectItemCaseSensitive(b, "id");
		if (cJSON_IsString(type) && !strcmp(type->valuestring, "toolCall") && cJSON_IsString(id))
			cJSON_AddItemToArray(ids, cJSON_CreateString(id->valuestring));
	}
	char *s = NULL;
	if (ids && cJSON_GetArraySize(ids) > 0)
		s = pc_json_print(ids);
	cJSON_Delete(ids);
	return s;
}

/* ---- the report ---- */

static uint32_t put(pc__attempt_done_t *d, size_t *off, const char *s)
{
	if (!s)
		return 0;
	size_t n = strlen(s) + 1;
	uint32_t at = (uint32_t)*off;
	memcpy(d->buf + *off, s, n);
	*off += n;
	return at;
}

/* The final texts of the last assistant message, tags stripped. */
static cJSON *assistant_texts(const cJSON *msg)
{
	cJSON *texts = cJSON_CreateArray();
	const cJSON *b;
	cJSON_ArrayForEach(b, cJSON_GetObjectItemCaseSensitive(msg, "content")) {
		const cJSON *type = cJSON_GetObjectItemCaseSensitive(b, "type");
		const cJSON *text = cJSON_GetObjectItemCaseSensitive(b, "text");
		if (!cJSON_IsString(type) || strcmp(type->valuestring, "text") || !cJSON_IsString(text))
			continue;
		char *clean = NULL;
		if (pc_payload_strip_tags(text->valuestring, false, &clean) == 0 && clean[0])
			cJSON_AddItemToArray(texts, cJSON_CreateString(clean));
		free(clean);
	}
	return texts;
}

bool pc__att_has_block(const cJSON *msg, const char *kind)
{
	const cJSON *b;
	cJSON_ArrayForEach(b, cJSON_GetObjectItemCaseSensitive(msg, "content")) {
		const cJSON *type = cJSON_GetObjectItemCaseSensitive(b, "type");
		if (cJSON_IsString(type) && !strcmp(type->valuestring, kind))
			return true;
	}
	return false;
}

/* ---- the attempt's state (attempt_lifecycle.h) ---- */

/*
 * The one place the attempt's state changes. A transition the table does
 * not allow is refused (the state stays), counted and logged. An allowed
 * one is traced (PINCER_TRACE=attempt) as the attempt's run id and index.
 */
void pc__att_set(attempt_t *t, pc_att_lc_t to, const char *why)
{
	pc_att_lc_t from = t->state;
	if (!pc_att_lc_legal(from, to)) {
		pc__metrics_illegal(&t->agent->metrics, PC__LC_ATTEMPT);
		(void)pc_log_kv(t->agent->log, PC_LOG_WARN, "illegal attempt transition", PC_LF_STR("runId", t->run_id),
				PC_LF_INT("attempt", t->index), PC_LF_STR("from", pc_att_lc_name(from)),
				PC_LF_STR("to", pc_att_lc_name(to)), PC_LF_STR("why", why));
		return;
	}
	t->state = to;
	if (t->agent->trace & PC_TRACE_ATTEMPT) {
		char id[PC_RUN_ID_MAX + 16];
		snprintf(id, sizeof(id), "%s/%u", t->run_id, (unsigned)t->index);
		pc_trace_transition(t->agent->log, "attempt", id, pc_att_lc_name(from), pc_att_lc_name(to), why);
	}
}

/* Describes the attempt in a pc_run_outcome_t and sends it to the run:
 * once, as the attempt's end (`why`, for the trace). */
static void report(attempt_t *t, const char *why)
{
	if (t->state == PC_ATT_LC_DONE)
		return;
	pc__att_set(t, PC_ATT_LC_DONE, why);
	pc_run_outcome_t o = {0};
	o.now_ms = (uint64_t)pc__clock_wall_ms();
	o.duration_ms = (int64_t)(pc_runtime_now_ms() - (uint64_t)t->started_ms);
	o.cancelled = t->cancelled;
	o.usage = t->usage;
	o.last_call = t->last_usage;
	o.idle_timed_out = t->idle_timed_out;
	o.completed_progress = t->completed_call || t->streamed_text;
	o.output_started = t->streamed_text || t->tool_calls_run > 0;
	o.timed_out = t->timed_out || t->idle_timed_out;
	o.timed_out_by_run_budget = t->timed_out;
	o.timed_out_during_compaction = t->timed_out_in_compaction;
	o.compaction_count = t->compactions;
	o.timed_out_during_tool = t->timed_out && t->timed_out_in_tool;
	o.prompt_tokens = pc_usage_prompt_tokens(&t->last_usage);
	o.context_tokens = (int64_t)t->context_tokens;
	o.user_turn_persisted = t->user_persisted;
	o.prompt_error = t->prompt_error;
	o.has_failure = t->has_failure;
	o.failure = t->failure;
	o.has_assistant = t->has_assistant;
	o.assistant_stop_error = t->assistant_error;
	o.tool_metas = t->tool_calls_run;
	o.tool_error = t->tool_error_name != NULL;
	o.replay_unsafe = t->side_effects;
	o.had_side_effects = t->side_effects;
	o.pending_work = o.tool_error || t->side_effects;
	o.compaction_failure_text = t->compaction_failed;
	o.oversized_tool_results = t->oversized_results;
	o.finalize_revision_requested = t->finalize_revise;
	o.loop_guard_abort = t->loop_stopped;

	cJSON *payloads = NULL;
	if (t->final_message && !t->assistant_error) {
		cJSON *texts = assistant_texts(t->final_message);
		pc_tool_error_t te = {.tool_name = t->tool_error_name, .error = t->tool_error_text,
				      .mutating = t->tool_error_mutating,
				      .exec_like = pc_payload_tool_is_exec_like(t->tool_error_name)};
		pc_payload_input_t in = {.assistant_texts = texts,
					 .last_tool_error = t->tool_error_name ? &te : NULL};
		if (pc_payload_build(&in, &payloads) != 0)
			payloads = NULL;
		int n_texts = cJSON_GetArraySize(texts);
		cJSON_Delete(texts);
		o.assistant_texts = (uint32_t)n_texts;
		o.visible_text = n_texts > 0;
		o.reasoning_only = n_texts == 0 && pc__att_has_block(t->final_message, "thinking") &&
				   !pc__att_has_block(t->final_message, "toolCall");
		o.empty_response = !pc__att_has_block(t->final_message, "text") &&
				   !pc__att_has_block(t->final_message, "thinking") &&
				   !pc__att_has_block(t->final_message, "toolCall");
		o.nonvisible_retry_eligible = !o.pending_work;
		/* resolveIncompleteTurnPayloadText (§1.14): a finished turn that
		 * left the user nothing to read */
		o.incomplete_turn = !o.visible_text && (o.empty_response || o.reasoning_only) &&
				    !t->cancelled && !o.timed_out && !o.tool_error;
	}
	o.output_tokens = t->usage.output;
	o.payload_count = payloads ? (uint32_t)cJSON_GetArraySize(payloads) : 0;
	/* every text the model wrote was the silent token (§5.5) */
	o.silent = o.assistant_texts > 0 && o.payload_count == 0;
	o.nothing_returned = !t->has_assistant && !t->cancelled && !t->timed_out &&
			     t->prompt_error == PC_PROMPT_ERR_NONE && t->tool_calls_run == 0;

	char *pay = payloads ? pc_json_print(payloads) : NULL;
	cJSON_Delete(payloads);
	size_t need = sizeof(pc__attempt_done_t) + 4 + (t->error_text ? strlen(t->error_text) + 1 : 0) +
		      (pay ? strlen(pay) + 1 : 0) + (t->stop_reason ? strlen(t->stop_reason) + 1 : 0) +
		      (t->finalize_reason ? strlen(t->finalize_reason) + 1 : 0) +
		      (t->provider_message ? strlen(t->provider_message) + 1 : 0);
	pc_msg_t *m = pc_msg_new(PC__MSG_ATTEMPT_DONE, need);
	if (m) {
		pc__attempt_done_t *d = pc_msg_data(m);
		memset(d, 0, sizeof(*d));
		size_t off = 1; /* offset 0 means "absent" */
		d->buf[0] = '\0';
		d->outcome = o;
		d->error_text = put(d, &off, t->error_text);
		d->payloads = put(d, &off, pay);
		d->stop_reason = put(d, &off, t->stop_reason);
		d->revision = put(d, &off, t->finalize_reason);
		d->provider_status = t->provider_status;
		d->provider_message = put(d, &off, t->provider_message);
		d->user_persisted = t->user_persisted;
		d->tool_calls = t->tool_calls_run;
		d->unsettled = t->settling;
		pc_send(t->run, m);
	}
	cJSON_free(pay);
}

/* Steering that never reached a boundary goes back: the session runs it
 * as a followup instead of losing it. Told before the run can end. */
static void reject_steers(attempt_t *t)
{
	for (size_t i = 0; i < t->steer_n; i++) {
		pc_send(t->run, pc__steer_copy(PC__MSG_STEER_REJECTED, t->steer[i]));
		free(t->steer[i]);
	}
	t->steer_n = 0;
}

/* Whether the attempt may report before its writes are durable: its
 * outcome no longer depends on them (it ended cleanly, and a refusal now
 * would not change what the run does next), and some are still only
 * queued, so that they can commit with the run's end (one commit a turn
 * instead of two) rather than with a sync of their own. */
static bool settle_later(const attempt_t *t)
{
	return t->lazy_unsynced && !t->store_error && t->prompt_error == PC_PROMPT_ERR_NONE && !t->aborting &&
	       !t->cancelled && !t->timed_out && !t->idle_timed_out && !t->has_failure;
}

/* Every write of a settling attempt is answered: the run learns how, once,
 * and the attempt ends. */
static void settle(pc_ctx_t *ctx, attempt_t *t, int rc)
{
	if (t->settled)
		return;
	t->settled = true;
	if (rc == 0 && t->have_history && t->messages) {
		pc__transcript_keep(t->agent, t->key, t->messages);
		t->messages = NULL;
	}
	(void)pc_send_u64(t->run, PC__MSG_ATTEMPT_SETTLED, (uint64_t)(int64_t)rc);
	if (ctx)
		pc_exit(ctx, PC_EXIT_NORMAL);
}

/* Ends the attempt once nothing is in flight and every write is
 * acknowledged, or reports it first when they may settle later. */
static void maybe_finish(pc_ctx_t *ctx, attempt_t *t)
{
	if (t->settling) {
		if (!t->appends_pending && !t->usage_n)
			settle(ctx, t, t->store_error);
		return;
	}
	if (t->state != PC_ATT_LC_FINISHING || t->call || t->compaction)
		return;
	for (size_t i = 0; i < t->n_calls; i++)
		if (t->slots[i].actor)
			return;
	t->settling = (t->appends_pending || t->usage_n) && settle_later(t);
	if (!t->settling && !appends_durable(ctx, t))
		return;
	if (t->store_error && t->prompt_error == PC_PROMPT_ERR_NONE && !t->cancelled) {
		t->prompt_error = PC_PROMPT_ERR_SETUP;
		pc__att_set_error(t, pc_store_strerror(t->store_error));
	}
	/* sessionLikelyHasOversizedToolResults: what §1.7 step 7c could cut;
	 * only an overflow asks, so only an overflow pays for the walk */
	t->oversized_results = t->messages && t->has_failure &&
			       t->failure.reason == PC_FAILOVER_CONTEXT_OVERFLOW &&
			       pc_ctx_reducible_chars(t->messages, pc_ctx_tool_result_max_chars(t->context_tokens, 0)) > 0;
	if (t->settling) {
		report(t, "reported, writes unsettled");
		reject_steers(t);
		return;
	}
	/* every message of the context was acknowledged: it is the stored
	 * transcript, and the session's next attempt can start from it */
	if (!t->store_error && t->prompt_error != PC_PROMPT_ERR_SETUP && t->have_history && t->messages) {
		pc__transcript_keep(t->agent, t->key, t->messages);
		t->messages = NULL;
	}
	report(t, "reported");
	pc_exit(ctx, PC_EXIT_NORMAL);
}

void pc__att_finish(pc_ctx_t *ctx, attempt_t *t, const char *why)
{
	/* a second end (a fenced write's abort while finishing) changes nothing */
	if (t->state != PC_ATT_LC_FINISHING)
		pc__att_set(t, PC_ATT_LC_FINISHING, why);
	if (t->timer) {
		pc_timer_cancel(pc_ctx_runtime(ctx), t->timer);
		t->timer = 0;
	}
	maybe_finish(ctx, t);
}

/* Abort and timeout: stop what is in flight; its answers finish the attempt. */
static void abort_all(pc_ctx_t *ctx, attempt_t *t)
{
	/* reported already (settling): nothing is left to stop */
	if (t->aborting || t->state == PC_ATT_LC_DONE)
		return;
	t->aborting = true;
	if (t->call)
		pc_model_call_abort(t->call);
	for (size_t i = 0; i < t->n_calls; i++)
		if (t->slots[i].actor)
			pc_tool_abort(t->slots[i].actor);
	if (t->state == PC_ATT_LC_TOOLS)
		pc__att_abort_tools(ctx, t);
	if (t->compaction) {
		pc_compaction_abort(t->compaction); /* its DONE finishes the attempt */
		return;
	}
	if (t->state == PC_ATT_LC_LOADING || (!t->call && t->state != PC_ATT_LC_TOOLS))
		pc__att_finish(ctx, t, "aborted");
	else if (t->state == PC_ATT_LC_TOOLS && t->calls_done == t->n_calls)
		pc__att_finish(ctx, t, "aborted");
}

/* ---- the system prompt ---- */

static int build_system_prompt(attempt_t *t)
{
	const pc_agent_defaults_t *d = &t->agent->cfg->agent;
	pc__buf_t b = {0};
	int rc = 0;
	if (t->sys_prepend) {
		rc = pc__buf_append_str(&b, t->sys_prepend);
		if (rc == 0)
			rc = pc__buf_append_str(&b, "\n\n");
	}
	if (rc == 0)
		rc = pc__buf_append_str(&b, t->sys_replace      ? t->sys_replace
					    : d->system_prompt ? d->system_prompt
							       : BASE_SYSTEM_PROMPT);
	if (rc == 0 && t->context_text)
		rc = pc__buf_append_str(&b, t->context_text);
	for (size_t i = 0; rc == 0 && i < t->addition_count; i++) {
		rc = pc__buf_append_str(&b, "\n\n");
		if (rc == 0)
			rc = pc__buf_append_str(&b, t->additions[i]);
	}
	if (rc == 0 && t->extra && t->extra[0]) {
		rc = pc__buf_append_str(&b, "\n\n");
		if (rc == 0)
			rc = pc__buf_append_str(&b, t->extra);
	}
	if (rc == 0 && t->sys_append) {
		rc = pc__buf_append_str(&b, "\n\n");
		if (rc == 0)
			rc = pc__buf_append_str(&b, t->sys_append);
	}
	if (rc == 0)
		t->system_prompt = b.p; /* the buffer's bytes, NUL-terminated */
	else
		pc__buf_free(&b);
	return rc;
}

/* ---- the model call ---- */

void pc__att_fail_setup(pc_ctx_t *ctx, attempt_t *t, const char *why)
{
	t->prompt_error = PC_PROMPT_ERR_SETUP;
	pc__att_set_error(t, why);
	pc__att_finish(ctx, t, "setup failed");
}

int pc__att_model_call(pc_ctx_t *ctx, attempt_t *t, const char *why)
{
	/* §3.3 live context guard: oversized tool results are cut in a copy;
	 * an estimate over the limit is the preemptive overflow error. */
	cJSON *guarded = NULL;
	pc_ctx_guard_result_t g;
	int rc = pc_ctx_guard(t->messages, t->context_tokens, &guarded, &g);
	if (rc != 0) {
		pc__att_fail_setup(ctx, t, "context guard failed");
		return 0;
	}
	if (g.overflow) {
		cJSON_Delete(guarded);
		t->has_failure = true;
		t->failure.reason = PC_FAILOVER_CONTEXT_OVERFLOW;
		t->failure.compact = true;
		t->prompt_error = PC_PROMPT_ERR_PROVIDER;
		pc__att_set_error(t, PC_CTX_PREEMPTIVE_OVERFLOW_MESSAGE);
		pc__att_finish(ctx, t, "context overflow");
		return 0;
	}
	pc_request_params_t rp = {
		.api = t->provider->api,
		.model = t->model,
		.system_prompt = t->system_prompt,
		.messages = guarded ? guarded : t->messages,
		.tools = t->tools,
		/* the agent's tools, printed once; hooks may have narrowed them */
		.tools_json = t->tools && t->tools == t->agent->tool_schemas ? t->agent->tools_json[t->provider->api] : NULL,
		.max_tokens = t->max_tokens,
		.thinking = t->think,
	};
	char *body = NULL;
	rc = pc_request_body(&rp, &body);
	cJSON_Delete(guarded);
	if (rc != 0) {
		pc__att_fail_setup(ctx, t, "could not build the model request");
		return 0;
	}
	size_t nh = 0;
	while (t->headers && t->headers[nh])
		nh++;
	/* the call as the trace names it: the attempt's id and the call's number */
	char call_id[PC_RUN_ID_MAX + 32];
	snprintf(call_id, sizeof(call_id), "%s/%u/%llu", t->run_id, (unsigned)t->index,
		 (unsigned long long)(t->call_seq + 1));
	pc_model_call_config_t mc = {
		.api = t->provider->api,
		.url = t->url,
		.headers = (const char *const *)t->headers,
		.header_count = nh,
		.body = body,
		.body_len = strlen(body),
		.provider = t->provider->id,
		.total_timeout_ms = (uint32_t)(t->provider->request_timeout_ms > UINT32_MAX
						       ? UINT32_MAX : t->provider->request_timeout_ms),
		.idle_timeout_ms = (uint32_t)(t->provider->idle_timeout_ms > UINT32_MAX
						      ? UINT32_MAX : t->provider->idle_timeout_ms),
		.http2_prior_knowledge = t->provider->http2 == PC_PROVIDER_HTTP2_PRIOR_KNOWLEDGE,
		.deltas = true,
		.tag = ++t->call_seq,
		.log = t->agent->log,
		.illegal = t->agent->metrics.illegal[PC__LC_MODEL_CALL],
		.trace = (t->agent->trace & PC_TRACE_MODEL_CALL) != 0,
		.trace_id = call_id,
	};
	rc = pc_model_call_start(t->agent->io, &mc, pc_self(ctx), &t->call);
	cJSON_free(body);
	if (rc != 0) {
		pc__att_fail_setup(ctx, t, "could not start the model call");
		return 0;
	}
	pc__att_set(t, PC_ATT_LC_MODEL, why);
	t->text.len = 0;
	t->thinking.len = 0;
	t->text_sent = t->thinking_sent = 0;
	/* §5.3: a new assistant message; its text on the bus starts empty */
	pc_event_bus_text_reset(t->bus, PC_EVENT_ASSISTANT);
	pc_event_bus_text_reset(t->bus, PC_EVENT_THINKING);
	return 0;
}

#define SILENT_CHECK_MAX 4096u

/* Whether `n` bytes of text hold anything but whitespace. */
static bool has_visible_char(const char *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!isspace((unsigned char)p[i]))
			return true;
	return false;
}

static void on_model_event(attempt_t *t, const pc_model_event_msg_t *e)
{
	if (e->tag != t->call_seq)
		return;
	bool thinking = e->kind == PC_STREAM_THINKING_DELTA;
	if (e->kind != PC_STREAM_TEXT_DELTA && !thinking)
		return;
	pc__buf_t *buf = thinking ? &t->thinking : &t->text;
	if (pc__buf_append(buf, e->text, e->text_len) != 0 || !buf->p)
		return;
	/* §5.5: a draft that may still become NO_REPLY is held back. Both
	 * checks read the whole text: past a few KiB (which only whitespace
	 * around the token could fill) they are skipped, or a long answer
	 * would cost the square of its length. */
	if (!thinking && buf->len <= SILENT_CHECK_MAX &&
	    (pc_payload_is_silent_prefix(buf->p) || pc_payload_is_silent(buf->p)))
		return;
	/* Only the new bytes go (with any held back before them): the bus
	 * keeps the message's text once for every reader. Sent even with
	 * nobody listening, so a reader that comes later reads it whole. */
	size_t *sent = thinking ? &t->thinking_sent : &t->text_sent;
	if (buf->len == *sent)
		return;
	/* Counted as sent whatever the outcome: short of memory the bytes are
	 * lost to delta readers, but never published twice. */
	(void)pc_event_bus_emit_delta(t->bus, thinking ? PC_EVENT_THINKING : PC_EVENT_ASSISTANT, buf->p + *sent,
				      buf->len - *sent, NULL);
	if (!thinking && !t->streamed_text)
		t->streamed_text = has_visible_char(buf->p + *sent, buf->len - *sent);
	*sent = buf->len;
}

/* §7.1 item 1: between two model calls, when the context has grown past
 * window - reserve, compact before calling again (the core's
 * auto-compaction, willRetry). */
static bool wants_compaction(const attempt_t *t)
{
	const pc_compaction_config_t *cc = &t->agent->cfg->agent.compaction;
	uint64_t estimate = pc_ctx_messages_tokens(t->messages) +
			    pc_ctx_chars_to_tokens(t->system_prompt ? strlen(t->system_prompt) : 0);
	uint64_t used = (uint64_t)(pc_usage_prompt_tokens(&t->last_usage) + t->last_usage.output);
	pc_compact_input_t in = {
		.context_window = t->context_tokens,
		.auto_enabled = cc->enabled,
		.turn_succeeded = true,
		.context_tokens = used > estimate ? used : estimate,
		.reserve_tokens = cc->reserve_tokens,
	};
	pc_compact_decision_t d;
	return pc_compact_decide(&in, &d) == 0 && d.trigger == PC_COMPACT_TRIGGER_THRESHOLD;
}

/* Starts the wanted compaction once every transcript write is in (it reads
 * and rewrites the transcript); false when it could not start. */
static bool start_compaction(pc_ctx_t *ctx, attempt_t *t)
{
	if (!appends_durable(ctx, t))
		return true; /* the last acknowledgement calls again */
	const pc_compaction_config_t *cc = &t->agent->cfg->agent.compaction;
	char **headers = NULL;
	int rc = pc_request_provider_headers(t->provider, t->profile, t->run_id, &headers);
	size_t nh = 0;
	while (headers && headers[nh])
		nh++;
	pc_compaction_request_t req = {
		.io = t->agent->io,
		.store = t->agent->store,
		.lock_dir = t->agent->lock_dir,
		.session_key = t->key,
		.epoch = t->epoch,
		.run_id = t->run_id,
		.trigger = "threshold",
		.api = t->provider->api,
		.url = t->url,
		.headers = (const char *const *)headers,
		.header_count = nh,
		.provider = t->provider->id,
		.model = t->model,
		.keep_recent_tokens = cc->keep_recent_tokens,
		.timeout_ms = cc->timeout_ms,
		.idle_timeout_ms = t->provider->idle_timeout_ms,
		.http2_prior_knowledge = t->provider->http2 == PC_PROVIDER_HTTP2_PRIOR_KNOWLEDGE,
		.hooks = t->agent->hooks,
	};
	/* the rewrite holds the write lock with the run's max hold (§6.4) */
	pc_session_lock_opts_t lo;
	pc__run_lock_opts(t->lock_max_hold_ms, &lo);
	req.lock_opts = &lo;
	if (rc == 0)
		rc = pc_compaction_start(t->agent->rt, &req, pc_self(ctx), &t->compaction);
	pc_request_headers_free(headers);
	return rc == 0;
}

bool pc__att_maybe_compact(pc_ctx_t *ctx, attempt_t *t)
{
	if (!wants_compaction(t))
		return false;
	pc__att_set(t, PC_ATT_LC_COMPACTING, "threshold");
	/* the run learns before anyone sees the event: steering is refused
	 * from the moment a compaction is visible (§7.4) */
	pc_send_u64(t->run, PC__MSG_ATTEMPT_PHASE, PC_RUN_COMPACTING);
	pc__att_emit(t, PC_EVENT_COMPACTION, pc__att_obj_phase("start"), false);
	if (start_compaction(ctx, t))
		return true;
	pc__att_emit(t, PC_EVENT_COMPACTION, pc__att_obj_phase("end"), false);
	pc_send_u64(t->run, PC__MSG_ATTEMPT_PHASE, PC_RUN_STREAMING);
	return false; /* the caller's model call follows */
}

static void on_compaction_done(pc_ctx_t *ctx, attempt_t *t, const pc_compaction_done_msg_t *d)
{
	pc_actor_release(t->compaction);
	t->compaction = NULL;
	bool done = d->rc == 0 && d->compacted;
	if (d->rc != 0)
		t->compaction_failed = true;
	cJSON *e = pc__att_obj_phase("end");
	if (e) {
		cJSON_AddBoolToObject(e, "willRetry", done && !t->aborting);
		cJSON_AddBoolToObject(e, "completed", done);
	}
	pc__att_emit(t, PC_EVENT_COMPACTION, e, false);
	if (done)
		t->compactions++;
	if (t->aborting) {
		pc__att_finish(ctx, t, "aborted");
		return;
	}
	pc_send_u64(t->run, PC__MSG_ATTEMPT_PHASE, PC_RUN_STREAMING);
	if (!done) {
		/* nothing to summarise, or it failed: go on with the context as is */
		pc__att_model_call(ctx, t, "not compacted");
		return;
	}
	/* the transcript was rewritten: the context is read again */
	cJSON_Delete(t->messages);
	t->messages = cJSON_CreateArray();
	t->have_history = false;
	if (!t->messages || load_history(ctx, t) != 0)
		pc__att_fail_setup(ctx, t, "the transcript could not be read after compaction");
}

/* ---- the model's answer ---- */

static void on_model_done(pc_ctx_t *ctx, attempt_t *t, const pc_model_done_msg_t *d)
{
	if (d->tag != t->call_seq)
		return;
	pc_actor_release(t->call);
	t->call = NULL;
	/* calls that streamed nothing (errors) have no first token */
	if (d->ttft_us)
		(void)pc_metric_observe(t->series.ttft, (double)d->ttft_us / 1e6);
	pc_usage_add(&t->usage, &d->usage);
	if (pc_usage_is_nonzero(&d->usage)) {
		t->last_usage = d->usage;
		record_usage(ctx, t, &d->usage);
	}
	cJSON *msg = d->message ? cJSON_ParseWithLength(d->message, d->message_len) : NULL;
	if (d->aborted || (t->aborting && d->result != 0)) {
		cJSON_Delete(msg);
		pc__att_finish(ctx, t, "aborted");
		return;
	}
	free(t->stop_reason);
	t->stop_reason = strdup(pc_stop_reason_name(d->stop_reason));
	if (d->result != 0) {
		/* The provider's error becomes an assistant error (as the spec's
		 * stream layer surfaces it), classified for the run. */
		t->has_assistant = true;
		t->assistant_error = true;
		t->has_failure = true;
		t->failure = d->failure;
		t->idle_timed_out = d->transport == PC_TRANSPORT_IDLE_TIMEOUT;
		pc__att_set_error(t, d->error);
		if (d->http_status >= 400 && !t->provider_status) {
			t->provider_status = d->http_status;
			t->provider_message = d->provider_message ? strdup(d->provider_message) : NULL;
		}
		cJSON_Delete(t->final_message);
		t->final_message = msg;
		pc__att_finish(ctx, t, "model error");
		return;
	}
	t->completed_call = true;
	t->has_assistant = true;
	if (!msg && !d->message) {
		/* a complete answer with no content at all */
		msg = cJSON_CreateObject();
		if (msg) {
			cJSON_AddStringToObject(msg, "role", "assistant");
			cJSON_AddItemToObject(msg, "content", cJSON_CreateArray());
			cJSON_AddStringToObject(msg, "stopReason", pc_stop_reason_name(d->stop_reason));
		}
	}
	if (!msg) {
		pc__att_fail_setup(ctx, t, "the model's answer could not be read");
		return;
	}
	char *ids = tool_call_ids(msg);
	/* the decoder's text is the message as parsed: no second printing */
	int rc = d->message ? pc__att_persist_text(ctx, t, "assistant", d->message, ids)
			    : pc__att_persist(ctx, t, "assistant", msg, ids);
	cJSON_free(ids);
	if (rc != 0)
		t->store_error = rc;
	cJSON_AddItemToArray(t->messages, msg);
	cJSON_Delete(t->final_message);
	t->final_message = cJSON_Duplicate(msg, true);
	if (t->aborting) {
		pc__att_finish(ctx, t, "aborted");
		return;
	}
	if (pc__att_has_block(msg, "toolCall")) {
		pc__att_run_tools(ctx, t, msg);
		return;
	}
	pc_steer_decision_t sd;
	pc_steer_at(pc__att_tool_mode(t), PC_STEER_DRAIN_ONE, PC_STEER_AT_TURN_END, 0, 0, t->steer_n, &sd);
	if (sd.continue_loop) {
		pc__att_inject_steering(ctx, t, sd.inject);
		pc__att_model_call(ctx, t, "steering");
		return;
	}
	if (pc__att_hook_finalize(ctx, t))
		return;
	pc__att_finish(ctx, t, "answered");
}

/* ---- loading ---- */

static int load_history(pc_ctx_t *ctx, attempt_t *t)
{
	pc_msg_t *req = NULL;
	int rc = pc_store_req_history(t->key, &req);
	if (rc == 0)
		rc = pc_ask(ctx, pc_store_actor(t->agent->store), req, NULL);
	return rc;
}

/* History hygiene (§2.2): tool pairing repaired, summaries turned into
 * context, an orphaned trailing user turn dropped (unless it is this run's
 * own prompt, persisted by an earlier attempt). */
/* §2.2 step 6: a trailing user turn left by a run that died before
 * answering is dropped before a new prompt (never this run's own prompt,
 * persisted by an earlier attempt: then there is no new prompt). */
static void drop_orphan_user(attempt_t *t)
{
	/* cJSON keeps an array's last item as its first item's prev */
	cJSON *last = t->messages && t->messages->child ? t->messages->child->prev : NULL;
	if (last && t->prompt && !strcmp(pc__att_block_str(last, "role"), "user"))
		cJSON_Delete(cJSON_DetachItemViaPointer(t->messages, last));
}

/* The results the repair made up for calls at the transcript's end (a run
 * cut off while its tools ran: a crash, a lost cluster node) are written
 * too, under that run, so the stored transcript is as well-formed as the
 * one the model reads. Only a tail: made-up results elsewhere would land
 * after messages they precede here, and are left to the next repair. */
static void persist_repaired_tail(pc_ctx_t *ctx, attempt_t *t, const pc_store_msg_t *rm, size_t rn)
{
	size_t from = rn;
	while (from > 0 && rm[from - 1].seq == 0 && !strcmp(rm[from - 1].role, "toolResult"))
		from--;
	for (size_t i = from; i < rn; i++)
		if (persist_msg(ctx, t, &rm[i], NULL) != 0)
			return;
}

static int take_history(pc_ctx_t *ctx, attempt_t *t, const pc_msg_t *m)
{
	pc_store_history_t *h = NULL;
	int rc = pc_store_history_take(m, &h);
	if (rc == PC_ENOTFOUND)
		return 0;
	if (rc != 0)
		return rc;
	size_t n = pc_store_history_count(h);
	pc_store_msg_t *msgs = calloc(n ? n : 1, sizeof(*msgs));
	if (!msgs) {
		pc_store_history_free(h);
		return PC_ENOMEM;
	}
	for (size_t i = 0; i < n; i++)
		pc_store_history_get(h, i, &msgs[i]);
	pc_store_repaired_t *rep = NULL;
	rc = pc_store_repair_tool_pairs(msgs, n, &rep, NULL);
	if (rc == 0) {
		size_t rn = pc_store_repaired_count(rep);
		const pc_store_msg_t *rm = pc_store_repaired_msgs(rep);
		persist_repaired_tail(ctx, t, rm, rn);
		for (size_t i = 0; i < rn; i++) {
			cJSON *c = cJSON_Parse(rm[i].content);
			if (!c)
				continue;
			if (!strcmp(rm[i].role, PC_COMPACTION_ROLE)) {
				cJSON *u = NULL;
				if (pc_compaction_context_message(c, &u) == 0)
					cJSON_AddItemToArray(t->messages, u);
				cJSON_Delete(c);
				continue;
			}
			cJSON_AddItemToArray(t->messages, c);
		}
		pc_store_repaired_free(rep);
	}
	free(msgs);
	pc_store_history_free(h);
	drop_orphan_user(t);
	return rc;
}

/* The turn this attempt adds: the prompt on a first attempt, or the run's
 * continuation instruction on a later one; with hook context around it. */
static const char *user_turn(const attempt_t *t)
{
	return t->turn ? t->turn : t->prompt ? t->prompt : t->continuation;
}

static void run_passed(pc_ctx_t *ctx, attempt_t *t);

/* History and context files are in: before_prompt_build, when hooked. */
static void loaded(pc_ctx_t *ctx, attempt_t *t)
{
	if (!t->have_history || !t->have_context)
		return;
	if (!pc__att_hook_prompt_build(ctx, t, user_turn(t)))
		prompt_ready(ctx, t);
}

/* The system prompt is built; before_agent_run may still block. */
static void prompt_ready(pc_ctx_t *ctx, attempt_t *t)
{
	if (build_system_prompt(t) != 0) {
		pc__att_fail_setup(ctx, t, "out of memory");
		return;
	}
	if (!pc__att_hook_agent_run(ctx, t))
		run_passed(ctx, t);
}

/* The user turn is written, the preflight check (§2.7) passes, the
 * attempt starts; before_agent_reply may answer instead of the model. */
static void run_passed(pc_ctx_t *ctx, attempt_t *t)
{
	const char *turn = user_turn(t);
	if (turn) {
		cJSON *m = cJSON_CreateObject();
		if (!m) {
			pc__att_fail_setup(ctx, t, "out of memory");
			return;
		}
		cJSON_AddStringToObject(m, "role", "user");
		cJSON_AddStringToObject(m, "content", turn);
		/* the run's prompt is named by the key its request came with */
		int rc = persist_json(ctx, t, "user", m, NULL, t->prompt ? t->idem : NULL);
		cJSON_AddItemToArray(t->messages, m);
		if (rc != 0) {
			pc__att_fail_setup(ctx, t, pc_store_strerror(rc));
			return;
		}
		if (t->prompt)
			t->user_persisted = true;
	}
	const pc_agent_defaults_t *d = &t->agent->cfg->agent;
	pc_preflight_input_t pin = {
		.history_tokens = pc_ctx_messages_tokens(t->messages),
		.system_tokens = pc_ctx_chars_to_tokens(strlen(t->system_prompt)),
		.context_tokens = t->context_tokens,
		.reserve_tokens = pc_compact_reserve_tokens(t->context_tokens, d->compaction.reserve_tokens),
		.reducible_chars = pc_ctx_reducible_chars(
			t->messages, pc_ctx_tool_result_max_chars(t->context_tokens, 0)),
	};
	pc_preflight_result_t pr;
	if (pc_preflight_check(&pin, &pr) == 0 && pr.route != PC_PREFLIGHT_FITS) {
		t->has_failure = true;
		t->failure.reason = PC_FAILOVER_CONTEXT_OVERFLOW;
		t->failure.compact = true;
		t->prompt_error = PC_PROMPT_ERR_PROVIDER;
		pc__att_set_error(t, PC_PREFLIGHT_ERROR_MESSAGE);
		pc__att_finish(ctx, t, "preflight overflow");
		return;
	}
	cJSON *start = pc_event_bus_listened(t->bus) ? pc__att_obj_phase("start") : NULL;
	if (start) {
		pc__json_add_int(start, "startedAt", pc__clock_wall_ms());
		cJSON_AddNumberToObject(start, "attempt", t->index);
		cJSON_AddStringToObject(start, "provider", t->provider->id);
		cJSON_AddStringToObject(start, "model", t->model);
	}
	pc__att_emit(t, PC_EVENT_LIFECYCLE, start, false);
	pc_send_u64(t->run, PC__MSG_ATTEMPT_PHASE, PC_RUN_STREAMING);
	if (!pc__att_hook_agent_reply(ctx, t))
		pc__att_model_call(ctx, t, "start");
}

/* An attempt-level hook chain answered (the tool hooks go to
 * attempt_tools.c). A late answer after an abort is dropped. */
static void on_hook_done(pc_ctx_t *ctx, attempt_t *t, const pc_hook_done_msg_t *d)
{
	unsigned kind = HOOK_TAG_KIND(d->tag);
	if (kind == HOOK_KIND_GATE || kind == HOOK_KIND_PERSIST) {
		pc__att_on_hook_done(ctx, t, d);
		return;
	}
	if (kind != t->hook_wait || t->state == PC_ATT_LC_FINISHING)
		return;
	t->hook_wait = 0;
	switch (kind) {
	case HOOK_KIND_PROMPT:
		pc__att_apply_prompt_build(t, t->prompt ? t->prompt : t->continuation, d);
		prompt_ready(ctx, t);
		break;
	case HOOK_KIND_RUN:
		if (d->blocked)
			pc__att_apply_agent_run(ctx, t, d);
		else
			run_passed(ctx, t);
		break;
	case HOOK_KIND_REPLY:
		if (!pc__att_apply_agent_reply(ctx, t, d))
			pc__att_model_call(ctx, t, "start");
		break;
	case HOOK_KIND_FINALIZE:
		pc__att_apply_finalize(t, d);
		pc__att_finish(ctx, t, "finalized");
		break;
	default:
		break;
	}
}

/* (Re)arms the timer where the budget says, if it says anywhere. */
static int arm_budget(pc_ctx_t *ctx, attempt_t *t)
{
	int64_t due = 0;
	if (!pc_attempt_timeout_armed(&t->budget, &due))
		return 0;
	int64_t now = (int64_t)pc_runtime_now_ms();
	pc_msg_t *fire = pc_msg_new(PC__MSG_ATTEMPT_TIMEOUT, 0);
	if (!fire)
		return PC_ENOMEM;
	return pc_timer_after(pc_self(ctx), due > now ? (uint64_t)(due - now) : 0, fire, &t->timer);
}

/* ---- the behaviour ---- */

static int attempt_receive(pc_ctx_t *ctx, void *state, pc_msg_t *msg)
{
	attempt_t *t = state;
	switch (msg->type) {
	case PC__MSG_ATTEMPT_START: {
		t->started_ms = (int64_t)pc_runtime_now_ms();
		pc_attempt_timeout_init(&t->budget, t->timeout_ms, t->agent->cfg->agent.compaction.timeout_ms,
					t->started_ms);
		if (arm_budget(ctx, t) != 0)
			return PC_ENOMEM;
		int rc = 0;
		cJSON *kept = pc__transcript_take(t->agent, t->key);
		if (kept) {
			/* the previous attempt's context, exactly what is stored */
			cJSON_Delete(t->messages);
			t->messages = kept;
			t->have_history = true;
			drop_orphan_user(t);
		} else if ((rc = load_history(ctx, t)) != 0) {
			pc__att_fail_setup(ctx, t, pc_store_strerror(rc));
			return 0;
		}
		char *text = NULL;
		rc = pc__context_get(t->agent, pc_self(ctx), &text);
		if (rc == 0 && text) {
			t->context_text = text;
			t->have_context = true;
		} else if (rc != 0) {
			t->have_context = true; /* go on without context files */
		}
		/* with a kept transcript and cached context files, nothing to wait for */
		loaded(ctx, t);
		return 0;
	}
	case PC_STORE_MSG_HISTORY:
		if (t->state == PC_ATT_LC_COMPACTING && !t->have_history) {
			t->have_history = true;
			if (take_history(ctx, t, msg) != 0) {
				pc__att_fail_setup(ctx, t, "the transcript could not be read after compaction");
				return 0;
			}
			pc__att_model_call(ctx, t, "compacted");
			return 0;
		}
		if (t->state != PC_ATT_LC_LOADING || t->have_history)
			return 0;
		t->have_history = true;
		if (take_history(ctx, t, msg) != 0) {
			pc__att_fail_setup(ctx, t, "the transcript could not be read");
			return 0;
		}
		loaded(ctx, t);
		return 0;
	case PC__MSG_ATTEMPT_CONTEXT:
		if (t->have_context)
			return 0;
		t->have_context = true;
		if (msg->size > 0)
			t->context_text = strdup(pc_msg_cdata(msg));
		if (t->state == PC_ATT_LC_LOADING && t->have_history && !t->aborting)
			loaded(ctx, t);
		return 0;
	case PC_STORE_MSG_REPLY: {
		pc_store_reply_t r = {0};
		int grc = pc_store_reply_get(msg, &r);
		if (usage_answered(t, msg->corr)) {
			/* bookkeeping: counted, never the attempt's failure */
			if (grc != 0 || r.rc != 0)
				usage_write_failed(t, grc != 0 ? grc : r.rc);
		} else {
			feed_answered(t, msg->corr, &r, grc == 0 && r.rc == 0);
			if (grc == 0 && r.rc != 0)
				t->store_error = r.rc;
			/* another process owns the session now: nothing more of
			 * this attempt may happen (no model call, no tool) */
			if (r.rc == PC_STORE_EFENCED)
				abort_all(ctx, t);
			if (t->appends_pending)
				t->appends_pending--;
			pc__att_on_calls_synced(ctx, t, msg->corr);
		}
		/* compaction waits for every write, usage records included
		 * (start_compaction): the last answer starts it */
		if (t->state == PC_ATT_LC_COMPACTING && !t->compaction && !t->appends_pending && !t->usage_n && t->have_history &&
		    !t->aborting && !start_compaction(ctx, t)) {
			pc_send_u64(t->run, PC__MSG_ATTEMPT_PHASE, PC_RUN_STREAMING);
			pc__att_model_call(ctx, t, "compaction not started");
		}
		maybe_finish(ctx, t);
		return 0;
	}
	case PC_MSG_MODEL_EVENT:
		on_model_event(t, pc_msg_cdata(msg));
		return 0;
	case PC_MSG_MODEL_DONE:
		on_model_done(ctx, t, pc_msg_cdata(msg));
		return 0;
	case PC_MSG_TOOL_DONE:
		pc__att_on_tool_done(ctx, t, pc_msg_cdata(msg));
		return 0;
	case PC_MSG_HOOK_DONE:
		on_hook_done(ctx, t, pc_msg_cdata(msg));
		return 0;
	case PC_MSG_COMPACTION_DONE:
		if (t->compaction)
			on_compaction_done(ctx, t, pc_msg_cdata(msg));
		return 0;
	case PC__MSG_ATTEMPT_STEER: {
		if (PC__GROW(t->steer, t->steer_cap, t->steer_n + 1, 4))
			return 0;
		const char *p = pc_msg_cdata(msg);
		size_t n = pc__steer_size(p);
		char *s = malloc(n);
		if (s) {
			memcpy(s, p, n);
			t->steer[t->steer_n++] = s;
		}
		return 0;
	}
	case PC__MSG_ATTEMPT_ABORT:
		t->cancelled = true;
		abort_all(ctx, t);
		return 0;
	case PC__MSG_ATTEMPT_TIMEOUT: {
		t->timer = 0;
		if (t->state == PC_ATT_LC_FINISHING)
			return 0;
		/* §2.6: extended once while a compaction runs, then an abort */
		pc_attempt_timeout_step_t st;
		pc_attempt_timeout_fire(&t->budget, (int64_t)pc_runtime_now_ms(), false, t->compaction != NULL,
					&st);
		if (st.action == PC_ATTEMPT_TIMER_EXTEND || st.action == PC_ATTEMPT_TIMER_IGNORE) {
			if (arm_budget(ctx, t) != 0)
				return PC_ENOMEM;
			return 0;
		}
		t->timed_out = true;
		t->timed_out_in_compaction = st.timed_out_during_compaction;
		abort_all(ctx, t);
		return 0;
	}
	default:
		return 0;
	}
}

static void attempt_stop(pc_ctx_t *ctx, void *state, int reason)
{
	attempt_t *t = state;
	if (t->timer)
		pc_timer_cancel(pc_ctx_runtime(ctx), t->timer);
	if (t->compaction) {
		pc_compaction_abort(t->compaction);
		pc_actor_release(t->compaction);
	}
	if (t->call) {
		pc_model_call_abort(t->call);
		pc_actor_release(t->call);
	}
	for (size_t i = 0; i < t->n_calls; i++) {
		if (t->slots && t->slots[i].actor) {
			pc_tool_abort(t->slots[i].actor);
			pc_actor_release(t->slots[i].actor);
		}
	}
	if (t->state != PC_ATT_LC_DONE) {
		/* Stopped without finishing (shutdown, a failed handler): the run
		 * still gets its one report. */
		if (t->prompt_error == PC_PROMPT_ERR_NONE && !t->cancelled) {
			t->prompt_error = PC_PROMPT_ERR_SETUP;
			pc__att_set_error(t, reason == PC_EXIT_SHUTDOWN ? "the attempt was shut down"
								: "the attempt failed");
		}
		report(t, "stopped");
	}
	reject_steers(t);
	/* stopped while settling (shutdown): the run still hears, once */
	if (t->settling)
		settle(NULL, t, PC_ESTOPPED);
	pc_actor_release(t->run);
	pc_event_bus_release(t->bus);
	pc__loop_box_release(t->loop);
	pc__att_hooks_free(t);
	pc_request_headers_free(t->headers);
	cJSON_Delete(t->messages);
	cJSON_Delete(t->calls);
	cJSON_Delete(t->final_message);
	free(t->steer);
	free(t->usage_corrs);
	for (size_t i = 0; i < t->fed_n; i++) {
		free(t->fed[i].role_json);
		free(t->fed[i].idem);
	}
	free(t->fed);
	for (size_t i = 0; t->slots && i < t->n_calls; i++)
		free(t->slots[i].text);
	free(t->slots);
	pc__buf_free(&t->text);
	pc__buf_free(&t->thinking);
	free(t->context_text);
	free(t->system_prompt);
	free(t->error_text);
	free(t->stop_reason);
	free(t->provider_message);
	free(t->tool_error_name);
	free(t->tool_error_text);
	free(t->run_id);
	free(t->key);
	free(t->model);
	free(t->url);
	free(t->prompt);
	free(t->continuation);
	free(t->extra);
	free(t->idem);
	pc_agent_t *a = t->agent;
	free(t);
	__atomic_sub_fetch(&a->stats.attempts_live, 1, __ATOMIC_RELEASE);
}

static const pc_behavior_t attempt_behavior = {"attempt", attempt_receive, attempt_stop};

int pc__attempt_spawn(pc_agent_t *a, const pc__attempt_params_t *p, pc_actor_t *run, pc_actor_t **out)
{
	attempt_t *t = calloc(1, sizeof(*t));
	if (!t)
		return PC_ENOMEM;
	const char *path = pc_provider_api_path(p->provider->api);
	size_t ulen = strlen(p->base_url) + strlen(path ? path : "") + 1;
	t->url = malloc(ulen);
	if (t->url)
		snprintf(t->url, ulen, "%s%s", p->base_url, path ? path : "");
	t->agent = a;
	t->run_id = strdup(p->run_id);
	t->key = strdup(p->session_key);
	t->epoch = p->epoch;
	pc__metrics_model(a, p->provider->id, p->model, &t->series);
	t->model = strdup(p->model);
	t->prompt = dup_or_null(p->prompt);
	t->continuation = dup_or_null(p->continuation);
	t->extra = dup_or_null(p->extra_system_prompt);
	t->idem = dup_or_null(p->idempotency_key);
	t->provider = p->provider;
	t->additions = p->additions;
	t->addition_count = p->addition_count;
	t->index = p->index;
	t->profile = p->profile;
	t->think = p->think;
	t->context_tokens = p->context_tokens;
	t->max_tokens = p->max_tokens;
	t->timeout_ms = p->timeout_ms;
	t->lock_max_hold_ms = p->lock_max_hold_ms;
	t->messages = cJSON_CreateArray();
	t->tools = a->tool_schemas;
	t->loop = pc__loop_box_retain(p->loop);
	int rc = 0;
	if (rc == 0)
		rc = pc_request_provider_headers(p->provider, p->profile, p->run_id, &t->headers);
	if (rc == 0 && (!t->url || !t->run_id || !t->key || !t->model || !t->messages ||
			(p->prompt && !t->prompt) || (p->continuation && !t->continuation) ||
			(p->extra_system_prompt && !t->extra) || (p->idempotency_key && !t->idem)))
		rc = PC_ENOMEM;
	pc_actor_t *actor = NULL;
	if (rc == 0) {
		t->run = pc_actor_retain(run);
		t->bus = pc_event_bus_retain(p->bus);
		__atomic_add_fetch(&a->stats.attempts_live, 1, __ATOMIC_RELAXED);
		rc = pc_spawn_start(a->rt, &attempt_behavior, t, PC__MSG_ATTEMPT_START, &actor);
		if (rc != 0) {
			__atomic_sub_fetch(&a->stats.attempts_live, 1, __ATOMIC_RELEASE);
			pc_actor_release(t->run);
			pc_event_bus_release(t->bus);
			t->run = NULL;
			t->bus = NULL;
		}
	}
	if (rc != 0) {
		pc_request_headers_free(t->headers);
		cJSON_Delete(t->messages);
		free(t->url);
		free(t->run_id);
		free(t->key);
		free(t->model);
		free(t->prompt);
		free(t->continuation);
		free(t->extra);
	free(t->idem);
		pc__loop_box_release(t->loop);
		free(t);
		return rc;
	}
	__atomic_add_fetch(&a->stats.attempts, 1, __ATOMIC_RELAXED);
	if (out)
		*out = actor;
	else
		pc_actor_release(actor);
	return 0;
}
