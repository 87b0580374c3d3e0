/*
 * The session write lock (session_lock.h). The kernel lock on the lock
 * file is the truth; the JSON record in the file only describes the holder.
 *
 * Lock files stay after release, their record voided (creating and
 * removing one per acquire costs journalled directory updates each time).
 * A sweep removes the ones nobody holds, so an acquirer may lock a file
 * that was unlinked after it opened it: after every successful F_OFD_SETLK
 * the locked file is checked to still be the one at the path, and the
 * attempt starts over if not. A holder that dies leaves its file unlocked
 * with its record; the next acquirer locks it and writes its own.
 *
 * The process keeps a registry of the locks it holds (for reentrant
 * acquires and the overdue report), guarded by one mutex that is never
 * held across a system call that can wait.
 */
#include "session_lock.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "io/io.h"
#include "runtime/clock.h"
#include "runtime/runtime.h"

#define NAME_LEN (64 + 5)             /* hex SHA-256 + ".lock" */
#define SAFE_INT_MAX 9007199254740991 /* 2^53 - 1: what the spec's env values may hold */
#define RECORD_READ 512               /* record bytes a reader looks at (the key comes last) */
#define RECORD_TRIES 3                /* a holder writes its record just after locking */
#define RECORD_VOID "-"               /* first byte of a released holder's record */
#define RELOCK_TRIES 64               /* lock files replaced under one attempt before it waits */

typedef struct pc__lock_entry {
	struct pc__lock_entry *next;
	dev_t dev;               /* the lock directory */
	ino_t ino;
	char name[NAME_LEN + 1]; /* the lock file in it */
	int dfd;                 /* the directory (O_PATH) */
	int fd;                  /* the locked file: its description holds the lock */
	pid_t pid;               /* the process that took it */
	uint32_t count;          /* handles out; guarded by reg_mu */
	uint64_t since_ms;       /* monotonic */
	int64_t max_hold_ms;
	char *session_key;
	char *path;
} pc__lock_entry_t;

struct pc_session_lock {
	pc__lock_entry_t *e;
};

static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static pc__lock_entry_t *reg_head; /* guarded by reg_mu */

static void sleep_ms(uint64_t ms)
{
	struct timespec ts = {(time_t)(ms / 1000u), (long)(ms % 1000u) * 1000000L};
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* A decimal safe integer from the environment, or `dflt`. */
static int64_t env_ms(const char *var, int64_t dflt)
{
	const char *s = getenv(var);
	if (!s || !*s)
		return dflt;
	int64_t v = 0;
	for (; *s; s++) {
		if (*s < '0' || *s > '9')
			return dflt;
		v = v * 10 + (*s - '0');
		if (v > SAFE_INT_MAX)
			return dflt;
	}
	return v;
}

void pc_session_lock_opts_init(pc_session_lock_opts_t *o)
{
	o->timeout_ms = -1;
	o->max_hold_ms = -1;
	o->allow_reentrant = false;
}

/* The lock file's name: hex SHA-256 of the key, so no key reaches a path. */
static int lock_name(const char *key, char name[NAME_LEN + 1])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int n = 0;
	if (!EVP_Digest(key, strlen(key), md, &n, EVP_sha256(), NULL) || n != 32)
		return PC_ENOMEM; /* OpenSSL fails here only when it cannot allocate */
	static const char hex[] = "0123456789abcdef";
	for (unsigned i = 0; i < n; i++) {
		name[2 * i] = hex[md[i] >> 4];
		name[2 * i + 1] = hex[md[i] & 15];
	}
	memcpy(name + 64, ".lock", 6);
	return 0;
}

/* Opens the lock directory, creating it (one level) if missing. */
static int open_dir(const char *dir, int *dfd, struct stat *st)
{
	int fd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0 && errno == ENOENT) {
		if (mkdir(dir, 0700) != 0 && errno != EEXIST)
			return PC_ESYS;
		fd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	}
	if (fd < 0)
		return PC_ESYS;
	if (fstat(fd, st) != 0) {
		int e = errno;
		(void)close(fd);
		errno = e;
		return PC_ESYS;
	}
	*dfd = fd;
	return 0;
}

