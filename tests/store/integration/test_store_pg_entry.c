/*
 * The entry points on PostgreSQL, as a user runs them: `pincer agent
 * --local` with PINCER_STORE_URL writes its turn to the database (and
 * makes no SQLite file), and `pincer gateway` with store.url in its
 * configuration answers turns from it, says on /readyz that it is not
 * ready, and why, while the database is unreachable, and is ready again
 * once it is back.
 *
 * Runs under ctest's "pg" fixture (PINCER_TEST_PG_URL); skipped without
 * it.
 */
#include <criterion/criterion.h>

#include <sys/stat.h>

#include "file_util.h"
#include "pg_proxy.h"
#include "pg_test.h"
#include "pincer_child.h"
#include "raw_http.h"

TestSuite(store_pg_entry, .timeout = 180);

typedef struct fx {
	char home[64], url[1024], schema[64], pincer[PATH_MAX], out[128], err[128];
} fx_t;

static void fx_init(fx_t *f)
{
	memset(f, 0, sizeof(*f));
	if (!pg_test_url_schema(f->url, sizeof(f->url), f->schema))
		cr_skip_test("PINCER_TEST_PG_URL is not set (ctest runs this under the pg fixture)");
	snprintf(f->home, sizeof(f->home), "/tmp/pc-pg-entry-XXXXXX");
	cr_assert_not_null(mkdtemp(f->home));
	snprintf(f->out, sizeof(f->out), "%s/out", f->home);
	snprintf(f->err, sizeof(f->err), "%s/err", f->home);
	find_pincer(f->pincer, sizeof(f->pincer));
}

static void fx_fini(fx_t *f)
{
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", f->home);
	cr_assert_eq(system(cmd), 0);
}

static long long q_int(const fx_t *f, const char *sql)
{
	long long v = -1;
	cr_assert(pg_test_query_int(f->url, sql, &v), "no value: %s", sql);
	return v;
}

Test(store_pg_entry, agent_local_writes_its_turn_to_postgresql)
{
	fx_t f;
	fx_init(&f);
	char env_home[PATH_MAX], env_url[1100];
	snprintf(env_home, sizeof(env_home), "PINCER_HOME=%s", f.home);
	snprintf(env_url, sizeof(env_url), "PINCER_STORE_URL=%s", f.url);
	char *argv[] = {f.pincer, "agent", "--local", "-m", "hello", NULL};
	char *envp[] = {env_home, env_url, "PATH=/usr/bin:/bin", NULL};
	pid_t pid = start_child(f.pincer, argv, envp, f.home, f.out, f.err);
	int rc = child_wait(&pid, 120000);
	char *err = read_file(f.err);
	cr_assert_eq(rc, 0, "exit %d: %s", rc, err);
	free(err);
	cr_assert_eq(q_int(&f, "SELECT count(*) FROM runs WHERE status = 'ok'"), 1);
	cr_assert_geq(q_int(&f, "SELECT count(*) FROM messages"), 2);
	cr_assert_eq(q_int(&f, "SELECT count(*) FROM messages WHERE role = 'user' AND content LIKE '%hello%'"), 1);
	char db[128];
	snprintf(db, sizeof(db), "%s/state.db", f.home);
	struct stat st;
	cr_assert_neq(stat(db, &st), 0, "the SQLite file was made all the same");
	fx_fini(&f);
}

#define CHAT_BODY "{\"model\":\"pincer\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}"

static int http(uint16_t port, const char *method, const char *path, const char *body, char *out, size_t cap)
{
	char head[256];
	snprintf(head, sizeof(head), "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\n%s", method, path,
		 body ? "Content-Type: application/json\r\n" : "");
	return raw_http(port, head, body, out, cap);
}

