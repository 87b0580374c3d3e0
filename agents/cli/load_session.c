/*
 * One simulated session of `pincer load` (load.h): an actor on the I/O
 * layer's non-blocking clients, so thousands of them share the runtime's
 * few threads.
 *
 * A session plays one turn at a time. Turns come with their intended send
 * time: from the driver's schedule (open loop), or from the session
 * itself after its think time (closed loop). A turn that comes while
 * another runs waits in the session's queue; every latency is measured
 * from the intended time, so that wait counts (coordinated omission).
 *
 * WebSocket: the connection is opened for the first turn and kept; the
 * challenge, `connect` (signed with --identity's device), then per turn an `agent` request, its accepted
 * answer, `agent` events (assistant deltas are the tokens) and the final
 * answer; or (--via chat) a `chat.send` request, its started answer, the
 * same `agent` events, and the run's final `chat` event. A turn that
 * fails with the connection (lost, timed out) leaves it closed; the next
 * turn opens a new one. HTTP: one POST per turn; http:// on the
 * session's own kept-alive connection (io/http1_client.h), opened again
 * after a turn that ended with its answer unread, https:// through
 * libcurl's connections.
 */
#include "load.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "actors/timer.h"
#include "runtime/clock.h"
#include "io/io.h"
#include "commands.h"
#include "device_identity.h"
#include "load_out.h"
#include "rpc_client.h"

/* A whole answer is read for its tool calls up to this size. */
#define MAX_BODY (16u << 20)

/* A session's own message: the running turn's time is up (u64: its serial). */
#define MSG_DEADLINE (PC_LOAD_MSG_BYE + 1)
/* The pause before a closed-loop session's next turn after a failed
 * connection, so a refusing target is not hammered in a tight loop. */
#define RETRY_PAUSE_MS 100

typedef enum conn {
	CONN_NONE,      /* no connection (also: the last one ended) */
	CONN_OPENING,   /* TCP and the upgrade */
	CONN_HANDSHAKE, /* waiting for the challenge, or the answer to `connect` */
	CONN_READY,
} conn_t;

typedef struct turn {
	uint64_t serial;   /* 0: none running */
	uint64_t intended, started, accepted, first, last;
	bool sent;         /* the request went out */
	bool measured;     /* counts in the figures (not warmup) */
	bool conn_failed;  /* ended with its connection (or could not make one) */
	uint32_t tokens;
	uint32_t tool_calls;
	uint32_t *gaps;    /* inter-token gaps in µs, recorded when the turn succeeds */
	size_t n_gaps, gaps_cap;
	pc_timer_t deadline;
	char req[PC_CLI_RPC_ID_MAX]; /* ws: the `agent` (or chat.send) request's id */
	char wait_req[PC_CLI_RPC_ID_MAX]; /* --via wait: the agent.wait request's id, once sent */
	char run_id[80];             /* ws: the run's, from the answer */
	int http_status;
	bool http_open;    /* the request went out and its END has not come */
	pc_http_call_t *call; /* https:// */
	pc_sse_parser_t *sse;
	pc__buf_t body;    /* http, not streamed: the answer, for its tool calls */
} turn_t;

typedef struct session {
	const pc_load_opts_t *o;
	pc_load_stats_t *st;
	pc_io_t *io;
	uint32_t index;
	uint64_t serials;  /* turns begun */
	uint64_t played;   /* closed loop: turns ended */
	bool closed_loop;
	bool playing;      /* closed loop: a turn, or the pause before one, is under way */
	bool retired;      /* closed loop: no turn after the one under way */
	/* the queue of intended times, a ring */
	uint64_t *queue;
	size_t q_head, q_len, q_cap;
	turn_t t;
	pc_h1c_t *h1;      /* http:// */
	uint64_t h1_counted; /* its connections already added to the run's */
	/* ws */
	pc_wsc_t *ws;
	uintptr_t ws_gen; /* names the current connection in its messages */
	conn_t conn;
	unsigned next_id;
	char connect_id[PC_CLI_RPC_ID_MAX];
} session_t;

static const char *jstr(const cJSON *o, const char *k)
{
	const char *s = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, k));
	return s ? s : "";
}

static const cJSON *jget(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }

static void start_next(session_t *s, pc_ctx_t *ctx);

/* ---- the message ---- */

/* "N}" at p, N a whole number from 1: *per = N, *end at the brace. */
static bool turn_per(const char *p, uint64_t *per, const char **end)
{
	if (*p < '1' || *p > '9')
		return false;
	char *e;
	errno = 0;
	unsigned long long v = strtoull(p, &e, 10);
	if (errno || *e != '}')
		return false;
	*per = v;
	*end = e;
	return true;
}

