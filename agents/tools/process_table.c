/*
 * Child processes and the table that keeps them (process_table.h).
 *
 * Each record has its own lock; the table's lock guards only the list and
 * is always taken first. A record's life:
 *
 *   spawn (the supervisor, which starts the command: exec_supervisor.h)
 *   -> the reader job reads the pipe until EOF (or gives it up once the
 *   tree was SIGKILLed and the pipe still does not close) -> waitpid on
 *   the supervisor -> the command's cgroup, if it has one, emptied and
 *   removed -> its last report read -> state set, the invocation woken.
 *
 * The supervisor ends only after the command and everything it left
 * behind have been killed and reaped, so a process ending means its whole
 * tree is gone.
 *
 * The rule that keeps signals safe: Pincer signals only the supervisor,
 * its own child, under the record's lock while the state is RUNNING, and
 * the reader reaps it with waitpid(WNOHANG) under that same lock, setting
 * the state as it does. So no signal can reach a pid that was reaped and
 * reused. The command's group is signalled by the supervisor, which
 * leaves the command unreaped while it does.
 *
 * Timers (the timeout, SIGTERM -> SIGKILL, the bound on an escaped pipe
 * holder) are kept by the reader itself, as its poll timeout: they work
 * even while the runtime is shutting down and its timer thread is gone.
 * Whoever asks for a kill pokes the reader's eventfd so it re-reads them.
 */
#include "process_table.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "runtime/blocking.h"
#include "exec_cgroup.h"
#include "exec_supervisor.h"
#include "io/io.h"
#include "tool.h"
#include "runtime/clock.h"

/* How long the reader keeps waiting for EOF after asking for SIGKILL: only
 * a process that left the supervisor's tree (its supervisor was killed
 * under it) or a supervisor that does not answer (stopped) can still hold
 * the pipe by then. */
#define ESCAPE_NS ((uint64_t)1000 * 1000000u)
/* The longest pause between two looks for the exit of a child whose pipe
 * already closed. */
#define REAP_POLL_MAX_MS 50
#define READ_CHUNK 16384u
#define INITIAL_BUF ((size_t)4096)
/* pc_process_table_free waits this much beyond the longest grace. */
#define FREE_EXTRA_NS ((uint64_t)3000 * 1000000u)

struct pc_process {
	uint32_t refs; /* atomic */
	pthread_mutex_t lock;
	pthread_cond_t ended; /* broadcast when the state leaves RUNNING */

	char id[PC_PROCESS_ID_MAX];
	char command[sizeof(((pc_process_info_t *)0)->command)];
	pid_t pid; /* the supervisor: the only pid Pincer signals and reaps */
	pid_t cmd; /* the command, also its process group */
	int fd;   /* the pipe's read end: the reader's alone */
	int status_fd; /* the supervisor's reports (exec_supervisor.h): the reader's */
	int evfd; /* wakes the reader; -1 once it ended (guarded by lock) */
	char *cgroup; /* the command's cgroup (exec_cgroup.h), emptied and removed once the
		       * supervisor was reaped; NULL: none, or done */

	/* The output kept: a buffer that grows up to `cap`, then a ring. */
	char *buf;
	size_t size;
	size_t cap;
	size_t start;
	size_t len;
	uint64_t total;    /* bytes ever produced */
	uint64_t poll_off; /* what pc_process_poll has shown */

	pc_process_state_t state;
	int code;
	bool forgotten; /* out of sight; dropped once it has ended */
	char *session;  /* the session it belongs to; NULL: none */
	bool timed_out;
	uint64_t timeout_ms;
	uint64_t grace_ns;
	uint64_t deadline_ns; /* 0: none */
	uint64_t term_ns;     /* SIGTERM sent at (0: not yet) */
	uint64_t kill_ns;     /* SIGKILL sent at (0: not yet) */
	uint64_t ended_ns;
	pc_actor_t *notify;
	uint64_t token;
};

struct pc_process_table {
	pthread_mutex_t lock;
	pc_process_t **procs; /* in the order started */
	size_t n;
	size_t max;
	size_t max_running;
	uint64_t ttl_ns;
	uint64_t next_id;
	char *cgroup_base; /* where commands' cgroups are made; NULL: nowhere */
};

/* ---- records ------------------------------------------------------------- */

pc_process_t *pc_process_retain(pc_process_t *p)
{
	if (p)
		__atomic_add_fetch(&p->refs, 1, __ATOMIC_RELAXED);
	return p;
}

