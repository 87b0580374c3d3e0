/*
 * Failover classification (agents/providers/failover.c): every reason is
 * reachable from a real-shaped provider failure, the priority order holds
 * where wordings and statuses disagree, retry-after is read in all its
 * forms, and garbage, huge or NULL inputs never crash.
 */
#include <criterion/criterion.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "agents/providers/failover.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#define ASSERT_NO_LEAKS() cr_assert_eq(__lsan_do_recoverable_leak_check(), 0, "LeakSanitizer found leaks")
#else
#define ASSERT_NO_LEAKS() ((void)0)
#endif

static pc_failover_result_t classify_full(int status, const char *body, pc_transport_error_t t,
					  const char *provider)
{
	pc_failover_input_t in = {
		.status = status,
		.body = body,
		.body_len = body ? strlen(body) : 0,
		.transport = t,
		.provider = provider,
	};
	pc_failover_result_t r;
	memset(&r, 0xAB, sizeof(r)); /* the classifier must overwrite everything */
	cr_assert_eq(pc_failover_classify(&in, &r), 0);
	cr_assert(r.detail && *r.detail, "every decision names its rule");
	cr_assert_eq(r.status, pc_failover_reason_status(r.reason));
	return r;
}

static pc_failover_result_t classify(int status, const char *body)
{
	return classify_full(status, body, PC_TRANSPORT_NONE, NULL);
}

#define EXPECT(res, want)                                                                          \
	cr_assert_eq((res).reason, (want), "got %s (rule \"%s\"), want %s",                        \
		     pc_failover_reason_name((res).reason), (res).detail,                            \
		     pc_failover_reason_name(want))

#define EXPECT_TEXT(status, body, want)                                                            \
	do {                                                                                       \
		pc_failover_result_t r_ = classify((status), (body));                              \
		cr_assert_eq(r_.reason, (want), "%d \"%s\": got %s (rule \"%s\"), want %s",        \
			     (status), (body), pc_failover_reason_name(r_.reason), r_.detail,        \
			     pc_failover_reason_name(want));                                         \
	} while (0)

/* ---- names and statuses ---- */

Test(failover, names_round_trip)
{
	static const char *const want[] = {
		"auth", "auth_permanent", "format", "rate_limit", "overloaded", "billing",
		"server_error", "timeout", "tls_certificate", "context_overflow", "model_not_found",
		"session_expired", "empty_response", "no_error_details", "unclassified", "unknown",
	};
	cr_assert_eq(sizeof(want) / sizeof(want[0]), PC_FAILOVER_REASON_COUNT);
	for (int i = 0; i < PC_FAILOVER_REASON_COUNT; i++) {
		cr_assert_str_eq(pc_failover_reason_name((pc_failover_reason_t)i), want[i]);
		pc_failover_reason_t r;
		cr_assert_eq(pc_failover_reason_parse(want[i], &r), 0);
		cr_assert_eq(r, (pc_failover_reason_t)i);
	}
	pc_failover_reason_t r;
	cr_assert_eq(pc_failover_reason_parse("nope", &r), PC_ENOTFOUND);
	cr_assert_eq(pc_failover_reason_parse(NULL, &r), PC_EINVAL);
	cr_assert_eq(pc_failover_reason_parse("auth", NULL), PC_EINVAL);
	cr_assert_str_eq(pc_failover_reason_name((pc_failover_reason_t)99), "unknown");
	cr_assert_str_eq(pc_failover_reason_name((pc_failover_reason_t)-1), "unknown");
}

Test(failover, statuses_per_spec)
{
	cr_assert_eq(pc_failover_reason_status(PC_FAILOVER_BILLING), 402);
	cr_assert_eq(pc_failover_reason_status(PC_FAILOVER_RATE_LIMIT), 429);
	cr_assert_eq(pc_failover_reason_status(PC_FAILOVER_OVERLOADED), 503);
	cr_assert_eq(pc_failover_reason_status(PC_FAILOVER_AUTH), 401);
	cr_assert_eq(pc_failover_reason_status(PC_FAILOVER_AUTH_PERMANENT), 403);
	cr_assert_eq(pc_failover_reason_status(PC_FAILOVER_TIMEOUT), 408);
	cr_assert_eq(pc_failover_reason_status(PC_FAILOVER_FORMAT), 400);
	cr_assert_eq(pc_failover_reason_status(PC_FAILOVER_MODEL_NOT_FOUND), 404);
	cr_assert_eq(pc_failover_reason_status(PC_FAILOVER_SESSION_EXPIRED), 410);
	cr_assert_eq(pc_failover_reason_status(PC_FAILOVER_SERVER_ERROR), 500);
	cr_assert_eq(pc_failover_reason_status(PC_FAILOVER_TLS_CERTIFICATE), 0);
	cr_assert_eq(pc_failover_reason_status(PC_FAILOVER_CONTEXT_OVERFLOW), 0);
	cr_assert_eq(pc_failover_reason_status(PC_FAILOVER_EMPTY_RESPONSE), 0);
	cr_assert_eq(pc_failover_reason_status(PC_FAILOVER_NO_ERROR_DETAILS), 0);
	cr_assert_eq(pc_failover_reason_status(PC_FAILOVER_UNCLASSIFIED), 0);
	cr_assert_eq(pc_failover_reason_status(PC_FAILOVER_UNKNOWN), 0);
	cr_assert_eq(pc_failover_reason_status((pc_failover_reason_t)77), 0);
}

Test(failover, transport_names)
{
	cr_assert_str_eq(pc_transport_error_name(PC_TRANSPORT_NONE), "none");
	cr_assert_str_eq(pc_transport_error_name(PC_TRANSPORT_TLS), "tls");
	cr_assert_str_eq(pc_transport_error_name(PC_TRANSPORT_ABORTED), "aborted");
	cr_assert_str_eq(pc_transport_error_name(PC_TRANSPORT_IDLE_TIMEOUT), "idle_timeout");
	cr_assert_str_eq(pc_transport_error_name(PC_TRANSPORT_DNS), "dns");
	cr_assert_str_eq(pc_transport_error_name(PC_TRANSPORT_CONNECT), "connect");
	cr_assert_str_eq(pc_transport_error_name(PC_TRANSPORT_CONNECT_TIMEOUT), "connect_timeout");
	cr_assert_str_eq(pc_transport_error_name(PC_TRANSPORT_TIMEOUT), "timeout");
	cr_assert_str_eq(pc_transport_error_name(PC_TRANSPORT_RESET), "reset");
	cr_assert_str_eq(pc_transport_error_name(PC_TRANSPORT_MALFORMED), "malformed");
	cr_assert_str_eq(pc_transport_error_name((pc_transport_error_t)42), "unknown");
}

/* ---- every reason, from real-shaped failures ---- */

Test(failover, auth)
{
	EXPECT_TEXT(401, "{\"type\":\"error\",\"error\":{\"type\":\"authentication_error\","
			 "\"message\":\"invalid x-api-key\"}}",
		    PC_FAILOVER_AUTH);
	EXPECT_TEXT(401, "{\"error\":{\"message\":\"Incorrect API key provided: sk-abc. You can "
			 "find your API key at https://platform.openai.com/account/api-keys.\","
			 "\"type\":\"invalid_request_error\",\"param\":null,\"code\":\"invalid_api_key\"}}",
		    PC_FAILOVER_AUTH);
	EXPECT_TEXT(403, "", PC_FAILOVER_AUTH);
	EXPECT_TEXT(0, "{\"type\":\"error\",\"error\":{\"type\":\"permission_error\",\"message\":"
		       "\"Your API key does not have permission to use the specified resource.\"}}",
		    PC_FAILOVER_AUTH);
	EXPECT_TEXT(0, "Unauthorized", PC_FAILOVER_AUTH);
	pc_failover_result_t r = classify(401, "bad key");
	cr_assert(r.failover);
	cr_assert_not(r.compact);
}

Test(failover, auth_permanent)
{
	EXPECT_TEXT(401, "{\"error\":{\"message\":\"This API key has been revoked.\"}}",
		    PC_FAILOVER_AUTH_PERMANENT);
	EXPECT_TEXT(403, "Your workspace has been deactivated.", PC_FAILOVER_AUTH_PERMANENT);
	EXPECT_TEXT(403, "{\"error\":{\"code\":\"deactivated_workspace\",\"message\":\"x\"}}",
		    PC_FAILOVER_AUTH_PERMANENT);
	EXPECT_TEXT(0, "account has been deactivated", PC_FAILOVER_AUTH_PERMANENT);
	EXPECT_TEXT(0, "Key has been disabled by the owner", PC_FAILOVER_AUTH_PERMANENT);
}

Test(failover, format)
{
	EXPECT_TEXT(400, "{\"error\":{\"message\":\"Invalid value for 'tool_choice'.\","
			 "\"type\":\"invalid_request_error\"}}",
		    PC_FAILOVER_FORMAT);
	EXPECT_TEXT(422, "unprocessable", PC_FAILOVER_FORMAT);
	EXPECT_TEXT(0, "{\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\","
		       "\"message\":\"messages.1.content.1.tool_use.id: String should match pattern "
		       "'^[a-zA-Z0-9_-]+$'\"}}",
		    PC_FAILOVER_FORMAT);
	EXPECT_TEXT(0, "This model does not support assistant message prefill.", PC_FAILOVER_FORMAT);
	/* Said in-stream with no status: the type alone decides. */
	EXPECT_TEXT(0, "{\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\","
		       "\"message\":\"bad\"}}",
		    PC_FAILOVER_FORMAT);
}

