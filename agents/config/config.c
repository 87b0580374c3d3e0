/*
 * pincer.json parsed: defaults, environment overrides, validation. The
 * file is found and read in config_load.c, providers' classes and model
 * references are config_models.c's, and config_json.c prints it back.
 *
 * One pass over the parsed cJSON tree fills the struct and collects every
 * problem it sees, so a user fixes a file in one round instead of one error
 * at a time. Every key is fetched by name from an explicit list of allowed
 * keys; anything else in an object is reported as unknown (typos must not
 * be silently ignored).
 *
 * Memory: the parsed tree stays alive inside the config and the struct's
 * strings point into it. Everything else (arrays, copied environment
 * values, split model references) comes from a private arena of blocks that
 * pc_config_free releases in one walk, so no field needs its own free and a
 * caller may overwrite fields (CLI flags) without leaking or double-freeing.
 */
#include "config.h"
#include "config_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "io/io.h"
#include "exec_launchers.h"

/* The largest integer a JSON number (a double) holds exactly. */
#define BIG_INT ((int64_t)1 << 53)
/* Seconds fields: about 136 years, so seconds x 1000 never overflows. */
#define MAX_SECONDS ((int64_t)UINT32_MAX)
#define MAX_CONCURRENT_LIMIT 1000000
#define PATH_LEN 384

/* Header-comment defaults ("0: X") filled in so readers see real values. */
#define DEFAULT_RESERVE_TOKENS ((uint64_t)20000)
#define DEFAULT_COMPACTION_TIMEOUT_MS ((uint64_t)900 * 1000)
#define DEFAULT_BOOTSTRAP_MAX_CHARS ((uint64_t)20000)
#define DEFAULT_BOOTSTRAP_TOTAL_CHARS ((uint64_t)150000)

#define MOCK_PROVIDER "mock"
#define MOCK_MODEL "mock-model"

/* ---- the config and its arena ---- */

typedef struct block {
	struct block *next;
	max_align_t data[]; /* aligned for any field type */
} block_t;

typedef struct cfg {
	pc_config_t pub; /* first: a pc_config_t * is a cfg_t * */
	cJSON *root;
	block_t *blocks;
} cfg_t;

/* One parse: the config being built and every error found so far. */
typedef struct pctx {
	cfg_t *cfg;
	pc_config_errors_t errs;
	bool oom;
	bool providers_bad; /* "providers" itself unusable: no model default either */
} pctx_t;

static void *arena_alloc(pctx_t *x, size_t size)
{
	block_t *b = calloc(1, sizeof(*b) + (size ? size : 1));
	if (!b) {
		x->oom = true;
		return NULL;
	}
	b->next = x->cfg->blocks;
	x->cfg->blocks = b;
	return b->data;
}

static char *arena_strdup(pctx_t *x, const char *s)
{
	size_t n = strlen(s) + 1;
	char *d = arena_alloc(x, n);
	if (d)
		memcpy(d, s, n);
	return d;
}

void pc_config_free(pc_config_t *c)
{
	if (!c)
		return;
	cfg_t *cfg = (cfg_t *)c;
	block_t *b = cfg->blocks;
	while (b) {
		block_t *next = b->next;
		free(b);
		b = next;
	}
	cJSON_Delete(cfg->root);
	free(cfg);
}

void pc_config_errors_free(pc_config_errors_t *e)
{
	if (!e)
		return;
	for (size_t i = 0; i < e->count; i++)
		free(e->items[i]);
	free(e->items);
	e->items = NULL;
	e->count = 0;
}

/* ---- errors ---- */

/* Appends "path: message". An allocation failure marks the parse as out
 * of memory (reported as PC_ENOMEM) rather than losing the error quietly. */
__attribute__((format(printf, 3, 4))) static void err(pctx_t *x, const char *path, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (n < 0) {
		x->oom = true;
		return;
	}
	size_t len = strlen(path) + 2 + strlen(msg) + 1;
	char *item = malloc(len);
	char **items = realloc(x->errs.items, (x->errs.count + 1) * sizeof(*items));
	if (!item || !items) {
		free(item);
		if (items)
			x->errs.items = items;
		x->oom = true;
		return;
	}
	snprintf(item, len, "%s: %s", path, msg);
	x->errs.items = items;
	x->errs.items[x->errs.count++] = item;
}

/* A path cut short ends in "...": it only names the place in a message. */
static const char *path_done(char *buf, int n)
{
	if (n < 0)
		buf[0] = 0;
	else if (n >= PATH_LEN)
		memcpy(buf + PATH_LEN - 4, "...", 4);
	return buf;
}

/* "parent.key" (or "key" at the top). */
static const char *sub(char *buf, const char *parent, const char *key)
{
	return path_done(buf, snprintf(buf, PATH_LEN, "%s%s%s", parent, *parent ? "." : "", key));
}

static const char *at(char *buf, const char *parent, size_t i)
{
	return path_done(buf, snprintf(buf, PATH_LEN, "%s[%zu]", parent, i));
}

/* ---- typed getters: absent → false silently; wrong → error and false ---- */

/* Checks that `obj` is an object holding only `keys` (NULL-terminated),
 * each at most once. False (with an error) when it is not an object. */
static bool check_object(pctx_t *x, const cJSON *obj, const char *path, const char *const *keys)
{
	char p[PATH_LEN];
	if (!cJSON_IsObject(obj)) {
		err(x, path, "must be an object");
		return false;
	}
	for (const cJSON *it = obj->child; it; it = it->next) {
		bool known = false;
		for (size_t i = 0; keys[i] && !known; i++)
			known = strcmp(it->string, keys[i]) == 0;
		if (!known) {
			err(x, sub(p, path, it->string), "unknown key");
			continue;
		}
		for (const cJSON *prev = obj->child; prev != it; prev = prev->next) {
			if (strcmp(prev->string, it->string) == 0) {
				err(x, sub(p, path, it->string), "duplicate key");
				break;
			}
		}
	}
	return true;
}

static bool get_str(pctx_t *x, const cJSON *obj, const char *key, const char *path, bool nonempty,
		    const char **out)
{
	char p[PATH_LEN];
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
	if (!v)
		return false;
	if (!cJSON_IsString(v)) {
		err(x, sub(p, path, key), "must be a string");
		return false;
	}
	if (nonempty && !*v->valuestring) {
		err(x, sub(p, path, key), "must not be empty");
		return false;
	}
	*out = v->valuestring;
	return true;
}

static bool get_bool(pctx_t *x, const cJSON *obj, const char *key, const char *path, bool *out)
{
	char p[PATH_LEN];
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
	if (!v)
		return false;
	if (!cJSON_IsBool(v)) {
		err(x, sub(p, path, key), "must be true or false");
		return false;
	}
	*out = cJSON_IsTrue(v);
	return true;
}

/* An integer in [min, max] (max <= 2^53: doubles are exact up to there). */
static bool int_value(pctx_t *x, const cJSON *v, const char *path, int64_t min, int64_t max, int64_t *out)
{
	if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || floor(v->valuedouble) != v->valuedouble) {
		err(x, path, "must be an integer");
		return false;
	}
	double d = v->valuedouble;
	if (d < (double)min) {
		if (min == 0)
			err(x, path, "must not be negative");
		else
			err(x, path, "must be at least %lld", (long long)min);
		return false;
	}
	if (d > (double)max) {
		err(x, path, "must be at most %lld", (long long)max);
		return false;
	}
	*out = (int64_t)d;
	return true;
}

static bool get_int(pctx_t *x, const cJSON *obj, const char *key, const char *path, int64_t min, int64_t max,
		    int64_t *out)
{
	char p[PATH_LEN];
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
	return v && int_value(x, v, sub(p, path, key), min, max, out);
}

static bool get_u64(pctx_t *x, const cJSON *obj, const char *key, const char *path, int64_t min, int64_t max,
		    uint64_t *out)
{
	int64_t v;
	if (!get_int(x, obj, key, path, min, max, &v))
		return false;
	*out = (uint64_t)v;
	return true;
}

