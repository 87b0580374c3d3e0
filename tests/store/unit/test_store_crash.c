/*
 * Crash safety and hostile conditions for the store (io/store), each in a
 * child process that is this same program run again (exec of
 * /proc/self/exe with PC_STORE_CHILD set; a constructor runs the child's
 * part before the test runner starts, so the child is a fresh process):
 *   - kill: a child appends from several threads and reports every
 *     acknowledged append through a pipe (16 threads, so transactions
 *     hold several appends); it is SIGKILLed mid-stream.
 *     Reopened, the store holds every acknowledged append, and every row
 *     it holds is whole.
 *   - fsize: a child runs into RLIMIT_FSIZE (a full disk, as the process
 *     sees it): a clear PC_STORE_EFULL, no crash, nothing acknowledged
 *     lost, and writing works again once there is room.
 *   - ro: an unprivileged child opens a store in a directory it cannot
 *     write: PC_STORE_EREADONLY.
 */
#include <criterion/criterion.h>

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_util.h"
#include "io/store/store.h"

#define ACK_FD 3
#define KILL_THREADS 16
#define KILL_MAX_PER_THREAD 200000
#define NOBODY 65534

typedef struct ack {
	int64_t thread, k, seq;
} ack_t;

extern char **environ;

/* ---- the children ---- */

static int child_open(const char *dir, pc_runtime_t **rt, pc_store_t **s)
{
	char path[256];
	snprintf(path, sizeof(path), "%s/state.db", dir);
	pc_runtime_config_t rc;
	pc_runtime_config_init(&rc);
	rc.workers = 2;
	if (pc_runtime_new(&rc, rt) != 0 || pc_runtime_start(*rt) != 0)
		return PC_ESYS;
	pc_store_config_t cfg;
	pc_store_config_init(&cfg);
	cfg.path = path;
	return pc_store_open(*rt, &cfg, s);
}

/* Content that shows whether it is whole: its own length and a pad. */
static char *make_content(int64_t t, int64_t k, size_t pad)
{
	char *c = malloc(pad + 96);
	if (!c)
		return NULL;
	int n = snprintf(c, 96, "{\"t\":%lld,\"k\":%lld,\"len\":%zu,\"pad\":\"", (long long)t, (long long)k, pad);
	memset(c + n, 'p', pad);
	memcpy(c + n + pad, "\"}", 3);
	return c;
}

typedef struct kthread {
	pc_store_t *s;
	int t;
	const char *prefix;
} kthread_t;

static void *kill_writer(void *arg)
{
	kthread_t *w = arg;
	char key[64];
	snprintf(key, sizeof(key), "%s-%d", w->prefix, w->t);
	uint64_t seed = 0x9E3779B97F4A7C15ull * (uint64_t)(w->t + 1);
	for (int64_t k = 0; k < KILL_MAX_PER_THREAD; k++) {
		char *c = make_content(w->t, k, rnd_below(&seed, 3000));
		if (!c)
			_exit(4);
		pc_store_msg_t m = {.role = "user", .content = c};
		int64_t seq = 0;
		int rc = pc_store_append(w->s, key, 0, &m, &seq);
		free(c);
		if (rc != 0)
			_exit(3);
		ack_t a = {w->t, k, seq};
		/* Told only now, after the commit: this is the acknowledgement. */
		if (write(ACK_FD, &a, sizeof(a)) != (ssize_t)sizeof(a))
			_exit(5);
	}
	return NULL;
}

static int child_kill(const char *dir, const char *prefix)
{
	pc_runtime_t *rt = NULL;
	pc_store_t *s = NULL;
	if (child_open(dir, &rt, &s) != 0)
		return 2;
	pthread_t th[KILL_THREADS];
	kthread_t w[KILL_THREADS];
	for (int t = 0; t < KILL_THREADS; t++) {
		w[t] = (kthread_t){s, t, prefix};
		if (pthread_create(&th[t], NULL, kill_writer, &w[t]) != 0)
			return 6;
	}
	for (int t = 0; t < KILL_THREADS; t++)
		pthread_join(th[t], NULL);
	return 0; /* not reached in the test: the parent kills first */
}

