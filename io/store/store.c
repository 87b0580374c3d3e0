/*
 * The store front: the store actor (group commit), its answers, the
 * blocking jobs, open and close, and the plain-thread wrappers. Requests
 * are built in store_requests.c and read answers unpacked in
 * store_replies.c; the backend does the SQL.
 *
 * Group commit. Writes queue in the actor. An idle actor that gets a write
 * starts a batch at once, or, with a window configured, waits window_ms
 * for company (a timer) unless group_max writes arrive first. A batch goes
 * to the blocking pool as one transaction, each write in its own savepoint
 * so that one bad write fails alone. Writes arriving while a batch commits
 * wait for it and go in the next batch at once. The pool thread answers
 * every write of a batch after COMMIT returned, then tells the actor, so
 * at most one batch is in flight.
 */
#include "store_internal.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "actors/timer.h"
#include "runtime/blocking.h"
#include "runtime/clock.h"

/* Actor-private message types. */
enum {
	STORE_TICK = 0x53540200u,  /* payload u64: the window's generation */
	STORE_BATCH_DONE,
	STORE_CLOSE,
	STORE_BATCH_HELD, /* s->held has a batch to send again */
	STORE_HELD_TICK,  /* its pause is over */
};

/* The pauses between sends of a held batch. */
#define HOLD_PAUSE_MIN_MS 100u
#define HOLD_PAUSE_MAX_MS 1000u

struct pc_store {
	pc_runtime_t *rt;
	const pc__store_backend_t *ops;
	void *be;
	pc_store_config_t cfg; /* path not kept */
	pc_actor_t *actor;
	pthread_mutex_t lock;  /* guards reads */
	pthread_cond_t cond;
	uint32_t reads;        /* read jobs submitted and not finished */
	pc_store_stats_t stats; /* __atomic counters */
	int32_t health_rc;      /* __atomic: the latest write transaction's outcome */
	int64_t health_since_ms;
	struct batch *held;     /* __atomic: a batch handed back to the actor
				 * (STORE_BATCH_HELD), until it takes it */
};

/* ---- errors, config, small helpers ---- */

const char *pc_store_strerror(int code)
{
	switch (code) {
	case PC_STORE_ECORRUPT: return "store: the file is not a database or is damaged";
	case PC_STORE_EFOREIGN: return "store: the database is not a Pincer store";
	case PC_STORE_EVERSION: return "store: the database was written by a newer Pincer";
	case PC_STORE_EFULL: return "store: disk full or file size limit reached";
	case PC_STORE_EREADONLY: return "store: the database or its directory is read-only";
	case PC_STORE_EIO: return "store: I/O error";
	case PC_STORE_ETOOBIG: return "store: content over the size limit";
	case PC_STORE_EFENCED: return "store: stale lease epoch";
	case PC_STORE_ECONFLICT: return "store: the transcript changed since the snapshot";
	case PC_STORE_ECANTOPEN: return "store: the database file cannot be opened";
	case PC_STORE_EUNAVAIL: return "store: the database server cannot be reached";
	case PC_STORE_EUNKNOWN: return "store: connection lost during commit, outcome unknown";
	default: return pc_strerror(code);
	}
}

void pc_store_config_init(pc_store_config_t *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
}

static void config_resolve(pc_store_config_t *c)
{
	if (c->group_max == 0)
		c->group_max = PC_STORE_DEFAULT_GROUP_MAX;
	if (c->lazy_ms == 0)
		c->lazy_ms = PC_STORE_DEFAULT_LAZY_MS;
	if (c->hold_ms == 0)
		c->hold_ms = PC_STORE_DEFAULT_HOLD_MS;
	if (c->max_content == 0)
		c->max_content = PC_STORE_DEFAULT_MAX_CONTENT;
	if (c->audit_max == 0)
		c->audit_max = PC_STORE_DEFAULT_AUDIT_MAX;
	if (c->audit_days == 0)
		c->audit_days = PC_STORE_DEFAULT_AUDIT_DAYS;
	if (c->timeout_ms == 0)
		c->timeout_ms = PC_STORE_DEFAULT_TIMEOUT_MS;
	if (c->idem_ttl_ms <= 0)
		c->idem_ttl_ms = PC_STORE_DEFAULT_IDEM_TTL_MS;
	if (c->statement_timeout_ms == 0)
		c->statement_timeout_ms = PC_STORE_DEFAULT_STATEMENT_TIMEOUT_MS;
}

int pc_store_default_path(char *buf, size_t len)
{
	const char *home = getenv("PINCER_HOME");
	if (!home || !*home)
		home = "./.pincer";
	int n = snprintf(buf, len, "%s/state.db", home);
	return (n < 0 || (size_t)n >= len) ? PC_ELIMIT : 0;
}

void pc_store_health(pc_store_t *s, pc_store_health_t *out)
{
	*out = (pc_store_health_t){0};
	if (!s)
		return;
	out->rc = __atomic_load_n(&s->health_rc, __ATOMIC_ACQUIRE);
	out->since_ms = __atomic_load_n(&s->health_since_ms, __ATOMIC_RELAXED);
}

/* ---- replies ---- */

pc_msg_t *pc__store_reply_msg(const pc_store_reply_t *r)
{
	size_t il = strnlen(r->id, PC_STORE_ID_MAX), cl = strnlen(r->code, PC_STORE_CODE_MAX);
	pc_msg_t *m = pc_msg_new(PC_STORE_MSG_REPLY, PC__STORE_REPLY_HEAD + il + 1 + cl + 1);
	if (m) {
		char *p = pc_msg_data(m);
		memcpy(p, r, PC__STORE_REPLY_HEAD);
		memcpy(p + PC__STORE_REPLY_HEAD, r->id, il);
		p[PC__STORE_REPLY_HEAD + il] = '\0';
		memcpy(p + PC__STORE_REPLY_HEAD + il + 1, r->code, cl);
		p[PC__STORE_REPLY_HEAD + il + 1 + cl] = '\0';
	}
	return m;
}

