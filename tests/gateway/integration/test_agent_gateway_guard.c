/*
 * Who may reach the gateway, end to end on loopback: the bind rule inside
 * pc_gateway_new, admission (Host, Origin, Content-Type) on HTTP/1.1 and
 * h2c, forwarding headers from trusted and untrusted proxies, and the
 * backoff of failed secrets per client address. Requests are written by
 * hand (every header is the test's) or sent with libcurl.
 */
#include <criterion/criterion.h>

#include "curl_client.h"
#include "gateway_harness.h"
#include "raw_http.h"

TestSuite(agent_gateway_guard, .timeout = 120);

#define NOAUTH_CONFIG(extra)                                                                       \
	"{\"providers\":{\"mock\":{\"api\":\"openai-completions\",\"embedded\":true,\"apiKey\":\"k\"}}," \
	"\"agents\":{\"defaults\":{\"model\":\"mock/m1\",\"sessionIdleSeconds\":1}},"                 \
	"\"gateway\":{\"auth\":{\"mode\":\"none\"}" extra "}}"

#define CHAT_BODY "{\"model\":\"pincer\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}"

/* A POST of the chat body with `headers` (each "Name: value\r\n"). */
static int post_chat(uint16_t port, const char *headers, char *out, size_t cap)
{
	char head[1024];
	snprintf(head, sizeof(head), "POST /v1/chat/completions HTTP/1.1\r\n%s", headers);
	return raw_http(port, head, CHAT_BODY, out, cap);
}

static int get_path(uint16_t port, const char *path, const char *headers, char *out, size_t cap)
{
	char head[1024];
	snprintf(head, sizeof(head), "GET %s HTTP/1.1\r\n%s", path, headers);
	return raw_http(port, head, NULL, out, cap);
}

static uint64_t runs_started(gw_t *f)
{
	pc_agent_stats_t st;
	pc_agent_stats(f->h.agent, &st);
	return st.runs_started;
}

/* ---- the bind rule ---- */

static int new_gateway(gw_t *f, const char *bind, pc_gateway_t **g)
{
	pc_gateway_options_t o = {
		.rt = f->h.rt, .io = f->h.io, .agent = f->h.agent, .config = f->h.cfg, .bind = bind, .port = 0};
	return pc_gateway_new(&o, g);
}

Test(agent_gateway_guard, pc_gateway_new_refuses_no_auth_beyond_loopback_whatever_set_the_address)
{
	gw_t f;
	harness_start_with(&f.h, NOAUTH_CONFIG(""), "{}", NULL);
	pc_gateway_t *g = NULL;
	const char *const wide[] = {"0.0.0.0", "::", "::ffff:0.0.0.0", "192.0.2.10", "2001:db8::1", "[::]"};
	for (size_t i = 0; i < sizeof(wide) / sizeof(wide[0]); i++)
		cr_assert_eq(new_gateway(&f, wide[i], &g), PC_EPERM, "%s", wide[i]);
	/* names are not resolved: a name could later resolve elsewhere */
	cr_assert_eq(new_gateway(&f, "gateway.example", &g), PC_EINVAL);
	/* an embedding program's own structure, past the file's checks */
	pc_config_t *c = f.h.cfg;
	const char *saved = c->gateway.bind;
	c->gateway.bind = "0.0.0.0";
	cr_assert_eq(new_gateway(&f, NULL, &g), PC_EPERM);
	/* a token mode without its token is no auth either */
	c->gateway.auth = PC_GATEWAY_AUTH_TOKEN;
	c->gateway.token = "";
	cr_assert_eq(new_gateway(&f, NULL, &g), PC_EINVAL);
	c->gateway.auth = PC_GATEWAY_AUTH_NONE;
	c->gateway.token = NULL;
	c->gateway.bind = saved;
	/* every loopback spelling binds */
	const char *const local[] = {"127.0.0.1", "localhost", "127.0.0.2"};
	for (size_t i = 0; i < sizeof(local) / sizeof(local[0]); i++) {
		cr_assert_eq(new_gateway(&f, local[i], &g), 0, "%s", local[i]);
		pc_gateway_free(g);
	}
	harness_stop_no_leaks(&f.h);
}

