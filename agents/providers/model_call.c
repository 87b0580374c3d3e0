/*
 * The provider stream actor (model_call.h). Bytes arrive from the I/O
 * thread as HEAD / DATA / END messages; a 2xx body goes through the SSE
 * parser into the API's decoder, anything else is kept (bounded) as the
 * error body, read by the wire format (wire.h) and the classifier. Each DATA chunk is reported consumed as
 * soon as it is parsed, so the transfer pauses only if this actor falls
 * behind.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "io/io.h"
#include "agents/obs/obs.h"
#include "model_call.h"
#include "model_call_lifecycle.h"
#include "wire.h"
#include "runtime/clock.h"

#define ERROR_BODY_CAP (64u * 1024u)

enum {
	MSG_START = PC_MSG_TYPE_SYSTEM + 0x2010,
	MSG_ABORT,
};

typedef struct model_call {
	pc_io_t *io;
	pc_actor_t *owner;
	const pc_provider_wire_t *wire;
	pc_model_call_config_t cfg; /* strings point into `strings`, but body */
	char *strings;
	char *body; /* handed to the HTTP call at start (it takes it over) */
	const char **headers;

	pc_http_call_t *call;
	pc_sse_parser_t *sse;
	pc_stream_decoder_t *dec;
	int decode_error;

	int status;
	char retry_after[64];
	char retry_after_ms[32];
	char *err_body;
	size_t err_len;

	pc_mc_lc_t state; /* changed only by mc_set (model_call_lifecycle.h) */
	uint64_t t0_ns;
	uint64_t ttft_us;
} model_call_t;

/* ---- the call's state (model_call_lifecycle.h) ------------------------------ */

/* The one place the call's state changes. A transition the table does not
 * allow is refused (the state stays), counted and logged; an allowed one
 * is traced when the owner asked. */
static void mc_set(model_call_t *mc, pc_mc_lc_t to, const char *why)
{
	pc_mc_lc_t from = mc->state;
	if (!pc_mc_lc_legal(from, to)) {
		(void)pc_metric_inc(mc->cfg.illegal);
		(void)pc_log_kv(mc->cfg.log, PC_LOG_WARN, "illegal model_call transition",
				PC_LF_STR("call", mc->cfg.trace_id), PC_LF_STR("from", pc_mc_lc_name(from)),
				PC_LF_STR("to", pc_mc_lc_name(to)), PC_LF_STR("why", why));
		return;
	}
	mc->state = to;
	if (mc->cfg.trace)
		pc_trace_transition(mc->cfg.log, "model_call", mc->cfg.trace_id, pc_mc_lc_name(from), pc_mc_lc_name(to),
				    why);
}

/* Whether the owner aborted the call. */
static bool aborting(const model_call_t *mc) { return mc->state == PC_MC_LC_ABORTING; }

/* ---- deltas to the owner -------------------------------------------------- */

static int on_stream_event(void *user, const pc_stream_event_t *ev)
{
	model_call_t *mc = user;
	/* the owner records it, by provider and model (pc__metrics_model) */
	if (!mc->ttft_us && (ev->kind == PC_STREAM_TEXT_DELTA || ev->kind == PC_STREAM_THINKING_DELTA ||
			     ev->kind == PC_STREAM_TOOL_CALL_START))
		mc->ttft_us = (pc__clock_mono_ns() - mc->t0_ns) / 1000u;
	if (!mc->cfg.deltas)
		return 0;
	size_t tl = ev->text ? ev->text_len : 0;
	size_t il = ev->id ? strlen(ev->id) : 0;
	size_t nl = ev->name ? strlen(ev->name) : 0;
	pc_msg_t *m = pc_msg_new(PC_MSG_MODEL_EVENT, sizeof(pc_model_event_msg_t) + tl + il + nl + 3);
	if (!m)
		return PC_ENOMEM;
	pc_model_event_msg_t *e = pc_msg_data(m);
	memset(e, 0, sizeof(*e));
	e->tag = mc->cfg.tag;
	e->kind = ev->kind;
	e->block = (uint32_t)ev->block;
	e->tool_index = ev->tool_index;
	e->stop_reason = ev->stop_reason;
	if (ev->usage)
		e->usage = *ev->usage;
	char *p = e->buf;
	e->text = p;
	e->text_len = tl;
	if (tl)
		memcpy(p, ev->text, tl);
	p[tl] = '\0';
	p += tl + 1;
	e->id = p;
	if (il)
		memcpy(p, ev->id, il);
	p[il] = '\0';
	p += il + 1;
	e->name = p;
	if (nl)
		memcpy(p, ev->name, nl);
	p[nl] = '\0';
	pc_send(mc->owner, m);
	return 0;
}

