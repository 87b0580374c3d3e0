/*
 * Frames and the handshake (§8.1, §8.2): every client frame is one JSON
 * object, a request {type:"req", id, method, params?}; the first must be
 * `connect`. Answers are {type:"res", id, ok, payload | error}; events
 * {type:"event", event, payload, seq} with seq counting the connection's
 * events from 1.
 *
 * Nothing a client sends can crash the gateway or cost it more than the
 * frame: before connect a bad frame gets an error (when it names an id)
 * and the connection is closed with 1008; after connect a bad frame or an
 * unknown method gets an INVALID_REQUEST answer and the connection goes on.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/clock.h"
#include "runtime/version.h"
#include "io/io.h"
#include "rpc_internal.h"

/* ---- sending ---- */

static void send_json(pc__gw_conn_t *c, cJSON *frame)
{
	char *text = frame ? pc_json_print(frame) : NULL;
	if (text)
		pc__gw_send(c, text, strlen(text));
	cJSON_free(text);
	cJSON_Delete(frame);
}

void pc__gw_reply_ok(pc__gw_conn_t *c, const char *id, cJSON *payload)
{
	cJSON *f = cJSON_CreateObject();
	if (f && cJSON_AddStringToObject(f, "type", "res") && cJSON_AddStringToObject(f, "id", id) &&
	    cJSON_AddTrueToObject(f, "ok")) {
		cJSON_AddItemToObject(f, "payload", payload ? payload : cJSON_CreateObject());
		payload = NULL;
	}
	cJSON_Delete(payload);
	send_json(c, f);
}

void pc__gw_reply_error(pc__gw_conn_t *c, const char *id, const char *code, const char *message, cJSON *details,
			cJSON *payload, bool retryable)
{
	pc__gw_reply_error_after(c, id, code, message, details, payload, retryable, 0);
}

void pc__gw_reply_error_after(pc__gw_conn_t *c, const char *id, const char *code, const char *message,
			      cJSON *details, cJSON *payload, bool retryable, uint64_t retry_after_ms)
{
	cJSON *f = cJSON_CreateObject();
	cJSON *e = cJSON_CreateObject();
	if (f && e && cJSON_AddStringToObject(f, "type", "res") && cJSON_AddStringToObject(f, "id", id) &&
	    cJSON_AddFalseToObject(f, "ok") && cJSON_AddStringToObject(e, "code", code) &&
	    cJSON_AddStringToObject(e, "message", message)) {
		if (details)
			cJSON_AddItemToObject(e, "details", details);
		if (retryable)
			cJSON_AddTrueToObject(e, "retryable");
		if (retry_after_ms)
			cJSON_AddNumberToObject(e, "retryAfterMs", (double)retry_after_ms);
		details = NULL;
		if (payload)
			cJSON_AddItemToObject(f, "payload", payload);
		payload = NULL;
		cJSON_AddItemToObject(f, "error", e);
		e = NULL;
	}
	cJSON_Delete(details);
	cJSON_Delete(payload);
	cJSON_Delete(e);
	send_json(c, f);
}

void pc__gw_event_text(pc__gw_conn_t *c, const char *name, const char *payload, size_t len)
{
	if (pc__gw_conn_gone(c))
		return;
	/* Put together as text: agent events are the hot path, and their
	 * payload is JSON already. The name is one of ours (no escaping). */
	static const char head[] = "{\"type\":\"event\",\"event\":\"";
	static const char mid[] = "\",\"payload\":";
	char tail[40];
	int tn = snprintf(tail, sizeof(tail), ",\"seq\":%llu}", (unsigned long long)(c->seq + 1));
	size_t nlen = strlen(name);
	size_t total = sizeof(head) - 1 + nlen + sizeof(mid) - 1 + len + (size_t)tn;
	char *f = malloc(total);
	if (!f)
		return;
	char *p = f;
	memcpy(p, head, sizeof(head) - 1);
	p += sizeof(head) - 1;
	memcpy(p, name, nlen);
	p += nlen;
	memcpy(p, mid, sizeof(mid) - 1);
	p += sizeof(mid) - 1;
	memcpy(p, payload, len);
	p += len;
	memcpy(p, tail, (size_t)tn);
	c->seq++;
	pc__gw_send(c, f, total);
	free(f);
}

