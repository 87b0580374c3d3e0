/*
 * A descriptor another library drives (a database client's socket),
 * polled on an I/O loop like the layer's own connections: the owner's
 * callback runs on the loop's thread when it is ready, when its deadline
 * passes, or when the loop shuts down.
 */
#include <errno.h>
#include <stdlib.h>
#include <sys/epoll.h>

#include "loop_internal.h"

struct pc_io_fd {
	pc_ioloop_t *loop;
	pc_io_watch_t watch;
	pc_io_timer_t deadline;
	pc_io_hook_t hook;
	pc_io_fd_fn fn;
	void *arg;
	int fd;
	uint32_t want;
	uint32_t timeout_ms;
	bool stopped;
};

static uint32_t epoll_events(uint32_t want)
{
	return ((want & PC_IO_FD_READ) ? EPOLLIN : 0) | ((want & PC_IO_FD_WRITE) ? EPOLLOUT : 0);
}

static void fd_free(void *arg)
{
	free(arg);
}

/* Calls the owner unless it stopped the watch already. */
static void call(pc_io_fd_t *w, uint32_t events)
{
	if (!w->stopped)
		w->fn(w, w->arg, events);
}

static void on_event(pc_ioloop_t *loop, void *arg, uint32_t events)
{
	(void)loop;
	pc_io_fd_t *w = arg;
	/* an error or a hang-up is for the owner's read to find */
	uint32_t got = ((events & (EPOLLIN | EPOLLERR | EPOLLHUP | EPOLLRDHUP)) ? PC_IO_FD_READ : 0) |
		       ((events & EPOLLOUT) ? PC_IO_FD_WRITE : 0);
	call(w, got);
}

static void on_deadline(pc_ioloop_t *loop, void *arg)
{
	(void)loop;
	call(arg, 0);
}

static void on_shutdown(pc_ioloop_t *loop, pc_io_hook_t *hook)
{
	(void)loop;
	pc_io_fd_t *w = (pc_io_fd_t *)((char *)hook - offsetof(pc_io_fd_t, hook));
	call(w, PC_IO_FD_STOPPED);
	if (!w->stopped) /* an owner that did not stop is stopped */
		pc_io_fd_stop(w);
}

static void start_cmd(pc_ioloop_t *loop, pc_msg_t *msg)
{
	pc_io_fd_t *w = *(pc_io_fd_t **)((pc_io_cmd_t *)pc_msg_data(msg) + 1);
	pc__ioloop_on_shutdown(loop, &w->hook);
	if (pc__ioloop_stopping(loop)) {
		on_shutdown(loop, &w->hook);
		return;
	}
	if (pc__ioloop_watch(loop, &w->watch, w->fd, epoll_events(w->want), on_event, w) != 0) {
		call(w, PC_IO_FD_STOPPED);
		if (!w->stopped)
			pc_io_fd_stop(w);
		return;
	}
	if (w->timeout_ms)
		pc__ioloop_timer_arm(loop, &w->deadline, w->timeout_ms, on_deadline, w);
}

int pc_io_fd_start(pc_io_t *io, int fd, uint32_t want, uint32_t timeout_ms, pc_io_fd_fn fn, void *arg,
		   pc_io_fd_t **out)
{
	if (out)
		*out = NULL;
	if (!io || fd < 0 || !fn || !(want & (PC_IO_FD_READ | PC_IO_FD_WRITE)))
		return PC_EINVAL;
	pc_io_fd_t *w = calloc(1, sizeof(*w));
	if (!w)
		return PC_ENOMEM;
	*w = (pc_io_fd_t){.loop = pc__io_next_loop(io), .fn = fn, .arg = arg, .fd = fd, .want = want,
			  .timeout_ms = timeout_ms};
	w->hook.fn = on_shutdown;
	void *payload = NULL;
	pc_msg_t *m = pc__io_cmd_new(start_cmd, sizeof(w), &payload);
	if (!m) {
		free(w);
		return PC_ENOMEM;
	}
	*(pc_io_fd_t **)payload = w;
	if (out)
		*out = w;
	int rc = pc__ioloop_post(w->loop, m);
	if (rc != 0) {
		if (out)
			*out = NULL;
		free(w);
	}
	return rc;
}

int pc_io_fd_want(pc_io_fd_t *w, uint32_t want)
{
	if (!w || w->stopped || !(want & (PC_IO_FD_READ | PC_IO_FD_WRITE)))
		return PC_EINVAL;
	w->want = want;
	return pc__ioloop_rewatch(w->loop, &w->watch, epoll_events(want));
}

void pc_io_fd_stop(pc_io_fd_t *w)
{
	if (!w || w->stopped)
		return;
	w->stopped = true;
	pc__ioloop_unwatch(w->loop, &w->watch);
	pc__ioloop_timer_cancel(w->loop, &w->deadline);
	pc__ioloop_off_shutdown(w->loop, &w->hook);
	/* later events of this epoll batch may still name the watch */
	if (pc__ioloop_defer(w->loop, fd_free, w) != 0)
		free(w); /* stopping: no batch follows */
}
