/*
 * The WebSocket RPC's insides, shared by ws.c (the route, the connection
 * actors, their registry), rpc.c (frames, the handshake, dispatch),
 * rpc_methods.c (the methods and what runs report), rpc_info.c,
 * rpc_cost.c and rpc_empty.c (what OpenClaw's Control UI reads),
 * rpc_session_id.c (`agent` by sessionId), rpc_resolve.c
 * (sessions.resolve), device_auth.c (shared secrets,
 * device identities) and device_pairing.c (paired devices, their tokens,
 * pending pairing requests and the device.* methods). Private to those
 * files; docs/gateway.md is the protocol as a client sees it.
 *
 * One actor per connection owns a pc__gw_conn_t: nothing in it is touched
 * by another thread. What connections share (the registry for the shutdown
 * broadcast, the paired devices and pending pairing requests) is in struct
 * pc__gw_ws under its lock.
 *
 * Like every part of the gateway, these files reach the agent only through
 * its public API (agent.h and what it includes: events, configuration,
 * hooks, the store, metrics).
 */
#ifndef PINCER_AGENTS_GATEWAY_RPC_INTERNAL_H
#define PINCER_AGENTS_GATEWAY_RPC_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "actors/timer.h"
#include "gateway_internal.h"

/* Protocol versions served (§8.2: 3 in April, 4 from August). */
#define PC__GW_PROTOCOL_MIN 3
#define PC__GW_PROTOCOL_MAX 4
/* chat deltas go out at most this often per run (§5.10) */
#define PC__GW_CHAT_THROTTLE_MS 150u
/* The text a client is sent again in the merged agent delta frames of
 * one message before its last frame (rpc_methods.c, merge_due): a frame
 * goes only while it keeps the message's resent text within this. With
 * the deltas (the reply once), the last frame's text and the final answer,
 * a reply of n bytes costs a client at most 3n + this. */
#define PC__GW_RESEND_BUDGET ((size_t)64 << 10)
/* A device signature's signedAt may differ from now by this much when it
 * is not the challenge's ts (OpenClaw's skew). */
#define PC__GW_SIGNATURE_SKEW_MS ((int64_t)120000)
/* Events buffered for one connection and session before deltas are
 * dropped (the oldest first; never the terminal event). */
#define PC__GW_SUB_CAPACITY 1024u
/* Events of a session's runs held while a submit's answer is on its way. */
#define PC__GW_HOLD_MAX 256u
/* Runs, waits and reads in flight on one connection. */
#define PC__GW_INFLIGHT_MAX 4096u
/* Devices holding a device token (the oldest token goes beyond). */
#define PC__GW_DEVICES_MAX 4096u
/* Pairing requests waiting for an operator (the oldest goes beyond), and
 * how long one waits (OpenClaw's 5 minutes). */
#define PC__GW_PENDING_MAX 32u
#define PC__GW_PENDING_TTL_MS ((int64_t)300000)
#define PC__GW_REQUEST_ID_MAX 37     /* a UUID and a NUL */
#define PC__GW_KEY_MAX 48            /* base64url of a 32-byte key and a NUL */
#define PC__GW_ID_MAX 256u           /* a request id's length */
#define PC__GW_HISTORY_DEFAULT 200
#define PC__GW_HISTORY_MAX 1000
/* chat.history's byte budget on its messages when the client gives none
 * (or a larger one): OpenClaw's default cap. */
#define PC__GW_HISTORY_MAX_BYTES ((size_t)6 << 20)
/* Sessions one connection follows with sessions.messages.subscribe. */
#define PC__GW_MSG_SUBS_MAX 256u
#define PC__GW_NONCE_MAX 48          /* base64url of 32 bytes and a NUL */
#define PC__GW_TOKEN_MAX 48

/* Operator scopes as bits. admin implies write, write implies read. */
enum {
	PC__GW_SCOPE_READ = 1u << 0,
	PC__GW_SCOPE_WRITE = 1u << 1,
	PC__GW_SCOPE_ADMIN = 1u << 2,
	PC__GW_SCOPE_APPROVALS = 1u << 3,
	PC__GW_SCOPE_PAIRING = 1u << 4,
	PC__GW_SCOPE_TALK_SECRETS = 1u << 5,
	PC__GW_SCOPE_COUNT = 6,
};
/* "operator.read", ... for bit i (0..PC__GW_SCOPE_COUNT-1). */
const char *pc__gw_scope_name(int i);
/* The bit of a scope name, or 0 when it is not one this gateway knows. */
uint32_t pc__gw_scope_bit(const char *name);
/* True when `granted` satisfies `required` (one bit). */
bool pc__gw_scope_has(uint32_t granted, uint32_t required);

