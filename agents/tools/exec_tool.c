/*
 * The `exec` and `process` tools (exec_tool.h).
 *
 * exec is an asynchronous tool. `start` checks the arguments against the
 * policy, builds the child's argv, environment and working directory, and
 * starts the process through the table (process_table.h), whose reader
 * wakes the invocation (TOKEN_EXIT) once the child has been reaped. A
 * yieldMs timer (TOKEN_YIELD) may come first: the process is then detached
 * and left to the table. Whatever ends the invocation before that (its
 * timeout, an abort, a shutdown) reaches exec_cancel, which kills the
 * process group.
 *
 * process is a synchronous tool over the same table: it only takes locks
 * and copies text, so it runs inline on the invocation's actor.
 */
#include "exec_tool.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agents/config/config.h"
#include "io/io.h"

extern char **environ;

enum {
	TOKEN_EXIT = 1,  /* the reader reaped the child */
	TOKEN_YIELD = 2, /* yieldMs passed */
};

#define ARGS_LEAD "Invalid arguments for tool exec: "
#define DEFAULT_PATH "/usr/bin:/bin"
#define PROCESS_HINT "use the process tool (action \"poll\", \"log\" or \"kill\") to follow it"
/* Between exec's own timeout and the invocation's: the kill, its grace and
 * the reader's bounded wait all fit in it. */
#define INVOKE_MARGIN_MS ((uint64_t)60000)
/* Room in a result beyond the output kept: the status line and markers. */
#define TEXT_MARGIN ((size_t)512)

static const char *const default_keep[] = {
	"PATH", "HOME", "LANG", "LC_*", "TERM", "TZ", "USER", "LOGNAME", "SHELL", "TMPDIR",
};

/* Variables the `env` argument may not set: they choose which programs and
 * libraries run, or run code of their own in a shell or an interpreter. */
static const char *const refused_env[] = {
	"PATH", "LD_*", "DYLD_*", "BASH_FUNC_*", "IFS", "BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS",
	"PS4", "PROMPT_COMMAND", "GCONV_PATH", "HOSTALIASES", "LOCPATH", "NLSPATH", "NODE_OPTIONS",
	"NODE_PATH", "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PERL5LIB", "PERL5OPT",
	"PERLLIB", "RUBYLIB", "RUBYOPT", "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "SSLKEYLOGFILE",
};

/* ---- string vectors -------------------------------------------------------- */

/* A growable, NULL-terminated array of malloc'd strings. */
typedef struct strv {
	char **v;
	size_t n;
	size_t cap;
} strv_t;

static void strv_free(strv_t *s)
{
	for (size_t i = 0; i < s->n; i++)
		free(s->v[i]);
	free(s->v);
	*s = (strv_t){0};
}

/* Appends `str` (taken, also on failure). */
static int strv_push(strv_t *s, char *str)
{
	if (!str)
		return PC_ENOMEM;
	if (PC__GROW(s->v, s->cap, s->n + 2, 8)) {
		free(str);
		return PC_ENOMEM;
	}
	s->v[s->n++] = str;
	s->v[s->n] = NULL;
	return 0;
}

static int strv_copy(strv_t *s, const char *const *src, size_t n)
{
	int rc = 0;
	for (size_t i = 0; rc == 0 && i < n; i++)
		rc = src[i] ? strv_push(s, strdup(src[i])) : PC_EINVAL;
	return rc;
}

/* "NAME" against a pattern: exact, or a prefix when it ends in '*'. */
static bool name_matches(const char *pattern, const char *name, size_t nl)
{
	size_t pl = strlen(pattern);
	if (pl && pattern[pl - 1] == '*')
		return nl >= pl - 1 && memcmp(pattern, name, pl - 1) == 0;
	return pl == nl && memcmp(pattern, name, nl) == 0;
}

static bool name_in(const char *const *patterns, size_t n, const char *name, size_t nl)
{
	for (size_t i = 0; i < n; i++)
		if (name_matches(patterns[i], name, nl))
			return true;
	return false;
}

/* ---- the policy ------------------------------------------------------------- */

typedef struct exec_cfg {
	pc_exec_mode_t mode;
	strv_t allow;
	strv_t keep;
	strv_t extra;
	size_t max_output;
	uint32_t default_timeout_s;
	uint32_t max_timeout_s;
	uint64_t grace_ms;
	pc_process_table_t *table;
} exec_cfg_t;

static void cfg_free(void *user)
{
	exec_cfg_t *c = user;
	if (!c)
		return;
	strv_free(&c->allow);
	strv_free(&c->keep);
	strv_free(&c->extra);
	free(c);
}

