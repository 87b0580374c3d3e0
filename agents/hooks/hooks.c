/*
 * Hooks (hooks.h): the registry of handlers per point, its lifetime, and
 * reports.
 *
 * Handlers are kept per point, already in run order (descending priority,
 * registration order within a priority): an insertion after the last entry
 * of equal or higher priority keeps that order without a sequence number,
 * and a chain only copies pointers. pc_hooks_active reads one counter in
 * the common case of a point with no handler.
 */
#include "hooks_internal.h"
#include "io/io.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const point_names[PC_HOOK__COUNT] = {
	[PC_HOOK_BEFORE_MODEL_RESOLVE] = "before_model_resolve",
	[PC_HOOK_BEFORE_PROMPT_BUILD] = "before_prompt_build",
	[PC_HOOK_BEFORE_AGENT_RUN] = "before_agent_run",
	[PC_HOOK_BEFORE_AGENT_REPLY] = "before_agent_reply",
	[PC_HOOK_BEFORE_AGENT_FINALIZE] = "before_agent_finalize",
	[PC_HOOK_AGENT_END] = "agent_end",
	[PC_HOOK_BEFORE_COMPACTION] = "before_compaction",
	[PC_HOOK_AFTER_COMPACTION] = "after_compaction",
	[PC_HOOK_BEFORE_TOOL_CALL] = "before_tool_call",
	[PC_HOOK_AFTER_TOOL_CALL] = "after_tool_call",
	[PC_HOOK_TOOL_RESULT_PERSIST] = "tool_result_persist",
	[PC_HOOK_MESSAGE_RECEIVED] = "message_received",
	[PC_HOOK_MESSAGE_SENDING] = "message_sending",
	[PC_HOOK_MESSAGE_SENT] = "message_sent",
	[PC_HOOK_SESSION_START] = "session_start",
	[PC_HOOK_SESSION_END] = "session_end",
	[PC_HOOK_GATEWAY_START] = "gateway_start",
	[PC_HOOK_GATEWAY_STOP] = "gateway_stop",
};

static bool valid_point(pc_hook_point_t p)
{
	return (unsigned)p < PC_HOOK__COUNT;
}

const char *pc_hook_point_name(pc_hook_point_t p)
{
	return valid_point(p) ? point_names[p] : "none";
}

int pc_hook_point_from_name(const char *name, pc_hook_point_t *out)
{
	if (!name || !out)
		return PC_EINVAL;
	for (unsigned i = 0; i < PC_HOOK__COUNT; i++) {
		if (strcmp(point_names[i], name) == 0) {
			*out = (pc_hook_point_t)i;
			return 0;
		}
	}
	return PC_ENOTFOUND;
}

bool pc_hook_point_is_decision(pc_hook_point_t p)
{
	switch (p) {
	case PC_HOOK_BEFORE_MODEL_RESOLVE:
	case PC_HOOK_BEFORE_PROMPT_BUILD:
	case PC_HOOK_BEFORE_AGENT_RUN:
	case PC_HOOK_BEFORE_AGENT_REPLY:
	case PC_HOOK_BEFORE_AGENT_FINALIZE:
	case PC_HOOK_BEFORE_TOOL_CALL:
	case PC_HOOK_TOOL_RESULT_PERSIST:
	case PC_HOOK_MESSAGE_SENDING:
		return true;
	default:
		return false;
	}
}

bool pc_hook_point_has_matcher(pc_hook_point_t p)
{
	return p == PC_HOOK_BEFORE_TOOL_CALL || p == PC_HOOK_AFTER_TOOL_CALL;
}

static uint32_t default_timeout(pc_hook_point_t p)
{
	if (pc_hook_point_is_decision(p))
		return PC_HOOK_DECISION_TIMEOUT_MS;
	return p == PC_HOOK_GATEWAY_STOP ? PC_HOOK_GATEWAY_STOP_TIMEOUT_MS : PC_HOOK_OBSERVE_TIMEOUT_MS;
}

