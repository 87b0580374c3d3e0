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

#include "actors/timer.h"
#include "io/io.h"
#include "io/store/store.h"
#include "agents/obs/obs.h"
#include "agents/providers/providers.h"
#include "openai_internal.h"




/* ---- errors in OpenAI's shape ---- */


/* Fills *e; returns false so that checks read `return pc__oa_fail(...)`. */
bool pc__oa_fail(oa_err_t *e, int status, const char *param, const char *code, const char *fmt, ...)
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

void pc__oa_count_answer(struct pc__gw_openai *oa, int route, int status)
{
	pc__gw_count(&oa->http[route][pc__gw_code_index(status)]);
}

/* Every answer names its request (`rid`, x-request-id) before `extra`. */
int pc__oa_answer_json(struct pc__gw_openai *oa, int route, uint64_t id, const char *rid, int status,
		       const char *extra, const cJSON *body)
{
	char head[PC__GW_REQUEST_ID_MAX + 192];
	snprintf(head, sizeof(head), "x-request-id: %s\r\n%s", rid, extra ? extra : "");
	pc__oa_count_answer(oa, route, status);
	return pc__gw_respond_json(oa->g->srv, id, status, head, body);
}

cJSON *pc__oa_error_json(const oa_err_t *e)
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

void pc__oa_answer_error(struct pc__gw_openai *oa, int route, uint64_t id, const char *rid, const oa_err_t *e)
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
	cJSON *body = pc__oa_error_json(e);
	pc__oa_answer_json(oa, route, id, rid, e->status, extra, body);
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
		return pc__oa_fail(e, status, NULL, status == 403 ? "forbidden" : "invalid_request", "%s.", why);
	if (g->gcfg->auth == PC_GATEWAY_AUTH_NONE)
		return true;
	uint64_t now = pc_runtime_now_ms();
	uint64_t wait = pc__gw_limiter_check(g->limiter, &who, now);
	if (wait > 0) {
		pc__oa_fail(e, 429, NULL, "rate_limit_exceeded",
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
	return pc__oa_fail(e, 401, NULL, "invalid_api_key", "Missing or invalid bearer token.");
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
		pc__oa_fail(e, 500, NULL, NULL, "out of memory");
	} else if (!id[0] || !pc_percent_decode(id)) {
		pc__oa_fail(e, 400, NULL, "invalid_model_id", "Invalid model id.");
	} else {
		const cJSON *it;
		cJSON_ArrayForEach(it, ids) {
			if (!body && !strcmp(it->valuestring, id) && !(body = model_object(g, id)))
				pc__oa_fail(e, 500, NULL, NULL, "out of memory");
		}
		if (!body && e->status != 500)
			pc__oa_fail(e, 404, "model", "model_not_found", "The model '%.200s' does not exist.", id);
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
		pc__oa_fail(&e, 500, NULL, NULL, "out of memory");
	else if (!rest[0] && !(body = model_list(oa->g, ids)))
		pc__oa_fail(&e, 500, NULL, NULL, "out of memory");
	else if (rest[0])
		body = model_one(oa->g, ids, rest + 1, &e);
	if (body)
		pc__oa_answer_json(oa, PC__GW_OA_MODELS, q->id, rid, 200, NULL, body);
	else
		pc__oa_answer_error(oa, PC__GW_OA_MODELS, q->id, rid, &e);
	cJSON_Delete(body);
	cJSON_Delete(ids);
}

void pc__oa_chat_req_free(chat_req_t *r)
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
void pc__oa_content_text(const cJSON *content, pc__buf_t *out)
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
	pc__oa_content_text(content, &one);
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
		return pc__oa_fail(e, 400, "messages", NULL, "Missing `messages`: an array of at least one message.");
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
		pc__oa_content_text(cJSON_GetObjectItemCaseSensitive(last_user, "content"), &user);
	bool ok = !sys.err && !user.err;
	if (!ok)
		pc__oa_fail(e, 500, NULL, NULL, "out of memory");
	else if (!user.len)
		ok = pc__oa_fail(e, 400, "messages", NULL, "Missing user message in `messages`.");
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
		return pc__oa_fail(e, 400, "model", NULL, "`model` must be a string.");
	const char *model = cJSON_IsString(mj) && mj->valuestring[0] ? mj->valuestring : "pincer";
	r->model = strdup(model);
	if (!r->model)
		return pc__oa_fail(e, 500, NULL, NULL, "out of memory");
	int named = agent_of_model(model, agent);
	if (named < 0)
		return pc__oa_fail(e, 400, "model", "invalid_model", "Invalid agent in `model`: use pincer:<agent>.");
	if (named == 0) {
		if (!model_configured(g->cfg, model))
			return pc__oa_fail(e, 404, "model", "model_not_found", "The model '%s' does not exist.", model);
		snprintf(agent, AGENT_ID_MAX + 1, "%s", THE_AGENT);
		if (!(r->run_model = strdup(model)))
			return pc__oa_fail(e, 500, NULL, NULL, "out of memory");
	}
	const char *hdr = pc_http_request_header(q, "x-pincer-agent-id");
	if (!hdr)
		hdr = pc_http_request_header(q, "x-openclaw-agent-id");
	size_t n = 0;
	if (hdr && (hdr = trimmed(hdr, &n)) && n > 0) {
		char tmp[AGENT_ID_MAX + 1];
		if (n > AGENT_ID_MAX)
			return pc__oa_fail(e, 400, NULL, "invalid_agent", "Invalid agent id header.");
		memcpy(tmp, hdr, n);
		tmp[n] = '\0';
		if (!agent_id(tmp, agent))
			return pc__oa_fail(e, 400, NULL, "invalid_agent", "Invalid agent id header.");
	}
	if (strcmp(agent, THE_AGENT))
		return pc__oa_fail(e, 404, "model", "model_not_found",
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
		pc__gw_uuid(uuid); /* a stateless session's own */
		len = snprintf(key, sizeof(key), "agent:%s:openai:%s", agent, uuid);
	}
	const char *what = hdr && n > 0 ? "the session-key header" : "`user`";
	/* A header's bytes are not checked by the JSON text check. */
	if (len < 0 || (size_t)len > SESSION_KEY_MAX || has_control(key, (size_t)len) ||
	    !pc_utf8_valid(key, (size_t)len))
		return pc__oa_fail(e, 400, hdr && n > 0 ? NULL : "user", "invalid_session",
			    "Invalid session: %s makes a key longer than %u bytes, or holds control characters or "
			    "bytes that are not UTF-8.",
			    what, SESSION_KEY_MAX);
	r->session_key = strdup(key);
	return r->session_key ? true : pc__oa_fail(e, 500, NULL, NULL, "out of memory");
}

