/*
 * Every turn of a `pincer load --out` run (load_out.h), kept while the
 * run goes on, and turns.csv from them at its end.
 *
 * The sessions record from every runtime thread as their turns end. A
 * record takes a slot by one atomic add (the per-turn counters in load.h
 * take several already) in an array of fixed chunks, made on first use;
 * a chunk is never moved, so no writer waits for another. Only a failed
 * turn takes a lock, to name its error once in a small table.
 */
#include "load_out.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"

#define CHUNK_RECS 4096u      /* 224 KiB a chunk */
#define MAX_CHUNKS (1u << 18) /* a billion turns; the table of chunks is 2 MiB */
#define CODES 256             /* error codes named; past them, "other" */
#define CODE_LEN 48

struct pc_load_records {
	_Atomic(pc_load_rec_t *) chunks[MAX_CHUNKS];
	atomic_uint_fast64_t slots; /* taken, some maybe past the end */
	atomic_uint_fast64_t lost;  /* not kept: no memory for a chunk, or past the end */
	pthread_mutex_t mu;         /* codes */
	char codes[CODES][CODE_LEN];
	unsigned n_codes;
};

int pc_load_records_new(pc_load_records_t **out)
{
	pc_load_records_t *r = calloc(1, sizeof(*r));
	if (!r)
		return PC_ENOMEM;
	pthread_mutex_init(&r->mu, NULL);
	*out = r;
	return 0;
}

void pc_load_records_free(pc_load_records_t *r)
{
	if (!r)
		return;
	for (size_t i = 0; i < MAX_CHUNKS; i++)
		free(atomic_load(&r->chunks[i]));
	pthread_mutex_destroy(&r->mu);
	free(r);
}

/* The index of `error` in the table, added when new. */
static uint8_t code_of(pc_load_records_t *r, const char *error)
{
	pthread_mutex_lock(&r->mu);
	unsigned i = 0;
	while (i < r->n_codes && strcmp(r->codes[i], error) != 0)
		i++;
	if (i == r->n_codes) {
		if (i == CODES)
			i--; /* the last takes what does not fit */
		else
			r->n_codes++;
		snprintf(r->codes[i], CODE_LEN, "%s", i + 1 < CODES ? error : "other");
	}
	pthread_mutex_unlock(&r->mu);
	return (uint8_t)i;
}

void pc_load_records_add(pc_load_records_t *r, const pc_load_rec_t *rec, const char *error)
{
	if (!r)
		return;
	uint64_t slot = atomic_fetch_add(&r->slots, 1);
	uint64_t c = slot / CHUNK_RECS;
	if (c >= MAX_CHUNKS) {
		atomic_fetch_add(&r->lost, 1);
		return;
	}
	pc_load_rec_t *chunk = atomic_load(&r->chunks[c]);
	if (!chunk) {
		/* zeroed: a slot whose writer found no memory stays outcome 0,
		 * and the write skips it */
		pc_load_rec_t *fresh = calloc(CHUNK_RECS, sizeof(*fresh));
		if (!fresh) {
			atomic_fetch_add(&r->lost, 1);
			return;
		}
		if (atomic_compare_exchange_strong(&r->chunks[c], &chunk, fresh))
			chunk = fresh;
		else
			free(fresh); /* another made it first: chunk is that one */
	}
	pc_load_rec_t *dst = &chunk[slot % CHUNK_RECS];
	*dst = *rec;
	dst->code = error ? code_of(r, error) : 0;
}

/* ",ms" since `from` in whole µs, as the histograms keep them (so a
 * row's turn_ms is the figures' own); "," when either time is missing or
 * they are out of order, which the histograms skip too. */
static void cell_ms(FILE *f, uint64_t from, uint64_t to)
{
	if (!from || !to || to < from) {
		fputc(',', f);
		return;
	}
	uint64_t us = (to - from) / 1000;
	fprintf(f, ",%llu.%03llu", (unsigned long long)(us / 1000), (unsigned long long)(us % 1000));
}

/* A CSV cell, quoted when it holds a comma, a quote or a line break (an
 * error code is a gateway's string). */
static void cell_text(FILE *f, const char *s)
{
	fputc(',', f);
	if (!s[strcspn(s, ",\"\r\n")]) {
		fputs(s, f);
		return;
	}
	fputc('"', f);
	for (; *s; s++) {
		if (*s == '"')
			fputc('"', f);
		fputc(*s, f);
	}
	fputc('"', f);
}

static const char *outcome_name(uint8_t outcome)
{
	return outcome == PC_LOAD_OUTCOME_OK ? "ok" : outcome == PC_LOAD_OUTCOME_FAILED ? "failed" : "in_flight";
}

static void row(FILE *f, const pc_load_records_t *r, const pc_load_stats_t *st, const pc_load_rec_t *x)
{
	fprintf(f, "%u,%u", x->session, x->turn);
	cell_ms(f, st->t0_ns, x->intended);
	cell_ms(f, st->t0_ns, x->started);
	cell_ms(f, x->intended, x->accepted);
	cell_ms(f, x->intended, x->first);
	cell_ms(f, x->intended, x->end);
	fprintf(f, ",%u,%u", x->tokens, x->tool_calls);
	cell_text(f, outcome_name(x->outcome));
	cell_text(f, x->outcome == PC_LOAD_OUTCOME_FAILED ? r->codes[x->code] : "");
	fprintf(f, ",%d\n", x->warmup ? 1 : 0);
}

int pc_load_records_write(const pc_load_records_t *r, const pc_load_stats_t *st, const char *path,
			  pc_load_rows_t *rows)
{
	*rows = (pc_load_rows_t){0};
	FILE *f = fopen(path, "w");
	if (!f) {
		fprintf(stderr, PC_LOAD_CMD ": %s: %s\n", path, strerror(errno));
		return PC_CLI_FAIL;
	}
	int err = 0;
	if (fputs("session,turn,intended_ms,start_ms,accepted_ms,ttft_ms,turn_ms,tokens,tool_calls,outcome,error,warmup\n", f) < 0)
		err = errno;
	uint64_t slots = atomic_load(&r->slots);
	/* in the order the turns ended, near enough; a chunk never made (no
	 * memory) and a slot never written are passed over */
	for (uint64_t c = 0; c < MAX_CHUNKS && c * CHUNK_RECS < slots && !err; c++) {
		const pc_load_rec_t *chunk = atomic_load(&r->chunks[c]);
		for (uint64_t i = 0; chunk && i < CHUNK_RECS && c * CHUNK_RECS + i < slots; i++) {
			const pc_load_rec_t *x = &chunk[i];
			if (!x->outcome)
				continue;
			row(f, r, st, x);
			rows->ok += x->outcome == PC_LOAD_OUTCOME_OK;
			rows->failed += x->outcome == PC_LOAD_OUTCOME_FAILED;
			rows->with_ttft += x->outcome == PC_LOAD_OUTCOME_OK && x->first;
		}
		if (ferror(f))
			err = errno ? errno : EIO;
	}
	if (fclose(f) != 0 && !err)
		err = errno;
	if (err) {
		fprintf(stderr, PC_LOAD_CMD ": %s: %s\n", path, strerror(err));
		return PC_CLI_FAIL;
	}
	uint64_t lost = atomic_load(&r->lost);
	if (lost)
		fprintf(stderr, PC_LOAD_CMD ": %s: %llu turns not recorded (out of memory)\n", path,
			(unsigned long long)lost);
	return 0;
}
