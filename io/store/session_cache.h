/*
 * The SQLite writer's cache of session rows.
 *
 * Every append bumps its session's last seq and every run bumps its run
 * count: three reads and writes of one row per run, most of them to rows
 * the same writer just wrote. The cache keeps, per session, the row's id,
 * last seq and lease epoch, and what the open transaction changed; the
 * changes are written once per session at commit. The writer clears it
 * whenever it cannot vouch for it: after a rollback, before any operation
 * that reads or writes session rows itself, and when another connection
 * has committed since (PRAGMA data_version).
 */
#ifndef PINCER_IO_STORE_SESSION_CACHE_H
#define PINCER_IO_STORE_SESSION_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct pc__sc pc__sc_t;

typedef struct pc__sc_entry {
	int64_t sid, last_seq, epoch; /* as the row is, with the open changes */
	/* the open transaction's changes, written by the next flush */
	bool dirty;
	int64_t updated_ms; /* 0: not appended to */
	int64_t runs_added;
	char *last_run; /* owned; NULL: unchanged */
} pc__sc_entry_t;

/* NULL when out of memory. At most `cap` sessions are held. */
pc__sc_t *pc__sc_new(uint32_t cap);
void pc__sc_free(pc__sc_t *c);

/* The session's entry, or NULL. */
pc__sc_entry_t *pc__sc_get(pc__sc_t *c, const char *key, size_t klen);

/* A new clean entry for a session not held; NULL when full (flush and
 * clear, then add again) or out of memory. */
pc__sc_entry_t *pc__sc_add(pc__sc_t *c, const char *key, size_t klen, int64_t sid, int64_t last_seq,
			   int64_t epoch);

/* Marks an entry changed (it joins the dirty list once). */
void pc__sc_touch(pc__sc_t *c, pc__sc_entry_t *e);

/* The changed entries, for writing: count, then each by index. */
size_t pc__sc_dirty_count(const pc__sc_t *c);
pc__sc_entry_t *pc__sc_dirty(pc__sc_t *c, size_t i);

/* After the changes are written: every entry clean, entries kept. */
void pc__sc_written(pc__sc_t *c);

/* Forgets every entry and every unwritten change. */
void pc__sc_clear(pc__sc_t *c);

#endif
