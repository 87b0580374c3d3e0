/*
 * The gateway's life cycle (gateway.h): the HTTP server and its routes,
 * ready, drain, free. The routes' work is in ws.c, openai.c, ops.c and ui.c.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gateway_internal.h"
#include "http_util_internal.h"
#include "agents/obs/obs.h"
#include "io/io.h"
#include "runtime/clock.h"

static uint32_t cap32(uint64_t v) { return v > UINT32_MAX ? UINT32_MAX : (uint32_t)v; }

static int add_routes(pc_gateway_t *g)
{
	static const char *const ops_paths[] = {"/livez", "/readyz", "/healthz", "/health", "/metrics"};
	int rc = pc_http_server_route(g->srv, "GET", "/", g->ws_route);
	if (rc == 0)
		rc = pc_http_server_route(g->srv, NULL, "/v1/*", g->openai_route);
	for (size_t i = 0; rc == 0 && i < sizeof(ops_paths) / sizeof(ops_paths[0]); i++)
		rc = pc_http_server_route(g->srv, NULL, ops_paths[i], g->ops_route);
	/* last: whatever no other route took is the UI's */
	if (rc == 0 && g->ui_route)
		rc = pc_http_server_route(g->srv, NULL, "/*", g->ui_route);
	return rc;
}

/* The rule that only loopback may go without auth, on the address the
 * gateway will actually bind, whatever chose it (flag, environment, file
 * or an embedding program's own structure). The address is numeric: no
 * name is resolved, so none can resolve elsewhere later. */
static int check_bind(const pc_gateway_config_t *gc, const char *host)
{
	pc_netaddr_t a;
	if (pc_netaddr_parse(host, strlen(host), &a) != 0)
		return PC_EINVAL;
	switch (gc->auth) {
	case PC_GATEWAY_AUTH_NONE:
		return pc_netaddr_is_loopback(&a) ? 0 : PC_EPERM;
	case PC_GATEWAY_AUTH_TOKEN:
		return gc->token && gc->token[0] ? 0 : PC_EINVAL;
	case PC_GATEWAY_AUTH_PASSWORD:
		return gc->password && gc->password[0] ? 0 : PC_EINVAL;
	}
	return PC_EINVAL;
}

/* Frees the server, then the parts it served, then the gateway: no
 * request reaches the parts once the server is gone. The io trace's sink
 * goes back after the server, so its connections' last lines still reach
 * the log. */
static void free_parts(pc_gateway_t *g)
{
	pc__gw_ui_quiesce(g);
	pc_http_server_free(g->srv);
	if (g->io_trace_claimed)
		pc_io_trace_release(g->log);
	pc__gw_ui_free(g);
	pc__gw_ops_free(g);
	pc__gw_openai_free(g);
	pc__gw_ws_free(g);
	pc__gw_cluster_free(g); /* after the parts that read it */
	pc__gw_limiter_free(g->limiter);
	pc__gw_guard_free(g);
	free(g);
}

int pc_gateway_new(const pc_gateway_options_t *o, pc_gateway_t **out)
{
	if (!o || !o->rt || !o->io || !o->agent || !o->config || !out)
		return PC_EINVAL;
	const pc_gateway_config_t *gc = &o->config->gateway;
	const char *host = o->bind ? o->bind : gc->bind ? gc->bind : "127.0.0.1";
	if (!strcmp(host, "localhost"))
		host = "127.0.0.1";
	int rc = check_bind(gc, host);
	if (rc != 0)
		return rc;
	pc_gateway_t *g = calloc(1, sizeof(*g));
	if (!g)
		return PC_ENOMEM;
	g->rt = o->rt;
	g->io = o->io;
	g->agent = o->agent;
	g->cfg = o->config;
	g->gcfg = &o->config->gateway;
	g->hooks = o->hooks;
	g->log = o->log;
	g->started_wall_ms = pc__clock_wall_ms();
	g->started_mono_ms = pc_runtime_now_ms();
	snprintf(g->host, sizeof(g->host), "%s", host);
	/* The io machines' trace lines (PINCER_TRACE=http,ws,...) go to the
	 * gateway's log, as the agent's own do. The sink is one per process
	 * and the first claim keeps it (io.h): a second gateway's lines go to
	 * the first one's log. */
	if (g->log)
		g->io_trace_claimed = pc_io_trace_claim(pc_trace_io_line, g->log);
	g->trace_gwclient = (pc_trace_parse(getenv("PINCER_TRACE")) & PC_TRACE_GWCLIENT) != 0;
	g->gwclient_illegal = pc_agent_lifecycle_illegal(g->agent, "gwclient");
	/* The server enforces the post-connect caps; the tighter pre-connect
	 * cap is the connection's own (ws.c). */
	pc_http_server_config_t sc = {
		.host = g->host,
		.port = o->port >= 0 ? (uint16_t)o->port : g->gcfg->port,
		.limits = {
			.max_frame_bytes = cap32(g->gcfg->max_payload),
			.max_message_bytes = cap32(g->gcfg->max_payload),
			.max_output_bytes = cap32(g->gcfg->max_buffered),
			.max_body_bytes = cap32(g->gcfg->max_payload),
		},
		.on_access = g->log ? pc__gw_access : NULL,
		.access_user = g,
	};
	rc = pc__gw_guard_new(g);
	if (rc == 0)
		rc = pc__gw_limiter_new(&g->gcfg->auth_limit, &g->limiter);
	if (rc == 0)
		rc = pc_http_server_new(g->io, &sc, &g->srv);
	if (rc == 0)
		rc = pc__gw_ws_new(g);
	if (rc == 0)
		rc = pc__gw_openai_new(g);
	if (rc == 0)
		rc = pc__gw_ops_new(g);
	if (rc == 0)
		rc = pc__gw_ui_new(g);
	if (rc == 0)
		rc = add_routes(g);
	if (rc != 0) {
		int e = errno; /* PC_ESYS: the caller reads why (a taken port) */
		g->state = PC__GW_STOPPED;
		free_parts(g);
		errno = e;
		return rc;
	}
	g->port = pc_http_server_port(g->srv);
	*out = g;
	return 0;
}

