/*
 * stream: streamed model calls against the mock LLM server, Pincer's
 * provider stream actors versus a plain curl-multi loop doing the same
 * requests and the same work per stream (SSE parser + decoder in the write
 * callback, the assembled message printed as JSON at the end), in the
 * same run. The difference is what the actors, the I/O thread and the
 * messages between them cost.
 *
 *   bench_stream [--chunks N] [--concurrency C] [--n TOTAL] [--workers W] [--only curl|pincer]
 *                [--port P]   (use a mock already listening on P)
 *                [--deltas 0|1] (Pincer forwards every delta to the owner; default 1)
 *
 * The mock runs in a forked child (its own runtime and I/O thread), so the
 * CPU figures (getrusage of this process) are the client's alone. One JSON
 * line per mode ("curl_multi" first, then "pincer"), then a ratio line.
 */
#include <curl/curl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agents/mock/mock_server.h"
#include "agents/providers/model_call.h"
#include "agents/providers/stream.h"
#include "benchlib.h"
#include "stream_common.h"
#include "io/sse.h"

typedef struct params {
	uint32_t chunks;
	uint32_t concurrency;
	uint64_t total;
	uint32_t workers;
	int only; /* -1 both; 0 curl_multi; 1 pincer (for profiling one side) */
	uint16_t port; /* a mock already running there; 0: fork one */
	bool deltas;   /* Pincer forwards each delta as a message (the default) */
	char url[128];
	char step_header[2048];
	const char *body;
} params_t;

static const char *BODY = "{\"model\":\"mock\",\"stream\":true,\"stream_options\":{\"include_usage\":true},"
			  "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";

/* ---- baseline: one thread, curl_multi_poll ----------------------------------- */

typedef struct easy_slot {
	CURL *easy;
	parse_t parse;
} easy_slot_t;

static size_t on_write(char *data, size_t size, size_t n, void *arg)
{
	easy_slot_t *s = arg;
	return pc_sse_feed(s->parse.sse, data, size * n) == 0 ? size * n : 0;
}

static void slot_start(CURLM *multi, easy_slot_t *s, const params_t *p, struct curl_slist *headers)
{
	if (!s->easy) {
		s->easy = curl_easy_init();
		if (!s->easy)
			bench_fail("curl_easy_init");
		curl_easy_setopt(s->easy, CURLOPT_URL, p->url);
		curl_easy_setopt(s->easy, CURLOPT_HTTPHEADER, headers);
		curl_easy_setopt(s->easy, CURLOPT_POSTFIELDS, p->body);
		curl_easy_setopt(s->easy, CURLOPT_WRITEFUNCTION, on_write);
		curl_easy_setopt(s->easy, CURLOPT_WRITEDATA, s);
		curl_easy_setopt(s->easy, CURLOPT_PRIVATE, s);
		curl_easy_setopt(s->easy, CURLOPT_NOSIGNAL, 1L);
	}
	parse_init(&s->parse);
	if (curl_multi_add_handle(multi, s->easy) != CURLM_OK)
		bench_fail("curl_multi_add_handle");
}

static double run_curl(const params_t *p, uint64_t *ok_out)
{
	CURLM *multi = curl_multi_init();
	curl_multi_setopt(multi, CURLMOPT_MAX_HOST_CONNECTIONS, (long)p->concurrency);
	curl_multi_setopt(multi, CURLMOPT_MAXCONNECTS, (long)p->concurrency);
	struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
	h = curl_slist_append(h, "Expect:");
	h = curl_slist_append(h, p->step_header);
	easy_slot_t *slots = calloc(p->concurrency, sizeof(*slots));
	uint64_t started = 0, finished = 0, ok = 0;
	double t0 = bench_now_s();
	for (uint32_t i = 0; i < p->concurrency && started < p->total; i++, started++)
		slot_start(multi, &slots[i], p, h);
	while (finished < p->total) {
		int running;
		curl_multi_perform(multi, &running);
		CURLMsg *m;
		int left;
		while ((m = curl_multi_info_read(multi, &left))) {
			if (m->msg != CURLMSG_DONE)
				continue;
			easy_slot_t *s;
			curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&s);
			bool good = m->data.result == CURLE_OK;
			curl_multi_remove_handle(multi, s->easy);
			good = parse_finish(&s->parse) && good;
			ok += good;
			finished++;
			if (started < p->total) {
				slot_start(multi, s, p, h);
				started++;
			}
		}
		if (finished < p->total)
			curl_multi_poll(multi, NULL, 0, 1000, NULL);
		if (bench_now_s() - t0 > BENCH_TIMEOUT_S)
			bench_fail("curl_multi timed out");
	}
	double wall = bench_now_s() - t0;
	for (uint32_t i = 0; i < p->concurrency; i++)
		if (slots[i].easy)
			curl_easy_cleanup(slots[i].easy);
	free(slots);
	curl_slist_free_all(h);
	curl_multi_cleanup(multi);
	*ok_out = ok;
	return wall;
}

