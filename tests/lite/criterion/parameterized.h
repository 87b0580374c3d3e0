/*
 * Criterion's parameterized tests for the ThreadSanitizer stand-in
 * (criterion.h beside this file): every parameter in turn, in one test; a
 * fatal assertion ends the test at its parameter, whose message names it.
 */
#ifndef PC_TESTS_CRITERION_LITE_PARAMETERIZED_H
#define PC_TESTS_CRITERION_LITE_PARAMETERIZED_H

#include "criterion.h"

struct crl_params {
	void *items;
	size_t size, count;
};
#define cr_make_param_array(type, arr, n) ((struct crl_params){(arr), sizeof(type), (size_t)(n)})
#define ParameterizedTestParameters(suite, name) static struct crl_params crl_params_##suite##_##name(void)
#define ParameterizedTest(arg, suite, name, ...)                                            \
	static void crl_ptest_##suite##_##name(arg);                                        \
	Test(suite, name, __VA_ARGS__)                                                      \
	{                                                                                   \
		struct crl_params p = crl_params_##suite##_##name();                        \
		for (size_t i = 0; i < p.count; i++)                                        \
			crl_ptest_##suite##_##name((void *)((char *)p.items + i * p.size));  \
	}                                                                                   \
	static void crl_ptest_##suite##_##name(arg)

#endif
