/*
 * Whether a client's JSON is text a session can hold.
 *
 * cJSON 1.7.15 copies raw bytes into strings without looking at them, so
 * invalid UTF-8 comes out of a parse as it went in; it decodes "\u0000"
 * to a 0 byte, which ends the C string there ("victim\u0000junk" reads as
 * "victim"); a raw 0 byte does the same. It refuses escapes of lone
 * UTF-16 surrogates ("\ud800", "\udc00", a high surrogate not followed by
 * a low one), but only as malformed JSON. pc_json_text_check scans the
 * text itself, once, before it is parsed, and says which of these it
 * holds, so that every entry point refuses the same things with the same
 * words.
 */
#ifndef PINCER_IO_JSON_TEXT_H
#define PINCER_IO_JSON_TEXT_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum pc_json_text {
	PC_JSON_TEXT_OK = 0,
	PC_JSON_TEXT_NOT_UTF8,  /* a byte sequence that is not strict UTF-8 (io/utf8.h) */
	PC_JSON_TEXT_NUL,       /* "\u0000" in a string, or a 0 byte anywhere */
	PC_JSON_TEXT_SURROGATE, /* a "\uXXXX" escape of a lone surrogate */
} pc_json_text_t;

/* The first problem of the JSON text s[0..n), in text order;
 * PC_JSON_TEXT_OK when it has none. Only what the text holds is judged:
 * malformed JSON is the parser's business. A linear scan, no copy. */
pc_json_text_t pc_json_text_check(const char *s, size_t n);

/* The problem in words, after a subject ("the body ..."): "is not valid
 * UTF-8", "holds a NUL character (\u0000)", "holds a lone UTF-16
 * surrogate escape". */
const char *pc_json_text_why(pc_json_text_t r);

/*
 * Overwrites, in place, every string of s[0..n) that holds a problem with
 * the number 0 padded by blanks to the string's length, so that the rest
 * of a refused text can still be parsed: a request's id that is itself
 * clean can then be read and answered; one that is not reads as a number.
 * For error paths, on a copy.
 */
void pc_json_text_blank(char *s, size_t n);

#ifdef __cplusplus
}
#endif

#endif
