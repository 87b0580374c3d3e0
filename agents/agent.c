/*
 * The agent host: the API of agent.h. It wires the lane, the run registry,
 * the tools and the session directory (session/session_directory.c)
 * together, starts the embedded model server when configured, and stops
 * it all in order.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>

#include "io/io.h"
#include "agent_internal.h"
#include "session/lease.h"
#include "session/recovery_internal.h"
#include "agents/tools/tools.h"
#include "session/diagnostics.h"

/* The embedded mock's demo: every run calls the clock tool once, then
 * answers with the echo of the user's message. */
static const char DEMO_SCENARIO[] =
	"{\"steps\":[{\"kind\":\"tool_calls\",\"text\":\"Let me check the time.\","
	"\"tool_calls\":[{\"name\":\"clock\",\"arguments\":{}}]},{\"kind\":\"text\"}],"
	"\"then\":\"default\"}";

pc_msg_t *pc__text_msg(uint32_t type, const char *text)
{
	size_t n = strlen(text ? text : "") + 1;
	pc_msg_t *m = pc_msg_new(type, n);
	if (m)
		memcpy(pc_msg_data(m), text ? text : "", n);
	return m;
}

pc_msg_t *pc__steer_msg(uint32_t type, const char *run_id, const char *text)
{
	size_t a = strlen(run_id ? run_id : "") + 1, b = strlen(text ? text : "") + 1;
	pc_msg_t *m = pc_msg_new(type, a + b);
	if (m) {
		memcpy(pc_msg_data(m), run_id ? run_id : "", a);
		memcpy((char *)pc_msg_data(m) + a, text ? text : "", b);
	}
	return m;
}

pc_msg_t *pc__steer_copy(uint32_t type, const char *payload)
{
	size_t n = pc__steer_size(payload);
	pc_msg_t *m = pc_msg_new(type, n);
	if (m)
		memcpy(pc_msg_data(m), payload, n);
	return m;
}

void pc__agent_run_id(pc_agent_t *a, char out[PC_RUN_ID_MAX + 1])
{
	uint64_t n = __atomic_add_fetch(&a->next_id, 1, __ATOMIC_RELAXED);
	snprintf(out, PC_RUN_ID_MAX + 1, "run-%s-%llx", a->id_prefix, (unsigned long long)n);
}

const char *pc_agent_disposition_name(pc_agent_disposition_t d)
{
	switch (d) {
	case PC_AGENT_STARTED: return "started";
	case PC_AGENT_QUEUED: return "queued";
	case PC_AGENT_STEERED: return "steered";
	case PC_AGENT_DUPLICATE: return "duplicate";
	case PC_AGENT_DROPPED: return "dropped";
	}
	return "unknown";
}

const char *pc_agent_wait_status_name(pc_agent_wait_status_t s)
{
	switch (s) {
	case PC_AGENT_WAIT_OK: return "ok";
	case PC_AGENT_WAIT_ERROR: return "error";
	case PC_AGENT_WAIT_TIMEOUT: return "timeout";
	}
	return "unknown";
}

/* ---- lifecycle ---- */

static int start_embedded(pc_agent_t *a, const pc_agent_embedded_llm_t *llm, const char *scenario)
{
	if (!llm || !llm->start)
		return PC_EINVAL; /* an embedded provider, and nothing to run it */
	char err[256] = "";
	uint16_t port = 0;
	int rc = llm->start(a->io, scenario ? scenario : DEMO_SCENARIO, &a->embedded, &port, err, sizeof(err));
	if (rc != 0)
		return rc;
	a->embedded_llm = llm;
	a->embedded_port = port;
	snprintf(a->mock_root_url, sizeof(a->mock_root_url), "http://127.0.0.1:%u", (unsigned)port);
	snprintf(a->mock_base_url, sizeof(a->mock_base_url), "http://127.0.0.1:%u/v1", (unsigned)port);
	return 0;
}

/* The tools of an agent that brings none: the built-ins, the file tools
 * and exec/process under the configured policy (tools.md). */
