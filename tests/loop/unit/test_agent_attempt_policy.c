/*
 * The attempt's pure policies (agents/attempt/): the compaction-aware
 * timeout (§2.6), the context guard, session truncation, the preflight
 * route and the compaction triggers (§2.7, §3.3, §7.1), and payload
 * shaping (§5.3–§5.7, §5.9). Every table row is one case; a row that
 * disagrees with the code names itself in the failure.
 */
#include <criterion/criterion.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "agents/attempt/attempt_timeout.h"
#include "agents/attempt/context_guard.h"
#include "agents/attempt/payload.h"
#include "agents/attempt/steering.h"
#include "agents/providers/request.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#define ASSERT_NO_LEAKS() cr_assert_eq(__lsan_do_recoverable_leak_check(), 0, "LeakSanitizer found leaks")
#else
#define ASSERT_NO_LEAKS() ((void)0)
#endif

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

/* A string of n copies of c (the caller frees). */
static char *repeat(char c, size_t n)
{
	char *s = malloc(n + 1);
	cr_assert_not_null(s);
	memset(s, c, n);
	s[n] = '\0';
	return s;
}

static cJSON *parse(const char *json)
{
	cJSON *j = cJSON_Parse(json);
	cr_assert_not_null(j, "bad test JSON: %s", json);
	return j;
}

/* A toolResult message whose one text block is `text`. */
static cJSON *tool_result(const char *text)
{
	cJSON *m = cJSON_CreateObject(), *content, *block = cJSON_CreateObject();
	cr_assert(m && block);
	cJSON_AddStringToObject(m, "role", "toolResult");
	content = cJSON_AddArrayToObject(m, "content");
	cJSON_AddStringToObject(block, "type", "text");
	cJSON_AddStringToObject(block, "text", text);
	cJSON_AddItemToArray(content, block);
	return m;
}

static const char *result_text(const cJSON *msgs, int i)
{
	const cJSON *m = cJSON_GetArrayItem(msgs, i);
	const cJSON *b = cJSON_GetArrayItem(cJSON_GetObjectItem(m, "content"), 0);
	const cJSON *t = cJSON_GetObjectItem(b, "text");
	cr_assert(cJSON_IsString(t));
	return t->valuestring;
}

/* ================= §2.6 attempt timeout ================= */

Test(attempt_timeout, verdict_table)
{
	static const struct {
		bool pending, in_flight, grace_used;
		pc_attempt_timeout_verdict_t want;
	} rows[] = {
		{false, false, false, PC_ATTEMPT_TIMEOUT_ABORT},  {false, false, true, PC_ATTEMPT_TIMEOUT_ABORT},
		{true, false, false, PC_ATTEMPT_TIMEOUT_EXTEND},  {false, true, false, PC_ATTEMPT_TIMEOUT_EXTEND},
		{true, true, false, PC_ATTEMPT_TIMEOUT_EXTEND},   {true, false, true, PC_ATTEMPT_TIMEOUT_ABORT},
		{false, true, true, PC_ATTEMPT_TIMEOUT_ABORT},    {true, true, true, PC_ATTEMPT_TIMEOUT_ABORT},
	};
	for (size_t i = 0; i < N_OF(rows); i++)
		cr_assert_eq(pc_attempt_timeout_verdict(rows[i].pending, rows[i].in_flight, rows[i].grace_used),
			     rows[i].want, "row %zu", i);
}

Test(attempt_timeout, flag_compaction_table)
{
	static const struct {
		bool timeout, pending, in_flight, want;
	} rows[] = {
		{true, true, false, true},   {true, false, true, true},  {true, false, false, false},
		{false, true, true, false},  {false, false, false, false},
	};
	for (size_t i = 0; i < N_OF(rows); i++)
		cr_assert_eq(pc_attempt_timeout_flags_compaction(rows[i].timeout, rows[i].pending, rows[i].in_flight),
			     rows[i].want, "row %zu", i);
}

Test(attempt_timeout, grace_and_lock_hold)
{
	static const struct {
		uint64_t run, comp, grace, hold;
	} rows[] = {
		{0, 0, 0, PC_ATTEMPT_LOCK_HOLD_MIN_MS},
		{60000, 60000, 120000, PC_ATTEMPT_LOCK_HOLD_MIN_MS},          /* 4 min < 5 min floor */
		{600000, 900000, 1500000, 1620000},                            /* 10 + 15 + 2 min */
		{UINT64_MAX, 900000, UINT64_MAX, PC_ATTEMPT_LOCK_HOLD_MAX_MS}, /* saturates, then capped */
	};
	for (size_t i = 0; i < N_OF(rows); i++) {
		cr_assert_eq(pc_attempt_timeout_with_grace_ms(rows[i].run, rows[i].comp), rows[i].grace, "row %zu", i);
		cr_assert_eq(pc_attempt_lock_max_hold_ms(rows[i].run, rows[i].comp), rows[i].hold, "row %zu", i);
	}
}

/* One event of a timer scenario and what it must produce. */
typedef struct tev {
	char kind;    /* 'f' fire, 'p' pause, 'r' resume, 0 end */
	int64_t at;
	bool pending, in_flight;
	pc_attempt_timeout_action_t want;
	int64_t want_deadline; /* EXTEND: the new deadline; 'r': the resumed deadline */
	bool want_during;      /* ABORT: timed out during compaction */
} tev_t;

static const struct {
	const char *name;
	uint64_t run, comp;
	tev_t ev[6];
} scenarios[] = {
	{"plain timeout", 1000, 0, {{'f', 1000, false, false, PC_ATTEMPT_TIMER_ABORT, 0, false}}},
	{"early or stale firing ignored",
	 1000,
	 0,
	 {{'f', 999, false, false, PC_ATTEMPT_TIMER_IGNORE, 0, false},
	  {'f', 1500, false, false, PC_ATTEMPT_TIMER_ABORT, 0, false}}},
	{"extend once then abort during compaction",
	 1000,
	 5000,
	 {{'f', 1000, false, true, PC_ATTEMPT_TIMER_EXTEND, 6000, false},
	  {'f', 5999, false, true, PC_ATTEMPT_TIMER_IGNORE, 0, false},
	  {'f', 6000, false, true, PC_ATTEMPT_TIMER_ABORT, 0, true}}},
	{"extended, compaction finished by second expiry",
	 1000,
	 5000,
	 {{'f', 1000, true, false, PC_ATTEMPT_TIMER_EXTEND, 6000, false},
	  {'f', 6000, false, false, PC_ATTEMPT_TIMER_ABORT, 0, false}}},
	{"default compaction grace",
	 1000,
	 0,
	 {{'f', 1200, true, true, PC_ATTEMPT_TIMER_EXTEND, 1200 + (int64_t)PC_ATTEMPT_COMPACTION_TIMEOUT_MS, false}}},
	{"nothing after the abort",
	 10,
	 0,
	 {{'f', 10, false, false, PC_ATTEMPT_TIMER_ABORT, 0, false},
	  {'f', 20, true, true, PC_ATTEMPT_TIMER_IGNORE, 0, false}}},
	{"unlimited (0)", 0, 0, {{'f', INT64_MAX, true, true, PC_ATTEMPT_TIMER_IGNORE, 0, false}}},
	{"unlimited (max timer)",
	 PC_ATTEMPT_TIMER_MAX_MS,
	 0,
	 {{'f', INT64_MAX, false, false, PC_ATTEMPT_TIMER_IGNORE, 0, false}}},
	{"approval pause keeps the remaining budget",
	 1000,
	 0,
	 {{'p', 400, false, false, PC_ATTEMPT_TIMER_IGNORE, 0, false},
	  {'f', 1000, false, false, PC_ATTEMPT_TIMER_IGNORE, 0, false},
	  {'r', 5000, false, false, PC_ATTEMPT_TIMER_IGNORE, 5600, false},
	  {'f', 5599, false, false, PC_ATTEMPT_TIMER_IGNORE, 0, false},
	  {'f', 5600, false, false, PC_ATTEMPT_TIMER_ABORT, 0, false}}},
};

