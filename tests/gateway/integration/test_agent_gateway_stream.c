/*
 * Long replies streamed to WebSocket clients (docs/gateway.md, Events):
 * the embedded mock streams 10 KB, 100 KB and 1 MB answers in 10-byte
 * deltas over about 2 s to one and to ten clients at once, each with a run
 * of its own. What each client receives is bounded by three times the
 * reply plus 100 KB (the merged frames resend the text about twice, not
 * once per delta), and its deltas add up to exactly the final text, which
 * the last assistant event before the end carries whole.
 */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>

#include "curl_client.h"
#include "gateway_harness.h"
#include "io/buf.h"

TestSuite(agent_gateway_stream, .timeout = 600);

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZED 1
#else
#define SANITIZED 0
#endif

#define DELTA_BYTES 10u
#define STREAM_MS 2000u
#define GROUP_MS 50u

/* "w00000000 w00000001 ...": `size` bytes, words of 9 and a space, so that
 * 10-byte pieces are whole words. malloc'd. */
static char *reply_text(size_t size)
{
	char *t = malloc(size + 1);
	cr_assert_not_null(t);
	for (size_t i = 0; i < size; i += DELTA_BYTES) {
		char w[16];
		snprintf(w, sizeof(w), "w%08zu ", i / DELTA_BYTES % 100000000u);
		memcpy(t + i, w, size - i < DELTA_BYTES ? size - i : DELTA_BYTES);
	}
	/* the final payload is trimmed: the reply ends in a full stop */
	t[size - 1] = '.';
	t[size] = '\0';
	return t;
}

/* The mock's default step: the reply in 10-byte pieces, 40 groups 50 ms
 * apart. malloc'd. */
static char *scenario_for(const char *reply, size_t size)
{
	size_t chunks = size / DELTA_BYTES, groups = STREAM_MS / GROUP_MS;
	size_t cap = size + 256;
	char *s = malloc(cap);
	cr_assert_not_null(s);
	snprintf(s, cap, "{\"default\":{\"text\":\"%s\",\"chunks\":%zu,\"delay_ms\":%u,\"burst\":%zu}}", reply, chunks,
		 GROUP_MS, (chunks + groups - 1) / groups);
	return s;
}

typedef struct reader {
	cl_t *c;
	char run[80];
	char req[32];
	/* results, checked on the test's thread */
	size_t bytes;       /* every frame's payload since the request */
	size_t frames;      /* assistant events */
	pc__buf_t deltas;   /* the assistant deltas, joined */
	char *last_text;    /* the last assistant event's text */
	char *final_text;   /* the final answer's first payload */
	bool done;
} reader_t;

/* Reads frames until the agent's final answer; no assertions here (not
 * the test's thread): what it saw is checked afterwards. */
static void *read_run(void *arg)
{
	reader_t *r = arg;
	uint64_t until = now_ms() + 120000;
	while (!r->done && now_ms() < until) {
		char *m = NULL;
		size_t len = 0;
		if (tws_recv(r->c->ws, left_ms(until), &m, &len) != 0)
			break;
		r->bytes += len;
		cJSON *f = cJSON_ParseWithLength(m, len);
		free(m);
		const cJSON *p = jget(f, "payload");
		if (!strcmp(jstr(f, "type"), "event") && !strcmp(jstr(f, "event"), "agent") &&
		    !strcmp(jstr(p, "stream"), "assistant")) {
			r->frames++;
			const char *d = jstr(jget(p, "data"), "delta");
			pc__buf_append(&r->deltas, d, strlen(d));
			free(r->last_text);
			r->last_text = strdup(jstr(jget(p, "data"), "text"));
		} else if (!strcmp(jstr(f, "type"), "res") && !strcmp(jstr(f, "id"), r->req) &&
			   strcmp(jstr(p, "status"), "accepted") != 0) {
			r->final_text = strdup(jstr(cJSON_GetArrayItem(jget(jget(p, "result"), "payloads"), 0), "text"));
			r->done = true;
		}
		cJSON_Delete(f);
	}
	return NULL;
}

