/*
 * A cluster of `pincer gateway` processes on one PostgreSQL
 * (docs/cluster.md), as an operator runs it: three nodes, a 2 s lease
 * (long enough that a busy machine does not make a node miss its own
 * deadline).
 *
 * - A node killed with SIGKILL: the sessions it held move on. Its run in
 *   flight ends as node_lost, the prompts it had accepted run on the node
 *   the sessions prefer among the live ones, in order, each once, within
 *   the lease and a heartbeat or so; an idempotent retry sent to another
 *   node names the run that already exists.
 * - Ten times, a node killed while the cluster takes turns, then started
 *   again: every acknowledged message has run once or ended node_lost
 *   (the one in flight at the kill), none ran twice, no two runs
 *   interleave in a transcript, and each kill's queued prompt ran
 *   elsewhere within the lease and a heartbeat or so. Half the kills
 *   land while a command the model asked for runs: that run is
 *   replayInvalid, the command ran once (its marker file has one line)
 *   and died with its node, and the session's next run wrote the call's
 *   made-up result, so the transcript is paired.
 * - A node paused (SIGSTOP) past its lease, then resumed: the others take
 *   its sessions over; once resumed it starts no tool (the tool's marker
 *   file is never written), writes nothing behind the new owner's back,
 *   and does not run again the prompt the new owner ran.
 *
 * Runs under ctest's "pg" fixture (PINCER_TEST_PG_URL); skipped without
 * it. Only this test's children are signalled, by pid.
 */
#include "gateway_load.h"

#include <sys/stat.h>

#include "agents/gateway/gateway_internal.h"
#include "agents/gateway/placement.h"
#include "pg_test.h"

TestSuite(store_pg_cluster, .timeout = 300);

#define NODES 3
#define SECRET "a secret the nodes share"
#define LEASE_MS 2000

typedef struct node {
	char name[16], dir[PATH_MAX];
	uint16_t port;
	pid_t pid;
} node_t;

typedef struct fx {
	char home[64], url[1024], schema[64], pincer[PATH_MAX];
	node_t n[NODES];
} fx_t;

static void node_start(fx_t *f, int i)
{
	node_t *n = &f->n[i];
	char cfg_path[PATH_MAX + 16], cfg[2 * PATH_MAX + 2048], out[PATH_MAX + 8], err[PATH_MAX + 8];
	snprintf(cfg_path, sizeof(cfg_path), "%s/pincer.json", n->dir);
	snprintf(out, sizeof(out), "%s/out", n->dir);
	snprintf(err, sizeof(err), "%s/err", n->dir);
	snprintf(cfg, sizeof(cfg),
		 "{\"providers\":{\"mock\":{\"api\":\"openai-completions\",\"embedded\":true,\"apiKey\":\"k\"}},"
		 "\"agents\":{\"defaults\":{\"model\":\"mock/m1\",\"workspace\":\"%s\"}},"
		 "\"messages\":{\"queue\":{\"mode\":\"followup\",\"debounceMs\":0}},"
		 "\"gateway\":{\"auth\":{\"mode\":\"token\",\"token\":\"" GW_TOKEN "\"}},"
		 "\"store\":{\"url\":\"%s\"},"
		 "\"cluster\":{\"nodeId\":\"%s\",\"leaseMs\":%d,\"secret\":\"" SECRET "\"}}",
		 n->dir, f->url, n->name, LEASE_MS);
	write_file(cfg_path, cfg);
	/* a state directory that does not exist yet: with the store elsewhere,
	 * the gateway makes it (its session write locks live there) */
	char env_home[PATH_MAX + 32];
	snprintf(env_home, sizeof(env_home), "PINCER_HOME=%s/state", n->dir);
	char *argv[] = {f->pincer, "gateway", "--port", "0", "--config", cfg_path, NULL};
	char *envp[] = {env_home, "PATH=/usr/bin:/bin", NULL};
	write_file(out, "");
	write_file(err, "");
	n->pid = start_child(f->pincer, argv, envp, n->dir, out, err);
	n->port = await_listening_port(out, 60000, n->name);
}

static void await_cluster(const fx_t *f);

/* The first name `prefix`-0, -1, ... that node `want` is preferred for
 * (placement.h) while `live` nodes (a bit per node) are live: a session a
 * request at any node reaches that node for. */
static void key_on(int want, unsigned live, const char *prefix, char *out, size_t n)
{
	static const char *const ids[NODES] = {"node-a", "node-b", "node-c"};
	const char *up[NODES];
	int idx[NODES];
	size_t m = 0;
	for (int i = 0; i < NODES; i++)
		if (live & (1u << i)) {
			idx[m] = i;
			up[m++] = ids[i];
		}
	for (int k = 0; k < 1000; k++) {
		snprintf(out, n, "%s-%d", prefix, k);
		size_t at = pc__placement_pick(up, m, out);
		if (at < m && idx[at] == want)
			return;
	}
	cr_assert_fail("no key of %s goes to node %d", prefix, want);
}
#define ALL_NODES ((1u << NODES) - 1)

/* Three nodes, each reading the three live. */
static void fx_init(fx_t *f)
{
	memset(f, 0, sizeof(*f));
	if (!pg_test_url_schema(f->url, sizeof(f->url), f->schema))
		cr_skip_test("PINCER_TEST_PG_URL is not set (ctest runs this under the pg fixture)");
	snprintf(f->home, sizeof(f->home), "/tmp/pc-pg-cluster-XXXXXX");
	cr_assert_not_null(mkdtemp(f->home));
	gl_pincer_path(f->pincer, sizeof(f->pincer));
	char home[sizeof(f->home)];
	memcpy(home, f->home, sizeof(home));
	for (int i = 0; i < NODES; i++) {
		node_t *n = &f->n[i];
		char name[sizeof(n->name)];
		snprintf(name, sizeof(name), "node-%c", 'a' + i);
		memcpy(n->name, name, sizeof(name));
		snprintf(n->dir, sizeof(n->dir), "%s/%s", home, name);
		cr_assert_eq(mkdir(n->dir, 0700), 0);
		node_start(f, i);
	}
	curl_global_init(CURL_GLOBAL_DEFAULT);
	await_cluster(f);
}

static void fx_fini(fx_t *f)
{
	int rc[NODES] = {0};
	for (int i = 0; i < NODES; i++) {
		if (f->n[i].pid) {
			kill(f->n[i].pid, SIGCONT);
			kill(f->n[i].pid, SIGTERM);
			rc[i] = child_wait(&f->n[i].pid, 30000);
		}
	}
	/* a clean stop, with nothing a sanitizer reports */
	for (int i = 0; i < NODES; i++) {
		char err[PATH_MAX + 8];
		snprintf(err, sizeof(err), "%s/err", f->n[i].dir);
		char *text = rc[i] ? read_file(err) : NULL;
		cr_assert_eq(rc[i], 0, "%s exited %d: %.4000s", f->n[i].name, rc[i], text ? text : "");
		free(text);
	}
	curl_global_cleanup();
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", f->home);
	cr_assert_eq(system(cmd), 0);
}

