/*
 * `pincer agent -m "..."`: one agent turn. By default through a running
 * gateway (docs/gateway.md): connect, send `agent` with a fresh
 * idempotency key, show the run's `agent` events as they come, then its
 * final answer. With --local the turn runs in-process, through the same
 * session / run / attempt actors the gateway uses (host.c builds them).
 *
 * Either way the answer streams to stdout, tool calls are shown on stderr,
 * and --json prints every event, then the result, as JSON lines. Exit
 * status 0 when the run completed; 1 when it failed, timed out or was
 * aborted, or the gateway could not be reached or went away (never a
 * silent local re-run); 2 for bad usage; 130 / 143 after SIGINT / SIGTERM,
 * which abort the run first (chat.abort for the accepted run).
 *
 * SIGINT and SIGTERM are blocked before any thread starts and polled
 * between waits (at most SLICE_MS apart), so no thread is interrupted in
 * a system call and the abort is sent from the main thread.
 */
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "io/io.h"
#include "agents/agent.h"
#include "agents/providers/providers.h"
#include "commands.h"
#include "host.h"
#include "rpc_client.h"
#include "runtime/clock.h"

#define CMD "pincer agent"
#define DEFAULT_TIMEOUT_S 600
#define MAX_TIMEOUT_S 172800
#define SLICE_MS 100            /* between two looks at the signals */
#define ACCEPT_MS 60000         /* the gateway takes the message within */
#define GRACE_MS 30000          /* beyond --timeout: the run's own timeout, then its answer */
#define ABORT_MS 5000           /* after an abort: its answer and the run's end */
#define DEFAULT_TICK_MS 30000

static void usage(FILE *f)
{
	fprintf(f, "usage: pincer agent -m MESSAGE [--session KEY] [--agent ID] [--model PROVIDER/MODEL]\n"
		   "                    [--thinking LEVEL] [--timeout SECONDS] [--json]\n"
		   "                    [--url URL] [--token TOKEN] [--password SECRET] [--config FILE]\n"
		   "       pincer agent --local -m MESSAGE [--session KEY] [--model PROVIDER/MODEL]\n"
		   "                    [--timeout SECONDS] [--json] [--config FILE]\n\n"
		   "Runs one agent turn through a running gateway (or in-process with --local) and\n"
		   "streams the answer to stdout; tool calls go to stderr. Exit status 0 when the\n"
		   "run completed, 1 when it failed, timed out or was aborted or the gateway could\n"
		   "not be reached, 2 for bad usage, 130/143 after SIGINT/SIGTERM (the run is\n"
		   "aborted first).\n\n"
		   "  -m, --message TEXT     the message (env PINCER_MESSAGE)\n"
		   "  -s, --session KEY      the session (also --session-key, --session-id; env\n"
		   "                         PINCER_SESSION; default \"main\")\n"
		   "  --agent ID             the agent; only \"main\" exists (env PINCER_AGENT)\n"
		   "  --model P/M            this run's model (env PINCER_MODEL)\n"
		   "  --thinking LEVEL       off, minimal, low, medium, high, xhigh, adaptive, max;\n"
		   "                         passed to the gateway (env PINCER_THINKING)\n"
		   "  --timeout SECONDS      the run's timeout, 0 = none (env PINCER_AGENT_TIMEOUT;\n"
		   "                         default 600)\n"
		   "  --json                 every event, then the result, as JSON lines (env\n"
		   "                         PINCER_JSON)\n"
		   "  --local                run in-process, no gateway (env PINCER_LOCAL); with no\n"
		   "                         configuration the provider is the embedded mock LLM\n");
	pc_cli_gw_usage(f);
}

typedef struct opts {
	const char *message, *session, *model, *agent, *thinking, *timeout;
	uint64_t timeout_s;
	bool local, json;
	pc_cli_gw_flags_t gw; /* gw.config is --local's configuration too */
} opts_t;

static void env_or(const char **slot, const char *name)
{
	if (!*slot)
		*slot = pc_cli_env(name);
}

