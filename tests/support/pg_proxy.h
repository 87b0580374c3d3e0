/*
 * A fault-injecting TCP proxy for the PostgreSQL wire protocol: it listens
 * on 127.0.0.1 (an ephemeral port) and relays every connection to a
 * server's unix socket ("/tmp/x/.s.PGSQL.5432"), reading the messages in
 * both directions so a test can cut a connection at an exact point:
 *
 *   PG_PROXY_CUT_BEFORE_BIND "w_commit": the first Bind (client to server)
 *     naming prepared statement "w_commit" is dropped with everything after
 *     it; the server never sees it. What the server answers to what it did
 *     get still reaches the client for PG_PROXY_HEAR_MS, then the pair is
 *     closed.
 *   PG_PROXY_CUT_AFTER_COMPLETE "COMMIT": the first CommandComplete (server
 *     to client) with tag "COMMIT" is dropped with everything after it, and
 *     the pair is closed; the server committed, the client never heard.
 *
 * A fault fires once, on the first matching message across all
 * connections, then the proxy relays normally again; pg_proxy_fired counts
 * the firings. pg_proxy_set_down(p, true) closes every open pair and every
 * new connection at once, as if the server were unreachable.
 *
 * One thread per proxy runs a poll() loop over all its pairs, with
 * non-blocking sockets and a fixed buffer per direction (so a slow reader
 * holds the writer back). Messages are framed per direction: the checks see
 * whole headers and names even when they arrive split or several to a
 * read; long message bodies stream through without being held. Anything
 * that does not parse (a length below 4, absurdly large, TLS after an
 * SSLRequest) is relayed raw from then on. Bytes are never altered.
 *
 * Every function is thread-safe. pg_proxy_start returns NULL on failure;
 * pg_proxy_stop returns promptly, joins the thread and frees everything.
 */
#ifndef PC_TESTS_PG_PROXY_H
#define PC_TESTS_PG_PROXY_H

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

enum {
	PG_PROXY_NONE = 0,	      /* pg_proxy_arm with this disarms */
	PG_PROXY_CUT_BEFORE_BIND,     /* arg: the prepared statement's name */
	PG_PROXY_CUT_AFTER_COMPLETE,  /* arg: the command tag, e.g. "COMMIT" */
};

#define PG_PROXY_BUF (64 * 1024)     /* per direction of a pair */
#define PG_PROXY_PEEK 1024	     /* body bytes a check may look at */
#define PG_PROXY_DRAIN_MS 2000	     /* a closing pair's last flush */
#define PG_PROXY_HEAR_MS 300	     /* after a cut on the way to the server: its answers to what it got */
#define PG_PROXY_MAX_STARTUP 10000   /* the server's own limit */
#define PG_PROXY_CODE_CANCEL 80877102
#define PG_PROXY_CODE_SSL 80877103
#define PG_PROXY_CODE_GSSENC 80877104

/* One direction of a pair: bytes [sent, scan) are framed and may go out,
 * [scan, len) wait for the rest of a header or a name. */
typedef struct pg_proxy_dir {
	unsigned char buf[PG_PROXY_BUF];
	size_t len, scan, sent;
	size_t remain;	  /* bytes of the current message still to pass */
	bool typed;	  /* past the untyped startup messages */
	bool raw;	  /* framing lost: relay the rest as it comes */
	bool to_server;	  /* client to server */
	int single_bytes; /* untyped one-byte answers due (SSL/GSSENC) */
} pg_proxy_dir_t;

/* fd[0] the client, fd[1] the server; dir[0] client to server, dir[1]
 * server to client. */
typedef struct pg_proxy_pair {
	int fd[2];
	pg_proxy_dir_t dir[2];
	bool draining; /* flush what is framed, then close */
	bool hear_server; /* cut on the way to the server: what the server
			   * still says reaches the client until the deadline */
	struct timespec deadline;
} pg_proxy_pair_t;

typedef struct pg_proxy {
	int lfd;
	int port;
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	int wake[2];
	pthread_t thread;
	bool stop; /* under mu */

	pthread_mutex_t mu;
	pthread_cond_t cv;
	int fault;
	char arg[256];
	int fired;
	bool down;
	uint64_t down_gen, down_done;
	bool running;

	/* the poll thread's own */
	pg_proxy_pair_t **pairs;
	size_t npairs, cap;
	struct pollfd *pfds;
	size_t pfd_cap;
} pg_proxy_t;

