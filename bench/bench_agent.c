/*
 * agent: whole agent runs in-process against the embedded mock LLM over
 * loopback (no latency, a one-chunk answer "ok"), with 1, 100 and 10,000
 * sessions kept busy at once: runs/s and the process's CPU per run, and in
 * the same process, against the same mock, with the same request body and
 * headers the agent sent, two baselines at the same concurrency:
 *
 *   curl_multi  one plain thread driving curl-multi (SSE parser + decoder
 *               in the write callback, the assembled message printed as
 *               JSON): the raw transport, as in bench_stream;
 *   model_call  the provider stream actors (pc_model_call_start, deltas
 *               forwarded to an owner actor): the transport as the agent
 *               loop uses it.
 *
 * The mock serves on the same runtime and I/O thread in every mode, so
 * each figure includes it; the differences are the client's. The loop's
 * own cost is the agent's CPU per run minus a baseline's CPU per request:
 * loop_cpu_us (against model_call) and loop_vs_curl_cpu_us (against
 * curl_multi: the loop plus Pincer's I/O layer). Between the phases, the
 * CPU of one fdatasync on the store's disk (fsync_cpu_us), times the
 * store's commits per run, gives the least a run's durable writes can
 * cost here (durability_floor_cpu_us): three commits a run at one session
 * (the run row, the attempt's transcript and usage, the run's end),
 * a small share of one when many sessions' writes share a commit.
 *
 * A run is one message through the real session, run and attempt actors:
 * the run row in the store (durable before the message is acknowledged),
 * the history read, the user and assistant messages appended, the attempt
 * row and the run's end, its events, one model call. Each session slot
 * moves to a fresh session key every --turns runs (default 8), so the
 * history sent with each request stays short and every configuration
 * measures the same work; --turns 0 keeps one key per slot for ever.
 *
 * The three take turns: --rounds N (default 3) rounds of agent, curl-multi
 * and model_call, each measuring R/N runs or S/N seconds, summed; so a
 * change in the machine's speed during the run falls on all of them alike.
 * Each round runs on session keys of its own.
 *
 *   bench_agent [--workers W] [--sessions N] [--runs R] [--seconds S] [--turns K]
 *               [--rounds N] [--only agent|curl|model_call] [--mock inproc|child]
 *
 * The mock is in-process (the agent's embedded mock) unless the client and
 * server ends of every connection would not fit in the open-file limit
 * (10,000 sessions under a 20,000 hard limit): then it runs in a forked
 * child (its own runtime, one worker, one I/O thread; the provider then
 * has its address instead of being embedded), and the child's CPU time
 * (/proc/PID/stat) is added to this process's, so the figures still
 * include the mock. The JSON line says which ("mock").
 *
 * One JSON line per session count ("agent_runs"). Everything talks to
 * 127.0.0.1 only; the temporary store directory is removed at the end.
 */
#include <curl/curl.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "agent_env.h"
#include "agents/providers/model_call.h"
#include "agents/providers/request.h"
#include "agents/providers/stream.h"
#include "io/sse.h"

#define SCENARIO "{\"default\":{\"text\":\"ok\",\"chunks\":1}}"
/* ENV_CONFIG_EMBEDDED with the mock in a child process (its address given). */
#define CONFIG_CHILD                                                                               \
	"{\"providers\":{\"mock\":{\"api\":\"openai-completions\","                              \
	"\"baseUrl\":\"http://127.0.0.1:%u/v1\"}},"                                                \
	"\"agents\":{\"defaults\":{\"model\":\"mock/m1\",\"workspace\":\"%s\","                     \
	"\"maxConcurrent\":4096,\"sessionIdleSeconds\":60}}}"

typedef struct params {
	uint32_t workers, sessions, turns;
	uint64_t runs;   /* measured */
	double seconds;  /* cap on the measured phase */
	uint32_t rounds; /* agent, curl and model_call phases take turns this often */
	int only;        /* -1 all; 0 agent; 1 curl; 2 model_call */
	int mock;        /* -1 in-process when the open-file limit allows; 0 in-process; 1 child */
} params_t;

