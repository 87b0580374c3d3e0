/*
 * The compaction actor (compaction.h): read the session's history from the
 * store, cut it, have the model summarise the older part, and rewrite the
 * transcript as [summary, tail...] under the session write lock.
 *
 *   START ──ask──▶ store        READ     PC_STORE_MSG_HISTORY
 *         ──spawn─▶ model call  MODEL    PC_MSG_MODEL_DONE
 *         ──submit▶ blocking    REWRITE  MSG_REWRITTEN
 *         ──▶ DONE to the owner, exit
 *
 * The rewrite blocks (the lock file, then a synchronous store write), so it
 * runs on the blocking pool as a job that owns everything it reads: the
 * snapshot, the summary, copies of the key and lock settings. Should this
 * actor stop while the job runs, the job still finishes and frees its data
 * once; its answer then goes nowhere (a dead letter).
 *
 * An abort or the operation timer during READ or MODEL ends the operation
 * at once (the model call is aborted; nothing was written). During REWRITE
 * they wait for the job, because only its outcome says whether the
 * transcript changed, and the owner must know that.
 *
 * Exactly one DONE: every path ends in finish(), which marks it sent, and
 * the stop handler (which runs once, whatever stops the actor) sends one if
 * nothing did. after_compaction goes with it, once before_compaction went.
 *
 * The actor holds a reference to the hook registry (only when a
 * compaction hook is registered): it may outlive its owner and the agent
 * (an abort is answered after the owner stopped), and its last hook must
 * not find the registry gone.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/timer.h"
#include "runtime/blocking.h"
#include "../attempt/context_guard.h"
#include "agents/providers/providers.h"
#include "compaction.h"

#define DEFAULT_MAX_TOKENS 4096
#define DEFAULT_KEEP_RECENT_TOKENS 20000u
#define DEFAULT_TIMEOUT_MS 900000u /* agents.defaults.compaction.timeoutSeconds */
#define SYSTEM_PROMPT "You summarise conversations for an AI agent so it can continue the work."
/* Conflicting appends are retried this many times before giving up. */
#define MAX_CONFLICT_RETRIES 1u

enum {
	MSG_START = PC_MSG_TYPE_SYSTEM + 0x2210,
	MSG_ABORT,
	MSG_TIMEOUT,
	MSG_REWRITTEN,
};

typedef enum phase {
	PH_START = 0,
	PH_READ,
	PH_MODEL,
	PH_REWRITE,
} phase_t;

/* What stopped the operation while the rewrite job ran. */
typedef enum stop_cause {
	STOP_NONE = 0,
	STOP_ABORT,
	STOP_TIMEOUT,
} stop_cause_t;

typedef struct compaction {
	pc_runtime_t *rt;
	pc_actor_t *owner;
	pc_compaction_request_t req; /* strings point at the copies below */
	char *lock_dir, *key, *run_id, *trigger, *instructions, *url, *provider, *model;
	char **headers;
	pc_session_lock_opts_t lock_opts;
	bool has_lock_opts;

	phase_t phase;
	pc_timer_t timer;
	uint64_t corr;                 /* of the history ask in flight */
	pc_actor_t *call;              /* the model call, while it runs */
	pc_store_history_t *hist;      /* the snapshot being compacted */
	cJSON *msgs;                   /* its messages, unified */
	size_t first_kept;
	int64_t *prefix_seqs;          /* seqs of msgs[0..first_kept], for a retry */
	char *summary;
	uint32_t conflicts;
	stop_cause_t stop_cause;
	bool done_sent;
	const pc_hooks_t *hooks;       /* retained; NULL when no compaction hook is registered */
	bool announced;                /* before_compaction fired: after_compaction follows */

	uint64_t tokens_before, tokens_after;
	uint32_t messages_before, messages_after;
} compaction_t;

/* ---- hooks (§7.4) ---- */

