/*
 * The session directory: maps a session key to its actor, its event hub
 * and the transcript it keeps between runs, in PC__SESSION_SHARDS shards
 * each under its own lock; and the reaper, one periodic actor that tells
 * idle sessions to retire and runs the session write lock's watchdog.
 *
 * Every message to a session goes through the directory and is counted
 * (`inflight`) under the shard's lock; an idle session may retire only
 * when nothing is on its way to it, so a message can never be sent to a
 * session that has just decided to stop (it would be lost as a dead
 * letter).
 */
#include <stdlib.h>
#include <string.h>

#include "actors/hash.h"
#include "actors/timer.h"
#include "../agent_internal.h"
#include "io/io.h"

typedef struct pc_session_slot {
	pc_actor_t *actor;      /* NULL when retired */
	pc_event_hub_t *hub;
	uint64_t inflight;      /* messages sent through the directory, not yet handled */
	int64_t idle_since_ms;  /* runtime clock; 0 while busy */
	bool told;              /* the reaper sent IDLE for this idle period */
	cJSON *transcript;      /* kept between runs (pc__transcript_keep) */
	struct pc_session_slot *next;
	char *key; /* owned; exact size (keys are short, the limit is not) */
} pc_session_slot_t;

enum { REAPER_TICK = PC_MSG_TYPE_SYSTEM + 0x2600, LOCK_TICK, REAPER_WAKE };

/* ---- the slots ---- */

int pc__session_key_ok(const char *key)
{
	size_t n = strlen(key);
	if (n == 0 || n > PC__KEY_MAX)
		return PC_EINVAL;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)key[i] < 0x20 || key[i] == 0x7f)
			return PC_EINVAL;
	return pc_utf8_valid(key, n) ? 0 : PC_EINVAL;
}

/* The slot of `key` in its (locked) shard, created when `create`. */
static pc_session_slot_t *slot_find(pc_agent_t *a, size_t shard, const char *key, uint64_t h, bool create)
{
	__typeof__(a->shards[0]) *sh = &a->shards[shard];
	if (sh->cap) {
		for (pc_session_slot_t *s = sh->table[(h / PC__SESSION_SHARDS) % sh->cap]; s; s = s->next)
			if (!strcmp(s->key, key))
				return s;
	}
	if (!create)
		return NULL;
	if (sh->count + 1 > sh->cap * 2) {
		size_t nc = sh->cap ? sh->cap * 4 : 16;
		pc_session_slot_t **nt = calloc(nc, sizeof(*nt));
		if (!nt)
			return NULL;
		for (size_t i = 0; i < sh->cap; i++) {
			for (pc_session_slot_t *s = sh->table[i], *next; s; s = next) {
				next = s->next;
				size_t b = (pc__hash64_str(s->key) / PC__SESSION_SHARDS) % nc;
				s->next = nt[b];
				nt[b] = s;
			}
		}
		free(sh->table);
		sh->table = nt;
		sh->cap = nc;
	}
	pc_session_slot_t *s = pc__slab_alloc(&a->slot_slab);
	if (!s)
		return NULL;
	if (!(s->key = strdup(key))) {
		pc__slab_free(&a->slot_slab, s);
		return NULL;
	}
	size_t b = (h / PC__SESSION_SHARDS) % sh->cap;
	s->next = sh->table[b];
	sh->table[b] = s;
	sh->count++;
	return s;
}

static void slot_unlink(pc_agent_t *a, size_t shard, pc_session_slot_t *slot, uint64_t h)
{
	__typeof__(a->shards[0]) *sh = &a->shards[shard];
	pc_session_slot_t **pp = &sh->table[(h / PC__SESSION_SHARDS) % sh->cap];
	for (; *pp; pp = &(*pp)->next) {
		if (*pp == slot) {
			*pp = slot->next;
			sh->count--;
			break;
		}
	}
	free(slot->key);
	pc__slab_free(&a->slot_slab, slot);
}

