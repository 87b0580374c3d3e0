/*
 * Numeric IP addresses and CIDR ranges, as a server reads them: a
 * listener's bind address, a peer's "address:port", the entries of a
 * trusted-proxy list and the hops of a forwarding header. IPv4 addresses
 * are held as IPv4-mapped IPv6 (::ffff:a.b.c.d), so one comparison serves
 * both families and a dual-stack peer compares equal to its IPv4 form.
 *
 * No name is ever resolved here: a caller that must decide on an address
 * (loopback or not, trusted or not) decides on the numbers it was given.
 *
 * Threads: any; no state.
 */
#ifndef PINCER_IO_NETADDR_H
#define PINCER_IO_NETADDR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pc_netaddr {
	uint8_t b[16]; /* network order; IPv4 as ::ffff:a.b.c.d */
} pc_netaddr_t;

typedef struct pc_netcidr {
	pc_netaddr_t base; /* bits past the prefix are zero */
	uint8_t prefix;    /* 0..128, counted on the 128-bit form */
} pc_netcidr_t;

/* Room for the longest numeric address as text, NUL included (an IPv6
 * address with an embedded IPv4 one takes 45). */
#define PC_NETADDR_TEXT 48

/* Parses a numeric address of `len` bytes: "a.b.c.d", an IPv6 address, or
 * one in brackets ("[::1]"). Names ("localhost") are not addresses.
 * 0, or PC_EINVAL. */
int pc_netaddr_parse(const char *text, size_t len, pc_netaddr_t *out);

/* Parses a peer as the server reports it: "a.b.c.d:port" or
 * "[v6]:port" (the port is dropped). Also takes an address alone.
 * 0, or PC_EINVAL. */
int pc_netaddr_parse_peer(const char *text, pc_netaddr_t *out);

/* Parses "address" (a single host) or "address/prefix" (an IPv4 prefix
 * counts 0..32, an IPv6 one 0..128). 0, or PC_EINVAL. */
int pc_netcidr_parse(const char *text, pc_netcidr_t *out);

bool pc_netcidr_contains(const pc_netcidr_t *c, const pc_netaddr_t *a);

/* 127.0.0.0/8 and ::1. */
bool pc_netaddr_is_loopback(const pc_netaddr_t *a);

/* 0.0.0.0 and :: (every interface). */
bool pc_netaddr_is_any(const pc_netaddr_t *a);

bool pc_netaddr_equal(const pc_netaddr_t *a, const pc_netaddr_t *b);

#ifdef __cplusplus
}
#endif
#endif
