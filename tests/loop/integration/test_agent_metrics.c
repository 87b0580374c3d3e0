/*
 * The agent's metrics (pc_agent_metrics) through the whole loop against
 * the embedded mock LLM: runs counted by outcome (ok, error, aborted),
 * one run-duration, queue-wait and lane-wait observation per run, one
 * attempt-duration observation per attempt, failed attempts by failover
 * reason, tokens, time to first token for the calls that streamed, and
 * exact totals when many sessions record at once.
 */
#include <criterion/criterion.h>

#include <pthread.h>

#include "agent_harness.h"

TestSuite(agent_metrics, .timeout = 120);

/* One provider, no fallback, one retry at most: the attempts are few and
 * known. */
#define METRICS_CONFIG                                                                             \
	"{\"providers\":{\"mock\":{\"api\":\"openai-completions\",\"embedded\":true,\"apiKey\":\"k\"}}," \
	"\"agents\":{\"defaults\":{\"model\":\"mock/m1\",\"maxConcurrent\":4,\"sessionIdleSeconds\":1}}}"

#define SLOW_STREAM "[[mock:{\"text\":\"one two three four five six seven eight\",\"delay_ms\":400}]]"
#define BAD_REQUEST "[[mock:{\"kind\":\"error\",\"status\":400}]]"

/* The agent's exposition text (the caller frees). */
static char *render(harness_t *h)
{
	char *text = NULL;
	cr_assert_eq(pc_metrics_render(pc_agent_metrics(h->agent), &text, NULL), 0);
	return text;
}

/* The value of the sample `series` (name and labels, as printed), or -1. */
static double sample(const char *text, const char *series)
{
	size_t n = strlen(series);
	for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
		if (!strncmp(p, series, n) && p[n] == ' ')
			return strtod(p + n + 1, NULL);
	}
	return -1;
}

static void run_to_end(harness_t *h, const char *key, const char *msg, pc_run_status_t want)
{
	char run[80];
	cr_assert_eq(submit(h, key, msg, run), PC_AGENT_STARTED);
	pc_agent_wait_result_t w = wait_run(h, run, 20000);
	cr_assert_eq(w.run.status, want, "run %s: %s", run, pc_run_status_name(w.run.status));
}

/* A slow answer aborted once its first delta arrived. */
static void run_aborted(harness_t *h, const char *key)
{
	pc_event_sub_t *sub = session_sub(h, key);
	char run[80];
	cr_assert_eq(submit(h, key, "story " SLOW_STREAM, run), PC_AGENT_STARTED);
	cr_assert(await_event(sub, PC_EVENT_ASSISTANT, NULL, 10000, NULL, 0), "no delta");
	cr_assert_eq(pc_agent_abort_run(h->agent, run), 0);
	pc_agent_wait_result_t w = wait_run(h, run, 10000);
	cr_assert_eq(w.run.status, PC_RUN_STATUS_ABORTED);
	session_unsub(h, key, sub);
}

Test(agent_metrics, runs_attempts_tokens_and_waits_are_counted)
{
	harness_t h;
	harness_start_with(&h, METRICS_CONFIG, "{}", NULL);
	char *text = render(&h);
	/* every family is there from the start, at zero */
	cr_assert_eq(sample(text, "pincer_agent_runs_total{outcome=\"ok\"}"), 0, "%s", text);
	cr_assert_eq(sample(text, "pincer_agent_runs_total{outcome=\"timeout\"}"), 0);
	cr_assert_eq(sample(text, "pincer_agent_run_duration_seconds_count"), 0);
	cr_assert_eq(sample(text, "pincer_provider_ttft_seconds_count{provider=\"mock\",model=\"m1\"}"), 0);
	cr_assert_eq(sample(text, "pincer_agent_attempt_errors_total{reason=\"format\"}"), 0);
	free(text);

	run_to_end(&h, "m-ok", "hello", PC_RUN_STATUS_OK);
	run_to_end(&h, "m-ok", "hello again", PC_RUN_STATUS_OK);
	run_to_end(&h, "m-err", "bad " BAD_REQUEST, PC_RUN_STATUS_ERROR);
	run_aborted(&h, "m-abort");

	pc_agent_stats_t st;
	pc_agent_stats(h.agent, &st);
	text = render(&h);
	cr_assert_eq(sample(text, "pincer_agent_runs_total{outcome=\"ok\"}"), 2, "%s", text);
	cr_assert_eq(sample(text, "pincer_agent_runs_total{outcome=\"error\"}"), 1);
	cr_assert_eq(sample(text, "pincer_agent_runs_total{outcome=\"aborted\"}"), 1);
	cr_assert_eq(sample(text, "pincer_agent_runs_total{outcome=\"timeout\"}"), 0);
	/* one duration and one lane wait per run */
	cr_assert_eq(sample(text, "pincer_agent_run_duration_seconds_count"), 4);
	cr_assert_eq(sample(text, "pincer_agent_run_duration_seconds_bucket{le=\"+Inf\"}"), 4);
	cr_assert_eq(sample(text, "pincer_agent_lane_wait_seconds_count"), 4);
	cr_assert_eq(sample(text, "pincer_agent_session_queue_wait_seconds_count"), 4);
	/* the aborted run streamed for at least one delta's wait */
	cr_assert_gt(sample(text, "pincer_agent_run_duration_seconds_sum"), 0);
	/* one duration per attempt; the bad request failed as a format error */
	cr_assert_eq(sample(text, "pincer_agent_attempt_duration_seconds_count"), (double)st.attempts);
	cr_assert_geq(st.attempts, 4);
	cr_assert_geq(sample(text, "pincer_agent_attempt_errors_total{reason=\"format\"}"), 1);
	/* time to first token: the two answers and the stream that was cut,
	 * not the error, which streamed nothing */
	cr_assert_eq(sample(text, "pincer_provider_ttft_seconds_count{provider=\"mock\",model=\"m1\"}"), 3);
	cr_assert_gt(sample(text, "pincer_agent_tokens_total{provider=\"mock\",model=\"m1\",kind=\"input\"}"), 0);
	cr_assert_gt(sample(text, "pincer_agent_tokens_total{provider=\"mock\",model=\"m1\",kind=\"output\"}"), 0);
	free(text);
	harness_stop_no_leaks(&h);
}

