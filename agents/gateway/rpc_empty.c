/*
 * What OpenClaw's Control UI reads on its pages about features Pincer does
 * not have: Talk voices, questions, approvals, cron jobs, background tasks,
 * progress cards, transcript branches, the side chat. Each read answers
 * OpenClaw's empty result in OpenClaw's shape, so the page shows "none"
 * rather than an error. Only reads are here: an action on such a feature
 * stays an unknown method, never a pretended success.
 */
#include <string.h>

#include "rpc_internal.h"

#define READ PC__GW_SCOPE_READ
#define EMPTY(name, scope, answer) {{name, scope, NULL, 0, false, NULL}, answer}

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
	/* no scheduler */
	EMPTY("cron.list", READ,
	      "{\"jobs\":[],\"total\":0,\"offset\":0,\"limit\":50,\"hasMore\":false,\"nextOffset\":null}"),
	EMPTY("cron.status", READ, "{\"enabled\":false,\"triggersEnabled\":false,\"jobs\":0,\"nextWakeAtMs\":null}"),
	/* no detached background tasks */
	EMPTY("tasks.list", READ, "{\"tasks\":[]}"),
	/* no progress cards */
	EMPTY("progressCard.get", READ, "{\"card\":null}"),
	/* a transcript is one line: compaction rewrites it, nothing forks it */
	EMPTY("sessions.branches.list", READ, "{\"branches\":[]}"),
	/* no side chat beside a session */
	EMPTY("sessions.companion.state", READ, "{\"exchanges\":[]}"),
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
	if (!p) {
		pc__gw_reply_error(c, id, "UNAVAILABLE", "out of memory", NULL, NULL, true);
		return;
	}
	pc__gw_reply_ok(c, id, p);
}
