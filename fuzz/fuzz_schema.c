/*
 * libFuzzer target for the tool-argument validator (agents/tools/schema.c).
 * See fuzz/README.md.
 *
 * Input layout: byte 0 is the size of a short error buffer, then the
 * schema text, a NUL byte and the instance text. Without a NUL the schema
 * text is its own instance. Compile must answer 0, PC_EINVAL or PC_ENOMEM
 * with a NUL-terminated message that names a schema location; validation
 * must answer 0 or PC_EINVAL with a message that names an instance
 * location, the same answer every time and whatever the buffer, and agree
 * with schemas built around the fuzzed one (allOf, not, anyOf, oneOf,
 * if/then/else, properties, items). Any broken promise traps.
 */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "agents/tools/schema.h"
#include "runtime/error.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(c)                                                                                   \
	do {                                                                                       \
		if (!(c))                                                                          \
			__builtin_trap();                                                          \
	} while (0)

/* The full error buffer; guard bytes after it must stay untouched. */
#define ERRCAP 4096u
#define GUARD 16u
#define GUARD_BYTE 0xA5

typedef struct msg {
	char buf[ERRCAP + GUARD];
} msg_t;

static void msg_arm(msg_t *m)
{
	memset(m->buf, GUARD_BYTE, sizeof(m->buf));
}

/* The message fits in cap bytes, is NUL-terminated there, and nothing
 * past the buffer was written. */
static void msg_check(const msg_t *m, size_t cap)
{
	if (cap == 0) {
		for (size_t i = 0; i < sizeof(m->buf); i++)
			CHECK((uint8_t)m->buf[i] == GUARD_BYTE);
		return;
	}
	CHECK(memchr(m->buf, 0, cap) != NULL);
	for (size_t i = cap; i < sizeof(m->buf); i++)
		CHECK((uint8_t)m->buf[i] == GUARD_BYTE);
}

/* A message written into cap bytes is the full one, or when that does not
 * fit (or fills the buffer exactly) a prefix of it, shorter by at most the
 * 3 bytes of a partial UTF-8 sequence dropped at the end. */
static void check_prefix(const char *cut, size_t cap, const char *full)
{
	size_t lc = strlen(cut), lf = strlen(full);
	size_t room = lf < cap - 1 ? lf : cap - 1;
	CHECK(lc <= room && lc + 3 >= room);
	CHECK(memcmp(cut, full, lc) == 0);
	if (lf + 1 < cap)
		CHECK(lc == lf);
}

static bool has_limit_message(const char *m)
{
	return strstr(m, "to validate") != NULL;
}

/* ---- JSON pointers -------------------------------------------------------------- */

/* One pointer segment, unescaped (~0, ~1). The caller frees. */
static char *segment(const char *seg, size_t n)
{
	char *key = malloc(n + 1);
	CHECK(key);
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		if (seg[i] == '~' && i + 1 < n && (seg[i + 1] == '0' || seg[i + 1] == '1')) {
			key[k++] = seg[i + 1] == '0' ? '~' : '/';
			i++;
		} else {
			key[k++] = seg[i];
		}
	}
	key[k] = '\0';
	return key;
}

/* Whether ptr[0..n) (empty: v itself) names a location under v. Objects
 * may hold a name twice (cJSON keeps both), so every match is tried. */
static bool resolves_at(const cJSON *v, const char *ptr, size_t n)
{
	if (n == 0)
		return true;
	size_t end = 1;
	while (end < n && ptr[end] != '/')
		end++;
	char *key = segment(ptr + 1, end - 1);
	bool found = false;
	if (cJSON_IsArray(v) && key[0] >= '0' && key[0] <= '9') {
		char *stop = NULL;
		unsigned long i = strtoul(key, &stop, 10);
		const cJSON *e = *stop == '\0' && i < (unsigned long)cJSON_GetArraySize(v) ? cJSON_GetArrayItem(v, (int)i) : NULL;
		found = e && resolves_at(e, ptr + end, n - end);
	} else if (cJSON_IsObject(v)) {
		for (const cJSON *m = v->child; m && !found; m = m->next)
			if (strcmp(m->string ? m->string : "", key) == 0)
				found = resolves_at(m, ptr + end, n - end);
	}
	free(key);
	return found;
}

