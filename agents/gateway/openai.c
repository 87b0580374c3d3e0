/*
 * The OpenAI-compatible HTTP endpoint (docs/gateway-http.md):
 *
 *   POST /v1/chat/completions   one turn of an agent session, answered as a
 *                               chat.completion or streamed as SSE chunks
 *   GET  /v1/models, /v1/models/{id}
 *
 * Two kinds of actor. The route actor gets every /v1 request: it answers
 * at once what needs no run (models, every error it can see in the
 * request) and turns a valid chat request into a completion actor, one per
 * request. The completion subscribes to the session, submits the message
 * through the agent API (so the run is the same session / run / attempt
 * actors as any other entry's) and answers from the run's events: its
 * assistant deltas become SSE chunks, its terminal event the final answer.
 *
 * The route keeps the request id of every live completion, so a client's
 * PC_MSG_HTTP_GONE (which the server sends to the route) reaches the right
 * one; a completion tells the route when it is done. A client that leaves
 * ends only its completion: the run goes on and is stored like any other.
 *
 * Lifetime: completions read the gateway and this part's counters, so
 * pc__gw_openai_free stops the route (whose stop handler stops every
 * completion) and waits until the last completion has stopped.
 */
#include <ctype.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "../../actors/timer.h"
#include "../../io/buf_internal.h"
#include "../../io/store/store.h"
#include "../obs/redact.h"
#include "../providers/usage.h"
#include "io/json_text.h"
#include "io/utf8.h"
#include "http_util.h"

enum {
	MSG_START = PC_MSG_TYPE_SYSTEM + 0x2A00, /* a completion's first message */
	MSG_EVENTS,                              /* its subscription has events */
	MSG_GONE,                                /* u64 request id: the client left */
	MSG_DONE,                                /* u64 request id: a completion ended */
	MSG_KEEPALIVE,                           /* a stream's keep-alive timer */
};

#define MAX_BODY ((size_t)20 << 20) /* OpenClaw's DEFAULT_OPENAI_CHAT_COMPLETIONS_BODY_BYTES */
#define AGENT_ID_MAX 64u
#define THE_AGENT "main"            /* the one agent this gateway serves */
#define SESSION_KEY_MAX 255u        /* the store's and the agent's bound */
#define IDEM_KEY_MAX PC_STORE_NAME_MAX /* the store's bound for a key */
#define EVENT_BATCH 64u
#define SUB_CAPACITY 1024u
#define STORED_RUN_FOLLOW_MS ((uint64_t)3600 * 1000) /* a repeat follows another process's run */

struct pc__gw_openai {
	pc_gateway_t *g;
	uint32_t live; /* completion actors not yet stopped (atomic) */
	uint64_t http[PC__GW_OA_ROUTES][PC__GW_CODES];
	uint64_t runs[2];
	uint64_t gone;
};

/* ---- errors in OpenAI's shape ---- */

/* {"error":{"message","type","param","code"}} plus its status and headers. */
typedef struct oa_err {
	int status;
	const char *param;  /* NULL: null */
	const char *code;   /* NULL: null */
	const char *allow;  /* 405: the Allow header's value */
	const char *type;   /* NULL: by the status (invalid_request_error, server_error) */
	uint64_t retry_after_ms; /* 429, 503: the Retry-After header's value */
	bool no_retry;      /* a run ended this way, or the key was reused: the
			     * same call again would not fare better */
	char message[640];  /* room for a provider's message (512 bytes at most) */
	char code_buf[48];  /* a code made on the fly (`code` points here) */
} oa_err_t;

/* Fills *e; returns false so that checks read `return fail(...)`. */
static bool fail(oa_err_t *e, int status, const char *param, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));
static bool fail(oa_err_t *e, int status, const char *param, const char *code, const char *fmt, ...)
{
	e->status = status;
	e->param = param;
	e->code = code;
	e->allow = NULL;
	e->type = NULL;
	e->retry_after_ms = 0;
	e->no_retry = false;
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(e->message, sizeof(e->message), fmt, ap);
	va_end(ap);
	/* a message cut short ends on a whole character: it goes out as JSON */
	if (n >= (int)sizeof(e->message)) {
		size_t len = sizeof(e->message) - 1;
		while (len > 0 && ((unsigned char)e->message[len] & 0xC0) == 0x80)
			len--;
		e->message[len] = '\0';
	}
	return false;
}

static void count_answer(struct pc__gw_openai *oa, int route, int status)
{
	pc__gw_count(&oa->http[route][pc__gw_code_index(status)]);
}

/* Every answer names its request (`rid`, x-request-id) before `extra`. */
static int answer_json(struct pc__gw_openai *oa, int route, uint64_t id, const char *rid, int status,
		       const char *extra, const cJSON *body)
{
	char head[PC__GW_REQUEST_ID_MAX + 192];
	snprintf(head, sizeof(head), "x-request-id: %s\r\n%s", rid, extra ? extra : "");
	count_answer(oa, route, status);
	return pc__gw_respond_json(oa->g->srv, id, status, head, body);
}

static cJSON *error_json(const oa_err_t *e)
{
	cJSON *o = cJSON_CreateObject();
	cJSON *err = cJSON_AddObjectToObject(o, "error");
	if (!err) {
		cJSON_Delete(o);
		return NULL;
	}
	cJSON_AddStringToObject(err, "message", e->message);
	cJSON_AddStringToObject(err, "type",
				e->type ? e->type : e->status >= 500 ? "server_error" : "invalid_request_error");
	if (e->param)
		cJSON_AddStringToObject(err, "param", e->param);
	else
		cJSON_AddNullToObject(err, "param");
	if (e->code)
		cJSON_AddStringToObject(err, "code", e->code);
	else
		cJSON_AddNullToObject(err, "code");
	return o;
}

static void answer_error(struct pc__gw_openai *oa, int route, uint64_t id, const char *rid, const oa_err_t *e)
{
	char extra[128] = "";
	if (e->allow)
		snprintf(extra, sizeof(extra), "Allow: %s\r\n", e->allow);
	else if (e->status == 401)
		snprintf(extra, sizeof(extra), "WWW-Authenticate: Bearer\r\n");
	else if (e->retry_after_ms)
		snprintf(extra, sizeof(extra), "Retry-After: %llu\r\n",
			 (unsigned long long)((e->retry_after_ms + 999) / 1000));
	else if (e->no_retry)
		/* the OpenAI SDKs retry a 500 by themselves, and each retry
		 * would be a new run (or the same refusal); this header is
		 * theirs for "do not" */
		snprintf(extra, sizeof(extra), "x-should-retry: false\r\n");
	cJSON *body = error_json(e);
	answer_json(oa, route, id, rid, e->status, extra, body);
	cJSON_Delete(body);
}

/* ---- small text helpers ---- */

/* `s` without leading and trailing blanks: its start, length in *n. */
static const char *trimmed(const char *s, size_t *n)
{
	while (*s == ' ' || *s == '\t')
		s++;
	size_t len = strlen(s);
	while (len > 0 && (s[len - 1] == ' ' || s[len - 1] == '\t'))
		len--;
	*n = len;
	return s;
}

static bool has_control(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
			return true;
	return false;
}

static int64_t wall_seconds(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec;
}