static int cfg_new(const pc_exec_policy_t *p, pc_process_table_t *table, exec_cfg_t **out)
{
	exec_cfg_t *c = calloc(1, sizeof(*c));
	if (!c)
		return PC_ENOMEM;
	c->mode = p->mode;
	c->max_output = p->max_output ? p->max_output : PC_PROCESS_DEFAULT_OUTPUT;
	c->default_timeout_s = p->default_timeout_s ? p->default_timeout_s : PC_EXEC_DEFAULT_TIMEOUT_S;
	c->max_timeout_s = p->max_timeout_s ? p->max_timeout_s : PC_EXEC_MAX_TIMEOUT_S;
	c->grace_ms = p->kill_grace_ms ? p->kill_grace_ms : PC_PROCESS_DEFAULT_GRACE_MS;
	c->table = table;
	int rc = strv_copy(&c->allow, p->allow, p->allow ? p->n_allow : 0);
	if (rc == 0 && p->env_keep)
		rc = strv_copy(&c->keep, p->env_keep, p->n_env_keep);
	else if (rc == 0)
		rc = strv_copy(&c->keep, default_keep, sizeof(default_keep) / sizeof(default_keep[0]));
	if (rc == 0)
		rc = strv_copy(&c->keep, p->env_keep_also, p->env_keep_also ? p->n_env_keep_also : 0);
	if (rc == 0)
		rc = strv_copy(&c->extra, p->env_extra, p->env_extra ? p->n_env_extra : 0);
	for (size_t i = 0; rc == 0 && i < c->extra.n; i++)
		if (!strchr(c->extra.v[i], '=') || c->extra.v[i][0] == '=')
			rc = PC_EINVAL;
	if (rc != 0) {
		cfg_free(c);
		return rc;
	}
	*out = c;
	return 0;
}

/* ---- arguments -------------------------------------------------------------- */

typedef struct exec_args {
	const char *command;
	const char *workdir; /* NULL: the workspace */
	const cJSON *env;    /* NULL: none */
	uint64_t timeout_ms;
	bool background;
	bool yield;
	uint64_t yield_ms;
} exec_args_t;

/* Reads and checks the arguments; false with `err` set if they are bad. */
static bool parse_args(const exec_cfg_t *cfg, const cJSON *args, exec_args_t *a, char *err, size_t en)
{
	*a = (exec_args_t){0};
	const cJSON *cmd = cJSON_GetObjectItemCaseSensitive(args, "command");
	const cJSON *wd = cJSON_GetObjectItemCaseSensitive(args, "workdir");
	const cJSON *env = cJSON_GetObjectItemCaseSensitive(args, "env");
	const cJSON *to = cJSON_GetObjectItemCaseSensitive(args, "timeout");
	const cJSON *bg = cJSON_GetObjectItemCaseSensitive(args, "background");
	const cJSON *y = cJSON_GetObjectItemCaseSensitive(args, "yieldMs");
	if (!cJSON_IsString(cmd) || cmd->valuestring[strspn(cmd->valuestring, " \t\r\n")] == '\0') {
		snprintf(err, en, ARGS_LEAD "\"command\" must be a non-empty string");
		return false;
	}
	a->command = cmd->valuestring;
	if (wd && !cJSON_IsNull(wd) && !cJSON_IsString(wd)) {
		snprintf(err, en, ARGS_LEAD "\"workdir\" must be a string");
		return false;
	}
	a->workdir = cJSON_IsString(wd) && wd->valuestring[0] ? wd->valuestring : NULL;
	if (env && !cJSON_IsNull(env) && !cJSON_IsObject(env)) {
		snprintf(err, en, ARGS_LEAD "\"env\" must be an object of strings");
		return false;
	}
	a->env = cJSON_IsObject(env) ? env : NULL;
	double secs = cfg->default_timeout_s;
	if (to && !cJSON_IsNull(to)) {
		secs = cJSON_IsNumber(to) ? to->valuedouble : -1;
		if (!isfinite(secs) || secs <= 0 || secs > cfg->max_timeout_s) {
			snprintf(err, en, ARGS_LEAD "\"timeout\" must be a number of seconds above 0 and at most %u",
				 cfg->max_timeout_s);
			return false;
		}
	}
	/* To the nearest ms, and never 0 (which would mean no timeout). */
	a->timeout_ms = (uint64_t)llround(secs * 1000.0);
	a->timeout_ms = a->timeout_ms ? a->timeout_ms : 1;
	if (bg && !cJSON_IsNull(bg) && !cJSON_IsBool(bg)) {
		snprintf(err, en, ARGS_LEAD "\"background\" must be true or false");
		return false;
	}
	a->background = cJSON_IsTrue(bg);
	if (y && !cJSON_IsNull(y)) {
		double v = cJSON_IsNumber(y) ? y->valuedouble : -1;
		if (!isfinite(v) || v < 0 || v != floor(v) || v > (double)a->timeout_ms) {
			snprintf(err, en, ARGS_LEAD "\"yieldMs\" must be an integer from 0 to the timeout in ms (%llu)",
				 (unsigned long long)a->timeout_ms);
			return false;
		}
		a->yield = true;
		a->yield_ms = (uint64_t)v;
	}
	return true;
}

