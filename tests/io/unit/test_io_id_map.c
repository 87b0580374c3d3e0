/*
 * The id table (io/id_map.h) against a plain array: random adds, finds
 * and removals through several growths, then a drain that hands every
 * entry over exactly once.
 */
#include <criterion/criterion.h>

#include <stdlib.h>

#include "io/id_map.h"

TestSuite(id_map, .timeout = 60);

enum { N = 20000 };

typedef struct item {
	pc__id_link_t link;
	uint64_t want; /* the id it should be found under, 0: out */
	int drained;
} item_t;

static void count_drained(pc__id_link_t *l, void *arg)
{
	item_t *it = (item_t *)l;
	cr_assert_eq(l->id, 0, "a drained entry still has an id");
	it->drained++;
	(*(size_t *)arg)++;
}

Test(id_map, matches_an_array_through_growth_and_drain)
{
	static item_t items[N];
	pc__id_map_t m;
	cr_assert_eq(pc__id_map_init(&m), 0);
	srand(7);
	size_t in = 0;
	for (int round = 0; round < 8 * N; round++) {
		item_t *it = &items[rand() % N];
		if (it->want) {
			cr_assert_eq(pc__id_map_find(&m, it->want), &it->link);
			pc__id_map_remove(&m, &it->link);
			cr_assert_eq(it->link.id, 0);
			cr_assert_null(pc__id_map_find(&m, it->want));
			pc__id_map_remove(&m, &it->link); /* out already: nothing happens */
			it->want = 0;
			in--;
		} else {
			/* ids as the server makes them: a loop index high, a sequence low */
			it->want = ((uint64_t)(rand() % 4) << 56) | ((uint64_t)round + 1);
			pc__id_map_add(&m, &it->link, it->want);
			in++;
		}
		cr_assert_eq(m.n, in);
	}
	cr_assert_geq(m.nbuckets, m.n, "the table did not grow with its entries");
	for (int i = 0; i < N; i++)
		if (items[i].want)
			cr_assert_eq(pc__id_map_find(&m, items[i].want), &items[i].link);
	cr_assert_null(pc__id_map_find(&m, 1ull << 60));
	size_t drained = 0;
	pc__id_map_drain(&m, count_drained, &drained);
	cr_assert_eq(drained, in);
	cr_assert_eq(m.n, 0);
	for (int i = 0; i < N; i++)
		cr_assert_eq(items[i].drained, items[i].want ? 1 : 0);
	pc__id_map_destroy(&m);
}
