/*
 * What the gateway's parts share. gateway.c owns the HTTP server and the
 * life cycle; each part serves its routes with its own actor:
 *
 *   ws.c, rpc*.c   the WebSocket RPC on "/" (connections, handshake,
 *                  methods, events)
 *   openai.c       /v1/chat/completions, /v1/models
 *   ops.c          /livez /readyz /healthz /health /metrics
 *   ui.c           the Control UI's files, when gateway.controlUi.root is set
 *   cluster.c      the node's heartbeat in the store, when cluster is set
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

#include <cjson/cJSON.h>

#include "io/io.h"
#include "gateway.h"

enum {
	PC__GW_STARTING = 0,
	PC__GW_READY,
	PC__GW_DRAINING, /* no new work; runs finishing */
	PC__GW_STOPPED,
};

/* Why admission (guard.c) refused a request, as /metrics labels it. */
enum {
	PC__GW_REFUSED_MALFORMED = 0, /* no Host, two Hosts or Origins, an unreadable peer */
	PC__GW_REFUSED_REMOTE,        /* no auth, and not a loopback client */
	PC__GW_REFUSED_HOST,          /* no auth, and a Host that is not loopback */
	PC__GW_REFUSED_ORIGIN,        /* an Origin neither own nor allowed */
	PC__GW_REFUSALS
};
static inline const char *pc__gw_refusal_name(int r)
{
	static const char *const names[PC__GW_REFUSALS] = {"malformed", "remote", "host", "origin"};
	return r >= 0 && r < PC__GW_REFUSALS ? names[r] : "?";
}

/* The one agent this gateway serves, as OpenClaw's clients name it, and
 * the assistant's identity they show (the configuration gives none, so
 * OpenClaw's defaults): the Control UI's bootstrap (ui.c) and
 * agent.identity.get / agents.list (rpc_info.c) say the same. */
#define PC__GW_AGENT_ID "main"
#define PC__GW_ASSISTANT_NAME "Assistant"
#define PC__GW_ASSISTANT_AVATAR "A"

struct pc__gw_ws;
struct pc__gw_openai;
struct pc__gw_ops;
struct pc__gw_ui;
typedef struct pc__gw_limiter pc__gw_limiter_t;

struct pc_gateway {
	pc_runtime_t *rt;
	pc_io_t *io;
	pc_agent_t *agent;
	const pc_config_t *cfg;
	const pc_gateway_config_t *gcfg; /* cfg->gateway */
	const pc_hooks_t *hooks;
	pc_log_t *log;             /* borrowed; NULL: none */
	bool io_trace_claimed;     /* the io trace's sink is log (gateway.c) */
	bool trace_gwclient;       /* PINCER_TRACE names "gwclient" (read by pc_gateway_new) */
	pc_metric_t *gwclient_illegal; /* the agent's pincer_lifecycle_illegal_total{machine="gwclient"} */
	pc_http_server_t *srv;
	char host[64];
	uint16_t port;
	int state;                /* atomic: PC__GW_* */
	int64_t started_wall_ms;  /* when pc_gateway_new ran */
	uint64_t started_mono_ms;
	uint64_t ready_mono_ms;   /* when start completed */
	uint64_t drain_until_ms;  /* atomic: the drain's deadline (runtime clock); 0 before */
	struct pc__gw_ws *ws;
	struct pc__gw_openai *openai;
	struct pc__gw_ops *ops;
	struct pc__gw_ui *ui;     /* NULL: no Control UI (ui.c) */
	struct pc__gw_cluster *cluster; /* NULL: not a cluster's node, or not started (cluster.c) */
	pc_actor_t *ws_route, *openai_route, *ops_route, *ui_route;
	uint64_t answers_owed;    /* atomic: WebSocket runs and submits whose
				   * final answer is not yet sent (drain waits) */
	/* admission (guard.c): parsed once from the configuration */
	pc_origin_t *origins;     /* gateway.allowedOrigins */
	size_t norigins;
	pc_netcidr_t *proxies;    /* gateway.trustedProxies */
	size_t nproxies;
	pc__gw_limiter_t *limiter; /* failed secrets per client (auth_limit.c) */
	uint64_t refused[PC__GW_REFUSALS]; /* atomic: requests admission refused, by why */
};

