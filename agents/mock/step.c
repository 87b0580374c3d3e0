/*
 * Mock LLM steps: one JSON object parsed and validated into what one
 * answer is (docs/mock-llm.md).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/error.h"
#include "mock_internal.h"

/* The step used when nothing scripts the request. */
const pc_mock_step_t pc__mock_echo_step = {
	.kind = K_TEXT,
	.arg_chunks = 3,
	.usage = {-1, -1, -1, -1, -1},
	.retry_after = -1,
	.max_tokens = -1,
	.prompt_tokens = -1,
};

#define BIT(k) (1u << (k))
#define ANSWER (BIT(K_TEXT) | BIT(K_TOOLS) | BIT(K_REASONING) | BIT(K_EMPTY))
#define ALL ((1u << K_COUNT) - 1)

/* Which keys each kind accepts. */
static const struct {
	const char *key;
	unsigned kinds;
} step_keys[] = {
	{"kind", ALL},
	{"headers", ALL},
	{"text", BIT(K_TEXT) | BIT(K_TOOLS)},
	{"reasoning", BIT(K_TEXT) | BIT(K_TOOLS) | BIT(K_REASONING)},
	{"tool_calls", BIT(K_TOOLS)},
	{"arg_chunks", BIT(K_TOOLS)},
	{"chunks", ANSWER},
	{"ttft_ms", ANSWER | BIT(K_ERROR) | BIT(K_OVERFLOW)},
	{"delay_ms", ANSWER},
	{"burst", ANSWER},
	{"usage", ANSWER},
	{"finish_reason", ANSWER},
	{"disconnect_after", ANSWER},
	{"stall_after", ANSWER},
	{"stall_ms", ANSWER},
	{"malformed", ANSWER},
	{"malformed_at", ANSWER},
	{"error_after", ANSWER},
	{"status", BIT(K_ERROR)},
	{"message", BIT(K_ERROR) | ANSWER}, /* answers: of the in-stream error */
	{"type", BIT(K_ERROR) | ANSWER},
	{"code", BIT(K_ERROR) | ANSWER},
	{"retry_after", BIT(K_ERROR)},
	{"max_tokens", BIT(K_OVERFLOW)},
	{"prompt_tokens", BIT(K_OVERFLOW)},
	{"ms", BIT(K_STALL)},
	{"before_headers", BIT(K_STALL)},
};

#define MAX_CHUNKS 1000000u
#define MAX_TOKENS 1000000000000000ll


static int bad(const where_t *w, const char *key, const char *what)
{
	return pc__mock_fail(w->err, w->cap, "%s%s%s: %s", w->path, *w->path ? "." : "", key, what);
}

/* A non-negative integer no greater than max. */
static int get_uint(const cJSON *o, const char *key, const where_t *w, uint64_t max, uint64_t *out,
		    bool *present)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	if (present)
		*present = v != NULL;
	if (!v)
		return 0;
	double d = v->valuedouble;
	if (!cJSON_IsNumber(v) || d < 0 || d > (double)max || d != (double)(uint64_t)d) {
		char what[96];
		snprintf(what, sizeof(what), "must be an integer from 0 to %" PRIu64, max);
		return bad(w, key, what);
	}
	*out = (uint64_t)d;
	return 0;
}

static int get_u32(const cJSON *o, const char *key, const where_t *w, uint32_t max, uint32_t *out)
{
	uint64_t v = *out;
	int rc = get_uint(o, key, w, max, &v, NULL);
	*out = (uint32_t)v;
	return rc;
}

/* A string, copied into *out (left alone when the key is absent). */
static int get_str(const cJSON *o, const char *key, const where_t *w, char **out)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	if (!v)
		return 0;
	if (!cJSON_IsString(v))
		return bad(w, key, "must be a string");
	*out = pc__mock_dup_str(v->valuestring);
	return *out ? 0 : PC_ENOMEM;
}

static bool token_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* "headers": {"name": "value", ...} -> "name: value\r\n" lines. */
static int parse_headers(const cJSON *v, const where_t *w, char **out)
{
	if (!cJSON_IsObject(v))
		return bad(w, "headers", "must be an object of strings");
	pc__buf_t b = {0};
	const cJSON *h;
	cJSON_ArrayForEach(h, v) {
		bool ok = cJSON_IsString(h) && *h->string;
		for (const char *c = h->string; ok && *c; c++)
			ok = token_char(*c);
		for (const char *c = ok ? h->valuestring : ""; ok && *c; c++)
			ok = *c != '\r' && *c != '\n';
		if (!ok) {
			free(b.p);
			return bad(w, "headers", "needs token names and string values without CR or LF");
		}
		pc__buf_append_str(&b, h->string);
		pc__buf_append_str(&b, ": ");
		pc__buf_append_str(&b, h->valuestring);
		pc__buf_append(&b, "\r\n", 2);
	}
	if (b.err) {
		free(b.p);
		return b.err;
	}
	*out = b.p; /* NULL for an empty object: no extra headers */
	return 0;
}

