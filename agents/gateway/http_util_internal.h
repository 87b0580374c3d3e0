/*
 * What the gateway's plain-HTTP parts (openai.c, ops.c) share: JSON
 * answers, the request counters each part keeps by route and status, and
 * what the OpenAI part tells /metrics.
 *
 * Counters are plain uint64_t updated and read with relaxed atomics: each
 * part owns its own, so no part ever writes into another's memory (the
 * parts are freed one after the other while their actors wind down).
 */
#ifndef PINCER_AGENTS_GATEWAY_HTTP_UTIL_INTERNAL_H
#define PINCER_AGENTS_GATEWAY_HTTP_UTIL_INTERNAL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "gateway_internal.h"

/* The statuses the counters tell apart; the last slot, 0, is "other". */
#define PC__GW_CODES 15u
static inline int pc__gw_code(size_t i)
{
	static const int codes[PC__GW_CODES] = {200, 400, 401, 403, 404, 405, 408, 413, 415, 429, 500, 502, 503, 504, 0};
	return i < PC__GW_CODES ? codes[i] : 0;
}

static inline size_t pc__gw_code_index(int status)
{
	for (size_t i = 0; i + 1 < PC__GW_CODES; i++)
		if (pc__gw_code(i) == status)
			return i;
	return PC__GW_CODES - 1;
}

static inline void pc__gw_count(uint64_t *c) { __atomic_add_fetch(c, 1, __ATOMIC_RELAXED); }
static inline uint64_t pc__gw_read(const uint64_t *c) { return __atomic_load_n(c, __ATOMIC_RELAXED); }

/* The OpenAI part's routes, as /metrics labels them. */
enum { PC__GW_OA_CHAT = 0, PC__GW_OA_MODELS, PC__GW_OA_UNKNOWN, PC__GW_OA_ROUTES };
static inline const char *pc__gw_oa_route_name(int r)
{
	return r == PC__GW_OA_CHAT ? "/v1/chat/completions" : r == PC__GW_OA_MODELS ? "/v1/models" : "/v1/other";
}

/* A snapshot of the OpenAI part's counters (openai.c fills it). */
typedef struct pc__gw_openai_stats {
	uint64_t http[PC__GW_OA_ROUTES][PC__GW_CODES]; /* answers by route and status */
	uint64_t runs[2];  /* chat completions that started a run: [0] plain, [1] streamed */
	uint64_t active;   /* chat completions waiting for their run now */
	uint64_t gone;     /* clients that left before their answer was complete */
} pc__gw_openai_stats_t;

/* Zeroes *out when the part does not exist. Any thread, while the
 * gateway lives. */
void pc__gw_openai_stats(pc_gateway_t *g, pc__gw_openai_stats_t *out);

/* `n` (<= 16) random bytes. When the kernel has no randomness to give,
 * the clock and a counter still make them unique in this process, which
 * is what ids and throw-away keys need. */
static inline void pc__gw_random(uint8_t *b, size_t n)
{
	static uint64_t counter;
	if (n <= 16 && getrandom(b, n, GRND_NONBLOCK) == (ssize_t)n)
		return;
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	uint64_t w[2] = {(uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec,
			 __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED)};
	memcpy(b, w, n < sizeof(w) ? n : sizeof(w));
}

/* An answer's x-request-id: at most this many bytes, plus the NUL. */
#define PC__GW_REQUEST_ID_MAX 128u

/*
 * The id every plain-HTTP answer carries as x-request-id, for the client,
 * proxies and logs to name the request by: the client's own x-request-id
 * when it is 1 to 128 bytes of printable ASCII (so it cannot break the
 * header it is echoed in), else "req_" and 24 random hex digits.
 */
static inline void pc__gw_request_id(const pc_http_request_msg_t *q, char out[PC__GW_REQUEST_ID_MAX + 1])
{
	const char *h = pc_http_request_header(q, "x-request-id");
	size_t n = h ? strlen(h) : 0;
	bool ok = n >= 1 && n <= PC__GW_REQUEST_ID_MAX;
	for (size_t i = 0; ok && i < n; i++)
		ok = h[i] >= 0x20 && h[i] <= 0x7e;
	if (ok) {
		memcpy(out, h, n + 1);
		return;
	}
	uint8_t b[12];
	pc__gw_random(b, sizeof(b));
	memcpy(out, "req_", 4);
	for (size_t i = 0; i < sizeof(b); i++)
		snprintf(out + 4 + 2 * i, 3, "%02x", b[i]);
}

/* Answers `id` with `body` as JSON (NULL: {}).
 * `extra` is further header lines ("Name: value\r\n") or NULL. Returns the
 * server's code (PC_ENOTFOUND when the client has gone). */
static inline int pc__gw_respond_json(pc_http_server_t *srv, uint64_t id, int status, const char *extra,
				      const cJSON *body)
{
	char *text = body ? cJSON_PrintUnformatted(body) : NULL;
	char headers[768];
	snprintf(headers, sizeof(headers), "Content-Type: application/json; charset=utf-8\r\n%s", extra ? extra : "");
	/* out of memory printing: still answer, with the status alone */
	int rc = pc_http_respond(srv, id, status, headers, text ? text : "{}", text ? strlen(text) : 2);
	cJSON_free(text);
	return rc;
}

#endif
