/*
 * Observability: the HDR-style histogram (agents/obs/histogram.h) and the
 * Prometheus registry (agents/obs/metrics.h).
 *
 * Histogram: exact small values, the stated error bound on random values
 * over the whole default range and with a coarse unit, saturation above
 * the range, stats, merge (equal and different layouts), reset, bad
 * arguments, and many threads recording at once with exact totals.
 *
 * Registry: the exact text of a fixed set of metrics, escaping, number
 * formatting, name and label validation, name clashes, the label-set cap,
 * update rules, pulled series, cumulative buckets, and concurrent updates
 * while another thread renders. Every rendered text also goes through a
 * small checker of the exposition format (check_exposition).
 */
#include <criterion/criterion.h>

#include <locale.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agents/obs/histogram.h"
#include "agents/obs/metrics.h"
#include "comma_locale.h"

/* ---- helpers ---------------------------------------------------------------------- */

static uint64_t rng_next(uint64_t *s)
{
	/* xorshift64*: deterministic, so a failure replays */
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 2685821657736338717ull;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return (x > y) - (x < y);
}

static pc_hist_t *new_hist(uint64_t lowest, uint64_t highest, unsigned precision)
{
	pc_hist_config_t cfg = {.lowest = lowest, .highest = highest, .precision = precision};
	pc_hist_t *h = NULL;
	cr_assert_eq(pc_hist_new(&cfg, &h), 0);
	return h;
}

static uint64_t pct(const pc_hist_t *h, double q)
{
	uint64_t v = 0;
	cr_assert_eq(pc_hist_percentile(h, q, &v), 0);
	return v;
}

/* The value of rank ceil(q/100 * n) among sorted values. */
static uint64_t true_pct(const uint64_t *sorted, size_t n, double q)
{
	double r = ceil(q / 100.0 * (double)n);
	size_t rank = r < 1.0 ? 1 : r > (double)n ? n : (size_t)r;
	return sorted[rank - 1];
}

/* histogram.h's bound, v <= got < v + max(v / 2^precision, unit), times
 * 2^precision to stay in integers. */
static void expect_bound(uint64_t got, uint64_t v, unsigned precision, uint64_t unit, double q)
{
	uint64_t scaled = v > unit << precision ? v : unit << precision;
	cr_expect(got >= v && (got - v) << precision < scaled, "p%g: got %llu, true %llu", q,
		  (unsigned long long)got, (unsigned long long)v);
}

/* A value spread log-uniformly over [1, top]. */
static uint64_t log_uniform(uint64_t *s, uint64_t top)
{
	unsigned bits = 1 + (unsigned)(rng_next(s) % (unsigned)(64 - __builtin_clzll(top)));
	uint64_t v = rng_next(s) & ((bits == 64 ? 0 : (1ull << bits)) - 1);
	v = v ? v : 1;
	return v > top ? top : v;
}

/* ---- histogram ----------------------------------------------------------------------- */

Test(histogram, defaults_and_bad_configs)
{
	pc_hist_config_t cfg;
	pc_hist_config_init(&cfg);
	cr_expect_eq(cfg.lowest, 1);
	cr_expect_eq(cfg.highest, 3600000000ull);
	cr_expect_eq(cfg.precision, 7);
	pc_hist_t *h = NULL;
	cr_assert_eq(pc_hist_new(NULL, &h), 0);
	pc_hist_free(h);

	const pc_hist_config_t bad[] = {
		{.lowest = 0, .highest = 100, .precision = 7},
		{.lowest = 10, .highest = 19, .precision = 7},
		{.lowest = 1, .highest = 100, .precision = 0},
		{.lowest = 1, .highest = 100, .precision = PC_HIST_PRECISION_MAX + 1},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		h = NULL;
		cr_expect_eq(pc_hist_new(&bad[i], &h), PC_EINVAL, "config %zu", i);
		cr_expect_null(h);
	}
	cr_expect_eq(pc_hist_new(NULL, NULL), PC_EINVAL);
	pc_hist_free(NULL);
	pc_hist_record(NULL, 1);
	pc_hist_reset(NULL);
}

Test(histogram, small_values_are_exact)
{
	pc_hist_t *h = new_hist(1, 3600000000ull, 7);
	for (uint64_t v = 1; v <= 100; v++)
		pc_hist_record(h, v);
	cr_expect_eq(pct(h, 0), 1);
	cr_expect_eq(pct(h, 50), 50);
	cr_expect_eq(pct(h, 99), 99);
	cr_expect_eq(pct(h, 99.5), 100);
	cr_expect_eq(pct(h, 100), 100);
	pc_hist_stats_t st;
	cr_assert_eq(pc_hist_stats(h, &st), 0);
	cr_expect_eq(st.count, 100);
	cr_expect_eq(st.sum, 5050);
	cr_expect_eq(st.min, 1);
	cr_expect_eq(st.max, 100);
	pc_hist_free(h);
}

/* Checks every percentile of `n` random values against the sorted truth. */
static void check_random(uint64_t lowest, uint64_t highest, unsigned precision, uint64_t seed)
{
	enum { N = 50000 };
	pc_hist_t *h = new_hist(lowest, highest, precision);
	uint64_t *vals = malloc(N * sizeof(*vals));
	cr_assert_not_null(vals);
	for (size_t i = 0; i < N; i++) {
		vals[i] = log_uniform(&seed, highest);
		pc_hist_record(h, vals[i]);
	}
	qsort(vals, N, sizeof(*vals), cmp_u64);
	uint64_t unit = 1;
	while (unit * 2 <= lowest)
		unit *= 2;
	static const double qs[] = {0, 0.1, 1, 10, 25, 50, 75, 90, 99, 99.9, 99.99, 100};
	for (size_t i = 0; i < sizeof(qs) / sizeof(qs[0]); i++)
		expect_bound(pct(h, qs[i]), true_pct(vals, N, qs[i]), precision, unit, qs[i]);
	cr_expect_eq(pct(h, 100), vals[N - 1], "the 100th percentile is the max");
	free(vals);
	pc_hist_free(h);
}

Test(histogram, error_bound_default_range)
{
	check_random(1, 3600000000ull, 7, 0x9e3779b97f4a7c15ull);
}

Test(histogram, error_bound_coarse_unit_and_precision)
{
	/* unit 512: below it only the absolute bound holds */
	check_random(1000, 1000000000ull, 3, 12345);
	check_random(1, 1ull << 40, 12, 777);
}

