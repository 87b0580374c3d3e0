/*
 * The supervisor of one exec command (exec_supervisor.h).
 *
 * It is a fork of a multi-threaded process that never execs, so after the
 * fork it calls only async-signal-safe functions: no malloc, no stdio, no
 * locks. It lives on the stack of the thread that forked it.
 *
 * The supervisor blocks every signal and takes the ones it acts on with
 * sigtimedwait, so nothing runs asynchronously in it:
 *   - SIGCHLD: the command, or an adopted orphan, ended;
 *   - PC_EXEC_SUP_TERM / _KILL: Pincer asks for the tree to be stopped;
 *   - SIGHUP: its parent-death signal. It fires when the *thread* that
 *     forked the supervisor exits, not only when Pincer does, so the
 *     supervisor looks at getppid(): while the parent is the same process
 *     (the child was handed to another of its threads) nothing happened.
 *
 * Finding the tree: /proc/<pid>/task/<pid>/children lists the
 * supervisor's own children (it is single-threaded), which are the
 * command, and every orphan of the tree, since a subreaper adopts them.
 * Killing the direct children over and over kills the whole tree: when
 * one dies its children become the supervisor's, and the next round finds
 * them. A process killed by SIGKILL forks no more, so the rounds end.
 */
#include "exec_supervisor.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* The parent-death signal of the supervisor (blocked: it only wakes it). */
#define SUP_PDEATHSIG SIGHUP
/* While the tree is being reaped, a new look for adopted orphans this
 * often. */
#define REAP_ROUND_NS 20000000L

/* ---- small async-signal-safe helpers --------------------------------------- */

/* Writes one report; a pipe write this small is atomic. A reader that is
 * gone (EPIPE is ignored: SIGPIPE is blocked) needs nothing done. */
static void report(int fd, int32_t kind, int32_t value)
{
	pc_exec_report_t r = {kind, value};
	ssize_t n;
	do
		n = write(fd, &r, sizeof(r));
	while (n < 0 && errno == EINTR);
}

/* Appends the decimal form of v (> 0) at p; returns the end. */
static char *put_uint(char *p, unsigned long v)
{
	char tmp[24];
	size_t n = 0;
	do
		tmp[n++] = (char)('0' + v % 10);
	while ((v /= 10) != 0);
	while (n)
		*p++ = tmp[--n];
	return p;
}

static char *put_str(char *p, const char *s)
{
	while (*s)
		*p++ = *s++;
	return p;
}

/*
 * Sends `sig` to every child of the supervisor, read from /proc. Returns
 * how many it found. Without /proc (or without CONFIG_PROC_CHILDREN) it
 * finds none, and only the command's group is signalled (by the caller).
 */
static int signal_children(pid_t self, int sig)
{
	char path[64];
	char *p = put_str(path, "/proc/");
	p = put_uint(p, (unsigned long)self);
	p = put_str(p, "/task/");
	p = put_uint(p, (unsigned long)self);
	p = put_str(p, "/children");
	*p = '\0';
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	/* "pid pid pid " in chunks; a number may straddle two of them. */
	char buf[512];
	unsigned long pid = 0;
	bool in_num = false;
	int found = 0;
	for (;;) {
		ssize_t n = read(fd, buf, sizeof(buf));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		for (ssize_t i = 0; i < n; i++) {
			if (buf[i] >= '0' && buf[i] <= '9') {
				pid = pid * 10 + (unsigned long)(buf[i] - '0');
				in_num = true;
			} else if (in_num) {
				/* A failure is ESRCH (it is gone already): nothing to do. */
				(void)kill((pid_t)pid, sig);
				found++;
				pid = 0;
				in_num = false;
			}
		}
	}
	if (in_num) {
		(void)kill((pid_t)pid, sig);
		found++;
	}
	close(fd);
	return found;
}

/* `sig` to the command's group (its pid) and to every child. */
static void signal_tree(pid_t self, pid_t cmd, int sig)
{
	(void)kill(-cmd, sig); /* ESRCH: the group is empty */
	(void)signal_children(self, sig);
}