/* ---- Pincer: provider stream actors ------------------------------------------- */

typedef struct driver {
	const params_t *p;
	pc_io_t *io;
	pc_model_call_config_t cfg;
	uint64_t started, finished, ok;
	bench_latch_t *done;
} driver_t;

static int drive(pc_ctx_t *ctx, void *state, pc_msg_t *msg)
{
	driver_t *d = state;
	if (msg->type == 1) { /* go */
		for (uint32_t i = 0; i < d->p->concurrency && d->started < d->p->total; i++, d->started++)
			if (pc_model_call_start(d->io, &d->cfg, pc_self(ctx), NULL) != 0)
				bench_fail("pc_model_call_start");
		return 0;
	}
	if (msg->type != PC_MSG_MODEL_DONE)
		return 0;
	const pc_model_done_msg_t *dm = pc_msg_cdata(msg);
	d->ok += dm->result == 0;
	d->finished++;
	if (d->started < d->p->total) {
		d->started++;
		if (pc_model_call_start(d->io, &d->cfg, pc_self(ctx), NULL) != 0)
			bench_fail("pc_model_call_start");
	}
	if (d->finished == d->p->total)
		bench_latch_signal(d->done);
	return 0;
}

static const pc_behavior_t driver_b = {"driver", drive, NULL};

static double run_pincer(const params_t *p, uint64_t *ok_out)
{
	pc_runtime_config_t rc;
	pc_runtime_config_init(&rc);
	rc.workers = p->workers;
	pc_runtime_t *rt = NULL;
	pc_io_t *io = NULL;
	pc_io_config_t ioc = {.threads = 1, .max_host_connections = p->concurrency,
			      .max_idle_connections = p->concurrency};
	if (pc_runtime_new(&rc, &rt) || pc_runtime_start(rt) || pc_io_new(rt, &ioc, &io))
		bench_fail("runtime");
	const char *headers[] = {"Content-Type: application/json", p->step_header};
	bench_latch_t done;
	bench_latch_init(&done);
	driver_t d = {
		.p = p,
		.io = io,
		.cfg = {.api = PC_API_OPENAI_COMPLETIONS, .url = p->url, .headers = headers, .header_count = 2,
			.body = p->body, .body_len = strlen(p->body), .provider = "openai", .deltas = p->deltas},
		.done = &done,
	};
	pc_actor_t *a = NULL;
	if (pc_spawn(rt, &driver_b, &d, &a))
		bench_fail("spawn");
	double t0 = bench_now_s();
	pc_send(a, pc_msg_new(1, 0));
	bench_latch_wait(&done, BENCH_TIMEOUT_S, "pincer streams");
	double wall = bench_now_s() - t0;
	pc_actor_stop(a, PC_EXIT_NORMAL);
	pc_actor_release(a);
	pc_io_free(io);
	pc_runtime_stop(rt);
	pc_runtime_free(rt);
	bench_latch_destroy(&done);
	*ok_out = d.ok;
	return wall;
}

static uint32_t arg_u32(const char *v) { return (uint32_t)strtoul(v, NULL, 10); }

/* The mock's script for this configuration: `chunks` one-word deltas. */
static void set_step(params_t *p)
{
	char *h = p->step_header;
	size_t cap = sizeof(p->step_header);
	size_t len = (size_t)snprintf(h, cap, "x-mock-scenario: {\"kind\":\"text\",\"chunks\":%u,\"text\":\"", p->chunks);
	for (uint32_t i = 0; i < p->chunks && len + 8 < cap; i++)
		len += (size_t)snprintf(h + len, cap - len, "%sw", i ? " " : "");
	snprintf(h + len, cap - len, "\"}");
}

