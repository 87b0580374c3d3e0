/*
 * `pincer health [--json] [--url URL] [--token T] [--password P]
 * [--config FILE]`: asks a running gateway for its `health` (docs/gateway.md)
 * and prints it. Exit status 0 when the gateway says ok, 1 when it is
 * not ok (starting, draining) or cannot be reached, 2 for bad usage.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "commands.h"
#include "rpc_client.h"

#define CMD "pincer health"
#define ANSWER_MS 30000

static void usage(FILE *f)
{
	fprintf(f, "usage: pincer health [--json] [--url URL] [--token TOKEN] [--password SECRET]\n"
		   "                     [--config FILE]\n\n"
		   "Asks a running gateway how it is. Exit status 0 when it is ready, 1 when it\n"
		   "is starting or draining or cannot be reached.\n\n"
		   "  --json                 the gateway's health object as one JSON line (env\n"
		   "                         PINCER_JSON)\n");
	pc_cli_gw_usage(f);
}

/* 0 to go on, -1 after --help, else the exit status of a usage error. */
static int parse(int argc, char **argv, pc_cli_gw_flags_t *gw, bool *json)
{
	static const struct option longs[] = {
		{"json", no_argument, NULL, 'j'}, {"help", no_argument, NULL, 'h'}, PC_CLI_GW_LONG_OPTIONS,
		{NULL, 0, NULL, 0},
	};
	if (pc_cli_env_flag(CMD, "PINCER_JSON", json))
		return PC_CLI_USAGE;
	optind = 1;
	int c;
	while ((c = getopt_long(argc, argv, "h", longs, NULL)) != -1) {
		if (c == 'j') {
			*json = true;
		} else if (c == 'h') {
			usage(stdout);
			return -1;
		} else if (!pc_cli_gw_flag_or_usage(gw, c, argc, argv, longs, usage)) {
			return PC_CLI_USAGE;
		}
	}
	if (optind < argc) {
		fprintf(stderr, CMD ": unexpected argument '%s'\n\n", argv[optind]);
		usage(stderr);
		return PC_CLI_USAGE;
	}
	pc_cli_gw_env(gw);
	return 0;
}

static double num(const cJSON *o, const char *k)
{
	return cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(o, k));
}

/* One line a person reads: state, uptime, runs, lane. */
static void print_human(const cJSON *h)
{
	const cJSON *agent = cJSON_GetObjectItemCaseSensitive(h, "agent");
	const cJSON *lane = cJSON_GetObjectItemCaseSensitive(h, "lane");
	const char *state = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(h, "state"));
	printf("%s: %s, up %.1f s; runs active %.0f, sessions live %.0f; lane %.0f active, %.0f queued, max %.0f\n",
	       cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(h, "ok")) ? "ok" : "not ok", state ? state : "?",
	       num(h, "uptimeMs") / 1000.0, num(agent, "runsActive"), num(agent, "sessionsLive"), num(lane, "active"),
	       num(lane, "queued"), num(lane, "max"));
}

/* Prints the health object; the exit status it means. */
static int show(const cJSON *h, bool json)
{
	if (!json)
		print_human(h);
	else if (pc_cli_print_json(CMD, h) != PC_CLI_OK)
		return PC_CLI_FAIL;
	return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(h, "ok")) ? PC_CLI_OK : PC_CLI_FAIL;
}

int pc_cmd_health(int argc, char **argv)
{
	pc_cli_gw_flags_t gw = {0};
	bool json = false;
	int status = parse(argc, argv, &gw, &json);
	if (status)
		return status < 0 ? PC_CLI_OK : status;
	static const char *const scopes[] = {"operator.read", NULL};
	pc_cli_rpc_t *c = NULL;
	status = pc_cli_gw_connect(CMD, &gw, scopes, false, &c);
	if (status)
		return status;
	cJSON *res = NULL;
	char why[400];
	int rc = pc_cli_rpc_call(c, "health", NULL, ANSWER_MS, &res);
	const cJSON *h = NULL;
	if (rc != 0) {
		fprintf(stderr, CMD ": %s\n", pc_cli_rpc_strerror(c, rc, why, sizeof(why)));
		status = PC_CLI_FAIL;
	} else if (!(h = pc_cli_rpc_payload(CMD, res))) {
		status = PC_CLI_FAIL;
	} else {
		status = show(h, json);
	}
	cJSON_Delete(res);
	pc_cli_rpc_free(c);
	status = pc_cli_flush_stdout(CMD, status);
	return status;
}