/* "/" alone is the root. */
static bool resolves(const cJSON *doc, const char *ptr, size_t n)
{
	if (n == 0 || ptr[0] != '/')
		return false;
	return n == 1 || resolves_at(doc, ptr, n);
}

/* "<pointer>: <rule>": some ": " ends a pointer that resolves in doc (keys
 * may hold ": " themselves, so every candidate is tried). A message cut
 * by the buffer may have lost its ": ". */
static void check_location(const char *m, const cJSON *doc)
{
	CHECK(m[0] == '/');
	for (const char *p = strstr(m, ": "); p; p = strstr(p + 1, ": "))
		if (resolves(doc, m, (size_t)(p - m)))
			return;
	CHECK(strlen(m) >= ERRCAP - 4);
}

/* ---- compile ------------------------------------------------------------------------ */

typedef struct result {
	int rc;
	msg_t m;
} result_t;

/* Compiles text (NULL: from doc) and checks what compile promises. */
static pc_schema_t *compile(const char *text, const cJSON *doc, result_t *r)
{
	pc_schema_t *s = (pc_schema_t *)1;
	msg_arm(&r->m);
	r->rc = text ? pc_schema_compile_text(text, &s, r->m.buf, ERRCAP) : pc_schema_compile(doc, &s, r->m.buf, ERRCAP);
	msg_check(&r->m, ERRCAP);
	CHECK(r->rc == 0 || r->rc == PC_EINVAL || r->rc == PC_ENOMEM);
	if (r->rc == 0) {
		CHECK(s != NULL && s != (pc_schema_t *)1);
		CHECK(r->m.buf[0] == '\0');
		return s;
	}
	CHECK(s == NULL);
	CHECK(r->m.buf[0] == '/');
	if (doc && r->rc == PC_EINVAL)
		check_location(r->m.buf, doc);
	return NULL;
}

/* The same compile without a message, then with a short buffer. */
static void compile_again(const char *text, const result_t *full, size_t cap)
{
	pc_schema_t *s = NULL;
	int rc = pc_schema_compile_text(text, &s, NULL, 0);
	CHECK(rc == full->rc);
	pc_schema_free(s);
	msg_t m;
	msg_arm(&m);
	rc = pc_schema_compile_text(text, &s, m.buf, cap);
	msg_check(&m, cap);
	CHECK(rc == full->rc);
	if (cap)
		check_prefix(m.buf, cap, full->m.buf);
	pc_schema_free(s);
}

/* ---- validate ------------------------------------------------------------------------- */

static void validate(const pc_schema_t *s, const cJSON *inst, result_t *r)
{
	msg_arm(&r->m);
	r->rc = pc_schema_validate(s, inst, r->m.buf, ERRCAP);
	msg_check(&r->m, ERRCAP);
	CHECK(r->rc == 0 || r->rc == PC_EINVAL);
	if (r->rc == 0) {
		CHECK(r->m.buf[0] == '\0');
		return;
	}
	CHECK(r->m.buf[0] != '\0');
	check_location(r->m.buf, inst);
}

/* Again, without a buffer, and with a short one: the same answer. */
static void validate_again(const pc_schema_t *s, const cJSON *inst, const result_t *first, size_t cap)
{
	result_t r;
	validate(s, inst, &r);
	CHECK(r.rc == first->rc);
	CHECK(strcmp(r.m.buf, first->m.buf) == 0);
	CHECK(pc_schema_validate(s, inst, NULL, 0) == first->rc);
	msg_t m;
	msg_arm(&m);
	CHECK(pc_schema_validate(s, inst, m.buf, cap) == first->rc);
	msg_check(&m, cap);
	if (cap)
		check_prefix(m.buf, cap, first->m.buf);
}

