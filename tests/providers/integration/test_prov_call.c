/*
 * Provider stream actors against the mock LLM server on 127.0.0.1: every
 * scripted behaviour arrives as the right sequence of messages and the
 * right classified failure, for both APIs; abort and kill release
 * everything; a thousand concurrent streams complete.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>

#include "agents/mock/mock_server.h"
#include "agents/providers/model_call.h"
#include "io/io.h"
#include "test_util.h"

typedef struct seen {
	pthread_mutex_t lock;
	int events[16]; /* per pc_stream_event_kind_t */
	int dones;
	bool done_last; /* no event after DONE */
	char text[4096];
	char thinking[1024];
	char args[2][256];
	char names[2][64];
	int tool_ends;
	pc_model_done_msg_t done;
	char message[8192];
	char error[256];
	uint32_t ok_count; /* the concurrency test's counter */
} seen_t;

static int owner_receive(pc_ctx_t *ctx, void *state, pc_msg_t *msg)
{
	(void)ctx;
	seen_t *s = state;
	pthread_mutex_lock(&s->lock);
	if (msg->type == PC_MSG_MODEL_EVENT) {
		const pc_model_event_msg_t *e = pc_msg_cdata(msg);
		if (s->dones)
			s->done_last = false;
		if (e->kind < 16)
			s->events[e->kind]++;
		if (e->kind == PC_STREAM_TEXT_DELTA)
			strncat(s->text, e->text, sizeof(s->text) - strlen(s->text) - 1);
		if (e->kind == PC_STREAM_THINKING_DELTA)
			strncat(s->thinking, e->text, sizeof(s->thinking) - strlen(s->thinking) - 1);
		if (e->kind == PC_STREAM_TOOL_CALL_END && s->tool_ends < 2) {
			snprintf(s->args[s->tool_ends], sizeof(s->args[0]), "%s", e->text);
			snprintf(s->names[s->tool_ends], sizeof(s->names[0]), "%s", e->name);
			s->tool_ends++;
		}
	} else if (msg->type == PC_MSG_MODEL_DONE) {
		const pc_model_done_msg_t *d = pc_msg_cdata(msg);
		s->dones++;
		s->done = *d;
		snprintf(s->message, sizeof(s->message), "%s", d->message ? d->message : "");
		snprintf(s->error, sizeof(s->error), "%s", d->error);
		if (d->result == 0)
			s->ok_count++;
	}
	pthread_mutex_unlock(&s->lock);
	return 0;
}

static const pc_behavior_t owner_b = {.name = "owner", .receive = owner_receive};

static pc_runtime_t *rt;
static pc_io_t *io;
static int fds_before; /* descriptors open before the I/O layer started */
static pc_mock_server_t *mock;
static char base[64];

static void setup(void)
{
	fds_before = open_fds();
	rt = start_rt(2);
	pc_io_config_t cfg = {.threads = 1, .max_host_connections = 2048};
	cr_assert_eq(pc_io_new(rt, &cfg, &io), 0);
	pc_mock_server_config_t mc = {0};
	char err[256];
	cr_assert_eq(pc_mock_server_start(io, &mc, &mock, err, sizeof(err)), 0, "%s", err);
	snprintf(base, sizeof(base), "http://127.0.0.1:%u", pc_mock_server_port(mock));
}

static void teardown(void)
{
	pc_mock_server_free(mock);
	pc_io_free(io);
	pc_runtime_stop(rt);
	FREE_RUNTIME_CHECKED(rt);
	/* Every socket, epoll and eventfd the layer opened is closed again. */
	cr_assert_eq(open_fds(), fds_before, "file descriptors leaked");
}

TestSuite(model_call, .init = setup, .fini = teardown, .timeout = 120);

static seen_t *seen_new(void)
{
	seen_t *s = calloc(1, sizeof(*s));
	pthread_mutex_init(&s->lock, NULL);
	s->done_last = true;
	return s;
}

static int events_of(seen_t *s, pc_stream_event_kind_t kind)
{
	pthread_mutex_lock(&s->lock);
	int n = s->events[kind];
	pthread_mutex_unlock(&s->lock);
	return n;
}

