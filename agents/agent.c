/*
 * The agent host: wires the lane, the run registry and the session
 * directory together, starts the embedded model server when configured, and offers
 * the API of agent.h.
 *
 * The session directory maps a session key to its actor. Every message to
 * a session goes through it and is counted (`inflight`) under the shard's
 * lock; an idle session may retire only when nothing is on its way to it,
 * so a message can never be sent to a session that has just decided to
 * stop (it would be lost as a dead letter).
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>

#include "actors/hash.h"
#include "actors/timer.h"
#include "io/buf.h"
#include "io/utf8.h"
#include "runtime/blocking.h"
#include "agent_internal.h"
#include "session/lease.h"
#include "session/recovery.h"
#include "agents/tools/exec_tool.h"
#include "agents/tools/fs_tools.h"
#include "session/diagnostics.h"

/* The embedded mock's demo: every run calls the clock tool once, then
 * answers with the echo of the user's message. */
static const char DEMO_SCENARIO[] =
	"{\"steps\":[{\"kind\":\"tool_calls\",\"text\":\"Let me check the time.\","
	"\"tool_calls\":[{\"name\":\"clock\",\"arguments\":{}}]},{\"kind\":\"text\"}],"
	"\"then\":\"default\"}";

/* Workspace files whose text joins the system prompt (§2.1 step 5). */
static const char *const CONTEXT_FILES[] = {"AGENTS.md", "SOUL.md", "TOOLS.md", "IDENTITY.md", "USER.md",
					    "MEMORY.md"};
#define CONTEXT_FILE_MAX_DEFAULT 20000u
#define CONTEXT_TOTAL_MAX_DEFAULT 150000u

typedef struct pc_session_slot {
	pc_actor_t *actor;      /* NULL when retired */
	pc_event_hub_t *hub;
	uint64_t inflight;      /* messages sent through the directory, not yet handled */
	int64_t idle_since_ms;  /* runtime clock; 0 while busy */
	bool told;              /* the reaper sent IDLE for this idle period */
	cJSON *transcript;      /* kept between runs (pc__transcript_keep) */
	struct pc_session_slot *next;
	char *key; /* owned; exact size (keys are short, the limit is not) */
} pc_session_slot_t;

enum { REAPER_TICK = PC_MSG_TYPE_SYSTEM + 0x2600, LOCK_TICK };

pc__loop_box_t *pc__loop_box_new(const pc_config_t *cfg)
{
	const pc_loop_detection_config_t *l = &cfg->agent.loop_detection;
	if (!l->enabled)
		return NULL;
	pc_loop_config_t lc;
	pc_loop_config_default(&lc);
	lc.enabled = true;
	lc.history_size = l->history_size;
	lc.warning_threshold = l->warning_threshold;
	lc.critical_threshold = l->critical_threshold;
	lc.global_threshold = l->global_threshold;
	lc.generic_repeat = l->generic_repeat;
	lc.known_poll_no_progress = l->known_poll_no_progress;
	lc.ping_pong = l->ping_pong;
	pc_loop_config_normalize(&lc);
	pc__loop_box_t *b = calloc(1, sizeof(*b));
	if (!b || pc_loop_history_new(&lc, &b->h) != 0) {
		free(b);
		return NULL;
	}
	b->refs = 1;
	return b;
}

pc__loop_box_t *pc__loop_box_retain(pc__loop_box_t *b)
{
	if (b)
		__atomic_add_fetch(&b->refs, 1, __ATOMIC_RELAXED);
	return b;
}

void pc__loop_box_release(pc__loop_box_t *b)
{
	if (b && __atomic_sub_fetch(&b->refs, 1, __ATOMIC_ACQ_REL) == 0) {
		pc_loop_history_free(b->h);
		free(b);
	}
}

pc_msg_t *pc__text_msg(uint32_t type, const char *text)
{
	size_t n = strlen(text ? text : "") + 1;
	pc_msg_t *m = pc_msg_new(type, n);
	if (m)
		memcpy(pc_msg_data(m), text ? text : "", n);
	return m;
}

void pc__agent_run_id(pc_agent_t *a, char out[PC_RUN_ID_MAX + 1])
{
	uint64_t n = __atomic_add_fetch(&a->next_id, 1, __ATOMIC_RELAXED);
	snprintf(out, PC_RUN_ID_MAX + 1, "run-%s-%llx", a->id_prefix, (unsigned long long)n);
}

const char *pc_agent_disposition_name(pc_agent_disposition_t d)
{
	switch (d) {
	case PC_AGENT_STARTED: return "started";
	case PC_AGENT_QUEUED: return "queued";
	case PC_AGENT_STEERED: return "steered";
	case PC_AGENT_DUPLICATE: return "duplicate";
	case PC_AGENT_DROPPED: return "dropped";
	}
	return "unknown";
}

const char *pc_agent_wait_status_name(pc_agent_wait_status_t s)
{
	switch (s) {
	case PC_AGENT_WAIT_OK: return "ok";
	case PC_AGENT_WAIT_ERROR: return "error";
	case PC_AGENT_WAIT_TIMEOUT: return "timeout";
	}
	return "unknown";
}

/* ---- the directory ---- */

static int key_ok(const char *key)
{
	size_t n = strlen(key);
	if (n == 0 || n > PC__KEY_MAX)
		return PC_EINVAL;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)key[i] < 0x20 || key[i] == 0x7f)
			return PC_EINVAL;
	return pc_utf8_valid(key, n) ? 0 : PC_EINVAL;
}

/* Whether `s` (NULL: absent) is text a session can hold: a provider
 * refuses a request with a byte that is not UTF-8, and then every later
 * one of the session, since the transcript keeps it. */
static bool text_ok(const char *s)
{
	return !s || pc_utf8_valid(s, strlen(s));
}

