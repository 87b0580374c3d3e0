/*
 * The regex cases of the JSON-Schema test suite (draft 2020-12: pattern,
 * patternProperties and the optional ecmascript-regex file), copied into
 * tests/data/json-schema-test-suite with their license: every case is run
 * through pc_schema_compile / pc_schema_validate and must give the
 * suite's answer, except the ones in `exclusions` below, each with the
 * reason (docs/tools.md lists them too). An exclusion that starts passing
 * fails the test, so the table cannot go stale.
 */
#include <criterion/criterion.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agents/tools/schema.h"

#ifndef PINCER_SUITE_DIR
#error "PINCER_SUITE_DIR must name tests/data/json-schema-test-suite (tests/CMakeLists.txt)"
#endif

static const char *const suite_files[] = {"pattern.json", "patternProperties.json", "ecmascript-regex.json"};

/* (file, group description, test description): why the case cannot pass. */
static const struct {
	const char *file, *group, *test, *why;
} exclusions[] = {
	{NULL, NULL, NULL, NULL}, /* none: every case passes */
};

static const char *excluded(const char *file, const char *group, const char *test)
{
	for (size_t i = 0; i < sizeof(exclusions) / sizeof(exclusions[0]); i++)
		if (exclusions[i].file && strcmp(exclusions[i].file, file) == 0 &&
		    strcmp(exclusions[i].group, group) == 0 && strcmp(exclusions[i].test, test) == 0)
			return exclusions[i].why;
	return NULL;
}

static cJSON *load(const char *name)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/%s", PINCER_SUITE_DIR, name);
	FILE *f = fopen(path, "rb");
	cr_assert_not_null(f, "cannot open %s", path);
	cr_assert_eq(fseek(f, 0, SEEK_END), 0);
	long n = ftell(f);
	cr_assert_gt(n, 0);
	rewind(f);
	char *text = malloc((size_t)n + 1);
	cr_assert_not_null(text);
	cr_assert_eq(fread(text, 1, (size_t)n, f), (size_t)n);
	text[n] = '\0';
	fclose(f);
	cJSON *doc = cJSON_Parse(text);
	free(text);
	cr_assert(cJSON_IsArray(doc), "%s is not a JSON array", path);
	return doc;
}

typedef struct tally {
	unsigned run, excluded;
} tally_t;

static void run_group(const char *file, const cJSON *group, tally_t *t)
{
	const char *gname = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(group, "description"));
	const cJSON *schema = cJSON_GetObjectItemCaseSensitive(group, "schema");
	const cJSON *tests = cJSON_GetObjectItemCaseSensitive(group, "tests");
	cr_assert(gname && schema && cJSON_IsArray(tests), "%s: a malformed group", file);
	pc_schema_t *s = NULL;
	char err[512];
	int crc = pc_schema_compile(schema, &s, err, sizeof(err));
	const cJSON *c;
	cJSON_ArrayForEach(c, tests) {
		const char *tname = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "description"));
		const cJSON *data = cJSON_GetObjectItemCaseSensitive(c, "data");
		bool want = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "valid"));
		cr_assert(tname && data, "%s / %s: a malformed case", file, gname);
		bool got = false;
		char verr[512] = "";
		if (crc == 0)
			got = pc_schema_validate(s, data, verr, sizeof(verr)) == 0;
		const char *why = excluded(file, gname, tname);
		if (why) {
			t->excluded++;
			cr_expect(crc != 0 || got != want,
				  "%s / %s / %s is excluded (%s) but passes: remove it from the table", file, gname,
				  tname, why);
			continue;
		}
		t->run++;
		cr_expect_eq(crc, 0, "%s / %s: the schema does not compile: %s", file, gname, err);
		cr_expect_eq(got, want, "%s / %s / %s: %s, want %s (%s)", file, gname, tname, got ? "valid" : "invalid",
			     want ? "valid" : "invalid", verr);
	}
	pc_schema_free(s);
}

Test(schema_suite_2020, regex)
{
	tally_t t = {0};
	for (size_t i = 0; i < sizeof(suite_files) / sizeof(suite_files[0]); i++) {
		cJSON *doc = load(suite_files[i]);
		const cJSON *group;
		cJSON_ArrayForEach(group, doc)
			run_group(suite_files[i], group, &t);
		cJSON_Delete(doc);
	}
	cr_expect_gt(t.run, 100u, "only %u cases ran", t.run);
	printf("draft 2020-12 regex suite: %u cases run, %u excluded\n", t.run, t.excluded);
}
