/*
 * Who may connect (§8.2): the shared secret of gateway.auth (a token or a
 * password, compared in constant time), device identities (an Ed25519 key
 * whose signature binds the connect to this connection's challenge), and
 * the device tokens issued to paired devices.
 *
 * Pairing: a device that proves its key on a loopback connection that also
 * passes the shared secret is approved at once and gets a device token in
 * hello-ok; from then on the token with the device's signature is enough,
 * from any address. A device unknown to the gateway that connects from
 * elsewhere is refused with NOT_PAIRED / PAIRING_REQUIRED and leaves a
 * pairing request for an operator (device_pairing.c keeps the devices and
 * the requests).
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include "io/io.h"
#include "rpc_internal.h"
#include "runtime/clock.h"

int pc__gw_nonce(char out[PC__GW_NONCE_MAX])
{
	unsigned char r[32];
	if (RAND_bytes(r, sizeof(r)) != 1)
		return PC_ESYS;
	pc_base64url_encode(r, sizeof(r), out);
	return 0;
}

bool pc__gw_secret_equal(const char *given, size_t n, const char *secret)
{
	/* Digests first: the comparison then takes the same time whatever
	 * the lengths and contents. */
	unsigned char da[SHA256_DIGEST_LENGTH], db[SHA256_DIGEST_LENGTH];
	if (!given || !secret || !SHA256((const unsigned char *)given, n, da) ||
	    !SHA256((const unsigned char *)secret, strlen(secret), db))
		return false;
	return CRYPTO_memcmp(da, db, sizeof(da)) == 0;
}

/* ---- scopes ---- */

static const char *const scope_names[PC__GW_SCOPE_COUNT] = {
	"operator.read", "operator.write", "operator.admin", "operator.approvals", "operator.pairing",
	"operator.talk.secrets",
};

const char *pc__gw_scope_name(int i) { return i >= 0 && i < PC__GW_SCOPE_COUNT ? scope_names[i] : "?"; }

uint32_t pc__gw_scope_bit(const char *name)
{
	for (int i = 0; name && i < PC__GW_SCOPE_COUNT; i++)
		if (!strcmp(name, scope_names[i]))
			return 1u << i;
	return 0;
}

bool pc__gw_scope_has(uint32_t granted, uint32_t required)
{
	if (granted & (required | PC__GW_SCOPE_ADMIN))
		return true;
	return required == PC__GW_SCOPE_READ && (granted & PC__GW_SCOPE_WRITE);
}

/* ---- refusals ---- */

static int refuse(pc__gw_auth_t *out, const char *code, const char *detail, const char *next, const char *message)
{
	out->code = code;
	out->detail = detail;
	out->next_step = next;
	snprintf(out->message, sizeof(out->message), "%s", message);
	return PC_EINVAL;
}

static int refuse_device(pc__gw_auth_t *out, const char *detail, const char *message)
{
	return refuse(out, "INVALID_REQUEST", detail, NULL, message);
}

/* ---- device identity ---- */

typedef struct device_claim {
	pc_gateway_device_claim_t claim; /* what the signature covers */
	const char *public_key, *signature;
} device_claim_t;

static bool ed25519_verify(const unsigned char key[32], const unsigned char *sig, size_t sig_len, const char *msg)
{
	bool ok = false;
	EVP_PKEY *pk = EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, NULL, key, 32);
	EVP_MD_CTX *m = EVP_MD_CTX_new();
	if (pk && m && EVP_DigestVerifyInit(m, NULL, NULL, NULL, pk) == 1)
		ok = EVP_DigestVerify(m, sig, sig_len, (const unsigned char *)msg, strlen(msg)) == 1;
	EVP_MD_CTX_free(m);
	EVP_PKEY_free(pk);
	return ok;
}

static bool signature_ok(const device_claim_t *d, const unsigned char key[32], const unsigned char *sig,
			 size_t sig_len)
{
	/* v3 is what current clients sign; v2 is still accepted. */
	for (int v3 = 1; v3 >= 0; v3--) {
		char *msg = pc_gateway_device_payload(&d->claim, v3);
		bool ok = msg && ed25519_verify(key, sig, sig_len, msg);
		free(msg);
		if (ok)
			return true;
	}
	return false;
}

