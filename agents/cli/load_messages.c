/*
 * `pincer load --messages FILE` (load.h): a JSONL file of messages, one
 * per line, each a JSON string or an object with a "message" string;
 * blank lines are skipped. A session's turn k takes line k modulo their
 * number, so a file scripts a mock turn by turn (docs/load.md).
 */
#include "load.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "commands.h"

/* Past this many messages the file is refused: they all stay in memory. */
#define MAX_MESSAGES 1000000u

/* The message of one line, malloc'd; NULL with *why set. */
static char *line_message(const char *line, size_t len, const char **why)
{
	cJSON *j = cJSON_ParseWithLength(line, len);
	const cJSON *m = cJSON_IsObject(j) ? cJSON_GetObjectItemCaseSensitive(j, "message") : j;
	const char *text = cJSON_GetStringValue(m);
	char *out = text ? strdup(text) : NULL;
	*why = !j ? "not JSON" : !text ? "neither a string nor an object with a \"message\" string" : "out of memory";
	cJSON_Delete(j);
	return out;
}

static bool blank(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n')
			return false;
	return true;
}

static int add(pc_load_opts_t *o, char *msg, size_t *cap)
{
	if (o->n_messages == *cap) {
		size_t n = *cap ? *cap * 2 : 16;
		char **m = realloc(o->messages, n * sizeof(*m));
		if (!m)
			return PC_ENOMEM;
		o->messages = m;
		*cap = n;
	}
	o->messages[o->n_messages++] = msg;
	return 0;
}

int pc_load_messages_read(const char *path, pc_load_opts_t *o)
{
	FILE *f = fopen(path, "r");
	if (!f) {
		fprintf(stderr, PC_LOAD_CMD ": --messages %s: %s\n", path, strerror(errno));
		return PC_CLI_USAGE;
	}
	char *line = NULL;
	size_t line_cap = 0, cap = 0, lineno = 0;
	ssize_t n;
	int status = 0;
	errno = 0;
	while (status == 0 && (n = getline(&line, &line_cap, f)) >= 0) {
		lineno++;
		if (blank(line, (size_t)n))
			continue;
		const char *why = "too many messages";
		char *msg = o->n_messages < MAX_MESSAGES ? line_message(line, (size_t)n, &why) : NULL;
		if (msg && add(o, msg, &cap) != 0) {
			free(msg);
			msg = NULL;
			why = "out of memory";
		}
		if (!msg) {
			fprintf(stderr, PC_LOAD_CMD ": --messages %s:%zu: %s\n", path, lineno, why);
			status = strcmp(why, "out of memory") ? PC_CLI_USAGE : PC_CLI_FAIL;
		}
	}
	if (status == 0 && ferror(f)) {
		fprintf(stderr, PC_LOAD_CMD ": --messages %s: %s\n", path, strerror(errno));
		status = PC_CLI_FAIL;
	}
	free(line);
	fclose(f);
	if (status == 0 && !o->n_messages) {
		fprintf(stderr, PC_LOAD_CMD ": --messages %s: no message in it\n", path);
		status = PC_CLI_USAGE;
	}
	if (status)
		pc_load_messages_free(o);
	return status;
}

void pc_load_messages_free(pc_load_opts_t *o)
{
	for (size_t i = 0; i < o->n_messages; i++)
		free(o->messages[i]);
	free(o->messages);
	o->messages = NULL;
	o->n_messages = 0;
}
