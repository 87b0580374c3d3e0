/*
 * `pincer load --target URL [options]`: drives a gateway (OpenClaw's
 * WebSocket RPC) or an OpenAI-compatible endpoint with simulated
 * sessions and reports latency percentiles, throughput and errors
 * (docs/load.md). This file reads the options and prints the results;
 * load.h says where the rest is.
 */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "commands.h"
#include "device_identity.h"
#include "load.h"
#include "load_out.h"
#include "rpc_client.h"

#define CMD PC_LOAD_CMD
#define DEFAULT_MESSAGE "load test: session {session}, turn {turn}"
#define DEFAULT_SESSION_KEY "load-{session}"
#define DEFAULT_TIMEOUT_MS 60000u
#define DEFAULT_CONNECT_TIMEOUT_MS 10000u
/* Bounds that keep the arithmetic (ns in 64 bits) far from overflow. */
#define MAX_SECONDS 864000.0 /* 10 days */
#define MAX_SESSIONS 1000000u
#define MAX_STAGES 100u

static void usage(FILE *f)
{
	fprintf(f,
		"usage: pincer load --target URL [options]\n\n"
		"Drives a gateway or an OpenAI-compatible endpoint with simulated sessions and\n"
		"reports latency percentiles (from each turn's intended send time), throughput\n"
		"and errors. docs/load.md explains the numbers.\n\n"
		"  --target URL           ws://HOST:PORT (OpenClaw's WebSocket RPC: `agent`), or\n"
		"                         http://HOST:PORT/v1 (OpenAI chat completions; https too)\n"
		"                         (env PINCER_LOAD_TARGET)\n"
		"  --token TOKEN          ws: the gateway's token; http: a bearer token\n"
		"                         (env PINCER_LOAD_TOKEN)\n"
		"  --password SECRET      ws: the gateway's password (env PINCER_LOAD_PASSWORD)\n"
		"  --identity FILE        ws: connect as the Ed25519 device in FILE (made when\n"
		"                         missing), as OpenClaw's gateway asks of `agent` callers\n"
		"  --via agent|chat|wait  ws: `agent` requests (default); chat.send and `chat`\n"
		"                         events, as OpenClaw's Control UI sends; or `agent`\n"
		"                         and then agent.wait for its run's end\n"
		"  --model NAME           the model asked for (http default: the target's first\n"
		"                         in GET /models, else mock)\n"
		"  --stream               http: streamed answers (TTFT and inter-token latency)\n"
		"  --message TEXT         the message; {session}, {turn}, {turn/N} and {run} are\n"
		"                         replaced (as in --session-key) (default:\n"
		"                         \"" DEFAULT_MESSAGE "\")\n"
		"  --messages FILE        JSONL, one message a line (a string or {\"message\": ...});\n"
		"                         a session's turn k takes line k modulo their number\n"
		"  --session-key TEXT     ws: the sessionKey; {session} and {turn} (numbers from\n"
		"                         0), {turn/N} (a new number every N turns) and {run}\n"
		"                         (this run's id) replaced (default: \"" DEFAULT_SESSION_KEY "\")\n"
		"  --sessions N           simulated sessions (default 1)\n"
		"  --turns K              turns per session (default 1 without --duration)\n"
		"  --duration S           run for S seconds after the warmup (decimals allowed)\n"
		"  --think-ms MS          closed loop: pause after each turn (default 0)\n"
		"  --rate R               open loop: R turns/s in all, spread over the sessions\n"
		"  --stages S:R,...       open loop: ramps, each S seconds to R turns/s, from the\n"
		"                         one before (the first from --rate, else 0)\n"
		"  --session-stages S:N,...  closed loop: ramps, each S seconds to N sessions,\n"
		"                         from the one before (the first from --sessions, else 0)\n"
		"  --arrivals KIND        open loop: poisson (default) or constant gaps\n"
		"  --seed N               open loop: the arrivals' random seed (default 1)\n"
		"  --max-in-flight N      open loop: turns queued or running at most; the rest are\n"
		"                         counted as dropped\n"
		"  --warmup S             leave turns meant to start in the first S seconds out\n"
		"  --timeout S            one turn's limit (default 60)\n"
		"  --connect-timeout S    a connection's limit (default 10)\n"
		"  --slo LIMITS           e.g. 'ttft=500ms,tpot=50ms,turn=5s': turns within every\n"
		"                         limit are good (goodput)\n"
		"  --threshold EXPR       e.g. 'p99(turn_ms)<200,rate(errors)<0.001': exit 3 when\n"
		"                         one does not hold (grammar: docs/load.md)\n"
		"  --json                 the results as one JSON object on stdout\n"
		"  --compare OLD.json     set an earlier run's --json beside this run's figures\n"
		"  --csv FILE             one row per second (columns: docs/load.md)\n"
		"  --target-pid PID       report this process's CPU and memory over the run (the\n"
		"                         target's, on this machine) beside the harness's own\n"
		"  --metrics-url URL      read the target's Prometheus /metrics before and after\n"
		"                         the run and report what its counters did\n"
		"  --metrics-filter RE    the changed series the summary lists (an extended\n"
		"                         regex; default: the 10 largest changes)\n"
		"  --out DIR              every turn's record, the per-second rows, percentiles\n"
		"                         and plots (gnuplot) into DIR, new or empty\n"
		"  --quiet                no progress line on stderr\n\n"
		"Every option also from the environment as PINCER_LOAD_<NAME> (--max-in-flight:\n"
		"PINCER_LOAD_MAX_IN_FLIGHT; a flag: 1 or 0); the command line wins.\n"
		"Exit status: 0 done (thresholds held), 1 failure, 2 bad usage, 3 a threshold\n"
		"crossed.\n");
}