static int on_sse_event(void *user, const pc_sse_event_t *ev)
{
	model_call_t *mc = user;
	return pc_stream_decoder_feed_sse(mc->dec, ev);
}

/* ---- the outcome ------------------------------------------------------------ */

static pc_transport_error_t transport_of(const pc_http_end_msg_t *end, bool aborted)
{
	switch (end->transport) {
	case PC_HTTP_OK:
		return PC_TRANSPORT_NONE;
	case PC_HTTP_DNS:
		return PC_TRANSPORT_DNS;
	case PC_HTTP_CONNECT:
		return PC_TRANSPORT_CONNECT;
	case PC_HTTP_CONNECT_TIMEOUT:
		return PC_TRANSPORT_CONNECT_TIMEOUT;
	case PC_HTTP_TIMEOUT:
		return PC_TRANSPORT_TIMEOUT;
	case PC_HTTP_IDLE:
		return PC_TRANSPORT_IDLE_TIMEOUT;
	case PC_HTTP_TLS:
		return PC_TRANSPORT_TLS;
	case PC_HTTP_CLOSED:
		return PC_TRANSPORT_RESET;
	case PC_HTTP_MALFORMED:
		return PC_TRANSPORT_MALFORMED;
	case PC_HTTP_CANCELLED:
		/* A cancel we did not ask for is the I/O layer stopping: not
		 * the user's doing, so it stays eligible for a retry. */
		return aborted ? PC_TRANSPORT_ABORTED : PC_TRANSPORT_TIMEOUT;
	default:
		return PC_TRANSPORT_RESET;
	}
}

typedef struct outcome {
	int result;
	pc_transport_error_t transport;
	const char *error;
	char *owned_error; /* when `error` was built for this call */
	char *json;
	size_t json_len;
	pc_stop_reason_t stop_reason;
	pc_usage_t usage;
	pc_failover_result_t failure;
} outcome_t;

static void classify(model_call_t *mc, outcome_t *o, const char *body, size_t body_len)
{
	pc_failover_input_t in = {
		.status = mc->status >= 300 ? mc->status : 0,
		.retry_after = mc->retry_after[0] ? mc->retry_after : NULL,
		.retry_after_ms = mc->retry_after_ms[0] ? mc->retry_after_ms : NULL,
		.body = body,
		.body_len = body_len,
		.transport = o->transport,
		.provider = mc->cfg.provider,
		.now_ms = pc__clock_wall_ms(),
	};
	if (pc_failover_classify(&in, &o->failure) != 0)
		o->failure = (pc_failover_result_t){.detail = "classifier failed"};
}

/*
 * The error text of an error status (pc_provider_error_text, from what the
 * wire format reads in the body): the run's rules read this text
 * (short-window rate limits, thinking fallback, role ordering) and it
 * becomes the run's error message, so secrets are masked. NULL when out
 * of memory.
 */
static char *status_error_text(const model_call_t *mc)
{
	pc_provider_error_t e;
	mc->wire->parse_error(mc->status, mc->err_body, mc->err_len, &e);
	char text[4 * PC_PROVIDER_ERROR_MAX];
	pc_provider_error_text(mc->status, &e, text, sizeof(text));
	return pc_redact(text);
}

