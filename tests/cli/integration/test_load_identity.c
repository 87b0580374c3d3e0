/*
 * `pincer load --identity FILE` against `pincer gateway` (docs/load.md,
 * docs/gateway.md "Device identity"): the identity is made into FILE (mode
 * 0600, OpenClaw's shape), the device is paired on loopback and its device
 * token kept; a second run is the same device, and with the kept token
 * needs no shared secret; a file that is no identity is refused before
 * the run; a gateway that waits for an operator's approval ends the run at
 * once with the command that approves it, and once approved the run goes.
 *
 * "Waits for approval" on a loopback-only test network: the gateway trusts
 * a proxy on 127.0.0.1, and a relay in this test plays that proxy, naming
 * the client 203.0.113.7 in X-Forwarded-For (as
 * test_agent_gateway_devices.c does), so the device is not on loopback.
 */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "load_child.h"

#define REMOTE_IP "203.0.113.7"

static const char *jstr(const cJSON *o, const char *k)
{
	const char *s = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, k));
	return s ? s : "";
}

static const cJSON *jget(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }

/* The identity file, parsed (the caller deletes it). */
static cJSON *identity_file(const char *path)
{
	char *text = read_file(path);
	cJSON *j = cJSON_Parse(text);
	free(text);
	cr_assert(cJSON_IsObject(j), "%s is not a JSON object", path);
	return j;
}

/* The devices the gateway has paired (`pincer devices list --json`). */
static cJSON *paired(ctx_t *t)
{
	result_t r = pincer_run(t, "devices", ARGS("list", "--json", "--url", t->target, "--token", TOKEN));
	cr_assert_eq(r.status, 0, "devices list: %s", r.err);
	cJSON *p = cJSON_Duplicate(jget(r.json, "paired"), true);
	result_free(&r);
	cr_assert(cJSON_IsArray(p));
	return p;
}

static void assert_turns_ok(const result_t *r, double n)
{
	cr_assert_eq(r->status, 0, "exit %d\nstdout: %s\nstderr: %s", r->status, r->out, r->err);
	cr_assert_eq(num(r->json, "turns_ok"), n, "%s", r->out);
	cr_assert_eq(num(r->json, "turns_failed"), 0, "%s", r->out);
}

Test(load_identity, made_paired_kept_and_used_again, .timeout = 240)
{
	ctx_t t;
	gateway_up(&t);
	char path[128];
	snprintf(path, sizeof(path), "%s/device.json", t.dir);

	result_t r = load(&t, ARGS("--target", t.target, "--token", TOKEN, "--identity", path, "--sessions", "3",
				   "--turns", "2", "--json", "--quiet"));
	assert_turns_ok(&r, 6);
	result_free(&r);
	struct stat sb;
	cr_assert_eq(stat(path, &sb), 0);
	cr_assert_eq(sb.st_mode & 0777, 0600, "mode %o", sb.st_mode & 0777);
	cJSON *id = identity_file(path);
	cr_assert_eq(cJSON_GetNumberValue(jget(id, "version")), 1);
	const char *dev = jstr(id, "deviceId");
	cr_assert_eq(strlen(dev), 64, "%s", dev);
	cr_assert_eq(strspn(dev, "0123456789abcdef"), 64, "%s", dev);
	cr_assert(strstr(jstr(id, "publicKeyPem"), "-----BEGIN PUBLIC KEY-----"));
	cr_assert(strstr(jstr(id, "privateKeyPem"), "-----BEGIN PRIVATE KEY-----"));
	const cJSON *tok = jget(jget(id, "tokens"), "operator");
	cr_assert_gt(strlen(jstr(tok, "token")), 20, "no device token kept: %s", cJSON_PrintUnformatted(id));
	char gw[160];
	snprintf(gw, sizeof(gw), "%s/", t.target);
	cr_assert_str_eq(jstr(tok, "gateway"), gw);

	/* the gateway paired that device: the id the file names is the key's */
	cJSON *p = paired(&t);
	cr_assert_eq(cJSON_GetArraySize(p), 1);
	cr_assert_str_eq(jstr(cJSON_GetArrayItem(p, 0), "deviceId"), dev);
	cJSON_Delete(p);

	/* again: the same device, the same token, still one paired */
	r = load(&t, ARGS("--target", t.target, "--token", TOKEN, "--identity", path, "--sessions", "2", "--turns",
			  "2", "--json", "--quiet"));
	assert_turns_ok(&r, 4);
	result_free(&r);
	cJSON *again = identity_file(path);
	cr_assert_str_eq(jstr(again, "deviceId"), dev);
	cr_assert_str_eq(jstr(jget(jget(again, "tokens"), "operator"), "token"), jstr(tok, "token"));
	p = paired(&t);
	cr_assert_eq(cJSON_GetArraySize(p), 1);
	cJSON_Delete(p);

	/* no shared secret: the kept device token is the credential; without
	 * the identity the same run is refused */
	r = load(&t, ARGS("--target", t.target, "--identity", path, "--sessions", "2", "--turns", "2", "--json",
			  "--quiet"));
	assert_turns_ok(&r, 4);
	result_free(&r);
	r = load(&t, ARGS("--target", t.target, "--json", "--quiet"));
	cr_assert_eq(r.status, 0, "%s", r.err);
	cr_assert_eq(num(jget(r.json, "errors"), "auth"), 1, "%s", r.out);
	result_free(&r);

	cJSON_Delete(again);
	cJSON_Delete(id);
	down(&t);
}