Test(failover, rate_limit)
{
	EXPECT_TEXT(429, "", PC_FAILOVER_RATE_LIMIT);
	EXPECT_TEXT(429, "{\"type\":\"error\",\"error\":{\"type\":\"rate_limit_error\","
			 "\"message\":\"Number of request tokens has exceeded your per-minute rate limit\"}}",
		    PC_FAILOVER_RATE_LIMIT);
	static const char *const texts[] = {
		"Too many concurrent requests for this model",
		"ThrottlingException: Rate exceeded",
		"concurrency limit reached for your account",
		"quota limit exceeded",
		"Request throttled, slow down",
		"429 resource exhausted",
		"RESOURCE_EXHAUSTED",
		"weekly limit reached",
		"Your monthly limit exhausted",
		"daily usage limit hit",
		"You exceeded your current quota",
		"rate_limit_exceeded",
		"Too Many Requests",
		"model_cooldown: all credentials for model x are cooling down",
		"请求过于频繁",
	};
	for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++)
		EXPECT_TEXT(0, texts[i], PC_FAILOVER_RATE_LIMIT);
	EXPECT_TEXT(400, "ThrottlingException", PC_FAILOVER_RATE_LIMIT);
	pc_failover_result_t r = classify(429, NULL);
	cr_assert(r.failover);
}

Test(failover, overloaded)
{
	EXPECT_TEXT(529, "{\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\","
			 "\"message\":\"Overloaded\"}}",
		    PC_FAILOVER_OVERLOADED);
	EXPECT_TEXT(529, "", PC_FAILOVER_OVERLOADED);
	EXPECT_TEXT(503, "{\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\","
			 "\"message\":\"Overloaded\"}}",
		    PC_FAILOVER_OVERLOADED);
	/* The same event in-stream (status 200). */
	EXPECT_TEXT(200, "{\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\","
			 "\"message\":\"Overloaded\"}}",
		    PC_FAILOVER_OVERLOADED);
	EXPECT_TEXT(0, "ModelNotReadyException: Model is not ready", PC_FAILOVER_OVERLOADED);
	EXPECT_TEXT(0, "The selected model is at capacity", PC_FAILOVER_OVERLOADED);
	EXPECT_TEXT(400, "no model loaded", PC_FAILOVER_OVERLOADED);
}

Test(failover, billing)
{
	EXPECT_TEXT(402, "", PC_FAILOVER_BILLING);
	EXPECT_TEXT(402, "{\"error\":{\"message\":\"Insufficient credits. Add more using "
			 "https://openrouter.ai/credits\",\"code\":402}}",
		    PC_FAILOVER_BILLING);
	EXPECT_TEXT(400, "{\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\","
			 "\"message\":\"Your credit balance is too low to access the Anthropic API. "
			 "Please go to Plans & Billing to upgrade or purchase credits.\"}}",
		    PC_FAILOVER_BILLING);
	EXPECT_TEXT(0, "insufficient credits", PC_FAILOVER_BILLING);
	EXPECT_TEXT(0, "{\"type\":\"error\",\"error\":{\"type\":\"billing_error\",\"message\":\"x\"}}",
		    PC_FAILOVER_BILLING);
	/* OpenAI's insufficient_quota comes as a 429 but does not refill. */
	EXPECT_TEXT(429, "{\"error\":{\"message\":\"You exceeded your current quota, please check "
			 "your plan and billing details.\",\"type\":\"insufficient_quota\","
			 "\"code\":\"insufficient_quota\"}}",
		    PC_FAILOVER_BILLING);
	/* Billing wording on 401/403 beats the generic auth mapping. */
	EXPECT_TEXT(403, "insufficient balance on this key", PC_FAILOVER_BILLING);
	pc_failover_result_t r = classify_full(401, "Key limit exceeded", PC_TRANSPORT_NONE,
					       "openrouter");
	EXPECT(r, PC_FAILOVER_BILLING);
	r = classify_full(401, "Key limit exceeded", PC_TRANSPORT_NONE, "openai");
	EXPECT(r, PC_FAILOVER_AUTH);
}

Test(failover, server_error)
{
	EXPECT_TEXT(500, "{\"error\":{\"message\":\"The server had an error while processing your "
			 "request. Sorry about that!\",\"type\":\"server_error\",\"param\":null,"
			 "\"code\":null}}",
		    PC_FAILOVER_SERVER_ERROR);
	EXPECT_TEXT(0, "Unhandled stop reason: error", PC_FAILOVER_SERVER_ERROR);
	EXPECT_TEXT(0, "stop reason: error", PC_FAILOVER_SERVER_ERROR);
	EXPECT_TEXT(0, "Provider finish_reason: error", PC_FAILOVER_SERVER_ERROR);
	pc_failover_result_t r = classify(0, "Provider finish_reason: error");
	cr_assert(r.failover, "server_error stays failover-eligible");
	cr_assert_eq(r.status, 500);
}

Test(failover, timeout_from_text_and_status)
{
	EXPECT_TEXT(500, "", PC_FAILOVER_TIMEOUT);
	EXPECT_TEXT(502, "<html><body>502</body></html>", PC_FAILOVER_TIMEOUT);
	EXPECT_TEXT(504, NULL, PC_FAILOVER_TIMEOUT);
	EXPECT_TEXT(503, "Service Unavailable", PC_FAILOVER_TIMEOUT);
	EXPECT_TEXT(408, "", PC_FAILOVER_TIMEOUT);
	EXPECT_TEXT(410, "", PC_FAILOVER_TIMEOUT);
	EXPECT_TEXT(499, "", PC_FAILOVER_TIMEOUT);
	EXPECT_TEXT(520, "", PC_FAILOVER_TIMEOUT);
	EXPECT_TEXT(500, "{\"type\":\"error\",\"error\":{\"type\":\"api_error\","
			 "\"message\":\"Internal server error\"}}",
		    PC_FAILOVER_TIMEOUT);
	static const char *const texts[] = {
		"{\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"Internal server error\"}}",
		"{\"type\":\"api_error\",\"message\":\"unknown error, 520 (1000)\"}",
		"upstream error",
		"backend error",
		"An unknown error occurred",
		"An unknown error occurred.",
		"Request was aborted.",
		"connect ECONNREFUSED 127.0.0.1:11434",
		"getaddrinfo EAI_AGAIN api.openai.com",
		"read ENETRESET",
		"ENETUNREACH",
		"connect EHOSTUNREACH 10.0.0.1:443",
		"Unhandled stop reason: network_error",
		"stop reason: malformed_response",
		"finish_reason: abort",
		"Request timed out.",
		"socket hang up",
		"terminated",
	};
	for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++)
		EXPECT_TEXT(0, texts[i], PC_FAILOVER_TIMEOUT);
}

Test(failover, timeout_from_transport)
{
	static const pc_transport_error_t kinds[] = {
		PC_TRANSPORT_DNS, PC_TRANSPORT_CONNECT, PC_TRANSPORT_CONNECT_TIMEOUT,
		PC_TRANSPORT_TIMEOUT, PC_TRANSPORT_IDLE_TIMEOUT, PC_TRANSPORT_RESET,
		PC_TRANSPORT_MALFORMED,
	};
	for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
		pc_failover_result_t r = classify_full(0, NULL, kinds[i], NULL);
		EXPECT(r, PC_FAILOVER_TIMEOUT);
		cr_assert(r.failover);
		cr_assert_not(r.aborted);
		/* A 200 whose stream broke is the same. */
		r = classify_full(200, NULL, kinds[i], NULL);
		EXPECT(r, PC_FAILOVER_TIMEOUT);
	}
}

Test(failover, tls_certificate)
{
	pc_failover_result_t r = classify_full(0, NULL, PC_TRANSPORT_TLS, "openai");
	EXPECT(r, PC_FAILOVER_TLS_CERTIFICATE);
	cr_assert(r.failover);
	cr_assert_eq(r.status, 0);
}

Test(failover, context_overflow)
{
	static const char *const texts[] = {
		"{\"type\":\"error\",\"error\":{\"type\":\"request_too_large\",\"message\":"
		"\"Request exceeds the maximum size\"}}",
		"context length exceeded",
		"Input exceeds the maximum number of tokens for this model",
		"ValidationException: The input token count exceeds the maximum number of input "
		"tokens allowed",
		"Input is too long for the model",
		"Input is too long for requested model.",
		"ollama error: context length exceeded",
		"{\"error\":{\"message\":\"This model's maximum context length is 8192 tokens. "
		"However, your messages resulted in 9000 tokens.\",\"type\":\"invalid_request_error\","
		"\"param\":\"messages\",\"code\":\"context_length_exceeded\"}}",
		"{\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\",\"message\":"
		"\"prompt is too long: 210000 tokens > 200000 maximum\"}}",
		"the request exceeds the available context size, try increasing it",
		"Unhandled stop reason: model_context_window_exceeded",
		"上下文过长",
	};
	for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
		EXPECT_TEXT(0, texts[i], PC_FAILOVER_CONTEXT_OVERFLOW);
		EXPECT_TEXT(400, texts[i], PC_FAILOVER_CONTEXT_OVERFLOW);
	}
	EXPECT_TEXT(413, "", PC_FAILOVER_CONTEXT_OVERFLOW);
	pc_failover_result_t r = classify(400, "prompt is too long");
	cr_assert(r.compact);
	cr_assert_not(r.failover, "an overflow is compacted, never a model fallback");
}

