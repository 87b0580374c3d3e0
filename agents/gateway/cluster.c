/*
 * This gateway as a node of a cluster (docs/cluster.md): its heartbeat in
 * the store's node table, and the nodes it last read there.
 *
 * One actor beats every leaseMs / 3: an urgent store write, answered once
 * durable, at the database's clock, so no two machines' clocks are
 * compared. After each recorded beat it reads the table; /metrics,
 * /readyz and `status` read what it keeps. A node whose beat has not been
 * recorded for a whole lease counts itself out of the cluster: /readyz
 * says so, as the others will read it gone. When the gateway stops, the
 * node leaves the table (a beat with no lease), so the others see it gone
 * at once rather than a lease later.
 *
 * The node's sessions hold their leases while the node is live
 * (pc_agent_cluster_join), so the heartbeat keeps them all. Each recorded
 * beat moves the node's deadline (when it went, plus the lease, less a
 * margin): the store cannot count the node out before it. A timer at the
 * deadline stops every session when no later beat was recorded
 * (pc_agent_node_lapsed), without waiting to hear from the database.
 *
 * After each listing in which the membership changed (a node came, went,
 * or was started again under the same id), the node takes over the open
 * runs whose owner is no live node's, in the sessions that prefer it
 * among the live nodes (placement.h), on the blocking pool.
 *
 * A session runs where its lease is, and a live holder keeps it: a node
 * that joins is preferred by some sessions another node is running. So
 * when the membership changes, and while such sessions are left, each
 * listing is applied together with the open runs read after it: a run's
 * owner that is a live node other than the one its session prefers puts
 * the session in `holders`, and requests for it go to that node, not to
 * a node that would wait for the lease. Once it has no open run there, it
 * goes where it prefers again.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gateway_internal.h"
#include "placement.h"
#include "actors/hash.h"
#include "actors/timer.h"

enum {
	CLUSTER_TICK = PC_MSG_TYPE_SYSTEM + 0x2800,
	CLUSTER_LAPSE, /* the deadline's timer */
	CLUSTER_TAKEN, /* a takeover scan ended (u64: its rc) */
};

/* The node counts itself out this long before the store would: time for a
 * write in flight to land, and for clocks that run at slightly different
 * rates. */
#define CLUSTER_MARGIN_DIV 10u

/* A session whose open run's owner is a live node other than the one it
 * prefers: requests for it go there. */
typedef struct holder {
	char *key;
	char node[PC_CLUSTER_NAME_MAX + 1];
} holder_t;

static void holders_free(holder_t *h, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(h[i].key);
	free(h);
}

struct pc__gw_cluster {
	pc_gateway_t *g;
	pc_store_t *store;
	pc_agent_t *agent;
	pc_actor_t *actor;
	pc_timer_t timer;
	pc_timer_t lapse_timer; /* the actor's own */
	char id[PC_CLUSTER_NAME_MAX + 1];
	char url[512];
	uint32_t lease_ms;
	/* the actor's own */
	bool fresh;         /* the next beat is the first since start */
	uint64_t beat_corr; /* a beat in flight (0: none) */
	uint64_t beat_sent; /* when it went (runtime clock) */
	uint64_t list_corr; /* a listing in flight (0: none) */
	uint64_t list_sent;
	uint64_t deadline;  /* runtime clock: the node's leases stand until then */
	bool lapsed;        /* the deadline passed; cleared by the next recorded beat */
	bool scanning;      /* a takeover scan is running */
	bool rescan;        /* the last scan failed: scan again after the next listing */
	uint64_t members;   /* the membership the last scan covered */
	/* read by other threads */
	uint64_t beats, beat_failures; /* atomic */
	uint64_t scans;                /* atomic: takeover scans run */
	uint64_t forwards, forward_failures, links_in; /* atomic */
	uint64_t beat_ok_ms;           /* atomic: runtime clock of the last recorded beat; 0: none yet */
	int32_t beat_rc;               /* atomic: the last beat's outcome */
	/* the actor's own: a listing waiting for the open runs read after it */
	pc_store_nodes_t *pending;
	uint64_t runs_corr, runs_sent;
	uint64_t routed;               /* the membership `holders` was made for */
	pthread_mutex_t lock;          /* guards nodes, holders */
	pc_store_nodes_t *nodes;       /* the latest listing; NULL before one */
	holder_t *holders;             /* by key: sessions running away from the node they prefer */
	size_t nholders;
};