/* Schemas that accept everything, and one that refuses everything
 * (compiled once: they are the same for every input). */
static void baselines(const cJSON *inst)
{
	static const char *const texts[] = {"true", "{}", "{\"description\":\"x\",\"$comment\":1}", "false"};
	enum { N = sizeof(texts) / sizeof(texts[0]) };
	static pc_schema_t *schemas[N];
	for (size_t i = 0; i < N; i++) {
		if (!schemas[i]) {
			result_t c;
			schemas[i] = compile(texts[i], NULL, &c);
			CHECK(schemas[i]);
		}
		result_t v;
		validate(schemas[i], inst, &v);
		if (i + 1 < N)
			CHECK(v.rc == 0);
		else
			CHECK(v.rc == PC_EINVAL && strcmp(v.m.buf, "/: no value is allowed here") == 0);
	}
}

/* ---- schemas built around the fuzzed one ------------------------------------------------ */

static bool has_ref(const cJSON *v)
{
	for (const cJSON *c = v->child; c; c = c->next)
		if ((c->string && strcmp(c->string, "$ref") == 0) || has_ref(c))
			return true;
	return false;
}

static cJSON *dup(const cJSON *v)
{
	cJSON *d = cJSON_Duplicate(v, true);
	CHECK(d);
	return d;
}

/* {key: [items...]} or {key: item} when n == 0. Takes the items. */
static cJSON *wrap(const char *key, cJSON *const *items, size_t n)
{
	cJSON *o = cJSON_CreateObject();
	CHECK(o);
	cJSON *v = n ? cJSON_CreateArray() : items[0];
	CHECK(v);
	for (size_t i = 0; n && i < n; i++)
		CHECK(cJSON_AddItemToArray(v, items[i]));
	CHECK(cJSON_AddItemToObject(o, key, v));
	return o;
}

/* Validates inst against the wrapped schema (taken). false when it could
 * not compile for its depth, or a limit made the answer moot. */
static bool wrapped(cJSON *schema, const cJSON *inst, result_t *r)
{
	result_t c;
	pc_schema_t *s = compile(NULL, schema, &c);
	if (!s) {
		/* the only reason: wrapping pushed the document past the depth cap */
		CHECK(c.rc == PC_EINVAL && strstr(c.m.buf, "nested deeper than"));
		cJSON_Delete(schema);
		return false;
	}
	validate(s, inst, r);
	pc_schema_free(s);
	cJSON_Delete(schema);
	return !has_limit_message(r->m.buf);
}

/* The message for S at "/" seen through {"k": ...} or [...]: at prefix. */
static void check_moved(const char *inner, const char *outer, const char *prefix)
{
	size_t n = strlen(prefix);
	CHECK(strncmp(outer, prefix, n) == 0);
	const char *rest = strncmp(inner, "/: ", 3) == 0 ? inner + 1 : inner;
	size_t lr = strlen(rest), lo = strlen(outer + n);
	/* both may be cut by the buffer */
	CHECK(memcmp(outer + n, rest, lr < lo ? lr : lo) == 0);
}

