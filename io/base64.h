/*
 * base64 and base64url, on OpenSSL's EVP block coders: for the WebSocket
 * handshake's keys, h2c's HTTP2-Settings and the gateway's device tokens
 * and signatures.
 *
 * Threads: any; no state.
 */
#ifndef PINCER_IO_BASE64_H
#define PINCER_IO_BASE64_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The characters pc_base64url_encode writes for n bytes, NUL excluded. */
#define PC_BASE64URL_LEN(n) (((n) / 3) * 4 + ((n) % 3 ? (n) % 3 + 1 : 0))

/* base64url (RFC 4648 section 5) without padding, NUL-terminated: `out`
 * holds PC_BASE64URL_LEN(n) + 1 bytes. Returns the characters written. */
size_t pc_base64url_encode(const void *in, size_t n, char *out);

/* Decodes base64 or base64url, padded or not (either alphabet, not mixed
 * with whitespace), into `out` (`cap` bytes). Returns the bytes decoded,
 * or -1 when `in` is not base64 or does not fit. */
long pc_base64_decode(const char *in, size_t len, void *out, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
