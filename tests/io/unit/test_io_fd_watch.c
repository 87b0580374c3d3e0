/*
 * A descriptor another library drives, polled on an I/O loop
 * (pc_io_fd_t, io/io.h): readiness to read and to write, a change of
 * what is waited for, the deadline, stopping from the callback, and the
 * loop's shutdown reaching a watch still running. The callback always runs
 * on the loop's thread, never on the caller's.
 */
#include <criterion/criterion.h>

#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include "test_util.h"
#include "io/io.h"

typedef struct probe {
	int fd;
	pthread_t caller;
	int reads, writes, deadlines, stopped, on_caller; /* atomics */
	char got[8];
	int ngot;
	bool stop_on_read;
	pc_io_fd_t *w;
} probe_t;

static void on_fd(pc_io_fd_t *w, void *arg, uint32_t events)
{
	probe_t *p = arg;
	if (pthread_equal(pthread_self(), p->caller))
		INC(p->on_caller);
	if (events & PC_IO_FD_STOPPED) {
		INC(p->stopped);
		pc_io_fd_stop(w);
		return;
	}
	if (events == 0) {
		INC(p->deadlines);
		pc_io_fd_stop(w);
		return;
	}
	if (events & PC_IO_FD_WRITE) {
		INC(p->writes);
		/* written once: from now on only reads matter */
		cr_assert_eq(pc_io_fd_want(w, PC_IO_FD_READ), 0);
	}
	if (events & PC_IO_FD_READ) {
		ssize_t n = read(p->fd, p->got + p->ngot, sizeof(p->got) - (size_t)p->ngot);
		if (n > 0)
			p->ngot += (int)n;
		INC(p->reads);
		if (p->stop_on_read)
			pc_io_fd_stop(w);
	}
}

typedef struct fx {
	pc_runtime_t *rt;
	pc_io_t *io;
	int sv[2];
} fx_t;

static void fx_init(fx_t *f)
{
	f->rt = start_rt(2);
	pc_io_config_t cfg = {.threads = 1};
	cr_assert_eq(pc_io_new(f->rt, &cfg, &f->io), 0);
	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, f->sv), 0);
}

/* A fixture, and a probe watching its socket's first end. */
static void watch(fx_t *f, probe_t *p, uint32_t want, uint32_t timeout_ms, bool stop_on_read)
{
	fx_init(f);
	*p = (probe_t){.fd = f->sv[0], .caller = pthread_self(), .stop_on_read = stop_on_read};
	cr_assert_eq(pc_io_fd_start(f->io, f->sv[0], want, timeout_ms, on_fd, p, &p->w), 0);
}

static void fx_fini(fx_t *f)
{
	pc_io_free(f->io);
	close(f->sv[0]);
	close(f->sv[1]);
	FREE_RUNTIME_CHECKED(f->rt);
}

Test(io_fd_watch, readable_calls_back_on_the_loop_and_stop_ends_it)
{
	fx_t f;
	probe_t p;
	watch(&f, &p, PC_IO_FD_READ, 0, true);
	sleep_ms(50);
	cr_assert_eq(LOAD(p.reads), 0, "nothing to read yet");
	cr_assert_eq(write(f.sv[1], "hi", 2), 2);
	AWAIT(LOAD(p.reads) == 1, 2000);
	cr_assert_eq(LOAD(p.reads), 1);
	/* stopped: more data calls nobody */
	cr_assert_eq(write(f.sv[1], "x", 1), 1);
	sleep_ms(50);
	cr_assert_eq(LOAD(p.reads), 1);
	cr_assert_eq(p.ngot, 2);
	cr_assert_eq(LOAD(p.on_caller), 0);
	fx_fini(&f);
}

Test(io_fd_watch, write_readiness_when_asked_then_reads)
{
	fx_t f;
	probe_t p;
	watch(&f, &p, PC_IO_FD_READ | PC_IO_FD_WRITE, 0, true);
	AWAIT(LOAD(p.writes) == 1, 2000);
	sleep_ms(50);
	cr_assert_eq(LOAD(p.writes), 1, "asked for reads alone after the first write");
	cr_assert_eq(write(f.sv[1], "a", 1), 1);
	AWAIT(LOAD(p.reads) == 1, 2000);
	cr_assert_eq(LOAD(p.reads), 1);
	fx_fini(&f);
}

Test(io_fd_watch, the_deadline_calls_back_with_no_events)
{
	fx_t f;
	probe_t p;
	uint64_t t0 = now_ms();
	watch(&f, &p, PC_IO_FD_READ, 100, false);
	AWAIT(LOAD(p.deadlines) == 1, 5000);
	cr_assert_eq(LOAD(p.deadlines), 1);
	cr_assert_geq(now_ms() - t0, 100);
	cr_assert_eq(LOAD(p.reads), 0);
	fx_fini(&f);
}

Test(io_fd_watch, shutdown_reaches_a_watch_still_running)
{
	fx_t f;
	probe_t p;
	watch(&f, &p, PC_IO_FD_READ, 0, false);
	sleep_ms(50);
	pc_io_free(f.io);
	f.io = NULL;
	cr_assert_eq(LOAD(p.stopped), 1);
	fx_fini(&f);
}

Test(io_fd_watch, bad_arguments_are_refused)
{
	fx_t f;
	fx_init(&f);
	probe_t p = {0};
	cr_assert_eq(pc_io_fd_start(NULL, f.sv[0], PC_IO_FD_READ, 0, on_fd, &p, NULL), PC_EINVAL);
	cr_assert_eq(pc_io_fd_start(f.io, -1, PC_IO_FD_READ, 0, on_fd, &p, NULL), PC_EINVAL);
	cr_assert_eq(pc_io_fd_start(f.io, f.sv[0], 0, 0, on_fd, &p, NULL), PC_EINVAL);
	cr_assert_eq(pc_io_fd_start(f.io, f.sv[0], PC_IO_FD_READ, 0, NULL, &p, NULL), PC_EINVAL);
	fx_fini(&f);
}
