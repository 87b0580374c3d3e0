/*
 * The agent host of the commands (host.h): configuration, plugins,
 * runtime, I/O, store, agent; torn down in reverse.
 *
 * Plugins that do not load are reported on stderr ("plugin <id>: <why>")
 * and skipped. Hook reports (failures, timeouts, plugins' log lines above
 * debug level) go to stderr as JSON lines.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "agents/hooks/hooks.h"
#include "agents/mock/mock.h"
#include "host.h"

/* One hook report as a JSON line on stderr (any thread: one write each). */
static void report(void *user, const pc_hook_report_t *r)
{
	(void)user;
	static const char *const kinds[] = {"failed", "malformed", "timeout", "log"};
	static const char *const levels[] = {"debug", "info", "warn", "error"};
	if (r->kind == PC_HOOK_REPORT_LOG && r->level <= PC_HOOK_LOG_DEBUG)
		return;
	cJSON *o = cJSON_CreateObject();
	bool ok = o && cJSON_AddStringToObject(o, "type", "hook.report") &&
		  cJSON_AddStringToObject(o, "kind", (unsigned)r->kind < 4 ? kinds[r->kind] : "unknown") &&
		  cJSON_AddStringToObject(o, "owner", r->owner ? r->owner : "") &&
		  cJSON_AddStringToObject(o, "level", (unsigned)r->level < 4 ? levels[r->level] : "error") &&
		  cJSON_AddStringToObject(o, "message", r->message ? r->message : "");
	if (ok && r->point != PC_HOOK__COUNT)
		ok = cJSON_AddStringToObject(o, "point", pc_hook_point_name(r->point)) != NULL;
	if (ok && r->code)
		ok = cJSON_AddNumberToObject(o, "code", r->code) != NULL;
	char *line = ok ? cJSON_PrintUnformatted(o) : NULL;
	if (line)
		fprintf(stderr, "%s\n", line);
	else
		fprintf(stderr, "pincer: a hook report was lost (out of memory)\n");
	cJSON_free(line);
	cJSON_Delete(o);
}

/* A hook registry holding every enabled plugin of `cfg` that loads. */
static int load_plugins(const pc_config_t *cfg, pc_hooks_t **out)
{
	pc_hooks_t *h = NULL;
	int rc = pc_hooks_new(&h);
	if (rc != 0)
		return rc;
	pc_hooks_set_report(h, report, NULL);
	for (size_t i = 0; i < cfg->plugin_count; i++) {
		const pc_plugin_config_t *p = &cfg->plugins[i];
		char err[256] = "";
		if (!p->enabled)
			continue;
		rc = pc_plugin_load(h, p->id, p->path, p->config_json, err, sizeof(err));
		/* the loader's text already reads "plugin <id>: <why>" */
		if (rc != 0 && err[0])
			fprintf(stderr, "%s\n", err);
		else if (rc != 0)
			fprintf(stderr, "plugin %s: %s\n", p->id, pc_strerror(rc));
	}
	*out = h;
	return 0;
}

int pc_cli_host_config(const pc_cli_host_options_t *o, pc_cli_host_t *h)
{
	memset(h, 0, sizeof(*h));
	pc_config_errors_t errs = {0};
	int rc = pc_config_load(o->config_path, &h->cfg, &errs);
	if (rc != 0) {
		for (size_t i = 0; i < errs.count; i++)
			fprintf(stderr, "%s\n", errs.items[i]);
		if (!errs.count)
			fprintf(stderr, "%s: cannot load the configuration: %s\n", o->command, pc_strerror(rc));
	}
	pc_config_errors_free(&errs);
	return rc;
}

/* The store's writes start failing or succeed again: a line in the log. */
static void store_health(void *user, int rc)
{
	if (rc)
		(void)pc_log_kv(user, PC_LOG_ERROR, "store writes failing", PC_LF_STR("cause", pc_store_strerror(rc)));
	else
		(void)pc_log_kv(user, PC_LOG_WARN, "store writes succeed again");
}

int pc_cli_host_start(const pc_cli_host_options_t *o, pc_cli_host_t *h)
{
	int rc = pc_cli_host_config(o, h);
	if (rc != 0)
		return rc;
	pc_runtime_config_t rcfg;
	pc_runtime_config_init(&rcfg);
	if (o->workers)
		rcfg.workers = o->workers;
	if (o->blocking_threads)
		rcfg.blocking_threads = o->blocking_threads;
	/* past a file size limit a write fails with EFBIG, which the store
	 * reports (and /readyz with it); the default action of SIGXFSZ would
	 * kill the process at its first such write, without a word */
	if (signal(SIGXFSZ, SIG_IGN) == SIG_ERR)
		return PC_ESYS;
	pc_io_config_t icfg;
	pc_agent_io_config(h->cfg, o->io_threads, &icfg);
	pc_store_config_t scfg;
	pc_store_config_init(&scfg);
	scfg.path = h->cfg->store_path;
	scfg.url = h->cfg->store_url;
	scfg.statement_timeout_ms = h->cfg->store_statement_timeout_ms;
	scfg.window_ms = h->cfg->store_window_ms;
	scfg.group_max = h->cfg->store_group_max;
	scfg.lazy_ms = h->cfg->store_lazy_ms;
	scfg.idem_ttl_ms = (int64_t)h->cfg->store_idem_hours * 3600 * 1000;
	scfg.on_health = store_health;
	scfg.health_user = o->log;
	const char *what = "hooks";
	rc = load_plugins(h->cfg, &h->hooks);
	if (rc == 0 && (what = "runtime", 1))
		rc = pc_runtime_new(&rcfg, &h->rt);
	if (rc == 0)
		rc = pc_runtime_start(h->rt);
	if (rc == 0 && (what = "I/O", 1))
		rc = pc_io_new(h->rt, &icfg, &h->io);
	if (rc == 0 && (what = "store", 1)) {
		scfg.io = h->io; /* polls a PostgreSQL store's connection */
		rc = pc_store_open(h->rt, &scfg, &h->store);
	}
	/* providers marked "embedded" are served by the mock LLM, in-process */
	static const pc_agent_embedded_llm_t mock_llm = {pc_mock_server_embedded_start,
							 pc_mock_server_embedded_stop};
	pc_agent_options_t ao = {.rt = h->rt, .io = h->io, .store = h->store, .config = h->cfg, .hooks = h->hooks,
				 .embedded_llm = &mock_llm, .log = o->log, .log_content = o->log_content};
	if (rc == 0 && (what = "agent", 1))
		rc = pc_agent_new(&ao, &h->agent);
	if (rc != 0) {
		fprintf(stderr, "%s: cannot start the %s: %s\n", o->command, what,
			rc <= -100 ? pc_store_strerror(rc) : pc_strerror(rc));
		pc_cli_host_stop(h, 0);
	}
	return rc;
}

void pc_cli_host_stop(pc_cli_host_t *h, int64_t grace_ms)
{
	pc_agent_free(h->agent, grace_ms);
	if (h->store)
		pc_store_close(h->store);
	pc_io_free(h->io);
	pc_runtime_free(h->rt);
	pc_hooks_free(h->hooks); /* after the runtime: no chain is left to hold it */
	pc_config_free(h->cfg);
	memset(h, 0, sizeof(*h));
}