Test(histogram, above_highest_saturates)
{
	pc_hist_t *h = new_hist(1, 1000, 7);
	pc_hist_record(h, 10);
	pc_hist_record(h, 1000000);
	pc_hist_stats_t st;
	cr_assert_eq(pc_hist_stats(h, &st), 0);
	cr_expect_eq(st.max, 1000000);
	cr_expect_eq(st.sum, 1000010);
	uint64_t top = pct(h, 100);
	cr_expect(top >= 1000 && top < 1000000, "saturated at the top bucket: %llu", (unsigned long long)top);
	cr_expect_eq(pct(h, 50), 10);
	pc_hist_free(h);
}

Test(histogram, empty_and_bad_queries)
{
	pc_hist_t *h = new_hist(1, 1000, 7);
	pc_hist_stats_t st;
	cr_assert_eq(pc_hist_stats(h, &st), 0);
	cr_expect_eq(st.count + st.sum + st.min + st.max, 0);
	cr_expect_eq(pct(h, 50), 0);
	uint64_t v = 7;
	cr_expect_eq(pc_hist_percentile(h, -0.5, &v), PC_EINVAL);
	cr_expect_eq(pc_hist_percentile(h, 100.5, &v), PC_EINVAL);
	cr_expect_eq(pc_hist_percentile(h, NAN, &v), PC_EINVAL);
	cr_expect_eq(pc_hist_percentile(NULL, 50, &v), PC_EINVAL);
	cr_expect_eq(pc_hist_percentile(h, 50, NULL), PC_EINVAL);
	cr_expect_eq(pc_hist_stats(NULL, &st), PC_EINVAL);
	cr_expect_eq(pc_hist_merge(h, h), PC_EINVAL);
	cr_expect_eq(pc_hist_merge(h, NULL), PC_EINVAL);
	pc_hist_free(h);
}

Test(histogram, merge_equal_layouts_is_exact)
{
	pc_hist_t *a = new_hist(1, 3600000000ull, 7), *b = new_hist(1, 3600000000ull, 7);
	pc_hist_t *all = new_hist(1, 3600000000ull, 7);
	uint64_t seed = 42;
	for (int i = 0; i < 20000; i++) {
		uint64_t v = log_uniform(&seed, 3600000000ull);
		pc_hist_record(i % 3 ? a : b, v);
		pc_hist_record(all, v);
	}
	cr_assert_eq(pc_hist_merge(a, b), 0);
	pc_hist_stats_t sa, sall;
	pc_hist_stats(a, &sa);
	pc_hist_stats(all, &sall);
	cr_expect_eq(sa.count, sall.count);
	cr_expect_eq(sa.sum, sall.sum);
	cr_expect_eq(sa.min, sall.min);
	cr_expect_eq(sa.max, sall.max);
	for (double q = 0; q <= 100; q += 0.5)
		cr_expect_eq(pct(a, q), pct(all, q), "p%g", q);
	pc_hist_free(a);
	pc_hist_free(b);
	pc_hist_free(all);
}

Test(histogram, merge_different_layouts)
{
	pc_hist_t *fine = new_hist(1, 1000000, 10), *coarse = new_hist(1, 1000000, 4);
	for (uint64_t v = 1000; v < 2000; v++)
		pc_hist_record(fine, v);
	cr_assert_eq(pc_hist_merge(coarse, fine), 0);
	pc_hist_stats_t st;
	pc_hist_stats(coarse, &st);
	cr_expect_eq(st.count, 1000);
	cr_expect_eq(st.min, 1000);
	cr_expect_eq(st.max, 1999);
	/* true p50 is 1499; the coarse layout's bound (1/16) plus the fine one's */
	uint64_t p50 = pct(coarse, 50);
	cr_expect(p50 >= 1499 - 2 && p50 <= 1499 + 1499 / 16 + 2, "p50 %llu", (unsigned long long)p50);
	pc_hist_free(fine);
	pc_hist_free(coarse);
}

Test(histogram, reset_empties)
{
	pc_hist_t *h = new_hist(1, 1000, 7);
	pc_hist_record(h, 5);
	pc_hist_reset(h);
	pc_hist_stats_t st;
	pc_hist_stats(h, &st);
	cr_expect_eq(st.count + st.sum + st.min + st.max, 0);
	cr_expect_eq(pct(h, 100), 0);
	pc_hist_record(h, 7);
	cr_expect_eq(pct(h, 50), 7);
	pc_hist_free(h);
}

/* ---- histogram under threads ---------------------------------------------------- */

enum { REC_THREADS = 6, REC_PER_THREAD = 40000 };

typedef struct rec_arg {
	pc_hist_t *h;
	uint64_t seed;
	int stop;     /* the reader: set by main (atomic) */
	int failures; /* the reader: calls that failed or broke a rule */
	int reads;
} rec_arg_t;

static void *recorder(void *p)
{
	rec_arg_t *a = p;
	uint64_t s = a->seed;
	for (int i = 0; i < REC_PER_THREAD; i++)
		pc_hist_record(a->h, log_uniform(&s, 3600000000ull));
	return NULL;
}

/* Reads percentiles and merges while the recorders run. */
static void *hist_reader(void *p)
{
	rec_arg_t *a = p;
	pc_hist_t *sink = NULL;
	if (pc_hist_new(NULL, &sink) != 0) {
		a->failures++;
		return NULL;
	}
	/* at least one read, even when the recorders finish before this
	 * thread first runs (a loaded machine) */
	do {
		uint64_t v = 0;
		pc_hist_stats_t st;
		/* max only grows here, so a percentile read first never exceeds it */
		if (pc_hist_percentile(a->h, 99, &v) || pc_hist_stats(a->h, &st) || v > st.max ||
		    pc_hist_merge(sink, a->h))
			a->failures++;
		pc_hist_reset(sink);
		a->reads++;
	} while (!__atomic_load_n(&a->stop, __ATOMIC_ACQUIRE));
	pc_hist_free(sink);
	return NULL;
}

