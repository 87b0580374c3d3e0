/*
 * Usage normalization. Each counter has a list of aliases; the first alias
 * holding a positive number wins, so a provider that sends both a zero
 * placeholder and the real count under two names is read right.
 */
#include "usage.h"

#include <math.h>
#include <string.h>

/* Where an alias lives: a top-level key, or `key` inside object `parent`.
 * `style` marks the aliases that tell how the prompt count was reported. */
typedef struct alias {
	const char *parent;
	const char *key;
	int style;
} alias_t;

enum {
	PLAIN = 0,
	PROMPT_TOTAL = 1, /* input: prompt_tokens, which include cached tokens */
	INPUT_TOKENS = 2, /* input: input_tokens, inclusive only in the Responses shape */
	DETAILS = 3,      /* cache_read: from an *_tokens_details object */
};

static const alias_t input_aliases[] = {
	{NULL, "input", PLAIN},
	{NULL, "inputTokens", INPUT_TOKENS},
	{NULL, "input_tokens", INPUT_TOKENS},
	{NULL, "promptTokens", PROMPT_TOTAL},
	{NULL, "prompt_tokens", PROMPT_TOTAL},
};
static const alias_t output_aliases[] = {
	{NULL, "output", PLAIN},
	{NULL, "outputTokens", PLAIN},
	{NULL, "output_tokens", PLAIN},
	{NULL, "completionTokens", PLAIN},
	{NULL, "completion_tokens", PLAIN},
};
static const alias_t cache_read_aliases[] = {
	{NULL, "cacheRead", PLAIN},
	{NULL, "cache_read", PLAIN},
	{NULL, "cache_read_input_tokens", PLAIN},
	{NULL, "cached_tokens", PLAIN},
	{"input_tokens_details", "cached_tokens", DETAILS},
	{"prompt_tokens_details", "cached_tokens", DETAILS},
};
static const alias_t cache_write_aliases[] = {
	{NULL, "cacheWrite", PLAIN},
	{NULL, "cache_write", PLAIN},
	{NULL, "cache_creation_input_tokens", PLAIN},
	{NULL, "cache_write_tokens", PLAIN},
	{"prompt_tokens_details", "cache_write_tokens", PLAIN},
};
static const alias_t total_aliases[] = {
	{NULL, "total", PLAIN},
	{NULL, "totalTokens", PLAIN},
	{NULL, "total_tokens", PLAIN},
};

#define NALIAS(a) (sizeof(a) / sizeof((a)[0]))

static int64_t clamp_count(double v)
{
	if (!isfinite(v) || v <= 0)
		return 0;
	if (v >= (double)PC_USAGE_MAX)
		return PC_USAGE_MAX;
	return (int64_t)v;
}

static const cJSON *lookup(const cJSON *obj, const alias_t *a)
{
	const cJSON *o = obj;
	if (a->parent) {
		o = cJSON_GetObjectItemCaseSensitive(obj, a->parent);
		if (!cJSON_IsObject(o))
			return NULL;
	}
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, a->key);
	return cJSON_IsNumber(v) ? v : NULL;
}

/* Picks a counter. Returns the index of the alias used, or -1 if none is
 * present (then *out is 0). */
static int pick(const cJSON *obj, const alias_t *aliases, size_t n, int64_t *out)
{
	int first = -1;
	for (size_t i = 0; i < n; i++) {
		const cJSON *v = lookup(obj, &aliases[i]);
		if (!v)
			continue;
		if (v->valuedouble > 0) {
			*out = clamp_count(v->valuedouble);
			return (int)i;
		}
		if (first < 0)
			first = (int)i;
	}
	*out = 0;
	return first;
}

static int64_t sat_add(int64_t a, int64_t b)
{
	int64_t s = a + b; /* both are <= PC_USAGE_MAX, far from overflow */
	return s > PC_USAGE_MAX ? PC_USAGE_MAX : s;
}

