/*
 * Real `pincer gateway` children on one state directory, driven by
 * several WebSocket and HTTP clients at once, and what a client may hold
 * the gateway to afterwards: a ledger of everything a gateway
 * acknowledged (accepted runs, their session, message and idempotency
 * key; the runs a client was told had finished, and how), and the checks
 * of the store that ledger allows (each acknowledged message in its
 * transcript once, runs told finished recorded as ended, transcripts
 * well-formed, SQLite's integrity check).
 *
 * The load threads never assert: a gateway may die under them (SIGKILL)
 * at any moment, so every failure to send or read just ends the thread.
 * What they saw goes into the ledger; the test's own thread checks it.
 *
 * Every message carries a tag "[t:NNNNNN]" (its index in the ledger), so
 * its text can be found in a transcript whatever the content's shape.
 */
#ifndef PC_TESTS_GATEWAY_LOAD_H
#define PC_TESTS_GATEWAY_LOAD_H

#include <criterion/criterion.h>

#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <sqlite3.h>

#include "curl_client.h"
#include "gateway_harness.h"
#include "io/store/store.h"
#include "pincer_child.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define GL_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define GL_SANITIZED 1
#endif
#endif
#ifndef GL_SANITIZED
#define GL_SANITIZED 0
#endif

#define GL_START_MS 60000 /* sanitizer builds start slowly */
#define GL_MAX_MSGS 8192
#define GL_MAX_RUNS 8192
#define GL_MAX_SESSIONS 8
#define GL_HOME_MAX 64

/* An unsigned from the environment, or `def`. */
static inline unsigned gl_env_uint(const char *name, unsigned def)
{
	const char *v = getenv(name);
	return v && *v ? (unsigned)strtoul(v, NULL, 0) : def;
}

/* The seed: PINCER_TEST_SEED, else the clock; printed so a failure can
 * be replayed. */
static inline unsigned gl_seed(const char *test)
{
	unsigned seed = gl_env_uint("PINCER_TEST_SEED", (unsigned)(now_ms() ^ (uint64_t)getpid() << 16));
	fprintf(stderr, "%s: seed %u (PINCER_TEST_SEED=%u replays it)\n", test, seed, seed);
	return seed;
}

/* ---- the gateway children ---- */

typedef struct gl_gw {
	char home[GL_HOME_MAX], cfg[128], out[128], err[128];
	char pincer[PATH_MAX];
	const char *const *args; /* more flags for `pincer gateway` (NULL-terminated); may be NULL */
	pid_t pid;
	uint16_t port;
} gl_gw_t;

/* The pincer to run: $PINCER_TEST_BIN (another tree's build), else the
 * one built beside this test. */
static inline void gl_pincer_path(char *out, size_t n)
{
	const char *bin = getenv("PINCER_TEST_BIN");
	if (bin && *bin) {
		snprintf(out, n, "%s", bin);
		cr_assert_eq(access(out, X_OK), 0, "PINCER_TEST_BIN=%s is not executable", out);
	} else {
		find_pincer(out, n);
	}
}

/* A fresh state directory with the configuration every gateway of the
 * test reads: token auth, the embedded mock, the workspace in the
 * directory, queue mode followup (each message its own run). */
static inline void gl_home_init(char home[GL_HOME_MAX], const char *prefix)
{
	snprintf(home, GL_HOME_MAX, "/tmp/%.32s-XXXXXX", prefix);
	cr_assert_not_null(mkdtemp(home));
	char path[128], text[2048];
	snprintf(path, sizeof(path), "%s/pincer-test.json", home);
	snprintf(text, sizeof(text),
		 "{\"providers\":{\"mock\":{\"api\":\"openai-completions\",\"embedded\":true,\"apiKey\":\"k\"}},"
		 "\"agents\":{\"defaults\":{\"model\":\"mock/m1\",\"workspace\":\"%s\",\"maxConcurrent\":16}},"
		 "\"messages\":{\"queue\":{\"mode\":\"followup\",\"debounceMs\":0,\"cap\":1000}},"
		 "\"gateway\":{\"auth\":{\"mode\":\"token\",\"token\":\"" GW_TOKEN "\"}}}",
		 home);
	write_file(path, text);
}

/* Gateway `idx` of the state directory `home`. */
static inline void gl_gw_init(gl_gw_t *g, const char *home, int idx)
{
	memset(g, 0, sizeof(*g));
	snprintf(g->home, sizeof(g->home), "%s", home);
	snprintf(g->cfg, sizeof(g->cfg), "%s/pincer-test.json", home);
	snprintf(g->out, sizeof(g->out), "%s/gw%d.out", home, idx);
	snprintf(g->err, sizeof(g->err), "%s/gw%d.err", home, idx);
	gl_pincer_path(g->pincer, sizeof(g->pincer));
}

/* GET /readyz: the status, 0 when nothing answered. */
static inline long gl_readyz(uint16_t port)
{
	resp_t r = {0};
	curl_request(port, "GET", "/readyz", NULL, NULL, 0, 2000, &r);
	long st = r.code == CURLE_OK ? r.status : 0;
	resp_free(&r);
	return st;
}

