/*
 * Actor memory: fixed-size slots carved from chunks the runtime owns.
 *
 * Workers allocate and free slots through their own magazine cache
 * (magazine.h), so a spawn or a reclaim costs no lock and no
 * malloc in the common case, and a slot freed on another worker than the
 * one that spawned it simply joins that worker's cache. Whole magazines
 * move through a depot under the pool's mutex, which is also where new
 * slots are carved. Threads outside the pool allocate under the mutex.
 *
 * Because every actor lives in a chunk, shutdown finds the living by
 * walking the chunks (a slot is in use while its `rt` is set): no list of
 * live actors, and no lock on spawn or reclaim to maintain one.
 *
 * A burst leaves as many chunks as its peak of live actors needed (a run
 * in flight is ~4 actors), their free slots spread through the depot's
 * magazines. At a trim, the chunks whose every slot is free in the depot
 * are given back; a slot in some worker's cache keeps its chunk.
 */
#include <stdint.h>
#include <stdlib.h>

#include "../mailbox/atomics.h"
#include "actor_internal.h"

#if defined(__SANITIZE_ADDRESS__)
#define PC__POOL_QUARANTINE 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PC__POOL_QUARANTINE 1
#endif
#endif

#ifdef PC__POOL_QUARANTINE
#include <sanitizer/asan_interface.h>
/* Under AddressSanitizer a freed slot is poisoned and held back for the
 * next QUARANTINE_SLOTS frees, so a send or a release that reaches an
 * actor after its last reference is reported where it happens instead of
 * corrupting whichever actor takes the slot next. */
#define QUARANTINE_SLOTS 65536u
#define slot_retired(s) __asan_address_is_poisoned(s)
#else
#define slot_retired(s) false
#endif

/* A chunk is 64 bytes short of 128 KiB: aligned to 64, a chunk of exactly
 * 128 KiB takes mimalloc's next size class, 192 KiB. */
#define CHUNK_BYTES (((size_t)128 << 10) - 64)
#define CHUNK_SLOTS ((uint32_t)(CHUNK_BYTES / sizeof(pc_actor_t)))
#define MAG_SLOTS 64u

struct pc__actor_pool {
	pthread_mutex_t lock;
	pc_actor_t **chunks;
	uint32_t nchunks, cap;
	uint32_t carved;   /* slots handed out of the last chunk */
	void **mags;       /* depot: full magazines of free slots */
	uint32_t nmags, mags_cap;
	pc__mag_t loose;   /* free slots not in a full magazine */
#ifdef PC__POOL_QUARANTINE
	pc_actor_t **held; /* ring of poisoned slots, oldest at held_at */
	uint32_t nheld, held_at;
#endif
};

int pc__actor_pool_new(pc_runtime_t *rt)
{
	struct pc__actor_pool *p = calloc(1, sizeof(*p));
	if (!p)
		return PC_ENOMEM;
	pthread_mutex_init(&p->lock, NULL);
	rt->actor_pool = p;
	return 0;
}

/* Lock held. Up to `want` free slots, linked, into *mag. */
static void fill(struct pc__actor_pool *p, pc__mag_t *mag, uint32_t want)
{
	if (p->nmags > 0 && (want == MAG_SLOTS || p->loose.n == 0)) {
		void *top = p->mags[--p->nmags];
		if (want == MAG_SLOTS) {
			mag->top = top;
			mag->n = MAG_SLOTS;
			return;
		}
		/* A single slot wanted: the rest of the magazine stays loose. */
		p->loose.top = top;
		p->loose.n = MAG_SLOTS;
	}
	while (mag->n < want && p->loose.n > 0) {
		void *s = p->loose.top;
		p->loose.top = pc__obj_next(s);
		p->loose.n--;
		pc__obj_link(s, mag->top);
		mag->top = s;
		mag->n++;
	}
	while (mag->n < want) {
		if (p->nchunks == 0 || p->carved == CHUNK_SLOTS) {
			if (p->nchunks == p->cap) {
				uint32_t cap = p->cap ? p->cap * 2 : 16;
				pc_actor_t **c = realloc(p->chunks, sizeof(*c) * cap);
				if (!c)
					return;
				p->chunks = c;
				p->cap = cap;
			}
			pc_actor_t *chunk = NULL;
			if (posix_memalign((void **)&chunk, 64, sizeof(pc_actor_t) * CHUNK_SLOTS) != 0)
				return;
			p->chunks[p->nchunks++] = chunk;
			p->carved = 0;
		}
		pc_actor_t *s = &p->chunks[p->nchunks - 1][p->carved++];
		__atomic_store_n(&s->rt, NULL, __ATOMIC_RELAXED); /* read by each_live */
		pc__obj_link(s, mag->top);
		mag->top = s;
		mag->n++;
	}
}

/* Lock held. Slot s onto the depot's loose list. */
static void loose_push(struct pc__actor_pool *p, void *s)
{
	pc__obj_link(s, p->loose.top);
	p->loose.top = s;
	p->loose.n++;
}

