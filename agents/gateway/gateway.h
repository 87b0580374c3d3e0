/*
 * The gateway: one HTTP/WebSocket port in front of an agent host.
 *
 *   /                  WebSocket RPC, OpenClaw's gateway protocol (§8):
 *                      connect.challenge / connect / hello-ok, req / res /
 *                      event frames, agent, agent.wait, sessions.*, chat.*,
 *                      health, status, models.list
 *   /v1/chat/completions, /v1/models   OpenAI-compatible HTTP
 *   /livez /readyz /healthz /health    probes (readyz: 503 while starting
 *                                      or draining)
 *   /metrics           Prometheus text
 *
 * Every request runs the same session / run / attempt actors as every
 * other entry, through the agent API (agent.h). docs/gateway.md describes
 * the protocol as implemented.
 *
 * Life: pc_gateway_new binds (nothing is accepted yet), pc_gateway_start
 * accepts and reports ready, pc_gateway_drain stops taking new work, tells
 * clients (`shutdown` event) and waits for runs to end (up to a deadline,
 * then aborts the rest), pc_gateway_free closes everything. The agent, the
 * I/O layer and the runtime are the caller's and outlive the gateway.
 *
 * Threads: new / start / drain / free from one thread that is not a
 * runtime worker; pc_gateway_port and pc_gateway_ready from any.
 */
#ifndef PINCER_AGENTS_GATEWAY_GATEWAY_H
#define PINCER_AGENTS_GATEWAY_GATEWAY_H

#include <stdbool.h>
#include <stdint.h>

#include "agents/agent.h"
#include "agents/config/config.h"
#include "agents/hooks/hooks.h"
#include "io/io.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pc_gateway pc_gateway_t;

typedef struct pc_gateway_options {
	pc_runtime_t *rt;          /* required, started */
	pc_io_t *io;               /* required */
	pc_agent_t *agent;         /* required */
	const pc_config_t *config; /* required: its `gateway` section */
	const pc_hooks_t *hooks;   /* gateway_start / gateway_stop; may be NULL */
	const char *bind;          /* overrides config->gateway.bind when set */
	int32_t port;              /* >= 0 overrides config->gateway.port (0: any free
				    * port); < 0 keeps the configuration's */
	pc_log_t *log;             /* the gateway's lines, borrowed (its dropped lines
				    * are counted in /metrics); NULL: none */
} pc_gateway_options_t;

/* Binds the port. The address (o->bind, else config->gateway.bind, else
 * 127.0.0.1; "localhost" is 127.0.0.1) must be numeric, and without auth it
 * must be a loopback address: PC_EPERM for `auth: none` beyond loopback
 * (0.0.0.0 and :: included), whatever set the address. PC_EINVAL for a
 * missing option, a name, an auth mode without its secret, or an
 * allowedOrigins / trustedProxies entry that does not parse; the I/O
 * layer's code when the address cannot be bound. The caller owns *out. */
int pc_gateway_new(const pc_gateway_options_t *o, pc_gateway_t **out);

/* Accepts connections; ready from now on (gateway_start fires). */
int pc_gateway_start(pc_gateway_t *g);

/* The bound port (useful with port 0). */
uint16_t pc_gateway_port(const pc_gateway_t *g);

/* True between start and drain. */
bool pc_gateway_ready(const pc_gateway_t *g);

/* Graceful stop: /readyz answers 503 and new agent requests are refused
 * (UNAVAILABLE), clients get a `shutdown` event, and runs already going
 * may finish for `deadline_ms` (< 0: the configured drainSeconds); then
 * what still runs is aborted. Returns once every run has ended and its
 * result is stored. Idempotent. */
int pc_gateway_drain(pc_gateway_t *g, int64_t deadline_ms);

/* Closes every connection and frees the gateway (gateway_stop fires, with
 * its 5 s budget). Drains first (with the default deadline) when
 * pc_gateway_drain was not called. NULL is a no-op. */
void pc_gateway_free(pc_gateway_t *g);

/* ---- device identity (docs/gateway.md, "Device identity") ----
 * What a device signs in `connect` and the gateway checks: the same
 * string on both sides, so a client (`pincer load --identity`) and the
 * gateway cannot drift apart. */

struct cJSON;

typedef struct pc_gateway_device_claim {
	const char *device_id, *client_id, *client_mode, *role;
	const struct cJSON *scopes; /* the connect's array as sent, or NULL */
	double signed_at;           /* ms since the epoch */
	const char *token;          /* auth.token, else auth.deviceToken; NULL: none */
	const char *nonce;          /* the challenge's */
	const char *platform, *family; /* client.platform / deviceFamily (v3); NULL: none */
} pc_gateway_device_claim_t;

/* "v2|id|client|mode|role|scopes|signedAt|token|nonce" and, for v3,
 * "|platform|family" (both trimmed and lower-cased). malloc'd; NULL when
 * out of memory. */
char *pc_gateway_device_payload(const pc_gateway_device_claim_t *c, bool v3);

/* A device's id: the lower-case hex SHA-256 of its raw 32-byte Ed25519
 * public key. False when the digest fails. */
bool pc_gateway_device_id(const unsigned char key[32], char out[65]);

#ifdef __cplusplus
}
#endif
#endif