static bool get_u32(pctx_t *x, const cJSON *obj, const char *key, const char *path, int64_t min, int64_t max,
		    uint32_t *out)
{
	int64_t v;
	if (!get_int(x, obj, key, path, min, max > UINT32_MAX ? UINT32_MAX : max, &v))
		return false;
	*out = (uint32_t)v;
	return true;
}

/* Seconds in the file, milliseconds in the struct. */
static bool get_seconds_ms(pctx_t *x, const cJSON *obj, const char *key, const char *path, int64_t min,
			   uint64_t *out_ms)
{
	int64_t s;
	if (!get_int(x, obj, key, path, min, MAX_SECONDS, &s))
		return false;
	*out_ms = (uint64_t)s * 1000u;
	return true;
}

/* A context window: the guard of §1.2 refuses anything below the hard
 * minimum, so such a value can only be a mistake. */
static bool get_context_tokens(pctx_t *x, const cJSON *obj, const char *path, uint64_t *out)
{
	char p[PATH_LEN];
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, "contextTokens");
	int64_t n;
	if (!v || !int_value(x, v, sub(p, path, "contextTokens"), -BIG_INT, BIG_INT, &n))
		return false;
	if (n < (int64_t)PC_CONFIG_CONTEXT_HARD_MIN) {
		err(x, p, "below the minimum of %llu tokens (spec §1.2)",
		    (unsigned long long)PC_CONFIG_CONTEXT_HARD_MIN);
		return false;
	}
	*out = (uint64_t)n;
	return true;
}

/* An array of non-empty strings, at most `max` long. */
static bool get_str_array(pctx_t *x, const cJSON *obj, const char *key, const char *path, size_t max,
			  const cJSON **out, size_t *count)
{
	char p[PATH_LEN], q[PATH_LEN];
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
	if (!v)
		return false;
	sub(p, path, key);
	if (!cJSON_IsArray(v)) {
		err(x, p, "must be an array of strings");
		return false;
	}
	size_t n = (size_t)cJSON_GetArraySize(v), i = 0;
	bool ok = true;
	if (n > max) {
		err(x, p, "at most %zu entries", max);
		ok = false;
	}
	for (const cJSON *it = v->child; it; it = it->next, i++) {
		if (!cJSON_IsString(it) || !*it->valuestring) {
			err(x, at(q, p, i), "must be a non-empty string");
			ok = false;
		}
	}
	*out = v;
	*count = n;
	return ok;
}

/* Reads "provider/model" into arena strings and checks the provider
 * exists (providers are parsed before anything refers to them). */
static bool resolve_ref(pctx_t *x, const char *text, const char *path, pc_model_ref_t *out)
{
	char *copy = arena_strdup(x, text);
	pc_model_ref_t ref;
	if (!copy)
		return false;
	if (!pc__config_split_ref(copy, &ref)) {
		err(x, path, "must be \"provider/model\"");
		return false;
	}
	if (!pc_config_provider(&x->cfg->pub, ref.provider)) {
		err(x, path, "unknown provider \"%s\"", ref.provider);
		return false;
	}
	*out = ref;
	return true;
}

/* ---- providers ---- */

static bool valid_id(const char *id)
{
	if (!*id)
		return false;
	for (const char *s = id; *s; s++) {
		char ch = *s;
		bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
			  ch == '.' || ch == '_' || ch == '-';
		if (!ok)
			return false;
	}
	return true;
}

/* The value of the environment variable `name`, copied (the environment
 * may change after load); NULL when unset or empty, which is not an error:
 * a local server may need no key. */
static const char *env_key(pctx_t *x, const char *name)
{
	const char *v = getenv(name);
	return v && *v ? arena_strdup(x, v) : NULL;
}

/* apiKey / apiKeyEnv of a provider or a profile: at most one of them. */
static void parse_key(pctx_t *x, const cJSON *obj, const char *path, const char **out)
{
	char p[PATH_LEN];
	const char *key = NULL, *env = NULL;
	bool has_key = get_str(x, obj, "apiKey", path, false, &key);
	bool has_env = get_str(x, obj, "apiKeyEnv", path, true, &env);
	if (has_key && has_env) {
		err(x, sub(p, path, "apiKeyEnv"), "not allowed together with apiKey");
		return;
	}
	if (has_key)
		*out = key;
	else if (has_env)
		*out = env_key(x, env);
}

static void parse_profiles(pctx_t *x, const cJSON *arr, const char *path, pc_provider_config_t *p)
{
	static const char *const keys[] = {"id", "apiKey", "apiKeyEnv", NULL};
	char q[PATH_LEN], r[PATH_LEN];
	if (!cJSON_IsArray(arr)) {
		err(x, path, "must be an array of objects");
		return;
	}
	size_t n = (size_t)cJSON_GetArraySize(arr), i = 0;
	if (n == 0) {
		err(x, path, "must list at least one profile");
		return;
	}
	if (n > PC_RUN_MAX_PROFILES) {
		err(x, path, "at most %u profiles", PC_RUN_MAX_PROFILES);
		return;
	}
	pc_auth_profile_config_t *prof = arena_alloc(x, n * sizeof(*prof));
	if (!prof)
		return;
	for (const cJSON *it = arr->child; it; it = it->next, i++) {
		at(q, path, i);
		prof[i].id = "";
		if (!check_object(x, it, q, keys))
			continue;
		if (!get_str(x, it, "id", q, true, &prof[i].id) &&
		    !cJSON_GetObjectItemCaseSensitive(it, "id"))
			err(x, sub(r, q, "id"), "required");
		parse_key(x, it, q, &prof[i].api_key);
		for (size_t j = 0; j < i && *prof[i].id; j++) {
			if (strcmp(prof[j].id, prof[i].id) == 0) {
				err(x, sub(r, q, "id"), "duplicate profile id \"%s\"", prof[i].id);
				break;
			}
		}
	}
	p->profiles = prof;
	p->profile_count = n;
}

static void parse_models(pctx_t *x, const cJSON *arr, const char *path, pc_provider_config_t *p)
{
	static const char *const keys[] = {"id", "contextTokens", "maxTokens", "reasoning", NULL};
	char q[PATH_LEN], r[PATH_LEN];
	if (!cJSON_IsArray(arr)) {
		err(x, path, "must be an array of objects");
		return;
	}
	size_t n = (size_t)cJSON_GetArraySize(arr), i = 0;
	if (n > PC_CONFIG_MAX_MODELS) {
		err(x, path, "at most %u models", PC_CONFIG_MAX_MODELS);
		return;
	}
	pc_model_config_t *models = arena_alloc(x, n * sizeof(*models));
	if (!models)
		return;
	for (const cJSON *it = arr->child; it; it = it->next, i++) {
		at(q, path, i);
		models[i].id = "";
		if (!check_object(x, it, q, keys))
			continue;
		if (!get_str(x, it, "id", q, true, &models[i].id) &&
		    !cJSON_GetObjectItemCaseSensitive(it, "id"))
			err(x, sub(r, q, "id"), "required");
		get_context_tokens(x, it, q, &models[i].context_tokens);
		get_int(x, it, "maxTokens", q, 0, BIG_INT, &models[i].max_tokens);
		get_bool(x, it, "reasoning", q, &models[i].reasoning);
		for (size_t j = 0; j < i && *models[i].id; j++) {
			if (strcmp(models[j].id, models[i].id) == 0) {
				err(x, sub(r, q, "id"), "duplicate model id \"%s\"", models[i].id);
				break;
			}
		}
	}
	p->models = models;
	p->model_count = n;
}

