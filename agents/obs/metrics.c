/*
 * The Prometheus registry (metrics.h).
 *
 * A series stores its label set already rendered ("a=\"x\",b=\"y\"",
 * escaped, without braces): rendering prints it as it is, and lookup
 * renders the asked values the same way and compares strings, which is
 * exact because the escaping is one-to-one.
 *
 * Values are uint64_t words touched through relaxed __atomic builtins; a
 * double lives in a word as its bits and is added to with a
 * compare-and-swap loop. Relaxed is enough: each word is read for its own
 * value, and the lock orders a series' creation before any use of its
 * handle.
 */
#include "metrics.h"

#include <locale.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/io.h"

struct pc_metric {
	pc_metric_family_t *fam;
	const char *key;         /* rendered label set; "" without labels */
	pc_metric_collect_fn fn; /* non-NULL: a pulled series */
	void *arg;
	uint64_t u;         /* counter: integer increments (atomic) */
	uint64_t d;         /* counter, gauge: a double; histogram: the sum (atomic) */
	uint64_t buckets[]; /* histogram: per bucket, the last +Inf (atomic) */
};

struct pc_metric_family {
	pc_metric_family_t *next;
	pc_metrics_t *reg;
	pc_metric_type_t type;
	char *name;
	char *help; /* NULL: none */
	char **labels;
	size_t nlabels;
	double *bounds;
	size_t nbounds;
	pc_metric_t **series; /* creation order */
	size_t nseries, cap, max_series;
};

struct pc_metrics {
	pthread_mutex_t lock;
	pc_metric_family_t *head, *tail;
	locale_t c_locale; /* number formatting whatever the process locale */
};

/* ---- atomics ------------------------------------------------------------------- */

static double bits_to_double(uint64_t u)
{
	double d;
	memcpy(&d, &u, sizeof(d));
	return d;
}

static uint64_t double_to_bits(double d)
{
	uint64_t u;
	memcpy(&u, &d, sizeof(u));
	return u;
}

static double load_double(const uint64_t *w)
{
	return bits_to_double(__atomic_load_n(w, __ATOMIC_RELAXED));
}

