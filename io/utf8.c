/*
 * Strict UTF-8 (utf8.h): the decoder follows the Unicode standard's table
 * of well-formed byte sequences (chapter 3, table 3-7), where the lead
 * byte fixes the length and the range of the second byte, and every later
 * byte is a plain continuation byte.
 */
#include "io/utf8.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

size_t pc_utf8_seq(const char *s, size_t n, size_t *bad)
{
	const unsigned char *u = (const unsigned char *)s;
	unsigned char c = u[0];
	size_t len;
	unsigned char lo = 0x80, hi = 0xBF; /* the second byte's range */
	if (c < 0x80)
		return 1;
	if (c >= 0xC2 && c <= 0xDF)
		len = 2;
	else if (c >= 0xE0 && c <= 0xEF)
		len = 3;
	else if (c >= 0xF0 && c <= 0xF4)
		len = 4;
	else
		len = 0; /* a continuation byte, C0/C1 (only overlongs) or F5..FF */
	/* The narrowed second-byte ranges are what rule out overlong forms
	 * (E0, F0), surrogates (ED) and code points past U+10FFFF (F4). */
	if (c == 0xE0)
		lo = 0xA0;
	else if (c == 0xED)
		hi = 0x9F;
	else if (c == 0xF0)
		lo = 0x90;
	else if (c == 0xF4)
		hi = 0x8F;
	size_t i = 1;
	if (len && n > 1 && u[1] >= lo && u[1] <= hi)
		for (i = 2; i < len && i < n && (u[i] & 0xC0u) == 0x80u; i++)
			;
	if (len && i == len)
		return len;
	if (bad)
		*bad = i;
	return 0;
}

bool pc_utf8_valid(const char *s, size_t n)
{
	size_t i = 0;
	while (i < n) {
		/* Most text is ASCII: eight bytes at a time while it is. */
		uint64_t w;
		if (n - i >= sizeof(w)) {
			memcpy(&w, s + i, sizeof(w));
			if (!(w & 0x8080808080808080ull)) {
				i += sizeof(w);
				continue;
			}
		}
		size_t k = pc_utf8_seq(s + i, n - i, NULL);
		if (!k)
			return false;
		i += k;
	}
	return true;
}

/* Writes the scrubbed text of s[0..n) to out (nothing when out is NULL)
 * and returns its length. */
static size_t scrub(char *out, const char *s, size_t n)
{
	size_t o = 0;
	for (size_t i = 0; i < n;) {
		size_t bad = 1;
		size_t k = s[i] ? pc_utf8_seq(s + i, n - i, &bad) : 0;
		const char *from = k ? s + i : PC_UTF8_REPLACEMENT;
		size_t len = k ? k : sizeof(PC_UTF8_REPLACEMENT) - 1;
		if (out)
			memcpy(out + o, from, len);
		o += len;
		i += k ? k : bad;
	}
	return o;
}

char *pc_utf8_scrub(const char *s, size_t n, size_t *len)
{
	size_t total = scrub(NULL, s, n);
	char *out = malloc(total + 1);
	if (!out)
		return NULL;
	scrub(out, s, n);
	out[total] = '\0';
	if (len)
		*len = total;
	return out;
}