static void decide(model_call_t *mc, const pc_http_end_msg_t *end, outcome_t *o)
{
	o->transport = transport_of(end, aborting(mc));
	pc_stream_result_t r;
	bool have = false;
	if (mc->dec && mc->status >= 200 && mc->status < 300) {
		if (mc->sse && pc_sse_finish(mc->sse) != 0 && !mc->decode_error)
			mc->decode_error = PC_EINVAL;
		if (pc_stream_decoder_finish(mc->dec, &r) == 0) {
			have = true;
			o->stop_reason = r.stop_reason;
			o->usage = r.usage;
			cJSON *j = NULL;
			if (r.nblocks && pc_stream_result_to_json(&r, &j) == 0) {
				o->json = pc_json_print(j);
				o->json_len = o->json ? strlen(o->json) : 0;
				cJSON_Delete(j);
			}
		}
	}
	if (aborting(mc)) {
		o->result = PC_ESTOPPED;
		o->transport = PC_TRANSPORT_ABORTED;
		o->error = "aborted";
		classify(mc, o, NULL, 0);
		return;
	}
	if (o->transport != PC_TRANSPORT_NONE) {
		o->result = end->result ? end->result : PC_ESYS;
		o->error = end->error[0] ? end->error : pc_transport_error_name(o->transport);
		classify(mc, o, mc->err_body, mc->err_len);
		return;
	}
	if (mc->status < 200 || mc->status >= 300) {
		o->result = PC_ESYS;
		o->owned_error = status_error_text(mc);
		o->error = o->owned_error ? o->owned_error : "the provider answered with an error status";
		classify(mc, o, mc->err_body, mc->err_len);
		return;
	}
	if (mc->decode_error || (have && r.decode_error)) {
		o->result = PC_EINVAL;
		o->transport = PC_TRANSPORT_MALFORMED;
		o->error = have && r.error_message ? r.error_message : "malformed stream";
		classify(mc, o, NULL, 0);
		return;
	}
	if (!have) {
		o->result = PC_ENOMEM;
		o->error = "could not assemble the answer";
		classify(mc, o, NULL, 0);
		return;
	}
	if (r.error_message || r.stop_reason == PC_STOP_ERROR) {
		o->result = PC_ESYS;
		/* the provider's words, secrets masked: they become the run's error */
		o->owned_error = r.error_message ? pc_redact(r.error_message) : NULL;
		o->error = o->owned_error ? o->owned_error : "the provider reported an error";
		if (!r.complete)
			o->transport = PC_TRANSPORT_MALFORMED; /* cut short: no terminator */
		const char *b = r.error_body ? r.error_body : o->error;
		classify(mc, o, b, strlen(b));
		return;
	}
	o->result = 0;
	o->error = "";
}

static void send_done(model_call_t *mc, const pc_http_end_msg_t *end)
{
	outcome_t o = {0};
	decide(mc, end, &o);
	bool aborted = aborting(mc);
	if (aborted)
		mc_set(mc, PC_MC_LC_ABORTED, "transfer ended");
	else if (o.result == 0)
		mc_set(mc, PC_MC_LC_DONE, "answer");
	else
		mc_set(mc, PC_MC_LC_FAILED, o.transport != PC_TRANSPORT_NONE ? pc_transport_error_name(o.transport)
					    : mc->status < 200 || mc->status >= 300 ? "error status"
										    : "stream error");
	size_t el = strlen(o.error);
	/* an error status: what the provider said, for the run's end */
	pc_provider_error_t pe = {.message = ""};
	if (mc->status >= 400 && o.result != 0)
		mc->wire->parse_error(mc->status, mc->err_body, mc->err_len, &pe);
	const char *pm = pe.message;
	size_t pl = strlen(pm);
	pc_msg_t *m = pc_msg_new(PC_MSG_MODEL_DONE, sizeof(pc_model_done_msg_t) + o.json_len + el + pl + 3);
	if (m) {
		pc_model_done_msg_t *d = pc_msg_data(m);
		memset(d, 0, sizeof(*d));
		d->tag = mc->cfg.tag;
		d->result = o.result;
		d->http_status = mc->status;
		d->failure = o.failure;
		d->transport = o.transport;
		d->stop_reason = o.stop_reason;
		d->usage = o.usage;
		d->aborted = aborted;
		d->bytes = end ? end->bytes : 0;
		d->ttft_us = mc->ttft_us;
		d->duration_us = (pc__clock_mono_ns() - mc->t0_ns) / 1000u;
		char *p = d->buf;
		if (o.json) {
			memcpy(p, o.json, o.json_len);
			p[o.json_len] = '\0';
			d->message = p;
			d->message_len = o.json_len;
			p += o.json_len + 1;
		}
		memcpy(p, o.error, el + 1);
		d->error = p;
		p += el + 1;
		if (pl) {
			memcpy(p, pm, pl + 1);
			d->provider_message = p;
		}
		pc_send(mc->owner, m);
	}
	cJSON_free(o.json);
	free(o.owned_error);
}