/* Messages of the route and connection actors. */
enum {
	PC__GW_MSG_START = PC_MSG_TYPE_SYSTEM + 0x2700, /* connection: accept the upgrade */
	PC__GW_MSG_HANDSHAKE_TIMEOUT,
	PC__GW_MSG_TICK,
	PC__GW_MSG_SHUTDOWN,     /* text: the reason */
	PC__GW_MSG_EVENTS,       /* a session subscription has events (tag) */
	PC__GW_MSG_WAIT_TIMEOUT, /* u64: an agent.wait's tag */
	PC__GW_MSG_CHAT_FLUSH,   /* u64: a chat run's tag */
	PC__GW_MSG_DELTA_FLUSH,  /* u64: a run's tag: its merged agent deltas may go */
	PC__GW_MSG_FEED,         /* the connection's feed subscription has events */
	PC__GW_MSG_UNPAIRED,     /* the device it connected as was unpaired: close */
	PC__GW_MSG_RELAY_CHECK,  /* are the nodes its links go to still live? (relay.c) */
};

/*
 * The gateway's view of one WebSocket client ("gwclient" in PINCER_TRACE,
 * its connId for id), pc__gw_conn_t.phase:
 *   new -> challenge          accepted, connect.challenge sent
 *   new -> closed             not accepted (the client left before the
 *                             upgrade, no randomness)
 *   challenge -> open         connect passed: hello-ok
 *   challenge | open -> closing   our close frame (a refused connect, the
 *                             handshake timeout, a protocol error, busy)
 *   challenge | open | closing -> closed   the server said CLOSED, or the
 *                             actor stopped
 * pc__gw_phase_set (ws.c) is the one place it changes: what the table
 * does not allow is refused (the phase stays), logged and counted in
 * pincer_lifecycle_illegal_total{machine="gwclient"}.
 */
typedef enum pc__gw_phase {
	PC__GW_C_NEW = 0,
	PC__GW_C_CHALLENGE, /* waiting for connect, the handshake's deadline running */
	PC__GW_C_OPEN,      /* connected: requests, events, ticks */
	PC__GW_C_CLOSING,   /* our close frame went; nothing more is sent */
	PC__GW_C_CLOSED,    /* the socket is gone */
	PC__GW_C_COUNT
} pc__gw_phase_t;
enum { PC__GW_RUN_AGENT = 0, PC__GW_RUN_CHAT };

/* A device that was paired and holds a device token. The store keeps it
 * (the token as its SHA-256 only), so it outlives a restart; the token
 * itself is known only when it was issued during this gateway's life. */
typedef struct pc__gw_device {
	char id[65];
	char public_key[PC__GW_KEY_MAX];
	char token[PC__GW_TOKEN_MAX];      /* "" when loaded from the store */
	unsigned char token_hash[32];      /* SHA-256 of the token */
	uint32_t scopes;
	int64_t approved_ms, issued_ms;
} pc__gw_device_t;

/* A device from elsewhere that proved its key and passed the shared
 * secret, waiting for an operator's device.pair.approve. One per device. */
typedef struct pc__gw_pairing {
	char request_id[PC__GW_REQUEST_ID_MAX];
	char device_id[65];
	char public_key[PC__GW_KEY_MAX];
	char client_id[64], client_mode[32], platform[64], family[64];
	char remote_ip[48];
	uint32_t scopes;
	int64_t ts;  /* wall ms of its latest connect */
} pc__gw_pairing_t;

struct pc__gw_conn;

struct pc__gw_ws {
	pc_gateway_t *g;
	pc_actor_t *route;
	uint64_t live;      /* atomic: the route and connection actors alive */
	uint64_t next_conn; /* atomic: connection numbers */
	uint64_t opened;    /* atomic: connections that completed connect */
	pthread_mutex_t lock; /* guards what follows */
	struct pc__gw_conn *conns; /* every live connection (the shutdown broadcast) */
	size_t nconns;
	bool draining;
	char shutdown_reason[64];
	pc__gw_device_t *devices;
	size_t ndevices;
	pc__gw_pairing_t pending[PC__GW_PENDING_MAX];
	size_t npending;
};

