/*
 * Compaction, the pure part (compaction.h, spec §7.2): where to cut a
 * transcript, how to ask the model for its summary, and the shapes of the
 * stored summary and of the text the model reads in its place. No I/O, no
 * clock, no globals; inputs are never modified. Any thread.
 */
#include "compaction.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/io.h"
#include "../attempt/context_guard.h"

/* A tool result (or tool-call arguments) is cut to this many bytes in the
 * rendering: the summary needs what a call did, not its whole output. */
#define RENDER_TOOL_CHARS ((size_t)2000)

/* What the summary must keep (§7.2: the merge instructions, identifier
 * policy "strict"). */
static const char instructions_text[] =
	"Write a summary of the conversation above for an AI agent that will continue the work "
	"without seeing it. Prioritise recent context over older context. Preserve:\n"
	"- active tasks and their current status, including batch progress (what is done, what is "
	"left);\n"
	"- the last user request, verbatim if it is short;\n"
	"- decisions made and their rationale;\n"
	"- TODOs, open questions and constraints or rules the user set;\n"
	"- follow-ups the assistant promised;\n"
	"- every identifier exactly as written, never shortened or paraphrased: UUIDs, hashes, IDs, "
	"tokens, hostnames, IP addresses, ports, URLs and file names.\n"
	"An earlier summary, if there is one, is part of the history: carry over what in it still "
	"matters. Answer with the summary only.";

/* ---- small helpers ---- */

static const char *str_of(const cJSON *obj, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
	return cJSON_IsString(v) ? v->valuestring : NULL;
}

static bool has_role(const cJSON *msg, const char *role)
{
	const char *r = str_of(msg, "role");
	return r && strcmp(r, role) == 0;
}

static bool is_summary(const cJSON *msg)
{
	return has_role(msg, PC_COMPACTION_ROLE);
}

static bool has_tool_calls(const cJSON *msg)
{
	if (!has_role(msg, "assistant"))
		return false;
	const cJSON *b;
	cJSON_ArrayForEach(b, cJSON_GetObjectItemCaseSensitive(msg, "content"))
	{
		const char *t = str_of(b, "type");
		if (t && strcmp(t, "toolCall") == 0)
			return true;
	}
	return false;
}

/* Estimated chars of one transcript message; a summary counts as the
 * context message it is replayed as (its content is not a message's). */
static size_t msg_chars(const cJSON *msg)
{
	if (is_summary(msg)) {
		const char *s = str_of(msg, "summary");
		return sizeof(PC_COMPACTION_CONTEXT_PREFIX) - 1 + (s ? strlen(s) : 0);
	}
	return pc_ctx_message_chars(msg);
}

/* ---- the cut point ---- */

int pc_compaction_cut_point(const cJSON *messages, uint64_t keep_recent_tokens, size_t *first_kept)
{
	if (!cJSON_IsArray(messages) || !first_kept)
		return PC_EINVAL;
	*first_kept = 0;
	int count = cJSON_GetArraySize(messages);
	if (count <= 1)
		return 0;
	/* An index over the list: cJSON_GetArrayItem walks from the head. */
	size_t n = (size_t)count, i = 0;
	const cJSON **m = malloc(n * sizeof(*m));
	if (!m)
		return PC_ENOMEM;
	const cJSON *it;
	cJSON_ArrayForEach(it, messages) {
		if (i < n)
			m[i++] = it;
	}
	n = i; /* every slot read below was written (the optimiser cannot know) */
	if (n <= 1) {
		free(m);
		return 0;
	}
	/* Newest first: the last message is always kept, then each older
	 * one while the estimate stays within the budget. */
	size_t chars = msg_chars(m[n - 1]);
	size_t start = n - 1;
	while (start > 0) {
		size_t c = msg_chars(m[start - 1]);
		if (pc_ctx_chars_to_tokens(chars + c) > keep_recent_tokens)
			break;
		chars += c;
		start--;
	}
	/* A boundary on a tool result would part it from its call: move back
	 * over the results to the assistant message that made the calls.
	 * Results with no call before them stay together in the tail. */
	if (start > 0 && has_role(m[start], "toolResult")) {
		size_t j = start;
		while (j > 0 && has_role(m[j - 1], "toolResult"))
			j--;
		start = j > 0 && has_tool_calls(m[j - 1]) ? j - 1 : j;
	}
	/* A leading summary is folded into the new one rather than kept in
	 * front of the tail: keeping it would make this compaction a no-op
	 * for a context that is over budget because of it. */
	if (start == 0 && is_summary(m[0]))
		start = 1;
	*first_kept = start;
	free(m);
	return 0;
}

