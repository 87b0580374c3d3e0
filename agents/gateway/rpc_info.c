/*
 * What the gateway tells OpenClaw's Control UI and CLI about itself, in
 * OpenClaw's shapes, from what Pincer has: the assistant's identity, its
 * one agent, the running configuration (secrets redacted, writes refused),
 * which providers have a key, the updater it lacks, its stability figures
 * and the host it runs on. Each answer is built at once: nothing here
 * waits.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "runtime/clock.h"
#include "agents/obs/obs.h"
#include "rpc_internal.h"

/* ---- agent.identity.get, agents.list ---- */

const pc__gw_param_t pc__gw_identity_spec[2] = {
	{"agentId", PC__GW_T_STRING, false},
	{"sessionKey", PC__GW_T_STRING, false},
};

static cJSON *identity(void)
{
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "agentId", PC__GW_AGENT_ID);
	cJSON_AddStringToObject(o, "name", PC__GW_ASSISTANT_NAME);
	/* OpenClaw's word for a name no configuration gave */
	cJSON_AddStringToObject(o, "nameSource", "default");
	cJSON_AddStringToObject(o, "avatar", PC__GW_ASSISTANT_AVATAR);
	return o;
}

/* Every session here is the one agent's: a session key names no other. */
void pc__gw_m_identity(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *id, const cJSON *params)
{
	(void)ctx;
	const char *agent = pc__gw_str(params, "agentId");
	if (agent && *agent && strcmp(agent, PC__GW_AGENT_ID) != 0) {
		pc__gw_invalid(c, id, "agent.identity.get", "agentId: unknown agent (this gateway serves \"main\")");
		return;
	}
	pc__gw_reply_ok(c, id, identity());
}

static void add_ref(cJSON *o, const char *key, const pc_model_ref_t *r)
{
	char s[512];
	snprintf(s, sizeof(s), "%s/%s", r->provider, r->model);
	if (cJSON_IsArray(o))
		cJSON_AddItemToArray(o, cJSON_CreateString(s));
	else
		cJSON_AddStringToObject(o, key, s);
}

void pc__gw_m_agents_list(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *id, const cJSON *params)
{
	(void)ctx;
	(void)params;
	const pc_agent_defaults_t *a = &c->g->cfg->agent;
	cJSON *p = cJSON_CreateObject();
	cJSON_AddStringToObject(p, "defaultId", PC__GW_AGENT_ID);
	cJSON_AddBoolToObject(p, "selectionRequired", false);
	cJSON_AddStringToObject(p, "mainKey", "main");
	/* sessions are named by the client's key, never merged into one */
	cJSON_AddStringToObject(p, "scope", "per-sender");
	cJSON *agent = cJSON_CreateObject();
	cJSON_AddStringToObject(agent, "id", PC__GW_AGENT_ID);
	cJSON_AddStringToObject(agent, "name", PC__GW_ASSISTANT_NAME);
	cJSON *ident = cJSON_AddObjectToObject(agent, "identity");
	cJSON_AddStringToObject(ident, "name", PC__GW_ASSISTANT_NAME);
	cJSON_AddStringToObject(ident, "avatar", PC__GW_ASSISTANT_AVATAR);
	char cwd[4096];
	const char *ws = a->workspace ? a->workspace : getcwd(cwd, sizeof(cwd));
	if (ws)
		cJSON_AddStringToObject(agent, "workspace", ws);
	cJSON *model = cJSON_AddObjectToObject(agent, "model");
	if (a->model.provider && a->model.model)
		add_ref(model, "primary", &a->model);
	if (a->fallback_count) {
		cJSON *fb = cJSON_AddArrayToObject(model, "fallbacks");
		for (size_t i = 0; i < a->fallback_count; i++)
			add_ref(fb, NULL, &a->fallbacks[i]);
	}
	cJSON_AddStringToObject(agent, "thinkingDefault", pc_think_level_name(a->think));
	cJSON *list = cJSON_AddArrayToObject(p, "agents");
	cJSON_AddItemToArray(list, agent);
	pc__gw_reply_ok(c, id, p);
}

/* ---- config.get and the writes refused ---- */

#define REDACTED "__OPENCLAW_REDACTED__" /* OpenClaw's mark for a value withheld */

/* A key that names a secret: its string value is never sent. */
static bool secret_key(const char *k)
{
	static const char *const words[] = {"key", "token", "password", "secret", "credential", "cookie"};
	char low[128];
	size_t n = 0;
	for (; k[n] && n < sizeof(low) - 1; n++)
		low[n] = (char)tolower((unsigned char)k[n]);
	low[n] = '\0';
	for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++)
		if (strstr(low, words[i]))
			return true;
	return false;
}

