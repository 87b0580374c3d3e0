/*
 * Request bodies and headers, whatever the wire format: thinking levels,
 * the messages array (each message converted once per api by its format's
 * converters and kept), and the public surface, which finds the format's
 * table (wire.h) and lets it fill the body. Each conversion reads the
 * unified message and appends what the format wants to a cJSON tree; any
 * structural problem is PC_EINVAL and nothing half-built escapes.
 */
#include "request_internal.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/io.h"
#include "wire.h"

/* ---- thinking levels ---- */

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

/* ---- shared by the formats (request_internal.h) ---- */

/* The text blocks of `content` (or `content` itself when it is a string),
 * joined with `sep`. Other block types are skipped. *out is "" when there
 * is no text; the caller frees it. */
int pc__req_join_text(const cJSON *content, const char *sep, char **out)
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
			const char *t = pc__req_is_type(blk, "text") ? pc__req_str(blk, "text") : NULL;
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

static const char *role_of(const cJSON *m)
{
	return cJSON_IsObject(m) ? pc__req_str(m, "role") : NULL;
}

/* ---- each message's wire form, kept on the message ----
 *
 * Every request repeats the whole history, and a message hardly ever
 * changes once it has joined it: so a message is converted and printed for
 * an api once, and the text is kept in the valuestring cJSON leaves unused
 * for objects (never printed or compared; cJSON_Delete frees it and
 * cJSON_Duplicate copies it), behind one byte naming the api. Whoever edits
 * a message in place calls pc_request_message_changed. */

static int convert(const pc__converters_t *c, const cJSON *m, cJSON *into)
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

/* The byte that names an api's kept form. */
static char api_tag(pc_provider_api_t api)
{
	return (char)('@' + (int)api);
}

/* *out: the printed item `conv` makes of `m` ("" for none), owned by the
 * message. */
static int wire_of(const cJSON *m, char tag, const pc__converters_t *conv, const char **out)
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
static int joined(const pc_request_params_t *p, const pc__converters_t *conv, bool group_results, const char *head,
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
int pc__req_messages(cJSON *body, const pc_request_params_t *p, const pc__converters_t *conv, bool group_results,
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
	return pc__req_add(body, "messages", pc_json_raw_take(text));
}

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

cJSON *pc__req_schema(const cJSON *tool)
{
	const cJSON *p = cJSON_GetObjectItemCaseSensitive(tool, "parameters");
	return cJSON_IsObject(p) ? cJSON_CreateObjectReference(p->child) : default_schema();
}

int pc__req_check_tool(const cJSON *t)
{
	const char *name = cJSON_IsObject(t) ? pc__req_str(t, "name") : NULL;
	const cJSON *d = cJSON_GetObjectItemCaseSensitive(t, "description");
	if (!name || !*name || (d && !cJSON_IsString(d) && !cJSON_IsNull(d)))
		return PC_EINVAL;
	return 0;
}

/* ---- the public surface ---- */

int pc_request_body_json(const pc_request_params_t *p, cJSON **out)
{
	if (!p || !out || !p->model || !*p->model || !cJSON_IsArray(p->messages) ||
	    (p->tools && !cJSON_IsArray(p->tools) && !cJSON_IsNull(p->tools)))
		return PC_EINVAL;
	const pc_provider_wire_t *w = pc_provider_wire(p->api);
	if (!w)
		return PC_EINVAL;
	cJSON *body = cJSON_CreateObject();
	if (!body)
		return PC_ENOMEM;
	int rc = w->build_body(p, body);
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
	const pc_provider_wire_t *w = pc_provider_wire(api);
	cJSON *holder = w ? cJSON_CreateObject() : NULL;
	if (!holder)
		return w ? PC_ENOMEM : PC_EINVAL;
	int rc = w->build_tools(tools, holder);
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
	const pc_provider_wire_t *w = pc_provider_wire(api);
	if (!w)
		return PC_EINVAL;
	size_t nfixed = 0;
	while (w->headers && w->headers[nfixed])
		nfixed++;
	bool with_key = api_key && *api_key && w->auth_prefix;
	for (const char *k = api_key; with_key && *k; k++)
		if (iscntrl((unsigned char)*k))
			return PC_EINVAL;
	char **h = calloc(nfixed + 2, sizeof(*h));
	if (!h)
		return PC_ENOMEM;
	size_t n = 0;
	for (; n < nfixed; n++) {
		h[n] = strdup(w->headers[n]);
		if (!h[n])
			goto fail;
	}
	if (with_key) {
		size_t pl = strlen(w->auth_prefix), kl = strlen(api_key);
		h[n] = malloc(pl + kl + 1);
		if (!h[n])
			goto fail;
		memcpy(h[n], w->auth_prefix, pl);
		memcpy(h[n] + pl, api_key, kl + 1);
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

int pc__req_tools(const cJSON *tools, cJSON *body, const char *schema_key, bool as_function)
{
	if (!cJSON_IsArray(tools) || cJSON_GetArraySize(tools) == 0)
		return 0;
	cJSON *arr = cJSON_AddArrayToObject(body, "tools");
	if (!arr)
		return PC_ENOMEM;
	const cJSON *t;
	cJSON_ArrayForEach(t, tools)
	{
		int rc = pc__req_check_tool(t);
		if (rc)
			return rc;
		cJSON *entry = cJSON_CreateObject(), *def = entry;
		rc = pc__req_attach(arr, NULL, entry);
		if (!rc && as_function) {
			def = cJSON_CreateObject();
			rc = pc__req_add_str(entry, "type", "function");
			if (!rc)
				rc = pc__req_attach(entry, "function", def);
			else
				cJSON_Delete(def);
		}
		if (!rc)
			rc = pc__req_add_str(def, "name", pc__req_str(t, "name"));
		if (!rc && pc__req_str(t, "description"))
			rc = pc__req_add_str(def, "description", pc__req_str(t, "description"));
		if (!rc)
			rc = pc__req_attach(def, schema_key, pc__req_schema(t));
		if (rc)
			return rc;
	}
	return 0;
}

int pc_request_provider_headers(const pc_provider_config_t *provider, uint32_t profile, const char *run_id,
				char ***out)
{
	const char *key = profile < provider->profile_count ? provider->profiles[profile].api_key : NULL;
	int rc = pc_request_headers(provider->api, key, out);
	if (rc != 0 || !provider->embedded)
		return rc;
	size_t n = 0;
	while ((*out)[n])
		n++;
	char **h = realloc(*out, (n + 2) * sizeof(*h));
	size_t len = strlen(run_id) + 32;
	char *line = h ? malloc(len) : NULL;
	if (!line) {
		pc_request_headers_free(h ? h : *out);
		*out = NULL;
		return PC_ENOMEM;
	}
	snprintf(line, len, "x-mock-session: %s", run_id);
	h[n] = line;
	h[n + 1] = NULL;
	*out = h;
	return 0;
}
