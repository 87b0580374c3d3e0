/*
 * The session write lock (io/lock/session_lock.c), with real processes:
 * a second process is shut out and gets "session busy" after the timeout
 * the environment sets; a SIGKILLed holder's lock is reclaimed (at once,
 * and by a waiter); reentrancy only when asked and only within a process;
 * hostile session keys stay inside the lock directory; the query and the
 * overdue report say who holds a lock, since when, and whether for too
 * long; two processes hammering one session (and a sweep) never overlap.
 */
#include <criterion/criterion.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_util.h"
#include "io/lock/session_lock.h"
#include "runtime/runtime_internal.h"

/* ---- scratch directories ---- */

typedef struct scratch {
	char root[64];  /* mkdtemp */
	char dir[128];  /* root/locks: the lock directory */
} scratch_t;

static void scratch_new(scratch_t *s)
{
	snprintf(s->root, sizeof(s->root), "/tmp/pc-lock-XXXXXX");
	cr_assert_not_null(mkdtemp(s->root));
	snprintf(s->dir, sizeof(s->dir), "%s/locks", s->root);
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	(void)st;
	(void)flag;
	(void)f;
	return remove(p);
}

static void scratch_free(scratch_t *s)
{
	cr_assert_eq(nftw(s->root, rm_one, 8, FTW_DEPTH | FTW_PHYS), 0);
}

/* Entries of a directory other than . and .. (-1 if it cannot be read). */
static int count_entries(const char *dir)
{
	DIR *d = opendir(dir);
	if (!d)
		return -1;
	int n = 0;
	struct dirent *de;
	while ((de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			n++;
	closedir(d);
	return n;
}

static pc_session_lock_opts_t opts(int64_t timeout_ms, int64_t max_hold_ms, bool reentrant)
{
	pc_session_lock_opts_t o;
	pc_session_lock_opts_init(&o);
	o.timeout_ms = timeout_ms;
	o.max_hold_ms = max_hold_ms;
	o.allow_reentrant = reentrant;
	return o;
}

/* ---- child processes ---- */

enum { HOLD_UNTIL_TOLD, HOLD_THEN_DIE, TRY_ONCE_REENTRANT };

typedef struct kid {
	pid_t pid;
	int up;   /* child -> parent: 'A' when it holds the lock, or its result */
	int down; /* parent -> child: any byte means "release now" */
} kid_t;

/* Waits up to `ms` for a byte; returns it or -1. */
static int read_byte(int fd, int ms)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	char c;
	if (poll(&p, 1, ms) != 1 || read(fd, &c, 1) != 1)
		return -1;
	return (unsigned char)c;
}

static void write_byte(int fd, char c)
{
	cr_assert_eq(write(fd, &c, 1), 1);
}

/* The child's side: never returns, never uses Criterion. */
static void kid_main(int mode, const char *dir, const char *key, int64_t max_hold_ms, int arg_ms, int up, int down)
{
	pc_session_lock_opts_t o;
	pc_session_lock_opts_init(&o);
	o.timeout_ms = mode == TRY_ONCE_REENTRANT ? 0 : 5000;
	o.max_hold_ms = max_hold_ms;
	o.allow_reentrant = mode == TRY_ONCE_REENTRANT;
	pc_session_lock_t *l = NULL;
	int rc = pc_session_lock_acquire(dir, key, &o, &l, NULL);
	if (mode == TRY_ONCE_REENTRANT) {
		char c = rc == PC_EBUSY ? 'B' : rc == 0 ? 'A' : 'E';
		_exit(write(up, &c, 1) == 1 && (rc != 0 || pc_session_lock_release(l) == 0) ? 0 : 1);
	}
	if (rc != 0)
		_exit(10);
	if (write(up, "A", 1) != 1)
		_exit(11);
	if (mode == HOLD_THEN_DIE) {
		sleep_ms((unsigned)arg_ms);
		raise(SIGKILL);
	}
	if (read_byte(down, 10000) < 0)
		_exit(12);
	if (arg_ms)
		sleep_ms((unsigned)arg_ms);
	_exit(pc_session_lock_release(l) == 0 ? 0 : 13);
}

static kid_t kid_start(int mode, const char *dir, const char *key, int64_t max_hold_ms, int arg_ms)
{
	int up[2], down[2];
	cr_assert_eq(pipe2(up, O_CLOEXEC), 0);
	cr_assert_eq(pipe2(down, O_CLOEXEC), 0);
	fflush(NULL);
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		close(up[0]);
		close(down[1]);
		kid_main(mode, dir, key, max_hold_ms, arg_ms, up[1], down[0]);
	}
	close(up[1]);
	close(down[0]);
	return (kid_t){pid, up[0], down[1]};
}

/* Reaps the child within `ms` (killing it if it overstays); returns its
 * wait status. */
