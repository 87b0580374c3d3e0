/*
 * Plugins: the example plugin (agents/hooks/example) loaded through the
 * ABI blocks a tool, rewrites an argument (seen by a lower-priority C
 * handler), counts after_tool_call observations and logs through the host;
 * and every way a load fails leaves the registry as it was: a missing file,
 * files that are not plugins (this test binary, libc), the wrong ABI
 * version, an init that fails after registering hooks, bad ids and
 * configurations, a registry already in use.
 *
 * The modules are built into ${CMAKE_BINARY_DIR}/plugins; this test runs
 * from ${CMAKE_BINARY_DIR}/tests and finds them through /proc/self/exe.
 */
#include <criterion/criterion.h>

#include <dlfcn.h>
#include <libgen.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "agents/hooks/hooks.h"
#include "agents/hooks/pincer_plugin.h"
#include "agents/hooks/plugin.h"
#include "test_util.h"

static void plugin_path(const char *name, char *out, size_t n)
{
	char exe[PATH_MAX];
	ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	cr_assert_gt(len, 0);
	exe[len] = '\0';
	snprintf(out, n, "%s/../plugins/%s.so", dirname(exe), name);
	cr_assert_eq(access(out, R_OK), 0, "%s is missing: build pincer_example_plugin", out);
}

/* ---- reports and DONEs --------------------------------------------------------- */

typedef struct reports {
	pthread_mutex_t lock;
	uint32_t kind[4];
	char logs[4096]; /* "owner|level|message\n" per log line */
} reports_t;

static void on_report(void *user, const pc_hook_report_t *r)
{
	reports_t *rep = user;
	pthread_mutex_lock(&rep->lock);
	if ((unsigned)r->kind < 4)
		rep->kind[r->kind]++;
	if (r->kind == PC_HOOK_REPORT_LOG) {
		size_t n = strlen(rep->logs);
		snprintf(rep->logs + n, sizeof(rep->logs) - n, "%s|%d|%s\n", r->owner, r->level, r->message);
	}
	pthread_mutex_unlock(&rep->lock);
}

static uint32_t failures_reported(reports_t *rep)
{
	pthread_mutex_lock(&rep->lock);
	uint32_t n = rep->kind[PC_HOOK_REPORT_FAILED] + rep->kind[PC_HOOK_REPORT_MALFORMED] +
		     rep->kind[PC_HOOK_REPORT_TIMEOUT];
	pthread_mutex_unlock(&rep->lock);
	return n;
}

static bool logged(reports_t *rep, const char *line)
{
	pthread_mutex_lock(&rep->lock);
	bool yes = strstr(rep->logs, line) != NULL;
	pthread_mutex_unlock(&rep->lock);
	return yes;
}

typedef struct seen {
	pthread_mutex_t lock;
	uint32_t n;
	bool blocked;
	char reason[256];
	char result[512];
} seen_t;

static int owner_receive(pc_ctx_t *ctx, void *state, pc_msg_t *msg)
{
	(void)ctx;
	seen_t *s = state;
	if (msg->type != PC_MSG_HOOK_DONE)
		return 0;
	const pc_hook_done_msg_t *d = pc_msg_cdata(msg);
	pthread_mutex_lock(&s->lock);
	s->blocked = d->blocked;
	snprintf(s->reason, sizeof(s->reason), "%s", d->reason);
	snprintf(s->result, sizeof(s->result), "%s", d->result);
	s->n++;
	pthread_mutex_unlock(&s->lock);
	return 0;
}

static const pc_behavior_t owner_b = {.name = "owner", .receive = owner_receive};

static uint32_t done_count(seen_t *s)
{
	pthread_mutex_lock(&s->lock);
	uint32_t n = s->n;
	pthread_mutex_unlock(&s->lock);
	return n;
}

/* ---- fixture ----------------------------------------------------------------- */

typedef struct fx {
	pc_runtime_t *rt;
	pc_hooks_t *h;
	pc_actor_t *owner;
	seen_t seen;
	reports_t rep;
	char err[512];
	char good[PATH_MAX];
	char badabi[PATH_MAX];
} fx_t;

static fx_t *fx_keep; /* keeps the fixture reachable for LeakSanitizer */