Test(attempt_timeout, scenarios)
{
	for (size_t s = 0; s < N_OF(scenarios); s++) {
		pc_attempt_timeout_t t;
		cr_assert_eq(pc_attempt_timeout_init(&t, scenarios[s].run, scenarios[s].comp, 0), 0);
		for (const tev_t *e = scenarios[s].ev; e->kind; e++) {
			const char *n = scenarios[s].name;
			int64_t dl = 0;
			if (e->kind == 'p') {
				pc_attempt_timeout_pause(&t, e->at);
				cr_assert_not(pc_attempt_timeout_armed(&t, &dl), "%s: paused timer is not armed", n);
				continue;
			}
			if (e->kind == 'r') {
				pc_attempt_timeout_resume(&t, e->at);
				cr_assert(pc_attempt_timeout_armed(&t, &dl), "%s: resumed", n);
				cr_assert_eq(dl, e->want_deadline, "%s: resumed deadline", n);
				continue;
			}
			pc_attempt_timeout_step_t st;
			cr_assert_eq(pc_attempt_timeout_fire(&t, e->at, e->pending, e->in_flight, &st), 0);
			cr_assert_eq(st.action, e->want, "%s: fire at %lld", n, (long long)e->at);
			if (st.action == PC_ATTEMPT_TIMER_EXTEND) {
				cr_assert_eq(st.new_deadline_ms, e->want_deadline, "%s", n);
				cr_assert(pc_attempt_timeout_armed(&t, &dl) && dl == e->want_deadline, "%s", n);
			}
			if (st.action == PC_ATTEMPT_TIMER_ABORT) {
				cr_assert_eq(st.timed_out_during_compaction, e->want_during, "%s", n);
				cr_assert(st.timed_out_by_run_budget, "%s", n);
				cr_assert_eq(st.streaming_warn_at_ms,
					     e->at + (int64_t)PC_ATTEMPT_ABORT_STREAMING_WARN_MS, "%s", n);
				cr_assert_not(pc_attempt_timeout_armed(&t, NULL), "%s: expired", n);
			}
		}
	}
}

Test(attempt_timeout, bad_arguments)
{
	pc_attempt_timeout_t t;
	pc_attempt_timeout_step_t st;
	cr_assert_eq(pc_attempt_timeout_init(NULL, 1, 1, 0), PC_EINVAL);
	cr_assert_eq(pc_attempt_timeout_init(&t, 1000, 0, 0), 0);
	cr_assert_eq(pc_attempt_timeout_fire(&t, 0, false, false, NULL), PC_EINVAL);
	cr_assert_eq(pc_attempt_timeout_fire(NULL, 0, false, false, &st), PC_EINVAL);
	cr_assert_not(pc_attempt_timeout_armed(NULL, NULL));
	pc_attempt_timeout_pause(NULL, 0);
	pc_attempt_timeout_resume(NULL, 0);
	pc_attempt_timeout_resume(&t, 5); /* not paused: no-op */
	int64_t dl;
	cr_assert(pc_attempt_timeout_armed(&t, &dl) && dl == 1000);
}

/* ================= §3.3 estimates and the live guard ================= */

Test(context_guard, limits_table)
{
	static const struct {
		uint64_t ctx;
		size_t total, single;
	} rows[] = {
		{0, 1024, 1024},       {100, 1024, 1024},        {1000, 3600, 1024},
		{1024, 3686, 1024},    {2000, 7200, 2000},       {200000, 720000, 200000},
	};
	for (size_t i = 0; i < N_OF(rows); i++) {
		pc_ctx_guard_limits_t l;
		pc_ctx_guard_limits(rows[i].ctx, &l);
		cr_assert_eq(l.max_context_chars, rows[i].total, "ctx %llu", (unsigned long long)rows[i].ctx);
		cr_assert_eq(l.max_single_tool_result_chars, rows[i].single, "ctx %llu",
			     (unsigned long long)rows[i].ctx);
	}
}

Test(context_guard, message_chars_table)
{
	static const struct {
		const char *json;
		size_t chars;
	} rows[] = {
		{"{\"role\":\"user\",\"content\":\"hello\"}", 5},
		{"{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"ab\"},{\"type\":\"text\",\"text\":\"cd\"}]}", 4},
		{"{\"role\":\"toolResult\",\"content\":[{\"type\":\"text\",\"text\":\"abcd\"}]}", 8},
		{"{\"role\":\"toolResult\",\"content\":\"abc\"}", 6},
		{"{\"role\":\"user\",\"content\":[{\"type\":\"image\",\"data\":\"xxxx\"}]}", PC_CTX_IMAGE_CHARS},
		{"{\"role\":\"toolResult\",\"content\":[{\"type\":\"image\",\"data\":\"x\"}]}", PC_CTX_IMAGE_CHARS},
		{"{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"hmm\"}]}", 3},
		/* name 4 + {"p":"x"}: braces 2, value 3, separator 1, key 1+3 */
		{"{\"role\":\"assistant\",\"content\":[{\"type\":\"toolCall\",\"name\":\"read\",\"arguments\":{\"p\":\"x\"}}]}",
		 14},
		{"{\"role\":\"user\"}", 0},
		{"[1,2]", 0},
	};
	for (size_t i = 0; i < N_OF(rows); i++) {
		cJSON *m = parse(rows[i].json);
		cr_assert_eq(pc_ctx_message_chars(m), rows[i].chars, "%s: got %zu", rows[i].json,
			     pc_ctx_message_chars(m));
		cJSON_Delete(m);
	}
	cr_assert_eq(pc_ctx_message_chars(NULL), 0);
}

Test(context_guard, tokens)
{
	static const struct {
		size_t chars;
		uint64_t tokens;
	} rows[] = {{0, 0}, {1, 1}, {4, 1}, {5, 2}, {8, 2}, {4001, 1001}};
	for (size_t i = 0; i < N_OF(rows); i++)
		cr_assert_eq(pc_ctx_chars_to_tokens(rows[i].chars), rows[i].tokens, "chars %zu", rows[i].chars);
	cJSON *msgs = parse("[{\"role\":\"user\",\"content\":\"hello\"},"
			    "{\"role\":\"toolResult\",\"content\":\"abc\"}]");
	cr_assert_eq(pc_ctx_messages_tokens(msgs), 3); /* (5 + 6) / 4, rounded up */
	cr_assert_eq(pc_ctx_messages_tokens(NULL), 0);
	cJSON_Delete(msgs);
}

Test(context_guard, guard_truncates_a_copy)
{
	/* ctx 1000: single cap 1024, total cap 3600. Row: the newline position
	 * in a 5000-char result and the length kept. */
	static const struct {
		size_t newline_at;
		size_t kept;
	} rows[] = {
		{0, 1024},    /* no newline in the window */
		{900, 900},   /* within the last 30 % of 1024 (from 717): cut there */
		{700, 1024},  /* before the window: ignored */
		{718, 718},
	};
	for (size_t i = 0; i < N_OF(rows); i++) {
		char *big = repeat('a', 5000);
		if (rows[i].newline_at)
			big[rows[i].newline_at] = '\n';
		cJSON *msgs = cJSON_CreateArray();
		cJSON_AddItemToArray(msgs, parse("{\"role\":\"user\",\"content\":\"go\"}"));
		cJSON_AddItemToArray(msgs, tool_result(big));
		cJSON *out = NULL;
		pc_ctx_guard_result_t r;
		cr_assert_eq(pc_ctx_guard(msgs, 1000, &out, &r), 0);
		cr_assert_not_null(out, "row %zu", i);
		cr_assert_eq(r.truncated, 1);
		cr_assert_str_eq(result_text(msgs, 1), big, "the input is never modified");
		char want[2048];
		snprintf(want, sizeof(want), PC_CTX_TRUNCATION_NOTICE_FMT, 5000 - rows[i].kept);
		const char *got = result_text(out, 1);
		cr_assert_eq(strlen(got), rows[i].kept + strlen(want), "row %zu: %zu", i, strlen(got));
		cr_assert_str_eq(got + rows[i].kept, want, "row %zu", i);
		cr_assert_eq(strncmp(got, big, rows[i].kept), 0);
		cr_assert_not(r.overflow, "row %zu: %zu chars", i, r.total_chars);
		cr_assert_eq(r.total_chars, pc_ctx_message_chars(cJSON_GetArrayItem(out, 0)) +
						    pc_ctx_message_chars(cJSON_GetArrayItem(out, 1)));
		cJSON_Delete(out);
		cJSON_Delete(msgs);
		free(big);
	}
	ASSERT_NO_LEAKS();
}

