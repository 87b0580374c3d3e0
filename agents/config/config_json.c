/*
 * A configuration back to JSON (`pincer config print`): every setting with
 * its effective value, defaults and environment overrides applied, secrets
 * masked.
 */
#include "config.h"
#include "config_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

/* Each add records a failure in *ok; cJSON ignores adds to a NULL parent,
 * so building can go on and be checked once at the end. */
static cJSON *j_obj(bool *ok, cJSON *parent, const char *key)
{
	cJSON *o = cJSON_AddObjectToObject(parent, key);
	*ok = *ok && o;
	return o;
}

static void j_num(bool *ok, cJSON *o, const char *key, double v)
{
	*ok = *ok && cJSON_AddNumberToObject(o, key, v);
}

static void j_str(bool *ok, cJSON *o, const char *key, const char *v)
{
	*ok = *ok && cJSON_AddStringToObject(o, key, v);
}

/* The store's URI with its password masked: in the user part
 * (user:password@) and as a password= parameter. */
static void store_url(bool *ok, cJSON *o, const char *url)
{
	size_t n = strlen(url);
	char *m = *ok ? malloc(n + 8) : NULL; /* one "***" longer at most per mask */
	if (!m) {
		*ok = false;
		return;
	}
	const char *auth = strstr(url, "://");
	auth = auth ? auth + 3 : url;
	size_t host = strcspn(auth, "/?");
	const char *at = memchr(auth, '@', host), *colon = at ? memchr(auth, ':', (size_t)(at - auth)) : NULL;
	if (colon)
		snprintf(m, n + 8, "%.*s***%s", (int)(colon + 1 - url), url, at);
	else
		snprintf(m, n + 8, "%s", url);
	char *pw = strstr(m, "password=");
	if (pw) {
		pw += 9;
		size_t len = strcspn(pw, "&");
		char *rest = pw + len;
		memmove(pw + 3, rest, strlen(rest) + 1);
		memcpy(pw, "***", 3);
	}
	j_str(ok, o, "url", m);
	free(m);
}

static void j_names(bool *ok, cJSON *o, const char *key, const char *const *names, size_t n)
{
	cJSON *arr = *ok ? cJSON_AddArrayToObject(o, key) : NULL;
	*ok = *ok && arr;
	for (size_t i = 0; *ok && i < n; i++) {
		cJSON *s = cJSON_CreateString(names[i]);
		*ok = s && cJSON_AddItemToArray(arr, s);
		if (!*ok)
			cJSON_Delete(s);
	}
}

static void j_bool(bool *ok, cJSON *o, const char *key, bool v)
{
	*ok = *ok && cJSON_AddBoolToObject(o, key, v);
}

static void j_ref(bool *ok, cJSON *o, const char *key, const pc_model_ref_t *r, cJSON *arr)
{
	size_t n = strlen(r->provider) + strlen(r->model) + 2;
	char *s = malloc(n);
	if (!s) {
		*ok = false;
		return;
	}
	snprintf(s, n, "%s/%s", r->provider, r->model);
	if (arr) {
		cJSON *item = cJSON_CreateString(s);
		*ok = *ok && item && cJSON_AddItemToArray(arr, item);
		if (!*ok)
			cJSON_Delete(item);
	} else {
		j_str(ok, o, key, s);
	}
	free(s);
}

