/*
 * A chat request whose session another node of the cluster runs
 * (docs/cluster.md, *Forwarding*): sent on to that node as it came, and
 * its answer, plain or streamed, relayed to the client as it arrives.
 *
 * The request keeps the client's own credentials (checked here already,
 * and by the other node again, which shares the configuration) and is
 * marked X-Pincer-Forwarded, so the other node serves it itself, never
 * sending it on: one hop at most, as on the WebSocket links. The mark
 * needs no secret: all it can do is make a node serve a request itself,
 * which any request for one of its own sessions does anyway, and the
 * session's lease decides where it runs.
 *
 * A proxy actor per request, tracked by the route like a completion (so a
 * client that leaves cancels the transfer) and counted in oa->live (so
 * the part's free waits for it). When the other node cannot be reached
 * the client gets a 503 with Retry-After: nothing was sent, and the next
 * try goes to whichever node the session prefers by then.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "openai_internal.h"

#define FORWARDED_HEADER "x-pincer-forwarded"
#define HEADER_LINE_MAX 1024 /* a longer header is not sent on */
#define HEADERS_MAX 10

typedef struct proxy {
	struct pc__gw_openai *oa;
	pc_gateway_t *g;
	pc_actor_t *route; /* a reference: told when this proxy ends */
	uint64_t id;       /* the client's request */
	pc_http_call_t *call;
	bool started;      /* the answer's head went to the client */
	bool sse;          /* ... and it is an event stream */
	/* the request, until the actor sends it */
	char url[320];
	char lines[HEADERS_MAX][HEADER_LINE_MAX];
	size_t nlines;
	char *body;
	size_t body_len;
	char rid[PC__GW_REQUEST_ID_MAX + 1];
	char node[PC_CLUSTER_NAME_MAX + 1];
} proxy_t;

/* The answer's head as the other node sent it, less what belongs to the
 * connection (the server sets its own framing). */
static void relay_head(proxy_t *p, const pc_http_head_msg_t *h)
{
	static const char *const hop[] = {"connection", "keep-alive", "transfer-encoding", "content-length", "date"};
	char *out = malloc((size_t)h->headers_len * 2 + 1);
	size_t n = 0;
	for (const char *line = h->headers; out && *line;) {
		size_t len = strcspn(line, "\r\n");
		const char *colon = memchr(line, ':', len);
		bool keep = colon != NULL;
		for (size_t i = 0; keep && i < sizeof(hop) / sizeof(hop[0]); i++)
			keep = !((size_t)(colon - line) == strlen(hop[i]) && !strncasecmp(line, hop[i], strlen(hop[i])));
		if (keep) {
			memcpy(out + n, line, len);
			n += len;
			out[n++] = '\r';
			out[n++] = '\n';
		}
		line += len;
		line += strspn(line, "\r\n");
	}
	if (out)
		out[n] = '\0';
	pc__oa_count_answer(p->oa, PC__GW_OA_CHAT, h->status);
	p->started = pc_http_respond_start(p->g->srv, p->id, h->status, out ? out : "") == 0;
	p->sse = out && strcasestr(out, "content-type: text/event-stream") != NULL;
	free(out);
}

/* The other node went away in the middle of a streamed answer: the client
 * reads that as an error event and [DONE], as from a run that failed
 * here, rather than a stream that merely stops. Whether the run goes on
 * (it was accepted, so it runs on whichever node takes the session over)
 * the client learns by sending the request again with its Idempotency-Key. */
static void cut_off(proxy_t *p, const pc_http_end_msg_t *end)
{
	oa_err_t e;
	pc__oa_fail(&e, 503, NULL, "unavailable",
		    "The cluster node that runs this session (%s) went away before the answer ended: %s. Send the "
		    "request again with its Idempotency-Key to follow the run.",
		    p->node, end->error[0] ? end->error : pc_http_transport_name(end->transport));
	cJSON *err = pc__oa_error_json(&e);
	char *text = err ? cJSON_PrintUnformatted(err) : NULL;
	cJSON_Delete(err);
	pc__buf_t b = {0};
	/* "\n\n" first: the event the node was sending may have been cut */
	pc__buf_append_str(&b, "\n\ndata: ");
	pc__buf_append_str(&b, text ? text : "{}");
	pc__buf_append_str(&b, "\n\ndata: [DONE]\n\n");
	cJSON_free(text);
	if (!b.err)
		(void)pc_http_respond_write(p->g->srv, p->id, b.p, b.len);
	pc__buf_free(&b);
}

