/*
 * Request builders: the JSON body and the headers of one streaming model
 * call, from the conversation in the spec's unified message model (§11.1):
 *
 *   {"role":"user", "content": "text" | [{"type":"text","text"},
 *                                        {"type":"image","data","mimeType"}]}
 *   {"role":"assistant", "content": [{"type":"text","text"},
 *        {"type":"thinking","thinking","thinkingSignature"?,"redacted"?},
 *        {"type":"toolCall","id","name","arguments": {...} | "json"}]}
 *   {"role":"toolResult", "toolCallId", "toolName",
 *        "content": [{"type":"text","text"} | image...], "isError"}
 *
 * OpenAI chat completions: `stream:true` with `stream_options.include_usage`,
 * the system prompt as the first message, assistant tool calls as
 * `tool_calls` (arguments as a JSON string), tool results as role "tool"
 * messages, thinking blocks dropped, the thinking level as
 * `reasoning_effort`.
 * Anthropic messages: `stream:true`, the system prompt top-level, tool calls
 * as tool_use blocks (ids made safe for Anthropic's id pattern), runs of
 * tool results grouped into one user message of tool_result blocks, signed
 * thinking replayed with its signature (unsigned thinking as text), the
 * thinking level as a `thinking` budget.
 *
 * Each of these is the wire format's file (openai.c, anthropic.c), reached
 * through its table (wire.h); this header is the same for every format.
 *
 * No I/O and no state of its own, from any thread; but a body remembers
 * each message's converted form on the message itself (see
 * pc_request_message_changed), so messages are not shared between threads
 * while a body is built from them.
 */
#ifndef PINCER_AGENTS_PROVIDERS_REQUEST_H
#define PINCER_AGENTS_PROVIDERS_REQUEST_H

#include <stdbool.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "runtime/error.h"
#include "agents/config/config.h"
#include "provider.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Anthropic's thinking budget for a level: minimal 1024, low 2048, medium
 * and adaptive 8192, high 16384, xhigh 32768, max 65536; 0 for off. */
int64_t pc_think_budget_tokens(pc_think_level_t l);

/* Anthropic requires max_tokens; this is used when none is given. */
#define PC_REQUEST_DEFAULT_MAX_TOKENS 4096

typedef struct pc_request_params {
	pc_provider_api_t api;
	const char *model;           /* required */
	const char *system_prompt;   /* NULL or "": none */
	const cJSON *messages;       /* required: an array in the unified model */
	const cJSON *tools;          /* NULL or an array of {name, description?,
				      * parameters?} (parameters: a JSON schema,
				      * default {"type":"object","properties":{}}) */
	const char *tools_json;      /* instead of `tools`: the same array as this api
				      * prints it (pc_request_tools_json), spliced in
				      * as it is; NULL: from `tools` */
	int64_t max_tokens;          /* 0: OpenAI omits it, Anthropic uses the default */
	bool has_temperature;
	double temperature;          /* Anthropic: dropped while thinking is on (the
				      * API allows only the default then) */
	pc_think_level_t thinking;
	bool openai_max_tokens;      /* OpenAI: send the limit as "max_tokens" (older
				      * servers) instead of "max_completion_tokens" */
} pc_request_params_t;

/*
 * Builds the body as JSON. Its "messages" is one raw item: the messages'
 * converted forms joined into the array's text. The rest of the tree
 * borrows from *p (the tools' schemas, model and system prompt) instead of
 * copying them: keep those alive and unchanged while it is used.
 * Anthropic's thinking budget is lowered to max_tokens - 1024 when it would
 * not fit under max_tokens, and thinking is left out when less than 1024
 * would remain.
 * Returns 0 with *out owned by the caller (cJSON_Delete); PC_EINVAL for a
 * missing model or messages, an unknown api, or a message that does not
 * follow the unified model (unknown role or block type, a tool call without
 * id or name, a tool result without toolCallId); PC_ENOMEM.
 */
int pc_request_body_json(const pc_request_params_t *p, cJSON **out);

/* A message is converted for the wire once per api: the printed form is
 * kept on the message (a cJSON object's unused valuestring: cJSON_Delete
 * frees it, cJSON_Duplicate copies it, printing ignores it) and reused by
 * every later body. Whoever edits a message in place after a body was
 * built from it calls this to forget that form. */
void pc_request_message_changed(cJSON *msg);

/* The same, printed without whitespace. *out is NUL-terminated and owned by
 * the caller (cJSON_free). */
int pc_request_body(const pc_request_params_t *p, char **out);

/* `tools` (as in pc_request_params_t) printed as `api`'s body carries
 * them, for tools_json: an agent offers the same tools in every request,
 * so it prints them once. *out is NULL when there are none, else owned by
 * the caller (cJSON_free). PC_EINVAL for a malformed tool. */
int pc_request_tools_json(pc_provider_api_t api, const cJSON *tools, char **out);

/*
 * The headers the API needs, as "Name: value" strings in a NULL-terminated
 * array: OpenAI "Content-Type: application/json", "Accept:
 * text/event-stream", "Authorization: Bearer <key>"; Anthropic
 * "content-type: application/json", "accept: text/event-stream",
 * "anthropic-version: 2023-06-01", "x-api-key: <key>". With a NULL or empty
 * key the auth header is left out (local servers). PC_EINVAL for a NULL
 * `out`, an unknown api, or a key containing CR, LF or other control
 * characters (header injection); PC_ENOMEM. The caller frees *out with
 * pc_request_headers_free.
 */
int pc_request_headers(pc_provider_api_t api, const char *api_key, char ***out);

/* The headers of a request to the configured `provider` with its auth
 * profile `profile` (pc_request_headers_free). An embedded provider's
 * requests also carry the run id (x-mock-session): the mock keeps a
 * script cursor per conversation, so a scenario's steps play in order for
 * every run. */
int pc_request_provider_headers(const pc_provider_config_t *provider, uint32_t profile, const char *run_id,
				char ***out);

/* Frees an array from pc_request_headers. NULL is a no-op. */
void pc_request_headers_free(char **headers);

#ifdef __cplusplus
}
#endif
#endif
