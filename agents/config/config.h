/*
 * Configuration: `pincer.json`, environment overrides and built-in
 * defaults, read into one immutable pc_config_t that every agent actor
 * borrows for its life.
 *
 * Precedence, lowest first: built-in defaults (spec constants), the file,
 * environment overrides (PINCER_MODEL, PINCER_MAX_CONCURRENT,
 * PINCER_TIMEOUT_SECONDS, PINCER_WORKSPACE, and a provider's `apiKeyEnv`),
 * then whatever the caller sets on the struct afterwards (CLI flags).
 *
 * With no file and no provider configured, the config names the embedded
 * mock provider ("mock", api openai-completions, `embedded` set): the agent
 * host starts the mock LLM in-process on a loopback port and points the
 * provider at it, so `pincer agent --local` works on a fresh machine.
 *
 * Validation never stops at the first problem: every error is reported
 * with the JSON path of the offending key ("providers.openai.api: must be
 * one of openai-completions, anthropic-messages"). Unknown keys are errors
 * (a typo must not be silently ignored).
 *
 * A pc_config_t is read-only after load and may be shared by any number of
 * threads. Every string it holds is owned by it.
 */
#ifndef PINCER_AGENTS_CONFIG_CONFIG_H
#define PINCER_AGENTS_CONFIG_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/error.h"
#include "vocab.h"