static void j_provider(bool *ok, cJSON *ps, const pc_config_t *c, const pc_provider_config_t *p)
{
	cJSON *o = j_obj(ok, ps, p->id);
	j_str(ok, o, "api", pc_provider_api_name(p->api));
	if (p->base_url)
		j_str(ok, o, "baseUrl", p->base_url);
	j_bool(ok, o, "embedded", p->embedded);
	j_str(ok, o, "class", pc__config_class_name(p->cls));
	j_num(ok, o, "idleTimeoutSeconds", (double)(p->idle_timeout_ms / 1000));
	j_num(ok, o, "timeoutSeconds", (double)(p->request_timeout_ms / 1000));
	if (p->context_tokens)
		j_num(ok, o, "contextTokens", (double)p->context_tokens);
	if (p->http2 == PC_PROVIDER_HTTP2_PRIOR_KNOWLEDGE)
		j_str(ok, o, "http2", "prior-knowledge");
	cJSON *profs = cJSON_AddArrayToObject(o, "profiles");
	*ok = *ok && profs;
	for (size_t i = 0; i < p->profile_count; i++) {
		cJSON *pr = cJSON_CreateObject();
		*ok = *ok && pr && cJSON_AddItemToArray(profs, pr);
		if (!*ok) {
			cJSON_Delete(pr);
			return;
		}
		j_str(ok, pr, "id", p->profiles[i].id);
		/* Never print a secret: only say that one is set. */
		if (p->profiles[i].api_key && *p->profiles[i].api_key)
			j_str(ok, pr, "apiKey", "***");
	}
	cJSON *models = cJSON_AddArrayToObject(o, "models");
	*ok = *ok && models;
	for (size_t i = 0; i < p->model_count; i++) {
		const pc_model_config_t *m = &p->models[i];
		pc_model_ref_t ref = {p->id, m->id};
		cJSON *mo = cJSON_CreateObject();
		*ok = *ok && mo && cJSON_AddItemToArray(models, mo);
		if (!*ok) {
			cJSON_Delete(mo);
			return;
		}
		j_str(ok, mo, "id", m->id);
		j_num(ok, mo, "contextTokens", (double)pc_config_context_tokens(c, &ref));
		j_num(ok, mo, "maxTokens", (double)m->max_tokens);
		j_bool(ok, mo, "reasoning", m->reasoning);
	}
}

static void j_exec(bool *ok, cJSON *tools, const pc_exec_config_t *e)
{
	static const char *const modes[] = {"full", "allowlist", "off"};
	cJSON *o = j_obj(ok, tools, "exec");
	j_str(ok, o, "mode", modes[e->mode]);
	if (e->allow_count)
		j_names(ok, o, "allow", e->allow, e->allow_count);
	if (e->env_count)
		j_names(ok, o, "env", e->env, e->env_count);
	if (e->timeout_ms)
		j_num(ok, o, "timeoutSeconds", (double)(e->timeout_ms / 1000));
	j_str(ok, o, "cgroup", e->cgroup_off ? "off" : "auto");
}

/* Numbers left at 0 (the spec's defaults) and an "enabled" never given are
 * not printed, so that the output read back means the same. */
static void j_loop_detection(bool *ok, cJSON *d, const pc_loop_detection_config_t *l)
{
	cJSON *o = j_obj(ok, d, "loopDetection");
	if (l->enabled_set)
		j_bool(ok, o, "enabled", l->enabled);
	const struct {
		const char *key;
		uint32_t v;
	} nums[] = {{"historySize", l->history_size},
		    {"warningThreshold", l->warning_threshold},
		    {"criticalThreshold", l->critical_threshold},
		    {"globalCircuitBreakerThreshold", l->global_threshold}};
	for (size_t i = 0; i < sizeof(nums) / sizeof(nums[0]); i++)
		if (nums[i].v)
			j_num(ok, o, nums[i].key, nums[i].v);
	cJSON *det = j_obj(ok, o, "detectors");
	j_bool(ok, det, "genericRepeat", l->generic_repeat);
	j_bool(ok, det, "knownPollNoProgress", l->known_poll_no_progress);
	j_bool(ok, det, "pingPong", l->ping_pong);
	if (l->post_compaction_window)
		j_num(ok, j_obj(ok, o, "postCompactionGuard"), "windowSize", l->post_compaction_window);
}

