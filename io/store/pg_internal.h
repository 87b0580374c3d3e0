/*
 * What the PostgreSQL backend's files share, private to the store: the
 * backend's state, connecting (pg_conn.c), the schema and its migrations
 * (pg_schema.c) and the reading side (pg_read.c) that pg.c, the writer
 * with open and close, plugs into the backend.
 */
#ifndef PC_STORE_PG_INTERNAL_H
#define PC_STORE_PG_INTERNAL_H

#include <libpq-fe.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "io/io.h"
#include "store_internal.h"

/* A pooled reader connection with its prepared statements (pg_read.c). */
typedef struct pc__pg_reader pc__pg_reader_t;

/* The backend: one writer connection in pipeline mode, used by one
 * blocking thread at a time, and a pool of reader connections opened on
 * demand. */
typedef struct pc__pg_be {
	char *url;
	pc_store_config_t cfg;
	PGconn *w;            /* the writer's connection; NULL while down */
	int64_t retry_ms;     /* monotonic: no new connection before this */
	uint32_t backoff_ms;  /* the wait after the next failed connect */
	int down_rc;          /* why the last connect failed */
	pthread_mutex_t lock; /* guards idle */
	pc__pg_reader_t *idle;
	struct pg_async *async; /* a batch an I/O loop polls (pg.c), or one it
				 * began and the blocking path is to finish */
} pc__pg_be_t;

/* ---- connections (pg_conn.c) ---- */

/* Opens a connection to be->url as `role` ("writer", "reader": the
 * application_name's suffix), with the session settings durability needs
 * (synchronous_commit on, UTF-8, the statement timeout). PC_STORE_EUNAVAIL
 * when the server cannot be reached. */
int pc__pg_connect(const pc__pg_be_t *be, const char *role, PGconn **out);

/* A failed result's code: its SQLSTATE as a PC_* / PC_STORE_* code
 * (PC_STORE_EUNAVAIL for a lost connection). */
int pc__pg_code(const PGresult *r, const PGconn *c);

/* The next result (NULL: the end of one query's results), waiting at
 * most `timeout_ms` for it: 0, or PC_ETIMEDOUT / PC_STORE_EUNAVAIL. */
int pc__pg_next(PGconn *c, int timeout_ms, PGresult **out);

/* Whether an idle connection may be used. The server never speaks to an
 * idle connection unasked: one that went away meanwhile (a restart, an
 * administrator's terminate) has left its last words or the end of the
 * stream, which shows as input waiting. */
bool pc__pg_idle_alive(PGconn *c);

/* How long a result may keep us waiting: the server's statement timeout
 * and a margin for the network. */
int pc__pg_wait_ms(const pc__pg_be_t *be);

/* ---- the schema (pg_schema.c) ---- */

/* Creates or migrates the schema on `c` (a plain, not pipelined
 * connection), serialised with other processes by an advisory lock;
 * refuses a database that holds tables of someone else's
 * (PC_STORE_EFOREIGN) or a newer schema (PC_STORE_EVERSION). */
int pc__pg_migrate(PGconn *c);

/* ---- the reading side (pg_read.c) ---- */

/* The backend's reads, answered from a pooled reader connection. */
extern const pc__store_reads_t pc__pg_reads;
/* Closes the idle reader connections (the backend's close). */
void pc__pg_readers_free(pc__pg_be_t *be);

#endif
