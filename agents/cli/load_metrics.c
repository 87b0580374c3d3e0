/*
 * `pincer load --metrics-url URL` (load.h): the target's Prometheus text
 * exposition (format 0.0.4, as Pincer's gateway serves /metrics) read
 * before and after the run, and what its cumulative series did in
 * between: counters, histograms' buckets, sums and counts, summaries'
 * sums and counts (gauges and quantiles go up and down: their difference
 * says nothing about the run). A series that appears during the run
 * changed from 0.
 *
 * The reads are two synchronous GETs (pc_load_get) from the command's
 * thread, before the runtime starts and after it is gone.
 */
#include "load.h"

#include <math.h>
#include <regex.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <curl/curl.h>

#include "io/io.h"
#include "commands.h"

/* An exposition larger than this is not read. */
#define MAX_BYTES (64u << 20)
/* The summary's changes without --metrics-filter. */
#define TOP 10

typedef struct series_list {
	struct pc_load_series *v;
	size_t n, cap;
} series_list_t;

static void list_free(struct pc_load_series *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i].key);
	free(v);
}

static int by_key(const void *a, const void *b)
{
	return strcmp(((const struct pc_load_series *)a)->key, ((const struct pc_load_series *)b)->key);
}

/* Largest change first (by its size), then by key. */
static int by_change(const void *a, const void *b)
{
	const struct pc_load_series *x = a, *y = b;
	double dx = fabs(x->value), dy = fabs(y->value);
	return dx > dy ? -1 : dx < dy ? 1 : by_key(a, b);
}

static bool ends_with(const char *s, size_t n, const char *tail)
{
	size_t t = strlen(tail);
	return n >= t && !memcmp(s + n - t, tail, t);
}

/* The family the last "# TYPE" line named, and its kind. */
typedef struct family {
	char name[256], kind[32];
} family_t;

/* Whether a sample named name[0..n) is cumulative: of the family before
 * it (an untyped sample between families is not), and of a kind that only
 * grows. */
static bool cumulative(const family_t *f, const char *name, size_t n)
{
	size_t fn = strlen(f->name);
	const char *type = f->kind;
	if (!fn || n < fn || memcmp(name, f->name, fn) != 0)
		return false;
	if (!strcmp(type, "counter"))
		return true;
	if (!strcmp(type, "histogram") && ends_with(name, n, "_bucket"))
		return true;
	return (!strcmp(type, "histogram") || !strcmp(type, "summary")) &&
	       (ends_with(name, n, "_sum") || ends_with(name, n, "_count"));
}

/* The end of a sample's name{labels}: past the '}' (quoted values may
 * hold one), or at the name's end; NULL when the labels do not close. */
static const char *key_end(const char *p, const char *end)
{
	while (p < end && *p != '{' && *p != ' ' && *p != '\t')
		p++;
	if (p == end || *p != '{')
		return p;
	bool quoted = false;
	for (p++; p < end; p++) {
		if (quoted && *p == '\\')
			p++;
		else if (*p == '"')
			quoted = !quoted;
		else if (!quoted && *p == '}')
			return p + 1;
	}
	return NULL;
}

/* One line: a "# TYPE name kind" names the family that follows; its
 * cumulative samples go into `out`. False when out of memory. */
static bool parse_line(const char *p, const char *end, family_t *fam, series_list_t *out)
{
	if (p < end && *p == '#') {
		char line[512];
		size_t n = (size_t)(end - p) < sizeof(line) ? (size_t)(end - p) : sizeof(line) - 1;
		memcpy(line, p, n);
		line[n] = '\0';
		family_t f;
		if (sscanf(line, "# TYPE %255s %31s", f.name, f.kind) == 2)
			*fam = f;
		return true;
	}
	const char *k = key_end(p, end);
	size_t name_len = strcspn(p, "{ \t");
	if (!k || k == p || name_len > (size_t)(end - p) || !cumulative(fam, p, name_len))
		return true;
	char num[64], *stop = NULL;
	const char *v = k;
	while (v < end && (*v == ' ' || *v == '\t'))
		v++;
	size_t vn = strcspn(v, " \t\n");
	if (v == k || !vn || vn >= sizeof(num) || v + vn > end)
		return true;
	memcpy(num, v, vn);
	num[vn] = '\0';
	double value = strtod(num, &stop);
	if (*stop || !isfinite(value))
		return true;
	if (PC__GROW(out->v, out->cap, out->n + 1, 64) != 0)
		return false;
	char *key = strndup(p, (size_t)(k - p));
	if (!key)
		return false;
	out->v[out->n++] = (struct pc_load_series){.key = key, .value = value};
	return true;
}

