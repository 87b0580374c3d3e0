/*
 * Tools (tool.h): the registry of definitions and the invocation actor.
 *
 * One actor per invocation. It is spawned with a copy of the request and a
 * START message queued, so whatever the caller does next (an abort, a
 * runtime shutdown) finds it already owning everything it needs. Its life:
 *
 *   START -> resolve the tool, parse the arguments, arm the timeout ->
 *     `call` inline                          -> DONE
 *     `call` on the blocking pool -> JOB_DONE -> DONE
 *     `start` -> (TASK_TIMER | TASK_WAKE)* -> on_timer ... pc_tool_task_complete -> DONE
 *   TIMEOUT / ABORT at any point before DONE -> DONE
 *   the actor stopping for any other reason   -> DONE from the stop handler
 *
 * A `start` tool that has not completed when the DONE goes out is told
 * first (on_cancel). send_done is the one place every DONE passes, so that
 * is where it happens, guarded to run once.
 *
 * The one rule everything else serves: the owner gets exactly one DONE.
 * The state is `done` once it has been sent (tool_lifecycle.h), every path
 * that sends checks it, and the stop handler (which runs exactly once,
 * whatever stops the actor) sends it if nothing else did.
 *
 * A blocking job may outlive its actor (timeout, abort, shutdown). It
 * therefore owns copies of everything it reads (the arguments, the
 * environment, the function and its `user`), and its result carries the
 * text inside the message: delivered to a stopped actor it is a dead letter
 * that holds nothing.
 */
#include "tool.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "actors/timer.h"
#include "io/io.h"
#include "runtime/blocking.h"
#include "agents/obs/obs.h"
#include "schema.h"
#include "runtime/clock.h"
#include "tool_lifecycle.h"

enum {
	MSG_START = PC_MSG_TYPE_SYSTEM + 0x2110,
	MSG_ABORT,
	MSG_TIMEOUT,
	MSG_TASK_TIMER, /* task_timer_msg_t */
	MSG_JOB_DONE,   /* job_result_t */
	MSG_TASK_WAKE,  /* u64: the token */
};

#define DEFAULT_SCHEMA "{\"type\":\"object\"}"

/* ---- the registry ------------------------------------------------------ */

struct pc_tool_registry {
	pc_tool_def_t **defs; /* each its own allocation: pc_tool_find's pointers stay valid */
	size_t n;
	size_t cap;
	uint64_t live; /* invocations whose actor has not stopped (atomic): the
			* registry is read-only otherwise, and this count is how its
			* owner learns when it may be freed */
};

int pc_tool_registry_new(pc_tool_registry_t **out)
{
	if (!out)
		return PC_EINVAL;
	*out = calloc(1, sizeof(**out));
	return *out ? 0 : PC_ENOMEM;
}

/* A registered definition and its compiled argument schema; the
 * definition comes first, so a pc_tool_find pointer is the entry's. */
typedef struct entry {
	pc_tool_def_t def;
	pc_schema_t *schema;
} entry_t;

static const pc_schema_t *schema_of(const pc_tool_def_t *d) { return ((const entry_t *)d)->schema; }

static void def_free(pc_tool_def_t *d)
{
	if (!d)
		return;
	pc_schema_free(((entry_t *)d)->schema);
	free((char *)d->name);
	free((char *)d->description);
	free((char *)d->parameters);
	free(d);
}

void pc_tool_registry_free(pc_tool_registry_t *r)
{
	if (!r)
		return;
	for (size_t i = 0; i < r->n; i++) {
		if (r->defs[i]->free_user)
			r->defs[i]->free_user(r->defs[i]->user);
		def_free(r->defs[i]);
	}
	free(r->defs);
	free(r);
}

static bool valid_name(const char *name)
{
	size_t n = 0;
	if (!name)
		return false;
	for (; name[n]; n++) {
		char c = name[n];
		bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
			  c == '-';
		if (!ok || n >= PC_TOOL_NAME_MAX)
			return false;
	}
	return n > 0;
}

