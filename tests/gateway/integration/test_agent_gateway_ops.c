/*
 * Operating a real `pincer gateway`: what /metrics says of the process,
 * and a gateway whose store cannot write (a file size limit on the running
 * process, as `prlimit --fsize` sets it; a full disk fails the same way):
 * it stays up (SIGXFSZ would otherwise kill it at the first write past the
 * limit), refuses new messages with the store's cause, answers /readyz 503
 * with that cause in the body, and is ready again by itself once writes
 * succeed, without any traffic but the probe.
 */
#include <criterion/criterion.h>

#include <signal.h>
#include <sys/resource.h>

#include "gateway_load.h"

TestSuite(gateway_ops, .timeout = 120);

static long chat(uint16_t port, char **body_out)
{
	static const char body[] = "{\"model\":\"pincer\",\"messages\":[{\"role\":\"user\",\"content\":\"hello\"}]}";
	const char *hdrs[] = {"Authorization: Bearer " GW_TOKEN, NULL};
	resp_t r = {0};
	curl_request(port, "POST", "/v1/chat/completions", hdrs, body, sizeof(body) - 1, 30000, &r);
	long st = r.code == CURLE_OK ? r.status : 0;
	if (body_out)
		*body_out = strdup(r.body);
	resp_free(&r);
	return st;
}

/* A gateway on a fresh state directory in `home`, with the flags `args`
 * (may be NULL), that has answered one completion. */
static void start_one(gl_gw_t *g, char home[GL_HOME_MAX], const char *prefix, const char *const *args,
		      char **answer)
{
	gl_home_init(home, prefix);
	gl_gw_init(g, home, 0);
	g->args = args;
	curl_global_init(CURL_GLOBAL_DEFAULT);
	gl_gw_start(g);
	cr_assert_eq(chat(g->port, answer), 200);
}

static void stop_one(gl_gw_t *g, const char *home)
{
	cr_assert_eq(gl_gw_term(g), 0);
	curl_global_cleanup();
	rm_tree(home);
}

/* One sample of the exposition `text`; -1 when absent. */
static double sample(const char *text, const char *series)
{
	size_t n = strlen(series);
	for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
		if (!strncmp(p, series, n) && p[n] == ' ')
			return strtod(p + n + 1, NULL);
	return -1;
}

static char *scrape(uint16_t port)
{
	resp_t r = {0};
	curl_request(port, "GET", "/metrics", NULL, NULL, 0, 5000, &r);
	cr_assert_eq(r.status, 200);
	char *text = strdup(r.body);
	resp_free(&r);
	return text;
}

/* /readyz's status and body (the caller frees it). */
static long readyz(uint16_t port, char **body)
{
	resp_t r = {0};
	curl_request(port, "GET", "/readyz", NULL, NULL, 0, 2000, &r);
	long st = r.code == CURLE_OK ? r.status : 0;
	*body = strdup(r.body);
	resp_free(&r);
	return st;
}

static long await_readyz(uint16_t port, long want, char **body)
{
	uint64_t until = now_ms() + 20000;
	long st;
	while ((st = readyz(port, body)) != want && now_ms() < until) {
		free(*body);
		sleep_ms(50);
	}
	return st;
}

Test(gateway_ops, a_store_that_cannot_write_makes_it_not_ready_and_it_recovers)
{
	char home[GL_HOME_MAX];
	gl_gw_t g;
	start_one(&g, home, "pincer-disk-full", NULL, NULL);

	struct rlimit tiny = {.rlim_cur = 1, .rlim_max = RLIM_INFINITY}, back = {RLIM_INFINITY, RLIM_INFINITY};
	cr_assert_eq(prlimit(g.pid, RLIMIT_FSIZE, &tiny, NULL), 0);
	char *answer = NULL;
	long st = chat(g.port, &answer);
	cr_assert(st >= 500 && st < 600, "a message the store cannot keep was answered %ld: %s", st, answer);
	cr_assert(strstr(answer, "disk full or file size limit"), "the cause is named: %s", answer);
	free(answer);
	cr_assert_eq(kill(g.pid, 0), 0, "the gateway died at a write past the file size limit");

	char *body = NULL;
	cr_assert_eq(await_readyz(g.port, 503, &body), 503);
	/* (its log is a file too, which the limit stops as well: the failure's
	 * line is dropped, and counted) */
	cr_assert(strstr(body, "\"not_ready\"") && strstr(body, "disk full or file size limit"), "%s", body);
	free(body);
	char *text = scrape(g.port);
	cr_assert_eq(sample(text, "pincer_store_writes_ok"), 0, "%s", text);
	cr_assert_gt(sample(text, "pincer_log_lines_dropped_total"), 0);
	free(text);

	/* writes succeed again: ready by itself (its probes write) */
	cr_assert_eq(prlimit(g.pid, RLIMIT_FSIZE, &back, NULL), 0);
	cr_assert_eq(await_readyz(g.port, 200, &body), 200, "still not ready: %s", body);
	free(body);
	cr_assert_eq(chat(g.port, NULL), 200);
	text = scrape(g.port);
	cr_assert_eq(sample(text, "pincer_store_writes_ok"), 1);
	free(text);
	char *log = read_file(g.err);
	cr_assert(strstr(log, "store writes succeed again"), "%s", log);
	free(log);
	stop_one(&g, home);
}

