/* Runtime lifecycle, configuration, ids and counters. */
#include "runtime_internal.h"

#include <limits.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../mailbox/atomics.h"
#include "clock.h"
#include "sync.h"
#include "version.h"

const char *pc_version(void)
{
	return PC_VERSION_STRING;
}

uint64_t pc__deadline_ns(int64_t timeout_ms)
{
	uint64_t now = pc__clock_mono_ns();
	if (timeout_ms < 0 || (uint64_t)timeout_ms >= (UINT64_MAX - now) / 1000000u)
		return UINT64_MAX;
	return now + (uint64_t)timeout_ms * 1000000u;
}

uint64_t pc_runtime_now_ms(void)
{
	return pc__clock_mono_ns() / 1000000u;
}

void pc_runtime_config_init(pc_runtime_config_t *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
}

static void resolve(pc_runtime_config_t *c)
{
	if (c->workers == 0) {
		long n = sysconf(_SC_NPROCESSORS_ONLN);
		c->workers = n > 0 ? (uint32_t)n : 1;
	}
	if (c->workers > 1024)
		c->workers = 1024;
	if (c->blocking_threads == 0)
		c->blocking_threads = 4;
	if (c->blocking_queue == 0)
		c->blocking_queue = 65536;
	if (c->batch == 0)
		c->batch = 64;
	if (c->spin_rounds == 0)
		c->spin_rounds = 4;
	if (c->trim_after_ms == 0)
		c->trim_after_ms = PC_RUNTIME_DEFAULT_TRIM_AFTER_MS;
}

void pc_thread_name(const char *role, uint32_t index)
{
	char name[16]; /* the kernel's limit, with the NUL */
	snprintf(name, sizeof(name), "pc-%s-%u", role, index);
	/* Only ERANGE can fail, and snprintf has already cut the name. */
	(void)pthread_setname_np(pthread_self(), name);
}

uint64_t pc__next_id(pc_runtime_t *rt)
{
	pc__worker_t *w = pc__current_worker();
	if (w && w->rt == rt) {
		if (w->id_next == w->id_limit) {
			w->id_next = pc_atomic_faa_u64(&rt->next_id, PC__ID_BLOCK);
			w->id_limit = w->id_next + PC__ID_BLOCK;
		}
		return w->id_next++;
	}
	return pc_atomic_faa_u64(&rt->next_id, 1);
}

int pc__cond_init_monotonic(pthread_cond_t *c)
{
	pthread_condattr_t a;
	if (pthread_condattr_init(&a) != 0)
		return PC_ESYS;
	int rc = pthread_condattr_setclock(&a, CLOCK_MONOTONIC) == 0 && pthread_cond_init(c, &a) == 0 ? 0 : PC_ESYS;
	pthread_condattr_destroy(&a);
	return rc;
}



int pc_runtime_new(const pc_runtime_config_t *cfg, pc_runtime_t **out)
{
	if (!out)
		return PC_EINVAL;
	*out = NULL;
	pc_runtime_t *rt = calloc(1, sizeof(*rt));
	if (!rt)
		return PC_ENOMEM;
	if (cfg)
		rt->cfg = *cfg;
	resolve(&rt->cfg);
	/* runtime.h says why; mallopt returns 1 on success, and a failure (or
	 * an allocator without the knob) only costs speed */
	if (rt->cfg.malloc_top_pad >= 0) {
		int64_t pad = rt->cfg.malloc_top_pad ? rt->cfg.malloc_top_pad : PC_RUNTIME_DEFAULT_MALLOC_TOP_PAD;
		if (mallopt(M_TOP_PAD, pad > INT_MAX ? INT_MAX : (int)pad) != 1)
			rt->cfg.malloc_top_pad = -1;
	}
	pc__trim_init(rt);
	rt->nworkers = rt->cfg.workers;
	rt->next_id = 1;
	rt->state = PC__RT_NEW;
	int rc = PC_ENOMEM;
	if (posix_memalign((void **)&rt->workers, 64, sizeof(pc__worker_t) * rt->nworkers) != 0) {
		rt->workers = NULL;
		goto fail;
	}
	memset(rt->workers, 0, sizeof(pc__worker_t) * rt->nworkers);
	rt->idle_stack = calloc(rt->nworkers, sizeof(uint32_t));
	if (!rt->idle_stack || pc__actor_pool_new(rt) != 0)
		goto fail;
	for (uint32_t i = 0; i < rt->nworkers; i++) {
		pc__worker_t *w = &rt->workers[i];
		w->rt = rt;
		w->index = i;
		w->rng = 0x9E3779B97F4A7C15ull * (i + 1);
		w->ctx.w = w;
		w->ctx.rt = rt;
	}
	pthread_mutex_init(&rt->inject_lock, NULL);
	pthread_mutex_init(&rt->idle_lock, NULL);
	pthread_mutex_init(&rt->guests_lock, NULL);
	if ((rc = pc__cond_init_monotonic(&rt->quiet_cond)) != 0)
		goto fail;
	if ((rc = pc__timers_init(rt)) != 0)
		goto fail;
	if ((rc = pc__blocking_init(rt)) != 0)
		goto fail;
	*out = rt;
	return 0;
fail:
	pc__actor_pool_free(rt);
	free(rt->idle_stack);
	free(rt->workers);
	free(rt);
	return rc;
}

int pc_runtime_start(pc_runtime_t *rt)
{
	if (!rt)
		return PC_EINVAL;
	if (!pc_atomic_cas_u32(&rt->state, PC__RT_NEW, PC__RT_RUNNING))
		return PC_ESTATE;
	int rc = pc__workers_start(rt);
	if (rc == 0)
		rc = pc__timers_start(rt);
	if (rc != 0)
		pc_runtime_stop(rt);
	return rc;
}