static int kid_reap(kid_t *k, unsigned ms)
{
	int st = 0;
	uint64_t until = now_ms() + ms;
	pid_t r;
	while ((r = waitpid(k->pid, &st, WNOHANG)) == 0 && now_ms() < until)
		sleep_ms(2);
	if (r == 0) {
		kill(k->pid, SIGKILL);
		waitpid(k->pid, &st, 0);
		cr_assert_fail("child %d did not finish in %u ms", (int)k->pid, ms);
	}
	if (k->up >= 0)
		close(k->up);
	if (k->down >= 0)
		close(k->down);
	return st;
}

static void kid_expect_exit0(kid_t *k)
{
	int st = kid_reap(k, 10000);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status 0x%x", st);
}

/* ---- one process ---- */

Test(lock, acquire_query_release)
{
	scratch_t s;
	scratch_new(&s);
	pc_session_lock_info_t info;
	cr_assert_eq(pc_session_lock_query(s.dir, "agent:main:main", &info), 0);
	cr_assert_not(info.held, "nothing held before the first acquire");

	pc_session_lock_t *l = NULL;
	int64_t before = (int64_t)time(NULL) * 1000 - 1000;
	cr_assert_eq(pc_session_lock_acquire(s.dir, "agent:main:main", NULL, &l, NULL), 0);
	cr_assert_not_null(l);
	cr_assert_eq(count_entries(s.dir), 1, "one lock file");

	cr_assert_eq(pc_session_lock_query(s.dir, "agent:main:main", &info), 0);
	cr_assert(info.held && info.record_ok && info.holder_alive);
	cr_assert_eq(info.pid, (int32_t)getpid());
	cr_assert_gt(info.starttime, 0);
	cr_assert_geq(info.acquired_at_ms, before);
	cr_assert_eq(info.max_hold_ms, PC_SESSION_LOCK_MAX_HOLD_MS);
	cr_assert_not(info.overdue);
	cr_assert_eq(strncmp(info.path, s.dir, strlen(s.dir)), 0);

	/* The record is the spec's JSON. */
	char buf[512] = "";
	int fd = open(info.path, O_RDONLY);
	cr_assert_geq(fd, 0);
	cr_assert_gt(read(fd, buf, sizeof(buf) - 1), 0);
	close(fd);
	char want[64];
	snprintf(want, sizeof(want), "{\"pid\":%d,\"starttime\":", (int)getpid());
	cr_assert_eq(strncmp(buf, want, strlen(want)), 0, "record: %s", buf);
	cr_assert(strstr(buf, "\"createdAt\":\"20") && strstr(buf, "Z\",\"acquiredAtMs\":") &&
		  strstr(buf, "\"maxHoldMs\":300000,\"sessionKey\":\"agent:main:main\"}\n"), "record: %s", buf);

	cr_assert_eq(pc_session_lock_release(l), 0);
	cr_assert_eq(pc_session_lock_query(s.dir, "agent:main:main", &info), 0);
	cr_assert_not(info.held, "the file stays, the lock does not");
	cr_assert_eq(count_entries(s.dir), 1);
	fd = open(info.path, O_RDONLY);
	cr_assert_geq(fd, 0);
	cr_assert_eq(read(fd, buf, 1), 1);
	close(fd);
	cr_assert_eq(buf[0], '-', "the record is voided on release");
	scratch_free(&s);
	ASSERT_NO_LEAKS();
}

Test(lock, bad_arguments)
{
	scratch_t s;
	scratch_new(&s);
	pc_session_lock_t *l = (pc_session_lock_t *)&s;
	pc_session_lock_info_t info;
	pc_session_lock_opts_t zero_hold = opts(0, 0, false);
	cr_assert_eq(pc_session_lock_acquire(s.dir, "", NULL, &l, NULL), PC_EINVAL);
	cr_assert_null(l, "*out is cleared on failure");
	cr_assert_eq(pc_session_lock_acquire(s.dir, NULL, NULL, &l, NULL), PC_EINVAL);
	cr_assert_eq(pc_session_lock_acquire("", "k", NULL, &l, NULL), PC_EINVAL);
	cr_assert_eq(pc_session_lock_acquire(s.dir, "k", NULL, NULL, NULL), PC_EINVAL);
	cr_assert_eq(pc_session_lock_acquire(s.dir, "k", &zero_hold, &l, NULL), PC_EINVAL);
	cr_assert_eq(pc_session_lock_query(s.dir, "", &info), PC_EINVAL);
	cr_assert_eq(pc_session_lock_query(s.dir, "k", NULL), PC_EINVAL);
	cr_assert_eq(pc_session_lock_release(NULL), PC_EINVAL);
	cr_assert_eq(pc_session_lock_overdue(NULL, NULL, NULL), PC_EINVAL);
	cr_assert_eq(pc_session_lock_busy_message(&info, NULL, 0), PC_EINVAL);
	/* A missing directory is created (one level), a missing parent is not. */
	char deep[200];
	snprintf(deep, sizeof(deep), "%s/no/such", s.root);
	cr_assert_eq(pc_session_lock_acquire(deep, "k", NULL, &l, NULL), PC_ESYS);
	scratch_free(&s);
	ASSERT_NO_LEAKS();
}

