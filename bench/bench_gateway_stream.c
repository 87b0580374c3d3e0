/*
 * gateway_stream: long replies streamed through the gateway's WebSocket
 * RPC (docs/gateway.md, Events). The embedded mock streams a reply of
 * 10 KB, 100 KB and 1 MB in 10-byte deltas over about 2 s (40 bursts 50 ms
 * apart) to each of --listeners clients (1 and 10 by default), each with
 * a run of its own in a session of its own, all at once.
 *
 * Per reply size and client count, one JSON line: the server's CPU (the
 * process's, less the client threads': the gateway, the agent loop and
 * the embedded mock, which streams and parses the same SSE whatever the
 * gateway does), that CPU per KB of reply per client, the bytes each
 * client received (the most of any) and as a multiple of the reply, the
 * assistant frames one client got, and the wall time. Then per client
 * count a line with the ratio of CPU per KB at 1 MB to that at 10 KB: the
 * gateway's cost per byte should not grow with the reply. The same for one
 * OpenAI client streaming the reply as SSE chunks (`"sse": true`).
 *
 *   bench_gateway_stream [--workers W] [--listeners N] [--repeat R]
 *
 * --listeners runs one client count only (0: the SSE client only); --repeat runs each case R times
 * (default 3) and reports the median CPU; --max-bytes skips the reply
 * sizes above it. Every client checks that its deltas add up to the reply
 * ("intact": false when one did not). Loopback only; the temporary store
 * directory is removed at the end.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent_env.h"
#include "agents/gateway/gateway.h"
#include "tests/support/ws_blocking.h"

#define TOKEN "bench-token"
#define DELTA_BYTES 10u
#define BURSTS 40u
#define BURST_MS 50u
#define CASES 3u
#define REPEAT_MAX 9u

static const size_t sizes[CASES] = {10000, 100000, 1000000};

typedef struct client {
	tws_t *ws;
	uint16_t port;  /* an SSE client's gateway (it has no ws) */
	const char *reply;
	size_t size;
	/* filled by the thread */
	size_t bytes, frames, joined;
	bool done, intact;
	double cpu_s;
} client_t;

/* "w00000000 w00000001 ... w000NNNNN.": 10-byte words, so that 10-byte
 * pieces are whole words; a full stop at the end (the final payload is
 * trimmed). malloc'd. */
static char *reply_text(size_t size)
{
	char *t = malloc(size + 1);
	if (!t)
		bench_fail("out of memory");
	for (size_t i = 0; i < size; i += DELTA_BYTES) {
		char w[16];
		snprintf(w, sizeof(w), "w%08zu ", i / DELTA_BYTES % 100000000u);
		memcpy(t + i, w, size - i < DELTA_BYTES ? size - i : DELTA_BYTES);
	}
	t[size - 1] = '.';
	t[size] = '\0';
	return t;
}

static const char *str_of(const cJSON *o, const char *k)
{
	const char *s = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, k));
	return s ? s : "";
}

/* Sends one request frame. */
static void send_req(tws_t *ws, const char *id, const char *method, cJSON *params)
{
	cJSON *f = cJSON_CreateObject();
	cJSON_AddStringToObject(f, "type", "req");
	cJSON_AddStringToObject(f, "id", id);
	cJSON_AddStringToObject(f, "method", method);
	cJSON_AddItemToObject(f, "params", params);
	char *t = cJSON_PrintUnformatted(f);
	cJSON_Delete(f);
	if (!t || tws_send_text(ws, t, strlen(t)) != 0)
		bench_fail("send %s", method);
	free(t);
}

/* Reads frames until the answer to request `id`; returns it (the
 * caller's). */
static cJSON *await_res(tws_t *ws, const char *id)
{
	for (;;) {
		char *m = NULL;
		size_t len = 0;
		if (tws_recv(ws, 30000, &m, &len) != 0)
			bench_fail("no answer to %s", id);
		cJSON *f = cJSON_ParseWithLength(m, len);
		free(m);
		if (f && !strcmp(str_of(f, "type"), "res") && !strcmp(str_of(f, "id"), id))
			return f;
		cJSON_Delete(f);
	}
}

