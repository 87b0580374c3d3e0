/*
 * HTTP client transfers on the I/O loops: libcurl's multi interface driven
 * by the loop's epoll (CURLMOPT_SOCKETFUNCTION / TIMERFUNCTION and
 * curl_multi_socket_action, the shape of curl's ephiperfifo example).
 *
 * A call is shared by two owners: the caller (its handle) and the loop
 * (while the transfer runs). Each holds one reference; a command in flight
 * holds its own. The easy handle is prepared on the caller's thread and
 * touched only by the loop once the add command is posted.
 *
 * h2c requests (HTTP/2 in cleartext) have a multi handle of their own,
 * whose connection limits work around a libcurl bug (see h2c_policy).
 * Everything else goes to the plain multis: one, or, when the per-host
 * cap allows thousands of connections, shards of PLAIN_SHARD_CONNS each
 * (see pick_multi).
 *
 * Backpressure is a Dekker handshake on two words: the loop publishes
 * `pause` and then re-reads `outstanding`; the consumer lowers
 * `outstanding` and then reads `pause`. With both sides sequentially
 * consistent, either the loop sees the drain and carries on, or the
 * consumer sees the pause and posts exactly one resume.
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <curl/curl.h>

#include "http_client.h"
#include "loop_internal.h"
#include "io/buf.h"

#define HEADER_CAP (64u * 1024u)
#define DEFAULT_MAX_BUFFERED ((size_t)1 << 20)
#define DEFAULT_CONNECT_TIMEOUT_MS 10000u

enum { PAUSE_NONE = 0, PAUSE_ON = 1, PAUSE_RESUMING = 2 };

struct pc_http_call {
	uint32_t refs;
	uint32_t cancel_posted; /* 0/1: one cancel command at most */
	uint32_t done;          /* the loop has sent END */
	uint32_t pause;         /* PAUSE_* */
	uint64_t outstanding;   /* delivered, not yet consumed */
	uint64_t max_buffered;

	pc_ioloop_t *loop;
	pc_actor_t *owner;
	uint64_t tag;
	CURL *easy;
	struct curl_slist *headers;
	char *body;
	size_t body_len;
	char *url;
	char *method;  /* NULL: POST with a body, else GET */
	uint32_t connect_ms, total_ms;
	bool h2c;      /* HTTP/2 with prior knowledge */
	pc_msg_t *end; /* allocated up front: END must never fail to go out */

	/* Loop thread only from here. */
	struct multi *multi; /* the transfer's, from the add on */
	struct pc_http_call *prev, *next; /* the loop's live list */
	pc_io_timer_t idle_timer;
	uint64_t idle_ns;
	uint64_t last_rx_ns;
	uint64_t bytes;
	bool head_sent;
	bool added; /* in the multi and on the live list */
	char *head;
	size_t head_len;
	size_t head_cap;
	char errbuf[CURL_ERROR_SIZE];
};

/* Easy handles kept for reuse (the connection cache lives in the multi
 * either way). They are not curl_easy_reset: a reset costs as much as a
 * new handle, and setup_easy sets every option we use on every call. */
#define SPARE_EASY_MAX 256

/* libcurl 7.x walks every connection a multi holds on every transfer:
 * the search for one to reuse at the start, and curl_multi_remove_handle's
 * sweep for connect-only ones at the end. With 10,000 HTTP/1.1
 * connections to one host those walks took a third of the process's CPU.
 * So a per-host cap above this is split across shards, separate multis
 * of at most this many connections per host, each walking only its own. */
#define PLAIN_SHARD_CONNS 256u
/* Past this many shards (a cap of 262,144 connections per host and I/O
 * thread, more than the thread can have descriptors) they grow instead. */
#define PLAIN_SHARDS_MAX 1024u

/* A libcurl multi handle driven by the loop's epoll. */
typedef struct multi {
	struct pc__http_client_loop *client;
	CURLM *handle; /* NULL: a shard not needed yet */
	pc_io_timer_t timer;
	uint32_t live; /* transfers added and not yet finished */
	/* Its share of the loop's caps (pc_io_config_t): connections per
	 * host, in all (0: none), kept idle. */
	uint32_t host_cap, total_cap, idle_cap;
} multi_t;

struct pc__http_client_loop {
	pc_ioloop_t *loop;
	const pc_io_config_t *cfg;
	multi_t *plain; /* HTTP/1.1, and https:// (h2 by ALPN) */
	uint32_t nplain;
	multi_t h2c; /* HTTP/2 in cleartext */
	pc_http_call_t *live;
	struct curl_sock **socks; /* by descriptor: every socket curl has open */
	size_t nsocks;
	CURL *spare[SPARE_EASY_MAX];
	uint32_t nspare;
	long h2c_version; /* CURLOPT_HTTP_VERSION for an h2c request */
};

