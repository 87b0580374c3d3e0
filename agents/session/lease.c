/*
 * A session's lease (lease.h). The store decides who holds it and fences
 * stale writers; this file only asks, renews, retries and gives back.
 */
#include "lease.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/store/store.h"
#include "../agent_internal.h"

int pc__owner_make(char *buf, size_t len, const char *nonce)
{
	char host[65] = "";
	if (gethostname(host, sizeof(host) - 1) != 0)
		snprintf(host, sizeof(host), "unknown");
	uint64_t st = 0;
	if (pc_proc_starttime(getpid(), &st) != 0)
		st = 0; /* no /proc: never known to be gone (0 is not a start time) */
	int n = snprintf(buf, len, "%ld.%" PRIu64 "@%s#%s", (long)getpid(), st, host, nonce ? nonce : "");
	return n < 0 || (size_t)n >= len ? PC_ELIMIT : 0;
}

bool pc__owner_gone(const char *owner)
{
	if (!owner)
		return false;
	char *end = NULL;
	long pid = strtol(owner, &end, 10);
	if (pid <= 0 || !end || *end != '.')
		return false;
	uint64_t st = strtoull(end + 1, &end, 10);
	if (st == 0 || !end || *end != '@')
		return false;
	const char *host = end + 1, *hash = strchr(host, '#');
	char mine[65] = "";
	if (!hash || gethostname(mine, sizeof(mine) - 1) != 0 || strlen(mine) != (size_t)(hash - host) ||
	    memcmp(mine, host, (size_t)(hash - host)) != 0)
		return false;
	uint64_t now = 0;
	int rc = pc_proc_starttime((pid_t)pid, &now);
	return rc == PC_ENOTFOUND || (rc == 0 && now != st);
}

/* Every change of state goes here, so the count of held leases stays true. */
static void set_state(const pc__lease_ctx_t *c, pc__lease_state_t st)
{
	pc__lease_t *l = c->lease;
	bool was = l->state == PC__LEASE_HELD, is = st == PC__LEASE_HELD;
	l->state = st;
	if (c->held && was != is)
		__atomic_add_fetch(c->held, is ? 1 : (uint64_t)-1, __ATOMIC_RELAXED);
}

static void arm(const pc__lease_ctx_t *c, uint32_t ms)
{
	pc__lease_t *l = c->lease;
	if (l->timer)
		pc_timer_cancel(pc_ctx_runtime(c->ctx), l->timer);
	l->timer = 0;
	pc_msg_t *m = pc_msg_new(PC__MSG_SESSION_LEASE, 0);
	if (m && pc_timer_after(pc_self(c->ctx), ms, m, &l->timer) != 0)
		l->timer = 0;
}

/* Sends an acquire (a renewal when held); false when it could not go. */
static bool ask(const pc__lease_ctx_t *c, const char *steal_from)
{
	pc__lease_t *l = c->lease;
	pc_msg_t *req = NULL;
	int64_t ttl = c->node ? PC_STORE_LEASE_NODE : (int64_t)PC__LEASE_TTL_MS;
	int rc = pc_store_req_lease_acquire(c->key, c->owner, ttl, steal_from, &req);
	if (rc == 0)
		rc = pc_ask(c->ctx, c->store, req, &l->corr);
	return rc == 0;
}

/* Fire and forget, lazy: it commits with the next write, or within the
 * store's lazy time. */
static void send_release(const pc__lease_ctx_t *c, int64_t epoch)
{
	pc_msg_t *req = NULL;
	if (pc_store_req_lease_release(c->key, c->owner, epoch, &req) == 0)
		pc_send(c->store, req);
}

bool pc__lease_want(const pc__lease_ctx_t *c)
{
	pc__lease_t *l = c->lease;
	if (l->state == PC__LEASE_HELD)
		return true;
	if (l->state == PC__LEASE_NONE) {
		l->renewing = false;
		if (ask(c, NULL)) {
			set_state(c, PC__LEASE_ASKING);
		} else {
			/* no memory for the request now: try again shortly */
			set_state(c, PC__LEASE_WAITING);
			arm(c, PC__LEASE_RETRY_MIN_MS);
		}
	}
	return false;
}

/* A lease of its own time is renewed while the session has work; a
 * node's lease is kept by the node's heartbeat. */
static void arm_renewal(const pc__lease_ctx_t *c)
{
	pc__lease_t *l = c->lease;
	if (!c->node) {
		arm(c, PC__LEASE_RENEW_MS);
	} else if (l->timer) {
		pc_timer_cancel(pc_ctx_runtime(c->ctx), l->timer);
		l->timer = 0;
	}
}

