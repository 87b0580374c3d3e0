/*
 * Message allocation. Four size classes (48, 64, 128 and 256 bytes in all);
 * each worker keeps two magazines of up to PC_MSG_MAG_SIZE free messages per
 * class (magazine.h) and trades whole magazines with a shared
 * depot. A message freed on another worker than the one that allocated it
 * simply joins that worker's cache: all blocks of a class are
 * interchangeable, so in a producer/consumer pair the consumer's full
 * magazines flow through the depot back to the producer. The depot is
 * bounded (DEPOT_MAX_MAGS magazines per class); beyond it blocks go back to
 * malloc.
 */
#include "msg_pool.h"

#include "atomics.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define DEPOT_MAX_MAGS 512

static const uint32_t class_bytes[PC_MSG_CLASSES] = {48, 64, 128, 256};

typedef struct depot_class {
	pthread_mutex_t lock;
	uint32_t n;
	pc_msg_t *mags[DEPOT_MAX_MAGS]; /* each a full magazine, linked by next */
} depot_class_t;

static depot_class_t depot[PC_MSG_CLASSES] = {
	{PTHREAD_MUTEX_INITIALIZER, 0, {0}},
	{PTHREAD_MUTEX_INITIALIZER, 0, {0}},
	{PTHREAD_MUTEX_INITIALIZER, 0, {0}},
	{PTHREAD_MUTEX_INITIALIZER, 0, {0}},
};

static __thread pc__msg_cache_t *tls_cache __attribute__((tls_model("initial-exec")));

static void free_chain(pc_msg_t *m)
{
	while (m) {
		pc_msg_t *next = m->next;
		free(m);
		m = next;
	}
}

static pc_msg_t *depot_take(unsigned cls)
{
	depot_class_t *d = &depot[cls];
	pc_msg_t *mag = NULL;
	/* An empty depot is the common case for a pure producer: look before
	 * taking the lock. */
	if (pc_atomic_load_u32(&d->n) == 0)
		return NULL;
	pthread_mutex_lock(&d->lock);
	if (d->n > 0) {
		mag = d->mags[d->n - 1];
		pc_atomic_store_u32(&d->n, d->n - 1);
	}
	pthread_mutex_unlock(&d->lock);
	return mag;
}

static void depot_give(unsigned cls, pc_msg_t *mag)
{
	depot_class_t *d = &depot[cls];
	pthread_mutex_lock(&d->lock);
	if (d->n < DEPOT_MAX_MAGS) {
		d->mags[d->n] = mag;
		pc_atomic_store_u32(&d->n, d->n + 1);
		mag = NULL;
	}
	pthread_mutex_unlock(&d->lock);
	free_chain(mag); /* depot full: bound the memory kept */
}

static unsigned class_of(size_t total)
{
	for (unsigned c = 0; c < PC_MSG_CLASSES; c++)
		if (total <= class_bytes[c])
			return c;
	return PC_MSG_CLASS_HEAP;
}

static pc_msg_t *cache_pop(pc__msg_cache_t *c, unsigned cls)
{
	pc_msg_t *m = pc__mags_pop(&c->cls[cls]);
	if (m)
		return m;
	pc_msg_t *mag = depot_take(cls);
	if (!mag)
		return NULL;
	pc__mags_load(&c->cls[cls], mag, PC_MSG_MAG_SIZE);
	return pc__mags_pop(&c->cls[cls]);
}

static void cache_push(pc__msg_cache_t *c, unsigned cls, pc_msg_t *m)
{
	pc_msg_t *full = pc__mags_push(&c->cls[cls], m, PC_MSG_MAG_SIZE);
	if (full)
		depot_give(cls, full);
}

pc_msg_t *pc_msg_new(uint32_t type, size_t payload_size)
{
	if (payload_size > PC_MSG_MAX_PAYLOAD)
		return NULL;
	size_t total = sizeof(pc_msg_t) + payload_size;
	unsigned cls = class_of(total);
	pc__msg_cache_t *c = tls_cache;
	pc_msg_t *m = NULL;
	if (cls != PC_MSG_CLASS_HEAP) {
		if (c)
			m = cache_pop(c, cls);
		if (!m)
			m = malloc(class_bytes[cls]);
	} else {
		m = malloc(total);
	}
	if (!m)
		return NULL;
	m->next = NULL;
	m->type = type;
	m->size = (uint32_t)payload_size;
	m->flags = 0;
	m->reserved = 0;
	m->size_class = (uint16_t)cls;
	m->reply_to = NULL;
	m->corr = 0;
	return m;
}

void pc_msg_free(pc_msg_t *m)
{
	if (!m || (m->flags & PC_MSGF_EMBEDDED))
		return;
	unsigned cls = m->size_class;
	pc__msg_cache_t *c = tls_cache;
	if (c && cls < PC_MSG_CLASSES)
		cache_push(c, cls, m);
	else
		free(m);
}

pc_msg_t *pc__msg_clone(const pc_msg_t *src)
{
	pc_msg_t *m = pc_msg_new(src->type, src->size);
	if (m) {
		memcpy(pc_msg_data(m), pc_msg_cdata(src), src->size);
		m->corr = src->corr;
	}
	return m;
}

void pc__msg_cache_attach(pc__msg_cache_t *cache)
{
	memset(cache, 0, sizeof(*cache));
	tls_cache = cache;
}

void pc__msg_cache_detach(void)
{
	pc__msg_cache_t *c = tls_cache;
	if (!c)
		return;
	tls_cache = NULL;
	for (unsigned cls = 0; cls < PC_MSG_CLASSES; cls++) {
		pc__mag_t *mags[2] = {&c->cls[cls].loaded, &c->cls[cls].spare};
		for (int i = 0; i < 2; i++) {
			if (mags[i]->n == PC_MSG_MAG_SIZE)
				depot_give(cls, mags[i]->top);
			else
				free_chain(mags[i]->top);
			mags[i]->top = NULL;
			mags[i]->n = 0;
		}
	}
}

uint32_t pc__msg_depot_mags(unsigned cls)
{
	return cls < PC_MSG_CLASSES ? pc_atomic_load_u32(&depot[cls].n) : 0;
}

void pc__msg_depot_trim(uint32_t keep)
{
	for (unsigned cls = 0; cls < PC_MSG_CLASSES; cls++) {
		depot_class_t *d = &depot[cls];
		pthread_mutex_lock(&d->lock);
		while (d->n > keep) {
			free_chain(d->mags[d->n - 1]);
			pc_atomic_store_u32(&d->n, d->n - 1);
		}
		pthread_mutex_unlock(&d->lock);
	}
}
