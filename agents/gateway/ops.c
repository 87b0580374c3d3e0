/*
 * Probes and metrics (docs/gateway-http.md):
 *
 *   GET /livez                       200 {"status":"ok"} while the process serves
 *   GET /readyz (/healthz, /health)  200 {"status":"ready",...} between start and
 *                                    drain, else 503 {"status":"starting"|"draining"|...}
 *   GET /metrics                     Prometheus text format 0.0.4
 *
 * One actor answers them all: every answer is a few atomic reads. /metrics
 * exposes what the modules measure (pc_agent_stats, pc_runtime_stats,
 * pc_io_stats), the counters the gateway's parts keep, then the agent's
 * own registry (pc_agent_metrics: run outcomes, durations, tokens, queue
 * and lane waits, time to first token, which its actors record as they go);
 * nothing is estimated. The first part is a registry (agents/obs/metrics.h)
 * of pulled series that read one snapshot, taken by the actor just before
 * it renders, so a scrape is one consistent cut per module and each module
 * is read once.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/version.h"
#include "agents/obs/obs.h"
#include "http_util_internal.h"

enum { OPS_LIVEZ = 0, OPS_READYZ, OPS_HEALTHZ, OPS_HEALTH, OPS_METRICS, OPS_ROUTES };
static const char *const route_paths[OPS_ROUTES] = {"/livez", "/readyz", "/healthz", "/health", "/metrics"};

enum { STATES = PC__GW_STOPPED + 1 };

/* What one scrape reads; pulled series point into it. */
typedef struct snap {
	double state_is[STATES]; /* 1 for the current state */
	double uptime_s;
	uint64_t http[OPS_ROUTES][PC__GW_CODES];
	pc__gw_openai_stats_t oa;
	pc__gw_ws_stats_t ws;
	pc_agent_stats_t agent;
	pc_runtime_stats_t rt;
	pc_mailbox_stats_t mq;
	uint32_t nworkers, io_threads;
	pc_worker_stats_t *workers; /* nworkers */
	double *parked_s;           /* nworkers */
	pc_io_stats_t io;
	pc_store_stats_t store;
	pc__gw_cluster_stats_t cluster;
	double cluster_beat_age_s;
	double store_write_cpu_s;
	double store_writing;       /* 1 while the latest write transaction succeeded */
	uint64_t log_dropped;
	pc_process_stats_t proc;
	uint64_t refused[PC__GW_REFUSALS];
	pc__gw_limiter_stats_t auth;
} snap_t;

struct pc__gw_ops {
	pc_gateway_t *g;
	uint64_t http[OPS_ROUTES][PC__GW_CODES]; /* this part's answers */
	pc_metrics_t *reg;
	pc_metric_family_t *http_family;
	/* the (route, status) series made so far: one appears with its first
	 * answer, so a scrape does not list a hundred zeros */
	bool http_shown[OPS_ROUTES + PC__GW_OA_ROUTES][PC__GW_CODES];
	snap_t snap; /* the actor's alone */
};

/* ---- the registry ---- */

static const char *state_name(int s)
{
	switch (s) {
	case PC__GW_STARTING: return "starting";
	case PC__GW_READY: return "ready";
	case PC__GW_DRAINING: return "draining";
	default: return "stopped";
	}
}

enum { U64, U32, F64 };

static double read_u64(void *p) { return (double)*(const uint64_t *)p; }
static double read_u32(void *p) { return (double)*(const uint32_t *)p; }
static double read_f64(void *p) { return *(const double *)p; }

static pc_metric_collect_fn reader(int kind)
{
	return kind == U64 ? read_u64 : kind == U32 ? read_u32 : read_f64;
}

/* A family without labels whose one series reads a field of the snapshot. */
typedef struct scalar {
	const char *name;
	pc_metric_type_t type;
	int kind;
	size_t off; /* in snap_t */
	const char *help;
} scalar_t;

#define COUNTER(n, k, f, h) {n, PC_METRIC_COUNTER, k, offsetof(snap_t, f), h}
#define GAUGE(n, k, f, h) {n, PC_METRIC_GAUGE, k, offsetof(snap_t, f), h}

