/*
 * Parking and waking workers, and quiescence.
 *
 * The protocol is Go's and Tokio's "searching" scheme (docs/architecture.md,
 * "Parking", has the numbered argument):
 * - A worker with no local work may become a searcher (steals, polls the
 *   injection queue) only while searchers are fewer than half the busy
 *   workers, so a burst of idleness does not turn into a stampede.
 * - Whoever makes work stealable calls pc__notify: after a full fence it
 *   wakes one parked worker, as a searcher, but only if nobody is searching
 *   and somebody is parked. A futex wake costs ~45 us here, so wakes are
 *   rationed; a searcher that finds work and was the last one wakes another.
 * - A worker parks by registering in the idle stack, then, after a full
 *   fence, looking at every queue once more; it sleeps on its own futex
 *   word only if all were empty. The fence pair (publish work; fence; read
 *   counters) vs (publish idleness; fence; read queues) means at least one
 *   side sees the other: no lost wake-up.
 */
#include "runtime_internal.h"

#include <linux/futex.h>
#include <stdbool.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "../mailbox/atomics.h"
#include "clock.h"

static void futex_wait(uint32_t *word)
{
	/* EAGAIN (word already changed) and EINTR both mean "look again". */
	syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, 0, NULL, NULL, 0);
}

/* Returns when woken, or once `ms` passed, or spuriously: look again. */
static void futex_wait_ms(uint32_t *word, int64_t ms)
{
	struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
	syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, 0, &ts, NULL, 0);
}

/* Takes w off the idle stack, as a waker would, but not yet as a
 * searcher: false when a waker took it first. */
static bool unpark_self(pc__worker_t *w)
{
	pc_runtime_t *rt = w->rt;
	bool took = false;
	pthread_mutex_lock(&rt->idle_lock);
	for (uint32_t i = 0; i < rt->nidle_stack && !took; i++) {
		if (rt->idle_stack[i] == w->index) {
			rt->idle_stack[i] = rt->idle_stack[--rt->nidle_stack];
			pc_atomic_faa_u32(&rt->num_idle, (uint32_t)-1);
			took = true;
		}
	}
	pthread_mutex_unlock(&rt->idle_lock);
	return took;
}

/* A due trim waits for a gap of this long before the next timer, looking
 * again every TRIM_STEP_NS, for at most another trim_after_ms: a tick
 * more frequent than the gap must not stop it for good. */
#define TRIM_CLEAR_NS (10u * 1000000u)
#define TRIM_STEP_NS (2u * 1000000u)

/* True when a due trim should wait for the timers (and the clock is set to
 * look again). */
static bool trim_put_off(pc__worker_t *w, uint64_t now)
{
	pc__trim_clock_t *c = &w->trim;
	if (pc__timers_quiet_for(w->rt, now, TRIM_CLEAR_NS))
		return false;
	if (!c->late_ns)
		c->late_ns = now + (uint64_t)w->rt->cfg.trim_after_ms * 1000000u;
	if (now >= c->late_ns)
		return false;
	c->due_ns = now + TRIM_STEP_NS;
	return true;
}

/* Sleeps until woken; a worker that worked since its last trim wakes when
 * its trim falls due (trim.h) and trims if still idle. A trim takes
 * milliseconds and makes the next allocations of every thread fault
 * their pages back in: timer deliveries made meanwhile were late by as
 * much (the tail of their lateness). So a trim waits for a gap in the
 * timers (trim_put_off), and the worker trims off the idle stack and not counted as
 * searching, as if busy, so that work made meanwhile wakes another
 * worker; it then looks for work as a woken worker does. */