/* tmpl with {session}, {turn} (both 0-based), {turn/N} (the turn divided
 * by N, rounded down: a new number every N turns) and {run} (the run's
 * id, as in the idempotency keys) filled in. */
static char *expand(const session_t *s, const char *tmpl, uint64_t turn)
{
	uint64_t per;
	const char *end;
	/* the longest expansion, "{turn}" into 20 digits, is under 4 times */
	char *out = malloc(strlen(tmpl) * 4 + 1);
	if (!out)
		return NULL;
	size_t n = 0;
	for (const char *p = tmpl; *p; p++) {
		if (!strncmp(p, "{session}", 9)) {
			n += (size_t)snprintf(out + n, 24, "%u", s->index);
			p += 8;
		} else if (!strncmp(p, "{turn}", 6)) {
			n += (size_t)snprintf(out + n, 24, "%llu", (unsigned long long)turn);
			p += 5;
		} else if (!strncmp(p, "{turn/", 6) && turn_per(p + 6, &per, &end)) {
			n += (size_t)snprintf(out + n, 24, "%llu", (unsigned long long)(turn / per));
			p = end;
		} else if (!strncmp(p, "{run}", 5)) {
			n += (size_t)snprintf(out + n, 24, "%llx", (unsigned long long)s->st->t0_ns);
			p += 4;
		} else {
			out[n++] = *p;
		}
	}
	out[n] = '\0';
	return out;
}

/* The turn's message: --message, or its line of --messages, expanded. */
static char *message_for(const session_t *s, uint64_t turn)
{
	const pc_load_opts_t *o = s->o;
	return expand(s, o->messages ? o->messages[turn % o->n_messages] : o->message, turn);
}

/* ---- the end of a turn ---- */

/* to - from in µs into h (NULL: no window), when both times are known. */
static void record(pc_hist_t *h, uint64_t from, uint64_t to)
{
	if (from && to >= from)
		pc_hist_record(h, (to - from) / 1000);
}

/* Adds the connections the http:// connection has made since last
 * counted to the run's count. */
static void count_h1(session_t *s)
{
	if (!s->h1)
		return;
	uint64_t n = pc_h1c_connections(s->h1);
	atomic_fetch_add(&s->st->connections, n - s->h1_counted);
	s->h1_counted = n;
}

/* Lets the http:// connection go (a new one is made for the next turn). */
static void drop_h1(session_t *s)
{
	count_h1(s);
	pc_h1c_release(s->h1);
	s->h1 = NULL;
	s->h1_counted = 0;
}

static void drop_connection(session_t *s)
{
	if (s->ws)
		atomic_fetch_sub(&s->st->ws_live, 1);
	pc_wsc_release(s->ws);
	s->ws = NULL;
	s->conn = CONN_NONE;
}

/* Time per output token after the first, in µs: UINT64_MAX for an
 * answer of fewer than two tokens. */
static uint64_t tpot_us(const turn_t *t)
{
	if (t->tokens < 2)
		return UINT64_MAX;
	return (t->last - t->first) / 1000 / (t->tokens - 1);
}

/* Whether a successful turn ending `now` is within every --slo limit (an
 * answer without tokens misses a TTFT limit; one of a single token has no
 * time per token to miss). */
static bool within_slo(const pc_load_opts_t *o, const turn_t *t, uint64_t now, uint64_t tpot)
{
	if (o->slo_ttft_us && (!t->first || (t->first - t->intended) / 1000 > o->slo_ttft_us))
		return false;
	if (o->slo_tpot_us && tpot != UINT64_MAX && tpot > o->slo_tpot_us)
		return false;
	return !o->slo_turn_us || (now - t->intended) / 1000 <= o->slo_turn_us;
}

/* The tool calls of a successful turn: the total, the turns by their
 * number, the most in one. */
static void count_tools(pc_load_stats_t *st, uint32_t n)
{
	atomic_fetch_add(&st->tool_calls, n);
	atomic_fetch_add(&st->tool_turns[n < PC_LOAD_TOOL_BUCKETS ? n : PC_LOAD_TOOL_BUCKETS - 1], 1);
	uint_fast64_t max = atomic_load(&st->tool_calls_max);
	while (n > max && !atomic_compare_exchange_weak(&st->tool_calls_max, &max, n))
		;
}

/* The turn into --out's records (load_out.h): `end` 0 and no code when
 * it was in flight at the end. */
