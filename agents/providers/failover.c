/*
 * Failover classification: a table of wordings, a status map, and the order
 * in which they are consulted. The order is the design; it is written once
 * here and once in docs/providers.md:
 *
 *   1. A user abort is never failed over (reason unknown, aborted).
 *   2. HTTP 429 is rate_limit, whatever the body says (but OpenAI's 429
 *      with code insufficient_quota is billing: the quota will not refill).
 *   3. An HTML error page on 408 / 499 / 5xx is a transport hiccup: timeout.
 *   4. Decisive wordings, which beat the status: tokens-per-minute limits
 *      (rate_limit, so Groq's 413 TPM error is not an overflow), then
 *      context overflow, then the 402 family (a 402 status or a 402 marker
 *      in the text): quota-window and usage-window / spend-limit wordings
 *      are rate_limit, explicit billing wordings billing, any other 402
 *      billing.
 *   5. The status map: 401/403 auth (auth_permanent or billing when the body
 *      says so), 404 model_not_found (unless the body names a session,
 *      billing or auth problem), 408 timeout, 410 timeout (same exceptions
 *      as 404), 413 context_overflow, 499/503 timeout (overloaded when the
 *      body says so), 529 overloaded, 500/502/504 timeout (server_error when
 *      the body is a structured server_error).
 *   6. The first other wording in the table that matches, in table order.
 *   7. What is left of the status: 400/422 format (no_error_details when
 *      there is no body), any other 5xx timeout.
 *   8. The transport error: TLS tls_certificate, every other kind timeout.
 *   9. Labels: unclassified (text that matched nothing), unknown (an error
 *      status with no text), empty_response (nothing at all).
 *
 * Wordings are case-insensitive substrings; a rule may need up to three of
 * them at once. When no status came with the failure, a leading status in
 * the text ("503 Service Unavailable") stands in for it.
 */
#include "failover.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

/* Only this much of each text is searched. */
#define SCAN_MAX ((size_t)16384)
/* Bodies larger than this are not parsed as JSON. */
#define PARSE_MAX ((size_t)1 << 20)

/* ---- names ---- */

static const char *const reason_names[PC_FAILOVER_REASON_COUNT] = {
	[PC_FAILOVER_AUTH] = "auth",
	[PC_FAILOVER_AUTH_PERMANENT] = "auth_permanent",
	[PC_FAILOVER_FORMAT] = "format",
	[PC_FAILOVER_RATE_LIMIT] = "rate_limit",
	[PC_FAILOVER_OVERLOADED] = "overloaded",
	[PC_FAILOVER_BILLING] = "billing",
	[PC_FAILOVER_SERVER_ERROR] = "server_error",
	[PC_FAILOVER_TIMEOUT] = "timeout",
	[PC_FAILOVER_TLS_CERTIFICATE] = "tls_certificate",
	[PC_FAILOVER_CONTEXT_OVERFLOW] = "context_overflow",
	[PC_FAILOVER_MODEL_NOT_FOUND] = "model_not_found",
	[PC_FAILOVER_SESSION_EXPIRED] = "session_expired",
	[PC_FAILOVER_EMPTY_RESPONSE] = "empty_response",
	[PC_FAILOVER_NO_ERROR_DETAILS] = "no_error_details",
	[PC_FAILOVER_UNCLASSIFIED] = "unclassified",
	[PC_FAILOVER_UNKNOWN] = "unknown",
};

const char *pc_failover_reason_name(pc_failover_reason_t r)
{
	if ((unsigned)r >= PC_FAILOVER_REASON_COUNT)
		return "unknown";
	return reason_names[r];
}

int pc_failover_reason_parse(const char *name, pc_failover_reason_t *out)
{
	if (!name || !out)
		return PC_EINVAL;
	for (int i = 0; i < PC_FAILOVER_REASON_COUNT; i++) {
		if (strcmp(name, reason_names[i]) == 0) {
			*out = (pc_failover_reason_t)i;
			return 0;
		}
	}
	return PC_ENOTFOUND;
}

int pc_failover_reason_status(pc_failover_reason_t r)
{
	switch (r) {
	case PC_FAILOVER_BILLING: return 402;
	case PC_FAILOVER_RATE_LIMIT: return 429;
	case PC_FAILOVER_OVERLOADED: return 503;
	case PC_FAILOVER_AUTH: return 401;
	case PC_FAILOVER_AUTH_PERMANENT: return 403;
	case PC_FAILOVER_TIMEOUT: return 408;
	case PC_FAILOVER_FORMAT: return 400;
	case PC_FAILOVER_MODEL_NOT_FOUND: return 404;
	case PC_FAILOVER_SESSION_EXPIRED: return 410;
	case PC_FAILOVER_SERVER_ERROR: return 500;
	default: return 0;
	}
}

const char *pc_transport_error_name(pc_transport_error_t t)
{
	switch (t) {
	case PC_TRANSPORT_NONE: return "none";
	case PC_TRANSPORT_DNS: return "dns";
	case PC_TRANSPORT_CONNECT: return "connect";
	case PC_TRANSPORT_CONNECT_TIMEOUT: return "connect_timeout";
	case PC_TRANSPORT_TIMEOUT: return "timeout";
	case PC_TRANSPORT_IDLE_TIMEOUT: return "idle_timeout";
	case PC_TRANSPORT_TLS: return "tls";
	case PC_TRANSPORT_RESET: return "reset";
	case PC_TRANSPORT_MALFORMED: return "malformed";
	case PC_TRANSPORT_ABORTED: return "aborted";
	default: return "unknown";
	}
}

/* ---- the table ---- */

