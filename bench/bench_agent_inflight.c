/*
 * agent_inflight: many agent runs in flight at once against a slow mock
 * LLM (every answer "ok" after the latency), and what they cost in memory.
 * By default three runs: 10,000 sessions over HTTP/1.1 and 50,000 over
 * h2c with a 2 s latency, then 50,000 again with 10 s (starting 50,000
 * runs takes longer than 2 s on two cores, so only then are they all in
 * flight at once). Each run has these phases:
 *
 *   1. baseline: N raw model calls at once (pc_model_call_start, the same
 *      request body the agent sends), no agent loop: the client side of a
 *      connection and its provider stream actor;
 *   2. agent: one message to each of N fresh sessions at once
 *      (pc_agent_submit_async + pc_agent_watch), every run counted to its
 *      end (ok / failed);
 *   3. idle: the N session actors left when every run ended (sessions
 *      stay for sessionIdleSeconds, 600 here), then again after the run
 *      registry's 10-minute terminal cache is swept (the finished runs'
 *      records and final events go; only the idle sessions stay);
 *   4. the same burst to N more sessions: what each added idle session
 *      costs once the first burst's pools and pages are there.
 *
 * Memory is this process's RSS (after returning free heap to the system)
 * against the RSS before the phase, divided by N. "In flight" is sampled
 * every 20 ms: the sample kept is the one with the most transfers live
 * before the first run or call ended, so the figure is per request
 * actually in flight; the line says how many were (all_in_flight_at_once).
 * The mock runs in a forked child (one worker, one I/O thread): over
 * HTTP/1.1 the server ends of N connections would not fit in this
 * process's open-file limit otherwise.
 *
 * Transport: over HTTP/1.1 each in-flight run holds a socket here, so the
 * open-file limit caps N; over h2c (the provider's "http2") the calls share
 * one connection. By default HTTP/1.1 while N fits, else h2c.
 *
 *   bench_agent_inflight [--workers W] [--sessions N] [--latency-ms L]
 *                        [--transport http1|h2c]
 */
#include <dirent.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "agent_env.h"
#include "agents/agent_internal.h" /* the run registry, to sweep its terminal cache */
#include "runtime/clock.h"
#include "agents/providers/model_call.h"

#define CONFIG                                                                                     \
	"{\"providers\":{\"mock\":{\"api\":\"openai-completions\","                                  \
	"\"baseUrl\":\"http://127.0.0.1:%u/v1\"%s}},"                                              \
	"\"agents\":{\"defaults\":{\"model\":\"mock/m1\",\"workspace\":\"%s\","                     \
	"\"maxConcurrent\":4096,\"sessionIdleSeconds\":600}}}"

enum { MSG_GO = 1 };

typedef struct driver {
	pc_agent_t *agent;       /* agent mode; else model calls */
	pc_io_t *io;
	pc_model_call_config_t cfg;
	uint32_t n;
	const char *prefix;
	uint64_t finished, ok, failed; /* finished: atomic (read by main) */
	bench_latch_t done;
} driver_t;

static void finished(driver_t *d, bool ok)
{
	d->ok += ok;
	d->failed += !ok;
	if (__atomic_add_fetch(&d->finished, 1, __ATOMIC_RELEASE) == d->n)
		bench_latch_signal(&d->done);
}

static int drive(pc_ctx_t *ctx, void *state, pc_msg_t *msg)
{
	driver_t *d = state;
	if (msg->type == MSG_GO) {
		for (uint32_t i = 0; i < d->n; i++) {
			int rc;
			if (d->agent) {
				char key[64];
				snprintf(key, sizeof(key), "%s-%u", d->prefix, i);
				pc_agent_params_t p = {.session_key = key, .message = "hello"};
				rc = pc_agent_submit_async(d->agent, &p, pc_self(ctx), i);
			} else {
				rc = pc_model_call_start(d->io, &d->cfg, pc_self(ctx), NULL);
			}
			if (rc != 0)
				bench_fail("start %u: %s", i, pc_strerror(rc));
		}
	} else if (msg->type == PC_MSG_AGENT_ACCEPTED) {
		const pc_agent_submit_reply_t *r = pc_msg_cdata(msg);
		if (r->rc != 0 || r->accepted.disposition != PC_AGENT_STARTED)
			finished(d, false);
		else if (pc_agent_watch(d->agent, r->accepted.run_id, pc_self(ctx), msg->corr) != 0)
			finished(d, false);
	} else if (msg->type == PC_MSG_AGENT_RUN_INFO) {
		finished(d, ((const pc_run_info_t *)pc_msg_cdata(msg))->status == PC_RUN_STATUS_OK);
	} else if (msg->type == PC_MSG_MODEL_DONE) {
		finished(d, ((const pc_model_done_msg_t *)pc_msg_cdata(msg))->result == 0);
	}
	return 0;
}

