/*
 * Forwarding a client's requests to the node that runs their session
 * (docs/cluster.md, *Forwarding*). On a node of a cluster, a request that
 * acts on a session (agent, chat.send, chat.abort, sessions.abort,
 * sessions.create with a key) whose key prefers another live node
 * (pc__gw_cluster_route) goes there, as the client sent it, over a
 * WebSocket link this connection opens to that node; what the node
 * answers and the events of the runs it started come back the same way
 * and go to the client as if this node had sent them (events get this
 * connection's seq). Reads go to the store, which every node shares, and
 * are answered here.
 *
 * A link belongs to the client's connection actor: opened on its first
 * forward to a node, proved with the cluster's secret (cluster_auth.c), and
 * closed with the connection. A node serves what comes over a link itself,
 * never forwarding it again, so a request makes one hop at most even when
 * two nodes' listings disagree for a moment; the session's lease in the
 * store decides who runs it either way.
 *
 * When a link fails, the requests that never went out over it are served
 * here instead (the session's lease moves if it must); those that went
 * out and were not answered get a retryable UNAVAILABLE: whether they ran
 * is not known here, and sending one again with its idempotency key names
 * the run it started, if any.
 *
 * sessions.subscribe and sessions.messages.subscribe (and their
 * unsubscribes) are served here and also sent on to the other live nodes
 * (for a session's messages, the node its key prefers), so the changes of
 * sessions that run elsewhere reach the client too; their answers from
 * the other nodes are dropped.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/timer.h"
#include "io/io.h"
#include "rpc_internal.h"
#include "runtime/version.h"

#define LINKS_MAX 16        /* nodes one connection forwards to */
#define QUEUED_MAX 256      /* frames waiting for a link's handshake */
#define RUNS_REMEMBERED 64  /* run ids per link, for agent.wait */
#define CONNECT_ID "pincer-node-connect"
#define OWN_ID_PREFIX "pincer-node:" /* the relay's own requests: answers dropped */

typedef enum { LINK_OPENING = 0, LINK_OPEN } link_state_t;

typedef struct frame {
	char *text;
	size_t len;
	bool own; /* the relay's own request, not the client's */
} frame_t;

/* A request sent on and not yet answered for good. */
typedef struct pending {
	char *id;
	bool two;  /* `agent`: an "accepted" answer, then the final one */
	bool sent; /* gone out (else queued behind the handshake) */
} pending_t;

typedef struct link {
	struct link *next;
	uint64_t serial; /* its messages carry it as `user` */
	pc_wsc_t *wsc;
	pc__gw_peer_t peer;
	link_state_t state;
	frame_t *queued; /* requests not yet sent (the handshake runs) */
	size_t nqueued;
	pending_t *pending; /* sent, not answered */
	size_t npending, cap_pending;
	char runs[RUNS_REMEMBERED][PC_RUN_ID_MAX + 1]; /* a ring of the runs it started */
	size_t next_run;
} link_t;

struct pc__gw_relay {
	pc_timer_t check; /* while it has links: are their nodes still live? */
	link_t *links;
	size_t nlinks;
	uint64_t next_serial;
	uint64_t next_own; /* ids of the relay's own requests */
};

/* ---- links ---- */

static link_t *link_by_serial(pc__gw_conn_t *c, uint64_t serial)
{
	for (link_t *l = c->relay ? c->relay->links : NULL; l; l = l->next)
		if (l->serial == serial)
			return l;
	return NULL;
}

static void pending_drop(link_t *l, size_t i)
{
	free(l->pending[i].id);
	l->pending[i] = l->pending[--l->npending];
}

static void link_free(link_t *l)
{
	if (l->wsc)
		pc_wsc_release(l->wsc); /* ends it if it has not ended; CLOSED still comes,
					   for no one */
	for (size_t i = 0; i < l->nqueued; i++)
		free(l->queued[i].text);
	for (size_t i = 0; i < l->npending; i++)
		free(l->pending[i].id);
	free(l->queued);
	free(l->pending);
	free(l);
}

static void link_unlink(pc__gw_conn_t *c, link_t *l)
{
	for (link_t **p = &c->relay->links; *p; p = &(*p)->next)
		if (*p == l) {
			*p = l->next;
			c->relay->nlinks--;
			return;
		}
}

