/*
 * The HTTP server object: its listening sockets (one SO_REUSEPORT socket
 * per I/O loop, so the kernel spreads connections over the loops), its
 * routes, the per-loop id tables, and the answer API, which any thread may
 * call. An id names a connection's request or WebSocket, or an HTTP/2
 * stream; its table entry says which, and the answer goes there.
 *
 * An answer is packed into a command message and posted to the loop that
 * owns the connection: an id carries its loop's index in its top byte. The
 * poster first looks the id up in that loop's table under the table's
 * mutex, so an answer for a request that has gone is refused at once; one
 * that goes while the command is in flight is dropped on the loop.
 *
 * Start and free run a command on every loop and wait for all of them,
 * since only a loop may touch its watches and connections. pc_io_free
 * closes what is left through a shutdown hook, which also closes the table
 * to answers; a server freed after that touches no loop.
 *
 * Actors answer whenever they like, so an answer may race the server's
 * free. Live servers are kept in a process-wide registry: an answer holds
 * its read lock while it looks the server up and posts, and free takes the
 * server out under the write lock first. An answer to a freed server is
 * refused (PC_ENOTFOUND) without touching it, and since ids are unique in
 * the process, not even a new server at the same address takes it.
 */
#include "http_conn_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "http2_internal.h"
#include "ws_internal.h"

#define ACCEPT_BATCH 64
#define ACCEPT_RETRY_MS 100
#define LISTEN_BACKLOG 4096

enum {
	A_RESPOND,
	A_START,
	A_WRITE,
	A_END,
	A_ABORT,
	A_WS_ACCEPT,
	A_WS_SEND,
	A_WS_CLOSE,
	A_WS_CAP,
	A_WS_DRAIN,
};

/* An answer as a command payload: a NUL-terminated first string (headers,
 * protocol or close reason), then the bytes (body, data). */
typedef struct answer {
	pc_http_server_t *srv;
	uint64_t id;
	pc_actor_t *owner; /* A_WS_ACCEPT: a reference the command carries */
	int kind;
	int status;
	int opcode;
	uint16_t code;
	uint32_t cap; /* A_WS_ACCEPT, A_WS_CAP: the connection's message cap */
	size_t alen;
	size_t blen;
	char data[];
} answer_t;

/* ---- the registry of live servers ------------------------------------------------ */

/* Writer-preferring: a stream of answers must not hold a free off. */
static pthread_rwlock_t registry_lock = PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP;
static pc_http_server_t *registry;

/* Under registry_lock. */
static bool registered(const pc_http_server_t *srv)
{
	for (const pc_http_server_t *s = registry; s; s = s->reg_next) {
		if (s == srv)
			return true;
	}
	return false;
}

static void registry_add(pc_http_server_t *srv)
{
	pthread_rwlock_wrlock(&registry_lock);
	srv->reg_next = registry;
	registry = srv;
	pthread_rwlock_unlock(&registry_lock);
}

static void registry_remove(pc_http_server_t *srv)
{
	pthread_rwlock_wrlock(&registry_lock);
	pc_http_server_t **p = &registry;
	while (*p && *p != srv)
		p = &(*p)->reg_next;
	if (*p)
		*p = srv->reg_next;
	pthread_rwlock_unlock(&registry_lock);
}

/* ---- the id tables ------------------------------------------------------------ */

static uint64_t id_seq; /* atomic: ids are unique in the process */

uint64_t pc__srv_new_id(pc__srv_loop_t *sl)
{
	/* 2^56 ids outlast any process; 0 would mean "none". */
	uint64_t seq = __atomic_add_fetch(&id_seq, 1, __ATOMIC_RELAXED) & ((1ull << PC__HTTP_ID_SHIFT) - 1);
	return ((uint64_t)sl->index << PC__HTTP_ID_SHIFT) | (seq ? seq : 1);
}

