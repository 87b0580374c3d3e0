/*
 * The exec and process tools, through the real invocation actor: what a
 * command prints and how it ends, the workspace it runs in, the policy
 * (off, allowlist, full; the environment it is given), timeouts and aborts
 * that kill the whole process group, background processes, and that
 * nothing is left behind (no zombie, no descriptor, no leak).
 *
 * An "owner" actor records every DONE under a lock; the test thread polls
 * the record with AWAIT.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tool_exec_fixture.h"

/* The pid (= process group) of the running process `id`; 0 if none. */
static int running_pid(xf_t *f, const char *id)
{
	pc_process_info_t *v = NULL;
	size_t n = 0;
	int pid = 0;
	cr_assert_eq(pc_process_list(f->table, &v, &n), 0);
	for (size_t i = 0; i < n; i++)
		if (strcmp(v[i].id, id) == 0 && v[i].state == PC_PROCESS_RUNNING)
			pid = v[i].pid;
	free(v);
	return pid;
}

static bool group_gone(int pgid)
{
	return kill(-pgid, 0) != 0 && errno == ESRCH;
}

/* The whole group is gone. Orphaned members are reaped by init, which
 * may take a moment. */
#define AWAIT_GROUP_GONE(pgid) AWAIT(group_gone(pgid), 15000)

static bool starts_with(const char *s, const char *prefix)
{
	return strncmp(s, prefix, strlen(prefix)) == 0;
}

static void assert_result(rec_t r, pc_tool_status_t st, const char *text)
{
	cr_assert_eq(r.status, st, "status %s: %s", pc_tool_status_name(r.status), r.text);
	cr_assert_str_eq(r.text, text);
	free(r.text);
}

/* Polls `id` until its status line starts with `status`; returns the
 * output gathered over the polls (caller frees). */
static char *poll_until(xf_t *f, const char *id, const char *status)
{
	char args[96];
	snprintf(args, sizeof(args), "{\"action\":\"poll\",\"id\":\"%s\"}", id);
	char *all = strdup("");
	char head[64];
	snprintf(head, sizeof(head), "%s %s", id, status);
	uint64_t until = now_ms() + 15000;
	for (;;) {
		rec_t r = run(f, "process", args);
		cr_assert_eq(r.status, PC_TOOL_OK, "%s", r.text);
		const char *nl = strchr(r.text, '\n');
		const char *body = nl ? nl + 1 : "";
		char *grown = NULL;
		cr_assert_geq(asprintf(&grown, "%s%s", all, strcmp(body, "(no new output)") ? body : ""), 0);
		free(all);
		all = grown;
		bool hit = starts_with(r.text, head);
		free(r.text);
		if (hit)
			return all;
		cr_assert_lt(now_ms(), until, "%s never reached \"%s\"", id, status);
		sleep_ms(20);
	}
}

/* ---- what a command prints and how it ends --------------------------------------- */

Test(exec, echo)
{
	xf_t *f = xf_new(NULL, NULL);
	assert_result(run_cmd(f, "echo hello", ""), PC_TOOL_OK, "exit code 0\nhello\n");
	assert_result(run_cmd(f, "true", ""), PC_TOOL_OK, "exit code 0");
	xf_free(f);
}

Test(exec, exit_codes_and_signals)
{
	xf_t *f = xf_new(NULL, NULL);
	rec_t r = run_cmd(f, "echo no; exit 3", "");
	cr_assert(r.is_error);
	assert_result(r, PC_TOOL_ERROR, "exit code 3\nno\n");
	assert_result(run_cmd(f, "kill -9 $$", ""), PC_TOOL_ERROR, "killed by signal 9");
	assert_result(run_cmd(f, "no-such-command-here 2>/dev/null", ""), PC_TOOL_ERROR, "exit code 127");
	xf_free(f);
}

Test(exec, stderr_merged_in_order)
{
	xf_t *f = xf_new(NULL, NULL);
	assert_result(run_cmd(f, "echo out; echo err >&2; echo out2", ""), PC_TOOL_OK,
		      "exit code 0\nout\nerr\nout2\n");
	xf_free(f);
}

Test(exec, stdin_is_empty)
{
	xf_t *f = xf_new(NULL, NULL);
	assert_result(run_cmd(f, "cat; echo end", ""), PC_TOOL_OK, "exit code 0\nend\n");
	xf_free(f);
}

