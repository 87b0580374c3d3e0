/*
 * The session actor (spec §1.1, §6.1–§6.3): one per session key, spawned
 * on demand by the directory (session_directory.c), retired when idle. It *is* the
 * session lane: at most one run is active; messages that arrive meanwhile
 * are handled by the queue mode (queue_policy.h decides; this actor does
 * what it says): steered into the active run, queued as followups or for
 * a collected batch, or they interrupt the active run.
 *
 * Accepting a message: the run row is created in the store (idempotency
 * key honoured) and only then is the caller told "accepted". Starting a
 * run: a permit from the global lane, then a run actor, which reports back
 * with PC__MSG_RUN_DONE, which its stop handler sends if the run stopped
 * any other way (so no monitor is needed: a monitor would keep an
 * allocation alive on the session for its whole life).
 *
 * Hooks (§10.2), each only when a handler is registered for it:
 * session_start with the first message (reason "start": whether the store
 * already holds a transcript would take a read the session never makes
 * otherwise), session_end when it retires ("idle") or is stopped
 * ("shutdown"), message_received for each message admitted (not for an
 * idempotent duplicate), message_sent once a run's reply went out with
 * its terminal event.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/timer.h"
#include "../agent_internal.h"
#include "../attempt/payload.h"
#include "../run/run_lifecycle.h"
#include "diagnostics.h"
#include "lease.h"
#include "io/io.h"
#include "recovery_internal.h"
#include "runtime/clock.h"
#include "session_lifecycle.h"

typedef struct item {
	char run_id[PC_RUN_ID_MAX + 1];
	char *prompt, *model, *extra, *idem;
	int priority;
	int64_t enqueued_ms;
	uint64_t timeout_ms;
	bool has_think;
	pc_think_level_t think;
	pc_event_bus_t *bus;
} item_t;

typedef struct pending {
	uint64_t store_corr;
	pc_actor_t *reply_to;
	uint64_t corr;
	pc_msg_t *reply;      /* the answer, made when the submit arrived; NULL once sent */
	char run_id[PC_RUN_ID_MAX + 1];
	pc__submit_t *params; /* malloc'd copy */
	size_t params_size;
	/* Admitted before the store answered (no idempotency key, so no
	 * duplicate is possible): the run may start at once; the caller hears
	 * "accepted" once the run row is durable, with this answer. */
	bool early;
	int32_t answer_rc;
	pc_agent_disposition_t answer;
} pending_t;

typedef struct session {
	pc_agent_t *agent;
	item_t *queue;
	size_t qn, qcap;
	/* messages steered into the active run, each until its text is
	 * injected (its run then ends "steered") or refused (it then waits
	 * its turn as a followup, under its own run id) */
	item_t *steered;
	size_t sn, scap;
	uint32_t dropped;
	char **drop_lines;
	size_t n_drop_lines;
	int64_t last_enqueue_ms;
	bool individual;
	pc_queue_settings_t settings; /* of the latest queued message */

	/* where the session's one active run is (session_lifecycle.h);
	 * changed only by session_set */
	pc_sess_lc_t state;
	/* the active run (or the one waiting for the global lane); NULL: none,
	 * exactly when !pc_sess_lc_active(state). Apart from the session's
	 * state, which an idle session would carry empty. */
	item_t *active;
	pc_actor_t *run;
	uint64_t ticket;    /* its lane ticket; 0: none asked for (it waits for the lease) */
	/* what the running run projects from its state
	 * (pc_run_lc_session_phase): starting when it starts, then its
	 * PC__MSG_RUN_PHASE; the queue reads pc_sess_lc_queue_phase */
	pc_run_phase_t run_view;

	item_t *interrupt; /* interrupt mode: runs once the aborted run ended; NULL: none */

	pending_t *pend;
	size_t pn, pcap;

	pc_timer_t drain_timer, interrupt_timer;

	pc__lease_t lease; /* on the transcript, across processes (lease.h) */
	/* The cluster node lapsed since the session was last idle: another
	 * node may have taken over its queued runs, so each is claimed in the
	 * store (adopted by its own owner) before it starts; claim_corr is the
	 * claim in flight. */
	bool reclaim;
	uint64_t claim_corr;

	/* the stalled-session watchdog (§9.2), armed while a run is active */
	pc_timer_t diag_timer;
	uint64_t diag_seq;         /* the run's event seq at the last tick */
	int64_t run_started_ms, last_progress_ms, last_warn_ms;
	uint32_t warn_repeats;
	pc_diag_class_t last_class;
	bool recovery_sent;

	uint64_t up_ms;      /* runtime clock, at its first message */
	char *key;           /* owned, exact size */
} session_t;

size_t pc__session_state_size(void) { return sizeof(session_t); }

/* A new event bus for run `run_id`, publishing to the session's hub too
 * when somebody subscribed to the session. */
static int new_bus(session_t *s, const char *run_id, pc_event_bus_t **out)
{
	pc_event_hub_t *hub = pc__session_hub_peek(s->agent, s->key);
	int rc = pc_event_bus_new(run_id, s->key, hub, out);
	pc_event_hub_release(hub);
	return rc;
}

static const char *sub_str(const pc__submit_t *p, uint32_t off) { return off ? p->buf + off : NULL; }

static void item_free(item_t *it)
{
	free(it->prompt);
	free(it->model);
	free(it->extra);
	free(it->idem);
	pc_event_bus_release(it->bus);
	memset(it, 0, sizeof(*it));
}

static void bus_release(void *b) { pc_event_bus_release(b); }
static void *bus_retain(void *b) { return pc_event_bus_retain(b); }

/* ---- the session's state (session_lifecycle.h) ---- */

/*
 * The one place the session's state changes. A transition the table does
 * not allow is refused (the state stays), counted and logged. An allowed
 * one is traced (PINCER_TRACE=session) under the session key; a run that
 * starts running has the view starting until it tells another.
 */
static void session_set(session_t *s, pc_sess_lc_t to, const char *why)
{
	pc_sess_lc_t from = s->state;
	if (!pc_sess_lc_legal(from, to)) {
		pc__metrics_illegal(&s->agent->metrics, PC__LC_SESSION);
		(void)pc_log_kv(s->agent->log, PC_LOG_WARN, "illegal session transition", PC_LF_STR("sessionKey", s->key),
				PC_LF_STR("from", pc_sess_lc_name(from)), PC_LF_STR("to", pc_sess_lc_name(to)),
				PC_LF_STR("why", why));
		return;
	}
	s->state = to;
	if (to == PC_SESS_LC_RUNNING)
		s->run_view = PC_RUN_STARTING;
	if (s->agent->trace & PC_TRACE_SESSION)
		pc_trace_transition(s->agent->log, "session", s->key, pc_sess_lc_name(from), pc_sess_lc_name(to), why);
}

/* Ends a run that never ran (dropped, refused, steered, aborted while
 * queued, its model unknown): its one terminal event, the store and the
 * registry. `error` (NULL: none) is the error text the event carries. */
static void end_unrun_as(session_t *s, item_t *it, pc_run_status_t status, const char *why, const char *error,
			 bool record)
{
	bool ok = status == PC_RUN_STATUS_OK;
	cJSON *d = cJSON_CreateObject();
	bool built = d && cJSON_AddStringToObject(d, "phase", ok ? "end" : "error") &&
		     cJSON_AddStringToObject(d, "status", pc_run_status_name(status)) &&
		     cJSON_AddStringToObject(d, "reason", why) && cJSON_AddArrayToObject(d, "payloads") &&
		     (!error || (cJSON_AddStringToObject(d, "error", error) &&
				 cJSON_AddStringToObject(d, "errorKind", "failover")));
	char *data = built ? pc_json_print(d) : NULL;
	cJSON_Delete(d);
	if (it->bus && data)
		pc_event_bus_emit(it->bus, PC_EVENT_LIFECYCLE, data, strlen(data), false, true, NULL);
	cJSON_free(data);
	pc_msg_t *req = NULL;
	char code[64];
	snprintf(code, sizeof(code), "run_%s", why);
	/* it goes from queued straight to its end (run_lifecycle.h) */
	pc_store_run_status_t st = pc_run_lc_store_status(pc_run_lc_done(status));
	/* committed at once: until it is, a crash would leave the run to
	 * be run again on restart, though its message was steered, collected
	 * or refused (recovery_internal.h) */
	pc_store_run_end_t e = {.run_id = it->run_id, .status = st, .error_code = ok ? NULL : code};
	if (record && pc_store_req_run_end(&e, &req) == 0) {
		pc_store_req_urgent(req);
		pc_send(pc_store_actor(s->agent->store), req);
	}
	pc_run_registry_finish(s->agent->runs, it->run_id, status, pc__clock_wall_ms(), ok ? NULL : error ? error : why,
			       why, false);
	item_free(it);
}

static void end_unrun_with(session_t *s, item_t *it, pc_run_status_t status, const char *why, const char *error)
{
	end_unrun_as(s, it, status, why, error, true);
}

