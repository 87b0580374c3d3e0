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
#include <cjson/cJSON.h>

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

/* `pincer WHAT [VERB] --json` against the gateway on `port`, which must
 * succeed: its output (the caller's). */
static char *cli_json(const fx_t *f, uint16_t port, const char *what, const char *verb)
{
	char url[64], out[128], err[128];
	snprintf(url, sizeof(url), "ws://127.0.0.1:%u", port);
	snprintf(out, sizeof(out), "%s/cli.out", f->home);
	snprintf(err, sizeof(err), "%s/cli.err", f->home);
	char *argv[8];
	size_t k = 0;
	argv[k++] = (char *)f->pincer;
	argv[k++] = (char *)what;
	if (verb)
		argv[k++] = (char *)verb;
	argv[k++] = "--json";
	argv[k++] = "--url";
	argv[k++] = url;
	argv[k] = NULL;
	char *envp[] = {"PATH=/usr/bin:/bin", NULL};
	pid_t pid = start_child(f->pincer, argv, envp, f->home, out, err);
	int rc = child_wait(&pid, 30000);
	char *text = read_file(out);
	cr_assert_eq(rc, 0, "pincer %s: exit %d: %s", what, rc, text);
	return text;
}

/* The value of /metrics series `name` (no labels) on `port`, or -1. */
static double metric_of(uint16_t port, const char *name)
{
	static char text[65536];
	if (http(port, "GET", "/metrics", NULL, text, sizeof(text)) != 200)
		return -1;
	char want[128];
	snprintf(want, sizeof(want), "\n%s ", name);
	const char *p = strstr(text, want);
	return p ? strtod(p + strlen(want), NULL) : -1;
}

/* Waits up to `ms` for series `name` on `port` to read `v`. */
static bool metric_becomes(uint16_t port, const char *name, double v, uint64_t ms)
{
	uint64_t until = now_ms() + ms;
	while (metric_of(port, name) != v && now_ms() < until)
		sleep_ms(50);
	return metric_of(port, name) == v;
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
	cr_assert_gt(metric_of(port, "pincer_store_polled_reads_total"), 0);
	/* `pincer sessions` lists, through the gateway, what PostgreSQL holds */
	char *list = cli_json(&f, port, "sessions", "list");
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

/* ---- a cluster's nodes ---- */

/* Starts a node of a cluster on the fixture's schema: its port. */
static uint16_t start_node(const fx_t *f, const char *node, pid_t *pid)
{
	char dir[PATH_MAX], cfg_path[PATH_MAX + 16], cfg[2048], out[PATH_MAX + 8], err[PATH_MAX + 8];
	snprintf(dir, sizeof(dir), "%s/%s", f->home, node);
	cr_assert_eq(mkdir(dir, 0700), 0);
	snprintf(cfg_path, sizeof(cfg_path), "%s/pincer.json", dir);
	snprintf(out, sizeof(out), "%s/out", dir);
	snprintf(err, sizeof(err), "%s/err", dir);
	snprintf(cfg, sizeof(cfg),
		 "{\"providers\":{\"mock\":{\"api\":\"openai-completions\",\"embedded\":true,\"apiKey\":\"k\"}},"
		 "\"agents\":{\"defaults\":{\"model\":\"mock/m1\"}},\"gateway\":{\"auth\":{\"mode\":\"none\"}},"
		 "\"store\":{\"url\":\"%s\"},"
		 "\"cluster\":{\"nodeId\":\"%s\",\"leaseMs\":1000,\"secret\":\"a secret the nodes share\"}}",
		 f->url, node);
	write_file(cfg_path, cfg);
	return start_gateway_child(f->pincer, dir, cfg_path, out, err, 60000, pid);
}

/* Two gateways on one database are one cluster's nodes: each reads the
 * other live in the node table (by the database's clock), a node killed
 * without a word is gone for the other a lease later, and a node that
 * stops leaves the table at once. */
Test(store_pg_entry, a_cluster_s_nodes_see_each_other_come_and_go)
{
	fx_t f;
	fx_init(&f);
	pid_t a = 0, b = 0;
	uint16_t pa = start_node(&f, "node-a", &a), pb = start_node(&f, "node-b", &b);
	cr_assert(metric_becomes(pa, "pincer_cluster_nodes_live", 2, 10000), "node-a reads %g live",
		  metric_of(pa, "pincer_cluster_nodes_live"));
	cr_assert(metric_becomes(pb, "pincer_cluster_nodes_live", 2, 10000));
	char out[8192];
	cr_assert_eq(http(pa, "GET", "/readyz", NULL, out, sizeof(out)), 200, "%s", out);
	cr_assert_gt(metric_of(pa, "pincer_cluster_heartbeats_total"), 0);
	/* `pincer health` shows the node and the nodes it read */
	char *health = cli_json(&f, pa, "health", NULL);
	cJSON *h = cJSON_Parse(health);
	const cJSON *cl = cJSON_GetObjectItemCaseSensitive(h, "cluster");
	cr_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cl, "nodeId")), "node-a", "%s", health);
	const cJSON *nodes = cJSON_GetObjectItemCaseSensitive(cl, "nodes"), *n;
	int live = 0, self = 0;
	cJSON_ArrayForEach(n, nodes) {
		live += cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(n, "live"));
		self += cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(n, "self"));
	}
	cr_assert(live == 2 && self == 1, "%s", health);
	cJSON_Delete(h);
	free(health);

	/* killed: no leave, its lease runs out (1 s), read at the next beat */
	cr_assert_eq(kill(b, SIGKILL), 0);
	cr_assert_eq(child_wait(&b, 30000), 128 + SIGKILL);
	uint64_t t0 = now_ms();
	cr_assert(metric_becomes(pa, "pincer_cluster_nodes_gone", 1, 10000));
	uint64_t took = now_ms() - t0;
	cr_assert_lt(took, 5000, "gone after %llu ms", (unsigned long long)took);
	cr_assert_eq(metric_of(pa, "pincer_cluster_nodes_live"), 1);

	/* stopped: it leaves the table before it exits */
	kill(a, SIGTERM);
	cr_assert_eq(child_wait(&a, 30000), 0);
	cr_assert_eq(q_int(&f, "SELECT count(*) FROM nodes WHERE id = 'node-a'"
			       " AND expires_ms <= (extract(epoch from clock_timestamp()) * 1000)::bigint"), 1);
	fx_fini(&f);
}
