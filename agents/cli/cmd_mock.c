/*
 * `pincer mock-llm`: serves the mock LLM (agents/mock) until SIGINT or
 * SIGTERM, then shuts down in order: the server, the I/O threads, the
 * runtime. Signals are blocked before any thread starts, so every thread
 * inherits the mask and only the main thread's sigwait sees them.
 */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "../../io/io.h"
#include "../../runtime/runtime.h"
#include "../mock/mock_server.h"
#include "../mock/scenario.h"
#include "commands.h"

#define MAX_SCENARIO_BYTES ((size_t)64 << 20)

static void usage(FILE *f)
{
	fprintf(f, "usage: pincer mock-llm [--host ADDR] [--port N] [--scenario FILE]\n"
		   "                       [--threads N] [--io-threads N]\n\n"
		   "Serves a scripted OpenAI- and Anthropic-compatible API until SIGINT or SIGTERM.\n"
		   "Prints one JSON line with the bound address once it listens.\n\n"
		   "  --host ADDR        numeric address to bind (default 127.0.0.1)\n"
		   "  --port N           port, 0 for any free one (default 18790)\n"
		   "  --scenario FILE    scenario JSON (default: echo every request)\n"
		   "  --threads N        runtime worker threads (default: one per core)\n"
		   "  --io-threads N     I/O threads (default: one per two cores)\n\n"
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

int pc_cmd_mock_llm(int argc, char **argv)
{
	static const struct option opts[] = {
		{"host", required_argument, NULL, 'H'},
		{"port", required_argument, NULL, 'p'},
		{"scenario", required_argument, NULL, 's'},
		{"threads", required_argument, NULL, 't'},
		{"io-threads", required_argument, NULL, 'i'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *host = "127.0.0.1", *scenario_path = NULL;
	unsigned long port = 18790, threads = 0, io_threads = 0;
	int c;
	optind = 1;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		bool ok = true;
		switch (c) {
		case 'H': host = optarg; break;
		case 'p': ok = parse_uint(optarg, 65535, &port); break;
		case 's': scenario_path = optarg; break;
		case 't': ok = parse_uint(optarg, 1024, &threads); break;
		case 'i': ok = parse_uint(optarg, 1024, &io_threads); break;
		case 'h': usage(stdout); return 0;
		default: ok = false;
		}
		if (!ok) {
			if (c != '?')
				fprintf(stderr, "pincer mock-llm: bad value for --%s: '%s'\n",
					c == 'p' ? "port" : c == 't' ? "threads" : "io-threads", optarg);
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "pincer mock-llm: unexpected argument '%s'\n", argv[optind]);
		usage(stderr);
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
	rcfg.workers = (uint32_t)threads;
	pc_io_config_t icfg = {.threads = (uint32_t)io_threads};
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
		.port = (uint16_t)port,
		.scenario = scenario,
		.scenario_len = scenario_len,
	};
	if ((rc = pc_mock_server_start(io, &mcfg, &mock, err, sizeof(err)))) {
		fprintf(stderr, "pincer mock-llm: %s\n", rc == PC_EINVAL && err[0] ? err : pc_strerror(rc));
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
