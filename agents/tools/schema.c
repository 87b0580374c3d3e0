/*
 * The JSON-Schema validator of the tool layer (schema.h).
 *
 * Compile walks a private copy of the schema document once and builds one
 * node per schema location, with every keyword turned into a field (a
 * flag, a number, a list of child nodes, a compiled regex). Each location
 * is compiled at most once (a map from document location to node), so
 * $refs share nodes and recursive schemas become cycles in the node graph.
 * References are resolved after the structural pass, from a work list, so
 * compile never recurses deeper than the document itself.
 *
 * Validate is a recursive walk over (node, instance) that stops at the
 * first failure. It runs twice when it fails and a message is wanted: a
 * fast pass that only answers, then a pass that writes the message where
 * the failure is found. Between alternatives (anyOf, oneOf) the second pass
 * first probes every branch without writing, then reruns the one that got
 * furthest into the instance so that its message is the one reported.
 */
#include "../../io/buf.h"
#include "schema.h"
#include "schema_regex.h"

#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* ---- buffers --------------------------------------------------------------- */

/* A fixed buffer that truncates (the caller's err). */
typedef struct wbuf {
	char *p;
	size_t cap, len;
} wbuf_t;

static void wb_reset(wbuf_t *w)
{
	w->len = 0;
	if (w->p && w->cap)
		w->p[0] = '\0';
}

static void wb_putn(wbuf_t *w, const char *s, size_t n)
{
	if (!w->p || w->cap == 0)
		return;
	size_t room = w->cap - 1 - w->len;
	if (n > room)
		n = room;
	memcpy(w->p + w->len, s, n);
	w->len += n;
	w->p[w->len] = '\0';
}

static void wb_puts(wbuf_t *w, const char *s)
{
	wb_putn(w, s, strlen(s));
}

static void wb_vprintf(wbuf_t *w, const char *fmt, va_list ap)
{
	if (!w->p || w->cap == 0)
		return;
	size_t room = w->cap - w->len;
	int n = vsnprintf(w->p + w->len, room, fmt, ap);
	if (n > 0)
		w->len += (size_t)n < room ? (size_t)n : room - 1;
}

static void wb_printf(wbuf_t *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void wb_printf(wbuf_t *w, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	wb_vprintf(w, fmt, ap);
	va_end(ap);
}

/* A full buffer may end inside a UTF-8 sequence: drop the partial one. */
static void wb_finish(wbuf_t *w)
{
	if (!w->p || w->cap == 0 || w->len + 1 < w->cap)
		return;
	size_t i = w->len;
	while (i > 0 && ((unsigned char)w->p[i - 1] & 0xC0) == 0x80)
		i--;
	if (i == 0)
		return;
	unsigned char lead = (unsigned char)w->p[i - 1];
	size_t want = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
	if (w->len - (i - 1) < want) {
		w->len = i - 1;
		w->p[w->len] = '\0';
	}
}

/* s as a JSON string literal. */
static void wb_quote(wbuf_t *w, const char *s)
{
	wb_putn(w, "\"", 1);
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (*p == '"' || *p == '\\') {
			char e[2] = {'\\', (char)*p};
			wb_putn(w, e, 2);
		} else if (*p == '\n') {
			wb_puts(w, "\\n");
		} else if (*p == '\t') {
			wb_puts(w, "\\t");
		} else if (*p < 0x20) {
			wb_printf(w, "\\u%04x", *p);
		} else {
			wb_putn(w, (const char *)p, 1);
		}
	}
	wb_putn(w, "\"", 1);
}

/* The shortest text that reads back as d. */
static void fmt_num(double d, char *buf, size_t n)
{
	if (isnan(d)) {
		snprintf(buf, n, "NaN");
		return;
	}
	if (isinf(d)) {
		snprintf(buf, n, d > 0 ? "Infinity" : "-Infinity");
		return;
	}
	if (d == floor(d) && fabs(d) < 1e15) {
		snprintf(buf, n, "%.0f", d == 0 ? 0.0 : d);
		return;
	}
	for (int prec = 1; prec <= 17; prec++) {
		snprintf(buf, n, "%.*g", prec, d);
		if (strtod(buf, NULL) == d)
			return;
	}
}

/* ---- JSON helpers -------------------------------------------------------------- */

enum {
	T_NULL = 1u << 0,
	T_BOOL = 1u << 1,
	T_INT = 1u << 2, /* a number with an integral value */
	T_NUM = 1u << 3, /* any number */
	T_STR = 1u << 4,
	T_ARR = 1u << 5,
	T_OBJ = 1u << 6,
};

static const struct {
	const char *name;
	uint8_t bit;
} type_names[] = {
	/* the order of "expected string or null" */
	{"string", T_STR}, {"integer", T_INT}, {"number", T_NUM}, {"boolean", T_BOOL},
	{"object", T_OBJ}, {"array", T_ARR},   {"null", T_NULL},
};

/* Infinity counts: it is what a literal too large for a double becomes. */
static bool is_integral(double d)
{
	return isinf(d) || (isfinite(d) && d == floor(d));
}

static int jtype(const cJSON *x)
{
	return x->type & 0xFF;
}

static uint8_t inst_types(const cJSON *x)
{
	switch (jtype(x)) {
	case cJSON_NULL: return T_NULL;
	case cJSON_False:
	case cJSON_True: return T_BOOL;
	case cJSON_Number: return (uint8_t)(T_NUM | (is_integral(x->valuedouble) ? T_INT : 0));
	case cJSON_String: return T_STR;
	case cJSON_Array: return T_ARR;
	case cJSON_Object: return T_OBJ;
	default: return 0;
	}
}

static const char *inst_type_name(const cJSON *x)
{
	switch (jtype(x)) {
	case cJSON_NULL: return "null";
	case cJSON_False:
	case cJSON_True: return "boolean";
	case cJSON_Number: return "number";
	case cJSON_String: return "string";
	case cJSON_Array: return "array";
	case cJSON_Object: return "object";
	default: return "a value that is not JSON";
	}
}

static const char *str_of(const cJSON *x)
{
	return x->valuestring ? x->valuestring : "";
}

static const char *key_of(const cJSON *m)
{
	return m->string ? m->string : "";
}

/* The first member named `name`. */
static const cJSON *member(const cJSON *obj, const char *name)
{
	for (const cJSON *m = obj->child; m; m = m->next)
		if (strcmp(key_of(m), name) == 0)
			return m;
	return NULL;
}

static size_t count_children(const cJSON *x)
{
	size_t n = 0;
	for (const cJSON *c = x->child; c; c = c->next)
		n++;
	return n;
}

/* Code points, not bytes: count every byte that does not continue a sequence. */
static size_t count_code_points(const char *s)
{
	size_t n = 0;
	for (const unsigned char *p = (const unsigned char *)s; *p; p++)
		n += (*p & 0xC0) != 0x80;
	return n;
}

/* True when the document nests no deeper than the cap (bounded recursion). */
static bool depth_ok(const cJSON *x, unsigned depth)
{
	if (depth > PC_SCHEMA_MAX_DEPTH)
		return false;
	for (const cJSON *c = x->child; c; c = c->next)
		if (!depth_ok(c, depth + 1))
			return false;
	return true;
}

/* ---- compiled form -------------------------------------------------------- */

/* Keyword flags for the scalar keywords (the rest are non-NULL fields). */
enum {
	K_TYPE = 1u << 0,
	K_ENUM = 1u << 1,
	K_CONST = 1u << 2,
	K_MINIMUM = 1u << 3,
	K_MAXIMUM = 1u << 4,
	K_EXMIN = 1u << 5,
	K_EXMAX = 1u << 6,
	K_MULTIPLE = 1u << 7,
	K_MINLEN = 1u << 8,
	K_MAXLEN = 1u << 9,
	K_MINITEMS = 1u << 10,
	K_MAXITEMS = 1u << 11,
	K_UNIQUE = 1u << 12,
	K_MINPROPS = 1u << 13,
	K_MAXPROPS = 1u << 14,
};
#define K_NUMERIC (K_MINIMUM | K_MAXIMUM | K_EXMIN | K_EXMAX | K_MULTIPLE)

