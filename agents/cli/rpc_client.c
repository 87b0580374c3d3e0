/*
 * The commands' RPC client (rpc_client.h): the gateway handshake and
 * request / answer matching over the I/O layer's WebSocket client
 * (io/ws_client.h), and how a command finds its gateway (flags,
 * environment, configuration).
 *
 * A client runs a small runtime of its own (one worker, one I/O thread).
 * The connection's messages go to an inbox actor, which queues them for
 * the command's thread; pc_cli_rpc_next waits on that queue with a
 * deadline, so a frame that arrives after a wait gave up is still there
 * for the next one.
 */
#include "rpc_client.h"

#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/clock.h"
#include "runtime/runtime.h"
#include "runtime/version.h"
#include "agents/config/config.h"
#include "io/io.h"
#include "commands.h"
#include "device_identity.h"

#define DEFAULT_TIMEOUT_MS 10000
/* How long pc_cli_rpc_free waits for the gateway's close. */
#define BYE_MS 1000

/* A message the inbox queued. */
typedef struct frame_node {
	struct frame_node *next;
	size_t len;
	char text[];
} frame_node_t;

struct pc_cli_rpc {
	pc_runtime_t *rt;
	pc_io_t *io;
	pc_actor_t *inbox;
	pc_wsc_t *ws;
	unsigned next_id;
	cJSON *hello; /* the hello-ok payload */

	/* Shared with the inbox actor. */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	frame_node_t *head, *tail;
	bool opened;
	bool ended;
	pc_wsc_closed_msg_t end; /* once ended */
};

/* Milliseconds left until `until` (0 once past). */
static int64_t left_ms(int64_t until)
{
	int64_t left = until - pc__clock_mono_ms();
	return left > 0 ? left : 0;
}

static const char *str(const cJSON *o, const char *k)
{
	return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, k));
}

static bool is(const char *a, const char *b) { return a && !strcmp(a, b); }

/* ---- the inbox ---- */

static int inbox_receive(pc_ctx_t *ctx, void *state, pc_msg_t *msg)
{
	(void)ctx;
	pc_cli_rpc_t *c = state;
	frame_node_t *n = NULL;
	if (msg->type == PC_MSG_WSC_MESSAGE) {
		const pc_wsc_message_msg_t *m = pc_msg_cdata(msg);
		n = malloc(sizeof(*n) + m->len + 1);
		if (n) {
			n->next = NULL;
			n->len = m->len;
			memcpy(n->text, m->data, m->len + 1);
		}
	}
	pthread_mutex_lock(&c->mu);
	if (msg->type == PC_MSG_WSC_OPEN) {
		c->opened = true;
	} else if (msg->type == PC_MSG_WSC_CLOSED) {
		c->end = *(const pc_wsc_closed_msg_t *)pc_msg_cdata(msg);
		c->ended = true;
	} else if (n) {
		if (c->tail)
			c->tail->next = n;
		else
			c->head = n;
		c->tail = n;
	} else if (msg->type == PC_MSG_WSC_MESSAGE) {
		/* a frame lost to memory: the conversation cannot go on */
		c->end.outcome = PC_WSC_FAILED;
		c->end.reason = PC_ENOMEM;
		c->end.code = 1006;
		c->ended = true;
	}
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->mu);
	return 0;
}

static const pc_behavior_t inbox_b = {.name = "cli-rpc-inbox", .receive = inbox_receive};

static bool has_frame(const pc_cli_rpc_t *c) { return c->head || c->ended; }
static bool has_opened(const pc_cli_rpc_t *c) { return c->opened || c->ended; }
static bool has_ended(const pc_cli_rpc_t *c) { return c->ended; }

/* Waits, with c->mu held, until `cond` holds or the monotonic clock
 * reaches `until` (< 0: no limit). False when the time ran out first. */
static bool wait_for(pc_cli_rpc_t *c, bool (*cond)(const pc_cli_rpc_t *), int64_t until)
{
	while (!cond(c)) {
		if (until < 0) {
			pthread_cond_wait(&c->cv, &c->mu);
			continue;
		}
		struct timespec ts = {until / 1000, (long)(until % 1000) * 1000000};
		if (pthread_cond_timedwait(&c->cv, &c->mu, &ts) == ETIMEDOUT)
			return cond(c);
	}
	return true;
}

