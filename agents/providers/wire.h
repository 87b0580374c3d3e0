/*
 * Wire formats: everything that differs between the provider APIs, as one
 * table of functions and facts per format, looked up once by API id.
 *
 * One file per format fills in one table (openai.c: OpenAI chat
 * completions and every compatible server; anthropic.c: Anthropic
 * messages). Everything else in agents/providers/ (request.c's message
 * cache and joining, stream.c's assembly, model_call.c's actor) is shared
 * and reaches a format only through its table; nothing outside this
 * directory names a format.
 *
 * Pure: the tables are constant. Any thread.
 */
#ifndef PINCER_AGENTS_PROVIDERS_WIRE_H
#define PINCER_AGENTS_PROVIDERS_WIRE_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#include "io/io.h"
#include "provider.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pc_stream_decoder pc_stream_decoder_t;
typedef struct pc_request_params pc_request_params_t;

/* What an error answer says, each part bounded (PC_PROVIDER_ERROR_MAX
 * bytes, cut at a character boundary) and empty when absent or not UTF-8. */
#define PC_PROVIDER_ERROR_MAX 512u

typedef struct pc_provider_error {
	char message[PC_PROVIDER_ERROR_MAX + 1]; /* the provider's words, else the
						   * body's first line */
	char type[PC_PROVIDER_ERROR_MAX + 1];    /* its error type */
	char code[PC_PROVIDER_ERROR_MAX + 1];    /* its error code (a number printed) */
} pc_provider_error_t;

typedef struct pc_provider_wire {
	pc_provider_api_t api;
	const char *path;           /* appended to the base URL */
	bool base_has_version;      /* its base URLs end in "/v1" (so `path` does not
				     * carry it) */
	const char *const *headers; /* fixed "Name: value" lines, NULL-terminated */
	const char *auth_prefix;    /* the key's line up to the key ("x-api-key: "),
				     * or NULL: no key is ever sent */

	/* Request: fills `body` (an empty object) from p (request.h says what
	 * may be borrowed); `tools` adds p->tools as "tools" to `holder`. Both
	 * return 0, PC_EINVAL, PC_ENOMEM. */
	int (*build_body)(const pc_request_params_t *p, cJSON *body);
	int (*build_tools)(const cJSON *tools, cJSON *holder);

	/* Response: one SSE event (a message with data) into the decoder, by
	 * the operations of stream_internal.h. */
	int (*feed)(pc_stream_decoder_t *d, const pc_sse_event_t *ev);
	const char *cut_short;      /* the error of a stream that ended before its
				     * terminal event */

	/* An error answer (a status >= 400 and its body, not NUL-terminated)
	 * into its parts. */
	void (*parse_error)(int status, const char *body, size_t len, pc_provider_error_t *out);
} pc_provider_wire_t;

/* The table of `api`, or NULL for an api Pincer does not speak. */
const pc_provider_wire_t *pc_provider_wire(pc_provider_api_t api);

/* The table whose name is `name`, or NULL. */
const pc_provider_wire_t *pc_provider_wire_named(const char *name);

/* The error text of a status answer, as the providers' SDKs put it: the
 * status, then the message ("status code (no body)" without one), with the
 * type and code after it when the message does not already carry them.
 * Not redacted. `out` has room for `cap` bytes. */
void pc_provider_error_text(int status, const pc_provider_error_t *e, char *out, size_t cap);

/* The tables (one per wire file). */
extern const pc_provider_wire_t pc__wire_openai;
extern const pc_provider_wire_t pc__wire_anthropic;

/* The common JSON error shapes ({"error":{"message","type","code"}},
 * {"error":"text"}, {"message"}, {"detail"}; else the body's first line),
 * for parse_error implementations. */
void pc__wire_error_json(const char *body, size_t len, pc_provider_error_t *out);

#ifdef __cplusplus
}
#endif
#endif
