/*
 * The run registry: runs by id and the active run of each session, in 16
 * shards so that runs of different sessions rarely share a lock.
 *
 * Each shard holds two chained hash tables under one mutex: runs (keyed by
 * run id) and active records (keyed by session key). A run and its
 * session's active record may sit in different shards; start and finish
 * change both at once, so they lock both shards, the lower index first
 * (every path that holds two shard locks takes them in that order, so no
 * cycle can form). An active record carries its own reference to the
 * run's actor, so reading a session's active run needs one lock only.
 *
 * Waiters sleep on their run's shard condvar. Entries leave only by the
 * sweep (which skips an entry someone is waiting on) or by
 * pc_run_registry_free, which sets `closing`, wakes every shard and waits
 * until no thread is inside pc_run_registry_wait before it frees
 * anything. Actor messages and attachment releases happen after the locks
 * are dropped: neither may call back into a locked shard.
 */
#include "run_registry.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "actors/hash.h"
#include "mailbox/atomics.h"
#include "runtime/sync.h"

#define SHARDS 16u
#define INITIAL_BUCKETS 16u
/* add sweeps its shard at most this often (by the callers' clock). */
#define ADD_SWEEP_INTERVAL_MS 10000

typedef struct watcher {
	struct watcher *next;
	pc_actor_t *who;
	uint32_t type;
	uint64_t corr;
} watcher_t;

typedef struct entry {
	struct entry *next; /* bucket chain; also the free list of a sweep */
	uint64_t hash;
	pc_run_info_t info;
	pc_actor_t *actor;  /* while running */
	void *attachment;
	void (*release)(void *);
	watcher_t *watchers;
	uint32_t waiters;   /* threads in wait on it: the sweep leaves it */
	struct entry *fprev, *fnext; /* the shard's finished runs, oldest first */
} entry_t;

typedef struct active {
	struct active *next;
	uint64_t hash;
	char session_key[sizeof(((pc_run_info_t *)0)->session_key)];
	char run_id[PC_RUN_ID_MAX + 1];
	pc_actor_t *actor;
} active_t;

/* A chained hash table; the node types above start with `next`, `hash`. */
typedef struct table {
	void **buckets;
	size_t nbuckets, count;
} table_t;

typedef struct shard {
	pthread_mutex_t lock;
	pthread_cond_t cond; /* a run of this shard finished, or closing */
	table_t runs;        /* entry_t */
	table_t sessions;    /* active_t */
	size_t running;      /* entries of this shard started, not finished */
	int64_t last_sweep_ms;
	entry_t *fhead, *ftail; /* finished runs in the order they finished */
	size_t finished;
} shard_t;

struct pc_run_registry {
	shard_t shards[SHARDS];
	uint32_t closing;     /* set once by free */
	pthread_mutex_t wlock; /* guards `inside` */
	pthread_cond_t wcond;  /* `inside` dropped to 0 while closing */
	size_t inside;         /* threads inside pc_run_registry_wait */
	pc_run_registry_observer_fn observer; /* set before use, read-only after */
	void *observer_ud;
};

static const char *const status_names[] = {
	[PC_RUN_STATUS_QUEUED] = "queued", [PC_RUN_STATUS_RUNNING] = "running",
	[PC_RUN_STATUS_OK] = "ok",         [PC_RUN_STATUS_ERROR] = "error",
	[PC_RUN_STATUS_ABORTED] = "aborted", [PC_RUN_STATUS_TIMEOUT] = "timeout",
};

const char *pc_run_status_name(pc_run_status_t s)
{
	return (unsigned)s < sizeof(status_names) / sizeof(status_names[0]) ? status_names[s] : "unknown";
}

/* ---- hashing and tables ---- */

static shard_t *shard_of(pc_run_registry_t *r, uint64_t hash)
{
	return &r->shards[hash % SHARDS];
}

/* The bucket index: the low bits chose the shard, so use the others. */
static size_t bucket_of(const table_t *t, uint64_t hash)
{
	return (size_t)(hash / SHARDS) & (t->nbuckets - 1);
}