typedef struct node node_t;

typedef struct node_list {
	node_t **v;
	size_t n;
} node_list_t;

typedef struct prop {
	const char *name; /* borrowed from the schema's copy */
	node_t *schema;
} prop_t;

typedef struct rprop {
	pcre2_code *re;
	const char *src;
	node_t *schema;
} rprop_t;

typedef struct dep {
	const char *name;
	const char **required; /* the array form */
	size_t nrequired;
	node_t *schema;        /* the schema form */
} dep_t;

struct node {
	uint32_t has; /* K_* */
	uint32_t index; /* in pc_schema.nodes */
	uint8_t types;
	bool is_bool, bool_value;
	node_t *ref; /* set: every sibling keyword is ignored (draft 7) */
	const cJSON *enum_values, *const_value;
	double minimum, maximum, ex_minimum, ex_maximum, multiple_of;
	double min_length, max_length, min_items, max_items, min_props, max_props;
	pcre2_code *pattern;
	const char *pattern_src;
	prop_t *props; /* sorted by name */
	size_t nprops;
	const cJSON *props_json; /* the same, in the schema's order (for messages) */
	const char **required;
	size_t nrequired;
	rprop_t *rprops;
	size_t nrprops;
	node_t *additional_props, *property_names;
	dep_t *deps;
	size_t ndeps;
	node_t *items; /* one schema for every item */
	node_list_t tuple; /* items as an array (has_tuple) */
	bool has_tuple;
	node_t *additional_items, *contains;
	node_list_t all_of, any_of, one_of;
	node_t *not_schema, *if_schema, *then_schema, *else_schema;
	uint64_t seen; /* keywords met while compiling (duplicates are refused) */
};

struct pc_schema {
	cJSON *doc; /* the copy every node borrows from */
	node_t *root;
	node_t **nodes;
	size_t nnodes, cap;
	pcre2_match_context *match; /* the limits; NULL until a regex needs it */
};

static void node_free(node_t *n)
{
	pcre2_code_free(n->pattern);
	free(n->props);
	free(n->required);
	for (size_t i = 0; i < n->nrprops; i++)
		pcre2_code_free(n->rprops[i].re);
	free(n->rprops);
	for (size_t i = 0; i < n->ndeps; i++)
		free(n->deps[i].required);
	free(n->deps);
	free(n->tuple.v);
	free(n->all_of.v);
	free(n->any_of.v);
	free(n->one_of.v);
	free(n);
}

void pc_schema_free(pc_schema_t *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->nnodes; i++)
		node_free(s->nodes[i]);
	free(s->nodes);
	cJSON_Delete(s->doc);
	pcre2_match_context_free(s->match);
	free(s);
}

/* ---- compile ------------------------------------------------------------------ */

typedef struct pending_ref {
	node_t *node;
	const char *ref;
	char *path; /* of the $ref keyword */
} pending_ref_t;

typedef struct cctx {
	pc_schema_t *s;
	/* document location -> node, open addressing */
	const cJSON **keys;
	node_t **vals;
	size_t map_cap;
	char **paths; /* paths[i]: where s->nodes[i] sits */
	pending_ref_t *refs;
	size_t nrefs, refs_cap;
	pc__buf_t path; /* the JSON pointer being compiled */
	wbuf_t err;
	int rc;
} cctx_t;

