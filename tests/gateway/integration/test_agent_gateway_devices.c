/*
 * Device pairing from other machines (docs/gateway.md, "Device identity"):
 * a device elsewhere is refused with PAIRING_REQUIRED and leaves a pending
 * request; an operator lists it and approves or rejects it
 * (device.pair.*); the device token then works, survives a restart on the
 * same store (which keeps only its hash), and stops working once revoked
 * (the device's open connections are closed).
 *
 * "Elsewhere" on a loopback-only test network: the gateway trusts a proxy
 * on 127.0.0.1, and the test client speaks as that proxy, naming the
 * client 203.0.113.7 in X-Forwarded-For, which is how the gateway learns a
 * remote client's address behind a reverse proxy.
 */
#include <criterion/criterion.h>

#include "gateway_device.h"
#include "gateway_harness.h"

#define REMOTE_IP "203.0.113.7"
#define PROXIED_CONFIG GW_CONFIG(",\"trustedProxies\":[\"127.0.0.1\"]")

static cl_t *remote_open(uint16_t port)
{
	tws_options_t o = {.port = port, .headers = "X-Forwarded-For: " REMOTE_IP "\r\n"};
	return cl_open_with(&o);
}

/* The remote device's connect with the shared token: the answer. */
static cJSON *remote_connect(uint16_t port, const device_t *d, const dev_opts_t *o, cl_t **out)
{
	cl_t *c = remote_open(port);
	cJSON *r = dev_connect(c, d, o);
	if (out)
		*out = c;
	else
		cl_free(c);
	return r;
}

/* Expects the remote device to be refused pending approval; its request
 * id goes to `rid` (64 bytes). */
static void expect_pairing_required(uint16_t port, const device_t *d, char *rid)
{
	cl_t *c = NULL;
	cJSON *r = remote_connect(port, d, &(dev_opts_t){0}, &c);
	cr_assert_not(jok(r));
	cr_assert_str_eq(jerr(r), "NOT_PAIRED", "%s", cJSON_PrintUnformatted(r));
	const cJSON *det = jget(jget(r, "error"), "details");
	cr_assert_str_eq(jstr(det, "code"), "PAIRING_REQUIRED");
	cr_assert_str_eq(jstr(det, "reason"), "not-paired");
	cr_assert_str_eq(jstr(det, "deviceId"), d->id);
	cr_assert_str_eq(jstr(det, "requestedRole"), "operator");
	cr_assert_eq(cJSON_GetArraySize(jget(det, "requestedScopes")), 2);
	cr_assert_str_eq(jstr(jget(r, "error"), "message"), "pairing required: device is not approved yet");
	snprintf(rid, 64, "%s", jstr(det, "requestId"));
	cr_assert_eq(strlen(rid), 36, "a UUID: %s", rid);
	cJSON_Delete(r);
	cl_expect_close(c, 1008);
	cr_assert(strstr(tws_close_reason(c->ws), rid), "close reason: %s", tws_close_reason(c->ws));
	cl_free(c);
}

/* An operator with operator.pairing, on loopback with the shared token. */
static cl_t *pairing_operator(uint16_t port)
{
	return cl_connect_scopes(port, "[\"operator.pairing\"]");
}

static cJSON *call_with(cl_t *op, const char *method, const char *key, const char *value)
{
	cJSON *p = cJSON_CreateObject();
	cJSON_AddStringToObject(p, key, value);
	return cl_call(op, method, p);
}

/* device.pair.list's payload (the caller deletes the answer in *res). */
static const cJSON *pair_list(cl_t *op, cJSON **res)
{
	*res = cl_call(op, "device.pair.list", NULL);
	cr_assert(jok(*res), "%s", cJSON_PrintUnformatted(*res));
	return jget(*res, "payload");
}

/* Pairs remote device d through the operator; its device token, from a
 * connect after the approval, goes to `token` (64 bytes). */
