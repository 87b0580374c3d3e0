/*
 * `pincer load` end to end: the built binary as a child process against
 * `pincer gateway` on its embedded mock (the WebSocket RPC) and against
 * `pincer mock-llm` (OpenAI chat completions), all on loopback. The
 * mocks' scripted delays (`ttft_ms`, `delay_ms` in a [[mock:...]] marker)
 * give the percentiles a floor they cannot be under; the upper bounds are
 * generous, for a shared and noisy machine. Also: the open loop's
 * arrivals, drops, turns in flight at the end, coordinated omission,
 * thresholds and exit codes, --csv, --compare, --slo, --via chat, SIGINT,
 * tool calls, --target-pid and --metrics-url, and targets that refuse, drop or never answer (a gateway killed
 * mid-stream among them), which must end on time.
 */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "load_child.h"
#include "raw_http.h"

/* 4 words: the first after 100 ms, then one every 20 ms. */
#define SCRIPTED "hi {session}/{turn} [[mock:{\"text\":\"one two three four\",\"ttft_ms\":100,\"delay_ms\":20}]]"


static const cJSON *obj(const cJSON *j, const char *k)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, k);
	cr_assert(cJSON_IsObject(v), "'%s' is not an object", k);
	return v;
}

/* A series' percentiles exist and never decrease; its p50. */
static double series(const cJSON *j, const char *k)
{
	const cJSON *s = obj(j, k);
	static const char *const keys[] = {"p50", "p90", "p99", "p999", "max"};
	double last = 0;
	for (size_t i = 0; i < 5; i++) {
		double v = num(s, keys[i]);
		cr_assert_geq(v, last, "%s.%s %g is below the one before (%g)", k, keys[i], v, last);
		last = v;
	}
	return num(s, "p50");
}

/* A count in the JSON, as an integer. */
static uint64_t count(const cJSON *j, const char *k) { return (uint64_t)num(j, k); }

/* Every turn asked for is somewhere: ok, failed, dropped or in flight. */
static void assert_accounted(const cJSON *j, uint64_t asked)
{
	uint64_t sum = count(j, "turns_ok") + count(j, "turns_failed") + count(j, "dropped") +
		       count(j, "in_flight_at_end");
	cr_assert_eq(sum, asked, "%llu of %llu turns accounted for", (unsigned long long)sum,
		     (unsigned long long)asked);
}

static void assert_json(const result_t *r)
{
	cr_assert_eq(r->status, 0, "exit %d\nstdout: %s\nstderr: %s", r->status, r->out, r->err);
	cr_assert(cJSON_IsObject(r->json), "stdout is not one JSON object: %s", r->out);
}

/* ---- against the gateway (WebSocket RPC) ---- */

Test(load_cli, gateway_closed_loop_json_and_percentiles, .timeout = 240)
{
	ctx_t t;
	gateway_up(&t);
	result_t r = load(&t, ARGS("--target", t.target, "--token", TOKEN, "--sessions", "10", "--turns", "3",
				   "--message", SCRIPTED, "--json", "--quiet"));
	assert_json(&r);
	const cJSON *j = r.json;
	cr_assert_eq(count(j, "version"), 1);
	cr_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "target")), t.target);
	cr_assert_eq(count(j, "sessions"), 10);
	cr_assert_eq(count(j, "turns_ok"), 30, "%s", r.out);
	cr_assert_eq(count(j, "connections"), 10, "one WebSocket a session: %s", r.out);
	cr_assert_eq(count(j, "turns_failed"), 0);
	cr_assert_eq(count(j, "dropped"), 0);
	cr_assert_null(obj(j, "errors")->child, "errors: %s", r.out);
	cr_assert_gt(num(j, "wall_s"), 0);
	cr_assert_gt(num(j, "turns_per_s"), 0);
	/* the mock waits 100 ms for the first word, 20 ms for each next one */
	double ttft = series(j, "ttft_ms"), turn = series(j, "turn_ms"), itl = series(j, "itl_ms");
	cr_assert_geq(ttft, 100, "ttft p50 %g", ttft);
	cr_assert_geq(turn, 160, "turn p50 %g", turn);
	cr_assert_leq(turn, 20000, "turn p50 %g", turn);
	cr_assert_geq(num(obj(j, "turn_ms"), "max"), num(obj(j, "ttft_ms"), "max"));
	cr_assert_geq(itl, 10, "itl p50 %g", itl);
	cr_assert_leq(itl, 5000, "itl p50 %g", itl);
	/* at most 3 gaps a turn (the gateway may send two words as one delta) */
	uint64_t gaps = count(obj(j, "itl_ms"), "count");
	cr_assert(gaps >= 30 && gaps <= 90, "%llu gaps in 30 turns", (unsigned long long)gaps);
	cr_assert_eq(count(obj(j, "accepted_ms"), "count"), 30);
	cr_assert_leq(series(j, "accepted_ms"), ttft);
	result_free(&r);

	/* the table, and the progress line on stderr (not a tty: whole lines) */
	/* its turns in flight at the end go on at the gateway: the runs after
	 * it take keys of their own, or their first messages would be steered
	 * into those turns (the default queue mode) */
	r = load(&t, ARGS("--target", t.target, "--token", TOKEN, "--sessions", "2", "--duration", "1.5",
			  "--session-key", "table-{session}", "--message", SCRIPTED));
	cr_assert_eq(r.status, 0, "%s", r.err);
	cr_assert_not_null(strstr(r.out, "turn_ms"), "%s", r.out);
	cr_assert_not_null(strstr(r.out, "closed loop, 2 sessions"), "%s", r.out);
	cr_assert_not_null(strstr(r.err, "turns/s"), "%s", r.err);
	cr_assert_null(strchr(r.err, '\r'), "carriage returns are for a terminal");
	result_free(&r);

	/* the Control UI's way: chat.send, then `chat` events to the final one */
	r = load(&t, ARGS("--target", t.target, "--token", TOKEN, "--via", "chat", "--sessions", "5", "--turns", "2",
			  "--session-key", "chat-{session}", "--message", SCRIPTED, "--json", "--quiet"));
	assert_json(&r);
	cr_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(r.json, "via")), "chat");
	cr_assert_eq(count(r.json, "turns_ok"), 10, "%s", r.out);
	cr_assert_eq(count(obj(r.json, "accepted_ms"), "count"), 10, "%s", r.out);
	cr_assert_geq(series(r.json, "ttft_ms"), 100);
	cr_assert_geq(series(r.json, "turn_ms"), 160);
	result_free(&r);

	/* `agent`, then agent.wait for the run's end */
	r = load(&t, ARGS("--target", t.target, "--token", TOKEN, "--via", "wait", "--sessions", "3", "--turns", "2",
			  "--session-key", "wait-{session}", "--message", SCRIPTED, "--json", "--quiet"));
	assert_json(&r);
	cr_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(r.json, "via")), "wait");
	cr_assert_eq(count(r.json, "turns_ok"), 6, "%s", r.out);
	cr_assert_eq(count(obj(r.json, "accepted_ms"), "count"), 6, "%s", r.out);
	cr_assert_geq(series(r.json, "turn_ms"), 160);
	result_free(&r);

	/* --session-key: a new conversation every 2 turns, its key from the
	 * template, as the gateway's log names the runs' sessions */
	r = load(&t, ARGS("--target", t.target, "--token", TOKEN, "--sessions", "2", "--turns", "4", "--session-key",
			  "k{run}-{session}-{turn/2}", "--message", "x [[mock:{\"text\":\"ok\"}]]", "--json", "--quiet"));
	assert_json(&r);
	cr_assert_eq(count(r.json, "turns_ok"), 8, "%s", r.out);
	result_free(&r);
	char log[128];
	snprintf(log, sizeof(log), "%s/gw.err", t.dir);
	char *text = read_file(log);
	const char *k = strstr(text, "\"sessionKey\":\"k");
	cr_assert_not_null(k, "%s", text);
	char run[40];
	cr_assert_eq(sscanf(k + 15, "%39[0-9a-f]-", run), 1, "%.80s", k);
	for (int session = 0; session < 2; session++)
		for (int conv = 0; conv < 3; conv++) {
			char key[80];
			snprintf(key, sizeof(key), "\"sessionKey\":\"k%s-%d-%d\"", run, session, conv);
			/* turns 0-1 and 2-3 of each session: two keys, no third */
			if (conv < 2)
				cr_assert_not_null(strstr(text, key), "%s missing", key);
			else
				cr_assert_null(strstr(text, key), "%s", key);
		}
	/* every connection of the runs ended with a close frame: a client that
	 * is done says so, in flight at the end or not */
	unsigned closed = 0;
	for (const char *p = strstr(text, "\"msg\":\"websocket closed\""); p;
	     p = strstr(p + 1, "\"msg\":\"websocket closed\"")) {
		const char *eol = strchr(p, '\n'), *code = strstr(p, "\"code\":");
		cr_assert(code && (!eol || code < eol) && !strncmp(code, "\"code\":1000,", 12), "%.200s", p);
		closed++;
	}
	cr_assert_geq(closed, 10, "%u connections closed", closed);
	free(text);

	/* a wrong token: every turn fails with auth, nothing hangs */
	r = load(&t, ARGS("--target", t.target, "--token", "wrong", "--sessions", "2", "--turns", "2", "--json",
			  "--quiet"));
	assert_json(&r);
	cr_assert_eq(count(r.json, "turns_ok"), 0);
	cr_assert_eq(count(obj(r.json, "errors"), "auth"), 4, "%s", r.out);
	result_free(&r);

	/* its OpenAI endpoint, no --model: the first of the gateway's /v1/models
	 * (asked for with the token), one kept connection a session */
	char http[96];
	snprintf(http, sizeof(http), "http://%s/v1", t.target + strlen("ws://"));
	r = load(&t, ARGS("--target", http, "--token", TOKEN, "--stream", "--sessions", "2", "--turns", "2",
			  "--message", SCRIPTED, "--json", "--quiet"));
	assert_json(&r);
	cr_assert_eq(count(r.json, "turns_ok"), 4, "%s", r.out);
	cr_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(r.json, "model")), "pincer:main");
	cr_assert_eq(count(r.json, "connections"), 2, "%s", r.out);
	result_free(&r);
	/* without the token the listing is refused: the fallback, refused too */
	r = load(&t, ARGS("--target", http, "--sessions", "1", "--turns", "1", "--json", "--quiet"));
	assert_json(&r);
	cr_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(r.json, "model")), "mock");
	cr_assert_eq(count(obj(r.json, "errors"), "http:401"), 1, "%s", r.out);
	result_free(&r);
	down(&t);
}