/* ---- what the child gets ------------------------------------------------------- */

typedef struct launch {
	char *path;  /* the program */
	strv_t argv;
	strv_t env;
	char *cwd;
} launch_t;

static void launch_free(launch_t *l)
{
	free(l->path);
	strv_free(&l->argv);
	strv_free(&l->env);
	free(l->cwd);
}

/* Sets NAME=value, replacing an earlier NAME. */
static int env_set(strv_t *e, const char *name, size_t nl, const char *value)
{
	char *kv = NULL;
	if (asprintf(&kv, "%.*s=%s", (int)nl, name, value) < 0)
		return PC_ENOMEM;
	for (size_t i = 0; i < e->n; i++) {
		if (strncmp(e->v[i], kv, nl + 1) == 0) {
			free(e->v[i]);
			e->v[i] = kv;
			return 0;
		}
	}
	return strv_push(e, kv);
}

static bool valid_env_name(const char *s)
{
	if (!*s || (*s >= '0' && *s <= '9'))
		return false;
	for (; *s; s++)
		if (!((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '_'))
			return false;
	return true;
}

/* The parent's kept variables, the `env` argument, the policy's extras.
 * Returns 1 with `err` set when the argument asks for a refused name. */
static int build_env(const exec_cfg_t *cfg, const cJSON *args_env, strv_t *e, char *err, size_t en)
{
	int rc = 0;
	for (char **p = environ; rc == 0 && p && *p; p++) {
		const char *eq = strchr(*p, '=');
		if (eq && name_in((const char *const *)cfg->keep.v, cfg->keep.n, *p, (size_t)(eq - *p)))
			rc = env_set(e, *p, (size_t)(eq - *p), eq + 1);
	}
	const cJSON *item;
	cJSON_ArrayForEach(item, args_env)
	{
		if (rc != 0)
			break;
		const char *k = item->string;
		if (!cJSON_IsString(item) || !valid_env_name(k)) {
			snprintf(err, en, ARGS_LEAD "\"env\" must map variable names ([A-Za-z_][A-Za-z0-9_]*) to strings");
			return 1;
		}
		if (name_in(refused_env, sizeof(refused_env) / sizeof(refused_env[0]), k, strlen(k))) {
			snprintf(err, en,
				 ARGS_LEAD "the environment variable %s may not be set (PATH and variables that change "
					   "how programs are loaded or run are refused)",
				 k);
			return 1;
		}
		rc = env_set(e, k, strlen(k), item->valuestring);
	}
	for (size_t i = 0; rc == 0 && i < cfg->extra.n; i++) {
		const char *kv = cfg->extra.v[i];
		const char *eq = strchr(kv, '=');
		rc = env_set(e, kv, (size_t)(eq - kv), eq + 1);
	}
	/* An empty environment still needs its terminating NULL. */
	if (rc == 0 && !e->v) {
		e->v = calloc(1, sizeof(*e->v));
		e->cap = 1;
		rc = e->v ? 0 : PC_ENOMEM;
	}
	return rc;
}

/* Splits an allowlist command into words, without a shell. Returns 1 with
 * `err` set if it uses what only a shell could do. */
static int split_words(const char *cmd, strv_t *argv, char *err, size_t en)
{
	static const char shell_only[] = ";|&$<>`(){}\\";
	size_t len = strlen(cmd);
	char *word = malloc(len + 1);
	if (!word)
		return PC_ENOMEM;
	size_t wl = 0;
	bool in_word = false;
	char quote = 0;
	int rc = 0;
	for (const char *c = cmd; rc == 0 && *c; c++) {
		if (*c == '\n' || *c == '\r' || strchr(shell_only, *c)) {
			char what[16];
			snprintf(what, sizeof(what), *c == '\n' || *c == '\r' ? "a newline" : "'%c'", *c);
			snprintf(err, en,
				 "exec runs commands without a shell under this policy: %s is not allowed (no "
				 "pipes, redirections, variables, command lists or subshells; run one program)",
				 what);
			rc = 1;
		} else if (quote) {
			if (*c == quote)
				quote = 0;
			else
				word[wl++] = *c;
		} else if (*c == '\'' || *c == '"') {
			quote = *c;
			in_word = true;
		} else if (*c == ' ' || *c == '\t') {
			if (in_word)
				rc = strv_push(argv, strndup(word, wl));
			wl = 0;
			in_word = false;
		} else {
			word[wl++] = *c;
			in_word = true;
		}
	}
	if (rc == 0 && quote) {
		snprintf(err, en, ARGS_LEAD "the command has an unterminated %c quote", quote);
		rc = 1;
	}
	if (rc == 0 && in_word)
		rc = strv_push(argv, strndup(word, wl));
	free(word);
	return rc;
}

/* The value of PATH in the child's environment. */
static const char *env_path(const strv_t *e)
{
	for (size_t i = 0; i < e->n; i++)
		if (strncmp(e->v[i], "PATH=", 5) == 0)
			return e->v[i] + 5;
	return DEFAULT_PATH;
}

/* Looks `name` up in the absolute directories of `path`, as execvp would
 * (relative ones are skipped: they would resolve inside the workspace). */
static char *find_program(const char *name, const char *path)
{
	for (const char *d = path; *d;) {
		size_t dl = strcspn(d, ":");
		if (dl && d[0] == '/') {
			char *full = NULL;
			struct stat st;
			if (asprintf(&full, "%.*s/%s", (int)dl, d, name) < 0)
				return NULL;
			if (stat(full, &st) == 0 && S_ISREG(st.st_mode) && access(full, X_OK) == 0)
				return full;
			free(full);
		}
		d += dl + (d[dl] == ':');
	}
	return NULL;
}

/* argv and program for the policy's mode. Returns 1 with `err` set when
 * the command is refused. */
static int build_argv(const exec_cfg_t *cfg, const char *command, launch_t *l, char *err, size_t en)
{
	if (cfg->mode == PC_EXEC_FULL) {
		int rc = strv_push(&l->argv, strdup("sh"));
		if (rc == 0)
			rc = strv_push(&l->argv, strdup("-c"));
		if (rc == 0)
			rc = strv_push(&l->argv, strdup(command));
		if (rc == 0 && !(l->path = strdup("/bin/sh")))
			rc = PC_ENOMEM;
		return rc;
	}
	int rc = split_words(command, &l->argv, err, en);
	if (rc != 0)
		return rc;
	const char *prog = l->argv.v[0];
	if (strchr(prog, '/')) {
		snprintf(err, en, "exec runs only programs found on PATH under this policy: give a program name, not a "
				  "path (\"%s\")", prog);
		return 1;
	}
	bool allowed = false;
	for (size_t i = 0; i < cfg->allow.n && !allowed; i++)
		allowed = strcmp(cfg->allow.v[i], prog) == 0;
	if (!allowed) {
		snprintf(err, en, "exec: the program \"%s\" is not allowed by the policy", prog);
		return 1;
	}
	l->path = find_program(prog, env_path(&l->env));
	if (!l->path) {
		snprintf(err, en, "exec: the program \"%s\" was not found on PATH", prog);
		return 1;
	}
	return 0;
}

/* The working directory, confined to the workspace. Returns 1 with `err`
 * set when it is missing or outside. */
static int resolve_cwd(const char *workspace, const char *workdir, launch_t *l, char *err, size_t en)
{
	char *root = realpath(workspace, NULL);
	if (!root) {
		snprintf(err, en, "exec: the workspace %s cannot be used (%s)", workspace, strerror(errno));
		return 1;
	}
	if (!workdir) {
		l->cwd = root;
		return 0;
	}
	char *joined = NULL;
	int rc = 1;
	int r = workdir[0] == '/' ? ((joined = strdup(workdir)) ? 0 : -1) : asprintf(&joined, "%s/%s", root, workdir);
	if (r < 0) {
		joined = NULL;
		rc = PC_ENOMEM;
		goto out;
	}
	l->cwd = realpath(joined, NULL);
	size_t rl = strlen(root);
	struct stat st;
	if (!l->cwd && errno == ENOENT)
		snprintf(err, en, ARGS_LEAD "workdir \"%s\" does not exist", workdir);
	else if (!l->cwd)
		snprintf(err, en, ARGS_LEAD "workdir \"%s\" cannot be used (%s)", workdir, strerror(errno));
	else if (rl > 1 && (strncmp(l->cwd, root, rl) != 0 || (l->cwd[rl] != '\0' && l->cwd[rl] != '/')))
		snprintf(err, en, ARGS_LEAD "workdir \"%s\" is outside the workspace", workdir);
	else if (stat(l->cwd, &st) != 0 || !S_ISDIR(st.st_mode))
		snprintf(err, en, ARGS_LEAD "workdir \"%s\" is not a directory", workdir);
	else
		rc = 0;
out:
	free(joined);
	free(root);
	return rc;
}

static int prepare(const exec_cfg_t *cfg, const exec_args_t *a, const char *workspace, launch_t *l, char *err,
		   size_t en)
{
	int rc = resolve_cwd(workspace, a->workdir, l, err, en);
	if (rc == 0)
		rc = build_env(cfg, a->env, &l->env, err, en);
	if (rc == 0)
		rc = build_argv(cfg, a->command, l, err, en);
	return rc;
}

/* ---- results ------------------------------------------------------------------ */

static int complete_fmt(pc_tool_task_t *t, bool is_error, const char *f, ...) __attribute__((format(printf, 3, 4)));
static int complete_fmt(pc_tool_task_t *t, bool is_error, const char *f, ...)
{
	va_list ap;
	va_start(ap, f);
	pc_tool_output_t out = {.is_error = is_error};
	if (vasprintf(&out.text, f, ap) < 0)
		out.text = NULL;
	va_end(ap);
	if (!out.text)
		return PC_ENOMEM;
	return pc_tool_task_complete(t, &out);
}

/* "<status>\n<output>" (no newline when there is no output). */
static char *status_and_output(const char *status, const char *output)
{
	char *text = NULL;
	if (asprintf(&text, "%s%s%s", status, *output ? "\n" : "", output) < 0)
		return NULL;
	return text;
}

/* The result of a process that has ended. */
static int final_result(pc_process_t *p, pc_tool_output_t *out)
{
	pc_process_info_t info;
	char status[64];
	char *body = NULL;
	pc_process_info(p, &info);
	pc_process_status_text(&info, status, sizeof(status));
	int rc = pc_process_output(p, 0, 0, &body);
	if (rc != 0)
		return rc;
	out->text = status_and_output(status, body);
	out->is_error = !(info.state == PC_PROCESS_EXITED && info.code == 0);
	free(body);
	return out->text ? 0 : PC_ENOMEM;
}

/* The result of a process left to run in the background after yieldMs,
 * with the output so far (which later polls do not repeat). */
static int yield_result(pc_process_t *p, uint64_t yield_ms, pc_tool_output_t *out)
{
	pc_process_info_t info;
	char *body = NULL;
	pc_process_info(p, &info);
	int rc = pc_process_poll(p, &body);
	if (rc != 0)
		return rc;
	if (asprintf(&out->text,
		     "still running after %llu ms; it goes on in the background as process %s: " PROCESS_HINT "%s%s",
		     (unsigned long long)yield_ms, info.id, *body ? "\n" : "", body) < 0)
		out->text = NULL;
	free(body);
	return out->text ? 0 : PC_ENOMEM;
}

/* ---- the exec task ---------------------------------------------------------------- */

typedef struct exec_task {
	pc_process_t *proc;
	uint64_t yield_ms;
} exec_task_t;

static void task_end(pc_tool_task_t *t, exec_task_t *x, bool forget)
{
	if (forget)
		pc_process_forget(x->proc);
	pc_process_release(x->proc);
	free(x);
	pc_tool_task_set_data(t, NULL);
}

static int spawn_failed(pc_tool_task_t *t, int rc)
{
	if (rc == PC_ELIMIT)
		return complete_fmt(t, true,
				    "exec: too many processes are running; wait for one to end or stop one with the "
				    "process tool (action \"kill\")");
	if (rc == PC_ESYS)
		return complete_fmt(t, true, "exec: the command could not be started (%s)", strerror(errno));
	return rc;
}

static int launch(pc_tool_task_t *t, const exec_cfg_t *cfg, const exec_args_t *a, const launch_t *l,
		  const char *session_key)
{
	pc_actor_t *waker = NULL;
	int rc = pc_tool_task_waker(t, &waker);
	if (rc != 0)
		return rc;
	pc_process_spawn_t req = {
		.path = l->path,
		.argv = l->argv.v,
		.envp = l->env.v,
		.cwd = l->cwd,
		.command = a->command,
		.session_key = session_key,
		.max_output = cfg->max_output,
		.timeout_ms = a->timeout_ms,
		.kill_grace_ms = cfg->grace_ms,
		.notify = a->background ? NULL : waker,
		.token = TOKEN_EXIT,
	};
	pc_process_t *p = NULL;
	rc = pc_process_spawn(cfg->table, pc_actor_runtime(waker), &req, &p);
	int spawn_errno = errno;
	pc_actor_release(waker);
	if (rc != 0) {
		errno = spawn_errno;
		return spawn_failed(t, rc);
	}
	if (a->background) {
		pc_process_info_t info;
		pc_process_detach(p);
		pc_process_info(p, &info);
		pc_process_release(p);
		return complete_fmt(t, false, "started in the background as process %s: " PROCESS_HINT, info.id);
	}
	exec_task_t *x = malloc(sizeof(*x));
	if (!x) {
		pc_process_kill(p);
		pc_process_forget(p);
		pc_process_release(p);
		return PC_ENOMEM;
	}
	*x = (exec_task_t){p, a->yield_ms};
	pc_tool_task_set_data(t, x);
	/* A failure here fails `start`, and exec_cancel kills the process. */
	return a->yield ? pc_tool_task_after(t, a->yield_ms, TOKEN_YIELD) : 0;
}

static int exec_start(void *user, pc_tool_task_t *t, const cJSON *args, const pc_tool_env_t *env)
{
	const exec_cfg_t *cfg = user;
	char err[512] = "";
	exec_args_t a;
	if (cfg->mode == PC_EXEC_OFF)
		return complete_fmt(t, true, "exec is disabled by policy");
	if (!parse_args(cfg, args, &a, err, sizeof(err)))
		return complete_fmt(t, true, "%s", err);
	if (!env->workspace || !env->workspace[0])
		return complete_fmt(t, true, "exec: no workspace to run the command in");
	launch_t l = {0};
	int rc = prepare(cfg, &a, env->workspace, &l, err, sizeof(err));
	if (rc == 1)
		rc = complete_fmt(t, true, "%s", err);
	else if (rc == 0)
		rc = launch(t, cfg, &a, &l, env->session_key);
	launch_free(&l);
	return rc;
}

static int exec_timer(void *user, pc_tool_task_t *t, uint64_t token)
{
	(void)user;
	exec_task_t *x = pc_tool_task_data(t);
	if (!x)
		return 0;
	pc_process_info_t info;
	pc_process_info(x->proc, &info);
	bool ended = info.state != PC_PROCESS_RUNNING;
	bool detached = !ended && token == TOKEN_YIELD && pc_process_detach(x->proc);
	/* Neither: it ended between the two looks (its TOKEN_EXIT follows), or
	 * the wake was not ours to act on. */
	if (!ended && !detached)
		return 0;
	pc_tool_output_t out = {0};
	int rc = detached ? yield_result(x->proc, x->yield_ms, &out) : final_result(x->proc, &out);
	if (rc != 0)
		return rc; /* the invocation fails; exec_cancel then cleans up */
	task_end(t, x, !detached);
	return pc_tool_task_complete(t, &out);
}

static void exec_cancel(void *user, pc_tool_task_t *t)
{
	(void)user;
	exec_task_t *x = pc_tool_task_data(t);
	if (!x)
		return;
	pc_process_kill(x->proc); /* PC_ESTATE: it has ended already */
	task_end(t, x, true);
}

/* ---- the process tool ------------------------------------------------------------ */

static int list_text(pc_process_table_t *table, pc_tool_output_t *out)
{
	pc_process_info_t *v = NULL;
	size_t n = 0;
	int rc = pc_process_list(table, &v, &n);
	if (rc != 0)
		return rc;
	size_t cap = 32 + n * (sizeof(v->id) + 64 + sizeof(v->command) + 4);
	out->text = malloc(cap);
	size_t len = 0;
	if (out->text && n == 0)
		snprintf(out->text, cap, "no processes");
	for (size_t i = 0; out->text && i < n; i++) {
		char status[64];
		pc_process_status_text(&v[i], status, sizeof(status));
		len += (size_t)snprintf(out->text + len, cap - len, "%s%s %s: %s", i ? "\n" : "", v[i].id, status,
					v[i].command);
	}
	free(v);
	return out->text ? 0 : PC_ENOMEM;
}

/* A non-negative integer argument, or `def` when absent. */
static bool count_arg(const cJSON *args, const char *key, size_t def, size_t *out)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(args, key);
	*out = def;
	if (!v || cJSON_IsNull(v))
		return true;
	if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < 0 ||
	    v->valuedouble != floor(v->valuedouble) || v->valuedouble > 1e9)
		return false;
	*out = (size_t)v->valuedouble;
	return true;
}

