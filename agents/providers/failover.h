/*
 * Failover classification (spec §1.8): what went wrong with one model call,
 * in the spec's sixteen reasons, decided from what the transport saw — the
 * HTTP status, the retry-after headers, the error body, the kind of
 * transport failure and the provider id. The run's failover policy (§1.9)
 * decides what to do about it; this module only names it.
 *
 * Pure: no I/O, no clock, no globals; the caller passes the current time
 * for HTTP-date retry-after values. Any thread.
 *
 * The rules, in the order they are tried, are in docs/providers.md and at
 * the top of failover.c.
 */
#ifndef PINCER_AGENTS_PROVIDERS_FAILOVER_H
#define PINCER_AGENTS_PROVIDERS_FAILOVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The newest FailoverReason union, in the spec's order. */
typedef enum pc_failover_reason {
	PC_FAILOVER_AUTH = 0,
	PC_FAILOVER_AUTH_PERMANENT,
	PC_FAILOVER_FORMAT,
	PC_FAILOVER_RATE_LIMIT,
	PC_FAILOVER_OVERLOADED,
	PC_FAILOVER_BILLING,
	PC_FAILOVER_SERVER_ERROR,
	PC_FAILOVER_TIMEOUT,
	PC_FAILOVER_TLS_CERTIFICATE,
	PC_FAILOVER_CONTEXT_OVERFLOW,
	PC_FAILOVER_MODEL_NOT_FOUND,
	PC_FAILOVER_SESSION_EXPIRED,
	PC_FAILOVER_EMPTY_RESPONSE,
	PC_FAILOVER_NO_ERROR_DETAILS,
	PC_FAILOVER_UNCLASSIFIED,
	PC_FAILOVER_UNKNOWN,
	PC_FAILOVER_REASON_COUNT
} pc_failover_reason_t;

/* The spec's string ("rate_limit", "auth_permanent", ...), or "unknown"
 * for a value out of range. Static, never NULL. */
const char *pc_failover_reason_name(pc_failover_reason_t r);

/* The reverse of pc_failover_reason_name. PC_EINVAL for NULL arguments,
 * PC_ENOTFOUND for any other string. */
int pc_failover_reason_parse(const char *name, pc_failover_reason_t *out);

/* The HTTP-like status the spec gives a reason (resolveFailoverStatus):
 * billing 402, rate_limit 429, overloaded 503, auth 401, auth_permanent 403,
 * timeout 408, format 400, model_not_found 404, session_expired 410,
 * server_error 500; 0 for the others. */
int pc_failover_reason_status(pc_failover_reason_t r);

/* How a request failed below HTTP, as the I/O layer saw it. */
typedef enum pc_transport_error {
	PC_TRANSPORT_NONE = 0,
	PC_TRANSPORT_DNS,             /* name resolution failed */
	PC_TRANSPORT_CONNECT,         /* connection refused, network/host unreachable */
	PC_TRANSPORT_CONNECT_TIMEOUT, /* no connection within the connect timeout */
	PC_TRANSPORT_TIMEOUT,         /* the whole request ran out of time */
	PC_TRANSPORT_IDLE_TIMEOUT,    /* the stream went silent for too long */
	PC_TRANSPORT_TLS,             /* handshake or certificate failure */
	PC_TRANSPORT_RESET,           /* connection reset or closed mid-stream */
	PC_TRANSPORT_MALFORMED,       /* the response could not be parsed, or the
				       * stream ended without its terminator */
	PC_TRANSPORT_ABORTED,         /* the user aborted: never failed over */
	PC_TRANSPORT_COUNT
} pc_transport_error_t;

/* "none", "dns", "connect", "connect_timeout", "timeout", "idle_timeout",
 * "tls", "reset", "malformed", "aborted"; "unknown" out of range. Static. */
const char *pc_transport_error_name(pc_transport_error_t t);

/* Every field may be zero / NULL. The strings are borrowed for the call. */
typedef struct pc_failover_input {
	int status;                     /* HTTP status, 0 when there was no response */
	const char *retry_after;        /* `retry-after`: delta-seconds or an HTTP-date */
	const char *retry_after_ms;     /* `retry-after-ms` (wins over retry-after) */
	const char *body;               /* the error body (JSON or text), or an in-stream
					 * error / stop text; need not be NUL-terminated */
	size_t body_len;
	pc_transport_error_t transport;
	const char *provider;           /* "openai", "anthropic", "openrouter", ... */
	int64_t now_ms;                 /* Unix time in ms; 0: HTTP-dates are ignored */
} pc_failover_input_t;

/* Retry-after values are clamped to this (7 days). */
#define PC_FAILOVER_RETRY_AFTER_MAX_MS ((uint64_t)7 * 24 * 3600 * 1000)

typedef struct pc_failover_result {
	pc_failover_reason_t reason;
	int status;              /* pc_failover_reason_status(reason) */
	uint64_t retry_after_ms; /* from the headers, else from the body's wording
				  * ("try again in 20s"); 0 when none */
	bool failover;           /* eligible for profile rotation / model fallback:
				  * false for a user abort, context_overflow,
				  * unclassified and unknown */
	bool compact;            /* context_overflow: compact and retry instead */
	bool aborted;            /* a user abort (reason is then unknown) */
	const char *detail;      /* static: the rule that decided, for logs */
} pc_failover_result_t;

/*
 * Classifies one failure. Always decides something: with nothing to go on
 * the reason is empty_response. Garbage, huge or binary bodies are safe;
 * only the first 16 KiB of the body are searched (error texts are short),
 * and a JSON body is read for error.message / error.type / error.code /
 * type / message (OpenAI and Anthropic shapes, OpenRouter's
 * error.metadata.raw) besides being searched as text.
 *
 * Returns 0, or PC_EINVAL for a NULL argument or a body_len with a NULL body.
 */
int pc_failover_classify(const pc_failover_input_t *in, pc_failover_result_t *out);

/*
 * Parses a retry-after value on its own: delta-seconds ("120", "1.5") or an
 * HTTP-date in any of the three RFC 9110 forms, relative to `now_ms` (a date
 * in the past gives 0). Clamped to PC_FAILOVER_RETRY_AFTER_MAX_MS. Returns 0
 * with *out_ms set, or PC_EINVAL when `value` is neither form (or a date is
 * given with now_ms == 0).
 */
int pc_failover_parse_retry_after(const char *value, int64_t now_ms, uint64_t *out_ms);

#ifdef __cplusplus
}
#endif
#endif
