/*
 * The attempt's tool phase (§3.1-§3.4): the model's tool calls run as tool
 * actors, one after another or as a parallel batch; steering is checked at
 * each boundary; every result is appended to the context and persisted
 * before the loop goes back to the model.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/hash.h"
#include "agents/hooks/hooks.h"
#include "agents/tools/tools.h"
#include "attempt_internal.h"
#include "io/io.h"
#include "steering.h"

static void start_tool(pc_ctx_t *ctx, attempt_t *t, size_t i);
static void tools_settled(pc_ctx_t *ctx, attempt_t *t);

/*
 * The one place a tool call's state changes (tool_call_lifecycle.h). A
 * transition the table does not allow is refused (the state stays),
 * counted and logged. An allowed one is traced (PINCER_TRACE=tool_call)
 * as the attempt's id and the model's tool call id.
 */
static void call_set(attempt_t *t, size_t i, pc_tc_lc_t to, const char *why)
{
	tool_slot_t *s = &t->slots[i];
	pc_tc_lc_t from = s->stage;
	const char *call_id = pc__att_block_str(cJSON_GetArrayItem(t->calls, (int)i), "id");
	if (!pc_tc_lc_legal(from, to)) {
		pc__metrics_illegal(&t->agent->metrics, PC__LC_TOOL_CALL);
		(void)pc_log_kv(t->agent->log, PC_LOG_WARN, "illegal tool_call transition", PC_LF_STR("runId", t->run_id),
				PC_LF_INT("attempt", t->index), PC_LF_STR("toolCallId", call_id),
				PC_LF_STR("from", pc_tc_lc_name(from)), PC_LF_STR("to", pc_tc_lc_name(to)),
				PC_LF_STR("why", why));
		return;
	}
	s->stage = to;
	if (t->agent->trace & PC_TRACE_TOOL_CALL) {
		char id[PC_RUN_ID_MAX + 96];
		snprintf(id, sizeof(id), "%s/%u/%.64s", t->run_id, (unsigned)t->index, call_id);
		pc_trace_transition(t->agent->log, "tool_call", id, pc_tc_lc_name(from), pc_tc_lc_name(to), why);
	}
}

/* Once every call of the batch has its result (and only once: settling
 * lets go of the batch), the loop goes on. */
static void maybe_settle(pc_ctx_t *ctx, attempt_t *t)
{
	if (t->calls && t->calls_done == t->n_calls)
		tools_settled(ctx, t);
}

const char *pc__att_block_str(const cJSON *b, const char *name)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(b, name);
	return cJSON_IsString(v) ? v->valuestring : "";
}

/* A tool result message {role: toolResult, ...}; persisted and appended. */
static void add_tool_result(pc_ctx_t *ctx, attempt_t *t, const char *id, const char *name, const char *text,
			    bool is_error)
{
	cJSON *m = cJSON_CreateObject();
	cJSON *content = cJSON_CreateArray();
	cJSON *block = cJSON_CreateObject();
	if (!m || !content || !block) {
		cJSON_Delete(m);
		cJSON_Delete(content);
		cJSON_Delete(block);
		t->store_error = PC_ENOMEM;
		return;
	}
	cJSON_AddStringToObject(block, "type", "text");
	cJSON_AddStringToObject(block, "text", text);
	cJSON_AddItemToArray(content, block);
	cJSON_AddStringToObject(m, "role", "toolResult");
	cJSON_AddStringToObject(m, "toolCallId", id);
	cJSON_AddStringToObject(m, "toolName", name);
	cJSON_AddItemToObject(m, "content", content);
	cJSON_AddBoolToObject(m, "isError", is_error);
	char ids[PC_RUN_ID_MAX * 2];
	cJSON *idarr = cJSON_CreateArray();
	cJSON_AddItemToArray(idarr, cJSON_CreateString(id));
	char *idtext = pc_json_print(idarr);
	cJSON_Delete(idarr);
	snprintf(ids, sizeof(ids), "%s", idtext ? idtext : "[]");
	cJSON_free(idtext);
	int rc = pc__att_persist(ctx, t, "toolResult", m, ids);
	if (rc != 0)
		t->store_error = rc;
	cJSON_AddItemToArray(t->messages, m);
}

