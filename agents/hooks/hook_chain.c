/*
 * Hook chains (hooks.h): one short-lived actor per pc_hooks_run or
 * pc_hooks_notify.
 *
 * The actor is spawned with the chain's copy of the matching handlers and
 * a START queued. Every handler runs as a blocking-pool job, on its own
 * copies of the event and ctx, with a timer armed for its timeout:
 *
 *   decision point:    START -> job 0 -> (JOB_DONE | TIMEOUT) -> merge ->
 *                      job 1 -> ... -> until a terminal decision or the
 *                      last handler -> DONE -> exit
 *   observation point: START -> every job at once -> each JOB_DONE or
 *                      TIMEOUT -> when none is left: DONE (if asked) -> exit
 *
 * A handler's state moves WAITING -> RUNNING -> OVER exactly once: a
 * JOB_DONE or TIMEOUT that finds it OVER is the loser of that race and is
 * dropped (a result after the timeout, a timer after the result). A job
 * outlives its chain when it times out; it owns everything it touches
 * (copies, plus a reference to the registry so plugin code stays loaded)
 * and its result travels as text inside the message, so delivered to a
 * stopped chain it is a dead letter that holds nothing.
 *
 * The merge rules live in one policy per point (apply / fail / result),
 * at the end of this file; hooks.h states them.
 *
 * The owner gets exactly one DONE: `done` is set once it is sent, and the
 * stop handler (which runs exactly once, whatever stopped the actor) sends
 * it if nothing else did, after applying the point's failure rule to a
 * chain that did not reach its end.
 */
#include "hooks_internal.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "actors/timer.h"
#include "runtime/blocking.h"
#include "io/io.h"
#include "runtime/clock.h"

enum {
	MSG_START = PC_MSG_TYPE_SYSTEM + 0x2A10,
	MSG_JOB_DONE, /* job_done_t */
	MSG_TIMEOUT,  /* u64: the handler's index */
};

/* apply's verdict on a result of the wrong shape (codes are negative). */
#define MALFORMED 1

/* Event fields a chain replaced for later handlers (merge_t.changed). */
enum { CHANGED_PARAMS = 1, CHANGED_CONTENT = 2, CHANGED_MESSAGE = 4 };

enum { H_WAITING = 0, H_RUNNING, H_OVER };

typedef struct chain chain_t;

typedef struct policy {
	/* Merges one handler's result (borrowed; NULL: it gave none). 0,
	 * MALFORMED, or a negative code (both then count as its failure). */
	int (*apply)(chain_t *c, const cJSON *res);
	/* A handler failed, timed out, or the chain was cut short. */
	void (*fail)(chain_t *c, bool timed_out);
	/* The merged result (may settle the decision first); NULL: no memory. */
	cJSON *(*result)(chain_t *c);
} policy_t;

typedef struct merge {
	cJSON *acc;           /* the result being built: an object */
	cJSON *tools_allow;   /* before_prompt_build: the intersection so far */
	char *reason;         /* why blocked */
	char *latest_reason;  /* the latest blockReason / cancelReason given */
	uint32_t changed;     /* CHANGED_* */
	bool stop;            /* a terminal decision: no further handler runs */
	bool blocked;
	bool approval;        /* before_tool_call: an approval was requested */
	bool passed;          /* before_agent_run: some handler passed */
} merge_t;

struct chain {
	pc_runtime_t *rt;
	const pc_hooks_t *h;
	const policy_t *pol;
	pc_hook_point_t point;
	bool parallel;
	cJSON *event;
	cJSON *ctx;
	char *match_name;
	pc_actor_t *owner; /* NULL: nobody is waiting (notify) */
	uint64_t tag;
	uint64_t t0_ns;

	uint32_t n;
	const pc__hook_entry_t **list;
	uint8_t *state;     /* H_* per handler */
	pc_timer_t *timers; /* per handler; 0 when none is armed */
	uint32_t next;      /* sequential: the handler running or next to run */
	uint32_t pending;   /* parallel: handlers still running */

	uint32_t ran, failed, timed_out;
	merge_t m;
	bool finished; /* the chain reached its end */
	bool done;     /* DONE sent, or none owed */
};

static const policy_t *policy_of(pc_hook_point_t p);

/* ---- the blocking job ------------------------------------------------------ */

typedef struct job {
	const pc_hooks_t *h; /* a reference: the handler's code stays loaded */
	const pc__hook_entry_t *e;
	uint32_t idx;
	cJSON *event;
	cJSON *ctx;
	char *match_name;
} job_t;

typedef struct job_done {
	uint32_t idx;
	int rc;
	bool has_result;
	char text[]; /* the result, printed */
} job_done_t;

static void job_free(void *arg)
{
	job_t *j = arg;
	cJSON_Delete(j->event);
	cJSON_Delete(j->ctx);
	free(j->match_name);
	pc_hooks_release(j->h); /* last: may unload the plugin that ran */
	free(j);
}

static pc_msg_t *job_message(uint32_t idx, int rc, const char *text)
{
	size_t tl = text ? strlen(text) : 0;
	pc_msg_t *m = pc_msg_new(MSG_JOB_DONE, sizeof(job_done_t) + tl + 1);
	if (!m)
		return NULL;
	job_done_t *d = pc_msg_data(m);
	d->idx = idx;
	d->rc = rc;
	d->has_result = text != NULL;
	memcpy(d->text, text ? text : "", tl + 1);
	return m;
}

