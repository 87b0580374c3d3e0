/*
 * The schema validator's insides, shared by its files: the compiled form
 * (nodes), the sticky text buffer messages are written in, and the JSON
 * helpers (schema_json.c). Compile is schema.c's, validate
 * schema_validate.c's, patterns schema_regex.c's. Private to agents/tools/.
 */
#ifndef PINCER_AGENTS_TOOLS_SCHEMA_INTERNAL_H
#define PINCER_AGENTS_TOOLS_SCHEMA_INTERNAL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "io/io.h"
#include "schema.h"
#include "schema_regex.h"

/* ---- JSON helpers and the message buffer (schema_json.c) ---- */

enum {
	T_NULL = 1u << 0,
	T_BOOL = 1u << 1,
	T_INT = 1u << 2, /* a number with an integral value */
	T_NUM = 1u << 3, /* any number */
	T_STR = 1u << 4,
	T_ARR = 1u << 5,
	T_OBJ = 1u << 6,
};
/* A fixed buffer that truncates (the caller's err). */
typedef struct wbuf {
	char *p;
	size_t cap, len;
} wbuf_t;

size_t pc__schema_count_children(const cJSON *x);
/* Code points, not bytes: count every byte that does not continue a sequence. */
size_t pc__schema_count_code_points(const char *s);
/* True when the document nests no deeper than the cap (bounded recursion). */
bool pc__schema_depth_ok(const cJSON *x, unsigned depth);
/* The shortest text that reads back as d. */
void pc__schema_fmt_num(double d, char *buf, size_t n);
const char *pc__schema_inst_type_name(const cJSON *x);
uint8_t pc__schema_inst_types(const cJSON *x);
/* Infinity counts: it is what a literal too large for a double becomes. */
bool pc__schema_is_integral(double d);
int pc__schema_jtype(const cJSON *x);
const char *pc__schema_key_of(const cJSON *m);
/* The first member named `name`. */
const cJSON *pc__schema_member(const cJSON *obj, const char *name);
const char *pc__schema_str_of(const cJSON *x);
/* A full buffer may end inside a UTF-8 sequence: drop the partial one. */
void pc__schema_wb_finish(wbuf_t *w);
void pc__schema_wb_printf(wbuf_t *w, const char *fmt, ...);
void pc__schema_wb_putn(wbuf_t *w, const char *s, size_t n);
void pc__schema_wb_puts(wbuf_t *w, const char *s);
/* s as a JSON string literal. */
void pc__schema_wb_quote(wbuf_t *w, const char *s);
void pc__schema_wb_reset(wbuf_t *w);
void pc__schema_wb_vprintf(wbuf_t *w, const char *fmt, va_list ap);

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



/* The JSON Schema type names and their bits, in the order of "expected
 * string or null". */
#define PC__SCHEMA_TYPE_NAMES 7
typedef struct pc__schema_type_name {
	const char *name;
	uint8_t bit;
} pc__schema_type_name_t;
extern const pc__schema_type_name_t pc__schema_type_names[PC__SCHEMA_TYPE_NAMES];

#endif
