/*
 * The SQLite writer's session cache: lookups by key, a bounded size, the
 * dirty list and its reset, and clearing.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/store/session_cache.h"

static pc__sc_entry_t *get(pc__sc_t *c, const char *k)
{
	return pc__sc_get(c, k, strlen(k));
}

static pc__sc_entry_t *add(pc__sc_t *c, const char *k, int64_t sid)
{
	return pc__sc_add(c, k, strlen(k), sid, sid * 10, 0);
}

Test(session_cache, entries_are_found_by_their_whole_key)
{
	pc__sc_t *c = pc__sc_new(8);
	cr_assert_not_null(c);
	cr_assert_null(get(c, "a"));
	cr_assert_not_null(add(c, "a", 1));
	cr_assert_not_null(add(c, "ab", 2));
	cr_assert_null(add(c, "a", 3), "a key is held once");
	cr_assert_eq(get(c, "a")->sid, 1);
	cr_assert_eq(get(c, "ab")->last_seq, 20);
	cr_assert_eq(pc__sc_get(c, "abc", 2), get(c, "ab"), "only the given length counts");
	cr_assert_null(get(c, "b"));
	pc__sc_free(c);
}

Test(session_cache, a_full_cache_refuses_until_cleared)
{
	pc__sc_t *c = pc__sc_new(100);
	char k[16];
	for (int i = 0; i < 100; i++) {
		snprintf(k, sizeof(k), "k%d", i);
		cr_assert_not_null(add(c, k, i));
	}
	cr_assert_null(add(c, "one-more", 1));
	for (int i = 0; i < 100; i++) {
		snprintf(k, sizeof(k), "k%d", i);
		cr_assert_eq(get(c, k)->sid, i);
	}
	pc__sc_clear(c);
	cr_assert_null(get(c, "k5"));
	cr_assert_not_null(add(c, "one-more", 1));
	pc__sc_free(c);
}

Test(session_cache, changed_entries_are_listed_once_until_written)
{
	pc__sc_t *c = pc__sc_new(8);
	pc__sc_entry_t *a = add(c, "a", 1), *b = add(c, "b", 2);
	add(c, "c", 3);
	pc__sc_touch(c, a);
	a->runs_added = 2;
	a->last_run = strdup("r2");
	pc__sc_touch(c, a);
	pc__sc_touch(c, b);
	cr_assert_eq(pc__sc_dirty_count(c), 2);
	cr_assert_eq(pc__sc_dirty(c, 0), a);
	cr_assert_eq(pc__sc_dirty(c, 1), b);
	cr_assert_null(pc__sc_dirty(c, 2));
	pc__sc_written(c);
	cr_assert_eq(pc__sc_dirty_count(c), 0);
	cr_assert_not(a->dirty);
	cr_assert_eq(a->runs_added, 0);
	cr_assert_null(a->last_run);
	cr_assert_eq(get(c, "a"), a, "written entries stay");
	/* unwritten changes go with a clear (the memory too: LeakSanitizer) */
	pc__sc_touch(c, b);
	b->last_run = strdup("r9");
	pc__sc_clear(c);
	cr_assert_eq(pc__sc_dirty_count(c), 0);
	pc__sc_free(c);
}
