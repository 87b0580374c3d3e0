/*
 * The agent's feed (pc_agent_subscribe_feed): what changes in its sessions,
 * for clients that show a list of sessions or follow a transcript without
 * running anything in them. One long-lived bus, never ended, carries every
 * session's changes in the order they happened; its subscribers are bounded
 * like any other (every feed event may be dropped for a slow reader, who
 * sees the gap in seq). Cheap when nobody listens: the bus allocates
 * nothing then, and the events are built only when someone does.
 */
#include <string.h>

#include <cjson/cJSON.h>

#include "agent_internal.h"
#include "io/io.h"
#include "runtime/clock.h"

/* The feed is a bus named for no run: its events' runId is this, and the
 * run each change is about is in their data. */
#define FEED_NAME "agent-feed"

static void feed_emit(pc_agent_t *a, cJSON *d)
{
	char *s = d ? pc_json_print(d) : NULL;
	if (s)
		(void)pc_event_bus_emit(a->feed, PC_EVENT_LIFECYCLE, s, strlen(s), true, false, NULL);
	cJSON_free(s);
	cJSON_Delete(d);
}

static cJSON *feed_change(const char *key, const char *phase, const char *run_id)
{
	cJSON *d = cJSON_CreateObject();
	if (d && (!cJSON_AddStringToObject(d, "sessionKey", key) || !cJSON_AddStringToObject(d, "phase", phase) ||
		  !cJSON_AddStringToObject(d, "runId", run_id))) {
		cJSON_Delete(d);
		return NULL;
	}
	return d;
}

/* The run registry's observer: queued, running, ended. */
static void on_run(void *ud, const pc_run_info_t *info)
{
	pc_agent_t *a = ud;
	if (!pc_event_bus_listened(a->feed))
		return;
	const char *phase = info->status == PC_RUN_STATUS_QUEUED ? "queued"
			    : info->status == PC_RUN_STATUS_RUNNING ? "start"
								    : "end";
	cJSON *d = feed_change(info->session_key, phase, info->run_id);
	if (d && pc_run_status_terminal(info->status)) {
		cJSON_AddStringToObject(d, "status", pc_run_status_name(info->status));
		if (info->error[0])
			cJSON_AddStringToObject(d, "error", info->error);
	}
	feed_emit(a, d);
}

int pc__agent_feed_new(pc_agent_t *a)
{
	int rc = pc_event_bus_new(FEED_NAME, NULL, NULL, &a->feed);
	if (rc == 0)
		pc_run_registry_observe(a->runs, on_run, a);
	return rc;
}

void pc__agent_feed_free(pc_agent_t *a)
{
	pc_event_bus_release(a->feed);
	a->feed = NULL;
}

bool pc__agent_feed_listened(const pc_agent_t *a)
{
	return pc_event_bus_listened(a->feed);
}

void pc__agent_feed_message(pc_agent_t *a, const char *key, const char *run_id, int64_t seq, const char *idem,
			    const char *role, const char *json)
{
	if (!pc_event_bus_listened(a->feed))
		return;
	cJSON *d = feed_change(key, "message", run_id ? run_id : "");
	cJSON *m = d ? cJSON_Parse(json) : NULL;
	if (!m) {
		cJSON_Delete(d);
		return;
	}
	/* the stored message's own role wins; the store's column otherwise */
	if (!cJSON_GetObjectItemCaseSensitive(m, "role"))
		cJSON_AddStringToObject(m, "role", role);
	cJSON_AddItemToObject(d, "message", m);
	cJSON_AddNumberToObject(d, "messageSeq", (double)seq);
	if (idem)
		cJSON_AddStringToObject(d, "idempotencyKey", idem);
	cJSON_AddNumberToObject(d, "ts", (double)pc__clock_wall_ms());
	feed_emit(a, d);
}

int pc_agent_subscribe_feed(pc_agent_t *a, pc_event_sub_t *s)
{
	if (!a || !s)
		return PC_EINVAL;
	return pc_event_bus_attach(a->feed, s, false);
}

void pc_agent_unsubscribe_feed(pc_agent_t *a, pc_event_sub_t *s)
{
	if (a && s)
		pc_event_bus_detach(a->feed, s);
}
