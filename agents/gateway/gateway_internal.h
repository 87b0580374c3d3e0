/*
 * What the gateway's parts share. gateway.c owns the HTTP server and the
 * life cycle; each part serves its routes with its own actor:
 *
 *   ws.c, rpc*.c   the WebSocket RPC on "/" (connections, handshake,
 *                  methods, events)
 *   openai.c       /v1/chat/completions, /v1/models
 *   ops.c          /livez /readyz /healthz /health /metrics
 *
 * A part is created after the server (its route actor registered before
 * the server starts) and freed after the server is gone (no request can
 * reach it any more). Parts keep their own state behind the pointers
 * below.
 */
#ifndef PINCER_AGENTS_GATEWAY_GATEWAY_INTERNAL_H
#define PINCER_AGENTS_GATEWAY_GATEWAY_INTERNAL_H

#include <pthread.h>
#include <time.h>

#include "../../io/http_server.h"
#include "gateway.h"

enum {
	PC__GW_STARTING = 0,
	PC__GW_READY,
	PC__GW_DRAINING, /* no new work; runs finishing */
	PC__GW_STOPPED,
};

struct pc__gw_ws;
struct pc__gw_openai;
struct pc__gw_ops;

struct pc_gateway {
	pc_runtime_t *rt;
	pc_io_t *io;
	pc_agent_t *agent;
	const pc_config_t *cfg;
	const pc_gateway_config_t *gcfg; /* cfg->gateway */
	const pc_hooks_t *hooks;
	pc_http_server_t *srv;
	char host[64];
	uint16_t port;
	int state;                /* atomic: PC__GW_* */
	int64_t started_wall_ms;  /* when pc_gateway_new ran */
	uint64_t started_mono_ms;
	uint64_t ready_mono_ms;   /* when start completed */
	struct pc__gw_ws *ws;
	struct pc__gw_openai *openai;
	struct pc__gw_ops *ops;
	pc_actor_t *ws_route, *openai_route, *ops_route;
	uint64_t answers_owed;    /* atomic: WebSocket runs and submits whose
				   * final answer is not yet sent (drain waits) */
};

/* Counts an answer owed to a WebSocket client (+1) or sent (-1). */
static inline void pc__gw_owe(pc_gateway_t *g, int64_t d)
{
	__atomic_add_fetch(&g->answers_owed, (uint64_t)d, __ATOMIC_ACQ_REL);
}

/* The state, read atomically. */
static inline int pc__gw_state(const pc_gateway_t *g) { return __atomic_load_n(&g->state, __ATOMIC_ACQUIRE); }

/* Wall clock, ms since the epoch (what clients read as timestamps). */
static inline int64_t pc__gw_wall_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Sleeps the calling (plain) thread: the waits of start-up and shutdown. */
static inline void pc__gw_nap_ms(long ms)
{
	struct timespec ts = {0, ms * 1000000L};
	nanosleep(&ts, NULL);
}

/* Stops a part's route actor, waits until it has stopped (its stop
 * handler has run) and releases it; *route becomes NULL. NULL is a no-op.
 * From the thread that frees the gateway. */
void pc__gw_route_stop(pc_actor_t **route);

/* ws.c: the route actor for "/" (upgrades; a plain GET gets a short
 * answer). */
int pc__gw_ws_new(pc_gateway_t *g);
/* What the WebSocket part tells `status` and /metrics. */
typedef struct pc__gw_ws_stats {
	uint64_t open;      /* connections open now (handshake included) */
	uint64_t connected; /* connections that completed connect, since start */
} pc__gw_ws_stats_t;
/* Zeroes *out when the part does not exist. Any thread, while the gateway
 * lives. */
void pc__gw_ws_stats(pc_gateway_t *g, pc__gw_ws_stats_t *out);
/* Sends every connected client the `shutdown` event (drain). */
void pc__gw_ws_shutdown(pc_gateway_t *g, const char *reason);
void pc__gw_ws_free(pc_gateway_t *g);

/* openai.c */
int pc__gw_openai_new(pc_gateway_t *g);
void pc__gw_openai_free(pc_gateway_t *g);

/* ops.c */
int pc__gw_ops_new(pc_gateway_t *g);
void pc__gw_ops_free(pc_gateway_t *g);

#endif