/* ---- against the mock LLM (OpenAI chat completions) ---- */

Test(load_cli, mock_llm_streamed_and_not, .timeout = 240)
{
	ctx_t t;
	mock_up(&t);
	result_t r = load(&t, ARGS("--target", t.target, "--stream", "--sessions", "5", "--turns", "4", "--message",
				   SCRIPTED, "--json", "--quiet", "--slo", "ttft=60s,tpot=60000ms,turn=60s"));
	assert_json(&r);
	cr_assert_eq(count(r.json, "turns_ok"), 20, "%s", r.out);
	/* the mock's /v1/models lists this one first */
	cr_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(r.json, "model")), "mock-model");
	/* each session's turns on its own kept connection */
	cr_assert_eq(count(r.json, "connections"), 5, "%s", r.out);
	cr_assert_eq(count(r.json, "turns_good"), 20, "every turn is within a minute: %s", r.out);
	cr_assert_gt(num(r.json, "goodput_per_s"), 0);
	double tpot = series(r.json, "tpot_ms");
	cr_assert(tpot >= 20 && tpot <= 2000, "tpot p50 %g", tpot);
	double ttft = series(r.json, "ttft_ms"), turn = series(r.json, "turn_ms"), itl = series(r.json, "itl_ms");
	cr_assert_geq(ttft, 100, "ttft p50 %g", ttft);
	cr_assert_leq(ttft, 5000, "ttft p50 %g", ttft);
	cr_assert_geq(itl, 20, "itl p50 %g", itl);
	cr_assert_leq(itl, 2000, "itl p50 %g", itl);
	cr_assert_geq(turn, 160, "turn p50 %g", turn);

	/* --compare: the run above beside a slower one (the first word 200 ms
	 * later), in the JSON and in the table */
	char old[128];
	snprintf(old, sizeof(old), "%s/old.json", t.dir);
	write_file(old, r.out);
	double old_p50 = num(obj(r.json, "turn_ms"), "p50");
	result_free(&r);
	const char *slower = "x [[mock:{\"text\":\"one two three four\",\"ttft_ms\":300,\"delay_ms\":20}]]";
	r = load(&t, ARGS("--target", t.target, "--stream", "--sessions", "5", "--turns", "4", "--message", slower,
			  "--json", "--quiet", "--compare", old));
	assert_json(&r);
	const cJSON *row = obj(obj(obj(r.json, "compare"), "turn_ms"), "p50");
	cr_assert_eq(num(row, "old"), old_p50);
	cr_assert_eq(num(row, "new"), num(obj(r.json, "turn_ms"), "p50"));
	cr_assert_gt(num(row, "change"), 0, "slower: %s", r.out);
	cr_assert_not_null(cJSON_GetObjectItemCaseSensitive(obj(r.json, "compare"), "turns_per_s"));
	result_free(&r);
	r = load(&t, ARGS("--target", t.target, "--sessions", "1", "--message", slower, "--quiet", "--compare", old));
	cr_assert_eq(r.status, 0, "%s", r.err);
	cr_assert_not_null(strstr(r.out, "compared with"), "%s", r.out);
	cr_assert_not_null(strstr(r.out, "turn_ms p50"), "%s", r.out);
	result_free(&r);
	write_file(old, "{\"turns_ok\":3}");
	r = load(&t, ARGS("--target", t.target, "--compare", old));
	cr_assert_eq(r.status, 2, "%s", r.err);
	cr_assert_not_null(strstr(r.err, "not the --json of pincer load"), "%s", r.err);
	result_free(&r);

	/* the first word comes after 100 ms: no turn is within 50 ms of it */
	r = load(&t, ARGS("--target", t.target, "--stream", "--sessions", "2", "--turns", "2", "--message", SCRIPTED,
			  "--json", "--quiet", "--slo", "ttft=50ms", "--threshold", "goodput_per_s>0"));
	cr_assert_eq(r.status, 3, "%s", r.err);
	cr_assert_eq(count(r.json, "turns_ok"), 4, "%s", r.out);
	cr_assert_eq(count(r.json, "turns_good"), 0, "%s", r.out);
	result_free(&r);

	/* not streamed: the whole answer after 100 + 3 x 20 ms, no tokens */
	r = load(&t, ARGS("--target", t.target, "--sessions", "5", "--turns", "2", "--message", SCRIPTED, "--json",
			  "--quiet"));
	assert_json(&r);
	cr_assert_eq(count(r.json, "turns_ok"), 10, "%s", r.out);
	cr_assert(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(r.json, "turns_good")), "no --slo: %s", r.out);
	cr_assert_geq(series(r.json, "turn_ms"), 160);
	cr_assert_eq(count(obj(r.json, "ttft_ms"), "count"), 0);
	cr_assert(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(obj(r.json, "ttft_ms"), "p50")));
	result_free(&r);

	/* 256 sessions each with a request out at once: none waits for a
	 * connection of the harness's (by fours of 64, the p50 would be
	 * 4,000; the answers' 2 s leave a second for a slow, busy build) */
	r = load(&t, ARGS("--target", t.target, "--sessions", "256", "--turns", "1", "--json", "--quiet", "--message",
			  "x [[mock:{\"text\":\"a\",\"ttft_ms\":2000}]]"));
	assert_json(&r);
	cr_assert_eq(count(r.json, "turns_ok"), 256, "%s", r.out);
	cr_assert_lt(series(r.json, "turn_ms"), 3000, "%s", r.out);
	result_free(&r);

	/* the connection dropped mid-stream: counted as closed */
	r = load(&t, ARGS("--target", t.target, "--stream", "--sessions", "3", "--turns", "2", "--json", "--quiet",
			  "--message", "x [[mock:{\"text\":\"a b c d e f\",\"disconnect_after\":2}]]"));
	assert_json(&r);
	cr_assert_eq(count(r.json, "turns_ok"), 0);
	cr_assert_eq(count(obj(r.json, "errors"), "closed"), 6, "%s", r.out);
	cr_assert_eq(count(r.json, "connections"), 6, "a new connection after each cut: %s", r.out);
	cr_assert_eq(count(obj(r.json, "itl_ms"), "count"), 0, "a failed turn's tokens are not measured");
	result_free(&r);
	down(&t);
}