/* A message's count is remembered on it: a cut copy is counted afresh,
 * the original keeps its count, and an edit in place is counted again
 * once pc_ctx_message_changed says so. */
Test(context_guard, remembered_counts_follow_edits)
{
	char *big = repeat('a', 5000);
	cJSON *msgs = cJSON_CreateArray();
	cJSON_AddItemToArray(msgs, tool_result(big));
	size_t before = pc_ctx_message_chars(cJSON_GetArrayItem(msgs, 0));
	cJSON *out = NULL;
	pc_ctx_guard_result_t r;
	cr_assert_eq(pc_ctx_guard(msgs, 1000, &out, &r), 0);
	cr_assert_not_null(out);
	char *printed = cJSON_PrintUnformatted(cJSON_GetArrayItem(out, 0));
	cJSON *fresh = cJSON_Parse(printed);
	cr_assert_lt(pc_ctx_message_chars(fresh), before);
	cr_assert_eq(pc_ctx_message_chars(cJSON_GetArrayItem(out, 0)), pc_ctx_message_chars(fresh));
	cr_assert_eq(pc_ctx_message_chars(cJSON_GetArrayItem(msgs, 0)), before, "the input keeps its count");
	cJSON *m = parse("{\"role\":\"user\",\"content\":\"abcd\"}");
	cr_assert_eq(pc_ctx_message_chars(m), 4);
	cr_assert_not_null(cJSON_SetValuestring(cJSON_GetObjectItem(m, "content"), "abcdefgh"));
	pc_ctx_message_changed(m);
	cr_assert_eq(pc_ctx_message_chars(m), 8);
	cJSON_Delete(m);
	cJSON_Delete(fresh);
	cJSON_free(printed);
	cJSON_Delete(out);
	cJSON_Delete(msgs);
	free(big);
}

/* The guard cuts a copy of messages whose wire form was already built:
 * the request from the copy carries the cut text, the original's the full. */
Test(context_guard, cut_results_reach_the_request)
{
	char *big = repeat('a', 5000);
	cJSON *msgs = cJSON_CreateArray(), *result = tool_result(big);
	cJSON_AddStringToObject(result, "toolCallId", "call_1");
	cJSON_AddItemToArray(msgs, result);
	pc_request_params_t p = {.api = PC_API_OPENAI_COMPLETIONS, .model = "m", .messages = msgs};
	char *full = NULL;
	cr_assert_eq(pc_request_body(&p, &full), 0);
	cr_assert(strstr(full, big));
	cJSON *out = NULL;
	pc_ctx_guard_result_t r;
	cr_assert_eq(pc_ctx_guard(msgs, 1000, &out, &r), 0);
	cr_assert_not_null(out);
	p.messages = out;
	char *cut = NULL;
	cr_assert_eq(pc_request_body(&p, &cut), 0);
	cr_assert_null(strstr(cut, big), "the cut text is sent");
	cr_assert_lt(strlen(cut), strlen(full));
	p.messages = msgs;
	char *again = NULL;
	cr_assert_eq(pc_request_body(&p, &again), 0);
	cr_assert_str_eq(again, full, "the original is untouched");
	cJSON_free(again);
	cJSON_free(cut);
	cJSON_free(full);
	cJSON_Delete(out);
	cJSON_Delete(msgs);
	free(big);
}

Test(context_guard, guard_overflow_and_fits)
{
	static const struct {
		size_t user_chars;
		uint64_t ctx;
		bool overflow;
	} rows[] = {
		{3600, 1000, false}, /* exactly the cap */
		{3601, 1000, true},
		{1024, 0, false},    /* floor */
		{1025, 0, true},
	};
	for (size_t i = 0; i < N_OF(rows); i++) {
		char *text = repeat('u', rows[i].user_chars);
		cJSON *msgs = cJSON_CreateArray(), *m = cJSON_CreateObject();
		cJSON_AddStringToObject(m, "role", "user");
		cJSON_AddStringToObject(m, "content", text);
		cJSON_AddItemToArray(msgs, m);
		cJSON *out = (cJSON *)1;
		pc_ctx_guard_result_t r;
		cr_assert_eq(pc_ctx_guard(msgs, rows[i].ctx, &out, &r), 0);
		cr_assert_null(out, "nothing to truncate: no copy");
		cr_assert_eq(r.overflow, rows[i].overflow, "row %zu", i);
		cr_assert_eq(r.total_chars, rows[i].user_chars);
		cJSON_Delete(msgs);
		free(text);
	}
	pc_ctx_guard_result_t r;
	cJSON *out;
	cr_assert_eq(pc_ctx_guard(NULL, 1, &out, &r), PC_EINVAL);
	cJSON *obj = cJSON_CreateObject();
	cr_assert_eq(pc_ctx_guard(obj, 1, &out, &r), PC_EINVAL);
	cJSON_Delete(obj);
}

/* ================= §3.3 session truncation ================= */

Test(context_guard, max_tool_result_chars_table)
{
	static const struct {
		uint64_t ctx;
		size_t override_chars, want;
	} rows[] = {
		{0, 0, 0},          {1000, 0, 1200},      {10, 0, 12},
		{33333, 0, 39996},  {33334, 0, 40000},    {200000, 0, 40000},
		{200000, 500, 500},
	};
	for (size_t i = 0; i < N_OF(rows); i++)
		cr_assert_eq(pc_ctx_tool_result_max_chars(rows[i].ctx, rows[i].override_chars), rows[i].want, "row %zu",
			     i);
}

/* Builds a text of `len` bytes of 'x' with `tail` at its end and a newline
 * at `nl` (0 = none). */
static char *make_text(size_t len, const char *tail, size_t nl)
{
	char *s = repeat('x', len);
	if (tail)
		memcpy(s + len - strlen(tail), tail, strlen(tail));
	if (nl)
		s[nl] = '\n';
	return s;
}

Test(context_guard, truncate_text_table)
{
	static const struct {
		const char *name;
		size_t len, max;
		const char *tail;
		size_t nl;
		bool cut;
		size_t head, tail_kept; /* tail_kept 0: head only */
	} rows[] = {
		{"fits", 3000, 3000, NULL, 0, false, 0, 0},
		{"fits the 2000 floor", 2000, 10, NULL, 0, false, 0, 0},
		{"head only", 10000, 3000, NULL, 0, true, 3000, 0},
		{"below the floor keeps 2000", 10000, 500, NULL, 0, true, 2000, 0},
		{"newline in the last 20 %", 10000, 3000, NULL, 2500, true, 2500, 0},
		{"newline before the window", 10000, 3000, NULL, 2000, true, 3000, 0},
		{"error tail: head and tail", 10000, 5000, "error: boom", 0, true, 3500, 1500},
		{"closing brace counts", 10000, 5000, "}\n  ", 0, true, 3500, 1500},
		{"summary word counts", 10000, 5000, "Summary ok", 0, true, 3500, 1500},
		{"tail capped at 4000", 100000, 20000, "FAILED", 0, true, 16000, 4000},
		{"budget not over 2 x 2000: head only", 10000, 4000, "error", 0, true, 4000, 0},
		{"plain tail: head only", 10000, 5000, "nothing here", 0, true, 5000, 0},
	};
	for (size_t i = 0; i < N_OF(rows); i++) {
		char *text = make_text(rows[i].len, rows[i].tail, rows[i].nl);
		char *out = (char *)1;
		size_t out_len = 0;
		cr_assert_eq(pc_ctx_truncate_text(text, rows[i].len, rows[i].max, &out, &out_len), 0);
		if (!rows[i].cut) {
			cr_assert_null(out, "%s", rows[i].name);
			cr_assert_eq(out_len, rows[i].len);
			free(text);
			continue;
		}
		cr_assert_not_null(out, "%s", rows[i].name);
		cr_assert_eq(strlen(out), out_len, "%s", rows[i].name);
		cr_assert_eq(strncmp(out, text, rows[i].head), 0, "%s: head", rows[i].name);
		char notice[128];
		size_t removed = rows[i].len - rows[i].head - rows[i].tail_kept;
		snprintf(notice, sizeof(notice), PC_CTX_TRUNCATION_NOTICE_FMT, removed);
		size_t nlen = strlen(notice);
		cr_assert_str_eq(out + out_len - nlen, notice, "%s: notice", rows[i].name);
		if (rows[i].tail_kept) {
			const char *marker = PC_CTX_MIDDLE_OMITTED_MARKER;
			cr_assert_eq(strncmp(out + rows[i].head, marker, strlen(marker)), 0, "%s: marker",
				     rows[i].name);
			cr_assert_eq(out_len, rows[i].head + strlen(marker) + rows[i].tail_kept + nlen, "%s",
				     rows[i].name);
			cr_assert_eq(memcmp(out + out_len - nlen - rows[i].tail_kept,
					    text + rows[i].len - rows[i].tail_kept, rows[i].tail_kept),
				     0, "%s: tail", rows[i].name);
		} else {
			cr_assert_eq(out_len, rows[i].head + nlen, "%s: %zu", rows[i].name, out_len);
		}
		free(out);
		free(text);
	}
	char *o;
	cr_assert_eq(pc_ctx_truncate_text(NULL, 0, 1, &o, NULL), PC_EINVAL);
	cr_assert_eq(pc_ctx_truncate_text("x", 1, 1, NULL, NULL), PC_EINVAL);
}

