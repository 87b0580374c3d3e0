/*
 * The live fault matrix (spec §1.3, §1.7-§1.10, §1.14, §1.18): every way a
 * provider reports a failure that OpenClaw's own sources record, through the
 * whole loop against the embedded mock LLM, in both wire formats
 * (openai-completions, anthropic-messages), and the way it is reported: a
 * status with an error body, retry-after headers, or an error inside the SSE
 * stream.
 *
 * One row per fixture; each row runs once per wire format it has a script
 * for. The fixtures are what providers send as OpenClaw's files record them
 * (`source`), never Pincer's classifier patterns. Each case checks the run's
 * end (phase, errorKind), its attempts trace (result:reason, status,
 * profile, candidate, and the delayMs the run decided before the next
 * attempt), the payload text where the spec gives it, livenessState and the
 * number of requests the provider saw. Waits are shortened by the test-only
 * divisor (pc__agent_test_delay_divisor), which never changes delayMs.
 *
 * The table is also in docs/fault-matrix.md.
 */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>

#include <time.h>

#include "agent_harness.h"

TestSuite(fault_matrix, .timeout = 60);

/* Real waits are divided by this: a 30 s step takes 30 ms. */
#define DIVISOR 1000u

/* ---- fixtures: what providers send (the OpenClaw file is each row's `source`) ---- */

/* src/agents/failover/failover-classification.rate-limit-overload.cases.ts:
 * retry-resource-exhausted-quota and retry-openai-resource-exhausted, short
 * windows by their "per minute" (rate-limit-window.test.ts) */
#define QUOTA_RPM "429 RESOURCE_EXHAUSTED: Quota exceeded for quota metric requests per minute; please retry your request"
#define OPENAI_QUOTA_RPM "OpenAI API error (429): RESOURCE_EXHAUSTED: Quota exceeded for requests per minute; please retry your request"
/* src/agents/failover-error.test.ts OPENAI_RATE_LIMIT_MESSAGE: no per-minute
 * word of the short-window list, so only a retry-after makes it short. */
#define OPENAI_RPM "Rate limit reached for gpt-4.1-mini in organization org_test on requests per min. Limit: 3.000000 / min. Current: 3.000000 / min."
/* src/agents/failover-error.test.ts ZHIPUAI_WEEKLY_MONTHLY_LIMIT_EXHAUSTED_MESSAGE */
#define ZHIPU_WEEKLY "LLM error 1310: Weekly/Monthly Limit Exhausted. Your limit will reset at 2026-03-06 22:19:54 (request_id: 20260303141547610b7f574d1b44cb)"
/* src/agents/failover-error.test.ts ANTHROPIC_OVERLOADED_PAYLOAD's message */
#define ANTHROPIC_OVERLOADED "Overloaded"
/* src/agents/failover-error.test.ts: a 503 whose payload is clearly overloaded */
#define OPENAI_OVERLOADED "The model is overloaded. Please try later"
/* src/agents/failover-error.test.ts OPENROUTER_CREDITS_MESSAGE (402) */
#define OPENROUTER_CREDITS "Payment Required: insufficient credits"
/* src/agents/failover-error.test.ts INSUFFICIENT_QUOTA_PAYLOAD (400, #23440) */
#define INSUFFICIENT_QUOTA "Your account has insufficient quota balance to run this request."
/* src/agents/failover-error.test.ts: 401 with permanent auth wording */
#define PERMISSION_ORG "permission_error: OAuth authentication is currently not allowed for this organization."
/* src/agents/failover-error.test.ts BEDROCK_SERVICE_UNAVAILABLE_MESSAGE (503 -> timeout) */
#define SERVICE_UNAVAILABLE "ServiceUnavailable: The service is temporarily unable to handle the request."
/* src/agents/failover-error.test.ts "infers format errors from error messages" */
#define BAD_FORMAT "invalid request format: messages.1.content.1.tool_use.id"
/* src/agents/pi-embedded-helpers/provider-error-patterns.test.ts "returns null for unmatched errors" */
#define UNMATCHED "some random error"

/* The spec's user-facing texts (§1.10, §1.7 step 7d, §1.7 step 26). */
#define MSG_OVERLOADED "The AI service is temporarily overloaded. Please try again in a moment."
#define MSG_RATE_LIMITED "The AI service is temporarily rate-limited. Please try again in a moment."
#define MSG_OVERFLOW                                                                               \
	"Context overflow: prompt too large for the model. Try /reset (or /new) to start a fresh "  \
	"session, or use a larger-context model."
#define MSG_NO_RESPONSE "⚠️ Agent couldn't generate a response. Please try again."

/* Scenario pieces. */
#define ERR(status, msg) "{\"kind\":\"error\",\"status\":" #status ",\"message\":\"" msg "\"}"
#define FINE "{\"text\":\"fine\"}"
#define LOOP(step) "{\"then\":\"loop\",\"steps\":[" step "]}"
#define SEQ2(a, b) "{\"steps\":[" a "," b "]}"
#define SEQ3(a, b, c) "{\"steps\":[" a "," b "," c "]}"
#define SEQ6(a, b, c, d, e, f) "{\"steps\":[" a "," b "," c "," d "," e "," f "]}"

/* Ten replays of a chain whose primary is skipped and fallback fails. */
#define TIMES10(x) x x x x x x x x x x
#define REPLAYS10 TIMES10(",fallback_model:overloaded,error:overloaded")
#define REPLAY_STATUSES10 TIMES10(",503,503")
#define REPLAY_PROFILES9 ",1,0,1,0,1,0,1,0,1,0,1,0,1,0,1,0,1,0"
#define REPLAY_CANDIDATES10 TIMES10(",0,1")

enum { API_OPENAI, API_ANTHROPIC, API_COUNT };
static const char *const api_names[API_COUNT] = {"openai-completions", "anthropic-messages"};