/* pc_config_to_json masks the secrets it knows ("***"); a plugin's own
 * configuration is free-form, so every string under a secret's name goes. */
static void redact(cJSON *o)
{
	cJSON *it;
	cJSON_ArrayForEach(it, o) {
		if (cJSON_IsString(it) && it->string && secret_key(it->string))
			cJSON_SetValuestring(it, REDACTED);
		else if (cJSON_IsObject(it) || cJSON_IsArray(it))
			redact(it);
	}
}

void pc__gw_m_config_get(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *id, const cJSON *params)
{
	(void)ctx;
	(void)params;
	const pc_config_t *cfg = c->g->cfg;
	char *text = NULL;
	cJSON *conf = pc_config_to_json(cfg, &text) == 0 ? cJSON_Parse(text) : NULL;
	free(text);
	char *raw = NULL;
	if (conf) {
		redact(conf);
		raw = cJSON_Print(conf);
	}
	if (!raw) {
		cJSON_Delete(conf);
		pc__gw_reply_error(c, id, "UNAVAILABLE", "the configuration cannot be printed now", NULL, NULL, true);
		return;
	}
	/* The snapshot of what runs: the file as loaded, defaults and
	 * environment overrides applied. No hash: nothing can be written
	 * back against it. */
	cJSON *p = cJSON_CreateObject();
	if (cfg->source)
		cJSON_AddStringToObject(p, "path", cfg->source);
	else
		cJSON_AddNullToObject(p, "path");
	cJSON_AddBoolToObject(p, "exists", cfg->source != NULL);
	cJSON_AddStringToObject(p, "raw", raw);
	cJSON_free(raw);
	cJSON_AddItemToObject(p, "parsed", cJSON_Duplicate(conf, true));
	cJSON_AddItemToObject(p, "resolved", cJSON_Duplicate(conf, true));
	cJSON_AddItemToObject(p, "config", conf);
	cJSON_AddBoolToObject(p, "valid", true);
	cJSON_AddArrayToObject(p, "issues");
	cJSON_AddArrayToObject(p, "warnings");
	cJSON_AddArrayToObject(p, "legacyIssues");
	pc__gw_reply_ok(c, id, p);
}

/* config.set, config.patch, config.apply. */
void pc__gw_m_config_write(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *id, const cJSON *params)
{
	(void)ctx;
	(void)params;
	pc__gw_reply_error(c, id, "INVALID_REQUEST",
			   "the configuration is read-only here: Pincer reads its file once at start and never "
			   "writes it; edit the file and restart the gateway",
			   NULL, NULL, false);
}

/* ---- models.authStatus, update.status ---- */

/* A provider is "static" (a key from the configuration, nothing to
 * refresh) or "missing"; no key is ever sent. */
void pc__gw_m_models_auth(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *id, const cJSON *params)
{
	(void)ctx;
	(void)params;
	const pc_config_t *cfg = c->g->cfg;
	cJSON *p = cJSON_CreateObject();
	cJSON_AddNumberToObject(p, "ts", (double)pc__clock_wall_ms());
	cJSON *list = cJSON_AddArrayToObject(p, "providers");
	for (size_t i = 0; i < cfg->provider_count; i++) {
		const pc_provider_config_t *pv = &cfg->providers[i];
		cJSON *o = cJSON_CreateObject();
		cJSON_AddStringToObject(o, "provider", pv->id);
		cJSON_AddStringToObject(o, "authProvider", pv->id);
		cJSON_AddStringToObject(o, "displayName", pv->id);
		cJSON *profs = cJSON_CreateArray();
		bool any = false;
		for (size_t j = 0; j < pv->profile_count; j++) {
			bool has = pv->profiles[j].api_key && *pv->profiles[j].api_key;
			any = any || has;
			cJSON *pr = cJSON_CreateObject();
			cJSON_AddStringToObject(pr, "profileId", pv->profiles[j].id);
			cJSON_AddStringToObject(pr, "type", "api_key");
			cJSON_AddStringToObject(pr, "status", has ? "static" : "missing");
			cJSON_AddStringToObject(pr, "source", "config");
			cJSON_AddItemToArray(profs, pr);
		}
		cJSON_AddStringToObject(o, "status", any ? "static" : "missing");
		cJSON_AddItemToObject(o, "profiles", profs);
		cJSON_AddItemToArray(list, o);
	}
	pc__gw_reply_ok(c, id, p);
}

/* Pincer has no updater: no restart sentinel, no run, nothing known to be
 * newer. */