/* The --csv file: its header, a row a second (the last at the end),
 * 13 cells each, the ok column adding up to turns_ok. */
static void assert_csv(const char *path, uint64_t ok, unsigned seconds)
{
	char *text = read_file(path);
	const char *header = "elapsed_s,ok,failed,dropped,in_flight,turns_per_s,turn_p50_ms,turn_p99_ms,ttft_p50_ms,"
			     "ttft_p99_ms,tool_calls,target_cpu_pct,target_rss_mib\n";
	cr_assert_eq(strncmp(text, header, strlen(header)), 0, "%s", text);
	uint64_t sum = 0;
	unsigned rows = 0;
	for (char *line = text + strlen(header); *line; rows++) {
		char *nl = strchr(line, '\n');
		cr_assert_not_null(nl, "an unfinished row: %s", line);
		*nl = '\0';
		unsigned commas = 0;
		for (const char *c = line; *c; c++)
			commas += *c == ',';
		cr_assert_eq(commas, 12, "row %s", line);
		double elapsed = 0;
		unsigned long long n = 0;
		cr_assert_eq(sscanf(line, "%lf,%llu,", &elapsed, &n), 2, "row %s", line);
		sum += n;
		line = nl + 1;
	}
	cr_assert(rows >= seconds && rows <= seconds + 1, "%u rows for %u s", rows, seconds);
	cr_assert_eq(sum, ok, "the rows' ok add up to %llu, not %llu", (unsigned long long)sum, (unsigned long long)ok);
	free(text);
}

/* The first row of a CSV whose first second has nothing to play: written
 * about a second in, with nothing ended by then. A session or arrival
 * that starts on the second's edge may already be in flight when the row
 * is taken (the row's clock reads 1.000 or a millisecond more). */
static void assert_first_second_idle(const char *rows)
{
	const char *row = strchr(rows, '\n');
	double elapsed = 0;
	unsigned long long ok = 1, failed = 1, dropped = 1;
	cr_assert(row && sscanf(row + 1, "%lf,%llu,%llu,%llu,", &elapsed, &ok, &failed, &dropped) == 4,
		  "no first row: %s", rows);
	cr_assert(elapsed >= 0.99 && elapsed < 1.1 && ok == 0 && failed == 0 && dropped == 0,
		  "the first second plays nothing: %s", rows);
}