static const scalar_t gateway_scalars[] = {
	GAUGE("pincer_gateway_uptime_seconds", F64, uptime_s, "Seconds since the gateway was made."),
	GAUGE("pincer_gateway_openai_requests_active", U64, oa.active, "Chat completions in progress."),
	COUNTER("pincer_gateway_openai_client_gone_total", U64, oa.gone,
		"Chat completions whose client left before the answer was complete."),
	GAUGE("pincer_gateway_ws_connections", U64, ws.open, "WebSocket connections open (handshake included)."),
	COUNTER("pincer_gateway_ws_connected_total", U64, ws.connected,
		"WebSocket connections that completed connect."),
	COUNTER("pincer_gateway_auth_failures_total", U64, auth.failures,
		"Wrong tokens, passwords and device tokens presented."),
	COUNTER("pincer_gateway_auth_lockouts_total", U64, auth.lockouts,
		"Client addresses locked out after too many wrong secrets."),
	COUNTER("pincer_log_lines_dropped_total", U64, log_dropped,
		"Log lines dropped because standard error (or the log's descriptor) was full, or failed."),
	COUNTER("pincer_gateway_auth_locked_refused_total", U64, auth.refused,
		"Attempts refused because their address was locked out."),
	GAUGE("pincer_gateway_auth_locked_clients", U64, auth.locked_now, "Client addresses locked out now."),
};

static const scalar_t agent_scalars[] = {
	GAUGE("pincer_agent_sessions_live", U64, agent.sessions_live, "Session actors in memory."),
	COUNTER("pincer_agent_runs_started_total", U64, agent.runs_started, "Runs started."),
	COUNTER("pincer_agent_runs_finished_total", U64, agent.runs_finished, "Runs ended, whatever the outcome."),
	GAUGE("pincer_agent_runs_active", U64, agent.runs_active, "Runs started and not ended."),
	COUNTER("pincer_agent_attempts_total", U64, agent.attempts, "Attempts started."),
	COUNTER("pincer_agent_tool_calls_total", U64, agent.tool_calls, "Tool calls."),
	COUNTER("pincer_agent_tool_loops_blocked_total", U64, agent.tool_loops_blocked,
		"Tool calls refused by the loop detectors."),
	GAUGE("pincer_agent_lane_active", U32, agent.lane_active, "Runs holding a permit of the global lane."),
	GAUGE("pincer_agent_lane_queued", U32, agent.lane_queued, "Runs waiting for the global lane."),
	GAUGE("pincer_agent_lane_peak_active", U32, agent.lane_peak, "The most lane permits held at once."),
	GAUGE("pincer_agent_lane_max", U32, agent.lane_max, "The global lane's permits."),
	COUNTER("pincer_agent_recoveries_total", U64, agent.recoveries,
		"Runs aborted or lanes released by the stuck-session watchdog."),
};

static const scalar_t runtime_scalars[] = {
	GAUGE("pincer_runtime_workers", U32, nworkers, "Worker threads."),
	GAUGE("pincer_runtime_actors_live", U64, rt.actors_live, "Actors whose memory is held."),
	GAUGE("pincer_runtime_mailbox_messages", U64, mq.queued, "Messages waiting in the actors' mailboxes."),
	GAUGE("pincer_runtime_mailbox_depth_max", U32, mq.deepest, "The fullest actor mailbox, in messages."),
	COUNTER("pincer_runtime_actors_spawned_total", U64, rt.spawned, "Actors spawned."),
	COUNTER("pincer_runtime_actors_exited_total", U64, rt.exited, "Actors stopped."),
	COUNTER("pincer_runtime_dead_letters_total", U64, rt.dead_letters, "Messages freed undelivered."),
	COUNTER("pincer_runtime_timers_fired_total", U64, rt.timers_fired, "Timer messages delivered."),
	COUNTER("pincer_runtime_blocking_jobs_total", U64, rt.blocking_done, "Blocking-pool jobs completed."),
	COUNTER("pincer_runtime_mutes_total", U64, rt.mutes, "Times a sender was held back by backpressure."),
	COUNTER("pincer_runtime_external_messages_total", U64, rt.sent_external,
		"Messages sent from threads that are not workers."),
	COUNTER("pincer_runtime_guest_turns_total", U64, rt.guest_turns,
		"Actor turns run by I/O and blocking threads themselves while every worker was parked."),
};

