/*
 * base64 and base64url (io/base64.h): RFC 4648's test vectors, every
 * length round trip in both alphabets, padding optional, and bad input
 * refused rather than guessed at.
 */
#include <criterion/criterion.h>

#include <string.h>

#include "io/base64.h"

TestSuite(io_base64);

static const struct {
	const char *plain, *b64url;
} vectors[] = {
	{"", ""},         {"f", "Zg"},         {"fo", "Zm8"},         {"foo", "Zm9v"},
	{"foob", "Zm9vYg"}, {"fooba", "Zm9vYmE"}, {"foobar", "Zm9vYmFy"},
};

Test(io_base64, rfc_4648_vectors_encode_without_padding_and_decode_either_way)
{
	for (size_t i = 0; i < sizeof(vectors) / sizeof(vectors[0]); i++) {
		char enc[16];
		size_t n = strlen(vectors[i].plain);
		cr_assert_eq(pc_base64url_encode(vectors[i].plain, n, enc), strlen(vectors[i].b64url));
		cr_assert_eq(strlen(enc), PC_BASE64URL_LEN(n));
		cr_assert_str_eq(enc, vectors[i].b64url);
		char padded[16], dec[16];
		size_t len = strlen(enc), pad = (4 - len % 4) % 4;
		memcpy(padded, enc, len);
		memset(padded + len, '=', pad);
		padded[len + pad] = '\0';
		long got = pc_base64_decode(enc, strlen(enc), dec, sizeof(dec));
		cr_assert_eq(got, (long)n, "%s", enc);
		cr_assert_eq(memcmp(dec, vectors[i].plain, n), 0);
		cr_assert_eq(pc_base64_decode(padded, strlen(padded), dec, sizeof(dec)), (long)n, "padded %s", padded);
	}
}

Test(io_base64, every_byte_and_length_round_trips_in_both_alphabets)
{
	unsigned char in[300], dec[300];
	for (size_t i = 0; i < sizeof(in); i++)
		in[i] = (unsigned char)(i * 37 + 11);
	for (size_t n = 0; n <= sizeof(in); n++) {
		char enc[PC_BASE64URL_LEN(300) + 1], std[sizeof(enc)];
		size_t len = pc_base64url_encode(in, n, enc);
		cr_assert_eq(len, PC_BASE64URL_LEN(n));
		cr_assert_null(strpbrk(enc, "+/="), "url-safe and unpadded: %s", enc);
		cr_assert_eq(pc_base64_decode(enc, len, dec, sizeof(dec)), (long)n);
		cr_assert_eq(memcmp(dec, in, n), 0, "length %zu", n);
		/* the standard alphabet decodes the same */
		for (size_t k = 0; k <= len; k++)
			std[k] = enc[k] == '-' ? '+' : enc[k] == '_' ? '/' : enc[k];
		cr_assert_eq(pc_base64_decode(std, len, dec, sizeof(dec)), (long)n);
		cr_assert_eq(memcmp(dec, in, n), 0);
	}
}

Test(io_base64, bad_input_and_short_room_are_refused)
{
	unsigned char out[8];
	const char *bad[] = {"Zm9v YmFy", "Zm9v\nYmFy", "Zm9*", "Z", "Zm9vY", "Zg=A", "\xc3\xa9\xc3\xa9"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		cr_assert_eq(pc_base64_decode(bad[i], strlen(bad[i]), out, sizeof(out)), -1, "'%s'", bad[i]);
	cr_assert_eq(pc_base64_decode("Zm9vYmFy", 8, out, 5), -1, "6 bytes do not fit in 5");
	cr_assert_eq(pc_base64_decode("Zm9vYmFy", 8, out, 6), 6);
	cr_assert_eq(pc_base64_decode("", 0, out, 0), 0);
}
