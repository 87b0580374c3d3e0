/*
 * `pincer load --compare OLD.json` (load.h): this run beside an earlier
 * one's --json object, figure by figure: throughput, counts, and each
 * series' percentiles, with the change in percent (text) or as a fraction
 * (JSON). A figure either run lacks (a series with no value, goodput
 * without --slo) is left out.
 */
#include "load.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "commands.h"

/* The --json format this reads (load_report.c's JSON_VERSION). */
#define COMPARED_VERSION 1

static const char *const totals[] = {"turns_per_s", "goodput_per_s", "turns_ok", "turns_failed", "dropped"};
static const char *const series[] = {"accepted_ms", "ttft_ms", "tpot_ms", "itl_ms", "turn_ms"};
static const char *const quantiles[] = {"p50", "p90", "p99", "p999", "max"};
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

cJSON *pc_load_compare_read(const char *path)
{
	FILE *f = fopen(path, "r");
	if (!f) {
		fprintf(stderr, PC_LOAD_CMD ": --compare %s: %s\n", path, strerror(errno));
		return NULL;
	}
	/* the whole file: a JSON object holds no NUL byte */
	char *text = NULL;
	size_t cap = 0;
	ssize_t n = getdelim(&text, &cap, '\0', f);
	int err = n < 0 && ferror(f) ? errno : 0;
	fclose(f);
	cJSON *j = n > 0 ? cJSON_ParseWithLength(text, (size_t)n) : NULL;
	free(text);
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "version");
	if (!cJSON_IsNumber(v) || v->valuedouble != COMPARED_VERSION) {
		fprintf(stderr, PC_LOAD_CMD ": --compare %s: %s\n", path,
			err ? strerror(err) : "not the --json of pincer load (version 1)");
		cJSON_Delete(j);
		return NULL;
	}
	return j;
}

/* The number at key k of o, false when there is none. */
static bool number(const cJSON *o, const char *k, double *out)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
	if (!cJSON_IsNumber(v))
		return false;
	*out = v->valuedouble;
	return true;
}

typedef void (*row_fn)(void *user, const char *series, const char *name, double old, double now);

/* Calls fn for every figure both objects have. */
static void each_row(const cJSON *old, const cJSON *now, row_fn fn, void *user)
{
	double a, b;
	for (size_t i = 0; i < COUNT(totals); i++)
		if (number(old, totals[i], &a) && number(now, totals[i], &b))
			fn(user, NULL, totals[i], a, b);
	for (size_t s = 0; s < COUNT(series); s++) {
		const cJSON *so = cJSON_GetObjectItemCaseSensitive(old, series[s]);
		const cJSON *sn = cJSON_GetObjectItemCaseSensitive(now, series[s]);
		for (size_t q = 0; q < COUNT(quantiles); q++)
			if (number(so, quantiles[q], &a) && number(sn, quantiles[q], &b))
				fn(user, series[s], quantiles[q], a, b);
	}
}

static void text_row(void *user, const char *s, const char *name, double old, double now)
{
	FILE *f = user;
	char label[40];
	snprintf(label, sizeof(label), "%s%s%s", s ? s : name, s ? " " : "", s ? name : "");
	fprintf(f, "%-18s %12.2f %12.2f", label, old, now);
	if (old != 0)
		fprintf(f, " %+9.1f%%\n", (now - old) / old * 100);
	else
		fprintf(f, " %10s\n", "-");
}

void pc_load_compare_text(FILE *f, const char *path, const cJSON *old, const cJSON *now)
{
	fprintf(f, "\ncompared with %s\n%-18s %12s %12s %10s\n", path, "", "old", "new", "change");
	each_row(old, now, text_row, f);
}

typedef struct json_rows {
	cJSON *to;
	bool ok;
} json_rows_t;

static void json_row(void *user, const char *s, const char *name, double old, double now)
{
	json_rows_t *r = user;
	cJSON *parent = r->to;
	if (s && r->ok) {
		parent = cJSON_GetObjectItemCaseSensitive(r->to, s);
		if (!parent)
			parent = cJSON_AddObjectToObject(r->to, s);
	}
	cJSON *row = r->ok && parent ? cJSON_AddObjectToObject(parent, name) : NULL;
	r->ok = row && cJSON_AddNumberToObject(row, "old", old) && cJSON_AddNumberToObject(row, "new", now) &&
		(old != 0 ? cJSON_AddNumberToObject(row, "change", (now - old) / old) != NULL
			  : cJSON_AddNullToObject(row, "change") != NULL);
}

bool pc_load_compare_json(cJSON *now, const char *path, const cJSON *old)
{
	/* the rows are read from `now` before "compare" joins it */
	cJSON *c = cJSON_CreateObject();
	json_rows_t r = {.to = c, .ok = c && cJSON_AddStringToObject(c, "file", path)};
	each_row(old, now, json_row, &r);
	if (!r.ok || !cJSON_AddItemToObject(now, "compare", c)) {
		cJSON_Delete(c);
		return false;
	}
	return true;
}
