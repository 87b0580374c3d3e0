/*
 * Usage normalization (agents/providers/usage.c): every provider's counter
 * names, OpenAI-style prompt totals with the cached part taken out, totals,
 * accumulation and the prompt side.
 */
#include <criterion/criterion.h>

#include <stdio.h>
#include <string.h>

#include "agents/providers/usage.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#define ASSERT_NO_LEAKS() cr_assert_eq(__lsan_do_recoverable_leak_check(), 0, "LeakSanitizer found leaks")
#else
#define ASSERT_NO_LEAKS() ((void)0)
#endif

static pc_usage_t parse_ok(const char *json)
{
	cJSON *j = cJSON_Parse(json);
	cr_assert(j, "bad test JSON: %s", json);
	pc_usage_t u;
	memset(&u, 0x5A, sizeof(u));
	int rc = pc_usage_from_json(j, &u);
	cJSON_Delete(j);
	cr_assert_eq(rc, 0, "%s", json);
	return u;
}

#define EXPECT_USAGE(u, in, out, cr, cw, tot)                                                     \
	do {                                                                                      \
		cr_assert_eq((u).input, (in), "input %lld", (long long)(u).input);                \
		cr_assert_eq((u).output, (out), "output %lld", (long long)(u).output);            \
		cr_assert_eq((u).cache_read, (cr), "cache_read %lld", (long long)(u).cache_read); \
		cr_assert_eq((u).cache_write, (cw), "cache_write %lld",                           \
			     (long long)(u).cache_write);                                         \
		cr_assert_eq((u).total, (tot), "total %lld", (long long)(u).total);               \
	} while (0)

Test(usage, openai_chat_subtracts_cached_prompt_tokens)
{
	pc_usage_t u = parse_ok("{\"prompt_tokens\":100,\"completion_tokens\":20,\"total_tokens\":120,"
				"\"prompt_tokens_details\":{\"cached_tokens\":30,\"audio_tokens\":0},"
				"\"completion_tokens_details\":{\"reasoning_tokens\":5}}");
	EXPECT_USAGE(u, 70, 20, 30, 0, 120);
	/* More cached than prompt (a provider that pre-subtracted): clamped. */
	u = parse_ok("{\"prompt_tokens\":10,\"completion_tokens\":1,"
		     "\"prompt_tokens_details\":{\"cached_tokens\":30}}");
	EXPECT_USAGE(u, 0, 1, 30, 0, 31);
	/* camelCase SDK names behave the same. */
	u = parse_ok("{\"promptTokens\":50,\"completionTokens\":5,\"cached_tokens\":20}");
	EXPECT_USAGE(u, 30, 5, 20, 0, 55);
}

Test(usage, openai_responses_shape)
{
	pc_usage_t u = parse_ok("{\"input_tokens\":100,\"input_tokens_details\":{\"cached_tokens\":40},"
				"\"output_tokens\":10,\"output_tokens_details\":{\"reasoning_tokens\":2},"
				"\"total_tokens\":110}");
	EXPECT_USAGE(u, 60, 10, 40, 0, 110);
}

Test(usage, anthropic_input_excludes_cache)
{
	pc_usage_t u = parse_ok("{\"input_tokens\":25,\"cache_creation_input_tokens\":10,"
				"\"cache_read_input_tokens\":100,\"output_tokens\":89}");
	EXPECT_USAGE(u, 25, 89, 100, 10, 224);
	cr_assert_eq(pc_usage_prompt_tokens(&u), 135);
}

Test(usage, moonshot_and_openrouter_shapes)
{
	/* Kimi: top-level cached_tokens with an OpenAI prompt total. */
	pc_usage_t u = parse_ok("{\"prompt_tokens\":80,\"completion_tokens\":4,\"total_tokens\":84,"
				"\"cached_tokens\":64}");
	EXPECT_USAGE(u, 16, 4, 64, 0, 84);
	/* OpenRouter: cache writes inside prompt_tokens_details. */
	u = parse_ok("{\"prompt_tokens\":300,\"completion_tokens\":7,\"total_tokens\":307,"
		     "\"prompt_tokens_details\":{\"cached_tokens\":100,\"cache_write_tokens\":50}}");
	EXPECT_USAGE(u, 200, 7, 100, 50, 307);
}