/* A socket curl asked us to watch, from then until curl closes it (our
 * CLOSESOCKETFUNCTION). When curl stops watching a connection it keeps
 * for reuse (CURL_POLL_REMOVE) the socket is only parked: its epoll
 * registration stays, so the next request on that connection costs no
 * epoll_ctl, where removing and adding would cost two per request. An
 * event on a parked socket (the peer closed it, say) removes it from
 * epoll then, once. Freed through the loop's defer list. */
typedef struct curl_sock {
	pc_io_watch_t watch;
	multi_t *multi;
	bool parked;
} curl_sock_t;

const char *pc_http_transport_name(pc_http_transport_t t)
{
	static const char *const names[] = {
		[PC_HTTP_OK] = "ok",
		[PC_HTTP_DNS] = "dns",
		[PC_HTTP_CONNECT] = "connect",
		[PC_HTTP_CONNECT_TIMEOUT] = "connect_timeout",
		[PC_HTTP_TIMEOUT] = "timeout",
		[PC_HTTP_IDLE] = "idle_timeout",
		[PC_HTTP_TLS] = "tls",
		[PC_HTTP_CLOSED] = "closed",
		[PC_HTTP_MALFORMED] = "malformed",
		[PC_HTTP_CANCELLED] = "cancelled",
		[PC_HTTP_OTHER] = "other",
	};
	if ((unsigned)t < sizeof(names) / sizeof(names[0]) && names[t])
		return names[t];
	return "unknown";
}

long pc_http_head_get(const pc_http_head_msg_t *head, const char *name, char *buf, size_t cap)
{
	size_t nlen = strlen(name);
	const char *p = head->headers;
	const char *end = head->headers + head->headers_len;
	while (p < end) {
		const char *eol = memchr(p, '\n', (size_t)(end - p));
		if (!eol)
			eol = end;
		if ((size_t)(eol - p) > nlen && p[nlen] == ':' && strncasecmp(p, name, nlen) == 0) {
			const char *v = p + nlen + 1;
			while (v < eol && (*v == ' ' || *v == '\t'))
				v++;
			const char *ve = eol;
			while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
				ve--;
			size_t len = (size_t)(ve - v);
			if (cap) {
				size_t n = len < cap - 1 ? len : cap - 1;
				memcpy(buf, v, n);
				buf[n] = '\0';
			}
			return (long)len;
		}
		p = eol + 1;
	}
	return -1;
}

/* ---- call lifetime ------------------------------------------------------ */

static void call_free(pc_http_call_t *call)
{
	if (call->easy)
		curl_easy_cleanup(call->easy);
	curl_slist_free_all(call->headers);
	pc_actor_release(call->owner);
	pc_msg_free(call->end);
	free(call->url);
	free(call->method);
	free(call->body);
	free(call->head);
	free(call);
}

static void call_unref(pc_http_call_t *call)
{
	if (__atomic_sub_fetch(&call->refs, 1, __ATOMIC_ACQ_REL) == 0)
		call_free(call);
}

static void call_ref(pc_http_call_t *call) { __atomic_add_fetch(&call->refs, 1, __ATOMIC_RELAXED); }

/* ---- messages to the owner ----------------------------------------------- */

static void send_head(pc_http_call_t *call)
{
	long status = 0;
	curl_easy_getinfo(call->easy, CURLINFO_RESPONSE_CODE, &status);
	pc_msg_t *m = pc_msg_new(PC_MSG_HTTP_RESPONSE_HEAD, sizeof(pc_http_head_msg_t) + call->head_len + 1);
	call->head_sent = true;
	if (!m)
		return; /* the END that follows still reports the status */
	pc_http_head_msg_t *h = pc_msg_data(m);
	h->tag = call->tag;
	h->status = (int32_t)status;
	h->headers_len = (uint32_t)call->head_len;
	if (call->head_len)
		memcpy(h->headers, call->head, call->head_len);
	h->headers[call->head_len] = '\0';
	pc_send(call->owner, m);
}

static pc_http_transport_t transport_of(pc_http_call_t *call, CURLcode code)
{
	switch (code) {
	case CURLE_OK:
		return PC_HTTP_OK;
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_COULDNT_RESOLVE_PROXY:
		return PC_HTTP_DNS;
	case CURLE_COULDNT_CONNECT:
		return PC_HTTP_CONNECT;
	case CURLE_OPERATION_TIMEDOUT: {
		curl_off_t connect_us = 0;
		if (call->easy)
			curl_easy_getinfo(call->easy, CURLINFO_CONNECT_TIME_T, &connect_us);
		return connect_us == 0 ? PC_HTTP_CONNECT_TIMEOUT : PC_HTTP_TIMEOUT;
	}
	case CURLE_SSL_CONNECT_ERROR:
	case CURLE_PEER_FAILED_VERIFICATION:
	case CURLE_SSL_CERTPROBLEM:
	case CURLE_SSL_CIPHER:
	case CURLE_SSL_CACERT_BADFILE:
		return PC_HTTP_TLS;
	case CURLE_RECV_ERROR:
	case CURLE_SEND_ERROR:
	case CURLE_GOT_NOTHING:
	case CURLE_PARTIAL_FILE:
	case CURLE_HTTP2:        /* the connection failed under HTTP/2 (GOAWAY, say) */
	case CURLE_HTTP2_STREAM: /* the server reset the stream */
		return PC_HTTP_CLOSED;
	case CURLE_WEIRD_SERVER_REPLY:
	case CURLE_WRITE_ERROR: /* our header cap refused the response */
	case CURLE_BAD_CONTENT_ENCODING:
	case CURLE_UNSUPPORTED_PROTOCOL:
		return PC_HTTP_MALFORMED;
	default:
		return PC_HTTP_OTHER;
	}
}

