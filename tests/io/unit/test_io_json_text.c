/*
 * The text check of a client's JSON (io/json_text.h): raw bytes must be
 * strict UTF-8, and no string may decode to U+0000 or a lone surrogate;
 * an escaped backslash before "u0000" is text, not an escape. The blank
 * keeps what is clean readable by cJSON.
 */
#include <criterion/criterion.h>

#include <cjson/cJSON.h>
#include <string.h>

#include "io/json_text.h"

TestSuite(io_json_text);

static pc_json_text_t check(const char *s)
{
	return pc_json_text_check(s, strlen(s));
}

Test(io_json_text, clean_text_passes)
{
	static const char *const ok[] = {
		"",
		"{}",
		"{\"m\":\"h\xc3\xa9llo \xe2\x9c\x93\"}",
		"{\"m\":\"\\ud83d\\ude00\"}",
		"{\"m\":\"\\uD83D\\uDE00\"}",
		"{\"m\":\"a\\\\u0000\"}",
		"{\"m\":\"a\\\\ud800\"}",
		"{\"m\":\"\\\\\\\\u0000\"}",
		"{\"m\":\"\\u0001\\u00e9\\uffff\\\"\\n\"}",
		"[1, true, null, \"\\u20ac\"]",
		"{\"m\":\"\\u12\"}",
		"{\"m\":\"\xf0\x9f\x98\x80\"}",
	};
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
		cr_assert_eq(check(ok[i]), PC_JSON_TEXT_OK, "case %zu: %s", i, ok[i]);
}

Test(io_json_text, raw_bytes_that_are_not_utf8_are_refused_inside_and_outside_strings)
{
	cr_assert_eq(check("{\"m\":\"a\xff\xfe b\"}"), PC_JSON_TEXT_NOT_UTF8);
	cr_assert_eq(check("{\"m\":\"\xed\xa0\x80\"}"), PC_JSON_TEXT_NOT_UTF8, "an encoded surrogate");
	cr_assert_eq(check("{\"m\":\"\xc0\xaf\"}"), PC_JSON_TEXT_NOT_UTF8, "overlong");
	cr_assert_eq(check("{\"m\":\"\xf4\x90\x80\x80\"}"), PC_JSON_TEXT_NOT_UTF8, "past U+10FFFF");
	cr_assert_eq(check("{\"m\":\"\xe2\x82\"}"), PC_JSON_TEXT_NOT_UTF8, "truncated");
	cr_assert_eq(check("{\"m\":1}\xff"), PC_JSON_TEXT_NOT_UTF8);
	cr_assert_eq(check("{\"\xff\":1}"), PC_JSON_TEXT_NOT_UTF8, "in a key");
}

Test(io_json_text, nul_in_any_form_is_refused)
{
	cr_assert_eq(check("{\"sessionKey\":\"victim\\u0000junk\"}"), PC_JSON_TEXT_NUL);
	cr_assert_eq(check("{\"m\":\"\\\\\\u0000\"}"), PC_JSON_TEXT_NUL, "an escaped backslash, then the escape");
	cr_assert_eq(pc_json_text_check("{\"m\":\"a\0b\"}", sizeof("{\"m\":\"a\0b\"}") - 1), PC_JSON_TEXT_NUL, "a raw 0 byte");
	cr_assert_eq(pc_json_text_check("{}\0", 3), PC_JSON_TEXT_NUL);
}

Test(io_json_text, lone_surrogate_escapes_are_refused)
{
	static const char *const bad[] = {
		"{\"m\":\"\\ud800\"}",        "{\"m\":\"\\udc00\"}",          "{\"m\":\"a\\ud800b\"}",
		"{\"m\":\"\\ud800\\u0041\"}", "{\"m\":\"\\ud800\\ud800\"}",   "{\"m\":\"\\ude00\\ud83d\"}",
		"{\"m\":\"\\uDBFF\\n\"}",     "{\"m\":\"\\ud83d\\ude00\\udfff\"}", "{\"\\ud800\":1}",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		cr_assert_eq(check(bad[i]), PC_JSON_TEXT_SURROGATE, "case %zu: %s", i, bad[i]);
}

Test(io_json_text, the_first_problem_in_text_order_is_reported)
{
	cr_assert_eq(check("{\"a\":\"\\u0000\",\"b\":\"\xff\"}"), PC_JSON_TEXT_NUL);
	cr_assert_eq(check("{\"a\":\"\xff\",\"b\":\"\\u0000\"}"), PC_JSON_TEXT_NOT_UTF8);
	cr_assert_str_eq(pc_json_text_why(PC_JSON_TEXT_NOT_UTF8), "is not valid UTF-8");
	cr_assert_str_eq(pc_json_text_why(PC_JSON_TEXT_NUL), "holds a NUL character (\\u0000)");
	cr_assert_str_eq(pc_json_text_why(PC_JSON_TEXT_SURROGATE), "holds a lone UTF-16 surrogate escape");
}

Test(io_json_text, blank_leaves_clean_strings_readable_and_makes_bad_ones_numbers)
{
	char s[] = "{\"type\":\"req\",\"id\":\"7\",\"params\":{\"message\":\"a\\ud800\",\"k\":\"\xff\"}}";
	size_t n = strlen(s);
	pc_json_text_blank(s, n);
	cr_assert_eq(strlen(s), n, "the length is kept");
	cr_assert_eq(pc_json_text_check(s, n), PC_JSON_TEXT_OK);
	cJSON *f = cJSON_ParseWithLength(s, n);
	cr_assert_not_null(f, "%s", s);
	cr_assert_str_eq(cJSON_GetObjectItem(f, "id")->valuestring, "7");
	const cJSON *p = cJSON_GetObjectItem(f, "params");
	cr_assert(cJSON_IsNumber(cJSON_GetObjectItem(p, "message")));
	cr_assert(cJSON_IsNumber(cJSON_GetObjectItem(p, "k")));
	cJSON_Delete(f);

	char t[] = "{\"id\":\"x\\u0000y\",\"type\":\"req\"}";
	pc_json_text_blank(t, strlen(t));
	f = cJSON_Parse(t);
	cr_assert_not_null(f);
	cr_assert(cJSON_IsNumber(cJSON_GetObjectItem(f, "id")), "a bad id is not read as a shorter one");
	cJSON_Delete(f);
}