/* ---- frames ---- */

int pc_cli_rpc_next(pc_cli_rpc_t *c, int64_t timeout_ms, cJSON **frame)
{
	*frame = NULL;
	int64_t until = timeout_ms < 0 ? -1 : pc__clock_mono_ms() + timeout_ms;
	pthread_mutex_lock(&c->mu);
	bool any = wait_for(c, has_frame, until);
	frame_node_t *n = c->head;
	if (n) {
		c->head = n->next;
		if (!c->head)
			c->tail = NULL;
	}
	pthread_mutex_unlock(&c->mu);
	if (!n)
		return any ? PC_ESTOPPED : PC_ETIMEDOUT; /* ended: the gateway closed, or the client did */
	cJSON *f = cJSON_ParseWithLength(n->text, n->len);
	free(n);
	if (!cJSON_IsObject(f)) {
		cJSON_Delete(f);
		return PC_EINVAL;
	}
	*frame = f;
	return 0;
}

int pc_cli_rpc_until(pc_cli_rpc_t *c, int64_t timeout_ms, pc_cli_rpc_pick_fn pick, void *user, cJSON **out)
{
	int64_t until = timeout_ms < 0 ? -1 : pc__clock_mono_ms() + timeout_ms;
	*out = NULL;
	for (bool first = true;; first = false) {
		int64_t left = until < 0 ? -1 : until - pc__clock_mono_ms();
		if (until >= 0 && left <= 0) {
			if (!first)
				return PC_ETIMEDOUT;
			left = 0; /* a zero timeout still looks at what is buffered */
		}
		cJSON *f = NULL;
		int rc = pc_cli_rpc_next(c, left, &f);
		if (rc != 0)
			return rc;
		if (pick(user, f)) {
			*out = f;
			return 0;
		}
		cJSON_Delete(f);
	}
}

bool pc_cli_rpc_is_res(const cJSON *f, const char *id)
{
	return is(str(f, "type"), "res") && is(str(f, "id"), id);
}

static bool pick_res(void *user, const cJSON *f) { return pc_cli_rpc_is_res(f, user); }

int pc_cli_rpc_send(pc_cli_rpc_t *c, const char *method, cJSON *params, char *id)
{
	char own[PC_CLI_RPC_ID_MAX];
	snprintf(own, sizeof(own), "%u", ++c->next_id);
	cJSON *f = cJSON_CreateObject();
	bool ok = f && cJSON_AddStringToObject(f, "type", "req") && cJSON_AddStringToObject(f, "id", own) &&
		  cJSON_AddStringToObject(f, "method", method);
	if (ok && params) {
		ok = cJSON_AddItemToObject(f, "params", params);
		params = ok ? NULL : params;
	}
	char *text = ok ? cJSON_PrintUnformatted(f) : NULL;
	cJSON_Delete(params);
	cJSON_Delete(f);
	if (!text)
		return PC_ENOMEM;
	int rc = pc_wsc_send(c->ws, PC_WS_TEXT, text, strlen(text));
	cJSON_free(text);
	if (rc == 0 && id)
		memcpy(id, own, sizeof(own));
	return rc == 0 ? 0 : PC_ESTOPPED;
}

int pc_cli_rpc_call(pc_cli_rpc_t *c, const char *method, cJSON *params, int64_t timeout_ms, cJSON **res)
{
	char id[PC_CLI_RPC_ID_MAX];
	*res = NULL;
	int rc = pc_cli_rpc_send(c, method, params, id);
	return rc ? rc : pc_cli_rpc_until(c, timeout_ms, pick_res, id, res);
}

const char *pc_cli_rpc_error_text(const cJSON *res, char *buf, size_t cap)
{
	const cJSON *e = cJSON_GetObjectItemCaseSensitive(res, "error");
	const char *code = str(e, "code"), *msg = str(e, "message");
	snprintf(buf, cap, "%s%s%s", code ? code : "ERROR", msg ? ": " : "", msg ? msg : "");
	return buf;
}

