/*
 * tools: tool-call round trips through the whole agent loop, and what an
 * empty hook chain costs per tool call.
 *
 * tool_roundtrips  whole agent runs in-process (the session, run, attempt
 *     and tool actors, the embedded mock LLM over loopback, a store in a
 *     temporary directory), 1 and 100 sessions kept busy at once. The
 *     mock's scenario makes each run call the registered no-op tool
 *     "noop" --tools K times in sequence (K answers asking for one call,
 *     each followed by the tool's result going back to the mock), then
 *     answer "ok". The baseline, measured in the same process, is the
 *     same run with K = 0 (the text answer only) and the same tools
 *     offered. Figures: tool round trips/s (tool calls completed per
 *     second), process CPU per round trip, and the marginal cost of one
 *     round trip: (CPU per run with K tools - CPU per run without) / K,
 *     also as a ratio to the text-only run. One round trip is a model
 *     answer asking for the tool, the invocation, the result appended to
 *     the transcript and the next model request carrying it.
 *
 * hook_chain_empty  three ways of looking at an empty hook chain:
 *     "check": pc_hooks_active(before_tool_call) in a tight loop on a NULL
 *         registry, an empty one, and one with a handler on every other
 *         point, in ns per check against the same loop without the call;
 *     "agent": the tool round trips above (1 and 100 sessions) with no
 *         registry, with a registry holding one handler on an unrelated
 *         point (gateway_start; the chain of before_tool_call is still
 *         empty), and with one no-op before_tool_call handler (returns no
 *         result; it runs on the blocking pool): the first two should
 *         agree within noise, the third is what a non-empty chain costs.
 *
 * The machine may be shared and noisy: each configuration is measured in
 * --rounds rounds (a fresh agent layer each time, the configurations in a
 * rotated order each round so drift spreads over all of them) and the
 * rounds are pooled; the per-round marginal costs are listed too.
 *
 *   bench_tools [--workers W] [--sessions N] [--seconds S] [--tools K]
 *               [--rounds R] [--turns T]
 *               [--only roundtrips|hooks|check|schema]
 *
 * --seconds caps each measured window (default 2); --tools is K (default
 * 4); --rounds R (default 3); --turns moves each session slot to a fresh
 * session key every T runs (default 1: every run starts a fresh history,
 * so a round trip's request carries only its own run's messages; with a
 * longer history each round trip also resends it). --only roundtrips: the
 * tool_roundtrips lines (text-only and no-hooks configurations); hooks:
 * the hook_chain_empty lines (the check and all four configurations);
 * check: the check alone; schema: the schema_validate line alone (it also
 * runs with hooks and by default). One JSON line per measurement. Everything talks
 * to 127.0.0.1 only; the temporary store directories are removed.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "agent_env.h"
#include "agents/hooks/hooks.h"
#include "agents/mock/scenario.h"
#include "agents/tools/schema.h"
#include "agents/tools/tool.h"

#define MAX_TOOLS 1000u
#define MAX_ROUNDS 16u
#define MAX_SESSIONS 4096u
#define MAX_SECONDS 60.0

/* The configurations of one session count. */
typedef enum variant {
	V_TEXT = 0,       /* K = 0: the baseline run */
	V_NO_HOOKS,       /* K tools, hooks = NULL */
	V_OTHER_POINT,    /* K tools, a handler on gateway_start only */
	V_TOOL_HOOK,      /* K tools, a no-op before_tool_call handler */
	V__COUNT
} variant_t;

static const char *const variant_key[V__COUNT] = {"text_only", "none", "other_point", "before_tool_call"};

enum { ONLY_ALL = 0, ONLY_ROUNDTRIPS, ONLY_HOOKS, ONLY_CHECK, ONLY_SCHEMA };

typedef struct params {
	uint32_t workers, sessions, tools, rounds, turns;
	double seconds;
	int only;
} params_t;

/* What the agent configurations use: built once, read-only. */
typedef struct fixtures {
	pc_tool_registry_t *tools; /* builtins + noop */
	pc_hooks_t *other_point;   /* a handler on gateway_start */
	pc_hooks_t *tool_hook;     /* a handler on before_tool_call */
	char *scenario_text;       /* K = 0 */
	char *scenario_tools;      /* K tool calls, then the text */
} fixtures_t;