static void end_unrun(session_t *s, item_t *it, pc_run_status_t status, const char *why)
{
	end_unrun_with(s, it, status, why, NULL);
}

/* The run items a session holds only while in use (s->active,
 * s->interrupt): slot_end ends the run in *slot before it ran (or before
 * its run actor exists), slot_drop lets an item go whose run reported its
 * own end. Either way the room goes and *slot is NULL. */
static void slot_end(session_t *s, item_t **slot, pc_run_status_t status, const char *why)
{
	item_t *it = *slot;
	*slot = NULL;
	end_unrun(s, it, status, why);
	free(it);
}

static void slot_drop(item_t **slot)
{
	item_free(*slot);
	free(*slot);
	*slot = NULL;
}

static void cancel_timer(pc_ctx_t *ctx, pc_timer_t *t)
{
	if (*t)
		pc_timer_cancel(pc_ctx_runtime(ctx), *t);
	*t = 0;
}

static void arm(pc_ctx_t *ctx, pc_timer_t *t, uint32_t type, uint64_t ms)
{
	cancel_timer(ctx, t);
	pc_msg_t *m = pc_msg_new(type, 0);
	if (m && pc_timer_after(pc_self(ctx), ms, m, t) != 0)
		*t = 0;
}

/* ---- hooks (§10.2) ---- */

/* Fires observation point `p` with `event` (taken); the context names the
 * session and, when given, the run. */
static void notify(const session_t *s, pc_hook_point_t p, cJSON *event, const char *run_id)
{
	cJSON *ctx = cJSON_CreateObject();
	if (ctx) {
		cJSON_AddStringToObject(ctx, "agentId", "main");
		cJSON_AddStringToObject(ctx, "sessionKey", s->key);
		if (run_id)
			cJSON_AddStringToObject(ctx, "runId", run_id);
	}
	pc_hooks_notify(s->agent->rt, s->agent->hooks, p, event, ctx, NULL);
}

/* An event holding the session key; NULL on no memory. */
static cJSON *session_event(const session_t *s)
{
	cJSON *e = cJSON_CreateObject();
	if (e && !cJSON_AddStringToObject(e, "sessionKey", s->key)) {
		cJSON_Delete(e);
		return NULL;
	}
	return e;
}

static void hook_session_start(session_t *s)
{
	s->up_ms = pc_runtime_now_ms();
	if (!pc_hooks_active(s->agent->hooks, PC_HOOK_SESSION_START, NULL))
		return;
	cJSON *e = session_event(s);
	if (e)
		cJSON_AddStringToObject(e, "reason", "start");
	notify(s, PC_HOOK_SESSION_START, e, NULL);
}

/* `was`: the session's state before its stop handler. */
static void hook_session_end(const session_t *s, pc_sess_lc_t was, int exit_reason)
{
	if (was == PC_SESS_LC_NEW || !pc_hooks_active(s->agent->hooks, PC_HOOK_SESSION_END, NULL))
		return;
	cJSON *e = session_event(s);
	if (!e)
		return;
	cJSON_AddStringToObject(e, "reason", was == PC_SESS_LC_RETIRING ? "idle"
					     : exit_reason == PC_EXIT_SHUTDOWN ? "shutdown" : "unknown");
	cJSON_AddNumberToObject(e, "durationMs", (double)(pc_runtime_now_ms() - s->up_ms));
	notify(s, PC_HOOK_SESSION_END, e, NULL);
}

static void hook_message_received(const session_t *s, const item_t *it, const char *queue_mode)
{
	if (!pc_hooks_active(s->agent->hooks, PC_HOOK_MESSAGE_RECEIVED, NULL))
		return;
	cJSON *e = session_event(s);
	if (!e)
		return;
	cJSON_AddStringToObject(e, "content", it->prompt);
	cJSON_AddStringToObject(e, "runId", it->run_id);
	if (it->idem)
		cJSON_AddStringToObject(e, "idempotencyKey", it->idem);
	if (queue_mode)
		cJSON_AddStringToObject(e, "queueMode", queue_mode);
	notify(s, PC_HOOK_MESSAGE_RECEIVED, e, it->run_id);
}

/* message_sent: the reply of an ok run went out with its terminal event
 * `data`. Nothing for a run with nothing to say (no payloads, NO_REPLY). */
static void hook_message_sent(const session_t *s, const char *run_id, const char *data)
{
	if (!pc_hooks_active(s->agent->hooks, PC_HOOK_MESSAGE_SENT, NULL))
		return;
	cJSON *d = cJSON_Parse(data);
	size_t n = 1;
	const cJSON *p;
	cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(d, "payloads")) {
		const char *t = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(p, "text"));
		n += t && !pc_payload_is_silent(t) ? strlen(t) + 2 : 0;
	}
	char *content = n > 1 ? malloc(n) : NULL;
	cJSON *e = content ? session_event(s) : NULL;
	if (e) {
		size_t off = 0;
		cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(d, "payloads")) {
			const char *t = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(p, "text"));
			if (t && !pc_payload_is_silent(t))
				off += (size_t)snprintf(content + off, n - off, "%s%s", off ? "\n\n" : "", t);
		}
		cJSON_AddStringToObject(e, "content", content);
		cJSON_AddBoolToObject(e, "success", true);
		cJSON_AddStringToObject(e, "runId", run_id);
		notify(s, PC_HOOK_MESSAGE_SENT, e, run_id);
	}
	free(content);
	cJSON_Delete(d);
}

/* ---- the stalled-session watchdog (§9.2) ---- */

static void diag_arm(pc_ctx_t *ctx, session_t *s)
{
	const pc_diagnostics_config_t *dc = &s->agent->cfg->diagnostics;
	s->run_started_ms = s->last_progress_ms = (int64_t)pc_runtime_now_ms();
	s->diag_seq = 0;
	s->warn_repeats = 0;
	s->last_warn_ms = 0;
	s->last_class = PC_DIAG_OK;
	s->recovery_sent = false;
	if (!dc->enabled)
		return;
	/* ticks at a quarter of the warn threshold: progress is seen to within that */
	uint64_t period = pc_diag_warn_ms(dc->warn_ms) / 4;
	pc_msg_t *m = pc_msg_new(PC__MSG_SESSION_DIAG, 0);
	if (m && pc_timer_every(pc_self(ctx), period ? period : 1, m, &s->diag_timer) != 0)
		s->diag_timer = 0;
}

static void diag_emit(session_t *s, const pc_diag_result_t *r)
{
	char d[256];
	snprintf(d, sizeof(d),
		 "{\"type\":\"%s\",\"ageMs\":%llu,\"runMs\":%llu,\"queued\":%zu,\"reason\":\"%s\","
		 "\"recovery\":\"%s\"}",
		 pc_diag_class_name(r->cls), (unsigned long long)r->age_ms, (unsigned long long)r->run_ms, s->qn,
		 r->reason ? r->reason : "",
		 r->recovery == PC_DIAG_RECOVER_ABORT_RUN ? "abort_run"
		 : r->recovery == PC_DIAG_RECOVER_RELEASE_LANE ? "release_lane" : "none");
	if (s->active && s->active->bus)
		pc_event_bus_emit(s->active->bus, PC_EVENT_DIAGNOSTIC, d, strlen(d), false, false, NULL);
}

static void release_stuck_lane(pc_ctx_t *ctx, session_t *s);

static void diag_tick(pc_ctx_t *ctx, session_t *s)
{
	if (s->state != PC_SESS_LC_RUNNING)
		return;
	const pc_diagnostics_config_t *dc = &s->agent->cfg->diagnostics;
	int64_t now = (int64_t)pc_runtime_now_ms();
	uint64_t seq = s->active->bus ? pc_event_bus_seq(s->active->bus) : 0;
	if (seq != s->diag_seq) {
		s->diag_seq = seq;
		s->last_progress_ms = now;
	}
	uint64_t warn = pc_diag_warn_ms(dc->warn_ms);
	pc_diag_input_t in = {
		.processing = true,
		.has_run = s->run != NULL,
		.activity = s->run_view == PC_RUN_STREAMING ? PC_DIAG_ACT_MODEL_CALL : PC_DIAG_ACT_NONE,
		.queued = (uint32_t)s->qn,
		.started_ms = s->run_started_ms,
		.last_progress_ms = s->last_progress_ms,
		.now_ms = now,
		.warn_ms = warn,
		.abort_ms = pc_diag_abort_ms(warn, dc->abort_ms),
	};
	pc_diag_result_t r;
	if (pc_diag_classify(&in, &r) != 0 || r.cls == PC_DIAG_OK) {
		s->last_class = PC_DIAG_OK;
		s->warn_repeats = 0;
		return;
	}
	if (r.cls != s->last_class)
		s->warn_repeats = 0;
	if (r.cls != s->last_class || pc_diag_should_warn(s->warn_repeats, s->last_warn_ms, now, warn)) {
		diag_emit(s, &r);
		__atomic_add_fetch(&s->agent->stats.diag[r.cls], 1, __ATOMIC_RELAXED);
		s->last_warn_ms = now;
		if (r.cls == s->last_class)
			s->warn_repeats++;
	}
	s->last_class = r.cls;
	/* recovery keeps the queue: it drains after the run is gone */
	if (r.recovery == PC_DIAG_RECOVER_ABORT_RUN && s->run && !s->recovery_sent) {
		s->recovery_sent = true;
		__atomic_add_fetch(&s->agent->stats.diag_recoveries, 1, __ATOMIC_RELAXED);
		pc_send_signal(s->run, PC__MSG_RUN_ABORT);
	} else if (r.recovery == PC_DIAG_RECOVER_RELEASE_LANE && !s->run) {
		__atomic_add_fetch(&s->agent->stats.diag_recoveries, 1, __ATOMIC_RELAXED);
		release_stuck_lane(ctx, s);
	}
}

