/*
 * The wire-format registry (wire.h), the API names and paths read from it,
 * and the error reading the formats share.
 */
#include "wire.h"

#include <stdio.h>
#include <string.h>

#include "io/io.h"

/* Every wire format Pincer speaks: a new one is a file and a line here. */
static const pc_provider_wire_t *const wires[] = {
	&pc__wire_openai,
	&pc__wire_anthropic,
};

#define NWIRES (sizeof(wires) / sizeof(wires[0]))

const pc_provider_wire_t *pc_provider_wire(pc_provider_api_t api)
{
	for (size_t i = 0; i < NWIRES; i++)
		if (wires[i]->api == api)
			return wires[i];
	return NULL;
}

const pc_provider_wire_t *pc_provider_wire_named(const char *name)
{
	pc_provider_api_t api;
	if (pc_provider_api_parse(name, &api) != 0)
		return NULL;
	for (size_t i = 0; i < NWIRES; i++)
		if (wires[i]->api == api)
			return wires[i];
	return NULL;
}




const char *pc_provider_api_path(pc_provider_api_t api)
{
	const pc_provider_wire_t *w = pc_provider_wire(api);
	return w ? w->path : NULL;
}

/* ---- errors ---- */

/* At most PC_PROVIDER_ERROR_MAX bytes of `from`, cut at a character
 * boundary; empty unless UTF-8 (it goes into JSON). */
static void copy_bounded(const char *from, size_t n, char out[PC_PROVIDER_ERROR_MAX + 1])
{
	out[0] = '\0';
	if (n > PC_PROVIDER_ERROR_MAX) {
		n = PC_PROVIDER_ERROR_MAX;
		while (n > 0 && ((unsigned char)from[n] & 0xC0) == 0x80)
			n--;
	}
	if (pc_utf8_valid(from, n)) {
		memcpy(out, from, n);
		out[n] = '\0';
	}
}

void pc__wire_error_json(const char *body, size_t len, pc_provider_error_t *out)
{
	out->message[0] = out->type[0] = out->code[0] = '\0';
	if (!body || !len)
		return;
	cJSON *j = cJSON_ParseWithLength(body, len);
	const cJSON *err = cJSON_GetObjectItemCaseSensitive(j, "error");
	const char *m = cJSON_GetStringValue(err);
	if (!m)
		m = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(err, "message"));
	if (!m)
		m = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "message"));
	if (!m)
		m = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "detail"));
	size_t n = m ? strlen(m) : j ? 0 : strcspn(body, "\r\n");
	copy_bounded(m ? m : body, n, out->message);
	const char *t = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(err, "type"));
	if (t)
		copy_bounded(t, strlen(t), out->type);
	const cJSON *c = cJSON_GetObjectItemCaseSensitive(err, "code");
	if (cJSON_IsString(c))
		copy_bounded(c->valuestring, strlen(c->valuestring), out->code);
	else if (cJSON_IsNumber(c))
		snprintf(out->code, sizeof(out->code), "%.0f", c->valuedouble);
	cJSON_Delete(j);
}

void pc_provider_error_text(int status, const pc_provider_error_t *e, char *out, size_t cap)
{
	const char *m = e->message, *t = e->type, *c = e->code;
	if (t[0] && strstr(m, t))
		t = "";
	if (c[0] && (strstr(m, c) || !strcmp(c, t)))
		c = "";
	snprintf(out, cap, "%d %s%s%s%s%s%s", status, m[0] ? m : "status code (no body)",
		 t[0] || c[0] ? " (" : "", t, t[0] && c[0] ? ", " : "", c, t[0] || c[0] ? ")" : "");
}