static const scalar_t io_scalars[] = {
	GAUGE("pincer_io_threads", U32, io_threads, "I/O threads."),
	COUNTER("pincer_io_transfers_started_total", U64, io.transfers_started,
		"Outgoing HTTP requests handed to curl."),
	GAUGE("pincer_io_transfers_live", U64, io.transfers_live, "Outgoing HTTP requests in flight."),
	GAUGE("pincer_io_transfers_paused", U64, io.transfers_paused, "Outgoing transfers paused by a slow consumer."),
	COUNTER("pincer_io_connections_accepted_total", U64, io.connections_accepted, "Server connections accepted."),
	GAUGE("pincer_io_connections_live", U64, io.connections_live, "Server connections open."),
	COUNTER("pincer_io_connections_dropped_total", U64, io.connections_dropped,
		"Server connections closed for a limit, a timeout or a slow reader."),
	COUNTER("pincer_io_commands_total", U64, io.commands, "Commands run by the I/O threads."),
	COUNTER("pincer_io_wakeups_total", U64, io.wakeups, "Returns from epoll."),
	GAUGE("pincer_io_output_queued_bytes", U64, io.output_queued,
	      "Bytes server connections hold for their peers, not yet taken by the sockets."),
	COUNTER("pincer_io_transitions_refused_total", U64, io.transitions_refused,
		"Connection lifecycle transitions (HTTP, WebSocket, WebSocket client) refused as illegal."),
};

static const scalar_t cluster_scalars[] = {
	COUNTER("pincer_cluster_heartbeats_total", U64, cluster.beats, "Heartbeats of this node the store recorded."),
	COUNTER("pincer_cluster_heartbeat_failures_total", U64, cluster.beat_failures,
		"Heartbeats of this node that failed (the store refused or could not be reached)."),
	GAUGE("pincer_cluster_heartbeat_age_seconds", F64, cluster_beat_age_s,
	      "Time since this node's last recorded heartbeat (-1: none yet); past the lease, /readyz says not ready."),
	GAUGE("pincer_cluster_nodes_live", U32, cluster.live, "Live nodes in the node table, this one included."),
	GAUGE("pincer_cluster_nodes_gone", U32, cluster.gone, "Nodes in the node table whose lease ran out or that left."),
	COUNTER("pincer_cluster_takeover_scans_total", U64, cluster.scans,
		"Scans for open runs of nodes read gone, to take over those of sessions that prefer this node."),
	COUNTER("pincer_cluster_forwards_total", U64, cluster.forwards,
		"Requests sent on to the node that runs their session."),
	COUNTER("pincer_cluster_forward_failures_total", U64, cluster.forward_failures,
		"Forwarded requests left unanswered when the link to their node ended (answered UNAVAILABLE)."),
	COUNTER("pincer_cluster_links_in_total", U64, cluster.links_in,
		"Connections other nodes opened to this one and proved with the cluster's secret."),
	GAUGE("pincer_cluster_sessions_away", U64, cluster.away,
	      "Sessions with a run on a live node other than the one they prefer, where their requests go."),
	COUNTER("pincer_cluster_runs_taken_over_total", U64, agent.runs_taken_over,
		"Open runs of gone nodes this node adopted: run again, or ended as node_lost."),
	COUNTER("pincer_cluster_lapses_total", U64, agent.node_lapses,
		"Times this node's deadline passed with no heartbeat recorded, stopping its sessions."),
	COUNTER("pincer_cluster_tools_fenced_total", U64, agent.tools_fenced,
		"Tool calls not started because this node was past its deadline."),
	GAUGE("pincer_cluster_sessions_owned", U64, agent.leases_held,
		"Sessions whose lease this node holds now (sessions with work, or idle under a second)."),
};