/* ---- starting runs ---- */

static pc__lease_ctx_t lease_ctx(pc_ctx_t *ctx, session_t *s)
{
	return (pc__lease_ctx_t){ctx, &s->lease, s->agent->owner, s->key, pc_store_actor(s->agent->store),
				 s->agent->node_bound, &s->agent->stats.leases_held};
}

/* The active item asks the global lane for its permit, with a new ticket. */
static void ask_lane(pc_ctx_t *ctx, session_t *s)
{
	const pc_config_t *c = s->agent->cfg;
	uint64_t timeout = s->active->timeout_ms ? s->active->timeout_ms : c->agent.run_timeout_ms;
	/* §1.17: the lane task timeout is the run timeout + 30 s grace. */
	uint64_t lane_timeout = timeout ? timeout + 30000 : 0;
	s->ticket = __atomic_add_fetch(&s->agent->next_id, 1, __ATOMIC_RELAXED);
	int rc = pc_lane_acquire(s->agent->lane, s->ticket, s->active->priority, pc_self(ctx), 0, lane_timeout);
	if (rc != 0) {
		slot_end(s, &s->active, PC_RUN_STATUS_ERROR, "lane_unavailable");
		session_set(s, PC_SESS_LC_IDLE, "lane unavailable");
	}
}

/* Whether a run may start on the lease now: it is held, and no renewal is
 * in flight (after a failed run the renewal tells whether its writes were
 * fenced, and the next run waits for that answer). */
static bool lease_usable(const session_t *s)
{
	return s->lease.state == PC__LEASE_HELD;
}

/* Another process holds the session's lease, for as long as it likes: the
 * waiting run gives its permit (or its place) back rather than keep the
 * global lane from others, and asks again once the lease is its own. */
static void yield_lane(session_t *s)
{
	pc_lane_release(s->agent->lane, s->ticket);
	s->ticket = 0;
}

/*
 * The item becomes the active run. Two things must come before its run
 * actor: a global lane permit and the session's lease (nothing runs in a
 * session another process writes). The lane ticket is taken now, before
 * the lease's store round trip, whatever that costs: the lane then admits
 * runs in the order they were accepted (§6.1). A permit granted before
 * the lease is held waits for it (start_run from the lease's answer).
 */
static void start_item(pc_ctx_t *ctx, session_t *s, item_t *it)
{
	/* a collected batch has no one acceptance time */
	uint64_t now = pc_runtime_now_ms();
	if (it->enqueued_ms > 0 && now >= (uint64_t)it->enqueued_ms)
		pc__observe_ms(s->agent->metrics.queue_wait_seconds, now - (uint64_t)it->enqueued_ms);
	s->active = malloc(sizeof(*s->active));
	if (!s->active) {
		end_unrun(s, it, PC_RUN_STATUS_ERROR, "out_of_memory");
		return;
	}
	*s->active = *it;
	memset(it, 0, sizeof(*it));
	s->claim_corr = 0; /* a claim still owed was for a run that has ended */
	session_set(s, PC_SESS_LC_LANE, "next message");
	pc__lease_ctx_t lc = lease_ctx(ctx, s);
	if (pc__lease_want(&lc))
		pc__lease_busy(&lc);
	ask_lane(ctx, s);
}

static void drain(pc_ctx_t *ctx, session_t *s);

/* Permit and lease are there: the run actor. */
static void start_run(pc_ctx_t *ctx, session_t *s)
{
	pc__run_params_t p = {
		.run_id = s->active->run_id,
		.session_key = s->key,
		.prompt = s->active->prompt,
		.model = s->active->model,
		.extra_system_prompt = s->active->extra,
		.idempotency_key = s->active->idem,
		.timeout_ms = s->active->timeout_ms,
		.has_think = s->active->has_think,
		.think = s->active->think,
		.lane_ticket = s->ticket,
		.bus = s->active->bus,
		.epoch = pc__lease_epoch(&s->lease),
	};
	int rc = pc__run_spawn(s->agent, &p, pc_self(ctx), &s->run);
	if (rc != 0) {
		pc_lane_release(s->agent->lane, s->ticket);
		if (rc == PC_ENOTFOUND) {
			/* §1.2 step 8: FailoverError "Unknown model: p/m", model_not_found */
			char text[320];
			snprintf(text, sizeof(text), "Unknown model: %s", s->active->model ? s->active->model : "");
			item_t *it = s->active;
			s->active = NULL;
			end_unrun_with(s, it, PC_RUN_STATUS_ERROR, "model_not_found", text);
			free(it);
		} else {
			slot_end(s, &s->active, PC_RUN_STATUS_ERROR, "run_start_failed");
		}
		session_set(s, PC_SESS_LC_IDLE, rc == PC_ENOTFOUND ? "model not found" : "run start failed");
		drain(ctx, s);
		return;
	}
	session_set(s, PC_SESS_LC_RUNNING, "run started"); /* the run holds the permit now */
	diag_arm(ctx, s);
}

/* Lane permit and lease held: the run starts, unless the node lapsed (or
 * was out of the cluster) since the session was idle; then the run is
 * claimed first (the store adopts it for this owner only if no other node
 * took it over meanwhile, and only while this node is live). */
static void begin_run(pc_ctx_t *ctx, session_t *s)
{
	if (!s->reclaim && !s->lease.out) {
		start_run(ctx, s);
		return;
	}
	pc_msg_t *req = NULL;
	int rc = pc_store_req_run_adopt(s->active->run_id, s->agent->owner, s->agent->owner, &req);
	if (rc == 0)
		rc = pc_ask(ctx, pc_store_actor(s->agent->store), req, &s->claim_corr);
	if (rc != 0) {
		s->claim_corr = 0;
		pc_lane_release(s->agent->lane, s->ticket);
		slot_end(s, &s->active, PC_RUN_STATUS_ERROR, "run_start_failed");
		session_set(s, PC_SESS_LC_IDLE, "claim not sent");
		drain(ctx, s);
		return;
	}
	if (s->state != PC_SESS_LC_LEASE)
		session_set(s, PC_SESS_LC_LEASE, "claiming");
}

/* The claim's answer: the run starts, or it is another node's now and
 * ends here without a word to the store (its row is that node's). A node
 * out of the cluster again, or a lease lost meanwhile, waits for the lease
 * and claims again once it has it. */
static void on_claimed(pc_ctx_t *ctx, session_t *s, const pc_msg_t *msg)
{
	s->claim_corr = 0;
	if (!s->active || s->state != PC_SESS_LC_LEASE)
		return;
	pc_store_reply_t r;
	if (pc_store_reply_get(msg, &r) != 0)
		r = (pc_store_reply_t){.rc = PC_EINVAL};
	pc__lease_ctx_t lc = lease_ctx(ctx, s);
	if (r.rc == PC_ESTATE)
		pc__lease_release(&lc);
	if (r.rc == PC_ESTATE || (r.rc == 0 && !lease_usable(s))) {
		pc__lease_want(&lc); /* its answer (on_lease_reply) claims again */
		return;
	}
	if (r.rc == 0) {
		start_run(ctx, s);
		return;
	}
	pc_lane_release(s->agent->lane, s->ticket);
	item_t *it = s->active;
	s->active = NULL;
	bool taken = r.rc == PC_STORE_EFENCED || r.rc == PC_EBUSY;
	end_unrun_as(s, it, PC_RUN_STATUS_ERROR, taken ? "taken_over" : "claim_failed",
		     taken ? "the run was taken over by another cluster node while this one had lapsed" : NULL, !taken);
	free(it);
	session_set(s, PC_SESS_LC_IDLE, taken ? "run taken over" : "claim failed");
	drain(ctx, s);
}

static void on_granted(pc_ctx_t *ctx, session_t *s, const pc_lane_notice_t *n)
{
	if (s->state != PC_SESS_LC_LANE || n->ticket != s->ticket) {
		pc_lane_release(s->agent->lane, n->ticket);
		return;
	}
	pc__observe_ms(s->agent->metrics.lane_wait_seconds, n->wait_ms);
	if (n->wait_ms >= PC_LANE_WARN_AFTER_MS && s->active->bus) {
		char d[128];
		snprintf(d, sizeof(d), "{\"phase\":\"granted\",\"waitMs\":%llu,\"queuedAhead\":%u}",
			 (unsigned long long)n->wait_ms, n->queued_ahead);
		pc_event_bus_emit(s->active->bus, PC_EVENT_LANE, d, strlen(d), false, false, NULL);
	}
	if (lease_usable(s))
		begin_run(ctx, s);
	else if (s->lease.state == PC__LEASE_WAITING)
		yield_lane(s); /* the permit goes back at once: still waiting for the lane */
	else /* the lease's answer is on its way: on_lease_reply starts the run */
		session_set(s, PC_SESS_LC_LEASE, "granted");
}

