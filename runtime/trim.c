/* Giving free heap memory back, and when (trim.h). */
#include "trim.h"

#include <dlfcn.h>
#include <malloc.h>
#include <pthread.h>
#include <string.h>

#include "../actors/actor_internal.h"
#include "runtime_internal.h"

bool pc__trim_due(pc__trim_clock_t *c, int64_t after_ms, uint64_t now_ns, int64_t *wait_ms)
{
	*wait_ms = -1;
	if (!c->work || after_ms < 0)
		return false;
	if (!c->idle) {
		c->idle = true;
		c->idle_ns = now_ns;
	}
	uint64_t factor = c->work >= PC__TRIM_BURST ? 1 : PC__TRIM_LIGHT_FACTOR;
	uint64_t cap = UINT64_MAX / 1000000u / PC__TRIM_LIGHT_FACTOR; /* no overflow below */
	uint64_t due = c->idle_ns + ((uint64_t)after_ms < cap ? (uint64_t)after_ms : cap) * 1000000u * factor;
	if (c->due_ns > due)
		due = c->due_ns; /* put off (park.c) */
	if (now_ns >= due)
		return true;
	*wait_ms = (int64_t)((due - now_ns + 999999u) / 1000000u); /* never early */
	return false;
}

void pc__trim_done(pc__trim_clock_t *c)
{
	*c = (pc__trim_clock_t){0};
}

/* mimalloc 2's option "decommit_delay" (2.1 calls it "purge_delay"). */
#define MI_OPTION_DECOMMIT_DELAY 15

static void *lookup(const char *name)
{
	return dlsym(RTLD_DEFAULT, name);
}

void pc__trim_init(pc_runtime_t *rt)
{
	pc__mimalloc_t *mi = &rt->mi;
	memset(mi, 0, sizeof(*mi));
	void *collect = lookup("mi_collect"), *set = lookup("mi_option_set"), *get = lookup("mi_option_get");
	void *version = lookup("mi_version");
	if (!collect)
		return;
	memcpy(&mi->collect, &collect, sizeof(collect)); /* a data pointer to a function pointer */
	int (*version_fn)(void) = NULL;
	long (*get_fn)(int) = NULL;
	memcpy(&version_fn, &version, sizeof(version));
	memcpy(&get_fn, &get, sizeof(get));
	if (!set || !get_fn || !version_fn || version_fn() < 200 || version_fn() >= 300)
		return;
	memcpy(&mi->option_set, &set, sizeof(set));
	mi->decommit_delay = get_fn(MI_OPTION_DECOMMIT_DELAY);
}

/* mimalloc 2 gives back a free span of a segment that still holds live
 * blocks only when it next takes a page from that segment, decommit_delay
 * after the span was freed: a thread that goes idle after a burst keeps
 * those spans resident for as long as it stays idle. With the delay at 0
 * while the trim's collect frees the pages the burst emptied, each span
 * it frees, joined with its free neighbours, is decommitted at once. The
 * option is the process's: lowered by the first of concurrent trims and
 * restored by the last. */
static pthread_mutex_t delay_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned trims_running;

static void mi_trim(const pc__mimalloc_t *mi)
{
	bool lower = mi->option_set && mi->decommit_delay > 0;
	if (lower) {
		pthread_mutex_lock(&delay_lock);
		if (trims_running++ == 0)
			mi->option_set(MI_OPTION_DECOMMIT_DELAY, 0);
		pthread_mutex_unlock(&delay_lock);
	}
	mi->collect(true);
	if (lower) {
		pthread_mutex_lock(&delay_lock);
		if (--trims_running == 0)
			mi->option_set(MI_OPTION_DECOMMIT_DELAY, mi->decommit_delay);
		pthread_mutex_unlock(&delay_lock);
	}
}

/* Under a sanitizer, malloc is the sanitizer's: glibc's arenas hold
 * nothing to trim, and poking them from threads that never used them
 * upsets glibc's arena accounting at thread exit. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define PC_SANITIZED_MALLOC 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define PC_SANITIZED_MALLOC 1
#endif
#endif

/* runtime.h: free heap memory back to the system, through whichever
 * allocator the process has. */
void pc_runtime_trim_heap(const pc_runtime_t *rt)
{
	/* First the free messages a burst left in the depot (up to ~30 MB)
	 * and the actor slots' chunks it emptied, so that this collect, and
	 * the other threads' as they go idle, find their pages empty. */
	pc__msg_depot_trim(PC__MSG_DEPOT_IDLE_KEEP);
	pc__worker_t *w = pc__current_worker();
	pc__actor_pool_shrink(rt, w && w->rt == rt ? w : NULL);
	if (rt->mi.collect) {
		mi_trim(&rt->mi);
		return;
	}
#ifndef PC_SANITIZED_MALLOC
	malloc_trim(0);
#endif
}

int64_t pc_runtime_trim_after_ms(const pc_runtime_t *rt)
{
	return rt->cfg.trim_after_ms;
}