/* Bytes that are not text read as U+FFFD: the result is always valid UTF-8. */
Test(exec, binary_output_made_text)
{
	xf_t *f = xf_new(NULL, NULL);
	assert_result(run_cmd(f, "printf 'a\\000b\\377c\\303\\251\\342\\202z'", ""), PC_TOOL_OK,
		      "exit code 0\na\xef\xbf\xbd" "b\xef\xbf\xbd" "c\xc3\xa9\xef\xbf\xbdz");
	xf_free(f);
}

/* ---- where it runs ---------------------------------------------------------------- */

Test(exec, cwd_is_the_workspace)
{
	xf_t *f = xf_new(NULL, NULL);
	char want[512];
	snprintf(want, sizeof(want), "exit code 0\n%s\n", f->ws_real);
	assert_result(run_cmd(f, "pwd -P", ""), PC_TOOL_OK, want);

	char sub[512];
	snprintf(sub, sizeof(sub), "%s/sub", f->ws);
	cr_assert_eq(mkdir(sub, 0700), 0);
	snprintf(want, sizeof(want), "exit code 0\n%s/sub\n", f->ws_real);
	assert_result(run_cmd(f, "pwd -P", "\"workdir\":\"sub\""), PC_TOOL_OK, want);
	assert_result(run_cmd(f, "pwd -P", "\"workdir\":\"sub/../sub/\""), PC_TOOL_OK, want);
	char abs[600];
	snprintf(abs, sizeof(abs), "\"workdir\":\"%s\"", sub);
	assert_result(run_cmd(f, "pwd -P", abs), PC_TOOL_OK, want);
	xf_free(f);
}

Test(exec, workdir_escape_refused)
{
	xf_t *f = xf_new(NULL, NULL);
	char link[512];
	snprintf(link, sizeof(link), "%s/out", f->ws);
	cr_assert_eq(symlink("/tmp", link), 0);
	snprintf(link, sizeof(link), "%s/sibling", f->ws);
	char sibling[512];
	snprintf(sibling, sizeof(sibling), "%s-x", f->ws_real); /* shares the prefix, not the tree */
	cr_assert_eq(symlink(sibling, link), 0);
	const char *outside[] = {"\"workdir\":\"..\"", "\"workdir\":\"/etc\"", "\"workdir\":\"out\"",
				 "\"workdir\":\"sub/../..\""};
	for (size_t i = 0; i < sizeof(outside) / sizeof(outside[0]); i++) {
		rec_t r = run_cmd(f, "pwd", outside[i]);
		cr_assert_eq(r.status, PC_TOOL_ERROR, "%s: %s", outside[i], r.text);
		cr_assert(strstr(r.text, "is outside the workspace") || strstr(r.text, "does not exist"), "%s: %s",
			  outside[i], r.text);
		free(r.text);
	}
	rec_t r = run_cmd(f, "pwd", "\"workdir\":\"..\"");
	assert_result(r, PC_TOOL_ERROR, "Invalid arguments for tool exec: workdir \"..\" is outside the workspace");
	cr_assert_eq(mkdir(sibling, 0700), 0);
	r = run_cmd(f, "pwd", "\"workdir\":\"sibling\"");
	cr_assert(strstr(r.text, "is outside the workspace"), "%s", r.text);
	free(r.text);
	cr_assert_eq(rmdir(sibling), 0);
	assert_result(run_cmd(f, "pwd", "\"workdir\":\"nope\""), PC_TOOL_ERROR,
		      "Invalid arguments for tool exec: workdir \"nope\" does not exist");
	xf_free(f);
}

Test(exec, needs_a_workspace)
{
	xf_t *f = xf_new(NULL, NULL);
	uint32_t before = done_count(&f->seen);
	invoke_env(f, "exec", "{\"command\":\"echo hi\"}", NULL, 0, NULL);
	rec_t r = await_next(f, before);
	assert_result(r, PC_TOOL_ERROR, "exec: no workspace to run the command in");
	xf_free(f);
}

