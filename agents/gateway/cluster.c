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
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gateway_internal.h"
#include "actors/timer.h"

enum { CLUSTER_TICK = PC_MSG_TYPE_SYSTEM + 0x2800 };

struct pc__gw_cluster {
	pc_gateway_t *g;
	pc_store_t *store;
	pc_actor_t *actor;
	pc_timer_t timer;
	char id[PC_CLUSTER_NAME_MAX + 1];
	char url[512];
	uint32_t lease_ms;
	/* the actor's own */
	bool fresh;         /* the next beat is the first since start */
	uint64_t beat_corr; /* a beat in flight (0: none) */
	uint64_t beat_sent; /* when it went (runtime clock) */
	uint64_t list_corr; /* a listing in flight (0: none) */
	uint64_t list_sent;
	/* read by other threads */
	uint64_t beats, beat_failures; /* atomic */
	uint64_t beat_ok_ms;           /* atomic: runtime clock of the last recorded beat; 0: none yet */
	int32_t beat_rc;               /* atomic: the last beat's outcome */
	pthread_mutex_t lock;          /* guards nodes */
	pc_store_nodes_t *nodes;       /* the latest listing; NULL before one */
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
	int rc = pc_store_req_node_beat(c->id, c->url, pc_agent_owner(c->g->agent), c->lease_ms, c->fresh, &req);
	if (rc == 0)
		rc = pc_ask(ctx, pc_store_actor(c->store), req, &c->beat_corr);
	if (rc != 0) {
		c->beat_corr = 0;
		__atomic_add_fetch(&c->beat_failures, 1, __ATOMIC_RELAXED);
		__atomic_store_n(&c->beat_rc, rc, __ATOMIC_RELAXED);
	}
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
	if (owed(c->list_corr, c->list_sent, c))
		return;
	c->list_sent = pc_runtime_now_ms();
	pc_msg_t *req = NULL;
	if (pc_store_req_nodes(&req) == 0 && pc_ask(ctx, pc_store_actor(c->store), req, &c->list_corr) != 0)
		c->list_corr = 0;
}

static void on_nodes(pc__gw_cluster_t *c, const pc_msg_t *msg)
{
	c->list_corr = 0;
	pc_store_nodes_t *l = NULL;
	if (pc_store_nodes_take(msg, &l) != 0)
		return; /* the last listing stands */
	pthread_mutex_lock(&c->lock);
	pc_store_nodes_t *old = c->nodes;
	c->nodes = l;
	pthread_mutex_unlock(&c->lock);
	pc_store_nodes_free(old);
}

static int receive(pc_ctx_t *ctx, void *state, pc_msg_t *msg)
{
	pc__gw_cluster_t *c = state;
	if (msg->type == CLUSTER_TICK)
		beat(ctx, c);
	else if (msg->type == PC_STORE_MSG_REPLY && msg->corr && msg->corr == c->beat_corr)
		on_beat(ctx, c, msg);
	else if (msg->type == PC_STORE_MSG_NODES && msg->corr && msg->corr == c->list_corr)
		on_nodes(c, msg);
	return 0;
}

static const pc_behavior_t cluster_behavior = {.name = "gateway-cluster", .receive = receive};

/* The node's defaults: the host name and the gateway's port. */
static void node_names(pc__gw_cluster_t *c, const pc_cluster_config_t *cc, uint16_t port)
{
	char host[256];
	if (gethostname(host, sizeof(host)) != 0)
		snprintf(host, sizeof(host), "localhost");
	host[sizeof(host) - 1] = '\0';
	if (cc->node_id)
		snprintf(c->id, sizeof(c->id), "%s", cc->node_id);
	else
		snprintf(c->id, sizeof(c->id), "%.240s:%u", host, port);
	if (cc->advertise_url)
		snprintf(c->url, sizeof(c->url), "%s", cc->advertise_url);
	else
		snprintf(c->url, sizeof(c->url), "http://%.240s:%u", host, port);
}

static void cluster_release(pc__gw_cluster_t *c)
{
	pc_store_nodes_free(c->nodes);
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
	c->lease_ms = cc->lease_ms;
	c->fresh = true;
	node_names(c, cc, g->port);
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
	/* leaving: the others see this node gone now, not a lease later */
	(void)pc_store_node_beat(c->store, c->id, c->url, pc_agent_owner(c->g->agent), 0, false, NULL);
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
	pthread_mutex_lock(&c->lock);
	for (size_t i = 0, n = c->nodes ? pc_store_nodes_count(c->nodes) : 0; i < n; i++) {
		pc_store_node_t nd;
		pc_store_nodes_get(c->nodes, i, &nd);
		if (nd.live)
			out->live++;
		else
			out->gone++;
	}
	pthread_mutex_unlock(&c->lock);
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
