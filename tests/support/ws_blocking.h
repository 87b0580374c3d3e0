/*
 * A small blocking WebSocket client for the tests and benchmarks that
 * probe the gateway and the server byte by byte: RFC 6455 framing written
 * by hand on a nonblocking socket driven with poll and deadlines, so that
 * no call waits longer than it was told, with what such probes need (a
 * small SO_RCVBUF for slow readers, the socket itself, extra headers).
 * The project's own client is the non-blocking one on the I/O threads
 * (io/ws_client.h); this one is a fixture, not part of any library.
 *
 *   tws_t *ws;
 *   tws_options_t o = {.host = "127.0.0.1", .port = 18789};
 *   tws_connect(&o, &ws, NULL);
 *   tws_send_text(ws, "{\"type\":\"req\",...}", n);
 *   char *msg; size_t len;
 *   tws_recv(ws, 5000, &msg, &len);   (free(msg))
 *   tws_free(ws);
 *
 * Frames it sends are masked; pings are answered while receiving;
 * fragmented messages are joined; a close from the server is answered and
 * reported (its code and reason stay readable). Connect: PC_EINVAL for
 * bad options; PC_ESYS when the address cannot be reached; PC_ETIMEDOUT;
 * PC_ESTATE when the server answers anything but 101 with the right
 * Sec-WebSocket-Accept (its status to *http_status). Receive: PC_ETIMEDOUT;
 * PC_ESTOPPED when the server closed (tws_close_code) or the connection
 * ended; PC_ELIMIT past max_message (closed with 1009); PC_EINVAL for a
 * protocol error (closed with 1002).
 *
 * Threads: a client is used by one thread at a time.
 */
#ifndef PC_TESTS_WS_BLOCKING_H
#define PC_TESTS_WS_BLOCKING_H

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include "runtime/clock.h"
#include "runtime/error.h"

typedef struct tws tws_t;

typedef struct tws_options {
	const char *host;       /* numeric address or a name; NULL: "127.0.0.1" */
	uint16_t port;          /* required */
	const char *path;       /* NULL: "/" */
	const char *origin;     /* the Origin header, or NULL for none */
	const char *headers;    /* extra header lines, each "Name: value\r\n", or NULL */
	int64_t timeout_ms;     /* connect and upgrade; sends wait as long; 0: 10 s */
	size_t max_message;     /* a received message's largest size; 0: 64 MiB */
	int rcvbuf;             /* SO_RCVBUF before connecting (tests of slow readers); 0: the system's */
} tws_options_t;


#define TWS_DEFAULT_TIMEOUT_MS 10000
#define TWS_DEFAULT_MAX_MESSAGE ((size_t)64 << 20)
#define TWS_MAX_HEAD 16384

enum { TWS_OP_CONT = 0, TWS_OP_TEXT = 1, TWS_OP_BINARY = 2, TWS_OP_CLOSE = 8, TWS_OP_PING = 9, TWS_OP_PONG = 10 };

struct tws {
	int fd;
	int64_t timeout_ms;
	size_t max_message;
	unsigned char *rbuf; /* bytes read, not yet parsed */
	size_t rlen, rcap;
	char *msg;           /* the data message being joined */
	size_t mlen, mcap;
	bool in_msg;
	bool close_sent;
	bool closed;         /* the server's close came, or the stream ended */
	uint16_t close_code;
	char close_reason[124];
};

/* Waits for `events` until `deadline` (< 0: none). */
static inline int tws_wait_fd(int fd, short events, int64_t deadline)
{
	for (;;) {
		int64_t left = deadline < 0 ? -1 : deadline - pc__clock_mono_ms();
		if (deadline >= 0 && left <= 0)
			return PC_ETIMEDOUT;
		struct pollfd p = {.fd = fd, .events = events};
		int n = poll(&p, 1, left < 0 ? -1 : left > 60000 ? 60000 : (int)left);
		if (n > 0)
			return 0;
		if (n < 0 && errno != EINTR)
			return PC_ESYS;
	}
}

