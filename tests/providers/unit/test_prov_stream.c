/*
 * Stream decoders (agents/providers/stream.c, openai.c, anthropic.c):
 * real-shaped OpenAI and Anthropic SSE transcripts go through io/sse.c's
 * parser, split at every byte boundary, and must give the same normalized
 * events and the same assembled message every time; parallel tool calls,
 * reasoning-only and empty answers, in-stream errors, truncated streams,
 * malformed data and limits are each checked.
 */
#include <criterion/criterion.h>

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agents/providers/failover.h"
#include "agents/providers/stream.h"
#include "io/sse.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#define ASSERT_NO_LEAKS() cr_assert_eq(__lsan_do_recoverable_leak_check(), 0, "LeakSanitizer found leaks")
#else
#define ASSERT_NO_LEAKS() ((void)0)
#endif

/* ---- an event log ---- */

typedef struct log {
	char *s;
	size_t len, cap;
} log_t;

static void log_add(log_t *l, const char *fmt, ...)
{
	char line[4096];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	cr_assert(n >= 0 && (size_t)n < sizeof(line));
	if (l->len + (size_t)n + 2 > l->cap) {
		l->cap = (l->len + (size_t)n + 2) * 2;
		l->s = realloc(l->s, l->cap);
		cr_assert(l->s);
	}
	memcpy(l->s + l->len, line, (size_t)n);
	l->len += (size_t)n;
	l->s[l->len++] = '\n';
	l->s[l->len] = 0;
}

typedef struct rec {
	log_t log;
	int stop_at;  /* return stop_rc at this event (1-based), 0: never */
	int stop_rc;
	int count;
	pc_stream_decoder_t *self; /* re-entry probe */
	int reentry_rc;
} rec_t;

static int on_event(void *user, const pc_stream_event_t *ev)
{
	rec_t *r = user;
	cr_assert(ev->text && ev->id && ev->name && ev->raw_stop_reason && ev->error_type);
	cr_assert_eq(ev->text[ev->text_len], 0, "event text is NUL-terminated");
	switch (ev->kind) {
	case PC_STREAM_TEXT_DELTA: log_add(&r->log, "text[%zu] %s", ev->block, ev->text); break;
	case PC_STREAM_THINKING_DELTA: log_add(&r->log, "think[%zu] %s", ev->block, ev->text); break;
	case PC_STREAM_SIGNATURE_DELTA: log_add(&r->log, "sig[%zu] %s", ev->block, ev->text); break;
	case PC_STREAM_TOOL_CALL_START:
		log_add(&r->log, "start[%zu] #%d %s %s", ev->block, ev->tool_index, ev->id, ev->name);
		break;
	case PC_STREAM_TOOL_CALL_ARGS:
		log_add(&r->log, "args[%zu] #%d %s", ev->block, ev->tool_index, ev->text);
		break;
	case PC_STREAM_TOOL_CALL_END:
		log_add(&r->log, "end[%zu] #%d %s %s %s %s", ev->block, ev->tool_index, ev->id,
			ev->name, ev->text, ev->args_object ? "obj" : "raw");
		break;
	case PC_STREAM_USAGE:
		cr_assert(ev->usage);
		log_add(&r->log, "usage %lld/%lld/%lld/%lld/%lld", (long long)ev->usage->input,
			(long long)ev->usage->output, (long long)ev->usage->cache_read,
			(long long)ev->usage->cache_write, (long long)ev->usage->total);
		break;
	case PC_STREAM_STOP:
		log_add(&r->log, "stop %s %s", pc_stop_reason_name(ev->stop_reason),
			ev->raw_stop_reason);
		break;
	case PC_STREAM_ERROR: log_add(&r->log, "error %s %s", ev->error_type, ev->text); break;
	default: cr_assert_fail("unknown event kind %d", (int)ev->kind);
	}
	r->count++;
	if (r->self) {
		pc_sse_event_t e = {.kind = PC_SSE_MESSAGE, .type = "message", .data = "{}",
				    .data_len = 2, .id = ""};
		r->reentry_rc = pc_stream_decoder_feed_sse(r->self, &e);
	}
	if (r->stop_at && r->count == r->stop_at)
		return r->stop_rc;
	return 0;
}

/* ---- driving a transcript through the SSE parser ---- */

typedef struct outcome {
	char *log;        /* the events */
	char *json;       /* the assembled message */
	int feed_rc;      /* the first failing feed (or SSE finish) */
	pc_stream_result_t res; /* scalar fields only: the decoder is gone */
	char *error_message, *error_type, *error_body;
} outcome_t;

static void outcome_free(outcome_t *o)
{
	free(o->log);
	free(o->json);
	free(o->error_message);
	free(o->error_type);
	free(o->error_body);
	memset(o, 0, sizeof(*o));
}

static char *dup0(const char *s)
{
	return s ? strdup(s) : NULL;
}

static int to_decoder(void *user, const pc_sse_event_t *ev)
{
	return pc_stream_decoder_feed_sse(user, ev);
}

static outcome_t run_cuts(pc_provider_api_t api, const char *t, size_t n, const size_t *cuts,
			  size_t ncuts, const pc_stream_limits_t *lim)
{
	rec_t r = {0};
	pc_stream_decoder_t *d = NULL;
	cr_assert_eq(pc_stream_decoder_new(api, on_event, &r, &d), 0);
	if (lim)
		cr_assert_eq(pc_stream_decoder_set_limits(d, lim), 0);
	pc_sse_parser_t *p = NULL;
	cr_assert_eq(pc_sse_parser_new(NULL, to_decoder, d, &p), 0);
	outcome_t o = {0};
	size_t at = 0;
	for (size_t i = 0; i <= ncuts && !o.feed_rc; i++) {
		size_t end = i < ncuts ? cuts[i] : n;
		o.feed_rc = pc_sse_feed(p, t + at, end - at);
		at = end;
	}
	if (!o.feed_rc)
		o.feed_rc = pc_sse_finish(p);
	pc_sse_parser_free(p);
	cr_assert_eq(pc_stream_decoder_finish(d, &o.res), 0);
	pc_stream_result_t again;
	cr_assert_eq(pc_stream_decoder_finish(d, &again), 0, "finish may be called again");
	cr_assert_eq(again.nblocks, o.res.nblocks);
	cr_assert_eq(again.blocks, o.res.blocks);
	cJSON *j = NULL;
	cr_assert_eq(pc_stream_result_to_json(&o.res, &j), 0);
	o.json = cJSON_PrintUnformatted(j);
	cJSON_Delete(j);
	o.log = r.log.s ? r.log.s : strdup("");
	o.error_message = dup0(o.res.error_message);
	o.error_type = dup0(o.res.error_type);
	o.error_body = dup0(o.res.error_body);
	o.res.blocks = NULL;
	o.res.error_message = o.res.error_type = o.res.error_body = NULL;
	o.res.raw_stop_reason = o.res.response_id = o.res.model = NULL;
	pc_stream_decoder_free(d);
	return o;
}

static outcome_t run1(pc_provider_api_t api, const char *t)
{
	return run_cuts(api, t, strlen(t), NULL, 0, NULL);
}

/* Every way of cutting the transcript in two, and byte by byte, gives the
 * same events and the same message as one feed. */
static void check_splits(pc_provider_api_t api, const char *t)
{
	size_t n = strlen(t);
	outcome_t ref = run1(api, t);
	for (size_t k = 1; k < n; k++) {
		outcome_t o = run_cuts(api, t, n, &k, 1, NULL);
		cr_assert_str_eq(o.log, ref.log, "events differ when cut at byte %zu", k);
		cr_assert_str_eq(o.json, ref.json, "message differs when cut at byte %zu", k);
		cr_assert_eq(o.feed_rc, ref.feed_rc);
		outcome_free(&o);
	}
	size_t *every = malloc(n * sizeof(*every));
	cr_assert(every);
	for (size_t i = 0; i + 1 < n; i++)
		every[i] = i + 1;
	outcome_t o = run_cuts(api, t, n, every, n - 1, NULL);
	cr_assert_str_eq(o.log, ref.log, "events differ byte by byte");
	cr_assert_str_eq(o.json, ref.json);
	outcome_free(&o);
	free(every);
	outcome_free(&ref);
}

#define OA PC_API_OPENAI_COMPLETIONS
#define AN PC_API_ANTHROPIC_MESSAGES

/* ---- OpenAI transcripts ---- */

#define OA_HEAD "\"id\":\"chatcmpl-9\",\"object\":\"chat.completion.chunk\",\"created\":1700000000," \
		"\"model\":\"gpt-4o-mini-2024-07-18\",\"system_fingerprint\":\"fp_1\""

