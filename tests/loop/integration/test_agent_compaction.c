/*
 * Compaction (agents/compaction): the cut point never parts a tool call
 * from its results and folds a leading summary into the next; the prompt
 * carries the transcript and the identifier rules; and the actor, end to
 * end against the mock LLM and a real store, rewrites the transcript as
 * [summary, tail...] -- or leaves it untouched when the model fails, when
 * aborted, stopped or timed out -- retries once over a racing append, and
 * always sends exactly one DONE.
 */
#include <criterion/criterion.h>

#include <ftw.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agents/attempt/context_guard.h"
#include "agents/compaction/compaction.h"
#include "agents/mock/mock_server.h"
#include "io/io.h"
#include "io/lock/session_lock.h"
#include "io/store/store.h"
#include "test_util.h"

/* ---- pure helpers ---- */

static cJSON *parse(const char *json)
{
	cJSON *j = cJSON_Parse(json);
	cr_assert_not_null(j, "bad test JSON: %s", json);
	return j;
}

static char *repeat(char c, size_t n)
{
	char *s = malloc(n + 1);
	cr_assert_not_null(s);
	memset(s, c, n);
	s[n] = '\0';
	return s;
}

/* Unified messages of exactly `chars` estimated chars each. */
static cJSON *user_msg(size_t chars)
{
	char *t = repeat('u', chars);
	cJSON *m = cJSON_CreateObject();
	cJSON_AddStringToObject(m, "role", "user");
	cJSON_AddStringToObject(m, "content", t);
	free(t);
	return m;
}

static cJSON *assistant_text_msg(size_t chars)
{
	char *t = repeat('a', chars);
	cJSON *m = cJSON_CreateObject();
	cJSON_AddStringToObject(m, "role", "assistant");
	cJSON *content = cJSON_AddArrayToObject(m, "content");
	cJSON *b = cJSON_CreateObject();
	cJSON_AddStringToObject(b, "type", "text");
	cJSON_AddStringToObject(b, "text", t);
	cJSON_AddItemToArray(content, b);
	free(t);
	return m;
}

static cJSON *tool_call_msg(int calls)
{
	cJSON *m = cJSON_CreateObject();
	cJSON_AddStringToObject(m, "role", "assistant");
	cJSON *content = cJSON_AddArrayToObject(m, "content");
	for (int i = 0; i < calls; i++) {
		cJSON *b = cJSON_CreateObject();
		char id[16];
		snprintf(id, sizeof(id), "call_%d", i);
		cJSON_AddStringToObject(b, "type", "toolCall");
		cJSON_AddStringToObject(b, "id", id);
		cJSON_AddStringToObject(b, "name", "read");
		cJSON_AddItemToObject(b, "arguments", parse("{\"path\":\"a.txt\"}"));
		cJSON_AddItemToArray(content, b);
	}
	return m;
}

static cJSON *tool_result_msg(size_t chars)
{
	char *t = repeat('r', chars);
	cJSON *m = cJSON_CreateObject();
	cJSON_AddStringToObject(m, "role", "toolResult");
	cJSON_AddStringToObject(m, "toolCallId", "call_0");
	cJSON_AddStringToObject(m, "toolName", "read");
	cJSON *content = cJSON_AddArrayToObject(m, "content");
	cJSON *b = cJSON_CreateObject();
	cJSON_AddStringToObject(b, "type", "text");
	cJSON_AddStringToObject(b, "text", t);
	cJSON_AddItemToArray(content, b);
	free(t);
	return m;
}

static cJSON *summary_msg(const char *summary)
{
	char *content = NULL;
	cr_assert_eq(pc_compaction_summary_content(summary, 1000, "overflow", &content), 0);
	cJSON *m = parse(content);
	free(content);
	return m;
}

static size_t cut(const cJSON *msgs, uint64_t keep)
{
	size_t first = 12345;
	cr_assert_eq(pc_compaction_cut_point(msgs, keep, &first), 0);
	return first;
}

static uint64_t tokens_from(const cJSON *msgs, size_t from)
{
	size_t chars = 0;
	for (int i = (int)from; i < cJSON_GetArraySize(msgs); i++)
		chars += pc_ctx_message_chars(cJSON_GetArrayItem(msgs, i));
	return pc_ctx_chars_to_tokens(chars);
}

/* ---- the cut point ---- */

Test(compaction_pure, keeps_the_newest_messages_within_the_budget)
{
	cJSON *msgs = cJSON_CreateArray();
	for (int i = 0; i < 10; i++)
		cJSON_AddItemToArray(msgs, i % 2 ? assistant_text_msg(400) : user_msg(400)); /* 100 tokens each */
	cr_assert_eq(cut(msgs, 250), 8);
	cr_assert_leq(tokens_from(msgs, 8), 250);
	cr_assert_eq(cut(msgs, 300), 7);
	cr_assert_eq(cut(msgs, 299), 8);
	/* At least the last message, however big. */
	cr_assert_eq(cut(msgs, 10), 9);
	cr_assert_eq(cut(msgs, 0), 9);
	/* Everything fits: nothing to summarise. */
	cr_assert_eq(cut(msgs, 1000), 0);
	cr_assert_eq(cut(msgs, 100000), 0);
	cJSON_Delete(msgs);
}

