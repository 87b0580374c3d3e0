/*
 * obs: what the agent layer tells its operators. This is the part's one
 * public header; the pieces it gathers say the details.
 *
 *   log.h            structured log lines (JSON or logfmt), levels, fields
 *   metrics.h        counters, gauges and histograms in a registry, and
 *                    their Prometheus text (histogram.h: the buckets)
 *   trace.h          PINCER_TRACE: one line per lifecycle transition
 *   redact.h         secrets masked before text reaches a log or an answer
 *   process_stats.h  the process's CPU, memory and thread figures
 *
 * Ownership: a logger or a metrics registry belongs to whoever made it
 * and is freed by it, after every user is done; metric handles live as
 * long as their registry.
 * Threads: logging and metric updates may come from any thread at once;
 * making and freeing a logger or registry is one thread's business.
 */
#ifndef PINCER_AGENTS_OBS_OBS_H
#define PINCER_AGENTS_OBS_OBS_H

#include "histogram.h"
#include "log.h"
#include "metrics.h"
#include "process_stats.h"
#include "redact.h"
#include "trace.h"

#endif