static int result_of(pc_http_transport_t t)
{
	switch (t) {
	case PC_HTTP_OK:
		return 0;
	case PC_HTTP_CONNECT_TIMEOUT:
	case PC_HTTP_TIMEOUT:
	case PC_HTTP_IDLE:
		return PC_ETIMEDOUT;
	case PC_HTTP_CANCELLED:
		return PC_ESTOPPED;
	case PC_HTTP_MALFORMED:
		return PC_EINVAL;
	default:
		return PC_ESYS;
	}
}

/* Ends the transfer on the loop: END to the owner (exactly once), the easy
 * handle out of the multi, the loop's reference dropped. */
static void call_finish(pc_http_call_t *call, pc_http_transport_t t, CURLcode code, const char *why)
{
	pc_ioloop_t *loop = call->loop;
	struct pc__http_client_loop *c = pc__ioloop_client(loop);
	if (c && call->added) {
		curl_multi_remove_handle(call->multi->handle, call->easy);
		call->multi->live--;
		if (call->prev)
			call->prev->next = call->next;
		else
			c->live = call->next;
		if (call->next)
			call->next->prev = call->prev;
	}
	pc__ioloop_timer_cancel(loop, &call->idle_timer);

	long status = 0;
	if (call->easy)
		curl_easy_getinfo(call->easy, CURLINFO_RESPONSE_CODE, &status);
	pc_msg_t *m = call->end;
	call->end = NULL;
	pc_http_end_msg_t *e = pc_msg_data(m);
	memset(e, 0, sizeof(*e));
	e->tag = call->tag;
	e->status = (int32_t)status;
	e->transport = t;
	e->result = result_of(t);
	e->curl_code = (int32_t)code;
	e->bytes = call->bytes;
	const char *text = why ? why : (call->errbuf[0] ? call->errbuf : (code ? curl_easy_strerror(code) : ""));
	size_t tlen = strnlen(text, sizeof(e->error) - 1);
	memcpy(e->error, text, tlen); /* truncation of a long curl message is fine */
	e->error[tlen] = '\0';
	pc_send(call->owner, m);
	if (c && call->easy && c->nspare < SPARE_EASY_MAX) {
		c->spare[c->nspare++] = call->easy;
		call->easy = NULL;
	}
	__atomic_store_n(&call->done, 1, __ATOMIC_RELEASE);
	PC__IO_STAT_SUB(loop, transfers_live, 1);
	if (__atomic_load_n(&call->pause, __ATOMIC_RELAXED) != PAUSE_NONE)
		PC__IO_STAT_SUB(loop, transfers_paused, 1);
	call_unref(call);
}

/* ---- curl callbacks (loop thread) ------------------------------------------- */

static size_t on_header(char *data, size_t size, size_t n, void *arg)
{
	pc_http_call_t *call = arg;
	size_t len = size * n;
	if (len >= 5 && memcmp(data, "HTTP/", 5) == 0) {
		call->head_len = 0; /* a new response (after 1xx or a redirect) */
		return len;
	}
	if (len <= 2 && (len == 0 || data[0] == '\r' || data[0] == '\n')) {
		long status = 0;
		curl_easy_getinfo(call->easy, CURLINFO_RESPONSE_CODE, &status);
		if (status >= 200 && !call->head_sent)
			send_head(call);
		return len;
	}
	size_t keep = len;
	while (keep && (data[keep - 1] == '\r' || data[keep - 1] == '\n'))
		keep--;
	size_t need = call->head_len + keep + 1;
	if (need > HEADER_CAP)
		return 0; /* refuses the response: CURLE_WRITE_ERROR, "malformed" */
	if (PC__GROW(call->head, call->head_cap, need, 512))
		return 0;
	memcpy(call->head + call->head_len, data, keep);
	call->head_len += keep;
	call->head[call->head_len++] = '\n';
	return len;
}