static void stream_to(size_t size, size_t listeners)
{
	char *reply = reply_text(size);
	char *scenario = scenario_for(reply, size);
	gw_t f;
	gw_start_scenario(&f, GW_CONFIG(""), scenario, NULL);
	free(scenario);
	reader_t *rs = calloc(listeners, sizeof(*rs));
	pthread_t *th = calloc(listeners, sizeof(*th));
	cr_assert(rs && th);
	for (size_t i = 0; i < listeners; i++) {
		char idem[32], key[32];
		snprintf(idem, sizeof(idem), "stream-%zu", i);
		snprintf(key, sizeof(key), "stream-%zu", i);
		rs[i].c = cl_connect(f.port);
		cl_req(rs[i].c, "agent", agent_params("go", idem, key), rs[i].req);
	}
	uint64_t t0 = now_ms();
	for (size_t i = 0; i < listeners; i++)
		cr_assert_eq(pthread_create(&th[i], NULL, read_run, &rs[i]), 0);
	for (size_t i = 0; i < listeners; i++)
		cr_assert_eq(pthread_join(th[i], NULL), 0);
	uint64_t wall = now_ms() - t0;
	size_t bound = 3 * size + 100 * 1024, most = 0;
	for (size_t i = 0; i < listeners; i++) {
		reader_t *r = &rs[i];
		cr_assert(r->done, "client %zu: no final answer", i);
		cr_assert_str_eq(r->final_text, reply, "client %zu: the final answer differs: %.200s", i, r->final_text);
		cr_assert_eq(r->deltas.len, size, "client %zu: the deltas add up to %zu bytes, not %zu", i,
			     r->deltas.len, size);
		cr_assert(!memcmp(r->deltas.p, reply, size), "client %zu: the deltas differ from the text", i);
		cr_assert_not_null(r->last_text);
		cr_assert_str_eq(r->last_text, reply, "client %zu: the last assistant event lacks text", i);
		cr_assert_leq(r->bytes, bound, "client %zu: %zu bytes for a %zu-byte reply", i, r->bytes, size);
		most = r->bytes > most ? r->bytes : most;
	}
	cr_log_info("%zu bytes to %zu clients: at most %zu bytes each (bound %zu), %zu frames, %llu ms", size,
		    listeners, most, bound, rs[0].frames, (unsigned long long)wall);
	for (size_t i = 0; i < listeners; i++) {
		cl_free(rs[i].c);
		pc__buf_free(&rs[i].deltas);
		free(rs[i].last_text);
		free(rs[i].final_text);
	}
	free(rs);
	free(th);
	free(reply);
	gw_stop(&f);
}

/* The same reply to one OpenAI SSE client: its chunks carry deltas only,
 * so what it receives is the reply and each batch's chunk framing. */
static void stream_sse(size_t size)
{
	char *reply = reply_text(size);
	char *scenario = scenario_for(reply, size);
	gw_t f;
	gw_start_scenario(&f, GW_CONFIG(""), scenario, NULL);
	free(scenario);
	static const char body[] = "{\"model\":\"pincer\",\"stream\":true,"
				   "\"messages\":[{\"role\":\"user\",\"content\":\"go\"}]}";
	const char *hdrs[] = {"Authorization: Bearer " GW_TOKEN, NULL};
	resp_t r = {0};
	curl_request(f.port, "POST", "/v1/chat/completions", hdrs, body, sizeof(body) - 1, 120000, &r);
	cr_assert_eq(r.status, 200);
	/* the content of every chunk, joined */
	pc__buf_t text = {0};
	size_t chunks = 0;
	char end[256] = "no finish_reason"; /* how the stream said it ended */
	for (char *line = strtok(r.body, "\n"); line; line = strtok(NULL, "\n")) {
		if (strncmp(line, "data: {", 7) != 0)
			continue;
		cJSON *j = cJSON_Parse(line + 6);
		const cJSON *choice = cJSON_GetArrayItem(jget(j, "choices"), 0);
		const char *c = jstr(jget(choice, "delta"), "content");
		if (c && *c) {
			pc__buf_append(&text, c, strlen(c));
			chunks++;
		}
		if (cJSON_IsString(jget(choice, "finish_reason")) || jget(j, "error"))
			snprintf(end, sizeof(end), "%.250s", line + 6);
		cJSON_Delete(j);
	}
	size_t bound = 3 * size + 100 * 1024;
	cr_assert_eq(text.len, size, "the chunks add up to %zu bytes, not %zu (the end: %s)", text.len, size, end);
	cr_assert(!memcmp(text.p, reply, size), "the chunks differ from the reply");
	cr_assert_leq(r.len, bound, "%zu bytes for a %zu-byte reply", r.len, size);
	cr_log_info("%zu bytes over SSE: %zu bytes received (bound %zu), %zu chunks", size, r.len, bound, chunks);
	pc__buf_free(&text);
	resp_free(&r);
	free(reply);
	gw_stop(&f);
}

Test(agent_gateway_stream, ten_kb_to_an_sse_client) { stream_sse(10000); }
Test(agent_gateway_stream, hundred_kb_to_an_sse_client) { stream_sse(100000); }
Test(agent_gateway_stream, one_mb_to_an_sse_client) { stream_sse(1000000); }

Test(agent_gateway_stream, ten_kb_to_one_client) { stream_to(10000, 1); }
Test(agent_gateway_stream, ten_kb_to_ten_clients) { stream_to(10000, 10); }
Test(agent_gateway_stream, hundred_kb_to_one_client) { stream_to(100000, 1); }
Test(agent_gateway_stream, hundred_kb_to_ten_clients) { stream_to(100000, 10); }
Test(agent_gateway_stream, one_mb_to_one_client) { stream_to(1000000, 1); }