static const scalar_t store_scalars[] = {
	COUNTER("pincer_store_transactions_total", U64, store.batches, "Write transactions the store attempted."),
	COUNTER("pincer_store_writes_total", U64, store.writes, "Writes in those transactions."),
	COUNTER("pincer_store_failed_transactions_total", U64, store.failed_batches,
		"Write transactions that failed as a whole."),
	COUNTER("pincer_store_reads_total", U64, store.reads, "Reads the store served (histories, runs, listings)."),
	COUNTER("pincer_store_polled_reads_total", U64, store.polled_reads,
		"Of those, reads whose rows came over a connection the I/O loop polled (PostgreSQL)."),
	COUNTER("pincer_store_retried_transactions_total", U64, store.retried_batches,
		"Write transactions that failed and ran again, each write alone."),
	COUNTER("pincer_store_held_transactions_total", U64, store.held_batches,
		"Write transactions sent again because the database could not be reached (PostgreSQL)."),
	COUNTER("pincer_store_unknown_writes_total", U64, store.unknown_writes,
		"Writes whose commit lost its answer and could not be proved (PostgreSQL)."),
	COUNTER("pincer_store_fenced_writes_total", U64, store.fenced_writes,
		"Writes refused for a stale lease epoch, or for a run another owner took over or ended."),
	COUNTER("pincer_store_write_cpu_seconds_total", F64, store_write_cpu_s,
		"CPU time the store's writer spent in transactions, checkpoints included."),
	GAUGE("pincer_store_writes_ok", F64, store_writing,
	      "1 while the store's latest write transaction succeeded, 0 while writes fail (see /readyz)."),
};

/* The standard process series, under their usual names. */
static const scalar_t process_scalars[] = {
	COUNTER("process_cpu_seconds_total", F64, proc.cpu_seconds, "Total user and system CPU time spent in seconds."),
	GAUGE("process_resident_memory_bytes", F64, proc.resident_bytes, "Resident memory size in bytes."),
	GAUGE("process_open_fds", F64, proc.open_fds, "Number of open file descriptors."),
	GAUGE("process_max_fds", F64, proc.max_fds, "Maximum number of open file descriptors."),
	GAUGE("process_start_time_seconds", F64, proc.start_time_seconds,
	      "Start time of the process since unix epoch in seconds."),
};

static int family(struct pc__gw_ops *ops, const char *name, pc_metric_type_t type, const char *help,
		  const char *const *labels, size_t max_series, pc_metric_family_t **out)
{
	pc_metric_desc_t d = {.type = type, .name = name, .help = help, .labels = labels, .max_series = max_series};
	return pc_metrics_register(ops->reg, &d, out);
}

static int scalars(struct pc__gw_ops *ops, const scalar_t *t, size_t n)
{
	int rc = 0;
	for (size_t i = 0; rc == 0 && i < n; i++) {
		pc_metric_family_t *f = NULL;
		rc = family(ops, t[i].name, t[i].type, t[i].help, NULL, 1, &f);
		if (rc == 0)
			rc = pc_metric_callback(f, NULL, reader(t[i].kind), (char *)&ops->snap + t[i].off);
	}
	return rc;
}

/* A family with one label, one pulled series per value. */
static int labelled(struct pc__gw_ops *ops, const char *name, pc_metric_type_t type, const char *help,
		    const char *label, const char *const *values, size_t n, int kind, void *const *fields)
{
	const char *labels[] = {label, NULL};
	pc_metric_family_t *f = NULL;
	int rc = family(ops, name, type, help, labels, n, &f);
	for (size_t i = 0; rc == 0 && i < n; i++) {
		const char *v[] = {values[i], NULL};
		rc = pc_metric_callback(f, v, reader(kind), fields[i]);
	}
	return rc;
}

static int gateway_families(struct pc__gw_ops *ops)
{
	snap_t *s = &ops->snap;
	const char *labels[] = {"version", NULL}, *version[] = {PC_VERSION_STRING, NULL};
	pc_metric_family_t *f = NULL;
	pc_metric_t *m = NULL;
	int rc = family(ops, "pincer_gateway_info", PC_METRIC_GAUGE, "The gateway's version.", labels, 1, &f);
	if (rc == 0)
		rc = pc_metric_series(f, version, &m);
	if (rc == 0)
		rc = pc_metric_set(m, 1);
	const char *states[STATES];
	void *state_fields[STATES];
	for (int i = 0; i < STATES; i++)
		states[i] = state_name(i), state_fields[i] = &s->state_is[i];
	if (rc == 0)
		rc = labelled(ops, "pincer_gateway_state", PC_METRIC_GAUGE,
			      "1 for the gateway's life-cycle state, 0 for the others.", "state", states, STATES, F64,
			      state_fields);
	const char *http_labels[] = {"route", "code", NULL};
	if (rc == 0)
		rc = family(ops, "pincer_gateway_http_requests_total", PC_METRIC_COUNTER,
			    "Plain HTTP answers, by route and status.", http_labels,
			    (OPS_ROUTES + PC__GW_OA_ROUTES) * PC__GW_CODES, &ops->http_family);
	const char *streams[] = {"false", "true"};
	void *run_fields[] = {&s->oa.runs[0], &s->oa.runs[1]};
	if (rc == 0)
		rc = labelled(ops, "pincer_gateway_openai_runs_total", PC_METRIC_COUNTER,
			      "Chat completions that started a run, streamed or not.", "stream", streams, 2, U64,
			      run_fields);
	const char *reasons[PC__GW_REFUSALS];
	void *refused_fields[PC__GW_REFUSALS];
	for (int i = 0; i < PC__GW_REFUSALS; i++)
		reasons[i] = pc__gw_refusal_name(i), refused_fields[i] = &s->refused[i];
	if (rc == 0)
		rc = labelled(ops, "pincer_gateway_requests_refused_total", PC_METRIC_COUNTER,
			      "Requests refused before any route read them (Host, Origin, a remote client without auth).",
			      "reason", reasons, PC__GW_REFUSALS, U64, refused_fields);
	if (rc == 0)
		rc = scalars(ops, gateway_scalars, sizeof(gateway_scalars) / sizeof(gateway_scalars[0]));
	return rc;
}