static void parse_provider(pctx_t *x, const cJSON *pj, const char *path, pc_provider_config_t *p)
{
	static const char *const keys[] = {"api", "baseUrl", "embedded", "apiKey", "apiKeyEnv", "profiles",
					   "idleTimeoutSeconds", "timeoutSeconds", "contextTokens", "class",
					   "http2", "models", NULL};
	char q[PATH_LEN];
	const char *s = NULL;
	p->id = pj->string;
	if (!valid_id(p->id))
		err(x, path, "invalid provider id (use letters, digits, '.', '_' and '-')");
	if (!check_object(x, pj, path, keys))
		return;

	get_bool(x, pj, "embedded", path, &p->embedded);
	char apis[256];
	if (get_str(x, pj, "api", path, false, &s)) {
		if (pc_provider_api_parse(s, &p->api) != 0) {
			pc_provider_api_names(", ", apis, sizeof(apis));
			err(x, sub(q, path, "api"), "must be one of %s", apis);
		}
	} else if (!cJSON_GetObjectItemCaseSensitive(pj, "api")) {
		/* The mock speaks both; a real server must say which. */
		if (p->embedded) {
			p->api = PC_API_OPENAI_COMPLETIONS;
		} else {
			pc_provider_api_names(" or ", apis, sizeof(apis));
			err(x, sub(q, path, "api"), "required (%s)", apis);
		}
	}

	if (get_str(x, pj, "baseUrl", path, false, &s)) {
		char host[256];
		sub(q, path, "baseUrl");
		if (strncasecmp(s, "http://", 7) != 0 && strncasecmp(s, "https://", 8) != 0)
			err(x, q, "must start with http:// or https://");
		else if (!pc__config_url_host(s, host, sizeof(host)))
			err(x, q, "has no host");
		else if (p->embedded)
			err(x, q, "not allowed on an embedded provider (its address is set at start)");
		else
			p->base_url = s;
	} else if (!p->embedded && !cJSON_GetObjectItemCaseSensitive(pj, "baseUrl")) {
		err(x, sub(q, path, "baseUrl"), "required unless embedded is true");
	}

	const cJSON *profiles = cJSON_GetObjectItemCaseSensitive(pj, "profiles");
	if (profiles) {
		if (cJSON_GetObjectItemCaseSensitive(pj, "apiKey"))
			err(x, sub(q, path, "apiKey"), "not allowed together with profiles");
		if (cJSON_GetObjectItemCaseSensitive(pj, "apiKeyEnv"))
			err(x, sub(q, path, "apiKeyEnv"), "not allowed together with profiles");
		parse_profiles(x, profiles, sub(q, path, "profiles"), p);
	} else {
		pc_auth_profile_config_t *one = arena_alloc(x, sizeof(*one));
		if (one) {
			one->id = "default";
			parse_key(x, pj, path, &one->api_key);
			p->profiles = one;
			p->profile_count = 1;
		}
	}

	uint64_t idle_ms = 0;
	bool has_idle = get_seconds_ms(x, pj, "idleTimeoutSeconds", path, 0, &idle_ms);
	get_seconds_ms(x, pj, "timeoutSeconds", path, 0, &p->request_timeout_ms);
	get_context_tokens(x, pj, path, &p->context_tokens);

	p->cls = pc__config_classify(p);
	if (get_str(x, pj, "class", path, false, &s)) {
		size_t i = 0;
		while (i < PC__CONFIG_CLASSES && strcmp(s, pc__config_class_name((pc_provider_class_t)i)) != 0)
			i++;
		if (i < PC__CONFIG_CLASSES)
			p->cls = (pc_provider_class_t)i;
		else
			err(x, sub(q, path, "class"), "must be one of cloud, self-hosted, local");
	}
	p->idle_timeout_ms = has_idle ? idle_ms : pc__config_class_idle_ms(p->cls);

	if (get_str(x, pj, "http2", path, false, &s)) {
		if (strcmp(s, "prior-knowledge") == 0)
			p->http2 = PC_PROVIDER_HTTP2_PRIOR_KNOWLEDGE;
		else
			err(x, sub(q, path, "http2"), "must be prior-knowledge (or absent)");
	}

	const cJSON *models = cJSON_GetObjectItemCaseSensitive(pj, "models");
	if (models)
		parse_models(x, models, sub(q, path, "models"), p);
}

/* The embedded mock: what `pincer agent --local` runs on a fresh machine. */
static void add_mock(pctx_t *x)
{
	pc_provider_config_t *p = arena_alloc(x, sizeof(*p));
	pc_auth_profile_config_t *prof = arena_alloc(x, sizeof(*prof));
	if (!p || !prof)
		return;
	prof->id = "default";
	p->id = MOCK_PROVIDER;
	p->api = PC_API_OPENAI_COMPLETIONS;
	p->embedded = true;
	p->cls = PC_PROVIDER_LOCAL;
	p->idle_timeout_ms = pc__config_class_idle_ms(PC_PROVIDER_LOCAL);
	p->profiles = prof;
	p->profile_count = 1;
	x->cfg->pub.providers = p;
	x->cfg->pub.provider_count = 1;
}

static void parse_providers(pctx_t *x, const cJSON *root)
{
	const cJSON *pj = cJSON_GetObjectItemCaseSensitive(root, "providers");
	char q[PATH_LEN];
	size_t n = 0, i = 0;
	if (pj && !cJSON_IsObject(pj)) {
		err(x, "providers", "must be an object");
		x->providers_bad = true;
		return;
	}
	n = pj ? (size_t)cJSON_GetArraySize(pj) : 0;
	if (n == 0) {
		add_mock(x);
		return;
	}
	if (n > PC_CONFIG_MAX_PROVIDERS) {
		err(x, "providers", "at most %u providers", PC_CONFIG_MAX_PROVIDERS);
		x->providers_bad = true;
		return;
	}
	pc_provider_config_t *ps = arena_alloc(x, n * sizeof(*ps));
	if (!ps)
		return;
	/* Published before parsing, so a duplicate id is found by name. */
	x->cfg->pub.providers = ps;
	for (const cJSON *it = pj->child; it; it = it->next, i++) {
		sub(q, "providers", it->string);
		if (pc_config_provider(&x->cfg->pub, it->string)) {
			ps[i].id = it->string;
			err(x, q, "duplicate key");
		} else {
			parse_provider(x, it, q, &ps[i]);
		}
		x->cfg->pub.provider_count = i + 1;
	}
}

/* ---- agents.defaults ---- */

/* "20mb", "512 KiB" is not accepted: b, k/kb, m/mb, g/gb, 1024-based. */
static bool parse_size(const char *s, uint64_t *out)
{
	char *end = NULL;
	if (*s < '0' || *s > '9')
		return false;
	errno = 0;
	unsigned long long n = strtoull(s, &end, 10);
	if (errno)
		return false;
	while (*end == ' ')
		end++;
	static const struct {
		const char *suffix;
		unsigned shift;
	} units[] = {{"", 0}, {"b", 0}, {"k", 10}, {"kb", 10}, {"m", 20}, {"mb", 20}, {"g", 30}, {"gb", 30}};
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (strcasecmp(end, units[i].suffix) == 0) {
			if (n > ((unsigned long long)BIG_INT >> units[i].shift))
				return false;
			*out = (uint64_t)n << units[i].shift;
			return true;
		}
	}
	return false;
}

static void parse_compaction(pctx_t *x, const cJSON *cj, const char *path, pc_compaction_config_t *c)
{
	static const char *const keys[] = {"enabled", "reserveTokens", "keepRecentTokens", "timeoutSeconds",
					   "model", "maxActiveTranscriptBytes", NULL};
	char q[PATH_LEN];
	const char *s = NULL;
	if (!check_object(x, cj, path, keys))
		return;
	get_bool(x, cj, "enabled", path, &c->enabled);
	if (get_u64(x, cj, "reserveTokens", path, 0, BIG_INT, &c->reserve_tokens) && !c->reserve_tokens)
		c->reserve_tokens = DEFAULT_RESERVE_TOKENS;
	if (get_u64(x, cj, "keepRecentTokens", path, 0, BIG_INT, &c->keep_recent_tokens) && !c->keep_recent_tokens)
		c->keep_recent_tokens = PC_CONFIG_DEFAULT_KEEP_RECENT_TOKENS;
	if (get_seconds_ms(x, cj, "timeoutSeconds", path, 0, &c->timeout_ms) && !c->timeout_ms)
		c->timeout_ms = DEFAULT_COMPACTION_TIMEOUT_MS;
	if (get_str(x, cj, "model", path, true, &s))
		resolve_ref(x, s, sub(q, path, "model"), &c->model);
	const cJSON *mb = cJSON_GetObjectItemCaseSensitive(cj, "maxActiveTranscriptBytes");
	if (mb) {
		sub(q, path, "maxActiveTranscriptBytes");
		if (cJSON_IsString(mb)) {
			if (!parse_size(mb->valuestring, &c->max_transcript_bytes))
				err(x, q, "must be a byte count or a size like \"20mb\"");
		} else if (cJSON_IsNumber(mb)) {
			int64_t n;
			if (int_value(x, mb, q, 0, BIG_INT, &n))
				c->max_transcript_bytes = (uint64_t)n;
		} else {
			err(x, q, "must be a byte count or a size like \"20mb\"");
		}
	}
}