/* ---- the queue ---- */

/* Moves *it to the end of an item array (it is left empty). */
static int items_push(item_t **items, size_t *n, size_t *cap, size_t first, item_t *it)
{
	if (PC__GROW(*items, *cap, *n + 1, first))
		return PC_ENOMEM;
	(*items)[(*n)++] = *it;
	memset(it, 0, sizeof(*it));
	return 0;
}

static int queue_push(session_t *s, item_t *it)
{
	return items_push(&s->queue, &s->qn, &s->qcap, 4, it);
}

/* Empties the queue (its items already ended or moved out). An idle
 * session keeps no spare capacity: a burst of queued messages would
 * otherwise leave each session that saw one holding the room for it. */
static void queue_clear(session_t *s)
{
	s->qn = 0;
	free(s->queue);
	s->queue = NULL;
	s->qcap = 0;
}

/* A steer the run refused goes back in the order messages arrived:
 * before what was queued after it came. */
static int queue_push_in_order(session_t *s, item_t *it)
{
	size_t at = s->qn;
	while (at > 0 && s->queue[at - 1].enqueued_ms > it->enqueued_ms)
		at--;
	if (queue_push(s, it) != 0)
		return PC_ENOMEM;
	item_t moved = s->queue[s->qn - 1];
	memmove(&s->queue[at + 1], &s->queue[at], (s->qn - 1 - at) * sizeof(item_t));
	s->queue[at] = moved;
	return 0;
}

static int steered_push(session_t *s, item_t *it)
{
	return items_push(&s->steered, &s->sn, &s->scap, 2, it);
}

/* Takes the steered message with this run id out into *out; false when
 * none has it (pc_agent_steer's text, or one settled already). */
static void steered_clear(session_t *s)
{
	free(s->steered);
	s->steered = NULL;
	s->sn = s->scap = 0;
}

static bool steered_take(session_t *s, const char *run_id, item_t *out)
{
	for (size_t i = 0; run_id[0] && i < s->sn; i++) {
		if (strcmp(s->steered[i].run_id, run_id) != 0)
			continue;
		*out = s->steered[i];
		memmove(&s->steered[i], &s->steered[i + 1], (s->sn - i - 1) * sizeof(item_t));
		if (--s->sn == 0)
			steered_clear(s);
		return true;
	}
	return false;
}

/* The active run is being aborted: what was steered into it goes with
 * it, as queued messages do; a refusal or an injection still on its way
 * finds nothing to settle. */
static void steered_end_all(session_t *s, pc_run_status_t status, const char *why)
{
	for (size_t i = 0; i < s->sn; i++)
		end_unrun(s, &s->steered[i], status, why);
	steered_clear(s);
}

/* The run answered every steer it received before its end (taken or
 * refused, in order, ahead of that report): one still here never reached
 * it, and waits its turn like a refused one. */
static void steered_requeue(session_t *s)
{
	if (s->sn)
		s->last_enqueue_ms = (int64_t)pc_runtime_now_ms();
	for (size_t i = 0; i < s->sn; i++)
		if (queue_push_in_order(s, &s->steered[i]) != 0)
			end_unrun(s, &s->steered[i], PC_RUN_STATUS_ERROR, "no_memory");
	steered_clear(s);
}

static void queue_remove(session_t *s, size_t i)
{
	memmove(&s->queue[i], &s->queue[i + 1], (s->qn - i - 1) * sizeof(item_t));
	if (--s->qn == 0)
		queue_clear(s);
}

/* A view for the policy; `items` must hold s->qn entries. */
static pc_queue_view_t view(const session_t *s, pc_queue_item_t *items)
{
	for (size_t i = 0; i < s->qn; i++)
		items[i] = (pc_queue_item_t){.message_id = s->queue[i].idem, .prompt = s->queue[i].prompt,
					     .priority = s->queue[i].priority,
					     .enqueued_ms = s->queue[i].enqueued_ms};
	return (pc_queue_view_t){.items = items, .n = s->qn, .dropped = s->dropped,
				 .last_enqueue_ms = s->last_enqueue_ms, .individual = s->individual};
}

static void drop_victims(session_t *s, size_t count, bool summarize)
{
	if (count == 0 || s->qn == 0)
		return;
	pc_queue_item_t *items = calloc(s->qn, sizeof(*items));
	size_t *idx = calloc(count, sizeof(*idx));
	if (!items || !idx) {
		free(items);
		free(idx);
		return;
	}
	pc_queue_view_t v = view(s, items);
	size_t n = pc_queue_victims(&v, count, idx);
	/* remove from the back so earlier indexes stay valid */
	for (size_t k = n; k-- > 0;) {
		item_t it = s->queue[idx[k]];
		queue_remove(s, idx[k]);
		if (summarize) {
			char *line = NULL;
			char **lines = realloc(s->drop_lines, (s->n_drop_lines + 1) * sizeof(char *));
			if (lines) {
				s->drop_lines = lines;
				if (pc_queue_summary_line(it.prompt, &line) == 0)
					s->drop_lines[s->n_drop_lines++] = line;
			}
			s->dropped++;
		}
		end_unrun(s, &it, PC_RUN_STATUS_ERROR, "queue_overflow");
	}
	free(items);
	free(idx);
}

static void clear_drops(session_t *s)
{
	for (size_t i = 0; i < s->n_drop_lines; i++)
		free(s->drop_lines[i]);
	free(s->drop_lines);
	s->drop_lines = NULL;
	s->n_drop_lines = 0;
	s->dropped = 0;
}

/* A synthetic turn (overflow summary, collected batch) gets a run of its
 * own, registered like any other. */
static int synthetic_item(session_t *s, char *prompt, item_t *out)
{
	memset(out, 0, sizeof(*out));
	pc__agent_run_id(s->agent, out->run_id);
	int rc = new_bus(s, out->run_id, &out->bus);
	if (rc != 0) {
		free(prompt);
		return rc;
	}
	rc = pc_run_registry_add(s->agent->runs, out->run_id, s->key, pc__clock_wall_ms(),
				 pc_event_bus_retain(out->bus), bus_release);
	if (rc != 0) {
		pc_event_bus_release(out->bus);
		pc_event_bus_release(out->bus);
		free(prompt);
		return rc;
	}
	out->prompt = prompt;
	out->priority = PC_QUEUE_NORMAL;
	return 0;
}

/* The lane is free: what runs next (§6.3 step 6). */
static void drain(pc_ctx_t *ctx, session_t *s)
{
	if (s->active)
		return;
	if (s->interrupt) {
		cancel_timer(ctx, &s->interrupt_timer);
		item_t *it = s->interrupt;
		s->interrupt = NULL;
		start_item(ctx, s, it);
		free(it);
		return;
	}
	pc_queue_item_t *items = s->qn ? calloc(s->qn, sizeof(*items)) : NULL;
	if (s->qn && !items)
		return;
	pc_queue_view_t v = view(s, items);
	pc_queue_next_t next;
	int64_t now = (int64_t)pc_runtime_now_ms();
	int rc = pc_queue_next(&s->settings, &v, now, &next);
	if (rc != 0)
		next.kind = PC_QUEUE_NEXT_IDLE;
	s->individual = next.individual;
	item_t it;
	switch (next.kind) {
	case PC_QUEUE_NEXT_WAIT:
		arm(ctx, &s->drain_timer, PC__MSG_SESSION_DRAIN,
		    next.wait_until_ms > now ? (uint64_t)(next.wait_until_ms - now) : 1);
		break;
	case PC_QUEUE_NEXT_RUN_ITEM:
		it = s->queue[next.index];
		queue_remove(s, next.index);
		start_item(ctx, s, &it);
		break;
	case PC_QUEUE_NEXT_RUN_BATCH: {
		char *summary = NULL, *prompt = NULL;
		if (s->dropped)
			pc_queue_overflow_prompt(s->dropped, (const char *const *)s->drop_lines, s->n_drop_lines,
						 s->settings.cap, &summary);
		rc = pc_queue_collect_prompt(items, s->qn, summary, &prompt);
		free(summary);
		if (rc != 0)
			break;
		clear_drops(s);
		/* The batch runs as the last item's run; the others were
		 * delivered inside it. */
		it = s->queue[s->qn - 1];
		s->qn--;
		for (size_t i = 0; i < s->qn; i++)
			end_unrun(s, &s->queue[i], PC_RUN_STATUS_OK, "collected");
		queue_clear(s);
		free(it.prompt);
		it.prompt = prompt;
		start_item(ctx, s, &it);
		break;
	}
	case PC_QUEUE_NEXT_RUN_OVERFLOW: {
		char *prompt = NULL;
		if (pc_queue_overflow_prompt(s->dropped, (const char *const *)s->drop_lines, s->n_drop_lines,
					     s->settings.cap, &prompt) == 0 && prompt &&
		    synthetic_item(s, prompt, &it) == 0)
			start_item(ctx, s, &it);
		clear_drops(s);
		break;
	}
	default:
		/* nothing left: the reaper retires the session if it stays so,
		 * and the lease goes back soon, for another process's turn;
		 * no run from before a lapse is left to claim */
		s->reclaim = s->lease.out = false;
		pc__session_set_idle(s->agent, s->key, true);
		pc__lease_ctx_t lc = lease_ctx(ctx, s);
		pc__lease_idle(&lc);
		break;
	}
	free(items);
}

