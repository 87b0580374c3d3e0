/*
 * PostgreSQL for the store's tests. ctest's "pg" fixture (tests/support/
 * pg_cluster, tests/CMakeLists.txt) starts a throwaway server and runs the
 * store suite again with PINCER_TEST_PG_URL set to it; without that
 * variable the tests use SQLite. Every pg_test_url call makes a schema of
 * its own, so a test never needs the database to be empty.
 *
 * Link: libpq (tests/CMakeLists.txt adds it to every test that includes
 * this header).
 */
#ifndef PC_TESTS_PG_TEST_H
#define PC_TESTS_PG_TEST_H

#include <criterion/criterion.h>

#include <libpq-fe.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

/* Whether this run is against PostgreSQL (PINCER_TEST_PG_URL set). */
static inline bool pg_test_enabled(void)
{
	const char *base = getenv("PINCER_TEST_PG_URL");
	return base && base[0];
}

/* A connection to `url`, or the test fails. */
static inline PGconn *pg_test_connect(const char *url)
{
	PGconn *c = PQconnectdb(url);
	cr_assert_not_null(c, "out of memory connecting to %s", url);
	if (PQstatus(c) != CONNECTION_OK) {
		char err[512];
		snprintf(err, sizeof(err), "%s", PQerrorMessage(c));
		PQfinish(c);
		cr_assert_fail("cannot connect to %s: %s", url, err);
	}
	return c;
}

/* Runs `sql` (one statement or several, as PQexec takes them) on `url`;
 * the test fails when the server refuses it. */
static inline void pg_test_exec(const char *url, const char *sql)
{
	PGconn *c = pg_test_connect(url);
	PGresult *r = PQexec(c, sql);
	ExecStatusType st = PQresultStatus(r);
	if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
		char err[512];
		snprintf(err, sizeof(err), "%s", PQerrorMessage(c));
		PQclear(r);
		PQfinish(c);
		cr_assert_fail("%s: %s", sql, err);
	}
	PQclear(r);
	PQfinish(c);
}

/* The first column of the first row of `sql` on `url` as an integer (a
 * boolean reads as 1 or 0): false when there is no row or the value is
 * NULL. The test fails when the server refuses the query or the value is
 * not a number. */
static inline bool pg_test_query_int(const char *url, const char *sql, long long *out)
{
	PGconn *c = pg_test_connect(url);
	PGresult *r = PQexec(c, sql);
	if (PQresultStatus(r) != PGRES_TUPLES_OK) {
		char err[512];
		snprintf(err, sizeof(err), "%s", PQerrorMessage(c));
		PQclear(r);
		PQfinish(c);
		cr_assert_fail("%s: %s", sql, err);
	}
	bool got = PQntuples(r) > 0 && PQnfields(r) > 0 && !PQgetisnull(r, 0, 0);
	if (got) {
		const char *v = PQgetvalue(r, 0, 0);
		char *end = NULL;
		if (strcmp(v, "t") == 0 && PQftype(r, 0) == 16 /* BOOLOID */)
			*out = 1;
		else if (strcmp(v, "f") == 0 && PQftype(r, 0) == 16)
			*out = 0;
		else
			*out = strtoll(v, &end, 10);
		bool number = end == NULL || (end != v && *end == '\0');
		if (!number) {
			char val[64];
			snprintf(val, sizeof(val), "%s", v);
			PQclear(r);
			PQfinish(c);
			cr_assert_fail("%s: not an integer: %s", sql, val);
		}
	}
	PQclear(r);
	PQfinish(c);
	return got;
}

/* A fresh, empty schema on the server of PINCER_TEST_PG_URL, named
 * pincer_test_<pid>_<n>_<random> (unique across the forked test
 * processes and across runs), and the URL that points a connection at it:
 * the base URL and options=-csearch_path=<schema>. Written to `buf`
 * (NUL-terminated); the schema's name, when `schema` is not NULL, to
 * `schema` (at least 64 bytes). False when PINCER_TEST_PG_URL is unset;
 * the test fails when the server cannot be reached or `buf` is short. */
static inline bool pg_test_url_schema(char *buf, size_t n, char *schema)
{
	static unsigned counter;
	if (!pg_test_enabled())
		return false;
	const char *base = getenv("PINCER_TEST_PG_URL");
	uint32_t rnd = 0;
	if (getrandom(&rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd)) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		rnd = (uint32_t)ts.tv_nsec ^ (uint32_t)ts.tv_sec;
	}
	char name[64];
	snprintf(name, sizeof(name), "pincer_test_%ld_%u_%08x", (long)getpid(), ++counter, (unsigned)rnd);
	char sql[128];
	snprintf(sql, sizeof(sql), "CREATE SCHEMA %s", name);
	pg_test_exec(base, sql);
	int k = snprintf(buf, n, "%s%coptions=-csearch_path%%3D%s", base, strchr(base, '?') ? '&' : '?', name);
	cr_assert(k > 0 && (size_t)k < n, "the schema's URL does not fit %zu bytes", n);
	if (schema)
		snprintf(schema, 64, "%s", name);
	return true;
}

static inline bool pg_test_url(char *buf, size_t n)
{
	return pg_test_url_schema(buf, n, NULL);
}

/* Runs `pg_cluster VERB DIR` on the fixture's server (VERB "restart":
 * a fast restart, every connection cut; it accepts connections again when
 * this returns); the test fails when that fails. Needs
 * PINCER_TEST_PG_CLUSTER and PINCER_TEST_PG_DIR, which ctest sets beside
 * PINCER_TEST_PG_URL. */
static inline void pg_test_cluster(const char *verb)
{
	const char *script = getenv("PINCER_TEST_PG_CLUSTER"), *dir = getenv("PINCER_TEST_PG_DIR");
	cr_assert(script && script[0] && dir && dir[0], "PINCER_TEST_PG_CLUSTER and PINCER_TEST_PG_DIR are not set");
	char cmd[2048];
	int k = snprintf(cmd, sizeof(cmd), "'%s' %s '%s' >/dev/null", script, verb, dir);
	cr_assert(k > 0 && (size_t)k < sizeof(cmd));
	cr_assert_eq(system(cmd), 0, "%s", cmd);
}

#endif