/* The event with what both compaction hooks carry; NULL on no memory. */
static cJSON *hook_event(const compaction_t *c)
{
	cJSON *e = cJSON_CreateObject();
	if (!e)
		return NULL;
	if (c->req.trigger)
		cJSON_AddStringToObject(e, "trigger", c->req.trigger);
	cJSON_AddStringToObject(e, "sessionKey", c->req.session_key);
	if (c->req.run_id)
		cJSON_AddStringToObject(e, "runId", c->req.run_id);
	cJSON_AddNumberToObject(e, "tokensBefore", (double)c->tokens_before);
	return e;
}

static void notify(const compaction_t *c, pc_hook_point_t p, cJSON *event)
{
	cJSON *ctx = cJSON_CreateObject();
	if (ctx) {
		cJSON_AddStringToObject(ctx, "agentId", "main");
		cJSON_AddStringToObject(ctx, "sessionKey", c->req.session_key);
		if (c->req.run_id)
			cJSON_AddStringToObject(ctx, "runId", c->req.run_id);
	}
	pc_hooks_notify(c->rt, c->hooks, p, event, ctx, NULL);
}

/* before_compaction, once: the history has been read. */
static void announce_before(compaction_t *c)
{
	if (c->announced || !pc_hooks_active(c->hooks, PC_HOOK_BEFORE_COMPACTION, NULL))
		return;
	c->announced = true;
	cJSON *e = hook_event(c);
	if (e)
		cJSON_AddNumberToObject(e, "messageCount", c->messages_before);
	notify(c, PC_HOOK_BEFORE_COMPACTION, e);
}

/* after_compaction: the outcome, as DONE tells it. */
static void announce_after(const compaction_t *c, const pc_compaction_done_msg_t *d)
{
	if (!c->announced || !pc_hooks_active(c->hooks, PC_HOOK_AFTER_COMPACTION, NULL))
		return;
	cJSON *e = hook_event(c);
	if (!e)
		return;
	cJSON_AddBoolToObject(e, "compacted", d->compacted);
	if (d->compacted && c->summary)
		cJSON_AddNumberToObject(e, "summaryChars", (double)strlen(c->summary));
	cJSON_AddNumberToObject(e, "messageCount", d->messages_after);
	cJSON_AddNumberToObject(e, "compactedCount", d->compacted ? (double)c->first_kept : 0);
	cJSON_AddNumberToObject(e, "tokensAfter", (double)d->tokens_after);
	if (d->rc != 0)
		cJSON_AddStringToObject(e, "error", d->error);
	if (d->aborted)
		cJSON_AddTrueToObject(e, "aborted");
	if (d->timed_out)
		cJSON_AddTrueToObject(e, "timedOut");
	notify(c, PC_HOOK_AFTER_COMPACTION, e);
}

/* ---- the outcome ---- */

typedef struct outcome {
	int rc;
	bool compacted, aborted, timed_out;
} outcome_t;

static void send_done(compaction_t *c, const outcome_t *o, const char *error)
{
	c->done_sent = true;
	pc_msg_t *m = pc_msg_new(PC_MSG_COMPACTION_DONE, sizeof(pc_compaction_done_msg_t));
	if (!m)
		return; /* nothing left to tell the owner with */
	pc_compaction_done_msg_t *d = pc_msg_data(m);
	memset(d, 0, sizeof(*d));
	d->tag = c->req.tag;
	d->rc = o->rc;
	d->compacted = o->compacted;
	d->aborted = o->aborted;
	d->timed_out = o->timed_out;
	d->tokens_before = c->tokens_before;
	d->messages_before = c->messages_before;
	/* Unless a rewrite committed, the transcript is what it was. */
	d->tokens_after = o->compacted ? c->tokens_after : c->tokens_before;
	d->messages_after = o->compacted ? c->messages_after : c->messages_before;
	snprintf(d->error, sizeof(d->error), "%s", o->rc ? (error ? error : pc_strerror(o->rc)) : "");
	announce_after(c, d);
	pc_send(c->owner, m);
}

/* Sends DONE and stops. `fmt` (may be NULL) describes a failure. */
static void finish(pc_ctx_t *ctx, compaction_t *c, const outcome_t *o, const char *fmt, ...)
{
	char error[256] = "";
	if (fmt) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(error, sizeof(error), fmt, ap);
		va_end(ap);
	}
	send_done(c, o, fmt ? error : NULL);
	pc_exit(ctx, PC_EXIT_NORMAL);
}