Test(lock, hostile_keys_stay_inside_the_lock_directory)
{
	scratch_t s;
	scratch_new(&s);
	static char longest[PC_SESSION_LOCK_MAX_KEY + 2];
	memset(longest, 'A', PC_SESSION_LOCK_MAX_KEY + 1);
	const char *keys[] = {
		"../../etc/passwd", "/etc/passwd", "..", ".", "a/b/c", "../locks/x", "x\n\"y\\\x01",
		"agent:main:telegram:group:-100123", "\xe2\x80\xae\xd0\xba\xd0\xbb\xd1\x8e\xd1\x87", longest + 1,
	};
	enum { N = sizeof(keys) / sizeof(keys[0]) };
	pc_session_lock_t *l[N];
	for (int i = 0; i < N; i++) {
		cr_assert_eq(pc_session_lock_acquire(s.dir, keys[i], NULL, &l[i], NULL), 0, "key #%d", i);
		pc_session_lock_info_t info;
		cr_assert_eq(pc_session_lock_query(s.dir, keys[i], &info), 0);
		cr_assert(info.held && info.record_ok, "key #%d: a record every reader parses", i);
	}
	/* Only the lock directory in the root; in it, one <64 hex>.lock per key. */
	cr_assert_eq(count_entries(s.root), 1);
	cr_assert_eq(count_entries(s.dir), N);
	DIR *d = opendir(s.dir);
	cr_assert_not_null(d);
	struct dirent *de;
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		cr_assert_eq(strlen(de->d_name), 69, "%s", de->d_name);
		cr_assert_eq(strspn(de->d_name, "0123456789abcdef"), 64, "%s", de->d_name);
		cr_assert_str_eq(de->d_name + 64, ".lock");
		cr_assert_eq(de->d_type, DT_REG);
	}
	closedir(d);
	/* Too long, or empty: refused, nothing created. */
	pc_session_lock_t *x = NULL;
	cr_assert_eq(pc_session_lock_acquire(s.dir, longest, NULL, &x, NULL), PC_EINVAL);
	cr_assert_eq(count_entries(s.dir), N);
	for (int i = 0; i < N; i++)
		cr_assert_eq(pc_session_lock_release(l[i]), 0);
	size_t removed = 0;
	cr_assert_eq(pc_session_lock_sweep(s.dir, &removed), 0);
	cr_assert_eq(removed, N);
	cr_assert_eq(count_entries(s.dir), 0);
	scratch_free(&s);
	ASSERT_NO_LEAKS();
}

/* Non-reentrant unless asked: a second acquire in the same process waits
 * like anyone else; with allow_reentrant it is counted, and the lock stays
 * until the last release. Reentrancy is per process: a forked child that
 * asks for it is still shut out. */
Test(lock, reentrancy_only_when_asked, .timeout = 30)
{
	scratch_t s;
	scratch_new(&s);
	const char *key = "agent:main:main";
	pc_session_lock_t *a = NULL, *b = NULL, *c = NULL;
	cr_assert_eq(pc_session_lock_acquire(s.dir, key, NULL, &a, NULL), 0);

	pc_session_lock_opts_t plain = opts(150, -1, false);
	pc_session_lock_info_t busy;
	uint64_t t0 = now_ms();
	cr_assert_eq(pc_session_lock_acquire(s.dir, key, &plain, &b, &busy), PC_EBUSY);
	cr_assert_geq(now_ms() - t0, 150, "waited out its timeout");
	cr_assert(busy.held && busy.record_ok);
	cr_assert_eq(busy.pid, (int32_t)getpid(), "we are the holder it names");
	cr_assert_null(b);

	pc_session_lock_opts_t re = opts(0, -1, true);
	cr_assert_eq(pc_session_lock_acquire(s.dir, key, &re, &b, NULL), 0);
	cr_assert_eq(pc_session_lock_acquire(s.dir, key, &re, &c, NULL), 0);
	cr_assert(a != b && b != c, "one handle per acquire");

	kid_t k = kid_start(TRY_ONCE_REENTRANT, s.dir, key, -1, 0);
	cr_assert_eq(read_byte(k.up, 10000), 'B', "a child's allow_reentrant does not borrow our hold");
	kid_expect_exit0(&k);

	pc_session_lock_info_t info;
	cr_assert_eq(pc_session_lock_release(a), 0);
	cr_assert_eq(pc_session_lock_release(c), 0);
	cr_assert_eq(pc_session_lock_query(s.dir, key, &info), 0);
	cr_assert(info.held, "held while a handle is out");
	cr_assert_eq(pc_session_lock_release(b), 0);
	cr_assert_eq(pc_session_lock_query(s.dir, key, &info), 0);
	cr_assert_not(info.held);

	/* With nothing held, allow_reentrant takes the lock as usual. */
	cr_assert_eq(pc_session_lock_acquire(s.dir, key, &re, &a, NULL), 0);
	k = kid_start(TRY_ONCE_REENTRANT, s.dir, key, -1, 0);
	cr_assert_eq(read_byte(k.up, 10000), 'B');
	kid_expect_exit0(&k);
	cr_assert_eq(pc_session_lock_release(a), 0);
	k = kid_start(TRY_ONCE_REENTRANT, s.dir, key, -1, 0);
	cr_assert_eq(read_byte(k.up, 10000), 'A', "free again: the child gets it");
	kid_expect_exit0(&k);
	scratch_free(&s);
	ASSERT_NO_LEAKS();
}