static int agent_families(struct pc__gw_ops *ops)
{
	snap_t *s = &ops->snap;
	int rc = scalars(ops, agent_scalars, sizeof(agent_scalars) / sizeof(agent_scalars[0]));
	const char *types[] = {"long_running", "stalled", "stuck"};
	void *fields[] = {&s->agent.long_running, &s->agent.stalled, &s->agent.stuck};
	if (rc == 0)
		rc = labelled(ops, "pincer_agent_session_diagnostics_total", PC_METRIC_COUNTER,
			      "Stuck-session warnings, by type.", "type", types, 3, U64, fields);
	return rc;
}

/* One family with a series per worker; `off` is the field in
 * pc_worker_stats_t, or SIZE_MAX for the parked seconds. */
static int worker_family(struct pc__gw_ops *ops, const char *name, pc_metric_type_t type, const char *help,
			 int kind, size_t off)
{
	snap_t *s = &ops->snap;
	const char *labels[] = {"worker", NULL};
	pc_metric_family_t *f = NULL;
	int rc = family(ops, name, type, help, labels, s->nworkers ? s->nworkers : 1, &f);
	for (uint32_t i = 0; rc == 0 && i < s->nworkers; i++) {
		char idx[16];
		snprintf(idx, sizeof(idx), "%u", i);
		const char *v[] = {idx, NULL};
		void *field = off == SIZE_MAX ? (void *)&s->parked_s[i] : (void *)((char *)&s->workers[i] + off);
		rc = pc_metric_callback(f, v, reader(kind), field);
	}
	return rc;
}

static int runtime_families(struct pc__gw_ops *ops)
{
	int rc = scalars(ops, runtime_scalars, sizeof(runtime_scalars) / sizeof(runtime_scalars[0]));
	if (rc == 0)
		rc = worker_family(ops, "pincer_runtime_worker_messages_total", PC_METRIC_COUNTER,
				   "Messages handled, by worker.", U64, offsetof(pc_worker_stats_t, handled));
	if (rc == 0)
		rc = worker_family(ops, "pincer_runtime_worker_turns_total", PC_METRIC_COUNTER,
				   "Actor turns run, by worker.", U64, offsetof(pc_worker_stats_t, turns));
	if (rc == 0)
		rc = worker_family(ops, "pincer_runtime_worker_steals_total", PC_METRIC_COUNTER,
				   "Successful steals, by worker.", U64, offsetof(pc_worker_stats_t, steals));
	if (rc == 0)
		rc = worker_family(ops, "pincer_runtime_worker_parks_total", PC_METRIC_COUNTER,
				   "Times a worker went to sleep.", U64, offsetof(pc_worker_stats_t, parks));
	if (rc == 0)
		rc = worker_family(ops, "pincer_runtime_worker_trims_total", PC_METRIC_COUNTER,
				   "Times an idle worker gave free heap memory back.", U64,
				   offsetof(pc_worker_stats_t, trims));
	if (rc == 0)
		rc = worker_family(ops, "pincer_runtime_worker_parked_seconds_total", PC_METRIC_COUNTER,
				   "Time asleep, by worker.", F64, SIZE_MAX);
	if (rc == 0)
		rc = worker_family(ops, "pincer_runtime_worker_utilisation", PC_METRIC_GAUGE,
				   "1 - time asleep / time since start, by worker.", F64,
				   offsetof(pc_worker_stats_t, utilisation));
	return rc;
}

