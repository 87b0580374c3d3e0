/*
 * The blocking pool: a FIFO of jobs under a mutex, served by up to
 * max_threads threads created on demand. A thread with nothing to do
 * waits on its own condition variable, on a stack of idle threads; a job
 * wakes the one on top, the last to have gone idle. So at low load one
 * thread, its caches warm, takes job after job, where a shared condition
 * variable would wake them in turn (each one's trim then falls due, and
 * three threads sleep and wake where one would do).
 */
#include "blocking.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../mailbox/atomics.h"
#include "runtime_internal.h"
#include "clock.h"

struct pc__blocking_job {
	pc__blocking_job_t *next;
	pc_blocking_fn fn;
	pc_blocking_discard_fn discard;
	void *arg;
	pc_actor_t *reply_to;
};

void pc__blocking_free(pc_runtime_t *rt)
{
	pc__blocking_t *b = &rt->blocking;
	if (b->idlers)
		for (uint32_t i = 0; i < b->max_threads; i++)
			pthread_cond_destroy(&b->idlers[i].cond);
	pthread_mutex_destroy(&b->lock);
	free(b->idlers);
	free(b->idle);
	free(b->tids);
	*b = (pc__blocking_t){0};
}

int pc__blocking_init(pc_runtime_t *rt)
{
	pc__blocking_t *b = &rt->blocking;
	b->max_threads = rt->cfg.blocking_threads;
	b->max_queued = rt->cfg.blocking_queue;
	pthread_mutex_init(&b->lock, NULL);
	b->tids = calloc(b->max_threads, sizeof(pthread_t));
	b->idle = calloc(b->max_threads, sizeof(uint32_t));
	pc__blocking_idler_t *idlers = calloc(b->max_threads, sizeof(*idlers));
	int rc = b->tids && b->idle && idlers ? 0 : PC_ENOMEM;
	uint32_t made = 0;
	while (rc == 0 && made < b->max_threads && (rc = pc__cond_init_monotonic(&idlers[made].cond)) == 0)
		made++;
	if (rc != 0) {
		while (made > 0)
			pthread_cond_destroy(&idlers[--made].cond);
		free(idlers);
		pc__blocking_free(rt);
		return rc;
	}
	b->idlers = idlers;
	return 0;
}

static void finish(pc_runtime_t *rt)
{
	pc__blocking_t *b = &rt->blocking;
	/* Counted before `pending` drops: once pending reads zero the runtime
	 * may look quiescent, and its counters must be final by then. */
	pc_atomic_faa_u64(&rt->blocking_done, 1);
	pthread_mutex_lock(&b->lock);
	uint64_t left = b->pending - 1;
	/* Release: pairs with the acquire in pc_runtime_wait_quiescent. */
	pc_atomic_store_u64_rel(&b->pending, left);
	pthread_mutex_unlock(&b->lock);
	if (left == 0)
		pc__quiet_signal(rt);
}

/* Lock held: takes `self` off the idle stack, where a submitter has not
 * already taken it. */
static void unidle(pc__blocking_t *b, uint32_t self)
{
	for (uint32_t i = 0; i < b->nidle; i++)
		if (b->idle[i] == self) {
			memmove(&b->idle[i], &b->idle[i + 1], (b->nidle - i - 1) * sizeof(b->idle[0]));
			b->nidle--;
			return;
		}
}

/* Lock held. Waits for a job or the stop. A thread that ran a job gives
 * its free heap back when its trim falls due (trim.h) and it is still
 * idle: the store's writer and readers allocate on these threads. */
static void wait_for_job(pc_runtime_t *rt, pc__blocking_t *b, uint32_t self, pc__trim_clock_t *trim)
{
	pc__blocking_idler_t *me = &b->idlers[self];
	while (!b->head && !b->stopping) {
		int64_t wait_ms;
		if (pc__trim_due(trim, rt->cfg.trim_after_ms, pc__clock_mono_ns(), &wait_ms)) {
			pc__trim_done(trim);
			pthread_mutex_unlock(&b->lock);
			pc_runtime_trim_heap(rt);
			pc_atomic_faa_u64(&rt->blocking_trims, 1);
			pthread_mutex_lock(&b->lock);
			continue;
		}
		me->called = false;
		b->idle[b->nidle++] = self;
		if (wait_ms < 0) {
			pthread_cond_wait(&me->cond, &b->lock);
		} else {
			struct timespec ts = pc__timespec_ns(pc__clock_mono_ns() + (uint64_t)wait_ms * 1000000u);
			pthread_cond_timedwait(&me->cond, &b->lock, &ts);
		}
		if (me->called)
			b->waking--;
		else
			unidle(b, self); /* its trim's time, the stop, or a spurious wake */
	}
}

/* The runtime whose pool this thread serves, or NULL. */
static __thread pc_runtime_t *tls_pool_of;