/* The slot of `key` in its (locked) shard, created when `create`. */
static pc_session_slot_t *slot_find(pc_agent_t *a, size_t shard, const char *key, uint64_t h, bool create)
{
	__typeof__(a->shards[0]) *sh = &a->shards[shard];
	if (sh->cap) {
		for (pc_session_slot_t *s = sh->table[(h / PC__SESSION_SHARDS) % sh->cap]; s; s = s->next)
			if (!strcmp(s->key, key))
				return s;
	}
	if (!create)
		return NULL;
	if (sh->count + 1 > sh->cap * 2) {
		size_t nc = sh->cap ? sh->cap * 4 : 16;
		pc_session_slot_t **nt = calloc(nc, sizeof(*nt));
		if (!nt)
			return NULL;
		for (size_t i = 0; i < sh->cap; i++) {
			for (pc_session_slot_t *s = sh->table[i], *next; s; s = next) {
				next = s->next;
				size_t b = (pc__hash64_str(s->key) / PC__SESSION_SHARDS) % nc;
				s->next = nt[b];
				nt[b] = s;
			}
		}
		free(sh->table);
		sh->table = nt;
		sh->cap = nc;
	}
	pc_session_slot_t *s = pc__slab_alloc(&a->slot_slab);
	if (!s)
		return NULL;
	if (!(s->key = strdup(key))) {
		pc__slab_free(&a->slot_slab, s);
		return NULL;
	}
	size_t b = (h / PC__SESSION_SHARDS) % sh->cap;
	s->next = sh->table[b];
	sh->table[b] = s;
	sh->count++;
	return s;
}

static void slot_unlink(pc_agent_t *a, size_t shard, pc_session_slot_t *slot, uint64_t h)
{
	__typeof__(a->shards[0]) *sh = &a->shards[shard];
	pc_session_slot_t **pp = &sh->table[(h / PC__SESSION_SHARDS) % sh->cap];
	for (; *pp; pp = &(*pp)->next) {
		if (*pp == slot) {
			*pp = slot->next;
			sh->count--;
			break;
		}
	}
	free(slot->key);
	pc__slab_free(&a->slot_slab, slot);
}

static int session_target(pc_agent_t *a, const char *key, bool spawn, pc_actor_t **out)
{
	uint64_t h = pc__hash64_str(key);
	size_t shard = h % PC__SESSION_SHARDS;
	int rc = 0;
	pthread_mutex_lock(&a->shards[shard].lock);
	pc_session_slot_t *s = slot_find(a, shard, key, h, spawn);
	if (!s) {
		rc = spawn ? PC_ENOMEM : PC_ENOTFOUND;
	} else if (!s->actor) {
		if (!spawn)
			rc = PC_ENOTFOUND;
		else
			rc = pc__session_spawn(a, key, &s->actor);
	}
	if (rc == 0) {
		s->inflight++;
		*out = pc_actor_retain(s->actor);
	}
	pthread_mutex_unlock(&a->shards[shard].lock);
	return rc;
}

int pc__session_send(pc_agent_t *a, const char *key, pc_msg_t *msg, bool spawn, pc_actor_t *reply_to,
		     uint64_t corr)
{
	pc_actor_t *to = NULL;
	int rc = session_target(a, key, spawn, &to);
	if (rc != 0) {
		pc_msg_free(msg);
		return rc;
	}
	rc = reply_to ? pc_ask_as(to, msg, reply_to, corr) : pc_send(to, msg);
	if (rc != 0)
		pc__session_consumed(a, key);
	pc_actor_release(to);
	return rc;
}

int pc__session_ask_sync(pc_agent_t *a, const char *key, pc_msg_t *msg, int64_t timeout_ms, pc_msg_t **reply)
{
	pc_actor_t *to = NULL;
	int rc = session_target(a, key, true, &to);
	if (rc != 0) {
		pc_msg_free(msg);
		return rc;
	}
	rc = pc_ask_sync(to, msg, timeout_ms, reply);
	pc_actor_release(to);
	return rc;
}

void pc__session_consumed(pc_agent_t *a, const char *key)
{
	uint64_t h = pc__hash64_str(key);
	size_t shard = h % PC__SESSION_SHARDS;
	pthread_mutex_lock(&a->shards[shard].lock);
	pc_session_slot_t *s = slot_find(a, shard, key, h, false);
	if (s && s->inflight)
		s->inflight--;
	pthread_mutex_unlock(&a->shards[shard].lock);
}

bool pc__session_may_retire(pc_agent_t *a, const char *key, pc_actor_t *self)
{
	uint64_t h = pc__hash64_str(key);
	size_t shard = h % PC__SESSION_SHARDS;
	bool ok = false;
	cJSON *transcript = NULL;
	pthread_mutex_lock(&a->shards[shard].lock);
	pc_session_slot_t *s = slot_find(a, shard, key, h, false);
	if (s && s->actor == self && s->inflight == 0) {
		ok = true;
		pc_actor_release(s->actor);
		s->actor = NULL;
		transcript = s->transcript;
		s->transcript = NULL;
		/* the hub outlives the actor while someone listens */
		if (!s->hub || pc_event_hub_subscribers(s->hub) == 0) {
			pc_event_hub_release(s->hub);
			slot_unlink(a, shard, s, h);
		}
	}
	pthread_mutex_unlock(&a->shards[shard].lock);
	cJSON_Delete(transcript);
	return ok;
}

cJSON *pc__transcript_take(pc_agent_t *a, const char *key)
{
	uint64_t h = pc__hash64_str(key);
	size_t shard = h % PC__SESSION_SHARDS;
	pthread_mutex_lock(&a->shards[shard].lock);
	pc_session_slot_t *s = slot_find(a, shard, key, h, false);
	cJSON *t = s ? s->transcript : NULL;
	if (s)
		s->transcript = NULL;
	pthread_mutex_unlock(&a->shards[shard].lock);
	return t;
}

void pc__transcript_keep(pc_agent_t *a, const char *key, cJSON *messages)
{
	uint64_t h = pc__hash64_str(key);
	size_t shard = h % PC__SESSION_SHARDS;
	cJSON *old = messages;
	pthread_mutex_lock(&a->shards[shard].lock);
	pc_session_slot_t *s = slot_find(a, shard, key, h, false);
	if (s && s->actor) {
		old = s->transcript;
		s->transcript = messages;
	}
	pthread_mutex_unlock(&a->shards[shard].lock);
	cJSON_Delete(old);
}

