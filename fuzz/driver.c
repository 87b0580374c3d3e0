/*
 * A stand-in for libFuzzer's main, so the targets build with gcc and run
 * in CI (fuzz/README.md): runs LLVMFuzzerTestOneInput on every file of
 * the corpus directories given, then on mutations of them (bit flips,
 * byte changes, insertions, deletions, cut-outs, splices of two seeds)
 * for a bounded time. No coverage guidance: this keeps the targets
 * building and their seeds passing, not a substitute for fuzzing.
 *
 *   fuzz_x [-ms=N] [-runs=N] [-seed=N] DIR_OR_FILE...
 *
 * -ms: how long to mutate (default 2000 ms, 0: only the seeds); -runs: at
 * most that many mutated inputs (default 100000); -seed: the PRNG's seed
 * (default from the clock, printed so a failure can be replayed). A target
 * that finds a bug traps or a sanitizer aborts; a signal handler then
 * writes the input that did it to ./<program>.crash, and the same -seed
 * replays the same inputs.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define DRIVER_MAX_INPUT ((size_t)1 << 20)

typedef struct input {
	uint8_t *data;
	size_t size;
} input_t;

typedef struct corpus {
	input_t *items;
	size_t count, cap;
} corpus_t;

static uint64_t now_ms(void)
{
	struct timespec ts;
	if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0)
		return 0;
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static uint64_t rng_state;
static char crash_path[256]; /* where a failing input goes */
static const uint8_t *volatile current;
static volatile size_t current_size;

static uint64_t rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

static size_t below(size_t n)
{
	return n ? (size_t)(rnd() % n) : 0;
}

static int load_file(corpus_t *c, const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		fprintf(stderr, "fuzz driver: %s: %s\n", path, strerror(errno));
		return -1;
	}
	uint8_t *buf = malloc(DRIVER_MAX_INPUT);
	size_t n = buf ? fread(buf, 1, DRIVER_MAX_INPUT, f) : 0;
	int bad = !buf || ferror(f);
	if (fclose(f) != 0 || bad) {
		fprintf(stderr, "fuzz driver: cannot read %s\n", path);
		free(buf);
		return -1;
	}
	if (c->count == c->cap) {
		size_t cap = c->cap ? c->cap * 2 : 16;
		input_t *items = realloc(c->items, cap * sizeof(*items));
		if (!items) {
			free(buf);
			return -1;
		}
		c->items = items;
		c->cap = cap;
	}
	c->items[c->count++] = (input_t){buf, n};
	return 0;
}