static int64_t parts_sum(const pc_usage_t *u)
{
	return sat_add(sat_add(u->input, u->output), sat_add(u->cache_read, u->cache_write));
}

int pc_usage_from_json(const cJSON *obj, pc_usage_t *out)
{
	if (!out)
		return PC_EINVAL;
	memset(out, 0, sizeof(*out));
	if (!cJSON_IsObject(obj))
		return PC_ENOTFOUND;

	pc_usage_t u = {0};
	int in_src = pick(obj, input_aliases, NALIAS(input_aliases), &u.input);
	int out_src = pick(obj, output_aliases, NALIAS(output_aliases), &u.output);
	int cr_src = pick(obj, cache_read_aliases, NALIAS(cache_read_aliases), &u.cache_read);
	int cw_src = pick(obj, cache_write_aliases, NALIAS(cache_write_aliases), &u.cache_write);
	int tot_src = pick(obj, total_aliases, NALIAS(total_aliases), &u.total);
	if (in_src < 0 && out_src < 0 && cr_src < 0 && cw_src < 0 && tot_src < 0)
		return PC_ENOTFOUND;

	int in_style = in_src >= 0 ? input_aliases[in_src].style : PLAIN;
	int cr_style = cr_src >= 0 ? cache_read_aliases[cr_src].style : PLAIN;
	if (in_style == PROMPT_TOTAL || (in_style == INPUT_TOKENS && cr_style == DETAILS))
		u.input = u.input > u.cache_read ? u.input - u.cache_read : 0;
	if (u.total == 0)
		u.total = parts_sum(&u);
	*out = u;
	return 0;
}

bool pc_usage_is_nonzero(const pc_usage_t *u)
{
	return u && (u->input > 0 || u->output > 0 || u->cache_read > 0 || u->cache_write > 0 ||
		     u->total > 0);
}

void pc_usage_add(pc_usage_t *acc, const pc_usage_t *u)
{
	if (!acc || !pc_usage_is_nonzero(u))
		return;
	acc->input = sat_add(acc->input, u->input);
	acc->output = sat_add(acc->output, u->output);
	acc->cache_read = sat_add(acc->cache_read, u->cache_read);
	acc->cache_write = sat_add(acc->cache_write, u->cache_write);
	acc->total = sat_add(acc->total, u->total > 0 ? u->total : parts_sum(u));
}

int64_t pc_usage_prompt_tokens(const pc_usage_t *u)
{
	if (!u)
		return 0;
	return sat_add(u->input, sat_add(u->cache_read, u->cache_write));
}

void pc_usage_report(const pc_usage_t *acc, const pc_usage_t *last, pc_usage_t *out)
{
	if (!out)
		return;
	const pc_usage_t zero = {0};
	if (!acc)
		acc = &zero;
	if (!pc_usage_is_nonzero(last))
		last = acc;
	int64_t prompt = pc_usage_prompt_tokens(last);
	/* the run's output is at least the latest call's */
	int64_t output = acc->output > last->output ? acc->output : last->output;
	*out = (pc_usage_t){
		.input = last->input,
		.output = output,
		.cache_read = last->cache_read,
		.cache_write = last->cache_write,
		.total = last->total > 0 ? last->total : sat_add(prompt, output),
	};
}

cJSON *pc_usage_to_json(const pc_usage_t *u)
{
	if (!u)
		return NULL;
	cJSON *o = cJSON_CreateObject();
	if (!o)
		return NULL;
	if (!cJSON_AddNumberToObject(o, "input", (double)u->input) ||
	    !cJSON_AddNumberToObject(o, "output", (double)u->output) ||
	    !cJSON_AddNumberToObject(o, "cacheRead", (double)u->cache_read) ||
	    !cJSON_AddNumberToObject(o, "cacheWrite", (double)u->cache_write) ||
	    !cJSON_AddNumberToObject(o, "totalTokens", (double)u->total)) {
		cJSON_Delete(o);
		return NULL;
	}
	return o;
}