/* A random UUID (v4) for a stateless session. */
static void new_uuid(char out[37])
{
	uint8_t b[16];
	pc__gw_random(b, sizeof(b));
	b[6] = (uint8_t)((b[6] & 0x0f) | 0x40);
	b[8] = (uint8_t)((b[8] & 0x3f) | 0x80);
	snprintf(out, 37, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2],
		 b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

/* ---- authorization ---- */

/* The bearer credential's verdict: a wrong one counts for the client's
 * backoff, a missing one does not (nothing was guessed). */
enum { BEARER_OK, BEARER_MISSING, BEARER_WRONG };

/* With token or password auth: `Authorization: Bearer <token|password>`. */
static int bearer(const pc_gateway_config_t *gc, const pc_http_request_msg_t *q)
{
	if (gc->auth == PC_GATEWAY_AUTH_NONE)
		return BEARER_OK;
	const char *secret = gc->auth == PC_GATEWAY_AUTH_TOKEN ? gc->token : gc->password;
	const char *h = pc_http_request_header(q, "authorization");
	if (!secret || !secret[0] || !h)
		return BEARER_MISSING;
	size_t n;
	h = trimmed(h, &n);
	if (n < 7 || strncasecmp(h, "bearer", 6) != 0 || (h[6] != ' ' && h[6] != '\t'))
		return BEARER_MISSING;
	const char *tok = trimmed(h + 6, &n);
	return n && pc__gw_secret_equal(tok, n, secret) ? BEARER_OK : n ? BEARER_WRONG : BEARER_MISSING;
}

/* Admission, then the bearer credential under the backoff of failed
 * secrets. False with *e filled when the request goes no further. */
static bool admitted(struct pc__gw_openai *oa, const pc_http_request_msg_t *q, oa_err_t *e)
{
	pc_gateway_t *g = oa->g;
	pc__gw_client_t who;
	const char *why;
	int status = pc__gw_admit(g, q, &who, &why);
	if (status != 0)
		return fail(e, status, NULL, status == 403 ? "forbidden" : "invalid_request", "%s.", why);
	if (g->gcfg->auth == PC_GATEWAY_AUTH_NONE)
		return true;
	uint64_t now = pc_runtime_now_ms();
	uint64_t wait = pc__gw_limiter_check(g->limiter, &who, now);
	if (wait > 0) {
		fail(e, 429, NULL, "rate_limit_exceeded",
		     "Too many failed authentication attempts from this address; retry in %llu s.",
		     (unsigned long long)((wait + 999) / 1000));
		e->retry_after_ms = wait;
		return false;
	}
	switch (bearer(g->gcfg, q)) {
	case BEARER_OK:
		pc__gw_limiter_pass(g->limiter, &who);
		return true;
	case BEARER_WRONG:
		pc__gw_limiter_fail(g->limiter, &who, now);
		break;
	default:
		break;
	}
	return fail(e, 401, NULL, "invalid_api_key", "Missing or invalid bearer token.");
}

/* ---- models and agents ---- */

static bool agent_id_char(char ch, bool first)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || (!first && (ch == '_' || ch == '-'));
}

/* An agent id as OpenClaw writes them ([a-z0-9][a-z0-9_-]{0,63}, case
 * ignored), lowercased into `out`. */
static bool agent_id(const char *s, char out[AGENT_ID_MAX + 1])
{
	size_t n = strlen(s);
	if (n == 0 || n > AGENT_ID_MAX)
		return false;
	for (size_t i = 0; i < n; i++) {
		char ch = (char)tolower((unsigned char)s[i]);
		if (!agent_id_char(ch, i == 0))
			return false;
		out[i] = ch;
	}
	out[n] = '\0';
	return true;
}

/* The agent a model names: "pincer", "pincer:<id>", "pincer/<id>", the same
 * with "openclaw", and "agent:<id>" ("…/default" is the default agent).
 * 1: it names one (in `agent`); 0: it is no agent name; -1: an agent prefix
 * with a malformed id. */
static int agent_of_model(const char *model, char agent[AGENT_ID_MAX + 1])
{
	static const char *const bare[] = {"pincer", "openclaw", "pincer/default", "openclaw/default"};
	static const char *const prefixes[] = {"pincer:", "pincer/", "openclaw:", "openclaw/", "agent:"};
	for (size_t i = 0; i < sizeof(bare) / sizeof(bare[0]); i++) {
		if (!strcasecmp(model, bare[i])) {
			snprintf(agent, AGENT_ID_MAX + 1, "%s", THE_AGENT);
			return 1;
		}
	}
	for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++) {
		size_t n = strlen(prefixes[i]);
		if (!strncasecmp(model, prefixes[i], n))
			return agent_id(model + n, agent) ? 1 : -1;
	}
	return 0;
}

static const pc_provider_config_t *provider_named(const pc_config_t *cfg, const char *id, size_t n)
{
	for (size_t i = 0; i < cfg->provider_count; i++)
		if (strlen(cfg->providers[i].id) == n && !strncmp(cfg->providers[i].id, id, n))
			return &cfg->providers[i];
	return NULL;
}

static bool ref_is(const pc_model_ref_t *r, const char *model)
{
	size_t n = r->provider ? strlen(r->provider) : 0;
	return n && r->model && !strncmp(model, r->provider, n) && model[n] == '/' && !strcmp(model + n + 1, r->model);
}

/* "provider/model" that this gateway can run: a configured provider's
 * listed model (any model when it lists none), or the agent's primary or
 * a fallback. */
static bool model_configured(const pc_config_t *cfg, const char *model)
{
	const pc_agent_defaults_t *d = &cfg->agent;
	if (ref_is(&d->model, model))
		return true;
	for (size_t i = 0; i < d->fallback_count; i++)
		if (ref_is(&d->fallbacks[i], model))
			return true;
	const char *slash = strchr(model, '/');
	const pc_provider_config_t *p = slash ? provider_named(cfg, model, (size_t)(slash - model)) : NULL;
	if (!p || !slash[1])
		return false;
	if (p->model_count == 0)
		return true;
	for (size_t i = 0; i < p->model_count; i++)
		if (!strcmp(p->models[i].id, slash + 1))
			return true;
	return false;
}

static void add_model_id(cJSON *ids, const char *id)
{
	const cJSON *it;
	cJSON_ArrayForEach(it, ids) {
		if (!strcmp(it->valuestring, id))
			return;
	}
	cJSON_AddItemToArray(ids, cJSON_CreateString(id));
}

static void add_ref(cJSON *ids, const pc_model_ref_t *r)
{
	if (!r->provider || !r->model)
		return;
	char id[512];
	snprintf(id, sizeof(id), "%s/%s", r->provider, r->model);
	add_model_id(ids, id);
}

/* Every model id /v1/models lists, in order: the agent, then the
 * configured provider/model ids. */
static cJSON *model_ids(const pc_config_t *cfg)
{
	cJSON *ids = cJSON_CreateArray();
	if (!ids)
		return NULL;
	add_model_id(ids, "pincer:" THE_AGENT);
	add_ref(ids, &cfg->agent.model);
	for (size_t i = 0; i < cfg->agent.fallback_count; i++)
		add_ref(ids, &cfg->agent.fallbacks[i]);
	for (size_t i = 0; i < cfg->provider_count; i++) {
		const pc_provider_config_t *p = &cfg->providers[i];
		for (size_t j = 0; j < p->model_count; j++) {
			pc_model_ref_t r = {.provider = p->id, .model = p->models[j].id};
			add_ref(ids, &r);
		}
	}
	return ids;
}

static cJSON *model_object(const pc_gateway_t *g, const char *id)
{
	cJSON *o = cJSON_CreateObject();
	if (!cJSON_AddStringToObject(o, "id", id) || !cJSON_AddStringToObject(o, "object", "model") ||
	    !cJSON_AddNumberToObject(o, "created", (double)(g->started_wall_ms / 1000)) ||
	    !cJSON_AddStringToObject(o, "owned_by", "pincer")) {
		cJSON_Delete(o);
		return NULL;
	}
	return o;
}

/* %XX escapes decoded in place; false for a malformed one or a NUL. */
static bool percent_decode(char *s)
{
	char *w = s;
	for (const char *r = s; *r; r++) {
		if (*r != '%') {
			*w++ = *r;
			continue;
		}
		if (!isxdigit((unsigned char)r[1]) || !isxdigit((unsigned char)r[2]))
			return false;
		char hex[3] = {r[1], r[2], '\0'};
		char ch = (char)strtol(hex, NULL, 16);
		if (ch == '\0')
			return false;
		*w++ = ch;
		r += 2;
	}
	*w = '\0';
	return true;
}

/* The list: {"object":"list","data":[model, ...]}. */
static cJSON *model_list(const pc_gateway_t *g, const cJSON *ids)
{
	cJSON *body = cJSON_CreateObject();
	cJSON *data = cJSON_AddArrayToObject(body, "data");
	if (!data || !cJSON_AddStringToObject(body, "object", "list")) {
		cJSON_Delete(body);
		return NULL;
	}
	const cJSON *it;
	cJSON_ArrayForEach(it, ids) {
		cJSON *m = model_object(g, it->valuestring);
		if (!m || !cJSON_AddItemToArray(data, m)) {
			cJSON_Delete(m);
			cJSON_Delete(body);
			return NULL;
		}
	}
	return body;
}

/* One model, `want` being the path's rest after "/v1/models/". */
static cJSON *model_one(const pc_gateway_t *g, const cJSON *ids, const char *want, oa_err_t *e)
{
	char *id = strdup(want);
	cJSON *body = NULL;
	if (!id) {
		fail(e, 500, NULL, NULL, "out of memory");
	} else if (!id[0] || !percent_decode(id)) {
		fail(e, 400, NULL, "invalid_model_id", "Invalid model id.");
	} else {
		const cJSON *it;
		cJSON_ArrayForEach(it, ids) {
			if (!body && !strcmp(it->valuestring, id) && !(body = model_object(g, id)))
				fail(e, 500, NULL, NULL, "out of memory");
		}
		if (!body && e->status != 500)
			fail(e, 404, "model", "model_not_found", "The model '%.200s' does not exist.", id);
	}
	free(id);
	return body;
}