static void parse_retries(pctx_t *x, const cJSON *rj, const char *path, pc_run_retries_config_t *r)
{
	static const char *const keys[] = {"base", "perProfile", "min", "max", NULL};
	char q[PATH_LEN];
	if (!check_object(x, rj, path, keys))
		return;
	r->has_base = get_int(x, rj, "base", path, 1, 100000, &r->base);
	r->has_per_profile = get_int(x, rj, "perProfile", path, 0, 100000, &r->per_profile);
	r->has_min = get_int(x, rj, "min", path, 1, 100000, &r->min);
	r->has_max = get_int(x, rj, "max", path, 1, 100000, &r->max);
	if (r->has_min && r->has_max && r->max < r->min)
		err(x, sub(q, path, "max"), "must not be below min (%lld)", (long long)r->min);
}

static void parse_fallbacks(pctx_t *x, const cJSON *dj, const char *path, pc_agent_defaults_t *a)
{
	char p[PATH_LEN], q[PATH_LEN];
	const cJSON *arr = NULL;
	size_t n = 0, i = 0;
	if (!get_str_array(x, dj, "fallbacks", path, PC_CONFIG_MAX_FALLBACKS, &arr, &n))
		return;
	sub(p, path, "fallbacks");
	for (const cJSON *it = arr->child; it; it = it->next, i++)
		resolve_ref(x, it->valuestring, at(q, p, i), &a->fallbacks[i]);
	a->fallback_count = n;
}

static const char *const *names_of(pctx_t *x, const cJSON *arr, size_t n)
{
	const char **names = arena_alloc(x, (n ? n : 1) * sizeof(*names));
	size_t i = 0;
	for (const cJSON *it = arr->child; names && it; it = it->next, i++)
		names[i] = it->valuestring;
	return names;
}

static void parse_exec(pctx_t *x, const cJSON *ej, const char *path, pc_exec_config_t *e)
{
	static const char *const keys[] = {"mode", "allow", "env", "timeoutSeconds", "cgroup", NULL};
	char q[PATH_LEN];
	const cJSON *arr = NULL;
	const char *s = NULL;
	size_t n = 0;
	if (!check_object(x, ej, path, keys))
		return;
	if (get_str(x, ej, "mode", path, false, &s)) {
		if (!strcmp(s, "full"))
			e->mode = PC_CONFIG_EXEC_FULL;
		else if (!strcmp(s, "allowlist"))
			e->mode = PC_CONFIG_EXEC_ALLOWLIST;
		else if (!strcmp(s, "off"))
			e->mode = PC_CONFIG_EXEC_OFF;
		else
			err(x, sub(q, path, "mode"), "must be one of full, allowlist, off");
	}
	if (get_str_array(x, ej, "allow", path, 1024, &arr, &n)) {
		e->allow = names_of(x, arr, n);
		e->allow_count = n;
		/* allowlist confines the program, not its arguments: a program
		 * that runs others would let any command through. */
		char list[PATH_LEN];
		sub(list, path, "allow");
		for (size_t i = 0; e->allow && i < n; i++)
			if (pc_exec_is_launcher(e->allow[i]))
				err(x, at(q, list, i),
				    "\"%s\" runs other programs or code, so allowing it allows every command; list "
				    "the programs themselves (docs/tools.md names the refused launchers)",
				    e->allow[i]);
	}
	if (get_str_array(x, ej, "env", path, 1024, &arr, &n)) {
		e->env = names_of(x, arr, n);
		e->env_count = n;
	}
	get_seconds_ms(x, ej, "timeoutSeconds", path, 1, &e->timeout_ms);
	if (get_str(x, ej, "cgroup", path, false, &s)) {
		if (!strcmp(s, "off"))
			e->cgroup_off = true;
		else if (strcmp(s, "auto") != 0)
			err(x, sub(q, path, "cgroup"), "must be one of auto, off");
	}
	if (e->mode == PC_CONFIG_EXEC_ALLOWLIST && e->allow_count == 0)
		err(x, sub(q, path, "allow"), "required (non-empty) when mode is allowlist");
}

static void parse_tools(pctx_t *x, const cJSON *tj, const char *path, pc_agent_defaults_t *a)
{
	static const char *const keys[] = {"allow", "exec", NULL};
	char q[PATH_LEN];
	const cJSON *arr = NULL, *o;
	size_t n = 0;
	if (!check_object(x, tj, path, keys))
		return;
	if (get_str_array(x, tj, "allow", path, SIZE_MAX, &arr, &n)) {
		a->tools_allow = names_of(x, arr, n);
		a->tools_allow_count = n;
	}
	if ((o = cJSON_GetObjectItemCaseSensitive(tj, "exec")))
		parse_exec(x, o, sub(q, path, "exec"), &a->exec);
}

/* §4.2: thresholds are whole numbers >= 1 (the detectors then force
 * critical > warning and global > critical). */
static void parse_loop_detection(pctx_t *x, const cJSON *lj, const char *path, pc_agent_defaults_t *a)
{
	static const char *const keys[] = {"enabled", "historySize", "warningThreshold", "criticalThreshold",
					   "globalCircuitBreakerThreshold", "detectors", "postCompactionGuard",
					   NULL};
	static const char *const det_keys[] = {"genericRepeat", "knownPollNoProgress", "pingPong", NULL};
	static const char *const pcg_keys[] = {"windowSize", NULL};
	pc_loop_detection_config_t *l = &a->loop_detection;
	char q[PATH_LEN];
	const cJSON *o;
	if (!check_object(x, lj, path, keys))
		return;
	if (get_bool(x, lj, "enabled", path, &l->enabled)) {
		l->enabled_set = true;
		a->loop_guard = l->enabled;
	}
	get_u32(x, lj, "historySize", path, 1, 10000, &l->history_size);
	get_u32(x, lj, "warningThreshold", path, 1, 10000, &l->warning_threshold);
	get_u32(x, lj, "criticalThreshold", path, 1, 10000, &l->critical_threshold);
	get_u32(x, lj, "globalCircuitBreakerThreshold", path, 1, 10000, &l->global_threshold);
	if ((o = cJSON_GetObjectItemCaseSensitive(lj, "detectors"))) {
		sub(q, path, "detectors");
		if (check_object(x, o, q, det_keys)) {
			get_bool(x, o, "genericRepeat", q, &l->generic_repeat);
			get_bool(x, o, "knownPollNoProgress", q, &l->known_poll_no_progress);
			get_bool(x, o, "pingPong", q, &l->ping_pong);
		}
	}
	if ((o = cJSON_GetObjectItemCaseSensitive(lj, "postCompactionGuard"))) {
		sub(q, path, "postCompactionGuard");
		if (check_object(x, o, q, pcg_keys))
			get_u32(x, o, "windowSize", q, 1, 1000, &l->post_compaction_window);
	}
}

