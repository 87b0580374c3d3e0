/*
 * The growable buffer every module builds text in (io/buf.h):
 * appends keep it a C string, printf formats short and long text, take
 * hands the text over and empties the buffer.
 */
#include <criterion/criterion.h>

#include <stdlib.h>
#include <string.h>

#include "io/buf.h"

Test(buf, appends_keep_a_string)
{
	pc__buf_t b = {0};
	cr_assert_eq(pc__buf_append(&b, "ab", 2), 0);
	cr_assert_eq(pc__buf_append_char(&b, 'c'), 0);
	cr_assert_eq(pc__buf_append_str(&b, "de"), 0);
	cr_assert_eq(pc__buf_append(&b, NULL, 0), 0);
	cr_assert_str_eq(b.p, "abcde");
	cr_assert_eq(b.len, 5);
	pc__buf_free(&b);
	cr_assert_null(b.p);
	cr_assert_eq(b.len, 0);
}

Test(buf, printf_short_and_long)
{
	pc__buf_t b = {0};
	cr_assert_eq(pc__buf_printf(&b, "%d-%s", 42, "x"), 0);
	char big[1000];
	memset(big, 'y', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	cr_assert_eq(pc__buf_printf(&b, "[%s]", big), 0);
	cr_assert_eq(b.len, 4 + 2 + 999);
	cr_assert_eq(strncmp(b.p, "42-x[yyy", 8), 0);
	cr_assert_eq(b.p[b.len - 1], ']');
	pc__buf_free(&b);
}

Test(buf, take_hands_over_the_text)
{
	pc__buf_t b = {0};
	char *empty = pc__buf_take(&b);
	cr_assert_str_eq(empty, "", "nothing appended: an empty string, not NULL");
	free(empty);
	pc__buf_append_str(&b, "kept");
	char *t = pc__buf_take(&b);
	cr_assert_str_eq(t, "kept");
	cr_assert_null(b.p, "the buffer is empty after");
	free(t);
	b.err = -1; /* a failed append sticks: take gives nothing */
	cr_assert_eq(pc__buf_append_str(&b, "lost"), -1);
	cr_assert_null(pc__buf_take(&b));
	cr_assert_eq(b.err, 0);
}