Test(compaction_pure, short_histories_have_nothing_to_summarise)
{
	cJSON *msgs = cJSON_CreateArray();
	cr_assert_eq(cut(msgs, 10), 0);
	cJSON_AddItemToArray(msgs, user_msg(4000));
	cr_assert_eq(cut(msgs, 10), 0); /* one message: it is the tail */
	cJSON_AddItemToArray(msgs, assistant_text_msg(40));
	cr_assert_eq(cut(msgs, 20000), 0);
	cJSON_Delete(msgs);
}

Test(compaction_pure, bad_arguments)
{
	size_t first;
	cJSON *obj = cJSON_CreateObject();
	cr_assert_eq(pc_compaction_cut_point(NULL, 1, &first), PC_EINVAL);
	cr_assert_eq(pc_compaction_cut_point(obj, 1, &first), PC_EINVAL);
	cr_assert_eq(pc_compaction_cut_point(obj, 1, NULL), PC_EINVAL);
	cJSON *out = NULL;
	cr_assert_eq(pc_compaction_prompt(NULL, 0, NULL, &out), PC_EINVAL);
	cJSON *arr = cJSON_CreateArray();
	cr_assert_eq(pc_compaction_prompt(arr, 1, NULL, &out), PC_EINVAL); /* n past the end */
	cr_assert_eq(pc_compaction_context_message(obj, &out), PC_EINVAL); /* no summary */
	char *s = NULL;
	cr_assert_eq(pc_compaction_summary_content(NULL, 0, NULL, &s), PC_EINVAL);
	cJSON_Delete(obj);
	cJSON_Delete(arr);
}

Test(compaction_pure, never_parts_a_tool_call_from_its_results)
{
	/* [u, a(2 calls), r, r, a]: a budget that reaches into the results
	 * moves back to the assistant that made the calls. */
	cJSON *msgs = cJSON_CreateArray();
	cJSON_AddItemToArray(msgs, user_msg(400));
	cJSON_AddItemToArray(msgs, tool_call_msg(2));
	cJSON_AddItemToArray(msgs, tool_result_msg(200)); /* 400 chars: 100 tokens */
	cJSON_AddItemToArray(msgs, tool_result_msg(200));
	cJSON_AddItemToArray(msgs, assistant_text_msg(400));
	cr_assert_eq(cut(msgs, 100), 4);  /* only the answer */
	cr_assert_eq(cut(msgs, 200), 1);  /* would start on the second result */
	cr_assert_eq(cut(msgs, 300), 1);  /* would start on the first result */
	cr_assert_eq(cut(msgs, 330), 1);  /* the calls fit as well */
	cr_assert_eq(cut(msgs, 1000), 0); /* everything fits */
	cJSON_Delete(msgs);

	/* The tail is the results themselves: [u, a, u, a(call), r]. */
	msgs = cJSON_CreateArray();
	cJSON_AddItemToArray(msgs, user_msg(400));
	cJSON_AddItemToArray(msgs, assistant_text_msg(400));
	cJSON_AddItemToArray(msgs, user_msg(400));
	cJSON_AddItemToArray(msgs, tool_call_msg(1));
	cJSON_AddItemToArray(msgs, tool_result_msg(2000));
	cr_assert_eq(cut(msgs, 10), 3);
	cJSON_Delete(msgs);

	/* A pending call at the end (no results yet) is kept whole. */
	msgs = cJSON_CreateArray();
	cJSON_AddItemToArray(msgs, user_msg(400));
	cJSON_AddItemToArray(msgs, assistant_text_msg(400));
	cJSON_AddItemToArray(msgs, user_msg(400));
	cJSON_AddItemToArray(msgs, tool_call_msg(3));
	cr_assert_eq(cut(msgs, 10), 3);
	cJSON_Delete(msgs);

	/* Back-to-back tool turns: [u, a(call), r, a(call), r, r, a]. */
	msgs = cJSON_CreateArray();
	cJSON_AddItemToArray(msgs, user_msg(400));
	cJSON_AddItemToArray(msgs, tool_call_msg(1));
	cJSON_AddItemToArray(msgs, tool_result_msg(200));
	cJSON_AddItemToArray(msgs, tool_call_msg(2));
	cJSON_AddItemToArray(msgs, tool_result_msg(200));
	cJSON_AddItemToArray(msgs, tool_result_msg(200));
	cJSON_AddItemToArray(msgs, assistant_text_msg(400));
	cr_assert_eq(cut(msgs, 250), 3);
	cr_assert_eq(cut(msgs, 340), 3);
	cr_assert_eq(cut(msgs, 345), 3);
	/* 3 + the first turn's result: moves to the first call. */
	cr_assert_eq(cut(msgs, 450), 1);
	cJSON_Delete(msgs);

	/* Results with no call before them stay together in the tail. */
	msgs = cJSON_CreateArray();
	cJSON_AddItemToArray(msgs, user_msg(400));
	cJSON_AddItemToArray(msgs, user_msg(400));
	cJSON_AddItemToArray(msgs, tool_result_msg(200));
	cJSON_AddItemToArray(msgs, tool_result_msg(200));
	cJSON_AddItemToArray(msgs, assistant_text_msg(400));
	cr_assert_eq(cut(msgs, 200), 2);
	cJSON_Delete(msgs);
}