/* The durability floor: CPU of one fdatasync after a 4 KiB overwrite, as a
 * store commit ends (the log is rewritten in place once checkpointed), on
 * a file in the store's directory, measured on this thread. A run whose
 * writes need C commits of their own cannot cost less than C of these. */
static double fsync_cpu_us(const char *dir, uint32_t n)
{
	char path[128];
	snprintf(path, sizeof(path), "%s/fsync-floor", dir);
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	if (fd < 0)
		bench_fail("open %s", path);
	char page[4096];
	memset(page, 'x', sizeof(page));
	for (uint32_t i = 0; i < 16; i++)
		if (pwrite(fd, page, sizeof(page), (off_t)i * 4096) != (ssize_t)sizeof(page))
			bench_fail("pwrite");
	if (fdatasync(fd) != 0)
		bench_fail("fdatasync");
	double cpu0 = bench_thread_cpu_s();
	for (uint32_t i = 0; i < n; i++) {
		if (pwrite(fd, page, sizeof(page), (off_t)(i % 16) * 4096) != (ssize_t)sizeof(page) ||
		    fdatasync(fd) != 0)
			bench_fail("pwrite/fdatasync");
	}
	double us = (bench_thread_cpu_s() - cpu0) * 1e6;
	close(fd);
	unlink(path);
	return us / n;
}

/* The runtime's counters summed over its workers: what one run costs in
 * messages, actor turns and sleeps, read against the run count. */
typedef struct rt_counts {
	uint64_t handled, turns, parks, wakeups, external, spawned, blocking;
} rt_counts_t;

static void rt_counts(pc_runtime_t *rt, rt_counts_t *out)
{
	pc_runtime_stats_t st;
	pc_worker_stats_t w[64];
	uint32_t n = pc_runtime_stats(rt, &st, w, 64);
	*out = (rt_counts_t){.external = st.sent_external, .spawned = st.spawned, .blocking = st.blocking_done};
	for (uint32_t i = 0; i < n && i < 64; i++) {
		out->handled += w[i].handled;
		out->turns += w[i].turns;
		out->parks += w[i].parks;
		out->wakeups += w[i].wakeups;
	}
}

/* What the agent's phases did, summed over the rounds. */
typedef struct phase_counts {
	uint64_t runs, attempts, writes, batches, write_cpu_ns;
	rt_counts_t rt;
} phase_counts_t;

static void counts_snap(agent_env_t *e, phase_counts_t *out)
{
	pc_agent_stats_t st;
	pc_agent_stats(e->agent, &st);
	pc_store_stats_t ss;
	pc_store_stats(e->store, &ss);
	*out = (phase_counts_t){.runs = st.runs_finished, .attempts = st.attempts, .writes = ss.writes,
				.batches = ss.batches, .write_cpu_ns = ss.write_cpu_ns};
	rt_counts(e->rt, &out->rt);
}

static void counts_add(phase_counts_t *sum, const phase_counts_t *a, const phase_counts_t *b)
{
	sum->runs += b->runs - a->runs;
	sum->attempts += b->attempts - a->attempts;
	sum->writes += b->writes - a->writes;
	sum->batches += b->batches - a->batches;
	sum->write_cpu_ns += b->write_cpu_ns - a->write_cpu_ns;
	sum->rt.handled += b->rt.handled - a->rt.handled;
	sum->rt.turns += b->rt.turns - a->rt.turns;
	sum->rt.parks += b->rt.parks - a->rt.parks;
	sum->rt.wakeups += b->rt.wakeups - a->rt.wakeups;
	sum->rt.external += b->rt.external - a->rt.external;
	sum->rt.spawned += b->rt.spawned - a->rt.spawned;
	sum->rt.blocking += b->rt.blocking - a->rt.blocking;
}

static void result_add(result_t *sum, const result_t *r)
{
	sum->n += r->n;
	sum->wall += r->wall;
	sum->cpu += r->cpu;
	sum->ok += r->ok;
	sum->errors += r->errors;
	sum->refused += r->refused;
}

/* ---- baseline 1: a plain curl-multi loop on its own thread --------------- */

typedef struct slot {
	CURL *easy;
	parse_t parse;
} slot_t;

static size_t on_write(char *data, size_t size, size_t n, void *arg)
{
	slot_t *s = arg;
	return pc_sse_feed(s->parse.sse, data, size * n) == 0 ? size * n : 0;
}

