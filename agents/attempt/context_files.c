/*
 * The workspace context files (§2.1 steps 3 and 5): AGENTS.md, SOUL.md and
 * the rest, each cut to its budget, then the skills list, read on the
 * blocking pool and shared by every attempt for PC__CONTEXT_TTL_MS.
 */
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../agent_internal.h"
#include "io/io.h"
#include "runtime/blocking.h"

/* Workspace files whose text joins the system prompt (§2.1 step 5). */
static const char *const CONTEXT_FILES[] = {"AGENTS.md", "SOUL.md", "TOOLS.md", "IDENTITY.md", "USER.md",
					    "MEMORY.md"};
#define CONTEXT_FILE_MAX_DEFAULT 20000u
#define CONTEXT_TOTAL_MAX_DEFAULT 150000u

typedef struct context_job {
	pc_agent_t *agent;
} context_job_t;

/* The skills section (§2.1 step 3): one line per <workspace>/skills/<dir>/
 * SKILL.md, from its front matter's name and description, so the model
 * knows which instructions it can read with its tools. */
static void read_skills(const char *dir, pc__buf_t *out, size_t total)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/skills", dir);
	DIR *d = opendir(path);
	if (!d)
		return;
	bool any = false;
	struct dirent *e;
	while ((e = readdir(d)) && out->len < total && !out->err) {
		if (e->d_name[0] == '.')
			continue;
		char file[4096 + 300];
		snprintf(file, sizeof(file), "%s/%s/SKILL.md", path, e->d_name);
		FILE *f = fopen(file, "r");
		if (!f)
			continue;
		char line[512], name[128] = "", desc[400] = "";
		for (int i = 0; i < 20 && fgets(line, sizeof(line), f); i++) {
			line[strcspn(line, "\r\n")] = '\0';
			if (!strncmp(line, "name:", 5))
				snprintf(name, sizeof(name), "%s", line + 5 + strspn(line + 5, " "));
			else if (!strncmp(line, "description:", 12))
				snprintf(desc, sizeof(desc), "%s", line + 12 + strspn(line + 12, " "));
		}
		fclose(f);
		if (!any)
			pc__buf_append_str(out, "\n\n## Skills\n");
		any = true;
		char entry[5200];
		int n = snprintf(entry, sizeof(entry), "- %s: %s (%s)\n", name[0] ? name : e->d_name, desc, file);
		if (n > 0)
			pc__buf_append(out, entry, (size_t)n < sizeof(entry) ? (size_t)n : sizeof(entry) - 1);
	}
	closedir(d);
}

/* The context files (§2.1 step 5), each cut to its budget and all to the
 * total, then the skills. */
static char *read_context_files(const pc_agent_defaults_t *d)
{
	const char *dir = d->workspace ? d->workspace : ".";
	size_t per = d->bootstrap_max_chars ? d->bootstrap_max_chars : CONTEXT_FILE_MAX_DEFAULT;
	size_t total = d->bootstrap_total_chars ? d->bootstrap_total_chars : CONTEXT_TOTAL_MAX_DEFAULT;
	pc__buf_t out = {0};
	char *buf = malloc(per + 1);
	for (size_t i = 0; buf && i < sizeof(CONTEXT_FILES) / sizeof(CONTEXT_FILES[0]) && out.len < total; i++) {
		char path[4096], line[128];
		snprintf(path, sizeof(path), "%s/%s", dir, CONTEXT_FILES[i]);
		FILE *f = fopen(path, "rb");
		if (!f)
			continue;
		size_t cap = per < total - out.len ? per : total - out.len;
		size_t n = fread(buf, 1, cap, f);
		bool more = fgetc(f) != EOF;
		fclose(f);
		snprintf(line, sizeof(line), "\n\n## %s\n\n", CONTEXT_FILES[i]);
		pc__buf_append_str(&out, line);
		pc__buf_append(&out, buf, n);
		if (more) {
			snprintf(line, sizeof(line), "\n[... truncated at %zu characters]", n);
			pc__buf_append_str(&out, line);
		}
	}
	free(buf);
	read_skills(dir, &out, total);
	if (pc__buf_append(&out, "", 0) != 0) {
		/* out of memory: no context files rather than no run */
		pc__buf_free(&out);
		return strdup("");
	}
	return out.p;
}

static pc_msg_t *context_job_run(void *arg)
{
	context_job_t *j = arg;
	pc_agent_t *a = j->agent;
	free(j);
	char *text = read_context_files(&a->cfg->agent);
	pthread_mutex_lock(&a->context.lock);
	free(a->context.text);
	a->context.text = text;
	a->context.loaded_ms = pc_runtime_now_ms();
	a->context.loading = false;
	pc_msg_t *m = pc__text_msg(PC__MSG_ATTEMPT_CONTEXT, text ? text : "");
	pthread_mutex_unlock(&a->context.lock);
	__atomic_sub_fetch(&a->stats.jobs_live, 1, __ATOMIC_RELEASE);
	return m;
}

static void context_job_discard(void *arg)
{
	context_job_t *j = arg;
	__atomic_sub_fetch(&j->agent->stats.jobs_live, 1, __ATOMIC_RELEASE);
	free(j);
}

int pc__context_get(pc_agent_t *a, pc_actor_t *reply_to, char **out)
{
	*out = NULL;
	uint64_t now = pc_runtime_now_ms();
	pthread_mutex_lock(&a->context.lock);
	if (a->context.text && now - a->context.loaded_ms < PC__CONTEXT_TTL_MS) {
		*out = strdup(a->context.text);
		pthread_mutex_unlock(&a->context.lock);
		return *out ? 0 : PC_ENOMEM;
	}
	a->context.loading = true;
	pthread_mutex_unlock(&a->context.lock);
	context_job_t *j = malloc(sizeof(*j));
	if (!j)
		return PC_ENOMEM;
	j->agent = a;
	__atomic_add_fetch(&a->stats.jobs_live, 1, __ATOMIC_RELAXED);
	int rc = pc_blocking_submit(a->rt, context_job_run, context_job_discard, j, reply_to);
	if (rc != 0) {
		__atomic_sub_fetch(&a->stats.jobs_live, 1, __ATOMIC_RELEASE);
		free(j);
	}
	return rc;
}
