/*
 * One writer per session across processes: two `pincer gateway`
 * children on ONE state directory (two ports) drive the same few
 * sessions at once, with WebSocket clients (agent, chat.send) and HTTP
 * completions, runs with tool calls, queue mode followup, in bursts with
 * pauses so that a session goes idle on one gateway and its lease can
 * pass to the other. Then both stop (SIGTERM, bounded wait) and the
 * store, read through its C API, must show: no run's messages
 * interleaved with another's in any transcript, every tool call paired,
 * every acknowledged message there exactly once, integrity ok. How many
 * runs each gateway finished in each session is printed; both must have
 * run turns of a shared session, i.e. the lease changed hands.
 *
 * PINCER_TEST_SEED replays a seed, PINCER_TWO_GW_SECONDS sets the load's
 * length (30 s, 10 s under a sanitizer), PINCER_TEST_BIN runs another
 * pincer (a tree without session leases must fail here). Two small tests
 * send an idempotent retry (WebSocket, HTTP) to the gateway that does not
 * run the first run, while it runs. Every wait is bounded; only this
 * test's children are signalled, by pid.
 */
#include "gateway_load.h"

#define GATEWAYS 2
#define WS_CLIENTS 2 /* per gateway */
#define HTTP_CLIENTS 1
#define SESSIONS 4

Test(two_gateways, one_writer_per_session_across_processes, .timeout = 900)
{
	unsigned seed = gl_seed("two_gateways");
	unsigned secs = gl_env_uint("PINCER_TWO_GW_SECONDS", GL_SANITIZED ? 10 : 30);
	static const char *const sessions[SESSIONS] = {"shared-a", "shared-b", "shared-c", "shared-d"};
	gl_ledger_t *l = gl_ledger_new(sessions, SESSIONS);
	char home[GL_HOME_MAX];
	gl_home_init(home, "pincer-two-gw");
	curl_global_init(CURL_GLOBAL_DEFAULT);
	gl_gw_t g[GATEWAYS];
	for (int i = 0; i < GATEWAYS; i++) {
		gl_gw_init(&g[i], home, i);
		gl_gw_start(&g[i]);
	}
	l->http_idem = gl_probe_http_idem(g[0].port);
	/* a retry on the other gateway has a test of its own (below) */
	l->retry_same_gw = true;
	fprintf(stderr, "two_gateways: Idempotency-Key on HTTP is %s; load for %u s\n",
		l->http_idem ? "honoured" : "not honoured", secs);

	enum { PER = WS_CLIENTS + HTTP_CLIENTS };
	int stop = 0, quit = 0;
	gl_load_t ld[GATEWAYS * PER];
	memset(ld, 0, sizeof(ld));
	for (int i = 0; i < GATEWAYS * PER; i++) {
		ld[i] = (gl_load_t){.l = l, .port = g[i / PER].port, .gw = i / PER, .seed = seed * 31u + (unsigned)i,
				    .stop = &stop, .quit = &quit, .http = i % PER >= WS_CLIENTS, .max_pending = 3,
				    .pause_ms = 2500};
		gl_load_start(&ld[i]);
	}
	uint64_t t0 = now_ms();
	sleep_ms(secs * 1000u); /* the load's length */
	STORE(stop, 1);
	/* every client leaves once what it was owed came (bounded) */
	uint64_t until = now_ms() + (GL_SANITIZED ? 180000 : 90000);
	bool all = false;
	while (!all && now_ms() < until) {
		all = true;
		for (int i = 0; i < GATEWAYS * PER; i++)
			all = all && LOAD(ld[i].done);
		if (!all)
			sleep_ms(20);
	}
	STORE(quit, 1);
	for (int i = 0; i < GATEWAYS * PER; i++)
		pthread_join(ld[i].th, NULL);
	fprintf(stderr, "two_gateways: load %llu ms, drained: %s\n", (unsigned long long)(now_ms() - t0),
		all ? "yes" : "no, some answers never came");
	int codes[GATEWAYS];
	for (int i = 0; i < GATEWAYS; i++)
		codes[i] = gl_gw_term(&g[i]);

	/* who ran what: runs told ok, per gateway and session */
	int ran[GATEWAYS][SESSIONS] = {{0}}, unfinished = 0;
	for (int i = 0; i < l->nruns; i++) {
		gl_run_t *r = &l->runs[i];
		for (int k = 0; k < SESSIONS; k++)
			if (!strcmp(l->msgs[r->msg].session, sessions[k]) && r->told == GL_TOLD_OK)
				ran[r->gw][k]++;
		if (r->told == GL_TOLD_NOTHING && ++unfinished <= 10)
			fprintf(stderr, "two_gateways: run %s (message %d, %s, via %d, key %s, gateway %d) never told its end\n",
				r->id, r->msg, l->msgs[r->msg].session, (int)l->msgs[r->msg].via, l->msgs[r->msg].idem,
				r->gw);
		/* no crash here: what the clients heard is all agent.wait would say */
		r->wait_status = r->told == GL_TOLD_NOTHING ? 3 : (int)r->told;
		_Static_assert(sizeof(r->wait_reason) == sizeof(r->told_how), "same size");
		memcpy(r->wait_reason, r->told_how, sizeof(r->wait_reason));
	}
	int shared = 0, total[GATEWAYS] = {0};
	for (int k = 0; k < SESSIONS; k++) {
		fprintf(stderr, "two_gateways: %s: runs finished by gateway 0: %d, by gateway 1: %d\n", sessions[k],
			ran[0][k], ran[1][k]);
		shared += ran[0][k] > 0 && ran[1][k] > 0;
		for (int i = 0; i < GATEWAYS; i++)
			total[i] += ran[i][k];
	}
	gl_report_t rep = {0};
	gl_check_store(l, home, "two gateways", &rep);
	curl_global_cleanup();
	cr_assert_eq(rep.failures, 0, "%d failures (seed %u); the first: %s (state left in %s)", rep.failures, seed,
		     rep.first, home);
	for (int i = 0; i < GATEWAYS; i++)
		cr_assert_eq(codes[i], 0, "gateway %d did not stop on SIGTERM (%d; see %s)", i, codes[i], g[i].err);
	cr_assert_eq(unfinished, 0, "%d acknowledged runs never told their end (seed %u)", unfinished, seed);
	cr_assert(total[0] > 0 && total[1] > 0 && shared > 0,
		  "the lease never changed hands: gateway 0 ran %d turns, gateway 1 %d, %d sessions shared (seed %u)",
		  total[0], total[1], shared, seed);
	gl_ledger_free(l);
	rm_tree(home);
}

