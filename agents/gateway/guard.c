/*
 * Who may send what (docs/gateway.md, "Admission"): the rules every route
 * but the probes applies before it reads a request, on HTTP/1.1 and h2c
 * alike (the HTTP/2 server turns :authority into Host).
 *
 *   1. the client: the socket's peer, or, from a trusted proxy, the
 *      address its forwarding header names; a loopback peer whose request
 *      carries forwarding headers nobody vouches for is no loopback client;
 *   2. without auth, only loopback clients, asking for a loopback Host
 *      (DNS rebinding: a page of another site reaches 127.0.0.1 under its
 *      own name, and its Host says so);
 *   3. an Origin, when sent, is the gateway's own or an allowed one
 *      (a browser's cross-site request: it always sends one).
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "io/io.h"
#include "gateway_internal.h"

int pc__gw_guard_new(pc_gateway_t *g)
{
	const pc_gateway_config_t *gc = g->gcfg;
	size_t no = gc->allowed_origin_count, np = gc->trusted_proxy_count;
	g->origins = no ? calloc(no, sizeof(*g->origins)) : NULL;
	g->proxies = np ? calloc(np, sizeof(*g->proxies)) : NULL;
	if ((no && !g->origins) || (np && !g->proxies))
		return PC_ENOMEM;
	/* The configuration checked these; an embedding program's own
	 * structure gets the same check here. */
	for (size_t i = 0; i < no; i++)
		if (pc_origin_parse(gc->allowed_origins[i], strlen(gc->allowed_origins[i]), &g->origins[i]) != 0)
			return PC_EINVAL;
	for (size_t i = 0; i < np; i++)
		if (pc_netcidr_parse(gc->trusted_proxies[i], &g->proxies[i]) != 0)
			return PC_EINVAL;
	g->norigins = no;
	g->nproxies = np;
	return 0;
}

void pc__gw_guard_free(pc_gateway_t *g)
{
	free(g->origins);
	free(g->proxies);
	g->origins = NULL;
	g->proxies = NULL;
}

static bool trusted(const pc_gateway_t *g, const pc_netaddr_t *a)
{
	for (size_t i = 0; i < g->nproxies; i++)
		if (pc_netcidr_contains(&g->proxies[i], a))
			return true;
	return false;
}

/* The headers admission reads, found in one pass over the request's:
 * how many of each there are, and the first's value. */
typedef struct seen {
	const char *host, *origin, *real_ip;
	size_t hosts, origins, forwarding; /* forwarding: X-Forwarded-For, Forwarded, X-Real-IP */
} seen_t;

static void scan(const pc_http_request_msg_t *q, seen_t *s)
{
	*s = (seen_t){0};
	for (size_t i = 0; i < q->header_count; i++) {
		const char *n = q->headers[i].name, *v = q->headers[i].value;
		if (!strcasecmp(n, "host")) {
			if (s->hosts++ == 0)
				s->host = v;
		} else if (!strcasecmp(n, "origin")) {
			if (s->origins++ == 0)
				s->origin = v;
		} else if (!strcasecmp(n, "x-real-ip")) {
			if (!s->real_ip)
				s->real_ip = v;
			s->forwarding++;
		} else if (!strcasecmp(n, "x-forwarded-for") || !strcasecmp(n, "forwarded")) {
			s->forwarding++;
		}
	}
}

/* ---- forwarding headers ---- */

/* The hops a forwarding header lists, left (the first client) to right
 * (the proxy nearest to us). A hop that is no address ("unknown", an
 * obfuscated name) is kept as unparsed. */
#define MAX_HOPS 32
typedef struct hops {
	pc_netaddr_t addr[MAX_HOPS];
	bool parsed[MAX_HOPS];
	size_t n;
	bool overflow;
} hops_t;

