/*
 * Mock LLM scenarios: ordered steps with one cursor per session, a
 * default step, the models a scenario lists.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/hash.h"
#include "mailbox/atomics.h"
#include "runtime/error.h"
#include "mock_internal.h"

typedef struct session {
	struct session *next;
	size_t cursor;
	char key[];
} session_t;

struct pc_mock_scenario {
	uint32_t refs;
	pc_mock_step_t **steps;
	size_t step_count;
	pc_mock_step_t *dflt; /* NULL: the echo */
	bool loop;            /* after the last step, start again */
	char **models;
	size_t model_count;
	size_t cursor;        /* requests naming no session */
	session_t **buckets;  /* chained; grows with the session count */
	size_t bucket_count;
	size_t session_count;
};

static void sessions_clear(pc_mock_scenario_t *sc)
{
	for (size_t i = 0; i < sc->bucket_count; i++) {
		session_t *s = sc->buckets[i];
		while (s) {
			session_t *next = s->next;
			free(s);
			s = next;
		}
	}
	free(sc->buckets);
	sc->buckets = NULL;
	sc->bucket_count = 0;
	sc->session_count = 0;
}

static void scenario_free(pc_mock_scenario_t *sc)
{
	for (size_t i = 0; i < sc->step_count; i++)
		pc_mock_step_free(sc->steps[i]);
	free(sc->steps);
	pc_mock_step_free(sc->dflt);
	for (size_t i = 0; i < sc->model_count; i++)
		free(sc->models[i]);
	free(sc->models);
	sessions_clear(sc);
	free(sc);
}

static int parse_steps(const cJSON *arr, pc_mock_scenario_t *sc, char *err, size_t cap)
{
	if (!cJSON_IsArray(arr))
		return pc__mock_fail(err, cap, "steps: must be an array");
	int n = cJSON_GetArraySize(arr);
	if (n && !(sc->steps = calloc((size_t)n, sizeof(*sc->steps))))
		return PC_ENOMEM;
	const cJSON *j;
	cJSON_ArrayForEach(j, arr) {
		char path[32];
		snprintf(path, sizeof(path), "steps[%zu]", sc->step_count);
		where_t w = {path, err, cap};
		int rc = pc__mock_step_parse(j, &w, &sc->steps[sc->step_count]);
		if (rc)
			return rc;
		sc->step_count++;
	}
	return 0;
}

static int parse_models(const cJSON *arr, pc_mock_scenario_t *sc, char *err, size_t cap)
{
	int n = cJSON_GetArraySize(arr);
	if (!cJSON_IsArray(arr) || n == 0)
		return pc__mock_fail(err, cap, "models: must be a non-empty array of strings");
	if (!(sc->models = calloc((size_t)n, sizeof(char *))))
		return PC_ENOMEM;
	const cJSON *m;
	cJSON_ArrayForEach(m, arr) {
		if (!cJSON_IsString(m) || !*m->valuestring)
			return pc__mock_fail(err, cap, "models[%zu]: must be a non-empty string", sc->model_count);
		if (!(sc->models[sc->model_count] = pc__mock_dup_str(m->valuestring)))
			return PC_ENOMEM;
		sc->model_count++;
	}
	return 0;
}

static int parse_scenario(const cJSON *root, pc_mock_scenario_t *sc, char *err, size_t cap)
{
	if (cJSON_IsArray(root))
		return parse_steps(root, sc, err, cap);
	if (!cJSON_IsObject(root))
		return pc__mock_fail(err, cap, "a scenario must be an object or an array of steps");
	const cJSON *f;
	cJSON_ArrayForEach(f, root) {
		if (strcmp(f->string, "steps") && strcmp(f->string, "then") && strcmp(f->string, "default") &&
		    strcmp(f->string, "models"))
			return pc__mock_fail(err, cap, "%s: unknown key", f->string);
	}
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "steps");
	int rc = v ? parse_steps(v, sc, err, cap) : 0;
	if (rc)
		return rc;
	if ((v = cJSON_GetObjectItemCaseSensitive(root, "then"))) {
		if (cJSON_IsString(v) && !strcmp(v->valuestring, "loop"))
			sc->loop = true;
		else if (!cJSON_IsString(v) || strcmp(v->valuestring, "default"))
			return pc__mock_fail(err, cap, "then: must be \"default\" or \"loop\"");
	}
	if ((v = cJSON_GetObjectItemCaseSensitive(root, "default"))) {
		where_t w = {"default", err, cap};
		if ((rc = pc__mock_step_parse(v, &w, &sc->dflt)))
			return rc;
	}
	if ((v = cJSON_GetObjectItemCaseSensitive(root, "models")))
		rc = parse_models(v, sc, err, cap);
	return rc;
}