static void keep(const session_t *s, const turn_t *t, uint64_t end, const char *code)
{
	if (!s->st->records)
		return;
	pc_load_rec_t rec = {.intended = t->intended, .started = t->started, .accepted = t->accepted,
			     .first = t->first, .end = end, .session = s->index, .turn = (uint32_t)(t->serial - 1),
			     .tokens = t->tokens, .tool_calls = t->tool_calls, .warmup = !t->measured,
			     .outcome = !end ? PC_LOAD_OUTCOME_IN_FLIGHT
				       : code ? PC_LOAD_OUTCOME_FAILED
					      : PC_LOAD_OUTCOME_OK};
	pc_load_records_add(s->st->records, &rec, end ? code : NULL);
}

/* The turns still queued when the run ends: in flight at the end, never
 * started. Empties the queue. */
static void keep_queued(session_t *s)
{
	for (size_t i = 0; i < s->q_len; i++) {
		turn_t t = {.serial = s->serials + 1 + i, .intended = s->queue[(s->q_head + i) % s->q_cap]};
		t.measured = t.intended >= s->st->warm_until_ns;
		keep(s, &t, 0, NULL);
	}
	s->q_len = 0;
}

/* Ends the running turn: `code` NULL when it went well. */
static void finish(session_t *s, pc_ctx_t *ctx, const char *code)
{
	turn_t *t = &s->t;
	uint64_t now = pc__clock_mono_ns();
	pc_load_stats_t *st = s->st;
	/* once the duration is over, what ends is "in flight at the end" */
	bool after_end = atomic_load(&st->stopped);
	keep(s, t, after_end ? 0 : now, code);
	if (!after_end) {
		if (!t->measured)
			atomic_fetch_add(&st->warmup, 1);
		else if (code)
			pc_load_stats_error(st, code);
		else {
			record(st->hist[PC_LOAD_ACCEPTED], t->intended, t->accepted);
			record(st->hist[PC_LOAD_TTFT], t->intended, t->first);
			record(st->hist[PC_LOAD_TURN], t->intended, now);
			record(st->window[PC_LOAD_WINDOW_TURN], t->intended, now);
			record(st->window[PC_LOAD_WINDOW_TTFT], t->intended, t->first);
			for (size_t i = 0; i < t->n_gaps; i++)
				pc_hist_record(st->hist[PC_LOAD_ITL], t->gaps[i]);
			uint64_t tpot = tpot_us(t);
			if (tpot != UINT64_MAX)
				pc_hist_record(st->hist[PC_LOAD_TPOT], tpot);
			if (s->o->slo && within_slo(s->o, t, now, tpot))
				atomic_fetch_add(&st->good, 1);
			count_tools(st, t->tool_calls);
			atomic_fetch_add(&st->ok, 1);
		}
	}
	atomic_fetch_sub(&st->in_flight, 1);
	if (t->deadline)
		(void)pc_timer_cancel(pc_ctx_runtime(ctx), t->deadline);
	pc_http_call_release(t->call);
	if (t->http_open)
		drop_h1(s); /* its answer would still come on that connection */
	pc_sse_parser_free(t->sse);
	pc__buf_free(&t->body);
	free(t->gaps);
	bool conn_failed = t->conn_failed || (code && !strcmp(code, "timeout"));
	if (conn_failed && s->o->proto == PC_LOAD_WS)
		drop_connection(s);
	memset(t, 0, sizeof(*t));
	if (!s->closed_loop) {
		start_next(s, ctx);
		return;
	}
	s->played++;
	if (s->retired) {
		s->playing = false;
		return;
	}
	if (atomic_load(&st->stopped) || (s->o->turns && s->played >= s->o->turns)) {
		atomic_fetch_add(&st->sessions_done, 1);
		return;
	}
	uint64_t pause = s->o->think_ms;
	if (conn_failed && pause < RETRY_PAUSE_MS)
		pause = RETRY_PAUSE_MS;
	pc_msg_t *m = pc_msg_new(PC_LOAD_MSG_TURN, sizeof(uint64_t));
	if (!m) {
		atomic_fetch_add(&st->sessions_done, 1);
		return;
	}
	/* a timer is never early: its due time is the turn's intended time;
	 * without a pause the turn goes straight to the mailbox (through the
	 * timer thread it would cost a wake-up of that thread per turn) */
	*(uint64_t *)pc_msg_data(m) = pc__clock_mono_ns() + pause * 1000000u;
	int rc = pause ? pc_timer_after(pc_self(ctx), pause, m, NULL) : pc_send(pc_self(ctx), m);
	if (rc != 0)
		atomic_fetch_add(&st->sessions_done, 1);
}

