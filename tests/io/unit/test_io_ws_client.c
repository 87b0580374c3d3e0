/*
 * The WebSocket client on the I/O threads (io/ws_client.h) against the
 * project's own server on 127.0.0.1: open, messages both ways, the close
 * handshake from either side, a refused connect, a refused upgrade, the
 * open deadline, release and pc_io_free with live connections, and the
 * client's lifecycle table and trace. Every wait is bounded.
 */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "io/http_server.h"
#include "io/io.h"
#include "io/ws_client.h"
#include "test_util.h"

/* ---- the server: echoes, closes on "close", refuses /nope ---- */

static int server_receive(pc_ctx_t *ctx, void *state, pc_msg_t *msg)
{
	(void)state;
	if (msg->type == PC_MSG_HTTP_REQUEST) {
		const pc_http_request_msg_t *req = pc_msg_cdata(msg);
		if (req->upgrade && strcmp(req->path, "/ws") == 0)
			CHECK(pc_ws_accept(req->server, req->id, pc_self(ctx), NULL) == 0, "accept");
		else
			CHECK(pc_http_respond(req->server, req->id, 404, NULL, "no\n", 3) == 0, "respond");
	} else if (msg->type == PC_MSG_WS_MESSAGE) {
		const pc_ws_message_msg_t *wm = pc_msg_cdata(msg);
		if (wm->len == 5 && !memcmp(wm->data, "close", 5))
			CHECK(pc_ws_close(wm->server, wm->id, 4000, "bye") == 0, "close");
		else if (wm->len == 4 && !memcmp(wm->data, "mute", 4))
			; /* the server says nothing more */
		else
			CHECK(pc_ws_send(wm->server, wm->id, wm->opcode, wm->data, wm->len) == 0, "echo");
	}
	return 0;
}

static const pc_behavior_t server_b = {.name = "ws-server", .receive = server_receive};

/* ---- the client's owner: records what it gets ---- */

typedef struct seen {
	uint32_t opened;
	uint32_t messages;
	uint32_t closed;
	char last[256];
	pc_wsc_closed_msg_t end;
	void *user;
} seen_t;

static seen_t seen;
static pthread_mutex_t seen_mu = PTHREAD_MUTEX_INITIALIZER;

static int owner_receive(pc_ctx_t *ctx, void *state, pc_msg_t *msg)
{
	(void)ctx;
	(void)state;
	pthread_mutex_lock(&seen_mu);
	if (msg->type == PC_MSG_WSC_OPEN) {
		const pc_wsc_event_msg_t *e = pc_msg_cdata(msg);
		seen.user = e->user;
		CHECK(pc_wsc_state(e->client) >= PC_WSC_OPEN, "open before OPEN");
		INC(seen.opened);
	} else if (msg->type == PC_MSG_WSC_MESSAGE) {
		const pc_wsc_message_msg_t *m = pc_msg_cdata(msg);
		CHECK(m->data[m->len] == 0, "NUL-terminated");
		snprintf(seen.last, sizeof(seen.last), "%d:%s", m->opcode, m->data);
		INC(seen.messages);
	} else if (msg->type == PC_MSG_WSC_CLOSED) {
		memcpy(&seen.end, pc_msg_cdata(msg), sizeof(seen.end));
		INC(seen.closed);
	}
	pthread_mutex_unlock(&seen_mu);
	return 0;
}

static const pc_behavior_t owner_b = {.name = "ws-owner", .receive = owner_receive};

static pc_runtime_t *rt;
static pc_io_t *io;
static pc_http_server_t *srv;
static pc_actor_t *server_actor, *owner;
static uint16_t port;

