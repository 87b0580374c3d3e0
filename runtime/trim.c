/* Giving free heap memory back, and when (trim.h). */
#include "trim.h"

#include <dlfcn.h>
#include <malloc.h>
#include <string.h>

#include "runtime_internal.h"

bool pc__trim_due(pc__trim_clock_t *c, int64_t after_ms, uint64_t now_ns, int64_t *wait_ms)
{
	*wait_ms = -1;
	if (!c->worked || after_ms < 0)
		return false;
	if (c->due_ns == 0)
		c->due_ns = now_ns + (uint64_t)after_ms * 1000000u;
	if (now_ns >= c->due_ns)
		return true;
	*wait_ms = (int64_t)((c->due_ns - now_ns + 999999u) / 1000000u); /* never early */
	return false;
}

void pc__trim_done(pc__trim_clock_t *c)
{
	c->worked = false;
	c->due_ns = 0;
}

void pc__trim_init(pc_runtime_t *rt)
{
	void *f = dlsym(RTLD_DEFAULT, "mi_collect");
	memcpy(&rt->mi_collect, &f, sizeof(f)); /* a data pointer to a function pointer */
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
	/* First the free messages a burst left in the depot (up to ~30 MB),
	 * so that this collect, and the other threads' as they go idle, find
	 * their pages empty. */
	pc__msg_depot_trim(PC__MSG_DEPOT_IDLE_KEEP);
	if (rt->mi_collect) {
		rt->mi_collect(true);
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