typedef struct curl_job {
	const params_t *p;
	const request_t *req;
	window_t w;
	uint64_t ok, errors;
} curl_job_t;

static void slot_start(CURLM *multi, slot_t *s, const request_t *req, struct curl_slist *headers)
{
	if (!s->easy) {
		s->easy = curl_easy_init();
		curl_easy_setopt(s->easy, CURLOPT_URL, req->url);
		curl_easy_setopt(s->easy, CURLOPT_HTTPHEADER, headers);
		curl_easy_setopt(s->easy, CURLOPT_POSTFIELDS, req->body);
		curl_easy_setopt(s->easy, CURLOPT_WRITEFUNCTION, on_write);
		curl_easy_setopt(s->easy, CURLOPT_WRITEDATA, s);
		curl_easy_setopt(s->easy, CURLOPT_PRIVATE, s);
		curl_easy_setopt(s->easy, CURLOPT_NOSIGNAL, 1L);
	}
	parse_init(&s->parse);
	if (curl_multi_add_handle(multi, s->easy) != CURLM_OK)
		bench_fail("curl_multi_add_handle");
}

static void *curl_thread(void *arg)
{
	curl_job_t *j = arg;
	uint32_t conc = j->p->sessions;
	CURLM *multi = curl_multi_init();
	curl_multi_setopt(multi, CURLMOPT_MAX_HOST_CONNECTIONS, (long)conc);
	curl_multi_setopt(multi, CURLMOPT_MAXCONNECTS, (long)conc);
	struct curl_slist *h = curl_slist_append(NULL, "Expect:");
	for (size_t i = 0; i < j->req->header_count; i++)
		h = curl_slist_append(h, j->req->headers[i]);
	slot_t *slots = calloc(conc, sizeof(*slots));
	uint64_t started = 0, finished = 0;
	bool stop = false;
	/* the first requests go out 256 per turn of the loop: 10,000 connects
	 * at once overflow the listen backlog and a few fail */
	uint32_t opened = 0;
	double deadline = bench_now_s() + 4 * BENCH_TIMEOUT_S;
	while ((opened < conc && !stop) || finished < started) {
		for (uint32_t k = 0; k < 256 && opened < conc && !stop; k++, opened++, started++)
			slot_start(multi, &slots[opened], j->req, h);
		int running;
		curl_multi_perform(multi, &running);
		CURLMsg *m;
		int left;
		while ((m = curl_multi_info_read(multi, &left))) {
			if (m->msg != CURLMSG_DONE)
				continue;
			slot_t *s;
			curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&s);
			bool good = m->data.result == CURLE_OK;
			curl_multi_remove_handle(multi, s->easy);
			if (!good && j->errors < 3)
				{ long oe = 0; curl_easy_getinfo(m->easy_handle, CURLINFO_OS_ERRNO, &oe); fprintf(stderr, "bench_agent: curl: %s (errno %ld)\n", curl_easy_strerror(m->data.result), oe); }
			good = parse_finish(&s->parse) && good;
			j->ok += good;
			j->errors += !good;
			finished++;
			if (!stop && window_tick(&j->w, finished))
				stop = true;
			if (!stop) {
				slot_start(multi, s, j->req, h);
				started++;
			}
		}
		if (opened < conc && !stop)
			curl_multi_poll(multi, NULL, 0, 1, NULL);
		else if (finished < started)
			curl_multi_poll(multi, NULL, 0, 1000, NULL);
		if (bench_now_s() > deadline)
			bench_fail("curl_multi timed out");
	}
	for (uint32_t i = 0; i < conc; i++)
		if (slots[i].easy)
			curl_easy_cleanup(slots[i].easy);
	free(slots);
	curl_slist_free_all(h);
	curl_multi_cleanup(multi);
	return NULL;
}

static void run_curl(const params_t *p, const request_t *req, window_t w, result_t *out)
{
	curl_job_t j = {.p = p, .req = req, .w = w};
	pthread_t t;
	if (pthread_create(&t, NULL, curl_thread, &j) != 0)
		bench_fail("pthread_create");
	pthread_join(t, NULL);
	window_result(&j.w, out);
	out->ok = j.ok;
	out->errors = j.errors;
}