static void fail(pc_ctx_t *ctx, compaction_t *c, int rc, const char *what)
{
	outcome_t o = {.rc = rc};
	finish(ctx, c, &o, "%s: %s", what, pc_store_strerror(rc));
}

/* ---- the snapshot ---- */

static void drop_snapshot(compaction_t *c)
{
	cJSON_Delete(c->msgs);
	c->msgs = NULL;
	pc_store_history_free(c->hist);
	c->hist = NULL;
}

/* A stored message as a unified one. The content is the message itself;
 * older or foreign rows may hold a bare content or lack the role, which
 * the stored role then supplies. */
static int to_unified(const pc_store_msg_t *sm, cJSON **out)
{
	cJSON *v = cJSON_Parse(sm->content);
	cJSON *o = NULL;
	if (!v)
		return PC_ENOMEM; /* the store validated it: only memory can fail */
	if (cJSON_IsObject(v)) {
		if (!cJSON_HasObjectItem(v, "role") && !cJSON_AddStringToObject(v, "role", sm->role)) {
			cJSON_Delete(v);
			return PC_ENOMEM;
		}
		*out = v;
		return 0;
	}
	if (!(o = cJSON_CreateObject()) || !cJSON_AddStringToObject(o, "role", sm->role) ||
	    !cJSON_AddItemToObject(o, "content", v)) {
		cJSON_Delete(o);
		cJSON_Delete(v);
		return PC_ENOMEM;
	}
	*out = o;
	return 0;
}

static int load_snapshot(compaction_t *c, const pc_msg_t *reply)
{
	drop_snapshot(c);
	int rc = pc_store_history_take(reply, &c->hist);
	if (rc != 0)
		return rc;
	if (!(c->msgs = cJSON_CreateArray()))
		return PC_ENOMEM;
	size_t n = pc_store_history_count(c->hist);
	for (size_t i = 0; i < n; i++) {
		pc_store_msg_t sm;
		cJSON *m = NULL;
		pc_store_history_get(c->hist, i, &sm);
		if ((rc = to_unified(&sm, &m)) != 0)
			return rc;
		if (!cJSON_AddItemToArray(c->msgs, m)) {
			cJSON_Delete(m);
			return PC_ENOMEM;
		}
	}
	c->messages_before = n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
	return 0;
}

/* Estimated chars as the model will see the message: a summary as its
 * context message, anything else as it is. */
static size_t replay_chars(const cJSON *m)
{
	const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
	if (cJSON_IsString(role) && strcmp(role->valuestring, PC_COMPACTION_ROLE) == 0) {
		const cJSON *s = cJSON_GetObjectItemCaseSensitive(m, "summary");
		return sizeof(PC_COMPACTION_CONTEXT_PREFIX) - 1 + (cJSON_IsString(s) ? strlen(s->valuestring) : 0);
	}
	return pc_ctx_message_chars(m);
}

/* Chars of msgs[from..to). */
static size_t range_chars(const cJSON *msgs, size_t from, size_t to)
{
	size_t chars = 0, i = 0;
	const cJSON *m;
	cJSON_ArrayForEach(m, msgs)
	{
		if (i >= from && i < to)
			chars += replay_chars(m);
		i++;
	}
	return chars;
}

/* Is the summarised part of the previous snapshot still the start of this
 * one (same messages, same boundary)? Then only the tail grew and the
 * summary already made still stands. Seqs are never reused, so equal seqs
 * are equal messages. */
static bool prefix_unchanged(const compaction_t *c)
{
	if (!c->prefix_seqs || pc_store_history_count(c->hist) <= c->first_kept)
		return false;
	for (size_t i = 0; i <= c->first_kept; i++) {
		pc_store_msg_t sm;
		pc_store_history_get(c->hist, i, &sm);
		if (sm.seq != c->prefix_seqs[i])
			return false;
	}
	return true;
}