typedef struct node {
	struct node *next;
	uint64_t hash;
} node_t;

static int table_init(table_t *t)
{
	t->buckets = calloc(INITIAL_BUCKETS, sizeof(void *));
	t->nbuckets = INITIAL_BUCKETS;
	t->count = 0;
	return t->buckets ? 0 : PC_ENOMEM;
}

/* Doubles the buckets when the chains grow past one node on average. A
 * failed allocation leaves longer chains, which is slower, not wrong. */
static void table_maybe_grow(table_t *t)
{
	if (t->count < t->nbuckets || t->nbuckets > SIZE_MAX / 2 / sizeof(void *))
		return;
	size_t n = t->nbuckets * 2;
	void **b = calloc(n, sizeof(void *));
	if (!b)
		return;
	table_t nt = {b, n, t->count};
	for (size_t i = 0; i < t->nbuckets; i++) {
		node_t *x = t->buckets[i];
		while (x) {
			node_t *next = x->next;
			size_t j = bucket_of(&nt, x->hash);
			x->next = b[j];
			b[j] = x;
			x = next;
		}
	}
	free(t->buckets);
	*t = nt;
}

static void table_insert(table_t *t, void *item)
{
	node_t *x = item;
	size_t i = bucket_of(t, x->hash);
	x->next = t->buckets[i];
	t->buckets[i] = x;
	t->count++;
	table_maybe_grow(t);
}

static void table_unlink(table_t *t, void *item)
{
	node_t *x = item;
	node_t **p = (node_t **)&t->buckets[bucket_of(t, x->hash)];
	while (*p && *p != x)
		p = &(*p)->next;
	if (*p) {
		*p = x->next;
		t->count--;
	}
}

static entry_t *find_run(shard_t *sh, const char *run_id, uint64_t hash)
{
	for (entry_t *e = sh->runs.buckets[bucket_of(&sh->runs, hash)]; e; e = e->next)
		if (e->hash == hash && strcmp(e->info.run_id, run_id) == 0)
			return e;
	return NULL;
}

static active_t *find_active(shard_t *sh, const char *session_key, uint64_t hash)
{
	for (active_t *a = sh->sessions.buckets[bucket_of(&sh->sessions, hash)]; a; a = a->next)
		if (a->hash == hash && strcmp(a->session_key, session_key) == 0)
			return a;
	return NULL;
}

/* Locks one or two shards in index order; see the top comment. */
static void lock_pair(shard_t *a, shard_t *b)
{
	if (a == b) {
		pthread_mutex_lock(&a->lock);
	} else {
		pthread_mutex_lock(a < b ? &a->lock : &b->lock);
		pthread_mutex_lock(a < b ? &b->lock : &a->lock);
	}
}

static void unlock_pair(shard_t *a, shard_t *b)
{
	pthread_mutex_unlock(&a->lock);
	if (a != b)
		pthread_mutex_unlock(&b->lock);
}

static void copy_str(char *dst, size_t cap, const char *src)
{
	size_t n = src ? strlen(src) : 0;
	if (n >= cap)
		n = cap - 1;
	if (n)
		memcpy(dst, src, n);
	dst[n] = '\0';
}

/* ---- lifecycle ---- */

static void entry_free(entry_t *e)
{
	if (e->release && e->attachment)
		e->release(e->attachment);
	pc_actor_release(e->actor);
	for (watcher_t *w = e->watchers, *next; w; w = next) {
		next = w->next;
		pc_actor_release(w->who);
		free(w);
	}
	free(e);
}

static void shard_destroy(shard_t *sh)
{
	for (size_t i = 0; i < sh->runs.nbuckets; i++)
		for (entry_t *e = sh->runs.buckets[i], *next; e; e = next) {
			next = e->next;
			entry_free(e);
		}
	for (size_t i = 0; i < sh->sessions.nbuckets; i++)
		for (active_t *a = sh->sessions.buckets[i], *next; a; a = next) {
			next = a->next;
			pc_actor_release(a->actor);
			free(a);
		}
	free(sh->runs.buckets);
	free(sh->sessions.buckets);
	pthread_cond_destroy(&sh->cond);
	pthread_mutex_destroy(&sh->lock);
}


