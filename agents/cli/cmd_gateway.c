/*
 * `pincer gateway [--bind ADDR] [--port N] [--config FILE]`: the agent host
 * behind the gateway (docs/gateway.md) until SIGTERM or SIGINT.
 *
 * Once it accepts connections it prints one JSON line on stdout:
 *   {"event":"listening","service":"gateway","host":...,"port":...,
 *    "url":"ws://...","readyMs":N,"recovered":{"rerun":N,"interrupted":N},
 *    "openaiUrl":"http://.../v1","auth":"none|token|password",
 *    "config":PATH|null}
 * (recovered: what a crashed or killed process before it left accepted:
 * docs/agent-loop.md, "Persistence"), and the same for a person on stderr.
 * On SIGTERM / SIGINT it drains: /readyz turns 503, clients get `shutdown`,
 * runs may finish for gateway.drainSeconds, the rest are aborted, every
 * result is stored; then it exits 0. Exit 1 when it cannot start, 2 for bad
 * usage. Flags also come from PINCER_GATEWAY_BIND / PINCER_GATEWAY_PORT
 * and PINCER_CONFIG.
 *
 * Signals are blocked before any thread starts, so every thread inherits
 * the mask and only the main thread's sigwait sees them.
 */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "agents/gateway/gateway.h"
#include "commands.h"
#include "host.h"
#include "runtime/clock.h"

static void usage(FILE *f)
{
	fprintf(f, "usage: pincer gateway [--bind ADDR] [--port N] [--config FILE] [--json]\n\n"
		   "Serves the WebSocket RPC, the OpenAI-compatible API, probes and metrics on one\n"
		   "port (default 127.0.0.1:18789) until SIGTERM or SIGINT, then drains.\n\n"
		   "  --bind ADDR    numeric address or localhost (env PINCER_GATEWAY_BIND);\n"
		   "                 beyond loopback the configuration must set gateway.auth\n"
		   "  --port N       0..65535, 0 = any free port (env PINCER_GATEWAY_PORT)\n"
		   "  --config FILE  pincer.json (env PINCER_CONFIG)\n"
		   "  --json         accepted: the output is JSON lines already\n"
		   "  --log-format json|text   the log's lines on stderr (default json)\n"
		   "  --log-level debug|info|warn|error   (default info)\n"
		   "  --log-content  lines may carry message text (default: never)\n");
}

typedef struct opts {
	const char *bind, *config;
	int32_t port;
	pc_log_config_t log;
	bool log_content;
} opts_t;