static void add_hop(hops_t *h, const char *s, size_t n)
{
	while (n && (*s == ' ' || *s == '\t'))
		s++, n--;
	while (n && (s[n - 1] == ' ' || s[n - 1] == '\t'))
		n--;
	if (n >= 2 && s[0] == '"' && s[n - 1] == '"')
		s++, n -= 2;
	if (h->n == MAX_HOPS) {
		/* keep the nearest hops: they are the ones we walk */
		memmove(h->addr, h->addr + 1, sizeof(h->addr[0]) * (MAX_HOPS - 1));
		memmove(h->parsed, h->parsed + 1, sizeof(h->parsed[0]) * (MAX_HOPS - 1));
		h->n--;
		h->overflow = true;
	}
	char buf[PC_NETADDR_TEXT + 8];
	bool ok = false;
	if (n < sizeof(buf)) {
		memcpy(buf, s, n);
		buf[n] = '\0';
		ok = pc_netaddr_parse_peer(buf, &h->addr[h->n]) == 0;
	}
	h->parsed[h->n++] = ok;
}

/* X-Forwarded-For: "client, proxy1, proxy2", over one or more lines. */
static void xff_hops(const pc_http_request_msg_t *q, hops_t *h)
{
	for (size_t i = 0; i < q->header_count; i++) {
		if (strcasecmp(q->headers[i].name, "x-forwarded-for"))
			continue;
		const char *s = q->headers[i].value;
		for (;;) {
			size_t n = strcspn(s, ",");
			add_hop(h, s, n);
			if (!s[n])
				break;
			s += n + 1;
		}
	}
}

/* Forwarded (RFC 7239): elements split by ',', pairs by ';'; the hop is
 * each element's for= (quoted when it holds a port or brackets). */
static void forwarded_hops(const pc_http_request_msg_t *q, hops_t *h)
{
	for (size_t i = 0; i < q->header_count; i++) {
		if (strcasecmp(q->headers[i].name, "forwarded"))
			continue;
		const char *s = q->headers[i].value;
		while (*s) {
			size_t n = strcspn(s, ",");
			bool found = false;
			for (size_t k = 0; k < n;) {
				size_t m = strcspn(s + k, ";,");
				if (m > n - k)
					m = n - k;
				const char *p = s + k;
				size_t pm = m;
				while (pm && (*p == ' ' || *p == '\t'))
					p++, pm--;
				if (!found && pm > 4 && !strncasecmp(p, "for=", 4)) {
					add_hop(h, p + 4, pm - 4);
					found = true;
				}
				k += m + 1;
			}
			if (!found)
				add_hop(h, "", 0);
			if (!s[n])
				break;
			s += n + 1;
		}
	}
}

/* Walks the hops from the nearest: trusted proxies are passed over, the
 * first hop that is not one is the client. False when a hop cannot be
 * read (then *client is the proxy that named it). */
static bool walk_hops(const pc_gateway_t *g, const hops_t *h, pc_netaddr_t *client)
{
	for (size_t i = h->n; i-- > 0;) {
		if (!h->parsed[i])
			return false;
		*client = h->addr[i];
		if (!trusted(g, client))
			return true;
	}
	/* every hop is a trusted proxy: the first of them is as far as we see */
	return true;
}

/* The client behind a request from a trusted proxy. Its address comes from
 * X-Forwarded-For, else Forwarded. A proxy passes on what it does not set
 * itself, so a client may send the other header too: it is the
 * loopback exemption that needs every header present to agree. */
static void forwarded_client(const pc_gateway_t *g, const pc_http_request_msg_t *q, const seen_t *seen,
			     pc__gw_client_t *who)
{
	hops_t xff = {0}, fwd = {0};
	xff_hops(q, &xff);
	forwarded_hops(q, &fwd);
	pc_netaddr_t a = who->addr, b = who->addr;
	bool ok_a = xff.n == 0 || walk_hops(g, &xff, &a);
	bool ok_b = fwd.n == 0 || walk_hops(g, &fwd, &b);
	who->addr = xff.n ? a : b;
	who->loopback = ok_a && ok_b && !xff.overflow && !fwd.overflow && pc_netaddr_is_loopback(&a) &&
			pc_netaddr_is_loopback(&b);
	if (seen->real_ip) {
		pc_netaddr_t r;
		who->loopback = who->loopback && pc_netaddr_parse_peer(seen->real_ip, &r) == 0 &&
				pc_netaddr_is_loopback(&r);
	}
	who->forwarded = true;
}

