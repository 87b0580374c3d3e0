/*
 * Validating an instance against a compiled schema (schema.h): a walk
 * over (node, instance) that stops at the first failure, run twice when a
 * message is wanted (see schema.c's header for how alternatives choose
 * the message).
 */
#include "schema_internal.h"

#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
	pc__schema_wb_putn(w, "/", 1);
	if (!at->key) {
		pc__schema_wb_printf(w, "%zu", at->index);
		return;
	}
	for (const char *k = at->key; *k; k++) {
		if (*k == '~')
			pc__schema_wb_puts(w, "~0");
		else if (*k == '/')
			pc__schema_wb_puts(w, "~1");
		else
			pc__schema_wb_putn(w, k, 1);
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
	pc__schema_wb_reset(&v->w);
	put_path(&v->w, at);
	if (v->w.len == 0)
		pc__schema_wb_putn(&v->w, "/", 1);
	pc__schema_wb_puts(&v->w, ": ");
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
			pc__schema_wb_puts(&v->w, what);
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
	int ta = pc__schema_jtype(a), tb = pc__schema_jtype(b);
	if (ta != tb)
		return false;
	switch (ta) {
	case cJSON_Number: return a->valuedouble == b->valuedouble;
	case cJSON_String:
	case cJSON_Raw: return strcmp(pc__schema_str_of(a), pc__schema_str_of(b)) == 0;
	case cJSON_Array: {
		const cJSON *p = a->child, *q = b->child;
		for (; p && q; p = p->next, q = q->next)
			if (!jequal(v, p, q, at, depth + 1))
				return false;
		return !p && !q;
	}
	case cJSON_Object: {
		if (pc__schema_count_children(a) != pc__schema_count_children(b))
			return false;
		for (const cJSON *p = a->child; p; p = p->next) {
			const cJSON *q = pc__schema_member(b, pc__schema_key_of(p));
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
	size_t n = sizeof(pc__schema_type_names) / sizeof(pc__schema_type_names[0]), left = 0;
	for (size_t i = 0; i < n; i++)
		left += (want & pc__schema_type_names[i].bit) != 0;
	for (size_t i = 0; i < n; i++) {
		if (!(want & pc__schema_type_names[i].bit))
			continue;
		left--;
		if (!first)
			pc__schema_wb_puts(w, left == 0 ? " or " : ", ");
		pc__schema_wb_puts(w, pc__schema_type_names[i].name);
		first = false;
	}
}

static void put_value(wbuf_t *w, const cJSON *x)
{
	char *s = cJSON_PrintUnformatted(x);
	pc__schema_wb_puts(w, s ? s : "(a value)");
	free(s);
}

static void put_num(wbuf_t *w, double d)
{
	char buf[40];
	pc__schema_fmt_num(d, buf, sizeof(buf));
	pc__schema_wb_puts(w, buf);
}

static bool type_fail(vctx_t *v, const seg_t *at, uint8_t want, const cJSON *x)
{
	if (vfail(v, at, true, want)) {
		pc__schema_wb_puts(&v->w, "expected ");
		put_types(&v->w, want);
		pc__schema_wb_puts(&v->w, ", got ");
		pc__schema_wb_puts(&v->w, pc__schema_inst_type_name(x));
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
			pc__schema_wb_puts(&v->w, "no value is allowed (the enum is empty)");
		else
			pc__schema_wb_puts(&v->w, "must be one of ");
		for (const cJSON *e = n->enum_values->child; e; e = e->next) {
			put_value(&v->w, e);
			if (e->next)
				pc__schema_wb_puts(&v->w, ", ");
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
			pc__schema_wb_puts(&v->w, "NaN is not a number");
		return false;
	}
	const char *rule = number_rule(n, d, &bound);
	if (!rule)
		return true;
	if (vfail(v, at, false, 0)) {
		pc__schema_wb_puts(&v->w, rule);
		put_num(&v->w, bound);
		pc__schema_wb_puts(&v->w, ", got ");
		put_num(&v->w, d);
	}
	return false;
}

/* "expected at least 2 items, got 1" */
static bool count_fail(vctx_t *v, const seg_t *at, const char *side, double bound, const char *one,
		       const char *many, size_t got)
{
	if (vfail(v, at, false, 0)) {
		pc__schema_wb_printf(&v->w, "expected %s ", side);
		put_num(&v->w, bound);
		pc__schema_wb_printf(&v->w, " %s, got %zu", bound == 1 ? one : many, got);
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
			pc__schema_wb_puts(&v->w, "the pattern ");
			pc__schema_wb_quote(&v->w, src);
			pc__schema_wb_printf(&v->w, " needs %s on this value: too complex to validate", what);
		}
		v->msg = msg;
	}
	return false;
}

static bool vstring(vctx_t *v, const node_t *n, const cJSON *x, const seg_t *at)
{
	const char *s = pc__schema_str_of(x);
	if (n->has & (K_MINLEN | K_MAXLEN)) {
		size_t len = pc__schema_count_code_points(s);
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
				pc__schema_wb_puts(&v->w, "must match the pattern ");
				pc__schema_wb_quote(&v->w, n->pattern_src);
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
					pc__schema_wb_printf(&v->w, "items %zu and %zu are equal; items must be unique", i, j);
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
			pc__schema_wb_printf(&v->w, "unexpected item at index %zu (at most %zu item%s allowed)", i, n->tuple.n,
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
		size_t len = pc__schema_count_children(x);
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
			pc__schema_wb_puts(&v->w, "must contain at least one item that matches the \"contains\" schema");
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
	pc__schema_wb_puts(&v->w, "unexpected property ");
	pc__schema_wb_quote(&v->w, key);
	if (n->nrprops > 0)
		return false;
	if (n->nprops == 0) {
		pc__schema_wb_puts(&v->w, "; no properties are allowed");
		return false;
	}
	pc__schema_wb_puts(&v->w, n->nprops == 1 ? "; the allowed property is " : "; allowed properties are ");
	for (const cJSON *p = n->props_json->child; p; p = p->next) {
		pc__schema_wb_quote(&v->w, pc__schema_key_of(p));
		if (p->next)
			pc__schema_wb_puts(&v->w, ", ");
	}
	return false;
}

/* properties, patternProperties and additionalProperties, member by member. */
static bool vmember(vctx_t *v, const node_t *n, const cJSON *m, const seg_t *at)
{
	const char *key = pc__schema_key_of(m);
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
		if (!pc__schema_member(x, d->name))
			continue;
		for (size_t j = 0; j < d->nrequired; j++) {
			if (pc__schema_member(x, d->required[j]))
				continue;
			if (vfail(v, at, false, 0)) {
				pc__schema_wb_puts(&v->w, "property ");
				pc__schema_wb_quote(&v->w, d->name);
				pc__schema_wb_puts(&v->w, " requires property ");
				pc__schema_wb_quote(&v->w, d->required[j]);
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
		if (pc__schema_member(x, n->required[i]))
			continue;
		if (vfail(v, at, false, 0)) {
			pc__schema_wb_puts(&v->w, "missing required property ");
			pc__schema_wb_quote(&v->w, n->required[i]);
		}
		return false;
	}
	if (n->has & (K_MINPROPS | K_MAXPROPS)) {
		size_t cnt = pc__schema_count_children(x);
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
			cJSON name = {.type = cJSON_String, .valuestring = (char *)pc__schema_key_of(m)};
			if (vprobe(v, n->property_names, &name, at))
				continue;
			if (!v->stopped && vfail(v, at, false, 0)) {
				pc__schema_wb_puts(&v->w, "property name ");
				pc__schema_wb_quote(&v->w, pc__schema_key_of(m));
				pc__schema_wb_puts(&v->w, " does not match the \"propertyNames\" schema");
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
			pc__schema_wb_printf(&v->w, "must match exactly one oneOf alternative, "
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
				pc__schema_wb_puts(&v->w, "must not match the \"not\" schema");
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
			pc__schema_wb_puts(&v->w, "no value is allowed here");
		return n->bool_value;
	}
	uint8_t t = pc__schema_inst_types(x);
	if ((n->has & K_TYPE) && !(n->types & t))
		return type_fail(v, at, n->types, x);
	if (n->has & K_CONST) {
		if (!jequal(v, n->const_value, x, at, 0)) {
			if (!v->stopped && vfail(v, at, false, 0)) {
				pc__schema_wb_puts(&v->w, "must be equal to ");
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
	pc__schema_wb_reset(&v.w);
	if (!s || !instance) {
		pc__schema_wb_puts(&v.w, "/: no schema or no value to validate");
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
		pc__schema_wb_puts(&v.w, "/: the value is not valid");
	wbuf_t w = {err, errlen, err && errlen ? strlen(err) : 0};
	pc__schema_wb_finish(&w);
	return ok ? 0 : PC_EINVAL;
}
