/*
 * The blocking pool: a FIFO of jobs under a mutex, served by up to
 * max_threads threads created on demand. Threads sleep on a condition
 * variable when there is nothing to do.
 */
#include "blocking.h"

#include <errno.h>
#include <stdlib.h>
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

int pc__blocking_init(pc_runtime_t *rt)
{
	pc__blocking_t *b = &rt->blocking;
	b->max_threads = rt->cfg.blocking_threads;
	b->max_queued = rt->cfg.blocking_queue;
	b->tids = calloc(b->max_threads, sizeof(pthread_t));
	if (!b->tids)
		return PC_ENOMEM;
	pthread_mutex_init(&b->lock, NULL);
	return pc__cond_init_monotonic(&b->cond);
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

/* Lock held. Waits for a job or the stop. A thread that ran a job gives
 * its free heap back when its trim falls due (trim.h) and it is still
 * idle: the store's writer and readers allocate on these threads. */
static void wait_for_job(pc_runtime_t *rt, pc__blocking_t *b, pc__trim_clock_t *trim)
{
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
		b->idle++;
		if (wait_ms < 0) {
			pthread_cond_wait(&b->cond, &b->lock);
		} else {
			struct timespec ts = pc__timespec_ns(pc__clock_mono_ns() + (uint64_t)wait_ms * 1000000u);
			pthread_cond_timedwait(&b->cond, &b->lock, &ts);
		}
		b->idle--;
	}
}

static void *pool_main(void *arg)
{
	pc_runtime_t *rt = arg;
	pc__blocking_t *b = &rt->blocking;
	pc__trim_clock_t trim = {0};
	pthread_mutex_lock(&b->lock);
	pc_thread_name("blocking", b->named++);
	for (;;) {
		wait_for_job(rt, b, &trim);
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
		/* Grow when the queued jobs outnumber the idle threads: each
		 * idle thread takes one job, and an idle thread already
		 * signalled for an earlier job stays counted in `idle` until it
		 * wakes, so "idle == 0" would leave jobs that arrive together
		 * to run one after another on one thread. A failed create is
		 * fine while another thread exists to serve the queue. */
		if (b->queued > b->idle && b->threads < b->max_threads &&
		    pthread_create(&b->tids[b->threads], NULL, pool_main, rt) == 0)
			b->threads++;
		if (b->threads == 0) {
			b->head = b->tail = NULL;
			b->queued--;
			pc_atomic_store_u64(&b->pending, b->pending - 1);
			rc = PC_ESYS;
		} else {
			pthread_cond_signal(&b->cond);
		}
	}
	pthread_mutex_unlock(&b->lock);
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
	pthread_cond_broadcast(&b->cond);
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