/* A streamed token (a delta with text) of the running turn. */
static void token(session_t *s)
{
	uint64_t now = pc__clock_mono_ns();
	turn_t *t = &s->t;
	t->tokens++;
	if (!t->first) {
		t->first = now;
	} else if (t->measured) {
		if (t->n_gaps == t->gaps_cap) {
			size_t cap = t->gaps_cap ? t->gaps_cap * 2 : 16;
			uint32_t *g = realloc(t->gaps, cap * sizeof(*g));
			if (!g) {
				t->last = now; /* the gap is lost, not the turn */
				return;
			}
			t->gaps = g;
			t->gaps_cap = cap;
		}
		uint64_t us = (now - t->last) / 1000;
		t->gaps[t->n_gaps++] = us > UINT32_MAX ? UINT32_MAX : (uint32_t)us;
	}
	t->last = now;
	if (t->measured)
		atomic_fetch_add(&s->st->tokens, 1);
}

/* ---- WebSocket ---- */

/* Sends {type:"req", id, method, params} (params taken); the id to `id`. */
static int ws_request(session_t *s, const char *method, cJSON *params, char *id)
{
	snprintf(id, PC_CLI_RPC_ID_MAX, "%u", ++s->next_id);
	cJSON *f = cJSON_CreateObject();
	bool ok = f && cJSON_AddStringToObject(f, "type", "req") && cJSON_AddStringToObject(f, "id", id) &&
		  cJSON_AddStringToObject(f, "method", method) && params && cJSON_AddItemToObject(f, "params", params);
	if (!ok)
		cJSON_Delete(params);
	char *text = ok ? cJSON_PrintUnformatted(f) : NULL;
	cJSON_Delete(f);
	if (!text)
		return PC_ENOMEM;
	int rc = pc_wsc_send(s->ws, PC_WS_TEXT, text, strlen(text));
	cJSON_free(text);
	return rc;
}

static void ws_open(session_t *s, pc_ctx_t *ctx)
{
	pc_wsc_options_t wo = {.host = s->o->host, .port = s->o->port, .path = s->o->path,
			       .open_timeout_ms = (uint32_t)s->o->connect_timeout_ms, .user = (void *)++s->ws_gen};
	if (pc_wsc_open(s->io, &wo, pc_self(ctx), &s->ws) != 0) {
		s->ws = NULL;
		s->t.conn_failed = true;
		finish(s, ctx, "refused");
		return;
	}
	atomic_fetch_add(&s->st->ws_live, 1);
	s->conn = CONN_OPENING;
}

static void ws_send_turn(session_t *s, pc_ctx_t *ctx)
{
	turn_t *t = &s->t;
	char idem[64];
	snprintf(idem, sizeof(idem), "load-%llx-%u-%llu", (unsigned long long)s->st->t0_ns, s->index,
		 (unsigned long long)t->serial);
	char *key = expand(s, s->o->session_key, t->serial - 1);
	char *text = message_for(s, t->serial - 1);
	cJSON *p = cJSON_CreateObject();
	bool ok = key && text && p && cJSON_AddStringToObject(p, "message", text) &&
		  cJSON_AddStringToObject(p, "idempotencyKey", idem) && cJSON_AddStringToObject(p, "sessionKey", key) &&
		  (!s->o->model || cJSON_AddStringToObject(p, "model", s->o->model));
	free(key);
	free(text);
	const char *method = s->o->via_chat ? "chat.send" : "agent";
	if (!ok) {
		cJSON_Delete(p);
		finish(s, ctx, "client");
		return;
	}
	t->sent = true;
	if (ws_request(s, method, p, t->req) != 0) {
		t->conn_failed = true;
		finish(s, ctx, "closed");
	}
}

/* --via wait: agent.wait for the accepted run, as long as the turn may
 * last. */
static void ws_wait(session_t *s, pc_ctx_t *ctx)
{
	cJSON *p = cJSON_CreateObject();
	if (!p || !cJSON_AddStringToObject(p, "runId", s->t.run_id) ||
	    !cJSON_AddNumberToObject(p, "timeoutMs", (double)s->o->timeout_ms)) {
		cJSON_Delete(p);
		finish(s, ctx, "client");
		return;
	}
	if (ws_request(s, "agent.wait", p, s->t.wait_req) != 0) {
		s->t.conn_failed = true;
		finish(s, ctx, "closed");
	}
}

