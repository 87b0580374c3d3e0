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
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tool_exec_fixture.h"
#include "tool_proc_watch.h"

/* Waits in the shell until `f` has been written (at most 5 s). */
#define WAIT_FILE(f) "i=0; while ! test -s " f " && test $i -lt 500; do sleep 0.01; i=$((i+1)); done"
/* A process that leaves the command's session, its pid in `f`. */
#define ESCAPE(f) "setsid sh -c 'echo $$ > " f "; exec sleep 99'"
#define GONE_MS 5000

/* After each test, even one that failed half-way: SIGKILL what the
 * commands wrote down and is still alive. */
static void kill_leftovers(void)
{
	kill_pid_files(xf_keep ? xf_keep->ws : NULL,
		       (const char *const[]){"job.pid", "nohup.pid", "esc.pid", "daemon.pid", "main.pid", "other.pid",
					     NULL});
}

TestSuite(exec_tree, .fini = kill_leftovers);

static void expect_ok(rec_t r)
{
	cr_assert_eq(r.status, PC_TOOL_OK, "%s: %s", pc_tool_status_name(r.status), r.text);
	free(r.text);
}

static void assert_gone(const watched_t *w, const char *what)
{
	cr_assert(await_gone_or_kill(w, GONE_MS), "%s (pid %d) outlived its command", what, (int)w->pid);
}

/* ---- a foreground command takes what it started with it ---------------------------- */

/* Runs the foreground command `cmd`, which leaves a process behind with
 * its pid in `pid_file`; that process must be gone once the command has
 * ended. How long the command took to answer, in ms. */
static uint64_t expect_left_behind_killed(const char *cmd, const char *pid_file, const char *what)
{
	xf_t *f = xf_new(NULL, NULL);
	uint64_t t0 = now_ms();
	expect_ok(run_cmd(f, cmd, ""));
	uint64_t took = now_ms() - t0;
	watched_t w = watch_pid_in(f->ws, pid_file, GONE_MS);
	assert_gone(&w, what);
	xf_free(f);
	return took;
}

Test(exec_tree, background_job_of_a_foreground_command_is_killed)
{
	expect_left_behind_killed("sleep 99 >/dev/null 2>&1 & echo $! > job.pid", "job.pid", "sleep 99 &");
}

Test(exec_tree, nohup_is_killed)
{
	expect_left_behind_killed("nohup sleep 99 >/dev/null 2>&1 & echo $! > nohup.pid", "nohup.pid", "nohup sleep 99 &");
}

/* A new session leaves the command's process group (and a kill of the
 * group); this one also keeps the output pipe open, which must not hold
 * the result back. */
Test(exec_tree, setsid_escape_is_killed)
{
	uint64_t took = expect_left_behind_killed(ESCAPE("esc.pid") " & " WAIT_FILE("esc.pid"), "esc.pid",
						  "setsid sleep 99 &");
	cr_assert_lt(took, 10000u, "the result waited %llu ms for the escaped process", (unsigned long long)took);
}

/* A double fork: the intermediate shell exits at once, the orphan is in a
 * session of its own. */
Test(exec_tree, double_fork_daemon_is_killed)
{
	expect_left_behind_killed("( " ESCAPE("daemon.pid") " >/dev/null 2>&1 & ); " WAIT_FILE("daemon.pid"),
				  "daemon.pid", "the daemon");
}

/* The command's own exit status still reads as before. */
Test(exec_tree, status_comes_through_the_supervisor)
{
	xf_t *f = xf_new(NULL, NULL);
	rec_t r = run_cmd(f, ESCAPE("esc.pid") " >/dev/null 2>&1 & " WAIT_FILE("esc.pid") "; exit 3", "");
	cr_assert_str_eq(r.text, "exit code 3");
	free(r.text);
	watched_t w = watch_pid_in(f->ws, "esc.pid", GONE_MS);
	assert_gone(&w, "setsid sleep 99 &");
	r = run_cmd(f, "kill -USR2 $$", "");
	cr_assert_str_eq(r.text, "killed by signal 12");
	free(r.text);
	xf_free(f);
}

/* ---- a background command lives until it ends, its limit, a kill, the table ---- */

/* A background command (exec options `more`, may be "") that leaves an
 * escape and goes on: the two processes it leaves running. */
typedef struct bg_tree {
	watched_t main, esc;
} bg_tree_t;

static bg_tree_t start_background(xf_t *f, const char *more)
{
	char opts[128];
	snprintf(opts, sizeof(opts), "\"background\":true%s%s", *more ? "," : "", more);
	expect_ok(run_cmd(f, ESCAPE("esc.pid") " >/dev/null 2>&1 & echo $$ > main.pid; exec sleep 98", opts));
	return (bg_tree_t){.main = watch_pid_in(f->ws, "main.pid", GONE_MS),
			   .esc = watch_pid_in(f->ws, "esc.pid", GONE_MS)};
}

