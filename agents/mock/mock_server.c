/*
 * The mock LLM server: one router actor behind every route, one responder
 * actor per chat request. The router keeps its responders by request id,
 * so a client that leaves mid-answer ends its responder at once, timers
 * cancelled, rather than when its next write would have failed.
 *
 * The shared state (the scenario and its cursors, the sequence number, the
 * request log) sits behind one mutex rather than inside an actor: the C
 * API must read it from any thread, actor handlers included, where
 * pc_ask_sync is refused; and the hot path holds the lock only to advance
 * a cursor and push one log entry, so it is never contended for long.
 *
 * Calls into the HTTP server go under a read lock so that
 * pc_mock_server_free can close the server while responders still wait on
 * timers: once it is closed they see `closed` and stop without touching
 * the freed server. The server state itself is reference counted (owner,
 * router, each responder): the last one out frees it.
 */
#include "io/io.h"
#include "mock_server.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "actors/timer.h"
#include "mailbox/atomics.h"
#include "scenario.h"
#include "runtime/clock.h"

enum { MSG_GO = 1, MSG_TICK, MSG_GONE, MSG_DONE };

#define DEFAULT_MAX_RECORDS 10000u
#define DEFAULT_MAX_RECORD_BYTES ((size_t)64 << 20)
#define DEFAULT_MAX_BODY ((uint32_t)32 << 20)
#define DEFAULT_MAX_OUTPUT ((uint32_t)256 << 20)

/* One request in the log. Immutable once pushed. */
typedef struct record {
	uint64_t seq;
	int64_t time_ms;     /* wall clock, at arrival */
	const char *api;     /* "openai" or "anthropic" */
	const char *source;  /* pc_mock_source_name, NULL when no step applies */
	char *step;          /* the chosen step's JSON; NULL: the echo or none */
	char *error;         /* the mock's own 400, or NULL */
	size_t bytes;        /* its cost, for the log's bound */
	const char *method;  /* these point into data */
	const char *path;
	const char *headers; /* header_count pairs: name NUL value NUL */
	size_t header_count;
	const char *body;
	size_t body_len;
	char data[];
} record_t;

struct pc_mock_server {
	uint32_t refs;              /* the owner, the router, each responder */
	pc_http_server_t *http;
	pc_actor_t *router;
	pthread_rwlock_t http_lock; /* read: a call into http; write: closing */
	bool closed;                /* under http_lock */
	pthread_mutex_t lock;       /* guards everything below */
	pc_mock_scenario_t *scenario;
	uint64_t seq;
	record_t **log;             /* a ring of log_cap entries */
	size_t log_cap;
	size_t log_head;            /* the oldest */
	size_t log_count;
	size_t log_bytes;
	size_t log_max_bytes;
	uint64_t paused_until_ns;   /* atomic; POST /__mock/pause; 0: never paused */
};

/* ---- the shared state ---------------------------------------------------- */

static pc_mock_server_t *server_retain(pc_mock_server_t *m)
{
	pc_atomic_faa_u32(&m->refs, 1);
	return m;
}

static void record_free(record_t *r)
{
	if (!r)
		return;
	free(r->step);
	free(r->error);
	free(r);
}

static void log_clear(pc_mock_server_t *m)
{
	for (size_t i = 0; i < m->log_count; i++)
		record_free(m->log[(m->log_head + i) % m->log_cap]);
	m->log_head = 0;
	m->log_count = 0;
	m->log_bytes = 0;
}

static void server_release(pc_mock_server_t *m)
{
	if (pc_atomic_faa_u32(&m->refs, (uint32_t)-1) != 1)
		return;
	log_clear(m);
	free(m->log);
	pc_mock_scenario_release(m->scenario);
	pthread_mutex_destroy(&m->lock);
	pthread_rwlock_destroy(&m->http_lock);
	free(m);
}

/* Under m->lock. The oldest entries go until both bounds hold (the newest
 * is kept even when it alone is over the byte bound). */