/* One configuration over every round. */
typedef struct tally {
	uint64_t runs;               /* in the windows */
	double wall, cpu;            /* the windows', seconds */
	double run_cpu_us[MAX_ROUNDS];
	double run_wall_us[MAX_ROUNDS];
	uint32_t rounds;
} tally_t;

/* ---- the no-op tool and hook ------------------------------------------------ */

static int noop_call(void *user, const cJSON *args, const pc_tool_env_t *env, pc_tool_output_t *out)
{
	(void)user;
	(void)args;
	(void)env;
	out->text = strdup("ok");
	return out->text ? 0 : PC_ENOMEM;
}

/* Returns no result: no decision, the call goes ahead. */
static int noop_hook(void *user, const pc_hook_call_t *call, cJSON **result)
{
	(void)user;
	(void)call;
	*result = NULL;
	return 0;
}

static pc_tool_registry_t *tools_new(void)
{
	pc_tool_registry_t *r = NULL;
	int rc = pc_tool_registry_new(&r);
	if (rc == 0)
		rc = pc_tool_register_builtins(r);
	pc_tool_def_t noop = {.name = "noop", .description = "Does nothing and answers ok.", .parallel_safe = true,
			      .call = noop_call};
	if (rc == 0)
		rc = pc_tool_register(r, &noop);
	if (rc != 0)
		bench_fail("tool registry: %s", pc_strerror(rc));
	return r;
}

/* A registry with one no-op handler on each point for which `on[p]`. */
static pc_hooks_t *hooks_new(const bool on[PC_HOOK__COUNT])
{
	pc_hooks_t *h = NULL;
	int rc = pc_hooks_new(&h);
	for (int p = 0; rc == 0 && p < PC_HOOK__COUNT; p++) {
		pc_hook_def_t d = {.point = (pc_hook_point_t)p, .fn = noop_hook};
		if (on[p])
			rc = pc_hooks_register(h, &d);
	}
	if (rc != 0)
		bench_fail("hooks: %s", pc_strerror(rc));
	return h;
}

static pc_hooks_t *hooks_on_one(pc_hook_point_t p)
{
	bool on[PC_HOOK__COUNT] = {false};
	on[p] = true;
	return hooks_new(on);
}

/* The mock's scenario: `k` answers each asking for one "noop" call (with
 * distinct arguments, as a model's would be), then "ok" in one piece.
 * Steps are per x-mock-session, which the agent sets to the run id, so
 * every run sees the sequence from its start. The caller frees. */
static char *scenario_new(uint32_t k)
{
	cJSON *sc = cJSON_CreateObject(), *steps = cJSON_AddArrayToObject(sc, "steps");
	cJSON *dflt = cJSON_AddObjectToObject(sc, "default");
	bool ok = steps && dflt && cJSON_AddStringToObject(dflt, "text", "ok") &&
		  cJSON_AddNumberToObject(dflt, "chunks", 1);
	for (uint32_t i = 0; ok && i < k; i++) {
		cJSON *step = cJSON_CreateObject(), *call = cJSON_CreateObject(), *calls = cJSON_CreateArray();
		cJSON *args = cJSON_CreateObject();
		ok = step && call && calls && args && cJSON_AddNumberToObject(args, "i", i) &&
		     cJSON_AddStringToObject(step, "kind", "tool_calls") && cJSON_AddStringToObject(call, "name", "noop");
		if (ok) {
			cJSON_AddItemToObject(call, "arguments", args);
			cJSON_AddItemToArray(calls, call);
			cJSON_AddItemToObject(step, "tool_calls", calls);
			cJSON_AddItemToArray(steps, step);
		} else {
			cJSON_Delete(step);
			cJSON_Delete(call);
			cJSON_Delete(calls);
			cJSON_Delete(args);
		}
	}
	char *text = ok ? cJSON_PrintUnformatted(sc) : NULL;
	cJSON_Delete(sc);
	if (!text)
		bench_fail("scenario: out of memory");
	return text;
}

/* ---- hook_chain_empty, "check": the check alone ------------------------------ */

/* The compiler barriers keep every iteration (and its call) in the loop
 * without adding instructions, the same in both loops. */