Test(usage, every_alias)
{
	static const struct {
		const char *json;
		int64_t in, out, cr, cw, tot;
	} cases[] = {
		{"{\"input\":1,\"output\":2,\"cacheRead\":3,\"cacheWrite\":4,\"total\":99}", 1, 2, 3, 4, 99},
		{"{\"inputTokens\":1,\"outputTokens\":2,\"totalTokens\":7}", 1, 2, 0, 0, 7},
		{"{\"input_tokens\":1,\"output_tokens\":2}", 1, 2, 0, 0, 3},
		{"{\"promptTokens\":5,\"completionTokens\":2}", 5, 2, 0, 0, 7},
		{"{\"prompt_tokens\":5,\"completion_tokens\":2,\"total_tokens\":7}", 5, 2, 0, 0, 7},
		{"{\"input\":1,\"cache_read\":3,\"cache_write\":4}", 1, 0, 3, 4, 8},
		{"{\"input\":1,\"cache_read_input_tokens\":3,\"cache_creation_input_tokens\":4}", 1, 0, 3, 4, 8},
		{"{\"input\":10,\"cached_tokens\":3}", 10, 0, 3, 0, 13},
		{"{\"input\":10,\"prompt_tokens_details\":{\"cached_tokens\":3}}", 10, 0, 3, 0, 13},
		{"{\"input\":10,\"input_tokens_details\":{\"cached_tokens\":3}}", 10, 0, 3, 0, 13},
		{"{\"input\":1,\"cache_write_tokens\":6}", 1, 0, 0, 6, 7},
		{"{\"total_tokens\":42}", 0, 0, 0, 0, 42},
		{"{\"output\":3}", 0, 3, 0, 0, 3},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		pc_usage_t u = parse_ok(cases[i].json);
		cr_assert(u.input == cases[i].in && u.output == cases[i].out &&
				  u.cache_read == cases[i].cr && u.cache_write == cases[i].cw &&
				  u.total == cases[i].tot,
			  "%s -> %lld/%lld/%lld/%lld/%lld", cases[i].json, (long long)u.input,
			  (long long)u.output, (long long)u.cache_read, (long long)u.cache_write,
			  (long long)u.total);
	}
}

Test(usage, first_positive_alias_wins)
{
	pc_usage_t u = parse_ok("{\"input\":0,\"input_tokens\":5,\"prompt_tokens\":9}");
	cr_assert_eq(u.input, 5, "a zero placeholder does not hide the real count");
	u = parse_ok("{\"input_tokens\":0}");
	EXPECT_USAGE(u, 0, 0, 0, 0, 0);
	u = parse_ok("{\"cacheRead\":0,\"cache_read_input_tokens\":7,\"input\":1}");
	cr_assert_eq(u.cache_read, 7);
}

Test(usage, numbers_only_and_clamped)
{
	cJSON *j = cJSON_Parse("{\"prompt_tokens\":\"12\",\"completion_tokens\":true,\"usage\":{}}");
	pc_usage_t u;
	cr_assert_eq(pc_usage_from_json(j, &u), PC_ENOTFOUND, "strings and booleans do not count");
	EXPECT_USAGE(u, 0, 0, 0, 0, 0);
	cJSON_Delete(j);
	u = parse_ok("{\"input\":-5,\"output\":12.9,\"total\":-1}");
	EXPECT_USAGE(u, 0, 12, 0, 0, 12);
	u = parse_ok("{\"input\":1e300,\"output\":1e300,\"cacheRead\":1e300,\"cacheWrite\":1e300}");
	EXPECT_USAGE(u, PC_USAGE_MAX, PC_USAGE_MAX, PC_USAGE_MAX, PC_USAGE_MAX, PC_USAGE_MAX);
	/* A details object of the wrong type is ignored. */
	u = parse_ok("{\"prompt_tokens\":9,\"prompt_tokens_details\":[1]}");
	EXPECT_USAGE(u, 9, 0, 0, 0, 9);
}

Test(usage, not_found_and_bad_arguments)
{
	pc_usage_t u;
	memset(&u, 1, sizeof(u));
	cr_assert_eq(pc_usage_from_json(NULL, &u), PC_ENOTFOUND);
	EXPECT_USAGE(u, 0, 0, 0, 0, 0);
	cJSON *arr = cJSON_Parse("[1,2]");
	cr_assert_eq(pc_usage_from_json(arr, &u), PC_ENOTFOUND);
	cJSON_Delete(arr);
	cJSON *empty = cJSON_CreateObject();
	cr_assert_eq(pc_usage_from_json(empty, &u), PC_ENOTFOUND);
	cr_assert_eq(pc_usage_from_json(empty, NULL), PC_EINVAL);
	cJSON_Delete(empty);
}

