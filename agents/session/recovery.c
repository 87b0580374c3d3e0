/*
 * Accepted messages that outlive a crash (recovery_internal.h).
 */
#include "recovery_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../run/run_lifecycle.h"
#include "lease.h"
#include "actors/hash.h"
#include "runtime/blocking.h"

static const char *sub_str(const pc__submit_t *p, uint32_t off) { return off ? p->buf + off : NULL; }

char *pc__submit_prompt_json(const pc__submit_t *p)
{
	cJSON *o = cJSON_CreateObject();
	const struct {
		const char *name;
		uint32_t off;
	} f[] = {{"message", p->message}, {"model", p->model},     {"trigger", p->trigger},
		 {"queueMode", p->queue_mode}, {"extra", p->extra}};
	bool ok = o != NULL;
	for (size_t i = 0; ok && i < sizeof(f) / sizeof(*f); i++)
		if (f[i].off)
			ok = cJSON_AddStringToObject(o, f[i].name, sub_str(p, f[i].off)) != NULL;
	if (ok && p->has_think)
		ok = cJSON_AddStringToObject(o, "thinking", pc_think_level_name(p->think)) != NULL;
	if (ok && p->timeout_ms)
		ok = pc__json_add_int(o, "timeoutMs", (int64_t)p->timeout_ms);
	char *out = ok ? cJSON_PrintUnformatted(o) : NULL;
	cJSON_Delete(o);
	return out;
}

void pc__submit_fingerprint(const char *prompt_json, char out[17])
{
	/* tells a changed request from the same one, not an attack; stored
	 * with the run, so it must hash as it always has (actors/hash.h) */
	snprintf(out, 17, "%016" PRIx64, pc__hash64_str(prompt_json));
}

static const char *field(const cJSON *o, const char *name)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
	return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* Sends run `o` (adopted, never begun) to its session to run again. */
static int rerun(pc_agent_t *a, const pc_store_open_run_t *o)
{
	cJSON *j = cJSON_Parse(o->prompt);
	const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "timeoutMs");
	pc_agent_params_t p = {
		.session_key = o->key,
		.message = field(j, "message"),
		.model = field(j, "model"),
		.trigger = field(j, "trigger"),
		/* each its own turn, in the order they were accepted: steering
		 * or collecting them now would merge what was accepted apart */
		.queue_mode = "followup",
		.extra_system_prompt = field(j, "extra"),
		.thinking = field(j, "thinking"),
		.timeout_ms = cJSON_IsNumber(t) && t->valuedouble > 0 ? (uint64_t)t->valuedouble : 0,
	};
	pc_msg_t *m = NULL;
	int rc = p.message ? pc__submit_encode(&p, o->key, o->run_id, &m) : PC_EINVAL;
	cJSON_Delete(j);
	if (rc == 0)
		rc = pc__session_send(a, o->key, m, true, NULL, 0);
	return rc;
}

/* Whether run `o`'s transcript holds a call of a mutating tool (spec
 * §1.14): such a call may have started, whether or not its result was
 * written. A tool this process does not know may have been known where
 * the run ran, so it counts; so does a transcript that cannot be read. */
static bool mutating_call_made(pc_agent_t *a, const pc_store_open_run_t *o)
{
	pc_store_history_t *h = NULL;
	int rc = pc_store_history(a->store, o->key, &h);
	if (rc != 0)
		return rc != PC_ENOTFOUND;
	bool found = false;
	for (size_t i = 0; !found && i < pc_store_history_count(h); i++) {
		pc_store_msg_t m;
		pc_store_history_get(h, i, &m);
		if (!m.tool_call_ids || strcmp(m.role, "assistant") || !m.run_id || strcmp(m.run_id, o->run_id))
			continue;
		cJSON *j = cJSON_Parse(m.content);
		const cJSON *b;
		cJSON_ArrayForEach(b, cJSON_GetObjectItemCaseSensitive(j, "content")) {
			const char *type = field(b, "type");
			if (!type || strcmp(type, "toolCall"))
				continue;
			const pc_tool_def_t *def = pc_tool_find(a->tools, field(b, "name"));
			found = found || !def || def->mutating;
		}
		cJSON_Delete(j);
	}
	pc_store_history_free(h);
	return found;
}