static tws_t *node_ws(const node_t *n)
{
	tws_t *ws = gl_ws_connect(n->port);
	cr_assert_not_null(ws, "no WebSocket to %s", n->name);
	return ws;
}

/* Waits for `run` to begin (its user turn written). */
static void await_begun(const fx_t *f, const char *run);

/* The first column of the first row of `sql` ("" when no row); the
 * caller frees it. */
static char *q_text(const fx_t *f, const char *sql)
{
	PGconn *c = pg_test_connect(f->url);
	PGresult *r = PQexec(c, sql);
	cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s: %s", sql, PQerrorMessage(c));
	char *v = strdup(PQntuples(r) > 0 && !PQgetisnull(r, 0, 0) ? PQgetvalue(r, 0, 0) : "");
	PQclear(r);
	PQfinish(c);
	return v;
}

static long long q_int(const fx_t *f, const char *sql)
{
	long long v = -1;
	cr_assert(pg_test_query_int(f->url, sql, &v), "no value: %s", sql);
	return v;
}

/* Waits up to `ms` for `sql` to count `want`. */
static bool q_becomes(const fx_t *f, const char *sql, long long want, uint64_t ms)
{
	uint64_t until = now_ms() + ms;
	while (q_int(f, sql) != want && now_ms() < until)
		sleep_ms(50);
	return q_int(f, sql) == want;
}

/* A run's status and error code, "status/code". */
static char *run_state(const fx_t *f, const char *run)
{
	char sql[512];
	snprintf(sql, sizeof(sql), "SELECT status || '/' || coalesce(error_code, '') FROM runs WHERE run_id = '%s'", run);
	return q_text(f, sql);
}

/* Sends `agent` on `ws` and returns the run id it was accepted as. */
/* Sends `agent` on ws: its first answer, or NULL after `ms`; the caller
 * frees it. */
static cJSON *agent_ask(tws_t *ws, const char *id, const char *key, const char *message, const char *idem, uint64_t ms)
{
	cJSON *p = cJSON_CreateObject();
	cJSON_AddStringToObject(p, "sessionKey", key);
	cJSON_AddStringToObject(p, "message", message);
	cJSON_AddStringToObject(p, "idempotencyKey", idem);
	cr_assert_eq(gl_ws_req(ws, id, "agent", p), 0);
	uint64_t until = now_ms() + ms;
	while (now_ms() < until) {
		char *m = NULL;
		size_t len = 0;
		if (tws_recv(ws, 1000, &m, &len) != 0)
			continue;
		cJSON *fr = cJSON_ParseWithLength(m, len);
		free(m);
		const char *fid = jstr(fr, "id");
		if (fid && !strcmp(fid, id))
			return fr;
		cJSON_Delete(fr);
	}
	return NULL;
}

/* Sends `agent` on ws and returns the run id it was accepted as. */
static void agent_send(tws_t *ws, const char *id, const char *key, const char *message, const char *idem, char *run,
		       size_t n)
{
	cJSON *fr = agent_ask(ws, id, key, message, idem, 20000);
	cr_assert_not_null(fr, "agent %s: no answer", id);
	cr_assert(jok(fr), "agent %s was refused", id);
	const char *r = jstr(jget(fr, "payload"), "runId");
	cr_assert_not_null(r);
	snprintf(run, n, "%s", r);
	cJSON_Delete(fr);
}

/* Series `name` (no labels) of node n's /metrics, or -1. */
static double node_metric(const node_t *n, const char *name)
{
	resp_t r = {0};
	curl_request(n->port, "GET", "/metrics", NULL, NULL, 0, 2000, &r);
	char want[128];
	snprintf(want, sizeof(want), "\n%s ", name);
	const char *p = r.body ? strstr(r.body, want) : NULL;
	double v = p ? strtod(p + strlen(want), NULL) : -1;
	resp_free(&r);
	return v;
}

/* Waits up to `ms` for node n's series `name` to reach `at_least`. */
static bool node_metric_reaches(const node_t *n, const char *name, double at_least, uint64_t ms)
{
	uint64_t until = now_ms() + ms;
	while (node_metric(n, name) < at_least && now_ms() < until)
		sleep_ms(50);
	return node_metric(n, name) >= at_least;
}

/* Every node reads every node live. */
static void await_cluster(const fx_t *f)
{
	for (int i = 0; i < NODES; i++)
		cr_assert(node_metric_reaches(&f->n[i], "pincer_cluster_nodes_live", NODES, 20000),
			  "%s never read %d nodes live", f->n[i].name, NODES);
}

static long long user_turns(const fx_t *f, const char *run)
{
	char sql[512];
	snprintf(sql, sizeof(sql), "SELECT count(*) FROM messages WHERE role = 'user' AND run_id = '%s'", run);
	return q_int(f, sql);
}

static void await_begun(const fx_t *f, const char *run)
{
	uint64_t until = now_ms() + 20000;
	while (user_turns(f, run) != 1 && now_ms() < until)
		sleep_ms(50);
	cr_assert_eq(user_turns(f, run), 1, "run %s never began", run);
}

static long long user_seq(const fx_t *f, const char *run)
{
	char sql[512];
	snprintf(sql, sizeof(sql), "SELECT coalesce(min(seq), -1) FROM messages WHERE role = 'user' AND run_id = '%s'",
		 run);
	return q_int(f, sql);
}

/* A client's view of one connection: its frames in order, the event seq
 * checked to count up by one whichever node an event came from. */
typedef struct view {
	tws_t *ws;
	double seq;
	const char *run;   /* a run whose `agent` events are counted */
	int agent_events;
	const char *watch; /* a session whose sessions.changed is awaited */
	bool heard;
} view_t;

static cJSON *view_next(view_t *v, uint64_t ms)
{
	char *m = NULL;
	size_t len = 0;
	if (tws_recv(v->ws, (int64_t)ms, &m, &len) != 0)
		return NULL;
	cJSON *fr = cJSON_ParseWithLength(m, len);
	free(m);
	cr_assert_not_null(fr);
	const char *type = jstr(fr, "type"), *ev = jstr(fr, "event");
	if (type && !strcmp(type, "event")) {
		double seq = jnum(fr, "seq");
		cr_assert_eq(seq, v->seq + 1, "event %s: seq %.0f after %.0f", ev, seq, v->seq);
		v->seq = seq;
		const char *run = jstr(jget(fr, "payload"), "runId"), *key = jstr(jget(fr, "payload"), "sessionKey");
		if (v->run && run && !strcmp(run, v->run) && !strcmp(ev, "agent"))
			v->agent_events++;
		if (v->watch && key && !strcmp(key, v->watch) && !strcmp(ev, "sessions.changed"))
			v->heard = true;
	}
	return fr;
}

/* The answer to request `id` (not an "accepted" one when `final`); the
 * caller frees it. Other frames are read and let go. */
