/*
 * `pincer mock-llm`: serves the mock LLM (agents/mock) until SIGINT or
 * SIGTERM, then shuts down in order: the server, the I/O threads, the
 * runtime. Signals are blocked before any thread starts, so every thread
 * inherits the mask and only the main thread's sigwait sees them.
 */
#include <errno.h>
#include <getopt.h>
#include <stddef.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "io/io.h"
#include "runtime/runtime.h"
#include "agents/mock/mock.h"
#include "commands.h"

#define MAX_SCENARIO_BYTES ((size_t)64 << 20)

static void usage(FILE *f)
{
	fprintf(f, "usage: pincer mock-llm [--host ADDR] [--port N] [--scenario FILE]\n"
		   "                       [--threads N] [--io-threads N] [--max-streams N] [--json]\n\n"
		   "Serves a scripted OpenAI- and Anthropic-compatible API until SIGINT or SIGTERM.\n"
		   "Prints one JSON line with the bound address once it listens.\n\n"
		   "  --host ADDR        numeric address or localhost (default 127.0.0.1)\n"
		   "  --port N           port, 0 for any free one (default 18790)\n"
		   "  --scenario FILE    scenario JSON (default: echo every request)\n"
		   "  --threads N        runtime worker threads (default: one per core)\n"
		   "  --io-threads N     I/O threads (default: one per two cores)\n"
		   "  --max-streams N    HTTP/2 (h2c) requests at once on one connection\n"
		   "                     (default 1000)\n"
		   "  --json             accepted: the output is JSON already\n"
		   "Each flag also comes from the environment: PINCER_MOCK_HOST, _PORT,\n"
		   "_SCENARIO, _THREADS, _IO_THREADS, _MAX_STREAMS (a flag wins).\n\n"
		   "See docs/mock-llm.md for the scenario format and the /__mock endpoints.\n");
}

/* Reads a whole file (at most MAX_SCENARIO_BYTES); the caller frees *out. */
static int read_file(const char *path, char **out, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return PC_ESYS;
	char *buf = NULL;
	size_t n = 0, cap = 0;
	int rc = 0;
	for (;;) {
		if (n == cap) {
			cap = cap ? cap * 2 : 4096;
			char *nb = cap > MAX_SCENARIO_BYTES + 1 ? NULL : realloc(buf, cap);
			if (!nb) {
				rc = cap > MAX_SCENARIO_BYTES + 1 ? PC_ELIMIT : PC_ENOMEM;
				break;
			}
			buf = nb;
		}
		size_t got = fread(buf + n, 1, cap - n, f);
		n += got;
		if (got == 0) {
			rc = ferror(f) ? PC_ESYS : 0;
			break;
		}
	}
	if (fclose(f) && !rc)
		rc = PC_ESYS;
	if (rc) {
		free(buf);
		return rc;
	}
	buf[n] = 0; /* fread stopped short of cap */
	*out = buf;
	*len = n;
	return 0;
}

static bool parse_uint(const char *s, unsigned long max, unsigned long *out)
{
	char *end = NULL;
	errno = 0;
	unsigned long v = strtoul(s, &end, 10);
	if (errno || !*s || *end || *s == '-' || v > max)
		return false;
	*out = v;
	return true;
}

/* The start line: {"event":"listening","host":...,"port":...,"url":...}. */
static int print_listening(const char *host, uint16_t port, const char *scenario)
{
	char url[128];
	snprintf(url, sizeof(url), strchr(host, ':') ? "http://[%s]:%u" : "http://%s:%u", host, (unsigned)port);
	cJSON *o = cJSON_CreateObject();
	bool ok = cJSON_AddStringToObject(o, "event", "listening") != NULL;
	ok &= cJSON_AddStringToObject(o, "service", "mock-llm") != NULL;
	ok &= cJSON_AddStringToObject(o, "host", host) != NULL;
	ok &= cJSON_AddNumberToObject(o, "port", port) != NULL;
	ok &= cJSON_AddStringToObject(o, "url", url) != NULL;
	ok &= (scenario ? cJSON_AddStringToObject(o, "scenario", scenario) : cJSON_AddNullToObject(o, "scenario")) != NULL;
	char *s = ok ? cJSON_PrintUnformatted(o) : NULL;
	cJSON_Delete(o);
	if (!s)
		return PC_ENOMEM;
	int rc = printf("%s\n", s) < 0 || fflush(stdout) ? PC_ESYS : 0;
	free(s);
	return rc;
}

/* What the flags (or their environment variables) say. */
typedef struct mock_opts {
	const char *host, *scenario_path;
	unsigned long port, threads, io_threads, max_streams;
} mock_opts_t;

/* One numeric option: its flag, its variable, its limit, where it goes. */
typedef struct num_opt {
	int key;
	const char *flag, *env;
	unsigned long max;
	size_t off;
} num_opt_t;

static const num_opt_t nums[] = {
	{'p', "port", "PINCER_MOCK_PORT", 65535, offsetof(mock_opts_t, port)},
	{'t', "threads", "PINCER_MOCK_THREADS", 1024, offsetof(mock_opts_t, threads)},
	{'i', "io-threads", "PINCER_MOCK_IO_THREADS", 1024, offsetof(mock_opts_t, io_threads)},
	{'m', "max-streams", "PINCER_MOCK_MAX_STREAMS", 1u << 20, offsetof(mock_opts_t, max_streams)},
};

/* Sets numeric option `key` from `v`, from a flag or its variable (the
 * complaint names which). */
