/*
 * timers: a periodic timer and a deadline.
 *
 * A session actor sends itself a heartbeat every 20 ms (pc_timer_every) and
 * closes itself when it has been idle for 100 ms (a pc_deadline, re-armed
 * by every bit of activity). The main thread is the client: a little
 * activity, then silence.
 */
/* nanosleep is POSIX, not C17: ask for it before any header. */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <pincer/pincer.h>

enum {
	START = 1,  /* set up the timers (needs the actor's context) */
	ACTIVITY,   /* something happened: postpone the idle timeout */
	HEARTBEAT,  /* from the periodic timer */
	IDLE,       /* from the deadline */
};

#define HEARTBEAT_MS 20
#define IDLE_MS 100

/* What the session reports; main reads it after the runtime stopped. */
typedef struct report {
	unsigned heartbeats;
	unsigned activities;
	uint64_t last_activity_ms, closed_ms;
	int closed;
} report_t;

typedef struct session {
	report_t *report;
	pc_timer_t heartbeat;
	pc_deadline_t *idle;
} session_t;

static int session_receive(pc_ctx_t *ctx, void *state, pc_msg_t *msg)
{
	session_t *s = state;
	switch (msg->type) {
	case START: {
		/* The timer message is a template: each tick delivers a copy. A
		 * tick that finds the previous one still unhandled is skipped,
		 * so a slow actor never piles them up. */
		pc_msg_t *tick = pc_msg_new(HEARTBEAT, 0);
		if (!tick)
			return PC_ENOMEM;
		int rc = pc_timer_every(pc_self(ctx), HEARTBEAT_MS, tick, &s->heartbeat);
		if (rc == 0)
			rc = pc_deadline_new(ctx, IDLE, &s->idle);
		if (rc == 0)
			rc = pc_deadline_arm(s->idle, IDLE_MS);
		return rc;
	}
	case ACTIVITY:
		s->report->activities++;
		s->report->last_activity_ms = pc_runtime_now_ms();
		/* Re-arming supersedes the previous arm: only the newest counts. */
		return pc_deadline_arm(s->idle, IDLE_MS);
	case HEARTBEAT:
		s->report->heartbeats++;
		return 0;
	case IDLE:
		/* A fire from an arm that was since superseded may still be on
		 * its way: pc_deadline_fired tells the current one from stale
		 * ones, so a re-armed deadline is never acted on late. */
		if (!pc_deadline_fired(s->idle, msg))
			return 0;
		printf("session: idle for %d ms after %u heartbeats, closing\n", IDLE_MS, s->report->heartbeats);
		s->report->closed = 1;
		s->report->closed_ms = pc_runtime_now_ms();
		pc_exit(ctx, PC_EXIT_NORMAL);
		return 0;
	default:
		return 0;
	}
}

static void session_stop(pc_ctx_t *ctx, void *state, int reason)
{
	(void)reason;
	session_t *s = state;
	/* Timers hold a reference to their target: cancel what we armed. */
	pc_timer_cancel(pc_ctx_runtime(ctx), s->heartbeat);
	pc_deadline_free(s->idle);
	free(s);
}

static const pc_behavior_t session = {"session", session_receive, session_stop};

static void sleep_ms(unsigned ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
	/* a signal cuts it short: sleep the rest */
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

int main(void)
{
	pc_runtime_t *rt = NULL;
	if (pc_runtime_new(NULL, &rt) != 0 || pc_runtime_start(rt) != 0)
		return 1;

	report_t report = {0};
	session_t *s = calloc(1, sizeof(*s));
	if (s)
		s->report = &report;
	pc_actor_t *a = NULL;
	if (!s || pc_spawn(rt, &session, s, &a) != 0) {
		free(s);
		pc_runtime_free(rt);
		return 1;
	}
	pc_send_u64(a, START, 0);

	/* Activity every 40 ms keeps the 100 ms idle timeout away ... */
	for (int i = 0; i < 4; i++) {
		sleep_ms(40);
		pc_send_u64(a, ACTIVITY, 0);
	}
	/* ... then silence: the session closes itself. Quiescence comes once
	 * it has, because until then its timers are pending. */
	int rc = pc_runtime_wait_quiescent(rt, 10000);
	pc_actor_release(a);
	pc_runtime_free(rt); /* joins the workers: the report is ours to read */

	printf("main: %u activities, %u heartbeats, closed %llu ms after the last activity\n", report.activities,
	       report.heartbeats, (unsigned long long)(report.closed_ms - report.last_activity_ms));
	int ok = rc == 0 && report.closed && report.activities == 4 && report.heartbeats > 0 &&
		 report.closed_ms - report.last_activity_ms >= IDLE_MS;
	printf("%s\n", ok ? "ok" : "unexpected result");
	return ok ? 0 : 1;
}