static cJSON *view_answer(view_t *v, const char *id, bool final)
{
	uint64_t until = now_ms() + 30000;
	while (now_ms() < until) {
		cJSON *fr = view_next(v, 1000);
		const char *fid = fr ? jstr(fr, "id") : NULL;
		const char *st = fr ? jstr(jget(fr, "payload"), "status") : NULL;
		if (fid && !strcmp(fid, id) && !(final && st && !strcmp(st, "accepted")))
			return fr;
		cJSON_Delete(fr);
	}
	cr_assert_fail("no answer to %s", id);
	return NULL;
}

/* The node whose process ran `run`. */
static char *run_node(const fx_t *f, const char *run)
{
	char sql[512];
	snprintf(sql, sizeof(sql), "SELECT n.id FROM runs r JOIN nodes n ON n.owner = r.owner WHERE r.run_id = '%s'", run);
	return q_text(f, sql);
}

/* Connects to node n as node `node` would, proving `secret`: the answer
 * to connect (the caller frees it). */
static cJSON *connect_as_node(const node_t *n, const char *node, const char *secret)
{
	tws_options_t o = {.port = n->port, .timeout_ms = 5000};
	tws_t *ws = NULL;
	cr_assert_eq(tws_connect(&o, &ws, NULL), 0);
	char *m = NULL;
	size_t len = 0;
	cr_assert_eq(tws_recv(ws, 5000, &m, &len), 0);
	cJSON *ch = cJSON_ParseWithLength(m, len);
	free(m);
	char proof[PC__GW_NODE_PROOF_MAX];
	cr_assert_eq(pc__gw_node_proof(secret, node, jstr(jget(ch, "payload"), "nonce"), proof), 0);
	cJSON_Delete(ch);
	cJSON *p = connect_params(NULL, NULL);
	cJSON *cl = cJSON_AddObjectToObject(p, "cluster");
	cJSON_AddStringToObject(cl, "nodeId", node);
	cJSON_AddStringToObject(cl, "proof", proof);
	cr_assert_eq(gl_ws_req(ws, "c0", "connect", p), 0);
	cr_assert_eq(tws_recv(ws, 10000, &m, &len), 0);
	cJSON *res = cJSON_ParseWithLength(m, len);
	free(m);
	tws_free(ws);
	return res;
}

#define SPREAD 9

Test(store_pg_cluster, any_node_serves_any_session)
{
	fx_t f;
	fx_init(&f);
	node_t *a = &f.n[0];
	view_t v = {.ws = node_ws(a), .seq = 1}; /* connect.challenge was 1 */
	/* sessions of every node, all asked at node-a: the answers and the
	 * events of each run come back on the one connection */
	char runs[SPREAD][PC_STORE_ID_MAX + 1], keys[SPREAD][32];
	int elsewhere = 0;
	for (int i = 0; i < SPREAD; i++) {
		char id[16], idem[16], prefix[16], want[8];
		snprintf(prefix, sizeof(prefix), "spread%d", i);
		key_on(i % NODES, ALL_NODES, prefix, keys[i], sizeof(keys[i]));
		snprintf(id, sizeof(id), "s%d", i);
		snprintf(idem, sizeof(idem), "spread-%d", i);
		cJSON *p = cJSON_CreateObject();
		cJSON_AddStringToObject(p, "sessionKey", keys[i]);
		cJSON_AddStringToObject(p, "message", "hello [[mock:{\"text\":\"hello from wherever\"}]]");
		cJSON_AddStringToObject(p, "idempotencyKey", idem);
		cr_assert_eq(gl_ws_req(v.ws, id, "agent", p), 0);
		cJSON *acc = view_answer(&v, id, false);
		cr_assert(jok(acc));
		snprintf(runs[i], sizeof(runs[i]), "%s", jstr(jget(acc, "payload"), "runId"));
		cJSON_Delete(acc);
		v.run = runs[i];
		v.agent_events = 0;
		cJSON *fin = view_answer(&v, id, true);
		cr_assert(jok(fin), "%s: %s", keys[i], jstr(jget(fin, "error"), "message"));
		cr_assert_str_eq(jstr(jget(fin, "payload"), "status"), "ok");
		cJSON_Delete(fin);
		cr_assert_gt(v.agent_events, 0, "no events of run %s of %s", runs[i], keys[i]);
		char *node = run_node(&f, runs[i]);
		snprintf(want, sizeof(want), "node-%c", 'a' + i % NODES);
		cr_assert_str_eq(node, want, "%s ran on %s", keys[i], node);
		free(node);
		elsewhere += i % NODES != 0;
	}
	cr_assert_eq(node_metric(a, "pincer_cluster_forwards_total"), elsewhere);
	cr_assert_eq(node_metric(&f.n[1], "pincer_cluster_links_in_total"), 1, "one link from node-a's connection");

	/* a run started at node-a on node-b: node-c's sessions.list names it
	 * the session's active run, agent.wait on the same connection (over
	 * its link) and at node-c (from the store), and a sessions.subscribe
	 * at node-c hears of it */
	view_t w = {.ws = node_ws(&f.n[2]), .seq = 1};
	cr_assert_eq(gl_ws_req(w.ws, "sub", "sessions.subscribe", cJSON_CreateObject()), 0);
	cJSON *sub = view_answer(&w, "sub", false);
	cr_assert(jok(sub));
	cJSON_Delete(sub);
	char slow[32], run[PC_STORE_ID_MAX + 1];
	key_on(1, ALL_NODES, "waited", slow, sizeof(slow));
	w.watch = slow;
	cJSON *p = cJSON_CreateObject();
	cJSON_AddStringToObject(p, "sessionKey", slow);
	cJSON_AddStringToObject(p, "message", "wait [[mock:{\"text\":\"worth the wait\",\"ttft_ms\":1500}]]");
	cJSON_AddStringToObject(p, "idempotencyKey", "waited-1");
	cr_assert_eq(gl_ws_req(v.ws, "w1", "agent", p), 0);
	cJSON *acc = view_answer(&v, "w1", false);
	snprintf(run, sizeof(run), "%s", jstr(jget(acc, "payload"), "runId"));
	cJSON_Delete(acc);
	/* node-c lists the session with the run node-b is on */
	cJSON *lq = cJSON_CreateObject();
	cJSON_AddNumberToObject(lq, "limit", 100);
	cr_assert_eq(gl_ws_req(w.ws, "list", "sessions.list", lq), 0);
	cJSON *list = view_answer(&w, "list", false);
	const cJSON *row = NULL, *it;
	cJSON_ArrayForEach(it, jget(jget(list, "payload"), "sessions")) {
		if (!strcmp(jstr(it, "key"), slow))
			row = it;
	}
	cr_assert_not_null(row, "node-c does not list %s", slow);
	cr_assert_str_eq(jstr(row, "activeRunId") ? jstr(row, "activeRunId") : "(none)", run);
	cJSON_Delete(list);
	for (view_t *x = &v; x; x = x == &v ? &w : NULL) {
		cJSON *q = cJSON_CreateObject();
		cJSON_AddStringToObject(q, "runId", run);
		cJSON_AddNumberToObject(q, "timeoutMs", 20000);
		cr_assert_eq(gl_ws_req(x->ws, "wait", "agent.wait", q), 0);
	}
	cJSON *done = view_answer(&w, "wait", false);
	cr_assert_str_eq(jstr(jget(done, "payload"), "status"), "ok", "agent.wait at node-c");
	cJSON_Delete(done);
	/* on node-a's connection both the wait and the run's end come */
	int answered = 0;
	uint64_t until = now_ms() + 30000;
	while (answered != 3 && now_ms() < until) {
		cJSON *fr = view_next(&v, 1000);
		const char *fid = fr ? jstr(fr, "id") : NULL;
		const char *st = fr ? jstr(jget(fr, "payload"), "status") : NULL;
		if (fid && st && !strcmp(st, "ok"))
			answered |= !strcmp(fid, "wait") ? 1 : !strcmp(fid, "w1") ? 2 : 0;
		cJSON_Delete(fr);
	}
	cr_assert_eq(answered, 3, "node-a's connection: the wait %s, the run's end %s",
		     answered & 1 ? "came" : "is missing", answered & 2 ? "came" : "is missing");
	char *node = run_node(&f, run);
	cr_assert_str_eq(node, "node-b");
	free(node);
	until = now_ms() + 10000;
	while (!w.heard && now_ms() < until)
		cJSON_Delete(view_next(&w, 500));
	cr_assert(w.heard, "node-c's subscriber never heard of %s, run on node-b", slow);

	/* the OpenAI endpoint too: node-a relays node-c's answer, plain and
	 * streamed, and a retry at node-b names the same run */
	char hkey[32], keyh[64], first[PC_STORE_ID_MAX + 1] = "";
	key_on(2, ALL_NODES, "http", hkey, sizeof(hkey));
	snprintf(keyh, sizeof(keyh), "x-pincer-session-key: %s", hkey);
	for (int i = 0; i < 3; i++) {
		bool stream = i == 1;
		char body[256], run_id[PC_STORE_ID_MAX + 1];
		snprintf(body, sizeof(body),
			 "{\"model\":\"pincer\",\"stream\":%s,\"messages\":[{\"role\":\"user\",\"content\":"
			 "\"hi [[mock:{\\\"text\\\":\\\"hello over http\\\"}]]\"}]}",
			 stream ? "true" : "false");
		const char *hdrs[] = {"Authorization: Bearer " GW_TOKEN, keyh,
				      stream ? "Idempotency-Key: h2" : "Idempotency-Key: h1", NULL};
		resp_t r = {0};
		curl_request(i == 2 ? f.n[1].port : a->port, "POST", "/v1/chat/completions", hdrs, body, strlen(body),
			     30000, &r);
		cr_assert_eq(r.status, 200, "%d: %s", r.status, r.body ? r.body : "");
		cr_assert_not_null(strstr(r.body, stream ? "hello" : "hello over http"), "%s", r.body);
		cr_assert(!stream || strstr(r.body, "data: [DONE]"), "%s", r.body);
		gl_chatcmpl_run(r.body, run_id, sizeof(run_id));
		resp_free(&r);
		char *ran = run_node(&f, run_id);
		cr_assert_str_eq(ran, "node-c", "run %s", run_id);
		free(ran);
		if (i == 0)
			snprintf(first, sizeof(first), "%s", run_id);
		if (i == 2)
			cr_assert_str_eq(run_id, first, "a retry at node-b started another run");
	}
	/* node-a sent on: the runs of other nodes' sessions, w1, its wait,
	 * and two completions */
	cr_assert_eq(node_metric(a, "pincer_cluster_forwards_total"), elsewhere + 4);

	/* a link is for those who know the secret: a wrong one is refused,
	 * counted as a failed secret, and opens nothing */
	double links = node_metric(&f.n[1], "pincer_cluster_links_in_total");
	cJSON *res = connect_as_node(&f.n[1], "node-a", "not the secret the nodes share");
	cr_assert(!jok(res));
	cr_assert_str_eq(jdetail(res), "CLUSTER_PROOF_MISMATCH");
	cJSON_Delete(res);
	res = connect_as_node(&f.n[1], "node-a", SECRET);
	cr_assert(jok(res), "%s", jstr(jget(res, "error"), "message"));
	cJSON_Delete(res);
	cr_assert_eq(node_metric(&f.n[1], "pincer_cluster_links_in_total"), links + 1);
	tws_free(w.ws);
	tws_free(v.ws);
	fx_fini(&f);
}