static void unreachable(proxy_t *p, const pc_http_end_msg_t *end)
{
	oa_err_t e;
	pc__oa_fail(&e, 503, NULL, "unavailable",
		    "The cluster node that runs this session (%s) could not be reached: %s. Try again.", p->node,
		    end->error[0] ? end->error : pc_http_transport_name(end->transport));
	e.retry_after_ms = 1000;
	pc__oa_answer_error(p->oa, PC__GW_OA_CHAT, p->id, p->rid, &e);
}

/* Sends the request on, from the actor itself: what the transfer reports
 * comes here, and p->call is set before any of it. */
static void send_on(pc_ctx_t *ctx, proxy_t *p)
{
	const char *hdrs[HEADERS_MAX];
	for (size_t i = 0; i < p->nlines; i++)
		hdrs[i] = p->lines[i];
	pc_http_client_request_t req = {
		.url = p->url,
		.headers = hdrs,
		.header_count = p->nlines,
		.body = p->body,
		.body_len = p->body_len,
		.take_body = true,
		.connect_timeout_ms = 5000,
		.tag = p->id,
	};
	p->body = NULL; /* the call's, also when it fails */
	int rc = pc_http_fetch(p->g->io, &req, pc_self(ctx), &p->call);
	if (rc != 0) {
		pc_http_end_msg_t end = {.transport = PC_HTTP_OTHER};
		snprintf(end.error, sizeof(end.error), "%s", pc_strerror(rc));
		unreachable(p, &end);
		pc_exit(ctx, PC_EXIT_NORMAL);
		return;
	}
	pc__gw_cluster_count_forward(p->g, false);
}

static int proxy_receive(pc_ctx_t *ctx, void *state, pc_msg_t *msg)
{
	proxy_t *p = state;
	switch (msg->type) {
	case MSG_START:
		send_on(ctx, p);
		break;
	case PC_MSG_HTTP_RESPONSE_HEAD:
		relay_head(p, pc_msg_cdata(msg));
		break;
	case PC_MSG_HTTP_RESPONSE_DATA: {
		const pc_http_data_msg_t *d = pc_msg_cdata(msg);
		if (p->started)
			(void)pc_http_respond_write(p->g->srv, p->id, d->data, d->len);
		pc_http_call_consumed(p->call, d->len);
		break;
	}
	case PC_MSG_HTTP_RESPONSE_END: {
		const pc_http_end_msg_t *end = pc_msg_cdata(msg);
		bool cut = p->started && end->transport != PC_HTTP_OK && end->transport != PC_HTTP_CANCELLED;
		if (cut && p->sse)
			cut_off(p, end);
		if (p->started)
			(void)pc_http_respond_end(p->g->srv, p->id);
		else if (end->transport != PC_HTTP_CANCELLED)
			unreachable(p, end);
		if (cut)
			pc__gw_cluster_count_forward(p->g, true);
		pc_exit(ctx, PC_EXIT_NORMAL);
		break;
	}
	case MSG_GONE:
		__atomic_add_fetch(&p->oa->gone, 1, __ATOMIC_RELAXED);
		if (p->call)
			pc_http_call_cancel(p->call); /* END follows */
		else
			pc_exit(ctx, PC_EXIT_NORMAL);
		break;
	default:
		break;
	}
	return 0;
}

static void proxy_stop(pc_ctx_t *ctx, void *state, int reason)
{
	(void)ctx;
	(void)reason;
	proxy_t *p = state;
	struct pc__gw_openai *oa = p->oa;
	pc_http_call_release(p->call);
	free(p->body);
	(void)pc_send_u64(p->route, MSG_DONE, p->id);
	pc_actor_release(p->route);
	free(p);
	__atomic_sub_fetch(&oa->live, 1, __ATOMIC_ACQ_REL); /* the last touch */
}