void pc__transcript_drop(pc_agent_t *a, const char *key)
{
	cJSON_Delete(pc__transcript_take(a, key));
}

void pc__session_set_idle(pc_agent_t *a, const char *key, bool idle)
{
	uint64_t h = pc__hash64_str(key);
	size_t shard = h % PC__SESSION_SHARDS;
	pthread_mutex_lock(&a->shards[shard].lock);
	pc_session_slot_t *s = slot_find(a, shard, key, h, false);
	if (s) {
		s->idle_since_ms = idle ? (int64_t)pc_runtime_now_ms() : 0;
		s->told = false;
	}
	pthread_mutex_unlock(&a->shards[shard].lock);
}

/* The reaper: one periodic tick for every session. Sessions idle for the
 * configured time are told to retire (they check again and stop only if
 * still idle and nothing is on its way to them). */
static int reaper_receive(pc_ctx_t *ctx, void *state, pc_msg_t *msg)
{
	(void)ctx;
	pc_agent_t *a = state;
	if (msg->type == LOCK_TICK) {
		(void)pc__lock_watchdog(a);
		return 0;
	}
	if (msg->type != REAPER_TICK)
		return 0;
	int64_t now = (int64_t)pc_runtime_now_ms();
	int64_t idle_ms = (int64_t)a->cfg->agent.session_idle_ms;
	for (size_t i = 0; i < PC__SESSION_SHARDS; i++) {
		cJSON *dropped = cJSON_CreateArray(); /* freed outside the lock */
		pthread_mutex_lock(&a->shards[i].lock);
		for (size_t b = 0; b < a->shards[i].cap; b++) {
			for (pc_session_slot_t *s = a->shards[i].table[b]; s; s = s->next) {
				if (s->transcript && s->idle_since_ms && dropped &&
				    now - s->idle_since_ms >= (int64_t)PC__TRANSCRIPT_KEEP_MS) {
					cJSON_AddItemToArray(dropped, s->transcript);
					s->transcript = NULL;
				}
				if (!s->actor || !s->idle_since_ms || s->told || now - s->idle_since_ms < idle_ms)
					continue;
				s->told = true;
				pc_send_signal(s->actor, PC__MSG_SESSION_IDLE);
			}
		}
		pthread_mutex_unlock(&a->shards[i].lock);
		cJSON_Delete(dropped);
	}
	return 0;
}

static void reaper_stop(pc_ctx_t *ctx, void *state, int reason)
{
	(void)ctx, (void)reason;
	pc_agent_t *a = state;
	__atomic_sub_fetch(&a->stats.jobs_live, 1, __ATOMIC_RELEASE);
}

static const pc_behavior_t reaper_behavior = {"session-reaper", reaper_receive, reaper_stop};

static int start_reaper(pc_agent_t *a)
{
	/* often enough for both idle retirement and dropping kept transcripts */
	uint64_t period = a->cfg->agent.session_idle_ms / 4;
	if (period > PC__TRANSCRIPT_KEEP_MS / 2)
		period = PC__TRANSCRIPT_KEEP_MS / 2;
	period = period < 100 ? 100 : period;
	__atomic_add_fetch(&a->stats.jobs_live, 1, __ATOMIC_RELAXED);
	int rc = pc_spawn(a->rt, &reaper_behavior, a, &a->reaper);
	if (rc != 0) {
		__atomic_sub_fetch(&a->stats.jobs_live, 1, __ATOMIC_RELEASE);
		return rc;
	}
	pc_msg_t *tick = pc_msg_new(REAPER_TICK, 0);
	rc = tick ? pc_timer_every(a->reaper, period, tick, &a->reaper_tick) : PC_ENOMEM;
	pc_msg_t *lock_tick = rc == 0 ? pc_msg_new(LOCK_TICK, 0) : NULL;
	if (rc == 0)
		rc = lock_tick ? pc_timer_every(a->reaper, PC__LOCK_WATCHDOG_MS, lock_tick, &a->lock_tick) : PC_ENOMEM;
	return rc;
}

/* ---- the session write lock watchdog (§6.4) ---- */

static int report_overdue(void *user, const pc_session_lock_held_t *h)
{
	pc_agent_t *a = user;
	/* the spec's watchdog force-releases here; Pincer reports (see
	 * docs/session-lock.md: the lease, not the lock, keeps writers apart) */
	(void)pc_log_kv(a->log, PC_LOG_WARN, "session write lock held past its max hold",
			PC_LF_STR("sessionKey", h->session_key), PC_LF_INT("heldMs", h->held_ms),
			PC_LF_INT("maxHoldMs", h->max_hold_ms), PC_LF_STR("path", h->path));
	(void)pc_metric_inc(a->metrics.lock_overdue);
	return 0;
}

size_t pc__lock_watchdog(pc_agent_t *a)
{
	size_t n = 0;
	(void)pc_session_lock_overdue(report_overdue, a, &n);
	return n;
}

pc_event_hub_t *pc__session_hub_peek(pc_agent_t *a, const char *key)
{
	uint64_t h = pc__hash64_str(key);
	size_t shard = h % PC__SESSION_SHARDS;
	pthread_mutex_lock(&a->shards[shard].lock);
	pc_session_slot_t *s = slot_find(a, shard, key, h, false);
	pc_event_hub_t *hub = s && s->hub ? pc_event_hub_retain(s->hub) : NULL;
	pthread_mutex_unlock(&a->shards[shard].lock);
	return hub;
}

pc_event_hub_t *pc__session_hub(pc_agent_t *a, const char *key)
{
	uint64_t h = pc__hash64_str(key);
	size_t shard = h % PC__SESSION_SHARDS;
	pc_event_hub_t *hub = NULL;
	pthread_mutex_lock(&a->shards[shard].lock);
	pc_session_slot_t *s = slot_find(a, shard, key, h, true);
	if (s && !s->hub && pc_event_hub_new(key, &s->hub) != 0)
		s->hub = NULL;
	if (s && s->hub)
		hub = pc_event_hub_retain(s->hub);
	pthread_mutex_unlock(&a->shards[shard].lock);
	return hub;
}

/* ---- context files ---- */

