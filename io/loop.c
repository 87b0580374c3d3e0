/*
 * I/O threads: one epoll per thread, woken by an eventfd when a command
 * arrives in its queue (the same lock-free MPSC queue actors use as their
 * mailbox), with a binary min-heap of timers and a list of deferred calls.
 *
 * One turn: wait for events (until the next timer, or not at all when work
 * is pending), dispatch them, run up to CMD_BATCH commands, fire due timers,
 * then run deferred calls. Deferred calls come last so that an object freed
 * through them is never named by an event still waiting in the batch.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>

#include "io/buf.h"
#include "mailbox/mailbox.h"
#include "mailbox/msg_pool.h"
#include "runtime/clock.h"
#include "runtime/trim.h"
#include "loop_internal.h"

#define EVENT_BATCH 256
#define CMD_BATCH 1024

typedef struct deferred {
	pc_io_defer_fn fn;
	void *arg;
} deferred_t;

struct pc_ioloop {
	pc_io_t *io;
	uint32_t index;
	pthread_t thread;
	pthread_t self; /* set by the thread itself, before the start handshake */
	int epfd;
	int evfd;
	pc_io_watch_t wake;

	pc__mailbox_t cmds;
	pc__msg_cache_t msg_cache; /* HEAD/DATA/END messages come from here, as on a worker */
	bool cmds_busy;   /* popped since the queue was last marked idle */
	bool in_commands; /* run_commands is running one */
	bool self_posted; /* the loop's own thread posted: poll without waiting */
	uint32_t posting; /* producers inside pc__ioloop_post */
	uint32_t closed;  /* set once the final drain has begun */
	bool stopping;    /* loop thread only, readable by its modules */
	bool stop_requested;

	pc_io_timer_t **heap; /* 1-based: heap[1] is the earliest */
	uint32_t heap_len;
	uint32_t heap_cap;

	deferred_t *defers;
	size_t defer_len;
	size_t defer_cap;

	pc_io_hook_t *hooks;
	uint64_t now_ns;
	struct pc__http_client_loop *client;
	pc_io_stats_t stats;

	/* Start-up handshake with pc_io_new. */
	pthread_mutex_t init_lock;
	pthread_cond_t init_cond;
	int init_state; /* 0 pending, 1 ready, <0 failed */
};