int pc__session_target(pc_agent_t *a, const char *key, bool spawn, pc_actor_t **out)
{
	uint64_t h = pc__hash64_str(key);
	size_t shard = h % PC__SESSION_SHARDS;
	int rc = 0;
	pthread_mutex_lock(&a->shards[shard].lock);
	pc_session_slot_t *s = slot_find(a, shard, key, h, spawn);
	if (!s) {
		rc = spawn ? PC_ENOMEM : PC_ENOTFOUND;
	} else if (!s->actor) {
		if (!spawn)
			rc = PC_ENOTFOUND;
		else
			rc = pc__session_spawn(a, key, &s->actor);
	}
	if (rc == 0) {
		s->inflight++;
		*out = pc_actor_retain(s->actor);
	}
	pthread_mutex_unlock(&a->shards[shard].lock);
	return rc;
}

int pc__session_send(pc_agent_t *a, const char *key, pc_msg_t *msg, bool spawn, pc_actor_t *reply_to,
		     uint64_t corr)
{
	pc_actor_t *to = NULL;
	int rc = pc__session_target(a, key, spawn, &to);
	if (rc != 0) {
		pc_msg_free(msg);
		return rc;
	}
	rc = reply_to ? pc_ask_as(to, msg, reply_to, corr) : pc_send(to, msg);
	if (rc != 0)
		pc__session_consumed(a, key);
	pc_actor_release(to);
	return rc;
}

int pc__session_ask_sync(pc_agent_t *a, const char *key, pc_msg_t *msg, int64_t timeout_ms, pc_msg_t **reply)
{
	pc_actor_t *to = NULL;
	int rc = pc__session_target(a, key, true, &to);
	if (rc != 0) {
		pc_msg_free(msg);
		return rc;
	}
	rc = pc_ask_sync(to, msg, timeout_ms, reply);
	pc_actor_release(to);
	return rc;
}

void pc__session_consumed(pc_agent_t *a, const char *key)
{
	uint64_t h = pc__hash64_str(key);
	size_t shard = h % PC__SESSION_SHARDS;
	pthread_mutex_lock(&a->shards[shard].lock);
	pc_session_slot_t *s = slot_find(a, shard, key, h, false);
	if (s && s->inflight)
		s->inflight--;
	pthread_mutex_unlock(&a->shards[shard].lock);
}

bool pc__session_may_retire(pc_agent_t *a, const char *key, pc_actor_t *self)
{
	uint64_t h = pc__hash64_str(key);
	size_t shard = h % PC__SESSION_SHARDS;
	bool ok = false;
	cJSON *transcript = NULL;
	pthread_mutex_lock(&a->shards[shard].lock);
	pc_session_slot_t *s = slot_find(a, shard, key, h, false);
	if (s && s->actor == self && s->inflight == 0) {
		ok = true;
		pc_actor_release(s->actor);
		s->actor = NULL;
		transcript = s->transcript;
		s->transcript = NULL;
		/* the hub outlives the actor while someone listens */
		if (!s->hub || pc_event_hub_subscribers(s->hub) == 0) {
			pc_event_hub_release(s->hub);
			slot_unlink(a, shard, s, h);
		}
	}
	pthread_mutex_unlock(&a->shards[shard].lock);
	cJSON_Delete(transcript);
	return ok;
}

cJSON *pc__transcript_take(pc_agent_t *a, const char *key)
{
	uint64_t h = pc__hash64_str(key);
	size_t shard = h % PC__SESSION_SHARDS;
	pthread_mutex_lock(&a->shards[shard].lock);
	pc_session_slot_t *s = slot_find(a, shard, key, h, false);
	cJSON *t = s ? s->transcript : NULL;
	if (s)
		s->transcript = NULL;
	pthread_mutex_unlock(&a->shards[shard].lock);
	return t;
}

