/*
 * Web origins (RFC 6454) and Host header values, parsed for comparison:
 * a gateway decides whether a browser's `Origin` is its own or one it was
 * told to trust, and whether the `Host` a client asked for is a name of
 * this machine (the defence against DNS rebinding).
 *
 * Only what such a comparison needs: scheme http or https, a host (a DNS
 * name, lowercased; an IPv4 address; an IPv6 address in brackets) and a
 * port (the scheme's default when absent). Anything else (a path, user
 * info, a wildcard, "null") is not an origin.
 *
 * Threads: any; no state.
 */
#ifndef PINCER_IO_ORIGIN_H
#define PINCER_IO_ORIGIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PC_ORIGIN_HOST_MAX 256

typedef struct pc_origin {
	bool https;
	char host[PC_ORIGIN_HOST_MAX]; /* lowercase; IPv6 keeps its brackets */
	uint16_t port;                 /* explicit, else 80 / 443 */
} pc_origin_t;

/* "scheme://host[:port]" of `len` bytes. 0, or PC_EINVAL. */
int pc_origin_parse(const char *text, size_t len, pc_origin_t *out);

/* A Host header's "host[:port]"; the port defaults to `default_port`
 * (out->https is false). 0, or PC_EINVAL. */
int pc_origin_parse_host(const char *text, size_t len, uint16_t default_port, pc_origin_t *out);

/* Same scheme, host and port. */
bool pc_origin_equal(const pc_origin_t *a, const pc_origin_t *b);

/* The host is "localhost", an address in 127.0.0.0/8 or [::1]. */
bool pc_origin_host_is_loopback(const pc_origin_t *o);

#ifdef __cplusplus
}
#endif
#endif
