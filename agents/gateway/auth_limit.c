/*
 * Backoff for failed secrets (docs/gateway.md, "Guessing secrets"): per
 * client address, `max_attempts` failed tokens, passwords or device tokens
 * within `window_ms` lock that address out for `lockout_ms`, doubled at
 * each further lockout up to `max_lockout_ms`. A locked-out client is
 * refused before its secret is looked at, so guessing stops for everyone
 * behind that address and for nobody else. IPv6 clients count by their
 * /64, the block one subscriber holds, or a single host could step
 * through 2^64 addresses.
 *
 * The table is bounded: at most PC__GW_LIMIT_MAX addresses; when full,
 * the entry seen longest ago that is not locked out makes room (or, if
 * every one is, the one whose lockout ends first). Any thread: connection
 * actors and the OpenAI route call it; one mutex, held for a scan of the
 * table (failed attempts are rare next to requests). Every authenticated
 * request asks; while no address has failed lately, which is nearly
 * always, the empty table is seen without taking the lock.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "gateway_internal.h"
#include "io/io.h"

typedef struct entry {
	pc_netaddr_t key;
	uint64_t window_start; /* the first failure counted now */
	uint64_t last_ms;      /* the last failure */
	uint64_t locked_until;
	uint32_t failures;     /* within the window */
	uint32_t strikes;      /* lockouts so far: the next one lasts lockout << strikes */
} entry_t;

struct pc__gw_limiter {
	pthread_mutex_t lock;
	pc_gateway_auth_limit_t cfg;
	entry_t *entries;
	size_t n, cap;         /* n: written under the lock, read without it by
				* the fast path of an empty table */
	uint64_t failures, lockouts, refused; /* totals, for /metrics */
};

int pc__gw_limiter_new(const pc_gateway_auth_limit_t *cfg, pc__gw_limiter_t **out)
{
	pc__gw_limiter_t *l = calloc(1, sizeof(*l));
	if (!l)
		return PC_ENOMEM;
	if (pthread_mutex_init(&l->lock, NULL) != 0) {
		free(l);
		return PC_ESYS;
	}
	l->cfg = *cfg;
	*out = l;
	return 0;
}

void pc__gw_limiter_free(pc__gw_limiter_t *l)
{
	if (!l)
		return;
	pthread_mutex_destroy(&l->lock);
	free(l->entries);
	free(l);
}

static bool exempt(const pc__gw_limiter_t *l, const pc__gw_client_t *who)
{
	return l->cfg.max_attempts == 0 || (l->cfg.exempt_loopback && who->loopback);
}

static pc_netaddr_t key_of(const pc__gw_client_t *who)
{
	static const uint8_t v4_mapped[12] = {[10] = 0xff, [11] = 0xff};
	pc_netaddr_t k = who->addr;
	if (memcmp(k.b, v4_mapped, sizeof(v4_mapped)))
		memset(k.b + 8, 0, 8);
	return k;
}

static entry_t *find(pc__gw_limiter_t *l, const pc_netaddr_t *k)
{
	for (size_t i = 0; i < l->n; i++)
		if (pc_netaddr_equal(&l->entries[i].key, k))
			return &l->entries[i];
	return NULL;
}

/* Forgotten: nothing counted in the window, no lockout running, and no
 * failure for as long as the longest lockout (so strikes have expired). */
static bool stale(const pc__gw_limiter_t *l, const entry_t *e, uint64_t now)
{
	return now >= e->locked_until && now - e->last_ms >= l->cfg.window_ms &&
	       now - e->last_ms >= l->cfg.max_lockout_ms;
}

/* One entry more, under the lock. */
static entry_t *grow(pc__gw_limiter_t *l)
{
	__atomic_store_n(&l->n, l->n + 1, __ATOMIC_RELAXED);
	return &l->entries[l->n - 1];
}

/* Nothing has failed lately, as almost always: nothing to look up. */
static bool empty(pc__gw_limiter_t *l) { return __atomic_load_n(&l->n, __ATOMIC_RELAXED) == 0; }

static entry_t *room(pc__gw_limiter_t *l, uint64_t now)
{
	if (l->n < l->cap)
		return grow(l);
	if (l->cap < PC__GW_LIMIT_MAX && PC__GROW(l->entries, l->cap, l->n + 1, 16) == 0)
		return grow(l);
	if (l->n == 0)
		return NULL;
	entry_t *victim = &l->entries[0];
	for (size_t i = 0; i < l->n; i++) {
		entry_t *e = &l->entries[i];
		if (stale(l, e, now))
			return e;
		bool e_free = now >= e->locked_until, v_free = now >= victim->locked_until;
		if (e_free != v_free ? e_free
				     : e_free ? e->last_ms < victim->last_ms : e->locked_until < victim->locked_until)
			victim = e;
	}
	return victim;
}

uint64_t pc__gw_limiter_check(pc__gw_limiter_t *l, const pc__gw_client_t *who, uint64_t now)
{
	if (!l || exempt(l, who) || empty(l))
		return 0;
	pc_netaddr_t k = key_of(who);
	uint64_t wait = 0;
	pthread_mutex_lock(&l->lock);
	entry_t *e = find(l, &k);
	if (e && now < e->locked_until) {
		wait = e->locked_until - now;
		l->refused++;
	}
	pthread_mutex_unlock(&l->lock);
	return wait;
}

void pc__gw_limiter_fail(pc__gw_limiter_t *l, const pc__gw_client_t *who, uint64_t now)
{
	if (!l)
		return;
	pc_netaddr_t k = key_of(who);
	pthread_mutex_lock(&l->lock);
	l->failures++;
	if (exempt(l, who)) {
		pthread_mutex_unlock(&l->lock);
		return;
	}
	entry_t *e = find(l, &k);
	if (e && stale(l, e, now))
		e->strikes = 0;
	if (!e && (e = room(l, now)) != NULL)
		*e = (entry_t){.key = k};
	if (e) {
		if (e->failures == 0 || now - e->window_start >= l->cfg.window_ms) {
			e->window_start = now;
			e->failures = 0;
		}
		e->last_ms = now;
		if (++e->failures >= l->cfg.max_attempts) {
			uint32_t s = e->strikes < 20 ? e->strikes : 20;
			uint64_t d = l->cfg.lockout_ms << s;
			e->locked_until = now + (d < l->cfg.max_lockout_ms ? d : l->cfg.max_lockout_ms);
			e->strikes++;
			e->failures = 0;
			l->lockouts++;
		}
	}
	pthread_mutex_unlock(&l->lock);
}

void pc__gw_limiter_pass(pc__gw_limiter_t *l, const pc__gw_client_t *who)
{
	if (!l || exempt(l, who) || empty(l))
		return;
	pc_netaddr_t k = key_of(who);
	pthread_mutex_lock(&l->lock);
	entry_t *e = find(l, &k);
	if (e) {
		/* the secret is known here: forget the guesses */
		*e = l->entries[l->n - 1];
		__atomic_store_n(&l->n, l->n - 1, __ATOMIC_RELAXED);
	}
	pthread_mutex_unlock(&l->lock);
}

void pc__gw_limiter_stats(pc__gw_limiter_t *l, uint64_t now, pc__gw_limiter_stats_t *out)
{
	memset(out, 0, sizeof(*out));
	if (!l)
		return;
	pthread_mutex_lock(&l->lock);
	out->failures = l->failures;
	out->lockouts = l->lockouts;
	out->refused = l->refused;
	for (size_t i = 0; i < l->n; i++)
		out->locked_now += now < l->entries[i].locked_until;
	pthread_mutex_unlock(&l->lock);
}
