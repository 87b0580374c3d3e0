/*
 * The SQLite VFS the store's writer opens its database with: the default
 * VFS, except that the writes a commit makes to the write-ahead log go out
 * in one system call when SQLite syncs the log (wal_vfs.c). Correct only
 * with synchronous=FULL, which the store always sets.
 */
#ifndef PINCER_IO_STORE_WAL_VFS_H
#define PINCER_IO_STORE_WAL_VFS_H

#include <sqlite3.h>

#define PC__WAL_VFS_NAME "pincer-wal"

/* Registers the VFS (not as the default) once per process; later calls
 * return the first call's result. SQLITE_OK or SQLite's error. */
int pc__wal_vfs_register(void);

#endif