/* ---- lifetime ------------------------------------------------------------ */

int pc_hooks_new(pc_hooks_t **out)
{
	if (!out)
		return PC_EINVAL;
	*out = calloc(1, sizeof(**out));
	if (!*out)
		return PC_ENOMEM;
	(*out)->refs = 1;
	return 0;
}

static void entry_free(pc__hook_entry_t *e)
{
	if (!e)
		return;
	for (size_t i = 0; i < e->matcher_count; i++)
		free(e->matcher[i]);
	free(e->matcher);
	free(e->owner);
	free(e);
}

/* The last reference is gone: no chain and no handler runs any more, so
 * plugin code may be finished and unloaded. fini runs before the entries
 * go (a plugin may look at its own state), dlclose after. */
static void destroy(pc_hooks_t *h)
{
	pc__plugins_fini(h->plugins);
	for (unsigned p = 0; p < PC_HOOK__COUNT; p++) {
		for (uint32_t i = 0; i < h->n[p]; i++)
			entry_free(h->by_point[p][i]);
		free(h->by_point[p]);
	}
	pc__plugins_close(h->plugins);
	free(h);
}

void pc_hooks_retain(const pc_hooks_t *h)
{
	if (!h)
		return;
	__atomic_add_fetch(&((pc_hooks_t *)h)->refs, 1, __ATOMIC_RELAXED);
}

void pc_hooks_release(const pc_hooks_t *h)
{
	if (!h)
		return;
	/* acq_rel: whatever the last holder did happens before destroy. */
	if (__atomic_sub_fetch(&((pc_hooks_t *)h)->refs, 1, __ATOMIC_ACQ_REL) == 0)
		destroy((pc_hooks_t *)h);
}

void pc_hooks_free(pc_hooks_t *h)
{
	if (h)
		pc_hooks_release(h);
}

bool pc__hooks_sealed(const pc_hooks_t *h)
{
	return __atomic_load_n(&h->sealed, __ATOMIC_ACQUIRE) != 0;
}

void pc_hooks_set_report(pc_hooks_t *h, pc_hook_report_fn fn, void *user)
{
	if (!h)
		return;
	h->report = fn;
	h->report_user = user;
}

/* ---- reports ------------------------------------------------------------- */

static const char *kind_name(pc_hook_report_kind_t k)
{
	switch (k) {
	case PC_HOOK_REPORT_FAILED: return "failed";
	case PC_HOOK_REPORT_MALFORMED: return "malformed";
	case PC_HOOK_REPORT_TIMEOUT: return "timeout";
	case PC_HOOK_REPORT_LOG: return "log";
	default: return "unknown";
	}
}

void pc__hooks_report(const pc_hooks_t *h, pc_hook_report_kind_t kind, pc_hook_point_t point, const char *owner,
		      int code, int level, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	pc_hook_report_t r = {
		.kind = kind,
		.point = point,
		.owner = owner ? owner : "c",
		.code = code,
		.level = level,
		.message = msg,
	};
	if (h->report) {
		h->report(h->report_user, &r);
		return;
	}
	/* No logger set: one line on stderr, so a failure is never silent. */
	fprintf(stderr, "pincer hooks: kind=%s point=%s owner=%s code=%d msg=\"%s\"\n", kind_name(kind),
		pc_hook_point_name(point), r.owner, code, msg);
}

/* ---- registration -------------------------------------------------------- */

static bool def_valid(const pc_hook_def_t *def)
{
	if (!valid_point(def->point) || !def->fn)
		return false;
	if (!def->matcher)
		return true;
	if (!pc_hook_point_has_matcher(def->point) || def->matcher_count == 0)
		return false;
	for (size_t i = 0; i < def->matcher_count; i++)
		if (!def->matcher[i] || !def->matcher[i][0])
			return false;
	return true;
}