Test(load_cli, open_loop_arrivals_drops_and_the_end, .timeout = 240)
{
	ctx_t t;
	mock_up(&t);
	/* constant: one arrival every 25 ms for 2 s */
	char csv[128];
	snprintf(csv, sizeof(csv), "%s/run.csv", t.dir);
	result_t r = load(&t, ARGS("--target", t.target, "--stream", "--sessions", "8", "--rate", "40", "--duration",
				   "2", "--arrivals", "constant", "--message", SCRIPTED, "--json", "--quiet", "--csv",
				   csv));
	assert_json(&r);
	cr_assert_eq(count(r.json, "arrivals"), 80, "%s", r.out);
	assert_accounted(r.json, 80);
	assert_csv(csv, count(r.json, "turns_ok"), 2);
	cr_assert_geq(count(r.json, "turns_ok"), 60, "%s", r.out);
	cr_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(r.json, "loop")), "open");
	cr_assert_lt(r.ms, 2000 + END_SLACK_MS);
	result_free(&r);

	/* stages: nothing for a second, then a ramp to 40/s over a second,
	 * which sums to 20 arrivals (the last may fall on the end) */
	r = load(&t, ARGS("--target", t.target, "--sessions", "8", "--stages", "1s:0,1s:40", "--arrivals", "constant",
			  "--message", SCRIPTED, "--json", "--quiet", "--csv", csv));
	assert_json(&r);
	uint64_t ramped = count(r.json, "arrivals");
	cr_assert(ramped >= 18 && ramped <= 20, "%llu arrivals in the ramp", (unsigned long long)ramped);
	assert_accounted(r.json, ramped);
	cr_assert_lt(r.ms, 2000 + END_SLACK_MS);
	assert_csv(csv, count(r.json, "turns_ok"), 2);
	char *rows = read_file(csv);
	assert_first_second_idle(rows);
	free(rows);
	result_free(&r);

	/* session stages: none for a second, 6 sessions for a second, then
	 * none again; each turn 100 ms and a 100 ms pause, about 5 turns a
	 * second a session: only the middle second plays */
	r = load(&t, ARGS("--target", t.target, "--session-stages", "1:0,0.01:6,1:6,0.01:0,1:0", "--think-ms", "100",
			  "--message", "x [[mock:{\"text\":\"ok\",\"ttft_ms\":100}]]", "--json", "--quiet", "--csv",
			  csv));
	assert_json(&r);
	cr_assert_eq(count(r.json, "sessions"), 6, "%s", r.out);
	cr_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(r.json, "loop")), "closed");
	uint64_t played = count(r.json, "turns_ok");
	cr_assert(played >= 12 && played <= 40, "%llu turns by 6 sessions in a second", (unsigned long long)played);
	assert_accounted(r.json, played);
	assert_csv(csv, played, 3);
	rows = read_file(csv);
	assert_first_second_idle(rows);
	/* the last second: at most the turns under way when they retired */
	char *third = strstr(rows, "\n3.0");
	cr_assert(third && strtoul(strchr(third, ',') + 1, NULL, 10) <= 6, "no turn starts in the last second: %s",
		  rows);
	free(rows);
	result_free(&r);

	/* poisson: the same seed, the same arrivals */
	uint64_t arrivals[2];
	for (int i = 0; i < 2; i++) {
		r = load(&t, ARGS("--target", t.target, "--sessions", "4", "--rate", "30", "--duration", "1", "--seed",
				  "7", "--message", SCRIPTED, "--json", "--quiet"));
		assert_json(&r);
		arrivals[i] = count(r.json, "arrivals");
		assert_accounted(r.json, arrivals[i]);
		result_free(&r);
	}
	cr_assert_eq(arrivals[0], arrivals[1]);
	cr_assert(arrivals[0] >= 10 && arrivals[0] <= 60, "%llu arrivals at 30/s for 1 s",
		  (unsigned long long)arrivals[0]);

	/* 2 at most in flight, each turn 300 ms, 50 arrivals a second: drops;
	 * a turn that waited for its session counts that wait */
	r = load(&t, ARGS("--target", t.target, "--sessions", "1", "--rate", "50", "--duration", "1.5", "--arrivals",
			  "constant", "--max-in-flight", "2", "--json", "--quiet", "--message",
			  "x [[mock:{\"text\":\"a\",\"ttft_ms\":300}]]"));
	assert_json(&r);
	cr_assert_gt(count(r.json, "dropped"), 20, "%s", r.out);
	assert_accounted(r.json, count(r.json, "arrivals"));
	cr_assert_geq(num(obj(r.json, "turn_ms"), "max"), 550, "the second turn waits for the first: %s", r.out);
	result_free(&r);

	/* turns still running when the duration ends are reported apart */
	r = load(&t, ARGS("--target", t.target, "--sessions", "3", "--duration", "1", "--json", "--quiet", "--message",
			  "x [[mock:{\"text\":\"a\",\"ttft_ms\":4000}]]"));
	assert_json(&r);
	cr_assert_eq(count(r.json, "in_flight_at_end"), 3, "%s", r.out);
	cr_assert_eq(count(r.json, "turns_ok"), 0);
	cr_assert_eq(count(obj(r.json, "turn_ms"), "count"), 0);
	cr_assert_lt(r.ms, 1000 + END_SLACK_MS);
	result_free(&r);
	down(&t);
}

/* One stalled answer among fast ones, the mock scripted turn by turn:
 * the closed loop waits for it and sends nothing meanwhile, so its p90
 * never sees the stall; the open loop keeps its schedule, the turns meant
 * for the stall queue behind it, and their wait shows. */
Test(load_cli, coordinated_omission, .timeout = 240)
{
	ctx_t t;
	mock_up(&t);
	char path[128];
	snprintf(path, sizeof(path), "%s/stall.jsonl", t.dir);
	FILE *f = fopen(path, "w");
	cr_assert_not_null(f);
	for (int i = 0; i < 100; i++)
		fprintf(f, "{\"message\":\"turn {turn} [[mock:{\\\"text\\\":\\\"ok\\\",\\\"ttft_ms\\\":%d}]]\"}\n",
			i == 20 ? 1000 : 10);
	cr_assert_eq(fclose(f), 0);
	result_t r = load(&t, ARGS("--target", t.target, "--messages", path, "--turns", "100", "--json", "--quiet"));
	assert_json(&r);
	cr_assert_eq(count(r.json, "turns_ok"), 100, "%s", r.out);
	cr_assert_geq(num(obj(r.json, "turn_ms"), "max"), 1000, "%s", r.out);
	cr_assert_lt(num(obj(r.json, "turn_ms"), "p90"), 500, "closed loop: the stall is one turn; %s", r.out);
	result_free(&r);
	r = load(&t, ARGS("--target", t.target, "--messages", path, "--turns", "100", "--rate", "50", "--arrivals",
			  "constant", "--json", "--quiet"));
	assert_json(&r);
	cr_assert_eq(count(r.json, "turns_ok"), 100, "%s", r.out);
	cr_assert_geq(num(obj(r.json, "turn_ms"), "max"), 1000, "%s", r.out);
	cr_assert_geq(num(obj(r.json, "turn_ms"), "p90"), 500, "open loop: the queue behind it; %s", r.out);
	result_free(&r);
	/* a file that is not messages is refused before the run */
	write_file(path, "{\"message\":\"a\"}\n[1]\n");
	r = load(&t, ARGS("--target", t.target, "--messages", path));
	cr_assert_eq(r.status, 2);
	cr_assert_not_null(strstr(r.err, "stall.jsonl:2:"), "%s", r.err);
	result_free(&r);
	down(&t);
}

/* The mock's port, from the ctx's http target. */
static uint16_t mock_port(const ctx_t *t)
{
	unsigned port = 0;
	cr_assert_eq(sscanf(t->target, "http://127.0.0.1:%u/", &port), 1);
	return (uint16_t)port;
}

/* `pincer load args...` with the whole target stopped for 1 s (the mock's
 * pause) 1.5 s into the run. */
static result_t load_with_pause(ctx_t *t, const char *const *args)
{
	running_t run = load_start(t, args);
	sleep_ms(1500);
	char answer[512];
	int st = raw_http(mock_port(t), "POST /__mock/pause HTTP/1.1\r\nHost: 127.0.0.1\r\n", "{\"ms\":1000}", answer,
			  sizeof(answer));
	cr_assert_eq(st, 200, "%s", answer);
	return pincer_finish(&run);
}