Test(store_pg_entry, the_gateway_is_ready_only_while_its_database_answers)
{
	fx_t f;
	fx_init(&f);
	const char *h = strstr(getenv("PINCER_TEST_PG_URL"), "host=");
	cr_assert_not_null(h);
	char sock[512], extra[128], purl[1024];
	snprintf(sock, sizeof(sock), "%.*s/.s.PGSQL.5432", (int)strcspn(h + 5, "&"), h + 5);
	pg_proxy_t *proxy = pg_proxy_start(sock);
	cr_assert_not_null(proxy);
	snprintf(extra, sizeof(extra), "options=-csearch_path%%3D%s", f.schema);
	pg_proxy_url(proxy, "pincer", "postgres", extra, purl, sizeof(purl));
	char cfg_path[128], cfg[2048];
	snprintf(cfg_path, sizeof(cfg_path), "%s/pincer.json", f.home);
	snprintf(cfg, sizeof(cfg),
		 "{\"providers\":{\"mock\":{\"api\":\"openai-completions\",\"embedded\":true,\"apiKey\":\"k\"}},"
		 "\"agents\":{\"defaults\":{\"model\":\"mock/m1\"}},\"gateway\":{\"auth\":{\"mode\":\"none\"}},"
		 "\"store\":{\"url\":\"%s\"}}",
		 purl);
	write_file(cfg_path, cfg);
	pid_t pid = 0;
	uint16_t port = start_gateway_child(f.pincer, f.home, cfg_path, f.out, f.err, 60000, &pid);
	char out[8192];
	cr_assert_eq(http(port, "GET", "/readyz", NULL, out, sizeof(out)), 200, "%s", out);
	cr_assert_eq(http(port, "POST", "/v1/chat/completions", CHAT_BODY, out, sizeof(out)), 200, "%s", out);
	cr_assert_eq(q_int(&f, "SELECT count(*) FROM runs WHERE status = 'ok'"), 1);

	pg_proxy_set_down(proxy, true);
	int code = http(port, "POST", "/v1/chat/completions", CHAT_BODY, out, sizeof(out));
	cr_assert_geq(code, 500, "a turn the database cannot take is refused: %d %s", code, out);
	cr_assert_eq(http(port, "GET", "/readyz", NULL, out, sizeof(out)), 503, "%s", out);
	cr_assert_not_null(strstr(out, "the database server cannot be reached"), "%s", out);

	pg_proxy_set_down(proxy, false);
	int ready = 0;
	for (int k = 0; k < 100 && ready != 200; k++) {
		ready = http(port, "GET", "/readyz", NULL, out, sizeof(out));
		if (ready != 200)
			sleep_ms(100);
	}
	cr_assert_eq(ready, 200, "%s", out);
	cr_assert_eq(http(port, "POST", "/v1/chat/completions", CHAT_BODY, out, sizeof(out)), 200, "%s", out);
	cr_assert_eq(q_int(&f, "SELECT count(*) FROM runs WHERE status = 'ok'"), 2);
	/* the gateway's reads went over a reader its I/O loop polled */
	static char metrics[65536];
	cr_assert_eq(http(port, "GET", "/metrics", NULL, metrics, sizeof(metrics)), 200);
	const char *polled = strstr(metrics, "\npincer_store_polled_reads_total ");
	cr_assert_not_null(polled, "no polled reads metric");
	cr_assert_gt(strtod(polled + strlen("\npincer_store_polled_reads_total "), NULL), 0, "%s", metrics);
	/* `pincer sessions` lists, through the gateway, what PostgreSQL holds */
	char gw_url[64], list_out[128], list_err[128];
	snprintf(gw_url, sizeof(gw_url), "ws://127.0.0.1:%u", port);
	snprintf(list_out, sizeof(list_out), "%s/list.out", f.home);
	snprintf(list_err, sizeof(list_err), "%s/list.err", f.home);
	char *argv[] = {f.pincer, "sessions", "list", "--json", "--url", gw_url, NULL};
	char *envp[] = {"PATH=/usr/bin:/bin", NULL};
	pid_t lpid = start_child(f.pincer, argv, envp, f.home, list_out, list_err);
	cr_assert_eq(child_wait(&lpid, 30000), 0);
	char *list = read_file(list_out);
	long long listed = 0;
	for (const char *p = strstr(list, "\"key\":"); p; p = strstr(p + 1, "\"key\":"))
		listed++;
	cr_assert_eq(listed, q_int(&f, "SELECT count(*) FROM sessions"), "%s", list);
	free(list);
	kill(pid, SIGTERM);
	cr_assert_eq(child_wait(&pid, 30000), 0);
	pg_proxy_stop(proxy);
	fx_fini(&f);
}