enum {
	R_DECISIVE = 1 << 0,   /* step 4: beats the status map */
	R_402 = 1 << 1,        /* only in the 402 family */
	R_WORD = 1 << 2,       /* needles must stand at word boundaries */
	R_EXACT = 1 << 3,      /* the whole message is the (only) needle */
	R_TYPE = 1 << 4,       /* the first needle is the error's type or code */
	R_OPENROUTER = 1 << 5, /* only for provider ids containing "openrouter" */
};

typedef struct rule {
	unsigned char reason;
	unsigned char flags;
	const char *all[3]; /* lower case; every one must be present */
	const char *detail;
} rule_t;

#define AUTH PC_FAILOVER_AUTH
#define AUTHP PC_FAILOVER_AUTH_PERMANENT
#define FMT PC_FAILOVER_FORMAT
#define RATE PC_FAILOVER_RATE_LIMIT
#define OVER PC_FAILOVER_OVERLOADED
#define BILL PC_FAILOVER_BILLING
#define SERV PC_FAILOVER_SERVER_ERROR
#define TIME PC_FAILOVER_TIMEOUT
#define CTX PC_FAILOVER_CONTEXT_OVERFLOW
#define MODEL PC_FAILOVER_MODEL_NOT_FOUND
#define SESS PC_FAILOVER_SESSION_EXPIRED
#define NODET PC_FAILOVER_NO_ERROR_DETAILS

#define R1(r, f, a) {r, f, {a, NULL, NULL}, a}
#define R2(r, f, a, b) {r, f, {a, b, NULL}, a " + " b}
#define R3(r, f, a, b, c) {r, f, {a, b, c}, a " + " b " + " c}
#define TY(r, a) {r, R_TYPE, {a, NULL, NULL}, "error type/code " a}

#define D R_DECISIVE
#define P (R_DECISIVE | R_402)