/* Loop thread, or any thread holding sl->mu. */
static pc__srv_ent_t *id_find(pc__srv_loop_t *sl, uint64_t id)
{
	pc__id_link_t *l = pc__id_map_find(&sl->ids, id);
	return l ? (pc__srv_ent_t *)((char *)l - offsetof(pc__srv_ent_t, link)) : NULL;
}

void pc__srv_ent_add(pc__srv_loop_t *sl, pc__srv_ent_t *e, uint64_t id)
{
	pthread_mutex_lock(&sl->mu);
	pc__id_map_add(&sl->ids, &e->link, id);
	pthread_mutex_unlock(&sl->mu);
}

void pc__srv_ent_remove(pc__srv_loop_t *sl, pc__srv_ent_t *e)
{
	pthread_mutex_lock(&sl->mu);
	pc__id_map_remove(&sl->ids, &e->link);
	pthread_mutex_unlock(&sl->mu);
}

void pc__srv_id_add(pc__srv_loop_t *sl, pc__http_conn_t *c, uint64_t id)
{
	c->ent.conn = c;
	c->ent.stream = NULL;
	c->id = id;
	pc__srv_ent_add(sl, &c->ent, id);
}

void pc__srv_id_remove(pc__srv_loop_t *sl, pc__http_conn_t *c)
{
	pc__srv_ent_remove(sl, &c->ent);
	c->id = 0;
}

/* ---- routes ------------------------------------------------------------------- */

const pc__http_route_t *pc__srv_route(const pc_http_server_t *srv, const char *method,
				      const char *path, size_t path_len)
{
	for (size_t i = 0; i < srv->nroutes; i++) {
		const pc__http_route_t *r = &srv->routes[i];
		if (r->method && strcmp(r->method, method) != 0)
			continue;
		if (r->prefix ? path_len >= r->path_len : path_len == r->path_len) {
			if (memcmp(path, r->path, r->path_len) == 0)
				return r;
		}
	}
	return NULL;
}

int pc_http_server_route(pc_http_server_t *srv, const char *method, const char *path,
			 pc_actor_t *handler)
{
	if (!srv || !path || !*path || !handler)
		return PC_EINVAL;
	if (srv->started)
		return PC_ESTATE;
	pc__http_route_t *routes = realloc(srv->routes, (srv->nroutes + 1) * sizeof(*routes));
	if (!routes)
		return PC_ENOMEM;
	srv->routes = routes;
	pc__http_route_t r = {0};
	size_t len = strlen(path);
	r.path = strdup(path);
	r.method = method ? strdup(method) : NULL;
	if (!r.path || (method && !r.method)) {
		free(r.path);
		free(r.method);
		return PC_ENOMEM;
	}
	r.prefix = path[len - 1] == '*';
	r.path_len = r.prefix ? len - 1 : len;
	r.handler = pc_actor_retain(handler);
	srv->routes[srv->nroutes++] = r;
	return 0;
}

/* ---- listening ------------------------------------------------------------------ */

static void on_accept(pc_ioloop_t *loop, void *arg, uint32_t events);

static void on_accept_retry(pc_ioloop_t *loop, void *arg)
{
	pc__srv_loop_t *sl = arg;
	if (pc__ioloop_rewatch(loop, &sl->watch, EPOLLIN) != 0)
		pc__ioloop_timer_arm(loop, &sl->retry, ACCEPT_RETRY_MS, on_accept_retry, sl);
}

static void on_accept(pc_ioloop_t *loop, void *arg, uint32_t events)
{
	(void)events;
	pc__srv_loop_t *sl = arg;
	for (int i = 0; i < ACCEPT_BATCH; i++) {
		struct sockaddr_storage ss;
		socklen_t len = sizeof(ss);
		int fd = accept4(sl->fd, (struct sockaddr *)&ss, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd >= 0) {
			pc__conn_accept(sl, fd, (struct sockaddr *)&ss, len);
			continue;
		}
		if (errno == EINTR || errno == ECONNABORTED || errno == EPERM)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK) {
			/* Out of descriptors or memory: the socket stays
			 * readable, so look away for a moment instead of
			 * spinning on it. */
			if (pc__ioloop_rewatch(loop, &sl->watch, 0) == 0)
				pc__ioloop_timer_arm(loop, &sl->retry, ACCEPT_RETRY_MS, on_accept_retry, sl);
		}
		return;
	}
}