static bool id_matches(const char *id, const unsigned char key[32])
{
	char hex[65];
	if (!pc_gateway_device_id(key, hex) || strlen(id) != 64)
		return false;
	for (size_t i = 0; i < 64; i++) {
		char ch = id[i] >= 'A' && id[i] <= 'F' ? (char)(id[i] + 32) : id[i];
		if (ch != hex[i])
			return false;
	}
	return true;
}

/* Checks the device block against the key it carries and this
 * connection's challenge. */
static int verify_device(const pc__gw_conn_t *c, const device_claim_t *d, pc__gw_auth_t *out)
{
	unsigned char key[33], sig[65];
	long klen = pc_base64_decode(d->public_key, strlen(d->public_key), key, sizeof(key));
	if (klen != 32)
		return refuse_device(out, "DEVICE_AUTH_PUBLIC_KEY_INVALID",
				     "device public key invalid: expected the raw 32-byte Ed25519 key, base64url");
	if (!id_matches(d->claim.device_id, key))
		return refuse_device(out, "DEVICE_AUTH_DEVICE_ID_MISMATCH",
				     "device identity mismatch: device.id must be the SHA-256 of the public key");
	int64_t at = (int64_t)d->claim.signed_at;
	int64_t skew = at > pc__clock_wall_ms() ? at - pc__clock_wall_ms() : pc__clock_wall_ms() - at;
	if (at != c->challenge_ts && skew > PC__GW_SIGNATURE_SKEW_MS)
		return refuse_device(out, "DEVICE_AUTH_SIGNATURE_EXPIRED", "device signature expired");
	if (!d->claim.nonce[0])
		return refuse_device(out, "DEVICE_AUTH_NONCE_REQUIRED", "device nonce required");
	if (strcmp(d->claim.nonce, c->nonce) != 0)
		return refuse_device(out, "DEVICE_AUTH_NONCE_MISMATCH", "device nonce mismatch");
	long slen = pc_base64_decode(d->signature, strlen(d->signature), sig, sizeof(sig));
	if (slen != 64 || !signature_ok(d, key, sig, (size_t)slen))
		return refuse_device(out, "DEVICE_AUTH_SIGNATURE_INVALID", "device signature invalid");
	snprintf(out->device_id, sizeof(out->device_id), "%s", d->claim.device_id);
	for (char *p = out->device_id; *p; p++)
		*p = *p >= 'A' && *p <= 'F' ? (char)(*p + 32) : *p;
	out->device = true;
	return 0;
}

/* ---- the decision ---- */

/* Scopes asked for (absent: read and write; names this gateway does not
 * know are not granted). */
static uint32_t requested_scopes(const cJSON *params)
{
	const cJSON *a = cJSON_GetObjectItemCaseSensitive(params, "scopes");
	if (!cJSON_IsArray(a))
		return PC__GW_SCOPE_READ | PC__GW_SCOPE_WRITE;
	uint32_t bits = 0;
	const cJSON *s;
	cJSON_ArrayForEach(s, a) bits |= pc__gw_scope_bit(cJSON_GetStringValue(s));
	return bits;
}

/* The shared secret: 1 when it passes, 0 when absent, -1 when wrong. */
static int shared_secret(const pc_gateway_config_t *gc, const cJSON *auth)
{
	switch (gc->auth) {
	case PC_GATEWAY_AUTH_NONE:
		return 1;
	case PC_GATEWAY_AUTH_TOKEN: {
		const char *t = pc__gw_str(auth, "token");
		return !t || !*t ? 0 : pc__gw_secret_equal(t, strlen(t), gc->token) ? 1 : -1;
	}
	case PC_GATEWAY_AUTH_PASSWORD: {
		const char *p = pc__gw_str(auth, "password");
		return !p || !*p ? 0 : pc__gw_secret_equal(p, strlen(p), gc->password) ? 1 : -1;
	}
	}
	return -1;
}

static int refuse_secret(const pc_gateway_config_t *gc, int secret, pc__gw_auth_t *out)
{
	bool pw = gc->auth == PC_GATEWAY_AUTH_PASSWORD;
	if (secret == 0)
		return refuse(out, "INVALID_REQUEST", pw ? "AUTH_PASSWORD_MISSING" : "AUTH_TOKEN_MISSING",
			      "update_auth_configuration",
			      pw ? "unauthorized: gateway password missing (pass auth.password)"
				 : "unauthorized: gateway token missing (pass auth.token)");
	return refuse(out, "INVALID_REQUEST", pw ? "AUTH_PASSWORD_MISMATCH" : "AUTH_TOKEN_MISMATCH",
		      "update_auth_credentials",
		      pw ? "unauthorized: gateway password mismatch" : "unauthorized: gateway token mismatch");
}