/* An answer the store owes for longer than a lease is taken as lost (a
 * reply that could not be allocated is dropped): the next one goes. */
static bool owed(uint64_t corr, uint64_t sent, const pc__gw_cluster_t *c)
{
	return corr && pc_runtime_now_ms() - sent < c->lease_ms;
}

static void beat(pc_ctx_t *ctx, pc__gw_cluster_t *c)
{
	if (owed(c->beat_corr, c->beat_sent, c))
		return; /* the last one has not been answered: no pile-up behind a slow store */
	c->beat_sent = pc_runtime_now_ms();
	pc_msg_t *req = NULL;
	int rc = pc_store_req_node_beat(c->id, c->url, pc_agent_owner(c->agent), c->lease_ms, c->fresh, &req);
	if (rc == 0)
		rc = pc_ask(ctx, pc_store_actor(c->store), req, &c->beat_corr);
	if (rc != 0) {
		c->beat_corr = 0;
		__atomic_add_fetch(&c->beat_failures, 1, __ATOMIC_RELAXED);
		__atomic_store_n(&c->beat_rc, rc, __ATOMIC_RELAXED);
	}
}

/* A beat was recorded: the store counts the node live until at least
 * when the beat went plus a lease, so its leases stand until then, less
 * the margin. */
static void renewed(pc__gw_cluster_t *c)
{
	uint64_t deadline = c->beat_sent + c->lease_ms - c->lease_ms / CLUSTER_MARGIN_DIV;
	if (deadline <= c->deadline)
		return;
	c->deadline = deadline;
	c->lapsed = false;
	pc_agent_node_renewed(c->agent, deadline);
	if (c->lapse_timer)
		pc_timer_cancel(c->g->rt, c->lapse_timer);
	c->lapse_timer = 0;
	uint64_t now = pc_runtime_now_ms();
	pc_msg_t *m = pc_msg_new(CLUSTER_LAPSE, 0);
	if (m && pc_timer_after(c->actor, deadline > now ? deadline - now : 0, m, &c->lapse_timer) != 0)
		c->lapse_timer = 0;
}

/* The deadline's timer (or a tick, should the timer not have been set):
 * past it with no later beat recorded, the node stops its sessions. */
static void check_lapse(pc__gw_cluster_t *c)
{
	if (c->lapsed || !c->deadline || pc_runtime_now_ms() < c->deadline)
		return;
	c->lapsed = true;
	size_t n = pc_agent_node_lapsed(c->agent);
	(void)pc_log_kv(c->g->log, PC_LOG_WARN, "cluster: this node's lease lapsed; its sessions stopped",
			PC_LF_STR("nodeId", c->id), PC_LF_INT("sessions", (int64_t)n), PC_LF_INT("leaseMs", c->lease_ms));
}

static void on_beat(pc_ctx_t *ctx, pc__gw_cluster_t *c, const pc_msg_t *msg)
{
	c->beat_corr = 0;
	pc_store_reply_t r;
	int rc = pc_store_reply_get(msg, &r);
	if (rc == 0)
		rc = r.rc;
	__atomic_store_n(&c->beat_rc, rc, __ATOMIC_RELAXED);
	if (rc != 0) {
		__atomic_add_fetch(&c->beat_failures, 1, __ATOMIC_RELAXED);
		return;
	}
	c->fresh = false;
	__atomic_add_fetch(&c->beats, 1, __ATOMIC_RELAXED);
	__atomic_store_n(&c->beat_ok_ms, pc_runtime_now_ms(), __ATOMIC_RELEASE);
	renewed(c);
	if (owed(c->list_corr, c->list_sent, c))
		return;
	c->list_sent = pc_runtime_now_ms();
	pc_msg_t *req = NULL;
	if (pc_store_req_nodes(&req) == 0 && pc_ask(ctx, pc_store_actor(c->store), req, &c->list_corr) != 0)
		c->list_corr = 0;
}