/* The target stops answering for 1 s in the middle of the run, as a
 * process in a long pause does. Closed loop, each session has one turn
 * caught in it and sends nothing meanwhile: the stall is a handful of
 * turns among thousands, out of sight below the max. Open loop, the turns
 * meant for that second are late by up to all of it, and the percentiles
 * show it. */
Test(load_cli, a_stalled_target_shows_in_the_open_loop_only, .timeout = 240)
{
	ctx_t t;
	mock_up(&t);
	const char *msg = "x [[mock:{\"text\":\"ok\"}]]";
	result_t r = load_with_pause(&t, ARGS("--target", t.target, "--message", msg, "--sessions", "4", "--duration",
					      "4", "--json", "--quiet"));
	assert_json(&r);
	cr_assert_geq(num(obj(r.json, "turn_ms"), "max"), 900, "closed loop: the stalled turns; %s", r.out);
	cr_assert_lt(num(obj(r.json, "turn_ms"), "p99"), 500, "closed loop: the omission; %s", r.out);
	result_free(&r);
	r = load_with_pause(&t, ARGS("--target", t.target, "--message", msg, "--sessions", "50", "--rate", "100",
				     "--arrivals", "constant", "--duration", "4", "--json", "--quiet"));
	assert_json(&r);
	cr_assert_geq(num(obj(r.json, "turn_ms"), "max"), 950, "open loop: nearly the whole stall; %s", r.out);
	cr_assert_geq(num(obj(r.json, "turn_ms"), "p99"), 800, "open loop: the stall in the p99; %s", r.out);
	cr_assert_geq(num(obj(r.json, "turn_ms"), "p90"), 400, "open loop: a quarter of the turns late; %s", r.out);
	result_free(&r);
	down(&t);
}

/* Every option from PINCER_LOAD_<NAME>, the command line having the last
 * word; a bad value names its variable. */
static result_t load_env(ctx_t *t, const char *const *env, const char *const *args)
{
	running_t run = pincer_start_env(t, "load", "/usr/bin:/bin", env, args);
	return pincer_finish(&run);
}

Test(load_cli, options_from_the_environment, .timeout = 120)
{
	ctx_t t;
	mock_up(&t);
	char target[128];
	snprintf(target, sizeof(target), "PINCER_LOAD_TARGET=%s", t.target);
	const char *const env[] = {target, "PINCER_LOAD_SESSIONS=3", "PINCER_LOAD_TURNS=2", "PINCER_LOAD_JSON=1",
				   "PINCER_LOAD_QUIET=yes", NULL};
	result_t r = load_env(&t, env, (const char *const[]){NULL});
	assert_json(&r);
	cr_assert_eq(count(r.json, "sessions"), 3, "%s", r.out);
	cr_assert_eq(count(r.json, "turns_ok"), 6, "%s", r.out);
	result_free(&r);
	r = load_env(&t, env, ARGS("--turns", "1"));
	assert_json(&r);
	cr_assert_eq(count(r.json, "turns_ok"), 3, "the command line wins: %s", r.out);
	result_free(&r);
	r = load_env(&t, (const char *const[]){target, "PINCER_LOAD_SESSIONS=zero", NULL}, (const char *const[]){NULL});
	cr_assert_eq(r.status, 2);
	cr_assert_not_null(strstr(r.err, "PINCER_LOAD_SESSIONS"), "%s", r.err);
	result_free(&r);
	r = load_env(&t, (const char *const[]){target, "PINCER_LOAD_JSON=maybe", NULL}, (const char *const[]){NULL});
	cr_assert_eq(r.status, 2);
	cr_assert_not_null(strstr(r.err, "PINCER_LOAD_JSON"), "%s", r.err);
	result_free(&r);
	down(&t);
}

Test(load_cli, thresholds_set_the_exit_status, .timeout = 240)
{
	ctx_t t;
	mock_up(&t);
	result_t r = load(&t, ARGS("--target", t.target, "--sessions", "2", "--turns", "2", "--message", SCRIPTED,
				   "--quiet", "--threshold",
				   "p99(turn_ms)<60000, rate(errors)<0.5,p99.9(turn_ms)>=100"));
	cr_assert_eq(r.status, 0, "%s", r.err);
	result_free(&r);
	r = load(&t, ARGS("--target", t.target, "--sessions", "2", "--turns", "2", "--message", SCRIPTED, "--quiet",
			  "--threshold", "rate(errors)<0.01,p50(turn_ms)<1"));
	cr_assert_eq(r.status, 3, "%s", r.err);
	cr_assert_not_null(strstr(r.err, "'p50(turn_ms)<1' crossed"), "%s", r.err);
	cr_assert_null(strstr(r.err, "rate(errors)"), "the clause that held is not named: %s", r.err);
	result_free(&r);
	/* nothing measured does not pass a latency threshold */
	r = load(&t, ARGS("--target", t.target, "--sessions", "1", "--turns", "1", "--message", SCRIPTED, "--quiet",
			  "--threshold", "max(ttft_ms)<100000"));
	cr_assert_eq(r.status, 3, "not streamed: no ttft_ms; %s", r.err);
	result_free(&r);
	const char *bad[] = {"p99(turn)<1", "p99(turn_ms)=1", "p99(turn_ms)<", "p101(turn_ms)<1", "rate(errors)<x",
			     "p50(turn_ms)<1,"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		r = load(&t, ARGS("--target", t.target, "--threshold", bad[i]));
		cr_assert_eq(r.status, 2, "'%s' was taken", bad[i]);
		cr_assert_not_null(strstr(r.err, "--threshold"), "%s", r.err);
		result_free(&r);
	}
	down(&t);
}

/* ---- targets that refuse or never answer ---- */

/* A loopback port that refuses: bound, then closed. */
static unsigned refusing_port(void)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	cr_assert_geq(fd, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t n = sizeof(a);
	cr_assert_eq(bind(fd, (struct sockaddr *)&a, n), 0);
	cr_assert_eq(getsockname(fd, (struct sockaddr *)&a, &n), 0);
	close(fd);
	return ntohs(a.sin_port);
}

/* A loopback listener that never accepts: connections complete in the
 * kernel's backlog and never hear a byte. The caller closes it. */
static int silent_listener(unsigned *port)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	cr_assert_geq(fd, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t n = sizeof(a);
	cr_assert_eq(bind(fd, (struct sockaddr *)&a, n), 0);
	cr_assert_eq(listen(fd, 128), 0);
	cr_assert_eq(getsockname(fd, (struct sockaddr *)&a, &n), 0);
	*port = ntohs(a.sin_port);
	return fd;
}