bool pc__store_wants_early(const pc__store_op_t *op)
{
	return op->reply_to && op->kind == PC_STORE_REQ_RUN_BEGIN && op->nint >= I_RB_N &&
	       (op->i[I_RB_FLAGS] & PC_STORE_REQ_EARLY);
}

void pc__store_tell_early(pc__store_op_t *op)
{
	if (op->told_early || op->res.rc != 0 || !pc__store_wants_early(op))
		return;
	pc_store_reply_t r = op->res;
	r.flags |= PC_STORE_PROVISIONAL;
	pc_msg_t *m = pc__store_reply_msg(&r);
	if (m) {
		m->corr = op->corr;
		op->told_early = pc_send(op->reply_to, m) == 0;
	}
}

pc_msg_t *pc__store_error_reply(uint32_t kind, int rc)
{
	if (kind == PC_STORE_REQ_HISTORY)
		return pc__store_hist_error(rc);
	if (kind == PC_STORE_REQ_USAGE_LIST || kind == PC_STORE_REQ_USAGE_DAYS)
		return pc__store_usage_error(rc);
	if (kind == PC_STORE_REQ_SESSIONS)
		return pc__store_list_error(PC_STORE_MSG_SESSIONS, rc);
	if (kind == PC_STORE_REQ_RUNS_OPEN)
		return pc__store_list_error(PC_STORE_MSG_RUNS, rc);
	if (kind == PC_STORE_REQ_DEVICES)
		return pc__store_list_error(PC_STORE_MSG_DEVICES, rc);
	if (kind == PC_STORE_REQ_NODES)
		return pc__store_list_error(PC_STORE_MSG_NODES, rc);
	pc_store_reply_t r = {.rc = rc};
	return pc__store_reply_msg(&r);
}

static bool is_read(uint32_t kind)
{
	return kind == PC_STORE_REQ_HISTORY || kind == PC_STORE_REQ_RUN_GET || kind == PC_STORE_REQ_SESSIONS ||
	       kind == PC_STORE_REQ_RUNS_OPEN || kind == PC_STORE_REQ_USAGE_LIST || kind == PC_STORE_REQ_USAGE_DAYS ||
	       kind == PC_STORE_REQ_DEVICES || kind == PC_STORE_REQ_NODES;
}

/* Answers a decoded op (if it asked) with its result, `delay_ms` late
 * (0: now); frees the op. A reply that cannot be allocated is lost: the
 * asker's timeout covers it. */
static void op_answer_after(pc__store_op_t *op, uint64_t delay_ms)
{
	if (op->reply_to) {
		pc_msg_t *m = op->kind == PC_STORE_REQ_RUN_GET || !is_read(op->kind)
				      ? pc__store_reply_msg(&op->res)
				      : pc__store_error_reply(op->kind, op->res.rc);
		if (m) {
			m->corr = op->corr;
			/* An asker that has stopped frees the reply as a dead
			 * letter: nothing to do about a failed send. */
			if (delay_ms)
				(void)pc_timer_after(op->reply_to, delay_ms, m, NULL);
			else
				(void)pc_send(op->reply_to, m);
		}
	}
	pc__store_op_free(op);
}

static void op_answer(pc__store_op_t *op)
{
	op_answer_after(op, 0);
}

/* The test hook (pc_store_config_t.test_lease_delay_*): how late the
 * answer to `op` goes. */
static uint64_t answer_delay(const pc_store_t *s, const pc__store_op_t *op)
{
	const char *key = s->cfg.test_lease_delay_key;
	if (!key || !s->cfg.test_lease_delay_ms || op->kind != PC_STORE_REQ_LEASE_ACQUIRE ||
	    op->nstr <= S_LS_KEY || !op->s[S_LS_KEY] || pc__store_len(op, S_LS_KEY) != strlen(key) ||
	    memcmp(op->s[S_LS_KEY], key, strlen(key)) != 0)
		return 0;
	return s->cfg.test_lease_delay_ms;
}

/* Answers a request still in the handler with an error. */
static void answer_now(const pc_msg_t *req, int rc)
{
	if (!req->reply_to)
		return;
	pc_msg_t *m = pc__store_error_reply(req->type, rc);
	if (m)
		pc_reply(req, m);
}

/* ---- blocking jobs ---- */

typedef struct batch {
	pc_store_t *s;
	pc__store_op_t *ops;
	uint32_t writes; /* syncs not counted */
	uint64_t unreachable_ms; /* monotonic: when the database first could not be reached for it; 0: not yet */
	pc_msg_t *done; /* STORE_BATCH_DONE, allocated up front: the actor must
			 * hear that the batch ended, even when memory is short */
} batch_t;

static void batch_fail(pc__store_op_t *op, int rc)
{
	for (; op; op = op->next)
		op->res = (pc_store_reply_t){.rc = rc};
}

/* On a blocking thread: one pass over the batch in one transaction; with
 * `guarded`, each op in a savepoint of its own so a failed op leaves the
 * others in. */
static int batch_pass(pc_store_t *s, batch_t *b, bool guarded)
{
	if (s->ops->batch)
		return s->ops->batch(s->be, b->ops, guarded);
	int rc = s->ops->begin(s->be);
	for (pc__store_op_t *op = b->ops; op && rc == 0; op = op->next) {
		if (op->kind == PC_STORE_REQ_SYNC)
			continue; /* it asks only for the commit */
		rc = s->ops->apply(s->be, op, guarded);
		if (rc == 0)
			pc__store_tell_early(op);
	}
	if (rc == 0)
		rc = s->ops->commit(s->be);
	return rc;
}

static void batch_end(batch_t *b, int rc, uint64_t cpu0);