static void cfail(cctx_t *c, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void cfail(cctx_t *c, int rc, const char *fmt, ...)
{
	if (c->rc)
		return;
	c->rc = rc;
	wb_reset(&c->err);
	wb_puts(&c->err, c->path.len ? c->path.p : "/");
	wb_puts(&c->err, ": ");
	va_list ap;
	va_start(ap, fmt);
	wb_vprintf(&c->err, fmt, ap);
	va_end(ap);
	wb_finish(&c->err);
}

static void oom(cctx_t *c)
{
	cfail(c, PC_ENOMEM, "out of memory");
}

/* Appends one pointer segment (escaped) and returns the length to pop to. */
static size_t path_push(cctx_t *c, const char *key)
{
	size_t mark = c->path.len;
	pc__buf_append_char(&c->path, '/');
	for (const char *k = key; *k; k++) {
		if (*k == '~')
			pc__buf_append_str(&c->path, "~0");
		else if (*k == '/')
			pc__buf_append_str(&c->path, "~1");
		else
			pc__buf_append_char(&c->path, *k);
	}
	if (c->path.err)
		oom(c);
	return mark;
}

static size_t path_push_index(cctx_t *c, size_t i)
{
	char buf[24];
	snprintf(buf, sizeof(buf), "%zu", i);
	return path_push(c, buf);
}

static void path_pop(cctx_t *c, size_t mark)
{
	if (c->path.p && mark <= c->path.len) {
		c->path.len = mark;
		c->path.p[mark] = '\0';
	}
}

static size_t map_slot(const cctx_t *c, const cJSON *key)
{
	uintptr_t h = (uintptr_t)key;
	h ^= h >> 17;
	h *= (uintptr_t)0x9E3779B97F4A7C15ull;
	size_t i = (size_t)(h >> 7) & (c->map_cap - 1);
	while (c->keys[i] && c->keys[i] != key)
		i = (i + 1) & (c->map_cap - 1);
	return i;
}

static bool map_grow(cctx_t *c)
{
	size_t old_cap = c->map_cap;
	const cJSON **old_keys = c->keys;
	node_t **old_vals = c->vals;
	size_t cap = old_cap ? old_cap * 2 : 64;
	c->keys = calloc(cap, sizeof(*c->keys));
	c->vals = calloc(cap, sizeof(*c->vals));
	if (!c->keys || !c->vals) {
		free(c->keys);
		free(c->vals);
		c->keys = old_keys;
		c->vals = old_vals;
		return false;
	}
	c->map_cap = cap;
	for (size_t i = 0; i < old_cap; i++) {
		if (old_keys[i]) {
			size_t j = map_slot(c, old_keys[i]);
			c->keys[j] = old_keys[i];
			c->vals[j] = old_vals[i];
		}
	}
	free(old_keys);
	free(old_vals);
	return true;
}

/* A new node for `json`, registered everywhere; NULL (with c->rc) on OOM. */
static node_t *node_new(cctx_t *c, const cJSON *json)
{
	pc_schema_t *s = c->s;
	if ((s->nnodes + 1) * 2 > c->map_cap && !map_grow(c))
		goto fail;
	if (s->nnodes == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 32;
		node_t **nodes = realloc(s->nodes, cap * sizeof(*nodes));
		if (!nodes)
			goto fail;
		s->nodes = nodes;
		char **paths = realloc(c->paths, cap * sizeof(*paths));
		if (!paths)
			goto fail;
		c->paths = paths;
		s->cap = cap;
	}
	node_t *n = calloc(1, sizeof(*n));
	char *path = strdup(c->path.p ? c->path.p : "");
	if (!n || !path) {
		free(n);
		free(path);
		goto fail;
	}
	n->index = (uint32_t)s->nnodes;
	c->paths[s->nnodes] = path;
	s->nodes[s->nnodes++] = n;
	size_t slot = map_slot(c, json);
	c->keys[slot] = json;
	c->vals[slot] = n;
	return n;
fail:
	oom(c);
	return NULL;
}

static node_t *compile_at(cctx_t *c, const cJSON *json);

/* A subschema one segment below the current path. */
static node_t *compile_child(cctx_t *c, const cJSON *json, const char *key, size_t index)
{
	size_t mark = key ? path_push(c, key) : path_push_index(c, index);
	node_t *n = c->rc ? NULL : compile_at(c, json);
	path_pop(c, mark);
	return n;
}

static bool is_schema(const cJSON *v)
{
	return cJSON_IsObject(v) || cJSON_IsBool(v);
}

/* A keyword whose value is one schema, at the keyword's own path. */
static node_t *compile_schema_value(cctx_t *c, const cJSON *v)
{
	if (!is_schema(v)) {
		cfail(c, PC_EINVAL, "must be a schema (an object or a boolean), got %s", inst_type_name(v));
		return NULL;
	}
	return compile_at(c, v);
}

static void compile_list(cctx_t *c, const cJSON *v, node_list_t *l)
{
	if (!cJSON_IsArray(v) || !v->child) {
		cfail(c, PC_EINVAL, "must be a non-empty array of schemas");
		return;
	}
	size_t n = count_children(v);
	l->v = calloc(n, sizeof(*l->v));
	if (!l->v) {
		oom(c);
		return;
	}
	size_t i = 0;
	for (const cJSON *e = v->child; e && !c->rc; e = e->next, i++) {
		if (!is_schema(e)) {
			size_t mark = path_push_index(c, i);
			cfail(c, PC_EINVAL, "must be a schema (an object or a boolean), got %s", inst_type_name(e));
			path_pop(c, mark);
			return;
		}
		l->v[i] = compile_child(c, e, NULL, i);
		l->n = i + 1;
	}
}

/* A non-negative integer (a count). */
static bool get_count(cctx_t *c, const cJSON *v, double *out)
{
	if (!cJSON_IsNumber(v) || !is_integral(v->valuedouble) || v->valuedouble < 0) {
		cfail(c, PC_EINVAL, "must be a non-negative integer");
		return false;
	}
	*out = v->valuedouble;
	return true;
}

static bool get_number(cctx_t *c, const cJSON *v, double *out)
{
	if (!cJSON_IsNumber(v) || isnan(v->valuedouble)) {
		cfail(c, PC_EINVAL, "must be a number");
		return false;
	}
	*out = v->valuedouble;
	return true;
}

/* A string array (required, dependencies): borrowed pointers. */
static const char **get_names(cctx_t *c, const cJSON *v, size_t *n)
{
	*n = 0;
	if (!cJSON_IsArray(v)) {
		cfail(c, PC_EINVAL, "must be an array of strings");
		return NULL;
	}
	size_t cnt = count_children(v);
	const char **names = calloc(cnt ? cnt : 1, sizeof(*names));
	if (!names) {
		oom(c);
		return NULL;
	}
	for (const cJSON *e = v->child; e; e = e->next) {
		if (!cJSON_IsString(e)) {
			free(names);
			cfail(c, PC_EINVAL, "must be an array of strings");
			return NULL;
		}
		names[(*n)++] = str_of(e);
	}
	return names;
}

static pcre2_code *regex_compile(cctx_t *c, const char *src)
{
	if (!c->s->match && !(c->s->match = pc__schema_rx_limits())) {
		oom(c);
		return NULL;
	}
	char why[320];
	int rc = 0;
	pcre2_code *re = pc__schema_rx_compile(src, &rc, why, sizeof(why));
	if (!re && rc == PC_ENOMEM)
		oom(c);
	else if (!re)
		cfail(c, PC_EINVAL, "%s", why);
	return re;
}

/* ---- keywords ---- */

static void kw_type(cctx_t *c, node_t *n, const cJSON *v)
{
	const cJSON *one = v;
	if (cJSON_IsArray(v)) {
		if (!v->child) {
			cfail(c, PC_EINVAL, "must not be an empty array");
			return;
		}
		one = v->child;
	}
	for (; one && !c->rc; one = cJSON_IsArray(v) ? one->next : NULL) {
		if (!cJSON_IsString(one)) {
			cfail(c, PC_EINVAL, "must be a type name or an array of type names");
			return;
		}
		uint8_t bit = 0;
		for (size_t i = 0; i < sizeof(type_names) / sizeof(type_names[0]); i++)
			if (strcmp(str_of(one), type_names[i].name) == 0)
				bit = type_names[i].bit;
		if (!bit) {
			cfail(c, PC_EINVAL, "unknown type \"%s\"", str_of(one));
			return;
		}
		n->types |= bit;
	}
	n->has |= K_TYPE;
}

static void kw_enum(cctx_t *c, node_t *n, const cJSON *v)
{
	if (!cJSON_IsArray(v)) {
		cfail(c, PC_EINVAL, "must be an array");
		return;
	}
	n->enum_values = v;
	n->has |= K_ENUM;
}

static void kw_const(cctx_t *c, node_t *n, const cJSON *v)
{
	(void)c;
	n->const_value = v;
	n->has |= K_CONST;
}

static void kw_minimum(cctx_t *c, node_t *n, const cJSON *v)
{
	if (get_number(c, v, &n->minimum))
		n->has |= K_MINIMUM;
}

static void kw_maximum(cctx_t *c, node_t *n, const cJSON *v)
{
	if (get_number(c, v, &n->maximum))
		n->has |= K_MAXIMUM;
}

static void kw_exclusive(cctx_t *c, const cJSON *v, double *out, node_t *n, uint32_t flag)
{
	if (cJSON_IsBool(v)) {
		cfail(c, PC_EINVAL, "must be a number (draft 7); the boolean form is draft 4");
		return;
	}
	if (get_number(c, v, out))
		n->has |= flag;
}

static void kw_exmin(cctx_t *c, node_t *n, const cJSON *v)
{
	kw_exclusive(c, v, &n->ex_minimum, n, K_EXMIN);
}

static void kw_exmax(cctx_t *c, node_t *n, const cJSON *v)
{
	kw_exclusive(c, v, &n->ex_maximum, n, K_EXMAX);
}

static void kw_multiple(cctx_t *c, node_t *n, const cJSON *v)
{
	if (!cJSON_IsNumber(v) || !(v->valuedouble > 0) || isinf(v->valuedouble)) {
		cfail(c, PC_EINVAL, "must be a number greater than 0");
		return;
	}
	n->multiple_of = v->valuedouble;
	n->has |= K_MULTIPLE;
}

static void kw_minlen(cctx_t *c, node_t *n, const cJSON *v)
{
	if (get_count(c, v, &n->min_length))
		n->has |= K_MINLEN;
}

static void kw_maxlen(cctx_t *c, node_t *n, const cJSON *v)
{
	if (get_count(c, v, &n->max_length))
		n->has |= K_MAXLEN;
}

static void kw_pattern(cctx_t *c, node_t *n, const cJSON *v)
{
	if (!cJSON_IsString(v)) {
		cfail(c, PC_EINVAL, "must be a string");
		return;
	}
	n->pattern_src = str_of(v);
	n->pattern = regex_compile(c, n->pattern_src);
}

static void kw_items(cctx_t *c, node_t *n, const cJSON *v)
{
	if (!cJSON_IsArray(v)) {
		n->items = compile_schema_value(c, v);
		return;
	}
	n->has_tuple = true;
	if (v->child) /* empty, only additionalItems constrains the items */
		compile_list(c, v, &n->tuple);
}

static void kw_additional_items(cctx_t *c, node_t *n, const cJSON *v)
{
	n->additional_items = compile_schema_value(c, v);
}

static void kw_min_items(cctx_t *c, node_t *n, const cJSON *v)
{
	if (get_count(c, v, &n->min_items))
		n->has |= K_MINITEMS;
}

static void kw_max_items(cctx_t *c, node_t *n, const cJSON *v)
{
	if (get_count(c, v, &n->max_items))
		n->has |= K_MAXITEMS;
}

static void kw_unique(cctx_t *c, node_t *n, const cJSON *v)
{
	if (!cJSON_IsBool(v)) {
		cfail(c, PC_EINVAL, "must be a boolean");
		return;
	}
	if (cJSON_IsTrue(v))
		n->has |= K_UNIQUE;
}

static void kw_contains(cctx_t *c, node_t *n, const cJSON *v)
{
	n->contains = compile_schema_value(c, v);
}

static int prop_cmp(const void *a, const void *b)
{
	return strcmp(((const prop_t *)a)->name, ((const prop_t *)b)->name);
}

static void kw_properties(cctx_t *c, node_t *n, const cJSON *v)
{
	if (!cJSON_IsObject(v)) {
		cfail(c, PC_EINVAL, "must be an object of schemas");
		return;
	}
	size_t cnt = count_children(v);
	n->props = calloc(cnt ? cnt : 1, sizeof(*n->props));
	if (!n->props) {
		oom(c);
		return;
	}
	for (const cJSON *m = v->child; m && !c->rc; m = m->next) {
		if (!is_schema(m)) {
			size_t mark = path_push(c, key_of(m));
			cfail(c, PC_EINVAL, "must be a schema (an object or a boolean), got %s", inst_type_name(m));
			path_pop(c, mark);
			return;
		}
		prop_t *p = &n->props[n->nprops++];
		p->name = key_of(m);
		p->schema = compile_child(c, m, key_of(m), 0);
	}
	qsort(n->props, n->nprops, sizeof(*n->props), prop_cmp);
	n->props_json = v;
}

static void kw_required(cctx_t *c, node_t *n, const cJSON *v)
{
	n->required = get_names(c, v, &n->nrequired);
}

static void kw_additional_props(cctx_t *c, node_t *n, const cJSON *v)
{
	n->additional_props = compile_schema_value(c, v);
}

static void kw_pattern_props(cctx_t *c, node_t *n, const cJSON *v)
{
	if (!cJSON_IsObject(v)) {
		cfail(c, PC_EINVAL, "must be an object of schemas");
		return;
	}
	size_t cnt = count_children(v);
	n->rprops = calloc(cnt ? cnt : 1, sizeof(*n->rprops));
	if (!n->rprops) {
		oom(c);
		return;
	}
	for (const cJSON *m = v->child; m && !c->rc; m = m->next) {
		size_t mark = path_push(c, key_of(m));
		rprop_t *p = &n->rprops[n->nrprops];
		if (!is_schema(m))
			cfail(c, PC_EINVAL, "must be a schema (an object or a boolean), got %s", inst_type_name(m));
		else
			p->re = regex_compile(c, p->src = key_of(m));
		if (p->re)
			n->nrprops++;
		if (!c->rc)
			p->schema = compile_at(c, m);
		path_pop(c, mark);
	}
}

static void kw_min_props(cctx_t *c, node_t *n, const cJSON *v)
{
	if (get_count(c, v, &n->min_props))
		n->has |= K_MINPROPS;
}

static void kw_max_props(cctx_t *c, node_t *n, const cJSON *v)
{
	if (get_count(c, v, &n->max_props))
		n->has |= K_MAXPROPS;
}

static void kw_property_names(cctx_t *c, node_t *n, const cJSON *v)
{
	n->property_names = compile_schema_value(c, v);
}

static void kw_dependencies(cctx_t *c, node_t *n, const cJSON *v)
{
	if (!cJSON_IsObject(v)) {
		cfail(c, PC_EINVAL, "must be an object");
		return;
	}
	size_t cnt = count_children(v);
	n->deps = calloc(cnt ? cnt : 1, sizeof(*n->deps));
	if (!n->deps) {
		oom(c);
		return;
	}
	for (const cJSON *m = v->child; m && !c->rc; m = m->next) {
		dep_t *d = &n->deps[n->ndeps++];
		d->name = key_of(m);
		size_t mark = path_push(c, key_of(m));
		if (cJSON_IsArray(m))
			d->required = get_names(c, m, &d->nrequired);
		else if (is_schema(m))
			d->schema = compile_at(c, m);
		else
			cfail(c, PC_EINVAL, "must be an array of property names or a schema");
		path_pop(c, mark);
	}
}

static void kw_all_of(cctx_t *c, node_t *n, const cJSON *v)
{
	compile_list(c, v, &n->all_of);
}

static void kw_any_of(cctx_t *c, node_t *n, const cJSON *v)
{
	compile_list(c, v, &n->any_of);
}

static void kw_one_of(cctx_t *c, node_t *n, const cJSON *v)
{
	compile_list(c, v, &n->one_of);
}

static void kw_not(cctx_t *c, node_t *n, const cJSON *v)
{
	n->not_schema = compile_schema_value(c, v);
}

static void kw_if(cctx_t *c, node_t *n, const cJSON *v)
{
	n->if_schema = compile_schema_value(c, v);
}

static void kw_then(cctx_t *c, node_t *n, const cJSON *v)
{
	n->then_schema = compile_schema_value(c, v);
}

static void kw_else(cctx_t *c, node_t *n, const cJSON *v)
{
	n->else_schema = compile_schema_value(c, v);
}

/* Compiled only so that a malformed definition is reported; refs reach them. */
static void kw_definitions(cctx_t *c, node_t *n, const cJSON *v)
{
	(void)n;
	if (!cJSON_IsObject(v)) {
		cfail(c, PC_EINVAL, "must be an object of schemas");
		return;
	}
	for (const cJSON *m = v->child; m && !c->rc; m = m->next) {
		size_t mark = path_push(c, key_of(m));
		if (is_schema(m))
			compile_at(c, m);
		else
			cfail(c, PC_EINVAL, "must be a schema (an object or a boolean), got %s", inst_type_name(m));
		path_pop(c, mark);
	}
}

static const struct keyword {
	const char *name;
	void (*fn)(cctx_t *c, node_t *n, const cJSON *v);
} keywords[] = {
	{"type", kw_type},
	{"enum", kw_enum},
	{"const", kw_const},
	{"minimum", kw_minimum},
	{"maximum", kw_maximum},
	{"exclusiveMinimum", kw_exmin},
	{"exclusiveMaximum", kw_exmax},
	{"multipleOf", kw_multiple},
	{"minLength", kw_minlen},
	{"maxLength", kw_maxlen},
	{"pattern", kw_pattern},
	{"items", kw_items},
	{"additionalItems", kw_additional_items},
	{"minItems", kw_min_items},
	{"maxItems", kw_max_items},
	{"uniqueItems", kw_unique},
	{"contains", kw_contains},
	{"properties", kw_properties},
	{"required", kw_required},
	{"additionalProperties", kw_additional_props},
	{"patternProperties", kw_pattern_props},
	{"minProperties", kw_min_props},
	{"maxProperties", kw_max_props},
	{"propertyNames", kw_property_names},
	{"dependencies", kw_dependencies},
	{"allOf", kw_all_of},
	{"anyOf", kw_any_of},
	{"oneOf", kw_one_of},
	{"not", kw_not},
	{"if", kw_if},
	{"then", kw_then},
	{"else", kw_else},
	{"definitions", kw_definitions},
};

static void compile_ref(cctx_t *c, node_t *n, const cJSON *v)
{
	size_t mark = path_push(c, "$ref");
	if (!cJSON_IsString(v)) {
		cfail(c, PC_EINVAL, "must be a string");
	} else if (str_of(v)[0] != '#') {
		cfail(c, PC_EINVAL, "unsupported remote $ref \"%s\" (only local references such as "
				    "\"#/definitions/name\" are supported)", str_of(v));
	} else if (c->nrefs == c->refs_cap) {
		size_t cap = c->refs_cap ? c->refs_cap * 2 : 8;
		pending_ref_t *refs = realloc(c->refs, cap * sizeof(*refs));
		if (!refs)
			oom(c);
		else {
			c->refs = refs;
			c->refs_cap = cap;
		}
	}
	if (!c->rc) {
		char *path = strdup(c->path.p);
		if (!path)
			oom(c);
		else
			c->refs[c->nrefs++] = (pending_ref_t){n, str_of(v), path};
	}
	path_pop(c, mark);
}

static node_t *compile_at(cctx_t *c, const cJSON *json)
{
	size_t slot = c->map_cap ? map_slot(c, json) : 0;
	if (c->map_cap && c->keys[slot])
		return c->vals[slot];
	node_t *n = node_new(c, json);
	if (!n)
		return NULL;
	if (cJSON_IsBool(json)) {
		n->is_bool = true;
		n->bool_value = cJSON_IsTrue(json);
		return n;
	}
	if (!cJSON_IsObject(json)) {
		cfail(c, PC_EINVAL, "a schema must be an object or a boolean, got %s", inst_type_name(json));
		return NULL;
	}
	const cJSON *ref = member(json, "$ref");
	if (ref) { /* draft 7: a $ref replaces its siblings */
		compile_ref(c, n, ref);
		return c->rc ? NULL : n;
	}
	for (const cJSON *m = json->child; m && !c->rc; m = m->next) {
		for (size_t k = 0; k < sizeof(keywords) / sizeof(keywords[0]); k++) {
			if (strcmp(key_of(m), keywords[k].name) != 0)
				continue;
			size_t mark = path_push(c, key_of(m));
			if (n->seen & (1ull << k))
				cfail(c, PC_EINVAL, "the keyword appears twice");
			n->seen |= 1ull << k;
			if (!c->rc)
				keywords[k].fn(c, n, m);
			path_pop(c, mark);
			break;
		}
	}
	return c->rc ? NULL : n;
}

/* Percent-decodes a URI fragment: false for a malformed escape or a NUL. */
static bool percent_decode(const char *s, pc__buf_t *out)
{
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		long v = *p;
		if (*p == '%') {
			v = pc__schema_hex_n((const char *)p + 1, 2);
			if (v <= 0)
				return false;
			p += 2;
		}
		pc__buf_append_char(out, (char)v);
	}
	return true;
}

