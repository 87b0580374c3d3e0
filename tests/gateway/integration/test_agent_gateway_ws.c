/*
 * The gateway's WebSocket RPC end to end on loopback (spec §8.1, §8.2):
 * the challenge and connect handshake, protocol negotiation, shared-secret
 * and device-identity auth, scopes, frame errors and caps, ticks and the
 * shutdown event. Runs are in test_agent_gateway_runs.c.
 */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/sha.h>

#include "gateway_device.h"
#include "gateway_harness.h"
#include "raw_http.h"
#include "trace_capture.h"

TestSuite(agent_gateway_ws, .timeout = 120);

/* ---- handshake ---- */

Test(agent_gateway_ws, challenge_then_hello_ok_as_openclaw_describes_it)
{
	gw_t f;
	gw_start(&f, GW_CONFIG(""), NULL);
	cl_t *c = cl_open(f.port);
	cJSON *ch = cl_challenge(c);
	const char *nonce = jstr(ch, "nonce");
	cr_assert_eq(strlen(nonce), 43, "nonce %s", nonce); /* base64url of 32 bytes */
	cr_assert_eq(strspn(nonce, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"), 43);
	cr_assert_gt(jnum(ch, "ts"), 1.6e12);
	cJSON_Delete(ch);

	cJSON *r = cl_call(c, "connect", connect_params(GW_TOKEN, NULL));
	cr_assert(jok(r));
	const cJSON *h = jget(r, "payload");
	cr_assert_str_eq(jstr(h, "type"), "hello-ok");
	cr_assert_eq(jnum(h, "protocol"), 4);
	cr_assert_str_eq(jstr(jget(h, "server"), "version"), PC_VERSION_STRING);
	cr_assert_str_neq(jstr(jget(h, "server"), "connId"), "");
	const cJSON *methods = jget(jget(h, "features"), "methods");
	const char *want[] = {"agent", "agent.wait", "chat.send", "chat.abort", "sessions.create", "chat.history",
			      "sessions.list",
			      "sessions.abort", "health", "status", "models.list", "usage.run", "chat.startup",
			      "chat.metadata", "sessions.describe", "sessions.subscribe", "sessions.unsubscribe",
			      "sessions.messages.subscribe", "sessions.messages.unsubscribe",
			      "sessions.observer.visibility", "sessions.resolve", "agent.identity.get", "agents.list",
			      "config.get", "config.set", "config.patch", "config.apply", "models.authStatus",
			      "update.status", "diagnostics.stability", "usage.cost", "system.info", "cron.list",
			      "cron.runs", "talk.catalog", "question.list", "exec.approval.list", "plugin.approval.list",
			      "openclaw.approval.list", "cron.status", "tasks.list", "progressCard.get",
			      "sessions.branches.list", "sessions.companion.state", "environments.list", "node.list",
			      "channels.status", "plugins.list", "plugins.catalog.browse", "device.pair.list",
			      "device.pair.approve", "device.pair.reject", "device.pair.remove", "device.token.rotate",
			      "device.token.revoke"};
	cr_assert_eq(cJSON_GetArraySize(methods), (int)(sizeof(want) / sizeof(want[0])));
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		bool found = false;
		const cJSON *m;
		cJSON_ArrayForEach(m, methods) found = found || !strcmp(m->valuestring, want[i]);
		cr_assert(found, "method %s not listed", want[i]);
	}
	cr_assert_gt(cJSON_GetArraySize(jget(jget(h, "features"), "events")), 0);
	const cJSON *snap = jget(h, "snapshot");
	cr_assert(cJSON_IsArray(jget(snap, "presence")));
	cr_assert(cJSON_IsTrue(jget(jget(snap, "health"), "ok")));
	cr_assert_not_null(jget(jget(snap, "stateVersion"), "presence"));
	cr_assert_geq(jnum(snap, "uptimeMs"), 0);
	cr_assert_str_eq(jstr(jget(snap, "sessionDefaults"), "mainSessionKey"), "main");
	cr_assert_str_eq(jstr(jget(snap, "sessionDefaults"), "defaultAgentId"), "main");
	cr_assert_str_eq(jstr(snap, "authMode"), "token");
	const cJSON *pol = jget(h, "policy");
	cr_assert_eq(jnum(pol, "maxPayload"), 25 << 20);
	cr_assert_eq(jnum(pol, "maxBufferedBytes"), 50 << 20);
	cr_assert_eq(jnum(pol, "tickIntervalMs"), 30000);
	cr_assert_null(jget(h, "auth"), "no device, no device token");
	cJSON_Delete(r);

	/* the connection answers requests */
	r = cl_call(c, "health", NULL);
	cr_assert(jok(r));
	cr_assert(cJSON_IsTrue(jget(jget(r, "payload"), "ok")));
	cJSON_Delete(r);
	cl_free(c);
	gw_stop(&f);
}

Test(agent_gateway_ws, protocol_ranges_are_negotiated_and_a_mismatch_closes)
{
	gw_t f;
	gw_start(&f, GW_CONFIG(""), NULL);
	/* 3..3: the server speaks 3 */
	cl_t *c = cl_open(f.port);
	cJSON *p = connect_params(GW_TOKEN, NULL);
	cJSON_ReplaceItemInObject(p, "maxProtocol", cJSON_CreateNumber(3));
	cJSON *r = cl_handshake(c, p);
	cr_assert(jok(r));
	cr_assert_eq(jnum(jget(r, "payload"), "protocol"), 3);
	cJSON_Delete(r);
	cl_free(c);
	/* 3..9: the highest both speak */
	c = cl_open(f.port);
	p = connect_params(GW_TOKEN, NULL);
	cJSON_ReplaceItemInObject(p, "maxProtocol", cJSON_CreateNumber(9));
	r = cl_handshake(c, p);
	cr_assert_eq(jnum(jget(r, "payload"), "protocol"), 4);
	cJSON_Delete(r);
	cl_free(c);
	/* 5..6: nothing in common */
	c = cl_open(f.port);
	p = connect_params(GW_TOKEN, NULL);
	cJSON_ReplaceItemInObject(p, "minProtocol", cJSON_CreateNumber(5));
	cJSON_ReplaceItemInObject(p, "maxProtocol", cJSON_CreateNumber(6));
	r = cl_handshake(c, p);
	cr_assert_not(jok(r));
	cr_assert_str_eq(jerr(r), "INVALID_REQUEST");
	cr_assert_str_eq(jstr(jget(r, "error"), "message"), "protocol mismatch");
	const cJSON *sup = jget(jget(jget(r, "error"), "details"), "supported");
	cr_assert_eq(jnum(sup, "min"), 3);
	cr_assert_eq(jnum(sup, "max"), 4);
	cJSON_Delete(r);
	cl_expect_close(c, 1002);
	cl_free(c);
	gw_stop(&f);
}

Test(agent_gateway_ws, a_wrong_or_missing_token_is_refused_and_closed)
{
	gw_t f;
	gw_start(&f, GW_CONFIG(""), NULL);
	cl_t *c = cl_open(f.port);
	cJSON *r = cl_handshake(c, connect_params("not-the-token", NULL));
	cr_assert_not(jok(r));
	cr_assert_str_eq(jerr(r), "INVALID_REQUEST");
	cr_assert_str_eq(jdetail(r), "AUTH_TOKEN_MISMATCH");
	cr_assert(strstr(jstr(jget(r, "error"), "message"), "unauthorized"));
	cJSON_Delete(r);
	cl_expect_close(c, 1008);
	cr_assert(strstr(tws_close_reason(c->ws), "token mismatch"));
	cl_free(c);

	c = cl_open(f.port);
	r = cl_handshake(c, connect_params(NULL, NULL));
	cr_assert_str_eq(jdetail(r), "AUTH_TOKEN_MISSING");
	cJSON_Delete(r);
	cl_expect_close(c, 1008);
	cl_free(c);

	/* a token of another length is refused the same way */
	c = cl_open(f.port);
	r = cl_handshake(c, connect_params(GW_TOKEN "x", NULL));
	cr_assert_str_eq(jdetail(r), "AUTH_TOKEN_MISMATCH");
	cJSON_Delete(r);
	cl_free(c);
	gw_stop(&f);
}

Test(agent_gateway_ws, the_first_frame_must_be_connect)
{
	gw_t f;
	gw_start(&f, GW_CONFIG(""), NULL);
	/* a request that is not connect: an answer, then 1008 */
	expect_first_frame_refused(f.port, "{\"type\":\"req\",\"id\":\"h1\",\"method\":\"health\"}", false, "h1",
				   "connect");
	/* garbage: closed with a reason */
	cl_t *c = cl_open(f.port);
	cJSON_Delete(cl_challenge(c));
	cl_send_raw(c, "hello there");
	cl_expect_close(c, 1008);
	cr_assert(strstr(tws_close_reason(c->ws), "malformed JSON"), "reason %s",
		  tws_close_reason(c->ws));
	cl_free(c);
	/* connect without its required params */
	c = cl_open(f.port);
	cJSON *p = connect_params(GW_TOKEN, NULL);
	cJSON_DeleteItemFromObject(p, "client");
	cJSON *r = cl_handshake(c, p);
	cr_assert_str_eq(jerr(r), "INVALID_REQUEST");
	cr_assert(strstr(jstr(jget(r, "error"), "message"), "invalid connect params: client"));
	cJSON_Delete(r);
	cl_expect_close(c, 1008);
	cl_free(c);
	/* the gateway is fine */
	c = cl_connect(f.port);
	cl_free(c);
	gw_stop(&f);
}

Test(agent_gateway_ws, frames_over_64_kib_before_connect_close_with_1009)
{
	gw_t f;
	gw_start(&f, GW_CONFIG(""), NULL);
	cl_t *c = cl_open(f.port);
	cJSON_Delete(cl_challenge(c));
	size_t n = 70 << 10;
	char *big = malloc(n + 1);
	memset(big, 'a', n);
	big[n] = 0;
	cr_assert_eq(tws_send_text(c->ws, big, n), 0);
	cl_expect_close(c, 1009);
	cl_free(c);
	/* after connect the cap is maxPayload: the same frame is a request */
	c = cl_connect(f.port);
	memcpy(big, "{\"type\":\"req\",\"id\":\"big\",\"method\":\"health\",\"params\":{\"pad\":\"", 60);
	memcpy(big + n - 3, "\"}}", 3);
	cr_assert_eq(tws_send_text(c->ws, big, n), 0);
	cJSON *r = cl_await_res(c, "big", 10000);
	cr_assert_not_null(r, "no answer to a 70 KiB request after connect");
	cr_assert(jok(r));
	cJSON_Delete(r);
	free(big);
	cl_free(c);
	gw_stop(&f);
}

static void small_payload(pc_config_t *cfg) { cfg->gateway.max_payload = 4096; }

Test(agent_gateway_ws, frames_over_max_payload_after_connect_close_with_1009)
{
	gw_t f;
	gw_start(&f, GW_CONFIG(""), small_payload);
	cl_t *c = cl_connect(f.port);
	char big[8192];
	memset(big, ' ', sizeof(big));
	cr_assert_eq(tws_send_text(c->ws, big, sizeof(big)), 0);
	cl_expect_close(c, 1009);
	cl_free(c);
	gw_stop(&f);
}

static void short_handshake(pc_config_t *cfg) { cfg->gateway.handshake_ms = 300; }

Test(agent_gateway_ws, a_client_that_never_connects_is_closed_after_the_handshake_timeout)
{
	gw_t f;
	gw_start(&f, GW_CONFIG(""), short_handshake);
	cl_t *c = cl_open(f.port);
	uint64_t t0 = now_ms();
	cJSON_Delete(cl_challenge(c));
	cl_expect_close(c, 1008);
	uint64_t took = now_ms() - t0;
	cr_assert_geq(took, 250, "closed after %llu ms", (unsigned long long)took);
	cr_assert_lt(took, 3000, "closed after %llu ms", (unsigned long long)took);
	cr_assert_str_eq(tws_close_reason(c->ws), "handshake timeout");
	cl_free(c);
	/* a client that connects in time stays */
	c = cl_connect(f.port);
	sleep_ms(600);
	cJSON *r = cl_call(c, "health", NULL);
	cr_assert(jok(r));
	cJSON_Delete(r);
	cl_free(c);
	gw_stop(&f);
}

/* ---- device identity ---- */

Test(agent_gateway_ws, a_signed_device_on_loopback_is_paired_and_its_token_then_works_alone)
{
	gw_t f;
	gw_start(&f, GW_CONFIG(""), NULL);
	device_t d;
	dev_new(&d);
	cl_t *c = cl_open(f.port);
	cJSON *r = dev_connect(c, &d, &(dev_opts_t){0});
	cr_assert(jok(r), "%s", cJSON_PrintUnformatted(r));
	const cJSON *auth = jget(jget(r, "payload"), "auth");
	char token[64];
	snprintf(token, sizeof(token), "%s", jstr(auth, "deviceToken"));
	cr_assert_geq(strlen(token), 40);
	cr_assert_str_eq(jstr(auth, "role"), "operator");
	cr_assert_eq(cJSON_GetArraySize(jget(auth, "scopes")), 2);
	cJSON_Delete(r);
	cl_free(c);

	/* the device token and the signature, no shared token */
	c = cl_open(f.port);
	r = dev_connect(c, &d, &(dev_opts_t){.token = "", .device_token = token});
	cr_assert(jok(r), "%s", cJSON_PrintUnformatted(r));
	cr_assert_str_eq(jstr(jget(jget(r, "payload"), "auth"), "deviceToken"), token);
	cJSON_Delete(r);
	r = cl_call(c, "health", NULL);
	cr_assert(jok(r));
	cJSON_Delete(r);
	cl_free(c);

	/* v2 signatures are accepted too */
	c = cl_open(f.port);
	r = dev_connect(c, &d, &(dev_opts_t){.v2 = true});
	cr_assert(jok(r), "%s", cJSON_PrintUnformatted(r));
	cr_assert_str_eq(jstr(jget(jget(r, "payload"), "auth"), "deviceToken"), token, "a paired device keeps its token");
	cJSON_Delete(r);
	cl_free(c);

	/* another device cannot use that token */
	device_t e;
	dev_new(&e);
	c = cl_open(f.port);
	r = dev_connect(c, &e, &(dev_opts_t){.token = "", .device_token = token});
	cr_assert_str_eq(jdetail(r), "AUTH_DEVICE_TOKEN_MISMATCH");
	cJSON_Delete(r);
	cl_expect_close(c, 1008);
	cl_free(c);

	/* a device token without the device block is not enough */
	c = cl_open(f.port);
	cJSON *p = connect_params(NULL, NULL);
	cJSON *a = cJSON_AddObjectToObject(p, "auth");
	cJSON_AddStringToObject(a, "deviceToken", token);
	r = cl_handshake(c, p);
	cr_assert_str_eq(jdetail(r), "DEVICE_IDENTITY_REQUIRED");
	cJSON_Delete(r);
	cl_free(c);
	EVP_PKEY_free(d.key);
	EVP_PKEY_free(e.key);
	gw_stop(&f);
}

Test(agent_gateway_ws, bad_signatures_wrong_nonces_and_wrong_device_ids_are_refused)
{
	gw_t f;
	gw_start(&f, GW_CONFIG(""), NULL);
	device_t d;
	dev_new(&d);
	struct {
		dev_opts_t o;
		const char *detail;
	} cases[] = {
		{{.bad_sig = true}, "DEVICE_AUTH_SIGNATURE_INVALID"},
		{{.nonce = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}, "DEVICE_AUTH_NONCE_MISMATCH"},
		{{.id = "0000000000000000000000000000000000000000000000000000000000000000"}, "DEVICE_AUTH_DEVICE_ID_MISMATCH"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		cl_t *c = cl_open(f.port);
		cJSON *r = dev_connect(c, &d, &cases[i].o);
		cr_assert_not(jok(r));
		cr_assert_str_eq(jdetail(r), cases[i].detail, "case %zu: %s", i, cJSON_PrintUnformatted(r));
		cJSON_Delete(r);
		cl_expect_close(c, 1008);
		cl_free(c);
	}
	/* nothing was paired: a device token the gateway never issued fails */
	cl_t *c = cl_open(f.port);
	cJSON *r = dev_connect(c, &d, &(dev_opts_t){.token = "", .device_token = "made-up"});
	cr_assert_str_eq(jdetail(r), "AUTH_DEVICE_TOKEN_MISMATCH");
	cJSON_Delete(r);
	cl_free(c);
	EVP_PKEY_free(d.key);
	gw_stop(&f);
}

/* ---- scopes and frames ---- */

Test(agent_gateway_ws, methods_outside_the_granted_scopes_are_forbidden)
{
	gw_t f;
	gw_start(&f, GW_CONFIG(""), NULL);
	cl_t *c = cl_connect_scopes(f.port, "[\"operator.read\"]");
	cJSON *r = cl_call(c, "health", NULL);
	cr_assert(jok(r));
	cJSON_Delete(r);
	r = cl_call(c, "sessions.list", NULL);
	cr_assert(jok(r), "%s", cJSON_PrintUnformatted(r));
	cJSON_Delete(r);
	const char *writes[] = {"agent", "agent.wait", "chat.send", "chat.abort", "sessions.abort"};
	for (size_t i = 0; i < sizeof(writes) / sizeof(writes[0]); i++) {
		r = cl_call(c, writes[i], agent_params("hi", "k", NULL));
		cr_assert_str_eq(jerr(r), "FORBIDDEN", "%s", writes[i]);
		const cJSON *d = jget(jget(r, "error"), "details");
		cr_assert_str_eq(jstr(d, "code"), "MISSING_SCOPE");
		cr_assert_str_eq(jstr(d, "missingScope"), "operator.write");
		cr_assert_str_eq(cJSON_GetArrayItem(jget(d, "requiredScopes"), 0)->valuestring, "operator.write");
		cJSON_Delete(r);
	}
	cl_free(c);
	/* operator.admin covers everything */
	c = cl_connect_scopes(f.port, "[\"operator.admin\"]");
	r = cl_call(c, "sessions.abort", cJSON_Parse("{\"sessionKey\":\"nobody\"}"));
	cr_assert(jok(r), "%s", cJSON_PrintUnformatted(r));
	cJSON_Delete(r);
	cl_free(c);
	/* no scopes at all: not even reads */
	c = cl_connect_scopes(f.port, "[]");
	r = cl_call(c, "health", NULL);
	cr_assert_str_eq(jerr(r), "FORBIDDEN");
	cJSON_Delete(r);
	cl_free(c);
	gw_stop(&f);
}

Test(agent_gateway_ws, malformed_frames_and_unknown_methods_get_clear_errors_and_the_connection_goes_on)
{
	gw_t f;
	gw_start(&f, GW_CONFIG(""), NULL);
	cl_t *c = cl_connect(f.port);
	struct {
		const char *frame;
		const char *id;
		const char *needle;
	} cases[] = {
		{"{not json", "invalid", "malformed JSON"},
		{"[1,2,3]", "invalid", "not a JSON object"},
		{"{\"type\":\"req\",\"method\":\"health\"}", "invalid", "id"},
		{"{\"type\":\"req\",\"id\":\"a1\"}", "a1", "method"},
		{"{\"type\":\"event\",\"id\":\"a2\",\"method\":\"health\"}", "a2", "type"},
		{"{\"type\":\"req\",\"id\":\"a3\",\"method\":\"no.such\"}", "a3", "unknown method: no.such"},
		{"{\"type\":\"req\",\"id\":\"a4\",\"method\":\"connect\",\"params\":{}}", "a4", "already connected"},
		{"{\"type\":\"req\",\"id\":\"a5\",\"method\":\"agent\",\"params\":[]}", "a5", "must be an object"},
		{"{\"type\":\"req\",\"id\":\"a6\",\"method\":\"agent\",\"params\":{\"message\":\"x\"}}", "a6",
		 "invalid agent params: idempotencyKey: is required"},
		{"{\"type\":\"req\",\"id\":\"a7\",\"method\":\"agent\",\"params\":{\"message\":\"x\",\"idempotencyKey\":\"k\","
		 "\"bogus\":1}}",
		 "a7", "invalid agent params: unexpected property 'bogus'"},
		{"{\"type\":\"req\",\"id\":\"a8\",\"method\":\"agent\",\"params\":{\"message\":\"x\",\"idempotencyKey\":\"k\","
		 "\"timeout\":-1}}",
		 "a8", "timeout: must be an integer"},
		{"{\"type\":\"req\",\"id\":\"a9\",\"method\":\"agent.wait\",\"params\":{}}", "a9", "runId: is required"},
		/* each method's spec, checked before the method runs */
		{"{\"type\":\"req\",\"id\":\"a10\",\"method\":\"chat.send\",\"params\":{}}", "a10",
		 "invalid chat.send params: sessionKey: is required"},
		{"{\"type\":\"req\",\"id\":\"a11\",\"method\":\"chat.abort\",\"params\":{\"sessionKey\":\"s\",\"x\":1}}",
		 "a11", "invalid chat.abort params: unexpected property 'x'"},
		{"{\"type\":\"req\",\"id\":\"a12\",\"method\":\"chat.history\",\"params\":{\"sessionKey\":\"s\","
		 "\"limit\":\"5\"}}",
		 "a12", "invalid chat.history params: limit: must be an integer >= 0"},
		{"{\"type\":\"req\",\"id\":\"a13\",\"method\":\"sessions.abort\",\"params\":{\"sessionKey\":\"\"}}", "a13",
		 "invalid sessions.abort params: sessionKey: must be a non-empty string"},
		{"{\"type\":\"req\",\"id\":\"a14\",\"method\":\"sessions.list\",\"params\":{\"limit\":-1}}", "a14",
		 "invalid sessions.list params: limit: must be an integer >= 0"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		cl_send_raw(c, cases[i].frame);
		cl_expect_invalid(c, cases[i].id, cases[i].needle, 5000);
	}
	/* a binary frame holding a request is a request */
	cl_send_binary(c, "{\"type\":\"req\",\"id\":\"b1\",\"method\":\"health\"}");
	cJSON *r = cl_await_res(c, "b1", 5000);
	cr_assert(jok(r));
	cJSON_Delete(r);
	/* a method without a spec does not look at its params */
	cl_send_raw(c, "{\"type\":\"req\",\"id\":\"b2\",\"method\":\"health\",\"params\":[1]}");
	r = cl_await_res(c, "b2", 5000);
	cr_assert(jok(r));
	cJSON_Delete(r);
	r = cl_call(c, "status", NULL);
	cr_assert(jok(r));
	cr_assert_str_eq(jstr(jget(r, "payload"), "version"), PC_VERSION_STRING);
	cr_assert_eq(jnum(jget(jget(r, "payload"), "connections"), "open"), 1);
	cr_assert_eq(jnum(jget(jget(r, "payload"), "connections"), "connected"), 1);
	cJSON_Delete(r);
	cl_free(c);
	gw_stop(&f);
}

static void fast_ticks(pc_config_t *cfg) { cfg->gateway.tick_ms = 100; }

Test(agent_gateway_ws, ticks_come_every_tick_interval_with_increasing_seq)
{
	gw_t f;
	gw_start(&f, GW_CONFIG(""), fast_ticks);
	cl_t *c = cl_open(f.port);
	cJSON *r = cl_handshake(c, connect_params(GW_TOKEN, NULL));
	cr_assert_eq(jnum(jget(jget(r, "payload"), "policy"), "tickIntervalMs"), 100);
	cJSON_Delete(r);
	uint64_t t0 = now_ms();
	double last_ts = 0;
	for (int i = 0; i < 5; i++) {
		cJSON *t = cl_await_event(c, "tick", 2000);
		cr_assert_not_null(t, "tick %d", i);
		double ts = jnum(jget(t, "payload"), "ts");
		cr_assert_gt(ts, last_ts);
		last_ts = ts;
		cJSON_Delete(t);
	}
	uint64_t took = now_ms() - t0;
	cr_assert_geq(took, 350, "5 ticks in %llu ms", (unsigned long long)took);
	cr_assert_lt(took, 2500, "5 ticks in %llu ms", (unsigned long long)took);
	cr_assert_not(c->seq_gap, "event seq must grow by one");
	cl_free(c);
	gw_stop(&f);
}

static void *drain_thread(void *arg)
{
	pc_gateway_drain(arg, 5000);
	return NULL;
}

Test(agent_gateway_ws, drain_sends_shutdown_and_refuses_new_runs)
{
	gw_t f;
	gw_start(&f, GW_CONFIG(""), NULL);
	cl_t *c = cl_connect(f.port);
	pthread_t t;
	cr_assert_eq(pthread_create(&t, NULL, drain_thread, f.g), 0);
	cJSON *e = cl_await_event(c, "shutdown", 5000);
	cr_assert_not_null(e, "no shutdown event");
	cr_assert_str_eq(jstr(jget(e, "payload"), "reason"), "draining");
	cJSON_Delete(e);
	pthread_join(t, NULL);
	cJSON *r = cl_call(c, "agent", agent_params("hi", "k-drain", NULL));
	cr_assert_str_eq(jerr(r), "UNAVAILABLE");
	cr_assert(cJSON_IsTrue(jget(jget(r, "error"), "retryable")));
	cJSON_Delete(r);
	r = cl_call(c, "health", NULL);
	cr_assert(jok(r));
	cr_assert_str_eq(jstr(jget(r, "payload"), "state"), "draining");
	cJSON_Delete(r);
	/* a client arriving now hears it after hello-ok */
	cl_t *late = cl_connect(f.port);
	e = cl_await_event(late, "shutdown", 5000);
	cr_assert_not_null(e);
	cJSON_Delete(e);
	cl_free(late);
	cl_free(c);
	gw_stop(&f);
}

#define GW_CONFIG_PASSWORD                                                                         \
	"{\"providers\":{\"mock\":{\"api\":\"openai-completions\",\"embedded\":true,\"apiKey\":\"k\"}}," \
	"\"agents\":{\"defaults\":{\"model\":\"mock/m1\"}},"                                            \
	"\"gateway\":{\"auth\":{\"mode\":\"password\",\"password\":\"open sesame\"}}}"

static cJSON *password_params(const char *pw)
{
	cJSON *p = connect_params(NULL, NULL);
	cJSON *a = cJSON_AddObjectToObject(p, "auth");
	if (pw)
		cJSON_AddStringToObject(a, "password", pw);
	return p;
}

Test(agent_gateway_ws, password_mode_checks_the_password)
{
	gw_t f;
	gw_start(&f, GW_CONFIG_PASSWORD, NULL);
	cl_t *c = cl_open(f.port);
	cJSON *r = cl_handshake(c, password_params("open sesame"));
	cr_assert(jok(r), "%s", cJSON_PrintUnformatted(r));
	cr_assert_str_eq(jstr(jget(jget(r, "payload"), "snapshot"), "authMode"), "password");
	cJSON_Delete(r);
	cl_free(c);
	c = cl_open(f.port);
	r = cl_handshake(c, password_params("open sesam"));
	cr_assert_str_eq(jdetail(r), "AUTH_PASSWORD_MISMATCH");
	cJSON_Delete(r);
	cl_expect_close(c, 1008);
	cl_free(c);
	c = cl_open(f.port);
	r = cl_handshake(c, password_params(NULL));
	cr_assert_str_eq(jdetail(r), "AUTH_PASSWORD_MISSING");
	cJSON_Delete(r);
	cl_free(c);
	gw_stop(&f);
}

/* ---- plain HTTP and origins ---- */

#define GW_CONFIG_NOAUTH                                                                           \
	"{\"providers\":{\"mock\":{\"api\":\"openai-completions\",\"embedded\":true,\"apiKey\":\"k\"}}," \
	"\"agents\":{\"defaults\":{\"model\":\"mock/m1\"}},\"gateway\":{\"auth\":{\"mode\":\"none\"}}}"

Test(agent_gateway_ws, plain_get_is_told_to_upgrade_and_foreign_origins_are_refused_without_auth)
{
	gw_t f;
	gw_start(&f, GW_CONFIG_NOAUTH, NULL);
	char buf[1024];
	cr_assert_eq(raw_http(f.port, "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n", NULL, buf, sizeof(buf)), 426, "%s", buf);
	/* without auth a web page elsewhere must not reach the agent */
	tws_options_t o = {.port = f.port, .origin = "https://evil.example"};
	tws_t *ws = NULL;
	int status = 0;
	cr_assert_eq(tws_connect(&o, &ws, &status), PC_ESTATE);
	cr_assert_eq(status, 403);
	/* another page of this machine is another site too */
	o.origin = "http://localhost:5173";
	cr_assert_eq(tws_connect(&o, &ws, &status), PC_ESTATE);
	cr_assert_eq(status, 403);
	/* the gateway's own pages may; auth mode none needs no token */
	char own[64];
	snprintf(own, sizeof(own), "http://localhost:%u", (unsigned)f.port);
	o.origin = own;
	cl_t *c = cl_open_with(&o);
	cJSON *r = cl_handshake(c, connect_params(NULL, NULL));
	cr_assert(jok(r), "%s", cJSON_PrintUnformatted(r));
	cr_assert_str_eq(jstr(jget(jget(r, "payload"), "snapshot"), "authMode"), "none");
	cJSON_Delete(r);
	cl_free(c);
	gw_stop(&f);
}

static void allow_dev_server(pc_config_t *c)
{
	static const char *const origins[] = {"http://localhost:5173"};
	c->gateway.allowed_origins = origins;
	c->gateway.allowed_origin_count = 1;
}

Test(agent_gateway_ws, an_allowed_origin_connects_but_pairs_no_device_on_sight)
{
	gw_t f;
	gw_start(&f, GW_CONFIG(""), allow_dev_server);
	tws_options_t o = {.port = f.port, .origin = "http://localhost:5173"};
	cl_t *c = cl_open_with(&o);
	cJSON *r = cl_handshake(c, connect_params(GW_TOKEN, NULL));
	cr_assert(jok(r), "%s", cJSON_PrintUnformatted(r));
	cJSON_Delete(r);
	cl_free(c);
	/* the token does not let a foreign page in */
	o.origin = "https://evil.example";
	tws_t *ws = NULL;
	int status = 0;
	cr_assert_eq(tws_connect(&o, &ws, &status), PC_ESTATE);
	cr_assert_eq(status, 403);
	/* a device on loopback behind an allowed page elsewhere is not paired
	 * at once: only the gateway's own pages are this machine */
	device_t d;
	dev_new(&d);
	o.origin = "http://localhost:5173";
	c = cl_open_with(&o);
	r = dev_connect(c, &d, &(dev_opts_t){0});
	cr_assert_str_eq(jdetail(r), "PAIRING_REQUIRED", "%s", cJSON_PrintUnformatted(r));
	cJSON_Delete(r);
	cl_free(c);
	EVP_PKEY_free(d.key);
	gw_stop(&f);
}

Test(agent_gateway_ws, forwarding_headers_from_an_untrusted_loopback_peer_pair_no_device)
{
	gw_t f;
	gw_start(&f, GW_CONFIG(""), NULL);
	device_t d;
	dev_new(&d);
	/* a local reverse proxy makes every client loopback; its header
	 * says the client is elsewhere, so no loopback pairing */
	static const char *const proxied[] = {"X-Forwarded-For: 203.0.113.9\r\n", "Forwarded: for=203.0.113.9\r\n",
					      "X-Real-IP: 203.0.113.9\r\n"};
	for (size_t i = 0; i < sizeof(proxied) / sizeof(proxied[0]); i++) {
		tws_options_t o = {.port = f.port, .headers = proxied[i]};
		cl_t *c = cl_open_with(&o);
		cJSON *r = dev_connect(c, &d, &(dev_opts_t){0});
		cr_assert_str_eq(jdetail(r), "PAIRING_REQUIRED", "%s: %s", proxied[i], cJSON_PrintUnformatted(r));
		cJSON_Delete(r);
		cl_free(c);
	}
	/* the same device straight from loopback is paired */
	cl_t *c = cl_open(f.port);
	cJSON *r = dev_connect(c, &d, &(dev_opts_t){0});
	cr_assert(jok(r), "%s", cJSON_PrintUnformatted(r));
	cJSON_Delete(r);
	cl_free(c);
	EVP_PKEY_free(d.key);
	gw_stop(&f);
}

/* ---- the client's machine ---- */

/* Whether the capture's log holds `text` yet (the logger writes to the
 * file's descriptor as it goes). */
static bool log_has(trace_capture_t *c, const char *text)
{
	char buf[65536];
	ssize_t n = pread(fileno(c->out), buf, sizeof(buf) - 1, 0);
	if (n <= 0)
		return false;
	buf[n] = '\0';
	return strstr(buf, text) != NULL;
}

/* PINCER_TRACE=gwclient: a client that connects, makes a request and
 * closes goes new -> challenge -> open -> closed, each traced once in the
 * gateway's log under its connId, and none is refused (gw_stop checks
 * the agent's counters, gwclient's included). */
Test(agent_gateway_ws, the_client_machine_traces_connect_request_and_close)
{
	trace_capture_t tc;
	trace_capture_begin(&tc, "gwclient");
	gw_t f;
	gw_start(&f, GW_CONFIG(""), NULL);
	trace_capture_started(&tc);
	cl_t *c = cl_connect(f.port);
	cJSON *r = cl_call(c, "health", NULL);
	cr_assert(jok(r));
	cJSON_Delete(r);
	cr_assert_eq(tws_close(c->ws, 1000, "bye", 5000), 0);
	cl_free(c);
	AWAIT(log_has(&tc, "closed (socket closed)"), 5000);
	gw_stop(&f);
	char *log = trace_capture_end(&tc);
	char got[1024];
	trace_of(log, "gwclient", "conn-", got, sizeof(got));
	cr_assert_str_eq(got, "new -> challenge (accepted); challenge -> open (connect); open -> closed (socket closed)",
			 "traced: %s", got);
	free(log);
}