static int poll_text(pc_process_t *p, const char *head, pc_tool_output_t *out)
{
	char *body = NULL;
	int rc = pc_process_poll(p, &body);
	if (rc != 0)
		return rc;
	out->text = status_and_output(head, *body ? body : "(no new output)");
	free(body);
	return out->text ? 0 : PC_ENOMEM;
}

static int log_text(pc_process_t *p, const cJSON *args, const pc_process_info_t *info, const char *head,
		    pc_tool_output_t *out)
{
	size_t offset, limit;
	if (!count_arg(args, "offset", 0, &offset) || !count_arg(args, "limit", 0, &limit)) {
		out->is_error = true;
		out->text = strdup("Invalid arguments for tool process: \"offset\" and \"limit\" must be "
				   "non-negative integers (lines)");
		return out->text ? 0 : PC_ENOMEM;
	}
	char *body = NULL;
	int rc = pc_process_output(p, offset, limit, &body);
	if (rc != 0)
		return rc;
	if (asprintf(&out->text, "%s; %llu bytes of output%s%s", head, (unsigned long long)info->total_bytes,
		     *body ? "\n" : "", body) < 0)
		out->text = NULL;
	free(body);
	return out->text ? 0 : PC_ENOMEM;
}

static int kill_text(pc_process_t *p, const char *head, const pc_process_info_t *info, pc_tool_output_t *out)
{
	if (pc_process_kill(p) != 0)
		return (out->text = strdup(head)) ? 0 : PC_ENOMEM; /* it had ended: say how */
	if (asprintf(&out->text, "%s: stopping it (SIGTERM to its process group, SIGKILL if it is still running "
				 "after the grace or at the next kill)", info->id) < 0)
		out->text = NULL;
	return out->text ? 0 : PC_ENOMEM;
}

