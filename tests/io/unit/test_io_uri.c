/*
 * Percent-decoding (io/uri.h): escapes in either case, plain text kept,
 * malformed escapes and NUL refused.
 */
#include <stdio.h>

#include <criterion/criterion.h>

#include "io/uri.h"
#include "runtime/error.h"

static void decodes(const char *in, const char *want)
{
	char buf[64];
	snprintf(buf, sizeof(buf), "%s", in);
	cr_assert(pc_percent_decode(buf), "%s", in);
	cr_assert_str_eq(buf, want);
}

static void refuses(const char *in)
{
	char buf[64];
	snprintf(buf, sizeof(buf), "%s", in);
	cr_assert_not(pc_percent_decode(buf), "%s", in);
}

Test(io_uri, escapes_decode_in_place)
{
	decodes("", "");
	decodes("plain/path", "plain/path");
	decodes("%2e%2E%2f", "../");
	decodes("a%20b%7E", "a b~");
	decodes("%C3%A9", "\xc3\xa9");
	decodes("100%25", "100%");
}

Test(io_uri, malformed_escapes_and_nul_are_refused)
{
	refuses("%");
	refuses("%2");
	refuses("%g0");
	refuses("%0g");
	refuses("a%00b");
	refuses("ok%");
}

#define PORT_WHY "the port must be 1..65535"

Test(io_uri, an_authority_gives_its_host_port_and_what_follows)
{
	static const struct {
		const char *in, *host, *rest;
		uint16_t port;
	} ok[] = {
		{"127.0.0.1:18789/", "127.0.0.1", "/", 18789},
		{"gw-1.internal", "gw-1.internal", "", 80},
		{"[::1]:9", "::1", "", 9},
		{"h:65535?q", "h", "?q", 65535},
	};
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		char host[64];
		uint16_t port = 80;
		const char *rest = NULL;
		cr_assert_eq(pc_uri_authority(ok[i].in, host, sizeof(host), &port, &rest, NULL), 0, "%s", ok[i].in);
		cr_assert_str_eq(host, ok[i].host);
		cr_assert_eq(port, ok[i].port, "%s", ok[i].in);
		cr_assert_str_eq(rest, ok[i].rest);
	}
	/* refused: a host (no reason given) or a port (the reason) */
	static const struct {
		const char *in, *why;
	} bad[] = {
		{"", NULL},         {":80", NULL},        {"[::1", NULL},      {"/path", NULL},
		{"h:", PORT_WHY},   {"h:0", PORT_WHY},    {"h:65536", PORT_WHY}, {"h:+80", PORT_WHY},
		{"h:80x", PORT_WHY},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char host[64];
		uint16_t port = 80;
		const char *rest, *why = NULL;
		cr_assert_eq(pc_uri_authority(bad[i].in, host, sizeof(host), &port, &rest, &why), PC_EINVAL, "%s",
			     bad[i].in);
		cr_assert_str_eq(why ? why : "(none)", bad[i].why ? bad[i].why : "(none)", "%s", bad[i].in);
	}
	char tiny[4];
	uint16_t port = 80;
	const char *rest;
	cr_assert_eq(pc_uri_authority("longhost", tiny, sizeof(tiny), &port, &rest, NULL), PC_EINVAL, "too long");
}