int pc_mock_scenario_parse(const char *json, size_t len, pc_mock_scenario_t **out, char *err,
			   size_t errcap)
{
	if (!json || !out)
		return PC_EINVAL;
	const char *end = json;
	cJSON *root = cJSON_ParseWithLengthOpts(json, len, &end, false);
	if (!root)
		return pc__mock_fail(err, errcap, "not valid JSON (near byte %zu)", (size_t)(end - json));
	int rc = PC_ENOMEM;
	pc_mock_scenario_t *sc = calloc(1, sizeof(*sc));
	if (sc) {
		sc->refs = 1;
		rc = parse_scenario(root, sc, err, errcap);
	}
	cJSON_Delete(root);
	if (rc) {
		if (sc)
			scenario_free(sc);
		return rc;
	}
	*out = sc;
	return 0;
}

pc_mock_scenario_t *pc_mock_scenario_retain(pc_mock_scenario_t *sc)
{
	if (sc)
		pc_atomic_faa_u32(&sc->refs, 1);
	return sc;
}

void pc_mock_scenario_release(pc_mock_scenario_t *sc)
{
	if (sc && pc_atomic_faa_u32(&sc->refs, (uint32_t)-1) == 1)
		scenario_free(sc);
}

/* Doubles the bucket array (rehashing); on ENOMEM the table stays as it
 * was, only longer chains. */
static void sessions_grow(pc_mock_scenario_t *sc)
{
	size_t n = sc->bucket_count ? sc->bucket_count * 2 : 64;
	session_t **nb = calloc(n, sizeof(*nb));
	if (!nb)
		return;
	for (size_t i = 0; i < sc->bucket_count; i++) {
		session_t *s = sc->buckets[i];
		while (s) {
			session_t *next = s->next;
			size_t b = pc__hash64_str(s->key) & (n - 1);
			s->next = nb[b];
			nb[b] = s;
			s = next;
		}
	}
	free(sc->buckets);
	sc->buckets = nb;
	sc->bucket_count = n;
}

/* The cursor of `key`, created at the first step; NULL when the table is
 * full (the caller uses the shared cursor) or memory ran out (*rc). */
static size_t *session_cursor(pc_mock_scenario_t *sc, const char *key, int *rc)
{
	if (sc->session_count >= sc->bucket_count)
		sessions_grow(sc);
	if (!sc->bucket_count) {
		*rc = PC_ENOMEM;
		return NULL;
	}
	size_t b = pc__hash64_str(key) & (sc->bucket_count - 1);
	for (session_t *s = sc->buckets[b]; s; s = s->next)
		if (!strcmp(s->key, key))
			return &s->cursor;
	if (sc->session_count >= PC_MOCK_MAX_SESSIONS)
		return NULL;
	size_t kl = strlen(key) + 1;
	session_t *s = malloc(sizeof(*s) + kl);
	if (!s) {
		*rc = PC_ENOMEM;
		return NULL;
	}
	memcpy(s->key, key, kl);
	s->cursor = 0;
	s->next = sc->buckets[b];
	sc->buckets[b] = s;
	sc->session_count++;
	return &s->cursor;
}

int pc_mock_scenario_next(pc_mock_scenario_t *sc, const char *session, const pc_mock_step_t **step,
			  pc_mock_source_t *src)
{
	if (!sc || !step || !src)
		return PC_EINVAL;
	int rc = 0;
	size_t *cur = &sc->cursor;
	if (session && *session) {
		size_t *sess = session_cursor(sc, session, &rc);
		if (rc)
			return rc;
		if (sess)
			cur = sess;
	}
	if (*cur >= sc->step_count && sc->loop)
		*cur = 0;
	if (*cur < sc->step_count) {
		*step = sc->steps[(*cur)++];
		*src = PC_MOCK_SRC_SCENARIO;
	} else {
		*step = sc->dflt;
		*src = PC_MOCK_SRC_DEFAULT;
	}
	return 0;
}

void pc_mock_scenario_rewind(pc_mock_scenario_t *sc)
{
	if (!sc)
		return;
	sc->cursor = 0;
	sessions_clear(sc);
}

const char *const *pc__mock_scenario_models(const pc_mock_scenario_t *sc, size_t *count)
{
	*count = sc ? sc->model_count : 0;
	return sc ? (const char *const *)sc->models : NULL;
}