/* The answer to `agent`: the accepted one first, then the final one (with
 * --via wait, agent.wait's answer instead: the final one is not waited
 * for). */
static void ws_answer(session_t *s, pc_ctx_t *ctx, const cJSON *f, bool of_wait)
{
	turn_t *t = &s->t;
	const cJSON *payload = jget(f, "payload");
	bool ok = cJSON_IsTrue(jget(f, "ok"));
	const char *status = jstr(payload, "status");
	if (ok && !of_wait && !t->accepted && (!strcmp(status, s->o->via_chat ? "started" : "accepted"))) {
		t->accepted = pc__clock_mono_ns();
		snprintf(t->run_id, sizeof(t->run_id), "%s", jstr(payload, "runId"));
		if (s->o->via_wait)
			ws_wait(s, ctx);
		return;
	}
	if (s->o->via_wait && !of_wait && ok)
		return;
	if (ok && !strcmp(jstr(payload, "status"), "ok")) {
		finish(s, ctx, NULL);
		return;
	}
	/* the gateway's error code, or the run's status (error, timeout) */
	char code[48];
	const char *e = jstr(jget(f, "error"), "code");
	snprintf(code, sizeof(code), "%s%s", e[0] ? "rpc:" : of_wait ? "wait:" : "run:",
		 e[0] ? e : jstr(payload, "status")[0] ? jstr(payload, "status") : "error");
	finish(s, ctx, code);
}

/* --via chat: a `chat` event of the turn's run; its final states end it. */
static void ws_chat(session_t *s, pc_ctx_t *ctx, const cJSON *p)
{
	const char *state = jstr(p, "state");
	/* the connection carries only its own runs, one at a time: an event
	 * before the answer named the run is this turn's */
	if (s->t.run_id[0] && strcmp(jstr(p, "runId"), s->t.run_id) != 0)
		return;
	if (!strcmp(state, "final")) {
		finish(s, ctx, NULL);
	} else if (!strcmp(state, "error") || !strcmp(state, "aborted")) {
		char code[48];
		const char *kind = jstr(p, "errorKind");
		const char *why = !strcmp(state, "aborted") ? "aborted" : kind[0] ? kind : "error";
		snprintf(code, sizeof(code), "chat:%s", why);
		finish(s, ctx, code);
	}
}

static void ws_frame(session_t *s, pc_ctx_t *ctx, const pc_wsc_message_msg_t *m)
{
	cJSON *f = cJSON_ParseWithLength(m->data, m->len);
	const char *type = jstr(f, "type"), *event = jstr(f, "event");
	if (!strcmp(type, "event") && !strcmp(event, "connect.challenge") && s->conn == CONN_HANDSHAKE) {
		pc_cli_rpc_options_t ro = {.token = s->o->token, .password = s->o->password};
		cJSON *p = pc_cli_rpc_connect_params(&ro);
		if (p && s->o->identity && pc_cli_identity_sign(s->o->identity, p, jget(f, "payload")) != 0) {
			cJSON_Delete(p);
			p = NULL;
		}
		if (!p || ws_request(s, "connect", p, s->connect_id) != 0) {
			s->t.conn_failed = true;
			finish(s, ctx, "handshake");
		}
	} else if (!strcmp(type, "res") && s->conn == CONN_HANDSHAKE && !strcmp(jstr(f, "id"), s->connect_id)) {
		if (cJSON_IsTrue(jget(f, "ok"))) {
			s->conn = CONN_READY;
			if (s->t.serial && !s->t.sent)
				ws_send_turn(s, ctx);
		} else {
			s->t.conn_failed = true;
			finish(s, ctx, "auth");
		}
	} else if (!strcmp(type, "res") && s->t.sent && !strcmp(jstr(f, "id"), s->t.req)) {
		ws_answer(s, ctx, f, false);
	} else if (!strcmp(type, "res") && s->t.wait_req[0] && !strcmp(jstr(f, "id"), s->t.wait_req)) {
		ws_answer(s, ctx, f, true);
	} else if (!strcmp(type, "event") && !strcmp(event, "agent") && s->t.sent) {
		const cJSON *p = jget(f, "payload");
		if (!strcmp(jstr(p, "stream"), "assistant") && jstr(jget(p, "data"), "delta")[0])
			token(s);
		/* docs/gateway.md: a tool's events are start, update(s), result */
		else if (!strcmp(jstr(p, "stream"), "tool") && !strcmp(jstr(jget(p, "data"), "phase"), "start"))
			s->t.tool_calls++;
	} else if (!strcmp(type, "event") && !strcmp(event, "chat") && s->t.sent && s->o->via_chat) {
		ws_chat(s, ctx, jget(f, "payload"));
	}
	cJSON_Delete(f);
}

