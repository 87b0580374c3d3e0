/*
 * The `pincer` command: `pincer <command> [options]`. Each command is one
 * entry in the table below, run with its own argv (argv[0] is the
 * command's name) and returning the process exit status: 0 success,
 * 1 failure, 2 bad usage.
 */
#include <stdio.h>
#include <string.h>

#include "../../runtime/version.h"
#include "commands.h"

typedef struct command {
	const char *name;
	int (*run)(int argc, char **argv);
	const char *summary;
} command_t;

static const command_t commands[] = {
	{"agent", pc_cmd_agent, "run one agent turn (--local: in-process)"},
	{"config", pc_cmd_config, "validate or show the configuration"},
	{"gateway", pc_cmd_gateway, "serve the WebSocket RPC, the OpenAI API, probes and metrics"},
	{"mock-llm", pc_cmd_mock_llm, "serve a scripted OpenAI- and Anthropic-compatible LLM API"},
};

static void usage(FILE *f)
{
	fprintf(f, "usage: pincer <command> [options]\n"
		   "       pincer --help | --version\n\ncommands:\n");
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		fprintf(f, "  %-12s %s\n", commands[i].name, commands[i].summary);
	fprintf(f, "\n`pincer <command> --help` describes a command's options.\n");
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	const char *cmd = argv[1];
	if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
		usage(stdout);
		return 0;
	}
	if (!strcmp(cmd, "--version") || !strcmp(cmd, "-V")) {
		printf("pincer %s\n", pc_version());
		return 0;
	}
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		if (!strcmp(cmd, commands[i].name))
			return commands[i].run(argc - 1, argv + 1);
	fprintf(stderr, "pincer: unknown command '%s'\n\n", cmd);
	usage(stderr);
	return 2;
}
