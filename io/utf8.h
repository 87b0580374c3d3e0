/*
 * Strict UTF-8: checking text and making text of bytes.
 *
 * Strict means what RFC 3629 allows and nothing else: no overlong forms,
 * no surrogates (U+D800..U+DFFF) encoded as if they were characters,
 * nothing above U+10FFFF. Whatever is handed to a provider, stored in a
 * transcript or sent to a client must be such text: one byte that is not
 * makes a provider refuse the request, and every later one of the session.
 */
#ifndef PINCER_IO_UTF8_H
#define PINCER_IO_UTF8_H

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* U+FFFD REPLACEMENT CHARACTER, encoded. */
#define PC_UTF8_REPLACEMENT "\xef\xbf\xbd"

/* The length of the well-formed sequence at s[0..n) (1..4); 0 when the
 * bytes there are not one. With `bad` set, *bad is then the length of
 * the maximal subpart: the longest prefix that could still begin a
 * well-formed sequence, at least 1 (Unicode's "substitution of maximal
 * subparts", chapter 3, U+FFFD). n must be at least 1. A 0 byte is U+0000,
 * well formed. */
size_t pc_utf8_seq(const char *s, size_t n, size_t *bad);

/* Whether s[0..n) is strict UTF-8 throughout. A linear scan, no copy. */
bool pc_utf8_valid(const char *s, size_t n);

/*
 * s[0..n) as strict UTF-8 text: every maximal subpart that is not well
 * formed, and every 0 byte (C strings end there), becomes one U+FFFD; all
 * else is kept as it is. The result is malloc'd, NUL-terminated, its
 * length in *len (may be NULL); the caller frees it. NULL when out of
 * memory.
 */
char *pc_utf8_scrub(const char *s, size_t n, size_t *len);

#ifdef __cplusplus
}
#endif

#endif