static void serve_models(struct pc__gw_openai *oa, const pc_http_request_msg_t *q, const char *rid)
{
	oa_err_t e = {0};
	cJSON *ids = model_ids(oa->g->cfg), *body = NULL;
	const char *rest = q->path + strlen("/v1/models");
	if (!ids)
		fail(&e, 500, NULL, NULL, "out of memory");
	else if (!rest[0] && !(body = model_list(oa->g, ids)))
		fail(&e, 500, NULL, NULL, "out of memory");
	else if (rest[0])
		body = model_one(oa->g, ids, rest + 1, &e);
	if (body)
		answer_json(oa, PC__GW_OA_MODELS, q->id, rid, 200, NULL, body);
	else
		answer_error(oa, PC__GW_OA_MODELS, q->id, rid, &e);
	cJSON_Delete(body);
	cJSON_Delete(ids);
}

/* ---- a chat request ---- */

typedef struct chat_req {
	char *message;     /* the last user message's text */
	char *system;      /* system and developer texts, joined; or NULL */
	char *model;       /* the request's `model`, echoed in every answer */
	char *run_model;   /* "provider/model" for the run, or NULL */
	char *session_key;
	char *thinking;    /* reasoning_effort, as the run's thinking level; or NULL */
	char *idem_key;    /* the Idempotency-Key header, or NULL */
	bool stream, include_usage;
	/* x-request-id of every answer (the client's, or made here): for the
	 * logs to name the request by too */
	char request_id[PC__GW_REQUEST_ID_MAX + 1];
} chat_req_t;

static void chat_req_free(chat_req_t *r)
{
	free(r->message);
	free(r->system);
	free(r->model);
	free(r->run_model);
	free(r->session_key);
	free(r->thinking);
	free(r->idem_key);
	memset(r, 0, sizeof(*r));
}

/* The text of a message's content: a string, or its text parts joined by
 * newlines (OpenAI "text" parts, and Responses-style "input_text"). */
static void content_text(const cJSON *content, pc__buf_t *out)
{
	if (cJSON_IsString(content)) {
		pc__buf_append(out, content->valuestring, strlen(content->valuestring));
		return;
	}
	const cJSON *part;
	cJSON_ArrayForEach(part, content) {
		const char *type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(part, "type"));
		const char *text = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(part, "text"));
		if (!type || !text || (strcmp(type, "text") && strcmp(type, "input_text")) || !text[0])
			continue;
		if (out->len)
			pc__buf_append(out, "\n", 1);
		pc__buf_append(out, text, strlen(text));
	}
}

static const char *role_of(const cJSON *m)
{
	const char *r = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "role"));
	return r ? r : "";
}

static void add_system(pc__buf_t *sys, const cJSON *content)
{
	pc__buf_t one = {0};
	content_text(content, &one);
	if (one.len) {
		if (sys->len)
			pc__buf_append(sys, "\n\n", 2);
		pc__buf_append(sys, one.p, one.len);
	}
	if (one.err && !sys->err)
		sys->err = one.err;
	free(one.p);
}

/* The message is the last user message's text; system and developer
 * messages become the run's extra system prompt. Earlier turns are not
 * replayed: the session's history is in the store. */
static bool parse_messages(const cJSON *body, chat_req_t *r, oa_err_t *e)
{
	const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(body, "messages");
	if (!cJSON_IsArray(msgs) || cJSON_GetArraySize(msgs) == 0)
		return fail(e, 400, "messages", NULL, "Missing `messages`: an array of at least one message.");
	pc__buf_t sys = {0}, user = {0};
	const cJSON *m, *last_user = NULL;
	cJSON_ArrayForEach(m, msgs) {
		const char *role = role_of(m);
		if (!strcmp(role, "user"))
			last_user = m;
		else if (!strcmp(role, "system") || !strcmp(role, "developer"))
			add_system(&sys, cJSON_GetObjectItemCaseSensitive(m, "content"));
	}
	if (last_user)
		content_text(cJSON_GetObjectItemCaseSensitive(last_user, "content"), &user);
	bool ok = !sys.err && !user.err;
	if (!ok)
		fail(e, 500, NULL, NULL, "out of memory");
	else if (!user.len)
		ok = fail(e, 400, "messages", NULL, "Missing user message in `messages`.");
	if (ok) {
		r->message = user.p;
		r->system = sys.len ? sys.p : NULL;
		user.p = NULL;
		if (r->system)
			sys.p = NULL;
	}
	free(user.p);
	free(sys.p);
	return ok;
}

/* The agent (a header, else the model) and the run's model. */
static bool parse_target(const pc_gateway_t *g, const pc_http_request_msg_t *q, const cJSON *body,
			 chat_req_t *r, char agent[AGENT_ID_MAX + 1], oa_err_t *e)
{
	const cJSON *mj = cJSON_GetObjectItemCaseSensitive(body, "model");
	if (mj && !cJSON_IsString(mj) && !cJSON_IsNull(mj))
		return fail(e, 400, "model", NULL, "`model` must be a string.");
	const char *model = cJSON_IsString(mj) && mj->valuestring[0] ? mj->valuestring : "pincer";
	r->model = strdup(model);
	if (!r->model)
		return fail(e, 500, NULL, NULL, "out of memory");
	int named = agent_of_model(model, agent);
	if (named < 0)
		return fail(e, 400, "model", "invalid_model", "Invalid agent in `model`: use pincer:<agent>.");
	if (named == 0) {
		if (!model_configured(g->cfg, model))
			return fail(e, 404, "model", "model_not_found", "The model '%s' does not exist.", model);
		snprintf(agent, AGENT_ID_MAX + 1, "%s", THE_AGENT);
		if (!(r->run_model = strdup(model)))
			return fail(e, 500, NULL, NULL, "out of memory");
	}
	const char *hdr = pc_http_request_header(q, "x-pincer-agent-id");
	if (!hdr)
		hdr = pc_http_request_header(q, "x-openclaw-agent-id");
	size_t n = 0;
	if (hdr && (hdr = trimmed(hdr, &n)) && n > 0) {
		char tmp[AGENT_ID_MAX + 1];
		if (n > AGENT_ID_MAX)
			return fail(e, 400, NULL, "invalid_agent", "Invalid agent id header.");
		memcpy(tmp, hdr, n);
		tmp[n] = '\0';
		if (!agent_id(tmp, agent))
			return fail(e, 400, NULL, "invalid_agent", "Invalid agent id header.");
	}
	if (strcmp(agent, THE_AGENT))
		return fail(e, 404, "model", "model_not_found",
			    "Unknown agent '%s': this gateway serves the agent '" THE_AGENT "'.", agent);
	return true;
}

/* The session: a session-key header verbatim, else one per `user`, else a
 * fresh one (a stateless request), as OpenClaw derives them. */
static bool parse_session(const pc_http_request_msg_t *q, const cJSON *body, const char *agent, chat_req_t *r,
			  oa_err_t *e)
{
	static const char *const headers[] = {"x-pincer-session-key", "x-openclaw-session-key"};
	const char *hdr = NULL;
	size_t n = 0;
	for (size_t i = 0; i < 2 && !hdr; i++)
		hdr = pc_http_request_header(q, headers[i]);
	const cJSON *uj = cJSON_GetObjectItemCaseSensitive(body, "user");
	const char *user = cJSON_IsString(uj) ? uj->valuestring : "";
	size_t un = 0;
	user = trimmed(user, &un);
	char key[SESSION_KEY_MAX + 2];
	int len;
	if (hdr && (hdr = trimmed(hdr, &n)) && n > 0) {
		len = snprintf(key, sizeof(key), "%.*s", (int)n, hdr);
	} else if (un > 0) {
		len = snprintf(key, sizeof(key), "agent:%s:openai-user:%.*s", agent, (int)un, user);
	} else {
		char uuid[37];
		new_uuid(uuid);
		len = snprintf(key, sizeof(key), "agent:%s:openai:%s", agent, uuid);
	}
	const char *what = hdr && n > 0 ? "the session-key header" : "`user`";
	/* A header's bytes are not checked by the JSON text check. */
	if (len < 0 || (size_t)len > SESSION_KEY_MAX || has_control(key, (size_t)len) ||
	    !pc_utf8_valid(key, (size_t)len))
		return fail(e, 400, hdr && n > 0 ? NULL : "user", "invalid_session",
			    "Invalid session: %s makes a key longer than %u bytes, or holds control characters or "
			    "bytes that are not UTF-8.",
			    what, SESSION_KEY_MAX);
	r->session_key = strdup(key);
	return r->session_key ? true : fail(e, 500, NULL, NULL, "out of memory");
}