static void emit_tool(attempt_t *t, const char *phase, const char *id, const char *name, const cJSON *args,
		      const char *result, bool is_error)
{
	cJSON *d = pc__att_obj_phase(phase);
	if (!d)
		return;
	cJSON_AddStringToObject(d, "name", name);
	cJSON_AddStringToObject(d, "toolCallId", id);
	if (args)
		cJSON_AddItemToObject(d, "args", cJSON_Duplicate(args, true));
	if (result) {
		size_t n = strlen(result);
		if (n > TOOL_EVENT_MAX_CHARS) {
			pc__buf_t cut = {0};
			size_t keep = TOOL_EVENT_MAX_CHARS;
			while (keep > 0 && ((unsigned char)result[keep] & 0xC0) == 0x80)
				keep--;
			if (pc__buf_append(&cut, result, keep) == 0 &&
			    pc__buf_append_str(&cut, TOOL_EVENT_TRUNCATED) == 0)
				cJSON_AddStringToObject(d, "result", cut.p);
			pc__buf_free(&cut);
		} else {
			cJSON_AddStringToObject(d, "result", result);
		}
		cJSON_AddBoolToObject(d, "isError", is_error);
	}
	pc__att_emit(t, PC_EVENT_TOOL, d, false);
}

/* Skips calls [from, n): each still gets start/end events and the
 * synthetic result, in source order (§3.4). */
static void skip_calls(pc_ctx_t *ctx, attempt_t *t, size_t from)
{
	for (size_t i = from; i < t->n_calls; i++) {
		if (pc_tc_lc_terminal(t->slots[i].stage) || t->slots[i].actor)
			continue;
		const cJSON *b = cJSON_GetArrayItem(t->calls, (int)i);
		const char *id = pc__att_block_str(b, "id"), *name = pc__att_block_str(b, "name");
		emit_tool(t, "start", id, name, cJSON_GetObjectItemCaseSensitive(b, "arguments"), NULL, false);
		emit_tool(t, "result", id, name, NULL, PC_STEER_SKIPPED_TEXT, true);
		add_tool_result(ctx, t, id, name, PC_STEER_SKIPPED_TEXT, true);
		call_set(t, i, PC_TC_LC_SKIPPED, "steering");
		t->calls_done++;
	}
}

/* Appends `n` queued steering messages as user turns. */
void pc__att_inject_steering(pc_ctx_t *ctx, attempt_t *t, size_t n)
{
	for (size_t i = 0; i < n && t->steer_n > 0; i++) {
		char *steer = t->steer[0];
		memmove(t->steer, t->steer + 1, (t->steer_n - 1) * sizeof(char *));
		t->steer_n--;
		cJSON *m = cJSON_CreateObject();
		if (m) {
			cJSON_AddStringToObject(m, "role", "user");
			cJSON_AddStringToObject(m, "content", pc__steer_text(steer));
			int rc = pc__att_persist(ctx, t, "user", m, NULL);
			if (rc != 0)
				t->store_error = rc;
			cJSON_AddItemToArray(t->messages, m);
		}
		/* the message it came from has had its turn: its run can end */
		if (*pc__steer_id(steer))
			pc_send(t->run, pc__text_msg(PC__MSG_STEER_TAKEN, pc__steer_id(steer)));
		free(steer);
	}
}

pc_tool_mode_t pc__att_tool_mode(const attempt_t *t) { return t->agent->cfg->agent.tool_mode; }

static void start_calls(pc_ctx_t *ctx, attempt_t *t);
static void complete_call(pc_ctx_t *ctx, attempt_t *t, size_t i, const char *text, bool is_error, bool mutating,
			  pc_tc_lc_t end, const char *why);

/* Whether the batch must wait for its message to be durable (a sync sent;
 * pc__att_on_calls_synced starts it): a mutating tool's effect must never
 * precede the record that it was asked for. The message went lazily with
 * the turn's others, so this costs one commit, and only when such a tool
 * is called. */
