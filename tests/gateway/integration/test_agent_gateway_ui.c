/*
 * The Control UI served same-origin (docs/control-ui.md): a fake build in
 * a temporary directory behind gateway.controlUi.root; the files, their
 * headers, the SPA fallback, what may not be reached, the bootstrap JSON,
 * and that the WebSocket and the API keep their auth and their Origin
 * rule beside it.
 */
#include <criterion/criterion.h>
#include <openssl/evp.h>
#include <openssl/sha.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "file_util.h"
#include "gateway_harness.h"
#include "raw_http.h"

static char ui_dir[320];   /* the fake build: <tmp>/ui */
static char base_dir[256]; /* <tmp>, which also holds secret.txt outside the root */

static void make_ui(void)
{
	snprintf(base_dir, sizeof(base_dir), "/tmp/pincer-ui-XXXXXX");
	cr_assert_not_null(mkdtemp(base_dir));
	snprintf(ui_dir, sizeof(ui_dir), "%s/ui", base_dir);
	cr_assert_eq(mkdir(ui_dir, 0755), 0);
	char p[512];
	snprintf(p, sizeof(p), "%s/assets", ui_dir);
	cr_assert_eq(mkdir(p, 0755), 0);
	snprintf(p, sizeof(p), "%s/index.html", ui_dir);
	write_file(p, "<!doctype html><title>control</title>INDEX-PAGE");
	snprintf(p, sizeof(p), "%s/assets/index-3f9a2b1c.js", ui_dir);
	write_file(p, "console.log('HASHED-ASSET');");
	snprintf(p, sizeof(p), "%s/favicon.svg", ui_dir);
	write_file(p, "<svg xmlns='http://www.w3.org/2000/svg'/>");
	snprintf(p, sizeof(p), "%s/secret.txt", base_dir);
	write_file(p, "OUTSIDE-SECRET");
	char link[512];
	snprintf(link, sizeof(link), "%s/leak.txt", ui_dir);
	cr_assert_eq(symlink(p, link), 0);
	snprintf(link, sizeof(link), "%s/up.txt", ui_dir);
	cr_assert_eq(symlink("../secret.txt", link), 0);
}

static void tune_ui(pc_config_t *c) { c->gateway.control_ui_root = ui_dir; }

static void start_ui(gw_t *f)
{
	make_ui();
	gw_start(f, GW_CONFIG(""), tune_ui);
}

static void stop_ui(gw_t *f)
{
	gw_stop(f);
	rm_tree(base_dir);
}

static char out[65536];

static int get(uint16_t port, const char *method, const char *path)
{
	char head[1024];
	snprintf(head, sizeof(head), "%s %s HTTP/1.1\r\nHost: 127.0.0.1:%u\r\n", method, path, port);
	return raw_http(port, head, NULL, out, sizeof(out));
}

/* The answer's header `name` contains `value` (case-insensitive name). */
static bool has_header(const char *name, const char *value)
{
	char want[256];
	snprintf(want, sizeof(want), "\r\n%s: ", name);
	const char *end = strstr(out, "\r\n\r\n");
	for (const char *h = strcasestr(out, want); h && (!end || h < end); h = strcasestr(h + 2, want)) {
		const char *eol = strstr(h + 2, "\r\n");
		const char *v = strstr(h + strlen(want), value);
		if (v && eol && v < eol)
			return true;
	}
	return false;
}

static const char *body(void)
{
	const char *b = strstr(out, "\r\n\r\n");
	return b ? b + 4 : "";
}