static link_t *link_open(pc__gw_conn_t *c, const pc__gw_peer_t *peer)
{
	if (!c->relay && !(c->relay = calloc(1, sizeof(*c->relay))))
		return NULL;
	if (!c->relay->check) {
		/* a node that stops answering (paused, cut off) leaves the
		 * listing within a lease: its links go then, not at TCP's pace */
		pc_msg_t *m = pc_msg_new(PC__GW_MSG_RELAY_CHECK, 0);
		uint32_t every = c->g->cfg->cluster.lease_ms / 3;
		if (!m || pc_timer_every(c->self, every ? every : 1000, m, &c->relay->check) != 0)
			return NULL;
	}
	for (link_t *l = c->relay->links; l; l = l->next)
		if (!strcmp(l->peer.id, peer->id) && !strcmp(l->peer.host, peer->host) && l->peer.port == peer->port)
			return l;
	if (c->relay->nlinks >= LINKS_MAX)
		return NULL;
	link_t *l = calloc(1, sizeof(*l));
	if (!l)
		return NULL;
	l->peer = *peer;
	l->serial = ++c->relay->next_serial;
	pc_wsc_options_t o = {
		.host = peer->host,
		.port = peer->port,
		.user = (void *)(uintptr_t)l->serial,
	};
	if (pc_wsc_open(c->g->io, &o, c->self, &l->wsc) != 0) {
		free(l);
		return NULL;
	}
	l->next = c->relay->links;
	c->relay->links = l;
	c->relay->nlinks++;
	return l;
}

/* Sends (or, during the handshake, queues) one request frame. */
static int link_send(link_t *l, const char *text, size_t len, bool own)
{
	if (l->state == LINK_OPEN)
		return pc_wsc_send(l->wsc, PC_WS_TEXT, text, len);
	if (l->nqueued >= QUEUED_MAX)
		return PC_ELIMIT;
	frame_t *q = realloc(l->queued, (l->nqueued + 1) * sizeof(*q));
	if (!q)
		return PC_ENOMEM;
	l->queued = q;
	char *t = malloc(len + 1);
	if (!t)
		return PC_ENOMEM;
	memcpy(t, text, len);
	t[len] = '\0';
	q[l->nqueued++] = (frame_t){t, len, own};
	return 0;
}

static int pending_add(link_t *l, const char *id, bool two, bool sent)
{
	if (l->npending == l->cap_pending) {
		size_t cap = l->cap_pending ? 2 * l->cap_pending : 8;
		pending_t *p = realloc(l->pending, cap * sizeof(*p));
		if (!p)
			return PC_ENOMEM;
		l->pending = p;
		l->cap_pending = cap;
	}
	char *dup = strdup(id);
	if (!dup)
		return PC_ENOMEM;
	l->pending[l->npending++] = (pending_t){dup, two, sent};
	return 0;
}

static link_t *link_of_run(pc__gw_conn_t *c, const char *run_id)
{
	for (link_t *l = c->relay ? c->relay->links : NULL; l; l = l->next)
		for (size_t i = 0; i < RUNS_REMEMBERED; i++)
			if (l->runs[i][0] && !strcmp(l->runs[i], run_id))
				return l;
	return NULL;
}

/* ---- requests ---- */

/* The session a forwardable request acts on: true with *key (NULL:
 * "main") for those that go to its node. */
static bool session_of(const char *method, const cJSON *params, const char **key)
{
	*key = NULL;
	if (!strcmp(method, "agent")) {
		const char *k = pc__gw_str(params, "sessionKey"), *sid = pc__gw_str(params, "sessionId");
		if ((!k || !*k) && sid && *sid)
			return false; /* by sessionId: found in the store here, served here */
		*key = k;
		return true;
	}
	if (!strcmp(method, "chat.send") || !strcmp(method, "chat.abort") || !strcmp(method, "sessions.abort")) {
		*key = pc__gw_str(params, "sessionKey");
		return true;
	}
	if (!strcmp(method, "sessions.create")) {
		*key = pc__gw_str(params, "key");
		return *key != NULL; /* a new key made up here: the session starts here */
	}
	return false;
}