/*
 * SIGKILLs the tree and reaps every child until none is left. The
 * supervisor's children are only the command and what it adopted from
 * it, so waiting for any child steals no one's exit status. The group is
 * signalled once, while the command is not reaped yet (so its id is not
 * a reused one); a member that outlives that round is in the subtree and
 * found as a child in a later one.
 */
static void kill_and_reap_all(pid_t self, pid_t cmd)
{
	sigset_t chld;
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	(void)kill(-cmd, SIGKILL);
	for (;;) {
		(void)signal_children(self, SIGKILL);
		siginfo_t si;
		int r;
		do {
			si.si_pid = 0;
			r = waitid(P_ALL, 0, &si, WEXITED | WNOHANG);
		} while (r == 0 && si.si_pid != 0);
		if (r < 0 && errno == ECHILD)
			return;
		/* Children left, dying: wait for the next to end, and look
		 * again for orphans they hand over meanwhile. */
		struct timespec ts = {0, REAP_ROUND_NS};
		(void)sigtimedwait(&chld, NULL, &ts);
	}
}

/* ---- the command ------------------------------------------------------------ */

/* Makes `fd` one of 0, 1, 2 (`to`); false on failure. */
static bool move_fd(int fd, int to)
{
	return fd == to ? fcntl(fd, F_SETFD, 0) == 0 : dup2(fd, to) == to;
}

/* Moves the calling process into the cgroup `dir`. A failure leaves it
 * where it was: the cgroup is an extra layer, and the supervisor's
 * subtree still holds the command. */