Test(exec, bad_arguments)
{
	xf_t *f = xf_new(NULL, NULL);
	const char *bad[] = {"{}", "{\"command\":\"\"}", "{\"command\":42}", "{\"command\":\"true\",\"timeout\":0}",
			     "{\"command\":\"true\",\"timeout\":7201}", "{\"command\":\"true\",\"env\":[]}",
			     "{\"command\":\"true\",\"env\":{\"A\":1}}", "{\"command\":\"true\",\"env\":{\"1A\":\"x\"}}",
			     "{\"command\":\"true\",\"yieldMs\":-1}", "{\"command\":\"true\",\"background\":\"yes\"}"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		rec_t r = run(f, "exec", bad[i]);
		/* refused by the schema (invalid) or by the tool's own checks (error) */
		cr_assert(r.status == PC_TOOL_INVALID || r.status == PC_TOOL_ERROR, "%s: %s", bad[i], r.text);
		cr_assert(starts_with(r.text, "Invalid arguments for tool exec: "), "%s: %s", bad[i], r.text);
		free(r.text);
	}
	xf_free(f);
}

/* ---- the environment -------------------------------------------------------------- */

Test(exec, env_filtered)
{
	cr_assert_eq(setenv("PINCER_EXEC_SECRET", "s3cret", 1), 0);
	cr_assert_eq(setenv("TZ", "UTC", 1), 0);
	cr_assert_eq(setenv("LC_PINCER", "kept", 1), 0);
	const char *extra[] = {"PINCER_EXTRA=from-policy"};
	pc_exec_policy_t pol = {.mode = PC_EXEC_FULL, .env_extra = extra, .n_env_extra = 1};
	xf_t *f = xf_new(&pol, NULL);
	rec_t r = run_cmd(f, "env", "\"env\":{\"FOO\":\"bar baz\"}");
	cr_assert_eq(r.status, PC_TOOL_OK, "%s", r.text);
	cr_assert_null(strstr(r.text, "s3cret"), "%s", r.text);
	cr_assert_null(strstr(r.text, "PINCER_EXEC_SECRET"), "%s", r.text);
	cr_assert_not_null(strstr(r.text, "\nTZ=UTC\n"), "%s", r.text);
	cr_assert_not_null(strstr(r.text, "\nLC_PINCER=kept\n"), "%s", r.text);
	cr_assert_not_null(strstr(r.text, "\nFOO=bar baz\n"), "%s", r.text);
	cr_assert_not_null(strstr(r.text, "\nPINCER_EXTRA=from-policy\n"), "%s", r.text);
	free(r.text);

	const char *refused[] = {"LD_PRELOAD", "PATH", "DYLD_INSERT_LIBRARIES", "BASH_ENV", "NODE_OPTIONS"};
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		char more[128];
		snprintf(more, sizeof(more), "\"env\":{\"OK\":\"1\",\"%s\":\"/tmp/x.so\"}", refused[i]);
		r = run_cmd(f, "echo ran", more);
		cr_assert_eq(r.status, PC_TOOL_ERROR, "%s: %s", refused[i], r.text);
		cr_assert(strstr(r.text, refused[i]) && strstr(r.text, "may not be set"), "%s", r.text);
		cr_assert_null(strstr(r.text, "ran"), "the command must not run: %s", r.text);
		free(r.text);
	}
	xf_free(f);
	unsetenv("PINCER_EXEC_SECRET");
	unsetenv("LC_PINCER");
}

Test(exec, env_keep_list)
{
	cr_assert_eq(setenv("PINCER_KEEP_ME", "yes", 1), 0);
	const char *keep[] = {"PINCER_KEEP_*"};
	pc_exec_policy_t pol = {.mode = PC_EXEC_FULL, .env_keep = keep, .n_env_keep = 1};
	xf_t *f = xf_new(&pol, NULL);
	/* Without PATH kept, the shell still finds its built-ins. */
	assert_result(run_cmd(f, "echo \"$PINCER_KEEP_ME/${HOME:-nohome}\"", ""), PC_TOOL_OK, "exit code 0\nyes/nohome\n");
	xf_free(f);
	/* kept as well as the default list */
	const char *also[] = {"PINCER_KEEP_ME"};
	pc_exec_policy_t pol2 = {.mode = PC_EXEC_FULL, .env_keep_also = also, .n_env_keep_also = 1};
	f = xf_new(&pol2, NULL);
	assert_result(run_cmd(f, "echo \"$PINCER_KEEP_ME/${TERM+term}${PATH+path}\"", ""), PC_TOOL_OK,
		      getenv("TERM") ? "exit code 0\nyes/termpath\n" : "exit code 0\nyes/path\n");
	xf_free(f);
	unsetenv("PINCER_KEEP_ME");
}

/* ---- the policy ------------------------------------------------------------------- */