void pc__gw_event(pc__gw_conn_t *c, const char *name, cJSON *payload)
{
	char *text = payload ? pc_json_print(payload) : NULL;
	if (text)
		pc__gw_event_text(c, name, text, strlen(text));
	cJSON_free(text);
	cJSON_Delete(payload);
}

void pc__gw_send_challenge(pc__gw_conn_t *c)
{
	char p[160];
	int n = snprintf(p, sizeof(p), "{\"nonce\":\"%s\",\"ts\":%lld}", c->nonce, (long long)c->challenge_ts);
	pc__gw_event_text(c, "connect.challenge", p, (size_t)n);
}

void pc__gw_send_tick(pc__gw_conn_t *c)
{
	char p[64];
	int n = snprintf(p, sizeof(p), "{\"ts\":%lld}", (long long)pc__clock_wall_ms());
	pc__gw_event_text(c, "tick", p, (size_t)n);
}

void pc__gw_send_shutdown(pc__gw_conn_t *c, const char *reason)
{
	if (c->shutdown_sent || c->phase != PC__GW_C_OPEN)
		return;
	c->shutdown_sent = true;
	cJSON *p = cJSON_CreateObject();
	if (p && cJSON_AddStringToObject(p, "reason", reason))
		pc__gw_event(c, "shutdown", p);
	else
		cJSON_Delete(p);
}

/* ---- parameter checks ---- */

const char *pc__gw_str(const cJSON *params, const char *name)
{
	return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(params, name));
}

static bool type_ok(const cJSON *v, pc__gw_type_t t)
{
	switch (t) {
	case PC__GW_T_STRING:
		return cJSON_IsString(v);
	case PC__GW_T_NESTR:
		return cJSON_IsString(v) && v->valuestring[0];
	case PC__GW_T_UINT:
		return cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble <= 9007199254740991.0 &&
		       v->valuedouble == (double)(int64_t)v->valuedouble;
	case PC__GW_T_BOOL:
		return cJSON_IsBool(v);
	case PC__GW_T_ARRAY:
		return cJSON_IsArray(v);
	case PC__GW_T_OBJECT:
		return cJSON_IsObject(v);
	case PC__GW_T_ANY:
		return true;
	}
	return false;
}

static const char *type_text(pc__gw_type_t t)
{
	static const char *const names[] = {"a string", "a non-empty string", "an integer >= 0", "a boolean",
					    "an array", "an object", "a value"};
	return names[t];
}

bool pc__gw_check_params(const cJSON *params, const pc__gw_param_t *spec, size_t n, bool strict, char *err,
			 size_t cap)
{
	if (params && !cJSON_IsObject(params)) {
		snprintf(err, cap, "params: must be an object");
		return false;
	}
	for (size_t i = 0; i < n; i++) {
		const cJSON *v = cJSON_GetObjectItemCaseSensitive(params, spec[i].name);
		if (!v && spec[i].required) {
			snprintf(err, cap, "%s: is required", spec[i].name);
			return false;
		}
		if (v && !type_ok(v, spec[i].type)) {
			snprintf(err, cap, "%s: must be %s", spec[i].name, type_text(spec[i].type));
			return false;
		}
	}
	const cJSON *v;
	cJSON_ArrayForEach(v, params) {
		size_t i = 0;
		while (i < n && strcmp(spec[i].name, v->string))
			i++;
		if (i == n && strict) {
			snprintf(err, cap, "unexpected property '%.64s'", v->string);
			return false;
		}
	}
	return true;
}

/* Every element of array `a` (may be NULL) is a string. */
static bool strings(const cJSON *a)
{
	const cJSON *s;
	cJSON_ArrayForEach(s, a) {
		if (!cJSON_IsString(s))
			return false;
	}
	return true;
}