static int remember_prefix(compaction_t *c)
{
	free(c->prefix_seqs);
	c->prefix_seqs = malloc((c->first_kept + 1) * sizeof(*c->prefix_seqs));
	if (!c->prefix_seqs)
		return PC_ENOMEM;
	for (size_t i = 0; i <= c->first_kept; i++) {
		pc_store_msg_t sm;
		pc_store_history_get(c->hist, i, &sm);
		c->prefix_seqs[i] = sm.seq;
	}
	return 0;
}

/* ---- the rewrite job (blocking pool) ---- */

typedef struct rewrite_job {
	pc_store_t *store;
	char *lock_dir, *key;
	pc_session_lock_opts_t opts;
	bool has_opts;
	int64_t epoch, expected_last_seq, from_seq;
	pc_store_history_t *hist; /* the kept messages' strings live here */
	char *content;            /* the summary message's */
	char *run_id;
	pc_store_msg_t *msgs;
	size_t n;
} rewrite_job_t;

typedef struct rewritten_msg {
	int32_t rc;
	int64_t last_seq;
	char error[256];
} rewritten_msg_t;

static void job_free(rewrite_job_t *j)
{
	if (!j)
		return;
	free(j->lock_dir);
	free(j->key);
	pc_store_history_free(j->hist);
	free(j->content);
	free(j->run_id);
	free(j->msgs);
	free(j);
}

static void job_discard(void *arg)
{
	job_free(arg);
}

static pc_msg_t *job_run(void *arg)
{
	rewrite_job_t *j = arg;
	pc_session_lock_info_t busy;
	int64_t last = 0;
	memset(&busy, 0, sizeof(busy));
	int rc = pc_store_rewrite_locked(j->store, j->lock_dir, j->has_opts ? &j->opts : NULL, j->key, j->epoch,
					 j->expected_last_seq, j->from_seq, j->msgs, j->n, &last, &busy);
	pc_msg_t *m = pc_msg_new(MSG_REWRITTEN, sizeof(rewritten_msg_t));
	if (m) {
		rewritten_msg_t *r = pc_msg_data(m);
		memset(r, 0, sizeof(*r));
		r->rc = rc;
		r->last_seq = last;
		if (rc == PC_EBUSY)
			pc_session_lock_busy_message(&busy, r->error, sizeof(r->error));
		else if (rc != 0)
			snprintf(r->error, sizeof(r->error), "rewrite failed: %s", pc_store_strerror(rc));
	}
	job_free(j);
	return m; /* NULL (no memory): the actor's timer still ends the operation */
}

static char *dup_str(const char *s, bool *ok)
{
	if (!s)
		return NULL;
	size_t n = strlen(s) + 1;
	char *d = malloc(n);
	if (d)
		memcpy(d, s, n);
	else
		*ok = false;
	return d;
}

/* Builds the job from the snapshot (which it takes over) and queues it. */
static int submit_rewrite(pc_ctx_t *ctx, compaction_t *c)
{
	size_t n = pc_store_history_count(c->hist);
	size_t kept = n - c->first_kept;
	bool ok = true;
	rewrite_job_t *j = calloc(1, sizeof(*j));
	if (!j)
		return PC_ENOMEM;
	int rc = pc_compaction_summary_content(c->summary, c->tokens_before, c->req.trigger, &j->content);
	if (rc != 0)
		goto fail;
	rc = PC_ENOMEM;
	j->store = c->req.store;
	j->lock_dir = dup_str(c->req.lock_dir, &ok);
	j->key = dup_str(c->req.session_key, &ok);
	j->run_id = dup_str(c->req.run_id, &ok);
	j->opts = c->lock_opts;
	j->has_opts = c->has_lock_opts;
	j->epoch = c->req.epoch;
	j->expected_last_seq = pc_store_history_last_seq(c->hist);
	j->n = kept + 1;
	if (!ok || !(j->msgs = calloc(j->n, sizeof(*j->msgs))))
		goto fail;
	pc_store_msg_t first;
	pc_store_history_get(c->hist, 0, &first);
	j->from_seq = first.seq;
	/* the summary was printed by cJSON; the kept rows were stored valid */
	j->msgs[0] = (pc_store_msg_t){.role = PC_COMPACTION_ROLE, .content = j->content, .run_id = j->run_id,
				      .json_checked = true};
	for (size_t i = 0; i < kept; i++) {
		pc_store_msg_t sm;
		pc_store_history_get(c->hist, c->first_kept + i, &sm);
		j->msgs[i + 1] = (pc_store_msg_t){
			.created_ms = sm.created_ms,
			.role = sm.role,
			.content = sm.content,
			.tool_call_ids = sm.tool_call_ids,
			.run_id = sm.run_id,
			.json_checked = true,
		};
	}
	/* What the model will read afterwards: the summary as its context
	 * message, then the tail. */
	c->tokens_after = pc_ctx_chars_to_tokens(sizeof(PC_COMPACTION_CONTEXT_PREFIX) - 1 + strlen(c->summary) +
						 range_chars(c->msgs, c->first_kept, n));
	c->messages_after = kept + 1 > UINT32_MAX ? UINT32_MAX : (uint32_t)(kept + 1);
	/* The job reads the snapshot's strings: it owns it from here on. */
	j->hist = c->hist;
	if ((rc = pc_blocking_submit(c->rt, job_run, job_discard, j, pc_self(ctx))) != 0) {
		j->hist = NULL; /* not taken: still ours */
		goto fail;
	}
	c->hist = NULL;
	c->phase = PH_REWRITE;
	return 0;
fail:
	job_free(j);
	return rc;
}

