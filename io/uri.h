/*
 * Percent-encoding (RFC 3986 §2.1) in the pieces of a URI the gateway and
 * the tools read: request paths, JSON-pointer fragments.
 *
 * Pure; any thread.
 */
#ifndef PINCER_IO_URI_H
#define PINCER_IO_URI_H

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Decodes the %XX escapes of s in place. False, with s left partly
 * decoded, for a malformed escape or one that decodes to NUL (which no C
 * string can carry). */
bool pc_percent_decode(char *s);

#ifdef __cplusplus
}
#endif
#endif