/* ---- cross-site requests ---- */

Test(agent_gateway_guard, no_web_page_drives_a_gateway_without_auth)
{
	gw_t f;
	gw_start(&f, NOAUTH_CONFIG(""), NULL);
	char out[8192], hdr[512];
	uint64_t runs = runs_started(&f);
	/* a browser's simple request needs no preflight: text/plain */
	cr_assert_eq(post_chat(f.port, "Host: 127.0.0.1\r\nContent-Type: text/plain\r\n", out, sizeof(out)), 415,
		     "%s", out);
	cr_assert_eq(post_chat(f.port, "Host: 127.0.0.1\r\n", out, sizeof(out)), 415, "%s", out);
	/* a page of another site */
	cr_assert_eq(post_chat(f.port,
			       "Host: 127.0.0.1\r\nContent-Type: application/json\r\nOrigin: https://evil.example\r\n",
			       out, sizeof(out)),
		     403, "%s", out);
	cr_assert_not_null(strstr(out, "origin not allowed"), "%s", out);
	/* another port of this machine is another site too */
	cr_assert_eq(post_chat(f.port,
			       "Host: 127.0.0.1\r\nContent-Type: application/json\r\nOrigin: http://localhost:8080\r\n",
			       out, sizeof(out)),
		     403, "%s", out);
	/* DNS rebinding: the page's own name in Host, no Origin needed */
	snprintf(hdr, sizeof(hdr), "Host: rebind.example:%u\r\nContent-Type: application/json\r\n", f.port);
	cr_assert_eq(post_chat(f.port, hdr, out, sizeof(out)), 403, "%s", out);
	cr_assert_eq(get_path(f.port, "/v1/models", "Host: rebind.example\r\n", out, sizeof(out)), 403, "%s", out);
	cr_assert_eq(get_path(f.port, "/metrics", "Host: rebind.example\r\n", out, sizeof(out)), 403, "%s", out);
	cr_assert_eq(get_path(f.port, "/", "Host: 127.0.0.1.rebind.example\r\n", out, sizeof(out)), 403, "%s", out);
	/* no Host, or two */
	cr_assert_eq(raw_http(f.port, "GET /v1/models HTTP/1.0\r\n", NULL, out, sizeof(out)), 400, "%s", out);
	cr_assert_eq(get_path(f.port, "/v1/models", "Host: 127.0.0.1\r\nHost: evil.example\r\n", out, sizeof(out)),
		     400, "%s", out);
	cr_assert_eq(runs_started(&f), runs, "no refused request started a run");
	/* the probes answer whatever the Host */
	cr_assert_eq(get_path(f.port, "/livez", "Host: rebind.example\r\n", out, sizeof(out)), 200, "%s", out);
	cr_assert_eq(get_path(f.port, "/readyz", "Host: rebind.example\r\n", out, sizeof(out)), 200, "%s", out);
	/* this machine's names, with or without the port, and the gateway's
	 * own origin */
	const char *const hosts[] = {"localhost", "127.0.0.1", "[::1]", "127.1.2.3", "LOCALHOST."};
	for (size_t i = 0; i < sizeof(hosts) / sizeof(hosts[0]); i++) {
		snprintf(hdr, sizeof(hdr), "Host: %s:%u\r\n", hosts[i], f.port);
		cr_assert_eq(get_path(f.port, "/v1/models", hdr, out, sizeof(out)), 200, "%s: %s", hosts[i], out);
		snprintf(hdr, sizeof(hdr), "Host: %s\r\n", hosts[i]);
		cr_assert_eq(get_path(f.port, "/v1/models", hdr, out, sizeof(out)), 200, "%s: %s", hosts[i], out);
	}
	snprintf(hdr, sizeof(hdr),
		 "Host: 127.0.0.1:%u\r\nContent-Type: application/json; charset=utf-8\r\nOrigin: http://127.0.0.1:%u\r\n",
		 f.port, f.port);
	cr_assert_eq(post_chat(f.port, hdr, out, sizeof(out)), 200, "%s", out);
	cr_assert_eq(runs_started(&f), runs + 1);
	/* the refusals are counted */
	cr_assert_eq(get_path(f.port, "/metrics", "Host: localhost\r\n", out, sizeof(out)), 200);
	cr_assert_not_null(strstr(out, "pincer_gateway_requests_refused_total{reason=\"host\"} 4"), "%s", out);
	cr_assert_not_null(strstr(out, "pincer_gateway_requests_refused_total{reason=\"origin\"} 2"), "%s", out);
	cr_assert_not_null(strstr(out, "pincer_gateway_requests_refused_total{reason=\"malformed\"} 2"), "%s", out);
	gw_stop(&f);
}