static int registry_new(struct pc__gw_ops *ops)
{
	snap_t *s = &ops->snap;
	s->nworkers = pc_runtime_workers(ops->g->rt);
	s->workers = calloc(s->nworkers ? s->nworkers : 1, sizeof(*s->workers));
	s->parked_s = calloc(s->nworkers ? s->nworkers : 1, sizeof(*s->parked_s));
	int rc = s->workers && s->parked_s ? pc_metrics_new(&ops->reg) : PC_ENOMEM;
	if (rc == 0)
		rc = gateway_families(ops);
	if (rc == 0)
		rc = agent_families(ops);
	if (rc == 0)
		rc = runtime_families(ops);
	if (rc == 0)
		rc = scalars(ops, io_scalars, sizeof(io_scalars) / sizeof(io_scalars[0]));
	if (rc == 0)
		rc = scalars(ops, store_scalars, sizeof(store_scalars) / sizeof(store_scalars[0]));
	if (rc == 0 && ops->g->cfg->cluster.enabled)
		rc = scalars(ops, cluster_scalars, sizeof(cluster_scalars) / sizeof(cluster_scalars[0]));
	if (rc == 0)
		rc = scalars(ops, process_scalars, sizeof(process_scalars) / sizeof(process_scalars[0]));
	return rc;
}

/* ---- a scrape ---- */

static void snapshot(struct pc__gw_ops *ops)
{
	pc_gateway_t *g = ops->g;
	snap_t *s = &ops->snap;
	int state = pc__gw_state(g);
	for (int i = 0; i < STATES; i++)
		s->state_is[i] = i == state;
	s->uptime_s = (double)(pc_runtime_now_ms() - g->started_mono_ms) / 1000.0;
	for (int r = 0; r < OPS_ROUTES; r++)
		for (size_t i = 0; i < PC__GW_CODES; i++)
			s->http[r][i] = pc__gw_read(&ops->http[r][i]);
	pc__gw_openai_stats(g, &s->oa);
	pc__gw_ws_stats(g, &s->ws);
	pc_agent_stats(g->agent, &s->agent);
	pc_runtime_stats(g->rt, &s->rt, s->workers, s->nworkers);
	pc_runtime_mailbox_stats(g->rt, &s->mq);
	for (uint32_t i = 0; i < s->nworkers; i++)
		s->parked_s[i] = (double)s->workers[i].parked_ns / 1e9;
	pc_io_stats(g->io, &s->io);
	s->io_threads = pc_io_threads(g->io);
	pc_store_stats(pc_agent_store(g->agent), &s->store);
	s->store_write_cpu_s = (double)s->store.write_cpu_ns / 1e9;
	pc__gw_cluster_stats(g, &s->cluster);
	s->cluster_beat_age_s = s->cluster.beat_age_ms < 0 ? -1.0 : (double)s->cluster.beat_age_ms / 1000.0;
	pc_store_health_t h;
	pc_store_health(pc_agent_store(g->agent), &h);
	s->store_writing = h.rc == 0;
	(void)pc_process_stats(&s->proc); /* what it cannot read stays 0 */
	s->log_dropped = g->log ? pc_log_dropped(g->log) : 0;
	for (int i = 0; i < PC__GW_REFUSALS; i++)
		s->refused[i] = __atomic_load_n(&g->refused[i], __ATOMIC_RELAXED);
	pc__gw_limiter_stats(g->limiter, pc_runtime_now_ms(), &s->auth);
}

/* Makes the (route, status) series that have counts now and had none. */
static void show_http(struct pc__gw_ops *ops, size_t row, const char *route, uint64_t *counts)
{
	for (size_t i = 0; i < PC__GW_CODES; i++) {
		if (ops->http_shown[row][i] || !counts[i])
			continue;
		char code[16];
		if (pc__gw_code(i))
			snprintf(code, sizeof(code), "%d", pc__gw_code(i));
		else
			snprintf(code, sizeof(code), "other");
		const char *v[] = {route, code, NULL};
		ops->http_shown[row][i] = pc_metric_callback(ops->http_family, v, read_u64, &counts[i]) == 0;
	}
}