/* Runs one configuration in the chosen modes and prints one line. */
static void run_config(params_t *p)
{
	if (!p->total)
		p->total = p->chunks > 50 ? 4000 : 20000;
	if (p->total < p->concurrency)
		p->total = p->concurrency;
	set_step(p);
	uint64_t ok[2] = {0, 0};
	double wall[2] = {0, 0}, cpu[2] = {0, 0};
	for (int mode = 0; mode < 2; mode++) {
		if (p->only >= 0 && p->only != mode)
			continue;
		double c0 = bench_cpu_s();
		wall[mode] = mode == 0 ? run_curl(p, &ok[mode]) : run_pincer(p, &ok[mode]);
		cpu[mode] = bench_cpu_s() - c0;
		if (ok[mode] != p->total)
			bench_fail("%s: %" PRIu64 " of %" PRIu64 " streams succeeded", mode ? "pincer" : "curl_multi",
				   ok[mode], p->total);
	}
	char extra[512];
	int n = snprintf(extra, sizeof(extra), "\"chunks\":%u,\"concurrency\":%u,\"deltas\":%s", p->chunks,
			 p->concurrency, p->deltas ? "true" : "false");
	static const char *const names[2] = {"curl", "pincer"};
	for (int mode = 0; mode < 2; mode++)
		if (wall[mode] > 0)
			n += snprintf(extra + n, sizeof(extra) - (size_t)n,
				      ",\"%s_streams_per_s\":%.0f,\"%s_cpu_us_per_stream\":%.2f", names[mode],
				      (double)p->total / wall[mode], names[mode], cpu[mode] * 1e6 / (double)p->total);
	if (wall[0] > 0 && wall[1] > 0)
		snprintf(extra + n, sizeof(extra) - (size_t)n, ",\"throughput_ratio\":%.3f,\"cpu_ratio\":%.3f",
			 wall[0] / wall[1], cpu[1] / cpu[0]);
	bench_report("stream", p->workers, wall[1] > 0 ? wall[1] : wall[0], p->total, extra);
}

int main(int argc, char **argv)
{
	params_t p = {.concurrency = 0, .total = 0, .workers = 2, .only = -1, .deltas = true, .body = BODY};
	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--chunks"))
			p.chunks = arg_u32(argv[i + 1]);
		else if (!strcmp(argv[i], "--concurrency"))
			p.concurrency = arg_u32(argv[i + 1]);
		else if (!strcmp(argv[i], "--n"))
			p.total = strtoull(argv[i + 1], NULL, 10);
		else if (!strcmp(argv[i], "--workers"))
			p.workers = arg_u32(argv[i + 1]);
		else if (!strcmp(argv[i], "--deltas"))
			p.deltas = arg_u32(argv[i + 1]) != 0;
		else if (!strcmp(argv[i], "--port"))
			p.port = (uint16_t)arg_u32(argv[i + 1]);
		else if (!strcmp(argv[i], "--only"))
			p.only = !strcmp(argv[i + 1], "pincer") ? 1 : 0;
		else
			bench_fail("usage: bench_stream [--chunks N] [--concurrency C] [--n TOTAL] [--workers W] "
				   "[--only curl|pincer] [--port P] [--deltas 0|1]");
	}
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	curl_global_init(CURL_GLOBAL_DEFAULT);
	uint16_t port = p.port;
	pid_t mock = port ? 0 : bench_mock_child(NULL, 1, &port);
	snprintf(p.url, sizeof(p.url), "http://127.0.0.1:%u/v1/chat/completions", port);

	/* --chunks and --concurrency pick one value; without them, the matrix. */
	const uint32_t chunk_set[] = {1, 200}, conc_set[] = {1, 100, 1000, 10000};
	size_t nchunks = p.chunks ? 1 : 2, nconc = p.concurrency ? 1 : 4;
	for (size_t c = 0; c < nchunks; c++) {
		for (size_t k = 0; k < nconc; k++) {
			params_t q = p;
			q.chunks = p.chunks ? p.chunks : chunk_set[c];
			q.concurrency = p.concurrency ? p.concurrency : conc_set[k];
			if ((uint64_t)q.concurrency + 64 > rl.rlim_cur) { /* the mock is another process */
				fprintf(stderr, "bench_stream: skipping concurrency %u (open-file limit %lu)\n",
					q.concurrency, (unsigned long)rl.rlim_cur);
				continue;
			}
			run_config(&q);
		}
	}
	bench_mock_child_stop(mock);
	return 0;
}