/* 0 to go on, -1 after --help, else the exit status of a usage error. */
static int parse_flags(int argc, char **argv, opts_t *o)
{
	static const struct option longs[] = {
		{"message", required_argument, NULL, 'm'},  {"session", required_argument, NULL, 's'},
		{"session-key", required_argument, NULL, 's'}, {"session-id", required_argument, NULL, 's'},
		{"agent", required_argument, NULL, 'a'},    {"model", required_argument, NULL, 'M'},
		{"thinking", required_argument, NULL, 'k'}, {"timeout", required_argument, NULL, 't'},
		{"json", no_argument, NULL, 'j'},           {"local", no_argument, NULL, 'l'},
		{"help", no_argument, NULL, 'h'},           PC_CLI_GW_LONG_OPTIONS,
		{NULL, 0, NULL, 0},
	};
	optind = 1;
	int c;
	while ((c = getopt_long(argc, argv, "m:s:h", longs, NULL)) != -1) {
		switch (c) {
		case 'm': o->message = optarg; break;
		case 's': o->session = optarg; break;
		case 'a': o->agent = optarg; break;
		case 'M': o->model = optarg; break;
		case 'k': o->thinking = optarg; break;
		case 't': o->timeout = optarg; break;
		case 'j': o->json = true; break;
		case 'l': o->local = true; break;
		case 'h': usage(stdout); return -1;
		default:
			if (!pc_cli_gw_flag_or_usage(&o->gw, c, argc, argv, longs, usage))
				return PC_CLI_USAGE;
		}
	}
	if (optind < argc) {
		fprintf(stderr, CMD ": unexpected argument '%s' (the message goes after -m)\n\n", argv[optind]);
		usage(stderr);
		return PC_CLI_USAGE;
	}
	return 0;
}

/* What the flags and the environment say together, checked. */
static int check(opts_t *o)
{
	pc_think_level_t level;
	if (!o->message || !o->message[0]) {
		fprintf(stderr, CMD ": a message is required (-m TEXT)\n\n");
		usage(stderr);
		return PC_CLI_USAGE;
	}
	if (o->agent && strcmp(o->agent, "main") != 0) {
		fprintf(stderr, CMD ": unknown agent '%s' (only \"main\" exists)\n", o->agent);
		return PC_CLI_USAGE;
	}
	/* Said here, for both ways a message goes: the agent API would refuse
	 * it with a bare "invalid argument", the gateway as a refused frame. */
	const char *const texts[][2] = {{"the message", o->message}, {"--session", o->session}, {"--model", o->model}};
	for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
		if (texts[i][1] && !pc_utf8_valid(texts[i][1], strlen(texts[i][1]))) {
			fprintf(stderr, CMD ": %s is not UTF-8 text\n", texts[i][0]);
			return PC_CLI_USAGE;
		}
	}
	if (o->thinking && pc_think_level_parse(o->thinking, &level) != 0) {
		fprintf(stderr, CMD ": --thinking takes off, minimal, low, medium, high, xhigh, adaptive or max, "
				"not '%s'\n", o->thinking);
		return PC_CLI_USAGE;
	}
	o->timeout_s = DEFAULT_TIMEOUT_S;
	if (o->timeout && pc_cli_uint(CMD, "--timeout", o->timeout, 0, MAX_TIMEOUT_S, &o->timeout_s))
		return PC_CLI_USAGE;
	return 0;
}

static int parse(int argc, char **argv, opts_t *o)
{
	if (pc_cli_env_flag(CMD, "PINCER_JSON", &o->json) || pc_cli_env_flag(CMD, "PINCER_LOCAL", &o->local))
		return PC_CLI_USAGE;
	int rc = parse_flags(argc, argv, o);
	if (rc)
		return rc;
	env_or(&o->message, "PINCER_MESSAGE");
	env_or(&o->session, "PINCER_SESSION");
	env_or(&o->agent, "PINCER_AGENT");
	env_or(&o->model, "PINCER_MODEL");
	env_or(&o->thinking, "PINCER_THINKING");
	env_or(&o->timeout, "PINCER_AGENT_TIMEOUT");
	pc_cli_gw_env(&o->gw);
	return check(o);
}

/* ---- signals ---- */

static int block_signals(sigset_t *s)
{
	sigemptyset(s);
	sigaddset(s, SIGINT);
	sigaddset(s, SIGTERM);
	if (pthread_sigmask(SIG_BLOCK, s, NULL) != 0) {
		fprintf(stderr, CMD ": cannot set up signals\n");
		return PC_CLI_FAIL;
	}
	return 0;
}