/* An intrusive list: each element starts with a node. */
typedef struct pc__gw_node {
	struct pc__gw_node *prev, *next;
} pc__gw_node_t;
typedef struct pc__gw_list {
	pc__gw_node_t *head;
	size_t n;
} pc__gw_list_t;

typedef struct pc__gw_run pc__gw_run_t;   /* rpc_runs.c */
typedef struct pc__gw_ssub pc__gw_ssub_t;
typedef struct pc__gw_pend pc__gw_pend_t;
typedef struct pc__gw_feed pc__gw_feed_t; /* rpc_sessions.c */

/* One WebSocket connection: the state of its actor. */
typedef struct pc__gw_conn {
	struct pc__gw_ws *ws;
	pc_gateway_t *g;
	pc_http_server_t *srv;
	uint64_t id;             /* the server's id for the socket */
	pc_actor_t *self;        /* a reference the registry holds */
	struct pc__gw_conn *prev, *next; /* ws->conns */
	bool registered;
	uint8_t phase;           /* pc__gw_phase_t: pc__gw_phase_set only */
	bool loopback;           /* a loopback client (guard.c) on none or its own origin */
	pc__gw_client_t client;  /* who it is, for the backoff of failed secrets */
	bool tool_events;        /* the client advertised cap "tool-events" */
	bool shutdown_sent;
	bool drain_wait;         /* an agent delta frame is not all written yet */
	uint8_t protocol;
	uint32_t scopes;
	uint64_t seq;            /* the last event frame's seq */
	uint64_t next_tag;
	int64_t challenge_ts;
	pc_timer_t handshake_timer, tick_timer;
	char conn_id[24];
	char nonce[PC__GW_NONCE_MAX];
	char device_id[65];      /* the device it connected as ("" none); written under ws->lock,
				  * which unpairing reads it under */
	pc__gw_list_t runs;      /* runs it started (or repeats of runs it waits for) */
	pc__gw_list_t ssubs;     /* a subscription per session it has runs in */
	pc__gw_list_t pend;      /* submits, waits and store reads in flight */
	pc__gw_feed_t *feed;     /* sessions.subscribe and sessions.messages.subscribe; NULL: none */
	bool node_link;          /* another node of the cluster, proved: its requests are served here */
	struct pc__gw_relay *relay; /* links to other nodes it forwards on (relay.c); NULL: none */
} pc__gw_conn_t;

/* ---- ws.c ---- */

/* The phase's name ("unknown" out of range); whether the table allows
 * from -> to; the one transition function. */
const char *pc__gw_phase_name(pc__gw_phase_t p);
bool pc__gw_phase_legal(pc__gw_phase_t from, pc__gw_phase_t to);
void pc__gw_phase_set(pc__gw_conn_t *c, pc__gw_phase_t to, const char *why);
/* Closing or closed: nothing more goes to the client. */
static inline bool pc__gw_conn_gone(const pc__gw_conn_t *c) { return c->phase >= PC__GW_C_CLOSING; }

/* Sends one text frame (dropped once the connection is closing). */
void pc__gw_send(pc__gw_conn_t *c, const char *text, size_t len);
/* Starts the closing handshake with `code` and `reason` (cut to what a
 * close frame holds); the actor stops when the server says CLOSED. */
void pc__gw_close(pc__gw_conn_t *c, uint16_t code, const char *reason);

/* ---- rpc.c ---- */

/* A client frame (text or binary: one JSON object). */
void pc__gw_on_frame(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *data, size_t len);
/* The same for a frame that must be served on this node (relay.c: one
 * its link to another node could not send). */
void pc__gw_on_frame_here(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *data, size_t len);
/* The connect.challenge event (the connection's first frame). */
void pc__gw_send_challenge(pc__gw_conn_t *c);
void pc__gw_send_tick(pc__gw_conn_t *c);
void pc__gw_send_shutdown(pc__gw_conn_t *c, const char *reason);

/* Frames. Each takes ownership of the cJSON it is given (NULL: none). */
void pc__gw_reply_ok(pc__gw_conn_t *c, const char *id, cJSON *payload);
void pc__gw_reply_error(pc__gw_conn_t *c, const char *id, const char *code, const char *message, cJSON *details,
			cJSON *payload, bool retryable);
/* The same with the error's retryAfterMs (0: none): how long the client
 * should wait before it sends the request again. */
void pc__gw_reply_error_after(pc__gw_conn_t *c, const char *id, const char *code, const char *message,
			      cJSON *details, cJSON *payload, bool retryable, uint64_t retry_after_ms);
