/*
 * A race against the file tools (tool_fs_fixture.h): a thread swaps names
 * of the workspace, again and again, between what they should be and ways
 * out, while the test thread calls the tools on those names.
 *
 *   x, w    regular files "inside"        each swapped with
 *             .abs    a symbolic link to <out>/secret.txt
 *             .rel    a symbolic link ../<out>/secret.txt
 *             .hard   a hard link of <out>/secret.txt
 *   d       a directory holding secret.txt "inside-d"   swapped with
 *             d.abs   a symbolic link to <out>
 *             d.rel   a symbolic link ../<out>
 *
 * read uses x and d/secret.txt, write uses w, d/secret.txt and d/new.txt:
 * x keeps its hard link for read, whatever write does to w.
 *
 * Each swap is one renameat2(RENAME_EXCHANGE): the name always exists, and
 * is one or the other at every instant. The count of calls is bounded.
 */
#ifndef PC_TESTS_TOOL_FS_RACE_H
#define PC_TESTS_TOOL_FS_RACE_H

#include <stdatomic.h>
#include <stdio.h>

#include "tool_fs_fixture.h"

#define RACE_CALLS 4000

typedef struct racer {
	int rootfd;
	atomic_bool stop;
	atomic_ulong swaps;
	atomic_int failed_errno; /* the first failed swap's errno, 0 when none */
	pthread_t thread;
} racer_t;

static const char *const race_ways_out[][2] = {
	{"x", "x.abs"}, {"x", "x.rel"}, {"x", "x.hard"}, {"d", "d.abs"},
	{"d", "d.rel"}, {"w", "w.abs"}, {"w", "w.rel"}, {"w", "w.hard"},
};

static inline void *race_swapper(void *arg)
{
	racer_t *r = arg;
	for (unsigned long i = 0; !atomic_load(&r->stop); i++) {
		const char *const *w = race_ways_out[i % (sizeof(race_ways_out) / sizeof(race_ways_out[0]))];
		/* In, then back out: the ways out take turns. */
		for (int k = 0; k < 2; k++) {
			if (renameat2(r->rootfd, w[0], r->rootfd, w[1], RENAME_EXCHANGE) != 0) {
				int none = 0;
				atomic_compare_exchange_strong(&r->failed_errno, &none, errno);
				return NULL;
			}
			atomic_fetch_add(&r->swaps, 1);
		}
	}
	return NULL;
}

/* One regular file `name` with its three ways out. */
static inline void race_file(fx_t *f, const char *name)
{
	const char *out = strrchr(f->out, '/') + 1;
	char p[PATH_MAX], q[PATH_MAX], n[64];
	put(f->root, name, "inside");
	snprintf(p, sizeof(p), "%s/secret.txt", f->out);
	snprintf(n, sizeof(n), "%s.abs", name);
	link_at(f->root, n, p);
	snprintf(q, sizeof(q), "%s/%s.hard", f->root, name);
	cr_assert_eq(link(p, q), 0, "%s", strerror(errno));
	snprintf(p, sizeof(p), "../%s/secret.txt", out);
	snprintf(n, sizeof(n), "%s.rel", name);
	link_at(f->root, n, p);
}

/* Builds the names above in f's workspace and starts the swapping. */
static inline void race_start(fx_t *f, racer_t *r)
{
	race_file(f, "x");
	race_file(f, "w");
	mkdir_at(f->root, "d");
	put(f->root, "d/secret.txt", "inside-d");
	link_at(f->root, "d.abs", f->out);
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "../%s", strrchr(f->out, '/') + 1);
	link_at(f->root, "d.rel", p);
	*r = (racer_t){.rootfd = open(f->root, O_PATH | O_DIRECTORY | O_CLOEXEC)};
	cr_assert_geq(r->rootfd, 0);
	cr_assert_eq(pthread_create(&r->thread, NULL, race_swapper, r), 0);
}

/* Stops the swapping; it must have gone on the whole time. */
static inline void race_stop(racer_t *r)
{
	atomic_store(&r->stop, true);
	cr_assert_eq(pthread_join(r->thread, NULL), 0);
	close(r->rootfd);
	cr_assert_eq(atomic_load(&r->failed_errno), 0, "a swap failed: %s", strerror(atomic_load(&r->failed_errno)));
	cr_assert_gt(atomic_load(&r->swaps), 100u, "the names were hardly swapped");
}

/* The counts of one tool's calls in the race. */
typedef struct race_count {
	unsigned ok, refused;
} race_count_t;

/* One read: never the outside file; an inside one when it succeeds. */
static inline void race_read(fx_t *f, int i, race_count_t *c)
{
	const char *path = i % 2 ? "d/secret.txt" : "x";
	char args[64];
	snprintf(args, sizeof(args), "{\"path\":\"%s\"}", path);
	rec_t res = call(f, "read", args);
	cr_assert_null(strstr(res.text, "SECRET"), "call %d read the outside file through %s: %s", i, path, res.text);
	if (!res.is_error)
		cr_assert(strcmp(res.text, i % 2 ? "inside-d" : "inside") == 0 || strncmp(res.text, "written ", 8) == 0,
			  "call %d read %s: %s", i, path, res.text);
	c->ok += !res.is_error;
	c->refused += res.is_error;
	free(res.text);
}

static inline void race_write(fx_t *f, int i, race_count_t *c)
{
	static const char *const paths[] = {"w", "d/secret.txt", "d/new.txt"};
	char args[96];
	snprintf(args, sizeof(args), "{\"path\":\"%s\",\"content\":\"written %d\"}", paths[(i / 2) % 3], i);
	rec_t res = call(f, "write", args);
	c->ok += !res.is_error;
	c->refused += res.is_error;
	free(res.text);
}

/*
 * Reads and writes, taking turns, while the names are swapped. read never
 * returns the outside file; the outside directory keeps its one file,
 * unchanged, with nothing created next to it (no new file, no temporary
 * one). Each tool succeeds at least once (it did work) and is refused at
 * least once (it did meet the ways out).
 */
static inline void race_read_write(fx_t *f)
{
	racer_t r;
	race_start(f, &r);
	race_count_t reads = {0}, writes = {0};
	for (int i = 0; i < RACE_CALLS; i++) {
		if (i % 2)
			race_write(f, i, &writes);
		else
			race_read(f, i / 2, &reads);
	}
	race_stop(&r);
	assert_outside_intact(f);
	cr_assert(reads.ok > 0 && reads.refused > 0, "reads: %u ok, %u refused", reads.ok, reads.refused);
	cr_assert(writes.ok > 0 && writes.refused > 0, "writes: %u ok, %u refused", writes.ok, writes.refused);
}

#endif