static pc_msg_t *job_run(void *arg)
{
	job_t *j = arg;
	pc_hook_call_t call = {
		.point = j->e->point,
		.event = j->event,
		.ctx = j->ctx,
		.match_name = j->match_name,
		.owner = j->e->owner,
	};
	cJSON *res = NULL;
	int rc = j->e->fn(j->e->user, &call, &res);
	char *text = NULL;
	if (rc >= 0 && res && !(text = pc_json_print(res)))
		rc = PC_ENOMEM;
	cJSON_Delete(res);
	pc_msg_t *m = job_message(j->idx, rc < 0 ? rc : 0, rc < 0 ? NULL : text);
	if (!m)
		m = job_message(j->idx, PC_ENOMEM, NULL); /* smaller: say why */
	cJSON_free(text);
	job_free(j);
	return m; /* NULL only when memory is gone: the timeout then ends it */
}

static job_t *job_new(const chain_t *c, uint32_t idx)
{
	job_t *j = calloc(1, sizeof(*j));
	if (!j)
		return NULL;
	pc_hooks_retain(c->h);
	j->h = c->h;
	j->e = c->list[idx];
	j->idx = idx;
	j->event = cJSON_Duplicate(c->event, true);
	j->ctx = cJSON_Duplicate(c->ctx, true);
	j->match_name = c->match_name ? strdup(c->match_name) : NULL;
	if (!j->event || !j->ctx || (c->match_name && !j->match_name)) {
		job_free(j);
		return NULL;
	}
	return j;
}

/* ---- reports ----------------------------------------------------------------- */

static void report_failed(chain_t *c, uint32_t idx, int code)
{
	const pc__hook_entry_t *e = c->list[idx];
	pc__hooks_report(c->h, PC_HOOK_REPORT_FAILED, c->point, e->owner, code, PC_HOOK_LOG_ERROR,
			 "%s handler from %s failed: %s", pc_hook_point_name(c->point), e->owner, pc_strerror(code));
}

static void report_malformed(chain_t *c, uint32_t idx)
{
	const pc__hook_entry_t *e = c->list[idx];
	pc__hooks_report(c->h, PC_HOOK_REPORT_MALFORMED, c->point, e->owner, PC_EINVAL, PC_HOOK_LOG_ERROR,
			 "%s handler from %s returned a result of the wrong shape", pc_hook_point_name(c->point),
			 e->owner);
}

static void report_timeout(chain_t *c, uint32_t idx)
{
	const pc__hook_entry_t *e = c->list[idx];
	pc__hooks_report(c->h, PC_HOOK_REPORT_TIMEOUT, c->point, e->owner, PC_ETIMEDOUT, PC_HOOK_LOG_ERROR,
			 "%s handler from %s timed out after %u ms", pc_hook_point_name(c->point), e->owner,
			 (unsigned)e->timeout_ms);
}

/* ---- the DONE -------------------------------------------------------------------- */

/* Sends the DONE (once). `result` is the merged result's text; NULL reads
 * as "{}". */
static int send_done(chain_t *c, int status, const char *result)
{
	if (!result)
		result = "{}";
	const char *reason = c->m.reason ? c->m.reason : "";
	size_t rl = strlen(result), sl = strlen(reason);
	pc_msg_t *msg = pc_msg_new(PC_MSG_HOOK_DONE, sizeof(pc_hook_done_msg_t) + rl + sl + 2);
	if (!msg)
		return PC_ENOMEM;
	pc_hook_done_msg_t *d = pc_msg_data(msg);
	memset(d, 0, sizeof(*d));
	d->tag = c->tag;
	d->point = c->point;
	d->status = status;
	d->blocked = c->m.blocked;
	d->ran = c->ran;
	d->failed = c->failed;
	d->timed_out = c->timed_out;
	d->duration_us = (pc__clock_mono_ns() - c->t0_ns) / 1000u;
	memcpy(d->buf, result, rl + 1);
	d->result = d->buf;
	d->result_len = rl;
	memcpy(d->buf + rl + 1, reason, sl + 1);
	d->reason = d->buf + rl + 1;
	/* A stopped owner frees it as a dead letter: still "sent". */
	pc_send(c->owner, msg);
	c->done = true;
	return 0;
}

static void cancel_timers(chain_t *c)
{
	for (uint32_t i = 0; c->timers && i < c->n; i++) {
		if (c->timers[i]) {
			pc_timer_cancel(c->rt, c->timers[i]);
			c->timers[i] = 0;
		}
	}
}

/* The chain reached its end: DONE with the merged result, then exit. A
 * DONE that cannot be built is left to the stop handler. */
static void finish(pc_ctx_t *ctx, chain_t *c)
{
	c->finished = true;
	cancel_timers(c);
	if (c->owner) {
		cJSON *res = c->pol->result(c);
		char *text = res ? pc_json_print(res) : NULL;
		if (text)
			send_done(c, 0, text);
		cJSON_free(text);
		cJSON_Delete(res);
	}
	pc_exit(ctx, PC_EXIT_NORMAL);
}

/* ---- running handlers ----------------------------------------------------------- */

static void handler_failed(chain_t *c, bool timed_out)
{
	if (timed_out)
		c->timed_out++;
	else
		c->failed++;
	c->pol->fail(c, timed_out);
}