static double loop_ns(uint64_t n)
{
	unsigned sink = 0;
	double t0 = bench_now_s();
	for (uint64_t i = 0; i < n; i++) {
		sink += 0;
		__asm__ volatile("" : "+r"(sink));
	}
	double ns = (bench_now_s() - t0) * 1e9 / (double)n;
	__asm__ volatile("" : : "r"(sink));
	return ns;
}

static double active_ns(const pc_hooks_t *h, uint64_t n)
{
	unsigned sink = 0;
	double t0 = bench_now_s();
	for (uint64_t i = 0; i < n; i++) {
		const pc_hooks_t *hh = h;
		__asm__ volatile("" : "+r"(hh)); /* not hoisted, whatever the inliner knows */
		sink += pc_hooks_active(hh, PC_HOOK_BEFORE_TOOL_CALL, "noop");
		__asm__ volatile("" : "+r"(sink));
	}
	double ns = (bench_now_s() - t0) * 1e9 / (double)n;
	if (sink)
		bench_fail("pc_hooks_active saw a before_tool_call handler in a registry without one");
	return ns;
}

static void run_check(const params_t *p)
{
	enum { C_LOOP = 0, C_NULL, C_EMPTY, C_OTHERS, C__COUNT, REPS = 5 };
	const uint64_t n = 20000000;
	pc_hooks_t *empty = NULL;
	int rc = pc_hooks_new(&empty);
	if (rc != 0)
		bench_fail("hooks: %s", pc_strerror(rc));
	bool on[PC_HOOK__COUNT];
	for (int i = 0; i < PC_HOOK__COUNT; i++)
		on[i] = i != PC_HOOK_BEFORE_TOOL_CALL;
	pc_hooks_t *others = hooks_new(on);
	const pc_hooks_t *reg[C__COUNT] = {NULL, NULL, empty, others};
	double best[C__COUNT];
	for (int c = 0; c < C__COUNT; c++)
		best[c] = 1e9;
	/* interleaved repetitions, the fastest of each kept: what the check
	 * costs when nothing else takes the core */
	double t0 = bench_now_s();
	for (int r = 0; r < REPS; r++)
		for (int c = 0; c < C__COUNT; c++) {
			double ns = c == C_LOOP ? loop_ns(n) : active_ns(reg[c], n);
			if (ns < best[c])
				best[c] = ns;
		}
	double wall = bench_now_s() - t0;
	char extra[512];
	snprintf(extra, sizeof(extra),
		 "\"mode\":\"check\",\"iterations\":%" PRIu64 ",\"repetitions\":%d,\"loop_ns\":%.3f,"
		 "\"null_ns\":%.3f,\"empty_ns\":%.3f,\"other_points_ns\":%.3f,\"other_points_handlers\":%d,"
		 "\"null_extra_ns\":%.3f,\"empty_extra_ns\":%.3f,\"other_points_extra_ns\":%.3f,"
		 "\"other_points_vs_empty\":%.3f",
		 n, REPS, best[C_LOOP], best[C_NULL], best[C_EMPTY], best[C_OTHERS], PC_HOOK__COUNT - 1,
		 best[C_NULL] - best[C_LOOP], best[C_EMPTY] - best[C_LOOP], best[C_OTHERS] - best[C_LOOP],
		 best[C_OTHERS] / best[C_EMPTY]);
	bench_report("hook_chain_empty", p->workers, wall, n * REPS * (C__COUNT - 1), extra);
	pc_hooks_free(empty);
	pc_hooks_free(others);
}

/* ---- schema validation ------------------------------------------------------------ */

#define SCHEMA_PATTERNS                                                                                \
	"{\"type\":\"object\",\"required\":[\"name\",\"version\",\"path\"],\"additionalProperties\":false,"     \
	"\"properties\":{"                                                                              \
	"\"name\":{\"type\":\"string\",\"pattern\":\"^[a-z][a-z0-9_-]{0,63}$\"},"                          \
	"\"version\":{\"type\":\"string\",\"pattern\":\"^\\\\d+\\\\.\\\\d+\\\\.\\\\d+(-[0-9A-Za-z.-]+)?$\"},"    \
	"\"path\":{\"type\":\"string\",\"pattern\":\"^(/[^/\\\\s]+)+\\\\.(c|h|md)$\"}}}"