void pc_process_release(pc_process_t *p)
{
	if (!p || __atomic_sub_fetch(&p->refs, 1, __ATOMIC_ACQ_REL) != 0)
		return;
	pthread_mutex_destroy(&p->lock);
	pthread_cond_destroy(&p->ended);
	pc_actor_release(p->notify);
	free(p->session);
	free(p->buf);
	free(p);
}

static pc_process_t *record_new(const pc_process_spawn_t *req)
{
	pc_process_t *p = calloc(1, sizeof(*p));
	if (!p)
		return NULL;
	p->cap = req->max_output ? req->max_output : PC_PROCESS_DEFAULT_OUTPUT;
	p->size = p->cap < INITIAL_BUF ? p->cap : INITIAL_BUF;
	p->buf = malloc(p->size);
	p->session = req->session_key ? strdup(req->session_key) : NULL;
	pthread_condattr_t ca;
	bool cond_ok = pthread_condattr_init(&ca) == 0;
	if (cond_ok) {
		cond_ok = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) == 0 && pthread_cond_init(&p->ended, &ca) == 0;
		pthread_condattr_destroy(&ca);
	}
	if (!p->buf || (req->session_key && !p->session) || !cond_ok || pthread_mutex_init(&p->lock, NULL) != 0) {
		if (cond_ok)
			pthread_cond_destroy(&p->ended);
		free(p->session);
		free(p->buf);
		free(p);
		return NULL;
	}
	p->refs = 1;
	p->fd = -1;
	p->status_fd = -1;
	p->evfd = -1;
	p->timeout_ms = req->timeout_ms;
	p->grace_ns = (req->kill_grace_ms ? req->kill_grace_ms : PC_PROCESS_DEFAULT_GRACE_MS) * 1000000u;
	p->notify = pc_actor_retain(req->notify);
	p->token = req->token;
	/* A one-line summary: control characters read as spaces, cut at a
	 * UTF-8 boundary. */
	const char *c = req->command ? req->command : "";
	size_t k = strlen(c);
	if (k >= sizeof(p->command)) {
		k = sizeof(p->command) - 1;
		while (k > 0 && ((unsigned char)c[k] & 0xC0u) == 0x80u)
			k--;
	}
	for (size_t i = 0; i < k; i++)
		p->command[i] = (unsigned char)c[i] < 0x20 || c[i] == 0x7f ? ' ' : c[i];
	return p;
}

/* Grows the buffer toward `need` bytes, up to cap. Only while it has not
 * wrapped (start is 0), so that realloc keeps the bytes in order; without
 * memory it stays as it is and keeps a shorter tail. */
static void ring_grow(pc_process_t *p, size_t need)
{
	if (need <= p->size || p->size >= p->cap || p->start != 0)
		return;
	size_t want = p->size * 2 > need ? p->size * 2 : need;
	want = want < p->cap ? want : p->cap;
	char *b = realloc(p->buf, want);
	if (b) {
		p->buf = b;
		p->size = want;
	}
}

/* Appends output, keeping the last `size` (at most cap) bytes. Under
 * p->lock. */
static void ring_append(pc_process_t *p, const char *data, size_t n)
{
	p->total += n;
	ring_grow(p, p->len + n);
	if (n >= p->size) {
		/* Only the tail of this chunk survives. */
		memcpy(p->buf, data + n - p->size, p->size);
		p->start = 0;
		p->len = p->size;
		return;
	}
	for (size_t i = 0; i < n; i++) {
		if (p->len < p->size) {
			p->buf[(p->start + p->len) % p->size] = data[i];
			p->len++;
		} else {
			/* Full: overwrite the oldest byte. */
			p->buf[p->start] = data[i];
			p->start = (p->start + 1) % p->size;
		}
	}
}

void pc_process_info(pc_process_t *p, pc_process_info_t *out)
{
	if (!p || !out)
		return;
	pthread_mutex_lock(&p->lock);
	memset(out, 0, sizeof(*out));
	memcpy(out->id, p->id, sizeof(out->id));
	memcpy(out->command, p->command, sizeof(out->command));
	out->pid = (int)p->cmd;
	out->state = p->state;
	out->code = p->code;
	out->timeout_ms = p->timeout_ms;
	out->total_bytes = p->total;
	pthread_mutex_unlock(&p->lock);
}

/* Wakes the reader so it re-reads its timers. Under p->lock. */
static void poke(pc_process_t *p)
{
	uint64_t one = 1;
	if (p->evfd >= 0 && write(p->evfd, &one, sizeof(one)) < 0) {
		/* EAGAIN, the only failure here: the counter is full, which
		 * already means "wake up". */
	}
}