/* The location a JSON pointer names in doc: 0 and *out, PC_EINVAL with
 * *why, or PC_ENOMEM. */
static int resolve_pointer(const cJSON *doc, const char *ptr, const cJSON **out, const char **why)
{
	const cJSON *at = doc;
	const char *p = ptr;
	int rc = PC_EINVAL;
	if (*p && *p != '/') {
		*why = "only JSON pointers are supported, not anchors";
		return rc;
	}
	pc__buf_t seg = {0};
	while (at && *p == '/') {
		p++;
		seg.len = 0;
		for (; *p && *p != '/'; p++) {
			if (*p == '~' && (p[1] == '0' || p[1] == '1')) {
				pc__buf_append_char(&seg, p[1] == '0' ? '~' : '/');
				p++;
			} else if (*p == '~') {
				*why = "a '~' that is not ~0 or ~1";
				goto out;
			} else {
				pc__buf_append_char(&seg, *p);
			}
		}
		pc__buf_append_char(&seg, '\0'); /* also makes seg.p non-NULL for an empty segment */
		if (seg.err) {
			rc = PC_ENOMEM;
			goto out;
		}
		if (cJSON_IsObject(at)) {
			at = member(at, seg.p);
		} else if (cJSON_IsArray(at)) {
			char *end = NULL;
			unsigned long long i = strtoull(seg.p, &end, 10);
			bool digits = seg.p[0] >= '0' && seg.p[0] <= '9' && *end == '\0' &&
				      (seg.p[0] != '0' || seg.p[1] == '\0');
			at = digits && i < (unsigned long long)cJSON_GetArraySize(at) ? cJSON_GetArrayItem(at, (int)i)
									     : NULL;
		} else {
			at = NULL;
		}
	}
	if (at) {
		*out = at;
		rc = 0;
	} else {
		*why = "no such location in the schema";
	}
out:
	free(seg.p);
	return rc;
}

