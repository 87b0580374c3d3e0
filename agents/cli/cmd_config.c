/*
 * `pincer config validate|show|print [--config FILE] [--json]`: checks a
 * pincer.json (or whichever file pc_config_load finds) and reports every
 * problem at once, or prints the effective configuration with every
 * default filled in and api keys redacted (`print` is `show`).
 *
 * Options are read by hand, not with getopt: the action and the flags may
 * come in any order and there are only two flags.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "agents/config/config.h"
#include "commands.h"

#define CMD "pincer config"

static void usage(FILE *f)
{
	fprintf(f, "usage: pincer config validate [--config FILE] [--json]\n"
		   "       pincer config show|print [--config FILE] [--json]\n\n"
		   "  validate         check the configuration; print \"ok: <file>\", or every\n"
		   "                   problem as \"<path>: <message>\" on stderr (exit 1)\n"
		   "  show, print      print the effective configuration as JSON (api keys\n"
		   "                   redacted)\n"
		   "  --config FILE    the file to read (default: $PINCER_CONFIG, ./pincer.json,\n"
		   "                   $PINCER_HOME/pincer.json, else the built-in defaults)\n"
		   "  --json           one JSON line: validate prints {\"ok\",\"source\"} or\n"
		   "                   {\"ok\":false,\"errors\":[...]}; show prints the configuration\n"
		   "                   on one line (env PINCER_JSON)\n\n"
		   "See docs/configuration.md for every key.\n");
}

typedef struct opts {
	const char *action, *file;
	bool json;
} opts_t;

/* 0 to go on, -1 after --help, else the exit status of a usage error. */
static int parse(int argc, char **argv, opts_t *o)
{
	if (pc_cli_env_flag(CMD, "PINCER_JSON", &o->json))
		return PC_CLI_USAGE;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			usage(stdout);
			return -1;
		}
		if (!strcmp(a, "--config") || !strcmp(a, "-c")) {
			if (i + 1 >= argc) {
				fprintf(stderr, CMD ": %s needs a file\n", a);
				return PC_CLI_USAGE;
			}
			o->file = argv[++i];
		} else if (!strncmp(a, "--config=", 9)) {
			o->file = a + 9;
		} else if (!strcmp(a, "--json")) {
			o->json = true;
		} else if (a[0] != '-' && !o->action) {
			o->action = a;
		} else {
			fprintf(stderr, CMD ": unexpected argument '%s'\n\n", a);
			usage(stderr);
			return PC_CLI_USAGE;
		}
	}
	const char *act = o->action;
	if (!act || (strcmp(act, "validate") && strcmp(act, "show") && strcmp(act, "print"))) {
		if (act)
			fprintf(stderr, CMD ": unknown action '%s'\n\n", act);
		usage(stderr);
		return PC_CLI_USAGE;
	}
	if (o->file && !*o->file) {
		fprintf(stderr, CMD ": --config needs a file\n");
		return PC_CLI_USAGE;
	}
	return 0;
}

/* The failure as JSON: {"ok":false,"errors":[...]}. */
static void print_errors_json(const pc_config_errors_t *errs, int rc)
{
	cJSON *o = cJSON_CreateObject();
	bool ok = o && cJSON_AddFalseToObject(o, "ok");
	cJSON *list = ok ? cJSON_AddArrayToObject(o, "errors") : NULL;
	ok = ok && list;
	for (size_t i = 0; ok && i < errs->count; i++)
		ok = cJSON_AddItemToArray(list, cJSON_CreateString(errs->items[i]));
	if (ok && !errs->count)
		ok = cJSON_AddItemToArray(list, cJSON_CreateString(pc_strerror(rc)));
	(void)pc_cli_print_json(CMD, ok ? o : NULL);
	cJSON_Delete(o);
}

/* Loads the config, printing its errors; the exit status on failure. */
static int load(const opts_t *o, pc_config_t **out)
{
	pc_config_errors_t errs = {0};
	int rc = pc_config_load(o->file, out, &errs);
	if (rc && o->json) {
		print_errors_json(&errs, rc);
	} else if (rc) {
		for (size_t i = 0; i < errs.count; i++)
			fprintf(stderr, "%s\n", errs.items[i]);
		if (errs.count == 0)
			fprintf(stderr, CMD ": %s\n", pc_strerror(rc));
	}
	pc_config_errors_free(&errs);
	return rc ? PC_CLI_FAIL : PC_CLI_OK;
}

static int validated(const opts_t *o, const pc_config_t *c)
{
	if (!o->json) {
		printf("ok: %s\n", c->source ? c->source : "(built-in defaults)");
		return PC_CLI_OK;
	}
	cJSON *j = cJSON_CreateObject();
	bool ok = j && cJSON_AddTrueToObject(j, "ok") &&
		  (c->source ? cJSON_AddStringToObject(j, "source", c->source) : cJSON_AddNullToObject(j, "source"));
	int rc = pc_cli_print_json(CMD, ok ? j : NULL);
	cJSON_Delete(j);
	return rc;
}

static int shown(const opts_t *o, const pc_config_t *c)
{
	char *json = NULL, *line = NULL;
	int rc = pc_config_to_json(c, &json);
	if (rc == 0 && o->json) {
		cJSON *j = cJSON_Parse(json);
		line = j ? cJSON_PrintUnformatted(j) : NULL;
		cJSON_Delete(j);
		rc = line ? 0 : PC_ENOMEM;
	}
	if (rc == 0)
		printf("%s\n", line ? line : json);
	else
		fprintf(stderr, CMD ": %s\n", pc_strerror(rc));
	cJSON_free(line);
	free(json);
	return rc ? PC_CLI_FAIL : PC_CLI_OK;
}

int pc_cmd_config(int argc, char **argv)
{
	opts_t o = {0};
	pc_config_t *c = NULL;
	int status = parse(argc, argv, &o);
	if (status)
		return status < 0 ? PC_CLI_OK : status;
	status = load(&o, &c);
	if (status == PC_CLI_OK)
		status = !strcmp(o.action, "validate") ? validated(&o, c) : shown(&o, c);
	status = pc_cli_flush_stdout(CMD, status);
	pc_config_free(c);
	return status;
}