/* ---- the steps ---- */

static void read_history(pc_ctx_t *ctx, compaction_t *c)
{
	pc_msg_t *m = NULL;
	int rc = pc_store_req_history(c->req.session_key, &m);
	if (rc == 0)
		rc = pc_ask(ctx, pc_store_actor(c->req.store), m, &c->corr);
	if (rc != 0) {
		fail(ctx, c, rc, "could not ask for the history");
		return;
	}
	c->phase = PH_READ;
}

static int start_model(pc_ctx_t *ctx, compaction_t *c)
{
	cJSON *prompt = NULL;
	char *body = NULL;
	int rc = pc_compaction_prompt(c->msgs, c->first_kept, c->req.instructions, &prompt);
	if (rc != 0)
		goto out;
	pc_request_params_t p = {
		.api = c->req.api,
		.model = c->req.model,
		.system_prompt = SYSTEM_PROMPT,
		.messages = prompt,
		.max_tokens = c->req.max_tokens,
		.thinking = PC_THINK_OFF,
	};
	if ((rc = pc_request_body(&p, &body)) != 0)
		goto out;
	pc_model_call_config_t cfg = {
		.api = c->req.api,
		.url = c->req.url,
		.headers = c->req.headers,
		.header_count = c->req.header_count,
		.body = body,
		.body_len = strlen(body),
		.provider = c->req.provider,
		.idle_timeout_ms = (uint32_t)(c->req.idle_timeout_ms > UINT32_MAX ? UINT32_MAX
										 : c->req.idle_timeout_ms),
		.http2_prior_knowledge = c->req.http2_prior_knowledge,
		.deltas = false,
		.tag = c->req.tag,
	};
	if ((rc = pc_model_call_start(c->req.io, &cfg, pc_self(ctx), &c->call)) != 0)
		goto out;
	c->phase = PH_MODEL;
out:
	cJSON_free(body);
	cJSON_Delete(prompt);
	return rc;
}