static int parse_usage(const cJSON *v, const where_t *w, pc_mock_step_t *s)
{
	if (!cJSON_IsObject(v))
		return bad(w, "usage", "must be an object");
	char path[96];
	snprintf(path, sizeof(path), "%s%susage", w->path, *w->path ? "." : "");
	where_t uw = {path, w->err, w->cap};
	const cJSON *f;
	cJSON_ArrayForEach(f, v) {
		size_t u = 0;
		while (u < U_COUNT && strcmp(f->string, usage_names[u]))
			u++;
		if (u == U_COUNT)
			return bad(&uw, f->string, "unknown key");
		uint64_t n = 0;
		int rc = get_uint(v, f->string, &uw, MAX_TOKENS, &n, NULL);
		if (rc)
			return rc;
		s->usage[u] = (int64_t)n;
	}
	return 0;
}

static int parse_tools(const cJSON *v, const where_t *w, pc_mock_step_t *s)
{
	int n = cJSON_GetArraySize(v);
	if (!cJSON_IsArray(v) || n == 0)
		return bad(w, "tool_calls", "must be a non-empty array");
	s->tools = calloc((size_t)n, sizeof(tool_t));
	if (!s->tools)
		return PC_ENOMEM;
	s->tool_count = (size_t)n;
	const cJSON *t;
	size_t i = 0;
	cJSON_ArrayForEach(t, v) {
		char path[96];
		snprintf(path, sizeof(path), "%s%stool_calls[%zu]", w->path, *w->path ? "." : "", i);
		where_t tw = {path, w->err, w->cap};
		tool_t *tc = &s->tools[i++];
		if (!cJSON_IsObject(t))
			return pc__mock_fail(w->err, w->cap, "%s: must be an object", path);
		const cJSON *f;
		cJSON_ArrayForEach(f, t) {
			if (strcmp(f->string, "name") && strcmp(f->string, "arguments") && strcmp(f->string, "id"))
				return bad(&tw, f->string, "unknown key");
		}
		int rc = get_str(t, "name", &tw, &tc->name);
		if (!rc && (!tc->name || !*tc->name))
			rc = bad(&tw, "name", "must be a non-empty string");
		if (!rc)
			rc = get_str(t, "id", &tw, &tc->id);
		if (rc)
			return rc;
		const cJSON *a = cJSON_GetObjectItemCaseSensitive(t, "arguments");
		if (!a)
			tc->args = pc__mock_dup_str("{}");
		else if (cJSON_IsString(a))
			tc->args = pc__mock_dup_str(a->valuestring); /* as given, even if not JSON */
		else if (cJSON_IsObject(a))
			tc->args = cJSON_PrintUnformatted(a);
		else
			return bad(&tw, "arguments", "must be an object or a string");
		if (!tc->args)
			return PC_ENOMEM;
	}
	return 0;
}