/* A pending SIGINT or SIGTERM (taken), else 0. */
static int pending_signal(const sigset_t *s)
{
	struct timespec zero = {0, 0};
	int sig = sigtimedwait(s, NULL, &zero);
	return sig > 0 ? sig : 0;
}

/* ---- what the user sees (both modes) ---- */

static const cJSON *jget(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }

static const char *jstr(const cJSON *o, const char *k)
{
	const char *s = cJSON_GetStringValue(jget(o, k));
	return s ? s : "";
}

typedef struct view {
	bool json;
	bool mid_line; /* the answer's last line on stdout is not finished */
	bool streamed; /* some assistant text went to stdout */
	bool gap;      /* deltas were lost: the whole answer is printed at the end */
} view_t;

static void end_line(view_t *v)
{
	if (v->mid_line)
		fputc('\n', stdout);
	v->mid_line = false;
	fflush(stdout);
}

static void print_json(const cJSON *o, const char *text)
{
	char *own = text ? NULL : cJSON_PrintUnformatted(o);
	if (text || own)
		printf("%s\n", text ? text : own);
	else
		fprintf(stderr, CMD ": an event was lost (out of memory)\n");
	cJSON_free(own);
	fflush(stdout);
}

/* A tool's start or result on stderr: "[tool NAME] RESULT". */
static void show_tool(view_t *v, const cJSON *d, const char *phase)
{
	if (!strcmp(phase, "start")) {
		end_line(v);
		fprintf(stderr, "[tool %s]", jget(d, "name") ? jstr(d, "name") : "?");
		return;
	}
	const cJSON *r = jget(d, "result");
	char *text = r && !cJSON_IsString(r) ? cJSON_PrintUnformatted(r) : NULL;
	fprintf(stderr, " %s\n", text ? text : cJSON_IsString(r) ? r->valuestring : "");
	cJSON_free(text);
}

/* Shows one event, in its wire form {runId, seq, stream, ts, data,
 * sessionKey}; `text` is that form as text when at hand (--json). */
static void show_event(view_t *v, const cJSON *e, const char *text)
{
	if (v->json) {
		print_json(e, text);
		return;
	}
	const char *stream = jstr(e, "stream");
	const cJSON *d = jget(e, "data");
	const char *phase = jstr(d, "phase");
	if (!strcmp(stream, "assistant")) {
		const char *delta = jstr(d, "delta");
		if (delta[0] && !v->gap) {
			fputs(delta, stdout);
			v->streamed = true;
			v->mid_line = delta[strlen(delta) - 1] != '\n';
			fflush(stdout);
		}
	} else if (!strcmp(stream, "tool") && (!strcmp(phase, "start") || !strcmp(phase, "result"))) {
		show_tool(v, d, phase);
	} else if (!strcmp(stream, "error") && !strcmp(jstr(d, "reason"), "seq gap") && !v->gap) {
		v->gap = true;
		end_line(v);
		fprintf(stderr, CMD ": part of the stream was lost; the whole answer follows at the end\n");
	} else if (!strcmp(stream, "lifecycle") && (!strcmp(phase, "end") || !strcmp(phase, "error"))) {
		end_line(v);
	} else if (!strcmp(stream, "lifecycle") && !strcmp(phase, "notice") && jstr(d, "text")[0]) {
		/* a status the run wants the user to see (the overload retries') */
		end_line(v);
		fprintf(stderr, CMD ": %s\n", jstr(d, "text"));
	}
}

/* The answer's texts (error payloads and a silent NO_REPLY left out). */
static void print_answer(const cJSON *payloads)
{
	const cJSON *p;
	bool first = true;
	cJSON_ArrayForEach(p, payloads) {
		const char *t = jstr(p, "text");
		if (!t[0] || cJSON_IsTrue(jget(p, "isError")) || !strcmp(t, "NO_REPLY"))
			continue;
		printf("%s%s", first ? "" : "\n\n", t);
		first = false;
	}
	if (!first)
		fputc('\n', stdout);
	fflush(stdout);
}

/* The result line of --json: {"type":"result", runId, status, summary,
 * result?, error?}. */
