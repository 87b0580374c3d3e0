/* Percent-decoding and authorities (uri.h). */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "uri.h"
#include "runtime/error.h"

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

int pc_uri_authority(const char *s, char *host, size_t cap, uint16_t *port, const char **rest, const char **why)
{
	const char *h = s, *end;
	if (*h == '[') {
		end = strchr(++h, ']');
		if (!end)
			return PC_EINVAL;
	} else {
		end = h + strcspn(h, ":/?#");
	}
	size_t n = (size_t)(end - h);
	if (n == 0 || n >= cap)
		return PC_EINVAL;
	const char *r = *end == ']' ? end + 1 : end;
	unsigned long p = *port;
	if (*r == ':') {
		char *e = NULL;
		p = isdigit((unsigned char)r[1]) ? strtoul(r + 1, &e, 10) : 0;
		if (p == 0 || p > 65535 || (*e && !strchr("/?#", *e))) {
			if (why)
				*why = "the port must be 1..65535";
			return PC_EINVAL;
		}
		r = e;
	}
	memcpy(host, h, n);
	host[n] = '\0';
	*port = (uint16_t)p;
	*rest = r;
	return 0;
}
