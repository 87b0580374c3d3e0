/*
 * Assistant text handling and final payload shaping.
 *
 * The tool-error warning (§5.7), decided in this order:
 *   1. no last tool error, or suppressToolErrorWarnings: none;
 *   2. exec-like tools without details: none (their output already says
 *      it), even though exec is mutating;
 *   3. sessions_send: none (a relay timeout may still have delivered);
 *   4. mutating tools: shown even when the model answered — the user must
 *      not believe a change happened — unless a model error is already
 *      reported; messages.suppressToolErrors does not hide them;
 *   5. messages.suppressToolErrors: none;
 *   6. otherwise shown only when no assistant reply remains, the error is
 *      not recoverable and no messaging tool already replied: the reply of
 *      last resort;
 *   7. never twice: a payload with the same normalised text suppresses it.
 * The error text itself is included only with details (raw errors can be
 * noisy or leak internals).
 */
#include "payload.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- tags ---- */

enum { TAG_NONE = 0, TAG_THINK, TAG_FINAL };

static const char *const think_names[] = {"think", "thinking", "thought", "antthinking"};

/* A reasoning or final tag at s (s[0] == '<'): its kind and whether it
 * closes; returns its length through '>', or 0 when it is no such tag. */
static size_t parse_tag(const char *s, int *kind, bool *closing)
{
	size_t i = 1;
	*closing = s[i] == '/';
	if (*closing)
		i++;
	size_t name = i;
	while (isalpha((unsigned char)s[i]))
		i++;
	size_t nl = i - name;
	*kind = TAG_NONE;
	for (size_t k = 0; k < sizeof(think_names) / sizeof(think_names[0]); k++)
		if (nl == strlen(think_names[k]) && strncasecmp(s + name, think_names[k], nl) == 0)
			*kind = TAG_THINK;
	if (nl == 5 && strncasecmp(s + name, "final", 5) == 0)
		*kind = TAG_FINAL;
	if (*kind == TAG_NONE || (s[i] != '>' && s[i] != '/' && !isspace((unsigned char)s[i])))
		return 0;
	while (s[i] && s[i] != '>' && s[i] != '<')
		i++;
	return s[i] == '>' ? i + 1 : 0;
}

/* Trims buf[0..n) in place and terminates it. */
static void trim_into(char *buf, size_t n)
{
	size_t a = 0;
	while (a < n && isspace((unsigned char)buf[a]))
		a++;
	while (n > a && isspace((unsigned char)buf[n - 1]))
		n--;
	memmove(buf, buf + a, n - a);
	buf[n - a] = '\0';
}

int pc_payload_strip_tags(const char *text, bool enforce_final, char **out)
{
	if (!text || !out)
		return PC_EINVAL;
	size_t len = strlen(text), o = 0;
	char *buf = malloc(len + 1);
	if (!buf)
		return PC_ENOMEM;
	bool in_think = false, in_final = false, fence = false, code = false;
	for (size_t i = 0; i < len;) {
		size_t n = 1;
		if (!in_think && strncmp(text + i, "```", 3) == 0) {
			fence = !fence;
			n = 3;
		} else if (!in_think && !fence && text[i] == '`') {
			code = !code;
		} else if (text[i] == '<' && !fence && !code) {
			int kind;
			bool closing;
			size_t t = parse_tag(text + i, &kind, &closing);
			if (t && kind == TAG_THINK) {
				in_think = !closing;
				i += t;
				continue;
			}
			if (t && !in_think) {
				in_final = !closing;
				i += t;
				continue;
			}
		}
		if (!in_think && (!enforce_final || in_final)) {
			memcpy(buf + o, text + i, n);
			o += n;
		}
		i += n;
	}
	trim_into(buf, o);
	*out = buf;
	return 0;
}

/* ---- the silent token ---- */

static const char *skip_ws(const char *s)
{
	while (isspace((unsigned char)*s))
		s++;
	return s;
}

bool pc_payload_is_silent(const char *text)
{
	if (!text)
		return false;
	const char *s = skip_ws(text);
	size_t tl = strlen(PC_SILENT_REPLY_TOKEN);
	return strncasecmp(s, PC_SILENT_REPLY_TOKEN, tl) == 0 && *skip_ws(s + tl) == '\0';
}

bool pc_payload_is_silent_prefix(const char *text)
{
	if (!text)
		return false;
	const char *s = skip_ws(text);
	size_t n = strlen(s);
	if (n == 0 || n > strlen(PC_SILENT_REPLY_TOKEN) || !strchr(s, '_'))
		return false;
	for (size_t i = 0; i < n; i++)
		if (!isalpha((unsigned char)s[i]) && s[i] != '_')
			return false;
	return strncasecmp(s, PC_SILENT_REPLY_TOKEN, n) == 0;
}