/* ---- taking over what gone nodes left ---- */

typedef struct takeover {
	pc_agent_t *agent;
	const char *self;   /* points into live */
	char **live;        /* ids of the live nodes */
	char **owners;      /* and their owners */
	size_t n_live;
} takeover_t;

static void takeover_free(void *arg)
{
	takeover_t *t = arg;
	for (size_t i = 0; i < t->n_live; i++) {
		free(t->live[i]);
		free(t->owners[i]);
	}
	free(t->live);
	free(t->owners);
	free(t);
}

/* A run no live node owns (its node is gone, or was started again under a
 * new owner), in a session that prefers this node. The store adopts it
 * only if its owner is no live node's then, too. */
static bool pick(void *arg, const pc_store_open_run_t *run)
{
	const takeover_t *t = arg;
	if (!run->owner)
		return false; /* from before owners were kept: each node's start recovers those */
	for (size_t i = 0; i < t->n_live; i++)
		if (!strcmp(run->owner, t->owners[i]))
			return false;
	size_t k = pc__placement_pick((const char *const *)t->live, t->n_live, run->key);
	return k < t->n_live && t->live[k] == t->self;
}

/* A digest of the listing's membership (ids, owners, live or not), in
 * any order: a scan runs only when it changed. */
static uint64_t members_of(const pc_store_nodes_t *l)
{
	uint64_t d = 0;
	for (size_t i = 0, n = pc_store_nodes_count(l); i < n; i++) {
		pc_store_node_t nd;
		pc_store_nodes_get(l, i, &nd);
		d ^= pc__hash64_str(nd.id) * 31u + pc__hash64_str(nd.owner) * 7u + nd.live;
	}
	return d;
}

/* The listing's live nodes, for a scan; NULL without memory or when this
 * node is not in it as live. */
static takeover_t *takeover_of(const pc__gw_cluster_t *c, const pc_store_nodes_t *l)
{
	size_t n = pc_store_nodes_count(l);
	takeover_t *t = calloc(1, sizeof(*t));
	if (t) {
		t->live = calloc(n ? n : 1, sizeof(char *));
		t->owners = calloc(n ? n : 1, sizeof(char *));
		t->agent = c->agent;
	}
	bool ok = t && t->live && t->owners;
	for (size_t i = 0; ok && i < n; i++) {
		pc_store_node_t nd;
		pc_store_nodes_get(l, i, &nd);
		if (!nd.live)
			continue;
		char *id = strdup(nd.id), *own = strdup(nd.owner ? nd.owner : "");
		ok = id && own;
		if (!ok) {
			free(id);
			free(own);
			break;
		}
		if (!strcmp(nd.id, c->id))
			t->self = id;
		t->owners[t->n_live] = own;
		t->live[t->n_live++] = id;
	}
	if (!ok || !t->self) {
		if (t)
			takeover_free(t);
		return NULL;
	}
	return t;
}

static void maybe_take_over(pc_ctx_t *ctx, pc__gw_cluster_t *c, const pc_store_nodes_t *l)
{
	if (c->scanning || c->lapsed)
		return;
	uint64_t members = members_of(l);
	if (members == c->members && !c->rescan)
		return;
	takeover_t *t = takeover_of(c, l);
	if (!t)
		return;
	if (pc_agent_take_over(c->agent, pick, t, takeover_free, pc_self(ctx), CLUSTER_TAKEN) != 0) {
		takeover_free(t);
		return;
	}
	c->scanning = true;
	c->members = members;
	__atomic_add_fetch(&c->scans, 1, __ATOMIC_RELAXED);
}