static size_t on_body(char *data, size_t size, size_t n, void *arg)
{
	pc_http_call_t *call = arg;
	size_t len = size * n;
	pc_ioloop_t *loop = call->loop;
	if (!call->head_sent)
		send_head(call);
	uint64_t out = __atomic_load_n(&call->outstanding, __ATOMIC_SEQ_CST);
	if (out >= call->max_buffered) {
		__atomic_store_n(&call->pause, PAUSE_ON, __ATOMIC_SEQ_CST);
		out = __atomic_load_n(&call->outstanding, __ATOMIC_SEQ_CST);
		uint32_t on = PAUSE_ON;
		if (out > call->max_buffered / 2 ||
		    !__atomic_compare_exchange_n(&call->pause, &on, PAUSE_NONE, false, __ATOMIC_SEQ_CST,
						 __ATOMIC_SEQ_CST)) {
			PC__IO_STAT_ADD(loop, transfers_paused, 1);
			return CURL_WRITEFUNC_PAUSE;
		}
	}
	pc_msg_t *m = pc_msg_new(PC_MSG_HTTP_RESPONSE_DATA, sizeof(pc_http_data_msg_t) + len);
	if (!m)
		return 0; /* CURLE_WRITE_ERROR ends the transfer */
	pc_http_data_msg_t *d = pc_msg_data(m);
	d->tag = call->tag;
	d->len = (uint32_t)len;
	memcpy(d->data, data, len);
	__atomic_add_fetch(&call->outstanding, len, __ATOMIC_SEQ_CST);
	call->bytes += len;
	call->last_rx_ns = pc__ioloop_now_ns(loop);
	pc_send(call->owner, m);
	return len;
}

static void check_done(multi_t *m)
{
	CURLMsg *msg;
	int left;
	while ((msg = curl_multi_info_read(m->handle, &left)) != NULL) {
		if (msg->msg != CURLMSG_DONE)
			continue;
		pc_http_call_t *call = NULL;
		curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&call);
		CURLcode code = msg->data.result;
		if (code == CURLE_OK && !call->head_sent)
			send_head(call);
		call_finish(call, transport_of(call, code), code, NULL);
	}
}

static void on_socket_event(pc_ioloop_t *loop, void *arg, uint32_t events)
{
	curl_sock_t *s = arg;
	if (s->parked) {
		/* curl is not watching it: level-triggered, this would repeat. */
		pc__ioloop_unwatch(loop, &s->watch);
		return;
	}
	int flags = 0;
	if (events & (EPOLLIN | EPOLLHUP | EPOLLRDHUP))
		flags |= CURL_CSELECT_IN;
	if (events & EPOLLOUT)
		flags |= CURL_CSELECT_OUT;
	if (events & EPOLLERR)
		flags |= CURL_CSELECT_ERR;
	int running;
	curl_multi_socket_action(s->multi->handle, s->watch.fd, flags, &running);
	check_done(s->multi);
}

static curl_sock_t *sock_of(struct pc__http_client_loop *c, curl_socket_t fd)
{
	return fd >= 0 && (size_t)fd < c->nsocks ? c->socks[fd] : NULL;
}

static int sock_track(struct pc__http_client_loop *c, curl_socket_t fd, curl_sock_t *s)
{
	if ((size_t)fd >= c->nsocks) {
		size_t was = c->nsocks;
		if (PC__GROW(c->socks, c->nsocks, (size_t)fd + 1, 64))
			return PC_ENOMEM;
		memset(c->socks + was, 0, (c->nsocks - was) * sizeof(*c->socks));
	}
	c->socks[fd] = s;
	return 0;
}

static int on_curl_socket(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp)
{
	(void)easy;
	multi_t *m = userp;
	struct pc__http_client_loop *c = m->client;
	curl_sock_t *s = socketp ? socketp : sock_of(c, fd);
	if (what == CURL_POLL_REMOVE) {
		if (s)
			s->parked = true;
		return 0;
	}
	uint32_t ev = ((what & CURL_POLL_IN) ? EPOLLIN : 0) | ((what & CURL_POLL_OUT) ? EPOLLOUT : 0);
	if (!s) {
		s = calloc(1, sizeof(*s));
		if (!s || sock_track(c, fd, s) != 0) {
			free(s);
			return -1; /* curl fails the transfer */
		}
	}
	s->multi = m;
	s->parked = false;
	int rc;
	if (s->watch.active)
		rc = pc__ioloop_rewatch(c->loop, &s->watch, ev);
	else
		rc = pc__ioloop_watch(c->loop, &s->watch, fd, ev, on_socket_event, s);
	if (rc != 0)
		return -1;
	curl_multi_assign(m->handle, fd, s);
	return 0;
}

/* CURLOPT_CLOSESOCKETFUNCTION: curl closes a connection's socket. It
 * leaves epoll first, so that an event still queued in this batch finds
 * the watch inactive, and a new socket given the same number (by curl or
 * by the server on this loop) starts clean. */
static int on_close_socket(void *clientp, curl_socket_t fd)
{
	struct pc__http_client_loop *c = clientp;
	curl_sock_t *s = sock_of(c, fd);
	if (s) {
		pc__ioloop_unwatch(c->loop, &s->watch);
		c->socks[fd] = NULL;
		if (pc__ioloop_defer(c->loop, free, s) != 0)
			free(s); /* inactive: no event of this batch reaches it */
	}
	return close(fd);
}

