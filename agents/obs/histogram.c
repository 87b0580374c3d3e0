/*
 * The HDR-style histogram (histogram.h).
 *
 * Layout. A value v is first scaled to units: x = v >> shift. With
 * S = 2^precision, the bucket index of x is
 *     x                          when x < 2S (one bucket per unit),
 *     (e << precision) + (x >> e) otherwise, with e = msb(x) - precision,
 * so octave e (e >= 1) holds x in [2^(precision+e), 2^(precision+e+1)) in
 * S buckets of width 2^e, and the index grows with x without gaps. A
 * bucket of width 2^e > 1 holds values >= S * 2^e: the relative width is
 * below 1/S, which is the bound histogram.h states.
 *
 * Every counter is a uint64_t touched only through relaxed __atomic
 * builtins: totals need atomicity, not ordering, because readers only
 * want each counter's own value.
 */
#include "histogram.h"

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>

struct pc_hist {
	uint64_t count; /* the counters (atomic) */
	uint64_t sum;
	uint64_t min; /* UINT64_MAX while empty */
	uint64_t max;
	unsigned shift;     /* log2 of the unit */
	unsigned precision; /* log2 of the buckets per octave */
	size_t nbuckets;
	uint64_t buckets[]; /* atomic */
};

#define LD(p) __atomic_load_n((p), __ATOMIC_RELAXED)
#define ST(p, v) __atomic_store_n((p), (v), __ATOMIC_RELAXED)
#define ADD(p, v) __atomic_fetch_add((p), (v), __ATOMIC_RELAXED)

void pc_hist_config_init(pc_hist_config_t *cfg)
{
	*cfg = (pc_hist_config_t){.lowest = 1, .highest = 3600000000u, .precision = 7};
}

static unsigned msb(uint64_t x)
{
	return 63u - (unsigned)__builtin_clzll(x);
}

/* The bucket of a value in units; beyond the top bucket: the top one. */
static size_t index_of(const pc_hist_t *h, uint64_t v)
{
	uint64_t x = v >> h->shift;
	size_t i;
	if (x < (2u << h->precision)) {
		i = (size_t)x;
	} else {
		unsigned e = msb(x) - h->precision;
		i = ((size_t)e << h->precision) + (size_t)(x >> e);
	}
	return i < h->nbuckets ? i : h->nbuckets - 1;
}

/* The smallest value of bucket i, and the bucket's width, in values. */
static uint64_t lowest_of(const pc_hist_t *h, size_t i, uint64_t *width)
{
	unsigned e = 0;
	uint64_t m = i;
	if (i >= (2u << h->precision)) {
		e = (unsigned)(i >> h->precision) - 1;
		m = i - ((uint64_t)e << h->precision);
	}
	*width = (uint64_t)1 << (e + h->shift);
	return (m << e) << h->shift;
}

static bool config_valid(const pc_hist_config_t *c)
{
	return c->lowest >= 1 && c->highest / 2 >= c->lowest && c->precision >= PC_HIST_PRECISION_MIN &&
	       c->precision <= PC_HIST_PRECISION_MAX;
}

int pc_hist_new(const pc_hist_config_t *cfg, pc_hist_t **out)
{
	pc_hist_config_t def;
	if (!cfg) {
		pc_hist_config_init(&def);
		cfg = &def;
	}
	if (!out || !config_valid(cfg))
		return PC_EINVAL;
	pc_hist_t probe = {.shift = msb(cfg->lowest), .precision = cfg->precision, .nbuckets = SIZE_MAX};
	size_t n = index_of(&probe, cfg->highest) + 1;
	pc_hist_t *h = calloc(1, sizeof(*h) + n * sizeof(h->buckets[0]));
	if (!h)
		return PC_ENOMEM;
	*h = probe;
	h->nbuckets = n;
	h->min = UINT64_MAX;
	*out = h;
	return 0;
}

void pc_hist_free(pc_hist_t *h)
{
	free(h);
}

static void update_min(uint64_t *p, uint64_t v)
{
	uint64_t cur = LD(p);
	while (v < cur && !__atomic_compare_exchange_n(p, &cur, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		;
}

static void update_max(uint64_t *p, uint64_t v)
{
	uint64_t cur = LD(p);
	while (v > cur && !__atomic_compare_exchange_n(p, &cur, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		;
}

void pc_hist_record(pc_hist_t *h, uint64_t value)
{
	if (!h)
		return;
	ADD(&h->buckets[index_of(h, value)], 1);
	ADD(&h->count, 1);
	ADD(&h->sum, value);
	update_min(&h->min, value);
	update_max(&h->max, value);
}

int pc_hist_merge(pc_hist_t *dst, const pc_hist_t *src)
{
	if (!dst || !src || dst == src)
		return PC_EINVAL;
	uint64_t total = 0, width;
	for (size_t i = 0; i < src->nbuckets; i++) {
		uint64_t n = LD(&src->buckets[i]);
		if (n) {
			ADD(&dst->buckets[index_of(dst, lowest_of(src, i, &width))], n);
			total += n;
		}
	}
	if (!total)
		return 0;
	/* The buckets' total, not src->count: dst's count must agree with the
	 * buckets it just received even when src is being recorded into. */
	ADD(&dst->count, total);
	ADD(&dst->sum, LD(&src->sum));
	update_min(&dst->min, LD(&src->min));
	update_max(&dst->max, LD(&src->max));
	return 0;
}

void pc_hist_reset(pc_hist_t *h)
{
	if (!h)
		return;
	for (size_t i = 0; i < h->nbuckets; i++)
		ST(&h->buckets[i], 0);
	ST(&h->count, 0);
	ST(&h->sum, 0);
	ST(&h->min, UINT64_MAX);
	ST(&h->max, 0);
}

int pc_hist_stats(const pc_hist_t *h, pc_hist_stats_t *out)
{
	if (!h || !out)
		return PC_EINVAL;
	uint64_t count = LD(&h->count);
	uint64_t min = LD(&h->min);
	*out = (pc_hist_stats_t){
		.count = count,
		.sum = LD(&h->sum),
		.min = min == UINT64_MAX ? 0 : min,
		.max = LD(&h->max),
	};
	return 0;
}

/* The rank of percentile q among total values: 1..total. */
static uint64_t rank_of(double q, uint64_t total)
{
	double r = ceil(q / 100.0 * (double)total);
	if (r < 1.0)
		return 1;
	return r >= (double)total ? total : (uint64_t)r;
}

int pc_hist_percentile(const pc_hist_t *h, double q, uint64_t *out)
{
	if (!h || !out || !(q >= 0.0 && q <= 100.0))
		return PC_EINVAL;
	*out = 0;
	uint64_t total = 0;
	for (size_t i = 0; i < h->nbuckets; i++)
		total += LD(&h->buckets[i]);
	if (!total)
		return 0;
	uint64_t rank = rank_of(q, total), seen = 0, width = 0, low = 0;
	/* The bucket where the running total reaches the rank; total counts
	 * this very snapshot, so the walk ends inside the array even if the
	 * counters move meanwhile (a bucket read twice may only have grown). */
	for (size_t i = 0; i < h->nbuckets && seen < rank; i++) {
		uint64_t n = LD(&h->buckets[i]);
		seen += n;
		if (n)
			low = lowest_of(h, i, &width);
	}
	uint64_t v = low + (width - 1), max = LD(&h->max);
	*out = v < max ? v : max;
	return 0;
}