Test(histogram, many_threads_totals_exact)
{
	pc_hist_t *h = new_hist(1, 3600000000ull, 7), *ref = new_hist(1, 3600000000ull, 7);
	pthread_t th[REC_THREADS], rd;
	rec_arg_t args[REC_THREADS], rarg = {.h = h};
	cr_assert_eq(pthread_create(&rd, NULL, hist_reader, &rarg), 0);
	for (int t = 0; t < REC_THREADS; t++) {
		args[t] = (rec_arg_t){.h = h, .seed = 1000 + (uint64_t)t};
		cr_assert_eq(pthread_create(&th[t], NULL, recorder, &args[t]), 0);
	}
	for (int t = 0; t < REC_THREADS; t++)
		pthread_join(th[t], NULL);
	__atomic_store_n(&rarg.stop, 1, __ATOMIC_RELEASE);
	pthread_join(rd, NULL);
	cr_expect_eq(rarg.failures, 0);
	cr_expect_gt(rarg.reads, 0);

	/* the same values recorded by one thread */
	for (int t = 0; t < REC_THREADS; t++) {
		args[t].h = ref;
		recorder(&args[t]);
	}
	pc_hist_stats_t a, b;
	pc_hist_stats(h, &a);
	pc_hist_stats(ref, &b);
	cr_expect_eq(a.count, (uint64_t)REC_THREADS * REC_PER_THREAD);
	cr_expect_eq(a.count, b.count);
	cr_expect_eq(a.sum, b.sum);
	cr_expect_eq(a.min, b.min);
	cr_expect_eq(a.max, b.max);
	for (double q = 0; q <= 100; q += 0.25)
		cr_expect_eq(pct(h, q), pct(ref, q), "p%g", q);
	pc_hist_free(h);
	pc_hist_free(ref);
}

/* ---- exposition format checker --------------------------------------------------- */

typedef struct checker {
	char fams[64][PC_METRIC_NAME_MAX + 1]; /* families met, in order */
	size_t nfams;
	char cur[PC_METRIC_NAME_MAX + 1];
	char cur_type[16];
	bool cur_help, cur_typed, cur_sampled;
	/* the histogram series being read: its labels without le */
	char hkey[2048];
	double hprev;
	double hinf;
	size_t samples;
} checker_t;

static bool is_name_char(char c, bool first, bool colon)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (!first && c >= '0' && c <= '9') ||
	       (colon && c == ':');
}

/* Reads a name at *p; its length, 0 when none. */
static size_t read_name(const char **p, char *out, bool colon)
{
	size_t n = 0;
	while (is_name_char((*p)[n], n == 0, colon) && n < PC_METRIC_NAME_MAX)
		n++;
	memcpy(out, *p, n);
	out[n] = '\0';
	*p += n;
	return n;
}

/* strtod in the "C" locale, whatever the process locale is. */
static double strtod_c(const char *s, char **end)
{
	locale_t c = newlocale(LC_ALL_MASK, "C", (locale_t)0);
	double v = c ? strtod_l(s, end, c) : strtod(s, end);
	if (c)
		freelocale(c);
	return v;
}

static bool parse_value(const char *s, double *out)
{
	if (strcmp(s, "NaN") == 0 || strcmp(s, "+Inf") == 0 || strcmp(s, "-Inf") == 0) {
		*out = strcmp(s, "NaN") == 0 ? NAN : s[0] == '+' ? INFINITY : -INFINITY;
		return true;
	}
	char *end;
	*out = strtod_c(s, &end);
	return *s && !*end && isfinite(*out);
}

/* Switches to family `name`; false when it was met before (not contiguous). */
static bool enter_family(checker_t *c, const char *name)
{
	if (strcmp(c->cur, name) == 0)
		return true;
	for (size_t i = 0; i < c->nfams; i++)
		if (strcmp(c->fams[i], name) == 0)
			return false;
	if (c->nfams == 64)
		return false;
	strcpy(c->fams[c->nfams++], name);
	strcpy(c->cur, name);
	c->cur_type[0] = '\0';
	c->cur_help = c->cur_typed = c->cur_sampled = false;
	return true;
}

static const char *check_comment(checker_t *c, const char *line)
{
	char name[PC_METRIC_NAME_MAX + 1];
	bool help = strncmp(line, "# HELP ", 7) == 0, type = strncmp(line, "# TYPE ", 7) == 0;
	if (!help && !type)
		return "comment that is neither HELP nor TYPE";
	const char *p = line + 7;
	if (!read_name(&p, name, true))
		return "bad name in comment";
	if (!enter_family(c, name))
		return "family not contiguous";
	if (help) {
		if (c->cur_help || *p != ' ')
			return "HELP repeated or malformed";
		for (p++; *p; p++)
			if (*p == '\\' && p[1] != '\\' && p[1] != 'n')
				return "bad escape in HELP";
			else if (*p == '\\')
				p++;
		c->cur_help = true;
		return NULL;
	}
	if (c->cur_typed || c->cur_sampled || *p != ' ')
		return "TYPE repeated, late or malformed";
	p++;
	if (strcmp(p, "counter") && strcmp(p, "gauge") && strcmp(p, "histogram"))
		return "unknown TYPE";
	snprintf(c->cur_type, sizeof(c->cur_type), "%s", p);
	c->cur_typed = true;
	return NULL;
}

/* Reads {a="x",...} at *p into key (without le) and le. */
static const char *read_labels(const char **p, char *key, size_t keycap, char *le, size_t lecap)
{
	key[0] = le[0] = '\0';
	if (**p != '{')
		return NULL;
	(*p)++;
	while (**p != '}') {
		char lname[PC_METRIC_NAME_MAX + 1], val[1200];
		size_t vn = 0;
		if (!read_name(p, lname, false) || **p != '=' || (*p)[1] != '"')
			return "bad label";
		for (*p += 2; **p != '"'; (*p)++) {
			if (!**p || **p == '\n' || vn + 2 >= sizeof(val))
				return "unterminated label value";
			if (**p == '\\') {
				(*p)++;
				if (**p != '\\' && **p != '"' && **p != 'n')
					return "bad escape in label value";
			}
			val[vn++] = **p;
		}
		val[vn] = '\0';
		(*p)++;
		if (strcmp(lname, "le") == 0 && vn >= lecap)
			return "le too long";
		if (strcmp(lname, "le") == 0)
			memcpy(le, val, vn + 1);
		else
			snprintf(key + strlen(key), keycap - strlen(key), "%s=%s;", lname, val);
		if (**p == ',')
			(*p)++;
		else if (**p != '}')
			return "labels not separated by commas";
	}
	(*p)++;
	return NULL;
}