static int parse_addr(const char *host, uint16_t port, struct sockaddr_storage *ss, socklen_t *len)
{
	memset(ss, 0, sizeof(*ss));
	struct sockaddr_in *in = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
	if (inet_pton(AF_INET, host, &in->sin_addr) == 1) {
		in->sin_family = AF_INET;
		in->sin_port = htons(port);
		*len = sizeof(*in);
		return 0;
	}
	if (inet_pton(AF_INET6, host, &in6->sin6_addr) == 1) {
		in6->sin6_family = AF_INET6;
		in6->sin6_port = htons(port);
		*len = sizeof(*in6);
		return 0;
	}
	return PC_EINVAL;
}

static void set_port(struct sockaddr_storage *ss, uint16_t port)
{
	if (ss->ss_family == AF_INET)
		((struct sockaddr_in *)ss)->sin_port = htons(port);
	else
		((struct sockaddr_in6 *)ss)->sin6_port = htons(port);
}

static uint16_t get_port(const struct sockaddr_storage *ss)
{
	if (ss->ss_family == AF_INET)
		return ntohs(((const struct sockaddr_in *)ss)->sin_port);
	return ntohs(((const struct sockaddr_in6 *)ss)->sin6_port);
}

static int listen_socket(const struct sockaddr_storage *ss, socklen_t len, bool reuseport)
{
	int one = 1;
	int fd = socket(ss->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
	    (reuseport && setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) != 0) ||
	    bind(fd, (const struct sockaddr *)ss, len) != 0 || listen(fd, LISTEN_BACKLOG) != 0) {
		int e = errno;
		(void)close(fd);
		errno = e;
		return -1;
	}
	return fd;
}

/* Every loop's socket on one address. A fixed port is probed first without
 * SO_REUSEPORT: otherwise another process of the same user listening there
 * would silently share our connections instead of making bind fail. */
static int listen_all(pc_http_server_t *srv, struct sockaddr_storage *ss, socklen_t len)
{
	if (get_port(ss) != 0) {
		int probe = listen_socket(ss, len, false);
		if (probe < 0)
			return PC_ESYS;
		(void)close(probe);
	}
	for (uint32_t i = 0; i < srv->nloops; i++) {
		int fd = listen_socket(ss, len, true);
		if (fd < 0)
			return PC_ESYS;
		srv->loops[i].fd = fd;
		if (i == 0) {
			/* Port 0: the others join the port the first one got. */
			struct sockaddr_storage got;
			socklen_t glen = sizeof(got);
			if (getsockname(fd, (struct sockaddr *)&got, &glen) != 0)
				return PC_ESYS;
			srv->port = get_port(&got);
			set_port(ss, srv->port);
		}
	}
	return 0;
}

/* ---- the server's life ------------------------------------------------------------ */

static void ack(pc_http_server_t *srv)
{
	pthread_mutex_lock(&srv->mu);
	srv->acks++;
	pthread_cond_broadcast(&srv->cv);
	pthread_mutex_unlock(&srv->mu);
}

static void wait_acks(pc_http_server_t *srv, uint32_t n)
{
	pthread_mutex_lock(&srv->mu);
	while (srv->acks < n)
		pthread_cond_wait(&srv->cv, &srv->mu);
	srv->acks = 0;
	pthread_mutex_unlock(&srv->mu);
}

/* Loop thread: stops listening and closes every connection. Also the
 * shutdown hook, so it runs once however the server ends. */
