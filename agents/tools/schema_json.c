/*
 * The schema validator's JSON helpers (types as JSON Schema names them,
 * members, counts) and the sticky buffer its messages are written in.
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

/* ---- buffers --------------------------------------------------------------- */


void pc__schema_wb_reset(wbuf_t *w)
{
	w->len = 0;
	if (w->p && w->cap)
		w->p[0] = '\0';
}

void pc__schema_wb_putn(wbuf_t *w, const char *s, size_t n)
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

void pc__schema_wb_puts(wbuf_t *w, const char *s)
{
	pc__schema_wb_putn(w, s, strlen(s));
}

void pc__schema_wb_vprintf(wbuf_t *w, const char *fmt, va_list ap)
{
	if (!w->p || w->cap == 0)
		return;
	size_t room = w->cap - w->len;
	int n = vsnprintf(w->p + w->len, room, fmt, ap);
	if (n > 0)
		w->len += (size_t)n < room ? (size_t)n : room - 1;
}

void pc__schema_wb_printf(wbuf_t *w, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	pc__schema_wb_vprintf(w, fmt, ap);
	va_end(ap);
}

/* A full buffer may end inside a UTF-8 sequence: drop the partial one. */
void pc__schema_wb_finish(wbuf_t *w)
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
void pc__schema_wb_quote(wbuf_t *w, const char *s)
{
	pc__schema_wb_putn(w, "\"", 1);
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (*p == '"' || *p == '\\') {
			char e[2] = {'\\', (char)*p};
			pc__schema_wb_putn(w, e, 2);
		} else if (*p == '\n') {
			pc__schema_wb_puts(w, "\\n");
		} else if (*p == '\t') {
			pc__schema_wb_puts(w, "\\t");
		} else if (*p < 0x20) {
			pc__schema_wb_printf(w, "\\u%04x", *p);
		} else {
			pc__schema_wb_putn(w, (const char *)p, 1);
		}
	}
	pc__schema_wb_putn(w, "\"", 1);
}

/* The shortest text that reads back as d. */
void pc__schema_fmt_num(double d, char *buf, size_t n)
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


const pc__schema_type_name_t pc__schema_type_names[PC__SCHEMA_TYPE_NAMES] = {
	/* the order of "expected string or null" */
	{"string", T_STR}, {"integer", T_INT}, {"number", T_NUM}, {"boolean", T_BOOL},
	{"object", T_OBJ}, {"array", T_ARR},   {"null", T_NULL},
};

/* Infinity counts: it is what a literal too large for a double becomes. */
bool pc__schema_is_integral(double d)
{
	return isinf(d) || (isfinite(d) && d == floor(d));
}

int pc__schema_jtype(const cJSON *x)
{
	return x->type & 0xFF;
}

uint8_t pc__schema_inst_types(const cJSON *x)
{
	switch (pc__schema_jtype(x)) {
	case cJSON_NULL: return T_NULL;
	case cJSON_False:
	case cJSON_True: return T_BOOL;
	case cJSON_Number: return (uint8_t)(T_NUM | (pc__schema_is_integral(x->valuedouble) ? T_INT : 0));
	case cJSON_String: return T_STR;
	case cJSON_Array: return T_ARR;
	case cJSON_Object: return T_OBJ;
	default: return 0;
	}
}

const char *pc__schema_inst_type_name(const cJSON *x)
{
	switch (pc__schema_jtype(x)) {
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

const char *pc__schema_str_of(const cJSON *x)
{
	return x->valuestring ? x->valuestring : "";
}

const char *pc__schema_key_of(const cJSON *m)
{
	return m->string ? m->string : "";
}

/* The first member named `name`. */
const cJSON *pc__schema_member(const cJSON *obj, const char *name)
{
	for (const cJSON *m = obj->child; m; m = m->next)
		if (strcmp(pc__schema_key_of(m), name) == 0)
			return m;
	return NULL;
}

size_t pc__schema_count_children(const cJSON *x)
{
	size_t n = 0;
	for (const cJSON *c = x->child; c; c = c->next)
		n++;
	return n;
}

/* Code points, not bytes: count every byte that does not continue a sequence. */
size_t pc__schema_count_code_points(const char *s)
{
	size_t n = 0;
	for (const unsigned char *p = (const unsigned char *)s; *p; p++)
		n += (*p & 0xC0) != 0x80;
	return n;
}

/* True when the document nests no deeper than the cap (bounded recursion). */
bool pc__schema_depth_ok(const cJSON *x, unsigned depth)
{
	if (depth > PC_SCHEMA_MAX_DEPTH)
		return false;
	for (const cJSON *c = x->child; c; c = c->next)
		if (!pc__schema_depth_ok(c, depth + 1))
			return false;
	return true;
}