static const pc_behavior_t driver_b = {"bench-inflight-driver", drive, NULL};

/* Open descriptors of a process (its sockets, here). */
static uint64_t fd_count(pid_t pid)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	DIR *d = opendir(path);
	uint64_t n = 0;
	if (!d)
		return 0;
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

typedef struct phase {
	uint64_t rss_before, rss_inflight, rss_after;
	uint64_t inflight;      /* transfers live at the kept sample */
	uint64_t mock_conns;    /* the mock's extra descriptors then */
	uint64_t mock_rss_before, mock_rss_inflight;
	double ramp_s;          /* start to the kept sample */
	double wall_s;          /* start to the last end */
	uint64_t ok, failed;
} phase_t;

static void sleep_ms(uint64_t ms)
{
	struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000};
	nanosleep(&ts, NULL);
}

static void run_phase(agent_env_t *e, driver_t *d, pid_t mock, phase_t *ph)
{
	bench_latch_init(&d->done);
	pc_io_stats_t io0, io;
	pc_io_stats(e->io, &io0);
	uint64_t mock_fd0 = fd_count(mock);
	/* The previous phase's memory goes back as each thread trims, once
	 * idle for trim_after_ms: measured from before that, this phase's
	 * figures would absorb whatever of it was still leaving. */
	sleep_ms(PC_RUNTIME_DEFAULT_TRIM_AFTER_MS + 1000);
	ph->rss_before = env_trimmed_rss_kib();
	ph->mock_rss_before = env_child_rss_kib(mock);
	pc_actor_t *a = NULL;
	if (pc_spawn(e->rt, &driver_b, d, &a))
		bench_fail("spawn");
	double t0 = bench_now_s();
	pc_send(a, pc_msg_new(MSG_GO, 0));
	ph->inflight = 0;
	/* sample until the first end (then the set in flight only shrinks) */
	while (__atomic_load_n(&d->finished, __ATOMIC_ACQUIRE) == 0 && bench_now_s() - t0 < BENCH_TIMEOUT_S) {
		sleep_ms(20);
		pc_io_stats(e->io, &io);
		uint64_t live = io.transfers_live - io0.transfers_live;
		uint64_t rss = bench_rss_kib();
		if (__atomic_load_n(&d->finished, __ATOMIC_ACQUIRE) != 0)
			break;
		if (live > ph->inflight || (live == ph->inflight && rss > ph->rss_inflight)) {
			ph->inflight = live;
			ph->rss_inflight = rss;
			ph->ramp_s = bench_now_s() - t0;
			uint64_t fds = fd_count(mock);
			ph->mock_conns = fds > mock_fd0 ? fds - mock_fd0 : 0;
			ph->mock_rss_inflight = env_child_rss_kib(mock);
		}
	}
	bench_latch_wait(&d->done, 4 * BENCH_TIMEOUT_S, d->agent ? "agent runs" : "model calls");
	ph->wall_s = bench_now_s() - t0;
	pc_actor_stop(a, PC_EXIT_NORMAL);
	pc_actor_release(a);
	bench_latch_destroy(&d->done);
	ph->ok = d->ok;
	ph->failed = d->failed;
	sleep_ms(300); /* let the last messages settle */
	ph->rss_after = env_trimmed_rss_kib();
}

/* RSS once the run registry's terminal cache is swept and the sessions
 * have dropped their transcripts (and the workers have trimmed). */
static uint64_t sweep_and_settle(agent_env_t *e)
{
	pc_run_registry_sweep(e->agent->runs, pc__clock_wall_ms() + (int64_t)PC_RUN_REGISTRY_TERMINAL_TTL_MS + 60000);
	/* the sessions let their transcripts go, and then the threads that
	 * freed them give the memory back once idle for trim_after_ms */
	sleep_ms(PC__TRANSCRIPT_KEEP_MS + PC_RUNTIME_DEFAULT_TRIM_AFTER_MS + 1500);
	return env_trimmed_rss_kib();
}

static double per_kib(uint64_t a, uint64_t b, uint64_t n)
{
	return n ? ((double)a - (double)b) / (double)n : 0;
}