static bool parse_stream(const cJSON *body, chat_req_t *r, oa_err_t *e)
{
	const cJSON *s = cJSON_GetObjectItemCaseSensitive(body, "stream");
	if (s && !cJSON_IsBool(s) && !cJSON_IsNull(s))
		return fail(e, 400, "stream", NULL, "`stream` must be a boolean.");
	r->stream = cJSON_IsTrue(s);
	const cJSON *so = cJSON_GetObjectItemCaseSensitive(body, "stream_options");
	r->include_usage = r->stream && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(so, "include_usage"));
	return true;
}

/* OpenAI's reasoning_effort ("minimal".."high"; "none" is off) is the
 * run's thinking level. */
static bool parse_effort(const cJSON *body, chat_req_t *r, oa_err_t *e)
{
	const cJSON *j = cJSON_GetObjectItemCaseSensitive(body, "reasoning_effort");
	if (!j || cJSON_IsNull(j))
		return true;
	const char *v = cJSON_GetStringValue(j);
	pc_think_level_t level;
	if (v && !strcmp(v, "none"))
		v = "off";
	if (!v || pc_think_level_parse(v, &level) != 0)
		return fail(e, 400, "reasoning_effort", NULL,
			    "`reasoning_effort` must be one of none, minimal, low, medium, high, xhigh.");
	r->thinking = strdup(v);
	return r->thinking ? true : fail(e, 500, NULL, NULL, "out of memory");
}

/* `Idempotency-Key`, as OpenAI-style APIs name it: a retry that carries
 * the key of an earlier call gets that call's run, not a new one. The
 * bound is the store's for a key; printable ASCII keeps it loggable. */
static bool parse_idem(const pc_http_request_msg_t *q, chat_req_t *r, oa_err_t *e)
{
	const char *k = pc_http_request_header(q, "idempotency-key");
	if (!k)
		return true;
	size_t n = strlen(k);
	bool ok = n >= 1 && n <= IDEM_KEY_MAX;
	for (size_t i = 0; ok && i < n; i++)
		ok = k[i] >= 0x20 && k[i] <= 0x7e;
	if (!ok)
		return fail(e, 400, NULL, "invalid_idempotency_key",
			    "Invalid Idempotency-Key header: it must be 1 to %u bytes of printable ASCII.",
			    IDEM_KEY_MAX);
	r->idem_key = strdup(k);
	return r->idem_key ? true : fail(e, 500, NULL, NULL, "out of memory");
}

/* The body as a JSON object, with nothing but blanks after it. Its text
 * is checked first: cJSON would pass bytes that are not UTF-8 on to the
 * transcript and the provider, and cut a string at "\u0000". */
static cJSON *parse_body(const pc_http_request_msg_t *q, oa_err_t *e)
{
	pc_json_text_t t = pc_json_text_check(q->body, q->body_len);
	if (t != PC_JSON_TEXT_OK) {
		fail(e, 400, NULL, "invalid_json", "The request body %s.", pc_json_text_why(t));
		return NULL;
	}
	const char *end = NULL;
	cJSON *body = q->body_len ? cJSON_ParseWithLengthOpts(q->body, q->body_len, &end, false) : NULL;
	if (body && end) {
		for (const char *p = end; p < q->body + q->body_len; p++) {
			if (!isspace((unsigned char)*p)) {
				cJSON_Delete(body);
				body = NULL;
				break;
			}
		}
	}
	if (!body) {
		fail(e, 400, NULL, "invalid_json", "The request body is not valid JSON.");
	} else if (!cJSON_IsObject(body)) {
		cJSON_Delete(body);
		body = NULL;
		fail(e, 400, NULL, "invalid_json", "The request body must be a JSON object.");
	}
	return body;
}

static bool parse_chat(const pc_gateway_t *g, const pc_http_request_msg_t *q, chat_req_t *r, oa_err_t *e)
{
	int state = pc__gw_state(g);
	if (state != PC__GW_READY) {
		fail(e, 503, NULL, "unavailable",
		     state == PC__GW_STARTING ? "The gateway is starting." : "The gateway is shutting down.");
		e->retry_after_ms = pc__gw_retry_after_ms(g);
		return false;
	}
	if (q->body_len > MAX_BODY)
		return fail(e, 413, NULL, "payload_too_large", "The request body is larger than %zu bytes.", MAX_BODY);
	cJSON *body = parse_body(q, e);
	char agent[AGENT_ID_MAX + 1];
	bool ok = body && parse_idem(q, r, e) && parse_stream(body, r, e) && parse_effort(body, r, e) && parse_target(g, q, body, r, agent, e) &&
		  parse_messages(body, r, e) && parse_session(q, body, agent, r, e);
	cJSON_Delete(body);
	return ok;
}

/* ---- a completion: one chat request while its run goes ---- */

typedef struct completion {
	struct pc__gw_openai *oa;
	pc_gateway_t *g;
	pc_actor_t *route;  /* a reference: told when this completion ends */
	uint64_t id;        /* the HTTP request */
	chat_req_t req;
	pc_event_sub_t *sub;
	int64_t created;    /* seconds, for every answer's `created` */
	bool accepted;      /* run_id is known */
	bool repeat;        /* the key named an earlier run: this answers for it */
	bool streaming;     /* the SSE head went out */
	bool sent_text;     /* some content went out */
	bool finished;
	/* The answer's text as the run's events carry it, the same for a plain
	 * and a streamed answer: the current model call's text is the run's
	 * shared text, as the latest of its events (`call`, retained) shows it,
	 * of which call_sent bytes went out; `before` holds the texts of the
	 * earlier calls (those a tool call followed), joined by blank lines. */
	pc_event_t *call;
	size_t call_sent;
	pc__buf_t before;
	pc_timer_t keepalive;   /* a stream's keep-alive timer, 0: none */
	uint64_t last_write_ms; /* when the stream last wrote (pc_runtime_now_ms) */
	char run_id[PC_RUN_ID_MAX + 1];
	char answer_id[PC_RUN_ID_MAX + 16];
	uint64_t store_corr; /* a repeat of a run only the store still holds */
	int store_status;    /* its pc_store_run_status_t, once read */
	char store_code[PC_STORE_CODE_MAX + 1];
} completion_t;

/* Every end of a completion: nothing more is written, and a stream's
 * keep-alive stops with it. */
static void comp_close(pc_ctx_t *ctx, completion_t *c)
{
	c->finished = true;
	if (c->keepalive)
		(void)pc_timer_cancel(pc_ctx_runtime(ctx), c->keepalive);
	c->keepalive = 0;
	pc_exit(ctx, PC_EXIT_NORMAL);
}

/* The client is gone (a GONE, or a refused write): stop here; the run
 * goes on. */
static void comp_gone(pc_ctx_t *ctx, completion_t *c)
{
	if (!c->finished)
		pc__gw_count(&c->oa->gone);
	comp_close(ctx, c);
}

static void comp_fail(pc_ctx_t *ctx, completion_t *c, const oa_err_t *e)
{
	answer_error(c->oa, PC__GW_OA_CHAT, c->id, c->req.request_id, e);
	comp_close(ctx, c);
}

static bool sse_write(pc_ctx_t *ctx, completion_t *c, const char *text, size_t len)
{
	if (pc_http_respond_write(c->g->srv, c->id, text, len) == 0) {
		c->last_write_ms = pc_runtime_now_ms();
		return true;
	}
	comp_gone(ctx, c);
	return false;
}

/* Arms the keep-alive to fire `ms` from now. Without a timer (the runtime
 * stopping, no memory) the stream goes on without keep-alives. */
static void keepalive_arm(pc_ctx_t *ctx, completion_t *c, uint64_t ms)
{
	pc_msg_t *m = pc_msg_new(MSG_KEEPALIVE, 0);
	if (!m || pc_timer_after(pc_self(ctx), ms, m, &c->keepalive) != 0)
		c->keepalive = 0;
}

/* A proxy cuts a connection that stays silent too long (a tool call, a
 * queued run, a slow first token): after gateway.http.sseKeepAliveMs
 * without a write, an SSE comment, which clients skip. The timer is not
 * moved at each write; it fires and looks at the last write instead. */
static void on_keepalive(pc_ctx_t *ctx, completion_t *c)
{
	static const char comment[] = ": keep-alive\n\n";
	uint64_t every = c->g->gcfg->sse_keepalive_ms;
	c->keepalive = 0;
	if (!c->streaming || every == 0)
		return;
	uint64_t idle = pc_runtime_now_ms() - c->last_write_ms;
	if (idle >= every) {
		if (!sse_write(ctx, c, comment, sizeof(comment) - 1))
			return;
		idle = 0;
	}
	keepalive_arm(ctx, c, every - idle);
}