static int shard_init(shard_t *sh)
{
	int rc = PC_ESYS;
	if (pthread_mutex_init(&sh->lock, NULL) != 0)
		return rc;
	if ((rc = pc__cond_init_monotonic(&sh->cond)) != 0)
		goto fail_cond;
	if ((rc = table_init(&sh->runs)) != 0)
		goto fail_runs;
	if ((rc = table_init(&sh->sessions)) != 0)
		goto fail_sessions;
	return 0;
fail_sessions:
	free(sh->runs.buckets);
fail_runs:
	pthread_cond_destroy(&sh->cond);
fail_cond:
	pthread_mutex_destroy(&sh->lock);
	return rc;
}

int pc_run_registry_new(pc_run_registry_t **out)
{
	if (!out)
		return PC_EINVAL;
	*out = NULL;
	pc_run_registry_t *r = calloc(1, sizeof(*r));
	if (!r)
		return PC_ENOMEM;
	int rc = PC_ESYS;
	size_t made = 0;
	if (pthread_mutex_init(&r->wlock, NULL) != 0)
		goto fail_wlock;
	if ((rc = pc__cond_init_monotonic(&r->wcond)) != 0)
		goto fail_wcond;
	for (; made < SHARDS; made++)
		if ((rc = shard_init(&r->shards[made])) != 0)
			goto fail_shards;
	*out = r;
	return 0;
fail_shards:
	while (made > 0)
		shard_destroy(&r->shards[--made]);
	pthread_cond_destroy(&r->wcond);
fail_wcond:
	pthread_mutex_destroy(&r->wlock);
fail_wlock:
	free(r);
	return rc;
}

void pc_run_registry_observe(pc_run_registry_t *r, pc_run_registry_observer_fn fn, void *ud)
{
	r->observer = fn;
	r->observer_ud = ud;
}

static void observed(const pc_run_registry_t *r, const pc_run_info_t *info)
{
	if (r->observer)
		r->observer(r->observer_ud, info);
}

void pc_run_registry_free(pc_run_registry_t *r)
{
	if (!r)
		return;
	/* 1. Set under every shard lock in turn, so a waiter either sees it
	 *    before it sleeps or is asleep when the broadcast comes. */
	pc_atomic_store_u32_rel(&r->closing, 1);
	for (size_t i = 0; i < SHARDS; i++) {
		pthread_mutex_lock(&r->shards[i].lock);
		pthread_cond_broadcast(&r->shards[i].cond);
		pthread_mutex_unlock(&r->shards[i].lock);
	}
	/* 2. Waiters leave touching nothing but `inside`, under wlock: once it
	 *    is 0 no thread holds a pointer into the registry. */
	pthread_mutex_lock(&r->wlock);
	while (r->inside > 0)
		pthread_cond_wait(&r->wcond, &r->wlock);
	pthread_mutex_unlock(&r->wlock);
	for (size_t i = 0; i < SHARDS; i++)
		shard_destroy(&r->shards[i]);
	pthread_cond_destroy(&r->wcond);
	pthread_mutex_destroy(&r->wlock);
	free(r);
}

/* ---- sweeping ---- */

/* The terminal cache holds at most this many finished runs per shard
 * (PC_RUN_REGISTRY_TERMINAL_MAX in all); past it the oldest go first, so a
 * busy process keeps the last runs' outcomes, not ten minutes' worth. */
#define FINISHED_PER_SHARD (PC_RUN_REGISTRY_TERMINAL_MAX / SHARDS)

static void finished_unlink(shard_t *sh, entry_t *e)
{
	if (e->fprev)
		e->fprev->fnext = e->fnext;
	else if (sh->fhead == e)
		sh->fhead = e->fnext;
	else
		return; /* not on the list */
	if (e->fnext)
		e->fnext->fprev = e->fprev;
	else
		sh->ftail = e->fprev;
	e->fprev = e->fnext = NULL;
	sh->finished--;
}

/* Under sh->lock: `e` just finished; the oldest finished runs past the cap
 * that nobody waits on go onto *gone. */