static void on_history(pc_ctx_t *ctx, compaction_t *c, const pc_msg_t *msg)
{
	if (c->phase != PH_READ || msg->corr != c->corr)
		return; /* not the answer being waited for */
	int rc = load_snapshot(c, msg);
	if (rc != 0) {
		fail(ctx, c, rc, "could not read the history");
		return;
	}
	size_t n = pc_store_history_count(c->hist);
	c->tokens_before = pc_ctx_chars_to_tokens(range_chars(c->msgs, 0, n));
	announce_before(c);
	if (c->conflicts && c->summary && prefix_unchanged(c)) {
		/* Only appended to since: the summary stands, the tail grows. */
		if ((rc = submit_rewrite(ctx, c)) != 0)
			fail(ctx, c, rc, "could not start the rewrite");
		return;
	}
	free(c->summary);
	c->summary = NULL;
	if ((rc = pc_compaction_cut_point(c->msgs, c->req.keep_recent_tokens, &c->first_kept)) != 0) {
		fail(ctx, c, rc, "could not find the cut point");
		return;
	}
	if (c->first_kept == 0) {
		outcome_t o = {0}; /* nothing to summarise */
		finish(ctx, c, &o, NULL);
		return;
	}
	if ((rc = remember_prefix(c)) != 0) {
		fail(ctx, c, rc, "could not start");
		return;
	}
	if (range_chars(c->msgs, 0, c->first_kept) == 0) {
		/* Nothing readable to summarise: no model call for that. */
		bool ok = true;
		c->summary = dup_str(PC_COMPACTION_EMPTY_SUMMARY, &ok);
		rc = ok ? submit_rewrite(ctx, c) : PC_ENOMEM;
		if (rc != 0)
			fail(ctx, c, rc, "could not start the rewrite");
		return;
	}
	if ((rc = start_model(ctx, c)) != 0)
		fail(ctx, c, rc, "could not start the summarising model call");
}

/* The text blocks of an assistant message (JSON), concatenated and
 * trimmed; malloc'd, "" when there are none. */
static int assistant_text(const char *json, char **out)
{
	cJSON *m = json ? cJSON_Parse(json) : NULL;
	size_t len = 0;
	const cJSON *b;
	const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
	cJSON_ArrayForEach(b, content)
	{
		const cJSON *t = cJSON_GetObjectItemCaseSensitive(b, "type");
		const cJSON *s = cJSON_GetObjectItemCaseSensitive(b, "text");
		if (cJSON_IsString(t) && strcmp(t->valuestring, "text") == 0 && cJSON_IsString(s))
			len += strlen(s->valuestring);
	}
	char *text = malloc(len + 1);
	if (!text) {
		cJSON_Delete(m);
		return PC_ENOMEM;
	}
	len = 0;
	cJSON_ArrayForEach(b, content)
	{
		const cJSON *t = cJSON_GetObjectItemCaseSensitive(b, "type");
		const cJSON *s = cJSON_GetObjectItemCaseSensitive(b, "text");
		if (cJSON_IsString(t) && strcmp(t->valuestring, "text") == 0 && cJSON_IsString(s)) {
			size_t l = strlen(s->valuestring);
			memcpy(text + len, s->valuestring, l);
			len += l;
		}
	}
	text[len] = '\0';
	cJSON_Delete(m);
	size_t from = 0;
	while (from < len && (text[from] == ' ' || text[from] == '\n' || text[from] == '\t' || text[from] == '\r'))
		from++;
	while (len > from && (text[len - 1] == ' ' || text[len - 1] == '\n' || text[len - 1] == '\t' ||
			      text[len - 1] == '\r'))
		len--;
	memmove(text, text + from, len - from);
	text[len - from] = '\0';
	*out = text;
	return 0;
}

static void on_model_done(pc_ctx_t *ctx, compaction_t *c, const pc_model_done_msg_t *d)
{
	if (c->phase != PH_MODEL)
		return;
	pc_actor_release(c->call);
	c->call = NULL;
	if (d->result != 0) {
		outcome_t o = {.rc = d->result};
		finish(ctx, c, &o, "summarisation failed: %s", d->error[0] ? d->error : pc_strerror(d->result));
		return;
	}
	int rc = assistant_text(d->message, &c->summary);
	if (rc != 0) {
		fail(ctx, c, rc, "could not read the summary");
		return;
	}
	if (!c->summary[0]) {
		/* Writing an empty summary would lose the history it replaces. */
		outcome_t o = {.rc = PC_EINVAL};
		finish(ctx, c, &o, "summarisation failed: the model returned no text");
		return;
	}
	if ((rc = submit_rewrite(ctx, c)) != 0)
		fail(ctx, c, rc, "could not start the rewrite");
}