static tws_t *client_connect(uint16_t port)
{
	tws_options_t o = {.port = port};
	tws_t *ws = NULL;
	if (tws_connect(&o, &ws, NULL) != 0)
		bench_fail("connect");
	char *m = NULL;
	size_t len = 0;
	if (tws_recv(ws, 10000, &m, &len) != 0) /* connect.challenge */
		bench_fail("no challenge");
	free(m);
	cJSON *p = cJSON_CreateObject();
	cJSON_AddNumberToObject(p, "minProtocol", 3);
	cJSON_AddNumberToObject(p, "maxProtocol", 4);
	cJSON *cli = cJSON_AddObjectToObject(p, "client");
	cJSON_AddStringToObject(cli, "id", "bench");
	cJSON_AddStringToObject(cli, "version", "1.0.0");
	cJSON_AddStringToObject(cli, "platform", "linux");
	cJSON_AddStringToObject(cli, "mode", "test");
	cJSON_AddStringToObject(p, "role", "operator");
	cJSON_AddStringToObject(cJSON_AddObjectToObject(p, "auth"), "token", TOKEN);
	send_req(ws, "c", "connect", p);
	cJSON *r = await_res(ws, "c");
	if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "ok")))
		bench_fail("connect refused");
	cJSON_Delete(r);
	return ws;
}

/* Reads the run's frames to its final answer, counting bytes and checking
 * that the assistant deltas add up to the reply. */
static void *client_read(void *arg)
{
	client_t *c = arg;
	double cpu0 = bench_thread_cpu_s();
	c->intact = true;
	while (!c->done) {
		char *m = NULL;
		size_t len = 0;
		if (tws_recv(c->ws, 60000, &m, &len) != 0)
			break;
		c->bytes += len;
		cJSON *f = cJSON_ParseWithLength(m, len);
		free(m);
		const cJSON *p = cJSON_GetObjectItemCaseSensitive(f, "payload");
		if (!strcmp(str_of(f, "event"), "agent") && !strcmp(str_of(p, "stream"), "assistant")) {
			const char *d = str_of(cJSON_GetObjectItemCaseSensitive(p, "data"), "delta");
			size_t n = strlen(d);
			if (c->joined + n > c->size || memcmp(c->reply + c->joined, d, n) != 0)
				c->intact = false;
			c->joined += n;
			c->frames++;
		} else if (!strcmp(str_of(f, "type"), "res") && !strcmp(str_of(f, "id"), "run") &&
			   strcmp(str_of(p, "status"), "accepted") != 0) {
			c->done = true;
		}
		cJSON_Delete(f);
	}
	c->cpu_s = bench_thread_cpu_s() - cpu0;
	return NULL;
}

/* The SSE client's answer as it arrives. */
typedef struct sse_body {
	char *p;
	size_t len, cap;
} sse_body_t;

static size_t sse_collect(char *data, size_t size, size_t n, void *arg)
{
	sse_body_t *b = arg;
	size_t len = size * n;
	if (b->len + len + 1 > b->cap) {
		size_t cap = (b->len + len + 1) * 2;
		char *g = realloc(b->p, cap);
		if (!g)
			return 0;
		b->p = g;
		b->cap = cap;
	}
	memcpy(b->p + b->len, data, len);
	b->len += len;
	b->p[b->len] = '\0';
	return len;
}

/* One streamed chat completion: its bytes, and whether its chunks' content
 * adds up to the reply. */