static void add_double(uint64_t *w, double v)
{
	uint64_t cur = __atomic_load_n(w, __ATOMIC_RELAXED);
	while (!__atomic_compare_exchange_n(w, &cur, double_to_bits(bits_to_double(cur) + v), true,
					    __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		;
}

/* ---- validation ------------------------------------------------------------------ */

static bool name_valid(const char *s, bool metric)
{
	size_t n = s ? strlen(s) : 0;
	if (n == 0 || n > PC_METRIC_NAME_MAX || (!metric && s[0] == '_' && s[1] == '_'))
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
			  (i > 0 && c >= '0' && c <= '9') || (metric && c == ':');
		if (!ok)
			return false;
	}
	return true;
}

/* Whole UTF-8 sequences only: no overlong forms, surrogates or values
 * past U+10FFFF. */
static bool utf8_valid(const char *str)
{
	const unsigned char *s = (const unsigned char *)str;
	while (*s) {
		unsigned c = *s++, len, lo = 0x80, hi = 0xBF;
		if (c < 0x80)
			continue;
		if (c >= 0xC2 && c <= 0xDF) {
			len = 1;
		} else if (c >= 0xE0 && c <= 0xEF) {
			len = 2;
			lo = c == 0xE0 ? 0xA0 : 0x80;
			hi = c == 0xED ? 0x9F : 0xBF;
		} else if (c >= 0xF0 && c <= 0xF4) {
			len = 3;
			lo = c == 0xF0 ? 0x90 : 0x80;
			hi = c == 0xF4 ? 0x8F : 0xBF;
		} else {
			return false;
		}
		for (unsigned i = 0; i < len; i++, s++, lo = 0x80, hi = 0xBF)
			if (*s < lo || *s > hi)
				return false;
	}
	return true;
}

static bool value_valid(const char *v)
{
	return v && strlen(v) <= PC_METRIC_VALUE_MAX && utf8_valid(v);
}

static bool labels_valid(const pc_metric_desc_t *d, size_t *n)
{
	size_t k = 0;
	for (; d->labels && d->labels[k]; k++) {
		if (k == PC_METRIC_LABELS_MAX || !name_valid(d->labels[k], false))
			return false;
		if (d->type == PC_METRIC_HISTOGRAM && strcmp(d->labels[k], "le") == 0)
			return false;
		for (size_t j = 0; j < k; j++)
			if (strcmp(d->labels[j], d->labels[k]) == 0)
				return false;
	}
	*n = k;
	return true;
}

static bool buckets_valid(const pc_metric_desc_t *d)
{
	if (d->type != PC_METRIC_HISTOGRAM)
		return !d->buckets && d->nbuckets == 0;
	if (!d->buckets || d->nbuckets == 0 || d->nbuckets > PC_METRIC_BUCKETS_MAX)
		return false;
	for (size_t i = 0; i < d->nbuckets; i++)
		if (!isfinite(d->buckets[i]) || (i > 0 && !(d->buckets[i] > d->buckets[i - 1])))
			return false;
	return true;
}

static bool desc_valid(const pc_metric_desc_t *d, size_t *nlabels)
{
	return (d->type == PC_METRIC_COUNTER || d->type == PC_METRIC_GAUGE || d->type == PC_METRIC_HISTOGRAM) &&
	       name_valid(d->name, true) && (!d->help || utf8_valid(d->help)) && labels_valid(d, nlabels) &&
	       buckets_valid(d) && d->max_series <= PC_METRIC_SERIES_MAX;
}

/* ---- names a family takes --------------------------------------------------------- */

static const char *const hist_suffixes[] = {"", "_bucket", "_sum", "_count"};

static size_t suffix_count(pc_metric_type_t t)
{
	return t == PC_METRIC_HISTOGRAM ? 4 : 1;
}

/* Whether a + as and b + bs are the same string. */
static bool cat_eq(const char *a, const char *as, const char *b, const char *bs)
{
	for (;; a++, b++) {
		if (!*a) {
			a = as;
			as = "";
		}
		if (!*b) {
			b = bs;
			bs = "";
		}
		if (*a != *b)
			return false;
		if (!*a)
			return true;
	}
}

/* Whether family f exposes the name `name` + `sfx`. */
static bool exposes(const pc_metric_family_t *f, const char *name, const char *sfx)
{
	for (size_t i = 0; i < suffix_count(f->type); i++)
		if (cat_eq(f->name, hist_suffixes[i], name, sfx))
			return true;
	return false;
}

static bool name_taken(const pc_metrics_t *reg, const pc_metric_desc_t *d)
{
	for (const pc_metric_family_t *f = reg->head; f; f = f->next)
		for (size_t i = 0; i < suffix_count(d->type); i++)
			if (exposes(f, d->name, hist_suffixes[i]))
				return true;
	return false;
}

/* ---- registry ------------------------------------------------------------------ */

int pc_metrics_new(pc_metrics_t **out)
{
	if (!out)
		return PC_EINVAL;
	pc_metrics_t *reg = calloc(1, sizeof(*reg));
	if (!reg)
		return PC_ENOMEM;
	int rc = PC_ESYS;
	reg->c_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0);
	if (!reg->c_locale)
		goto fail;
	if (pthread_mutex_init(&reg->lock, NULL) != 0)
		goto fail;
	*out = reg;
	return 0;
fail:
	if (reg->c_locale)
		freelocale(reg->c_locale);
	free(reg);
	return rc;
}

static void family_free(pc_metric_family_t *f)
{
	for (size_t i = 0; i < f->nseries; i++)
		free(f->series[i]);
	for (size_t i = 0; i < f->nlabels; i++)
		free(f->labels[i]);
	free(f->series);
	free(f->labels);
	free(f->bounds);
	free(f->name);
	free(f->help);
	free(f);
}

void pc_metrics_free(pc_metrics_t *reg)
{
	if (!reg)
		return;
	for (pc_metric_family_t *f = reg->head, *next; f; f = next) {
		next = f->next;
		family_free(f);
	}
	pthread_mutex_destroy(&reg->lock);
	freelocale(reg->c_locale);
	free(reg);
}

static char *dup_or_null(const char *s, bool *failed)
{
	char *d = s && *s ? strdup(s) : NULL;
	if (s && *s && !d)
		*failed = true;
	return d;
}