Test(context_guard, truncate_never_splits_utf8)
{
	/* 3000 two-byte characters; a cut at byte 2001 must move back to 2000. */
	size_t n = 3000;
	char *s = malloc(2 * n + 1);
	cr_assert_not_null(s);
	for (size_t i = 0; i < n; i++) {
		s[2 * i] = (char)0xC3;
		s[2 * i + 1] = (char)0xA9;
	}
	s[2 * n] = '\0';
	char *out;
	size_t len;
	cr_assert_eq(pc_ctx_truncate_text(s, 2 * n, 2001, &out, &len), 0);
	cr_assert_not_null(out);
	cr_assert_eq((unsigned char)out[1999], 0xA9);
	cr_assert_eq(out[2000], '\n', "the notice follows a whole character");
	free(out);
	free(s);
}

Test(context_guard, truncate_messages_and_reducible)
{
	char *big = repeat('b', 6000);
	cJSON *msgs = cJSON_CreateArray();
	cJSON_AddItemToArray(msgs, parse("{\"role\":\"user\",\"content\":\"go\"}"));
	cJSON_AddItemToArray(msgs, parse("{\"role\":\"assistant\",\"content\":[]}"));
	cJSON_AddItemToArray(msgs, tool_result(big));
	cJSON_AddItemToArray(msgs, parse("{\"role\":\"assistant\",\"content\":[]}"));
	cJSON_AddItemToArray(msgs, tool_result(big));
	cJSON_AddItemToArray(msgs, tool_result("small"));

	static const struct {
		size_t max;
		bool protect;
		size_t count, reducible;
	} rows[] = {
		{3000, true, 1, 6000},  /* the trailing block after the last assistant is kept */
		{3000, false, 2, 6000},
		{500, false, 2, 8000},  /* floor 2000: 4000 reducible each */
		{6000, false, 0, 0},
	};
	for (size_t i = 0; i < N_OF(rows); i++) {
		cr_assert_eq(pc_ctx_reducible_chars(msgs, rows[i].max), rows[i].reducible, "row %zu", i);
		cJSON *out = (cJSON *)1;
		size_t count = 99;
		cr_assert_eq(pc_ctx_truncate_messages(msgs, rows[i].max, rows[i].protect, &out, &count), 0);
		cr_assert_eq(count, rows[i].count, "row %zu", i);
		if (!count) {
			cr_assert_null(out);
			continue;
		}
		cr_assert_lt(strlen(result_text(out, 2)), 6000, "row %zu", i);
		cr_assert_eq(strlen(result_text(out, 4)) < 6000, rows[i].count == 2, "row %zu", i);
		cr_assert_str_eq(result_text(out, 5), "small");
		cJSON_Delete(out);
	}
	cJSON_Delete(msgs);
	free(big);
	ASSERT_NO_LEAKS();
}

Test(context_guard, multi_block_results_are_joined)
{
	char *a = repeat('a', 1500), *b = repeat('b', 1500);
	cJSON *m = tool_result(a), *content = cJSON_GetObjectItem(m, "content");
	cJSON_AddItemToArray(content, parse("{\"type\":\"image\",\"data\":\"zz\"}"));
	cJSON *blk = cJSON_CreateObject();
	cJSON_AddStringToObject(blk, "type", "text");
	cJSON_AddStringToObject(blk, "text", b);
	cJSON_AddItemToArray(content, blk);
	cJSON *msgs = cJSON_CreateArray();
	cJSON_AddItemToArray(msgs, m);
	cJSON *out;
	size_t count;
	cr_assert_eq(pc_ctx_truncate_messages(msgs, 2000, false, &out, &count), 0);
	cr_assert_eq(count, 1);
	const cJSON *c = cJSON_GetObjectItem(cJSON_GetArrayItem(out, 0), "content");
	cr_assert_eq(cJSON_GetArraySize(c), 2, "one text block and the image");
	const char *t = result_text(out, 0);
	cr_assert_eq(t[1500], '\n', "blocks joined by a newline");
	cr_assert_eq(strncmp(t, a, 1500), 0);
	cJSON_Delete(out);
	cJSON_Delete(msgs);
	free(a);
	free(b);
}

Test(context_guard, hostile_inputs)
{
	/* Huge windows saturate instead of overflowing. */
	pc_ctx_guard_limits_t l;
	pc_ctx_guard_limits(UINT64_MAX, &l);
	cr_assert_eq(l.max_context_chars, SIZE_MAX);
	cr_assert_eq(pc_ctx_tool_result_max_chars(UINT64_MAX, 0), PC_CTX_MAX_LIVE_TOOL_RESULT_CHARS);
	pc_preflight_input_t in = {UINT64_MAX, UINT64_MAX, UINT64_MAX, 1000, 0, 1};
	pc_preflight_result_t r;
	cr_assert_eq(pc_preflight_check(&in, &r), 0);
	cr_assert_eq(r.estimated_tokens, UINT64_MAX);
	cr_assert_eq(r.route, PC_PREFLIGHT_COMPACT_THEN_TRUNCATE);
	pc_compact_input_t ci = {.context_window = 0, .timed_out = true, .prompt_side_tokens = 1};
	pc_compact_decision_t d;
	cr_assert_eq(pc_compact_decide(&ci, &d), 0);
	cr_assert_eq(d.trigger, PC_COMPACT_TRIGGER_TIMEOUT_RECOVERY, "no window: any prompt is over 65%");

	/* Odd message shapes are estimated and guarded without crashing. */
	cJSON *msgs = parse("[{\"role\":\"toolResult\",\"content\":[{\"type\":\"text\",\"text\":7},"
			    "{\"type\":\"text\"},{\"nope\":true},\"str\",null]},"
			    "{\"role\":5,\"content\":{\"a\":[1,2,{\"b\":null}]}},7,\"x\",null,"
			    "{\"role\":\"toolResult\"},{\"role\":\"toolResult\",\"content\":42}]");
	cJSON *out = (cJSON *)1;
	pc_ctx_guard_result_t g;
	cr_assert_eq(pc_ctx_guard(msgs, 1, &out, &g), 0);
	cr_assert_null(out);
	size_t count;
	cr_assert_eq(pc_ctx_truncate_messages(msgs, 1, true, &out, &count), 0);
	cr_assert_eq(count, 0);
	cr_assert_gt(pc_ctx_messages_tokens(msgs), 0);
	cJSON_Delete(msgs);
	ASSERT_NO_LEAKS();
}

/* ================= §2.7 preflight ================= */

