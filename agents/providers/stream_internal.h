/*
 * What the wire formats' decoders (the `feed` of each table in wire.h)
 * share with the assembly in stream.c: the decoder's state and the few
 * operations that change it.
 * Every operation that can fail records the failure on the decoder (the
 * sticky error and, if none was recorded yet, the error message) and
 * returns the code, so the wire decoders only propagate it.
 */
#ifndef PINCER_AGENTS_PROVIDERS_STREAM_INTERNAL_H
#define PINCER_AGENTS_PROVIDERS_STREAM_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#include "io/io.h"
#include "stream.h"
#include "wire.h"

typedef struct pc__block {
	pc_content_kind_t kind;
	pc__buf_t text;    /* text, thinking, or the arguments JSON */
	pc__buf_t sig;     /* thinking signature (redacted: the opaque data) */
	bool has_sig;
	bool redacted;
	char *id;           /* tool call */
	char *name;         /* tool call */
	int key;            /* the provider's index for this call / block */
	bool args_streamed; /* arguments arrived as fragments */
	bool complete;      /* tool call: END was emitted */
	bool args_object;
} pc__block_t;

/* The provider's index of a block -> our block, or SIZE_MAX for a block we
 * do not keep (an Anthropic server-tool block, say). */
typedef struct pc__key {
	int key;
	size_t block;
} pc__key_t;

#define PC__NO_BLOCK ((size_t)-1)

struct pc_stream_decoder {
	const pc_provider_wire_t *wire;
	pc_stream_event_fn fn;
	void *user;
	pc_stream_limits_t lim;
	int err;        /* sticky */
	bool fed;       /* a feed happened: limits are fixed */
	bool in_cb;
	bool terminal;  /* [DONE] / message_stop / error event seen */
	bool finished;
	bool aborted;
	pc__block_t *blocks;
	size_t nblocks, cap;
	pc__key_t *keys;
	size_t nkeys, keycap;
	size_t ntools;
	size_t bytes;   /* accumulated, against lim.max_bytes */
	pc_stop_reason_t stop;
	char *raw_stop;
	pc_usage_t usage;
	bool has_usage;
	cJSON *usage_raw; /* a format's running usage object, if it keeps one
			   * (Anthropic: message_start's, updated by deltas) */
	char *error_message;
	char *error_type;
	char *error_body;
	char *response_id;
	char *model;
	pc_content_block_t *pub; /* built by finish */
};

/* Records a failure: the sticky code and (first one wins) the message. */
int pc__stream_fail(pc_stream_decoder_t *d, int rc, const char *msg);

/* Records a decode failure naming the offending data (first bytes). */
int pc__stream_malformed(pc_stream_decoder_t *d, const char *what, const char *data, size_t len);

/* Calls the callback (if any) with re-entry guarded; a nonzero return is
 * recorded as the sticky error. */
int pc__stream_emit(pc_stream_decoder_t *d, pc_stream_event_t *ev);

/* A new block at the end; *out is its index. Enforces the block and tool
 * limits. */
int pc__stream_new_block(pc_stream_decoder_t *d, pc_content_kind_t kind, int key, size_t *out);

/* Appends to a block's text (or signature) against the byte limit. */
int pc__stream_append(pc_stream_decoder_t *d, size_t block, bool signature, const char *s,
		      size_t n);

/* Sets a string field (id, name) when it is still empty; else appends
 * `s` unless it is the same as what is there (some servers repeat the name
 * on every fragment, a few stream it in pieces). */
int pc__stream_merge_str(pc_stream_decoder_t *d, char **field, const char *s);

/* Replaces a string field. */
int pc__stream_set_str(pc_stream_decoder_t *d, char **field, const char *s);

/* Appends a text or thinking delta to the last block when it has that
 * kind, else to a new one, and emits the event. */
int pc__stream_delta(pc_stream_decoder_t *d, pc_content_kind_t kind, const char *s, size_t n);

/* Appends to a given text or thinking block and emits the delta event; with
 * `signature`, to a thinking block's signature (SIGNATURE_DELTA). */
int pc__stream_block_delta(pc_stream_decoder_t *d, size_t block, bool signature, const char *s,
			   size_t n);

/* Emits TOOL_CALL_START for a tool-call block. */
int pc__stream_tool_start(pc_stream_decoder_t *d, size_t block);

/* Appends an arguments fragment and emits TOOL_CALL_ARGS. */
int pc__stream_tool_args(pc_stream_decoder_t *d, size_t block, const char *s, size_t n);

/* Closes a tool call: validates its arguments, emits TOOL_CALL_END. A
 * call already closed is left alone. */
int pc__stream_tool_end(pc_stream_decoder_t *d, size_t block);

/* Closes every open tool call, in block order. */
int pc__stream_tool_end_all(pc_stream_decoder_t *d);

/* Key map. */
int pc__stream_key_put(pc_stream_decoder_t *d, int key, size_t block);
size_t pc__stream_key_get(const pc_stream_decoder_t *d, int key);

/* Normalizes a provider usage object into d->usage and emits USAGE. */
int pc__stream_usage(pc_stream_decoder_t *d, const cJSON *usage);

/* Records an in-stream error (message, type, the raw data), emits ERROR,
 * then ends the stream with PC_STOP_ERROR. */
int pc__stream_error(pc_stream_decoder_t *d, const char *message, const char *type,
		     const char *body, size_t body_len);

/* Records the stop reason (and the provider's word for it, if any). An
 * error stop may carry its message. */
int pc__stream_set_stop(pc_stream_decoder_t *d, pc_stop_reason_t r, const char *raw,
			const char *error_message);

/* The terminal event: emits STOP; later events are ignored. */
int pc__stream_terminal(pc_stream_decoder_t *d);

/* A JSON string value or NULL. */
const char *pc__json_str(const cJSON *obj, const char *key);

#endif