static void on_timeout(pc_ioloop_t *loop, void *arg)
{
	(void)loop;
	multi_t *m = arg;
	int running;
	curl_multi_socket_action(m->handle, CURL_SOCKET_TIMEOUT, 0, &running);
	check_done(m);
}

static int on_curl_timer(CURLM *multi, long timeout_ms, void *userp)
{
	(void)multi;
	multi_t *m = userp;
	pc_ioloop_t *loop = m->client->loop;
	if (timeout_ms < 0)
		pc__ioloop_timer_cancel(loop, &m->timer);
	else
		pc__ioloop_timer_arm(loop, &m->timer, (uint64_t)timeout_ms, on_timeout, m);
	return 0;
}

/* Idle watchdog: re-armed lazily from the last byte's time, and silent
 * while the consumer holds the transfer paused (a slow reader is not an
 * idle provider). */
static void on_idle(pc_ioloop_t *loop, void *arg)
{
	pc_http_call_t *call = arg;
	uint64_t now = pc__ioloop_now_ns(loop);
	uint64_t due = call->last_rx_ns + call->idle_ns;
	bool paused = __atomic_load_n(&call->pause, __ATOMIC_RELAXED) != PAUSE_NONE;
	if (paused || now < due) {
		uint64_t wait_ns = paused ? call->idle_ns : due - now;
		pc__ioloop_timer_arm(loop, &call->idle_timer, (wait_ns + 999999u) / 1000000u, on_idle, call);
		return;
	}
	call_finish(call, PC_HTTP_IDLE, CURLE_OK, "no data within the idle timeout");
}

/* Loop thread: fills a fresh or reset easy handle from the call. */
static int setup_easy(pc_http_call_t *call)
{
	CURL *e = call->easy;
	CURLcode rc = CURLE_OK;
#define SET(opt, val)                                                                              \
	do {                                                                                       \
		if (rc == CURLE_OK)                                                                \
			rc = curl_easy_setopt(e, opt, val);                                        \
	} while (0)
	SET(CURLOPT_URL, call->url);
	SET(CURLOPT_PRIVATE, (void *)call);
	SET(CURLOPT_NOSIGNAL, 1L);
	SET(CURLOPT_TCP_KEEPALIVE, 1L);
	SET(CURLOPT_CONNECTTIMEOUT_MS, (long)call->connect_ms);
	SET(CURLOPT_TIMEOUT_MS, (long)call->total_ms);
	SET(CURLOPT_HEADERFUNCTION, on_header);
	SET(CURLOPT_HEADERDATA, (void *)call);
	SET(CURLOPT_WRITEFUNCTION, on_body);
	SET(CURLOPT_WRITEDATA, (void *)call);
	SET(CURLOPT_ERRORBUFFER, call->errbuf);
	SET(CURLOPT_CLOSESOCKETFUNCTION, on_close_socket);
	SET(CURLOPT_CLOSESOCKETDATA, (void *)pc__ioloop_client(call->loop));
	SET(CURLOPT_HTTPHEADER, call->headers);
	/* A reused handle keeps the previous call's options: each of these is
	 * set (or cleared) every time. */
	if (call->body) {
		SET(CURLOPT_POSTFIELDS, call->body);
		SET(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)call->body_len);
	} else {
		SET(CURLOPT_HTTPGET, 1L);
	}
	const char *method = call->method ? call->method : (call->body ? "POST" : "GET");
	/* HEAD through NOBODY, so that curl expects no body after the head;
	 * after the lines above, which would undo it. */
	bool head = strcmp(method, "HEAD") == 0;
	SET(CURLOPT_NOBODY, head ? 1L : 0L);
	bool plain = head || strcmp(method, call->body ? "POST" : "GET") == 0;
	SET(CURLOPT_CUSTOMREQUEST, plain ? NULL : method);
	/* https:// keeps libcurl's default, h2 by ALPN; plain http:// is
	 * HTTP/1.1 (not even onto a connection an h2c request opened) unless
	 * h2c was asked for. PIPEWAIT makes a new h2c transfer wait for a
	 * connection still opening, to share it, rather than open another. */
	long version = (long)CURL_HTTP_VERSION_1_1;
	if (call->h2c)
		version = pc__ioloop_client(call->loop)->h2c_version;
	else if (strncasecmp(call->url, "https://", 8) == 0)
		version = (long)CURL_HTTP_VERSION_2TLS;
	SET(CURLOPT_HTTP_VERSION, version);
	SET(CURLOPT_PIPEWAIT, call->h2c ? 1L : 0L);
#undef SET
	return rc == CURLE_OK ? 0 : PC_EINVAL;
}

/* Only plain HTTP(S): the scheme is checked here, so no other protocol
 * curl may know is ever reachable from a configured URL. */
static bool http_url(const char *url)
{
	return strncasecmp(url, "http://", 7) == 0 || strncasecmp(url, "https://", 8) == 0;
}