/* The cumulative samples of an exposition, sorted by key. */
static bool parse(const char *text, series_list_t *out)
{
	family_t fam = {0};
	for (const char *p = text; *p;) {
		const char *end = strchr(p, '\n');
		if (!end)
			end = p + strlen(p);
		if (!parse_line(p, end, &fam, out))
			return false;
		p = *end ? end + 1 : end;
	}
	if (out->n)
		qsort(out->v, out->n, sizeof(*out->v), by_key);
	return true;
}

/* Reads the exposition into *out: false with a warning printed. */
static bool scrape(const pc_load_metrics_t *m, uint64_t timeout_ms, const char *when, series_list_t *out)
{
	pc__buf_t body = {0};
	char why[CURL_ERROR_SIZE + 32];
	bool ok = pc_load_get(m->url, NULL, timeout_ms, MAX_BYTES, &body, why, sizeof(why));
	if (ok && !parse(body.p ? body.p : "", out)) {
		snprintf(why, sizeof(why), "out of memory");
		ok = false;
	}
	pc__buf_free(&body);
	if (!ok) {
		list_free(out->v, out->n);
		*out = (series_list_t){0};
		fprintf(stderr, PC_LOAD_CMD ": warning: --metrics-url %s %s the run: %s; no metrics deltas\n", m->url,
			when, why);
	}
	return ok;
}

int pc_load_metrics_init(pc_load_metrics_t *m, const char *url, const char *filter)
{
	*m = (pc_load_metrics_t){.url = url, .filter = filter};
	if (!filter)
		return 0;
	regex_t *re = malloc(sizeof(*re));
	if (!re) {
		fprintf(stderr, PC_LOAD_CMD ": out of memory\n");
		return PC_CLI_FAIL;
	}
	int rc = regcomp(re, filter, REG_EXTENDED | REG_NOSUB);
	if (rc != 0) {
		char why[128];
		regerror(rc, re, why, sizeof(why));
		free(re);
		fprintf(stderr, PC_LOAD_CMD ": --metrics-filter '%s': %s\n", filter, why);
		return PC_CLI_USAGE;
	}
	m->re = re;
	return 0;
}

void pc_load_metrics_before(pc_load_metrics_t *m, uint64_t timeout_ms)
{
	series_list_t l = {0};
	if (!m->url || !scrape(m, timeout_ms, "before", &l))
		return;
	m->before = l.v;
	m->n_before = l.n;
	m->before_read = true;
}

void pc_load_metrics_after(pc_load_metrics_t *m, uint64_t timeout_ms)
{
	series_list_t after = {0};
	if (!m->before_read || !scrape(m, timeout_ms, "after", &after))
		return;
	/* the changes, made from `after` in place: its keys move over */
	size_t n = 0;
	for (size_t i = 0; i < after.n; i++) {
		const struct pc_load_series *was = bsearch(&after.v[i], m->before, m->n_before, sizeof(*m->before),
							   by_key);
		double d = after.v[i].value - (was ? was->value : 0);
		if (d == 0) {
			free(after.v[i].key);
			continue;
		}
		after.v[n++] = (struct pc_load_series){.key = after.v[i].key, .value = d};
	}
	if (n)
		qsort(after.v, n, sizeof(*after.v), by_change);
	m->delta = after.v;
	m->n_delta = n;
	m->read = true;
}

void pc_load_metrics_text(FILE *f, const pc_load_metrics_t *m)
{
	if (!m->read)
		return;
	fprintf(f, "metrics      %zu series changed (%s)%s\n", m->n_delta, m->url,
		m->filter ? ", those --metrics-filter matches:" : m->n_delta > TOP ? ", the 10 largest:" : ":");
	size_t shown = 0;
	for (size_t i = 0; i < m->n_delta && (m->filter || shown < TOP); i++) {
		const char *key = m->delta[i].key;
		size_t name = strcspn(key, "{");
		/* a histogram's buckets would crowd the list: its _count is there */
		bool listed = m->re ? regexec(m->re, key, 0, NULL, 0) == 0 : !ends_with(key, name, "_bucket");
		if (!listed)
			continue;
		fprintf(f, "  %-64s %+.10g\n", key, m->delta[i].value);
		shown++;
	}
}

bool pc_load_metrics_json(cJSON *j, const pc_load_metrics_t *m)
{
	if (!m->read)
		return cJSON_AddNullToObject(j, "metrics_delta") != NULL;
	cJSON *d = cJSON_AddObjectToObject(j, "metrics_delta");
	bool ok = d != NULL;
	for (size_t i = 0; ok && i < m->n_delta; i++)
		ok = cJSON_AddNumberToObject(d, m->delta[i].key, m->delta[i].value) != NULL;
	return ok;
}

void pc_load_metrics_free(pc_load_metrics_t *m)
{
	list_free(m->before, m->n_before);
	list_free(m->delta, m->n_delta);
	if (m->re)
		regfree(m->re);
	free(m->re);
	*m = (pc_load_metrics_t){0};
}