/* §9.2 session.stuck: the lane is held with no run behind it; release it
 * (the run's entry ends as an error) and let the queue drain. */
static void release_stuck_lane(pc_ctx_t *ctx, session_t *s)
{
	if (!s->active)
		return;
	cancel_timer(ctx, &s->diag_timer);
	pc_lane_release(s->agent->lane, s->ticket);
	slot_end(s, &s->active, PC_RUN_STATUS_ERROR, "stuck");
	session_set(s, PC_SESS_LC_IDLE, "stuck");
	drain(ctx, s);
}

/* A run ended: the lane is freed first, then the run's terminal event goes
 * out and its waiters wake, then the next message runs. */
static void on_run_done(pc_ctx_t *ctx, session_t *s, const pc__run_done_t *d)
{
	pc_event_bus_t *bus = NULL;
	bool mine = s->active && !strcmp(d->run_id, s->active->run_id);
	if (mine) {
		bus = pc_event_bus_retain(s->active->bus);
		if (s->run) {
			pc_actor_release(s->run);
			s->run = NULL;
		}
		cancel_timer(ctx, &s->diag_timer);
		slot_drop(&s->active);
		session_set(s, PC_SESS_LC_IDLE, "run done");
	} else {
		bus = pc_run_registry_attachment(s->agent->runs, d->run_id, bus_retain);
	}
	const char *data = d->buf + d->data;
	if (bus)
		pc_event_bus_emit(bus, PC_EVENT_LIFECYCLE, data, strlen(data), false, true, NULL);
	pc_event_bus_release(bus);
	if (d->status == PC_RUN_STATUS_OK)
		hook_message_sent(s, d->run_id, data);
	pc_run_registry_finish(s->agent->runs, d->run_id, d->status, pc__clock_wall_ms(),
			       d->error ? d->buf + d->error : NULL, d->kind[0] ? d->kind : NULL, d->replay_invalid);
	if (mine && d->status != PC_RUN_STATUS_OK) {
		/* perhaps its writes were fenced: the lease's renewal tells, and
		 * the next run waits for that answer */
		pc__lease_ctx_t lc = lease_ctx(ctx, s);
		pc__lease_check(&lc);
	}
	if (mine) {
		steered_requeue(s);
		drain(ctx, s);
	}
}

/* ---- accepting ---- */

/* Answers the submit, once. The answer's message was made when the submit
 * arrived, so no path that answers depends on memory being free then. */
static void reply_accepted(pending_t *p, int rc, const char *run_id, pc_agent_disposition_t d)
{
	pc_msg_t *m = p->reply;
	if (!m)
		return;
	p->reply = NULL;
	pc_agent_submit_reply_t *r = pc_msg_data(m);
	memset(r, 0, sizeof(*r));
	r->rc = rc;
	if (run_id)
		snprintf(r->accepted.run_id, sizeof(r->accepted.run_id), "%.64s", run_id);
	r->accepted.accepted_ms = pc__clock_wall_ms();
	r->accepted.disposition = d;
	m->corr = p->corr;
	pc_send(p->reply_to, m);
}

static void pending_free(pending_t *p)
{
	pc_msg_free(p->reply);
	pc_actor_release(p->reply_to);
	free(p->params);
}

static void admit(pc_ctx_t *ctx, session_t *s, pending_t *p);
static void abort_run(pc_ctx_t *ctx, session_t *s, const char *run_id);
static int on_recovered(pc_ctx_t *ctx, session_t *s, const pc_msg_t *msg);

/*
 * A submit is answered exactly once (PC_MSG_AGENT_ACCEPTED to its asker):
 * here when it cannot be taken (memory, the store), else once the store
 * has its run row (accepted()), or with PC_ESTOPPED by session_stop. The
 * answer's message is made first; only when even that fails is nothing
 * sent (there is no memory to say so), and the asker's own deadline is
 * what is left. A submit without an asker (never made by the agent API)
 * has nobody to answer.
 */
/* Asks the store for pending p's run row (its corr in p->store_corr). */
static int begin_row(pc_ctx_t *ctx, session_t *s, pending_t *p)
{
	const char *idem = sub_str(p->params, p->params->idem);
	/* what running it takes, kept with the row until it ends, so a crash
	 * does not lose it once it is acknowledged */
	char *prompt = pc__submit_prompt_json(p->params);
	char fp[17];
	if (idem)
		pc__submit_fingerprint(prompt, fp);
	pc_msg_t *req = NULL;
	pc_store_run_new_t rn = {.key = s->key, .run_id = p->run_id, .idem_key = idem,
				 .fingerprint = idem ? fp : NULL, .owner = s->agent->owner, .prompt = prompt,
				 .flags = idem ? PC_STORE_REQ_EARLY : 0};
	int rc = prompt ? pc_store_req_run_begin(&rn, &req) : PC_ENOMEM;
	cJSON_free(prompt);
	if (rc == 0)
		rc = pc_ask(ctx, pc_store_actor(s->agent->store), req, &p->store_corr);
	return rc;
}

static int on_submit(pc_ctx_t *ctx, session_t *s, const pc_msg_t *msg)
{
	if (msg->size >= sizeof(pc__submit_t) && ((const pc__submit_t *)pc_msg_cdata(msg))->recover)
		return on_recovered(ctx, s, msg);
	if (!msg->reply_to)
		return 0;
	pending_t p = {
		.reply_to = pc_actor_retain(msg->reply_to),
		.corr = msg->corr,
		.reply = pc_msg_new(PC_MSG_AGENT_ACCEPTED, sizeof(pc_agent_submit_reply_t)),
		.params = malloc(msg->size),
		.params_size = msg->size,
	};
	const char *idem = NULL;
	int rc = p.reply && p.params ? PC__GROW(s->pend, s->pcap, s->pn + 1, 2) : PC_ENOMEM;
	if (rc == 0) {
		memcpy(p.params, pc_msg_cdata(msg), msg->size);
		idem = sub_str(p.params, p.params->idem);
		/* a caller's run id goes with its idempotency key (a repeat must
		 * find the first run by it); without one, an id of our own */
		if (p.params->run_id && idem)
			snprintf(p.run_id, sizeof(p.run_id), "%s", sub_str(p.params, p.params->run_id));
		else
			pc__agent_run_id(s->agent, p.run_id);
		/* the lease before the row: its commit is then the only one a
		 * run admitted early waits for (they commit one after another) */
		pc__lease_ctx_t lc = lease_ctx(ctx, s);
		(void)pc__lease_want(&lc);
		rc = begin_row(ctx, s, &p);
	}
	if (rc != 0) {
		reply_accepted(&p, rc, NULL, PC_AGENT_DROPPED);
		pending_free(&p);
		return 0;
	}
	if (s->pn == 0)
		pc__session_set_idle(s->agent, s->key, false);
	s->pend[s->pn++] = p;
	/* Without an idempotency key the store cannot refuse it as a
	 * duplicate, so the run need not wait for the row: it is admitted now
	 * (its own writes reach the store after the row, in order), and the
	 * caller is answered once the row is durable. With a key it is
	 * admitted on the store's provisional answer (the key was new), before
	 * the commit. */
	if (!idem) {
		s->pend[s->pn - 1].early = true;
		admit(ctx, s, &s->pend[s->pn - 1]);
	}
	return 0;
}

static int dup_field(char **dst, const char *src)
{
	if (!src)
		return 0;
	*dst = strdup(src);
	return *dst ? 0 : PC_ENOMEM;
}

/* The answer to the caller: at once, or kept until the run row is durable
 * when the message was admitted early. */
static void answer(pending_t *p, int rc, const char *run_id, pc_agent_disposition_t d)
{
	if (p->early) {
		p->answer_rc = rc;
		p->answer = d;
		return;
	}
	reply_accepted(p, rc, run_id, d);
}


