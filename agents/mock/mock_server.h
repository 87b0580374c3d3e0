/*
 * The mock LLM server: OpenAI- and Anthropic-compatible endpoints whose
 * every answer is scripted (see scenario.h and docs/mock-llm.md).
 *
 *   POST /v1/chat/completions   OpenAI chat completions (SSE when stream:true)
 *   POST /v1/messages           Anthropic messages (SSE when stream:true)
 *   GET  /v1/models             the model list (Anthropic's shape when the
 *                               request carries anthropic-version)
 *   GET  /__mock/requests       the recorded requests, oldest first
 *   POST /__mock/reset          forget them and rewind the scenario
 *   POST /__mock/scenario       replace the scenario (body: scenario JSON)
 *   POST /__mock/pause          hold every answer where it stands for a while
 *                               (body: {"ms": N}), as a target in a long pause
 *
 * Each chat request gets its own responder actor, which picks the step
 * (marker, header, scenario, default), records the request and runs the
 * plan: delays are runtime timers to that actor, never sleeps. With no
 * delay a whole streamed answer goes out as one respond_start, one write
 * and one end.
 *
 * Threads: pc_mock_server_start and _free from the thread that owns `io`
 * (as for pc_http_server_new / _free); the rest from any thread, actor
 * handlers included.
 */
#ifndef PINCER_AGENTS_MOCK_MOCK_SERVER_H
#define PINCER_AGENTS_MOCK_MOCK_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "io/io.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pc_mock_server pc_mock_server_t;

typedef struct pc_mock_server_config {
	const char *host;          /* numeric address; NULL: "127.0.0.1" */
	uint16_t port;             /* 0: an ephemeral port (pc_mock_server_port) */
	const char *scenario;      /* scenario JSON; NULL: every answer is the echo */
	size_t scenario_len;       /* 0: strlen(scenario) */
	uint32_t max_records;      /* requests kept for /__mock/requests; 0: 10000 */
	size_t max_record_bytes;   /* and their total size; 0: 64 MiB */
	uint32_t max_body_bytes;   /* largest request body; 0: 32 MiB */
	uint32_t max_output_bytes; /* answer bytes queued for one connection before
				    * it is dropped; 0: 256 MiB. The mock writes on its
				    * script's schedule, not as the client reads (its
				    * answers are in memory already), so this is what a
				    * slow client may fall behind by: a 1 MB reply in
				    * 10-byte deltas is ~18 MB of SSE */
	uint32_t max_streams;      /* HTTP/2 (h2c) requests at once on one connection;
				    * 0: the HTTP server's default (1,000) */
} pc_mock_server_config_t;

/* Binds, routes and starts serving on `io`. A bad scenario fails with
 * PC_EINVAL and its message in `err` (`errcap` bytes, may be 0). On
 * success *out is the caller's, released with pc_mock_server_free. */
int pc_mock_server_start(pc_io_t *io, const pc_mock_server_config_t *cfg, pc_mock_server_t **out,
			 char *err, size_t errcap);

/* The mock as the agent's in-process model server (agents/agent.h,
 * pc_agent_embedded_llm_t): started on 127.0.0.1 with `scenario`, keeping
 * the last 64 requests (1 MiB); stopped with _stop (NULL: a no-op). */
int pc_mock_server_embedded_start(pc_io_t *io, const char *scenario, void **server, uint16_t *port, char *err,
				  size_t errcap);
void pc_mock_server_embedded_stop(void *server);

uint16_t pc_mock_server_port(const pc_mock_server_t *m);

/* Replaces the scenario (cursors start over). On PC_EINVAL the old one
 * stays and `err` says why. Requests already answering keep their step. */
int pc_mock_server_set_scenario(pc_mock_server_t *m, const char *json, size_t len, char *err,
				size_t errcap);

/* The recorded requests as a JSON array, oldest first (the caller owns
 * it): each {"seq", "time_ms", "api", "method", "path", "headers",
 * "body", "source", "step", "error"}. */
int pc_mock_server_requests(pc_mock_server_t *m, cJSON **out);

/* Forgets the recorded requests, rewinds the scenario and restarts the
 * sequence numbers (so ids repeat from the start). */
void pc_mock_server_reset(pc_mock_server_t *m);

/* Stops listening and closes every connection, then releases the server.
 * Responders still waiting on a timer stop at their next step (or with
 * the runtime). NULL is a no-op. */
void pc_mock_server_free(pc_mock_server_t *m);

#ifdef __cplusplus
}
#endif
#endif
