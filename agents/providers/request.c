/*
 * Request bodies and headers for OpenAI chat completions and Anthropic
 * messages. Each conversion reads the unified message and appends what the
 * wire format wants to a cJSON tree; any structural problem is PC_EINVAL
 * and nothing half-built escapes.
 */
#include "io/json_print.h"
#include "request.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../io/buf_internal.h"

/* ---- thinking levels ---- */

static const char *const level_names[] = {
	[PC_THINK_OFF] = "off",       [PC_THINK_MINIMAL] = "minimal", [PC_THINK_LOW] = "low",
	[PC_THINK_MEDIUM] = "medium", [PC_THINK_HIGH] = "high",       [PC_THINK_XHIGH] = "xhigh",
	[PC_THINK_ADAPTIVE] = "adaptive", [PC_THINK_MAX] = "max",
};

#define NLEVELS (sizeof(level_names) / sizeof(level_names[0]))

const char *pc_think_level_name(pc_think_level_t l)
{
	return (unsigned)l < NLEVELS ? level_names[l] : "off";
}

int pc_think_level_parse(const char *s, pc_think_level_t *out)
{
	if (!s || !out)
		return PC_EINVAL;
	char buf[32];
	size_t n = 0;
	while (isspace((unsigned char)*s))
		s++;
	for (; *s && n < sizeof(buf) - 1; s++)
		buf[n++] = (char)tolower((unsigned char)*s);
	if (*s)
		return PC_ENOTFOUND; /* longer than any level */
	while (n && isspace((unsigned char)buf[n - 1]))
		n--;
	buf[n] = 0;
	for (size_t i = 0; i < NLEVELS; i++) {
		if (strcmp(buf, level_names[i]) == 0) {
			*out = (pc_think_level_t)i;
			return 0;
		}
	}
	static const char *const xhigh[] = {"x-high", "x_high", "extra-high", "extra high",
					    "extra_high"};
	for (size_t i = 0; i < sizeof(xhigh) / sizeof(xhigh[0]); i++) {
		if (strcmp(buf, xhigh[i]) == 0) {
			*out = PC_THINK_XHIGH;
			return 0;
		}
	}
	if (strcmp(buf, "highest") == 0) {
		*out = PC_THINK_HIGH;
		return 0;
	}
	return PC_ENOTFOUND;
}

int64_t pc_think_budget_tokens(pc_think_level_t l)
{
	switch (l) {
	case PC_THINK_MINIMAL: return 1024;
	case PC_THINK_LOW: return 2048;
	case PC_THINK_MEDIUM:
	case PC_THINK_ADAPTIVE: return 8192;
	case PC_THINK_HIGH: return 16384;
	case PC_THINK_XHIGH: return 32768;
	case PC_THINK_MAX: return 65536;
	default: return 0;
	}
}

/* OpenAI's reasoning_effort; adaptive is medium at this layer (spec:
 * mapThinkingLevel), max is the highest effort there is. */
static const char *effort(pc_think_level_t l)
{
	switch (l) {
	case PC_THINK_MINIMAL: return "minimal";
	case PC_THINK_LOW: return "low";
	case PC_THINK_MEDIUM:
	case PC_THINK_ADAPTIVE: return "medium";
	case PC_THINK_HIGH: return "high";
	case PC_THINK_XHIGH:
	case PC_THINK_MAX: return "xhigh";
	default: return NULL;
	}
}

/* ---- small helpers ---- */

static bool is_type(const cJSON *block, const char *type)
{
	const cJSON *t = cJSON_GetObjectItemCaseSensitive(block, "type");
	return cJSON_IsString(t) && strcmp(t->valuestring, type) == 0;
}