/* Starts the gateway and waits until /readyz says ready. */
static inline void gl_gw_start(gl_gw_t *g)
{
	char home[GL_HOME_MAX]; /* a bound GCC sees through the inlining */
	snprintf(home, sizeof(home), "%.*s", GL_HOME_MAX - 1, g->home);
	g->port = start_gateway_child_with(g->pincer, home, g->cfg, g->out, g->err, g->args, GL_START_MS, &g->pid);
	uint64_t until = now_ms() + GL_START_MS;
	long st = 0;
	while ((st = gl_readyz(g->port)) != 200 && now_ms() < until)
		sleep_ms(10);
	cr_assert_eq(st, 200, "the gateway on port %u never got ready", (unsigned)g->port);
}

static inline void gl_gw_kill(gl_gw_t *g)
{
	cr_assert_eq(kill(g->pid, SIGKILL), 0);
	cr_assert_eq(child_wait(&g->pid, GL_START_MS), 128 + SIGKILL);
}

/* SIGTERM and a bounded wait: its exit status (see child_wait). */
static inline int gl_gw_term(gl_gw_t *g)
{
	if (!g->pid)
		return 0;
	kill(g->pid, SIGTERM);
	return child_wait(&g->pid, GL_START_MS);
}

/* ---- the ledger ---- */

typedef enum { GL_AGENT, GL_CHAT, GL_HTTP, GL_HTTP_STREAM } gl_via_t;

typedef struct gl_msg {
	char session[64];
	char idem[48]; /* "" for an HTTP request without Idempotency-Key */
	char text[360];
	gl_via_t via;
	int gw;        /* the gateway it was first sent to */
	int run;       /* index of its run once acknowledged, else -1 */
} gl_msg_t;

typedef enum { GL_TOLD_NOTHING = 0, GL_TOLD_OK, GL_TOLD_ERROR } gl_told_t;

typedef struct gl_run {
	char id[PC_STORE_ID_MAX + 1];
	int msg;
	int gw;          /* the gateway that acknowledged it */
	gl_told_t told;
	char told_how[160]; /* what the client was told, for the report */
	int round;       /* when acknowledged */
	/* filled by the checks */
	int wait_status; /* 0 unknown, else GL_TOLD_* or 3 = still not finished */
	char wait_reason[160];
} gl_run_t;

typedef struct gl_ledger {
	pthread_mutex_t mu;
	gl_msg_t msgs[GL_MAX_MSGS];
	int nmsgs;
	gl_run_t runs[GL_MAX_RUNS];
	int nruns;
	int round;
	int conflicts; /* idempotent retries answered with another run */
	char conflict[512];
	uint64_t acks, dups;
	bool http_idem; /* the gateway honours Idempotency-Key */
	bool retry_same_gw; /* retries go to the gateway the first send went to */
	const char *sessions[GL_MAX_SESSIONS];
	int nsessions;
} gl_ledger_t;

static inline gl_ledger_t *gl_ledger_new(const char *const *sessions, int n)
{
	gl_ledger_t *l = calloc(1, sizeof(*l));
	cr_assert_not_null(l);
	pthread_mutex_init(&l->mu, NULL);
	cr_assert_leq(n, GL_MAX_SESSIONS);
	for (int i = 0; i < n; i++)
		l->sessions[i] = sessions[i];
	l->nsessions = n;
	return l;
}

static inline void gl_ledger_free(gl_ledger_t *l)
{
	pthread_mutex_destroy(&l->mu);
	free(l);
}

/* A new message (what each kind of turn asks of the mock): its index, or
 * -1 when the ledger is full. */
static inline int gl_msg_new(gl_ledger_t *l, unsigned *rnd, gl_via_t via, bool keyed, int gw)
{
	static const char *const kinds[] = {
		/* plain */
		"[[mock:{\"text\":\"plain answer\"}]]",
		/* the demo: a clock call, then the echo */
		"",
		/* exec and file tools in parallel, then the demo's clock call, then the echo */
		"[[mock:{\"kind\":\"tool_calls\",\"tool_calls\":[{\"name\":\"exec\",\"arguments\":{\"command\":\"echo %d\"}},"
		"{\"name\":\"write\",\"arguments\":{\"path\":\"f%d.txt\",\"content\":\"x\"}}]}]]",
		/* slow streamed */
		"[[mock:{\"text\":\"a slow answer in many small pieces\",\"ttft_ms\":60,\"delay_ms\":40}]]",
		/* a slow tool call */
		"[[mock:{\"kind\":\"tool_calls\",\"ttft_ms\":80,\"tool_calls\":[{\"name\":\"exec\",\"arguments\":{\"command\":\"sleep 0.1; echo %d\"}}]}]]",
	};
	const char *session = l->sessions[rand_r(rnd) % (unsigned)l->nsessions];
	unsigned salt = rand_r(rnd) % 1000u;
	const char *kind = kinds[rand_r(rnd) % (sizeof(kinds) / sizeof(kinds[0]))];
	/* filled under the lock: other clients pick messages to retry */
	pthread_mutex_lock(&l->mu);
	int i = l->nmsgs < GL_MAX_MSGS ? l->nmsgs++ : -1;
	if (i >= 0) {
		gl_msg_t *m = &l->msgs[i];
		snprintf(m->session, sizeof(m->session), "%s", session);
		m->via = via;
		m->gw = gw;
		m->run = -1;
		if (keyed)
			snprintf(m->idem, sizeof(m->idem), "idem-%06d-%u", i, salt);
		char how[320];
		snprintf(how, sizeof(how), kind, i, i);
		snprintf(m->text, sizeof(m->text), "message [t:%06d] %s", i, how);
	}
	pthread_mutex_unlock(&l->mu);
	return i;
}