/* ---- the actor ------------------------------------------------------------------- */

static int start(pc_ctx_t *ctx, model_call_t *mc)
{
	mc->t0_ns = pc__clock_mono_ns();
	if (aborting(mc)) { /* the abort overtook the start */
		pc_http_end_msg_t end = {.transport = PC_HTTP_CANCELLED, .result = PC_ESTOPPED};
		send_done(mc, &end);
		pc_exit(ctx, PC_EXIT_NORMAL);
		return 0;
	}
	int rc = pc_stream_decoder_new(mc->cfg.api, on_stream_event, mc, &mc->dec);
	if (rc == 0)
		rc = pc_sse_parser_new(NULL, on_sse_event, mc, &mc->sse);
	if (rc == 0) {
		pc_http_client_request_t req = {
			.method = "POST",
			.url = mc->cfg.url,
			.headers = mc->headers,
			.header_count = mc->cfg.header_count,
			.body = mc->body,
			.body_len = mc->cfg.body_len,
			.take_body = true,
			.connect_timeout_ms = mc->cfg.connect_timeout_ms,
			.total_timeout_ms = mc->cfg.total_timeout_ms,
			.idle_timeout_ms = mc->cfg.idle_timeout_ms,
			.tag = mc->cfg.tag,
			.http2_prior_knowledge = mc->cfg.http2_prior_knowledge,
		};
		mc->body = NULL;
		rc = pc_http_fetch(mc->io, &req, pc_self(ctx), &mc->call);
		if (rc == 0)
			mc_set(mc, PC_MC_LC_REQUESTING, "sent");
	}
	if (rc != 0) {
		pc_http_end_msg_t end = {.transport = PC_HTTP_OTHER, .result = rc};
		snprintf(end.error, sizeof(end.error), "could not start the request: %s", pc_strerror(rc));
		send_done(mc, &end);
		pc_exit(ctx, PC_EXIT_NORMAL);
	}
	return 0;
}

static void on_head(model_call_t *mc, const pc_http_head_msg_t *h)
{
	mc->status = h->status;
	if (mc->state == PC_MC_LC_REQUESTING)
		mc_set(mc, h->status >= 200 && h->status < 300 ? PC_MC_LC_STREAMING : PC_MC_LC_ERROR_BODY, "head");
	pc_http_head_get(h, "retry-after", mc->retry_after, sizeof(mc->retry_after));
	pc_http_head_get(h, "retry-after-ms", mc->retry_after_ms, sizeof(mc->retry_after_ms));
}

static void on_data(model_call_t *mc, const pc_http_data_msg_t *d)
{
	if (mc->status >= 200 && mc->status < 300) {
		if (!mc->decode_error && !aborting(mc)) {
			int rc = pc_sse_feed(mc->sse, d->data, d->len);
			if (rc != 0) {
				/* Nothing later in this stream can be trusted. */
				mc->decode_error = rc;
				pc_http_call_cancel(mc->call);
			}
		}
	} else if (mc->err_len < ERROR_BODY_CAP) {
		size_t n = d->len < ERROR_BODY_CAP - mc->err_len ? d->len : ERROR_BODY_CAP - mc->err_len;
		if (!mc->err_body)
			mc->err_body = malloc(ERROR_BODY_CAP + 1);
		if (mc->err_body) {
			memcpy(mc->err_body + mc->err_len, d->data, n);
			mc->err_len += n;
			mc->err_body[mc->err_len] = '\0';
		}
	}
	pc_http_call_consumed(mc->call, d->len);
}

static int receive(pc_ctx_t *ctx, void *state, pc_msg_t *msg)
{
	model_call_t *mc = state;
	switch (msg->type) {
	case MSG_START:
		return start(ctx, mc);
	case PC_MSG_HTTP_RESPONSE_HEAD:
		on_head(mc, pc_msg_cdata(msg));
		break;
	case PC_MSG_HTTP_RESPONSE_DATA:
		on_data(mc, pc_msg_cdata(msg));
		break;
	case PC_MSG_HTTP_RESPONSE_END: {
		pc_http_end_msg_t end = *(const pc_http_end_msg_t *)pc_msg_cdata(msg);
		if (mc->decode_error && end.transport == PC_HTTP_CANCELLED)
			end.transport = PC_HTTP_OK; /* we cancelled it: the decoder says why */
		send_done(mc, &end);
		pc_exit(ctx, PC_EXIT_NORMAL);
		break;
	}
	case MSG_ABORT:
		if (!aborting(mc) && !pc_mc_lc_terminal(mc->state)) {
			mc_set(mc, PC_MC_LC_ABORTING, "abort");
			if (mc->dec)
				pc_stream_decoder_abort(mc->dec);
			/* END (cancelled) follows and carries the DONE. */
			pc_http_call_cancel(mc->call);
		}
		break;
	default:
		break;
	}
	return 0;
}