static const char *str_of(const cJSON *o, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* `key` is always a literal. A body is built, printed and freed while its
 * inputs stay put, so by default a value is borrowed, not copied (a
 * request repeats the whole history and every tool schema: copying them
 * was most of its cost); add_copy is for values about to be freed. */
static int add_node(cJSON *o, const char *key, cJSON *v)
{
	if (v && cJSON_AddItemToObjectCS(o, key, v))
		return 0;
	cJSON_Delete(v);
	return PC_ENOMEM;
}

static int add_str(cJSON *o, const char *key, const char *v) { return add_node(o, key, cJSON_CreateStringReference(v)); }

static int add_copy(cJSON *o, const char *key, const char *v) { return add_node(o, key, cJSON_CreateString(v)); }

/* JSON text printed as it is, borrowed like add_str's values. */
static int add_raw(cJSON *o, const char *key, const char *json) { return add_node(o, key, pc_json_raw_ref(json)); }

/* Adds `item` to `parent` (an object when `key` is set, else an array),
 * deleting it when that fails, so callers never leak it. */
static int attach(cJSON *parent, const char *key, cJSON *item)
{
	if (!item)
		return PC_ENOMEM;
	bool ok = key ? cJSON_AddItemToObject(parent, key, item)
		      : cJSON_AddItemToArray(parent, item);
	if (!ok) {
		cJSON_Delete(item);
		return PC_ENOMEM;
	}
	return 0;
}

/* The text blocks of `content` (or `content` itself when it is a string),
 * joined with `sep`. Other block types are skipped. *out is "" when there
 * is no text; the caller frees it. */
static int join_text(const cJSON *content, const char *sep, char **out)
{
	pc__buf_t b = {0};
	int rc = pc__buf_append_str(&b, "");
	if (!rc && cJSON_IsString(content)) {
		rc = pc__buf_append_str(&b, content->valuestring);
	} else if (!rc) {
		const cJSON *blk;
		bool first = true;
		cJSON_ArrayForEach(blk, content)
		{
			const char *t = is_type(blk, "text") ? str_of(blk, "text") : NULL;
			if (!t)
				continue;
			if (!first)
				rc = pc__buf_append_str(&b, sep);
			if (!rc)
				rc = pc__buf_append_str(&b, t);
			if (rc)
				break;
			first = false;
		}
	}
	if (rc) {
		free(b.p);
		return rc;
	}
	*out = b.p;
	return 0;
}

/* A tool call's arguments as the JSON string OpenAI wants. */
static char *args_string(const cJSON *args)
{
	if (cJSON_IsString(args))
		return strdup(args->valuestring);
	if (cJSON_IsObject(args)) {
		char *s = cJSON_PrintUnformatted(args);
		char *c = s ? strdup(s) : NULL;
		cJSON_free(s);
		return c;
	}
	return strdup("{}");
}

/* A tool call's arguments as the object Anthropic wants (borrowed when
 * they are one); a string that is not an object becomes {} (the tool
 * already answered it with an error). */
static cJSON *args_object(const cJSON *args)
{
	if (cJSON_IsObject(args))
		return cJSON_CreateObjectReference(args->child);
	if (cJSON_IsString(args)) {
		cJSON *j = cJSON_Parse(args->valuestring);
		if (cJSON_IsObject(j))
			return j;
		cJSON_Delete(j);
	}
	return cJSON_CreateObject();
}

/* Anthropic ids must match ^[a-zA-Z0-9_-]+$. */
static char *safe_id(const char *id)
{
	char *s = strdup(id);
	if (!s)
		return NULL;
	for (char *p = s; *p; p++)
		if (!isalnum((unsigned char)*p) && *p != '_' && *p != '-')
			*p = '_';
	return s;
}

static const char *role_of(const cJSON *m)
{
	return cJSON_IsObject(m) ? str_of(m, "role") : NULL;
}

/* ---- each message's wire form, kept on the message ----
 *
 * Every request repeats the whole history, and a message hardly ever
 * changes once it has joined it: so a message is converted and printed for
 * an api once, and the text is kept in the valuestring cJSON leaves unused
 * for objects (never printed or compared; cJSON_Delete frees it and
 * cJSON_Duplicate copies it), behind one byte naming the api. Whoever edits
 * a message in place calls pc_request_message_changed. */

/* An api's conversions: each appends what one message of its role becomes
 * to `into` (nothing, or one item). */
typedef int (*convert_fn)(const cJSON *m, cJSON *into);
typedef struct converters {
	convert_fn user, assistant, tool_result;
} converters_t;

static int convert(const converters_t *c, const cJSON *m, cJSON *into)
{
	const char *role = role_of(m);
	if (!role)
		return PC_EINVAL;
	if (strcmp(role, "user") == 0)
		return c->user(m, into);
	if (strcmp(role, "assistant") == 0)
		return c->assistant(m, into);
	if (strcmp(role, "toolResult") == 0)
		return c->tool_result(m, into);
	return PC_EINVAL;
}

static char api_tag(pc_provider_api_t api)
{
	return api == PC_API_ANTHROPIC_MESSAGES ? 'A' : 'O';
}

/* *out: the printed item `conv` makes of `m` ("" for none), owned by the
 * message. */
static int wire_of(const cJSON *m, char tag, const converters_t *conv, const char **out)
{
	if (!cJSON_IsObject(m))
		return PC_EINVAL;
	if (m->valuestring && m->valuestring[0] == tag) {
		*out = m->valuestring + 1;
		return 0;
	}
	cJSON *into = cJSON_CreateArray();
	if (!into)
		return PC_ENOMEM;
	int rc = convert(conv, m, into);
	char *printed = NULL;
	if (!rc && into->child && !(printed = pc_json_print(into->child)))
		rc = PC_ENOMEM;
	size_t n = printed ? strlen(printed) : 0;
	char *kept = rc ? NULL : cJSON_malloc(n + 2);
	if (!rc && !kept)
		rc = PC_ENOMEM;
	if (!rc) {
		kept[0] = tag;
		memcpy(kept + 1, printed ? printed : "", n + 1);
		pc_request_message_changed((cJSON *)m);
		((cJSON *)m)->valuestring = kept;
		*out = kept + 1;
	}
	cJSON_free(printed);
	cJSON_Delete(into);
	return rc;
}

void pc_request_message_changed(cJSON *msg)
{
	if (cJSON_IsObject(msg) && msg->valuestring) {
		cJSON_free(msg->valuestring);
		msg->valuestring = NULL;
	}
}

static bool is_tool_result(const cJSON *m)
{
	const char *role = role_of(m);
	return role && strcmp(role, "toolResult") == 0;
}

/* Copies `k` bytes of `s` to dst + *n (dst NULL: only counts them). */
static void put(char *dst, size_t *n, const char *s, size_t k)
{
	if (dst)
		memcpy(dst + *n, s, k);
	*n += k;
}

#define PUT_LIT(dst, n, lit) put((dst), (n), (lit), sizeof(lit) - 1)

/* The messages array as text into dst (NULL: only its length into *len):
 * `head` (may be NULL), then each message's kept wire form; with
 * `group_results` (Anthropic), a run of tool results goes into one user
 * message, and any other message ends the run. */
static int joined(const pc_request_params_t *p, const converters_t *conv, bool group_results, const char *head,
		  char *dst, size_t *len)
{
	size_t n = 0;
	bool first = true, in_group = false;
	PUT_LIT(dst, &n, "[");
	if (head) {
		put(dst, &n, head, strlen(head));
		first = false;
	}
	const cJSON *m;
	cJSON_ArrayForEach(m, p->messages)
	{
		const char *wire = NULL;
		int rc = wire_of(m, api_tag(p->api), conv, &wire);
		if (rc)
			return rc;
		bool result = group_results && is_tool_result(m);
		if (in_group && !result) {
			PUT_LIT(dst, &n, "]}");
			in_group = false;
		}
		if (!*wire)
			continue; /* nothing to replay */
		if (in_group) {
			PUT_LIT(dst, &n, ",");
		} else {
			if (!first)
				PUT_LIT(dst, &n, ",");
			first = false;
			if (result) {
				PUT_LIT(dst, &n, "{\"role\":\"user\",\"content\":[");
				in_group = true;
			}
		}
		put(dst, &n, wire, strlen(wire));
	}
	if (in_group)
		PUT_LIT(dst, &n, "]}");
	PUT_LIT(dst, &n, "]");
	*len = n;
	return 0;
}

/* Adds body[key]: the messages, joined into one text once (a request
 * repeats the whole history: an item per message was most of its
 * printing). The text is allocated by cJSON's allocator and owned by the
 * item. */
static int add_messages(cJSON *body, const pc_request_params_t *p, const converters_t *conv, bool group_results,
			const char *head)
{
	size_t len = 0;
	int rc = joined(p, conv, group_results, head, NULL, &len);
	if (rc)
		return rc;
	char *text = cJSON_malloc(len + 1);
	if (!text)
		return PC_ENOMEM;
	size_t n = 0;
	rc = joined(p, conv, group_results, head, text, &n);
	if (rc) {
		cJSON_free(text);
		return rc;
	}
	text[n] = '\0';
	return add_node(body, "messages", pc_json_raw_take(text));
}

/* ---- OpenAI ---- */

static cJSON *oa_image(const cJSON *blk)
{
	const char *data = str_of(blk, "data");
	const char *mime = str_of(blk, "mimeType");
	if (!data || !mime)
		return NULL;
	size_t n = strlen(data) + strlen(mime) + 16;
	char *url = malloc(n);
	if (!url)
		return NULL;
	snprintf(url, n, "data:%s;base64,%s", mime, data);
	cJSON *part = cJSON_CreateObject();
	cJSON *iu = cJSON_CreateObject();
	bool ok = part && iu && cJSON_AddStringToObject(part, "type", "image_url") &&
		  cJSON_AddStringToObject(iu, "url", url) &&
		  cJSON_AddItemToObject(part, "image_url", iu);
	free(url);
	if (!ok) {
		if (!part || !cJSON_GetObjectItemCaseSensitive(part, "image_url"))
			cJSON_Delete(iu);
		cJSON_Delete(part);
		return NULL;
	}
	return part;
}

static int oa_user(const cJSON *m, cJSON *msgs)
{
	const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
	if (!cJSON_IsString(content) && !cJSON_IsArray(content))
		return PC_EINVAL;
	cJSON *om = cJSON_CreateObject();
	int rc = om ? add_str(om, "role", "user") : PC_ENOMEM;
	if (!rc && cJSON_IsString(content)) {
		rc = add_str(om, "content", content->valuestring);
	} else if (!rc) {
		cJSON *parts = cJSON_AddArrayToObject(om, "content");
		rc = parts ? 0 : PC_ENOMEM;
		const cJSON *blk;
		cJSON_ArrayForEach(blk, content)
		{
			if (rc)
				break;
			if (is_type(blk, "text") && str_of(blk, "text")) {
				cJSON *part = cJSON_CreateObject();
				rc = attach(parts, NULL, part);
				if (!rc)
					rc = add_str(part, "type", "text");
				if (!rc)
					rc = add_str(part, "text", str_of(blk, "text"));
			} else if (is_type(blk, "image")) {
				rc = str_of(blk, "data") && str_of(blk, "mimeType")
					     ? attach(parts, NULL, oa_image(blk))
					     : PC_EINVAL;
			} else {
				rc = PC_EINVAL;
			}
		}
	}
	if (!rc)
		rc = attach(msgs, NULL, om);
	else
		cJSON_Delete(om);
	return rc;
}

static int oa_assistant(const cJSON *m, cJSON *msgs)
{
	const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
	if (!cJSON_IsString(content) && !cJSON_IsArray(content))
		return PC_EINVAL;
	char *text = NULL;
	cJSON *om = NULL, *calls = NULL;
	int rc = join_text(content, "", &text);
	if (rc)
		goto out;
	calls = cJSON_CreateArray();
	if (!calls) {
		rc = PC_ENOMEM;
		goto out;
	}
	const cJSON *blocks = cJSON_IsArray(content) ? content : NULL;
	const cJSON *blk;
	cJSON_ArrayForEach(blk, blocks)
	{
		if (is_type(blk, "text") || is_type(blk, "thinking"))
			continue; /* thinking is not replayed to chat completions */
		if (!is_type(blk, "toolCall")) {
			rc = PC_EINVAL;
			goto out;
		}
		const char *id = str_of(blk, "id"), *name = str_of(blk, "name");
		if (!id || !*id || !name || !*name) {
			rc = PC_EINVAL;
			goto out;
		}
		cJSON *call = cJSON_CreateObject();
		cJSON *fn = cJSON_CreateObject();
		char *args = args_string(cJSON_GetObjectItemCaseSensitive(blk, "arguments"));
		rc = attach(calls, NULL, call);
		if (!rc)
			rc = add_str(call, "id", id);
		if (!rc)
			rc = add_str(call, "type", "function");
		if (!rc)
			rc = attach(call, "function", fn);
		else
			cJSON_Delete(fn);
		if (!rc)
			rc = add_str(fn, "name", name);
		if (!rc)
			rc = args ? add_copy(fn, "arguments", args) : PC_ENOMEM;
		free(args);
		if (rc)
			goto out;
	}
	bool has_calls = cJSON_GetArraySize(calls) > 0;
	if (!*text && !has_calls)
		goto out; /* nothing to replay: chat completions rejects it */
	om = cJSON_CreateObject();
	rc = om ? add_str(om, "role", "assistant") : PC_ENOMEM;
	if (!rc)
		rc = *text ? add_copy(om, "content", text)
			   : (cJSON_AddNullToObject(om, "content") ? 0 : PC_ENOMEM);
	if (!rc && has_calls) {
		rc = attach(om, "tool_calls", calls);
		calls = NULL;
	}
	if (!rc) {
		rc = attach(msgs, NULL, om);
		om = NULL;
	}
out:
	cJSON_Delete(om);
	cJSON_Delete(calls);
	free(text);
	return rc;
}

static int oa_tool_result(const cJSON *m, cJSON *msgs)
{
	const char *id = str_of(m, "toolCallId");
	const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
	if (!id || !*id || (content && !cJSON_IsString(content) && !cJSON_IsArray(content)))
		return PC_EINVAL;
	char *text = NULL;
	int rc = join_text(content, "\n", &text);
	if (rc)
		return rc;
	cJSON *om = cJSON_CreateObject();
	rc = om ? add_str(om, "role", "tool") : PC_ENOMEM;
	if (!rc)
		rc = add_str(om, "tool_call_id", id);
	if (!rc)
		rc = add_copy(om, "content", text);
	free(text);
	if (!rc)
		rc = attach(msgs, NULL, om);
	else
		cJSON_Delete(om);
	return rc;
}

static const converters_t openai_messages = {oa_user, oa_assistant, oa_tool_result};

static cJSON *default_schema(void)
{
	cJSON *s = cJSON_CreateObject();
	if (s && (!cJSON_AddStringToObject(s, "type", "object") ||
		  !cJSON_AddObjectToObject(s, "properties"))) {
		cJSON_Delete(s);
		s = NULL;
	}
	return s;
}

static cJSON *schema_of(const cJSON *tool)
{
	const cJSON *p = cJSON_GetObjectItemCaseSensitive(tool, "parameters");
	return cJSON_IsObject(p) ? cJSON_CreateObjectReference(p->child) : default_schema();
}

static int check_tool(const cJSON *t)
{
	const char *name = cJSON_IsObject(t) ? str_of(t, "name") : NULL;
	const cJSON *d = cJSON_GetObjectItemCaseSensitive(t, "description");
	if (!name || !*name || (d && !cJSON_IsString(d) && !cJSON_IsNull(d)))
		return PC_EINVAL;
	return 0;
}

static int oa_tools(const cJSON *tools, cJSON *body)
{
	if (!cJSON_IsArray(tools) || cJSON_GetArraySize(tools) == 0)
		return 0;
	cJSON *arr = cJSON_AddArrayToObject(body, "tools");
	if (!arr)
		return PC_ENOMEM;
	const cJSON *t;
	cJSON_ArrayForEach(t, tools)
	{
		int rc = check_tool(t);
		if (rc)
			return rc;
		cJSON *ot = cJSON_CreateObject();
		cJSON *fn = cJSON_CreateObject();
		rc = attach(arr, NULL, ot);
		if (!rc)
			rc = add_str(ot, "type", "function");
		if (!rc)
			rc = attach(ot, "function", fn);
		else
			cJSON_Delete(fn);
		if (!rc)
			rc = add_str(fn, "name", str_of(t, "name"));
		if (!rc && str_of(t, "description"))
			rc = add_str(fn, "description", str_of(t, "description"));
		if (!rc)
			rc = attach(fn, "parameters", schema_of(t));
		if (rc)
			return rc;
	}
	return 0;
}

static int openai_body(const pc_request_params_t *p, cJSON *body)
{
	int rc = add_str(body, "model", p->model);
	char *system = NULL;
	if (!rc && p->system_prompt && *p->system_prompt) {
		cJSON *sm = cJSON_CreateObject();
		rc = sm ? add_str(sm, "role", "system") : PC_ENOMEM;
		if (!rc)
			rc = add_str(sm, "content", p->system_prompt);
		if (!rc && !(system = pc_json_print(sm)))
			rc = PC_ENOMEM;
		cJSON_Delete(sm);
	}
	if (!rc)
		rc = add_messages(body, p, &openai_messages, false, system);
	cJSON_free(system);
	if (!rc && !cJSON_AddTrueToObject(body, "stream"))
		rc = PC_ENOMEM;
	if (!rc) {
		cJSON *so = cJSON_AddObjectToObject(body, "stream_options");
		if (!so || !cJSON_AddTrueToObject(so, "include_usage"))
			rc = PC_ENOMEM;
	}
	const char *limit = p->openai_max_tokens ? "max_tokens" : "max_completion_tokens";
	if (!rc && p->max_tokens > 0 &&
	    !cJSON_AddNumberToObject(body, limit, (double)p->max_tokens))
		rc = PC_ENOMEM;
	if (!rc && p->has_temperature &&
	    !cJSON_AddNumberToObject(body, "temperature", p->temperature))
		rc = PC_ENOMEM;
	if (!rc && effort(p->thinking))
		rc = add_str(body, "reasoning_effort", effort(p->thinking));
	if (!rc)
		rc = p->tools_json ? add_raw(body, "tools", p->tools_json) : oa_tools(p->tools, body);
	return rc;
}

/* ---- Anthropic ---- */

static cJSON *an_image(const cJSON *blk)
{
	const char *data = str_of(blk, "data");
	const char *mime = str_of(blk, "mimeType");
	cJSON *img = cJSON_CreateObject();
	cJSON *src = cJSON_CreateObject();
	bool ok = data && mime && img && src && cJSON_AddStringToObject(img, "type", "image") &&
		  cJSON_AddStringToObject(src, "type", "base64") &&
		  cJSON_AddStringToObject(src, "media_type", mime) && add_str(src, "data", data) == 0 &&
		  cJSON_AddItemToObject(img, "source", src);
	if (!ok) {
		if (!img || !cJSON_GetObjectItemCaseSensitive(img, "source"))
			cJSON_Delete(src);
		cJSON_Delete(img);
		return NULL;
	}
	return img;
}

static int an_text_block(cJSON *arr, const char *text)
{
	cJSON *b = cJSON_CreateObject();
	int rc = attach(arr, NULL, b);
	if (!rc)
		rc = add_str(b, "type", "text");
	if (!rc)
		rc = add_str(b, "text", text);
	return rc;
}

/* Text and image blocks (user messages and tool results). Anthropic
 * rejects empty text blocks, so they are skipped. */
static int an_media_blocks(const cJSON *content, cJSON *arr)
{
	const cJSON *blk;
	cJSON_ArrayForEach(blk, content)
	{
		int rc;
		if (is_type(blk, "text") && str_of(blk, "text")) {
			const char *t = str_of(blk, "text");
			rc = *t ? an_text_block(arr, t) : 0;
		} else if (is_type(blk, "image")) {
			bool whole = str_of(blk, "data") && str_of(blk, "mimeType");
			rc = whole ? attach(arr, NULL, an_image(blk)) : PC_EINVAL;
		} else {
			rc = PC_EINVAL;
		}
		if (rc)
			return rc;
	}
	return 0;
}

static int an_user(const cJSON *m, cJSON *msgs)
{
	const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
	if (!cJSON_IsString(content) && !cJSON_IsArray(content))
		return PC_EINVAL;
	cJSON *am = cJSON_CreateObject();
	int rc = am ? add_str(am, "role", "user") : PC_ENOMEM;
	if (!rc && cJSON_IsString(content)) {
		rc = add_str(am, "content", content->valuestring);
	} else if (!rc) {
		cJSON *arr = cJSON_AddArrayToObject(am, "content");
		rc = arr ? an_media_blocks(content, arr) : PC_ENOMEM;
	}
	if (!rc)
		rc = attach(msgs, NULL, am);
	else
		cJSON_Delete(am);
	return rc;
}

static int an_assistant_block(const cJSON *blk, cJSON *arr)
{
	int rc = 0;
	if (is_type(blk, "text")) {
		const char *t = str_of(blk, "text");
		if (!t)
			return PC_EINVAL;
		return *t ? an_text_block(arr, t) : 0;
	}
	if (is_type(blk, "thinking")) {
		const char *t = str_of(blk, "thinking");
		const char *sig = str_of(blk, "thinkingSignature");
		bool redacted = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(blk, "redacted"));
		if (!t)
			t = "";
		cJSON *b = NULL;
		if (redacted && sig && *sig) {
			b = cJSON_CreateObject();
			rc = attach(arr, NULL, b);
			if (!rc)
				rc = add_str(b, "type", "redacted_thinking");
			if (!rc)
				rc = add_str(b, "data", sig);
		} else if (sig && *sig) {
			b = cJSON_CreateObject();
			rc = attach(arr, NULL, b);
			if (!rc)
				rc = add_str(b, "type", "thinking");
			if (!rc)
				rc = add_str(b, "thinking", t);
			if (!rc)
				rc = add_str(b, "signature", sig);
		} else if (*t && !redacted) {
			/* Unsigned thinking (another model's) would be rejected
			 * as thinking; it still tells the model what it thought. */
			rc = an_text_block(arr, t);
		}
		return rc;
	}
	if (is_type(blk, "toolCall")) {
		const char *id = str_of(blk, "id"), *name = str_of(blk, "name");
		if (!id || !*id || !name || !*name)
			return PC_EINVAL;
		char *sid = safe_id(id);
		if (!sid)
			return PC_ENOMEM;
		cJSON *b = cJSON_CreateObject();
		rc = attach(arr, NULL, b);
		if (!rc)
			rc = add_str(b, "type", "tool_use");
		if (!rc)
			rc = add_copy(b, "id", sid);
		if (!rc)
			rc = add_str(b, "name", name);
		const cJSON *args = cJSON_GetObjectItemCaseSensitive(blk, "arguments");
		if (!rc)
			rc = attach(b, "input", args_object(args));
		free(sid);
		return rc;
	}
	return PC_EINVAL;
}

