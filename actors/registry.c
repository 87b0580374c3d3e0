/* The name registry: a chained hash table under one mutex. Lookups are
 * rare next to messages, so a lock is simpler than a lock-free table. */
#include "registry.h"

#include <stdlib.h>
#include <string.h>

#include "../mailbox/atomics.h"
#include "hash.h"
#include "actor_internal.h"

#define NAME_MAX_LEN 255

typedef struct entry {
	struct entry *next;
	uint64_t hash;
	pc_actor_t *actor; /* retained */
	char name[];
} entry_t;

struct pc__registry {
	pthread_mutex_t lock;
	entry_t **buckets;
	uint32_t nbuckets, n;
};

static pthread_mutex_t create_lock = PTHREAD_MUTEX_INITIALIZER;

static struct pc__registry *get(pc_runtime_t *rt, bool create)
{
	struct pc__registry *r = pc_atomic_load_ptr_acq((void *const *)&rt->registry);
	if (r || !create)
		return r;
	pthread_mutex_lock(&create_lock);
	r = rt->registry;
	if (!r && (r = calloc(1, sizeof(*r)))) {
		r->nbuckets = 64;
		r->buckets = calloc(r->nbuckets, sizeof(entry_t *));
		if (!r->buckets) {
			free(r);
			r = NULL;
		} else {
			pthread_mutex_init(&r->lock, NULL);
			pc_atomic_store_ptr_rel((void **)&rt->registry, r);
		}
	}
	pthread_mutex_unlock(&create_lock);
	return r;
}

static entry_t **find(struct pc__registry *r, const char *name, uint64_t h)
{
	entry_t **p = &r->buckets[h % r->nbuckets];
	while (*p && ((*p)->hash != h || strcmp((*p)->name, name) != 0))
		p = &(*p)->next;
	return p;
}

static void grow(struct pc__registry *r)
{
	uint32_t nb = r->nbuckets * 2;
	entry_t **b = calloc(nb, sizeof(entry_t *));
	if (!b)
		return; /* a longer chain is slower, not wrong */
	for (uint32_t i = 0; i < r->nbuckets; i++) {
		entry_t *e = r->buckets[i];
		while (e) {
			entry_t *next = e->next;
			e->next = b[e->hash % nb];
			b[e->hash % nb] = e;
			e = next;
		}
	}
	free(r->buckets);
	r->buckets = b;
	r->nbuckets = nb;
}

int pc_register(pc_actor_t *a, const char *name)
{
	if (!a || !name)
		return PC_EINVAL;
	size_t len = strlen(name);
	if (len == 0 || len > NAME_MAX_LEN)
		return PC_EINVAL;
	struct pc__registry *r = get(a->rt, true);
	pc__actor_ext_t *x = pc__actor_ext(a);
	entry_t *e = malloc(sizeof(*e) + len + 1);
	char *copy = malloc(len + 1);
	if (!r || !x || !e || !copy) {
		free(e);
		free(copy);
		return PC_ENOMEM;
	}
	memcpy(e->name, name, len + 1);
	memcpy(copy, name, len + 1);
	e->hash = pc__hash64_str(name);
	e->actor = a;
	int rc = 0;
	pthread_mutex_lock(&r->lock);
	entry_t **slot = find(r, name, e->hash);
	if (*slot) {
		rc = PC_EEXIST;
	} else {
		pthread_mutex_lock(&x->lock);
		if (x->dead || pc_actor_stopped(a))
			rc = PC_ESTOPPED;
		else if (x->name)
			rc = PC_ESTATE;
		else
			x->name = copy;
		pthread_mutex_unlock(&x->lock);
	}
	if (rc == 0) {
		pc_actor_retain(a);
		e->next = NULL;
		*slot = e;
		if (++r->n > r->nbuckets)
			grow(r);
	}
	pthread_mutex_unlock(&r->lock);
	if (rc != 0) {
		free(e);
		free(copy);
	}
	return rc;
}

/* Unlinks `name` if it maps to `only` (or to anything when `only` is NULL);
 * returns the entry for the caller to free outside the lock. */
static entry_t *unlink_name(struct pc__registry *r, const char *name, pc_actor_t *only)
{
	pthread_mutex_lock(&r->lock);
	entry_t **slot = find(r, name, pc__hash64_str(name));
	entry_t *e = *slot;
	if (e && (!only || e->actor == only)) {
		*slot = e->next;
		r->n--;
	} else {
		e = NULL;
	}
	pthread_mutex_unlock(&r->lock);
	return e;
}

static void forget_name_of(pc_actor_t *a)
{
	pc__actor_ext_t *x = pc__actor_ext_peek(a); /* installed: it had a name */
	pthread_mutex_lock(&x->lock);
	free(x->name);
	x->name = NULL;
	pthread_mutex_unlock(&x->lock);
}

int pc_unregister(pc_runtime_t *rt, const char *name)
{
	struct pc__registry *r = rt && name ? get(rt, false) : NULL;
	entry_t *e = r ? unlink_name(r, name, NULL) : NULL;
	if (!e)
		return PC_ENOTFOUND;
	forget_name_of(e->actor);
	pc_actor_release(e->actor);
	free(e);
	return 0;
}

void pc__registry_forget(pc_runtime_t *rt, const char *name, pc_actor_t *a)
{
	struct pc__registry *r = get(rt, false);
	entry_t *e = r ? unlink_name(r, name, a) : NULL;
	if (!e)
		return;
	pc_actor_release(e->actor);
	free(e);
}

pc_actor_t *pc_whereis(pc_runtime_t *rt, const char *name)
{
	struct pc__registry *r = rt && name ? get(rt, false) : NULL;
	if (!r)
		return NULL;
	pc_actor_t *a = NULL;
	pthread_mutex_lock(&r->lock);
	entry_t *e = *find(r, name, pc__hash64_str(name));
	if (e)
		a = pc_actor_retain(e->actor);
	pthread_mutex_unlock(&r->lock);
	return a;
}

void pc__registry_free(pc_runtime_t *rt)
{
	struct pc__registry *r = rt->registry;
	if (!r)
		return;
	rt->registry = NULL;
	for (uint32_t i = 0; i < r->nbuckets; i++) {
		entry_t *e = r->buckets[i];
		while (e) {
			entry_t *next = e->next;
			pc_actor_release(e->actor);
			free(e);
			e = next;
		}
	}
	free(r->buckets);
	pthread_mutex_destroy(&r->lock);
	free(r);
}