static void *sse_read(void *arg)
{
	client_t *c = arg;
	double cpu0 = bench_thread_cpu_s();
	char url[96];
	snprintf(url, sizeof(url), "http://127.0.0.1:%u/v1/chat/completions", (unsigned)c->port);
	static const char body[] = "{\"model\":\"pincer\",\"stream\":true,"
				   "\"messages\":[{\"role\":\"user\",\"content\":\"go\"}]}";
	struct curl_slist *h = curl_slist_append(NULL, "Authorization: Bearer " TOKEN);
	h = curl_slist_append(h, "Content-Type: application/json");
	sse_body_t b = {0};
	CURL *e = curl_easy_init();
	if (!e || !h)
		bench_fail("curl");
	curl_easy_setopt(e, CURLOPT_URL, url);
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(e, CURLOPT_POSTFIELDS, body);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, sse_collect);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, &b);
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, 120000L);
	c->done = curl_easy_perform(e) == CURLE_OK && b.p && strstr(b.p, "data: [DONE]");
	curl_easy_cleanup(e);
	curl_slist_free_all(h);
	c->bytes = b.len;
	c->intact = true;
	for (char *line = b.p ? strtok(b.p, "\n") : NULL; line; line = strtok(NULL, "\n")) {
		if (strncmp(line, "data: {", 7) != 0)
			continue;
		cJSON *j = cJSON_Parse(line + 6);
		const cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0);
		const char *d = str_of(cJSON_GetObjectItemCaseSensitive(ch, "delta"), "content");
		size_t n = strlen(d);
		if (n) {
			if (c->joined + n > c->size || memcmp(c->reply + c->joined, d, n) != 0)
				c->intact = false;
			c->joined += n;
			c->frames++;
		}
		cJSON_Delete(j);
	}
	free(b.p);
	c->cpu_s = bench_thread_cpu_s() - cpu0;
	return NULL;
}

typedef struct case_result {
	double server_cpu_s, wall_s;
	size_t bytes, frames;
	bool intact;
} case_t;

/* One reply size to `n` WebSocket clients at once, or (n 0) to one SSE
 * client. */
static case_t run_case(uint32_t workers, size_t size, uint32_t n)
{
	bool sse = n == 0;
	if (sse)
		n = 1;
	char *reply = reply_text(size);
	size_t chunks = size / DELTA_BYTES;
	char *scenario = malloc(size + 256);
	if (!scenario)
		bench_fail("out of memory");
	snprintf(scenario, size + 256,
		 "{\"default\":{\"text\":\"%s\",\"chunks\":%zu,\"delay_ms\":%u,\"burst\":%zu}}", reply, chunks,
		 BURST_MS, (chunks + BURSTS - 1) / BURSTS);
	agent_env_t e;
	pc_io_config_t icfg = {.threads = 1, .max_host_connections = 4096};
	env_base_start(&e, workers, &icfg);
	char json[1024];
	snprintf(json, sizeof(json),
		 "{\"providers\":{\"mock\":{\"api\":\"openai-completions\",\"embedded\":true}},"
		 "\"agents\":{\"defaults\":{\"model\":\"mock/m1\",\"workspace\":\"%s\",\"maxConcurrent\":64}},"
		 "\"gateway\":{\"auth\":{\"mode\":\"token\",\"token\":\"" TOKEN "\"}}}",
		 e.dir);
	env_agent_start(&e, json, 0, scenario);
	free(scenario);
	pc_gateway_t *g = NULL;
	pc_gateway_options_t o = {.rt = e.rt, .io = e.io, .agent = e.agent, .config = e.cfg, .port = 0};
	if (pc_gateway_new(&o, &g) != 0 || pc_gateway_start(g) != 0)
		bench_fail("gateway");
	client_t *cs = calloc(n, sizeof(*cs));
	pthread_t *th = calloc(n, sizeof(*th));
	if (!cs || !th)
		bench_fail("out of memory");
	for (uint32_t i = 0; i < n; i++) {
		cs[i] = (client_t){.ws = sse ? NULL : client_connect(pc_gateway_port(g)), .port = pc_gateway_port(g),
				   .reply = reply, .size = size};
	}
	double t0 = bench_now_s(), cpu0 = bench_cpu_s();
	if (sse && pthread_create(&th[0], NULL, sse_read, &cs[0]) != 0)
		bench_fail("pthread_create");
	for (uint32_t i = 0; !sse && i < n; i++) {
		char key[32];
		snprintf(key, sizeof(key), "stream-%u", i);
		cJSON *p = cJSON_CreateObject();
		cJSON_AddStringToObject(p, "message", "go");
		cJSON_AddStringToObject(p, "idempotencyKey", key);
		cJSON_AddStringToObject(p, "sessionKey", key);
		send_req(cs[i].ws, "run", "agent", p);
		if (pthread_create(&th[i], NULL, client_read, &cs[i]) != 0)
			bench_fail("pthread_create");
	}
	double client_cpu = 0;
	case_t r = {.intact = true};
	for (uint32_t i = 0; i < n; i++) {
		if (pthread_join(th[i], NULL) != 0)
			bench_fail("pthread_join");
		if (!cs[i].done)
			bench_fail("client %u: no final answer", i);
		r.intact = r.intact && cs[i].intact && cs[i].joined == size;
		client_cpu += cs[i].cpu_s;
		r.bytes = cs[i].bytes > r.bytes ? cs[i].bytes : r.bytes;
	}
	r.wall_s = bench_now_s() - t0;
	r.server_cpu_s = bench_cpu_s() - cpu0 - client_cpu;
	r.frames = cs[0].frames;
	for (uint32_t i = 0; i < n; i++)
		tws_free(cs[i].ws);
	free(cs);
	free(th);
	pc_gateway_free(g);
	env_stop(&e, NULL, 0);
	free(reply);
	return r;
}