/* One `data: <json>` event. */
static bool sse_json(pc_ctx_t *ctx, completion_t *c, const cJSON *o)
{
	char *text = o ? cJSON_PrintUnformatted(o) : NULL;
	pc__buf_t b = {0};
	pc__buf_append(&b, "data: ", 6);
	if (text)
		pc__buf_append(&b, text, strlen(text));
	pc__buf_append(&b, "\n\n", 2);
	cJSON_free(text);
	bool ok = text && !b.err;
	if (ok)
		ok = sse_write(ctx, c, b.p, b.len);
	else
		comp_gone(ctx, c); /* out of memory: nothing sensible can follow */
	free(b.p);
	return ok;
}

/* A chat.completion.chunk with one choice: `delta` (taken) and
 * `finish` (NULL: null); or no choice at all when delta is NULL. */
static cJSON *chunk_new(const completion_t *c, cJSON *delta, const char *finish)
{
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "id", c->answer_id);
	cJSON_AddStringToObject(o, "object", "chat.completion.chunk");
	cJSON_AddNumberToObject(o, "created", (double)c->created);
	cJSON_AddStringToObject(o, "model", c->req.model);
	cJSON *choices = cJSON_AddArrayToObject(o, "choices");
	if (delta) {
		cJSON *ch = cJSON_CreateObject();
		cJSON_AddNumberToObject(ch, "index", 0);
		cJSON_AddItemToObject(ch, "delta", delta);
		if (finish)
			cJSON_AddStringToObject(ch, "finish_reason", finish);
		else
			cJSON_AddNullToObject(ch, "finish_reason");
		cJSON_AddItemToArray(choices, ch);
	}
	return o;
}

static bool sse_delta(pc_ctx_t *ctx, completion_t *c, const char *role, const char *content, const char *finish)
{
	cJSON *delta = cJSON_CreateObject();
	if (role)
		cJSON_AddStringToObject(delta, "role", role);
	if (content)
		cJSON_AddStringToObject(delta, "content", content);
	cJSON *o = chunk_new(c, delta, finish);
	bool ok = sse_json(ctx, c, o);
	cJSON_Delete(o);
	if (ok && content && content[0])
		c->sent_text = true;
	return ok;
}

/* OpenAI's usage from the run's: the prompt counts cached tokens too
 * (spec §11.3 promptTokens), as OpenAI's prompt_tokens does. */
static cJSON *usage_json(const cJSON *u)
{
	double in = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(u, "input"));
	double out = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(u, "output"));
	double cr = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(u, "cacheRead"));
	double cw = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(u, "cacheWrite"));
	double prompt = (in == in ? in : 0) + (cr == cr ? cr : 0) + (cw == cw ? cw : 0); /* NaN: absent */
	double completion = out == out ? out : 0;
	cJSON *o = cJSON_CreateObject();
	cJSON_AddNumberToObject(o, "prompt_tokens", prompt);
	cJSON_AddNumberToObject(o, "completion_tokens", completion);
	cJSON_AddNumberToObject(o, "total_tokens", prompt + completion);
	return o;
}

/* The final payloads' texts joined by blank lines; a silent reply
 * (NO_REPLY) is no text. Malloc'd (NULL on out of memory). */
static char *payload_text(const cJSON *d)
{
	pc__buf_t b = {0};
	pc__buf_append(&b, "", 0);
	const cJSON *p;
	cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(d, "payloads")) {
		const char *t = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(p, "text"));
		if (!t || !t[0] || !strcmp(t, "NO_REPLY"))
			continue;
		if (b.len)
			pc__buf_append(&b, "\n\n", 2);
		pc__buf_append(&b, t, strlen(t));
	}
	if (b.err) {
		free(b.p);
		return NULL;
	}
	return b.p;
}

static const char *finish_reason(const cJSON *d)
{
	const char *s = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(d, "stopReason"));
	return s && !strcmp(s, "length") ? "length" : "stop";
}

/*
 * The answer for a provider's error status: the client's request was
 * wrong for the provider (4xx: the same status) or rate limited (429),
 * else the upstream failed (5xx: 502). A 401 or 403 is about the
 * gateway's own provider credential, not the client's: 502 too, so an
 * SDK does not take it for a bad key of its own.
 */
static int provider_answer(int status, const char **type)
{
	if (status == 429) {
		*type = "rate_limit_error";
		return 429;
	}
	if (status >= 400 && status < 500 && status != 401 && status != 403 && status != 407) {
		*type = "invalid_request_error";
		return status;
	}
	*type = "upstream_error";
	return 502;
}

/* A run that did not end well, as an error: code run_<kind>; the
 * provider's status class and message when the provider refused it. */
static void run_error(const cJSON *d, oa_err_t *e)
{
	const char *msg = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(d, "error"));
	const char *kind = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(d, "errorKind"));
	const char *status = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(d, "status"));
	const cJSON *pe = cJSON_GetObjectItemCaseSensitive(d, "providerError");
	double ps = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(pe, "status"));
	const char *pmsg = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(pe, "message"));
	int http = 500;
	const char *type = NULL;
	if (ps >= 400 && ps < 600) {
		http = provider_answer((int)ps, &type);
		if (pmsg && pmsg[0])
			msg = pmsg;
	}
	/* the run's text can quote a provider or a tool: no secret leaves */
	char *clean = pc_redact(msg && msg[0] ? msg : "The run failed.");
	fail(e, http, NULL, NULL, "%s", clean ? clean : "The run failed.");
	free(clean);
	e->type = type;
	snprintf(e->code_buf, sizeof(e->code_buf), "run_%s",
		 kind && kind[0] ? kind : status && status[0] ? status : "error");
	e->code = e->code_buf;
	e->no_retry = true;
}

/* `a` and `b` joined by a blank line, either left out when empty:
 * malloc'd, NULL on out of memory. */
static char *joined(const char *a, size_t an, const char *b)
{
	pc__buf_t o = {0};
	pc__buf_append(&o, a, an);
	if (an && b[0])
		pc__buf_append(&o, "\n\n", 2);
	pc__buf_append_str(&o, b);
	return pc__buf_take(&o);
}

/* The answer's text: the texts of the run's model calls that a tool call
 * followed (as a stream sent them), then the final payloads' text. */
static char *answer_text(const completion_t *c, const cJSON *d)
{
	char *final = payload_text(d);
	char *text = final ? joined(c->before.p ? c->before.p : "", c->before.len, final) : NULL;
	free(final);
	return text;
}

static void comp_answer(completion_t *c, const cJSON *d, bool ok)
{
	oa_err_t e;
	char *text = ok ? answer_text(c, d) : NULL;
	if (!ok)
		run_error(d, &e);
	else if (!text)
		fail(&e, 500, NULL, NULL, "out of memory");
	if (!text) {
		answer_error(c->oa, PC__GW_OA_CHAT, c->id, c->req.request_id, &e);
		return;
	}
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "id", c->answer_id);
	cJSON_AddStringToObject(o, "object", "chat.completion");
	cJSON_AddNumberToObject(o, "created", (double)c->created);
	cJSON_AddStringToObject(o, "model", c->req.model);
	cJSON *choice = cJSON_CreateObject();
	cJSON_AddNumberToObject(choice, "index", 0);
	cJSON *m = cJSON_AddObjectToObject(choice, "message");
	cJSON_AddStringToObject(m, "role", "assistant");
	cJSON_AddStringToObject(m, "content", text);
	cJSON_AddStringToObject(choice, "finish_reason", finish_reason(d));
	cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "choices"), choice);
	cJSON_AddItemToObject(o, "usage", usage_json(cJSON_GetObjectItemCaseSensitive(d, "usage")));
	answer_json(c->oa, PC__GW_OA_CHAT, c->id, c->req.request_id, 200, NULL, o);
	cJSON_Delete(o);
	free(text);
}

/* The stream's end: the reply's text if no delta carried it (a reply
 * held back as a possible NO_REPLY, say), the finishing chunk, the usage
 * when asked for, [DONE]; or an error event and [DONE]. */
static void comp_stream_end(pc_ctx_t *ctx, completion_t *c, const cJSON *d, bool ok)
{
	bool written = true;
	if (!ok) {
		oa_err_t e;
		run_error(d, &e);
		cJSON *err = error_json(&e);
		written = sse_json(ctx, c, err);
		cJSON_Delete(err);
	} else {
		/* the final call's text, when no event carried it (held back as
		 * a possible NO_REPLY, or a repeat of an ended run), after the
		 * earlier calls' as a plain answer has it */
		char *final = c->call_sent ? NULL : payload_text(d);
		if (final && final[0]) {
			pc__buf_t t = {0};
			if (c->sent_text)
				pc__buf_append(&t, "\n\n", 2);
			pc__buf_append_str(&t, final);
			if (t.err)
				comp_gone(ctx, c); /* out of memory: nothing sensible can follow */
			written = !t.err && sse_delta(ctx, c, NULL, t.p, NULL);
			pc__buf_free(&t);
		}
		free(final);
		written = written && sse_delta(ctx, c, NULL, NULL, finish_reason(d));
		if (written && c->req.include_usage) {
			cJSON *o = chunk_new(c, NULL, NULL);
			cJSON_AddItemToObject(o, "usage", usage_json(cJSON_GetObjectItemCaseSensitive(d, "usage")));
			written = sse_json(ctx, c, o);
			cJSON_Delete(o);
		}
	}
	static const char done[] = "data: [DONE]\n\n";
	if (written && sse_write(ctx, c, done, sizeof(done) - 1))
		pc_http_respond_end(c->g->srv, c->id);
}