static void finished_push(shard_t *sh, entry_t *e, entry_t **gone)
{
	e->fprev = sh->ftail;
	e->fnext = NULL;
	if (sh->ftail)
		sh->ftail->fnext = e;
	else
		sh->fhead = e;
	sh->ftail = e;
	sh->finished++;
	for (entry_t *o = sh->fhead; o && sh->finished > FINISHED_PER_SHARD;) {
		entry_t *next = o->fnext;
		if (!o->waiters && o != e) {
			finished_unlink(sh, o);
			table_unlink(&sh->runs, o);
			o->next = *gone;
			*gone = o;
		}
		o = next;
	}
}

/* Under sh->lock: unlinks the finished entries older than the terminal
 * cache time onto *gone (to be freed after unlocking: releasing an
 * attachment may do anything). Returns how many. */
static size_t shard_sweep(shard_t *sh, int64_t now_ms, entry_t **gone)
{
	size_t n = 0;
	for (size_t i = 0; i < sh->runs.nbuckets; i++) {
		entry_t **p = (entry_t **)&sh->runs.buckets[i];
		while (*p) {
			entry_t *e = *p;
			if (pc_run_status_terminal(e->info.status) && !e->waiters &&
			    now_ms - e->info.ended_ms > (int64_t)PC_RUN_REGISTRY_TERMINAL_TTL_MS) {
				*p = e->next;
				sh->runs.count--;
				finished_unlink(sh, e);
				e->next = *gone;
				*gone = e;
				n++;
			} else {
				p = &e->next;
			}
		}
	}
	sh->last_sweep_ms = now_ms;
	return n;
}

static void free_list(entry_t *gone)
{
	while (gone) {
		entry_t *next = gone->next;
		entry_free(gone);
		gone = next;
	}
}

size_t pc_run_registry_sweep(pc_run_registry_t *r, int64_t now_ms)
{
	if (!r)
		return 0;
	size_t n = 0;
	for (size_t i = 0; i < SHARDS; i++) {
		entry_t *gone = NULL;
		pthread_mutex_lock(&r->shards[i].lock);
		n += shard_sweep(&r->shards[i], now_ms, &gone);
		pthread_mutex_unlock(&r->shards[i].lock);
		free_list(gone);
	}
	return n;
}

/* ---- runs ---- */

static bool valid_run_id(const char *run_id)
{
	return run_id && *run_id && strlen(run_id) <= PC_RUN_ID_MAX;
}

int pc_run_registry_add(pc_run_registry_t *r, const char *run_id, const char *session_key, int64_t accepted_ms,
			void *attachment, void (*release)(void *))
{
	if (!r || !valid_run_id(run_id))
		return PC_EINVAL;
	if (!session_key)
		session_key = "";
	if (strlen(session_key) >= sizeof(((pc_run_info_t *)0)->session_key))
		return PC_EINVAL;
	/* Allocated before locking: the shard is held only to link it. */
	entry_t *e = calloc(1, sizeof(*e));
	if (!e)
		return PC_ENOMEM;
	copy_str(e->info.run_id, sizeof(e->info.run_id), run_id);
	copy_str(e->info.session_key, sizeof(e->info.session_key), session_key);
	e->info.status = PC_RUN_STATUS_QUEUED;
	e->info.accepted_ms = accepted_ms;
	e->hash = pc__hash64_str(run_id);

	int rc = 0;
	entry_t *gone = NULL;
	pc_run_info_t info = e->info;
	shard_t *sh = shard_of(r, e->hash);
	pthread_mutex_lock(&sh->lock);
	if (find_run(sh, run_id, e->hash)) {
		rc = PC_EEXIST;
	} else {
		e->attachment = attachment;
		e->release = release;
		table_insert(&sh->runs, e);
		/* The terminal cache is swept here too, one shard at a time and
		 * not on every add, so a busy registry pays little for it. */
		if (accepted_ms > 0 && accepted_ms - sh->last_sweep_ms >= ADD_SWEEP_INTERVAL_MS)
			shard_sweep(sh, accepted_ms, &gone);
	}
	pthread_mutex_unlock(&sh->lock);
	if (rc)
		free(e);
	else
		observed(r, &info);
	free_list(gone);
	return rc;
}