static const rule_t rules[] = {
	/* -- step 4: decisive -- */
	/* Tokens-per-minute limits, before overflow: Groq sends them as 413
	 * "request too large", OpenAI as "Request too large ... (TPM)". */
	R1(RATE, D, "tokens per min"),
	R1(RATE, D | R_WORD, "tpm"),

	R1(CTX, D, "request_too_large"),
	R1(CTX, D, "context length exceeded"), /* also "ollama error: ..." */
	R1(CTX, D, "context_length_exceeded"),
	R1(CTX, D, "maximum context length"),  /* OpenAI, vLLM */
	R1(CTX, D, "prompt is too long"),      /* Anthropic */
	R1(CTX, D, "prompt too long"),
	R2(CTX, D, "input exceeds", "maximum number of tokens"),
	R2(CTX, D, "input token count", "exceeds the maximum"), /* Bedrock */
	R1(CTX, D, "input is too long"),       /* "... for the model" / "requested model" */
	R1(CTX, D, "too many input tokens"),
	R1(CTX, D, "context_window_exceeded"),
	R1(CTX, D, "context window exceeded"),
	R1(CTX, D, "exceeds model context window"),
	R1(CTX, D, "exceeds the context window"),
	R1(CTX, D, "exceeds the model's maximum context"),
	R1(CTX, D, "exceed context limit"),
	R1(CTX, D, "exceeds the available context size"), /* llama.cpp */
	R1(CTX, D, "model token limit"),
	R1(CTX, D, "request exceeds the maximum size"),
	R1(CTX, D, "context overflow"),
	R3(CTX, D, "input length", "exceed", "context"),
	R3(CTX, D, "max_tokens", "exceed", "context"),
	R2(CTX, D | R_WORD, "413", "too large"),
	R1(CTX, D, "上下文过长"),
	R1(CTX, D, "上下文超出"),
	R1(CTX, D, "超出最大上下文"),

	/* The 402 family. A quota that refills on a window is a rate limit. */
	R2(RATE, P, "subscription quota limit", "automatic quota refresh"),
	R2(RATE, P, "subscription quota limit", "rolling time window"),
	/* Explicit billing wording. */
	R1(BILL, P, "insufficient credits"),
	R1(BILL, P, "insufficient quota"),
	R1(BILL, P, "insufficient_quota"),
	R1(BILL, P, "credit balance"),
	R1(BILL, P, "insufficient balance"),
	R1(BILL, P, "plans & billing"),
	R1(BILL, P, "add more credits"),
	R1(BILL, P, "top up"),
	R1(BILL, P, "billing hard limit"),
	R1(BILL, P, "hard limit reached"),
	R2(BILL, P, "upgrade your plan", "limit"),
	R2(BILL, P, "current plan", "limit"),
	R2(BILL, P, "maximum allowed", "limit"),
	/* Rate-limit wording, and temporary usage windows / spend limits. */
	R1(RATE, P, "rate limit"),
	R1(RATE, P, "rate_limit"),
	R1(RATE, P, "too many requests"),
	R1(RATE, P, "usage limit"),
	R1(RATE, P, "quota exceeded"),
	R1(RATE, P, "resource exhausted"),
	R1(RATE, P, "resource_exhausted"),
	R1(RATE, P, "organization usage"),
	R2(RATE, P, "daily", "spend limit"),
	R2(RATE, P, "weekly", "spend limit"),
	R2(RATE, P, "monthly", "spend limit"),
	R2(RATE, P, "daily", "spending limit"),
	R2(RATE, P, "weekly", "spending limit"),
	R2(RATE, P, "monthly", "spending limit"),
	R3(RATE, P, "daily", "limit", "reset"),
	R3(RATE, P, "weekly", "limit", "reset"),
	R3(RATE, P, "monthly", "limit", "reset"),
	R2(RATE, P, "organization", "spend limit"),
	R2(RATE, P, "workspace", "spend limit"),
	R3(RATE, P, "organization", "limit", "exceeded"),
	R3(RATE, P, "organization", "limit", "reached"),
	R3(RATE, P, "workspace", "limit", "exceeded"),
	R3(RATE, P, "workspace", "limit", "reached"),
	R2(RATE, P, "billing period", "limit"),
	/* Any other 402 is billing. */
	{BILL, P, {NULL, NULL, NULL}, "402 without a usage-window wording"},

	/* -- step 6: in order -- */
	R1(SESS, 0, "session not found"),
	R1(SESS, 0, "session does not exist"),
	R1(SESS, 0, "session expired"),
	R1(SESS, 0, "session invalid"),
	R1(SESS, 0, "invalid session"),
	R1(SESS, 0, "no such session"),
	R1(SESS, 0, "conversation not found"),
	R1(SESS, 0, "conversation does not exist"),
	R1(SESS, 0, "conversation expired"),

	TY(MODEL, "model_not_found"),
	TY(MODEL, "not_found_error"),
	R1(MODEL, 0, "model_not_found"),
	R1(MODEL, 0, "model not found"),
	R1(MODEL, 0, "unknown model"),
	R1(MODEL, 0, "no endpoints found for"),  /* OpenRouter */
	R1(MODEL, 0, "is not a valid model id"),
	R1(MODEL, 0, "not supported model"),
	R1(MODEL, 0, "model_deactivated"),
	R1(MODEL, 0, "model has been deactivated"),
	R2(MODEL, 0, "model", "does not exist"), /* OpenAI */
	R2(MODEL, 0, "model", "not found"),      /* Ollama: model "x" not found */
	R2(MODEL, 0, "model", "was retired"),

	R1(BILL, R_OPENROUTER, "key limit exceeded"),
	R1(BILL, R_OPENROUTER, "key limit reached"),
	R1(BILL, R_OPENROUTER, "budget limit exceeded"),
	/* Billing wording wins over rate-limit wording in the same text. */
	TY(BILL, "billing_error"),
	TY(BILL, "insufficient_quota"),
	R1(BILL, 0, "insufficient credits"),
	R1(BILL, 0, "insufficient quota"),
	R1(BILL, 0, "insufficient_quota"),
	R1(BILL, 0, "insufficient balance"),
	R1(BILL, 0, "insufficient_balance"),
	R1(BILL, 0, "credit balance"),          /* "credit balance too low" */
	R1(BILL, 0, "payment required"),
	R1(BILL, 0, "plans & billing"),
	R1(BILL, 0, "requires more credits"),
	R1(BILL, 0, "used all available credits"),
	R1(BILL, 0, "spend limit"),
	R1(BILL, 0, "spending limit"),
	R1(BILL, 0, "余额不足"),
	R1(BILL, 0, "欠费"),

	/* Periodic usage windows are rate limits. */
	R1(RATE, 0, "daily limit"),
	R1(RATE, 0, "weekly limit"),
	R1(RATE, 0, "monthly limit"),
	R1(RATE, 0, "daily usage limit"),
	R1(RATE, 0, "weekly usage limit"),
	R1(RATE, 0, "monthly usage limit"),
	/* The wide rate-limit bucket. */
	TY(RATE, "rate_limit_error"),
	TY(RATE, "rate_limit_exceeded"),
	R1(RATE, 0, "rate limit"),
	R1(RATE, 0, "rate_limit"),
	R1(RATE, 0, "ratelimit"),
	R1(RATE, 0, "too many requests"),
	R1(RATE, 0, "too many concurrent requests"),
	R1(RATE, 0, "throttlingexception"),
	R1(RATE, 0, "throttling"),
	R1(RATE, 0, "throttled"),
	R2(RATE, 0, "concurrency limit", "reached"),
	R1(RATE, 0, "quota limit exceeded"),
	R1(RATE, 0, "quota exceeded"),
	R1(RATE, 0, "exceeded your current quota"),
	R1(RATE, 0, "resource exhausted"),
	R1(RATE, 0, "resource_exhausted"),
	R1(RATE, 0, "resource has been exhausted"),
	R1(RATE, 0, "model_cooldown"),
	R1(RATE, 0, "usage limit"),
	R1(RATE, 0, "requests per minute"),
	R1(RATE, 0, "requests per day"),
	R1(RATE, 0, "tokens per day"),
	R1(RATE, R_WORD, "429"),
	R1(RATE, 0, "请求过于频繁"),
	R1(RATE, 0, "调用频率"),
	R1(RATE, 0, "频率限制"),

	TY(OVER, "overloaded_error"),
	R1(OVER, 0, "overloaded"),
	R1(OVER, 0, "modelnotreadyexception"), /* Bedrock: provider busy */
	R1(OVER, 0, "model is not ready"),
	R1(OVER, 0, "at capacity"),
	R1(OVER, 0, "high demand"),
	R1(OVER, 0, "high load"),
	R1(OVER, 0, "no model loaded"),         /* local servers still loading */
	R2(OVER, 0, "model", "not loaded"),
	R1(OVER, 0, "服务过载"),

	/* The provider finished the turn with an error of its own. */
	TY(SERV, "server_error"),
	R1(SERV, 0, "stop reason: error"), /* also "unhandled stop reason: error" */
	R1(SERV, 0, "finish_reason: error"),

	TY(AUTHP, "deactivated_workspace"),
	R2(AUTHP, 0, "api key", "revoked"),
	R2(AUTHP, 0, "api_key", "revoked"),
	R1(AUTHP, 0, "key has been revoked"),
	R1(AUTHP, 0, "key has been disabled"),
	R2(AUTHP, 0, "api key", "deactivated"),
	R2(AUTHP, 0, "api key", "deleted"),
	R2(AUTHP, 0, "account", "deactivated"),
	R2(AUTHP, 0, "workspace", "deactivated"),
	R2(AUTHP, 0, "organization", "deactivated"),
	R1(AUTHP, 0, "not allowed for this organization"),
	/* §1.8 auth_permanent: a message that is only the code (OpenClaw's
	 * failover-error.test.ts: 401 "invalid_api_key"); exact, so OpenAI's
	 * usual 401 (code invalid_api_key, "Incorrect API key provided")
	 * stays auth. */
	{AUTHP, R_EXACT, {"invalid_api_key", NULL, NULL}, "message invalid_api_key"},

	TY(AUTH, "authentication_error"),
	TY(AUTH, "permission_error"),
	TY(AUTH, "invalid_api_key"),
	R1(AUTH, 0, "invalid api key"),
	R1(AUTH, 0, "invalid_api_key"),
	R1(AUTH, 0, "invalid x-api-key"),
	R1(AUTH, 0, "incorrect api key"),
	R1(AUTH, 0, "invalid token"),
	R1(AUTH, 0, "token has expired"),
	R1(AUTH, 0, "token expired"),
	R1(AUTH, 0, "authentication"),
	R1(AUTH, 0, "unauthorized"),
	R1(AUTH, 0, "forbidden"),
	R1(AUTH, 0, "access denied"),
	R1(AUTH, 0, "insufficient permission"),
	R1(AUTH, 0, "re-authenticate"),
	R1(AUTH, 0, "no api key"),
	R1(AUTH, 0, "no credentials"),
	R1(AUTH, 0, "missing scope"),
	R1(AUTH, R_WORD, "401"),
	R1(AUTH, R_WORD, "403"),

	/* Transient: the stream wrapper's generic text, provider-side 5xx
	 * wording, and transport-shaped failures. */
	R1(TIME, R_EXACT, "an unknown error occurred"),
	R1(TIME, R_OPENROUTER, "provider returned error"),
	R1(TIME, 0, "internal server error"),
	R1(TIME, 0, "bad gateway"),
	R1(TIME, 0, "gateway timeout"),
	R1(TIME, 0, "service unavailable"),
	R1(TIME, 0, "temporarily unavailable"),
	R1(TIME, 0, "upstream error"),
	R1(TIME, 0, "upstream connect error"),
	R1(TIME, 0, "backend error"),
	R2(TIME, R_WORD, "unknown error", "520"),
	R1(TIME, 0, "an error occurred while processing"),
	R1(TIME, 0, "try again later"),
	R1(TIME, 0, "stop reason: abort"),
	R1(TIME, 0, "stop reason: network_error"),
	R1(TIME, 0, "stop reason: malformed_response"),
	R1(TIME, 0, "finish_reason: abort"),
	R1(TIME, 0, "finish_reason: network_error"),
	R1(TIME, 0, "finish_reason: malformed_response"),
	R1(TIME, 0, "request was aborted"),
	R1(TIME, 0, "request aborted"),
	R1(TIME, 0, "operation was aborted"),
	R1(TIME, 0, "timeout"),
	R1(TIME, 0, "timed out"),
	R1(TIME, 0, "deadline exceeded"),
	R1(TIME, 0, "econnrefused"),
	R1(TIME, 0, "econnreset"),
	R1(TIME, 0, "econnaborted"),
	R1(TIME, 0, "enetunreach"),
	R1(TIME, 0, "ehostunreach"),
	R1(TIME, 0, "ehostdown"),
	R1(TIME, 0, "enetreset"),
	R1(TIME, 0, "etimedout"),
	R1(TIME, 0, "epipe"),
	R1(TIME, 0, "enotfound"),
	R1(TIME, 0, "eai_again"),
	R1(TIME, 0, "socket hang up"),
	R1(TIME, 0, "fetch failed"),
	R1(TIME, 0, "network error"),
	R1(TIME, 0, "connection error"),
	R1(TIME, 0, "connection reset"),
	R1(TIME, 0, "connection refused"),
	R1(TIME, 0, "network request failed"),
	R1(TIME, 0, "stream was closed"),
	R1(TIME, 0, "stream closed"),
	R1(TIME, 0, "stream aborted"),
	R2(TIME, 0, "without sending", "chunk"),
	R1(TIME, R_EXACT, "terminated"),
	R1(TIME, R_EXACT, "request failed"),

	R1(FMT, 0, "string should match pattern"),
	R1(FMT, 0, "tool_use.id"),
	R1(FMT, 0, "tool_use_id"),
	R1(FMT, 0, "invalid request format"),
	R2(FMT, 0, "tool call id was", "must be"),
	R1(FMT, 0, "does not support assistant message prefill"),
	R1(FMT, 0, "conversation must end with a user message"),

	R1(NODET, R_EXACT, "unknown error (no error details in response)"),
	R1(NODET, 0, "no error details"),

	/* Last: a request the provider rejected, said in-stream. */
	TY(FMT, "invalid_request_error"),
};