/* Queues handler `idx` with its timer. On error it counts as failed. */
static int start_handler(pc_ctx_t *ctx, chain_t *c, uint32_t idx)
{
	int rc = PC_ENOMEM;
	job_t *j = job_new(c, idx);
	pc_msg_t *tm = pc_msg_new(MSG_TIMEOUT, sizeof(uint64_t));
	if (!j || !tm)
		goto fail;
	*(uint64_t *)pc_msg_data(tm) = idx;
	rc = pc_timer_after(pc_self(ctx), c->list[idx]->timeout_ms, tm, &c->timers[idx]);
	tm = NULL; /* the timer took it, on every path */
	if (rc != 0)
		goto fail;
	if ((rc = pc_blocking_submit(c->rt, job_run, job_free, j, pc_self(ctx))) != 0) {
		pc_timer_cancel(c->rt, c->timers[idx]);
		c->timers[idx] = 0;
		goto fail;
	}
	c->state[idx] = H_RUNNING;
	c->ran++;
	return 0;
fail:
	pc_msg_free(tm);
	if (j)
		job_free(j);
	c->state[idx] = H_OVER;
	report_failed(c, idx, rc);
	handler_failed(c, false);
	return rc;
}

/* Sequential: starts the next handler, or finishes. */
static void step(pc_ctx_t *ctx, chain_t *c)
{
	while (!c->m.stop && c->next < c->n) {
		if (start_handler(ctx, c, c->next) == 0)
			return;
		c->next++;
	}
	finish(ctx, c);
}

static void start_all(pc_ctx_t *ctx, chain_t *c)
{
	for (uint32_t i = 0; i < c->n; i++)
		if (start_handler(ctx, c, i) == 0)
			c->pending++;
	if (c->pending == 0)
		finish(ctx, c);
}

/* Handler `idx` is over (its result was merged, or it failed). */
static void handler_over(pc_ctx_t *ctx, chain_t *c, uint32_t idx)
{
	c->state[idx] = H_OVER;
	if (c->timers[idx]) {
		pc_timer_cancel(c->rt, c->timers[idx]);
		c->timers[idx] = 0;
	}
	if (c->parallel) {
		if (--c->pending == 0)
			finish(ctx, c);
		return;
	}
	c->next++;
	step(ctx, c);
}

static void merge_result(chain_t *c, uint32_t idx, const job_done_t *d)
{
	if (d->rc < 0) {
		report_failed(c, idx, d->rc);
		handler_failed(c, false);
		return;
	}
	if (c->parallel)
		return; /* an observation's result is not read */
	cJSON *res = d->has_result ? cJSON_Parse(d->text) : NULL;
	int rc = d->has_result && !res ? PC_ENOMEM : 0; /* the job printed it: only memory can fail */
	if (rc == 0 && res && !cJSON_IsObject(res))
		rc = MALFORMED;
	if (rc == 0)
		rc = c->pol->apply(c, res);
	cJSON_Delete(res);
	if (rc == MALFORMED) {
		report_malformed(c, idx);
		handler_failed(c, false);
	} else if (rc < 0) {
		report_failed(c, idx, rc);
		handler_failed(c, false);
	}
}

static void on_job_done(pc_ctx_t *ctx, chain_t *c, const job_done_t *d)
{
	if (d->idx >= c->n || c->state[d->idx] != H_RUNNING)
		return; /* it had timed out: a late result is dropped */
	merge_result(c, d->idx, d);
	handler_over(ctx, c, d->idx);
}

static void on_timeout(pc_ctx_t *ctx, chain_t *c, uint64_t idx)
{
	if (idx >= c->n || c->state[idx] != H_RUNNING)
		return;
	c->timers[idx] = 0; /* fired: nothing left to cancel */
	report_timeout(c, (uint32_t)idx);
	handler_failed(c, true);
	handler_over(ctx, c, (uint32_t)idx);
}

static int receive(pc_ctx_t *ctx, void *state, pc_msg_t *msg)
{
	chain_t *c = state;
	if (c->finished)
		return 0;
	switch (msg->type) {
	case MSG_START:
		if (c->parallel)
			start_all(ctx, c);
		else
			step(ctx, c);
		break;
	case MSG_JOB_DONE:
		if (msg->size >= sizeof(job_done_t))
			on_job_done(ctx, c, pc_msg_cdata(msg));
		break;
	case MSG_TIMEOUT:
		if (msg->size >= sizeof(uint64_t))
			on_timeout(ctx, c, pc_msg_u64(msg));
		break;
	default:
		break;
	}
	return 0;
}

static void chain_free(chain_t *c)
{
	cancel_timers(c);
	cJSON_Delete(c->event);
	cJSON_Delete(c->ctx);
	cJSON_Delete(c->m.acc);
	cJSON_Delete(c->m.tools_allow);
	free(c->m.reason);
	free(c->m.latest_reason);
	free(c->match_name);
	free(c->list);
	free(c->state);
	free(c->timers);
	pc_actor_release(c->owner);
	pc_hooks_release(c->h); /* last: the entries in `list` are the registry's */
	free(c);
}

/* Runs exactly once, whatever stopped the actor: the last chance to keep
 * the promise of one DONE. A chain cut short gets its point's failure rule
 * (a before_tool_call is then blocked). */
static void stop(pc_ctx_t *ctx, void *state, int reason)
{
	(void)ctx;
	(void)reason;
	chain_t *c = state;
	if (!c->done) {
		int status = 0;
		if (!c->finished) {
			status = PC_ESTOPPED;
			if (!c->m.stop)
				c->pol->fail(c, false);
		}
		/* Without the merged result (memory is short, or the chain
		 * never ended): the flag and reason still say what matters. */
		send_done(c, status, NULL);
	}
	chain_free(c);
}

