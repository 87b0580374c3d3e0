/*
 * ECMA-262 patterns on PCRE2, for the schema validator (schema.c): private
 * to agents/tools/.
 */
#ifndef PINCER_AGENTS_TOOLS_SCHEMA_REGEX_H
#define PINCER_AGENTS_TOOLS_SCHEMA_REGEX_H

#include <stddef.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

/*
 * What one match may cost, set in the match context of pc__schema_rx_limits. The
 * match limit counts the backtracking points PCRE2 tries (about 20 ms for
 * 10^6 here): it stops catastrophic backtracking such as ^(a+)+$ on
 * "aaa...!". The depth limit counts the backtracking points alive at once,
 * which grow with the iterations of a repeated group ((?:a|b)* takes two
 * per character): 10^5 lets such a group run over some 50,000 characters.
 * The heap limit caps the memory those points take (a pattern with many
 * capture groups has large ones). A match that reaches a limit fails the
 * validation with a message saying so; it never hangs.
 */
#define PC__SCHEMA_RX_MATCH_LIMIT 1000000u
#define PC__SCHEMA_RX_DEPTH_LIMIT 100000u
#define PC__SCHEMA_RX_HEAP_LIMIT_KIB 32768u

/* A match context holding the match, depth and heap limits every pattern
 * match runs under; NULL when out of memory. The caller frees it. */
pcre2_match_context *pc__schema_rx_limits(void);

/* Compiles the ECMA-262 pattern `src` (NUL-terminated). NULL with *rc
 * PC_EINVAL and `why` saying what and at which offset of `src`, or
 * PC_ENOMEM. The caller frees the code with pcre2_code_free. */
pcre2_code *pc__schema_rx_compile(const char *src, int *rc, char *why, size_t cap);

/* The value of the n hex digits at s, or -1 when one is not a hex digit. */
long pc__schema_hex_n(const char *s, size_t n);

#endif