static pc_msg_t *batch_run(void *arg)
{
	batch_t *b = arg;
	pc_store_t *s = b->s;
	uint64_t cpu0 = pc__clock_thread_cpu_ns();
	/* Optimistic: almost every batch succeeds whole, so it first runs
	 * without a savepoint per op (two statements fewer each). If anything
	 * failed, the transaction is rolled back and the batch runs again
	 * guarded, where a failed op (a fenced write, a conflict, a refused
	 * size) fails alone. */
	int rc = batch_pass(s, b, false);
	/* a database that cannot be reached refused no write: held, not split */
	if (rc != 0 && rc != PC_STORE_EUNAVAIL) {
		if (s->ops->rollback)
			s->ops->rollback(s->be);
		__atomic_add_fetch(&s->stats.retried_batches, 1, __ATOMIC_RELAXED);
		rc = batch_pass(s, b, true);
	}
	if (rc != 0 && s->ops->rollback)
		s->ops->rollback(s->be);
	batch_end(b, rc, cpu0);
	return NULL;
}

/* A batch over (rc: the whole batch failed with it), on the thread that
 * ran it: its health and counters, and every answer. `cpu0`: that thread's
 * CPU time when the batch began (0: not counted). */
/* The writes' health as the latest transaction left it: /readyz and
 * on_health hear of a change. One writer thread at a time: the pair is
 * written by it alone. */
static void note_health(pc_store_t *s, int rc)
{
	if (__atomic_load_n(&s->health_rc, __ATOMIC_RELAXED) == rc)
		return;
	__atomic_store_n(&s->health_since_ms, pc__clock_wall_ms(), __ATOMIC_RELAXED);
	__atomic_store_n(&s->health_rc, rc, __ATOMIC_RELEASE);
	if (s->cfg.on_health)
		s->cfg.on_health(s->cfg.health_user, rc);
}

/* A batch the database certainly did not keep, because it could not be
 * reached, goes back to the store actor to be sent again after a pause,
 * until hold_ms have passed since it first could not: its writes, and
 * those queued behind it, wait rather than fail. False: it fails now. */
static bool batch_hold(batch_t *b, int rc)
{
	pc_store_t *s = b->s;
	uint64_t now = pc__clock_mono_ms();
	if (rc != PC_STORE_EUNAVAIL)
		return false;
	if (!b->unreachable_ms)
		b->unreachable_ms = now;
	if (now - b->unreachable_ms >= s->cfg.hold_ms)
		return false;
	pc_msg_t *m = pc_msg_new(STORE_BATCH_HELD, 0);
	if (!m)
		return false;
	for (pc__store_op_t *op = b->ops; op; op = op->next)
		op->res = (pc_store_reply_t){0};
	note_health(s, rc);
	__atomic_add_fetch(&s->stats.held_batches, 1, __ATOMIC_RELAXED);
	__atomic_store_n(&s->held, b, __ATOMIC_RELEASE);
	if (pc_send(s->actor, m) == 0)
		return true;
	/* the store is stopping: the batch fails after all */
	return __atomic_exchange_n(&s->held, NULL, __ATOMIC_ACQ_REL) == NULL;
}

static void batch_end(batch_t *b, int rc, uint64_t cpu0)
{
	pc_store_t *s = b->s;
	if (batch_hold(b, rc))
		return;
	if (rc != 0) {
		batch_fail(b->ops, rc);
		__atomic_add_fetch(&s->stats.failed_batches, 1, __ATOMIC_RELAXED);
	}
	/* a database that went away mid-commit: writes fail until it is back */
	int lost = 0;
	for (pc__store_op_t *op = b->ops; op; op = op->next) {
		bool gone = op->res.rc == PC_STORE_EUNKNOWN || op->res.rc == PC_STORE_EUNAVAIL;
		if (gone && rc == 0)
			lost = op->res.rc;
		if (op->res.rc == PC_STORE_EUNKNOWN)
			__atomic_add_fetch(&s->stats.unknown_writes, 1, __ATOMIC_RELAXED);
		else if (op->res.rc == PC_STORE_EFENCED)
			__atomic_add_fetch(&s->stats.fenced_writes, 1, __ATOMIC_RELAXED);
	}
	if (rc == 0)
		rc = lost;
	note_health(s, rc);
	__atomic_add_fetch(&s->stats.batches, 1, __ATOMIC_RELAXED);
	__atomic_add_fetch(&s->stats.writes, b->writes, __ATOMIC_RELAXED);
	uint64_t cpu1 = pc__clock_thread_cpu_ns();
	if (cpu0 && cpu1 > cpu0)
		__atomic_add_fetch(&s->stats.write_cpu_ns, cpu1 - cpu0, __ATOMIC_RELAXED);
	/* Durable (or failed) now: answer, and tell the store actor, handed
	 * to the workers together (one wake-up for the batch, not one each). */
	pc_runtime_hold_begin();
	pc__store_op_t *op = b->ops;
	while (op) {
		pc__store_op_t *next = op->next;
		op_answer_after(op, answer_delay(s, op));
		op = next;
	}
	(void)pc_send(s->actor, b->done); /* a stopped store needs no news */
	pc_runtime_hold_end();
	free(b);
}


static void batch_discard(void *arg)
{
	batch_t *b = arg;
	pc__store_op_t *op = b->ops;
	while (op) {
		pc__store_op_t *next = op->next;
		pc__store_op_free(op);
		op = next;
	}
	pc_msg_free(b->done);
	free(b);
}

/* The end of a batch a backend ran with no thread of its own, on the
 * thread that polled it: answered here, or run on the blocking pool after
 * all when the backend says so (where a batch it began is finished). */
static void batch_started_done(void *arg, int rc, uint64_t cpu_ns)
{
	batch_t *b = arg;
	if (cpu_ns)
		__atomic_add_fetch(&b->s->stats.write_cpu_ns, cpu_ns, __ATOMIC_RELAXED);
	if (rc == PC__STORE_TO_POOL) {
		if (pc_blocking_submit(b->s->rt, batch_run, batch_discard, b, NULL) == 0)
			return;
		/* no room on the pool: its outcome may already be decided, so
		 * it is finished here rather than failed */
		(void)batch_run(b);
		return;
	}
	batch_end(b, rc, 0);
}