void pc__gw_event(pc__gw_conn_t *c, const char *name, cJSON *payload);
/* An event whose payload is JSON text already. */
void pc__gw_event_text(pc__gw_conn_t *c, const char *name, const char *payload, size_t len);

/* Checks `params` (an object, or NULL for none) against a list of keys:
 * types, required keys, and (when `strict`) no other key. On failure
 * writes "<path>: <problem>" into err and returns false. The dispatcher
 * runs it with each method's spec before the method sees its params. */
typedef enum { PC__GW_T_STRING = 0, PC__GW_T_NESTR, PC__GW_T_UINT, PC__GW_T_BOOL, PC__GW_T_ARRAY,
	       PC__GW_T_OBJECT, PC__GW_T_ANY } pc__gw_type_t;
typedef struct pc__gw_param {
	const char *name;
	pc__gw_type_t type;
	bool required;
} pc__gw_param_t;
bool pc__gw_check_params(const cJSON *params, const pc__gw_param_t *spec, size_t n, bool strict, char *err,
			 size_t cap);
/* params[name] as a string, or NULL. */
const char *pc__gw_str(const cJSON *params, const char *name);

/* INVALID_REQUEST "invalid <method> params: <why>". */
void pc__gw_invalid(pc__gw_conn_t *c, const char *id, const char *method, const char *why);

/* ---- relay.c: forwarding to the node that runs a session ---- */

/* True when request `id` (`method` with params that passed its spec; the
 * client's `frame`) went to another node, or was answered because it could
 * not; false: serve it here. */
bool pc__gw_relay_request(pc__gw_conn_t *c, const char *id, const char *method, const cJSON *params,
			  const char *frame, size_t len);
/* A PC_MSG_WSC_* message of one of c's links. */
void pc__gw_relay_on_link(pc_ctx_t *ctx, pc__gw_conn_t *c, const pc_msg_t *msg);
/* Drops the links whose node has left the live listing. */
void pc__gw_relay_check(pc_ctx_t *ctx, pc__gw_conn_t *c);
/* Ends c's links (the connection ends). Idempotent. */
void pc__gw_relay_free(pc__gw_conn_t *c);

/* ---- rpc_methods.c ---- */

/* A method: its name, the scope it needs, its params' spec and the
 * handler, which gets params that passed the spec. */
typedef void (*pc__gw_method_fn)(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *id, const cJSON *params);
typedef struct pc__gw_method {
	const char *name;
	uint32_t scope;               /* one PC__GW_SCOPE_* bit */
	const pc__gw_param_t *params; /* NULL: params are not looked at */
	size_t nparams;
	bool strict;                  /* no property beyond the spec */
	pc__gw_method_fn fn;
} pc__gw_method_t;

/* The method called `name`, or NULL. */
const pc__gw_method_t *pc__gw_method_find(const char *name);
/* The methods this gateway answers, for hello-ok. */
cJSON *pc__gw_method_names(void);

/* `agent` params m_agent accepted, submitted to session `key` (NULL:
 * "main"). */
void pc__gw_agent_submit(pc__gw_conn_t *c, const char *id, const cJSON *params, const char *key);

/* ---- rpc_session_id.c: `agent` by OpenClaw's sessionId ---- */

/* Finds the session `params`' sessionId names, then submits the run to it. */
void pc__gw_agent_by_session_id(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *id, const cJSON *params);
/* A PC_STORE_MSG_SESSIONS reply to that search: true when it was one. */
bool pc__gw_on_session_id(pc__gw_conn_t *c, const pc_msg_t *msg);

/* ---- rpc_resolve.c: sessions.resolve ---- */

#define PC__GW_SESSIONS_RESOLVE_NPARAMS 11
extern const pc__gw_param_t pc__gw_sessions_resolve_spec[PC__GW_SESSIONS_RESOLVE_NPARAMS];
void pc__gw_m_sessions_resolve(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *id, const cJSON *params);
/* A PC_STORE_MSG_HISTORY or _SESSIONS reply to a resolve: true when it was one. */
bool pc__gw_on_resolve_history(pc_ctx_t *ctx, pc__gw_conn_t *c, const pc_msg_t *msg);
bool pc__gw_on_resolve_sessions(pc__gw_conn_t *c, const pc_msg_t *msg);

/* ---- rpc_info.c, rpc_cost.c: what OpenClaw's clients read about the gateway ---- */