static const char oa_text[] =
	"data: {" OA_HEAD ",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\","
	"\"refusal\":null},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n"
	"data: {" OA_HEAD ",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hello\"},\"logprobs\":null,"
	"\"finish_reason\":null}],\"usage\":null}\n\n"
	"data: {" OA_HEAD ",\"choices\":[{\"index\":0,\"delta\":{\"content\":\", wörld ✓\"},\"logprobs\":null,"
	"\"finish_reason\":null}],\"usage\":null}\n\n"
	"data: {" OA_HEAD ",\"choices\":[{\"index\":0,\"delta\":{},\"logprobs\":null,\"finish_reason\":\"stop\"}],"
	"\"usage\":null}\n\n"
	"data: {" OA_HEAD ",\"choices\":[],\"usage\":{\"prompt_tokens\":20,\"completion_tokens\":5,"
	"\"total_tokens\":25,\"prompt_tokens_details\":{\"cached_tokens\":8,\"audio_tokens\":0},"
	"\"completion_tokens_details\":{\"reasoning_tokens\":0}}}\n\n"
	"data: [DONE]\n\n";

Test(stream_openai, text_with_usage)
{
	outcome_t o = run1(OA, oa_text);
	cr_assert_eq(o.feed_rc, 0);
	cr_assert_str_eq(o.log, "text[0] Hello\n"
				"text[0] , wörld ✓\n"
				"usage 12/5/8/0/25\n"
				"stop stop stop\n");
	cr_assert_str_eq(o.json,
			 "{\"role\":\"assistant\",\"api\":\"openai-completions\",\"content\":[{\"type\":"
			 "\"text\",\"text\":\"Hello, wörld ✓\"}],\"stopReason\":\"stop\",\"usage\":{\"input\":"
			 "12,\"output\":5,\"cacheRead\":8,\"cacheWrite\":0,\"totalTokens\":25}}");
	cr_assert(o.res.complete);
	cr_assert(o.res.has_usage);
	cr_assert_eq(o.res.stop_reason, PC_STOP_STOP);
	cr_assert_eq(o.res.decode_error, 0);
	cr_assert_null(o.error_message);
	outcome_free(&o);
	check_splits(OA, oa_text);
	ASSERT_NO_LEAKS();
}

Test(stream_openai, response_id_and_model)
{
	pc_stream_decoder_t *d = NULL;
	cr_assert_eq(pc_stream_decoder_new(OA, NULL, NULL, &d), 0);
	pc_sse_parser_t *p = NULL;
	cr_assert_eq(pc_sse_parser_new(NULL, to_decoder, d, &p), 0);
	cr_assert_eq(pc_sse_feed(p, oa_text, strlen(oa_text)), 0);
	pc_sse_parser_free(p);
	pc_stream_result_t r;
	cr_assert_eq(pc_stream_decoder_finish(d, &r), 0);
	cr_assert_str_eq(r.response_id, "chatcmpl-9");
	cr_assert_str_eq(r.model, "gpt-4o-mini-2024-07-18");
	cr_assert_str_eq(r.raw_stop_reason, "stop");
	cr_assert_eq(r.api, OA);
	cr_assert_eq(r.nblocks, 1);
	cr_assert_eq(r.blocks[0].kind, PC_CONTENT_TEXT);
	cr_assert_eq(r.blocks[0].text_len, strlen("Hello, wörld ✓"));
	pc_stream_decoder_free(d);
}

#define TC(idx, body) "{\"index\":" #idx "," body "}"
#define OA_TOOLS(list) \
	"data: {" OA_HEAD ",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[" list "]}," \
	"\"finish_reason\":null}]}\n\n"

static const char oa_parallel[] =
	"data: {" OA_HEAD ",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\","
	"\"reasoning_content\":\"Two lookups.\"},\"finish_reason\":null}]}\n\n"
	"data: {" OA_HEAD ",\"choices\":[{\"index\":0,\"delta\":{\"content\":null,\"reasoning\":\"\"},"
	"\"finish_reason\":null}]}\n\n"
	OA_TOOLS(TC(0, "\"id\":\"call_a\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
		       "\"arguments\":\"\"}"))
	OA_TOOLS(TC(1, "\"id\":\"call_b\",\"type\":\"function\",\"function\":{\"name\":\"get_time\","
		       "\"arguments\":\"{\\\"tz\\\":\"}"))
	OA_TOOLS(TC(0, "\"function\":{\"arguments\":\"{\\\"city\\\":\\\"Par\"}"))
	OA_TOOLS(TC(1, "\"function\":{\"arguments\":\"\\\"UTC\\\"}\"}") ","
		 TC(0, "\"function\":{\"arguments\":\"is\\\"}\"}"))
	"data: {" OA_HEAD ",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n"
	"data: {" OA_HEAD ",\"choices\":[],\"usage\":{\"prompt_tokens\":50,\"completion_tokens\":30,"
	"\"total_tokens\":80}}\n\n"
	"data: [DONE]\n\n";

Test(stream_openai, parallel_interleaved_tool_calls)
{
	outcome_t o = run1(OA, oa_parallel);
	cr_assert_eq(o.feed_rc, 0);
	cr_assert_str_eq(o.log, "think[0] Two lookups.\n"
				"start[1] #0 call_a get_weather\n"
				"start[2] #1 call_b get_time\n"
				"args[2] #1 {\"tz\":\n"
				"args[1] #0 {\"city\":\"Par\n"
				"args[2] #1 \"UTC\"}\n"
				"args[1] #0 is\"}\n"
				"end[1] #0 call_a get_weather {\"city\":\"Paris\"} obj\n"
				"end[2] #1 call_b get_time {\"tz\":\"UTC\"} obj\n"
				"usage 50/30/0/0/80\n"
				"stop toolUse tool_calls\n");
	cr_assert_str_eq(o.json,
			 "{\"role\":\"assistant\",\"api\":\"openai-completions\",\"content\":["
			 "{\"type\":\"thinking\",\"thinking\":\"Two lookups.\"},"
			 "{\"type\":\"toolCall\",\"id\":\"call_a\",\"name\":\"get_weather\",\"arguments\":"
			 "{\"city\":\"Paris\"}},"
			 "{\"type\":\"toolCall\",\"id\":\"call_b\",\"name\":\"get_time\",\"arguments\":"
			 "{\"tz\":\"UTC\"}}],"
			 "\"stopReason\":\"toolUse\",\"usage\":{\"input\":50,\"output\":30,\"cacheRead\":0,"
			 "\"cacheWrite\":0,\"totalTokens\":80}}");
	cr_assert_eq(o.res.stop_reason, PC_STOP_TOOL_USE);
	outcome_free(&o);
	check_splits(OA, oa_parallel);
	ASSERT_NO_LEAKS();
}

static const char oa_reasoning_only[] =
	"data: {\"id\":\"x\",\"model\":\"qwen3\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\","
	"\"content\":\"\",\"reasoning\":\"Hmm, \"},\"finish_reason\":null}]}\n\n"
	"data: {\"id\":\"x\",\"model\":\"qwen3\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"\","
	"\"reasoning\":\"let me think.\"},\"finish_reason\":null}]}\n\n"
	"data: {\"id\":\"x\",\"model\":\"qwen3\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"\"},"
	"\"finish_reason\":\"stop\"}]}\n\n"
	"data: [DONE]\n\n";

Test(stream_openai, reasoning_only)
{
	outcome_t o = run1(OA, oa_reasoning_only);
	cr_assert_str_eq(o.log, "think[0] Hmm, \nthink[0] let me think.\nstop stop stop\n");
	cr_assert_str_eq(o.json, "{\"role\":\"assistant\",\"api\":\"openai-completions\",\"content\":"
				 "[{\"type\":\"thinking\",\"thinking\":\"Hmm, let me think.\"}],"
				 "\"stopReason\":\"stop\",\"usage\":{\"input\":0,\"output\":0,"
				 "\"cacheRead\":0,\"cacheWrite\":0,\"totalTokens\":0}}");
	cr_assert(o.res.complete);
	cr_assert_not(o.res.has_usage);
	outcome_free(&o);
	check_splits(OA, oa_reasoning_only);
}

Test(stream_openai, empty_answer)
{
	static const char t[] =
		"data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},"
		"\"finish_reason\":null}]}\n\n"
		"data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n"
		"data: [DONE]\n\n";
	outcome_t o = run1(OA, t);
	cr_assert_str_eq(o.log, "stop stop stop\n");
	cr_assert_eq(o.res.nblocks, 0);
	cr_assert(o.res.complete);
	cr_assert_str_eq(o.json, "{\"role\":\"assistant\",\"api\":\"openai-completions\",\"content\":[],"
				 "\"stopReason\":\"stop\",\"usage\":{\"input\":0,\"output\":0,"
				 "\"cacheRead\":0,\"cacheWrite\":0,\"totalTokens\":0}}");
	outcome_free(&o);
	/* [DONE] alone: a complete, empty answer. */
	o = run1(OA, "data: [DONE]\n\n");
	cr_assert(o.res.complete);
	cr_assert_eq(o.res.stop_reason, PC_STOP_STOP);
	outcome_free(&o);
}