static void approve_remote(uint16_t port, cl_t *op, const device_t *d, char *token)
{
	char rid[64];
	expect_pairing_required(port, d, rid);
	cJSON *r = call_with(op, "device.pair.approve", "requestId", rid);
	cr_assert(jok(r), "%s", cJSON_PrintUnformatted(r));
	cr_assert_str_eq(jstr(jget(r, "payload"), "requestId"), rid);
	const cJSON *dev = jget(jget(r, "payload"), "device");
	cr_assert_str_eq(jstr(dev, "deviceId"), d->id);
	cr_assert_null(jget(dev, "token"), "approval does not hand out the token");
	cJSON_Delete(r);
	r = remote_connect(port, d, &(dev_opts_t){0}, NULL);
	cr_assert(jok(r), "%s", cJSON_PrintUnformatted(r));
	snprintf(token, 64, "%s", jstr(jget(jget(r, "payload"), "auth"), "deviceToken"));
	cr_assert_geq(strlen(token), 40);
	cJSON_Delete(r);
}

Test(agent_gateway_devices, a_remote_device_waits_for_approval_then_its_token_works)
{
	gw_t f;
	gw_start(&f, PROXIED_CONFIG, NULL);
	device_t d;
	dev_new(&d);
	char rid[64], again[64];
	expect_pairing_required(f.port, &d, rid);
	/* one request per device: connecting again keeps it */
	expect_pairing_required(f.port, &d, again);
	cr_assert_str_eq(again, rid);

	cl_t *op = pairing_operator(f.port);
	cJSON *res;
	const cJSON *l = pair_list(op, &res);
	cr_assert_eq(cJSON_GetArraySize(jget(l, "pending")), 1);
	cr_assert_eq(cJSON_GetArraySize(jget(l, "paired")), 0);
	const cJSON *p = cJSON_GetArrayItem(jget(l, "pending"), 0);
	cr_assert_str_eq(jstr(p, "requestId"), rid);
	cr_assert_str_eq(jstr(p, "deviceId"), d.id);
	cr_assert_str_eq(jstr(p, "publicKey"), d.pub);
	cr_assert_str_eq(jstr(p, "remoteIp"), REMOTE_IP);
	cr_assert_str_eq(jstr(p, "clientId"), "test");
	cr_assert_str_eq(jstr(p, "platform"), "linux");
	cr_assert_eq(cJSON_GetArraySize(jget(p, "scopes")), 2);
	cJSON_Delete(res);

	/* an operator without operator.pairing may not look */
	cl_t *plain = cl_connect(f.port);
	cJSON *r = cl_call(plain, "device.pair.list", NULL);
	cr_assert_str_eq(jerr(r), "FORBIDDEN");
	cJSON_Delete(r);
	r = call_with(plain, "device.pair.approve", "requestId", rid);
	cr_assert_str_eq(jerr(r), "FORBIDDEN");
	cJSON_Delete(r);
	cl_free(plain);

	r = call_with(op, "device.pair.approve", "requestId", rid);
	cr_assert(jok(r), "%s", cJSON_PrintUnformatted(r));
	cJSON_Delete(r);
	l = pair_list(op, &res);
	cr_assert_eq(cJSON_GetArraySize(jget(l, "pending")), 0);
	cr_assert_eq(cJSON_GetArraySize(jget(l, "paired")), 1);
	const cJSON *pd = cJSON_GetArrayItem(jget(l, "paired"), 0);
	cr_assert_str_eq(jstr(pd, "deviceId"), d.id);
	cr_assert_null(jget(cJSON_GetArrayItem(jget(pd, "tokens"), 0), "token"), "tokens are summarised, not shown");
	cJSON_Delete(res);
	/* approving twice: the request is gone */
	r = call_with(op, "device.pair.approve", "requestId", rid);
	cr_assert_str_eq(jerr(r), "INVALID_REQUEST");
	cJSON_Delete(r);

	/* from elsewhere, the device now gets its token... */
	r = remote_connect(f.port, &d, &(dev_opts_t){0}, NULL);
	cr_assert(jok(r), "%s", cJSON_PrintUnformatted(r));
	char token[64];
	snprintf(token, sizeof(token), "%s", jstr(jget(jget(r, "payload"), "auth"), "deviceToken"));
	cr_assert_geq(strlen(token), 40);
	cJSON_Delete(r);
	/* ...which then works alone, without the shared token */
	cl_t *c = NULL;
	r = remote_connect(f.port, &d, &(dev_opts_t){.token = "", .device_token = token}, &c);
	cr_assert(jok(r), "%s", cJSON_PrintUnformatted(r));
	cJSON_Delete(r);
	r = cl_call(c, "health", NULL);
	cr_assert(jok(r));
	cJSON_Delete(r);
	cl_free(c);
	cl_free(op);
	EVP_PKEY_free(d.key);
	gw_stop(&f);
}

