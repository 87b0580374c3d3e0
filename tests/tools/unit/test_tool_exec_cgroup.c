/*
 * The cgroup layer of exec (exec_cgroup.h): where a child cgroup can be
 * made, each command runs in one of its own, which is emptied and removed
 * when the command's life ends however it ends, even when the command
 * killed its own supervisor; with the layer switched off (or no cgroup2
 * to write), commands run as before.
 *
 * Whether this host can make a cgroup is probed independently of the code
 * under test (tool_cgroup_host.h), so that a host that can (root with
 * cgroup2 writable, as the CI machines) fails the tests when containment
 * did not happen; on a host that cannot, the contained tests are skipped
 * with a message.
 *
 * Processes left behind are watched by pid and start time and SIGKILLed
 * by pid if they outlive their wait (tool_proc_watch.h).
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agents/tools/exec_cgroup.h"
#include "tool_cgroup_host.h"
#include "tool_exec_fixture.h"
#include "tool_proc_watch.h"

#define WAIT_FILE(f) "i=0; while ! test -s " f " && test $i -lt 500; do sleep 0.01; i=$((i+1)); done"
#define ESCAPE(f) "setsid sh -c 'echo $$ > " f "; exec sleep 99'"
/* Writes the command's cgroup line ("0::/...") into cg.txt. */
#define SAVE_CGROUP "grep ^0:: /proc/$$/cgroup > cg.txt"
#define GONE_MS 5000

static void kill_leftovers(void)
{
	kill_pid_files(xf_keep ? xf_keep->ws : NULL, (const char *const[]){"esc.pid", "main.pid", NULL});
}

TestSuite(exec_cgroup, .fini = kill_leftovers);

/* ---- what this host offers ---------------------------------------------------- */

/* The table uses cgroups where the host can make them; on a host that
 * cannot, the test is skipped, saying so. */
static void require_cgroups(xf_t *f)
{
	if (!host_can_make_cgroup()) {
		xf_free(f);
		cr_skip_test("no writable cgroup2 here: commands run without a cgroup (containment not checked)");
	}
	cr_assert_not_null(pc_process_table_cgroup(f->table), "cgroup2 is writable here, but the table uses none");
}

/* ---- helpers ------------------------------------------------------------------- */

static bool exists(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0;
}

/* The directory of the cgroup the command wrote into cg.txt (SAVE_CGROUP);
 * it must be one of the commands' own. */
static void command_cgroup(xf_t *f, char *dir, size_t cap)
{
	char path[128], line[2048] = "";
	snprintf(path, sizeof(path), "%s/cg.txt", f->ws);
	for (int i = 0; i < 500 && !line[0]; i++) {
		FILE *in = fopen(path, "r");
		if (in) {
			if (!fgets(line, sizeof(line), in))
				line[0] = '\0';
			fclose(in);
		}
		if (!line[0])
			sleep_ms(10);
	}
	line[strcspn(line, "\n")] = '\0';
	cr_assert(strncmp(line, "0::/", 4) == 0, "cg.txt: \"%s\"", line);
	cr_assert_not_null(strstr(line, "/pincer-exec-"), "the command ran in %s, not a cgroup of its own", line + 3);
	cr_assert(host_mount[0]);
	snprintf(dir, cap, "%s%s", host_mount, line + 3);
}

static void expect_removed(const char *dir, const char *when)
{
	cr_assert_not(exists(dir), "the command's cgroup %s is still there %s", dir, when);
}

/* Leaves a process in a session of its own, then kills its supervisor
 * (the shell's parent): the hole the supervisor alone cannot close. */
#define KILL_OWN_SUPERVISOR ESCAPE("esc.pid") " >/dev/null 2>&1 & " WAIT_FILE("esc.pid") "; " SAVE_CGROUP "; kill -9 $PPID"

/* ---- contained ------------------------------------------------------------------ */

Test(exec_cgroup, command_that_kills_its_supervisor_leaves_nothing)
{
	xf_t *f = xf_new(NULL, NULL);
	require_cgroups(f);
	rec_t r = run_cmd(f, KILL_OWN_SUPERVISOR, "");
	free(r.text);
	watched_t esc = watch_pid_in(f->ws, "esc.pid", GONE_MS);
	cr_assert(await_gone_or_kill(&esc, GONE_MS), "the escape (pid %d) outlived its killed supervisor", (int)esc.pid);
	char dir[4096];
	command_cgroup(f, dir, sizeof(dir));
	expect_removed(dir, "after its supervisor was killed");
	xf_free(f);
}

/* Runs `command` (which writes its cgroup first) to its end; its result
 * is `outcome` (`whole`) or holds it, and its cgroup is gone by then. */
static void removed_after(const char *command, const char *args, const char *outcome, bool whole, const char *when)
{
	xf_t *f = xf_new(NULL, NULL);
	require_cgroups(f);
	rec_t r = run_cmd(f, command, args);
	cr_assert(whole ? !strcmp(r.text, outcome) : strstr(r.text, outcome) != NULL, "%s", r.text);
	free(r.text);
	char dir[4096];
	command_cgroup(f, dir, sizeof(dir));
	expect_removed(dir, when);
	xf_free(f);
}

Test(exec_cgroup, removed_after_a_normal_end)
{
	removed_after(SAVE_CGROUP "; exit 4", "", "exit code 4", true, "after it ended");
}