/* Sends the relay's own copy of `method` (answer dropped) to one node. */
static void send_own(pc__gw_conn_t *c, const pc__gw_peer_t *peer, const char *method, const cJSON *params)
{
	link_t *l = link_open(c, peer);
	if (!l)
		return;
	cJSON *f = cJSON_CreateObject();
	char id[48];
	snprintf(id, sizeof(id), OWN_ID_PREFIX "%llu", (unsigned long long)++c->relay->next_own);
	char *text = NULL;
	if (f && cJSON_AddStringToObject(f, "type", "req") && cJSON_AddStringToObject(f, "id", id) &&
	    cJSON_AddStringToObject(f, "method", method) &&
	    (!params || cJSON_AddItemToObject(f, "params", cJSON_Duplicate(params, true))))
		text = pc_json_print(f);
	if (text)
		(void)link_send(l, text, strlen(text), true);
	cJSON_free(text);
	cJSON_Delete(f);
}

/* The subscriptions a client makes here are made on the other nodes too. */
static void spread_subscription(pc__gw_conn_t *c, const char *method, const cJSON *params)
{
	pc__gw_peer_t peers[8];
	if (!strcmp(method, "sessions.subscribe") || !strcmp(method, "sessions.unsubscribe")) {
		size_t n = pc__gw_cluster_peers(c->g, peers, sizeof(peers) / sizeof(peers[0]));
		for (size_t i = 0; i < n; i++)
			send_own(c, &peers[i], method, params);
	} else if (!strcmp(method, "sessions.messages.subscribe") || !strcmp(method, "sessions.messages.unsubscribe")) {
		if (pc__gw_cluster_route(c->g, pc__gw_str(params, "key"), &peers[0]) == 0)
			send_own(c, &peers[0], method, params);
	}
}

bool pc__gw_relay_request(pc__gw_conn_t *c, const char *id, const char *method, const cJSON *params, const char *frame,
			  size_t len)
{
	if (c->node_link || !c->g->cluster || !c->g->cfg->cluster.forward)
		return false;
	const char *key;
	link_t *l = NULL;
	if (!strcmp(method, "agent.wait")) {
		/* a run this connection started on another node: its end comes
		 * from there at once (any other run's is read from the store) */
		l = link_of_run(c, pc__gw_str(params, "runId"));
	} else if (session_of(method, params, &key)) {
		pc__gw_peer_t peer;
		if (pc__gw_cluster_route(c->g, key, &peer) == 0)
			l = link_open(c, &peer);
	} else {
		spread_subscription(c, method, params);
	}
	if (!l)
		return false; /* served here: this node's session, or its node cannot be
				 reached from here */
	if (l->npending >= PC__GW_INFLIGHT_MAX ||
	    pending_add(l, id, !strcmp(method, "agent"), l->state == LINK_OPEN) != 0) {
		pc__gw_reply_error(c, id, "UNAVAILABLE", "too many requests in flight on this connection", NULL, NULL,
				   true);
		return true;
	}
	if (link_send(l, frame, len, false) != 0) {
		pending_drop(l, l->npending - 1);
		return false;
	}
	pc__gw_cluster_count_forward(c->g, false);
	return true;
}

/* ---- what a link hears ---- */

static void send_connect(pc__gw_conn_t *c, link_t *l, const char *nonce)
{
	char proof[PC__GW_NODE_PROOF_MAX];
	const char *node = pc__gw_cluster_node_id(c->g);
	if (pc__gw_node_proof(c->g->cfg->cluster.secret, node, nonce, proof) != 0) {
		pc_wsc_close(l->wsc, 1011, "no proof");
		return;
	}
	char *text = NULL;
	cJSON *f = cJSON_CreateObject();
	cJSON *p = cJSON_AddObjectToObject(f, "params");
	cJSON *cl = cJSON_AddObjectToObject(p, "client");
	cJSON *caps = cJSON_AddArrayToObject(p, "caps");
	cJSON *pr = cJSON_AddObjectToObject(p, "cluster");
	if (f && p && cl && caps && pr && cJSON_AddStringToObject(f, "type", "req") &&
	    cJSON_AddStringToObject(f, "id", CONNECT_ID) && cJSON_AddStringToObject(f, "method", "connect") &&
	    cJSON_AddNumberToObject(p, "minProtocol", c->protocol) &&
	    cJSON_AddNumberToObject(p, "maxProtocol", c->protocol) &&
	    cJSON_AddStringToObject(cl, "id", "pincer-node") &&
	    cJSON_AddStringToObject(cl, "version", PC_VERSION_STRING) &&
	    cJSON_AddStringToObject(cl, "platform", "linux") && cJSON_AddStringToObject(cl, "mode", "backend") &&
	    cJSON_AddStringToObject(pr, "nodeId", node) && cJSON_AddStringToObject(pr, "proof", proof) &&
	    (!c->tool_events || cJSON_AddItemToArray(caps, cJSON_CreateString("tool-events"))))
		text = pc_json_print(f);
	cJSON_Delete(f);
	if (!text || pc_wsc_send(l->wsc, PC_WS_TEXT, text, strlen(text)) != 0)
		pc_wsc_close(l->wsc, 1011, "connect not sent");
	cJSON_free(text);
}

