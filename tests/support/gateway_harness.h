/*
 * The gateway for tests: a whole agent layer (agent_harness.h: runtime,
 * I/O, store, agent and the embedded mock LLM) with a gateway on an
 * ephemeral loopback port, and a small RPC client over the blocking
 * WebSocket fixture (tests/support/ws_blocking.h).
 */
#ifndef PC_TESTS_GATEWAY_HARNESS_H
#define PC_TESTS_GATEWAY_HARNESS_H

#include <stdarg.h>

#include "agent_harness.h"
#include "agents/gateway/gateway.h"
#include "tests/support/ws_blocking.h"

#define GW_TOKEN "s3cret-token"

/* One embedded provider, token auth; `extra` goes into "gateway". */
#define GW_CONFIG(extra)                                                                           \
	"{\"providers\":{\"mock\":{\"api\":\"openai-completions\",\"embedded\":true,\"apiKey\":\"k\"}}," \
	"\"agents\":{\"defaults\":{\"model\":\"mock/m1\",\"maxConcurrent\":16,\"sessionIdleSeconds\":1}}," \
	"\"gateway\":{\"auth\":{\"mode\":\"token\",\"token\":\"" GW_TOKEN "\"}" extra "}}"

typedef struct gw {
	harness_t h;
	pc_gateway_t *g;
	uint16_t port;
} gw_t;

/* Parses `config`; the embedded mock plays `scenario`; `tune` (may be
 * NULL) adjusts the configuration before the gateway starts (short ticks,
 * small caps). */
static inline void gw_start_scenario(gw_t *f, const char *config, const char *scenario,
				     void (*tune)(pc_config_t *))
{
	harness_start_with(&f->h, config, scenario, NULL);
	if (tune)
		tune(f->h.cfg);
	pc_gateway_options_t o = {
	    .rt = f->h.rt, .io = f->h.io, .agent = f->h.agent, .config = f->h.cfg, .port = 0, .log = harness_log};
	cr_assert_eq(pc_gateway_new(&o, &f->g), 0);
	cr_assert_eq(pc_gateway_start(f->g), 0);
	f->port = pc_gateway_port(f->g);
	cr_assert_neq(f->port, 0);
}

static inline void gw_start(gw_t *f, const char *config, void (*tune)(pc_config_t *))
{
	gw_start_scenario(f, config, "{}", tune);
}

/* Stops the gateway and the agent, closes the store and starts them all
 * again on the same store file (a new port). */
static inline void gw_restart(gw_t *f, const char *scenario)
{
	pc_gateway_free(f->g);
	harness_restart_agent(&f->h, scenario);
	pc_gateway_options_t o = {
	    .rt = f->h.rt, .io = f->h.io, .agent = f->h.agent, .config = f->h.cfg, .port = 0, .log = harness_log};
	cr_assert_eq(pc_gateway_new(&o, &f->g), 0);
	cr_assert_eq(pc_gateway_start(f->g), 0);
	f->port = pc_gateway_port(f->g);
}

/* Frees the gateway and the agent layer; no actor may be left behind, and
 * (under ASan) no memory. */
static inline void gw_stop(gw_t *f)
{
	pc_gateway_free(f->g);
	harness_stop_no_leaks(&f->h);
	ASSERT_NO_LEAKS();
}

/* ---- the client ---- */

/* Milliseconds left until `until` (0 once past). */
static inline int64_t left_ms(uint64_t until)
{
	uint64_t now = now_ms();
	return until > now ? (int64_t)(until - now) : 0;
}

typedef struct cl {
	tws_t *ws;
	unsigned next_id;
	cJSON *events;   /* frames read while waiting for others, oldest first */
	uint64_t last_seq; /* of the last event frame read */
	bool seq_gap;    /* an event frame's seq was not the last + 1 */
} cl_t;

static inline cl_t *cl_open_with(const tws_options_t *o)
{
	cl_t *c = calloc(1, sizeof(*c));
	cr_assert_not_null(c);
	int rc = tws_connect(o, &c->ws, NULL);
	cr_assert_eq(rc, 0, "connect: %s", pc_strerror(rc));
	c->events = cJSON_CreateArray();
	return c;
}

static inline cl_t *cl_open(uint16_t port)
{
	tws_options_t o = {.port = port};
	return cl_open_with(&o);
}

static inline void cl_free(cl_t *c)
{
	if (!c)
		return;
	tws_free(c->ws);
	cJSON_Delete(c->events);
	free(c);
}