/* The exposition text: this part's registry, then the agent's (the
 * caller frees), or NULL when out of memory. */
static char *render(struct pc__gw_ops *ops, size_t *len)
{
	snapshot(ops);
	for (int r = 0; r < OPS_ROUTES; r++)
		show_http(ops, (size_t)r, route_paths[r], ops->snap.http[r]);
	for (int r = 0; r < PC__GW_OA_ROUTES; r++)
		show_http(ops, (size_t)(OPS_ROUTES + r), pc__gw_oa_route_name(r), ops->snap.oa.http[r]);
	char *own = NULL, *agent = NULL, *text = NULL;
	size_t on = 0, an = 0;
	if (pc_metrics_render(ops->reg, &own, &on) == 0 &&
	    pc_metrics_render(pc_agent_metrics(ops->g->agent), &agent, &an) == 0 && (text = malloc(on + an + 1))) {
		memcpy(text, own, on);
		memcpy(text + on, agent, an + 1);
		*len = on + an;
	}
	free(own);
	free(agent);
	return text;
}

/* ---- answers ---- */

/* {"status": status}, or NULL when out of memory. */
static cJSON *status_body(const char *status)
{
	cJSON *o = cJSON_CreateObject();
	if (o && !cJSON_AddStringToObject(o, "status", status)) {
		cJSON_Delete(o);
		o = NULL;
	}
	return o;
}

static void count(struct pc__gw_ops *ops, int route, int status)
{
	pc__gw_count(&ops->http[route][pc__gw_code_index(status)]);
}

/* Every answer names its request (`rid`, x-request-id) before `extra`. */
static void answer_json(struct pc__gw_ops *ops, int route, uint64_t id, const char *rid, int status,
			const char *extra, const cJSON *body)
{
	char head[PC__GW_REQUEST_ID_MAX + 96];
	snprintf(head, sizeof(head), "x-request-id: %s\r\n%s", rid, extra ? extra : "");
	count(ops, route, status);
	pc__gw_respond_json(ops->g->srv, id, status, head, body);
}

static void serve_metrics(struct pc__gw_ops *ops, uint64_t id, const char *rid)
{
	size_t len = 0;
	char *text = render(ops, &len);
	if (!text) {
		cJSON *body = status_body("out of memory");
		answer_json(ops, OPS_METRICS, id, rid, 500, NULL, body);
		cJSON_Delete(body);
	} else {
		char head[PC__GW_REQUEST_ID_MAX + 96];
		snprintf(head, sizeof(head), "Content-Type: text/plain; version=0.0.4; charset=utf-8\r\nx-request-id: %s\r\n",
			 rid);
		count(ops, OPS_METRICS, 200);
		pc_http_respond(ops->g->srv, id, 200, head, text, len);
	}
	free(text);
}

/* The store's writes fail (a full disk, a file size limit...): not ready,
 * and a probe write goes out so that readiness comes back by itself once
 * writes succeed again, traffic or not. Adds the cause to `body`. */
static bool store_failing(pc_gateway_t *g, cJSON *body)
{
	pc_store_t *st = pc_agent_store(g->agent);
	pc_store_health_t h;
	pc_store_health(st, &h);
	if (h.rc == 0)
		return false;
	pc_msg_t *probe = NULL;
	if (pc_store_req_probe(&probe) == 0)
		(void)pc_send(pc_store_actor(st), probe);
	cJSON_ReplaceItemInObject(body, "status", cJSON_CreateString("not_ready"));
	cJSON_AddStringToObject(body, "reason", pc_store_strerror(h.rc));
	cJSON_AddNumberToObject(body, "sinceMs", (double)h.since_ms);
	return true;
}

/* A cluster's node whose heartbeat the store has not recorded for a lease
 * is out of the cluster (the other nodes read it gone): not ready. */
static bool cluster_out(pc_gateway_t *g, cJSON *body)
{
	char why[256];
	if (!pc__gw_cluster_out(g, why, sizeof(why)))
		return false;
	cJSON_ReplaceItemInObject(body, "status", cJSON_CreateString("not_ready"));
	cJSON_AddStringToObject(body, "reason", why);
	return true;
}

/* Readiness: ready between start and drain, while the store can write and,
 * in a cluster, while this node's heartbeat is recorded. */