static pc__hook_entry_t *entry_new(const pc_hook_def_t *def, pc__plugin_t *plugin)
{
	pc__hook_entry_t *e = calloc(1, sizeof(*e));
	if (!e)
		return NULL;
	e->point = def->point;
	e->priority = def->priority;
	e->timeout_ms = def->timeout_ms ? def->timeout_ms : default_timeout(def->point);
	e->fn = def->fn;
	e->user = def->user;
	e->plugin = plugin;
	e->owner = strdup(def->owner ? def->owner : "c");
	if (!e->owner)
		goto fail;
	if (def->matcher) {
		e->matcher = calloc(def->matcher_count, sizeof(*e->matcher));
		if (!e->matcher)
			goto fail;
		for (; e->matcher_count < def->matcher_count; e->matcher_count++) {
			e->matcher[e->matcher_count] = strdup(def->matcher[e->matcher_count]);
			if (!e->matcher[e->matcher_count])
				goto fail;
		}
	}
	return e;
fail:
	entry_free(e);
	return NULL;
}

/* Inserts after every entry of equal or higher priority. */
static int insert(pc_hooks_t *h, pc__hook_entry_t *e)
{
	pc_hook_point_t p = e->point;
	size_t cap = h->cap[p];
	if (PC__GROW(h->by_point[p], cap, (size_t)h->n[p] + 1, 4))
		return PC_ENOMEM;
	h->cap[p] = (uint32_t)cap;
	pc__hook_entry_t **v = h->by_point[p];
	uint32_t at = 0;
	while (at < h->n[p] && v[at]->priority >= e->priority)
		at++;
	memmove(v + at + 1, v + at, (h->n[p] - at) * sizeof(*v));
	v[at] = e;
	h->n[p]++;
	if (!e->matcher)
		h->unmatched[p]++;
	return 0;
}

int pc__hooks_register_as(pc_hooks_t *h, const pc_hook_def_t *def, pc__plugin_t *plugin)
{
	if (!h || !def || !def_valid(def))
		return PC_EINVAL;
	if (pc__hooks_sealed(h))
		return PC_ESTATE;
	pc__hook_entry_t *e = entry_new(def, plugin);
	if (!e)
		return PC_ENOMEM;
	int rc = insert(h, e);
	if (rc != 0)
		entry_free(e);
	return rc;
}

int pc_hooks_register(pc_hooks_t *h, const pc_hook_def_t *def)
{
	return pc__hooks_register_as(h, def, NULL);
}

void pc__hooks_remove_plugin(pc_hooks_t *h, const pc__plugin_t *plugin)
{
	for (unsigned p = 0; p < PC_HOOK__COUNT; p++) {
		uint32_t keep = 0;
		for (uint32_t i = 0; i < h->n[p]; i++) {
			pc__hook_entry_t *e = h->by_point[p][i];
			if (e->plugin != plugin) {
				h->by_point[p][keep++] = e;
				continue;
			}
			if (!e->matcher)
				h->unmatched[p]--;
			entry_free(e);
		}
		h->n[p] = keep;
	}
}

/* ---- queries ------------------------------------------------------------- */

bool pc__hook_entry_matches(const pc__hook_entry_t *e, const char *match_name)
{
	if (!e->matcher || !match_name)
		return true;
	for (size_t i = 0; i < e->matcher_count; i++)
		if (strcmp(e->matcher[i], match_name) == 0)
			return true;
	return false;
}

bool pc_hooks_active(const pc_hooks_t *h, pc_hook_point_t p, const char *match_name)
{
	if (!h || !valid_point(p) || h->n[p] == 0)
		return false;
	if (!match_name || h->unmatched[p])
		return true;
	for (uint32_t i = 0; i < h->n[p]; i++)
		if (pc__hook_entry_matches(h->by_point[p][i], match_name))
			return true;
	return false;
}

size_t pc_hooks_count(const pc_hooks_t *h, pc_hook_point_t p)
{
	return h && valid_point(p) ? h->n[p] : 0;
}