/* A streamed completion of session `key` at a node, on a thread. */
typedef struct streamed {
	uint16_t port;
	const char *key;
	resp_t r;
} streamed_t;

static void *stream_completion(void *arg)
{
	streamed_t *s = arg;
	char keyh[64];
	snprintf(keyh, sizeof(keyh), "x-pincer-session-key: %s", s->key);
	const char *hdrs[] = {"Authorization: Bearer " GW_TOKEN, keyh, "Idempotency-Key: cut-1", NULL};
	static const char body[] = "{\"model\":\"pincer\",\"stream\":true,\"messages\":[{\"role\":\"user\","
				   "\"content\":\"streamed [[mock:{\\\"text\\\":\\\"the streamed answer\\\"}]]\"}]}";
	curl_request(s->port, "POST", "/v1/chat/completions", hdrs, body, sizeof(body) - 1, 30000, &s->r);
	return NULL;
}

Test(store_pg_cluster, a_killed_node_s_sessions_move_on)
{
	fx_t f;
	fx_init(&f);
	node_t *a = &f.n[0];
	tws_t *ws = node_ws(a);
	char r1[PC_STORE_ID_MAX + 1], r2[PC_STORE_ID_MAX + 1], r3[PC_STORE_ID_MAX + 1], moving[32];
	key_on(0, ALL_NODES, "moving", moving, sizeof(moving));
	agent_send(ws, "m1", moving, "first [[mock:{\"text\":\"never\",\"ttft_ms\":60000}]]", "k1", r1, sizeof(r1));
	agent_send(ws, "m2", moving, "second [[mock:{\"text\":\"the second answer\"}]]", "k2", r2, sizeof(r2));
	agent_send(ws, "m3", moving, "third [[mock:{\"text\":\"the third answer\"}]]", "k3", r3, sizeof(r3));
	/* and one sent at node-b, which forwards it to node-a */
	view_t vb = {.ws = node_ws(&f.n[1]), .seq = 1};
	char r4[PC_STORE_ID_MAX + 1];
	agent_send(vb.ws, "m4", moving, "fourth [[mock:{\"text\":\"the fourth answer\"}]]", "k4", r4, sizeof(r4));
	/* and a streamed completion at node-b, relayed from node-a: its
	 * stream is open (the run accepted, queued) when node-a dies */
	streamed_t st = {.port = f.n[1].port, .key = moving};
	pthread_t th;
	cr_assert_eq(pthread_create(&th, NULL, stream_completion, &st), 0);
	char sql[512];
	snprintf(sql, sizeof(sql), "SELECT count(*) FROM runs WHERE session_key = '%s'", moving);
	cr_assert(q_becomes(&f, sql, 5, 20000), "the streamed completion was never accepted");
	await_begun(&f, r1);
	cr_assert_eq(kill(a->pid, SIGKILL), 0);
	cr_assert_eq(child_wait(&a->pid, 30000), 128 + SIGKILL);
	uint64_t t0 = now_ms();
	tws_free(ws);
	/* node-b cannot know whether m4 will end: it says so, retryable */
	cJSON *lost = view_answer(&vb, "m4", true);
	cr_assert(!jok(lost));
	cr_assert_str_eq(jerr(lost), "UNAVAILABLE");
	cr_assert(cJSON_IsTrue(jget(jget(lost, "error"), "retryable")));
	cJSON_Delete(lost);
	/* the stream ends in an error event and [DONE], not in silence */
	cr_assert_eq(pthread_join(th, NULL), 0);
	cr_assert_eq(st.r.status, 200);
	cr_assert_not_null(strstr(st.r.body, "\"code\":\"unavailable\""), "%s", st.r.body);
	cr_assert_not_null(strstr(st.r.body, "went away before the answer ended"), "%s", st.r.body);
	cr_assert_not_null(strstr(st.r.body, "data: [DONE]"), "%s", st.r.body);
	resp_free(&st.r);
	cr_assert_eq(node_metric(&f.n[1], "pincer_cluster_forward_failures_total"), 2);
	/* sent again with its key, it names the run, which runs elsewhere */
	char again4[PC_STORE_ID_MAX + 1];
	agent_send(vb.ws, "m4b", moving, "fourth [[mock:{\"text\":\"the fourth answer\"}]]", "k4", again4,
		   sizeof(again4));
	cr_assert_str_eq(again4, r4);
	snprintf(sql, sizeof(sql), "SELECT count(*) FROM runs WHERE run_id = '%s' AND status = 'ok'", r4);
	cr_assert(q_becomes(&f, sql, 1, 30000), "r4 %s", run_state(&f, r4));
	cr_assert_eq(user_turns(&f, r4), 1);
	tws_free(vb.ws);

	/* taken over: the queued prompts ran elsewhere, in order, once each */
	snprintf(sql, sizeof(sql), "SELECT count(*) FROM runs WHERE run_id IN ('%s', '%s') AND status = 'ok'", r2, r3);
	cr_assert(q_becomes(&f, sql, 2, 30000), "r2 %s, r3 %s", run_state(&f, r2), run_state(&f, r3));
	uint64_t took = now_ms() - t0;
	fprintf(stderr, "store_pg_cluster: the killed node's prompts ran elsewhere %llu ms after the kill\n",
		(unsigned long long)took);
	cr_assert_lt(took, 4 * LEASE_MS + 4000, "took %llu ms", (unsigned long long)took);
	char *s1 = run_state(&f, r1);
	cr_assert_str_eq(s1, "error/node_lost");
	free(s1);
	cr_assert_eq(user_turns(&f, r1), 1);
	cr_assert_eq(user_turns(&f, r2), 1);
	cr_assert_eq(user_turns(&f, r3), 1);
	cr_assert_lt(user_seq(&f, r1), user_seq(&f, r2));
	cr_assert_lt(user_seq(&f, r2), user_seq(&f, r3));
	snprintf(sql, sizeof(sql),
		 "SELECT count(*) FROM messages WHERE role = 'assistant' AND run_id IN ('%s', '%s')", r2, r3);
	cr_assert_eq(q_int(&f, sql), 2);
	/* the runs are the live nodes' now */
	snprintf(sql, sizeof(sql),
		 "SELECT count(*) FROM runs r JOIN nodes n ON n.owner = r.owner WHERE r.run_id IN ('%s', '%s', '%s')"
		 " AND n.id <> 'node-a'",
		 r1, r2, r3);
	cr_assert_eq(q_int(&f, sql), 3);

	/* a retry with the same idempotency key, at another node, names the
	 * run that exists */
	tws_t *wb = node_ws(&f.n[1]);
	char again[PC_STORE_ID_MAX + 1];
	agent_send(wb, "m2b", moving, "second [[mock:{\"text\":\"the second answer\"}]]", "k2", again, sizeof(again));
	cr_assert_str_eq(again, r2);
	tws_free(wb);
	snprintf(sql, sizeof(sql), "SELECT count(*) FROM runs WHERE session_key = '%s'", moving);
	cr_assert_eq(q_int(&f, sql), 5);
	fx_fini(&f);
}

