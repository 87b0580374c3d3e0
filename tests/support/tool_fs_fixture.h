/*
 * The fixture of the file-tool tests: a runtime, a registry with the file
 * tools, an owner actor that records each PC_MSG_TOOL_DONE, and a fresh
 * workspace under /tmp with a sibling "outside" directory holding
 * secret.txt ("SECRET"), which no call may read, change or create files
 * next to (fx_free checks). Calls go through pc_tool_invoke_start, the
 * entry the agent loop uses.
 */
#ifndef PC_TESTS_TOOL_FS_FIXTURE_H
#define PC_TESTS_TOOL_FS_FIXTURE_H

#include <criterion/criterion.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agents/tools/fs_tools.h"
#include "file_util.h"
#include "test_util.h"
#include "tool_owner.h"

typedef struct fx {
	pc_runtime_t *rt;
	pc_tool_registry_t *reg;
	seen_t seen;
	pc_actor_t *owner;
	char root[64];
	char out[64];
	const char *workspace; /* what the calls get as env.workspace */
	int fds;               /* open once the runtime runs: the calls leave as many */
} fx_t;

static fx_t *fx_keep; /* keeps the fixture reachable for LeakSanitizer */

static inline void put_n(const char *dir, const char *rel, const void *data, size_t n)
{
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s/%s", dir, rel);
	write_file_n(p, data, n);
}

static inline void put(const char *dir, const char *rel, const char *text)
{
	put_n(dir, rel, text, strlen(text));
}

/* The file's content (caller frees), or NULL when it does not exist. */
static inline char *slurp(const char *dir, const char *rel)
{
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s/%s", dir, rel);
	return read_file_or_null(p);
}

static inline void assert_content(const char *dir, const char *rel, const char *want)
{
	char *got = slurp(dir, rel);
	cr_assert_not_null(got, "%s/%s does not exist", dir, rel);
	cr_assert_str_eq(got, want, "%s", rel);
	free(got);
}

static inline bool exists_at(const char *dir, const char *rel)
{
	char p[PATH_MAX];
	struct stat st;
	snprintf(p, sizeof(p), "%s/%s", dir, rel);
	return lstat(p, &st) == 0;
}

static inline void link_at(const char *dir, const char *rel, const char *target)
{
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s/%s", dir, rel);
	cr_assert_eq(symlink(target, p), 0, "%s", p);
}

static inline void mkdir_at(const char *dir, const char *rel)
{
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s/%s", dir, rel);
	cr_assert_eq(mkdir(p, 0755), 0, "%s", p);
}

/* Entries of a directory, "." and ".." aside. */
static inline int entry_count(const char *dir)
{
	DIR *d = opendir(dir);
	cr_assert_not_null(d);
	int n = 0;
	struct dirent *de;
	while ((de = readdir(d)))
		n += strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0;
	closedir(d);
	return n;
}

static inline fx_t *fx_new(void)
{
	fx_t *f = calloc(1, sizeof(*f));
	cr_assert_not_null(f);
	fx_keep = f;
	snprintf(f->root, sizeof(f->root), "/tmp/pc-fs-XXXXXX");
	snprintf(f->out, sizeof(f->out), "/tmp/pc-fs-out-XXXXXX");
	cr_assert_not_null(mkdtemp(f->root));
	cr_assert_not_null(mkdtemp(f->out));
	put(f->out, "secret.txt", "SECRET");
	f->workspace = f->root;
	f->rt = start_rt(2);
	cr_assert_eq(pc_tool_registry_new(&f->reg), 0);
	cr_assert_eq(pc_tool_register_fs(f->reg), 0);
	pthread_mutex_init(&f->seen.lock, NULL);
	cr_assert_eq(pc_spawn(f->rt, &owner_b, &f->seen, &f->owner), 0);
	f->fds = open_fds();
	return f;
}

