/*
 * The `pincer` commands' way to a running gateway: a small synchronous
 * client of the WebSocket RPC (docs/gateway.md) over the I/O layer's
 * WebSocket client (io/ws_client.h, on a runtime and I/O thread the
 * client starts for itself), and the flags every
 * gateway-backed command shares (--url, --token, --password, --config,
 * each with its PINCER_… variable).
 *
 *   pc_cli_rpc_t *c;
 *   pc_cli_rpc_options_t o = {.host = "127.0.0.1", .port = 18789, .token = "…"};
 *   pc_cli_rpc_connect(&o, &c, err, sizeof(err));     challenge, connect, hello-ok
 *   cJSON *res;
 *   pc_cli_rpc_call(c, "health", NULL, 30000, &res);  (cJSON_Delete(res))
 *   pc_cli_rpc_free(c);
 *
 * Requests get ids "1", "2", ...; frames are read one at a time
 * (pc_cli_rpc_next) or until a predicate picks one (pc_cli_rpc_until).
 *
 * Threads: a client is used by one thread at a time.
 */
#ifndef PC_AGENTS_CLI_RPC_CLIENT_H
#define PC_AGENTS_CLI_RPC_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cjson/cJSON.h>

#include "runtime/error.h"

/* The protocol versions this client speaks (the gateway's are 3 and 4). */
#define PC_CLI_RPC_PROTOCOL_MIN 3
#define PC_CLI_RPC_PROTOCOL_MAX 4
/* Where a gateway listens when nothing says otherwise. */
#define PC_CLI_DEFAULT_URL "ws://127.0.0.1:18789"
/* Request ids are decimal counters: this holds any of them. */
#define PC_CLI_RPC_ID_MAX 24

typedef struct pc_cli_rpc pc_cli_rpc_t;

typedef struct pc_cli_rpc_options {
	const char *host;       /* numeric address or a name; required */
	uint16_t port;          /* required */
	const char *path;       /* NULL: "/" */
	const char *token;      /* auth.token, or NULL */
	const char *password;   /* auth.password, or NULL */
	const char *const *scopes; /* NULL-terminated; NULL: the gateway's default
				    * (operator.read and operator.write) */
	bool tool_events;       /* ask for tool results in tool events (cap "tool-events") */
	int64_t timeout_ms;     /* the whole connect, challenge and hello; 0: 10 s */
	const struct pc_cli_identity *identity; /* sign `connect` with this device
						 * (device_identity.h), or NULL */
	cJSON **refused;        /* when the gateway refuses `connect`: its error
				 * object (the caller's) goes here; may be NULL */
} pc_cli_rpc_options_t;

/* Connects and completes the handshake. On failure *err (may be NULL)
 * says why in words, for the user:
 *   PC_ESYS       the address cannot be reached (errno kept)
 *   PC_ETIMEDOUT  no connection or no hello within the timeout
 *   PC_ESTATE     not a gateway (the upgrade was refused), or the gateway
 *                 refused `connect` (its message: a bad token, ...)
 *   PC_EINVAL     bad options, or a frame that is not the protocol's
 * The caller owns *out (pc_cli_rpc_free). */
int pc_cli_rpc_connect(const pc_cli_rpc_options_t *o, pc_cli_rpc_t **out, char *err, size_t cap);

/* The params of `connect` for `o` (its token, password, scopes and
 * tool_events; the host and port are not looked at): the caller's, NULL
 * when out of memory. For clients that speak the protocol on their own
 * connections (`pincer load`). */
cJSON *pc_cli_rpc_connect_params(const pc_cli_rpc_options_t *o);

/* The hello-ok payload (borrowed, valid until the client is freed). */
const cJSON *pc_cli_rpc_hello(const pc_cli_rpc_t *c);

/* Sends {type:"req", id, method, params}. Takes `params` (may be NULL),
 * whatever the result. The new id goes to `id` (PC_CLI_RPC_ID_MAX bytes,
 * may be NULL). PC_ESTOPPED once the connection is gone; PC_ENOMEM. */
int pc_cli_rpc_send(pc_cli_rpc_t *c, const char *method, cJSON *params, char *id);

/* The next frame, parsed; the caller deletes it. Waits up to timeout_ms
 * (< 0: for ever). PC_ETIMEDOUT (nothing is lost: call again);
 * PC_ESTOPPED when the connection ended (pc_cli_rpc_lost says how);
 * PC_EINVAL for a frame that is not a JSON object. */
int pc_cli_rpc_next(pc_cli_rpc_t *c, int64_t timeout_ms, cJSON **frame);

/* Offers each frame read to `pick` until it returns true; that frame goes
 * to *out (the caller's), the others are deleted after `pick` saw them.
 * Waits up to timeout_ms in all; errors as pc_cli_rpc_next. */