static void j_agent(bool *ok, cJSON *root, const pc_agent_defaults_t *a)
{
	cJSON *d = j_obj(ok, j_obj(ok, root, "agents"), "defaults");
	if (a->model.provider && a->model.model)
		j_ref(ok, d, "model", &a->model, NULL);
	cJSON *fb = cJSON_AddArrayToObject(d, "fallbacks");
	*ok = *ok && fb;
	for (size_t i = 0; i < a->fallback_count && i < PC_CONFIG_MAX_FALLBACKS; i++)
		j_ref(ok, NULL, NULL, &a->fallbacks[i], fb);
	j_num(ok, d, "timeoutSeconds", (double)(a->run_timeout_ms / 1000));
	j_num(ok, d, "maxConcurrent", a->max_concurrent);
	j_str(ok, d, "thinking", pc_think_level_name(a->think));
	if (a->system_prompt)
		j_str(ok, d, "systemPrompt", a->system_prompt);
	if (a->workspace)
		j_str(ok, d, "workspace", a->workspace);
	j_num(ok, d, "bootstrapMaxChars", (double)a->bootstrap_max_chars);
	j_num(ok, d, "bootstrapTotalMaxChars", (double)a->bootstrap_total_chars);
	j_str(ok, d, "toolMode", a->tool_mode == PC_TOOLS_PARALLEL ? "parallel" : "sequential");
	cJSON *tools = j_obj(ok, d, "tools");
	if (a->tools_allow)
		j_names(ok, tools, "allow", a->tools_allow, a->tools_allow_count);
	j_exec(ok, tools, &a->exec);
	cJSON *cp = j_obj(ok, d, "compaction");
	j_bool(ok, cp, "enabled", a->compaction.enabled);
	j_num(ok, cp, "reserveTokens", (double)a->compaction.reserve_tokens);
	j_num(ok, cp, "keepRecentTokens", (double)a->compaction.keep_recent_tokens);
	j_num(ok, cp, "timeoutSeconds", (double)(a->compaction.timeout_ms / 1000));
	if (a->compaction.model.provider && a->compaction.model.model)
		j_ref(ok, cp, "model", &a->compaction.model, NULL);
	j_num(ok, cp, "maxActiveTranscriptBytes", (double)a->compaction.max_transcript_bytes);
	cJSON *rr = j_obj(ok, d, "runRetries");
	j_num(ok, rr, "base", (double)(a->retries.has_base ? a->retries.base : PC_RUN_BUDGET_BASE));
	j_num(ok, rr, "perProfile",
	      (double)(a->retries.has_per_profile ? a->retries.per_profile : PC_RUN_BUDGET_PER_PROFILE));
	j_num(ok, rr, "min", (double)(a->retries.has_min ? a->retries.min : PC_RUN_BUDGET_MIN));
	j_num(ok, rr, "max", (double)(a->retries.has_max ? a->retries.max : PC_RUN_BUDGET_MAX));
	j_num(ok, d, "idleBreaker", a->idle_breaker_cap);
	j_loop_detection(ok, d, &a->loop_detection);
	j_num(ok, d, "sessionIdleSeconds", (double)(a->session_idle_ms / 1000));
}