Test(compaction_pure, a_leading_summary_is_folded_into_the_next)
{
	cJSON *msgs = cJSON_CreateArray();
	cJSON_AddItemToArray(msgs, summary_msg("earlier work on ticket T-42"));
	cr_assert_eq(cut(msgs, 10), 0); /* nothing else: nothing to do */
	cJSON_AddItemToArray(msgs, user_msg(400));
	cJSON_AddItemToArray(msgs, assistant_text_msg(400));
	/* Everything fits, yet the summary is not kept in front of the tail. */
	cr_assert_eq(cut(msgs, 100000), 1);
	cr_assert_eq(cut(msgs, 200), 1);
	cr_assert_eq(cut(msgs, 100), 2);
	cJSON_Delete(msgs);
}

/* ---- the prompt ---- */

Test(compaction_pure, prompt_renders_the_transcript_and_the_rules)
{
	char *big = repeat('x', 5000);
	char json[8192];
	snprintf(json, sizeof(json),
		 "[{\"role\":\"compactionSummary\",\"summary\":\"Deploying build 7f3a9c to host-17\"},"
		 "{\"role\":\"user\",\"content\":\"Fix the bug in src/main.c, ticket 550e8400-e29b-41d4-a716-446655440000\"},"
		 "{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"SECRET-THOUGHT\"},"
		 "{\"type\":\"text\",\"text\":\"Let me read it.\"},"
		 "{\"type\":\"toolCall\",\"id\":\"c1\",\"name\":\"read\",\"arguments\":{\"path\":\"src/main.c\"}}]},"
		 "{\"role\":\"toolResult\",\"toolCallId\":\"c1\",\"toolName\":\"read\","
		 "\"content\":[{\"type\":\"text\",\"text\":\"%s\"}]},"
		 "{\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"Found it at 10.0.0.5:8080\"}]},"
		 "{\"role\":\"user\",\"content\":\"NOT-SUMMARISED\"}]",
		 big);
	cJSON *msgs = parse(json);
	cJSON *out = NULL;
	cr_assert_eq(pc_compaction_prompt(msgs, 5, "Focus on the deployment.", &out), 0);
	cr_assert(cJSON_IsArray(out));
	cr_assert_eq(cJSON_GetArraySize(out), 1);
	cJSON *m = cJSON_GetArrayItem(out, 0);
	cr_assert_str_eq(cJSON_GetObjectItem(m, "role")->valuestring, "user");
	const char *t = cJSON_GetObjectItem(m, "content")->valuestring;
	cr_assert(strstr(t, "Earlier summary: Deploying build 7f3a9c to host-17"), "%s", t);
	cr_assert(strstr(t, "User: Fix the bug in src/main.c, ticket 550e8400-e29b-41d4-a716-446655440000"), "%s", t);
	cr_assert(strstr(t, "Assistant: Let me read it."), "%s", t);
	cr_assert(strstr(t, "Assistant called tool read({\"path\":\"src/main.c\"})"), "%s", t);
	cr_assert(strstr(t, "Tool read result: xxxx"), "%s", t);
	cr_assert(strstr(t, "[... 3000 more characters]"), "the tool result is cut to 2000 chars");
	cr_assert_null(strstr(t, big), "the whole tool result was rendered");
	cr_assert(strstr(t, "Assistant: Found it at 10.0.0.5:8080"), "%s", t);
	cr_assert_null(strstr(t, "SECRET-THOUGHT"), "thinking is not part of the transcript");
	cr_assert_null(strstr(t, "NOT-SUMMARISED"), "messages from n on are not summarised");
	/* The instructions (§7.2). */
	const char *const musts[] = {"active tasks", "status", "batch progress", "last user request",
				     "decisions", "rationale", "TODOs", "open questions", "constraints",
				     "follow-ups", "recent context", "UUIDs", "hashes", "IDs", "tokens",
				     "hostnames", "IP addresses", "ports", "URLs", "file names", "exactly",
				     "Focus on the deployment."};
	for (size_t i = 0; i < sizeof(musts) / sizeof(*musts); i++)
		cr_assert(strstr(t, musts[i]), "the prompt lacks \"%s\"", musts[i]);
	cr_assert(strstr(t, "Fix the bug") < strstr(t, "UUIDs"), "instructions follow the transcript");
	cJSON_Delete(out);
	cJSON_Delete(msgs);
	free(big);
}

Test(compaction_pure, summary_content_and_context_message)
{
	char *s = NULL;
	cr_assert_eq(pc_compaction_summary_content("did \"x\"", 1234, "overflow", &s), 0);
	cJSON *c = parse(s);
	cr_assert_str_eq(cJSON_GetObjectItem(c, "role")->valuestring, PC_COMPACTION_ROLE);
	cr_assert_str_eq(cJSON_GetObjectItem(c, "summary")->valuestring, "did \"x\"");
	cr_assert_eq(cJSON_GetObjectItem(c, "tokensBefore")->valueint, 1234);
	cr_assert_str_eq(cJSON_GetObjectItem(c, "trigger")->valuestring, "overflow");
	cJSON *m = NULL;
	cr_assert_eq(pc_compaction_context_message(c, &m), 0);
	cr_assert_str_eq(cJSON_GetObjectItem(m, "role")->valuestring, "user");
	cr_assert_str_eq(cJSON_GetObjectItem(m, "content")->valuestring, PC_COMPACTION_CONTEXT_PREFIX "did \"x\"");
	cJSON_Delete(m);
	cJSON_Delete(c);
	free(s);
	cr_assert_eq(pc_compaction_summary_content("y", 0, NULL, &s), 0);
	c = parse(s);
	cr_assert_null(cJSON_GetObjectItem(c, "trigger"));
	cJSON_Delete(c);
	free(s);
}

/* ---- the actor, end to end ---- */