static void on_rewritten(pc_ctx_t *ctx, compaction_t *c, const rewritten_msg_t *r)
{
	if (c->phase != PH_REWRITE)
		return;
	outcome_t o = {.rc = r->rc};
	if (r->rc == 0) {
		o.compacted = true; /* committed: an abort that came meanwhile was too late */
		finish(ctx, c, &o, NULL);
		return;
	}
	if (c->stop_cause != STOP_NONE) {
		o.aborted = c->stop_cause == STOP_ABORT;
		o.timed_out = c->stop_cause == STOP_TIMEOUT;
		o.rc = o.aborted ? PC_ESTOPPED : PC_ETIMEDOUT;
		if (o.aborted)
			finish(ctx, c, &o, "aborted (%s)", r->error);
		else
			finish(ctx, c, &o, "compaction timed out (%s)", r->error);
		return;
	}
	if (r->rc == PC_STORE_ECONFLICT && c->conflicts < MAX_CONFLICT_RETRIES) {
		/* Something was appended since the snapshot: read it again. */
		c->conflicts++;
		read_history(ctx, c);
		return;
	}
	finish(ctx, c, &o, "%s", r->error[0] ? r->error : pc_store_strerror(r->rc));
}

/* An abort or the timer: ends the operation now, unless the rewrite is
 * running, whose outcome is then awaited (see the file comment). */
static void on_stop_request(pc_ctx_t *ctx, compaction_t *c, stop_cause_t cause)
{
	if (c->phase == PH_REWRITE) {
		if (c->stop_cause == STOP_NONE)
			c->stop_cause = cause;
		return;
	}
	if (c->call) {
		pc_model_call_abort(c->call); /* its DONE will be a dead letter */
		pc_actor_release(c->call);
		c->call = NULL;
	}
	outcome_t o = {.aborted = cause == STOP_ABORT, .timed_out = cause == STOP_TIMEOUT};
	o.rc = o.aborted ? PC_ESTOPPED : PC_ETIMEDOUT;
	if (o.aborted)
		finish(ctx, c, &o, "aborted");
	else
		finish(ctx, c, &o, "compaction timed out after %llu ms", (unsigned long long)c->req.timeout_ms);
}

static void on_start(pc_ctx_t *ctx, compaction_t *c)
{
	pc_msg_t *t = pc_msg_new(MSG_TIMEOUT, 0);
	int rc = t ? pc_timer_after(pc_self(ctx), c->req.timeout_ms, t, &c->timer) : PC_ENOMEM;
	if (rc != 0) {
		fail(ctx, c, rc, "could not arm the timer");
		return;
	}
	read_history(ctx, c);
}

static int receive(pc_ctx_t *ctx, void *state, pc_msg_t *msg)
{
	compaction_t *c = state;
	if (c->done_sent)
		return 0; /* finished: only the exit is left */
	switch (msg->type) {
	case MSG_START:
		if (c->phase == PH_START)
			on_start(ctx, c);
		break;
	case PC_STORE_MSG_HISTORY:
		on_history(ctx, c, msg);
		break;
	case PC_MSG_MODEL_DONE:
		on_model_done(ctx, c, pc_msg_cdata(msg));
		break;
	case MSG_REWRITTEN:
		on_rewritten(ctx, c, pc_msg_cdata(msg));
		break;
	case MSG_ABORT:
		on_stop_request(ctx, c, STOP_ABORT);
		break;
	case MSG_TIMEOUT:
		on_stop_request(ctx, c, STOP_TIMEOUT);
		break;
	default:
		break;
	}
	return 0;
}

static void compaction_free(compaction_t *c)
{
	drop_snapshot(c);
	free(c->prefix_seqs);
	free(c->summary);
	if (c->headers)
		for (size_t i = 0; i < c->req.header_count; i++)
			free(c->headers[i]);
	free(c->headers);
	free(c->lock_dir);
	free(c->key);
	free(c->run_id);
	free(c->trigger);
	free(c->instructions);
	free(c->url);
	free(c->provider);
	free(c->model);
	pc_actor_release(c->owner);
	if (c->hooks)
		pc_hooks_release(c->hooks);
	free(c);
}

