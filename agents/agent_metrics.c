/*
 * The agent layer's metrics: its families registered once (runs,
 * attempts, lanes, model calls by provider and model, store writes,
 * sessions), the bounded provider/model label series, and the run-end
 * and retry-estimate bookkeeping the actors report into.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent_internal.h"
#include "runtime/clock.h"

/* Run and attempt durations: from 10 ms to an hour. */
static const double duration_buckets[] = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600,
					  1800, 3600};
/* Time to first token: from 5 ms to a minute. */
static const double ttft_buckets[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60};
/* Queue and lane waits (measured in whole milliseconds): 0 ms, then up to
 * 5 min. */
static const double wait_buckets[] = {0, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 2, 5, 10, 30, 60, 300};

static int histogram(pc_metrics_t *reg, const char *name, const char *help, const double *b, size_t nb,
		     pc_metric_t **out)
{
	pc_metric_desc_t d = {.type = PC_METRIC_HISTOGRAM, .name = name, .help = help, .buckets = b, .nbuckets = nb,
			      .max_series = 1};
	pc_metric_family_t *f = NULL;
	int rc = pc_metrics_register(reg, &d, &f);
	return rc == 0 ? pc_metric_series(f, NULL, out) : rc;
}

/* A counter family with one label, its n series made now (out[i] for
 * values[i]): a scrape shows every value, zeros included. */
static int counters(pc_metrics_t *reg, const char *name, const char *help, const char *label,
		    const char *const *values, size_t n, pc_metric_t **out)
{
	const char *labels[] = {label, NULL};
	pc_metric_desc_t d = {.type = PC_METRIC_COUNTER, .name = name, .help = help, .labels = labels, .max_series = n};
	pc_metric_family_t *f = NULL;
	int rc = pc_metrics_register(reg, &d, &f);
	for (size_t i = 0; rc == 0 && i < n; i++) {
		const char *v[] = {values[i], NULL};
		rc = pc_metric_series(f, v, &out[i]);
	}
	return rc;
}

/* The series of one pair; false when the families are full (or a name
 * cannot be a label value). */
static bool model_series(pc__agent_metrics_t *m, const char *provider, const char *model, pc__model_series_t *out)
{
	static const char *const kinds[PC__TOKEN_KINDS] = {"input", "output", "cache_read", "cache_write"};
	const char *v[] = {provider, model, NULL, NULL};
	if (pc_metric_series(m->ttft, v, &out->ttft) != 0)
		return false;
	for (size_t i = 0; i < PC__TOKEN_KINDS; i++) {
		v[2] = kinds[i];
		if (pc_metric_series(m->tokens, v, &out->tokens[i]) != 0)
			return false;
	}
	return true;
}