static int check_args(const char *dir, const char *key)
{
	if (!dir || !*dir || !key || !*key)
		return PC_EINVAL;
	if (strnlen(key, PC_SESSION_LOCK_MAX_KEY + 1) > PC_SESSION_LOCK_MAX_KEY ||
	    strnlen(dir, PATH_MAX) + 1 + NAME_LEN >= PATH_MAX)
		return PC_EINVAL;
	return 0;
}

int pc_proc_stat_fields(pid_t pid, const int *fields, size_t n, uint64_t *out)
{
	char path[48], buf[1024];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? PC_ENOTFOUND : PC_ESYS;
	ssize_t len = read(fd, buf, sizeof(buf) - 1);
	int e = errno;
	(void)close(fd);
	if (len <= 0) {
		errno = len < 0 ? e : EIO;
		return len < 0 && e == ESRCH ? PC_ENOTFOUND : PC_ESYS;
	}
	buf[len] = 0;
	/* The command name (field 2) may hold spaces and parentheses: count
	 * fields from the last ')'. */
	char *p = strrchr(buf, ')');
	int field = 2;
	for (size_t i = 0; i < n; i++) {
		for (; p && field < fields[i]; field++) {
			p = strchr(p, ' ');
			if (p)
				p++;
		}
		if (!p || *p < '0' || *p > '9') {
			errno = EPROTO;
			return PC_ESYS;
		}
		out[i] = strtoull(p, NULL, 10);
	}
	return 0;
}

int pc_proc_starttime(pid_t pid, uint64_t *out) { return pc_proc_stat_fields(pid, (const int[]){22}, 1, out); }

/* Our own start time, read once per process (a forked child reads again). */
static uint64_t self_starttime(void)
{
	static pid_t cached_pid;
	static uint64_t cached;
	pid_t me = getpid();
	pthread_mutex_lock(&reg_mu);
	bool hit = cached_pid == me;
	uint64_t st = cached;
	pthread_mutex_unlock(&reg_mu);
	if (hit)
		return st;
	if (pc_proc_starttime(me, &st) != 0)
		return 0; /* no /proc: the record says "unknown" */
	pthread_mutex_lock(&reg_mu);
	cached_pid = me;
	cached = st;
	pthread_mutex_unlock(&reg_mu);
	return st;
}

/* ---- the record ---- */

/* The holder's record, one JSON line: the spec's fields (pid, createdAt,
 * starttime, maxHoldMs), acquiredAtMs, and the session key last (readers
 * stop before it). `out` is the caller's. */
static int record_build(const pc__lock_entry_t *e, int64_t now_wall, char **out, size_t *len)
{
	size_t klen = strlen(e->session_key);
	size_t cap = 256 + 6 * klen; /* \u00XX is the longest escape */
	char *buf = malloc(cap);
	if (!buf)
		return PC_ENOMEM;
	time_t secs = (time_t)(now_wall / 1000);
	struct tm tm;
	char iso[32] = "";
	if (gmtime_r(&secs, &tm))
		strftime(iso, sizeof(iso), "%Y-%m-%dT%H:%M:%S", &tm);
	int n = snprintf(buf, cap,
			 "{\"pid\":%d,\"starttime\":%" PRIu64 ",\"createdAt\":\"%s.%03dZ\",\"acquiredAtMs\":%" PRId64
			 ",\"maxHoldMs\":%" PRId64 ",\"sessionKey\":\"",
			 (int)e->pid, self_starttime(), iso, (int)(now_wall % 1000), now_wall, e->max_hold_ms);
	size_t at = (size_t)n;
	for (const unsigned char *s = (const unsigned char *)e->session_key; *s; s++) {
		if (*s == '"' || *s == '\\') {
			buf[at++] = '\\';
			buf[at++] = (char)*s;
		} else if (*s < 0x20) {
			at += (size_t)snprintf(buf + at, cap - at, "\\u%04x", *s);
		} else {
			buf[at++] = (char)*s;
		}
	}
	memcpy(buf + at, "\"}\n", 4);
	*out = buf;
	*len = at + 3;
	return 0;
}

/* Writes the record over whatever an earlier holder left (`old` bytes),
 * then cuts the file to it if it was longer (so a reader never sees an
 * empty file in between). */