Test(exec, off_mode)
{
	pc_exec_policy_t pol = {.mode = PC_EXEC_OFF};
	xf_t *f = xf_new(&pol, NULL);
	assert_result(run_cmd(f, "echo hi", ""), PC_TOOL_ERROR, "exec is disabled by policy");
	assert_result(run(f, "process", "{\"action\":\"list\"}"), PC_TOOL_OK, "no processes");
	xf_free(f);
}

Test(exec, allowlist_mode)
{
	const char *allow[] = {"echo", "printf"};
	pc_exec_policy_t pol = {.mode = PC_EXEC_ALLOWLIST, .allow = allow, .n_allow = 2};
	xf_t *f = xf_new(&pol, NULL);
	assert_result(run_cmd(f, "echo hi", ""), PC_TOOL_OK, "exit code 0\nhi\n");
	assert_result(run_cmd(f, "  echo  'a  b' \"c d\"e  ", ""), PC_TOOL_OK, "exit code 0\na  b c de\n");
	/* No shell: what would be globbing is a plain word. */
	assert_result(run_cmd(f, "echo *", ""), PC_TOOL_OK, "exit code 0\n*\n");

	rec_t r = run_cmd(f, "rm x", "");
	assert_result(r, PC_TOOL_ERROR, "exec: the program \"rm\" is not allowed by the policy");
	const char *shell[] = {"echo hi; rm x", "echo hi | rm", "echo hi && rm x", "echo $HOME", "echo `id`",
			       "echo $(id)", "echo hi > f", "echo a\nrm x", "(echo hi)", "echo {a,b}",
			       "echo 'a;b'"};
	for (size_t i = 0; i < sizeof(shell) / sizeof(shell[0]); i++) {
		r = run_cmd(f, shell[i], "");
		cr_assert_eq(r.status, PC_TOOL_ERROR, "%s: %s", shell[i], r.text);
		cr_assert(starts_with(r.text, "exec runs commands without a shell under this policy: "), "%s: %s",
			  shell[i], r.text);
		free(r.text);
	}
	r = run_cmd(f, "echo hi; rm x", "");
	assert_result(r, PC_TOOL_ERROR,
		      "exec runs commands without a shell under this policy: ';' is not allowed (no pipes, "
		      "redirections, variables, command lists or subshells; run one program)");
	r = run_cmd(f, "/bin/echo hi", "");
	cr_assert(strstr(r.text, "not a path"), "%s", r.text);
	free(r.text);
	r = run_cmd(f, "echo 'open", "");
	cr_assert(strstr(r.text, "unterminated"), "%s", r.text);
	free(r.text);
	/* The child's PATH finds the program; a PATH without it does not. */
	xf_free(f);

	const char *extra[] = {"PATH=/nonexistent"};
	pol.env_extra = extra;
	pol.n_env_extra = 1;
	f = xf_new(&pol, NULL);
	assert_result(run_cmd(f, "echo hi", ""), PC_TOOL_ERROR, "exec: the program \"echo\" was not found on PATH");
	xf_free(f);
}

/* ---- timeouts and aborts kill the whole group ------------------------------------- */

Test(exec, timeout_kills_the_group)
{
	xf_t *f = xf_new(NULL, NULL);
	uint32_t before = done_count(&f->seen);
	uint64_t t0 = now_ms();
	pc_actor_release(invoke(f, "exec", "{\"command\":\"echo begun; sleep 100 & sleep 100\",\"timeout\":0.5}"));
	int pgid = 0;
	AWAIT((pgid = running_pid(f, "p1")) > 0, 5000);
	rec_t r = await_next(f, before);
	cr_assert_lt(now_ms() - t0, 10000u);
	cr_assert(r.is_error);
	assert_result(r, PC_TOOL_ERROR, "timed out after 0.5 s\nbegun\n");
	AWAIT_GROUP_GONE(pgid);
	xf_free(f);
}

/* A group that ignores SIGTERM is SIGKILLed after the grace. */
Test(exec, timeout_escalates_to_sigkill)
{
	xf_t *f = xf_new(NULL, NULL);
	rec_t r = run_cmd(f, "trap '' TERM; sleep 100 & trap '' TERM; sleep 100", "\"timeout\":0.3");
	assert_result(r, PC_TOOL_ERROR, "timed out after 0.3 s");
	xf_free(f);
}