void pc__gw_m_update_status(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *id, const cJSON *params)
{
	(void)ctx;
	(void)params;
	cJSON *p = cJSON_CreateObject();
	cJSON_AddNullToObject(p, "sentinel");
	cJSON_AddNullToObject(p, "updateAvailable");
	pc__gw_reply_ok(c, id, p);
}

/* ---- diagnostics.stability ---- */

const pc__gw_param_t pc__gw_stability_spec[3] = {
	{"limit", PC__GW_T_UINT, false},
	{"type", PC__GW_T_STRING, false},
	{"sinceSeq", PC__GW_T_UINT, false},
};

static void add_u64(cJSON *o, const char *k, uint64_t v) { cJSON_AddNumberToObject(o, k, (double)v); }

/* Pincer's figures beside OpenClaw's snapshot: counters since start, read
 * now (the same as /metrics). */
static cJSON *pincer_figures(pc_gateway_t *g)
{
	pc_agent_stats_t st;
	pc_agent_stats(g->agent, &st);
	pc_runtime_stats_t rs;
	pc_runtime_stats(g->rt, &rs, NULL, 0);
	pc_mailbox_stats_t mb;
	pc_runtime_mailbox_stats(g->rt, &mb);
	cJSON *o = cJSON_CreateObject();
	add_u64(o, "uptimeMs", pc_runtime_now_ms() - g->started_mono_ms);
	cJSON *runs = cJSON_AddObjectToObject(o, "runs");
	add_u64(runs, "started", st.runs_started);
	add_u64(runs, "finished", st.runs_finished);
	add_u64(runs, "active", st.runs_active);
	static const char *const outcomes[4] = {"ok", "error", "aborted", "timeout"};
	for (size_t k = 0; k < 4; k++)
		add_u64(runs, outcomes[k], st.runs_ended[k]);
	add_u64(runs, "attempts", st.attempts);
	cJSON *sess = cJSON_AddObjectToObject(o, "sessions");
	add_u64(sess, "live", st.sessions_live);
	add_u64(sess, "longRunning", st.long_running);
	add_u64(sess, "stalled", st.stalled);
	add_u64(sess, "stuck", st.stuck);
	add_u64(sess, "recoveries", st.recoveries);
	cJSON *lane = cJSON_AddObjectToObject(o, "lane");
	add_u64(lane, "active", st.lane_active);
	add_u64(lane, "queued", st.lane_queued);
	add_u64(lane, "peak", st.lane_peak);
	add_u64(lane, "max", st.lane_max);
	cJSON *act = cJSON_AddObjectToObject(o, "actors");
	add_u64(act, "live", rs.actors_live);
	add_u64(act, "spawned", rs.spawned);
	add_u64(act, "exited", rs.exited);
	add_u64(act, "deadLetters", rs.dead_letters);
	add_u64(act, "mutes", rs.mutes);
	add_u64(act, "mailboxQueued", mb.queued);
	add_u64(act, "mailboxDeepest", mb.deepest);
	add_u64(o, "usageWriteErrors", st.usage_write_errors);
	return o;
}

/* OpenClaw's snapshot is its ring of diagnostic events; Pincer records no
 * such events, so the ring is empty (capacity 0) and what it knows of its
 * health goes in `pincer`, with the memory reading OpenClaw's summary
 * carries. */
void pc__gw_m_stability(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *id, const cJSON *params)
{
	(void)ctx;
	const cJSON *limit = cJSON_GetObjectItemCaseSensitive(params, "limit");
	if (limit && (cJSON_GetNumberValue(limit) < 1 || cJSON_GetNumberValue(limit) > 1000)) {
		pc__gw_invalid(c, id, "diagnostics.stability", "limit: must be between 1 and 1000");
		return;
	}
	/* OpenClaw's Date.toISOString(): milliseconds, UTC */
	char day[24], ts[32];
	int64_t ms = pc__clock_wall_ms();
	time_t now = (time_t)(ms / 1000);
	struct tm tm;
	if (!gmtime_r(&now, &tm) || !strftime(day, sizeof(day), "%Y-%m-%dT%H:%M:%S", &tm))
		day[0] = '\0';
	snprintf(ts, sizeof(ts), "%s.%03dZ", day, (int)(ms % 1000));
	cJSON *p = cJSON_CreateObject();
	cJSON_AddStringToObject(p, "generatedAt", ts);
	cJSON_AddNumberToObject(p, "capacity", 0);
	cJSON_AddNumberToObject(p, "count", 0);
	cJSON_AddNumberToObject(p, "dropped", 0);
	cJSON_AddArrayToObject(p, "events");
	cJSON *sum = cJSON_AddObjectToObject(p, "summary");
	cJSON_AddObjectToObject(sum, "byType");
	pc_process_stats_t ps;
	if (pc_process_stats(&ps) == 0 && ps.resident_bytes > 0) {
		cJSON *mem = cJSON_AddObjectToObject(sum, "memory");
		cJSON_AddNumberToObject(cJSON_AddObjectToObject(mem, "latest"), "rssBytes", ps.resident_bytes);
		/* the kernel's peak (KiB on Linux), sampled apart from the reading
		 * above: never shown below it */
		struct rusage ru;
		double peak = getrusage(RUSAGE_SELF, &ru) == 0 ? (double)ru.ru_maxrss * 1024.0 : 0;
		cJSON_AddNumberToObject(mem, "maxRssBytes", peak > ps.resident_bytes ? peak : ps.resident_bytes);
		cJSON_AddNumberToObject(mem, "pressureCount", 0);
	}
	cJSON_AddItemToObject(p, "pincer", pincer_figures(c->g));
	pc__gw_reply_ok(c, id, p);
}