static bool await_durable_calls(pc_ctx_t *ctx, attempt_t *t)
{
	if (!t->lazy_unsynced)
		return false;
	bool mutating = false;
	const cJSON *b;
	cJSON_ArrayForEach(b, t->calls) {
		const pc_tool_def_t *def = pc_tool_find(t->agent->tools, pc__att_block_str(b, "name"));
		mutating = mutating || (def && def->mutating);
	}
	pc_msg_t *req = NULL;
	uint64_t corr = 0;
	if (!mutating || pc_store_req_sync(&req) != 0 ||
	    pc_ask(ctx, pc_store_actor(t->agent->store), req, &corr) != 0)
		return false; /* not sent: the calls' own checks still hold */
	t->appends_pending++;
	t->lazy_unsynced = 0;
	t->calls_sync = corr;
	return true;
}

void pc__att_on_calls_synced(pc_ctx_t *ctx, attempt_t *t, uint64_t corr)
{
	if (!t->calls_sync || corr != t->calls_sync)
		return;
	t->calls_sync = 0;
	if (t->state != PC_ATT_LC_TOOLS || t->aborting)
		return; /* ended meanwhile (pc__att_abort_tools) */
	if (t->store_error) {
		/* the request for the calls was not kept: none of them runs,
		 * and the attempt ends on the store's error */
		for (size_t i = 0; i < t->n_calls; i++)
			complete_call(ctx, t, i, "Tool not started: the transcript could not be saved.", true, false,
				      PC_TC_LC_REFUSED, "not saved");
		pc__att_finish(ctx, t, "transcript not saved");
		return;
	}
	start_calls(ctx, t);
}

void pc__att_run_tools(pc_ctx_t *ctx, attempt_t *t, cJSON *assistant)
{
	t->calls = cJSON_CreateArray();
	const cJSON *b;
	cJSON_ArrayForEach(b, cJSON_GetObjectItemCaseSensitive(assistant, "content")) {
		if (!strcmp(pc__att_block_str(b, "type"), "toolCall"))
			cJSON_AddItemReferenceToArray(t->calls, (cJSON *)b);
	}
	t->n_calls = (size_t)cJSON_GetArraySize(t->calls);
	free(t->slots);
	t->slots = calloc(t->n_calls ? t->n_calls : 1, sizeof(*t->slots));
	if (!t->slots) {
		pc__att_fail_setup(ctx, t, "out of memory");
		return;
	}
	t->next_call = 0;
	t->calls_done = 0;
	pc__att_set(t, PC_ATT_LC_TOOLS, "tool calls");
	if (!await_durable_calls(ctx, t))
		start_calls(ctx, t);
}

/* Starts the batch: every call at once (parallel), or the first. */
static void start_calls(pc_ctx_t *ctx, attempt_t *t)
{
	pc_tool_mode_t mode = pc__att_tool_mode(t);
	pc_steer_decision_t sd;
	if (mode == PC_TOOLS_PARALLEL) {
		pc_steer_at(mode, PC_STEER_DRAIN_ONE, PC_STEER_AT_BATCH_LAUNCH, 0, t->n_calls, t->steer_n, &sd);
		if (sd.skip_from < t->n_calls)
			skip_calls(ctx, t, sd.skip_from);
		for (size_t i = 0; i < t->n_calls; i++)
			if (!pc_tc_lc_terminal(t->slots[i].stage))
				start_tool(ctx, t, i);
	} else {
		start_tool(ctx, t, 0);
	}
	maybe_settle(ctx, t);
}

/* The agent's allow-list (agents.defaults.tools.allow) and a hook's
 * toolsAllow hold at the call too: a model naming a tool it was not
 * offered gets an error. */
static bool tool_allowed(const attempt_t *t, const char *name)
{
	const pc_agent_defaults_t *d = &t->agent->cfg->agent;
	bool listed = !d->tools_allow;
	for (size_t i = 0; !listed && i < d->tools_allow_count; i++)
		listed = !strcmp(d->tools_allow[i], name);
	if (!listed || !t->hook_allow)
		return listed;
	const cJSON *n;
	cJSON_ArrayForEach(n, t->hook_allow) {
		if (cJSON_IsString(n) && !strcmp(n->valuestring, name))
			return true;
	}
	return false;
}

/* The call's arguments as the model gave them: an object, or text. */
static const cJSON *call_args(const attempt_t *t, size_t i)
{
	return cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(t->calls, (int)i), "arguments");
}