/* A message acknowledged as run `run_id` by gateway `gw`. An idempotent
 * retry naming another run than the first answer is a conflict. */
static inline void gl_ack(gl_ledger_t *l, int msg, const char *run_id, int gw)
{
	pthread_mutex_lock(&l->mu);
	l->acks++;
	gl_msg_t *m = &l->msgs[msg];
	if (m->run >= 0) {
		l->dups++;
		if (strcmp(l->runs[m->run].id, run_id) != 0) {
			if (!l->conflicts++)
				snprintf(l->conflict, sizeof(l->conflict),
					 "message %d (session %s, key %s) was acknowledged as run %s and again as %s",
					 msg, m->session, m->idem, l->runs[m->run].id, run_id);
		}
	} else if (l->nruns < GL_MAX_RUNS) {
		int r = l->nruns++;
		gl_run_t *x = &l->runs[r];
		snprintf(x->id, sizeof(x->id), "%s", run_id);
		x->msg = msg;
		x->gw = gw;
		x->round = l->round;
		m->run = r;
	}
	pthread_mutex_unlock(&l->mu);
}

/* A client was told that run `run_id` finished (ok or not). */
static inline void gl_told(gl_ledger_t *l, const char *run_id, gl_told_t told, const char *how)
{
	pthread_mutex_lock(&l->mu);
	for (int i = l->nruns - 1; i >= 0; i--) {
		if (!strcmp(l->runs[i].id, run_id)) {
			if (l->runs[i].told == GL_TOLD_NOTHING) {
				l->runs[i].told = told;
				snprintf(l->runs[i].told_how, sizeof(l->runs[i].told_how), "%s", how);
			}
			break;
		}
	}
	pthread_mutex_unlock(&l->mu);
}

/* A message sent before whose key may be retried by `via` (the same
 * request again: a key reused with other parameters is refused); -1 if
 * none. */
static inline int gl_pick_retry(gl_ledger_t *l, unsigned *rnd, gl_via_t via, int gw)
{
	if ((via == GL_HTTP || via == GL_HTTP_STREAM) && !l->http_idem)
		return -1; /* the same text again would be a second run */
	pthread_mutex_lock(&l->mu);
	int n = l->nmsgs, pick = -1;
	for (int tries = 0; n > 0 && tries < 16 && pick < 0; tries++) {
		int i = (int)(rand_r(rnd) % (unsigned)n);
		gl_msg_t *m = &l->msgs[i];
		if (m->idem[0] && m->via == via && m->text[0] && (!l->retry_same_gw || m->gw == gw))
			pick = i;
	}
	pthread_mutex_unlock(&l->mu);
	return pick;
}

/* ---- a WebSocket client that never asserts ---- */

/* Sends a request frame (takes `params`): 0 or the client's error. */
static inline int gl_ws_req(tws_t *ws, const char *id, const char *method, cJSON *params)
{
	cJSON *f = cJSON_CreateObject();
	cJSON_AddStringToObject(f, "type", "req");
	cJSON_AddStringToObject(f, "id", id);
	cJSON_AddStringToObject(f, "method", method);
	cJSON_AddItemToObject(f, "params", params);
	char *t = cJSON_PrintUnformatted(f);
	cJSON_Delete(f);
	int rc = tws_send_text(ws, t, strlen(t));
	cJSON_free(t);
	return rc;
}

/* Connected and past the handshake, or NULL. */
static inline tws_t *gl_ws_connect(uint16_t port)
{
	tws_options_t o = {.port = port, .timeout_ms = 5000};
	tws_t *ws = NULL;
	if (tws_connect(&o, &ws, NULL) != 0)
		return NULL;
	char *m = NULL;
	size_t len = 0;
	if (tws_recv(ws, 5000, &m, &len) != 0) /* the challenge */
		goto fail;
	free(m);
	int rc = gl_ws_req(ws, "c0", "connect", connect_params(GW_TOKEN, NULL));
	if (rc != 0 || tws_recv(ws, 10000, &m, &len) != 0)
		goto fail;
	cJSON *f = cJSON_ParseWithLength(m, len);
	free(m);
	bool ok = f && jok(f);
	cJSON_Delete(f);
	if (ok)
		return ws;
fail:
	tws_free(ws);
	return NULL;
}


/* ---- the load ---- */

typedef struct gl_load {
	gl_ledger_t *l;
	uint16_t port;
	int gw;
	unsigned seed;
	int *stop;   /* set: send nothing new, and leave once nothing is owed */
	int *quit;   /* set: leave now */
	bool http;   /* an HTTP client, else WebSocket */
	int max_pending;
	unsigned pause_ms; /* > 0: send in bursts, then wait for every answer
			    * and up to this long before the next burst */
	int done;    /* set by the thread as it leaves */
	pthread_t th;
} gl_load_t;

