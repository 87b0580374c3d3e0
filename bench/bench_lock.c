/*
 * lock: the session write lock (io/lock/session_lock.h).
 *
 * lock_uncontended: one process takes and gives back one session's lock N
 * times (default 20,000); reports ns per acquire + release (the whole
 * round: open, lock, check, record write, close).
 *
 * lock_contended: two processes loop on the same session for 3 s: acquire
 * (the wait is timed), hold HOLD_US (spinning, as a short rewrite would),
 * release, then do something else for THINK_US (sleeping) before the next
 * acquire. Reports acquisitions/s, handoffs/s (acquisitions that took the
 * lock over from the other process) and the p50 / p99 / max acquire wait.
 *
 * The lock does not use the runtime; --workers is accepted like elsewhere
 * and only reported.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "benchlib.h"
#include "io/lock/session_lock.h"

#define HOLD_US 20
#define THINK_US 100
#define CONTENDED_S 3.0
#define MAX_WAITS 400000 /* per process */

typedef struct shared {
	int go;                  /* atomic: the start gun */
	int last;                /* who held the lock last (1 or 2); written under the lock */
	uint64_t handoffs;       /* written under the lock */
	uint64_t n[2];           /* acquisitions per process */
	uint64_t failed[2];      /* acquires that did not succeed */
	uint64_t waits[2][MAX_WAITS]; /* ns */
} shared_t;

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void rm_dir(const char *root, const char *dir)
{
	/* Released locks leave their (one) file, which the sweep removes. */
	size_t removed = 0;
	int rc = pc_session_lock_sweep(dir, &removed);
	if (rc || removed != 1 || rmdir(dir) != 0 || rmdir(root) != 0)
		bench_fail("cannot clean up %s (sweep: %s, %zu removed)", dir, pc_strerror(rc), removed);
}

static void uncontended(const char *dir, uint64_t n, uint32_t workers)
{
	pc_session_lock_opts_t o;
	pc_session_lock_opts_init(&o);
	o.timeout_ms = 0;
	pc_session_lock_t *l;
	for (int i = 0; i < 100; i++) { /* warm up: directory, page cache, libcrypto */
		if (pc_session_lock_acquire(dir, "agent:main:main", &o, &l, NULL) || pc_session_lock_release(l))
			bench_fail("warm-up acquire/release failed");
	}
	double t0 = bench_now_s();
	for (uint64_t i = 0; i < n; i++) {
		int rc = pc_session_lock_acquire(dir, "agent:main:main", &o, &l, NULL);
		if (rc == 0)
			rc = pc_session_lock_release(l);
		if (rc)
			bench_fail("acquire/release: %s", pc_strerror(rc));
	}
	double wall = bench_now_s() - t0;
	char extra[96];
	snprintf(extra, sizeof(extra), "\"ns_per_acquire_release\":%.0f", wall * 1e9 / (double)n);
	bench_report("lock_uncontended", workers, wall, n, extra);
}

static void spin_us(uint64_t us)
{
	uint64_t until = now_ns() + us * 1000u;
	while (now_ns() < until)
		;
}

/* One contender (a child process): `me` is 1 or 2. */
static void contend(const char *dir, shared_t *sh, int me)
{
	pc_session_lock_opts_t o;
	pc_session_lock_opts_init(&o);
	o.timeout_ms = 10000;
	while (!__atomic_load_n(&sh->go, __ATOMIC_ACQUIRE))
		;
	uint64_t end = now_ns() + (uint64_t)(CONTENDED_S * 1e9);
	struct timespec think = {0, THINK_US * 1000L};
	uint64_t k = 0;
	while (now_ns() < end && k < MAX_WAITS) {
		pc_session_lock_t *l;
		uint64_t t0 = now_ns();
		if (pc_session_lock_acquire(dir, "agent:main:main", &o, &l, NULL) != 0) {
			sh->failed[me - 1]++;
			continue;
		}
		sh->waits[me - 1][k++] = now_ns() - t0;
		if (sh->last != me) {
			if (sh->last)
				sh->handoffs++;
			sh->last = me;
		}
		spin_us(HOLD_US);
		if (pc_session_lock_release(l) != 0)
			sh->failed[me - 1]++;
		nanosleep(&think, NULL);
	}
	sh->n[me - 1] = k;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static void contended(const char *dir, uint32_t workers)
{
	shared_t *sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED)
		bench_fail("mmap failed");
	pid_t kids[2];
	fflush(NULL);
	for (int i = 0; i < 2; i++) {
		kids[i] = fork();
		if (kids[i] < 0)
			bench_fail("fork failed");
		if (kids[i] == 0) {
			contend(dir, sh, i + 1);
			_exit(0);
		}
	}
	double t0 = bench_now_s();
	__atomic_store_n(&sh->go, 1, __ATOMIC_RELEASE);
	for (int i = 0; i < 2; i++) {
		int st = 0;
		/* Bounded: each child stops after CONTENDED_S plus one acquire timeout. */
		double until = bench_now_s() + CONTENDED_S + 15.0;
		pid_t r;
		while ((r = waitpid(kids[i], &st, WNOHANG)) == 0 && bench_now_s() < until)
			usleep(10000);
		if (r == 0) {
			kill(kids[i], SIGKILL);
			waitpid(kids[i], &st, 0);
			bench_fail("contender %d did not finish", i + 1);
		}
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
			bench_fail("contender %d failed (status 0x%x)", i + 1, st);
	}
	double wall = bench_now_s() - t0;
	if (sh->failed[0] || sh->failed[1])
		bench_fail("%llu acquires or releases failed", (unsigned long long)(sh->failed[0] + sh->failed[1]));
	uint64_t total = sh->n[0] + sh->n[1];
	uint64_t *all = malloc(total * sizeof(*all));
	if (!all || total == 0)
		bench_fail("no acquisitions");
	memcpy(all, sh->waits[0], sh->n[0] * sizeof(*all));
	memcpy(all + sh->n[0], sh->waits[1], sh->n[1] * sizeof(*all));
	qsort(all, total, sizeof(*all), cmp_u64);
	char extra[320];
	snprintf(extra, sizeof(extra),
		 "\"processes\":2,\"hold_us\":%d,\"think_us\":%d,\"handoffs\":%llu,\"handoffs_per_s\":%.1f,"
		 "\"acquires_p1\":%llu,\"acquires_p2\":%llu,\"p50_wait_us\":%.1f,\"p99_wait_us\":%.1f,"
		 "\"max_wait_us\":%.1f",
		 HOLD_US, THINK_US, (unsigned long long)sh->handoffs, (double)sh->handoffs / wall,
		 (unsigned long long)sh->n[0], (unsigned long long)sh->n[1], (double)all[total / 2] / 1e3,
		 (double)all[total * 99 / 100] / 1e3, (double)all[total - 1] / 1e3);
	bench_report("lock_contended", workers, wall, total, extra);
	free(all);
	munmap(sh, sizeof(*sh));
}

int main(int argc, char **argv)
{
	bench_opts_t o;
	bench_parse(argc, argv, &o);
	char root[] = "/tmp/pc-bench-lock-XXXXXX";
	if (!mkdtemp(root))
		bench_fail("mkdtemp failed");
	char dir[64];
	snprintf(dir, sizeof(dir), "%s/locks", root);
	uncontended(dir, o.n ? o.n : 20000, o.workers);
	contended(dir, o.workers);
	rm_dir(root, dir);
	return 0;
}