/* Adopts the runs `pick` chooses, then runs again those that never began
 * and ends the others with `code`, replay-invalid when a mutating tool of
 * theirs may have run. */
static int recover(pc_agent_t *a, pc_agent_run_pick_fn pick, void *arg, const char *code, pc_agent_recovery_t *out)
{
	pc_agent_recovery_t n = {0};
	pc_store_open_runs_t *l = NULL;
	int rc = pc_store_runs_open(a->store, &l);
	for (size_t i = 0; rc == 0 && i < pc_store_open_runs_count(l); i++) {
		pc_store_open_run_t o;
		pc_store_open_runs_get(l, i, &o);
		if (!pick(arg, &o))
			continue;
		int arc = pc_store_run_adopt(a->store, o.run_id, o.owner, a->owner);
		/* another process took it first, or its owner's cluster node is
		 * still live (a lease the others wait out before taking over) */
		if (arc == PC_STORE_EFENCED || arc == PC_EBUSY)
			continue;
		if (arc != 0) {
			rc = arc;
			break;
		}
		if (!o.started && o.prompt && rerun(a, &o) == 0) {
			n.rerun++;
			continue;
		}
		pc_store_run_end_t e = {.run_id = o.run_id, .status = pc_run_lc_store_status(PC_RUN_LC_ERROR),
					.error_code = code, .replay_invalid = o.started && mutating_call_made(a, &o)};
		rc = pc_store_run_end(a->store, &e);
		n.interrupted += rc == 0;
	}
	pc_store_open_runs_free(l);
	if (out)
		*out = n;
	return rc;
}

/* A run left by a process of this machine that has ended; a row without
 * an owner is from before owners were kept. */
static bool left_by_gone_process(void *arg, const pc_store_open_run_t *o)
{
	(void)arg;
	return !o->owner || pc__owner_gone(o->owner);
}

int pc__agent_recover(pc_agent_t *a, pc_agent_recovery_t *out)
{
	return recover(a, left_by_gone_process, NULL, "run_interrupted", out);
}

typedef struct take_over {
	pc_agent_t *agent;
	pc_agent_run_pick_fn pick;
	void *arg;
	void (*release)(void *arg);
	uint32_t reply_type;
} take_over_t;

static void take_over_end(take_over_t *j)
{
	pc_agent_t *a = j->agent;
	j->release(j->arg);
	free(j);
	__atomic_sub_fetch(&a->stats.jobs_live, 1, __ATOMIC_RELEASE);
}

static pc_msg_t *take_over_run(void *arg)
{
	take_over_t *j = arg;
	pc_agent_recovery_t n = {0};
	int rc = recover(j->agent, j->pick, j->arg, "node_lost", &n);
	__atomic_add_fetch(&j->agent->stats.runs_taken_over, n.rerun + n.interrupted, __ATOMIC_RELAXED);
	pc_msg_t *m = pc_msg_new(j->reply_type, sizeof(uint64_t));
	if (m)
		*(uint64_t *)pc_msg_data(m) = (uint64_t)(int64_t)rc;
	take_over_end(j);
	return m;
}

static void take_over_discard(void *arg)
{
	take_over_end(arg);
}

int pc_agent_take_over(pc_agent_t *a, pc_agent_run_pick_fn pick, void *arg, void (*release)(void *arg),
		       pc_actor_t *reply_to, uint32_t reply_type)
{
	if (!a || !pick || !release)
		return PC_EINVAL;
	take_over_t *j = malloc(sizeof(*j));
	if (!j)
		return PC_ENOMEM;
	*j = (take_over_t){a, pick, arg, release, reply_type};
	__atomic_add_fetch(&a->stats.jobs_live, 1, __ATOMIC_RELAXED);
	int rc = pc_blocking_submit(a->rt, take_over_run, take_over_discard, j, reply_to);
	if (rc != 0) {
		free(j);
		__atomic_sub_fetch(&a->stats.jobs_live, 1, __ATOMIC_RELEASE);
	}
	return rc;
}