static int parse_fault(const cJSON *j, const where_t *w, pc_mock_step_t *s)
{
	static const char *const keys[] = {"disconnect_after", "stall_after", "malformed", "error_after"};
	int given = 0;
	for (size_t i = 0; i < 4; i++)
		given += cJSON_GetObjectItemCaseSensitive(j, keys[i]) != NULL;
	if (given > 1)
		return bad(w, "disconnect_after",
			   "only one of disconnect_after, stall_after, malformed, error_after");
	bool in_stream = cJSON_GetObjectItemCaseSensitive(j, "error_after") != NULL;
	if (s->kind != K_ERROR && !in_stream) {
		if (cJSON_GetObjectItemCaseSensitive(j, "message"))
			return bad(w, "message", "needs error_after");
		if (cJSON_GetObjectItemCaseSensitive(j, "type"))
			return bad(w, "type", "needs error_after");
		if (cJSON_GetObjectItemCaseSensitive(j, "code"))
			return bad(w, "code", "needs error_after");
	}
	if (cJSON_GetObjectItemCaseSensitive(j, "stall_ms") &&
	    !cJSON_GetObjectItemCaseSensitive(j, "stall_after"))
		return bad(w, "stall_ms", "needs stall_after");
	if (cJSON_GetObjectItemCaseSensitive(j, "malformed_at") &&
	    !cJSON_GetObjectItemCaseSensitive(j, "malformed"))
		return bad(w, "malformed_at", "needs malformed");
	bool present = false;
	uint64_t k = 0;
	int rc = get_uint(j, "disconnect_after", w, MAX_CHUNKS, &k, &present);
	if (!rc && present) {
		s->fault = F_DISCONNECT;
		s->fault_at = (uint32_t)k;
	}
	if (!rc)
		rc = get_uint(j, "error_after", w, MAX_CHUNKS, &k, &present);
	if (!rc && present) {
		s->fault = F_STREAM_ERROR;
		s->fault_at = (uint32_t)k;
	}
	if (!rc)
		rc = get_uint(j, "stall_after", w, MAX_CHUNKS, &k, &present);
	if (!rc && present) {
		s->fault = F_STALL;
		s->fault_at = (uint32_t)k;
		rc = get_u32(j, "stall_ms", w, PC__MOCK_MAX_MS, &s->stall_ms);
	}
	if (rc)
		return rc;
	const cJSON *m = cJSON_GetObjectItemCaseSensitive(j, "malformed");
	if (!m)
		return 0;
	if (cJSON_IsString(m) && !strcmp(m->valuestring, "bad_json"))
		s->fault = F_BAD_JSON;
	else if (cJSON_IsString(m) && !strcmp(m->valuestring, "truncated"))
		s->fault = F_TRUNCATED;
	else
		return bad(w, "malformed", "must be \"bad_json\" or \"truncated\"");
	rc = get_uint(j, "malformed_at", w, MAX_CHUNKS, &k, &s->fault_at_set);
	s->fault_at = (uint32_t)k;
	return rc;
}

static int parse_kind(const cJSON *j, const where_t *w, pc_mock_step_t *s)
{
	const cJSON *k = cJSON_GetObjectItemCaseSensitive(j, "kind");
	s->kind = K_TEXT;
	if (!k)
		return 0;
	for (int i = 0; i < K_COUNT; i++) {
		if (cJSON_IsString(k) && !strcmp(k->valuestring, kind_names[i])) {
			s->kind = i;
			return 0;
		}
	}
	return bad(w, "kind", "must be one of text, tool_calls, reasoning, empty, error, "
			      "context_overflow, stall");
}

