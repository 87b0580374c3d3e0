/*
 * `pincer agent --local -m "..."`: one turn, in-process, through the same
 * session / run / attempt actors the gateway uses. The answer streams to
 * stdout as it arrives; tool calls are shown on stderr; --json prints every
 * event as a JSON line instead. Exit status 0 when the run ended well, 1
 * when it failed, 2 for bad usage.
 *
 * The host (configuration, plugins, runtime, store, agent) is host.c's.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "../agent.h"
#include "commands.h"
#include "host.h"

static void usage(FILE *f)
{
	fprintf(f, "usage: pincer agent --local -m MESSAGE [--session KEY] [--model PROVIDER/MODEL]\n"
		   "                    [--config FILE] [--timeout SECONDS] [--json]\n\n"
		   "Runs one agent turn in-process and streams the answer. With no configuration\n"
		   "file, the provider is the embedded mock LLM (a tool call, then an echo).\n");
}

typedef struct opts {
	const char *message, *session, *model, *config;
	uint64_t timeout_ms;
	bool local, json;
} opts_t;

static int parse(int argc, char **argv, opts_t *o)
{
	static const struct option longs[] = {
		{"local", no_argument, NULL, 'l'},     {"message", required_argument, NULL, 'm'},
		{"session", required_argument, NULL, 's'}, {"model", required_argument, NULL, 'M'},
		{"config", required_argument, NULL, 'c'},  {"timeout", required_argument, NULL, 't'},
		{"json", no_argument, NULL, 'j'},      {"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	optind = 1;
	int c;
	while ((c = getopt_long(argc, argv, "m:s:h", longs, NULL)) != -1) {
		switch (c) {
		case 'l': o->local = true; break;
		case 'm': o->message = optarg; break;
		case 's': o->session = optarg; break;
		case 'M': o->model = optarg; break;
		case 'c': o->config = optarg; break;
		case 'j': o->json = true; break;
		case 't': {
			char *end = NULL;
			unsigned long long v = strtoull(optarg, &end, 10);
			if (!end || *end || v > 172800) {
				fprintf(stderr, "pincer agent: --timeout takes seconds (0..172800)\n");
				return 2;
			}
			o->timeout_ms = v * 1000;
			break;
		}
		case 'h': usage(stdout); return 1;
		default: usage(stderr); return 2;
		}
	}
	if (optind < argc || !o->message || !o->message[0]) {
		usage(stderr);
		return 2;
	}
	if (!o->local) {
		fprintf(stderr, "pincer agent: only --local is available (the gateway comes later)\n");
		return 2;
	}
	return 0;
}

/* Prints one event; returns true for this run's terminal event.
 * *mid_line: the answer's last line on stdout is not finished yet. */
static bool show(const opts_t *o, const char *run_id, const pc_event_t *e, int *status, bool *mid_line)
{
	if (strcmp(e->run_id, run_id))
		return false;
	if (o->json) {
		char *line = NULL;
		size_t n = 0;
		if (pc_event_to_json(e, &line, &n) == 0) {
			fwrite(line, 1, n, stdout);
			fputc('\n', stdout);
			free(line);
		}
	}
	cJSON *d = cJSON_Parse(e->data);
	const char *phase = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(d, "phase"));
	if (!o->json) {
		if (e->stream == PC_EVENT_ASSISTANT) {
			const char *delta = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(d, "delta"));
			if (delta && delta[0]) {
				fputs(delta, stdout);
				*mid_line = delta[strlen(delta) - 1] != '\n';
			}
			fflush(stdout);
		} else if (e->stream == PC_EVENT_TOOL && phase && !strcmp(phase, "start")) {
			const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(d, "name"));
			if (*mid_line)
				fputc('\n', stdout);
			*mid_line = false;
			fflush(stdout);
			fprintf(stderr, "[tool %s]", name ? name : "?");
		} else if (e->stream == PC_EVENT_TOOL && phase && !strcmp(phase, "result")) {
			const char *r = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(d, "result"));
			fprintf(stderr, " %s\n", r ? r : "");
		} else if (e->terminal) {
			const char *err = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(d, "error"));
			if (*mid_line)
				fputc('\n', stdout);
			fflush(stdout);
			if (err)
				fprintf(stderr, "pincer agent: %s\n", err);
		}
	}
	if (e->terminal && phase)
		*status = strcmp(phase, "end") ? 1 : 0;
	cJSON_Delete(d);
	return e->terminal;
}

static int run_turn(const opts_t *o, pc_agent_t *agent)
{
	const char *key = o->session ? o->session : "main";
	pc_event_sub_t *sub = NULL;
	pc_event_sub_config_t sc = {.capacity = 4096};
	int rc = pc_event_sub_new(&sc, &sub);
	if (rc == 0)
		rc = pc_agent_subscribe_session(agent, key, sub);
	pc_agent_accepted_t acc;
	pc_agent_params_t p = {.session_key = key, .message = o->message, .model = o->model,
			       .timeout_ms = o->timeout_ms};
	if (rc == 0)
		rc = pc_agent_submit(agent, &p, &acc);
	if (rc != 0) {
		fprintf(stderr, "pincer agent: the message was not accepted: %s\n",
			rc <= -100 ? pc_store_strerror(rc) : pc_strerror(rc));
		pc_event_sub_release(sub);
		return 1;
	}
	int status = 1;
	bool mid_line = false;
	bool done = acc.disposition == PC_AGENT_DUPLICATE;
	while (!done) {
		if (pc_event_sub_wait(sub, -1) != 0)
			break;
		pc_event_t *ev[64];
		size_t n = pc_event_sub_take(sub, ev, 64);
		for (size_t i = 0; i < n; i++) {
			if (!done && show(o, acc.run_id, ev[i], &status, &mid_line))
				done = true;
			pc_event_release(ev[i]);
		}
	}
	pc_agent_unsubscribe_session(agent, key, sub);
	pc_event_sub_release(sub);
	return status;
}

int pc_cmd_agent(int argc, char **argv)
{
	opts_t o = {0};
	int rc = parse(argc, argv, &o);
	if (rc)
		return rc == 1 ? 0 : rc;
	pc_cli_host_options_t ho = {.command = "pincer agent", .config_path = o.config, .workers = 2,
				    .blocking_threads = 2};
	pc_cli_host_t h;
	if (pc_cli_host_start(&ho, &h) != 0)
		return 1;
	int status = run_turn(&o, h.agent);
	pc_cli_host_stop(&h, 5000);
	return status;
}
