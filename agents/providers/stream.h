/*
 * Streaming response decoders: the SSE events of one model call go in (as
 * io/sse.h hands them out), normalized events come out through a callback,
 * and at the end the assembled assistant message in the spec's unified
 * model (§11.1): ordered content blocks (text, thinking, toolCall), a stop
 * reason, usage and an error, if any.
 *
 * One decoder per API: OpenAI chat completions (`data:` chunks ending in
 * `data: [DONE]`, tool calls as fragments keyed by index, possibly
 * interleaved) and Anthropic messages (typed events from message_start to
 * message_stop). Both emit the same events, so the attempt layer never
 * looks at a wire format.
 *
 * Pure: no I/O, no threads, no globals. A decoder belongs to one stream and
 * is used by one thread (or one actor's handlers) at a time.
 *
 * Errors are sticky, as in io/sse.h: once a feed fails (PC_EINVAL for a
 * malformed data line, PC_ELIMIT for a limit, PC_ENOMEM, or a callback's
 * nonzero return) every later feed returns the same code; finish still
 * assembles what arrived and records the error.
 */
#ifndef PINCER_AGENTS_PROVIDERS_STREAM_H
#define PINCER_AGENTS_PROVIDERS_STREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "io/io.h"
#include "runtime/error.h"
#include "provider.h"
#include "usage.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pc_stream_decoder pc_stream_decoder_t;

/* The spec's stopReason values. */
typedef enum pc_stop_reason {
	PC_STOP_NONE = 0, /* not known (yet) */
	PC_STOP_STOP,     /* "stop": the turn is finished */
	PC_STOP_LENGTH,   /* "length": the output budget ran out */
	PC_STOP_TOOL_USE, /* "toolUse": the model wants its tool calls run */
	PC_STOP_ERROR,    /* "error" */
	PC_STOP_ABORTED,  /* "aborted" */
} pc_stop_reason_t;

/* "stop", "length", "toolUse", "error", "aborted"; "" for PC_STOP_NONE. */
const char *pc_stop_reason_name(pc_stop_reason_t r);

typedef enum pc_stream_event_kind {
	PC_STREAM_TEXT_DELTA = 1,   /* text */
	PC_STREAM_THINKING_DELTA,   /* text: reasoning */
	PC_STREAM_SIGNATURE_DELTA,  /* text: a piece of the thinking block's signature */
	PC_STREAM_TOOL_CALL_START,  /* id, name (as known so far), tool_index */
	PC_STREAM_TOOL_CALL_ARGS,   /* text: a fragment of the arguments JSON */
	PC_STREAM_TOOL_CALL_END,    /* id, name, text: the complete arguments,
				     * args_object */
	PC_STREAM_USAGE,            /* usage: the call's usage so far */
	PC_STREAM_STOP,             /* stop_reason, raw_stop_reason: the stream is
				     * complete; always the last event */
	PC_STREAM_ERROR,            /* text: error message, error_type: the
				     * provider's error type (may be ""); a
				     * PC_STREAM_STOP with PC_STOP_ERROR follows */
} pc_stream_event_kind_t;

/* Valid only during the callback: copy what you keep. Strings are never
 * NULL (empty when not known) and are NUL-terminated. */
typedef struct pc_stream_event {
	pc_stream_event_kind_t kind;
	size_t block;            /* index of the content block it belongs to */
	int tool_index;          /* the provider's index of the call or block */
	const char *text;
	size_t text_len;
	const char *id;
	const char *name;
	bool args_object;        /* TOOL_CALL_END: the arguments parse as an object */
	const pc_usage_t *usage; /* USAGE only */
	pc_stop_reason_t stop_reason;
	const char *raw_stop_reason; /* finish_reason / stop_reason as sent */
	const char *error_type;
} pc_stream_event_t;

/* Called from inside pc_stream_decoder_feed_sse. Return 0 to go on; any
 * other value stops the decoder (sticky) and is returned from the feed.
 * The callback must not feed, finish or free its own decoder. */
typedef int (*pc_stream_event_fn)(void *user, const pc_stream_event_t *ev);

/* Defaults when a limit is 0. */
#define PC_STREAM_DEFAULT_MAX_TOOL_CALLS 128
#define PC_STREAM_DEFAULT_MAX_BLOCKS 4096
#define PC_STREAM_DEFAULT_MAX_BYTES ((size_t)64 << 20) /* all text, thinking,
							   * signatures and arguments */

typedef struct pc_stream_limits {
	size_t max_tool_calls;
	size_t max_blocks;
	size_t max_bytes;
} pc_stream_limits_t;

/*
 * Creates a decoder for `api`. `fn` may be NULL (only the assembled result
 * is wanted). PC_EINVAL for a NULL `out` or an api it does not speak,
 * PC_ENOMEM. The caller owns the decoder (pc_stream_decoder_free).
 */