/* The histogram rules: cumulative buckets, +Inf last, _count == +Inf. */
static const char *check_hist_sample(checker_t *c, const char *sfx, const char *key, const char *le, double v)
{
	if (strcmp(sfx, "_bucket") == 0) {
		if (!*le)
			return "bucket without le";
		if (strcmp(c->hkey, key) != 0) {
			snprintf(c->hkey, sizeof(c->hkey), "%s", key);
			c->hprev = 0;
			c->hinf = -1;
		}
		if (v < c->hprev)
			return "buckets not cumulative";
		c->hprev = v;
		if (strcmp(le, "+Inf") == 0)
			c->hinf = v;
		return NULL;
	}
	if (strcmp(sfx, "_count") == 0 && (strcmp(c->hkey, key) != 0 || c->hinf != v))
		return "_count differs from the +Inf bucket";
	return NULL;
}

static const char *check_sample(checker_t *c, const char *line)
{
	char name[PC_METRIC_NAME_MAX + 1], key[2048], le[64];
	const char *p = line;
	if (!read_name(&p, name, true))
		return "sample without a name";
	const char *err = read_labels(&p, key, sizeof(key), le, sizeof(le));
	if (err)
		return err;
	double v;
	if (*p != ' ' || !parse_value(p + 1, &v))
		return "bad value";
	const char *sfx = "";
	if (strcmp(c->cur_type, "histogram") == 0) {
		size_t n = strlen(c->cur);
		if (strncmp(name, c->cur, n) != 0)
			return "sample outside its family";
		sfx = name + n;
		if (strcmp(sfx, "_bucket") && strcmp(sfx, "_sum") && strcmp(sfx, "_count"))
			return "histogram sample with a bad suffix";
		err = check_hist_sample(c, sfx, key, le, v);
		if (err)
			return err;
	} else if (!enter_family(c, name)) {
		return "family not contiguous";
	} else if (*le) {
		return "le outside a histogram";
	}
	c->cur_sampled = true;
	c->samples++;
	return NULL;
}

/* Checks a whole exposition: NULL when it is well formed (*samples: how
 * many samples), else what is wrong, with the line in `where`. Safe off
 * the test's thread. */
static const char *exposition_error(const char *text, size_t *samples, char *where, size_t wcap)
{
	checker_t *c = calloc(1, sizeof(*c));
	if (!c)
		return "out of memory";
	const char *err = NULL;
	size_t n = strlen(text);
	if (n && text[n - 1] != '\n')
		err = "text does not end with a newline";
	for (const char *p = text; *p && !err;) {
		const char *nl = strchr(p, '\n');
		char line[4096];
		if ((size_t)(nl - p) >= sizeof(line)) {
			err = "line too long for the checker";
			break;
		}
		memcpy(line, p, (size_t)(nl - p));
		line[nl - p] = '\0';
		err = line[0] == '#' ? check_comment(c, line) : check_sample(c, line);
		snprintf(where, wcap, "%s", line);
		p = nl + 1;
	}
	*samples = c->samples;
	free(c);
	return err;
}

/* exposition_error as an assertion; returns the number of samples. */
static size_t check_exposition(const char *text)
{
	char where[4096] = "";
	size_t samples = 0;
	const char *err = exposition_error(text, &samples, where, sizeof(where));
	cr_assert_null(err, "[%s]: %s", where, err);
	return samples;
}

/* ---- registry helpers --------------------------------------------------------------- */

#define LABELS(...) ((const char *const[]){__VA_ARGS__, NULL})
#define VALUES(...) ((const char *const[]){__VA_ARGS__})

static pc_metrics_t *new_reg(void)
{
	pc_metrics_t *reg = NULL;
	cr_assert_eq(pc_metrics_new(&reg), 0);
	return reg;
}

static pc_metric_family_t *reg_family(pc_metrics_t *reg, pc_metric_desc_t d)
{
	pc_metric_family_t *f = NULL;
	cr_assert_eq(pc_metrics_register(reg, &d, &f), 0, "register %s", d.name);
	return f;
}

static pc_metric_t *series(pc_metric_family_t *f, const char *const *values)
{
	pc_metric_t *m = NULL;
	cr_assert_eq(pc_metric_series(f, values, &m), 0);
	return m;
}

/* Renders, checks the format, and returns the text (caller frees). */
static char *render(pc_metrics_t *reg)
{
	char *s = NULL;
	size_t n = 0;
	cr_assert_eq(pc_metrics_render(reg, &s, &n), 0);
	cr_assert_eq(strlen(s), n);
	check_exposition(s);
	return s;
}

static void expect_render(pc_metrics_t *reg, const char *want)
{
	char *got = render(reg);
	cr_expect_str_eq(got, want, "got:\n%s\nwant:\n%s", got, want);
	free(got);
}

static double steals_cb(void *arg)
{
	return (double)*(const uint64_t *)arg;
}

/* ---- registry ------------------------------------------------------------------------ */