static int own_tools(pc_agent_t *a)
{
	static const pc_exec_mode_t modes[] = {[PC_CONFIG_EXEC_FULL] = PC_EXEC_FULL,
					       [PC_CONFIG_EXEC_ALLOWLIST] = PC_EXEC_ALLOWLIST,
					       [PC_CONFIG_EXEC_OFF] = PC_EXEC_OFF};
	const pc_exec_config_t *e = &a->cfg->agent.exec;
	pc_exec_policy_t policy = {
		.mode = modes[e->mode],
		.allow = e->allow,
		.n_allow = e->allow_count,
		.env_keep_also = e->env,
		.n_env_keep_also = e->env_count,
		.default_timeout_s = (uint32_t)(e->timeout_ms / 1000),
	};
	if (policy.default_timeout_s > PC_EXEC_MAX_TIMEOUT_S)
		policy.max_timeout_s = policy.default_timeout_s;
	int rc = pc_tool_registry_new(&a->own_tools);
	if (rc == 0)
		rc = pc_tool_register_builtins(a->own_tools);
	if (rc == 0)
		rc = pc_tool_register_fs(a->own_tools);
	if (rc == 0)
		rc = pc_process_table_new(&(pc_process_table_config_t){.no_cgroup = e->cgroup_off}, &a->processes);
	if (rc == 0)
		rc = pc_tool_register_exec(a->own_tools, &policy, a->processes);
	return rc;
}

void pc_agent_io_config(const pc_config_t *cfg, uint32_t threads, pc_io_config_t *out)
{
	*out = (pc_io_config_t){.threads = threads ? threads : 1};
	uint32_t lane = cfg ? cfg->agent.max_concurrent : 0;
	/* Zero keeps a default: 64 per host, 256 idle. */
	out->max_host_connections = lane > 64 ? lane : 0;
	out->max_idle_connections = lane > 256 ? lane : 0;
}

int pc_agent_new(const pc_agent_options_t *o, pc_agent_t **out)
{
	if (!o || !out || !o->rt || !o->io || !o->store || !o->config)
		return PC_EINVAL;
	*out = NULL;
	pc_agent_t *a = calloc(1, sizeof(*a));
	if (!a)
		return PC_ENOMEM;
	a->rt = o->rt;
	a->io = o->io;
	a->store = o->store;
	a->cfg = o->config;
	a->hooks = o->hooks;
	pc__session_dir_init(a);
	pthread_mutex_init(&a->context.lock, NULL);
	pc__slab_init(&a->session_slab, pc__session_state_size(), 64);
	uint8_t r[8];
	if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r))
		memset(r, 0, sizeof(r));
	for (int i = 0; i < 8; i++)
		snprintf(a->id_prefix + 2 * i, 3, "%02x", r[i]);
	a->log = o->log;
	a->log_content = o->log_content;
	a->trace = pc_trace_parse(getenv("PINCER_TRACE"));
	int rc = pc__owner_make(a->owner, sizeof(a->owner), a->id_prefix);
	if (o->lock_dir) {
		a->lock_dir = strdup(o->lock_dir);
	} else {
		/* next to the store the configuration names, else the default one */
		char path[4096];
		if (a->cfg->store_path)
			rc = snprintf(path, sizeof(path), "%s", a->cfg->store_path) < (int)sizeof(path) ? 0 : PC_ELIMIT;
		else
			rc = pc_store_default_path(path, sizeof(path));
		char *slash = rc == 0 ? strrchr(path, '/') : NULL;
		if (slash)
			*slash = '\0';
		/* the default state directory, which a SQLite store would have
		 * made, is this agent's to make when the store is elsewhere
		 * (PostgreSQL) */
		if (rc == 0 && slash && !a->cfg->store_path && mkdir(path, 0700) != 0 && errno != EEXIST)
			rc = PC_ESYS;
		if (rc == 0) {
			size_t n = strlen(slash ? path : ".") + 8;
			a->lock_dir = malloc(n);
			if (a->lock_dir)
				snprintf(a->lock_dir, n, "%s/locks", slash ? path : ".");
		}
	}
	if (rc == 0 && !a->lock_dir)
		rc = PC_ENOMEM;
	if (rc == 0 && mkdir(a->lock_dir, 0700) != 0 && errno != EEXIST)
		rc = PC_ESYS;
	if (rc == 0 && !o->tools)
		rc = own_tools(a);
	a->tools = o->tools ? o->tools : a->own_tools;
	/* the registry is complete now: the schemas every request offers are
	 * built once and shared (read-only) by every attempt */
	if (rc == 0)
		rc = pc_tool_schemas(a->tools, a->cfg->agent.tools_allow, a->cfg->agent.tools_allow_count,
				     &a->tool_schemas);
	if (rc == 0 && cJSON_GetArraySize(a->tool_schemas) == 0) {
		cJSON_Delete(a->tool_schemas);
		a->tool_schemas = NULL;
	}
	for (int api = PC_API_NONE + 1; rc == 0 && api < PC_API_COUNT; api++)
		rc = pc_request_tools_json((pc_provider_api_t)api, a->tool_schemas, &a->tools_json[api]);
	if (rc == 0)
		rc = pc_cooldowns_new(&a->cooldowns);
	if (rc == 0)
		rc = pc_run_registry_new(&a->runs);
	if (rc == 0)
		rc = pc__agent_feed_new(a);
	if (rc == 0)
		rc = pc_lane_new(a->rt, a->cfg->agent.max_concurrent ? a->cfg->agent.max_concurrent : 8, &a->lane);
	if (rc == 0)
		rc = pc__agent_metrics_new(a);
	if (rc == 0)
		rc = pc__reaper_start(a);
	for (size_t i = 0; rc == 0 && i < a->cfg->provider_count; i++)
		if (a->cfg->providers[i].embedded && !a->embedded)
			rc = start_embedded(a, o->embedded_llm, o->mock_scenario);
	/* last: what it recovers may start running at once */
	if (rc == 0)
		rc = pc__agent_recover(a, &a->recovered);
	if (rc == 0 && (a->recovered.rerun || a->recovered.interrupted))
		(void)pc_log_kv(a->log, PC_LOG_WARN, "recovered the runs a stopped process left",
				PC_LF_INT("rerun", a->recovered.rerun), PC_LF_INT("interrupted", a->recovered.interrupted));
	if (rc != 0) {
		pc_agent_free(a, 0);
		return rc;
	}
	*out = a;
	return 0;
}

