/*
 * The `pincer` command's subcommands, one per cli/cmd_*.c. Each runs with
 * its own argv (argv[0] is "pincer <subcommand>") and returns the process
 * exit status: 0 success, 1 failure, 2 bad usage (SIGINT / SIGTERM during
 * `pincer agent`: 130 / 143). docs/cli.md describes them all.
 *
 * Below them, what the commands share (main.c): every flag may also come
 * from an environment variable (PINCER_…); the flag wins.
 */
#ifndef PC_AGENTS_CLI_COMMANDS_H
#define PC_AGENTS_CLI_COMMANDS_H

#include <stdbool.h>
#include <stdint.h>

enum { PC_CLI_OK = 0, PC_CLI_FAIL = 1, PC_CLI_USAGE = 2 };

int pc_cmd_mock_llm(int argc, char **argv);
int pc_cmd_agent(int argc, char **argv);
int pc_cmd_config(int argc, char **argv);
int pc_cmd_devices(int argc, char **argv);
int pc_cmd_gateway(int argc, char **argv);
int pc_cmd_health(int argc, char **argv);
int pc_cmd_load(int argc, char **argv);
int pc_cmd_sessions(int argc, char **argv);
int pc_cmd_version(int argc, char **argv);

struct option;

/* After getopt_long returned '?': when the word it refused is an unknown
 * `--name`, prints "<argv[0]>: did you mean '--x'?" for a close option of
 * `longs` (nothing when none is close). */
void pc_cli_suggest_option(int argc, char **argv, const struct option *longs);

/* A command's last word: `status`, or PC_CLI_FAIL after "<cmd>: stdout:
 * <why>" on stderr when what it printed could not be written (a full
 * disk, a closed pipe). */
int pc_cli_flush_stdout(const char *cmd, int status);

struct cJSON;

/* Prints `j` on stdout as one line of JSON: PC_CLI_OK; or, when `j` is
 * NULL (it could not be built) or cannot be printed, "<cmd>: out of
 * memory" on stderr and PC_CLI_FAIL. */
int pc_cli_print_json(const char *cmd, const struct cJSON *j);

/* The loopback names a user may type where a numeric address is wanted:
 * "localhost" is 127.0.0.1, "ip6-localhost" / "ip6-loopback" ::1; any
 * other text comes back as it is. No resolver is asked. */
const char *pc_cli_loopback_alias(const char *host);

/* True when `host` is a numeric IPv4 or IPv6 address. */
bool pc_cli_numeric_host(const char *host);

/* "<cmd>: cannot listen on HOST:PORT: <cause>" on stderr; the cause is
 * strerror(err) when rc is PC_ESYS (err: errno right after the failure),
 * else pc_strerror(rc). */
void pc_cli_listen_error(const char *cmd, const char *host, unsigned port, int rc, int err);

/* $name when set and non-empty, else NULL. */
const char *pc_cli_env(const char *name);

/* A yes/no flag's variable: unset or empty leaves *out as it is; 1, true,
 * yes, on set it; 0, false, no, off clear it. Anything else is printed as
 * a usage error (prefixed with `cmd`) and returns PC_CLI_USAGE; else 0. */
int pc_cli_env_flag(const char *cmd, const char *name, bool *out);

/* A whole number in [min, max] ("" or junk refused): 0, or PC_CLI_USAGE
 * with "<cmd>: <what> takes min..max" printed. */
int pc_cli_uint(const char *cmd, const char *what, const char *text, uint64_t min, uint64_t max, uint64_t *out);

#endif