/* The next frame, parsed; NULL on timeout or close. */
static inline cJSON *cl_frame(cl_t *c, int64_t timeout_ms)
{
	char *m = NULL;
	size_t len = 0;
	if (tws_recv(c->ws, timeout_ms, &m, &len) != 0)
		return NULL;
	cJSON *f = cJSON_ParseWithLength(m, len);
	cr_assert_not_null(f, "not JSON: %s", m);
	free(m);
	const char *type = jstr(f, "type");
	if (!strcmp(type, "event")) {
		uint64_t seq = (uint64_t)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(f, "seq"));
		if (seq != c->last_seq + 1)
			c->seq_gap = true;
		c->last_seq = seq;
	}
	return f;
}

static inline void cl_send(cl_t *c, cJSON *frame)
{
	char *t = cJSON_PrintUnformatted(frame);
	cr_assert_not_null(t);
	cr_assert_eq(tws_send_text(c->ws, t, strlen(t)), 0);
	cJSON_free(t);
	cJSON_Delete(frame);
}

static inline void cl_send_raw(cl_t *c, const char *text)
{
	cr_assert_eq(tws_send_text(c->ws, text, strlen(text)), 0);
}

/* The same bytes in a binary frame, which the gateway reads as text too. */
static inline void cl_send_binary(cl_t *c, const char *text)
{
	cr_assert_eq(tws_send_binary(c->ws, text, strlen(text)), 0);
}

/* Sends a request (takes `params`, may be NULL); the id goes to id_out. */
static inline void cl_req(cl_t *c, const char *method, cJSON *params, char *id_out)
{
	char id[32];
	snprintf(id, sizeof(id), "r%u", ++c->next_id);
	cJSON *f = cJSON_CreateObject();
	cJSON_AddStringToObject(f, "type", "req");
	cJSON_AddStringToObject(f, "id", id);
	cJSON_AddStringToObject(f, "method", method);
	if (params)
		cJSON_AddItemToObject(f, "params", params);
	cl_send(c, f);
	if (id_out)
		strcpy(id_out, id);
}

static inline bool is_res(const cJSON *f, const char *id)
{
	return !strcmp(jstr(f, "type"), "res") && !strcmp(jstr(f, "id"), id);
}

/* Reads until the answer to `id` (or takes it from the frames kept);
 * other frames read meanwhile are kept. NULL when none came in time. The
 * caller deletes the answer. */
static inline cJSON *cl_await_res(cl_t *c, const char *id, int64_t timeout_ms)
{
	cJSON *k;
	cJSON_ArrayForEach(k, c->events) {
		if (is_res(k, id))
			return cJSON_DetachItemViaPointer(c->events, k);
	}
	uint64_t until = now_ms() + (uint64_t)timeout_ms;
	while (now_ms() < until) {
		cJSON *f = cl_frame(c, left_ms(until));
		if (!f)
			return NULL;
		if (is_res(f, id))
			return f;
		cJSON_AddItemToArray(c->events, f);
	}
	return NULL;
}

static inline cJSON *cl_call(cl_t *c, const char *method, cJSON *params)
{
	char id[32];
	cl_req(c, method, params, id);
	cJSON *r = cl_await_res(c, id, 30000);
	cr_assert_not_null(r, "no answer to %s", method);
	return r;
}

/* The first kept or new event named `name` (removed from the kept list;
 * the caller deletes it), or NULL after timeout_ms. */
static inline cJSON *cl_await_event(cl_t *c, const char *name, int64_t timeout_ms)
{
	cJSON *e;
	cJSON_ArrayForEach(e, c->events) {
		if (!strcmp(jstr(e, "event"), name))
			return cJSON_DetachItemViaPointer(c->events, e);
	}
	uint64_t until = now_ms() + (uint64_t)timeout_ms;
	while (now_ms() < until) {
		cJSON *f = cl_frame(c, left_ms(until));
		if (!f)
			return NULL;
		if (!strcmp(jstr(f, "type"), "event") && !strcmp(jstr(f, "event"), name))
			return f;
		cJSON_AddItemToArray(c->events, f);
	}
	return NULL;
}

static inline const cJSON *jget(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }
static inline double jnum(const cJSON *o, const char *k) { return cJSON_GetNumberValue(jget(o, k)); }
static inline bool jok(const cJSON *res) { return cJSON_IsTrue(jget(res, "ok")); }
static inline const char *jerr(const cJSON *res) { return jstr(jget(res, "error"), "code"); }
static inline const char *jdetail(const cJSON *res) { return jstr(jget(jget(res, "error"), "details"), "code"); }

/* connect params: the usual client, protocol 3..4, token (may be NULL),
 * scopes (a JSON array as text, or NULL). */