static int child_fsize(const char *dir)
{
	pc_runtime_t *rt = NULL;
	pc_store_t *s = NULL;
	if (child_open(dir, &rt, &s) != 0)
		return 2;
	char wal[256];
	snprintf(wal, sizeof(wal), "%s/state.db-wal", dir);
	int64_t k = 0, seq = 0;
	int rc = 0;
	for (; k < 20; k++) {
		char *c = make_content(0, k, 100);
		pc_store_msg_t m = {.role = "user", .content = c};
		rc = c ? pc_store_append(s, "fs", 0, &m, &seq) : PC_ENOMEM;
		free(c);
		if (rc != 0)
			return 7;
		ack_t a = {0, k, seq};
		if (write(ACK_FD, &a, sizeof(a)) != (ssize_t)sizeof(a))
			return 5;
	}
	struct stat st;
	if (stat(wal, &st) != 0)
		return 8;
	struct rlimit old, lim;
	if (getrlimit(RLIMIT_FSIZE, &old) != 0)
		return 9;
	lim = old;
	lim.rlim_cur = (rlim_t)st.st_size + (128u << 10);
	signal(SIGXFSZ, SIG_IGN);
	if (setrlimit(RLIMIT_FSIZE, &lim) != 0)
		return 9;
	int seen = 0;
	for (int n = 0; n < 10000 && !seen; n++, k++) {
		char *c = make_content(0, k, 4000);
		pc_store_msg_t m = {.role = "user", .content = c};
		rc = c ? pc_store_append(s, "fs", 0, &m, &seq) : PC_ENOMEM;
		free(c);
		if (rc == PC_STORE_EFULL) {
			seen = 1;
		} else if (rc != 0) {
			fprintf(stderr, "fsize child: append gave %d (%s)\n", rc, pc_store_strerror(rc));
			return 10;
		} else {
			ack_t a = {0, k, seq};
			if (write(ACK_FD, &a, sizeof(a)) != (ssize_t)sizeof(a))
				return 5;
		}
	}
	if (!seen)
		return 11;
	/* Room again: the same store goes on. */
	if (setrlimit(RLIMIT_FSIZE, &old) != 0)
		return 9;
	char *c = make_content(0, k, 10);
	pc_store_msg_t m = {.role = "user", .content = c};
	rc = c ? pc_store_append(s, "fs", 0, &m, &seq) : PC_ENOMEM;
	free(c);
	if (rc != 0)
		return 12;
	ack_t a = {0, k, seq};
	if (write(ACK_FD, &a, sizeof(a)) != (ssize_t)sizeof(a))
		return 5;
	pc_store_close(s);
	pc_runtime_free(rt);
	return 0;
}

/* Exit codes: 0 = refused with EREADONLY, 77 = could not drop privileges. */
static int child_ro(const char *dir)
{
	if (setgid(NOBODY) != 0 || setuid(NOBODY) != 0)
		return 77;
	pc_runtime_t *rt = NULL;
	pc_store_t *s = NULL;
	int rc = child_open(dir, &rt, &s);
	pc_store_close(s);
	pc_runtime_free(rt);
	if (rc == PC_STORE_EREADONLY)
		return 0;
	fprintf(stderr, "ro child: open gave %d (%s)\n", rc, pc_store_strerror(rc));
	return 20;
}

__attribute__((constructor)) static void child_hook(void)
{
	const char *mode = getenv("PC_STORE_CHILD");
	const char *dir = getenv("PC_STORE_DIR");
	if (!mode || !dir)
		return;
	signal(SIGPIPE, SIG_IGN);
	int code = 99;
	if (strcmp(mode, "kill") == 0)
		code = child_kill(dir, getenv("PC_STORE_PREFIX") ? getenv("PC_STORE_PREFIX") : "s");
	else if (strcmp(mode, "fsize") == 0)
		code = child_fsize(dir);
	else if (strcmp(mode, "ro") == 0)
		code = child_ro(dir);
	_exit(code);
}