static void log_push(pc_mock_server_t *m, record_t *r)
{
	while (m->log_count && (m->log_count == m->log_cap || m->log_bytes + r->bytes > m->log_max_bytes)) {
		record_t *old = m->log[m->log_head];
		m->log_head = (m->log_head + 1) % m->log_cap;
		m->log_count--;
		m->log_bytes -= old->bytes;
		record_free(old);
	}
	m->log[(m->log_head + m->log_count) % m->log_cap] = r;
	m->log_count++;
	m->log_bytes += r->bytes;
}

/* Connection-level headers say nothing about what the client asked. */
static bool kept_header(const char *name)
{
	static const char *const skip[] = {"host", "connection", "keep-alive", "transfer-encoding",
					   "content-length", "te", "upgrade", "expect", "proxy-connection"};
	for (size_t i = 0; i < sizeof(skip) / sizeof(skip[0]); i++)
		if (!strcasecmp(name, skip[i]))
			return false;
	return true;
}

/* A copy of what the log keeps of `req`: one allocation, names lower-cased. */
static record_t *record_new(const pc_http_request_msg_t *req, const char *api)
{
	size_t ml = strlen(req->method) + 1, pl = strlen(req->path) + 1, hl = 0, count = 0;
	for (size_t i = 0; i < req->header_count; i++) {
		if (!kept_header(req->headers[i].name))
			continue;
		hl += strlen(req->headers[i].name) + strlen(req->headers[i].value) + 2;
		count++;
	}
	size_t n = ml + pl + hl + req->body_len + 1;
	record_t *r = malloc(sizeof(*r) + n);
	if (!r)
		return NULL;
	memset(r, 0, sizeof(*r));
	r->time_ms = pc__clock_wall_ms();
	r->api = api;
	r->bytes = sizeof(*r) + n;
	r->header_count = count;
	char *p = r->data;
	r->method = memcpy(p, req->method, ml);
	p += ml;
	r->path = memcpy(p, req->path, pl);
	p += pl;
	r->headers = p;
	for (size_t i = 0; i < req->header_count; i++) {
		if (!kept_header(req->headers[i].name))
			continue;
		for (const char *c = req->headers[i].name; *c; c++)
			*p++ = (char)(*c >= 'A' && *c <= 'Z' ? *c + ('a' - 'A') : *c);
		*p++ = 0;
		size_t vl = strlen(req->headers[i].value) + 1;
		memcpy(p, req->headers[i].value, vl);
		p += vl;
	}
	r->body = p;
	r->body_len = req->body_len;
	if (req->body_len)
		memcpy(p, req->body, req->body_len);
	p[req->body_len] = 0;
	return r;
}

/* The first header `name` (lower case) or NULL. */
static const char *record_header(const record_t *r, const char *name)
{
	const char *p = r->headers;
	for (size_t i = 0; i < r->header_count; i++) {
		const char *v = p + strlen(p) + 1;
		if (!strcmp(p, name))
			return v;
		p = v + strlen(v) + 1;
	}
	return NULL;
}

static cJSON *record_json(const record_t *r)
{
	cJSON *o = cJSON_CreateObject();
	bool ok = cJSON_AddNumberToObject(o, "seq", (double)r->seq) != NULL;
	ok &= cJSON_AddNumberToObject(o, "time_ms", (double)r->time_ms) != NULL;
	ok &= cJSON_AddStringToObject(o, "api", r->api) != NULL;
	ok &= cJSON_AddStringToObject(o, "method", r->method) != NULL;
	ok &= cJSON_AddStringToObject(o, "path", r->path) != NULL;
	cJSON *h = cJSON_AddObjectToObject(o, "headers");
	ok &= h != NULL;
	const char *p = r->headers;
	for (size_t i = 0; i < r->header_count; i++) {
		const char *v = p + strlen(p) + 1;
		/* A repeated header keeps its first value, as lookups do. */
		if (!cJSON_GetObjectItemCaseSensitive(h, p))
			ok &= cJSON_AddStringToObject(h, p, v) != NULL;
		p = v + strlen(v) + 1;
	}
	cJSON *body = cJSON_ParseWithLength(r->body, r->body_len);
	if (!body)
		body = cJSON_CreateString(r->body); /* not JSON: the text as sent */
	bool added = body && cJSON_AddItemToObject(o, "body", body);
	if (!added)
		cJSON_Delete(body);
	ok &= added;
	ok &= (r->source ? cJSON_AddStringToObject(o, "source", r->source) : cJSON_AddNullToObject(o, "source")) != NULL;
	cJSON *step = r->step ? cJSON_Parse(r->step) : cJSON_CreateNull();
	added = step && cJSON_AddItemToObject(o, "step", step);
	if (!added)
		cJSON_Delete(step);
	ok &= added;
	ok &= (r->error ? cJSON_AddStringToObject(o, "error", r->error) : cJSON_AddNullToObject(o, "error")) != NULL;
	if (!ok) {
		cJSON_Delete(o);
		return NULL;
	}
	return o;
}