static void parse_agent_defaults(pctx_t *x, const cJSON *dj, const char *path, pc_agent_defaults_t *a)
{
	static const char *const keys[] = {"model", "fallbacks", "timeoutSeconds", "maxConcurrent", "thinking",
					   "systemPrompt", "workspace", "bootstrapMaxChars",
					   "bootstrapTotalMaxChars", "toolMode", "tools", "compaction",
					   "runRetries", "idleBreaker", "loopDetection", "sessionIdleSeconds",
					   NULL};
	char q[PATH_LEN];
	const char *s = NULL;
	const cJSON *o;
	if (!check_object(x, dj, path, keys))
		return;
	if (get_str(x, dj, "model", path, true, &s))
		resolve_ref(x, s, sub(q, path, "model"), &a->model);
	parse_fallbacks(x, dj, path, a);
	get_seconds_ms(x, dj, "timeoutSeconds", path, 0, &a->run_timeout_ms);
	get_u32(x, dj, "maxConcurrent", path, 1, MAX_CONCURRENT_LIMIT, &a->max_concurrent);
	if (get_str(x, dj, "thinking", path, false, &s) && pc_think_level_parse(s, &a->think) != 0)
		err(x, sub(q, path, "thinking"),
		    "must be one of off, minimal, low, medium, high, xhigh, adaptive, max");
	get_str(x, dj, "systemPrompt", path, false, &a->system_prompt);
	get_str(x, dj, "workspace", path, true, &a->workspace);
	if (get_u64(x, dj, "bootstrapMaxChars", path, 0, BIG_INT, &a->bootstrap_max_chars) &&
	    !a->bootstrap_max_chars)
		a->bootstrap_max_chars = DEFAULT_BOOTSTRAP_MAX_CHARS;
	if (get_u64(x, dj, "bootstrapTotalMaxChars", path, 0, BIG_INT, &a->bootstrap_total_chars) &&
	    !a->bootstrap_total_chars)
		a->bootstrap_total_chars = DEFAULT_BOOTSTRAP_TOTAL_CHARS;
	if (get_str(x, dj, "toolMode", path, false, &s)) {
		if (strcmp(s, "sequential") == 0)
			a->tool_mode = PC_TOOLS_SEQUENTIAL;
		else if (strcmp(s, "parallel") == 0)
			a->tool_mode = PC_TOOLS_PARALLEL;
		else
			err(x, sub(q, path, "toolMode"), "must be one of sequential, parallel");
	}
	if ((o = cJSON_GetObjectItemCaseSensitive(dj, "tools")))
		parse_tools(x, o, sub(q, path, "tools"), a);
	if ((o = cJSON_GetObjectItemCaseSensitive(dj, "compaction")))
		parse_compaction(x, o, sub(q, path, "compaction"), &a->compaction);
	if ((o = cJSON_GetObjectItemCaseSensitive(dj, "runRetries")))
		parse_retries(x, o, sub(q, path, "runRetries"), &a->retries);
	get_u32(x, dj, "idleBreaker", path, 0, 1000000, &a->idle_breaker_cap);
	if ((o = cJSON_GetObjectItemCaseSensitive(dj, "loopDetection")))
		parse_loop_detection(x, o, sub(q, path, "loopDetection"), a);
	get_seconds_ms(x, dj, "sessionIdleSeconds", path, 0, &a->session_idle_ms);
}

/* ---- the other sections ---- */

static void parse_agents(pctx_t *x, const cJSON *root)
{
	static const char *const keys[] = {"defaults", NULL};
	const cJSON *aj = cJSON_GetObjectItemCaseSensitive(root, "agents");
	if (!aj || !check_object(x, aj, "agents", keys))
		return;
	const cJSON *dj = cJSON_GetObjectItemCaseSensitive(aj, "defaults");
	if (dj)
		parse_agent_defaults(x, dj, "agents.defaults", &x->cfg->pub.agent);
}

static void parse_auth(pctx_t *x, const cJSON *root)
{
	static const char *const keys[] = {"cooldowns", NULL};
	static const char *const cd_keys[] = {"rateLimitedProfileRotations", "overloadedProfileRotations",
					      "overloadedBackoffMs", NULL};
	pc_agent_defaults_t *a = &x->cfg->pub.agent;
	const cJSON *aj = cJSON_GetObjectItemCaseSensitive(root, "auth");
	if (!aj || !check_object(x, aj, "auth", keys))
		return;
	const cJSON *cj = cJSON_GetObjectItemCaseSensitive(aj, "cooldowns");
	const char *path = "auth.cooldowns";
	if (!cj || !check_object(x, cj, path, cd_keys))
		return;
	get_u32(x, cj, "rateLimitedProfileRotations", path, 0, 1000, &a->rate_limit_rotations);
	get_u32(x, cj, "overloadedProfileRotations", path, 0, 1000, &a->overload_rotations);
	get_u64(x, cj, "overloadedBackoffMs", path, 0, (int64_t)24 * 3600 * 1000, &a->overloaded_backoff_ms);
}

/* plugins.entries.<id>: {path, enabled?, config?}. */
static void parse_plugin(pctx_t *x, const cJSON *pj, const char *path, pc_plugin_config_t *p)
{
	static const char *const keys[] = {"path", "enabled", "config", NULL};
	char q[PATH_LEN];
	p->enabled = true;
	p->config_json = "{}";
	if (!check_object(x, pj, path, keys))
		return;
	if (!get_str(x, pj, "path", path, true, &p->path) && !cJSON_GetObjectItemCaseSensitive(pj, "path"))
		err(x, sub(q, path, "path"), "required");
	get_bool(x, pj, "enabled", path, &p->enabled);
	const cJSON *c = cJSON_GetObjectItemCaseSensitive(pj, "config");
	if (!c)
		return;
	if (!cJSON_IsObject(c)) {
		err(x, sub(q, path, "config"), "must be an object");
		return;
	}
	char *text = cJSON_PrintUnformatted(c);
	if (!text) {
		x->oom = true;
		return;
	}
	p->config_json = arena_strdup(x, text);
	cJSON_free(text);
}

