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