enum {
	OPT_TARGET = 0x2001, OPT_TOKEN, OPT_PASSWORD, OPT_VIA, OPT_MODEL, OPT_STREAM, OPT_MESSAGE, OPT_MESSAGES,
	OPT_SESSION_KEY, OPT_SESSIONS, OPT_TURNS, OPT_DURATION, OPT_THINK, OPT_RATE, OPT_STAGES, OPT_SESSION_STAGES,
	OPT_ARRIVALS, OPT_SEED,
	OPT_MAX_IN_FLIGHT, OPT_WARMUP, OPT_TIMEOUT, OPT_CONNECT_TIMEOUT, OPT_SLO, OPT_THRESHOLD, OPT_JSON, OPT_CSV,
	OPT_COMPARE, OPT_QUIET, OPT_TARGET_PID, OPT_METRICS_URL, OPT_METRICS_FILTER, OPT_IDENTITY, OPT_OUT, OPT_HELP,
};

static const struct option longs[] = {
	{"target", required_argument, NULL, OPT_TARGET},
	{"token", required_argument, NULL, OPT_TOKEN},
	{"password", required_argument, NULL, OPT_PASSWORD},
	{"identity", required_argument, NULL, OPT_IDENTITY},
	{"via", required_argument, NULL, OPT_VIA},
	{"model", required_argument, NULL, OPT_MODEL},
	{"stream", no_argument, NULL, OPT_STREAM},
	{"message", required_argument, NULL, OPT_MESSAGE},
	{"messages", required_argument, NULL, OPT_MESSAGES},
	{"session-key", required_argument, NULL, OPT_SESSION_KEY},
	{"sessions", required_argument, NULL, OPT_SESSIONS},
	{"turns", required_argument, NULL, OPT_TURNS},
	{"duration", required_argument, NULL, OPT_DURATION},
	{"think-ms", required_argument, NULL, OPT_THINK},
	{"rate", required_argument, NULL, OPT_RATE},
	{"stages", required_argument, NULL, OPT_STAGES},
	{"session-stages", required_argument, NULL, OPT_SESSION_STAGES},
	{"arrivals", required_argument, NULL, OPT_ARRIVALS},
	{"seed", required_argument, NULL, OPT_SEED},
	{"max-in-flight", required_argument, NULL, OPT_MAX_IN_FLIGHT},
	{"warmup", required_argument, NULL, OPT_WARMUP},
	{"timeout", required_argument, NULL, OPT_TIMEOUT},
	{"connect-timeout", required_argument, NULL, OPT_CONNECT_TIMEOUT},
	{"slo", required_argument, NULL, OPT_SLO},
	{"threshold", required_argument, NULL, OPT_THRESHOLD},
	{"json", no_argument, NULL, OPT_JSON},
	{"csv", required_argument, NULL, OPT_CSV},
	{"out", required_argument, NULL, OPT_OUT},
	{"compare", required_argument, NULL, OPT_COMPARE},
	{"quiet", no_argument, NULL, OPT_QUIET},
	{"target-pid", required_argument, NULL, OPT_TARGET_PID},
	{"metrics-url", required_argument, NULL, OPT_METRICS_URL},
	{"metrics-filter", required_argument, NULL, OPT_METRICS_FILTER},
	{"help", no_argument, NULL, OPT_HELP},
	{NULL, 0, NULL, 0},
};