typedef struct context_job {
	pc_agent_t *agent;
} context_job_t;

/* The skills section (§2.1 step 3): one line per <workspace>/skills/<dir>/
 * SKILL.md, from its front matter's name and description, so the model
 * knows which instructions it can read with its tools. */
static void read_skills(const char *dir, pc__buf_t *out, size_t total)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/skills", dir);
	DIR *d = opendir(path);
	if (!d)
		return;
	bool any = false;
	struct dirent *e;
	while ((e = readdir(d)) && out->len < total && !out->err) {
		if (e->d_name[0] == '.')
			continue;
		char file[4096 + 300];
		snprintf(file, sizeof(file), "%s/%s/SKILL.md", path, e->d_name);
		FILE *f = fopen(file, "r");
		if (!f)
			continue;
		char line[512], name[128] = "", desc[400] = "";
		for (int i = 0; i < 20 && fgets(line, sizeof(line), f); i++) {
			line[strcspn(line, "\r\n")] = '\0';
			if (!strncmp(line, "name:", 5))
				snprintf(name, sizeof(name), "%s", line + 5 + strspn(line + 5, " "));
			else if (!strncmp(line, "description:", 12))
				snprintf(desc, sizeof(desc), "%s", line + 12 + strspn(line + 12, " "));
		}
		fclose(f);
		if (!any)
			pc__buf_append_str(out, "\n\n## Skills\n");
		any = true;
		char entry[5200];
		int n = snprintf(entry, sizeof(entry), "- %s: %s (%s)\n", name[0] ? name : e->d_name, desc, file);
		if (n > 0)
			pc__buf_append(out, entry, (size_t)n < sizeof(entry) ? (size_t)n : sizeof(entry) - 1);
	}
	closedir(d);
}

/* The context files (§2.1 step 5), each cut to its budget and all to the
 * total, then the skills. */
static char *read_context_files(const pc_agent_defaults_t *d)
{
	const char *dir = d->workspace ? d->workspace : ".";
	size_t per = d->bootstrap_max_chars ? d->bootstrap_max_chars : CONTEXT_FILE_MAX_DEFAULT;
	size_t total = d->bootstrap_total_chars ? d->bootstrap_total_chars : CONTEXT_TOTAL_MAX_DEFAULT;
	pc__buf_t out = {0};
	char *buf = malloc(per + 1);
	for (size_t i = 0; buf && i < sizeof(CONTEXT_FILES) / sizeof(CONTEXT_FILES[0]) && out.len < total; i++) {
		char path[4096], line[128];
		snprintf(path, sizeof(path), "%s/%s", dir, CONTEXT_FILES[i]);
		FILE *f = fopen(path, "rb");
		if (!f)
			continue;
		size_t cap = per < total - out.len ? per : total - out.len;
		size_t n = fread(buf, 1, cap, f);
		bool more = fgetc(f) != EOF;
		fclose(f);
		snprintf(line, sizeof(line), "\n\n## %s\n\n", CONTEXT_FILES[i]);
		pc__buf_append_str(&out, line);
		pc__buf_append(&out, buf, n);
		if (more) {
			snprintf(line, sizeof(line), "\n[... truncated at %zu characters]", n);
			pc__buf_append_str(&out, line);
		}
	}
	free(buf);
	read_skills(dir, &out, total);
	if (pc__buf_append(&out, "", 0) != 0) {
		/* out of memory: no context files rather than no run */
		pc__buf_free(&out);
		return strdup("");
	}
	return out.p;
}

static pc_msg_t *context_job_run(void *arg)
{
	context_job_t *j = arg;
	pc_agent_t *a = j->agent;
	free(j);
	char *text = read_context_files(&a->cfg->agent);
	pthread_mutex_lock(&a->context.lock);
	free(a->context.text);
	a->context.text = text;
	a->context.loaded_ms = pc_runtime_now_ms();
	a->context.loading = false;
	pc_msg_t *m = pc__text_msg(PC__MSG_ATTEMPT_CONTEXT, text ? text : "");
	pthread_mutex_unlock(&a->context.lock);
	__atomic_sub_fetch(&a->stats.jobs_live, 1, __ATOMIC_RELEASE);
	return m;
}

static void context_job_discard(void *arg)
{
	context_job_t *j = arg;
	__atomic_sub_fetch(&j->agent->stats.jobs_live, 1, __ATOMIC_RELEASE);
	free(j);
}

int pc__context_get(pc_agent_t *a, pc_actor_t *reply_to, char **out)
{
	*out = NULL;
	uint64_t now = pc_runtime_now_ms();
	pthread_mutex_lock(&a->context.lock);
	if (a->context.text && now - a->context.loaded_ms < PC__CONTEXT_TTL_MS) {
		*out = strdup(a->context.text);
		pthread_mutex_unlock(&a->context.lock);
		return *out ? 0 : PC_ENOMEM;
	}
	a->context.loading = true;
	pthread_mutex_unlock(&a->context.lock);
	context_job_t *j = malloc(sizeof(*j));
	if (!j)
		return PC_ENOMEM;
	j->agent = a;
	__atomic_add_fetch(&a->stats.jobs_live, 1, __ATOMIC_RELAXED);
	int rc = pc_blocking_submit(a->rt, context_job_run, context_job_discard, j, reply_to);
	if (rc != 0) {
		__atomic_sub_fetch(&a->stats.jobs_live, 1, __ATOMIC_RELEASE);
		free(j);
	}
	return rc;
}

/* ---- lifecycle ---- */

static int start_embedded(pc_agent_t *a, const pc_agent_embedded_llm_t *llm, const char *scenario)
{
	if (!llm || !llm->start)
		return PC_EINVAL; /* an embedded provider, and nothing to run it */
	char err[256] = "";
	uint16_t port = 0;
	int rc = llm->start(a->io, scenario ? scenario : DEMO_SCENARIO, &a->embedded, &port, err, sizeof(err));
	if (rc != 0)
		return rc;
	a->embedded_llm = llm;
	a->embedded_port = port;
	snprintf(a->mock_root_url, sizeof(a->mock_root_url), "http://127.0.0.1:%u", (unsigned)port);
	snprintf(a->mock_base_url, sizeof(a->mock_base_url), "http://127.0.0.1:%u/v1", (unsigned)port);
	return 0;
}

