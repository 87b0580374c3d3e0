/*
 * The text check of a client's JSON (json_text.h): one pass that knows
 * only where strings begin and end and what their escapes decode to.
 */
#include "io/json_text.h"

#include "io/utf8.h"

#include <stdbool.h>
#include <string.h>

/* The UTF-16 code unit of the four hex digits at s[0..n), or -1. */
static long hex4(const char *s, size_t n)
{
	if (n < 4)
		return -1;
	long v = 0;
	for (size_t i = 0; i < 4; i++) {
		char c = s[i];
		int d;
		if (c >= '0' && c <= '9')
			d = c - '0';
		else if (c >= 'a' && c <= 'f')
			d = c - 'a' + 10;
		else if (c >= 'A' && c <= 'F')
			d = c - 'A' + 10;
		else
			return -1;
		v = v * 16 + d;
	}
	return v;
}

/* The escape at s[i] (a backslash, inside a string): its length, and
 * what is wrong with it in *bad. Malformed escapes are the parser's to
 * refuse: they count as two bytes and nothing wrong. */
static size_t escape(const char *s, size_t n, size_t i, pc_json_text_t *bad)
{
	if (i + 1 >= n || s[i + 1] != 'u')
		return 2;
	long u = hex4(s + i + 2, n - i - 2);
	if (u < 0)
		return 2;
	if (u == 0)
		*bad = PC_JSON_TEXT_NUL;
	else if (u >= 0xDC00 && u <= 0xDFFF)
		*bad = PC_JSON_TEXT_SURROGATE;
	if (u < 0xD800 || u > 0xDBFF)
		return 6;
	/* A high surrogate is a character only with a low one right after. */
	long lo = i + 7 < n && s[i + 6] == '\\' && s[i + 7] == 'u' ? hex4(s + i + 8, n - i - 8) : -1;
	if (lo >= 0xDC00 && lo <= 0xDFFF)
		return 12;
	*bad = PC_JSON_TEXT_SURROGATE;
	return 6;
}

/* The bytes at s[i] that are not ASCII, or a 0 byte: their length, and
 * what is wrong in *bad. */
static size_t raw(const char *s, size_t n, size_t i, pc_json_text_t *bad)
{
	if (!s[i]) {
		*bad = PC_JSON_TEXT_NUL;
		return 1;
	}
	size_t k = 1;
	size_t len = pc_utf8_seq(s + i, n - i, &k);
	if (len)
		return len;
	*bad = PC_JSON_TEXT_NOT_UTF8;
	return k;
}

/* The string whose opening quote is at s[open]: the index after its
 * closing quote (n when there is none), and its first problem in *bad. */
static size_t string_end(const char *s, size_t n, size_t open, pc_json_text_t *bad)
{
	size_t i = open + 1;
	while (i < n && s[i] != '"') {
		pc_json_text_t b = PC_JSON_TEXT_OK;
		unsigned char c = (unsigned char)s[i];
		size_t k = c == '\\' ? escape(s, n, i, &b) : c == 0 || c >= 0x80 ? raw(s, n, i, &b) : 1;
		if (*bad == PC_JSON_TEXT_OK)
			*bad = b;
		i += k;
	}
	return i < n ? i + 1 : n;
}

/* The first problem of s[0..n); with `blank`, the strings that hold one
 * are blanked in place and the walk goes on to the end. */
static pc_json_text_t walk(char *blank, const char *s, size_t n)
{
	pc_json_text_t first = PC_JSON_TEXT_OK;
	size_t i = 0;
	while (i < n) {
		pc_json_text_t b = PC_JSON_TEXT_OK;
		unsigned char c = (unsigned char)s[i];
		size_t next;
		if (c == '"') {
			next = string_end(s, n, i, &b);
			if (b != PC_JSON_TEXT_OK && blank) {
				blank[i] = '0';
				memset(blank + i + 1, ' ', next - i - 1);
			}
		} else {
			next = i + (c == 0 || c >= 0x80 ? raw(s, n, i, &b) : 1);
		}
		if (first == PC_JSON_TEXT_OK)
			first = b;
		if (first != PC_JSON_TEXT_OK && !blank)
			return first;
		i = next > n ? n : next;
	}
	return first;
}

pc_json_text_t pc_json_text_check(const char *s, size_t n)
{
	return walk(NULL, s, n);
}

void pc_json_text_blank(char *s, size_t n)
{
	(void)walk(s, s, n);
}

const char *pc_json_text_why(pc_json_text_t r)
{
	switch (r) {
	case PC_JSON_TEXT_NOT_UTF8:
		return "is not valid UTF-8";
	case PC_JSON_TEXT_NUL:
		return "holds a NUL character (\\u0000)";
	case PC_JSON_TEXT_SURROGATE:
		return "holds a lone UTF-16 surrogate escape";
	case PC_JSON_TEXT_OK:
		break;
	}
	return "is valid text";
}