Test(agent_gateway_guard, h2c_reads_the_authority_as_the_host)
{
	gw_t f;
	gw_start(&f, NOAUTH_CONFIG(""), NULL);
	resp_t r = {.http_version = CURL_HTTP_VERSION_2_PRIOR_KNOWLEDGE};
	/* curl sends a Host header of its own as HTTP/2's :authority */
	curl_request(f.port, "GET", "/v1/models", (const char *[]){"Host: rebind.example", NULL}, NULL, 0, 30000, &r);
	cr_assert_eq(r.code, CURLE_OK);
	cr_assert_eq(r.status, 403, "%s", r.body);
	resp_free(&r);
	r = (resp_t){.http_version = CURL_HTTP_VERSION_2_PRIOR_KNOWLEDGE};
	curl_request(f.port, "POST", "/v1/chat/completions", (const char *[]){"Origin: https://evil.example", NULL},
		     CHAT_BODY, strlen(CHAT_BODY), 30000, &r);
	cr_assert_eq(r.status, 403, "%s", r.body);
	resp_free(&r);
	r = (resp_t){.http_version = CURL_HTTP_VERSION_2_PRIOR_KNOWLEDGE};
	curl_request(f.port, "POST", "/v1/chat/completions", NULL, CHAT_BODY, strlen(CHAT_BODY), 30000, &r);
	cr_assert_eq(r.status, 200, "%s", r.body);
	resp_free(&r);
	gw_stop(&f);
}

static void allow_ui(pc_config_t *c)
{
	static const char *const origins[] = {"https://ui.example.com"};
	c->gateway.allowed_origins = origins;
	c->gateway.allowed_origin_count = 1;
}

Test(agent_gateway_guard, with_auth_json_is_still_required_and_origins_still_checked)
{
	gw_t f;
	gw_start(&f, GW_CONFIG(""), allow_ui);
	char out[8192];
	const char *auth = "Host: gw.example\r\nAuthorization: Bearer " GW_TOKEN "\r\n";
	char hdr[512];
	snprintf(hdr, sizeof(hdr), "%sContent-Type: text/plain\r\n", auth);
	cr_assert_eq(post_chat(f.port, hdr, out, sizeof(out)), 415, "%s", out);
	cr_assert_not_null(strstr(out, "application/json"), "%s", out);
	snprintf(hdr, sizeof(hdr), "%sContent-Type: application/json\r\nOrigin: https://evil.example\r\n", auth);
	cr_assert_eq(post_chat(f.port, hdr, out, sizeof(out)), 403, "%s", out);
	/* any Host with auth: the name a proxy or a DNS entry gives it */
	snprintf(hdr, sizeof(hdr), "%sContent-Type: application/json\r\nOrigin: https://ui.example.com\r\n", auth);
	cr_assert_eq(post_chat(f.port, hdr, out, sizeof(out)), 200, "%s", out);
	gw_stop(&f);
}

/* ---- proxies ---- */

static void trust_loopback_proxy(pc_config_t *c)
{
	static const char *const proxies[] = {"127.0.0.0/8", "::1"};
	c->gateway.trusted_proxies = proxies;
	c->gateway.trusted_proxy_count = 2;
}