const char *pc_payload_skip_silent(const char *text)
{
	if (!text)
		return NULL;
	const char *s = skip_ws(text);
	size_t tl = strlen(PC_SILENT_REPLY_TOKEN);
	if (strncasecmp(s, PC_SILENT_REPLY_TOKEN, tl) != 0)
		return text;
	unsigned char c = (unsigned char)s[tl];
	if (c && (isalnum(c) || c == '_'))
		return text; /* "NO_REPLYING" is a word, not the token */
	return skip_ws(s + tl);
}

/* ---- messaging-tool dedup ---- */

int pc_payload_normalize(const char *text, char **out)
{
	if (!text || !out)
		return PC_EINVAL;
	char *buf = malloc(strlen(text) + 1);
	if (!buf)
		return PC_ENOMEM;
	size_t o = 0;
	for (const char *s = skip_ws(text); *s;) {
		if (isspace((unsigned char)*s)) {
			s = skip_ws(s);
			if (*s)
				buf[o++] = ' ';
			continue;
		}
		buf[o++] = (char)tolower((unsigned char)*s++);
	}
	buf[o] = '\0';
	*out = buf;
	return 0;
}

/* raw, normalised on the fly, equals normed (already normalised). */
static bool norm_eq(const char *raw, const char *normed)
{
	const char *s = skip_ws(raw);
	while (*s) {
		if (isspace((unsigned char)*s)) {
			s = skip_ws(s);
			if (*s && *normed++ != ' ')
				return false;
			continue;
		}
		if ((char)tolower((unsigned char)*s++) != *normed++)
			return false;
	}
	return *normed == '\0';
}

int pc_payload_sent_commit(cJSON *sent, const char *text)
{
	if (!cJSON_IsArray(sent) || !text)
		return PC_EINVAL;
	char *norm;
	int rc = pc_payload_normalize(text, &norm);
	if (rc)
		return rc;
	if (*norm) {
		cJSON *s = cJSON_CreateString(norm);
		if (!s || !cJSON_AddItemToArray(sent, s)) {
			cJSON_Delete(s);
			rc = PC_ENOMEM;
		}
		while (rc == 0 && cJSON_GetArraySize(sent) > PC_PAYLOAD_SENT_CAP)
			cJSON_DeleteItemFromArray(sent, 0);
	}
	free(norm);
	return rc;
}

bool pc_payload_is_sent_duplicate(const cJSON *sent, const char *text)
{
	if (!text || !*skip_ws(text))
		return false;
	const cJSON *s;
	cJSON_ArrayForEach(s, sent)
		if (cJSON_IsString(s) && norm_eq(text, s->valuestring))
			return true;
	return false;
}

/* ---- final payloads ---- */

/* "⚠️ <tool>[ (<meta>)] failed[: <error>]" */
#define TOOL_ERROR_FMT "\u26a0\ufe0f %s%s%s%s failed%s%s"

int pc_payload_tool_error_text(const pc_tool_error_t *e, bool include_details, char **out)
{
	if (!e || !e->tool_name || !out)
		return PC_EINVAL;
	bool detail = include_details && e->error;
	const char *mo = e->meta ? " (" : "", *m = e->meta ? e->meta : "", *mc = e->meta ? ")" : "";
	const char *eo = detail ? ": " : "", *er = detail ? e->error : "";
	int n = snprintf(NULL, 0, TOOL_ERROR_FMT, e->tool_name, mo, m, mc, eo, er);
	char *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
	if (!buf)
		return PC_ENOMEM;
	snprintf(buf, (size_t)n + 1, TOOL_ERROR_FMT, e->tool_name, mo, m, mc, eo, er);
	*out = buf;
	return 0;
}

static const char *const recoverable_words[] = {
	"required", "missing", "invalid", "must be", "must have", "needs", "requires",
};

/* Does hay contain needle (lower case), ignoring ASCII case? */
static bool contains_ci(const char *hay, const char *needle)
{
	size_t n = strlen(needle);
	for (; *hay; hay++)
		if (strncasecmp(hay, needle, n) == 0)
			return true;
	return false;
}

bool pc_payload_tool_error_recoverable(const char *error)
{
	if (!error)
		return false;
	for (size_t i = 0; i < sizeof(recoverable_words) / sizeof(recoverable_words[0]); i++)
		if (contains_ci(error, recoverable_words[i]))
			return true;
	return false;
}

enum { P_REPLY = 0, P_ERROR, P_REASONING, P_SUMMARY };

/* Appends {"text" (trimmed), flags} unless the text is empty, exactly
 * NO_REPLY, or (for replies) a repeat of a committed messaging-tool send.
 * *added says whether it did. */