#define NRULES (sizeof(rules) / sizeof(rules[0]))

/* ---- the text being classified ---- */

enum { SEG_RAW, SEG_MESSAGE, SEG_META_RAW, SEG_TYPE, SEG_CODE, SEG_ROOT_TYPE, SEG_COUNT };

typedef struct text {
	const char *p[SEG_COUNT];
	size_t n[SEG_COUNT];
	char code_buf[32]; /* a numeric error code, printed */
	cJSON *json;       /* owns what the string segments point into */
} text_t;

typedef struct ctx {
	text_t t;
	int status;      /* given, or read from the text's lead */
	bool is402;
	bool openrouter;
	bool has_text;
} ctx_t;

static bool is_word(unsigned char c)
{
	return isalnum(c) || c == '_';
}

/* Case-insensitive: `needle` is lower case already. */
static bool find_ci(const char *h, size_t hn, const char *needle, bool word)
{
	size_t nn = strlen(needle);
	if (nn == 0 || nn > hn)
		return false;
	unsigned char first = (unsigned char)needle[0];
	for (size_t i = 0; i + nn <= hn; i++) {
		if ((unsigned char)tolower((unsigned char)h[i]) != first)
			continue;
		size_t j = 1;
		while (j < nn && (unsigned char)tolower((unsigned char)h[i + j]) ==
					 (unsigned char)needle[j])
			j++;
		if (j < nn)
			continue;
		if (word && ((i > 0 && is_word((unsigned char)h[i - 1])) ||
			     (i + nn < hn && is_word((unsigned char)h[i + nn]))))
			continue;
		return true;
	}
	return false;
}