/* An idempotent retry that reaches the other gateway while the first run
 * is still going there must not be told that run failed: it is answered
 * with the first run's id and, in the end, the first run's own outcome. */
/* Two gateways on a fresh state directory in `home`. */
static void two_started(char home[GL_HOME_MAX], gl_gw_t g[2])
{
	gl_home_init(home, "pincer-two-gw-retry");
	curl_global_init(CURL_GLOBAL_DEFAULT);
	for (int i = 0; i < 2; i++) {
		gl_gw_init(&g[i], home, i);
		gl_gw_start(&g[i]);
	}
}

#define SLOW_MSG "slow [[mock:{\"text\":\"finally\",\"ttft_ms\":1500}]]"

Test(two_gateways, a_retry_on_the_other_gateway_is_told_how_the_run_ended, .timeout = 300)
{
	char home[GL_HOME_MAX];
	gl_gw_t g[2];
	two_started(home, g);
	static const char msg[] = SLOW_MSG;
	cl_t *a = cl_connect(g[0].port), *b = cl_connect(g[1].port);
	char ida[32], idb[32];
	cl_req(a, "agent", agent_params(msg, "retry-key-1", "retry-s"), ida);
	cJSON *acc = cl_await_res(a, ida, 30000);
	cr_assert(acc && jok(acc), "not accepted");
	char run[PC_STORE_ID_MAX + 1];
	snprintf(run, sizeof(run), "%s", jstr(jget(acc, "payload"), "runId"));
	cJSON_Delete(acc);
	/* the same key, on the other gateway, while the run is going */
	cl_req(b, "agent", agent_params(msg, "retry-key-1", "retry-s"), idb);
	cJSON *rep = cl_await_res(b, idb, 30000);
	cr_assert(rep && jok(rep), "the retry was not accepted");
	cr_assert_str_eq(jstr(jget(rep, "payload"), "runId"), run, "the retry started another run");
	cJSON_Delete(rep);
	/* and agent.wait on the other gateway */
	cJSON *wp = cJSON_CreateObject();
	cJSON_AddStringToObject(wp, "runId", run);
	cJSON_AddNumberToObject(wp, "timeoutMs", 30000);
	char idw[32];
	cl_req(b, "agent.wait", wp, idw);
	cJSON *fa = cl_await_res(a, ida, 30000), *fb = cl_await_res(b, idb, 30000), *fw = cl_await_res(b, idw, 30000);
	cr_assert_not_null(fw, "no answer to agent.wait");
	cr_assert_not_null(fb, "no final answer to the retry");
	char tw[256];
	snprintf(tw, sizeof(tw), "%s %s", jstr(jget(fw, "payload"), "status"), jstr(jget(fw, "payload"), "error"));
	char *raw_b = cJSON_PrintUnformatted(fb), *raw_w = cJSON_PrintUnformatted(fw);
	fprintf(stderr, "retry's final answer: %s\nagent.wait on the other gateway: %s\n", raw_b, raw_w);
	cJSON_free(raw_b);
	cJSON_free(raw_w);
	cJSON_Delete(fw);
	cr_assert_not_null(fa, "no final answer on the first gateway");
	char ta[256], tb[256];
	snprintf(ta, sizeof(ta), "%s %s", jstr(jget(fa, "payload"), "status"), jstr(jget(fa, "error"), "message"));
	snprintf(tb, sizeof(tb), "%s %s", jstr(jget(fb, "payload"), "status"), jstr(jget(fb, "error"), "message"));
	cJSON_Delete(fa);
	cJSON_Delete(fb);
	cl_free(a);
	cl_free(b);
	for (int i = 0; i < 2; i++)
		cr_assert_eq(gl_gw_term(&g[i]), 0);
	curl_global_cleanup();
	cr_assert_str_eq(ta, "ok ", "the first gateway said: %s", ta);
	cr_assert_str_eq(tb, ta, "run %s: its own gateway said '%s', the retry on the other was told '%s' (agent.wait there: '%s')",
			 run, ta, tb, tw);
	cr_assert_str_eq(tw, ta, "run %s: its own gateway said '%s', agent.wait on the other '%s'", run, ta, tw);
	rm_tree(home);
}