static inline uint32_t pg_proxy_be32_(const unsigned char *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static inline void pg_proxy_wake_(pg_proxy_t *p)
{
	ssize_t n = write(p->wake[1], "x", 1);
	(void)n; /* a full pipe wakes the thread already */
}

static inline void pg_proxy_close_pair_(pg_proxy_t *p, size_t i)
{
	pg_proxy_pair_t *pr = p->pairs[i];
	for (int k = 0; k < 2; k++) {
		shutdown(pr->fd[k], SHUT_RDWR);
		close(pr->fd[k]);
	}
	free(pr);
	p->pairs[i] = p->pairs[--p->npairs];
}

static inline void pg_proxy_close_all_(pg_proxy_t *p)
{
	while (p->npairs)
		pg_proxy_close_pair_(p, p->npairs - 1);
}

static inline void pg_proxy_start_drain_(pg_proxy_pair_t *pr)
{
	if (pr->draining)
		return;
	pr->draining = true;
	long ms = pr->hear_server ? PG_PROXY_HEAR_MS : PG_PROXY_DRAIN_MS;
	clock_gettime(CLOCK_MONOTONIC, &pr->deadline);
	pr->deadline.tv_sec += ms / 1000;
	pr->deadline.tv_nsec += (ms % 1000) * 1000000L;
	if (pr->deadline.tv_nsec >= 1000000000L) {
		pr->deadline.tv_sec++;
		pr->deadline.tv_nsec -= 1000000000L;
	}
}

/* Whether the message at `m` (whole, or its first `avail` bytes, at least
 * PG_PROXY_PEEK of body) fires the armed fault; fires it when so. */
static inline bool pg_proxy_check_(pg_proxy_t *p, const pg_proxy_dir_t *d, const unsigned char *m,
				   size_t avail)
{
	const char *body = (const char *)m + 5;
	size_t blen = avail - 5;
	bool hit = false;
	pthread_mutex_lock(&p->mu);
	if (d->to_server && m[0] == 'B' && p->fault == PG_PROXY_CUT_BEFORE_BIND) {
		const char *portal_end = memchr(body, '\0', blen);
		if (portal_end) {
			const char *stmt = portal_end + 1;
			size_t left = blen - (size_t)(stmt - body);
			const char *stmt_end = memchr(stmt, '\0', left);
			hit = stmt_end && strcmp(stmt, p->arg) == 0;
		}
	} else if (!d->to_server && m[0] == 'C' && p->fault == PG_PROXY_CUT_AFTER_COMPLETE) {
		const char *tag_end = memchr(body, '\0', blen);
		hit = tag_end && strcmp(body, p->arg) == 0;
	}
	if (hit) {
		p->fault = PG_PROXY_NONE;
		p->fired++;
	}
	pthread_mutex_unlock(&p->mu);
	return hit;
}

/* Frames what arrived in `d` (of pair `pr`); true when a fault cut it,
 * which drops the cut message and everything after it. */
static inline bool pg_proxy_parse_(pg_proxy_t *p, pg_proxy_pair_t *pr, pg_proxy_dir_t *d)
{
	pg_proxy_dir_t *other = d->to_server ? &pr->dir[1] : &pr->dir[0];
	while (d->scan < d->len) {
		if (d->raw) {
			d->scan = d->len;
			break;
		}
		size_t avail = d->len - d->scan;
		if (d->remain) {
			size_t take = avail < d->remain ? avail : d->remain;
			d->scan += take;
			d->remain -= take;
			continue;
		}
		const unsigned char *m = d->buf + d->scan;
		if (!d->to_server && d->single_bytes > 0) {
			d->single_bytes--;
			if (m[0] == 'N') {
				d->scan++;
				continue;
			}
			if (m[0] == 'S' || m[0] == 'G') { /* TLS or GSSAPI from here on */
				d->raw = other->raw = true;
				continue;
			}
			continue; /* an old server's ErrorResponse: typed as usual */
		}
		if (d->to_server && !d->typed) {
			if (avail < 8)
				break;
			uint32_t mlen = pg_proxy_be32_(m), code = pg_proxy_be32_(m + 4);
			if (mlen < 8 || mlen > PG_PROXY_MAX_STARTUP) {
				d->raw = true;
				continue;
			}
			if (code == PG_PROXY_CODE_SSL || code == PG_PROXY_CODE_GSSENC)
				other->single_bytes++;
			else if (code != PG_PROXY_CODE_CANCEL)
				d->typed = true; /* the StartupMessage */
			d->remain = mlen;
			continue;
		}
		if (avail < 5)
			break;
		uint32_t mlen = pg_proxy_be32_(m + 1);
		if (mlen < 4 || mlen > INT32_MAX) {
			d->raw = true;
			continue;
		}
		size_t total = (size_t)mlen + 1;
		bool inspect = d->to_server ? m[0] == 'B' : m[0] == 'C';
		if (inspect) {
			size_t need = total < 5 + PG_PROXY_PEEK ? total : 5 + PG_PROXY_PEEK;
			if (avail < need)
				break;
			if (pg_proxy_check_(p, d, m, need)) {
				d->len = d->scan;
				return true;
			}
		}
		d->remain = total;
	}
	return false;
}

/* Sends what is framed in `d` to `fd`; false on a write error. */
static inline bool pg_proxy_flush_(pg_proxy_dir_t *d, int fd)
{
	while (d->sent < d->scan) {
		ssize_t n = send(fd, d->buf + d->sent, d->scan - d->sent, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			break;
		if (n <= 0)
			return false;
		d->sent += (size_t)n;
	}
	if (d->sent == d->len) {
		d->len = d->scan = d->sent = 0;
	} else if (d->len == sizeof(d->buf) && d->sent > 0) {
		memmove(d->buf, d->buf + d->sent, d->len - d->sent);
		d->len -= d->sent;
		d->scan -= d->sent;
		d->sent = 0;
	}
	return true;
}

/* Reads into `d` from `fd` and frames it; false when the pair must close
 * at once (a read error). EOF or a cut starts the pair's drain. */
static inline bool pg_proxy_read_(pg_proxy_t *p, pg_proxy_pair_t *pr, pg_proxy_dir_t *d, int fd)
{
	if (d->len == sizeof(d->buf))
		return true;
	ssize_t n = recv(fd, d->buf + d->len, sizeof(d->buf) - d->len, MSG_DONTWAIT);
	if (n < 0)
		return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
	if (n == 0) {
		d->scan = d->len; /* a partial last message goes as it is */
		pg_proxy_start_drain_(pr);
		return true;
	}
	d->len += (size_t)n;
	if (pg_proxy_parse_(p, pr, d)) {
		pr->hear_server |= d->to_server;
		pg_proxy_start_drain_(pr);
	}
	return true;
}

static inline void pg_proxy_accept_(pg_proxy_t *p, bool down)
{
	for (;;) {
		int cfd = accept4(p->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (cfd < 0)
			return;
		if (down) {
			close(cfd);
			continue;
		}
		int sfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		struct sockaddr_un sa = {.sun_family = AF_UNIX};
		memcpy(sa.sun_path, p->path, sizeof(sa.sun_path));
		if (sfd < 0 || connect(sfd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
		    fcntl(sfd, F_SETFL, fcntl(sfd, F_GETFL) | O_NONBLOCK) != 0) {
			if (sfd >= 0)
				close(sfd);
			close(cfd);
			continue;
		}
		if (p->npairs == p->cap) {
			size_t ncap = p->cap ? p->cap * 2 : 8;
			pg_proxy_pair_t **np = realloc(p->pairs, ncap * sizeof(*np));
			if (!np) {
				close(sfd);
				close(cfd);
				continue;
			}
			p->pairs = np;
			p->cap = ncap;
		}
		pg_proxy_pair_t *pr = calloc(1, sizeof(*pr));
		if (!pr) {
			close(sfd);
			close(cfd);
			continue;
		}
		int one = 1;
		setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		pr->fd[0] = cfd;
		pr->fd[1] = sfd;
		pr->dir[0].to_server = true;
		pr->dir[1].typed = true;
		p->pairs[p->npairs++] = pr;
	}
}

static inline bool pg_proxy_past_(const struct timespec *t)
{
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	return now.tv_sec > t->tv_sec || (now.tv_sec == t->tv_sec && now.tv_nsec >= t->tv_nsec);
}

static inline void *pg_proxy_main_(void *arg)
{
	pg_proxy_t *p = arg;
	for (;;) {
		pthread_mutex_lock(&p->mu);
		bool stop = p->stop, down = p->down;
		uint64_t gen = p->down_gen;
		pthread_mutex_unlock(&p->mu);
		if (stop)
			break;
		if (down)
			pg_proxy_close_all_(p);
		pthread_mutex_lock(&p->mu);
		if (p->down_done < gen) {
			p->down_done = gen;
			pthread_cond_broadcast(&p->cv);
		}
		pthread_mutex_unlock(&p->mu);

		size_t want = 2 + 2 * p->npairs;
		if (want > p->pfd_cap) {
			struct pollfd *np = realloc(p->pfds, want * 2 * sizeof(*np));
			if (!np) {
				pg_proxy_close_all_(p);
				continue;
			}
			p->pfds = np;
			p->pfd_cap = want * 2;
		}
		struct pollfd *pf = p->pfds;
		pf[0] = (struct pollfd){p->wake[0], POLLIN, 0};
		pf[1] = (struct pollfd){p->lfd, POLLIN, 0};
		bool draining = false;
		for (size_t i = 0; i < p->npairs; i++) {
			pg_proxy_pair_t *pr = p->pairs[i];
			draining |= pr->draining;
			for (int k = 0; k < 2; k++) {
				/* fd[k] is read by dir[k] and written by dir[1 - k] */
				short ev = 0;
				bool reading = !pr->draining || (pr->hear_server && k == 1);
				if (reading && pr->dir[k].len < sizeof(pr->dir[k].buf))
					ev |= POLLIN;
				if (pr->dir[1 - k].sent < pr->dir[1 - k].scan)
					ev |= POLLOUT;
				pf[2 + 2 * i + (size_t)k] = (struct pollfd){ev ? pr->fd[k] : -1, ev, 0};
			}
		}
		int rc = poll(pf, (nfds_t)(2 + 2 * p->npairs), draining ? 50 : 1000);
		if (rc < 0 && errno != EINTR)
			break;
		if (rc <= 0 && !draining)
			continue;
		if (pf[0].revents) {
			char b[64];
			while (read(p->wake[0], b, sizeof(b)) > 0)
				;
		}
		/* pairs may only be removed after the loop: indices match pf */
		size_t n = p->npairs;
		bool *dead = calloc(n ? n : 1, sizeof(bool));
		if (!dead) {
			pg_proxy_close_all_(p);
			continue;
		}
		for (size_t i = 0; i < n; i++) {
			pg_proxy_pair_t *pr = p->pairs[i];
			for (int k = 0; k < 2 && !dead[i]; k++) {
				short re = pf[2 + 2 * i + (size_t)k].revents;
				bool reading = !pr->draining || (pr->hear_server && k == 1);
				if (reading && (re & (POLLIN | POLLHUP | POLLERR)))
					dead[i] = !pg_proxy_read_(p, pr, &pr->dir[k], pr->fd[k]);
			}
			for (int k = 0; k < 2 && !dead[i]; k++)
				dead[i] = !pg_proxy_flush_(&pr->dir[k], pr->fd[1 - k]);
			if (!dead[i] && pr->draining) {
				bool flushed = pr->dir[0].sent == pr->dir[0].scan &&
					       pr->dir[1].sent == pr->dir[1].scan;
				dead[i] = (flushed && !pr->hear_server) || pg_proxy_past_(&pr->deadline);
			}
		}
		for (size_t i = n; i-- > 0;)
			if (dead[i])
				pg_proxy_close_pair_(p, i);
		free(dead);
		if (pf[1].revents) {
			pthread_mutex_lock(&p->mu);
			down = p->down;
			pthread_mutex_unlock(&p->mu);
			pg_proxy_accept_(p, down);
		}
	}
	pg_proxy_close_all_(p);
	pthread_mutex_lock(&p->mu);
	p->running = false;
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

/* A proxy to the server listening on `unix_socket_path`, or NULL. */
static inline pg_proxy_t *pg_proxy_start(const char *unix_socket_path)
{
	pg_proxy_t *p = calloc(1, sizeof(*p));
	if (!p)
		return NULL;
	p->lfd = p->wake[0] = p->wake[1] = -1;
	if (!unix_socket_path || strlen(unix_socket_path) >= sizeof(p->path))
		goto fail;
	snprintf(p->path, sizeof(p->path), "%s", unix_socket_path);
	if (pipe2(p->wake, O_CLOEXEC | O_NONBLOCK) != 0) {
		p->wake[0] = p->wake[1] = -1;
		goto fail;
	}
	p->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (p->lfd < 0)
		goto fail;
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t sl = sizeof(sa);
	if (bind(p->lfd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(p->lfd, 128) != 0 ||
	    getsockname(p->lfd, (struct sockaddr *)&sa, &sl) != 0)
		goto fail;
	p->port = ntohs(sa.sin_port);
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->cv, NULL);
	p->running = true;
	if (pthread_create(&p->thread, NULL, pg_proxy_main_, p) != 0) {
		pthread_mutex_destroy(&p->mu);
		pthread_cond_destroy(&p->cv);
		goto fail;
	}
	return p;
fail:
	if (p->lfd >= 0)
		close(p->lfd);
	if (p->wake[0] >= 0) {
		close(p->wake[0]);
		close(p->wake[1]);
	}
	free(p);
	return NULL;
}

static inline int pg_proxy_port(pg_proxy_t *p)
{
	return p->port;
}

/* postgresql://USER@127.0.0.1:PORT/DB?sslmode=disable&gssencmode=disable,
 * then &EXTRA when `extra_params` is not NULL, into `buf` (truncated to
 * `n`, NUL-terminated). */
static inline void pg_proxy_url(pg_proxy_t *p, const char *user, const char *db, const char *extra_params,
				char *buf, size_t n)
{
	if (!buf || n == 0)
		return;
	bool extra = extra_params && extra_params[0];
	snprintf(buf, n, "postgresql://%s@127.0.0.1:%d/%s?sslmode=disable&gssencmode=disable%s%s", user, p->port,
		 db, extra ? "&" : "", extra ? extra_params : "");
}

/* Arms `fault` (PG_PROXY_NONE disarms) for its first match; `arg` is the
 * statement name or the command tag, copied. Replaces an armed fault. */
static inline void pg_proxy_arm(pg_proxy_t *p, int fault, const char *arg)
{
	pthread_mutex_lock(&p->mu);
	p->fault = fault;
	snprintf(p->arg, sizeof(p->arg), "%s", arg ? arg : "");
	pthread_mutex_unlock(&p->mu);
}

/* How many times a fault has fired since the start. */
static inline int pg_proxy_fired(pg_proxy_t *p)
{
	pthread_mutex_lock(&p->mu);
	int n = p->fired;
	pthread_mutex_unlock(&p->mu);
	return n;
}

/* Down: every open pair is closed (before this returns) and every new
 * connection is closed at once. Up: new connections are relayed again. */
static inline void pg_proxy_set_down(pg_proxy_t *p, bool down)
{
	pthread_mutex_lock(&p->mu);
	p->down = down;
	uint64_t gen = ++p->down_gen;
	pthread_mutex_unlock(&p->mu);
	pg_proxy_wake_(p);
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 5;
	pthread_mutex_lock(&p->mu);
	while (p->running && p->down_done < gen)
		if (pthread_cond_timedwait(&p->cv, &p->mu, &until) == ETIMEDOUT)
			break;
	pthread_mutex_unlock(&p->mu);
}

/* Closes every connection and the listener, joins the thread, frees `p`. */
static inline void pg_proxy_stop(pg_proxy_t *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->mu);
	p->stop = true;
	pthread_mutex_unlock(&p->mu);
	pg_proxy_wake_(p);
	pthread_join(p->thread, NULL);
	close(p->lfd);
	close(p->wake[0]);
	close(p->wake[1]);
	free(p->pairs);
	free(p->pfds);
	pthread_mutex_destroy(&p->mu);
	pthread_cond_destroy(&p->cv);
	free(p);
}

#endif