/* A child forked while we hold a lock shares our lock description, but the
 * hold is not its to give back: releasing the inherited handle frees it,
 * says PC_ESTATE, and leaves our lock alone. */
Test(lock, forked_child_cannot_release_the_parents_lock, .timeout = 30)
{
	scratch_t s;
	scratch_new(&s);
	pc_session_lock_t *l = NULL;
	cr_assert_eq(pc_session_lock_acquire(s.dir, "k", NULL, &l, NULL), 0);
	fflush(NULL);
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		pc_session_lock_t *again = NULL;
		pc_session_lock_opts_t once = opts(0, -1, true);
		int rc1 = pc_session_lock_release(l);
		int rc2 = pc_session_lock_acquire(s.dir, "k", &once, &again, NULL);
		_exit(rc1 == PC_ESTATE && rc2 == PC_EBUSY ? 0 : 1);
	}
	kid_t k = {pid, -1, -1};
	int st = kid_reap(&k, 10000);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status 0x%x", st);
	pc_session_lock_info_t info;
	cr_assert_eq(pc_session_lock_query(s.dir, "k", &info), 0);
	cr_assert(info.held && info.pid == (int32_t)getpid());
	cr_assert_eq(pc_session_lock_release(l), 0);
	scratch_free(&s);
	ASSERT_NO_LEAKS();
}

/* The other way round: a holder forks a child (no exec) and dies. The child
 * keeps the lock description alive, so the lock stays held -- by nobody the
 * record names: the query says the recorded holder is gone. Once the child
 * exits, the lock is free. */
Test(lock, lock_outlives_its_holder_in_a_forked_child, .timeout = 30)
{
	scratch_t s;
	scratch_new(&s);
	int up[2], down[2];
	cr_assert_eq(pipe2(up, O_CLOEXEC), 0);
	cr_assert_eq(pipe2(down, O_CLOEXEC), 0);
	fflush(NULL);
	pid_t holder = fork();
	cr_assert_geq(holder, 0);
	if (holder == 0) {
		close(up[0]);
		close(down[1]);
		pc_session_lock_t *l = NULL;
		if (pc_session_lock_acquire(s.dir, "k", NULL, &l, NULL) != 0)
			_exit(10);
		pid_t g = fork();
		if (g < 0)
			_exit(11);
		if (g == 0) { /* keeps `up` open until told to go */
			read_byte(down[0], 10000);
			_exit(0);
		}
		_exit(write(up[1], "A", 1) == 1 ? 0 : 12); /* dies holding the lock */
	}
	close(up[1]);
	close(down[0]);
	kid_t k = {holder, -1, -1};
	int st = kid_reap(&k, 10000);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "holder status 0x%x", st);
	cr_assert_eq(read_byte(up[0], 10000), 'A');

	pc_session_lock_info_t info;
	cr_assert_eq(pc_session_lock_query(s.dir, "k", &info), 0);
	cr_assert(info.held && info.record_ok);
	cr_assert_eq(info.pid, (int32_t)holder);
	cr_assert_not(info.holder_alive, "the recorded holder is gone");
	pc_session_lock_t *l = NULL;
	pc_session_lock_opts_t once = opts(0, -1, false);
	cr_assert_eq(pc_session_lock_acquire(s.dir, "k", &once, &l, NULL), PC_EBUSY);

	write_byte(down[1], 'Q');
	cr_assert_eq(read_byte(up[0], 10000), -1, "the grandchild exits (EOF)");
	pc_session_lock_opts_t wait = opts(10000, -1, false);
	cr_assert_eq(pc_session_lock_acquire(s.dir, "k", &wait, &l, NULL), 0);
	cr_assert_eq(pc_session_lock_release(l), 0);
	close(up[0]);
	close(down[1]);
	scratch_free(&s);
	ASSERT_NO_LEAKS();
}

/* ---- two processes ---- */