/* ---- the parent's side ---- */

/* Starts this program as a child in `mode`; its fd 3 is the write end of
 * a pipe whose read end is returned in *rfd. */
static pid_t spawn_child(const char *mode, const char *dir, const char *prefix, int *rfd)
{
	int p[2];
	cr_assert_eq(pipe(p), 0);
	char e_mode[64], e_dir[128], e_prefix[64];
	snprintf(e_mode, sizeof(e_mode), "PC_STORE_CHILD=%s", mode);
	snprintf(e_dir, sizeof(e_dir), "PC_STORE_DIR=%s", dir);
	snprintf(e_prefix, sizeof(e_prefix), "PC_STORE_PREFIX=%s", prefix);
	size_t n = 0;
	while (environ[n])
		n++;
	char **envp = calloc(n + 4, sizeof(char *));
	cr_assert_not_null(envp);
	size_t m = 0;
	for (size_t k = 0; k < n; k++)
		if (strncmp(environ[k], "PC_STORE_", 9) != 0)
			envp[m++] = environ[k];
	envp[m++] = e_mode;
	envp[m++] = e_dir;
	envp[m++] = e_prefix;
	char *argv[] = {"test_store_crash", NULL};
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		if (dup2(p[1], ACK_FD) < 0)
			_exit(98);
		execve("/proc/self/exe", argv, envp);
		_exit(97);
	}
	free(envp);
	close(p[1]);
	*rfd = p[0];
	return pid;
}

/* Reads whole records until `want` (0 = until EOF). Returns the count. */
static size_t read_acks(int fd, ack_t *buf, size_t have, size_t cap, size_t want)
{
	char *p = (char *)(buf + have);
	size_t bytes = 0;
	uint64_t until = now_ms() + 60000;
	while (have + bytes / sizeof(ack_t) < cap && (want == 0 || have + bytes / sizeof(ack_t) < want) &&
	       now_ms() < until) {
		ssize_t r = read(fd, p + bytes, (cap - have) * sizeof(ack_t) - bytes);
		if (r <= 0)
			break;
		bytes += (size_t)r;
	}
	return have + bytes / sizeof(ack_t);
}

static void rm_store(const char *dir)
{
	static const char *const names[] = {"state.db", "state.db-wal", "state.db-shm"};
	char p[256];
	for (size_t k = 0; k < 3; k++) {
		snprintf(p, sizeof(p), "%s/%s", dir, names[k]);
		unlink(p);
	}
	rmdir(dir);
}

static pc_store_t *open_store(pc_runtime_t *rt, const char *dir)
{
	char path[256];
	snprintf(path, sizeof(path), "%s/state.db", dir);
	pc_store_config_t cfg;
	pc_store_config_init(&cfg);
	cfg.path = path;
	pc_store_t *s = NULL;
	int rc = pc_store_open(rt, &cfg, &s);
	cr_assert_eq(rc, 0, "reopen: %s", pc_store_strerror(rc));
	return s;
}

/* Every row of `key` is whole and in order (seq k+1 holds append k of
 * thread t); returns how many rows there are. */