static void start(void)
{
	memset(&seen, 0, sizeof(seen));
	reset_failures();
	rt = start_rt(2);
	pc_io_config_t ic = {.threads = 2};
	cr_assert_eq(pc_io_new(rt, &ic, &io), 0);
	pc_http_server_config_t cfg = {.host = "127.0.0.1"};
	cr_assert_eq(pc_http_server_new(io, &cfg, &srv), 0);
	cr_assert_eq(pc_spawn(rt, &server_b, NULL, &server_actor), 0);
	cr_assert_eq(pc_spawn(rt, &owner_b, NULL, &owner), 0);
	cr_assert_eq(pc_http_server_route(srv, NULL, "/ws", server_actor), 0);
	cr_assert_eq(pc_http_server_route(srv, NULL, "/nope", server_actor), 0);
	cr_assert_eq(pc_http_server_start(srv), 0);
	port = pc_http_server_port(srv);
}

static void stop(void)
{
	pc_http_server_free(srv);
	srv = NULL;
	pc_io_free(io);
	io = NULL;
	pc_actor_release(server_actor);
	pc_actor_release(owner);
	assert_no_failures();
	FREE_RUNTIME_CHECKED(rt);
}

static pc_wsc_t *open_ws(const char *path)
{
	pc_wsc_options_t o = {.host = "127.0.0.1", .port = port, .path = path, .user = &seen,
			      .open_timeout_ms = 3000};
	pc_wsc_t *c = NULL;
	cr_assert_eq(pc_wsc_open(io, &o, owner, &c), 0);
	return c;
}

static void last_is(const char *want)
{
	pthread_mutex_lock(&seen_mu);
	cr_assert_str_eq(seen.last, want);
	pthread_mutex_unlock(&seen_mu);
}

static pthread_mutex_t trace_mu = PTHREAD_MUTEX_INITIALIZER;
static char trace_text[4096];

static void trace_sink(void *user, const char *line)
{
	(void)user;
	pthread_mutex_lock(&trace_mu);
	const char *p = line;
	for (int i = 0; i < 3 && p; i++) {
		p = strchr(p, ' ');
		if (p)
			p++;
	}
	size_t used = strlen(trace_text);
	snprintf(trace_text + used, sizeof(trace_text) - used, "%s\n", p ? p : line);
	pthread_mutex_unlock(&trace_mu);
}

Test(ws_client, messages_both_ways_and_our_close)
{
	pc_io_trace_set("wsclient", trace_sink, NULL);
	start();
	pc_wsc_t *c = open_ws("/ws");
	AWAIT(LOAD(seen.opened) == 1, 3000);
	cr_assert_eq(seen.user, &seen);
	cr_assert_eq(pc_wsc_state(c), PC_WSC_OPEN);
	cr_assert_eq(pc_wsc_send(c, PC_WS_TEXT, "hello", 5), 0);
	AWAIT(LOAD(seen.messages) == 1, 3000);
	last_is("1:hello");
	/* a message larger than one read, and a binary one */
	size_t big = 200000;
	char *buf = malloc(big + 1);
	memset(buf, 'x', big);
	buf[big] = 0;
	cr_assert_eq(pc_wsc_send(c, PC_WS_TEXT, buf, big), 0);
	cr_assert_eq(pc_wsc_send(c, PC_WS_BINARY, "b", 1), 0);
	AWAIT(LOAD(seen.messages) == 3, 3000);
	last_is("2:b");
	free(buf);
	cr_assert_eq(pc_wsc_close(c, 1000, "done"), 0);
	AWAIT(LOAD(seen.closed) == 1, 3000);
	cr_assert_eq(seen.end.outcome, PC_WSC_CLOSED);
	cr_assert_eq(seen.end.reason, 0);
	cr_assert_eq(seen.end.code, 1000);
	cr_assert_eq(seen.end.http_status, 101);
	cr_assert_eq(pc_wsc_send(c, PC_WS_TEXT, "late", 4), PC_ESTOPPED);
	pc_wsc_release(c);
	pthread_mutex_lock(&trace_mu);
	cr_assert_str_eq(trace_text,
			 "connecting -> handshaking (connected)\n"
			 "handshaking -> open (101)\n"
			 "open -> closing (owner close)\n"
			 "closing -> closed (close handshake done)\n",
			 "traced:\n%s", trace_text);
	pthread_mutex_unlock(&trace_mu);
	pc_io_stats_t st;
	pc_io_stats(io, &st);
	cr_assert_eq(st.transitions_refused, 0);
	stop();
}