static inline int tws_write_all(int fd, const void *data, size_t len, int64_t deadline)
{
	const char *p = data;
	while (len > 0) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n > 0) {
			p += n;
			len -= (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			int rc = tws_wait_fd(fd, POLLOUT, deadline);
			if (rc != 0)
				return rc;
			continue;
		}
		return PC_ESYS;
	}
	return 0;
}

/* Reads what is there into rbuf, waiting until `deadline`. 0, or
 * PC_ESTOPPED at the end of the stream. */
static inline int tws_fill(tws_t *c, int64_t deadline)
{
	if (c->rlen == c->rcap) {
		size_t cap = c->rcap ? c->rcap * 2 : 65536;
		unsigned char *b = realloc(c->rbuf, cap);
		if (!b)
			return PC_ENOMEM;
		c->rbuf = b;
		c->rcap = cap;
	}
	for (;;) {
		ssize_t n = recv(c->fd, c->rbuf + c->rlen, c->rcap - c->rlen, MSG_DONTWAIT);
		if (n > 0) {
			c->rlen += (size_t)n;
			return 0;
		}
		if (n == 0)
			return PC_ESTOPPED;
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			return PC_ESTOPPED; /* reset: the stream ended */
		int rc = tws_wait_fd(c->fd, POLLIN, deadline);
		if (rc != 0)
			return rc;
	}
}

static inline void tws_consume(tws_t *c, size_t n)
{
	memmove(c->rbuf, c->rbuf + n, c->rlen - n);
	c->rlen -= n;
}

/* ---- frames out ---- */

static inline int tws_send_frame(tws_t *c, int opcode, const void *data, size_t len)
{
	if (c->fd < 0 || c->close_sent)
		return PC_ESTOPPED;
	unsigned char head[14];
	size_t h = 0;
	head[h++] = (unsigned char)(0x80 | opcode);
	if (len < 126) {
		head[h++] = (unsigned char)(0x80 | len);
	} else if (len <= 0xFFFF) {
		head[h++] = 0x80 | 126;
		head[h++] = (unsigned char)(len >> 8);
		head[h++] = (unsigned char)len;
	} else {
		head[h++] = 0x80 | 127;
		for (int i = 7; i >= 0; i--)
			head[h++] = (unsigned char)((uint64_t)len >> (8 * i));
	}
	unsigned char mask[4];
	if (RAND_bytes(mask, sizeof(mask)) != 1)
		return PC_ESYS;
	memcpy(head + h, mask, 4);
	h += 4;
	unsigned char *f = malloc(h + len);
	if (!f)
		return PC_ENOMEM;
	memcpy(f, head, h);
	const unsigned char *d = data;
	for (size_t i = 0; i < len; i++)
		f[h + i] = d[i] ^ mask[i & 3];
	int rc = tws_write_all(c->fd, f, h + len, pc__clock_mono_ms() + c->timeout_ms);
	free(f);
	if (opcode == TWS_OP_CLOSE && rc == 0)
		c->close_sent = true;
	return rc;
}

static inline int tws_send_text(tws_t *c, const char *data, size_t len)
{
	if (!c || (!data && len))
		return PC_EINVAL;
	return c->closed ? PC_ESTOPPED : tws_send_frame(c, TWS_OP_TEXT, data, len);
}

static inline int tws_send_binary(tws_t *c, const void *data, size_t len)
{
	if (!c || (!data && len))
		return PC_EINVAL;
	return c->closed ? PC_ESTOPPED : tws_send_frame(c, TWS_OP_BINARY, data, len);
}

static inline void tws_send_close(tws_t *c, uint16_t code, const char *reason)
{
	unsigned char p[125];
	size_t rl = reason ? strlen(reason) : 0;
	if (rl > sizeof(p) - 2)
		rl = sizeof(p) - 2;
	p[0] = (unsigned char)(code >> 8);
	p[1] = (unsigned char)code;
	if (rl)
		memcpy(p + 2, reason, rl);
	(void)tws_send_frame(c, TWS_OP_CLOSE, p, 2 + rl);
}