/* ---- the prompt ---- */

/* s cut to `max` bytes (never inside a UTF-8 sequence) plus a notice. */
static void buf_capped(pc__buf_t *b, const char *s, size_t max)
{
	size_t len = strlen(s);
	if (len <= max) {
		pc__buf_append(b, s, len);
		return;
	}
	size_t keep = max;
	while (keep > 0 && ((unsigned char)s[keep] & 0xC0) == 0x80)
		keep--;
	pc__buf_append(b, s, keep);
	char notice[64];
	int nn = snprintf(notice, sizeof(notice), " [... %zu more characters]", len - keep);
	if (nn > 0)
		pc__buf_append(b, notice, (size_t)nn);
}

/* The text blocks of a content (a string or an array), joined by
 * newlines; images as "[image]"; thinking left out (it is the model's
 * scratch work, not part of the conversation). */
static void render_text(pc__buf_t *b, const cJSON *content, size_t max)
{
	if (cJSON_IsString(content)) {
		buf_capped(b, content->valuestring, max);
		return;
	}
	bool first = true;
	const cJSON *blk;
	cJSON_ArrayForEach(blk, content)
	{
		const char *t = str_of(blk, "type");
		const char *s = NULL;
		if (t && strcmp(t, "text") == 0)
			s = str_of(blk, "text");
		else if (t && strcmp(t, "image") == 0)
			s = "[image]";
		if (!s)
			continue;
		if (!first)
			pc__buf_append_str(b, "\n");
		buf_capped(b, s, max);
		first = false;
	}
}

static bool content_has_text(const cJSON *content)
{
	if (cJSON_IsString(content))
		return content->valuestring[0] != '\0';
	const cJSON *blk;
	cJSON_ArrayForEach(blk, content)
	{
		const char *t = str_of(blk, "type");
		const char *s = str_of(blk, "text");
		if ((t && strcmp(t, "image") == 0) || (t && strcmp(t, "text") == 0 && s && s[0]))
			return true;
	}
	return false;
}

static void render_tool_call(pc__buf_t *b, const cJSON *blk)
{
	const char *name = str_of(blk, "name");
	pc__buf_append_str(b, "Assistant called tool ");
	pc__buf_append_str(b, name ? name : "?");
	pc__buf_append_str(b, "(");
	const cJSON *args = cJSON_GetObjectItemCaseSensitive(blk, "arguments");
	if (cJSON_IsString(args)) {
		buf_capped(b, args->valuestring, RENDER_TOOL_CHARS);
	} else if (args) {
		char *s = cJSON_PrintUnformatted(args);
		if (s)
			buf_capped(b, s, RENDER_TOOL_CHARS);
		else if (!b->err)
			b->err = PC_ENOMEM;
		cJSON_free(s);
	}
	pc__buf_append_str(b, ")\n\n");
}

static void render_message(pc__buf_t *b, const cJSON *msg)
{
	const char *role = str_of(msg, "role");
	const cJSON *content = cJSON_GetObjectItemCaseSensitive(msg, "content");
	if (!role)
		return;
	if (strcmp(role, PC_COMPACTION_ROLE) == 0) {
		const char *s = str_of(msg, "summary");
		if (s && s[0]) {
			pc__buf_append_str(b, "Earlier summary: ");
			pc__buf_append_str(b, s); /* whole: it is already the condensed history */
			pc__buf_append_str(b, "\n\n");
		}
	} else if (strcmp(role, "toolResult") == 0) {
		const char *name = str_of(msg, "toolName");
		pc__buf_append_str(b, "Tool ");
		pc__buf_append_str(b, name ? name : "?");
		pc__buf_append_str(b, cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(msg, "isError")) ? " error: " : " result: ");
		render_text(b, content, RENDER_TOOL_CHARS);
		pc__buf_append_str(b, "\n\n");
	} else if (strcmp(role, "assistant") == 0) {
		if (content_has_text(content)) {
			pc__buf_append_str(b, "Assistant: ");
			render_text(b, content, SIZE_MAX);
			pc__buf_append_str(b, "\n\n");
		}
		const cJSON *blocks = cJSON_IsArray(content) ? content : NULL;
		const cJSON *blk;
		cJSON_ArrayForEach(blk, blocks)
		{
			const char *t = str_of(blk, "type");
			if (t && strcmp(t, "toolCall") == 0)
				render_tool_call(b, blk);
		}
	} else if (content_has_text(content)) {
		if (strcmp(role, "user") == 0)
			pc__buf_append_str(b, "User: ");
		else if (strcmp(role, "system") == 0)
			pc__buf_append_str(b, "System: ");
		else {
			pc__buf_append_str(b, role); /* a role this file does not know: named as it is */
			pc__buf_append_str(b, ": ");
		}
		render_text(b, content, SIZE_MAX);
		pc__buf_append_str(b, "\n\n");
	}
}