Test(agent_gateway_ui, serves_the_index_assets_and_the_spa_fallback_with_their_headers)
{
	gw_t f;
	start_ui(&f);
	cr_assert_eq(get(f.port, "GET", "/"), 200, "%s", out);
	cr_assert(strstr(body(), "INDEX-PAGE"), "%s", out);
	cr_assert(has_header("Content-Type", "text/html"), "%s", out);
	cr_assert(has_header("Cache-Control", "no-cache"), "%s", out);
	cr_assert(has_header("Content-Security-Policy", "default-src 'self'"), "%s", out);
	cr_assert(has_header("Content-Security-Policy", "frame-ancestors 'none'"), "%s", out);
	cr_assert(has_header("Content-Security-Policy", "connect-src 'self' ws: wss:"), "%s", out);
	cr_assert(has_header("X-Content-Type-Options", "nosniff"), "%s", out);
	cr_assert(has_header("Referrer-Policy", "no-referrer"), "%s", out);
	cr_assert(has_header("ETag", "\""), "%s", out);
	cr_assert(has_header("Last-Modified", "GMT"), "%s", out);

	cr_assert_eq(get(f.port, "GET", "/chat/sessions"), 200, "%s", out);
	cr_assert(strstr(body(), "INDEX-PAGE"), "%s", out);

	cr_assert_eq(get(f.port, "GET", "/assets/index-3f9a2b1c.js"), 200, "%s", out);
	cr_assert(strstr(body(), "HASHED-ASSET"), "%s", out);
	cr_assert(has_header("Content-Type", "text/javascript"), "%s", out);
	cr_assert(has_header("Cache-Control", "public, max-age=31536000, immutable"), "%s", out);

	cr_assert_eq(get(f.port, "GET", "/favicon.svg"), 200, "%s", out);
	cr_assert(has_header("Content-Type", "image/svg+xml"), "%s", out);
	cr_assert(has_header("Cache-Control", "no-cache"), "%s", out);
	cr_assert_not(has_header("Cache-Control", "immutable"), "%s", out);

	cr_assert_eq(get(f.port, "GET", "/assets/x.js"), 404, "%s", out);
	cr_assert_not(strstr(out, "INDEX-PAGE"), "%s", out);

	cr_assert_eq(get(f.port, "HEAD", "/favicon.svg"), 200, "%s", out);
	cr_assert(has_header("Content-Type", "image/svg+xml"), "%s", out);
	cr_assert_str_eq(body(), "");

	cr_assert_eq(get(f.port, "POST", "/favicon.svg"), 405, "%s", out);
	stop_ui(&f);
}

Test(agent_gateway_ui, nothing_outside_the_root_is_served)
{
	gw_t f;
	start_ui(&f);
	static const char *const paths[] = {
		"/../secret.txt", "/%2e%2e/secret.txt", "/%2e%2e%2fsecret.txt", "/..%2fsecret.txt", "/leak.txt",
		"/up.txt", "/assets/../../secret.txt", "//tmp/secret.txt", "/a%00b", "/%2E%2E/secret.txt",
	};
	for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
		int st = get(f.port, "GET", paths[i]);
		cr_assert(st == 404 || st == 400, "%s: %d", paths[i], st);
		cr_assert_not(strstr(out, "OUTSIDE-SECRET"), "%s: %s", paths[i], out);
	}
	stop_ui(&f);
}

Test(agent_gateway_ui, the_bootstrap_config_has_openclaws_shape_and_no_secret)
{
	gw_t f;
	start_ui(&f);
	static const char *const paths[] = {"/__openclaw/control-ui-config.json", "/control-ui-config.json"};
	for (size_t i = 0; i < 2; i++) {
		cr_assert_eq(get(f.port, "GET", paths[i]), 200, "%s", out);
		cr_assert(has_header("Content-Type", "application/json"), "%s", out);
		cJSON *j = cJSON_Parse(body());
		cr_assert_not_null(j, "%s", out);
		cr_assert(cJSON_IsString(jget(j, "basePath")));
		cr_assert(cJSON_IsString(jget(j, "assistantName")));
		cr_assert(cJSON_IsString(jget(j, "assistantAvatar")));
		cr_assert(cJSON_IsString(jget(j, "assistantAgentId")));
		cJSON_Delete(j);
		cr_assert_not(strstr(out, GW_TOKEN), "%s", out);
	}
	stop_ui(&f);
}

