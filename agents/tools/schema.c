/*
 * The JSON-Schema validator of the tool layer (schema.h): compiling a
 * schema here; validating in schema_validate.c, patterns in
 * schema_regex.c, the shared JSON helpers in schema_json.c.
 *
 * Compile walks a private copy of the schema document once and builds one
 * node per schema location, with every keyword turned into a field (a
 * flag, a number, a list of child nodes, a compiled regex). Each location
 * is compiled at most once (a map from document location to node), so
 * $refs share nodes and recursive schemas become cycles in the node graph.
 * References are resolved after the structural pass, from a work list, so
 * compile never recurses deeper than the document itself.
 *
 * Validate (schema_validate.c) is a recursive walk over (node, instance) that stops at the
 * first failure. It runs twice when it fails and a message is wanted: a
 * fast pass that only answers, then a pass that writes the message where
 * the failure is found. Between alternatives (anyOf, oneOf) the second pass
 * first probes every branch without writing, then reruns the one that got
 * furthest into the instance so that its message is the one reported.
 */
#include "schema_internal.h"
#include "io/io.h"

#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the compiled form ---- */

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
	pc__schema_wb_reset(&c->err);
	pc__schema_wb_puts(&c->err, c->path.len ? c->path.p : "/");
	pc__schema_wb_puts(&c->err, ": ");
	va_list ap;
	va_start(ap, fmt);
	pc__schema_wb_vprintf(&c->err, fmt, ap);
	va_end(ap);
	pc__schema_wb_finish(&c->err);
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
		cfail(c, PC_EINVAL, "must be a schema (an object or a boolean), got %s", pc__schema_inst_type_name(v));
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
	size_t n = pc__schema_count_children(v);
	l->v = calloc(n, sizeof(*l->v));
	if (!l->v) {
		oom(c);
		return;
	}
	size_t i = 0;
	for (const cJSON *e = v->child; e && !c->rc; e = e->next, i++) {
		if (!is_schema(e)) {
			size_t mark = path_push_index(c, i);
			cfail(c, PC_EINVAL, "must be a schema (an object or a boolean), got %s", pc__schema_inst_type_name(e));
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
	if (!cJSON_IsNumber(v) || !pc__schema_is_integral(v->valuedouble) || v->valuedouble < 0) {
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
	size_t cnt = pc__schema_count_children(v);
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
		names[(*n)++] = pc__schema_str_of(e);
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
		for (size_t i = 0; i < sizeof(pc__schema_type_names) / sizeof(pc__schema_type_names[0]); i++)
			if (strcmp(pc__schema_str_of(one), pc__schema_type_names[i].name) == 0)
				bit = pc__schema_type_names[i].bit;
		if (!bit) {
			cfail(c, PC_EINVAL, "unknown type \"%s\"", pc__schema_str_of(one));
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
	n->pattern_src = pc__schema_str_of(v);
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
	size_t cnt = pc__schema_count_children(v);
	n->props = calloc(cnt ? cnt : 1, sizeof(*n->props));
	if (!n->props) {
		oom(c);
		return;
	}
	for (const cJSON *m = v->child; m && !c->rc; m = m->next) {
		if (!is_schema(m)) {
			size_t mark = path_push(c, pc__schema_key_of(m));
			cfail(c, PC_EINVAL, "must be a schema (an object or a boolean), got %s", pc__schema_inst_type_name(m));
			path_pop(c, mark);
			return;
		}
		prop_t *p = &n->props[n->nprops++];
		p->name = pc__schema_key_of(m);
		p->schema = compile_child(c, m, pc__schema_key_of(m), 0);
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
	size_t cnt = pc__schema_count_children(v);
	n->rprops = calloc(cnt ? cnt : 1, sizeof(*n->rprops));
	if (!n->rprops) {
		oom(c);
		return;
	}
	for (const cJSON *m = v->child; m && !c->rc; m = m->next) {
		size_t mark = path_push(c, pc__schema_key_of(m));
		rprop_t *p = &n->rprops[n->nrprops];
		if (!is_schema(m))
			cfail(c, PC_EINVAL, "must be a schema (an object or a boolean), got %s", pc__schema_inst_type_name(m));
		else
			p->re = regex_compile(c, p->src = pc__schema_key_of(m));
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
	size_t cnt = pc__schema_count_children(v);
	n->deps = calloc(cnt ? cnt : 1, sizeof(*n->deps));
	if (!n->deps) {
		oom(c);
		return;
	}
	for (const cJSON *m = v->child; m && !c->rc; m = m->next) {
		dep_t *d = &n->deps[n->ndeps++];
		d->name = pc__schema_key_of(m);
		size_t mark = path_push(c, pc__schema_key_of(m));
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
		size_t mark = path_push(c, pc__schema_key_of(m));
		if (is_schema(m))
			compile_at(c, m);
		else
			cfail(c, PC_EINVAL, "must be a schema (an object or a boolean), got %s", pc__schema_inst_type_name(m));
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
	} else if (pc__schema_str_of(v)[0] != '#') {
		cfail(c, PC_EINVAL, "unsupported remote $ref \"%s\" (only local references such as "
				    "\"#/definitions/name\" are supported)", pc__schema_str_of(v));
	} else if (PC__GROW(c->refs, c->refs_cap, c->nrefs + 1, 8)) {
		oom(c);
	}
	if (!c->rc) {
		char *path = strdup(c->path.p);
		if (!path)
			oom(c);
		else
			c->refs[c->nrefs++] = (pending_ref_t){n, pc__schema_str_of(v), path};
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
		cfail(c, PC_EINVAL, "a schema must be an object or a boolean, got %s", pc__schema_inst_type_name(json));
		return NULL;
	}
	const cJSON *ref = pc__schema_member(json, "$ref");
	if (ref) { /* draft 7: a $ref replaces its siblings */
		compile_ref(c, n, ref);
		return c->rc ? NULL : n;
	}
	for (const cJSON *m = json->child; m && !c->rc; m = m->next) {
		for (size_t k = 0; k < sizeof(keywords) / sizeof(keywords[0]); k++) {
			if (strcmp(pc__schema_key_of(m), keywords[k].name) != 0)
				continue;
			size_t mark = path_push(c, pc__schema_key_of(m));
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
			at = pc__schema_member(at, seg.p);
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
		/* the fragment, percent-decoded (an append always leaves a string) */
		int rc = pc__buf_append_str(&ptr, ref + 1) == 0 && pc_percent_decode(ptr.p)
				 ? resolve_pointer(c->s->doc, ptr.p, &loc, &why)
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
	pc__schema_wb_reset(&c.err);
	if (out)
		*out = NULL;
	if (!out || !schema) {
		cfail(&c, PC_EINVAL, "no schema");
		return c.rc;
	}
	if (!pc__schema_depth_ok(schema, 1)) {
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
		pc__schema_wb_reset(&w);
		pc__schema_wb_puts(&w, "/: not valid JSON");
		if (out)
			*out = NULL;
		return PC_EINVAL;
	}
	int rc = pc_schema_compile(doc, out, err, errlen);
	cJSON_Delete(doc);
	return rc;
}