#define GL_PEND 32

typedef struct gl_pend {
	char id[16];
	char run[PC_STORE_ID_MAX + 1]; /* chat.send: the run whose end is owed */
	int msg;
	gl_via_t via;
	bool acked;
	bool used;
} gl_pend_t;

static inline void gl_ws_frame(gl_load_t *ld, gl_pend_t *pend, cJSON *f)
{
	const char *type = jstr(f, "type");
	const cJSON *p = jget(f, "payload");
	if (!strcmp(type, "event")) {
		/* chat.send's end comes as a chat event */
		if (strcmp(jstr(f, "event"), "chat") != 0)
			return;
		const char *state = jstr(p, "state"), *run = jstr(p, "runId");
		bool final = !strcmp(state, "final");
		if (!final && strcmp(state, "error") != 0 && strcmp(state, "aborted") != 0)
			return;
		gl_told(ld->l, run, final ? GL_TOLD_OK : GL_TOLD_ERROR, final ? "chat final" : jstr(p, "errorMessage"));
		for (int i = 0; i < GL_PEND; i++)
			if (pend[i].used && pend[i].acked && !strcmp(pend[i].run, run))
				pend[i].used = false;
		return;
	}
	if (strcmp(type, "res") != 0)
		return;
	gl_pend_t *x = NULL;
	for (int i = 0; i < GL_PEND && !x; i++)
		if (pend[i].used && !strcmp(pend[i].id, jstr(f, "id")))
			x = &pend[i];
	if (!x)
		return;
	const char *run = jstr(p, "runId");
	const char *status = jstr(p, "status");
	if (!x->acked) {
		if (!jok(f) || !*run) { /* refused: nothing was acknowledged */
			x->used = false;
			return;
		}
		gl_ack(ld->l, x->msg, run, ld->gw);
		x->acked = true;
		snprintf(x->run, sizeof(x->run), "%s", run);
		/* chat.send: the end comes as a chat event, except for a repeat,
		 * which says how the first run is and gets no events */
		if (x->via == GL_CHAT && strcmp(status, "started") != 0) {
			if (!strcmp(status, "ok"))
				gl_told(ld->l, run, GL_TOLD_OK, "chat.send repeat: ok");
			else if (!strcmp(status, "error"))
				gl_told(ld->l, run, GL_TOLD_ERROR, "chat.send repeat: error");
			x->used = false;
		}
		return;
	}
	/* agent's second answer: the run ended */
	if (*run) {
		char how[160];
		snprintf(how, sizeof(how), "agent final: %s %.60s %.60s", status, jerr(f),
			 jstr(jget(f, "error"), "message"));
		gl_told(ld->l, run, jok(f) && !strcmp(status, "ok") ? GL_TOLD_OK : GL_TOLD_ERROR, how);
	}
	x->used = false;
}

/* A WebSocket client: agent and chat.send to the shared sessions, several
 * in flight, some of them retries of earlier keys. */
static inline void *gl_ws_thread(void *arg)
{
	gl_load_t *ld = arg;
	unsigned rnd = ld->seed;
	tws_t *ws = gl_ws_connect(ld->port);
	if (!ws) {
		STORE(ld->done, 1);
		return NULL;
	}
	gl_pend_t pend[GL_PEND];
	memset(pend, 0, sizeof(pend));
	unsigned next_id = 0;
	uint64_t next_send = now_ms();
	int burst = ld->max_pending;
	while (!LOAD(*ld->quit)) {
		int npend = 0;
		for (int i = 0; i < GL_PEND; i++)
			npend += pend[i].used;
		if (LOAD(*ld->stop) && npend == 0)
			break;
		if (ld->pause_ms && burst == 0 && npend == 0) {
			burst = 1 + (int)(rand_r(&rnd) % (unsigned)ld->max_pending);
			next_send = now_ms() + rand_r(&rnd) % ld->pause_ms;
		}
		if (!LOAD(*ld->stop) && npend < ld->max_pending && now_ms() >= next_send &&
		    (!ld->pause_ms || burst > 0)) {
			burst--;
			int slot = 0;
			while (pend[slot].used)
				slot++;
			bool chat = rand_r(&rnd) % 3 == 0;
			gl_via_t via = chat ? GL_CHAT : GL_AGENT;
			int msg = rand_r(&rnd) % 5 == 0 ? gl_pick_retry(ld->l, &rnd, via, ld->gw) : -1;
			if (msg < 0)
				msg = gl_msg_new(ld->l, &rnd, via, true, ld->gw);
			if (msg < 0)
				break;
			const gl_msg_t *m = &ld->l->msgs[msg];
			gl_pend_t *x = &pend[slot];
			snprintf(x->id, sizeof(x->id), "q%u", ++next_id);
			x->msg = msg;
			x->via = via;
			x->acked = false;
			x->used = true;
			cJSON *params = agent_params(m->text, m->idem, m->session);
			if (gl_ws_req(ws, x->id, chat ? "chat.send" : "agent", params) != 0)
				break;
			next_send = now_ms() + rand_r(&rnd) % 60u;
		}
		char *t = NULL;
		size_t len = 0;
		int rc = tws_recv(ws, 10, &t, &len);
		if (rc == PC_ETIMEDOUT)
			continue;
		if (rc != 0)
			break; /* the gateway went away */
		cJSON *f = cJSON_ParseWithLength(t, len);
		free(t);
		if (f)
			gl_ws_frame(ld, pend, f);
		cJSON_Delete(f);
	}
	tws_free(ws);
	STORE(ld->done, 1);
	return NULL;
}