/* ---- answering ----------------------------------------------------------- */

enum { OP_RESPOND, OP_START, OP_WRITE, OP_END, OP_ABORT };

/* One call into the HTTP server, unless it is closing (PC_ESTOPPED).
 * Callers that ignore the result do so because a failure only means the
 * client or the server is gone, and then there is nothing left to do. */
static int http_op(pc_mock_server_t *m, int op, uint64_t id, int status, const char *headers,
		   const void *data, size_t len)
{
	pthread_rwlock_rdlock(&m->http_lock);
	int rc = PC_ESTOPPED;
	if (!m->closed) {
		switch (op) {
		case OP_RESPOND: rc = pc_http_respond(m->http, id, status, headers, data, len); break;
		case OP_START: rc = pc_http_respond_start(m->http, id, status, headers); break;
		case OP_WRITE: rc = pc_http_respond_write(m->http, id, data, len); break;
		case OP_END: rc = pc_http_respond_end(m->http, id); break;
		default: rc = pc_http_abort(m->http, id); break;
		}
	}
	pthread_rwlock_unlock(&m->http_lock);
	return rc;
}

/* The last resort when an answer cannot even be built. */
static void respond_text(pc_mock_server_t *m, uint64_t id, int status, const char *text)
{
	http_op(m, OP_RESPOND, id, status, "Content-Type: text/plain\r\n", text, strlen(text));
}

/* Answers with `obj` (which it frees) as JSON. */
static void respond_json(pc_mock_server_t *m, uint64_t id, int status, cJSON *obj)
{
	char *s = obj ? pc_json_print(obj) : NULL;
	cJSON_Delete(obj);
	if (!s) {
		respond_text(m, id, 500, "mock: out of memory\n");
		return;
	}
	http_op(m, OP_RESPOND, id, status, "Content-Type: application/json\r\n", s, strlen(s));
	free(s);
}

static void respond_ok(pc_mock_server_t *m, uint64_t id)
{
	cJSON *o = cJSON_CreateObject();
	if (o && !cJSON_AddTrueToObject(o, "ok")) {
		cJSON_Delete(o);
		o = NULL;
	}
	respond_json(m, id, 200, o);
}

/* ---- the responder: one chat request ------------------------------------- */

enum { STAGE_HEAD, STAGE_WRITES, STAGE_FINISH };

typedef struct responder {
	pc_mock_server_t *m;
	record_t *rec;      /* ours until pushed to the log */
	uint64_t id;
	pc_mock_api_t api;
	pc_mock_plan_t plan;
	int stage;
	size_t next;        /* the next write */
	bool waited;        /* the wait before the current step is over */
	pc_timer_t timer;   /* the wait under way, 0: none */
	pc_actor_t *router; /* told when this request is over */
} responder_t;

/* Fills in the log entry and pushes it. Under m->lock. */
static int record_finish(pc_mock_server_t *m, record_t *rec, const pc_mock_step_t *st,
			 pc_mock_source_t src, const char *err)
{
	if (err[0]) {
		if (!(rec->error = strdup(err)))
			return PC_ENOMEM;
		rec->bytes += strlen(err) + 1;
	} else {
		rec->source = pc_mock_source_name(src);
		if (st && !(rec->step = strdup(pc_mock_step_json(st))))
			return PC_ENOMEM;
		rec->bytes += st ? strlen(rec->step) + 1 : 0;
	}
	log_push(m, rec);
	return 0;
}