Test(ws_client, the_server_closes)
{
	start();
	pc_wsc_t *c = open_ws("/ws");
	AWAIT(LOAD(seen.opened) == 1, 3000);
	cr_assert_eq(pc_wsc_send(c, PC_WS_TEXT, "close", 5), 0);
	AWAIT(LOAD(seen.closed) == 1, 3000);
	cr_assert_eq(seen.end.outcome, PC_WSC_CLOSED);
	cr_assert_eq(seen.end.code, 4000);
	cr_assert_str_eq(seen.end.text, "bye");
	cr_assert_eq(pc_wsc_state(c), PC_WSC_CLOSED);
	pc_wsc_release(c);
	stop();
}

Test(ws_client, a_refused_connect_fails)
{
	start();
	/* a port nobody listens on: bound, never listened */
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof(a);
	cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	cr_assert_eq(getsockname(fd, (struct sockaddr *)&a, &al), 0);
	pc_wsc_options_t o = {.host = "127.0.0.1", .port = ntohs(a.sin_port)};
	pc_wsc_t *c = NULL;
	cr_assert_eq(pc_wsc_open(io, &o, owner, &c), 0);
	AWAIT(LOAD(seen.closed) == 1, 3000);
	close(fd);
	cr_assert_eq(seen.end.outcome, PC_WSC_FAILED);
	cr_assert_eq(seen.end.reason, PC_ESYS);
	cr_assert_eq(seen.end.sys_errno, ECONNREFUSED);
	cr_assert_eq(LOAD(seen.opened), 0);
	cr_assert_eq(pc_wsc_send(c, PC_WS_TEXT, "x", 1), PC_ESTOPPED);
	pc_wsc_release(c);
	stop();
}

Test(ws_client, a_refused_upgrade_fails_with_its_status)
{
	start();
	pc_wsc_t *c = open_ws("/nope");
	AWAIT(LOAD(seen.closed) == 1, 3000);
	cr_assert_eq(seen.end.outcome, PC_WSC_FAILED);
	cr_assert_eq(seen.end.reason, PC_ESTATE);
	cr_assert_eq(seen.end.http_status, 404);
	pc_wsc_release(c);
	stop();
}

Test(ws_client, a_silent_server_times_the_open_out)
{
	start();
	/* listens, never answers */
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof(a);
	cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	cr_assert_eq(listen(fd, 4), 0);
	cr_assert_eq(getsockname(fd, (struct sockaddr *)&a, &al), 0);
	pc_wsc_options_t o = {.port = ntohs(a.sin_port), .open_timeout_ms = 200};
	pc_wsc_t *c = NULL;
	cr_assert_eq(pc_wsc_open(io, &o, owner, &c), 0);
	AWAIT(LOAD(seen.closed) == 1, 3000);
	cr_assert_eq(seen.end.outcome, PC_WSC_FAILED);
	cr_assert_eq(seen.end.reason, PC_ETIMEDOUT);
	close(fd);
	pc_wsc_release(c);
	stop();
}

