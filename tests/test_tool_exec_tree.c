/*
 * How long what an exec command starts may live, through the real tool
 * invocation: whatever a foreground command leaves behind (`&`, `nohup`,
 * `setsid`, a double fork, a process holding the output pipe) is killed
 * when the command ends; a background command and what it started live
 * until it ends, its time limit, a kill, or the table's end; and the
 * supervision never takes an exit status that belongs to someone else
 * (a child the test forked itself), nor depends on the thread that
 * started a command staying alive.
 *
 * Commands write the pids of what they leave behind into files of the
 * workspace; the test watches those pids (same start time, so a reused
 * pid is not mistaken for them) and SIGKILLs any that outlives its wait,
 * so a failure leaves nothing running.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <ftw.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agents/tools/exec_tool.h"
#include "test_util.h"
#include "tool_owner.h"
#include "tool_proc_watch.h"

/* Waits in the shell until `f` has been written (at most 5 s). */
#define WAIT_FILE(f) "i=0; while ! test -s " f " && test $i -lt 500; do sleep 0.01; i=$((i+1)); done"
/* A process that leaves the command's session, its pid in `f`. */
#define ESCAPE(f) "setsid sh -c 'echo $$ > " f "; exec sleep 99'"
#define GONE_MS 5000

typedef struct tf {
	pc_runtime_t *rt;
	pc_tool_registry_t *reg;
	pc_process_table_t *table;
	seen_t seen;
	pc_actor_t *owner;
	char ws[64];
} tf_t;

static tf_t *tf_keep; /* keeps the fixture reachable for LeakSanitizer */

/* After each test, even one that failed half-way: SIGKILL what the
 * commands wrote down and is still alive. */
static void kill_leftovers(void)
{
	static const char *const names[] = {"job.pid", "nohup.pid", "esc.pid", "daemon.pid", "main.pid", "other.pid"};
	for (size_t i = 0; tf_keep && i < sizeof(names) / sizeof(names[0]); i++) {
		char path[128];
		snprintf(path, sizeof(path), "%s/%s", tf_keep->ws, names[i]);
		(void)watch_pid_file(path, 0);
	}
	watched_kill_all();
}

TestSuite(exec_tree, .fini = kill_leftovers);

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

static tf_t *tf_new(void)
{
	tf_t *f = calloc(1, sizeof(*f));
	cr_assert_not_null(f);
	tf_keep = f;
	snprintf(f->ws, sizeof(f->ws), "/tmp/pc-exec-tree-XXXXXX");
	cr_assert_not_null(mkdtemp(f->ws));
	pthread_mutex_init(&f->seen.lock, NULL);
	f->rt = start_rt(2);
	cr_assert_eq(pc_tool_registry_new(&f->reg), 0);
	cr_assert_eq(pc_process_table_new(NULL, &f->table), 0);
	pc_exec_policy_t pol = {.mode = PC_EXEC_FULL, .kill_grace_ms = 300};
	cr_assert_eq(pc_tool_register_exec(f->reg, &pol, f->table), 0);
	cr_assert_eq(pc_spawn(f->rt, &owner_b, &f->seen, &f->owner), 0);
	return f;
}

static void tf_free(tf_t *f)
{
	pc_process_table_free(f->table);
	pc_actor_stop(f->owner, PC_EXIT_NORMAL);
	pc_actor_release(f->owner);
	pc_runtime_free(f->rt);
	pc_tool_registry_free(f->reg);
	cr_assert_eq(nftw(f->ws, rm_entry, 16, FTW_DEPTH | FTW_PHYS), 0);
	free(f->seen.last.text);
	pthread_mutex_destroy(&f->seen.lock);
	free(f);
	tf_keep = NULL;
	ASSERT_NO_LEAKS();
}

/* Runs exec {"command": cmd} plus `more` (JSON members, may be "") to its
 * DONE; the caller frees .text. */
static rec_t exec_cmd(tf_t *f, const char *cmd, const char *more)
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
	pc_tool_invoke_t req = {
		.name = "exec",
		.tool_call_id = "call_1",
		.arguments = args,
		.env = {.workspace = f->ws, .session_key = "s", .run_id = "r"},
	};
	uint32_t before = done_count(&f->seen);
	pc_actor_t *a = NULL;
	cr_assert_eq(pc_tool_invoke_start(f->rt, f->reg, &req, f->owner, &a), 0);
	pc_actor_release(a);
	free(args);
	AWAIT(done_count(&f->seen) == before + 1, 20000);
	return last_done(&f->seen);
}

