/*
 * What the wire formats' request builders (openai.c, anthropic.c) share
 * with request.c: small cJSON helpers and the messages array, converted
 * once per message and joined (request.c).
 */
#ifndef PINCER_AGENTS_PROVIDERS_REQUEST_INTERNAL_H
#define PINCER_AGENTS_PROVIDERS_REQUEST_INTERNAL_H

#include <stdbool.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "io/io.h"
#include "request.h"

static inline bool pc__req_is_type(const cJSON *block, const char *type)
{
	const cJSON *t = cJSON_GetObjectItemCaseSensitive(block, "type");
	return cJSON_IsString(t) && strcmp(t->valuestring, type) == 0;
}

static inline const char *pc__req_str(const cJSON *o, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* `key` is always a literal. A body is built, printed and freed while its
 * inputs stay put, so by default a value is borrowed, not copied (a
 * request repeats the whole history and every tool schema: copying them
 * was most of its cost); pc__req_add_copy is for values about to be freed. */
static inline int pc__req_add(cJSON *o, const char *key, cJSON *v)
{
	if (v && cJSON_AddItemToObjectCS(o, key, v))
		return 0;
	cJSON_Delete(v);
	return PC_ENOMEM;
}

static inline int pc__req_add_str(cJSON *o, const char *key, const char *v)
{
	return pc__req_add(o, key, cJSON_CreateStringReference(v));
}

static inline int pc__req_add_copy(cJSON *o, const char *key, const char *v)
{
	return pc__req_add(o, key, cJSON_CreateString(v));
}

/* JSON text printed as it is, borrowed like pc__req_add_str's values. */
static inline int pc__req_add_raw(cJSON *o, const char *key, const char *json)
{
	return pc__req_add(o, key, pc_json_raw_ref(json));
}

/* Adds `item` to `parent` (an object when `key` is set, else an array),
 * deleting it when that fails, so callers never leak it. */
static inline int pc__req_attach(cJSON *parent, const char *key, cJSON *item)
{
	if (!item)
		return PC_ENOMEM;
	bool ok = key ? cJSON_AddItemToObject(parent, key, item) : cJSON_AddItemToArray(parent, item);
	if (!ok) {
		cJSON_Delete(item);
		return PC_ENOMEM;
	}
	return 0;
}

/* The text blocks of `content` (or `content` itself when it is a string),
 * joined with `sep`. Other block types are skipped. *out is "" when there
 * is no text; the caller frees it. */
int pc__req_join_text(const cJSON *content, const char *sep, char **out);

/* A tool's parameters (borrowed), or {"type":"object","properties":{}}. */
cJSON *pc__req_schema(const cJSON *tool);

/* PC_EINVAL unless `t` is a tool: a name, and a string or null description. */
int pc__req_check_tool(const cJSON *t);
/* The body's "tools": each checked tool as {name, description?,
 * <schema_key>: schema}, wrapped as {type: "function", function: {...}}
 * when as_function (OpenAI's shape; Anthropic's is the bare entry). */
int pc__req_tools(const cJSON *tools, cJSON *body, const char *schema_key, bool as_function);

/* A format's conversions: each appends what one message of its role
 * becomes to `into` (nothing, or one item). */
typedef int (*pc__convert_fn)(const cJSON *m, cJSON *into);
typedef struct pc__converters {
	pc__convert_fn user, assistant, tool_result;
} pc__converters_t;

/* Adds body["messages"]: `head` (printed JSON, may be NULL), then each of
 * p->messages converted by `conv` (once per message and api: the printed
 * form is kept on the message) and joined into one text. With
 * `group_results`, a run of tool results goes into one user message. */
int pc__req_messages(cJSON *body, const pc_request_params_t *p, const pc__converters_t *conv,
		     bool group_results, const char *head);

#endif