typedef struct rec {
	pthread_mutex_t lock;
	int dones;
	uint64_t done_ms; /* when the first DONE arrived */
	pc_compaction_done_msg_t done;
} rec_t;

static int rec_receive(pc_ctx_t *ctx, void *state, pc_msg_t *msg)
{
	(void)ctx;
	rec_t *r = state;
	if (msg->type == PC_MSG_COMPACTION_DONE) {
		pthread_mutex_lock(&r->lock);
		if (r->dones++ == 0)
			r->done_ms = now_ms();
		r->done = *(const pc_compaction_done_msg_t *)pc_msg_cdata(msg);
		pthread_mutex_unlock(&r->lock);
	}
	return 0;
}

static const pc_behavior_t rec_b = {.name = "compaction_owner", .receive = rec_receive};

static pc_runtime_t *rt;
static pc_io_t *io;
static pc_mock_server_t *mock;
static pc_store_t *store;
static char dir[64], db_path[128], lock_dir[128], url[128];
static rec_t *rec;
static pc_actor_t *owner;
static int baseline;

#define KEY "agent:main:compact"
#define SUMMARY_TEXT "SUMMARY: task X pending; id 1234"

static void setup(void)
{
	snprintf(dir, sizeof(dir), "/tmp/pc-compact-XXXXXX");
	cr_assert_not_null(mkdtemp(dir));
	snprintf(db_path, sizeof(db_path), "%s/state.db", dir);
	snprintf(lock_dir, sizeof(lock_dir), "%s/locks", dir);
	rt = start_rt(2);
	pc_io_config_t cfg = {.threads = 1};
	cr_assert_eq(pc_io_new(rt, &cfg, &io), 0);
	pc_mock_server_config_t mc = {0};
	char err[256];
	cr_assert_eq(pc_mock_server_start(io, &mc, &mock, err, sizeof(err)), 0, "%s", err);
	snprintf(url, sizeof(url), "http://127.0.0.1:%u/v1/chat/completions", pc_mock_server_port(mock));
	pc_store_config_t sc;
	pc_store_config_init(&sc);
	sc.path = db_path;
	cr_assert_eq(pc_store_open(rt, &sc, &store), 0);
	rec = calloc(1, sizeof(*rec));
	pthread_mutex_init(&rec->lock, NULL);
	quiesce(rt);
	baseline = live_count(rt);
	cr_assert_eq(pc_spawn(rt, &rec_b, rec, &owner), 0);
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(path);
}

