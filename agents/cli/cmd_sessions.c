/*
 * `pincer sessions list|show`: a running gateway's sessions
 * (`sessions.list`) and one session's transcript (`chat.history`, from
 * the store). docs/gateway.md describes both methods; --json prints their
 * answers as they come.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "commands.h"
#include "rpc_client.h"

#define CMD "pincer sessions"
#define ANSWER_MS 30000
#define LIST_MAX 10000   /* what the command follows pages for */
#define PAGE_MAX 1000    /* sessions.list's page (and its default) */
#define HISTORY_MAX 1000 /* chat.history's */

static void usage(FILE *f)
{
	fprintf(f, "usage: pincer sessions list [--limit N] [--json] [gateway options]\n"
		   "       pincer sessions show KEY [--limit N] [--json] [gateway options]\n\n"
		   "  list                   the gateway's sessions, most recent first\n"
		   "  show KEY               the session's transcript, oldest message first (KEY\n"
		   "                         may also come from --session or PINCER_SESSION)\n"
		   "  --limit N              at most N sessions (0..10000, default 1000; 0: those\n"
		   "                         in memory) / the last N messages (1..1000, default\n"
		   "                         200) (env PINCER_LIMIT)\n"
		   "  --json                 the gateway's answer as one JSON line (env PINCER_JSON)\n\n"
		   "gateway options:\n");
	pc_cli_gw_usage(f);
}

typedef struct opts {
	const char *action, *key, *limit;
	bool json;
	pc_cli_gw_flags_t gw;
} opts_t;

