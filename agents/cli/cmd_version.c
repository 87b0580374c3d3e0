/*
 * `pincer version [--json]` (and `pincer --version`): the library's
 * version and the gateway protocol versions the client speaks.
 */
#include <stdio.h>
#include <string.h>

#include "runtime/version.h"
#include "commands.h"
#include "rpc_client.h"

static void usage(FILE *f)
{
	fprintf(f, "usage: pincer version [--json]\n\n"
		   "Prints \"pincer <version>\".\n\n"
		   "  --json   {\"version\",\"versionNumber\",\"protocol\":{\"min\",\"max\"}} (env PINCER_JSON)\n");
}

int pc_cmd_version(int argc, char **argv)
{
	bool json = false;
	if (pc_cli_env_flag("pincer version", "PINCER_JSON", &json))
		return PC_CLI_USAGE;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			usage(stdout);
			return PC_CLI_OK;
		}
		if (strcmp(argv[i], "--json") != 0) {
			fprintf(stderr, "pincer version: unexpected argument '%s'\n\n", argv[i]);
			usage(stderr);
			return PC_CLI_USAGE;
		}
		json = true;
	}
	int n;
	if (json)
		n = printf("{\"version\":\"%s\",\"versionNumber\":%d,\"protocol\":{\"min\":%d,\"max\":%d}}\n",
			   pc_version(), PC_VERSION_NUMBER, PC_CLI_RPC_PROTOCOL_MIN, PC_CLI_RPC_PROTOCOL_MAX);
	else
		n = printf("pincer %s\n", pc_version());
	if (n < 0 || fflush(stdout) != 0) {
		perror("pincer version: stdout");
		return PC_CLI_FAIL;
	}
	return PC_CLI_OK;
}