/* Picks the step (marker, header, scenario, default), logs the request and
 * builds the plan. A request the mock cannot read gets a 400 plan. */
static int prepare(responder_t *r)
{
	pc_mock_server_t *m = r->m;
	record_t *rec = r->rec;
	char err[PC_MOCK_ERR_MAX] = "";
	cJSON *body = cJSON_ParseWithLength(rec->body, rec->body_len);
	pc_mock_step_t *own = NULL;
	pc_mock_source_t src = PC_MOCK_SRC_DEFAULT;
	int rc = 0;
	if (!cJSON_IsObject(body))
		snprintf(err, sizeof(err), "mock: the request body is not a JSON object");
	else if ((rc = pc_mock_request_step(body, record_header(rec, "x-mock-scenario"), &own, &src, err,
					    sizeof(err))) == PC_EINVAL)
		rc = 0; /* err says why: answered with a 400 */
	const pc_mock_step_t *st = own;
	pc_mock_scenario_t *sc = NULL;
	int64_t created = rec->time_ms / 1000;
	pthread_mutex_lock(&m->lock);
	uint64_t seq = ++m->seq;
	rec->seq = seq;
	if (!rc && !err[0] && !own) {
		sc = pc_mock_scenario_retain(m->scenario);
		rc = pc_mock_scenario_next(sc, record_header(rec, "x-mock-session"), &st, &src);
	}
	if (!rc && !(rc = record_finish(m, rec, st, src, err)))
		r->rec = NULL; /* the log's now, and may go at any time */
	pthread_mutex_unlock(&m->lock);
	if (!rc && err[0])
		rc = pc_mock_plan_error(r->api, 400, err, seq, &r->plan);
	else if (!rc)
		rc = pc_mock_plan_build(st, r->api, body, seq, created, &r->plan);
	pc_mock_scenario_release(sc);
	pc_mock_step_free(own);
	cJSON_Delete(body);
	return rc;
}

/* True when a timer now stands for the `ms` wait before the current step
 * (the handler returns and resumes on the tick); false once it has passed
 * or when there is none. */
static bool wait_for(pc_ctx_t *ctx, responder_t *r, uint32_t ms)
{
	if (!ms || r->waited) {
		r->waited = false;
		return false;
	}
	pc_msg_t *tick = pc_msg_new(MSG_TICK, 0);
	/* Without a timer (no memory, or the runtime stopping) the answer goes
	 * on at once rather than never. */
	if (!tick || pc_timer_after(pc_self(ctx), ms, tick, &r->timer))
		return false;
	r->waited = true;
	return true;
}

/* A pause of the whole server (POST /__mock/pause: a target that stops
 * answering for a while, as a process does in a long GC pause) holds every
 * answer where it stands. True when a timer now stands for the rest of it;
 * the step's own wait, if one was under way, is not waited again. */
static bool paused(pc_ctx_t *ctx, responder_t *r)
{
	uint64_t until = pc_atomic_load_u64(&r->m->paused_until_ns), now = pc__clock_mono_ns();
	if (until <= now)
		return false;
	pc_msg_t *tick = pc_msg_new(MSG_TICK, 0);
	return tick && !pc_timer_after(pc_self(ctx), (until - now + 999999u) / 1000000u, tick, &r->timer);
}

/* Runs the plan up to its next wait. True when nothing is left to do: the
 * answer is complete, or the client or the server is gone. */