/* An observation hook with the gateway's address. Its handlers run on the
 * blocking pool under their own timeouts (gateway_stop: 5 s), so they may
 * finish after the gateway is gone: they get the address, not the
 * gateway. */
static void gateway_hook(pc_gateway_t *g, pc_hook_point_t p)
{
	if (!pc_hooks_active(g->hooks, p, NULL))
		return;
	cJSON *ev = cJSON_CreateObject();
	if (ev) {
		cJSON_AddStringToObject(ev, "bind", g->host);
		cJSON_AddNumberToObject(ev, "port", g->port);
	}
	pc_hooks_notify(g->rt, g->hooks, p, ev, NULL, NULL);
}

int pc_gateway_start(pc_gateway_t *g)
{
	if (!g || pc__gw_state(g) != PC__GW_STARTING)
		return PC_ESTATE;
	int rc = pc_http_server_start(g->srv);
	if (rc == 0)
		rc = pc__gw_cluster_start(g);
	if (rc != 0)
		return rc;
	g->ready_mono_ms = pc_runtime_now_ms();
	__atomic_store_n(&g->state, PC__GW_READY, __ATOMIC_RELEASE);
	gateway_hook(g, PC_HOOK_GATEWAY_START);
	return 0;
}

uint16_t pc_gateway_port(const pc_gateway_t *g) { return g ? g->port : 0; }

bool pc_gateway_ready(const pc_gateway_t *g) { return g && pc__gw_state(g) == PC__GW_READY; }

/* Runs still going, and clients still owed their final answers (a run
 * ends before its last event reaches the client's connection actor). */
static uint64_t work_left(pc_gateway_t *g)
{
	pc_agent_stats_t st;
	pc_agent_stats(g->agent, &st);
	pc__gw_openai_stats_t oa;
	pc__gw_openai_stats(g, &oa);
	return st.runs_active + __atomic_load_n(&g->answers_owed, __ATOMIC_ACQUIRE) + oa.active;
}

int pc_gateway_drain(pc_gateway_t *g, int64_t deadline_ms)
{
	if (!g)
		return PC_EINVAL;
	uint64_t grace = deadline_ms < 0 ? g->gcfg->drain_ms : (uint64_t)deadline_ms;
	uint64_t until = pc_runtime_now_ms() + grace;
	/* set before the state, so whoever sees draining reads a deadline */
	uint64_t none = 0;
	__atomic_compare_exchange_n(&g->drain_until_ms, &none, until, false, __ATOMIC_RELEASE, __ATOMIC_RELAXED);
	int expected = PC__GW_READY;
	if (!__atomic_compare_exchange_n(&g->state, &expected, PC__GW_DRAINING, false, __ATOMIC_ACQ_REL,
					 __ATOMIC_ACQUIRE)) {
		if (expected != PC__GW_STARTING)
			return 0; /* draining or drained already */
		__atomic_store_n(&g->state, PC__GW_DRAINING, __ATOMIC_RELEASE);
	}
	pc__gw_ws_shutdown(g, "draining");
	while (work_left(g) > 0 && pc_runtime_now_ms() < until)
		pc__gw_nap_ms(5);
	if (work_left(g) > 0)
		pc_agent_abort_all(g->agent);
	/* an aborted run still writes its end and is answered; wait for that,
	 * bounded */
	until = pc_runtime_now_ms() + 10000;
	while (work_left(g) > 0 && pc_runtime_now_ms() < until)
		pc__gw_nap_ms(5);
	return work_left(g) == 0 ? 0 : PC_ETIMEDOUT;
}

uint64_t pc__gw_retry_after_ms(const pc_gateway_t *g)
{
	uint64_t now = pc_runtime_now_ms(), wait = 0;
	if (pc__gw_state(g) == PC__GW_STARTING) {
		/* start-up has no deadline: what it took so far is the guess
		 * for what it still needs */
		wait = now - g->started_mono_ms;
	} else {
		/* draining: the rest of the deadline, after which this process
		 * is gone and a successor (if any) answers */
		uint64_t until = __atomic_load_n(&g->drain_until_ms, __ATOMIC_ACQUIRE);
		wait = until > now ? until - now : 0;
	}
	return wait < 1000 ? 1000 : wait;
}

void pc__gw_route_stop(pc_actor_t **route)
{
	if (!*route)
		return;
	bool asked = false;
	while (!pc_actor_stopped(*route)) {
		if (!asked)
			asked = pc_actor_stop(*route, PC_EXIT_SHUTDOWN) == 0;
		pc__gw_nap_ms(1);
	}
	pc_actor_release(*route);
	*route = NULL;
}

void pc_gateway_free(pc_gateway_t *g)
{
	if (!g)
		return;
	if (pc__gw_state(g) != PC__GW_DRAINING)
		pc_gateway_drain(g, -1);
	gateway_hook(g, PC_HOOK_GATEWAY_STOP);
	__atomic_store_n(&g->state, PC__GW_STOPPED, __ATOMIC_RELEASE);
	free_parts(g);
}

void pc__gw_uuid(char out[37])
{
	uint8_t b[16];
	pc__gw_random(b, sizeof(b));
	b[6] = (uint8_t)((b[6] & 0x0f) | 0x40);
	b[8] = (uint8_t)((b[8] & 0x3f) | 0x80);
	snprintf(out, 37, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2],
		 b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}