Test(failover, model_not_found)
{
	EXPECT_TEXT(404, "", PC_FAILOVER_MODEL_NOT_FOUND);
	EXPECT_TEXT(404, "{\"type\":\"error\",\"error\":{\"type\":\"not_found_error\","
			 "\"message\":\"model: claude-9\"}}",
		    PC_FAILOVER_MODEL_NOT_FOUND);
	EXPECT_TEXT(400, "{\"error\":{\"message\":\"The model `gpt-9` does not exist or you do not "
			 "have access to it.\",\"type\":\"invalid_request_error\",\"code\":\"model_not_found\"}}",
		    PC_FAILOVER_MODEL_NOT_FOUND);
	EXPECT_TEXT(0, "model_not_found", PC_FAILOVER_MODEL_NOT_FOUND);
	EXPECT_TEXT(0, "model \"llama9\" not found, try pulling it first",
		    PC_FAILOVER_MODEL_NOT_FOUND);
	EXPECT_TEXT(0, "No endpoints found for foo/bar.", PC_FAILOVER_MODEL_NOT_FOUND);
	pc_failover_result_t r = classify(404, NULL);
	cr_assert(r.failover);
}

Test(failover, session_expired)
{
	EXPECT_TEXT(0, "Session expired, start again", PC_FAILOVER_SESSION_EXPIRED);
	EXPECT_TEXT(404, "session not found", PC_FAILOVER_SESSION_EXPIRED);
	EXPECT_TEXT(410, "conversation not found", PC_FAILOVER_SESSION_EXPIRED);
}

Test(failover, labels_for_missing_detail)
{
	pc_failover_result_t r = classify(0, NULL);
	EXPECT(r, PC_FAILOVER_EMPTY_RESPONSE);
	cr_assert(r.failover);
	r = classify(200, "   \n\t ");
	EXPECT(r, PC_FAILOVER_EMPTY_RESPONSE);

	EXPECT_TEXT(0, "Unknown error (no error details in response)", PC_FAILOVER_NO_ERROR_DETAILS);
	r = classify(400, "");
	EXPECT(r, PC_FAILOVER_NO_ERROR_DETAILS);
	cr_assert(r.failover);

	r = classify(0, "the flux capacitor misaligned");
	EXPECT(r, PC_FAILOVER_UNCLASSIFIED);
	cr_assert_not(r.failover);
	r = classify(418, "I'm a teapot");
	EXPECT(r, PC_FAILOVER_UNCLASSIFIED);

	r = classify(418, NULL);
	EXPECT(r, PC_FAILOVER_UNKNOWN);
	cr_assert_not(r.failover);
	cr_assert_not(r.aborted);
}

Test(failover, user_abort_is_never_failed_over)
{
	pc_failover_result_t r = classify_full(429, "rate limit", PC_TRANSPORT_ABORTED, NULL);
	cr_assert(r.aborted);
	cr_assert_not(r.failover);
	cr_assert_not(r.compact);
	EXPECT(r, PC_FAILOVER_UNKNOWN);
	r = classify_full(400, "prompt is too long", PC_TRANSPORT_ABORTED, NULL);
	cr_assert(r.aborted);
	cr_assert_not(r.compact);
}

/* ---- every wording, on its own ----
 *
 * One case per row of the classifier's table, in table order: the wording
 * alone decides, and `detail` names exactly that row, so a row that is
 * lost, shadowed by another or moved behind one fails here. */

typedef struct rule_case {
	int status;
	const char *body;
	const char *provider;
	pc_failover_reason_t want;
	const char *detail;
} rule_case_t;