static int dones(seen_t *s)
{
	pthread_mutex_lock(&s->lock);
	int d = s->dones;
	pthread_mutex_unlock(&s->lock);
	return d;
}

typedef struct call_opts {
	uint32_t idle_timeout_ms;
	uint32_t total_timeout_ms;
	bool keep; /* return the call's actor instead of releasing it */
} call_opts_t;

/* Starts a streaming call whose answer is scripted by `step` (JSON). */
static pc_actor_t *start_call(pc_provider_api_t api, const char *step, seen_t *s, pc_actor_t **owner,
			      const call_opts_t *o)
{
	cr_assert_eq(pc_spawn(rt, &owner_b, s, owner), 0);
	char url[128], hdr[1024];
	snprintf(url, sizeof(url), "%s%s", base,
		 api == PC_API_OPENAI_COMPLETIONS ? "/v1/chat/completions" : "/v1/messages");
	snprintf(hdr, sizeof(hdr), "x-mock-scenario: %s", step);
	const char *headers[] = {"Content-Type: application/json", hdr};
	const char *body = api == PC_API_OPENAI_COMPLETIONS
				   ? "{\"model\":\"m\",\"stream\":true,\"stream_options\":{\"include_usage\":true},"
				     "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}"
				   : "{\"model\":\"m\",\"stream\":true,\"max_tokens\":100,"
				     "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
	pc_model_call_config_t cfg = {
		.api = api,
		.url = url,
		.headers = headers,
		.header_count = 2,
		.body = body,
		.body_len = strlen(body),
		.provider = api == PC_API_OPENAI_COMPLETIONS ? "openai" : "anthropic",
		.deltas = true,
		.tag = 42,
		.idle_timeout_ms = o ? o->idle_timeout_ms : 0,
		.total_timeout_ms = o ? o->total_timeout_ms : 0,
	};
	pc_actor_t *call = NULL;
	cr_assert_eq(pc_model_call_start(io, &cfg, *owner, &call), 0);
	if (o && o->keep)
		return call;
	pc_actor_release(call);
	return NULL;
}

static void end_call(seen_t *s, pc_actor_t *owner)
{
	quiesce(rt);
	pc_actor_stop(owner, PC_EXIT_NORMAL);
	pc_actor_release(owner);
	quiesce(rt);
	pc_io_stats_t st;
	pc_io_stats(io, &st);
	cr_assert_eq(st.transfers_live, 0, "a transfer was left running");
	pthread_mutex_destroy(&s->lock);
	free(s);
}

/* Runs one scripted call to completion. */
static seen_t *run(pc_provider_api_t api, const char *step, const call_opts_t *o, pc_actor_t **owner)
{
	seen_t *s = seen_new();
	start_call(api, step, s, owner, o);
	AWAIT(dones(s) == 1, 20000);
	quiesce(rt);
	cr_assert(s->done_last, "an event arrived after DONE");
	cr_assert_eq(s->done.tag, 42);
	return s;
}

static const pc_provider_api_t apis[] = {PC_API_OPENAI_COMPLETIONS, PC_API_ANTHROPIC_MESSAGES};

Test(model_call, text_streams_as_deltas_then_a_complete_message)
{
	for (int i = 0; i < 2; i++) {
		pc_actor_t *owner;
		seen_t *s = run(apis[i], "{\"kind\":\"text\",\"text\":\"hello brave new world\",\"chunks\":4,"
					 "\"delay_ms\":5,\"ttft_ms\":30}",
				NULL, &owner);
		cr_assert_eq(s->done.result, 0, "%s", s->error);
		cr_assert_eq(s->events[PC_STREAM_TEXT_DELTA], 4);
		cr_assert_str_eq(s->text, "hello brave new world");
		cr_assert_eq(s->done.stop_reason, PC_STOP_STOP);
		cr_assert_eq(s->done.http_status, 200);
		cr_assert(s->done.ttft_us >= 30000, "ttft %" PRIu64 " us", s->done.ttft_us);
		cr_assert(s->done.usage.output > 0);
		cr_assert(strstr(s->message, "\"text\":\"hello brave new world\""), "%s", s->message);
		cr_assert(strstr(s->message, "\"stopReason\":\"stop\""), "%s", s->message);
		end_call(s, owner);
	}
}

