/*
 * Session truncation of oversized tool results (spec §3.3, §1.7 step 7c):
 * the run actor's recovery when a context overflow is due to tool output.
 * Runs on the blocking pool (it reads the transcript and rewrites it under
 * the session write lock, both of which block) and answers the run with
 * PC__MSG_RUN_TRUNCATED.
 */
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "runtime/blocking.h"
#include "../agent_internal.h"
#include "../attempt/context_guard.h"
#include "io/io.h"

typedef struct truncate_job {
	pc_store_t *store;
	char *lock_dir;
	char *key;
	int64_t epoch;
	uint64_t context_tokens;
	uint64_t lock_max_hold_ms;
} truncate_job_t;

static void job_free(void *arg)
{
	truncate_job_t *j = arg;
	free(j->lock_dir);
	free(j->key);
	free(j);
}

/* Cuts the transcript's tool results; returns how many were cut or a
 * negative code. */
static int truncate_transcript(truncate_job_t *j)
{
	pc_store_history_t *h = NULL;
	int rc = pc_store_history(j->store, j->key, &h);
	if (rc != 0)
		return rc;
	size_t n = pc_store_history_count(h);
	size_t first = n;
	cJSON *msgs = cJSON_CreateArray();
	pc_store_msg_t *rows = calloc(n ? n : 1, sizeof(*rows));
	cJSON *cut = NULL;
	char **texts = NULL;
	size_t truncated = 0;
	if (!msgs || !rows) {
		rc = PC_ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		pc_store_history_get(h, i, &rows[i]);
		cJSON *c = cJSON_Parse(rows[i].content);
		cJSON_AddItemToArray(msgs, c ? c : cJSON_CreateObject());
	}
	rc = pc_ctx_truncate_messages(msgs, pc_ctx_tool_result_max_chars(j->context_tokens, 0), false, &cut,
				      &truncated);
	if (rc != 0 || !cut || truncated == 0)
		goto out;
	/* rewrite from the first message that changed */
	for (size_t i = 0; i < n && first == n; i++)
		if (!cJSON_Compare(cJSON_GetArrayItem(msgs, (int)i), cJSON_GetArrayItem(cut, (int)i), true))
			first = i;
	texts = calloc(n - first + 1, sizeof(*texts));
	if (!texts) {
		rc = PC_ENOMEM;
		goto out;
	}
	for (size_t i = first; i < n; i++) {
		texts[i - first] = pc_json_print(cJSON_GetArrayItem(cut, (int)i));
		if (!texts[i - first]) {
			rc = PC_ENOMEM;
			goto out;
		}
		rows[i].content = texts[i - first];
		rows[i].json_checked = true; /* printed by cJSON; ids as stored */
	}
	int64_t last = 0;
	pc_session_lock_opts_t lo;
	pc__run_lock_opts(j->lock_max_hold_ms, &lo);
	rc = pc_store_rewrite_locked(j->store, j->lock_dir, &lo, j->key, j->epoch, pc_store_history_last_seq(h),
				     rows[first].seq, rows + first, n - first, &last, NULL);
out:
	for (size_t i = 0; texts && first < n && i < n - first; i++)
		cJSON_free(texts[i]);
	free(texts);
	cJSON_Delete(cut);
	cJSON_Delete(msgs);
	free(rows);
	pc_store_history_free(h);
	return rc == 0 ? (int)truncated : rc;
}

static pc_msg_t *job_run(void *arg)
{
	truncate_job_t *j = arg;
	int rc = truncate_transcript(j);
	job_free(j);
	pc_msg_t *m = pc_msg_new(PC__MSG_RUN_TRUNCATED, sizeof(int64_t));
	if (m)
		*(int64_t *)pc_msg_data(m) = rc;
	return m;
}

int pc__truncate_start(pc_agent_t *a, const char *key, int64_t epoch, uint64_t context_tokens,
		       uint64_t lock_max_hold_ms, pc_actor_t *reply_to)
{
	truncate_job_t *j = calloc(1, sizeof(*j));
	if (!j)
		return PC_ENOMEM;
	j->store = a->store;
	j->context_tokens = context_tokens;
	j->epoch = epoch;
	j->lock_max_hold_ms = lock_max_hold_ms;
	j->lock_dir = strdup(a->lock_dir);
	j->key = strdup(key);
	int rc = (!j->lock_dir || !j->key) ? PC_ENOMEM
		: pc_blocking_submit(a->rt, job_run, job_free, j, reply_to);
	if (rc != 0)
		job_free(j);
	return rc;
}
