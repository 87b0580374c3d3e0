/*
 * A growable byte buffer: io's, and the one every part above it uses (one
 * home for the buffer and grow-array). Its bytes are always followed by a
 * NUL (when p is not NULL), so text built in it is a C string as it
 * stands. For the project's parts; not installed.
 */
#ifndef PC_IO_BUF_H
#define PC_IO_BUF_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/error.h"

typedef struct pc__buf {
	char *p; /* NULL until the first append; then NUL-terminated */
	size_t len;
	size_t cap;
	int err; /* sticky: the first failed append's code; later appends do
		  * nothing and return it, so a text can be built without a
		  * check per piece and checked once at the end */
} pc__buf_t;

/* Appends n bytes (even 0: p is then a string); PC_ENOMEM leaves the
 * buffer as it was and sticks in err. */
int pc__buf_append(pc__buf_t *b, const void *data, size_t n);
/* Appends a C string. */
int pc__buf_append_str(pc__buf_t *b, const char *s);
int pc__buf_append_char(pc__buf_t *b, char c);
/* Appends printf-formatted text. */
int pc__buf_printf(pc__buf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Hands over the text (the caller frees it; "" when nothing was
 * appended), or NULL after a failed append; the buffer is empty after. */
char *pc__buf_take(pc__buf_t *b);
/* Frees the bytes and empties the buffer. */
void pc__buf_free(pc__buf_t *b);

/*
 * The grow-array. Makes room for `need` elements of `size` bytes in the
 * array whose address is `arr` (a T ** passed as void *) and whose
 * capacity, in elements, is *cap: when need > *cap the capacity doubles
 * (from `first` when it is 0) until it holds `need`, and the array is
 * reallocated. 0, or PC_ENOMEM when the memory cannot be had or the size
 * would overflow; the array and *cap are then as they were, so the caller
 * may go on with what it has. Inline, so the store and the session lock,
 * which do not link the I/O library, have it too.
 */
static inline int pc__grow(void *arr, size_t *cap, size_t need, size_t size, size_t first)
{
	if (need <= *cap)
		return 0;
	size_t c = *cap ? *cap : first ? first : 1;
	while (c < need)
		c = c > SIZE_MAX / 2 ? need : c * 2;
	if (size && c > SIZE_MAX / size)
		return PC_ENOMEM;
	void *old; /* the caller's T *, read and written as bytes */
	memcpy(&old, arr, sizeof(old));
	void *p = realloc(old, c * size);
	if (!p)
		return PC_ENOMEM;
	memcpy(arr, &p, sizeof(p));
	*cap = c;
	return 0;
}
/* pc__grow for the array `v` (any T *, an lvalue) and its size_t `cap`:
 * PC__GROW(a->v, a->cap, a->n + 1, 8). */
#define PC__GROW(v, cap, need, first) pc__grow(&(v), &(cap), (need), sizeof(*(v)), (first))

#endif