Test(preflight, route_table)
{
	static const struct {
		pc_preflight_input_t in;
		pc_preflight_route_t route;
		uint64_t estimated, budget, overflow, threshold;
	} rows[] = {
		{{1000, 100, 100, 200000, 20000, 0}, PC_PREFLIGHT_FITS, 1440, 180000, 0, 0},
		{{150000, 0, 0, 200000, 20000, 0}, PC_PREFLIGHT_FITS, 180000, 180000, 0, 0},
		{{160000, 0, 0, 200000, 20000, 0}, PC_PREFLIGHT_COMPACT_ONLY, 192000, 180000, 12000, 72000},
		{{160000, 0, 0, 200000, 20000, 72000}, PC_PREFLIGHT_TRUNCATE_TOOL_RESULTS_ONLY, 192000, 180000, 12000,
		 72000},
		{{160000, 0, 0, 200000, 20000, 71999}, PC_PREFLIGHT_COMPACT_THEN_TRUNCATE, 192000, 180000, 12000, 72000},
		/* small window: min prompt budget 5000 caps the reserve at 5000 */
		{{5000, 0, 0, 10000, 20000, 6048}, PC_PREFLIGHT_TRUNCATE_TOOL_RESULTS_ONLY, 6000, 5000, 1000, 6048},
		{{5000, 0, 0, 10000, 20000, 6047}, PC_PREFLIGHT_COMPACT_THEN_TRUNCATE, 6000, 5000, 1000, 6048},
		/* tiny overflow: the 512-token slack dominates */
		{{150001, 0, 0, 200000, 20000, 1}, PC_PREFLIGHT_COMPACT_THEN_TRUNCATE, 180002, 180000, 2, 2056},
		/* no window: budget 1 */
		{{0, 0, 1, 0, 20000, 0}, PC_PREFLIGHT_COMPACT_ONLY, 2, 1, 1, 2052},
		/* no reserve */
		{{10, 0, 0, 100, 0, 0}, PC_PREFLIGHT_FITS, 12, 100, 0, 0},
	};
	for (size_t i = 0; i < N_OF(rows); i++) {
		pc_preflight_result_t r;
		cr_assert_eq(pc_preflight_check(&rows[i].in, &r), 0);
		cr_assert_eq(r.route, rows[i].route, "row %zu: got %s", i, pc_preflight_route_name(r.route));
		cr_assert_eq(r.estimated_tokens, rows[i].estimated, "row %zu", i);
		cr_assert_eq(r.prompt_budget, rows[i].budget, "row %zu", i);
		cr_assert_eq(r.overflow_tokens, rows[i].overflow, "row %zu", i);
		cr_assert_eq(r.threshold_chars, rows[i].threshold, "row %zu", i);
	}
	cr_assert_eq(pc_preflight_check(NULL, NULL), PC_EINVAL);
}

Test(preflight, next_table)
{
	static const struct {
		pc_preflight_route_t route;
		bool done;
		size_t count;
		pc_preflight_next_t want;
	} rows[] = {
		{PC_PREFLIGHT_FITS, false, 0, PC_PREFLIGHT_NEXT_PROMPT},
		{PC_PREFLIGHT_TRUNCATE_TOOL_RESULTS_ONLY, false, 0, PC_PREFLIGHT_NEXT_TRUNCATE},
		{PC_PREFLIGHT_TRUNCATE_TOOL_RESULTS_ONLY, true, 2, PC_PREFLIGHT_NEXT_RETRY},
		{PC_PREFLIGHT_TRUNCATE_TOOL_RESULTS_ONLY, true, 0, PC_PREFLIGHT_NEXT_OVERFLOW},
		{PC_PREFLIGHT_COMPACT_ONLY, false, 0, PC_PREFLIGHT_NEXT_OVERFLOW},
		{PC_PREFLIGHT_COMPACT_THEN_TRUNCATE, false, 0, PC_PREFLIGHT_NEXT_OVERFLOW},
	};
	for (size_t i = 0; i < N_OF(rows); i++)
		cr_assert_eq(pc_preflight_next(rows[i].route, rows[i].done, rows[i].count), rows[i].want, "row %zu", i);
	static const char *const names[] = {"fits", "compact_only", "truncate_tool_results_only",
					    "compact_then_truncate"};
	for (int i = 0; i < 4; i++)
		cr_assert_str_eq(pc_preflight_route_name((pc_preflight_route_t)i), names[i]);
	cr_assert_str_eq(pc_preflight_route_name((pc_preflight_route_t)42), "unknown");
}

/* ================= §7.1 compaction triggers ================= */

Test(compaction, reserve_table)
{
	static const struct {
		uint64_t window, configured, want;
	} rows[] = {
		{200000, 0, 20000},     {200000, 10000, 20000}, {200000, 50000, 50000},
		{10000, 0, 5000},       {200000, 250000, 192000}, {0, 0, 0},
	};
	for (size_t i = 0; i < N_OF(rows); i++)
		cr_assert_eq(pc_compact_reserve_tokens(rows[i].window, rows[i].configured), rows[i].want, "row %zu", i);
}

Test(compaction, decide_table)
{
	/* Defaults for every row: a 200k window. */
	static const struct {
		const char *name;
		pc_compact_input_t in;
		pc_compact_action_t action;
		pc_compact_trigger_t trigger;
		bool truncate_after;
	} rows[] = {
		{"nothing", {.context_window = 200000}, PC_COMPACT_NONE, PC_COMPACT_TRIGGER_NONE, false},
		{"timeout, prompt 66%",
		 {.context_window = 200000, .timed_out = true, .prompt_side_tokens = 132000},
		 PC_COMPACT_RUN, PC_COMPACT_TRIGGER_TIMEOUT_RECOVERY, false},
		{"timeout, prompt exactly 65%",
		 {.context_window = 200000, .timed_out = true, .prompt_side_tokens = 130000},
		 PC_COMPACT_NONE, PC_COMPACT_TRIGGER_NONE, false},
		{"timeout, second attempt",
		 {.context_window = 200000, .timed_out = true, .prompt_side_tokens = 190000, .timeout_attempts = 1},
		 PC_COMPACT_RUN, PC_COMPACT_TRIGGER_TIMEOUT_RECOVERY, false},
		{"timeout budget spent",
		 {.context_window = 200000, .timed_out = true, .prompt_side_tokens = 190000, .timeout_attempts = 2},
		 PC_COMPACT_NONE, PC_COMPACT_TRIGGER_NONE, false},
		{"timeout during compaction",
		 {.context_window = 200000, .timed_out = true, .timed_out_during_compaction = true,
		  .prompt_side_tokens = 190000},
		 PC_COMPACT_NONE, PC_COMPACT_TRIGGER_NONE, false},
		{"timeout during tools",
		 {.context_window = 200000, .timed_out = true, .timed_out_during_tool_execution = true,
		  .prompt_side_tokens = 190000},
		 PC_COMPACT_NONE, PC_COMPACT_TRIGGER_NONE, false},
		{"run budget timeout",
		 {.context_window = 200000, .timed_out = true, .timed_out_by_run_budget = true,
		  .prompt_side_tokens = 190000},
		 PC_COMPACT_NONE, PC_COMPACT_TRIGGER_NONE, false},
		{"timeout budget spent falls through to overflow",
		 {.context_window = 200000, .timed_out = true, .prompt_side_tokens = 190000, .timeout_attempts = 2,
		  .context_overflow = true},
		 PC_COMPACT_RUN, PC_COMPACT_TRIGGER_OVERFLOW, false},
		{"overflow", {.context_window = 200000, .context_overflow = true}, PC_COMPACT_RUN,
		 PC_COMPACT_TRIGGER_OVERFLOW, false},
		{"overflow, third attempt", {.context_window = 200000, .context_overflow = true, .overflow_attempts = 2},
		 PC_COMPACT_RUN, PC_COMPACT_TRIGGER_OVERFLOW, false},
		{"overflow budget spent", {.context_window = 200000, .context_overflow = true, .overflow_attempts = 3},
		 PC_COMPACT_NONE, PC_COMPACT_TRIGGER_NONE, false},
		{"overflow after in-attempt compaction",
		 {.context_window = 200000, .context_overflow = true, .attempt_compacted = true}, PC_COMPACT_RETRY_ONLY,
		 PC_COMPACT_TRIGGER_OVERFLOW, false},
		{"compaction failure", {.context_window = 200000, .context_overflow = true, .compaction_failure = true},
		 PC_COMPACT_NONE, PC_COMPACT_TRIGGER_NONE, false},
		{"aborted overflow", {.context_window = 200000, .context_overflow = true, .aborted = true},
		 PC_COMPACT_NONE, PC_COMPACT_TRIGGER_NONE, false},
		{"preflight compact only",
		 {.context_window = 200000, .context_overflow = true, .preflight_route = PC_PREFLIGHT_COMPACT_ONLY},
		 PC_COMPACT_RUN, PC_COMPACT_TRIGGER_PREFLIGHT, false},
		{"preflight mixed route",
		 {.context_window = 200000, .context_overflow = true,
		  .preflight_route = PC_PREFLIGHT_COMPACT_THEN_TRUNCATE},
		 PC_COMPACT_RUN, PC_COMPACT_TRIGGER_PREFLIGHT, true},
		{"threshold crossed",
		 {.context_window = 200000, .auto_enabled = true, .turn_succeeded = true, .context_tokens = 180001},
		 PC_COMPACT_RUN, PC_COMPACT_TRIGGER_THRESHOLD, false},
		{"threshold not crossed",
		 {.context_window = 200000, .auto_enabled = true, .turn_succeeded = true, .context_tokens = 180000},
		 PC_COMPACT_NONE, PC_COMPACT_TRIGGER_NONE, false},
		{"threshold with a larger reserve",
		 {.context_window = 200000, .auto_enabled = true, .turn_succeeded = true, .context_tokens = 150001,
		  .reserve_tokens = 50000},
		 PC_COMPACT_RUN, PC_COMPACT_TRIGGER_THRESHOLD, false},
		{"auto compaction disabled",
		 {.context_window = 200000, .turn_succeeded = true, .context_tokens = 199999}, PC_COMPACT_NONE,
		 PC_COMPACT_TRIGGER_NONE, false},
		{"failed turn: no threshold",
		 {.context_window = 200000, .auto_enabled = true, .context_tokens = 199999}, PC_COMPACT_NONE,
		 PC_COMPACT_TRIGGER_NONE, false},
		{"transcript bytes",
		 {.context_window = 200000, .transcript_bytes = 2000001, .max_transcript_bytes = 2000000},
		 PC_COMPACT_RUN, PC_COMPACT_TRIGGER_TRANSCRIPT_BYTES, false},
		{"transcript bytes at the cap",
		 {.context_window = 200000, .transcript_bytes = 2000000, .max_transcript_bytes = 2000000},
		 PC_COMPACT_NONE, PC_COMPACT_TRIGGER_NONE, false},
	};
	for (size_t i = 0; i < N_OF(rows); i++) {
		pc_compact_decision_t d;
		cr_assert_eq(pc_compact_decide(&rows[i].in, &d), 0);
		cr_assert_eq(d.action, rows[i].action, "%s: action %d (%s)", rows[i].name, d.action, d.detail);
		cr_assert_eq(d.trigger, rows[i].trigger, "%s: trigger %s", rows[i].name,
			     pc_compact_trigger_name(d.trigger));
		cr_assert_eq(d.truncate_after, rows[i].truncate_after, "%s", rows[i].name);
		cr_assert(d.detail && *d.detail, "%s: every decision names its rule", rows[i].name);
	}
	cr_assert_eq(pc_compact_decide(NULL, NULL), PC_EINVAL);
	static const char *const names[] = {"none", "threshold", "overflow", "timeout_recovery", "preflight",
					    "transcript_bytes"};
	for (int i = 0; i < 6; i++)
		cr_assert_str_eq(pc_compact_trigger_name((pc_compact_trigger_t)i), names[i]);
}

