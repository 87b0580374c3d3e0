/*
 * The plugin loader (plugin.h) and the host side of the plugin ABI
 * (pincer_plugin.h).
 *
 * Loading checks, in order, before any plugin code runs: the file loads
 * (RTLD_NOW, so a missing symbol fails here and not in the middle of a
 * hook), it has pincer_plugin_abi, the ABI version matches, it has
 * pincer_plugin_init. Only then is init called. The plugin record is in the
 * registry's list while init runs, because the host_ctx the plugin is given
 * is that record and must stay valid for the plugin's life (log from a
 * hook, later).
 *
 * Each hook the plugin registers becomes a registry entry whose fn is
 * `bridge` and whose user is a small record naming the plugin's function:
 * the bridge prints {"hook","event","ctx"} as text, calls the plugin with a
 * result slot on its stack, and parses what set_result copied into it.
 */
#include "io/io.h"
#include "plugin.h"

#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hooks_internal.h"
#include "pincer_plugin.h"

_Static_assert(PINCER_PLUGIN_ENOMEM == PC_ENOMEM && PINCER_PLUGIN_EINVAL == PC_EINVAL &&
		       PINCER_PLUGIN_ENOTFOUND == PC_ENOTFOUND && PINCER_PLUGIN_ESTATE == PC_ESTATE,
	       "the plugin ABI's codes are the host's");
_Static_assert(PINCER_LOG_DEBUG == PC_HOOK_LOG_DEBUG && PINCER_LOG_ERROR == PC_HOOK_LOG_ERROR,
	       "the plugin ABI's log levels are the host's");

typedef int (*init_fn)(const pincer_plugin_host_t *host);
typedef void (*fini_fn)(void);

/* One hook the plugin registered: what the bridge calls. */
typedef struct bridge_hook {
	struct bridge_hook *next;
	pc__plugin_t *plugin;
	pincer_hook_fn fn;
	void *user;
} bridge_hook_t;

struct pc__plugin {
	pc__plugin_t *next;
	pc_hooks_t *hooks;
	void *handle;
	fini_fn fini;
	bool initializing; /* register_hook is allowed only then */
	bool ready;        /* init succeeded: fini is owed */
	char *id;
	char *config;
	bridge_hook_t *bridges;
	pincer_plugin_host_t host; /* handed to init; valid for the plugin's life */
};

/* The slot a hook's answer is copied into (pincer_hook_result_t). */
struct pincer_hook_result {
	char *json;
	size_t len;
};

/* ---- the host's side of the ABI ------------------------------------------ */

static void host_log(void *host_ctx, int level, const char *msg)
{
	pc__plugin_t *pl = host_ctx;
	if (!pl || !msg)
		return;
	if (level < PC_HOOK_LOG_DEBUG || level > PC_HOOK_LOG_ERROR)
		level = PC_HOOK_LOG_INFO;
	pc__hooks_report(pl->hooks, PC_HOOK_REPORT_LOG, PC_HOOK__COUNT, pl->id, 0, level, "%s", msg);
}

static int host_set_result(pincer_hook_result_t *r, const char *json, size_t len)
{
	if (!r || !json)
		return PC_EINVAL;
	char *copy = malloc(len + 1);
	if (!copy)
		return PC_ENOMEM;
	memcpy(copy, json, len);
	copy[len] = '\0';
	free(r->json);
	r->json = copy;
	r->len = len;
	return 0;
}

/* The call as the plugin reads it. The event and ctx are referenced, not
 * copied: the text is what crosses the boundary. */
static char *input_text(const pc_hook_call_t *call)
{
	char *text = NULL;
	cJSON *o = cJSON_CreateObject();
	if (!o)
		return NULL;
	if (cJSON_AddStringToObject(o, "hook", pc_hook_point_name(call->point)) &&
	    cJSON_AddItemReferenceToObject(o, "event", (cJSON *)call->event) &&
	    cJSON_AddItemReferenceToObject(o, "ctx", (cJSON *)call->ctx))
		text = pc_json_print(o);
	cJSON_Delete(o);
	return text;
}

/* A plugin's hook as a pc_hook_fn. */
static int bridge(void *user, const pc_hook_call_t *call, cJSON **result)
{
	bridge_hook_t *b = user;
	char *input = input_text(call);
	if (!input)
		return PC_ENOMEM;
	pincer_hook_result_t slot = {0};
	int rc = b->fn(b->user, input, strlen(input), &slot);
	free(input);
	if (rc >= 0 && slot.json) {
		*result = cJSON_ParseWithLength(slot.json, slot.len);
		if (!*result) {
			host_log(b->plugin, PC_HOOK_LOG_ERROR, "hook answered with text that is not JSON");
			rc = PC_EINVAL;
		}
	}
	free(slot.json);
	return rc < 0 ? rc : 0;
}