static const rule_case_t rule_cases[] = {
	{0, "zz tokens per min zz", NULL, PC_FAILOVER_RATE_LIMIT, "tokens per min"},
	{0, "zz tpm zz", NULL, PC_FAILOVER_RATE_LIMIT, "tpm"},
	{0, "zz request_too_large zz", NULL, PC_FAILOVER_CONTEXT_OVERFLOW, "request_too_large"},
	{0, "zz context length exceeded zz", NULL, PC_FAILOVER_CONTEXT_OVERFLOW, "context length exceeded"},
	{0, "zz context_length_exceeded zz", NULL, PC_FAILOVER_CONTEXT_OVERFLOW, "context_length_exceeded"},
	{0, "zz maximum context length zz", NULL, PC_FAILOVER_CONTEXT_OVERFLOW, "maximum context length"},
	{0, "zz prompt is too long zz", NULL, PC_FAILOVER_CONTEXT_OVERFLOW, "prompt is too long"},
	{0, "zz prompt too long zz", NULL, PC_FAILOVER_CONTEXT_OVERFLOW, "prompt too long"},
	{0, "zz input exceeds ~ maximum number of tokens zz", NULL, PC_FAILOVER_CONTEXT_OVERFLOW, "input exceeds + maximum number of tokens"},
	{0, "zz input token count ~ exceeds the maximum zz", NULL, PC_FAILOVER_CONTEXT_OVERFLOW, "input token count + exceeds the maximum"},
	{0, "zz input is too long zz", NULL, PC_FAILOVER_CONTEXT_OVERFLOW, "input is too long"},
	{0, "zz too many input tokens zz", NULL, PC_FAILOVER_CONTEXT_OVERFLOW, "too many input tokens"},
	{0, "zz context_window_exceeded zz", NULL, PC_FAILOVER_CONTEXT_OVERFLOW, "context_window_exceeded"},
	{0, "zz context window exceeded zz", NULL, PC_FAILOVER_CONTEXT_OVERFLOW, "context window exceeded"},
	{0, "zz exceeds model context window zz", NULL, PC_FAILOVER_CONTEXT_OVERFLOW, "exceeds model context window"},
	{0, "zz exceeds the context window zz", NULL, PC_FAILOVER_CONTEXT_OVERFLOW, "exceeds the context window"},
	{0, "zz exceeds the model's maximum context zz", NULL, PC_FAILOVER_CONTEXT_OVERFLOW, "exceeds the model's maximum context"},
	{0, "zz exceed context limit zz", NULL, PC_FAILOVER_CONTEXT_OVERFLOW, "exceed context limit"},
	{0, "zz exceeds the available context size zz", NULL, PC_FAILOVER_CONTEXT_OVERFLOW, "exceeds the available context size"},
	{0, "zz model token limit zz", NULL, PC_FAILOVER_CONTEXT_OVERFLOW, "model token limit"},
	{0, "zz request exceeds the maximum size zz", NULL, PC_FAILOVER_CONTEXT_OVERFLOW, "request exceeds the maximum size"},
	{0, "zz context overflow zz", NULL, PC_FAILOVER_CONTEXT_OVERFLOW, "context overflow"},
	{0, "zz input length ~ exceed ~ context zz", NULL, PC_FAILOVER_CONTEXT_OVERFLOW, "input length + exceed + context"},
	{0, "zz max_tokens ~ exceed ~ context zz", NULL, PC_FAILOVER_CONTEXT_OVERFLOW, "max_tokens + exceed + context"},
	{0, "zz 413 ~ too large zz", NULL, PC_FAILOVER_CONTEXT_OVERFLOW, "413 + too large"},
	{0, "zz 上下文过长 zz", NULL, PC_FAILOVER_CONTEXT_OVERFLOW, "上下文过长"},
	{0, "zz 上下文超出 zz", NULL, PC_FAILOVER_CONTEXT_OVERFLOW, "上下文超出"},
	{0, "zz 超出最大上下文 zz", NULL, PC_FAILOVER_CONTEXT_OVERFLOW, "超出最大上下文"},
	{402, "zz subscription quota limit ~ automatic quota refresh zz", NULL, PC_FAILOVER_RATE_LIMIT, "subscription quota limit + automatic quota refresh"},
	{402, "zz subscription quota limit ~ rolling time window zz", NULL, PC_FAILOVER_RATE_LIMIT, "subscription quota limit + rolling time window"},
	{402, "zz insufficient credits zz", NULL, PC_FAILOVER_BILLING, "insufficient credits"},
	{402, "zz insufficient quota zz", NULL, PC_FAILOVER_BILLING, "insufficient quota"},
	{402, "zz insufficient_quota zz", NULL, PC_FAILOVER_BILLING, "insufficient_quota"},
	{402, "zz credit balance zz", NULL, PC_FAILOVER_BILLING, "credit balance"},
	{402, "zz insufficient balance zz", NULL, PC_FAILOVER_BILLING, "insufficient balance"},
	{402, "zz plans & billing zz", NULL, PC_FAILOVER_BILLING, "plans & billing"},
	{402, "zz add more credits zz", NULL, PC_FAILOVER_BILLING, "add more credits"},
	{402, "zz top up zz", NULL, PC_FAILOVER_BILLING, "top up"},
	{402, "zz billing hard limit zz", NULL, PC_FAILOVER_BILLING, "billing hard limit"},
	{402, "zz hard limit reached zz", NULL, PC_FAILOVER_BILLING, "hard limit reached"},
	{402, "zz upgrade your plan ~ limit zz", NULL, PC_FAILOVER_BILLING, "upgrade your plan + limit"},
	{402, "zz current plan ~ limit zz", NULL, PC_FAILOVER_BILLING, "current plan + limit"},
	{402, "zz maximum allowed ~ limit zz", NULL, PC_FAILOVER_BILLING, "maximum allowed + limit"},
	{402, "zz rate limit zz", NULL, PC_FAILOVER_RATE_LIMIT, "rate limit"},
	{402, "zz rate_limit zz", NULL, PC_FAILOVER_RATE_LIMIT, "rate_limit"},
	{402, "zz too many requests zz", NULL, PC_FAILOVER_RATE_LIMIT, "too many requests"},
	{402, "zz usage limit zz", NULL, PC_FAILOVER_RATE_LIMIT, "usage limit"},
	{402, "zz quota exceeded zz", NULL, PC_FAILOVER_RATE_LIMIT, "quota exceeded"},
	{402, "zz resource exhausted zz", NULL, PC_FAILOVER_RATE_LIMIT, "resource exhausted"},
	{402, "zz resource_exhausted zz", NULL, PC_FAILOVER_RATE_LIMIT, "resource_exhausted"},
	{402, "zz organization usage zz", NULL, PC_FAILOVER_RATE_LIMIT, "organization usage"},
	{402, "zz daily ~ spend limit zz", NULL, PC_FAILOVER_RATE_LIMIT, "daily + spend limit"},
	{402, "zz weekly ~ spend limit zz", NULL, PC_FAILOVER_RATE_LIMIT, "weekly + spend limit"},
	{402, "zz monthly ~ spend limit zz", NULL, PC_FAILOVER_RATE_LIMIT, "monthly + spend limit"},
	{402, "zz daily ~ spending limit zz", NULL, PC_FAILOVER_RATE_LIMIT, "daily + spending limit"},
	{402, "zz weekly ~ spending limit zz", NULL, PC_FAILOVER_RATE_LIMIT, "weekly + spending limit"},
	{402, "zz monthly ~ spending limit zz", NULL, PC_FAILOVER_RATE_LIMIT, "monthly + spending limit"},
	{402, "zz daily ~ limit ~ reset zz", NULL, PC_FAILOVER_RATE_LIMIT, "daily + limit + reset"},
	{402, "zz weekly ~ limit ~ reset zz", NULL, PC_FAILOVER_RATE_LIMIT, "weekly + limit + reset"},
	{402, "zz monthly ~ limit ~ reset zz", NULL, PC_FAILOVER_RATE_LIMIT, "monthly + limit + reset"},
	{402, "zz organization ~ spend limit zz", NULL, PC_FAILOVER_RATE_LIMIT, "organization + spend limit"},
	{402, "zz workspace ~ spend limit zz", NULL, PC_FAILOVER_RATE_LIMIT, "workspace + spend limit"},
	{402, "zz organization ~ limit ~ exceeded zz", NULL, PC_FAILOVER_RATE_LIMIT, "organization + limit + exceeded"},
	{402, "zz organization ~ limit ~ reached zz", NULL, PC_FAILOVER_RATE_LIMIT, "organization + limit + reached"},
	{402, "zz workspace ~ limit ~ exceeded zz", NULL, PC_FAILOVER_RATE_LIMIT, "workspace + limit + exceeded"},
	{402, "zz workspace ~ limit ~ reached zz", NULL, PC_FAILOVER_RATE_LIMIT, "workspace + limit + reached"},
	{402, "zz billing period ~ limit zz", NULL, PC_FAILOVER_RATE_LIMIT, "billing period + limit"},
	{402, "zz nothing", NULL, PC_FAILOVER_BILLING, "402 without a usage-window wording"},
	{0, "zz session not found zz", NULL, PC_FAILOVER_SESSION_EXPIRED, "session not found"},
	{0, "zz session does not exist zz", NULL, PC_FAILOVER_SESSION_EXPIRED, "session does not exist"},
	{0, "zz session expired zz", NULL, PC_FAILOVER_SESSION_EXPIRED, "session expired"},
	{0, "zz session invalid zz", NULL, PC_FAILOVER_SESSION_EXPIRED, "session invalid"},
	{0, "zz invalid session zz", NULL, PC_FAILOVER_SESSION_EXPIRED, "invalid session"},
	{0, "zz no such session zz", NULL, PC_FAILOVER_SESSION_EXPIRED, "no such session"},
	{0, "zz conversation not found zz", NULL, PC_FAILOVER_SESSION_EXPIRED, "conversation not found"},
	{0, "zz conversation does not exist zz", NULL, PC_FAILOVER_SESSION_EXPIRED, "conversation does not exist"},
	{0, "zz conversation expired zz", NULL, PC_FAILOVER_SESSION_EXPIRED, "conversation expired"},
	{0, "{\"error\":{\"type\":\"model_not_found\",\"message\":\"zz\"}}", NULL, PC_FAILOVER_MODEL_NOT_FOUND, "error type/code model_not_found"},
	{0, "{\"error\":{\"type\":\"not_found_error\",\"message\":\"zz\"}}", NULL, PC_FAILOVER_MODEL_NOT_FOUND, "error type/code not_found_error"},
	{0, "zz model_not_found zz", NULL, PC_FAILOVER_MODEL_NOT_FOUND, "model_not_found"},
	{0, "zz model not found zz", NULL, PC_FAILOVER_MODEL_NOT_FOUND, "model not found"},
	{0, "zz unknown model zz", NULL, PC_FAILOVER_MODEL_NOT_FOUND, "unknown model"},
	{0, "zz no endpoints found for zz", NULL, PC_FAILOVER_MODEL_NOT_FOUND, "no endpoints found for"},
	{0, "zz is not a valid model id zz", NULL, PC_FAILOVER_MODEL_NOT_FOUND, "is not a valid model id"},
	{0, "zz not supported model zz", NULL, PC_FAILOVER_MODEL_NOT_FOUND, "not supported model"},
	{0, "zz model_deactivated zz", NULL, PC_FAILOVER_MODEL_NOT_FOUND, "model_deactivated"},
	{0, "zz model has been deactivated zz", NULL, PC_FAILOVER_MODEL_NOT_FOUND, "model has been deactivated"},
	{0, "zz model ~ does not exist zz", NULL, PC_FAILOVER_MODEL_NOT_FOUND, "model + does not exist"},
	{0, "zz model ~ not found zz", NULL, PC_FAILOVER_MODEL_NOT_FOUND, "model + not found"},
	{0, "zz model ~ was retired zz", NULL, PC_FAILOVER_MODEL_NOT_FOUND, "model + was retired"},
	{0, "zz key limit exceeded zz", "openrouter", PC_FAILOVER_BILLING, "key limit exceeded"},
	{0, "zz key limit reached zz", "openrouter", PC_FAILOVER_BILLING, "key limit reached"},
	{0, "zz budget limit exceeded zz", "openrouter", PC_FAILOVER_BILLING, "budget limit exceeded"},
	{0, "{\"error\":{\"type\":\"billing_error\",\"message\":\"zz\"}}", NULL, PC_FAILOVER_BILLING, "error type/code billing_error"},
	{0, "{\"error\":{\"type\":\"insufficient_quota\",\"message\":\"zz\"}}", NULL, PC_FAILOVER_BILLING, "error type/code insufficient_quota"},
	{0, "zz insufficient credits zz", NULL, PC_FAILOVER_BILLING, "insufficient credits"},
	{0, "zz insufficient quota zz", NULL, PC_FAILOVER_BILLING, "insufficient quota"},
	{0, "zz insufficient_quota zz", NULL, PC_FAILOVER_BILLING, "insufficient_quota"},
	{0, "zz insufficient balance zz", NULL, PC_FAILOVER_BILLING, "insufficient balance"},
	{0, "zz insufficient_balance zz", NULL, PC_FAILOVER_BILLING, "insufficient_balance"},
	{0, "zz credit balance zz", NULL, PC_FAILOVER_BILLING, "credit balance"},
	{0, "zz payment required zz", NULL, PC_FAILOVER_BILLING, "payment required"},
	{0, "zz plans & billing zz", NULL, PC_FAILOVER_BILLING, "plans & billing"},
	{0, "zz requires more credits zz", NULL, PC_FAILOVER_BILLING, "requires more credits"},
	{0, "zz used all available credits zz", NULL, PC_FAILOVER_BILLING, "used all available credits"},
	{0, "zz spend limit zz", NULL, PC_FAILOVER_BILLING, "spend limit"},
	{0, "zz spending limit zz", NULL, PC_FAILOVER_BILLING, "spending limit"},
	{0, "zz 余额不足 zz", NULL, PC_FAILOVER_BILLING, "余额不足"},
	{0, "zz 欠费 zz", NULL, PC_FAILOVER_BILLING, "欠费"},
	{0, "zz daily limit zz", NULL, PC_FAILOVER_RATE_LIMIT, "daily limit"},
	{0, "zz weekly limit zz", NULL, PC_FAILOVER_RATE_LIMIT, "weekly limit"},
	{0, "zz monthly limit zz", NULL, PC_FAILOVER_RATE_LIMIT, "monthly limit"},
	{0, "zz daily usage limit zz", NULL, PC_FAILOVER_RATE_LIMIT, "daily usage limit"},
	{0, "zz weekly usage limit zz", NULL, PC_FAILOVER_RATE_LIMIT, "weekly usage limit"},
	{0, "zz monthly usage limit zz", NULL, PC_FAILOVER_RATE_LIMIT, "monthly usage limit"},
	{0, "{\"error\":{\"type\":\"rate_limit_error\",\"message\":\"zz\"}}", NULL, PC_FAILOVER_RATE_LIMIT, "error type/code rate_limit_error"},
	{0, "{\"error\":{\"type\":\"rate_limit_exceeded\",\"message\":\"zz\"}}", NULL, PC_FAILOVER_RATE_LIMIT, "error type/code rate_limit_exceeded"},
	{0, "zz rate limit zz", NULL, PC_FAILOVER_RATE_LIMIT, "rate limit"},
	{0, "zz rate_limit zz", NULL, PC_FAILOVER_RATE_LIMIT, "rate_limit"},
	{0, "zz ratelimit zz", NULL, PC_FAILOVER_RATE_LIMIT, "ratelimit"},
	{0, "zz too many requests zz", NULL, PC_FAILOVER_RATE_LIMIT, "too many requests"},
	{0, "zz too many concurrent requests zz", NULL, PC_FAILOVER_RATE_LIMIT, "too many concurrent requests"},
	{0, "zz throttlingexception zz", NULL, PC_FAILOVER_RATE_LIMIT, "throttlingexception"},
	{0, "zz throttling zz", NULL, PC_FAILOVER_RATE_LIMIT, "throttling"},
	{0, "zz throttled zz", NULL, PC_FAILOVER_RATE_LIMIT, "throttled"},
	{0, "zz concurrency limit ~ reached zz", NULL, PC_FAILOVER_RATE_LIMIT, "concurrency limit + reached"},
	{0, "zz quota limit exceeded zz", NULL, PC_FAILOVER_RATE_LIMIT, "quota limit exceeded"},
	{0, "zz quota exceeded zz", NULL, PC_FAILOVER_RATE_LIMIT, "quota exceeded"},
	{0, "zz exceeded your current quota zz", NULL, PC_FAILOVER_RATE_LIMIT, "exceeded your current quota"},
	{0, "zz resource exhausted zz", NULL, PC_FAILOVER_RATE_LIMIT, "resource exhausted"},
	{0, "zz resource_exhausted zz", NULL, PC_FAILOVER_RATE_LIMIT, "resource_exhausted"},
	{0, "zz resource has been exhausted zz", NULL, PC_FAILOVER_RATE_LIMIT, "resource has been exhausted"},
	{0, "zz model_cooldown zz", NULL, PC_FAILOVER_RATE_LIMIT, "model_cooldown"},
	{0, "zz usage limit zz", NULL, PC_FAILOVER_RATE_LIMIT, "usage limit"},
	{0, "zz requests per minute zz", NULL, PC_FAILOVER_RATE_LIMIT, "requests per minute"},
	{0, "zz requests per day zz", NULL, PC_FAILOVER_RATE_LIMIT, "requests per day"},
	{0, "zz tokens per day zz", NULL, PC_FAILOVER_RATE_LIMIT, "tokens per day"},
	{0, "zz 429 zz", NULL, PC_FAILOVER_RATE_LIMIT, "429"},
	{0, "zz 请求过于频繁 zz", NULL, PC_FAILOVER_RATE_LIMIT, "请求过于频繁"},
	{0, "zz 调用频率 zz", NULL, PC_FAILOVER_RATE_LIMIT, "调用频率"},
	{0, "zz 频率限制 zz", NULL, PC_FAILOVER_RATE_LIMIT, "频率限制"},
	{0, "{\"error\":{\"type\":\"overloaded_error\",\"message\":\"zz\"}}", NULL, PC_FAILOVER_OVERLOADED, "error type/code overloaded_error"},
	{0, "zz overloaded zz", NULL, PC_FAILOVER_OVERLOADED, "overloaded"},
	{0, "zz modelnotreadyexception zz", NULL, PC_FAILOVER_OVERLOADED, "modelnotreadyexception"},
	{0, "zz model is not ready zz", NULL, PC_FAILOVER_OVERLOADED, "model is not ready"},
	{0, "zz at capacity zz", NULL, PC_FAILOVER_OVERLOADED, "at capacity"},
	{0, "zz high demand zz", NULL, PC_FAILOVER_OVERLOADED, "high demand"},
	{0, "zz high load zz", NULL, PC_FAILOVER_OVERLOADED, "high load"},
	{0, "zz no model loaded zz", NULL, PC_FAILOVER_OVERLOADED, "no model loaded"},
	{0, "zz model ~ not loaded zz", NULL, PC_FAILOVER_OVERLOADED, "model + not loaded"},
	{0, "zz 服务过载 zz", NULL, PC_FAILOVER_OVERLOADED, "服务过载"},
	{0, "{\"error\":{\"type\":\"server_error\",\"message\":\"zz\"}}", NULL, PC_FAILOVER_SERVER_ERROR, "error type/code server_error"},
	{0, "zz stop reason: error zz", NULL, PC_FAILOVER_SERVER_ERROR, "stop reason: error"},
	{0, "zz finish_reason: error zz", NULL, PC_FAILOVER_SERVER_ERROR, "finish_reason: error"},
	{0, "{\"error\":{\"type\":\"deactivated_workspace\",\"message\":\"zz\"}}", NULL, PC_FAILOVER_AUTH_PERMANENT, "error type/code deactivated_workspace"},
	{0, "zz api key ~ revoked zz", NULL, PC_FAILOVER_AUTH_PERMANENT, "api key + revoked"},
	{0, "zz api_key ~ revoked zz", NULL, PC_FAILOVER_AUTH_PERMANENT, "api_key + revoked"},
	{0, "zz key has been revoked zz", NULL, PC_FAILOVER_AUTH_PERMANENT, "key has been revoked"},
	{0, "zz key has been disabled zz", NULL, PC_FAILOVER_AUTH_PERMANENT, "key has been disabled"},
	{0, "zz api key ~ deactivated zz", NULL, PC_FAILOVER_AUTH_PERMANENT, "api key + deactivated"},
	{0, "zz api key ~ deleted zz", NULL, PC_FAILOVER_AUTH_PERMANENT, "api key + deleted"},
	{0, "zz account ~ deactivated zz", NULL, PC_FAILOVER_AUTH_PERMANENT, "account + deactivated"},
	{0, "zz workspace ~ deactivated zz", NULL, PC_FAILOVER_AUTH_PERMANENT, "workspace + deactivated"},
	{0, "zz organization ~ deactivated zz", NULL, PC_FAILOVER_AUTH_PERMANENT, "organization + deactivated"},
	{0, "zz not allowed for this organization zz", NULL, PC_FAILOVER_AUTH_PERMANENT, "not allowed for this organization"},
	{0, "{\"error\":{\"type\":\"authentication_error\",\"message\":\"zz\"}}", NULL, PC_FAILOVER_AUTH, "error type/code authentication_error"},
	{0, "{\"error\":{\"type\":\"permission_error\",\"message\":\"zz\"}}", NULL, PC_FAILOVER_AUTH, "error type/code permission_error"},
	{0, "{\"error\":{\"type\":\"invalid_api_key\",\"message\":\"zz\"}}", NULL, PC_FAILOVER_AUTH, "error type/code invalid_api_key"},
	{0, "zz invalid api key zz", NULL, PC_FAILOVER_AUTH, "invalid api key"},
	{0, "zz invalid_api_key zz", NULL, PC_FAILOVER_AUTH, "invalid_api_key"},
	{0, "zz invalid x-api-key zz", NULL, PC_FAILOVER_AUTH, "invalid x-api-key"},
	{0, "zz incorrect api key zz", NULL, PC_FAILOVER_AUTH, "incorrect api key"},
	{0, "zz invalid token zz", NULL, PC_FAILOVER_AUTH, "invalid token"},
	{0, "zz token has expired zz", NULL, PC_FAILOVER_AUTH, "token has expired"},
	{0, "zz token expired zz", NULL, PC_FAILOVER_AUTH, "token expired"},
	{0, "zz authentication zz", NULL, PC_FAILOVER_AUTH, "authentication"},
	{0, "zz unauthorized zz", NULL, PC_FAILOVER_AUTH, "unauthorized"},
	{0, "zz forbidden zz", NULL, PC_FAILOVER_AUTH, "forbidden"},
	{0, "zz access denied zz", NULL, PC_FAILOVER_AUTH, "access denied"},
	{0, "zz insufficient permission zz", NULL, PC_FAILOVER_AUTH, "insufficient permission"},
	{0, "zz re-authenticate zz", NULL, PC_FAILOVER_AUTH, "re-authenticate"},
	{0, "zz no api key zz", NULL, PC_FAILOVER_AUTH, "no api key"},
	{0, "zz no credentials zz", NULL, PC_FAILOVER_AUTH, "no credentials"},
	{0, "zz missing scope zz", NULL, PC_FAILOVER_AUTH, "missing scope"},
	{0, "zz 401 zz", NULL, PC_FAILOVER_AUTH, "401"},
	{0, "zz 403 zz", NULL, PC_FAILOVER_AUTH, "403"},
	{0, "an unknown error occurred", NULL, PC_FAILOVER_TIMEOUT, "an unknown error occurred"},
	{0, "zz provider returned error zz", "openrouter", PC_FAILOVER_TIMEOUT, "provider returned error"},
	{0, "zz internal server error zz", NULL, PC_FAILOVER_TIMEOUT, "internal server error"},
	{0, "zz bad gateway zz", NULL, PC_FAILOVER_TIMEOUT, "bad gateway"},
	{0, "zz gateway timeout zz", NULL, PC_FAILOVER_TIMEOUT, "gateway timeout"},
	{0, "zz service unavailable zz", NULL, PC_FAILOVER_TIMEOUT, "service unavailable"},
	{0, "zz temporarily unavailable zz", NULL, PC_FAILOVER_TIMEOUT, "temporarily unavailable"},
	{0, "zz upstream error zz", NULL, PC_FAILOVER_TIMEOUT, "upstream error"},
	{0, "zz upstream connect error zz", NULL, PC_FAILOVER_TIMEOUT, "upstream connect error"},
	{0, "zz backend error zz", NULL, PC_FAILOVER_TIMEOUT, "backend error"},
	{0, "zz unknown error ~ 520 zz", NULL, PC_FAILOVER_TIMEOUT, "unknown error + 520"},
	{0, "zz an error occurred while processing zz", NULL, PC_FAILOVER_TIMEOUT, "an error occurred while processing"},
	{0, "zz try again later zz", NULL, PC_FAILOVER_TIMEOUT, "try again later"},
	{0, "zz stop reason: abort zz", NULL, PC_FAILOVER_TIMEOUT, "stop reason: abort"},
	{0, "zz stop reason: network_error zz", NULL, PC_FAILOVER_TIMEOUT, "stop reason: network_error"},
	{0, "zz stop reason: malformed_response zz", NULL, PC_FAILOVER_TIMEOUT, "stop reason: malformed_response"},
	{0, "zz finish_reason: abort zz", NULL, PC_FAILOVER_TIMEOUT, "finish_reason: abort"},
	{0, "zz finish_reason: network_error zz", NULL, PC_FAILOVER_TIMEOUT, "finish_reason: network_error"},
	{0, "zz finish_reason: malformed_response zz", NULL, PC_FAILOVER_TIMEOUT, "finish_reason: malformed_response"},
	{0, "zz request was aborted zz", NULL, PC_FAILOVER_TIMEOUT, "request was aborted"},
	{0, "zz request aborted zz", NULL, PC_FAILOVER_TIMEOUT, "request aborted"},
	{0, "zz operation was aborted zz", NULL, PC_FAILOVER_TIMEOUT, "operation was aborted"},
	{0, "zz timeout zz", NULL, PC_FAILOVER_TIMEOUT, "timeout"},
	{0, "zz timed out zz", NULL, PC_FAILOVER_TIMEOUT, "timed out"},
	{0, "zz deadline exceeded zz", NULL, PC_FAILOVER_TIMEOUT, "deadline exceeded"},
	{0, "zz econnrefused zz", NULL, PC_FAILOVER_TIMEOUT, "econnrefused"},
	{0, "zz econnreset zz", NULL, PC_FAILOVER_TIMEOUT, "econnreset"},
	{0, "zz econnaborted zz", NULL, PC_FAILOVER_TIMEOUT, "econnaborted"},
	{0, "zz enetunreach zz", NULL, PC_FAILOVER_TIMEOUT, "enetunreach"},
	{0, "zz ehostunreach zz", NULL, PC_FAILOVER_TIMEOUT, "ehostunreach"},
	{0, "zz ehostdown zz", NULL, PC_FAILOVER_TIMEOUT, "ehostdown"},
	{0, "zz enetreset zz", NULL, PC_FAILOVER_TIMEOUT, "enetreset"},
	{0, "zz etimedout zz", NULL, PC_FAILOVER_TIMEOUT, "etimedout"},
	{0, "zz epipe zz", NULL, PC_FAILOVER_TIMEOUT, "epipe"},
	{0, "zz enotfound zz", NULL, PC_FAILOVER_TIMEOUT, "enotfound"},
	{0, "zz eai_again zz", NULL, PC_FAILOVER_TIMEOUT, "eai_again"},
	{0, "zz socket hang up zz", NULL, PC_FAILOVER_TIMEOUT, "socket hang up"},
	{0, "zz fetch failed zz", NULL, PC_FAILOVER_TIMEOUT, "fetch failed"},
	{0, "zz network error zz", NULL, PC_FAILOVER_TIMEOUT, "network error"},
	{0, "zz connection error zz", NULL, PC_FAILOVER_TIMEOUT, "connection error"},
	{0, "zz connection reset zz", NULL, PC_FAILOVER_TIMEOUT, "connection reset"},
	{0, "zz connection refused zz", NULL, PC_FAILOVER_TIMEOUT, "connection refused"},
	{0, "zz network request failed zz", NULL, PC_FAILOVER_TIMEOUT, "network request failed"},
	{0, "zz stream was closed zz", NULL, PC_FAILOVER_TIMEOUT, "stream was closed"},
	{0, "zz stream closed zz", NULL, PC_FAILOVER_TIMEOUT, "stream closed"},
	{0, "zz stream aborted zz", NULL, PC_FAILOVER_TIMEOUT, "stream aborted"},
	{0, "zz without sending ~ chunk zz", NULL, PC_FAILOVER_TIMEOUT, "without sending + chunk"},
	{0, "terminated", NULL, PC_FAILOVER_TIMEOUT, "terminated"},
	{0, "request failed", NULL, PC_FAILOVER_TIMEOUT, "request failed"},
	{0, "zz string should match pattern zz", NULL, PC_FAILOVER_FORMAT, "string should match pattern"},
	{0, "zz tool_use.id zz", NULL, PC_FAILOVER_FORMAT, "tool_use.id"},
	{0, "zz tool_use_id zz", NULL, PC_FAILOVER_FORMAT, "tool_use_id"},
	{0, "zz invalid request format zz", NULL, PC_FAILOVER_FORMAT, "invalid request format"},
	{0, "zz tool call id was ~ must be zz", NULL, PC_FAILOVER_FORMAT, "tool call id was + must be"},
	{0, "zz does not support assistant message prefill zz", NULL, PC_FAILOVER_FORMAT, "does not support assistant message prefill"},
	{0, "zz conversation must end with a user message zz", NULL, PC_FAILOVER_FORMAT, "conversation must end with a user message"},
	{0, "unknown error (no error details in response)", NULL, PC_FAILOVER_NO_ERROR_DETAILS, "unknown error (no error details in response)"},
	{0, "zz no error details zz", NULL, PC_FAILOVER_NO_ERROR_DETAILS, "no error details"},
	{0, "{\"error\":{\"type\":\"invalid_request_error\",\"message\":\"zz\"}}", NULL, PC_FAILOVER_FORMAT, "error type/code invalid_request_error"},
};