#define SCHEMA_PLAIN                                                                                   \
	"{\"type\":\"object\",\"required\":[\"name\",\"version\",\"path\"],\"additionalProperties\":false,"     \
	"\"properties\":{\"name\":{\"type\":\"string\"},\"version\":{\"type\":\"string\"},"                     \
	"\"path\":{\"type\":\"string\"}}}"
#define SCHEMA_ARGS                                                                                    \
	"{\"name\":\"read_file\",\"version\":\"1.24.3-rc.1\",\"path\":\"/work/agents/tools/schema.c\"}"

static double validate_ns(const pc_schema_t *s, const cJSON *args, uint64_t n)
{
	char err[256];
	int bad = 0;
	double t0 = bench_now_s();
	for (uint64_t i = 0; i < n; i++)
		bad |= pc_schema_validate(s, args, err, sizeof(err));
	double ns = (bench_now_s() - t0) * 1e9 / (double)n;
	if (bad)
		bench_fail("schema_validate: the arguments did not validate: %s", err);
	return ns;
}

static void run_schema(void)
{
	enum { S_PATTERNS = 0, S_PLAIN, S__COUNT, REPS = 5 };
	const uint64_t n = 200000;
	const char *const texts[S__COUNT] = {SCHEMA_PATTERNS, SCHEMA_PLAIN};
	pc_schema_t *s[S__COUNT];
	char err[256];
	for (int i = 0; i < S__COUNT; i++)
		if (pc_schema_compile_text(texts[i], &s[i], err, sizeof(err)) != 0)
			bench_fail("schema_validate: %s", err);
	cJSON *args = cJSON_Parse(SCHEMA_ARGS);
	if (!args)
		bench_fail("schema_validate: out of memory");
	double best[S__COUNT] = {1e9, 1e9};
	double t0 = bench_now_s();
	for (int r = 0; r < REPS; r++)
		for (int i = 0; i < S__COUNT; i++) {
			double ns = validate_ns(s[i], args, n);
			if (ns < best[i])
				best[i] = ns;
		}
	double wall = bench_now_s() - t0;
	char extra[256];
	snprintf(extra, sizeof(extra),
		 "\"iterations\":%" PRIu64 ",\"repetitions\":%d,\"patterns\":3,\"ns_per_validation\":%.1f,"
		 "\"plain_ns_per_validation\":%.1f,\"ns_per_pattern\":%.1f",
		 n, REPS, best[S_PATTERNS], best[S_PLAIN], (best[S_PATTERNS] - best[S_PLAIN]) / 3);
	bench_report("schema_validate", 1, wall, n * REPS * S__COUNT, extra);
	cJSON_Delete(args);
	for (int i = 0; i < S__COUNT; i++)
		pc_schema_free(s[i]);
}

/* ---- agent runs ------------------------------------------------------------------ */

/* One window of one configuration in a fresh agent layer; fails unless
 * every run ended well with exactly `k` tool calls. */
static void measure(const params_t *p, uint32_t sessions, uint32_t k, const pc_tool_registry_t *tools,
		    const pc_hooks_t *hooks, const char *scenario, result_t *out)
{
	pc_io_config_t icfg = {.threads = 1, .max_host_connections = sessions + 64,
			       .max_idle_connections = sessions + 64};
	agent_env_t e;
	env_base_start(&e, p->workers, &icfg);
	e.tools = tools;
	e.hooks = hooks;
	char json[1024];
	snprintf(json, sizeof(json), ENV_CONFIG_EMBEDDED, e.dir);
	env_agent_start(&e, json, 0, scenario);
	/* warm-up: every slot's first runs (session actors, connections),
	 * and at least 200 model calls; the window stays within the mock's
	 * per-session cursors (one per run), past which runs would share one
	 * cursor */
	uint64_t warm = (uint64_t)sessions * 4, min_runs = (200 + k) / (k + 1);
	if (warm < min_runs)
		warm = min_runs;
	window_t w = {.warm = warm, .runs = PC_MOCK_MAX_SESSIONS - warm - 2 * (uint64_t)sessions,
		      .seconds = p->seconds};
	pc_agent_stats_t st0, st1;
	pc_agent_stats(e.agent, &st0);
	run_agent(&e, sessions, p->turns, 0, w, out);
	pc_agent_stats(e.agent, &st1);
	uint64_t runs = out->ok + out->errors, calls = st1.tool_calls - st0.tool_calls;
	if (out->errors)
		bench_fail("%" PRIu64 " of %" PRIu64 " runs failed (%" PRIu64 " not started)", out->errors, runs,
			   out->refused);
	if (calls != (uint64_t)k * runs || st1.tool_loops_blocked != st0.tool_loops_blocked)
		bench_fail("%" PRIu64 " tool calls in %" PRIu64 " runs of %u (%" PRIu64 " blocked)", calls, runs, k,
			   st1.tool_loops_blocked - st0.tool_loops_blocked);
	if (!out->n || out->wall <= 0)
		bench_fail("empty window");
	env_stop(&e, NULL, 0);
}

