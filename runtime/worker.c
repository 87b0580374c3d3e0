/*
 * Worker threads: find a runnable actor, run one turn of it, repeat; park
 * when there is nothing to do.
 *
 * Where a runnable actor goes (pc__schedule):
 * - made runnable by an actor on this worker: the LIFO slot, so the
 *   receiver runs next, on this core, while the message is still in cache;
 *   the actor it displaces moves to the run queue, where others may steal;
 * - made runnable by any other thread: the injection queue.
 * Where a worker looks (next_local): every PC__INJECT_EVERY ticks the
 * injection queue first (so outside work is not starved), then the LIFO
 * slot (at most PC__LIFO_MAX_RUNS times in a row while the run queue holds
 * others), the run queue, the injection queue; then it searches (steals
 * half of a random victim's queue) and finally parks.
 */
#include "runtime_internal.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "../actors/actor_internal.h"
#include "../mailbox/atomics.h"
#include "clock.h"

static __thread pc__worker_t *tls_worker __attribute__((tls_model("initial-exec")));

pc__worker_t *pc__current_worker(void)
{
	return tls_worker;
}

bool pc_runtime_on_worker(void)
{
	return tls_worker != NULL;
}

static void count(uint64_t *c)
{
	pc_atomic_store_u64(c, *c + 1);
}

/* What this thread holds (pc_runtime_hold_begin): runnable actors of one
 * runtime, handed over when the hold ends or the buffer is full. */
#define HOLD_MAX 64
static __thread struct hold {
	bool on;
	uint32_t n;
	pc_runtime_t *rt;
	pc_actor_t *a[HOLD_MAX];
} tls_hold;

static void hold_flush(struct hold *h)
{
	if (!h->n)
		return;
	pc__inject_push(h->rt, h->a, h->n);
	h->n = 0;
	/* after the push: a quiet check that sees 0 sees the actors queued */
	pc_atomic_faa_u32(&h->rt->held, (uint32_t)-1);
}

void pc__schedule_external(pc_runtime_t *rt, pc_actor_t *a)
{
	struct hold *h = &tls_hold;
	if (!h->on) {
		pc__inject_push(rt, &a, 1);
		return;
	}
	if (h->n && (h->rt != rt || h->n == HOLD_MAX))
		hold_flush(h);
	if (!h->n) {
		h->rt = rt;
		pc_atomic_faa_u32(&rt->held, 1);
	}
	h->a[h->n++] = a;
}

void pc_runtime_hold_begin(void)
{
	tls_hold.on = tls_worker == NULL;
}

/* This thread's guest (pc_runtime_guest_new), and whether it is running
 * actors now. */
static __thread pc_runtime_guest_t *tls_guest;
static __thread bool tls_guest_running;

bool pc__guest_running(void)
{
	return tls_guest_running;
}

static void hold_end_guest(pc_runtime_guest_t *g);

void pc_runtime_hold_end(void)
{
	if (tls_guest) {
		hold_end_guest(tls_guest);
		return;
	}
	hold_flush(&tls_hold);
	tls_hold.on = false;
}

/* ---- guests ---- */

struct pc_runtime_guest {
	pc__worker_t w; /* not in rt->workers: nobody steals from it, and
			 * its queues are empty whenever it is not running */
	uint64_t budget_ns;
	struct pc_runtime_guest *next;
};

int pc_runtime_guest_new(pc_runtime_t *rt, uint64_t budget_ns, pc_runtime_guest_t **out)
{
	*out = NULL;
	if (!rt)
		return PC_EINVAL;
	if (tls_worker || tls_guest)
		return PC_ESTATE;
	pc_runtime_guest_t *g = aligned_alloc(64, (sizeof(*g) + 63) / 64 * 64);
	if (!g)
		return PC_ENOMEM;
	memset(g, 0, sizeof(*g));
	g->w.rt = rt;
	g->w.index = UINT32_MAX;
	g->w.rng = (uint64_t)(uintptr_t)g | 1;
	g->w.ctx.w = &g->w;
	g->w.ctx.rt = rt;
	g->budget_ns = budget_ns;
	pthread_mutex_lock(&rt->guests_lock);
	g->next = rt->guests;
	rt->guests = g;
	pthread_mutex_unlock(&rt->guests_lock);
	tls_guest = g;
	*out = g;
	return 0;
}