int pc_tool_register(pc_tool_registry_t *r, const pc_tool_def_t *def)
{
	if (!r || !def || !valid_name(def->name))
		return PC_EINVAL;
	/* Exactly one way to run; the blocking pool only runs `call`; only a
	 * task can be cancelled. */
	if ((def->call != NULL) == (def->start != NULL) || (def->start && def->blocking) ||
	    (def->call && def->on_cancel))
		return PC_EINVAL;
	if (pc_tool_find(r, def->name))
		return PC_EEXIST;
	/* the schema (an object: providers want one) is compiled once; every
	 * call is validated against it */
	const char *params = def->parameters ? def->parameters : DEFAULT_SCHEMA;
	if (params[strspn(params, " \t\r\n")] != '{')
		return PC_EINVAL;
	pc_schema_t *schema = NULL;
	int rc = pc_schema_compile_text(params, &schema, NULL, 0);
	if (rc != 0)
		return rc == PC_ENOMEM ? PC_ENOMEM : PC_EINVAL;
	entry_t *e = calloc(1, sizeof(*e));
	if (!e) {
		pc_schema_free(schema);
		return PC_ENOMEM;
	}
	rc = PC_ENOMEM;
	e->schema = schema;
	pc_tool_def_t *d = &e->def;
	*d = *def;
	d->name = strdup(def->name);
	d->description = strdup(def->description ? def->description : "");
	d->parameters = strdup(def->parameters ? def->parameters : DEFAULT_SCHEMA);
	if (!d->name || !d->description || !d->parameters)
		goto out;
	if (PC__GROW(r->defs, r->cap, r->n + 1, 8))
		goto out;
	r->defs[r->n++] = d;
	d = NULL;
	rc = 0;
out:
	def_free(d);
	return rc;
}

const pc_tool_def_t *pc_tool_find(const pc_tool_registry_t *r, const char *name)
{
	if (!r || !name)
		return NULL;
	for (size_t i = 0; i < r->n; i++)
		if (strcmp(r->defs[i]->name, name) == 0)
			return r->defs[i];
	return NULL;
}

uint64_t pc_tool_registry_live(const pc_tool_registry_t *r)
{
	return r ? __atomic_load_n(&r->live, __ATOMIC_ACQUIRE) : 0;
}

size_t pc_tool_count(const pc_tool_registry_t *r)
{
	return r ? r->n : 0;
}

static bool allowed(const char *name, const char *const *allow, size_t n)
{
	if (!allow)
		return true;
	for (size_t i = 0; i < n; i++)
		if (allow[i] && strcmp(allow[i], name) == 0)
			return true;
	return false;
}

int pc_tool_schemas(const pc_tool_registry_t *r, const char *const *allow, size_t n, cJSON **out)
{
	if (!r || !out)
		return PC_EINVAL;
	int rc = PC_ENOMEM;
	cJSON *arr = cJSON_CreateArray();
	if (!arr)
		goto out;
	for (size_t i = 0; i < r->n; i++) {
		const pc_tool_def_t *d = r->defs[i];
		if (!allowed(d->name, allow, n))
			continue;
		cJSON *o = cJSON_CreateObject();
		if (!o)
			goto out;
		cJSON_AddItemToArray(arr, o);
		/* Registration checked that the schema parses, so a NULL here
		 * can only be memory. */
		cJSON *params = cJSON_Parse(d->parameters);
		if (!params)
			goto out;
		if (!cJSON_AddStringToObject(o, "name", d->name) ||
		    !cJSON_AddStringToObject(o, "description", d->description)) {
			cJSON_Delete(params);
			goto out;
		}
		cJSON_AddItemToObject(o, "parameters", params);
		if (!cJSON_GetObjectItemCaseSensitive(o, "parameters")) {
			cJSON_Delete(params);
			goto out;
		}
	}
	*out = arr;
	arr = NULL;
	rc = 0;
out:
	cJSON_Delete(arr);
	return rc;
}

const char *pc_tool_status_name(pc_tool_status_t s)
{
	switch (s) {
	case PC_TOOL_OK: return "ok";
	case PC_TOOL_ERROR: return "error";
	case PC_TOOL_INVALID: return "invalid";
	case PC_TOOL_TIMEOUT: return "timeout";
	case PC_TOOL_ABORTED: return "aborted";
	case PC_TOOL_CRASHED: return "crashed";
	default: return "unknown";
	}
}

/* ---- small helpers ------------------------------------------------------- */

/* Copies `n` strings (NULL stays NULL) into one block the caller frees. */
static char *pack(const char *const *src, const char **dst, size_t n)
{
	size_t total = 1;
	for (size_t i = 0; i < n; i++)
		total += src[i] ? strlen(src[i]) + 1 : 0;
	char *block = malloc(total);
	if (!block)
		return NULL;
	char *p = block;
	for (size_t i = 0; i < n; i++) {
		dst[i] = NULL;
		if (!src[i])
			continue;
		size_t l = strlen(src[i]) + 1;
		memcpy(p, src[i], l);
		dst[i] = p;
		p += l;
	}
	*p = '\0';
	return block;
}