#define PROCESS_USAGE                                                                              \
	"Invalid arguments for tool process: expected {\"action\": \"list\"} or {\"action\": "     \
	"\"poll\" | \"log\" | \"kill\", \"id\": \"p1\"}"

static int process_call(void *user, const cJSON *args, const pc_tool_env_t *env, pc_tool_output_t *out)
{
	(void)env;
	pc_process_table_t *table = user;
	const cJSON *action = cJSON_GetObjectItemCaseSensitive(args, "action");
	const cJSON *id = cJSON_GetObjectItemCaseSensitive(args, "id");
	const char *act = cJSON_IsString(action) ? action->valuestring : "";
	if (strcmp(act, "list") == 0)
		return list_text(table, out);
	bool known = strcmp(act, "poll") == 0 || strcmp(act, "log") == 0 || strcmp(act, "kill") == 0;
	out->is_error = true;
	if (!known || !cJSON_IsString(id))
		return (out->text = strdup(PROCESS_USAGE)) ? 0 : PC_ENOMEM;
	pc_process_t *p = NULL;
	if (pc_process_find(table, id->valuestring, &p) != 0) {
		if (asprintf(&out->text, "no process %s (action \"list\" shows them)", id->valuestring) < 0)
			out->text = NULL;
		return out->text ? 0 : PC_ENOMEM;
	}
	out->is_error = false;
	pc_process_info_t info;
	char status[64], head[sizeof(info.id) + sizeof(status) + 2];
	pc_process_info(p, &info);
	pc_process_status_text(&info, status, sizeof(status));
	snprintf(head, sizeof(head), "%s %s", info.id, status);
	int rc = act[0] == 'p'   ? poll_text(p, head, out)
		 : act[0] == 'l' ? log_text(p, args, &info, head, out)
				 : kill_text(p, head, &info, out);
	pc_process_release(p);
	return rc;
}