Test(load_identity, a_file_that_is_no_identity_is_refused_before_the_run, .timeout = 240)
{
	ctx_t t;
	gateway_up(&t);
	char path[128];
	snprintf(path, sizeof(path), "%s/device.json", t.dir);
	result_t r = load(&t, ARGS("--target", t.target, "--token", TOKEN, "--identity", path, "--json", "--quiet"));
	assert_turns_ok(&r, 1);
	result_free(&r);
	cJSON *id = identity_file(path);

	/* each a different damage; the file is left as it is */
	cJSON *wrong_id = cJSON_Duplicate(id, true);
	cJSON_ReplaceItemInObject(wrong_id, "deviceId", cJSON_CreateString("0000000000000000000000000000000000000000"
									       "000000000000000000000000"));
	cJSON *other_key = cJSON_Duplicate(id, true);
	/* an Ed25519 public key of another device */
	const char *other = "-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEAD25Fc92TDaPF2F5BcdX7ObW6tyf5lGSNxXK/pkVAC/o=\n"
			    "-----END PUBLIC KEY-----\n";
	cJSON_ReplaceItemInObject(other_key, "publicKeyPem", cJSON_CreateString(other));
	char *bad_id = cJSON_Print(wrong_id), *bad_key = cJSON_Print(other_key);
	const struct {
		const char *text, *why;
	} cases[] = {
		{"{\"version\":1,\"deviceId\":", "not a JSON object"},
		{"{\"version\":2}", "it needs version 1"},
		{bad_id, "deviceId is not the SHA-256 of the public key"},
		{bad_key, "publicKeyPem is not the private key's public key"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		write_file(path, cases[i].text);
		r = load(&t, ARGS("--target", t.target, "--token", TOKEN, "--identity", path, "--quiet"));
		cr_assert_eq(r.status, 1, "case %zu: exit %d: %s", i, r.status, r.err);
		cr_assert(strstr(r.err, "not a device identity") && strstr(r.err, cases[i].why), "case %zu: %s", i,
			  r.err);
		cr_assert_str_eq(r.out, "", "case %zu: no run, no report: %s", i, r.out);
		char *after = read_file(path);
		cr_assert_str_eq(after, cases[i].text);
		free(after);
		result_free(&r);
	}
	cJSON_free(bad_id);
	cJSON_free(bad_key);
	cJSON_Delete(wrong_id);
	cJSON_Delete(other_key);
	cJSON_Delete(id);

	r = load(&t, ARGS("--target", "http://127.0.0.1:9/v1", "--identity", path));
	cr_assert_eq(r.status, 2, "%s", r.err);
	cr_assert(strstr(r.err, "--identity is for a ws:// target"), "%s", r.err);
	result_free(&r);
	down(&t);
}

/* ---- a proxy that names a remote client ---- */

typedef struct relay {
	int lfd;
	uint16_t port, to;
	pthread_t th;
} relay_t;

typedef struct pipe_pair {
	int a, b;
} pipe_pair_t;

/* Copies both ways until either side ends. */
static void *pump(void *arg)
{
	pipe_pair_t p = *(pipe_pair_t *)arg;
	free(arg);
	struct pollfd fds[2] = {{.fd = p.a, .events = POLLIN}, {.fd = p.b, .events = POLLIN}};
	char buf[16384];
	for (bool open = true; open && poll(fds, 2, 30000) > 0;) {
		for (int i = 0; open && i < 2; i++) {
			if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			ssize_t n = read(fds[i].fd, buf, sizeof(buf));
			open = n > 0 && write(fds[1 - i].fd, buf, (size_t)n) == n;
		}
	}
	close(p.a);
	close(p.b);
	return NULL;
}

static int connect_to(uint16_t port)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
		close(fd);
		fd = -1;
	}
	return fd;
}

/* One connection: the upgrade request with X-Forwarded-For after its
 * first line, then the bytes as they come. */