/* Splits "a, b ,c" into trimmed, non-empty names. *n == 0 (and *out NULL)
 * when there are none. */
static int split_matcher(const char *list, char ***out, size_t *n)
{
	*out = NULL;
	*n = 0;
	if (!list)
		return 0;
	size_t cap = 1;
	for (const char *p = list; *p; p++)
		cap += *p == ',';
	char **v = calloc(cap, sizeof(*v));
	if (!v)
		return PC_ENOMEM;
	const char *p = list;
	while (*p) {
		size_t len = strcspn(p, ",");
		const char *s = p, *e = p + len;
		while (s < e && (*s == ' ' || *s == '\t'))
			s++;
		while (e > s && (e[-1] == ' ' || e[-1] == '\t'))
			e--;
		if (e > s && !(v[*n] = strndup(s, (size_t)(e - s)))) {
			for (size_t i = 0; i < *n; i++)
				free(v[i]);
			free(v);
			*n = 0;
			return PC_ENOMEM;
		}
		*n += e > s;
		p += len + (p[len] == ',');
	}
	*out = v;
	return 0;
}

static int host_register_hook(void *host_ctx, const char *hook_name, int priority, const char *matcher,
			      uint32_t timeout_ms, pincer_hook_fn fn, void *user)
{
	pc__plugin_t *pl = host_ctx;
	if (!pl || !hook_name || !fn)
		return PC_EINVAL;
	if (!pl->initializing)
		return PC_ESTATE;
	pc_hook_point_t point;
	int rc = pc_hook_point_from_name(hook_name, &point);
	if (rc != 0)
		return rc;
	char **names = NULL;
	size_t n = 0;
	bridge_hook_t *b = calloc(1, sizeof(*b));
	if (!b || (rc = split_matcher(matcher, &names, &n)) != 0) {
		rc = PC_ENOMEM;
		goto out;
	}
	*b = (bridge_hook_t){.plugin = pl, .fn = fn, .user = user};
	pc_hook_def_t def = {
		.point = point,
		.priority = priority,
		.matcher = n ? (const char *const *)names : NULL,
		.matcher_count = n,
		.timeout_ms = timeout_ms,
		.fn = bridge,
		.user = b,
		.owner = pl->id,
	};
	if ((rc = pc__hooks_register_as(pl->hooks, &def, pl)) != 0)
		goto out;
	b->next = pl->bridges;
	pl->bridges = b;
	b = NULL;
out:
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
	free(b);
	return rc;
}

/* ---- records ----------------------------------------------------------------- */

static void plugin_free(pc__plugin_t *pl)
{
	while (pl->bridges) {
		bridge_hook_t *b = pl->bridges;
		pl->bridges = b->next;
		free(b);
	}
	if (pl->handle)
		dlclose(pl->handle);
	free(pl->id);
	free(pl->config);
	free(pl);
}

void pc__plugins_fini(pc__plugin_t *list)
{
	for (pc__plugin_t *pl = list; pl; pl = pl->next)
		if (pl->ready && pl->fini)
			pl->fini();
}

void pc__plugins_close(pc__plugin_t *list)
{
	while (list) {
		pc__plugin_t *next = list->next;
		plugin_free(list);
		list = next;
	}
}

size_t pc_plugin_count(const pc_hooks_t *h)
{
	size_t n = 0;
	for (const pc__plugin_t *pl = h ? h->plugins : NULL; pl; pl = pl->next)
		n++;
	return n;
}

/* ---- loading ----------------------------------------------------------------- */

static int fail(char *err, size_t errlen, int rc, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int fail(char *err, size_t errlen, int rc, const char *fmt, ...)
{
	if (err && errlen) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return rc;
}

static bool valid_id(const char *id)
{
	size_t n = id ? strlen(id) : 0;
	if (n == 0 || n > PC_PLUGIN_ID_MAX)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = id[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
		      c == '_' || c == '-'))
			return false;
	}
	return true;
}

static bool id_taken(const pc_hooks_t *h, const char *id)
{
	for (const pc__plugin_t *pl = h->plugins; pl; pl = pl->next)
		if (strcmp(pl->id, id) == 0)
			return true;
	return false;
}

static bool config_is_object(const char *config)
{
	cJSON *j = cJSON_Parse(config);
	bool ok = cJSON_IsObject(j);
	cJSON_Delete(j);
	return ok;
}