Test(agent_gateway_devices, a_rejected_request_is_gone_and_the_device_stays_refused)
{
	gw_t f;
	gw_start(&f, PROXIED_CONFIG, NULL);
	device_t d;
	dev_new(&d);
	char rid[64];
	expect_pairing_required(f.port, &d, rid);
	cl_t *op = pairing_operator(f.port);
	cJSON *r = call_with(op, "device.pair.reject", "requestId", rid);
	cr_assert(jok(r), "%s", cJSON_PrintUnformatted(r));
	cr_assert_str_eq(jstr(jget(r, "payload"), "requestId"), rid);
	cr_assert_str_eq(jstr(jget(r, "payload"), "deviceId"), d.id);
	cJSON_Delete(r);
	cJSON *res;
	const cJSON *l = pair_list(op, &res);
	cr_assert_eq(cJSON_GetArraySize(jget(l, "pending")), 0);
	cr_assert_eq(cJSON_GetArraySize(jget(l, "paired")), 0);
	cJSON_Delete(res);
	r = call_with(op, "device.pair.approve", "requestId", rid);
	cr_assert_str_eq(jerr(r), "INVALID_REQUEST");
	cr_assert_str_eq(jstr(jget(r, "error"), "message"), "unknown requestId");
	cJSON_Delete(r);
	/* still not paired: connecting again asks anew */
	char next[64];
	expect_pairing_required(f.port, &d, next);
	cr_assert_str_neq(next, rid);
	cl_free(op);
	EVP_PKEY_free(d.key);
	gw_stop(&f);
}

Test(agent_gateway_devices, a_device_token_survives_a_restart_until_it_is_revoked)
{
	gw_t f;
	gw_start(&f, PROXIED_CONFIG, NULL);
	device_t d;
	dev_new(&d);
	cl_t *op = pairing_operator(f.port);
	char token[64];
	approve_remote(f.port, op, &d, token);
	cl_free(op);

	gw_restart(&f, "{}");
	/* the store holds the token's SHA-256, not the token */
	pc_store_devices_t *sl = NULL;
	cr_assert_eq(pc_store_devices(f.h.store, &sl), 0);
	cr_assert_eq(pc_store_devices_count(sl), 1);
	pc_store_device_t sd;
	pc_store_devices_get(sl, 0, &sd);
	unsigned char md[32];
	char hex[65];
	SHA256((const unsigned char *)token, strlen(token), md);
	for (int i = 0; i < 32; i++)
		sprintf(hex + 2 * i, "%02x", md[i]);
	cr_assert_str_eq(sd.token_hash, hex);
	cr_assert_str_eq(sd.id, d.id);
	pc_store_devices_free(sl);

	cl_t *live = NULL;
	cJSON *r = remote_connect(f.port, &d, &(dev_opts_t){.token = "", .device_token = token}, &live);
	cr_assert(jok(r), "after a restart: %s", cJSON_PrintUnformatted(r));
	cJSON_Delete(r);
	op = pairing_operator(f.port);
	cJSON *res;
	const cJSON *l = pair_list(op, &res);
	cr_assert_eq(cJSON_GetArraySize(jget(l, "paired")), 1);
	cJSON_Delete(res);

	cJSON *p = cJSON_CreateObject();
	cJSON_AddStringToObject(p, "deviceId", d.id);
	cJSON_AddStringToObject(p, "role", "operator");
	r = cl_call(op, "device.token.revoke", p);
	cr_assert(jok(r), "%s", cJSON_PrintUnformatted(r));
	cr_assert_str_eq(jstr(jget(r, "payload"), "deviceId"), d.id);
	cJSON_Delete(r);
	cl_free(op);
	/* the connection it had open is closed */
	cl_expect_close(live, 1008);
	cr_assert_str_eq(tws_close_reason(live->ws), "device unpaired");
	cl_free(live);
	r = remote_connect(f.port, &d, &(dev_opts_t){.token = "", .device_token = token}, NULL);
	cr_assert_str_eq(jdetail(r), "AUTH_DEVICE_TOKEN_MISMATCH", "%s", cJSON_PrintUnformatted(r));
	cJSON_Delete(r);
	/* and it stays revoked across a restart */
	gw_restart(&f, "{}");
	r = remote_connect(f.port, &d, &(dev_opts_t){.token = "", .device_token = token}, NULL);
	cr_assert_str_eq(jdetail(r), "AUTH_DEVICE_TOKEN_MISMATCH", "%s", cJSON_PrintUnformatted(r));
	cJSON_Delete(r);
	EVP_PKEY_free(d.key);
	gw_stop(&f);
}

