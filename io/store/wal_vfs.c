/*
 * A VFS shim that gathers the writer's WAL writes into one pwrite per sync.
 *
 * A commit appends its pages to the write-ahead log as frames, each frame
 * a 24-byte header and a page, each written by its own pwrite: a commit of
 * sixteen pages is 32 system calls before the fsync. The frames of a commit
 * are contiguous, and with synchronous=FULL (the only mode the store uses)
 * SQLite syncs the log before it publishes the frames in the wal-index,
 * which is what readers go by. So the shim keeps contiguous writes to a
 * log file in memory and writes them out in one call when SQLite syncs,
 * reads, truncates, asks the size, or closes the file, or when a write
 * does not continue the gathered run, or when the run grows past a bound.
 * What SQLite sees is unchanged except that a failed write is reported by
 * the call that writes it out (the sync, for a commit), which fails the
 * commit just as the write would have.
 *
 * Files other than write-ahead logs are the underlying VFS's own, opened
 * straight into the shim's file structure.
 */
#include "wal_vfs.h"
#include "io/io.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* Past this many gathered bytes, the run is written out at once. */
#define GATHER_MAX ((size_t)1 << 20)
/* A buffer grown past this by a large commit is let go after it. */
#define KEEP_MAX ((size_t)256 << 10)
/* The unix VFS writes at most this much per call: it masks the length with
 * 0x1ffff, so a larger write would be cut (to nothing, for a multiple of
 * 128 KiB) and reported as a full disk. */
#define WRITE_MAX ((size_t)0x1ffff)

typedef struct wal_file {
	sqlite3_file base;  /* pMethods: &wal_methods */
	sqlite3_file *real; /* the underlying file, right after this struct */
	char *buf;
	size_t len, cap;
	sqlite3_int64 at; /* the file offset of buf[0] */
} wal_file_t;

static sqlite3_vfs shim;
static sqlite3_vfs *real_vfs;

static wal_file_t *W(sqlite3_file *f)
{
	return (wal_file_t *)f;
}

/* Writes the gathered run out. Empty afterwards even when the write failed:
 * SQLite treats the failure as the commit's and rewrites what it needs. */
static int flush(wal_file_t *w)
{
	int rc = SQLITE_OK;
	for (size_t done = 0; done < w->len && rc == SQLITE_OK;) {
		size_t n = w->len - done < WRITE_MAX ? w->len - done : WRITE_MAX;
		rc = w->real->pMethods->xWrite(w->real, w->buf + done, (int)n, w->at + (sqlite3_int64)done);
		done += n;
	}
	w->len = 0;
	if (w->cap > KEEP_MAX) {
		free(w->buf);
		w->buf = NULL;
		w->cap = 0;
	}
	return rc;
}

static int w_close(sqlite3_file *f)
{
	wal_file_t *w = W(f);
	int rc = flush(w);
	int crc = w->real->pMethods->xClose(w->real);
	free(w->buf);
	w->buf = NULL;
	return rc != SQLITE_OK ? rc : crc;
}

static int w_read(sqlite3_file *f, void *out, int n, sqlite3_int64 off)
{
	wal_file_t *w = W(f);
	int rc = flush(w);
	return rc != SQLITE_OK ? rc : w->real->pMethods->xRead(w->real, out, n, off);
}

static int w_write(sqlite3_file *f, const void *data, int n, sqlite3_int64 off)
{
	wal_file_t *w = W(f);
	if (n <= 0)
		return w->real->pMethods->xWrite(w->real, data, n, off);
	if (w->len > 0 && off != w->at + (sqlite3_int64)w->len) {
		int rc = flush(w);
		if (rc != SQLITE_OK)
			return rc;
	}
	size_t need = w->len + (size_t)n;
	if (need > GATHER_MAX) {
		int rc = flush(w);
		return rc != SQLITE_OK ? rc : w->real->pMethods->xWrite(w->real, data, n, off);
	}
	if (PC__GROW(w->buf, w->cap, need, 64 * 1024)) {
		int rc = flush(w);
		return rc != SQLITE_OK ? rc : w->real->pMethods->xWrite(w->real, data, n, off);
	}
	if (w->len == 0)
		w->at = off;
	memcpy(w->buf + w->len, data, (size_t)n);
	w->len += (size_t)n;
	return SQLITE_OK;
}