static void relay_one(const relay_t *r, int c)
{
	char head[8192];
	size_t n = 0;
	while (n < sizeof(head) - 1 && !memmem(head, n, "\r\n\r\n", 4)) {
		ssize_t k = read(c, head + n, sizeof(head) - 1 - n);
		if (k <= 0)
			break;
		n += (size_t)k;
	}
	char *eol = memmem(head, n, "\r\n", 2);
	int g = eol ? connect_to(r->to) : -1;
	const char *xff = "X-Forwarded-For: " REMOTE_IP "\r\n";
	size_t first = eol ? (size_t)(eol - head) + 2 : 0;
	if (g < 0 || write(g, head, first) != (ssize_t)first || write(g, xff, strlen(xff)) != (ssize_t)strlen(xff) ||
	    write(g, head + first, n - first) != (ssize_t)(n - first)) {
		close(c);
		if (g >= 0)
			close(g);
		return;
	}
	pipe_pair_t *p = malloc(sizeof(*p));
	pthread_t th;
	cr_assert_not_null(p);
	*p = (pipe_pair_t){c, g};
	cr_assert_eq(pthread_create(&th, NULL, pump, p), 0);
	pthread_detach(th);
}

static void *relay_loop(void *arg)
{
	relay_t *r = arg;
	int c;
	while ((c = accept(r->lfd, NULL, NULL)) >= 0)
		relay_one(r, c);
	return NULL;
}

static void relay_start(relay_t *r, uint16_t to)
{
	*r = (relay_t){.to = to, .lfd = socket(AF_INET, SOCK_STREAM, 0)};
	struct sockaddr_in sa = {.sin_family = AF_INET};
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t len = sizeof(sa);
	cr_assert_geq(r->lfd, 0);
	cr_assert_eq(bind(r->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	cr_assert_eq(listen(r->lfd, 64), 0);
	cr_assert_eq(getsockname(r->lfd, (struct sockaddr *)&sa, &len), 0);
	r->port = ntohs(sa.sin_port);
	cr_assert_eq(pthread_create(&r->th, NULL, relay_loop, r), 0);
}

static void relay_stop(relay_t *r)
{
	shutdown(r->lfd, SHUT_RDWR);
	pthread_join(r->th, NULL);
	close(r->lfd);
}

Test(load_identity, a_gateway_that_waits_for_approval_ends_the_run_with_the_way_to_approve, .timeout = 240)
{
	ctx_t t;
	gateway_up_with(&t, ",\"trustedProxies\":[\"127.0.0.1\"]");
	unsigned gw_port = 0;
	cr_assert_eq(sscanf(t.target, "ws://127.0.0.1:%u", &gw_port), 1);
	relay_t rl;
	relay_start(&rl, (uint16_t)gw_port);
	char remote[64], path[128];
	snprintf(remote, sizeof(remote), "ws://127.0.0.1:%u", (unsigned)rl.port);
	snprintf(path, sizeof(path), "%s/device.json", t.dir);

	/* 10 sessions, but the run ends at once: one refusal, no turns */
	result_t r = load(&t, ARGS("--target", remote, "--token", TOKEN, "--identity", path, "--sessions", "10",
				   "--turns", "5", "--quiet"));
	cr_assert_eq(r.status, 1, "exit %d\nstdout: %s\nstderr: %s", r.status, r.out, r.err);
	cr_assert_str_eq(r.out, "", "no run, no report: %s", r.out);
	cJSON *id = identity_file(path);
	cr_assert(strstr(r.err, jstr(id, "deviceId")), "the device is named: %s", r.err);
	cr_assert(strstr(r.err, "has not paired device"), "%s", r.err);
	const char *cmd = strstr(r.err, "pincer devices approve ");
	cr_assert_not_null(cmd, "%s", r.err);
	char rid[64] = "";
	cr_assert_eq(sscanf(cmd, "pincer devices approve %63s", rid), 1);
	cr_assert_eq(strlen(rid), 36, "a request id: %s", rid);
	cr_assert(strstr(r.err, "openclaw devices approve "), "%s", r.err);
	result_free(&r);

	/* the operator approves it (on loopback, with the token) */
	r = pincer_run(&t, "devices", ARGS("approve", rid, "--url", t.target, "--token", TOKEN));
	cr_assert_eq(r.status, 0, "approve: %s %s", r.out, r.err);
	result_free(&r);

	r = load(&t, ARGS("--target", remote, "--token", TOKEN, "--identity", path, "--sessions", "3", "--turns", "2",
			  "--json", "--quiet"));
	assert_turns_ok(&r, 6);
	result_free(&r);
	cJSON *after = identity_file(path);
	cr_assert_str_eq(jstr(after, "deviceId"), jstr(id, "deviceId"));
	cr_assert_gt(strlen(jstr(jget(jget(after, "tokens"), "operator"), "token")), 20);

	cJSON_Delete(after);
	cJSON_Delete(id);
	relay_stop(&rl);
	down(&t);
}