/* A copy of the desc as a family, or NULL when out of memory. */
static pc_metric_family_t *family_new(pc_metrics_t *reg, const pc_metric_desc_t *d, size_t nlabels)
{
	pc_metric_family_t *f = calloc(1, sizeof(*f));
	if (!f)
		return NULL;
	bool failed = false;
	*f = (pc_metric_family_t){
		.reg = reg,
		.type = d->type,
		.name = dup_or_null(d->name, &failed),
		.help = dup_or_null(d->help, &failed),
		.max_series = d->max_series ? d->max_series : PC_METRIC_SERIES_DEFAULT,
	};
	if (nlabels && !failed) {
		f->labels = calloc(nlabels, sizeof(*f->labels));
		failed = !f->labels;
		for (size_t i = 0; !failed && i < nlabels; i++) {
			f->labels[i] = strdup(d->labels[i]);
			failed = !f->labels[i];
			f->nlabels = i + 1;
		}
	}
	if (d->nbuckets && !failed) {
		f->bounds = malloc(d->nbuckets * sizeof(*f->bounds));
		failed = !f->bounds;
		if (!failed) {
			memcpy(f->bounds, d->buckets, d->nbuckets * sizeof(*f->bounds));
			f->nbounds = d->nbuckets;
		}
	}
	if (failed) {
		family_free(f);
		return NULL;
	}
	return f;
}

int pc_metrics_register(pc_metrics_t *reg, const pc_metric_desc_t *desc, pc_metric_family_t **out)
{
	size_t nlabels = 0;
	if (!reg || !desc || !out || !desc_valid(desc, &nlabels))
		return PC_EINVAL;
	int rc = 0;
	pthread_mutex_lock(&reg->lock);
	if (name_taken(reg, desc)) {
		rc = PC_EEXIST;
		goto out;
	}
	pc_metric_family_t *f = family_new(reg, desc, nlabels);
	if (!f) {
		rc = PC_ENOMEM;
		goto out;
	}
	if (reg->tail)
		reg->tail->next = f;
	else
		reg->head = f;
	reg->tail = f;
	*out = f;
out:
	pthread_mutex_unlock(&reg->lock);
	return rc;
}

/* ---- series ------------------------------------------------------------------- */

/* Appends s with backslash, newline and (when quote) double quote escaped. */
static void put_escaped(pc__buf_t *b, const char *s, bool quote)
{
	const char *run = s;
	for (; *s; s++) {
		const char *esc = *s == '\\' ? "\\\\" : *s == '\n' ? "\\n" : (quote && *s == '"') ? "\\\"" : NULL;
		if (esc) {
			pc__buf_append(b, run, (size_t)(s - run));
			pc__buf_append_str(b, esc);
			run = s + 1;
		}
	}
	pc__buf_append_str(b, run);
}

/* The rendered label set of `values` into key. PC_EINVAL, PC_ENOMEM. */
static int make_key(const pc_metric_family_t *f, const char *const *values, pc__buf_t *key)
{
	if (f->nlabels && !values)
		return PC_EINVAL;
	pc__buf_append(key, "", 0);
	for (size_t i = 0; i < f->nlabels; i++) {
		if (!value_valid(values[i]))
			return PC_EINVAL;
		pc__buf_append_str(key, i ? "," : "");
		pc__buf_append_str(key, f->labels[i]);
		pc__buf_append_str(key, "=\"");
		put_escaped(key, values[i], true);
		pc__buf_append_str(key, "\"");
	}
	return key->err;
}

static pc_metric_t *find(const pc_metric_family_t *f, const char *key)
{
	for (size_t i = 0; i < f->nseries; i++)
		if (strcmp(f->series[i]->key, key) == 0)
			return f->series[i];
	return NULL;
}

/* Adds a series with the given key. PC_ELIMIT, PC_ENOMEM. */
static int add_series(pc_metric_family_t *f, const pc__buf_t *key, pc_metric_t **out)
{
	if (f->nseries == f->max_series)
		return PC_ELIMIT;
	if (PC__GROW(f->series, f->cap, f->nseries + 1, 4))
		return PC_ENOMEM;
	size_t nb = f->type == PC_METRIC_HISTOGRAM ? f->nbounds + 1 : 0;
	size_t head = sizeof(pc_metric_t) + nb * sizeof(uint64_t);
	pc_metric_t *m = calloc(1, head + key->len + 1);
	if (!m)
		return PC_ENOMEM;
	memcpy((char *)m + head, key->p, key->len + 1);
	m->fam = f;
	m->key = (char *)m + head;
	f->series[f->nseries++] = m;
	*out = m;
	return 0;
}

/* Finds or makes the series of `values`; *made tells which. */
static int series_get(pc_metric_family_t *f, const char *const *values, pc_metric_t **out, bool *made)
{
	pc__buf_t key = {0};
	int rc = make_key(f, values, &key);
	if (rc)
		goto out;
	*out = find(f, key.p);
	*made = !*out;
	if (*made)
		rc = add_series(f, &key, out);
out:
	pc__buf_free(&key);
	return rc;
}

