/*
 * Waiting for a run another process holds (pc_agent_watch_stored): a small
 * actor reads the run's row until it has ended, backing off, then tells
 * the watcher once. It holds the store actor and the watcher by reference
 * only, so it outlives neither safely nor needs the agent: a store that
 * has closed refuses the read, and the watch ends.
 */
#include <stdlib.h>
#include <string.h>

#include "actors/timer.h"
#include "../agent_internal.h"

#define FIRST_MS 25u
#define MAX_GAP_MS 1000u

enum { MSG_POLL = PC_MSG_TYPE_SYSTEM + 0x2B00 };

typedef struct watch {
	pc_actor_t *store, *who;
	uint64_t corr, store_corr, deadline_ms;
	uint32_t gap_ms;
	char run_id[PC_RUN_ID_MAX + 1];
} watch_t;

/* Tells the watcher and ends. */
static void report(pc_ctx_t *ctx, watch_t *w, const pc_run_info_t *info)
{
	pc_msg_t *m = pc_msg_new(PC_MSG_AGENT_RUN_INFO, sizeof(*info));
	if (m) {
		memcpy(pc_msg_data(m), info, sizeof(*info));
		m->corr = w->corr;
		(void)pc_send(w->who, m); /* a watcher that has gone drops it */
	}
	pc_exit(ctx, PC_EXIT_NORMAL);
}

static void poll_store(pc_ctx_t *ctx, watch_t *w)
{
	pc_msg_t *req = NULL;
	int rc = pc_store_req_run_get(w->run_id, &req);
	if (rc == 0)
		rc = pc_ask(ctx, w->store, req, &w->store_corr);
	if (rc != 0)
		pc_exit(ctx, PC_EXIT_NORMAL); /* the store is gone or no memory: the caller's deadline answers */
}

static void on_reply(pc_ctx_t *ctx, watch_t *w, const pc_msg_t *msg)
{
	if (msg->corr != w->store_corr)
		return;
	pc_store_reply_t r;
	int rc = pc_store_reply_get(msg, &r);
	pc_run_info_t info;
	if (rc == 0 && r.rc == 0) {
		pc_agent_run_info_from_store(&r, &info);
		if (pc_run_status_terminal(info.status)) {
			snprintf(info.run_id, sizeof(info.run_id), "%s", w->run_id);
			report(ctx, w, &info);
			return;
		}
	} else {
		memset(&info, 0, sizeof(info));
		snprintf(info.run_id, sizeof(info.run_id), "%s", w->run_id);
		info.status = PC_RUN_STATUS_ERROR;
		snprintf(info.error, sizeof(info.error), "the run's outcome cannot be read: %s",
			 pc_store_strerror(rc ? rc : r.rc));
		report(ctx, w, &info);
		return;
	}
	uint64_t now = pc_runtime_now_ms();
	if (now + w->gap_ms > w->deadline_ms) {
		pc_exit(ctx, PC_EXIT_NORMAL);
		return;
	}
	pc_msg_t *t = pc_msg_new(MSG_POLL, 0);
	pc_timer_t id;
	if (!t || pc_timer_after(pc_self(ctx), w->gap_ms, t, &id) != 0) {
		pc_exit(ctx, PC_EXIT_NORMAL);
		return;
	}
	w->gap_ms = w->gap_ms * 2 > MAX_GAP_MS ? MAX_GAP_MS : w->gap_ms * 2;
}

static int watch_receive(pc_ctx_t *ctx, void *state, pc_msg_t *msg)
{
	watch_t *w = state;
	if (msg->type == MSG_POLL)
		poll_store(ctx, w);
	else if (msg->type == PC_STORE_MSG_REPLY)
		on_reply(ctx, w, msg);
	return 0;
}

static void watch_stop(pc_ctx_t *ctx, void *state, int reason)
{
	(void)ctx;
	(void)reason;
	watch_t *w = state;
	pc_actor_release(w->store);
	pc_actor_release(w->who);
	free(w);
}

static const pc_behavior_t watch_behavior = {"stored_watch", watch_receive, watch_stop};

int pc_agent_watch_stored(pc_agent_t *a, const char *run_id, pc_actor_t *who, uint64_t corr, uint64_t max_ms)
{
	if (!a || !run_id || !who || strlen(run_id) > PC_RUN_ID_MAX)
		return PC_EINVAL;
	watch_t *w = calloc(1, sizeof(*w));
	if (!w)
		return PC_ENOMEM;
	snprintf(w->run_id, sizeof(w->run_id), "%s", run_id);
	w->store = pc_actor_retain(pc_store_actor(a->store));
	w->who = pc_actor_retain(who);
	w->corr = corr;
	w->gap_ms = FIRST_MS;
	w->deadline_ms = pc_runtime_now_ms() + max_ms;
	int rc = pc_spawn_start(a->rt, &watch_behavior, w, MSG_POLL, NULL);
	if (rc != 0)
		watch_stop(NULL, w, 0);
	return rc;
}
