/*
 * The `pincer` command: `pincer <command> [options]`. Each command is one
 * entry in the table below, run with its own argv (argv[0] is the
 * command's name) and returning the process exit status: 0 success,
 * 1 failure, 2 bad usage. Also here: the option helpers the commands
 * share (commands.h).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "commands.h"

typedef struct command {
	const char *name;
	int (*run)(int argc, char **argv);
	const char *summary;
} command_t;

static const command_t commands[] = {
	{"agent", pc_cmd_agent, "run one agent turn through the gateway (--local: in-process)"},
	{"config", pc_cmd_config, "validate or print the configuration"},
	{"gateway", pc_cmd_gateway, "serve the WebSocket RPC, the OpenAI API, probes and metrics"},
	{"health", pc_cmd_health, "ask a running gateway how it is"},
	{"mock-llm", pc_cmd_mock_llm, "serve a scripted OpenAI- and Anthropic-compatible LLM API"},
	{"sessions", pc_cmd_sessions, "list a gateway's sessions, or show one's transcript"},
	{"version", pc_cmd_version, "print the version"},
};
#define COMMAND_COUNT (sizeof(commands) / sizeof(commands[0]))

static void usage(FILE *f)
{
	fprintf(f, "usage: pincer <command> [options]\n"
		   "       pincer help [command] | --help | --version\n\ncommands:\n");
	for (size_t i = 0; i < COMMAND_COUNT; i++)
		fprintf(f, "  %-12s %s\n", commands[i].name, commands[i].summary);
	fprintf(f, "\n`pincer <command> --help` describes a command's options; each also reads\n"
		   "PINCER_… environment variables (docs/cli.md). Exit status: 0 ok, 1 failure,\n"
		   "2 bad usage.\n");
}

static const command_t *find(const char *name)
{
	for (size_t i = 0; i < COMMAND_COUNT; i++)
		if (!strcmp(name, commands[i].name))
			return &commands[i];
	return NULL;
}

/* `pincer help [command]`: the command's own --help. */
static int help(int argc, char **argv)
{
	if (argc < 3) {
		usage(stdout);
		return PC_CLI_OK;
	}
	const command_t *c = find(argv[2]);
	if (!c || argc > 3) {
		fprintf(stderr, "pincer help: %s '%s'\n\n", c ? "unexpected argument" : "unknown command",
			argv[c ? 3 : 2]);
		usage(stderr);
		return PC_CLI_USAGE;
	}
	char *args[] = {argv[2], "--help", NULL};
	return c->run(2, args);
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return PC_CLI_USAGE;
	}
	const char *cmd = argv[1];
	if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
		usage(stdout);
		return PC_CLI_OK;
	}
	if (!strcmp(cmd, "help"))
		return help(argc, argv);
	if (!strcmp(cmd, "--version") || !strcmp(cmd, "-V"))
		return pc_cmd_version(argc - 1, argv + 1);
	const command_t *c = find(cmd);
	if (c)
		return c->run(argc - 1, argv + 1);
	fprintf(stderr, "pincer: unknown command '%s'\n\n", cmd);
	usage(stderr);
	return PC_CLI_USAGE;
}

/* ---- what the commands share ---- */

const char *pc_cli_env(const char *name)
{
	const char *v = getenv(name);
	return v && *v ? v : NULL;
}

int pc_cli_env_flag(const char *cmd, const char *name, bool *out)
{
	static const char *const yes[] = {"1", "true", "yes", "on"}, *const no[] = {"0", "false", "no", "off"};
	const char *v = pc_cli_env(name);
	if (!v)
		return 0;
	for (size_t i = 0; i < 4; i++) {
		if (!strcasecmp(v, yes[i]) || !strcasecmp(v, no[i])) {
			*out = !strcasecmp(v, yes[i]);
			return 0;
		}
	}
	fprintf(stderr, "%s: %s must be 1 or 0 (true/false, yes/no, on/off), not '%s'\n", cmd, name, v);
	return PC_CLI_USAGE;
}

int pc_cli_uint(const char *cmd, const char *what, const char *text, uint64_t min, uint64_t max, uint64_t *out)
{
	char *end = NULL;
	errno = 0;
	unsigned long long v = strtoull(text, &end, 10);
	if (errno || !*text || *end || *text == '-' || *text == '+' || v < min || v > max) {
		fprintf(stderr, "%s: %s takes %llu..%llu, not '%s'\n", cmd, what, (unsigned long long)min,
			(unsigned long long)max, text);
		return PC_CLI_USAGE;
	}
	*out = v;
	return 0;
}
