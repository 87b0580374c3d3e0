/*
 * `pincer devices list|approve ID|reject ID`: a running gateway's device
 * pairing (docs/gateway.md, "Device identity"): the requests of devices
 * from other machines waiting for approval and the devices paired, then
 * an operator's decision on one request (`device.pair.list`, `.approve`,
 * `.reject`, which need the operator.pairing scope the command asks for).
 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "commands.h"
#include "rpc_client.h"

#define CMD "pincer devices"
#define ANSWER_MS 30000

static void usage(FILE *f)
{
	fprintf(f, "usage: pincer devices list [--json] [gateway options]\n"
		   "       pincer devices approve REQUEST_ID [--json] [gateway options]\n"
		   "       pincer devices reject REQUEST_ID [--json] [gateway options]\n\n"
		   "  list                   pairing requests waiting for approval, and paired devices\n"
		   "  approve REQUEST_ID     pair the device of that request (it then gets a device\n"
		   "                         token when it connects again)\n"
		   "  reject REQUEST_ID      drop that request\n"
		   "  --json                 the gateway's answer as one JSON line (env PINCER_JSON)\n\n"
		   "gateway options:\n");
	pc_cli_gw_usage(f);
}

typedef struct opts {
	const char *action, *request_id;
	bool json;
	pc_cli_gw_flags_t gw;
} opts_t;

/* 0 to go on, -1 after --help, else the exit status of a usage error. */
static int parse_flags(int argc, char **argv, opts_t *o)
{
	static const struct option longs[] = {
		{"json", no_argument, NULL, 'j'},
		{"help", no_argument, NULL, 'h'},
		PC_CLI_GW_LONG_OPTIONS,
		{NULL, 0, NULL, 0},
	};
	optind = 1;
	int c;
	while ((c = getopt_long(argc, argv, "h", longs, NULL)) != -1) {
		if (c == 'j') {
			o->json = true;
		} else if (c == 'h') {
			usage(stdout);
			return -1;
		} else if (!pc_cli_gw_flag_or_usage(&o->gw, c, argc, argv, longs, usage)) {
			return PC_CLI_USAGE;
		}
	}
	return 0;
}

static int parse(int argc, char **argv, opts_t *o)
{
	if (pc_cli_env_flag(CMD, "PINCER_JSON", &o->json))
		return PC_CLI_USAGE;
	int rc = parse_flags(argc, argv, o);
	if (rc)
		return rc;
	o->action = optind < argc ? argv[optind++] : NULL;
	bool list = o->action && !strcmp(o->action, "list");
	bool decide = o->action && (!strcmp(o->action, "approve") || !strcmp(o->action, "reject"));
	if (decide && optind < argc)
		o->request_id = argv[optind++];
	const char *extra = optind < argc ? argv[optind] : NULL;
	if (!list && !decide) {
		if (o->action)
			fprintf(stderr, CMD ": unknown action '%s'\n\n", o->action);
		usage(stderr);
		return PC_CLI_USAGE;
	}
	if (extra || (decide && !o->request_id)) {
		if (extra)
			fprintf(stderr, CMD ": unexpected argument '%s'\n\n", extra);
		else
			fprintf(stderr, CMD ": %s needs a request id (see `pincer devices list`)\n\n", o->action);
		usage(stderr);
		return PC_CLI_USAGE;
	}
	pc_cli_gw_env(&o->gw);
	return 0;
}

/* ---- what a person reads ---- */

static const char *jstr(const cJSON *o, const char *k)
{
	const char *s = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, k));
	return s ? s : "";
}

static void print_time(double ms)
{
	char when[32] = "-";
	time_t t = (time_t)(ms / 1000.0);
	struct tm tm;
	if (ms > 0 && gmtime_r(&t, &tm))
		strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
	printf("%-21s", when);
}