Test(model_call, parallel_tool_calls_are_assembled_from_fragments)
{
	for (int i = 0; i < 2; i++) {
		pc_actor_t *owner;
		seen_t *s = run(apis[i],
				"{\"kind\":\"tool_calls\",\"arg_chunks\":4,\"tool_calls\":["
				"{\"name\":\"read\",\"arguments\":{\"path\":\"a.txt\"}},"
				"{\"name\":\"write\",\"arguments\":{\"path\":\"b.txt\",\"n\":1}}]}",
				NULL, &owner);
		cr_assert_eq(s->done.result, 0, "%s", s->error);
		cr_assert_eq(s->done.stop_reason, PC_STOP_TOOL_USE);
		cr_assert_eq(s->events[PC_STREAM_TOOL_CALL_START], 2);
		cr_assert_eq(s->tool_ends, 2);
		cr_assert_str_eq(s->names[0], "read");
		cr_assert_str_eq(s->names[1], "write");
		cJSON *a0 = cJSON_Parse(s->args[0]), *a1 = cJSON_Parse(s->args[1]);
		cr_assert_str_eq(cJSON_GetObjectItem(a0, "path")->valuestring, "a.txt");
		cr_assert_eq(cJSON_GetObjectItem(a1, "n")->valueint, 1);
		cJSON_Delete(a0);
		cJSON_Delete(a1);
		cr_assert(s->events[PC_STREAM_TOOL_CALL_ARGS] >= 4, "args fragments: %d",
			  s->events[PC_STREAM_TOOL_CALL_ARGS]);
		end_call(s, owner);
	}
}

Test(model_call, reasoning_only_and_empty_answers)
{
	for (int i = 0; i < 2; i++) {
		pc_actor_t *owner;
		seen_t *s = run(apis[i], "{\"kind\":\"reasoning\",\"reasoning\":\"let me think\"}", NULL, &owner);
		cr_assert_eq(s->done.result, 0, "%s", s->error);
		cr_assert_str_eq(s->thinking, "let me think");
		cr_assert_eq(s->events[PC_STREAM_TEXT_DELTA], 0);
		end_call(s, owner);

		s = run(apis[i], "{\"kind\":\"empty\"}", NULL, &owner);
		cr_assert_eq(s->done.result, 0, "%s", s->error);
		cr_assert_eq(s->events[PC_STREAM_TEXT_DELTA], 0);
		cr_assert_eq(s->events[PC_STREAM_TOOL_CALL_START], 0);
		cr_assert_str_eq(s->message, ""); /* nothing to assemble */
		end_call(s, owner);
	}
}

static void expect_failure(pc_provider_api_t api, const char *step, pc_failover_reason_t reason, int status,
			   const call_opts_t *o)
{
	pc_actor_t *owner;
	seen_t *s = run(api, step, o, &owner);
	cr_assert_neq(s->done.result, 0);
	cr_assert_eq(s->done.failure.reason, reason, "%s: got %s (%s), want %s; error %s", step,
		     pc_failover_reason_name(s->done.failure.reason), s->done.failure.detail,
		     pc_failover_reason_name(reason), s->error);
	if (status >= 0)
		cr_assert_eq(s->done.http_status, status);
	cr_assert_not(s->done.aborted);
	end_call(s, owner);
}