/* Waits up to `ms` for node n's series `name` to read exactly `want`. */
static bool node_metric_is(const node_t *n, const char *name, double want, uint64_t ms)
{
	uint64_t until = now_ms() + ms;
	while (node_metric(n, name) != want && now_ms() < until)
		sleep_ms(50);
	return node_metric(n, name) == want;
}

/* A node that joins is preferred by sessions another node is running: a
 * request for one, whichever node it reaches, goes where it runs, not to
 * the joining node to wait for the lease; idle again, the session goes
 * where it prefers. */
Test(store_pg_cluster, a_joining_node_leaves_busy_sessions_where_they_run)
{
	fx_t f;
	fx_init(&f);
	node_t *nc = &f.n[2];
	/* a key node-a takes while node-c is away and node-c prefers when back */
	char key[32], other[32];
	for (int k = 0;; k++) {
		cr_assert_lt(k, 1000, "no key moves from node-a to node-c");
		char prefix[24];
		snprintf(prefix, sizeof(prefix), "joining%d", k);
		key_on(2, ALL_NODES, prefix, key, sizeof(key));
		key_on(0, ALL_NODES & ~(1u << 2), prefix, other, sizeof(other));
		if (!strcmp(key, other))
			break;
	}
	cr_assert_eq(kill(nc->pid, SIGTERM), 0);
	cr_assert_eq(child_wait(&nc->pid, 30000), 0);
	for (int i = 0; i < 2; i++)
		cr_assert(node_metric_is(&f.n[i], "pincer_cluster_nodes_live", 2, 20000), "%s still reads node-c",
			  f.n[i].name);
	tws_t *wb = node_ws(&f.n[1]);
	char r1[PC_STORE_ID_MAX + 1], r2[PC_STORE_ID_MAX + 1], r3[PC_STORE_ID_MAX + 1], r4[PC_STORE_ID_MAX + 1];
	agent_send(wb, "j1", key, "first [[mock:{\"text\":\"slow\",\"ttft_ms\":15000}]]", "j1", r1, sizeof(r1));
	await_begun(&f, r1);
	node_start(&f, 2);
	await_cluster(&f);
	for (int i = 0; i < NODES; i++)
		cr_assert(node_metric_is(&f.n[i], "pincer_cluster_sessions_away", 1, 20000), "%s: %g sessions away",
			  f.n[i].name, node_metric(&f.n[i], "pincer_cluster_sessions_away"));
	/* asked at node-b and at node-c while r1 runs: both run at node-a,
	 * after it (the session's queue is followup) */
	agent_send(wb, "j2", key, "second [[mock:{\"text\":\"two\"}]]", "j2", r2, sizeof(r2));
	tws_t *wc = node_ws(nc);
	agent_send(wc, "j3", key, "third [[mock:{\"text\":\"three\"}]]", "j3", r3, sizeof(r3));
	char sql[512];
	snprintf(sql, sizeof(sql), "SELECT count(*) FROM runs WHERE run_id IN ('%s', '%s', '%s') AND status = 'ok'", r1,
		 r2, r3);
	cr_assert(q_becomes(&f, sql, 3, 30000), "r1 %s, r2 %s, r3 %s", run_state(&f, r1), run_state(&f, r2),
		  run_state(&f, r3));
	const char *runs[] = {r1, r2, r3};
	for (int i = 0; i < 3; i++) {
		char *node = run_node(&f, runs[i]);
		cr_assert_str_eq(node, "node-a", "run %d", i + 1);
		free(node);
	}
	cr_assert_lt(user_seq(&f, r1), user_seq(&f, r2));
	/* idle, its lease given back: the next request runs at node-c */
	snprintf(sql, sizeof(sql), "SELECT count(*) FROM sessions WHERE key = '%s' AND lease_owner IS NULL", key);
	cr_assert(q_becomes(&f, sql, 1, 20000), "node-a kept the lease");
	for (int i = 0; i < NODES; i++)
		cr_assert(node_metric_is(&f.n[i], "pincer_cluster_sessions_away", 0, 20000), "%s", f.n[i].name);
	agent_send(wb, "j4", key, "fourth [[mock:{\"text\":\"four\"}]]", "j4", r4, sizeof(r4));
	snprintf(sql, sizeof(sql), "SELECT count(*) FROM runs WHERE run_id = '%s' AND status = 'ok'", r4);
	cr_assert(q_becomes(&f, sql, 1, 30000), "r4 %s", run_state(&f, r4));
	char *node = run_node(&f, r4);
	cr_assert_str_eq(node, "node-c");
	free(node);
	tws_free(wb);
	tws_free(wc);
	fx_fini(&f);
}