static fx_t *fx_new(void)
{
	fx_t *f = calloc(1, sizeof(*f));
	cr_assert_not_null(f);
	fx_keep = f;
	pthread_mutex_init(&f->seen.lock, NULL);
	pthread_mutex_init(&f->rep.lock, NULL);
	plugin_path("pincer_example_plugin", f->good, sizeof(f->good));
	plugin_path("pincer_example_plugin_badabi", f->badabi, sizeof(f->badabi));
	f->rt = start_rt(2);
	cr_assert_eq(pc_spawn(f->rt, &owner_b, &f->seen, &f->owner), 0);
	cr_assert_eq(pc_hooks_new(&f->h), 0);
	pc_hooks_set_report(f->h, on_report, &f->rep);
	return f;
}

static void fx_free(fx_t *f)
{
	if (f->owner)
		pc_actor_stop(f->owner, PC_EXIT_NORMAL);
	pc_actor_release(f->owner);
	pc_runtime_free(f->rt);
	pc_hooks_free(f->h);
	pthread_mutex_destroy(&f->seen.lock);
	pthread_mutex_destroy(&f->rep.lock);
	free(f);
	fx_keep = NULL;
	ASSERT_NO_LEAKS();
}

/* No hook of any point is registered. */
static void assert_empty(const pc_hooks_t *h)
{
	for (unsigned p = 0; p < PC_HOOK__COUNT; p++)
		cr_assert_eq(pc_hooks_count(h, (pc_hook_point_t)p), 0u, "%s", pc_hook_point_name((pc_hook_point_t)p));
	cr_assert_eq(pc_plugin_count(h), 0u);
}

static void run_tool(fx_t *f, const char *event, const char *tool)
{
	uint32_t before = done_count(&f->seen);
	cJSON *ev = cJSON_Parse(event);
	cr_assert_not_null(ev);
	cr_assert_eq(pc_hooks_run(f->rt, f->h, PC_HOOK_BEFORE_TOOL_CALL, ev, NULL, tool, f->owner, 1), 0);
	AWAIT(done_count(&f->seen) == before + 1, 5000);
}

/* The example plugin's after_tool_call count, through its exported
 * function (the module is already loaded: RTLD_NOLOAD only finds it). */
static uint64_t after_count(const char *path)
{
	void *dl = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
	cr_assert_not_null(dl, "the plugin is not loaded: %s", dlerror());
	uint64_t (*count)(void) = NULL;
	void *sym = dlsym(dl, "example_plugin_after_count");
	cr_assert_not_null(sym);
	memcpy(&count, &sym, sizeof(count));
	uint64_t n = count();
	dlclose(dl);
	return n;
}

/* A C handler after the plugin's: it records the params it sees. */
static pthread_mutex_t seen_lock = PTHREAD_MUTEX_INITIALIZER;
static char c_saw[256];

static int c_after_plugin(void *user, const pc_hook_call_t *call, cJSON **result)
{
	(void)user;
	(void)result;
	char *p = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(call->event, "params"));
	pthread_mutex_lock(&seen_lock);
	snprintf(c_saw, sizeof(c_saw), "%s", p ? p : "");
	pthread_mutex_unlock(&seen_lock);
	cJSON_free(p);
	return 0;
}

#define GOOD_CONFIG                                                                                     \
	"{\"blockTool\":\"exec\",\"blockReason\":\"exec is disabled here\","                            \
	"\"rewrite\":{\"arg\":\"path\",\"value\":\"/tmp/safe\"},\"priority\":10}"

/* ---- loading and running ---------------------------------------------------------- */