static void tally_add(tally_t *t, const result_t *r)
{
	t->runs += r->n;
	t->wall += r->wall;
	t->cpu += r->cpu;
	t->run_cpu_us[t->rounds] = r->cpu * 1e6 / (double)r->n;
	t->run_wall_us[t->rounds] = r->wall * 1e6 / (double)r->n;
	t->rounds++;
}

static double cpu_us_per_run(const tally_t *t) { return t->cpu * 1e6 / (double)t->runs; }
static double wall_us_per_run(const tally_t *t) { return t->wall * 1e6 / (double)t->runs; }
static double runs_per_s(const tally_t *t) { return (double)t->runs / t->wall; }

static bool wanted(const params_t *p, variant_t v)
{
	return p->only == ONLY_ALL || p->only == ONLY_HOOKS || v == V_TEXT || v == V_NO_HOOKS;
}

static void measure_rounds(const params_t *p, const fixtures_t *f, uint32_t sessions, tally_t t[V__COUNT])
{
	const pc_hooks_t *hooks[V__COUNT] = {NULL, NULL, f->other_point, f->tool_hook};
	for (uint32_t r = 0; r < p->rounds; r++)
		for (int j = 0; j < V__COUNT; j++) {
			variant_t v = (variant_t)((j + (int)r) % V__COUNT);
			if (!wanted(p, v))
				continue;
			uint32_t k = v == V_TEXT ? 0 : p->tools;
			result_t res;
			memset(&res, 0, sizeof(res));
			measure(p, sessions, k, f->tools, hooks[v], k ? f->scenario_tools : f->scenario_text, &res);
			tally_add(&t[v], &res);
		}
}

/* The marginal CPU (or wall) of one round trip in each round, against the
 * text-only run of the same round, as a JSON array. */
static void marginal_rounds(char *buf, size_t len, const tally_t *v, const tally_t *text, uint32_t k, bool wall)
{
	int n = snprintf(buf, len, "[");
	for (uint32_t r = 0; r < v->rounds && (size_t)n < len; r++) {
		double d = wall ? v->run_wall_us[r] - text->run_wall_us[r] : v->run_cpu_us[r] - text->run_cpu_us[r];
		n += snprintf(buf + n, len - (size_t)n, "%s%.1f", r ? "," : "", d / k);
	}
	if ((size_t)n < len)
		snprintf(buf + n, len - (size_t)n, "]");
}

static double marginal_cpu(const tally_t *v, const tally_t *text, uint32_t k)
{
	return (cpu_us_per_run(v) - cpu_us_per_run(text)) / k;
}

static double marginal_wall(const tally_t *v, const tally_t *text, uint32_t k)
{
	return (wall_us_per_run(v) - wall_us_per_run(text)) / k;
}

static void report_roundtrips(const params_t *p, uint32_t sessions, const tally_t *text, const tally_t *tools)
{
	uint32_t k = p->tools;
	double base = cpu_us_per_run(text), m = marginal_cpu(tools, text, k);
	char rounds[256], extra[1536];
	marginal_rounds(rounds, sizeof(rounds), tools, text, k, false);
	snprintf(extra, sizeof(extra),
		 "\"sessions\":%u,\"tools_per_run\":%u,\"rounds\":%u,\"turns_per_session_key\":%u,"
		 "\"runs\":%" PRIu64 ",\"runs_per_s\":%.0f,\"roundtrips_per_s\":%.0f,\"cpu_us_per_run\":%.1f,"
		 "\"cpu_us_per_roundtrip\":%.1f,\"cpu_cores_busy\":%.2f,"
		 "\"baseline_runs\":%" PRIu64 ",\"baseline_runs_per_s\":%.0f,\"baseline_cpu_us_per_run\":%.1f,"
		 "\"baseline_cpu_cores_busy\":%.2f,"
		 "\"marginal_cpu_us_per_roundtrip\":%.1f,\"marginal_cpu_us_rounds\":%s,"
		 "\"roundtrip_vs_text_run\":%.3f,\"run_cpu_ratio\":%.3f,\"marginal_wall_us_per_roundtrip\":%.1f",
		 sessions, k, tools->rounds, p->turns, tools->runs, runs_per_s(tools), runs_per_s(tools) * k,
		 cpu_us_per_run(tools), cpu_us_per_run(tools) / k, tools->cpu / tools->wall, text->runs,
		 runs_per_s(text), base, text->cpu / text->wall, m, rounds, m / base, cpu_us_per_run(tools) / base,
		 marginal_wall(tools, text, k));
	bench_report("tool_roundtrips", p->workers, tools->wall, tools->runs * k, extra);
}