static void srv_loop_close(pc__srv_loop_t *sl)
{
	if (sl->shut)
		return;
	pthread_mutex_lock(&sl->mu);
	sl->open = false;
	pthread_mutex_unlock(&sl->mu);
	pc__ioloop_unwatch(sl->loop, &sl->watch);
	pc__ioloop_timer_cancel(sl->loop, &sl->retry);
	while (sl->conns)
		pc__conn_close(sl->conns, PC_ESTOPPED);
	pthread_mutex_lock(&sl->mu);
	sl->shut = true;
	pthread_mutex_unlock(&sl->mu);
}

static void on_loop_shutdown(pc_ioloop_t *loop, pc_io_hook_t *hook)
{
	(void)loop;
	srv_loop_close((pc__srv_loop_t *)((char *)hook - offsetof(pc__srv_loop_t, hook)));
}

static void srv_loop_start(pc__srv_loop_t *sl)
{
	int rc = PC_ESTOPPED;
	if (!pc__ioloop_stopping(sl->loop))
		rc = pc__ioloop_watch(sl->loop, &sl->watch, sl->fd, EPOLLIN, on_accept, sl);
	if (rc == 0)
		pc__ioloop_on_shutdown(sl->loop, &sl->hook);
	pthread_mutex_lock(&sl->mu);
	sl->start_rc = rc;
	sl->started = sl->open = rc == 0;
	pthread_mutex_unlock(&sl->mu);
}

static void srv_loop_stop(pc__srv_loop_t *sl)
{
	srv_loop_close(sl);
	pc__ioloop_off_shutdown(sl->loop, &sl->hook);
}

static pc__srv_loop_t *cmd_loop_share(pc_msg_t *msg)
{
	pc__srv_loop_t *sl;
	memcpy(&sl, (pc_io_cmd_t *)pc_msg_data(msg) + 1, sizeof(sl));
	return sl;
}

static void start_cmd(pc_ioloop_t *loop, pc_msg_t *msg)
{
	(void)loop;
	pc__srv_loop_t *sl = cmd_loop_share(msg);
	srv_loop_start(sl);
	ack(sl->srv);
}

static void stop_cmd(pc_ioloop_t *loop, pc_msg_t *msg)
{
	(void)loop;
	pc__srv_loop_t *sl = cmd_loop_share(msg);
	pc_http_server_t *srv = sl->srv;
	srv_loop_stop(sl);
	ack(srv); /* the last touch: the server may be freed right after */
}

static pc_msg_t *share_cmd(pc_io_cmd_fn run, pc__srv_loop_t *sl)
{
	void *p;
	pc_msg_t *m = pc__io_cmd_new(run, sizeof(sl), &p);
	if (m)
		memcpy(p, &sl, sizeof(sl));
	return m;
}

static void srv_destroy(pc_http_server_t *srv, uint32_t nready, bool sync_ok)
{
	for (uint32_t i = 0; i < srv->nloops; i++) {
		pc__srv_loop_t *sl = &srv->loops[i];
		if (sl->fd >= 0)
			(void)close(sl->fd);
		pc__id_map_destroy(&sl->ids);
		free(sl->rbuf);
		if (i < nready)
			pthread_mutex_destroy(&sl->mu);
	}
	for (size_t i = 0; i < srv->nroutes; i++) {
		free(srv->routes[i].method);
		free(srv->routes[i].path);
		pc_actor_release(srv->routes[i].handler);
	}
	free(srv->routes);
	if (sync_ok) {
		pthread_cond_destroy(&srv->cv);
		pthread_mutex_destroy(&srv->mu);
	}
	free(srv);
}

static uint32_t or_default(uint32_t v, uint32_t def)
{
	return v ? v : def;
}