static bool eq_ci(const char *s, size_t n, const char *lower)
{
	size_t l = strlen(lower);
	if (n != l)
		return false;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)tolower((unsigned char)s[i]) != (unsigned char)lower[i])
			return false;
	return true;
}

static void trim(const char **s, size_t *n)
{
	while (*n && isspace((unsigned char)**s)) {
		(*s)++;
		(*n)--;
	}
	while (*n && isspace((unsigned char)(*s)[*n - 1]))
		(*n)--;
}

/* The text the R_EXACT rules compare with: the message, else the body. */
static void main_text(const text_t *t, const char **s, size_t *n)
{
	int k = t->p[SEG_MESSAGE] ? SEG_MESSAGE : SEG_RAW;
	*s = t->p[k] ? t->p[k] : "";
	*n = t->n[k];
	trim(s, n);
	if (*n && (*s)[*n - 1] == '.')
		(*n)--;
}

static bool find_text(const text_t *t, const char *needle, bool word)
{
	for (int k = SEG_RAW; k <= SEG_META_RAW; k++)
		if (t->p[k] && find_ci(t->p[k], t->n[k], needle, word))
			return true;
	return false;
}

static bool type_is(const text_t *t, const char *lower)
{
	for (int k = SEG_TYPE; k < SEG_COUNT; k++)
		if (t->p[k] && eq_ci(t->p[k], t->n[k], lower))
			return true;
	return false;
}

static bool rule_matches(const rule_t *r, const ctx_t *c)
{
	if ((r->flags & R_402) && !c->is402)
		return false;
	if ((r->flags & R_OPENROUTER) && !c->openrouter)
		return false;
	if (r->flags & R_EXACT) {
		const char *s;
		size_t n;
		main_text(&c->t, &s, &n);
		return eq_ci(s, n, r->all[0]);
	}
	size_t i = 0;
	if (r->flags & R_TYPE) {
		if (!type_is(&c->t, r->all[0]))
			return false;
		i = 1;
	}
	for (; i < 3 && r->all[i]; i++)
		if (!find_text(&c->t, r->all[i], r->flags & R_WORD))
			return false;
	return true;
}

static void set_seg(text_t *t, int k, const cJSON *v)
{
	if (cJSON_IsString(v) && v->valuestring) {
		t->p[k] = v->valuestring;
		t->n[k] = strlen(v->valuestring);
		if (t->n[k] > SCAN_MAX)
			t->n[k] = SCAN_MAX;
	}
}

/* Reads an OpenAI / Anthropic / OpenRouter / FastAPI-style error object.
 * A body that is not JSON (or too big, or out of memory) is text only. */
static void read_json(text_t *t, const char *body, size_t len)
{
	const char *s = body;
	size_t n = len;
	trim(&s, &n);
	if (n < 2 || n > PARSE_MAX || (s[0] != '{' && s[0] != '['))
		return;
	t->json = cJSON_ParseWithLength(s, n);
	const cJSON *root = t->json;
	if (cJSON_IsArray(root))
		root = cJSON_GetArrayItem(root, 0); /* [{"error": ...}] */
	if (!cJSON_IsObject(root))
		return;
	const cJSON *err = cJSON_GetObjectItemCaseSensitive(root, "error");
	if (cJSON_IsString(err)) {
		set_seg(t, SEG_MESSAGE, err); /* {"error": "Unauthorized"} */
		err = NULL;
	}
	const cJSON *e = cJSON_IsObject(err) ? err : root;
	set_seg(t, SEG_MESSAGE, cJSON_GetObjectItemCaseSensitive(e, "message"));
	if (!t->p[SEG_MESSAGE])
		set_seg(t, SEG_MESSAGE, cJSON_GetObjectItemCaseSensitive(root, "message"));
	if (!t->p[SEG_MESSAGE])
		set_seg(t, SEG_MESSAGE, cJSON_GetObjectItemCaseSensitive(root, "detail"));
	const cJSON *meta = cJSON_GetObjectItemCaseSensitive(e, "metadata");
	if (cJSON_IsObject(meta))
		set_seg(t, SEG_META_RAW, cJSON_GetObjectItemCaseSensitive(meta, "raw"));
	if (e != root)
		set_seg(t, SEG_TYPE, cJSON_GetObjectItemCaseSensitive(e, "type"));
	set_seg(t, SEG_ROOT_TYPE, cJSON_GetObjectItemCaseSensitive(root, "type"));
	const cJSON *code = cJSON_GetObjectItemCaseSensitive(e, "code");
	if (cJSON_IsString(code)) {
		set_seg(t, SEG_CODE, code);
	} else if (cJSON_IsNumber(code) && code->valuedouble >= 0 && code->valuedouble < 1e9) {
		int m = snprintf(t->code_buf, sizeof(t->code_buf), "%d", (int)code->valuedouble);
		t->p[SEG_CODE] = t->code_buf;
		t->n[SEG_CODE] = (size_t)m;
	}
}

/* "503 Service Unavailable", "Error: 429 ...", "HTTP 402: ...": a status at
 * the head of the text. 0 when there is none. */