Test(lock, second_process_waits_for_the_release, .timeout = 30)
{
	scratch_t s;
	scratch_new(&s);
	const char *key = "agent:main:main";
	kid_t k = kid_start(HOLD_UNTIL_TOLD, s.dir, key, -1, 200);
	cr_assert_eq(read_byte(k.up, 10000), 'A');

	pc_session_lock_info_t info;
	cr_assert_eq(pc_session_lock_query(s.dir, key, &info), 0);
	cr_assert(info.held && info.record_ok && info.holder_alive);
	cr_assert_eq(info.pid, (int32_t)k.pid);

	pc_session_lock_t *l = NULL;
	pc_session_lock_opts_t once = opts(0, -1, false);
	cr_assert_eq(pc_session_lock_acquire(s.dir, key, &once, &l, NULL), PC_EBUSY);

	/* The child releases 200 ms after being told; a waiter gets the lock
	 * right after that. */
	write_byte(k.down, 'R');
	pc_session_lock_opts_t wait = opts(10000, -1, false);
	uint64_t t0 = now_ms();
	cr_assert_eq(pc_session_lock_acquire(s.dir, key, &wait, &l, NULL), 0);
	uint64_t waited = now_ms() - t0;
	cr_assert_geq(waited, 150);
	cr_assert_lt(waited, 5000);
	kid_expect_exit0(&k);
	cr_assert_eq(pc_session_lock_query(s.dir, key, &info), 0);
	cr_assert_eq(info.pid, (int32_t)getpid());
	cr_assert_eq(pc_session_lock_release(l), 0);
	scratch_free(&s);
	ASSERT_NO_LEAKS();
}

Test(lock, busy_after_the_timeout_the_environment_sets, .timeout = 30)
{
	scratch_t s;
	scratch_new(&s);
	const char *key = "agent:main:main";
	kid_t k = kid_start(HOLD_UNTIL_TOLD, s.dir, key, -1, 0);
	cr_assert_eq(read_byte(k.up, 10000), 'A');

	cr_assert_eq(setenv("PINCER_SESSION_WRITE_LOCK_ACQUIRE_TIMEOUT_MS", "300", 1), 0);
	pc_session_lock_t *l = NULL;
	pc_session_lock_info_t busy;
	uint64_t t0 = now_ms();
	int rc = pc_session_lock_acquire(s.dir, key, NULL, &l, &busy);
	uint64_t waited = now_ms() - t0;
	/* Not a safe integer: ignored, so an explicit timeout is what counts. */
	cr_assert_eq(setenv("PINCER_SESSION_WRITE_LOCK_ACQUIRE_TIMEOUT_MS", "30x", 1), 0);
	pc_session_lock_opts_t short_wait = opts(50, -1, false);
	int rc2 = pc_session_lock_acquire(s.dir, key, &short_wait, &l, NULL);
	cr_assert_eq(unsetenv("PINCER_SESSION_WRITE_LOCK_ACQUIRE_TIMEOUT_MS"), 0);

	cr_assert_eq(rc, PC_EBUSY, "got %s", pc_strerror(rc));
	cr_assert_eq(rc2, PC_EBUSY);
	cr_assert_null(l);
	cr_assert_geq(waited, 300);
	cr_assert_lt(waited, 3000);
	cr_assert(busy.held && busy.record_ok && busy.holder_alive);
	cr_assert_eq(busy.pid, (int32_t)k.pid);
	cr_assert_eq(busy.timeout_ms, 300);
	char msg[PATH_MAX + 128], want[PATH_MAX + 128];
	cr_assert_eq(pc_session_lock_busy_message(&busy, msg, sizeof(msg)), 0);
	snprintf(want, sizeof(want), "session busy: session file locked (timeout 300ms): pid=%d %s", (int)k.pid,
		 busy.path);
	cr_assert_str_eq(msg, want);
	char small[16];
	cr_assert_eq(pc_session_lock_busy_message(&busy, small, sizeof(small)), PC_ELIMIT);
	cr_assert_eq(strlen(small), sizeof(small) - 1);

	write_byte(k.down, 'R');
	kid_expect_exit0(&k);
	scratch_free(&s);
	ASSERT_NO_LEAKS();
}

Test(lock, killed_holder_is_reclaimed, .timeout = 30)
{
	scratch_t s;
	scratch_new(&s);
	const char *key = "agent:main:main";

	/* Killed while we are not waiting: its file stays, its lock does not. */
	kid_t k = kid_start(HOLD_UNTIL_TOLD, s.dir, key, -1, 0);
	cr_assert_eq(read_byte(k.up, 10000), 'A');
	cr_assert_eq(kill(k.pid, SIGKILL), 0);
	int st = kid_reap(&k, 10000);
	cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
	cr_assert_eq(count_entries(s.dir), 1, "the dead holder's file is left behind");
	pc_session_lock_info_t info;
	cr_assert_eq(pc_session_lock_query(s.dir, key, &info), 0);
	cr_assert_not(info.held, "a leftover file is no lock");
	pc_session_lock_t *l = NULL;
	pc_session_lock_opts_t once = opts(0, -1, false);
	cr_assert_eq(pc_session_lock_acquire(s.dir, key, &once, &l, NULL), 0, "reclaimed without waiting");
	cr_assert_eq(pc_session_lock_query(s.dir, key, &info), 0);
	cr_assert(info.held && info.record_ok);
	cr_assert_eq(info.pid, (int32_t)getpid(), "the record is rewritten");
	cr_assert_eq(pc_session_lock_release(l), 0);

	/* Killed while we wait: the waiter takes over within the poll bound. */
	k = kid_start(HOLD_THEN_DIE, s.dir, key, -1, 300);
	cr_assert_eq(read_byte(k.up, 10000), 'A');
	pc_session_lock_opts_t wait = opts(10000, -1, false);
	uint64_t t0 = now_ms();
	cr_assert_eq(pc_session_lock_acquire(s.dir, key, &wait, &l, NULL), 0);
	uint64_t waited = now_ms() - t0;
	cr_assert_lt(waited, 300 + 2 * PC_SESSION_LOCK_POLL_MAX_MS + 2000);
	st = kid_reap(&k, 10000);
	cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
	cr_assert_eq(pc_session_lock_release(l), 0);
	scratch_free(&s);
	ASSERT_NO_LEAKS();
}