static void reads_done(pc_store_t *s)
{
	pthread_mutex_lock(&s->lock);
	s->reads--;
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
}

typedef struct read_job {
	pc_store_t *s;
	pc__store_op_t *op;
	void *polled; /* the backend's read, once its rows are in (reads->start) */
} read_job_t;

/* Whether a read op has what its kind needs. */
static bool read_checked(const pc__store_op_t *op)
{
	switch (op->kind) {
	case PC_STORE_REQ_USAGE_LIST:
		return op->nstr >= S_UL_N && (op->s[S_UL_RUN] || op->s[S_UL_KEY]);
	case PC_STORE_REQ_USAGE_DAYS:
		return op->nint >= I_UD_N;
	case PC_STORE_REQ_RUN_GET:
		return op->nstr >= S_RG_N && op->s[S_RG_RUN];
	case PC_STORE_REQ_HISTORY:
		return op->nstr >= S_HI_N && op->s[S_HI_KEY];
	case PC_STORE_REQ_SESSIONS:
		return op->nstr >= S_SL_N && op->nint >= I_SL_N && op->i[I_SL_LIMIT] >= 1 &&
		       op->i[I_SL_LIMIT] <= PC_STORE_SESSIONS_MAX;
	default:
		return op->kind == PC_STORE_REQ_RUNS_OPEN || op->kind == PC_STORE_REQ_DEVICES ||
		       op->kind == PC_STORE_REQ_NODES;
	}
}

/* A read the backend answers on this thread: its reply. */
static pc_msg_t *read_answer(pc_store_t *s, const pc__store_op_t *op)
{
	const pc__store_reads_t *r = s->ops->reads;
	if (!read_checked(op))
		return pc__store_error_reply(op->kind, PC_EINVAL);
	switch (op->kind) {
	case PC_STORE_REQ_USAGE_LIST:
	case PC_STORE_REQ_USAGE_DAYS:
		return r->usage(s->be, op);
	case PC_STORE_REQ_RUN_GET:
		return r->run_get(s->be, op);
	case PC_STORE_REQ_HISTORY:
		return r->history(s->be, op);
	case PC_STORE_REQ_SESSIONS:
		return r->sessions(s->be, op);
	case PC_STORE_REQ_RUNS_OPEN:
		return r->open_runs(s->be, op);
	case PC_STORE_REQ_NODES:
		return r->nodes(s->be, op);
	default:
		return r->devices(s->be, op);
	}
}

static pc_msg_t *read_run(void *arg)
{
	read_job_t *j = arg;
	pc_msg_t *m = j->polled ? j->s->ops->reads->finish(j->polled) : read_answer(j->s, j->op);
	if (m)
		m->corr = j->op->corr;
	__atomic_add_fetch(&j->s->stats.reads, 1, __ATOMIC_RELAXED);
	if (j->polled)
		__atomic_add_fetch(&j->s->stats.polled_reads, 1, __ATOMIC_RELAXED);
	reads_done(j->s);
	pc__store_op_free(j->op);
	free(j);
	return m;
}

static void read_discard(void *arg)
{
	read_job_t *j = arg;
	if (j->polled) /* its connection goes back or is closed */
		pc_msg_free(j->s->ops->reads->finish(j->polled));
	reads_done(j->s);
	pc__store_op_free(j->op);
	free(j);
}

/* A polled read's rows are in (or its loop gave up): the answer is made
 * on the blocking pool, or here when the pool takes no more. */
static void read_polled(void *arg, void *job)
{
	read_job_t *j = arg;
	j->polled = job;
	pc_actor_t *to = j->op->reply_to;
	if (pc_blocking_submit(j->s->rt, read_run, read_discard, j, to) == 0)
		return;
	pc_actor_retain(to); /* read_run lets the op's reference go */
	pc_msg_t *m = read_run(j);
	if (m && pc_send(to, m) != 0)
		pc_msg_free(m);
	pc_actor_release(to);
}

/* ---- the store actor ---- */

typedef struct store_actor {
	pc_store_t *s;
	pc__store_op_t *head, *tail;
	uint32_t pending;       /* queued writes */
	uint32_t urgent;        /* of which not lazy */
	bool in_flight;
	bool window_armed;      /* a tick is due after window_ms */
	bool lazy_armed;        /* a tick is due after lazy_ms */
	pc_timer_t window_tick, lazy_tick;
	uint64_t gen;           /* tick generation: stale ticks are ignored */
	bool closing;
	pc_actor_t *close_to;   /* retained */
	uint64_t close_corr;
	struct batch *held;     /* a batch waiting to be sent again (in_flight stays set) */
	uint32_t hold_pause;    /* ms before it is; 0: the last batch went through */
	pc_timer_t held_tick;
} store_actor_t;

/* Fails every op of the list with rc and answers it. */
static void ops_fail(pc__store_op_t *first, int rc)
{
	batch_fail(first, rc);
	while (first) {
		pc__store_op_t *next = first->next;
		op_answer(first);
		first = next;
	}
}

/* Starts batch b on the backend's own loop, else on the blocking pool. */
static int batch_submit(pc_ctx_t *ctx, store_actor_t *a, batch_t *b)
{
	int rc = PC__STORE_TO_POOL;
	if (a->s->ops->start)
		rc = a->s->ops->start(a->s->be, b->ops, batch_started_done, b);
	if (rc != 0)
		rc = pc_blocking_submit(a->s->rt, batch_run, batch_discard, b, pc_self(ctx));
	return rc;
}

/* Sends the oldest group_max writes as one batch. A batch that cannot be
 * submitted is answered with the error at once, and the next is tried, so
 * no write is left waiting for an event that may never come. */