static void serve_ready(struct pc__gw_ops *ops, int route, uint64_t id, const char *rid)
{
	pc_gateway_t *g = ops->g;
	int state = pc__gw_state(g);
	cJSON *body = status_body(state_name(state));
	if (body) {
		uint64_t since = state == PC__GW_STARTING ? g->started_mono_ms : g->ready_mono_ms;
		cJSON_AddNumberToObject(body, "uptimeMs", (double)(pc_runtime_now_ms() - since));
		cJSON_AddStringToObject(body, "version", PC_VERSION_STRING);
	}
	bool ready = state == PC__GW_READY && !(body && (store_failing(g, body) || cluster_out(g, body)));
	/* a balancer or client that waits on readiness is told for how long
	 * (a failing store: about when the probe will have answered) */
	char extra[48] = "";
	if (!ready)
		snprintf(extra, sizeof(extra), "Retry-After: %llu\r\n",
			 state == PC__GW_READY ? 1ull : (unsigned long long)((pc__gw_retry_after_ms(g) + 999) / 1000));
	answer_json(ops, route, id, rid, ready ? 200 : 503, extra[0] ? extra : NULL, body);
	cJSON_Delete(body);
}

static int route_of(const char *path)
{
	for (int r = 0; r < OPS_ROUTES; r++)
		if (!strcmp(path, route_paths[r]))
			return r;
	return -1;
}

static void on_request(struct pc__gw_ops *ops, const pc_http_request_msg_t *q)
{
	int route = route_of(q->path);
	if (route < 0) { /* the server routes only these paths here */
		pc_http_respond(ops->g->srv, q->id, 404, NULL, NULL, 0);
		return;
	}
	char rid[PC__GW_REQUEST_ID_MAX + 1];
	pc__gw_request_id(q, rid);
	pc__gw_client_t who;
	const char *why = NULL;
	/* the probes answer whoever asks (a load balancer's health check
	 * names the gateway by any address); what else is here is admitted */
	int refused = route == OPS_METRICS ? pc__gw_admit(ops->g, q, &who, &why) : 0;
	if (refused) {
		cJSON *body = status_body("refused");
		if (body)
			cJSON_AddStringToObject(body, "error", why);
		answer_json(ops, route, q->id, rid, refused, NULL, body);
		cJSON_Delete(body);
	} else if (strcmp(q->method, "GET")) {
		cJSON *body = status_body("method not allowed");
		answer_json(ops, route, q->id, rid, 405, "Allow: GET\r\n", body);
		cJSON_Delete(body);
	} else if (route == OPS_LIVEZ) {
		cJSON *body = status_body("ok");
		answer_json(ops, route, q->id, rid, 200, NULL, body);
		cJSON_Delete(body);
	} else if (route == OPS_METRICS) {
		serve_metrics(ops, q->id, rid);
	} else {
		serve_ready(ops, route, q->id, rid);
	}
}

static int ops_receive(pc_ctx_t *ctx, void *state, pc_msg_t *msg)
{
	(void)ctx;
	if (msg->type == PC_MSG_HTTP_REQUEST)
		on_request(state, pc_msg_cdata(msg));
	return 0;
}

static const pc_behavior_t ops_behavior = {"gw_ops", ops_receive, NULL};

/* ---- the part ---- */

static void ops_release(struct pc__gw_ops *ops)
{
	if (!ops)
		return;
	pc_metrics_free(ops->reg);
	free(ops->snap.workers);
	free(ops->snap.parked_s);
	free(ops);
}

int pc__gw_ops_new(pc_gateway_t *g)
{
	struct pc__gw_ops *ops = calloc(1, sizeof(*ops));
	if (!ops)
		return PC_ENOMEM;
	ops->g = g;
	int rc = registry_new(ops);
	/* the actor borrows `ops`; pc__gw_ops_free frees it once the actor
	 * has stopped */
	if (rc == 0)
		rc = pc_spawn(g->rt, &ops_behavior, ops, &g->ops_route);
	if (rc != 0) {
		ops_release(ops);
		return rc;
	}
	g->ops = ops;
	return 0;
}

void pc__gw_ops_free(pc_gateway_t *g)
{
	pc__gw_route_stop(&g->ops_route);
	ops_release(g->ops);
	g->ops = NULL;
}
