/*
 * allowlist mode confines the program, not its arguments, so a program
 * that runs other programs or code (a launcher: env, xargs, find, nice,
 * timeout, sudo, ...; an interpreter: sh, bash, python3, perl, node, awk,
 * ...) may not be listed: the configuration refuses it at load, naming
 * the entry, and so does pc_tool_register_exec for an embedder's policy.
 * Names are compared by basename, versions included (python3.11).
 */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agents/config/config.h"
#include "tool_exec_fixture.h"

/* A launcher of the list, then how it may be spelled. */
static const char *const refused[] = {
	"env",     "sh",          "bash",         "dash",    "zsh",    "ksh",       "busybox", "python3",
	"python3.11", "python",   "pypy3",        "perl",    "perl5.36", "node",    "nodejs",  "ruby",
	"php8.2",  "lua5.4",      "awk",          "gawk",    "mawk",   "xargs",     "find",    "parallel",
	"nice",    "nohup",       "setsid",       "timeout", "stdbuf", "ionice",    "chrt",    "taskset",
	"sudo",    "su",          "doas",         "chroot",  "strace", "gdb",       "ssh",     "script",
	"watch",   "flock",       "/usr/bin/env", "/bin/sh", "node-18",
};

static const char *const fine[] = {"ls", "cat", "grep", "git", "echo", "wc", "sha256sum", "b2sum", "x86_64"};

/* Loads a file that lists `ls` and `name` for allowlist mode. */
static int load_with(const char *name, pc_config_errors_t *errs, pc_config_t **cfg)
{
	char path[] = "/tmp/pc-allowlist-XXXXXX";
	int fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	FILE *f = fdopen(fd, "w");
	cr_assert_not_null(f);
	fprintf(f,
		"{\"agents\":{\"defaults\":{\"tools\":{\"exec\":{\"mode\":\"allowlist\","
		"\"allow\":[\"ls\",\"%s\"]}}}}}",
		name);
	cr_assert_eq(fclose(f), 0);
	int rc = pc_config_load(path, cfg, errs);
	cr_assert_eq(unlink(path), 0);
	return rc;
}

Test(exec_allowlist, config_refuses_launchers_naming_the_entry)
{
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		pc_config_errors_t errs = {0};
		pc_config_t *cfg = NULL;
		int rc = load_with(refused[i], &errs, &cfg);
		char want[256];
		snprintf(want, sizeof(want),
			 "agents.defaults.tools.exec.allow[1]: \"%s\" runs other programs or code, so allowing it "
			 "allows every command",
			 refused[i]);
		bool found = false;
		for (size_t k = 0; k < errs.count; k++)
			found |= strstr(errs.items[k], want) != NULL;
		cr_assert_eq(rc, PC_EINVAL, "%s was accepted", refused[i]);
		cr_assert(found, "%s: no error names it (%zu errors, first: %s)", refused[i], errs.count,
			  errs.count ? errs.items[0] : "-");
		cr_assert_eq(errs.count, 1u, "%s: %s", refused[i], errs.items[errs.count - 1]);
		pc_config_errors_free(&errs);
	}
}

Test(exec_allowlist, config_keeps_ordinary_programs)
{
	for (size_t i = 0; i < sizeof(fine) / sizeof(fine[0]); i++) {
		pc_config_errors_t errs = {0};
		pc_config_t *cfg = NULL;
		cr_assert_eq(load_with(fine[i], &errs, &cfg), 0, "%s: %s", fine[i], errs.count ? errs.items[0] : "");
		cr_assert_eq(cfg->agent.exec.allow_count, 2u);
		pc_config_errors_free(&errs);
		pc_config_free(cfg);
	}
}

Test(exec_allowlist, register_refuses_launchers)
{
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		const char *allow[] = {"ls", refused[i]};
		pc_exec_policy_t pol = {.mode = PC_EXEC_ALLOWLIST, .allow = allow, .n_allow = 2};
		cr_assert_eq(register_exec_alone(&pol), PC_EINVAL, "%s was accepted", refused[i]);
	}
	const char *allow[] = {"ls", "git"};
	pc_exec_policy_t pol = {.mode = PC_EXEC_ALLOWLIST, .allow = allow, .n_allow = 2};
	cr_assert_eq(register_exec_alone(&pol), 0);
}