/* Both processes end, `when` (for the message: "after a kill", ...). */
static void assert_tree_gone(const bg_tree_t *t, const char *when)
{
	char what[128];
	snprintf(what, sizeof(what), "the background command %s", when);
	assert_gone(&t->main, what);
	snprintf(what, sizeof(what), "the background command's escape %s", when);
	assert_gone(&t->esc, what);
}

Test(exec_tree, background_outlives_other_commands_until_killed)
{
	xf_t *f = xf_new(NULL, NULL);
	bg_tree_t bg = start_background(f, "");
	/* Foreground commands coming and going leave it alone. */
	expect_ok(run_cmd(f, "sleep 0.2 & true", ""));
	expect_ok(run_cmd(f, ESCAPE("other.pid") " >/dev/null 2>&1 & " WAIT_FILE("other.pid"), ""));
	watched_t other = watch_pid_in(f->ws, "other.pid", GONE_MS);
	assert_gone(&other, "the foreground command's escape");
	cr_assert(watched_alive(&bg.main), "the background command was killed by another's end");
	cr_assert(watched_alive(&bg.esc), "the background command's child was killed by another's end");
	pc_process_t *p = NULL;
	cr_assert_eq(pc_process_find(f->table, "p1", &p), 0);
	cr_assert_eq(pc_process_kill(p), 0);
	pc_process_release(p);
	assert_tree_gone(&bg, "after a kill");
	xf_free(f);
}

Test(exec_tree, background_time_limit_takes_the_tree)
{
	xf_t *f = xf_new(NULL, NULL);
	bg_tree_t bg = start_background(f, "\"timeout\":1");
	assert_tree_gone(&bg, "past its time limit");
	xf_free(f);
}

/* The end of a background command's main process ends what it left. */
Test(exec_tree, background_leftovers_die_with_it)
{
	xf_t *f = xf_new(NULL, NULL);
	expect_ok(run_cmd(f, ESCAPE("esc.pid") " >/dev/null 2>&1 & " WAIT_FILE("esc.pid"), "\"background\":true"));
	watched_t esc = watch_pid_in(f->ws, "esc.pid", GONE_MS);
	assert_gone(&esc, "what a finished background command left");
	xf_free(f);
}

Test(exec_tree, table_free_takes_every_tree)
{
	xf_t *f = xf_new(NULL, NULL);
	bg_tree_t bg = start_background(f, "");
	pc_process_table_free(f->table);
	cr_assert_eq(pc_process_table_new(NULL, &f->table), 0); /* xf_free frees one */
	assert_tree_gone(&bg, "after the table's end");
	xf_free(f);
}

/* ---- what the supervision must not do ------------------------------------------- */

/* A child the test forked itself, ending while commands (and their
 * escapes) come and go: its exit status is the test's to collect. */
Test(exec_tree, never_reaps_a_child_it_did_not_start)
{
	xf_t *f = xf_new(NULL, NULL);
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
	expect_ok(run_cmd(f, ESCAPE("esc.pid") " >/dev/null 2>&1 & " WAIT_FILE("esc.pid"), ""));
	expect_ok(run_cmd(f, "nohup sleep 0.5 >/dev/null 2>&1 & sleep 0.4", ""));
	watched_t esc = watch_pid_in(f->ws, "esc.pid", GONE_MS);
	assert_gone(&esc, "setsid sleep 99 &");
	int st = 0;
	cr_assert_eq(waitpid(early, &st, 0), early, "waitpid: %s", strerror(errno));
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 7, "status %#x", st);
	cr_assert_eq(waitpid(late, &st, 0), late, "waitpid: %s", strerror(errno));
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 9, "status %#x", st);
	xf_free(f);
}

/* The parent-death signal fires when the *thread* that started a command
 * ends; the command must not take that for Pincer's end. */
typedef struct spawner {
	xf_t *f;
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
	xf_t *f = xf_new(NULL, NULL);
	spawner_t s = {.f = f};
	pthread_t th;
	cr_assert_eq(pthread_create(&th, NULL, spawn_from_thread, &s), 0);
	cr_assert_eq(pthread_join(th, NULL), 0);
	cr_assert_eq(s.rc, 0);
	watched_t w = watch_pid_in(f->ws, "main.pid", GONE_MS);
	sleep_ms(300);
	bool alive = watched_alive(&w);
	pc_process_info_t info;
	pc_process_info(s.p, &info);
	cr_assert(alive && info.state == PC_PROCESS_RUNNING, "the command ended with the thread that started it");
	cr_assert_eq(pc_process_kill(s.p), 0);
	pc_process_release(s.p);
	assert_gone(&w, "the killed command");
	xf_free(f);
}
