/*
 * pc_json_print: the same JSON values as cJSON_PrintUnformatted, integers
 * as plain digits, and the tree given back unchanged.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/json_print.h"

static void assert_prints(cJSON *tree, const char *want)
{
	cJSON *before = cJSON_Duplicate(tree, true);
	cr_assert_not_null(before);
	char *got = pc_json_print(tree);
	cr_assert_not_null(got);
	cr_assert_str_eq(got, want);
	cr_assert(cJSON_Compare(tree, before, true), "the tree changed");
	/* and again: nothing left over from the first print */
	char *again = pc_json_print(tree);
	cr_assert_str_eq(again, want);
	cJSON_free(again);
	cJSON_free(got);
	cJSON_Delete(before);
}

Test(json_print, integers_print_as_digits_everything_else_as_cjson_does)
{
	cJSON *o = cJSON_CreateObject();
	cJSON_AddNumberToObject(o, "zero", 0);
	cJSON_AddNumberToObject(o, "neg", -42);
	cJSON_AddNumberToObject(o, "ms", 1796045642708.0);
	cJSON_AddNumberToObject(o, "max", 9007199254740992.0);
	cJSON_AddNumberToObject(o, "half", 0.5);
	cJSON_AddNumberToObject(o, "big", 1e300);
	cJSON_AddStringToObject(o, "s", "7");
	cJSON_AddRawToObject(o, "raw", "123");
	cJSON *a = cJSON_AddArrayToObject(o, "list");
	cJSON_AddItemToArray(a, cJSON_CreateNumber(1));
	cJSON *inner = cJSON_CreateObject();
	cJSON_AddNumberToObject(inner, "deep", 3);
	cJSON_AddItemToArray(a, inner);
	assert_prints(o, "{\"zero\":0,\"neg\":-42,\"ms\":1796045642708,\"max\":9007199254740992,\"half\":0.5,"
			 "\"big\":1e+300,\"s\":\"7\",\"raw\":123,\"list\":[1,{\"deep\":3}]}");
	cr_assert(cJSON_IsNumber(cJSON_GetObjectItem(o, "ms")));
	cr_assert(cJSON_IsRaw(cJSON_GetObjectItem(o, "raw")), "the caller's raw item stays raw");
	cJSON_Delete(o);
}

Test(json_print, a_lone_number_and_empty_containers)
{
	cJSON *n = cJSON_CreateNumber(-7);
	assert_prints(n, "-7");
	cJSON_Delete(n);
	cJSON *e = cJSON_CreateObject();
	assert_prints(e, "{}");
	cJSON_Delete(e);
	cr_assert_null(pc_json_print(NULL));
	/* not a number: cJSON's null (NaN never compares equal, so no tree check) */
	cJSON *o = cJSON_CreateObject();
	cJSON_AddNumberToObject(o, "nan", NAN);
	char *s = pc_json_print(o);
	cr_assert_str_eq(s, "{\"nan\":null}");
	cJSON_free(s);
	cJSON_Delete(o);
}

/* A referenced subtree belongs to another tree that other threads may be
 * printing: it is printed by cJSON and never changed, even for the length
 * of the print. Four threads print trees referencing one shared schema
 * (under ThreadSanitizer this is the race check). */
static cJSON *shared_schema;

static void *print_referencing(void *arg)
{
	(void)arg;
	for (int i = 0; i < 2000; i++) {
		cJSON *body = cJSON_CreateObject();
		cJSON_AddNumberToObject(body, "n", i);
		cJSON_AddItemToObject(body, "schema", cJSON_CreateObjectReference(shared_schema->child));
		char *s = pc_json_print(body);
		if (!s || !strstr(s, "\"maxItems\":8"))
			return (void *)1;
		cJSON_free(s);
		cJSON_Delete(body);
	}
	return NULL;
}

Test(json_print, referenced_subtrees_are_left_alone)
{
	shared_schema = cJSON_Parse("{\"type\":\"array\",\"maxItems\":8,\"items\":{\"minimum\":0}}");
	cr_assert_not_null(shared_schema);
	pthread_t th[4];
	for (int i = 0; i < 4; i++)
		cr_assert_eq(pthread_create(&th[i], NULL, print_referencing, NULL), 0);
	for (int i = 0; i < 4; i++) {
		void *r = NULL;
		pthread_join(th[i], &r);
		cr_assert_null(r);
	}
	cr_assert(cJSON_IsNumber(cJSON_GetObjectItem(shared_schema, "maxItems")));
	cJSON_Delete(shared_schema);
}

/* Random trees: what pc_json_print writes parses back to the tree. */
static cJSON *random_tree(unsigned *seed, int depth)
{
	int kind = depth > 3 ? rand_r(seed) % 4 : rand_r(seed) % 6;
	switch (kind) {
	case 0: return cJSON_CreateNumber((double)(rand_r(seed) % 2000001) - 1000000);
	case 1: return cJSON_CreateNumber((double)rand_r(seed) / 7.0);
	case 2: return cJSON_CreateString("x");
	case 3: return cJSON_CreateNumber((double)((int64_t)rand_r(seed) << 21));
	default: {
		cJSON *c = kind == 4 ? cJSON_CreateArray() : cJSON_CreateObject();
		int n = rand_r(seed) % 5;
		for (int i = 0; i < n; i++) {
			char key[16];
			snprintf(key, sizeof(key), "k%d", i);
			if (kind == 4)
				cJSON_AddItemToArray(c, random_tree(seed, depth + 1));
			else
				cJSON_AddItemToObject(c, key, random_tree(seed, depth + 1));
		}
		return c;
	}
	}
}

Test(json_print, random_trees_round_trip)
{
	unsigned seed = 12345;
	for (int i = 0; i < 2000; i++) {
		cJSON *t = random_tree(&seed, 0);
		char *s = pc_json_print(t);
		cr_assert_not_null(s);
		cJSON *back = cJSON_Parse(s);
		cr_assert_not_null(back, "%s", s);
		cr_assert(cJSON_Compare(t, back, true), "%s", s);
		cJSON_Delete(back);
		cJSON_free(s);
		cJSON_Delete(t);
	}
}