/* ---- frames in ---- */

/* The server broke the protocol: say so and stop. */
static inline int tws_protocol_error(tws_t *c, uint16_t code, int rc)
{
	tws_send_close(c, code, code == 1009 ? "message too big" : "protocol error");
	c->closed = true;
	if (!c->close_code)
		c->close_code = code;
	return rc;
}

static inline int tws_on_control(tws_t *c, int op, const unsigned char *p, size_t len)
{
	if (op == TWS_OP_PING) {
		(void)tws_send_frame(c, TWS_OP_PONG, p, len);
		return 0;
	}
	if (op == TWS_OP_PONG)
		return 0;
	/* TWS_OP_CLOSE: code, reason; answered with the same code. */
	c->close_code = len >= 2 ? (uint16_t)(p[0] << 8 | p[1]) : 1005;
	size_t rl = len > 2 ? len - 2 : 0;
	memcpy(c->close_reason, p + 2, rl);
	c->close_reason[rl] = '\0';
	if (!c->close_sent)
		tws_send_close(c, len >= 2 ? c->close_code : 1000, NULL);
	c->closed = true;
	return PC_ESTOPPED;
}

/* Appends a data frame's payload; 1 when the message is complete. */
static inline int tws_on_data(tws_t *c, int op, bool fin, const unsigned char *p, size_t len)
{
	if ((op == TWS_OP_CONT) != c->in_msg)
		return tws_protocol_error(c, 1002, PC_EINVAL);
	if (op != TWS_OP_CONT)
		c->mlen = 0;
	if (len > c->max_message - c->mlen)
		return tws_protocol_error(c, 1009, PC_ELIMIT);
	if (c->mlen + len + 1 > c->mcap) {
		size_t cap = c->mlen + len + 1 > c->mcap * 2 ? c->mlen + len + 1 : c->mcap * 2;
		char *m = realloc(c->msg, cap);
		if (!m)
			return PC_ENOMEM;
		c->msg = m;
		c->mcap = cap;
	}
	memcpy(c->msg + c->mlen, p, len);
	c->mlen += len;
	c->in_msg = !fin;
	return fin ? 1 : 0;
}

/* Parses one frame from rbuf if it is all there: 1 a message is complete,
 * 0 go on, 2 need more bytes, < 0 an error. */
static inline int tws_parse_frame(tws_t *c)
{
	if (c->rlen < 2)
		return 2;
	const unsigned char *b = c->rbuf;
	bool fin = b[0] & 0x80;
	int op = b[0] & 0x0F;
	bool masked = b[1] & 0x80;
	uint64_t len = b[1] & 0x7F;
	size_t h = 2;
	if (len == 126) {
		if (c->rlen < 4)
			return 2;
		len = (uint64_t)b[2] << 8 | b[3];
		h = 4;
	} else if (len == 127) {
		if (c->rlen < 10)
			return 2;
		len = 0;
		for (int i = 0; i < 8; i++)
			len = len << 8 | b[2 + i];
		h = 10;
	}
	if ((b[0] & 0x70) || masked)
		return tws_protocol_error(c, 1002, PC_EINVAL);
	bool control = op >= 8;
	if ((control && (!fin || len > 125)) || (op > 2 && op < 8) || op > 10)
		return tws_protocol_error(c, 1002, PC_EINVAL);
	if (!control && len > c->max_message)
		return tws_protocol_error(c, 1009, PC_ELIMIT);
	if (c->rlen - h < len)
		return 2;
	int rc = control ? tws_on_control(c, op, b + h, (size_t)len) : tws_on_data(c, op, fin, b + h, (size_t)len);
	tws_consume(c, h + (size_t)len);
	return rc;
}

