#include "id_map.h"

#include <stdlib.h>

#include "runtime/error.h"

#define INITIAL_BUCKETS 64u

static size_t slot(uint64_t id, size_t nbuckets)
{
	return (size_t)((id * 0x9E3779B97F4A7C15ull) >> 32) & (nbuckets - 1);
}

int pc__id_map_init(pc__id_map_t *m)
{
	m->n = 0;
	m->nbuckets = INITIAL_BUCKETS;
	m->buckets = calloc(m->nbuckets, sizeof(*m->buckets));
	return m->buckets ? 0 : PC_ENOMEM;
}

void pc__id_map_destroy(pc__id_map_t *m)
{
	free(m->buckets);
	m->buckets = NULL;
	m->nbuckets = m->n = 0;
}

static void grow(pc__id_map_t *m)
{
	size_t n = m->nbuckets * 2;
	pc__id_link_t **b = calloc(n, sizeof(*b));
	if (!b)
		return;
	for (size_t i = 0; i < m->nbuckets; i++) {
		for (pc__id_link_t *e = m->buckets[i], *next; e; e = next) {
			next = e->next;
			size_t s = slot(e->id, n);
			e->next = b[s];
			b[s] = e;
		}
	}
	free(m->buckets);
	m->buckets = b;
	m->nbuckets = n;
}

void pc__id_map_add(pc__id_map_t *m, pc__id_link_t *e, uint64_t id)
{
	if (m->n >= m->nbuckets)
		grow(m);
	size_t s = slot(id, m->nbuckets);
	e->id = id;
	e->next = m->buckets[s];
	m->buckets[s] = e;
	m->n++;
}

pc__id_link_t *pc__id_map_find(const pc__id_map_t *m, uint64_t id)
{
	pc__id_link_t *e = m->buckets[slot(id, m->nbuckets)];
	while (e && e->id != id)
		e = e->next;
	return e;
}

void pc__id_map_remove(pc__id_map_t *m, pc__id_link_t *e)
{
	if (!e->id)
		return;
	pc__id_link_t **p = &m->buckets[slot(e->id, m->nbuckets)];
	while (*p && *p != e)
		p = &(*p)->next;
	if (*p) {
		*p = e->next;
		m->n--;
	}
	e->id = 0;
	e->next = NULL;
}

void pc__id_map_drain(pc__id_map_t *m, void (*fn)(pc__id_link_t *e, void *arg), void *arg)
{
	for (size_t i = 0; m->n && i < m->nbuckets; i++) {
		while (m->buckets[i]) {
			pc__id_link_t *e = m->buckets[i];
			m->buckets[i] = e->next;
			m->n--;
			e->id = 0;
			e->next = NULL;
			fn(e, arg);
		}
	}
}