/* Sends `sig` to `pid` (a group when negative). A failure needs nothing
 * done: ESRCH means nobody is left, and EPERM (a member that changed its
 * user) cannot be helped; the reader's bounded waits cover both. */
static void send_signal(pid_t pid, int sig)
{
	if (kill(pid, sig) != 0) {
		/* See above. */
	}
}

/* SIGTERM first, SIGKILL on the next request or after the grace, both
 * passed on by the supervisor to the command's tree. Under p->lock, while
 * RUNNING (the supervisor is not reaped, so its pid not reused). */
static void signal_group(pc_process_t *p, uint64_t now)
{
	if (!p->term_ns) {
		p->term_ns = now;
		send_signal(p->pid, PC_EXEC_SUP_TERM);
	} else if (!p->kill_ns) {
		p->kill_ns = now;
		send_signal(p->pid, PC_EXEC_SUP_KILL);
	}
	poke(p);
}

int pc_process_kill(pc_process_t *p)
{
	if (!p)
		return PC_EINVAL;
	int rc = 0;
	pthread_mutex_lock(&p->lock);
	if (p->state != PC_PROCESS_RUNNING)
		rc = PC_ESTATE;
	else
		signal_group(p, pc__clock_mono_ns());
	pthread_mutex_unlock(&p->lock);
	return rc;
}

bool pc_process_detach(pc_process_t *p)
{
	if (!p)
		return false;
	pthread_mutex_lock(&p->lock);
	bool running = p->state == PC_PROCESS_RUNNING;
	if (running) {
		pc_actor_release(p->notify);
		p->notify = NULL;
	}
	pthread_mutex_unlock(&p->lock);
	return running;
}

/* ---- the reader ----------------------------------------------------------- */