/* The standard process series, with the values the kernel has for the
 * gateway's own pid. */
Test(gateway_ops, metrics_carry_the_standard_process_series)
{
	char home[GL_HOME_MAX];
	gl_gw_t g;
	start_one(&g, home, "pincer-proc-metrics", NULL, NULL);
	char *text = scrape(g.port);
	cr_assert(strstr(text, "# TYPE process_cpu_seconds_total counter"), "%s", text);
	cr_assert_gt(sample(text, "process_cpu_seconds_total"), 0);
	cr_assert_gt(sample(text, "process_resident_memory_bytes"), 1 << 20);
	double fds = sample(text, "process_open_fds");
	cr_assert(fds >= 3 && fds < 10000, "%f open fds", fds);
	struct rlimit nofile;
	cr_assert_eq(prlimit(g.pid, RLIMIT_NOFILE, NULL, &nofile), 0);
	cr_assert_eq(sample(text, "process_max_fds"), (double)nofile.rlim_cur);
	double start = sample(text, "process_start_time_seconds"), now = (double)time(NULL);
	cr_assert(start > now - 120 && start <= now + 1, "started at %f, now %f", start, now);
	free(text);
	stop_one(&g, home);
}

/* The lines of `path` that are JSON objects with "msg" `msg`, as an array
 * (the caller frees). */
static cJSON *log_lines(const char *path, const char *msg)
{
	char *text = read_file(path);
	cJSON *all = cJSON_CreateArray();
	for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
		cJSON *j = cJSON_Parse(line);
		const char *m = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "msg"));
		if (m && !strcmp(m, msg))
			cJSON_AddItemToArray(all, j);
		else
			cJSON_Delete(j);
	}
	free(text);
	return all;
}

/* A run's start and end are logged (JSON lines on stderr) with its id,
 * session, outcome, attempts and duration; the message text and the
 * gateway's token never are, unless --log-content asks for the text. */