static inline cJSON *connect_params(const char *token, const char *scopes)
{
	cJSON *p = cJSON_CreateObject();
	cJSON_AddNumberToObject(p, "minProtocol", 3);
	cJSON_AddNumberToObject(p, "maxProtocol", 4);
	cJSON *cli = cJSON_AddObjectToObject(p, "client");
	cJSON_AddStringToObject(cli, "id", "test");
	cJSON_AddStringToObject(cli, "version", "1.0.0");
	cJSON_AddStringToObject(cli, "platform", "linux");
	cJSON_AddStringToObject(cli, "mode", "test");
	cJSON_AddStringToObject(p, "role", "operator");
	if (scopes)
		cJSON_AddItemToObject(p, "scopes", cJSON_Parse(scopes));
	if (token) {
		cJSON *a = cJSON_AddObjectToObject(p, "auth");
		cJSON_AddStringToObject(a, "token", token);
	}
	return p;
}

/* Reads the connect.challenge (the first frame); its payload, the
 * caller's. */
static inline cJSON *cl_challenge(cl_t *c)
{
	cJSON *f = cl_frame(c, 5000);
	cr_assert_not_null(f, "no challenge");
	cr_assert_str_eq(jstr(f, "type"), "event");
	cr_assert_str_eq(jstr(f, "event"), "connect.challenge");
	cJSON *p = cJSON_DetachItemFromObject(f, "payload");
	cJSON_Delete(f);
	return p;
}

/* Open, challenge, connect with `params` (taken); the answer. */
static inline cJSON *cl_handshake(cl_t *c, cJSON *params)
{
	cJSON_Delete(cl_challenge(c));
	return cl_call(c, "connect", params);
}

/* A connected client (token auth, default scopes or `scopes`). */
static inline cl_t *cl_connect_scopes(uint16_t port, const char *scopes)
{
	cl_t *c = cl_open(port);
	cJSON *r = cl_handshake(c, connect_params(GW_TOKEN, scopes));
	cr_assert(jok(r), "connect refused: %s", cJSON_PrintUnformatted(r));
	cJSON_Delete(r);
	return c;
}

static inline cl_t *cl_connect(uint16_t port) { return cl_connect_scopes(port, NULL); }

/* Expects the server to close the connection, with `code`, within 5 s. */
static inline void cl_expect_close(cl_t *c, uint16_t code)
{
	uint64_t until = now_ms() + 5000;
	for (;;) {
		cJSON *f = cl_frame(c, 200);
		cJSON_Delete(f);
		if (tws_close_code(c->ws) || now_ms() >= until)
			break;
	}
	cr_assert_eq(tws_close_code(c->ws), code, "closed with %u (%s)", tws_close_code(c->ws),
		     tws_close_reason(c->ws));
}

/* Expects the answer to request `id`, within timeout_ms, to be an
 * INVALID_REQUEST error whose message holds `why`. */
static inline void cl_expect_invalid(cl_t *c, const char *id, const char *why, int64_t timeout_ms)
{
	cJSON *r = cl_await_res(c, id, timeout_ms);
	cr_assert_not_null(r, "no answer under id %s", id);
	cr_assert_not(jok(r), "%s was accepted", id);
	cr_assert_str_eq(jerr(r), "INVALID_REQUEST", "%s", id);
	const char *m = jstr(jget(r, "error"), "message");
	cr_assert(m && strstr(m, why), "%s: message '%s' lacks '%s'", id, m ? m : "(none)", why);
	cJSON_Delete(r);
}

/* Opens a connection and sends `frame` where the connect request belongs,
 * as text or, when `binary`, in a binary frame: the gateway answers
 * INVALID_REQUEST under `id`, saying `why`, then closes with 1008. */
static inline void expect_first_frame_refused(uint16_t port, const char *frame, bool binary, const char *id,
					      const char *why)
{
	cl_t *c = cl_open(port);
	cJSON_Delete(cl_challenge(c));
	if (binary)
		cl_send_binary(c, frame);
	else
		cl_send_raw(c, frame);
	cl_expect_invalid(c, id, why, 10000);
	cl_expect_close(c, 1008);
	cl_free(c);
}

/* agent params with message and idempotency key (and session key when
 * not NULL). */
static inline cJSON *agent_params(const char *message, const char *idem, const char *key)
{
	cJSON *p = cJSON_CreateObject();
	cJSON_AddStringToObject(p, "message", message);
	cJSON_AddStringToObject(p, "idempotencyKey", idem);
	if (key)
		cJSON_AddStringToObject(p, "sessionKey", key);
	return p;
}

#endif
