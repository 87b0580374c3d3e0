/*
 * Percent-decoding (io/uri.h): escapes in either case, plain text kept,
 * malformed escapes and NUL refused.
 */
#include <stdio.h>

#include <criterion/criterion.h>

#include "io/uri.h"

static void decodes(const char *in, const char *want)
{
	char buf[64];
	snprintf(buf, sizeof(buf), "%s", in);
	cr_assert(pc_percent_decode(buf), "%s", in);
	cr_assert_str_eq(buf, want);
}

static void refuses(const char *in)
{
	char buf[64];
	snprintf(buf, sizeof(buf), "%s", in);
	cr_assert_not(pc_percent_decode(buf), "%s", in);
}

Test(io_uri, escapes_decode_in_place)
{
	decodes("", "");
	decodes("plain/path", "plain/path");
	decodes("%2e%2E%2f", "../");
	decodes("a%20b%7E", "a b~");
	decodes("%C3%A9", "\xc3\xa9");
	decodes("100%25", "100%");
}

Test(io_uri, malformed_escapes_and_nul_are_refused)
{
	refuses("%");
	refuses("%2");
	refuses("%g0");
	refuses("%0g");
	refuses("a%00b");
	refuses("ok%");
}