static int record_write(int fd, const char *rec, size_t len, off_t old)
{
	size_t done = 0;
	while (done < len) {
		ssize_t w = pwrite(fd, rec + done, len - done, (off_t)done);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return PC_ESYS;
		done += (size_t)w;
	}
	return old <= (off_t)len || ftruncate(fd, (off_t)len) == 0 ? 0 : PC_ESYS;
}

/* A non-negative integer field of the record. */
static bool record_field(const char *rec, const char *key, int64_t *out)
{
	char pat[32];
	snprintf(pat, sizeof(pat), "\"%s\":", key);
	const char *p = strstr(rec, pat);
	if (!p)
		return false;
	p += strlen(pat);
	if (*p < '0' || *p > '9')
		return false;
	int64_t v = 0;
	for (; *p >= '0' && *p <= '9'; p++) {
		v = v * 10 + (*p - '0');
		if (v > SAFE_INT_MAX)
			return false;
	}
	*out = v;
	return true;
}

/* Reads the holder's record into `out` (record_ok tells if it parsed). */
static int record_read(int fd, pc_session_lock_info_t *out)
{
	char buf[RECORD_READ + 1];
	ssize_t n;
	do
		n = pread(fd, buf, RECORD_READ, 0);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return PC_ESYS;
	buf[n] = 0;
	char *key = strstr(buf, "\"sessionKey\"");
	if (key)
		*key = 0; /* a key could hold anything: read only what precedes it */
	int64_t pid = 0, st = 0, at = 0, max_hold = 0;
	out->record_ok = key && buf[0] == '{' && record_field(buf, "pid", &pid) && pid > 0 && pid <= INT32_MAX &&
			 record_field(buf, "starttime", &st) && record_field(buf, "acquiredAtMs", &at) &&
			 record_field(buf, "maxHoldMs", &max_hold);
	if (out->record_ok) {
		out->pid = (int32_t)pid;
		out->starttime = (uint64_t)st;
		out->acquired_at_ms = at;
		out->max_hold_ms = max_hold;
	}
	return 0;
}

/* ---- inspecting a lock file ---- */

/* Fills `out` (path excepted) from the lock file `name` in `dfd`. */
static int inspect(int dfd, const char *name, pc_session_lock_info_t *out)
{
	int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? 0 : PC_ESYS; /* no file: free */
	int rc = 0;
	struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
	if (fcntl(fd, F_OFD_GETLK, &fl) != 0) {
		rc = PC_ESYS;
		goto out;
	}
	if (fl.l_type == F_UNLCK)
		goto out; /* nobody holds it (released, or the holder died): free */
	out->held = true;
	/* A new holder writes its record just after locking, over nothing or
	 * over a dead holder's: read again briefly while the record is missing
	 * or names a process that is gone. */
	for (int i = 0; i < RECORD_TRIES; i++) {
		if (i)
			sleep_ms(1);
		if ((rc = record_read(fd, out)))
			goto out;
		uint64_t st = 0;
		out->holder_alive = out->record_ok && pc_proc_starttime(out->pid, &st) == 0 &&
				    (out->starttime == 0 || st == out->starttime);
		if (out->holder_alive)
			break;
	}
	if (!out->record_ok)
		goto out;
	out->held_ms = pc__clock_wall_ms() - out->acquired_at_ms;
	if (out->held_ms < 0)
		out->held_ms = 0; /* the wall clock stepped back */
	out->overdue = out->held_ms > out->max_hold_ms;
out:
	{
		int e = errno;
		(void)close(fd);
		errno = e;
	}
	return rc;
}

int pc_session_lock_query(const char *dir, const char *session_key, pc_session_lock_info_t *out)
{
	if (!out)
		return PC_EINVAL;
	memset(out, 0, sizeof(*out));
	int rc = check_args(dir, session_key);
	if (rc)
		return rc;
	if (pc_runtime_on_worker())
		return PC_ESTATE;
	char name[NAME_LEN + 1];
	if ((rc = lock_name(session_key, name)))
		return rc;
	snprintf(out->path, sizeof(out->path), "%s/%s", dir, name);
	int dfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return errno == ENOENT ? 0 : PC_ESYS; /* no directory: nothing held */
	rc = inspect(dfd, name, out);
	(void)close(dfd);
	return rc;
}