/* Who sent `q`. PC_EINVAL when the peer's address cannot be read. */
static int client_of(const pc_gateway_t *g, const pc_http_request_msg_t *q, const seen_t *seen, pc__gw_client_t *who)
{
	memset(who, 0, sizeof(*who));
	if (pc_netaddr_parse_peer(q->peer, &who->addr) != 0)
		return PC_EINVAL;
	if (seen->forwarding && trusted(g, &who->addr)) {
		forwarded_client(g, q, seen, who);
	} else {
		/* forwarding headers from a peer nobody vouches for are the
		 * client's word: no exemption rests on them */
		who->loopback = pc_netaddr_is_loopback(&who->addr) && !seen->forwarding;
	}
	return 0;
}

/* ---- origins ---- */

bool pc__gw_origin_own(const pc_gateway_t *g, const char *origin)
{
	pc_origin_t o;
	if (!origin || pc_origin_parse(origin, strlen(origin), &o) != 0 || o.https || o.port != g->port)
		return false;
	if (pc_origin_host_is_loopback(&o))
		return true;
	/* bound to one address: pages it serves come from that address */
	pc_netaddr_t bound, named;
	return pc_netaddr_parse(g->host, strlen(g->host), &bound) == 0 && !pc_netaddr_is_any(&bound) &&
	       pc_netaddr_parse(o.host, strlen(o.host), &named) == 0 && pc_netaddr_equal(&bound, &named);
}

static bool origin_allowed(const pc_gateway_t *g, const char *origin)
{
	if (pc__gw_origin_own(g, origin))
		return true;
	pc_origin_t o;
	if (pc_origin_parse(origin, strlen(origin), &o) != 0)
		return false;
	for (size_t i = 0; i < g->norigins; i++)
		if (pc_origin_equal(&g->origins[i], &o))
			return true;
	return false;
}

/* ---- admission ---- */

static int refuse(pc_gateway_t *g, int kind, const char **why, int status, const char *message)
{
	__atomic_add_fetch(&g->refused[kind], 1, __ATOMIC_RELAXED);
	*why = message;
	return status;
}

int pc__gw_admit(pc_gateway_t *g, const pc_http_request_msg_t *q, pc__gw_client_t *who, const char **why)
{
	seen_t seen;
	scan(q, &seen);
	const char *host = seen.host, *origin = seen.origin;
	if (client_of(g, q, &seen, who) != 0)
		return refuse(g, PC__GW_REFUSED_MALFORMED, why, 400, "the client's address cannot be read");
	if (seen.hosts > 1 || seen.origins > 1)
		return refuse(g, PC__GW_REFUSED_MALFORMED, why, 400, "more than one Host or Origin header");
	if (!host)
		return refuse(g, PC__GW_REFUSED_MALFORMED, why, 400, "a Host header is required");
	if (g->gcfg->auth == PC_GATEWAY_AUTH_NONE) {
		if (!who->loopback)
			return refuse(g, PC__GW_REFUSED_REMOTE, why, 403,
				      seen.forwarding
					      ? "this gateway has no auth and serves this machine only: a forwarded "
						"request needs gateway.auth (and gateway.trustedProxies)"
					      : "this gateway has no auth and serves this machine only");
		pc_origin_t h;
		if (pc_origin_parse_host(host, strlen(host), 80, &h) != 0 || !pc_origin_host_is_loopback(&h))
			return refuse(g, PC__GW_REFUSED_HOST, why, 403,
				      "this gateway has no auth: the Host must be localhost, 127.0.0.1 or [::1]");
	}
	if (origin && !origin_allowed(g, origin))
		return refuse(g, PC__GW_REFUSED_ORIGIN, why, 403, "origin not allowed (see gateway.allowedOrigins)");
	return 0;
}

bool pc__gw_json_content(const pc_http_request_msg_t *q)
{
	const char *ct = NULL;
	for (size_t i = 0; i < q->header_count; i++) {
		if (strcasecmp(q->headers[i].name, "content-type"))
			continue;
		if (ct)
			return false; /* two: which one the body is, nobody can say */
		ct = q->headers[i].value;
	}
	if (!ct)
		return false;
	while (*ct == ' ' || *ct == '\t')
		ct++;
	size_t n = strcspn(ct, ";");
	while (n && (ct[n - 1] == ' ' || ct[n - 1] == '\t'))
		n--;
	return n == 16 && !strncasecmp(ct, "application/json", 16);
}