static void on_taken(pc__gw_cluster_t *c, const pc_msg_t *msg)
{
	c->scanning = false;
	int rc = (int)(int64_t)pc_msg_u64(msg);
	c->rescan = rc != 0;
	if (rc != 0)
		(void)pc_log_kv(c->g->log, PC_LOG_WARN, "cluster: taking over a lost node's runs failed",
				PC_LF_STR("error", pc_store_strerror(rc)));
}

/* ---- where sessions run ---- */

static int by_key(const void *a, const void *b)
{
	return strcmp(((const holder_t *)a)->key, ((const holder_t *)b)->key);
}

/* The sessions of `runs` that run on a live node of listing `l` other
 * than the one they prefer, sorted by key; false without memory. */
static bool holders_of(const pc__gw_cluster_t *c, const pc_store_nodes_t *l, const pc_store_open_runs_t *runs,
		       holder_t **out, size_t *nout)
{
	*out = NULL;
	*nout = 0;
	takeover_t *t = takeover_of(c, l);
	if (!t)
		return false;
	size_t n = pc_store_open_runs_count(runs), got = 0;
	holder_t *h = n ? calloc(n, sizeof(*h)) : NULL;
	bool ok = !n || h;
	for (size_t i = 0; ok && i < n; i++) {
		pc_store_open_run_t r;
		pc_store_open_runs_get(runs, i, &r);
		size_t j = 0;
		while (r.owner && j < t->n_live && strcmp(r.owner, t->owners[j]) != 0)
			j++;
		if (!r.owner || j == t->n_live ||
		    pc__placement_pick((const char *const *)t->live, t->n_live, r.key) == j)
			continue; /* a lost node's (taken over), or where it belongs */
		if (!(h[got].key = strdup(r.key))) {
			ok = false;
			break;
		}
		snprintf(h[got++].node, sizeof(h[0].node), "%s", t->live[j]);
	}
	takeover_free(t);
	if (!ok) {
		holders_free(h, got);
		return false;
	}
	if (got)
		qsort(h, got, sizeof(*h), by_key);
	*out = h;
	*nout = got;
	return true;
}

/* Makes listing `l` (and the sessions held away, `h`) the one requests
 * are routed by. */
static void apply(pc__gw_cluster_t *c, pc_store_nodes_t *l, holder_t *h, size_t nh)
{
	pthread_mutex_lock(&c->lock);
	pc_store_nodes_t *old = c->nodes;
	holder_t *old_h = c->holders;
	size_t old_n = c->nholders;
	c->nodes = l;
	c->holders = h;
	c->nholders = nh;
	pthread_mutex_unlock(&c->lock);
	pc_store_nodes_free(old);
	holders_free(old_h, old_n);
}

static void on_runs(pc__gw_cluster_t *c, const pc_msg_t *msg)
{
	c->runs_corr = 0;
	pc_store_nodes_t *l = c->pending;
	c->pending = NULL;
	pc_store_open_runs_t *runs = NULL;
	holder_t *h = NULL;
	size_t nh = 0;
	if (pc_store_open_runs_take(msg, &runs) == 0 && holders_of(c, l, runs, &h, &nh))
		c->routed = members_of(l);
	else
		c->routed = 0; /* read again after the next listing */
	pc_store_open_runs_free(runs);
	apply(c, l, h, nh);
}