/* ================= §3.4 steering ================= */

Test(steering, boundary_table)
{
	enum { S = PC_TOOLS_SEQUENTIAL, P = PC_TOOLS_PARALLEL, ONE = PC_STEER_DRAIN_ONE, ALL = PC_STEER_DRAIN_ALL };
	static const struct {
		const char *name;
		int mode, drain;
		pc_steer_boundary_t at;
		size_t index, n, pending;
		int rc;
		size_t skip_from, inject;
		bool cont;
	} rows[] = {
		{"seq: nothing pending", S, ONE, PC_STEER_AT_CALL_START, 0, 3, 0, 0, 3, 0, false},
		{"seq: steer before the first call", S, ONE, PC_STEER_AT_CALL_START, 0, 3, 1, 0, 0, 0, false},
		{"seq: steer after call 0 skips the tail", S, ONE, PC_STEER_AT_CALL_START, 1, 3, 2, 0, 1, 0, false},
		{"seq: last call", S, ALL, PC_STEER_AT_CALL_START, 2, 3, 1, 0, 2, 0, false},
		{"seq: no batch checkpoint", S, ONE, PC_STEER_AT_BATCH_LAUNCH, 0, 3, 1, PC_EINVAL, 3, 0, false},
		{"seq: index out of range", S, ONE, PC_STEER_AT_CALL_START, 3, 3, 1, PC_EINVAL, 3, 0, false},
		{"par: steer suppresses the batch", P, ONE, PC_STEER_AT_BATCH_LAUNCH, 0, 4, 1, 0, 0, 0, false},
		{"par: nothing pending", P, ONE, PC_STEER_AT_BATCH_LAUNCH, 0, 4, 0, 0, 4, 0, false},
		{"par: no per-call checkpoint", P, ONE, PC_STEER_AT_CALL_START, 1, 4, 1, PC_EINVAL, 4, 0, false},
		{"tools done: one at a time", S, ONE, PC_STEER_AT_TOOLS_DONE, 0, 3, 3, 0, 3, 1, false},
		{"tools done: all", P, ALL, PC_STEER_AT_TOOLS_DONE, 0, 3, 3, 0, 3, 3, false},
		{"tools done: nothing", S, ALL, PC_STEER_AT_TOOLS_DONE, 0, 3, 0, 0, 3, 0, false},
		{"turn end: steering continues the loop", S, ONE, PC_STEER_AT_TURN_END, 0, 0, 2, 0, 0, 1, true},
		{"turn end: all", S, ALL, PC_STEER_AT_TURN_END, 0, 0, 2, 0, 0, 2, true},
		{"turn end: nothing, the loop ends", P, ALL, PC_STEER_AT_TURN_END, 0, 0, 0, 0, 0, 0, false},
	};
	for (size_t i = 0; i < N_OF(rows); i++) {
		pc_steer_decision_t d;
		int rc = pc_steer_at((pc_tool_mode_t)rows[i].mode, (pc_steer_drain_t)rows[i].drain, rows[i].at,
				     rows[i].index, rows[i].n, rows[i].pending, &d);
		cr_assert_eq(rc, rows[i].rc, "%s", rows[i].name);
		if (rc)
			continue;
		cr_assert_eq(d.skip_from, rows[i].skip_from, "%s", rows[i].name);
		cr_assert_eq(d.inject, rows[i].inject, "%s", rows[i].name);
		cr_assert_eq(d.continue_loop, rows[i].cont, "%s", rows[i].name);
	}
	cr_assert_eq(pc_steer_at(PC_TOOLS_SEQUENTIAL, PC_STEER_DRAIN_ONE, PC_STEER_AT_TOOLS_DONE, 0, 1, 1, NULL),
		     PC_EINVAL);
	cr_assert_eq(pc_steer_at(PC_TOOLS_SEQUENTIAL, PC_STEER_DRAIN_ONE, (pc_steer_boundary_t)9, 0, 1, 1,
				 &(pc_steer_decision_t){0}),
		     PC_EINVAL);
}

/* ================= §5.3 tags ================= */

Test(payload, strip_tags_table)
{
	static const struct {
		const char *in;
		bool enforce_final;
		const char *want;
	} rows[] = {
		{"<think>hidden</think>Hello", false, "Hello"},
		{"A<thinking>x</thinking>B", false, "AB"},
		{"<THOUGHT>x</THOUGHT> ok", false, "ok"},
		{"<antthinking>x</antthinking>ok", false, "ok"},
		{"<think data-x=\"1\">x</think >ok", false, "ok"},
		{"before <think>never closed", false, "before"},
		{"`<think>` is a tag", false, "`<think>` is a tag"},
		{"```\n<think>x</think>\n```", false, "```\n<think>x</think>\n```"},
		{"<thinker>keep</thinker>", false, "<thinker>keep</thinker>"},
		{"a < b and <final>x</final>", false, "a < b and x"},
		{"x <br> y", false, "x <br> y"},
		{"<think>t</think>pre<final>answer</final>post", true, "answer"},
		{"<final>a</final> b <final>c</final>", true, "ac"},
		{"just text", true, ""},
		{"<final><think>no</think>yes</final>", true, "yes"},
		{"", false, ""},
	};
	for (size_t i = 0; i < N_OF(rows); i++) {
		char *out = NULL;
		cr_assert_eq(pc_payload_strip_tags(rows[i].in, rows[i].enforce_final, &out), 0);
		cr_assert_str_eq(out, rows[i].want, "\"%s\": got \"%s\"", rows[i].in, out);
		free(out);
	}
	char *out;
	cr_assert_eq(pc_payload_strip_tags(NULL, false, &out), PC_EINVAL);
}