static void metamorphic(const cJSON *doc, const cJSON *inst, const result_t *base)
{
	if (has_ref(doc) || has_limit_message(base->m.buf))
		return; /* $refs point into the root document, which wrapping moves */
	bool ok = base->rc == 0;
	result_t r;

	cJSON *one = dup(doc);
	if (wrapped(wrap("allOf", &one, 1), inst, &r))
		CHECK(r.rc == base->rc && strcmp(r.m.buf, base->m.buf) == 0);

	if (wrapped(wrap("not", (cJSON *[]){dup(doc)}, 0), inst, &r))
		CHECK((r.rc == 0) == !ok);

	cJSON *alt[2] = {cJSON_CreateFalse(), dup(doc)};
	CHECK(alt[0]);
	if (wrapped(wrap("anyOf", alt, 2), inst, &r))
		CHECK(r.rc == base->rc);

	cJSON *twice[2] = {dup(doc), dup(doc)};
	if (wrapped(wrap("oneOf", twice, 2), inst, &r))
		CHECK(r.rc == PC_EINVAL);

	cJSON *cond = wrap("if", (cJSON *[]){dup(doc)}, 0);
	CHECK(cJSON_AddTrueToObject(cond, "then") && cJSON_AddFalseToObject(cond, "else"));
	if (wrapped(cond, inst, &r))
		CHECK(r.rc == base->rc);

	/* one level down in the instance: the message moves with it */
	cJSON *props = wrap("properties", (cJSON *[]){wrap("k", (cJSON *[]){dup(doc)}, 0)}, 0);
	cJSON *obj = cJSON_CreateObject();
	CHECK(obj && cJSON_AddItemToObject(obj, "k", dup(inst)));
	if (wrapped(props, obj, &r)) {
		CHECK(r.rc == base->rc);
		if (!ok)
			check_moved(base->m.buf, r.m.buf, "/k");
	}
	cJSON_Delete(obj);

	cJSON *arr = cJSON_CreateArray();
	CHECK(arr && cJSON_AddItemToArray(arr, dup(inst)) && cJSON_AddItemToArray(arr, dup(inst)));
	if (wrapped(wrap("items", (cJSON *[]){dup(doc)}, 0), arr, &r)) {
		CHECK(r.rc == base->rc);
		if (!ok)
			check_moved(base->m.buf, r.m.buf, "/0");
	}
	cJSON_Delete(arr);
}

/* ---- schemas built from the instance ------------------------------------------------------ */

static bool has_duplicate_keys(const cJSON *v)
{
	for (const cJSON *c = v->child; c; c = c->next) {
		if (has_duplicate_keys(c))
			return true;
		for (const cJSON *d = c->next; d && cJSON_IsObject(v); d = d->next)
			if (strcmp(c->string ? c->string : "", d->string ? d->string : "") == 0)
				return true;
	}
	return false;
}

/* Code points of valid UTF-8, or -1. */
static long code_points(const char *str)
{
	const unsigned char *s = (const unsigned char *)str;
	long n = 0;
	while (*s) {
		size_t k = *s < 0x80 ? 0 : (*s & 0xE0) == 0xC0 ? 1 : (*s & 0xF0) == 0xE0 ? 2 : (*s & 0xF8) == 0xF0 ? 3 : 9;
		if (k == 9)
			return -1;
		for (size_t j = 1; j <= k; j++)
			if ((s[j] & 0xC0) != 0x80)
				return -1;
		s += k + 1;
		n++;
	}
	return n;
}

/* Compiles the schema (taken) and validates; -1 when it did not compile
 * for its depth or a limit was hit, else the rc. */
static int answer(cJSON *schema, const cJSON *inst)
{
	result_t r;
	if (!wrapped(schema, inst, &r))
		return -1;
	return r.rc;
}

/* "type" against an independent reading of the instance's type. */
static void check_types(const cJSON *inst)
{
	static const char *const names[] = {"null", "boolean", "integer", "number", "string", "array", "object"};
	enum { N = sizeof(names) / sizeof(names[0]) };
	static pc_schema_t *schemas[N];
	double d = cJSON_IsNumber(inst) ? inst->valuedouble : 0;
	bool want[N] = {
		cJSON_IsNull(inst), cJSON_IsBool(inst), cJSON_IsNumber(inst) && (isinf(d) || d == floor(d)),
		cJSON_IsNumber(inst), cJSON_IsString(inst), cJSON_IsArray(inst), cJSON_IsObject(inst),
	};
	for (size_t i = 0; i < N; i++) {
		if (!schemas[i]) {
			char text[64];
			snprintf(text, sizeof(text), "{\"type\":\"%s\"}", names[i]);
			result_t c;
			schemas[i] = compile(text, NULL, &c);
			CHECK(schemas[i]);
		}
		result_t v;
		validate(schemas[i], inst, &v);
		CHECK((v.rc == 0) == want[i]);
	}
}