static void flush(pc_ctx_t *ctx, store_actor_t *a)
{
	a->gen++;
	/* cancelled, so that a long lazy_ms leaves no timer behind; one
	 * already on its way is stale by its generation */
	if (a->window_armed)
		pc_timer_cancel(a->s->rt, a->window_tick);
	if (a->lazy_armed)
		pc_timer_cancel(a->s->rt, a->lazy_tick);
	a->window_armed = a->lazy_armed = false;
	while (a->head && !a->in_flight) {
		pc__store_op_t *first = a->head, *last = first;
		uint32_t n = 0, writes = 0;
		for (pc__store_op_t *op = first; op && n < a->s->cfg.group_max; op = op->next) {
			last = op;
			n++;
			writes += op->kind != PC_STORE_REQ_SYNC;
			a->urgent -= !op->lazy;
		}
		a->head = last->next;
		if (!a->head)
			a->tail = NULL;
		a->pending -= n;
		last->next = NULL;
		batch_t *b = malloc(sizeof(*b));
		pc_msg_t *done = pc_msg_new(STORE_BATCH_DONE, 0);
		int rc = PC_ENOMEM;
		if (b && done) {
			*b = (batch_t){.s = a->s, .ops = first, .writes = writes, .done = done};
			rc = batch_submit(ctx, a, b);
		}
		if (rc == 0) {
			a->in_flight = true;
			return;
		}
		pc_msg_free(done);
		free(b);
		ops_fail(first, rc);
	}
}

static void schedule(pc_ctx_t *ctx, store_actor_t *a, bool waited);

/* The held batch goes again (its pause is over, or no pause could be
 * armed). */
static void held_send(pc_ctx_t *ctx, store_actor_t *a)
{
	batch_t *b = a->held;
	a->held = NULL;
	if (!b)
		return;
	int rc = batch_submit(ctx, a, b);
	if (rc == 0)
		return;
	ops_fail(b->ops, rc);
	pc_msg_free(b->done);
	free(b);
	a->in_flight = false;
	schedule(ctx, a, true);
}

/* A batch handed back (batch_hold): sent again after a pause that grows
 * while the database stays away. */
static void on_held(pc_ctx_t *ctx, store_actor_t *a)
{
	a->held = __atomic_exchange_n(&a->s->held, NULL, __ATOMIC_ACQ_REL);
	if (!a->held)
		return;
	a->hold_pause = a->hold_pause ? a->hold_pause * 2 : HOLD_PAUSE_MIN_MS;
	if (a->hold_pause > HOLD_PAUSE_MAX_MS)
		a->hold_pause = HOLD_PAUSE_MAX_MS;
	pc_msg_t *t = pc_msg_new(STORE_HELD_TICK, 0);
	if (!t || pc_timer_after(pc_self(ctx), a->hold_pause, t, &a->held_tick) != 0)
		held_send(ctx, a);
}

static void close_finish(pc_ctx_t *ctx, store_actor_t *a)
{
	pc_store_reply_t done = {0};
	pc_msg_t *m = pc__store_reply_msg(&done);
	if (m) {
		m->corr = a->close_corr;
		(void)pc_send(a->close_to, m); /* a gone waiter needs no answer */
	}
	pc_actor_release(a->close_to);
	a->close_to = NULL;
	pc_exit(ctx, PC_EXIT_NORMAL);
}

/* The content-sized strings of a write: limited by max_content. */
static bool too_big(const pc_store_t *s, const pc__store_op_t *op)
{
	for (uint32_t k = 0; k < op->nstr; k++)
		if (pc__store_len(op, k) > s->cfg.max_content)
			return true;
	return false;
}

/* A tick of the current generation after `ms`; false if none could be
 * armed (then the caller commits at once rather than leave writes waiting
 * for a tick that will not come). */
static bool arm_tick(pc_ctx_t *ctx, store_actor_t *a, uint32_t ms, pc_timer_t *id)
{
	pc_msg_t *t = pc_msg_new(STORE_TICK, sizeof(uint64_t));
	if (!t)
		return false;
	memcpy(pc_msg_data(t), &a->gen, sizeof(a->gen));
	return pc_timer_after(pc_self(ctx), ms, t, id) == 0;
}

/* Starts the next batch now, or arms the tick that will: at once for a
 * write someone waits for (after window_ms if one is configured, unless
 * `waited`: those writes queued behind a commit and have waited already);
 * after lazy_ms when only lazy writes are queued. */
static void schedule(pc_ctx_t *ctx, store_actor_t *a, bool waited)
{
	const pc_store_config_t *c = &a->s->cfg;
	if (a->in_flight || !a->head)
		return;
	bool now = a->closing || a->pending >= c->group_max || (a->urgent && (waited || c->window_ms == 0));
	if (!now && a->urgent && !a->window_armed)
		now = !(a->window_armed = arm_tick(ctx, a, c->window_ms, &a->window_tick));
	else if (!now && !a->urgent && !a->lazy_armed)
		now = !(a->lazy_armed = arm_tick(ctx, a, c->lazy_ms, &a->lazy_tick));
	if (now)
		flush(ctx, a);
}