int pc_compaction_prompt(const cJSON *messages, size_t n, const char *instructions, cJSON **out)
{
	if (!cJSON_IsArray(messages) || !out || n > (size_t)cJSON_GetArraySize(messages))
		return PC_EINVAL;
	*out = NULL;
	pc__buf_t b = {0};
	cJSON *arr = NULL;
	int rc = 0;
	pc__buf_append_str(&b, "Here is the history of a conversation between a user and an AI agent, "
		    "with the agent's tool calls and their results:\n\n<conversation>\n");
	size_t i = 0;
	const cJSON *m;
	cJSON_ArrayForEach(m, messages)
	{
		if (i++ >= n)
			break;
		render_message(&b, m);
	}
	pc__buf_append_str(&b, "</conversation>\n\n");
	pc__buf_append_str(&b, instructions_text);
	if (instructions && instructions[0]) {
		pc__buf_append_str(&b, "\n\nAdditional instructions for this summary: ");
		pc__buf_append_str(&b, instructions);
	}
	if ((rc = b.err) != 0)
		goto out;
	rc = PC_ENOMEM;
	cJSON *msg = NULL;
	if (!(arr = cJSON_CreateArray()) || !(msg = cJSON_CreateObject()))
		goto out;
	if (!cJSON_AddItemToArray(arr, msg)) {
		cJSON_Delete(msg);
		goto out;
	}
	if (!cJSON_AddStringToObject(msg, "role", "user") || !cJSON_AddStringToObject(msg, "content", b.p))
		goto out;
	*out = arr;
	arr = NULL;
	rc = 0;
out:
	cJSON_Delete(arr);
	pc__buf_free(&b);
	return rc;
}

/* ---- stored shapes ---- */

int pc_compaction_summary_content(const char *summary, uint64_t tokens_before, const char *trigger,
				  char **out)
{
	if (!summary || !out)
		return PC_EINVAL;
	*out = NULL;
	int rc = PC_ENOMEM;
	cJSON *o = cJSON_CreateObject();
	if (!o || !cJSON_AddStringToObject(o, "role", PC_COMPACTION_ROLE) ||
	    !cJSON_AddStringToObject(o, "summary", summary) ||
	    !cJSON_AddNumberToObject(o, "tokensBefore", (double)tokens_before))
		goto out;
	if (trigger && !cJSON_AddStringToObject(o, "trigger", trigger))
		goto out;
	char *s = pc_json_print(o);
	if (!s)
		goto out;
	/* cJSON's allocator is malloc unless hooked; copy to keep the
	 * header's promise ("malloc'd") true either way. */
	size_t len = strlen(s);
	*out = malloc(len + 1);
	if (*out) {
		memcpy(*out, s, len + 1);
		rc = 0;
	}
	cJSON_free(s);
out:
	cJSON_Delete(o);
	return rc;
}

int pc_compaction_context_message(const cJSON *content, cJSON **out)
{
	if (!out)
		return PC_EINVAL;
	*out = NULL;
	const char *s = str_of(content, "summary");
	if (!cJSON_IsObject(content) || !s)
		return PC_EINVAL;
	size_t pl = sizeof(PC_COMPACTION_CONTEXT_PREFIX) - 1, sl = strlen(s);
	char *text = malloc(pl + sl + 1);
	cJSON *m = cJSON_CreateObject();
	int rc = PC_ENOMEM;
	if (!text || !m)
		goto out;
	memcpy(text, PC_COMPACTION_CONTEXT_PREFIX, pl);
	memcpy(text + pl, s, sl + 1);
	if (!cJSON_AddStringToObject(m, "role", "user") || !cJSON_AddStringToObject(m, "content", text))
		goto out;
	*out = m;
	m = NULL;
	rc = 0;
out:
	cJSON_Delete(m);
	free(text);
	return rc;
}