static void resolve_refs(cctx_t *c)
{
	for (size_t i = 0; i < c->nrefs && !c->rc; i++) {
		node_t *n = c->refs[i].node;
		const char *ref = c->refs[i].ref;
		pc__buf_t ptr = {0};
		const char *why = "a malformed percent-encoding";
		const cJSON *loc = NULL;
		int rc = percent_decode(ref + 1, &ptr) ? resolve_pointer(c->s->doc, ptr.p ? ptr.p : "", &loc, &why)
						       : PC_EINVAL;
		if (ptr.err || rc == PC_ENOMEM)
			oom(c);
		/* errors name the $ref; the target compiles at the path it names */
		path_pop(c, 0);
		pc__buf_append_str(&c->path, loc ? (ptr.p ? ptr.p : "") : c->refs[i].path);
		if (c->path.err)
			oom(c);
		if (!loc)
			cfail(c, PC_EINVAL, "unresolvable $ref \"%s\": %s", ref, why);
		else if (!is_schema(loc))
			cfail(c, PC_EINVAL, "the target of $ref \"%s\" is not a schema", ref);
		else if (!c->rc)
			n->ref = compile_at(c, loc);
		free(ptr.p);
	}
}

/* The k-th schema applied to the same instance as n, or NULL past the last. */
static node_t *inplace_child(const node_t *n, size_t k)
{
	if (n->ref)
		return k == 0 ? n->ref : NULL;
	const node_list_t *lists[] = {&n->all_of, &n->any_of, &n->one_of};
	for (size_t i = 0; i < 3; i++) {
		if (k < lists[i]->n)
			return lists[i]->v[k];
		k -= lists[i]->n;
	}
	node_t *single[] = {n->not_schema, n->if_schema, n->then_schema, n->else_schema};
	for (size_t i = 0; i < 4; i++) {
		if (k == 0 && single[i])
			return single[i];
		k -= single[i] != NULL;
	}
	for (size_t i = 0; i < n->ndeps; i++) {
		if (k == 0 && n->deps[i].schema)
			return n->deps[i].schema;
		k -= n->deps[i].schema != NULL;
	}
	return NULL;
}

/* Refuses a cycle of in-place applications ({"$ref": "#"}, or through
 * allOf and friends): validation would go round it forever. Iterative
 * depth-first search, so a long chain cannot exhaust the stack. */
static void check_cycles(cctx_t *c)
{
	size_t n = c->s->nnodes;
	uint8_t *color = calloc(n, 1);
	size_t *stack = calloc(n, sizeof(*stack));
	size_t *next = calloc(n, sizeof(*next));
	if (!color || !stack || !next) {
		oom(c);
		goto out;
	}
	for (size_t start = 0; start < n && !c->rc; start++) {
		if (color[start])
			continue;
		size_t sp = 0;
		stack[sp++] = start;
		color[start] = 1;
		next[start] = 0;
		while (sp > 0 && !c->rc) {
			size_t top = stack[sp - 1];
			node_t *child = inplace_child(c->s->nodes[top], next[top]++);
			if (!child) {
				color[top] = 2;
				sp--;
			} else if (color[child->index] == 1) {
				path_pop(c, 0);
				pc__buf_append_str(&c->path, c->paths[child->index]);
				cfail(c, PC_EINVAL, "a $ref cycle that never descends into the instance");
			} else if (color[child->index] == 0) {
				color[child->index] = 1;
				next[child->index] = 0;
				stack[sp++] = child->index;
			}
		}
	}
out:
	free(color);
	free(stack);
	free(next);
}

int pc_schema_compile(const cJSON *schema, pc_schema_t **out, char *err, size_t errlen)
{
	cctx_t c = {.err = {err, errlen, 0}};
	wb_reset(&c.err);
	if (out)
		*out = NULL;
	if (!out || !schema) {
		cfail(&c, PC_EINVAL, "no schema");
		return c.rc;
	}
	if (!depth_ok(schema, 1)) {
		cfail(&c, PC_EINVAL, "the schema is nested deeper than %u levels", PC_SCHEMA_MAX_DEPTH);
		return c.rc;
	}
	c.s = calloc(1, sizeof(*c.s));
	if (!c.s || !(c.s->doc = cJSON_Duplicate(schema, true)))
		oom(&c);
	if (!c.rc)
		c.s->root = compile_at(&c, c.s->doc);
	if (!c.rc)
		resolve_refs(&c);
	if (!c.rc)
		check_cycles(&c);
	for (size_t i = 0; c.s && i < c.s->nnodes; i++)
		free(c.paths[i]);
	for (size_t i = 0; i < c.nrefs; i++)
		free(c.refs[i].path);
	free(c.paths);
	free(c.refs);
	free(c.keys);
	free(c.vals);
	free(c.path.p);
	if (c.rc) {
		pc_schema_free(c.s);
		return c.rc;
	}
	*out = c.s;
	return 0;
}