/* The store has the run: register it, decide, answer, act. */
static void accepted(pc_ctx_t *ctx, session_t *s, pending_t *p, const pc_store_reply_t *r)
{
	if (p->early) {
		if (r->rc != 0 || !(r->flags & PC_STORE_CREATED)) {
			/* the run row did not make it (or, against what the
			 * provisional answer said, the key was taken): the run
			 * must not go on */
			abort_run(ctx, s, p->run_id);
			pc_run_registry_finish(s->agent->runs, p->run_id, PC_RUN_STATUS_ERROR, pc__clock_wall_ms(),
					       r->rc ? pc_store_strerror(r->rc) : "duplicate", "store", false);
			if (r->rc)
				reply_accepted(p, r->rc, NULL, PC_AGENT_DROPPED);
			else
				reply_accepted(p, 0, r->id, PC_AGENT_DUPLICATE);
			return;
		}
		reply_accepted(p, p->answer_rc, p->answer_rc ? NULL : p->run_id, p->answer);
		return;
	}
	if (r->rc != 0) {
		reply_accepted(p, r->rc, NULL, PC_AGENT_DROPPED);
		return;
	}
	if (r->flags & PC_STORE_MISMATCH) {
		/* the key was used for another request: neither is this one */
		reply_accepted(p, PC_EEXIST, r->id, PC_AGENT_DUPLICATE);
		return;
	}
	if (!(r->flags & PC_STORE_CREATED)) {
		reply_accepted(p, 0, r->id, PC_AGENT_DUPLICATE);
		return;
	}
	admit(ctx, s, p);
}

/* A run a gone process accepted and never began, adopted by this one
 * (recovery_internal.h): its row exists, nobody waits for an answer; it joins the
 * session's queue in the order recovery sends them. */
static int on_recovered(pc_ctx_t *ctx, session_t *s, const pc_msg_t *msg)
{
	pending_t p = {.params = malloc(msg->size), .params_size = msg->size};
	if (!p.params)
		return 0; /* its row stays accepted: the next start tries again */
	memcpy(p.params, pc_msg_cdata(msg), msg->size);
	snprintf(p.run_id, sizeof(p.run_id), "%s", sub_str(p.params, p.params->recover));
	pc__session_set_idle(s->agent, s->key, false);
	admit(ctx, s, &p);
	pending_free(&p);
	if (!s->active && !s->interrupt && s->qn == 0 && s->pn == 0)
		pc__session_set_idle(s->agent, s->key, true);
	return 0;
}

/* Registers the run, decides what the queue policy says, answers, acts. */
static void admit(pc_ctx_t *ctx, session_t *s, pending_t *p)
{
	const pc__submit_t *sp = p->params;
	item_t it = {0};
	snprintf(it.run_id, sizeof(it.run_id), "%s", p->run_id);
	int rc = dup_field(&it.prompt, sub_str(sp, sp->message));
	if (rc == 0)
		rc = dup_field(&it.model, sub_str(sp, sp->model));
	if (rc == 0)
		rc = dup_field(&it.extra, sub_str(sp, sp->extra));
	if (rc == 0)
		rc = dup_field(&it.idem, sub_str(sp, sp->idem));
	it.priority = pc_queue_priority_for_trigger(sub_str(sp, sp->trigger));
	it.timeout_ms = sp->timeout_ms;
	it.has_think = sp->has_think;
	it.think = sp->think;
	it.enqueued_ms = (int64_t)pc_runtime_now_ms();
	if (rc == 0)
		rc = new_bus(s, it.run_id, &it.bus);
	if (rc == 0) {
		rc = pc_run_registry_add(s->agent->runs, it.run_id, s->key, pc__clock_wall_ms(),
					 pc_event_bus_retain(it.bus), bus_release);
		if (rc != 0)
			pc_event_bus_release(it.bus);
	}
	if (rc != 0) {
		item_free(&it);
		answer(p, rc, NULL, PC_AGENT_DROPPED);
		return;
	}
	hook_message_received(s, &it, sub_str(sp, sp->queue_mode));

	pc_queue_settings_t st = s->agent->cfg->agent.queue;
	pc_queue_mode_t mode;
	if (sub_str(sp, sp->queue_mode) && pc_queue_mode_parse(sub_str(sp, sp->queue_mode), &mode) == 0)
		st.mode = mode;
	pc_queue_item_t *items = s->qn ? calloc(s->qn, sizeof(*items)) : NULL;
	pc_queue_view_t v = view(s, items);
	const char *trigger = sub_str(sp, sp->trigger);
	pc_queue_incoming_t in = {.mode = st.mode, .priority = it.priority,
				  .heartbeat = trigger && !strcmp(trigger, "heartbeat"),
				  .message_id = it.idem};
	pc_run_phase_t phase = pc_sess_lc_queue_phase(s->state, s->run_view, s->interrupt != NULL);
	int64_t now = (int64_t)pc_runtime_now_ms();
	pc_queue_decision_t d;
	rc = (s->qn && !items) ? PC_ENOMEM : pc_queue_on_message(&st, &v, phase, &in, now, &d);
	free(items);
	if (rc != 0) {
		answer(p, rc, NULL, PC_AGENT_DROPPED);
		end_unrun(s, &it, PC_RUN_STATUS_ERROR, "rejected");
		return;
	}
	switch (d.action) {
	case PC_QUEUE_RUN_NOW:
		answer(p, 0, it.run_id, PC_AGENT_STARTED);
		if (s->active) {
			/* the policy only says "run now" for a free lane */
			s->settings = st;
			queue_push(s, &it);
		} else {
			start_item(ctx, s, &it);
		}
		return;
	case PC_QUEUE_INJECT: {
		answer(p, 0, it.run_id, PC_AGENT_STEERED);
		pc_msg_t *steer = s->run ? pc__steer_msg(PC__MSG_RUN_STEER, it.run_id, it.prompt) : NULL;
		if (d.also_enqueue) {
			drop_victims(s, d.drop_count, d.summarize);
			item_t copy = {0};
			if (synthetic_item(s, strdup(it.prompt), &copy) == 0) {
				s->settings = st;
				s->last_enqueue_ms = now;
				queue_push(s, &copy);
			}
		}
		/* it ends when the run says its text went in; a run that cannot
		 * take it says so, and it runs after, as a followup */
		if (steer && steered_push(s, &it) == 0) {
			pc_send(s->run, steer);
		} else {
			pc_msg_free(steer);
			s->last_enqueue_ms = now;
			if (queue_push(s, &it) != 0)
				end_unrun(s, &it, PC_RUN_STATUS_ERROR, "no_memory");
		}
		return;
	}
	case PC_QUEUE_ENQUEUE:
		answer(p, 0, it.run_id, PC_AGENT_QUEUED);
		drop_victims(s, d.drop_count, d.summarize);
		s->settings = st;
		s->last_enqueue_ms = now;
		if (queue_push(s, &it) != 0)
			end_unrun(s, &it, PC_RUN_STATUS_ERROR, "no_memory");
		return;
	case PC_QUEUE_ABORT_THEN_RUN:
		answer(p, 0, it.run_id, PC_AGENT_STARTED);
		/* §6.3 step 1: queued turns are cleared, the active run aborted */
		for (size_t i = 0; i < s->qn; i++)
			end_unrun(s, &s->queue[i], PC_RUN_STATUS_ABORTED, "interrupted");
		queue_clear(s);
		steered_end_all(s, PC_RUN_STATUS_ABORTED, "interrupted");
		/* the run it replaces, or room for it: kept apart from the session's
		 * state, which an idle session would otherwise carry empty */
		if (s->interrupt)
			end_unrun(s, s->interrupt, PC_RUN_STATUS_ABORTED, "interrupted");
		else if (!(s->interrupt = malloc(sizeof(*s->interrupt)))) {
			end_unrun(s, &it, PC_RUN_STATUS_ERROR, "out_of_memory");
			return;
		}
		*s->interrupt = it;
		if (s->run) {
			pc_send_signal(s->run, PC__MSG_RUN_ABORT);
			arm(ctx, &s->interrupt_timer, PC__MSG_SESSION_INTERRUPT_WAIT, PC_QUEUE_RUN_END_WAIT_MS);
		} else if (s->active) {
			/* still waiting for the global lane: withdraw it */
			pc_lane_release(s->agent->lane, s->ticket);
			slot_end(s, &s->active, PC_RUN_STATUS_ABORTED, "interrupted");
			session_set(s, PC_SESS_LC_IDLE, "interrupted");
			drain(ctx, s);
		} else {
			drain(ctx, s);
		}
		return;
	case PC_QUEUE_REFUSE:
	case PC_QUEUE_DROP:
	default:
		answer(p, 0, it.run_id, PC_AGENT_DROPPED);
		end_unrun(s, &it, PC_RUN_STATUS_ERROR, d.action == PC_QUEUE_REFUSE ? "queue_full" : "dropped");
		return;
	}
}

/* The store ran the run row's statement (not yet committed): a new key
 * admits the run now; the final reply still answers the caller. */
static void on_provisional(pc_ctx_t *ctx, session_t *s, pending_t *p, const pc_store_reply_t *r)
{
	if (p->early || r->rc != 0 || !(r->flags & PC_STORE_CREATED))
		return;
	p->early = true;
	admit(ctx, s, p);
}

