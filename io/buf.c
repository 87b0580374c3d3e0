#include "buf_internal.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../runtime/error.h"

int pc__buf_append(pc__buf_t *b, const void *data, size_t n)
{
	if (b->err)
		return b->err;
	if (n > SIZE_MAX / 4 - b->len)
		return b->err = PC_ENOMEM;
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 64;
		while (cap < b->len + n + 1)
			cap *= 2;
		char *p = realloc(b->p, cap);
		if (!p)
			return b->err = PC_ENOMEM;
		b->p = p;
		b->cap = cap;
	}
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

void pc__buf_free(pc__buf_t *b)
{
	free(b->p);
	*b = (pc__buf_t){0};
}