void pc_runtime_stop(pc_runtime_t *rt)
{
	if (!rt)
		return;
	/* One caller does the work; a concurrent one returns at once. */
	uint32_t s;
	do {
		s = pc_atomic_load_u32_acq(&rt->state);
		if (s >= PC__RT_STOPPING)
			return;
	} while (!pc_atomic_cas_u32(&rt->state, s, PC__RT_STOPPING));
	pc__workers_join(rt);
	pc__guests_wait_out(rt);
	pc__timers_stop(rt);
	/* Stop handlers run before the blocking pool is joined: a job waiting
	 * on an actor (pc_ask_sync) is released by its waiter's stop. */
	pc__actors_stop_all(rt);
	pc__blocking_stop(rt);
	pc__actors_drain(rt);
	pc__timers_free(rt);
	pc__actors_free(rt);
	pc_atomic_store_u32_rel(&rt->state, PC__RT_STOPPED);
	pc__quiet_signal(rt);
}

void pc_runtime_free(pc_runtime_t *rt)
{
	if (!rt)
		return;
	pc_runtime_stop(rt);
	pthread_mutex_destroy(&rt->inject_lock);
	pthread_mutex_destroy(&rt->idle_lock);
	pthread_mutex_destroy(&rt->guests_lock);
	pthread_cond_destroy(&rt->quiet_cond);
	pthread_cond_destroy(&rt->timers.cond);
	pthread_mutex_destroy(&rt->timers.lock);
	pc__blocking_free(rt);
	free(rt->inject_buf);
	free(rt->idle_stack);
	free(rt->workers);
	free(rt);
	pc__msg_depot_trim(0);
}

uint32_t pc_runtime_workers(const pc_runtime_t *rt)
{
	return rt->nworkers;
}

uint32_t pc_runtime_stats(pc_runtime_t *rt, pc_runtime_stats_t *out, pc_worker_stats_t *ws, uint32_t n)
{
	/* the external counters and the guests' together: a guest freed
	 * meanwhile is counted in one place or the other, not both or none */
	pthread_mutex_lock(&rt->guests_lock);
	pc_runtime_stats_t s = {
		.sent_external = pc_atomic_load_u64(&rt->ext_sent),
		.spawned = pc_atomic_load_u64(&rt->ext_spawned),
		.exited = pc_atomic_load_u64(&rt->ext_exited),
		.dead_letters = pc_atomic_load_u64(&rt->ext_dead),
		.timers_fired = pc_atomic_load_u64(&rt->timers_fired),
		.blocking_done = pc_atomic_load_u64(&rt->blocking_done),
		.blocking_trims = pc_atomic_load_u64(&rt->blocking_trims),
	};
	pc__worker_counters_t guests = {0};
	pc__guests_count(rt, &guests);
	uint64_t reclaimed = guests.reclaimed + pc_atomic_load_u64(&rt->ext_reclaimed);
	s.mutes = guests.mutes + pc_atomic_load_u64(&rt->ext_mutes);
	s.guest_turns = guests.turns + pc_atomic_load_u64(&rt->ext_guest_turns);
	pthread_mutex_unlock(&rt->guests_lock);
	s.spawned += guests.spawned;
	s.exited += guests.exited;
	s.dead_letters += guests.dead_letters;
	uint64_t now = pc__clock_mono_ns();
	for (uint32_t i = 0; i < rt->nworkers; i++) {
		pc__worker_counters_t *c = &rt->workers[i].c;
		s.spawned += pc_atomic_load_u64(&c->spawned);
		s.exited += pc_atomic_load_u64(&c->exited);
		reclaimed += pc_atomic_load_u64(&c->reclaimed);
		s.dead_letters += pc_atomic_load_u64(&c->dead_letters);
		s.mutes += pc_atomic_load_u64(&c->mutes);
		if (ws && i < n) {
			pc_worker_stats_t *o = &ws[i];
			o->handled = pc_atomic_load_u64(&c->handled);
			o->sent = pc_atomic_load_u64(&c->sent);
			o->turns = pc_atomic_load_u64(&c->turns);
			o->steals = pc_atomic_load_u64(&c->steals);
			o->parks = pc_atomic_load_u64(&c->parks);
			o->wakeups = pc_atomic_load_u64(&c->wakeups);
			o->trims = pc_atomic_load_u64(&c->trims);
			/* parked_ns and parked_since as one consistent pair (see
			 * pc__park): otherwise a sleep that just ended could be
			 * missed, or counted twice, and parked_ns would not be
			 * monotonic across snapshots. */
			const uint32_t *seq = &rt->workers[i].park_seq;
			uint64_t since;
			for (;;) {
				uint32_t s1 = pc_atomic_load_u32_acq(seq);
				o->parked_ns = pc_atomic_load_u64(&c->parked_ns);
				since = pc_atomic_load_u64(&rt->workers[i].parked_since);
				pc_atomic_fence();
				if (!(s1 & 1) && pc_atomic_load_u32(seq) == s1)
					break;
				pc_cpu_relax();
			}
			if (since && now > since)
				o->parked_ns += now - since;
			uint64_t started = pc_atomic_load_u64(&rt->workers[i].started_ns);
			double up = started && now > started ? (double)(now - started) : 0.0;
			o->utilisation = up > 0 ? 1.0 - (double)o->parked_ns / up : 0.0;
			if (o->utilisation < 0)
				o->utilisation = 0;
		}
	}
	s.actors_live = s.spawned - reclaimed;
	if (out)
		*out = s;
	return rt->nworkers;
}