/* ---- the blocking job ---------------------------------------------------- */

typedef struct job {
	pc_tool_call_fn call;
	void *user;
	cJSON *args;
	pc_tool_env_t env;
	char *strings;
} job_t;

typedef struct job_result {
	int rc;
	bool is_error;
	bool terminate;
	bool has_text; /* false: the tool gave no text */
	char text[];
} job_result_t;

static void job_free(void *arg)
{
	job_t *j = arg;
	cJSON_Delete(j->args);
	free(j->strings);
	free(j);
}

static pc_msg_t *job_run(void *arg)
{
	job_t *j = arg;
	pc_tool_output_t out = {0};
	int rc = j->call(j->user, j->args, &j->env, &out);
	size_t tl = out.text ? strlen(out.text) : 0;
	pc_msg_t *m = pc_msg_new(MSG_JOB_DONE, sizeof(job_result_t) + tl + 1);
	if (m) {
		job_result_t *res = pc_msg_data(m);
		res->rc = rc;
		res->is_error = out.is_error;
		res->terminate = out.terminate;
		res->has_text = out.text != NULL;
		if (tl)
			memcpy(res->text, out.text, tl);
		res->text[tl] = '\0';
	} else if ((m = pc_msg_new(MSG_JOB_DONE, sizeof(job_result_t) + 1))) {
		/* The text did not fit in memory: say so rather than go quiet. */
		job_result_t *res = pc_msg_data(m);
		*res = (job_result_t){.rc = PC_ENOMEM};
		res->text[0] = '\0';
	}
	free(out.text);
	job_free(j);
	return m; /* NULL only when memory is gone: the timeout then ends it */
}

static job_t *job_new(pc_tool_call_fn call, void *user, const cJSON *args, const pc_tool_env_t *env)
{
	job_t *j = calloc(1, sizeof(*j));
	if (!j)
		return NULL;
	j->call = call;
	j->user = user;
	j->args = cJSON_Duplicate(args, true);
	const char *src[4] = {env->workspace, env->session_key, env->run_id, env->tool_call_id};
	const char *dst[4];
	j->strings = pack(src, dst, 4);
	if (!j->args || !j->strings) {
		job_free(j);
		return NULL;
	}
	j->env = (pc_tool_env_t){dst[0], dst[1], dst[2], dst[3]};
	return j;
}

/* ---- the invocation -------------------------------------------------------- */

typedef struct task_timer {
	uint64_t seq;
	pc_timer_t id;
} task_timer_t;

typedef struct task_timer_msg {
	uint64_t seq;
	uint64_t token;
} task_timer_msg_t;

typedef struct invocation invocation_t;

struct pc_tool_task {
	invocation_t *inv;
	pc_ctx_t *ctx;  /* set only while one of the tool's callbacks runs (not on_cancel) */
	void *data;     /* the tool's */
	bool started;   /* `start` was called */
	bool completed; /* the tool called pc_tool_task_complete */
	bool cancelled; /* on_cancel was called */
};

struct invocation {
	pc_runtime_t *rt;
	const pc_tool_registry_t *reg;
	const pc_tool_def_t *def; /* NULL: no such tool (reported at START) */
	pc_actor_t *owner;

	char *strings; /* the request's strings, below, in one block */
	const char *name;
	const char *tool_call_id;
	const char *arguments;
	pc_tool_env_t env;
	uint64_t tag;
	uint64_t timeout_ms;

	cJSON *args;
	pc_tool_task_t task;
	pc_timer_t timeout_timer;
	task_timer_t *timers; /* task timers armed and not yet handled */
	size_t ntimers;
	size_t cap_timers;
	uint64_t next_seq;

	uint64_t t0_ns;
	int crash_code; /* the last code a handler failed with */
	pc_tool_lc_t state; /* changed only by inv_set (tool_lifecycle.h) */
	pc_tool_status_t lost_status; /* lost: what the handler decided */
	/* the lifecycle's logger, counter and trace (pc_tool_invoke_t) */
	pc_log_t *log;
	pc_metric_t *illegal;
	bool trace;
	const char *trace_id;
};