const cJSON *pc_cli_rpc_payload(const char *cmd, const cJSON *res)
{
	const cJSON *p = cJSON_GetObjectItemCaseSensitive(res, "payload");
	if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(res, "ok")) && cJSON_IsObject(p))
		return p;
	char why[400];
	fprintf(stderr, "%s: %s\n", cmd, pc_cli_rpc_error_text(res, why, sizeof(why)));
	return NULL;
}

const char *pc_cli_rpc_lost(const pc_cli_rpc_t *c, char *buf, size_t cap)
{
	pc_cli_rpc_t *m = (pc_cli_rpc_t *)c; /* the lock only */
	pthread_mutex_lock(&m->mu);
	bool ended = c->ended;
	uint16_t code = c->end.code;
	char why[sizeof(c->end.text)];
	memcpy(why, c->end.text, sizeof(why));
	pthread_mutex_unlock(&m->mu);
	/* the server's close frame, when one came */
	if (ended && code && code != 1006)
		snprintf(buf, cap, "the gateway closed the connection (%u%s%s)", (unsigned)code, why[0] ? ": " : "",
			 why);
	else
		snprintf(buf, cap, "the connection to the gateway was lost");
	return buf;
}

const char *pc_cli_rpc_strerror(const pc_cli_rpc_t *c, int rc, char *buf, size_t cap)
{
	if (rc == PC_ESTOPPED)
		return pc_cli_rpc_lost(c, buf, cap);
	snprintf(buf, cap, "%s", rc == PC_ETIMEDOUT ? "no answer in time"
				 : rc == PC_EINVAL  ? "the gateway sent a frame that is not JSON"
						    : pc_strerror(rc));
	return buf;
}

const cJSON *pc_cli_rpc_hello(const pc_cli_rpc_t *c) { return c->hello; }

void pc_cli_rpc_free(pc_cli_rpc_t *c)
{
	if (!c)
		return;
	if (c->ws) {
		pthread_mutex_lock(&c->mu);
		bool live = c->opened && !c->ended;
		pthread_mutex_unlock(&c->mu);
		/* a courtesy: the connection ends anyway */
		if (live && pc_wsc_close(c->ws, 1000, "bye") == 0) {
			int64_t until = pc__clock_mono_ms() + BYE_MS;
			pthread_mutex_lock(&c->mu);
			(void)wait_for(c, has_ended, until);
			pthread_mutex_unlock(&c->mu);
		}
		pc_wsc_release(c->ws);
	}
	/* Ends what is left; the inbox's messages are then dropped with it. */
	pc_io_free(c->io);
	pc_actor_release(c->inbox);
	pc_runtime_free(c->rt);
	while (c->head) {
		frame_node_t *n = c->head;
		c->head = n->next;
		free(n);
	}
	pthread_cond_destroy(&c->cv);
	pthread_mutex_destroy(&c->mu);
	cJSON_Delete(c->hello);
	free(c);
}

/* A client with its runtime, I/O thread and inbox, not connected. */
static int client_new(pc_cli_rpc_t **out)
{
	pc_cli_rpc_t *c = calloc(1, sizeof(*c));
	if (!c)
		return PC_ENOMEM;
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_mutex_init(&c->mu, NULL);
	pthread_cond_init(&c->cv, &ca);
	pthread_condattr_destroy(&ca);
	pc_runtime_config_t rcfg;
	pc_runtime_config_init(&rcfg);
	rcfg.workers = 1;
	rcfg.blocking_threads = 1;
	pc_io_config_t icfg = {.threads = 1};
	int rc = pc_runtime_new(&rcfg, &c->rt);
	if (rc == 0)
		rc = pc_runtime_start(c->rt);
	if (rc == 0)
		rc = pc_io_new(c->rt, &icfg, &c->io);
	if (rc == 0)
		rc = pc_spawn(c->rt, &inbox_b, c, &c->inbox);
	if (rc != 0) {
		pc_cli_rpc_free(c);
		return rc;
	}
	*out = c;
	return 0;
}

/* Opens the WebSocket and waits for the upgrade (or its failure). On
 * failure *http is the upgrade's status, errno what the system said. */