static bool parse_stream(const cJSON *body, chat_req_t *r, oa_err_t *e)
{
	const cJSON *s = cJSON_GetObjectItemCaseSensitive(body, "stream");
	if (s && !cJSON_IsBool(s) && !cJSON_IsNull(s))
		return pc__oa_fail(e, 400, "stream", NULL, "`stream` must be a boolean.");
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
		return pc__oa_fail(e, 400, "reasoning_effort", NULL,
			    "`reasoning_effort` must be one of none, minimal, low, medium, high, xhigh.");
	r->thinking = strdup(v);
	return r->thinking ? true : pc__oa_fail(e, 500, NULL, NULL, "out of memory");
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
		return pc__oa_fail(e, 400, NULL, "invalid_idempotency_key",
			    "Invalid Idempotency-Key header: it must be 1 to %u bytes of printable ASCII.",
			    IDEM_KEY_MAX);
	r->idem_key = strdup(k);
	return r->idem_key ? true : pc__oa_fail(e, 500, NULL, NULL, "out of memory");
}

/* The body as a JSON object, with nothing but blanks after it. Its text
 * is checked first: cJSON would pass bytes that are not UTF-8 on to the
 * transcript and the provider, and cut a string at "\u0000". */
static cJSON *parse_body(const pc_http_request_msg_t *q, oa_err_t *e)
{
	pc_json_text_t t = pc_json_text_check(q->body, q->body_len);
	if (t != PC_JSON_TEXT_OK) {
		pc__oa_fail(e, 400, NULL, "invalid_json", "The request body %s.", pc_json_text_why(t));
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
		pc__oa_fail(e, 400, NULL, "invalid_json", "The request body is not valid JSON.");
	} else if (!cJSON_IsObject(body)) {
		cJSON_Delete(body);
		body = NULL;
		pc__oa_fail(e, 400, NULL, "invalid_json", "The request body must be a JSON object.");
	}
	return body;
}