typedef bool (*pc_cli_rpc_pick_fn)(void *user, const cJSON *frame);
int pc_cli_rpc_until(pc_cli_rpc_t *c, int64_t timeout_ms, pc_cli_rpc_pick_fn pick, void *user, cJSON **out);

/* Sends a request and waits for its answer (ok or not) into *res, the
 * caller's. Frames in between are dropped. Errors as the two above. */
int pc_cli_rpc_call(pc_cli_rpc_t *c, const char *method, cJSON *params, int64_t timeout_ms, cJSON **res);

/* True when `f` is the answer to request `id`. */
bool pc_cli_rpc_is_res(const cJSON *f, const char *id);

/* An answer's error message ("CODE: message"), into buf. */
const char *pc_cli_rpc_error_text(const cJSON *res, char *buf, size_t cap);

/* An ok answer's object payload; else NULL after "<cmd>: <its error>" on
 * stderr. */
const cJSON *pc_cli_rpc_payload(const char *cmd, const cJSON *res);

/* How the connection ended, in words ("the gateway closed the connection
 * (1001: ...)", "the connection to the gateway was lost"), into buf. */
const char *pc_cli_rpc_lost(const pc_cli_rpc_t *c, char *buf, size_t cap);

/* What a failed read or call means, in words: "no answer in time", how
 * the connection ended, ..., into buf. */
const char *pc_cli_rpc_strerror(const pc_cli_rpc_t *c, int rc, char *buf, size_t cap);

/* Says goodbye (a close frame, a short wait for the gateway's) and frees.
 * NULL is a no-op. */
void pc_cli_rpc_free(pc_cli_rpc_t *c);

/* ---- the flags of gateway-backed commands ---- */

/* Each NULL when not given; pc_cli_gw_env fills the rest from the
 * environment. Strings are borrowed from argv or the environment. */
typedef struct pc_cli_gw_flags {
	const char *url;      /* --url, $PINCER_GATEWAY_URL */
	const char *token;    /* --token, $PINCER_GATEWAY_TOKEN */
	const char *password; /* --password, $PINCER_GATEWAY_PASSWORD */
	const char *config;   /* --config, $PINCER_CONFIG */
} pc_cli_gw_flags_t;

/* getopt_long entries for the four flags; pc_cli_gw_flag takes their
 * codes. */
#define PC_CLI_GW_OPT_URL 0x1001
#define PC_CLI_GW_OPT_TOKEN 0x1002
#define PC_CLI_GW_OPT_PASSWORD 0x1003
#define PC_CLI_GW_OPT_CONFIG 0x1004
#define PC_CLI_GW_LONG_OPTIONS                                                                     \
	{"url", required_argument, NULL, PC_CLI_GW_OPT_URL},                                       \
	{"token", required_argument, NULL, PC_CLI_GW_OPT_TOKEN},                                   \
	{"password", required_argument, NULL, PC_CLI_GW_OPT_PASSWORD},                             \
	{"config", required_argument, NULL, PC_CLI_GW_OPT_CONFIG}

/* Stores a getopt result that is one of the four; false for other codes. */
bool pc_cli_gw_flag(pc_cli_gw_flags_t *f, int code, const char *arg);

struct option;

/* For a getopt_long code a gateway-backed command does not take itself:
 * true when it is one of the four (stored); else, after a suggestion for a
 * mistyped `--name`, the command's usage on stderr and false (the command
 * then ends with PC_CLI_USAGE). */
bool pc_cli_gw_flag_or_usage(pc_cli_gw_flags_t *f, int code, int argc, char **argv, const struct option *longs,
			     void (*usage)(FILE *));

/* Fills what the flags left NULL from PINCER_GATEWAY_URL, _TOKEN,
 * _PASSWORD and PINCER_CONFIG (set and non-empty). */
void pc_cli_gw_env(pc_cli_gw_flags_t *f);

/* The help lines describing the four flags. */
void pc_cli_gw_usage(FILE *f);

/* Splits "ws://host[:port][/path]" (IPv6 hosts in brackets; port default
 * 80). PC_EINVAL for anything else, with the reason in *why (static). */
int pc_cli_url_parse(const char *url, char *host, size_t host_cap, uint16_t *port, char *path,
		     size_t path_cap, const char **why);

/* Resolves the flags (then the configuration: gateway.bind/port and its
 * auth; then ws://127.0.0.1:18789), connects and completes the handshake
 * with `scopes` (see the options). Every problem is printed on stderr,
 * prefixed with `cmd`. Returns an exit status: 0 (the caller owns *out),
 * 1 (no connection), 2 (a malformed URL). */
int pc_cli_gw_connect(const char *cmd, const pc_cli_gw_flags_t *f, const char *const *scopes, bool tool_events,
		      pc_cli_rpc_t **out);

#endif