static int add_payload(cJSON *arr, const char *text, int kind, const cJSON *sent, bool *added)
{
	*added = false;
	if (!text || !*skip_ws(text) || pc_payload_is_silent(text))
		return 0;
	if (kind != P_ERROR && pc_payload_is_sent_duplicate(sent, text))
		return 0;
	const char *a = skip_ws(text);
	size_t n = strlen(a);
	while (n > 0 && isspace((unsigned char)a[n - 1]))
		n--;
	char *trimmed = malloc(n + 1);
	cJSON *p = cJSON_CreateObject();
	int rc = PC_ENOMEM;
	if (trimmed && p) {
		memcpy(trimmed, a, n);
		trimmed[n] = '\0';
		if (cJSON_AddStringToObject(p, "text", trimmed) &&
		    (kind != P_ERROR || cJSON_AddTrueToObject(p, "isError")) &&
		    (kind != P_REASONING || cJSON_AddTrueToObject(p, "isReasoning")) && cJSON_AddItemToArray(arr, p)) {
			p = NULL;
			rc = 0;
			*added = true;
		}
	}
	cJSON_Delete(p);
	free(trimmed);
	return rc;
}

/* Adds every string of `texts`; *any is set when one was added. */
static int add_all(cJSON *arr, const cJSON *texts, int kind, const cJSON *sent, bool *any)
{
	const cJSON *t;
	cJSON_ArrayForEach(t, texts) {
		bool added = false;
		int rc = cJSON_IsString(t) ? add_payload(arr, t->valuestring, kind, sent, &added) : 0;
		if (rc)
			return rc;
		*any = *any || added;
	}
	return 0;
}

/* Does a payload already say `norm` (a normalised text)? */
static bool has_text(const cJSON *arr, const char *norm)
{
	const cJSON *p;
	cJSON_ArrayForEach(p, arr) {
		const cJSON *t = cJSON_GetObjectItemCaseSensitive(p, "text");
		if (cJSON_IsString(t) && norm_eq(t->valuestring, norm))
			return true;
	}
	return false;
}

bool pc_payload_tool_is_exec_like(const char *name)
{
	return name && (!strcmp(name, "exec") || !strcmp(name, "bash"));
}

static bool show_tool_error(const pc_payload_input_t *in, bool replied, bool model_error)
{
	const pc_tool_error_t *e = in->last_tool_error;
	if (!e || !e->tool_name || in->suppress_tool_error_warnings)
		return false;
	if (e->exec_like && !in->tool_error_details)
		return false;
	if (strcmp(e->tool_name, "sessions_send") == 0)
		return false;
	if (e->mutating)
		return !model_error;
	if (in->suppress_tool_errors)
		return false;
	return !replied && !pc_payload_tool_error_recoverable(e->error) && !in->did_send_via_messaging_tool;
}

/* Appends the warning unless a payload already says the same. */
static int add_warning(cJSON *arr, const pc_payload_input_t *in)
{
	char *warn = NULL, *norm = NULL;
	bool added;
	int rc = pc_payload_tool_error_text(in->last_tool_error, in->tool_error_details, &warn);
	if (rc == 0)
		rc = pc_payload_normalize(warn, &norm);
	if (rc == 0 && !has_text(arr, norm))
		rc = add_payload(arr, warn, P_ERROR, NULL, &added);
	free(norm);
	free(warn);
	return rc;
}

int pc_payload_build(const pc_payload_input_t *in, cJSON **out)
{
	if (!in || !out)
		return PC_EINVAL;
	cJSON *arr = cJSON_CreateArray();
	bool replied = false, model_error = false, ignored = false;
	int rc = arr ? 0 : PC_ENOMEM;
	if (rc == 0)
		rc = add_payload(arr, in->reasoning, P_REASONING, in->sent_texts, &ignored);
	/* The messaging tool already answered the source: the assistant's
	 * "I sent it" confirmation would be a second reply. */
	if (rc == 0 && !in->delivered_to_source)
		rc = add_all(arr, in->assistant_texts, P_REPLY, in->sent_texts, &replied);
	if (rc == 0)
		rc = add_all(arr, in->tool_summaries, P_SUMMARY, in->sent_texts, &ignored);
	if (rc == 0)
		rc = add_payload(arr, in->assistant_error, P_ERROR, NULL, &model_error);
	if (rc == 0 && show_tool_error(in, replied, model_error))
		rc = add_warning(arr, in);
	if (rc) {
		cJSON_Delete(arr);
		return rc;
	}
	*out = arr;
	return 0;
}

/* ---- terminal ordering ---- */

pc_terminal_step_t pc_terminal_advance(pc_terminal_t *t)
{
	if (!t || t->next >= PC_TERMINAL_DONE)
		return PC_TERMINAL_DONE;
	pc_terminal_step_t s = (pc_terminal_step_t)t->next++;
	if (s == PC_TERMINAL_EMIT_LIFECYCLE)
		t->emitted = true;
	return s;
}

const char *pc_terminal_phase(bool assistant_errored)
{
	return assistant_errored ? "error" : "end";
}

bool pc_terminal_needs_fallback(const pc_terminal_t *t)
{
	return !t || !t->emitted;
}
