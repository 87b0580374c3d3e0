/* The runner behind criterion/criterion.h in the TSan build. */
#include "criterion/criterion.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#define MAX_TESTS 512
#define MAX_SUITES 64

struct test {
	const char *suite, *name;
	void (*fn)(void);
	struct crl_opts opts;
};

static struct test tests[MAX_TESTS];
static int ntests;
static struct {
	const char *name;
	struct crl_opts opts;
} suites[MAX_SUITES];
static int nsuites;

static jmp_buf escape;
static bool failed, skipped;
static const struct test *current; /* named in each failure, even one that ends the process */

void crl_register(const char *suite, const char *name, void (*fn)(void), struct crl_opts opts)
{
	if (ntests == MAX_TESTS) {
		fprintf(stderr, "criterion-lite: too many tests\n");
		abort();
	}
	tests[ntests++] = (struct test){suite, name, fn, opts};
}

void crl_suite(const char *suite, struct crl_opts opts)
{
	if (nsuites < MAX_SUITES) {
		suites[nsuites].name = suite;
		suites[nsuites++].opts = opts;
	}
}

void crl_check(bool ok, bool fatal, const char *file, int line, const char *expr, const char *fmt, ...)
{
	if (ok)
		return;
	failed = true;
	fprintf(stderr, "[%s::%s] %s:%d: Assertion failed: %s", current->suite, current->name, file, line, expr);
	if (fmt[0]) {
		va_list ap;
		va_start(ap, fmt);
		fputs(": ", stderr);
		vfprintf(stderr, fmt, ap);
		va_end(ap);
	}
	fputc('\n', stderr);
	if (fatal)
		longjmp(escape, 1);
}

void crl_skip(const char *fmt, ...)
{
	(void)fmt;
	skipped = true;
	longjmp(escape, 1);
}

void crl_log(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static const struct crl_opts *suite_opts(const char *suite)
{
	for (int i = 0; i < nsuites; i++)
		if (strcmp(suites[i].name, suite) == 0)
			return &suites[i].opts;
	return NULL;
}

int main(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	int passing = 0, failing = 0, run = 0;
	for (int i = 0; i < ntests; i++) {
		struct test *t = &tests[i];
		const struct crl_opts *so = suite_opts(t->suite);
		if (t->opts.disabled || (so && so->disabled))
			continue;
		void (*init)(void) = t->opts.init ? t->opts.init : so ? so->init : NULL;
		void (*fini)(void) = t->opts.fini ? t->opts.fini : so ? so->fini : NULL;
		failed = skipped = false;
		current = t;
		if (setjmp(escape) == 0) {
			if (init)
				init();
			t->fn();
		}
		/* A failed assertion in fini jumps here, not back into the test,
		 * so fini never runs twice. */
		if (fini && setjmp(escape) == 0)
			fini();
		if (skipped)
			continue;
		run++;
		if (failed) {
			failing++;
			fprintf(stderr, "[FAIL] %s::%s\n", t->suite, t->name);
		} else {
			passing++;
		}
	}
	printf("[====] Synthesis: Tested: %d | Passing: %d | Failing: %d | Crashing: 0\n", run, passing, failing);
	return failing ? 1 : 0;
}