void pc__transcript_keep(pc_agent_t *a, const char *key, cJSON *messages)
{
	uint64_t h = pc__hash64_str(key);
	size_t shard = h % PC__SESSION_SHARDS;
	cJSON *old = messages;
	pthread_mutex_lock(&a->shards[shard].lock);
	pc_session_slot_t *s = slot_find(a, shard, key, h, false);
	if (s && s->actor) {
		old = s->transcript;
		s->transcript = messages;
	}
	pthread_mutex_unlock(&a->shards[shard].lock);
	cJSON_Delete(old);
}

void pc__transcript_drop(pc_agent_t *a, const char *key)
{
	cJSON_Delete(pc__transcript_take(a, key));
}

/* What the reaper does for a session idle since `since`: drop its kept
 * transcript, then tell it to retire. */
static uint64_t idle_due_ms(const pc_agent_t *a, int64_t since)
{
	uint64_t keep = PC__TRANSCRIPT_KEEP_MS, retire = a->cfg->agent.session_idle_ms;
	return (uint64_t)since + (keep < retire ? keep : retire);
}

void pc__session_set_idle(pc_agent_t *a, const char *key, bool idle)
{
	uint64_t h = pc__hash64_str(key);
	size_t shard = h % PC__SESSION_SHARDS;
	int64_t now = (int64_t)pc_runtime_now_ms();
	pthread_mutex_lock(&a->shards[shard].lock);
	pc_session_slot_t *s = slot_find(a, shard, key, h, false);
	if (s) {
		s->idle_since_ms = idle ? now : 0;
		s->told = false;
	}
	pthread_mutex_unlock(&a->shards[shard].lock);
	if (!s || !idle)
		return;
	/* after the slot is marked: a reaper that stores a later due after
	 * this lowered it has a wake on its way, and looks again */
	uint64_t due = idle_due_ms(a, now);
	uint64_t cur = __atomic_load_n(&a->reaper_due, __ATOMIC_SEQ_CST);
	while (due < cur)
		if (__atomic_compare_exchange_n(&a->reaper_due, &cur, due, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
			if (a->reaper)
				(void)pc_send_signal(a->reaper, REAPER_WAKE);
			break;
		}
}

/* Ticks at most this often: sessions that go idle a few milliseconds
 * apart (a burst ending) are handled together, not a tick each. */
#define REAPER_GAP_MS 250u

/* Arms the reaper's one tick for `due` (UINT64_MAX: none), or for
 * REAPER_GAP_MS from now if that is later. */
static void reaper_arm(pc_ctx_t *ctx, pc_agent_t *a, uint64_t due)
{
	if (a->reaper_tick)
		(void)pc_timer_cancel(a->rt, a->reaper_tick);
	a->reaper_tick = 0;
	a->reaper_gen++;
	uint64_t now = pc_runtime_now_ms();
	if (due != UINT64_MAX && due < now + REAPER_GAP_MS)
		due = now + REAPER_GAP_MS;
	pc_msg_t *tick = due != UINT64_MAX ? pc_msg_new(REAPER_TICK, sizeof(uint64_t)) : NULL;
	if (tick) {
		*(uint64_t *)pc_msg_data(tick) = a->reaper_gen;
		if (pc_timer_after(pc_self(ctx), due > now ? due - now : 0, tick, &a->reaper_tick) != 0) {
			/* no timer: the next session to go idle tries again */
			a->reaper_tick = 0;
			due = UINT64_MAX;
		}
	} else {
		due = UINT64_MAX;
	}
	__atomic_store_n(&a->reaper_due, due, __ATOMIC_SEQ_CST);
}

/* The reaper: one tick for every session, at the earliest moment one is
 * due. Sessions idle for the configured time are told to retire (they
 * check again and stop only if still idle and nothing is on its way to
 * them); transcripts kept past PC__TRANSCRIPT_KEEP_MS are dropped. */
static int reaper_receive(pc_ctx_t *ctx, void *state, pc_msg_t *msg)
{
	pc_agent_t *a = state;
	if (msg->type == LOCK_TICK) {
		(void)pc__lock_watchdog(a);
		return 0;
	}
	if (msg->type == REAPER_TICK && msg->size >= sizeof(uint64_t) &&
	    *(const uint64_t *)pc_msg_cdata(msg) != a->reaper_gen)
		return 0; /* a tick cancelled too late: another is armed */
	if (msg->type != REAPER_TICK && msg->type != REAPER_WAKE)
		return 0;
	if (msg->type == REAPER_TICK)
		a->reaper_tick = 0;
	int64_t now = (int64_t)pc_runtime_now_ms();
	int64_t idle_ms = (int64_t)a->cfg->agent.session_idle_ms;
	uint64_t next = UINT64_MAX;
	for (size_t i = 0; i < PC__SESSION_SHARDS; i++) {
		cJSON *dropped = cJSON_CreateArray(); /* freed outside the lock */
		pthread_mutex_lock(&a->shards[i].lock);
		for (size_t b = 0; b < a->shards[i].cap; b++) {
			for (pc_session_slot_t *s = a->shards[i].table[b]; s; s = s->next) {
				if (!s->idle_since_ms)
					continue;
				uint64_t keep_due = (uint64_t)s->idle_since_ms + PC__TRANSCRIPT_KEEP_MS;
				if (s->transcript && dropped && now - s->idle_since_ms >= (int64_t)PC__TRANSCRIPT_KEEP_MS) {
					cJSON_AddItemToArray(dropped, s->transcript);
					s->transcript = NULL;
				} else if (s->transcript && keep_due < next) {
					next = keep_due;
				}
				if (!s->actor || s->told)
					continue;
				if (now - s->idle_since_ms < idle_ms) {
					uint64_t retire_due = (uint64_t)(s->idle_since_ms + idle_ms);
					next = retire_due < next ? retire_due : next;
					continue;
				}
				s->told = true;
				pc_send_signal(s->actor, PC__MSG_SESSION_IDLE);
			}
		}
		pthread_mutex_unlock(&a->shards[i].lock);
		cJSON_Delete(dropped);
	}
	reaper_arm(ctx, a, next);
	return 0;
}

static void reaper_stop(pc_ctx_t *ctx, void *state, int reason)
{
	(void)reason;
	pc_agent_t *a = state;
	if (a->reaper_tick) /* it holds a reference to the reaper */
		(void)pc_timer_cancel(pc_ctx_runtime(ctx), a->reaper_tick);
	a->reaper_tick = 0;
	__atomic_sub_fetch(&a->stats.jobs_live, 1, __ATOMIC_RELEASE);
}

static const pc_behavior_t reaper_behavior = {"session-reaper", reaper_receive, reaper_stop};

int pc__reaper_start(pc_agent_t *a)
{
	/* no tick until a session goes idle (pc__session_set_idle) */
	a->reaper_due = UINT64_MAX;
	__atomic_add_fetch(&a->stats.jobs_live, 1, __ATOMIC_RELAXED);
	int rc = pc_spawn(a->rt, &reaper_behavior, a, &a->reaper);
	if (rc != 0) {
		__atomic_sub_fetch(&a->stats.jobs_live, 1, __ATOMIC_RELEASE);
		return rc;
	}
	pc_msg_t *lock_tick = pc_msg_new(LOCK_TICK, 0);
	return lock_tick ? pc_timer_every(a->reaper, PC__LOCK_WATCHDOG_MS, lock_tick, &a->lock_tick) : PC_ENOMEM;
}

/* ---- the session write lock watchdog (§6.4) ---- */

static int report_overdue(void *user, const pc_session_lock_held_t *h)
{
	pc_agent_t *a = user;
	/* the spec's watchdog force-releases here; Pincer reports (see
	 * docs/session-lock.md: the lease, not the lock, keeps writers apart) */
	(void)pc_log_kv(a->log, PC_LOG_WARN, "session write lock held past its max hold",
			PC_LF_STR("sessionKey", h->session_key), PC_LF_INT("heldMs", h->held_ms),
			PC_LF_INT("maxHoldMs", h->max_hold_ms), PC_LF_STR("path", h->path));
	(void)pc_metric_inc(a->metrics.lock_overdue);
	return 0;
}

size_t pc__lock_watchdog(pc_agent_t *a)
{
	size_t n = 0;
	(void)pc_session_lock_overdue(report_overdue, a, &n);
	return n;
}

pc_event_hub_t *pc__session_hub_peek(pc_agent_t *a, const char *key)
{
	uint64_t h = pc__hash64_str(key);
	size_t shard = h % PC__SESSION_SHARDS;
	pthread_mutex_lock(&a->shards[shard].lock);
	pc_session_slot_t *s = slot_find(a, shard, key, h, false);
	pc_event_hub_t *hub = s && s->hub ? pc_event_hub_retain(s->hub) : NULL;
	pthread_mutex_unlock(&a->shards[shard].lock);
	return hub;
}

pc_event_hub_t *pc__session_hub(pc_agent_t *a, const char *key)
{
	uint64_t h = pc__hash64_str(key);
	size_t shard = h % PC__SESSION_SHARDS;
	pc_event_hub_t *hub = NULL;
	pthread_mutex_lock(&a->shards[shard].lock);
	pc_session_slot_t *s = slot_find(a, shard, key, h, true);
	if (s && !s->hub && pc_event_hub_new(key, &s->hub) != 0)
		s->hub = NULL;
	if (s && s->hub)
		hub = pc_event_hub_retain(s->hub);
	pthread_mutex_unlock(&a->shards[shard].lock);
	return hub;
}

/* ---- the directory's life ---- */

void pc__session_dir_init(pc_agent_t *a)
{
	for (size_t i = 0; i < PC__SESSION_SHARDS; i++)
		pthread_mutex_init(&a->shards[i].lock, NULL);
	pc__slab_init(&a->slot_slab, sizeof(pc_session_slot_t), 64);
}

size_t pc__sessions_collect(pc_agent_t *a, pc_actor_t ***out)
{
	size_t n = 0, cap = 0;
	pc_actor_t **v = NULL;
	for (size_t i = 0; i < PC__SESSION_SHARDS; i++) {
		pthread_mutex_lock(&a->shards[i].lock);
		for (size_t b = 0; b < a->shards[i].cap; b++) {
			for (pc_session_slot_t *s = a->shards[i].table[b]; s; s = s->next) {
				if (!s->actor)
					continue;
				if (PC__GROW(v, cap, n + 1, 64))
					continue;
				v[n++] = pc_actor_retain(s->actor);
			}
		}
		pthread_mutex_unlock(&a->shards[i].lock);
	}
	*out = v;
	return n;
}

void pc__reaper_stop(pc_agent_t *a)
{
	if (a->reaper) {
		/* the watchdog's timer holds a reference to the reaper (its
		 * own tick it cancels as it stops) */
		pc_timer_cancel(a->rt, a->lock_tick);
		pc_actor_stop(a->reaper, PC_EXIT_SHUTDOWN);
		/* kept, stopped, until the directory goes: sessions still
		 * ending may wake it (a stopped actor drops what it is sent) */
	}
}

void pc__session_dir_free(pc_agent_t *a)
{
	pc_actor_release(a->reaper);
	a->reaper = NULL;
	for (size_t i = 0; i < PC__SESSION_SHARDS; i++) {
		for (size_t b = 0; b < a->shards[i].cap; b++) {
			for (pc_session_slot_t *s = a->shards[i].table[b], *next; s; s = next) {
				next = s->next;
				pc_actor_release(s->actor);
				pc_event_hub_release(s->hub);
				cJSON_Delete(s->transcript);
				free(s->key);
			}
		}
		free(a->shards[i].table);
		pthread_mutex_destroy(&a->shards[i].lock);
	}
	pc__slab_destroy(&a->slot_slab);
}
