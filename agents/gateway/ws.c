/*
 * The WebSocket RPC's actors (§8): the route actor for GET "/", which
 * upgrades each WebSocket to a connection actor of its own, and the
 * connection actors, which speak the protocol (rpc.c, rpc_methods.c).
 *
 * A connection actor lives from the upgrade until the server says CLOSED
 * (or the runtime stops it). Its state is small (pc__gw_conn_t plus what
 * is in flight) and is touched by no one else. Connections are listed in
 * the part's registry so that pc__gw_ws_shutdown can tell each of them;
 * the part counts its live actors so that pc__gw_ws_free frees nothing an
 * actor may still read.
 *
 * Before connect a connection takes frames of at most 64 KiB
 * (PC_GATEWAY_PREAUTH_MAX_PAYLOAD, enforced by the I/O layer: close 1009)
 * and must connect within gateway.handshakeTimeoutMs (close 1008).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agents/obs/obs.h"
#include "rpc_internal.h"
#include "runtime/clock.h"

/* ---- the client's machine ---- */

#define BIT(p) (1u << (p))

static const char *const phase_names[PC__GW_C_COUNT] = {
	[PC__GW_C_NEW] = "new",         [PC__GW_C_CHALLENGE] = "challenge", [PC__GW_C_OPEN] = "open",
	[PC__GW_C_CLOSING] = "closing", [PC__GW_C_CLOSED] = "closed",
};

/* phase_next[from]: the phases `from` may go to. */
static const unsigned phase_next[PC__GW_C_COUNT] = {
	[PC__GW_C_NEW] = BIT(PC__GW_C_CHALLENGE) | BIT(PC__GW_C_CLOSED),
	[PC__GW_C_CHALLENGE] = BIT(PC__GW_C_OPEN) | BIT(PC__GW_C_CLOSING) | BIT(PC__GW_C_CLOSED),
	[PC__GW_C_OPEN] = BIT(PC__GW_C_CLOSING) | BIT(PC__GW_C_CLOSED),
	[PC__GW_C_CLOSING] = BIT(PC__GW_C_CLOSED),
};

const char *pc__gw_phase_name(pc__gw_phase_t p)
{
	return (unsigned)p < PC__GW_C_COUNT ? phase_names[p] : "unknown";
}

bool pc__gw_phase_legal(pc__gw_phase_t from, pc__gw_phase_t to)
{
	return (unsigned)from < PC__GW_C_COUNT && (unsigned)to < PC__GW_C_COUNT && (phase_next[from] & BIT(to));
}

void pc__gw_phase_set(pc__gw_conn_t *c, pc__gw_phase_t to, const char *why)
{
	pc__gw_phase_t from = (pc__gw_phase_t)c->phase;
	pc_gateway_t *g = c->g;
	if (!pc__gw_phase_legal(from, to)) {
		if (g->gwclient_illegal)
			(void)pc_metric_inc(g->gwclient_illegal);
		if (g->log)
			(void)pc_log_kv(g->log, PC_LOG_WARN, "illegal gwclient transition", PC_LF_STR("connId", c->conn_id),
					PC_LF_STR("from", pc__gw_phase_name(from)), PC_LF_STR("to", pc__gw_phase_name(to)),
					PC_LF_STR("why", why));
		return;
	}
	c->phase = (uint8_t)to;
	if (g->trace_gwclient)
		pc_trace_transition(g->log, "gwclient", c->conn_id, pc__gw_phase_name(from), pc__gw_phase_name(to), why);
}

/* ---- sending ---- */

void pc__gw_send(pc__gw_conn_t *c, const char *text, size_t len)
{
	if (pc__gw_conn_gone(c))
		return;
	/* PC_ENOTFOUND: the client has gone and CLOSED is on its way. */
	(void)pc_ws_send(c->srv, c->id, PC_WS_TEXT, text, len);
}

void pc__gw_close(pc__gw_conn_t *c, uint16_t code, const char *reason)
{
	if (pc__gw_conn_gone(c))
		return;
	pc__gw_phase_set(c, PC__GW_C_CLOSING, reason);
	pc_timer_cancel(c->g->rt, c->handshake_timer);
	pc_timer_cancel(c->g->rt, c->tick_timer);
	c->handshake_timer = c->tick_timer = 0;
	(void)pc_ws_close(c->srv, c->id, code, reason);
}

