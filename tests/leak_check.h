/*
 * Leak checks inside tests. Criterion runs each test in a child process and
 * does not look at how that child exits, so a leak LeakSanitizer reports at
 * exit would pass unnoticed: tests ask LSan themselves, at points where
 * everything they still own is reachable. A no-op without ASan.
 */
#ifndef PC_TESTS_LEAK_CHECK_H
#define PC_TESTS_LEAK_CHECK_H

#include "pincer.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#define ASSERT_NO_LEAKS() cr_assert_eq(__lsan_do_recoverable_leak_check(), 0, "LeakSanitizer found leaks (above)")
#else
#define ASSERT_NO_LEAKS() ((void)0)
#endif

/* Frees the test's runtime, then checks that nothing leaked. */
#define FREE_RUNTIME_CHECKED(rt)                                                                   \
	do {                                                                                       \
		pc_runtime_free(rt);                                                               \
		ASSERT_NO_LEAKS();                                                                 \
	} while (0)

#endif