static int leading_status(const char *s, size_t n)
{
	trim(&s, &n);
	static const char *const prefixes[] = {"error:", "error", "http/1.1", "http/2", "http",
					       "status:", "status"};
	for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++) {
		size_t l = strlen(prefixes[i]);
		if (n >= l && eq_ci(s, l, prefixes[i])) {
			s += l;
			n -= l;
			trim(&s, &n);
			break;
		}
	}
	if (n < 3 || !isdigit((unsigned char)s[0]) || !isdigit((unsigned char)s[1]) ||
	    !isdigit((unsigned char)s[2]))
		return 0;
	if (n > 3 && (isalnum((unsigned char)s[3]) || s[3] == '.'))
		return 0;
	int code = (s[0] - '0') * 100 + (s[1] - '0') * 10 + (s[2] - '0');
	return code >= 400 && code <= 599 ? code : 0;
}

/* A 402 written into the text: "status: 402", "\"code\":402", "HTTP 402",
 * "error code 402", "returned a 402". */
static bool has_402_marker(const char *s, size_t n)
{
	static const char *const words[] = {"status", "code", "http", "error", "got", "returned",
					    "received"};
	for (size_t i = 0; i + 3 <= n; i++) {
		if (memcmp(s + i, "402", 3) != 0)
			continue;
		if ((i > 0 && is_word((unsigned char)s[i - 1])) ||
		    (i + 3 < n && is_word((unsigned char)s[i + 3])))
			continue;
		/* Back over separators, then read the word before. */
		size_t j = i;
		while (j > 0 && strchr(" \t\"':=/.", s[j - 1]))
			j--;
		while (j > 0 && isdigit((unsigned char)s[j - 1])) /* "http/1.1 402" */
			j--;
		while (j > 0 && strchr(" \t\"':=/.", s[j - 1]))
			j--;
		size_t e = j;
		while (j > 0 && isalpha((unsigned char)s[j - 1]))
			j--;
		if (e > j && e - j == 1 && (s[j] == 'a' || s[j] == 'A')) { /* "got a 402" */
			e = j;
			while (e > 0 && s[e - 1] == ' ')
				e--;
			j = e;
			while (j > 0 && isalpha((unsigned char)s[j - 1]))
				j--;
		}
		for (size_t w = 0; w < sizeof(words) / sizeof(words[0]); w++)
			if (eq_ci(s + j, e - j, words[w]))
				return true;
	}
	return false;
}

static bool is_html(const char *s, size_t n)
{
	trim(&s, &n);
	return (n >= 14 && eq_ci(s, 14, "<!doctype html")) || (n >= 5 && eq_ci(s, 5, "<html"));
}

/* ---- retry-after ---- */

/* A non-negative decimal ("120", "1.5") scaled by `scale` ms per unit.
 * Returns the number of bytes read (0: none). Saturates. */
static size_t parse_decimal(const char *s, size_t n, uint64_t scale, uint64_t *out)
{
	size_t i = 0;
	uint64_t whole = 0;
	while (i < n && isdigit((unsigned char)s[i])) {
		if (whole < PC_FAILOVER_RETRY_AFTER_MAX_MS)
			whole = whole * 10 + (uint64_t)(s[i] - '0');
		i++;
	}
	if (i == 0)
		return 0;
	uint64_t frac = 0, div = 1;
	if (i + 1 < n && s[i] == '.' && isdigit((unsigned char)s[i + 1])) {
		i++;
		while (i < n && isdigit((unsigned char)s[i])) {
			if (div < 1000000) {
				frac = frac * 10 + (uint64_t)(s[i] - '0');
				div *= 10;
			}
			i++;
		}
	}
	uint64_t ms = whole >= PC_FAILOVER_RETRY_AFTER_MAX_MS ? PC_FAILOVER_RETRY_AFTER_MAX_MS
							      : whole * scale + frac * scale / div;
	*out = ms > PC_FAILOVER_RETRY_AFTER_MAX_MS ? PC_FAILOVER_RETRY_AFTER_MAX_MS : ms;
	return i;
}

/* Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
 * days_from_civil). */
static int64_t days_from_civil(int64_t y, int m, int d)
{
	y -= m <= 2;
	int64_t era = (y >= 0 ? y : y - 399) / 400;
	int64_t yoe = y - era * 400;
	int64_t doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
	int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
	return era * 146097 + doe - 719468;
}

/* IMF-fixdate "Sun, 06 Nov 1994 08:49:37 GMT", RFC 850 "Sunday, 06-Nov-94
 * 08:49:37 GMT" and asctime "Sun Nov  6 08:49:37 1994": the fields are told
 * apart by their shape, so one reader takes all three. */