static int open_ws(pc_cli_rpc_t *c, const pc_cli_rpc_options_t *o, int64_t timeout, int *http)
{
	pc_wsc_options_t wo = {.host = o->host, .port = o->port, .path = o->path,
			       .open_timeout_ms = (uint32_t)timeout};
	int rc = pc_wsc_open(c->io, &wo, c->inbox, &c->ws);
	if (rc != 0)
		return rc;
	/* the client's own deadline ends the wait; this one only bounds it */
	int64_t until = pc__clock_mono_ms() + timeout + 1000;
	pthread_mutex_lock(&c->mu);
	bool any = wait_for(c, has_opened, until);
	bool opened = c->opened;
	pc_wsc_closed_msg_t end = c->end;
	pthread_mutex_unlock(&c->mu);
	if (opened)
		return 0;
	if (!any)
		return PC_ETIMEDOUT;
	*http = end.http_status;
	errno = end.sys_errno;
	return end.reason == PC_ESTOPPED ? PC_ESTATE : end.reason;
}

/* ---- the handshake ---- */

cJSON *pc_cli_rpc_connect_params(const pc_cli_rpc_options_t *o)
{
	cJSON *p = cJSON_CreateObject();
	cJSON *cl = cJSON_AddObjectToObject(p, "client");
	bool ok = cl && cJSON_AddNumberToObject(p, "minProtocol", PC_CLI_RPC_PROTOCOL_MIN) &&
		  cJSON_AddNumberToObject(p, "maxProtocol", PC_CLI_RPC_PROTOCOL_MAX) &&
		  cJSON_AddStringToObject(cl, "id", "cli") &&
		  cJSON_AddStringToObject(cl, "version", pc_version()) &&
		  cJSON_AddStringToObject(cl, "platform", "linux") && cJSON_AddStringToObject(cl, "mode", "cli") &&
		  cJSON_AddStringToObject(p, "role", "operator");
	if (ok && o->scopes) {
		cJSON *s = cJSON_AddArrayToObject(p, "scopes");
		for (const char *const *q = o->scopes; ok && *q; q++)
			ok = s && cJSON_AddItemToArray(s, cJSON_CreateString(*q));
	}
	if (ok && o->tool_events) {
		cJSON *caps = cJSON_AddArrayToObject(p, "caps");
		ok = caps && cJSON_AddItemToArray(caps, cJSON_CreateString("tool-events"));
	}
	if (ok && (o->token || o->password)) {
		cJSON *a = cJSON_AddObjectToObject(p, "auth");
		ok = a && (!o->token || cJSON_AddStringToObject(a, "token", o->token)) &&
		     (!o->password || cJSON_AddStringToObject(a, "password", o->password));
	}
	if (!ok) {
		cJSON_Delete(p);
		return NULL;
	}
	return p;
}

static bool pick_challenge(void *user, const cJSON *f)
{
	(void)user;
	return is(str(f, "type"), "event") && is(str(f, "event"), "connect.challenge");
}

/* After the upgrade: the challenge, `connect`, its answer. */
static int handshake(pc_cli_rpc_t *c, const pc_cli_rpc_options_t *o, int64_t until, char *err, size_t cap)
{
	cJSON *f = NULL, *res = NULL;
	int rc = pc_cli_rpc_until(c, left_ms(until), pick_challenge, NULL, &f);
	if (rc == 0) {
		cJSON *p = pc_cli_rpc_connect_params(o);
		const cJSON *challenge = cJSON_GetObjectItemCaseSensitive(f, "payload");
		rc = !p ? PC_ENOMEM : o->identity ? pc_cli_identity_sign(o->identity, p, challenge) : 0;
		if (rc == 0)
			rc = pc_cli_rpc_call(c, "connect", p, left_ms(until), &res);
		else
			cJSON_Delete(p);
	}
	cJSON_Delete(f);
	char lost[200];
	if (rc == PC_ESTOPPED)
		snprintf(err, cap, "%s during the handshake", pc_cli_rpc_lost(c, lost, sizeof(lost)));
	else if (rc == PC_ETIMEDOUT)
		snprintf(err, cap, "no answer to the handshake in time");
	else if (rc == PC_EINVAL)
		snprintf(err, cap, "the server does not speak the gateway protocol");
	else if (rc != 0)
		snprintf(err, cap, "%s", pc_strerror(rc));
	else if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(res, "ok"))) {
		const char *msg = str(cJSON_GetObjectItemCaseSensitive(res, "error"), "message");
		snprintf(err, cap, "the gateway refused the connection: %s", msg ? msg : "no reason given");
		if (o->refused)
			*o->refused = cJSON_DetachItemFromObjectCaseSensitive(res, "error");
		rc = PC_ESTATE;
	} else {
		c->hello = cJSON_DetachItemFromObjectCaseSensitive(res, "payload");
	}
	cJSON_Delete(res);
	return rc;
}

