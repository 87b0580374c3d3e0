/*
 * A hash table of entries named by nonzero 64-bit ids. The entry is a link
 * embedded in what it names, so adding allocates nothing; the table grows
 * by doubling as it fills. Not synchronised: its owner locks it or keeps
 * it to one actor.
 */
#ifndef PINCER_IO_ID_MAP_H
#define PINCER_IO_ID_MAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct pc__id_link {
	struct pc__id_link *next;
	uint64_t id; /* 0: in no table */
} pc__id_link_t;

typedef struct pc__id_map {
	pc__id_link_t **buckets;
	size_t nbuckets; /* a power of two */
	size_t n;
} pc__id_map_t;

/* An empty table; PC_ENOMEM. */
int pc__id_map_init(pc__id_map_t *m);
/* Frees the table, not the entries. */
void pc__id_map_destroy(pc__id_map_t *m);

/* Puts `e` in under `id` (nonzero, not already in). A failed growth only
 * makes chains longer. */
void pc__id_map_add(pc__id_map_t *m, pc__id_link_t *e, uint64_t id);
pc__id_link_t *pc__id_map_find(const pc__id_map_t *m, uint64_t id);
/* Takes `e` out (a no-op when it is in no table); its id becomes 0. */
void pc__id_map_remove(pc__id_map_t *m, pc__id_link_t *e);
/* Takes every entry out, calling fn on each once it is out: for tearing
 * down. */
void pc__id_map_drain(pc__id_map_t *m, void (*fn)(pc__id_link_t *e, void *arg), void *arg);

#endif