static int by_cpu(const void *a, const void *b)
{
	double x = ((const case_t *)a)->server_cpu_s, y = ((const case_t *)b)->server_cpu_s;
	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	uint32_t workers = 2, only = UINT32_MAX, repeat = 3;
	size_t max_bytes = SIZE_MAX;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--workers") && i + 1 < argc)
			workers = (uint32_t)strtoul(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--listeners") && i + 1 < argc)
			only = (uint32_t)strtoul(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--repeat") && i + 1 < argc)
			repeat = (uint32_t)strtoul(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--max-bytes") && i + 1 < argc)
			max_bytes = (size_t)strtoull(argv[++i], NULL, 10);
		else
			bench_fail("usage: %s [--workers W] [--listeners N] [--repeat R] [--max-bytes B]", argv[0]);
	}
	if (!workers || !repeat || repeat > REPEAT_MAX)
		bench_fail("--workers and --repeat (1-%u) must be positive", REPEAT_MAX);
	if (signal(SIGPIPE, SIG_IGN) == SIG_ERR)
		bench_fail("signal");
	/* 0: one SSE client */
	const uint32_t counts[] = {1, 10, 0};
	for (size_t k = 0; k < 3; k++) {
		uint32_t n = counts[k];
		if (only != UINT32_MAX && n != only)
			continue;
		uint32_t clients = n ? n : 1;
		double per_kb[CASES] = {0};
		for (size_t s = 0; s < CASES && sizes[s] <= max_bytes; s++) {
			case_t rs[REPEAT_MAX];
			for (uint32_t i = 0; i < repeat; i++)
				rs[i] = run_case(workers, sizes[s], n);
			qsort(rs, repeat, sizeof(rs[0]), by_cpu);
			case_t r = rs[repeat / 2];
			per_kb[s] = r.server_cpu_s * 1e6 / ((double)sizes[s] / 1000.0 * clients);
			printf("{\"bench\":\"gateway_stream\",\"sse\":%s,\"reply_bytes\":%zu,\"listeners\":%u,\"workers\":%u,"
			       "\"server_cpu_ms\":%.1f,\"cpu_us_per_kb\":%.1f,\"bytes_per_client\":%zu,"
			       "\"bytes_per_reply_byte\":%.2f,\"assistant_frames\":%zu,\"intact\":%s,\"wall_s\":%.2f}\n",
			       n ? "false" : "true", sizes[s], clients, workers, r.server_cpu_s * 1e3, per_kb[s], r.bytes,
			       (double)r.bytes / (double)sizes[s], r.frames, r.intact ? "true" : "false", r.wall_s);
			fflush(stdout);
		}
		if (!per_kb[2])
			continue;
		printf("{\"bench\":\"gateway_stream_ratio\",\"sse\":%s,\"listeners\":%u,\"cpu_per_kb_1mb_over_10kb\":%.2f,"
		       "\"cpu_per_kb_100kb_over_10kb\":%.2f}\n",
		       n ? "false" : "true", clients, per_kb[2] / per_kb[0], per_kb[1] / per_kb[0]);
		fflush(stdout);
	}
	return 0;
}