/* The tools of an agent that brings none: the built-ins, the file tools
 * and exec/process under the configured policy (tools.md). */
static int own_tools(pc_agent_t *a)
{
	static const pc_exec_mode_t modes[] = {[PC_CONFIG_EXEC_FULL] = PC_EXEC_FULL,
					       [PC_CONFIG_EXEC_ALLOWLIST] = PC_EXEC_ALLOWLIST,
					       [PC_CONFIG_EXEC_OFF] = PC_EXEC_OFF};
	const pc_exec_config_t *e = &a->cfg->agent.exec;
	pc_exec_policy_t policy = {
		.mode = modes[e->mode],
		.allow = e->allow,
		.n_allow = e->allow_count,
		.env_keep_also = e->env,
		.n_env_keep_also = e->env_count,
		.default_timeout_s = (uint32_t)(e->timeout_ms / 1000),
	};
	if (policy.default_timeout_s > PC_EXEC_MAX_TIMEOUT_S)
		policy.max_timeout_s = policy.default_timeout_s;
	int rc = pc_tool_registry_new(&a->own_tools);
	if (rc == 0)
		rc = pc_tool_register_builtins(a->own_tools);
	if (rc == 0)
		rc = pc_tool_register_fs(a->own_tools);
	if (rc == 0)
		rc = pc_process_table_new(&(pc_process_table_config_t){.no_cgroup = e->cgroup_off}, &a->processes);
	if (rc == 0)
		rc = pc_tool_register_exec(a->own_tools, &policy, a->processes);
	return rc;
}

void pc_agent_io_config(const pc_config_t *cfg, uint32_t threads, pc_io_config_t *out)
{
	*out = (pc_io_config_t){.threads = threads ? threads : 1};
	uint32_t lane = cfg ? cfg->agent.max_concurrent : 0;
	/* Zero keeps a default: 64 per host, 256 idle. */
	out->max_host_connections = lane > 64 ? lane : 0;
	out->max_idle_connections = lane > 256 ? lane : 0;
}

int pc_agent_new(const pc_agent_options_t *o, pc_agent_t **out)
{
	if (!o || !out || !o->rt || !o->io || !o->store || !o->config)
		return PC_EINVAL;
	*out = NULL;
	pc_agent_t *a = calloc(1, sizeof(*a));
	if (!a)
		return PC_ENOMEM;
	a->rt = o->rt;
	a->io = o->io;
	a->store = o->store;
	a->cfg = o->config;
	a->hooks = o->hooks;
	for (size_t i = 0; i < PC__SESSION_SHARDS; i++)
		pthread_mutex_init(&a->shards[i].lock, NULL);
	pthread_mutex_init(&a->context.lock, NULL);
	pc__slab_init(&a->slot_slab, sizeof(pc_session_slot_t), 64);
	pc__slab_init(&a->session_slab, pc__session_state_size(), 64);
	uint8_t r[8];
	if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r))
		memset(r, 0, sizeof(r));
	for (int i = 0; i < 8; i++)
		snprintf(a->id_prefix + 2 * i, 3, "%02x", r[i]);
	a->log = o->log;
	a->log_content = o->log_content;
	a->trace = pc_trace_parse(getenv("PINCER_TRACE"));
	int rc = pc__owner_make(a->owner, sizeof(a->owner), a->id_prefix);
	if (o->lock_dir) {
		a->lock_dir = strdup(o->lock_dir);
	} else {
		/* next to the store the configuration names, else the default one */
		char path[4096];
		if (a->cfg->store_path)
			rc = snprintf(path, sizeof(path), "%s", a->cfg->store_path) < (int)sizeof(path) ? 0 : PC_ELIMIT;
		else
			rc = pc_store_default_path(path, sizeof(path));
		char *slash = rc == 0 ? strrchr(path, '/') : NULL;
		if (slash)
			*slash = '\0';
		if (rc == 0) {
			size_t n = strlen(slash ? path : ".") + 8;
			a->lock_dir = malloc(n);
			if (a->lock_dir)
				snprintf(a->lock_dir, n, "%s/locks", slash ? path : ".");
		}
	}
	if (rc == 0 && !a->lock_dir)
		rc = PC_ENOMEM;
	if (rc == 0 && mkdir(a->lock_dir, 0700) != 0 && errno != EEXIST)
		rc = PC_ESYS;
	if (rc == 0 && !o->tools)
		rc = own_tools(a);
	a->tools = o->tools ? o->tools : a->own_tools;
	/* the registry is complete now: the schemas every request offers are
	 * built once and shared (read-only) by every attempt */
	if (rc == 0)
		rc = pc_tool_schemas(a->tools, a->cfg->agent.tools_allow, a->cfg->agent.tools_allow_count,
				     &a->tool_schemas);
	if (rc == 0 && cJSON_GetArraySize(a->tool_schemas) == 0) {
		cJSON_Delete(a->tool_schemas);
		a->tool_schemas = NULL;
	}
	for (int api = PC_API_NONE + 1; rc == 0 && api < PC_API_COUNT; api++)
		rc = pc_request_tools_json((pc_provider_api_t)api, a->tool_schemas, &a->tools_json[api]);
	if (rc == 0)
		rc = pc_cooldowns_new(&a->cooldowns);
	if (rc == 0)
		rc = pc_run_registry_new(&a->runs);
	if (rc == 0)
		rc = pc_lane_new(a->rt, a->cfg->agent.max_concurrent ? a->cfg->agent.max_concurrent : 8, &a->lane);
	if (rc == 0)
		rc = pc__agent_metrics_new(a);
	if (rc == 0)
		rc = start_reaper(a);
	for (size_t i = 0; rc == 0 && i < a->cfg->provider_count; i++)
		if (a->cfg->providers[i].embedded && !a->embedded)
			rc = start_embedded(a, o->embedded_llm, o->mock_scenario);
	/* last: what it recovers may start running at once */
	if (rc == 0)
		rc = pc__agent_recover(a, &a->recovered);
	if (rc == 0 && (a->recovered.rerun || a->recovered.interrupted))
		(void)pc_log_kv(a->log, PC_LOG_WARN, "recovered the runs a stopped process left",
				PC_LF_INT("rerun", a->recovered.rerun), PC_LF_INT("interrupted", a->recovered.interrupted));
	if (rc != 0) {
		pc_agent_free(a, 0);
		return rc;
	}
	*out = a;
	return 0;
}