/* The run id in an HTTP answer (chatcmpl-<run id>), or "". */
static inline void gl_chatcmpl_run(const char *body, char *out, size_t n)
{
	const char *p = strstr(body, "\"id\":\"chatcmpl-");
	size_t k = 0;
	if (p)
		for (p += 15; *p && *p != '"' && k + 1 < n; p++)
			out[k++] = *p;
	out[k] = '\0';
}

/* One completion of message `msg`, streamed or not: what it acknowledged
 * (run id) and told. Returns the run id in `run` ("" when none). */
static inline void gl_http_send(gl_load_t *ld, int msg, bool stream, char *run, size_t n)
{
	const gl_msg_t *m = &ld->l->msgs[msg];
	cJSON *b = cJSON_CreateObject();
	cJSON_AddStringToObject(b, "model", "pincer");
	cJSON_AddBoolToObject(b, "stream", stream);
	cJSON *u = cJSON_CreateObject();
	cJSON_AddStringToObject(u, "role", "user");
	cJSON_AddStringToObject(u, "content", m->text);
	cJSON_AddItemToArray(cJSON_AddArrayToObject(b, "messages"), u);
	char *body = cJSON_PrintUnformatted(b);
	cJSON_Delete(b);
	char keyh[128], idemh[128];
	snprintf(keyh, sizeof(keyh), "x-pincer-session-key: %s", m->session);
	snprintf(idemh, sizeof(idemh), "Idempotency-Key: %s", m->idem);
	const char *hdrs[] = {"Authorization: Bearer " GW_TOKEN, keyh, m->idem[0] ? idemh : NULL, NULL};
	resp_t r = {0};
	curl_request(ld->port, "POST", "/v1/chat/completions", hdrs, body, strlen(body), 60000, &r);
	cJSON_free(body);
	run[0] = '\0';
	if (r.status == 200)
		gl_chatcmpl_run(r.body, run, n);
	if (*run) {
		gl_ack(ld->l, msg, run, ld->gw);
		bool done = r.code == CURLE_OK &&
			    (!stream || (strstr(r.body, "[DONE]") && !strstr(r.body, "data: {\"error\"")));
		if (done)
			gl_told(ld->l, run, GL_TOLD_OK, "http 200");
		else if (r.code == CURLE_OK)
			gl_told(ld->l, run, GL_TOLD_ERROR, "http stream error event");
	}
	resp_free(&r);
}

/* An HTTP client: completions, plain and streamed, some with an
 * Idempotency-Key, some of those sent again. */
static inline void *gl_http_thread(void *arg)
{
	gl_load_t *ld = arg;
	unsigned rnd = ld->seed;
	while (!LOAD(*ld->stop) && !LOAD(*ld->quit)) {
		bool stream = rand_r(&rnd) % 2;
		gl_via_t via = stream ? GL_HTTP_STREAM : GL_HTTP;
		int msg = rand_r(&rnd) % 4 == 0 ? gl_pick_retry(ld->l, &rnd, via, ld->gw) : -1;
		if (msg < 0)
			msg = gl_msg_new(ld->l, &rnd, via, rand_r(&rnd) % 2, ld->gw);
		if (msg < 0)
			break;
		char run[PC_STORE_ID_MAX + 1];
		gl_http_send(ld, msg, stream, run, sizeof(run));
		if (!*run && gl_readyz(ld->port) != 200)
			break; /* the gateway went away */
		if (ld->pause_ms && !LOAD(*ld->stop))
			sleep_ms(rand_r(&rnd) % ld->pause_ms); /* think time, not a wait for anything */
	}
	STORE(ld->done, 1);
	return NULL;
}

static inline void gl_load_start(gl_load_t *ld)
{
	cr_assert_eq(pthread_create(&ld->th, NULL, ld->http ? gl_http_thread : gl_ws_thread, ld), 0);
}

/* Whether the gateway honours Idempotency-Key: the same key twice in a
 * session of its own answers the same completion id. */
static inline bool gl_probe_http_idem(uint16_t port)
{
	static const char body[] = "{\"model\":\"pincer\",\"messages\":[{\"role\":\"user\",\"content\":"
				   "\"probe [[mock:{\\\"text\\\":\\\"p\\\"}]]\"}]}";
	const char *hdrs[] = {"Authorization: Bearer " GW_TOKEN, "x-pincer-session-key: idem-probe",
			      "Idempotency-Key: idem-probe-1", NULL};
	char ids[2][PC_STORE_ID_MAX + 1];
	for (int i = 0; i < 2; i++) {
		resp_t r = {0};
		curl_request(port, "POST", "/v1/chat/completions", hdrs, body, strlen(body), 60000, &r);
		cr_assert_eq(r.status, 200, "probe: %ld %s", r.status, r.body);
		gl_chatcmpl_run(r.body, ids[i], sizeof(ids[i]));
		resp_free(&r);
	}
	return !strcmp(ids[0], ids[1]);
}