/* A foreign process holds the kernel lock but its record is garbage: the
 * lock is still held (the kernel decides), the report just knows less. */
Test(lock, unreadable_record_still_held, .timeout = 30)
{
	scratch_t s;
	scratch_new(&s);
	pc_session_lock_info_t info;
	cr_assert_eq(pc_session_lock_query(s.dir, "k", &info), 0);
	cr_assert_eq(mkdir(s.dir, 0700), 0);
	int fd = open(info.path, O_RDWR | O_CREAT, 0600);
	cr_assert_geq(fd, 0);
	const char junk[] = "{\"pid\":\"12\"}garbage";
	static char long_junk[2000];
	memset(long_junk, 'x', sizeof(long_junk));
	cr_assert_eq(write(fd, long_junk, sizeof(long_junk)), (ssize_t)sizeof(long_junk));

	/* Unlocked junk, longer than a record: a leftover, reclaimed, and the
	 * record written over it is all that is left. */
	pc_session_lock_t *l = NULL;
	pc_session_lock_opts_t once = opts(0, -1, false);
	cr_assert_eq(pc_session_lock_acquire(s.dir, "k", &once, &l, NULL), 0);
	cr_assert_eq(pc_session_lock_query(s.dir, "k", &info), 0);
	cr_assert(info.held && info.record_ok);
	char rec[512] = "";
	ssize_t n = pread(fd, rec, sizeof(rec) - 1, 0);
	cr_assert(n > 2 && n < 400 && rec[n - 2] == '}' && rec[n - 1] == '\n', "record: %s", rec);
	cr_assert_eq(pc_session_lock_release(l), 0);
	close(fd);

	/* Locked junk. */
	fd = open(info.path, O_RDWR | O_CREAT, 0600);
	cr_assert_geq(fd, 0);
	cr_assert_eq(write(fd, junk, sizeof(junk) - 1), (ssize_t)(sizeof(junk) - 1));
	struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
	cr_assert_eq(fcntl(fd, F_OFD_SETLK, &fl), 0);
	pc_session_lock_info_t busy;
	cr_assert_eq(pc_session_lock_acquire(s.dir, "k", &once, &l, &busy), PC_EBUSY);
	cr_assert(busy.held);
	cr_assert_not(busy.record_ok);
	char msg[PATH_MAX + 128];
	cr_assert_eq(pc_session_lock_busy_message(&busy, msg, sizeof(msg)), 0);
	cr_assert(strstr(msg, "session busy: session file locked (timeout 0ms): pid=unknown "), "%s", msg);
	close(fd);
	scratch_free(&s);
	ASSERT_NO_LEAKS();
}

static int collect_overdue(void *user, const pc_session_lock_held_t *h)
{
	char *seen = user;
	snprintf(seen, 64, "%s", h->session_key);
	return h->held_ms > h->max_hold_ms && h->count == 1 && strstr(h->path, ".lock") ? 0 : -100;
}

static int stop_walk(void *user, const pc_session_lock_held_t *h)
{
	(void)user;
	(void)h;
	return 7;
}