struct pc_io {
	pc_runtime_t *rt;
	pc_io_config_t cfg;
	uint32_t nloops;
	uint32_t next;
	pc_ioloop_t *loops[];
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_code;

static void curl_init_once(void) { curl_init_code = curl_global_init(CURL_GLOBAL_DEFAULT); }

/* ---- watches ------------------------------------------------------------ */

int pc__ioloop_watch(pc_ioloop_t *loop, pc_io_watch_t *w, int fd, uint32_t events,
		     pc_io_event_fn fn, void *arg)
{
	struct epoll_event ev = {.events = events, .data.ptr = w};
	w->fd = fd;
	w->events = events;
	w->fn = fn;
	w->arg = arg;
	if (epoll_ctl(loop->epfd, EPOLL_CTL_ADD, fd, &ev) != 0)
		return PC_ESYS;
	w->active = true;
	return 0;
}

int pc__ioloop_rewatch(pc_ioloop_t *loop, pc_io_watch_t *w, uint32_t events)
{
	if (!w->active)
		return PC_ESTATE;
	if (w->events == events)
		return 0;
	struct epoll_event ev = {.events = events, .data.ptr = w};
	if (epoll_ctl(loop->epfd, EPOLL_CTL_MOD, w->fd, &ev) != 0)
		return PC_ESYS;
	w->events = events;
	return 0;
}

void pc__ioloop_unwatch(pc_ioloop_t *loop, pc_io_watch_t *w)
{
	if (!w->active)
		return;
	/* Failure means the fd is already gone from the set (closed); either
	 * way no further event names it once `active` is false. */
	(void)epoll_ctl(loop->epfd, EPOLL_CTL_DEL, w->fd, NULL);
	w->active = false;
}

/* ---- timers: a binary min-heap of pointers ------------------------------- */

static void heap_set(pc_ioloop_t *loop, uint32_t i, pc_io_timer_t *t)
{
	loop->heap[i] = t;
	t->heap_index = i;
}

static void heap_up(pc_ioloop_t *loop, uint32_t i)
{
	pc_io_timer_t *t = loop->heap[i];
	while (i > 1) {
		pc_io_timer_t *parent = loop->heap[i / 2];
		if (parent->deadline_ns <= t->deadline_ns)
			break;
		heap_set(loop, i, parent);
		i /= 2;
	}
	heap_set(loop, i, t);
}

static void heap_down(pc_ioloop_t *loop, uint32_t i)
{
	pc_io_timer_t *t = loop->heap[i];
	for (;;) {
		uint32_t c = i * 2;
		if (c > loop->heap_len)
			break;
		if (c < loop->heap_len && loop->heap[c + 1]->deadline_ns < loop->heap[c]->deadline_ns)
			c++;
		if (t->deadline_ns <= loop->heap[c]->deadline_ns)
			break;
		heap_set(loop, i, loop->heap[c]);
		i = c;
	}
	heap_set(loop, i, t);
}

static void heap_remove(pc_ioloop_t *loop, pc_io_timer_t *t)
{
	uint32_t i = t->heap_index;
	pc_io_timer_t *last = loop->heap[loop->heap_len--];
	t->heap_index = 0;
	if (last == t)
		return;
	heap_set(loop, i, last);
	if (i > 1 && loop->heap[i / 2]->deadline_ns > last->deadline_ns)
		heap_up(loop, i);
	else
		heap_down(loop, i);
}

void pc__ioloop_timer_arm(pc_ioloop_t *loop, pc_io_timer_t *t, uint64_t after_ms,
			  pc_io_timer_fn fn, void *arg)
{
	t->fn = fn;
	t->arg = arg;
	t->deadline_ns = pc__clock_mono_ns() + after_ms * 1000000u;
	if (t->heap_index) {
		heap_up(loop, t->heap_index);
		heap_down(loop, t->heap_index);
		return;
	}
	size_t cap = loop->heap_cap; /* the heap is 1-based: slot 0 unused */
	if (PC__GROW(loop->heap, cap, (size_t)loop->heap_len + 2, 64))
		abort(); /* a timer that silently never fires would wedge its owner */
	loop->heap_cap = (uint32_t)cap;
	loop->heap[++loop->heap_len] = t;
	heap_up(loop, loop->heap_len);
}

void pc__ioloop_timer_cancel(pc_ioloop_t *loop, pc_io_timer_t *t)
{
	if (t->heap_index)
		heap_remove(loop, t);
}

/* Runs the due timers; true when there were any. */
static bool run_timers(pc_ioloop_t *loop)
{
	uint64_t now = loop->now_ns;
	bool ran = false;
	while (loop->heap_len && loop->heap[1]->deadline_ns <= now) {
		pc_io_timer_t *t = loop->heap[1];
		heap_remove(loop, t);
		t->fn(loop, t->arg);
		ran = true;
	}
	return ran;
}

static int wait_timeout_ms(const pc_ioloop_t *loop)
{
	if (!loop->heap_len)
		return -1;
	uint64_t d = loop->heap[1]->deadline_ns;
	uint64_t now = pc__clock_mono_ns();
	if (d <= now)
		return 0;
	uint64_t ms = (d - now + 999999u) / 1000000u; /* never wake early */
	return ms > INT32_MAX ? INT32_MAX : (int)ms;
}

uint64_t pc__ioloop_now_ns(const pc_ioloop_t *loop) { return loop->now_ns; }

/* ---- commands ------------------------------------------------------------ */

pc_msg_t *pc__io_cmd_new(pc_io_cmd_fn run, size_t payload, void **payload_out)
{
	pc_msg_t *m = pc_msg_new(0, sizeof(pc_io_cmd_t) + payload);
	if (!m)
		return NULL;
	pc_io_cmd_t *c = pc_msg_data(m);
	c->run = run;
	if (payload_out)
		*payload_out = c + 1;
	return m;
}

static void wake(pc_ioloop_t *loop)
{
	uint64_t one = 1;
	/* EAGAIN means the counter is already non-zero: the loop will wake. */
	while (write(loop->evfd, &one, sizeof(one)) < 0 && errno == EINTR)
		;
}

int pc__ioloop_post(pc_ioloop_t *loop, pc_msg_t *msg)
{
	/* The posting count lets the final drain wait out producers that saw
	 * the loop open: after `closed` is set and posting reaches zero, no
	 * message can land in a queue nobody drains. */
	__atomic_fetch_add(&loop->posting, 1, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(&loop->closed, __ATOMIC_SEQ_CST)) {
		__atomic_fetch_sub(&loop->posting, 1, __ATOMIC_SEQ_CST);
		pc_msg_free(msg);
		return PC_ESTOPPED;
	}
	/* the loop's own thread (actors it runs as a guest) needs no
	 * eventfd: it looks at the queue again before it sleeps */
	if (pc__mailbox_push(&loop->cmds, msg)) {
		if (pc__ioloop_on_thread(loop))
			loop->self_posted = true;
		else
			wake(loop);
	}
	__atomic_fetch_sub(&loop->posting, 1, __ATOMIC_SEQ_CST);
	return 0;
}

/* Runs up to `limit` commands; true when the queue was left idle. The
 * queue is marked idle only after something was popped: a producer whose
 * push found it idle writes the eventfd, so the loop comes back for a
 * message it could not see yet (a push half done). */
static bool run_commands(pc_ioloop_t *loop, unsigned limit)
{
	unsigned n = 0;
	bool idle = false;
	while (!idle) {
		pc_msg_t *m;
		loop->in_commands = true;
		while (n < limit && (m = pc__mailbox_pop(&loop->cmds)) != NULL) {
			const pc_io_cmd_t *c = pc_msg_cdata(m);
			loop->cmds_busy = true;
			c->run(loop, m);
			n++;
		}
		loop->in_commands = false;
		if (n >= limit)
			break;
		if (loop->cmds_busy && !pc__mailbox_mark_empty(&loop->cmds)) {
			sched_yield(); /* a push is half done; it completes in a few instructions */
			continue;
		}
		loop->cmds_busy = false;
		idle = true;
	}
	PC__IO_STAT_ADD(loop, commands, n);
	return idle;
}

static void on_wake(pc_ioloop_t *loop, void *arg, uint32_t events)
{
	(void)loop;
	(void)arg;
	(void)events;
	uint64_t v;
	/* Only resets the counter; the queue itself is drained every turn. */
	while (read(loop->evfd, &v, sizeof(v)) < 0 && errno == EINTR)
		;
}

/* ---- deferred calls and shutdown hooks ------------------------------------ */

int pc__ioloop_defer(pc_ioloop_t *loop, pc_io_defer_fn fn, void *arg)
{
	if (PC__GROW(loop->defers, loop->defer_cap, loop->defer_len + 1, 32))
		return PC_ENOMEM;
	loop->defers[loop->defer_len++] = (deferred_t){fn, arg};
	return 0;
}

static void run_defers(pc_ioloop_t *loop)
{
	/* A deferred call may defer again; those run in the same pass. */
	for (size_t i = 0; i < loop->defer_len; i++) {
		deferred_t d = loop->defers[i];
		d.fn(d.arg);
	}
	loop->defer_len = 0;
}

void pc__ioloop_on_shutdown(pc_ioloop_t *loop, pc_io_hook_t *hook)
{
	hook->next = loop->hooks;
	loop->hooks = hook;
}

void pc__ioloop_off_shutdown(pc_ioloop_t *loop, pc_io_hook_t *hook)
{
	for (pc_io_hook_t **p = &loop->hooks; *p; p = &(*p)->next) {
		if (*p == hook) {
			*p = hook->next;
			return;
		}
	}
}

static void stop_cmd(pc_ioloop_t *loop, pc_msg_t *msg)
{
	(void)msg;
	__atomic_store_n(&loop->stop_requested, true, __ATOMIC_RELAXED);
}

/* Ends the loop in an order that leaves nothing behind: modules close what
 * they own (their actors are told), transfers end, late commands are run in
 * the stopping state, and deferred frees happen last. */
static void shutdown_loop(pc_ioloop_t *loop)
{
	loop->stopping = true;
	while (loop->hooks) {
		pc_io_hook_t *h = loop->hooks;
		loop->hooks = h->next;
		h->fn(loop, h);
	}
	run_defers(loop);
	pc__http_client_loop_fini(loop->client);
	loop->client = NULL;
	/* Dekker-style with pc__ioloop_post: both sides are seq_cst. */
	__atomic_store_n(&loop->closed, 1, __ATOMIC_SEQ_CST);
	while (__atomic_load_n(&loop->posting, __ATOMIC_SEQ_CST))
		sched_yield();
	while (!run_commands(loop, UINT32_MAX))
		;
	run_defers(loop);
}

/* ---- the thread ------------------------------------------------------------- */

static void *loop_main(void *arg)
{
	pc_ioloop_t *loop = arg;
	loop->self = pthread_self();
	pc_thread_name("io", pc__ioloop_index(loop));
	pc__msg_cache_attach(&loop->msg_cache);
	struct pc__http_client_loop *client = NULL;
	int rc = pc__http_client_loop_init(loop, &loop->io->cfg, &client);
	pthread_mutex_lock(&loop->init_lock);
	loop->client = client;
	loop->init_state = rc == 0 ? 1 : rc;
	pthread_cond_signal(&loop->init_cond);
	pthread_mutex_unlock(&loop->init_lock);
	if (rc != 0) {
		pc__msg_cache_detach();
		return NULL;
	}

	/* With every worker parked, this thread runs what a pass made
	 * runnable (runtime.h, guests): a lone request is read, handled and
	 * answered here, without a wake-up on either side. Without memory
	 * for a guest the loop only hands its work over. */
	pc_runtime_guest_t *guest = NULL;
	(void)pc_runtime_guest_new(loop->io->rt, PC_RUNTIME_GUEST_BUDGET_NS, &guest);
	struct epoll_event evs[EVENT_BATCH];
	bool pending = false; /* commands left over from a full batch */
	/* A loop that did work gives this thread's free heap back when its
	 * trim falls due and it has nothing to do (runtime/trim.h). */
	const pc_runtime_t *rt = loop->io->rt;
	pc__trim_clock_t trim = {0};
	while (!__atomic_load_n(&loop->stop_requested, __ATOMIC_ACQUIRE)) {
		int timeout = (pending || loop->defer_len || loop->self_posted) ? 0 : wait_timeout_ms(loop);
		loop->self_posted = false;
		int64_t trim_ms = -1;
		if (timeout != 0 && pc__trim_due(&trim, pc_runtime_trim_after_ms(rt), pc__clock_mono_ns(), &trim_ms)) {
			pc__trim_done(&trim);
			pc_runtime_trim_heap(rt);
			PC__IO_STAT_ADD(loop, trims, 1);
			continue;
		}
		if (timeout != 0 && trim_ms >= 0 && (timeout < 0 || trim_ms < timeout))
			timeout = trim_ms > INT_MAX ? INT_MAX : (int)trim_ms;
		int n = epoll_wait(loop->epfd, evs, EVENT_BATCH, timeout);
		if (n < 0 && errno != EINTR)
			abort(); /* EBADF/EINVAL: the loop's own fd is broken */
		if (n > 0)
			pc__trim_worked(&trim);
		loop->now_ns = pc__clock_mono_ns();
		PC__IO_STAT_ADD(loop, wakeups, 1);
		/* what this pass sends is scheduled in one go at its end */
		pc_runtime_hold_begin();
		for (int i = 0; i < n; i++) {
			pc_io_watch_t *w = evs[i].data.ptr;
			if (w->active)
				w->fn(loop, w->arg, evs[i].events);
		}
		pending = !run_commands(loop, CMD_BATCH);
		loop->now_ns = pc__clock_mono_ns();
		if (run_timers(loop))
			pc__trim_worked(&trim);
		run_defers(loop);
		pc_runtime_hold_end();
	}
	pc_runtime_guest_free(guest);
	shutdown_loop(loop);
	pc__msg_cache_detach();
	return NULL;
}

static void loop_free(pc_ioloop_t *loop)
{
	if (!loop)
		return;
	pc__mailbox_destroy(&loop->cmds);
	if (loop->epfd >= 0)
		close(loop->epfd);
	if (loop->evfd >= 0)
		close(loop->evfd);
	pthread_mutex_destroy(&loop->init_lock);
	pthread_cond_destroy(&loop->init_cond);
	free(loop->heap);
	free(loop->defers);
	free(loop);
}

static int loop_new(pc_io_t *io, uint32_t index, pc_ioloop_t **out)
{
	pc_ioloop_t *loop = calloc(1, sizeof(*loop));
	pc_msg_t *stub = pc_msg_new(0, 0);
	int rc = PC_ENOMEM;
	if (!loop || !stub)
		goto fail;
	loop->io = io;
	loop->index = index;
	loop->epfd = -1;
	loop->evfd = -1;
	pc__mailbox_init(&loop->cmds, stub);
	stub = NULL;
	pthread_mutex_init(&loop->init_lock, NULL);
	pthread_cond_init(&loop->init_cond, NULL);
	loop->now_ns = pc__clock_mono_ns();
	rc = PC_ESYS;
	loop->epfd = epoll_create1(EPOLL_CLOEXEC);
	loop->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (loop->epfd < 0 || loop->evfd < 0)
		goto fail;
	if ((rc = pc__ioloop_watch(loop, &loop->wake, loop->evfd, EPOLLIN, on_wake, NULL)) != 0)
		goto fail;
	*out = loop;
	return 0;
fail:
	pc_msg_free(stub);
	loop_free(loop);
	return rc;
}

static int loop_start(pc_ioloop_t *loop)
{
	int err = pthread_create(&loop->thread, NULL, loop_main, loop);
	if (err != 0)
		return PC_ESYS;
	pthread_mutex_lock(&loop->init_lock);
	while (loop->init_state == 0)
		pthread_cond_wait(&loop->init_cond, &loop->init_lock);
	int state = loop->init_state;
	pthread_mutex_unlock(&loop->init_lock);
	if (state < 0) {
		pthread_join(loop->thread, NULL);
		return state;
	}
	return 0;
}

/* Asks the loop to stop, even when memory for a command message is
 * exhausted (then the flag is set from here and the loop is woken). */
static void loop_stop(pc_ioloop_t *loop)
{
	pc_msg_t *m = pc__io_cmd_new(stop_cmd, 0, NULL);
	if (!m || pc__ioloop_post(loop, m) != 0) {
		__atomic_store_n(&loop->stop_requested, true, __ATOMIC_RELEASE);
		wake(loop);
	}
	pthread_join(loop->thread, NULL);
}

/* ---- the loop set ------------------------------------------------------------ */

static uint32_t default_threads(void)
{
	long cores = sysconf(_SC_NPROCESSORS_ONLN);
	return cores >= 4 ? (uint32_t)(cores / 2) : 1;
}

int pc_io_new(pc_runtime_t *rt, const pc_io_config_t *cfg, pc_io_t **out)
{
	if (!rt || !out)
		return PC_EINVAL;
	pthread_once(&curl_once, curl_init_once);
	if (curl_init_code != CURLE_OK)
		return PC_ESYS;
	pc_io_config_t c = cfg ? *cfg : (pc_io_config_t){0};
	if (c.threads == 0)
		c.threads = default_threads();
	if (c.threads > 256)
		return PC_EINVAL;
	if (c.max_host_connections == 0)
		c.max_host_connections = 64;
	if (c.max_idle_connections == 0)
		c.max_idle_connections = 256;
	if (c.max_concurrent_streams == 0)
		c.max_concurrent_streams = 1000;

	pc_io_t *io = calloc(1, sizeof(*io) + c.threads * sizeof(pc_ioloop_t *));
	if (!io)
		return PC_ENOMEM;
	io->rt = rt;
	io->cfg = c;
	int rc = 0;
	for (uint32_t i = 0; i < c.threads && rc == 0; i++) {
		rc = loop_new(io, i, &io->loops[i]);
		if (rc == 0) {
			rc = loop_start(io->loops[i]);
			if (rc != 0) {
				loop_free(io->loops[i]);
				io->loops[i] = NULL;
			}
		}
		if (rc == 0)
			io->nloops = i + 1;
	}
	if (rc != 0) {
		pc_io_free(io);
		return rc;
	}
	*out = io;
	return 0;
}

void pc_io_free(pc_io_t *io)
{
	if (!io)
		return;
	for (uint32_t i = 0; i < io->nloops; i++)
		loop_stop(io->loops[i]);
	for (uint32_t i = 0; i < io->nloops; i++)
		loop_free(io->loops[i]);
	free(io);
}

uint32_t pc_io_threads(const pc_io_t *io) { return io->nloops; }
pc_runtime_t *pc_io_runtime(const pc_io_t *io) { return io->rt; }

void pc_io_stats(pc_io_t *io, pc_io_stats_t *out)
{
	memset(out, 0, sizeof(*out));
	for (uint32_t i = 0; i < io->nloops; i++) {
		const uint64_t *src = (const uint64_t *)&io->loops[i]->stats;
		uint64_t *dst = (uint64_t *)out;
		for (size_t f = 0; f < sizeof(*out) / sizeof(uint64_t); f++)
			dst[f] += __atomic_load_n(&src[f], __ATOMIC_RELAXED);
	}
}

uint32_t pc__io_loop_count(const pc_io_t *io) { return io->nloops; }
pc_ioloop_t *pc__io_loop(pc_io_t *io, uint32_t index) { return io->loops[index]; }

pc_ioloop_t *pc__io_next_loop(pc_io_t *io)
{
	uint32_t n = __atomic_fetch_add(&io->next, 1, __ATOMIC_RELAXED);
	return io->loops[n % io->nloops];
}

uint32_t pc__ioloop_index(const pc_ioloop_t *loop) { return loop->index; }
pc_io_t *pc__ioloop_io(pc_ioloop_t *loop) { return loop->io; }
pc_runtime_t *pc__ioloop_runtime(pc_ioloop_t *loop) { return loop->io->rt; }
pc_io_stats_t *pc__ioloop_stats(pc_ioloop_t *loop) { return &loop->stats; }
bool pc__ioloop_stopping(const pc_ioloop_t *loop) { return loop->stopping; }
struct pc__http_client_loop *pc__ioloop_client(pc_ioloop_t *loop) { return loop->client; }

bool pc__ioloop_in_commands(const pc_ioloop_t *loop) { return loop->in_commands; }

bool pc__ioloop_on_thread(const pc_ioloop_t *loop)
{
	return pthread_equal(pthread_self(), loop->self) != 0;
}