static void on_nodes(pc_ctx_t *ctx, pc__gw_cluster_t *c, const pc_msg_t *msg)
{
	c->list_corr = 0;
	pc_store_nodes_t *l = NULL;
	if (pc_store_nodes_take(msg, &l) != 0)
		return; /* the last listing stands */
	if (c->pending && owed(c->runs_corr, c->runs_sent, c)) {
		pc_store_nodes_free(l);
		return; /* the open runs for the one before are on their way */
	}
	if (c->pending) {
		/* their answer was lost: this listing goes instead */
		pc_store_nodes_free(c->pending);
		c->pending = NULL;
		c->runs_corr = 0;
		c->routed = 0;
	}
	maybe_take_over(ctx, c, l);
	pthread_mutex_lock(&c->lock);
	bool away = c->nholders != 0;
	pthread_mutex_unlock(&c->lock);
	if (members_of(l) != c->routed || away) {
		/* applied with the open runs, so that no request goes to a
		 * node that joined for a session another node runs */
		pc_msg_t *req = NULL;
		c->runs_sent = pc_runtime_now_ms();
		if (pc_store_req_runs_open(&req) == 0 && pc_ask(ctx, pc_store_actor(c->store), req, &c->runs_corr) == 0) {
			c->pending = l;
			return;
		}
		c->runs_corr = 0;
	}
	pthread_mutex_lock(&c->lock);
	pc_store_nodes_t *old = c->nodes;
	c->nodes = l;
	pthread_mutex_unlock(&c->lock);
	pc_store_nodes_free(old);
}

static int receive(pc_ctx_t *ctx, void *state, pc_msg_t *msg)
{
	pc__gw_cluster_t *c = state;
	if (msg->type == CLUSTER_TICK) {
		check_lapse(c);
		beat(ctx, c);
	} else if (msg->type == CLUSTER_LAPSE) {
		c->lapse_timer = 0;
		check_lapse(c);
	} else if (msg->type == CLUSTER_TAKEN) {
		on_taken(c, msg);
	} else if (msg->type == PC_STORE_MSG_REPLY && msg->corr && msg->corr == c->beat_corr) {
		on_beat(ctx, c, msg);
	} else if (msg->type == PC_STORE_MSG_NODES && msg->corr && msg->corr == c->list_corr) {
		on_nodes(ctx, c, msg);
	} else if (msg->type == PC_STORE_MSG_RUNS && msg->corr && msg->corr == c->runs_corr) {
		on_runs(c, msg);
	}
	return 0;
}

static const pc_behavior_t cluster_behavior = {.name = "gateway-cluster", .receive = receive};

/* The node's defaults: the host name and the gateway's port for its id;
 * for its URL the address the gateway listens on, or the host name when
 * it listens on every address. */
static void node_names(pc__gw_cluster_t *c, const pc_cluster_config_t *cc, const char *bind, uint16_t port)
{
	char host[256];
	if (gethostname(host, sizeof(host)) != 0)
		snprintf(host, sizeof(host), "localhost");
	host[sizeof(host) - 1] = '\0';
	if (cc->node_id)
		snprintf(c->id, sizeof(c->id), "%s", cc->node_id);
	else
		snprintf(c->id, sizeof(c->id), "%.240s:%u", host, port);
	bool any = !*bind || !strcmp(bind, "0.0.0.0") || !strcmp(bind, "::");
	bool v6 = !any && strchr(bind, ':');
	if (cc->advertise_url)
		snprintf(c->url, sizeof(c->url), "%s", cc->advertise_url);
	else
		snprintf(c->url, sizeof(c->url), "http://%s%.240s%s:%u", v6 ? "[" : "", any ? host : bind,
			 v6 ? "]" : "", port);
}