static int an_assistant(const cJSON *m, cJSON *msgs)
{
	const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
	if (!cJSON_IsString(content) && !cJSON_IsArray(content))
		return PC_EINVAL;
	cJSON *am = cJSON_CreateObject();
	cJSON *arr = cJSON_CreateArray();
	int rc = am && arr ? add_str(am, "role", "assistant") : PC_ENOMEM;
	if (!rc && cJSON_IsString(content)) {
		if (*content->valuestring)
			rc = an_text_block(arr, content->valuestring);
	} else if (!rc) {
		const cJSON *blk;
		cJSON_ArrayForEach(blk, content)
		{
			rc = an_assistant_block(blk, arr);
			if (rc)
				break;
		}
	}
	if (!rc && cJSON_GetArraySize(arr) > 0) {
		/* An assistant turn with nothing left in it is dropped. */
		rc = attach(am, "content", arr);
		arr = NULL;
		if (!rc) {
			rc = attach(msgs, NULL, am);
			am = NULL;
		}
	}
	cJSON_Delete(arr);
	cJSON_Delete(am);
	return rc;
}

/* A tool result becomes a tool_result block; the body groups runs of them
 * into one user message. */
static int an_tool_result(const cJSON *m, cJSON *blocks)
{
	const char *id = str_of(m, "toolCallId");
	const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
	if (!id || !*id || (content && !cJSON_IsString(content) && !cJSON_IsArray(content)))
		return PC_EINVAL;
	char *sid = safe_id(id);
	if (!sid)
		return PC_ENOMEM;
	cJSON *tr = cJSON_CreateObject();
	int rc = attach(blocks, NULL, tr);
	if (!rc)
		rc = add_str(tr, "type", "tool_result");
	if (!rc)
		rc = add_copy(tr, "tool_use_id", sid);
	free(sid);
	if (!rc && cJSON_IsString(content) && *content->valuestring) {
		cJSON *arr = cJSON_AddArrayToObject(tr, "content");
		rc = arr ? an_text_block(arr, content->valuestring) : PC_ENOMEM;
	} else if (!rc && cJSON_IsArray(content)) {
		cJSON *arr = cJSON_CreateArray();
		rc = arr ? an_media_blocks(content, arr) : PC_ENOMEM;
		if (!rc && cJSON_GetArraySize(arr) > 0) {
			rc = attach(tr, "content", arr);
			arr = NULL;
		}
		cJSON_Delete(arr);
	}
	bool is_error = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(m, "isError"));
	if (!rc && !cJSON_AddBoolToObject(tr, "is_error", is_error))
		rc = PC_ENOMEM;
	return rc;
}