int pc_schema_compile_text(const char *text, pc_schema_t **out, char *err, size_t errlen)
{
	cJSON *doc = text ? cJSON_Parse(text) : NULL;
	if (!doc) {
		wbuf_t w = {err, errlen, 0};
		wb_reset(&w);
		wb_puts(&w, "/: not valid JSON");
		if (out)
			*out = NULL;
		return PC_EINVAL;
	}
	int rc = pc_schema_compile(doc, out, err, errlen);
	cJSON_Delete(doc);
	return rc;
}

/* ---- validate --------------------------------------------------------------------- */

/* Where the instance being validated sits: a chain up to the root. */
typedef struct seg {
	const struct seg *up;
	const char *key; /* NULL: an array index */
	size_t index;
	uint32_t depth;
} seg_t;

typedef struct vctx {
	wbuf_t w;
	pcre2_match_context *match; /* read only: shared by every validation */
	pcre2_match_data **md; /* one per pc_schema_validate, made at the first match */
	bool msg;     /* write the message where validation fails */
	bool stopped; /* a limit was reached: the answer (and message) is final */
	uint32_t frames;
	uint64_t steps;
	/* the failure last found, to choose among alternatives */
	uint32_t fail_depth;
	bool fail_type;    /* a type mismatch at fail_depth */
	uint8_t fail_want; /* the types that were wanted */
} vctx_t;

static void put_path(wbuf_t *w, const seg_t *at)
{
	if (at->depth == 0)
		return;
	put_path(w, at->up);
	wb_putn(w, "/", 1);
	if (!at->key) {
		wb_printf(w, "%zu", at->index);
		return;
	}
	for (const char *k = at->key; *k; k++) {
		if (*k == '~')
			wb_puts(w, "~0");
		else if (*k == '/')
			wb_puts(w, "~1");
		else
			wb_putn(w, k, 1);
	}
}

/* Records a failure; true when the caller should write its message after
 * the "<path>: " this has written. */
static bool vfail(vctx_t *v, const seg_t *at, bool type_mismatch, uint8_t want)
{
	v->fail_depth = at->depth;
	v->fail_type = type_mismatch;
	v->fail_want = want;
	if (!v->msg || !v->w.p || v->w.cap == 0)
		return false;
	wb_reset(&v->w);
	put_path(&v->w, at);
	if (v->w.len == 0)
		wb_putn(&v->w, "/", 1);
	wb_puts(&v->w, ": ");
	return true;
}

/* A limit was reached: validation fails, whatever alternatives remain. */
static bool vstop(vctx_t *v, const seg_t *at, const char *what)
{
	if (!v->stopped) {
		v->stopped = true;
		bool msg = v->msg;
		v->msg = true;
		if (vfail(v, at, false, 0))
			wb_puts(&v->w, what);
		v->msg = msg;
	}
	return false;
}

static bool vnode(vctx_t *v, const node_t *n, const cJSON *x, const seg_t *at);

static bool vchild(vctx_t *v, const node_t *n, const cJSON *x, const seg_t *at, const char *key, size_t i)
{
	seg_t s = {at, key, i, at->depth + 1};
	return vnode(v, n, x, &s);
}

/* The same answer without writing a message. */
static bool vprobe(vctx_t *v, const node_t *n, const cJSON *x, const seg_t *at)
{
	bool msg = v->msg;
	v->msg = false;
	bool ok = vnode(v, n, x, at);
	v->msg = msg;
	return ok;
}

/* Deep JSON equality, numbers by value. */
static bool jequal(vctx_t *v, const cJSON *a, const cJSON *b, const seg_t *at, unsigned depth)
{
	if (++v->steps > PC_SCHEMA_MAX_STEPS)
		return vstop(v, at, "the arguments are too large to validate");
	if (depth > PC_SCHEMA_MAX_DEPTH)
		return vstop(v, at, "nested too deeply to validate");
	int ta = jtype(a), tb = jtype(b);
	if (ta != tb)
		return false;
	switch (ta) {
	case cJSON_Number: return a->valuedouble == b->valuedouble;
	case cJSON_String:
	case cJSON_Raw: return strcmp(str_of(a), str_of(b)) == 0;
	case cJSON_Array: {
		const cJSON *p = a->child, *q = b->child;
		for (; p && q; p = p->next, q = q->next)
			if (!jequal(v, p, q, at, depth + 1))
				return false;
		return !p && !q;
	}
	case cJSON_Object: {
		if (count_children(a) != count_children(b))
			return false;
		for (const cJSON *p = a->child; p; p = p->next) {
			const cJSON *q = member(b, key_of(p));
			if (!q || !jequal(v, p, q, at, depth + 1))
				return false;
		}
		return true;
	}
	default: return true; /* null, true, false */
	}
}

static void put_types(wbuf_t *w, uint8_t want)
{
	bool first = true;
	if ((want & T_NUM) && (want & T_INT))
		want &= (uint8_t)~T_INT; /* "number" already says it */
	size_t n = sizeof(type_names) / sizeof(type_names[0]), left = 0;
	for (size_t i = 0; i < n; i++)
		left += (want & type_names[i].bit) != 0;
	for (size_t i = 0; i < n; i++) {
		if (!(want & type_names[i].bit))
			continue;
		left--;
		if (!first)
			wb_puts(w, left == 0 ? " or " : ", ");
		wb_puts(w, type_names[i].name);
		first = false;
	}
}

static void put_value(wbuf_t *w, const cJSON *x)
{
	char *s = cJSON_PrintUnformatted(x);
	wb_puts(w, s ? s : "(a value)");
	free(s);
}

static void put_num(wbuf_t *w, double d)
{
	char buf[40];
	fmt_num(d, buf, sizeof(buf));
	wb_puts(w, buf);
}

static bool type_fail(vctx_t *v, const seg_t *at, uint8_t want, const cJSON *x)
{
	if (vfail(v, at, true, want)) {
		wb_puts(&v->w, "expected ");
		put_types(&v->w, want);
		wb_puts(&v->w, ", got ");
		wb_puts(&v->w, inst_type_name(x));
	}
	return false;
}

static bool venum(vctx_t *v, const node_t *n, const cJSON *x, const seg_t *at)
{
	for (const cJSON *e = n->enum_values->child; e; e = e->next) {
		if (jequal(v, e, x, at, 0))
			return true;
		if (v->stopped)
			return false;
	}
	if (vfail(v, at, false, 0)) {
		if (!n->enum_values->child)
			wb_puts(&v->w, "no value is allowed (the enum is empty)");
		else
			wb_puts(&v->w, "must be one of ");
		for (const cJSON *e = n->enum_values->child; e; e = e->next) {
			put_value(&v->w, e);
			if (e->next)
				wb_puts(&v->w, ", ");
		}
	}
	return false;
}

/* Whether x is an integer multiple of m, allowing for the error of
 * decimal fractions in binary (0.0075 is a multiple of 0.0001). A
 * quotient too large for a double is not a multiple. */
static bool is_multiple(double x, double m)
{
	double q = x / m;
	if (!isfinite(q))
		return false;
	return fabs(q - nearbyint(q)) <= fabs(q) * 4 * DBL_EPSILON;
}

/* The first numeric rule d breaks, as its message prefix and bound. */
static const char *number_rule(const node_t *n, double d, double *bound)
{
	if ((n->has & K_MINIMUM) && d < n->minimum) {
		*bound = n->minimum;
		return "must be >= ";
	}
	if ((n->has & K_EXMIN) && d <= n->ex_minimum) {
		*bound = n->ex_minimum;
		return "must be > ";
	}
	if ((n->has & K_MAXIMUM) && d > n->maximum) {
		*bound = n->maximum;
		return "must be <= ";
	}
	if ((n->has & K_EXMAX) && d >= n->ex_maximum) {
		*bound = n->ex_maximum;
		return "must be < ";
	}
	if ((n->has & K_MULTIPLE) && !is_multiple(d, n->multiple_of)) {
		*bound = n->multiple_of;
		return "must be a multiple of ";
	}
	return NULL;
}