#define SSE_HEADERS "Content-Type: text/event-stream; charset=utf-8\r\nCache-Control: no-cache\r\n"

/* The SSE head and the first chunk (the assistant role). */
static bool stream_open(pc_ctx_t *ctx, completion_t *c)
{
	count_answer(c->oa, PC__GW_OA_CHAT, 200);
	char head[sizeof(SSE_HEADERS) + PC__GW_REQUEST_ID_MAX + 20];
	snprintf(head, sizeof(head), SSE_HEADERS "x-request-id: %s\r\n", c->req.request_id);
	if (pc_http_respond_start(c->g->srv, c->id, 200, head) != 0) {
		comp_gone(ctx, c);
		return false;
	}
	c->streaming = true;
	if (!sse_delta(ctx, c, "assistant", "", NULL))
		return false;
	if (c->g->gcfg->sse_keepalive_ms > 0)
		keepalive_arm(ctx, c, c->g->gcfg->sse_keepalive_ms);
	return true;
}

/* The last answer from `d`, a run's terminal data (phase, payloads,
 * stopReason, usage, error, errorKind): a live run's own, or one made
 * from the store for a repeat. */
static void comp_end(pc_ctx_t *ctx, completion_t *c, const cJSON *d)
{
	const char *phase = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(d, "phase"));
	bool ok = phase && !strcmp(phase, "end");
	if (c->req.stream && !c->streaming && !stream_open(ctx, c))
		return;
	if (c->streaming)
		comp_stream_end(ctx, c, d, ok);
	else
		comp_answer(c, d, ok);
	comp_close(ctx, c);
}

/* The run's terminal event: the last answer. */
static void comp_terminal(pc_ctx_t *ctx, completion_t *c, const pc_event_t *ev)
{
	cJSON *d = cJSON_ParseWithLength(ev->data, ev->data_len);
	comp_end(ctx, c, d);
	cJSON_Delete(d);
}

/* Sends the text gathered so far as one chunk (a plain answer sends its
 * text at the end). */
static bool flush_text(pc_ctx_t *ctx, completion_t *c, pc__buf_t *text)
{
	bool ok = !text->len || !c->streaming || sse_delta(ctx, c, NULL, text->p, NULL);
	text->len = 0;
	return ok;
}

/* A tool call ended the current model call: its text is an earlier
 * call's now. */
static void end_call(completion_t *c)
{
	if (c->call && c->call->text_len) {
		if (c->before.len)
			pc__buf_append(&c->before, "\n\n", 2);
		pc__buf_append(&c->before, c->call->text, c->call->text_len);
	}
	pc_event_release(c->call);
	c->call = NULL;
	c->call_sent = 0;
}

/*
 * An assistant event's new text, added to `text` (what goes out next): the
 * bytes of the call's shared text past those sent, read in place (the
 * cumulative text is never rebuilt). So a delta the bus dropped for a slow
 * reader, a draft held back as a possible NO_REPLY, and what a repeat's
 * run said before the repeat subscribed all arrive. The first text of a
 * call after an earlier call's is set apart by a blank line, as the plain
 * answer joins them; a new message (model call) starts a new text.
 */
static void add_text(completion_t *c, pc_event_t *e, pc__buf_t *text)
{
	if (!e->text)
		return;
	if (c->call && e->message != c->call->message)
		end_call(c);
	if (e->text_len > c->call_sent) {
		if (!c->call_sent && (c->sent_text || text->len || c->before.len))
			pc__buf_append(text, "\n\n", 2);
		pc__buf_append(text, e->text + c->call_sent, e->text_len - c->call_sent);
		c->call_sent = e->text_len;
	}
	pc_event_release(c->call);
	c->call = pc_event_retain(e);
}

/* Takes a batch of events; this run's deltas go out as one chunk. A full
 * batch may have more behind it: the rest is taken on the next turn (one
 * chunk per turn keeps the I/O thread's queue short). */
static void comp_pump(pc_ctx_t *ctx, completion_t *c)
{
	pc_event_t *ev[EVENT_BATCH];
	size_t n = pc_event_sub_take(c->sub, ev, EVENT_BATCH);
	pc__buf_t text = {0};
	for (size_t i = 0; i < n; i++) {
		pc_event_t *e = ev[i];
		if (c->finished || strcmp(e->run_id, c->run_id))
			continue;
		if (e->stream == PC_EVENT_ASSISTANT)
			add_text(c, e, &text);
		else if (e->stream == PC_EVENT_TOOL)
			end_call(c);
		else if (e->terminal && flush_text(ctx, c, &text))
			comp_terminal(ctx, c, e);
	}
	if (!c->finished)
		flush_text(ctx, c, &text);
	for (size_t i = 0; i < n; i++)
		pc_event_release(ev[i]);
	free(text.p);
	if (!c->finished && n == EVENT_BATCH && pc_send_signal(pc_self(ctx), MSG_EVENTS) != 0)
		comp_gone(ctx, c); /* out of memory: cannot go on */
}

static void submit_error(const pc_gateway_t *g, int rc, oa_err_t *e)
{
	if (rc == PC_ESTOPPED) {
		fail(e, 503, NULL, "unavailable", "The agent is shutting down.");
		e->retry_after_ms = pc__gw_retry_after_ms(g);
	} else if (rc == PC_EEXIST) {
		/* the store's verdict on a key it saw with another request */
		fail(e, 422, NULL, "idempotency_key_reused",
		     "This Idempotency-Key was already used with different parameters; use a new key for a "
		     "new request.");
		e->no_retry = true;
	} else if (rc == PC_EINVAL)
		fail(e, 400, NULL, "invalid_request", "The message was refused: %s.", pc_strerror(rc));
	else if (rc >= PC_ERANGE_STORE_FIRST && rc <= PC_ERANGE_STORE_LAST)
		fail(e, 500, NULL, "not_accepted", "The message could not be stored: %s.", pc_store_strerror(rc));
	else
		fail(e, 500, NULL, "not_accepted", "The message was not accepted: %s.", pc_strerror(rc));
}

/* ---- a repeat whose run only the store still holds ---- */

static void store_failed(pc_ctx_t *ctx, completion_t *c, int rc)
{
	oa_err_t e;
	fail(&e, 500, NULL, "not_accepted", "The first run of this Idempotency-Key cannot be read: %s.",
	     rc >= PC_ERANGE_STORE_FIRST && rc <= PC_ERANGE_STORE_LAST ? pc_store_strerror(rc) : pc_strerror(rc));
	comp_fail(ctx, c, &e);
}

/* Asks the store the request `build` makes (*req: NULL until built); the
 * answer comes to comp_receive with store_corr. The request is passed by
 * address: an argument built in the same call would be read unset. */
static void ask_store(pc_ctx_t *ctx, completion_t *c, int built, pc_msg_t **req)
{
	int rc = built;
	if (rc == 0)
		rc = pc_ask(ctx, pc_store_actor(pc_agent_store(c->g->agent)), *req, &c->store_corr);
	else
		pc_msg_free(*req);
	*req = NULL;
	if (rc != 0)
		store_failed(ctx, c, rc);
}

/* The terminal data of an ended run, made from the transcript: the text
 * of its last assistant message (the final payload), that message's stop
 * reason, and the usage its assistant messages make as the run reported
 * it (spec §11.3: the latest call's prompt, every call's output). */
