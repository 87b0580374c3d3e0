/*
 * Small helpers of the mock LLM: parse errors, strings, word counts, the
 * sticky byte buffer and the ids it makes.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "io/io.h"
#include "runtime/error.h"
#include "mock_internal.h"

int pc__mock_fail(char *err, size_t cap, const char *fmt, ...)
{
	if (cap) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(err, cap, fmt, ap);
		va_end(ap);
	}
	return PC_EINVAL;
}

char *pc__mock_dup_str(const char *s)
{
	size_t n = strlen(s) + 1;
	char *d = malloc(n);
	if (d)
		memcpy(d, s, n);
	return d;
}

bool pc__mock_is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

/* Tokens, as the mock counts them: whitespace-separated words. */
uint64_t pc__mock_word_count(const char *s, size_t n)
{
	uint64_t w = 0;
	for (size_t i = 0; i < n; i++)
		if (!pc__mock_is_space(s[i]) && (i == 0 || pc__mock_is_space(s[i - 1])))
			w++;
	return w;
}

static void put_piece(void *b, const char *p, size_t n)
{
	pc__buf_append(b, p, n);
}

void pc__mock_buf_json_str(pc__buf_t *b, const char *s, size_t n)
{
	pc_json_escape(s, n, put_piece, b);
}

/* splitmix64's finaliser: a bijection, so distinct inputs give distinct
 * ids. */
static uint64_t mix(uint64_t x)
{
	x += 0x9E3779B97F4A7C15ull;
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
	x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
	return x ^ (x >> 31);
}

/* `prefix` then `n` base62 characters derived from (seq, salt): ids are
 * unique per request and the same on every run. */
void pc__mock_make_id(char *out, size_t cap, const char *prefix, size_t n, uint64_t seq, uint64_t salt)
{
	static const char a62[] = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
	size_t pl = strlen(prefix);
	if (pl + n + 1 > cap)
		n = cap - pl - 1; /* callers size `out`; this only guards */
	memcpy(out, prefix, pl);
	uint64_t base = mix(seq ^ mix(salt)), x = 0;
	for (size_t i = 0; i < n; i++) {
		if (i % 10 == 0)
			x = mix(base + i); /* 62^10 < 2^64: ten digits per draw */
		out[pl + i] = a62[x % 62];
		x /= 62;
	}
	out[pl + n] = 0;
}