static const char oa_error[] =
	"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Par\"},\"finish_reason\":null}]}\n\n"
	"data: {\"error\":{\"message\":\"The server had an error while processing your request.\","
	"\"type\":\"server_error\",\"param\":null,\"code\":null}}\n\n"
	"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ignored\"},\"finish_reason\":null}]}\n\n"
	"data: [DONE]\n\n";

Test(stream_openai, in_stream_error)
{
	outcome_t o = run1(OA, oa_error);
	cr_assert_eq(o.feed_rc, 0);
	cr_assert_str_eq(o.log, "text[0] Par\n"
				"error server_error The server had an error while processing your request.\n"
				"stop error \n");
	cr_assert(o.res.complete, "an error event ends the stream");
	cr_assert_eq(o.res.stop_reason, PC_STOP_ERROR);
	cr_assert_str_eq(o.error_message, "The server had an error while processing your request.");
	cr_assert_str_eq(o.error_type, "server_error");
	cr_assert(strstr(o.error_body, "\"type\":\"server_error\""));
	cr_assert(strstr(o.json, "\"stopReason\":\"error\""));
	cr_assert(strstr(o.json, "\"errorMessage\":\"The server had an error"));
	cr_assert(strstr(o.json, "\"text\":\"Par\""), "what came before the error is kept");
	/* The body classifies as the spec says. */
	pc_failover_input_t in = {.status = 200, .body = o.error_body, .body_len = strlen(o.error_body)};
	pc_failover_result_t fr;
	cr_assert_eq(pc_failover_classify(&in, &fr), 0);
	cr_assert_eq(fr.reason, PC_FAILOVER_SERVER_ERROR);
	outcome_free(&o);
	check_splits(OA, oa_error);
}

Test(stream_openai, error_event_with_plain_text)
{
	outcome_t o = run1(OA, "event: error\ndata: upstream died\n\n");
	cr_assert_str_eq(o.log, "error  upstream died\nstop error \n");
	cr_assert_str_eq(o.error_message, "upstream died");
	outcome_free(&o);
	o = run1(OA, "event: error\ndata: {\"message\":\"boom\",\"type\":\"x\"}\n\n");
	cr_assert_str_eq(o.log, "error x boom\nstop error \n");
	outcome_free(&o);
	o = run1(OA, "data: {\"error\":\"Rate limit exceeded\"}\n\n");
	cr_assert_str_eq(o.log, "error  Rate limit exceeded\nstop error \n");
	outcome_free(&o);
}

Test(stream_openai, truncated_stream)
{
	static const char t[] =
		"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"},\"finish_reason\":null}]}\n\n"
		"data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"c1\","
		"\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"a\\\":\"}}]},\"finish_reason\":null}]}\n\n"
		"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo\"},\"finish";
	outcome_t o = run1(OA, t);
	cr_assert_eq(o.feed_rc, 0);
	cr_assert_not(o.res.complete);
	cr_assert_eq(o.res.stop_reason, PC_STOP_ERROR);
	cr_assert_str_eq(o.error_message, "stream ended before [DONE]");
	cr_assert_str_eq(o.log, "text[0] Hel\nstart[1] #0 c1 f\nargs[1] #0 {\"a\":\n",
			 "no END and no STOP for a cut stream");
	cr_assert(strstr(o.json, "\"arguments\":\"{\\\"a\\\":\""), "broken arguments are kept raw");
	outcome_free(&o);
	/* Every prefix of a good transcript decodes without trouble, and only
	 * the whole one is complete. */
	size_t n = strlen(oa_parallel);
	for (size_t k = 0; k < n; k++) {
		outcome_t p = run_cuts(OA, oa_parallel, k, NULL, 0, NULL);
		cr_assert_eq(p.feed_rc, 0);
		cr_assert_not(p.res.complete, "prefix of %zu bytes", k);
		outcome_free(&p);
	}
	outcome_t whole = run1(OA, oa_parallel);
	cr_assert(whole.res.complete);
	outcome_free(&whole);
	ASSERT_NO_LEAKS();
}

Test(stream_openai, malformed_json)
{
	static const char t[] =
		"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ok\"},\"finish_reason\":null}]}\n\n"
		"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\n\n"
		"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"never\"}}]}\n\n"
		"data: [DONE]\n\n";
	outcome_t o = run1(OA, t);
	cr_assert_eq(o.feed_rc, PC_EINVAL, "the decoder's error stops the SSE parser");
	cr_assert_eq(o.res.decode_error, PC_EINVAL);
	cr_assert_not(o.res.complete);
	cr_assert_eq(o.res.stop_reason, PC_STOP_ERROR);
	cr_assert(strstr(o.error_message, "malformed stream: invalid JSON"), "%s", o.error_message);
	cr_assert_str_eq(o.log, "text[0] ok\n");
	outcome_free(&o);
	/* Shapes that parse but are wrong. */
	static const char *const bad[] = {
		"data: [1,2]\n\n",
		"data: \"text\"\n\n",
		"data: {\"choices\":[7]}\n\n",
		"data: {\"choices\":[{\"delta\":{\"tool_calls\":[\"x\"]}}]}\n\n",
		"data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":-1}]}}]}\n\n",
		"data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":1e12}]}}]}\n\n",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		o = run1(OA, bad[i]);
		cr_assert_eq(o.res.decode_error, PC_EINVAL, "%s", bad[i]);
		cr_assert(o.error_message && strstr(o.error_message, "malformed stream"));
		outcome_free(&o);
	}
}

Test(stream_openai, finish_reason_mapping)
{
	static const struct {
		const char *fr;
		pc_stop_reason_t want;
		const char *msg;
	} cases[] = {
		{"stop", PC_STOP_STOP, NULL},
		{"length", PC_STOP_LENGTH, NULL},
		{"tool_calls", PC_STOP_TOOL_USE, NULL},
		{"function_call", PC_STOP_TOOL_USE, NULL},
		{"content_filter", PC_STOP_ERROR, "Provider finish_reason: content_filter"},
		{"error", PC_STOP_ERROR, "Provider finish_reason: error"},
		{"network_error", PC_STOP_ERROR, "Unhandled stop reason: network_error"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char t[512];
		snprintf(t, sizeof(t),
			 "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"},"
			 "\"finish_reason\":\"%s\"}]}\n\ndata: [DONE]\n\n",
			 cases[i].fr);
		outcome_t o = run1(OA, t);
		cr_assert_eq(o.res.stop_reason, cases[i].want, "%s", cases[i].fr);
		cr_assert(o.res.complete);
		if (cases[i].msg)
			cr_assert_str_eq(o.error_message, cases[i].msg);
		else
			cr_assert_null(o.error_message);
		outcome_free(&o);
	}
	/* What the messages classify as. */
	static const struct {
		const char *msg;
		pc_failover_reason_t want;
	} cls[] = {
		{"Provider finish_reason: error", PC_FAILOVER_SERVER_ERROR},
		{"Unhandled stop reason: network_error", PC_FAILOVER_TIMEOUT},
		{"Unhandled stop reason: malformed_response", PC_FAILOVER_TIMEOUT},
	};
	for (size_t i = 0; i < sizeof(cls) / sizeof(cls[0]); i++) {
		pc_failover_input_t in = {.body = cls[i].msg, .body_len = strlen(cls[i].msg)};
		pc_failover_result_t r;
		cr_assert_eq(pc_failover_classify(&in, &r), 0);
		cr_assert_eq(r.reason, cls[i].want, "%s", cls[i].msg);
	}
	/* "stop" after tool calls (Ollama) still means: run the tools. */
	outcome_t o = run1(OA, "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,"
			       "\"id\":\"c\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]},"
			       "\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n");
	cr_assert_eq(o.res.stop_reason, PC_STOP_TOOL_USE);
	cr_assert_str_eq(o.log, "start[0] #0 c f\nargs[0] #0 {}\nend[0] #0 c f {} obj\nstop toolUse stop\n");
	outcome_free(&o);
	/* No finish_reason at all: decided at [DONE]. */
	o = run1(OA, "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"c\","
		     "\"function\":{\"name\":\"f\"}}]}}]}\n\ndata: [DONE]\n\n");
	cr_assert_eq(o.res.stop_reason, PC_STOP_TOOL_USE);
	cr_assert_str_eq(o.log, "start[0] #0 c f\nend[0] #0 c f {} obj\nstop toolUse \n");
	outcome_free(&o);
}