#ifdef __cplusplus
extern "C" {
#endif

/* §1.2 step 9 DEFAULT_CONTEXT_TOKENS and the context-window guard. */
#define PC_CONFIG_DEFAULT_CONTEXT_TOKENS ((uint64_t)200000)
#define PC_CONFIG_CONTEXT_WARN_BELOW ((uint64_t)32000) /* CONTEXT_WINDOW_WARN_BELOW_TOKENS */
#define PC_CONFIG_CONTEXT_HARD_MIN ((uint64_t)16000)   /* CONTEXT_WINDOW_HARD_MIN_TOKENS */
/* §9.1 agents.defaults.timeoutSeconds: 48 h. */
#define PC_CONFIG_DEFAULT_RUN_TIMEOUT_MS ((uint64_t)172800 * 1000)
/* §9.1 model idle watchdogs. */
#define PC_CONFIG_IDLE_CLOUD_MS ((uint64_t)120000)       /* DEFAULT_LLM_IDLE_TIMEOUT_MS */
#define PC_CONFIG_IDLE_SELF_HOSTED_MS ((uint64_t)300000) /* SELF_HOSTED_LLM_IDLE_TIMEOUT_MS */
/* §7.2 keepRecentTokens. */
#define PC_CONFIG_DEFAULT_KEEP_RECENT_TOKENS ((uint64_t)20000)
/* How long an idle session actor stays in memory (its state is in the store). */
#define PC_CONFIG_DEFAULT_SESSION_IDLE_MS ((uint64_t)60000)
/* Bounds of this implementation. */
#define PC_CONFIG_MAX_PROVIDERS 32u
#define PC_CONFIG_MAX_MODELS 64u /* per provider */
#define PC_CONFIG_MAX_FALLBACKS (PC_RUN_MAX_CANDIDATES - 1u)

/* One credential of a provider (an auth profile, §1.11). */
typedef struct pc_auth_profile_config {
	const char *id;      /* "default" when the file gives none */
	const char *api_key; /* NULL or "": no auth header (local servers) */
} pc_auth_profile_config_t;

typedef struct pc_model_config {
	const char *id;             /* the provider's model name */
	uint64_t context_tokens;    /* 0: the provider's, else the default */
	int64_t max_tokens;         /* 0: the API's default */
	bool reasoning;             /* accepts a thinking level */
} pc_model_config_t;

/* How the model idle watchdog's default is chosen (§9.1). */
typedef enum pc_provider_class {
	PC_PROVIDER_CLOUD = 0,   /* 120 s */
	PC_PROVIDER_SELF_HOSTED, /* 300 s */
	PC_PROVIDER_LOCAL,       /* no implicit gap watchdog */
} pc_provider_class_t;

/* How a provider's http:// URL is spoken (https:// negotiates HTTP/2 by
 * ALPN whatever this says). */
typedef enum pc_provider_http2 {
	PC_PROVIDER_HTTP2_OFF = 0,         /* "http2" absent: HTTP/1.1 */
	PC_PROVIDER_HTTP2_PRIOR_KNOWLEDGE, /* "prior-knowledge": HTTP/2 in cleartext (h2c), the
					    * server known to speak it; calls share connections */
} pc_provider_http2_t;

typedef struct pc_provider_config {
	const char *id;             /* the key in "providers" */
	pc_provider_api_t api;
	const char *base_url;       /* e.g. "http://127.0.0.1:18790/v1"; NULL when embedded */
	bool embedded;              /* the in-process mock LLM (base_url filled in at start) */
	pc_provider_class_t cls;    /* from the id and base_url (§9.1), unless set */
	uint64_t idle_timeout_ms;   /* resolved: explicit, else by class; 0 = none */
	uint64_t request_timeout_ms; /* models.providers.<id>.timeoutSeconds; 0 = none */
	uint64_t context_tokens;    /* default for its models; 0 = PC_CONFIG_DEFAULT_CONTEXT_TOKENS */
	pc_provider_http2_t http2;  /* providers.<id>.http2 */
	const pc_auth_profile_config_t *profiles; /* at least one */
	size_t profile_count;
	const pc_model_config_t *models;          /* may be empty: any model name is accepted */
	size_t model_count;
} pc_provider_config_t;

/* "provider/model". */
typedef struct pc_model_ref {
	const char *provider;
	const char *model;
} pc_model_ref_t;

typedef struct pc_compaction_config {
	bool enabled;                /* threshold compaction (overflow/preflight stay on) */
	uint64_t reserve_tokens;     /* 0: the floor, 20 000 */
	uint64_t keep_recent_tokens; /* 0: 20 000 */
	uint64_t timeout_ms;         /* a single compaction; 0: 900 s */
	pc_model_ref_t model;        /* NULL provider: the session's model */
	uint64_t max_transcript_bytes; /* 0: disabled */
} pc_compaction_config_t;

/* How the `exec` tool may run commands (agents.defaults.tools.exec). */
typedef enum pc_config_exec_mode {
	PC_CONFIG_EXEC_FULL = 0,  /* any command, through /bin/sh (the default, as OpenClaw) */
	PC_CONFIG_EXEC_ALLOWLIST, /* no shell; the program must be in `allow` */
	PC_CONFIG_EXEC_OFF,       /* the tool refuses */
} pc_config_exec_mode_t;

typedef struct pc_exec_config {
	pc_config_exec_mode_t mode;
	const char *const *allow;  /* program names (allowlist mode) */
	size_t allow_count;
	const char *const *env;    /* further environment names passed to commands */
	size_t env_count;
	uint64_t timeout_ms;       /* per command when the call gives none; 0: the tool's */
	bool cgroup_off;           /* cgroup "off": no command in a cgroup of its own ("auto":
				    * where one can be made) */
} pc_exec_config_t;

/* agents.defaults.loopDetection (§4.2). Zero numbers mean the spec's
 * defaults (30 / 10 / 20 / 30). */
typedef struct pc_loop_detection_config {
	bool enabled;              /* the rolling-history detectors; default false */
	bool enabled_set;          /* "enabled" was given (explicit false also turns off §1.16) */
	uint32_t history_size;
	uint32_t warning_threshold;
	uint32_t critical_threshold;
	uint32_t global_threshold;
	bool generic_repeat, known_poll_no_progress, ping_pong; /* default true */
	uint32_t post_compaction_window; /* postCompactionGuard.windowSize; 0: 3 */
} pc_loop_detection_config_t;

/* plugins.entries.<id>: a shared object loaded at start (docs/hooks.md). */
typedef struct pc_plugin_config {
	const char *id;
	const char *path;
	bool enabled;              /* default true */
	const char *config_json;   /* its "config" object as JSON text, or "{}" */
} pc_plugin_config_t;

#define PC_CONFIG_MAX_PLUGINS 64u

typedef struct pc_agent_defaults {
	pc_model_ref_t model;           /* the primary model */
	pc_model_ref_t fallbacks[PC_CONFIG_MAX_FALLBACKS];
	size_t fallback_count;
	uint64_t run_timeout_ms;        /* 0 = unlimited */
	uint32_t max_concurrent;        /* the global lane; default min(16, max(8, cores)) */
	pc_think_level_t think;
	const char *system_prompt;      /* NULL: the built-in base prompt */
	const char *workspace;          /* NULL: the current directory */
	uint64_t bootstrap_max_chars;   /* per context file; 0: 20 000 */
	uint64_t bootstrap_total_chars; /* all context files; 0: 150 000 */
	pc_tool_mode_t tool_mode;       /* sequential (default) or parallel */
	const char *const *tools_allow; /* NULL: every registered tool */
	size_t tools_allow_count;
	pc_compaction_config_t compaction;
	pc_queue_settings_t queue;      /* messages.queue */
	pc_run_retries_config_t retries; /* agents.defaults.runRetries */
	uint32_t rate_limit_rotations;  /* auth.cooldowns.rateLimitedProfileRotations */
	uint32_t overload_rotations;    /* auth.cooldowns.overloadedProfileRotations */
	uint64_t overloaded_backoff_ms; /* auth.cooldowns.overloadedBackoffMs */
	uint32_t idle_breaker_cap;      /* 0 disables; default PC_IDLE_BREAKER_DEFAULT_CAP */
	bool loop_guard;                /* §1.16: on unless loopDetection.enabled is false */
	pc_loop_detection_config_t loop_detection;
	pc_exec_config_t exec;          /* tools.exec */
	uint64_t session_idle_ms;       /* idle session actors stop after this */
} pc_agent_defaults_t;

typedef struct pc_diagnostics_config {
	bool enabled;      /* default true: stuck-session recovery on */
	uint64_t warn_ms;  /* 0: 2 min (pc_diag_warn_ms) */
	uint64_t abort_ms; /* 0: max(5 min, 3 x warn) */
} pc_diagnostics_config_t;

/* gateway.auth.mode */
typedef enum pc_gateway_auth_mode {
	PC_GATEWAY_AUTH_NONE = 0, /* loopback only */
	PC_GATEWAY_AUTH_TOKEN,
	PC_GATEWAY_AUTH_PASSWORD,
} pc_gateway_auth_mode_t;

#define PC_GATEWAY_DEFAULT_PORT 18789u
#define PC_GATEWAY_DEFAULT_TICK_MS ((uint64_t)30000)          /* TICK_INTERVAL_MS */
#define PC_GATEWAY_DEFAULT_MAX_PAYLOAD ((uint64_t)25 << 20)   /* MAX_PAYLOAD_BYTES */
#define PC_GATEWAY_DEFAULT_MAX_BUFFERED ((uint64_t)50 << 20)  /* MAX_BUFFERED_BYTES */
/* assistant and thinking agent events go to a client at most this often
 * per run, each with the deltas merged since the last */
#define PC_GATEWAY_DEFAULT_DELTA_INTERVAL_MS ((uint64_t)50)
#define PC_GATEWAY_PREAUTH_MAX_PAYLOAD ((uint64_t)64 << 10)   /* frames before connect */
#define PC_GATEWAY_DEFAULT_HANDSHAKE_MS ((uint64_t)10000)     /* DEFAULT_PREAUTH_HANDSHAKE_TIMEOUT_MS */
#define PC_GATEWAY_DEFAULT_DRAIN_MS ((uint64_t)30000)
/* gateway.http.sseKeepAliveMs: silence before an SSE comment line goes out */
#define PC_GATEWAY_DEFAULT_SSE_KEEPALIVE_MS ((uint64_t)15000)

/* gateway.auth.rateLimit: failed secret and device-token attempts per
 * client address (docs/gateway.md, "Guessing secrets"). */
typedef struct pc_gateway_auth_limit {
	uint32_t max_attempts;   /* failures within window_ms before a lockout; 0: no limit */
	uint64_t window_ms;
	uint64_t lockout_ms;     /* the first lockout; each next one doubles */
	uint64_t max_lockout_ms; /* the longest */
	bool exempt_loopback;    /* direct loopback clients are never locked out */
} pc_gateway_auth_limit_t;

#define PC_GATEWAY_DEFAULT_AUTH_ATTEMPTS 10u
#define PC_GATEWAY_DEFAULT_AUTH_WINDOW_MS ((uint64_t)60000)
#define PC_GATEWAY_DEFAULT_AUTH_LOCKOUT_MS ((uint64_t)30000)
#define PC_GATEWAY_DEFAULT_AUTH_MAX_LOCKOUT_MS ((uint64_t)900000)

/* The gateway (`pincer gateway`, docs/gateway.md). */
typedef struct pc_gateway_config {
	const char *bind;            /* numeric address; default "127.0.0.1" */
	uint16_t port;               /* default 18789; 0: any free port */
	pc_gateway_auth_mode_t auth; /* default: token when one is set, else none */
	const char *token;           /* gateway.auth.token or $PINCER_GATEWAY_TOKEN */
	const char *password;        /* gateway.auth.password or $PINCER_GATEWAY_PASSWORD */
	uint64_t tick_ms;
	uint64_t max_payload;        /* bytes of one frame after connect */
	uint64_t max_buffered;       /* bytes queued for one client before it is cut off */
	uint64_t delta_interval_ms;  /* gateway.deltaIntervalMs: agent deltas per run per client */
	uint64_t handshake_ms;       /* connect must complete within */
	uint64_t drain_ms;           /* SIGTERM: how long runs may finish */
	uint64_t sse_keepalive_ms;   /* gateway.http.sseKeepAliveMs; 0: none */
	pc_gateway_auth_limit_t auth_limit;
	/* gateway.allowedOrigins: browser origins besides the gateway's own
	 * ("https://ui.example.com"), each valid for pc_origin_parse */
	const char *const *allowed_origins;
	size_t allowed_origin_count;
	/* gateway.trustedProxies: addresses or CIDR ranges whose forwarding
	 * headers name the client (pc_netcidr_parse) */
	const char *const *trusted_proxies;
	size_t trusted_proxy_count;
	/* gateway.controlUi (docs/control-ui.md): the directory holding a
	 * Control UI build, served at "/" over plain GET; NULL: none */
	const char *control_ui_root;
	bool control_ui_enabled; /* gateway.controlUi.enabled; default true */
} pc_gateway_config_t;

/* cluster: gateways sharing one PostgreSQL store (docs/cluster.md). */
#define PC_CLUSTER_DEFAULT_LEASE_MS 10000u
#define PC_CLUSTER_SECRET_MIN 16u /* bytes */
#define PC_CLUSTER_NAME_MAX 255u  /* a node id's bytes: what the store keeps */
typedef struct pc_cluster_config {
	bool enabled;              /* the section is present */
	const char *node_id;       /* cluster.nodeId; NULL: the host name and the gateway's port */
	const char *advertise_url; /* cluster.advertiseUrl: how other nodes reach this one; NULL:
				    * http://<host name>:<port> */
	const char *secret;        /* cluster.secret (env PINCER_CLUSTER_SECRET), shared by the nodes */
	uint32_t lease_ms;         /* cluster.leaseMs: a node not heard from this long is gone */
	bool forward;              /* cluster.forward (default true): a request for a session another
				    * node prefers goes there; false: served here (a balancer that hashes
				    * the session key sends each session to one node) */
} pc_cluster_config_t;

typedef struct pc_config {
	const pc_provider_config_t *providers;
	size_t provider_count;
	pc_agent_defaults_t agent;
	pc_diagnostics_config_t diagnostics;
	const pc_plugin_config_t *plugins;
	size_t plugin_count;
	pc_gateway_config_t gateway;
	const char *store_path;  /* NULL: pc_store_default_path() */
	const char *store_url;   /* a postgresql:// URI: the store is there, not in
				  * the file (env PINCER_STORE_URL); NULL: SQLite */
	uint32_t store_statement_timeout_ms; /* PostgreSQL; 0: the store's default */
	/* the store's group commit (pc_store_config_t; 0: its default) */
	uint32_t store_window_ms, store_group_max, store_lazy_ms;
	uint32_t store_idem_hours; /* how long idempotency keys are kept; 0: the store's 24 h */
	pc_cluster_config_t cluster;
	const char *source;      /* the file it came from, or NULL */
} pc_config_t;

/* Every problem found, each "path: message". */
typedef struct pc_config_errors {
	char **items;
	size_t count;
} pc_config_errors_t;
void pc_config_errors_free(pc_config_errors_t *e);

/*
 * Parses `json[0..len)` (the file's text) on top of the defaults, applies
 * the environment overrides, and validates. On success *out is the
 * caller's (pc_config_free). PC_EINVAL with every problem in `errs` (may
 * be NULL) when the text is not valid JSON or fails validation; PC_ENOMEM.
 * `source` (may be NULL) is the path, for messages. *errs is overwritten
 * (it need not be initialised) and is the caller's to release with
 * pc_config_errors_free whatever the result (empty on success). Empty or
 * all-blank text is the defaults.
 */
int pc_config_parse(const char *json, size_t len, const char *source, pc_config_t **out,
		    pc_config_errors_t *errs);

/*
 * Loads `path`; NULL: $PINCER_CONFIG, else ./pincer.json, else
 * $PINCER_HOME/pincer.json; when none of those exists, the defaults (the
 * embedded mock provider). A path given explicitly that does not exist is
 * an error (PC_ENOTFOUND, with the path in `errs`); so is a non-empty
 * $PINCER_CONFIG naming a missing file. PC_ESYS when a file exists but
 * cannot be read, PC_ELIMIT past 16 MiB; otherwise as pc_config_parse. A
 * file found by the search that is invalid is reported, never skipped.
 */
int pc_config_load(const char *path, pc_config_t **out, pc_config_errors_t *errs);

/* The defaults alone (plus environment overrides). PC_EINVAL when an
 * override is bad (pc_config_load or pc_config_parse say which). */
int pc_config_default(pc_config_t **out);

void pc_config_free(pc_config_t *c);

/* The provider named `id`, or NULL. */
const pc_provider_config_t *pc_config_provider(const pc_config_t *c, const char *id);

/* The model entry `model` of `p`, or NULL when the provider lists none by
 * that name (any name is still usable; defaults apply). */
const pc_model_config_t *pc_config_model(const pc_provider_config_t *p, const char *model);

/* The effective context window of provider/model: min(model's, provider's
 * or the default). */
uint64_t pc_config_context_tokens(const pc_config_t *c, const pc_model_ref_t *ref);

/* Parses "provider/model" (the provider part is required). The strings
 * point into `text`'s copy in *buf (malloc'd; the caller frees). */
int pc_config_model_ref_parse(const char *text, pc_model_ref_t *out, char **buf);

/* The config as JSON with every default filled in and api keys redacted
 * ("***"), malloc'd (free()). For `pincer config show`; the text is itself
 * a valid pincer.json. PC_EINVAL, PC_ENOMEM. */
int pc_config_to_json(const pc_config_t *c, char **out);

#ifdef __cplusplus
}
#endif

/* The exec launchers' table is part of the configuration's API. */
#include "exec_launchers.h"

#endif
