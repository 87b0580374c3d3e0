/*
 * base64 on OpenSSL (base64.h). EVP works in the standard alphabet with
 * padding; the URL-safe alphabet and unpadded input are translated around
 * it, in chunks so nothing is allocated.
 */
#include "base64.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include <openssl/evp.h>

size_t pc_base64url_encode(const void *in, size_t n, char *out)
{
	const unsigned char *p = in;
	size_t o = 0;
	/* 48 bytes encode to exactly 64 characters, no padding between chunks */
	char chunk[65];
	for (size_t i = 0; i < n; i += 48) {
		size_t take = n - i < 48 ? n - i : 48;
		int w = EVP_EncodeBlock((unsigned char *)chunk, p + i, (int)take);
		for (int k = 0; k < w && chunk[k] != '='; k++)
			out[o++] = chunk[k] == '+' ? '-' : chunk[k] == '/' ? '_' : chunk[k];
	}
	out[o] = '\0';
	return o;
}

static bool b64_char(char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' ||
	       c == '/' || c == '-' || c == '_';
}

long pc_base64_decode(const char *in, size_t len, void *out, size_t cap)
{
	while (len > 0 && in[len - 1] == '=')
		len--;
	if (len % 4 == 1)
		return -1;
	for (size_t i = 0; i < len; i++)
		if (!b64_char(in[i]))
			return -1; /* EVP would skip blanks; nothing else may pass */
	unsigned char *o = out;
	size_t got = 0;
	/* 64 characters decode to 48 bytes; the last chunk is padded here */
	for (size_t i = 0; i < len; i += 64) {
		size_t take = len - i < 64 ? len - i : 64;
		unsigned char q[64], bytes[48];
		for (size_t k = 0; k < take; k++)
			q[k] = in[i + k] == '-' ? '+' : in[i + k] == '_' ? '/' : (unsigned char)in[i + k];
		size_t pad = (4 - take % 4) % 4;
		memset(q + take, '=', pad);
		int n = EVP_DecodeBlock(bytes, q, (int)(take + pad));
		if (n < 0)
			return -1;
		size_t real = (size_t)n - pad; /* EVP counts padding as zero bytes */
		if (real > cap - got)
			return -1;
		memcpy(o + got, bytes, real);
		got += real;
	}
	return (long)got;
}