static char *dup_str(const char *s)
{
	return s ? strdup(s) : NULL;
}

/* ---- commands ------------------------------------------------------------------ */

static int multi_init(multi_t *m);

/* The first plain shard below its per-host cap, so that transfers come
 * back to the shards (and the idle connections) already in use; when
 * every one is at its cap, the one with the fewest transfers, where curl
 * opens a connection if the host has room there or queues the transfer
 * if not. A shard is made when first chosen. NULL: it could not be. */
static multi_t *pick_multi(struct pc__http_client_loop *c, const pc_http_call_t *call)
{
	if (call->h2c)
		return &c->h2c;
	multi_t *m = NULL;
	for (uint32_t i = 0; i < c->nplain; i++) {
		multi_t *s = &c->plain[i];
		if (s->live < s->host_cap) {
			m = s;
			break;
		}
		if (!m || s->live < m->live)
			m = s;
	}
	if (!m->handle && multi_init(m) != 0)
		return NULL;
	return m;
}

typedef struct call_cmd {
	pc_http_call_t *call; /* carries a reference */
} call_cmd_t;

static void add_cmd(pc_ioloop_t *loop, pc_msg_t *msg)
{
	pc_http_call_t *call = ((call_cmd_t *)((pc_io_cmd_t *)pc_msg_data(msg) + 1))->call;
	struct pc__http_client_loop *c = pc__ioloop_client(loop);
	PC__IO_STAT_ADD(loop, transfers_started, 1);
	PC__IO_STAT_ADD(loop, transfers_live, 1);
	if (!c || pc__ioloop_stopping(loop)) {
		call_finish(call, PC_HTTP_CANCELLED, CURLE_OK, "the I/O layer is stopping");
		return;
	}
	if (__atomic_load_n(&call->cancel_posted, __ATOMIC_ACQUIRE)) {
		call_finish(call, PC_HTTP_CANCELLED, CURLE_OK, "cancelled");
		return;
	}
	call->last_rx_ns = pc__ioloop_now_ns(loop);
	multi_t *multi = pick_multi(c, call);
	if (!multi) {
		call_finish(call, PC_HTTP_OTHER, CURLE_OUT_OF_MEMORY, "out of memory");
		return;
	}
	call->easy = c->nspare ? c->spare[--c->nspare] : curl_easy_init();
	if (!call->easy) {
		call_finish(call, PC_HTTP_OTHER, CURLE_OUT_OF_MEMORY, "out of memory");
		return;
	}
	if (setup_easy(call) != 0) {
		call_finish(call, PC_HTTP_OTHER, CURLE_OK, "could not configure the request");
		return;
	}
	CURLMcode mc = curl_multi_add_handle(multi->handle, call->easy);
	if (mc != CURLM_OK) {
		call_finish(call, PC_HTTP_OTHER, CURLE_OK, curl_multi_strerror(mc));
		return;
	}
	call->multi = multi;
	multi->live++;
	call->added = true;
	call->next = c->live;
	if (c->live)
		c->live->prev = call;
	c->live = call;
	if (call->idle_ns)
		pc__ioloop_timer_arm(loop, &call->idle_timer, call->idle_ns / 1000000u, on_idle, call);
}

/* The add command always runs first: the caller can only cancel a handle
 * pc_http_fetch returned, after the add was queued. */
static void cancel_cmd(pc_ioloop_t *loop, pc_msg_t *msg)
{
	(void)loop;
	pc_http_call_t *call = ((call_cmd_t *)((pc_io_cmd_t *)pc_msg_data(msg) + 1))->call;
	if (!__atomic_load_n(&call->done, __ATOMIC_ACQUIRE))
		call_finish(call, PC_HTTP_CANCELLED, CURLE_OK, "cancelled");
	call_unref(call);
}

static void resume_cmd(pc_ioloop_t *loop, pc_msg_t *msg)
{
	pc_http_call_t *call = ((call_cmd_t *)((pc_io_cmd_t *)pc_msg_data(msg) + 1))->call;
	if (!__atomic_load_n(&call->done, __ATOMIC_ACQUIRE)) {
		PC__IO_STAT_SUB(loop, transfers_paused, 1);
		__atomic_store_n(&call->pause, PAUSE_NONE, __ATOMIC_SEQ_CST);
		/* May deliver buffered data (and so pause again) synchronously. */
		curl_easy_pause(call->easy, CURLPAUSE_CONT);
		if (call->multi)
			check_done(call->multi);
	}
	call_unref(call);
}

static int post_call_cmd(pc_http_call_t *call, pc_io_cmd_fn fn)
{
	call_cmd_t *p;
	pc_msg_t *m = pc__io_cmd_new(fn, sizeof(*p), (void **)&p);
	if (!m)
		return PC_ENOMEM;
	call_ref(call);
	p->call = call;
	int rc = pc__ioloop_post(call->loop, m);
	if (rc != 0)
		call_unref(call);
	return rc;
}

/* ---- the public API ----------------------------------------------------------- */