static void report_hooks_agent(const params_t *p, uint32_t sessions, const tally_t t[V__COUNT])
{
	uint32_t k = p->tools;
	const tally_t *text = &t[V_TEXT];
	char extra[3072];
	int n = snprintf(extra, sizeof(extra), "\"mode\":\"agent\",\"sessions\":%u,\"tools_per_run\":%u,\"rounds\":%u",
			 sessions, k, text->rounds);
	for (int v = V_NO_HOOKS; v < V__COUNT && (size_t)n < sizeof(extra); v++) {
		char cpu_rounds[256], wall_rounds[256];
		marginal_rounds(cpu_rounds, sizeof(cpu_rounds), &t[v], text, k, false);
		marginal_rounds(wall_rounds, sizeof(wall_rounds), &t[v], text, k, true);
		n += snprintf(extra + n, sizeof(extra) - (size_t)n,
			      ",\"%s_roundtrips_per_s\":%.0f,\"%s_cpu_us_per_roundtrip\":%.1f,"
			      "\"%s_marginal_cpu_us\":%.1f,\"%s_marginal_cpu_us_rounds\":%s,"
			      "\"%s_marginal_wall_us\":%.1f,\"%s_marginal_wall_us_rounds\":%s",
			      variant_key[v], runs_per_s(&t[v]) * k, variant_key[v], cpu_us_per_run(&t[v]) / k,
			      variant_key[v], marginal_cpu(&t[v], text, k), variant_key[v], cpu_rounds, variant_key[v],
			      marginal_wall(&t[v], text, k), variant_key[v], wall_rounds);
	}
	double none = marginal_cpu(&t[V_NO_HOOKS], text, k);
	if ((size_t)n < sizeof(extra))
		snprintf(extra + n, sizeof(extra) - (size_t)n,
			 ",\"other_point_vs_none\":%.3f,\"before_tool_call_vs_none\":%.3f,"
			 "\"other_point_roundtrips_ratio\":%.3f,\"before_tool_call_extra_cpu_us\":%.1f,"
			 "\"before_tool_call_extra_wall_us\":%.1f",
			 marginal_cpu(&t[V_OTHER_POINT], text, k) / none, marginal_cpu(&t[V_TOOL_HOOK], text, k) / none,
			 runs_per_s(&t[V_OTHER_POINT]) / runs_per_s(&t[V_NO_HOOKS]),
			 marginal_cpu(&t[V_TOOL_HOOK], text, k) - none,
			 marginal_wall(&t[V_TOOL_HOOK], text, k) - marginal_wall(&t[V_NO_HOOKS], text, k));
	bench_report("hook_chain_empty", p->workers, t[V_OTHER_POINT].wall, t[V_OTHER_POINT].runs * k, extra);
}

/* ---- main ------------------------------------------------------------------------- */

#define USAGE                                                                                          \
	"usage: bench_tools [--workers W] [--sessions N] [--seconds S] [--tools K] [--rounds R] "          \
	"[--turns T] [--only roundtrips|hooks|check|schema]"

/* An unsigned number in [lo, hi], or a usage failure. */
static uint32_t arg_u32(const char *flag, const char *s, uint32_t lo, uint32_t hi)
{
	char *end;
	unsigned long v = strtoul(s, &end, 10);
	if (!*s || *end || v < lo || v > hi)
		bench_fail("%s: a number from %u to %u\n" USAGE, flag, lo, hi);
	return (uint32_t)v;
}