static bool parse_chat(const pc_gateway_t *g, const pc_http_request_msg_t *q, chat_req_t *r, oa_err_t *e)
{
	int state = pc__gw_state(g);
	if (state != PC__GW_READY) {
		pc__oa_fail(e, 503, NULL, "unavailable",
		     state == PC__GW_STARTING ? "The gateway is starting." : "The gateway is shutting down.");
		e->retry_after_ms = pc__gw_retry_after_ms(g);
		return false;
	}
	if (q->body_len > MAX_BODY)
		return pc__oa_fail(e, 413, NULL, "payload_too_large", "The request body is larger than %zu bytes.", MAX_BODY);
	cJSON *body = parse_body(q, e);
	char agent[AGENT_ID_MAX + 1];
	bool ok = body && parse_idem(q, r, e) && parse_stream(body, r, e) && parse_effort(body, r, e) && parse_target(g, q, body, r, agent, e) &&
		  parse_messages(body, r, e) && parse_session(q, body, agent, r, e);
	cJSON_Delete(body);
	return ok;
}

/* ---- the route actor ---- */

typedef struct route {
	struct pc__gw_openai *oa;
	pc_http_handoffs_t *completions; /* by request id */
} route_t;

static bool start_completion(pc_ctx_t *ctx, route_t *r, uint64_t id, chat_req_t *cr, oa_err_t *e)
{
	completion_t *c = calloc(1, sizeof(*c));
	if (!c)
		return pc__oa_fail(e, 500, NULL, NULL, "out of memory");
	c->oa = r->oa;
	c->g = r->oa->g;
	c->route = pc_actor_retain(pc_self(ctx));
	c->id = id;
	c->req = *cr;
	__atomic_add_fetch(&r->oa->live, 1, __ATOMIC_ACQ_REL);
	pc_actor_t *a = NULL;
	int rc = pc_spawn(pc_ctx_runtime(ctx), &pc__oa_completion_behavior, c, &a);
	if (rc != 0) {
		/* nothing was spawned: the request is still the caller's */
		__atomic_sub_fetch(&r->oa->live, 1, __ATOMIC_ACQ_REL);
		pc_actor_release(c->route);
		free(c);
		pc__oa_fail(e, 503, NULL, "unavailable", "The request could not be started: %s.", pc_strerror(rc));
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
	return rc == 0 || pc__oa_fail(e, 500, NULL, NULL, "The request could not be started: %s.", pc_strerror(rc));
}

static void chat(pc_ctx_t *ctx, route_t *r, const pc_http_request_msg_t *q, const char *rid)
{
	chat_req_t cr = {0};
	oa_err_t e;
	snprintf(cr.request_id, sizeof(cr.request_id), "%s", rid);
	int fw = PC_ENOTFOUND;
	if (parse_chat(r->oa->g, q, &cr, &e) &&
	    ((fw = pc__oa_forward(ctx, r->oa, r->completions, q, &cr, &e)) == 0 ||
	     (fw == PC_ENOTFOUND && start_completion(ctx, r, q->id, &cr, &e)))) {
		if (fw == 0)
			pc__oa_chat_req_free(&cr); /* the proxy sends the request as it came */
		return;
	}
	pc__oa_chat_req_free(&cr);
	pc__oa_answer_error(r->oa, PC__GW_OA_CHAT, q->id, rid, &e);
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
		pc__oa_fail(&e, 404, NULL, "unknown_url", "Unknown request URL: %s %.200s.", q->method, q->path);
	} else if (strcmp(q->method, allow)) {
		pc__oa_fail(&e, 405, NULL, "method_not_allowed", "Use %s for %.200s.", allow, q->path);
		e.allow = allow;
	} else if (route == PC__GW_OA_CHAT && !pc__gw_json_content(q)) {
		/* a browser sends text/plain cross-site without asking first;
		 * it must preflight application/json */
		pc__oa_fail(&e, 415, NULL, "unsupported_media_type", "Send the request body as Content-Type: application/json.");
	} else if (route == PC__GW_OA_MODELS) {
		serve_models(oa, q, rid);
		return;
	} else {
		chat(ctx, r, q, rid);
		return;
	}
	pc__oa_answer_error(oa, route, q->id, rid, &e);
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
