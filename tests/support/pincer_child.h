/*
 * The built `pincer` binary as a child process of a test: where it is,
 * starting it in a directory of the test's with its output going to
 * files, and a bounded wait for its exit. A child dies with the test
 * process, so a test that fails half-way leaves none running.
 */
#ifndef PC_TESTS_PINCER_CHILD_H
#define PC_TESTS_PINCER_CHILD_H

#include <criterion/criterion.h>

#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "file_util.h"
#include "test_util.h"

/* dirname(this test)/../agents/pincer: the build tree's layout. */
static inline void find_pincer(char *out, size_t n)
{
	char exe[PATH_MAX];
	ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	cr_assert_gt(len, 0);
	exe[len] = '\0';
	snprintf(out, n, "%s/../agents/pincer", dirname(exe));
	cr_assert_eq(access(out, X_OK), 0, "%s is missing: build the pincer target", out);
}

/* In the child: its files, its directory, death with the test, then the
 * program (async-signal-safe calls only). */
static inline void exec_child(const char *path, char *const argv[], char *const envp[], const char *dir,
			      const char *out_path, const char *err_path, pid_t parent)
{
	int in = open("/dev/null", O_RDONLY), out = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600),
	    err = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	/* a child must not outlive a test that failed before stopping it */
	if (in < 0 || out < 0 || err < 0 || dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0 ||
	    chdir(dir) != 0 || prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
		_exit(127);
	execve(path, argv, envp);
	_exit(127);
}

/* Starts `path` with `argv` and `envp` in `dir`, stdin from /dev/null,
 * stdout into the file `out`, stderr into `err`; its pid. */
static inline pid_t start_child(const char *path, char *const argv[], char *const envp[], const char *dir,
				const char *out, const char *err)
{
	pid_t parent = getpid();
	fflush(NULL);
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0)
		exec_child(path, argv, envp, dir, out, err, parent);
	return pid;
}

/* Waits for the child's exit, SIGKILLing it after `timeout_ms`: its exit
 * status, 128 + the signal that ended it, or -1 when it had to be killed.
 * *pid is 0 afterwards: there is nothing left to wait for. */
static inline int child_wait(pid_t *pid, uint64_t timeout_ms)
{
	int status = 0;
	uint64_t until = now_ms() + timeout_ms;
	while (waitpid(*pid, &status, WNOHANG) == 0) {
		if (now_ms() >= until) {
			kill(*pid, SIGKILL);
			waitpid(*pid, &status, 0);
			*pid = 0;
			return -1;
		}
		sleep_ms(10);
	}
	*pid = 0;
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* Waits up to `timeout_ms` for a server's "listening" line in the file
 * `out` (`who` names it if it never comes): the port it bound. */
static inline uint16_t await_listening_port(const char *out, uint64_t timeout_ms, const char *who)
{
	uint64_t until = now_ms() + timeout_ms;
	cJSON *j = NULL;
	while (!j && now_ms() < until) {
		char *s = read_file(out);
		if (strstr(s, "\"listening\""))
			j = cJSON_Parse(s);
		free(s);
		if (!j)
			sleep_ms(20);
	}
	cr_assert_not_null(j, "%s did not start", who);
	uint16_t port = (uint16_t)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(j, "port"));
	cJSON_Delete(j);
	cr_assert_gt(port, 0);
	return port;
}

/* Starts `pincer gateway --port 0 --config cfg` and the flags of `extra`
 * (NULL-terminated; may be NULL) in `home` (its PINCER_HOME and working
 * directory; PATH the system's), output into the files `out` and `err`
 * (emptied first), and waits up to `timeout_ms` for its "listening" line:
 * the port it bound. *pid is the child's. */
static inline uint16_t start_gateway_child_with(const char *pincer, const char *home, const char *cfg,
						const char *out, const char *err, const char *const *extra,
						uint64_t timeout_ms, pid_t *pid)
{
	write_file(out, "");
	write_file(err, "");
	char env_home[PATH_MAX];
	snprintf(env_home, sizeof(env_home), "PINCER_HOME=%s", home);
	char *argv[16] = {(char *)pincer, "gateway", "--port", "0", "--config", (char *)cfg};
	for (size_t i = 0, n = 6; extra && extra[i]; i++) {
		cr_assert_lt(n, sizeof(argv) / sizeof(argv[0]) - 1, "too many flags");
		argv[n++] = (char *)extra[i];
	}
	char *envp[] = {env_home, "PATH=/usr/bin:/bin", NULL};
	*pid = start_child(pincer, argv, envp, home, out, err);
	return await_listening_port(out, timeout_ms, "the gateway");
}

static inline uint16_t start_gateway_child(const char *pincer, const char *home, const char *cfg, const char *out,
					   const char *err, uint64_t timeout_ms, pid_t *pid)
{
	return start_gateway_child_with(pincer, home, cfg, out, err, NULL, timeout_ms, pid);
}

/* Starts `pincer mock-llm --port 0` in `dir` (PATH the system's), output
 * into the files `out` and `err`, and waits up to `timeout_ms` for its
 * "listening" line: the port it bound. *pid is the child's. */
static inline uint16_t start_mock_llm_child(const char *pincer, const char *dir, const char *out, const char *err,
					    uint64_t timeout_ms, pid_t *pid)
{
	write_file(out, "");
	char *argv[] = {(char *)pincer, "mock-llm", "--port", "0", NULL};
	char *envp[] = {"PATH=/usr/bin:/bin", NULL};
	*pid = start_child(pincer, argv, envp, dir, out, err);
	return await_listening_port(out, timeout_ms, "the mock");
}

#endif