Test(agent_gateway_devices, a_loopback_device_paired_before_a_restart_gets_a_new_token_with_the_secret)
{
	gw_t f;
	gw_start(&f, PROXIED_CONFIG, NULL);
	device_t d;
	dev_new(&d);
	cl_t *c = cl_open(f.port);
	cJSON *r = dev_connect(c, &d, &(dev_opts_t){0});
	cr_assert(jok(r), "%s", cJSON_PrintUnformatted(r));
	char first[64];
	snprintf(first, sizeof(first), "%s", jstr(jget(jget(r, "payload"), "auth"), "deviceToken"));
	cJSON_Delete(r);
	cl_free(c);
	gw_restart(&f, "{}");
	/* the gateway knows the old token only by its hash: with the shared
	 * secret the device gets a new one, and the old one stops working */
	c = cl_open(f.port);
	r = dev_connect(c, &d, &(dev_opts_t){0});
	cr_assert(jok(r), "%s", cJSON_PrintUnformatted(r));
	const char *second = jstr(jget(jget(r, "payload"), "auth"), "deviceToken");
	cr_assert_geq(strlen(second), 40);
	cr_assert_str_neq(second, first);
	cJSON_Delete(r);
	cl_free(c);
	r = remote_connect(f.port, &d, &(dev_opts_t){.token = "", .device_token = first}, NULL);
	cr_assert_str_eq(jdetail(r), "AUTH_DEVICE_TOKEN_MISMATCH");
	cJSON_Delete(r);
	EVP_PKEY_free(d.key);
	gw_stop(&f);
}

static cJSON *rotate(cl_t *op, const char *device_id, const char *scopes)
{
	cJSON *p = cJSON_CreateObject();
	cJSON_AddStringToObject(p, "deviceId", device_id);
	cJSON_AddStringToObject(p, "role", "operator");
	if (scopes)
		cJSON_AddItemToObject(p, "scopes", cJSON_Parse(scopes));
	return cl_call(op, "device.token.rotate", p);
}