Test(failover, every_wording_decides_alone)
{
	for (size_t i = 0; i < sizeof(rule_cases) / sizeof(rule_cases[0]); i++) {
		const rule_case_t *c = &rule_cases[i];
		pc_failover_result_t r = classify_full(c->status, c->body, PC_TRANSPORT_NONE, c->provider);
		cr_assert(r.reason == c->want && strcmp(r.detail, c->detail) == 0,
			  "case %zu (%d \"%s\"): got %s by \"%s\", want %s by \"%s\"", i, c->status,
			  c->body, pc_failover_reason_name(r.reason), r.detail,
			  pc_failover_reason_name(c->want), c->detail);
	}
}

/* ---- priority conflicts ---- */

Test(failover, status_429_beats_any_wording)
{
	EXPECT_TEXT(429, "prompt is too long", PC_FAILOVER_RATE_LIMIT);
	EXPECT_TEXT(429, "insufficient credits", PC_FAILOVER_RATE_LIMIT);
	EXPECT_TEXT(429, "<html>busy</html>", PC_FAILOVER_RATE_LIMIT);
}

Test(failover, tpm_limit_is_not_an_overflow)
{
	/* Groq: 413 with TPM wording. */
	EXPECT_TEXT(413, "{\"error\":{\"message\":\"Request too large for model `llama3` in "
			 "organization `org_1` on tokens per minute (TPM): Limit 6000, Requested 9000\","
			 "\"type\":\"tokens\",\"code\":\"rate_limit_exceeded\"}}",
		    PC_FAILOVER_RATE_LIMIT);
	EXPECT_TEXT(0, "Request too large for gpt-4o on tokens per min (TPM)", PC_FAILOVER_RATE_LIMIT);
	/* Each wording on its own. */
	EXPECT_TEXT(413, "request too large: over the tokens per minute budget", PC_FAILOVER_RATE_LIMIT);
	EXPECT_TEXT(413, "TPM exceeded; request too large", PC_FAILOVER_RATE_LIMIT);
	/* "tpm" only as a word. */
	EXPECT_TEXT(0, "stpmx failed: prompt is too long", PC_FAILOVER_CONTEXT_OVERFLOW);
}