Test(store_pg_cluster, a_paused_node_starts_nothing_after_it_resumes)
{
	fx_t f;
	fx_init(&f);
	node_t *a = &f.n[0];
	tws_t *ws = node_ws(a);
	char r1[PC_STORE_ID_MAX + 1], r2[PC_STORE_ID_MAX + 1], paused[32];
	key_on(0, ALL_NODES, "paused", paused, sizeof(paused));
	/* the model asks for a file to be written once its 2.5 s are up */
	agent_send(ws, "m1", paused,
		   "write it [[mock:{\"kind\":\"tool_calls\",\"ttft_ms\":2500,\"tool_calls\":[{\"name\":\"write\","
		   "\"arguments\":{\"path\":\"marker.txt\",\"content\":\"written\"}}]}]]",
		   "p1", r1, sizeof(r1));
	agent_send(ws, "m2", paused, "next [[mock:{\"text\":\"the next answer\"}]]", "p2", r2, sizeof(r2));
	await_begun(&f, r1);
	cr_assert_eq(kill(a->pid, SIGSTOP), 0);
	char sql[512];
	/* the others read it gone and take its sessions over */
	snprintf(sql, sizeof(sql), "SELECT count(*) FROM runs WHERE run_id = '%s' AND status = 'ok'", r2);
	cr_assert(q_becomes(&f, sql, 1, 30000), "r2 %s", run_state(&f, r2));
	char *s1 = run_state(&f, r1);
	cr_assert_str_eq(s1, "error/node_lost");
	free(s1);
	sleep_ms(2 * LEASE_MS); /* well past the write's 2.5 s */
	cr_assert_eq(kill(a->pid, SIGCONT), 0);
	/* resumed: it lapsed, so it writes no file and runs r2 nowhere again */
	cr_assert(node_metric_reaches(a, "pincer_cluster_lapses_total", 1, 20000), "node-a never counted a lapse");
	sleep_ms(3000); /* time for whatever it still would do */
	char marker[PATH_MAX + 16];
	snprintf(marker, sizeof(marker), "%s/marker.txt", a->dir);
	struct stat st;
	cr_assert_neq(stat(marker, &st), 0, "the paused node wrote the file after it resumed");
	cr_assert_eq(user_turns(&f, r2), 1, "r2 ran twice");
	snprintf(sql, sizeof(sql), "SELECT count(*) FROM messages WHERE role = 'assistant' AND run_id = '%s'", r2);
	cr_assert_eq(q_int(&f, sql), 1);
	s1 = run_state(&f, r1);
	cr_assert_str_eq(s1, "error/node_lost", "the resumed node wrote over the new owner's end: %s", s1);
	free(s1);
	/* what it still tried (r2's claim, r1's end) the store refused */
	cr_assert_geq(node_metric(a, "pincer_store_fenced_writes_total"), 1);
	/* it is a live node again, and serves a new prompt of the session */
	char r3[PC_STORE_ID_MAX + 1];
	agent_send(ws, "m3", paused, "again [[mock:{\"text\":\"again\"}]]", "p3", r3, sizeof(r3));
	snprintf(sql, sizeof(sql), "SELECT count(*) FROM runs WHERE run_id = '%s' AND status = 'ok'", r3);
	cr_assert(q_becomes(&f, sql, 1, 30000), "r3 %s", run_state(&f, r3));
	tws_free(ws);
	fx_fini(&f);
}

#define KILLS 10
#define LOOP_RUNS (KILLS * 4)

typedef struct accepted {
	char run[PC_STORE_ID_MAX + 1];
	bool slow; /* in flight when its node was killed */
	int tool;  /* the kill whose command it ran (its marker file), or -1 */
	const node_t *node;
} accepted_t;

/* The lines of marker file `k` in node n's workspace, each the pid of a
 * command that started; -1 when there is no file. */
static int marker_lines(const node_t *n, int k, long *pid)
{
	char path[PATH_MAX + 32];
	snprintf(path, sizeof(path), "%s/tool-%d.txt", n->dir, k);
	char *text = read_file_or_null(path);
	if (!text)
		return -1;
	int lines = 0;
	for (const char *p = text; *p; p++)
		lines += *p == '\n';
	if (pid)
		*pid = strtol(text, NULL, 10);
	free(text);
	return lines;
}

/* Whether process `pid` is gone (or only a zombie nobody reaped yet). */
static bool process_gone(long pid)
{
	char path[64], state = 0;
	snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return true;
	int got = fscanf(f, "%*d (%*[^)]) %c", &state);
	fclose(f);
	return got == 1 && state == 'Z';
}

static bool replay_invalid(const fx_t *f, const char *run)
{
	char sql[256];
	snprintf(sql, sizeof(sql), "SELECT replay_invalid::int FROM runs WHERE run_id = '%s'", run);
	return q_int(f, sql) == 1;
}

/* No two runs interleave in session `key`'s transcript: once a run's
 * messages stop, that run never writes again. */