static size_t check_session(pc_store_t *s, const char *key, int64_t t)
{
	pc_store_history_t *h = NULL;
	int rc = pc_store_history(s, key, &h);
	if (rc == PC_ENOTFOUND)
		return 0;
	cr_assert_eq(rc, 0);
	size_t n = pc_store_history_count(h);
	for (size_t k = 0; k < n; k++) {
		pc_store_msg_t m;
		pc_store_history_get(h, k, &m);
		cr_assert_eq(m.seq, (int64_t)k + 1);
		cJSON *j = cJSON_Parse(m.content);
		cr_assert_not_null(j, "row %zu of %s is not whole JSON", k, key);
		cr_assert_eq((int64_t)cJSON_GetObjectItem(j, "t")->valuedouble, t);
		cr_assert_eq((int64_t)cJSON_GetObjectItem(j, "k")->valuedouble, (int64_t)k);
		cr_assert_eq((size_t)cJSON_GetObjectItem(j, "len")->valuedouble,
			     strlen(cJSON_GetObjectItem(j, "pad")->valuestring));
		cJSON_Delete(j);
	}
	pc_store_history_free(h);
	return n;
}

static void integrity_ok(const char *dir)
{
	char path[256];
	snprintf(path, sizeof(path), "%s/state.db", dir);
	sqlite3 *db = NULL;
	cr_assert_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
	sqlite3_stmt *st = NULL;
	cr_assert_eq(sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &st, NULL), SQLITE_OK);
	cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
	cr_assert_str_eq((const char *)sqlite3_column_text(st, 0), "ok");
	sqlite3_finalize(st);
	sqlite3_close(db);
}

Test(store_crash, sigkill_mid_stream_loses_no_acknowledged_append, .timeout = 300)
{
	uint64_t seed = test_seed();
	char dir[] = "/tmp/pc-store-kill-XXXXXX";
	cr_assert_not_null(mkdtemp(dir));
	size_t cap = 400000;
	ack_t *acks = malloc(cap * sizeof(*acks));
	cr_assert_not_null(acks);
	/* Several rounds on the same file: each kill leaves a WAL with a
	 * torn tail for the next open to recover. */
	for (int round = 0; round < 3; round++) {
		char prefix[16];
		snprintf(prefix, sizeof(prefix), "r%d", round);
		int rfd = -1;
		pid_t pid = spawn_child("kill", dir, prefix, &rfd);
		size_t want = 300 + rnd_below(&seed, 2000);
		size_t n = read_acks(rfd, acks, 0, cap, want);
		cr_assert_geq(n, want, "child acknowledged only %zu appends", n);
		cr_assert_eq(kill(pid, SIGKILL), 0);
		int status = 0;
		cr_assert_eq(waitpid(pid, &status, 0), pid);
		cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "child ended otherwise: 0x%x", status);
		/* What was acknowledged before the kill is still in the pipe. */
		n = read_acks(rfd, acks, n, cap, 0);
		close(rfd);
		int64_t max_seq[KILL_THREADS] = {0};
		for (size_t k = 0; k < n; k++) {
			cr_assert_eq(acks[k].seq, acks[k].k + 1);
			if (acks[k].seq > max_seq[acks[k].thread])
				max_seq[acks[k].thread] = acks[k].seq;
		}
		pc_runtime_t *rt = start_rt(2);
		pc_store_t *s = open_store(rt, dir);
		for (int t = 0; t < KILL_THREADS; t++) {
			char key[32];
			snprintf(key, sizeof(key), "%s-%d", prefix, t);
			size_t rows = check_session(s, key, t);
			/* Every acknowledged append is there (rows beyond it were
			 * committed but the kill came before their ack). */
			cr_assert_geq((int64_t)rows, max_seq[t], "%s: %zu rows, acknowledged up to %lld", key, rows,
				      (long long)max_seq[t]);
		}
		/* The reopened store takes writes again. */
		pc_store_msg_t m = {.role = "user", .content = "{}"};
		int64_t seq = 0;
		cr_assert_eq(pc_store_append(s, "after", 0, &m, &seq), 0);
		pc_store_close(s);
		FREE_RUNTIME_CHECKED(rt);
		integrity_ok(dir);
		fprintf(stderr, "kill round %d: %zu acknowledged appends checked\n", round, n);
	}
	free(acks);
	rm_store(dir);
}