/* ================= §5.5 the silent token ================= */

Test(payload, silent_table)
{
	static const struct {
		const char *text;
		bool silent, prefix;
		const char *rest; /* pc_payload_skip_silent; NULL = unchanged */
	} rows[] = {
		{"NO_REPLY", true, true, ""},
		{"  no_reply \n", true, false, ""}, /* a draft with trailing space is past the token */
		{"\nNO_REPLY\n", true, false, ""},
		{"NO_REPLY.", false, false, "."},
		{"Done. NO_REPLY", false, false, NULL},
		{"NO_REPLY please", false, false, "please"},
		{"NO_REPLYING", false, false, NULL},
		{"NO_", false, true, NULL},
		{"no_re", false, true, NULL},
		{"NO", false, false, NULL},
		{"NO_X", false, false, NULL},
		{"NO_REPLY_", false, false, NULL},
		{"Hello", false, false, NULL},
		{"", false, false, NULL},
	};
	for (size_t i = 0; i < N_OF(rows); i++) {
		cr_assert_eq(pc_payload_is_silent(rows[i].text), rows[i].silent, "silent \"%s\"", rows[i].text);
		cr_assert_eq(pc_payload_is_silent_prefix(rows[i].text), rows[i].prefix, "prefix \"%s\"", rows[i].text);
		const char *rest = pc_payload_skip_silent(rows[i].text);
		if (rows[i].rest)
			cr_assert_str_eq(rest, rows[i].rest, "skip \"%s\"", rows[i].text);
		else
			cr_assert_eq(rest, rows[i].text, "skip \"%s\" unchanged", rows[i].text);
	}
	cr_assert_not(pc_payload_is_silent(NULL));
	cr_assert_not(pc_payload_is_silent_prefix(NULL));
	cr_assert_null(pc_payload_skip_silent(NULL));
}

/* ================= §5.6 messaging-tool dedup ================= */

Test(payload, normalize_table)
{
	static const struct {
		const char *in, *want;
	} rows[] = {
		{"  Hello   World \n", "hello world"}, {"", ""},      {"   ", ""},
		{"A\tB\r\nC", "a b c"},               {"ÉTÉ Ok", "ÉtÉ ok"},
	};
	for (size_t i = 0; i < N_OF(rows); i++) {
		char *out;
		cr_assert_eq(pc_payload_normalize(rows[i].in, &out), 0);
		cr_assert_str_eq(out, rows[i].want, "\"%s\"", rows[i].in);
		free(out);
	}
}

Test(payload, sent_dedup)
{
	cJSON *sent = cJSON_CreateArray();
	cr_assert_eq(pc_payload_sent_commit(sent, "Sent the Report!"), 0);
	cr_assert_eq(pc_payload_sent_commit(sent, "   "), 0);
	cr_assert_eq(cJSON_GetArraySize(sent), 1, "blank texts are not recorded");
	static const struct {
		const char *text;
		bool dup;
	} rows[] = {
		{"  sent the   report! ", true}, {"SENT THE REPORT!", true}, {"sent the report", false},
		{"", false},                     {"   ", false},              {"sent the report! more", false},
	};
	for (size_t i = 0; i < N_OF(rows); i++)
		cr_assert_eq(pc_payload_is_sent_duplicate(sent, rows[i].text), rows[i].dup, "\"%s\"", rows[i].text);
	cr_assert_not(pc_payload_is_sent_duplicate(NULL, "x"));

	for (int i = 0; i < PC_PAYLOAD_SENT_CAP + 5; i++) {
		char t[32];
		snprintf(t, sizeof(t), "msg %d", i);
		cr_assert_eq(pc_payload_sent_commit(sent, t), 0);
	}
	cr_assert_eq(cJSON_GetArraySize(sent), PC_PAYLOAD_SENT_CAP);
	cr_assert_str_eq(cJSON_GetArrayItem(sent, 0)->valuestring, "msg 5", "the oldest are dropped");
	cr_assert_not(pc_payload_is_sent_duplicate(sent, "Sent the Report!"));
	cr_assert_eq(pc_payload_sent_commit(NULL, "x"), PC_EINVAL);
	cJSON_Delete(sent);
	ASSERT_NO_LEAKS();
}

/* ================= §5.7 final payloads ================= */

Test(payload, tool_error_text)
{
	static const struct {
		pc_tool_error_t e;
		bool details;
		const char *want;
	} rows[] = {
		{{.tool_name = "read"}, false, "\u26a0\ufe0f read failed"},
		{{.tool_name = "read", .meta = "a.txt"}, false, "\u26a0\ufe0f read (a.txt) failed"},
		{{.tool_name = "read", .error = "ENOENT"}, false, "\u26a0\ufe0f read failed"},
		{{.tool_name = "read", .error = "ENOENT"}, true, "\u26a0\ufe0f read failed: ENOENT"},
		{{.tool_name = "read"}, true, "\u26a0\ufe0f read failed"},
		{{.tool_name = "write", .meta = "b", .error = "EACCES"}, true, "\u26a0\ufe0f write (b) failed: EACCES"},
	};
	for (size_t i = 0; i < N_OF(rows); i++) {
		char *out;
		cr_assert_eq(pc_payload_tool_error_text(&rows[i].e, rows[i].details, &out), 0);
		cr_assert_str_eq(out, rows[i].want, "row %zu", i);
		free(out);
	}
	char *out;
	pc_tool_error_t none = {0};
	cr_assert_eq(pc_payload_tool_error_text(&none, false, &out), PC_EINVAL);
}

Test(payload, recoverable_table)
{
	static const struct {
		const char *error;
		bool want;
	} rows[] = {
		{"path is required", true},   {"Missing argument", true},     {"INVALID json", true},
		{"value must be > 0", true},  {"must have a name", true},     {"needs a file", true},
		{"requires auth", true},      {"ENOENT: no such file", false}, {"permission denied", false},
		{"", false},                  {NULL, false},
	};
	for (size_t i = 0; i < N_OF(rows); i++)
		cr_assert_eq(pc_payload_tool_error_recoverable(rows[i].error), rows[i].want, "\"%s\"",
			     rows[i].error ? rows[i].error : "(null)");
}

/* Renders payloads as "text|text" with "!" before error texts and "?"
 * before reasoning, for comparison with a table. */
static void render(const cJSON *arr, char *buf, size_t cap)
{
	size_t o = 0;
	const cJSON *p;
	buf[0] = '\0';
	cJSON_ArrayForEach(p, arr) {
		const char *t = cJSON_GetObjectItem(p, "text")->valuestring;
		o += (size_t)snprintf(buf + o, cap - o, "%s%s%s", o ? "|" : "",
				      cJSON_IsTrue(cJSON_GetObjectItem(p, "isError"))       ? "!"
				      : cJSON_IsTrue(cJSON_GetObjectItem(p, "isReasoning")) ? "?"
											     : "",
				      t);
	}
}

#define WARN "\u26a0\ufe0f read (a.txt) failed"