/*
 * Locks the shard of run `run_id` and the shard of its session's active
 * record, lower index first, and returns the entry; NULL (nothing locked)
 * if the run is unknown. The session is known only once the entry is
 * found: when its shard comes first, the run's shard is dropped, both are
 * taken in order and the entry is looked up again.
 */
static entry_t *lock_run_and_session(pc_run_registry_t *r, const char *run_id, shard_t **psh, shard_t **pss,
				     uint64_t *psession_hash)
{
	uint64_t h = pc__hash64_str(run_id);
	shard_t *sh = shard_of(r, h);
	for (;;) {
		pthread_mutex_lock(&sh->lock);
		entry_t *e = find_run(sh, run_id, h);
		if (!e) {
			pthread_mutex_unlock(&sh->lock);
			return NULL;
		}
		uint64_t sk = pc__hash64_str(e->info.session_key);
		shard_t *ss = shard_of(r, sk);
		if (ss > sh)
			pthread_mutex_lock(&ss->lock);
		if (ss < sh) {
			pthread_mutex_unlock(&sh->lock);
			lock_pair(sh, ss);
			e = find_run(sh, run_id, h);
			if (!e || pc__hash64_str(e->info.session_key) != sk) {
				unlock_pair(sh, ss);
				if (!e)
					return NULL;
				/* Swept and added again for another session
				 * meanwhile: start over. */
				continue;
			}
		}
		*psh = sh;
		*pss = ss;
		*psession_hash = sk;
		return e;
	}
}

int pc_run_registry_start(pc_run_registry_t *r, const char *run_id, pc_actor_t *actor, int64_t started_ms)
{
	if (!r || !valid_run_id(run_id))
		return PC_EINVAL;
	/* Allocated before locking; freed if the session has a record already. */
	active_t *fresh = calloc(1, sizeof(*fresh));
	if (!fresh)
		return PC_ENOMEM;
	int rc = 0;
	pc_actor_t *old = NULL;
	pc_run_info_t info;
	shard_t *sh, *ss;
	uint64_t sk;
	entry_t *e = lock_run_and_session(r, run_id, &sh, &ss, &sk);
	if (!e) {
		free(fresh);
		return PC_ENOTFOUND;
	}
	if (e->info.status != PC_RUN_STATUS_QUEUED) {
		rc = PC_ESTATE;
		goto unlock;
	}
	e->info.status = PC_RUN_STATUS_RUNNING;
	e->info.started_ms = started_ms;
	e->actor = pc_actor_retain(actor);
	sh->running++;
	active_t *a = find_active(ss, e->info.session_key, sk);
	if (!a) {
		a = fresh;
		fresh = NULL;
		a->hash = sk;
		copy_str(a->session_key, sizeof(a->session_key), e->info.session_key);
		table_insert(&ss->sessions, a);
	}
	/* A newer run replaces the session's active one; the older run keeps
	 * its entry and ends on its own. */
	old = a->actor;
	a->actor = pc_actor_retain(actor);
	copy_str(a->run_id, sizeof(a->run_id), run_id);
	info = e->info;
unlock:
	unlock_pair(sh, ss);
	free(fresh);
	pc_actor_release(old);
	if (rc == 0)
		observed(r, &info);
	return rc;
}