int pc_metric_series(pc_metric_family_t *f, const char *const *values, pc_metric_t **out)
{
	if (!f || !out)
		return PC_EINVAL;
	pc_metric_t *m = NULL;
	bool made;
	pthread_mutex_lock(&f->reg->lock);
	int rc = series_get(f, values, &m, &made);
	if (rc == 0 && m->fn)
		rc = PC_ESTATE;
	pthread_mutex_unlock(&f->reg->lock);
	if (rc == 0)
		*out = m;
	return rc;
}

int pc_metric_callback(pc_metric_family_t *f, const char *const *values, pc_metric_collect_fn fn, void *arg)
{
	if (!f || !fn || f->type == PC_METRIC_HISTOGRAM)
		return PC_EINVAL;
	pc_metric_t *m = NULL;
	bool made = false;
	pthread_mutex_lock(&f->reg->lock);
	int rc = series_get(f, values, &m, &made);
	if (rc == 0 && !made)
		rc = PC_EEXIST;
	if (rc == 0) {
		m->fn = fn;
		m->arg = arg;
	}
	pthread_mutex_unlock(&f->reg->lock);
	return rc;
}

/* ---- updates ------------------------------------------------------------------ */

/* 0 when m may be updated as `type`. */
static int check(const pc_metric_t *m, pc_metric_type_t type)
{
	if (!m || m->fam->type != type)
		return PC_EINVAL;
	return m->fn ? PC_ESTATE : 0;
}

int pc_metric_inc(pc_metric_t *m)
{
	if (m && m->fam->type == PC_METRIC_GAUGE)
		return pc_metric_add(m, 1.0);
	return pc_metric_add_u64(m, 1);
}

int pc_metric_dec(pc_metric_t *m)
{
	int rc = check(m, PC_METRIC_GAUGE);
	if (rc == 0)
		add_double(&m->d, -1.0);
	return rc;
}

int pc_metric_add_u64(pc_metric_t *m, uint64_t n)
{
	int rc = check(m, PC_METRIC_COUNTER);
	if (rc == 0)
		__atomic_fetch_add(&m->u, n, __ATOMIC_RELAXED);
	return rc;
}

int pc_metric_add(pc_metric_t *m, double v)
{
	int rc = check(m, m && m->fam->type == PC_METRIC_GAUGE ? PC_METRIC_GAUGE : PC_METRIC_COUNTER);
	if (rc == 0 && m->fam->type == PC_METRIC_COUNTER && !(v >= 0.0))
		rc = PC_EINVAL;
	if (rc == 0)
		add_double(&m->d, v);
	return rc;
}

int pc_metric_set(pc_metric_t *m, double v)
{
	int rc = check(m, PC_METRIC_GAUGE);
	if (rc == 0)
		__atomic_store_n(&m->d, double_to_bits(v), __ATOMIC_RELAXED);
	return rc;
}

/* The bucket of v: the first bound >= v, or +Inf. */
static size_t bucket_of(const pc_metric_family_t *f, double v)
{
	size_t lo = 0, hi = f->nbounds;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (v <= f->bounds[mid])
			hi = mid;
		else
			lo = mid + 1;
	}
	return lo;
}

int pc_metric_observe(pc_metric_t *m, double v)
{
	int rc = check(m, PC_METRIC_HISTOGRAM);
	if (rc == 0 && isnan(v))
		rc = PC_EINVAL;
	if (rc == 0) {
		__atomic_fetch_add(&m->buckets[bucket_of(m->fam, v)], 1, __ATOMIC_RELAXED);
		add_double(&m->d, v);
	}
	return rc;
}

int pc_metric_value(pc_metric_t *m, double *out)
{
	if (!m || !out || m->fam->type == PC_METRIC_HISTOGRAM)
		return PC_EINVAL;
	if (m->fn)
		*out = m->fn(m->arg);
	else
		*out = (double)__atomic_load_n(&m->u, __ATOMIC_RELAXED) + load_double(&m->d);
	return 0;
}

/* ---- rendering ------------------------------------------------------------------ */

/* The shortest of %.15g, %.16g, %.17g that reads back as v. */
static void put_double(pc__buf_t *b, double v)
{
	char s[40];
	if (isnan(v)) {
		pc__buf_append_str(b, "NaN");
		return;
	}
	if (isinf(v)) {
		pc__buf_append_str(b, v > 0 ? "+Inf" : "-Inf");
		return;
	}
	for (int prec = 15; prec <= 17; prec++) {
		snprintf(s, sizeof(s), "%.*g", prec, v);
		if (strtod(s, NULL) == v)
			break;
	}
	pc__buf_append_str(b, s);
}