static const pc_behavior_t chain_behavior = {
	.name = "hook_chain",
	.receive = receive,
	.stop = stop,
};

/* ---- starting a chain -------------------------------------------------------------- */

/* The handlers of `p` that match, in run order, into c->list. */
static int select_handlers(chain_t *c)
{
	const pc_hooks_t *h = c->h;
	uint32_t total = h->n[c->point];
	c->list = calloc(total ? total : 1, sizeof(*c->list));
	if (!c->list)
		return PC_ENOMEM;
	for (uint32_t i = 0; i < total; i++) {
		const pc__hook_entry_t *e = h->by_point[c->point][i];
		if (pc__hook_entry_matches(e, c->match_name))
			c->list[c->n++] = e;
	}
	if (c->n == 0)
		return PC_ENOTFOUND;
	c->state = calloc(c->n, sizeof(*c->state));
	c->timers = calloc(c->n, sizeof(*c->timers));
	return c->state && c->timers ? 0 : PC_ENOMEM;
}

/* NULL reads as {}; anything but an object is refused. Taken. */
static int object_or_empty(cJSON **j)
{
	if (!*j)
		*j = cJSON_CreateObject();
	if (!*j)
		return PC_ENOMEM;
	return cJSON_IsObject(*j) ? 0 : PC_EINVAL;
}

static int launch(pc_runtime_t *rt, const pc_hooks_t *h, pc_hook_point_t p, cJSON *event, cJSON *ctx,
		  const char *match_name, pc_actor_t *owner, uint64_t tag)
{
	int rc = PC_ENOMEM;
	chain_t *c = calloc(1, sizeof(*c));
	if (!c) {
		cJSON_Delete(event);
		cJSON_Delete(ctx);
		return rc;
	}
	pc_hooks_retain(h);
	c->h = h;
	c->rt = rt;
	c->point = p;
	c->pol = policy_of(p);
	c->parallel = !pc_hook_point_is_decision(p);
	c->event = event;
	c->ctx = ctx;
	c->owner = owner ? pc_actor_retain(owner) : NULL;
	c->tag = tag;
	c->t0_ns = pc__clock_mono_ns();
	c->done = owner == NULL;
	if ((rc = object_or_empty(&c->event)) != 0 || (rc = object_or_empty(&c->ctx)) != 0)
		goto fail;
	if (match_name && !(c->match_name = strdup(match_name))) {
		rc = PC_ENOMEM;
		goto fail;
	}
	if ((rc = select_handlers(c)) != 0 || !(c->m.acc = cJSON_CreateObject())) {
		rc = rc ? rc : PC_ENOMEM;
		goto fail;
	}
	/* From now on registering is refused: the entries are shared. */
	if (!pc__hooks_sealed(h))
		__atomic_store_n(&((pc_hooks_t *)h)->sealed, 1, __ATOMIC_RELEASE);
	/* The actor owns c once spawned; START is its first message. */
	if ((rc = pc_spawn_start(rt, &chain_behavior, c, MSG_START, NULL)) != 0)
		goto fail;
	return 0;
fail:
	chain_free(c);
	return rc;
}

static bool args_ok(pc_runtime_t *rt, const pc_hooks_t *h, pc_hook_point_t p)
{
	return rt && h && (unsigned)p < PC_HOOK__COUNT;
}

int pc_hooks_run(pc_runtime_t *rt, const pc_hooks_t *h, pc_hook_point_t p, cJSON *event, cJSON *ctx,
		 const char *match_name, pc_actor_t *owner, uint64_t tag)
{
	if (!args_ok(rt, h, p) || !owner) {
		cJSON_Delete(event);
		cJSON_Delete(ctx);
		return PC_EINVAL;
	}
	return launch(rt, h, p, event, ctx, match_name, owner, tag);
}

int pc_hooks_notify(pc_runtime_t *rt, const pc_hooks_t *h, pc_hook_point_t p, cJSON *event, cJSON *ctx,
		    const char *match_name)
{
	if (!args_ok(rt, h, p) || pc_hook_point_is_decision(p)) {
		cJSON_Delete(event);
		cJSON_Delete(ctx);
		return PC_EINVAL;
	}
	return launch(rt, h, p, event, ctx, match_name, NULL, 0);
}

/* ==== merge rules ===================================================================== */

/* ---- helpers ---- */

/* A field, or NULL when absent or JSON null (null counts as absent). */
static const cJSON *field(const cJSON *o, const char *key)
{
	const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, key);
	return cJSON_IsNull(f) ? NULL : f;
}

enum { T_STR = 1, T_BOOL = 2, T_OBJ = 4, T_ARR = 8 };

typedef struct shape {
	const char *key;
	int types; /* T_* accepted */
} shape_t;

static bool has_type(const cJSON *j, int t)
{
	return ((t & T_STR) && cJSON_IsString(j)) || ((t & T_BOOL) && cJSON_IsBool(j)) ||
	       ((t & T_OBJ) && cJSON_IsObject(j)) || ((t & T_ARR) && cJSON_IsArray(j));
}

/* Every field named in s[0..n) is absent or of an accepted type. */
static bool shape_ok(const cJSON *o, const shape_t *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		const cJSON *f = field(o, s[i].key);
		if (f && !has_type(f, s[i].types))
			return false;
	}
	return true;
}

static int set_text(char **dst, const char *s)
{
	char *copy = strdup(s);
	if (!copy)
		return PC_ENOMEM;
	free(*dst);
	*dst = copy;
	return 0;
}