typedef struct fault_row {
	const char *name;
	const char *spec;   /* the rule it checks */
	const char *source; /* the OpenClaw file its fixture comes from */
	/* the mock's scenario per wire format; NULL: no such case */
	const char *scenario[API_COUNT];
	bool fallback;     /* a fallback model fb/m2 is configured */
	const char *extra; /* more of the configuration's top level, "" or ",..." */
	const char *thinking; /* agents.defaults.thinking, NULL: none */
	/* expectations */
	const char *phase;      /* "end" / "error" */
	const char *error_kind; /* errorKind, NULL: none */
	const char *trace;      /* "result:reason,..." (silent retries add no entry) */
	const char *statuses;   /* each entry's status, "0" when none */
	const char *profiles;   /* each entry's profile index */
	const char *candidates; /* each entry's candidate index */
	const char *delays;     /* each entry's delayMs */
	const char *payload;    /* the first payload's text exactly, NULL: unchecked */
	const char *payload_has; /* ... or a part of it */
	const char *liveness;
	int requests;           /* requests the provider saw */
	/* each request's thinking: OpenAI's reasoning_effort, Anthropic's
	 * thinking on/off ("off" when absent); NULL: unchecked */
	const char *thinking_seq[API_COUNT];
	/* the first entry's delayMs lies in [lo, hi] (a wait from a clock,
	 * e.g. an HTTP-date retry-after); `delays` is then unchecked */
	uint64_t first_delay_lo, first_delay_hi;
} fault_row_t;