/* ---- the checks ---- */

/* PRAGMA integrity_check on the file, opened read-only. */
static inline void gl_check_integrity(const char *path)
{
	sqlite3 *db = NULL;
	cr_assert_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
	sqlite3_stmt *st = NULL;
	cr_assert_eq(sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &st, NULL), SQLITE_OK);
	cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
	const char *res = (const char *)sqlite3_column_text(st, 0);
	bool ok = res && !strcmp(res, "ok");
	char copy[256];
	snprintf(copy, sizeof(copy), "%s", res ? res : "(null)");
	sqlite3_finalize(st);
	sqlite3_close(db);
	cr_assert(ok, "integrity_check: %s", copy);
}

/* The store of `home`, opened from this process (the gateways may run). */
typedef struct gl_store {
	pc_runtime_t *rt;
	pc_store_t *s;
	char path[PATH_MAX];
} gl_store_t;

static inline void gl_store_open(gl_store_t *st, const char *home)
{
	st->rt = start_rt(2);
	snprintf(st->path, sizeof(st->path), "%s/state.db", home);
	pc_store_config_t cfg;
	pc_store_config_init(&cfg);
	cfg.path = st->path;
	cr_assert_eq(pc_store_open(st->rt, &cfg, &st->s), 0);
}

static inline void gl_store_close(gl_store_t *st)
{
	cr_assert_eq(pc_store_close(st->s), 0);
	FREE_RUNTIME_CHECKED(st->rt);
}

static inline bool gl_status_ended(int32_t s)
{
	return s != PC_STORE_RUN_ACCEPTED && s != PC_STORE_RUN_RUNNING;
}

/* What the transcript checks found, summed over sessions. */
typedef struct gl_report {
	int failures;
	char first[1024];
	int *user_count;   /* per message index: user messages carrying its tag */
	int interrupted_calls; /* unanswered calls of runs a crash interrupted */
	int messages, runs_seen;
} gl_report_t;

static inline void gl_fail(gl_report_t *rep, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	if (!rep->failures++)
		vsnprintf(rep->first, sizeof(rep->first), fmt, ap);
	else if (rep->failures <= 20) {
		char line[1024];
		vsnprintf(line, sizeof(line), fmt, ap);
		fprintf(stderr, "  also: %s\n", line);
	}
	va_end(ap);
}

/* The run's status in the store (-1: not there). */
static inline int32_t gl_run_status(gl_store_t *st, const char *run_id, char *code, size_t n)
{
	pc_store_reply_t rep;
	if (pc_store_run_get(st->s, run_id, &rep) != 0)
		return -1;
	if (code)
		snprintf(code, n, "%s", rep.code);
	return rep.status;
}

static inline bool gl_seen(char (*ids)[PC_STORE_ID_MAX + 1], int n, const char *id)
{
	for (int i = 0; i < n; i++)
		if (!strcmp(ids[i], id))
			return true;
	return false;
}

/* One session's transcript: runs do not interleave (each run's messages
 * are contiguous), every tool call is answered once by the toolResults
 * right after it (unless its run was cut short by a crash: not ended ok,
 * and nothing of its own follows), and the tags of user messages are
 * counted into rep->user_count. */