Test(load_cli, refused_and_silent_targets_end_on_time, .timeout = 240)
{
	ctx_t t;
	dir_only(&t);
	unsigned port = refusing_port();
	char ws[64], http[64];
	snprintf(ws, sizeof(ws), "ws://127.0.0.1:%u", port);
	snprintf(http, sizeof(http), "http://127.0.0.1:%u/v1", port);
	const char *targets[] = {ws, http};
	for (size_t i = 0; i < 2; i++) {
		result_t r = load(&t, ARGS("--target", targets[i], "--sessions", "4", "--duration", "1.5", "--json",
					   "--quiet"));
		assert_json(&r);
		cr_assert_eq(count(r.json, "turns_ok"), 0);
		uint64_t refused = count(obj(r.json, "errors"), "refused");
		cr_assert_gt(refused, 0, "%s", r.out);
		/* a refusing target is retried after a pause, not in a tight loop */
		cr_assert_lt(refused, 4 * 1500 / 50, "%s", r.out);
		cr_assert_lt(r.ms, 1500 + END_SLACK_MS);
		result_free(&r);
	}
	int fd = silent_listener(&port);
	snprintf(ws, sizeof(ws), "ws://127.0.0.1:%u", port);
	snprintf(http, sizeof(http), "http://127.0.0.1:%u/v1", port);
	for (size_t i = 0; i < 2; i++) {
		result_t r = load(&t, ARGS("--target", targets[i], "--sessions", "3", "--duration", "2.5", "--timeout",
					   "1", "--connect-timeout", "1", "--json", "--quiet"));
		assert_json(&r);
		const cJSON *e = obj(r.json, "errors");
		uint64_t timeouts = 0;
		if (cJSON_GetObjectItemCaseSensitive(e, "timeout"))
			timeouts += count(e, "timeout");
		if (cJSON_GetObjectItemCaseSensitive(e, "connect_timeout"))
			timeouts += count(e, "connect_timeout");
		cr_assert_geq(timeouts, 3, "%s", r.out);
		cr_assert_eq(count(r.json, "turns_ok"), 0);
		cr_assert_lt(r.ms, 2500 + END_SLACK_MS);
		result_free(&r);
	}
	close(fd);
	down(&t);
}

/* Waits until `path` has `n` lines (the progress line: n seconds of run). */
static void await_lines(const char *path, unsigned n)
{
	uint64_t until = now_ms() + EXIT_WAIT_MS;
	for (unsigned lines = 0; lines < n;) {
		char *text = read_file(path);
		lines = 0;
		for (const char *c = text; *c; c++)
			lines += *c == '\n';
		free(text);
		cr_assert_lt(now_ms(), until, "no progress lines");
		sleep_ms(50);
	}
}

/* The gateway dies in the middle of streamed turns: they fail as closed,
 * then the sessions find it refusing; the run still ends on time. */
Test(load_cli, gateway_killed_mid_stream, .timeout = 240)
{
	ctx_t t;
	gateway_up(&t);
	char out[128], err[128];
	snprintf(out, sizeof(out), "%s/kill.out", t.dir);
	snprintf(err, sizeof(err), "%s/kill.err", t.dir);
	write_file(out, "");
	write_file(err, "");
	/* twelve words 100 ms apart: every turn is mid-stream most of its time */
	char *argv[] = {t.pincer, "load", "--target", t.target, "--token", TOKEN, "--sessions", "6", "--duration", "4",
			"--json", "--message",
			"w [[mock:{\"text\":\"a b c d e f g h i j k l\",\"ttft_ms\":50,\"delay_ms\":100}]]", NULL};
	char *envp[] = {"PATH=/usr/bin:/bin", NULL};
	uint64_t t0 = now_ms();
	pid_t pid = start_child(t.pincer, argv, envp, t.dir, out, err);
	await_lines(err, 2);
	cr_assert_eq(kill(t.server, SIGKILL), 0);
	(void)child_wait(&t.server, EXIT_WAIT_MS);
	int st = child_wait(&pid, EXIT_WAIT_MS);
	cr_assert_eq(st, 0);
	cr_assert_lt(now_ms() - t0, 4000 + END_SLACK_MS, "the run did not end on time");
	char *o = read_file(out);
	cJSON *j = cJSON_Parse(o);
	cr_assert_not_null(j, "%s", o);
	const cJSON *e = obj(j, "errors");
	cr_assert_geq(count(e, "closed"), 6, "every session had a turn streaming: %s", o);
	cr_assert_gt(count(e, "refused"), 0, "%s", o);
	cJSON_Delete(j);
	free(o);
	down(&t);
}

/* SIGINT ends a long run at once, with the results so far. */
Test(load_cli, sigint_ends_the_run_with_its_results, .timeout = 240)
{
	ctx_t t;
	mock_up(&t);
	char out[128], err[128];
	snprintf(out, sizeof(out), "%s/int.out", t.dir);
	snprintf(err, sizeof(err), "%s/int.err", t.dir);
	/* made here, so the reads below never race the child to them */
	write_file(out, "");
	write_file(err, "");
	char *argv[] = {t.pincer, "load", "--target", t.target, "--sessions", "4", "--duration", "600", "--json",
			"--message", SCRIPTED, NULL};
	char *envp[] = {"PATH=/usr/bin:/bin", NULL};
	pid_t pid = start_child(t.pincer, argv, envp, t.dir, out, err);
	/* two progress lines: it has run for two seconds */
	await_lines(err, 2);
	uint64_t t0 = now_ms();
	cr_assert_eq(kill(pid, SIGINT), 0);
	int st = child_wait(&pid, EXIT_WAIT_MS);
	cr_assert_eq(st, 0);
	cr_assert_lt(now_ms() - t0, END_SLACK_MS);
	char *o = read_file(out);
	cJSON *j = cJSON_Parse(o);
	cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "interrupted")), "%s", o);
	cr_assert_gt(count(j, "turns_ok"), 0, "%s", o);
	cJSON_Delete(j);
	free(o);
	down(&t);
}

/* ---- usage ---- */