/* Many sessions record at once from every worker: the totals are exact. */
typedef struct burst {
	harness_t *h;
	int index;
	int runs;
} burst_t;

static void *burst_thread(void *arg)
{
	burst_t *b = arg;
	char key[32], run[80];
	snprintf(key, sizeof(key), "burst-%d", b->index);
	for (int i = 0; i < b->runs; i++) {
		pc_agent_params_t p = {.session_key = key, .message = "hi"};
		pc_agent_accepted_t acc;
		if (pc_agent_submit(b->h->agent, &p, &acc) != 0)
			return NULL;
		snprintf(run, sizeof(run), "%s", acc.run_id);
		pc_agent_wait_result_t w;
		if (pc_agent_wait(b->h->agent, run, 20000, &w) != 0)
			return NULL;
	}
	return NULL;
}

Test(agent_metrics, concurrent_runs_add_up_exactly)
{
	enum { THREADS = 6, RUNS = 8 };
	harness_t h;
	harness_start_with(&h, METRICS_CONFIG, "{}", NULL);
	pthread_t t[THREADS];
	burst_t b[THREADS];
	for (int i = 0; i < THREADS; i++) {
		b[i] = (burst_t){&h, i, RUNS};
		cr_assert_eq(pthread_create(&t[i], NULL, burst_thread, &b[i]), 0);
	}
	for (int i = 0; i < THREADS; i++)
		pthread_join(t[i], NULL);
	char *text = render(&h);
	cr_assert_eq(sample(text, "pincer_agent_runs_total{outcome=\"ok\"}"), THREADS * RUNS, "%s", text);
	cr_assert_eq(sample(text, "pincer_agent_run_duration_seconds_count"), THREADS * RUNS);
	cr_assert_eq(sample(text, "pincer_agent_lane_wait_seconds_count"), THREADS * RUNS);
	cr_assert_eq(sample(text, "pincer_agent_session_queue_wait_seconds_count"), THREADS * RUNS);
	cr_assert_eq(sample(text, "pincer_agent_attempt_duration_seconds_count"), THREADS * RUNS);
	cr_assert_eq(sample(text, "pincer_provider_ttft_seconds_count{provider=\"mock\",model=\"m1\"}"), THREADS * RUNS);
	free(text);
	harness_stop_no_leaks(&h);
}

/* Time to first token and tokens carry the provider and model; names from
 * outside (a run's model override) cannot grow the families without bound:
 * past PC__MODEL_SERIES_MAX pairs they count as provider="other". */
Test(agent_metrics, model_labels_are_bounded)
{
	harness_t h;
	harness_start_with(&h, METRICS_CONFIG, "{}", NULL);
	enum { MODELS = PC__MODEL_SERIES_MAX + 6 };
	for (int i = 0; i < MODELS; i++) {
		char model[32], run[80];
		snprintf(model, sizeof(model), "mock/x%d", i);
		pc_agent_params_t p = {.session_key = "labels", .message = "hi", .model = model};
		pc_agent_accepted_t acc;
		cr_assert_eq(pc_agent_submit(h.agent, &p, &acc), 0);
		snprintf(run, sizeof(run), "%s", acc.run_id);
		cr_assert_eq(wait_run(&h, run, 20000).run.status, PC_RUN_STATUS_OK);
	}
	char *text = render(&h);
	cr_assert_eq(sample(text, "pincer_provider_ttft_seconds_count{provider=\"mock\",model=\"x0\"}"), 1, "%s", text);
	cr_assert_gt(sample(text, "pincer_provider_ttft_seconds_count{provider=\"other\",model=\"other\"}"), 0);
	cr_assert_gt(sample(text, "pincer_agent_tokens_total{provider=\"other\",model=\"other\",kind=\"output\"}"), 0);
	size_t series = 0;
	for (const char *p = strstr(text, "pincer_provider_ttft_seconds_count{"); p;
	     p = strstr(p + 1, "pincer_provider_ttft_seconds_count{"))
		series++;
	cr_assert_leq(series, PC__MODEL_SERIES_MAX + 1);
	free(text);
	harness_stop_no_leaks(&h);
}