/* Every session actor, retained, for shutdown. */
static size_t collect_sessions(pc_agent_t *a, pc_actor_t ***out)
{
	size_t n = 0, cap = 0;
	pc_actor_t **v = NULL;
	for (size_t i = 0; i < PC__SESSION_SHARDS; i++) {
		pthread_mutex_lock(&a->shards[i].lock);
		for (size_t b = 0; b < a->shards[i].cap; b++) {
			for (pc_session_slot_t *s = a->shards[i].table[b]; s; s = s->next) {
				if (!s->actor)
					continue;
				if (PC__GROW(v, cap, n + 1, 64))
					continue;
				v[n++] = pc_actor_retain(s->actor);
			}
		}
		pthread_mutex_unlock(&a->shards[i].lock);
	}
	*out = v;
	return n;
}

static bool quiet(pc_agent_t *a)
{
	return __atomic_load_n(&a->stats.sessions_live, __ATOMIC_ACQUIRE) == 0 &&
	       __atomic_load_n(&a->stats.runs_live, __ATOMIC_ACQUIRE) == 0 &&
	       __atomic_load_n(&a->stats.attempts_live, __ATOMIC_ACQUIRE) == 0 &&
	       __atomic_load_n(&a->stats.jobs_live, __ATOMIC_ACQUIRE) == 0 &&
	       pc_tool_registry_live(a->tools) == 0;
}

size_t pc_agent_abort_all(pc_agent_t *a)
{
	pc_actor_t **v = NULL;
	size_t n = a ? collect_sessions(a, &v) : 0;
	for (size_t i = 0; i < n; i++) {
		pc_send_signal(v[i], PC__MSG_SESSION_ABORT_ALL);
		pc_actor_release(v[i]);
	}
	free(v);
	return n;
}

void pc_agent_free(pc_agent_t *a, int64_t grace_ms)
{
	if (!a)
		return;
	__atomic_store_n(&a->stopping, true, __ATOMIC_RELEASE);
	if (a->reaper) {
		/* the periodic timer holds a reference to the reaper */
		pc_timer_cancel(a->rt, a->reaper_tick);
		pc_timer_cancel(a->rt, a->lock_tick);
		pc_actor_stop(a->reaper, PC_EXIT_SHUTDOWN);
		pc_actor_release(a->reaper);
		a->reaper = NULL;
	}
	pc_actor_t **v = NULL;
	size_t n = collect_sessions(a, &v);
	for (size_t i = 0; i < n; i++)
		pc_send_signal(v[i], PC__MSG_SESSION_ABORT_ALL);
	uint64_t until = grace_ms < 0 ? UINT64_MAX : pc_runtime_now_ms() + (uint64_t)grace_ms;
	while (a->runs && pc_run_registry_active_count(a->runs) > 0 && pc_runtime_now_ms() < until) {
		struct timespec ts = {0, 2000000};
		nanosleep(&ts, NULL);
	}
	for (size_t i = 0; i < n; i++) {
		pc_actor_stop(v[i], PC_EXIT_SHUTDOWN);
		pc_actor_release(v[i]);
	}
	free(v);
	/* Every actor and job that touches the agent has stopped (their stop
	 * handlers use the lane, the registry and the tools). Not bounded by
	 * the grace: freeing under a live actor would be a use after free. */
	while (!quiet(a)) {
		struct timespec ts = {0, 1000000};
		nanosleep(&ts, NULL);
	}
	if (a->embedded_llm && a->embedded_llm->stop)
		a->embedded_llm->stop(a->embedded);
	pc_lane_free(a->lane);
	pc_metrics_free(a->metrics.reg);
	for (size_t i = 0; i < PC__SESSION_SHARDS; i++) {
		for (size_t b = 0; b < a->shards[i].cap; b++) {
			for (pc_session_slot_t *s = a->shards[i].table[b], *next; s; s = next) {
				next = s->next;
				pc_actor_release(s->actor);
				pc_event_hub_release(s->hub);
				cJSON_Delete(s->transcript);
				free(s->key);
			}
		}
		free(a->shards[i].table);
		pthread_mutex_destroy(&a->shards[i].lock);
	}
	pc__slab_destroy(&a->slot_slab);
	pc__slab_destroy(&a->session_slab);
	pc_run_registry_free(a->runs);
	cJSON_Delete(a->tool_schemas);
	for (size_t i = 0; i < sizeof(a->tools_json) / sizeof(a->tools_json[0]); i++)
		cJSON_free(a->tools_json[i]);
	pc_tool_registry_free(a->own_tools);
	pc_process_table_free(a->processes);
	free(a->context.text);
	pthread_mutex_destroy(&a->context.lock);
	pc_cooldowns_free(a->cooldowns);
	free(a->lock_dir);
	free(a);
}

/* ---- the API ---- */

static const char *session_key_of(const pc_agent_params_t *p)
{
	return p->session_key && p->session_key[0] ? p->session_key : "main";
}

bool pc_agent_run_id_ok(const char *id)
{
	size_t n = strlen(id);
	if (!n || n > PC_RUN_ID_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)id[i] <= ' ' || (unsigned char)id[i] >= 0x7f)
			return false;
	return true;
}

static int submit_msg(pc_agent_t *a, const pc_agent_params_t *p, pc_msg_t **out)
{
	if (!a || !p || !p->message || !out)
		return PC_EINVAL;
	if (__atomic_load_n(&a->stopping, __ATOMIC_ACQUIRE))
		return PC_ESTOPPED;
	const char *key = session_key_of(p);
	int rc = key_ok(key);
	if (rc != 0)
		return rc;
	if (p->idempotency_key && strlen(p->idempotency_key) > PC_STORE_NAME_MAX)
		return PC_EINVAL;
	const char *texts[] = {p->message, p->idempotency_key, p->model, p->trigger, p->queue_mode,
			       p->extra_system_prompt};
	for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++)
		if (!text_ok(texts[i]))
			return PC_EINVAL;
	pc_think_level_t think;
	if (p->thinking && pc_think_level_parse(p->thinking, &think) != 0)
		return PC_EINVAL;
	if (p->run_id && !pc_agent_run_id_ok(p->run_id))
		return PC_EINVAL;
	return pc__submit_encode(p, key, NULL, out);
}