typedef struct parsed {
	pc_load_opts_t o;
	const char *threshold, *messages, *csv, *out, *compare, *metrics_url, *metrics_filter, *identity;
	cJSON *old; /* --compare's object */
	pc_load_metrics_t metrics;
	bool duration_set, message_set, arrivals_set, in_flight_set, sessions_set, turns_set;
} parsed_t;

/* A non-negative decimal number of seconds (at most `max`), in ms. */
static int seconds_ms(const char *what, const char *text, double min, uint64_t *out)
{
	char *end = NULL;
	errno = 0;
	double v = strtod(text, &end);
	if (errno || end == text || *end || !isfinite(v) || v < min || v > MAX_SECONDS) {
		fprintf(stderr, CMD ": %s takes seconds from %g to %g, not '%s'\n", what, min, MAX_SECONDS, text);
		return PC_CLI_USAGE;
	}
	*out = (uint64_t)llround(v * 1000);
	return 0;
}

static int positive_rate(const char *text, double *out)
{
	char *end = NULL;
	errno = 0;
	double v = strtod(text, &end);
	if (errno || end == text || *end || !isfinite(v) || v < 0.01 || v > 1e7) {
		fprintf(stderr, CMD ": --rate takes turns per second from 0.01 to 1e7, not '%s'\n", text);
		return PC_CLI_USAGE;
	}
	*out = v;
	return 0;
}

/* One --slo limit, "NAME=NUMBER[ms|s]", into *o. */
static bool slo_limit(const char *text, size_t len, pc_load_opts_t *o)
{
	char buf[64], *end = NULL;
	if (len >= sizeof(buf))
		return false;
	memcpy(buf, text, len);
	buf[len] = '\0';
	char *eq = strchr(buf, '=');
	if (!eq)
		return false;
	*eq = '\0';
	errno = 0;
	double v = strtod(eq + 1, &end);
	double scale = !strcmp(end, "s") ? 1e6 : (!strcmp(end, "ms") || !*end) ? 1e3 : 0;
	if (errno || end == eq + 1 || !scale || !isfinite(v) || v <= 0 || v > MAX_SECONDS)
		return false;
	uint64_t us = (uint64_t)llround(v * scale);
	uint64_t *slot = !strcmp(buf, "ttft") ? &o->slo_ttft_us : !strcmp(buf, "tpot") ? &o->slo_tpot_us
							 : !strcmp(buf, "turn") ? &o->slo_turn_us : NULL;
	if (!slot || !us)
		return false;
	*slot = us;
	return true;
}

/* --slo: comma-separated limits. */
static int slo(const char *arg, pc_load_opts_t *o)
{
	for (const char *p = arg;;) {
		size_t n = strcspn(p, ",");
		if (!slo_limit(p, n, o)) {
			fprintf(stderr, CMD ": --slo '%.*s': expected ttft=, tpot= or turn= and a time (500ms, 5s)\n",
				(int)n, p);
			return PC_CLI_USAGE;
		}
		if (!p[n])
			break;
		p += n + 1;
	}
	o->slo = true;
	return 0;
}

/* --stages "S:R,..." (each S seconds, an "s" may follow, ramping to R
 * turns/s) or --session-stages "S:N,..." (to N sessions, a whole number):
 * into *out, their total into the run's duration. */