/* The handshake passed: what waited goes. */
static void link_opened(link_t *l)
{
	l->state = LINK_OPEN;
	for (size_t i = 0; i < l->nqueued; i++) {
		(void)pc_wsc_send(l->wsc, PC_WS_TEXT, l->queued[i].text, l->queued[i].len);
		free(l->queued[i].text);
	}
	free(l->queued);
	l->queued = NULL;
	l->nqueued = 0;
	for (size_t i = 0; i < l->npending; i++)
		l->pending[i].sent = true;
}

/* An event frame from the other node, {"type":"event","event":NAME,
 * "payload":P,"seq":N} as rpc.c writes them: to the client with this
 * connection's seq, the payload untouched. */
static void relay_event(pc__gw_conn_t *c, link_t *l, const char *data, size_t len)
{
	static const char head[] = "{\"type\":\"event\",\"event\":\"", mid[] = "\",\"payload\":", tail[] = ",\"seq\":";
	const char *name = data + sizeof(head) - 1, *end = data + len;
	const char *q = memchr(name, '"', (size_t)(end - name));
	if (!q || (size_t)(end - q) < sizeof(mid) - 1 || memcmp(q, mid, sizeof(mid) - 1) != 0)
		return;
	const char *payload = q + sizeof(mid) - 1, *s = NULL;
	for (const char *p = end - (sizeof(tail) - 1); p > payload; p--)
		if (!memcmp(p, tail, sizeof(tail) - 1)) {
			s = p;
			break;
		}
	char ev[64];
	size_t nlen = (size_t)(q - name);
	if (!s || nlen >= sizeof(ev))
		return;
	memcpy(ev, name, nlen);
	ev[nlen] = '\0';
	if (!strcmp(ev, "connect.challenge")) {
		cJSON *f = cJSON_ParseWithLength(data, len);
		const char *nonce = pc__gw_str(cJSON_GetObjectItemCaseSensitive(f, "payload"), "nonce");
		if (nonce && l->state == LINK_OPENING)
			send_connect(c, l, nonce);
		cJSON_Delete(f);
		return;
	}
	if (!strcmp(ev, "tick") || !strcmp(ev, "shutdown"))
		return; /* the link's own: this node ticks for itself; a node that stops
			   closes its links */
	pc__gw_event_text(c, ev, payload, (size_t)(s - payload));
}

/* An answer from the other node. */
static void relay_answer(pc__gw_conn_t *c, link_t *l, const char *data, size_t len)
{
	cJSON *f = cJSON_ParseWithLength(data, len);
	const char *id = pc__gw_str(f, "id");
	bool ok = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(f, "ok"));
	const cJSON *payload = cJSON_GetObjectItemCaseSensitive(f, "payload");
	if (!id) {
		/* nothing to match it with */
	} else if (!strcmp(id, CONNECT_ID)) {
		if (ok) {
			link_opened(l);
		} else {
			const cJSON *e = cJSON_GetObjectItemCaseSensitive(f, "error");
			(void)pc_log_kv(c->g->log, PC_LOG_WARN, "cluster: another node refused this node's link",
					PC_LF_STR("nodeId", l->peer.id),
					PC_LF_STR("error", pc__gw_str(e, "message") ? pc__gw_str(e, "message") : "?"));
			pc_wsc_close(l->wsc, 1000, "refused");
		}
	} else if (strncmp(id, OWN_ID_PREFIX, sizeof(OWN_ID_PREFIX) - 1) != 0) {
		pc__gw_send(c, data, len);
		const char *status = pc__gw_str(payload, "status"), *run = pc__gw_str(payload, "runId");
		if (ok && run && strlen(run) <= PC_RUN_ID_MAX) {
			snprintf(l->runs[l->next_run], sizeof(l->runs[0]), "%s", run);
			l->next_run = (l->next_run + 1) % RUNS_REMEMBERED;
		}
		for (size_t i = 0; i < l->npending; i++)
			if (!strcmp(l->pending[i].id, id)) {
				/* the accepted answer of `agent`: its end is still owed */
				if (!(l->pending[i].two && ok && status && !strcmp(status, "accepted")))
					pending_drop(l, i);
				break;
			}
	}
	cJSON_Delete(f);
}