int pc_config_to_json(const pc_config_t *c, char **out)
{
	if (!c || !out)
		return PC_EINVAL;
	const pc_agent_defaults_t *a = &c->agent;
	bool ok = true;
	cJSON *root = cJSON_CreateObject();
	char *text = NULL;
	int rc = 0;
	ok = root != NULL;
	cJSON *ps = j_obj(&ok, root, "providers");
	for (size_t i = 0; ok && i < c->provider_count; i++)
		j_provider(&ok, ps, c, &c->providers[i]);
	j_agent(&ok, root, a);
	cJSON *cd = j_obj(&ok, j_obj(&ok, root, "auth"), "cooldowns");
	j_num(&ok, cd, "rateLimitedProfileRotations", a->rate_limit_rotations);
	j_num(&ok, cd, "overloadedProfileRotations", a->overload_rotations);
	j_num(&ok, cd, "overloadedBackoffMs", (double)a->overloaded_backoff_ms);
	cJSON *q = j_obj(&ok, j_obj(&ok, root, "messages"), "queue");
	j_str(&ok, q, "mode", pc_queue_mode_name(a->queue.mode));
	j_num(&ok, q, "debounceMs", a->queue.debounce_ms);
	j_num(&ok, q, "cap", a->queue.cap);
	j_str(&ok, q, "drop", pc_queue_drop_name(a->queue.drop));
	cJSON *dg = j_obj(&ok, root, "diagnostics");
	j_bool(&ok, dg, "enabled", c->diagnostics.enabled);
	j_num(&ok, dg, "stuckSessionWarnMs", (double)c->diagnostics.warn_ms);
	j_num(&ok, dg, "stuckSessionAbortMs", (double)c->diagnostics.abort_ms);
	if (c->store_path || c->store_url || c->store_statement_timeout_ms || c->store_window_ms ||
	    c->store_group_max || c->store_lazy_ms || c->store_idem_hours) {
		cJSON *st = j_obj(&ok, root, "store");
		if (c->store_path)
			j_str(&ok, st, "path", c->store_path);
		if (c->store_url)
			store_url(&ok, st, c->store_url);
		if (c->store_statement_timeout_ms)
			j_num(&ok, st, "statementTimeoutMs", c->store_statement_timeout_ms);
		if (c->store_window_ms)
			j_num(&ok, st, "windowMs", c->store_window_ms);
		if (c->store_group_max)
			j_num(&ok, st, "groupMax", c->store_group_max);
		if (c->store_lazy_ms)
			j_num(&ok, st, "lazyMs", c->store_lazy_ms);
		if (c->store_idem_hours)
			j_num(&ok, st, "idempotencyHours", c->store_idem_hours);
	}
	if (c->cluster.enabled) {
		cJSON *cl = j_obj(&ok, root, "cluster");
		if (c->cluster.node_id)
			j_str(&ok, cl, "nodeId", c->cluster.node_id);
		if (c->cluster.advertise_url)
			j_str(&ok, cl, "advertiseUrl", c->cluster.advertise_url);
		j_num(&ok, cl, "leaseMs", c->cluster.lease_ms);
		j_bool(&ok, cl, "forward", c->cluster.forward);
		if (c->cluster.secret)
			j_str(&ok, cl, "secret", "***");
	}
	cJSON *gw = j_obj(&ok, root, "gateway");
	static const char *const auth_modes[] = {"none", "token", "password"};
	j_str(&ok, gw, "bind", c->gateway.bind);
	j_num(&ok, gw, "port", c->gateway.port);
	cJSON *ga = j_obj(&ok, gw, "auth");
	j_str(&ok, ga, "mode", auth_modes[c->gateway.auth]);
	if (c->gateway.token)
		j_str(&ok, ga, "token", "***");
	if (c->gateway.password)
		j_str(&ok, ga, "password", "***");
	j_num(&ok, gw, "tickIntervalMs", (double)c->gateway.tick_ms);
	j_num(&ok, gw, "maxPayloadBytes", (double)c->gateway.max_payload);
	j_num(&ok, gw, "maxBufferedBytes", (double)c->gateway.max_buffered);
	j_num(&ok, gw, "handshakeTimeoutMs", (double)c->gateway.handshake_ms);
	j_num(&ok, gw, "deltaIntervalMs", (double)c->gateway.delta_interval_ms);
	j_num(&ok, gw, "drainSeconds", (double)(c->gateway.drain_ms / 1000));
	j_num(&ok, j_obj(&ok, gw, "http"), "sseKeepAliveMs", (double)c->gateway.sse_keepalive_ms);
	const pc_gateway_auth_limit_t *al = &c->gateway.auth_limit;
	cJSON *rl = j_obj(&ok, ga, "rateLimit");
	j_num(&ok, rl, "maxAttempts", al->max_attempts);
	j_num(&ok, rl, "windowMs", (double)al->window_ms);
	j_num(&ok, rl, "lockoutMs", (double)al->lockout_ms);
	j_num(&ok, rl, "maxLockoutMs", (double)al->max_lockout_ms);
	j_bool(&ok, rl, "exemptLoopback", al->exempt_loopback);
	if (c->gateway.allowed_origin_count)
		j_names(&ok, gw, "allowedOrigins", c->gateway.allowed_origins, c->gateway.allowed_origin_count);
	if (c->gateway.trusted_proxy_count)
		j_names(&ok, gw, "trustedProxies", c->gateway.trusted_proxies, c->gateway.trusted_proxy_count);
	if (c->gateway.control_ui_root || !c->gateway.control_ui_enabled) {
		cJSON *ui = j_obj(&ok, gw, "controlUi");
		j_bool(&ok, ui, "enabled", c->gateway.control_ui_enabled);
		if (c->gateway.control_ui_root)
			j_str(&ok, ui, "root", c->gateway.control_ui_root);
	}
	if (c->plugin_count) {
		cJSON *pe = j_obj(&ok, j_obj(&ok, root, "plugins"), "entries");
		for (size_t i = 0; ok && i < c->plugin_count; i++) {
			const pc_plugin_config_t *p = &c->plugins[i];
			cJSON *e = j_obj(&ok, pe, p->id);
			j_str(&ok, e, "path", p->path);
			j_bool(&ok, e, "enabled", p->enabled);
			cJSON *pc = ok ? cJSON_Parse(p->config_json) : NULL;
			ok = ok && pc && cJSON_AddItemToObject(e, "config", pc);
			if (!ok)
				cJSON_Delete(pc);
		}
	}
	if (ok)
		text = cJSON_Print(root);
	if (!text) {
		rc = PC_ENOMEM;
		goto out;
	}
	/* cJSON's allocator may be hooked; the caller frees with free(). */
	*out = strdup(text);
	if (!*out)
		rc = PC_ENOMEM;
	cJSON_free(text);
out:
	cJSON_Delete(root);
	return rc;
}