/* ---- the registry ---- */

static void registry_add(pc__gw_conn_t *c)
{
	struct pc__gw_ws *ws = c->ws;
	pthread_mutex_lock(&ws->lock);
	c->next = ws->conns;
	if (ws->conns)
		ws->conns->prev = c;
	ws->conns = c;
	ws->nconns++;
	c->registered = true;
	pthread_mutex_unlock(&ws->lock);
}

static void registry_remove(pc__gw_conn_t *c)
{
	struct pc__gw_ws *ws = c->ws;
	if (!c->registered)
		return;
	pthread_mutex_lock(&ws->lock);
	if (c->prev)
		c->prev->next = c->next;
	else
		ws->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	ws->nconns--;
	c->registered = false;
	pthread_mutex_unlock(&ws->lock);
}

/* ---- the connection actor ---- */

static void conn_start(pc_ctx_t *ctx, pc__gw_conn_t *c)
{
	c->self = pc_actor_retain(pc_self(ctx));
	registry_add(c);
	c->challenge_ts = pc__clock_wall_ms();
	int rc = pc__gw_nonce(c->nonce);
	if (rc == 0)
		rc = pc_ws_accept_capped(c->srv, c->id, c->self, NULL, (uint32_t)PC_GATEWAY_PREAUTH_MAX_PAYLOAD);
	if (rc != 0) {
		/* The client left before the upgrade (or no randomness): the
		 * server answered it or will close it; nothing to say. */
		if (rc != PC_ENOTFOUND)
			(void)pc_http_respond(c->srv, c->id, 503, NULL, NULL, 0);
		pc__gw_phase_set(c, PC__GW_C_CLOSED, rc == PC_ENOTFOUND ? "client gone" : "not accepted");
		pc_exit(ctx, PC_EXIT_NORMAL);
		return;
	}
	pc__gw_phase_set(c, PC__GW_C_CHALLENGE, "accepted");
	pc__gw_send_challenge(c);
	pc_msg_t *t = pc_msg_new(PC__GW_MSG_HANDSHAKE_TIMEOUT, 0);
	if (!t || pc_timer_after(c->self, c->g->gcfg->handshake_ms, t, &c->handshake_timer) != 0) {
		/* Without the deadline a silent client would stay: refuse. */
		pc__gw_close(c, 1011, "server busy");
	}
}

static const char *msg_text(const pc_msg_t *m)
{
	return m->size ? (const char *)pc_msg_cdata(m) : "";
}

static int conn_receive(pc_ctx_t *ctx, void *state, pc_msg_t *msg)
{
	pc__gw_conn_t *c = state;
	switch (msg->type) {
	case PC__GW_MSG_START:
		conn_start(ctx, c);
		break;
	case PC_MSG_WS_MESSAGE: {
		const pc_ws_message_msg_t *m = pc_msg_cdata(msg);
		pc__gw_on_frame(ctx, c, m->data, m->len);
		break;
	}
	case PC_MSG_WS_DRAINED:
		pc__gw_on_drained(c);
		break;
	case PC_MSG_WS_CLOSED:
		pc__gw_phase_set(c, PC__GW_C_CLOSED, "socket closed");
		pc__gw_relay_free(c);
		pc__gw_release_work(c);
		pc_exit(ctx, PC_EXIT_NORMAL);
		break;
	case PC__GW_MSG_HANDSHAKE_TIMEOUT:
		if (c->phase == PC__GW_C_CHALLENGE)
			pc__gw_close(c, 1008, "handshake timeout");
		break;
	case PC__GW_MSG_TICK:
		if (c->phase == PC__GW_C_OPEN)
			pc__gw_send_tick(c);
		break;
	case PC__GW_MSG_SHUTDOWN:
		pc__gw_send_shutdown(c, msg_text(msg));
		break;
	case PC__GW_MSG_UNPAIRED:
		if (!pc__gw_conn_gone(c))
			pc__gw_close(c, 1008, "device unpaired");
		break;
	case PC__GW_MSG_EVENTS:
		pc__gw_on_events(ctx, c, pc_msg_u64(msg));
		break;
	case PC__GW_MSG_WAIT_TIMEOUT:
		pc__gw_on_wait_timeout(c, pc_msg_u64(msg));
		break;
	case PC__GW_MSG_CHAT_FLUSH:
		pc__gw_on_chat_flush(c, pc_msg_u64(msg));
		break;
	case PC__GW_MSG_DELTA_FLUSH:
		pc__gw_on_delta_flush(c, pc_msg_u64(msg));
		break;
	case PC__GW_MSG_FEED:
		pc__gw_on_feed(c);
		break;
	case PC_MSG_AGENT_ACCEPTED:
		pc__gw_on_accepted(ctx, c, msg);
		break;
	case PC_MSG_AGENT_RUN_INFO:
		pc__gw_on_run_info(ctx, c, msg);
		break;
	case PC_STORE_MSG_REPLY:
		pc__gw_on_store_reply(c, msg);
		break;
	case PC_STORE_MSG_HISTORY:
		if (!pc__gw_on_resolve_history(ctx, c, msg))
			pc__gw_on_history(c, msg);
		break;
	case PC_STORE_MSG_SESSIONS:
		pc__gw_on_sessions(c, msg);
		break;
	case PC_STORE_MSG_USAGE:
		pc__gw_on_usage(c, msg);
		break;
	case PC__GW_MSG_RELAY_CHECK:
		pc__gw_relay_check(ctx, c);
		break;
	case PC_MSG_WSC_OPEN:
	case PC_MSG_WSC_MESSAGE:
	case PC_MSG_WSC_CLOSED:
		pc__gw_relay_on_link(ctx, c, msg);
		break;
	default:
		break;
	}
	return 0;
}