static void join_cgroup(const char *dir)
{
	char procs[4096];
	if (strlen(dir) > sizeof(procs) - sizeof("/cgroup.procs"))
		return;
	*put_str(put_str(procs, dir), "/cgroup.procs") = '\0';
	int fd = open(procs, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	ssize_t n;
	do
		n = write(fd, "0", 1); /* "0": the writer itself */
	while (n < 0 && errno == EINTR);
	close(fd);
}

/*
 * In the command's child: its cgroup, if it has one (first, so that all it
 * starts is in it), its own process group, SIGKILL when the
 * supervisor dies, default dispositions and an empty mask, stdin from
 * /dev/null, stdout and stderr into the pipe, the working directory, then
 * exec. On failure the errno goes to `chk` (close-on-exec: a successful
 * exec closes it, which is how the supervisor tells the two apart).
 */
static _Noreturn void run_command(const pc_exec_sup_req_t *req, bool in_cgroup, int out, int chk, pid_t sup)
{
	int err = 0;
	struct sigaction dfl = {.sa_handler = SIG_DFL};
	sigemptyset(&dfl.sa_mask);
	for (int s = 1; s < NSIG; s++)
		(void)sigaction(s, &dfl, NULL); /* EINVAL for SIGKILL, SIGSTOP and the reserved ones */
	if (req->cgroup && !in_cgroup)
		join_cgroup(req->cgroup);
	if (setpgid(0, 0) != 0 || prctl(PR_SET_PDEATHSIG, SIGKILL) != 0)
		err = errno;
	else if (getppid() != sup)
		err = ESRCH; /* the supervisor is gone already */
	int nul = err ? -1 : open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (!err && nul < 0)
		err = errno;
	if (!err && (!move_fd(out, 1) || !move_fd(out, 2) || !move_fd(nul, 0) || chdir(req->cwd) != 0))
		err = errno;
	sigset_t none;
	sigemptyset(&none);
	if (!err && sigprocmask(SIG_SETMASK, &none, NULL) != 0)
		err = errno;
	if (!err) {
		execve(req->path, req->argv, req->envp);
		err = errno;
	}
	int32_t e = err;
	ssize_t n;
	do
		n = write(chk, &e, sizeof(e));
	while (n < 0 && errno == EINTR);
	_exit(127);
}

/* ---- the supervisor --------------------------------------------------------- */

/* Closes every descriptor from 3 up but `a` and `b` (a < b). */
static void close_others(int a, int b)
{
	if (a > 3)
		(void)close_range(3, (unsigned)a - 1, 0);
	if (b > a + 1)
		(void)close_range((unsigned)a + 1, (unsigned)b - 1, 0);
	if (close_range((unsigned)b + 1, ~0u, 0) != 0) {
		/* A kernel before 5.9: one by one, as far as the limit goes. */
		long max = sysconf(_SC_OPEN_MAX);
		for (long fd = b + 1; fd < (max > 0 && max < 65536 ? max : 65536); fd++)
			(void)close((int)fd);
		for (int fd = 3; fd < a; fd++)
			(void)close(fd);
		for (int fd = a + 1; fd < b; fd++)
			(void)close(fd);
	}
}

/*
 * Keeps only what the supervisor needs: the pipe and the report channel
 * (moved above 2, close-on-exec), everything else closed (a copy of a
 * client's socket here would keep it open after Pincer closed it; a copy
 * of another command's pipe would keep that one's reader from its EOF),
 * and 0, 1, 2 on /dev/null. False on failure.
 */
static bool own_descriptors(const pc_exec_sup_req_t *req, int *out, int *status)
{
	int o = fcntl(req->out_fd, F_DUPFD_CLOEXEC, 3);
	int s = fcntl(req->status_fd, F_DUPFD_CLOEXEC, 3);
	if (o < 0 || s < 0)
		return false;
	close_others(o < s ? o : s, o < s ? s : o);
	int nul = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (nul < 0)
		return false;
	bool ok = dup2(nul, 0) == 0 && dup2(nul, 1) == 1 && dup2(nul, 2) == 2;
	if (nul > 2)
		close(nul);
	*out = o;
	*status = s;
	return ok;
}

/*
 * Forks the command's process. With a cgroup, it is born in it where
 * clone3 can (CLONE_INTO_CGROUP, Linux 5.7): a process moved into a
 * cgroup afterwards waits for the kernel's cgroup write lock, an RCU grace
 * period of several milliseconds per command. Else a plain fork, whose
 * child joins the cgroup itself (*in_cgroup false).
 */
static pid_t fork_command(const char *cgroup, bool *in_cgroup)
{
	*in_cgroup = false;
	int fd = cgroup ? open(cgroup, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
	if (fd >= 0) {
		struct clone_args a = {.flags = CLONE_INTO_CGROUP, .exit_signal = SIGCHLD, .cgroup = (uint64_t)fd};
		long pid = syscall(SYS_clone3, &a, sizeof(a));
		if (pid >= 0) {
			*in_cgroup = true;
			if (pid > 0)
				close(fd);
			return (pid_t)pid;
		}
		/* ENOSYS, EINVAL or E2BIG on an older kernel: the plain way */
		close(fd);
	}
	return fork();
}

/* Starts the command; its pid, or -1 with the errno reported. */
static pid_t start_command(const pc_exec_sup_req_t *req, int out, int status, pid_t self)
{
	int chk[2];
	if (pipe2(chk, O_CLOEXEC) != 0) {
		report(status, PC_EXEC_REPORT_FAILED, errno);
		return -1;
	}
	bool in_cgroup;
	pid_t cmd = fork_command(req->cgroup, &in_cgroup);
	if (cmd == 0)
		run_command(req, in_cgroup, out, chk[1], self);
	int err = cmd < 0 ? errno : 0;
	close(chk[1]);
	int32_t e = 0;
	ssize_t n = 0;
	if (cmd > 0) {
		do
			n = read(chk[0], &e, sizeof(e));
		while (n < 0 && errno == EINTR);
	}
	close(chk[0]);
	if (n == (ssize_t)sizeof(e))
		err = e ? e : EIO;
	if (err) {
		if (cmd > 0)
			kill_and_reap_all(self, cmd);
		report(status, PC_EXEC_REPORT_FAILED, err);
		return -1;
	}
	report(status, PC_EXEC_REPORT_STARTED, cmd);
	return cmd;
}

/* True when the command has ended (it is left unreaped, so that its pid,
 * the group's id, is not reused while the group is signalled). */
static bool command_ended(pid_t cmd, siginfo_t *si)
{
	si->si_pid = 0;
	return waitid(P_PID, (id_t)cmd, si, WEXITED | WNOHANG | WNOWAIT) == 0 && si->si_pid == cmd;
}

/* Reaps the orphans that ended, leaving the command (not ended yet) be. */
static void reap_orphans(pid_t cmd)
{
	for (;;) {
		siginfo_t si = {0};
		if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) != 0 || si.si_pid == 0 || si.si_pid == cmd)
			return;
		(void)waitid(P_PID, (id_t)si.si_pid, &si, WEXITED | WNOHANG);
	}
}