static const converters_t anthropic_messages = {an_user, an_assistant, an_tool_result};

static int an_tools(const cJSON *tools, cJSON *body)
{
	if (!cJSON_IsArray(tools) || cJSON_GetArraySize(tools) == 0)
		return 0;
	cJSON *arr = cJSON_AddArrayToObject(body, "tools");
	if (!arr)
		return PC_ENOMEM;
	const cJSON *t;
	cJSON_ArrayForEach(t, tools)
	{
		int rc = check_tool(t);
		if (rc)
			return rc;
		cJSON *at = cJSON_CreateObject();
		rc = attach(arr, NULL, at);
		if (!rc)
			rc = add_str(at, "name", str_of(t, "name"));
		if (!rc && str_of(t, "description"))
			rc = add_str(at, "description", str_of(t, "description"));
		if (!rc)
			rc = attach(at, "input_schema", schema_of(t));
		if (rc)
			return rc;
	}
	return 0;
}

static int anthropic_body(const pc_request_params_t *p, cJSON *body)
{
	int64_t max_tokens = p->max_tokens > 0 ? p->max_tokens : PC_REQUEST_DEFAULT_MAX_TOKENS;
	int64_t budget = pc_think_budget_tokens(p->thinking);
	if (budget >= max_tokens)
		budget = max_tokens - 1024;
	if (budget < 1024)
		budget = 0;
	int rc = add_str(body, "model", p->model);
	if (!rc && !cJSON_AddNumberToObject(body, "max_tokens", (double)max_tokens))
		rc = PC_ENOMEM;
	if (!rc && !cJSON_AddTrueToObject(body, "stream"))
		rc = PC_ENOMEM;
	if (!rc && p->system_prompt && *p->system_prompt)
		rc = add_str(body, "system", p->system_prompt);
	if (!rc)
		rc = add_messages(body, p, &anthropic_messages, true, NULL);
	if (!rc)
		rc = p->tools_json ? add_raw(body, "tools", p->tools_json) : an_tools(p->tools, body);
	if (!rc && budget) {
		cJSON *th = cJSON_AddObjectToObject(body, "thinking");
		if (!th || !cJSON_AddStringToObject(th, "type", "enabled") ||
		    !cJSON_AddNumberToObject(th, "budget_tokens", (double)budget))
			rc = PC_ENOMEM;
	}
	if (!rc && p->has_temperature && !budget &&
	    !cJSON_AddNumberToObject(body, "temperature", p->temperature))
		rc = PC_ENOMEM;
	return rc;
}

