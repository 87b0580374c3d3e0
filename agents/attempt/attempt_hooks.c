/*
 * The hooks that shape one attempt (§10.2), in the order the attempt meets
 * them:
 *
 *   before_prompt_build   context around the user turn and the system
 *                         prompt, a narrower tool list (toolsAllow)
 *   before_agent_run      may block the run before any model input
 *   before_agent_reply    may answer instead of the model
 *   before_agent_finalize may ask for a revision of a natural final answer
 *
 * Each runs only when a handler is registered for it (pc_hooks_active: a
 * couple of loads otherwise); its chain answers the attempt actor with a
 * PC_MSG_HOOK_DONE, and attempt_actor.c goes on from there. The tool hooks
 * are in attempt_tools.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attempt_internal.h"
#include "payload.h"

cJSON *pc__att_hook_ctx(const attempt_t *t, const char *tool_call_id)
{
	cJSON *c = cJSON_CreateObject();
	if (!c)
		return NULL;
	cJSON_AddStringToObject(c, "agentId", "main");
	cJSON_AddStringToObject(c, "sessionKey", t->key);
	cJSON_AddStringToObject(c, "runId", t->run_id);
	cJSON_AddStringToObject(c, "provider", t->provider->id);
	cJSON_AddStringToObject(c, "model", t->model);
	if (tool_call_id)
		cJSON_AddStringToObject(c, "toolCallId", tool_call_id);
	return c;
}

static bool start(pc_ctx_t *ctx, attempt_t *t, pc_hook_point_t p, unsigned kind, cJSON *event)
{
	if (pc_hooks_run(t->agent->rt, t->agent->hooks, p, event, pc__att_hook_ctx(t, NULL), NULL, pc_self(ctx),
			 HOOK_TAG(0, kind)) != 0)
		return false;
	t->hook_wait = kind;
	return true;
}

static const char *str_field(const cJSON *o, const char *name)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
	return cJSON_IsString(v) && v->valuestring[0] ? v->valuestring : NULL;
}

static char *dup_field(const cJSON *o, const char *name)
{
	const char *s = str_field(o, name);
	return s ? strdup(s) : NULL;
}

/* ---- before_prompt_build ---- */

bool pc__att_hook_prompt_build(pc_ctx_t *ctx, attempt_t *t, const char *turn)
{
	if (!pc_hooks_active(t->agent->hooks, PC_HOOK_BEFORE_PROMPT_BUILD, NULL))
		return false;
	cJSON *ev = cJSON_CreateObject();
	if (ev) {
		cJSON_AddStringToObject(ev, "prompt", turn ? turn : "");
		cJSON_AddItemToObject(ev, "messages", cJSON_Duplicate(t->messages, true));
	}
	return start(ctx, t, PC_HOOK_BEFORE_PROMPT_BUILD, HOOK_KIND_PROMPT, ev);
}

/* toolsAllow only narrows: the offered schemas keep the names listed. */
static void narrow_tools(attempt_t *t, const cJSON *allow)
{
	t->hook_allow = cJSON_Duplicate(allow, true);
	t->hook_tools = cJSON_CreateArray();
	if (!t->hook_allow || !t->hook_tools)
		return;
	const cJSON *schema;
	cJSON_ArrayForEach(schema, t->tools) {
		const char *name = str_field(schema, "name");
		const cJSON *n;
		cJSON_ArrayForEach(n, allow) {
			if (name && cJSON_IsString(n) && !strcmp(n->valuestring, name)) {
				cJSON_AddItemToArray(t->hook_tools, cJSON_Duplicate(schema, true));
				break;
			}
		}
	}
	t->tools = cJSON_GetArraySize(t->hook_tools) > 0 ? t->hook_tools : NULL;
}

void pc__att_apply_prompt_build(attempt_t *t, const char *turn, const pc_hook_done_msg_t *d)
{
	cJSON *r = cJSON_ParseWithLength(d->result, d->result_len);
	if (!r)
		return;
	const char *pre = str_field(r, "prependContext"), *post = str_field(r, "appendContext");
	if (turn && (pre || post)) {
		size_t n = strlen(turn) + (pre ? strlen(pre) + 2 : 0) + (post ? strlen(post) + 2 : 0) + 1;
		t->turn = malloc(n);
		if (t->turn)
			snprintf(t->turn, n, "%s%s%s%s%s", pre ? pre : "", pre ? "\n\n" : "", turn, post ? "\n\n" : "",
				 post ? post : "");
	}
	t->sys_replace = dup_field(r, "systemPrompt");
	t->sys_prepend = dup_field(r, "prependSystemContext");
	t->sys_append = dup_field(r, "appendSystemContext");
	const cJSON *allow = cJSON_GetObjectItemCaseSensitive(r, "toolsAllow");
	if (cJSON_IsArray(allow))
		narrow_tools(t, allow);
	cJSON_Delete(r);
}

/* ---- before_agent_run ---- */

bool pc__att_hook_agent_run(pc_ctx_t *ctx, attempt_t *t)
{
	if (!pc_hooks_active(t->agent->hooks, PC_HOOK_BEFORE_AGENT_RUN, NULL))
		return false;
	const char *turn = t->turn ? t->turn : t->prompt ? t->prompt : t->continuation;
	cJSON *ev = cJSON_CreateObject();
	if (ev) {
		cJSON_AddStringToObject(ev, "prompt", turn ? turn : "");
		cJSON_AddStringToObject(ev, "systemPrompt", t->system_prompt ? t->system_prompt : "");
		cJSON_AddNumberToObject(ev, "messageCount", cJSON_GetArraySize(t->messages));
	}
	return start(ctx, t, PC_HOOK_BEFORE_AGENT_RUN, HOOK_KIND_RUN, ev);
}