int pc__agent_metrics_new(pc_agent_t *a)
{
	static const char *const outcomes[PC__RUN_OUTCOMES] = {"ok", "error", "aborted", "timeout"};
	const char *reasons[PC_FAILOVER_REASON_COUNT];
	for (int i = 0; i < PC_FAILOVER_REASON_COUNT; i++)
		reasons[i] = pc_failover_reason_name((pc_failover_reason_t)i);
	pc__agent_metrics_t *m = &a->metrics;
	int rc = pc_metrics_new(&m->reg);
	if (rc == 0)
		rc = counters(m->reg, "pincer_agent_runs_total", "Runs ended, by outcome.", "outcome", outcomes,
			      PC__RUN_OUTCOMES, m->runs);
	if (rc == 0)
		rc = histogram(m->reg, "pincer_agent_run_duration_seconds", "Runs from start to end.",
			       duration_buckets, sizeof(duration_buckets) / sizeof(duration_buckets[0]), &m->run_seconds);
	if (rc == 0)
		rc = histogram(m->reg, "pincer_agent_attempt_duration_seconds", "Attempts from start to end.",
			       duration_buckets, sizeof(duration_buckets) / sizeof(duration_buckets[0]),
			       &m->attempt_seconds);
	if (rc == 0)
		rc = counters(m->reg, "pincer_agent_attempt_errors_total", "Failed attempts, by failover reason.",
			      "reason", reasons, PC_FAILOVER_REASON_COUNT, m->attempt_errors);
	static const char *const tok_labels[] = {"provider", "model", "kind", NULL};
	pc_metric_desc_t td = {.type = PC_METRIC_COUNTER, .name = "pincer_agent_tokens_total",
			       .help = "Tokens the providers reported, by provider, model and kind.",
			       .labels = tok_labels, .max_series = (PC__MODEL_SERIES_MAX + 1) * PC__TOKEN_KINDS};
	if (rc == 0)
		rc = pc_metrics_register(m->reg, &td, &m->tokens);
	if (rc == 0)
		rc = histogram(m->reg, "pincer_agent_session_queue_wait_seconds",
			       "Messages' waits in their session's queue, from acceptance to the start of their run.",
			       wait_buckets, sizeof(wait_buckets) / sizeof(wait_buckets[0]), &m->queue_wait_seconds);
	if (rc == 0)
		rc = histogram(m->reg, "pincer_agent_lane_wait_seconds",
			       "Runs' waits for the global lane, from the request to the grant.", wait_buckets,
			       sizeof(wait_buckets) / sizeof(wait_buckets[0]), &m->lane_wait_seconds);
	if (rc == 0) {
		pc_metric_desc_t ld = {.type = PC_METRIC_COUNTER, .name = "pincer_session_lock_overdue_total",
				       .help = "Session write lock holds reported past their max hold (every 60 s "
					       "while they last; not released).",
				       .max_series = 1};
		pc_metric_family_t *f = NULL;
		rc = pc_metrics_register(m->reg, &ld, &f);
		if (rc == 0)
			rc = pc_metric_series(f, NULL, &m->lock_overdue);
	}
	if (rc == 0) {
		/* one series per lifecycle machine, in pc__lc_machine_t order */
		static const char *const machine_labels[] = {"machine", NULL};
		static const char *const machines[PC__LC_MACHINES] = {
		    "run", "attempt", "session", "model_call", "tool_call", "tool", "gwclient"};
		pc_metric_desc_t id = {.type = PC_METRIC_COUNTER, .name = "pincer_lifecycle_illegal_total",
				       .help = "Lifecycle transitions refused as illegal, by state machine.",
				       .labels = machine_labels, .max_series = 8};
		pc_metric_family_t *f = NULL;
		rc = pc_metrics_register(m->reg, &id, &f);
		for (size_t i = 0; rc == 0 && i < PC__LC_MACHINES; i++)
			rc = pc_metric_series(f, &machines[i], &m->illegal[i]);
	}
	static const char *const ttft_labels[] = {"provider", "model", NULL};
	pc_metric_desc_t fd = {.type = PC_METRIC_HISTOGRAM, .name = "pincer_provider_ttft_seconds",
			       .help = "Model calls from the request to the first streamed token, by provider and model.",
			       .labels = ttft_labels, .buckets = ttft_buckets,
			       .nbuckets = sizeof(ttft_buckets) / sizeof(ttft_buckets[0]),
			       .max_series = PC__MODEL_SERIES_MAX + 1};
	if (rc == 0)
		rc = pc_metrics_register(m->reg, &fd, &m->ttft);
	/* the overflow pair exists from the start: it has room whatever came
	 * first; so do the configured models, so a scrape shows them at zero */
	pc__model_series_t s;
	if (rc == 0 && !model_series(m, "other", "other", &s))
		rc = PC_ENOMEM;
	const pc_agent_defaults_t *d = &a->cfg->agent;
	for (size_t i = 0; rc == 0 && i <= d->fallback_count; i++) {
		const pc_model_ref_t *r = i == 0 ? &d->model : &d->fallbacks[i - 1];
		if (r->provider && r->model)
			(void)model_series(m, r->provider, r->model, &s);
	}
	return rc;
}

void pc__metrics_model(pc_agent_t *a, const char *provider, const char *model, pc__model_series_t *out)
{
	pc__agent_metrics_t *m = &a->metrics;
	if (!model_series(m, provider ? provider : "", model ? model : "", out) &&
	    !model_series(m, "other", "other", out))
		*out = (pc__model_series_t){0}; /* out of memory: updates of NULL series do nothing */
}

void pc__metrics_run_end(pc_agent_t *a, pc_run_status_t status, bool started, uint64_t ms)
{
	if (pc_run_status_terminal(status))
		(void)pc_metric_inc(a->metrics.runs[status - PC_RUN_STATUS_OK]);
	if (started) {
		pc__observe_ms(a->metrics.run_seconds, ms);
		__atomic_add_fetch(&a->metrics.run_ms_sum, ms, __ATOMIC_RELAXED);
		__atomic_add_fetch(&a->metrics.run_ms_count, 1, __ATOMIC_RELAXED);
	}
}

uint64_t pc_agent_retry_estimate_ms(pc_agent_t *a, const char *session_key)
{
	if (!a)
		return 1000;
	uint64_t n = __atomic_load_n(&a->metrics.run_ms_count, __ATOMIC_RELAXED);
	uint64_t typical = n ? __atomic_load_n(&a->metrics.run_ms_sum, __ATOMIC_RELAXED) / n : 0;
	uint64_t wait = a->cfg->agent.queue.debounce_ms;
	char run_id[PC_RUN_ID_MAX + 1];
	pc_run_info_t info;
	if (session_key && pc_run_registry_active(a->runs, session_key, run_id, NULL) == 0 &&
	    pc_run_registry_get(a->runs, run_id, &info) == 0 && info.started_ms > 0) {
		int64_t now = pc__clock_wall_ms();
		uint64_t elapsed = now > info.started_ms ? (uint64_t)(now - info.started_ms) : 0;
		/* a run already past the typical one is guessed to need half
		 * as long again as it has taken */
		wait += typical > elapsed ? typical - elapsed : elapsed / 2;
	} else {
		wait += typical;
	}
	return wait < 1000 ? 1000 : wait > 3600000 ? 3600000 : wait;
}

pc_metrics_t *pc_agent_metrics(pc_agent_t *a) { return a ? a->metrics.reg : NULL; }

pc_metric_t *pc_agent_lifecycle_illegal(pc_agent_t *a, const char *machine)
{
	if (a && machine && !strcmp(machine, "gwclient"))
		return a->metrics.illegal[PC__LC_GWCLIENT];
	return NULL;
}