static void expect_ok(rec_t r)
{
	cr_assert_eq(r.status, PC_TOOL_OK, "%s: %s", pc_tool_status_name(r.status), r.text);
	free(r.text);
}

/* The process whose pid the command wrote into `name`. */
static watched_t watch(tf_t *f, const char *name)
{
	char path[128];
	snprintf(path, sizeof(path), "%s/%s", f->ws, name);
	watched_t w = watch_pid_file(path, GONE_MS);
	cr_assert_gt(w.pid, 0, "no pid in %s", name);
	return w;
}

static void assert_gone(const watched_t *w, const char *what)
{
	cr_assert(await_gone_or_kill(w, GONE_MS), "%s (pid %d) outlived its command", what, (int)w->pid);
}

/* ---- a foreground command takes what it started with it ---------------------------- */

Test(exec_tree, background_job_of_a_foreground_command_is_killed)
{
	tf_t *f = tf_new();
	expect_ok(exec_cmd(f, "sleep 99 >/dev/null 2>&1 & echo $! > job.pid", ""));
	watched_t w = watch(f, "job.pid");
	assert_gone(&w, "sleep 99 &");
	tf_free(f);
}

Test(exec_tree, nohup_is_killed)
{
	tf_t *f = tf_new();
	expect_ok(exec_cmd(f, "nohup sleep 99 >/dev/null 2>&1 & echo $! > nohup.pid", ""));
	watched_t w = watch(f, "nohup.pid");
	assert_gone(&w, "nohup sleep 99 &");
	tf_free(f);
}

/* A new session leaves the command's process group (and a kill of the
 * group); this one also keeps the output pipe open, which must not hold
 * the result back. */
Test(exec_tree, setsid_escape_is_killed)
{
	tf_t *f = tf_new();
	uint64_t t0 = now_ms();
	expect_ok(exec_cmd(f, ESCAPE("esc.pid") " & " WAIT_FILE("esc.pid"), ""));
	uint64_t took = now_ms() - t0;
	watched_t w = watch(f, "esc.pid");
	assert_gone(&w, "setsid sleep 99 &");
	cr_assert_lt(took, 10000u, "the result waited %llu ms for the escaped process", (unsigned long long)took);
	tf_free(f);
}

/* A double fork: the intermediate shell exits at once, the orphan is in a
 * session of its own. */
Test(exec_tree, double_fork_daemon_is_killed)
{
	tf_t *f = tf_new();
	expect_ok(exec_cmd(f, "( " ESCAPE("daemon.pid") " >/dev/null 2>&1 & ); " WAIT_FILE("daemon.pid"), ""));
	watched_t w = watch(f, "daemon.pid");
	assert_gone(&w, "the daemon");
	tf_free(f);
}

/* The command's own exit status still reads as before. */
Test(exec_tree, status_comes_through_the_supervisor)
{
	tf_t *f = tf_new();
	rec_t r = exec_cmd(f, ESCAPE("esc.pid") " >/dev/null 2>&1 & " WAIT_FILE("esc.pid") "; exit 3", "");
	cr_assert_str_eq(r.text, "exit code 3");
	free(r.text);
	watched_t w = watch(f, "esc.pid");
	assert_gone(&w, "setsid sleep 99 &");
	r = exec_cmd(f, "kill -USR2 $$", "");
	cr_assert_str_eq(r.text, "killed by signal 12");
	free(r.text);
	tf_free(f);
}

/* ---- a background command lives until it ends, its limit, a kill, the table ---- */

static void start_background(tf_t *f, const char *more)
{
	char opts[128];
	snprintf(opts, sizeof(opts), "\"background\":true%s%s", *more ? "," : "", more);
	expect_ok(exec_cmd(f, ESCAPE("esc.pid") " >/dev/null 2>&1 & echo $$ > main.pid; exec sleep 98", opts));
}

Test(exec_tree, background_outlives_other_commands_until_killed)
{
	tf_t *f = tf_new();
	start_background(f, "");
	watched_t main_w = watch(f, "main.pid"), esc = watch(f, "esc.pid");
	/* Foreground commands coming and going leave it alone. */
	expect_ok(exec_cmd(f, "sleep 0.2 & true", ""));
	expect_ok(exec_cmd(f, ESCAPE("other.pid") " >/dev/null 2>&1 & " WAIT_FILE("other.pid"), ""));
	watched_t other = watch(f, "other.pid");
	assert_gone(&other, "the foreground command's escape");
	cr_assert(watched_alive(&main_w), "the background command was killed by another's end");
	cr_assert(watched_alive(&esc), "the background command's child was killed by another's end");
	pc_process_t *p = NULL;
	cr_assert_eq(pc_process_find(f->table, "p1", &p), 0);
	cr_assert_eq(pc_process_kill(p), 0);
	pc_process_release(p);
	assert_gone(&main_w, "the killed background command");
	assert_gone(&esc, "the killed background command's escape");
	tf_free(f);
}