int pc_http_server_new(pc_io_t *io, const pc_http_server_config_t *cfg, pc_http_server_t **out)
{
	if (!io || !out)
		return PC_EINVAL;
	struct sockaddr_storage ss;
	socklen_t slen;
	if (parse_addr(cfg && cfg->host ? cfg->host : "127.0.0.1", cfg ? cfg->port : 0, &ss, &slen) != 0)
		return PC_EINVAL;
	uint32_t n = pc__io_loop_count(io);
	pc_http_server_t *srv = calloc(1, sizeof(*srv) + n * sizeof(pc__srv_loop_t));
	if (!srv)
		return PC_ENOMEM;
	srv->io = io;
	srv->nloops = n;
	const pc_http_server_limits_t *l = cfg ? &cfg->limits : &(pc_http_server_limits_t){0};
	srv->lim = (pc_http_server_limits_t){
		.max_header_bytes = or_default(l->max_header_bytes, 16u << 10),
		.max_body_bytes = or_default(l->max_body_bytes, 1u << 20),
		.max_frame_bytes = or_default(l->max_frame_bytes, 1u << 20),
		.max_message_bytes = or_default(l->max_message_bytes, 4u << 20),
		.max_output_bytes = or_default(l->max_output_bytes, 8u << 20),
		.max_connections = or_default(l->max_connections, 100000),
		.header_timeout_ms = or_default(l->header_timeout_ms, 10000),
		.body_timeout_ms = or_default(l->body_timeout_ms, 30000),
		.idle_timeout_ms = or_default(l->idle_timeout_ms, 60000),
		.ws_idle_timeout_ms = l->ws_idle_timeout_ms,
		.max_concurrent_streams = or_default(l->max_concurrent_streams, 1000),
	};
	srv->origin_check = cfg ? cfg->origin_check : NULL;
	srv->origin_user = cfg ? cfg->origin_user : NULL;
	srv->on_access = cfg ? cfg->on_access : NULL;
	srv->access_user = cfg ? cfg->access_user : NULL;
	for (uint32_t i = 0; i < n; i++)
		srv->loops[i].fd = -1;
	uint32_t nready = 0;
	bool sync_ok = false;
	int rc = PC_ESYS;
	if (pthread_mutex_init(&srv->mu, NULL) != 0)
		goto fail;
	if (pthread_cond_init(&srv->cv, NULL) != 0) {
		pthread_mutex_destroy(&srv->mu);
		goto fail;
	}
	sync_ok = true;
	for (; nready < n; nready++) {
		pc__srv_loop_t *sl = &srv->loops[nready];
		sl->srv = srv;
		sl->loop = pc__io_loop(io, nready);
		sl->index = nready;
		sl->hook.fn = on_loop_shutdown;
		rc = PC_ENOMEM;
		sl->rbuf = malloc(PC__HTTP_RBUF);
		if (pc__id_map_init(&sl->ids) || !sl->rbuf)
			goto fail;
		rc = PC_ESYS;
		if (pthread_mutex_init(&sl->mu, NULL) != 0)
			goto fail;
	}
	rc = listen_all(srv, &ss, slen);
	if (rc != 0)
		goto fail;
	registry_add(srv);
	*out = srv;
	return 0;
fail:;
	int e = errno; /* PC_ESYS: errno tells the caller which (error.h) */
	srv_destroy(srv, nready, sync_ok);
	errno = e;
	return rc;
}

int pc_http_server_start(pc_http_server_t *srv)
{
	if (!srv)
		return PC_EINVAL;
	if (srv->started)
		return PC_ESTATE;
	srv->started = true;
	uint32_t posted = 0;
	int rc = 0;
	for (uint32_t i = 0; i < srv->nloops; i++) {
		pc__srv_loop_t *sl = &srv->loops[i];
		if (pc__ioloop_on_thread(sl->loop)) {
			srv_loop_start(sl);
			continue;
		}
		pc_msg_t *m = share_cmd(start_cmd, sl);
		int prc = m ? pc__ioloop_post(sl->loop, m) : PC_ENOMEM;
		if (prc == 0)
			posted++;
		else if (rc == 0)
			rc = prc;
	}
	wait_acks(srv, posted);
	for (uint32_t i = 0; i < srv->nloops && rc == 0; i++) {
		pthread_mutex_lock(&srv->loops[i].mu);
		rc = srv->loops[i].started ? 0 : srv->loops[i].start_rc;
		pthread_mutex_unlock(&srv->loops[i].mu);
	}
	return rc;
}