/* obj[key] = a copy of v (replacing any). */
static int put_copy(cJSON *obj, const char *key, const cJSON *v)
{
	cJSON *copy = cJSON_Duplicate(v, true);
	if (!copy)
		return PC_ENOMEM;
	bool ok = cJSON_GetObjectItemCaseSensitive(obj, key) ? cJSON_ReplaceItemInObjectCaseSensitive(obj, key, copy)
							      : cJSON_AddItemToObject(obj, key, copy);
	if (!ok) {
		cJSON_Delete(copy);
		return PC_ENOMEM;
	}
	return 0;
}

static int put_string(cJSON *obj, const char *key, const char *s)
{
	cJSON *v = cJSON_CreateString(s);
	int rc = v ? put_copy(obj, key, v) : PC_ENOMEM;
	cJSON_Delete(v);
	return rc;
}

/* A copy of c->m.acc, the usual merged result. */
static cJSON *acc_copy(chain_t *c)
{
	return cJSON_Duplicate(c->m.acc, true);
}

static void block(chain_t *c, const char *reason)
{
	c->m.blocked = true;
	c->m.stop = true;
	if (set_text(&c->m.reason, reason) != 0) {
		free(c->m.reason);
		c->m.reason = NULL; /* still blocked; the reason is what memory allowed */
	}
}

static bool nonempty(const char *s)
{
	return s && *s;
}

static void fail_ignored(chain_t *c, bool timed_out)
{
	(void)c;
	(void)timed_out;
}

/* ---- observation points ---- */

static int observe_apply(chain_t *c, const cJSON *res)
{
	(void)c;
	(void)res;
	return 0;
}

static cJSON *empty_result(chain_t *c)
{
	(void)c;
	return cJSON_CreateObject();
}

/* ---- before_tool_call ---- */

/* Shallow-merges `params` over the event's params, which later handlers
 * then see. */
static int merge_params(chain_t *c, const cJSON *params)
{
	cJSON *cur = cJSON_GetObjectItemCaseSensitive(c->event, "params");
	if (!cJSON_IsObject(cur)) {
		cJSON *empty = cJSON_CreateObject();
		int rc = empty ? put_copy(c->event, "params", empty) : PC_ENOMEM;
		cJSON_Delete(empty);
		if (rc != 0)
			return rc;
		cur = cJSON_GetObjectItemCaseSensitive(c->event, "params");
	}
	for (const cJSON *kv = params->child; kv; kv = kv->next) {
		int rc = put_copy(cur, kv->string, kv);
		if (rc != 0)
			return rc;
	}
	c->m.changed |= CHANGED_PARAMS;
	return 0;
}

static int tool_apply(chain_t *c, const cJSON *res)
{
	static const shape_t shape[] = {
		{"block", T_BOOL}, {"blockReason", T_STR}, {"params", T_OBJ}, {"requireApproval", T_OBJ}};
	if (!res)
		return 0;
	if (!shape_ok(res, shape, sizeof(shape) / sizeof(shape[0])))
		return MALFORMED;
	int rc = 0;
	const cJSON *reason = field(res, "blockReason");
	if (reason && (rc = set_text(&c->m.latest_reason, reason->valuestring)) != 0)
		return rc;
	/* Once an approval is requested, what it approves no longer changes. */
	const cJSON *params = field(res, "params");
	if (params && !c->m.approval && (rc = merge_params(c, params)) != 0)
		return rc;
	const cJSON *approval = field(res, "requireApproval");
	if (approval && !c->m.approval) {
		if ((rc = put_copy(c->m.acc, "requireApproval", approval)) != 0)
			return rc;
		c->m.approval = true;
	}
	if (cJSON_IsTrue(field(res, "block")))
		block(c, nonempty(c->m.latest_reason) ? c->m.latest_reason : PC_HOOK_REASON_TOOL_BLOCKED);
	return 0;
}

static void tool_fail(chain_t *c, bool timed_out)
{
	(void)timed_out;
	block(c, PC_HOOK_REASON_TOOL_HOOK_FAILED);
}

static cJSON *tool_result(chain_t *c)
{
	/* No approval route exists here: an unanswered request blocks. */
	if (!c->m.blocked && c->m.approval)
		block(c, PC_HOOK_REASON_APPROVAL_UNAVAILABLE);
	cJSON *out = acc_copy(c);
	if (!out)
		return NULL;
	const cJSON *params = cJSON_GetObjectItemCaseSensitive(c->event, "params");
	bool ok = !(c->m.changed & CHANGED_PARAMS) || put_copy(out, "params", params) == 0;
	if (ok && c->m.blocked)
		ok = cJSON_AddTrueToObject(out, "block") &&
		     put_string(out, "blockReason", c->m.reason ? c->m.reason : "") == 0;
	if (!ok) {
		cJSON_Delete(out);
		return NULL;
	}
	return out;
}

/* ---- message_sending ---- */

static int sending_apply(chain_t *c, const cJSON *res)
{
	static const shape_t shape[] = {{"content", T_STR}, {"cancel", T_BOOL}, {"cancelReason", T_STR}};
	if (!res)
		return 0;
	if (!shape_ok(res, shape, sizeof(shape) / sizeof(shape[0])))
		return MALFORMED;
	int rc = 0;
	const cJSON *content = field(res, "content");
	if (content) {
		if ((rc = put_copy(c->event, "content", content)) != 0)
			return rc;
		c->m.changed |= CHANGED_CONTENT;
	}
	const cJSON *reason = field(res, "cancelReason");
	if (reason && (rc = set_text(&c->m.latest_reason, reason->valuestring)) != 0)
		return rc;
	if (cJSON_IsTrue(field(res, "cancel")))
		block(c, c->m.latest_reason ? c->m.latest_reason : "");
	return 0;
}