/* The arguments as an object (parsed when the model sent text); NULL when
 * they are not one. The caller owns it. */
static cJSON *args_object(const cJSON *args)
{
	if (cJSON_IsObject(args))
		return cJSON_Duplicate(args, true);
	if (!cJSON_IsString(args))
		return NULL;
	if (strspn(args->valuestring, " \t\r\n") == strlen(args->valuestring))
		return cJSON_CreateObject();
	cJSON *o = cJSON_Parse(args->valuestring);
	if (!cJSON_IsObject(o)) {
		cJSON_Delete(o);
		return NULL;
	}
	return o;
}

static cJSON *tool_event(const attempt_t *t, const char *name, const char *id)
{
	cJSON *e = cJSON_CreateObject();
	if (!e)
		return NULL;
	cJSON_AddStringToObject(e, "toolName", name);
	cJSON_AddStringToObject(e, "runId", t->run_id);
	cJSON_AddStringToObject(e, "toolCallId", id);
	return e;
}

static void call_finished(pc_ctx_t *ctx, attempt_t *t, size_t i);

/* The call's result, final: its end `end` (terminal; `why` for the trace),
 * its `result` event, the toolResult message, the outcome for the run's
 * post-compaction guard (§1.16). */
static void complete_call(pc_ctx_t *ctx, attempt_t *t, size_t i, const char *text, bool is_error, bool mutating,
			  pc_tc_lc_t end, const char *why)
{
	const cJSON *b = cJSON_GetArrayItem(t->calls, (int)i);
	const char *id = pc__att_block_str(b, "id"), *name = pc__att_block_str(b, "name");
	call_set(t, i, end, why);
	t->calls_done++;
	emit_tool(t, "result", id, name, NULL, text, is_error);
	add_tool_result(ctx, t, id, name, text, is_error);
	const cJSON *args = call_args(t, i);
	char *printed = cJSON_IsString(args) ? NULL : cJSON_PrintUnformatted(args);
	const char *a = cJSON_IsString(args) ? args->valuestring : printed ? printed : "";
	pc_msg_t *m = pc_msg_new(PC__MSG_TOOL_OUTCOME, sizeof(pc__tool_outcome_t));
	if (m) {
		pc__tool_outcome_t *o = pc_msg_data(m);
		o->args_hash = pc__hash64(a, strlen(a));
		o->result_hash = pc__hash64(text, strlen(text));
		snprintf(o->name, sizeof(o->name), "%s", name);
		pc_send(t->run, m);
	}
	cJSON_free(printed);
	if (is_error) {
		free(t->tool_error_name);
		free(t->tool_error_text);
		t->tool_error_name = strdup(name);
		t->tool_error_text = strdup(text);
		t->tool_error_mutating = mutating;
	} else if (t->tool_error_name && !strcmp(t->tool_error_name, name)) {
		/* a later success of the same tool clears its warning (§5.7) */
		free(t->tool_error_name);
		free(t->tool_error_text);
		t->tool_error_name = t->tool_error_text = NULL;
	}
}

/* A call that ends before its tool ran (refused, blocked): `text` is the
 * error the model reads, `why` the trace's word for it. */
static void refuse_call(pc_ctx_t *ctx, attempt_t *t, size_t i, const char *text, const char *why)
{
	complete_call(ctx, t, i, text, true, false, PC_TC_LC_REFUSED, why);
	call_finished(ctx, t, i);
}