/* Keys of this kind only, with the right types, in range. */
static int parse_fields(const cJSON *j, const where_t *w, pc_mock_step_t *s)
{
	const cJSON *f;
	cJSON_ArrayForEach(f, j) {
		size_t i = 0;
		while (i < sizeof(step_keys) / sizeof(step_keys[0]) && strcmp(step_keys[i].key, f->string))
			i++;
		if (i == sizeof(step_keys) / sizeof(step_keys[0]))
			return bad(w, f->string, "unknown key");
		if (!(step_keys[i].kinds & BIT(s->kind))) {
			char what[64];
			snprintf(what, sizeof(what), "not allowed for kind %s", kind_names[s->kind]);
			return bad(w, f->string, what);
		}
	}
	int rc = get_str(j, "text", w, &s->text);
	if (!rc)
		rc = get_str(j, "reasoning", w, &s->reasoning);
	if (!rc)
		rc = get_u32(j, "chunks", w, MAX_CHUNKS, &s->chunks);
	if (!rc && cJSON_GetObjectItemCaseSensitive(j, "chunks") && s->chunks == 0)
		rc = bad(w, "chunks", "must be at least 1");
	if (!rc)
		rc = get_u32(j, "arg_chunks", w, MAX_CHUNKS, &s->arg_chunks);
	if (!rc && s->arg_chunks == 0)
		rc = bad(w, "arg_chunks", "must be at least 1");
	if (!rc)
		rc = get_u32(j, "ttft_ms", w, PC__MOCK_MAX_MS, &s->ttft_ms);
	if (!rc)
		rc = get_u32(j, "delay_ms", w, PC__MOCK_MAX_MS, &s->delay_ms);
	if (!rc)
		rc = get_u32(j, "burst", w, MAX_CHUNKS, &s->burst);
	if (!rc)
		rc = get_u32(j, "ms", w, PC__MOCK_MAX_MS, &s->ms);
	if (rc)
		return rc;
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "before_headers");
	if (v && !cJSON_IsBool(v))
		return bad(w, "before_headers", "must be true or false");
	s->before_headers = cJSON_IsTrue(v);
	if ((v = cJSON_GetObjectItemCaseSensitive(j, "headers")) && (rc = parse_headers(v, w, &s->headers)))
		return rc;
	if ((v = cJSON_GetObjectItemCaseSensitive(j, "usage")) && (rc = parse_usage(v, w, s)))
		return rc;
	if ((v = cJSON_GetObjectItemCaseSensitive(j, "tool_calls")) && (rc = parse_tools(v, w, s)))
		return rc;
	if ((v = cJSON_GetObjectItemCaseSensitive(j, "finish_reason"))) {
		static const char *const fr[] = {"stop", "length", "tool_calls", "content_filter", "error"};
		for (size_t i = 0; i < sizeof(fr) / sizeof(fr[0]) && !s->finish; i++)
			if (cJSON_IsString(v) && !strcmp(v->valuestring, fr[i]))
				s->finish = fr[i];
		if (!s->finish)
			return bad(w, "finish_reason",
				   "must be stop, length, tool_calls, content_filter or error");
	}
	uint64_t n = 0;
	bool present = false;
	rc = get_uint(j, "status", w, 599, &n, &present);
	if (!rc && present && n < 200)
		rc = bad(w, "status", "must be from 200 to 599");
	s->status = (int)n;
	if (!rc)
		rc = get_uint(j, "retry_after", w, PC__MOCK_MAX_MS, &n, &present);
	if (!rc && present)
		s->retry_after = (int64_t)n;
	if (!rc)
		rc = get_uint(j, "max_tokens", w, MAX_TOKENS, &n, &present);
	if (!rc && present)
		s->max_tokens = (int64_t)n;
	if (!rc)
		rc = get_uint(j, "prompt_tokens", w, MAX_TOKENS, &n, &present);
	if (!rc && present)
		s->prompt_tokens = (int64_t)n;
	if (!rc)
		rc = get_str(j, "message", w, &s->message);
	if (!rc)
		rc = get_str(j, "type", w, &s->etype);
	if (!rc)
		rc = get_str(j, "code", w, &s->code);
	if (!rc)
		rc = parse_fault(j, w, s);
	return rc;
}

int pc__mock_step_parse(const cJSON *j, const where_t *w, pc_mock_step_t **out)
{
	if (!cJSON_IsObject(j))
		return pc__mock_fail(w->err, w->cap, "%s%sa step must be a JSON object", w->path, *w->path ? ": " : "");
	pc_mock_step_t *s = malloc(sizeof(*s));
	if (!s)
		return PC_ENOMEM;
	*s = pc__mock_echo_step;
	int rc = parse_kind(j, w, s);
	if (!rc)
		rc = parse_fields(j, w, s);
	if (!rc && s->kind == K_TOOLS && !s->tools)
		rc = bad(w, "tool_calls", "is required for kind tool_calls");
	if (!rc && s->kind == K_REASONING && !s->reasoning)
		rc = bad(w, "reasoning", "is required for kind reasoning");
	if (!rc && s->kind == K_ERROR && !s->status)
		rc = bad(w, "status", "is required for kind error");
	if (!rc && !(s->json = cJSON_PrintUnformatted(j)))
		rc = PC_ENOMEM;
	if (rc) {
		pc_mock_step_free(s);
		return rc;
	}
	*out = s;
	return 0;
}

int pc_mock_step_parse(const cJSON *json, pc_mock_step_t **out, char *err, size_t errcap)
{
	if (!json || !out)
		return PC_EINVAL;
	where_t w = {"", err, errcap};
	return pc__mock_step_parse(json, &w, out);
}

void pc_mock_step_free(pc_mock_step_t *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->tool_count; i++) {
		free(s->tools[i].id);
		free(s->tools[i].name);
		free(s->tools[i].args);
	}
	free(s->tools);
	free(s->text);
	free(s->reasoning);
	free(s->message);
	free(s->etype);
	free(s->code);
	free(s->headers);
	free(s->json);
	free(s);
}

const char *pc_mock_step_json(const pc_mock_step_t *s)
{
	return s ? s->json : "null";
}

const char *pc_mock_source_name(pc_mock_source_t src)
{
	switch (src) {
	case PC_MOCK_SRC_MARKER: return "marker";
	case PC_MOCK_SRC_HEADER: return "header";
	case PC_MOCK_SRC_SCENARIO: return "scenario";
	case PC_MOCK_SRC_DEFAULT: return "default";
	}
	return "?";
}