static bool vnumber(vctx_t *v, const node_t *n, const cJSON *x, const seg_t *at)
{
	double d = x->valuedouble, bound = 0;
	if (isnan(d)) {
		if (vfail(v, at, false, 0))
			wb_puts(&v->w, "NaN is not a number");
		return false;
	}
	const char *rule = number_rule(n, d, &bound);
	if (!rule)
		return true;
	if (vfail(v, at, false, 0)) {
		wb_puts(&v->w, rule);
		put_num(&v->w, bound);
		wb_puts(&v->w, ", got ");
		put_num(&v->w, d);
	}
	return false;
}

/* "expected at least 2 items, got 1" */
static bool count_fail(vctx_t *v, const seg_t *at, const char *side, double bound, const char *one,
		       const char *many, size_t got)
{
	if (vfail(v, at, false, 0)) {
		wb_printf(&v->w, "expected %s ", side);
		put_num(&v->w, bound);
		wb_printf(&v->w, " %s, got %zu", bound == 1 ? one : many, got);
	}
	return false;
}

/* Whether s matches; false (a final failure) when the match could not be
 * completed: a limit of RX_* was reached, or memory ran out. */
static bool regex_match(vctx_t *v, const pcre2_code *re, const char *src, const char *s, const seg_t *at,
			bool *match)
{
	if (!*v->md && !(*v->md = pcre2_match_data_create(1, NULL)))
		return vstop(v, at, "out of memory to validate");
	int rc = pcre2_match(re, (PCRE2_SPTR)s, strlen(s), 0, 0, *v->md, v->match);
	if (rc >= 0 || rc == PCRE2_ERROR_NOMATCH) {
		*match = rc >= 0; /* 0: a match that ovector is too small to describe */
		return true;
	}
	char what[160];
	if (rc == PCRE2_ERROR_MATCHLIMIT)
		snprintf(what, sizeof(what), "more than %u backtracking steps", PC__SCHEMA_RX_MATCH_LIMIT);
	else if (rc == PCRE2_ERROR_DEPTHLIMIT)
		snprintf(what, sizeof(what), "more than %u nested backtracking points", PC__SCHEMA_RX_DEPTH_LIMIT);
	else if (rc == PCRE2_ERROR_HEAPLIMIT)
		snprintf(what, sizeof(what), "more than %u KiB of backtracking memory", PC__SCHEMA_RX_HEAP_LIMIT_KIB);
	else if (rc == PCRE2_ERROR_NOMEMORY)
		snprintf(what, sizeof(what), "more memory than there is");
	else
		snprintf(what, sizeof(what), "PCRE2 error %d", rc);
	if (!v->stopped) {
		v->stopped = true;
		bool msg = v->msg;
		v->msg = true;
		if (vfail(v, at, false, 0)) {
			wb_puts(&v->w, "the pattern ");
			wb_quote(&v->w, src);
			wb_printf(&v->w, " needs %s on this value: too complex to validate", what);
		}
		v->msg = msg;
	}
	return false;
}

static bool vstring(vctx_t *v, const node_t *n, const cJSON *x, const seg_t *at)
{
	const char *s = str_of(x);
	if (n->has & (K_MINLEN | K_MAXLEN)) {
		size_t len = count_code_points(s);
		if ((n->has & K_MINLEN) && (double)len < n->min_length)
			return count_fail(v, at, "at least", n->min_length, "character", "characters", len);
		if ((n->has & K_MAXLEN) && (double)len > n->max_length)
			return count_fail(v, at, "at most", n->max_length, "character", "characters", len);
	}
	if (n->pattern) {
		bool match = false;
		if (!regex_match(v, n->pattern, n->pattern_src, s, at, &match))
			return false;
		if (!match) {
			if (vfail(v, at, false, 0)) {
				wb_puts(&v->w, "must match the pattern ");
				wb_quote(&v->w, n->pattern_src);
			}
			return false;
		}
	}
	return true;
}

static bool vunique(vctx_t *v, const cJSON *x, const seg_t *at)
{
	size_t i = 0;
	for (const cJSON *a = x->child; a; a = a->next, i++) {
		size_t j = i + 1;
		for (const cJSON *b = a->next; b; b = b->next, j++) {
			bool eq = jequal(v, a, b, at, 0);
			if (v->stopped)
				return false;
			if (eq) {
				if (vfail(v, at, false, 0))
					wb_printf(&v->w, "items %zu and %zu are equal; items must be unique", i, j);
				return false;
			}
		}
	}
	return true;
}

static bool vitems(vctx_t *v, const node_t *n, const cJSON *x, const seg_t *at)
{
	size_t i = 0;
	const cJSON *e = x->child;
	if (n->items) {
		for (; e; e = e->next, i++)
			if (!vchild(v, n->items, e, at, NULL, i))
				return false;
		return true;
	}
	if (!n->has_tuple)
		return true;
	for (; e && i < n->tuple.n; e = e->next, i++)
		if (!vchild(v, n->tuple.v[i], e, at, NULL, i))
			return false;
	const node_t *more = n->additional_items;
	if (!e || !more)
		return true;
	if (more->is_bool && !more->bool_value) {
		if (vfail(v, at, false, 0))
			wb_printf(&v->w, "unexpected item at index %zu (at most %zu item%s allowed)", i, n->tuple.n,
				  n->tuple.n == 1 ? " is" : "s are");
		return false;
	}
	for (; e; e = e->next, i++)
		if (!vchild(v, more, e, at, NULL, i))
			return false;
	return true;
}

static bool varray(vctx_t *v, const node_t *n, const cJSON *x, const seg_t *at)
{
	if (n->has & (K_MINITEMS | K_MAXITEMS)) {
		size_t len = count_children(x);
		if ((n->has & K_MINITEMS) && (double)len < n->min_items)
			return count_fail(v, at, "at least", n->min_items, "item", "items", len);
		if ((n->has & K_MAXITEMS) && (double)len > n->max_items)
			return count_fail(v, at, "at most", n->max_items, "item", "items", len);
	}
	if (!vitems(v, n, x, at))
		return false;
	if ((n->has & K_UNIQUE) && !vunique(v, x, at))
		return false;
	if (n->contains) {
		size_t i = 0;
		for (const cJSON *e = x->child; e; e = e->next, i++) {
			seg_t s = {at, NULL, i, at->depth + 1};
			if (vprobe(v, n->contains, e, &s))
				return true;
			if (v->stopped)
				return false;
		}
		if (vfail(v, at, false, 0))
			wb_puts(&v->w, "must contain at least one item that matches the \"contains\" schema");
		return false;
	}
	return true;
}