Test(hook_plugin, example_blocks_rewrites_and_counts)
{
	fx_t *f = fx_new();
	pc_hook_def_t c = {.point = PC_HOOK_BEFORE_TOOL_CALL, .priority = 5, .fn = c_after_plugin};
	cr_assert_eq(pc_hooks_register(f->h, &c), 0);
	cr_assert_eq(pc_plugin_load(f->h, "example", f->good, GOOD_CONFIG, f->err, sizeof(f->err)), 0, "%s", f->err);
	cr_assert_eq(pc_plugin_count(f->h), 1u);
	cr_assert_eq(pc_hooks_count(f->h, PC_HOOK_BEFORE_TOOL_CALL), 2u);
	cr_assert(pc_hooks_active(f->h, PC_HOOK_AFTER_TOOL_CALL, "read"));
	cr_assert(logged(&f->rep, "example|1|example plugin loaded\n"));

	/* The named tool is blocked with the configured reason. */
	run_tool(f, "{\"toolName\":\"exec\",\"params\":{\"command\":\"rm -rf /\"}}", "exec");
	pthread_mutex_lock(&f->seen.lock);
	cr_assert(f->seen.blocked);
	cr_assert_str_eq(f->seen.reason, "exec is disabled here");
	pthread_mutex_unlock(&f->seen.lock);

	/* Another tool with the argument gets it rewritten, and the C handler
	 * (lower priority) already sees the rewrite. */
	run_tool(f, "{\"toolName\":\"read\",\"params\":{\"path\":\"/etc/shadow\",\"limit\":5}}", "read");
	pthread_mutex_lock(&f->seen.lock);
	cr_assert_not(f->seen.blocked);
	cr_assert_str_eq(f->seen.result, "{\"params\":{\"path\":\"/tmp/safe\",\"limit\":5}}");
	pthread_mutex_unlock(&f->seen.lock);
	pthread_mutex_lock(&seen_lock);
	cr_assert_str_eq(c_saw, "{\"path\":\"/tmp/safe\",\"limit\":5}");
	pthread_mutex_unlock(&seen_lock);

	/* Without the argument nothing changes. */
	run_tool(f, "{\"toolName\":\"clock\",\"params\":{}}", "clock");
	pthread_mutex_lock(&f->seen.lock);
	cr_assert_not(f->seen.blocked);
	cr_assert_str_eq(f->seen.result, "{}");
	pthread_mutex_unlock(&f->seen.lock);

	/* Observations are counted, and logged through the host. */
	for (int i = 0; i < 3; i++)
		cr_assert_eq(pc_hooks_notify(f->rt, f->h, PC_HOOK_AFTER_TOOL_CALL,
					     cJSON_Parse("{\"toolName\":\"read\",\"result\":\"ok\"}"), NULL, "read"),
			     0);
	AWAIT(after_count(f->good) == 3, 5000);
	AWAIT(logged(&f->rep, "example|0|after_tool_call #3 tool=read\n"), 5000);
	cr_assert_eq(failures_reported(&f->rep), 0u);

	/* The registry has run: no more plugins. */
	cr_assert_eq(pc_plugin_load(f->h, "late", f->good, NULL, f->err, sizeof(f->err)), PC_ESTATE);
	cr_assert(strstr(f->err, "already in use"), "%s", f->err);

	/* Once nothing runs, releasing the registry finishes and unloads the
	 * plugin. */
	pc_actor_stop(f->owner, PC_EXIT_NORMAL);
	pc_actor_release(f->owner);
	f->owner = NULL;
	pc_runtime_free(f->rt);
	f->rt = NULL;
	cr_assert_not(logged(&f->rep, "example plugin unloading"));
	pc_hooks_free(f->h);
	f->h = NULL;
	cr_assert(logged(&f->rep, "example|1|example plugin unloading\n"));
	cr_assert_null(dlopen(f->good, RTLD_NOW | RTLD_NOLOAD), "the plugin is still loaded");
	fx_free(f);
}

/* ---- failures --------------------------------------------------------------------- */

Test(hook_plugin, missing_file)
{
	fx_t *f = fx_new();
	const char *path = "/nonexistent/dir/pincer_nothing.so";
	cr_assert_eq(pc_plugin_load(f->h, "ghost", path, NULL, f->err, sizeof(f->err)), PC_ENOTFOUND);
	cr_assert(strstr(f->err, "cannot load") && strstr(f->err, path), "%s", f->err);
	assert_empty(f->h);
	fx_free(f);
}

Test(hook_plugin, not_a_plugin)
{
	fx_t *f = fx_new();
	char exe[PATH_MAX];
	ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	cr_assert_gt(len, 0);
	exe[len] = '\0';
	/* An executable: either it does not load, or it has no ABI symbol. */
	cr_assert_eq(pc_plugin_load(f->h, "self", exe, NULL, f->err, sizeof(f->err)), PC_ENOTFOUND);
	cr_assert_gt(strlen(f->err), 0u);
	cr_assert(strstr(f->err, "self"), "%s", f->err);
	assert_empty(f->h);
	/* A real shared library that is not a plugin. */
	cr_assert_eq(pc_plugin_load(f->h, "libc", "libc.so.6", NULL, f->err, sizeof(f->err)), PC_ENOTFOUND);
	cr_assert(strstr(f->err, "is not a Pincer plugin"), "%s", f->err);
	assert_empty(f->h);
	fx_free(f);
}

/* The version is checked before anything in the plugin runs: its init
 * would have logged. */