/* ---- the public surface ---- */

int pc_request_body_json(const pc_request_params_t *p, cJSON **out)
{
	if (!p || !out || !p->model || !*p->model || !cJSON_IsArray(p->messages) ||
	    (p->tools && !cJSON_IsArray(p->tools) && !cJSON_IsNull(p->tools)))
		return PC_EINVAL;
	cJSON *body = cJSON_CreateObject();
	if (!body)
		return PC_ENOMEM;
	int rc;
	if (p->api == PC_API_OPENAI_COMPLETIONS)
		rc = openai_body(p, body);
	else if (p->api == PC_API_ANTHROPIC_MESSAGES)
		rc = anthropic_body(p, body);
	else
		rc = PC_EINVAL;
	if (rc) {
		cJSON_Delete(body);
		return rc;
	}
	*out = body;
	return 0;
}

int pc_request_body(const pc_request_params_t *p, char **out)
{
	if (!out)
		return PC_EINVAL;
	cJSON *body = NULL;
	int rc = pc_request_body_json(p, &body);
	if (rc)
		return rc;
	*out = pc_json_print(body);
	cJSON_Delete(body);
	return *out ? 0 : PC_ENOMEM;
}

int pc_request_tools_json(pc_provider_api_t api, const cJSON *tools, char **out)
{
	if (!out || (tools && !cJSON_IsArray(tools) && !cJSON_IsNull(tools)))
		return PC_EINVAL;
	*out = NULL;
	cJSON *holder = cJSON_CreateObject();
	if (!holder)
		return PC_ENOMEM;
	int rc = api == PC_API_OPENAI_COMPLETIONS   ? oa_tools(tools, holder)
		 : api == PC_API_ANTHROPIC_MESSAGES ? an_tools(tools, holder)
						    : PC_EINVAL;
	cJSON *arr = cJSON_GetObjectItemCaseSensitive(holder, "tools");
	if (rc == 0 && arr && !(*out = pc_json_print(arr)))
		rc = PC_ENOMEM;
	cJSON_Delete(holder);
	return rc;
}