static bool quiet(pc_agent_t *a)
{
	return __atomic_load_n(&a->stats.sessions_live, __ATOMIC_ACQUIRE) == 0 &&
	       __atomic_load_n(&a->stats.runs_live, __ATOMIC_ACQUIRE) == 0 &&
	       __atomic_load_n(&a->stats.attempts_live, __ATOMIC_ACQUIRE) == 0 &&
	       __atomic_load_n(&a->stats.jobs_live, __ATOMIC_ACQUIRE) == 0 &&
	       pc_tool_registry_live(a->tools) == 0;
}

size_t pc_agent_abort_all(pc_agent_t *a)
{
	pc_actor_t **v = NULL;
	size_t n = a ? pc__sessions_collect(a, &v) : 0;
	for (size_t i = 0; i < n; i++) {
		pc_send_signal(v[i], PC__MSG_SESSION_ABORT_ALL);
		pc_actor_release(v[i]);
	}
	free(v);
	return n;
}

void pc_agent_free(pc_agent_t *a, int64_t grace_ms)
{
	if (!a)
		return;
	__atomic_store_n(&a->stopping, true, __ATOMIC_RELEASE);
	pc__reaper_stop(a);
	pc_actor_t **v = NULL;
	size_t n = pc__sessions_collect(a, &v);
	for (size_t i = 0; i < n; i++)
		pc_send_signal(v[i], PC__MSG_SESSION_ABORT_ALL);
	uint64_t until = grace_ms < 0 ? UINT64_MAX : pc_runtime_now_ms() + (uint64_t)grace_ms;
	while (a->runs && pc_run_registry_active_count(a->runs) > 0 && pc_runtime_now_ms() < until) {
		struct timespec ts = {0, 2000000};
		nanosleep(&ts, NULL);
	}
	for (size_t i = 0; i < n; i++) {
		pc_actor_stop(v[i], PC_EXIT_SHUTDOWN);
		pc_actor_release(v[i]);
	}
	free(v);
	/* Every actor and job that touches the agent has stopped (their stop
	 * handlers use the lane, the registry and the tools). Not bounded by
	 * the grace: freeing under a live actor would be a use after free. */
	while (!quiet(a)) {
		struct timespec ts = {0, 1000000};
		nanosleep(&ts, NULL);
	}
	if (a->embedded_llm && a->embedded_llm->stop)
		a->embedded_llm->stop(a->embedded);
	pc_lane_free(a->lane);
	pc_metrics_free(a->metrics.reg);
	pc__session_dir_free(a);
	pc__slab_destroy(&a->session_slab);
	pc_run_registry_free(a->runs);
	pc__agent_feed_free(a);
	cJSON_Delete(a->tool_schemas);
	for (size_t i = 0; i < sizeof(a->tools_json) / sizeof(a->tools_json[0]); i++)
		cJSON_free(a->tools_json[i]);
	pc_tool_registry_free(a->own_tools);
	pc_process_table_free(a->processes);
	free(a->context.text);
	pthread_mutex_destroy(&a->context.lock);
	pc_cooldowns_free(a->cooldowns);
	free(a->lock_dir);
	free(a);
}