/* ---- baseline 2: provider stream actors ----------------------------------- */

enum { MSG_GO = 1 };

typedef struct mdrv {
	pc_io_t *io;
	const params_t *p;
	pc_model_call_config_t cfg;
	uint64_t submitted, finished, ok, errors;
	bool stop;
	window_t w;
	bench_latch_t done;
} mdrv_t;

static void call_start(pc_ctx_t *ctx, mdrv_t *d)
{
	d->submitted++;
	if (pc_model_call_start(d->io, &d->cfg, pc_self(ctx), NULL) != 0)
		bench_fail("pc_model_call_start");
}

static int model_drive(pc_ctx_t *ctx, void *state, pc_msg_t *msg)
{
	mdrv_t *d = state;
	if (msg->type == MSG_GO) {
		for (uint32_t i = 0; i < d->p->sessions; i++)
			call_start(ctx, d);
		return 0;
	}
	if (msg->type != PC_MSG_MODEL_DONE)
		return 0;
	const pc_model_done_msg_t *dm = pc_msg_cdata(msg);
	d->finished++;
	d->ok += dm->result == 0;
	d->errors += dm->result != 0;
	if (!d->stop && window_tick(&d->w, d->finished))
		d->stop = true;
	if (!d->stop)
		call_start(ctx, d);
	else if (d->finished == d->submitted)
		bench_latch_signal(&d->done);
	return 0;
}

static const pc_behavior_t model_driver_b = {"bench-model-driver", model_drive, NULL};

static void run_model_call(agent_env_t *e, const params_t *p, const request_t *req, window_t w, result_t *out)
{
	mdrv_t d = {
		.io = e->io,
		.p = p,
		.cfg = {.api = PC_API_OPENAI_COMPLETIONS, .url = req->url,
			.headers = (const char *const *)req->headers, .header_count = req->header_count,
			.body = req->body, .body_len = strlen(req->body), .provider = "mock", .deltas = true},
		.w = w,
	};
	bench_latch_init(&d.done);
	pc_actor_t *a = NULL;
	if (pc_spawn(e->rt, &model_driver_b, &d, &a))
		bench_fail("spawn");
	pc_send(a, pc_msg_new(MSG_GO, 0));
	bench_latch_wait(&d.done, 4 * BENCH_TIMEOUT_S, "model calls");
	pc_actor_stop(a, PC_EXIT_NORMAL);
	pc_actor_release(a);
	window_result(&d.w, out);
	out->ok = d.ok;
	out->errors = d.errors;
	bench_latch_destroy(&d.done);
}

/* ---- one configuration ------------------------------------------------------ */