void pc__att_apply_agent_run(pc_ctx_t *ctx, attempt_t *t, const pc_hook_done_msg_t *d)
{
	/* §10.2: the transcript keeps only the hook's replacement message,
	 * never the blocked prompt. */
	cJSON *r = cJSON_ParseWithLength(d->result, d->result_len);
	const char *replacement = str_field(r, "message");
	if (replacement) {
		cJSON *m = cJSON_CreateObject();
		if (m) {
			cJSON_AddStringToObject(m, "role", "user");
			cJSON_AddStringToObject(m, "content", replacement);
			int rc = pc__att_persist(ctx, t, "user", m, NULL);
			if (rc != 0)
				t->store_error = rc;
			cJSON_Delete(m);
			if (t->prompt && rc == 0)
				t->user_persisted = true;
		}
	}
	cJSON_Delete(r);
	t->prompt_error = PC_PROMPT_ERR_HOOK_BLOCK;
	pc__att_set_error(t, d->reason[0] ? d->reason : "Blocked by a before_agent_run hook.");
	pc__att_finish(ctx, t, "blocked by before_agent_run");
}

/* ---- before_agent_reply ---- */

bool pc__att_hook_agent_reply(pc_ctx_t *ctx, attempt_t *t)
{
	if (!pc_hooks_active(t->agent->hooks, PC_HOOK_BEFORE_AGENT_REPLY, NULL))
		return false;
	const char *turn = t->turn ? t->turn : t->prompt ? t->prompt : t->continuation;
	cJSON *ev = cJSON_CreateObject();
	if (ev) {
		cJSON_AddStringToObject(ev, "prompt", turn ? turn : "");
		cJSON_AddStringToObject(ev, "trigger", "user");
	}
	return start(ctx, t, PC_HOOK_BEFORE_AGENT_REPLY, HOOK_KIND_REPLY, ev);
}

bool pc__att_apply_agent_reply(pc_ctx_t *ctx, attempt_t *t, const pc_hook_done_msg_t *d)
{
	cJSON *r = cJSON_ParseWithLength(d->result, d->result_len);
	bool handled = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "handled"));
	if (!handled) {
		cJSON_Delete(r);
		return false;
	}
	/* The claimed turn is answered as if the model had: persisted, the
	 * final message; no reply means silence (§5.5). */
	const char *reply = str_field(r, "reply");
	cJSON *msg = cJSON_CreateObject(), *content = cJSON_CreateArray(), *block = cJSON_CreateObject();
	if (!msg || !content || !block) {
		cJSON_Delete(msg);
		cJSON_Delete(content);
		cJSON_Delete(block);
		cJSON_Delete(r);
		pc__att_fail_setup(ctx, t, "out of memory");
		return true;
	}
	cJSON_AddStringToObject(block, "type", "text");
	cJSON_AddStringToObject(block, "text", reply ? reply : PC_SILENT_REPLY_TOKEN);
	cJSON_AddItemToArray(content, block);
	cJSON_AddStringToObject(msg, "role", "assistant");
	cJSON_AddItemToObject(msg, "content", content);
	cJSON_AddStringToObject(msg, "stopReason", "stop");
	cJSON_AddStringToObject(msg, "provider", "hook");
	cJSON_Delete(r);
	int rc = pc__att_persist(ctx, t, "assistant", msg, NULL);
	if (rc != 0)
		t->store_error = rc;
	cJSON_AddItemToArray(t->messages, msg);
	cJSON_Delete(t->final_message);
	t->final_message = cJSON_Duplicate(msg, true);
	t->has_assistant = true;
	t->completed_call = true;
	free(t->stop_reason);
	t->stop_reason = strdup("stop");
	pc__att_finish(ctx, t, "answered by before_agent_reply");
	return true;
}

/* ---- before_agent_finalize ---- */

bool pc__att_hook_finalize(pc_ctx_t *ctx, attempt_t *t)
{
	if (t->cancelled || !pc_hooks_active(t->agent->hooks, PC_HOOK_BEFORE_AGENT_FINALIZE, NULL))
		return false;
	cJSON *ev = cJSON_CreateObject();
	if (ev) {
		const cJSON *b;
		cJSON *texts = cJSON_AddArrayToObject(ev, "assistantTexts");
		cJSON_ArrayForEach(b, cJSON_GetObjectItemCaseSensitive(t->final_message, "content")) {
			const char *text = str_field(b, "text");
			if (texts && text && !strcmp(pc__att_block_str(b, "type"), "text"))
				cJSON_AddItemToArray(texts, cJSON_CreateString(text));
		}
		cJSON_AddStringToObject(ev, "stopReason", t->stop_reason ? t->stop_reason : "stop");
	}
	return start(ctx, t, PC_HOOK_BEFORE_AGENT_FINALIZE, HOOK_KIND_FINALIZE, ev);
}

void pc__att_apply_finalize(attempt_t *t, const pc_hook_done_msg_t *d)
{
	cJSON *r = cJSON_ParseWithLength(d->result, d->result_len);
	const char *action = str_field(r, "action");
	if (action && !strcmp(action, "revise")) {
		/* the retry's instruction when a handler gave one, else the reason */
		const char *why = str_field(cJSON_GetObjectItemCaseSensitive(r, "retry"), "instruction");
		if (!why)
			why = str_field(r, "reason");
		t->finalize_revise = true;
		t->finalize_reason = why ? strdup(why) : NULL;
	}
	cJSON_Delete(r);
}

void pc__att_hooks_free(attempt_t *t)
{
	free(t->turn);
	free(t->sys_replace);
	free(t->sys_prepend);
	free(t->sys_append);
	cJSON_Delete(t->hook_tools);
	cJSON_Delete(t->hook_allow);
	free(t->finalize_reason);
}
