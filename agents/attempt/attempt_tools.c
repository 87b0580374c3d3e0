/*
 * The attempt's tool phase (§3.1-§3.4): the model's tool calls run as tool
 * actors, one after another or as a parallel batch; steering is checked at
 * each boundary; every result is appended to the context and persisted
 * before the loop goes back to the model.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attempt_internal.h"
#include "steering.h"

static void start_tool(pc_ctx_t *ctx, attempt_t *t, size_t i);
static void tools_settled(pc_ctx_t *ctx, attempt_t *t);

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
	char *idtext = cJSON_PrintUnformatted(idarr);
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
		if (t->slots[i].done || t->slots[i].actor)
			continue;
		const cJSON *b = cJSON_GetArrayItem(t->calls, (int)i);
		const char *id = pc__att_block_str(b, "id"), *name = pc__att_block_str(b, "name");
		emit_tool(t, "start", id, name, cJSON_GetObjectItemCaseSensitive(b, "arguments"), NULL, false);
		emit_tool(t, "result", id, name, NULL, PC_STEER_SKIPPED_TEXT, true);
		add_tool_result(ctx, t, id, name, PC_STEER_SKIPPED_TEXT, true);
		t->slots[i].done = true;
		t->slots[i].skipped = true;
		t->calls_done++;
	}
}

/* Appends `n` queued steering messages as user turns. */
void pc__att_inject_steering(pc_ctx_t *ctx, attempt_t *t, size_t n)
{
	for (size_t i = 0; i < n && t->steer_n > 0; i++) {
		char *text = t->steer[0];
		memmove(t->steer, t->steer + 1, (t->steer_n - 1) * sizeof(char *));
		t->steer_n--;
		cJSON *m = cJSON_CreateObject();
		if (m) {
			cJSON_AddStringToObject(m, "role", "user");
			cJSON_AddStringToObject(m, "content", text);
			int rc = pc__att_persist(ctx, t, "user", m, NULL);
			if (rc != 0)
				t->store_error = rc;
			cJSON_AddItemToArray(t->messages, m);
		}
		free(text);
	}
}

pc_tool_mode_t pc__att_tool_mode(const attempt_t *t) { return t->agent->cfg->agent.tool_mode; }

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
	t->phase = PH_TOOLS;
	pc_tool_mode_t mode = pc__att_tool_mode(t);
	pc_steer_decision_t sd;
	if (mode == PC_TOOLS_PARALLEL) {
		pc_steer_at(mode, PC_STEER_DRAIN_ONE, PC_STEER_AT_BATCH_LAUNCH, 0, t->n_calls, t->steer_n, &sd);
		if (sd.skip_from < t->n_calls)
			skip_calls(ctx, t, sd.skip_from);
		for (size_t i = 0; i < t->n_calls; i++)
			if (!t->slots[i].done)
				start_tool(ctx, t, i);
	} else {
		start_tool(ctx, t, 0);
	}
	if (t->calls_done == t->n_calls)
		tools_settled(ctx, t);
}

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
	const cJSON *args = cJSON_GetObjectItemCaseSensitive(b, "arguments");
	char *args_text = cJSON_IsString(args) ? strdup(args->valuestring) : cJSON_PrintUnformatted(args);
	emit_tool(t, "start", id, name, args, NULL, false);
	pc_tool_invoke_t req = {
		.name = name,
		.tool_call_id = id,
		.arguments = args_text ? args_text : "{}",
		.env = {.workspace = t->agent->cfg->agent.workspace ? t->agent->cfg->agent.workspace : ".",
			.session_key = t->key, .run_id = t->run_id, .tool_call_id = id},
		.tag = i,
	};
	int rc = pc_tool_invoke_start(t->agent->rt, t->agent->tools, &req, pc_self(ctx), &t->slots[i].actor);
	if (cJSON_IsString(args))
		free(args_text);
	else
		cJSON_free(args_text);
	t->next_call = i + 1;
	t->tool_calls_run++;
	__atomic_add_fetch(&t->agent->stats.tool_calls, 1, __ATOMIC_RELAXED);
	if (rc != 0) {
		t->slots[i].actor = NULL;
		t->slots[i].done = true;
		t->calls_done++;
		emit_tool(t, "result", id, name, NULL, "Tool could not be started.", true);
		add_tool_result(ctx, t, id, name, "Tool could not be started.", true);
	}
}

/* Every live tool outcome goes to the run for its post-compaction loop
 * guard (§1.16): the tool, a hash of its arguments and of its result. */
static void report_outcome(attempt_t *t, size_t i, const pc_tool_done_msg_t *d)
{
	const cJSON *args = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(t->calls, (int)i), "arguments");
	char *text = cJSON_IsString(args) ? NULL : cJSON_PrintUnformatted(args);
	const char *a = cJSON_IsString(args) ? args->valuestring : text ? text : "";
	pc_msg_t *m = pc_msg_new(PC__MSG_TOOL_OUTCOME, sizeof(pc__tool_outcome_t));
	if (m) {
		pc__tool_outcome_t *o = pc_msg_data(m);
		o->args_hash = pc__hash64(a, strlen(a));
		o->result_hash = pc__hash64(d->text, d->text_len);
		snprintf(o->name, sizeof(o->name), "%s", d->name);
		pc_send(t->run, m);
	}
	cJSON_free(text);
}

void pc__att_on_tool_done(pc_ctx_t *ctx, attempt_t *t, const pc_tool_done_msg_t *d)
{
	size_t i = (size_t)d->tag;
	if (i >= t->n_calls || t->slots[i].done)
		return;
	pc_actor_release(t->slots[i].actor);
	t->slots[i].actor = NULL;
	t->slots[i].done = true;
	t->calls_done++;
	emit_tool(t, "result", d->tool_call_id, d->name, NULL, d->text, d->is_error);
	add_tool_result(ctx, t, d->tool_call_id, d->name, d->text, d->is_error);
	report_outcome(t, i, d);
	if (d->is_error) {
		free(t->tool_error_name);
		free(t->tool_error_text);
		t->tool_error_name = strdup(d->name);
		t->tool_error_text = strdup(d->text);
		t->tool_error_mutating = d->mutating;
	} else if (t->tool_error_name && !strcmp(t->tool_error_name, d->name)) {
		/* a later success of the same tool clears its warning (§5.7) */
		free(t->tool_error_name);
		free(t->tool_error_text);
		t->tool_error_name = t->tool_error_text = NULL;
	}
	if (d->status == PC_TOOL_TIMEOUT)
		t->timed_out_in_tool = true;
	if (t->aborting) {
		if (t->calls_done == t->n_calls || pc__att_tool_mode(t) == PC_TOOLS_SEQUENTIAL) {
			skip_calls(ctx, t, i + 1);
			pc__att_finish(ctx, t);
		}
		return;
	}
	if (pc__att_tool_mode(t) == PC_TOOLS_SEQUENTIAL && t->next_call < t->n_calls)
		start_tool(ctx, t, t->next_call);
	if (t->calls_done == t->n_calls)
		tools_settled(ctx, t);
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
	if (t->aborting) {
		pc__att_finish(ctx, t);
		return;
	}
	if (pc__att_maybe_compact(ctx, t))
		return;
	pc__att_model_call(ctx, t);
}