Test(exec, abort_kills_the_group)
{
	xf_t *f = xf_new(NULL, NULL);
	uint32_t before = done_count(&f->seen);
	pc_actor_t *a = invoke(f, "exec", "{\"command\":\"sleep 100 & sleep 100\"}");
	int pgid = 0;
	AWAIT((pgid = running_pid(f, "p1")) > 0, 5000);
	cr_assert_eq(pc_tool_abort(a), 0);
	rec_t r = await_next(f, before);
	assert_result(r, PC_TOOL_ABORTED, "Tool exec was aborted");
	AWAIT_GROUP_GONE(pgid);
	/* It left the table with its invocation. */
	assert_result(run(f, "process", "{\"action\":\"list\"}"), PC_TOOL_OK, "no processes");
	pc_actor_release(a);
	xf_free(f);
}

/* The invocation's own timeout (shorter than exec's) cancels it too. */
Test(exec, invocation_timeout_kills_the_group)
{
	xf_t *f = xf_new(NULL, NULL);
	uint32_t before = done_count(&f->seen);
	invoke_env(f, "exec", "{\"command\":\"sleep 100\"}", f->ws, 300, NULL);
	int pgid = 0;
	AWAIT((pgid = running_pid(f, "p1")) > 0, 5000);
	rec_t r = await_next(f, before);
	assert_result(r, PC_TOOL_TIMEOUT, "Tool exec timed out after 300 ms");
	AWAIT_GROUP_GONE(pgid);
	xf_free(f);
}

/* A process that left the group keeps the pipe open: the reader gives the
 * pipe up once the group is dead instead of waiting for it. */
Test(exec, escaped_pipe_holder_not_waited_for)
{
	xf_t *f = xf_new(NULL, NULL);
	uint64_t t0 = now_ms();
	rec_t r = run_cmd(f, "setsid sleep 6 & sleep 100", "\"timeout\":0.3");
	uint64_t took = now_ms() - t0;
	assert_result(r, PC_TOOL_ERROR, "timed out after 0.3 s");
	cr_assert_lt(took, 5000u, "waited %llu ms for a pipe an escaped process holds", (unsigned long long)took);
	xf_free(f);
}

/* ---- output ---------------------------------------------------------------------- */

Test(exec, output_cap_keeps_the_tail)
{
	pc_exec_policy_t pol = {.mode = PC_EXEC_FULL, .max_output = 1000};
	xf_t *f = xf_new(&pol, NULL);
	rec_t r = run_cmd(f, "head -c 4000 /dev/zero | tr '\\000' a; printf END", "");
	cr_assert_eq(r.status, PC_TOOL_OK, "%s", r.text);
	char want[1200];
	int n = snprintf(want, sizeof(want), "exit code 0\n[... 3003 bytes truncated]\n");
	memset(want + n, 'a', 997);
	snprintf(want + n + 997, sizeof(want) - (size_t)n - 997, "END");
	cr_assert_str_eq(r.text, want);
	free(r.text);
	/* 1199 bytes, the kept 1000 starting inside a character: the rest
	 * of it goes too. */
	r = run_cmd(f, "i=0; while [ $i -lt 599 ]; do printf '\\303\\251'; i=$((i+1)); done; printf x", "");
	cr_assert(starts_with(r.text, "exit code 0\n[... 200 bytes truncated]\n\xc3\xa9"), "%.60s", r.text);
	cr_assert_eq(strlen(r.text), strlen("exit code 0\n[... 200 bytes truncated]\n") + 999, "%zu", strlen(r.text));
	free(r.text);

	/* In the background: poll and log say what was lost; lines count
	 * from the first byte kept ("51" of 751: 3893 bytes, 1000 kept). */
	free(run_cmd(f, "seq 1 1000", "\"background\":true").text);
	char *out = poll_until(f, "p3", "exit code 0");
	cr_assert(starts_with(out, "[... 2893 bytes truncated]\n51\n752\n"), "%.60s", out);
	free(out);
	r = run(f, "process", "{\"action\":\"log\",\"id\":\"p3\",\"limit\":2}");
	assert_result(r, PC_TOOL_OK, "p3 exit code 0; 3893 bytes of output\n[... 2893 bytes truncated]\n51\n752\n");
	r = run(f, "process", "{\"action\":\"log\",\"id\":\"p3\",\"offset\":1,\"limit\":1}");
	assert_result(r, PC_TOOL_OK, "p3 exit code 0; 3893 bytes of output\n752\n");
	xf_free(f);
}