Test(metrics, exact_text_of_a_fixed_set)
{
	pc_metrics_t *reg = new_reg();
	pc_metric_family_t *runs = reg_family(reg, (pc_metric_desc_t){.type = PC_METRIC_COUNTER,
								     .name = "pincer_runs_total",
								     .help = "Runs by outcome.",
								     .labels = LABELS("outcome")});
	pc_metric_family_t *live = reg_family(reg, (pc_metric_desc_t){.type = PC_METRIC_GAUGE,
								     .name = "pincer_sessions_live",
								     .help = "Sessions alive now."});
	reg_family(reg, (pc_metric_desc_t){.type = PC_METRIC_COUNTER, .name = "pincer_unused_total", .help = "x"});
	pc_metric_family_t *cost = reg_family(reg, (pc_metric_desc_t){.type = PC_METRIC_COUNTER,
								     .name = "pincer_cost_total"});
	static const double bounds[] = {0.1, 0.5, 2.5};
	pc_metric_family_t *lat = reg_family(reg, (pc_metric_desc_t){.type = PC_METRIC_HISTOGRAM,
								    .name = "pincer_model_latency_seconds",
								    .help = "Model call latency.",
								    .labels = LABELS("provider", "model"),
								    .buckets = bounds,
								    .nbuckets = 3});
	pc_metric_family_t *steals = reg_family(reg, (pc_metric_desc_t){.type = PC_METRIC_COUNTER,
								       .name = "pincer_scheduler_steals_total",
								       .help = "Work steals."});
	uint64_t nsteals = 42;
	cr_assert_eq(pc_metric_callback(steals, NULL, steals_cb, &nsteals), 0);

	pc_metric_t *ok = series(runs, VALUES("ok")), *err = series(runs, VALUES("error"));
	cr_expect_eq(series(runs, VALUES("ok")), ok, "the same label set is the same series");
	for (int i = 0; i < 3; i++)
		pc_metric_inc(ok);
	pc_metric_add_u64(err, 1);
	pc_metric_t *g = series(live, NULL);
	pc_metric_set(g, 2);
	pc_metric_inc(g);
	pc_metric_inc(g);
	pc_metric_dec(g);
	pc_metric_t *c = series(cost, NULL);
	pc_metric_add(c, 1.5);
	pc_metric_add_u64(c, 2);
	pc_metric_t *h = series(lat, VALUES("openai", "gpt-5"));
	static const double obs[] = {0.0625, 0.25, 0.5, 10};
	for (size_t i = 0; i < 4; i++)
		pc_metric_observe(h, obs[i]);

	expect_render(reg, "# HELP pincer_runs_total Runs by outcome.\n"
			   "# TYPE pincer_runs_total counter\n"
			   "pincer_runs_total{outcome=\"ok\"} 3\n"
			   "pincer_runs_total{outcome=\"error\"} 1\n"
			   "# HELP pincer_sessions_live Sessions alive now.\n"
			   "# TYPE pincer_sessions_live gauge\n"
			   "pincer_sessions_live 3\n"
			   "# TYPE pincer_cost_total counter\n"
			   "pincer_cost_total 3.5\n"
			   "# HELP pincer_model_latency_seconds Model call latency.\n"
			   "# TYPE pincer_model_latency_seconds histogram\n"
			   "pincer_model_latency_seconds_bucket{provider=\"openai\",model=\"gpt-5\",le=\"0.1\"} 1\n"
			   "pincer_model_latency_seconds_bucket{provider=\"openai\",model=\"gpt-5\",le=\"0.5\"} 3\n"
			   "pincer_model_latency_seconds_bucket{provider=\"openai\",model=\"gpt-5\",le=\"2.5\"} 3\n"
			   "pincer_model_latency_seconds_bucket{provider=\"openai\",model=\"gpt-5\",le=\"+Inf\"} 4\n"
			   "pincer_model_latency_seconds_sum{provider=\"openai\",model=\"gpt-5\"} 10.8125\n"
			   "pincer_model_latency_seconds_count{provider=\"openai\",model=\"gpt-5\"} 4\n"
			   "# HELP pincer_scheduler_steals_total Work steals.\n"
			   "# TYPE pincer_scheduler_steals_total counter\n"
			   "pincer_scheduler_steals_total 42\n");
	nsteals = 43;
	double v;
	cr_expect_eq(pc_metric_value(series(live, NULL), &v), 0);
	cr_expect_eq(v, 3.0);
	pc_metrics_free(reg);
}

Test(metrics, unlabeled_histogram_and_inclusive_bounds)
{
	pc_metrics_t *reg = new_reg();
	static const double bounds[] = {1, 2};
	pc_metric_family_t *f = reg_family(
		reg, (pc_metric_desc_t){.type = PC_METRIC_HISTOGRAM, .name = "h", .buckets = bounds, .nbuckets = 2});
	pc_metric_t *h = series(f, NULL);
	pc_metric_observe(h, 1);         /* le="1": the bound itself is in */
	pc_metric_observe(h, 1.5);       /* le="2" */
	pc_metric_observe(h, -INFINITY); /* le="1" */
	expect_render(reg, "# TYPE h histogram\n"
			   "h_bucket{le=\"1\"} 2\n"
			   "h_bucket{le=\"2\"} 3\n"
			   "h_bucket{le=\"+Inf\"} 3\n"
			   "h_sum -Inf\n"
			   "h_count 3\n");
	pc_metrics_free(reg);
}

Test(metrics, escaping_of_label_values_and_help)
{
	pc_metrics_t *reg = new_reg();
	pc_metric_family_t *f = reg_family(reg, (pc_metric_desc_t){.type = PC_METRIC_COUNTER,
								  .name = "errors_total",
								  .help = "Back\\slash \"quoted\"\nsecond line",
								  .labels = LABELS("reason")});
	pc_metric_inc(series(f, VALUES("a\\b\"c\nd")));
	pc_metric_inc(series(f, VALUES("")));
	pc_metric_inc(series(f, VALUES("ünïcødé ✓")));
	expect_render(reg, "# HELP errors_total Back\\\\slash \"quoted\"\\nsecond line\n"
			   "# TYPE errors_total counter\n"
			   "errors_total{reason=\"a\\\\b\\\"c\\nd\"} 1\n"
			   "errors_total{reason=\"\"} 1\n"
			   "errors_total{reason=\"ünïcødé ✓\"} 1\n");
	pc_metrics_free(reg);
}

Test(metrics, number_formatting)
{
	pc_metrics_t *reg = new_reg();
	pc_metric_family_t *f = reg_family(
		reg, (pc_metric_desc_t){.type = PC_METRIC_GAUGE, .name = "g", .labels = LABELS("k")});
	static const struct {
		double v;
		const char *text;
	} cases[] = {
		{0.1, "0.1"},
		{1.0 / 3.0, "0.3333333333333333"},
		{-2.5, "-2.5"},
		{1e21, "1e+21"},
		{1e-7, "1e-07"},
		{123456789012345678.0, "1.2345678901234568e+17"},
		{NAN, "NaN"},
		{INFINITY, "+Inf"},
		{-INFINITY, "-Inf"},
	};
	char want[1024] = "# TYPE g gauge\n";
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char k[8];
		snprintf(k, sizeof(k), "%zu", i);
		pc_metric_set(series(f, VALUES(k)), cases[i].v);
		snprintf(want + strlen(want), sizeof(want) - strlen(want), "g{k=\"%zu\"} %s\n", i, cases[i].text);
	}
	pc_metric_family_t *big = reg_family(reg, (pc_metric_desc_t){.type = PC_METRIC_COUNTER, .name = "big"});
	pc_metric_add_u64(series(big, NULL), (1ull << 60) + 1);
	strcat(want, "# TYPE big counter\nbig 1152921504606846977\n");
	expect_render(reg, want);

	/* every printed double reads back as the value it was */
	char *text = render(reg);
	const char *p = strstr(text, "g{k=\"1\"} ");
	cr_assert_not_null(p);
	cr_expect_eq(strtod_c(p + strlen("g{k=\"1\"} "), NULL), 1.0 / 3.0);
	free(text);
	pc_metrics_free(reg);
}