static int stages(const char *arg, const char *name, double max, bool whole, struct pc_load_stage **out, size_t *n,
		  pc_load_opts_t *o)
{
	free(*out);
	*out = NULL;
	*n = 0;
	o->duration_ms = 0;
	for (const char *p = arg;;) {
		char *end = NULL;
		errno = 0;
		double s = strtod(p, &end);
		if (end && *end == 's')
			end++;
		double r = end && *end == ':' ? strtod(end + 1, &end) : -1;
		struct pc_load_stage *grown = *n < MAX_STAGES ? realloc(*out, (*n + 1) * sizeof(*grown)) : NULL;
		if (grown)
			*out = grown;
		if (errno || !isfinite(s) || !(s > 0 && s <= MAX_SECONDS) || !isfinite(r) || r < 0 || r > max ||
		    (whole && r != floor(r)) || (*end && *end != ',') || !grown) {
			fprintf(stderr, CMD ": --%s takes SECONDS:%s,... (at most %u), not '%s'\n", name,
				whole ? "SESSIONS" : "RATE", MAX_STAGES, arg);
			return PC_CLI_USAGE;
		}
		(*out)[(*n)++] = (struct pc_load_stage){.ms = (uint64_t)llround(s * 1000), .rate = r};
		o->duration_ms += (uint64_t)llround(s * 1000);
		if (!*end)
			return 0;
		p = end + 1;
	}
}

/* One option into *p: 0, or an exit status (-1: --help was printed). */
static int option(parsed_t *p, int code, const char *arg)
{
	pc_load_opts_t *o = &p->o;
	uint64_t v = 0;
	int rc = 0;
	switch (code) {
	case OPT_TARGET: o->target = arg; break;
	case OPT_TOKEN: o->token = arg; break;
	case OPT_PASSWORD: o->password = arg; break;
	case OPT_IDENTITY: p->identity = arg; break;
	case OPT_VIA:
		if (strcmp(arg, "agent") && strcmp(arg, "chat") && strcmp(arg, "wait")) {
			fprintf(stderr, CMD ": --via takes agent, chat or wait, not '%s'\n", arg);
			rc = PC_CLI_USAGE;
		}
		o->via_chat = !strcmp(arg, "chat");
		o->via_wait = !strcmp(arg, "wait");
		break;
	case OPT_MODEL: o->model = arg; break;
	case OPT_STREAM: o->stream = true; break;
	case OPT_MESSAGE:
		o->message = arg;
		p->message_set = true;
		break;
	case OPT_MESSAGES: p->messages = arg; break;
	case OPT_SESSION_KEY: o->session_key = arg; break;
	case OPT_SESSIONS:
		rc = pc_cli_uint(CMD, "--sessions", arg, 1, MAX_SESSIONS, &v);
		o->sessions = (uint32_t)v;
		p->sessions_set = true;
		break;
	case OPT_TURNS:
		rc = pc_cli_uint(CMD, "--turns", arg, 1, UINT32_MAX, &o->turns);
		p->turns_set = true;
		break;
	case OPT_DURATION:
		rc = seconds_ms("--duration", arg, 0.001, &o->duration_ms);
		p->duration_set = true;
		break;
	case OPT_THINK: rc = pc_cli_uint(CMD, "--think-ms", arg, 0, 86400000, &o->think_ms); break;
	case OPT_RATE: rc = positive_rate(arg, &o->rate); break;
	case OPT_STAGES: rc = stages(arg, "stages", 1e7, false, &o->stages, &o->n_stages, o); break;
	case OPT_SESSION_STAGES:
		rc = stages(arg, "session-stages", MAX_SESSIONS, true, &o->session_stages, &o->n_session_stages, o);
		break;
	case OPT_ARRIVALS:
		p->arrivals_set = true;
		if (strcmp(arg, "poisson") && strcmp(arg, "constant")) {
			fprintf(stderr, CMD ": --arrivals takes poisson or constant, not '%s'\n", arg);
			rc = PC_CLI_USAGE;
		}
		o->poisson = !strcmp(arg, "poisson");
		break;
	case OPT_SEED: rc = pc_cli_uint(CMD, "--seed", arg, 0, UINT64_MAX, &o->seed); break;
	case OPT_MAX_IN_FLIGHT:
		p->in_flight_set = true;
		rc = pc_cli_uint(CMD, "--max-in-flight", arg, 1, UINT32_MAX, &o->max_in_flight);
		break;
	case OPT_WARMUP: rc = seconds_ms("--warmup", arg, 0, &o->warmup_ms); break;
	case OPT_TIMEOUT: rc = seconds_ms("--timeout", arg, 0.001, &o->timeout_ms); break;
	case OPT_CONNECT_TIMEOUT: rc = seconds_ms("--connect-timeout", arg, 0.001, &o->connect_timeout_ms); break;
	case OPT_SLO: rc = slo(arg, o); break;
	case OPT_THRESHOLD: p->threshold = arg; break;
	case OPT_JSON: o->json = true; break;
	case OPT_CSV: p->csv = arg; break;
	case OPT_OUT: p->out = arg; break;
	case OPT_COMPARE: p->compare = arg; break;
	case OPT_QUIET: o->progress = false; break;
	case OPT_TARGET_PID:
		rc = pc_cli_uint(CMD, "--target-pid", arg, 1, INT32_MAX, &v);
		o->target_pid = (int)v;
		break;
	case OPT_METRICS_URL: p->metrics_url = arg; break;
	case OPT_METRICS_FILTER: p->metrics_filter = arg; break;
	case OPT_HELP: usage(stdout); return -1;
	default: usage(stderr); return PC_CLI_USAGE;
	}
	return rc;
}