Test(agent_gateway_ui, static_files_need_no_token_while_the_api_and_websocket_do)
{
	gw_t f;
	start_ui(&f);
	cr_assert_eq(get(f.port, "GET", "/"), 200, "%s", out);
	char head[512];
	snprintf(head, sizeof(head),
		 "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:%u\r\nContent-Type: application/json\r\n", f.port);
	cr_assert_eq(raw_http(f.port, head, "{\"model\":\"m\",\"messages\":[]}", out, sizeof(out)), 401, "%s", out);

	cl_t *c = cl_open(f.port);
	cJSON *r = cl_handshake(c, connect_params(NULL, NULL));
	cr_assert_not(jok(r));
	cr_assert_str_eq(jdetail(r), "AUTH_TOKEN_MISSING");
	cJSON_Delete(r);
	cl_free(c);

	/* the upgrade at "/" still works beside the page */
	c = cl_connect(f.port);
	cl_free(c);
	stop_ui(&f);
}

Test(agent_gateway_ui, a_websocket_from_the_gateways_own_origin_is_accepted_and_others_refused)
{
	gw_t f;
	start_ui(&f);
	char own[64];
	snprintf(own, sizeof(own), "http://127.0.0.1:%u", f.port);
	tws_options_t o = {.port = f.port, .origin = own};
	cl_t *c = cl_open_with(&o);
	cJSON *r = cl_handshake(c, connect_params(GW_TOKEN, NULL));
	cr_assert(jok(r), "%s", cJSON_PrintUnformatted(r));
	cJSON_Delete(r);
	cl_free(c);

	tws_options_t evil = {.port = f.port, .origin = "https://evil.example"};
	tws_t *t = NULL;
	cr_assert_neq(tws_connect(&evil, &t, NULL), 0);
	tws_free(t);
	stop_ui(&f);
}

static void tune_ui_allowed(pc_config_t *c)
{
	static const char *const origins[] = {"https://ui.example.com"};
	c->gateway.control_ui_root = ui_dir;
	c->gateway.allowed_origins = origins;
	c->gateway.allowed_origin_count = 1;
}

Test(agent_gateway_ui, an_allowed_origin_may_connect)
{
	gw_t f;
	make_ui();
	gw_start(&f, GW_CONFIG(""), tune_ui_allowed);
	tws_options_t o = {.port = f.port, .origin = "https://ui.example.com"};
	cl_t *c = cl_open_with(&o);
	cJSON *r = cl_handshake(c, connect_params(GW_TOKEN, NULL));
	cr_assert(jok(r), "%s", cJSON_PrintUnformatted(r));
	cJSON_Delete(r);
	cl_free(c);
	stop_ui(&f);
}

Test(agent_gateway_ui, without_a_root_nothing_changes)
{
	gw_t f;
	gw_start(&f, GW_CONFIG(""), NULL);
	cr_assert_eq(get(f.port, "GET", "/"), 426, "%s", out);
	cr_assert_eq(get(f.port, "GET", "/control-ui-config.json"), 404, "%s", out);
	cr_assert_eq(get(f.port, "GET", "/__openclaw/control-ui-config.json"), 404, "%s", out);
	gw_stop(&f);
}

Test(agent_gateway_ui, the_setting_parses_and_enabled_false_turns_it_off)
{
	const char *json = "{\"gateway\":{\"controlUi\":{\"enabled\":false,\"root\":\"/srv/ui\"}}}";
	pc_config_t *c = NULL;
	pc_config_errors_t e;
	cr_assert_eq(pc_config_parse(json, strlen(json), NULL, &c, &e), 0);
	cr_assert_str_eq(c->gateway.control_ui_root, "/srv/ui");
	cr_assert_not(c->gateway.control_ui_enabled);
	pc_config_free(c);
	pc_config_errors_free(&e);
	json = "{\"gateway\":{\"controlUi\":{\"root\":7}}}";
	cr_assert_eq(pc_config_parse(json, strlen(json), NULL, &c, &e), PC_EINVAL);
	pc_config_errors_free(&e);
}