static void parse_plugins(pctx_t *x, const cJSON *root)
{
	static const char *const keys[] = {"entries", NULL};
	const cJSON *pj = cJSON_GetObjectItemCaseSensitive(root, "plugins");
	if (!pj || !check_object(x, pj, "plugins", keys))
		return;
	const cJSON *ej = cJSON_GetObjectItemCaseSensitive(pj, "entries");
	if (!ej)
		return;
	if (!cJSON_IsObject(ej)) {
		err(x, "plugins.entries", "must be an object");
		return;
	}
	size_t n = (size_t)cJSON_GetArraySize(ej), i = 0;
	if (n > PC_CONFIG_MAX_PLUGINS) {
		err(x, "plugins.entries", "at most %u plugins", PC_CONFIG_MAX_PLUGINS);
		return;
	}
	pc_plugin_config_t *ps = arena_alloc(x, (n ? n : 1) * sizeof(*ps));
	if (!ps)
		return;
	char q[PATH_LEN];
	for (const cJSON *it = ej->child; it; it = it->next, i++) {
		ps[i].id = it->string;
		sub(q, "plugins.entries", it->string);
		if (!*it->string || strspn(it->string, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.") !=
					    strlen(it->string))
			err(x, q, "a plugin id is letters, digits, '_', '-' and '.'");
		for (const cJSON *prev = ej->child; prev != it; prev = prev->next)
			if (!strcmp(prev->string, it->string))
				err(x, q, "duplicate key");
		parse_plugin(x, it, q, &ps[i]);
	}
	x->cfg->pub.plugins = ps;
	x->cfg->pub.plugin_count = n;
}

static void parse_messages(pctx_t *x, const cJSON *root)
{
	static const char *const keys[] = {"queue", NULL};
	static const char *const q_keys[] = {"mode", "debounceMs", "cap", "drop", NULL};
	pc_queue_settings_t *qs = &x->cfg->pub.agent.queue;
	const char *path = "messages.queue", *s = NULL;
	char q[PATH_LEN];
	const cJSON *mj = cJSON_GetObjectItemCaseSensitive(root, "messages");
	if (!mj || !check_object(x, mj, "messages", keys))
		return;
	const cJSON *qj = cJSON_GetObjectItemCaseSensitive(mj, "queue");
	if (!qj || !check_object(x, qj, path, q_keys))
		return;
	if (get_str(x, qj, "mode", path, false, &s) && pc_queue_mode_parse(s, &qs->mode) != 0)
		err(x, sub(q, path, "mode"), "must be one of steer, followup, collect, interrupt, steer-backlog");
	get_u32(x, qj, "debounceMs", path, 0, 3600 * 1000, &qs->debounce_ms);
	get_u32(x, qj, "cap", path, 1, 100000, &qs->cap);
	if (get_str(x, qj, "drop", path, false, &s) && pc_queue_drop_parse(s, &qs->drop) != 0)
		err(x, sub(q, path, "drop"), "must be one of old, new, summarize");
}

static void parse_diagnostics(pctx_t *x, const cJSON *root)
{
	static const char *const keys[] = {"enabled", "stuckSessionWarnMs", "stuckSessionAbortMs", NULL};
	pc_diagnostics_config_t *d = &x->cfg->pub.diagnostics;
	const char *path = "diagnostics";
	char q[PATH_LEN];
	uint64_t warn = 0, abort_ms = 0;
	const cJSON *dj = cJSON_GetObjectItemCaseSensitive(root, "diagnostics");
	if (!dj || !check_object(x, dj, path, keys))
		return;
	get_bool(x, dj, "enabled", path, &d->enabled);
	/* §9.2 falls back to the default outside 1 s – 24 h; a file that says
	 * so is wrong, so it is reported instead. */
	if (get_u64(x, dj, "stuckSessionWarnMs", path, (int64_t)PC_DIAG_WARN_MIN_MS, (int64_t)PC_DIAG_WARN_MAX_MS,
		    &warn))
		d->warn_ms = warn;
	if (get_u64(x, dj, "stuckSessionAbortMs", path, 0, BIG_INT, &abort_ms)) {
		if (abort_ms && abort_ms < d->warn_ms)
			err(x, sub(q, path, "stuckSessionAbortMs"), "must not be below stuckSessionWarnMs (%llu)",
			    (unsigned long long)d->warn_ms);
		else
			d->abort_ms = pc_diag_abort_ms(d->warn_ms, abort_ms);
	} else {
		d->abort_ms = pc_diag_abort_ms(d->warn_ms, 0);
	}
}

/* True for an address only this machine can reach. */
static bool loopback_address(const char *a)
{
	pc_netaddr_t n;
	return !strcmp(a, "localhost") || (pc_netaddr_parse(a, strlen(a), &n) == 0 && pc_netaddr_is_loopback(&n));
}

static void parse_auth_limit(pctx_t *x, const cJSON *aj, const char *path, pc_gateway_auth_limit_t *l)
{
	static const char *const keys[] = {"maxAttempts", "windowMs", "lockoutMs", "maxLockoutMs", "exemptLoopback",
					   NULL};
	char q[PATH_LEN];
	const cJSON *rj = cJSON_GetObjectItemCaseSensitive(aj, "rateLimit");
	if (!rj || !check_object(x, rj, sub(q, path, "rateLimit"), keys))
		return;
	get_u32(x, rj, "maxAttempts", q, 0, 1000000, &l->max_attempts);
	get_u64(x, rj, "windowMs", q, 1000, 86400000, &l->window_ms);
	get_u64(x, rj, "lockoutMs", q, 1000, 86400000, &l->lockout_ms);
	get_u64(x, rj, "maxLockoutMs", q, 1000, 86400000, &l->max_lockout_ms);
	get_bool(x, rj, "exemptLoopback", q, &l->exempt_loopback);
	if (l->max_lockout_ms < l->lockout_ms)
		err(x, q, "maxLockoutMs must be at least lockoutMs");
}

/* gateway.allowedOrigins and gateway.trustedProxies: lists whose entries
 * must parse the way the gateway will read them. */
static void parse_gateway_lists(pctx_t *x, const cJSON *gj, pc_gateway_config_t *g)
{
	char q[PATH_LEN];
	const cJSON *arr = NULL;
	size_t n = 0, i = 0;
	if (get_str_array(x, gj, "allowedOrigins", "gateway", 256, &arr, &n)) {
		for (const cJSON *it = arr->child; it; it = it->next, i++) {
			pc_origin_t o;
			if (pc_origin_parse(it->valuestring, strlen(it->valuestring), &o) != 0)
				err(x, at(q, "gateway.allowedOrigins", i),
				    "\"%s\" is not an origin: scheme://host[:port] with http or https and nothing after "
				    "(no path, no wildcard)",
				    it->valuestring);
		}
		g->allowed_origins = names_of(x, arr, n);
		g->allowed_origin_count = n;
	}
	i = 0;
	if (get_str_array(x, gj, "trustedProxies", "gateway", 256, &arr, &n)) {
		for (const cJSON *it = arr->child; it; it = it->next, i++) {
			pc_netcidr_t c;
			if (pc_netcidr_parse(it->valuestring, &c) != 0)
				err(x, at(q, "gateway.trustedProxies", i),
				    "\"%s\" is not a numeric address or CIDR range (\"127.0.0.1\", \"10.0.0.0/8\", \"::1\")",
				    it->valuestring);
		}
		g->trusted_proxies = names_of(x, arr, n);
		g->trusted_proxy_count = n;
	}
}

static void parse_gateway(pctx_t *x, const cJSON *root)
{
	static const char *const keys[] = {"bind",	     "port",	       "auth",
					   "tickIntervalMs", "maxPayloadBytes", "maxBufferedBytes",
					   "handshakeTimeoutMs", "drainSeconds", "allowedOrigins",
					   "trustedProxies", "http", "deltaIntervalMs", "controlUi", NULL};
	static const char *const http_keys[] = {"sseKeepAliveMs", NULL};
	static const char *const ui_keys[] = {"enabled", "root", NULL};
	static const char *const auth_keys[] = {"mode", "token", "password", "rateLimit", NULL};
	pc_gateway_config_t *g = &x->cfg->pub.gateway;
	const char *path = "gateway", *s = NULL;
	char q[PATH_LEN];
	const cJSON *gj = cJSON_GetObjectItemCaseSensitive(root, "gateway");
	if (!gj || !check_object(x, gj, path, keys))
		return;
	if (get_str(x, gj, "bind", path, true, &g->bind) && !strcmp(g->bind, "localhost"))
		g->bind = "127.0.0.1";
	uint32_t port = g->port;
	if (get_u32(x, gj, "port", path, 0, 65535, &port))
		g->port = (uint16_t)port;
	get_u64(x, gj, "tickIntervalMs", path, 1000, 3600000, &g->tick_ms);
	get_u64(x, gj, "maxPayloadBytes", path, 1024, (int64_t)1 << 30, &g->max_payload);
	get_u64(x, gj, "maxBufferedBytes", path, 65536, (int64_t)4 << 30, &g->max_buffered);
	get_u64(x, gj, "handshakeTimeoutMs", path, 100, 600000, &g->handshake_ms);
	get_u64(x, gj, "deltaIntervalMs", path, 0, 10000, &g->delta_interval_ms);
	get_seconds_ms(x, gj, "drainSeconds", path, 0, &g->drain_ms);
	parse_gateway_lists(x, gj, g);
	const cJSON *uj = cJSON_GetObjectItemCaseSensitive(gj, "controlUi");
	if (uj && check_object(x, uj, sub(q, path, "controlUi"), ui_keys)) {
		get_bool(x, uj, "enabled", q, &g->control_ui_enabled);
		get_str(x, uj, "root", q, true, &g->control_ui_root);
	}
	const cJSON *hj = cJSON_GetObjectItemCaseSensitive(gj, "http");
	/* 0 turns it off; below 10 ms a stream would be mostly comments */
	uint64_t ms = 0;
	if (hj && check_object(x, hj, sub(q, path, "http"), http_keys) &&
	    get_u64(x, hj, "sseKeepAliveMs", q, 0, 3600000, &ms)) {
		if (ms > 0 && ms < 10)
			err(x, "gateway.http.sseKeepAliveMs", "must be 0 (off) or at least 10");
		else
			g->sse_keepalive_ms = ms;
	}
	const cJSON *aj = cJSON_GetObjectItemCaseSensitive(gj, "auth");
	if (aj && check_object(x, aj, sub(q, path, "auth"), auth_keys)) {
		parse_auth_limit(x, aj, q, &g->auth_limit);
		get_str(x, aj, "token", q, true, &g->token);
		get_str(x, aj, "password", q, true, &g->password);
		if (get_str(x, aj, "mode", q, false, &s)) {
			char m[PATH_LEN];
			if (!strcmp(s, "none"))
				g->auth = PC_GATEWAY_AUTH_NONE;
			else if (!strcmp(s, "token"))
				g->auth = PC_GATEWAY_AUTH_TOKEN;
			else if (!strcmp(s, "password"))
				g->auth = PC_GATEWAY_AUTH_PASSWORD;
			else
				err(x, sub(m, q, "mode"), "must be one of none, token, password");
		} else if (g->token) {
			g->auth = PC_GATEWAY_AUTH_TOKEN;
		} else if (g->password) {
			g->auth = PC_GATEWAY_AUTH_PASSWORD;
		}
	}
}

/* After the environment: the gateway's secrets and the rule that only
 * loopback may go without one. */
static void check_gateway(pctx_t *x)
{
	pc_gateway_config_t *g = &x->cfg->pub.gateway;
	if (g->auth == PC_GATEWAY_AUTH_NONE && g->token)
		g->auth = PC_GATEWAY_AUTH_TOKEN;
	if (g->auth == PC_GATEWAY_AUTH_TOKEN && !g->token)
		err(x, "gateway.auth.token", "required when auth.mode is token (or set PINCER_GATEWAY_TOKEN)");
	if (g->auth == PC_GATEWAY_AUTH_PASSWORD && !g->password)
		err(x, "gateway.auth.password", "required when auth.mode is password (or set PINCER_GATEWAY_PASSWORD)");
	if (g->auth == PC_GATEWAY_AUTH_NONE && !loopback_address(g->bind))
		err(x, "gateway.bind", "binding beyond loopback requires auth (a token or a password)");
}

/* The one database Pincer speaks besides its file; a typo in the scheme
 * must not quietly mean SQLite. */
static void check_store_url(pctx_t *x, const char *url, const char *path)
{
	if (strncmp(url, "postgresql://", 13) != 0 && strncmp(url, "postgres://", 11) != 0)
		err(x, path, "must be a postgresql:// URI");
}

static void parse_store(pctx_t *x, const cJSON *root)
{
	static const char *const keys[] = {"path", "url", "statementTimeoutMs", "windowMs", "groupMax", "lazyMs",
					   "idempotencyHours", NULL};
	const cJSON *sj = cJSON_GetObjectItemCaseSensitive(root, "store");
	if (!sj || !check_object(x, sj, "store", keys))
		return;
	pc_config_t *c = &x->cfg->pub;
	get_str(x, sj, "path", "store", true, &c->store_path);
	if (get_str(x, sj, "url", "store", true, &c->store_url))
		check_store_url(x, c->store_url, "store.url");
	get_u32(x, sj, "statementTimeoutMs", "store", 100, 3600000, &c->store_statement_timeout_ms);
	get_u32(x, sj, "windowMs", "store", 0, 1000, &c->store_window_ms);
	get_u32(x, sj, "groupMax", "store", 1, 65536, &c->store_group_max);
	get_u32(x, sj, "lazyMs", "store", 1, 60000, &c->store_lazy_ms);
	get_u32(x, sj, "idempotencyHours", "store", 24, 24 * 365, &c->store_idem_hours);
}

static void parse_cluster(pctx_t *x, const cJSON *root)
{
	static const char *const keys[] = {"nodeId", "advertiseUrl", "leaseMs", "secret", "forward", NULL};
	const cJSON *cj = cJSON_GetObjectItemCaseSensitive(root, "cluster");
	if (!cj || !check_object(x, cj, "cluster", keys))
		return;
	pc_cluster_config_t *c = &x->cfg->pub.cluster;
	c->enabled = true;
	if (get_str(x, cj, "nodeId", "cluster", true, &c->node_id) && strlen(c->node_id) > PC_CLUSTER_NAME_MAX)
		err(x, "cluster.nodeId", "at most %u bytes", PC_CLUSTER_NAME_MAX);
	if (get_str(x, cj, "advertiseUrl", "cluster", true, &c->advertise_url) &&
	    strncmp(c->advertise_url, "http://", 7) != 0)
		err(x, "cluster.advertiseUrl", "must be an http:// URL (node-to-node TLS is not built: a private network)");
	get_u32(x, cj, "leaseMs", "cluster", 1000, 600000, &c->lease_ms);
	get_str(x, cj, "secret", "cluster", true, &c->secret);
	get_bool(x, cj, "forward", "cluster", &c->forward);
}

/* After the environment: what every node of a cluster needs. */
static void check_cluster(pctx_t *x)
{
	const pc_config_t *c = &x->cfg->pub;
	if (!c->cluster.enabled)
		return;
	if (!c->store_url)
		err(x, "cluster", "needs store.url (PostgreSQL): the nodes share one database");
	if (!c->cluster.secret)
		err(x, "cluster.secret", "required (or set PINCER_CLUSTER_SECRET): the nodes authenticate with it");
	else if (strlen(c->cluster.secret) < PC_CLUSTER_SECRET_MIN)
		err(x, "cluster.secret", "at least %u bytes", PC_CLUSTER_SECRET_MIN);
}

/* ---- defaults, environment, the whole parse ---- */

static uint32_t default_max_concurrent(void)
{
	long cores = sysconf(_SC_NPROCESSORS_ONLN);
	if (cores < 8)
		cores = 8; /* also when sysconf fails (-1) */
	return cores > 16 ? 16u : (uint32_t)cores;
}

static void set_defaults(pc_config_t *c)
{
	pc_agent_defaults_t *a = &c->agent;
	a->run_timeout_ms = PC_CONFIG_DEFAULT_RUN_TIMEOUT_MS;
	c->cluster.lease_ms = PC_CLUSTER_DEFAULT_LEASE_MS;
	c->cluster.forward = true;
	a->max_concurrent = default_max_concurrent();
	a->think = PC_THINK_OFF;
	a->bootstrap_max_chars = DEFAULT_BOOTSTRAP_MAX_CHARS;
	a->bootstrap_total_chars = DEFAULT_BOOTSTRAP_TOTAL_CHARS;
	a->tool_mode = PC_TOOLS_SEQUENTIAL;
	a->compaction.enabled = true;
	a->compaction.reserve_tokens = DEFAULT_RESERVE_TOKENS;
	a->compaction.keep_recent_tokens = PC_CONFIG_DEFAULT_KEEP_RECENT_TOKENS;
	a->compaction.timeout_ms = DEFAULT_COMPACTION_TIMEOUT_MS;
	pc_queue_settings_default(&a->queue);
	a->rate_limit_rotations = PC_RUN_DEFAULT_RATE_LIMIT_ROTATIONS;
	a->overload_rotations = PC_RUN_DEFAULT_OVERLOAD_ROTATIONS;
	a->overloaded_backoff_ms = PC_RUN_DEFAULT_OVERLOADED_BACKOFF_MS;
	a->idle_breaker_cap = PC_IDLE_BREAKER_DEFAULT_CAP;
	a->loop_guard = true;
	a->loop_detection.generic_repeat = true;
	a->loop_detection.known_poll_no_progress = true;
	a->loop_detection.ping_pong = true;
	a->session_idle_ms = PC_CONFIG_DEFAULT_SESSION_IDLE_MS;
	c->gateway.bind = "127.0.0.1";
	c->gateway.port = PC_GATEWAY_DEFAULT_PORT;
	c->gateway.tick_ms = PC_GATEWAY_DEFAULT_TICK_MS;
	c->gateway.max_payload = PC_GATEWAY_DEFAULT_MAX_PAYLOAD;
	c->gateway.max_buffered = PC_GATEWAY_DEFAULT_MAX_BUFFERED;
	c->gateway.handshake_ms = PC_GATEWAY_DEFAULT_HANDSHAKE_MS;
	c->gateway.delta_interval_ms = PC_GATEWAY_DEFAULT_DELTA_INTERVAL_MS;
	c->gateway.drain_ms = PC_GATEWAY_DEFAULT_DRAIN_MS;
	c->gateway.sse_keepalive_ms = PC_GATEWAY_DEFAULT_SSE_KEEPALIVE_MS;
	c->gateway.control_ui_enabled = true;
	c->gateway.auth_limit = (pc_gateway_auth_limit_t){
		.max_attempts = PC_GATEWAY_DEFAULT_AUTH_ATTEMPTS,
		.window_ms = PC_GATEWAY_DEFAULT_AUTH_WINDOW_MS,
		.lockout_ms = PC_GATEWAY_DEFAULT_AUTH_LOCKOUT_MS,
		.max_lockout_ms = PC_GATEWAY_DEFAULT_AUTH_MAX_LOCKOUT_MS,
		.exempt_loopback = true,
	};
	c->diagnostics.enabled = true;
	c->diagnostics.warn_ms = pc_diag_warn_ms(0);
	c->diagnostics.abort_ms = pc_diag_abort_ms(c->diagnostics.warn_ms, 0);
}

/* A whole decimal number in [min, max]; nothing else in the text. */
static bool env_int(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
	char *end = NULL;
	if (*s < '0' || *s > '9')
		return false;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || *end || v < min || v > max)
		return false;
	*out = v;
	return true;
}