void pc__gw_invalid(pc__gw_conn_t *c, const char *id, const char *method, const char *why)
{
	char msg[320];
	snprintf(msg, sizeof(msg), "invalid %s params: %s", method, why);
	pc__gw_reply_error(c, id, "INVALID_REQUEST", msg, NULL, NULL, false);
}

/* ---- scopes ---- */

static int scope_index(uint32_t bit)
{
	int i = 0;
	while (i < PC__GW_SCOPE_COUNT && bit != 1u << i)
		i++;
	return i;
}

static void forbid(pc__gw_conn_t *c, const char *id, uint32_t scope)
{
	const char *name = pc__gw_scope_name(scope_index(scope));
	char msg[96];
	snprintf(msg, sizeof(msg), "missing scope: %s", name);
	cJSON *d = cJSON_CreateObject();
	cJSON *req = cJSON_CreateArray();
	if (d && req && cJSON_AddStringToObject(d, "code", "MISSING_SCOPE") &&
	    cJSON_AddStringToObject(d, "missingScope", name)) {
		cJSON_AddItemToArray(req, cJSON_CreateString(name));
		cJSON_AddItemToObject(d, "requiredScopes", req);
		req = NULL;
	}
	cJSON_Delete(req);
	pc__gw_reply_error(c, id, "FORBIDDEN", msg, d, NULL, false);
}

/* ---- the handshake ---- */

/* A close reason fits a control frame (123 bytes); cut at a character. */
static void close_with(pc__gw_conn_t *c, uint16_t code, const char *reason)
{
	char r[124];
	size_t n = strlen(reason);
	if (n > sizeof(r) - 1) {
		n = sizeof(r) - 1;
		while (n > 0 && ((unsigned char)reason[n] & 0xC0) == 0x80)
			n--;
	}
	memcpy(r, reason, n);
	r[n] = '\0';
	pc__gw_close(c, code, r);
}

static void refuse_connect(pc__gw_conn_t *c, const char *id, uint16_t close_code, const char *code,
			   const char *message, cJSON *details)
{
	pc__gw_reply_error(c, id, code, message, details, NULL, false);
	close_with(c, close_code, message);
}

static bool connect_shape(const cJSON *params, char *err, size_t cap)
{
	static const pc__gw_param_t top[] = {
		{"minProtocol", PC__GW_T_UINT, true}, {"maxProtocol", PC__GW_T_UINT, true},
		{"client", PC__GW_T_OBJECT, true},    {"caps", PC__GW_T_ARRAY, false},
		{"role", PC__GW_T_NESTR, false},      {"scopes", PC__GW_T_ARRAY, false},
		{"auth", PC__GW_T_OBJECT, false},     {"device", PC__GW_T_OBJECT, false},
		{"cluster", PC__GW_T_OBJECT, false},
	};
	static const pc__gw_param_t client[] = {
		{"id", PC__GW_T_NESTR, true},       {"version", PC__GW_T_NESTR, true},
		{"platform", PC__GW_T_NESTR, true}, {"mode", PC__GW_T_NESTR, true},
		{"deviceFamily", PC__GW_T_STRING, false},
	};
	static const pc__gw_param_t auth[] = {
		{"token", PC__GW_T_STRING, false},
		{"password", PC__GW_T_STRING, false},
		{"deviceToken", PC__GW_T_STRING, false},
		{"bootstrapToken", PC__GW_T_STRING, false},
	};
	static const pc__gw_param_t device[] = {
		{"id", PC__GW_T_NESTR, true},       {"publicKey", PC__GW_T_NESTR, true},
		{"signature", PC__GW_T_NESTR, true}, {"signedAt", PC__GW_T_UINT, true},
		{"nonce", PC__GW_T_STRING, false},
	};
	static const pc__gw_param_t cluster[] = {
		{"nodeId", PC__GW_T_NESTR, true},
		{"proof", PC__GW_T_NESTR, true},
	};
	static const struct {
		const char *name;
		const pc__gw_param_t *spec;
		size_t n;
	} parts[] = {
		{"client", client, sizeof(client) / sizeof(client[0])},
		{"auth", auth, sizeof(auth) / sizeof(auth[0])},
		{"device", device, sizeof(device) / sizeof(device[0])},
		{"cluster", cluster, sizeof(cluster) / sizeof(cluster[0])},
	};
	char sub[160];
	if (!params) {
		snprintf(err, cap, "params: is required");
		return false;
	}
	if (!pc__gw_check_params(params, top, sizeof(top) / sizeof(top[0]), false, err, cap))
		return false;
	for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); i++) {
		const cJSON *o = cJSON_GetObjectItemCaseSensitive(params, parts[i].name);
		if (o && !pc__gw_check_params(o, parts[i].spec, parts[i].n, false, sub, sizeof(sub))) {
			snprintf(err, cap, "%s.%s", parts[i].name, sub);
			return false;
		}
	}
	if (!strings(cJSON_GetObjectItemCaseSensitive(params, "scopes")) ||
	    !strings(cJSON_GetObjectItemCaseSensitive(params, "caps"))) {
		snprintf(err, cap, "scopes and caps: must be arrays of strings");
		return false;
	}
	return true;
}