static int parse_http_date(const char *s, size_t n, int64_t *out_ms)
{
	static const char *const months[] = {"jan", "feb", "mar", "apr", "may", "jun",
					     "jul", "aug", "sep", "oct", "nov", "dec"};
	int day = -1, mon = -1, hh = -1, mm = -1, ss = -1;
	int64_t year = -1;
	size_t i = 0;
	while (i < n) {
		while (i < n && (s[i] == ' ' || s[i] == ',' || s[i] == '-' || s[i] == '\t'))
			i++;
		size_t st = i;
		while (i < n && s[i] != ' ' && s[i] != ',' && s[i] != '-' && s[i] != '\t')
			i++;
		size_t tl = i - st;
		const char *tok = s + st;
		if (tl == 0)
			break;
		if (memchr(tok, ':', tl)) {
			if (tl != 8 || tok[2] != ':' || tok[5] != ':')
				return PC_EINVAL;
			for (size_t k = 0; k < 8; k++)
				if (k != 2 && k != 5 && !isdigit((unsigned char)tok[k]))
					return PC_EINVAL;
			hh = (tok[0] - '0') * 10 + (tok[1] - '0');
			mm = (tok[3] - '0') * 10 + (tok[4] - '0');
			ss = (tok[6] - '0') * 10 + (tok[7] - '0');
		} else if (isalpha((unsigned char)tok[0])) {
			if (tl == 3) {
				for (int k = 0; k < 12; k++)
					if (eq_ci(tok, 3, months[k]))
						mon = k + 1;
			}
			/* Weekdays and "GMT" carry nothing we need. */
		} else {
			int64_t v = 0;
			for (size_t k = 0; k < tl; k++) {
				if (!isdigit((unsigned char)tok[k]) || k >= 4)
					return PC_EINVAL;
				v = v * 10 + (tok[k] - '0');
			}
			if (tl == 4)
				year = v;
			else if (day < 0)
				day = (int)v;
			else if (tl == 2)
				year = v < 70 ? 2000 + v : 1900 + v;
			else
				return PC_EINVAL;
		}
	}
	if (day < 1 || day > 31 || mon < 1 || year < 1970 || hh < 0 || hh > 23 || mm > 59 ||
	    ss > 60)
		return PC_EINVAL;
	int64_t days = days_from_civil(year, mon, day);
	*out_ms = ((days * 24 + hh) * 60 + mm) * 60000 + (int64_t)ss * 1000;
	return 0;
}

int pc_failover_parse_retry_after(const char *value, int64_t now_ms, uint64_t *out_ms)
{
	if (!value || !out_ms)
		return PC_EINVAL;
	const char *s = value;
	size_t n = strnlen(value, 256);
	trim(&s, &n);
	uint64_t ms = 0;
	size_t used = parse_decimal(s, n, 1000, &ms);
	if (used && used == n) {
		*out_ms = ms;
		return 0;
	}
	int64_t at = 0;
	if (now_ms <= 0 || parse_http_date(s, n, &at) != 0)
		return PC_EINVAL;
	uint64_t d = at > now_ms ? (uint64_t)(at - now_ms) : 0;
	*out_ms = d > PC_FAILOVER_RETRY_AFTER_MAX_MS ? PC_FAILOVER_RETRY_AFTER_MAX_MS : d;
	return 0;
}

/* "try again in 1.898s", "retry after 20 seconds", "retry-after: 5",
 * "Please retry in 46.3s": a hint in the error text. */
static uint64_t body_retry_hint(const char *s, size_t n)
{
	static const char *const leads[] = {"try again in", "retry after", "retry-after",
					    "retry in"};
	for (size_t l = 0; l < sizeof(leads) / sizeof(leads[0]); l++) {
		size_t ll = strlen(leads[l]);
		for (size_t i = 0; i + ll <= n; i++) {
			if (!eq_ci(s + i, ll, leads[l]))
				continue;
			size_t j = i + ll;
			while (j < n && (s[j] == ' ' || s[j] == ':'))
				j++;
			if (j + 3 <= n && eq_ci(s + j, 3, "in "))
				j += 3;
			/* Measure the number first; its unit comes after it. */
			size_t num = j;
			uint64_t v = 0;
			size_t used = parse_decimal(s + num, n - num, 1, &v);
			if (!used)
				continue;
			j += used;
			while (j < n && s[j] == ' ')
				j++;
			uint64_t scale = 1000;
			if (j + 2 <= n && eq_ci(s + j, 2, "ms"))
				scale = 1;
			else if (j + 11 <= n && eq_ci(s + j, 11, "millisecond"))
				scale = 1;
			else if (j < n && (s[j] == 'm' || s[j] == 'M'))
				scale = 60000; /* "m", "min", "minutes" */
			else if (j < n && (s[j] == 'h' || s[j] == 'H'))
				scale = 3600000;
			uint64_t r = 0;
			parse_decimal(s + num, used, scale, &r);
			if (r)
				return r;
		}
	}
	return 0;
}

/* ---- classification ---- */

static void decide(pc_failover_result_t *out, pc_failover_reason_t r, const char *detail)
{
	out->reason = r;
	out->detail = detail;
}

/* Step 5. Returns true when the status decided. */
static bool status_map(const ctx_t *c, const bool *has, pc_failover_result_t *out)
{
	switch (c->status) {
	case 401:
	case 403:
		if (has[AUTHP])
			decide(out, AUTHP, "status 401/403 with revoked-key wording");
		else if (has[BILL])
			decide(out, BILL, "status 401/403 with billing wording");
		else
			decide(out, AUTH, "status 401/403");
		return true;
	case 404:
	case 410:
		if (has[SESS])
			decide(out, SESS, "status 404/410 with session wording");
		else if (has[BILL])
			decide(out, BILL, "status 404/410 with billing wording");
		else if (has[AUTHP])
			decide(out, AUTHP, "status 404/410 with revoked-key wording");
		else if (has[AUTH])
			decide(out, AUTH, "status 404/410 with auth wording");
		else if (c->status == 404)
			decide(out, MODEL, "status 404");
		else
			decide(out, TIME, "status 410");
		return true;
	case 408:
		decide(out, TIME, "status 408");
		return true;
	case 413:
		decide(out, CTX, "status 413");
		return true;
	case 499:
	case 503:
		if (has[OVER])
			decide(out, OVER, "status 499/503 with overload wording");
		else
			decide(out, TIME, "status 499/503");
		return true;
	case 529:
		decide(out, OVER, "status 529");
		return true;
	case 500:
	case 502:
	case 504:
		if (has[SERV])
			decide(out, SERV, "status 5xx with server_error type");
		else
			decide(out, TIME, "status 500/502/504");
		return true;
	default:
		return false;
	}
}