static const pc_behavior_t proxy_behavior = {"gw_openai_forward", proxy_receive, proxy_stop};

/* The request's headers that say what it asks, each "Name: value". */
static void request_headers(proxy_t *p, const pc_http_request_msg_t *q, const char *node)
{
	static const char *const pass[] = {"authorization",       "content-type",           "idempotency-key",
					   "x-pincer-session-key", "x-openclaw-session-key", "x-pincer-agent-id",
					   "x-openclaw-agent-id"};
	size_t n = 0;
	for (size_t i = 0; i < sizeof(pass) / sizeof(pass[0]); i++) {
		const char *v = pc_http_request_header(q, pass[i]);
		if (v && snprintf(p->lines[n], HEADER_LINE_MAX, "%s: %s", pass[i], v) < HEADER_LINE_MAX)
			n++;
	}
	snprintf(p->lines[n++], HEADER_LINE_MAX, "x-request-id: %s", p->rid);
	snprintf(p->lines[n++], HEADER_LINE_MAX, FORWARDED_HEADER ": %.200s", node);
	p->nlines = n;
}

int pc__oa_forward(pc_ctx_t *ctx, struct pc__gw_openai *oa, pc_http_handoffs_t *h, const pc_http_request_msg_t *q,
		   const chat_req_t *cr, oa_err_t *e)
{
	pc_gateway_t *g = oa->g;
	pc__gw_peer_t peer;
	if (pc_http_request_header(q, FORWARDED_HEADER) || pc__gw_cluster_route(g, cr->session_key, &peer) != 0)
		return PC_ENOTFOUND;
	proxy_t *p = calloc(1, sizeof(*p));
	char *body = malloc(q->body_len ? q->body_len : 1);
	if (!p || !body) {
		free(p);
		free(body);
		pc__oa_fail(e, 500, NULL, NULL, "out of memory");
		return PC_ENOMEM;
	}
	memcpy(body, q->body, q->body_len);
	p->oa = oa;
	p->g = g;
	p->id = q->id;
	p->body = body;
	p->body_len = q->body_len;
	p->route = pc_actor_retain(pc_self(ctx));
	snprintf(p->rid, sizeof(p->rid), "%s", cr->request_id);
	snprintf(p->node, sizeof(p->node), "%s", peer.id);
	bool v6 = strchr(peer.host, ':') != NULL;
	snprintf(p->url, sizeof(p->url), "http://%s%s%s:%u/v1/chat/completions", v6 ? "[" : "", peer.host,
		 v6 ? "]" : "", peer.port);
	request_headers(p, q, pc__gw_cluster_node_id(g));
	pc_actor_t *a = NULL;
	__atomic_add_fetch(&oa->live, 1, __ATOMIC_ACQ_REL);
	int rc = pc_spawn(pc_ctx_runtime(ctx), &proxy_behavior, p, &a);
	if (rc != 0) {
		__atomic_sub_fetch(&oa->live, 1, __ATOMIC_ACQ_REL);
		pc_actor_release(p->route);
		free(p->body);
		free(p);
		pc__oa_fail(e, 503, NULL, "unavailable", "The request could not be started: %s.", pc_strerror(rc));
		e->retry_after_ms = 1000;
		return rc;
	}
	/* tracked before it starts: nobody but this route knows it yet */
	rc = pc_http_handoff_add(h, q->id, a);
	if (rc == 0)
		rc = pc_send_u64(a, MSG_START, 0);
	if (rc != 0) {
		pc_http_handoff_done(h, q->id);
		(void)pc_actor_stop(a, PC_EXIT_SHUTDOWN); /* its stop handler frees it */
		pc__oa_fail(e, 503, NULL, "unavailable", "The request could not be sent on: %s.", pc_strerror(rc));
		e->retry_after_ms = 1000;
	}
	pc_actor_release(a);
	return rc;
}