/* The highest version both sides speak, or 0. */
static int negotiate(const cJSON *params)
{
	double lo = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(params, "minProtocol"));
	double hi = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(params, "maxProtocol"));
	int best = hi > PC__GW_PROTOCOL_MAX ? PC__GW_PROTOCOL_MAX : (int)hi;
	return lo <= hi && best >= PC__GW_PROTOCOL_MIN && best >= lo ? best : 0;
}

static cJSON *protocol_details(const cJSON *params)
{
	cJSON *d = cJSON_CreateObject();
	cJSON *sup = cJSON_AddObjectToObject(d, "supported");
	cJSON_AddNumberToObject(sup, "min", PC__GW_PROTOCOL_MIN);
	cJSON_AddNumberToObject(sup, "max", PC__GW_PROTOCOL_MAX);
	cJSON *req = cJSON_AddObjectToObject(d, "requested");
	cJSON_AddNumberToObject(req, "min", cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(params, "minProtocol")));
	cJSON_AddNumberToObject(req, "max", cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(params, "maxProtocol")));
	return d;
}

static bool has_cap(const cJSON *params, const char *cap)
{
	const cJSON *s;
	cJSON_ArrayForEach(s, cJSON_GetObjectItemCaseSensitive(params, "caps")) {
		if (!strcmp(cJSON_GetStringValue(s), cap))
			return true;
	}
	return false;
}

static cJSON *scope_list(uint32_t bits)
{
	cJSON *a = cJSON_CreateArray();
	for (int i = 0; a && i < PC__GW_SCOPE_COUNT; i++)
		if (bits & (1u << i))
			cJSON_AddItemToArray(a, cJSON_CreateString(pc__gw_scope_name(i)));
	return a;
}

static const char *auth_mode_name(pc_gateway_auth_mode_t m)
{
	return m == PC_GATEWAY_AUTH_TOKEN ? "token" : m == PC_GATEWAY_AUTH_PASSWORD ? "password" : "none";
}

static cJSON *snapshot(pc__gw_conn_t *c)
{
	pc_gateway_t *g = c->g;
	cJSON *s = cJSON_CreateObject();
	cJSON_AddItemToObject(s, "presence", cJSON_CreateArray());
	cJSON_AddItemToObject(s, "health", pc__gw_health(g));
	cJSON *sv = cJSON_AddObjectToObject(s, "stateVersion");
	cJSON_AddNumberToObject(sv, "presence", 0);
	cJSON_AddNumberToObject(sv, "health", 0);
	cJSON_AddNumberToObject(s, "uptimeMs", (double)(pc_runtime_now_ms() - g->started_mono_ms));
	cJSON *sd = cJSON_AddObjectToObject(s, "sessionDefaults");
	cJSON_AddStringToObject(sd, "defaultAgentId", "main");
	cJSON_AddStringToObject(sd, "mainKey", "main");
	cJSON_AddStringToObject(sd, "mainSessionKey", "main");
	cJSON_AddStringToObject(s, "authMode", auth_mode_name(g->gcfg->auth));
	return s;
}

