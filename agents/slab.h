/*
 * A fixed-size object pool for what lives as long as a session: objects
 * come from chunks of many, so long-lived small objects sit together
 * instead of being scattered between the short-lived allocations of runs
 * (which would keep whole pages resident after those are freed). Private
 * to agents/.
 *
 * Threads: any (a mutex; taken once per session start and retirement).
 */
#ifndef PINCER_AGENTS_SLAB_H
#define PINCER_AGENTS_SLAB_H

#include <pthread.h>
#include <stddef.h>

typedef struct pc__slab {
	pthread_mutex_t lock;
	size_t size;        /* object size, rounded up to 16 */
	size_t per_chunk;
	void *free;         /* free objects, linked through their first word */
	void *chunks;       /* chunks, linked through their first word */
} pc__slab_t;

void pc__slab_init(pc__slab_t *s, size_t size, size_t per_chunk);
/* A zeroed object, or NULL. */
void *pc__slab_alloc(pc__slab_t *s);
/* NULL is a no-op. */
void pc__slab_free(pc__slab_t *s, void *p);
/* Frees every chunk (the objects must all be free or abandoned). */
void pc__slab_destroy(pc__slab_t *s);

#endif