static void add_counters(pc__worker_counters_t *into, const pc__worker_counters_t *c)
{
	into->turns += pc_atomic_load_u64(&c->turns);
	into->spawned += pc_atomic_load_u64(&c->spawned);
	into->exited += pc_atomic_load_u64(&c->exited);
	into->reclaimed += pc_atomic_load_u64(&c->reclaimed);
	into->dead_letters += pc_atomic_load_u64(&c->dead_letters);
	into->mutes += pc_atomic_load_u64(&c->mutes);
}

void pc__guests_count(pc_runtime_t *rt, pc__worker_counters_t *into)
{
	for (const pc_runtime_guest_t *g = rt->guests; g; g = g->next)
		add_counters(into, &g->w.c);
}

void pc_runtime_guest_free(pc_runtime_guest_t *g)
{
	if (!g)
		return;
	if (tls_guest == g)
		tls_guest = NULL;
	pc_runtime_t *rt = g->w.rt;
	pc__actor_pool_shrink(rt, &g->w); /* its cached actor slots go back */
	pthread_mutex_lock(&rt->guests_lock);
	for (pc_runtime_guest_t **p = &rt->guests; *p; p = &(*p)->next)
		if (*p == g) {
			*p = g->next;
			break;
		}
	/* under the lock: a stats reader sees the counts here or there */
	pc_atomic_faa_u64(&rt->ext_spawned, g->w.c.spawned);
	pc_atomic_faa_u64(&rt->ext_exited, g->w.c.exited);
	pc_atomic_faa_u64(&rt->ext_reclaimed, g->w.c.reclaimed);
	pc_atomic_faa_u64(&rt->ext_dead, g->w.c.dead_letters);
	pc_atomic_faa_u64(&rt->ext_mutes, g->w.c.mutes);
	pc_atomic_faa_u64(&rt->ext_guest_turns, g->w.c.turns);
	pthread_mutex_unlock(&rt->guests_lock);
	free(g);
}

static bool stopping(const pc_runtime_t *rt)
{
	return pc_atomic_load_u32_acq(&rt->state) >= PC__RT_STOPPING;
}

/* Every worker parked: a burst handed over now would wake one. */
static bool all_parked(pc_runtime_t *rt)
{
	return pc_atomic_load_u32(&rt->num_idle) == rt->nworkers;
}

void pc__guests_wait_out(pc_runtime_t *rt)
{
	/* pairs with the fence in hold_end_guest: the stop's state
	 * store and this read against the guest's count and its read of the
	 * state, so one of the two sees the other */
	pc_atomic_fence();
	while (pc_atomic_load_u32_acq(&rt->guests_running) != 0)
		sched_yield();
}

/* Hands the guest's runnable actors to the workers (one wake at most). */
static void guest_hand_over(pc__worker_t *w)
{
	pc_actor_t *left[64];
	uint32_t n = 0;
	if (w->lifo) {
		left[n++] = w->lifo;
		w->lifo = NULL;
	}
	pc_actor_t *a;
	while ((a = pc__runq_pop(w))) {
		left[n++] = a;
		if (n == 64) {
			pc__inject_push(w->rt, left, n);
			n = 0;
		}
	}
	if (n)
		pc__inject_push(w->rt, left, n);
}

/* Runs `n` runnable actors, and those their turns make runnable here, on
 * this thread as guest `w` until none is left or the budget is spent. */
static void guest_run(pc__worker_t *w, pc_actor_t *const *actors, uint32_t n, uint64_t budget_ns)
{
	tls_worker = w;
	tls_guest_running = true;
	for (uint32_t i = 0; i < n; i++)
		pc__runq_push(w, actors[i]);
	uint64_t until = pc__clock_mono_ns() + budget_ns;
	for (;;) {
		pc_actor_t *a = w->lifo;
		if (a)
			w->lifo = NULL;
		else if (!(a = pc__runq_pop(w)))
			break;
		count(&w->c.turns);
		if (pc__actor_turn(w, a) == PC__TURN_AGAIN)
			pc__runq_push(w, a);
		/* what it made runnable is here, where nobody else looks: no
		 * wake for it; the hand-over below wakes a worker if need be */
		w->notify_owed = false;
		if (pc__clock_mono_ns() >= until || stopping(w->rt))
			break;
	}
	guest_hand_over(w);
	tls_guest_running = false;
	tls_worker = NULL;
}