static const fault_row_t rows[] = {
	/* ---- rate_limit, short window (§1.10 same-model retry, 10/20/30 s) ---- */
	{
		.name = "rate_limit short window, retry-after header",
		.spec = "§1.10 resolveShortWindowRateLimitRetry: retry-after <= 60 s; delay max(10 s, retry-after)",
		.source = "src/agents/failover-error.test.ts (OPENAI_RATE_LIMIT_MESSAGE)",
		.scenario = {
			SEQ2("{\"kind\":\"error\",\"status\":429,\"retry_after\":20,\"message\":\"" OPENAI_RPM "\"}", FINE),
			SEQ2("{\"kind\":\"error\",\"status\":429,\"retry_after\":20,\"message\":\"" OPENAI_RPM "\"}", FINE),
		},
		.phase = "end", .trace = "same_model_rate_limit:rate_limit,success",
		.statuses = "429,0", .profiles = "0,0", .candidates = "0,0", .delays = "20000,0",
		.payload = "fine", .liveness = "working", .requests = 2,
	},
	{
		.name = "rate_limit short window, retry-after-ms header",
		.spec = "§1.10 retry-after-ms wins over retry-after; delay max(10 s, 12 s)",
		.source = "src/agents/failover-error.test.ts (OPENAI_RATE_LIMIT_MESSAGE)",
		.scenario = {
			SEQ2("{\"kind\":\"error\",\"status\":429,\"retry_after\":50,\"headers\":{\"retry-after-ms\":\"12000\"},\"message\":\"" OPENAI_RPM "\"}", FINE),
			SEQ2("{\"kind\":\"error\",\"status\":429,\"retry_after\":50,\"headers\":{\"retry-after-ms\":\"12000\"},\"message\":\"" OPENAI_RPM "\"}", FINE),
		},
		.phase = "end", .trace = "same_model_rate_limit:rate_limit,success",
		.statuses = "429,0", .profiles = "0,0", .candidates = "0,0", .delays = "12000,0",
		.payload = "fine", .liveness = "working", .requests = 2,
	},
	{
		.name = "rate_limit short window, retry-after as an HTTP-date",
		.spec = "§1.10 retry-after may be an HTTP date; 20 s ahead is a short window, waited in full",
		.source = "src/agents/failover-error.test.ts (OPENAI_RATE_LIMIT_MESSAGE); the date form is RFC 9110's",
		.scenario = {
			SEQ2("{\"kind\":\"error\",\"status\":429,\"headers\":{\"retry-after\":\"@DATE+20@\"},\"message\":\"" OPENAI_RPM "\"}", FINE),
			SEQ2("{\"kind\":\"error\",\"status\":429,\"headers\":{\"retry-after\":\"@DATE+20@\"},\"message\":\"" OPENAI_RPM "\"}", FINE),
		},
		.phase = "end", .trace = "same_model_rate_limit:rate_limit,success",
		.statuses = "429,0", .profiles = "0,0", .candidates = "0,0",
		.first_delay_lo = 17000, .first_delay_hi = 21000,
		.payload = "fine", .liveness = "working", .requests = 2,
	},
	{
		.name = "rate_limit short window by wording (requests per minute), in the body",
		.spec = "§1.10 short-window words; first step 10 s",
		.source = "src/agents/failover/failover-classification.rate-limit-overload.cases.ts (retry-resource-exhausted-quota, retry-openai-resource-exhausted)",
		.scenario = {
			SEQ2(ERR(429, OPENAI_QUOTA_RPM), FINE),
			SEQ2("{\"kind\":\"error\",\"status\":429,\"type\":\"rate_limit_error\",\"message\":\"" QUOTA_RPM "\"}", FINE),
		},
		.phase = "end", .trace = "same_model_rate_limit:rate_limit,success",
		.statuses = "429,0", .profiles = "0,0", .candidates = "0,0", .delays = "10000,0",
		.payload = "fine", .liveness = "working", .requests = 2,
	},
	{
		.name = "rate_limit short window inside the stream",
		.spec = "§1.10 an in-stream rate-limit error is classified from its text",
		.source = "src/agents/failover/failover-classification.rate-limit-overload.cases.ts (retry-resource-exhausted-quota, retry-openai-resource-exhausted)",
		.scenario = {
			SEQ2("{\"text\":\"Working on it\",\"error_after\":1,\"type\":\"tokens\",\"code\":\"rate_limit_exceeded\",\"message\":\"" OPENAI_QUOTA_RPM "\"}", FINE),
			SEQ2("{\"text\":\"Working on it\",\"error_after\":1,\"type\":\"rate_limit_error\",\"message\":\"" QUOTA_RPM "\"}", FINE),
		},
		.phase = "end", .trace = "same_model_rate_limit:rate_limit,success",
		.statuses = "429,0", .profiles = "0,0", .candidates = "0,0", .delays = "10000,0",
		.payload = "fine", .liveness = "working", .requests = 2,
	},
	{
		.name = "rate_limit: consecutiveSameModelRateLimitRetries caps at 3, then rateLimitProfileRotations",
		.spec = "§1.3 MAX_SAME_MODEL_RATE_LIMIT_RETRIES = 3 (10/20/30 s); §1.10 then rotate, then fallback with its text",
		.source = "src/agents/failover/failover-classification.rate-limit-overload.cases.ts (retry-resource-exhausted-quota, retry-openai-resource-exhausted)",
		.scenario = {
			SEQ6(ERR(429, QUOTA_RPM), ERR(429, QUOTA_RPM),
			    ERR(429, QUOTA_RPM), ERR(429, QUOTA_RPM),
			    ERR(429, QUOTA_RPM), FINE),
			SEQ6("{\"kind\":\"error\",\"status\":429,\"type\":\"rate_limit_error\",\"message\":\"" QUOTA_RPM "\"}", "{\"kind\":\"error\",\"status\":429,\"type\":\"rate_limit_error\",\"message\":\"" QUOTA_RPM "\"}",
			    "{\"kind\":\"error\",\"status\":429,\"type\":\"rate_limit_error\",\"message\":\"" QUOTA_RPM "\"}", "{\"kind\":\"error\",\"status\":429,\"type\":\"rate_limit_error\",\"message\":\"" QUOTA_RPM "\"}",
			    "{\"kind\":\"error\",\"status\":429,\"type\":\"rate_limit_error\",\"message\":\"" QUOTA_RPM "\"}", FINE),
		},
		.fallback = true,
		.phase = "end",
		.trace = "same_model_rate_limit:rate_limit,same_model_rate_limit:rate_limit,same_model_rate_limit:rate_limit,"
			 "rotate_profile:rate_limit,fallback_model:rate_limit,success",
		.statuses = "429,429,429,429,429,0", .profiles = "0,0,0,0,1,0", .candidates = "0,0,0,0,0,1",
		.delays = "10000,20000,30000,0,0,0", .payload = "fine", .liveness = "working", .requests = 6,
	},
	{
		.name = "rate_limit: rate-limit headers are not a retry-after",
		.spec = "§1.10 only retry-after / retry-after-ms make a short window; x-ratelimit-* / anthropic-ratelimit-* do not",
		.source = "src/agents/failover-error.test.ts (OPENAI_RATE_LIMIT_MESSAGE); headers: the providers' documented rate-limit headers",
		.scenario = {
			SEQ3("{\"kind\":\"error\",\"status\":429,\"headers\":{\"x-ratelimit-limit-requests\":\"3\",\"x-ratelimit-remaining-requests\":\"0\",\"x-ratelimit-reset-requests\":\"20s\"},\"message\":\"" OPENAI_RPM "\"}",
			     "{\"kind\":\"error\",\"status\":429,\"headers\":{\"x-ratelimit-remaining-requests\":\"0\",\"x-ratelimit-reset-requests\":\"20s\"},\"message\":\"" OPENAI_RPM "\"}", FINE),
			SEQ3("{\"kind\":\"error\",\"status\":429,\"headers\":{\"anthropic-ratelimit-requests-remaining\":\"0\",\"anthropic-ratelimit-requests-reset\":\"2026-01-01T00:00:20Z\"},\"message\":\"" OPENAI_RPM "\"}",
			     "{\"kind\":\"error\",\"status\":429,\"headers\":{\"anthropic-ratelimit-requests-remaining\":\"0\"},\"message\":\"" OPENAI_RPM "\"}", FINE),
		},
		.fallback = true,
		.phase = "end", .trace = "rotate_profile:rate_limit,fallback_model:rate_limit,success",
		.statuses = "429,429,0", .profiles = "0,1,0", .candidates = "0,0,1", .delays = "0,0,0",
		.payload = "fine", .liveness = "working", .requests = 3,
	},
	{
		.name = "rate_limit: the same-model counter starts over after a rotation",
		.spec = "§1.7 step 16: consecutiveSameModelRateLimitRetries resets on any other retry (here an overload rotation)",
		.source = "src/agents/failover/failover-classification.rate-limit-overload.cases.ts (retry-resource-exhausted-quota); src/agents/failover-error.test.ts (ANTHROPIC_OVERLOADED_PAYLOAD, 503 'The model is overloaded')",
		.scenario = {
			SEQ3(ERR(429, QUOTA_RPM), ERR(429, QUOTA_RPM),
			     "{\"kind\":\"error\",\"status\":503,\"message\":\"" OPENAI_OVERLOADED "\"}," ERR(429, QUOTA_RPM) "," FINE),
			SEQ3("{\"kind\":\"error\",\"status\":429,\"type\":\"rate_limit_error\",\"message\":\"" QUOTA_RPM "\"}", "{\"kind\":\"error\",\"status\":429,\"type\":\"rate_limit_error\",\"message\":\"" QUOTA_RPM "\"}",
			     "{\"kind\":\"error\",\"status\":529},{\"kind\":\"error\",\"status\":429}," FINE),
		},
		.phase = "end",
		.trace = "same_model_rate_limit:rate_limit,same_model_rate_limit:rate_limit,rotate_profile:overloaded,"
			 "same_model_rate_limit:rate_limit,success",
		.statuses = "429,429,503,429,0", .profiles = "0,0,0,1,1", .candidates = "0,0,0,0,0",
		.delays = "10000,20000,0,10000,0", .payload = "fine", .liveness = "working", .requests = 5,
	},
	/* ---- rate_limit, long window ---- */
	{
		.name = "rate_limit long window (weekly/monthly): rotate at once, then fallback",
		.spec = "§1.10 long-window words: no same-model wait; rateLimitProfileRotations > 1 -> fallback",
		.source = "src/agents/failover-error.test.ts (ZHIPUAI_WEEKLY_MONTHLY_LIMIT_EXHAUSTED_MESSAGE)",
		.scenario = {
			SEQ3(ERR(429, ZHIPU_WEEKLY), ERR(429, ZHIPU_WEEKLY), FINE),
			SEQ3(ERR(429, ZHIPU_WEEKLY), ERR(429, ZHIPU_WEEKLY), FINE),
		},
		.fallback = true,
		.phase = "end", .trace = "rotate_profile:rate_limit,fallback_model:rate_limit,success",
		.statuses = "429,429,0", .profiles = "0,1,0", .candidates = "0,0,1", .delays = "0,0,0",
		.payload = "fine", .liveness = "working", .requests = 3,
	},
	{
		.name = "rate_limit long window everywhere: the escalation's own text for the primary",
		.spec = "§1.10 rateLimitProfileRotations > 1 -> FailoverError 'The AI service is temporarily rate-limited...'; §1.12 summary",
		.source = "src/agents/failover-error.test.ts (ZHIPUAI_WEEKLY_MONTHLY_LIMIT_EXHAUSTED_MESSAGE)",
		.scenario = {
			LOOP(ERR(429, ZHIPU_WEEKLY)),
			LOOP(ERR(429, ZHIPU_WEEKLY)),
		},
		.fallback = true,
		.phase = "error", .error_kind = "failover",
		.trace = "rotate_profile:rate_limit,fallback_model:rate_limit,error:rate_limit",
		.statuses = "429,429,429", .profiles = "0,1,0", .candidates = "0,0,1", .delays = "0,0,0",
		.payload_has = "mock/m1: " MSG_RATE_LIMITED " (rate_limit) | fb/m2: 429 " ZHIPU_WEEKLY,
		.liveness = "blocked", .requests = 3,
	},
	{
		.name = "rate_limit long window, retry-after over 60 s",
		.spec = "§1.10 retry-after > 60 s is not a short window; no fallback: the spec's rate-limited text",
		.source = "src/agents/failover-error.test.ts (OPENAI_RATE_LIMIT_MESSAGE)",
		.scenario = {
			LOOP("{\"kind\":\"error\",\"status\":429,\"retry_after\":120,\"message\":\"" OPENAI_RPM "\"}"),
			LOOP("{\"kind\":\"error\",\"status\":429,\"retry_after\":120,\"message\":\"" OPENAI_RPM "\"}"),
		},
		.phase = "error", .error_kind = "failover",
		.trace = "rotate_profile:rate_limit,error:rate_limit",
		.statuses = "429,429", .profiles = "0,1", .candidates = "0,0", .delays = "0,0",
		.payload_has = "requests per min", .liveness = "blocked", .requests = 2,
	},
	/* ---- overloaded (§1.10 overloadProfileRotations, §1.18 overloadedBackoffMs) ---- */
	{
		.name = "overloaded: one rotation, then fallback; backoff recorded",
		.spec = "§1.10 overloadProfileRotations > 1 -> FailoverError 503; §1.18 overloadedBackoffMs before each move",
		.source = "src/agents/failover-error.test.ts (ANTHROPIC_OVERLOADED_PAYLOAD; 503 'The model is overloaded')",
		.scenario = {
			SEQ3(ERR(503, OPENAI_OVERLOADED), ERR(503, OPENAI_OVERLOADED), FINE),
			SEQ3(ERR(529, ANTHROPIC_OVERLOADED), ERR(529, ANTHROPIC_OVERLOADED), FINE),
		},
		.fallback = true, .extra = ",\"auth\":{\"cooldowns\":{\"overloadedBackoffMs\":2000}}",
		.phase = "end", .trace = "rotate_profile:overloaded,fallback_model:overloaded,success",
		.statuses = "503,503,0", .profiles = "0,1,0", .candidates = "0,0,1", .delays = "2000,2000,0",
		.payload = "fine", .liveness = "working", .requests = 3,
	},
	{
		.name = "overloaded everywhere: the chain replayed 10 times, 2.5 s doubling to 30 s, then the spec's text",
		.spec = "§1.12 reply runner MAX_OVERLOAD_RETRIES 10, OVERLOAD_RETRY_BASE/MAX_DELAY_MS; §1.18; §1.10 escalation text",
		.source = "src/auto-reply/reply/agent-runner-error-handler.ts (isPureOverloadSummary); "
			  "src/agents/failover-error.test.ts (ANTHROPIC_OVERLOADED_PAYLOAD)",
		.scenario = {
			LOOP(ERR(503, OPENAI_OVERLOADED)),
			LOOP(ERR(529, ANTHROPIC_OVERLOADED)),
		},
		.fallback = true, .extra = ",\"auth\":{\"cooldowns\":{\"overloadedBackoffMs\":2000}}",
		.phase = "error", .error_kind = "failover",
		/* the first pass rotates then falls back; the first replay probes
		 * the cooled-down primary (profile 0, whose cooldown ends first),
		 * later ones skip it (the 30 s probe throttle is closed, and its
		 * soonest profile is now 1); every pass probes the fallback once */
		.trace = "rotate_profile:overloaded,fallback_model:overloaded,error:overloaded" REPLAYS10,
		.statuses = "503,503,503" REPLAY_STATUSES10, .profiles = "0,1,0,0,0" REPLAY_PROFILES9,
		.candidates = "0,0,1" REPLAY_CANDIDATES10,
		.delays = "2000,2000,2500,2000,5000,0,10000,0,20000,0,30000,0,30000,0,30000,0,30000,0,30000,0,30000,0,0",
		.payload_has = MSG_OVERLOADED, .liveness = "blocked", .requests = 14,
	},
	{
		.name = "overloaded inside the stream after text",
		.spec = "§1.8 overloaded_error event; §1.10 rotation then fallback",
		.source = "src/agents/failover-error.test.ts (ANTHROPIC_OVERLOADED_PAYLOAD)",
		.scenario = {
			NULL,
			SEQ3("{\"text\":\"Let me think\",\"error_after\":1}", "{\"text\":\"Let me think\",\"error_after\":1}", FINE),
		},
		.fallback = true,
		.phase = "end", .trace = "rotate_profile:overloaded,fallback_model:overloaded,success",
		.statuses = "503,503,0", .profiles = "0,1,0", .candidates = "0,0,1", .delays = "0,0,0",
		.payload = "fine", .liveness = "working", .requests = 3,
	},
	/* ---- billing ---- */
	{
		.name = "billing 402: rotate, then fallback",
		.spec = "§1.8 billing (402); §1.9 rotate_profile then fallback_model",
		.source = "src/agents/failover-error.test.ts (OPENROUTER_CREDITS_MESSAGE)",
		.scenario = {
			SEQ3(ERR(402, OPENROUTER_CREDITS), ERR(402, OPENROUTER_CREDITS), FINE),
			SEQ3(ERR(402, OPENROUTER_CREDITS), ERR(402, OPENROUTER_CREDITS), FINE),
		},
		.fallback = true,
		.phase = "end", .trace = "rotate_profile:billing,fallback_model:billing,success",
		.statuses = "402,402,0", .profiles = "0,1,0", .candidates = "0,0,1", .delays = "0,0,0",
		.payload = "fine", .liveness = "working", .requests = 3,
	},
	{
		.name = "billing: insufficient_quota under HTTP 400 is billing, not format",
		.spec = "§1.8 billing wording beats the 400 status",
		.source = "src/agents/failover-error.test.ts (INSUFFICIENT_QUOTA_PAYLOAD, issue #23440)",
		.scenario = {
			SEQ3("{\"kind\":\"error\",\"status\":400,\"type\":\"insufficient_quota\",\"code\":\"insufficient_quota\",\"message\":\"" INSUFFICIENT_QUOTA "\"}",
			    "{\"kind\":\"error\",\"status\":400,\"type\":\"insufficient_quota\",\"code\":\"insufficient_quota\",\"message\":\"" INSUFFICIENT_QUOTA "\"}", FINE),
			SEQ3("{\"kind\":\"error\",\"status\":400,\"type\":\"insufficient_quota\",\"message\":\"" INSUFFICIENT_QUOTA "\"}",
			    "{\"kind\":\"error\",\"status\":400,\"type\":\"insufficient_quota\",\"message\":\"" INSUFFICIENT_QUOTA "\"}", FINE),
		},
		.fallback = true,
		.phase = "end", .trace = "rotate_profile:billing,fallback_model:billing,success",
		.statuses = "402,402,0", .profiles = "0,1,0", .candidates = "0,0,1", .delays = "0,0,0",
		.payload = "fine", .liveness = "working", .requests = 3,
	},
	{
		.name = "billing inside the stream: insufficient_quota error event",
		.spec = "§1.8 billing from the error's type and wording, wherever it arrives",
		.source = "src/agents/failover-error.test.ts (INSUFFICIENT_QUOTA_PAYLOAD, issue #23440)",
		.scenario = {
			SEQ3("{\"text\":\"\",\"error_after\":0,\"type\":\"insufficient_quota\",\"code\":\"insufficient_quota\",\"message\":\"" INSUFFICIENT_QUOTA "\"}",
			     "{\"text\":\"\",\"error_after\":0,\"type\":\"insufficient_quota\",\"code\":\"insufficient_quota\",\"message\":\"" INSUFFICIENT_QUOTA "\"}", FINE),
			SEQ3("{\"text\":\"\",\"error_after\":0,\"type\":\"insufficient_quota\",\"message\":\"" INSUFFICIENT_QUOTA "\"}",
			     "{\"text\":\"\",\"error_after\":0,\"type\":\"insufficient_quota\",\"message\":\"" INSUFFICIENT_QUOTA "\"}", FINE),
		},
		.fallback = true,
		.phase = "end", .trace = "rotate_profile:billing,fallback_model:billing,success",
		.statuses = "402,402,0", .profiles = "0,1,0", .candidates = "0,0,1", .delays = "0,0,0",
		.payload = "fine", .liveness = "working", .requests = 3,
	},
	/* ---- auth / auth_permanent ---- */
	{
		.name = "auth 401 Unauthorized: rotate, then fallback",
		.spec = "§1.8 auth (401)",
		.source = "src/agents/failover-error.test.ts ('401/403 with generic message still returns auth')",
		.scenario = {
			SEQ3(ERR(401, "Unauthorized"), ERR(401, "Unauthorized"), FINE),
			SEQ3(ERR(401, "Unauthorized"), ERR(401, "Unauthorized"), FINE),
		},
		.fallback = true,
		.phase = "end", .trace = "rotate_profile:auth,fallback_model:auth,success",
		.statuses = "401,401,0", .profiles = "0,1,0", .candidates = "0,0,1", .delays = "0,0,0",
		.payload = "fine", .liveness = "working", .requests = 3,
	},
	{
		.name = "auth_permanent: 401 invalid_api_key / 403 permission_error",
		.spec = "§1.8 auth_permanent (403): high-confidence revoked/not-allowed wording",
		.source = "src/agents/failover-error.test.ts ('401 with permanent auth message', '403 permission_error')",
		.scenario = {
			SEQ3(ERR(401, "invalid_api_key"), ERR(401, "invalid_api_key"), FINE),
			SEQ3(ERR(403, PERMISSION_ORG), ERR(403, PERMISSION_ORG), FINE),
		},
		.fallback = true,
		.phase = "end", .trace = "rotate_profile:auth_permanent,fallback_model:auth_permanent,success",
		.statuses = "403,403,0", .profiles = "0,1,0", .candidates = "0,0,1", .delays = "0,0,0",
		.payload = "fine", .liveness = "working", .requests = 3,
	},
	/* ---- server_error / timeout ---- */
	{
		.name = "server_error: a provider-completed finish reason 'error'",
		.spec = "§1.8 server_error: 'Provider finish_reason: error' / 'Unhandled stop reason: error' (500, failover-eligible)",
		.source = "src/agents/failover-error.test.ts ('infers ... from abort/error stop-reason messages')",
		.scenario = {
			SEQ3("{\"text\":\"\",\"finish_reason\":\"error\"}", "{\"text\":\"\",\"finish_reason\":\"error\"}", FINE),
			SEQ3("{\"text\":\"\",\"finish_reason\":\"error\"}", "{\"text\":\"\",\"finish_reason\":\"error\"}", FINE),
		},
		.fallback = true,
		.phase = "end", .trace = "rotate_profile:server_error,fallback_model:server_error,success",
		.statuses = "500,500,0", .profiles = "0,1,0", .candidates = "0,0,1", .delays = "0,0,0",
		.payload = "fine", .liveness = "working", .requests = 3,
	},
	{
		.name = "server_error everywhere: the chain replayed once after 2.5 s, the primary probed",
		.spec = "§1.12 reply runner TRANSIENT_HTTP_RETRY_DELAY_MS, once; §1.12 probe without fallbacks on an open throttle",
		.source = "src/auto-reply/reply/agent-runner-error-handler.ts (isTransientHttp: timeout / server_error); "
			  "src/agents/failover-error.test.ts (stop-reason messages)",
		.scenario = {
			SEQ3("{\"text\":\"\",\"finish_reason\":\"error\"}", "{\"text\":\"\",\"finish_reason\":\"error\"}", FINE),
			SEQ3("{\"text\":\"\",\"finish_reason\":\"error\"}", "{\"text\":\"\",\"finish_reason\":\"error\"}", FINE),
		},
		.phase = "end", .trace = "rotate_profile:server_error,error:server_error,success",
		.statuses = "500,500,0", .profiles = "0,1,0", .candidates = "0,0,0", .delays = "0,2500,0",
		.payload = "fine", .liveness = "working", .requests = 3,
	},
	{
		.name = "timeout: 503 ServiceUnavailable without overload wording",
		.spec = "§1.8 status-only 503 stays conservative: timeout; trace result timeout",
		.source = "src/agents/failover-error.test.ts (BEDROCK_SERVICE_UNAVAILABLE_MESSAGE)",
		.scenario = {
			SEQ3(ERR(503, SERVICE_UNAVAILABLE), ERR(503, SERVICE_UNAVAILABLE), FINE),
			SEQ3("{\"kind\":\"error\",\"status\":503,\"type\":\"api_error\",\"message\":\"" SERVICE_UNAVAILABLE "\"}",
			    "{\"kind\":\"error\",\"status\":503,\"type\":\"api_error\",\"message\":\"" SERVICE_UNAVAILABLE "\"}", FINE),
		},
		.fallback = true,
		.phase = "end", .trace = "timeout:timeout,timeout:timeout,success",
		.statuses = "408,408,0", .profiles = "0,1,0", .candidates = "0,0,1", .delays = "0,0,0",
		.payload = "fine", .liveness = "working", .requests = 3,
	},
	{
		.name = "timeout: Anthropic api_error 'Internal server error' inside the stream",
		.spec = "§1.8 JSON api_error with transient text (internal server error) is timeout",
		.source = "src/agents/pi-embedded-helpers/errors.test.ts ('treats transient 5xx as timeout': 500 internal server error)",
		.scenario = {
			NULL,
			SEQ3("{\"text\":\"Working\",\"error_after\":1,\"type\":\"api_error\",\"message\":\"Internal server error\"}",
			     "{\"text\":\"Working\",\"error_after\":1,\"type\":\"api_error\",\"message\":\"Internal server error\"}", FINE),
		},
		.fallback = true,
		.phase = "end", .trace = "timeout:timeout,timeout:timeout,success",
		.statuses = "408,408,0", .profiles = "0,1,0", .candidates = "0,0,1", .delays = "0,0,0",
		.payload = "fine", .liveness = "working", .requests = 3,
	},
	/* ---- format / model_not_found / context_overflow ---- */
	{
		.name = "format: terminal, the provider's words end the run",
		.spec = "§1.9 isTerminalFormatFailure -> surface_error (no rotation)",
		.source = "src/agents/failover-error.test.ts ('infers format errors from error messages')",
		.scenario = {
			LOOP(ERR(400, BAD_FORMAT)),
			LOOP(ERR(400, BAD_FORMAT)),
		},
		.phase = "error", .error_kind = "failover", .trace = "error:format",
		.statuses = "400", .profiles = "0", .candidates = "0", .delays = "0",
		.payload_has = "tool_use.id", .liveness = "blocked", .requests = 1,
	},
	{
		.name = "model_not_found 404: rotate, then fallback",
		.spec = "§1.8 model_not_found (404)",
		.source = "src/agents/failover-error.test.ts (status 404 -> model_not_found)",
		.scenario = {
			SEQ3("{\"kind\":\"error\",\"status\":404}", "{\"kind\":\"error\",\"status\":404}", FINE),
			SEQ3("{\"kind\":\"error\",\"status\":404}", "{\"kind\":\"error\",\"status\":404}", FINE),
		},
		.fallback = true,
		.phase = "end", .trace = "rotate_profile:model_not_found,fallback_model:model_not_found,success",
		.statuses = "404,404,0", .profiles = "0,1,0", .candidates = "0,0,1", .delays = "0,0,0",
		.payload = "fine", .liveness = "working", .requests = 3,
	},
	{
		.name = "context_overflow: never falls back; nothing to compact -> the spec's text",
		.spec = "§1.7 step 7d; §1.12 context overflow never advances the chain",
		.source = "src/agents/pi-embedded-helpers/provider-error-patterns.test.ts ('prompt is too long: 150000 tokens > 128000 maximum'), errors.test.ts ('maximum context length')",
		.scenario = {
			LOOP("{\"kind\":\"context_overflow\"}"),
			LOOP("{\"kind\":\"context_overflow\"}"),
		},
		.fallback = true,
		.phase = "error", .error_kind = "context_overflow", .trace = "",
		.statuses = "", .profiles = "", .candidates = "", .delays = "",
		.payload = MSG_OVERFLOW, .liveness = "blocked", .requests = 1,
	},
	/* ---- attemptedThinking (§1.3, §1.7 step 10.10 / 11) ---- */
	{
		.name = "thinking level not supported: fall back to off, once",
		.spec = "§1.7 10.10 pickFallbackThinkingLevel: 'not supported' without a list -> off",
		.source = "src/agents/pi-embedded-helpers/thinking.test.ts ('falls back to \"off\" when error says \"not supported\"')",
		.scenario = {
			SEQ2(ERR(400, "think value \\\"low\\\" is not supported for this model"), FINE),
			SEQ2(ERR(400, "think value \\\"low\\\" is not supported for this model"), FINE),
		},
		.thinking = "low",
		.phase = "end", .trace = "success", .statuses = "0", .profiles = "0", .candidates = "0", .delays = "0",
		.payload = "fine", .liveness = "working", .requests = 2,
		.thinking_seq = {"low,off", "on,off"},
	},
	{
		.name = "thinking: each listed level is tried at most once (attemptedThinking)",
		.spec = "§1.3 attemptedThinking; §1.7 10.10 skips attempted levels; then the format error ends the run",
		.source = "src/agents/pi-embedded-helpers/thinking.test.ts ('skips already attempted values')",
		.scenario = {
			LOOP(ERR(400, "Supported values are: \\\"high\\\", \\\"medium\\\"")),
			LOOP(ERR(400, "Supported values are: \\\"high\\\", \\\"medium\\\"")),
		},
		.thinking = "high",
		.phase = "error", .error_kind = "failover", .trace = "error:format",
		.statuses = "400", .profiles = "0", .candidates = "0", .delays = "0",
		.payload_has = "Supported values are", .liveness = "blocked", .requests = 2,
		.thinking_seq = {"high,medium", "on,on"},
	},
	/* ---- the detail-free labels and the incomplete-turn counters ---- */
	{
		.name = "unclassified in-stream error, no output: emptyErrorRetries (3), then the provider's words",
		.spec = "§1.7 step 13 silent error retry, MAX_EMPTY_ERROR_RETRIES = 3; then step 17 error payload, §1.14 blocked",
		.source = "src/agents/pi-embedded-helpers/provider-error-patterns.test.ts ('returns null for unmatched errors')",
		.scenario = {
			LOOP("{\"text\":\"\",\"error_after\":0,\"type\":\"api_error\",\"message\":\"" UNMATCHED "\"}"),
			NULL,
		},
		.phase = "error", .error_kind = "prompt_failed", .trace = "",
		.statuses = "", .profiles = "", .candidates = "", .delays = "",
		.payload = UNMATCHED, .liveness = "blocked", .requests = 4,
	},
	{
		.name = "unclassified Anthropic error event after message_start (1 output token): no silent retry",
		.spec = "§1.7 step 13 needs zero output tokens; Anthropic's message_start reports one; step 17, §1.14",
		.source = "src/agents/pi-embedded-helpers/provider-error-patterns.test.ts ('returns null for unmatched errors')",
		.scenario = {
			NULL,
			LOOP("{\"text\":\"\",\"error_after\":0,\"type\":\"api_error\",\"message\":\"" UNMATCHED "\"}"),
		},
		.phase = "error", .error_kind = "prompt_failed", .trace = "",
		.statuses = "", .profiles = "", .candidates = "", .delays = "",
		.payload = UNMATCHED, .liveness = "blocked", .requests = 1,
	},
	{
		.name = "empty response: emptyResponseRetryAttempts (1), then the answer",
		.spec = "§1.7 step 23, DEFAULT_EMPTY_RESPONSE_RETRY_LIMIT = 1",
		.source = "src/agents/pi-embedded-runner/run/incomplete-turn.ts (zero-usage empty stop)",
		.scenario = {
			SEQ2("{\"kind\":\"empty\",\"usage\":{\"input_tokens\":0,\"output_tokens\":0}}", FINE),
			SEQ2("{\"kind\":\"empty\",\"usage\":{\"input_tokens\":0,\"output_tokens\":0}}", FINE),
		},
		.phase = "end", .trace = "success", .statuses = "0", .profiles = "0", .candidates = "0", .delays = "0",
		.payload = "fine", .liveness = "working", .requests = 2,
	},
	{
		.name = "reasoning only: reasoningOnlyRetryAttempts (2), then abandoned",
		.spec = "§1.7 steps 21 and 26: DEFAULT_REASONING_ONLY_RETRY_LIMIT = 2; incomplete_turn, abandoned",
		.source = "src/agents/pi-embedded-runner/run/incomplete-turn.ts (reasoning-only turn)",
		.scenario = {
			LOOP("{\"kind\":\"reasoning\",\"reasoning\":\"Thinking, but saying nothing.\"}"),
			LOOP("{\"kind\":\"reasoning\",\"reasoning\":\"Thinking, but saying nothing.\"}"),
		},
		.phase = "error", .error_kind = "incomplete_turn", .trace = "",
		.statuses = "", .profiles = "", .candidates = "", .delays = "",
		.payload = MSG_NO_RESPONSE, .liveness = "abandoned", .requests = 3,
	},
};

