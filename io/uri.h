/*
 * The pieces of a URI the gateway, the tools and the commands read:
 * percent-encoding (RFC 3986 §2.1) in request paths and JSON-pointer
 * fragments, and the authority of a ws:// or http:// address.
 *
 * Pure; any thread.
 */
#ifndef PINCER_IO_URI_H
#define PINCER_IO_URI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Decodes the %XX escapes of s in place. False, with s left partly
 * decoded, for a malformed escape or one that decodes to NUL (which no C
 * string can carry). */
bool pc_percent_decode(char *s);

/* Reads the authority at the start of `s` (what follows "scheme://"):
 * HOST[:PORT], HOST a name or an address (an IPv6 one in brackets, copied
 * without them) into host[cap], PORT (1..65535) into *port, left as it was
 * when none is given; *rest points past it (a path, a query, or ""). 0, or
 * PC_EINVAL for an empty or too long host, or a malformed port (then *why,
 * when given, says "the port must be 1..65535"). */
int pc_uri_authority(const char *s, char *host, size_t cap, uint16_t *port, const char **rest, const char **why);

#ifdef __cplusplus
}
#endif
#endif
