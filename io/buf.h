/*
 * A growable byte buffer: io's, and the one every part above it uses (one
 * home for the buffer and grow-array). Its bytes are always followed by a
 * NUL (when p is not NULL), so text built in it is a C string as it
 * stands. For the project's parts; not installed.
 */
#ifndef PC_IO_BUF_H
#define PC_IO_BUF_H

#include <stddef.h>

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

#endif
