/*
 * A process locale whose decimal point is a comma, for tests that check
 * output does not follow the locale.
 */
#ifndef PC_TESTS_COMMA_LOCALE_H
#define PC_TESTS_COMMA_LOCALE_H

#include <locale.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

/* Switches LC_NUMERIC to a locale whose decimal point is a comma: an
 * installed one, else one compiled into a temporary directory with
 * localedef (LOCPATH). False when neither works. The test's fini
 * (locale_end) restores the locale and removes the directory. */
static char locale_dir[64];

static inline bool comma_locale(void)
{
	if (setlocale(LC_NUMERIC, "de_DE.UTF-8") || setlocale(LC_NUMERIC, "fr_FR.UTF-8"))
		return true;
	snprintf(locale_dir, sizeof(locale_dir), "/tmp/pc-locale-XXXXXX");
	if (!mkdtemp(locale_dir)) {
		locale_dir[0] = '\0';
		return false;
	}
	char cmd[512];
	snprintf(cmd, sizeof(cmd), "localedef -i de_DE -f UTF-8 %s/de_DE.UTF-8 >/dev/null 2>&1", locale_dir);
	if (system(cmd) != 0 || setenv("LOCPATH", locale_dir, 1) != 0)
		return false;
	return setlocale(LC_NUMERIC, "de_DE.UTF-8") != NULL;
}

static inline void locale_end(void)
{
	setlocale(LC_NUMERIC, "C");
	if (locale_dir[0]) {
		char cmd[512];
		snprintf(cmd, sizeof(cmd), "rm -rf %s", locale_dir);
		if (system(cmd) != 0)
			cr_log_warn("could not remove %s", locale_dir);
		unsetenv("LOCPATH");
		locale_dir[0] = '\0';
	}
}

#endif