static void run_config(const params_t *p, bool child)
{
	uint32_t conc = p->sessions;
	uint16_t port = 0;
	pid_t mock = child ? bench_mock_child(SCENARIO, 1, &port) : 0;
	/* every session's connection kept alive; the mock's server side too */
	pc_io_config_t icfg = {.threads = 1, .max_host_connections = conc + 64,
			       .max_idle_connections = conc + 64};
	agent_env_t e;
	env_base_start(&e, p->workers, &icfg);
	char json[1024];
	if (child)
		snprintf(json, sizeof(json), CONFIG_CHILD, (unsigned)port, e.dir);
	else
		snprintf(json, sizeof(json), ENV_CONFIG_EMBEDDED, e.dir);
	env_agent_start(&e, json, conc > 4096 ? conc : 0, SCENARIO);
	if (!child)
		port = pc_agent_mock_port(e.agent);
	/* warm-up: every session slot's first runs (session actors, connections) */
	window_t w = {.warm = conc >= 1000 ? conc : (conc * 4 > 400 ? conc * 4 : 400), .runs = p->runs,
		      .seconds = p->seconds, .mock = mock};
	result_t r[3];
	memset(r, 0, sizeof(r));
	/* The phases take turns, so a change in the machine's speed during the
	 * run (other tenants, vCPUs moving) falls on all of them alike. Each
	 * round after the first warms up with one run per session slot. */
	uint32_t rounds = p->rounds ? p->rounds : 1;
	window_t wr = w;
	wr.runs = p->runs / rounds ? p->runs / rounds : 1;
	wr.seconds = p->seconds / rounds;
	phase_counts_t sum = {0}, c0, c1;
	request_t req;
	uint64_t rss0 = bench_rss_kib(), rss1 = rss0, first_runs = 0;
	double fsync_us = 0;
	for (uint32_t k = 0; k < rounds; k++) {
		if (k == 1)
			wr.warm = conc;
		result_t one = {0};
		counts_snap(&e, &c0);
		/* the agent always runs: the baselines replay the request it sent */
		run_agent(&e, p->sessions, p->turns, k, wr, &one);
		counts_snap(&e, &c1);
		counts_add(&sum, &c0, &c1);
		result_add(&r[0], &one);
		if (k == 0) {
			rss1 = bench_rss_kib();
			first_runs = c1.runs - c0.runs;
			capture_request(port, &req);
		}
		fsync_us += fsync_cpu_us(e.dir, 200) / rounds;
		if (p->only < 0 || p->only == 1) {
			run_curl(p, &req, wr, &one);
			result_add(&r[1], &one);
		}
		if (p->only < 0 || p->only == 2) {
			run_model_call(&e, p, &req, wr, &one);
			result_add(&r[2], &one);
		}
	}
	if (r[0].refused)
		fprintf(stderr, "bench_agent: %" PRIu64 " submissions refused\n", r[0].refused);
	for (int m = 0; m < 3; m++)
		if (r[m].errors)
			bench_fail("%s: %" PRIu64 " of %" PRIu64 " failed", m == 0 ? "agent" : m == 1 ? "curl" : "model_call",
				   r[m].errors, r[m].ok + r[m].errors);

	double us[3] = {0, 0, 0}, rps[3] = {0, 0, 0};
	for (int m = 0; m < 3; m++) {
		if (r[m].n && r[m].wall > 0) {
			us[m] = r[m].cpu * 1e6 / (double)r[m].n;
			rps[m] = (double)r[m].n / r[m].wall;
		}
	}
	uint64_t runs_total = sum.runs;
	char extra[2048];
	int n = snprintf(extra, sizeof(extra),
			 "\"sessions\":%u,\"mock\":\"%s\",\"rounds\":%u,\"turns_per_session_key\":%u,\"runs\":%" PRIu64 ",\"runs_per_s\":%.0f,"
			 "\"cpu_us_per_run\":%.1f,\"cpu_cores_busy\":%.2f,\"runs_ok\":%" PRIu64 ",\"runs_failed\":%" PRIu64
			 ",\"attempts_per_run\":%.2f,\"rss_growth_b_per_run\":%.0f,\"request_body_bytes\":%zu"
			 ",\"store_writes_per_run\":%.2f,\"store_writes_per_commit\":%.1f,\"store_cpu_us_per_run\":%.1f"
			 ",\"store_commits_per_run\":%.2f,\"fsync_cpu_us\":%.1f,\"durability_floor_cpu_us\":%.1f",
			 conc, child ? "child_process" : "in_process", rounds, p->turns, r[0].n, rps[0], us[0], r[0].wall > 0 ? r[0].cpu / r[0].wall : 0, r[0].ok,
			 r[0].errors, runs_total ? (double)sum.attempts / (double)runs_total : 0,
			 first_runs ? ((double)rss1 - (double)rss0) * 1024.0 / (double)first_runs : 0, strlen(req.body),
			 runs_total ? (double)sum.writes / (double)runs_total : 0,
			 sum.batches ? (double)sum.writes / (double)sum.batches : 0,
			 runs_total ? (double)sum.write_cpu_ns / 1e3 / (double)runs_total : 0,
			 runs_total ? (double)sum.batches / (double)runs_total : 0, fsync_us,
			 runs_total ? fsync_us * (double)sum.batches / (double)runs_total : 0);
	double per = runs_total ? 1.0 / (double)runs_total : 0;
	n += snprintf(extra + n, sizeof(extra) - (size_t)n,
		      ",\"messages_per_run\":%.1f,\"turns_per_run\":%.1f,\"parks_per_run\":%.2f,\"wakeups_per_run\":%.2f"
		      ",\"external_sends_per_run\":%.2f,\"spawns_per_run\":%.2f,\"blocking_jobs_per_run\":%.2f",
		      (double)sum.rt.handled * per, (double)sum.rt.turns * per, (double)sum.rt.parks * per,
		      (double)sum.rt.wakeups * per, (double)sum.rt.external * per, (double)sum.rt.spawned * per,
		      (double)sum.rt.blocking * per);
	if (us[1] > 0)
		n += snprintf(extra + n, sizeof(extra) - (size_t)n,
			      ",\"curl_requests\":%" PRIu64 ",\"curl_per_s\":%.0f,\"curl_cpu_us\":%.1f,"
			      "\"loop_vs_curl_cpu_us\":%.1f,\"cpu_ratio_vs_curl\":%.2f",
			      r[1].n, rps[1], us[1], us[0] - us[1], us[0] / us[1]);
	if (us[2] > 0)
		n += snprintf(extra + n, sizeof(extra) - (size_t)n,
			      ",\"model_call_requests\":%" PRIu64 ",\"model_call_per_s\":%.0f,\"model_call_cpu_us\":%.1f,"
			      "\"loop_cpu_us\":%.1f,\"cpu_ratio_vs_model_call\":%.2f",
			      r[2].n, rps[2], us[2], us[0] - us[2], us[0] / us[2]);
	bench_report("agent_runs", p->workers, r[0].wall, r[0].n, extra);
	request_free(&req);
	env_stop(&e, NULL, 0);
	bench_mock_child_stop(mock);
}