Test(load_cli, usage, .timeout = 120)
{
	ctx_t t;
	dir_only(&t);
	result_t r = load(&t, ARGS("--help"));
	cr_assert_eq(r.status, 0);
	cr_assert_not_null(strstr(r.out, "--max-in-flight"));
	result_free(&r);
	const char *const *bad[] = {
		ARGS("--sessions", "3"),
		ARGS("--target", "wss://127.0.0.1:1"),
		ARGS("--target", "ftp://x"),
		ARGS("--target", "ws://127.0.0.1:1", "--sessions", "0"),
		ARGS("--target", "ws://127.0.0.1:1", "--max-in-flight", "3"),
		ARGS("--target", "ws://127.0.0.1:1", "--rate", "5", "--arrivals", "bursty"),
		ARGS("--target", "ws://127.0.0.1:1", "--rate", "5", "--think-ms", "10"),
		ARGS("--target", "ws://127.0.0.1:1", "--duraton", "1"),
		ARGS("--target", "ws://127.0.0.1:1", "--slo", "ttft=5m"),
		ARGS("--target", "ws://127.0.0.1:1", "--stages", "1:x"),
		ARGS("--target", "ws://127.0.0.1:1", "--stages", "1:5", "--duration", "2"),
		ARGS("--target", "ws://127.0.0.1:1", "--stages", "1:5", "--think-ms", "2"),
		ARGS("--target", "ws://127.0.0.1:1", "--session-stages", "1:2.5"),
		ARGS("--target", "ws://127.0.0.1:1", "--session-stages", "1:0"),
		ARGS("--target", "ws://127.0.0.1:1", "--session-stages", "1:5", "--rate", "5"),
		ARGS("--target", "ws://127.0.0.1:1", "--session-stages", "1:5", "--turns", "2"),
		ARGS("--target", "ws://127.0.0.1:1", "--session-stages", "1:5", "--duration", "2"),
		ARGS("--target", "ws://127.0.0.1:1", "--rate", "0.001"),
		ARGS("--target", "ws://127.0.0.1:1", "--via", "rest"),
		ARGS("--target", "http://127.0.0.1:1/v1", "--via", "chat"),
		ARGS("--target", "http://127.0.0.1:1/v1", "--via", "wait"),
		ARGS("--target", "ws://127.0.0.1:1", "--via", "chat", "--model", "m1"),
		ARGS("--target", "ws://127.0.0.1:1", "--slo", "latency=5s"),
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		r = load(&t, bad[i]);
		cr_assert_eq(r.status, 2, "case %zu: exit %d, %s", i, r.status, r.err);
		result_free(&r);
	}
	r = load(&t, ARGS("--target", "wss://127.0.0.1:1"));
	cr_assert_not_null(strstr(r.err, "TLS"), "%s", r.err);
	result_free(&r);
	down(&t);
}

/* ---- tool calls, the target's process and its metrics ---- */

/* Two tool calls in one answer. */
#define TWO_TOOLS                                                                                             \
	"t{turn} [[mock:{\"kind\":\"tool_calls\",\"tool_calls\":[{\"name\":\"clock\"},{\"name\":\"clock\"}]}]]"

static const cJSON *item(const cJSON *j, const char *k) { return cJSON_GetObjectItemCaseSensitive(j, k); }

/* The sum of a --csv column (0-based) over the rows. */
static uint64_t csv_sum(const char *path, int column)
{
	char *text = read_file(path);
	uint64_t sum = 0;
	for (char *line = strchr(text, '\n'); line && line[1]; line = strchr(line + 1, '\n')) {
		const char *c = line + 1;
		for (int i = 0; i < column && c; i++) {
			c = strchr(c, ',');
			c = c ? c + 1 : NULL;
		}
		cr_assert_not_null(c, "a short row in %s", text);
		sum += strtoull(c, NULL, 10);
	}
	free(text);
	return sum;
}

Test(load_cli, tool_calls_of_a_scripted_mock, .timeout = 240)
{
	ctx_t t;
	mock_up(&t);
	char csv[128];
	snprintf(csv, sizeof(csv), "%s/tools.csv", t.dir);
	/* streamed: each call in fragments (id and name, then its arguments) */
	result_t r = load(&t, ARGS("--target", t.target, "--stream", "--sessions", "3", "--turns", "4", "--message",
				   TWO_TOOLS, "--json", "--quiet", "--csv", csv));
	assert_json(&r);
	cr_assert_eq(count(r.json, "turns_ok"), 12, "%s", r.out);
	cr_assert_eq(count(r.json, "tool_calls"), 24, "%s", r.out);
	const cJSON *per = obj(r.json, "tool_calls_per_turn");
	cr_assert_eq(num(per, "mean"), 2);
	cr_assert_eq(count(per, "max"), 2);
	cr_assert_eq(count(obj(per, "turns"), "2"), 12, "%s", r.out);
	cr_assert_eq(csv_sum(csv, 10), 24, "the tool_calls column adds up to the total");
	result_free(&r);
	/* whole answers: choices[0].message.tool_calls */
	r = load(&t, ARGS("--target", t.target, "--sessions", "2", "--turns", "3", "--message", TWO_TOOLS, "--json",
			  "--quiet"));
	assert_json(&r);
	cr_assert_eq(count(r.json, "tool_calls"), 12, "%s", r.out);
	result_free(&r);
	/* no tools: 0, and every turn in the 0 bucket */
	r = load(&t, ARGS("--target", t.target, "--sessions", "2", "--turns", "2", "--json", "--quiet"));
	assert_json(&r);
	cr_assert_eq(count(r.json, "tool_calls"), 0);
	cr_assert_eq(count(obj(obj(r.json, "tool_calls_per_turn"), "turns"), "0"), 4, "%s", r.out);
	result_free(&r);
	/* the summary says it */
	r = load(&t, ARGS("--target", t.target, "--sessions", "1", "--turns", "3", "--message", TWO_TOOLS, "--quiet"));
	cr_assert_eq(r.status, 0, "%s", r.err);
	cr_assert_not_null(strstr(r.out, "tool calls   6 in 3 turns, 2.00 per turn"), "%s", r.out);
	result_free(&r);
	down(&t);
}