uint16_t pc_http_server_port(const pc_http_server_t *srv)
{
	return srv ? srv->port : 0;
}

void pc_http_server_free(pc_http_server_t *srv)
{
	if (!srv)
		return;
	/* Waits out answers in progress; later ones find no server. */
	registry_remove(srv);
	uint32_t posted = 0;
	for (uint32_t i = 0; i < srv->nloops; i++) {
		pc__srv_loop_t *sl = &srv->loops[i];
		pthread_mutex_lock(&sl->mu);
		sl->open = false; /* no answer is posted from here on */
		bool live = sl->started && !sl->shut;
		pthread_mutex_unlock(&sl->mu);
		if (!live)
			continue; /* never started, or its loop's hook closed it */
		if (pc__ioloop_on_thread(sl->loop)) {
			srv_loop_stop(sl);
			continue;
		}
		/* A tiny message; without it the loop would keep pointers into
		 * the server, so wait for memory rather than fail. */
		pc_msg_t *m;
		while (!(m = share_cmd(stop_cmd, sl)))
			sched_yield();
		/* PC_ESTOPPED: the loop has stopped, and its hook ran. */
		if (pc__ioloop_post(sl->loop, m) == 0)
			posted++;
	}
	wait_acks(srv, posted);
	srv_destroy(srv, srv->nloops, true);
}

/* ---- answers ------------------------------------------------------------------------ */

/* An accepted WebSocket that cannot start still ends with CLOSED, as
 * every successful accept does. */
static void refuse_ws(const answer_t *a, int reason)
{
	pc__conn_notify(a->owner, PC_MSG_WS_CLOSED, a->srv, a->id, reason, 1006);
	pc_actor_release(a->owner);
}

/* An answer for an HTTP/2 stream. WebSocket commands cannot name one
 * (no stream is ever upgraded), but an accept may be tried. */
static void answer_stream(const answer_t *a, pc__h2_stream_t *st)
{
	const char *s = a->data;
	const char *bytes = a->data + a->alen + 1;
	switch (a->kind) {
	case A_RESPOND:
		pc__h2_respond(st, a->status, s, a->alen, bytes, a->blen);
		break;
	case A_START:
		pc__h2_stream_start(st, a->status, s, a->alen);
		break;
	case A_WRITE:
		pc__h2_stream_write(st, bytes, a->blen);
		break;
	case A_END:
		pc__h2_stream_end(st);
		break;
	case A_ABORT:
		pc__h2_abort(st);
		break;
	case A_WS_ACCEPT:
		refuse_ws(a, PC_ESTATE);
		break;
	default:
		break;
	}
}

static void answer_cmd(pc_ioloop_t *loop, pc_msg_t *msg)
{
	const answer_t *a = (const answer_t *)((pc_io_cmd_t *)pc_msg_data(msg) + 1);
	pc__srv_loop_t *sl = &a->srv->loops[pc__ioloop_index(loop)];
	pc__srv_ent_t *e = id_find(sl, a->id);
	const char *s = a->data;
	const char *bytes = a->data + a->alen + 1;
	if (!e) {
		/* Gone while the command was in flight. */
		if (a->kind == A_WS_ACCEPT)
			refuse_ws(a, pc__ioloop_stopping(loop) ? PC_ESTOPPED : 0);
		return;
	}
	if (e->stream) {
		answer_stream(a, e->stream);
		return;
	}
	pc__http_conn_t *c = e->conn;
	switch (a->kind) {
	case A_RESPOND:
		pc__conn_respond(c, a->status, s, a->alen, bytes, a->blen);
		break;
	case A_START:
		pc__conn_stream_start(c, a->status, s, a->alen);
		break;
	case A_WRITE:
		pc__conn_stream_write(c, bytes, a->blen);
		break;
	case A_END:
		pc__conn_stream_end(c);
		break;
	case A_ABORT:
		c->handler = NULL; /* the actor asked: no GONE for it */
		pc__conn_close(c, 0);
		break;
	case A_WS_ACCEPT:
		pc__ws_start(c, a->owner, a->alen ? s : NULL, a->cap);
		break;
	case A_WS_SEND:
		pc__ws_send(c, a->opcode, bytes, a->blen);
		break;
	case A_WS_CLOSE:
		pc__ws_close(c, a->code, s, a->alen);
		break;
	case A_WS_CAP:
		pc__ws_set_cap(c, a->cap);
		break;
	case A_WS_DRAIN:
		pc__ws_want_drained(c);
		break;
	}
}