static cJSON *hello(pc__gw_conn_t *c, const pc__gw_auth_t *a)
{
	static const char *const events[] = {"connect.challenge", "agent", "chat", "tick", "shutdown", "sessions.changed",
					     "session.message"};
	const pc_gateway_config_t *gc = c->g->gcfg;
	cJSON *h = cJSON_CreateObject();
	cJSON_AddStringToObject(h, "type", "hello-ok");
	cJSON_AddNumberToObject(h, "protocol", c->protocol);
	cJSON *srv = cJSON_AddObjectToObject(h, "server");
	cJSON_AddStringToObject(srv, "version", PC_VERSION_STRING);
	cJSON_AddStringToObject(srv, "connId", c->conn_id);
	cJSON *f = cJSON_AddObjectToObject(h, "features");
	cJSON_AddItemToObject(f, "methods", pc__gw_method_names());
	cJSON *ev = cJSON_AddArrayToObject(f, "events");
	for (size_t i = 0; ev && i < sizeof(events) / sizeof(events[0]); i++)
		cJSON_AddItemToArray(ev, cJSON_CreateString(events[i]));
	cJSON_AddItemToObject(h, "snapshot", snapshot(c));
	if (a->device_token[0]) {
		cJSON *au = cJSON_AddObjectToObject(h, "auth");
		cJSON_AddStringToObject(au, "deviceToken", a->device_token);
		cJSON_AddStringToObject(au, "role", "operator");
		cJSON_AddItemToObject(au, "scopes", scope_list(a->scopes));
		cJSON_AddNumberToObject(au, "issuedAtMs", (double)a->issued_ms);
	}
	cJSON *pol = cJSON_AddObjectToObject(h, "policy");
	cJSON_AddNumberToObject(pol, "maxPayload", (double)gc->max_payload);
	cJSON_AddNumberToObject(pol, "maxBufferedBytes", (double)gc->max_buffered);
	cJSON_AddNumberToObject(pol, "tickIntervalMs", (double)gc->tick_ms);
	return h;
}

/* The connection is in: caps raised, ticks on, the timeout off. */
static void opened(pc__gw_conn_t *c)
{
	const pc_gateway_config_t *gc = c->g->gcfg;
	pc_runtime_t *rt = c->g->rt;
	pc__gw_phase_set(c, PC__GW_C_OPEN, "connect");
	pc_timer_cancel(rt, c->handshake_timer);
	c->handshake_timer = 0;
	__atomic_add_fetch(&c->ws->opened, 1, __ATOMIC_RELAXED);
	/* Frames after this command are measured against maxPayload. */
	(void)pc_ws_set_max_message(c->srv, c->id, 0);
	pc_msg_t *tick = pc_msg_new(PC__GW_MSG_TICK, 0);
	if (tick && pc_timer_every(c->self, gc->tick_ms, tick, &c->tick_timer) != 0)
		c->tick_timer = 0; /* no ticks: clients see a quiet connection, nothing worse */
}

/* A refused connect's answer and close. A device waiting for approval
 * hears OpenClaw's details: the request to approve, what it asked. */
