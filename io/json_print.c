/*
 * pc_json_print: integer-valued numbers are turned into raw items holding
 * their digits for the length of one cJSON_PrintUnformatted, then turned
 * back. The digits live in one block, which is also how the restoring pass
 * tells them from raw items of the caller's. Children of a reference item
 * (cJSON_CreateObjectReference and friends) belong to another tree, which
 * other threads may be printing too: they are left to cJSON.
 */
#include "json_print.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { SLOT = 24 }; /* "-9007199254740992" and a NUL, rounded up */

/* Integers up to 2^53 are exact in a double. */
static int as_integer(const cJSON *n, int64_t *out)
{
	double d = n->valuedouble;
	if (!isfinite(d) || fabs(d) > 9007199254740992.0)
		return 0;
	int64_t v = (int64_t)d;
	if ((double)v != d)
		return 0;
	*out = v;
	return 1;
}

static bool is_integer(const cJSON *n, int64_t *out)
{
	return (n->type & 0xFF) == cJSON_Number && as_integer(n, out);
}

/* The children this tree owns (none of a reference's). */
static const cJSON *owned_child(const cJSON *n)
{
	return (n->type & cJSON_IsReference) ? NULL : n->child;
}

static size_t count_integers(const cJSON *n)
{
	int64_t v;
	size_t k = is_integer(n, &v) ? 1 : 0;
	for (const cJSON *c = owned_child(n); c; c = c->next)
		k += count_integers(c);
	return k;
}

static void digits(char *out, int64_t v)
{
	char tmp[SLOT];
	size_t len = 0;
	uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
	do {
		tmp[len++] = (char)('0' + u % 10);
		u /= 10;
	} while (u);
	size_t i = 0;
	if (v < 0)
		out[i++] = '-';
	while (len)
		out[i++] = tmp[--len];
	out[i] = '\0';
}

static void to_raw(cJSON *n, char *slots, size_t *used)
{
	int64_t v;
	if (is_integer(n, &v)) {
		char *s = slots + (*used)++ * SLOT;
		digits(s, v);
		n->valuestring = s;
		n->type = (n->type & ~0xFF) | cJSON_Raw;
	}
	for (cJSON *c = (cJSON *)owned_child(n); c; c = c->next)
		to_raw(c, slots, used);
}

static void to_number(cJSON *n, uintptr_t lo, uintptr_t hi)
{
	uintptr_t at = (uintptr_t)n->valuestring;
	if ((n->type & 0xFF) == cJSON_Raw && at >= lo && at < hi) {
		n->valuestring = NULL;
		n->type = (n->type & ~0xFF) | cJSON_Number;
	}
	for (cJSON *c = (cJSON *)owned_child(n); c; c = c->next)
		to_number(c, lo, hi);
}

char *pc_json_print(cJSON *item)
{
	if (!item)
		return NULL;
	size_t n = count_integers(item);
	char *slots = n ? malloc(n * SLOT) : NULL;
	if (!slots)
		return cJSON_PrintUnformatted(item);
	size_t used = 0;
	to_raw(item, slots, &used);
	char *out = cJSON_PrintUnformatted(item);
	to_number(item, (uintptr_t)slots, (uintptr_t)(slots + n * SLOT));
	free(slots);
	return out;
}

cJSON *pc_json_raw_ref(const char *json)
{
	cJSON *r = cJSON_CreateNull();
	if (r) {
		/* cJSON has raw items and reference flags, but no constructor for both */
		r->type = cJSON_Raw | cJSON_IsReference;
		r->valuestring = (char *)json;
	}
	return r;
}

cJSON *pc_json_raw_take(char *json)
{
	cJSON *r = cJSON_CreateNull();
	if (!r) {
		cJSON_free(json);
		return NULL;
	}
	r->type = cJSON_Raw;
	r->valuestring = json;
	return r;
}

void pc_json_escape(const char *s, size_t n, pc_json_put_fn put, void *arg)
{
	static const char hex[] = "0123456789abcdef";
	put(arg, "\"", 1);
	size_t run = 0;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c >= 0x20 && c != '"' && c != '\\')
			continue;
		put(arg, s + run, i - run);
		run = i + 1;
		char esc[6] = {'\\', 0};
		size_t el = 2;
		switch (c) {
		case '"': esc[1] = '"'; break;
		case '\\': esc[1] = '\\'; break;
		case '\b': esc[1] = 'b'; break;
		case '\f': esc[1] = 'f'; break;
		case '\n': esc[1] = 'n'; break;
		case '\r': esc[1] = 'r'; break;
		case '\t': esc[1] = 't'; break;
		default:
			memcpy(esc + 1, "u00", 3);
			esc[4] = hex[c >> 4];
			esc[5] = hex[c & 15];
			el = 6;
		}
		put(arg, esc, el);
	}
	put(arg, s + run, n - run);
	put(arg, "\"", 1);
}