static void ws_closed(session_t *s, pc_ctx_t *ctx, const pc_wsc_closed_msg_t *m)
{
	conn_t was = s->conn;
	drop_connection(s);
	if (!s->t.serial)
		return; /* idle: the next turn opens a new one */
	s->t.conn_failed = true;
	if (was == CONN_OPENING)
		finish(s, ctx, m->reason == PC_ETIMEDOUT ? "connect_timeout"
			       : m->reason == PC_ESTATE   ? "upgrade"
			       : m->reason == PC_ESYS     ? "refused"
							  : "closed");
	else
		finish(s, ctx, "closed");
}

/* ---- HTTP ---- */

static int sse_event(void *user, const pc_sse_event_t *ev)
{
	session_t *s = user;
	if (ev->kind != PC_SSE_MESSAGE || !strcmp(ev->data, "[DONE]"))
		return 0;
	cJSON *j = cJSON_ParseWithLength(ev->data, ev->data_len);
	const cJSON *choice = cJSON_GetArrayItem(jget(j, "choices"), 0);
	const cJSON *delta = jget(choice, "delta"), *call;
	if (jstr(delta, "content")[0])
		token(s);
	/* a call comes in fragments that share its index: the calls are the
	 * highest index and one */
	cJSON_ArrayForEach(call, jget(delta, "tool_calls")) {
		double i = cJSON_GetNumberValue(jget(call, "index"));
		if (i >= s->t.tool_calls && i < UINT32_MAX)
			s->t.tool_calls = (uint32_t)i + 1;
	}
	cJSON_Delete(j);
	return 0;
}

/* A whole answer's tool calls: choices[0].message.tool_calls. */
static uint32_t whole_tool_calls(const pc__buf_t *body)
{
	cJSON *j = cJSON_ParseWithLength(body->p, body->len);
	const cJSON *choice = cJSON_GetArrayItem(jget(j, "choices"), 0);
	int n = cJSON_GetArraySize(jget(jget(choice, "message"), "tool_calls"));
	cJSON_Delete(j);
	return (uint32_t)n;
}

static char *http_body(const session_t *s)
{
	char *text = message_for(s, s->t.serial - 1);
	cJSON *b = cJSON_CreateObject(), *msgs = b ? cJSON_AddArrayToObject(b, "messages") : NULL;
	cJSON *m = cJSON_CreateObject();
	bool ok = text && msgs && m && cJSON_AddItemToArray(msgs, m);
	if (!ok)
		cJSON_Delete(m);
	ok = ok && cJSON_AddStringToObject(m, "role", "user") && cJSON_AddStringToObject(m, "content", text) &&
	     cJSON_AddStringToObject(b, "model", s->o->model ? s->o->model : "mock") &&
	     cJSON_AddBoolToObject(b, "stream", s->o->stream);
	free(text);
	char *out = ok ? cJSON_PrintUnformatted(b) : NULL;
	cJSON_Delete(b);
	return out;
}

static void http_send_turn(session_t *s, pc_ctx_t *ctx)
{
	turn_t *t = &s->t;
	char auth[300];
	snprintf(auth, sizeof(auth), "Authorization: Bearer %s", s->o->token ? s->o->token : "");
	const char *headers[] = {"Content-Type: application/json", auth};
	char *body = http_body(s);
	if (!body || (s->o->stream && pc_sse_parser_new(NULL, sse_event, s, &t->sse) != 0)) {
		cJSON_free(body);
		finish(s, ctx, "client");
		return;
	}
	size_t nh = s->o->token ? 2 : 1;
	int rc;
	if (s->o->https) {
		pc_http_client_request_t rq = {.url = s->o->url, .headers = headers, .header_count = nh,
					       .body = body, .body_len = strlen(body),
					       .connect_timeout_ms = (uint32_t)s->o->connect_timeout_ms,
					       .tag = t->serial};
		if ((rc = pc_http_fetch(s->io, &rq, pc_self(ctx), &t->call)) != 0)
			t->call = NULL;
	} else {
		pc_h1c_options_t ho = {.url = s->o->url, .connect_timeout_ms = (uint32_t)s->o->connect_timeout_ms};
		pc_h1c_request_t rq = {.headers = headers, .header_count = nh, .body = body, .body_len = strlen(body),
				       .tag = t->serial};
		rc = s->h1 ? 0 : pc_h1c_open(s->io, &ho, pc_self(ctx), &s->h1);
		if (rc == 0)
			rc = pc_h1c_request(s->h1, &rq);
	}
	cJSON_free(body);
	t->sent = true;
	t->http_open = rc == 0;
	if (rc != 0)
		finish(s, ctx, "client");
}