static cJSON *stored_end(const completion_t *c, const pc_store_history_t *h)
{
	cJSON *d = cJSON_CreateObject(), *last = NULL;
	pc_usage_t acc = {0}, last_call = {0}, one;
	size_t n = pc_store_history_count(h);
	for (size_t i = 0; d && i < n; i++) {
		pc_store_msg_t m;
		pc_store_history_get(h, i, &m);
		if (!m.run_id || strcmp(m.run_id, c->run_id) || strcmp(m.role, "assistant"))
			continue;
		cJSON *msg = cJSON_Parse(m.content);
		if (pc_usage_from_json(cJSON_GetObjectItemCaseSensitive(msg, "usage"), &one) == 0 &&
		    pc_usage_is_nonzero(&one)) {
			pc_usage_add(&acc, &one);
			last_call = one;
		}
		cJSON_Delete(last);
		last = msg;
	}
	pc_usage_t rep;
	pc_usage_report(&acc, &last_call, &rep);
	cJSON *usage = cJSON_CreateObject();
	if (usage) {
		cJSON_AddNumberToObject(usage, "input", (double)rep.input);
		cJSON_AddNumberToObject(usage, "output", (double)rep.output);
		cJSON_AddNumberToObject(usage, "cacheRead", (double)rep.cache_read);
		cJSON_AddNumberToObject(usage, "cacheWrite", (double)rep.cache_write);
		cJSON_AddNumberToObject(usage, "total", (double)rep.total);
	}
	pc__buf_t text = {0};
	pc__buf_append(&text, "", 0);
	content_text(cJSON_GetObjectItemCaseSensitive(last, "content"), &text);
	cJSON *payloads = cJSON_AddArrayToObject(d, "payloads"), *p = cJSON_CreateObject();
	cJSON_AddStringToObject(p, "text", text.p ? text.p : "");
	cJSON_AddItemToArray(payloads, p);
	cJSON_AddStringToObject(d, "phase", "end");
	const char *stop = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(last, "stopReason"));
	cJSON_AddStringToObject(d, "stopReason", stop ? stop : "stop");
	if (!usage || !cJSON_AddItemToObject(d, "usage", usage))
		cJSON_Delete(usage);
	bool ok = d && p && text.p && !text.err && cJSON_GetArraySize(payloads) == 1;
	free(text.p);
	cJSON_Delete(last);
	if (!ok) {
		cJSON_Delete(d);
		return NULL;
	}
	return d;
}

/* The terminal data of a run that did not end well, from its row: the
 * code is the one the first answer had (run_<kind>); the run's own error
 * text is not stored. */
static cJSON *stored_error(const completion_t *c)
{
	static const char *const names[] = {"accepted", "running", "ok", "error", "aborted", "timeout"};
	const char *code = c->store_code;
	size_t known = sizeof(names) / sizeof(names[0]);
	cJSON *d = cJSON_CreateObject();
	cJSON_AddStringToObject(d, "phase", "error");
	cJSON_AddStringToObject(d, "status", "error");
	cJSON_AddStringToObject(d, "errorKind", !strncmp(code, "run_", 4) ? code + 4 : "error");
	char msg[160];
	snprintf(msg, sizeof(msg), "The run ended with status %s%s%s.",
		 (size_t)c->store_status < known ? names[c->store_status] : "error", code[0] ? ": " : "", code);
	cJSON_AddStringToObject(d, "error", msg);
	return d;
}

static void on_store_reply(pc_ctx_t *ctx, completion_t *c, const pc_msg_t *msg)
{
	pc_store_reply_t r;
	int rc = pc_store_reply_get(msg, &r);
	if (rc == 0)
		rc = r.rc;
	if (rc != 0) {
		store_failed(ctx, c, rc);
		return;
	}
	c->store_status = r.status;
	snprintf(c->store_code, sizeof(c->store_code), "%s", r.code);
	if (c->created == 0)
		c->created = r.started_ms > 0 ? r.started_ms / 1000 : wall_seconds();
	if (r.status < PC_STORE_RUN_OK) {
		/* another process runs it: the store is read again once it says
		 * the run ended (PC_MSG_AGENT_RUN_INFO) */
		rc = pc_agent_watch_stored(c->g->agent, c->run_id, pc_self(ctx), 0, STORED_RUN_FOLLOW_MS);
		if (rc != 0)
			store_failed(ctx, c, rc);
		return;
	}
	if (r.status != PC_STORE_RUN_OK) {
		cJSON *d = stored_error(c);
		comp_end(ctx, c, d);
		cJSON_Delete(d);
		return;
	}
	pc_msg_t *req = NULL;
	ask_store(ctx, c, pc_store_req_history(c->req.session_key, &req), &req);
}

static void on_store_history(pc_ctx_t *ctx, completion_t *c, const pc_msg_t *msg)
{
	pc_store_history_t *h = NULL;
	int rc = pc_store_history_take(msg, &h);
	cJSON *d = rc == 0 ? stored_end(c, h) : NULL;
	pc_store_history_free(h);
	if (!d) {
		store_failed(ctx, c, rc ? rc : PC_ENOMEM);
		return;
	}
	comp_end(ctx, c, d);
	cJSON_Delete(d);
}

/* A repeat: the key's first run answers. Subscribed to that run (which
 * hands over its terminal event at once if it has ended), the repeat
 * then goes as the first request did; a run the registry no longer holds
 * is read from the store. */
static bool attach_first(pc_ctx_t *ctx, completion_t *c)
{
	c->repeat = true;
	int rc = pc_agent_subscribe_run(c->g->agent, c->run_id, c->sub);
	if (rc == PC_ENOTFOUND) {
		pc_msg_t *req = NULL;
		ask_store(ctx, c, pc_store_req_run_get(c->run_id, &req), &req);
		return false;
	}
	if (rc != 0) {
		oa_err_t e;
		fail(&e, 500, NULL, "not_accepted", "The first run of this Idempotency-Key cannot be followed: %s.",
		     pc_strerror(rc));
		comp_fail(ctx, c, &e);
		return false;
	}
	return true;
}

static void comp_accepted(pc_ctx_t *ctx, completion_t *c, const pc_agent_submit_reply_t *r)
{
	oa_err_t e;
	if (r->rc != 0) {
		submit_error(c->g, r->rc, &e);
		comp_fail(ctx, c, &e);
		return;
	}
	if (r->accepted.disposition == PC_AGENT_DROPPED) {
		fail(&e, 429, NULL, "rate_limit_exceeded", "The session's queue is full; try again later.");
		e.retry_after_ms = pc_agent_retry_estimate_ms(c->g->agent, c->req.session_key);
		comp_fail(ctx, c, &e);
		return;
	}
	snprintf(c->run_id, sizeof(c->run_id), "%s", r->accepted.run_id);
	snprintf(c->answer_id, sizeof(c->answer_id), "chatcmpl-%s", c->run_id);
	c->accepted = true;
	/* `created` is the run's acceptance, so a repeat's answer has the first one's */
	pc_run_info_t info;
	c->created = pc_agent_run_info(c->g->agent, c->run_id, &info) == 0 && info.accepted_ms > 0
			     ? info.accepted_ms / 1000 : 0;
	if (r->accepted.disposition == PC_AGENT_DUPLICATE) {
		if (!attach_first(ctx, c))
			return;
	} else {
		pc__gw_count(&c->oa->runs[c->req.stream ? 1 : 0]);
	}
	if (c->created == 0)
		c->created = wall_seconds();
	if (c->req.stream && !stream_open(ctx, c))
		return;
	comp_pump(ctx, c);
}

/* Subscribes to the session before submitting, so not one event of the
 * run is missed; events of the session's other runs are skipped. */
static void comp_start(pc_ctx_t *ctx, completion_t *c)
{
	pc_event_sub_config_t sc = {.capacity = SUB_CAPACITY, .notify = pc_self(ctx), .notify_type = MSG_EVENTS};
	int rc = pc_event_sub_new(&sc, &c->sub);
	if (rc == 0)
		rc = pc_agent_subscribe_session(c->g->agent, c->req.session_key, c->sub);
	/* followup: each request is its own turn with its own answer, even
	 * when the session is busy (steer or collect would merge it) */
	pc_agent_params_t p = {
		.session_key = c->req.session_key,
		.message = c->req.message,
		.model = c->req.run_model,
		.trigger = "user",
		.queue_mode = "followup",
		.extra_system_prompt = c->req.system,
		.thinking = c->req.thinking,
		.idempotency_key = c->req.idem_key,
	};
	if (rc == 0)
		rc = pc_agent_submit_async(c->g->agent, &p, pc_self(ctx), 0);
	if (rc != 0) {
		oa_err_t e;
		submit_error(c->g, rc, &e);
		comp_fail(ctx, c, &e);
	}
}

