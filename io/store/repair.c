/*
 * Transcript hygiene: tool-call / tool-result pairing repair (spec §2.2
 * step 5, policy "drop"). Pure: works on a list of messages, returns a new
 * list that borrows the input's strings and owns only what it made up.
 */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "store_internal.h"
#include "io/io.h"

struct pc_store_repaired {
	pc_store_msg_t *v;
	size_t n, cap;
	char **owned; /* strings of synthetic results */
	size_t nowned, capowned;
};

static int push(pc_store_repaired_t *r, const pc_store_msg_t *m)
{
	if (PC__GROW(r->v, r->cap, r->n + 1, 16))
		return PC_ENOMEM;
	r->v[r->n++] = *m;
	return 0;
}

static int own(pc_store_repaired_t *r, char *s)
{
	if (!s)
		return PC_ENOMEM;
	if (PC__GROW(r->owned, r->capowned, r->nowned + 1, 8)) {
		free(s);
		return PC_ENOMEM;
	}
	r->owned[r->nowned++] = s;
	return 0;
}

static bool is_role(const pc_store_msg_t *m, const char *role)
{
	return m->role && strcmp(m->role, role) == 0;
}

/* The call ids of an assistant message: a JSON array of strings (NULL if
 * there are none or the field is not such an array). */
static cJSON *call_ids(const pc_store_msg_t *m)
{
	if (!m->tool_call_ids)
		return NULL;
	cJSON *a = cJSON_Parse(m->tool_call_ids);
	if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) == 0) {
		cJSON_Delete(a);
		return NULL;
	}
	return a;
}

/* The id a toolResult answers: ["id"] or "id". Writes at most cap-1 bytes;
 * false when there is none. */
static bool result_id(const pc_store_msg_t *m, char *buf, size_t cap)
{
	cJSON *j = m->tool_call_ids ? cJSON_Parse(m->tool_call_ids) : NULL;
	cJSON *s = cJSON_IsArray(j) ? cJSON_GetArrayItem(j, 0) : j;
	bool ok = cJSON_IsString(s) && strlen(s->valuestring) < cap;
	if (ok)
		memcpy(buf, s->valuestring, strlen(s->valuestring) + 1);
	cJSON_Delete(j);
	return ok;
}

/* stopReason "error" or "aborted": such turns get no results at all. */
static bool errored_turn(const pc_store_msg_t *m)
{
	cJSON *j = cJSON_Parse(m->content);
	cJSON *sr = cJSON_GetObjectItemCaseSensitive(j, "stopReason");
	bool e = cJSON_IsString(sr) &&
		 (strcmp(sr->valuestring, "error") == 0 || strcmp(sr->valuestring, "aborted") == 0);
	cJSON_Delete(j);
	return e;
}

static int synthetic(pc_store_repaired_t *r, const pc_store_msg_t *call, const char *id)
{
	cJSON *c = cJSON_CreateObject(), *ids = cJSON_CreateArray(), *parts = NULL;
	cJSON *text = cJSON_CreateObject(), *sid = cJSON_CreateString(id);
	int rc = PC_ENOMEM;
	if (c && ids && text && sid && cJSON_AddStringToObject(c, "role", "toolResult") &&
	    cJSON_AddStringToObject(c, "toolCallId", id) && cJSON_AddTrueToObject(c, "isError") &&
	    cJSON_AddStringToObject(text, "type", "text") &&
	    cJSON_AddStringToObject(text, "text", PC_STORE_SYNTHETIC_RESULT_TEXT) &&
	    (parts = cJSON_AddArrayToObject(c, "content")) && cJSON_AddItemToArray(parts, text)) {
		text = NULL; /* owned by c now */
		if (cJSON_AddItemToArray(ids, sid)) {
			sid = NULL;
			rc = 0;
		}
	}
	cJSON_Delete(text);
	cJSON_Delete(sid);
	char *content = NULL, *tcids = NULL;
	if (rc == 0) {
		content = cJSON_PrintUnformatted(c);
		rc = own(r, content);
	}
	if (rc == 0) {
		tcids = cJSON_PrintUnformatted(ids);
		rc = own(r, tcids);
	}
	if (rc == 0) {
		pc_store_msg_t m = {.created_ms = call->created_ms, .role = "toolResult", .content = content,
				    .tool_call_ids = tcids, .run_id = call->run_id, .json_checked = true};
		rc = push(r, &m);
	}
	cJSON_Delete(c);
	cJSON_Delete(ids);
	return rc;
}