static void refuse_auth(pc__gw_conn_t *c, const char *id, const pc__gw_auth_t *a)
{
	cJSON *d = cJSON_CreateObject();
	cJSON_AddStringToObject(d, "code", a->detail);
	if (a->request_id[0]) {
		cJSON_AddStringToObject(d, "reason", "not-paired");
		cJSON_AddStringToObject(d, "requestId", a->request_id);
		cJSON_AddStringToObject(d, "remediationHint", "Approve this device from the pending pairing requests.");
	}
	if (a->next_step)
		cJSON_AddStringToObject(d, "recommendedNextStep", a->next_step);
	if (a->device_id[0])
		cJSON_AddStringToObject(d, "deviceId", a->device_id);
	if (a->request_id[0]) {
		cJSON_AddStringToObject(d, "requestedRole", "operator");
		cJSON *s = cJSON_AddArrayToObject(d, "requestedScopes");
		for (int i = 0; s && i < PC__GW_SCOPE_COUNT; i++)
			if (a->scopes & (1u << i))
				cJSON_AddItemToArray(s, cJSON_CreateString(pc__gw_scope_name(i)));
	}
	if (a->retry_after_ms)
		cJSON_AddNumberToObject(d, "retryAfterMs", (double)a->retry_after_ms);
	pc__gw_reply_error(c, id, a->code, a->message, d, NULL, a->retry_after_ms > 0);
	char reason[sizeof(a->message) + 64];
	if (a->request_id[0])
		snprintf(reason, sizeof(reason), "%s (requestId: %s)", a->message, a->request_id);
	else
		snprintf(reason, sizeof(reason), "%s", a->message);
	close_with(c, 1008, reason);
}

static void on_connect(pc__gw_conn_t *c, const char *id, const cJSON *params)
{
	char err[200], msg[260];
	if (!connect_shape(params, err, sizeof(err))) {
		snprintf(msg, sizeof(msg), "invalid connect params: %s", err);
		refuse_connect(c, id, 1008, "INVALID_REQUEST", msg, NULL);
		return;
	}
	int v = negotiate(params);
	if (!v) {
		refuse_connect(c, id, 1002, "INVALID_REQUEST", "protocol mismatch", protocol_details(params));
		return;
	}
	const char *role = pc__gw_str(params, "role");
	if (role && strcmp(role, "operator") != 0) {
		snprintf(msg, sizeof(msg), "invalid connect params: role '%.64s' is not supported (operator only)", role);
		refuse_connect(c, id, 1008, "INVALID_REQUEST", msg, NULL);
		return;
	}
	pc__gw_auth_t a;
	if (pc__gw_authenticate(c, params, &a) != 0) {
		refuse_auth(c, id, &a);
		return;
	}
	c->protocol = (uint8_t)v;
	c->scopes = a.scopes;
	if (a.device) {
		pthread_mutex_lock(&c->ws->lock);
		memcpy(c->device_id, a.device_id, sizeof(c->device_id));
		pthread_mutex_unlock(&c->ws->lock);
	}
	c->tool_events = has_cap(params, "tool-events");
	opened(c);
	pc__gw_reply_ok(c, id, hello(c, &a));
	/* A client that comes in while the gateway drains hears it at once. */
	pthread_mutex_lock(&c->ws->lock);
	bool draining = c->ws->draining;
	char reason[sizeof(c->ws->shutdown_reason)];
	memcpy(reason, c->ws->shutdown_reason, sizeof(reason));
	pthread_mutex_unlock(&c->ws->lock);
	if (draining)
		pc__gw_send_shutdown(c, reason);
}

/* ---- dispatch ---- */

/* The frame's id when it has a usable one, else "invalid". */
static const char *frame_id(const cJSON *f)
{
	const char *id = pc__gw_str(f, "id");
	return id && *id && strlen(id) <= PC__GW_ID_MAX ? id : "invalid";
}

/* Checks the request frame; on failure writes why. */
static bool request_shape(const cJSON *f, char *err, size_t cap)
{
	if (!cJSON_IsObject(f)) {
		snprintf(err, cap, "invalid frame: not a JSON object");
		return false;
	}
	const char *type = pc__gw_str(f, "type");
	if (!type || strcmp(type, "req") != 0) {
		snprintf(err, cap, "invalid frame: type must be \"req\"");
		return false;
	}
	const char *id = pc__gw_str(f, "id");
	if (!id || !*id || strlen(id) > PC__GW_ID_MAX) {
		snprintf(err, cap, "invalid request frame: id must be a non-empty string of at most %u bytes",
			 PC__GW_ID_MAX);
		return false;
	}
	const char *m = pc__gw_str(f, "method");
	if (!m || !*m) {
		snprintf(err, cap, "invalid request frame: method must be a non-empty string");
		return false;
	}
	return true;
}