int main(int argc, char **argv)
{
	params_t p = {.workers = 2, .turns = 8, .seconds = 6, .rounds = 3, .only = -1, .mock = -1};
	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--workers"))
			p.workers = (uint32_t)strtoul(argv[i + 1], NULL, 10);
		else if (!strcmp(argv[i], "--sessions"))
			p.sessions = (uint32_t)strtoul(argv[i + 1], NULL, 10);
		else if (!strcmp(argv[i], "--runs"))
			p.runs = strtoull(argv[i + 1], NULL, 10);
		else if (!strcmp(argv[i], "--seconds"))
			p.seconds = strtod(argv[i + 1], NULL);
		else if (!strcmp(argv[i], "--rounds"))
			p.rounds = (uint32_t)strtoul(argv[i + 1], NULL, 10);
		else if (!strcmp(argv[i], "--turns"))
			p.turns = (uint32_t)strtoul(argv[i + 1], NULL, 10);
		else if (!strcmp(argv[i], "--mock"))
			p.mock = !strcmp(argv[i + 1], "child") ? 1 : 0;
		else if (!strcmp(argv[i], "--only"))
			p.only = !strcmp(argv[i + 1], "agent") ? 0 : !strcmp(argv[i + 1], "curl") ? 1 : 2;
		else
			bench_fail("usage: bench_agent [--workers W] [--sessions N] [--runs R] [--seconds S] "
				   "[--turns K] [--rounds N] [--only agent|curl|model_call] [--mock inproc|child]");
	}
	if ((argc - 1) % 2)
		bench_fail("usage: bench_agent [--workers W] [--sessions N] [--runs R] [--seconds S] [--turns K]");
	rlim_t nofile = env_raise_nofile(1 << 17);
	curl_global_init(CURL_GLOBAL_DEFAULT);
	const uint32_t set[] = {1, 100, 10000};
	for (size_t i = 0; i < 3; i++) {
		params_t q = p;
		q.sessions = p.sessions ? p.sessions : set[i];
		if (!q.runs)
			q.runs = q.sessions == 1 ? 3000 : 30000;
		/* in-process, both ends of each connection are in this process;
		 * with the mock in a child, only the client's */
		bool child = p.mock == 1 || (p.mock < 0 && (rlim_t)q.sessions * 2 + 256 > nofile);
		if ((rlim_t)q.sessions * (child ? 1 : 2) + 256 > nofile) {
			fprintf(stderr, "bench_agent: skipping %u sessions (open-file limit %lu)\n", q.sessions,
				(unsigned long)nofile);
		} else {
			run_config(&q, child);
		}
		if (p.sessions)
			break;
	}
	curl_global_cleanup();
	return 0;
}