static void launch_tool(pc_ctx_t *ctx, attempt_t *t, size_t i, const char *args_text)
{
	const cJSON *b = cJSON_GetArrayItem(t->calls, (int)i);
	const char *id = pc__att_block_str(b, "id"), *name = pc__att_block_str(b, "name");
	/* the invocation as the trace names it: as its call (tool_call) */
	char trace_id[PC_RUN_ID_MAX + 96];
	snprintf(trace_id, sizeof(trace_id), "%s/%u/%.64s", t->run_id, (unsigned)t->index, id);
	pc_tool_invoke_t req = {
		.name = name,
		.tool_call_id = id,
		.arguments = args_text,
		.env = {.workspace = t->agent->cfg->agent.workspace ? t->agent->cfg->agent.workspace : ".",
			.session_key = t->key, .run_id = t->run_id, .tool_call_id = id},
		.tag = i,
		.log = t->agent->log,
		.illegal = t->agent->metrics.illegal[PC__LC_TOOL],
		.trace = (t->agent->trace & PC_TRACE_TOOL) != 0,
		.trace_id = trace_id,
	};
	if (!pc_agent_node_live(t->agent)) {
		/* a cluster node past its deadline may have lost the session to
		 * another node: nothing with side effects starts here now */
		__atomic_add_fetch(&t->agent->stats.tools_fenced, 1, __ATOMIC_RELAXED);
		refuse_call(ctx, t, i, "Tool not started: this cluster node's lease lapsed.", "lease lapsed");
		return;
	}
	call_set(t, i, PC_TC_LC_RUNNING, "launch");
	int rc = pc_tool_invoke_start(t->agent->rt, t->agent->tools, &req, pc_self(ctx), &t->slots[i].actor);
	if (rc != 0) {
		t->slots[i].actor = NULL;
		refuse_call(ctx, t, i, "Tool could not be started.", "could not start");
	}
}

/* §4.2: the loop detectors see the call before it runs. A warning lets it
 * run (and is published once per bucket as a `diagnostic` event); a block
 * becomes the error the model reads. True when the call may run. */
static bool loop_gate(pc_ctx_t *ctx, attempt_t *t, size_t i, const char *name, const cJSON *args)
{
	if (!t->loop)
		return true;
	const char *id = pc__att_block_str(cJSON_GetArrayItem(t->calls, (int)i), "id");
	cJSON *obj = args_object(args);
	pc_loop_verdict_t v;
	int rc = pc_loop_check(t->loop->h, name, obj, id, &v);
	cJSON_Delete(obj);
	if (rc != 0 || v.action == PC_LOOP_NONE)
		return true;
	if (v.log) {
		cJSON *d = cJSON_CreateObject();
		if (d) {
			cJSON_AddStringToObject(d, "type", "tool.loop");
			cJSON_AddStringToObject(d, "level", v.action == PC_LOOP_BLOCK ? "critical" : "warning");
			cJSON_AddStringToObject(d, "detector", v.detector);
			cJSON_AddNumberToObject(d, "count", v.count);
			cJSON_AddStringToObject(d, "toolName", name);
			cJSON_AddStringToObject(d, "message", v.message);
			pc__att_emit(t, PC_EVENT_DIAGNOSTIC, d, false);
		}
	}
	if (v.action != PC_LOOP_BLOCK)
		return true;
	__atomic_add_fetch(&t->agent->stats.tool_loops_blocked, 1, __ATOMIC_RELAXED);
	if (!strcmp(v.detector, "global_circuit_breaker")) {
		/* "Session execution blocked": the batch ends, the model is not
		 * called again, and the run ends with the breaker's message. */
		t->loop_stopped = true;
		pc__att_set_error(t, v.message);
	}
	refuse_call(ctx, t, i, v.message, "loop blocked");
	return false;
}

/* §4.1: loop detection, then the before_tool_call hooks (when any apply),
 * then the tool itself. */