extern const pc__gw_param_t pc__gw_identity_spec[2], pc__gw_stability_spec[3], pc__gw_usage_cost_spec[9];
void pc__gw_m_identity(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *id, const cJSON *params);
void pc__gw_m_agents_list(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *id, const cJSON *params);
void pc__gw_m_config_get(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *id, const cJSON *params);
void pc__gw_m_config_write(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *id, const cJSON *params);
void pc__gw_m_models_auth(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *id, const cJSON *params);
void pc__gw_m_update_status(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *id, const cJSON *params);
void pc__gw_m_stability(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *id, const cJSON *params);
void pc__gw_m_system_info(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *id, const cJSON *params);
void pc__gw_m_usage_cost(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *id, const cJSON *params);
/* A PC_STORE_MSG_USAGE reply to usage.cost: true when it was one. */
bool pc__gw_on_usage_cost(pc__gw_conn_t *c, const pc_msg_t *msg);

/* ---- rpc_empty.c: what the Control UI reads of features Pincer lacks ---- */

/* A read-only method answered with OpenClaw's empty result. */
typedef struct pc__gw_empty {
	pc__gw_method_t m;  /* its fn is NULL */
	const char *answer; /* the payload, JSON text */
	bool ts;            /* the payload also gets `ts`, the wall clock ms of the answer */
} pc__gw_empty_t;
/* The one called `name`, or NULL; their names appended to array `a`; the
 * answer to request `id`. */
const pc__gw_empty_t *pc__gw_empty_find(const char *name);
void pc__gw_empty_names(cJSON *a);
void pc__gw_empty_answer(pc__gw_conn_t *c, const char *id, const pc__gw_empty_t *e);
/* cron.list and cron.runs: an empty page, with the limit asked. */
extern const pc__gw_param_t pc__gw_cron_page_spec[2];
void pc__gw_m_cron_list(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *id, const cJSON *params);
void pc__gw_m_cron_runs(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *id, const cJSON *params);

/* What the connection actor hears about the work in flight. */
void pc__gw_on_accepted(pc_ctx_t *ctx, pc__gw_conn_t *c, const pc_msg_t *msg);
void pc__gw_on_run_info(pc_ctx_t *ctx, pc__gw_conn_t *c, const pc_msg_t *msg);
void pc__gw_on_events(pc_ctx_t *ctx, pc__gw_conn_t *c, uint64_t tag);
void pc__gw_on_wait_timeout(pc__gw_conn_t *c, uint64_t tag);
void pc__gw_on_chat_flush(pc__gw_conn_t *c, uint64_t tag);
void pc__gw_on_delta_flush(pc__gw_conn_t *c, uint64_t tag);
/* The socket took everything sent: merged deltas held for it may go. */
void pc__gw_on_drained(pc__gw_conn_t *c);
void pc__gw_on_store_reply(pc__gw_conn_t *c, const pc_msg_t *msg);
void pc__gw_on_history(pc__gw_conn_t *c, const pc_msg_t *msg);
void pc__gw_on_sessions(pc__gw_conn_t *c, const pc_msg_t *msg);
void pc__gw_on_usage(pc__gw_conn_t *c, const pc_msg_t *msg);
/* The connection ends: subscriptions go, timers are cancelled, nothing
 * more is answered; runs go on. Idempotent. */
void pc__gw_release_work(pc__gw_conn_t *c);
/* The `health` payload, also hello-ok's snapshot.health. */
cJSON *pc__gw_health(pc_gateway_t *g);

/* Helpers of the methods in other files: c has as much in flight as it
 * may (answered UNAVAILABLE, true); asks the store `*req` (built with code
 * `built`) for read pd, answered with pd->corr (on failure pd is freed and
 * the code returned); a read that could not be asked is answered
 * (PC_EINVAL: INVALID_REQUEST with `einval`). */
bool pc__gw_inflight_full(pc__gw_conn_t *c, const char *id);
int pc__gw_ask_store(pc_ctx_t *ctx, pc__gw_conn_t *c, pc__gw_pend_t *pd, int built, pc_msg_t **req);
void pc__gw_read_refused(pc__gw_conn_t *c, const char *id, const char *method, int rc, const char *einval);
/* models.list's models: what the configuration offers. */
cJSON *pc__gw_models(const pc_config_t *cfg);
/* A sessions.list row of e: its active run is this node's, or on a
 * cluster, the store's first open run of it when another node runs it. */
cJSON *pc__gw_session_row(pc_gateway_t *g, const pc_store_session_entry_t *e);
/* sessions.list's spec, and its work for `method` (with `subscribed`:
 * sessions.subscribe's answer, {subscribed: true, list}). */