static int w_truncate(sqlite3_file *f, sqlite3_int64 size)
{
	wal_file_t *w = W(f);
	int rc = flush(w);
	return rc != SQLITE_OK ? rc : w->real->pMethods->xTruncate(w->real, size);
}

static int w_sync(sqlite3_file *f, int flags)
{
	wal_file_t *w = W(f);
	int rc = flush(w);
	return rc != SQLITE_OK ? rc : w->real->pMethods->xSync(w->real, flags);
}

static int w_file_size(sqlite3_file *f, sqlite3_int64 *size)
{
	wal_file_t *w = W(f);
	int rc = flush(w);
	return rc != SQLITE_OK ? rc : w->real->pMethods->xFileSize(w->real, size);
}

static int w_lock(sqlite3_file *f, int level)
{
	return W(f)->real->pMethods->xLock(W(f)->real, level);
}

static int w_unlock(sqlite3_file *f, int level)
{
	return W(f)->real->pMethods->xUnlock(W(f)->real, level);
}

static int w_check_reserved(sqlite3_file *f, int *out)
{
	return W(f)->real->pMethods->xCheckReservedLock(W(f)->real, out);
}

static int w_file_control(sqlite3_file *f, int op, void *arg)
{
	wal_file_t *w = W(f);
	int rc = flush(w);
	return rc != SQLITE_OK ? rc : w->real->pMethods->xFileControl(w->real, op, arg);
}

static int w_sector_size(sqlite3_file *f)
{
	return W(f)->real->pMethods->xSectorSize(W(f)->real);
}

static int w_device_characteristics(sqlite3_file *f)
{
	return W(f)->real->pMethods->xDeviceCharacteristics(W(f)->real);
}

/* Version 1: SQLite maps and shares memory through the database file, never
 * through its log. */
static const sqlite3_io_methods wal_methods = {
	.iVersion = 1,
	.xClose = w_close,
	.xRead = w_read,
	.xWrite = w_write,
	.xTruncate = w_truncate,
	.xSync = w_sync,
	.xFileSize = w_file_size,
	.xLock = w_lock,
	.xUnlock = w_unlock,
	.xCheckReservedLock = w_check_reserved,
	.xFileControl = w_file_control,
	.xSectorSize = w_sector_size,
	.xDeviceCharacteristics = w_device_characteristics,
};

static int shim_open(sqlite3_vfs *vfs, sqlite3_filename name, sqlite3_file *f, int flags, int *out_flags)
{
	(void)vfs;
	if (!(flags & SQLITE_OPEN_WAL))
		return real_vfs->xOpen(real_vfs, name, f, flags, out_flags);
	wal_file_t *w = W(f);
	memset(w, 0, sizeof(*w));
	w->real = (sqlite3_file *)(w + 1);
	int rc = real_vfs->xOpen(real_vfs, name, w->real, flags, out_flags);
	if (rc != SQLITE_OK)
		return rc; /* pMethods stays NULL: SQLite will not close it */
	w->base.pMethods = &wal_methods;
	return SQLITE_OK;
}

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int registered = SQLITE_ERROR;

static void do_register(void)
{
	real_vfs = sqlite3_vfs_find(NULL);
	if (!real_vfs)
		return;
	shim = *real_vfs;
	shim.zName = PC__WAL_VFS_NAME;
	shim.szOsFile = (int)sizeof(wal_file_t) + real_vfs->szOsFile;
	shim.pNext = NULL;
	shim.xOpen = shim_open;
	registered = sqlite3_vfs_register(&shim, 0);
}

int pc__wal_vfs_register(void)
{
	pthread_once(&once, do_register);
	return registered;
}