static bool advance(pc_ctx_t *ctx, responder_t *r)
{
	pc_mock_plan_t *p = &r->plan;
	pc_mock_server_t *m = r->m;
	int rc = 0;
	if (paused(ctx, r))
		return false;
	if (r->stage == STAGE_HEAD) {
		if (wait_for(ctx, r, p->head_wait_ms))
			return false;
		if (p->send_head && p->streamed)
			rc = http_op(m, OP_START, r->id, p->status, p->headers, NULL, 0);
		else if (p->send_head)
			rc = http_op(m, OP_RESPOND, r->id, p->status, p->headers, p->body, p->body_len);
		r->stage = STAGE_WRITES;
	}
	while (!rc && r->stage == STAGE_WRITES && r->next < p->write_count) {
		const pc_mock_write_t *w = &p->writes[r->next];
		if (wait_for(ctx, r, w->wait_ms))
			return false;
		rc = http_op(m, OP_WRITE, r->id, 0, NULL, p->body + w->off, w->len);
		r->next++;
	}
	r->stage = STAGE_FINISH;
	/* HANG: silence until the client gives up or the server closes. */
	if (rc || p->finish == PC_MOCK_HANG)
		return true;
	if (wait_for(ctx, r, p->finish_wait_ms))
		return false;
	if (p->finish == PC_MOCK_ABORT)
		http_op(m, OP_ABORT, r->id, 0, NULL, NULL, 0);
	else if (p->send_head && p->streamed)
		http_op(m, OP_END, r->id, 0, NULL, NULL, 0);
	return true;
}

static int responder_receive(pc_ctx_t *ctx, void *state, pc_msg_t *msg)
{
	responder_t *r = state;
	if (msg->type == MSG_TICK)
		r->timer = 0;
	if (msg->type == MSG_GONE) {
		pc_exit(ctx, PC_EXIT_NORMAL); /* the client left: nothing more to say */
		return 0;
	}
	if (msg->type == MSG_GO && prepare(r)) {
		respond_text(r->m, r->id, 500, "mock: out of memory\n");
		pc_exit(ctx, PC_EXIT_NORMAL);
		return 0;
	}
	if (advance(ctx, r))
		pc_exit(ctx, PC_EXIT_NORMAL);
	return 0;
}

static void responder_stop(pc_ctx_t *ctx, void *state, int reason)
{
	(void)reason;
	responder_t *r = state;
	/* a wait cut short holds neither this actor nor the runtime busy */
	if (r->timer)
		(void)pc_timer_cancel(pc_ctx_runtime(ctx), r->timer);
	(void)pc_send_u64(r->router, MSG_DONE, r->id); /* a stopped router drops it */
	pc_actor_release(r->router);
	pc_mock_plan_free(&r->plan);
	record_free(r->rec);
	server_release(r->m);
	free(r);
}

static const pc_behavior_t responder_behavior = {
	.name = "mock_responder",
	.receive = responder_receive,
	.stop = responder_stop,
};

/* ---- the router: every route --------------------------------------------- */

static const char *api_name(pc_mock_api_t api)
{
	return api == PC_MOCK_OPENAI ? "openai" : "anthropic";
}

/* The router's own state. */
typedef struct router {
	pc_mock_server_t *m;
	pc_http_handoffs_t *responders; /* by request id: a client's GONE reaches its responder */
} router_t;

/* A chat request gets its own actor, so answers are built in parallel
 * and each can wait on its own timers. */
static void serve_chat(pc_ctx_t *ctx, router_t *ro, const pc_http_request_msg_t *req, pc_mock_api_t api)
{
	pc_mock_server_t *m = ro->m;
	responder_t *r = calloc(1, sizeof(*r));
	record_t *rec = r ? record_new(req, api_name(api)) : NULL;
	pc_actor_t *a = NULL;
	int rc = PC_ENOMEM;
	if (rec) {
		*r = (responder_t){.m = server_retain(m), .rec = rec, .id = req->id, .api = api,
				   .router = pc_actor_retain(pc_self(ctx))};
		rc = pc_spawn(pc_ctx_runtime(ctx), &responder_behavior, r, &a);
		if (rc) {
			pc_actor_release(r->router);
			server_release(m);
		}
	}
	if (rc) {
		record_free(rec);
		free(r);
		respond_text(m, req->id, 503, "mock: cannot start a responder\n");
		return;
	}
	/* known to the router before it starts: a GONE can only come later */
	if (pc_http_handoff_add(ro->responders, req->id, a) || pc_send_u64(a, MSG_GO, 0)) {
		/* Its stop handler frees it; the client hears the reason. */
		pc_actor_stop(a, PC_EXIT_KILLED);
		respond_text(m, req->id, 503, "mock: cannot start a responder\n");
	}
	pc_actor_release(a);
}