/* Every value equals itself: const, enum and uniqueItems agree. Objects
 * with a name twice are left out: equality looks names up (the first
 * member wins), so such an object need not equal itself. */
static void check_self(const cJSON *inst)
{
	if (has_duplicate_keys(inst))
		return;
	int rc = answer(wrap("const", (cJSON *[]){dup(inst)}, 0), inst);
	CHECK(rc <= 0);
	cJSON *alts[2] = {cJSON_CreateString("\x01other"), dup(inst)};
	CHECK(alts[0]);
	rc = answer(wrap("enum", alts, 2), inst);
	CHECK(rc <= 0);
	cJSON *pair = cJSON_CreateArray();
	CHECK(pair && cJSON_AddItemToArray(pair, dup(inst)) && cJSON_AddItemToArray(pair, dup(inst)));
	cJSON *unique = cJSON_CreateObject();
	CHECK(unique && cJSON_AddTrueToObject(unique, "uniqueItems"));
	rc = answer(unique, pair);
	CHECK(rc == -1 || rc == PC_EINVAL);
	cJSON_Delete(pair);
}

/* min/maxLength count code points (of valid UTF-8). */
static void check_length(const cJSON *inst)
{
	long n = cJSON_IsString(inst) ? code_points(inst->valuestring) : -1;
	if (n < 0)
		return;
	char text[96];
	snprintf(text, sizeof(text), "{\"minLength\":%ld,\"maxLength\":%ld}", n, n);
	CHECK(answer(cJSON_Parse(text), inst) == 0);
	snprintf(text, sizeof(text), "{\"minLength\":%ld}", n + 1);
	CHECK(answer(cJSON_Parse(text), inst) == PC_EINVAL);
	if (n > 0) {
		snprintf(text, sizeof(text), "{\"maxLength\":%ld}", n - 1);
		CHECK(answer(cJSON_Parse(text), inst) == PC_EINVAL);
	}
}

/* ---- the target ---------------------------------------------------------------------------- */

static char *text_of(const uint8_t *p, size_t n)
{
	char *s = malloc(n + 1);
	CHECK(s);
	memcpy(s, p, n);
	s[n] = '\0';
	return s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	size_t cap = data[0];
	const uint8_t *rest = data + 1;
	size_t n = size - 1;
	const uint8_t *sep = memchr(rest, 0, n);
	char *schema = text_of(rest, sep ? (size_t)(sep - rest) : n);
	char *instance = sep ? text_of(sep + 1, n - (size_t)(sep + 1 - rest)) : NULL;

	result_t c;
	cJSON *doc = cJSON_Parse(schema);
	pc_schema_t *s = compile(schema, NULL, &c);
	if (c.rc == PC_EINVAL && doc)
		check_location(c.m.buf, doc);
	CHECK(doc || (c.rc == PC_EINVAL && strcmp(c.m.buf, "/: not valid JSON") == 0));
	compile_again(schema, &c, cap);

	cJSON *inst = cJSON_Parse(instance ? instance : schema);
	if (s && inst) {
		result_t v;
		validate(s, inst, &v);
		validate_again(s, inst, &v, cap);
		baselines(inst);
		check_types(inst);
		check_self(inst);
		check_length(inst);
		metamorphic(doc, inst, &v);
	}
	cJSON_Delete(inst);
	cJSON_Delete(doc);
	pc_schema_free(s);
	free(schema);
	free(instance);
	return 0;
}
