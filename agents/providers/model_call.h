/*
 * The provider stream actor: one streaming model call.
 *
 * pc_model_call_start spawns an actor that sends the request on an I/O
 * thread, parses the SSE stream, decodes it with the API's decoder
 * (stream.h) and tells its owner, in order:
 *   PC_MSG_MODEL_EVENT  zero or more normalized deltas (when `deltas`)
 *   PC_MSG_MODEL_DONE   exactly once: the assembled assistant message, or
 *                       the failure classified into a failover reason
 * and then stops. An abort is a message (pc_model_call_abort): the
 * transfer is cancelled and DONE says `aborted` (never failed over).
 * Stopping the actor in any way (abort, pc_actor_stop, runtime shutdown)
 * releases the transfer, the parser and the decoder exactly once.
 */
#ifndef PINCER_AGENTS_PROVIDERS_MODEL_CALL_H
#define PINCER_AGENTS_PROVIDERS_MODEL_CALL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "io/io.h"
#include "agents/obs/obs.h"
#include "failover.h"
#include "provider.h"
#include "stream.h"
#include "usage.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
	PC_MSG_MODEL_EVENT = PC_MSG_TYPE_SYSTEM + 0x2000,
	PC_MSG_MODEL_DONE,
};

typedef struct pc_model_call_config {
	pc_provider_api_t api;
	const char *url;             /* the full endpoint */
	const char *const *headers;  /* "Name: value" lines (auth, version, ...) */
	size_t header_count;
	const char *body;            /* the request JSON (request.h builds it) */
	size_t body_len;
	const char *provider;        /* for the classifier: "openai", "anthropic", ... */
	uint32_t connect_timeout_ms; /* 0: 10 s */
	uint32_t total_timeout_ms;   /* 0: none (the attempt's timer actor rules) */
	uint32_t idle_timeout_ms;    /* 0: none; silence this long fails as a timeout */
	bool http2_prior_knowledge;  /* http://: HTTP/2 in cleartext (h2c), calls sharing
				      * connections (the provider's "http2") */
	bool deltas;                 /* send PC_MSG_MODEL_EVENT for each delta */
	uint64_t tag;                /* echoed in every message */
	/* The call's lifecycle (model_call_lifecycle.h), all optional: a
	 * refused transition is logged to `log` and counted in `illegal`;
	 * with `trace`, each transition is one PINCER_TRACE line
	 * (machine model_call) naming the call `trace_id` (copied). */
	pc_log_t *log;
	pc_metric_t *illegal;
	bool trace;
	const char *trace_id;
} pc_model_call_config_t;

/* PC_MSG_MODEL_EVENT: one normalized stream event. The strings live in
 * the same message (NUL-terminated), valid while the handler runs. */
typedef struct pc_model_event_msg {
	uint64_t tag;
	pc_stream_event_kind_t kind;
	uint32_t block;
	int32_t tool_index;
	pc_stop_reason_t stop_reason;
	pc_usage_t usage;     /* PC_STREAM_USAGE */
	const char *text;     /* deltas, the complete arguments, the error message */
	size_t text_len;
	const char *id;       /* tool calls */
	const char *name;     /* tool calls */
	char buf[];
} pc_model_event_msg_t;

/* PC_MSG_MODEL_DONE. `message` is the unified assistant message as JSON
 * text (stream.h, pc_stream_result_to_json), present also on failure when
 * anything was streamed; `error` is a one-line description. */
typedef struct pc_model_done_msg {
	uint64_t tag;
	int32_t result;               /* 0: a complete answer; else negative */
	int32_t http_status;          /* 0 when no response arrived */
	pc_failover_result_t failure; /* reason etc.; meaningful when result != 0 */
	pc_transport_error_t transport;
	pc_stop_reason_t stop_reason;
	pc_usage_t usage;
	bool aborted;                 /* pc_model_call_abort */
	uint64_t bytes;               /* response bytes received */
	uint64_t ttft_us;             /* start to the first content delta; 0: none */
	uint64_t duration_us;
	const char *message;          /* JSON text or NULL */
	size_t message_len;
	const char *error;            /* "" when result == 0 */
	const char *provider_message; /* an error status: the provider's own
				       * message (not redacted), else NULL */
	char buf[];
} pc_model_done_msg_t;

/* Spawns the call's actor; messages go to `owner`. The configuration is
 * copied. On success *out (may be NULL) is a reference the caller owns. */
int pc_model_call_start(pc_io_t *io, const pc_model_call_config_t *cfg, pc_actor_t *owner,
			pc_actor_t **out);

/* Asks the call to stop (a message; any thread). DONE follows with
 * `aborted` set, unless the call had already finished. */
int pc_model_call_abort(pc_actor_t *call);

#ifdef __cplusplus
}
#endif
#endif