Test(model_call, http_errors_are_classified)
{
	for (int i = 0; i < 2; i++) {
		pc_actor_t *owner;
		seen_t *s = run(apis[i], "{\"kind\":\"error\",\"status\":429,\"retry_after\":1}", NULL, &owner);
		cr_assert_eq(s->done.failure.reason, PC_FAILOVER_RATE_LIMIT);
		cr_assert_eq(s->done.failure.retry_after_ms, 1000);
		cr_assert(s->done.failure.failover);
		cr_assert_eq(s->done.http_status, 429);
		end_call(s, owner);
		expect_failure(apis[i], "{\"kind\":\"error\",\"status\":401}", PC_FAILOVER_AUTH, 401, NULL);
		expect_failure(apis[i], "{\"kind\":\"error\",\"status\":402}", PC_FAILOVER_BILLING, 402, NULL);
		/* OpenAI's 500 says type server_error; Anthropic's says api_error
		 * "Internal server error", which OpenClaw retries as a timeout. */
		expect_failure(apis[i], "{\"kind\":\"error\",\"status\":500}",
			       i == 0 ? PC_FAILOVER_SERVER_ERROR : PC_FAILOVER_TIMEOUT, 500, NULL);
		expect_failure(apis[i], "{\"kind\":\"error\",\"status\":529}", PC_FAILOVER_OVERLOADED, 529, NULL);
	}
	expect_failure(PC_API_ANTHROPIC_MESSAGES, "{\"kind\":\"error\",\"status\":503}", PC_FAILOVER_OVERLOADED, 503,
		       NULL);
}

Test(model_call, context_overflow_asks_for_compaction)
{
	for (int i = 0; i < 2; i++) {
		pc_actor_t *owner;
		seen_t *s = run(apis[i], "{\"kind\":\"context_overflow\"}", NULL, &owner);
		cr_assert_eq(s->done.failure.reason, PC_FAILOVER_CONTEXT_OVERFLOW, "%s", s->error);
		cr_assert(s->done.failure.compact);
		cr_assert_not(s->done.failure.failover);
		cr_assert_eq(s->done.http_status, 400);
		end_call(s, owner);
	}
}

Test(model_call, stalls_and_cut_streams_are_transport_failures)
{
	call_opts_t idle = {.idle_timeout_ms = 200};
	for (int i = 0; i < 2; i++) {
		/* Headers, then silence. */
		expect_failure(apis[i], "{\"kind\":\"stall\",\"ms\":3000}", PC_FAILOVER_TIMEOUT, -1, &idle);
		/* Silence before the headers. */
		expect_failure(apis[i], "{\"kind\":\"stall\",\"ms\":3000,\"before_headers\":true}",
			       PC_FAILOVER_TIMEOUT, 0, &idle);
		/* A stream that stalls after two chunks. */
		expect_failure(apis[i], "{\"kind\":\"text\",\"text\":\"a b c d\",\"chunks\":4,\"stall_after\":2}",
			       PC_FAILOVER_TIMEOUT, 200, &idle);
		/* The peer vanishes mid-stream. */
		expect_failure(apis[i], "{\"kind\":\"text\",\"text\":\"a b c d\",\"chunks\":4,\"disconnect_after\":2}",
			       PC_FAILOVER_TIMEOUT, 200, NULL);
		/* Ends without its terminator. */
		expect_failure(apis[i], "{\"kind\":\"text\",\"text\":\"a b\",\"malformed\":\"truncated\"}",
			       PC_FAILOVER_TIMEOUT, 200, NULL);
	}
}

Test(model_call, malformed_sse_fails_cleanly)
{
	for (int i = 0; i < 2; i++) {
		pc_actor_t *owner;
		seen_t *s = run(apis[i], "{\"kind\":\"text\",\"text\":\"a b c\",\"chunks\":3,\"malformed\":\"bad_json\"}",
				NULL, &owner);
		cr_assert_neq(s->done.result, 0);
		cr_assert_eq(s->done.transport, PC_TRANSPORT_MALFORMED, "transport %s",
			     pc_transport_error_name(s->done.transport));
		end_call(s, owner);
	}
}