static bool on_store_reply(pc_ctx_t *ctx, session_t *s, const pc_msg_t *msg)
{
	for (size_t i = 0; i < s->pn; i++) {
		if (s->pend[i].store_corr != msg->corr)
			continue;
		pc_store_reply_t r;
		if (pc_store_reply_get(msg, &r) != 0)
			r = (pc_store_reply_t){.rc = PC_EINVAL};
		if (r.flags & PC_STORE_PROVISIONAL) {
			on_provisional(ctx, s, &s->pend[i], &r);
			return true;
		}
		/* the caller's run id names a run of another session (keys are
		 * the session's, run ids the store's): the run gets an id of
		 * its own instead */
		pending_t *q = &s->pend[i];
		if (r.rc == PC_EEXIST && q->params->run_id && !q->early) {
			q->params->run_id = 0;
			pc__agent_run_id(s->agent, q->run_id);
			if (begin_row(ctx, s, q) == 0)
				return true;
			r.rc = PC_ENOMEM;
		}
		pending_t p = s->pend[i];
		memmove(&s->pend[i], &s->pend[i + 1], (s->pn - i - 1) * sizeof(pending_t));
		if (--s->pn == 0) {
			/* an idle session keeps no spare capacity */
			free(s->pend);
			s->pend = NULL;
			s->pcap = 0;
		}
		accepted(ctx, s, &p, &r);
		pending_free(&p);
		if (!s->active && !s->interrupt && s->qn == 0 && s->pn == 0)
			pc__session_set_idle(s->agent, s->key, true);
		return true;
	}
	return false;
}

/* ---- the lease ---- */

/* Another process owns the session now (or may, any moment): its writes
 * would be refused anyway; the run stops at once, a waiting one asks
 * again. */
static void lease_lost(session_t *s, const pc__lease_ctx_t *lc, bool waiting, const char *why)
{
	pc__transcript_drop(s->agent, s->key);
	(void)pc_log_kv(s->agent->log, PC_LOG_WARN, why, PC_LF_STR("sessionKey", s->key),
			PC_LF_STR("run", s->active ? s->active->run_id : NULL));
	if (s->run)
		pc_send_signal(s->run, PC__MSG_RUN_ABORT);
	else if (waiting)
		pc__lease_want(lc);
}

/* The cluster node's deadline passed (pc_agent_node_lapsed). A run
 * waiting for its permit or its lease asks for the lease again. */
static void on_lapsed(pc_ctx_t *ctx, session_t *s)
{
	pc__lease_ctx_t lc = lease_ctx(ctx, s);
	s->reclaim = true;
	bool waiting = s->state == PC_SESS_LC_LANE || s->state == PC_SESS_LC_LEASE;
	if (pc__lease_lapse(&lc))
		lease_lost(s, &lc, waiting, "session lease lapsed: this cluster node missed its heartbeat");
}

static void on_lease_reply(pc_ctx_t *ctx, session_t *s, const pc_msg_t *msg)
{
	pc__lease_ctx_t lc = lease_ctx(ctx, s);
	pc__lease_event_t ev;
	bool fresh;
	if (!pc__lease_on_reply(&lc, msg, &ev, &fresh))
		return;
	bool waiting = s->state == PC_SESS_LC_LANE || s->state == PC_SESS_LC_LEASE;
	/* another process holds it: no global permit is kept meanwhile */
	if (s->state == PC_SESS_LC_LEASE && s->lease.state == PC__LEASE_WAITING) {
		yield_lane(s);
		session_set(s, PC_SESS_LC_LANE, "lease held elsewhere");
	}
	switch (ev) {
	case PC__LEASE_EV_GRANTED:
		/* another process wrote the transcript since: what this one
		 * kept of it is stale */
		if (fresh)
			pc__transcript_drop(s->agent, s->key);
		break;
	case PC__LEASE_EV_LOST:
		lease_lost(s, &lc, waiting, "session lease lost to another process");
		return;
	case PC__LEASE_EV_FAILED:
		if (waiting) {
			/* its place in the lane (queued or granted) goes with it */
			pc_lane_release(s->agent->lane, s->ticket);
			slot_end(s, &s->active, PC_RUN_STATUS_ERROR, "lease_unavailable");
			session_set(s, PC_SESS_LC_IDLE, "lease unavailable");
			drain(ctx, s);
		}
		return;
	default:
		break;
	}
	/* held (taken, or renewed while a run waited for the answer) */
	if (s->lease.state != PC__LEASE_HELD)
		return;
	if (waiting) {
		if (s->state == PC_SESS_LC_LEASE && !s->claim_corr)
			begin_run(ctx, s);
		else if (!s->ticket)
			ask_lane(ctx, s); /* it gave its place up while another process held the lease */
		/* else still queued in the lane: on_granted starts it */
	} else if (!s->active && !s->interrupt && !s->qn && !s->pn) {
		pc__lease_idle(&lc);
	}
}

/* ---- aborts and steering ---- */

static void abort_run(pc_ctx_t *ctx, session_t *s, const char *run_id)
{
	if (s->active && !strcmp(s->active->run_id, run_id)) {
		if (s->run) {
			pc_send_signal(s->run, PC__MSG_RUN_ABORT);
		} else {
			pc_lane_release(s->agent->lane, s->ticket);
			slot_end(s, &s->active, PC_RUN_STATUS_ABORTED, "aborted");
			session_set(s, PC_SESS_LC_IDLE, "aborted");
			drain(ctx, s);
		}
		return;
	}
	if (s->interrupt && !strcmp(s->interrupt->run_id, run_id)) {
		cancel_timer(ctx, &s->interrupt_timer);
		slot_end(s, &s->interrupt, PC_RUN_STATUS_ABORTED, "aborted");
		return;
	}
	for (size_t i = 0; i < s->qn; i++) {
		if (strcmp(s->queue[i].run_id, run_id))
			continue;
		item_t it = s->queue[i];
		queue_remove(s, i);
		end_unrun(s, &it, PC_RUN_STATUS_ABORTED, "aborted");
		return;
	}
}

static void abort_all(pc_ctx_t *ctx, session_t *s)
{
	for (size_t i = 0; i < s->qn; i++)
		end_unrun(s, &s->queue[i], PC_RUN_STATUS_ABORTED, "aborted");
	queue_clear(s);
	steered_end_all(s, PC_RUN_STATUS_ABORTED, "aborted");
	clear_drops(s);
	if (s->interrupt) {
		cancel_timer(ctx, &s->interrupt_timer);
		slot_end(s, &s->interrupt, PC_RUN_STATUS_ABORTED, "aborted");
	}
	if (s->active)
		abort_run(ctx, s, s->active->run_id);
}

/* pc_agent_steer: the run answers (it knows whether its attempt can take
 * the text now); without a run the session does. */
static void on_steer(session_t *s, const pc_msg_t *msg)
{
	int64_t rc = PC_ENOTFOUND;
	if (s->active && s->run && msg->reply_to) {
		pc_msg_t *fwd = pc__steer_msg(PC__MSG_RUN_STEER, "", pc_msg_cdata(msg));
		if (fwd && pc_ask_as(s->run, fwd, msg->reply_to, msg->corr) == 0)
			return;
		rc = PC_ESTATE;
	} else if (s->active) {
		rc = PC_ESTATE;
	}
	pc_msg_t *r = pc_msg_new(PC__MSG_SESSION_STEER, sizeof(int64_t));
	if (r) {
		*(int64_t *)pc_msg_data(r) = rc;
		pc_reply(msg, r);
	}
}

/* ---- the behaviour ---- */