Test(failover, overflow_beats_status)
{
	EXPECT_TEXT(404, "prompt is too long", PC_FAILOVER_CONTEXT_OVERFLOW);
	EXPECT_TEXT(401, "context length exceeded", PC_FAILOVER_CONTEXT_OVERFLOW);
	EXPECT_TEXT(500, "ValidationException: Input is too long for requested model.",
		    PC_FAILOVER_CONTEXT_OVERFLOW);
}

Test(failover, payment_required_family)
{
	/* Usage windows and spend limits refill: rate_limit. */
	EXPECT_TEXT(402, "You have reached your weekly usage limit. It resets on Monday.",
		    PC_FAILOVER_RATE_LIMIT);
	EXPECT_TEXT(402, "monthly spend limit reached", PC_FAILOVER_RATE_LIMIT);
	EXPECT_TEXT(402, "Your organization has exceeded its spend limit", PC_FAILOVER_RATE_LIMIT);
	EXPECT_TEXT(402, "rate limit hit, retry later", PC_FAILOVER_RATE_LIMIT);
	EXPECT_TEXT(402, "subscription quota limit reached; automatic quota refresh at 00:00",
		    PC_FAILOVER_RATE_LIMIT);
	/* Explicit billing wording beats a window word in the same text. */
	EXPECT_TEXT(402, "daily spend limit: insufficient credits", PC_FAILOVER_BILLING);
	EXPECT_TEXT(402, "Payment Required", PC_FAILOVER_BILLING);
	/* A 402 written in the text, with no status. */
	EXPECT_TEXT(0, "HTTP 402: workspace spend limit exceeded", PC_FAILOVER_RATE_LIMIT);
	EXPECT_TEXT(0, "{\"error\":{\"code\":402,\"message\":\"weekly limit, resets soon\"}}",
		    PC_FAILOVER_RATE_LIMIT);
	EXPECT_TEXT(0, "upstream returned a 402: please top up", PC_FAILOVER_BILLING);
	EXPECT_TEXT(0, "402 Payment Required", PC_FAILOVER_BILLING);
	/* Outside the 402 family a spend limit is billing, a window a rate limit. */
	EXPECT_TEXT(0, "monthly spend limit reached", PC_FAILOVER_BILLING);
	EXPECT_TEXT(0, "weekly limit reached", PC_FAILOVER_RATE_LIMIT);
	/* A "402" that is not a status marker. */
	EXPECT_TEXT(0, "order 402 shipped; monthly limit reached", PC_FAILOVER_RATE_LIMIT);
}