/* The one place the invocation's state changes. A transition the table
 * does not allow is refused (the state stays), counted and logged; an
 * allowed one is traced when the owner asked. */
static void inv_set(invocation_t *inv, pc_tool_lc_t to, const char *why)
{
	pc_tool_lc_t from = inv->state;
	if (!pc_tool_lc_legal(from, to)) {
		(void)pc_metric_inc(inv->illegal);
		(void)pc_log_kv(inv->log, PC_LOG_WARN, "illegal tool transition", PC_LF_STR("tool", inv->name),
				PC_LF_STR("toolCallId", inv->tool_call_id), PC_LF_STR("from", pc_tool_lc_name(from)),
				PC_LF_STR("to", pc_tool_lc_name(to)), PC_LF_STR("why", why));
		return;
	}
	inv->state = to;
	if (inv->trace)
		pc_trace_transition(inv->log, "tool", inv->trace_id, pc_tool_lc_name(from), pc_tool_lc_name(to), why);
}

/* The DONE is sent: nothing of the invocation is left to do. */
static bool is_done(const invocation_t *inv) { return inv->state == PC_TOOL_LC_DONE; }

static size_t max_output(const invocation_t *inv)
{
	return inv->def && inv->def->max_output ? inv->def->max_output : PC_TOOL_DEFAULT_MAX_OUTPUT;
}

/* The largest prefix length <= max that does not split a UTF-8 sequence:
 * step back over continuation bytes from the first byte left out. */
static size_t utf8_floor(const char *s, size_t max)
{
	size_t k = max;
	while (k > 0 && ((unsigned char)s[k] & 0xC0u) == 0x80u)
		k--;
	return k;
}

static void cancel_timers(invocation_t *inv)
{
	if (inv->timeout_timer) {
		pc_timer_cancel(inv->rt, inv->timeout_timer);
		inv->timeout_timer = 0;
	}
	for (size_t i = 0; i < inv->ntimers; i++)
		pc_timer_cancel(inv->rt, inv->timers[i].id);
	inv->ntimers = 0;
}

/* Tells a started, unfinished task that its invocation is ending (once). */
static void cancel_task(invocation_t *inv)
{
	pc_tool_task_t *t = &inv->task;
	if (!t->started || t->completed || t->cancelled)
		return;
	t->cancelled = true;
	if (inv->def->on_cancel)
		inv->def->on_cancel(inv->def->user, t);
}

/*
 * Sends the DONE (once). `text` is borrowed; NULL reads as "". What is not
 * UTF-8 in it becomes U+FFFD (io/utf8.h): every tool's result passes here,
 * and one stray byte in a transcript makes a provider refuse the session's
 * every later request. Then it is cut to max_output at a UTF-8 boundary,
 * with a marker saying how much went. On success the invocation is over:
 * its timers are cancelled, and a handler caller ends the actor with
 * pc_exit.
 */
static int send_done(invocation_t *inv, pc_tool_status_t st, bool is_error, bool terminate, const char *text)
{
	if (is_done(inv))
		return PC_ESTATE;
	cancel_task(inv);
	if (!text)
		text = "";
	size_t len = strlen(text);
	char *clean = NULL;
	if (!pc_utf8_valid(text, len)) {
		clean = pc_utf8_scrub(text, len, &len);
		if (!clean)
			return PC_ENOMEM;
		text = clean;
	}
	size_t keep = len;
	char marker[64] = "";
	if (len > max_output(inv)) {
		keep = utf8_floor(text, max_output(inv));
		snprintf(marker, sizeof(marker), "\n\u2026(truncated %zu bytes)", len - keep);
	}
	size_t ml = strlen(marker);
	size_t il = strlen(inv->tool_call_id);
	size_t nl = strlen(inv->name);
	pc_msg_t *m = pc_msg_new(PC_MSG_TOOL_DONE, sizeof(pc_tool_done_msg_t) + il + nl + keep + ml + 3);
	if (!m) {
		free(clean);
		return PC_ENOMEM;
	}
	pc_tool_done_msg_t *d = pc_msg_data(m);
	memset(d, 0, sizeof(*d));
	d->tag = inv->tag;
	d->status = st;
	d->is_error = is_error || st != PC_TOOL_OK;
	d->terminate = terminate;
	d->mutating = inv->def ? inv->def->mutating : false;
	d->duration_us = (pc__clock_mono_ns() - inv->t0_ns) / 1000u;
	char *p = d->buf;
	memcpy(p, inv->tool_call_id, il + 1);
	d->tool_call_id = p;
	p += il + 1;
	memcpy(p, inv->name, nl + 1);
	d->name = p;
	p += nl + 1;
	memcpy(p, text, keep);
	memcpy(p + keep, marker, ml);
	p[keep + ml] = '\0';
	d->text = p;
	d->text_len = keep + ml;
	free(clean);
	/* A stopped owner frees it as a dead letter: still "sent". */
	pc_send(inv->owner, m);
	inv_set(inv, PC_TOOL_LC_DONE, pc_tool_status_name(st));
	cancel_timers(inv);
	return 0;
}