int pc_agent_submit(pc_agent_t *a, const pc_agent_params_t *p, pc_agent_accepted_t *out)
{
	pc_msg_t *m = NULL;
	int rc = submit_msg(a, p, &m);
	if (rc != 0)
		return rc;
	pc_msg_t *reply = NULL;
	rc = pc__session_ask_sync(a, session_key_of(p), m, PC_STORE_DEFAULT_TIMEOUT_MS, &reply);
	if (rc != 0)
		return rc;
	const pc_agent_submit_reply_t *r = pc_msg_cdata(reply);
	rc = r->rc;
	if (rc == 0 && out)
		*out = r->accepted;
	pc_msg_free(reply);
	return rc;
}

int pc_agent_submit_async(pc_agent_t *a, const pc_agent_params_t *p, pc_actor_t *reply_to, uint64_t corr)
{
	if (!reply_to)
		return PC_EINVAL;
	pc_msg_t *m = NULL;
	int rc = submit_msg(a, p, &m);
	if (rc != 0)
		return rc;
	return pc__session_send(a, session_key_of(p), m, true, reply_to, corr);
}

static pc_agent_wait_status_t wait_status(pc_run_status_t s)
{
	return s == PC_RUN_STATUS_OK ? PC_AGENT_WAIT_OK : PC_AGENT_WAIT_ERROR;
}

int pc_agent_wait(pc_agent_t *a, const char *run_id, int64_t timeout_ms, pc_agent_wait_result_t *out)
{
	if (!a || !run_id || !out)
		return PC_EINVAL;
	memset(out, 0, sizeof(*out));
	int rc = pc_run_registry_wait(a->runs, run_id, timeout_ms ? timeout_ms : PC_AGENT_WAIT_DEFAULT_MS,
				      &out->run);
	if (rc == 0) {
		out->status = wait_status(out->run.status);
		return 0;
	}
	if (rc == PC_ETIMEDOUT) {
		out->status = PC_AGENT_WAIT_TIMEOUT;
		return 0;
	}
	if (rc != PC_ENOTFOUND)
		return rc;
	/* not in memory: an older run, or another process's, from the store */
	pc_store_reply_t r;
	rc = pc_store_run_get(a->store, run_id, &r);
	if (rc != 0)
		return rc;
	pc_agent_run_info_from_store(&r, &out->run);
	snprintf(out->run.run_id, sizeof(out->run.run_id), "%s", run_id);
	/* still running elsewhere: this wait cannot see it end */
	out->status = pc_run_status_terminal(out->run.status) ? wait_status(out->run.status) : PC_AGENT_WAIT_TIMEOUT;
	return 0;
}

void pc_agent_run_info_from_store(const pc_store_reply_t *r, pc_run_info_t *out)
{
	memset(out, 0, sizeof(*out));
	out->started_ms = r->started_ms;
	out->ended_ms = r->ended_ms;
	snprintf(out->error_kind, sizeof(out->error_kind), "%.31s", r->code);
	switch (r->status) {
	case PC_STORE_RUN_OK: out->status = PC_RUN_STATUS_OK; return;
	case PC_STORE_RUN_ABORTED: out->status = PC_RUN_STATUS_ABORTED; return;
	case PC_STORE_RUN_TIMEOUT: out->status = PC_RUN_STATUS_TIMEOUT; return;
	case PC_STORE_RUN_ERROR: break;
	default:
		/* accepted by a process that is running it or has it queued (a
		 * gone process's runs were recovered when this one started) */
		out->status = PC_RUN_STATUS_RUNNING;
		return;
	}
	out->status = PC_RUN_STATUS_ERROR;
	snprintf(out->error, sizeof(out->error), "%s",
		 !strcmp(r->code, "run_interrupted")
			 ? "the run was interrupted: the process running it stopped (crash or kill) before it ended"
		 : r->code[0] ? r->code
			      : "the run failed");
}

void pc_agent_recovered(const pc_agent_t *a, pc_agent_recovery_t *out)
{
	*out = a ? a->recovered : (pc_agent_recovery_t){0};
}


int pc_agent_watch(pc_agent_t *a, const char *run_id, pc_actor_t *who, uint64_t corr)
{
	if (!a || !run_id || !who)
		return PC_EINVAL;
	return pc_run_registry_watch(a->runs, run_id, who, PC_MSG_AGENT_RUN_INFO, corr);
}

static void *bus_retain(void *b) { return pc_event_bus_retain(b); }

int pc_agent_result(pc_agent_t *a, const char *run_id, char **json)
{
	if (!a || !run_id || !json)
		return PC_EINVAL;
	*json = NULL;
	pc_event_bus_t *bus = pc_run_registry_attachment(a->runs, run_id, bus_retain);
	if (!bus)
		return PC_ENOTFOUND;
	int rc = PC_ESTATE;
	if (pc_event_bus_ended(bus)) {
		pc_event_sub_t *s = NULL;
		pc_event_sub_config_t sc = {.capacity = 4};
		rc = pc_event_sub_new(&sc, &s);
		if (rc == 0)
			rc = pc_event_bus_attach(bus, s, true);
		pc_event_t *e = NULL;
		if (rc == 0 && pc_event_sub_take(s, &e, 1) == 1) {
			*json = strdup(e->data);
			rc = *json ? 0 : PC_ENOMEM;
			pc_event_release(e);
		} else if (rc == 0) {
			rc = PC_ESTATE;
		}
		if (s)
			pc_event_bus_detach(bus, s);
		pc_event_sub_release(s);
	}
	pc_event_bus_release(bus);
	return rc;
}