#define ROWS (sizeof(rows) / sizeof(rows[0]))

/* ---- checks ---- */

/* Field `key` of every attempts entry, comma-separated (numbers). */
static void trace_numbers(const cJSON *d, const char *key, char *out, size_t cap)
{
	out[0] = '\0';
	const cJSON *e;
	cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(d, "attempts")) {
		size_t n = strlen(out);
		double v = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(e, key));
		snprintf(out + n, cap - n, "%s%.0f", n ? "," : "", v != v ? 0.0 : v);
	}
}

/* Each request's thinking, comma-separated: OpenAI's reasoning_effort,
 * Anthropic's thinking "on"; "off" when the request has none. */
static void request_thinking(harness_t *h, int api, char *out, size_t cap)
{
	out[0] = '\0';
	cJSON *reqs = mock_requests(h);
	for (int i = 0; i < cJSON_GetArraySize(reqs); i++) {
		cJSON *owned = NULL;
		const cJSON *b = request_body(reqs, i, &owned);
		const char *v;
		if (api == API_OPENAI)
			v = jstr(b, "reasoning_effort")[0] ? jstr(b, "reasoning_effort") : "off";
		else
			v = !strcmp(jstr(cJSON_GetObjectItemCaseSensitive(b, "thinking"), "type"), "enabled") ? "on"
														: "off";
		size_t n = strlen(out);
		snprintf(out + n, cap - n, "%s%s", n ? "," : "", v);
		cJSON_Delete(owned);
	}
	cJSON_Delete(reqs);
}