static int on_request(pc_ctx_t *ctx, store_actor_t *a, const pc_msg_t *m)
{
	pc_store_t *s = a->s;
	if (a->closing) {
		answer_now(m, PC_ESTOPPED);
		return 0;
	}
	pc__store_op_t *op = NULL;
	int rc = pc__store_op_from_msg(m, &op);
	if (rc == 0 && too_big(s, op))
		rc = PC_STORE_ETOOBIG;
	if (rc != 0) {
		pc__store_op_free(op);
		answer_now(m, rc);
		return 0;
	}
	if (is_read(m->type)) {
		if (!op->reply_to) {
			pc__store_op_free(op);
			return 0;
		}
		read_job_t *j = malloc(sizeof(*j));
		rc = PC_ENOMEM;
		if (j) {
			*j = (read_job_t){s, op, NULL};
			pthread_mutex_lock(&s->lock);
			s->reads++;
			pthread_mutex_unlock(&s->lock);
			const pc__store_reads_t *r = s->ops->reads;
			if (r->start && read_checked(op) && r->start(s->be, op, read_polled, j) == 0)
				return 0;
			rc = pc_blocking_submit(s->rt, read_run, read_discard, j, op->reply_to);
			if (rc != 0) {
				reads_done(s);
				free(j);
			}
		}
		if (rc != 0) {
			op->res.rc = rc;
			op_answer(op);
		}
		return 0;
	}
	if (a->tail)
		a->tail->next = op;
	else
		a->head = op;
	a->tail = op;
	a->pending++;
	a->urgent += !op->lazy;
	schedule(ctx, a, false);
	return 0;
}

static int store_receive(pc_ctx_t *ctx, void *state, pc_msg_t *m)
{
	store_actor_t *a = state;
	switch (m->type) {
	case STORE_TICK:
		if (pc_msg_u64(m) == a->gen && !a->in_flight)
			flush(ctx, a);
		return 0;
	case STORE_BATCH_HELD:
		on_held(ctx, a);
		return 0;
	case STORE_HELD_TICK:
		held_send(ctx, a);
		return 0;
	case STORE_BATCH_DONE:
		a->in_flight = false;
		a->hold_pause = 0;
		if (a->head)
			schedule(ctx, a, true);
		else if (a->closing)
			close_finish(ctx, a);
		return 0;
	case STORE_CLOSE:
		if (a->closing) {
			answer_now(m, PC_ESTATE);
			return 0;
		}
		a->closing = true;
		a->close_to = pc_actor_retain(m->reply_to);
		a->close_corr = m->corr;
		if (a->head && !a->in_flight)
			flush(ctx, a);
		if (!a->in_flight)
			close_finish(ctx, a);
		return 0;
	default:
		if (m->type >= PC_STORE_REQ_SESSION && m->type <= PC_STORE_REQ_NODES)
			return on_request(ctx, a, m);
		return 0;
	}
}

static void store_stop(pc_ctx_t *ctx, void *state, int reason)
{
	(void)ctx;
	(void)reason;
	store_actor_t *a = state;
	/* Stopped with writes still queued (runtime shutdown): they were
	 * never committed, so they are answered as such. */
	ops_fail(a->head, PC_ESTOPPED);
	a->head = NULL;
	/* so is a batch waiting to be sent again */
	if (a->held)
		pc_timer_cancel(a->s->rt, a->held_tick);
	batch_t *held[2] = {a->held, __atomic_exchange_n(&a->s->held, NULL, __ATOMIC_ACQ_REL)};
	for (int i = 0; i < 2; i++) {
		if (!held[i])
			continue;
		ops_fail(held[i]->ops, PC_ESTOPPED);
		pc_msg_free(held[i]->done);
		free(held[i]);
	}
	pc_actor_release(a->close_to);
	free(a);
}

static const pc_behavior_t store_behavior = {"store", store_receive, store_stop};

/* ---- open / close ---- */

static int ensure_home(const char *path)
{
	/* Only the default location's directory is created for the caller. */
	char dir[PATH_MAX];
	int n = snprintf(dir, sizeof(dir), "%s", path);
	if (n < 0 || (size_t)n >= sizeof(dir))
		return PC_ELIMIT;
	char *slash = strrchr(dir, '/');
	if (!slash)
		return 0;
	*slash = 0;
	if (mkdir(dir, 0700) == 0 || errno == EEXIST)
		return 0;
	return (errno == EACCES || errno == EROFS || errno == EPERM) ? PC_STORE_EREADONLY : PC_STORE_ECANTOPEN;
}

int pc_store_open(pc_runtime_t *rt, const pc_store_config_t *cfg, pc_store_t **out)
{
	if (!out)
		return PC_EINVAL;
	*out = NULL;
	if (!rt)
		return PC_EINVAL;
	pc_store_t *s = calloc(1, sizeof(*s));
	store_actor_t *a = calloc(1, sizeof(*a));
	char defpath[PATH_MAX];
	int rc = 0;
	if (!s || !a) {
		rc = PC_ENOMEM;
		goto fail;
	}
	if (cfg)
		s->cfg = *cfg;
	config_resolve(&s->cfg);
	const char *path = s->cfg.url ? s->cfg.url : s->cfg.path;
	if (!path) {
		rc = pc_store_default_path(defpath, sizeof(defpath));
		if (rc == 0)
			rc = ensure_home(defpath);
		if (rc != 0)
			goto fail;
		path = defpath;
	}
	s->cfg.path = NULL;
	s->rt = rt;
	s->ops = s->cfg.url ? &pc__store_pg : &pc__store_sqlite;
	s->cfg.url = NULL; /* borrowed, like the path: not kept past open */
	if (pthread_mutex_init(&s->lock, NULL) != 0) {
		rc = PC_ESYS;
		goto fail;
	}
	if (pthread_cond_init(&s->cond, NULL) != 0) {
		rc = PC_ESYS;
		goto fail_lock;
	}
	rc = s->ops->open(path, &s->cfg, &s->be);
	if (rc != 0)
		goto fail_cond;
	a->s = s;
	rc = pc_spawn(rt, &store_behavior, a, &s->actor);
	if (rc != 0) {
		s->ops->close(s->be);
		goto fail_cond;
	}
	*out = s;
	return 0;
fail_cond:
	pthread_cond_destroy(&s->cond);
fail_lock:
	pthread_mutex_destroy(&s->lock);
fail:
	free(a);
	free(s);
	return rc;
}

