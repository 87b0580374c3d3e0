/*
 * Actor memory: fixed-size slots carved from chunks the runtime owns.
 *
 * Workers allocate and free slots through their own magazine cache
 * (magazine_internal.h), so a spawn or a reclaim costs no lock and no
 * malloc in the common case, and a slot freed on another worker than the
 * one that spawned it simply joins that worker's cache. Whole magazines
 * move through a depot under the pool's mutex, which is also where new
 * slots are carved. Threads outside the pool allocate under the mutex.
 *
 * Because every actor lives in a chunk, shutdown finds the living by
 * walking the chunks (a slot is in use while its `rt` is set): no list of
 * live actors, and no lock on spawn or reclaim to maintain one.
 */
#include <stdlib.h>

#include "../mailbox/atomics_internal.h"
#include "actor_internal.h"

#define CHUNK_SLOTS 1024u
#define MAG_SLOTS 64u

struct pc__actor_pool {
	pthread_mutex_t lock;
	pc_actor_t **chunks;
	uint32_t nchunks, cap;
	uint32_t carved;   /* slots handed out of the last chunk */
	void **mags;       /* depot: full magazines of free slots */
	uint32_t nmags, mags_cap;
	pc__mag_t loose;   /* free slots not in a full magazine */
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

void pc__actor_free(pc_runtime_t *rt, pc__worker_t *w, pc_actor_t *a)
{
	struct pc__actor_pool *p = rt->actor_pool;
	__atomic_store_n(&a->rt, NULL, __ATOMIC_RELAXED);
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
	} else {
		/* Slot by slot into the loose list: always possible. */
		void *s = full ? full : a;
		while (s) {
			void *next = full ? pc__obj_next(s) : NULL;
			pc__obj_link(s, p->loose.top);
			p->loose.top = s;
			p->loose.n++;
			s = next;
		}
	}
	pthread_mutex_unlock(&p->lock);
}

void pc__actor_pool_each(pc_runtime_t *rt, void (*fn)(pc_actor_t *a, void *arg), void *arg)
{
	struct pc__actor_pool *p = rt->actor_pool;
	for (uint32_t c = 0; c < p->nchunks; c++) {
		uint32_t n = c + 1 == p->nchunks ? p->carved : CHUNK_SLOTS;
		for (uint32_t i = 0; i < n; i++)
			if (p->chunks[c][i].rt)
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
			if (__atomic_load_n(&p->chunks[c][i].rt, __ATOMIC_RELAXED))
				fn(&p->chunks[c][i], arg);
	}
	pthread_mutex_unlock(&p->lock);
}

void pc__actor_pool_free(pc_runtime_t *rt)
{
	struct pc__actor_pool *p = rt->actor_pool;
	if (!p)
		return;
	for (uint32_t c = 0; c < p->nchunks; c++)
		free(p->chunks[c]);
	free(p->chunks);
	free(p->mags);
	pthread_mutex_destroy(&p->lock);
	free(p);
	rt->actor_pool = NULL;
}