int pc_http_fetch(pc_io_t *io, const pc_http_client_request_t *req, pc_actor_t *owner,
		  pc_http_call_t **out)
{
	char *taken = req && req->take_body ? (char *)req->body : NULL;
	if (!io || !req || !req->url || !owner || !out || (req->header_count && !req->headers) ||
	    !http_url(req->url)) {
		free(taken);
		return PC_EINVAL;
	}
	int rc = PC_ENOMEM;
	pc_http_call_t *call = calloc(1, sizeof(*call));
	if (!call) {
		free(taken);
		return PC_ENOMEM;
	}
	call->body = taken; /* from here call_free releases it */
	call->refs = 2; /* the caller's handle and the loop's transfer */
	call->loop = pc__io_next_loop(io);
	call->owner = pc_actor_retain(owner);
	call->tag = req->tag;
	call->max_buffered = req->max_buffered ? req->max_buffered : DEFAULT_MAX_BUFFERED;
	call->idle_ns = (uint64_t)req->idle_timeout_ms * 1000000u;
	call->connect_ms = req->connect_timeout_ms ? req->connect_timeout_ms : DEFAULT_CONNECT_TIMEOUT_MS;
	call->total_ms = req->total_timeout_ms;
	call->h2c = req->http2_prior_knowledge;
	call->end = pc_msg_new(PC_MSG_HTTP_RESPONSE_END, sizeof(pc_http_end_msg_t));
	call->url = dup_str(req->url);
	call->method = dup_str(req->method);
	if (!call->end || !call->url || (req->method && !call->method))
		goto fail;
	call->body_len = req->body_len;
	if (req->body && !taken) {
		call->body = malloc(req->body_len ? req->body_len : 1);
		if (!call->body)
			goto fail;
		memcpy(call->body, req->body, req->body_len);
	}
	/* "Expect:" turns off 100-continue, which would cost a round trip on
	 * every large prompt. */
	struct curl_slist *h = curl_slist_append(NULL, "Expect:");
	if (!h)
		goto fail;
	call->headers = h;
	for (size_t i = 0; i < req->header_count; i++) {
		h = curl_slist_append(call->headers, req->headers[i]);
		if (!h)
			goto fail;
		call->headers = h;
	}
	call_cmd_t *p;
	pc_msg_t *m = pc__io_cmd_new(add_cmd, sizeof(*p), (void **)&p);
	rc = PC_ENOMEM;
	if (!m)
		goto fail;
	p->call = call;
	/* From here the loop owns one reference; a failed post frees m and
	 * leaves the call ours to free. */
	if ((rc = pc__ioloop_post(call->loop, m)) != 0)
		goto fail;
	*out = call;
	return 0;
fail:
	call_free(call);
	return rc;
}

void pc_http_call_consumed(pc_http_call_t *call, size_t n)
{
	if (!call || n == 0)
		return;
	uint64_t left = __atomic_sub_fetch(&call->outstanding, n, __ATOMIC_SEQ_CST);
	if (left > call->max_buffered / 2)
		return;
	uint32_t on = PAUSE_ON;
	if (__atomic_compare_exchange_n(&call->pause, &on, PAUSE_RESUMING, false, __ATOMIC_SEQ_CST,
					__ATOMIC_SEQ_CST))
		(void)post_call_cmd(call, resume_cmd); /* fails only when stopping: END follows */
}

void pc_http_call_cancel(pc_http_call_t *call)
{
	if (!call || __atomic_load_n(&call->done, __ATOMIC_ACQUIRE))
		return;
	uint32_t zero = 0;
	if (__atomic_compare_exchange_n(&call->cancel_posted, &zero, 1, false, __ATOMIC_ACQ_REL,
					__ATOMIC_ACQUIRE))
		(void)post_call_cmd(call, cancel_cmd); /* fails only when stopping: END follows */
}

void pc_http_call_release(pc_http_call_t *call)
{
	if (!call)
		return;
	pc_http_call_cancel(call);
	call_unref(call);
}

/* ---- per-loop state -------------------------------------------------------------- */

/* libcurl before 8.0.0 fails every reuse of a connection by a
 * prior-knowledge transfer (curl issue 10634; Debian 12's 7.88 among
 * them). There an h2c connection starts with an HTTP/1.1 upgrade instead
 * (RFC 7540 section 3.2), and each host gets one h2c connection per I/O
 * thread: while one is upgrading, the same libcurl hands further requests
 * to it as HTTP/1.1 ones (pipelined, which breaks the upgrade), so a
 * second is never opened beside a first; requests past its streams wait
 * for a free one. From 8.0 on: prior knowledge, and as many connections
 * as for any host. Returns the per-host cap for the h2c multi. */
static uint32_t h2c_policy(struct pc__http_client_loop *c, const pc_io_config_t *cfg)
{
	const curl_version_info_data *v = curl_version_info(CURLVERSION_NOW);
	bool fixed = v && v->version_num >= 0x080000;
	c->h2c_version = fixed ? (long)CURL_HTTP_VERSION_2_PRIOR_KNOWLEDGE : (long)CURL_HTTP_VERSION_2_0;
	return fixed ? cfg->max_host_connections : 1u;
}

