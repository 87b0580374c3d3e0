/* Percent-decoding (uri.h). */
#include "uri.h"

static int hex_digit(char c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

bool pc_percent_decode(char *s)
{
	char *w = s;
	for (const char *r = s; *r; r++) {
		if (*r != '%') {
			*w++ = *r;
			continue;
		}
		int hi = hex_digit(r[1]), lo = hi < 0 ? -1 : hex_digit(r[2]);
		if (lo < 0 || (hi | lo) == 0)
			return false;
		*w++ = (char)(hi * 16 + lo);
		r += 2;
	}
	*w = '\0';
	return true;
}