static int parse(int argc, char **argv, opts_t *o)
{
	static const struct option longs[] = {
		{"bind", required_argument, NULL, 'b'}, {"port", required_argument, NULL, 'p'},
		{"config", required_argument, NULL, 'c'}, {"help", no_argument, NULL, 'h'},
		{"json", no_argument, NULL, 'j'},         {"log-format", required_argument, NULL, 'F'},
		{"log-level", required_argument, NULL, 'L'}, {"log-content", no_argument, NULL, 'C'},
		{NULL, 0, NULL, 0},
	};
	o->port = -1;
	pc_log_config_init(&o->log);
	/* a full stderr drops lines (counted in /metrics) rather than stall a worker */
	o->log.drop_when_full = true;
	optind = 1;
	int c;
	while ((c = getopt_long(argc, argv, "h", longs, NULL)) != -1) {
		switch (c) {
		case 'b': o->bind = optarg; break;
		case 'c': o->config = optarg; break;
		case 'p': {
			char *end = NULL;
			unsigned long v = strtoul(optarg, &end, 10);
			if (!*optarg || !end || *end || v > 65535) {
				fprintf(stderr, "pincer gateway: --port takes 0..65535\n");
				return 2;
			}
			o->port = (int32_t)v;
			break;
		}
		case 'h': usage(stdout); return 1;
		case 'j': break; /* every line is JSON already */
		case 'F':
			if (pc_log_format_from_name(optarg, &o->log.format) != 0) {
				fprintf(stderr, "pincer gateway: --log-format takes json or text\n");
				return 2;
			}
			break;
		case 'L':
			if (pc_log_level_from_name(optarg, &o->log.level) != 0) {
				fprintf(stderr, "pincer gateway: --log-level takes debug, info, warn or error\n");
				return 2;
			}
			break;
		case 'C': o->log_content = true; break;
		default:
			pc_cli_suggest_option(argc, argv, longs);
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		usage(stderr);
		return 2;
	}
	return 0;
}

static const char *auth_name(pc_gateway_auth_mode_t m)
{
	switch (m) {
	case PC_GATEWAY_AUTH_NONE: return "none";
	case PC_GATEWAY_AUTH_TOKEN: return "token";
	case PC_GATEWAY_AUTH_PASSWORD: return "password";
	}
	return "unknown";
}

/* The listening line on stdout (JSON, for programs) and on stderr (for a
 * person): where to connect, how to authenticate (never the secret) and
 * which configuration is in force. */
static int print_listening(const char *host, uint16_t port, double ready_ms, const pc_agent_recovery_t *rec,
			   const pc_config_t *cfg, pc_log_t *log)
{
	bool v6 = strchr(host, ':') != NULL;
	char url[128], openai[128];
	snprintf(url, sizeof(url), v6 ? "ws://[%s]:%u" : "ws://%s:%u", host, (unsigned)port);
	snprintf(openai, sizeof(openai), v6 ? "http://[%s]:%u/v1" : "http://%s:%u/v1", host, (unsigned)port);
	const char *auth = auth_name(cfg->gateway.auth);
	cJSON *o = cJSON_CreateObject(), *r = cJSON_CreateObject();
	bool ok = o && r && cJSON_AddStringToObject(o, "event", "listening") &&
		  cJSON_AddStringToObject(o, "service", "gateway") && cJSON_AddStringToObject(o, "host", host) &&
		  cJSON_AddNumberToObject(o, "port", port) && cJSON_AddStringToObject(o, "url", url) &&
		  cJSON_AddNumberToObject(o, "readyMs", (double)(int64_t)(ready_ms * 10) / 10) &&
		  cJSON_AddNumberToObject(r, "rerun", rec->rerun) &&
		  cJSON_AddNumberToObject(r, "interrupted", rec->interrupted);
	if (ok && cJSON_AddItemToObject(o, "recovered", r))
		r = NULL; /* o owns it now */
	else
		ok = false;
	ok = ok && cJSON_AddStringToObject(o, "openaiUrl", openai) && cJSON_AddStringToObject(o, "auth", auth) &&
	     (cfg->source ? cJSON_AddStringToObject(o, "config", cfg->source) : cJSON_AddNullToObject(o, "config"));
	char *line = ok ? cJSON_PrintUnformatted(o) : NULL;
	cJSON_Delete(r);
	cJSON_Delete(o);
	if (!line)
		return PC_ENOMEM;
	int rc = printf("%s\n", line) < 0 || fflush(stdout) ? PC_ESYS : 0;
	cJSON_free(line);
	/* the same for a reader of the log, in its format */
	(void)pc_log_kv(log, PC_LOG_INFO, "listening", PC_LF_STR("url", url), PC_LF_STR("openaiUrl", openai),
			PC_LF_STR("auth", auth), PC_LF_STR("config", cfg->source ? cfg->source : "built-in defaults"));
	return rc;
}

int pc_cmd_gateway(int argc, char **argv)
{
	uint64_t t0 = pc__clock_mono_ns();
	opts_t o = {0};
	int rc = parse(argc, argv, &o);
	if (rc)
		return rc == 1 ? 0 : rc;
	sigset_t sigs;
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGTERM);
	if (pthread_sigmask(SIG_BLOCK, &sigs, NULL) || signal(SIGPIPE, SIG_IGN) == SIG_ERR) {
		fprintf(stderr, "pincer gateway: cannot set up signals\n");
		return 1;
	}
	pc_log_t *log = NULL;
	if (pc_log_new(&o.log, &log) != 0) {
		fprintf(stderr, "pincer gateway: cannot set up the log\n");
		return 1;
	}
	pc_cli_host_options_t ho = {.command = "pincer gateway", .config_path = o.config, .io_threads = 1,
				    .blocking_threads = 4, .log = log, .log_content = o.log_content};
	pc_cli_host_t h;
	if (pc_cli_host_start(&ho, &h) != 0) {
		pc_log_free(log);
		return 1;
	}
	/* The address as the gateway will bind it: a loopback name becomes
	 * its address, anything else must be numeric (no resolver). */
	const char *host = pc_cli_loopback_alias(o.bind ? o.bind : h.cfg->gateway.bind ? h.cfg->gateway.bind
											  : "127.0.0.1");
	unsigned port = o.port >= 0 ? (unsigned)o.port : h.cfg->gateway.port;
	if (!pc_cli_numeric_host(host)) {
		fprintf(stderr, "pincer gateway: cannot listen on '%s': numeric address only (127.0.0.1, ::1) or "
				"localhost\n", host);
		pc_cli_host_stop(&h, 0);
		pc_log_free(log);
		return 2;
	}
	pc_gateway_t *g = NULL;
	pc_gateway_options_t go = {.rt = h.rt, .io = h.io, .agent = h.agent, .config = h.cfg, .hooks = h.hooks,
				   .bind = host, .port = o.port, .log = log};
	errno = 0;
	rc = pc_gateway_new(&go, &g);
	if (rc == 0)
		rc = pc_gateway_start(g);
	int err = errno; /* PC_ESYS: the system's reason */
	int status = 1, sig = 0;
	if (rc == PC_EPERM) {
		fprintf(stderr,
			"pincer gateway: refusing to serve %s without auth: binding beyond loopback requires "
			"gateway.auth (a token or a password)\n",
			host);
	} else if (rc != 0) {
		pc_cli_listen_error("pincer gateway", host, port, rc, err);
	} else {
		pc_agent_recovery_t rec;
		pc_agent_recovered(h.agent, &rec);
		if (print_listening(host, pc_gateway_port(g), (double)(pc__clock_mono_ns() - t0) / 1e6, &rec, h.cfg, log) != 0)
			fprintf(stderr, "pincer gateway: cannot print the listening line\n");
		if (sigwait(&sigs, &sig) != 0) {
			fprintf(stderr, "pincer gateway: sigwait failed\n");
		} else {
			(void)pc_log_kv(log, PC_LOG_INFO, "draining",
					PC_LF_STR("signal", sig == SIGTERM ? "SIGTERM" : "SIGINT"));
			rc = pc_gateway_drain(g, -1);
			status = rc == 0 ? 0 : 1;
			if (rc != 0)
				fprintf(stderr, "pincer gateway: runs still going after the drain: %s\n",
					pc_strerror(rc));
		}
	}
	pc_gateway_free(g);
	pc_cli_host_stop(&h, 5000);
	pc_log_free(log);
	return status;
}