/* A file, or every regular file of a directory (not recursive). */
static int load(corpus_t *c, const char *path)
{
	struct stat st;
	if (stat(path, &st) != 0) {
		fprintf(stderr, "fuzz driver: %s: %s\n", path, strerror(errno));
		return -1;
	}
	if (!S_ISDIR(st.st_mode))
		return load_file(c, path);
	DIR *d = opendir(path);
	if (!d) {
		fprintf(stderr, "fuzz driver: %s: %s\n", path, strerror(errno));
		return -1;
	}
	int rc = 0;
	struct dirent *e;
	while (rc == 0 && (e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		char p[4096];
		if (snprintf(p, sizeof(p), "%s/%s", path, e->d_name) >= (int)sizeof(p))
			return closedir(d), -1;
		rc = load_file(c, p);
	}
	if (closedir(d) != 0)
		rc = -1;
	return rc;
}

/* A target failed (trap, abort, fault): keep its input, then die of the
 * same signal (async-signal-safe calls only). */
static void on_crash(int sig)
{
	int fd = open(crash_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd >= 0) {
		const uint8_t *p = current;
		size_t left = current_size;
		while (p && left > 0) {
			ssize_t n = write(fd, p, left);
			if (n <= 0)
				break;
			p += n;
			left -= (size_t)n;
		}
		(void)close(fd);
		static const char msg[] = "fuzz driver: the failing input is in the .crash file\n";
		(void)!write(2, msg, sizeof(msg) - 1);
	}
	(void)raise(sig); /* SA_RESETHAND: the default action now */
}

static int catch_crashes(void)
{
	static const int sigs[] = {SIGABRT, SIGILL, SIGTRAP, SIGSEGV, SIGBUS, SIGFPE};
	struct sigaction sa = {.sa_handler = on_crash, .sa_flags = SA_RESETHAND};
	if (sigemptyset(&sa.sa_mask) != 0)
		return -1;
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		if (sigaction(sigs[i], &sa, NULL) != 0)
			return -1;
	return 0;
}

static void run(const uint8_t *data, size_t size)
{
	current = data;
	current_size = size;
	LLVMFuzzerTestOneInput(data, size);
}

/* One to four random edits of a copy of a seed (a splice with another one
 * among them), into buf (DRIVER_MAX_INPUT bytes): the new size. */
static size_t mutate(const corpus_t *c, uint8_t *buf)
{
	const input_t *s = &c->items[below(c->count)];
	size_t n = s->size;
	memcpy(buf, s->data, n);
	for (unsigned k = 1 + (unsigned)below(4); k > 0; k--) {
		size_t at = below(n + 1);
		switch (below(6)) {
		case 0: /* flip a bit */
			if (n)
				buf[below(n)] ^= (uint8_t)(1u << below(8));
			break;
		case 1: /* a byte anything, or one that matters to parsers */
			if (n) {
				static const uint8_t special[] = {0, 0xff, 0x7f, 0x80, '\r', '\n', '"', '\\', '{', ':'};
				buf[below(n)] = below(2) ? (uint8_t)rnd() : special[below(sizeof(special))];
			}
			break;
		case 2: /* insert a few bytes */
			if (n + 8 <= DRIVER_MAX_INPUT) {
				size_t m = 1 + below(8);
				memmove(buf + at + m, buf + at, n - at);
				for (size_t i = 0; i < m; i++)
					buf[at + i] = (uint8_t)rnd();
				n += m;
			}
			break;
		case 3: /* delete a run */
			if (at < n) {
				size_t m = 1 + below(n - at);
				memmove(buf + at, buf + at + m, n - at - m);
				n -= m;
			}
			break;
		case 4: /* repeat a run */
			if (at < n) {
				size_t m = 1 + below(n - at < 64 ? n - at : 64);
				if (n + m <= DRIVER_MAX_INPUT) {
					memmove(buf + at + m, buf + at, n - at);
					n += m;
				}
			}
			break;
		default: { /* splice: this seed's head, another's tail */
			const input_t *o = &c->items[below(c->count)];
			size_t from = below(o->size + 1), m = o->size - from;
			if (at + m <= DRIVER_MAX_INPUT) {
				memcpy(buf + at, o->data + from, m);
				n = at + m;
			}
		}
		}
	}
	return n;
}

static int opt(const char *arg, const char *name, unsigned long long *out)
{
	size_t len = strlen(name);
	if (strncmp(arg, name, len) != 0)
		return 0;
	char *end = NULL;
	errno = 0;
	*out = strtoull(arg + len, &end, 10);
	if (errno || !arg[len] || *end) {
		fprintf(stderr, "fuzz driver: bad %s'%s'\n", name, arg + len);
		exit(2);
	}
	return 1;
}

int main(int argc, char **argv)
{
	unsigned long long ms = 2000, runs = 100000, seed = 0;
	corpus_t c = {0};
	for (int i = 1; i < argc; i++) {
		if (opt(argv[i], "-ms=", &ms) || opt(argv[i], "-runs=", &runs) || opt(argv[i], "-seed=", &seed))
			continue;
		if (load(&c, argv[i]) != 0)
			return 2;
	}
	if (c.count == 0) {
		fprintf(stderr, "usage: %s [-ms=N] [-runs=N] [-seed=N] DIR_OR_FILE... (no seeds given)\n", argv[0]);
		return 2;
	}
	const char *name = strrchr(argv[0], '/');
	snprintf(crash_path, sizeof(crash_path), "%s.crash", name ? name + 1 : argv[0]);
	if (catch_crashes() != 0) {
		fprintf(stderr, "fuzz driver: sigaction: %s\n", strerror(errno));
		return 1;
	}
	if (!seed)
		seed = now_ms() ^ ((uint64_t)getpid() << 32);
	rng_state = seed ? seed : 1;
	fprintf(stderr, "fuzz driver: %zu seeds, then mutations for %llu ms (-seed=%llu)\n", c.count, ms, seed);
	for (size_t i = 0; i < c.count; i++)
		run(c.items[i].data, c.items[i].size);
	uint8_t *buf = malloc(DRIVER_MAX_INPUT);
	if (!buf)
		return 1;
	uint64_t until = now_ms() + ms, done = 0;
	while (ms && done < runs && now_ms() < until) {
		run(buf, mutate(&c, buf));
		done++;
	}
	fprintf(stderr, "fuzz driver: %llu mutated inputs, no failure\n", (unsigned long long)done);
	free(buf);
	for (size_t i = 0; i < c.count; i++)
		free(c.items[i].data);
	free(c.items);
	return 0;
}
