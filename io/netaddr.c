/*
 * Numeric addresses and ranges (netaddr.h), on inet_pton / inet_ntop.
 */
#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/error.h"
#include "netaddr.h"

static const uint8_t v4_mapped[12] = {[10] = 0xff, [11] = 0xff};

static bool is_v4(const pc_netaddr_t *a) { return !memcmp(a->b, v4_mapped, sizeof(v4_mapped)); }

int pc_netaddr_parse(const char *text, size_t len, pc_netaddr_t *out)
{
	char buf[PC_NETADDR_TEXT];
	if (!text || len == 0)
		return PC_EINVAL;
	if (text[0] == '[') {
		if (len < 3 || text[len - 1] != ']')
			return PC_EINVAL;
		text++;
		len -= 2;
	}
	/* inet_pton reads up to a NUL: an embedded one must not cut the
	 * text short into something that parses */
	if (len >= sizeof(buf) || memchr(text, '\0', len))
		return PC_EINVAL;
	memcpy(buf, text, len);
	buf[len] = '\0';
	memset(out, 0, sizeof(*out));
	if (inet_pton(AF_INET, buf, out->b + 12) == 1) {
		memcpy(out->b, v4_mapped, sizeof(v4_mapped));
		return 0;
	}
	/* a zone ("fe80::1%eth0") names an interface, not an address */
	return inet_pton(AF_INET6, buf, out->b) == 1 ? 0 : PC_EINVAL;
}

int pc_netaddr_parse_peer(const char *text, pc_netaddr_t *out)
{
	if (!text)
		return PC_EINVAL;
	size_t n = strlen(text);
	if (text[0] == '[') {
		const char *close = strchr(text, ']');
		if (!close)
			return PC_EINVAL;
		return pc_netaddr_parse(text, (size_t)(close - text) + 1, out);
	}
	const char *colon = strchr(text, ':');
	/* one colon: IPv4 with a port; more: a bare IPv6 address */
	if (colon && !strchr(colon + 1, ':'))
		n = (size_t)(colon - text);
	return pc_netaddr_parse(text, n, out);
}

int pc_netcidr_parse(const char *text, pc_netcidr_t *out)
{
	if (!text)
		return PC_EINVAL;
	const char *slash = strchr(text, '/');
	size_t n = slash ? (size_t)(slash - text) : strlen(text);
	if (pc_netaddr_parse(text, n, &out->base) != 0)
		return PC_EINVAL;
	unsigned max = is_v4(&out->base) ? 32 : 128;
	unsigned prefix = max;
	if (slash) {
		const char *p = slash + 1;
		if (*p < '0' || *p > '9' || strlen(p) > 3)
			return PC_EINVAL;
		char *end;
		unsigned long v = strtoul(p, &end, 10);
		if (*end || v > max)
			return PC_EINVAL;
		prefix = (unsigned)v;
	}
	out->prefix = (uint8_t)(prefix + (max == 32 ? 96 : 0));
	for (unsigned i = 0; i < 128; i++)
		if (i >= out->prefix)
			out->base.b[i / 8] &= (uint8_t)~(0x80u >> (i % 8));
	return 0;
}

bool pc_netcidr_contains(const pc_netcidr_t *c, const pc_netaddr_t *a)
{
	unsigned full = c->prefix / 8, rest = c->prefix % 8;
	if (memcmp(c->base.b, a->b, full))
		return false;
	if (rest == 0)
		return true;
	uint8_t mask = (uint8_t)(0xffu << (8 - rest));
	return (a->b[full] & mask) == c->base.b[full];
}

bool pc_netaddr_is_loopback(const pc_netaddr_t *a)
{
	static const uint8_t one[16] = {[15] = 1};
	return (is_v4(a) && a->b[12] == 127) || !memcmp(a->b, one, sizeof(one));
}

bool pc_netaddr_is_any(const pc_netaddr_t *a)
{
	static const uint8_t zero[16];
	return !memcmp(a->b, zero, sizeof(zero)) || (is_v4(a) && !memcmp(a->b + 12, zero, 4));
}

bool pc_netaddr_equal(const pc_netaddr_t *a, const pc_netaddr_t *b) { return !memcmp(a->b, b->b, sizeof(a->b)); }