static int session_receive(pc_ctx_t *ctx, void *state, pc_msg_t *msg)
{
	session_t *s = state;
	if (s->state == PC_SESS_LC_NEW) {
		session_set(s, PC_SESS_LC_IDLE, "first message");
		hook_session_start(s);
	}
	switch (msg->type) {
	case PC__MSG_SESSION_SUBMIT:
		pc__session_consumed(s->agent, s->key);
		return on_submit(ctx, s, msg);
	case PC__MSG_SESSION_ABORT_RUN:
		pc__session_consumed(s->agent, s->key);
		abort_run(ctx, s, pc_msg_cdata(msg));
		return 0;
	case PC__MSG_SESSION_ABORT_ALL:
		pc__session_consumed(s->agent, s->key);
		abort_all(ctx, s);
		return 0;
	case PC__MSG_SESSION_STEER:
		pc__session_consumed(s->agent, s->key);
		on_steer(s, msg);
		return 0;
	case PC_STORE_MSG_REPLY:
		if (s->claim_corr && msg->corr == s->claim_corr)
			on_claimed(ctx, s, msg);
		else if (!on_store_reply(ctx, s, msg))
			on_lease_reply(ctx, s, msg);
		return 0;
	case PC__MSG_SESSION_LAPSED:
		on_lapsed(ctx, s);
		return 0;
	case PC__MSG_SESSION_LEASE: {
		pc__lease_ctx_t lc = lease_ctx(ctx, s);
		pc__lease_on_tick(&lc, s->active || s->interrupt || s->qn || s->pn);
		return 0;
	}
	case PC_MSG_LANE_GRANTED:
		on_granted(ctx, s, pc_msg_cdata(msg));
		return 0;
	case PC_MSG_LANE_WAITING: {
		const pc_lane_notice_t *n = pc_msg_cdata(msg);
		if (s->active && n->ticket == s->ticket && s->active->bus) {
			char d[128];
			snprintf(d, sizeof(d), "{\"phase\":\"wait\",\"queuedAhead\":%u,\"active\":%u}",
				 n->queued_ahead, n->active);
			pc_event_bus_emit(s->active->bus, PC_EVENT_LANE, d, strlen(d), false, false, NULL);
		}
		return 0;
	}
	case PC_MSG_LANE_EXPIRED: {
		/* §1.17: the lane took its permit back; the run must end (one
		 * still waiting for its lease ends without having run) */
		const pc_lane_notice_t *n = pc_msg_cdata(msg);
		if (n->ticket != s->ticket || !s->active)
			return 0;
		if (s->run) {
			pc_send_signal(s->run, PC__MSG_RUN_ABORT);
		} else if (s->state == PC_SESS_LC_LEASE) {
			s->ticket = 0;
			slot_end(s, &s->active, PC_RUN_STATUS_ERROR, "lane_timeout");
			session_set(s, PC_SESS_LC_IDLE, "lane timeout");
			drain(ctx, s);
		}
		return 0;
	}
	case PC__MSG_RUN_PHASE:
		if (s->active)
			s->run_view = (pc_run_phase_t)pc_msg_u64(msg);
		return 0;
	case PC__MSG_RUN_DONE:
		on_run_done(ctx, s, pc_msg_cdata(msg));
		return 0;
	case PC__MSG_STEER_REJECTED: {
		/* it could not be steered in: run it after the active run, as
		 * its own message's run when it has one */
		const char *p = pc_msg_cdata(msg);
		item_t it;
		bool have;
		if (*pc__steer_id(p)) {
			have = steered_take(s, pc__steer_id(p), &it); /* else aborted since */
		} else {
			/* pc_agent_steer's text: it waits from now, after the rest */
			char *prompt = strdup(pc__steer_text(p));
			have = prompt && synthetic_item(s, prompt, &it) == 0;
			if (have)
				it.enqueued_ms = (int64_t)pc_runtime_now_ms();
		}
		if (have) {
			s->last_enqueue_ms = (int64_t)pc_runtime_now_ms();
			if (queue_push_in_order(s, &it) != 0)
				end_unrun(s, &it, PC_RUN_STATUS_ERROR, "no_memory");
			if (!s->active)
				drain(ctx, s);
		}
		return 0;
	}
	case PC__MSG_STEER_TAKEN: {
		item_t it;
		if (steered_take(s, pc_msg_cdata(msg), &it))
			end_unrun(s, &it, PC_RUN_STATUS_OK, "steered");
		return 0;
	}
	case PC__MSG_SESSION_DIAG:
		diag_tick(ctx, s);
		return 0;
	case PC__MSG_SESSION_DRAIN:
		s->drain_timer = 0;
		drain(ctx, s);
		return 0;
	case PC__MSG_SESSION_INTERRUPT_WAIT:
		s->interrupt_timer = 0;
		if (s->interrupt)
			slot_end(s, &s->interrupt, PC_RUN_STATUS_ERROR, "previous_run_still_shutting_down");
		return 0;
	case PC__MSG_SESSION_IDLE:
		if (s->active || s->interrupt || s->qn || s->pn)
			return 0;
		/* a background command of its own still runs: the session is
		 * in use, and retiring would end that command with it; the
		 * reaper asks again after another idle period */
		if (pc_process_table_session_running(s->agent->processes, s->key) > 0) {
			pc__session_set_idle(s->agent, s->key, true);
			return 0;
		}
		if (pc__session_may_retire(s->agent, s->key, pc_self(ctx))) {
			session_set(s, PC_SESS_LC_RETIRING, "idle");
			pc_exit(ctx, PC_EXIT_NORMAL);
		}
		return 0;
	default:
		return 0;
	}
}

static void session_stop(pc_ctx_t *ctx, void *state, int reason)
{
	session_t *s = state;
	pc_sess_lc_t was = s->state;
	session_set(s, PC_SESS_LC_STOPPED, was == PC_SESS_LC_RETIRING ? "retired"
					   : reason == PC_EXIT_SHUTDOWN   ? "shutdown"
									  : "stopped");
	cancel_timer(ctx, &s->drain_timer);
	cancel_timer(ctx, &s->interrupt_timer);
	cancel_timer(ctx, &s->diag_timer);
	for (size_t i = 0; i < s->pn; i++) {
		reply_accepted(&s->pend[i], PC_ESTOPPED, NULL, PC_AGENT_DROPPED);
		pending_free(&s->pend[i]);
	}
	free(s->pend);
	for (size_t i = 0; i < s->qn; i++)
		end_unrun(s, &s->queue[i], PC_RUN_STATUS_ABORTED, "shutdown");
	free(s->queue);
	steered_end_all(s, PC_RUN_STATUS_ABORTED, "shutdown");
	if (s->interrupt)
		slot_end(s, &s->interrupt, PC_RUN_STATUS_ABORTED, "shutdown");
	if (s->active) {
		if (s->run) {
			/* its end would come to this session, which is going: it is
			 * published here (the run's own report is then a dead letter) */
			pc_actor_stop(s->run, PC_EXIT_SHUTDOWN);
			pc_actor_release(s->run);
			static const char data[] = "{\"phase\":\"error\",\"status\":\"aborted\","
						   "\"error\":\"shutdown\",\"errorKind\":\"shutdown\",\"payloads\":[]}";
			pc_event_bus_emit(s->active->bus, PC_EVENT_LIFECYCLE, data, sizeof(data) - 1, false, true, NULL);
			pc_run_registry_finish(s->agent->runs, s->active->run_id, PC_RUN_STATUS_ABORTED, pc__clock_wall_ms(),
					       "shutdown", "shutdown", false);
			slot_drop(&s->active);
		} else {
			pc_lane_release(s->agent->lane, s->ticket);
			slot_end(s, &s->active, PC_RUN_STATUS_ABORTED, "shutdown");
		}
	}
	clear_drops(s);
	pc__lease_ctx_t lc = lease_ctx(ctx, s);
	pc__lease_release(&lc);
	/* exec's background processes live no longer than their session
	 * (it does not retire while they run: this is shutdown or a failure) */
	pc_process_table_end_session(s->agent->processes, s->key);
	hook_session_end(s, was, reason);
	pc_agent_t *a = s->agent;
	free(s->key);
	pc__slab_free(&a->session_slab, s);
	__atomic_sub_fetch(&a->stats.sessions_live, 1, __ATOMIC_RELEASE);
}

static const pc_behavior_t session_behavior = {"session", session_receive, session_stop};

int pc__session_spawn(pc_agent_t *a, const char *key, pc_actor_t **out)
{
	session_t *s = pc__slab_alloc(&a->session_slab);
	if (!s)
		return PC_ENOMEM;
	s->agent = a;
	if (!(s->key = strdup(key))) {
		pc__slab_free(&a->session_slab, s);
		return PC_ENOMEM;
	}
	s->settings = a->cfg->agent.queue;
	__atomic_add_fetch(&a->stats.sessions_live, 1, __ATOMIC_RELAXED);
	int rc = pc_spawn(a->rt, &session_behavior, s, out);
	if (rc != 0) {
		__atomic_sub_fetch(&a->stats.sessions_live, 1, __ATOMIC_RELEASE);
		free(s->key);
		pc__slab_free(&a->session_slab, s);
		return rc;
	}
	return 0;
}

int pc__submit_encode(const pc_agent_params_t *p, const char *key, const char *recover_run, pc_msg_t **out)
{
	enum { N = 9 };
	const char *f[N] = {key, p->message, p->idempotency_key, p->model, p->trigger, p->queue_mode,
			    p->extra_system_prompt, recover_run, p->run_id};
	size_t need = sizeof(pc__submit_t) + 1;
	for (int i = 0; i < N; i++)
		need += f[i] ? strlen(f[i]) + 1 : 0;
	pc_msg_t *m = pc_msg_new(PC__MSG_SESSION_SUBMIT, need);
	if (!m)
		return PC_ENOMEM;
	pc__submit_t *s = pc_msg_data(m);
	memset(s, 0, sizeof(*s));
	s->timeout_ms = p->timeout_ms;
	/* checked by the caller */
	s->has_think = p->thinking && pc_think_level_parse(p->thinking, &s->think) == 0;
	size_t off = 1;
	s->buf[0] = '\0';
	uint32_t *slot[N] = {&s->key, &s->message, &s->idem, &s->model, &s->trigger, &s->queue_mode, &s->extra,
			     &s->recover, &s->run_id};
	for (int i = 0; i < N; i++) {
		if (!f[i])
			continue;
		size_t n = strlen(f[i]) + 1;
		memcpy(s->buf + off, f[i], n);
		*slot[i] = (uint32_t)off;
		off += n;
	}
	*out = m;
	return 0;
}