/* Counts an answer owed to a WebSocket client (+1) or sent (-1). */
static inline void pc__gw_owe(pc_gateway_t *g, int64_t d)
{
	__atomic_add_fetch(&g->answers_owed, (uint64_t)d, __ATOMIC_ACQ_REL);
}

/* The state, read atomically. */
static inline int pc__gw_state(const pc_gateway_t *g) { return __atomic_load_n(&g->state, __ATOMIC_ACQUIRE); }

/* Sleeps the calling (plain) thread: the waits of start-up and shutdown. */
static inline void pc__gw_nap_ms(long ms)
{
	struct timespec ts = {0, ms * 1000000L};
	nanosleep(&ts, NULL);
}

/* How long a client refused for the gateway's state (starting,
 * draining) should wait before it tries again, in ms (at least 1 s). */
uint64_t pc__gw_retry_after_ms(const pc_gateway_t *g);

/* Stops a part's route actor, waits until it has stopped (its stop
 * handler has run) and releases it; *route becomes NULL. NULL is a no-op.
 * From the thread that frees the gateway. */
void pc__gw_route_stop(pc_actor_t **route);

/* ---- guard.c: admission ---- */

/* The client behind a request. */
typedef struct pc__gw_client {
	pc_netaddr_t addr;
	/* gets the loopback exemptions (serving without auth, pairing a
	 * device, no backoff): a loopback address, reached directly with no
	 * forwarding header, or named by a trusted proxy */
	bool loopback;
	bool forwarded; /* its address came from a trusted proxy's header */
} pc__gw_client_t;

/* Parses gateway.allowedOrigins and gateway.trustedProxies into g.
 * PC_EINVAL for an entry that does not parse; PC_ENOMEM. */
int pc__gw_guard_new(pc_gateway_t *g);
void pc__gw_guard_free(pc_gateway_t *g);

/* The rules every route but the probes applies first: 0 with *who filled
 * when the request may go on, else the HTTP status to answer (400, 403)
 * with *why, a static message. */
int pc__gw_admit(pc_gateway_t *g, const pc_http_request_msg_t *q, pc__gw_client_t *who, const char **why);

/* The origin is the gateway's own: http on its port, from a loopback host
 * or the one address it is bound to. */
bool pc__gw_origin_own(const pc_gateway_t *g, const char *origin);

/* One Content-Type header, application/json (parameters allowed). */
bool pc__gw_json_content(const pc_http_request_msg_t *q);

/* device_auth.c: compares a presented secret (`n` bytes, no NUL needed)
 * with the configured one in time that depends on neither's content. */
bool pc__gw_secret_equal(const char *given, size_t n, const char *secret);

/* ---- auth_limit.c: backoff for failed secrets ---- */

#define PC__GW_LIMIT_MAX 4096u /* addresses remembered */

int pc__gw_limiter_new(const pc_gateway_auth_limit_t *cfg, pc__gw_limiter_t **out);
void pc__gw_limiter_free(pc__gw_limiter_t *l);
/* 0 when `who` may present a secret now, else the ms until it may. */
uint64_t pc__gw_limiter_check(pc__gw_limiter_t *l, const pc__gw_client_t *who, uint64_t now_ms);
/* A wrong token, password or device token from `who`. */
void pc__gw_limiter_fail(pc__gw_limiter_t *l, const pc__gw_client_t *who, uint64_t now_ms);
/* A secret that passed: what `who`'s address had counted is forgotten. */
void pc__gw_limiter_pass(pc__gw_limiter_t *l, const pc__gw_client_t *who);

typedef struct pc__gw_limiter_stats {
	uint64_t failures;   /* wrong secrets, since start */
	uint64_t lockouts;   /* lockouts begun */
	uint64_t refused;    /* attempts refused while locked out */
	uint64_t locked_now; /* addresses locked out now */
} pc__gw_limiter_stats_t;
void pc__gw_limiter_stats(pc__gw_limiter_t *l, uint64_t now_ms, pc__gw_limiter_stats_t *out);

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

/* cluster.c: the node's heartbeat (cluster in the configuration; else
 * start makes nothing). Start once serving; free from the thread that
 * frees the gateway, before the agent's store closes: it leaves the node
 * table. */