static void start_tool(pc_ctx_t *ctx, attempt_t *t, size_t i)
{
	if (i >= t->n_calls)
		return;
	if (pc__att_tool_mode(t) == PC_TOOLS_SEQUENTIAL) {
		pc_steer_decision_t sd;
		pc_steer_at(PC_TOOLS_SEQUENTIAL, PC_STEER_DRAIN_ONE, PC_STEER_AT_CALL_START, i, t->n_calls,
			    t->steer_n, &sd);
		if (sd.skip_from <= i) {
			skip_calls(ctx, t, i);
			return;
		}
	}
	const cJSON *b = cJSON_GetArrayItem(t->calls, (int)i);
	const char *id = pc__att_block_str(b, "id"), *name = pc__att_block_str(b, "name");
	const cJSON *args = call_args(t, i);
	emit_tool(t, "start", id, name, args, NULL, false);
	t->next_call = i + 1;
	t->tool_calls_run++;
	__atomic_add_fetch(&t->agent->stats.tool_calls, 1, __ATOMIC_RELAXED);
	if (!tool_allowed(t, name)) {
		char why[160];
		snprintf(why, sizeof(why), "Tool %.64s is not available to this agent.", name);
		refuse_call(ctx, t, i, why, "not allowed");
		return;
	}
	if (!loop_gate(ctx, t, i, name, args))
		return;
	const pc_hooks_t *hooks = t->agent->hooks;
	if (pc_hooks_active(hooks, PC_HOOK_BEFORE_TOOL_CALL, name)) {
		cJSON *ev = tool_event(t, name, id);
		cJSON *params = args_object(args);
		if (ev)
			cJSON_AddItemToObject(ev, "params", params ? params : cJSON_CreateObject());
		else
			cJSON_Delete(params);
		call_set(t, i, PC_TC_LC_GATE, "before_tool_call");
		int rc = pc_hooks_run(t->agent->rt, hooks, PC_HOOK_BEFORE_TOOL_CALL, ev, pc__att_hook_ctx(t, id), name,
				      pc_self(ctx), HOOK_TAG(i, HOOK_KIND_GATE));
		if (rc != 0)
			refuse_call(ctx, t, i, PC_HOOK_REASON_TOOL_HOOK_FAILED, "hook failed"); /* fail closed */
		return;
	}
	char *text = cJSON_IsString(args) ? NULL : cJSON_PrintUnformatted(args);
	launch_tool(ctx, t, i, cJSON_IsString(args) ? args->valuestring : text ? text : "{}");
	cJSON_free(text);
}

/* before_tool_call answered: blocked, or run with the merged params. */
static void on_gate_done(pc_ctx_t *ctx, attempt_t *t, size_t i, const pc_hook_done_msg_t *d)
{
	if (d->blocked) {
		refuse_call(ctx, t, i, d->reason[0] ? d->reason : PC_HOOK_REASON_TOOL_BLOCKED, "blocked");
		return;
	}
	cJSON *merged = cJSON_ParseWithLength(d->result, d->result_len);
	const cJSON *params = cJSON_GetObjectItemCaseSensitive(merged, "params");
	char *text = cJSON_IsObject(params) ? cJSON_PrintUnformatted(params) : NULL;
	cJSON_Delete(merged);
	if (text) {
		launch_tool(ctx, t, i, text);
		cJSON_free(text);
		return;
	}
	const cJSON *args = call_args(t, i);
	char *orig = cJSON_IsString(args) ? NULL : cJSON_PrintUnformatted(args);
	launch_tool(ctx, t, i, cJSON_IsString(args) ? args->valuestring : orig ? orig : "{}");
	cJSON_free(orig);
}

/* after_tool_call (observation): the result, whether it failed, how long. */
static void notify_after(attempt_t *t, size_t i, const pc_tool_done_msg_t *d)
{
	const pc_hooks_t *hooks = t->agent->hooks;
	if (!pc_hooks_active(hooks, PC_HOOK_AFTER_TOOL_CALL, d->name))
		return;
	cJSON *ev = tool_event(t, d->name, d->tool_call_id);
	if (ev) {
		cJSON *params = args_object(call_args(t, i));
		cJSON_AddItemToObject(ev, "params", params ? params : cJSON_CreateObject());
		cJSON_AddStringToObject(ev, d->is_error ? "error" : "result", d->text);
		cJSON_AddNumberToObject(ev, "durationMs", (double)d->duration_us / 1000.0);
	}
	pc_hooks_notify(t->agent->rt, hooks, PC_HOOK_AFTER_TOOL_CALL, ev, pc__att_hook_ctx(t, d->tool_call_id), d->name);
}

