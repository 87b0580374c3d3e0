/*
 * What OpenClaw's Control UI reads on its pages about features Pincer does
 * not have: Talk voices, questions, approvals, cron jobs and their runs,
 * background tasks, progress cards, transcript branches, the side chat,
 * execution environments, paired nodes, messaging channels, plugins. Each
 * read answers OpenClaw's empty result in OpenClaw's shape, so the page
 * shows "none" rather than an error. Only reads are here: an action on
 * such a feature stays an unknown method, never a pretended success.
 */
#include <string.h>

#include "runtime/clock.h"
#include "rpc_internal.h"

#define READ PC__GW_SCOPE_READ
#define EMPTY(name, scope, answer) {{name, scope, NULL, 0, false, NULL}, answer, false}
/* one whose answer carries OpenClaw's `ts`, the time it was made */
#define EMPTY_TS(name, scope, answer) {{name, scope, NULL, 0, false, NULL}, answer, true}

/* Params are not looked at: a filter of an empty list is the empty list. */
static const pc__gw_empty_t empties[] = {
	/* no speech, transcription or realtime voice provider */
	EMPTY("talk.catalog", READ,
	      "{\"modes\":[],\"transports\":[],\"brains\":[],\"speech\":{\"providers\":[]},"
	      "\"transcription\":{\"ready\":false,\"providers\":[]},\"realtime\":{\"ready\":false,\"providers\":[]}}"),
	/* no run ever asks the operator a question; OpenClaw's scope is
	 * operator.questions, which this gateway grants with write */
	EMPTY("question.list", PC__GW_SCOPE_WRITE, "{\"questions\":[]}"),
	/* the exec tool runs by its configured mode, never waiting for a yes;
	 * plugins and the system agent ask for none either */
	EMPTY("exec.approval.list", PC__GW_SCOPE_APPROVALS, "[]"),
	EMPTY("plugin.approval.list", PC__GW_SCOPE_APPROVALS, "[]"),
	EMPTY("openclaw.approval.list", PC__GW_SCOPE_APPROVALS, "[]"),
	/* no scheduler (cron.list and cron.runs page: below) */
	EMPTY("cron.status", READ, "{\"enabled\":false,\"triggersEnabled\":false,\"jobs\":0,\"nextWakeAtMs\":null}"),
	/* no detached background tasks */
	EMPTY("tasks.list", READ, "{\"tasks\":[]}"),
	/* no progress cards */
	EMPTY("progressCard.get", READ, "{\"card\":null}"),
	/* a transcript is one line: compaction rewrites it, nothing forks it */
	EMPTY("sessions.branches.list", READ, "{\"branches\":[]}"),
	/* no side chat beside a session */
	EMPTY("sessions.companion.state", READ, "{\"exchanges\":[]}"),
	/* runs execute in the gateway's own process: no worker, cloud or node
	 * environment to pick (OpenClaw's scope is by params; read suffices for
	 * the inventory) */
	EMPTY("environments.list", READ, "{\"environments\":[]}"),
	/* no companion devices run commands for it */
	EMPTY_TS("node.list", READ, "{\"nodes\":[]}"),
	/* no messaging channels: the gateway's WebSocket and HTTP APIs are its
	 * only ways in */
	EMPTY_TS("channels.status", READ,
		 "{\"channelOrder\":[],\"channelLabels\":{},\"channels\":{},\"channelAccounts\":{},"
		 "\"channelDefaultAccountId\":{}}"),
	/* no plugin system, so nothing to install either, nor a catalog to
	 * browse for it */
	EMPTY("plugins.list", READ, "{\"plugins\":[],\"diagnostics\":[],\"mutationAllowed\":false}"),
	EMPTY("plugins.catalog.browse", READ, "{\"items\":[]}"),
};
#define NEMPTIES (sizeof(empties) / sizeof(empties[0]))

const pc__gw_empty_t *pc__gw_empty_find(const char *name)
{
	for (size_t i = 0; i < NEMPTIES; i++)
		if (!strcmp(empties[i].m.name, name))
			return &empties[i];
	return NULL;
}

void pc__gw_empty_names(cJSON *a)
{
	for (size_t i = 0; i < NEMPTIES; i++)
		cJSON_AddItemToArray(a, cJSON_CreateString(empties[i].m.name));
}

void pc__gw_empty_answer(pc__gw_conn_t *c, const char *id, const pc__gw_empty_t *e)
{
	cJSON *p = cJSON_Parse(e->answer);
	if (p && e->ts && !cJSON_AddNumberToObject(p, "ts", (double)pc__clock_wall_ms())) {
		cJSON_Delete(p);
		p = NULL;
	}
	if (!p) {
		pc__gw_reply_error(c, id, "UNAVAILABLE", "out of memory", NULL, NULL, true);
		return;
	}
	pc__gw_reply_ok(c, id, p);
}

/* ---- cron.list, cron.runs: an empty page of the size asked ---- */

const pc__gw_param_t pc__gw_cron_page_spec[2] = {
	{"limit", PC__GW_T_UINT, false},
	{"offset", PC__GW_T_UINT, false},
};

/* SHA-256 (base64url) of "[]", OpenClaw's snapshotRevision of a job list
 * that is empty: the revision a scheduler with no jobs reports. */
#define EMPTY_JOBS_REVISION "sha256:T1PNoYwrqgwDVLtfmj7L5e0Sq02OEbqHPC8RFhICuUU"

/* OpenClaw's page of nothing: the offset bounded by the total (0), the
 * limit asked within 1..200 (default 50), which the Control UI checks
 * against what it asked for. */
static void empty_page(pc__gw_conn_t *c, const char *id, const char *method, const cJSON *params,
		       const char *items, const char *revision)
{
	const cJSON *l = cJSON_GetObjectItemCaseSensitive(params, "limit");
	double limit = l ? l->valuedouble : 50;
	if (limit < 1 || limit > 200) {
		pc__gw_invalid(c, id, method, "limit: must be between 1 and 200");
		return;
	}
	cJSON *p = cJSON_CreateObject();
	cJSON_AddArrayToObject(p, items);
	if (revision)
		cJSON_AddStringToObject(p, "snapshotRevision", revision);
	cJSON_AddNumberToObject(p, "total", 0);
	cJSON_AddNumberToObject(p, "offset", 0);
	cJSON_AddNumberToObject(p, "limit", limit);
	cJSON_AddFalseToObject(p, "hasMore");
	cJSON_AddNullToObject(p, "nextOffset");
	pc__gw_reply_ok(c, id, p);
}

void pc__gw_m_cron_list(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *id, const cJSON *params)
{
	(void)ctx;
	empty_page(c, id, "cron.list", params, "jobs", EMPTY_JOBS_REVISION);
}

/* No job ever ran: every filter of the history finds nothing. */
void pc__gw_m_cron_runs(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *id, const cJSON *params)
{
	(void)ctx;
	empty_page(c, id, "cron.runs", params, "entries", NULL);
}
