/*
 * An open-addressing table (linear probing, at most half full) of session
 * entries, each one allocation holding its key. Nothing is removed but all
 * at once, so probing needs no tombstones.
 */
#include "session_cache.h"
#include "actors/hash.h"

#include <stdlib.h>
#include <string.h>

typedef struct node {
	pc__sc_entry_t e; /* first: entries convert to nodes */
	uint64_t hash;
	size_t klen;
	char key[];
} node_t;

struct pc__sc {
	node_t **slots;
	size_t mask; /* slots - 1, a power of two minus one */
	uint32_t n, cap;
	node_t **dirty;
	size_t ndirty;
};

pc__sc_t *pc__sc_new(uint32_t cap)
{
	pc__sc_t *c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	size_t slots = 16;
	while (slots < (size_t)cap * 2)
		slots *= 2;
	c->slots = calloc(slots, sizeof(*c->slots));
	c->dirty = calloc(cap ? cap : 1, sizeof(*c->dirty));
	if (!c->slots || !c->dirty) {
		pc__sc_free(c);
		return NULL;
	}
	c->mask = slots - 1;
	c->cap = cap;
	return c;
}

void pc__sc_free(pc__sc_t *c)
{
	if (!c)
		return;
	pc__sc_clear(c);
	free(c->slots);
	free(c->dirty);
	free(c);
}

static size_t find(const pc__sc_t *c, const char *key, size_t klen, uint64_t h)
{
	size_t i = (size_t)h & c->mask;
	for (node_t *n; (n = c->slots[i]) != NULL; i = (i + 1) & c->mask)
		if (n->hash == h && n->klen == klen && memcmp(n->key, key, klen) == 0)
			break;
	return i;
}

pc__sc_entry_t *pc__sc_get(pc__sc_t *c, const char *key, size_t klen)
{
	node_t *n = c->slots[find(c, key, klen, pc__hash64(key, klen))];
	return n ? &n->e : NULL;
}

pc__sc_entry_t *pc__sc_add(pc__sc_t *c, const char *key, size_t klen, int64_t sid, int64_t last_seq,
			   int64_t epoch)
{
	if (c->n >= c->cap)
		return NULL;
	uint64_t h = pc__hash64(key, klen);
	size_t i = find(c, key, klen, h);
	if (c->slots[i])
		return NULL; /* held already: callers look first */
	node_t *n = malloc(sizeof(*n) + klen + 1);
	if (!n)
		return NULL;
	n->e = (pc__sc_entry_t){.sid = sid, .last_seq = last_seq, .epoch = epoch};
	n->hash = h;
	n->klen = klen;
	memcpy(n->key, key, klen);
	n->key[klen] = '\0';
	c->slots[i] = n;
	c->n++;
	return &n->e;
}

void pc__sc_touch(pc__sc_t *c, pc__sc_entry_t *e)
{
	if (e->dirty)
		return;
	e->dirty = true;
	c->dirty[c->ndirty++] = (node_t *)e;
}

size_t pc__sc_dirty_count(const pc__sc_t *c)
{
	return c->ndirty;
}

pc__sc_entry_t *pc__sc_dirty(pc__sc_t *c, size_t i)
{
	return i < c->ndirty ? &c->dirty[i]->e : NULL;
}

static void reset(pc__sc_entry_t *e)
{
	e->dirty = false;
	e->updated_ms = 0;
	e->runs_added = 0;
	free(e->last_run);
	e->last_run = NULL;
}

void pc__sc_written(pc__sc_t *c)
{
	for (size_t i = 0; i < c->ndirty; i++)
		reset(&c->dirty[i]->e);
	c->ndirty = 0;
}

void pc__sc_clear(pc__sc_t *c)
{
	for (size_t i = 0; i <= c->mask && c->n; i++) {
		node_t *n = c->slots[i];
		if (!n)
			continue;
		free(n->e.last_run);
		free(n);
		c->slots[i] = NULL;
		c->n--;
	}
	c->ndirty = 0;
}