static void cluster_release(pc__gw_cluster_t *c)
{
	pc_store_nodes_free(c->nodes);
	pc_store_nodes_free(c->pending);
	holders_free(c->holders, c->nholders);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

int pc__gw_cluster_start(pc_gateway_t *g)
{
	const pc_cluster_config_t *cc = &g->cfg->cluster;
	if (!cc->enabled)
		return 0;
	pc__gw_cluster_t *c = calloc(1, sizeof(*c));
	if (!c)
		return PC_ENOMEM;
	c->g = g;
	c->store = pc_agent_store(g->agent);
	c->agent = g->agent;
	c->lease_ms = cc->lease_ms;
	c->fresh = true;
	node_names(c, cc, g->host, g->port);
	pthread_mutex_init(&c->lock, NULL);
	/* the actor borrows c; pc__gw_cluster_free frees it once the actor has
	 * stopped */
	int rc = c->store ? pc_spawn(g->rt, &cluster_behavior, c, &c->actor) : PC_ESTATE;
	pc_msg_t *tick = rc == 0 ? pc_msg_new(CLUSTER_TICK, 0) : NULL;
	if (rc == 0 && !tick)
		rc = PC_ENOMEM;
	/* the first beat now, then every third of a lease: two may be lost
	 * before the lease runs out */
	if (rc == 0)
		rc = pc_send_u64(c->actor, CLUSTER_TICK, 0);
	if (rc == 0)
		rc = pc_timer_every(c->actor, c->lease_ms / 3, tick, &c->timer);
	else
		pc_msg_free(tick);
	if (rc != 0) {
		pc__gw_route_stop(&c->actor);
		cluster_release(c);
		return rc;
	}
	/* sessions take node leases from now on: before any request arrives */
	pc_agent_cluster_join(g->agent);
	__atomic_store_n(&g->cluster, c, __ATOMIC_RELEASE); /* the parts' actors read it from now on */
	return 0;
}

/* The parts that read it are gone. */
void pc__gw_cluster_free(pc_gateway_t *g)
{
	pc__gw_cluster_t *c = g->cluster;
	if (!c)
		return;
	g->cluster = NULL;
	pc_timer_cancel(g->rt, c->timer);
	pc__gw_route_stop(&c->actor);
	if (c->lapse_timer)
		pc_timer_cancel(g->rt, c->lapse_timer);
	/* leaving: the others see this node gone now, not a lease later */
	(void)pc_store_node_beat(c->store, c->id, c->url, pc_agent_owner(c->agent), 0, false, NULL);
	cluster_release(c);
}

void pc__gw_cluster_stats(const pc_gateway_t *g, pc__gw_cluster_stats_t *out)
{
	*out = (pc__gw_cluster_stats_t){0};
	pc__gw_cluster_t *c = __atomic_load_n(&g->cluster, __ATOMIC_ACQUIRE);
	if (!c)
		return;
	out->beats = __atomic_load_n(&c->beats, __ATOMIC_RELAXED);
	out->beat_failures = __atomic_load_n(&c->beat_failures, __ATOMIC_RELAXED);
	uint64_t ok = __atomic_load_n(&c->beat_ok_ms, __ATOMIC_ACQUIRE);
	out->beat_age_ms = ok ? (int64_t)(pc_runtime_now_ms() - ok) : -1;
	out->beat_rc = __atomic_load_n(&c->beat_rc, __ATOMIC_RELAXED);
	out->scans = __atomic_load_n(&c->scans, __ATOMIC_RELAXED);
	out->forwards = __atomic_load_n(&c->forwards, __ATOMIC_RELAXED);
	out->forward_failures = __atomic_load_n(&c->forward_failures, __ATOMIC_RELAXED);
	out->links_in = __atomic_load_n(&c->links_in, __ATOMIC_RELAXED);
	pthread_mutex_lock(&c->lock);
	for (size_t i = 0, n = c->nodes ? pc_store_nodes_count(c->nodes) : 0; i < n; i++) {
		pc_store_node_t nd;
		pc_store_nodes_get(c->nodes, i, &nd);
		if (nd.live)
			out->live++;
		else
			out->gone++;
	}
	out->away = c->nholders;
	pthread_mutex_unlock(&c->lock);
}

/* An advertised URL this gateway can open a connection to:
 * http://host[:port][/], host a name or an address ([v6] in brackets). */
static bool peer_address(const char *url, pc__gw_peer_t *p)
{
	static const char scheme[] = "http://";
	if (!url || strncmp(url, scheme, sizeof(scheme) - 1) != 0)
		return false;
	const char *rest;
	p->port = 80;
	return pc_uri_authority(url + sizeof(scheme) - 1, p->host, sizeof(p->host), &p->port, &rest, NULL) == 0 &&
	       (!*rest || !strcmp(rest, "/"));
}

/* The live nodes of the latest listing (ids into c->nodes) and which is
 * this one; under c->lock. */
static size_t live_ids(const pc__gw_cluster_t *c, const char **ids, size_t cap, size_t *self)
{
	size_t n = 0;
	*self = cap;
	for (size_t i = 0, m = c->nodes ? pc_store_nodes_count(c->nodes) : 0; i < m && n < cap; i++) {
		pc_store_node_t nd;
		pc_store_nodes_get(c->nodes, i, &nd);
		if (!nd.live)
			continue;
		if (!strcmp(nd.id, c->id))
			*self = n;
		ids[n++] = nd.id;
	}
	return n;
}

static bool node_peer(const pc__gw_cluster_t *c, const char *id, pc__gw_peer_t *out)
{
	for (size_t i = 0, m = pc_store_nodes_count(c->nodes); i < m; i++) {
		pc_store_node_t nd;
		pc_store_nodes_get(c->nodes, i, &nd);
		if (!strcmp(nd.id, id)) {
			snprintf(out->id, sizeof(out->id), "%s", nd.id);
			return peer_address(nd.url, out);
		}
	}
	return false;
}

int pc__gw_cluster_route(const pc_gateway_t *g, const char *key, pc__gw_peer_t *out)
{
	pc__gw_cluster_t *c = __atomic_load_n(&g->cluster, __ATOMIC_ACQUIRE);
	if (!c || !g->cfg->cluster.forward)
		return PC_ENOTFOUND;
	const char *ids[64];
	int rc = PC_ENOTFOUND;
	const char *k_ = key && *key ? key : "main";
	pthread_mutex_lock(&c->lock);
	size_t self, n = live_ids(c, ids, sizeof(ids) / sizeof(ids[0]), &self);
	holder_t want = {.key = (char *)k_};
	const holder_t *h = c->nholders ? bsearch(&want, c->holders, c->nholders, sizeof(want), by_key) : NULL;
	size_t k = n;
	for (size_t i = 0; h && i < n && k == n; i++)
		if (!strcmp(ids[i], h->node))
			k = i; /* the live node running it */
	if (k == n)
		k = pc__placement_pick(ids, n, k_);
	if (k < n && k != self && node_peer(c, ids[k], out))
		rc = 0;
	pthread_mutex_unlock(&c->lock);
	return rc;
}

size_t pc__gw_cluster_peers(const pc_gateway_t *g, pc__gw_peer_t *out, size_t cap)
{
	pc__gw_cluster_t *c = __atomic_load_n(&g->cluster, __ATOMIC_ACQUIRE);
	if (!c)
		return 0;
	const char *ids[64];
	size_t got = 0;
	pthread_mutex_lock(&c->lock);
	size_t self, n = live_ids(c, ids, sizeof(ids) / sizeof(ids[0]), &self);
	for (size_t i = 0; i < n && got < cap; i++)
		if (i != self && node_peer(c, ids[i], &out[got]))
			got++;
	pthread_mutex_unlock(&c->lock);
	return got;
}

const char *pc__gw_cluster_node_id(const pc_gateway_t *g)
{
	pc__gw_cluster_t *c = __atomic_load_n(&g->cluster, __ATOMIC_ACQUIRE);
	return c ? c->id : "";
}

void pc__gw_cluster_count_forward(const pc_gateway_t *g, bool failed)
{
	pc__gw_cluster_t *c = __atomic_load_n(&g->cluster, __ATOMIC_ACQUIRE);
	if (c)
		__atomic_add_fetch(failed ? &c->forward_failures : &c->forwards, 1, __ATOMIC_RELAXED);
}

void pc__gw_cluster_count_link(const pc_gateway_t *g)
{
	pc__gw_cluster_t *c = __atomic_load_n(&g->cluster, __ATOMIC_ACQUIRE);
	if (c)
		__atomic_add_fetch(&c->links_in, 1, __ATOMIC_RELAXED);
}

bool pc__gw_cluster_out(const pc_gateway_t *g, char *why, size_t cap)
{
	pc__gw_cluster_t *c = __atomic_load_n(&g->cluster, __ATOMIC_ACQUIRE);
	if (!c)
		return false;
	pc__gw_cluster_stats_t st;
	pc__gw_cluster_stats(g, &st);
	if (st.beat_age_ms >= 0 && st.beat_age_ms < (int64_t)c->lease_ms)
		return false;
	if (st.beat_age_ms < 0)
		snprintf(why, cap, "cluster: this node's first heartbeat is not recorded yet%s%s",
			 st.beat_rc ? ": " : "", st.beat_rc ? pc_store_strerror(st.beat_rc) : "");
	else
		snprintf(why, cap, "cluster: no heartbeat of this node recorded for %lld ms (lease %u ms)%s%s",
			 (long long)st.beat_age_ms, c->lease_ms, st.beat_rc ? ": " : "",
			 st.beat_rc ? pc_store_strerror(st.beat_rc) : "");
	return true;
}

cJSON *pc__gw_cluster_json(const pc_gateway_t *g)
{
	pc__gw_cluster_t *c = __atomic_load_n(&g->cluster, __ATOMIC_ACQUIRE);
	if (!c)
		return NULL;
	pc__gw_cluster_stats_t st;
	pc__gw_cluster_stats(g, &st);
	cJSON *o = cJSON_CreateObject();
	if (!o)
		return NULL;
	cJSON_AddStringToObject(o, "nodeId", c->id);
	cJSON_AddStringToObject(o, "advertiseUrl", c->url);
	cJSON_AddNumberToObject(o, "leaseMs", c->lease_ms);
	cJSON_AddNumberToObject(o, "heartbeatAgeMs", (double)st.beat_age_ms);
	cJSON_AddBoolToObject(o, "live", pc_agent_node_live(c->agent));
	pc_agent_stats_t as;
	pc_agent_stats(c->agent, &as);
	cJSON_AddNumberToObject(o, "runsTakenOver", (double)as.runs_taken_over);
	cJSON_AddNumberToObject(o, "lapses", (double)as.node_lapses);
	cJSON_AddNumberToObject(o, "toolsFenced", (double)as.tools_fenced);
	cJSON_AddNumberToObject(o, "sessionsOwned", (double)as.leases_held);
	pc_store_stats_t ss;
	pc_store_stats(c->store, &ss);
	cJSON_AddNumberToObject(o, "fencedWrites", (double)ss.fenced_writes);
	cJSON_AddNumberToObject(o, "forwards", (double)st.forwards);
	cJSON_AddNumberToObject(o, "forwardFailures", (double)st.forward_failures);
	cJSON_AddNumberToObject(o, "linksIn", (double)st.links_in);
	cJSON_AddNumberToObject(o, "sessionsAway", (double)st.away);
	cJSON *arr = cJSON_AddArrayToObject(o, "nodes");
	pthread_mutex_lock(&c->lock);
	for (size_t i = 0, n = c->nodes ? pc_store_nodes_count(c->nodes) : 0; arr && i < n; i++) {
		pc_store_node_t nd;
		pc_store_nodes_get(c->nodes, i, &nd);
		cJSON *e = cJSON_CreateObject();
		if (!e || !cJSON_AddItemToArray(arr, e)) {
			cJSON_Delete(e);
			break;
		}
		cJSON_AddStringToObject(e, "id", nd.id);
		if (nd.owner)
			cJSON_AddStringToObject(e, "owner", nd.owner);
		if (nd.url)
			cJSON_AddStringToObject(e, "url", nd.url);
		cJSON_AddBoolToObject(e, "live", nd.live);
		cJSON_AddBoolToObject(e, "self", strcmp(nd.id, c->id) == 0);
		cJSON_AddNumberToObject(e, "startedAt", (double)nd.started_ms);
		cJSON_AddNumberToObject(e, "heartbeatAt", (double)nd.heartbeat_ms);
		cJSON_AddNumberToObject(e, "expiresAt", (double)nd.expires_ms);
	}
	pthread_mutex_unlock(&c->lock);
	return o;
}