/* ---- registration --------------------------------------------------------------- */

#define EXEC_SCHEMA                                                                                          \
	"{\"type\":\"object\",\"properties\":{"                                                              \
	"\"command\":{\"type\":\"string\",\"description\":\"The command to run.\"},"                         \
	"\"workdir\":{\"type\":\"string\",\"description\":\"Directory to run in, inside the workspace "      \
	"(default: the workspace).\"},"                                                                      \
	"\"env\":{\"type\":\"object\",\"additionalProperties\":{\"type\":\"string\"},\"description\":"      \
	"\"Extra environment variables (PATH, LD_* and the like are refused).\"},"                          \
	"\"timeout\":{\"type\":\"number\",\"exclusiveMinimum\":0,\"description\":\"Seconds before the "      \
	"command is killed.\"},"                                                                             \
	"\"background\":{\"type\":\"boolean\",\"description\":\"Start it in the background and return a "   \
	"process id at once.\"},"                                                                            \
	"\"yieldMs\":{\"type\":\"integer\",\"minimum\":0,\"description\":\"If still running after this "     \
	"many milliseconds, leave it in the background and return a process id.\"}},"                      \
	"\"required\":[\"command\"],\"additionalProperties\":false}"

#define PROCESS_SCHEMA                                                                                       \
	"{\"type\":\"object\",\"properties\":{"                                                              \
	"\"action\":{\"type\":\"string\",\"enum\":[\"list\",\"poll\",\"log\",\"kill\"]},"                    \
	"\"id\":{\"type\":\"string\",\"description\":\"The process id exec returned, e.g. p1.\"},"           \
	"\"offset\":{\"type\":\"integer\",\"minimum\":0,\"description\":\"log: the first line to show.\"},"  \
	"\"limit\":{\"type\":\"integer\",\"minimum\":0,\"description\":\"log: how many lines.\"}},"          \
	"\"required\":[\"action\"],\"additionalProperties\":false}"