static cJSON *sending_result(chain_t *c)
{
	cJSON *out = cJSON_CreateObject();
	if (!out)
		return NULL;
	bool ok = true;
	if (c->m.changed & CHANGED_CONTENT)
		ok = put_copy(out, "content", cJSON_GetObjectItemCaseSensitive(c->event, "content")) == 0;
	if (ok && c->m.blocked)
		ok = cJSON_AddTrueToObject(out, "cancel") != NULL;
	if (ok && c->m.latest_reason)
		ok = put_string(out, "cancelReason", c->m.latest_reason) == 0;
	if (!ok) {
		cJSON_Delete(out);
		return NULL;
	}
	return out;
}

/* ---- before_model_resolve ---- */

static int model_apply(chain_t *c, const cJSON *res)
{
	static const shape_t shape[] = {{"providerOverride", T_STR}, {"modelOverride", T_STR}};
	if (!res)
		return 0;
	if (!shape_ok(res, shape, 2))
		return MALFORMED;
	/* The first non-empty override wins: the highest priority. */
	for (size_t i = 0; i < 2; i++) {
		const cJSON *v = field(res, shape[i].key);
		if (v && nonempty(v->valuestring) && !cJSON_GetObjectItemCaseSensitive(c->m.acc, shape[i].key)) {
			int rc = put_copy(c->m.acc, shape[i].key, v);
			if (rc != 0)
				return rc;
		}
	}
	return 0;
}

/* ---- before_prompt_build ---- */

static bool string_array(const cJSON *a)
{
	if (!cJSON_IsArray(a))
		return false;
	for (const cJSON *s = a->child; s; s = s->next)
		if (!cJSON_IsString(s))
			return false;
	return true;
}

static bool array_has(const cJSON *a, const char *s)
{
	for (const cJSON *x = a->child; x; x = x->next)
		if (strcmp(x->valuestring, s) == 0)
			return true;
	return false;
}

/* left ∩ right, in left's order; "*" on one side means the other side. */
static cJSON *intersect(const cJSON *left, const cJSON *right)
{
	if (array_has(left, "*"))
		return cJSON_Duplicate(right, true);
	if (array_has(right, "*"))
		return cJSON_Duplicate(left, true);
	cJSON *out = cJSON_CreateArray();
	for (const cJSON *x = left->child; out && x; x = x->next) {
		if (!array_has(right, x->valuestring) || array_has(out, x->valuestring))
			continue;
		cJSON *s = cJSON_CreateString(x->valuestring);
		if (!s || !cJSON_AddItemToArray(out, s)) {
			cJSON_Delete(s);
			cJSON_Delete(out);
			return NULL;
		}
	}
	return out;
}

/* Narrows the allowed tools by `list` (an array of strings). */
static int restrict_tools(chain_t *c, const cJSON *list)
{
	cJSON *next = c->m.tools_allow ? intersect(c->m.tools_allow, list) : cJSON_Duplicate(list, true);
	if (!next)
		return PC_ENOMEM;
	cJSON_Delete(c->m.tools_allow);
	c->m.tools_allow = next;
	return 0;
}

/* acc[key] = acc[key] + "\n\n" + s (empty strings add nothing). */
static int concat_field(cJSON *acc, const char *key, const char *s)
{
	if (!nonempty(s))
		return 0;
	const cJSON *cur = cJSON_GetObjectItemCaseSensitive(acc, key);
	if (!cur)
		return put_string(acc, key, s);
	size_t a = strlen(cur->valuestring), b = strlen(s);
	char *joined = malloc(a + b + 3);
	if (!joined)
		return PC_ENOMEM;
	memcpy(joined, cur->valuestring, a);
	memcpy(joined + a, "\n\n", 2);
	memcpy(joined + a + 2, s, b + 1);
	int rc = put_string(acc, key, joined);
	free(joined);
	return rc;
}

static int prompt_apply(chain_t *c, const cJSON *res)
{
	static const shape_t shape[] = {{"systemPrompt", T_STR},         {"prependContext", T_STR},
					{"appendContext", T_STR},        {"prependSystemContext", T_STR},
					{"appendSystemContext", T_STR}};
	if (!res)
		return 0;
	const cJSON *tools = field(res, "toolsAllow");
	if (tools && !string_array(tools)) {
		/* A restriction that cannot be read restricts everything. */
		cJSON *none = cJSON_CreateArray();
		int rc = none ? restrict_tools(c, none) : PC_ENOMEM;
		cJSON_Delete(none);
		return rc ? rc : MALFORMED;
	}
	if (!shape_ok(res, shape, sizeof(shape) / sizeof(shape[0])))
		return MALFORMED;
	int rc = 0;
	const cJSON *sp = field(res, "systemPrompt");
	if (sp && !cJSON_GetObjectItemCaseSensitive(c->m.acc, "systemPrompt"))
		rc = put_copy(c->m.acc, "systemPrompt", sp); /* the first one wins */
	for (size_t i = 1; rc == 0 && i < sizeof(shape) / sizeof(shape[0]); i++) {
		const cJSON *v = field(res, shape[i].key);
		if (v)
			rc = concat_field(c->m.acc, shape[i].key, v->valuestring);
	}
	if (rc == 0 && tools)
		rc = restrict_tools(c, tools);
	return rc;
}

