/*
 * `pincer config validate|show [--config FILE]`: checks a pincer.json (or
 * whichever file pc_config_load finds) and reports every problem at once,
 * or prints the effective configuration with every default filled in and
 * api keys redacted.
 *
 * Options are read by hand, not with getopt: getopt keeps global state
 * (optind) that a second call in the same process would have to reset.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../config/config.h"

int pc_cmd_config(int argc, char **argv);

static void usage(FILE *f)
{
	fprintf(f, "usage: pincer config validate [--config FILE]\n"
		   "       pincer config show [--config FILE]\n\n"
		   "  validate         check the configuration; print \"ok: <file>\", or every\n"
		   "                   problem as \"<path>: <message>\" on stderr (exit 1)\n"
		   "  show             print the effective configuration as JSON (api keys\n"
		   "                   redacted)\n"
		   "  --config FILE    the file to read (default: $PINCER_CONFIG, ./pincer.json,\n"
		   "                   $PINCER_HOME/pincer.json, else the built-in defaults)\n\n"
		   "See docs/configuration.md for every key.\n");
}

/* Loads the config, printing its errors; the exit status on failure. */
static int load(const char *file, pc_config_t **out)
{
	pc_config_errors_t errs = {0};
	int rc = pc_config_load(file, out, &errs);
	int status = 0;
	if (rc) {
		for (size_t i = 0; i < errs.count; i++)
			fprintf(stderr, "%s\n", errs.items[i]);
		if (errs.count == 0)
			fprintf(stderr, "pincer config: %s\n", pc_strerror(rc));
		status = 1;
	}
	pc_config_errors_free(&errs);
	return status;
}

int pc_cmd_config(int argc, char **argv)
{
	const char *action = NULL, *file = NULL;
	pc_config_t *c = NULL;
	char *json = NULL;
	int status = 0;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			usage(stdout);
			return 0;
		}
		if (!strcmp(a, "--config") || !strcmp(a, "-c")) {
			if (i + 1 >= argc) {
				fprintf(stderr, "pincer config: %s needs a file\n", a);
				return 2;
			}
			file = argv[++i];
		} else if (!strncmp(a, "--config=", 9)) {
			file = a + 9;
		} else if (a[0] != '-' && !action) {
			action = a;
		} else {
			fprintf(stderr, "pincer config: unexpected argument '%s'\n\n", a);
			usage(stderr);
			return 2;
		}
	}
	if (!action || (strcmp(action, "validate") != 0 && strcmp(action, "show") != 0)) {
		if (action)
			fprintf(stderr, "pincer config: unknown action '%s'\n\n", action);
		usage(stderr);
		return 2;
	}
	if (file && !*file) {
		fprintf(stderr, "pincer config: --config needs a file\n");
		return 2;
	}

	status = load(file, &c);
	if (status)
		goto out;
	if (!strcmp(action, "validate")) {
		printf("ok: %s\n", c->source ? c->source : "(built-in defaults)");
		goto out;
	}
	int rc = pc_config_to_json(c, &json);
	if (rc) {
		fprintf(stderr, "pincer config: %s\n", pc_strerror(rc));
		status = 1;
		goto out;
	}
	printf("%s\n", json);
out:
	if (fflush(stdout) != 0 && !status) {
		perror("pincer config: stdout");
		status = 1;
	}
	free(json);
	pc_config_free(c);
	return status;
}
