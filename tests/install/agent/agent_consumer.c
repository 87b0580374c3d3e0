/*
 * Embeds the gateway through the installed agent layer: the runtime, the
 * I/O layer, a store in a scratch directory, an agent whose provider is the
 * embedded mock model server, and the gateway on 127.0.0.1, port 0. Asks
 * GET /health and one OpenAI chat completion over loopback (a plain
 * socket, every wait bounded), then shuts everything down.
 */
#include <pincer/pincer.h>
#include <pincer/io/io.h>
#include <pincer/io/store/store.h>
#include <pincer/agents/agent.h>
#include <pincer/agents/config/config.h>
#include <pincer/agents/gateway/gateway.h>
#include <pincer/agents/mock/mock_server.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define CONFIG                                                                                     \
	"{\"providers\":{\"mock\":{\"api\":\"openai-completions\",\"embedded\":true,\"apiKey\":\"k\"}}," \
	"\"agents\":{\"defaults\":{\"model\":\"mock/m1\"}}}"

static const pc_agent_embedded_llm_t mock_llm = {pc_mock_server_embedded_start, pc_mock_server_embedded_stop};

static long long now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Sends `request` to 127.0.0.1:port and reads the answer until the server
 * closes (Connection: close), for at most 30 s. 0 when an answer came. */
static int exchange(uint16_t port, const char *request, char *answer, size_t cap)
{
	long long until = now_ms() + 30000;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
		close(fd);
		return -1;
	}
	size_t len = strlen(request), sent = 0, got = 0;
	while (sent < len) {
		ssize_t n = send(fd, request + sent, len - sent, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			close(fd);
			return -1;
		}
		sent += (size_t)n;
	}
	for (;;) {
		long long left = until - now_ms();
		struct pollfd p = {.fd = fd, .events = POLLIN};
		if (left <= 0 || poll(&p, 1, (int)left) <= 0)
			break;
		ssize_t n = recv(fd, answer + got, cap - 1 - got, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0 || (got += (size_t)n) == cap - 1)
			break;
	}
	answer[got] = '\0';
	close(fd);
	return got ? 0 : -1;
}

static int ask(uint16_t port)
{
	static char answer[65536];
	char request[1024];
	if (exchange(port, "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", answer,
		     sizeof(answer)) != 0 ||
	    strncmp(answer, "HTTP/1.1 200", 12) != 0) {
		fprintf(stderr, "GET /health: %.200s\n", answer);
		return 1;
	}
	const char *body = "{\"model\":\"pincer\",\"messages\":[{\"role\":\"user\",\"content\":\"hello from an embedder\"}]}";
	snprintf(request, sizeof(request),
		 "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
		 "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
		 strlen(body), body);
	if (exchange(port, request, answer, sizeof(answer)) != 0 || strncmp(answer, "HTTP/1.1 200", 12) != 0 ||
	    !strstr(answer, "\"chat.completion\"") || !strstr(answer, "hello from an embedder")) {
		fprintf(stderr, "POST /v1/chat/completions: %.400s\n", answer);
		return 1;
	}
	return 0;
}

int main(void)
{
	char dir[] = "/tmp/pincer-embed-XXXXXX", db[64], locks[64];
	if (!mkdtemp(dir))
		return 1;
	snprintf(db, sizeof(db), "%s/state.db", dir);
	snprintf(locks, sizeof(locks), "%s/locks", dir);

	pc_config_t *cfg = NULL;
	pc_config_errors_t errs = {0};
	int rc = pc_config_parse(CONFIG, strlen(CONFIG), "embed", &cfg, &errs);
	for (size_t i = 0; i < errs.count; i++)
		fprintf(stderr, "config: %s\n", errs.items[i]);
	pc_config_errors_free(&errs);

	pc_runtime_t *rt = NULL;
	pc_io_t *io = NULL;
	pc_store_t *store = NULL;
	pc_agent_t *agent = NULL;
	pc_gateway_t *g = NULL;
	const char *what = "runtime";
	if (rc == 0)
		rc = pc_runtime_new(NULL, &rt);
	if (rc == 0)
		rc = pc_runtime_start(rt);
	pc_io_config_t icfg;
	if (rc == 0 && (what = "I/O", 1)) {
		pc_agent_io_config(cfg, 1, &icfg);
		rc = pc_io_new(rt, &icfg, &io);
	}
	pc_store_config_t scfg;
	pc_store_config_init(&scfg);
	scfg.path = db;
	if (rc == 0 && (what = "store", 1))
		rc = pc_store_open(rt, &scfg, &store);
	pc_agent_options_t ao = {.rt = rt, .io = io, .store = store, .config = cfg, .lock_dir = locks,
				 .embedded_llm = &mock_llm, .mock_scenario = "[]"};
	if (rc == 0 && (what = "agent", 1))
		rc = pc_agent_new(&ao, &agent);
	pc_gateway_options_t go = {.rt = rt, .io = io, .agent = agent, .config = cfg, .bind = "127.0.0.1", .port = 0};
	if (rc == 0 && (what = "gateway", 1))
		rc = pc_gateway_new(&go, &g);
	if (rc == 0)
		rc = pc_gateway_start(g);
	int failed = rc != 0;
	if (failed)
		fprintf(stderr, "cannot start the %s: %d\n", what, rc);
	else
		failed = ask(pc_gateway_port(g));
	if (g && pc_gateway_drain(g, 5000) != 0)
		failed = 1;
	pc_gateway_free(g);
	pc_agent_free(agent, 5000);
	if (store && pc_store_close(store) != 0)
		failed = 1;
	pc_io_free(io);
	pc_runtime_free(rt);
	pc_config_free(cfg);
	char cmd[96];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	if (system(cmd) != 0)
		failed = 1;
	printf("pincer %s: embedded gateway -> %s\n", pc_version(), failed ? "failed" : "ok");
	return failed;
}