static int check_args(pc_hooks_t *h, const char *id, const char *path, const char *config, char *err,
		      size_t errlen)
{
	if (!h || !path || !*path)
		return fail(err, errlen, PC_EINVAL, "plugin %s: no registry or path", id ? id : "?");
	if (!valid_id(id))
		return fail(err, errlen, PC_EINVAL, "plugin id \"%s\" is not valid ([A-Za-z0-9._-], 1..%u)",
			    id ? id : "", PC_PLUGIN_ID_MAX);
	if (pc__hooks_sealed(h))
		return fail(err, errlen, PC_ESTATE, "plugin %s: the hook registry is already in use", id);
	if (id_taken(h, id))
		return fail(err, errlen, PC_EEXIST, "plugin %s: the id is already loaded", id);
	if (!config_is_object(config))
		return fail(err, errlen, PC_EINVAL, "plugin %s: its configuration is not a JSON object", id);
	return 0;
}

/* dlopen + the symbol checks, before any plugin code runs. */
static int open_plugin(pc__plugin_t *pl, const char *path, init_fn *init, char *err, size_t errlen)
{
	pl->handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!pl->handle) {
		const char *why = dlerror();
		return fail(err, errlen, PC_ENOTFOUND, "plugin %s: cannot load %s: %s", pl->id, path,
			    why ? why : "unknown error");
	}
	const uint32_t *abi = dlsym(pl->handle, "pincer_plugin_abi");
	if (!abi)
		return fail(err, errlen, PC_ENOTFOUND, "plugin %s: %s is not a Pincer plugin (no pincer_plugin_abi)",
			    pl->id, path);
	if (*abi != PINCER_PLUGIN_ABI_VERSION)
		return fail(err, errlen, PC_ELIMIT, "plugin %s: %s speaks plugin ABI %u, this host speaks %u",
			    pl->id, path, (unsigned)*abi, PINCER_PLUGIN_ABI_VERSION);
	/* POSIX: a data pointer from dlsym may be converted to a function pointer. */
	void *sym = dlsym(pl->handle, "pincer_plugin_init");
	if (!sym)
		return fail(err, errlen, PC_ENOTFOUND, "plugin %s: %s has no pincer_plugin_init", pl->id, path);
	memcpy(init, &sym, sizeof(*init));
	sym = dlsym(pl->handle, "pincer_plugin_fini");
	memcpy(&pl->fini, &sym, sizeof(pl->fini));
	return 0;
}

static pc__plugin_t *plugin_new(pc_hooks_t *h, const char *id, const char *config)
{
	pc__plugin_t *pl = calloc(1, sizeof(*pl));
	if (!pl)
		return NULL;
	pl->hooks = h;
	pl->id = strdup(id);
	pl->config = strdup(config);
	if (!pl->id || !pl->config) {
		plugin_free(pl);
		return NULL;
	}
	pl->host = (pincer_plugin_host_t){
		.size = sizeof(pincer_plugin_host_t),
		.abi_version = PINCER_PLUGIN_ABI_VERSION,
		.host_ctx = pl,
		.plugin_id = pl->id,
		.config_json = pl->config,
		.register_hook = host_register_hook,
		.log = host_log,
		.set_result = host_set_result,
	};
	return pl;
}

static void unlink_plugin(pc_hooks_t *h, const pc__plugin_t *pl)
{
	for (pc__plugin_t **pp = &h->plugins; *pp; pp = &(*pp)->next) {
		if (*pp == pl) {
			*pp = pl->next;
			return;
		}
	}
}

int pc_plugin_load(pc_hooks_t *h, const char *id, const char *path, const char *config_json, char *err,
		   size_t errlen)
{
	const char *config = config_json ? config_json : "{}";
	int rc = check_args(h, id, path, config, err, errlen);
	if (rc != 0)
		return rc;
	pc__plugin_t *pl = plugin_new(h, id, config);
	if (!pl)
		return fail(err, errlen, PC_ENOMEM, "plugin %s: out of memory", id);
	init_fn init = NULL;
	if ((rc = open_plugin(pl, path, &init, err, errlen)) != 0)
		goto fail;
	pl->next = h->plugins;
	h->plugins = pl;
	pl->initializing = true;
	int irc = init(&pl->host);
	pl->initializing = false;
	if (irc != 0) {
		/* Whatever it registered before failing goes with it. */
		pc__hooks_remove_plugin(h, pl);
		unlink_plugin(h, pl);
		rc = fail(err, errlen, PC_ESTOPPED, "plugin %s: init failed (%d: %s)", id, irc, pc_strerror(irc));
		goto fail;
	}
	pl->ready = true;
	return 0;
fail:
	plugin_free(pl);
	return rc;
}