Test(stream_openai, odd_tool_call_shapes)
{
	/* No index: keyed by id; the name repeated on every fragment. */
	outcome_t o = run1(OA,
		"data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"id\":\"a\",\"function\":{\"name\":\"f\","
		"\"arguments\":\"{\\\"x\\\":\"}}]}}]}\n\n"
		"data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"id\":\"b\",\"function\":{\"name\":\"g\","
		"\"arguments\":\"{}\"}}]}}]}\n\n"
		"data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"id\":\"a\",\"function\":{\"name\":\"f\","
		"\"arguments\":\"1}\"}}]}}]}\n\n"
		"data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"function\":{\"arguments\":\" \"}}]},"
		"\"finish_reason\":\"tool_calls\"}]}\n\ndata: [DONE]\n\n");
	cr_assert_eq(o.res.decode_error, 0, "%s", o.error_message ? o.error_message : "");
	cr_assert(strstr(o.log, "end[0] #"));
	cr_assert(strstr(o.json, "{\"type\":\"toolCall\",\"id\":\"a\",\"name\":\"f\",\"arguments\":{\"x\":1}}"),
		  "%s", o.json);
	cr_assert(strstr(o.json, "{\"type\":\"toolCall\",\"id\":\"b\",\"name\":\"g\",\"arguments\":{}}"),
		  "%s", o.json);
	outcome_free(&o);

	/* Every call numbered 0, told apart by id. */
	o = run1(OA,
		 "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"a\",\"function\":"
		 "{\"name\":\"f\",\"arguments\":\"{}\"}}]}}]}\n\n"
		 "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"b\",\"function\":"
		 "{\"name\":\"g\",\"arguments\":\"{}\"}}]}}]}\n\n"
		 "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\ndata: [DONE]\n\n");
	cr_assert_str_eq(o.log, "start[0] #0 a f\nargs[0] #0 {}\nend[0] #0 a f {} obj\n"
				"start[1] #0 b g\nargs[1] #0 {}\nend[1] #0 b g {} obj\n"
				"stop toolUse tool_calls\n");
	outcome_free(&o);

	/* No id at all, a name streamed in pieces, invalid arguments. */
	o = run1(OA,
		 "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":3,\"function\":{\"name\":\"get_\","
		 "\"arguments\":\"{not json\"}}]}}]}\n\n"
		 "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":3,\"function\":{\"name\":\"time\"}}]}}]}\n\n"
		 "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\ndata: [DONE]\n\n");
	cr_assert_str_eq(o.log, "start[0] #3  get_\nargs[0] #3 {not json\n"
				"end[0] #3  get_time {not json raw\nstop toolUse tool_calls\n");
	cr_assert(strstr(o.json, "{\"type\":\"toolCall\",\"id\":\"call_0\",\"name\":\"get_time\","
				 "\"arguments\":\"{not json\"}"),
		  "%s", o.json);
	outcome_free(&o);

	/* A JSON array is valid JSON but not an arguments object. */
	o = run1(OA, "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"a\",\"function\":"
		     "{\"name\":\"f\",\"arguments\":\"[1]\"}}]},\"finish_reason\":\"tool_calls\"}]}\n\n"
		     "data: [DONE]\n\n");
	cr_assert(strstr(o.log, "end[0] #0 a f [1] raw"));
	outcome_free(&o);

	/* The legacy function_call delta. */
	o = run1(OA, "data: {\"choices\":[{\"delta\":{\"function_call\":{\"name\":\"f\",\"arguments\":\"{\\\"q\\\"\"}}}]}\n\n"
		     "data: {\"choices\":[{\"delta\":{\"function_call\":{\"arguments\":\":1}\"}},"
		     "\"finish_reason\":\"function_call\"}]}\n\ndata: [DONE]\n\n");
	cr_assert_str_eq(o.log, "start[0] #-2  f\nargs[0] #-2 {\"q\"\nargs[0] #-2 :1}\n"
				"end[0] #-2  f {\"q\":1} obj\nstop toolUse function_call\n");
	outcome_free(&o);

	/* Text after a tool call opens a new text block; choice 1 is ignored. */
	o = run1(OA, "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}},{\"index\":1,\"delta\":"
		     "{\"content\":\"zzz\"}}]}\n\n"
		     "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"c\",\"function\":"
		     "{\"name\":\"f\",\"arguments\":\"{}\"}}]}}]}\n\n"
		     "data: {\"choices\":[{\"delta\":{\"content\":\"b\"}}]}\n\n"
		     "data: {\"choices\":[{\"delta\":{\"reasoning_content\":\"r\",\"reasoning\":\"r\"}}]}\n\n"
		     "data: [DONE]\n\n");
	cr_assert_str_eq(o.log, "text[0] a\nstart[1] #0 c f\nargs[1] #0 {}\ntext[2] b\nthink[3] r\n"
				"end[1] #0 c f {} obj\nstop toolUse \n");
	outcome_free(&o);
	ASSERT_NO_LEAKS();
}

Test(stream_openai, more_tool_call_edges)
{
	/* Whitespace arguments are no arguments. */
	outcome_t o = run1(OA, "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"a\","
			       "\"function\":{\"name\":\"f\",\"arguments\":\"  \\n\"}}]},"
			       "\"finish_reason\":\"tool_calls\"}]}\n\ndata: [DONE]\n\n");
	cr_assert(strstr(o.log, "end[0] #0 a f {} obj"), "%s", o.log);
	outcome_free(&o);
	/* No index and no id on the first fragment: a new call; its id comes later. */
	o = run1(OA, "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"function\":{\"name\":\"f\"}}]}}]}\n\n"
		     "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"id\":\"late\",\"index\":null,"
		     "\"function\":{\"arguments\":\"{}\"}}]}}]}\n\n"
		     "data: [DONE]\n\n");
	cr_assert_eq(o.res.decode_error, 0, "%s", o.error_message ? o.error_message : "");
	outcome_free(&o);
	o = run1(OA, "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"name\":\"f\"}}]}}]}\n\n"
		     "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"late\"}]}}]}\n\n"
		     "data: [DONE]\n\n");
	cr_assert_str_eq(o.log, "start[0] #0  f\nend[0] #0 late f {} obj\nstop toolUse \n");
	outcome_free(&o);
	/* A usage object without counters is not a usage update. */
	o = run1(OA, "data: {\"choices\":[],\"usage\":{\"foo\":1}}\n\ndata: [DONE]\n\n");
	cr_assert_str_eq(o.log, "stop stop \n");
	cr_assert_not(o.res.has_usage);
	outcome_free(&o);
	/* The limit hit by the second call of one chunk. */
	pc_stream_limits_t lim = {.max_tool_calls = 1};
	static const char two[] = "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"a\","
				  "\"function\":{\"name\":\"f\"}},{\"index\":1,\"id\":\"b\",\"function\":"
				  "{\"name\":\"g\"}}]}}]}\n\n";
	o = run_cuts(OA, two, strlen(two), NULL, 0, &lim);
	cr_assert_eq(o.res.decode_error, PC_ELIMIT);
	cr_assert_str_eq(o.log, "start[0] #0 a f\n");
	outcome_free(&o);
	/* A name that keeps growing is cut off. */
	size_t cap = 64 * 1024;
	char *t = malloc(cap);
	cr_assert(t);
	size_t len = 0;
	for (int i = 0; i < 200; i++)
		len += (size_t)snprintf(t + len, cap - len,
					"data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,"
					"\"function\":{\"name\":\"part%03d_abcdefghijklmnopqrstuvwxyz\"}}]}}]}\n\n",
					i);
	o = run_cuts(OA, t, len, NULL, 0, NULL);
	cr_assert_eq(o.res.decode_error, PC_ELIMIT);
	cr_assert_str_eq(o.error_message, "stream limit: tool call id or name too long");
	outcome_free(&o);
	free(t);
	ASSERT_NO_LEAKS();
}

typedef struct finish_ctx {
	pc_stream_decoder_t *d;
	int rc;
} finish_ctx_t;

static int finish_from_callback(void *user, const pc_stream_event_t *ev)
{
	(void)ev;
	finish_ctx_t *c = user;
	pc_stream_result_t r;
	c->rc = pc_stream_decoder_finish(c->d, &r);
	return 0;
}

Test(stream, finish_from_the_callback_is_refused)
{
	finish_ctx_t c = {.rc = 1};
	cr_assert_eq(pc_stream_decoder_new(OA, finish_from_callback, &c, &c.d), 0);
	pc_sse_event_t e = {.kind = PC_SSE_MESSAGE, .type = "message", .data = "[DONE]", .data_len = 6,
			    .id = ""};
	cr_assert_eq(pc_stream_decoder_feed_sse(c.d, &e), 0);
	cr_assert_eq(c.rc, PC_ESTATE);
	pc_stream_decoder_free(c.d);
}