/* ---- the API ---- */

/* Whether `s` (NULL: absent) is text a session can hold: a provider
 * refuses a request with a byte that is not UTF-8, and then every later
 * one of the session, since the transcript keeps it. */
static bool text_ok(const char *s)
{
	return !s || pc_utf8_valid(s, strlen(s));
}

static const char *session_key_of(const pc_agent_params_t *p)
{
	return p->session_key && p->session_key[0] ? p->session_key : "main";
}

bool pc_agent_run_id_ok(const char *id)
{
	size_t n = strlen(id);
	if (!n || n > PC_RUN_ID_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)id[i] <= ' ' || (unsigned char)id[i] >= 0x7f)
			return false;
	return true;
}

static int submit_msg(pc_agent_t *a, const pc_agent_params_t *p, pc_msg_t **out)
{
	if (!a || !p || !p->message || !out)
		return PC_EINVAL;
	if (__atomic_load_n(&a->stopping, __ATOMIC_ACQUIRE))
		return PC_ESTOPPED;
	const char *key = session_key_of(p);
	int rc = pc__session_key_ok(key);
	if (rc != 0)
		return rc;
	if (p->idempotency_key && strlen(p->idempotency_key) > PC_STORE_NAME_MAX)
		return PC_EINVAL;
	const char *texts[] = {p->message, p->idempotency_key, p->model, p->trigger, p->queue_mode,
			       p->extra_system_prompt};
	for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++)
		if (!text_ok(texts[i]))
			return PC_EINVAL;
	pc_think_level_t think;
	if (p->thinking && pc_think_level_parse(p->thinking, &think) != 0)
		return PC_EINVAL;
	if (p->run_id && !pc_agent_run_id_ok(p->run_id))
		return PC_EINVAL;
	return pc__submit_encode(p, key, NULL, out);
}

int pc_agent_submit(pc_agent_t *a, const pc_agent_params_t *p, pc_agent_accepted_t *out)
{
	pc_msg_t *m = NULL;
	int rc = submit_msg(a, p, &m);
	if (rc != 0)
		return rc;
	pc_msg_t *reply = NULL;
	rc = pc__session_ask_sync(a, session_key_of(p), m, PC_STORE_DEFAULT_TIMEOUT_MS, &reply);
	if (rc != 0)
		return rc;
	const pc_agent_submit_reply_t *r = pc_msg_cdata(reply);
	rc = r->rc;
	if (rc == 0 && out)
		*out = r->accepted;
	pc_msg_free(reply);
	return rc;
}

int pc_agent_submit_async(pc_agent_t *a, const pc_agent_params_t *p, pc_actor_t *reply_to, uint64_t corr)
{
	if (!reply_to)
		return PC_EINVAL;
	pc_msg_t *m = NULL;
	int rc = submit_msg(a, p, &m);
	if (rc != 0)
		return rc;
	return pc__session_send(a, session_key_of(p), m, true, reply_to, corr);
}

static pc_agent_wait_status_t wait_status(pc_run_status_t s)
{
	return s == PC_RUN_STATUS_OK ? PC_AGENT_WAIT_OK : PC_AGENT_WAIT_ERROR;
}