static inline void gl_check_transcript(gl_store_t *st, const char *key, const gl_ledger_t *l, gl_report_t *rep)
{
	pc_store_history_t *h = NULL;
	int rc = pc_store_history(st->s, key, &h);
	if (rc == PC_ENOTFOUND)
		return;
	cr_assert_eq(rc, 0, "history of %s: %s", key, pc_store_strerror(rc));
	size_t n = pc_store_history_count(h);
	rep->messages += (int)n;
	int cap = (int)n + 1, nclosed = 0;
	char(*closed)[PC_STORE_ID_MAX + 1] = calloc((size_t)cap, sizeof(*closed));
	cr_assert_not_null(closed);
	char cur[PC_STORE_ID_MAX + 1] = "";
	for (size_t i = 0; i < n; i++) {
		pc_store_msg_t m;
		pc_store_history_get(h, i, &m);
		const char *run = m.run_id ? m.run_id : "";
		if (strcmp(run, cur) != 0) {
			if (*run && gl_seen(closed, nclosed, run))
				gl_fail(rep, "%s: run %s's messages are interleaved with another run's (again at seq %lld)",
					key, run, (long long)m.seq);
			if (*cur && !gl_seen(closed, nclosed, cur))
				snprintf(closed[nclosed++], sizeof(closed[0]), "%s", cur);
			snprintf(cur, sizeof(cur), "%s", run);
			rep->runs_seen++;
		}
		if (!strcmp(m.role, "user")) {
			for (const char *t = strstr(m.content, "[t:"); t; t = strstr(t + 3, "[t:")) {
				int tag = atoi(t + 3);
				if (tag >= 0 && tag < l->nmsgs) {
					rep->user_count[tag]++;
					if (strcmp(l->msgs[tag].session, key) != 0)
						gl_fail(rep, "message %d of session %s is in %s's transcript", tag,
							l->msgs[tag].session, key);
				}
			}
		}
		cJSON *calls = strcmp(m.role, "assistant") || !m.tool_call_ids ? NULL : cJSON_Parse(m.tool_call_ids);
		int ncalls = cJSON_GetArraySize(calls);
		if (ncalls > 0) {
			int *answered = calloc((size_t)ncalls, sizeof(int));
			cr_assert_not_null(answered);
			size_t j = i + 1;
			for (; j < n; j++) {
				pc_store_msg_t r;
				pc_store_history_get(h, j, &r);
				if (strcmp(r.role, "toolResult") != 0)
					break;
				cJSON *ids = r.tool_call_ids ? cJSON_Parse(r.tool_call_ids) : NULL;
				const char *id = cJSON_IsArray(ids) ? cJSON_GetStringValue(cJSON_GetArrayItem(ids, 0))
								    : cJSON_GetStringValue(ids);
				int k = 0;
				for (; k < ncalls; k++)
					if (id && !strcmp(id, cJSON_GetStringValue(cJSON_GetArrayItem(calls, k))))
						break;
				if (k == ncalls)
					gl_fail(rep, "%s seq %lld: a toolResult for %s, which the call before did not make",
						key, (long long)r.seq, id ? id : "(none)");
				else if (answered[k]++)
					gl_fail(rep, "%s seq %lld: call %s answered twice", key, (long long)r.seq, id);
				cJSON_Delete(ids);
			}
			int missing = 0;
			for (int k = 0; k < ncalls; k++)
				missing += !answered[k];
			if (missing) {
				/* the crash exception: nothing of this run follows, and it did not end ok */
				bool own_follows = false;
				if (j < n) {
					pc_store_msg_t r;
					pc_store_history_get(h, j, &r);
					own_follows = r.run_id && !strcmp(r.run_id, run);
				}
				int32_t s = gl_run_status(st, run, NULL, 0);
				if (!own_follows && s != PC_STORE_RUN_OK)
					rep->interrupted_calls += missing;
				else
					gl_fail(rep, "%s seq %lld: %d of %d tool calls of run %s (status %d) unanswered", key,
						(long long)m.seq, missing, ncalls, run, s);
			}
			free(answered);
		}
		cJSON_Delete(calls);
	}
	free(closed);
	pc_store_history_free(h);
}

/* Every session the ledger drove: transcripts well-formed, and how many
 * times each message's tag is in them (rep->user_count, the caller's). */
static inline void gl_check_transcripts(gl_store_t *st, const gl_ledger_t *l, gl_report_t *rep)
{
	memset(rep->user_count, 0, sizeof(int) * GL_MAX_MSGS);
	for (int i = 0; i < l->nsessions; i++)
		gl_check_transcript(st, l->sessions[i], l, rep);
}

/* Runs a client was told had finished read back as ended, and as told. */
static inline void gl_check_told(gl_store_t *st, const gl_ledger_t *l, gl_report_t *rep)
{
	for (int i = 0; i < l->nruns; i++) {
		const gl_run_t *r = &l->runs[i];
		if (r->told == GL_TOLD_NOTHING)
			continue;
		char code[PC_STORE_CODE_MAX + 1] = "";
		int32_t s = gl_run_status(st, r->id, code, sizeof(code));
		if (s < 0 || !gl_status_ended(s))
			gl_fail(rep, "run %s (message %d, %s) was told %s (%s) but the store has status %d", r->id,
				r->msg, l->msgs[r->msg].session, r->told == GL_TOLD_OK ? "ok" : "failed", r->told_how, s);
		else if ((r->told == GL_TOLD_OK) != (s == PC_STORE_RUN_OK))
			gl_fail(rep, "run %s was told %s (%s) but the store says %d (%s)", r->id,
				r->told == GL_TOLD_OK ? "ok" : "failed", r->told_how, s, code);
	}
}

/* Each acknowledged message is in its transcript exactly once, or its
 * run ended with a visible error: agent.wait says it failed, and why, and
 * the store has it ended (an error only this process believes would be
 * contradicted by the next one running it). */
static inline void gl_check_acknowledged(gl_store_t *st, const gl_ledger_t *l, gl_report_t *rep, int *lost)
{
	*lost = 0;
	for (int i = 0; i < l->nruns; i++) {
		const gl_run_t *r = &l->runs[i];
		int c = rep->user_count[r->msg];
		if (c > 1) {
			gl_fail(rep, "message %d (run %s, session %s) is in the transcript %d times", r->msg, r->id,
				l->msgs[r->msg].session, c);
			continue;
		}
		if (c == 1)
			continue;
		char code[PC_STORE_CODE_MAX + 1] = "";
		int32_t s = gl_run_status(st, r->id, code, sizeof(code));
		if (r->wait_status == GL_TOLD_ERROR && r->wait_reason[0] && s >= 0 && gl_status_ended(s))
			continue;
		(*lost)++;
		gl_fail(rep,
			"message %d (run %s, session %s, key %s, acknowledged in round %d) is not in the transcript; "
			"agent.wait says %s (%s); the store has status %d (%s)",
			r->msg, r->id, l->msgs[r->msg].session, l->msgs[r->msg].idem, r->round,
			r->wait_status == GL_TOLD_OK	  ? "ok"
			: r->wait_status == GL_TOLD_ERROR ? "error"
			: r->wait_status == 3		  ? "not finished"
							  : "nothing",
			r->wait_reason, s, code);
	}
}