static void assert_not_interleaved(const fx_t *f, const char *key)
{
	char sql[256];
	snprintf(sql, sizeof(sql),
		 "SELECT coalesce(run_id, '') FROM messages m JOIN sessions s ON s.sid = m.session_id"
		 " WHERE s.key = '%s' ORDER BY m.seq",
		 key);
	PGconn *c = pg_test_connect(f->url);
	PGresult *r = PQexec(c, sql);
	cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s", PQerrorMessage(c));
	int n = PQntuples(r);
	for (int i = 1; i < n; i++) {
		const char *run = PQgetvalue(r, i, 0);
		if (!strcmp(run, PQgetvalue(r, i - 1, 0)))
			continue;
		for (int j = 0; j < i - 1; j++)
			cr_assert(strcmp(run, PQgetvalue(r, j, 0)) != 0 || !run[0], "%s: run %s writes again at %d", key,
				  run, i);
	}
	PQclear(r);
	PQfinish(c);
}

Test(store_pg_cluster, ten_kills_lose_nothing_and_run_nothing_twice, .timeout = 600)
{
	fx_t f;
	fx_init(&f);
	static accepted_t acc[LOOP_RUNS];
	int n = 0;
	uint64_t worst = 0;
	for (int k = 0; k < KILLS; k++) {
		node_t *victim = &f.n[k % NODES], *other = &f.n[(k + 1) % NODES];
		char key[32], busy[32], id[32], idem[32], prefix[16];
		/* a session the victim runs, and one it does not */
		key_on((int)(victim - f.n), ALL_NODES, "loop", key, sizeof(key));
		snprintf(prefix, sizeof(prefix), "busy%d", k);
		key_on((int)(other - f.n), ALL_NODES, prefix, busy, sizeof(busy));
		/* on the victim: a run in flight and one queued behind it; in
		 * flight, half the time a command the model asked for (a
		 * mutating tool), half the time the model call */
		tws_t *ws = node_ws(victim);
		snprintf(id, sizeof(id), "k%d-a", k);
		snprintf(idem, sizeof(idem), "idem-%d-a", k);
		bool in_tool = k % 4 < 2;
		char slow_msg[256];
		if (in_tool)
			snprintf(slow_msg, sizeof(slow_msg),
				 "run it [[mock:{\"kind\":\"tool_calls\",\"tool_calls\":[{\"name\":\"exec\",\"arguments\":"
				 "{\"command\":\"echo $$ >> tool-%d.txt; exec sleep 30\"}}]}]]",
				 k);
		else
			snprintf(slow_msg, sizeof(slow_msg), "slow [[mock:{\"text\":\"never\",\"ttft_ms\":60000}]]");
		acc[n].slow = true;
		acc[n].tool = in_tool ? k : -1;
		acc[n].node = victim;
		agent_send(ws, id, key, slow_msg, idem, acc[n].run, sizeof(acc[n].run));
		const char *slow = acc[n++].run;
		snprintf(id, sizeof(id), "k%d-b", k);
		snprintf(idem, sizeof(idem), "idem-%d-b", k);
		acc[n].tool = -1;
		agent_send(ws, id, key, "queued [[mock:{\"text\":\"queued answer\"}]]", idem, acc[n].run,
			   sizeof(acc[n].run));
		const char *queued = acc[n++].run;
		/* elsewhere, turns that must not notice */
		tws_t *wo = node_ws(other);
		for (int j = 0; j < 2; j++) {
			snprintf(id, sizeof(id), "k%d-o%d", k, j);
			snprintf(idem, sizeof(idem), "idem-%d-o%d", k, j);
			acc[n].tool = -1;
			agent_send(wo, id, busy, "busy [[mock:{\"text\":\"busy answer\",\"ttft_ms\":300}]]", idem,
				   acc[n].run, sizeof(acc[n].run));
			n++;
		}
		await_begun(&f, slow);
		uint64_t until = now_ms() + 20000;
		while (in_tool && marker_lines(victim, k, NULL) < 1 && now_ms() < until)
			sleep_ms(20);
		cr_assert(!in_tool || marker_lines(victim, k, NULL) == 1, "kill %d: the command never started", k);
		cr_assert_eq(kill(victim->pid, SIGKILL), 0);
		cr_assert_eq(child_wait(&victim->pid, 30000), 128 + SIGKILL);
		uint64_t t0 = now_ms();
		tws_free(ws);
		/* every other kill, started again at once: its old row is still
		 * live, so its start takes nothing over, and the cluster does
		 * once the row changes hands */
		bool at_once = k % 2 == 1;
		if (at_once)
			node_start(&f, (int)(victim - f.n));
		char sql[512];
		snprintf(sql, sizeof(sql), "SELECT count(*) FROM runs WHERE run_id = '%s' AND status = 'ok'", queued);
		cr_assert(q_becomes(&f, sql, 1, 30000), "kill %d: the queued run %s", k, run_state(&f, queued));
		uint64_t took = now_ms() - t0;
		worst = took > worst ? took : worst;
		tws_free(wo);
		if (!at_once)
			node_start(&f, (int)(victim - f.n));
	}
	fprintf(stderr, "store_pg_cluster: %d kills, the slowest takeover %llu ms after its kill\n", KILLS,
		(unsigned long long)worst);
	cr_assert_lt(worst, 4 * LEASE_MS + 4000);
	/* every acknowledged message ended: ran once, or was in flight at a kill */
	char sql[512];
	view_t w = {.ws = node_ws(&f.n[0]), .seq = 1};
	snprintf(sql, sizeof(sql), "SELECT count(*) FROM runs WHERE status = 'accepted'");
	cr_assert(q_becomes(&f, sql, 0, 30000), "%lld runs never ended", q_int(&f, sql));
	for (int i = 0; i < n; i++) {
		char *st = run_state(&f, acc[i].run);
		long long turns = user_turns(&f, acc[i].run);
		if (acc[i].slow) {
			cr_assert_str_eq(st, "error/node_lost", "run %s", acc[i].run);
			cr_assert_eq(turns, 1, "run %s", acc[i].run);
			/* a command that started under it makes it unsafe to send
			 * again; a model call in flight does not */
			cr_assert_eq(replay_invalid(&f, acc[i].run), acc[i].tool >= 0, "run %s", acc[i].run);
			/* and agent.wait at any node says so */
			cJSON *q = cJSON_CreateObject();
			cJSON_AddStringToObject(q, "runId", acc[i].run);
			cr_assert_eq(gl_ws_req(w.ws, "w", "agent.wait", q), 0);
			cJSON *a = view_answer(&w, "w", false);
			cr_assert_str_eq(jstr(jget(a, "payload"), "status"), "error");
			cr_assert_str_eq(jstr(jget(a, "payload"), "errorKind"), "node_lost");
			cr_assert_eq(cJSON_IsTrue(jget(jget(a, "payload"), "replayInvalid")), acc[i].tool >= 0, "run %s",
				     acc[i].run);
			cJSON_Delete(a);
			/* the transcript is paired again: the queued run that ran
			 * next wrote the cut-off call's made-up result */
			snprintf(sql, sizeof(sql), "SELECT count(*) FROM messages WHERE run_id = '%s' AND role = 'toolResult'",
				 acc[i].run);
			cr_assert_eq(q_int(&f, sql), acc[i].tool >= 0 ? 1 : 0, "run %s", acc[i].run);
		} else {
			cr_assert_str_eq(st, "ok/", "run %s", acc[i].run);
			cr_assert_eq(turns, 1, "run %s has %lld user turns", acc[i].run, turns);
		}
		free(st);
	}
	cr_assert_eq(q_int(&f, "SELECT count(*) FROM runs"), n, "a run nobody asked for");
	/* each command ran once, never again on the node that took over, and
	 * died with the node that ran it */
	for (int i = 0; i < n; i++) {
		if (acc[i].tool < 0)
			continue;
		int ran = 0;
		for (int j = 0; j < NODES; j++) {
			int lines = marker_lines(&f.n[j], acc[i].tool, NULL);
			ran += lines > 0 ? lines : 0;
		}
		cr_assert_eq(ran, 1, "the command of kill %d ran %d times", acc[i].tool, ran);
		long pid = 0;
		marker_lines(acc[i].node, acc[i].tool, &pid);
		cr_assert_gt(pid, 0, "kill %d: no pid in its marker", acc[i].tool);
		uint64_t until = now_ms() + 10000;
		while (!process_gone(pid) && now_ms() < until)
			sleep_ms(50);
		cr_assert(process_gone(pid), "the command of kill %d (pid %ld) outlived its node", acc[i].tool, pid);
	}
	tws_free(w.ws);
	for (int i = 0; i < NODES; i++) {
		char key[32];
		key_on(i, ALL_NODES, "loop", key, sizeof(key));
		assert_not_interleaved(&f, key);
	}
	fx_fini(&f);
}