/* pc_runtime_hold_end on a guest's thread. */
static void hold_end_guest(pc_runtime_guest_t *g)
{
	struct hold *h = &tls_hold;
	h->on = false;
	if (!h->n)
		return;
	pc_runtime_t *rt = h->rt;
	if (g->w.rt != rt || !all_parked(rt)) {
		hold_flush(h);
		return;
	}
	/* Counted before the state is read (with a fence between, as in
	 * pc__guests_wait_out): a stop either sees this run and waits for
	 * it, or this run sees the stop and does not start. Stop handlers
	 * must never overlap a turn. */
	pc_atomic_faa_u32(&rt->guests_running, 1);
	pc_atomic_fence();
	if (stopping(rt)) {
		pc_atomic_faa_u32(&rt->guests_running, (uint32_t)-1);
		hold_flush(h);
		return;
	}
	uint32_t n = h->n;
	h->n = 0;
	guest_run(&g->w, h->a, n, g->budget_ns);
	/* after the hand-over: a quiet check that sees 0 sees them queued */
	pc_atomic_faa_u32(&rt->held, (uint32_t)-1);
	pc_atomic_faa_u32(&rt->guests_running, (uint32_t)-1);
}

void pc__schedule(pc_runtime_t *rt, pc_actor_t *a)
{
	pc__worker_t *w = tls_worker;
	if (!w || w->rt != rt) {
		pc__schedule_external(rt, a);
		return;
	}
	pc_actor_t *prev = w->lifo;
	w->lifo = a;
	if (prev) {
		pc__runq_push(w, prev);
		/* One wake-up check per turn, not per send: a turn that makes
		 * many actors runnable pays for one fence. */
		w->notify_owed = true;
	}
}

static uint64_t xorshift(uint64_t *s)
{
	uint64_t x = *s;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return *s = x;
}

static pc_actor_t *next_local(pc__worker_t *w)
{
	pc_actor_t *a;
	if (++w->tick % PC__INJECT_EVERY == 0 && (a = pc__inject_pop(w->rt)))
		return a;
	if (w->lifo) {
		if (w->lifo_runs < PC__LIFO_MAX_RUNS || pc__runq_len(&w->runq) == 0) {
			a = w->lifo;
			w->lifo = NULL;
			w->lifo_runs++;
			return a;
		}
		/* Others have waited long enough: the hand-off goes to the back. */
		pc__runq_push(w, w->lifo);
		w->lifo = NULL;
		pc__notify(w->rt);
	}
	w->lifo_runs = 0;
	if ((a = pc__runq_pop(w)))
		return a;
	return pc__inject_pop(w->rt);
}

static bool try_become_searcher(pc__worker_t *w)
{
	pc_runtime_t *rt = w->rt;
	if (w->searching)
		return true;
	uint32_t s = pc_atomic_load_u32(&rt->num_searching);
	uint32_t idle = pc_atomic_load_u32(&rt->num_idle);
	if (2 * s >= rt->nworkers - idle)
		return false;
	pc_atomic_faa_u32(&rt->num_searching, 1);
	w->searching = true;
	return true;
}

/* Found work while searching: stop searching, and if we were the last
 * searcher and work is left in the queues, wake another, since notifiers
 * skipped waking because of us. Only then: the actor just taken is often
 * all there is (one message from the I/O thread), and a wake for nothing
 * costs a futex round trip on both sides. The decrement is a full barrier
 * and the notifier fences between its push and its read of the searchers,
 * so one of the two sees the other: no work is left unannounced. */