Test(usage, accumulate)
{
	pc_usage_t acc = {0};
	pc_usage_t zero = {0};
	pc_usage_add(&acc, &zero);
	EXPECT_USAGE(acc, 0, 0, 0, 0, 0);
	pc_usage_t a = {.input = 10, .output = 5, .cache_read = 100, .cache_write = 0, .total = 115};
	pc_usage_add(&acc, &a);
	EXPECT_USAGE(acc, 10, 5, 100, 0, 115);
	pc_usage_t b = {.input = 1, .output = 2, .cache_write = 3}; /* no total: the sum */
	pc_usage_add(&acc, &b);
	EXPECT_USAGE(acc, 11, 7, 100, 3, 121);
	pc_usage_add(&acc, NULL);
	pc_usage_add(NULL, &a);
	EXPECT_USAGE(acc, 11, 7, 100, 3, 121);
	pc_usage_t big = {.input = PC_USAGE_MAX, .total = PC_USAGE_MAX};
	pc_usage_add(&acc, &big);
	pc_usage_add(&acc, &big);
	cr_assert_eq(acc.input, PC_USAGE_MAX, "saturates");
	cr_assert_eq(acc.total, PC_USAGE_MAX);
	cr_assert(pc_usage_is_nonzero(&a));
	cr_assert_not(pc_usage_is_nonzero(&zero));
	cr_assert_not(pc_usage_is_nonzero(NULL));
	pc_usage_t only_total = {.total = 4};
	cr_assert(pc_usage_is_nonzero(&only_total));
}

Test(usage, prompt_tokens)
{
	pc_usage_t u = {.input = 3, .output = 1000, .cache_read = 20, .cache_write = 100};
	cr_assert_eq(pc_usage_prompt_tokens(&u), 123);
	cr_assert_eq(pc_usage_prompt_tokens(NULL), 0);
}

/* §11.3: a run reports its latest call's prompt side and API total with
 * the output of every call (not the sum of every call's prompt). */
Test(usage, report_takes_the_latest_prompt_and_the_accumulated_output)
{
	pc_usage_t first = {.input = 1000, .output = 20, .cache_read = 300, .cache_write = 50, .total = 1370};
	pc_usage_t last = {.input = 1500, .output = 7, .cache_read = 600, .total = 2107};
	pc_usage_t acc = {0}, rep;
	pc_usage_add(&acc, &first);
	pc_usage_add(&acc, &last);
	pc_usage_report(&acc, &last, &rep);
	EXPECT_USAGE(rep, 1500, 27, 600, 0, 2107);
	/* a latest call without a total: its prompt plus the run's output */
	last.total = 0;
	pc_usage_report(&acc, &last, &rep);
	EXPECT_USAGE(rep, 1500, 27, 600, 0, 2127);
	/* no latest call known: the accumulated usage stands for it */
	pc_usage_report(&acc, NULL, &rep);
	EXPECT_USAGE(rep, 2500, 27, 900, 50, 3477);
	pc_usage_t zero = {0};
	pc_usage_report(&zero, &zero, &rep);
	EXPECT_USAGE(rep, 0, 0, 0, 0, 0);
	pc_usage_report(NULL, NULL, &rep);
	EXPECT_USAGE(rep, 0, 0, 0, 0, 0);
	pc_usage_report(&acc, &last, NULL); /* ignored */
}

Test(usage, json_round_trip)
{
	pc_usage_t u = {.input = 1, .output = 2, .cache_read = 3, .cache_write = 4, .total = 11};
	cJSON *j = pc_usage_to_json(&u);
	cr_assert(j);
	char *s = cJSON_PrintUnformatted(j);
	cr_assert_str_eq(s, "{\"input\":1,\"output\":2,\"cacheRead\":3,\"cacheWrite\":4,\"totalTokens\":11}");
	pc_usage_t back;
	cr_assert_eq(pc_usage_from_json(j, &back), 0);
	EXPECT_USAGE(back, 1, 2, 3, 4, 11);
	cJSON_free(s);
	cJSON_Delete(j);
	cr_assert_null(pc_usage_to_json(NULL));
	ASSERT_NO_LEAKS();
}