static void claim_of(const cJSON *params, const cJSON *dev, const cJSON *auth, device_claim_t *d)
{
	const cJSON *client = cJSON_GetObjectItemCaseSensitive(params, "client");
	const char *role = pc__gw_str(params, "role");
	const char *token = pc__gw_str(auth, "token");
	*d = (device_claim_t){
		.claim = {
			.device_id = pc__gw_str(dev, "id"),
			.nonce = pc__gw_str(dev, "nonce"),
			.signed_at = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(dev, "signedAt")),
			.client_id = pc__gw_str(client, "id"),
			.client_mode = pc__gw_str(client, "mode"),
			.role = role ? role : "operator",
			.platform = pc__gw_str(client, "platform"),
			.family = pc__gw_str(client, "deviceFamily"),
			.scopes = cJSON_GetObjectItemCaseSensitive(params, "scopes"),
			.token = token ? token : pc__gw_str(auth, "deviceToken"),
		},
		.public_key = pc__gw_str(dev, "publicKey"),
		.signature = pc__gw_str(dev, "signature"),
	};
	if (!d->claim.nonce)
		d->claim.nonce = "";
}

/* The client's address as text ("" when unknown). */
static void client_ip(const pc__gw_client_t *who, char *out, size_t cap)
{
	static const unsigned char v4mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
	bool v4 = !memcmp(who->addr.b, v4mapped, sizeof(v4mapped));
	if (!inet_ntop(v4 ? AF_INET : AF_INET6, v4 ? who->addr.b + 12 : who->addr.b, out, (socklen_t)cap))
		out[0] = '\0';
}

/* Leaves a pairing request for the device of claim `d` and refuses the
 * connect with OpenClaw's answer, which names the request. */
static int refuse_unpaired(pc__gw_conn_t *c, const device_claim_t *d, pc__gw_auth_t *out)
{
	pc__gw_pairing_t r = {.scopes = out->scopes};
	snprintf(r.device_id, sizeof(r.device_id), "%s", out->device_id);
	snprintf(r.public_key, sizeof(r.public_key), "%s", d->public_key);
	snprintf(r.client_id, sizeof(r.client_id), "%s", d->claim.client_id ? d->claim.client_id : "");
	snprintf(r.client_mode, sizeof(r.client_mode), "%s", d->claim.client_mode ? d->claim.client_mode : "");
	snprintf(r.platform, sizeof(r.platform), "%s", d->claim.platform ? d->claim.platform : "");
	snprintf(r.family, sizeof(r.family), "%s", d->claim.family ? d->claim.family : "");
	client_ip(&c->client, r.remote_ip, sizeof(r.remote_ip));
	if (pc__gw_pairing_request(c->ws, &r) == 0)
		memcpy(out->request_id, r.request_id, sizeof(out->request_id));
	return refuse(out, "NOT_PAIRED", "PAIRING_REQUIRED", NULL, "pairing required: device is not approved yet");
}

/* A verified device that passed the shared secret: paired now when it is
 * on loopback (or known from before), else a pairing request. */
static int pair(pc__gw_conn_t *c, const device_claim_t *d, pc__gw_auth_t *out)
{
	int rc = pc__gw_device_pair(c->ws, out->device_id, d->public_key, out->scopes, c->loopback, out);
	if (rc == 0)
		return 0;
	if (rc == PC_ENOTFOUND)
		return refuse_unpaired(c, d, out);
	return refuse(out, "UNAVAILABLE", "DEVICE_TOKEN_UNAVAILABLE", "wait_then_retry",
		      "the device token could not be issued");
}

/* Refused before any secret is looked at: the address guessed too often. */
static int refuse_locked(pc__gw_auth_t *out, uint64_t wait_ms)
{
	out->retry_after_ms = wait_ms;
	char m[sizeof(out->message)];
	snprintf(m, sizeof(m), "too many failed authentication attempts from this address: retry in %llu s",
		 (unsigned long long)((wait_ms + 999) / 1000));
	return refuse(out, "UNAVAILABLE", "AUTH_RATE_LIMITED", "wait_then_retry", m);
}