static void print_scopes(const cJSON *o)
{
	const cJSON *s;
	bool first = true;
	cJSON_ArrayForEach(s, cJSON_GetObjectItemCaseSensitive(o, "scopes")) {
		printf("%s%s", first ? "" : ",", cJSON_GetStringValue(s) ? cJSON_GetStringValue(s) : "?");
		first = false;
	}
	printf("%s\n", first ? "-" : "");
}

static void print_list(const cJSON *p)
{
	const cJSON *pending = cJSON_GetObjectItemCaseSensitive(p, "pending");
	const cJSON *paired = cJSON_GetObjectItemCaseSensitive(p, "paired"), *e;
	if (cJSON_GetArraySize(pending) == 0) {
		printf("no pairing requests\n");
	} else {
		printf("pending:\n%-36s  %-16s  %-16s  %-21s  %s\n", "REQUEST", "DEVICE", "FROM", "ASKED (UTC)", "SCOPES");
		cJSON_ArrayForEach(e, pending) {
			printf("%-36s  %-16.16s  %-16s  ", jstr(e, "requestId"), jstr(e, "deviceId"),
			       *jstr(e, "remoteIp") ? jstr(e, "remoteIp") : "-");
			print_time(cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(e, "ts")));
			printf("  ");
			print_scopes(e);
		}
	}
	if (cJSON_GetArraySize(paired) == 0) {
		printf("no paired devices\n");
		return;
	}
	printf("paired:\n%-64s  %-21s  %s\n", "DEVICE", "APPROVED (UTC)", "SCOPES");
	cJSON_ArrayForEach(e, paired) {
		printf("%-64s  ", jstr(e, "deviceId"));
		print_time(cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(e, "approvedAtMs")));
		printf("  ");
		print_scopes(e);
	}
}

/* Prints the answer's payload: a person's line(s), or the JSON. */
static int show(const opts_t *o, const cJSON *p)
{
	if (o->json)
		return pc_cli_print_json(CMD, p);
	if (!strcmp(o->action, "list"))
		print_list(p);
	else if (!strcmp(o->action, "approve"))
		printf("approved %s: device %s is paired\n", o->request_id,
		       jstr(cJSON_GetObjectItemCaseSensitive(p, "device"), "deviceId"));
	else
		printf("rejected %s (device %s)\n", o->request_id, jstr(p, "deviceId"));
	return PC_CLI_OK;
}

int pc_cmd_devices(int argc, char **argv)
{
	opts_t o = {0};
	int status = parse(argc, argv, &o);
	if (status)
		return status < 0 ? PC_CLI_OK : status;
	static const char *const scopes[] = {"operator.pairing", NULL};
	pc_cli_rpc_t *c = NULL;
	status = pc_cli_gw_connect(CMD, &o.gw, scopes, false, &c);
	if (status)
		return status;
	cJSON *params = NULL;
	const char *method = "device.pair.list";
	if (o.request_id) {
		method = !strcmp(o.action, "approve") ? "device.pair.approve" : "device.pair.reject";
		params = cJSON_CreateObject();
		if (!params || !cJSON_AddStringToObject(params, "requestId", o.request_id)) {
			cJSON_Delete(params);
			pc_cli_rpc_free(c);
			fprintf(stderr, CMD ": out of memory\n");
			return PC_CLI_FAIL;
		}
	}
	cJSON *res = NULL;
	char why[400];
	int rc = pc_cli_rpc_call(c, method, params, ANSWER_MS, &res);
	const cJSON *p = NULL;
	if (rc != 0) {
		fprintf(stderr, CMD ": %s\n", pc_cli_rpc_strerror(c, rc, why, sizeof(why)));
		status = PC_CLI_FAIL;
	} else if (!(p = pc_cli_rpc_payload(CMD, res))) {
		status = PC_CLI_FAIL;
	} else {
		status = show(&o, p);
	}
	cJSON_Delete(res);
	pc_cli_rpc_free(c);
	status = pc_cli_flush_stdout(CMD, status);
	return status;
}