static inline int tws_recv(tws_t *c, int64_t timeout_ms, char **msg, size_t *len)
{
	if (!c || !msg || !len)
		return PC_EINVAL;
	*msg = NULL;
	*len = 0;
	int64_t deadline = timeout_ms < 0 ? -1 : pc__clock_mono_ms() + timeout_ms;
	for (;;) {
		if (c->closed)
			return PC_ESTOPPED;
		int rc = tws_parse_frame(c);
		if (rc == 1) {
			char *out = malloc(c->mlen + 1);
			if (!out)
				return PC_ENOMEM;
			memcpy(out, c->msg, c->mlen);
			out[c->mlen] = '\0';
			*msg = out;
			*len = c->mlen;
			c->mlen = 0;
			return 0;
		}
		if (rc < 0)
			return rc;
		if (rc == 2) {
			rc = tws_fill(c, deadline);
			if (rc == PC_ESTOPPED) {
				c->closed = true;
				if (!c->close_code)
					c->close_code = 1006;
			}
			if (rc != 0)
				return rc;
		}
	}
}

static inline int tws_close(tws_t *c, uint16_t code, const char *reason, int64_t timeout_ms)
{
	if (!c)
		return PC_EINVAL;
	if (!c->close_sent && !c->closed)
		tws_send_close(c, code, reason);
	int64_t deadline = pc__clock_mono_ms() + (timeout_ms < 0 ? 0 : timeout_ms);
	/* Reads until the server's close (or the end of the stream). */
	while (!c->closed) {
		int rc = tws_parse_frame(c);
		if (rc == 2)
			rc = tws_fill(c, deadline);
		if (rc == PC_ETIMEDOUT)
			return rc;
		if (rc == PC_ESTOPPED || rc < 0) {
			c->closed = true;
			if (!c->close_code)
				c->close_code = 1006;
		}
	}
	return 0;
}

static inline uint16_t tws_close_code(const tws_t *c) { return c ? c->close_code : 0; }

static inline const char *tws_close_reason(const tws_t *c) { return c ? c->close_reason : ""; }

/* The socket (for poll or shutdown in tests); -1 once closed. */
static inline int tws_fd(const tws_t *c) { return c ? c->fd : -1; }

static inline void tws_free(tws_t *c)
{
	if (!c)
		return;
	if (c->fd >= 0)
		(void)close(c->fd);
	free(c->rbuf);
	free(c->msg);
	free(c);
}

/* ---- connecting ---- */