Test(metrics, numbers_ignore_the_process_locale, .timeout = 60, .fini = locale_end)
{
	if (!comma_locale())
		cr_skip_test("no locale with a decimal comma, and localedef cannot make one");
	char probe[16];
	snprintf(probe, sizeof(probe), "%.1f", 0.5);
	cr_expect_str_eq(probe, "0,5", "the locale is in force");
	pc_metrics_t *reg = new_reg();
	pc_metric_family_t *f = reg_family(reg, (pc_metric_desc_t){.type = PC_METRIC_GAUGE, .name = "g"});
	pc_metric_set(series(f, NULL), 0.5);
	static const double b[] = {0.25};
	pc_metric_family_t *h = reg_family(
		reg, (pc_metric_desc_t){.type = PC_METRIC_HISTOGRAM, .name = "h", .buckets = b, .nbuckets = 1});
	pc_metric_observe(series(h, NULL), 1.5);
	expect_render(reg, "# TYPE g gauge\ng 0.5\n# TYPE h histogram\nh_bucket{le=\"0.25\"} 0\n"
			   "h_bucket{le=\"+Inf\"} 1\nh_sum 1.5\nh_count 1\n");
	pc_metrics_free(reg);
}

Test(metrics, names_labels_and_buckets_are_validated)
{
	pc_metrics_t *reg = new_reg();
	static const double ok_b[] = {1, 2}, dup_b[] = {1, 1}, down_b[] = {2, 1}, nan_b[] = {1, NAN},
			    inf_b[] = {1, INFINITY};
	const pc_metric_desc_t bad[] = {
		{.type = PC_METRIC_COUNTER, .name = ""},
		{.type = PC_METRIC_COUNTER, .name = NULL},
		{.type = PC_METRIC_COUNTER, .name = "1abc"},
		{.type = PC_METRIC_COUNTER, .name = "a-b"},
		{.type = PC_METRIC_COUNTER, .name = "a b"},
		{.type = 0, .name = "x"},
		{.type = PC_METRIC_COUNTER, .name = "x", .labels = LABELS("__reserved")},
		{.type = PC_METRIC_COUNTER, .name = "x", .labels = LABELS("a:b")},
		{.type = PC_METRIC_COUNTER, .name = "x", .labels = LABELS("9a")},
		{.type = PC_METRIC_COUNTER, .name = "x", .labels = LABELS("a", "a")},
		{.type = PC_METRIC_COUNTER, .name = "x", .labels = LABELS("a", "b", "c", "d", "e", "f", "g", "h", "i")},
		{.type = PC_METRIC_COUNTER, .name = "x", .buckets = ok_b, .nbuckets = 2},
		{.type = PC_METRIC_COUNTER, .name = "x", .help = "bad \xff utf-8"},
		{.type = PC_METRIC_COUNTER, .name = "x", .max_series = PC_METRIC_SERIES_MAX + 1},
		{.type = PC_METRIC_HISTOGRAM, .name = "x"},
		{.type = PC_METRIC_HISTOGRAM, .name = "x", .buckets = ok_b, .nbuckets = 2, .labels = LABELS("le")},
		{.type = PC_METRIC_HISTOGRAM, .name = "x", .buckets = dup_b, .nbuckets = 2},
		{.type = PC_METRIC_HISTOGRAM, .name = "x", .buckets = down_b, .nbuckets = 2},
		{.type = PC_METRIC_HISTOGRAM, .name = "x", .buckets = nan_b, .nbuckets = 2},
		{.type = PC_METRIC_HISTOGRAM, .name = "x", .buckets = inf_b, .nbuckets = 2},
		{.type = PC_METRIC_HISTOGRAM, .name = "x", .buckets = ok_b, .nbuckets = PC_METRIC_BUCKETS_MAX + 1},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		pc_metric_family_t *f = NULL;
		cr_expect_eq(pc_metrics_register(reg, &bad[i], &f), PC_EINVAL, "desc %zu", i);
		cr_expect_null(f);
	}
	/* accepted: colons in metric names, a label "le" outside histograms */
	reg_family(reg, (pc_metric_desc_t){.type = PC_METRIC_COUNTER, .name = "ns:sub_total", .labels = LABELS("le")});
	cr_expect_eq(pc_metrics_register(NULL, &bad[0], NULL), PC_EINVAL);
	pc_metrics_free(reg);
}

Test(metrics, taken_names_clash)
{
	pc_metrics_t *reg = new_reg();
	static const double b[] = {1};
	pc_metric_family_t *f = NULL;
	reg_family(reg, (pc_metric_desc_t){.type = PC_METRIC_HISTOGRAM, .name = "lat", .buckets = b, .nbuckets = 1});
	reg_family(reg, (pc_metric_desc_t){.type = PC_METRIC_GAUGE, .name = "q_sum"});
	const pc_metric_desc_t clash[] = {
		{.type = PC_METRIC_GAUGE, .name = "lat"},
		{.type = PC_METRIC_COUNTER, .name = "lat_count"},
		{.type = PC_METRIC_COUNTER, .name = "lat_bucket"},
		{.type = PC_METRIC_GAUGE, .name = "q_sum"},
		{.type = PC_METRIC_HISTOGRAM, .name = "q", .buckets = b, .nbuckets = 1}, /* its q_sum */
	};
	for (size_t i = 0; i < sizeof(clash) / sizeof(clash[0]); i++)
		cr_expect_eq(pc_metrics_register(reg, &clash[i], &f), PC_EEXIST, "desc %zu", i);
	reg_family(reg, (pc_metric_desc_t){.type = PC_METRIC_GAUGE, .name = "lat_total"});
	pc_metrics_free(reg);
}

Test(metrics, label_sets_are_capped)
{
	pc_metrics_t *reg = new_reg();
	pc_metric_family_t *f = reg_family(reg, (pc_metric_desc_t){.type = PC_METRIC_COUNTER,
								  .name = "by_peer_total",
								  .labels = LABELS("peer"),
								  .max_series = 3});
	pc_metric_t *m = NULL;
	for (int i = 0; i < 1000; i++) {
		char v[16];
		snprintf(v, sizeof(v), "p%d", i);
		int rc = pc_metric_series(f, VALUES(v), &m);
		cr_expect_eq(rc, i < 3 ? 0 : PC_ELIMIT, "label set %d", i);
	}
	cr_expect_eq(pc_metric_series(f, VALUES("p1"), &m), 0, "a known label set still resolves");
	pc_metric_inc(m);
	expect_render(reg, "# TYPE by_peer_total counter\n"
			   "by_peer_total{peer=\"p0\"} 0\n"
			   "by_peer_total{peer=\"p1\"} 1\n"
			   "by_peer_total{peer=\"p2\"} 0\n");

	pc_metric_family_t *d = reg_family(
		reg, (pc_metric_desc_t){.type = PC_METRIC_COUNTER, .name = "dflt_total", .labels = LABELS("k")});
	size_t made = 0;
	for (int i = 0; i < 200; i++) {
		char v[16];
		snprintf(v, sizeof(v), "%d", i);
		made += pc_metric_series(d, VALUES(v), &m) == 0;
	}
	cr_expect_eq(made, PC_METRIC_SERIES_DEFAULT);
	pc_metrics_free(reg);
}