static void conn_stop(pc_ctx_t *ctx, void *state, int reason)
{
	(void)ctx;
	(void)reason;
	pc__gw_conn_t *c = state;
	struct pc__gw_ws *ws = c->ws;
	if (c->phase != PC__GW_C_CLOSED)
		pc__gw_phase_set(c, PC__GW_C_CLOSED, "stopped");
	pc__gw_relay_free(c);
	pc__gw_release_work(c);
	pc_timer_cancel(c->g->rt, c->handshake_timer);
	pc_timer_cancel(c->g->rt, c->tick_timer);
	registry_remove(c);
	pc_actor_release(c->self);
	free(c);
	/* The last touch: the part may be freed right after. */
	__atomic_sub_fetch(&ws->live, 1, __ATOMIC_ACQ_REL);
}

static const pc_behavior_t conn_behavior = {"gateway.ws.conn", conn_receive, conn_stop};

/* ---- the route ---- */

static void answer_plain(const pc_http_request_msg_t *req, int status, const char *extra, const char *body)
{
	char headers[160];
	snprintf(headers, sizeof(headers), "Content-Type: text/plain; charset=utf-8\r\n%s", extra ? extra : "");
	(void)pc_http_respond(req->server, req->id, status, headers, body, strlen(body));
}

static void on_request(pc_ctx_t *ctx, struct pc__gw_ws *ws, const pc_http_request_msg_t *req)
{
	if (!req->upgrade && pc__gw_ui_serves(ws->g)) {
		pc__gw_ui_request(ws->g, req); /* the Control UI's page (ui.c) */
		return;
	}
	pc__gw_client_t who;
	const char *why;
	int status = pc__gw_admit(ws->g, req, &who, &why);
	if (status != 0) {
		char body[256];
		snprintf(body, sizeof(body), "%s\n", why);
		answer_plain(req, status, NULL, body);
		return;
	}
	if (!req->upgrade) {
		answer_plain(req, 426, "Upgrade: websocket\r\n",
			     "Pincer gateway: connect with a WebSocket (OpenClaw gateway protocol).\n");
		return;
	}
	const char *origin = pc_http_request_header(req, "origin");
	pc__gw_conn_t *c = calloc(1, sizeof(*c));
	if (!c) {
		answer_plain(req, 503, NULL, "out of memory\n");
		return;
	}
	c->ws = ws;
	c->g = ws->g;
	c->srv = req->server;
	c->id = req->id;
	c->client = who;
	/* a page from an allowed origin elsewhere may connect, but only the
	 * gateway's own pages pair devices on sight */
	c->loopback = who.loopback && (!origin || pc__gw_origin_own(ws->g, origin));
	snprintf(c->conn_id, sizeof(c->conn_id), "conn-%llu",
		 (unsigned long long)__atomic_add_fetch(&ws->next_conn, 1, __ATOMIC_RELAXED));
	__atomic_add_fetch(&ws->live, 1, __ATOMIC_ACQ_REL);
	pc_actor_t *a = NULL;
	if (pc_spawn_start(pc_ctx_runtime(ctx), &conn_behavior, c, PC__GW_MSG_START, &a) != 0) {
		__atomic_sub_fetch(&ws->live, 1, __ATOMIC_ACQ_REL);
		free(c);
		answer_plain(req, 503, NULL, "server busy\n");
		return;
	}
	pc_actor_release(a);
}

