/*
 * Origins and Host values (origin.h).
 */
#include <ctype.h>
#include <string.h>
#include <strings.h>

#include "runtime/error.h"
#include "netaddr.h"
#include "origin.h"

/* The characters a host may hold: a DNS name's, an IPv4 address's, or
 * an IPv6 address's inside brackets. Everything else (user info, spaces,
 * a path, a NUL) makes the value something other than a host. */
static bool host_char(char c)
{
	return isalnum((unsigned char)c) || c == '-' || c == '.' || c == '_';
}

static int parse_port(const char *p, size_t n, uint16_t *out)
{
	if (n == 0 || n > 5)
		return PC_EINVAL;
	unsigned v = 0;
	for (size_t i = 0; i < n; i++) {
		if (p[i] < '0' || p[i] > '9')
			return PC_EINVAL;
		v = v * 10 + (unsigned)(p[i] - '0');
	}
	if (v == 0 || v > 65535)
		return PC_EINVAL;
	*out = (uint16_t)v;
	return 0;
}

int pc_origin_parse_host(const char *text, size_t len, uint16_t default_port, pc_origin_t *out)
{
	memset(out, 0, sizeof(*out));
	if (!text || len == 0)
		return PC_EINVAL;
	size_t hn;
	if (text[0] == '[') {
		const char *close = memchr(text, ']', len);
		if (!close)
			return PC_EINVAL;
		hn = (size_t)(close - text) + 1;
		pc_netaddr_t a;
		if (pc_netaddr_parse(text, hn, &a) != 0)
			return PC_EINVAL;
	} else {
		hn = 0;
		while (hn < len && text[hn] != ':') {
			if (!host_char(text[hn]))
				return PC_EINVAL;
			hn++;
		}
		if (hn == 0)
			return PC_EINVAL;
	}
	if (hn >= sizeof(out->host))
		return PC_EINVAL;
	for (size_t i = 0; i < hn; i++)
		out->host[i] = (char)tolower((unsigned char)text[i]);
	/* a fully qualified name's root dot names the same host */
	if (hn > 1 && out->host[hn - 1] == '.')
		out->host[hn - 1] = '\0';
	out->port = default_port;
	if (hn == len)
		return 0;
	if (text[hn] != ':')
		return PC_EINVAL;
	return parse_port(text + hn + 1, len - hn - 1, &out->port);
}

int pc_origin_parse(const char *text, size_t len, pc_origin_t *out)
{
	if (!text)
		return PC_EINVAL;
	bool https;
	size_t skip;
	if (len > 7 && !strncasecmp(text, "http://", 7)) {
		https = false;
		skip = 7;
	} else if (len > 8 && !strncasecmp(text, "https://", 8)) {
		https = true;
		skip = 8;
	} else {
		return PC_EINVAL;
	}
	int rc = pc_origin_parse_host(text + skip, len - skip, https ? 443 : 80, out);
	out->https = https;
	return rc;
}

bool pc_origin_equal(const pc_origin_t *a, const pc_origin_t *b)
{
	return a->https == b->https && a->port == b->port && !strcmp(a->host, b->host);
}

bool pc_origin_host_is_loopback(const pc_origin_t *o)
{
	if (!strcmp(o->host, "localhost"))
		return true;
	pc_netaddr_t a;
	return pc_netaddr_parse(o->host, strlen(o->host), &a) == 0 && pc_netaddr_is_loopback(&a);
}