Test(ws_client, release_and_io_free_end_live_connections)
{
	start();
	pc_wsc_t *a = open_ws("/ws");
	AWAIT(LOAD(seen.opened) == 1, 3000);
	pc_wsc_release(a); /* ends it: CLOSED still comes */
	AWAIT(LOAD(seen.closed) == 1, 3000);
	cr_assert_eq(seen.end.outcome, PC_WSC_FAILED);
	cr_assert_eq(seen.end.reason, PC_ESTOPPED);
	/* one that waits for an upgrade that never comes when the loop stops */
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof(sa);
	cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	cr_assert_eq(listen(fd, 4), 0);
	cr_assert_eq(getsockname(fd, (struct sockaddr *)&sa, &al), 0);
	pc_wsc_options_t o = {.port = ntohs(sa.sin_port)};
	pc_wsc_t *b = NULL;
	cr_assert_eq(pc_wsc_open(io, &o, owner, &b), 0);
	AWAIT(pc_wsc_state(b) == PC_WSC_HANDSHAKING, 3000);
	pc_http_server_free(srv);
	srv = NULL;
	pc_io_free(io);
	io = NULL;
	AWAIT(LOAD(seen.closed) == 2, 3000);
	cr_assert_eq(seen.end.outcome, PC_WSC_FAILED);
	cr_assert_eq(seen.end.reason, PC_ESTOPPED);
	cr_assert_eq(pc_wsc_state(b), PC_WSC_FAILED);
	cr_assert_eq(pc_wsc_close(b, 1000, NULL), 0);
	cr_assert_eq(pc_wsc_send(b, PC_WS_TEXT, "x", 1), PC_ESTOPPED);
	pc_wsc_release(b);
	close(fd);
	pc_actor_release(server_actor);
	pc_actor_release(owner);
	assert_no_failures();
	FREE_RUNTIME_CHECKED(rt);
}

Test(ws_client, bad_options)
{
	start();
	pc_wsc_t *c = NULL;
	pc_wsc_options_t o = {.port = 0};
	cr_assert_eq(pc_wsc_open(io, &o, owner, &c), PC_EINVAL);
	o.port = port;
	o.path = "no-slash";
	cr_assert_eq(pc_wsc_open(io, &o, owner, &c), PC_EINVAL);
	o.path = "/a b";
	cr_assert_eq(pc_wsc_open(io, &o, owner, &c), PC_EINVAL);
	o.path = NULL;
	o.host = "no-such-host.invalid";
	cr_assert_eq(pc_wsc_open(io, &o, owner, &c), PC_ESYS);
	stop();
}

Test(ws_client_lifecycle, the_table)
{
	cr_assert(pc_wsc_state_legal(PC_WSC_CONNECTING, PC_WSC_HANDSHAKING));
	cr_assert(pc_wsc_state_legal(PC_WSC_HANDSHAKING, PC_WSC_OPEN));
	cr_assert(pc_wsc_state_legal(PC_WSC_OPEN, PC_WSC_CLOSING));
	cr_assert(pc_wsc_state_legal(PC_WSC_OPEN, PC_WSC_CLOSED));
	cr_assert(pc_wsc_state_legal(PC_WSC_CLOSING, PC_WSC_CLOSED));
	for (int s = 0; s < PC_WSC_CLOSED; s++)
		cr_assert(pc_wsc_state_legal((pc_wsc_state_t)s, PC_WSC_FAILED), "%s -> failed",
			  pc_wsc_state_name((pc_wsc_state_t)s));
	cr_assert(!pc_wsc_state_legal(PC_WSC_CONNECTING, PC_WSC_OPEN), "the upgrade comes first");
	cr_assert(!pc_wsc_state_legal(PC_WSC_HANDSHAKING, PC_WSC_CLOSED), "closed needs a close handshake");
	cr_assert(!pc_wsc_state_legal(PC_WSC_CLOSING, PC_WSC_OPEN));
	for (int s = 0; s < PC_WSC_COUNT; s++) {
		cr_assert(!pc_wsc_state_legal(PC_WSC_CLOSED, (pc_wsc_state_t)s));
		cr_assert(!pc_wsc_state_legal(PC_WSC_FAILED, (pc_wsc_state_t)s));
		cr_assert_str_neq(pc_wsc_state_name((pc_wsc_state_t)s), "unknown");
	}
	cr_assert_str_eq(pc_wsc_state_name(PC_WSC_HANDSHAKING), "handshaking");
	cr_assert_str_eq(pc_wsc_state_name(PC_WSC_COUNT), "unknown");
}