Test(failover, status_exceptions_consult_the_wording)
{
	EXPECT_TEXT(401, "rate limit exceeded", PC_FAILOVER_AUTH);
	EXPECT_TEXT(404, "rate limit exceeded", PC_FAILOVER_MODEL_NOT_FOUND);
	EXPECT_TEXT(503, "overloaded", PC_FAILOVER_OVERLOADED);
	EXPECT_TEXT(503, "upstream connect error", PC_FAILOVER_TIMEOUT);
	EXPECT_TEXT(500, "Internal server error", PC_FAILOVER_TIMEOUT);
	EXPECT_TEXT(404, "invalid api key", PC_FAILOVER_AUTH);
	EXPECT_TEXT(410, "insufficient credits", PC_FAILOVER_BILLING);
	/* 400 looks at the body first. */
	EXPECT_TEXT(400, "overloaded", PC_FAILOVER_OVERLOADED);
	EXPECT_TEXT(422, "rate limit", PC_FAILOVER_RATE_LIMIT);
}

Test(failover, html_pages)
{
	EXPECT_TEXT(502, "<!DOCTYPE html><html><head><title>502 Bad Gateway</title></head></html>",
		    PC_FAILOVER_TIMEOUT);
	EXPECT_TEXT(503, "  <html>Overloaded? no: cloudflare</html>", PC_FAILOVER_TIMEOUT);
	EXPECT_TEXT(401, "<html><body>Unauthorized</body></html>", PC_FAILOVER_AUTH);
}

Test(failover, openrouter_only_rules)
{
	pc_failover_result_t r = classify_full(0, "Provider returned error", PC_TRANSPORT_NONE,
					       "openrouter");
	EXPECT(r, PC_FAILOVER_TIMEOUT);
	r = classify_full(0, "Provider returned error", PC_TRANSPORT_NONE, "OpenRouter/anthropic");
	EXPECT(r, PC_FAILOVER_TIMEOUT);
	r = classify_full(0, "Provider returned error", PC_TRANSPORT_NONE, "anthropic");
	EXPECT(r, PC_FAILOVER_UNCLASSIFIED);
	r = classify_full(0, "Provider returned error", PC_TRANSPORT_NONE, NULL);
	EXPECT(r, PC_FAILOVER_UNCLASSIFIED);
	/* The upstream's raw error, inside OpenRouter's metadata, is read. */
	r = classify_full(400,
			  "{\"error\":{\"message\":\"Provider returned error\",\"code\":400,"
			  "\"metadata\":{\"raw\":\"{\\\"type\\\":\\\"error\\\",\\\"error\\\":"
			  "{\\\"message\\\":\\\"prompt is too long: 1 tokens > 0 maximum\\\"}}\","
			  "\"provider_name\":\"Anthropic\"}}}",
			  PC_TRANSPORT_NONE, "openrouter");
	EXPECT(r, PC_FAILOVER_CONTEXT_OVERFLOW);
}

Test(failover, leading_status_in_text)
{
	EXPECT_TEXT(0, "404 page not here", PC_FAILOVER_MODEL_NOT_FOUND);
	EXPECT_TEXT(0, "Error: 503", PC_FAILOVER_TIMEOUT);
	EXPECT_TEXT(0, "HTTP 401", PC_FAILOVER_AUTH);
	EXPECT_TEXT(0, "529", PC_FAILOVER_OVERLOADED);
	/* Not a status: part of a longer number or a version. */
	EXPECT_TEXT(0, "4040 widgets", PC_FAILOVER_UNCLASSIFIED);
	EXPECT_TEXT(0, "503.2 ok", PC_FAILOVER_UNCLASSIFIED);
}

Test(failover, text_beats_transport_and_transport_beats_labels)
{
	pc_failover_result_t r = classify_full(0, "{\"type\":\"error\",\"error\":{\"type\":"
						  "\"overloaded_error\",\"message\":\"Overloaded\"}}",
					       PC_TRANSPORT_RESET, NULL);
	EXPECT(r, PC_FAILOVER_OVERLOADED);
	r = classify_full(0, "", PC_TRANSPORT_IDLE_TIMEOUT, NULL);
	EXPECT(r, PC_FAILOVER_TIMEOUT);
	r = classify_full(400, "", PC_TRANSPORT_RESET, NULL);
	EXPECT(r, PC_FAILOVER_NO_ERROR_DETAILS);
}

Test(failover, exact_rules_are_exact)
{
	EXPECT_TEXT(0, "  an unknown error occurred  ", PC_FAILOVER_TIMEOUT);
	EXPECT_TEXT(0, "{\"error\":{\"message\":\"An unknown error occurred\"}}", PC_FAILOVER_TIMEOUT);
	EXPECT_TEXT(0, "An unknown error occurred in the widget", PC_FAILOVER_UNCLASSIFIED);
	EXPECT_TEXT(0, "not terminated", PC_FAILOVER_UNCLASSIFIED);
}

Test(failover, word_rules_need_boundaries)
{
	EXPECT_TEXT(0, "id 14290 failed", PC_FAILOVER_UNCLASSIFIED);
	EXPECT_TEXT(0, "got 429 from upstream", PC_FAILOVER_RATE_LIMIT);
	EXPECT_TEXT(0, "req_4011x", PC_FAILOVER_UNCLASSIFIED);
}

/* ---- retry-after ---- */

static uint64_t retry_after(const char *ra, const char *ra_ms, const char *body, int64_t now)
{
	pc_failover_input_t in = {
		.status = 429,
		.retry_after = ra,
		.retry_after_ms = ra_ms,
		.body = body,
		.body_len = body ? strlen(body) : 0,
		.now_ms = now,
	};
	pc_failover_result_t r;
	cr_assert_eq(pc_failover_classify(&in, &r), 0);
	return r.retry_after_ms;
}

/* 1994-11-06T08:49:37Z in ms. */
#define T1994 784111777000LL

Test(failover, retry_after_forms)
{
	cr_assert_eq(retry_after("120", NULL, NULL, 0), 120000);
	cr_assert_eq(retry_after(" 7 ", NULL, NULL, 0), 7000);
	cr_assert_eq(retry_after("1.5", NULL, NULL, 0), 1500);
	cr_assert_eq(retry_after("0", NULL, NULL, 0), 0);
	cr_assert_eq(retry_after("120", "250", NULL, 0), 250, "retry-after-ms wins");
	cr_assert_eq(retry_after("3", "abc", NULL, 0), 3000, "a bad retry-after-ms is ignored");
	cr_assert_eq(retry_after("3", "12.5", NULL, 0), 12);
	/* The three HTTP-date forms, 30 s after `now`. */
	int64_t now = T1994 - 30000;
	cr_assert_eq(retry_after("Sun, 06 Nov 1994 08:49:37 GMT", NULL, NULL, now), 30000);
	cr_assert_eq(retry_after("Sunday, 06-Nov-94 08:49:37 GMT", NULL, NULL, now), 30000);
	cr_assert_eq(retry_after("Sun Nov  6 08:49:37 1994", NULL, NULL, now), 30000);
	/* In the past, or with no clock given. */
	cr_assert_eq(retry_after("Sun, 06 Nov 1994 08:49:37 GMT", NULL, NULL, T1994 + 1000), 0);
	cr_assert_eq(retry_after("Sun, 06 Nov 1994 08:49:37 GMT", NULL, NULL, 0), 0);
	/* Garbage and huge values. */
	cr_assert_eq(retry_after("soon", NULL, NULL, now), 0);
	cr_assert_eq(retry_after("-5", NULL, NULL, now), 0);
	cr_assert_eq(retry_after("99999999999999999999999", NULL, NULL, 0),
		     PC_FAILOVER_RETRY_AFTER_MAX_MS);
	cr_assert_eq(retry_after(NULL, "99999999999999999999999", NULL, 0),
		     PC_FAILOVER_RETRY_AFTER_MAX_MS);
	cr_assert_eq(retry_after("Sun, 06 Nov 2994 08:49:37 GMT", NULL, NULL, now),
		     PC_FAILOVER_RETRY_AFTER_MAX_MS);
}

Test(failover, retry_after_from_the_body)
{
	cr_assert_eq(retry_after(NULL, NULL,
				 "Rate limit reached for gpt-4o on tokens per min (TPM): Limit 30000. "
				 "Please try again in 1.898s.",
				 0),
		     1898);
	cr_assert_eq(retry_after(NULL, NULL, "Please try again in 6ms.", 0), 6);
	cr_assert_eq(retry_after(NULL, NULL, "retry after 20 seconds", 0), 20000);
	cr_assert_eq(retry_after(NULL, NULL, "Retry-After: 5", 0), 5000);
	cr_assert_eq(retry_after(NULL, NULL, "please retry in 2 minutes", 0), 120000);
	cr_assert_eq(retry_after(NULL, NULL, "Please retry in 46.395283244s.", 0), 46395);
	cr_assert_eq(retry_after(NULL, NULL, "try again in a moment", 0), 0);
	cr_assert_eq(retry_after("9", NULL, "try again in 1s", 0), 9000, "headers win");
}