static int route_receive(pc_ctx_t *ctx, void *state, pc_msg_t *msg)
{
	if (msg->type == PC_MSG_HTTP_REQUEST)
		on_request(ctx, state, pc_msg_cdata(msg));
	/* PC_MSG_HTTP_GONE: a plain request's client left; nothing held. */
	return 0;
}

static void route_stop(pc_ctx_t *ctx, void *state, int reason)
{
	(void)ctx;
	(void)reason;
	struct pc__gw_ws *ws = state;
	__atomic_sub_fetch(&ws->live, 1, __ATOMIC_ACQ_REL);
}

static const pc_behavior_t route_behavior = {"gateway.ws.route", route_receive, route_stop};

/* ---- the part's life ---- */

int pc__gw_ws_new(pc_gateway_t *g)
{
	struct pc__gw_ws *ws = calloc(1, sizeof(*ws));
	if (!ws)
		return PC_ENOMEM;
	if (pthread_mutex_init(&ws->lock, NULL) != 0) {
		free(ws);
		return PC_ESYS;
	}
	ws->g = g;
	ws->live = 1;
	int rc = pc__gw_devices_load(ws);
	if (rc == 0)
		rc = pc_spawn(g->rt, &route_behavior, ws, &ws->route);
	if (rc != 0) {
		pc__gw_devices_free(ws);
		pthread_mutex_destroy(&ws->lock);
		free(ws);
		return rc;
	}
	g->ws = ws;
	g->ws_route = ws->route;
	return 0;
}

void pc__gw_ws_stats(pc_gateway_t *g, pc__gw_ws_stats_t *out)
{
	memset(out, 0, sizeof(*out));
	struct pc__gw_ws *ws = g ? g->ws : NULL;
	if (!ws)
		return;
	pthread_mutex_lock(&ws->lock);
	out->open = ws->nconns;
	pthread_mutex_unlock(&ws->lock);
	out->connected = __atomic_load_n(&ws->opened, __ATOMIC_RELAXED);
}

void pc__gw_ws_shutdown(pc_gateway_t *g, const char *reason)
{
	struct pc__gw_ws *ws = g ? g->ws : NULL;
	if (!ws)
		return;
	if (!reason)
		reason = "shutdown";
	pthread_mutex_lock(&ws->lock);
	ws->draining = true;
	snprintf(ws->shutdown_reason, sizeof(ws->shutdown_reason), "%s", reason);
	size_t n = strlen(ws->shutdown_reason) + 1;
	for (pc__gw_conn_t *c = ws->conns; c; c = c->next) {
		pc_msg_t *m = pc_msg_new(PC__GW_MSG_SHUTDOWN, n);
		if (!m)
			continue; /* that client hears of the drain when its socket closes */
		memcpy(pc_msg_data(m), ws->shutdown_reason, n);
		(void)pc_send(c->self, m);
	}
	pthread_mutex_unlock(&ws->lock);
}

void pc__gw_ws_free(pc_gateway_t *g)
{
	struct pc__gw_ws *ws = g ? g->ws : NULL;
	if (!ws)
		return;
	/* The server is gone: every connection has been told CLOSED (or
	 * never gets accepted), and the route hears nothing new. */
	(void)pc_actor_stop(ws->route, PC_EXIT_NORMAL);
	pc_actor_release(ws->route);
	while (__atomic_load_n(&ws->live, __ATOMIC_ACQUIRE) > 0)
		pc__gw_nap_ms(1);
	pc__gw_devices_free(ws);
	pthread_mutex_destroy(&ws->lock);
	free(ws);
	g->ws = NULL;
	g->ws_route = NULL;
}
