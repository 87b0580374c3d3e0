/*
 * Device identities for gateway tests: an Ed25519 key, its id and the
 * signed device block of a connect (docs/gateway.md, "Device identity").
 */
#ifndef PC_TESTS_GATEWAY_DEVICE_H
#define PC_TESTS_GATEWAY_DEVICE_H

#include <openssl/evp.h>
#include <openssl/sha.h>

#include "gateway_harness.h"

typedef struct dev {
	EVP_PKEY *key;
	char pub[64];
	char id[65];
} device_t;

static inline void b64url(const unsigned char *in, size_t n, char *out)
{
	unsigned char tmp[256];
	int len = EVP_EncodeBlock(tmp, in, (int)n);
	int o = 0;
	for (int i = 0; i < len && tmp[i] != '='; i++)
		out[o++] = tmp[i] == '+' ? '-' : tmp[i] == '/' ? '_' : (char)tmp[i];
	out[o] = 0;
}

static inline void dev_new(device_t *d)
{
	d->key = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
	cr_assert_not_null(d->key);
	unsigned char raw[32], md[32];
	size_t n = sizeof(raw);
	cr_assert_eq(EVP_PKEY_get_raw_public_key(d->key, raw, &n), 1);
	b64url(raw, n, d->pub);
	SHA256(raw, n, md);
	for (int i = 0; i < 32; i++)
		sprintf(d->id + 2 * i, "%02x", md[i]);
}

static inline void dev_sign(const device_t *d, const char *msg, char *out)
{
	unsigned char sig[64];
	size_t n = sizeof(sig);
	EVP_MD_CTX *m = EVP_MD_CTX_new();
	cr_assert_eq(EVP_DigestSignInit(m, NULL, NULL, NULL, d->key), 1);
	cr_assert_eq(EVP_DigestSign(m, sig, &n, (const unsigned char *)msg, strlen(msg)), 1);
	EVP_MD_CTX_free(m);
	b64url(sig, n, out);
}

typedef struct dev_opts {
	bool v2;
	const char *id;       /* NULL: the key's */
	const char *nonce;    /* NULL: the challenge's */
	bool bad_sig;
	const char *token;    /* signed and sent as auth.token (NULL: GW_TOKEN) */
	const char *device_token; /* sent as auth.deviceToken (and signed when token is "") */
} dev_opts_t;

/* Connects with a device block; the answer. */
static inline cJSON *dev_connect(cl_t *c, const device_t *d, const dev_opts_t *o)
{
	cJSON *ch = cl_challenge(c);
	const char *nonce = o->nonce ? o->nonce : jstr(ch, "nonce");
	long long ts = (long long)jnum(ch, "ts");
	const char *token = o->token ? o->token : GW_TOKEN;
	const char *signed_token = *token ? token : o->device_token ? o->device_token : "";
	const char *id = o->id ? o->id : d->id;
	char msg[1024], sig[128];
	snprintf(msg, sizeof(msg), "%s|%s|test|test|operator|operator.read,operator.write|%lld|%s|%s%s", o->v2 ? "v2" : "v3",
		 id, ts, signed_token, nonce, o->v2 ? "" : "|linux|");
	dev_sign(d, msg, sig);
	if (o->bad_sig)
		sig[5] = sig[5] == 'A' ? 'B' : 'A';
	cJSON *p = connect_params(*token ? token : NULL, "[\"operator.read\",\"operator.write\"]");
	if (o->device_token) {
		cJSON *a = cJSON_GetObjectItem(p, "auth");
		if (!a)
			a = cJSON_AddObjectToObject(p, "auth");
		cJSON_AddStringToObject(a, "deviceToken", o->device_token);
	}
	cJSON *dv = cJSON_AddObjectToObject(p, "device");
	cJSON_AddStringToObject(dv, "id", id);
	cJSON_AddStringToObject(dv, "publicKey", d->pub);
	cJSON_AddStringToObject(dv, "signature", sig);
	cJSON_AddNumberToObject(dv, "signedAt", (double)ts);
	cJSON_AddStringToObject(dv, "nonce", nonce);
	cJSON_Delete(ch);
	return cl_call(c, "connect", p);
}

#endif
