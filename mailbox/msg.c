/*
 * Message allocation. Four size classes (48, 64, 128 and 256 bytes in all);
 * each worker keeps two magazines of up to PC_MSG_MAG_SIZE free messages per
 * class and trades whole magazines with a shared depot under a mutex, so the
 * lock is taken at most once per PC_MSG_MAG_SIZE operations. A message freed
 * on another worker than the one that allocated it simply joins that
 * worker's cache: all blocks of a class are interchangeable.
 */
#include "msg_internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define DEPOT_MAX_MAGS 64

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
	pthread_mutex_lock(&d->lock);
	if (d->n > 0)
		mag = d->mags[--d->n];
	pthread_mutex_unlock(&d->lock);
	return mag;
}

static void depot_give(unsigned cls, pc_msg_t *mag)
{
	depot_class_t *d = &depot[cls];
	pthread_mutex_lock(&d->lock);
	if (d->n < DEPOT_MAX_MAGS) {
		d->mags[d->n++] = mag;
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
	pc__msg_mag_t *l = &c->loaded[cls];
	if (l->n == 0) {
		pc__msg_mag_t *s = &c->spare[cls];
		if (s->n > 0) {
			pc__msg_mag_t t = *l;
			*l = *s;
			*s = t;
		} else {
			pc_msg_t *mag = depot_take(cls);
			if (!mag)
				return NULL;
			l->top = mag;
			l->n = PC_MSG_MAG_SIZE;
		}
	}
	pc_msg_t *m = l->top;
	l->top = m->next;
	l->n--;
	return m;
}

static void cache_push(pc__msg_cache_t *c, unsigned cls, pc_msg_t *m)
{
	pc__msg_mag_t *l = &c->loaded[cls];
	if (l->n == PC_MSG_MAG_SIZE) {
		pc__msg_mag_t *s = &c->spare[cls];
		if (s->n == PC_MSG_MAG_SIZE)
			depot_give(cls, s->top);
		*s = *l;
		l->top = NULL;
		l->n = 0;
	}
	m->next = l->top;
	l->top = m;
	l->n++;
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
		pc__msg_mag_t *mags[2] = {&c->loaded[cls], &c->spare[cls]};
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

void pc__msg_depot_trim(void)
{
	for (unsigned cls = 0; cls < PC_MSG_CLASSES; cls++) {
		depot_class_t *d = &depot[cls];
		pthread_mutex_lock(&d->lock);
		while (d->n > 0)
			free_chain(d->mags[--d->n]);
		pthread_mutex_unlock(&d->lock);
	}
}