Test(agent_gateway_guard, forwarded_requests_get_no_loopback_exemption_unless_a_trusted_proxy_says_so)
{
	char out[8192];
	const char *json = "Host: localhost\r\nContent-Type: application/json\r\n";
	char hdr[512];
	/* no trusted proxy: the headers come from whoever sent them */
	gw_t f;
	gw_start(&f, NOAUTH_CONFIG(""), NULL);
	const char *const fwd[] = {"X-Forwarded-For: 127.0.0.1\r\n", "X-Forwarded-For: 203.0.113.7\r\n",
				   "Forwarded: for=127.0.0.1\r\n", "X-Real-IP: 203.0.113.7\r\n"};
	for (size_t i = 0; i < sizeof(fwd) / sizeof(fwd[0]); i++) {
		snprintf(hdr, sizeof(hdr), "%s%s", json, fwd[i]);
		cr_assert_eq(post_chat(f.port, hdr, out, sizeof(out)), 403, "%s: %s", fwd[i], out);
		cr_assert_not_null(strstr(out, "forwarded"), "%s", out);
	}
	gw_stop(&f);

	/* behind a trusted local proxy: the client it names decides */
	gw_start(&f, NOAUTH_CONFIG(""), trust_loopback_proxy);
	struct {
		const char *headers;
		int status;
	} cases[] = {
		{"X-Forwarded-For: 203.0.113.7\r\n", 403},
		/* a client that claims loopback, then the proxy appends the truth */
		{"X-Forwarded-For: 127.0.0.1, 203.0.113.7\r\n", 403},
		{"X-Forwarded-For: 127.0.0.1\r\nX-Forwarded-For: 203.0.113.7\r\n", 403},
		{"Forwarded: for=\"[2001:db8::7]:4711\"\r\n", 403},
		/* a client's own Forwarded passed on beside the proxy's XFF */
		{"Forwarded: for=127.0.0.1\r\nX-Forwarded-For: 203.0.113.7\r\n", 403},
		{"X-Forwarded-For: unknown\r\n", 403},
		{"X-Forwarded-For: 127.0.0.1\r\n", 200},
		{"X-Forwarded-For: 127.0.0.1, 127.0.0.1\r\n", 200},
		{"Forwarded: for=127.0.0.1;proto=http\r\n", 200},
		{"Forwarded: for=\"[::1]:51000\"\r\n", 200},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		snprintf(hdr, sizeof(hdr), "%s%s", json, cases[i].headers);
		cr_assert_eq(post_chat(f.port, hdr, out, sizeof(out)), cases[i].status, "case %zu (%s): %s", i,
			     cases[i].headers, out);
	}
	gw_stop(&f);
}

/* ---- guessing secrets ---- */

static void quick_lockout(pc_config_t *c)
{
	trust_loopback_proxy(c);
	c->gateway.auth_limit.max_attempts = 10;
	c->gateway.auth_limit.window_ms = 60000;
	c->gateway.auth_limit.lockout_ms = 1000;
	c->gateway.auth_limit.max_lockout_ms = 60000;
}

/* GET /v1/models from `client` (through the trusted proxy) with `token`;
 * the status, and the Retry-After header's value in *retry (0: none). */
static int models_as(gw_t *f, const char *client, const char *token, int *retry)
{
	char hdr[512], out[8192];
	snprintf(hdr, sizeof(hdr), "Host: gw.example\r\nX-Forwarded-For: %s\r\nAuthorization: Bearer %s\r\n", client,
		 token);
	int status = get_path(f->port, "/v1/models", hdr, out, sizeof(out));
	const char *ra = strcasestr(out, "\r\nRetry-After: ");
	*retry = ra ? atoi(ra + 15) : 0;
	return status;
}