static void print_result_json(const cJSON *payload, const cJSON *error)
{
	cJSON *o = cJSON_CreateObject();
	bool ok = o && cJSON_AddStringToObject(o, "type", "result");
	const cJSON *it, *from = cJSON_IsObject(payload) ? payload : NULL;
	cJSON_ArrayForEach(it, from) {
		if (ok && strcmp(it->string, "type") != 0)
			ok = cJSON_AddItemToObject(o, it->string, cJSON_Duplicate(it, true));
	}
	if (ok && !jget(o, "status"))
		ok = cJSON_AddStringToObject(o, "status", "error") != NULL;
	if (ok && error)
		ok = cJSON_AddItemToObject(o, "error", cJSON_Duplicate(error, true));
	if (ok)
		print_json(o, NULL);
	else
		fprintf(stderr, CMD ": the result was lost (out of memory)\n");
	cJSON_Delete(o);
}

/* The run's end, in the shape of the gateway's final `agent` answer:
 * payload {runId, status, summary, result?} and, unless it went well,
 * error {code, message}. Returns the exit status. */
static int show_result(view_t *v, const cJSON *payload, const cJSON *error)
{
	const char *status = jstr(payload, "status"), *summary = jstr(payload, "summary");
	bool completed = !error && !strcmp(status, "ok") && !strcmp(summary, "completed");
	bool aborted = !error && !strcmp(status, "ok") && !strcmp(summary, "aborted");
	if (v->json) {
		print_result_json(payload, error);
		return completed ? PC_CLI_OK : PC_CLI_FAIL;
	}
	const char *why = jstr(error, "message")[0] ? jstr(error, "message") : summary;
	end_line(v);
	if (completed && (!v->streamed || v->gap))
		print_answer(jget(jget(payload, "result"), "payloads"));
	else if (aborted)
		fprintf(stderr, CMD ": the run was aborted\n");
	else if (!completed) {
		fprintf(stderr, CMD ": %s\n", why[0] ? why : "the run failed");
		/* what actually failed, in the provider's words, when the text
		 * above is the generic one users are shown */
		const cJSON *e = jget(jget(jget(payload, "result"), "meta"), "error");
		if (jstr(e, "message")[0] && strcmp(jstr(e, "message"), why) != 0)
			fprintf(stderr, CMD ": %s%s%s\n", jstr(e, "reason")[0] ? jstr(e, "reason") : "",
				jstr(e, "reason")[0] ? ": " : "", jstr(e, "message"));
	}
	return completed ? PC_CLI_OK : PC_CLI_FAIL;
}

/* ---- --local ---- */

/* The gateway's final answer for a run that ended here, from its terminal
 * lifecycle data `d`; *error is NULL when it went well. The caller deletes
 * both. */
static cJSON *local_result(const char *run_id, const cJSON *d, cJSON **error)
{
	const char *st = jstr(d, "status");
	bool ok = !strcmp(st, "ok"), aborted = !strcmp(st, "aborted"), timeout = !strcmp(st, "timeout");
	cJSON *p = cJSON_CreateObject();
	cJSON_AddStringToObject(p, "runId", run_id);
	*error = NULL;
	if (ok || aborted) {
		cJSON_AddStringToObject(p, "status", "ok");
		cJSON_AddStringToObject(p, "summary", ok ? "completed" : "aborted");
		cJSON_AddItemToObject(p, "result", pc_agent_run_result(d, st));
		return p;
	}
	const char *why = jstr(d, "error")[0] ? jstr(d, "error") : timeout ? "the run timed out" : "the run failed";
	cJSON_AddStringToObject(p, "status", timeout ? "timeout" : "error");
	cJSON_AddStringToObject(p, "summary", why);
	if (jget(d, "payloads"))
		cJSON_AddItemToObject(p, "result", pc_agent_run_result(d, st));
	*error = cJSON_CreateObject();
	cJSON_AddStringToObject(*error, "code", timeout ? "AGENT_TIMEOUT" : "UNAVAILABLE");
	cJSON_AddStringToObject(*error, "message", why);
	return p;
}

/* Shows one of this run's events; true for its terminal one (*status is
 * then the exit status). */