typedef struct http_call {
	uint16_t port;
	const char *session;
	resp_t r;
	pthread_t th;
} http_call_t;

static void slow_http(http_call_t *c)
{
	char keyh[96];
	snprintf(keyh, sizeof(keyh), "x-pincer-session-key: %s", c->session);
	const char *hdrs[] = {"Authorization: Bearer " GW_TOKEN, keyh, "Idempotency-Key: http-retry-1", NULL};
	cJSON *b = cJSON_CreateObject();
	cJSON *u = cJSON_CreateObject();
	cJSON_AddStringToObject(u, "role", "user");
	cJSON_AddStringToObject(u, "content", SLOW_MSG);
	cJSON_AddItemToArray(cJSON_AddArrayToObject(b, "messages"), u);
	char *body = cJSON_PrintUnformatted(b);
	cJSON_Delete(b);
	curl_request(c->port, "POST", "/v1/chat/completions", hdrs, body, strlen(body), 30000, &c->r);
	cJSON_free(body);
}

static void *slow_http_thread(void *arg)
{
	slow_http(arg);
	return NULL;
}

/* The session's runs as sessions.list on `port` counts them. */
static int session_runs(uint16_t port, const char *session)
{
	cl_t *c = cl_connect(port);
	cJSON *r = cl_call(c, "sessions.list", NULL);
	int n = 0;
	const cJSON *e;
	cJSON_ArrayForEach(e, jget(jget(r, "payload"), "sessions")) {
		if (!strcmp(jstr(e, "key"), session))
			n = (int)jnum(e, "runs");
	}
	cJSON_Delete(r);
	cl_free(c);
	return n;
}

/* The same over HTTP: an Idempotency-Key repeated on the other gateway
 * while the first run is going gets the first run's answer. */
Test(two_gateways, an_http_retry_on_the_other_gateway_gets_the_first_answer, .timeout = 300)
{
	char home[GL_HOME_MAX];
	gl_gw_t g[2];
	two_started(home, g);
	http_call_t first = {.port = g[0].port, .session = "http-retry-s"};
	cr_assert_eq(pthread_create(&first.th, NULL, slow_http_thread, &first), 0);
	/* the first run is accepted once the store counts it */
	AWAIT(session_runs(g[1].port, "http-retry-s") == 1, 20000);
	http_call_t again = {.port = g[1].port, .session = "http-retry-s"};
	slow_http(&again);
	pthread_join(first.th, NULL);
	fprintf(stderr, "first gateway: %ld %s\nthe retry on the other: %ld %s\n", first.r.status, first.r.body,
		again.r.status, again.r.body);
	char ida[PC_STORE_ID_MAX + 1], idb[PC_STORE_ID_MAX + 1];
	gl_chatcmpl_run(first.r.body, ida, sizeof(ida));
	gl_chatcmpl_run(again.r.body, idb, sizeof(idb));
	long sa = first.r.status, sb = again.r.status;
	resp_free(&first.r);
	resp_free(&again.r);
	for (int i = 0; i < 2; i++)
		cr_assert_eq(gl_gw_term(&g[i]), 0);
	curl_global_cleanup();
	cr_assert_eq(sa, 200);
	cr_assert_eq(sb, 200, "the retry on the other gateway got %ld while the first run succeeded", sb);
	cr_assert_str_eq(idb, ida, "the retry answered for another run");
	rm_tree(home);
}