Test(exec_cgroup, removed_after_a_timeout)
{
	removed_after(SAVE_CGROUP "; sleep 99", "\"timeout\":1", "timed out", false, "after its timeout");
}

Test(exec_cgroup, removed_after_a_kill)
{
	xf_t *f = xf_new(NULL, NULL);
	require_cgroups(f);
	rec_t r = run_cmd(f, SAVE_CGROUP "; echo $$ > main.pid; exec sleep 98", "\"background\":true");
	cr_assert_eq(r.status, PC_TOOL_OK, "%s", r.text);
	free(r.text);
	char dir[4096];
	command_cgroup(f, dir, sizeof(dir));
	watched_t main = watch_pid_in(f->ws, "main.pid", GONE_MS);
	cr_assert(exists(dir), "no cgroup %s while the command runs", dir);
	pc_process_t *p = NULL;
	cr_assert_eq(pc_process_find(f->table, "p1", &p), 0);
	cr_assert_eq(pc_process_kill(p), 0);
	pc_process_info_t info;
	AWAIT((pc_process_info(p, &info), info.state) != PC_PROCESS_RUNNING, GONE_MS);
	pc_process_release(p);
	cr_assert(await_gone_or_kill(&main, GONE_MS), "the killed command (pid %d) still runs", (int)main.pid);
	expect_removed(dir, "after a kill");
	xf_free(f);
}

/* ---- the layer's own parts --------------------------------------------------------- */

/* A child of this test in a new cgroup under the table's base: its pid;
 * *dir the cgroup (the caller's). */
static pid_t child_in_cgroup(const char *base, char **dir)
{
	cr_assert_eq(pc__exec_cgroup_make(base, dir), 0);
	char procs[4200];
	snprintf(procs, sizeof(procs), "%s/cgroup.procs", *dir);
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		FILE *out = fopen(procs, "w");
		if (!out || fputs("0", out) < 0 || fclose(out) != 0)
			_exit(2);
		pause();
		_exit(3);
	}
	/* It is listed once it joined. */
	bool listed = false;
	for (int i = 0; i < 500 && !listed; i++) {
		FILE *in = fopen(procs, "r");
		long got = 0;
		listed = in && fscanf(in, "%ld", &got) == 1 && got == pid;
		if (in)
			fclose(in);
		if (!listed)
			sleep_ms(10);
	}
	if (!listed)
		kill(pid, SIGKILL);
	cr_assert(listed, "the child never joined %s", *dir);
	return pid;
}

static void expect_killed(pid_t pid)
{
	int st = 0;
	cr_assert_eq(waitpid(pid, &st, 0), pid, "waitpid: %s", strerror(errno));
	cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "status %#x", st);
}

Test(exec_cgroup, end_kills_the_members_and_removes_it)
{
	xf_t *f = xf_new(NULL, NULL);
	require_cgroups(f);
	char *dir = NULL;
	pid_t pid = child_in_cgroup(pc_process_table_cgroup(f->table), &dir);
	pc__exec_cgroup_end(dir);
	expect_killed(pid);
	expect_removed(dir, "after pc__exec_cgroup_end");
	free(dir);
	xf_free(f);
}

/* The way for kernels without cgroup.kill. */
Test(exec_cgroup, listed_members_are_killed)
{
	xf_t *f = xf_new(NULL, NULL);
	require_cgroups(f);
	char *dir = NULL;
	pid_t pid = child_in_cgroup(pc_process_table_cgroup(f->table), &dir);
	cr_assert_eq(pc__exec_cgroup_kill_listed(dir), 1);
	expect_killed(pid);
	cr_assert_eq(rmdir(dir), 0, "rmdir %s: %s", dir, strerror(errno));
	free(dir);
	xf_free(f);
}

/* ---- switched off -------------------------------------------------------------------- */

/* With "off", no cgroup is made: the command runs in the test's own, and
 * a command that kills its supervisor leaves its escape behind, as
 * documented (the test kills it). */
Test(exec_cgroup, off_makes_none)
{
	xf_t *f = xf_new(NULL, &(pc_process_table_config_t){.no_cgroup = true});
	cr_assert_null(pc_process_table_cgroup(f->table));
	rec_t r = run_cmd(f, KILL_OWN_SUPERVISOR, "");
	free(r.text);
	char own[4096];
	if (host_own_cgroup(own, sizeof(own))) {
		/* The command's cgroup line, read as the directory it names. */
		char path[128], line[2048] = "", dir[4096];
		snprintf(path, sizeof(path), "%s/cg.txt", f->ws);
		FILE *in = fopen(path, "r");
		cr_assert_not_null(in, "no cg.txt");
		cr_assert_not_null(fgets(line, sizeof(line), in));
		fclose(in);
		line[strcspn(line, "\n")] = '\0';
		snprintf(dir, sizeof(dir), "%s%s", host_mount, strcmp(line + 3, "/") ? line + 3 : "");
		cr_assert_str_eq(dir, own, "the command ran in another cgroup than the test's");
	}
	watched_t esc = watch_pid_in(f->ws, "esc.pid", GONE_MS);
	cr_assert(watched_alive(&esc), "the escape of a killed supervisor was killed with the layer off");
	cr_log_info("exec.cgroup off: the escape of a killed supervisor (pid %d) outlives it, as documented",
		    (int)esc.pid);
	kill(esc.pid, SIGKILL);
	xf_free(f);
}