/* ---- Anthropic transcripts ---- */

#define AE(name, json) "event: " name "\ndata: " json "\n\n"

static const char an_tools[] =
	AE("message_start", "{\"type\":\"message_start\",\"message\":{\"id\":\"msg_01\",\"type\":\"message\","
	   "\"role\":\"assistant\",\"model\":\"claude-sonnet-4-5-20250929\",\"content\":[],\"stop_reason\":null,"
	   "\"stop_sequence\":null,\"usage\":{\"input_tokens\":25,\"cache_creation_input_tokens\":10,"
	   "\"cache_read_input_tokens\":100,\"output_tokens\":1}}}")
	AE("content_block_start", "{\"type\":\"content_block_start\",\"index\":0,\"content_block\":"
	   "{\"type\":\"thinking\",\"thinking\":\"\",\"signature\":\"\"}}")
	AE("ping", "{\"type\": \"ping\"}")
	AE("content_block_delta", "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":"
	   "{\"type\":\"thinking_delta\",\"thinking\":\"I should check \"}}")
	AE("content_block_delta", "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":"
	   "{\"type\":\"thinking_delta\",\"thinking\":\"the weather.\"}}")
	AE("content_block_delta", "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":"
	   "{\"type\":\"signature_delta\",\"signature\":\"EqQBCgIYAhIM1gbcDa9GJwZA\"}}")
	AE("content_block_stop", "{\"type\":\"content_block_stop\",\"index\":0}")
	AE("content_block_start", "{\"type\":\"content_block_start\",\"index\":1,\"content_block\":"
	   "{\"type\":\"text\",\"text\":\"\"}}")
	AE("content_block_delta", "{\"type\":\"content_block_delta\",\"index\":1,\"delta\":"
	   "{\"type\":\"text_delta\",\"text\":\"Checking \"}}")
	AE("content_block_delta", "{\"type\":\"content_block_delta\",\"index\":1,\"delta\":"
	   "{\"type\":\"text_delta\",\"text\":\"now.\"}}")
	AE("content_block_stop", "{\"type\":\"content_block_stop\",\"index\":1}")
	AE("content_block_start", "{\"type\":\"content_block_start\",\"index\":2,\"content_block\":"
	   "{\"type\":\"tool_use\",\"id\":\"toolu_01A\",\"name\":\"get_weather\",\"input\":{}}}")
	AE("content_block_delta", "{\"type\":\"content_block_delta\",\"index\":2,\"delta\":"
	   "{\"type\":\"input_json_delta\",\"partial_json\":\"\"}}")
	AE("content_block_delta", "{\"type\":\"content_block_delta\",\"index\":2,\"delta\":"
	   "{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"city\\\": \\\"Par\"}}")
	AE("content_block_delta", "{\"type\":\"content_block_delta\",\"index\":2,\"delta\":"
	   "{\"type\":\"input_json_delta\",\"partial_json\":\"is\\\"}\"}}")
	AE("content_block_stop", "{\"type\":\"content_block_stop\",\"index\":2}")
	AE("content_block_start", "{\"type\":\"content_block_start\",\"index\":3,\"content_block\":"
	   "{\"type\":\"tool_use\",\"id\":\"toolu_01B\",\"name\":\"get_time\",\"input\":{}}}")
	AE("content_block_stop", "{\"type\":\"content_block_stop\",\"index\":3}")
	AE("message_delta", "{\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\","
	   "\"stop_sequence\":null},\"usage\":{\"output_tokens\":89}}")
	AE("message_stop", "{\"type\":\"message_stop\"}");

Test(stream_anthropic, thinking_text_and_tools)
{
	outcome_t o = run1(AN, an_tools);
	cr_assert_eq(o.feed_rc, 0);
	cr_assert_str_eq(o.log, "usage 25/1/100/10/136\n"
				"think[0] I should check \n"
				"think[0] the weather.\n"
				"sig[0] EqQBCgIYAhIM1gbcDa9GJwZA\n"
				"text[1] Checking \n"
				"text[1] now.\n"
				"start[2] #2 toolu_01A get_weather\n"
				"args[2] #2 {\"city\": \"Par\n"
				"args[2] #2 is\"}\n"
				"end[2] #2 toolu_01A get_weather {\"city\": \"Paris\"} obj\n"
				"start[3] #3 toolu_01B get_time\n"
				"end[3] #3 toolu_01B get_time {} obj\n"
				"usage 25/89/100/10/224\n"
				"stop toolUse tool_use\n");
	cr_assert_str_eq(o.json,
			 "{\"role\":\"assistant\",\"api\":\"anthropic-messages\",\"content\":["
			 "{\"type\":\"thinking\",\"thinking\":\"I should check the weather.\","
			 "\"thinkingSignature\":\"EqQBCgIYAhIM1gbcDa9GJwZA\"},"
			 "{\"type\":\"text\",\"text\":\"Checking now.\"},"
			 "{\"type\":\"toolCall\",\"id\":\"toolu_01A\",\"name\":\"get_weather\",\"arguments\":"
			 "{\"city\":\"Paris\"}},"
			 "{\"type\":\"toolCall\",\"id\":\"toolu_01B\",\"name\":\"get_time\",\"arguments\":{}}],"
			 "\"stopReason\":\"toolUse\",\"usage\":{\"input\":25,\"output\":89,\"cacheRead\":100,"
			 "\"cacheWrite\":10,\"totalTokens\":224}}");
	cr_assert(o.res.complete);
	cr_assert_eq(o.res.usage.output, 89);
	outcome_free(&o);
	check_splits(AN, an_tools);
	ASSERT_NO_LEAKS();
}

Test(stream_anthropic, result_fields)
{
	pc_stream_decoder_t *d = NULL;
	cr_assert_eq(pc_stream_decoder_new(AN, NULL, NULL, &d), 0);
	pc_sse_parser_t *p = NULL;
	cr_assert_eq(pc_sse_parser_new(NULL, to_decoder, d, &p), 0);
	cr_assert_eq(pc_sse_feed(p, an_tools, strlen(an_tools)), 0);
	pc_sse_parser_free(p);
	pc_stream_result_t r;
	cr_assert_eq(pc_stream_decoder_finish(d, &r), 0);
	cr_assert_str_eq(r.response_id, "msg_01");
	cr_assert_str_eq(r.model, "claude-sonnet-4-5-20250929");
	cr_assert_eq(r.nblocks, 4);
	cr_assert_eq(r.blocks[0].kind, PC_CONTENT_THINKING);
	cr_assert_str_eq(r.blocks[0].signature, "EqQBCgIYAhIM1gbcDa9GJwZA");
	cr_assert_not(r.blocks[0].redacted);
	cr_assert_eq(r.blocks[1].kind, PC_CONTENT_TEXT);
	cr_assert_null(r.blocks[1].signature);
	cr_assert_eq(r.blocks[2].kind, PC_CONTENT_TOOL_CALL);
	cr_assert(r.blocks[2].args_object);
	cr_assert(r.blocks[2].complete);
	cr_assert_str_eq(r.blocks[2].text, "{\"city\": \"Paris\"}");
	cr_assert_str_eq(r.blocks[3].text, "{}");
	pc_stream_decoder_free(d);
}

static const char an_redacted[] =
	AE("message_start", "{\"type\":\"message_start\",\"message\":{\"id\":\"msg_2\",\"model\":\"claude\","
	   "\"usage\":{\"input_tokens\":5,\"output_tokens\":0}}}")
	AE("content_block_start", "{\"type\":\"content_block_start\",\"index\":0,\"content_block\":"
	   "{\"type\":\"redacted_thinking\",\"data\":\"EmwKAhgBEgy3va3pzix\"}}")
	AE("content_block_stop", "{\"type\":\"content_block_stop\",\"index\":0}")
	AE("content_block_start", "{\"type\":\"content_block_start\",\"index\":1,\"content_block\":"
	   "{\"type\":\"server_tool_use\",\"id\":\"srvtoolu_1\",\"name\":\"web_search\",\"input\":{}}}")
	AE("content_block_delta", "{\"type\":\"content_block_delta\",\"index\":1,\"delta\":"
	   "{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"q\\\":1}\"}}")
	AE("content_block_stop", "{\"type\":\"content_block_stop\",\"index\":1}")
	AE("some_future_event", "{\"type\":\"some_future_event\",\"x\":1}")
	AE("content_block_start", "{\"type\":\"content_block_start\",\"index\":2,\"content_block\":"
	   "{\"type\":\"text\",\"text\":\"Hi\"}}")
	AE("content_block_delta", "{\"type\":\"content_block_delta\",\"index\":2,\"delta\":"
	   "{\"type\":\"citations_delta\",\"citation\":{}}}")
	AE("content_block_delta", "{\"type\":\"content_block_delta\",\"index\":2,\"delta\":"
	   "{\"type\":\"text_delta\",\"text\":\" there\"}}")
	AE("content_block_stop", "{\"type\":\"content_block_stop\",\"index\":2}")
	AE("message_delta", "{\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},"
	   "\"usage\":{\"output_tokens\":7,\"input_tokens\":null,\"cache_read_input_tokens\":0}}")
	AE("message_stop", "{\"type\":\"message_stop\"}");

