/*
 * pincer.json from a file: finding it (the path given, PINCER_CONFIG,
 * PINCER_HOME, ./pincer.json), reading it within its size bound, and
 * parsing it (config.c) with the file named in every error.
 */
#include "config.h"
#include "config_internal.h"
#include "io/io.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

/* The whole file; PC_ENOTFOUND when it does not exist, PC_ESYS (errno set)
 * when it cannot be read, PC_ELIMIT past PC__CONFIG_MAX_FILE_BYTES. */
static int read_file(const char *path, char **out, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	size_t n = 0, cap = 0;
	int rc = 0;
	if (!f)
		return errno == ENOENT || errno == ENOTDIR ? PC_ENOTFOUND : PC_ESYS;
	for (;;) {
		if (n == cap) {
			if (cap > PC__CONFIG_MAX_FILE_BYTES) {
				rc = PC_ELIMIT;
				break;
			}
			if ((rc = PC__GROW(buf, cap, n + 1, 4096)))
				break;
		}
		size_t got = fread(buf + n, 1, cap - n, f);
		n += got;
		if (got == 0) {
			rc = ferror(f) ? PC_ESYS : 0;
			break;
		}
	}
	int saved = errno;
	if (fclose(f) && !rc)
		rc = PC_ESYS;
	else
		errno = saved;
	if (rc) {
		free(buf);
		return rc;
	}
	*out = buf;
	*len = n;
	return 0;
}


/* Parses `path`; `required`: a missing file is an error, else ENOTFOUND is
 * returned quietly so the search goes on. */
static int load_file(const char *path, bool required, pc_config_t **out, pc_config_errors_t *errs)
{
	char *text = NULL;
	size_t len = 0;
	char msg[256];
	int rc = read_file(path, &text, &len);
	if (rc == PC_ENOTFOUND && !required)
		return rc;
	if (rc == PC_ENOTFOUND)
		return pc__config_single_error(errs, rc, path, "no such file");
	if (rc == PC_ELIMIT) {
		snprintf(msg, sizeof(msg), "larger than %zu bytes", PC__CONFIG_MAX_FILE_BYTES);
		return pc__config_single_error(errs, rc, path, msg);
	}
	if (rc == PC_ESYS) {
		snprintf(msg, sizeof(msg), "cannot read: %s", strerror(errno));
		return pc__config_single_error(errs, rc, path, msg);
	}
	if (rc)
		return rc;
	rc = pc_config_parse(text, len, path, out, errs);
	free(text);
	return rc;
}

int pc_config_load(const char *path, pc_config_t **out, pc_config_errors_t *errs)
{
	const char *env = getenv("PINCER_CONFIG");
	const char *home = getenv("PINCER_HOME");
	char buf[4096];
	int rc;
	if (errs)
		*errs = (pc_config_errors_t){0};
	if (!out)
		return PC_EINVAL;
	*out = NULL;
	/* Named by the caller or by $PINCER_CONFIG: it must exist. */
	if (path)
		return load_file(path, true, out, errs);
	if (env && *env)
		return load_file(env, true, out, errs);
	rc = load_file("pincer.json", false, out, errs);
	if (rc != PC_ENOTFOUND)
		return rc;
	if (!home || !*home)
		home = "./.pincer";
	int n = snprintf(buf, sizeof(buf), "%s/pincer.json", home);
	if (n < 0 || (size_t)n >= sizeof(buf))
		return pc__config_single_error(errs, PC_EINVAL, "env.PINCER_HOME", "path too long");
	rc = load_file(buf, false, out, errs);
	if (rc != PC_ENOTFOUND)
		return rc;
	return pc_config_parse("", 0, NULL, out, errs);
}