/* Posts an answer if its id is live; on any failure the command never ran. */
static int post_answer(pc_http_server_t *srv, const answer_t *t, const char *s, size_t slen,
		       const void *bytes, size_t blen)
{
	if (blen > PC_MSG_MAX_PAYLOAD - sizeof(pc_io_cmd_t) - sizeof(answer_t) - slen - 1)
		return PC_EINVAL;
	void *p;
	pc_msg_t *m = pc__io_cmd_new(answer_cmd, sizeof(answer_t) + slen + 1 + blen, &p);
	if (!m)
		return PC_ENOMEM;
	answer_t *a = p;
	memcpy(a, t, sizeof(*a));
	a->alen = slen;
	a->blen = blen;
	if (slen)
		memcpy(a->data, s, slen);
	a->data[slen] = 0;
	if (blen)
		memcpy(a->data + slen + 1, bytes, blen);
	int rc = PC_ENOTFOUND;
	uint64_t idx = t->id >> PC__HTTP_ID_SHIFT;
	pthread_rwlock_rdlock(&registry_lock);
	if (registered(srv) && idx < srv->nloops) {
		pc__srv_loop_t *sl = &srv->loops[idx];
		pthread_mutex_lock(&sl->mu);
		if (sl->open && id_find(sl, t->id)) {
			rc = pc__ioloop_post(sl->loop, m);
			m = NULL;
		}
		pthread_mutex_unlock(&sl->mu);
	}
	pthread_rwlock_unlock(&registry_lock);
	pc_msg_free(m);
	return rc;
}

/* Extra header lines: each ends in CRLF, and no empty line (which would
 * end the head early). */
static bool headers_ok(const char *h, size_t *len)
{
	*len = h ? strlen(h) : 0;
	if (!*len)
		return true;
	if (*len < 2 || strcmp(h + *len - 2, "\r\n") != 0 || h[0] == '\r' || strstr(h, "\r\n\r\n"))
		return false;
	return true;
}

static bool status_ok(int status)
{
	return status >= 200 && status <= 999;
}

int pc_http_respond(pc_http_server_t *srv, uint64_t id, int status, const char *headers,
		    const void *body, size_t len)
{
	size_t hlen;
	if (!srv || (!body && len) || !status_ok(status) || !headers_ok(headers, &hlen))
		return PC_EINVAL;
	answer_t t = {.srv = srv, .id = id, .kind = A_RESPOND, .status = status};
	return post_answer(srv, &t, headers, hlen, body, len);
}

int pc_http_respond_start(pc_http_server_t *srv, uint64_t id, int status, const char *headers)
{
	size_t hlen;
	if (!srv || !status_ok(status) || !headers_ok(headers, &hlen))
		return PC_EINVAL;
	answer_t t = {.srv = srv, .id = id, .kind = A_START, .status = status};
	return post_answer(srv, &t, headers, hlen, NULL, 0);
}