/* --target into the protocol and its address. */
static int target(pc_load_opts_t *o)
{
	const char *t = o->target;
	if (!strncmp(t, "http://", 7) || !strncmp(t, "https://", 8)) {
		size_t n = strlen(t);
		while (n && t[n - 1] == '/')
			n--;
		if (snprintf(o->url, sizeof(o->url), "%.*s/chat/completions", (int)n, t) >= (int)sizeof(o->url)) {
			fprintf(stderr, CMD ": --target is too long\n");
			return PC_CLI_USAGE;
		}
		o->proto = PC_LOAD_HTTP;
		o->https = t[4] == 's';
		return 0;
	}
	const char *why = NULL;
	if (pc_cli_url_parse(t, o->host, sizeof(o->host), &o->port, o->path, sizeof(o->path), &why) != 0) {
		fprintf(stderr, CMD ": bad --target '%s': %s, or http://HOST:PORT/v1\n", t, why);
		return PC_CLI_USAGE;
	}
	const char *alias = pc_cli_loopback_alias(o->host);
	if (alias != o->host)
		snprintf(o->host, sizeof(o->host), "%s", alias);
	o->proto = PC_LOAD_WS;
	return 0;
}

/* What the options say together. */
static int check(parsed_t *p)
{
	pc_load_opts_t *o = &p->o;
	o->open = o->rate > 0 || o->n_stages;
	if (!o->target) {
		fprintf(stderr, CMD ": --target is required\n\n");
		usage(stderr);
		return PC_CLI_USAGE;
	}
	if (!o->open && (p->arrivals_set || p->in_flight_set)) {
		fprintf(stderr, CMD ": --arrivals and --max-in-flight are for the open loop: add --rate\n");
		return PC_CLI_USAGE;
	}
	if (o->open && o->think_ms) {
		fprintf(stderr, CMD ": --think-ms is for the closed loop: leave out --rate and --stages\n");
		return PC_CLI_USAGE;
	}
	if ((o->n_stages || o->n_session_stages) && (p->duration_set || o->warmup_ms)) {
		/* the stages are the run's time from its start */
		fprintf(stderr, CMD ": --stages and --session-stages set the run's length: leave out --duration and "
				    "--warmup\n");
		return PC_CLI_USAGE;
	}
	if (o->n_session_stages && (o->open || p->turns_set)) {
		/* sessions come and go with the ramp: none has a number of turns */
		fprintf(stderr, CMD ": --session-stages is the closed loop's ramp: leave out --rate, --stages and "
				    "--turns\n");
		return PC_CLI_USAGE;
	}
	if (o->n_session_stages) {
		/* an actor for the most sessions the ramp reaches */
		o->sessions_start = p->sessions_set ? o->sessions : 0;
		uint32_t most = o->sessions_start;
		for (size_t i = 0; i < o->n_session_stages; i++)
			if (o->session_stages[i].rate > most)
				most = (uint32_t)o->session_stages[i].rate;
		if (!most) {
			fprintf(stderr, CMD ": --session-stages: no stage has a session\n");
			return PC_CLI_USAGE;
		}
		o->sessions = most;
	}
	if (p->message_set && p->messages) {
		fprintf(stderr, CMD ": --message and --messages: choose one\n");
		return PC_CLI_USAGE;
	}
	if (p->csv && p->out) {
		fprintf(stderr, CMD ": --out writes --csv's rows to DIR/seconds.csv: leave out --csv\n");
		return PC_CLI_USAGE;
	}
	if (!o->turns && !o->duration_ms)
		o->turns = 1;
	if (p->threshold && pc_load_threshold_check(p->threshold) != 0)
		return PC_CLI_USAGE;
	int rc = target(o);
	if (rc == 0 && o->via_wait && o->proto != PC_LOAD_WS) {
		fprintf(stderr, CMD ": --via wait is for a ws:// target\n");
		rc = PC_CLI_USAGE;
	}
	if (rc == 0 && o->via_chat && (o->proto != PC_LOAD_WS || o->model)) {
		/* chat.send takes no model (docs/gateway.md) */
		fprintf(stderr, CMD ": --via chat is for a ws:// target, without --model\n");
		rc = PC_CLI_USAGE;
	}
	if (rc == 0 && p->identity && o->proto != PC_LOAD_WS) {
		fprintf(stderr, CMD ": --identity is for a ws:// target\n");
		rc = PC_CLI_USAGE;
	}
	if (rc == 0 && p->compare && !(p->old = pc_load_compare_read(p->compare)))
		rc = PC_CLI_USAGE;
	if (rc == 0 && p->metrics_filter && !p->metrics_url) {
		fprintf(stderr, CMD ": --metrics-filter is for --metrics-url\n");
		rc = PC_CLI_USAGE;
	}
	if (rc == 0 && o->target_pid && pc_load_proc_check(o->target_pid, &o->target_starttime) != 0) {
		fprintf(stderr, CMD ": --target-pid %d: no such process\n", o->target_pid);
		rc = PC_CLI_USAGE;
	}
	if (rc == 0)
		rc = pc_load_metrics_init(&p->metrics, p->metrics_url, p->metrics_filter);
	if (rc == 0 && p->messages)
		rc = pc_load_messages_read(p->messages, o);
	/* last: a refused option leaves no directory behind */
	if (rc == 0 && p->out)
		rc = pc_load_out_prepare(p->out);
	return rc;
}