static void dispatch(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *id, const char *name, const cJSON *params,
		     const char *frame, size_t len)
{
	if (!strcmp(name, "connect")) {
		pc__gw_reply_error(c, id, "INVALID_REQUEST", "already connected", NULL, NULL, false);
		return;
	}
	const pc__gw_method_t *m = pc__gw_method_find(name);
	const pc__gw_empty_t *empty = m ? NULL : pc__gw_empty_find(name);
	if (empty)
		m = &empty->m;
	if (!m) {
		char msg[160];
		snprintf(msg, sizeof(msg), "unknown method: %.100s", name);
		pc__gw_reply_error(c, id, "INVALID_REQUEST", msg, NULL, NULL, false);
		return;
	}
	if (!pc__gw_scope_has(c->scopes, m->scope)) {
		forbid(c, id, m->scope);
		return;
	}
	char err[200];
	if (m->params && !pc__gw_check_params(params, m->params, m->nparams, m->strict, err, sizeof(err))) {
		pc__gw_invalid(c, id, m->name, err);
		return;
	}
	if (frame && pc__gw_relay_request(c, id, m->name, params, frame, len))
		return; /* another node runs the session */
	if (empty)
		pc__gw_empty_answer(c, id, empty);
	else
		m->fn(ctx, c, id, params);
}

/* A frame whose text is refused, parsed with its bad strings blanked, so
 * that its id can still be answered when the id itself is clean. NULL
 * when even that does not parse (or no memory). */
static cJSON *parse_refused(const char *data, size_t len)
{
	char *copy = malloc(len ? len : 1);
	if (!copy)
		return NULL;
	memcpy(copy, data, len);
	pc_json_text_blank(copy, len);
	cJSON *f = cJSON_ParseWithLength(copy, len);
	free(copy);
	return f;
}

static void on_frame(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *data, size_t len, bool relay)
{
	if (pc__gw_conn_gone(c))
		return;
	/* Text frames and binary ones alike: the RPC is JSON, and only text
	 * may reach a session (io/json_text.h). */
	pc_json_text_t text = pc_json_text_check(data, len);
	cJSON *f = text == PC_JSON_TEXT_OK ? cJSON_ParseWithLength(data, len) : parse_refused(data, len);
	char err[160];
	bool ok = request_shape(f, err, sizeof(err));
	if (text != PC_JSON_TEXT_OK) {
		ok = false;
		snprintf(err, sizeof(err), "invalid frame: the text %s", pc_json_text_why(text));
	} else if (!f) {
		snprintf(err, sizeof(err), "invalid frame: malformed JSON");
	}
	const char *method = ok ? pc__gw_str(f, "method") : NULL;
	const cJSON *params = cJSON_GetObjectItemCaseSensitive(f, "params");
	if (c->phase == PC__GW_C_CHALLENGE) {
		if (ok && !strcmp(method, "connect")) {
			on_connect(c, frame_id(f), params);
		} else {
			/* The first frame must be connect: answer what can be
			 * answered, then close. */
			const char *why = ok ? "invalid handshake: first request must be connect" : err;
			if (cJSON_IsObject(f) && pc__gw_str(f, "id"))
				pc__gw_reply_error(c, frame_id(f), "INVALID_REQUEST", why, NULL, NULL, false);
			close_with(c, 1008, why);
		}
	} else if (!ok) {
		pc__gw_reply_error(c, frame_id(f), "INVALID_REQUEST", err, NULL, NULL, false);
	} else {
		dispatch(ctx, c, pc__gw_str(f, "id"), method, params, relay ? data : NULL, len);
	}
	cJSON_Delete(f);
}

void pc__gw_on_frame(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *data, size_t len)
{
	on_frame(ctx, c, data, len, true);
}

void pc__gw_on_frame_here(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *data, size_t len)
{
	on_frame(ctx, c, data, len, false);
}
