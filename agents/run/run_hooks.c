/*
 * The run's hook points (spec §10.2): before_model_resolve (may change the
 * run's model), message_sending (may change or cancel the reply) and
 * agent_end (told the outcome).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/io.h"
#include "run_internal.h"

/* What every hook of the run reads as its context. */
static cJSON *hook_ctx(const run_t *r)
{
	cJSON *c = cJSON_CreateObject();
	if (c) {
		cJSON_AddStringToObject(c, "agentId", "main");
		cJSON_AddStringToObject(c, "sessionKey", r->key);
		cJSON_AddStringToObject(c, "runId", r->run_id);
	}
	return c;
}

static const char *str_field(const cJSON *o, const char *name)
{
	const char *s = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, name));
	return s && s[0] ? s : NULL;
}

/* Starts the chain of decision point `p`; true when it runs (its DONE
 * comes back with `tag`), false when the run goes on without it. */
static bool hook_start(pc_ctx_t *ctx, run_t *r, pc_hook_point_t p, cJSON *event, uint64_t tag)
{
	return pc_hooks_run(r->agent->rt, r->agent->hooks, p, event, hook_ctx(r), NULL, pc_self(ctx), tag) == 0;
}

bool pc__run_hook_model_resolve(pc_ctx_t *ctx, run_t *r)
{
	if (!pc_hooks_active(r->agent->hooks, PC_HOOK_BEFORE_MODEL_RESOLVE, NULL))
		return false;
	cJSON *ev = cJSON_CreateObject();
	if (ev) {
		cJSON_AddStringToObject(ev, "prompt", r->prompt);
		cJSON_AddStringToObject(ev, "sessionKey", r->key);
	}
	if (!hook_start(ctx, r, PC_HOOK_BEFORE_MODEL_RESOLVE, ev, PC__RUN_TAG_MODEL_RESOLVE))
		return false;
	pc__run_set(r, PC_RUN_LC_RESOLVING, "before_model_resolve");
	return true;
}

/* `ref` becomes the primary candidate when it names a configured
 * provider; otherwise the configured chain stands. Before the first
 * iteration, so the candidate state simply starts over. */
static void set_primary(run_t *r, const pc_model_ref_t *ref)
{
	const pc_config_t *c = r->agent->cfg;
	const pc_provider_config_t *p = pc_config_provider(c, ref->provider);
	char *model = p && p->profile_count <= PC_RUN_MAX_PROFILES ? strdup(ref->model) : NULL;
	if (!model)
		return;
	const pc_model_config_t *m = pc_config_model(p, model);
	pc_model_ref_t own = {.provider = p->id, .model = model};
	free(r->hook_model);
	r->hook_model = model;
	r->cand[0] = (candidate_t){
		.provider = p,
		.model = model,
		.context_tokens = pc_config_context_tokens(c, &own),
		.max_tokens = m ? m->max_tokens : 0,
	};
	r->rs.cfg.profile_counts[0] = (uint32_t)p->profile_count;
	pc_run_enter_candidate(&r->rs, 0);
}

/* {providerOverride?, modelOverride?}: each replaces its half of the
 * primary model; a modelOverride "provider/model" naming a configured
 * provider gives both. An override that names no configured provider is
 * ignored, as are the hook's failures (§10.2). */
void pc__run_apply_model_override(run_t *r, const pc_hook_done_msg_t *d)
{
	cJSON *res = cJSON_ParseWithLength(d->result, d->result_len);
	const char *prov = str_field(res, "providerOverride"), *model = str_field(res, "modelOverride");
	pc_model_ref_t ref = {.provider = prov ? prov : r->cand[0].provider->id,
			      .model = model ? model : r->cand[0].model};
	pc_model_ref_t parsed;
	char *buf = NULL;
	if (model && !prov && strchr(model, '/') && pc_config_model_ref_parse(model, &parsed, &buf) == 0 &&
	    pc_config_provider(r->agent->cfg, parsed.provider))
		ref = parsed;
	if (prov || model)
		set_primary(r, &ref);
	free(buf);
	cJSON_Delete(res);
}

/* The payloads' texts joined with "\n\n" (malloc'd), or NULL. */
static char *joined_text(const cJSON *payloads)
{
	size_t n = 1;
	const cJSON *p;
	cJSON_ArrayForEach(p, payloads) {
		const char *t = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(p, "text"));
		n += t ? strlen(t) + 2 : 0;
	}
	char *out = malloc(n);
	if (!out)
		return NULL;
	size_t off = 0;
	cJSON_ArrayForEach(p, payloads) {
		const char *t = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(p, "text"));
		if (t)
			off += (size_t)snprintf(out + off, n - off, "%s%s", off ? "\n\n" : "", t);
	}
	out[off] = '\0';
	return out;
}