Test(payload, build_table)
{
	static const pc_tool_error_t plain = {.tool_name = "read", .meta = "a.txt", .error = "ENOENT"};
	static const pc_tool_error_t mutating = {.tool_name = "read", .meta = "a.txt", .error = "ENOENT",
						 .mutating = true};
	static const pc_tool_error_t recoverable = {.tool_name = "read", .meta = "a.txt",
						    .error = "path is required"};
	static const pc_tool_error_t exec = {.tool_name = "exec", .meta = "ls", .error = "exit 1",
					     .exec_like = true};
	static const pc_tool_error_t mutating_exec = {.tool_name = "exec", .meta = "ls", .error = "exit 1",
						      .exec_like = true, .mutating = true};
	static const pc_tool_error_t send = {.tool_name = "sessions_send", .error = "x"};
	static const struct {
		const char *name;
		const char *texts;  /* JSON array or NULL */
		const char *sent;   /* JSON array or NULL */
		const char *reasoning, *assistant_error;
		const pc_tool_error_t *err;
		bool delivered, messaged, suppress_warn, suppress_errors, details;
		const char *want;
	} rows[] = {
		{"one text", "[\"Hello\"]", NULL, NULL, NULL, NULL, false, false, false, false, false, "Hello"},
		{"trimmed", "[\"  Hello \\n\"]", NULL, NULL, NULL, NULL, false, false, false, false, false, "Hello"},
		{"silent", "[\"NO_REPLY\"]", NULL, NULL, NULL, NULL, false, false, false, false, false, ""},
		{"silent with spaces", "[\" no_reply \",\"Hi\"]", NULL, NULL, NULL, NULL, false, false, false, false,
		 false, "Hi"},
		{"ends with NO_REPLY stays", "[\"Done. NO_REPLY\"]", NULL, NULL, NULL, NULL, false, false, false,
		 false, false, "Done. NO_REPLY"},
		{"blank dropped", "[\"Hi\",\"   \",\"\"]", NULL, NULL, NULL, NULL, false, false, false, false, false,
		 "Hi"},
		{"messaging duplicate", "[\"Sent it\",\"Other\"]", "[\"sent it\"]", NULL, NULL, NULL, false, false,
		 false, false, false, "Other"},
		{"delivered to source", "[\"I sent the message\"]", NULL, NULL, NULL, NULL, true, true, false, false,
		 false, ""},
		{"reasoning first", "[\"Answer\"]", NULL, "Because", NULL, NULL, false, false, false, false, false,
		 "?Because|Answer"},
		{"model error", NULL, NULL, NULL, "Rate limited", NULL, false, false, false, false, false,
		 "!Rate limited"},
		{"tool error as the only reply", NULL, NULL, NULL, NULL, &plain, false, false, false, false, false,
		 "!" WARN},
		{"tool error with details", NULL, NULL, NULL, NULL, &plain, false, false, false, false, true,
		 "!" WARN ": ENOENT"},
		{"tool error hidden by a reply", "[\"Hello\"]", NULL, NULL, NULL, &plain, false, false, false, false,
		 false, "Hello"},
		{"a model error is no reply", NULL, NULL, NULL, "Boom", &plain, false, false, false, false, false,
		 "!Boom|!" WARN},
		{"reasoning is no reply", NULL, NULL, "R", NULL, &plain, false, false, false, false, false,
		 "?R|!" WARN},
		{"silent is no reply", "[\"NO_REPLY\"]", NULL, NULL, NULL, &plain, false, false, false, false, false,
		 "!" WARN},
		{"mutating shown despite a reply", "[\"Hello\"]", NULL, NULL, NULL, &mutating, false, true, false, false,
		 false, "Hello|!" WARN},
		{"mutating after a model error", NULL, NULL, NULL, "Boom", &mutating, false, false, false, false, false,
		 "!Boom"},
		{"mutating, warnings suppressed", "[\"Hello\"]", NULL, NULL, NULL, &mutating, false, false, true, false,
		 false, "Hello"},
		{"mutating, suppressToolErrors", "[\"Hello\"]", NULL, NULL, NULL, &mutating, false, false, false, true,
		 false, "Hello|!" WARN},
		{"mutating exec without details", "[\"Hello\"]", NULL, NULL, NULL, &mutating_exec, false, false, false,
		 false, false, "Hello"},
		{"mutating exec with details", "[\"Hello\"]", NULL, NULL, NULL, &mutating_exec, false, false, false,
		 false, true, "Hello|!\u26a0\ufe0f exec (ls) failed: exit 1"},
		{"recoverable", NULL, NULL, NULL, NULL, &recoverable, false, false, false, false, false, ""},
		{"suppressToolErrors", NULL, NULL, NULL, NULL, &plain, false, false, false, true, false, ""},
		{"messaging tool replied", NULL, NULL, NULL, NULL, &plain, false, true, false, false, false, ""},
		{"exec without details", NULL, NULL, NULL, NULL, &exec, false, false, false, false, false, ""},
		{"exec with details", NULL, NULL, NULL, NULL, &exec, false, false, false, false, true,
		 "!\u26a0\ufe0f exec (ls) failed: exit 1"},
		{"sessions_send", NULL, NULL, NULL, NULL, &send, false, false, false, false, false, ""},
		{"warning not repeated (normalised)", NULL, NULL, " \u26a0\ufe0f READ (a.txt)   failed ", NULL, &plain,
		 false, false, false, false, false, "?\u26a0\ufe0f READ (a.txt)   failed"},
	};
	for (size_t i = 0; i < N_OF(rows); i++) {
		cJSON *texts = rows[i].texts ? parse(rows[i].texts) : NULL;
		cJSON *sent = rows[i].sent ? parse(rows[i].sent) : NULL;
		pc_payload_input_t in = {
			.assistant_texts = texts,
			.reasoning = rows[i].reasoning,
			.assistant_error = rows[i].assistant_error,
			.last_tool_error = rows[i].err,
			.sent_texts = sent,
			.delivered_to_source = rows[i].delivered,
			.did_send_via_messaging_tool = rows[i].messaged,
			.suppress_tool_error_warnings = rows[i].suppress_warn,
			.suppress_tool_errors = rows[i].suppress_errors,
			.tool_error_details = rows[i].details,
		};
		cJSON *out = NULL;
		cr_assert_eq(pc_payload_build(&in, &out), 0, "%s", rows[i].name);
		char got[1024];
		render(out, got, sizeof(got));
		cr_assert_str_eq(got, rows[i].want, "%s: got \"%s\"", rows[i].name, got);
		cJSON_Delete(out);
		cJSON_Delete(texts);
		cJSON_Delete(sent);
	}
	cJSON *out;
	cr_assert_eq(pc_payload_build(NULL, &out), PC_EINVAL);
	ASSERT_NO_LEAKS();
}

Test(payload, tool_summaries_are_kept_in_order)
{
	cJSON *texts = parse("[\"Answer\"]"), *sums = parse("[\"read a.txt\",\"NO_REPLY\"]");
	pc_payload_input_t in = {.assistant_texts = texts, .tool_summaries = sums, .assistant_error = "E"};
	cJSON *out;
	cr_assert_eq(pc_payload_build(&in, &out), 0);
	char got[256];
	render(out, got, sizeof(got));
	cr_assert_str_eq(got, "Answer|read a.txt|!E");
	cJSON_Delete(out);
	cJSON_Delete(texts);
	cJSON_Delete(sums);
}

/* ================= §5.9 terminal ordering ================= */

Test(payload, terminal_order)
{
	static const pc_terminal_step_t want[] = {
		PC_TERMINAL_FLUSH_BLOCKS,      PC_TERMINAL_RESOLVE_COMPACTION, PC_TERMINAL_FLUSH_MEDIA,
		PC_TERMINAL_BLOCK_REPLY_FLUSH, PC_TERMINAL_EMIT_LIFECYCLE,     PC_TERMINAL_DONE,
		PC_TERMINAL_DONE,
	};
	pc_terminal_t t = {0};
	int emits = 0;
	for (size_t i = 0; i < N_OF(want); i++) {
		cr_assert_eq(pc_terminal_needs_fallback(&t), emits == 0);
		pc_terminal_step_t s = pc_terminal_advance(&t);
		cr_assert_eq(s, want[i], "step %zu", i);
		emits += s == PC_TERMINAL_EMIT_LIFECYCLE;
	}
	cr_assert_eq(emits, 1, "lifecycle end/error is emitted exactly once");
	cr_assert_not(pc_terminal_needs_fallback(&t));
	cr_assert(pc_terminal_needs_fallback(NULL));
	cr_assert_eq(pc_terminal_advance(NULL), PC_TERMINAL_DONE);
	cr_assert_str_eq(pc_terminal_phase(true), "error");
	cr_assert_str_eq(pc_terminal_phase(false), "end");
}