static void wait_again(const pc__lease_ctx_t *c)
{
	pc__lease_t *l = c->lease;
	l->backoff_ms = l->backoff_ms ? l->backoff_ms * 2 : PC__LEASE_RETRY_MIN_MS;
	if (l->backoff_ms > PC__LEASE_RETRY_MAX_MS)
		l->backoff_ms = PC__LEASE_RETRY_MAX_MS;
	set_state(c, PC__LEASE_WAITING);
	arm(c, l->backoff_ms);
}

bool pc__lease_on_reply(const pc__lease_ctx_t *c, const pc_msg_t *msg, pc__lease_event_t *ev, bool *fresh)
{
	pc__lease_t *l = c->lease;
	*ev = PC__LEASE_EV_NONE;
	*fresh = false;
	if (l->state != PC__LEASE_ASKING || msg->corr != l->corr)
		return false;
	pc_store_reply_t r;
	if (pc_store_reply_get(msg, &r) != 0)
		r = (pc_store_reply_t){.rc = PC_EINVAL};
	bool renewal = l->renewing;
	l->renewing = false;
	if (renewal) {
		/* a renewal that got another epoch came after the lease ran out:
		 * writes already sent with the old one will be refused */
		if (r.rc == 0 && r.epoch == l->epoch) {
			set_state(c, PC__LEASE_HELD);
			if (!l->idle)
				arm_renewal(c);
			return true;
		}
		set_state(c, PC__LEASE_NONE);
		if (r.rc == 0)
			send_release(c, r.epoch);
		*ev = PC__LEASE_EV_LOST;
		return true;
	}
	if (r.rc == PC_EBUSY) {
		/* a holder of this machine that died gives it up at once */
		if (pc__owner_gone(r.id) && ask(c, r.id))
			return true;
		wait_again(c);
		return true;
	}
	if (r.rc == PC_ESTATE && c->node) {
		/* this node is out of the cluster until a heartbeat is recorded:
		 * the run waits (the lane's timeout bounds how long) */
		l->out = true;
		wait_again(c);
		return true;
	}
	if (r.rc != 0) {
		set_state(c, PC__LEASE_NONE);
		*ev = PC__LEASE_EV_FAILED;
		return true;
	}
	*fresh = r.epoch != l->epoch + 1;
	l->epoch = r.epoch;
	l->backoff_ms = 0;
	set_state(c, PC__LEASE_HELD);
	l->idle = false;
	arm_renewal(c);
	*ev = PC__LEASE_EV_GRANTED;
	return true;
}

static void renew(const pc__lease_ctx_t *c)
{
	pc__lease_t *l = c->lease;
	l->renewing = true;
	l->idle = false;
	if (ask(c, NULL))
		set_state(c, PC__LEASE_ASKING);
	else
		arm(c, PC__LEASE_RETRY_MIN_MS);
}

void pc__lease_on_tick(const pc__lease_ctx_t *c, bool busy)
{
	pc__lease_t *l = c->lease;
	l->timer = 0;
	if (l->state == PC__LEASE_WAITING) {
		set_state(c, PC__LEASE_NONE);
		pc__lease_want(c);
		return;
	}
	if (l->state != PC__LEASE_HELD)
		return;
	if (!busy) {
		pc__lease_release(c);
		return;
	}
	renew(c);
}

void pc__lease_check(const pc__lease_ctx_t *c)
{
	if (c->lease->state == PC__LEASE_HELD)
		renew(c);
}

void pc__lease_idle(const pc__lease_ctx_t *c)
{
	pc__lease_t *l = c->lease;
	if (l->state != PC__LEASE_HELD || l->idle)
		return;
	l->idle = true;
	arm(c, PC__LEASE_IDLE_MS);
}

void pc__lease_busy(const pc__lease_ctx_t *c)
{
	pc__lease_t *l = c->lease;
	if (l->state != PC__LEASE_HELD || !l->idle)
		return;
	l->idle = false;
	arm_renewal(c);
}

void pc__lease_release(const pc__lease_ctx_t *c)
{
	pc__lease_t *l = c->lease;
	if (l->timer)
		pc_timer_cancel(pc_ctx_runtime(c->ctx), l->timer);
	l->timer = 0;
	if (l->state != PC__LEASE_HELD)
		return;
	set_state(c, PC__LEASE_NONE);
	l->idle = false;
	send_release(c, l->epoch);
}

bool pc__lease_lapse(const pc__lease_ctx_t *c)
{
	bool held = c->lease->state == PC__LEASE_HELD;
	pc__lease_release(c);
	return held;
}

int64_t pc__lease_epoch(const pc__lease_t *l)
{
	return l->state == PC__LEASE_HELD || (l->state == PC__LEASE_ASKING && l->renewing) ? l->epoch : 0;
}
