/*
 * Two-magazine caches of free fixed-size objects (Bonwick's magazine
 * allocator): a thread pops and pushes on its "loaded" magazine, swaps with
 * its "spare" when that one can serve, and trades only *whole* magazines
 * with a shared depot, so alternating alloc/free at a boundary never
 * thrashes the depot and the depot's lock is taken at most once per
 * magazine's worth of operations. Free objects are linked through their
 * first word. Single-threaded: each cache belongs to one thread.
 * The mailbox part's header for msg_pool.h, whose caches parts above
 * embed (the I/O loops); not installed.
 */
#ifndef PC_MAILBOX_MAGAZINE_H
#define PC_MAILBOX_MAGAZINE_H

#include <stdint.h>
#include <string.h>

typedef struct pc__mag {
	void *top;
	uint32_t n;
} pc__mag_t;

typedef struct pc__mags {
	pc__mag_t loaded, spare;
} pc__mags_t;

static inline void *pc__obj_next(const void *obj)
{
	void *next;
	memcpy(&next, obj, sizeof(next));
	return next;
}

static inline void pc__obj_link(void *obj, void *next)
{
	memcpy(obj, &next, sizeof(next));
}

/* A free object, or NULL when both magazines are empty (the caller then
 * loads one from its depot with pc__mags_load). */
static inline void *pc__mags_pop(pc__mags_t *c)
{
	if (c->loaded.n == 0) {
		if (c->spare.n == 0)
			return NULL;
		pc__mag_t t = c->loaded;
		c->loaded = c->spare;
		c->spare = t;
	}
	void *obj = c->loaded.top;
	c->loaded.top = pc__obj_next(obj);
	c->loaded.n--;
	return obj;
}

/* Installs a magazine of `n` objects as the loaded one (which is empty). */
static inline void pc__mags_load(pc__mags_t *c, void *top, uint32_t n)
{
	c->loaded.top = top;
	c->loaded.n = n;
}

/* Caches a free object. Returns a full magazine (its first object, `full`
 * objects linked) that the caller must hand to its depot, or NULL. */
static inline void *pc__mags_push(pc__mags_t *c, void *obj, uint32_t full)
{
	void *out = NULL;
	if (c->loaded.n == full) {
		if (c->spare.n == full)
			out = c->spare.top;
		c->spare = c->loaded;
		c->loaded.top = NULL;
		c->loaded.n = 0;
	}
	pc__obj_link(obj, c->loaded.top);
	c->loaded.top = obj;
	c->loaded.n++;
	return out;
}

#endif