static void *pool_main(void *arg)
{
	pc_runtime_t *rt = arg;
	pc__blocking_t *b = &rt->blocking;
	pc__trim_clock_t trim = {0};
	tls_pool_of = rt;
	/* A job's answers (a store commit's) are handed to the workers at
	 * the end of its hold; with every worker parked, this thread runs
	 * them itself (runtime.h, guests). Without memory for a guest, it
	 * hands them over. */
	pc_runtime_guest_t *guest = NULL;
	(void)pc_runtime_guest_new(rt, PC_RUNTIME_GUEST_BUDGET_NS, &guest);
	pthread_mutex_lock(&b->lock);
	uint32_t self = b->named++;
	pc_thread_name("blocking", self);
	for (;;) {
		wait_for_job(rt, b, self, &trim);
		if (b->stopping)
			break;
		pc__blocking_job_t *j = b->head;
		b->head = j->next;
		if (!b->head)
			b->tail = NULL;
		b->queued--;
		pthread_mutex_unlock(&b->lock);
		pc__trim_worked(&trim);
		pc_msg_t *m = j->fn(j->arg);
		if (m) {
			if (j->reply_to)
				pc_send(j->reply_to, m);
			else
				pc_msg_free(m);
		}
		pc_actor_release(j->reply_to);
		free(j);
		finish(rt);
		pthread_mutex_lock(&b->lock);
	}
	pthread_mutex_unlock(&b->lock);
	pc_runtime_guest_free(guest);
	return NULL;
}

int pc_blocking_submit(pc_runtime_t *rt, pc_blocking_fn fn, pc_blocking_discard_fn discard, void *arg,
		       pc_actor_t *reply_to)
{
	if (!rt || !fn)
		return PC_EINVAL;
	pc__blocking_t *b = &rt->blocking;
	pc__blocking_job_t *j = malloc(sizeof(*j));
	if (!j)
		return PC_ENOMEM;
	*j = (pc__blocking_job_t){NULL, fn, discard, arg, reply_to};
	int rc = 0;
	pc__blocking_idler_t *wake = NULL;
	pthread_mutex_lock(&b->lock);
	if (b->stopping || pc_atomic_load_u32_acq(&rt->state) >= PC__RT_STOPPING)
		rc = PC_ESTOPPED;
	else if (b->queued >= b->max_queued)
		rc = PC_EBUSY;
	if (rc == 0) {
		pc_actor_retain(reply_to);
		if (b->tail)
			b->tail->next = j;
		else
			b->head = j;
		b->tail = j;
		b->queued++;
		pc_atomic_store_u64(&b->pending, b->pending + 1);
		/* A pool thread running actors as a guest between jobs (from
		 * whose actor this submit comes) takes one job itself when its
		 * budget is spent: no thread need wake for it. */
		uint32_t mine = tls_pool_of == rt && pc__guest_running();
		/* Grow when the queued jobs outnumber the threads that will
		 * take one each, the idle and those called and not yet awake:
		 * otherwise jobs that arrive together would run one after
		 * another on one thread. A failed create is fine while another
		 * thread exists to serve the queue. */
		if (b->queued > b->nidle + b->waking + mine && b->threads < b->max_threads &&
		    pthread_create(&b->tids[b->threads], NULL, pool_main, rt) == 0)
			b->threads++;
		if (b->threads == 0) {
			b->head = b->tail = NULL;
			b->queued--;
			pc_atomic_store_u64(&b->pending, b->pending - 1);
			rc = PC_ESYS;
		} else if (b->nidle > 0 && b->queued > b->waking + mine) {
			/* otherwise a busy thread takes the job when it looks again */
			wake = &b->idlers[b->idle[--b->nidle]];
			wake->called = true;
			b->waking++;
		}
	}
	pthread_mutex_unlock(&b->lock);
	/* After the unlock: signalled under the lock, the woken thread would
	 * at once block on it again, a second sleep and wake for nothing. A
	 * thread that takes the job meanwhile makes this wake a spurious one,
	 * which the wait loop absorbs. */
	if (wake)
		pthread_cond_signal(&wake->cond);
	if (rc != 0) {
		if (rc == PC_ESYS)
			pc_actor_release(reply_to);
		free(j);
	}
	return rc;
}

void pc__blocking_stop(pc_runtime_t *rt)
{
	pc__blocking_t *b = &rt->blocking;
	pthread_mutex_lock(&b->lock);
	b->stopping = true;
	for (uint32_t i = 0; i < b->max_threads; i++)
		pthread_cond_signal(&b->idlers[i].cond);
	uint32_t n = b->threads;
	pthread_mutex_unlock(&b->lock);
	for (uint32_t i = 0; i < n; i++)
		pthread_join(b->tids[i], NULL);
	b->threads = 0;
	pc__blocking_job_t *j = b->head;
	b->head = b->tail = NULL;
	while (j) {
		pc__blocking_job_t *next = j->next;
		if (j->discard)
			j->discard(j->arg);
		pc_actor_release(j->reply_to);
		free(j);
		j = next;
	}
	b->queued = 0;
	pc_atomic_store_u64(&b->pending, 0);
}