/* Ends the invocation from a handler. A DONE that cannot be built (no
 * memory) is left to the stop handler, which tries again with the same
 * status and a fixed text. */
static void finish(pc_ctx_t *ctx, invocation_t *inv, pc_tool_status_t st, bool is_error, bool terminate,
		   const char *text)
{
	if (send_done(inv, st, is_error, terminate, text) != 0 && !is_done(inv)) {
		inv->lost_status = st;
		inv_set(inv, PC_TOOL_LC_LOST, pc_tool_status_name(st));
	}
	pc_exit(ctx, PC_EXIT_NORMAL);
}

static void finish_fmt(pc_ctx_t *ctx, invocation_t *inv, pc_tool_status_t st, const char *f, ...)
	__attribute__((format(printf, 4, 5)));
static void finish_fmt(pc_ctx_t *ctx, invocation_t *inv, pc_tool_status_t st, const char *f, ...)
{
	va_list ap;
	va_start(ap, f);
	char *text = NULL;
	if (vasprintf(&text, f, ap) < 0)
		text = NULL;
	va_end(ap);
	finish(ctx, inv, st, true, false, text ? text : "Tool failed: out of memory");
	free(text);
}

/* What a tool's function returned, as the DONE. `out->text` is taken. */
static void finish_output(pc_ctx_t *ctx, invocation_t *inv, int rc, pc_tool_output_t *out)
{
	if (rc < 0 && !out->text)
		finish_fmt(ctx, inv, PC_TOOL_ERROR, "Tool %s failed: %s", inv->name, pc_strerror(rc));
	else if (rc < 0 || out->is_error)
		finish(ctx, inv, PC_TOOL_ERROR, true, out->terminate, out->text);
	else
		finish(ctx, inv, PC_TOOL_OK, false, out->terminate, out->text);
	free(out->text);
	out->text = NULL;
}

static void finish_not_found(pc_ctx_t *ctx, invocation_t *inv)
{
#define NOT_FOUND_LEAD "Tool \"%s\" not found. Available tools: "
	size_t total = sizeof(NOT_FOUND_LEAD) + strlen(inv->name) + sizeof("none");
	for (size_t i = 0; i < inv->reg->n; i++)
		total += strlen(inv->reg->defs[i]->name) + 2;
	char *text = malloc(total);
	if (!text) {
		finish(ctx, inv, PC_TOOL_INVALID, true, false, "Tool not found");
		return;
	}
	int n = snprintf(text, total, NOT_FOUND_LEAD, inv->name);
	char *p = text + (n > 0 ? (size_t)n : 0);
	/* The list is copied by hand: its length is already counted above. */
	for (size_t i = 0; i < inv->reg->n; i++) {
		const char *name = inv->reg->defs[i]->name;
		size_t l = strlen(name);
		if (i) {
			memcpy(p, ", ", 2);
			p += 2;
		}
		memcpy(p, name, l);
		p += l;
	}
	if (inv->reg->n == 0) {
		memcpy(p, "none", 4);
		p += 4;
	}
	*p = '\0';
	finish(ctx, inv, PC_TOOL_INVALID, true, false, text);
	free(text);
}

/* Parses the arguments into inv->args; false (DONE sent) if they are not a
 * JSON object. Empty arguments mean no arguments: models send "" for tools
 * that take none. */
/* True when a JSON text holds a string with an escaped NUL (\u0000):
 * cJSON ends such a string there, so the tool would read less than the
 * model wrote (a path cut short, say). */
static bool has_nul_escape(const char *s)
{
	bool in_string = false;
	for (; *s; s++) {
		if (*s == '"') {
			in_string = !in_string;
		} else if (in_string && *s == '\\') {
			if (s[1] == 'u' && !strncmp(s + 2, "0000", 4))
				return true;
			if (s[1])
				s++; /* the escaped character */
		}
	}
	return false;
}

