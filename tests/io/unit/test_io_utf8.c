/*
 * Strict UTF-8 (io/utf8.h) against the classic decoder stress cases:
 * boundaries of each length, overlong forms, surrogates, code points past
 * U+10FFFF, stray continuation bytes, truncated sequences; and the count
 * of U+FFFD that the Unicode standard's "substitution of maximal subparts"
 * gives (its own example, table 3-8, included).
 */
#include <criterion/criterion.h>

#include <stdlib.h>
#include <string.h>

#include "io/utf8.h"

TestSuite(io_utf8);

#define R PC_UTF8_REPLACEMENT

/* Well formed: the first and last code point of each length, the edges
 * around the surrogates, U+FFFD itself, U+10FFFF, and U+0000. */
static const char *const good[] = {
	"", "a", "\x7f", "\xc2\x80", "\xdf\xbf", "\xe0\xa0\x80", "\xed\x9f\xbf", "\xee\x80\x80", "\xef\xbf\xbd",
	"\xef\xbf\xbf", "\xf0\x90\x80\x80", "\xf4\x8f\xbf\xbf", "h\xc3\xa9llo \xe2\x9c\x93", "\xf0\x9f\x98\x80",
	"twelve bytes then \xc3\xa9 after the ASCII fast path",
};

Test(io_utf8, well_formed_text_is_valid_and_scrubs_to_itself)
{
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		size_t n = strlen(good[i]), len = 0;
		cr_assert(pc_utf8_valid(good[i], n), "case %zu", i);
		char *s = pc_utf8_scrub(good[i], n, &len);
		cr_assert_not_null(s);
		cr_assert_eq(len, n);
		cr_assert_str_eq(s, good[i]);
		free(s);
	}
	cr_assert(pc_utf8_valid("a\0b", 3), "U+0000 is a character");
}

static const struct {
	const char *bytes, *scrubbed;
} bad[] = {
	/* Bytes that never begin a sequence. */
	{"\x80", R},
	{"\xbf", R},
	{"\x80\xbf\x80", R R R},
	{"\xfe", R},
	{"\xff", R},
	{"\xfe\xfe\xff\xff", R R R R},
	{"\xc0", R},
	{"\xc1\xbf", R R},
	{"\xf5\x80\x80\x80", R R R R},
	{"\xf8\x88\x80\x80\x80", R R R R R},
	{"\xfc\x84\x80\x80\x80\x80", R R R R R R},
	/* Overlong forms: "/" and U+0000 in two, three and four bytes. */
	{"\xc0\xaf", R R},
	{"\xe0\x80\xaf", R R R},
	{"\xf0\x80\x80\xaf", R R R R},
	{"\xc0\x80", R R},
	{"\xe0\x9f\xbf", R R R},
	{"\xf0\x8f\xbf\xbf", R R R R},
	/* Surrogates encoded as characters, alone and in pairs. */
	{"\xed\xa0\x80", R R R},
	{"\xed\xbf\xbf", R R R},
	{"\xed\xa0\x80\xed\xb0\x80", R R R R R R},
	/* Past U+10FFFF. */
	{"\xf4\x90\x80\x80", R R R R},
	{"\xf7\xbf\xbf\xbf", R R R R},
	/* Truncated: the maximal subpart is one replacement, whatever follows. */
	{"\xc2", R},
	{"\xe2\x82", R},
	{"\xf0\x9f\x98", R},
	{"\xe2\x82" "A", R "A"},
	{"\xf0\x9f\x98" "A", R "A"},
	{"\xf0\x9f" "\xc3\xa9", R "\xc3\xa9"},
	{"\xe2" "\xe2\x9c\x93", R "\xe2\x9c\x93"},
	/* The standard's own example (table 3-8). */
	{"\x61\xf1\x80\x80\xe1\x80\xc2\x62\x80\x63\x80\xbf\x64", "a" R R R "b" R "c" R R "d"},
	/* Around good text, and past the eight-byte ASCII stride. */
	{"\xff\xfe" "A", R R "A"},
	{"abcdefgh" "ijklmno\xff", "abcdefghijklmno" R},
};

Test(io_utf8, ill_formed_text_is_refused_and_each_maximal_subpart_becomes_one_replacement)
{
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		size_t n = strlen(bad[i].bytes), len = 0;
		cr_assert_not(pc_utf8_valid(bad[i].bytes, n), "case %zu", i);
		char *s = pc_utf8_scrub(bad[i].bytes, n, &len);
		cr_assert_not_null(s);
		cr_assert_str_eq(s, bad[i].scrubbed, "case %zu", i);
		cr_assert_eq(len, strlen(bad[i].scrubbed));
		cr_assert(pc_utf8_valid(s, len));
		free(s);
	}
}

Test(io_utf8, a_zero_byte_is_scrubbed_so_that_the_text_is_not_cut_there)
{
	size_t len = 0;
	char *s = pc_utf8_scrub("a\0b", 3, &len);
	cr_assert_not_null(s);
	cr_assert_str_eq(s, "a" R "b");
	cr_assert_eq(len, 5);
	free(s);
}

Test(io_utf8, seq_reports_the_length_or_the_maximal_subpart)
{
	size_t badlen = 0;
	cr_assert_eq(pc_utf8_seq("\xe2\x9c\x93", 3, &badlen), 3);
	cr_assert_eq(pc_utf8_seq("\xe2\x9c\x93", 2, &badlen), 0, "cut by n");
	cr_assert_eq(badlen, 2);
	cr_assert_eq(pc_utf8_seq("\xf4\x8f\xbf" "A", 4, &badlen), 0);
	cr_assert_eq(badlen, 3);
	cr_assert_eq(pc_utf8_seq("\xf4\x90", 2, &badlen), 0);
	cr_assert_eq(badlen, 1);
	cr_assert_eq(pc_utf8_seq("\xed\xa0\x80", 3, NULL), 0);
}