Test(agent_gateway_ui, a_matching_etag_is_not_modified_and_a_huge_file_is_refused)
{
	gw_t f;
	start_ui(&f);
	cr_assert_eq(get(f.port, "GET", "/favicon.svg"), 200, "%s", out);
	const char *e = strcasestr(out, "\r\nETag: ");
	cr_assert_not_null(e);
	char tag[128];
	cr_assert_eq(sscanf(e + 8, "%127[^\r]", tag), 1);
	char head[512];
	snprintf(head, sizeof(head), "GET /favicon.svg HTTP/1.1\r\nHost: 127.0.0.1:%u\r\nIf-None-Match: %s\r\n", f.port,
		 tag);
	cr_assert_eq(raw_http(f.port, head, NULL, out, sizeof(out)), 304, "%s", out);

	char p[512];
	snprintf(p, sizeof(p), "%s/big.js", ui_dir);
	FILE *fp = fopen(p, "w");
	cr_assert_not_null(fp);
	cr_assert_eq(ftruncate(fileno(fp), ((off_t)16 << 20) + 1), 0);
	fclose(fp);
	cr_assert_eq(get(f.port, "GET", "/big.js"), 500, "%s", out);
	cr_assert(strstr(body(), "16 MiB"), "%s", out);
	stop_ui(&f);
}

/* The page's inline scripts run under the policy: each non-empty one
 * without src is named by its SHA-256, as OpenClaw's gateway names them;
 * a script with src is not, and HEAD gives the same policy. */
Test(agent_gateway_ui, the_policy_allows_the_pages_inline_scripts_by_hash)
{
	gw_t f;
	make_ui();
	char p[512];
	snprintf(p, sizeof(p), "%s/index.html", ui_dir);
	const char *inline1 = "window.a=1;", *inline2 = "\n  boot('x > y');\n";
	char page[512];
	snprintf(page, sizeof(page),
		 "<!doctype html><SCRIPT data-x=\"1\">%s</script><script type=\"module\" crossorigin "
		 "src=\"./assets/index-3f9a2b1c.js\">not-run</script><script></script><script data-cfasync=\"false\">%s"
		 "</script>INDEX-PAGE",
		 inline1, inline2);
	write_file(p, page);
	gw_start(&f, GW_CONFIG(""), tune_ui);
	const char *texts[] = {inline1, inline2, "not-run"};
	char want[3][80];
	for (int i = 0; i < 3; i++) {
		unsigned char md[SHA256_DIGEST_LENGTH];
		char b64[48];
		cr_assert_not_null(SHA256((const unsigned char *)texts[i], strlen(texts[i]), md));
		EVP_EncodeBlock((unsigned char *)b64, md, SHA256_DIGEST_LENGTH);
		snprintf(want[i], sizeof(want[i]), "'sha256-%s'", b64);
	}
	for (int head = 0; head < 2; head++) {
		cr_assert_eq(get(f.port, head ? "HEAD" : "GET", "/"), 200, "%s", out);
		cr_assert(has_header("Content-Security-Policy", want[0]), "%s", out);
		cr_assert(has_header("Content-Security-Policy", want[1]), "%s", out);
		cr_assert_not(has_header("Content-Security-Policy", want[2]), "%s", out);
		cr_assert(has_header("Content-Security-Policy", "connect-src 'self' ws: wss: data:"), "%s", out);
	}
	/* an asset's policy names no script */
	cr_assert_eq(get(f.port, "GET", "/favicon.svg"), 200, "%s", out);
	cr_assert_not(has_header("Content-Security-Policy", "sha256-"), "%s", out);
	stop_ui(&f);
}