int pc_stream_decoder_new(pc_provider_api_t api, pc_stream_event_fn fn, void *user,
			  pc_stream_decoder_t **out);

/* Replaces the limits (NULL or zero fields: the defaults). Only before the
 * first feed: PC_ESTATE afterwards. */
int pc_stream_decoder_set_limits(pc_stream_decoder_t *d, const pc_stream_limits_t *limits);

/*
 * Decodes one SSE event (PC_SSE_RETRY events and empty data are ignored).
 * OpenAI: each data line is a chunk, "[DONE]" ends the stream, an
 * `{"error": ...}` chunk (or an `event: error`) is an in-stream error.
 * Anthropic: the data's "type" (else the SSE event name) says what it is;
 * ping and unknown types are ignored. After the terminal event ([DONE],
 * message_stop, or an error event) later events are ignored.
 * Returns 0 or the sticky error (see above); PC_EINVAL for NULL arguments
 * (not sticky); PC_ESTATE after finish or abort, or from inside the
 * callback. (cJSON cannot tell a parse that ran out of memory from bad
 * JSON: both read as PC_EINVAL.)
 */
int pc_stream_decoder_feed_sse(pc_stream_decoder_t *d, const pc_sse_event_t *ev);

/* Marks the stream as aborted by the user: feeds are refused (PC_ESTATE)
 * and the result's stop reason is "aborted". */
void pc_stream_decoder_abort(pc_stream_decoder_t *d);

typedef enum pc_content_kind {
	PC_CONTENT_TEXT = 1,
	PC_CONTENT_THINKING,
	PC_CONTENT_TOOL_CALL,
} pc_content_kind_t;

typedef struct pc_content_block {
	pc_content_kind_t kind;
	const char *text;       /* text / thinking / the tool call's arguments JSON
				 * ("{}" when the model sent none) */
	size_t text_len;
	const char *signature;  /* thinking: the signature, NULL if none; for a
				 * redacted block, its opaque data */
	bool redacted;          /* thinking: Anthropic redacted_thinking */
	const char *id;         /* tool call: never NULL; "call_<block>" when the
				 * provider sent none */
	const char *name;       /* tool call: never NULL */
	bool args_object;       /* tool call: the arguments parse as a JSON object */
	bool complete;          /* tool call: its end was seen */
} pc_content_block_t;

typedef struct pc_stream_result {
	pc_provider_api_t api;       /* the decoder's api */
	const pc_content_block_t *blocks;
	size_t nblocks;
	pc_stop_reason_t stop_reason;
	const char *raw_stop_reason; /* NULL if the provider sent none */
	pc_usage_t usage;
	bool has_usage;
	const char *error_message;   /* NULL if none */
	const char *error_type;      /* the provider's error type, NULL if none */
	const char *error_body;      /* the error event's data as sent, NULL if none */
	int decode_error;            /* the sticky error, 0 if none */
	bool complete;               /* a terminal event was seen ([DONE],
				      * message_stop, an error event) */
	const char *response_id;     /* the provider's id for the response, or NULL */
	const char *model;           /* the model the provider says answered, or NULL */
} pc_stream_result_t;

/*
 * Ends the stream and assembles the message. Tool calls still open are
 * closed. A stream that ended without its terminal event is incomplete
 * (complete == false): its stop reason is "error" and, unless an error
 * was already recorded, error_message says the stream was cut short (the
 * caller classifies it as a transport failure: timeout or malformed). An
 * aborted decoder's stop reason is "aborted".
 *
 * Everything in *out is borrowed from the decoder and valid until it is
 * freed. May be called again (same result); feeds fail with PC_ESTATE
 * afterwards. Returns 0, PC_EINVAL for NULL arguments, PC_ENOMEM.
 */
int pc_stream_decoder_finish(pc_stream_decoder_t *d, pc_stream_result_t *out);

/* Frees the decoder and everything its results point to. NULL is a no-op. */
void pc_stream_decoder_free(pc_stream_decoder_t *d);

/*
 * The result as a unified assistant message:
 *   {"role":"assistant","api":"...","content":[
 *      {"type":"text","text":"..."},
 *      {"type":"thinking","thinking":"...","thinkingSignature":"...","redacted":true},
 *      {"type":"toolCall","id":"...","name":"...","arguments":{...}}],
 *    "stopReason":"...","usage":{input,output,cacheRead,cacheWrite,totalTokens},
 *    "errorMessage":"..."}
 * thinkingSignature and redacted appear only when set, errorMessage only
 * when there is one. A tool call's arguments are the parsed object, or the
 * raw string when the model produced something that is not a JSON object
 * (nothing is lost; the request builders accept both).
 * "api" names r->api (omitted for PC_API_NONE). Returns 0 with *out owned
 * by the caller (cJSON_Delete), PC_EINVAL, PC_ENOMEM.
 */
int pc_stream_result_to_json(const pc_stream_result_t *r, cJSON **out);

#ifdef __cplusplus
}
#endif
#endif