typedef struct pc__gw_cluster pc__gw_cluster_t;
int pc__gw_cluster_start(pc_gateway_t *g);
void pc__gw_cluster_free(pc_gateway_t *g);
typedef struct pc__gw_cluster_stats {
	uint64_t beats, beat_failures; /* heartbeats recorded, and not */
	int64_t beat_age_ms;           /* since the last recorded one; -1: none yet */
	int32_t beat_rc;               /* the last beat's outcome */
	uint32_t live, gone;           /* nodes in the latest listing */
	uint64_t scans;                /* takeover scans after the membership changed */
	uint64_t forwards;             /* requests forwarded to another node */
	uint64_t forward_failures;     /* of those, unanswered when that node's link went */
	uint64_t links_in;             /* connections from other nodes, since start */
	uint64_t away;                 /* sessions running on a live node other than
					* the one they prefer, routed there */
} pc__gw_cluster_stats_t;
/* Zeros when not a node. Any thread. */
void pc__gw_cluster_stats(const pc_gateway_t *g, pc__gw_cluster_stats_t *out);
/* True, with why in `why`, when no beat of this node has been recorded
 * for a lease (or none yet): out of the cluster, not ready. */
bool pc__gw_cluster_out(const pc_gateway_t *g, char *why, size_t cap);
/* `status`'s cluster object (the caller's), or NULL when not a node. */
cJSON *pc__gw_cluster_json(const pc_gateway_t *g);

/* Another live node of the latest listing: its id and where it listens. */
typedef struct pc__gw_peer {
	char id[PC_CLUSTER_NAME_MAX + 1];
	char host[256];
	uint16_t port;
} pc__gw_peer_t;
/* Where session `key` (NULL or "": "main") runs: 0 with *out filled when
 * that is another node, whose advertised URL is http://host:port: the
 * live node with an open run of the session, when that is not the node
 * its key prefers (cluster.c, "holders"), else the live node its key
 * prefers (placement.h); PC_ENOTFOUND when this node serves it (not a
 * node, cluster.forward off, no listing yet, this node the one, or that
 * node's URL not one this gateway can reach). Any thread. */
int pc__gw_cluster_route(const pc_gateway_t *g, const char *key, pc__gw_peer_t *out);
/* The other live nodes, at most `cap`, into out[]; their number. */
size_t pc__gw_cluster_peers(const pc_gateway_t *g, pc__gw_peer_t *out, size_t cap);
/* This node's id ("" when not a node). */
const char *pc__gw_cluster_node_id(const pc_gateway_t *g);
/* Counts a request forwarded to another node, and one whose node went
 * away before it was answered. */
void pc__gw_cluster_count_forward(const pc_gateway_t *g, bool failed);
/* Counts a connection another node opened and proved. */
void pc__gw_cluster_count_link(const pc_gateway_t *g);

/* cluster_auth.c: how a node proves to another that it knows the shared
 * secret without sending it: base64url(HMAC-SHA256(secret, "pincer-node\n"
 * node "\n" nonce)), the nonce being the one the other's connect.challenge
 * gave. */
#define PC__GW_NODE_PROOF_MAX 44 /* base64url of 32 bytes and a NUL */
int pc__gw_node_proof(const char *secret, const char *node, const char *nonce, char out[PC__GW_NODE_PROOF_MAX]);
/* Whether `proof` is the one for node and nonce, in time that does not
 * depend on its content. */
bool pc__gw_node_proof_ok(const char *secret, const char *node, const char *nonce, const char *proof);

/* ui.c: the Control UI (gateway.controlUi). New makes nothing when no
 * root is set. */
int pc__gw_ui_new(pc_gateway_t *g);
/* The Control UI is served (a plain GET on "/" goes to it). */
bool pc__gw_ui_serves(const pc_gateway_t *g);
/* Answers a plain GET or HEAD from the UI's files (any route actor). */
void pc__gw_ui_request(pc_gateway_t *g, const pc_http_request_msg_t *q);
/* Serves nothing more and waits for the files being read: before the
 * server is freed. */
void pc__gw_ui_quiesce(pc_gateway_t *g);
void pc__gw_ui_free(pc_gateway_t *g);

/* The HTTP server's access hook: a line per request and per WebSocket
 * closed, in the gateway's log (access_log.c). */
void pc__gw_access(void *user, const pc_http_access_t *a);

/* A random UUID (v4), for a session key of the gateway's making (gateway.c). */
void pc__gw_uuid(char out[37]);

#endif
