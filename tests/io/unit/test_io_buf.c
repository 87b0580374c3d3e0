/*
 * The growable buffer every module builds text in (io/buf.h):
 * appends keep it a C string, printf formats short and long text, take
 * hands the text over and empties the buffer.
 */
#include <criterion/criterion.h>

#include <stdint.h>
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

Test(grow, doubles_from_first_and_keeps_the_elements)
{
	int *v = NULL;
	size_t cap = 0;
	cr_assert_eq(PC__GROW(v, cap, 1, 4), 0);
	cr_assert_eq(cap, 4, "an empty array starts at `first`");
	for (int i = 0; i < 4; i++)
		v[i] = i;
	cr_assert_eq(PC__GROW(v, cap, 4, 4), 0);
	cr_assert_eq(cap, 4, "room enough: nothing changes");
	cr_assert_eq(PC__GROW(v, cap, 5, 4), 0);
	cr_assert_eq(cap, 8, "one more doubles");
	cr_assert_eq(PC__GROW(v, cap, 100, 4), 0);
	cr_assert_eq(cap, 128, "doubles until it holds `need`");
	for (int i = 0; i < 4; i++)
		cr_assert_eq(v[i], i);
	free(v);
}

Test(grow, overflow_is_an_error_and_changes_nothing)
{
	char *v = NULL;
	size_t cap = 0;
	cr_assert_eq(PC__GROW(v, cap, 3, 16), 0);
	char *was = v;
	cr_assert_neq(pc__grow(&v, &cap, SIZE_MAX / 2, 8, 1), 0, "SIZE_MAX/2 elements of 8 bytes overflow");
	cr_assert_eq(v, was);
	cr_assert_eq(cap, 16);
	free(v);
}
