/*
 * A completion of the OpenAI-compatible endpoint (openai.c makes one per
 * chat request): it subscribes to the session, submits the message
 * through the agent API and answers from the run's events, as SSE chunks
 * or one chat.completion; a repeated Idempotency-Key whose run only the
 * store still holds is answered from the store.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "agents/obs/obs.h"
#include "agents/providers/providers.h"
#include "io/io.h"
#include "openai_internal.h"
#include "runtime/clock.h"

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
	pc__oa_answer_error(c->oa, PC__GW_OA_CHAT, c->id, c->req.request_id, e);
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
	pc__oa_fail(e, http, NULL, NULL, "%s", clean ? clean : "The run failed.");
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
		pc__oa_fail(&e, 500, NULL, NULL, "out of memory");
	if (!text) {
		pc__oa_answer_error(c->oa, PC__GW_OA_CHAT, c->id, c->req.request_id, &e);
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
	pc__oa_answer_json(c->oa, PC__GW_OA_CHAT, c->id, c->req.request_id, 200, NULL, o);
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
		cJSON *err = pc__oa_error_json(&e);
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
	pc__oa_count_answer(c->oa, PC__GW_OA_CHAT, 200);
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
		pc__oa_fail(e, 503, NULL, "unavailable", "The agent is shutting down.");
		e->retry_after_ms = pc__gw_retry_after_ms(g);
	} else if (rc == PC_EEXIST) {
		/* the store's verdict on a key it saw with another request */
		pc__oa_fail(e, 422, NULL, "idempotency_key_reused",
		     "This Idempotency-Key was already used with different parameters; use a new key for a "
		     "new request.");
		e->no_retry = true;
	} else if (rc == PC_EINVAL)
		pc__oa_fail(e, 400, NULL, "invalid_request", "The message was refused: %s.", pc_strerror(rc));
	else if (rc >= PC_ERANGE_STORE_FIRST && rc <= PC_ERANGE_STORE_LAST)
		pc__oa_fail(e, 500, NULL, "not_accepted", "The message could not be stored: %s.", pc_store_strerror(rc));
	else
		pc__oa_fail(e, 500, NULL, "not_accepted", "The message was not accepted: %s.", pc_strerror(rc));
}

/* ---- a repeat whose run only the store still holds ---- */

static void store_failed(pc_ctx_t *ctx, completion_t *c, int rc)
{
	oa_err_t e;
	pc__oa_fail(&e, 500, NULL, "not_accepted", "The first run of this Idempotency-Key cannot be read: %s.",
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
	pc__oa_content_text(cJSON_GetObjectItemCaseSensitive(last, "content"), &text);
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
		c->created = r.started_ms > 0 ? r.started_ms / 1000 : pc__clock_wall_ms() / 1000;
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
		pc__oa_fail(&e, 500, NULL, "not_accepted", "The first run of this Idempotency-Key cannot be followed: %s.",
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
		pc__oa_fail(&e, 429, NULL, "rate_limit_exceeded", "The session's queue is full; try again later.");
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
		c->created = pc__clock_wall_ms() / 1000;
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
	pc__oa_chat_req_free(&c->req);
	pc_event_release(c->call);
	pc__buf_free(&c->before);
	free(c);
	/* the last touch of this part's memory: pc__gw_openai_free waits for it */
	__atomic_sub_fetch(&oa->live, 1, __ATOMIC_ACQ_REL);
}

const pc_behavior_t pc__oa_completion_behavior = {"gw_completion", comp_receive, comp_stop};