Test(exec_tree, background_time_limit_takes_the_tree)
{
	tf_t *f = tf_new();
	start_background(f, "\"timeout\":1");
	watched_t main_w = watch(f, "main.pid"), esc = watch(f, "esc.pid");
	assert_gone(&main_w, "the background command past its limit");
	assert_gone(&esc, "the escape of a background command past its limit");
	tf_free(f);
}

/* The end of a background command's main process ends what it left. */
Test(exec_tree, background_leftovers_die_with_it)
{
	tf_t *f = tf_new();
	expect_ok(exec_cmd(f, ESCAPE("esc.pid") " >/dev/null 2>&1 & " WAIT_FILE("esc.pid"), "\"background\":true"));
	watched_t esc = watch(f, "esc.pid");
	assert_gone(&esc, "what a finished background command left");
	tf_free(f);
}

Test(exec_tree, table_free_takes_every_tree)
{
	tf_t *f = tf_new();
	start_background(f, "");
	watched_t main_w = watch(f, "main.pid"), esc = watch(f, "esc.pid");
	pc_process_table_free(f->table);
	cr_assert_eq(pc_process_table_new(NULL, &f->table), 0); /* tf_free frees one */
	assert_gone(&main_w, "a background command after the table's end");
	assert_gone(&esc, "a background command's escape after the table's end");
	tf_free(f);
}

/* ---- what the supervision must not do ------------------------------------------- */

/* A child the test forked itself, ending while commands (and their
 * escapes) come and go: its exit status is the test's to collect. */
Test(exec_tree, never_reaps_a_child_it_did_not_start)
{
	tf_t *f = tf_new();
	pid_t early = fork();
	cr_assert_geq(early, 0);
	if (early == 0)
		_exit(7);
	pid_t late = fork();
	cr_assert_geq(late, 0);
	if (late == 0) {
		struct timespec ts = {0, 300 * 1000000L};
		nanosleep(&ts, NULL);
		_exit(9);
	}
	expect_ok(exec_cmd(f, ESCAPE("esc.pid") " >/dev/null 2>&1 & " WAIT_FILE("esc.pid"), ""));
	expect_ok(exec_cmd(f, "nohup sleep 0.5 >/dev/null 2>&1 & sleep 0.4", ""));
	watched_t esc = watch(f, "esc.pid");
	assert_gone(&esc, "setsid sleep 99 &");
	int st = 0;
	cr_assert_eq(waitpid(early, &st, 0), early, "waitpid: %s", strerror(errno));
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 7, "status %#x", st);
	cr_assert_eq(waitpid(late, &st, 0), late, "waitpid: %s", strerror(errno));
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 9, "status %#x", st);
	tf_free(f);
}

/* The parent-death signal fires when the *thread* that started a command
 * ends; the command must not take that for Pincer's end. */
typedef struct spawner {
	tf_t *f;
	pc_process_t *p;
	int rc;
} spawner_t;

static void *spawn_from_thread(void *arg)
{
	spawner_t *s = arg;
	char *argv[] = {"sh", "-c", "echo $$ > main.pid; exec sleep 99", NULL};
	char *envp[] = {"PATH=/usr/bin:/bin", NULL};
	pc_process_spawn_t req = {.path = "/bin/sh", .argv = argv, .envp = envp, .cwd = s->f->ws, .command = "sh"};
	s->rc = pc_process_spawn(s->f->table, s->f->rt, &req, &s->p);
	return NULL;
}

Test(exec_tree, outlives_the_thread_that_started_it)
{
	tf_t *f = tf_new();
	spawner_t s = {.f = f};
	pthread_t th;
	cr_assert_eq(pthread_create(&th, NULL, spawn_from_thread, &s), 0);
	cr_assert_eq(pthread_join(th, NULL), 0);
	cr_assert_eq(s.rc, 0);
	watched_t w = watch(f, "main.pid");
	sleep_ms(300);
	bool alive = watched_alive(&w);
	pc_process_info_t info;
	pc_process_info(s.p, &info);
	cr_assert(alive && info.state == PC_PROCESS_RUNNING, "the command ended with the thread that started it");
	cr_assert_eq(pc_process_kill(s.p), 0);
	pc_process_release(s.p);
	assert_gone(&w, "the killed command");
	tf_free(f);
}