/* First index whose name is >= key. */
static size_t prop_lower_bound(const node_t *n, const char *key)
{
	size_t lo = 0, hi = n->nprops;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (strcmp(n->props[mid].name, key) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static bool unexpected_property(vctx_t *v, const node_t *n, const seg_t *at, const char *key)
{
	if (!vfail(v, at, false, 0))
		return false;
	wb_puts(&v->w, "unexpected property ");
	wb_quote(&v->w, key);
	if (n->nrprops > 0)
		return false;
	if (n->nprops == 0) {
		wb_puts(&v->w, "; no properties are allowed");
		return false;
	}
	wb_puts(&v->w, n->nprops == 1 ? "; the allowed property is " : "; allowed properties are ");
	for (const cJSON *p = n->props_json->child; p; p = p->next) {
		wb_quote(&v->w, key_of(p));
		if (p->next)
			wb_puts(&v->w, ", ");
	}
	return false;
}

/* properties, patternProperties and additionalProperties, member by member. */
static bool vmember(vctx_t *v, const node_t *n, const cJSON *m, const seg_t *at)
{
	const char *key = key_of(m);
	bool matched = false;
	for (size_t i = prop_lower_bound(n, key); i < n->nprops && strcmp(n->props[i].name, key) == 0; i++) {
		matched = true;
		if (!vchild(v, n->props[i].schema, m, at, key, 0))
			return false;
	}
	for (size_t i = 0; i < n->nrprops; i++) {
		bool match = false;
		if (!regex_match(v, n->rprops[i].re, n->rprops[i].src, key, at, &match))
			return false;
		if (!match)
			continue;
		matched = true;
		if (!vchild(v, n->rprops[i].schema, m, at, key, 0))
			return false;
	}
	const node_t *more = n->additional_props;
	if (matched || !more)
		return true;
	if (more->is_bool && !more->bool_value)
		return unexpected_property(v, n, at, key);
	return vchild(v, more, m, at, key, 0);
}

static bool vdependencies(vctx_t *v, const node_t *n, const cJSON *x, const seg_t *at)
{
	for (size_t i = 0; i < n->ndeps; i++) {
		const dep_t *d = &n->deps[i];
		if (!member(x, d->name))
			continue;
		for (size_t j = 0; j < d->nrequired; j++) {
			if (member(x, d->required[j]))
				continue;
			if (vfail(v, at, false, 0)) {
				wb_puts(&v->w, "property ");
				wb_quote(&v->w, d->name);
				wb_puts(&v->w, " requires property ");
				wb_quote(&v->w, d->required[j]);
			}
			return false;
		}
		if (d->schema && !vnode(v, d->schema, x, at))
			return false;
	}
	return true;
}

static bool vobject(vctx_t *v, const node_t *n, const cJSON *x, const seg_t *at)
{
	for (size_t i = 0; i < n->nrequired; i++) {
		if (member(x, n->required[i]))
			continue;
		if (vfail(v, at, false, 0)) {
			wb_puts(&v->w, "missing required property ");
			wb_quote(&v->w, n->required[i]);
		}
		return false;
	}
	if (n->has & (K_MINPROPS | K_MAXPROPS)) {
		size_t cnt = count_children(x);
		if ((n->has & K_MINPROPS) && (double)cnt < n->min_props)
			return count_fail(v, at, "at least", n->min_props, "property", "properties", cnt);
		if ((n->has & K_MAXPROPS) && (double)cnt > n->max_props)
			return count_fail(v, at, "at most", n->max_props, "property", "properties", cnt);
	}
	for (const cJSON *m = x->child; m; m = m->next)
		if (!vmember(v, n, m, at))
			return false;
	if (n->property_names) {
		for (const cJSON *m = x->child; m; m = m->next) {
			cJSON name = {.type = cJSON_String, .valuestring = (char *)key_of(m)};
			if (vprobe(v, n->property_names, &name, at))
				continue;
			if (!v->stopped && vfail(v, at, false, 0)) {
				wb_puts(&v->w, "property name ");
				wb_quote(&v->w, key_of(m));
				wb_puts(&v->w, " does not match the \"propertyNames\" schema");
			}
			return false;
		}
	}
	return vdependencies(v, n, x, at);
}

/* anyOf (one == false) and oneOf. */
static bool valternatives(vctx_t *v, const node_list_t *l, const cJSON *x, const seg_t *at, bool one)
{
	size_t matches = 0, first = 0, second = 0, best = 0;
	uint32_t best_depth = 0;
	bool all_type_here = true, have_best = false;
	uint8_t want = 0;
	for (size_t i = 0; i < l->n; i++) {
		bool ok = vprobe(v, l->v[i], x, at);
		if (v->stopped)
			return false;
		if (ok) {
			if (matches == 0)
				first = i;
			else
				second = i;
			if (++matches == (one ? 2u : 1u))
				break;
			continue;
		}
		bool type_here = v->fail_type && v->fail_depth == at->depth;
		if (type_here) {
			want |= v->fail_want;
			continue;
		}
		all_type_here = false;
		if (!have_best || v->fail_depth > best_depth) {
			have_best = true;
			best = i;
			best_depth = v->fail_depth;
		}
	}
	if (matches == 1 || (!one && matches > 0))
		return true;
	if (matches > 1) {
		if (vfail(v, at, false, 0))
			wb_printf(&v->w, "must match exactly one oneOf alternative, "
					 "but matches alternatives %zu and %zu", first, second);
		return false;
	}
	if (all_type_here)
		return type_fail(v, at, want, x);
	if (!v->msg) {
		v->fail_depth = best_depth;
		v->fail_type = false;
		return false;
	}
	/* the alternative that got furthest says the most useful thing */
	return vnode(v, l->v[best], x, at);
}

static bool vcombinators(vctx_t *v, const node_t *n, const cJSON *x, const seg_t *at)
{
	for (size_t i = 0; i < n->all_of.n; i++)
		if (!vnode(v, n->all_of.v[i], x, at))
			return false;
	if (n->any_of.n && !valternatives(v, &n->any_of, x, at, false))
		return false;
	if (n->one_of.n && !valternatives(v, &n->one_of, x, at, true))
		return false;
	if (n->not_schema) {
		bool ok = vprobe(v, n->not_schema, x, at);
		if (v->stopped)
			return false;
		if (ok) {
			if (vfail(v, at, false, 0))
				wb_puts(&v->w, "must not match the \"not\" schema");
			return false;
		}
	}
	if (n->if_schema) {
		bool ok = vprobe(v, n->if_schema, x, at);
		if (v->stopped)
			return false;
		const node_t *next = ok ? n->then_schema : n->else_schema;
		if (next && !vnode(v, next, x, at))
			return false;
	}
	return true;
}

static bool vbody(vctx_t *v, const node_t *n, const cJSON *x, const seg_t *at)
{
	while (n->ref) /* no cycle: compile refused those */
		n = n->ref;
	if (n->is_bool) {
		if (!n->bool_value && vfail(v, at, false, 0))
			wb_puts(&v->w, "no value is allowed here");
		return n->bool_value;
	}
	uint8_t t = inst_types(x);
	if ((n->has & K_TYPE) && !(n->types & t))
		return type_fail(v, at, n->types, x);
	if (n->has & K_CONST) {
		if (!jequal(v, n->const_value, x, at, 0)) {
			if (!v->stopped && vfail(v, at, false, 0)) {
				wb_puts(&v->w, "must be equal to ");
				put_value(&v->w, n->const_value);
			}
			return false;
		}
	}
	if ((n->has & K_ENUM) && !venum(v, n, x, at))
		return false;
	bool ok = true;
	if ((t & T_NUM) && (n->has & K_NUMERIC))
		ok = vnumber(v, n, x, at);
	else if (t & T_STR)
		ok = vstring(v, n, x, at);
	else if (t & T_ARR)
		ok = varray(v, n, x, at);
	else if (t & T_OBJ)
		ok = vobject(v, n, x, at);
	return ok && vcombinators(v, n, x, at);
}

static bool vnode(vctx_t *v, const node_t *n, const cJSON *x, const seg_t *at)
{
	if (++v->steps > PC_SCHEMA_MAX_STEPS)
		return vstop(v, at, "the arguments are too large to validate");
	if (v->frames >= PC_SCHEMA_MAX_FRAMES)
		return vstop(v, at, "nested too deeply to validate");
	v->frames++;
	bool ok = vbody(v, n, x, at);
	v->frames--;
	return ok;
}

int pc_schema_validate(const pc_schema_t *s, const cJSON *instance, char *err, size_t errlen)
{
	pcre2_match_data *md = NULL;
	vctx_t v = {.w = {err, errlen, 0}, .md = &md};
	wb_reset(&v.w);
	if (!s || !instance) {
		wb_puts(&v.w, "/: no schema or no value to validate");
		return PC_EINVAL;
	}
	v.match = s->match;
	seg_t root = {0};
	bool ok = vnode(&v, s->root, instance, &root);
	if (!ok && !v.stopped && err && errlen) {
		vctx_t again = {.w = {err, errlen, 0}, .msg = true, .match = s->match, .md = &md};
		vnode(&again, s->root, instance, &root);
	}
	pcre2_match_data_free(md);
	if (!ok && err && errlen && !err[0])
		wb_puts(&v.w, "/: the value is not valid");
	wbuf_t w = {err, errlen, err && errlen ? strlen(err) : 0};
	wb_finish(&w);
	return ok ? 0 : PC_EINVAL;
}