static cJSON *prompt_result(chain_t *c)
{
	cJSON *out = acc_copy(c);
	/* A list that still holds "*" restricts nothing: left out. */
	bool narrows = c->m.tools_allow && !array_has(c->m.tools_allow, "*");
	if (out && narrows && put_copy(out, "toolsAllow", c->m.tools_allow) != 0) {
		cJSON_Delete(out);
		return NULL;
	}
	return out;
}

/* ---- before_agent_run ---- */

static bool blank(const char *s)
{
	return !s || s[strspn(s, " \t\r\n")] == '\0';
}

/* The decision shapes this point accepts, strictly. */
static bool run_decision_valid(const cJSON *res)
{
	const cJSON *outcome = cJSON_GetObjectItemCaseSensitive(res, "outcome");
	if (!cJSON_IsString(outcome))
		return false;
	if (strcmp(outcome->valuestring, "pass") == 0)
		return cJSON_GetArraySize(res) == 1;
	if (strcmp(outcome->valuestring, "block") != 0)
		return false;
	static const char *const allowed[] = {"outcome", "reason", "message", "category", "metadata"};
	for (const cJSON *kv = res->child; kv; kv = kv->next) {
		bool known = false;
		for (size_t i = 0; i < sizeof(allowed) / sizeof(allowed[0]); i++)
			known = known || strcmp(kv->string, allowed[i]) == 0;
		if (!known)
			return false;
		bool text = strcmp(kv->string, "outcome") != 0 && strcmp(kv->string, "metadata") != 0;
		if (text && (!cJSON_IsString(kv) || blank(kv->valuestring)))
			return false;
		if (strcmp(kv->string, "metadata") == 0 && !cJSON_IsObject(kv))
			return false;
	}
	return cJSON_GetObjectItemCaseSensitive(res, "reason") != NULL;
}

/* Blocks the run with `reason` and the decision object {outcome, reason}. */
static void run_block(chain_t *c, const char *reason)
{
	cJSON *d = cJSON_CreateObject();
	if (d && cJSON_AddStringToObject(d, "outcome", "block") && cJSON_AddStringToObject(d, "reason", reason)) {
		cJSON_Delete(c->m.acc);
		c->m.acc = d;
		d = NULL;
	}
	cJSON_Delete(d);
	block(c, reason);
}

static int run_apply(chain_t *c, const cJSON *res)
{
	if (!res)
		return 0; /* no decision */
	if (!run_decision_valid(res)) {
		run_block(c, PC_HOOK_REASON_RUN_INVALID);
		return MALFORMED;
	}
	if (strcmp(cJSON_GetObjectItemCaseSensitive(res, "outcome")->valuestring, "pass") == 0) {
		c->m.passed = true;
		return 0;
	}
	cJSON *d = cJSON_Duplicate(res, true);
	if (!d)
		return PC_ENOMEM;
	cJSON_Delete(c->m.acc);
	c->m.acc = d;
	block(c, cJSON_GetObjectItemCaseSensitive(res, "reason")->valuestring);
	return 0;
}

static void run_fail(chain_t *c, bool timed_out)
{
	if (!c->m.blocked) /* an invalid decision already blocked, with its reason */
		run_block(c, timed_out ? PC_HOOK_REASON_RUN_TIMEOUT : PC_HOOK_REASON_RUN_FAILED);
}

static cJSON *run_result(chain_t *c)
{
	if (!c->m.blocked && c->m.passed) {
		cJSON *out = cJSON_CreateObject();
		if (out && !cJSON_AddStringToObject(out, "outcome", "pass")) {
			cJSON_Delete(out);
			return NULL;
		}
		return out;
	}
	return acc_copy(c);
}

/* ---- before_agent_reply ---- */

static int reply_apply(chain_t *c, const cJSON *res)
{
	static const shape_t shape[] = {{"handled", T_BOOL}, {"reply", T_STR | T_OBJ}, {"reason", T_STR}};
	if (!res)
		return 0;
	if (!shape_ok(res, shape, sizeof(shape) / sizeof(shape[0])))
		return MALFORMED;
	if (!cJSON_IsTrue(field(res, "handled")))
		return 0;
	cJSON *claim = cJSON_Duplicate(res, true);
	if (!claim)
		return PC_ENOMEM;
	cJSON_Delete(c->m.acc);
	c->m.acc = claim;
	c->m.stop = true; /* the first claim wins */
	return 0;
}

/* ---- before_agent_finalize ---- */

static const char *acc_action(const chain_t *c)
{
	const cJSON *a = cJSON_GetObjectItemCaseSensitive(c->m.acc, "action");
	return cJSON_IsString(a) ? a->valuestring : "";
}

/* A copy of `retry` with its instruction trimmed; NULL (and *rc 0) when it
 * has no non-empty instruction. */
static cJSON *retry_normalized(const cJSON *retry, int *rc)
{
	*rc = 0;
	const cJSON *ins = retry ? field(retry, "instruction") : NULL;
	if (!cJSON_IsString(ins))
		return NULL;
	const char *s = ins->valuestring + strspn(ins->valuestring, " \t\r\n");
	size_t len = strlen(s);
	while (len && strchr(" \t\r\n", s[len - 1]))
		len--;
	if (len == 0)
		return NULL;
	char *trimmed = strndup(s, len);
	cJSON *out = cJSON_Duplicate(retry, true);
	if (!trimmed || !out || put_string(out, "instruction", trimmed) != 0) {
		cJSON_Delete(out);
		out = NULL;
		*rc = PC_ENOMEM;
	}
	free(trimmed);
	return out;
}