/* Lock held. A chain of free slots (a magazine) onto the loose list. */
static void loose_push_chain(struct pc__actor_pool *p, void *s)
{
	while (s) {
		void *next = pc__obj_next(s);
		loose_push(p, s);
		s = next;
	}
}

pc_actor_t *pc__actor_alloc(pc_runtime_t *rt, pc__worker_t *w)
{
	struct pc__actor_pool *p = rt->actor_pool;
	if (w) {
		pc_actor_t *a = pc__mags_pop(&w->actor_cache);
		if (a)
			return a;
	}
	pc__mag_t mag = {NULL, 0};
	pthread_mutex_lock(&p->lock);
	fill(p, &mag, w ? MAG_SLOTS : 1);
	pthread_mutex_unlock(&p->lock);
	if (mag.n == 0)
		return NULL;
	if (!w)
		return mag.top;
	pc__mags_load(&w->actor_cache, mag.top, mag.n);
	return pc__mags_pop(&w->actor_cache);
}

#ifdef PC__POOL_QUARANTINE
/* The slot to recycle in a's place: NULL while the ring fills (or when it
 * cannot be had; then a simply stays poisoned until the pool goes). */
static pc_actor_t *quarantine(struct pc__actor_pool *p, pc_actor_t *a)
{
	pc_actor_t *out = NULL;
	pthread_mutex_lock(&p->lock);
	if (!p->held)
		p->held = malloc(sizeof(*p->held) * QUARANTINE_SLOTS);
	if (p->held) {
		if (p->nheld == QUARANTINE_SLOTS) {
			out = p->held[p->held_at];
			p->held[p->held_at] = a;
			p->held_at = (p->held_at + 1) % QUARANTINE_SLOTS;
		} else {
			p->held[(p->held_at + p->nheld++) % QUARANTINE_SLOTS] = a;
		}
	}
	ASAN_POISON_MEMORY_REGION(a, sizeof(*a));
	if (out)
		ASAN_UNPOISON_MEMORY_REGION(out, sizeof(*out));
	pthread_mutex_unlock(&p->lock);
	return out;
}
#endif

void pc__actor_free(pc_runtime_t *rt, pc__worker_t *w, pc_actor_t *a)
{
	struct pc__actor_pool *p = rt->actor_pool;
	__atomic_store_n(&a->rt, NULL, __ATOMIC_RELAXED);
#ifdef PC__POOL_QUARANTINE
	a = quarantine(p, a);
	if (!a)
		return;
#endif
	void *full = w ? pc__mags_push(&w->actor_cache, a, MAG_SLOTS) : NULL;
	if (w && !full)
		return;
	pthread_mutex_lock(&p->lock);
	if (full && p->nmags == p->mags_cap) {
		uint32_t cap = p->mags_cap ? p->mags_cap * 2 : 16;
		void **m = realloc(p->mags, sizeof(*m) * cap);
		if (m) {
			p->mags = m;
			p->mags_cap = cap;
		}
	}
	if (full && p->nmags < p->mags_cap) {
		p->mags[p->nmags++] = full;
	} else if (full) {
		/* Slot by slot into the loose list: always possible. */
		loose_push_chain(p, full);
	} else {
		loose_push(p, a);
	}
	pthread_mutex_unlock(&p->lock);
}

/* Lock held. Moves the free slots of a worker's cache to the depot. */
static void flush_cache(struct pc__actor_pool *p, pc__mags_t *cache)
{
	for (void *s; (s = pc__mags_pop(cache)) != NULL;)
		loose_push(p, s);
}

static int by_address(const void *a, const void *b)
{
	uintptr_t x = (uintptr_t)*(pc_actor_t *const *)a, y = (uintptr_t)*(pc_actor_t *const *)b;
	return (x > y) - (x < y);
}

/* The index in `sorted` (chunk bases by address) of the chunk holding s,
 * or n when none does (the chunk being carved is not in `sorted`). */
static uint32_t chunk_of(pc_actor_t *const *sorted, uint32_t n, const void *s)
{
	uint32_t lo = 0, hi = n;
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		if ((uintptr_t)sorted[mid] <= (uintptr_t)s)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0)
		return n;
	uintptr_t base = (uintptr_t)sorted[lo - 1];
	return (uintptr_t)s < base + sizeof(pc_actor_t) * CHUNK_SLOTS ? lo - 1 : n;
}

/* Lock held. Every free slot of the depot, full magazines included, on
 * the loose list (fill serves from there as well). */
static void loosen_depot(struct pc__actor_pool *p)
{
	for (uint32_t m = 0; m < p->nmags; m++)
		loose_push_chain(p, p->mags[m]);
	p->nmags = 0;
}