static bool parse_args(pc_ctx_t *ctx, invocation_t *inv)
{
	const char *a = inv->arguments ? inv->arguments : "";
	a += strspn(a, " \t\r\n");
	if (!*a)
		a = "{}";
	if (has_nul_escape(a)) {
		finish_fmt(ctx, inv, PC_TOOL_INVALID,
			   "Invalid arguments for tool %s: a string holds a NUL character (\\u0000)", inv->name);
		return false;
	}
	inv->args = cJSON_Parse(a);
	if (cJSON_IsObject(inv->args))
		return true;
	const char *why = inv->args ? "" : " (the text is not valid JSON)";
	finish_fmt(ctx, inv, PC_TOOL_INVALID, "Invalid arguments for tool %s: expected a JSON object%s", inv->name,
		   why);
	return false;
}

/* Against the tool's schema: an invalid call is an error result naming
 * what is wrong, and the tool never sees it. */
static bool valid_args(pc_ctx_t *ctx, invocation_t *inv)
{
	char why[256];
	if (pc_schema_validate(schema_of(inv->def), inv->args, why, sizeof(why)) == 0)
		return true;
	finish_fmt(ctx, inv, PC_TOOL_INVALID, "Invalid arguments for tool %s: %s", inv->name, why);
	return false;
}

static int arm_timeout(pc_ctx_t *ctx, invocation_t *inv)
{
	pc_msg_t *m = pc_msg_new(MSG_TIMEOUT, 0);
	if (!m)
		return PC_ENOMEM;
	return pc_timer_after(pc_self(ctx), inv->timeout_ms, m, &inv->timeout_timer);
}

static int on_start(pc_ctx_t *ctx, invocation_t *inv)
{
	const pc_tool_def_t *def = inv->def;
	if (!def) {
		finish_not_found(ctx, inv);
		return 0;
	}
	if (!parse_args(ctx, inv) || !valid_args(ctx, inv))
		return 0;
	int rc = arm_timeout(ctx, inv);
	if (rc != 0)
		return rc;
	if (def->call && !def->blocking) {
		inv_set(inv, PC_TOOL_LC_CALLING, "call");
		pc_tool_output_t out = {0};
		rc = def->call(def->user, inv->args, &inv->env, &out);
		finish_output(ctx, inv, rc, &out);
		return 0;
	}
	if (def->call) {
		job_t *j = job_new(def->call, def->user, inv->args, &inv->env);
		rc = j ? pc_blocking_submit(inv->rt, job_run, job_free, j, pc_self(ctx)) : PC_ENOMEM;
		if (rc == 0)
			inv_set(inv, PC_TOOL_LC_JOB, "blocking");
		if (rc != 0) {
			if (j)
				job_free(j);
			finish_fmt(ctx, inv, PC_TOOL_ERROR, "Tool %s failed: could not be started (%s)", inv->name,
				   pc_strerror(rc));
		}
		return 0;
	}
	inv->task.ctx = ctx;
	inv->task.started = true;
	inv_set(inv, PC_TOOL_LC_TASK, "start");
	rc = def->start(def->user, &inv->task, inv->args, &inv->env);
	inv->task.ctx = NULL;
	if (rc < 0 && !is_done(inv))
		finish_fmt(ctx, inv, PC_TOOL_ERROR, "Tool %s failed: %s", inv->name, pc_strerror(rc));
	return 0;
}

static int call_on_timer(pc_ctx_t *ctx, invocation_t *inv, uint64_t token)
{
	inv->task.ctx = ctx;
	int rc = inv->def->on_timer(inv->def->user, &inv->task, token);
	inv->task.ctx = NULL;
	/* A failing on_timer fails the invocation: the actor stops with the
	 * code and the stop handler reports the crash. */
	return is_done(inv) ? 0 : rc;
}

static int on_task_timer(pc_ctx_t *ctx, invocation_t *inv, const task_timer_msg_t *tm)
{
	for (size_t i = 0; i < inv->ntimers; i++) {
		if (inv->timers[i].seq == tm->seq) {
			inv->timers[i] = inv->timers[--inv->ntimers];
			break;
		}
	}
	return call_on_timer(ctx, inv, tm->token);
}