/* The link ended: what never went out is served here; what went out and
 * was not answered is answered, as not known to have run. */
static void link_gone(pc_ctx_t *ctx, pc__gw_conn_t *c, link_t *l, const char *why)
{
	link_unlink(c, l);
	if (l->nqueued || l->npending)
		(void)pc_log_kv(c->g->log, PC_LOG_WARN, "cluster: the link to another node ended",
				PC_LF_STR("nodeId", l->peer.id), PC_LF_STR("why", why),
				PC_LF_INT("unsent", (int64_t)l->nqueued),
				PC_LF_INT("unanswered", (int64_t)l->npending));
	frame_t *queued = l->queued;
	size_t nqueued = l->nqueued;
	l->queued = NULL;
	l->nqueued = 0;
	for (size_t i = 0; i < l->npending; i++) {
		if (!l->pending[i].sent)
			continue;
		char msg[PC_CLUSTER_NAME_MAX + 256];
		snprintf(msg, sizeof(msg),
			 "the cluster node running this session (%s) went away before answering; send the request "
			 "again (with its idempotencyKey, a run it started is named, not started twice)",
			 l->peer.id);
		pc__gw_reply_error(c, l->pending[i].id, "UNAVAILABLE", msg, NULL, NULL, true);
		pc__gw_cluster_count_forward(c->g, true);
	}
	link_free(l);
	for (size_t j = 0; j < nqueued; j++) {
		if (!queued[j].own && !pc__gw_conn_gone(c))
			pc__gw_on_frame_here(ctx, c, queued[j].text, queued[j].len);
		free(queued[j].text);
	}
	free(queued);
}

void pc__gw_relay_on_link(pc_ctx_t *ctx, pc__gw_conn_t *c, const pc_msg_t *msg)
{
	const pc_wsc_event_msg_t *head = pc_msg_cdata(msg); /* every WSC message starts with client, user */
	link_t *l = link_by_serial(c, (uint64_t)(uintptr_t)head->user);
	if (!l || head->client != l->wsc)
		return; /* a link already let go */
	if (msg->type == PC_MSG_WSC_MESSAGE) {
		const pc_wsc_message_msg_t *m = pc_msg_cdata(msg);
		static const char ev[] = "{\"type\":\"event\"";
		if (m->len > sizeof(ev) - 1 && !memcmp(m->data, ev, sizeof(ev) - 1))
			relay_event(c, l, m->data, m->len);
		else
			relay_answer(c, l, m->data, m->len);
	} else if (msg->type == PC_MSG_WSC_CLOSED) {
		const pc_wsc_closed_msg_t *m = pc_msg_cdata(msg);
		link_gone(ctx, c, l, m->reason ? pc_strerror(m->reason) : "closed");
	}
}

void pc__gw_relay_check(pc_ctx_t *ctx, pc__gw_conn_t *c)
{
	pc__gw_peer_t live[LINKS_MAX];
	size_t n = c->relay ? pc__gw_cluster_peers(c->g, live, LINKS_MAX) : 0;
	for (link_t *l = c->relay ? c->relay->links : NULL, *next; l; l = next) {
		next = l->next;
		bool up = false;
		for (size_t i = 0; i < n && !up; i++)
			up = !strcmp(live[i].id, l->peer.id);
		if (!up)
			link_gone(ctx, c, l, "its node is no longer live");
	}
}

void pc__gw_relay_free(pc__gw_conn_t *c)
{
	if (!c->relay)
		return;
	pc_timer_cancel(c->g->rt, c->relay->check);
	while (c->relay->links) {
		link_t *l = c->relay->links;
		c->relay->links = l->next;
		link_free(l);
	}
	free(c->relay);
	c->relay = NULL;
}