int pc_http_respond_write(pc_http_server_t *srv, uint64_t id, const void *data, size_t len)
{
	if (!srv || (!data && len))
		return PC_EINVAL;
	answer_t t = {.srv = srv, .id = id, .kind = A_WRITE};
	return post_answer(srv, &t, NULL, 0, data, len);
}

int pc_http_respond_end(pc_http_server_t *srv, uint64_t id)
{
	if (!srv)
		return PC_EINVAL;
	answer_t t = {.srv = srv, .id = id, .kind = A_END};
	return post_answer(srv, &t, NULL, 0, NULL, 0);
}

int pc_http_abort(pc_http_server_t *srv, uint64_t id)
{
	if (!srv)
		return PC_EINVAL;
	answer_t t = {.srv = srv, .id = id, .kind = A_ABORT};
	return post_answer(srv, &t, NULL, 0, NULL, 0);
}

const char *pc_http_request_header(const pc_http_request_msg_t *req, const char *name)
{
	if (!req || !name)
		return NULL;
	for (size_t i = 0; i < req->header_count; i++) {
		if (strcasecmp(req->headers[i].name, name) == 0)
			return req->headers[i].value;
	}
	return NULL;
}

int pc_ws_accept_capped(pc_http_server_t *srv, uint64_t id, pc_actor_t *owner, const char *protocol,
			uint32_t max_message_bytes)
{
	size_t plen = protocol ? strlen(protocol) : 0;
	/* A protocol is a token: no room for a header of its own. */
	if (!srv || !owner || (protocol && (!plen || plen > 255 || strpbrk(protocol, "\r\n"))))
		return PC_EINVAL;
	answer_t t = {.srv = srv, .id = id, .kind = A_WS_ACCEPT, .owner = pc_actor_retain(owner),
		      .cap = max_message_bytes};
	int rc = post_answer(srv, &t, protocol, plen, NULL, 0);
	if (rc != 0)
		pc_actor_release(owner);
	return rc;
}

int pc_ws_accept(pc_http_server_t *srv, uint64_t id, pc_actor_t *owner, const char *protocol)
{
	return pc_ws_accept_capped(srv, id, owner, protocol, 0);
}

int pc_ws_set_max_message(pc_http_server_t *srv, uint64_t id, uint32_t max_message_bytes)
{
	if (!srv)
		return PC_EINVAL;
	answer_t t = {.srv = srv, .id = id, .kind = A_WS_CAP, .cap = max_message_bytes};
	return post_answer(srv, &t, NULL, 0, NULL, 0);
}

int pc_ws_send(pc_http_server_t *srv, uint64_t id, int opcode, const void *data, size_t len)
{
	if (!srv || (opcode != PC_WS_TEXT && opcode != PC_WS_BINARY) || (!data && len))
		return PC_EINVAL;
	answer_t t = {.srv = srv, .id = id, .kind = A_WS_SEND, .opcode = opcode};
	return post_answer(srv, &t, NULL, 0, data, len);
}

int pc_ws_notify_drained(pc_http_server_t *srv, uint64_t id)
{
	if (!srv)
		return PC_EINVAL;
	answer_t t = {.srv = srv, .id = id, .kind = A_WS_DRAIN};
	return post_answer(srv, &t, NULL, 0, NULL, 0);
}

int pc_ws_close(pc_http_server_t *srv, uint64_t id, uint16_t code, const char *reason)
{
	size_t rlen = reason ? strlen(reason) : 0;
	/* Codes an endpoint may send (RFC 6455 section 7.4), a reason that
	 * fits a control frame. */
	bool code_ok = (code >= 1000 && code <= 1003) || (code >= 1007 && code <= 1014) ||
		       (code >= 3000 && code <= 4999);
	if (!srv || !code_ok || rlen > 123)
		return PC_EINVAL;
	answer_t t = {.srv = srv, .id = id, .kind = A_WS_CLOSE, .code = code};
	return post_answer(srv, &t, reason, rlen, NULL, 0);
}