static void put_u64(pc__buf_t *b, uint64_t v)
{
	char s[24];
	snprintf(s, sizeof(s), "%llu", (unsigned long long)v);
	pc__buf_append_str(b, s);
}

/* "name<sfx>{key} ", or "name<sfx> " without labels. */
static void put_sample_name(pc__buf_t *b, const pc_metric_t *m, const char *sfx)
{
	pc__buf_append_str(b, m->fam->name);
	pc__buf_append_str(b, sfx);
	if (*m->key) {
		pc__buf_append_str(b, "{");
		pc__buf_append_str(b, m->key);
		pc__buf_append_str(b, "}");
	}
	pc__buf_append_str(b, " ");
}

/* "name_bucket{key,le="bound"} " (i == nbounds: +Inf) */
static void put_bucket_name(pc__buf_t *b, const pc_metric_t *m, size_t i)
{
	pc__buf_append_str(b, m->fam->name);
	pc__buf_append_str(b, "_bucket{");
	pc__buf_append_str(b, m->key);
	pc__buf_append_str(b, *m->key ? ",le=\"" : "le=\"");
	if (i < m->fam->nbounds)
		put_double(b, m->fam->bounds[i]);
	else
		pc__buf_append_str(b, "+Inf");
	pc__buf_append_str(b, "\"} ");
}

static void render_scalar(pc__buf_t *b, pc_metric_t *m)
{
	put_sample_name(b, m, "");
	uint64_t u = __atomic_load_n(&m->u, __ATOMIC_RELAXED);
	double d = load_double(&m->d);
	if (m->fn)
		put_double(b, m->fn(m->arg));
	else if (m->fam->type == PC_METRIC_COUNTER && d == 0.0)
		put_u64(b, u); /* exact past 2^53 */
	else
		put_double(b, (double)u + d);
	pc__buf_append_str(b, "\n");
}

static void render_histogram(pc__buf_t *b, pc_metric_t *m)
{
	const pc_metric_family_t *f = m->fam;
	uint64_t cum = 0;
	for (size_t i = 0; i <= f->nbounds; i++) {
		put_bucket_name(b, m, i);
		cum += __atomic_load_n(&m->buckets[i], __ATOMIC_RELAXED);
		put_u64(b, cum);
		pc__buf_append_str(b, "\n");
	}
	put_sample_name(b, m, "_sum");
	put_double(b, load_double(&m->d));
	pc__buf_append_str(b, "\n");
	/* the +Inf bucket's own snapshot, so the two always agree */
	put_sample_name(b, m, "_count");
	put_u64(b, cum);
	pc__buf_append_str(b, "\n");
}

static const char *type_name(pc_metric_type_t t)
{
	return t == PC_METRIC_COUNTER ? "counter" : t == PC_METRIC_GAUGE ? "gauge" : "histogram";
}

static void render_family(pc__buf_t *b, pc_metric_family_t *f)
{
	if (f->help) {
		pc__buf_append_str(b, "# HELP ");
		pc__buf_append_str(b, f->name);
		pc__buf_append_str(b, " ");
		put_escaped(b, f->help, false);
		pc__buf_append_str(b, "\n");
	}
	pc__buf_append_str(b, "# TYPE ");
	pc__buf_append_str(b, f->name);
	pc__buf_append_str(b, " ");
	pc__buf_append_str(b, type_name(f->type));
	pc__buf_append_str(b, "\n");
	for (size_t i = 0; i < f->nseries; i++) {
		if (f->type == PC_METRIC_HISTOGRAM)
			render_histogram(b, f->series[i]);
		else
			render_scalar(b, f->series[i]);
	}
}

int pc_metrics_render(pc_metrics_t *reg, char **out, size_t *len)
{
	if (!reg || !out)
		return PC_EINVAL;
	pc__buf_t b = {0};
	pc__buf_append(&b, "", 0);
	pthread_mutex_lock(&reg->lock);
	locale_t old = uselocale(reg->c_locale);
	for (pc_metric_family_t *f = reg->head; f; f = f->next)
		if (f->nseries)
			render_family(&b, f);
	uselocale(old);
	pthread_mutex_unlock(&reg->lock);
	if (b.err) {
		int rc = b.err;
		pc__buf_free(&b);
		return rc;
	}
	*out = b.p;
	if (len)
		*len = b.len;
	return 0;
}
