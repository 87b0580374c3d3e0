/*
 * The gateway behind a real reverse proxy (nginx, as docs/gateway.md
 * deploys it, on loopback): every client reaches the gateway from the
 * proxy's loopback address, so only what the proxy's X-Forwarded-For
 * says, and only when gateway.trustedProxies names the proxy, tells who
 * the client is.
 */
#include <criterion/criterion.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "gateway_harness.h"
#include "raw_http.h"

TestSuite(agent_gateway_proxy, .timeout = 120);

#define NGINX "/usr/sbin/nginx"

typedef struct proxy {
	char dir[64];
	pid_t pid;
	uint16_t port;
} proxy_t;

/* nginx in the foreground, one process, everything in a temporary
 * directory, proxying HTTP and WebSocket upgrades to `upstream` the way
 * docs/gateway.md configures it. */
static void proxy_start(proxy_t *p, uint16_t upstream)
{
	cr_assert_eq(access(NGINX, X_OK), 0, NGINX " is missing: scripts/deps installs nginx-light");
	snprintf(p->dir, sizeof(p->dir), "/tmp/pincer-nginx-XXXXXX");
	cr_assert_not_null(mkdtemp(p->dir));
	p->port = free_loopback_port();
	char conf[128];
	snprintf(conf, sizeof(conf), "%s/nginx.conf", p->dir);
	FILE *f = fopen(conf, "w");
	cr_assert_not_null(f);
	fprintf(f,
		"daemon off; master_process off; worker_processes 1;\n"
		"pid %s/nginx.pid; error_log %s/error.log;\n"
		"events { worker_connections 64; }\n"
		"http {\n"
		"  access_log off;\n"
		"  client_body_temp_path %s; proxy_temp_path %s; fastcgi_temp_path %s;\n"
		"  uwsgi_temp_path %s; scgi_temp_path %s;\n"
		"  map $http_upgrade $connection_upgrade { default upgrade; '' close; }\n"
		"  server {\n"
		"    listen 127.0.0.1:%u;\n"
		"    location / {\n"
		"      proxy_pass http://127.0.0.1:%u;\n"
		"      proxy_http_version 1.1;\n"
		"      proxy_set_header Host $host;\n"
		"      proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;\n"
		"      proxy_set_header Upgrade $http_upgrade;\n"
		"      proxy_set_header Connection $connection_upgrade;\n"
		"    }\n"
		"  }\n"
		"}\n",
		p->dir, p->dir, p->dir, p->dir, p->dir, p->dir, p->dir, (unsigned)p->port, (unsigned)upstream);
	cr_assert_eq(fclose(f), 0);
	pid_t parent = getpid();
	p->pid = fork();
	cr_assert_geq(p->pid, 0);
	if (p->pid == 0) {
		int null = open("/dev/null", O_RDWR);
		/* it must not outlive a test that failed before stopping it */
		if (null < 0 || dup2(null, 0) < 0 || dup2(null, 1) < 0 || prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 ||
		    getppid() != parent)
			_exit(127);
		execl(NGINX, NGINX, "-p", p->dir, "-c", conf, (char *)NULL);
		_exit(127);
	}
	/* ready once it answers */
	uint64_t until = now_ms() + 10000;
	for (;;) {
		int fd = socket(AF_INET, SOCK_STREAM, 0);
		struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(p->port)};
		inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
		bool up = connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
		close(fd);
		if (up)
			break;
		cr_assert(waitpid(p->pid, NULL, WNOHANG) == 0, "nginx exited; see %s/error.log", p->dir);
		cr_assert_lt(now_ms(), until, "nginx did not start");
		sleep_ms(20);
	}
}

static void proxy_stop(proxy_t *p)
{
	cr_assert_eq(kill(p->pid, SIGTERM), 0);
	int st;
	uint64_t until = now_ms() + 10000;
	while (waitpid(p->pid, &st, WNOHANG) == 0) {
		if (now_ms() >= until) {
			kill(p->pid, SIGKILL);
			waitpid(p->pid, &st, 0);
			break;
		}
		sleep_ms(10);
	}
	char cmd[96];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", p->dir);
	cr_assert_eq(system(cmd), 0);
}

#define NOAUTH                                                                                     \
	"{\"providers\":{\"mock\":{\"api\":\"openai-completions\",\"embedded\":true,\"apiKey\":\"k\"}}," \
	"\"agents\":{\"defaults\":{\"model\":\"mock/m1\"}},\"gateway\":{\"auth\":{\"mode\":\"none\"}}}"

#define MODELS "GET /v1/models HTTP/1.1\r\nHost: localhost\r\n"

Test(agent_gateway_proxy, a_gateway_without_auth_serves_nobody_through_an_untrusted_local_proxy)
{
	gw_t f;
	gw_start(&f, NOAUTH, NULL);
	proxy_t p;
	proxy_start(&p, f.port);
	char out[8192];
	cr_assert_eq(raw_http(f.port, MODELS, NULL, out, sizeof(out)), 200, "direct: %s", out);
	cr_assert_eq(raw_http(p.port, MODELS, NULL, out, sizeof(out)), 403, "through nginx: %s", out);
	/* the WebSocket through it too */
	tws_t *ws = NULL;
	int status = 0;
	tws_options_t o = {.port = p.port};
	cr_assert_eq(tws_connect(&o, &ws, &status), PC_ESTATE);
	cr_assert_eq(status, 403);
	proxy_stop(&p);
	gw_stop(&f);
}

static void trust_nginx(pc_config_t *c)
{
	static const char *const proxies[] = {"127.0.0.1"};
	c->gateway.trusted_proxies = proxies;
	c->gateway.trusted_proxy_count = 1;
	c->gateway.auth_limit.lockout_ms = 60000;
}

/* A GET of /v1/models through nginx from a client that says it is
 * `client` (nginx appends what it saw: 127.0.0.1, the proxy itself here). */
static int models_via(const proxy_t *p, const char *client, const char *token)
{
	char head[512], out[8192];
	snprintf(head, sizeof(head), MODELS "X-Forwarded-For: %s\r\nAuthorization: Bearer %s\r\n", client, token);
	return raw_http(p->port, head, NULL, out, sizeof(out));
}

Test(agent_gateway_proxy, behind_a_trusted_proxy_each_client_has_its_own_address)
{
	gw_t f;
	gw_start(&f, GW_CONFIG(""), trust_nginx);
	proxy_t p;
	proxy_start(&p, f.port);
	for (int i = 0; i < 10; i++)
		cr_assert_eq(models_via(&p, "198.51.100.1", "guess"), 401);
	cr_assert_eq(models_via(&p, "198.51.100.1", GW_TOKEN), 429, "that client is locked out");
	cr_assert_eq(models_via(&p, "198.51.100.2", GW_TOKEN), 200, "no other is");
	char out[8192];
	cr_assert_eq(raw_http(p.port, MODELS "Authorization: Bearer " GW_TOKEN "\r\n", NULL, out, sizeof(out)), 200,
		     "nor the proxy's own clients: %s", out);
	/* the WebSocket upgrade passes through it, with the token */
	tws_options_t o = {.port = p.port, .headers = "X-Forwarded-For: 198.51.100.3\r\n"};
	cl_t *c = cl_open_with(&o);
	cJSON *r = cl_handshake(c, connect_params(GW_TOKEN, NULL));
	cr_assert(jok(r), "%s", cJSON_PrintUnformatted(r));
	cJSON_Delete(r);
	r = cl_call(c, "health", NULL);
	cr_assert(jok(r));
	cJSON_Delete(r);
	cl_free(c);
	proxy_stop(&p);
	gw_stop(&f);
}