static void transport_map(pc_transport_error_t t, pc_failover_result_t *out)
{
	switch (t) {
	case PC_TRANSPORT_TLS: decide(out, PC_FAILOVER_TLS_CERTIFICATE, "transport: tls"); break;
	case PC_TRANSPORT_DNS: decide(out, TIME, "transport: dns"); break;
	case PC_TRANSPORT_CONNECT: decide(out, TIME, "transport: connect"); break;
	case PC_TRANSPORT_CONNECT_TIMEOUT: decide(out, TIME, "transport: connect timeout"); break;
	case PC_TRANSPORT_TIMEOUT: decide(out, TIME, "transport: timeout"); break;
	case PC_TRANSPORT_IDLE_TIMEOUT: decide(out, TIME, "transport: idle timeout"); break;
	case PC_TRANSPORT_RESET: decide(out, TIME, "transport: reset"); break;
	case PC_TRANSPORT_MALFORMED: decide(out, TIME, "transport: malformed response"); break;
	default: decide(out, PC_FAILOVER_UNKNOWN, "transport: unknown kind"); break;
	}
}

int pc_failover_classify(const pc_failover_input_t *in, pc_failover_result_t *out)
{
	if (!in || !out || (!in->body && in->body_len))
		return PC_EINVAL;
	memset(out, 0, sizeof(*out));

	ctx_t c = {0};
	const char *raw = in->body ? in->body : "";
	size_t raw_len = in->body_len;
	{
		const char *s = raw;
		size_t n = raw_len;
		trim(&s, &n);
		c.has_text = n > 0;
	}
	c.t.p[SEG_RAW] = raw;
	c.t.n[SEG_RAW] = raw_len > SCAN_MAX ? SCAN_MAX : raw_len;
	if (c.has_text)
		read_json(&c.t, raw, raw_len);
	c.openrouter = in->provider && find_ci(in->provider, strnlen(in->provider, 256),
					       "openrouter", false);
	c.status = in->status >= 100 && in->status <= 599 ? in->status : 0;
	if (!c.status && c.has_text) {
		const char *s;
		size_t n;
		main_text(&c.t, &s, &n);
		c.status = leading_status(s, n);
	}
	c.is402 = c.status == 402 || type_is(&c.t, "402");
	for (int k = SEG_RAW; k <= SEG_META_RAW && !c.is402; k++)
		if (c.t.p[k])
			c.is402 = has_402_marker(c.t.p[k], c.t.n[k]);

	/* Which reasons have a matching wording, and the first match of each
	 * kind. */
	bool has[PC_FAILOVER_REASON_COUNT] = {0};
	const rule_t *first_decisive = NULL, *first_other = NULL;
	for (size_t i = 0; i < NRULES; i++) {
		/* Without text only the bare 402 rule can match. */
		const rule_t *r = &rules[i];
		if (!rule_matches(r, &c))
			continue;
		has[r->reason] = true;
		if ((r->flags & R_DECISIVE) && !first_decisive)
			first_decisive = r;
		if (!(r->flags & R_DECISIVE) && !first_other)
			first_other = r;
	}

	/* Retry-after: the precise header, the common one, then the text. */
	uint64_t ra = 0;
	if (in->retry_after_ms) {
		const char *s = in->retry_after_ms;
		size_t n = strnlen(s, 64);
		trim(&s, &n);
		size_t used = parse_decimal(s, n, 1, &ra);
		if (used != n)
			ra = 0;
	}
	if (!ra && in->retry_after)
		pc_failover_parse_retry_after(in->retry_after, in->now_ms, &ra);
	if (!ra && c.has_text) {
		for (int k = SEG_RAW; k <= SEG_META_RAW && !ra; k++)
			if (c.t.p[k])
				ra = body_retry_hint(c.t.p[k], c.t.n[k]);
	}
	out->retry_after_ms = ra;

	if (in->transport == PC_TRANSPORT_ABORTED) {
		decide(out, PC_FAILOVER_UNKNOWN, "user abort");
		out->aborted = true;
	} else if (c.status == 429 && type_is(&c.t, "insufficient_quota")) {
		decide(out, BILL, "status 429 with code insufficient_quota");
	} else if (c.status == 429) {
		decide(out, RATE, "status 429");
	} else if ((c.status == 408 || c.status == 499 || c.status >= 500) &&
		   is_html(raw, raw_len > SCAN_MAX ? SCAN_MAX : raw_len)) {
		decide(out, TIME, "HTML error page on a transient status");
	} else if (first_decisive) {
		decide(out, first_decisive->reason, first_decisive->detail);
	} else if (status_map(&c, has, out)) {
		/* decided */
	} else if (first_other) {
		decide(out, first_other->reason, first_other->detail);
	} else if (c.status == 400 || c.status == 422) {
		if (c.has_text)
			decide(out, FMT, "status 400/422");
		else
			decide(out, NODET, "status 400/422 without a body");
	} else if (c.status >= 500) {
		decide(out, TIME, "status 5xx");
	} else if (in->transport != PC_TRANSPORT_NONE) {
		transport_map(in->transport, out);
	} else if (c.has_text) {
		decide(out, PC_FAILOVER_UNCLASSIFIED, "no rule matched the text");
	} else if (c.status >= 400) {
		decide(out, PC_FAILOVER_UNKNOWN, "error status without a body");
	} else {
		decide(out, PC_FAILOVER_EMPTY_RESPONSE, "nothing to go on");
	}

	pc_failover_reason_t r = out->reason;
	out->status = pc_failover_reason_status(r);
	out->compact = r == CTX;
	out->failover = !out->aborted && r != CTX && r != PC_FAILOVER_UNCLASSIFIED &&
			r != PC_FAILOVER_UNKNOWN;
	cJSON_Delete(c.t.json);
	return 0;
}