static inline int tws_dial(const tws_options_t *o, int64_t deadline, int *out)
{
	char port[8];
	snprintf(port, sizeof(port), "%u", o->port);
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
	if (getaddrinfo(o->host ? o->host : "127.0.0.1", port, &hints, &res) != 0)
		return PC_ESYS;
	int rc = PC_ESYS;
	for (struct addrinfo *ai = res; ai && rc != 0; ai = ai->ai_next) {
		int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (fd < 0)
			continue;
		int one = 1;
		(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		if (o->rcvbuf > 0)
			(void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &o->rcvbuf, sizeof(o->rcvbuf));
		rc = connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 ? 0 : errno == EINPROGRESS ? 1 : PC_ESYS;
		if (rc == 1) {
			int err = 0;
			socklen_t el = sizeof(err);
			rc = tws_wait_fd(fd, POLLOUT, deadline);
			if (rc == 0 && (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0 || err != 0))
				rc = PC_ESYS;
		}
		if (rc == 0)
			*out = fd;
		else
			(void)close(fd);
	}
	freeaddrinfo(res);
	return rc;
}

static inline int tws_b64(const unsigned char *in, int n, char *out)
{
	return EVP_EncodeBlock((unsigned char *)out, in, n);
}

/* The head of the server's answer, NUL-terminated in rbuf; the bytes
 * after it stay for the frames. */
static inline int tws_read_head(tws_t *c, int64_t deadline, size_t *head_len)
{
	for (;;) {
		for (size_t i = 3; i < c->rlen; i++) {
			if (!memcmp(c->rbuf + i - 3, "\r\n\r\n", 4)) {
				*head_len = i + 1;
				return 0;
			}
		}
		if (c->rlen >= TWS_MAX_HEAD)
			return PC_ESTATE;
		int rc = tws_fill(c, deadline);
		if (rc != 0)
			return rc == PC_ESTOPPED ? PC_ESTATE : rc;
	}
}

/* A header's value in `head` (name matched case-insensitively). */
static inline bool tws_header_value(const char *head, const char *name, char *out, size_t cap)
{
	size_t nl = strlen(name);
	for (const char *l = strstr(head, "\r\n"); l; l = strstr(l + 2, "\r\n")) {
		const char *h = l + 2;
		if (!strncasecmp(h, name, nl) && h[nl] == ':') {
			h += nl + 1;
			while (*h == ' ' || *h == '\t')
				h++;
			size_t n = strcspn(h, "\r\n");
			while (n > 0 && (h[n - 1] == ' ' || h[n - 1] == '\t'))
				n--;
			if (n >= cap)
				return false;
			memcpy(out, h, n);
			out[n] = '\0';
			return true;
		}
	}
	return false;
}

static inline int tws_upgrade(tws_t *c, const tws_options_t *o, int64_t deadline, int *status)
{
	unsigned char nonce[16];
	char key[32], want[40], got[64];
	if (RAND_bytes(nonce, sizeof(nonce)) != 1)
		return PC_ESYS;
	tws_b64(nonce, sizeof(nonce), key);
	size_t cap = 512 + strlen(o->path ? o->path : "/") + strlen(o->host ? o->host : "") +
		     (o->origin ? strlen(o->origin) : 0) + (o->headers ? strlen(o->headers) : 0);
	char *req = malloc(cap);
	if (!req)
		return PC_ENOMEM;
	int n = snprintf(req, cap,
			 "GET %s HTTP/1.1\r\nHost: %s:%u\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
			 "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n%s%s%s%s\r\n",
			 o->path ? o->path : "/", o->host ? o->host : "127.0.0.1", o->port, key,
			 o->origin ? "Origin: " : "", o->origin ? o->origin : "", o->origin ? "\r\n" : "",
			 o->headers ? o->headers : "");
	int rc = n > 0 && (size_t)n < cap ? tws_write_all(c->fd, req, (size_t)n, deadline) : PC_EINVAL;
	free(req);
	size_t head_len = 0;
	if (rc == 0)
		rc = tws_read_head(c, deadline, &head_len);
	if (rc != 0)
		return rc;
	char *head = strndup((const char *)c->rbuf, head_len);
	if (!head)
		return PC_ENOMEM;
	tws_consume(c, head_len);
	int code = 0;
	if (sscanf(head, "HTTP/1.%*d %d", &code) != 1)
		code = 0;
	if (status)
		*status = code;
	/* Sec-WebSocket-Accept: base64(SHA-1(key + the RFC's GUID)). */
	unsigned char md[SHA_DIGEST_LENGTH];
	char in[sizeof(key) + 40];
	snprintf(in, sizeof(in), "%s258EAFA5-E914-47DA-95CA-C5AB0DC85B11", key);
	SHA1((const unsigned char *)in, strlen(in), md);
	tws_b64(md, sizeof(md), want);
	rc = code == 101 && tws_header_value(head, "sec-websocket-accept", got, sizeof(got)) && !strcmp(got, want)
		     ? 0
		     : PC_ESTATE;
	free(head);
	return rc;
}

static inline int tws_connect(const tws_options_t *o, tws_t **out, int *http_status)
{
	if (!o || !o->port || !out)
		return PC_EINVAL;
	if (http_status)
		*http_status = 0;
	tws_t *c = calloc(1, sizeof(*c));
	if (!c)
		return PC_ENOMEM;
	c->fd = -1;
	c->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : TWS_DEFAULT_TIMEOUT_MS;
	c->max_message = o->max_message ? o->max_message : TWS_DEFAULT_MAX_MESSAGE;
	int64_t deadline = pc__clock_mono_ms() + c->timeout_ms;
	int rc = tws_dial(o, deadline, &c->fd);
	if (rc == 0)
		rc = tws_upgrade(c, o, deadline, http_status);
	if (rc != 0) {
		tws_free(c);
		return rc;
	}
	*out = c;
	return 0;
}

#endif