/* ---- background processes ---------------------------------------------------------- */

Test(exec, background_poll_log_kill)
{
	xf_t *f = xf_new(NULL, NULL);
	assert_result(run_cmd(f, "echo start; sleep 100", "\"background\":true"), PC_TOOL_OK,
		      "started in the background as process p1: use the process tool (action \"poll\", \"log\" "
		      "or \"kill\") to follow it");
	int pgid = running_pid(f, "p1");
	cr_assert_gt(pgid, 0);
	/* poll gives each byte once. */
	uint64_t until = now_ms() + 10000;
	rec_t r;
	for (;;) {
		r = run(f, "process", "{\"action\":\"poll\",\"id\":\"p1\"}");
		if (strcmp(r.text, "p1 running\n(no new output)") != 0 || now_ms() > until)
			break;
		free(r.text);
		sleep_ms(10);
	}
	assert_result(r, PC_TOOL_OK, "p1 running\nstart\n");
	assert_result(run(f, "process", "{\"action\":\"poll\",\"id\":\"p1\"}"), PC_TOOL_OK,
		      "p1 running\n(no new output)");
	assert_result(run(f, "process", "{\"action\":\"log\",\"id\":\"p1\"}"), PC_TOOL_OK,
		      "p1 running; 6 bytes of output\nstart\n");
	assert_result(run(f, "process", "{\"action\":\"list\"}"), PC_TOOL_OK, "p1 running: echo start; sleep 100");
	rec_t k = run(f, "process", "{\"action\":\"kill\",\"id\":\"p1\"}");
	cr_assert_eq(k.status, PC_TOOL_OK, "%s", k.text);
	cr_assert(starts_with(k.text, "p1: stopping it"), "%s", k.text);
	free(k.text);
	free(poll_until(f, "p1", "killed by signal 15"));
	AWAIT_GROUP_GONE(pgid);
	assert_result(run(f, "process", "{\"action\":\"kill\",\"id\":\"p1\"}"), PC_TOOL_OK, "p1 killed by signal 15");
	assert_result(run(f, "process", "{\"action\":\"list\"}"), PC_TOOL_OK,
		      "p1 killed by signal 15: echo start; sleep 100");
	xf_free(f);
}

Test(exec, background_runs_to_its_end)
{
	xf_t *f = xf_new(NULL, NULL);
	rec_t r = run_cmd(f, "printf 'one\\ntwo\\nthree\\n'; exit 4", "\"background\":true");
	free(r.text);
	char *out = poll_until(f, "p1", "exit code 4");
	cr_assert_str_eq(out, "one\ntwo\nthree\n");
	free(out);
	assert_result(run(f, "process", "{\"action\":\"log\",\"id\":\"p1\",\"offset\":1,\"limit\":1}"), PC_TOOL_OK,
		      "p1 exit code 4; 14 bytes of output\ntwo\n");
	assert_result(run(f, "process", "{\"action\":\"log\",\"id\":\"p1\",\"offset\":2}"), PC_TOOL_OK,
		      "p1 exit code 4; 14 bytes of output\nthree\n");
	/* Its timeout holds in the background too. */
	r = run_cmd(f, "sleep 100", "\"background\":true,\"timeout\":0.2");
	free(r.text);
	free(poll_until(f, "p2", "timed out after 0.2 s"));
	xf_free(f);
}

Test(exec, yield_ms)
{
	xf_t *f = xf_new(NULL, NULL);
	rec_t r = run_cmd(f, "echo first; sleep 0.8; echo second", "\"yieldMs\":300");
	cr_assert_eq(r.status, PC_TOOL_OK, "%s", r.text);
	const char *lead = "still running after 300 ms; it goes on in the background as process p1: use the "
			   "process tool (action \"poll\", \"log\" or \"kill\") to follow it";
	cr_assert(starts_with(r.text, lead), "%s", r.text);
	/* The output so far ("first", unless the machine is slow), then the
	 * polls: each byte once. */
	const char *so_far = r.text + strlen(lead);
	so_far += *so_far == '\n';
	char *rest = poll_until(f, "p1", "exit code 0");
	char *all = NULL;
	cr_assert_geq(asprintf(&all, "%s%s", so_far, rest), 0);
	cr_assert_str_eq(all, "first\nsecond\n");
	free(all);
	free(rest);
	free(r.text);
	/* Done before the yield: the plain result, and nothing left behind. */
	assert_result(run_cmd(f, "echo quick", "\"yieldMs\":5000"), PC_TOOL_OK, "exit code 0\nquick\n");
	assert_result(run(f, "process", "{\"action\":\"list\"}"), PC_TOOL_OK,
		      "p1 exit code 0: echo first; sleep 0.8; echo second");
	xf_free(f);
}