static void parse(int argc, char **argv, params_t *p)
{
	if ((argc - 1) % 2)
		bench_fail(USAGE);
	for (int i = 1; i + 1 < argc; i += 2) {
		const char *f = argv[i], *v = argv[i + 1];
		if (!strcmp(f, "--workers")) {
			p->workers = arg_u32(f, v, 1, 256);
		} else if (!strcmp(f, "--sessions")) {
			p->sessions = arg_u32(f, v, 1, MAX_SESSIONS);
		} else if (!strcmp(f, "--tools")) {
			p->tools = arg_u32(f, v, 1, MAX_TOOLS);
		} else if (!strcmp(f, "--rounds")) {
			p->rounds = arg_u32(f, v, 1, MAX_ROUNDS);
		} else if (!strcmp(f, "--turns")) {
			p->turns = arg_u32(f, v, 0, 1000000);
		} else if (!strcmp(f, "--seconds")) {
			char *end;
			p->seconds = strtod(v, &end);
			if (!*v || *end || !(p->seconds > 0 && p->seconds <= MAX_SECONDS))
				bench_fail("--seconds: more than 0, at most %.0f\n" USAGE, MAX_SECONDS);
		} else if (!strcmp(f, "--only")) {
			p->only = !strcmp(v, "roundtrips") ? ONLY_ROUNDTRIPS
				  : !strcmp(v, "hooks")    ? ONLY_HOOKS
				  : !strcmp(v, "check")    ? ONLY_CHECK
				  : !strcmp(v, "schema")   ? ONLY_SCHEMA
							   : -1;
			if (p->only < 0)
				bench_fail(USAGE);
		} else {
			bench_fail(USAGE);
		}
	}
}

static void fixtures_init(const params_t *p, fixtures_t *f)
{
	f->tools = tools_new();
	f->other_point = hooks_on_one(PC_HOOK_GATEWAY_START);
	f->tool_hook = hooks_on_one(PC_HOOK_BEFORE_TOOL_CALL);
	f->scenario_text = scenario_new(0);
	f->scenario_tools = scenario_new(p->tools);
}

/* After every agent layer is gone (the hooks outlive the runtimes that
 * ran their chains). */
static void fixtures_free(fixtures_t *f)
{
	pc_tool_registry_free(f->tools);
	pc_hooks_free(f->other_point);
	pc_hooks_free(f->tool_hook);
	free(f->scenario_text);
	free(f->scenario_tools);
}

int main(int argc, char **argv)
{
	params_t p = {.workers = 2, .tools = 4, .rounds = 3, .turns = 1, .seconds = 2, .only = ONLY_ALL};
	parse(argc, argv, &p);
	if (p.only == ONLY_ALL || p.only == ONLY_HOOKS || p.only == ONLY_CHECK)
		run_check(&p);
	if (p.only == ONLY_ALL || p.only == ONLY_HOOKS || p.only == ONLY_SCHEMA)
		run_schema();
	if (p.only == ONLY_CHECK || p.only == ONLY_SCHEMA)
		return 0;
	const uint32_t set[] = {1, 100};
	size_t nset = p.sessions ? 1 : sizeof(set) / sizeof(set[0]);
	uint32_t most = p.sessions ? p.sessions : set[nset - 1];
	/* both ends of each session's connection are in this process */
	rlim_t nofile = env_raise_nofile((rlim_t)most * 2 + 256);
	if ((rlim_t)most * 2 + 256 > nofile)
		bench_fail("%u sessions need %u open files; the limit is %lu", most, most * 2 + 256,
			   (unsigned long)nofile);
	fixtures_t f;
	fixtures_init(&p, &f);
	for (size_t i = 0; i < nset; i++) {
		uint32_t sessions = p.sessions ? p.sessions : set[i];
		tally_t t[V__COUNT];
		memset(t, 0, sizeof(t));
		measure_rounds(&p, &f, sessions, t);
		if (p.only == ONLY_ALL || p.only == ONLY_ROUNDTRIPS)
			report_roundtrips(&p, sessions, &t[V_TEXT], &t[V_NO_HOOKS]);
		if (p.only == ONLY_ALL || p.only == ONLY_HOOKS)
			report_hooks_agent(&p, sessions, t);
	}
	fixtures_free(&f);
	return 0;
}