#define PC__GW_SESSIONS_LIST_NPARAMS 2
extern const pc__gw_param_t pc__gw_sessions_list_spec[PC__GW_SESSIONS_LIST_NPARAMS];
void pc__gw_sessions_list(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *id, const char *method, const cJSON *params,
			  bool subscribed);

/* ---- reads of a transcript (rpc_history.c) ---- */

/* chat.history, chat.startup, chat.metadata, sessions.describe. */
#define PC__GW_CHAT_HISTORY_NPARAMS 11
#define PC__GW_CHAT_STARTUP_NPARAMS 13
#define PC__GW_CHAT_METADATA_NPARAMS 3
#define PC__GW_SESSIONS_DESCRIBE_NPARAMS 4
extern const pc__gw_param_t pc__gw_chat_history_spec[PC__GW_CHAT_HISTORY_NPARAMS];
extern const pc__gw_param_t pc__gw_chat_startup_spec[PC__GW_CHAT_STARTUP_NPARAMS];
extern const pc__gw_param_t pc__gw_chat_metadata_spec[PC__GW_CHAT_METADATA_NPARAMS];
extern const pc__gw_param_t pc__gw_sessions_describe_spec[PC__GW_SESSIONS_DESCRIBE_NPARAMS];
void pc__gw_m_chat_history(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *id, const cJSON *params);
/* Names a stored message (a JSON object; anything else is left alone) as
 * OpenClaw's clients tell messages apart, in __openclaw: its transcript
 * seq, its run, and for a run's prompt the idempotency key it was sent
 * under (`idem`, else NULL), by which the client that sent it matches it to
 * the copy it showed while it was on its way. chat.history and
 * session.message name each message alike, so that a client holding both
 * copies sees one message. A message carrying its own __openclaw keeps it. */
void pc__gw_name_message(cJSON *item, int64_t seq, const char *run_id, const char *idem);
void pc__gw_m_chat_startup(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *id, const cJSON *params);
void pc__gw_m_chat_metadata(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *id, const cJSON *params);
void pc__gw_m_sessions_describe(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *id, const cJSON *params);

/* ---- session and transcript subscriptions (rpc_sessions.c) ---- */

/* sessions.subscribe / .unsubscribe, sessions.messages.subscribe /
 * .unsubscribe, sessions.observer.visibility. */
#define PC__GW_MESSAGES_SUBSCRIBE_NPARAMS 3
#define PC__GW_MESSAGES_UNSUBSCRIBE_NPARAMS 2
#define PC__GW_OBSERVER_VISIBILITY_NPARAMS 1
extern const pc__gw_param_t pc__gw_messages_subscribe_spec[PC__GW_MESSAGES_SUBSCRIBE_NPARAMS];
extern const pc__gw_param_t pc__gw_messages_unsubscribe_spec[PC__GW_MESSAGES_UNSUBSCRIBE_NPARAMS];
extern const pc__gw_param_t pc__gw_observer_visibility_spec[PC__GW_OBSERVER_VISIBILITY_NPARAMS];
void pc__gw_m_sessions_subscribe(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *id, const cJSON *params);
void pc__gw_m_sessions_unsubscribe(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *id, const cJSON *params);
void pc__gw_m_messages_subscribe(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *id, const cJSON *params);
void pc__gw_m_messages_unsubscribe(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *id, const cJSON *params);
void pc__gw_m_observer_visibility(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *id, const cJSON *params);
/* The feed subscription has events (PC__GW_MSG_FEED); the connection ends
 * (its feed subscription goes). */
void pc__gw_on_feed(pc__gw_conn_t *c);
void pc__gw_feed_release(pc__gw_conn_t *c);

/* ---- a connection's runs and pending work (rpc_runs.c) ---- */

struct pc__gw_ssub {
	pc__gw_node_t node;
	uint64_t tag;
	char *key;
	pc_event_sub_t *sub;
	uint32_t refs;    /* runs and submits using it */
	uint32_t pending; /* submits not answered yet */
	pc_event_t **hold; /* events of runs not known yet, oldest first */
	size_t nhold;
};