/* After the file: the environment wins over it. An empty variable counts
 * as unset, as shells make unsetting awkward. */
static void apply_env(pctx_t *x)
{
	pc_agent_defaults_t *a = &x->cfg->pub.agent;
	const char *v;
	uint64_t n;
	if ((v = getenv("PINCER_MODEL")) && *v)
		resolve_ref(x, v, "env.PINCER_MODEL", &a->model);
	if ((v = getenv("PINCER_MAX_CONCURRENT")) && *v) {
		if (env_int(v, 1, MAX_CONCURRENT_LIMIT, &n))
			a->max_concurrent = (uint32_t)n;
		else
			err(x, "env.PINCER_MAX_CONCURRENT", "must be an integer from 1 to %d", MAX_CONCURRENT_LIMIT);
	}
	if ((v = getenv("PINCER_TIMEOUT_SECONDS")) && *v) {
		if (env_int(v, 0, (uint64_t)MAX_SECONDS, &n))
			a->run_timeout_ms = n * 1000u;
		else
			err(x, "env.PINCER_TIMEOUT_SECONDS", "must be a non-negative integer (0 = unlimited)");
	}
	if ((v = getenv("PINCER_WORKSPACE")) && *v)
		a->workspace = arena_strdup(x, v);
	pc_gateway_config_t *g = &x->cfg->pub.gateway;
	if ((v = getenv("PINCER_GATEWAY_BIND")) && *v)
		g->bind = arena_strdup(x, v);
	if ((v = getenv("PINCER_GATEWAY_PORT")) && *v) {
		if (env_int(v, 0, 65535, &n))
			g->port = (uint16_t)n;
		else
			err(x, "env.PINCER_GATEWAY_PORT", "must be an integer from 0 to 65535");
	}
	if ((v = getenv("PINCER_GATEWAY_TOKEN")) && *v)
		g->token = arena_strdup(x, v);
	if ((v = getenv("PINCER_GATEWAY_PASSWORD")) && *v)
		g->password = arena_strdup(x, v);
	if ((v = getenv("PINCER_STORE_URL")) && *v) {
		x->cfg->pub.store_url = arena_strdup(x, v);
		check_store_url(x, v, "env.PINCER_STORE_URL");
	}
	if ((v = getenv("PINCER_CLUSTER_SECRET")) && *v)
		x->cfg->pub.cluster.secret = arena_strdup(x, v);
}