/* ---- system.info ---- */

/* Node's name for the machine's architecture, which OpenClaw reports. */
static const char *arch_name(const char *machine)
{
	static const char *const names[][2] = {
		{"x86_64", "x64"}, {"amd64", "x64"}, {"aarch64", "arm64"}, {"i686", "ia32"}, {"i386", "ia32"},
	};
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (!strcmp(machine, names[i][0]))
			return names[i][1];
	return machine;
}

/* The first "model name" of /proc/cpuinfo into out ("" when there is none). */
static void cpu_model(char *out, size_t cap)
{
	out[0] = '\0';
	FILE *f = fopen("/proc/cpuinfo", "r");
	if (!f)
		return;
	char line[512];
	while (fgets(line, sizeof(line), f)) {
		char *colon = strchr(line, ':');
		if (strncmp(line, "model name", 10) != 0 || !colon)
			continue;
		char *v = colon + 1;
		while (*v == ' ' || *v == '\t')
			v++;
		v[strcspn(v, "\n")] = '\0';
		snprintf(out, cap, "%s", v);
		break;
	}
	fclose(f);
}

/* OpenClaw's facts about the gateway's host and process, read now from the
 * kernel. nodeVersion is "": the gateway is not a Node process. */
void pc__gw_m_system_info(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *id, const cJSON *params)
{
	(void)ctx;
	(void)params;
	struct utsname u;
	if (uname(&u) != 0) {
		pc__gw_reply_error(c, id, "UNAVAILABLE", "the system cannot be described now", NULL, NULL, true);
		return;
	}
	char platform[sizeof(u.sysname)], label[sizeof(u.sysname) + sizeof(u.release) + 1];
	size_t n = 0;
	for (; u.sysname[n]; n++)
		platform[n] = (char)tolower((unsigned char)u.sysname[n]);
	platform[n] = '\0';
	snprintf(label, sizeof(label), "%s %s", u.sysname, u.release);
	cJSON *p = cJSON_CreateObject();
	cJSON_AddStringToObject(p, "machineName", u.nodename);
	cJSON_AddStringToObject(p, "hostname", u.nodename);
	cJSON_AddStringToObject(p, "platform", platform);
	cJSON_AddStringToObject(p, "release", u.release);
	cJSON_AddStringToObject(p, "arch", arch_name(u.machine));
	cJSON_AddStringToObject(p, "osLabel", label);
	if (c->g->port)
		cJSON_AddNumberToObject(p, "port", c->g->port);
	cJSON_AddStringToObject(p, "nodeVersion", "");
	cJSON_AddNumberToObject(p, "pid", (double)getpid());
	cJSON_AddNumberToObject(p, "uptimeMs", (double)(pc_runtime_now_ms() - c->g->started_mono_ms));
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	cJSON_AddNumberToObject(p, "cpuCount", cpus > 0 ? (double)cpus : 1);
	char model[256];
	cpu_model(model, sizeof(model));
	if (model[0])
		cJSON_AddStringToObject(p, "cpuModel", model);
	double load[3];
	if (getloadavg(load, 3) == 3)
		cJSON_AddItemToObject(p, "loadAverage", cJSON_CreateDoubleArray(load, 3));
	long page = sysconf(_SC_PAGESIZE), total = sysconf(_SC_PHYS_PAGES), avail = sysconf(_SC_AVPHYS_PAGES);
	cJSON_AddNumberToObject(p, "memoryTotalBytes", page > 0 && total > 0 ? (double)page * (double)total : 0);
	cJSON_AddNumberToObject(p, "memoryFreeBytes", page > 0 && avail > 0 ? (double)page * (double)avail : 0);
	pc__gw_reply_ok(c, id, p);
}