Test(failover, parse_retry_after_directly)
{
	uint64_t ms = 1;
	cr_assert_eq(pc_failover_parse_retry_after("42", 0, &ms), 0);
	cr_assert_eq(ms, 42000);
	cr_assert_eq(pc_failover_parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", T1994 - 1, &ms), 0);
	cr_assert_eq(ms, 1);
	cr_assert_eq(pc_failover_parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", 0, &ms),
		     PC_EINVAL);
	cr_assert_eq(pc_failover_parse_retry_after("Sun, 32 Nov 1994 08:49:37 GMT", T1994, &ms),
		     PC_EINVAL);
	cr_assert_eq(pc_failover_parse_retry_after("Sun, 06 Foo 1994 08:49:37 GMT", T1994, &ms),
		     PC_EINVAL);
	cr_assert_eq(pc_failover_parse_retry_after("Sun, 06 Nov 1994 25:49:37 GMT", T1994, &ms),
		     PC_EINVAL);
	cr_assert_eq(pc_failover_parse_retry_after("", 0, &ms), PC_EINVAL);
	cr_assert_eq(pc_failover_parse_retry_after("1e3", 0, &ms), PC_EINVAL);
	cr_assert_eq(pc_failover_parse_retry_after(NULL, 0, &ms), PC_EINVAL);
	cr_assert_eq(pc_failover_parse_retry_after("1", 0, NULL), PC_EINVAL);
	/* Leap-year arithmetic: 2024-02-29 exists, and is one day before 03-01. */
	uint64_t a = 0, b = 0;
	int64_t now = 1709164800000LL - 1000; /* 2024-02-29T00:00:00Z less 1 s */
	cr_assert_eq(pc_failover_parse_retry_after("Thu, 29 Feb 2024 00:00:00 GMT", now, &a), 0);
	cr_assert_eq(pc_failover_parse_retry_after("Fri, 01 Mar 2024 00:00:00 GMT", now, &b), 0);
	cr_assert_eq(a, 1000);
	cr_assert_eq(b - a, 86400000);
}

Test(failover, more_retry_after_shapes)
{
	cr_assert_eq(retry_after(NULL, NULL, "Retry-After: in 5s", 0), 5000);
	cr_assert_eq(retry_after(NULL, NULL, "retry after 250 milliseconds", 0), 250);
	cr_assert_eq(retry_after(NULL, NULL, "try again in 1h", 0), 3600000);
	uint64_t ms;
	cr_assert_eq(pc_failover_parse_retry_after("Sun, 06 Nov 1994 8:49:37 GMT", T1994, &ms),
		     PC_EINVAL, "a one-digit hour is not an HTTP-date");
	cr_assert_eq(pc_failover_parse_retry_after("Sun, 06 Nov 19945 08:49:37 GMT", T1994, &ms),
		     PC_EINVAL);
	cr_assert_eq(pc_failover_parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT extra", T1994 - 5, &ms),
		     0, "unknown words are skipped");
	cr_assert_eq(ms, 5);
}

Test(failover, status_404_with_revoked_key)
{
	EXPECT_TEXT(404, "API key revoked", PC_FAILOVER_AUTH_PERMANENT);
}

/* ---- robustness ---- */

Test(failover, bad_arguments)
{
	pc_failover_input_t in = {0};
	pc_failover_result_t r;
	cr_assert_eq(pc_failover_classify(NULL, &r), PC_EINVAL);
	cr_assert_eq(pc_failover_classify(&in, NULL), PC_EINVAL);
	in.body_len = 5;
	cr_assert_eq(pc_failover_classify(&in, &r), PC_EINVAL);
	/* Statuses outside 100..599 are ignored. */
	EXPECT_TEXT(-5, NULL, PC_FAILOVER_EMPTY_RESPONSE);
	EXPECT_TEXT(99999, NULL, PC_FAILOVER_EMPTY_RESPONSE);
	EXPECT_TEXT(99999, "rate limit", PC_FAILOVER_RATE_LIMIT);
}

Test(failover, body_is_length_bounded)
{
	/* Not NUL-terminated: the phrase after body_len is not seen. */
	const char buf[] = "garbage!rate limit";
	pc_failover_input_t in = {.body = buf, .body_len = 8};
	pc_failover_result_t r;
	cr_assert_eq(pc_failover_classify(&in, &r), 0);
	EXPECT(r, PC_FAILOVER_UNCLASSIFIED);
	in.body_len = sizeof(buf) - 1;
	cr_assert_eq(pc_failover_classify(&in, &r), 0);
	EXPECT(r, PC_FAILOVER_RATE_LIMIT);
	/* Embedded NULs do not hide what follows. */
	const char nul[] = "x\0\0rate limit";
	in.body = nul;
	in.body_len = sizeof(nul) - 1;
	cr_assert_eq(pc_failover_classify(&in, &r), 0);
	EXPECT(r, PC_FAILOVER_RATE_LIMIT);
}

Test(failover, huge_and_hostile_bodies)
{
	size_t n = (size_t)4 << 20;
	char *big = malloc(n + 1);
	cr_assert(big);
	memset(big, 'a', n);
	big[n] = 0;
	/* Past the scan window: not seen. */
	memcpy(big + n - 20, "prompt is too long", 18);
	pc_failover_input_t in = {.status = 0, .body = big, .body_len = n};
	pc_failover_result_t r;
	cr_assert_eq(pc_failover_classify(&in, &r), 0);
	EXPECT(r, PC_FAILOVER_UNCLASSIFIED);
	/* Inside it: seen. */
	memcpy(big + 100, "prompt is too long", 18);
	cr_assert_eq(pc_failover_classify(&in, &r), 0);
	EXPECT(r, PC_FAILOVER_CONTEXT_OVERFLOW);

	/* Deep nesting: cJSON's nesting limit refuses it, the text is still read. */
	memset(big, '[', n);
	cr_assert_eq(pc_failover_classify(&in, &r), 0);
	EXPECT(r, PC_FAILOVER_UNCLASSIFIED);
	size_t m = 200000;
	for (size_t i = 0; i < m; i++)
		big[i] = '{';
	in.body_len = m;
	cr_assert_eq(pc_failover_classify(&in, &r), 0);

	/* Truncated and odd JSON shapes. */
	static const char *const shapes[] = {
		"{\"error\":", "{\"error\":{\"message\":5,\"type\":[],\"code\":1e300}}",
		"{\"error\":{\"code\":-7}}", "[]", "[1,2]", "{\"error\":null}", "\"rate limit\"",
		"{\"message\":{\"nested\":true}}", "{\"detail\":\"Too Many Requests\"}",
		"{\"error\":{\"metadata\":{\"raw\":7}}}", "{\"error\":\"overloaded\"}",
	};
	for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
		in.body = shapes[i];
		in.body_len = strlen(shapes[i]);
		cr_assert_eq(pc_failover_classify(&in, &r), 0);
	}
	EXPECT_TEXT(0, "{\"detail\":\"Too Many Requests\"}", PC_FAILOVER_RATE_LIMIT);

	/* A decoded message is searched only so far, like the body. */
	size_t ml = 20000;
	char *msg = malloc(ml + 64);
	cr_assert(msg);
	strcpy(msg, "{\"error\":{\"message\":\"");
	size_t at = strlen(msg);
	memset(msg + at, 'x', ml);
	memcpy(msg + at + 18000, "prompt is too long", 18);
	strcpy(msg + at + ml, "\"}}");
	in.body = msg;
	in.body_len = strlen(msg);
	cr_assert_eq(pc_failover_classify(&in, &r), 0);
	EXPECT(r, PC_FAILOVER_UNCLASSIFIED);
	memcpy(msg + at + 1000, "prompt is too long", 18);
	cr_assert_eq(pc_failover_classify(&in, &r), 0);
	EXPECT(r, PC_FAILOVER_CONTEXT_OVERFLOW);
	free(msg);
	EXPECT_TEXT(0, "{\"error\":\"overloaded\"}", PC_FAILOVER_OVERLOADED);
	free(big);
	ASSERT_NO_LEAKS();
}

static long oom_left = -1;

static void *oom_malloc(size_t size)
{
	if (oom_left == 0)
		return NULL;
	if (oom_left > 0)
		oom_left--;
	return malloc(size);
}

Test(failover, json_parse_without_memory)
{
	/* With cJSON out of memory the body is still read as text. */
	cJSON_Hooks h = {.malloc_fn = oom_malloc, .free_fn = free};
	cJSON_InitHooks(&h);
	for (long n = 0; n < 12; n++) {
		oom_left = n;
		pc_failover_result_t r = classify(0, "{\"type\":\"error\",\"error\":{\"type\":"
						     "\"overloaded_error\",\"message\":\"Overloaded\"}}");
		EXPECT(r, PC_FAILOVER_OVERLOADED);
	}
	oom_left = -1;
	cJSON_InitHooks(NULL);
	ASSERT_NO_LEAKS();
}

Test(failover, random_bytes_never_crash)
{
	uint64_t x = 0x9E3779B97F4A7C15ull;
	static const char *const pieces[] = {
		"rate limit", "402", "{\"error\":{", "\"type\":\"", "overloaded_error", "\"}", "}",
		"tpm", "429", "prompt is too long", "retry after ", "1.5", "ms", "<html>", "\\u0000",
		"http 402 ", "Sun, 06 Nov 1994 08:49:37 GMT", "\xff\xfe", " ", "\"code\":402",
	};
	char buf[512];
	for (int it = 0; it < 20000; it++) {
		size_t len = 0;
		while (len < sizeof(buf) - 40) {
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			if (x % 3 == 0)
				break;
			if (x % 2) {
				const char *p = pieces[(x >> 8) % (sizeof(pieces) / sizeof(pieces[0]))];
				size_t pl = strlen(p);
				memcpy(buf + len, p, pl);
				len += pl;
			} else {
				buf[len++] = (char)(x >> 16);
			}
		}
		pc_failover_input_t in = {
			.status = (int)((x >> 20) % 700) - 50,
			.body = buf,
			.body_len = len,
			.transport = (pc_transport_error_t)((x >> 30) % (PC_TRANSPORT_COUNT + 2)),
			.retry_after = (x >> 40) % 2 ? buf : NULL,
			.provider = (x >> 41) % 2 ? "openrouter" : NULL,
			.now_ms = (int64_t)((x >> 42) % 2) * T1994,
		};
		buf[len] = 0;
		pc_failover_result_t r;
		cr_assert_eq(pc_failover_classify(&in, &r), 0);
		cr_assert_lt((unsigned)r.reason, PC_FAILOVER_REASON_COUNT);
		cr_assert_leq(r.retry_after_ms, PC_FAILOVER_RETRY_AFTER_MAX_MS);
		cr_assert(r.detail);
		cr_assert(!(r.failover && (r.compact || r.aborted)));
	}
	ASSERT_NO_LEAKS();
}