int pc_cli_rpc_connect(const pc_cli_rpc_options_t *o, pc_cli_rpc_t **out, char *err, size_t cap)
{
	char spare[8];
	if (!err || !cap) {
		err = spare;
		cap = sizeof(spare);
	}
	err[0] = '\0';
	if (!o || !out || !o->host || !o->port) {
		snprintf(err, cap, "no gateway address");
		return PC_EINVAL;
	}
	int64_t timeout = o->timeout_ms > 0 ? o->timeout_ms : DEFAULT_TIMEOUT_MS;
	int64_t until = pc__clock_mono_ms() + timeout;
	pc_cli_rpc_t *c = NULL;
	int rc = client_new(&c);
	if (rc != 0) {
		snprintf(err, cap, "cannot start the client: %s", pc_strerror(rc));
		return rc;
	}
	int http = 0;
	errno = 0;
	rc = open_ws(c, o, timeout, &http);
	if (rc == PC_ESYS)
		snprintf(err, cap, "cannot connect (%s): is `pincer gateway` running there?",
			 errno && errno != EINPROGRESS ? strerror(errno) : "refused or unreachable");
	else if (rc == PC_ETIMEDOUT)
		snprintf(err, cap, "no connection within %lld ms", (long long)timeout);
	else if (rc == PC_ESTATE)
		snprintf(err, cap, "not a gateway: the WebSocket upgrade was refused (HTTP %d)", http);
	else if (rc != 0)
		snprintf(err, cap, "%s", pc_strerror(rc));
	else
		rc = handshake(c, o, until, err, cap);
	if (rc != 0) {
		pc_cli_rpc_free(c);
		return rc;
	}
	*out = c;
	return 0;
}

/* ---- where the gateway is ---- */

bool pc_cli_gw_flag(pc_cli_gw_flags_t *f, int code, const char *arg)
{
	switch (code) {
	case PC_CLI_GW_OPT_URL: f->url = arg; return true;
	case PC_CLI_GW_OPT_TOKEN: f->token = arg; return true;
	case PC_CLI_GW_OPT_PASSWORD: f->password = arg; return true;
	case PC_CLI_GW_OPT_CONFIG: f->config = arg; return true;
	default: return false;
	}
}

bool pc_cli_gw_flag_or_usage(pc_cli_gw_flags_t *f, int code, int argc, char **argv, const struct option *longs,
			     void (*usage)(FILE *))
{
	if (pc_cli_gw_flag(f, code, optarg))
		return true;
	if (code == '?')
		pc_cli_suggest_option(argc, argv, longs);
	usage(stderr);
	return false;
}

static void env_or(const char **slot, const char *name)
{
	const char *v = getenv(name);
	if (!*slot && v && *v)
		*slot = v;
}

void pc_cli_gw_env(pc_cli_gw_flags_t *f)
{
	env_or(&f->url, "PINCER_GATEWAY_URL");
	env_or(&f->token, "PINCER_GATEWAY_TOKEN");
	env_or(&f->password, "PINCER_GATEWAY_PASSWORD");
	env_or(&f->config, "PINCER_CONFIG");
}

void pc_cli_gw_usage(FILE *f)
{
	fprintf(f, "  --url URL              the gateway, ws://HOST:PORT (env PINCER_GATEWAY_URL;\n"
		   "                         default: the configuration's gateway.bind/port, else\n"
		   "                         " PC_CLI_DEFAULT_URL ")\n"
		   "  --token TOKEN          the gateway's token (env PINCER_GATEWAY_TOKEN; default:\n"
		   "                         the configuration's gateway.auth.token)\n"
		   "  --password SECRET      the gateway's password (env PINCER_GATEWAY_PASSWORD)\n"
		   "  --config FILE          pincer.json, read for the defaults above (env\n"
		   "                         PINCER_CONFIG)\n");
}