int pc_run_registry_finish(pc_run_registry_t *r, const char *run_id, pc_run_status_t status, int64_t ended_ms,
			   const char *error, const char *error_kind, bool replay_invalid)
{
	if (!r || !valid_run_id(run_id) || !pc_run_status_terminal(status) ||
	    (unsigned)status >= sizeof(status_names) / sizeof(status_names[0]))
		return PC_EINVAL;
	int rc = 0;
	pc_actor_t *actor = NULL, *active_actor = NULL;
	active_t *gone_active = NULL;
	watcher_t *watchers = NULL;
	entry_t *evicted = NULL;
	pc_run_info_t info;
	shard_t *sh, *ss;
	uint64_t sk;
	entry_t *e = lock_run_and_session(r, run_id, &sh, &ss, &sk);
	if (!e)
		return PC_ENOTFOUND;
	if (pc_run_status_terminal(e->info.status)) {
		rc = PC_ESTATE;
		goto unlock;
	}
	if (e->info.status == PC_RUN_STATUS_RUNNING)
		sh->running--;
	e->info.status = status;
	e->info.ended_ms = ended_ms;
	copy_str(e->info.error, sizeof(e->info.error), error);
	copy_str(e->info.error_kind, sizeof(e->info.error_kind), error_kind);
	e->info.replay_invalid = replay_invalid;
	actor = e->actor;
	e->actor = NULL;
	watchers = e->watchers;
	e->watchers = NULL;
	info = e->info;
	/* Only if it is still this run: a newer run of the session may have
	 * replaced it (§2.5 handle_mismatch). */
	active_t *a = find_active(ss, e->info.session_key, sk);
	if (a && strcmp(a->run_id, run_id) == 0) {
		table_unlink(&ss->sessions, a);
		active_actor = a->actor;
		gone_active = a;
	}
	finished_push(sh, e, &evicted);
	pthread_cond_broadcast(&sh->cond);
unlock:
	unlock_pair(sh, ss);
	free_list(evicted);
	free(gone_active);
	pc_actor_release(active_actor);
	pc_actor_release(actor);
	if (rc == 0)
		observed(r, &info);
	/* Watchers are told outside the locks: sending may wake a worker. */
	while (watchers) {
		watcher_t *w = watchers;
		watchers = w->next;
		pc_msg_t *m = pc_msg_new(w->type, sizeof(info));
		if (m) {
			memcpy(pc_msg_data(m), &info, sizeof(info));
			m->corr = w->corr;
			/* A stopped watcher has nobody left to tell. */
			(void)pc_send(w->who, m);
		}
		pc_actor_release(w->who);
		free(w);
	}
	return rc;
}

int pc_run_registry_get(pc_run_registry_t *r, const char *run_id, pc_run_info_t *out)
{
	if (!r || !run_id || !out)
		return PC_EINVAL;
	uint64_t h = pc__hash64_str(run_id);
	shard_t *sh = shard_of(r, h);
	int rc = PC_ENOTFOUND;
	pthread_mutex_lock(&sh->lock);
	entry_t *e = find_run(sh, run_id, h);
	if (e) {
		*out = e->info;
		rc = 0;
	}
	pthread_mutex_unlock(&sh->lock);
	return rc;
}

pc_actor_t *pc_run_registry_actor(pc_run_registry_t *r, const char *run_id)
{
	if (!r || !run_id)
		return NULL;
	uint64_t h = pc__hash64_str(run_id);
	shard_t *sh = shard_of(r, h);
	pthread_mutex_lock(&sh->lock);
	entry_t *e = find_run(sh, run_id, h);
	pc_actor_t *a = e ? pc_actor_retain(e->actor) : NULL;
	pthread_mutex_unlock(&sh->lock);
	return a;
}

void *pc_run_registry_attachment(pc_run_registry_t *r, const char *run_id, void *(*retain)(void *))
{
	if (!r || !run_id)
		return NULL;
	uint64_t h = pc__hash64_str(run_id);
	shard_t *sh = shard_of(r, h);
	pthread_mutex_lock(&sh->lock);
	entry_t *e = find_run(sh, run_id, h);
	void *att = e ? e->attachment : NULL;
	/* Retained under the lock: a sweep could release it right after. */
	if (att && retain)
		att = retain(att);
	pthread_mutex_unlock(&sh->lock);
	return att;
}

int pc_run_registry_active(pc_run_registry_t *r, const char *session_key, char *run_id, pc_actor_t **actor)
{
	if (actor)
		*actor = NULL;
	if (!r)
		return PC_EINVAL;
	if (!session_key)
		session_key = "";
	uint64_t h = pc__hash64_str(session_key);
	shard_t *ss = shard_of(r, h);
	int rc = PC_ENOTFOUND;
	pthread_mutex_lock(&ss->lock);
	active_t *a = find_active(ss, session_key, h);
	if (a) {
		if (run_id)
			memcpy(run_id, a->run_id, sizeof(a->run_id));
		if (actor)
			*actor = pc_actor_retain(a->actor);
		rc = 0;
	}
	pthread_mutex_unlock(&ss->lock);
	return rc;
}