Test(lock, held_past_max_hold_is_reported, .timeout = 30)
{
	scratch_t s;
	scratch_new(&s);
	pc_session_lock_opts_t quick = opts(0, 50, false), slow = opts(0, 60000, false);
	pc_session_lock_t *a = NULL, *b = NULL;
	cr_assert_eq(pc_session_lock_acquire(s.dir, "quick", &quick, &a, NULL), 0);
	cr_assert_eq(pc_session_lock_acquire(s.dir, "slow", &slow, &b, NULL), 0);
	char seen[64] = "";
	size_t n = 99;
	cr_assert_eq(pc_session_lock_overdue(collect_overdue, seen, &n), 0);
	cr_assert_eq(n, 0, "nothing overdue yet");
	sleep_ms(120);
	cr_assert_eq(pc_session_lock_overdue(collect_overdue, seen, &n), 0);
	cr_assert_eq(n, 1);
	cr_assert_str_eq(seen, "quick");
	cr_assert_eq(pc_session_lock_overdue(stop_walk, NULL, &n), 7, "the callback can stop the walk");
	pc_session_lock_info_t info;
	cr_assert_eq(pc_session_lock_query(s.dir, "quick", &info), 0);
	cr_assert(info.overdue && info.max_hold_ms == 50 && info.held_ms >= 100);
	cr_assert_eq(pc_session_lock_query(s.dir, "slow", &info), 0);
	cr_assert_not(info.overdue);
	cr_assert_eq(pc_session_lock_release(a), 0);
	cr_assert_eq(pc_session_lock_release(b), 0);

	/* Another process's overdue hold, as the query sees it; the env var
	 * sets the default. */
	cr_assert_eq(setenv("PINCER_SESSION_WRITE_LOCK_MAX_HOLD_MS", "40", 1), 0);
	kid_t k = kid_start(HOLD_UNTIL_TOLD, s.dir, "other", -1, 0);
	cr_assert_eq(unsetenv("PINCER_SESSION_WRITE_LOCK_MAX_HOLD_MS"), 0);
	cr_assert_eq(read_byte(k.up, 10000), 'A');
	sleep_ms(100);
	cr_assert_eq(pc_session_lock_query(s.dir, "other", &info), 0);
	cr_assert(info.held && info.overdue && info.holder_alive);
	cr_assert_eq(info.max_hold_ms, 40);
	cr_assert_eq(info.pid, (int32_t)k.pid);
	cr_assert_eq(pc_session_lock_overdue(collect_overdue, seen, &n), 0);
	cr_assert_eq(n, 0, "the report covers this process's holds only");
	write_byte(k.down, 'R');
	kid_expect_exit0(&k);
	scratch_free(&s);
	ASSERT_NO_LEAKS();
}

/* Two processes (one with two threads) each take the lock many times and do
 * a read-write on shared memory inside it, while a third thread sweeps the
 * lock file away whenever it is free: no overlap, no lost update. */
typedef struct shared {
	uint32_t inside;
	uint32_t overlaps;
	uint32_t counter;
	uint32_t errors;
} shared_t;

enum { ROUNDS = 2000 };

static void hammer(const char *dir, shared_t *sh)
{
	pc_session_lock_opts_t o = opts(20000, -1, false);
	for (int i = 0; i < ROUNDS; i++) {
		pc_session_lock_t *l = NULL;
		if (pc_session_lock_acquire(dir, "hot", &o, &l, NULL) != 0) {
			__atomic_add_fetch(&sh->errors, 1, __ATOMIC_RELAXED);
			continue;
		}
		if (__atomic_add_fetch(&sh->inside, 1, __ATOMIC_ACQ_REL) != 1)
			__atomic_add_fetch(&sh->overlaps, 1, __ATOMIC_RELAXED);
		uint32_t v = __atomic_load_n(&sh->counter, __ATOMIC_RELAXED);
		if (i % 64 == 0)
			sleep_ms(1);
		__atomic_store_n(&sh->counter, v + 1, __ATOMIC_RELAXED);
		__atomic_sub_fetch(&sh->inside, 1, __ATOMIC_ACQ_REL);
		if (pc_session_lock_release(l) != 0)
			__atomic_add_fetch(&sh->errors, 1, __ATOMIC_RELAXED);
	}
}

typedef struct hammer_arg {
	const char *dir;
	shared_t *sh;
	uint32_t stop; /* atomic: ends the sweeper */
	uint32_t sweeps; /* atomic */
} hammer_arg_t;

static void *hammer_thread(void *p)
{
	hammer_arg_t *a = p;
	hammer(a->dir, a->sh);
	return NULL;
}

/* Sweeps all the while, so acquirers keep meeting files removed under them. */
static void *sweeper_thread(void *p)
{
	hammer_arg_t *a = p;
	while (!LOAD(a->stop)) {
		size_t removed = 0;
		if (pc_session_lock_sweep(a->dir, &removed) != 0)
			__atomic_add_fetch(&a->sh->errors, 1, __ATOMIC_RELAXED);
		__atomic_add_fetch(&a->sweeps, (uint32_t)removed, __ATOMIC_RELAXED);
	}
	return NULL;
}

Test(lock, contenders_never_overlap, .timeout = 120)
{
	scratch_t s;
	scratch_new(&s);
	shared_t *sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	cr_assert_neq(sh, MAP_FAILED);
	memset(sh, 0, sizeof(*sh));
	fflush(NULL);
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		hammer(s.dir, sh);
		_exit(0);
	}
	pthread_t t, sw;
	hammer_arg_t arg = {s.dir, sh, 0, 0};
	cr_assert_eq(pthread_create(&t, NULL, hammer_thread, &arg), 0);
	cr_assert_eq(pthread_create(&sw, NULL, sweeper_thread, &arg), 0);
	hammer(s.dir, sh);
	cr_assert_eq(pthread_join(t, NULL), 0);
	STORE(arg.stop, 1);
	cr_assert_eq(pthread_join(sw, NULL), 0);
	cr_log_info("files swept under the contenders: %u", LOAD(arg.sweeps));
	kid_t k = {pid, -1, -1};
	int st = kid_reap(&k, 60000);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	cr_assert_eq(sh->errors, 0);
	cr_assert_eq(sh->overlaps, 0);
	cr_assert_eq(sh->counter, 3 * ROUNDS);
	cr_assert_eq(munmap(sh, sizeof(*sh)), 0);
	scratch_free(&s);
	ASSERT_NO_LEAKS();
}