void pc__actor_pool_shrink(const pc_runtime_t *rt, pc__worker_t *w)
{
	struct pc__actor_pool *p = rt->actor_pool;
	pthread_mutex_lock(&p->lock);
	if (w)
		flush_cache(p, &w->actor_cache);
	/* the chunk being carved stays, and is last in p->chunks */
	uint32_t n = p->nchunks ? p->nchunks - 1 : 0;
	uint32_t nfree = p->loose.n + p->nmags * MAG_SLOTS;
#ifdef PC__POOL_QUARANTINE
	nfree += p->nheld;
#endif
	if (n == 0 || nfree < CHUNK_SLOTS) {
		pthread_mutex_unlock(&p->lock);
		return;
	}
	pc_actor_t **sorted = malloc(sizeof(*sorted) * n);
	uint32_t *free_in = calloc(n, sizeof(*free_in));
	if (!sorted || !free_in)
		goto out;
	for (uint32_t c = 0; c < n; c++)
		sorted[c] = p->chunks[c];
	qsort(sorted, n, sizeof(*sorted), by_address);
	loosen_depot(p);
	uint32_t empty = 0;
	for (void *s = p->loose.top; s; s = pc__obj_next(s)) {
		uint32_t c = chunk_of(sorted, n, s);
		if (c < n && ++free_in[c] == CHUNK_SLOTS)
			empty++;
	}
#ifdef PC__POOL_QUARANTINE
	for (uint32_t k = 0; k < p->nheld; k++) {
		uint32_t c = chunk_of(sorted, n, p->held[(p->held_at + k) % QUARANTINE_SLOTS]);
		if (c < n && ++free_in[c] == CHUNK_SLOTS)
			empty++;
	}
#endif
	if (empty == 0)
		goto out;
#ifdef PC__POOL_QUARANTINE
	/* held slots of chunks about to go leave the ring; a late touch of
	 * them is then a use after free, which the sanitizer reports itself */
	uint32_t held = 0;
	for (uint32_t k = 0; k < p->nheld; k++) {
		pc_actor_t *s = p->held[(p->held_at + k) % QUARANTINE_SLOTS];
		uint32_t c = chunk_of(sorted, n, s);
		if (c >= n || free_in[c] != CHUNK_SLOTS)
			p->held[(p->held_at + held++) % QUARANTINE_SLOTS] = s;
	}
	p->nheld = held;
#endif
	/* drop the empty chunks' slots from the loose list, then the chunks */
	void *prev = NULL;
	for (void *s = p->loose.top; s;) {
		void *next = pc__obj_next(s);
		uint32_t c = chunk_of(sorted, n, s);
		if (c < n && free_in[c] == CHUNK_SLOTS) {
			if (prev)
				pc__obj_link(prev, next);
			else
				p->loose.top = next;
			p->loose.n--;
		} else {
			prev = s;
		}
		s = next;
	}
	uint32_t kept = 0;
	for (uint32_t c = 0; c < p->nchunks; c++) {
		pc_actor_t *chunk = p->chunks[c];
		uint32_t i = c + 1 < p->nchunks ? chunk_of(sorted, n, chunk) : n;
		if (i < n && free_in[i] == CHUNK_SLOTS) {
#ifdef PC__POOL_QUARANTINE
			ASAN_UNPOISON_MEMORY_REGION(chunk, sizeof(pc_actor_t) * CHUNK_SLOTS);
#endif
			free(chunk);
		}
		else
			p->chunks[kept++] = chunk;
	}
	p->nchunks = kept;
out:
	pthread_mutex_unlock(&p->lock);
	free(sorted);
	free(free_in);
}

void pc__actor_pool_each(pc_runtime_t *rt, void (*fn)(pc_actor_t *a, void *arg), void *arg)
{
	struct pc__actor_pool *p = rt->actor_pool;
	for (uint32_t c = 0; c < p->nchunks; c++) {
		uint32_t n = c + 1 == p->nchunks ? p->carved : CHUNK_SLOTS;
		for (uint32_t i = 0; i < n; i++)
			if (!slot_retired(&p->chunks[c][i]) && p->chunks[c][i].rt)
				fn(&p->chunks[c][i], arg);
	}
}

void pc__actor_pool_each_live(pc_runtime_t *rt, void (*fn)(pc_actor_t *a, void *arg), void *arg)
{
	struct pc__actor_pool *p = rt->actor_pool;
	pthread_mutex_lock(&p->lock);
	for (uint32_t c = 0; c < p->nchunks; c++) {
		uint32_t n = c + 1 == p->nchunks ? p->carved : CHUNK_SLOTS;
		for (uint32_t i = 0; i < n; i++)
			if (!slot_retired(&p->chunks[c][i]) &&
			    __atomic_load_n(&p->chunks[c][i].rt, __ATOMIC_RELAXED))
				fn(&p->chunks[c][i], arg);
	}
	pthread_mutex_unlock(&p->lock);
}

void pc__actor_pool_free(pc_runtime_t *rt)
{
	struct pc__actor_pool *p = rt->actor_pool;
	if (!p)
		return;
#ifdef PC__POOL_QUARANTINE
	for (uint32_t c = 0; c < p->nchunks; c++)
		ASAN_UNPOISON_MEMORY_REGION(p->chunks[c], sizeof(pc_actor_t) * CHUNK_SLOTS);
	free(p->held);
#endif
	for (uint32_t c = 0; c < p->nchunks; c++)
		free(p->chunks[c]);
	free(p->chunks);
	free(p->mags);
	pthread_mutex_destroy(&p->lock);
	free(p);
	rt->actor_pool = NULL;
}