static void stop(pc_ctx_t *ctx, void *state, int reason)
{
	(void)ctx;
	compaction_t *c = state;
	if (!c->done_sent) {
		/* Stopped from outside (pc_actor_stop, shutdown, a link): a
		 * rewrite job still running finishes on its own; its answer
		 * is a dead letter. */
		outcome_t o = {.rc = PC_ESTOPPED, .aborted = true};
		char error[64];
		snprintf(error, sizeof(error), "stopped (exit reason %d)", reason);
		send_done(c, &o, error);
	}
	if (c->timer)
		pc_timer_cancel(c->rt, c->timer); /* drops its reference to us now */
	if (c->call) {
		pc_model_call_abort(c->call);
		pc_actor_release(c->call);
		c->call = NULL;
	}
	compaction_free(c);
}

static const pc_behavior_t compaction_behavior = {
	.name = "compaction",
	.receive = receive,
	.stop = stop,
};

/* Copies the request's strings; the copies are the actor's. */
static int copy_request(compaction_t *c, const pc_compaction_request_t *req)
{
	bool ok = true;
	c->req = *req;
	c->req.lock_dir = c->lock_dir = dup_str(req->lock_dir, &ok);
	c->req.session_key = c->key = dup_str(req->session_key, &ok);
	c->req.run_id = c->run_id = dup_str(req->run_id, &ok);
	c->req.trigger = c->trigger = dup_str(req->trigger, &ok);
	c->req.instructions = c->instructions = dup_str(req->instructions, &ok);
	c->req.url = c->url = dup_str(req->url, &ok);
	c->req.provider = c->provider = dup_str(req->provider, &ok);
	c->req.model = c->model = dup_str(req->model, &ok);
	c->req.lock_opts = NULL;
	c->req.hooks = NULL; /* c->hooks, when held */
	if (req->lock_opts) {
		c->lock_opts = *req->lock_opts;
		c->has_lock_opts = true;
	}
	c->req.headers = NULL;
	if (req->header_count) {
		c->headers = calloc(req->header_count, sizeof(*c->headers));
		if (!c->headers)
			return PC_ENOMEM;
		for (size_t i = 0; i < req->header_count; i++)
			c->headers[i] = dup_str(req->headers[i], &ok);
		c->req.headers = (const char *const *)c->headers;
	}
	if (!c->req.max_tokens)
		c->req.max_tokens = DEFAULT_MAX_TOKENS;
	if (!c->req.keep_recent_tokens)
		c->req.keep_recent_tokens = DEFAULT_KEEP_RECENT_TOKENS;
	if (!c->req.timeout_ms)
		c->req.timeout_ms = DEFAULT_TIMEOUT_MS;
	return ok ? 0 : PC_ENOMEM;
}

int pc_compaction_start(pc_runtime_t *rt, const pc_compaction_request_t *req, pc_actor_t *owner,
			pc_actor_t **out)
{
	if (!rt || !req || !owner || !req->io || !req->store || !req->lock_dir || !req->session_key ||
	    !req->url || !req->model || (req->header_count && !req->headers) || req->max_tokens < 0)
		return PC_EINVAL;
	if (!pc_provider_wire(req->api))
		return PC_EINVAL;
	for (size_t i = 0; i < req->header_count; i++)
		if (!req->headers[i])
			return PC_EINVAL;
	compaction_t *c = calloc(1, sizeof(*c));
	if (!c)
		return PC_ENOMEM;
	c->rt = rt;
	c->owner = pc_actor_retain(owner);
	if (pc_hooks_active(req->hooks, PC_HOOK_BEFORE_COMPACTION, NULL) ||
	    pc_hooks_active(req->hooks, PC_HOOK_AFTER_COMPACTION, NULL)) {
		pc_hooks_retain(req->hooks);
		c->hooks = req->hooks;
	}
	int rc = copy_request(c, req);
	/* the actor owns c once spawned; START is its first message */
	if (rc == 0)
		rc = pc_spawn_start(rt, &compaction_behavior, c, MSG_START, out);
	if (rc != 0)
		compaction_free(c);
	return rc;
}

int pc_compaction_abort(pc_actor_t *compaction)
{
	return compaction ? pc_send_signal(compaction, MSG_ABORT) : PC_EINVAL;
}