int pc_agent_wait(pc_agent_t *a, const char *run_id, int64_t timeout_ms, pc_agent_wait_result_t *out)
{
	if (!a || !run_id || !out)
		return PC_EINVAL;
	memset(out, 0, sizeof(*out));
	int rc = pc_run_registry_wait(a->runs, run_id, timeout_ms ? timeout_ms : PC_AGENT_WAIT_DEFAULT_MS,
				      &out->run);
	if (rc == 0) {
		out->status = wait_status(out->run.status);
		return 0;
	}
	if (rc == PC_ETIMEDOUT) {
		out->status = PC_AGENT_WAIT_TIMEOUT;
		return 0;
	}
	if (rc != PC_ENOTFOUND)
		return rc;
	/* not in memory: an older run, or another process's, from the store */
	pc_store_reply_t r;
	rc = pc_store_run_get(a->store, run_id, &r);
	if (rc != 0)
		return rc;
	pc_agent_run_info_from_store(&r, &out->run);
	snprintf(out->run.run_id, sizeof(out->run.run_id), "%s", run_id);
	/* still running elsewhere: this wait cannot see it end */
	out->status = pc_run_status_terminal(out->run.status) ? wait_status(out->run.status) : PC_AGENT_WAIT_TIMEOUT;
	return 0;
}

void pc_agent_run_info_from_store(const pc_store_reply_t *r, pc_run_info_t *out)
{
	memset(out, 0, sizeof(*out));
	out->started_ms = r->started_ms;
	out->ended_ms = r->ended_ms;
	out->replay_invalid = (r->flags & PC_STORE_REPLAY_INVALID) != 0;
	snprintf(out->error_kind, sizeof(out->error_kind), "%.31s", r->code);
	switch (r->status) {
	case PC_STORE_RUN_OK: out->status = PC_RUN_STATUS_OK; return;
	case PC_STORE_RUN_ABORTED: out->status = PC_RUN_STATUS_ABORTED; return;
	case PC_STORE_RUN_TIMEOUT: out->status = PC_RUN_STATUS_TIMEOUT; return;
	case PC_STORE_RUN_ERROR: break;
	default:
		/* accepted by a process that is running it or has it queued (a
		 * gone process's runs were recovered when this one started) */
		out->status = PC_RUN_STATUS_RUNNING;
		return;
	}
	out->status = PC_RUN_STATUS_ERROR;
	snprintf(out->error, sizeof(out->error), "%s",
		 !strcmp(r->code, "run_interrupted")
			 ? "the run was interrupted: the process running it stopped (crash or kill) before it ended"
		 : !strcmp(r->code, "node_lost")
			 ? "the run was interrupted by node loss: the cluster node running it was lost before it ended"
		 : r->code[0] ? r->code
			      : "the run failed");
}

void pc_agent_recovered(const pc_agent_t *a, pc_agent_recovery_t *out)
{
	*out = a ? a->recovered : (pc_agent_recovery_t){0};
}

void pc_agent_cluster_join(pc_agent_t *a)
{
	a->node_bound = true;
}

void pc_agent_node_renewed(pc_agent_t *a, uint64_t deadline_ms)
{
	__atomic_store_n(&a->node_deadline_ms, deadline_ms, __ATOMIC_RELEASE);
}

bool pc_agent_node_live(const pc_agent_t *a)
{
	return !a->node_bound || pc_runtime_now_ms() < __atomic_load_n(&a->node_deadline_ms, __ATOMIC_ACQUIRE);
}

size_t pc_agent_node_lapsed(pc_agent_t *a)
{
	__atomic_add_fetch(&a->stats.node_lapses, 1, __ATOMIC_RELAXED);
	pc_actor_t **v = NULL;
	size_t n = pc__sessions_collect(a, &v);
	for (size_t i = 0; i < n; i++) {
		pc_send_signal(v[i], PC__MSG_SESSION_LAPSED);
		pc_actor_release(v[i]);
	}
	free(v);
	return n;
}


int pc_agent_watch(pc_agent_t *a, const char *run_id, pc_actor_t *who, uint64_t corr)
{
	if (!a || !run_id || !who)
		return PC_EINVAL;
	return pc_run_registry_watch(a->runs, run_id, who, PC_MSG_AGENT_RUN_INFO, corr);
}