/* Shard i's part of a cap split n ways (0, no cap, stays 0); each part at
 * least one, which only an idle cap below n rounds up. */
static uint32_t share(uint32_t cap, uint32_t n, uint32_t i)
{
	if (cap == 0)
		return 0;
	uint32_t part = cap / n + (i < cap % n ? 1u : 0u);
	return part ? part : 1u;
}

/* Makes m's multi handle with m's caps. */
static int multi_init(multi_t *m)
{
	const pc_io_config_t *cfg = m->client->cfg;
	m->handle = curl_multi_init();
	if (!m->handle)
		return PC_ENOMEM;
	CURLMcode mc = CURLM_OK;
#define MSET(opt, val)                                                                             \
	do {                                                                                       \
		if (mc == CURLM_OK)                                                                \
			mc = curl_multi_setopt(m->handle, opt, val);                               \
	} while (0)
	MSET(CURLMOPT_SOCKETFUNCTION, on_curl_socket);
	MSET(CURLMOPT_SOCKETDATA, (void *)m);
	MSET(CURLMOPT_TIMERFUNCTION, on_curl_timer);
	MSET(CURLMOPT_TIMERDATA, (void *)m);
	MSET(CURLMOPT_MAX_HOST_CONNECTIONS, (long)m->host_cap);
	MSET(CURLMOPT_MAX_TOTAL_CONNECTIONS, (long)m->total_cap);
	MSET(CURLMOPT_MAXCONNECTS, (long)m->idle_cap);
	MSET(CURLMOPT_PIPELINING, CURLPIPE_MULTIPLEX);
	MSET(CURLMOPT_MAX_CONCURRENT_STREAMS, (long)cfg->max_concurrent_streams);
#undef MSET
	if (mc == CURLM_OK)
		return 0;
	curl_multi_cleanup(m->handle);
	m->handle = NULL;
	return PC_EINVAL;
}

/* After every transfer has ended: closes the multi's cached connections. */
static void multi_fini(multi_t *m)
{
	if (!m->handle)
		return;
	curl_multi_cleanup(m->handle);
	pc__ioloop_timer_cancel(m->client->loop, &m->timer);
}

int pc__http_client_loop_init(pc_ioloop_t *loop, const pc_io_config_t *cfg,
			      struct pc__http_client_loop **out)
{
	struct pc__http_client_loop *c = calloc(1, sizeof(*c));
	if (!c)
		return PC_ENOMEM;
	c->loop = loop;
	c->cfg = cfg;
	c->h2c = (multi_t){.client = c,
			   .host_cap = h2c_policy(c, cfg),
			   .total_cap = cfg->max_total_connections,
			   .idle_cap = cfg->max_idle_connections};
	/* As many shards as the per-host cap needs, but no more than the
	 * total cap, so that every shard's share of it is at least one. */
	uint32_t host = cfg->max_host_connections;
	uint32_t n = host / PLAIN_SHARD_CONNS + (host % PLAIN_SHARD_CONNS ? 1u : 0u);
	if (n > PLAIN_SHARDS_MAX)
		n = PLAIN_SHARDS_MAX;
	if (cfg->max_total_connections && n > cfg->max_total_connections)
		n = cfg->max_total_connections;
	n = n ? n : 1;
	int rc = PC_ENOMEM;
	c->plain = calloc(n, sizeof(*c->plain));
	if (c->plain) {
		c->nplain = n;
		for (uint32_t i = 0; i < n; i++)
			c->plain[i] = (multi_t){.client = c,
						.host_cap = share(cfg->max_host_connections, n, i),
						.total_cap = share(cfg->max_total_connections, n, i),
						.idle_cap = share(cfg->max_idle_connections, n, i)};
		/* The first now, so that a cap curl refuses fails the start. */
		rc = multi_init(&c->plain[0]);
	}
	if (rc == 0)
		rc = multi_init(&c->h2c);
	if (rc != 0) {
		pc__http_client_loop_fini(c);
		return rc;
	}
	*out = c;
	return 0;
}

void pc__http_client_loop_fini(struct pc__http_client_loop *c)
{
	if (!c)
		return;
	while (c->live)
		call_finish(c->live, PC_HTTP_CANCELLED, CURLE_OK, "the I/O layer is stopping");
	while (c->nspare)
		curl_easy_cleanup(c->spare[--c->nspare]);
	for (uint32_t i = 0; i < c->nplain; i++)
		multi_fini(&c->plain[i]);
	free(c->plain);
	multi_fini(&c->h2c);
	/* Every socket was closed through on_close_socket by now; what is
	 * left is only memory. */
	for (size_t fd = 0; fd < c->nsocks; fd++)
		free(c->socks[fd]);
	free(c->socks);
	free(c);
}
