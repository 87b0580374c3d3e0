/*
 * The fixed-size object pool (slab.h). Chunks are never returned before
 * pc__slab_destroy: a pool serves a population that comes back.
 */
#include "slab.h"

#include <stdlib.h>
#include <string.h>

#define CHUNK_HEADER 16u /* the chunk link, keeping objects 16-aligned */

void pc__slab_init(pc__slab_t *s, size_t size, size_t per_chunk)
{
	memset(s, 0, sizeof(*s));
	pthread_mutex_init(&s->lock, NULL);
	size = size < sizeof(void *) ? sizeof(void *) : size;
	s->size = (size + 15u) & ~(size_t)15u;
	s->per_chunk = per_chunk ? per_chunk : 64;
}

void *pc__slab_alloc(pc__slab_t *s)
{
	pthread_mutex_lock(&s->lock);
	if (!s->free) {
		char *chunk = malloc(CHUNK_HEADER + s->size * s->per_chunk);
		if (chunk) {
			*(void **)chunk = s->chunks;
			s->chunks = chunk;
			for (size_t i = s->per_chunk; i-- > 0;) {
				void *obj = chunk + CHUNK_HEADER + i * s->size;
				*(void **)obj = s->free;
				s->free = obj;
			}
		}
	}
	void *p = s->free;
	if (p)
		s->free = *(void **)p;
	pthread_mutex_unlock(&s->lock);
	if (p)
		memset(p, 0, s->size);
	return p;
}

void pc__slab_free(pc__slab_t *s, void *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&s->lock);
	*(void **)p = s->free;
	s->free = p;
	pthread_mutex_unlock(&s->lock);
}

void pc__slab_destroy(pc__slab_t *s)
{
	for (void *c = s->chunks; c;) {
		void *next = *(void **)c;
		free(c);
		c = next;
	}
	s->chunks = s->free = NULL;
	pthread_mutex_destroy(&s->lock);
}