Test(exec, process_errors)
{
	xf_t *f = xf_new(NULL, NULL);
	assert_result(run(f, "process", "{\"action\":\"poll\",\"id\":\"p9\"}"), PC_TOOL_ERROR,
		      "no process p9 (action \"list\" shows them)");
	const char *bad[] = {"{}", "{\"action\":\"poll\"}", "{\"action\":\"write\",\"id\":\"p1\"}"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		rec_t r = run(f, "process", bad[i]);
		cr_assert(r.status == PC_TOOL_INVALID || r.status == PC_TOOL_ERROR, "%s", bad[i]);
		cr_assert(starts_with(r.text, "Invalid arguments for tool process: "), "%s", r.text);
		free(r.text);
	}
	free(run_cmd(f, "true", "\"background\":true").text);
	free(poll_until(f, "p1", "exit code 0"));
	rec_t r = run(f, "process", "{\"action\":\"log\",\"id\":\"p1\",\"limit\":-1}");
	cr_assert_eq(r.status, PC_TOOL_INVALID, "%s", r.text);
	cr_assert(strstr(r.text, "/limit"), "the message names the argument: %s", r.text);
	free(r.text);
	xf_free(f);
}

/* At most max_running run at once; a full table makes room by dropping
 * its oldest finished record; freeing the table kills what still runs. */
Test(exec, table_limits_and_free)
{
	pc_process_table_config_t tc = {.max_processes = 3, .max_running = 2};
	xf_t *f = xf_new(NULL, &tc);
	free(run_cmd(f, "sleep 100", "\"background\":true").text);
	free(run_cmd(f, "sleep 100", "\"background\":true").text);
	int pg1 = running_pid(f, "p1"), pg2 = running_pid(f, "p2");
	cr_assert(pg1 > 0 && pg2 > 0);
	rec_t r = run_cmd(f, "echo three", "");
	cr_assert_eq(r.status, PC_TOOL_ERROR, "%s", r.text);
	cr_assert(starts_with(r.text, "exec: too many processes are running"), "%s", r.text);
	free(r.text);
	free(run(f, "process", "{\"action\":\"kill\",\"id\":\"p1\"}").text);
	free(poll_until(f, "p1", "killed by signal 15"));
	assert_result(run_cmd(f, "echo three", ""), PC_TOOL_OK, "exit code 0\nthree\n");
	/* p1 (killed), p2 (running), p4 (exited): full. p5 takes p1's slot. */
	free(run_cmd(f, "true", "\"background\":true").text);
	free(poll_until(f, "p4", "exit code 0"));
	free(run_cmd(f, "true", "\"background\":true").text);
	free(poll_until(f, "p5", "exit code 0"));
	assert_result(run(f, "process", "{\"action\":\"list\"}"), PC_TOOL_OK,
		      "p2 running: sleep 100\np4 exit code 0: true\np5 exit code 0: true");
	pc_process_table_free(f->table);
	AWAIT_GROUP_GONE(pg2);
	cr_assert_eq(pc_process_table_new(NULL, &f->table), 0); /* xf_free frees one */
	xf_free(f);
}

/* Finished records are forgotten after the TTL. */
Test(exec, table_ttl)
{
	pc_process_table_config_t tc = {.ttl_ms = 100};
	xf_t *f = xf_new(NULL, &tc);
	free(run_cmd(f, "true", "\"background\":true").text);
	free(poll_until(f, "p1", "exit code 0"));
	sleep_ms(150);
	assert_result(run(f, "process", "{\"action\":\"list\"}"), PC_TOOL_OK, "no processes");
	xf_free(f);
}

/* ---- nothing left behind ------------------------------------------------------------- */