int pc_cli_url_parse(const char *url, char *host, size_t host_cap, uint16_t *port, char *path, size_t path_cap,
		     const char **why)
{
	*why = "expected ws://HOST[:PORT][/PATH]";
	if (!strncmp(url, "wss://", 6)) {
		*why = "wss:// (TLS) is not supported: use ws:// on loopback or through a TLS proxy";
		return PC_EINVAL;
	}
	if (strncmp(url, "ws://", 5) != 0)
		return PC_EINVAL;
	const char *rest;
	uint16_t p = 80;
	if (pc_uri_authority(url + 5, host, host_cap, &p, &rest, why) != 0)
		return PC_EINVAL;
	if (*rest && *rest != '/')
		return PC_EINVAL;
	if (snprintf(path, path_cap, "%s", *rest ? rest : "/") >= (int)path_cap)
		return PC_EINVAL;
	*port = p;
	return 0;
}

/* A wildcard bind means "every address": this machine's is one of them. */
static const char *connectable(const char *bind)
{
	if (!bind || !*bind || !strcmp(bind, "0.0.0.0"))
		return "127.0.0.1";
	return !strcmp(bind, "::") ? "::1" : bind;
}

typedef struct target {
	char host[256], path[256];
	uint16_t port;
	const char *token, *password;
} target_t;

/* The address and secrets from the configuration, for what the flags
 * left open. Its strings live in *cfg. */
static int from_config(const char *cmd, const pc_cli_gw_flags_t *f, target_t *t, pc_config_t **cfg)
{
	pc_config_errors_t errs = {0};
	int rc = pc_config_load(f->config, cfg, &errs);
	for (size_t i = 0; rc && i < errs.count; i++)
		fprintf(stderr, "%s\n", errs.items[i]);
	if (rc && !errs.count)
		fprintf(stderr, "%s: cannot load the configuration: %s\n", cmd, pc_strerror(rc));
	pc_config_errors_free(&errs);
	if (rc)
		return 1;
	const pc_gateway_config_t *g = &(*cfg)->gateway;
	if (!f->url) {
		if (!g->port) {
			fprintf(stderr, "%s: the configuration's gateway.port is 0 (any free port): pass --url\n",
				cmd);
			return 1;
		}
		snprintf(t->host, sizeof(t->host), "%s", connectable(g->bind));
		snprintf(t->path, sizeof(t->path), "/");
		t->port = g->port;
	}
	if (!f->token && !f->password) {
		t->token = g->auth == PC_GATEWAY_AUTH_TOKEN ? g->token : NULL;
		t->password = g->auth == PC_GATEWAY_AUTH_PASSWORD ? g->password : NULL;
	}
	return 0;
}

int pc_cli_gw_connect(const char *cmd, const pc_cli_gw_flags_t *f, const char *const *scopes, bool tool_events,
		      pc_cli_rpc_t **out)
{
	target_t t = {.token = f->token, .password = f->password};
	pc_config_t *cfg = NULL;
	const char *why = NULL;
	if (f->url && pc_cli_url_parse(f->url, t.host, sizeof(t.host), &t.port, t.path, sizeof(t.path), &why)) {
		fprintf(stderr, "%s: bad gateway URL '%s': %s\n", cmd, f->url, why);
		return 2;
	}
	/* The configuration only matters for what the flags left open. */
	if ((!f->url || (!f->token && !f->password)) && from_config(cmd, f, &t, &cfg)) {
		pc_config_free(cfg);
		return 1;
	}
	pc_cli_rpc_options_t o = {.host = t.host, .port = t.port, .path = t.path, .token = t.token,
				  .password = t.password, .scopes = scopes, .tool_events = tool_events};
	char err[400];
	int rc = pc_cli_rpc_connect(&o, out, err, sizeof(err));
	if (rc != 0) {
		bool v6 = strchr(t.host, ':') != NULL;
		fprintf(stderr, "%s: gateway ws://%s%s%s:%u: %s\n", cmd, v6 ? "[" : "", t.host, v6 ? "]" : "",
			(unsigned)t.port, err);
		if (strstr(err, "token missing"))
			fprintf(stderr, "%s: pass --token or set PINCER_GATEWAY_TOKEN\n", cmd);
	}
	pc_config_free(cfg);
	return rc == 0 ? 0 : 1;
}
