/*
 * Files for tests: reading a whole one into a NUL-terminated buffer,
 * writing one, and removing a directory tree, every step checked.
 */
#ifndef PC_TESTS_FILE_UTIL_H
#define PC_TESTS_FILE_UTIL_H

#include <criterion/criterion.h>

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The file's bytes, NUL-terminated (the caller frees), or NULL when it
 * cannot be opened. */
static inline char *read_file_or_null(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	char *buf = NULL;
	size_t cap = 0, len = 0;
	for (;;) {
		if (cap - len < 4096 + 1) {
			cap = cap ? cap * 2 : 8192;
			buf = realloc(buf, cap);
			cr_assert_not_null(buf);
		}
		size_t got = fread(buf + len, 1, cap - len - 1, f);
		len += got;
		if (got == 0)
			break;
	}
	cr_assert_eq(ferror(f), 0, "%s", path);
	fclose(f);
	buf[len] = '\0';
	return buf;
}

/* Same, for a file that must exist. */
static inline char *read_file(const char *path)
{
	char *text = read_file_or_null(path);
	cr_assert_not_null(text, "%s", path);
	return text;
}

static inline void write_file_n(const char *path, const void *data, size_t n)
{
	FILE *f = fopen(path, "wb");
	cr_assert_not_null(f, "%s", path);
	cr_assert_eq(fwrite(data, 1, n, f), n, "%s", path);
	cr_assert_eq(fclose(f), 0, "%s", path);
}

static inline void write_file(const char *path, const char *text)
{
	write_file_n(path, text, strlen(text));
}

static inline int rm_tree_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

/* Removes `dir` and everything below it, links as links. */
static inline void rm_tree(const char *dir)
{
	cr_assert_eq(nftw(dir, rm_tree_entry, 16, FTW_DEPTH | FTW_PHYS), 0, "removing %s", dir);
}

#endif