int pc_request_headers(pc_provider_api_t api, const char *api_key, char ***out)
{
	if (!out)
		return PC_EINVAL;
	const char *fixed[4] = {0};
	const char *auth_fmt = NULL;
	size_t nfixed = 0;
	if (api == PC_API_OPENAI_COMPLETIONS) {
		fixed[nfixed++] = "Content-Type: application/json";
		fixed[nfixed++] = "Accept: text/event-stream";
		auth_fmt = "Authorization: Bearer %s";
	} else if (api == PC_API_ANTHROPIC_MESSAGES) {
		fixed[nfixed++] = "content-type: application/json";
		fixed[nfixed++] = "accept: text/event-stream";
		fixed[nfixed++] = "anthropic-version: 2023-06-01";
		auth_fmt = "x-api-key: %s";
	} else {
		return PC_EINVAL;
	}
	bool with_key = api_key && *api_key;
	for (const char *k = api_key; with_key && *k; k++)
		if (iscntrl((unsigned char)*k))
			return PC_EINVAL;
	char **h = calloc(nfixed + 2, sizeof(*h));
	if (!h)
		return PC_ENOMEM;
	size_t n = 0;
	for (; n < nfixed; n++) {
		h[n] = strdup(fixed[n]);
		if (!h[n])
			goto fail;
	}
	if (with_key) {
		size_t len = strlen(auth_fmt) + strlen(api_key) + 1;
		h[n] = malloc(len);
		if (!h[n])
			goto fail;
		snprintf(h[n], len, auth_fmt, api_key);
	}
	*out = h;
	return 0;
fail:
	pc_request_headers_free(h);
	return PC_ENOMEM;
}

void pc_request_headers_free(char **headers)
{
	if (!headers)
		return;
	for (char **p = headers; *p; p++)
		free(*p);
	free(headers);
}