/* The description tells the model what the policy lets it do. */
static char *exec_description(const exec_cfg_t *c)
{
	if (c->mode == PC_EXEC_OFF)
		return strdup("Runs commands; disabled by policy here: every command is refused.");
	char *allowed = NULL;
	size_t al = 1;
	for (size_t i = 0; i < c->allow.n; i++)
		al += strlen(c->allow.v[i]) + 2;
	if (!(allowed = malloc(al)))
		return NULL;
	allowed[0] = '\0';
	for (size_t i = 0; i < c->allow.n; i++) {
		if (i)
			strcat(allowed, ", ");
		strcat(allowed, c->allow.v[i]);
	}
	char *d = NULL;
	int r = asprintf(&d,
			 "%s%s%s in the workspace and returns its exit status and output (stdout and stderr "
			 "together; the last %zu bytes). timeout is in seconds (default %u, at most %u). For long "
			 "commands set background, or yieldMs to go on in the background after that many "
			 "milliseconds; then use the process tool.",
			 c->mode == PC_EXEC_FULL ? "Runs a shell command (/bin/sh -c)"
						 : "Runs one program, without a shell (no pipes, redirections, "
						   "variables or command lists), from: ",
			 c->mode == PC_EXEC_FULL ? "" : allowed, c->mode == PC_EXEC_FULL ? "" : ",", c->max_output,
			 c->default_timeout_s, c->max_timeout_s);
	free(allowed);
	return r < 0 ? NULL : d;
}