static void sleep_until_woken(pc__worker_t *w)
{
	while (pc_atomic_load_u32_acq(&w->park_word) == 0) {
		int64_t wait_ms;
		uint64_t now = pc__clock_mono_ns();
		bool due = pc__trim_due(&w->trim, w->rt->cfg.trim_after_ms, now, &wait_ms);
		if (due && trim_put_off(w, now))
			continue;
		if (due) {
			if (!unpark_self(w)) {
				futex_wait(&w->park_word); /* a waker has it: its wake is on the way */
				continue;
			}
			pc_runtime_trim_heap(w->rt);
			pc__trim_done(&w->trim);
			pc_atomic_store_u64(&w->c.trims, w->c.trims + 1);
			pc_atomic_faa_u32(&w->rt->num_searching, 1);
			pc_atomic_store_u32_rel(&w->park_word, 1);
		} else if (wait_ms < 0) {
			futex_wait(&w->park_word);
		} else {
			futex_wait_ms(&w->park_word, wait_ms);
		}
	}
}

static void futex_wake(uint32_t *word)
{
	syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

bool pc__work_available(pc_runtime_t *rt)
{
	if (pc_atomic_load_u32(&rt->inject_len) > 0)
		return true;
	for (uint32_t i = 0; i < rt->nworkers; i++)
		if (pc__runq_len(&rt->workers[i].runq) > 0)
			return true;
	return false;
}

static void wake_worker(pc__worker_t *w)
{
	pc_atomic_store_u32_rel(&w->park_word, 1);
	futex_wake(&w->park_word);
}

void pc__notify(pc_runtime_t *rt)
{
	pc_atomic_fence();
	if (pc_atomic_load_u32(&rt->num_searching) != 0 || pc_atomic_load_u32(&rt->num_idle) == 0)
		return;
	pc__worker_t *w = NULL;
	pthread_mutex_lock(&rt->idle_lock);
	if (rt->nidle_stack > 0 && pc_atomic_load_u32(&rt->num_searching) == 0) {
		w = &rt->workers[rt->idle_stack[--rt->nidle_stack]];
		pc_atomic_faa_u32(&rt->num_idle, (uint32_t)-1);
		pc_atomic_faa_u32(&rt->num_searching, 1);
	}
	pthread_mutex_unlock(&rt->idle_lock);
	if (w)
		wake_worker(w);
}

void pc__wake_all(pc_runtime_t *rt)
{
	pthread_mutex_lock(&rt->idle_lock);
	while (rt->nidle_stack > 0) {
		pc__worker_t *w = &rt->workers[rt->idle_stack[--rt->nidle_stack]];
		pc_atomic_faa_u32(&rt->num_idle, (uint32_t)-1);
		pc_atomic_faa_u32(&rt->num_searching, 1);
		wake_worker(w);
	}
	pthread_mutex_unlock(&rt->idle_lock);
}

static bool stopping(pc_runtime_t *rt)
{
	return pc_atomic_load_u32_acq(&rt->state) >= PC__RT_STOPPING;
}

/* Called with idle_lock held: true when nothing can run any more. The
 * counters that other threads decrement *after* scheduling their work
 * (timers, blocking jobs) are read before num_idle, so reading them at zero
 * implies the wake they caused is already visible in num_idle. They are read
 * with acquire, pairing with the release that drops them to zero: what the
 * job (or timer) did before it finished, its counters included, is visible
 * to whoever sees the runtime quiet. The pool thread takes idle_lock only
 * when a waiter is already there, so the lock alone does not order it. */
static bool quiet_locked(pc_runtime_t *rt)
{
	if (pc_atomic_load_u64_acq(&rt->timers.pending) != 0)
		return false;
	if (pc_atomic_load_u64_acq(&rt->blocking.pending) != 0)
		return false;
	if (pc_atomic_load_u32_acq(&rt->held) != 0)
		return false;
	pc_atomic_fence();
	if (pc_atomic_load_u32(&rt->num_idle) != rt->nworkers)
		return false;
	return !pc__work_available(rt);
}

void pc__quiet_signal(pc_runtime_t *rt)
{
	if (pc_atomic_load_u32(&rt->quiet_waiters) == 0)
		return;
	pthread_mutex_lock(&rt->idle_lock);
	pthread_cond_broadcast(&rt->quiet_cond);
	pthread_mutex_unlock(&rt->idle_lock);
}

void pc__park(pc__worker_t *w)
{
	pc_runtime_t *rt = w->rt;
	if (w->searching) {
		w->searching = false;
		bool last = pc_atomic_faa_u32(&rt->num_searching, (uint32_t)-1) == 1;
		/* The last searcher may be the one a notifier counted on. */
		if (last) {
			pc_atomic_fence();
			if (pc__work_available(rt))
				return;
		}
	}
	pthread_mutex_lock(&rt->idle_lock);
	rt->idle_stack[rt->nidle_stack++] = w->index;
	uint32_t idle = pc_atomic_faa_u32(&rt->num_idle, 1) + 1;
	if (idle == rt->nworkers && pc_atomic_load_u32(&rt->quiet_waiters) > 0)
		pthread_cond_broadcast(&rt->quiet_cond);
	pthread_mutex_unlock(&rt->idle_lock);

	pc_atomic_fence();
	if (pc__work_available(rt) || stopping(rt)) {
		bool removed = false;
		pthread_mutex_lock(&rt->idle_lock);
		for (uint32_t i = 0; i < rt->nidle_stack; i++) {
			if (rt->idle_stack[i] == w->index) {
				rt->idle_stack[i] = rt->idle_stack[--rt->nidle_stack];
				pc_atomic_faa_u32(&rt->num_idle, (uint32_t)-1);
				removed = true;
				break;
			}
		}
		pthread_mutex_unlock(&rt->idle_lock);
		if (removed)
			return;
		/* A waker took us off the stack first and counted us as a
		 * searcher; consume its wake below. */
	}

	/* The park is counted when the worker goes to sleep, not when it
	 * wakes: a worker asleep since its last turn has parked. parked_since
	 * and parked_ns change together under park_seq (a seqlock, read by
	 * pc_runtime_stats), so a reader counts a sleep exactly once: through
	 * parked_since while it lasts, in parked_ns once it is over. */
	uint64_t t0 = pc__clock_mono_ns();
	pc_atomic_faa_u32(&w->park_seq, 1);
	pc_atomic_store_u64(&w->parked_since, t0);
	pc_atomic_store_u64(&w->c.parks, w->c.parks + 1);
	pc_atomic_faa_u32(&w->park_seq, 1);
	sleep_until_woken(w);
	pc_atomic_store_u32(&w->park_word, 0);
	w->searching = true;
	uint64_t t1 = pc__clock_mono_ns();
	pc_atomic_faa_u32(&w->park_seq, 1);
	pc_atomic_store_u64(&w->c.parked_ns, w->c.parked_ns + (t1 - t0));
	pc_atomic_store_u64(&w->parked_since, 0);
	pc_atomic_faa_u32(&w->park_seq, 1);
	pc_atomic_store_u64(&w->c.wakeups, w->c.wakeups + 1);
}

int pc_runtime_wait_quiescent(pc_runtime_t *rt, int64_t timeout_ms)
{
	if (!rt)
		return PC_EINVAL;
	if (pc__current_worker())
		return PC_ESTATE;
	uint64_t deadline = pc__deadline_ns(timeout_ms);
	int rc = 0;
	pc_atomic_faa_u32(&rt->quiet_waiters, 1);
	pthread_mutex_lock(&rt->idle_lock);
	while (!quiet_locked(rt)) {
		if (pc_atomic_load_u32(&rt->state) != PC__RT_RUNNING) {
			rc = PC_ESTATE;
			break;
		}
		uint64_t now = pc__clock_mono_ns();
		if (now >= deadline) {
			rc = PC_ETIMEDOUT;
			break;
		}
		/* Every transition to quiet signals; the bounded wait only guards
		 * against a waiter arriving between a check and a signal that
		 * does not take this lock. */
		uint64_t until = now + 20000000u < deadline ? now + 20000000u : deadline;
		struct timespec ts = pc__timespec_ns(until);
		pthread_cond_timedwait(&rt->quiet_cond, &rt->idle_lock, &ts);
	}
	pthread_mutex_unlock(&rt->idle_lock);
	pc_atomic_faa_u32(&rt->quiet_waiters, (uint32_t)-1);
	return rc;
}