static void teardown(void)
{
	pc_actor_stop(owner, PC_EXIT_NORMAL);
	pc_actor_release(owner);
	quiesce(rt);
	/* Every actor this test started is gone (the mock's responders may
	 * take until their scripted delay ends). */
	AWAIT(live_count(rt) == baseline, 10000);
	pthread_mutex_destroy(&rec->lock);
	free(rec);
	cr_assert_eq(pc_store_close(store), 0);
	pc_mock_server_free(mock);
	pc_io_free(io);
	pc_runtime_stop(rt);
	FREE_RUNTIME_CHECKED(rt);
	nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

TestSuite(compaction, .init = setup, .fini = teardown, .timeout = 120);

static void set_scenario(const char *json)
{
	char err[256];
	cr_assert_eq(pc_mock_server_set_scenario(mock, json, strlen(json), err, sizeof(err)), 0, "%s", err);
}

static int mock_requests(void)
{
	cJSON *log = NULL;
	cr_assert_eq(pc_mock_server_requests(mock, &log), 0);
	int n = cJSON_GetArraySize(log);
	cJSON_Delete(log);
	return n;
}

/* The body of the n-th recorded request, printed (the caller frees). */
static char *mock_request_body(int n)
{
	cJSON *log = NULL;
	cr_assert_eq(pc_mock_server_requests(mock, &log), 0);
	cJSON *body = cJSON_GetObjectItem(cJSON_GetArrayItem(log, n), "body");
	cr_assert_not_null(body);
	char *s = cJSON_PrintUnformatted(body);
	cJSON_Delete(log);
	return s;
}

static void append(const char *role, const char *content, const char *ids)
{
	pc_store_msg_t m = {.role = role, .content = content, .tool_call_ids = ids, .run_id = "run-0"};
	int64_t seq;
	cr_assert_eq(pc_store_append(store, KEY, 0, &m, &seq), 0);
}

/* A session of `groups` × 4 messages: a request, a tool call, its result
 * (about 300 chars) and an answer. */
static void populate(int groups)
{
	char buf[1024], ids[64];
	for (int i = 0; i < groups; i++) {
		snprintf(buf, sizeof(buf),
			 "{\"role\":\"user\",\"content\":\"Please run step %d on db-%d.internal:5432\"}", i, i);
		append("user", buf, NULL);
		snprintf(ids, sizeof(ids), "[\"call_%d\"]", i);
		snprintf(buf, sizeof(buf),
			 "{\"role\":\"assistant\",\"content\":[{\"type\":\"toolCall\",\"id\":\"call_%d\","
			 "\"name\":\"read\",\"arguments\":{\"path\":\"file_%d.txt\"}}],\"stopReason\":\"toolUse\"}",
			 i, i);
		append("assistant", buf, ids);
		char *body = repeat('0' + (char)(i % 10), 300);
		snprintf(buf, sizeof(buf),
			 "{\"role\":\"toolResult\",\"toolCallId\":\"call_%d\",\"toolName\":\"read\","
			 "\"content\":[{\"type\":\"text\",\"text\":\"%s\"}],\"isError\":false}",
			 i, body);
		free(body);
		append("toolResult", buf, ids);
		snprintf(buf, sizeof(buf),
			 "{\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"Step %d done\"}],"
			 "\"stopReason\":\"stop\"}",
			 i);
		append("assistant", buf, NULL);
	}
}

static pc_store_history_t *history(void)
{
	pc_store_history_t *h = NULL;
	cr_assert_eq(pc_store_history(store, KEY, &h), 0);
	return h;
}

/* The history's messages, unified (contents parsed). */
static cJSON *unified(const pc_store_history_t *h)
{
	cJSON *a = cJSON_CreateArray();
	for (size_t i = 0; i < pc_store_history_count(h); i++) {
		pc_store_msg_t m;
		pc_store_history_get(h, i, &m);
		cJSON_AddItemToArray(a, parse(m.content));
	}
	return a;
}

static void request_init(pc_compaction_request_t *r)
{
	static const char *const headers[] = {"Content-Type: application/json", "Accept: text/event-stream"};
	memset(r, 0, sizeof(*r));
	r->io = io;
	r->store = store;
	r->lock_dir = lock_dir;
	r->session_key = KEY;
	r->run_id = "run-compact";
	r->trigger = "overflow";
	r->api = PC_API_OPENAI_COMPLETIONS;
	r->url = url;
	r->headers = headers;
	r->header_count = 2;
	r->provider = "openai";
	r->model = "mock-model";
	r->keep_recent_tokens = 300;
	r->tag = 77;
}

static int dones(void)
{
	pthread_mutex_lock(&rec->lock);
	int d = rec->dones;
	pthread_mutex_unlock(&rec->lock);
	return d;
}

static uint64_t done_ms(void)
{
	pthread_mutex_lock(&rec->lock);
	uint64_t t = rec->done_ms;
	pthread_mutex_unlock(&rec->lock);
	return t;
}

/* Waits for DONE, then for everything to settle (the mock's scripted
 * delays included), and checks no second DONE came. */
static pc_compaction_done_msg_t await_done(void)
{
	AWAIT(dones() >= 1, 30000);
	quiesce(rt);
	pthread_mutex_lock(&rec->lock);
	cr_assert_eq(rec->dones, 1, "exactly one DONE");
	pc_compaction_done_msg_t d = rec->done;
	pthread_mutex_unlock(&rec->lock);
	cr_assert_eq(d.tag, 77);
	return d;
}

static pc_compaction_done_msg_t run_compaction(const pc_compaction_request_t *r)
{
	cr_assert_eq(pc_compaction_start(rt, r, owner, NULL), 0);
	return await_done();
}

/* The transcript is exactly what it was: same count, same seqs. */
static void assert_unchanged(const pc_store_history_t *before)
{
	pc_store_history_t *after = history();
	cr_assert_eq(pc_store_history_count(after), pc_store_history_count(before));
	cr_assert_eq(pc_store_history_last_seq(after), pc_store_history_last_seq(before));
	for (size_t i = 0; i < pc_store_history_count(after); i++) {
		pc_store_msg_t a, b;
		pc_store_history_get(after, i, &a);
		pc_store_history_get(before, i, &b);
		cr_assert_eq(a.seq, b.seq);
		cr_assert_str_eq(a.content, b.content);
	}
	pc_store_history_free(after);
}

/* `after` is [summary(text), before[first_kept..], extra...]. */
static void assert_compacted(const pc_store_history_t *before, size_t first_kept, const char *text, size_t extra)
{
	pc_store_history_t *after = history();
	size_t kept = pc_store_history_count(before) - first_kept;
	cr_assert_eq(pc_store_history_count(after), 1 + kept + extra);
	pc_store_msg_t s;
	pc_store_history_get(after, 0, &s);
	cr_assert_str_eq(s.role, PC_COMPACTION_ROLE);
	cr_assert_str_eq(s.run_id, "run-compact");
	cJSON *c = parse(s.content);
	cr_assert_str_eq(cJSON_GetObjectItem(c, "role")->valuestring, PC_COMPACTION_ROLE);
	cr_assert_str_eq(cJSON_GetObjectItem(c, "summary")->valuestring, text);
	cr_assert_str_eq(cJSON_GetObjectItem(c, "trigger")->valuestring, "overflow");
	cr_assert_gt(cJSON_GetObjectItem(c, "tokensBefore")->valuedouble, 0);
	cJSON_Delete(c);
	for (size_t i = 0; i < kept; i++) {
		pc_store_msg_t a, b;
		pc_store_history_get(after, 1 + i, &a);
		pc_store_history_get(before, first_kept + i, &b);
		cr_assert_str_eq(a.role, b.role);
		cr_assert_str_eq(a.content, b.content, "kept message %zu changed", i);
		cr_assert_eq(a.created_ms, b.created_ms);
		cr_assert((a.tool_call_ids == NULL) == (b.tool_call_ids == NULL));
		if (a.tool_call_ids)
			cr_assert_str_eq(a.tool_call_ids, b.tool_call_ids);
		cr_assert_str_eq(a.run_id, b.run_id);
	}
	pc_store_history_free(after);
}

static size_t expected_cut(const pc_store_history_t *h, uint64_t keep)
{
	cJSON *msgs = unified(h);
	size_t first = cut(msgs, keep);
	cJSON_Delete(msgs);
	return first;
}

Test(compaction, summarises_the_head_and_keeps_the_tail)
{
	set_scenario("{\"default\":{\"kind\":\"text\",\"text\":\"" SUMMARY_TEXT "\"}}");
	populate(10);
	pc_store_history_t *before = history();
	cr_assert_eq(pc_store_history_count(before), 40);
	pc_compaction_request_t r;
	request_init(&r);
	size_t first = expected_cut(before, r.keep_recent_tokens);
	cr_assert(first > 20 && first < 40, "first kept %zu", first);
	pc_compaction_done_msg_t d = run_compaction(&r);
	cr_assert_eq(d.rc, 0, "%s", d.error);
	cr_assert(d.compacted);
	cr_assert_not(d.aborted);
	cr_assert_not(d.timed_out);
	cr_assert_str_eq(d.error, "");
	cr_assert_eq(d.messages_before, 40);
	cr_assert_eq(d.messages_after, 1 + 40 - first);
	cr_assert_gt(d.tokens_before, d.tokens_after);
	assert_compacted(before, first, SUMMARY_TEXT, 0);

	/* What the model was asked: the head, rendered, and the rules. */
	cr_assert_eq(mock_requests(), 1);
	char *body = mock_request_body(0);
	cr_assert(strstr(body, "You summarise conversations for an AI agent"), "%s", body);
	cr_assert(strstr(body, "User: Please run step 0 on db-0.internal:5432"), "%s", body);
	cr_assert(strstr(body, "Assistant called tool read({\\\"path\\\":\\\"file_0.txt\\\"})"), "%s", body);
	cr_assert(strstr(body, "Tool read result: 000"), "%s", body);
	cr_assert(strstr(body, "hostnames"), "%s", body);
	cr_assert_null(strstr(body, "Step 9 done"), "the kept tail was summarised too");
	cJSON_free(body);

	/* Again: the earlier summary goes into the new one. */
	pc_store_history_free(before);
	before = history();
	pthread_mutex_lock(&rec->lock);
	rec->dones = 0;
	pthread_mutex_unlock(&rec->lock);
	set_scenario("{\"default\":{\"kind\":\"text\",\"text\":\"second summary\"}}");
	d = run_compaction(&r);
	cr_assert_eq(d.rc, 0, "%s", d.error);
	cr_assert(d.compacted);
	cr_assert_eq(mock_requests(), 2);
	body = mock_request_body(1);
	cr_assert(strstr(body, "Earlier summary: " SUMMARY_TEXT), "%s", body);
	cJSON_free(body);
	assert_compacted(before, expected_cut(before, r.keep_recent_tokens), "second summary", 0);
	pc_store_history_free(before);
}

Test(compaction, nothing_to_summarise_leaves_the_transcript_alone)
{
	populate(1);
	pc_store_history_t *before = history();
	pc_compaction_request_t r;
	request_init(&r);
	r.keep_recent_tokens = 0; /* the default, 20 000 */
	pc_compaction_done_msg_t d = run_compaction(&r);
	cr_assert_eq(d.rc, 0, "%s", d.error);
	cr_assert_not(d.compacted);
	cr_assert_eq(d.messages_before, 4);
	cr_assert_eq(d.messages_after, 4);
	cr_assert_eq(d.tokens_after, d.tokens_before);
	cr_assert_eq(mock_requests(), 0, "no model call");
	assert_unchanged(before);
	pc_store_history_free(before);
}

Test(compaction, a_missing_session_is_an_error)
{
	pc_compaction_request_t r;
	request_init(&r);
	r.session_key = "agent:main:nobody";
	pc_compaction_done_msg_t d = run_compaction(&r);
	cr_assert_eq(d.rc, PC_ENOTFOUND, "%d %s", d.rc, d.error);
	cr_assert_not(d.compacted);
	cr_assert_neq(d.error[0], '\0');
}

Test(compaction, a_model_error_leaves_the_transcript_unchanged)
{
	set_scenario("{\"default\":{\"kind\":\"error\",\"status\":500}}");
	populate(10);
	pc_store_history_t *before = history();
	pc_compaction_request_t r;
	request_init(&r);
	pc_compaction_done_msg_t d = run_compaction(&r);
	cr_assert_lt(d.rc, 0);
	cr_assert_not(d.compacted);
	cr_assert_not(d.aborted);
	cr_assert(strstr(d.error, "summarisation failed"), "%s", d.error);
	cr_assert_eq(d.messages_after, 40);
	assert_unchanged(before);
	pc_store_history_free(before);
}

Test(compaction, an_empty_summary_is_refused)
{
	set_scenario("{\"default\":{\"kind\":\"empty\"}}");
	populate(10);
	pc_store_history_t *before = history();
	pc_compaction_request_t r;
	request_init(&r);
	pc_compaction_done_msg_t d = run_compaction(&r);
	cr_assert_lt(d.rc, 0);
	cr_assert_not(d.compacted);
	assert_unchanged(before);
	pc_store_history_free(before);
}

Test(compaction, abort_during_the_model_call)
{
	set_scenario("{\"default\":{\"kind\":\"text\",\"text\":\"late\",\"ttft_ms\":3000}}");
	populate(10);
	pc_store_history_t *before = history();
	pc_compaction_request_t r;
	request_init(&r);
	pc_actor_t *c = NULL;
	uint64_t t0 = now_ms();
	cr_assert_eq(pc_compaction_start(rt, &r, owner, &c), 0);
	AWAIT(mock_requests() == 1, 10000);
	cr_assert_eq(pc_compaction_abort(c), 0);
	pc_compaction_done_msg_t d = await_done();
	/* A second abort finds it finished: no second DONE. */
	AWAIT(pc_actor_stopped(c), 5000);
	pc_compaction_abort(c);
	pc_actor_release(c);
	quiesce(rt);
	cr_assert_eq(dones(), 1);
	cr_assert_lt(done_ms() - t0, 2500, "the abort waited for the model");
	cr_assert(d.aborted);
	cr_assert_eq(d.rc, PC_ESTOPPED);
	cr_assert_not(d.compacted);
	cr_assert_not(d.timed_out);
	assert_unchanged(before);
	pc_store_history_free(before);
}

Test(compaction, stopping_the_actor_still_sends_done)
{
	set_scenario("{\"default\":{\"kind\":\"text\",\"text\":\"late\",\"ttft_ms\":3000}}");
	populate(10);
	pc_store_history_t *before = history();
	pc_compaction_request_t r;
	request_init(&r);
	pc_actor_t *c = NULL;
	cr_assert_eq(pc_compaction_start(rt, &r, owner, &c), 0);
	AWAIT(mock_requests() == 1, 10000);
	cr_assert_eq(pc_actor_stop(c, PC_EXIT_KILLED), 0);
	pc_compaction_done_msg_t d = await_done();
	cr_assert(d.aborted);
	cr_assert_eq(d.rc, PC_ESTOPPED);
	pc_actor_release(c);
	assert_unchanged(before);
	pc_store_history_free(before);
}

Test(compaction, the_operation_times_out)
{
	set_scenario("{\"default\":{\"kind\":\"text\",\"text\":\"late\",\"ttft_ms\":3000}}");
	populate(10);
	pc_store_history_t *before = history();
	pc_compaction_request_t r;
	request_init(&r);
	r.timeout_ms = 200;
	uint64_t t0 = now_ms();
	pc_compaction_done_msg_t d = run_compaction(&r);
	uint64_t took = done_ms() - t0;
	cr_assert(d.timed_out);
	cr_assert_eq(d.rc, PC_ETIMEDOUT);
	cr_assert_not(d.aborted);
	cr_assert_not(d.compacted);
	cr_assert(took >= 200 && took < 2500, "took %" PRIu64 " ms", took);
	assert_unchanged(before);
	pc_store_history_free(before);
}

Test(compaction, an_append_racing_the_rewrite_is_retried_once)
{
	set_scenario("{\"default\":{\"kind\":\"text\",\"text\":\"" SUMMARY_TEXT "\"}}");
	populate(10);
	pc_store_history_t *before = history();
	pc_compaction_request_t r;
	request_init(&r);
	size_t first = expected_cut(before, r.keep_recent_tokens);
	/* Holding the session's write lock stalls the rewrite; the snapshot
	 * was taken before the model was asked, so an append made once the
	 * mock saw the request is certain to make the rewrite conflict. */
	pc_session_lock_t *lock = NULL;
	cr_assert_eq(pc_session_lock_acquire(lock_dir, KEY, NULL, &lock, NULL), 0);
	cr_assert_eq(pc_compaction_start(rt, &r, owner, NULL), 0);
	AWAIT(mock_requests() == 1, 10000);
	append("user", "{\"role\":\"user\",\"content\":\"one more thing\"}", NULL);
	cr_assert_eq(pc_session_lock_release(lock), 0);
	pc_compaction_done_msg_t d = await_done();
	cr_assert_eq(d.rc, 0, "%s", d.error);
	cr_assert(d.compacted);
	cr_assert_eq(d.messages_before, 41, "the retry read the new history");
	cr_assert_eq(d.messages_after, 1 + 41 - first);
	/* The head was unchanged: its summary was reused, not asked again. */
	cr_assert_eq(mock_requests(), 1);
	assert_compacted(before, first, SUMMARY_TEXT, 1);
	pc_store_history_t *after = history();
	pc_store_msg_t last;
	pc_store_history_get(after, pc_store_history_count(after) - 1, &last);
	cr_assert(strstr(last.content, "one more thing"));
	pc_store_history_free(after);
	pc_store_history_free(before);
}

/* A second conflict cannot be staged deterministically through the actor
 * (the retry's read and rewrite follow each other with no hook between);
 * the store's side of it -- a stale expected_last_seq is refused and
 * changes nothing -- is checked directly. */
Test(compaction, a_stale_rewrite_is_refused_by_the_store)
{
	populate(2);
	pc_store_history_t *before = history();
	pc_store_msg_t first;
	pc_store_history_get(before, 0, &first);
	append("user", "{\"role\":\"user\",\"content\":\"late\"}", NULL);
	pc_store_history_t *mid = history();
	char *content = NULL;
	cr_assert_eq(pc_compaction_summary_content("s", 1, "overflow", &content), 0);
	pc_store_msg_t m = {.role = PC_COMPACTION_ROLE, .content = content};
	int64_t last = 0;
	cr_assert_eq(pc_store_rewrite_locked(store, lock_dir, NULL, KEY, 0, pc_store_history_last_seq(before),
					     first.seq, &m, 1, &last, NULL),
		     PC_STORE_ECONFLICT);
	assert_unchanged(mid);
	cr_assert_eq(pc_store_rewrite_locked(store, lock_dir, NULL, KEY, 0, pc_store_history_last_seq(mid),
					     first.seq, &m, 1, &last, NULL),
		     0);
	pc_store_history_t *after = history();
	cr_assert_eq(pc_store_history_count(after), 1);
	pc_store_history_free(after);
	free(content);
	pc_store_history_free(mid);
	pc_store_history_free(before);
}

Test(compaction, bad_requests_are_refused)
{
	pc_compaction_request_t r;
	request_init(&r);
	r.url = NULL;
	cr_assert_eq(pc_compaction_start(rt, &r, owner, NULL), PC_EINVAL);
	request_init(&r);
	r.api = PC_API_NONE;
	cr_assert_eq(pc_compaction_start(rt, &r, owner, NULL), PC_EINVAL);
	request_init(&r);
	cr_assert_eq(pc_compaction_start(rt, &r, NULL, NULL), PC_EINVAL);
	cr_assert_eq(pc_compaction_abort(NULL), PC_EINVAL);
}

/* The timer going off while the rewrite waits for the write lock: the
 * rewrite is not taken back halfway; its commit makes DONE a success. (The
 * model answers at once, so by 1.5 s the rewrite is what is running.) */
Test(compaction, a_timeout_during_the_rewrite_reports_what_happened)
{
	set_scenario("{\"default\":{\"kind\":\"text\",\"text\":\"" SUMMARY_TEXT "\"}}");
	populate(10);
	pc_store_history_t *before = history();
	pc_compaction_request_t r;
	request_init(&r);
	r.timeout_ms = 1500;
	size_t first = expected_cut(before, r.keep_recent_tokens);
	pc_session_lock_t *lock = NULL;
	cr_assert_eq(pc_session_lock_acquire(lock_dir, KEY, NULL, &lock, NULL), 0);
	cr_assert_eq(pc_compaction_start(rt, &r, owner, NULL), 0);
	sleep_ms(2500);
	cr_assert_eq(dones(), 0, "DONE before the rewrite ended");
	cr_assert_eq(pc_session_lock_release(lock), 0);
	pc_compaction_done_msg_t d = await_done();
	cr_assert_eq(d.rc, 0, "%s", d.error);
	cr_assert(d.compacted);
	cr_assert_not(d.timed_out);
	assert_compacted(before, first, SUMMARY_TEXT, 0);
	pc_store_history_free(before);
}

/* An abort while the rewrite waits, and the rewrite then fails (an append
 * raced it): aborted, no retry, nothing written. */
Test(compaction, an_abort_during_a_failing_rewrite_does_not_retry)
{
	set_scenario("{\"default\":{\"kind\":\"text\",\"text\":\"" SUMMARY_TEXT "\"}}");
	populate(10);
	pc_compaction_request_t r;
	request_init(&r);
	pc_session_lock_t *lock = NULL;
	cr_assert_eq(pc_session_lock_acquire(lock_dir, KEY, NULL, &lock, NULL), 0);
	pc_actor_t *c = NULL;
	cr_assert_eq(pc_compaction_start(rt, &r, owner, &c), 0);
	AWAIT(mock_requests() == 1, 10000);
	append("user", "{\"role\":\"user\",\"content\":\"one more thing\"}", NULL);
	pc_store_history_t *before = history();
	sleep_ms(300);
	cr_assert_eq(pc_compaction_abort(c), 0);
	sleep_ms(100);
	cr_assert_eq(pc_session_lock_release(lock), 0);
	pc_compaction_done_msg_t d = await_done();
	pc_actor_release(c);
	cr_assert(d.aborted);
	cr_assert_eq(d.rc, PC_ESTOPPED);
	cr_assert_not(d.compacted);
	cr_assert_eq(mock_requests(), 1);
	assert_unchanged(before);
	pc_store_history_free(before);
}

/* Stopped from outside while the rewrite waits: DONE (aborted) comes from
 * the stop handler at once; the job still owns its data, finishes on its
 * own and frees it once (LeakSanitizer checks at teardown); its answer is
 * a dead letter. */
Test(compaction, stopped_during_the_rewrite_the_job_finishes_alone)
{
	set_scenario("{\"default\":{\"kind\":\"text\",\"text\":\"" SUMMARY_TEXT "\"}}");
	populate(10);
	pc_store_history_t *before = history();
	pc_compaction_request_t r;
	request_init(&r);
	size_t first = expected_cut(before, r.keep_recent_tokens);
	pc_session_lock_t *lock = NULL;
	cr_assert_eq(pc_session_lock_acquire(lock_dir, KEY, NULL, &lock, NULL), 0);
	pc_actor_t *c = NULL;
	cr_assert_eq(pc_compaction_start(rt, &r, owner, &c), 0);
	AWAIT(mock_requests() == 1, 10000);
	sleep_ms(300);
	uint64_t blocking_before = stats(rt).blocking_done;
	cr_assert_eq(pc_actor_stop(c, PC_EXIT_SHUTDOWN), 0);
	AWAIT(dones() == 1, 5000);
	pc_actor_release(c);
	cr_assert_eq(pc_session_lock_release(lock), 0);
	pc_compaction_done_msg_t d = await_done();
	cr_assert(d.aborted);
	cr_assert_eq(d.rc, PC_ESTOPPED);
	AWAIT(stats(rt).blocking_done > blocking_before, 10000);
	quiesce(rt);
	/* The rewrite was already under way: it committed. */
	assert_compacted(before, first, SUMMARY_TEXT, 0);
	pc_store_history_free(before);
}