/* The sweep removes only files nobody holds, and only lock files; acquirers
 * racing with a sweep still exclude each other (see contenders_never_overlap). */
Test(lock, sweep_removes_only_free_lock_files, .timeout = 30)
{
	scratch_t s;
	scratch_new(&s);
	size_t removed = 99;
	cr_assert_eq(pc_session_lock_sweep(s.dir, &removed), 0, "no directory: nothing to do");
	cr_assert_eq(removed, 0);
	pc_session_lock_t *a = NULL, *b = NULL;
	cr_assert_eq(pc_session_lock_acquire(s.dir, "free", NULL, &a, NULL), 0);
	cr_assert_eq(pc_session_lock_release(a), 0);
	cr_assert_eq(pc_session_lock_acquire(s.dir, "mine", NULL, &a, NULL), 0);
	kid_t k = kid_start(HOLD_UNTIL_TOLD, s.dir, "theirs", -1, 0);
	cr_assert_eq(read_byte(k.up, 10000), 'A');
	char other[200];
	snprintf(other, sizeof(other), "%s/notes.txt", s.dir);
	int fd = open(other, O_WRONLY | O_CREAT, 0600);
	cr_assert_geq(fd, 0);
	close(fd);

	cr_assert_eq(pc_session_lock_sweep(s.dir, &removed), 0);
	cr_assert_eq(removed, 1, "only the free one");
	cr_assert_eq(count_entries(s.dir), 3);
	pc_session_lock_info_t info;
	cr_assert_eq(pc_session_lock_query(s.dir, "mine", &info), 0);
	cr_assert(info.held && info.pid == (int32_t)getpid());
	cr_assert_eq(pc_session_lock_query(s.dir, "theirs", &info), 0);
	cr_assert(info.held && info.pid == (int32_t)k.pid);
	pc_session_lock_opts_t once = opts(0, -1, false);
	cr_assert_eq(pc_session_lock_acquire(s.dir, "theirs", &once, &b, NULL), PC_EBUSY, "still excluded");

	write_byte(k.down, 'R');
	kid_expect_exit0(&k);
	cr_assert_eq(pc_session_lock_release(a), 0);
	cr_assert_eq(pc_session_lock_sweep(s.dir, &removed), 0);
	cr_assert_eq(removed, 2);
	cr_assert_eq(count_entries(s.dir), 1, "notes.txt is not ours to remove");
	scratch_free(&s);
	ASSERT_NO_LEAKS();
}

/* ---- threads of the runtime ---- */

typedef struct job {
	const char *dir;
	int rc_acquire;
	int rc_release;
	uint32_t done; /* atomic */
} job_t;

static pc_msg_t *lock_job(void *arg)
{
	job_t *j = arg;
	pc_session_lock_t *l = NULL;
	j->rc_acquire = pc_session_lock_acquire(j->dir, "pool", NULL, &l, NULL);
	j->rc_release = l ? pc_session_lock_release(l) : 0;
	STORE(j->done, 1);
	return NULL;
}

static int on_worker(pc_ctx_t *ctx, void *state, pc_msg_t *m)
{
	(void)ctx;
	(void)m;
	job_t *j = state;
	pc_session_lock_t *l = NULL;
	pc_session_lock_info_t info;
	j->rc_acquire = pc_session_lock_acquire(j->dir, "worker", NULL, &l, NULL);
	j->rc_release = pc_session_lock_query(j->dir, "worker", &info);
	CHECK(l == NULL, "a handle on a worker");
	STORE(j->done, 1);
	return 0;
}

static const pc_behavior_t worker_beh = {"locker", on_worker, NULL};

Test(lock, blocking_pool_yes_worker_no, .timeout = 30)
{
	reset_failures();
	scratch_t s;
	scratch_new(&s);
	pc_runtime_t *rt = start_rt(1);
	job_t pool = {.dir = s.dir}, w = {.dir = s.dir};
	cr_assert_eq(pc_blocking_submit(rt, lock_job, NULL, &pool, NULL), 0);
	pc_actor_t *a = NULL;
	cr_assert_eq(pc_spawn(rt, &worker_beh, &w, &a), 0);
	cr_assert_eq(pc_send_u64(a, 1, 0), 0);
	AWAIT(LOAD(pool.done) && LOAD(w.done), 10000);
	cr_assert_eq(pool.rc_acquire, 0);
	cr_assert_eq(pool.rc_release, 0);
	cr_assert_eq(w.rc_acquire, PC_ESTATE, "acquire refuses a worker thread");
	cr_assert_eq(w.rc_release, PC_ESTATE, "so does query");
	assert_no_failures();
	pc_actor_release(a);
	FREE_RUNTIME_CHECKED(rt);
	scratch_free(&s);
}