/* Every option may come from the environment as PINCER_LOAD_<NAME> (the
 * option's name in capitals, '-' as '_'; a flag's value 1, true, yes or
 * on), for a CI job that sets its load once; the command line has the
 * last word. */
static int from_env(parsed_t *p)
{
	for (const struct option *l = longs; l->name; l++) {
		if (l->val == OPT_HELP)
			continue;
		char name[64] = "PINCER_LOAD_";
		size_t n = strlen(name);
		for (const char *c = l->name; *c && n + 1 < sizeof(name); c++)
			name[n++] = *c == '-' ? '_' : (char)toupper((unsigned char)*c);
		name[n] = '\0';
		bool on = false;
		const char *value = l->has_arg ? pc_cli_env(name) : NULL;
		int rc = l->has_arg ? 0 : pc_cli_env_flag(CMD, name, &on);
		if (rc)
			return rc;
		if ((value || on) && (rc = option(p, l->val, value)) != 0) {
			fprintf(stderr, CMD ": (from %s)\n", name);
			return rc;
		}
	}
	return 0;
}

static int parse(int argc, char **argv, parsed_t *p)
{
	pc_load_opts_t *o = &p->o;
	*o = (pc_load_opts_t){.sessions = 1, .message = DEFAULT_MESSAGE, .session_key = DEFAULT_SESSION_KEY, .poisson = true, .seed = 1,
			      .progress = true, .timeout_ms = DEFAULT_TIMEOUT_MS,
			      .connect_timeout_ms = DEFAULT_CONNECT_TIMEOUT_MS};
	int rc = from_env(p);
	if (rc)
		return rc;
	optind = 1;
	opterr = 1;
	int c;
	while ((c = getopt_long(argc, argv, "", longs, NULL)) != -1) {
		if (c == '?')
			pc_cli_suggest_option(argc, argv, longs);
		if ((rc = option(p, c, optarg)) != 0)
			return rc;
	}
	if (optind < argc) {
		fprintf(stderr, CMD ": unexpected argument '%s'\n\n", argv[optind]);
		usage(stderr);
		return PC_CLI_USAGE;
	}
	return check(p);
}