/* tool_result_persist: the result message as it would be written. */
static bool persist_hook(pc_ctx_t *ctx, attempt_t *t, size_t i, const pc_tool_done_msg_t *d)
{
	const pc_hooks_t *hooks = t->agent->hooks;
	if (!pc_hooks_active(hooks, PC_HOOK_TOOL_RESULT_PERSIST, d->name))
		return false;
	tool_slot_t *s = &t->slots[i];
	s->text = strndup(d->text, d->text_len);
	if (!s->text)
		return false;
	s->is_error = d->is_error;
	s->mutating = d->mutating;
	cJSON *ev = tool_event(t, d->name, d->tool_call_id);
	cJSON *msg = cJSON_CreateObject(), *content = cJSON_CreateArray(), *block = cJSON_CreateObject();
	if (ev && msg && content && block) {
		cJSON_AddStringToObject(block, "type", "text");
		cJSON_AddStringToObject(block, "text", s->text);
		cJSON_AddItemToArray(content, block);
		cJSON_AddStringToObject(msg, "role", "toolResult");
		cJSON_AddStringToObject(msg, "toolCallId", d->tool_call_id);
		cJSON_AddStringToObject(msg, "toolName", d->name);
		cJSON_AddItemToObject(msg, "content", content);
		cJSON_AddBoolToObject(msg, "isError", d->is_error);
		cJSON_AddItemToObject(ev, "message", msg);
	} else {
		cJSON_Delete(msg);
		cJSON_Delete(content);
		cJSON_Delete(block);
	}
	if (pc_hooks_run(t->agent->rt, hooks, PC_HOOK_TOOL_RESULT_PERSIST, ev, pc__att_hook_ctx(t, d->tool_call_id),
			 d->name, pc_self(ctx), HOOK_TAG(i, HOOK_KIND_PERSIST)) != 0) {
		free(s->text);
		s->text = NULL;
		return false;
	}
	/* the chain's answer comes as a message: nothing reads the state before */
	call_set(t, i, PC_TC_LC_PERSIST, pc_tool_status_name(d->status));
	return true;
}

/* The text a transformed message carries: its text blocks joined, or a
 * string content. NULL when it has none. */
static char *message_text(const cJSON *msg, bool *is_error)
{
	const cJSON *content = cJSON_GetObjectItemCaseSensitive(msg, "content");
	const cJSON *err = cJSON_GetObjectItemCaseSensitive(msg, "isError");
	if (cJSON_IsBool(err))
		*is_error = cJSON_IsTrue(err);
	if (cJSON_IsString(content))
		return strdup(content->valuestring);
	if (!cJSON_IsArray(content))
		return NULL;
	pc__buf_t out = {0};
	const cJSON *b;
	bool any = false;
	cJSON_ArrayForEach(b, content) {
		const cJSON *text = cJSON_GetObjectItemCaseSensitive(b, "text");
		if (!cJSON_IsString(text))
			continue;
		if ((any && pc__buf_append_str(&out, "\n") != 0) || pc__buf_append_str(&out, text->valuestring) != 0) {
			pc__buf_free(&out);
			return NULL;
		}
		any = true;
	}
	if (!any)
		pc__buf_free(&out);
	return any ? out.p : NULL;
}

static void on_persist_done(pc_ctx_t *ctx, attempt_t *t, size_t i, const pc_hook_done_msg_t *d)
{
	tool_slot_t *s = &t->slots[i];
	bool is_error = s->is_error;
	cJSON *merged = cJSON_ParseWithLength(d->result, d->result_len);
	char *text = NULL;
	const cJSON *msg = cJSON_GetObjectItemCaseSensitive(merged, "message");
	const cJSON *content = cJSON_GetObjectItemCaseSensitive(merged, "content");
	if (cJSON_IsObject(msg))
		text = message_text(msg, &is_error);
	if (!text && content) {
		cJSON *wrap = cJSON_CreateObject();
		if (wrap && cJSON_AddItemToObject(wrap, "content", cJSON_Duplicate(content, true)))
			text = message_text(wrap, &is_error);
		cJSON_Delete(wrap);
	}
	cJSON_Delete(merged);
	complete_call(ctx, t, i, text ? text : s->text, is_error, s->mutating, PC_TC_LC_DONE, "persisted");
	free(text);
	free(s->text);
	s->text = NULL;
	call_finished(ctx, t, i);
}