static void end_search(pc__worker_t *w)
{
	if (!w->searching)
		return;
	w->searching = false;
	if (pc_atomic_faa_u32(&w->rt->num_searching, (uint32_t)-1) == 1) {
		pc_atomic_fence();
		if (pc__work_available(w->rt))
			pc__notify(w->rt);
	}
}

static pc_actor_t *steal_round(pc__worker_t *w)
{
	pc_runtime_t *rt = w->rt;
	uint32_t n = rt->nworkers;
	uint32_t start = (uint32_t)(xorshift(&w->rng) % n);
	for (uint32_t i = 0; i < n; i++) {
		pc__worker_t *v = &rt->workers[(start + i) % n];
		if (v == w)
			continue;
		pc_actor_t *a = pc__runq_steal(w, v);
		if (a) {
			count(&w->c.steals);
			return a;
		}
	}
	return pc__inject_pop(rt);
}

static pc_actor_t *search(pc__worker_t *w)
{
	pc_runtime_t *rt = w->rt;
	for (uint32_t round = 0; round < rt->cfg.spin_rounds; round++) {
		if (pc_atomic_load_u32_acq(&rt->state) >= PC__RT_STOPPING)
			return NULL;
		if (!try_become_searcher(w))
			return NULL;
		pc_actor_t *a = steal_round(w);
		if (a) {
			end_search(w);
			return a;
		}
		for (int i = 0; i < 32; i++)
			pc_cpu_relax();
	}
	return NULL;
}

/* One turn; then decide where the actor goes. Returns the actor to run
 * next without touching any queue, or NULL. */
static pc_actor_t *run(pc__worker_t *w, pc_actor_t *a)
{
	count(&w->c.turns);
	pc__trim_worked(&w->trim);
	int r = pc__actor_turn(w, a);
	bool owed = w->notify_owed;
	w->notify_owed = false;
	if (r != PC__TURN_AGAIN) {
		if (owed)
			pc__notify(w->rt);
		return NULL;
	}
	/* Nothing else is waiting here: keep going without queue traffic.
	 * Unless the runtime is stopping: an actor that always has more work
	 * (one that keeps sending itself messages) would otherwise hold this
	 * worker in worker_main's inner loop for ever, and pc_runtime_stop
	 * would never join it. */
	if (!w->lifo && pc__runq_len(&w->runq) == 0 && pc_atomic_load_u32(&w->rt->inject_len) == 0 &&
	    pc_atomic_load_u32_acq(&w->rt->state) < PC__RT_STOPPING) {
		if (owed)
			pc__notify(w->rt);
		return a;
	}
	pc__runq_push(w, a);
	pc__notify(w->rt);
	return NULL;
}

static void *worker_main(void *arg)
{
	pc__worker_t *w = arg;
	pc_runtime_t *rt = w->rt;
	tls_worker = w;
	pc_thread_name("worker", (uint32_t)(w - rt->workers));
	pc__msg_cache_attach(&w->msg_cache);
	pc_atomic_store_u64(&w->started_ns, pc__clock_mono_ns());
	while (pc_atomic_load_u32_acq(&rt->state) < PC__RT_STOPPING) {
		pc_actor_t *a = next_local(w);
		if (!a)
			a = search(w);
		if (!a) {
			pc__park(w);
			continue;
		}
		end_search(w);
		while (a)
			a = run(w, a);
	}
	if (w->searching) {
		w->searching = false;
		pc_atomic_faa_u32(&rt->num_searching, (uint32_t)-1);
	}
	pc__msg_cache_detach();
	tls_worker = NULL;
	return NULL;
}

int pc__workers_start(pc_runtime_t *rt)
{
	for (uint32_t i = 0; i < rt->nworkers; i++) {
		pc__worker_t *w = &rt->workers[i];
		if (pthread_create(&w->thread, NULL, worker_main, w) != 0)
			return PC_ESYS;
		w->thread_started = true;
	}
	return 0;
}

void pc__workers_join(pc_runtime_t *rt)
{
	pc__wake_all(rt);
	for (uint32_t i = 0; i < rt->nworkers; i++) {
		pc__worker_t *w = &rt->workers[i];
		if (w->thread_started) {
			pthread_join(w->thread, NULL);
			w->thread_started = false;
		}
	}
}