/* Repairs the turn of the assistant message at `i` whose calls are `ids`:
 * emits the call, then its results in call order, then whatever else sat
 * between it and the next assistant message. */
static int repair_turn(pc_store_repaired_t *r, const pc_store_msg_t *msgs, size_t n, size_t i, cJSON *ids,
		       bool *used, pc_store_repair_stats_t *st)
{
	size_t end = i + 1;
	while (end < n && !is_role(&msgs[end], "assistant"))
		end++;
	bool errored = errored_turn(&msgs[i]);
	int rc = push(r, &msgs[i]);
	size_t k = 0;
	cJSON *id;
	cJSON_ArrayForEach(id, ids) {
		if (rc != 0)
			break;
		if (!cJSON_IsString(id)) {
			k++;
			continue;
		}
		size_t found = n;
		char rid[PC_STORE_NAME_MAX + 1];
		for (size_t j = i + 1; j < end; j++) {
			if (used[j] || !is_role(&msgs[j], "toolResult") || !result_id(&msgs[j], rid, sizeof(rid)) ||
			    strcmp(rid, id->valuestring) != 0)
				continue;
			used[j] = true;
			if (found == n)
				found = j;
			else
				st->duplicates++;
		}
		if (errored) {
			st->errored += found != n;
		} else if (found != n) {
			st->moved += found != i + 1 + k;
			rc = push(r, &msgs[found]);
		} else {
			st->synthesized++;
			rc = synthetic(r, &msgs[i], id->valuestring);
		}
		k++;
	}
	used[i] = true;
	return rc;
}

int pc_store_repair_tool_pairs(const pc_store_msg_t *msgs, size_t n, pc_store_repaired_t **out,
			       pc_store_repair_stats_t *stats)
{
	if (!out)
		return PC_EINVAL;
	*out = NULL;
	if (n && !msgs)
		return PC_EINVAL;
	pc_store_repair_stats_t st = {0};
	pc_store_repaired_t *r = calloc(1, sizeof(*r));
	bool *used = calloc(n ? n : 1, sizeof(*used));
	int rc = (r && used) ? 0 : PC_ENOMEM;
	for (size_t i = 0; i < n && rc == 0; i++) {
		if (used[i])
			continue;
		if (is_role(&msgs[i], "toolResult")) {
			st.orphans++; /* no call before it in its turn */
			continue;
		}
		cJSON *ids = is_role(&msgs[i], "assistant") ? call_ids(&msgs[i]) : NULL;
		if (ids)
			rc = repair_turn(r, msgs, n, i, ids, used, &st);
		else
			rc = push(r, &msgs[i]);
		cJSON_Delete(ids);
	}
	free(used);
	if (rc != 0) {
		pc_store_repaired_free(r);
		return rc;
	}
	if (stats)
		*stats = st;
	*out = r;
	return 0;
}

size_t pc_store_repaired_count(const pc_store_repaired_t *r)
{
	return r ? r->n : 0;
}

const pc_store_msg_t *pc_store_repaired_msgs(const pc_store_repaired_t *r)
{
	return r ? r->v : NULL;
}

void pc_store_repaired_free(pc_store_repaired_t *r)
{
	if (!r)
		return;
	for (size_t k = 0; k < r->nowned; k++)
		free(r->owned[k]);
	free(r->owned);
	free(r->v);
	free(r);
}