/* message_sending, once, for an ok run with a reply (not a silent one):
 * true when its chain runs; pc__run_finish() is called again at its DONE. */
bool pc__run_hook_message_sending(pc_ctx_t *ctx, run_t *r, const pc_run_action_t *act)
{
	if (r->reply_checked || !act || act->silent || !r->payloads ||
	    !pc_hooks_active(r->agent->hooks, PC_HOOK_MESSAGE_SENDING, NULL))
		return false;
	r->reply_checked = true;
	cJSON *payloads = cJSON_Parse(r->payloads);
	if (cJSON_GetArraySize(payloads) == 0) {
		cJSON_Delete(payloads);
		return false;
	}
	char *content = joined_text(payloads);
	cJSON *ev = cJSON_CreateObject();
	if (!ev || !content || !cJSON_AddItemToObject(ev, "payloads", payloads)) {
		cJSON_Delete(payloads);
		cJSON_Delete(ev);
		free(content);
		return false;
	}
	cJSON_AddStringToObject(ev, "content", content);
	cJSON_AddStringToObject(ev, "sessionKey", r->key);
	cJSON_AddStringToObject(ev, "runId", r->run_id);
	free(content);
	pc_run_action_t *held = malloc(sizeof(*held));
	if (!held || !hook_start(ctx, r, PC_HOOK_MESSAGE_SENDING, ev, PC__RUN_TAG_MESSAGE_SENDING)) {
		if (!held)
			cJSON_Delete(ev);
		free(held);
		return false;
	}
	*held = *act;
	free(r->final_act);
	r->final_act = held;
	pc__run_set(r, PC_RUN_LC_SENDING, "message_sending");
	return true;
}

/* [{"text": text}] as JSON text (malloc'd), or NULL. */
static char *one_payload(const char *text)
{
	cJSON *arr = cJSON_CreateArray(), *p = cJSON_CreateObject();
	char *out = NULL;
	if (arr && p && cJSON_AddStringToObject(p, "text", text) && cJSON_AddItemToArray(arr, p)) {
		p = NULL; /* the array's now */
		char *s = pc_json_print(arr);
		out = s ? strdup(s) : NULL;
		cJSON_free(s);
	}
	cJSON_Delete(p);
	cJSON_Delete(arr);
	return out;
}

/* The merged message_sending result: cancel drops the reply (the run
 * ends ok and silent); content replaces it with one payload of that text
 * (none when the text is empty). A rewrite that cannot be made drops the
 * reply rather than send what a hook replaced. */
void pc__run_apply_message_sending(run_t *r, const pc_hook_done_msg_t *d)
{
	cJSON *res = cJSON_ParseWithLength(d->result, d->result_len);
	const char *content = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(res, "content"));
	if (d->blocked || content) {
		free(r->payloads);
		r->payloads = !d->blocked && content[0] ? one_payload(content) : NULL;
	}
	cJSON_Delete(res);
}

/* agent_end: every end of the run, observed. `payloads` (borrowed) are
 * the terminal event's. */
void pc__run_hook_agent_end(const run_t *r, pc_run_status_t status, const char *error, const cJSON *payloads)
{
	if (!pc_hooks_active(r->agent->hooks, PC_HOOK_AGENT_END, NULL))
		return;
	cJSON *ev = cJSON_CreateObject();
	if (!ev)
		return;
	cJSON_AddBoolToObject(ev, "success", status == PC_RUN_STATUS_OK);
	cJSON_AddStringToObject(ev, "status", pc_run_status_name(status));
	if (error)
		cJSON_AddStringToObject(ev, "error", error);
	cJSON_AddNumberToObject(ev, "durationMs", (double)pc__run_ms(r));
	/* the payloads came as printed text: hooks get them as a tree */
	cJSON *copy = cJSON_IsRaw(payloads) ? cJSON_Parse(payloads->valuestring) : cJSON_Duplicate(payloads, true);
	cJSON_AddItemToObject(ev, "payloads", copy ? copy : cJSON_CreateArray());
	cJSON_AddStringToObject(ev, "runId", r->run_id);
	cJSON_AddStringToObject(ev, "sessionKey", r->key);
	pc_hooks_notify(r->agent->rt, r->agent->hooks, PC_HOOK_AGENT_END, ev, hook_ctx(r), NULL);
}
