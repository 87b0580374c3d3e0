/*
 * Mock LLM scenarios: what the mock answers to one request, as data.
 *
 * A step (one JSON object, see docs/mock-llm.md) says what one answer is:
 * streamed text, tool calls, reasoning, nothing, an HTTP error, a stall,
 * and how it is delivered (chunks, delays, a disconnect, malformed SSE).
 * A scenario is an ordered list of steps consumed one per request, with
 * one cursor per "x-mock-session" key.
 *
 * A step becomes a plan: the exact bytes to send, cut into writes with
 * the wait before each, and what to do at the end. Building a plan is
 * pure (no clock, no I/O): the same step, request, sequence number and
 * timestamp give the same bytes, so tests can compare them exactly. The
 * mock server (mock_server.h) only executes plans.
 *
 * Threads: steps and plans are immutable once built and may be read from
 * any thread. A scenario's cursors are not thread-safe: the caller
 * serialises pc_mock_scenario_next / _rewind (the server holds a mutex);
 * its reference count is atomic.
 */
#ifndef PINCER_AGENTS_MOCK_SCENARIO_H
#define PINCER_AGENTS_MOCK_SCENARIO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Which wire format a request speaks. */
typedef enum pc_mock_api {
	PC_MOCK_OPENAI = 0,    /* POST /v1/chat/completions */
	PC_MOCK_ANTHROPIC = 1, /* POST /v1/messages */
} pc_mock_api_t;

/* Where a request's step came from, in priority order. */
typedef enum pc_mock_source {
	PC_MOCK_SRC_MARKER = 0,   /* [[mock:{...}]] in the last user message */
	PC_MOCK_SRC_HEADER = 1,   /* the x-mock-scenario header */
	PC_MOCK_SRC_SCENARIO = 2, /* the scenario's sequence */
	PC_MOCK_SRC_DEFAULT = 3,  /* the scenario's default step, or the echo */
} pc_mock_source_t;

/* "marker", "header", "scenario", "default". */
const char *pc_mock_source_name(pc_mock_source_t src);

/* Error messages (parse failures) fit in this many bytes. */
#define PC_MOCK_ERR_MAX 256

typedef struct pc_mock_step pc_mock_step_t;
typedef struct pc_mock_scenario pc_mock_scenario_t;

/* Parses and validates one step. On failure returns PC_EINVAL (or
 * PC_ENOMEM) and writes a message naming the offending key to `err`
 * (`errcap` bytes, may be 0). The caller owns *out. */
int pc_mock_step_parse(const cJSON *json, pc_mock_step_t **out, char *err, size_t errcap);
void pc_mock_step_free(pc_mock_step_t *step); /* NULL is a no-op */

/* The step as it was given, as compact JSON (for the request log). */
const char *pc_mock_step_json(const pc_mock_step_t *step);

/* Parses a scenario file: {"steps": [...], "then": "default"|"loop",
 * "default": {step}, "models": ["name", ...]} or a bare array of steps.
 * Errors as pc_mock_step_parse, with the path ("steps[2].status: ...").
 * *out holds one reference, owned by the caller. */
int pc_mock_scenario_parse(const char *json, size_t len, pc_mock_scenario_t **out, char *err,
			   size_t errcap);

pc_mock_scenario_t *pc_mock_scenario_retain(pc_mock_scenario_t *sc);
void pc_mock_scenario_release(pc_mock_scenario_t *sc); /* NULL is a no-op */

/* Sessions with their own cursor; requests of further sessions share the
 * cursor of requests that name none. */
#define PC_MOCK_MAX_SESSIONS 65536

/* Consumes the next step for a request of `session` (NULL or "": the
 * shared cursor). *step is borrowed from `sc` (valid while the caller
 * holds a reference) and NULL when the answer is the echo; *src is
 * PC_MOCK_SRC_SCENARIO or PC_MOCK_SRC_DEFAULT. PC_ENOMEM if a new
 * session's cursor could not be stored. Not thread-safe. */
int pc_mock_scenario_next(pc_mock_scenario_t *sc, const char *session, const pc_mock_step_t **step,
			  pc_mock_source_t *src);

/* Puts every cursor back to the first step. Not thread-safe. */
void pc_mock_scenario_rewind(pc_mock_scenario_t *sc);

/* The step a request scripts for itself: a [[mock:{...}]] marker in the
 * last message when that is a user message, else the x-mock-scenario
 * header value (`header`, may be NULL). *out is NULL when there is
 * neither; the caller owns it otherwise. PC_EINVAL with a message in
 * `err` when a marker or header is there but is not a valid step. */
int pc_mock_request_step(const cJSON *body, const char *header, pc_mock_step_t **out,
			 pc_mock_source_t *src, char *err, size_t errcap);

/* ---- plans ---------------------------------------------------------------- */

/* What happens after the last write. */
typedef enum pc_mock_finish {
	PC_MOCK_END = 0,   /* the response completes */
	PC_MOCK_ABORT = 1, /* the connection is closed after finish_wait_ms */
	PC_MOCK_HANG = 2,  /* nothing more is ever sent (the client gives up) */
} pc_mock_finish_t;

/* One write: `len` bytes of the body at `off`, after waiting wait_ms. */
typedef struct pc_mock_write {
	uint32_t wait_ms;
	uint32_t events; /* SSE events it holds (a partial one counts) */
	size_t off;
	size_t len;
} pc_mock_write_t;

/*
 * The plan the server runs: wait head_wait_ms; then, if send_head, either
 * answer at once with the whole body (pc_http_respond, !streamed) or
 * start a streamed response and perform each write in turn; then wait
 * finish_wait_ms and finish.
 */
typedef struct pc_mock_plan {
	int status;
	char *headers;          /* extra header lines, each "Name: value\r\n" */
	bool send_head;         /* false: the client never sees a status line */
	bool streamed;          /* respond_start / write / end */
	uint32_t head_wait_ms;
	char *body;             /* every byte of the answer */
	size_t body_len;
	pc_mock_write_t *writes; /* streamed: consecutive slices of body */
	size_t write_count;
	pc_mock_finish_t finish;
	uint32_t finish_wait_ms;
} pc_mock_plan_t;

/* Builds the answer to a chat request (`body`, the parsed request) from
 * `step` (NULL: echo the last user message as streamed text). `seq`
 * seeds the ids (chatcmpl-..., msg_..., call_..., toolu_...), `created`
 * is the Unix time put in the answer. The plan is the caller's, freed
 * with pc_mock_plan_free. */
int pc_mock_plan_build(const pc_mock_step_t *step, pc_mock_api_t api, const cJSON *body,
		       uint64_t seq, int64_t created, pc_mock_plan_t *out);

/* An error the mock itself answers (a body that is not JSON, a bad
 * marker), in the API's error shape with type invalid_request_error. */
int pc_mock_plan_error(pc_mock_api_t api, int status, const char *message, uint64_t seq,
		       pc_mock_plan_t *out);

/* The answer to GET /v1/models in the API's shape, listing the scenario's
 * models (`sc` may be NULL: just "mock-model"). */
int pc_mock_plan_models(const pc_mock_scenario_t *sc, pc_mock_api_t api, uint64_t seq,
			int64_t created, pc_mock_plan_t *out);

void pc_mock_plan_free(pc_mock_plan_t *plan); /* frees the contents; NULL is a no-op */

#ifdef __cplusplus
}
#endif
#endif