static void on_job_done(pc_ctx_t *ctx, invocation_t *inv, const job_result_t *res)
{
	pc_tool_output_t out = {
		.text = res->has_text ? strdup(res->text) : NULL,
		.is_error = res->is_error,
		.terminate = res->terminate,
	};
	if (res->has_text && !out.text) {
		finish(ctx, inv, PC_TOOL_ERROR, true, false, "Tool failed: out of memory");
		return;
	}
	finish_output(ctx, inv, res->rc, &out);
}

static int receive(pc_ctx_t *ctx, void *state, pc_msg_t *msg)
{
	invocation_t *inv = state;
	int rc = 0;
	if (is_done(inv))
		return 0; /* anything after the DONE is stale */
	switch (msg->type) {
	case MSG_START:
		rc = on_start(ctx, inv);
		break;
	case MSG_ABORT:
		finish_fmt(ctx, inv, PC_TOOL_ABORTED, "Tool %s was aborted", inv->name);
		break;
	case MSG_TIMEOUT:
		inv->timeout_timer = 0; /* handled: nothing left to cancel */
		finish_fmt(ctx, inv, PC_TOOL_TIMEOUT, "Tool %s timed out after %llu ms", inv->name,
			   (unsigned long long)inv->timeout_ms);
		break;
	case MSG_TASK_TIMER:
		if (inv->def && inv->def->on_timer && msg->size >= sizeof(task_timer_msg_t))
			rc = on_task_timer(ctx, inv, pc_msg_cdata(msg));
		break;
	case MSG_JOB_DONE:
		if (msg->size >= sizeof(job_result_t))
			on_job_done(ctx, inv, pc_msg_cdata(msg));
		break;
	case MSG_TASK_WAKE:
		/* Only a started task has anyone to wake. */
		if (inv->task.started && inv->def->on_timer && msg->size >= sizeof(uint64_t))
			rc = call_on_timer(ctx, inv, pc_msg_u64(msg));
		break;
	default:
		break;
	}
	if (rc < 0)
		inv->crash_code = rc;
	return rc;
}

static void invocation_free(invocation_t *inv)
{
	cancel_timers(inv);
	cJSON_Delete(inv->args);
	pc_actor_release(inv->owner);
	free(inv->timers);
	free(inv->strings);
	free(inv);
}

static const char *reason_name(int reason)
{
	switch (reason) {
	case PC_EXIT_KILLED: return "killed";
	case PC_EXIT_LINKED: return "a linked actor failed";
	case PC_EXIT_SHUTDOWN: return "shutdown";
	default: return "stopped";
	}
}

/* Runs exactly once, whatever stopped the actor: the last chance to keep
 * the promise of one DONE. */
static void stop(pc_ctx_t *ctx, void *state, int reason)
{
	(void)ctx;
	invocation_t *inv = state;
	if (!is_done(inv)) {
		char text[256];
		pc_tool_status_t st = PC_TOOL_ABORTED;
		if (reason == PC_EXIT_ERROR || reason == PC_EXIT_LINKED) {
			st = PC_TOOL_CRASHED;
			snprintf(text, sizeof(text), "Tool %s failed: the invocation crashed (%s)", inv->name,
				 reason == PC_EXIT_ERROR ? pc_strerror(inv->crash_code) : reason_name(reason));
		} else {
			snprintf(text, sizeof(text), "Tool %s was stopped before it finished (%s)", inv->name,
				 reason_name(reason));
		}
		if (inv->state == PC_TOOL_LC_LOST) {
			/* A handler decided but could not build the DONE. */
			st = inv->lost_status;
			snprintf(text, sizeof(text), "Tool %s: the result was lost (out of memory)", inv->name);
		}
		if (send_done(inv, st, true, false, text) != 0)
			send_done(inv, st, true, false, ""); /* the bare status still ends the wait */
	}
	pc_tool_registry_t *reg = (pc_tool_registry_t *)inv->reg;
	invocation_free(inv);
	__atomic_sub_fetch(&reg->live, 1, __ATOMIC_RELEASE);
}

static const pc_behavior_t invocation_behavior = {
	.name = "tool",
	.receive = receive,
	.stop = stop,
};