/* The scenario with every "@DATE+N@" replaced by the HTTP-date N seconds
 * from now (malloc'd). */
static char *with_dates(const char *scenario)
{
	size_t cap = strlen(scenario) + 256;
	char *out = malloc(cap);
	cr_assert_not_null(out);
	size_t o = 0;
	for (const char *p = scenario; *p;) {
		int secs = 0, used = 0;
		if (sscanf(p, "@DATE+%d@%n", &secs, &used) == 1 && used > 0) {
			time_t t = time(NULL) + secs;
			struct tm tm;
			gmtime_r(&t, &tm);
			o += strftime(out + o, cap - o, "%a, %d %b %Y %H:%M:%S GMT", &tm);
			p += used;
		} else {
			cr_assert_lt(o + 1, cap);
			out[o++] = *p++;
		}
	}
	out[o] = '\0';
	return out;
}

/* The trace's `key` numbers are `want`, or the case fails naming its row. */
static void expect_numbers(const cJSON *d, const char *key, const char *want, const fault_row_t *row,
			   const char *an, const char *trace)
{
	char nums[256];
	trace_numbers(d, key, nums, sizeof(nums));
	cr_assert_str_eq(nums, want, "[%s / %s] trace %s %s (%s)", row->name, an, key, nums, trace);
}