static _Noreturn void supervise(const pc_exec_sup_req_t *req, pid_t parent)
{
	sigset_t all, wanted;
	sigfillset(&all);
	(void)sigprocmask(SIG_SETMASK, &all, NULL);
	/* A signal the caller ignores would be dropped, never pending. */
	static const int used[] = {SIGCHLD, PC_EXEC_SUP_TERM, PC_EXEC_SUP_KILL, SUP_PDEATHSIG};
	struct sigaction dfl = {.sa_handler = SIG_DFL};
	sigemptyset(&dfl.sa_mask);
	sigemptyset(&wanted);
	for (size_t i = 0; i < sizeof(used) / sizeof(used[0]); i++) {
		(void)sigaction(used[i], &dfl, NULL);
		sigaddset(&wanted, used[i]);
	}
	pid_t self = getpid();
	int out = -1, status = -1;
	if (!own_descriptors(req, &out, &status))
		_exit(127); /* no report channel to say why: read as a failure */
	if (prctl(PR_SET_PDEATHSIG, SUP_PDEATHSIG) != 0 || prctl(PR_SET_CHILD_SUBREAPER, 1) != 0 ||
	    setpgid(0, 0) != 0) {
		report(status, PC_EXEC_REPORT_FAILED, errno);
		_exit(127);
	}
	if (getppid() != parent)
		_exit(127); /* Pincer died before the signal was armed */
	pid_t cmd = start_command(req, out, status, self);
	if (cmd < 0)
		_exit(127);
	close(out);
	siginfo_t si;
	bool orphaned = false;
	for (;;) {
		int sig = sigwaitinfo(&wanted, NULL);
		if (sig == PC_EXEC_SUP_TERM)
			signal_tree(self, cmd, SIGTERM);
		else if (sig == PC_EXEC_SUP_KILL)
			signal_tree(self, cmd, SIGKILL);
		else if (sig == SUP_PDEATHSIG && getppid() != parent)
			orphaned = true; /* Pincer is gone: so is the tree */
		if (orphaned || command_ended(cmd, &si))
			break;
		reap_orphans(cmd);
	}
	bool ended = command_ended(cmd, &si);
	kill_and_reap_all(self, cmd);
	/* Pincer, which removes the command's cgroup, is gone: the now empty
	 * cgroup would stay. A failure (EBUSY: a process that left the
	 * subtree is still in it) leaves it, as nothing can be done here. */
	if (orphaned && req->cgroup)
		(void)rmdir(req->cgroup);
	if (ended && si.si_code == CLD_EXITED)
		report(status, PC_EXEC_REPORT_EXITED, si.si_status);
	else if (ended)
		report(status, PC_EXEC_REPORT_SIGNALED, si.si_status);
	else
		report(status, PC_EXEC_REPORT_SIGNALED, SIGKILL);
	_exit(0);
}

int pc__exec_supervisor_start(const pc_exec_sup_req_t *req, pid_t *pid)
{
	pid_t parent = getpid();
	pid_t p = fork();
	if (p < 0)
		return errno;
	if (p == 0)
		supervise(req, parent);
	*pid = p;
	return 0;
}