Test(load_cli, target_pid_cpu_and_memory, .timeout = 240)
{
	ctx_t t;
	mock_up(&t);
	char pid[16], csv[128];
	snprintf(pid, sizeof(pid), "%d", (int)t.server);
	snprintf(csv, sizeof(csv), "%s/procs.csv", t.dir);
	/* answers without delays: the mock works for the whole run */
	result_t r = load(&t, ARGS("--target", t.target, "--stream", "--sessions", "4", "--duration", "2.5",
				   "--message", "x [[mock:{\"text\":\"a b c\"}]]", "--target-pid", pid, "--json",
				   "--quiet", "--csv", csv));
	assert_json(&r);
	const cJSON *j = r.json;
	cr_assert_eq(count(j, "target_pid"), (uint64_t)t.server);
	cr_assert(cJSON_IsFalse(item(j, "target_exited")), "%s", r.out);
	cr_assert_gt(num(j, "target_cpu_s"), 0, "%s", r.out);
	cr_assert_gt(num(j, "target_cpu_pct"), 0, "%s", r.out);
	cr_assert_gt(num(j, "target_rss_mib"), 1, "%s", r.out);
	cr_assert_geq(num(j, "target_rss_peak_mib"), num(j, "target_rss_mib"), "%s", r.out);
	cr_assert_gt(num(j, "harness_cpu_s"), 0, "%s", r.out);
	cr_assert_gt(num(j, "harness_rss_mib"), 1, "%s", r.out);
	/* per turn: over every turn the samples took in */
	double turns = num(j, "turns_ok") + num(j, "turns_failed") + num(j, "warmup_turns");
	cr_assert_gt(turns, 0);
	cr_assert_float_eq(num(j, "target_cpu_us_per_turn"), num(j, "target_cpu_s") * 1e6 / turns, 1e-6, "%s", r.out);
	/* the mock sleeps between requests: it was woken */
	cr_assert_gt(num(j, "target_wakeups"), 0, "%s", r.out);
	cr_assert_float_eq(num(j, "target_wakeups_per_turn"), num(j, "target_wakeups") / turns, 1e-6, "%s", r.out);
	cr_assert_gt(num(j, "harness_wakeups"), 0, "%s", r.out);
	/* a row a second, each with the target's memory */
	char *rows = read_file(csv);
	char *second = strchr(strchr(rows, '\n') + 1, '\n');
	cr_assert_not_null(second, "%s", rows);
	*second = '\0';
	const char *last = strrchr(rows, ',');
	cr_assert_gt(strtod(last + 1, NULL), 1, "target_rss_mib of the first row: %s", rows);
	free(rows);
	result_free(&r);

	/* three turns: a few hundred microseconds of the mock's CPU, read
	 * thread by thread in ns (clock ticks would read 0 or 10 ms) */
	r = load(&t, ARGS("--target", t.target, "--turns", "3", "--message", "x [[mock:{\"text\":\"a\"}]]",
			  "--target-pid", pid, "--json", "--quiet"));
	assert_json(&r);
	double cpu = num(r.json, "target_cpu_s");
	double ticks = cpu / 0.01;
	cr_assert(cpu > 0 && fabs(ticks - round(ticks)) > 1e-6, "target_cpu_s %.9f: clock ticks, not ns", cpu);
	result_free(&r);

	/* without --target-pid: null, the harness's own still there */
	r = load(&t, ARGS("--target", t.target, "--json", "--quiet"));
	assert_json(&r);
	cr_assert(cJSON_IsNull(item(r.json, "target_pid")), "%s", r.out);
	cr_assert(cJSON_IsNull(item(r.json, "target_cpu_s")), "%s", r.out);
	cr_assert(cJSON_IsNumber(item(r.json, "harness_cpu_s")), "%s", r.out);
	result_free(&r);

	/* no such process (above any pid_max): bad usage, before the run */
	r = load(&t, ARGS("--target", t.target, "--target-pid", "4194305"));
	cr_assert_eq(r.status, 2, "exit %d: %s", r.status, r.err);
	cr_assert_not_null(strstr(r.err, "no such process"), "%s", r.err);
	result_free(&r);

	/* a target that ends during the run: said, and the run goes on */
	char out[128], err[128];
	snprintf(out, sizeof(out), "%s/sleep.out", t.dir);
	snprintf(err, sizeof(err), "%s/sleep.err", t.dir);
	char *argv[] = {"/bin/sleep", "1", NULL};
	char *envp[] = {NULL};
	pid_t sleeper = start_child("/bin/sleep", argv, envp, t.dir, out, err);
	snprintf(pid, sizeof(pid), "%d", (int)sleeper);
	r = load(&t, ARGS("--target", t.target, "--sessions", "2", "--duration", "2.5", "--target-pid", pid, "--json",
			  "--quiet"));
	assert_json(&r);
	cr_assert(cJSON_IsTrue(item(r.json, "target_exited")), "%s", r.out);
	cr_assert_gt(count(r.json, "turns_ok"), 0, "%s", r.out);
	cr_assert_not_null(strstr(r.err, "ended during the run"), "%s", r.err);
	cr_assert_eq(child_wait(&sleeper, EXIT_WAIT_MS), 0);
	result_free(&r);
	down(&t);
}

Test(load_cli, gateway_metrics_delta_and_tool_events, .timeout = 240)
{
	ctx_t t;
	gateway_up(&t);
	char url[96], pid[16];
	snprintf(url, sizeof(url), "http://%s/metrics", t.target + strlen("ws://"));
	snprintf(pid, sizeof(pid), "%d", (int)t.server);
	result_t r = load(&t, ARGS("--target", t.target, "--token", TOKEN, "--sessions", "3", "--turns", "4",
				   "--message", TWO_TOOLS, "--metrics-url", url, "--target-pid", pid, "--json",
				   "--quiet"));
	assert_json(&r);
	const cJSON *j = r.json;
	cr_assert_eq(count(j, "turns_ok"), 12, "%s", r.out);
	const cJSON *delta = obj(j, "metrics_delta");
	cr_assert_eq(count(delta, "pincer_agent_runs_total{outcome=\"ok\"}"), 12, "%s", r.out);
	cr_assert_null(item(delta, "pincer_agent_runs_total{outcome=\"error\"}"), "unchanged: left out");
	/* each `tool` start event is one call: as many as the gateway ran, the
	 * marker's two (and its embedded mock's own script's) in every turn */
	uint64_t calls = count(j, "tool_calls");
	cr_assert_eq(calls, count(delta, "pincer_agent_tool_calls_total"), "%s", r.out);
	const cJSON *per = obj(j, "tool_calls_per_turn");
	cr_assert_geq(count(per, "max"), 2, "%s", r.out);
	cr_assert_eq(count(per, "max") * 12, calls, "the same in every turn: %s", r.out);
	cr_assert_gt(num(j, "target_cpu_s"), 0, "%s", r.out);
	cr_assert_gt(num(j, "target_rss_mib"), 1, "%s", r.out);
	result_free(&r);

	/* the summary lists what --metrics-filter matches */
	r = load(&t, ARGS("--target", t.target, "--token", TOKEN, "--sessions", "2", "--turns", "1",
			  "--metrics-url", url, "--metrics-filter", "^pincer_agent_runs_total", "--quiet"));
	cr_assert_eq(r.status, 0, "%s", r.err);
	const char *line = strstr(r.out, "pincer_agent_runs_total{outcome=\"ok\"}");
	cr_assert_not_null(line, "%s", r.out);
	cr_assert_not_null(strstr(line, "+2\n"), "%s", r.out);
	cr_assert_null(strstr(r.out, "pincer_runtime_"), "not matched: %s", r.out);
	result_free(&r);

	/* metrics that cannot be read: a warning, and the run goes on */
	snprintf(url, sizeof(url), "http://%s/nothing-here", t.target + strlen("ws://"));
	r = load(&t, ARGS("--target", t.target, "--token", TOKEN, "--metrics-url", url, "--json", "--quiet"));
	assert_json(&r);
	cr_assert_eq(count(r.json, "turns_ok"), 1, "%s", r.out);
	cr_assert(cJSON_IsNull(item(r.json, "metrics_delta")), "%s", r.out);
	cr_assert_not_null(strstr(r.err, "warning: --metrics-url"), "%s", r.err);
	result_free(&r);
	r = load(&t, ARGS("--target", t.target, "--metrics-filter", "x"));
	cr_assert_eq(r.status, 2, "--metrics-filter alone: %s", r.err);
	result_free(&r);
	r = load(&t, ARGS("--target", t.target, "--metrics-url", url, "--metrics-filter", "(unclosed"));
	cr_assert_eq(r.status, 2, "a bad regex: %s", r.err);
	result_free(&r);
	down(&t);
}