int pc_store_close(pc_store_t *s)
{
	if (!s)
		return 0;
	pc_msg_t *m = pc_msg_new(STORE_CLOSE, 0), *r = NULL;
	if (!m)
		return PC_ENOMEM;
	/* Waits for the last batch. PC_ESTOPPED: the actor is gone already
	 * (its stop handler answered what was queued). Anything else means
	 * the actor may still run on `s`: nothing is freed. */
	int rc = pc_ask_sync(s->actor, m, -1, &r);
	pc_msg_free(r);
	if (rc != 0 && rc != PC_ESTOPPED)
		return rc;
	pthread_mutex_lock(&s->lock);
	while (s->reads)
		pthread_cond_wait(&s->cond, &s->lock);
	pthread_mutex_unlock(&s->lock);
	s->ops->close(s->be);
	pc_actor_release(s->actor);
	pthread_cond_destroy(&s->cond);
	pthread_mutex_destroy(&s->lock);
	free(s);
	return 0;
}

pc_actor_t *pc_store_actor(pc_store_t *s)
{
	return s ? s->actor : NULL;
}

void pc_store_stats(pc_store_t *s, pc_store_stats_t *out)
{
	memset(out, 0, sizeof(*out));
	if (!s)
		return;
	out->batches = __atomic_load_n(&s->stats.batches, __ATOMIC_RELAXED);
	out->writes = __atomic_load_n(&s->stats.writes, __ATOMIC_RELAXED);
	out->failed_batches = __atomic_load_n(&s->stats.failed_batches, __ATOMIC_RELAXED);
	out->reads = __atomic_load_n(&s->stats.reads, __ATOMIC_RELAXED);
	out->polled_reads = __atomic_load_n(&s->stats.polled_reads, __ATOMIC_RELAXED);
	out->write_cpu_ns = __atomic_load_n(&s->stats.write_cpu_ns, __ATOMIC_RELAXED);
	out->retried_batches = __atomic_load_n(&s->stats.retried_batches, __ATOMIC_RELAXED);
	out->held_batches = __atomic_load_n(&s->stats.held_batches, __ATOMIC_RELAXED);
	out->unknown_writes = __atomic_load_n(&s->stats.unknown_writes, __ATOMIC_RELAXED);
	out->fenced_writes = __atomic_load_n(&s->stats.fenced_writes, __ATOMIC_RELAXED);
}

/* ---- plain-thread wrappers ---- */

/* Sends `req` (built by the caller with code `built`) and waits for the
 * reply: *rep, the caller's. */
static int ask(pc_store_t *s, int built, pc_msg_t *req, pc_msg_t **rep)
{
	*rep = NULL;
	if (built != 0)
		return built;
	if (!s) {
		pc_msg_free(req);
		return PC_EINVAL;
	}
	return pc_ask_sync(s->actor, req, s->cfg.timeout_ms, rep);
}

/* ask() for a PC_STORE_MSG_REPLY, read into *out (may be NULL). */
static int call(pc_store_t *s, int built, pc_msg_t *req, pc_store_reply_t *out)
{
	pc_store_reply_t r = {0};
	pc_msg_t *rep = NULL;
	int rc = ask(s, built, req, &rep);
	if (rc == 0)
		rc = pc_store_reply_get(rep, &r);
	if (rc == 0)
		rc = r.rc;
	pc_msg_free(rep);
	if (out)
		*out = r;
	return rc;
}

int pc_store_session(pc_store_t *s, const char *key, const char *agent, const char *session_id,
		     const char *metadata, pc_store_reply_t *out)
{
	pc_msg_t *m = NULL;
	int rc = pc_store_req_session(key, agent, session_id, metadata, &m);
	return call(s, rc, m, out);
}

int pc_store_session_set(pc_store_t *s, const char *key, int64_t epoch, const char *metadata)
{
	pc_msg_t *m = NULL;
	int rc = pc_store_req_session_set(key, epoch, metadata, &m);
	return call(s, rc, m, NULL);
}

int pc_store_append(pc_store_t *s, const char *key, int64_t epoch, const pc_store_msg_t *msg, int64_t *seq)
{
	pc_msg_t *m = NULL;
	pc_store_reply_t r;
	int rc = pc_store_req_append(key, epoch, msg, &m);
	rc = call(s, rc, m, &r);
	if (seq)
		*seq = rc == 0 ? r.seq : 0;
	return rc;
}

int pc_store_rewrite(pc_store_t *s, const char *key, int64_t epoch, int64_t expected_last_seq,
		     int64_t from_seq, const pc_store_msg_t *msgs, size_t n, int64_t *last_seq)
{
	pc_msg_t *m = NULL;
	pc_store_reply_t r;
	int rc = pc_store_req_rewrite(key, epoch, expected_last_seq, from_seq, msgs, n, &m);
	rc = call(s, rc, m, &r);
	if (last_seq)
		*last_seq = rc == 0 ? r.seq : 0;
	return rc;
}

int pc_store_run_begin(pc_store_t *s, const pc_store_run_new_t *r, pc_store_reply_t *out)
{
	pc_msg_t *m = NULL;
	pc_store_run_new_t plain = r ? *r : (pc_store_run_new_t){0};
	plain.flags &= ~PC_STORE_REQ_EARLY; /* one answer for a plain thread */
	int rc = pc_store_req_run_begin(r ? &plain : NULL, &m);
	return call(s, rc, m, out);
}

int pc_store_run_adopt(pc_store_t *s, const char *run_id, const char *from_owner, const char *to_owner)
{
	pc_msg_t *m = NULL;
	int rc = pc_store_req_run_adopt(run_id, from_owner, to_owner, &m);
	return call(s, rc, m, NULL);
}

int pc_store_runs_open(pc_store_t *s, pc_store_open_runs_t **out)
{
	if (!out)
		return PC_EINVAL;
	*out = NULL;
	pc_msg_t *m = NULL, *rep = NULL;
	int rc = pc_store_req_runs_open(&m);
	rc = ask(s, rc, m, &rep);
	if (rc == 0)
		rc = pc_store_open_runs_take(rep, out);
	pc_msg_free(rep);
	return rc;
}