static bool set_num(mock_opts_t *o, int key, const char *v, bool from_env)
{
	for (size_t i = 0; i < sizeof(nums) / sizeof(nums[0]); i++) {
		if (nums[i].key != key)
			continue;
		if (parse_uint(v, nums[i].max, (unsigned long *)((char *)o + nums[i].off)))
			return true;
		if (from_env)
			fprintf(stderr, "pincer mock-llm: bad value for %s: '%s'\n", nums[i].env, v);
		else
			fprintf(stderr, "pincer mock-llm: bad value for --%s: '%s'\n", nums[i].flag, v);
		return false;
	}
	return false;
}

/* The environment's defaults, then the flags. 0 to go on, -1 after
 * --help, else the exit status. */
static int parse_opts(int argc, char **argv, mock_opts_t *o)
{
	static const struct option opts[] = {
		{"host", required_argument, NULL, 'H'},
		{"port", required_argument, NULL, 'p'},
		{"scenario", required_argument, NULL, 's'},
		{"threads", required_argument, NULL, 't'},
		{"io-threads", required_argument, NULL, 'i'},
		{"max-streams", required_argument, NULL, 'm'},
		{"json", no_argument, NULL, 'j'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	*o = (mock_opts_t){.host = "127.0.0.1", .port = 18790};
	if (pc_cli_env("PINCER_MOCK_HOST"))
		o->host = pc_cli_env("PINCER_MOCK_HOST");
	o->scenario_path = pc_cli_env("PINCER_MOCK_SCENARIO");
	for (size_t i = 0; i < sizeof(nums) / sizeof(nums[0]); i++) {
		const char *v = pc_cli_env(nums[i].env);
		if (v && !set_num(o, nums[i].key, v, true))
			return 2;
	}
	int c;
	optind = 1;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (c == 'h') {
			usage(stdout);
			return -1;
		}
		if (c == 'j')
			continue; /* its one line is JSON already */
		if (c == 'H')
			o->host = optarg;
		else if (c == 's')
			o->scenario_path = optarg;
		else if (c == '?' || !set_num(o, c, optarg, false)) {
			if (c == '?')
				pc_cli_suggest_option(argc, argv, opts);
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "pincer mock-llm: unexpected argument '%s'\n", argv[optind]);
		usage(stderr);
		return 2;
	}
	return 0;
}

int pc_cmd_mock_llm(int argc, char **argv)
{
	mock_opts_t o;
	int parsed = parse_opts(argc, argv, &o);
	if (parsed)
		return parsed < 0 ? 0 : parsed;
	/* a loopback name becomes its address; no resolver is asked */
	const char *host = pc_cli_loopback_alias(o.host), *scenario_path = o.scenario_path;
	if (!pc_cli_numeric_host(host)) {
		fprintf(stderr, "pincer mock-llm: cannot listen on '%s': numeric address only (127.0.0.1, ::1) or "
				"localhost\n", host);
		return 2;
	}
	int status = 1, rc, sig = 0;
	char *scenario = NULL;
	size_t scenario_len = 0;
	pc_runtime_t *rt = NULL;
	pc_io_t *io = NULL;
	pc_mock_server_t *mock = NULL;
	char err[PC_MOCK_ERR_MAX] = "";
	sigset_t sigs;
	pc_runtime_config_t rcfg;
	pc_runtime_config_init(&rcfg);
	rcfg.workers = (uint32_t)o.threads;
	pc_io_config_t icfg = {.threads = (uint32_t)o.io_threads};
	if (scenario_path && (rc = read_file(scenario_path, &scenario, &scenario_len))) {
		fprintf(stderr, "pincer mock-llm: cannot read %s: %s\n", scenario_path,
			rc == PC_ESYS ? strerror(errno) : pc_strerror(rc));
		goto out;
	}
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGTERM);
	/* A client that hangs up mid-write must not kill the process. */
	if (pthread_sigmask(SIG_BLOCK, &sigs, NULL) || signal(SIGPIPE, SIG_IGN) == SIG_ERR) {
		fprintf(stderr, "pincer mock-llm: cannot set up signals\n");
		goto out;
	}
	if ((rc = pc_runtime_new(&rcfg, &rt)) || (rc = pc_runtime_start(rt)) || (rc = pc_io_new(rt, &icfg, &io))) {
		fprintf(stderr, "pincer mock-llm: cannot start the runtime: %s\n", pc_strerror(rc));
		goto out;
	}
	pc_mock_server_config_t mcfg = {
		.host = host,
		.port = (uint16_t)o.port,
		.scenario = scenario,
		.scenario_len = scenario_len,
		.max_streams = (uint32_t)o.max_streams,
	};
	errno = 0;
	if ((rc = pc_mock_server_start(io, &mcfg, &mock, err, sizeof(err)))) {
		if (rc == PC_EINVAL && err[0])
			fprintf(stderr, "pincer mock-llm: %s\n", err);
		else
			pc_cli_listen_error("pincer mock-llm", host, (unsigned)o.port, rc, errno);
		goto out;
	}
	if (print_listening(host, pc_mock_server_port(mock), scenario_path))
		goto out;
	if (sigwait(&sigs, &sig)) {
		fprintf(stderr, "pincer mock-llm: sigwait failed\n");
		goto out;
	}
	status = 0;
out:
	pc_mock_server_free(mock);
	pc_io_free(io);
	pc_runtime_free(rt); /* stops it first */
	free(scenario);
	return status;
}