Test(stream_anthropic, redacted_thinking_and_skipped_blocks)
{
	outcome_t o = run1(AN, an_redacted);
	cr_assert_eq(o.feed_rc, 0);
	cr_assert_str_eq(o.log, "usage 5/0/0/0/5\ntext[1] Hi\ntext[1]  there\nusage 5/7/0/0/12\n"
				"stop stop end_turn\n");
	cr_assert_str_eq(o.json,
			 "{\"role\":\"assistant\",\"api\":\"anthropic-messages\",\"content\":["
			 "{\"type\":\"thinking\",\"thinking\":\"\",\"thinkingSignature\":"
			 "\"EmwKAhgBEgy3va3pzix\",\"redacted\":true},"
			 "{\"type\":\"text\",\"text\":\"Hi there\"}],\"stopReason\":\"stop\","
			 "\"usage\":{\"input\":5,\"output\":7,\"cacheRead\":0,\"cacheWrite\":0,"
			 "\"totalTokens\":12}}");
	outcome_free(&o);
	check_splits(AN, an_redacted);
}

static const char an_error[] =
	AE("message_start", "{\"type\":\"message_start\",\"message\":{\"id\":\"msg_3\",\"usage\":"
	   "{\"input_tokens\":9,\"output_tokens\":1}}}")
	AE("content_block_start", "{\"type\":\"content_block_start\",\"index\":0,\"content_block\":"
	   "{\"type\":\"text\",\"text\":\"\"}}")
	AE("content_block_delta", "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":"
	   "{\"type\":\"text_delta\",\"text\":\"Partial\"}}")
	AE("error", "{\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}")
	AE("message_stop", "{\"type\":\"message_stop\"}");

Test(stream_anthropic, error_event)
{
	outcome_t o = run1(AN, an_error);
	cr_assert_eq(o.feed_rc, 0);
	cr_assert_str_eq(o.log, "usage 9/1/0/0/10\ntext[0] Partial\nerror overloaded_error Overloaded\n"
				"stop error \n");
	cr_assert(o.res.complete);
	cr_assert_str_eq(o.error_message, "Overloaded");
	cr_assert_str_eq(o.error_type, "overloaded_error");
	cr_assert(strstr(o.json, "\"stopReason\":\"error\""));
	cr_assert(strstr(o.json, "\"errorMessage\":\"Overloaded\""));
	pc_failover_input_t in = {.body = o.error_body, .body_len = strlen(o.error_body)};
	pc_failover_result_t fr;
	cr_assert_eq(pc_failover_classify(&in, &fr), 0);
	cr_assert_eq(fr.reason, PC_FAILOVER_OVERLOADED);
	outcome_free(&o);
	check_splits(AN, an_error);
}

Test(stream_anthropic, truncated_and_empty)
{
	size_t n = strlen(an_tools);
	for (size_t k = 0; k < n; k += 7) {
		outcome_t p = run_cuts(AN, an_tools, k, NULL, 0, NULL);
		cr_assert_eq(p.feed_rc, 0);
		cr_assert_not(p.res.complete);
		cr_assert_eq(p.res.stop_reason, PC_STOP_ERROR);
		cr_assert_str_eq(p.error_message, "stream ended before message_stop");
		outcome_free(&p);
	}
	/* An empty but complete answer. */
	outcome_t o = run1(AN, AE("message_start", "{\"type\":\"message_start\",\"message\":{}}")
				       AE("message_delta", "{\"type\":\"message_delta\",\"delta\":"
							   "{\"stop_reason\":\"end_turn\"}}")
					       AE("message_stop", "{\"type\":\"message_stop\"}"));
	cr_assert(o.res.complete);
	cr_assert_eq(o.res.nblocks, 0);
	cr_assert_str_eq(o.log, "stop stop end_turn\n");
	outcome_free(&o);
}