/* A fresh decision {action, reason?, retry?} replacing acc. */
static int finalize_set(chain_t *c, const char *action, const cJSON *reason, const cJSON *retry)
{
	int rc = 0;
	cJSON *d = cJSON_CreateObject();
	cJSON *r = retry ? retry_normalized(retry, &rc) : NULL;
	if (!d || rc != 0 || !cJSON_AddStringToObject(d, "action", action) ||
	    (reason && put_copy(d, "reason", reason) != 0) || (r && put_copy(d, "retry", r) != 0)) {
		cJSON_Delete(d);
		cJSON_Delete(r);
		return PC_ENOMEM;
	}
	cJSON_Delete(r);
	cJSON_Delete(c->m.acc);
	c->m.acc = d;
	return 0;
}

/* Two revise requests: reasons joined, the first usable retry kept. */
static int finalize_combine(chain_t *c, const cJSON *reason, const cJSON *retry)
{
	int rc = reason ? concat_field(c->m.acc, "reason", reason->valuestring) : 0;
	if (rc != 0 || cJSON_GetObjectItemCaseSensitive(c->m.acc, "retry"))
		return rc;
	cJSON *r = retry_normalized(retry, &rc);
	if (r)
		rc = put_copy(c->m.acc, "retry", r);
	cJSON_Delete(r);
	return rc;
}

static int finalize_apply(chain_t *c, const cJSON *res)
{
	static const shape_t shape[] = {{"action", T_STR}, {"reason", T_STR}, {"retry", T_OBJ}};
	if (!res)
		return 0;
	if (!shape_ok(res, shape, sizeof(shape) / sizeof(shape[0])))
		return MALFORMED;
	const cJSON *a = field(res, "action");
	const char *action = a ? a->valuestring : "";
	if (a && strcmp(action, "revise") != 0 && strcmp(action, "finalize") != 0 && strcmp(action, "continue") != 0)
		return MALFORMED;
	const cJSON *reason = field(res, "reason"), *retry = field(res, "retry");
	const char *cur = acc_action(c);
	if (strcmp(cur, "finalize") == 0 || !a)
		return 0; /* finalize sticks; no action is no decision */
	if (strcmp(action, "finalize") == 0)
		return finalize_set(c, "finalize", reason, NULL);
	if (strcmp(action, "revise") == 0)
		return strcmp(cur, "revise") == 0 ? finalize_combine(c, reason, retry)
						  : finalize_set(c, "revise", reason, retry);
	return strcmp(cur, "revise") == 0 ? 0 : finalize_set(c, "continue", reason, NULL);
}

/* ---- tool_result_persist ---- */

static int persist_apply(chain_t *c, const cJSON *res)
{
	static const shape_t shape[] = {{"message", T_OBJ}, {"content", T_STR | T_ARR}};
	static const uint32_t bits[] = {CHANGED_MESSAGE, CHANGED_CONTENT};
	if (!res)
		return 0;
	if (!shape_ok(res, shape, 2))
		return MALFORMED;
	for (size_t i = 0; i < 2; i++) {
		const cJSON *v = field(res, shape[i].key);
		if (!v)
			continue;
		int rc = put_copy(c->event, shape[i].key, v);
		if (rc != 0)
			return rc;
		c->m.changed |= bits[i];
	}
	return 0;
}

static cJSON *persist_result(chain_t *c)
{
	cJSON *out = cJSON_CreateObject();
	bool ok = out != NULL;
	if (ok && (c->m.changed & CHANGED_MESSAGE))
		ok = put_copy(out, "message", cJSON_GetObjectItemCaseSensitive(c->event, "message")) == 0;
	if (ok && (c->m.changed & CHANGED_CONTENT))
		ok = put_copy(out, "content", cJSON_GetObjectItemCaseSensitive(c->event, "content")) == 0;
	if (!ok) {
		cJSON_Delete(out);
		return NULL;
	}
	return out;
}

/* ---- the table ---- */

static const policy_t observe_policy = {observe_apply, fail_ignored, empty_result};
static const policy_t tool_policy = {tool_apply, tool_fail, tool_result};
static const policy_t sending_policy = {sending_apply, fail_ignored, sending_result};
static const policy_t model_policy = {model_apply, fail_ignored, acc_copy};
static const policy_t prompt_policy = {prompt_apply, fail_ignored, prompt_result};
static const policy_t run_policy = {run_apply, run_fail, run_result};
static const policy_t reply_policy = {reply_apply, fail_ignored, acc_copy};
static const policy_t finalize_policy = {finalize_apply, fail_ignored, acc_copy};
static const policy_t persist_policy = {persist_apply, fail_ignored, persist_result};

static const policy_t *policy_of(pc_hook_point_t p)
{
	switch (p) {
	case PC_HOOK_BEFORE_TOOL_CALL: return &tool_policy;
	case PC_HOOK_MESSAGE_SENDING: return &sending_policy;
	case PC_HOOK_BEFORE_MODEL_RESOLVE: return &model_policy;
	case PC_HOOK_BEFORE_PROMPT_BUILD: return &prompt_policy;
	case PC_HOOK_BEFORE_AGENT_RUN: return &run_policy;
	case PC_HOOK_BEFORE_AGENT_REPLY: return &reply_policy;
	case PC_HOOK_BEFORE_AGENT_FINALIZE: return &finalize_policy;
	case PC_HOOK_TOOL_RESULT_PERSIST: return &persist_policy;
	default: return &observe_policy;
	}
}