static void *bus_retain(void *b) { return pc_event_bus_retain(b); }

int pc_agent_result(pc_agent_t *a, const char *run_id, char **json)
{
	if (!a || !run_id || !json)
		return PC_EINVAL;
	*json = NULL;
	pc_event_bus_t *bus = pc_run_registry_attachment(a->runs, run_id, bus_retain);
	if (!bus)
		return PC_ENOTFOUND;
	int rc = PC_ESTATE;
	if (pc_event_bus_ended(bus)) {
		pc_event_sub_t *s = NULL;
		pc_event_sub_config_t sc = {.capacity = 4};
		rc = pc_event_sub_new(&sc, &s);
		if (rc == 0)
			rc = pc_event_bus_attach(bus, s, true);
		pc_event_t *e = NULL;
		if (rc == 0 && pc_event_sub_take(s, &e, 1) == 1) {
			*json = strdup(e->data);
			rc = *json ? 0 : PC_ENOMEM;
			pc_event_release(e);
		} else if (rc == 0) {
			rc = PC_ESTATE;
		}
		if (s)
			pc_event_bus_detach(bus, s);
		pc_event_sub_release(s);
	}
	pc_event_bus_release(bus);
	return rc;
}

int pc_agent_subscribe_run(pc_agent_t *a, const char *run_id, pc_event_sub_t *s)
{
	if (!a || !run_id || !s)
		return PC_EINVAL;
	pc_event_bus_t *bus = pc_run_registry_attachment(a->runs, run_id, bus_retain);
	if (!bus)
		return PC_ENOTFOUND;
	int rc = pc_event_bus_attach(bus, s, true);
	pc_event_bus_release(bus);
	return rc;
}

int pc_agent_subscribe_session(pc_agent_t *a, const char *session_key, pc_event_sub_t *s)
{
	if (!a || !session_key || !s || pc__session_key_ok(session_key) != 0)
		return PC_EINVAL;
	pc_event_hub_t *hub = pc__session_hub(a, session_key);
	if (!hub)
		return PC_ENOMEM;
	int rc = pc_event_hub_attach(hub, s);
	pc_event_hub_release(hub);
	return rc;
}

void pc_agent_unsubscribe_session(pc_agent_t *a, const char *session_key, pc_event_sub_t *s)
{
	if (!a || !session_key || !s)
		return;
	pc_event_hub_t *hub = pc__session_hub(a, session_key);
	if (hub) {
		pc_event_hub_detach(hub, s);
		pc_event_hub_release(hub);
	}
}

int pc_agent_abort_run(pc_agent_t *a, const char *run_id)
{
	if (!a || !run_id)
		return PC_EINVAL;
	pc_run_info_t info;
	int rc = pc_run_registry_get(a->runs, run_id, &info);
	if (rc != 0)
		return rc;
	if (pc_run_status_terminal(info.status))
		return PC_ESTATE;
	pc_actor_t *run = pc_run_registry_actor(a->runs, run_id);
	if (run) {
		rc = pc_send_signal(run, PC__MSG_RUN_ABORT);
		pc_actor_release(run);
		return rc == PC_ESTOPPED ? PC_ESTATE : rc;
	}
	pc_msg_t *m = pc__text_msg(PC__MSG_SESSION_ABORT_RUN, run_id);
	return m ? pc__session_send(a, info.session_key, m, false, NULL, 0) : PC_ENOMEM;
}

int pc_agent_abort_session(pc_agent_t *a, const char *session_key)
{
	if (!a || !session_key)
		return PC_EINVAL;
	pc_msg_t *m = pc_msg_new(PC__MSG_SESSION_ABORT_ALL, 0);
	if (!m)
		return PC_ENOMEM;
	int rc = pc__session_send(a, session_key, m, false, NULL, 0);
	return rc == PC_ENOTFOUND ? 0 : rc;
}