int pc_session_lock_busy_message(const pc_session_lock_info_t *info, char *buf, size_t cap)
{
	if (!info || !buf || cap == 0)
		return PC_EINVAL;
	int n;
	if (info->record_ok)
		n = snprintf(buf, cap, "session busy: session file locked (timeout %" PRId64 "ms): pid=%d %s",
			     info->timeout_ms, (int)info->pid, info->path);
	else
		n = snprintf(buf, cap, "session busy: session file locked (timeout %" PRId64 "ms): pid=unknown %s",
			     info->timeout_ms, info->path);
	return n >= 0 && (size_t)n < cap ? 0 : PC_ELIMIT;
}

/* ---- acquiring ---- */

/* One attempt. *fd is the caller's descriptor of the lock file, kept
 * between attempts (-1: open it; a waiter that closed its descriptor after
 * each try would wake the others, see below). Returns 0 when locked and
 * still the file at the path (*size: its size), PC_EBUSY when another
 * description holds the lock (*fd stays open), PC_ESYS (*fd closed). */
static int try_lock(int dfd, const char *name, int *fd, off_t *size)
{
	for (int i = 0; i < RELOCK_TRIES; i++) {
		if (*fd < 0 && (*fd = openat(dfd, name, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600)) < 0)
			return PC_ESYS;
		int rc = 0;
		struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
		struct stat a, b;
		if (fcntl(*fd, F_OFD_SETLK, &fl) != 0) {
			if (errno == EAGAIN || errno == EACCES)
				return PC_EBUSY;
			rc = PC_ESYS;
		} else if (fstat(*fd, &a) != 0) {
			rc = PC_ESYS;
		} else if (fstatat(dfd, name, &b, AT_SYMLINK_NOFOLLOW) == 0) {
			if (a.st_dev == b.st_dev && a.st_ino == b.st_ino) {
				*size = a.st_size;
				return 0;
			}
		} else if (errno != ENOENT) {
			rc = PC_ESYS;
		}
		int e = errno;
		(void)close(*fd);
		*fd = -1;
		errno = e;
		if (rc)
			return rc;
		/* A sweep removed the file as we locked it: go again. */
	}
	return PC_EBUSY; /* the file keeps being replaced: others are busy with it */
}

/*
 * Waking waiters: an inotify watch on the lock directory reports when a
 * descriptor of the lock file opened for writing is closed -- a release, or
 * the exit of a holder that was killed -- or when the file is removed (a
 * sweep). Waiters keep their own descriptor open while they wait, so they
 * do not wake each other. Each waiting thread keeps one
 * inotify instance for its lifetime and adds a watch per wait: closing an
 * instance that has had a watch waits for an RCU grace period in the
 * kernel (measured: ~10 ms), far too much to pay on every contended
 * acquire. Without inotify a waiter still polls with the backoff.
 */
static __thread int tls_ifd = -1;
static __thread pid_t tls_ifd_pid;
static pthread_key_t ifd_key;
static pthread_once_t ifd_once = PTHREAD_ONCE_INIT;
static int ifd_key_rc = -1;

static void ifd_close(void *unused)
{
	(void)unused;
	if (tls_ifd >= 0)
		(void)close(tls_ifd);
	tls_ifd = -1;
}

static void ifd_key_init(void)
{
	ifd_key_rc = pthread_key_create(&ifd_key, ifd_close);
}

/* This thread's inotify instance, or -1. */
static int thread_inotify(void)
{
	pid_t me = getpid();
	if (tls_ifd >= 0 && tls_ifd_pid != me) {
		(void)close(tls_ifd); /* inherited over fork: the parent's instance */
		tls_ifd = -1;
	}
	if (tls_ifd >= 0)
		return tls_ifd;
	pthread_once(&ifd_once, ifd_key_init);
	if (ifd_key_rc != 0)
		return -1;
	int fd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
	if (fd < 0)
		return -1;
	if (pthread_setspecific(ifd_key, &tls_ifd) != 0) { /* the destructor closes it at thread exit */
		(void)close(fd);
		return -1;
	}
	tls_ifd = fd;
	tls_ifd_pid = me;
	return fd;
}

typedef struct pc__watch {
	int ifd; /* -1: no watch, poll */
	int wd;
} pc__watch_t;