Test(metrics, bad_label_values)
{
	pc_metrics_t *reg = new_reg();
	pc_metric_family_t *f = reg_family(
		reg, (pc_metric_desc_t){.type = PC_METRIC_COUNTER, .name = "c", .labels = LABELS("a", "b")});
	pc_metric_t *m = NULL;
	char *long_v = malloc(PC_METRIC_VALUE_MAX + 2);
	cr_assert_not_null(long_v);
	memset(long_v, 'x', PC_METRIC_VALUE_MAX + 1);
	long_v[PC_METRIC_VALUE_MAX + 1] = '\0';
	cr_expect_eq(pc_metric_series(f, NULL, &m), PC_EINVAL);
	cr_expect_eq(pc_metric_series(f, VALUES("x", NULL), &m), PC_EINVAL);
	cr_expect_eq(pc_metric_series(f, VALUES("x", "\xc3"), &m), PC_EINVAL, "truncated UTF-8");
	cr_expect_eq(pc_metric_series(f, VALUES("x", "\xed\xa0\x80"), &m), PC_EINVAL, "a surrogate");
	cr_expect_eq(pc_metric_series(f, VALUES("x", "\xc0\xaf"), &m), PC_EINVAL, "overlong");
	cr_expect_eq(pc_metric_series(f, VALUES("x", long_v), &m), PC_EINVAL);
	long_v[PC_METRIC_VALUE_MAX] = '\0';
	cr_expect_eq(pc_metric_series(f, VALUES("x", long_v), &m), 0, "exactly the limit");
	cr_expect_eq(pc_metric_series(NULL, NULL, &m), PC_EINVAL);
	free(long_v);
	pc_metrics_free(reg);
}

Test(metrics, update_rules)
{
	pc_metrics_t *reg = new_reg();
	static const double b[] = {1};
	pc_metric_t *c = series(reg_family(reg, (pc_metric_desc_t){.type = PC_METRIC_COUNTER, .name = "c"}), NULL);
	pc_metric_t *g = series(reg_family(reg, (pc_metric_desc_t){.type = PC_METRIC_GAUGE, .name = "g"}), NULL);
	pc_metric_t *h = series(reg_family(reg, (pc_metric_desc_t){.type = PC_METRIC_HISTOGRAM,
								  .name = "h",
								  .buckets = b,
								  .nbuckets = 1}),
				NULL);
	cr_expect_eq(pc_metric_set(c, 1), PC_EINVAL);
	cr_expect_eq(pc_metric_dec(c), PC_EINVAL);
	cr_expect_eq(pc_metric_add(c, -1), PC_EINVAL);
	cr_expect_eq(pc_metric_add(c, NAN), PC_EINVAL);
	cr_expect_eq(pc_metric_observe(c, 1), PC_EINVAL);
	cr_expect_eq(pc_metric_add_u64(g, 1), PC_EINVAL);
	cr_expect_eq(pc_metric_observe(g, 1), PC_EINVAL);
	cr_expect_eq(pc_metric_add(g, -4), 0);
	cr_expect_eq(pc_metric_inc(h), PC_EINVAL);
	cr_expect_eq(pc_metric_set(h, 1), PC_EINVAL);
	cr_expect_eq(pc_metric_observe(h, NAN), PC_EINVAL);
	cr_expect_eq(pc_metric_inc(NULL), PC_EINVAL);
	cr_expect_eq(pc_metric_observe(NULL, 1), PC_EINVAL);
	double v = 0;
	cr_expect_eq(pc_metric_value(h, &v), PC_EINVAL);
	cr_expect_eq(pc_metric_value(c, &v), 0);
	cr_expect_eq(v, 0.0);
	cr_expect_eq(pc_metric_value(g, &v), 0);
	cr_expect_eq(v, -4.0);
	expect_render(reg, "# TYPE c counter\nc 0\n# TYPE g gauge\ng -4\n# TYPE h histogram\n"
			   "h_bucket{le=\"1\"} 0\nh_bucket{le=\"+Inf\"} 0\nh_sum 0\nh_count 0\n");
	pc_metrics_free(reg);
}

Test(metrics, pulled_series)
{
	pc_metrics_t *reg = new_reg();
	static const double b[] = {1};
	pc_metric_family_t *f = reg_family(reg, (pc_metric_desc_t){.type = PC_METRIC_GAUGE,
								  .name = "sched_events",
								  .labels = LABELS("kind")});
	pc_metric_family_t *h = reg_family(
		reg, (pc_metric_desc_t){.type = PC_METRIC_HISTOGRAM, .name = "h", .buckets = b, .nbuckets = 1});
	uint64_t steals = 5, parks = 7;
	cr_assert_eq(pc_metric_callback(f, VALUES("steal"), steals_cb, &steals), 0);
	cr_assert_eq(pc_metric_callback(f, VALUES("park"), steals_cb, &parks), 0);
	cr_expect_eq(pc_metric_callback(f, VALUES("park"), steals_cb, &parks), PC_EEXIST);
	cr_expect_eq(pc_metric_callback(f, VALUES("x"), NULL, NULL), PC_EINVAL);
	cr_expect_eq(pc_metric_callback(h, NULL, steals_cb, &parks), PC_EINVAL);
	pc_metric_t *m = NULL;
	cr_expect_eq(pc_metric_series(f, VALUES("steal"), &m), PC_ESTATE);
	cr_expect_null(m);
	pc_metric_t *plain = series(f, VALUES("plain"));
	pc_metric_set(plain, 1);
	cr_expect_eq(pc_metric_callback(f, VALUES("plain"), steals_cb, &parks), PC_EEXIST);
	steals = 6;
	expect_render(reg, "# TYPE sched_events gauge\n"
			   "sched_events{kind=\"steal\"} 6\n"
			   "sched_events{kind=\"park\"} 7\n"
			   "sched_events{kind=\"plain\"} 1\n");
	parks = 9;
	expect_render(reg, "# TYPE sched_events gauge\n"
			   "sched_events{kind=\"steal\"} 6\n"
			   "sched_events{kind=\"park\"} 9\n"
			   "sched_events{kind=\"plain\"} 1\n");
	pc_metrics_free(reg);
}