int pc_agent_steer(pc_agent_t *a, const char *session_key, const char *text)
{
	if (!a || !session_key || !text || !text_ok(text))
		return PC_EINVAL;
	pc_msg_t *m = pc__text_msg(PC__MSG_SESSION_STEER, text);
	if (!m)
		return PC_ENOMEM;
	pc_actor_t *to = NULL;
	int rc = pc__session_target(a, session_key, false, &to);
	if (rc != 0) {
		pc_msg_free(m);
		return rc;
	}
	pc_msg_t *reply = NULL;
	rc = pc_ask_sync(to, m, 5000, &reply);
	pc_actor_release(to);
	if (rc != 0)
		return rc;
	rc = (int)*(const int64_t *)pc_msg_cdata(reply);
	pc_msg_free(reply);
	return rc;
}

_Static_assert(sizeof(((pc_agent_stats_t *)0)->runs_ended) / sizeof(uint64_t) == PC__RUN_OUTCOMES,
	       "runs_ended has a slot per outcome");

void pc_agent_stats(pc_agent_t *a, pc_agent_stats_t *out)
{
	memset(out, 0, sizeof(*out));
	out->sessions_live = __atomic_load_n(&a->stats.sessions_live, __ATOMIC_RELAXED);
	out->runs_started = __atomic_load_n(&a->stats.runs_started, __ATOMIC_RELAXED);
	out->runs_finished = __atomic_load_n(&a->stats.runs_finished, __ATOMIC_RELAXED);
	out->runs_active = pc_run_registry_active_count(a->runs);
	for (size_t k = 0; k < PC__RUN_OUTCOMES; k++) {
		double v = 0;
		if (pc_metric_value(a->metrics.runs[k], &v) == 0)
			out->runs_ended[k] = (uint64_t)v;
	}
	out->attempts = __atomic_load_n(&a->stats.attempts, __ATOMIC_RELAXED);
	out->tool_calls = __atomic_load_n(&a->stats.tool_calls, __ATOMIC_RELAXED);
	out->tool_loops_blocked = __atomic_load_n(&a->stats.tool_loops_blocked, __ATOMIC_RELAXED);
	out->long_running = __atomic_load_n(&a->stats.diag[PC_DIAG_LONG_RUNNING], __ATOMIC_RELAXED);
	out->stalled = __atomic_load_n(&a->stats.diag[PC_DIAG_STALLED], __ATOMIC_RELAXED);
	out->stuck = __atomic_load_n(&a->stats.diag[PC_DIAG_STUCK], __ATOMIC_RELAXED);
	out->recoveries = __atomic_load_n(&a->stats.diag_recoveries, __ATOMIC_RELAXED);
	out->usage_write_errors = __atomic_load_n(&a->stats.usage_write_errors, __ATOMIC_RELAXED);
	out->node_lapses = __atomic_load_n(&a->stats.node_lapses, __ATOMIC_RELAXED);
	out->tools_fenced = __atomic_load_n(&a->stats.tools_fenced, __ATOMIC_RELAXED);
	out->runs_taken_over = __atomic_load_n(&a->stats.runs_taken_over, __ATOMIC_RELAXED);
	out->leases_held = __atomic_load_n(&a->stats.leases_held, __ATOMIC_RELAXED);
	pc_lane_stats_t ls;
	pc_lane_stats(a->lane, &ls);
	out->lane_active = ls.active;
	out->lane_queued = ls.queued;
	out->lane_peak = ls.peak_active;
	out->lane_max = ls.max;
}

uint16_t pc_agent_mock_port(const pc_agent_t *a) { return a && a->embedded ? a->embedded_port : 0; }

pc_store_t *pc_agent_store(pc_agent_t *a) { return a ? a->store : NULL; }

const char *pc_agent_owner(const pc_agent_t *a) { return a ? a->owner : NULL; }

int pc_agent_usage(pc_agent_t *a, const char *run_id, const char *session_key, pc_store_usage_list_t **out)
{
	if (out)
		*out = NULL;
	if (!a || !out)
		return PC_EINVAL;
	return pc_store_usage_list(a->store, run_id, session_key, out);
}

int pc_agent_run_info(pc_agent_t *a, const char *run_id, pc_run_info_t *out)
{
	if (!a || !run_id || !out)
		return PC_EINVAL;
	return pc_run_registry_get(a->runs, run_id, out);
}

int pc_agent_active_run(pc_agent_t *a, const char *session_key, char *run_id)
{
	if (!a || !session_key || !run_id)
		return PC_EINVAL;
	return pc_run_registry_active(a->runs, session_key, run_id, NULL);
}