static void serve_models(pc_mock_server_t *m, const pc_http_request_msg_t *req)
{
	pc_mock_api_t api = pc_http_request_header(req, "anthropic-version") ? PC_MOCK_ANTHROPIC : PC_MOCK_OPENAI;
	record_t *rec = record_new(req, api_name(api));
	pthread_mutex_lock(&m->lock);
	uint64_t seq = ++m->seq;
	pc_mock_scenario_t *sc = pc_mock_scenario_retain(m->scenario);
	if (rec) {
		rec->seq = seq;
		log_push(m, rec);
	}
	pthread_mutex_unlock(&m->lock);
	pc_mock_plan_t pl;
	if (pc_mock_plan_models(sc, api, seq, pc__clock_wall_ms() / 1000, &pl))
		respond_text(m, req->id, 500, "mock: out of memory\n");
	else
		http_op(m, OP_RESPOND, req->id, pl.status, pl.headers, pl.body, pl.body_len);
	pc_mock_plan_free(&pl);
	pc_mock_scenario_release(sc);
}

static void serve_requests(pc_mock_server_t *m, const pc_http_request_msg_t *req)
{
	cJSON *arr = NULL;
	if (pc_mock_server_requests(m, &arr))
		respond_text(m, req->id, 500, "mock: out of memory\n");
	else
		respond_json(m, req->id, 200, arr);
}

/* The longest pause asked for: 10 minutes. */
#define PAUSE_MS_MAX 600000u

static void serve_pause(pc_mock_server_t *m, const pc_http_request_msg_t *req)
{
	cJSON *b = cJSON_ParseWithLength(req->body, req->body_len);
	const cJSON *ms = cJSON_GetObjectItemCaseSensitive(b, "ms");
	double v = cJSON_IsNumber(ms) ? ms->valuedouble : -1;
	if (!(v >= 1 && v <= PAUSE_MS_MAX) || v != (double)(uint64_t)v) {
		cJSON_Delete(b);
		cJSON *o = cJSON_CreateObject();
		if (o && !cJSON_AddStringToObject(o, "error", "ms: must be a whole number of milliseconds, 1 to 600000")) {
			cJSON_Delete(o);
			o = NULL;
		}
		respond_json(m, req->id, 400, o);
		return;
	}
	cJSON_Delete(b);
	pc_atomic_store_u64(&m->paused_until_ns, pc__clock_mono_ns() + (uint64_t)v * 1000000u);
	respond_ok(m, req->id);
}

static void serve_scenario(pc_mock_server_t *m, const pc_http_request_msg_t *req)
{
	char err[PC_MOCK_ERR_MAX] = "";
	int rc = pc_mock_server_set_scenario(m, req->body, req->body_len, err, sizeof(err));
	if (!rc) {
		respond_ok(m, req->id);
		return;
	}
	cJSON *o = cJSON_CreateObject();
	if (o && !cJSON_AddStringToObject(o, "error", rc == PC_EINVAL ? err : pc_strerror(rc))) {
		cJSON_Delete(o);
		o = NULL;
	}
	respond_json(m, req->id, rc == PC_EINVAL ? 400 : 500, o);
}