/* Ten runs of 1 MB each are 10 MB of SSE parsing per second for the
 * sanitizers: two clients there (the bound is the same per client). */
Test(agent_gateway_stream, one_mb_to_ten_clients) { stream_to(1000000, SANITIZED ? 2 : 10); }

/* ---- a client whose socket is full ---- */

#define SLOW_RUNS 10
#define SLOW_SIZE 2000u

static uint16_t port_of(int fd, bool peer)
{
	struct sockaddr_in a;
	socklen_t n = sizeof(a);
	int rc = peer ? getpeername(fd, (struct sockaddr *)&a, &n) : getsockname(fd, (struct sockaddr *)&a, &n);
	return rc == 0 && a.sin_family == AF_INET ? ntohs(a.sin_port) : 0;
}

/* The gateway runs in this process: finds the server's end of client c's
 * connection and gives it a small send buffer, as a slow network would
 * (loopback's buffers grow to megabytes and would hide the backpressure). */
static void shrink_server_sndbuf(cl_t *c, uint16_t server_port)
{
	uint16_t client_port = port_of(tws_fd(c->ws), false);
	cr_assert_neq(client_port, 0);
	for (int fd = 3; fd < 4096; fd++) {
		if (port_of(fd, false) != server_port || port_of(fd, true) != client_port)
			continue;
		int size = 4096;
		cr_assert_eq(setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof(size)), 0);
		return;
	}
	cr_assert_fail("the server's end of the connection was not found");
}

/* One client, ten runs of a 2 KB reply each (40 bursts over 2 s: about 40
 * frames a run when read at once). It reads nothing for 1.5 s through
 * 4 KiB socket buffers, so the server's socket fills: the deltas of that
 * time are merged into a frame per run, not queued one by one. */
Test(agent_gateway_stream, a_full_socket_gets_merged_frames)
{
	char *reply = reply_text(SLOW_SIZE);
	char *scenario = scenario_for(reply, SLOW_SIZE);
	gw_t f;
	gw_start_scenario(&f, GW_CONFIG(""), scenario, NULL);
	free(scenario);
	tws_options_t o = {.port = f.port, .rcvbuf = 4096};
	cl_t *c = cl_open_with(&o);
	cJSON *r = cl_handshake(c, connect_params(GW_TOKEN, NULL));
	cr_assert(jok(r));
	cJSON_Delete(r);
	shrink_server_sndbuf(c, f.port);
	for (int i = 0; i < SLOW_RUNS; i++) {
		char key[32];
		snprintf(key, sizeof(key), "slow-%d", i);
		cl_req(c, "agent", agent_params("go", key, key), NULL);
	}
	sleep_ms(1500);
	char runs[SLOW_RUNS][80] = {{0}};
	pc__buf_t joined[SLOW_RUNS] = {{0}};
	size_t frames = 0, finals = 0;
	uint64_t until = now_ms() + 60000;
	while (finals < SLOW_RUNS && now_ms() < until) {
		cJSON *fr = cl_frame(c, left_ms(until));
		if (!fr)
			break;
		const cJSON *p = jget(fr, "payload");
		if (!strcmp(jstr(fr, "event"), "agent") && !strcmp(jstr(p, "stream"), "assistant")) {
			int k = 0;
			while (k < SLOW_RUNS && runs[k][0] && strcmp(runs[k], jstr(p, "runId")))
				k++;
			cr_assert_lt(k, SLOW_RUNS, "more runs than were started");
			snprintf(runs[k], sizeof(runs[k]), "%s", jstr(p, "runId"));
			const char *d = jstr(jget(p, "data"), "delta");
			pc__buf_append(&joined[k], d, strlen(d));
			frames++;
		} else if (!strcmp(jstr(fr, "type"), "res") && strcmp(jstr(p, "status"), "accepted") != 0) {
			cr_assert_str_eq(jstr(p, "status"), "ok");
			finals++;
		}
		cJSON_Delete(fr);
	}
	cr_assert_eq(finals, SLOW_RUNS, "%zu of %d runs ended", finals, SLOW_RUNS);
	for (int k = 0; k < SLOW_RUNS; k++) {
		cr_assert_eq(joined[k].len, SLOW_SIZE, "run %d: %zu bytes of deltas", k, joined[k].len);
		cr_assert(!memcmp(joined[k].p, reply, SLOW_SIZE), "run %d: the deltas differ from the text", k);
		pc__buf_free(&joined[k]);
	}
	/* read at once, about 40 frames a run; 1.5 s of them behind a full
	 * socket are one frame a run */
	cr_log_info("%zu assistant frames for %d runs after a pause", frames, SLOW_RUNS);
	cr_assert_leq(frames, (size_t)SLOW_RUNS * 25, "%zu frames: the pause's deltas were queued one by one", frames);
	cl_free(c);
	free(reply);
	gw_stop(&f);
}