Test(exec, no_zombie_no_fd_leak)
{
	xf_t *f = xf_new(NULL, NULL);
	free(run_cmd(f, "echo a; echo b >&2", "").text);
	free(run_cmd(f, "sleep 100 & sleep 100", "\"timeout\":0.2").text);
	free(run_cmd(f, "echo x; sleep 100", "\"yieldMs\":50").text);
	free(run_cmd(f, "sleep 100", "\"background\":true").text);
	uint32_t before = done_count(&f->seen);
	pc_actor_t *a = invoke(f, "exec", "{\"command\":\"sleep 100\"}");
	AWAIT(running_pid(f, "p5") > 0, 5000);
	pc_tool_abort(a);
	pc_actor_release(a);
	free(await_next(f, before).text);
	free(run(f, "process", "{\"action\":\"kill\",\"id\":\"p3\"}").text);
	free(run(f, "process", "{\"action\":\"kill\",\"id\":\"p4\"}").text);
	free(poll_until(f, "p3", "killed by signal 15"));
	free(poll_until(f, "p4", "killed by signal 15"));
	/* Every reader has reaped its child and closed its descriptors. */
	AWAIT(stats(f->rt).blocking_done >= f->jobs0 + 5, 15000);
	int status;
	errno = 0;
	cr_assert_eq(waitpid(-1, &status, WNOHANG), -1, "a child is left");
	cr_assert_eq(errno, ECHILD);
	cr_assert_eq(open_fds(), f->fds0);
	xf_free(f);
}

/* Invocations in flight when the runtime stops: each is cancelled, its
 * group killed, its reader ends, and nothing leaks. */
Test(exec, shutdown_with_processes_running)
{
	xf_t *f = xf_new(NULL, NULL);
	pc_actor_release(invoke(f, "exec", "{\"command\":\"sleep 100 & sleep 100\"}"));
	pc_actor_release(invoke(f, "exec", "{\"command\":\"trap '' TERM; sleep 100\"}"));
	int pg1 = 0, pg2 = 0;
	AWAIT((pg1 = running_pid(f, "p1")) > 0 && (pg2 = running_pid(f, "p2")) > 0, 5000);
	pc_actor_stop(f->owner, PC_EXIT_NORMAL);
	pc_actor_release(f->owner);
	f->owner = NULL;
	uint64_t t0 = now_ms();
	pc_runtime_free(f->rt);
	cr_assert_lt(now_ms() - t0, 5000u);
	AWAIT_GROUP_GONE(pg1);
	AWAIT_GROUP_GONE(pg2);
	f->rt = start_rt(1); /* xf_free frees one */
	xf_free(f);
}

Test(exec, register_checks)
{
	pc_tool_registry_t *r = NULL;
	pc_process_table_t *t = NULL;
	cr_assert_eq(pc_tool_registry_new(&r), 0);
	cr_assert_eq(pc_process_table_new(NULL, &t), 0);
	cr_assert_eq(pc_tool_register_exec(NULL, &full_policy, t), PC_EINVAL);
	cr_assert_eq(pc_tool_register_exec(r, NULL, t), PC_EINVAL);
	cr_assert_eq(pc_tool_register_exec(r, &full_policy, NULL), PC_EINVAL);
	cr_assert_eq(pc_tool_count(r), 0u);
	pc_exec_policy_t bad = {.mode = (pc_exec_mode_t)7};
	cr_assert_eq(register_exec_alone(&bad), PC_EINVAL);
	const char *extra[] = {"NOEQUALS"};
	pc_exec_policy_t bad_extra = {.mode = PC_EXEC_FULL, .env_extra = extra, .n_env_extra = 1};
	cr_assert_eq(register_exec_alone(&bad_extra), PC_EINVAL);
	pc_exec_policy_t bad_timeout = {.mode = PC_EXEC_FULL, .default_timeout_s = 10, .max_timeout_s = 5};
	cr_assert_eq(register_exec_alone(&bad_timeout), PC_EINVAL);
	cr_assert_eq(pc_tool_register_exec(r, &full_policy, t), 0);
	cr_assert_eq(pc_tool_register_exec(r, &full_policy, t), PC_EEXIST);
	cr_assert_not_null(pc_tool_find(r, "exec"));
	cr_assert_not_null(pc_tool_find(r, "process"));
	cJSON *schemas = NULL;
	cr_assert_eq(pc_tool_schemas(r, NULL, 0, &schemas), 0);
	cr_assert_eq(cJSON_GetArraySize(schemas), 2);
	cJSON_Delete(schemas);
	pc_tool_registry_free(r);
	pc_process_table_free(t);
	ASSERT_NO_LEAKS();
}