Test(hook_plugin, wrong_abi_version)
{
	fx_t *f = fx_new();
	cr_assert_eq(pc_plugin_load(f->h, "old", f->badabi, GOOD_CONFIG, f->err, sizeof(f->err)), PC_ELIMIT);
	char want[64];
	/* The bad variant claims the host's version + 1000. */
	snprintf(want, sizeof(want), "speaks plugin ABI %u, this host speaks %u", PINCER_PLUGIN_ABI_VERSION + 1000u,
		 PINCER_PLUGIN_ABI_VERSION);
	cr_assert(strstr(f->err, want), "%s", f->err);
	assert_empty(f->h);
	cr_assert_not(logged(&f->rep, "old|"), "init ran");
	fx_free(f);
}

/* init registers its hooks, then fails: they are removed, the registry is
 * unchanged and still usable, and a good plugin loads after it. */
Test(hook_plugin, init_failure_leaves_registry_unchanged)
{
	fx_t *f = fx_new();
	cr_assert_eq(pc_plugin_load(f->h, "quitter", f->good, "{\"blockTool\":\"exec\",\"failInit\":true}", f->err,
				    sizeof(f->err)),
		     PC_ESTOPPED);
	cr_assert(strstr(f->err, "quitter: init failed"), "%s", f->err);
	cr_assert(logged(&f->rep, "quitter|2|refusing to load, as configured (failInit)\n"));
	assert_empty(f->h);
	cr_assert_not(pc_hooks_active(f->h, PC_HOOK_BEFORE_TOOL_CALL, "exec"));

	/* A configuration the plugin itself rejects fails its init too. */
	cr_assert_eq(pc_plugin_load(f->h, "picky", f->good, "{\"rewrite\":{\"arg\":\"path\"}}", f->err, sizeof(f->err)),
		     PC_ESTOPPED);
	assert_empty(f->h);

	/* The same id is free again, and the plugin works. */
	cr_assert_eq(pc_plugin_load(f->h, "quitter", f->good, "{\"blockTool\":\"exec\"}", f->err, sizeof(f->err)), 0,
		     "%s", f->err);
	cr_assert_eq(pc_plugin_count(f->h), 1u);
	run_tool(f, "{\"toolName\":\"exec\",\"params\":{}}", "exec");
	pthread_mutex_lock(&f->seen.lock);
	cr_assert(f->seen.blocked);
	pthread_mutex_unlock(&f->seen.lock);
	fx_free(f);
}

Test(hook_plugin, bad_ids_and_configurations)
{
	fx_t *f = fx_new();
	char long_id[PC_PLUGIN_ID_MAX + 2];
	memset(long_id, 'x', sizeof(long_id) - 1);
	long_id[sizeof(long_id) - 1] = '\0';
	const char *bad_ids[] = {"", "has space", "slash/id", long_id};
	for (size_t i = 0; i < sizeof(bad_ids) / sizeof(bad_ids[0]); i++) {
		cr_assert_eq(pc_plugin_load(f->h, bad_ids[i], f->good, NULL, f->err, sizeof(f->err)), PC_EINVAL, "%s",
			     bad_ids[i]);
		cr_assert(strstr(f->err, "is not valid"), "%s", f->err);
	}
	cr_assert_eq(pc_plugin_load(f->h, NULL, f->good, NULL, f->err, sizeof(f->err)), PC_EINVAL);
	cr_assert_eq(pc_plugin_load(f->h, "p", NULL, NULL, f->err, sizeof(f->err)), PC_EINVAL);
	cr_assert_eq(pc_plugin_load(NULL, "p", f->good, NULL, f->err, sizeof(f->err)), PC_EINVAL);
	const char *bad_configs[] = {"[1]", "{", "\"text\"", "42"};
	for (size_t i = 0; i < sizeof(bad_configs) / sizeof(bad_configs[0]); i++) {
		int rc = pc_plugin_load(f->h, "p", f->good, bad_configs[i], f->err, sizeof(f->err));
		cr_assert_eq(rc, PC_EINVAL, "%s", bad_configs[i]);
		cr_assert(strstr(f->err, "not a JSON object"), "%s", f->err);
	}
	/* No error buffer is fine too. */
	cr_assert_eq(pc_plugin_load(f->h, "p", "/nonexistent.so", NULL, NULL, 0), PC_ENOTFOUND);
	assert_empty(f->h);

	cr_assert_eq(pc_plugin_load(f->h, "one.v1", f->good, NULL, f->err, sizeof(f->err)), 0, "%s", f->err);
	cr_assert_eq(pc_plugin_load(f->h, "one.v1", f->good, NULL, f->err, sizeof(f->err)), PC_EEXIST);
	cr_assert(strstr(f->err, "already loaded"), "%s", f->err);
	cr_assert_eq(pc_plugin_count(f->h), 1u);
	fx_free(f);
}