static bool local_event(view_t *v, const char *run_id, const pc_event_t *e, int *status)
{
	char *text = NULL;
	size_t n = 0;
	if (strcmp(e->run_id, run_id) != 0)
		return false;
	/* A delta shows OpenClaw's {text, delta}: the text from the run's view. */
	int rc = e->text ? pc_event_delta_to_json(e, e->text_len - e->delta_len, &text, &n)
			 : pc_event_to_json(e, &text, &n);
	cJSON *j = rc == 0 ? cJSON_Parse(text) : NULL;
	if (!j) {
		fprintf(stderr, CMD ": an event was lost (out of memory)\n");
	} else {
		show_event(v, j, text);
	}
	if (e->terminal) {
		cJSON *error = NULL, *p = local_result(run_id, jget(j, "data"), &error);
		*status = show_result(v, p, error);
		cJSON_Delete(p);
		cJSON_Delete(error);
	}
	cJSON_Delete(j);
	free(text);
	return e->terminal;
}

static int local_turn(const opts_t *o, pc_agent_t *agent, const sigset_t *sigs)
{
	const char *key = o->session ? o->session : "main";
	pc_event_sub_t *sub = NULL;
	pc_event_sub_config_t sc = {.capacity = 4096};
	int rc = pc_event_sub_new(&sc, &sub);
	bool subscribed = rc == 0 && (rc = pc_agent_subscribe_session(agent, key, sub)) == 0;
	pc_agent_accepted_t acc;
	pc_agent_params_t p = {.session_key = key, .message = o->message, .model = o->model,
			       .thinking = o->thinking, .timeout_ms = o->timeout_s * 1000};
	if (rc == 0)
		rc = pc_agent_submit(agent, &p, &acc);
	if (rc != 0) {
		fprintf(stderr, CMD ": the message was not accepted: %s\n",
			rc <= -100 ? pc_store_strerror(rc) : pc_strerror(rc));
		if (subscribed)
			pc_agent_unsubscribe_session(agent, key, sub);
		pc_event_sub_release(sub);
		return PC_CLI_FAIL;
	}
	view_t v = {.json = o->json};
	int status = PC_CLI_FAIL, sig = 0;
	int64_t give_up = -1; /* after an abort: how long the run may take to end */
	for (bool done = false; !done && (give_up < 0 || pc__clock_mono_ms() < give_up);) {
		if (!sig && (sig = pending_signal(sigs)) != 0) {
			fprintf(stderr, CMD ": %s: aborting the run\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
			(void)pc_agent_abort_run(agent, acc.run_id); /* PC_ESTATE: it just ended */
			give_up = pc__clock_mono_ms() + ABORT_MS;
		}
		rc = pc_event_sub_wait(sub, SLICE_MS);
		if (rc != 0 && rc != PC_ETIMEDOUT)
			break;
		pc_event_t *ev[64];
		size_t n = pc_event_sub_take(sub, ev, 64);
		for (size_t i = 0; i < n; i++) {
			if (!done && local_event(&v, acc.run_id, ev[i], &status))
				done = true;
			pc_event_release(ev[i]);
		}
	}
	pc_agent_unsubscribe_session(agent, key, sub);
	pc_event_sub_release(sub);
	return sig ? 128 + sig : status;
}

static int run_local(const opts_t *o, const sigset_t *sigs)
{
	pc_cli_host_options_t ho = {.command = CMD, .config_path = o->gw.config, .workers = 2,
				    .blocking_threads = 2};
	pc_cli_host_t h;
	if (pc_cli_host_start(&ho, &h) != 0)
		return PC_CLI_FAIL;
	int status = local_turn(o, h.agent, sigs);
	pc_cli_host_stop(&h, 5000);
	return status;
}

/* ---- through the gateway ---- */

typedef struct remote {
	const opts_t *o;
	pc_cli_rpc_t *c;
	view_t v;
	char req[PC_CLI_RPC_ID_MAX]; /* the `agent` request's id */
	char run_id[PC_RUN_ID_MAX + 1]; /* "" until the accepted answer or an event names it */
	bool accepted;               /* the first answer came */
	int status;                  /* the exit status once the final answer came; -1 before */
	int64_t sent, last_frame;    /* when the request went, when a frame last came */
	int64_t deadline;            /* for the final answer; -1: none (--timeout 0) */
	int64_t silence;             /* this long without a frame: the connection is dead */
} remote_t;

/* "cli-" and 32 random hex digits. */
static int idempotency_key(char out[40])
{
	unsigned char b[16];
	if (getrandom(b, sizeof(b), 0) != (ssize_t)sizeof(b))
		return PC_ESYS;
	memcpy(out, "cli-", 4);
	for (size_t i = 0; i < sizeof(b); i++)
		snprintf(out + 4 + 2 * i, 3, "%02x", b[i]);
	return 0;
}

static cJSON *agent_params(const opts_t *o, const char *idem)
{
	cJSON *p = cJSON_CreateObject();
	bool ok = p && cJSON_AddStringToObject(p, "message", o->message) &&
		  cJSON_AddStringToObject(p, "idempotencyKey", idem) &&
		  (!o->session || cJSON_AddStringToObject(p, "sessionKey", o->session)) &&
		  (!o->model || cJSON_AddStringToObject(p, "model", o->model)) &&
		  (!o->thinking || cJSON_AddStringToObject(p, "thinking", o->thinking)) &&
		  (!o->timeout_s || cJSON_AddNumberToObject(p, "timeout", (double)o->timeout_s));
	if (!ok) {
		cJSON_Delete(p);
		return NULL;
	}
	return p;
}

/* The `agent` request's answers: first `accepted`, then the final one. */
static void on_answer(remote_t *r, const cJSON *f)
{
	const cJSON *payload = jget(f, "payload");
	bool ok = cJSON_IsTrue(jget(f, "ok"));
	if (!r->accepted && ok && !strcmp(jstr(payload, "status"), "accepted")) {
		r->accepted = true;
		snprintf(r->run_id, sizeof(r->run_id), "%s", jstr(payload, "runId"));
		return;
	}
	r->status = show_result(&r->v, payload, ok ? NULL : jget(f, "error"));
}

static void on_frame(remote_t *r, const cJSON *f)
{
	const char *type = jstr(f, "type"), *event = jstr(f, "event");
	const cJSON *payload = jget(f, "payload");
	if (!strcmp(type, "res")) {
		if (pc_cli_rpc_is_res(f, r->req))
			on_answer(r, f);
	} else if (!strcmp(type, "event") && !strcmp(event, "agent")) {
		/* the connection only carries its own runs' events, so the first
		 * one names this run even before the accepted answer does */
		if (!r->run_id[0])
			snprintf(r->run_id, sizeof(r->run_id), "%s", jstr(payload, "runId"));
		if (!strcmp(jstr(payload, "runId"), r->run_id))
			show_event(&r->v, payload, NULL);
	} else if (!strcmp(type, "event") && !strcmp(event, "shutdown")) {
		fprintf(stderr, CMD ": the gateway is shutting down; waiting for the run to end\n");
	}
}

/* Reads frames (showing them) until the final answer or `until`. 0, or
 * the read's error. */
static int pump(remote_t *r, int64_t until)
{
	while (r->status < 0 && pc__clock_mono_ms() < until) {
		cJSON *f = NULL;
		int64_t left = until - pc__clock_mono_ms();
		int rc = pc_cli_rpc_next(r->c, left > 0 ? left : 0, &f);
		if (rc == PC_ETIMEDOUT)
			return 0;
		if (rc != 0)
			return rc;
		on_frame(r, f);
		cJSON_Delete(f);
	}
	return 0;
}

/* chat.abort for the run (waiting a little for its id when neither the
 * accepted answer nor an event has named it yet), then a short wait for
 * the run's end. */
static void abort_run(remote_t *r)
{
	int64_t until = pc__clock_mono_ms() + ABORT_MS;
	while (!r->run_id[0] && r->status < 0 && pc__clock_mono_ms() < until)
		if (pump(r, pc__clock_mono_ms() + SLICE_MS) != 0)
			return;
	if (r->status >= 0)
		return;
	if (!r->run_id[0]) {
		fprintf(stderr, CMD ": no run id came back: the message may still run\n");
		return;
	}
	cJSON *p = cJSON_CreateObject();
	if (!p || !cJSON_AddStringToObject(p, "sessionKey", r->o->session ? r->o->session : "main") ||
	    !cJSON_AddStringToObject(p, "runId", r->run_id) || pc_cli_rpc_send(r->c, "chat.abort", p, NULL) != 0) {
		fprintf(stderr, CMD ": the abort of run %s could not be sent\n", r->run_id);
		return;
	}
	(void)pump(r, until); /* the aborted run's final answer, when it comes in time */
}

/* The gateway's tick interval (hello-ok policy); 2 of them without a
 * frame mean the connection is dead. */
static int64_t silence_limit(const pc_cli_rpc_t *c)
{
	double tick = cJSON_GetNumberValue(jget(jget(pc_cli_rpc_hello(c), "policy"), "tickIntervalMs"));
	return 2 * (tick > 0 ? (int64_t)tick : DEFAULT_TICK_MS) + 2000;
}

/* One look at the signals and the clocks: the exit status when the wait
 * must end, else -1. */
static int watch(remote_t *r, const sigset_t *sigs)
{
	int sig = pending_signal(sigs);
	int64_t now = pc__clock_mono_ms();
	if (sig) {
		fprintf(stderr, CMD ": %s: aborting the run\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
		abort_run(r);
		return 128 + sig;
	}
	if (!r->run_id[0] && now - r->sent >= ACCEPT_MS) {
		fprintf(stderr, CMD ": the gateway did not accept the message within %d s\n", ACCEPT_MS / 1000);
		return PC_CLI_FAIL;
	}
	if (r->deadline >= 0 && now >= r->deadline) {
		fprintf(stderr, CMD ": no end of the run within %llu s; aborting it\n",
			(unsigned long long)r->o->timeout_s);
		abort_run(r);
		return PC_CLI_FAIL;
	}
	if (now - r->last_frame >= r->silence) {
		fprintf(stderr, CMD ": no sign of life from the gateway for %lld s\n", (long long)(r->silence / 1000));
		return PC_CLI_FAIL;
	}
	return -1;
}

/* The connection ended before the final answer: say so, never re-run. */
static int lost(remote_t *r, int rc)
{
	char why[300];
	end_line(&r->v);
	fprintf(stderr, CMD ": %s\n", pc_cli_rpc_strerror(r->c, rc, why, sizeof(why)));
	const char *key = r->o->session ? r->o->session : "main";
	if (r->run_id[0])
		fprintf(stderr, CMD ": run %s may still be going; `pincer sessions show %s` shows the transcript\n",
			r->run_id, key);
	else
		fprintf(stderr, CMD ": the message may still have been accepted; `pincer sessions show %s` shows "
				"the transcript\n", key);
	return PC_CLI_FAIL;
}

static int remote_turn(remote_t *r, const sigset_t *sigs)
{
	r->sent = r->last_frame = pc__clock_mono_ms();
	r->silence = silence_limit(r->c);
	r->deadline = r->o->timeout_s ? r->sent + (int64_t)r->o->timeout_s * 1000 + GRACE_MS : -1;
	while (r->status < 0) {
		int status = watch(r, sigs);
		if (status >= 0)
			return status;
		cJSON *f = NULL;
		int rc = pc_cli_rpc_next(r->c, SLICE_MS, &f);
		if (rc == PC_ETIMEDOUT)
			continue;
		if (rc != 0)
			return lost(r, rc);
		r->last_frame = pc__clock_mono_ms();
		on_frame(r, f);
		cJSON_Delete(f);
	}
	return r->status;
}

static int run_remote(const opts_t *o, const sigset_t *sigs)
{
	remote_t r = {.o = o, .v = {.json = o->json}, .status = -1};
	char idem[40];
	if (idempotency_key(idem) != 0) {
		fprintf(stderr, CMD ": cannot draw an idempotency key\n");
		return PC_CLI_FAIL;
	}
	int status = pc_cli_gw_connect(CMD, &o->gw, NULL, true, &r.c);
	if (status)
		return status;
	cJSON *p = agent_params(o, idem);
	int rc = p ? pc_cli_rpc_send(r.c, "agent", p, r.req) : PC_ENOMEM;
	if (rc != 0) {
		char why[300];
		fprintf(stderr, CMD ": the message was not sent: %s\n", pc_cli_rpc_strerror(r.c, rc, why, sizeof(why)));
		status = PC_CLI_FAIL;
	} else {
		status = remote_turn(&r, sigs);
	}
	pc_cli_rpc_free(r.c);
	return status;
}

int pc_cmd_agent(int argc, char **argv)
{
	opts_t o = {0};
	int status = parse(argc, argv, &o);
	if (status)
		return status < 0 ? PC_CLI_OK : status;
	sigset_t sigs;
	if (block_signals(&sigs))
		return PC_CLI_FAIL;
	status = o.local ? run_local(&o, &sigs) : run_remote(&o, &sigs);
	status = pc_cli_flush_stdout(CMD, status);
	return status;
}