Test(metrics, empty_registry_renders_nothing)
{
	pc_metrics_t *reg = new_reg();
	expect_render(reg, "");
	char *s = NULL;
	cr_expect_eq(pc_metrics_render(NULL, &s, NULL), PC_EINVAL);
	cr_expect_eq(pc_metrics_render(reg, NULL, NULL), PC_EINVAL);
	cr_expect_eq(pc_metrics_new(NULL), PC_EINVAL);
	pc_metrics_free(reg);
	pc_metrics_free(NULL);
}

/* ---- registry under threads --------------------------------------------------------- */

enum { UPD_THREADS = 6, UPD_ROUNDS = 20000 };

typedef struct upd_arg {
	pc_metrics_t *reg;
	pc_metric_family_t *runs, *lat;
	pc_metric_t *gauge, *dbl;
	int id;
	int failures; /* calls that failed */
	int stop;     /* the renderer: set by main (atomic) */
	int renders;
	const char *bad; /* the renderer: the first format error */
	char where[4096];
} upd_arg_t;

static void *updater(void *p)
{
	upd_arg_t *a = p;
	static const char *const outcomes[] = {"ok", "error", "aborted"};
	pc_metric_t *runs[3], *lat;
	for (int i = 0; i < 3; i++)
		if (pc_metric_series(a->runs, VALUES(outcomes[i]), &runs[i]) != 0)
			a->failures++;
	char id[8];
	snprintf(id, sizeof(id), "t%d", a->id);
	if (pc_metric_series(a->lat, VALUES(id), &lat) != 0)
		a->failures++;
	for (int i = 0; i < UPD_ROUNDS && !a->failures; i++) {
		int rc = pc_metric_inc(runs[i % 3]) | pc_metric_observe(lat, (double)(i % 100) / 10.0) |
			 pc_metric_inc(a->gauge) | pc_metric_dec(a->gauge) | pc_metric_add(a->dbl, 0.5);
		a->failures += rc != 0;
	}
	return NULL;
}

static void *renderer(void *p)
{
	upd_arg_t *a = p;
	/* at least once: the updaters may all end before this thread first
	 * runs, and the test counts on a render */
	for (bool first = true; !a->bad && (first || !__atomic_load_n(&a->stop, __ATOMIC_ACQUIRE)); first = false) {
		char *s = NULL;
		size_t n;
		if (pc_metrics_render(a->reg, &s, NULL) != 0) {
			a->bad = "render failed";
			break;
		}
		/* buckets cumulative and _count == +Inf while observations go on */
		a->bad = exposition_error(s, &n, a->where, sizeof(a->where));
		free(s);
		a->renders++;
	}
	return NULL;
}

Test(metrics, concurrent_updates_and_renders)
{
	pc_metrics_t *reg = new_reg();
	static const double b[] = {1, 5};
	upd_arg_t base = {
		.reg = reg,
		.runs = reg_family(reg, (pc_metric_desc_t){.type = PC_METRIC_COUNTER,
							   .name = "runs_total",
							   .labels = LABELS("outcome")}),
		.lat = reg_family(reg, (pc_metric_desc_t){.type = PC_METRIC_HISTOGRAM,
							  .name = "lat",
							  .labels = LABELS("thread"),
							  .buckets = b,
							  .nbuckets = 2}),
		.gauge = series(reg_family(reg, (pc_metric_desc_t){.type = PC_METRIC_GAUGE, .name = "live"}), NULL),
		.dbl = series(reg_family(reg, (pc_metric_desc_t){.type = PC_METRIC_COUNTER, .name = "secs_total"}),
			      NULL),
	};
	upd_arg_t args[UPD_THREADS], rarg = base;
	pthread_t th[UPD_THREADS], rd;
	cr_assert_eq(pthread_create(&rd, NULL, renderer, &rarg), 0);
	for (int t = 0; t < UPD_THREADS; t++) {
		args[t] = base;
		args[t].id = t;
		cr_assert_eq(pthread_create(&th[t], NULL, updater, &args[t]), 0);
	}
	for (int t = 0; t < UPD_THREADS; t++)
		pthread_join(th[t], NULL);
	__atomic_store_n(&rarg.stop, 1, __ATOMIC_RELEASE);
	pthread_join(rd, NULL);
	for (int t = 0; t < UPD_THREADS; t++)
		cr_expect_eq(args[t].failures, 0, "thread %d", t);
	cr_expect_null(rarg.bad, "[%s]: %s", rarg.where, rarg.bad);
	cr_expect_gt(rarg.renders, 0);

	char *s = render(reg);
	char want[128];
	int per = UPD_THREADS * (UPD_ROUNDS / 3); /* 20000 % 3 == 2: ok and error get one more each */
	snprintf(want, sizeof(want), "runs_total{outcome=\"ok\"} %d\n", per + UPD_THREADS);
	cr_expect_not_null(strstr(s, want), "%s", want);
	snprintf(want, sizeof(want), "runs_total{outcome=\"aborted\"} %d\n", per);
	cr_expect_not_null(strstr(s, want), "%s", want);
	cr_expect_not_null(strstr(s, "\nlive 0\n"));
	snprintf(want, sizeof(want), "\nsecs_total %d\n", UPD_THREADS * UPD_ROUNDS / 2);
	cr_expect_not_null(strstr(s, want), "%s", want);
	/* per thread: i % 100 / 10 <= 1 for 11 of each 100, <= 5 for 51 */
	snprintf(want, sizeof(want), "lat_bucket{thread=\"t3\",le=\"1\"} %d\n", UPD_ROUNDS / 100 * 11);
	cr_expect_not_null(strstr(s, want), "%s", want);
	snprintf(want, sizeof(want), "lat_count{thread=\"t3\"} %d\n", UPD_ROUNDS);
	cr_expect_not_null(strstr(s, want), "%s", want);
	cr_expect_eq(check_exposition(s), 3 + UPD_THREADS * 5 + 2);
	free(s);
	pc_metrics_free(reg);
}
