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

#include <pthread.h>

#include "gateway_harness.h"
#include "io/buf_internal.h"

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
		if (pc_ws_client_recv(r->c->ws, left_ms(until), &m, &len) != 0)
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

Test(agent_gateway_stream, ten_kb_to_one_client) { stream_to(10000, 1); }
Test(agent_gateway_stream, ten_kb_to_ten_clients) { stream_to(10000, 10); }
Test(agent_gateway_stream, hundred_kb_to_one_client) { stream_to(100000, 1); }
Test(agent_gateway_stream, hundred_kb_to_ten_clients) { stream_to(100000, 10); }
Test(agent_gateway_stream, one_mb_to_one_client) { stream_to(1000000, 1); }

/* Ten runs of 1 MB each are 10 MB of SSE parsing per second for the
 * sanitizers: two clients there (the bound is the same per client). */
Test(agent_gateway_stream, one_mb_to_ten_clients) { stream_to(1000000, SANITIZED ? 2 : 10); }