size_t pc_run_registry_active_count(pc_run_registry_t *r)
{
	if (!r)
		return 0;
	size_t n = 0;
	for (size_t i = 0; i < SHARDS; i++) {
		pthread_mutex_lock(&r->shards[i].lock);
		n += r->shards[i].running;
		pthread_mutex_unlock(&r->shards[i].lock);
	}
	return n;
}

/* ---- waiting ---- */

static void wait_leave(pc_run_registry_t *r)
{
	pthread_mutex_lock(&r->wlock);
	if (--r->inside == 0)
		pthread_cond_broadcast(&r->wcond);
	pthread_mutex_unlock(&r->wlock);
}

int pc_run_registry_wait(pc_run_registry_t *r, const char *run_id, int64_t timeout_ms, pc_run_info_t *out)
{
	if (!r || !run_id)
		return PC_EINVAL;
	struct timespec deadline = pc__timespec_ns(pc__deadline_ns(timeout_ms));
	pthread_mutex_lock(&r->wlock);
	r->inside++;
	pthread_mutex_unlock(&r->wlock);

	uint64_t h = pc__hash64_str(run_id);
	shard_t *sh = shard_of(r, h);
	int rc;
	pthread_mutex_lock(&sh->lock);
	entry_t *e = find_run(sh, run_id, h);
	if (!e) {
		rc = PC_ENOTFOUND;
		goto unlock;
	}
	/* The entry stays while e->waiters > 0: the sweep leaves it, and free
	 * waits for this thread to leave before it frees anything. */
	e->waiters++;
	for (;;) {
		if (pc_run_status_terminal(e->info.status)) {
			rc = 0;
			break;
		}
		if (pc_atomic_load_u32_acq(&r->closing)) {
			rc = PC_ESTOPPED;
			break;
		}
		if (timeout_ms < 0) {
			pthread_cond_wait(&sh->cond, &sh->lock);
		} else if (pthread_cond_timedwait(&sh->cond, &sh->lock, &deadline) != 0) {
			rc = pc_run_status_terminal(e->info.status) ? 0 : PC_ETIMEDOUT;
			break;
		}
	}
	e->waiters--;
	if (out && rc != PC_ESTOPPED)
		*out = e->info;
unlock:
	pthread_mutex_unlock(&sh->lock);
	wait_leave(r);
	return rc;
}

int pc_run_registry_watch(pc_run_registry_t *r, const char *run_id, pc_actor_t *who, uint32_t type, uint64_t corr)
{
	if (!r || !run_id || !who)
		return PC_EINVAL;
	/* Allocated before locking; freed if the run has finished already. */
	watcher_t *w = calloc(1, sizeof(*w));
	if (!w)
		return PC_ENOMEM;
	uint64_t h = pc__hash64_str(run_id);
	shard_t *sh = shard_of(r, h);
	int rc = 0;
	bool now = false;
	pc_run_info_t info;
	pthread_mutex_lock(&sh->lock);
	entry_t *e = find_run(sh, run_id, h);
	if (!e) {
		rc = PC_ENOTFOUND;
	} else if (pc_run_status_terminal(e->info.status)) {
		info = e->info;
		now = true;
	} else {
		w->who = pc_actor_retain(who);
		w->type = type;
		w->corr = corr;
		w->next = e->watchers;
		e->watchers = w;
		w = NULL;
	}
	pthread_mutex_unlock(&sh->lock);
	free(w);
	if (now) {
		pc_msg_t *m = pc_msg_new(type, sizeof(info));
		if (!m)
			return PC_ENOMEM;
		memcpy(pc_msg_data(m), &info, sizeof(info));
		m->corr = corr;
		(void)pc_send(who, m);
	}
	return rc;
}