/* With no model named anywhere: the mock's model on a fresh machine, else
 * the first model some provider lists. */
static void default_model(pctx_t *x, bool explicit_model_failed)
{
	pc_config_t *c = &x->cfg->pub;
	if (c->agent.model.provider || explicit_model_failed || x->providers_bad)
		return;
	for (size_t i = 0; i < c->provider_count; i++) {
		if (c->providers[i].embedded && strcmp(c->providers[i].id, MOCK_PROVIDER) == 0 &&
		    !c->providers[i].model_count) {
			c->agent.model = (pc_model_ref_t){MOCK_PROVIDER, MOCK_MODEL};
			return;
		}
		if (c->providers[i].model_count && *c->providers[i].models[0].id) {
			c->agent.model = (pc_model_ref_t){c->providers[i].id, c->providers[i].models[0].id};
			return;
		}
	}
	err(x, "agents.defaults.model", "required (no provider lists a model to default to)");
}

/* Line and column (1-based, bytes) of `off` in `text`. */
static void line_col(const char *text, size_t off, size_t *line, size_t *col)
{
	size_t l = 1, start = 0;
	for (size_t i = 0; i < off; i++) {
		if (text[i] == '\n') {
			l++;
			start = i + 1;
		}
	}
	*line = l;
	*col = off - start + 1;
}

int pc_config_parse(const char *json, size_t len, const char *source, pc_config_t **out,
		    pc_config_errors_t *errs)
{
	static const char *const keys[] = {"providers", "agents", "auth", "messages", "diagnostics", "store",
					   "plugins", "gateway", "cluster", NULL};
	const char *src = source ? source : "(config)";
	pctx_t x = {0};
	char *text = NULL;
	int rc = 0;
	if (errs)
		*errs = (pc_config_errors_t){0};
	if ((!json && len) || !out)
		return PC_EINVAL;
	*out = NULL;
	x.cfg = calloc(1, sizeof(*x.cfg));
	/* cJSON needs the terminating NUL inside the length to accept the end
	 * of the text (require_null_terminated), so the text is copied. */
	text = malloc(len + 1);
	if (!x.cfg || !text) {
		rc = PC_ENOMEM;
		goto out;
	}
	if (len)
		memcpy(text, json, len);
	text[len] = 0;
	set_defaults(&x.cfg->pub);
	if (source && !(x.cfg->pub.source = arena_strdup(&x, source)))
		goto done;

	if (memchr(text, 0, len)) {
		err(&x, src, "invalid JSON: contains a NUL byte");
		goto done;
	}
	size_t ws = strspn(text, " \t\r\n");
	if (ws < len) {
		const char *end = NULL;
		x.cfg->root = cJSON_ParseWithLengthOpts(text, len + 1, &end, 1);
		if (!x.cfg->root) {
			size_t line, col;
			size_t off = end && end >= text && end <= text + len ? (size_t)(end - text) : len;
			line_col(text, off, &line, &col);
			err(&x, src, "invalid JSON near line %zu column %zu", line, col);
			goto done;
		}
		if (!cJSON_IsObject(x.cfg->root)) {
			err(&x, src, "must be a JSON object");
			goto done;
		}
		check_object(&x, x.cfg->root, "", keys);
	}
	/* An empty (or all-blank) file is the defaults. */

	parse_providers(&x, x.cfg->root);
	parse_agents(&x, x.cfg->root);
	parse_auth(&x, x.cfg->root);
	parse_messages(&x, x.cfg->root);
	parse_plugins(&x, x.cfg->root);
	parse_gateway(&x, x.cfg->root);
	parse_diagnostics(&x, x.cfg->root);
	parse_store(&x, x.cfg->root);
	parse_cluster(&x, x.cfg->root);
	apply_env(&x);
	check_gateway(&x);
	check_cluster(&x);
	{
		/* A model named but refused must not be papered over by a default. */
		const cJSON *aj = cJSON_GetObjectItemCaseSensitive(x.cfg->root, "agents");
		const cJSON *dj = cJSON_GetObjectItemCaseSensitive(aj, "defaults");
		const char *env_model = getenv("PINCER_MODEL");
		default_model(&x, cJSON_GetObjectItemCaseSensitive(dj, "model") || (env_model && *env_model));
	}

done:
	if (x.oom)
		rc = PC_ENOMEM;
	else if (x.errs.count)
		rc = PC_EINVAL;
out:
	free(text);
	if (rc) {
		pc_config_free(x.cfg ? &x.cfg->pub : NULL);
	} else {
		*out = &x.cfg->pub;
	}
	if (errs)
		*errs = x.errs;
	else
		pc_config_errors_free(&x.errs);
	return rc;
}

int pc_config_default(pc_config_t **out)
{
	return pc_config_parse("", 0, NULL, out, NULL);
}

/* One error on its own, for failures before parsing. */
int pc__config_single_error(pc_config_errors_t *errs, int rc, const char *path, const char *msg)
{
	pctx_t x = {0};
	err(&x, path, "%s", msg);
	if (errs)
		*errs = x.errs;
	else
		pc_config_errors_free(&x.errs);
	return x.oom ? PC_ENOMEM : rc;
}