static int router_receive(pc_ctx_t *ctx, void *state, pc_msg_t *msg)
{
	router_t *ro = state;
	pc_mock_server_t *m = ro->m;
	if (msg->type == PC_MSG_HTTP_GONE) {
		pc_http_handoff_gone(ro->responders, msg, MSG_GONE);
		return 0;
	}
	if (msg->type == MSG_DONE) {
		pc_http_handoff_done(ro->responders, pc_msg_u64(msg));
		return 0;
	}
	if (msg->type != PC_MSG_HTTP_REQUEST)
		return 0;
	const pc_http_request_msg_t *req = pc_msg_cdata(msg);
	if (!strcmp(req->path, "/v1/chat/completions"))
		serve_chat(ctx, ro, req, PC_MOCK_OPENAI);
	else if (!strcmp(req->path, "/v1/messages"))
		serve_chat(ctx, ro, req, PC_MOCK_ANTHROPIC);
	else if (!strcmp(req->path, "/v1/models"))
		serve_models(m, req);
	else if (!strcmp(req->path, "/__mock/requests"))
		serve_requests(m, req);
	else if (!strcmp(req->path, "/__mock/reset")) {
		pc_mock_server_reset(m);
		respond_ok(m, req->id);
	} else if (!strcmp(req->path, "/__mock/scenario"))
		serve_scenario(m, req);
	else if (!strcmp(req->path, "/__mock/pause"))
		serve_pause(m, req);
	return 0;
}

static void router_stop(pc_ctx_t *ctx, void *state, int reason)
{
	(void)ctx;
	(void)reason;
	router_t *ro = state;
	/* the responders still waiting stop with it */
	pc_http_handoffs_free(ro->responders);
	server_release(ro->m);
	free(ro);
}

static const pc_behavior_t router_behavior = {
	.name = "mock_router",
	.receive = router_receive,
	.stop = router_stop,
};

static int router_spawn(pc_io_t *io, pc_mock_server_t *m)
{
	router_t *ro = calloc(1, sizeof(*ro));
	int rc = ro ? pc_http_handoffs_new(&ro->responders) : PC_ENOMEM;
	if (!rc) {
		ro->m = server_retain(m);
		rc = pc_spawn(pc_io_runtime(io), &router_behavior, ro, &m->router);
		if (rc)
			server_release(m); /* the router's reference */
	}
	if (rc) {
		if (ro)
			pc_http_handoffs_free(ro->responders);
		free(ro);
	}
	return rc;
}

/* ---- the C API ----------------------------------------------------------- */

static const struct {
	const char *method;
	const char *path;
} routes[] = {
	{"POST", "/v1/chat/completions"},
	{"POST", "/v1/messages"},
	{"GET", "/v1/models"},
	{"GET", "/__mock/requests"},
	{"POST", "/__mock/reset"},
	{"POST", "/__mock/scenario"},
	{"POST", "/__mock/pause"},
};

/* The locks; PC_ESYS (with nothing to undo) if one cannot be made. */
static int locks_init(pc_mock_server_t *m)
{
	pthread_rwlockattr_t attr;
	if (pthread_mutex_init(&m->lock, NULL))
		return PC_ESYS;
	int rc = PC_ESYS;
	if (!pthread_rwlockattr_init(&attr)) {
		/* Writer first: free must not starve behind a busy stream of
		 * answers. */
		if (!pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP) &&
		    !pthread_rwlock_init(&m->http_lock, &attr))
			rc = 0;
		pthread_rwlockattr_destroy(&attr);
	}
	if (rc)
		pthread_mutex_destroy(&m->lock);
	return rc;
}

int pc_mock_server_start(pc_io_t *io, const pc_mock_server_config_t *cfg, pc_mock_server_t **out,
			 char *err, size_t errcap)
{
	if (!io || !out)
		return PC_EINVAL;
	pc_mock_server_config_t c = cfg ? *cfg : (pc_mock_server_config_t){0};
	const char *scenario = c.scenario ? c.scenario : "[]";
	size_t scenario_len = c.scenario ? (c.scenario_len ? c.scenario_len : strlen(c.scenario)) : 2;
	pc_mock_server_t *m = calloc(1, sizeof(*m));
	if (!m)
		return PC_ENOMEM;
	int rc = locks_init(m);
	if (rc) {
		free(m);
		return rc;
	}
	m->refs = 1;
	m->log_cap = c.max_records ? c.max_records : DEFAULT_MAX_RECORDS;
	m->log_max_bytes = c.max_record_bytes ? c.max_record_bytes : DEFAULT_MAX_RECORD_BYTES;
	m->log = calloc(m->log_cap, sizeof(*m->log));
	rc = m->log ? pc_mock_scenario_parse(scenario, scenario_len, &m->scenario, err, errcap) : PC_ENOMEM;
	if (!rc)
		rc = router_spawn(io, m);
	pc_http_server_config_t hc = {
		.host = c.host,
		.port = c.port,
		.limits = {.max_body_bytes = c.max_body_bytes ? c.max_body_bytes : DEFAULT_MAX_BODY,
			   .max_output_bytes = c.max_output_bytes ? c.max_output_bytes : DEFAULT_MAX_OUTPUT,
			   .max_concurrent_streams = c.max_streams},
	};
	if (!rc)
		rc = pc_http_server_new(io, &hc, &m->http);
	for (size_t i = 0; !rc && i < sizeof(routes) / sizeof(routes[0]); i++)
		rc = pc_http_server_route(m->http, routes[i].method, routes[i].path, m->router);
	if (!rc)
		rc = pc_http_server_start(m->http);
	if (rc) {
		int e = errno; /* PC_ESYS: the caller reads why (a taken port) */
		pc_mock_server_free(m);
		errno = e;
		return rc;
	}
	*out = m;
	return 0;
}

