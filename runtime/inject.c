/*
 * The global injection queue: runnable actors from threads outside the
 * pool (timer thread, blocking pool, the embedding program) and overflow
 * from full run queues. A mutex-guarded growable ring; workers look at the
 * lock-free length first, so an empty queue costs one load.
 */
#include "runtime_internal.h"

#include <stdlib.h>
#include <string.h>

#include "../mailbox/atomics.h"

static bool grow(pc_runtime_t *rt, uint32_t need)
{
	uint32_t cap = rt->inject_cap ? rt->inject_cap : 256;
	while (cap < need)
		cap *= 2;
	if (cap == rt->inject_cap)
		return true;
	pc_actor_t **buf = malloc(sizeof(*buf) * cap);
	if (!buf)
		return false;
	uint32_t len = rt->inject_len;
	for (uint32_t i = 0; i < len; i++)
		buf[i] = rt->inject_buf[(rt->inject_head + i) % rt->inject_cap];
	free(rt->inject_buf);
	rt->inject_buf = buf;
	rt->inject_cap = cap;
	rt->inject_head = 0;
	return true;
}

void pc__inject_push(pc_runtime_t *rt, pc_actor_t *const *actors, uint32_t n)
{
	pthread_mutex_lock(&rt->inject_lock);
	uint32_t len = rt->inject_len;
	/* A runnable actor must never be dropped: without memory to queue it
	 * there is no way to keep the "scheduled exactly once" promise, so this
	 * is the one allocation failure the runtime treats as fatal. */
	if (len + n > rt->inject_cap && !grow(rt, len + n))
		abort();
	for (uint32_t i = 0; i < n; i++)
		rt->inject_buf[(rt->inject_head + len + i) % rt->inject_cap] = actors[i];
	pc_atomic_store_u32(&rt->inject_len, len + n);
	pthread_mutex_unlock(&rt->inject_lock);
	pc__notify(rt);
}

pc_actor_t *pc__inject_pop(pc_runtime_t *rt)
{
	if (pc_atomic_load_u32(&rt->inject_len) == 0)
		return NULL;
	pc_actor_t *a = NULL;
	pthread_mutex_lock(&rt->inject_lock);
	uint32_t len = rt->inject_len;
	if (len > 0) {
		a = rt->inject_buf[rt->inject_head];
		rt->inject_head = (rt->inject_head + 1) % rt->inject_cap;
		pc_atomic_store_u32(&rt->inject_len, len - 1);
	}
	pthread_mutex_unlock(&rt->inject_lock);
	return a;
}