/* The results on stdout: the table or the JSON, each with --compare's. */
static int report(const parsed_t *p, const pc_load_stats_t *st)
{
	cJSON *now = p->o.json || p->old ? pc_load_report_object(&p->o, st) : NULL;
	int status = PC_CLI_OK;
	if (p->o.json) {
		bool ok = now && pc_load_metrics_json(now, &p->metrics) &&
			  (!p->old || pc_load_compare_json(now, p->compare, p->old));
		status = pc_cli_print_json(CMD, ok ? now : NULL);
	} else {
		pc_load_report_text(stdout, &p->o, st);
		pc_load_metrics_text(stdout, &p->metrics);
		if (p->old && now)
			pc_load_compare_text(stdout, p->compare, p->old, now);
		else if (p->old) {
			fprintf(stderr, CMD ": out of memory\n");
			status = PC_CLI_FAIL;
		}
	}
	cJSON_Delete(now);
	return status;
}

/* --identity: the device loaded (or made) and paired. */
static int identity(parsed_t *p)
{
	pc_load_opts_t *o = &p->o;
	char gw[sizeof(o->host) + sizeof(o->path) + 16], err[PATH_MAX + 160];
	snprintf(gw, sizeof(gw), "ws://%s:%u%s", o->host, (unsigned)o->port, o->path);
	if (pc_cli_identity_open(p->identity, gw, &o->identity, err, sizeof(err)) != 0) {
		fprintf(stderr, CMD ": --identity %s\n", err);
		return PC_CLI_FAIL;
	}
	return pc_load_identity_pair(o);
}

static void parsed_free(parsed_t *p)
{
	pc_load_messages_free(&p->o);
	pc_cli_identity_free(p->o.identity);
	free(p->o.stages);
	free(p->o.session_stages);
	cJSON_Delete(p->old);
	pc_load_metrics_free(&p->metrics);
}

int pc_cmd_load(int argc, char **argv)
{
	parsed_t p = {0};
	int status = parse(argc, argv, &p);
	if (status) {
		parsed_free(&p);
		return status < 0 ? PC_CLI_OK : status;
	}
	pc_load_stats_t st;
	pc_load_csv_t csv = {0};
	/* --out: the per-second rows into DIR/seconds.csv */
	char seconds[PATH_MAX];
	const char *rows = p.out ? seconds : p.csv;
	if (p.out && !pc_load_out_path(seconds, sizeof(seconds), p.out, "seconds.csv")) {
		parsed_free(&p);
		return PC_CLI_FAIL;
	}
	if (pc_load_stats_init(&st, rows != NULL) != 0) {
		fprintf(stderr, CMD ": out of memory\n");
		parsed_free(&p);
		return PC_CLI_FAIL;
	}
	status = p.identity ? identity(&p) : PC_CLI_OK;
	if (status == PC_CLI_OK && rows)
		status = pc_load_csv_open(rows, &csv);
	if (status == PC_CLI_OK && p.out && pc_load_records_new(&st.records) != 0) {
		fprintf(stderr, CMD ": out of memory\n");
		status = PC_CLI_FAIL;
	}
	if (status == PC_CLI_OK) {
		pc_load_pick_model(&p.o);
		pc_load_metrics_before(&p.metrics, p.o.connect_timeout_ms);
	}
	if (status == PC_CLI_OK)
		status = pc_load_run(&p.o, &st, rows ? &csv : NULL);
	if (status == PC_CLI_OK)
		pc_load_metrics_after(&p.metrics, p.o.connect_timeout_ms);
	if (pc_load_csv_close(&csv) != 0)
		status = PC_CLI_FAIL;
	if (status == PC_CLI_OK && p.out)
		status = pc_load_out_write(p.out, st.records, &st);
	if (status == PC_CLI_OK)
		status = report(&p, &st);
	if (status == PC_CLI_OK && p.threshold && !pc_load_threshold_eval(p.threshold, &st, stderr))
		status = PC_LOAD_THRESHOLD_FAILED;
	pc_load_records_free(st.records);
	pc_load_stats_destroy(&st);
	parsed_free(&p);
	return pc_cli_flush_stdout(CMD, status);
}