Test(store_crash, file_size_limit_is_a_clear_error_and_loses_nothing, .timeout = 120)
{
	char dir[] = "/tmp/pc-store-fsize-XXXXXX";
	cr_assert_not_null(mkdtemp(dir));
	int rfd = -1;
	pid_t pid = spawn_child("fsize", dir, "fs", &rfd);
	size_t cap = 20000;
	ack_t *acks = malloc(cap * sizeof(*acks));
	cr_assert_not_null(acks);
	size_t n = read_acks(rfd, acks, 0, cap, 0);
	close(rfd);
	int status = 0;
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status), "child crashed: 0x%x", status);
	cr_assert_eq(WEXITSTATUS(status), 0, "child failed with code %d", WEXITSTATUS(status));
	cr_assert_gt(n, 20);
	pc_runtime_t *rt = start_rt(2);
	pc_store_t *s = open_store(rt, dir);
	pc_store_history_t *h = NULL;
	cr_assert_eq(pc_store_history(s, "fs", &h), 0);
	/* Every acknowledged append, the one after the limit was lifted
	 * included, and nothing from the failed batch. */
	cr_assert_eq(pc_store_history_count(h), n);
	for (size_t k = 0; k < n; k++) {
		pc_store_msg_t m;
		pc_store_history_get(h, k, &m);
		cr_assert_eq(m.seq, acks[k].seq);
		cJSON *j = cJSON_Parse(m.content);
		cr_assert_not_null(j);
		cr_assert_eq((int64_t)cJSON_GetObjectItem(j, "k")->valuedouble, acks[k].k);
		cJSON_Delete(j);
	}
	pc_store_history_free(h);
	pc_store_close(s);
	FREE_RUNTIME_CHECKED(rt);
	integrity_ok(dir);
	free(acks);
	rm_store(dir);
}

Test(store_crash, read_only_directory_is_a_clear_error, .timeout = 60)
{
	char dir[] = "/tmp/pc-store-ro-XXXXXX";
	cr_assert_not_null(mkdtemp(dir));
	/* A new store in a directory nobody may write to. */
	cr_assert_eq(chmod(dir, 0555), 0);
	int rfd = -1;
	pid_t pid = spawn_child("ro", dir, "ro", &rfd);
	close(rfd);
	int status = 0;
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status), "child crashed: 0x%x", status);
	if (WEXITSTATUS(status) == 77) {
		chmod(dir, 0700);
		rm_store(dir);
		cr_skip_test("cannot drop privileges here");
	}
	cr_assert_eq(WEXITSTATUS(status), 0);
	/* An existing store, file and directory read-only to the opener. */
	cr_assert_eq(chmod(dir, 0700), 0);
	pc_runtime_t *rt = start_rt(2);
	pc_store_t *s = open_store(rt, dir);
	pc_store_msg_t m = {.role = "user", .content = "{}"};
	int64_t seq = 0;
	cr_assert_eq(pc_store_append(s, "k", 0, &m, &seq), 0);
	pc_store_close(s);
	FREE_RUNTIME_CHECKED(rt);
	char path[256];
	snprintf(path, sizeof(path), "%s/state.db", dir);
	cr_assert_eq(chmod(path, 0644), 0);
	cr_assert_eq(chmod(dir, 0555), 0);
	pid = spawn_child("ro", dir, "ro", &rfd);
	close(rfd);
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status), "child crashed: 0x%x", status);
	cr_assert_eq(WEXITSTATUS(status), 0);
	/* And nothing was lost. */
	cr_assert_eq(chmod(dir, 0700), 0);
	rt = start_rt(2);
	s = open_store(rt, dir);
	pc_store_history_t *h = NULL;
	cr_assert_eq(pc_store_history(s, "k", &h), 0);
	cr_assert_eq(pc_store_history_count(h), 1);
	pc_store_history_free(h);
	pc_store_close(s);
	FREE_RUNTIME_CHECKED(rt);
	rm_store(dir);
}