static void run_n(uint32_t workers, uint32_t n, uint32_t requested, uint32_t latency_ms, rlim_t nofile, bool h2)
{
	char scenario[128];
	snprintf(scenario, sizeof(scenario), "{\"default\":{\"text\":\"ok\",\"chunks\":1,\"ttft_ms\":%u}}", latency_ms);
	uint16_t port = 0;
	/* h2c: every call on the one connection, the mock letting them all in */
	pid_t mock = bench_mock_child_streams(scenario, 1, h2 ? n + 64 : 0, &port);
	pc_io_config_t icfg = {.threads = 1, .max_host_connections = n + 64, .max_total_connections = 0,
			       .max_concurrent_streams = h2 ? n + 64 : 0};
	agent_env_t e;
	env_base_start(&e, workers, &icfg);
	char json[1024];
	snprintf(json, sizeof(json), CONFIG, (unsigned)port, h2 ? ",\"http2\":\"prior-knowledge\"" : "", e.dir);
	env_agent_start(&e, json, n > 4096 ? n : 0, NULL);

	/* warm-up: 64 runs, so every kind of actor, the store and the
	 * connection pool have been through once; and the body for the baseline */
	driver_t w = {.agent = e.agent, .n = 64, .prefix = "warm"};
	phase_t wp;
	run_phase(&e, &w, mock, &wp);
	if (wp.failed)
		bench_fail("warm-up: %" PRIu64 " runs failed", wp.failed);
	request_t req;
	capture_request(port, &req);

	/* 1. the baseline: N raw model calls */
	driver_t b = {.io = e.io, .n = n,
		      .cfg = {.api = PC_API_OPENAI_COMPLETIONS, .url = req.url,
			      .headers = (const char *const *)req.headers, .header_count = req.header_count,
			      .body = req.body, .body_len = strlen(req.body), .provider = "mock",
			      .http2_prior_knowledge = h2, .deltas = true}};
	phase_t pb;
	run_phase(&e, &b, mock, &pb);

	/* 2. the agent: N sessions, one run each */
	pc_agent_stats_t st0, st1;
	pc_agent_stats(e.agent, &st0);
	driver_t d = {.agent = e.agent, .n = n, .prefix = "s"};
	phase_t pa;
	run_phase(&e, &d, mock, &pa);
	pc_agent_stats(e.agent, &st1);

	/* 3. idle: the sessions stay; then without the terminal cache */
	uint64_t idle_sessions = st1.sessions_live - st0.sessions_live;
	uint64_t rss_swept = sweep_and_settle(&e);
	pc_agent_stats_t st2;
	pc_agent_stats(e.agent, &st2);

	/* 4. the same burst again, to N more sessions: what each added idle
	 * session costs once the pools, caches and allocator pages the first
	 * burst grew are there to be reused */
	driver_t d2 = {.agent = e.agent, .n = n, .prefix = "t"};
	phase_t pa2;
	run_phase(&e, &d2, mock, &pa2);
	uint64_t rss_swept2 = sweep_and_settle(&e);

	char extra[2048];
	int len = snprintf(extra, sizeof(extra),
		"\"sessions\":%u,\"requested_sessions\":%u,\"transport\":\"%s\",\"latency_ms\":%u,\"open_file_limit\":%lu,"
		"\"runs_ok\":%" PRIu64 ",\"runs_failed\":%" PRIu64 ",\"all_completed\":%s,"
		"\"max_in_flight\":%" PRIu64 ",\"all_in_flight_at_once\":%s,\"ramp_s\":%.2f,"
		"\"kib_per_inflight_session\":%.2f,"
		"\"baseline_ok\":%" PRIu64 ",\"baseline_max_in_flight\":%" PRIu64 ",\"baseline_ramp_s\":%.2f,"
		"\"baseline_kib_per_inflight_call\":%.2f,\"loop_kib_per_inflight_session\":%.2f,"
		"\"idle_sessions\":%" PRIu64 ",\"kib_per_idle_session\":%.2f,"
		"\"kib_per_idle_session_after_sweep\":%.2f,"
		"\"sessions_live_after_sweep\":%" PRIu64 ",\"kib_per_added_idle_session\":%.2f,"
		"\"second_burst_ok\":%" PRIu64 ","
		"\"baseline_residue_kib_per_call\":%.2f,\"mock_kib_per_connection\":%.2f,\"mock_connections\":%" PRIu64,
		n, requested, h2 ? "h2c" : "http1", latency_ms, (unsigned long)nofile, pa.ok, pa.failed,
		pa.ok == n && !pa.failed ? "true" : "false", pa.inflight, pa.inflight >= n ? "true" : "false",
		pa.ramp_s, per_kib(pa.rss_inflight, pa.rss_before, pa.inflight), pb.ok, pb.inflight, pb.ramp_s,
		per_kib(pb.rss_inflight, pb.rss_before, pb.inflight),
		per_kib(pa.rss_inflight, pa.rss_before, pa.inflight) - per_kib(pb.rss_inflight, pb.rss_before, pb.inflight),
		idle_sessions, per_kib(pa.rss_after, pa.rss_before, n), per_kib(rss_swept, pa.rss_before, n),
		st2.sessions_live - st0.sessions_live, per_kib(rss_swept2, rss_swept, n), pa2.ok,
		per_kib(pb.rss_after, pb.rss_before, n),
		per_kib(pa.mock_rss_inflight, pa.mock_rss_before, pa.mock_conns), pa.mock_conns);
	(void)len;
	bench_report("agent_inflight", workers, pa.wall_s, pa.ok, extra);
	request_free(&req);
	env_stop(&e, NULL, 0);
	bench_mock_child_stop(mock);
	if (pa.ok != n || pb.ok != n || pa2.ok != n)
		bench_fail("%u sessions: %" PRIu64 " runs (%" PRIu64 " in the second burst) and %" PRIu64
			   " raw calls of %u completed",
			   n, pa.ok, pa2.ok, pb.ok, n);
}