int pc_tool_invoke_start(pc_runtime_t *rt, const pc_tool_registry_t *r, const pc_tool_invoke_t *req,
			 pc_actor_t *owner, pc_actor_t **out)
{
	if (!rt || !r || !req || !req->name || !owner)
		return PC_EINVAL;
	int rc = PC_ENOMEM;
	invocation_t *inv = calloc(1, sizeof(*inv));
	if (!inv)
		goto fail;
	const char *call_id = req->tool_call_id ? req->tool_call_id : "";
	const char *src[8] = {req->name, call_id, req->arguments, req->env.workspace, req->env.session_key,
			      req->env.run_id, req->env.tool_call_id ? req->env.tool_call_id : call_id,
			      req->trace_id ? req->trace_id : call_id};
	const char *dst[8];
	if (!(inv->strings = pack(src, dst, 8)))
		goto fail;
	inv->trace_id = dst[7];
	inv->log = req->log;
	inv->illegal = req->illegal;
	inv->trace = req->trace;
	inv->name = dst[0];
	inv->tool_call_id = dst[1];
	inv->arguments = dst[2];
	inv->env = (pc_tool_env_t){dst[3], dst[4], dst[5], dst[6]};
	inv->rt = rt;
	inv->reg = r;
	inv->def = pc_tool_find(r, req->name);
	inv->tag = req->tag;
	inv->timeout_ms = req->timeout_ms               ? req->timeout_ms
			  : inv->def && inv->def->timeout_ms ? inv->def->timeout_ms
							     : PC_TOOL_DEFAULT_TIMEOUT_MS;
	inv->task.inv = inv;
	inv->t0_ns = pc__clock_mono_ns();
	inv->owner = pc_actor_retain(owner);
	__atomic_add_fetch(&((pc_tool_registry_t *)r)->live, 1, __ATOMIC_RELAXED);
	/* The actor owns inv once spawned. START is queued before the caller
	 * can hold the handle, so it is handled before any abort. */
	if ((rc = pc_spawn_start(rt, &invocation_behavior, inv, MSG_START, out)) != 0) {
		__atomic_sub_fetch(&((pc_tool_registry_t *)r)->live, 1, __ATOMIC_RELEASE);
		goto fail;
	}
	return 0;
fail:
	if (inv)
		invocation_free(inv);
	return rc;
}

int pc_tool_abort(pc_actor_t *invocation)
{
	return invocation ? pc_send_signal(invocation, MSG_ABORT) : PC_EINVAL;
}

/* ---- tasks ---------------------------------------------------------------- */

int pc_tool_task_after(pc_tool_task_t *t, uint64_t ms, uint64_t token)
{
	if (!t || !t->inv->def || !t->inv->def->on_timer)
		return PC_EINVAL;
	invocation_t *inv = t->inv;
	if (!t->ctx || is_done(inv))
		return PC_ESTATE;
	if (PC__GROW(inv->timers, inv->cap_timers, inv->ntimers + 1, 4))
		return PC_ENOMEM;
	pc_msg_t *m = pc_msg_new(MSG_TASK_TIMER, sizeof(task_timer_msg_t));
	if (!m)
		return PC_ENOMEM;
	task_timer_msg_t *tm = pc_msg_data(m);
	tm->seq = ++inv->next_seq;
	tm->token = token;
	pc_timer_t id = 0;
	int rc = pc_timer_after(pc_self(t->ctx), ms, m, &id);
	if (rc == 0)
		inv->timers[inv->ntimers++] = (task_timer_t){inv->next_seq, id};
	return rc;
}

int pc_tool_task_complete(pc_tool_task_t *t, pc_tool_output_t *out)
{
	int rc = 0;
	if (!t || !out) {
		rc = PC_EINVAL;
		goto out;
	}
	if (!t->ctx || is_done(t->inv)) {
		rc = PC_ESTATE;
		goto out;
	}
	t->completed = true;
	finish_output(t->ctx, t->inv, 0, out);
out:
	if (out) {
		free(out->text);
		out->text = NULL;
	}
	return rc;
}

void pc_tool_task_set_data(pc_tool_task_t *t, void *data)
{
	if (t)
		t->data = data;
}

void *pc_tool_task_data(const pc_tool_task_t *t)
{
	return t ? t->data : NULL;
}

int pc_tool_task_waker(pc_tool_task_t *t, pc_actor_t **out)
{
	if (!t || !out || !t->inv->def || !t->inv->def->on_timer)
		return PC_EINVAL;
	if (!t->ctx || is_done(t->inv))
		return PC_ESTATE;
	*out = pc_actor_retain(pc_self(t->ctx));
	return 0;
}

int pc_tool_wake(pc_actor_t *invocation, uint64_t token)
{
	return invocation ? pc_send_u64(invocation, MSG_TASK_WAKE, token) : PC_EINVAL;
}