struct pc__gw_run {
	pc__gw_node_t node;
	uint64_t tag;
	int kind;          /* PC__GW_RUN_AGENT or _CHAT */
	bool dup;          /* a repeated idempotency key: only the final is sent */
	char run_id[PC_RUN_ID_MAX + 1];
	char *req_id;      /* agent: the request answered again at the end */
	pc__gw_ssub_t *ssub; /* NULL for a repeat */
	uint64_t last_seq;
	/* agent deltas waiting for their frame: assistant, thinking */
	struct merge {
		pc_event_t *pending; /* the latest delta not sent (a reference), or NULL */
		uint32_t message;    /* the message `sent` and `resent` count in */
		size_t sent;         /* bytes of it the client has as deltas */
		size_t resent;       /* text bytes of it sent in frames (the budget) */
		uint64_t last_ms;    /* runtime clock of the last frame; 0: none */
	} merge[2];
	pc_timer_t merge_timer;
	/* the chat projection (§5.10) */
	pc_event_t *chat_ev; /* the latest assistant delta: its view is the text so far */
	uint64_t chat_seq;
	uint64_t last_delta_ms; /* runtime clock */
	bool delta_pending;
	pc_timer_t flush_timer;
};

/* What a pending entry waits for. */
enum { PC__GW_P_SUBMIT = 0, PC__GW_P_WAIT, PC__GW_P_HISTORY, PC__GW_P_RUNGET, PC__GW_P_SESSIONS, PC__GW_P_USAGE,
       PC__GW_P_COST, PC__GW_P_SESSID, PC__GW_P_RESOLVE };

struct pc__gw_pend {
	pc__gw_node_t node;
	int kind;
	int run_kind;       /* PC__GW_P_SUBMIT */
	uint64_t corr;      /* our tag (submit, wait) or the store ask's */
	char *req_id;       /* NULL: a read for a run's final */
	pc__gw_ssub_t *ssub; /* PC__GW_P_SUBMIT */
	char *key;          /* PC__GW_P_SUBMIT, PC__GW_P_HISTORY; PC__GW_P_RESOLVE: what is looked up */
	int limit;          /* PC__GW_P_HISTORY; PC__GW_P_COST: the days asked (0: all) */
	int view;           /* PC__GW_P_SUBMIT: answered as sessions.create;
			     * PC__GW_P_HISTORY: what answers (rpc_history.c);
			     * PC__GW_P_SESSIONS: sessions.subscribe's;
			     * PC__GW_P_RESOLVE: the store read (rpc_resolve.c) */
	uint64_t run_tag;   /* PC__GW_P_RUNGET for a repeated agent: its run */
	uint64_t wait_ms;   /* PC__GW_P_RUNGET for agent.wait: how long it waits */
	char run_id[PC_RUN_ID_MAX + 1]; /* also PC__GW_P_USAGE */
	cJSON *params;      /* a copy of the request's params: PC__GW_P_HISTORY's,
			     * PC__GW_P_SESSID's (the agent request waiting for
			     * its session), PC__GW_P_RESOLVE's */
	pc_timer_t timer;   /* PC__GW_P_WAIT */
};


/* Session subscriptions: the connection's subscription to session `key`,
 * made if needed (with no use counted yet; PC_EINVAL for a bad key); a
 * use dropped (the last one unsubscribes); freed; the held events of a run
 * just named, sent in order. */
int pc__gw_ssub_get(pc__gw_conn_t *c, const char *key, pc__gw_ssub_t **out);
void pc__gw_ssub_put(pc__gw_conn_t *c, pc__gw_ssub_t *s);
void pc__gw_ssub_free(pc__gw_conn_t *c, pc__gw_ssub_t *s);
void pc__gw_replay_held(pc__gw_conn_t *c, pc__gw_ssub_t *s, pc__gw_run_t *r);

/* The runs a connection follows, by tag. */
pc__gw_run_t *pc__gw_run_new(pc__gw_conn_t *c, int kind, const char *run_id, const char *req_id);
pc__gw_run_t *pc__gw_run_by_tag(pc__gw_conn_t *c, uint64_t tag);
void pc__gw_run_free(pc__gw_conn_t *c, pc__gw_run_t *r);

/* Pending work of the methods (PC__GW_P_*), found by kind and correlation. */
pc__gw_pend_t *pc__gw_pend_new(pc__gw_conn_t *c, int kind, const char *req_id);
pc__gw_pend_t *pc__gw_pend_find(pc__gw_conn_t *c, int kind, uint64_t corr);
void pc__gw_pend_free(pc__gw_conn_t *c, pc__gw_pend_t *p);
/* A store read for `p` failed with rc: a retryable UNAVAILABLE answer,
 * "<what>: <the store's reason>", and p freed. */
