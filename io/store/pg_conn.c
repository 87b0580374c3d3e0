/*
 * The PostgreSQL backend's connections: opening one with the settings the
 * store's promises rest on, waiting for results with a deadline, and the
 * server's SQLSTATEs as the store's codes.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>

#include "pg_internal.h"

/* Margin over the statement timeout for a result to cross the network. */
#define PC__PG_WAIT_MARGIN_MS 5000

int pc__pg_wait_ms(const pc__pg_be_t *be)
{
	return (int)be->cfg.statement_timeout_ms + PC__PG_WAIT_MARGIN_MS;
}

int pc__pg_code(const PGresult *r, const PGconn *c)
{
	if (c && PQstatus(c) == CONNECTION_BAD)
		return PC_STORE_EUNAVAIL;
	const char *st = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
	if (!st || strlen(st) != 5)
		return r ? PC_STORE_EIO : PC_STORE_EUNAVAIL;
	if (strcmp(st, "57014") == 0) /* query_canceled: the statement timeout */
		return PC_ETIMEDOUT;
	if (strcmp(st, "23505") == 0) /* unique_violation */
		return PC_EEXIST;
	if (strcmp(st, "53100") == 0) /* disk_full */
		return PC_STORE_EFULL;
	if (strcmp(st, "53200") == 0) /* out_of_memory */
		return PC_ENOMEM;
	if (strcmp(st, "25006") == 0 || strcmp(st, "42501") == 0) /* a standby; no privilege */
		return PC_STORE_EREADONLY;
	if (strncmp(st, "40", 2) == 0 || strcmp(st, "55P03") == 0) /* serialization, deadlock; a lock */
		return PC_EBUSY;
	if (strncmp(st, "08", 2) == 0 || strncmp(st, "57P", 3) == 0) /* connection; shutdown */
		return PC_STORE_EUNAVAIL;
	if (strncmp(st, "22", 2) == 0 || strncmp(st, "23", 2) == 0) /* bad data (invalid UTF-8...) */
		return PC_EINVAL;
	if (strncmp(st, "XX", 2) == 0)
		return PC_STORE_ECORRUPT;
	return PC_STORE_EIO;
}

/* Runs a settings statement on a fresh (not yet pipelined) connection. */
static int exec_ok(PGconn *c, const char *sql)
{
	PGresult *r = PQexec(c, sql);
	int rc = PQresultStatus(r) == PGRES_COMMAND_OK ? 0 : pc__pg_code(r, c);
	PQclear(r);
	return rc;
}

int pc__pg_connect(const pc__pg_be_t *be, const char *role, PGconn **out)
{
	*out = NULL;
	char app[64], timeout[64];
	snprintf(app, sizeof(app), "pincer-%s", role);
	/* Defaults first: the URL's own settings, expanded from dbname,
	 * come after them and win. A server that does not answer within
	 * connect_timeout, or a peer gone silent (keepalives), is a failed
	 * connection, not a thread waiting for ever. */
	const char *const keys[] = {"application_name", "connect_timeout", "keepalives", "keepalives_idle",
				    "keepalives_interval", "keepalives_count", "dbname", NULL};
	const char *const vals[] = {app, "5", "1", "10", "5", "3", be->url, NULL};
	PGconn *c = PQconnectdbParams(keys, vals, 1);
	if (!c)
		return PC_ENOMEM;
	if (PQstatus(c) != CONNECTION_OK) {
		PQfinish(c);
		return PC_STORE_EUNAVAIL;
	}
	/* Durability is the store's promise, not the server's default: an
	 * acknowledged write has been flushed by the server (and by its
	 * synchronous standbys, if it has any). */
	snprintf(timeout, sizeof(timeout), "SET statement_timeout = %u", be->cfg.statement_timeout_ms);
	int rc = PQsetClientEncoding(c, "UTF8") == 0 ? 0 : PC_STORE_EIO;
	if (rc == 0)
		rc = exec_ok(c, "SET synchronous_commit = on");
	if (rc == 0)
		rc = exec_ok(c, timeout);
	if (rc == 0)
		rc = exec_ok(c, "SET idle_in_transaction_session_timeout = 60000");
	if (rc != 0) {
		PQfinish(c);
		return rc;
	}
	*out = c;
	return 0;
}

int pc__pg_next(PGconn *c, int timeout_ms, PGresult **out)
{
	*out = NULL;
	while (PQisBusy(c)) {
		struct pollfd p = {.fd = PQsocket(c), .events = POLLIN};
		if (p.fd < 0)
			return PC_STORE_EUNAVAIL;
		int n = poll(&p, 1, timeout_ms);
		if (n == 0)
			return PC_ETIMEDOUT;
		if (n < 0 && errno != EINTR)
			return PC_ESYS;
		if (n > 0 && !PQconsumeInput(c))
			return PC_STORE_EUNAVAIL;
	}
	*out = PQgetResult(c);
	return 0;
}

bool pc__pg_idle_alive(PGconn *c)
{
	struct pollfd p = {.fd = PQsocket(c), .events = POLLIN};
	return p.fd >= 0 && PQstatus(c) == CONNECTION_OK && poll(&p, 1, 0) == 0;
}