/* agent.wait on every acknowledged run not known to be over, all at once
 * on one connection, until `deadline`: wait_status and wait_reason. */
static inline void gl_wait_runs(gl_ledger_t *l, uint16_t port, uint64_t deadline)
{
	cl_t *c = cl_connect(port);
	int sent = 0;
	for (int i = 0; i < l->nruns; i++) {
		gl_run_t *r = &l->runs[i];
		if (r->wait_status == GL_TOLD_OK || r->wait_status == GL_TOLD_ERROR)
			continue;
		cJSON *p = cJSON_CreateObject();
		cJSON_AddStringToObject(p, "runId", r->id);
		cJSON_AddNumberToObject(p, "timeoutMs", (double)left_ms(deadline));
		char id[32];
		snprintf(id, sizeof(id), "w%d", i);
		cr_assert_eq(gl_ws_req(c->ws, id, "agent.wait", p), 0);
		r->wait_status = 3;
		sent++;
	}
	while (sent > 0) {
		cJSON *f = cl_frame(c, left_ms(deadline + 2000));
		if (!f)
			break;
		if (!strcmp(jstr(f, "type"), "res") && jstr(f, "id")[0] == 'w') {
			int i = atoi(jstr(f, "id") + 1);
			gl_run_t *r = &l->runs[i];
			const cJSON *p = jget(f, "payload");
			const char *status = jstr(p, "status");
			sent--;
			if (!jok(f)) { /* not an answer about the run: unknown to the gateway */
				r->wait_status = 3;
				snprintf(r->wait_reason, sizeof(r->wait_reason), "agent.wait refused: %s: %s", jerr(f),
					 jstr(jget(f, "error"), "message"));
			} else if (!strcmp(status, "ok")) {
				r->wait_status = GL_TOLD_OK;
			} else if (!strcmp(status, "error")) {
				r->wait_status = GL_TOLD_ERROR;
				const cJSON *e = jget(p, "error");
				snprintf(r->wait_reason, sizeof(r->wait_reason), "%s",
					 cJSON_IsString(e) ? e->valuestring : cJSON_IsObject(e) ? jstr(e, "message") : "");
			} else {
				r->wait_status = 3;
				snprintf(r->wait_reason, sizeof(r->wait_reason), "status %s", status);
			}
		}
		cJSON_Delete(f);
	}
	cl_free(c);
}

/* Every check of the store: what it found goes into `rep` (first failure
 * kept, others printed), with a line of counts on stderr. */
static inline void gl_check_store(const gl_ledger_t *l, const char *home, const char *when, gl_report_t *rep)
{
	gl_store_t st;
	gl_store_open(&st, home);
	gl_report_t r = {.user_count = calloc(GL_MAX_MSGS, sizeof(int))};
	cr_assert_not_null(r.user_count);
	gl_check_transcripts(&st, l, &r);
	gl_check_told(&st, l, &r);
	int lost = 0;
	gl_check_acknowledged(&st, l, &r, &lost);
	gl_store_close(&st);
	if (l->conflicts)
		gl_fail(&r, "%d idempotent retries named another run: %s", l->conflicts, l->conflict);
	gl_check_integrity(st.path);
	int told = 0, ok = 0, err = 0, open = 0;
	const char *reason = "";
	for (int i = 0; i < l->nruns; i++) {
		if (l->runs[i].wait_status == GL_TOLD_ERROR && !*reason)
			reason = l->runs[i].wait_reason;
		told += l->runs[i].told != GL_TOLD_NOTHING;
		ok += l->runs[i].wait_status == GL_TOLD_OK;
		err += l->runs[i].wait_status == GL_TOLD_ERROR;
		open += l->runs[i].wait_status == 3;
	}
	fprintf(stderr,
		"%s: %d messages, %d runs acknowledged (%llu answers, %llu repeats), %d told finished; "
		"now ok %d, error %d, unfinished %d; %d transcript messages in %d run stretches, %d calls left "
		"unanswered by interrupted runs; %d lost (an error: \"%s\"); %d failures%s%s\n",
		when, l->nmsgs, l->nruns, (unsigned long long)l->acks, (unsigned long long)l->dups, told, ok, err, open,
		r.messages, r.runs_seen, r.interrupted_calls, lost, reason, r.failures, r.failures ? ": " : "",
		r.failures ? r.first : "");
	if (r.failures && !rep->failures)
		snprintf(rep->first, sizeof(rep->first), "%.60s: %.900s", when, r.first);
	rep->failures += r.failures;
	free(r.user_count);
}

#endif
