#include "buf.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/error.h"

int pc__buf_append(pc__buf_t *b, const void *data, size_t n)
{
	if (b->err)
		return b->err;
	if (n > SIZE_MAX / 4 - b->len)
		return b->err = PC_ENOMEM;
	if (PC__GROW(b->p, b->cap, b->len + n + 1, 64))
		return b->err = PC_ENOMEM;
	if (n)
		memcpy(b->p + b->len, data, n);
	b->len += n;
	b->p[b->len] = '\0';
	return 0;
}

int pc__buf_append_str(pc__buf_t *b, const char *s)
{
	return pc__buf_append(b, s, strlen(s));
}

int pc__buf_append_char(pc__buf_t *b, char c)
{
	return pc__buf_append(b, &c, 1);
}

int pc__buf_printf(pc__buf_t *b, const char *fmt, ...)
{
	char small[256];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(small, sizeof(small), fmt, ap);
	va_end(ap);
	if (n < 0)
		return b->err ? b->err : (b->err = PC_EINVAL);
	if ((size_t)n < sizeof(small))
		return pc__buf_append(b, small, (size_t)n);
	char *big = b->err ? NULL : malloc((size_t)n + 1);
	if (!big)
		return b->err ? b->err : (b->err = PC_ENOMEM);
	va_start(ap, fmt);
	vsnprintf(big, (size_t)n + 1, fmt, ap);
	va_end(ap);
	int rc = pc__buf_append(b, big, (size_t)n);
	free(big);
	return rc;
}

char *pc__buf_take(pc__buf_t *b)
{
	if (!b->err && !b->p)
		pc__buf_append(b, "", 0);
	char *p = b->err ? NULL : b->p;
	if (b->err)
		free(b->p);
	*b = (pc__buf_t){0};
	return p;
}

void pc__buf_free(pc__buf_t *b)
{
	free(b->p);
	*b = (pc__buf_t){0};
}