static void watch_start(pc__watch_t *w, const char *dir)
{
	w->ifd = thread_inotify();
	w->wd = w->ifd < 0 ? -1 : inotify_add_watch(w->ifd, dir, IN_CLOSE_WRITE | IN_DELETE | IN_MOVED_FROM | IN_ONLYDIR);
	if (w->wd < 0)
		w->ifd = -1;
}

static void watch_stop(pc__watch_t *w)
{
	if (w->ifd >= 0 && inotify_rm_watch(w->ifd, w->wd) != 0)
		ifd_close(NULL); /* in doubt, start the next wait on a fresh instance */
}

/* Reads the pending events: 1 if one of this watch concerns `name` (or
 * events were lost), 0 if none did, -1 if the instance broke. Events of
 * earlier watches (other wds) are dropped. */
static int watch_drain(const pc__watch_t *w, const char *name)
{
	char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
	int hit = 0;
	for (;;) {
		ssize_t n = read(w->ifd, buf, sizeof(buf));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return hit;
		if (n <= 0)
			return -1;
		for (char *p = buf; p < buf + n;) {
			const struct inotify_event *ev = (const struct inotify_event *)p;
			if ((ev->mask & IN_Q_OVERFLOW) ||
			    (ev->wd == w->wd && ((ev->mask & IN_IGNORED) || (ev->len && strcmp(ev->name, name) == 0))))
				hit = 1;
			p += sizeof(*ev) + ev->len;
		}
	}
}

/* Waits until `until` (monotonic ms) or until the lock file may be free. */
static void wait_release(pc__watch_t *w, const char *name, uint64_t until)
{
	for (uint64_t now = (uint64_t)pc__clock_mono_ms(); now < until; now = (uint64_t)pc__clock_mono_ms()) {
		if (w->ifd < 0) {
			sleep_ms(until - now);
			return;
		}
		struct pollfd p = {.fd = w->ifd, .events = POLLIN};
		int r = poll(&p, 1, (int)(until - now));
		if (r < 0 && errno == EINTR)
			continue;
		int d = r > 0 ? watch_drain(w, name) : r;
		if (d < 0) { /* the instance broke: poll from now on */
			ifd_close(NULL);
			w->ifd = -1;
		} else if (d > 0) {
			return;
		}
	}
}

static void entry_free(pc__lock_entry_t *e)
{
	free(e->session_key);
	free(e->path);
	free(e);
}

static pc__lock_entry_t *registry_find(dev_t dev, ino_t ino, const char *name, pid_t pid)
{
	for (pc__lock_entry_t *e = reg_head; e; e = e->next)
		if (e->dev == dev && e->ino == ino && e->pid == pid && strcmp(e->name, name) == 0)
			return e;
	return NULL;
}

