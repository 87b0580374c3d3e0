/*
 * What a request to the mock says: the step it scripts for itself (a
 * marker in the last user message, or the header), the text to echo, the
 * words it counts as input.
 */
#include <stdlib.h>
#include <string.h>

#include "runtime/error.h"
#include "mock_internal.h"

/* Appends the text of a message's content (a string, or the "text" parts
 * of an array joined with LF). */
static void content_text(const cJSON *msg, pc__buf_t *out)
{
	const cJSON *c = cJSON_GetObjectItemCaseSensitive(msg, "content");
	if (cJSON_IsString(c)) {
		pc__buf_append_str(out, c->valuestring);
		return;
	}
	const cJSON *parts = cJSON_IsArray(c) ? c : NULL, *part;
	bool first = true;
	cJSON_ArrayForEach(part, parts) {
		const cJSON *t = cJSON_GetObjectItemCaseSensitive(part, "text");
		const cJSON *ty = cJSON_GetObjectItemCaseSensitive(part, "type");
		if (!cJSON_IsString(t) || !cJSON_IsString(ty) || strcmp(ty->valuestring, "text"))
			continue;
		if (!first)
			pc__buf_append(out, "\n", 1);
		pc__buf_append_str(out, t->valuestring);
		first = false;
	}
}

static bool is_user(const cJSON *msg)
{
	const cJSON *r = cJSON_GetObjectItemCaseSensitive(msg, "role");
	return cJSON_IsString(r) && !strcmp(r->valuestring, "user");
}

#define MARKER "[[mock:"

/* Finds the first well-formed marker in s[0..n): its JSON is parsed into
 * *json (the caller's) and [*start, *end) spans the whole marker. False if
 * there is none; PC_EINVAL (in *rc) if one is there but broken. */
static bool find_marker(const char *s, size_t n, cJSON **json, size_t *start, size_t *end, int *rc)
{
	size_t ml = strlen(MARKER);
	const char *m = memmem(s, n, MARKER, ml);
	if (!m)
		return false;
	const char *j = m + ml;
	const char *jend = NULL;
	cJSON *v = cJSON_ParseWithLengthOpts(j, n - (size_t)(j - s), &jend, false);
	if (v && jend && (size_t)(jend - s) + 2 <= n && jend[0] == ']' && jend[1] == ']') {
		*json = v;
		*start = (size_t)(m - s);
		*end = (size_t)(jend - s) + 2;
		return true;
	}
	cJSON_Delete(v);
	*rc = PC_EINVAL;
	return false;
}

int pc_mock_request_step(const cJSON *body, const char *header, pc_mock_step_t **out,
			 pc_mock_source_t *src, char *err, size_t errcap)
{
	if (!out || !src)
		return PC_EINVAL;
	*out = NULL;
	const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(body, "messages");
	const cJSON *last = cJSON_IsArray(msgs) ? cJSON_GetArrayItem(msgs, cJSON_GetArraySize(msgs) - 1) : NULL;
	int rc = 0;
	if (last && is_user(last)) {
		pc__buf_t t = {0};
		content_text(last, &t);
		cJSON *j = NULL;
		size_t a, b;
		if (t.err)
			rc = t.err;
		else if (t.p && find_marker(t.p, t.len, &j, &a, &b, &rc)) {
			where_t w = {"marker", err, errcap};
			*src = PC_MOCK_SRC_MARKER;
			rc = pc__mock_step_parse(j, &w, out);
			cJSON_Delete(j);
		} else if (rc) {
			rc = pc__mock_fail(err, errcap, "marker: [[mock:...]] must hold a JSON object followed by ]]");
		}
		free(t.p);
		if (rc || *out)
			return rc;
	}
	if (!header)
		return 0;
	cJSON *j = cJSON_Parse(header);
	if (!j)
		return pc__mock_fail(err, errcap, "x-mock-scenario: not valid JSON");
	where_t w = {"x-mock-scenario", err, errcap};
	*src = PC_MOCK_SRC_HEADER;
	rc = pc__mock_step_parse(j, &w, out);
	cJSON_Delete(j);
	return rc;
}

/* The echo: the last user message with text, markers removed, trimmed. */
int pc__mock_echo_text(const cJSON *body, char **out)
{
	const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(body, "messages");
	pc__buf_t t = {0};
	for (int i = cJSON_GetArraySize(msgs) - 1; i >= 0 && !t.len && !t.err; i--) {
		const cJSON *m = cJSON_GetArrayItem(msgs, i);
		if (!is_user(m))
			continue;
		content_text(m, &t);
		cJSON *j;
		size_t a, b;
		int rc = 0;
		while (t.p && find_marker(t.p, t.len, &j, &a, &b, &rc)) {
			cJSON_Delete(j);
			memmove(t.p + a, t.p + b, t.len - b + 1);
			t.len -= b - a;
		}
		size_t s = 0;
		while (s < t.len && pc__mock_is_space(t.p[s]))
			s++;
		while (t.len > s && pc__mock_is_space(t.p[t.len - 1]))
			t.len--;
		if (t.p) {
			memmove(t.p, t.p + s, t.len - s);
			t.len -= s;
			t.p[t.len] = 0;
		}
	}
	if (!t.err && !t.len)
		pc__buf_append_str(&t, "OK");
	if (t.err) {
		free(t.p);
		return t.err;
	}
	*out = t.p;
	return 0;
}

/* Words in every string of the conversation except structural ones (roles,
 * types, ids, names, signatures). */
static uint64_t json_words(const cJSON *v)
{
	static const char *const skip[] = {"role", "type", "id", "name", "tool_call_id", "tool_use_id",
					   "signature"};
	uint64_t n = 0;
	if (cJSON_IsString(v)) {
		for (size_t i = 0; v->string && i < sizeof(skip) / sizeof(skip[0]); i++)
			if (!strcmp(v->string, skip[i]))
				return 0;
		return pc__mock_word_count(v->valuestring, strlen(v->valuestring));
	}
	const cJSON *c;
	cJSON_ArrayForEach(c, v)
		n += json_words(c);
	return n;
}

uint64_t pc__mock_input_words(const cJSON *body)
{
	return json_words(cJSON_GetObjectItemCaseSensitive(body, "messages")) +
	       json_words(cJSON_GetObjectItemCaseSensitive(body, "system"));
}