static uint64_t min_ns(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

/*
 * Fires the timers that are due and returns the next one (UINT64_MAX:
 * none): the timeout sends SIGTERM, the grace after it SIGKILL, and once
 * SIGKILL is ESCAPE_NS old a still-open pipe is given up. Under p->lock.
 */
static uint64_t run_timers(pc_process_t *p, uint64_t now, bool pipe_open)
{
	if (p->deadline_ns && !p->term_ns && now >= p->deadline_ns) {
		p->timed_out = true;
		signal_group(p, now);
	}
	if (p->term_ns && !p->kill_ns && now >= p->term_ns + p->grace_ns)
		signal_group(p, now);
	uint64_t next = UINT64_MAX;
	if (p->deadline_ns && !p->term_ns)
		next = p->deadline_ns;
	if (p->term_ns && !p->kill_ns)
		next = min_ns(next, p->term_ns + p->grace_ns);
	if (p->kill_ns && pipe_open)
		next = min_ns(next, p->kill_ns + ESCAPE_NS);
	return next;
}

/* How the command ended, from the supervisor that has exited with
 * `status` (r: waitpid's return). Under p->lock. */
static void record_end(pc_process_t *p, pid_t r, int status)
{
	pc_exec_report_t rep = {0};
	ssize_t n;
	do
		n = read(p->status_fd, &rep, sizeof(rep));
	while (n < 0 && errno == EINTR);
	if (n == (ssize_t)sizeof(rep) && rep.kind == PC_EXEC_REPORT_EXITED) {
		p->state = PC_PROCESS_EXITED;
		p->code = rep.value;
	} else if (n == (ssize_t)sizeof(rep) && rep.kind == PC_EXEC_REPORT_SIGNALED) {
		p->state = PC_PROCESS_SIGNALED;
		p->code = rep.value;
	} else if (r > 0 && WIFSIGNALED(status)) {
		/* The supervisor was killed before it could tell. */
		p->state = PC_PROCESS_SIGNALED;
		p->code = WTERMSIG(status);
	} else {
		/* r < 0 (ECHILD): the status is lost (the embedder ignores
		 * SIGCHLD, or reaped it): read as -1. */
		p->state = PC_PROCESS_EXITED;
		p->code = -1;
	}
	if (p->timed_out)
		p->state = PC_PROCESS_TIMED_OUT;
}

/* Once the supervisor is gone: kills what is left in the command's
 * cgroup and removes it. The supervisor normally left nothing (then this
 * is one write and one rmdir); a command that killed its supervisor may
 * have. Bounded (exec_cgroup.h), so it may run under p->lock. */
static void end_cgroup(pc_process_t *p)
{
	if (!p->cgroup)
		return;
	pc__exec_cgroup_end(p->cgroup);
	free(p->cgroup);
	p->cgroup = NULL;
}

/* Reaps the supervisor if it has exited, empties the command's cgroup
 * (so that the state says ended only once nothing of the tree runs) and
 * records how the command ended. Under p->lock. */
static bool try_reap(pc_process_t *p)
{
	int status = 0;
	pid_t r;
	do
		r = waitpid(p->pid, &status, WNOHANG);
	while (r < 0 && errno == EINTR);
	if (r == 0)
		return false;
	end_cgroup(p);
	record_end(p, r, status);
	return true;
}

/* The process has been reaped: close up, and take the one to wake. Under
 * p->lock. */
static pc_actor_t *ended_locked(pc_process_t *p)
{
	p->ended_ns = pc__clock_mono_ns();
	if (p->evfd >= 0)
		close(p->evfd);
	p->evfd = -1;
	pc_actor_t *who = p->notify;
	p->notify = NULL;
	pthread_cond_broadcast(&p->ended);
	return who;
}

static void notify_end(pc_process_t *p, pc_actor_t *who)
{
	if (who) {
		/* A wake for an invocation that is over is dropped by it. */
		pc_tool_wake(who, p->token);
		pc_actor_release(who);
	}
}

/* Reads what is there. False once the pipe is done (EOF or an error). */
static bool read_some(pc_process_t *p)
{
	char chunk[READ_CHUNK];
	ssize_t n = read(p->fd, chunk, sizeof(chunk));
	if (n > 0) {
		pthread_mutex_lock(&p->lock);
		ring_append(p, chunk, (size_t)n);
		pthread_mutex_unlock(&p->lock);
		return true;
	}
	return n < 0 && (errno == EINTR || errno == EAGAIN);
}

static int poll_timeout_ms(uint64_t next, uint64_t now, int cap_ms)
{
	if (next == UINT64_MAX)
		return cap_ms;
	uint64_t ms = next > now ? (next - now + 999999u) / 1000000u : 0;
	if (cap_ms >= 0 && ms > (uint64_t)cap_ms)
		return cap_ms;
	return ms > INT32_MAX ? INT32_MAX : (int)ms;
}

static pc_msg_t *reader_run(void *arg)
{
	pc_process_t *p = arg;
	bool pipe_open = true;
	int reap_wait_ms = 1;
	pc_actor_t *who = NULL;
	for (;;) {
		uint64_t now = pc__clock_mono_ns();
		pthread_mutex_lock(&p->lock);
		uint64_t next = run_timers(p, now, pipe_open);
		if (pipe_open && p->kill_ns && now >= p->kill_ns + ESCAPE_NS) {
			/* A process out of the supervisor's reach holds the
			 * pipe, or the supervisor does not answer: give the pipe
			 * up and SIGKILL the supervisor (not reaped yet, so not
			 * reused); the command's parent-death signal kills it,
			 * and its cgroup, where it has one, the holder. */
			pipe_open = false;
			send_signal(p->pid, SIGKILL);
		}
		if (!pipe_open && try_reap(p)) {
			who = ended_locked(p);
			pthread_mutex_unlock(&p->lock);
			break;
		}
		struct pollfd fds[2] = {{.fd = p->evfd, .events = POLLIN}, {.fd = pipe_open ? p->fd : -1, .events = POLLIN}};
		pthread_mutex_unlock(&p->lock);
		/* Once the pipe is closed nothing signals the child's exit:
		 * look again soon, backing off. */
		int cap = pipe_open ? -1 : reap_wait_ms;
		if (!pipe_open && reap_wait_ms < REAP_POLL_MAX_MS)
			reap_wait_ms *= 2;
		int r = poll(fds, 2, poll_timeout_ms(next, now, cap));
		if (r < 0 && errno != EINTR)
			pipe_open = false; /* cannot wait on it: reap and end */
		if (r <= 0)
			continue;
		uint64_t v;
		if ((fds[0].revents & POLLIN) && read(fds[0].fd, &v, sizeof(v)) < 0) {
			/* EAGAIN: already drained; awake either way. */
		}
		if (pipe_open && (fds[1].revents & (POLLIN | POLLHUP | POLLERR)))
			pipe_open = read_some(p);
	}
	close(p->fd);
	close(p->status_fd);
	p->fd = p->status_fd = -1;
	notify_end(p, who);
	pc_process_release(p);
	return NULL;
}

/* Asks the supervisor to SIGKILL the tree and waits until it has done so
 * and exited. Returns waitpid's result, with its status. */
static pid_t kill_and_wait(pc_process_t *p, int *status)
{
	pid_t r;
	send_signal(p->pid, PC_EXEC_SUP_KILL);
	while ((r = waitpid(p->pid, status, 0)) < 0 && errno == EINTR)
		;
	return r;
}

/* The runtime stopped before the reader ran: kill, reap, end. */
static void reader_discard(void *arg)
{
	pc_process_t *p = arg;
	close(p->fd);
	p->fd = -1;
	int status = 0;
	pthread_mutex_lock(&p->lock);
	pid_t r = kill_and_wait(p, &status);
	end_cgroup(p);
	record_end(p, r, status);
	close(p->status_fd);
	p->status_fd = -1;
	pc_actor_t *who = ended_locked(p);
	pthread_mutex_unlock(&p->lock);
	notify_end(p, who);
	pc_process_release(p);
}

/* ---- spawning ------------------------------------------------------------ */

/* Reads the supervisor's first report: 0 once the command runs (its pid
 * in p->cmd), else an errno value. */
static int read_start(pc_process_t *p)
{
	pc_exec_report_t rep = {0};
	ssize_t n;
	do
		n = read(p->status_fd, &rep, sizeof(rep));
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return errno;
	if (n != (ssize_t)sizeof(rep) || (rep.kind != PC_EXEC_REPORT_STARTED && rep.kind != PC_EXEC_REPORT_FAILED))
		return EIO; /* it died before it could tell */
	if (rep.kind == PC_EXEC_REPORT_FAILED)
		return rep.value > 0 ? rep.value : EIO;
	p->cmd = (pid_t)rep.value;
	return 0;
}

/* Starts the supervisor and, through it, the command (in a cgroup of its
 * own under `cgroup_base` when that is not NULL and one can be made);
 * waits until the command was exec'd (or could not be). PC_ESYS with
 * errno set. */
static int start_process(pc_process_t *p, const pc_process_spawn_t *req, const char *cgroup_base)
{
	int pipefd[2], st[2];
	if (pipe2(pipefd, O_CLOEXEC) != 0)
		return PC_ESYS;
	if (pipe2(st, O_CLOEXEC) != 0) {
		int saved = errno;
		close(pipefd[0]);
		close(pipefd[1]);
		errno = saved;
		return PC_ESYS;
	}
	p->status_fd = st[0];
	p->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	int err = p->evfd < 0 ? errno : 0;
	if (!err && fcntl(pipefd[0], F_SETFL, O_NONBLOCK) != 0)
		err = errno;
	bool started = false;
	if (!err) {
		/* A cgroup that cannot be made leaves p->cgroup NULL: the
		 * command runs without one. */
		if (cgroup_base)
			(void)pc__exec_cgroup_make(cgroup_base, &p->cgroup);
		pc_exec_sup_req_t sr = {.path = req->path, .argv = req->argv, .envp = req->envp, .cwd = req->cwd,
					.out_fd = pipefd[1], .status_fd = st[1], .cgroup = p->cgroup};
		err = pc__exec_supervisor_start(&sr, &p->pid);
		started = err == 0;
	}
	close(pipefd[1]);
	close(st[1]);
	if (started)
		err = read_start(p);
	/* The last report is read once the supervisor was reaped: it is there
	 * or never comes, so the read must not wait. */
	if (!err && fcntl(p->status_fd, F_SETFL, O_NONBLOCK) != 0)
		err = errno;
	if (err) {
		if (started) {
			int status;
			pthread_mutex_lock(&p->lock);
			kill_and_wait(p, &status);
			pthread_mutex_unlock(&p->lock);
		}
		end_cgroup(p);
		close(pipefd[0]);
		close(p->status_fd);
		if (p->evfd >= 0)
			close(p->evfd);
		p->status_fd = p->evfd = -1;
		errno = err;
		return PC_ESYS;
	}
	p->fd = pipefd[0];
	uint64_t now = pc__clock_mono_ns();
	p->deadline_ns = req->timeout_ms ? now + req->timeout_ms * 1000000u : 0;
	return 0;
}

/* A process whose reader could not be queued: kill and reap it here. */
static void abandon_process(pc_process_t *p)
{
	int status;
	pthread_mutex_lock(&p->lock);
	kill_and_wait(p, &status);
	end_cgroup(p);
	pthread_mutex_unlock(&p->lock);
	close(p->fd);
	close(p->status_fd);
	close(p->evfd);
	p->fd = p->status_fd = p->evfd = -1;
}

/* ---- the table ------------------------------------------------------------ */

int pc_process_table_new(const pc_process_table_config_t *cfg, pc_process_table_t **out)
{
	if (!out)
		return PC_EINVAL;
	pc_process_table_t *t = calloc(1, sizeof(*t));
	if (!t)
		return PC_ENOMEM;
	t->max = cfg && cfg->max_processes ? cfg->max_processes : PC_PROCESS_DEFAULT_MAX;
	t->max_running = cfg && cfg->max_running ? cfg->max_running : PC_PROCESS_DEFAULT_RUNNING;
	t->ttl_ns = (cfg && cfg->ttl_ms ? cfg->ttl_ms : PC_PROCESS_DEFAULT_TTL_MS) * 1000000u;
	t->procs = calloc(t->max, sizeof(*t->procs));
	if (!t->procs || pthread_mutex_init(&t->lock, NULL) != 0) {
		free(t->procs);
		free(t);
		return PC_ENOMEM;
	}
	/* Probed once here, not per command: no cgroup2, or no right to
	 * make a child cgroup, leaves the supervisor alone at work. */
	if (!(cfg && cfg->no_cgroup))
		t->cgroup_base = pc__exec_cgroup_base();
	*out = t;
	return 0;
}

static void remove_at(pc_process_table_t *t, size_t i)
{
	pc_process_t *p = t->procs[i];
	memmove(&t->procs[i], &t->procs[i + 1], (t->n - i - 1) * sizeof(*t->procs));
	t->n--;
	pc_process_release(p);
}

/* What the table needs to know of a record, read under its lock. */
typedef struct look {
	bool running;
	bool forgotten;
	uint64_t ended_ns;
} look_t;

static look_t look_at(pc_process_t *p)
{
	pthread_mutex_lock(&p->lock);
	look_t l = {p->state == PC_PROCESS_RUNNING, p->forgotten, p->ended_ns};
	pthread_mutex_unlock(&p->lock);
	return l;
}

/*
 * Drops the finished records that were forgotten or have outlived the TTL
 * (a forgotten one that still runs stays until it ends: it holds a reader
 * and counts as running). With `need_slot`, then says whether one more may
 * start: not while max_running run; and when the table is full, only by
 * dropping the oldest finished record. Under t->lock.
 */
static bool make_room(pc_process_table_t *t, bool need_slot)
{
	uint64_t now = pc__clock_mono_ns();
	size_t running = 0;
	for (size_t i = 0; i < t->n;) {
		look_t l = look_at(t->procs[i]);
		/* Written as a sum, a record that ended after `now` was read
		 * has not outlived anything yet. */
		if (!l.running && (l.forgotten || l.ended_ns + t->ttl_ns <= now)) {
			remove_at(t, i);
			continue;
		}
		running += l.running;
		i++;
	}
	if (!need_slot)
		return true;
	if (running >= t->max_running)
		return false;
	for (size_t i = 0; t->n >= t->max && i < t->n; i++) {
		if (!look_at(t->procs[i]).running) {
			remove_at(t, i);
			break;
		}
	}
	return t->n < t->max;
}

int pc_process_spawn(pc_process_table_t *t, pc_runtime_t *rt, const pc_process_spawn_t *req, pc_process_t **out)
{
	if (!t || !rt || !req || !req->path || !req->argv || !req->argv[0] || !req->envp || !req->cwd || !out)
		return PC_EINVAL;
	pc_process_t *p = record_new(req);
	if (!p)
		return PC_ENOMEM;
	/* The table stays locked from the room check to the insertion, so
	 * that two spawns cannot both take the last slot. */
	pthread_mutex_lock(&t->lock);
	int rc = make_room(t, true) ? start_process(p, req, t->cgroup_base) : PC_ELIMIT;
	if (rc == 0) {
		snprintf(p->id, sizeof(p->id), "p%llu", (unsigned long long)++t->next_id);
		rc = pc_blocking_submit(rt, reader_run, reader_discard, pc_process_retain(p), NULL);
		if (rc != 0) {
			pc_process_release(p); /* the reader's reference */
			abandon_process(p);
		}
	}
	if (rc == 0)
		t->procs[t->n++] = pc_process_retain(p);
	pthread_mutex_unlock(&t->lock);
	if (rc != 0) {
		int saved = errno;
		pc_process_release(p);
		errno = saved;
		return rc;
	}
	*out = p;
	return 0;
}

int pc_process_find(pc_process_table_t *t, const char *id, pc_process_t **out)
{
	if (!t || !id || !out)
		return PC_EINVAL;
	int rc = PC_ENOTFOUND;
	pthread_mutex_lock(&t->lock);
	make_room(t, false);
	for (size_t i = 0; i < t->n; i++) {
		if (strcmp(t->procs[i]->id, id) == 0 && !look_at(t->procs[i]).forgotten) {
			*out = pc_process_retain(t->procs[i]);
			rc = 0;
			break;
		}
	}
	pthread_mutex_unlock(&t->lock);
	return rc;
}

int pc_process_list(pc_process_table_t *t, pc_process_info_t **out, size_t *n)
{
	if (!t || !out || !n)
		return PC_EINVAL;
	int rc = 0;
	*out = NULL;
	*n = 0;
	pthread_mutex_lock(&t->lock);
	make_room(t, false);
	if (t->n) {
		*out = calloc(t->n, sizeof(**out));
		if (!*out)
			rc = PC_ENOMEM;
	}
	for (size_t i = 0; rc == 0 && i < t->n; i++)
		if (!look_at(t->procs[i]).forgotten)
			pc_process_info(t->procs[i], &(*out)[(*n)++]);
	if (*n == 0) {
		free(*out);
		*out = NULL;
	}
	pthread_mutex_unlock(&t->lock);
	return rc;
}

void pc_process_forget(pc_process_t *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	p->forgotten = true;
	pthread_mutex_unlock(&p->lock);
}

/* Whether p runs now. */
static bool running(pc_process_t *p)
{
	pthread_mutex_lock(&p->lock);
	bool r = p->state == PC_PROCESS_RUNNING;
	pthread_mutex_unlock(&p->lock);
	return r;
}

/* Applies `kill` (or counts, when false) to every process of the session:
 * how many were killed, or are running. */
static size_t of_session(pc_process_table_t *t, const char *session_key, bool kill)
{
	if (!t || !session_key)
		return 0;
	size_t n = 0;
	pthread_mutex_lock(&t->lock);
	for (size_t i = 0; i < t->n; i++) {
		pc_process_t *p = t->procs[i];
		/* The key is set at spawn and never changes: no lock to read it. */
		if (!p->session || strcmp(p->session, session_key) != 0)
			continue;
		n += kill ? pc_process_kill(p) == 0 : running(p);
	}
	pthread_mutex_unlock(&t->lock);
	return n;
}

size_t pc_process_table_end_session(pc_process_table_t *t, const char *session_key)
{
	return of_session(t, session_key, true);
}

size_t pc_process_table_session_running(pc_process_table_t *t, const char *session_key)
{
	return of_session(t, session_key, false);
}

/* Waits until the process ended or `until` (monotonic ns) passed. */
static bool wait_ended(pc_process_t *p, uint64_t until)
{
	struct timespec ts = {(time_t)(until / 1000000000u), (long)(until % 1000000000u)};
	pthread_mutex_lock(&p->lock);
	/* 0 is a wake-up (maybe spurious); anything else, ETIMEDOUT above
	 * all, ends the wait. */
	while (p->state == PC_PROCESS_RUNNING && pthread_cond_timedwait(&p->ended, &p->lock, &ts) == 0)
		;
	bool ended = p->state != PC_PROCESS_RUNNING;
	pthread_mutex_unlock(&p->lock);
	return ended;
}

void pc_process_table_free(pc_process_table_t *t)
{
	if (!t)
		return;
	uint64_t now = pc__clock_mono_ns();
	uint64_t grace = 0;
	for (size_t i = 0; i < t->n; i++) {
		pc_process_t *p = t->procs[i];
		pthread_mutex_lock(&p->lock);
		if (p->state == PC_PROCESS_RUNNING) {
			if (!p->term_ns)
				signal_group(p, now);
			grace = p->grace_ns > grace ? p->grace_ns : grace;
		}
		pthread_mutex_unlock(&p->lock);
	}
	/* The readers escalate to SIGKILL themselves; a reader still queued
	 * behind other blocking jobs cannot, so SIGKILL whatever outlived the
	 * grace, then give the readers a last bounded moment to reap. */
	uint64_t until = now + grace + FREE_EXTRA_NS;
	for (size_t i = 0; i < t->n; i++) {
		pc_process_t *p = t->procs[i];
		if (wait_ended(p, now + grace + ESCAPE_NS))
			continue;
		pthread_mutex_lock(&p->lock);
		if (p->state == PC_PROCESS_RUNNING && !p->kill_ns)
			signal_group(p, pc__clock_mono_ns());
		pthread_mutex_unlock(&p->lock);
		wait_ended(p, until);
	}
	for (size_t i = 0; i < t->n; i++)
		pc_process_release(t->procs[i]);
	free(t->procs);
	free(t->cgroup_base);
	pthread_mutex_destroy(&t->lock);
	free(t);
}

const char *pc_process_table_cgroup(const pc_process_table_t *t)
{
	return t ? t->cgroup_base : NULL;
}

/* ---- output ------------------------------------------------------------- */

/* Copies the kept bytes at absolute offsets [from, total). Under p->lock.
 * The caller frees *out (n + 1 bytes, NUL-terminated). */
static char *copy_from(const pc_process_t *p, uint64_t from, size_t *n)
{
	uint64_t first = p->total - p->len;
	size_t skip = (size_t)(from - first);
	*n = p->len - skip;
	char *s = malloc(*n + 1);
	if (!s)
		return NULL;
	for (size_t i = 0; i < *n; i++)
		s[i] = p->buf[(p->start + skip + i) % p->size];
	s[*n] = '\0';
	return s;
}

/* The output from absolute offset `want` on, as text: what is still kept
 * of it; *lost counts the bytes that are not. Under p->lock. The caller
 * frees the result. */
static char *text_from(const pc_process_t *p, uint64_t want, uint64_t *lost)
{
	uint64_t first = p->total - p->len;
	uint64_t from = want > first ? want : first;
	size_t n;
	char *body = copy_from(p, from, &n);
	if (!body)
		return NULL;
	/* A cut in the middle of a character: drop its tail bytes too. */
	size_t lead = 0;
	if (from > want)
		while (lead < n && lead < 3 && ((unsigned char)body[lead] & 0xC0u) == 0x80u)
			lead++;
	/* NUL and what is not UTF-8 become U+FFFD: the text goes to a model. */
	char *text = pc_utf8_scrub(body + lead, n - lead, NULL);
	free(body);
	*lost = from - want + lead;
	return text;
}

/* `body` (taken) after the truncation marker when bytes were lost. */
static int with_marker(uint64_t lost, char *body, char **text)
{
	if (!body)
		return PC_ENOMEM;
	if (!lost) {
		*text = body;
		return 0;
	}
	int r = asprintf(text, "[... %llu bytes truncated]\n%s", (unsigned long long)lost, body);
	free(body);
	return r < 0 ? PC_ENOMEM : 0;
}

/* Lines [from_line, from_line + max_lines) of `s`, in place. */
static void select_lines(char *s, size_t from_line, size_t max_lines)
{
	char *b = s;
	for (size_t i = 0; i < from_line && *b; i++) {
		char *nl = strchr(b, '\n');
		b = nl ? nl + 1 : b + strlen(b);
	}
	char *e = b;
	for (size_t i = 0; max_lines && i < max_lines && *e; i++) {
		char *nl = strchr(e, '\n');
		e = nl ? nl + 1 : e + strlen(e);
	}
	if (max_lines)
		*e = '\0';
	memmove(s, b, strlen(b) + 1);
}

int pc_process_output(pc_process_t *p, size_t from_line, size_t max_lines, char **text)
{
	if (!p || !text)
		return PC_EINVAL;
	uint64_t lost = 0;
	pthread_mutex_lock(&p->lock);
	char *body = text_from(p, 0, &lost);
	pthread_mutex_unlock(&p->lock);
	if (body && (from_line || max_lines))
		select_lines(body, from_line, max_lines);
	/* The marker belongs before the first line kept. */
	return with_marker(from_line ? 0 : lost, body, text);
}

int pc_process_poll(pc_process_t *p, char **text)
{
	if (!p || !text)
		return PC_EINVAL;
	uint64_t lost = 0;
	pthread_mutex_lock(&p->lock);
	char *body = text_from(p, p->poll_off, &lost);
	if (body)
		p->poll_off = p->total;
	pthread_mutex_unlock(&p->lock);
	return with_marker(lost, body, text);
}

void pc_process_status_text(const pc_process_info_t *info, char *buf, size_t n)
{
	if (!buf || !n)
		return;
	if (!info) {
		buf[0] = '\0';
		return;
	}
	switch (info->state) {
	case PC_PROCESS_RUNNING: snprintf(buf, n, "running"); break;
	case PC_PROCESS_EXITED: snprintf(buf, n, "exit code %d", info->code); break;
	case PC_PROCESS_SIGNALED: snprintf(buf, n, "killed by signal %d", info->code); break;
	case PC_PROCESS_TIMED_OUT:
		snprintf(buf, n, "timed out after %g s", (double)info->timeout_ms / 1000.0);
		break;
	default: snprintf(buf, n, "unknown"); break;
	}
}
