/*
 * The `pincer` command: `pincer <command> [options]`. Each command is one
 * entry in the table below, run with its own argv (argv[0] is
 * "pincer <command>", the prefix of its messages and getopt's) and
 * returning the process exit status: 0 success,
 * 1 failure, 2 bad usage. Also here: the option helpers the commands
 * share (commands.h).
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <strings.h>

#include <cjson/cJSON.h>

#include "runtime/error.h"
#include "commands.h"

typedef struct command {
	const char *name;
	int (*run)(int argc, char **argv);
	const char *summary;
} command_t;

static const command_t commands[] = {
	{"agent", pc_cmd_agent, "run one agent turn through the gateway (--local: in-process)"},
	{"config", pc_cmd_config, "validate or print the configuration"},
	{"devices", pc_cmd_devices, "list, approve or reject a gateway's device pairing requests"},
	{"gateway", pc_cmd_gateway, "serve the WebSocket RPC, the OpenAI API, probes and metrics"},
	{"health", pc_cmd_health, "ask a running gateway how it is"},
	{"load", pc_cmd_load, "load-test a gateway or an OpenAI-compatible endpoint"},
	{"mock-llm", pc_cmd_mock_llm, "serve a scripted OpenAI- and Anthropic-compatible LLM API"},
	{"sessions", pc_cmd_sessions, "list a gateway's sessions, or show one's transcript"},
	{"version", pc_cmd_version, "print the version"},
};
#define COMMAND_COUNT (sizeof(commands) / sizeof(commands[0]))

static void usage(FILE *f)
{
	fprintf(f, "usage: pincer <command> [options]\n"
		   "       pincer help [command] | --help | --version\n\ncommands:\n");
	for (size_t i = 0; i < COMMAND_COUNT; i++)
		fprintf(f, "  %-12s %s\n", commands[i].name, commands[i].summary);
	fprintf(f, "\n`pincer <command> --help` describes a command's options; each also reads\n"
		   "PINCER_… environment variables (docs/cli.md). Exit status: 0 ok, 1 failure,\n"
		   "2 bad usage.\n");
}

static const command_t *find(const char *name)
{
	for (size_t i = 0; i < COMMAND_COUNT; i++)
		if (!strcmp(name, commands[i].name))
			return &commands[i];
	return NULL;
}

/* Edit distance between a and b counting insertions, deletions,
 * substitutions and swaps of neighbours (the usual typos) as one edit
 * each; both at most 63 bytes, longer ones count as far apart. */
static size_t distance(const char *a, size_t na, const char *b, size_t nb)
{
	unsigned char d[64][64];
	if (na >= 64 || nb >= 64)
		return SIZE_MAX;
	for (size_t i = 0; i <= na; i++)
		d[i][0] = (unsigned char)i;
	for (size_t j = 0; j <= nb; j++)
		d[0][j] = (unsigned char)j;
	for (size_t i = 1; i <= na; i++) {
		for (size_t j = 1; j <= nb; j++) {
			unsigned best = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
			if (d[i - 1][j] + 1u < best)
				best = d[i - 1][j] + 1u;
			if (d[i][j - 1] + 1u < best)
				best = d[i][j - 1] + 1u;
			if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1u < best)
				best = d[i - 2][j - 2] + 1u;
			d[i][j] = (unsigned char)best;
		}
	}
	return d[na][nb];
}

/* Typos worth a guess: at most 2 edits, and fewer than half the word. */
static bool close_enough(size_t d, size_t len)
{
	return d <= 2 && d * 2 < len;
}

/* The command nearest to a mistyped `name`, or NULL. */
static const command_t *nearest(const char *name)
{
	const command_t *best = NULL;
	size_t best_d = SIZE_MAX, n = strlen(name);
	for (size_t i = 0; i < COMMAND_COUNT; i++) {
		size_t d = distance(name, n, commands[i].name, strlen(commands[i].name));
		if (d < best_d) {
			best_d = d;
			best = &commands[i];
		}
	}
	return best && close_enough(best_d, n) ? best : NULL;
}

/* Runs command `c` with argv[0] replaced by "pincer <name>", so getopt's
 * own complaints carry the same prefix as the command's. */
static int run(const command_t *c, int argc, char **argv)
{
	char prog[32];
	snprintf(prog, sizeof(prog), "pincer %s", c->name);
	argv[0] = prog;
	return c->run(argc, argv);
}

static int unknown_command(const char *who, const char *name)
{
	const command_t *guess = nearest(name);
	fprintf(stderr, "%s: unknown command '%s'", who, name);
	if (guess)
		fprintf(stderr, "; did you mean '%s'?", guess->name);
	fprintf(stderr, "\n\n");
	usage(stderr);
	return PC_CLI_USAGE;
}