int pc_tool_register_exec(pc_tool_registry_t *r, const pc_exec_policy_t *policy, pc_process_table_t *table)
{
	if (!r || !policy || !table || (policy->mode != PC_EXEC_OFF && policy->mode != PC_EXEC_ALLOWLIST &&
					policy->mode != PC_EXEC_FULL))
		return PC_EINVAL;
	/* The program is all allowlist confines: one that runs others would
	 * open it to every command (exec_launchers.h). */
	for (size_t i = 0; policy->allow && i < policy->n_allow; i++)
		if (pc_exec_is_launcher(policy->allow[i]))
			return PC_EINVAL;
	exec_cfg_t *cfg = NULL;
	int rc = cfg_new(policy, table, &cfg);
	if (rc != 0)
		return rc;
	if (cfg->default_timeout_s > cfg->max_timeout_s) {
		cfg_free(cfg);
		return PC_EINVAL;
	}
	char *desc = exec_description(cfg);
	pc_tool_def_t exec_def = {
		.name = "exec",
		.description = desc,
		.parameters = EXEC_SCHEMA,
		.mutating = true,
		.timeout_ms = (uint64_t)cfg->max_timeout_s * 1000u + cfg->grace_ms + INVOKE_MARGIN_MS,
		.max_output = cfg->max_output + TEXT_MARGIN,
		.start = exec_start,
		.on_timer = exec_timer,
		.on_cancel = exec_cancel,
		.user = cfg,
		.free_user = cfg_free,
	};
	rc = desc ? pc_tool_register(r, &exec_def) : PC_ENOMEM;
	free(desc);
	if (rc != 0) {
		cfg_free(cfg);
		return rc;
	}
	pc_tool_def_t process_def = {
		.name = "process",
		.description = "Follows commands that exec left running in the background: list them, poll one "
			       "(its status and the output since the last poll), read its log (the output kept, "
			       "or lines offset..offset+limit of it), or kill it (its whole process group).",
		.parameters = PROCESS_SCHEMA,
		.parallel_safe = true,
		.mutating = true,
		.max_output = cfg->max_output + TEXT_MARGIN,
		.call = process_call,
		.user = table,
	};
	return pc_tool_register(r, &process_def);
}
