/*
 * The fixture of the exec tool tests: a runtime, a registry with exec and
 * process over a process table, an owner actor that records each
 * PC_MSG_TOOL_DONE, and a fresh workspace under /tmp; calls go through
 * pc_tool_invoke_start, the entry the agent loop uses. xf_free frees the
 * table first (which kills what still runs) and checks for leaks.
 */
#ifndef PC_TESTS_TOOL_EXEC_FIXTURE_H
#define PC_TESTS_TOOL_EXEC_FIXTURE_H

#include <criterion/criterion.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agents/tools/exec_tool.h"
#include "file_util.h"
#include "test_util.h"
#include "tool_owner.h"

typedef struct xf {
	pc_runtime_t *rt;
	pc_tool_registry_t *reg;
	pc_process_table_t *table;
	seen_t seen;
	pc_actor_t *owner;
	char ws[64];     /* the workspace, as given */
	char *ws_real;   /* realpath of it */
	int fds0;        /* open descriptors once set up */
	uint64_t jobs0;  /* blocking jobs done once set up */
} xf_t;

static xf_t *xf_keep; /* keeps the fixture reachable for LeakSanitizer */

static const pc_exec_policy_t full_policy = {.mode = PC_EXEC_FULL, .kill_grace_ms = 300};

static inline xf_t *xf_new(const pc_exec_policy_t *pol, const pc_process_table_config_t *tc)
{
	xf_t *f = calloc(1, sizeof(*f));
	cr_assert_not_null(f);
	xf_keep = f;
	snprintf(f->ws, sizeof(f->ws), "/tmp/pc-exec-XXXXXX");
	cr_assert_not_null(mkdtemp(f->ws));
	f->ws_real = realpath(f->ws, NULL);
	cr_assert_not_null(f->ws_real);
	pthread_mutex_init(&f->seen.lock, NULL);
	f->rt = start_rt(2);
	cr_assert_eq(pc_tool_registry_new(&f->reg), 0);
	cr_assert_eq(pc_process_table_new(tc, &f->table), 0);
	cr_assert_eq(pc_tool_register_exec(f->reg, pol ? pol : &full_policy, f->table), 0);
	cr_assert_eq(pc_spawn(f->rt, &owner_b, &f->seen, &f->owner), 0);
	f->fds0 = open_fds();
	f->jobs0 = stats(f->rt).blocking_done;
	return f;
}

/* Frees the table (which kills what still runs), then the rest, in the
 * order process_table.h asks for. */
static inline void xf_free(xf_t *f)
{
	pc_process_table_free(f->table);
	if (f->owner)
		pc_actor_stop(f->owner, PC_EXIT_NORMAL);
	pc_actor_release(f->owner);
	pc_runtime_free(f->rt);
	pc_tool_registry_free(f->reg);
	rm_tree(f->ws);
	free(f->seen.last.text);
	pthread_mutex_destroy(&f->seen.lock);
	free(f->ws_real);
	free(f);
	xf_keep = NULL;
	ASSERT_NO_LEAKS();
}

static inline void invoke_env(xf_t *f, const char *name, const char *args, const char *workspace,
			      uint64_t timeout_ms, pc_actor_t **out)
{
	pc_tool_invoke_t req = {
		.name = name,
		.tool_call_id = "call_1",
		.arguments = args,
		.env = {.workspace = workspace, .session_key = "s", .run_id = "r"},
		.timeout_ms = timeout_ms,
	};
	cr_assert_eq(pc_tool_invoke_start(f->rt, f->reg, &req, f->owner, out), 0, "invoke %s %s", name, args);
}

static inline pc_actor_t *invoke(xf_t *f, const char *name, const char *args)
{
	pc_actor_t *a = NULL;
	invoke_env(f, name, args, f->ws, 0, &a);
	return a;
}

static inline rec_t await_next(xf_t *f, uint32_t before)
{
	AWAIT(done_count(&f->seen) == before + 1, 20000);
	return last_done(&f->seen);
}

/* Runs a tool to its DONE; the caller frees .text. */
static inline rec_t run(xf_t *f, const char *name, const char *args)
{
	uint32_t before = done_count(&f->seen);
	pc_actor_release(invoke(f, name, args));
	return await_next(f, before);
}

/* exec {"command": cmd} plus `more` (JSON members, may be ""). */
static inline rec_t run_cmd(xf_t *f, const char *cmd, const char *more)
{
	cJSON *o = cJSON_CreateObject();
	cr_assert_not_null(o);
	cr_assert_not_null(cJSON_AddStringToObject(o, "command", cmd));
	char *j = cJSON_PrintUnformatted(o);
	cJSON_Delete(o);
	cr_assert_not_null(j);
	char *args = NULL;
	cr_assert_geq(asprintf(&args, "%.*s%s%s}", (int)strlen(j) - 1, j, *more ? "," : "", more), 0);
	cJSON_free(j);
	rec_t r = run(f, "exec", args);
	free(args);
	return r;
}

/* Registers exec with `pol` into a registry and table of its own, and
 * frees them: pc_tool_register_exec's answer. A refused policy must leave
 * the registry empty. */
static inline int register_exec_alone(const pc_exec_policy_t *pol)
{
	pc_tool_registry_t *r = NULL;
	pc_process_table_t *t = NULL;
	cr_assert_eq(pc_tool_registry_new(&r), 0);
	cr_assert_eq(pc_process_table_new(NULL, &t), 0);
	int rc = pc_tool_register_exec(r, pol, t);
	if (rc != 0)
		cr_assert_eq(pc_tool_count(r), 0u, "a refused policy registered tools");
	pc_tool_registry_free(r);
	pc_process_table_free(t);
	return rc;
}

#endif