/* `pincer help [command]`: the command's own --help. */
static int help(int argc, char **argv)
{
	if (argc < 3) {
		usage(stdout);
		return PC_CLI_OK;
	}
	const command_t *c = find(argv[2]);
	if (!c)
		return unknown_command("pincer help", argv[2]);
	if (argc > 3) {
		fprintf(stderr, "pincer help: unexpected argument '%s'\n\n", argv[3]);
		usage(stderr);
		return PC_CLI_USAGE;
	}
	char *args[] = {argv[2], "--help", NULL};
	return run(c, 2, args);
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return PC_CLI_USAGE;
	}
	const char *cmd = argv[1];
	if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
		usage(stdout);
		return PC_CLI_OK;
	}
	if (!strcmp(cmd, "help"))
		return help(argc, argv);
	if (!strcmp(cmd, "--version") || !strcmp(cmd, "-V"))
		return pc_cmd_version(argc - 1, argv + 1);
	const command_t *c = find(cmd);
	if (c)
		return run(c, argc - 1, argv + 1);
	return unknown_command("pincer", cmd);
}

/* ---- what the commands share ---- */

const char *pc_cli_env(const char *name)
{
	const char *v = getenv(name);
	return v && *v ? v : NULL;
}

int pc_cli_env_flag(const char *cmd, const char *name, bool *out)
{
	static const char *const yes[] = {"1", "true", "yes", "on"}, *const no[] = {"0", "false", "no", "off"};
	const char *v = pc_cli_env(name);
	if (!v)
		return 0;
	for (size_t i = 0; i < 4; i++) {
		if (!strcasecmp(v, yes[i]) || !strcasecmp(v, no[i])) {
			*out = !strcasecmp(v, yes[i]);
			return 0;
		}
	}
	fprintf(stderr, "%s: %s must be 1 or 0 (true/false, yes/no, on/off), not '%s'\n", cmd, name, v);
	return PC_CLI_USAGE;
}

int pc_cli_uint(const char *cmd, const char *what, const char *text, uint64_t min, uint64_t max, uint64_t *out)
{
	char *end = NULL;
	errno = 0;
	unsigned long long v = strtoull(text, &end, 10);
	if (errno || !*text || *end || *text == '-' || *text == '+' || v < min || v > max) {
		fprintf(stderr, "%s: %s takes %llu..%llu, not '%s'\n", cmd, what, (unsigned long long)min,
			(unsigned long long)max, text);
		return PC_CLI_USAGE;
	}
	*out = v;
	return 0;
}

int pc_cli_flush_stdout(const char *cmd, int status)
{
	if (fflush(stdout) != 0 && status == PC_CLI_OK) {
		fprintf(stderr, "%s: stdout: %s\n", cmd, strerror(errno));
		return PC_CLI_FAIL;
	}
	return status;
}

void pc_cli_suggest_option(int argc, char **argv, const struct option *longs)
{
	/* getopt_long has just stepped past the word it refused */
	if (optind < 1 || optind > argc || strncmp(argv[optind - 1], "--", 2) != 0)
		return;
	const char *word = argv[optind - 1] + 2;
	size_t n = strcspn(word, "="), best_d = SIZE_MAX;
	const char *best = NULL;
	for (const struct option *o = longs; o->name; o++) {
		size_t d = distance(word, n, o->name, strlen(o->name));
		if (d == 0)
			return; /* a known option that lacked its value */
		if (d < best_d) {
			best_d = d;
			best = o->name;
		}
	}
	if (best && close_enough(best_d, n))
		fprintf(stderr, "%s: did you mean '--%s'?\n", argv[0], best);
}

const char *pc_cli_loopback_alias(const char *host)
{
	if (!strcmp(host, "localhost"))
		return "127.0.0.1";
	if (!strcmp(host, "ip6-localhost") || !strcmp(host, "ip6-loopback"))
		return "::1";
	return host;
}

bool pc_cli_numeric_host(const char *host)
{
	struct in6_addr a;
	return inet_pton(AF_INET, host, &a) == 1 || inet_pton(AF_INET6, host, &a) == 1;
}

void pc_cli_listen_error(const char *cmd, const char *host, unsigned port, int rc, int err)
{
	const char *fmt = strchr(host, ':') ? "%s: cannot listen on [%s]:%u: " : "%s: cannot listen on %s:%u: ";
	fprintf(stderr, fmt, cmd, host, port);
	if (rc != PC_ESYS || !err) {
		fprintf(stderr, "%s\n", pc_strerror(rc));
		return;
	}
	/* strerror capitalises; the rest of the line is lower case */
	char why[128];
	snprintf(why, sizeof(why), "%s", strerror(err));
	why[0] = (char)tolower((unsigned char)why[0]);
	fprintf(stderr, "%s\n", why);
}

int pc_cli_print_json(const char *cmd, const cJSON *j)
{
	char *line = j ? cJSON_PrintUnformatted(j) : NULL;
	if (!line) {
		fprintf(stderr, "%s: out of memory\n", cmd);
		return PC_CLI_FAIL;
	}
	printf("%s\n", line);
	cJSON_free(line);
	return PC_CLI_OK;
}