static int comp_receive(pc_ctx_t *ctx, void *state, pc_msg_t *msg)
{
	completion_t *c = state;
	if (c->finished)
		return 0;
	switch (msg->type) {
	case MSG_START:
		comp_start(ctx, c);
		break;
	case PC_MSG_AGENT_ACCEPTED:
		if (msg->size >= sizeof(pc_agent_submit_reply_t))
			comp_accepted(ctx, c, pc_msg_cdata(msg));
		break;
	case MSG_EVENTS:
		if (c->accepted)
			comp_pump(ctx, c);
		break;
	case PC_MSG_AGENT_RUN_INFO: {
		/* the run another process held has ended: read it again */
		pc_msg_t *req = NULL;
		if (c->repeat)
			ask_store(ctx, c, pc_store_req_run_get(c->run_id, &req), &req);
		break;
	}
	case PC_STORE_MSG_REPLY:
		if (msg->corr == c->store_corr)
			on_store_reply(ctx, c, msg);
		break;
	case PC_STORE_MSG_HISTORY:
		if (msg->corr == c->store_corr)
			on_store_history(ctx, c, msg);
		break;
	case MSG_GONE:
		comp_gone(ctx, c);
		break;
	case MSG_KEEPALIVE:
		on_keepalive(ctx, c);
		break;
	default:
		break;
	}
	return 0;
}

static void comp_stop(pc_ctx_t *ctx, void *state, int reason)
{
	(void)reason;
	completion_t *c = state;
	struct pc__gw_openai *oa = c->oa;
	/* stopped by the route (shutdown) without an end of its own */
	if (c->keepalive)
		(void)pc_timer_cancel(pc_ctx_runtime(ctx), c->keepalive);
	if (c->sub) {
		pc_agent_unsubscribe_session(c->g->agent, c->req.session_key, c->sub);
		pc_event_sub_release(c->sub);
	}
	/* the route forgets the request; a stopped route drops the message */
	(void)pc_send_u64(c->route, MSG_DONE, c->id);
	pc_actor_release(c->route);
	chat_req_free(&c->req);
	pc_event_release(c->call);
	pc__buf_free(&c->before);
	free(c);
	/* the last touch of this part's memory: pc__gw_openai_free waits for it */
	__atomic_sub_fetch(&oa->live, 1, __ATOMIC_ACQ_REL);
}

static const pc_behavior_t completion_behavior = {"gw_completion", comp_receive, comp_stop};

/* ---- the route actor ---- */

typedef struct route {
	struct pc__gw_openai *oa;
	pc_http_handoffs_t *completions; /* by request id */
} route_t;

static bool start_completion(pc_ctx_t *ctx, route_t *r, uint64_t id, chat_req_t *cr, oa_err_t *e)
{
	completion_t *c = calloc(1, sizeof(*c));
	if (!c)
		return fail(e, 500, NULL, NULL, "out of memory");
	c->oa = r->oa;
	c->g = r->oa->g;
	c->route = pc_actor_retain(pc_self(ctx));
	c->id = id;
	c->req = *cr;
	__atomic_add_fetch(&r->oa->live, 1, __ATOMIC_ACQ_REL);
	pc_actor_t *a = NULL;
	int rc = pc_spawn(pc_ctx_runtime(ctx), &completion_behavior, c, &a);
	if (rc != 0) {
		/* nothing was spawned: the request is still the caller's */
		__atomic_sub_fetch(&r->oa->live, 1, __ATOMIC_ACQ_REL);
		pc_actor_release(c->route);
		free(c);
		fail(e, 503, NULL, "unavailable", "The request could not be started: %s.", pc_strerror(rc));
		/* the runtime is out of room for an actor: a moment frees some */
		e->retry_after_ms = 1000;
		return false;
	}
	memset(cr, 0, sizeof(*cr)); /* the completion's now */
	/* Tracked before it starts: nobody but this route knows it yet. */
	rc = pc_http_handoff_add(r->completions, id, a);
	if (rc == 0)
		rc = pc_send_u64(a, MSG_START, 0);
	if (rc != 0)
		(void)pc_actor_stop(a, PC_EXIT_SHUTDOWN); /* its stop handler frees it */
	pc_actor_release(a);
	return rc == 0 || fail(e, 500, NULL, NULL, "The request could not be started: %s.", pc_strerror(rc));
}

static void chat(pc_ctx_t *ctx, route_t *r, const pc_http_request_msg_t *q, const char *rid)
{
	chat_req_t cr = {0};
	oa_err_t e;
	snprintf(cr.request_id, sizeof(cr.request_id), "%s", rid);
	if (parse_chat(r->oa->g, q, &cr, &e) && start_completion(ctx, r, q->id, &cr, &e))
		return;
	chat_req_free(&cr);
	answer_error(r->oa, PC__GW_OA_CHAT, q->id, rid, &e);
}

static int route_of(const char *path)
{
	if (!strcmp(path, "/v1/chat/completions"))
		return PC__GW_OA_CHAT;
	if (!strcmp(path, "/v1/models") || !strncmp(path, "/v1/models/", 11))
		return PC__GW_OA_MODELS;
	return PC__GW_OA_UNKNOWN;
}

static void on_request(pc_ctx_t *ctx, route_t *r, const pc_http_request_msg_t *q)
{
	struct pc__gw_openai *oa = r->oa;
	int route = route_of(q->path);
	const char *allow = route == PC__GW_OA_CHAT ? "POST" : "GET";
	char rid[PC__GW_REQUEST_ID_MAX + 1];
	pc__gw_request_id(q, rid);
	oa_err_t e;
	if (!admitted(oa, q, &e)) {
		/* answered below, before anything about the route is told */
	} else if (route == PC__GW_OA_UNKNOWN) {
		fail(&e, 404, NULL, "unknown_url", "Unknown request URL: %s %.200s.", q->method, q->path);
	} else if (strcmp(q->method, allow)) {
		fail(&e, 405, NULL, "method_not_allowed", "Use %s for %.200s.", allow, q->path);
		e.allow = allow;
	} else if (route == PC__GW_OA_CHAT && !pc__gw_json_content(q)) {
		/* a browser sends text/plain cross-site without asking first;
		 * it must preflight application/json */
		fail(&e, 415, NULL, "unsupported_media_type", "Send the request body as Content-Type: application/json.");
	} else if (route == PC__GW_OA_MODELS) {
		serve_models(oa, q, rid);
		return;
	} else {
		chat(ctx, r, q, rid);
		return;
	}
	answer_error(oa, route, q->id, rid, &e);
}

static int route_receive(pc_ctx_t *ctx, void *state, pc_msg_t *msg)
{
	route_t *r = state;
	switch (msg->type) {
	case PC_MSG_HTTP_REQUEST:
		on_request(ctx, r, pc_msg_cdata(msg));
		break;
	case PC_MSG_HTTP_GONE:
		pc_http_handoff_gone(r->completions, msg, MSG_GONE);
		break;
	case MSG_DONE:
		pc_http_handoff_done(r->completions, pc_msg_u64(msg));
		break;
	default:
		break;
	}
	return 0;
}

static void route_stop(pc_ctx_t *ctx, void *state, int reason)
{
	(void)ctx;
	(void)reason;
	route_t *r = state;
	pc_http_handoffs_free(r->completions);
	free(r);
}

static const pc_behavior_t route_behavior = {"gw_openai", route_receive, route_stop};

/* ---- the part ---- */

int pc__gw_openai_new(pc_gateway_t *g)
{
	struct pc__gw_openai *oa = calloc(1, sizeof(*oa));
	route_t *r = calloc(1, sizeof(*r));
	int rc = oa && r ? pc_http_handoffs_new(&r->completions) : PC_ENOMEM;
	if (rc == 0) {
		oa->g = g;
		r->oa = oa;
		rc = pc_spawn(g->rt, &route_behavior, r, &g->openai_route);
	}
	if (rc != 0) {
		if (r)
			pc_http_handoffs_free(r->completions);
		free(r);
		free(oa);
		return rc;
	}
	g->openai = oa;
	return 0;
}

void pc__gw_openai_free(pc_gateway_t *g)
{
	/* the route's stop handler stops every completion it knows */
	pc__gw_route_stop(&g->openai_route);
	if (g->openai) {
		/* completions read the gateway and these counters until they
		 * stop: freeing under one would be a use after free */
		while (__atomic_load_n(&g->openai->live, __ATOMIC_ACQUIRE) > 0)
			pc__gw_nap_ms(1);
		free(g->openai);
		g->openai = NULL;
	}
}

void pc__gw_openai_stats(pc_gateway_t *g, pc__gw_openai_stats_t *out)
{
	memset(out, 0, sizeof(*out));
	const struct pc__gw_openai *oa = g ? g->openai : NULL;
	if (!oa)
		return;
	for (size_t r = 0; r < PC__GW_OA_ROUTES; r++)
		for (size_t i = 0; i < PC__GW_CODES; i++)
			out->http[r][i] = pc__gw_read(&oa->http[r][i]);
	out->runs[0] = pc__gw_read(&oa->runs[0]);
	out->runs[1] = pc__gw_read(&oa->runs[1]);
	out->active = __atomic_load_n(&oa->live, __ATOMIC_RELAXED);
	out->gone = pc__gw_read(&oa->gone);
}
