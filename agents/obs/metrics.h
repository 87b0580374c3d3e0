/*
 * A small Prometheus registry: counters, gauges and histograms, each with
 * optional labels, rendered in the text exposition format 0.0.4.
 *
 * Families and series. A family is one metric name with its type, help
 * text and label names, registered once. A series is the family with one
 * value per label name; it is made on first use by pc_metric_series and
 * its handle stays valid until the registry is freed, so a caller looks it
 * up once and keeps it. ^A family holds at most max_series label sets:
 * past that pc_metric_series returns PC_ELIMIT and nothing grows, so label
 * values that come from outside (a hostile peer) cannot exhaust memory.
 *
 * Values. ^A counter only goes up: pc_metric_inc and pc_metric_add_u64 add
 * exact integers, pc_metric_add a non-negative double; ^the rendered value
 * is their sum, printed as an integer while no double was added. A gauge
 * is a double: set, add (either sign), inc, dec. A histogram counts
 * observations in buckets whose upper bounds are fixed at registration
 * (`le`, inclusive) plus +Inf, and keeps their sum; it is backed by plain
 * atomic bucket counters, not by the HDR histogram (histogram.h), so each
 * `le` count is exact. A pulled series (pc_metric_callback) has no value
 * of its own: a callback returns it at render time.
 *
 * Names. ^Metric names match [a-zA-Z_:][a-zA-Z0-9_:]*, label names
 * [a-zA-Z_][a-zA-Z0-9_]* and do not start with "__"; a histogram may not
 * have a label "le". ^A name that is taken, including by the _bucket,
 * _sum or _count series of a histogram, gives PC_EEXIST. Help text and
 * label values are UTF-8; label values are at most PC_METRIC_VALUE_MAX
 * bytes.
 *
 * Output. ^Families come in registration order and series in creation
 * order; a family without series is left out. Each family has its
 * "# HELP" (when it has help text) and "# TYPE" lines once, then its
 * samples. ^Label values escape backslash, double quote and newline;
 * help text escapes backslash and newline. Doubles print in the shortest
 * form that reads back exactly, in the "C" locale whatever the process
 * locale is, and as NaN, +Inf, -Inf. ^A histogram's buckets are
 * cumulative and its _count is its +Inf bucket, also while observations
 * are being made (its _sum may then lag by those in flight).
 *
 * Threads. Every function may be called from any thread. Registration,
 * series lookup and rendering take the registry's lock; updates through a
 * series handle are lock-free atomics (a lookup is a lock and a scan of
 * the family's series: keep the handle, do not look up per update).
 * Callbacks run on the rendering thread with the lock held: they must not
 * call into the registry, and should be quick reads of other modules'
 * statistics.
 */
#ifndef PINCER_AGENTS_OBS_METRICS_H
#define PINCER_AGENTS_OBS_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pc_metrics pc_metrics_t;
typedef struct pc_metric_family pc_metric_family_t;
typedef struct pc_metric pc_metric_t;

typedef enum pc_metric_type {
	PC_METRIC_COUNTER = 1,
	PC_METRIC_GAUGE,
	PC_METRIC_HISTOGRAM,
} pc_metric_type_t;

#define PC_METRIC_LABELS_MAX 8u      /* label names per family */
#define PC_METRIC_BUCKETS_MAX 64u    /* histogram bounds, +Inf aside */
#define PC_METRIC_SERIES_DEFAULT 64u /* max_series when 0 is given */
#define PC_METRIC_SERIES_MAX 4096u
#define PC_METRIC_NAME_MAX 200u  /* bytes of a metric or label name */
#define PC_METRIC_VALUE_MAX 1024u /* bytes of a label value */

typedef struct pc_metric_desc {
	pc_metric_type_t type;
	const char *name;
	const char *help;          /* NULL or "": no HELP line */
	const char *const *labels; /* label names, NULL-terminated; NULL: none */
	const double *buckets;     /* histogram only: finite, strictly increasing */
	size_t nbuckets;           /* histogram only: 1..PC_METRIC_BUCKETS_MAX */
	size_t max_series;         /* 0: PC_METRIC_SERIES_DEFAULT; at most PC_METRIC_SERIES_MAX */
} pc_metric_desc_t;

/* The value of a pulled series, read at render time (see Threads). */
typedef double (*pc_metric_collect_fn)(void *arg);

/* An empty registry. Caller frees with pc_metrics_free. PC_EINVAL,
 * PC_ENOMEM, PC_ESYS. */
int pc_metrics_new(pc_metrics_t **out);
/* Frees the registry, its families and series; every handle dies with it.
 * No other call may be in flight. NULL is ignored. */
void pc_metrics_free(pc_metrics_t *reg);

/* Registers a family. The desc and its strings and arrays are copied.
 * *out is owned by the registry. PC_EINVAL (a bad name, label, bucket list
 * or limit), PC_EEXIST (the name is taken), PC_ENOMEM. */
int pc_metrics_register(pc_metrics_t *reg, const pc_metric_desc_t *desc, pc_metric_family_t **out);

/* The series of `values` (one per label name, in the family's order; NULL
 * for a family without labels), made on first use. The values are copied;
 * *out is owned by the registry. PC_EINVAL (a NULL or bad value), PC_ELIMIT
 * (the family holds max_series label sets already), PC_ESTATE (that label
 * set is a pulled series), PC_ENOMEM. */
int pc_metric_series(pc_metric_family_t *f, const char *const *values, pc_metric_t **out);

/* Makes a pulled series of a counter or gauge family: at render time its
 * value is fn(arg). arg is borrowed until the registry is freed. PC_EINVAL
 * (a histogram family, a NULL fn, a bad value), PC_EEXIST (the label set
 * exists), PC_ELIMIT, PC_ENOMEM. */
int pc_metric_callback(pc_metric_family_t *f, const char *const *values, pc_metric_collect_fn fn, void *arg);

/* Updates. Lock-free. PC_EINVAL for a NULL series, an operation its type
 * does not have (set on a counter, observe on a gauge), a negative or NaN
 * counter increment, or a NaN observation; PC_ESTATE for a pulled series. */
int pc_metric_inc(pc_metric_t *m);                 /* counter, gauge: +1 */
int pc_metric_dec(pc_metric_t *m);                 /* gauge: -1 */
int pc_metric_add_u64(pc_metric_t *m, uint64_t n); /* counter: +n, exact */
int pc_metric_add(pc_metric_t *m, double v);       /* counter (v >= 0), gauge */
int pc_metric_set(pc_metric_t *m, double v);       /* gauge */
int pc_metric_observe(pc_metric_t *m, double v);   /* histogram */

/* The current value of a counter or gauge series (a pulled one: its
 * callback's, called on this thread). PC_EINVAL for a histogram. */
int pc_metric_value(pc_metric_t *m, double *out);

/* Writes the exposition text of every family. *out is NUL-terminated and
 * caller frees it with free(); *len (when len is not NULL) is its length.
 * PC_EINVAL, PC_ENOMEM. */
int pc_metrics_render(pc_metrics_t *reg, char **out, size_t *len);

#ifdef __cplusplus
}
#endif
#endif