Test(agent_gateway_devices, a_rotated_token_replaces_the_old_one_within_the_approved_scopes)
{
	gw_t f;
	gw_start(&f, PROXIED_CONFIG, NULL);
	device_t d;
	dev_new(&d);
	/* a rotation stays within the caller's scopes too */
	cl_t *op = cl_connect_scopes(f.port, "[\"operator.pairing\",\"operator.write\"]");
	char token[64];
	approve_remote(f.port, op, &d, token);
	cl_t *live = NULL;
	cJSON *r = remote_connect(f.port, &d, &(dev_opts_t){.token = "", .device_token = token}, &live);
	cr_assert(jok(r), "%s", cJSON_PrintUnformatted(r));
	cJSON_Delete(r);

	/* a caller holding less than the token grants may not renew it */
	cl_t *narrow = pairing_operator(f.port);
	r = rotate(narrow, d.id, NULL);
	cr_assert_str_eq(jstr(jget(r, "error"), "message"), "device token rotation denied");
	cJSON_Delete(r);
	cl_free(narrow);
	/* wider than approved: refused, nothing changes */
	r = rotate(op, d.id, "[\"operator.admin\"]");
	cr_assert_str_eq(jstr(jget(r, "error"), "message"), "device token rotation denied");
	cJSON_Delete(r);
	r = rotate(op, d.id, "[\"operator.read\"]");
	cr_assert(jok(r), "%s", cJSON_PrintUnformatted(r));
	const cJSON *p = jget(r, "payload");
	cr_assert_str_eq(jstr(p, "tokenDelivery"), "withheld-cross-device");
	cr_assert_null(jget(p, "token"), "only the device itself hears its token");
	cr_assert_eq(cJSON_GetArraySize(jget(p, "scopes")), 1);
	cJSON_Delete(r);
	cl_expect_close(live, 1008);
	cl_free(live);
	/* the old token is over; the device gets the new one with the secret */
	r = remote_connect(f.port, &d, &(dev_opts_t){.token = "", .device_token = token}, NULL);
	cr_assert_str_eq(jdetail(r), "AUTH_DEVICE_TOKEN_MISMATCH", "%s", cJSON_PrintUnformatted(r));
	cJSON_Delete(r);
	r = remote_connect(f.port, &d, &(dev_opts_t){0}, NULL);
	cr_assert(jok(r), "%s", cJSON_PrintUnformatted(r));
	const char *fresh = jstr(jget(jget(r, "payload"), "auth"), "deviceToken");
	cr_assert_geq(strlen(fresh), 40);
	cr_assert_str_neq(fresh, token);
	cJSON_Delete(r);
	r = rotate(op, "no-such-device", NULL);
	cr_assert_str_eq(jerr(r), "INVALID_REQUEST");
	cJSON_Delete(r);
	cl_free(op);
	EVP_PKEY_free(d.key);
	gw_stop(&f);
}

#define PENDING_MAX 32 /* PC__GW_PENDING_MAX */

Test(agent_gateway_devices, pending_requests_are_bounded_and_the_oldest_goes)
{
	gw_t f;
	gw_start(&f, PROXIED_CONFIG, NULL);
	enum { N = PENDING_MAX + 3 };
	device_t d[N];
	char rid[N][64];
	for (int i = 0; i < N; i++) {
		dev_new(&d[i]);
		expect_pairing_required(f.port, &d[i], rid[i]);
		sleep_ms(2); /* distinct times: "oldest" is well defined */
	}
	cl_t *op = pairing_operator(f.port);
	cJSON *res;
	const cJSON *l = pair_list(op, &res);
	cr_assert_eq(cJSON_GetArraySize(jget(l, "pending")), PENDING_MAX);
	for (int i = 0; i < N; i++) {
		bool listed = false;
		const cJSON *p;
		cJSON_ArrayForEach(p, jget(l, "pending")) listed = listed || !strcmp(jstr(p, "requestId"), rid[i]);
		cr_assert_eq(listed, i >= N - PENDING_MAX, "request %d %s", i, listed ? "listed" : "dropped");
	}
	cJSON_Delete(res);
	/* a dropped request cannot be approved */
	cJSON *r = call_with(op, "device.pair.approve", "requestId", rid[0]);
	cr_assert_str_eq(jerr(r), "INVALID_REQUEST");
	cJSON_Delete(r);
	cl_free(op);
	for (int i = 0; i < N; i++)
		EVP_PKEY_free(d[i].key);
	gw_stop(&f);
}