Test(model_call, abort_mid_stream_is_never_failed_over)
{
	for (int i = 0; i < 2; i++) {
		seen_t *s = seen_new();
		pc_actor_t *owner;
		call_opts_t o = {.keep = true};
		pc_actor_t *call = start_call(apis[i], "{\"kind\":\"text\",\"text\":\"a b c d e f\",\"chunks\":6,"
						      "\"stall_after\":2,\"stall_ms\":10000}",
					      s, &owner, &o);
		AWAIT(events_of(s, PC_STREAM_TEXT_DELTA) >= 2, 5000);
		uint64_t t0 = now_ms();
		cr_assert_eq(pc_model_call_abort(call), 0);
		AWAIT(dones(s) == 1, 5000);
		cr_assert(now_ms() - t0 < 2000);
		cr_assert(s->done.aborted);
		cr_assert_eq(s->done.transport, PC_TRANSPORT_ABORTED);
		cr_assert_not(s->done.failure.failover);
		cr_assert_eq(s->done.stop_reason, PC_STOP_ABORTED);
		pc_actor_release(call);
		end_call(s, owner);
	}
}

Test(model_call, killing_the_actor_releases_the_transfer)
{
	seen_t *s = seen_new();
	pc_actor_t *owner;
	call_opts_t o = {.keep = true};
	pc_actor_t *call = start_call(PC_API_OPENAI_COMPLETIONS, "{\"kind\":\"stall\",\"ms\":10000}", s, &owner, &o);
	AWAIT(({
		      pc_io_stats_t st;
		      pc_io_stats(io, &st);
		      st.transfers_live == 1;
	      }),
	      5000);
	pc_actor_stop(call, PC_EXIT_KILLED);
	pc_actor_release(call);
	AWAIT(({
		      pc_io_stats_t st;
		      pc_io_stats(io, &st);
		      st.transfers_live == 0;
	      }),
	      5000);
	cr_assert_eq(dones(s), 0); /* a killed call says nothing more */
	end_call(s, owner);
}

Test(model_call, a_thousand_concurrent_streams_complete)
{
	enum { N = 1000 };
	seen_t *s = seen_new();
	pc_actor_t *owner;
	cr_assert_eq(pc_spawn(rt, &owner_b, s, &owner), 0);
	char url[128];
	snprintf(url, sizeof(url), "%s/v1/chat/completions", base);
	const char *headers[] = {"x-mock-scenario: {\"kind\":\"text\",\"text\":\"one two three\",\"chunks\":3,"
				 "\"delay_ms\":20}"};
	const char *body = "{\"model\":\"m\",\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
	pc_model_call_config_t cfg = {
		.api = PC_API_OPENAI_COMPLETIONS,
		.url = url,
		.headers = headers,
		.header_count = 1,
		.body = body,
		.body_len = strlen(body),
		.provider = "openai",
	};
	for (int i = 0; i < N; i++)
		cr_assert_eq(pc_model_call_start(io, &cfg, owner, NULL), 0);
	AWAIT(dones(s) == N, 60000);
	cr_assert_eq(s->ok_count, N, "only %u of %d succeeded; last error: %s", s->ok_count, N, s->error);
	pc_io_stats_t st;
	pc_io_stats(io, &st);
	/* They ran side by side: more than a handful of connections at once. */
	cr_assert(st.transfers_started >= N);
	end_call(s, owner);
}

/* An error status's text is the provider's own (status, message, then the
 * error's type and code), with a quoted key masked: the run's rules and
 * its error message read it. */
Test(model_call, http_error_text_is_the_providers_own_words)
{
	pc_actor_t *owner;
	seen_t *s = run(PC_API_OPENAI_COMPLETIONS,
			"{\"kind\":\"error\",\"status\":401,\"message\":\"Incorrect API key provided: "
			"sk-proj-abcdefgh12345678. You can find your API key at "
			"https://platform.openai.com/account/api-keys.\"}",
			NULL, &owner);
	cr_assert_str_eq(s->error, "401 Incorrect API key provided: sk-***. You can find your API key at "
				   "https://platform.openai.com/account/api-keys. "
				   "(invalid_request_error, invalid_api_key)");
	end_call(s, owner);
	s = run(PC_API_ANTHROPIC_MESSAGES, "{\"kind\":\"error\",\"status\":529}", NULL, &owner);
	cr_assert_str_eq(s->error, "529 Overloaded (overloaded_error)");
	end_call(s, owner);
}