uint16_t pc_mock_server_port(const pc_mock_server_t *m)
{
	return m && m->http ? pc_http_server_port(m->http) : 0;
}

int pc_mock_server_set_scenario(pc_mock_server_t *m, const char *json, size_t len, char *err,
				size_t errcap)
{
	if (!m || !json)
		return PC_EINVAL;
	pc_mock_scenario_t *sc = NULL;
	int rc = pc_mock_scenario_parse(json, len, &sc, err, errcap);
	if (rc)
		return rc;
	pthread_mutex_lock(&m->lock);
	pc_mock_scenario_t *old = m->scenario;
	m->scenario = sc;
	pthread_mutex_unlock(&m->lock);
	pc_mock_scenario_release(old); /* responders may still hold it */
	return 0;
}

int pc_mock_server_requests(pc_mock_server_t *m, cJSON **out)
{
	if (!m || !out)
		return PC_EINVAL;
	cJSON *arr = cJSON_CreateArray();
	if (!arr)
		return PC_ENOMEM;
	int rc = 0;
	pthread_mutex_lock(&m->lock);
	for (size_t i = 0; i < m->log_count && !rc; i++) {
		cJSON *j = record_json(m->log[(m->log_head + i) % m->log_cap]);
		if (!j || !cJSON_AddItemToArray(arr, j)) {
			cJSON_Delete(j);
			rc = PC_ENOMEM;
		}
	}
	pthread_mutex_unlock(&m->lock);
	if (rc) {
		cJSON_Delete(arr);
		return rc;
	}
	*out = arr;
	return 0;
}

void pc_mock_server_reset(pc_mock_server_t *m)
{
	if (!m)
		return;
	pthread_mutex_lock(&m->lock);
	log_clear(m);
	pc_mock_scenario_rewind(m->scenario);
	m->seq = 0;
	pthread_mutex_unlock(&m->lock);
}

void pc_mock_server_free(pc_mock_server_t *m)
{
	if (!m)
		return;
	/* After this no responder or router calls into the server. */
	pthread_rwlock_wrlock(&m->http_lock);
	m->closed = true;
	pthread_rwlock_unlock(&m->http_lock);
	pc_http_server_free(m->http);
	if (m->router) {
		pc_actor_stop(m->router, PC_EXIT_NORMAL);
		pc_actor_release(m->router);
	}
	server_release(m);
}

int pc_mock_server_embedded_start(pc_io_t *io, const char *scenario, void **server, uint16_t *port, char *err,
				  size_t errcap)
{
	pc_mock_server_config_t mc = {.host = "127.0.0.1", .scenario = scenario, .max_records = 64,
				      .max_record_bytes = (size_t)1 << 20};
	pc_mock_server_t *m = NULL;
	int rc = pc_mock_server_start(io, &mc, &m, err, errcap);
	if (rc != 0)
		return rc;
	*server = m;
	*port = pc_mock_server_port(m);
	return 0;
}

void pc_mock_server_embedded_stop(void *server)
{
	pc_mock_server_free(server);
}