static const char *transport_code(pc_http_transport_t tr)
{
	switch (tr) {
	case PC_HTTP_CONNECT: return "refused";
	case PC_HTTP_CONNECT_TIMEOUT: return "connect_timeout";
	case PC_HTTP_TIMEOUT:
	case PC_HTTP_IDLE: return "timeout";
	case PC_HTTP_CLOSED: return "closed";
	case PC_HTTP_MALFORMED: return "malformed";
	default: return pc_http_transport_name(tr);
	}
}

static void http_message(session_t *s, pc_ctx_t *ctx, pc_msg_t *msg)
{
	turn_t *t = &s->t;
	if (msg->type == PC_MSG_HTTP_RESPONSE_HEAD) {
		const pc_http_head_msg_t *h = pc_msg_cdata(msg);
		if (h->tag == t->serial)
			t->http_status = h->status;
	} else if (msg->type == PC_MSG_HTTP_RESPONSE_DATA) {
		const pc_http_data_msg_t *d = pc_msg_cdata(msg);
		if (d->tag != t->serial)
			return;
		if (t->call)
			pc_http_call_consumed(t->call, d->len);
		else
			pc_h1c_consumed(s->h1, d->len);
		if (t->sse && t->http_status == 200 && pc_sse_feed(t->sse, d->data, d->len) != 0) {
			pc_sse_parser_free(t->sse);
			t->sse = NULL;
		} else if (!s->o->stream && t->http_status == 200 && t->body.len + d->len <= MAX_BODY &&
			   pc__buf_append(&t->body, d->data, d->len) != 0) {
			pc__buf_free(&t->body); /* its tool calls are not counted, the turn is */
		}
	} else {
		const pc_http_end_msg_t *e = pc_msg_cdata(msg);
		if (e->tag != t->serial)
			return;
		t->http_open = false;
		count_h1(s);
		char code[48];
		t->conn_failed = e->transport == PC_HTTP_CONNECT || e->transport == PC_HTTP_CONNECT_TIMEOUT ||
				 e->transport == PC_HTTP_DNS;
		if (e->transport != PC_HTTP_OK || e->result != 0)
			snprintf(code, sizeof(code), "%s", transport_code(e->transport));
		else if (e->status != 200)
			snprintf(code, sizeof(code), "http:%d", (int)e->status);
		else
			code[0] = '\0';
		if (!code[0] && t->body.len)
			t->tool_calls = whole_tool_calls(&t->body);
		finish(s, ctx, code[0] ? code : NULL);
	}
}

/* ---- turns ---- */

/* Starts the queue's next turn when none runs. */
static void start_next(session_t *s, pc_ctx_t *ctx)
{
	if (s->t.serial || !s->q_len)
		return;
	if (atomic_load(&s->st->stopped)) {
		/* the run is over: what waits is in flight at the end */
		keep_queued(s);
		return;
	}
	uint64_t intended = s->queue[s->q_head];
	s->q_head = (s->q_head + 1) % s->q_cap;
	s->q_len--;
	turn_t *t = &s->t;
	t->serial = ++s->serials;
	t->intended = intended;
	t->started = pc__clock_mono_ns();
	t->measured = intended >= s->st->warm_until_ns;
	pc_msg_t *m = pc_msg_new(MSG_DEADLINE, sizeof(uint64_t));
	if (m) {
		*(uint64_t *)pc_msg_data(m) = t->serial;
		if (pc_timer_after(pc_self(ctx), s->o->timeout_ms, m, &t->deadline) != 0)
			t->deadline = 0;
	}
	if (s->o->proto == PC_LOAD_HTTP)
		http_send_turn(s, ctx);
	else if (s->conn == CONN_READY)
		ws_send_turn(s, ctx);
	else if (s->conn == CONN_NONE)
		ws_open(s, ctx);
}