#define USAGE "usage: bench_agent_inflight [--workers W] [--sessions N] [--latency-ms L] [--transport http1|h2c]"

int main(int argc, char **argv)
{
	uint32_t workers = 2, sessions = 0, latency = 0;
	const char *transport = NULL;
	for (int i = 1; i < argc; i += 2) {
		if (i + 1 >= argc)
			bench_fail(USAGE);
		if (!strcmp(argv[i], "--workers"))
			workers = (uint32_t)strtoul(argv[i + 1], NULL, 10);
		else if (!strcmp(argv[i], "--sessions"))
			sessions = (uint32_t)strtoul(argv[i + 1], NULL, 10);
		else if (!strcmp(argv[i], "--latency-ms"))
			latency = (uint32_t)strtoul(argv[i + 1], NULL, 10);
		else if (!strcmp(argv[i], "--transport") && (!strcmp(argv[i + 1], "http1") || !strcmp(argv[i + 1], "h2c")))
			transport = argv[i + 1];
		else
			bench_fail(USAGE);
	}
	rlim_t nofile = env_raise_nofile(1 << 17);
	curl_global_init(CURL_GLOBAL_DEFAULT);
	/* 50,000 runs take longer than 2 s to start on two cores, so at 2 s
	 * the first answers come back before the last runs start; at 10 s
	 * they are all in flight at once */
	const struct {
		uint32_t n, latency_ms;
	} set[] = {{10000, 2000}, {50000, 2000}, {50000, 10000}};
	/* HTTP/1.1: one socket per run here, plus the store, the pools, the pipes */
	uint32_t fit = nofile > 2000 ? (uint32_t)((nofile - 1000) / 1000 * 1000) : 0;
	for (size_t i = 0; i < sizeof(set) / sizeof(set[0]); i++) {
		uint32_t want = sessions ? sessions : set[i].n;
		uint32_t lat = latency ? latency : sessions ? 2000 : set[i].latency_ms;
		/* by default HTTP/1.1 while a socket per run fits, else h2c: all
		 * the runs multiplexed on one connection */
		bool h2 = transport ? !strcmp(transport, "h2c") : want > fit;
		if (h2 || want <= fit) {
			run_n(workers, want, want, lat, nofile, h2);
		} else {
			printf("{\"bench\":\"agent_inflight\",\"sessions\":%u,\"skipped\":true,\"reason\":"
			       "\"open-file limit %lu (hard; raising it needs CAP_SYS_RESOURCE): %u runs in flight "
			       "over HTTP/1.1 need %u sockets in this process\",\"ran_instead\":%u}\n",
			       want, (unsigned long)nofile, want, want, fit);
			fflush(stdout);
			if (fit)
				run_n(workers, fit, want, lat, nofile, false);
		}
		if (sessions || latency)
			break;
	}
	curl_global_cleanup();
	return 0;
}