Test(gateway_ops, runs_are_logged_without_secrets_or_content)
{
	for (int content = 0; content <= 1; content++) {
		char home[GL_HOME_MAX];
		gl_gw_t g;
		static const char *const plain[] = {"--log-format", "json", "--log-level", "info", NULL};
		static const char *const with_content[] = {"--log-content", NULL};
		char *answer = NULL;
		start_one(&g, home, "pincer-run-log", content ? with_content : plain, &answer);
		cJSON *a = cJSON_Parse(answer);
		free(answer);
		const char *id = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(a, "id"));
		cr_assert(id && !strncmp(id, "chatcmpl-", 9));
		/* a query may carry a secret: only the path is logged */
		resp_t q = {0};
		curl_request(g.port, "GET", "/v1/models?token=" GW_TOKEN, NULL, NULL, 0, 5000, &q);
		resp_free(&q);
		/* an answer the server makes itself names its request too */
		resp_t nf = {0};
		curl_request(g.port, "GET", "/no/such/route", NULL, NULL, 0, 5000, &nf);
		cr_assert_eq(nf.status, 404);
		cr_assert(strcasestr(nf.head, "x-request-id: req_"), "%s", nf.head);
		resp_free(&nf);
		/* and over h2c, a line as well */
		resp_t q2 = {.http_version = CURL_HTTP_VERSION_2_PRIOR_KNOWLEDGE};
		curl_request(g.port, "GET", "/v1/models", NULL, NULL, 0, 5000, &q2);
		cr_assert_eq(q2.status, 401, "h2c: %ld", q2.status);
		resp_free(&q2);
		tws_t *ws = gl_ws_connect(g.port);
		cr_assert_not_null(ws);
		tws_free(ws);
		/* its close reaches the gateway before it stops */
		for (int i = 0; i < 1000; i++) {
			char *text = read_file(g.err);
			bool seen = strstr(text, "websocket closed") != NULL;
			free(text);
			if (seen)
				break;
			sleep_ms(10);
		}
		cr_assert_eq(gl_gw_term(&g), 0);

		cJSON *ends = log_lines(g.err, "run ended"), *starts = log_lines(g.err, "run started");
		cr_assert_eq(cJSON_GetArraySize(starts), 1, "no run start in the log");
		cr_assert_eq(cJSON_GetArraySize(ends), 1, "no run end in the log");
		const cJSON *e = cJSON_GetArrayItem(ends, 0);
		cr_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "runId")), id + 9);
		cr_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "status")), "ok");
		cr_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "level")), "info");
		cr_assert_eq(cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(e, "attempts")), 1);
		cr_assert_geq(cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(e, "durationMs")), 0);
		cr_assert(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "sessionKey")));
		/* access lines: the completion, the upgrade (101) and the close */
		cJSON *http = log_lines(g.err, "http request"), *closed = log_lines(g.err, "websocket closed");
		bool chat_seen = false, upgrade_seen = false;
		int models = 0;
		const cJSON *l;
		cJSON_ArrayForEach(l, http) {
			const char *path = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(l, "path"));
			double st = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(l, "status"));
			const char *rid = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(l, "requestId"));
			/* the answer's x-request-id, logged with it */
			chat_seen = chat_seen ||
				    (!strcmp(path, "/v1/chat/completions") && st == 200 && rid && !strncmp(rid, "req_", 4));
			upgrade_seen = upgrade_seen || st == 101;
			models += !strcmp(path, "/v1/models") && st == 401;
			cr_assert(cJSON_GetObjectItemCaseSensitive(l, "durationMs") &&
				  cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(l, "peer")));
		}
		cr_assert(chat_seen && upgrade_seen, "access lines missing");
		cr_assert_eq(models, 2, "the HTTP/1.1 and the h2c request to /v1/models");
		cr_assert_eq(cJSON_GetArraySize(closed), 1);
		cJSON_Delete(http);
		cJSON_Delete(closed);
		char *log = read_file(g.err);
		cr_assert_null(strstr(log, GW_TOKEN), "the token was logged");
		if (content)
			cr_assert(strstr(log, "\"prompt\":\"hello\""), "--log-content: the prompt is missing");
		else
			cr_assert_null(strstr(log, "hello"), "message text was logged without --log-content");
		free(log);
		cJSON_Delete(starts);
		cJSON_Delete(ends);
		cJSON_Delete(a);
		curl_global_cleanup();
		rm_tree(home);
	}
}

/* A log nobody reads (stderr a pipe that fills) never stalls the gateway:
 * its lines are dropped and counted in /metrics while it goes on
 * answering. */
Test(gateway_ops, a_full_stderr_drops_log_lines_and_serving_goes_on)
{
	int p[2];
	cr_assert_eq(pipe(p), 0); /* inherited by the child: its stderr */
	char home[GL_HOME_MAX];
	gl_home_init(home, "pincer-full-log");
	gl_gw_t g;
	gl_gw_init(&g, home, 0);
	snprintf(g.err, sizeof(g.err), "/proc/self/fd/%d", p[1]);
	curl_global_init(CURL_GLOBAL_DEFAULT);
	gl_gw_start(&g);
	/* each request is an access line: far more than the pipe holds */
	uint64_t t0 = now_ms();
	for (int i = 0; i < 1500; i++) {
		resp_t r = {0};
		curl_request(g.port, "GET", "/v1/models", (const char *[]){"Authorization: Bearer " GW_TOKEN, NULL}, NULL,
			     0, 5000, &r);
		cr_assert_eq(r.status, 200, "request %d was not answered", i);
		resp_free(&r);
	}
	cr_assert_lt(now_ms() - t0, 60000);
	char *text = scrape(g.port);
	cr_assert_gt(sample(text, "pincer_log_lines_dropped_total"), 0, "%s", text);
	free(text);
	close(p[0]); /* its next line fails (SIGPIPE is ignored): counted too */
	stop_one(&g, home);
	close(p[1]);
}