int pc_session_lock_acquire(const char *dir, const char *session_key, const pc_session_lock_opts_t *opts,
			    pc_session_lock_t **out, pc_session_lock_info_t *busy)
{
	if (!out)
		return PC_EINVAL;
	*out = NULL;
	int rc = check_args(dir, session_key);
	if (rc)
		return rc;
	pc_session_lock_opts_t o;
	if (opts)
		o = *opts;
	else
		pc_session_lock_opts_init(&o);
	if (o.max_hold_ms == 0)
		return PC_EINVAL;
	if (o.timeout_ms < 0)
		o.timeout_ms = env_ms("PINCER_SESSION_WRITE_LOCK_ACQUIRE_TIMEOUT_MS", PC_SESSION_LOCK_ACQUIRE_TIMEOUT_MS);
	if (o.max_hold_ms < 0)
		o.max_hold_ms = env_ms("PINCER_SESSION_WRITE_LOCK_MAX_HOLD_MS", PC_SESSION_LOCK_MAX_HOLD_MS);
	if (o.max_hold_ms == 0)
		o.max_hold_ms = PC_SESSION_LOCK_MAX_HOLD_MS; /* "0" from the environment: invalid, as in opts */
	if (pc_runtime_on_worker())
		return PC_ESTATE;

	pc__lock_entry_t *e = calloc(1, sizeof(*e));
	pc_session_lock_t *h = malloc(sizeof(*h));
	char *rec = NULL;
	pc__watch_t watch = {-1, -1};
	struct stat dst;
	if (e) {
		e->dfd = -1;
		e->fd = -1;
	}
	if (!e || !h) {
		rc = PC_ENOMEM;
		goto out;
	}
	if ((rc = lock_name(session_key, e->name)) || (rc = open_dir(dir, &e->dfd, &dst)))
		goto out;
	e->dev = dst.st_dev;
	e->ino = dst.st_ino;
	e->pid = getpid();

	if (o.allow_reentrant) {
		pthread_mutex_lock(&reg_mu);
		pc__lock_entry_t *held = registry_find(e->dev, e->ino, e->name, e->pid);
		if (held)
			held->count++;
		pthread_mutex_unlock(&reg_mu);
		if (held) {
			h->e = held;
			*out = h;
			h = NULL;
			goto out; /* `e` was only a probe */
		}
	}

	size_t plen = strlen(dir) + 1 + NAME_LEN + 1;
	e->session_key = strdup(session_key);
	e->path = malloc(plen);
	if (!e->session_key || !e->path) {
		rc = PC_ENOMEM;
		goto out;
	}
	snprintf(e->path, plen, "%s/%s", dir, e->name);

	uint64_t deadline = (uint64_t)pc__clock_mono_ms() + (uint64_t)o.timeout_ms, backoff = PC_SESSION_LOCK_POLL_MIN_MS;
	bool watching = false;
	off_t old_size = 0;
	for (;;) {
		rc = try_lock(e->dfd, e->name, &e->fd, &old_size);
		if (rc != PC_EBUSY)
			break;
		uint64_t now = (uint64_t)pc__clock_mono_ms();
		if (now >= deadline)
			break;
		if (!watching) {
			/* Try once more right after arming the watch: a release
			 * between the failed try and the watch sends no event we
			 * would see. */
			watching = true;
			watch_start(&watch, dir);
			continue;
		}
		wait_release(&watch, e->name, now + backoff < deadline ? now + backoff : deadline);
		backoff = backoff * 2 < PC_SESSION_LOCK_POLL_MAX_MS ? backoff * 2 : PC_SESSION_LOCK_POLL_MAX_MS;
	}
	if (rc == PC_EBUSY && busy) {
		memset(busy, 0, sizeof(*busy));
		snprintf(busy->path, sizeof(busy->path), "%s", e->path);
		busy->timeout_ms = o.timeout_ms;
		if (inspect(e->dfd, e->name, busy) != 0)
			busy->record_ok = false; /* still busy; just less to say */
	}
	if (rc)
		goto out;

	e->count = 1;
	e->max_hold_ms = o.max_hold_ms;
	e->since_ms = (uint64_t)pc__clock_mono_ms();
	size_t len = 0;
	if ((rc = record_build(e, pc__clock_wall_ms(), &rec, &len)) || (rc = record_write(e->fd, rec, len, old_size)))
		goto out; /* closing e->fd gives the lock back */
	pthread_mutex_lock(&reg_mu);
	e->next = reg_head;
	reg_head = e;
	pthread_mutex_unlock(&reg_mu);
	h->e = e;
	*out = h;
	e = NULL;
	h = NULL;
out:
	{
		int err = errno;
		free(rec);
		watch_stop(&watch);
		if (e) {
			if (e->fd >= 0)
				(void)close(e->fd);
			if (e->dfd >= 0)
				(void)close(e->dfd);
			entry_free(e);
		}
		free(h);
		errno = err;
	}
	return rc;
}

int pc_session_lock_release(pc_session_lock_t *lock)
{
	if (!lock)
		return PC_EINVAL;
	pc__lock_entry_t *e = lock->e;
	free(lock);
	bool mine = e->pid == getpid();
	pthread_mutex_lock(&reg_mu);
	bool last = --e->count == 0;
	if (last) {
		pc__lock_entry_t **pp = &reg_head;
		while (*pp != e)
			pp = &(*pp)->next;
		*pp = e->next;
	}
	pthread_mutex_unlock(&reg_mu);
	if (!last)
		return mine ? 0 : PC_ESTATE;

	/* The record is voided (its '{' overwritten: no block freed and
	 * allocated again, as truncating would) while we still hold the lock,
	 * so a valid record only ever names the holder or one that died.
	 * Closing our descriptor releases the lock whatever close reports (in a
	 * forked child it only drops the child's reference). The file stays:
	 * nobody locks it, so it is free, and a sweep removes it. */
	int rc = mine ? 0 : PC_ESTATE;
	if (mine && pwrite(e->fd, RECORD_VOID, 1, 0) != 1)
		rc = PC_ESYS;
	if (close(e->fd) != 0 && rc == 0)
		rc = PC_ESYS;
	(void)close(e->dfd);
	entry_free(e);
	return rc;
}