void pc__att_on_hook_done(pc_ctx_t *ctx, attempt_t *t, const pc_hook_done_msg_t *d)
{
	size_t i = HOOK_TAG_SLOT(d->tag);
	unsigned kind = HOOK_TAG_KIND(d->tag);
	if (t->state != PC_ATT_LC_TOOLS || i >= t->n_calls || pc_tc_lc_terminal(t->slots[i].stage))
		return;
	if (kind == HOOK_KIND_GATE && t->slots[i].stage == PC_TC_LC_GATE)
		on_gate_done(ctx, t, i, d);
	else if (kind == HOOK_KIND_PERSIST && t->slots[i].stage == PC_TC_LC_PERSIST)
		on_persist_done(ctx, t, i, d);
}

/* On abort, calls waiting end now: a gated call, or one of a batch
 * waiting to be durable, never runs; a result waiting for its transform
 * is written as it is. */
void pc__att_abort_tools(pc_ctx_t *ctx, attempt_t *t)
{
	for (size_t i = 0; i < t->n_calls; i++) {
		tool_slot_t *s = &t->slots[i];
		if (pc_tc_lc_terminal(s->stage))
			continue;
		if (s->stage == PC_TC_LC_GATE || (t->calls_sync && s->stage == PC_TC_LC_WAITING)) {
			complete_call(ctx, t, i, "Tool call aborted before it ran.", true, false, PC_TC_LC_ABORTED,
				      "aborted");
		} else if (s->stage == PC_TC_LC_PERSIST) {
			/* written as it is */
			complete_call(ctx, t, i, s->text, s->is_error, s->mutating, PC_TC_LC_DONE, "aborted");
			free(s->text);
			s->text = NULL;
		}
	}
}

void pc__att_on_tool_done(pc_ctx_t *ctx, attempt_t *t, const pc_tool_done_msg_t *d)
{
	size_t i = (size_t)d->tag;
	if (i >= t->n_calls || t->slots[i].stage != PC_TC_LC_RUNNING)
		return;
	pc_actor_release(t->slots[i].actor);
	t->slots[i].actor = NULL;
	if (d->status == PC_TOOL_TIMEOUT)
		t->timed_out_in_tool = true;
	/* refused before its body (unknown tool, bad arguments): nothing done */
	if (d->mutating && d->status != PC_TOOL_INVALID)
		t->side_effects = true;
	if (t->loop) {
		cJSON *obj = args_object(call_args(t, i));
		pc_loop_record_outcome(t->loop->h, d->name, obj, d->tool_call_id, d->text, d->is_error);
		cJSON_Delete(obj);
	}
	notify_after(t, i, d);
	if (!t->aborting && persist_hook(ctx, t, i, d))
		return;
	complete_call(ctx, t, i, d->text, d->is_error, d->mutating, PC_TC_LC_DONE, pc_tool_status_name(d->status));
	call_finished(ctx, t, i);
}

/* After call i: the next one (sequential), or the end of the batch. */
static void call_finished(pc_ctx_t *ctx, attempt_t *t, size_t i)
{
	if (t->aborting) {
		if (t->calls_done == t->n_calls || pc__att_tool_mode(t) == PC_TOOLS_SEQUENTIAL) {
			skip_calls(ctx, t, i + 1);
			if (t->calls_done == t->n_calls)
				pc__att_finish(ctx, t, "aborted");
		}
		return;
	}
	if (pc__att_tool_mode(t) == PC_TOOLS_SEQUENTIAL && t->next_call == i + 1 && t->next_call < t->n_calls)
		start_tool(ctx, t, t->next_call);
	maybe_settle(ctx, t);
}

static void tools_settled(pc_ctx_t *ctx, attempt_t *t)
{
	cJSON_Delete(t->calls);
	t->calls = NULL;
	for (size_t i = 0; i < t->n_calls; i++)
		if (t->slots[i].actor)
			return;
	t->n_calls = 0;
	pc_steer_decision_t sd;
	pc_steer_at(pc__att_tool_mode(t), PC_STEER_DRAIN_ONE, PC_STEER_AT_TOOLS_DONE, 0, 0, t->steer_n, &sd);
	pc__att_inject_steering(ctx, t, sd.inject);
	if (t->aborting || t->loop_stopped) {
		pc__att_finish(ctx, t, t->aborting ? "aborted" : "loop breaker");
		return;
	}
	if (pc__att_maybe_compact(ctx, t))
		return;
	pc__att_model_call(ctx, t, "tool results");
}