static inline void assert_outside_intact(fx_t *f)
{
	assert_content(f->out, "secret.txt", "SECRET");
	cr_assert_eq(entry_count(f->out), 1, "something was created outside the workspace");
}

static inline void fx_free(fx_t *f)
{
	assert_outside_intact(f);
	cr_assert_eq(open_fds(), f->fds, "file descriptors leaked");
	pc_actor_stop(f->owner, PC_EXIT_NORMAL);
	pc_actor_release(f->owner);
	pc_runtime_free(f->rt);
	pc_tool_registry_free(f->reg);
	free(f->seen.last.text);
	pthread_mutex_destroy(&f->seen.lock);
	rm_tree(f->root);
	rm_tree(f->out);
	free(f);
	fx_keep = NULL;
	ASSERT_NO_LEAKS();
}

/* Invokes `tool` with the JSON text `args`, waits for its one DONE and
 * returns it (caller frees .text). */
static inline rec_t call(fx_t *f, const char *tool, const char *args)
{
	pc_tool_invoke_t req = {
		.name = tool,
		.tool_call_id = "call_fs",
		.arguments = args,
		.env = {.workspace = f->workspace, .session_key = "s", .run_id = "r"},
	};
	uint32_t before = done_count(&f->seen);
	pc_actor_t *a = NULL;
	cr_assert_eq(pc_tool_invoke_start(f->rt, f->reg, &req, f->owner, &a), 0, "invoke %s", tool);
	AWAIT(done_count(&f->seen) == before + 1, 20000);
	pc_actor_release(a);
	rec_t r = last_done(&f->seen);
	cr_assert_not_null(r.text);
	return r;
}

/* Same, with the arguments as a cJSON object (taken). */
static inline rec_t call_obj(fx_t *f, const char *tool, cJSON *args)
{
	char *json = cJSON_PrintUnformatted(args);
	cr_assert_not_null(json);
	cJSON_Delete(args);
	rec_t r = call(f, tool, json);
	cJSON_free(json);
	return r;
}

/* {"path": path} plus one more string field when k is not NULL. */
static inline cJSON *args_path(const char *path, const char *k, const char *v)
{
	cJSON *o = cJSON_CreateObject();
	cr_assert_not_null(o);
	cr_assert_not_null(cJSON_AddStringToObject(o, "path", path));
	if (k)
		cr_assert_not_null(cJSON_AddStringToObject(o, k, v));
	return o;
}

static inline void expect_ok(rec_t r, const char *want)
{
	cr_assert_eq(r.status, PC_TOOL_OK, "%s", r.text);
	cr_assert_not(r.is_error, "%s", r.text);
	if (want)
		cr_assert_str_eq(r.text, want);
	free(r.text);
}

/* An error result whose text contains `want`. */
static inline void expect_error(rec_t r, const char *want)
{
	cr_assert(r.is_error, "expected an error, got: %s", r.text);
	cr_assert_neq(r.status, PC_TOOL_OK);
	cr_assert_not_null(strstr(r.text, want), "\"%s\" lacks \"%s\"", r.text, want);
	free(r.text);
}

/* `path` leads out of the workspace: read, write, edit and list each
 * refuse it with an error that holds `want`, nothing outside is read,
 * changed or created. */
static inline void expect_refused_by_every_tool(fx_t *f, const char *path, const char *want)
{
	rec_t r = call_obj(f, "read", args_path(path, NULL, NULL));
	cr_assert_null(strstr(r.text, "SECRET"), "read %s: %s", path, r.text);
	expect_error(r, want);
	expect_error(call_obj(f, "write", args_path(path, "content", "PWNED")), want);
	cJSON *o = args_path(path, "oldText", "SECRET");
	cr_assert_not_null(cJSON_AddStringToObject(o, "newText", "PWNED"));
	expect_error(call_obj(f, "edit", o), want);
	expect_error(call_obj(f, "list", args_path(path, NULL, NULL)), want);
	assert_outside_intact(f);
}

#endif