/* Sends `agent` on ws until it is accepted (the same key each time: a
 * refusal while the database is away is answered again once it is back),
 * for up to 60 s; the run id into run. */
static void agent_until_accepted(tws_t *ws, const char *key, const char *message, const char *idem, char *run,
				 size_t n)
{
	uint64_t until = now_ms() + 60000;
	for (int attempt = 0; now_ms() < until; attempt++) {
		char id[48];
		snprintf(id, sizeof(id), "%s-%d", idem, attempt);
		uint64_t now = now_ms();
		cJSON *res = agent_ask(ws, id, key, message, idem, until > now ? until - now : 0);
		bool ok = res && jok(res);
		if (ok)
			snprintf(run, n, "%s", jstr(jget(res, "payload"), "runId"));
		cJSON_Delete(res);
		if (ok)
			return;
		sleep_ms(200);
	}
	cr_assert_fail("%s was never accepted", idem);
}

#define RESTART_SESSIONS 6
#define RESTART_RUNS 400

Test(store_pg_cluster, a_restarted_database_loses_nothing_and_runs_nothing_twice, .timeout = 600)
{
	fx_t f;
	fx_init(&f);
	tws_t *ws[NODES];
	for (int i = 0; i < NODES; i++)
		ws[i] = node_ws(&f.n[i]);
	char keys[RESTART_SESSIONS][32];
	for (int i = 0; i < RESTART_SESSIONS; i++) {
		char prefix[16];
		snprintf(prefix, sizeof(prefix), "restart%d", i);
		key_on(i % NODES, ALL_NODES, prefix, keys[i], sizeof(keys[i]));
	}
	/* turns of every session sent at every node, the database restarted
	 * (every connection cut) while they run */
	static char runs[RESTART_RUNS][PC_STORE_ID_MAX + 1];
	int n = 0;
	uint64_t t0 = now_ms();
	bool restarted = false;
	while (n < RESTART_RUNS && now_ms() - t0 < 8000) {
		if (!restarted && now_ms() - t0 > 2500) {
			pg_test_cluster("restart");
			restarted = true;
		}
		char idem[32];
		snprintf(idem, sizeof(idem), "restart-%d", n);
		agent_until_accepted(ws[n % NODES], keys[(n / NODES) % RESTART_SESSIONS],
				     "turn [[mock:{\"text\":\"an answer\",\"ttft_ms\":100}]]", idem, runs[n],
				     sizeof(runs[n]));
		n++;
		sleep_ms(25); /* about what the sessions get through: a steady load, not a backlog */
	}
	cr_assert(restarted);
	char sql[512];
	snprintf(sql, sizeof(sql), "SELECT count(*) FROM runs WHERE status = 'accepted'");
	if (!q_becomes(&f, sql, 0, 60000)) {
		char *open = q_text(&f, "SELECT string_agg(r.run_id || ' ' || r.session_key || ' ' || coalesce(r.owner, '-')"
					" || ' msgs=' || (SELECT count(*) FROM messages m WHERE m.run_id = r.run_id), '; ')"
					" FROM runs r WHERE status = 'accepted'");
		cr_assert_fail("runs never ended: %s", open);
	}
	/* one run per acknowledged message, none nobody asked for */
	cr_assert_eq(q_int(&f, "SELECT count(*) FROM runs"), n);
	cr_assert_eq(q_int(&f, "SELECT count(DISTINCT idem_key) FROM runs"), n);
	int ok = 0;
	for (int i = 0; i < n; i++) {
		char *st = run_state(&f, runs[i]);
		long long turns = user_turns(&f, runs[i]);
		if (!strcmp(st, "ok/")) {
			ok++;
			cr_assert_eq(turns, 1, "run %s has %lld user turns", runs[i], turns);
			snprintf(sql, sizeof(sql),
				 "SELECT count(*) FROM messages WHERE role = 'assistant' AND run_id = '%s'", runs[i]);
			cr_assert_eq(q_int(&f, sql), 1, "run %s ended ok without its reply kept", runs[i]);
		} else {
			cr_assert_leq(turns, 1, "run %s (%s) has %lld user turns", runs[i], st, turns);
			fprintf(stderr, "store_pg_cluster: run %s ended %s\n", runs[i], st);
		}
		free(st);
	}
	/* the nodes felt the restart: writes waited for the database (held
	 * and sent again), or failed */
	double felt = 0;
	for (int i = 0; i < NODES; i++)
		felt += node_metric(&f.n[i], "pincer_store_held_transactions_total") +
			node_metric(&f.n[i], "pincer_store_retried_transactions_total") +
			node_metric(&f.n[i], "pincer_store_failed_transactions_total");
	fprintf(stderr, "store_pg_cluster: %d turns across a database restart, %d ok; %.0f held, retried or failed writes\n",
		n, ok, felt);
	cr_assert_gt(felt, 0, "the restart went unnoticed: did it happen under load?");
	for (int i = 0; i < RESTART_SESSIONS; i++)
		assert_not_interleaved(&f, keys[i]);
	for (int i = 0; i < NODES; i++)
		tws_free(ws[i]);
	fx_fini(&f);
}