static void model_call_free(model_call_t *mc)
{
	pc_http_call_release(mc->call); /* cancels a transfer still running */
	pc_sse_parser_free(mc->sse);
	pc_stream_decoder_free(mc->dec);
	pc_actor_release(mc->owner);
	free(mc->err_body);
	free(mc->headers);
	free(mc->strings);
	free(mc->body);
	free(mc);
}

static void stop(pc_ctx_t *ctx, void *state, int reason)
{
	(void)ctx;
	(void)reason;
	model_call_free(state);
}

static const pc_behavior_t model_call_behavior = {
	.name = "model_call",
	.receive = receive,
	.stop = stop,
};

/* Copies the configuration's strings into one block the actor owns, and
 * the body apart, so that it can be handed to the HTTP call uncopied. */
static int copy_config(model_call_t *mc, const pc_model_call_config_t *cfg)
{
	size_t ul = strlen(cfg->url) + 1;
	size_t pl = cfg->provider ? strlen(cfg->provider) + 1 : 0;
	size_t il = cfg->trace_id ? strlen(cfg->trace_id) + 1 : 0;
	size_t total = ul + pl + il;
	for (size_t i = 0; i < cfg->header_count; i++)
		total += strlen(cfg->headers[i]) + 1;
	mc->strings = malloc(total);
	mc->headers = calloc(cfg->header_count + 1, sizeof(*mc->headers));
	mc->body = cfg->body_len ? malloc(cfg->body_len) : NULL;
	if (!mc->strings || !mc->headers || (cfg->body_len && !mc->body))
		return PC_ENOMEM;
	mc->cfg = *cfg;
	char *p = mc->strings;
	memcpy(p, cfg->url, ul);
	mc->cfg.url = p;
	p += ul;
	if (pl) {
		memcpy(p, cfg->provider, pl);
		mc->cfg.provider = p;
		p += pl;
	}
	if (il) {
		memcpy(p, cfg->trace_id, il);
		mc->cfg.trace_id = p;
		p += il;
	}
	if (cfg->body_len)
		memcpy(mc->body, cfg->body, cfg->body_len);
	mc->cfg.body = NULL; /* only mc->body holds it, until the start */
	for (size_t i = 0; i < cfg->header_count; i++) {
		size_t hl = strlen(cfg->headers[i]) + 1;
		memcpy(p, cfg->headers[i], hl);
		mc->headers[i] = p;
		p += hl;
	}
	mc->cfg.headers = mc->headers;
	return 0;
}

int pc_model_call_start(pc_io_t *io, const pc_model_call_config_t *cfg, pc_actor_t *owner,
			pc_actor_t **out)
{
	if (!io || !cfg || !cfg->url || !owner || (cfg->body_len && !cfg->body) ||
	    (cfg->header_count && !cfg->headers))
		return PC_EINVAL;
	const pc_provider_wire_t *wire = pc_provider_wire(cfg->api);
	if (!wire)
		return PC_EINVAL;
	model_call_t *mc = calloc(1, sizeof(*mc));
	if (!mc)
		return PC_ENOMEM;
	mc->io = io;
	mc->wire = wire;
	mc->owner = pc_actor_retain(owner);
	int rc = copy_config(mc, cfg);
	/* the actor owns mc once spawned; START is its first message */
	if (rc == 0)
		rc = pc_spawn_start(pc_io_runtime(io), &model_call_behavior, mc, MSG_START, out);
	if (rc != 0)
		model_call_free(mc);
	return rc;
}

int pc_model_call_abort(pc_actor_t *call)
{
	return call ? pc_send_signal(call, MSG_ABORT) : PC_EINVAL;
}