/* The value of one sample line of /metrics. */
static double metric(gw_t *f, const char *series)
{
	char out[1 << 17];
	cr_assert_eq(get_path(f->port, "/metrics", "Host: localhost\r\n", out, sizeof(out)), 200);
	char key[160];
	snprintf(key, sizeof(key), "\n%s ", series);
	const char *p = strstr(out, key);
	cr_assert_not_null(p, "%s missing", series);
	return atof(p + strlen(key));
}

Test(agent_gateway_guard, failed_secrets_lock_out_one_address_and_no_other)
{
	gw_t f;
	gw_start(&f, GW_CONFIG(""), quick_lockout);
	int retry = 0;
	for (int i = 0; i < 10; i++)
		cr_assert_eq(models_as(&f, "198.51.100.1", "wrong-guess", &retry), 401, "guess %d", i);
	/* locked out: even the right token is refused, and not looked at */
	cr_assert_eq(models_as(&f, "198.51.100.1", GW_TOKEN, &retry), 429);
	cr_assert_eq(retry, 1);
	/* nobody else is */
	cr_assert_eq(models_as(&f, "198.51.100.2", GW_TOKEN, &retry), 200);
	/* the WebSocket connect from that address is refused the same way */
	tws_options_t o = {.port = f.port, .headers = "X-Forwarded-For: 198.51.100.1\r\n"};
	cl_t *c = cl_open_with(&o);
	cJSON *r = cl_handshake(c, connect_params(GW_TOKEN, NULL));
	cr_assert_not(jok(r));
	const cJSON *err = jget(r, "error");
	cr_assert_str_eq(jstr(err, "code"), "UNAVAILABLE", "%s", cJSON_PrintUnformatted(r));
	cr_assert(cJSON_IsTrue(jget(err, "retryable")));
	cr_assert_gt(jnum(jget(err, "details"), "retryAfterMs"), 0);
	cJSON_Delete(r);
	cl_free(c);
	cr_assert_eq(metric(&f, "pincer_gateway_auth_failures_total"), 10);
	cr_assert_eq(metric(&f, "pincer_gateway_auth_lockouts_total"), 1);
	cr_assert_eq(metric(&f, "pincer_gateway_auth_locked_refused_total"), 2);
	cr_assert_eq(metric(&f, "pincer_gateway_auth_locked_clients"), 1);
	/* the lockout ends; ten more guesses lock it out for twice as long */
	sleep_ms(1100);
	for (int i = 0; i < 10; i++)
		cr_assert_eq(models_as(&f, "198.51.100.1", "wrong-again", &retry), 401, "guess %d", i);
	cr_assert_eq(models_as(&f, "198.51.100.1", GW_TOKEN, &retry), 429);
	cr_assert_eq(retry, 2);
	sleep_ms(2100);
	cr_assert_eq(models_as(&f, "198.51.100.1", GW_TOKEN, &retry), 200);
	gw_stop(&f);
}

Test(agent_gateway_guard, ipv6_clients_count_by_their_64_and_loopback_is_exempt)
{
	gw_t f;
	gw_start(&f, GW_CONFIG(""), quick_lockout);
	int retry = 0;
	for (int i = 0; i < 10; i++)
		cr_assert_eq(models_as(&f, "2001:db8:1:2::1", "guess", &retry), 401);
	cr_assert_eq(models_as(&f, "2001:db8:1:2::ffff", GW_TOKEN, &retry), 429, "the same /64");
	cr_assert_eq(models_as(&f, "2001:db8:1:3::1", GW_TOKEN, &retry), 200, "another /64");
	/* direct loopback clients (the CLI on the gateway's host) are never
	 * locked out by default */
	char out[8192];
	for (int i = 0; i < 12; i++)
		cr_assert_eq(get_path(f.port, "/v1/models", "Host: localhost\r\nAuthorization: Bearer nope\r\n", out,
				      sizeof(out)),
			     401);
	cr_assert_eq(get_path(f.port, "/v1/models", "Host: localhost\r\nAuthorization: Bearer " GW_TOKEN "\r\n", out,
			      sizeof(out)),
		     200);
	gw_stop(&f);
}