static char *config_for(const fault_row_t *row, const char *api)
{
	char *buf = malloc(2048);
	cr_assert_not_null(buf);
	snprintf(buf, 2048,
		 "{\"providers\":{"
		 "\"mock\":{\"api\":\"%s\",\"embedded\":true,"
		 "\"profiles\":[{\"id\":\"a\",\"apiKey\":\"key-a\"},{\"id\":\"b\",\"apiKey\":\"key-b\"}]},"
		 "\"fb\":{\"api\":\"%s\",\"embedded\":true,\"apiKey\":\"key-fb\"}},"
		 "\"agents\":{\"defaults\":{\"model\":\"mock/m1\"%s%s%s%s,\"maxConcurrent\":16,"
		 "\"sessionIdleSeconds\":1}}%s}",
		 api, api, row->fallback ? ",\"fallbacks\":[\"fb/m2\"]" : "",
		 row->thinking ? ",\"thinking\":\"" : "", row->thinking ? row->thinking : "",
		 row->thinking ? "\"" : "", row->extra ? row->extra : "");
	return buf;
}

static void run_case(size_t row_index, int api)
{
	const fault_row_t *row = &rows[row_index];
	const char *scenario = row->scenario[api];
	const char *an = api_names[api];
	pc__agent_test_delay_divisor(DIVISOR);
	char *config = config_for(row, an);
	char *script = with_dates(scenario);
	harness_t h;
	harness_start_with(&h, config, script, NULL);
	free(script);
	free(config);
	char run[80];
	uint64_t t0 = now_ms();
	submit(&h, "s", "hello", run);
	cJSON *d = finish_of(&h, run, 30000);
	uint64_t took = now_ms() - t0;

	char trace[512], nums[256];
	trace_text(d, trace, sizeof(trace));
	if (getenv("FAULT_MATRIX_DUMP")) { /* the whole terminal data, to read a failure */
		char *all = cJSON_Print(d);
		fprintf(stderr, "[%s / %s] %d requests\n%s\n", row->name, an, request_count(&h), all);
		cJSON_free(all);
	}
	const char *err = jstr(d, "error");
	cr_assert_str_eq(jstr(d, "phase"), row->phase, "[%s / %s] phase (error: %s, trace %s)", row->name, an,
			 err, trace);
	cr_assert_str_eq(jstr(d, "errorKind"), row->error_kind ? row->error_kind : "",
			 "[%s / %s] errorKind '%s' (error: %s)", row->name, an,
			 jstr(d, "errorKind"), err);
	cr_assert_str_eq(trace, row->trace, "[%s / %s] attempts trace %s", row->name, an, trace);
	expect_numbers(d, "status", row->statuses, row, an, trace);
	expect_numbers(d, "profile", row->profiles, row, an, trace);
	expect_numbers(d, "candidate", row->candidates, row, an, trace);
	if (row->first_delay_hi) {
		trace_numbers(d, "delayMs", nums, sizeof(nums));
		uint64_t first = strtoull(nums, NULL, 10);
		cr_assert(first >= row->first_delay_lo && first <= row->first_delay_hi,
			  "[%s / %s] first delayMs %" PRIu64 " not in [%" PRIu64 ", %" PRIu64 "]", row->name, an,
			  first, row->first_delay_lo, row->first_delay_hi);
	} else {
		expect_numbers(d, "delayMs", row->delays, row, an, trace);
	}
	if (row->payload)
		cr_assert_str_eq(payload_text(d), row->payload, "[%s / %s] payload '%s'", row->name, an,
				 payload_text(d));
	if (row->payload_has)
		cr_assert_not_null(strstr(payload_text(d), row->payload_has), "[%s / %s] payload '%s' lacks '%s'",
				   row->name, an, payload_text(d), row->payload_has);
	cr_assert_str_eq(jstr(d, "livenessState"), row->liveness, "[%s / %s] livenessState %s", row->name, an,
			 jstr(d, "livenessState"));
	int requests = request_count(&h);
	cr_assert_eq(requests, row->requests, "[%s / %s] requests: %d", row->name, an, requests);

	if (row->thinking_seq[api]) {
		request_thinking(&h, api, nums, sizeof(nums));
		cr_assert_str_eq(nums, row->thinking_seq[api], "[%s / %s] thinking per request %s", row->name, an,
				 nums);
	}

	/* the waits really happened, shortened by the divisor (loosely: the
	 * machine is shared) */
	uint64_t decided = 0;
	const cJSON *e;
	cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(d, "attempts"))
		decided += (uint64_t)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(e, "delayMs"));
	cr_assert_geq(took, decided / DIVISOR, "[%s / %s] ran %" PRIu64 " ms, waits of %" PRIu64 " ms",
		      row->name, an, took, decided / DIVISOR);
	cr_assert_lt(took, 10000 + decided / DIVISOR, "[%s / %s] waited a real delay? %" PRIu64 " ms",
		     row->name, an, took);
	cJSON_Delete(d);
	harness_stop(&h);
}

/* Every row in every wire format it has a script for. */
ParameterizedTestParameters(fault_matrix, row)
{
	static size_t cases[ROWS * API_COUNT];
	size_t n = 0;
	for (size_t i = 0; i < ROWS * API_COUNT; i++)
		if (rows[i / API_COUNT].scenario[i % API_COUNT])
			cases[n++] = i;
	return cr_make_param_array(size_t, cases, n);
}

/* Case i is row i / 2 in wire format i % 2. */
ParameterizedTest(size_t *i, fault_matrix, row)
{
	run_case(*i / API_COUNT, (int)(*i % API_COUNT));
}