Test(stream_anthropic, stop_reason_mapping)
{
	static const struct {
		const char *sr;
		pc_stop_reason_t want;
		const char *msg;
	} cases[] = {
		{"end_turn", PC_STOP_STOP, NULL},
		{"stop_sequence", PC_STOP_STOP, NULL},
		{"pause_turn", PC_STOP_STOP, NULL},
		{"max_tokens", PC_STOP_LENGTH, NULL},
		{"tool_use", PC_STOP_TOOL_USE, NULL},
		{"refusal", PC_STOP_ERROR, "The model refused to complete the request"},
		{"sensitive", PC_STOP_ERROR, "The response was flagged by safety filters"},
		{"model_context_window_exceeded", PC_STOP_ERROR,
		 "Unhandled stop reason: model_context_window_exceeded"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char t[512];
		snprintf(t, sizeof(t),
			 AE("message_delta", "{\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"%s\"}}")
				 AE("message_stop", "{\"type\":\"message_stop\"}"),
			 cases[i].sr);
		outcome_t o = run1(AN, t);
		cr_assert_eq(o.res.stop_reason, cases[i].want, "%s", cases[i].sr);
		if (cases[i].msg)
			cr_assert_str_eq(o.error_message, cases[i].msg);
		else
			cr_assert_null(o.error_message);
		outcome_free(&o);
	}
	/* The overflow stop reason classifies as an overflow. */
	const char *m = "Unhandled stop reason: model_context_window_exceeded";
	pc_failover_input_t in = {.body = m, .body_len = strlen(m)};
	pc_failover_result_t fr;
	cr_assert_eq(pc_failover_classify(&in, &fr), 0);
	cr_assert_eq(fr.reason, PC_FAILOVER_CONTEXT_OVERFLOW);
}

Test(stream_anthropic, tool_input_given_whole)
{
	outcome_t o = run1(AN, AE("content_block_start", "{\"type\":\"content_block_start\",\"index\":0,"
				  "\"content_block\":{\"type\":\"tool_use\",\"id\":\"t1\",\"name\":\"f\","
				  "\"input\":{\"a\":[1,2]}}}")
				       AE("content_block_stop", "{\"type\":\"content_block_stop\",\"index\":0}")
					       AE("message_stop", "{\"type\":\"message_stop\"}"));
	cr_assert_str_eq(o.log, "start[0] #0 t1 f\nend[0] #0 t1 f {\"a\":[1,2]} obj\nstop toolUse \n");
	outcome_free(&o);
	/* Fragments replace an input given at the start. */
	o = run1(AN, AE("content_block_start", "{\"type\":\"content_block_start\",\"index\":0,"
			"\"content_block\":{\"type\":\"tool_use\",\"id\":\"t1\",\"name\":\"f\","
			"\"input\":{\"stale\":true}}}")
			     AE("content_block_delta", "{\"type\":\"content_block_delta\",\"index\":0,"
						       "\"delta\":{\"type\":\"input_json_delta\","
						       "\"partial_json\":\"{\\\"b\\\":2}\"}}")
				     AE("message_stop", "{\"type\":\"message_stop\"}"));
	cr_assert_str_eq(o.log, "start[0] #0 t1 f\nargs[0] #0 {\"b\":2}\nend[0] #0 t1 f {\"b\":2} obj\n"
				"stop toolUse \n");
	outcome_free(&o);
}

Test(stream_anthropic, usage_and_block_edges)
{
	/* A later 0 never erases a count already known. */
	outcome_t o = run1(AN, AE("message_start", "{\"type\":\"message_start\",\"message\":{\"usage\":"
					"{\"input_tokens\":5,\"cache_read_input_tokens\":9}}}")
				       AE("message_delta", "{\"type\":\"message_delta\",\"delta\":{},"
							   "\"usage\":{\"input_tokens\":0,\"output_tokens\":3}}")
					       AE("message_stop", "{\"type\":\"message_stop\"}"));
	cr_assert_str_eq(o.log, "usage 5/0/9/0/14\nusage 5/3/9/0/17\nstop stop \n");
	outcome_free(&o);
	/* Redacted thinking without its data. */
	o = run1(AN, AE("content_block_start", "{\"type\":\"content_block_start\",\"index\":0,"
			"\"content_block\":{\"type\":\"redacted_thinking\"}}")
			     AE("message_stop", "{\"type\":\"message_stop\"}"));
	cr_assert(strstr(o.json, "{\"type\":\"thinking\",\"thinking\":\"\",\"thinkingSignature\":\"\","
				 "\"redacted\":true}"),
		  "%s", o.json);
	outcome_free(&o);
}

Test(stream_anthropic, malformed)
{
	static const char *const bad[] = {
		AE("content_block_delta", "{\"type\":\"content_block_delta\",\"index\":5,\"delta\":"
		   "{\"type\":\"text_delta\",\"text\":\"x\"}}"),
		AE("content_block_start", "{\"type\":\"content_block_start\",\"index\":0,\"content_block\":"
		   "{\"type\":\"text\",\"text\":\"\"}}")
			AE("content_block_delta", "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":"
			   "{\"type\":\"input_json_delta\",\"partial_json\":\"{}\"}}"),
		AE("content_block_start", "{\"type\":\"content_block_start\",\"index\":0,\"content_block\":"
		   "{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"f\"}}")
			AE("content_block_delta", "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":"
			   "{\"type\":\"thinking_delta\",\"thinking\":\"x\"}}"),
		AE("content_block_start", "{\"type\":\"content_block_start\",\"content_block\":"
		   "{\"type\":\"text\"}}"),
		AE("content_block_start", "{\"type\":\"content_block_start\",\"index\":0}"),
		AE("content_block_start", "{\"type\":\"content_block_start\",\"index\":0,\"content_block\":"
		   "{\"type\":\"text\"}}")
			AE("content_block_delta", "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{}}"),
		AE("content_block_start", "{\"type\":\"content_block_start\",\"index\":0,\"content_block\":"
		   "{\"type\":\"thinking\"}}")
			AE("content_block_delta", "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":"
			   "{\"type\":\"text_delta\",\"text\":\"x\"}}"),
		AE("message_start", "{\"type\":\"message_start\",\"message\":"),
		AE("message_start", "[1]"),
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		outcome_t o = run1(AN, bad[i]);
		cr_assert_eq(o.res.decode_error, PC_EINVAL, "case %zu", i);
		cr_assert_eq(o.feed_rc, PC_EINVAL);
		cr_assert(o.error_message && strstr(o.error_message, "malformed stream"), "case %zu", i);
		cr_assert_not(o.res.complete);
		outcome_free(&o);
	}
	/* An error event whose data is not JSON still ends the stream. */
	outcome_t o = run1(AN, "event: error\ndata: Internal Server Error\n\n");
	cr_assert(o.res.complete);
	cr_assert_str_eq(o.error_message, "Internal Server Error");
	outcome_free(&o);
}

/* ---- the decoder's own rules ---- */

Test(stream, bad_arguments)
{
	pc_stream_decoder_t *d = NULL;
	cr_assert_eq(pc_stream_decoder_new(PC_API_NONE, NULL, NULL, &d), PC_EINVAL);
	cr_assert_eq(pc_stream_decoder_new((pc_provider_api_t)9, NULL, NULL, &d), PC_EINVAL);
	cr_assert_eq(pc_stream_decoder_new(OA, NULL, NULL, NULL), PC_EINVAL);
	cr_assert_eq(pc_stream_decoder_new(OA, NULL, NULL, &d), 0);
	cr_assert_eq(pc_stream_decoder_feed_sse(d, NULL), PC_EINVAL);
	cr_assert_eq(pc_stream_decoder_feed_sse(NULL, NULL), PC_EINVAL);
	cr_assert_eq(pc_stream_decoder_finish(d, NULL), PC_EINVAL);
	cr_assert_eq(pc_stream_decoder_finish(NULL, NULL), PC_EINVAL);
	cr_assert_eq(pc_stream_decoder_set_limits(NULL, NULL), PC_EINVAL);
	cr_assert_eq(pc_stream_result_to_json(NULL, NULL), PC_EINVAL);
	pc_stream_decoder_abort(NULL);
	pc_stream_decoder_free(NULL);
	/* Retry events and empty data are ignored. */
	pc_sse_event_t retry = {.kind = PC_SSE_RETRY, .type = "", .data = "", .id = "", .retry_ms = 5};
	cr_assert_eq(pc_stream_decoder_feed_sse(d, &retry), 0);
	pc_sse_event_t empty = {.kind = PC_SSE_MESSAGE, .type = "message", .data = "  ", .data_len = 2,
				.id = ""};
	cr_assert_eq(pc_stream_decoder_feed_sse(d, &empty), 0);
	cr_assert_eq(pc_stream_decoder_set_limits(d, NULL), PC_ESTATE, "limits are fixed once fed");
	pc_stream_result_t r;
	cr_assert_eq(pc_stream_decoder_finish(d, &r), 0);
	cr_assert_eq(pc_stream_decoder_feed_sse(d, &empty), PC_ESTATE, "no feeds after finish");
	pc_stream_decoder_free(d);
	cr_assert_str_eq(pc_stop_reason_name(PC_STOP_NONE), "");
	cr_assert_str_eq(pc_stop_reason_name(PC_STOP_TOOL_USE), "toolUse");
	cr_assert_str_eq(pc_stop_reason_name(PC_STOP_ABORTED), "aborted");
}

Test(stream, callback_stop_is_sticky)
{
	rec_t r = {.stop_at = 2, .stop_rc = -77};
	pc_stream_decoder_t *d = NULL;
	cr_assert_eq(pc_stream_decoder_new(OA, on_event, &r, &d), 0);
	pc_sse_parser_t *p = NULL;
	cr_assert_eq(pc_sse_parser_new(NULL, to_decoder, d, &p), 0);
	cr_assert_eq(pc_sse_feed(p, oa_text, strlen(oa_text)), -77);
	pc_sse_parser_free(p);
	pc_sse_event_t e = {.kind = PC_SSE_MESSAGE, .type = "message", .data = "[DONE]", .data_len = 6,
			    .id = ""};
	cr_assert_eq(pc_stream_decoder_feed_sse(d, &e), -77, "sticky");
	pc_stream_result_t res;
	cr_assert_eq(pc_stream_decoder_finish(d, &res), 0);
	cr_assert_eq(res.decode_error, -77);
	cr_assert_not(res.complete);
	cr_assert_str_eq(res.error_message, "stopped by the event callback");
	cr_assert_eq(r.count, 2);
	pc_stream_decoder_free(d);
	free(r.log.s);
}

Test(stream, callback_cannot_reenter)
{
	rec_t r = {0};
	pc_stream_decoder_t *d = NULL;
	cr_assert_eq(pc_stream_decoder_new(OA, on_event, &r, &d), 0);
	r.self = d;
	pc_sse_event_t e = {.kind = PC_SSE_MESSAGE, .type = "message",
			    .data = "{\"choices\":[{\"delta\":{\"content\":\"x\"}}]}", .id = ""};
	e.data_len = strlen(e.data);
	cr_assert_eq(pc_stream_decoder_feed_sse(d, &e), 0);
	cr_assert_eq(r.reentry_rc, PC_ESTATE);
	pc_stream_decoder_free(d);
	free(r.log.s);
}

Test(stream, abort)
{
	pc_stream_decoder_t *d = NULL;
	cr_assert_eq(pc_stream_decoder_new(AN, NULL, NULL, &d), 0);
	pc_sse_parser_t *p = NULL;
	cr_assert_eq(pc_sse_parser_new(NULL, to_decoder, d, &p), 0);
	cr_assert_eq(pc_sse_feed(p, an_tools, 900), 0);
	pc_stream_decoder_abort(d);
	cr_assert_eq(pc_sse_feed(p, an_tools + 900, strlen(an_tools) - 900), PC_ESTATE);
	pc_sse_parser_free(p);
	pc_stream_result_t r;
	cr_assert_eq(pc_stream_decoder_finish(d, &r), 0);
	cr_assert_eq(r.stop_reason, PC_STOP_ABORTED);
	cr_assert_not(r.complete);
	cJSON *j = NULL;
	cr_assert_eq(pc_stream_result_to_json(&r, &j), 0);
	cr_assert_str_eq(cJSON_GetObjectItem(j, "stopReason")->valuestring, "aborted");
	cJSON_Delete(j);
	pc_stream_decoder_free(d);
}

static char *many_tool_calls(int n)
{
	size_t cap = (size_t)n * 200 + 64;
	char *t = malloc(cap);
	cr_assert(t);
	size_t len = 0;
	for (int i = 0; i < n; i++)
		len += (size_t)snprintf(t + len, cap - len,
					"data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":%d,"
					"\"id\":\"c%d\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]}}]}\n\n",
					i, i);
	snprintf(t + len, cap - len, "data: [DONE]\n\n");
	return t;
}

Test(stream, limits)
{
	/* The default: 128 tool calls pass, 129 do not. */
	char *t = many_tool_calls(128);
	outcome_t o = run1(OA, t);
	cr_assert_eq(o.res.decode_error, 0);
	cr_assert(o.res.complete);
	outcome_free(&o);
	free(t);
	t = many_tool_calls(129);
	o = run1(OA, t);
	cr_assert_eq(o.res.decode_error, PC_ELIMIT);
	cr_assert_eq(o.feed_rc, PC_ELIMIT);
	cr_assert_str_eq(o.error_message, "stream limit: too many tool calls");
	outcome_free(&o);
	free(t);

	pc_stream_limits_t lim = {.max_tool_calls = 2};
	t = many_tool_calls(3);
	o = run_cuts(OA, t, strlen(t), NULL, 0, &lim);
	cr_assert_eq(o.res.decode_error, PC_ELIMIT);
	outcome_free(&o);
	free(t);

	lim = (pc_stream_limits_t){.max_bytes = strlen("Hello, wörld ✓")};
	o = run_cuts(OA, oa_text, strlen(oa_text), NULL, 0, &lim);
	cr_assert_eq(o.res.decode_error, 0, "exactly at the limit");
	outcome_free(&o);
	lim.max_bytes--;
	o = run_cuts(OA, oa_text, strlen(oa_text), NULL, 0, &lim);
	cr_assert_eq(o.res.decode_error, PC_ELIMIT);
	cr_assert_str_eq(o.error_message, "stream limit: response too large");
	cr_assert_not(o.res.complete);
	outcome_free(&o);

	lim = (pc_stream_limits_t){.max_blocks = 3};
	o = run_cuts(AN, an_tools, strlen(an_tools), NULL, 0, &lim);
	cr_assert_eq(o.res.decode_error, PC_ELIMIT);
	cr_assert_str_eq(o.error_message, "stream limit: too many content blocks");
	outcome_free(&o);
	ASSERT_NO_LEAKS();
}

/* Fails cJSON's allocations after the first `n` (n < 0: never), so every
 * cleanup path that follows a failed cJSON call runs. */
static long oom_left = -1;

static void *oom_malloc(size_t size)
{
	if (oom_left == 0)
		return NULL;
	if (oom_left > 0)
		oom_left--;
	return malloc(size);
}

static void oom_arm(long n)
{
	oom_left = n;
	cJSON_Hooks h = {.malloc_fn = oom_malloc, .free_fn = free};
	cJSON_InitHooks(&h);
}

static void oom_disarm(void)
{
	oom_left = -1;
	cJSON_InitHooks(NULL);
}

/* Decoding with cJSON failing at every allocation in turn: each run ends
 * in a clean error (cJSON cannot tell a failed parse from bad JSON, so
 * PC_EINVAL is possible too) or in the full result; nothing leaks. */
static void sweep_decode(pc_provider_api_t api, const char *t)
{
	outcome_t ref = run1(api, t);
	for (long n = 0;; n++) {
		pc_stream_decoder_t *d = NULL;
		cr_assert_eq(pc_stream_decoder_new(api, NULL, NULL, &d), 0);
		pc_sse_parser_t *p = NULL;
		cr_assert_eq(pc_sse_parser_new(NULL, to_decoder, d, &p), 0);
		oom_arm(n);
		int rc = pc_sse_feed(p, t, strlen(t));
		oom_disarm();
		pc_sse_parser_free(p);
		cr_assert(rc == 0 || rc == PC_ENOMEM || rc == PC_EINVAL, "allocation %ld: %d", n, rc);
		pc_stream_result_t r;
		cr_assert_eq(pc_stream_decoder_finish(d, &r), 0);
		if (rc == 0) {
			cJSON *j = NULL;
			cr_assert_eq(pc_stream_result_to_json(&r, &j), 0);
			char *s = cJSON_PrintUnformatted(j);
			cr_assert_str_eq(s, ref.json);
			cJSON_free(s);
			cJSON_Delete(j);
			pc_stream_decoder_free(d);
			break;
		}
		cr_assert_eq(r.decode_error, rc);
		cr_assert_not(r.complete);
		pc_stream_decoder_free(d);
		cr_assert_lt(n, 100000);
	}
	outcome_free(&ref);
	ASSERT_NO_LEAKS();
}

Test(stream, out_of_memory_decoding)
{
	sweep_decode(OA, oa_parallel);
	sweep_decode(AN, an_tools);
}

Test(stream, out_of_memory_to_json)
{
	pc_stream_decoder_t *d = NULL;
	cr_assert_eq(pc_stream_decoder_new(AN, NULL, NULL, &d), 0);
	pc_sse_parser_t *p = NULL;
	cr_assert_eq(pc_sse_parser_new(NULL, to_decoder, d, &p), 0);
	cr_assert_eq(pc_sse_feed(p, an_tools, strlen(an_tools)), 0);
	pc_sse_parser_free(p);
	pc_stream_result_t r;
	cr_assert_eq(pc_stream_decoder_finish(d, &r), 0);
	for (long n = 0;; n++) {
		cJSON *j = NULL;
		oom_arm(n);
		int rc = pc_stream_result_to_json(&r, &j);
		oom_disarm();
		if (rc == 0) {
			cJSON_Delete(j);
			cr_assert_gt(n, 10);
			break;
		}
		cr_assert_eq(rc, PC_ENOMEM);
		cr_assert_null(j);
	}
	pc_stream_decoder_free(d);
	ASSERT_NO_LEAKS();
}

Test(stream, garbage_never_crashes)
{
	uint64_t x = 0x243F6A8885A308D3ull;
	static const char *const pieces[] = {
		"{", "}", "[", "]", "\"type\":", "\"content_block_start\"", "\"content_block_delta\"",
		"\"index\":", "0", "1", "\"delta\":", "\"text_delta\"", "\"tool_calls\"", "\"choices\"",
		"\"function\":", "\"arguments\":", "\"id\":\"x\"", ",", ":", "\"error\":", "null",
		"\"input_json_delta\"", "\"partial_json\":\"{\"", "\"content_block\":", "\"tool_use\"",
		"\"message_stop\"", "[DONE]", "\"usage\":{\"output_tokens\":3}", "\"finish_reason\":\"stop\"",
	};
	char buf[600];
	for (int it = 0; it < 6000; it++) {
		pc_stream_decoder_t *d = NULL;
		pc_provider_api_t api = it % 2 ? OA : AN;
		rec_t r = {0};
		cr_assert_eq(pc_stream_decoder_new(api, on_event, &r, &d), 0);
		for (int ev = 0; ev < 8; ev++) {
			size_t len = 0;
			while (len < sizeof(buf) - 40) {
				x ^= x << 13;
				x ^= x >> 7;
				x ^= x << 17;
				if (x % 5 == 0)
					break;
				if (x % 4) {
					const char *p = pieces[(x >> 8) % (sizeof(pieces) / sizeof(pieces[0]))];
					size_t pl = strlen(p);
					memcpy(buf + len, p, pl);
					len += pl;
				} else {
					buf[len++] = (char)(x >> 16);
				}
			}
			buf[len] = 0;
			pc_sse_event_t e = {.kind = PC_SSE_MESSAGE, .type = (x >> 30) % 2 ? "error" : "message",
					    .data = buf, .data_len = len, .id = ""};
			if (pc_stream_decoder_feed_sse(d, &e))
				break;
		}
		pc_stream_result_t res;
		cr_assert_eq(pc_stream_decoder_finish(d, &res), 0);
		cJSON *j = NULL;
		cr_assert_eq(pc_stream_result_to_json(&res, &j), 0);
		cJSON_Delete(j);
		pc_stream_decoder_free(d);
		free(r.log.s);
	}
	ASSERT_NO_LEAKS();
}

Test(stream, random_multi_cuts)
{
	const char *ts[] = {oa_text, oa_parallel, oa_error, an_tools, an_redacted, an_error};
	pc_provider_api_t apis[] = {OA, OA, OA, AN, AN, AN};
	uint64_t x = 0xDEADBEEFCAFEF00Dull;
	for (size_t i = 0; i < sizeof(ts) / sizeof(ts[0]); i++) {
		outcome_t ref = run1(apis[i], ts[i]);
		size_t n = strlen(ts[i]);
		for (int it = 0; it < 200; it++) {
			size_t cuts[32], nc = 0, at = 0;
			while (nc < 32) {
				x ^= x << 13;
				x ^= x >> 7;
				x ^= x << 17;
				at += 1 + x % 97;
				if (at >= n)
					break;
				cuts[nc++] = at;
			}
			outcome_t o = run_cuts(apis[i], ts[i], n, cuts, nc, NULL);
			cr_assert_str_eq(o.log, ref.log);
			cr_assert_str_eq(o.json, ref.json);
			outcome_free(&o);
		}
		outcome_free(&ref);
	}
}