static int enqueue(session_t *s, uint64_t intended)
{
	if (s->q_len == s->q_cap) {
		size_t cap = s->q_cap ? s->q_cap * 2 : 4;
		uint64_t *q = malloc(cap * sizeof(*q));
		if (!q)
			return PC_ENOMEM;
		for (size_t i = 0; i < s->q_len; i++)
			q[i] = s->queue[(s->q_head + i) % s->q_cap];
		free(s->queue);
		s->queue = q;
		s->q_head = 0;
		s->q_cap = cap;
	}
	s->queue[(s->q_head + s->q_len) % s->q_cap] = intended;
	s->q_len++;
	return 0;
}

/* A closed-loop session's next turn, unless the run is over. */
static void closed_turn(session_t *s, uint64_t intended)
{
	if (atomic_load(&s->st->stopped) || enqueue(s, intended) != 0) {
		atomic_fetch_add(&s->st->sessions_done, 1);
		return;
	}
	atomic_fetch_add(&s->st->in_flight, 1);
}

static int receive(pc_ctx_t *ctx, void *state, pc_msg_t *msg)
{
	session_t *s = state;
	switch (msg->type) {
	case PC_LOAD_MSG_START:
		s->closed_loop = true;
		s->retired = false;
		/* one retired but still at its last turn plays on */
		if (s->playing)
			return 0;
		s->playing = true;
		closed_turn(s, pc__clock_mono_ns());
		break;
	case PC_LOAD_MSG_RETIRE:
		s->retired = true;
		return 0;
	case PC_LOAD_MSG_BYE:
		/* a close frame once the upgrade is through (CLOSED follows);
		 * before that the connection just ends */
		if (s->ws && (s->conn == CONN_OPENING || pc_wsc_close(s->ws, 1000, "load run over") != 0))
			drop_connection(s);
		return 0;
	case PC_LOAD_MSG_TURN:
		if (s->closed_loop && s->retired) {
			s->playing = false; /* its pause ended after it retired */
			return 0;
		}
		if (s->closed_loop) {
			closed_turn(s, pc_msg_u64(msg));
		} else if (enqueue(s, pc_msg_u64(msg)) != 0) {
			/* the driver counted it in flight */
			atomic_fetch_sub(&s->st->in_flight, 1);
			pc_load_stats_error(s->st, "client");
		}
		break;
	case MSG_DEADLINE:
		if (s->t.serial && pc_msg_u64(msg) == s->t.serial) {
			s->t.deadline = 0;
			finish(s, ctx, "timeout");
		}
		return 0;
	case PC_MSG_WSC_OPEN:
		if ((uintptr_t)((const pc_wsc_event_msg_t *)pc_msg_cdata(msg))->user == s->ws_gen && s->ws) {
			atomic_fetch_add(&s->st->connections, 1);
			s->conn = CONN_HANDSHAKE;
		}
		return 0;
	case PC_MSG_WSC_MESSAGE: {
		const pc_wsc_message_msg_t *m = pc_msg_cdata(msg);
		if ((uintptr_t)m->user == s->ws_gen && s->ws)
			ws_frame(s, ctx, m);
		return 0;
	}
	case PC_MSG_WSC_CLOSED: {
		const pc_wsc_closed_msg_t *m = pc_msg_cdata(msg);
		if ((uintptr_t)m->user == s->ws_gen && s->ws)
			ws_closed(s, ctx, m);
		return 0;
	}
	case PC_MSG_HTTP_RESPONSE_HEAD:
	case PC_MSG_HTTP_RESPONSE_DATA:
	case PC_MSG_HTTP_RESPONSE_END:
		http_message(s, ctx, msg);
		return 0;
	default:
		return 0;
	}
	start_next(s, ctx);
	return 0;
}

static void stop(pc_ctx_t *ctx, void *state, int reason)
{
	(void)ctx;
	(void)reason;
	session_t *s = state;
	if (s->t.serial)
		keep(s, &s->t, 0, NULL);
	keep_queued(s);
	pc_http_call_release(s->t.call);
	drop_h1(s);
	pc_sse_parser_free(s->t.sse);
	pc__buf_free(&s->t.body);
	free(s->t.gaps);
	drop_connection(s);
	free(s->queue);
	free(s);
}

static const pc_behavior_t session_b = {.name = "load-session", .receive = receive, .stop = stop};

int pc_load_session_spawn(pc_runtime_t *rt, pc_io_t *io, const pc_load_opts_t *o, pc_load_stats_t *st,
			  uint32_t index, pc_actor_t **out)
{
	session_t *s = calloc(1, sizeof(*s));
	if (!s)
		return PC_ENOMEM;
	*s = (session_t){.o = o, .st = st, .io = io, .index = index};
	int rc = pc_spawn(rt, &session_b, s, out);
	if (rc != 0)
		free(s);
	return rc;
}