int pc_store_run_end(pc_store_t *s, const pc_store_run_end_t *e)
{
	pc_msg_t *m = NULL;
	int rc = pc_store_req_run_end(e, &m);
	return call(s, rc, m, NULL);
}

int pc_store_run_get(pc_store_t *s, const char *run_id, pc_store_reply_t *out)
{
	pc_msg_t *m = NULL;
	int rc = pc_store_req_run_get(run_id, &m);
	return call(s, rc, m, out);
}

int pc_store_attempt(pc_store_t *s, const pc_store_attempt_t *a)
{
	pc_msg_t *m = NULL;
	int rc = pc_store_req_attempt(a, &m);
	return call(s, rc, m, NULL);
}

int pc_store_usage_add(pc_store_t *s, const pc_store_usage_t *u, int64_t epoch)
{
	pc_msg_t *m = NULL;
	int rc = pc_store_req_usage_add(u, epoch, &m);
	return call(s, rc, m, NULL);
}

int pc_store_usage_list(pc_store_t *s, const char *run_id, const char *session_key, pc_store_usage_list_t **out)
{
	if (!out)
		return PC_EINVAL;
	*out = NULL;
	pc_msg_t *m = NULL, *rep = NULL;
	int rc = pc_store_req_usage_list(run_id, session_key, &m);
	rc = ask(s, rc, m, &rep);
	if (rc == 0)
		rc = pc_store_usage_list_take(rep, out);
	pc_msg_free(rep);
	return rc;
}

int pc_store_usage_days(pc_store_t *s, int64_t from_ms, int64_t to_ms, pc_store_usage_list_t **out)
{
	if (!out)
		return PC_EINVAL;
	*out = NULL;
	pc_msg_t *m = NULL, *rep = NULL;
	int rc = pc_store_req_usage_days(from_ms, to_ms, &m);
	rc = ask(s, rc, m, &rep);
	if (rc == 0)
		rc = pc_store_usage_list_take(rep, out);
	pc_msg_free(rep);
	return rc;
}

int pc_store_device_put(pc_store_t *s, const pc_store_device_t *d)
{
	pc_msg_t *m = NULL;
	int rc = pc_store_req_device_put(d, &m);
	return call(s, rc, m, NULL);
}

int pc_store_device_delete(pc_store_t *s, const char *id)
{
	pc_msg_t *m = NULL;
	int rc = pc_store_req_device_delete(id, &m);
	return call(s, rc, m, NULL);
}

int pc_store_devices(pc_store_t *s, pc_store_devices_t **out)
{
	if (!out)
		return PC_EINVAL;
	*out = NULL;
	pc_msg_t *m = NULL, *rep = NULL;
	int rc = pc_store_req_devices(&m);
	rc = ask(s, rc, m, &rep);
	if (rc == 0)
		rc = pc_store_devices_take(rep, out);
	pc_msg_free(rep);
	return rc;
}

int pc_store_node_beat(pc_store_t *s, const char *id, const char *url, const char *owner, int64_t lease_ms,
		       bool fresh, pc_store_reply_t *out)
{
	pc_msg_t *m = NULL;
	int rc = pc_store_req_node_beat(id, url, owner, lease_ms, fresh, &m);
	return call(s, rc, m, out);
}

int pc_store_nodes(pc_store_t *s, pc_store_nodes_t **out)
{
	if (!out)
		return PC_EINVAL;
	*out = NULL;
	pc_msg_t *m = NULL, *rep = NULL;
	int rc = pc_store_req_nodes(&m);
	rc = ask(s, rc, m, &rep);
	if (rc == 0)
		rc = pc_store_nodes_take(rep, out);
	pc_msg_free(rep);
	return rc;
}

int pc_store_audit(pc_store_t *s, const pc_store_audit_t *a)
{
	pc_msg_t *m = NULL;
	int rc = pc_store_req_audit(a, &m);
	return call(s, rc, m, NULL);
}

int pc_store_lease_acquire(pc_store_t *s, const char *key, const char *owner, int64_t ttl_ms, const char *steal_from,
			   int64_t *epoch, char *holder)
{
	pc_msg_t *m = NULL;
	pc_store_reply_t r;
	int rc = pc_store_req_lease_acquire(key, owner, ttl_ms, steal_from, &m);
	rc = call(s, rc, m, &r);
	if (epoch)
		*epoch = rc == 0 ? r.epoch : 0;
	if (holder)
		snprintf(holder, PC_STORE_ID_MAX + 1, "%s", rc == PC_EBUSY || rc == 0 ? r.id : "");
	return rc;
}

int pc_store_lease_release(pc_store_t *s, const char *key, const char *owner, int64_t epoch)
{
	pc_msg_t *m = NULL;
	int rc = pc_store_req_lease_release(key, owner, epoch, &m);
	return call(s, rc, m, NULL);
}

int pc_store_history(pc_store_t *s, const char *key, pc_store_history_t **out)
{
	if (!out)
		return PC_EINVAL;
	*out = NULL;
	pc_msg_t *m = NULL, *rep = NULL;
	int rc = pc_store_req_history(key, &m);
	rc = ask(s, rc, m, &rep);
	if (rc == 0) {
		rc = pc__store_history_adopt(rep, out);
		if (rc == 0)
			rep = NULL;
	}
	pc_msg_free(rep);
	return rc;
}

int pc_store_sessions(pc_store_t *s, const pc_store_sessions_query_t *q, pc_store_sessions_t **out)
{
	if (!out)
		return PC_EINVAL;
	*out = NULL;
	pc_msg_t *m = NULL, *rep = NULL;
	int rc = pc_store_req_sessions(q, &m);
	rc = ask(s, rc, m, &rep);
	if (rc == 0)
		rc = pc_store_sessions_take(rep, out);
	pc_msg_free(rep);
	return rc;
}