static int check_secrets(pc__gw_conn_t *c, const cJSON *params, pc__gw_auth_t *out);

int pc__gw_authenticate(pc__gw_conn_t *c, const cJSON *params, pc__gw_auth_t *out)
{
	memset(out, 0, sizeof(*out));
	pc__gw_limiter_t *l = c->g->limiter;
	uint64_t now = pc_runtime_now_ms();
	uint64_t wait = pc__gw_limiter_check(l, &c->client, now);
	if (wait > 0)
		return refuse_locked(out, wait);
	int rc = check_secrets(c, params, out);
	if (rc == 0)
		pc__gw_limiter_pass(l, &c->client);
	else if (out->guessed)
		pc__gw_limiter_fail(l, &c->client, now);
	return rc;
}

/* Another node of the cluster, proving that it knows the cluster's secret
 * for this connection's challenge (cluster_auth.c): every scope, and c
 * becomes a node link, whose requests are served here (relay.c). */
static int node_link(pc__gw_conn_t *c, const cJSON *node, pc__gw_auth_t *out)
{
	const pc_cluster_config_t *cc = &c->g->cfg->cluster;
	if (!cc->enabled || !c->g->cluster)
		return refuse(out, "INVALID_REQUEST", "CLUSTER_DISABLED", NULL, "this gateway is not a cluster node");
	if (!pc__gw_node_proof_ok(cc->secret, pc__gw_str(node, "nodeId"), c->nonce, pc__gw_str(node, "proof"))) {
		out->guessed = true;
		return refuse(out, "INVALID_REQUEST", "CLUSTER_PROOF_MISMATCH", NULL,
			      "unauthorized: cluster proof mismatch (is cluster.secret the same on every node?)");
	}
	out->scopes = (1u << PC__GW_SCOPE_COUNT) - 1;
	c->node_link = true;
	pc__gw_cluster_count_link(c->g);
	return 0;
}

static int check_secrets(pc__gw_conn_t *c, const cJSON *params, pc__gw_auth_t *out)
{
	const cJSON *node = cJSON_GetObjectItemCaseSensitive(params, "cluster");
	if (node)
		return node_link(c, node, out);
	const pc_gateway_config_t *gc = c->g->gcfg;
	const cJSON *auth = cJSON_GetObjectItemCaseSensitive(params, "auth");
	const cJSON *dev = cJSON_GetObjectItemCaseSensitive(params, "device");
	const char *dtoken = pc__gw_str(auth, "deviceToken");
	out->scopes = requested_scopes(params);
	device_claim_t d = {0};
	if (dev) {
		claim_of(params, dev, auth, &d);
		int rc = verify_device(c, &d, out);
		if (rc != 0)
			return rc;
	}
	int secret = shared_secret(gc, auth);
	if (secret > 0)
		return out->device ? pair(c, &d, out) : 0;
	if (dtoken && *dtoken) {
		if (!out->device)
			return refuse(out, "INVALID_REQUEST", "DEVICE_IDENTITY_REQUIRED", NULL,
				      "device identity required: a device token goes with the signed device block");
		uint32_t granted = 0;
		if (!pc__gw_device_token_ok(c->ws, out->device_id, dtoken, &granted, &out->issued_ms)) {
			out->guessed = true;
			return refuse(out, "INVALID_REQUEST", "AUTH_DEVICE_TOKEN_MISMATCH", "update_auth_credentials",
				      "unauthorized: device token mismatch (pair the device again)");
		}
		const cJSON *asked = cJSON_GetObjectItemCaseSensitive(params, "scopes");
		if (cJSON_IsArray(asked) && (out->scopes & ~granted))
			return refuse(out, "INVALID_REQUEST", "AUTH_DEVICE_TOKEN_SCOPE_MISMATCH",
				      "review_auth_configuration",
				      "unauthorized: the device token does not grant the scopes asked for");
		if (!cJSON_IsArray(asked))
			out->scopes = granted;
		snprintf(out->device_token, sizeof(out->device_token), "%s", dtoken);
		return 0;
	}
	out->guessed = secret < 0;
	return refuse_secret(gc, secret, out);
}