int pc_agent_subscribe_run(pc_agent_t *a, const char *run_id, pc_event_sub_t *s)
{
	if (!a || !run_id || !s)
		return PC_EINVAL;
	pc_event_bus_t *bus = pc_run_registry_attachment(a->runs, run_id, bus_retain);
	if (!bus)
		return PC_ENOTFOUND;
	int rc = pc_event_bus_attach(bus, s, true);
	pc_event_bus_release(bus);
	return rc;
}

int pc_agent_subscribe_session(pc_agent_t *a, const char *session_key, pc_event_sub_t *s)
{
	if (!a || !session_key || !s || key_ok(session_key) != 0)
		return PC_EINVAL;
	pc_event_hub_t *hub = pc__session_hub(a, session_key);
	if (!hub)
		return PC_ENOMEM;
	int rc = pc_event_hub_attach(hub, s);
	pc_event_hub_release(hub);
	return rc;
}

void pc_agent_unsubscribe_session(pc_agent_t *a, const char *session_key, pc_event_sub_t *s)
{
	if (!a || !session_key || !s)
		return;
	pc_event_hub_t *hub = pc__session_hub(a, session_key);
	if (hub) {
		pc_event_hub_detach(hub, s);
		pc_event_hub_release(hub);
	}
}

int pc_agent_abort_run(pc_agent_t *a, const char *run_id)
{
	if (!a || !run_id)
		return PC_EINVAL;
	pc_run_info_t info;
	int rc = pc_run_registry_get(a->runs, run_id, &info);
	if (rc != 0)
		return rc;
	if (pc_run_status_terminal(info.status))
		return PC_ESTATE;
	pc_actor_t *run = pc_run_registry_actor(a->runs, run_id);
	if (run) {
		rc = pc_send_signal(run, PC__MSG_RUN_ABORT);
		pc_actor_release(run);
		return rc == PC_ESTOPPED ? PC_ESTATE : rc;
	}
	pc_msg_t *m = pc__text_msg(PC__MSG_SESSION_ABORT_RUN, run_id);
	return m ? pc__session_send(a, info.session_key, m, false, NULL, 0) : PC_ENOMEM;
}

int pc_agent_abort_session(pc_agent_t *a, const char *session_key)
{
	if (!a || !session_key)
		return PC_EINVAL;
	pc_msg_t *m = pc_msg_new(PC__MSG_SESSION_ABORT_ALL, 0);
	if (!m)
		return PC_ENOMEM;
	int rc = pc__session_send(a, session_key, m, false, NULL, 0);
	return rc == PC_ENOTFOUND ? 0 : rc;
}

int pc_agent_steer(pc_agent_t *a, const char *session_key, const char *text)
{
	if (!a || !session_key || !text || !text_ok(text))
		return PC_EINVAL;
	pc_msg_t *m = pc__text_msg(PC__MSG_SESSION_STEER, text);
	if (!m)
		return PC_ENOMEM;
	pc_actor_t *to = NULL;
	int rc = session_target(a, session_key, false, &to);
	if (rc != 0) {
		pc_msg_free(m);
		return rc;
	}
	pc_msg_t *reply = NULL;
	rc = pc_ask_sync(to, m, 5000, &reply);
	pc_actor_release(to);
	if (rc != 0)
		return rc;
	rc = (int)*(const int64_t *)pc_msg_cdata(reply);
	pc_msg_free(reply);
	return rc;
}

void pc_agent_stats(pc_agent_t *a, pc_agent_stats_t *out)
{
	memset(out, 0, sizeof(*out));
	out->sessions_live = __atomic_load_n(&a->stats.sessions_live, __ATOMIC_RELAXED);
	out->runs_started = __atomic_load_n(&a->stats.runs_started, __ATOMIC_RELAXED);
	out->runs_finished = __atomic_load_n(&a->stats.runs_finished, __ATOMIC_RELAXED);
	out->runs_active = pc_run_registry_active_count(a->runs);
	out->attempts = __atomic_load_n(&a->stats.attempts, __ATOMIC_RELAXED);
	out->tool_calls = __atomic_load_n(&a->stats.tool_calls, __ATOMIC_RELAXED);
	out->tool_loops_blocked = __atomic_load_n(&a->stats.tool_loops_blocked, __ATOMIC_RELAXED);
	out->long_running = __atomic_load_n(&a->stats.diag[PC_DIAG_LONG_RUNNING], __ATOMIC_RELAXED);
	out->stalled = __atomic_load_n(&a->stats.diag[PC_DIAG_STALLED], __ATOMIC_RELAXED);
	out->stuck = __atomic_load_n(&a->stats.diag[PC_DIAG_STUCK], __ATOMIC_RELAXED);
	out->recoveries = __atomic_load_n(&a->stats.diag_recoveries, __ATOMIC_RELAXED);
	out->usage_write_errors = __atomic_load_n(&a->stats.usage_write_errors, __ATOMIC_RELAXED);
	pc_lane_stats_t ls;
	pc_lane_stats(a->lane, &ls);
	out->lane_active = ls.active;
	out->lane_queued = ls.queued;
	out->lane_peak = ls.peak_active;
	out->lane_max = ls.max;
}

uint16_t pc_agent_mock_port(const pc_agent_t *a) { return a && a->embedded ? a->embedded_port : 0; }

pc_store_t *pc_agent_store(pc_agent_t *a) { return a ? a->store : NULL; }

int pc_agent_usage(pc_agent_t *a, const char *run_id, const char *session_key, pc_store_usage_list_t **out)
{
	if (out)
		*out = NULL;
	if (!a || !out)
		return PC_EINVAL;
	return pc_store_usage_list(a->store, run_id, session_key, out);
}

int pc_agent_run_info(pc_agent_t *a, const char *run_id, pc_run_info_t *out)
{
	if (!a || !run_id || !out)
		return PC_EINVAL;
	return pc_run_registry_get(a->runs, run_id, out);
}

int pc_agent_active_run(pc_agent_t *a, const char *session_key, char *run_id)
{
	if (!a || !session_key || !run_id)
		return PC_EINVAL;
	return pc_run_registry_active(a->runs, session_key, run_id, NULL);
}