void pc__gw_pend_store_failed(pc__gw_conn_t *c, pc__gw_pend_t *p, const char *what, int rc);

/* The second answer to an `agent` request (§8.3 step 7), and agent.wait's
 * answer from a run's registry entry. */
void pc__gw_agent_final(pc__gw_conn_t *c, const char *req_id, const char *run_id, const cJSON *d,
			const char *status, const char *error);
void pc__gw_wait_answer(pc__gw_conn_t *c, pc__gw_pend_t *pd, const pc_run_info_t *info);

/* ---- rpc_methods.c ---- */

/* The connection's intrusive lists. */
void pc__gw_list_add(pc__gw_list_t *l, pc__gw_node_t *n);
void pc__gw_list_remove(pc__gw_list_t *l, pc__gw_node_t *n);
/* A message of `type` carrying a u64, for timers. */
pc_msg_t *pc__gw_u64_msg(uint32_t type, uint64_t v);

/* ---- device_auth.c ---- */

/* A fresh challenge nonce: base64url of 32 random bytes. */
int pc__gw_nonce(char out[PC__GW_NONCE_MAX]);

/* The outcome of a connect's authentication. */
typedef struct pc__gw_auth {
	uint32_t scopes;                 /* granted */
	bool device;                     /* a verified device identity */
	char device_id[65];
	char device_token[PC__GW_TOKEN_MAX]; /* "" unless one goes to hello-ok */
	int64_t issued_ms;
	char request_id[PC__GW_REQUEST_ID_MAX]; /* PAIRING_REQUIRED: the pending request */
	/* when refused */
	const char *code;                /* INVALID_REQUEST or NOT_PAIRED */
	const char *detail;              /* AUTH_TOKEN_MISMATCH, DEVICE_AUTH_..., PAIRING_REQUIRED */
	const char *next_step;           /* recommendedNextStep, or NULL */
	char message[160];
	bool guessed;                    /* a wrong secret or device token (counts for the backoff) */
	uint64_t retry_after_ms;         /* > 0: locked out for this long (retryable) */
} pc__gw_auth_t;
/* Decides whether connect `params` (validated for shape) may proceed on c,
 * and with which scopes; may issue a device token. 0, or PC_EINVAL with
 * out->code, detail and message set. */
int pc__gw_authenticate(pc__gw_conn_t *c, const cJSON *params, pc__gw_auth_t *out);

/* ---- device_pairing.c ---- */

/* Loads the paired devices from the store (at start, from the thread that
 * creates the gateway: it waits for the store). */
int pc__gw_devices_load(struct pc__gw_ws *ws);
void pc__gw_devices_free(struct pc__gw_ws *ws);
/* Pairs device `id` (key `public_key`) with `scopes`: a known device keeps
 * its token (and gets the scopes now granted; a token known only by its
 * hash is replaced by a new one); an unknown one gets a new token when
 * `allow_new`, else PC_ENOTFOUND. The token goes to out->device_token. */
int pc__gw_device_pair(struct pc__gw_ws *ws, const char *id, const char *public_key, uint32_t scopes,
		       bool allow_new, pc__gw_auth_t *out);
/* True, with the token's scopes and issue time, when `token` is device
 * `id`'s (compared in constant time). */
bool pc__gw_device_token_ok(struct pc__gw_ws *ws, const char *id, const char *token, uint32_t *scopes,
			    int64_t *issued);
/* Records (or refreshes: one per device) the pending pairing request `r`
 * describes; its id goes to r->request_id. PC_ESYS when no id could be
 * drawn. */
int pc__gw_pairing_request(struct pc__gw_ws *ws, pc__gw_pairing_t *r);

/* The device.* methods (OpenClaw's names; scope operator.pairing). */
extern const pc__gw_param_t pc__gw_pair_request_spec[1];
extern const pc__gw_param_t pc__gw_pair_device_spec[1];
extern const pc__gw_param_t pc__gw_token_revoke_spec[2];
extern const pc__gw_param_t pc__gw_token_rotate_spec[3];
void pc__gw_m_device_pair_list(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *id, const cJSON *params);
void pc__gw_m_device_pair_approve(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *id, const cJSON *params);
void pc__gw_m_device_pair_reject(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *id, const cJSON *params);
void pc__gw_m_device_pair_remove(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *id, const cJSON *params);
void pc__gw_m_device_token_rotate(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *id, const cJSON *params);
void pc__gw_m_device_token_revoke(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *id, const cJSON *params);

#endif