/* ---- the sweep ---- */

static bool is_lock_name(const char *n)
{
	return strlen(n) == NAME_LEN && strspn(n, "0123456789abcdef") == 64 && strcmp(n + 64, ".lock") == 0;
}

int pc_session_lock_sweep(const char *dir, size_t *removed)
{
	if (removed)
		*removed = 0;
	if (!dir || !*dir)
		return PC_EINVAL;
	if (pc_runtime_on_worker())
		return PC_ESTATE;
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return errno == ENOENT ? 0 : PC_ESYS;
	DIR *d = fdopendir(dfd);
	if (!d) {
		int e = errno;
		(void)close(dfd);
		errno = e;
		return PC_ESYS;
	}
	int rc = 0;
	struct dirent *de;
	errno = 0;
	while (rc == 0 && (de = readdir(d))) {
		if (!is_lock_name(de->d_name))
			continue;
		int fd = openat(dfd, de->d_name, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0) {
			rc = errno == ENOENT ? 0 : PC_ESYS; /* ENOENT: another sweep was first */
		} else {
			/* Remove only a file nobody holds, while holding it: an
			 * acquirer that opened it before sees it gone once it gets
			 * the lock, and starts over. */
			struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
			struct stat a, b;
			if (fcntl(fd, F_OFD_SETLK, &fl) == 0 && fstat(fd, &a) == 0 &&
			    fstatat(dfd, de->d_name, &b, AT_SYMLINK_NOFOLLOW) == 0 && a.st_dev == b.st_dev &&
			    a.st_ino == b.st_ino) {
				if (unlinkat(dfd, de->d_name, 0) != 0)
					rc = PC_ESYS;
				else if (removed)
					(*removed)++;
			}
			int e = errno;
			(void)close(fd);
			errno = e;
		}
		if (rc == 0)
			errno = 0; /* so that a NULL from readdir can tell end from error */
	}
	if (rc == 0 && errno != 0)
		rc = PC_ESYS;
	int e = errno;
	(void)closedir(d);
	errno = e;
	return rc;
}

/* ---- the overdue report ---- */

typedef struct pc__overdue {
	pc_session_lock_held_t h;
	char *key;
	char *path;
} pc__overdue_t;

int pc_session_lock_overdue(pc_session_lock_held_fn fn, void *user, size_t *count)
{
	if (count)
		*count = 0;
	if (!fn)
		return PC_EINVAL;
	int rc = 0;
	size_t n = 0, cap = 0;
	pc__overdue_t *v = NULL;
	uint64_t now = (uint64_t)pc__clock_mono_ms();
	pid_t me = getpid();
	/* Copy under the mutex, call back outside it. */
	pthread_mutex_lock(&reg_mu);
	for (pc__lock_entry_t *e = reg_head; e && rc == 0; e = e->next) {
		int64_t held = (int64_t)(now - e->since_ms);
		if (e->pid != me || held <= e->max_hold_ms)
			continue;
		if ((rc = PC__GROW(v, cap, n + 1, 8)))
			break;
		pc__overdue_t *o = &v[n];
		o->key = strdup(e->session_key);
		o->path = strdup(e->path);
		o->h = (pc_session_lock_held_t){o->key, o->path, held, e->max_hold_ms, e->count};
		n++;
		if (!o->key || !o->path)
			rc = PC_ENOMEM;
	}
	pthread_mutex_unlock(&reg_mu);
	for (size_t i = 0; i < n && rc == 0; i++)
		rc = fn(user, &v[i].h);
	if (count && rc != PC_ENOMEM)
		*count = n;
	for (size_t i = 0; i < n; i++) {
		free(v[i].key);
		free(v[i].path);
	}
	free(v);
	return rc;
}