/* 0 to go on, -1 after --help, else the exit status of a usage error. */
static int parse_flags(int argc, char **argv, opts_t *o)
{
	static const struct option longs[] = {
		{"limit", required_argument, NULL, 'n'}, {"session", required_argument, NULL, 's'},
		{"json", no_argument, NULL, 'j'},        {"help", no_argument, NULL, 'h'},
		PC_CLI_GW_LONG_OPTIONS,                  {NULL, 0, NULL, 0},
	};
	optind = 1;
	int c;
	while ((c = getopt_long(argc, argv, "h", longs, NULL)) != -1) {
		switch (c) {
		case 'n': o->limit = optarg; break;
		case 's': o->key = optarg; break;
		case 'j': o->json = true; break;
		case 'h': usage(stdout); return -1;
		default:
			if (!pc_cli_gw_flag_or_usage(&o->gw, c, argc, argv, longs, usage))
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
	bool show = o->action && !strcmp(o->action, "show");
	if (show && optind < argc)
		o->key = argv[optind++];
	const char *extra = optind < argc ? argv[optind] : NULL;
	if (!o->action || (!show && strcmp(o->action, "list") != 0) || extra) {
		if (o->action)
			fprintf(stderr, CMD ": %s '%s'\n\n", extra ? "unexpected argument" : "unknown action",
				extra ? extra : o->action);
		usage(stderr);
		return PC_CLI_USAGE;
	}
	if (!o->key)
		o->key = pc_cli_env("PINCER_SESSION");
	if (!o->limit)
		o->limit = pc_cli_env("PINCER_LIMIT");
	if (show && !o->key) {
		fprintf(stderr, CMD ": show needs a session key\n\n");
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

static double jnum(const cJSON *o, const char *k)
{
	return cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(o, k));
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

static void print_list(const cJSON *p)
{
	const cJSON *list = cJSON_GetObjectItemCaseSensitive(p, "sessions"), *s;
	if (cJSON_GetArraySize(list) == 0) {
		printf("no sessions\n");
		return;
	}
	printf("%-24s %5s  %-21s %s\n", "KEY", "RUNS", "UPDATED", "LAST RUN");
	cJSON_ArrayForEach(s, list) {
		const char *active = jstr(s, "activeRunId");
		printf("%-24s %5.0f  ", jstr(s, "key"), jnum(s, "runs"));
		print_time(jnum(s, "updatedAt"));
		printf(" %s%s\n", jstr(s, "lastRunId"), active[0] ? " (running)" : "");
	}
}

/* One content block: text as it is, anything else as [its type]. */
static void print_block(const cJSON *b)
{
	const char *type = jstr(b, "type");
	if (!strcmp(type, "text")) {
		fputs(jstr(b, "text"), stdout);
	} else if (!strcmp(type, "toolCall")) {
		const cJSON *args = cJSON_GetObjectItemCaseSensitive(b, "arguments");
		char *a = args ? cJSON_PrintUnformatted(args) : NULL;
		printf("[tool call %s %s]", jstr(b, "name"), a ? a : "");
		cJSON_free(a);
	} else if (strcmp(type, "thinking") != 0) {
		printf("[%s]", type[0] ? type : "?");
	}
}

static void print_history(const cJSON *p)
{
	const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(p, "messages"), *m;
	if (cJSON_GetArraySize(msgs) == 0) {
		printf("no messages in session %s\n", jstr(p, "sessionKey"));
		return;
	}
	cJSON_ArrayForEach(m, msgs) {
		const char *role = jstr(m, "role"), *tool = jstr(m, "toolName");
		const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content"), *b;
		const cJSON *blocks = cJSON_IsArray(content) ? content : NULL;
		printf("%s%s%s: ", role[0] ? role : "?", tool[0] ? " " : "", tool);
		if (cJSON_IsString(content))
			fputs(content->valuestring, stdout);
		cJSON_ArrayForEach(b, blocks)
			print_block(b);
		fputc('\n', stdout);
	}
}

/* ---- the call ---- */

/* The request's params; `limit` and `cursor` only when given (0 / NULL:
 * absent). NULL when out of memory. */
static cJSON *params(const char *key, uint64_t limit, bool has_limit, const char *cursor)
{
	cJSON *p = cJSON_CreateObject();
	bool ok = p && (!has_limit || cJSON_AddNumberToObject(p, "limit", (double)limit)) &&
		  (!key || cJSON_AddStringToObject(p, "sessionKey", key)) &&
		  (!cursor || cJSON_AddStringToObject(p, "cursor", cursor));
	if (!ok) {
		cJSON_Delete(p);
		return NULL;
	}
	return p;
}

/* Adds `page`'s sessions to `all` (both answers that are ok), counts them
 * and takes its nextCursor, or drops it when there is none. */
static bool merge_page(cJSON *all, cJSON *page)
{
	cJSON *to = cJSON_GetObjectItemCaseSensitive(all, "payload");
	cJSON *from = cJSON_GetObjectItemCaseSensitive(page, "payload");
	cJSON *list = cJSON_GetObjectItemCaseSensitive(to, "sessions");
	cJSON *more = cJSON_GetObjectItemCaseSensitive(from, "sessions");
	if (!cJSON_IsArray(list) || !cJSON_IsArray(more))
		return false;
	while (more->child)
		cJSON_AddItemToArray(list, cJSON_DetachItemViaPointer(more, more->child));
	cJSON_ReplaceItemInObjectCaseSensitive(to, "count", cJSON_CreateNumber(cJSON_GetArraySize(list)));
	cJSON_DeleteItemFromObjectCaseSensitive(to, "nextCursor");
	cJSON *next = cJSON_DetachItemFromObjectCaseSensitive(from, "nextCursor");
	if (next)
		cJSON_AddItemToObject(to, "nextCursor", next);
	return true;
}

static bool answer_ok(const cJSON *res)
{
	return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(res, "ok")) &&
	       cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(res, "payload"));
}

static cJSON *payload_item(const cJSON *res, const char *k)
{
	return cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(res, "payload"), k);
}

/* sessions.list a page at a time until `limit` sessions or the last page:
 * one answer holding them all (and the cursor of what follows, if any). A
 * failed page is the answer. */
static int list_pages(pc_cli_rpc_t *c, uint64_t limit, cJSON **res)
{
	*res = NULL;
	const char *cursor = NULL;
	for (;;) {
		uint64_t got = (uint64_t)cJSON_GetArraySize(payload_item(*res, "sessions"));
		cJSON *p = params(NULL, limit - got < PAGE_MAX ? limit - got : PAGE_MAX, true, cursor);
		cJSON *page = NULL;
		int rc = p ? pc_cli_rpc_call(c, "sessions.list", p, ANSWER_MS, &page) : PC_ENOMEM;
		if (rc != 0 || !answer_ok(page)) {
			cJSON_Delete(*res);
			*res = page;
			return rc;
		}
		if (!*res) {
			*res = page;
		} else {
			bool merged = merge_page(*res, page);
			cJSON_Delete(page);
			if (!merged)
				return PC_EINVAL;
		}
		cursor = cJSON_GetStringValue(payload_item(*res, "nextCursor"));
		if (!cursor || (uint64_t)cJSON_GetArraySize(payload_item(*res, "sessions")) >= limit)
			return 0;
	}
}

static int answer(const cJSON *res, bool show, bool json)
{
	const cJSON *p = pc_cli_rpc_payload(CMD, res);
	if (!p)
		return PC_CLI_FAIL;
	if (!json) {
		if (show)
			print_history(p);
		else
			print_list(p);
		return PC_CLI_OK;
	}
	return pc_cli_print_json(CMD, p);
}

int pc_cmd_sessions(int argc, char **argv)
{
	opts_t o = {0};
	int status = parse(argc, argv, &o);
	if (status)
		return status < 0 ? PC_CLI_OK : status;
	bool show = !strcmp(o.action, "show");
	uint64_t limit = show ? 0 : PAGE_MAX;
	if (o.limit)
		status = pc_cli_uint(CMD, "--limit", o.limit, show ? 1 : 0, show ? HISTORY_MAX : LIST_MAX, &limit);
	if (status)
		return status;
	static const char *const scopes[] = {"operator.read", NULL};
	pc_cli_rpc_t *c = NULL;
	status = pc_cli_gw_connect(CMD, &o.gw, scopes, false, &c);
	if (status)
		return status;
	cJSON *res = NULL;
	char why[400];
	int rc;
	if (show) {
		cJSON *p = params(o.key, limit, o.limit != NULL, NULL);
		rc = p ? pc_cli_rpc_call(c, "chat.history", p, ANSWER_MS, &res) : PC_ENOMEM;
	} else {
		rc = list_pages(c, limit, &res);
	}
	if (rc != 0) {
		fprintf(stderr, CMD ": %s\n", pc_cli_rpc_strerror(c, rc, why, sizeof(why)));
		status = PC_CLI_FAIL;
	} else {
		status = answer(res, show, o.json);
	}
	cJSON_Delete(res);
	pc_cli_rpc_free(c);
	status = pc_cli_flush_stdout(CMD, status);
	return status;
}
