/*
 * A small stand-in for Criterion's classic API, used only by the
 * ThreadSanitizer build: Criterion's sandbox maps its arena at random
 * addresses, which TSan's shadow memory occupies, so a Criterion binary
 * cannot start under TSan (Criterion issue #274). The same test sources
 * compile against this header; tests run in-process, one after another,
 * and the summary line has Criterion's shape.
 */
#ifndef PC_TESTS_CRITERION_LITE_H
#define PC_TESTS_CRITERION_LITE_H

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

struct crl_opts {
	void (*init)(void);
	void (*fini)(void);
	double timeout;
	bool disabled;
	const char *description;
};

void crl_register(const char *suite, const char *name, void (*fn)(void), struct crl_opts opts);
void crl_suite(const char *suite, struct crl_opts opts);
/* No format attribute: an assertion without a message passes "". */
void crl_check(bool ok, bool fatal, const char *file, int line, const char *expr, const char *fmt, ...);
void crl_skip(const char *fmt, ...);
void crl_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#define Test(suite, name, ...)                                                              \
	static void crl_test_##suite##_##name(void);                                        \
	__attribute__((constructor)) static void crl_reg_##suite##_##name(void)             \
	{                                                                                   \
		crl_register(#suite, #name, crl_test_##suite##_##name,                      \
			     (struct crl_opts){__VA_ARGS__});                               \
	}                                                                                   \
	static void crl_test_##suite##_##name(void)

#define TestSuite(suite, ...)                                                               \
	__attribute__((constructor)) static void crl_suite_##suite(void)                    \
	{                                                                                   \
		crl_suite(#suite, (struct crl_opts){__VA_ARGS__});                          \
	}

#define CRL_(fatal, cond, expr, ...) crl_check((cond), (fatal), __FILE__, __LINE__, (expr), "" __VA_ARGS__)

#define cr_assert(c, ...) CRL_(true, !!(c), #c, __VA_ARGS__)
#define cr_expect(c, ...) CRL_(false, !!(c), #c, __VA_ARGS__)
#define cr_assert_not(c, ...) CRL_(true, !(c), "!(" #c ")", __VA_ARGS__)
#define cr_expect_not(c, ...) CRL_(false, !(c), "!(" #c ")", __VA_ARGS__)
#define cr_fail(...) CRL_(true, false, "cr_fail", __VA_ARGS__)
#define cr_assert_fail(...) CRL_(true, false, "cr_assert_fail", __VA_ARGS__)
#define cr_expect_fail(...) CRL_(false, false, "cr_expect_fail", __VA_ARGS__)

#define CRL_CMP_(fatal, a, op, b, ...) CRL_(fatal, (a)op(b), #a " " #op " " #b, __VA_ARGS__)
#define cr_assert_eq(a, b, ...) CRL_CMP_(true, a, ==, b, __VA_ARGS__)
#define cr_assert_neq(a, b, ...) CRL_CMP_(true, a, !=, b, __VA_ARGS__)
#define cr_assert_lt(a, b, ...) CRL_CMP_(true, a, <, b, __VA_ARGS__)
#define cr_assert_leq(a, b, ...) CRL_CMP_(true, a, <=, b, __VA_ARGS__)
#define cr_assert_gt(a, b, ...) CRL_CMP_(true, a, >, b, __VA_ARGS__)
#define cr_assert_geq(a, b, ...) CRL_CMP_(true, a, >=, b, __VA_ARGS__)
#define cr_expect_eq(a, b, ...) CRL_CMP_(false, a, ==, b, __VA_ARGS__)
#define cr_expect_neq(a, b, ...) CRL_CMP_(false, a, !=, b, __VA_ARGS__)
#define cr_expect_lt(a, b, ...) CRL_CMP_(false, a, <, b, __VA_ARGS__)
#define cr_expect_leq(a, b, ...) CRL_CMP_(false, a, <=, b, __VA_ARGS__)
#define cr_expect_gt(a, b, ...) CRL_CMP_(false, a, >, b, __VA_ARGS__)
#define cr_expect_geq(a, b, ...) CRL_CMP_(false, a, >=, b, __VA_ARGS__)
#define cr_assert_null(p, ...) CRL_(true, (p) == NULL, #p " == NULL", __VA_ARGS__)
#define cr_assert_not_null(p, ...) CRL_(true, (p) != NULL, #p " != NULL", __VA_ARGS__)
#define cr_expect_null(p, ...) CRL_(false, (p) == NULL, #p " == NULL", __VA_ARGS__)
#define cr_expect_not_null(p, ...) CRL_(false, (p) != NULL, #p " != NULL", __VA_ARGS__)
#define cr_assert_str_eq(a, b, ...) CRL_(true, strcmp((a), (b)) == 0, #a " == " #b, __VA_ARGS__)
#define cr_assert_str_neq(a, b, ...) CRL_(true, strcmp((a), (b)) != 0, #a " != " #b, __VA_ARGS__)
#define cr_expect_str_eq(a, b, ...) CRL_(false, strcmp((a), (b)) == 0, #a " == " #b, __VA_ARGS__)
#define cr_assert_str_empty(a, ...) CRL_(true, (a)[0] == '\0', #a " is empty", __VA_ARGS__)
#define cr_assert_float_eq(a, b, eps, ...)                                                   \
	CRL_(true, ((a) - (b) <= (eps)) && ((b) - (a) <= (eps)), #a " ~= " #b, __VA_ARGS__)

#define cr_skip_test(...) crl_skip("" __VA_ARGS__)
#define cr_log_info(...) crl_log(__VA_ARGS__)
#define cr_log_warn(...) crl_log(__VA_ARGS__)
#define cr_log_error(...) crl_log(__VA_ARGS__)

#endif
