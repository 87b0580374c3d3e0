/*
 * A device identity in its file (device_identity.h): OpenSSL's EVP
 * Ed25519 for the key, PEM (SPKI and PKCS#8, as Node's crypto writes
 * them) in the file, and the gateway's own signed string
 * (pc_gateway_device_payload), so what is signed here is what the
 * gateway checks.
 */
#include "device_identity.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/bio.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include "agents/gateway/gateway.h"
#include "io/io.h"
#include "runtime/clock.h"
#include "runtime/error.h"

/* OpenClaw reads at most this much of an identity file. */
#define MAX_FILE 131072
#define ROLE "operator"

struct pc_cli_identity {
	char *path, *gateway;
	cJSON *doc;     /* the file's object: written back whole */
	EVP_PKEY *key;
	char id[65];
	char pub[PC_BASE64URL_LEN(32) + 1]; /* the raw public key, base64url */
};

static const char *jstr(const cJSON *o, const char *k)
{
	return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, k));
}

/* "FILE: why" into err; rc. */
static int fail(int rc, char *err, size_t cap, const char *path, const char *why)
{
	snprintf(err, cap, "%s: %s", path, why);
	return rc;
}

#define NOT_ONE "not a device identity: "

/* ---- keys ---- */

/* An encrypted key is refused, not asked about on the terminal. */
static int no_passphrase(char *buf, int size, int rw, void *u)
{
	(void)buf;
	(void)size;
	(void)rw;
	(void)u;
	return -1;
}

static EVP_PKEY *pem_key(const char *pem, bool private)
{
	BIO *b = BIO_new_mem_buf(pem, -1);
	EVP_PKEY *k = !b      ? NULL
		      : private ? PEM_read_bio_PrivateKey(b, NULL, no_passphrase, NULL)
				: PEM_read_bio_PUBKEY(b, NULL, no_passphrase, NULL);
	BIO_free(b);
	if (k && EVP_PKEY_get_id(k) != EVP_PKEY_ED25519) {
		EVP_PKEY_free(k);
		k = NULL;
	}
	return k;
}

static bool raw_public(const EVP_PKEY *k, unsigned char raw[32])
{
	size_t n = 32;
	return EVP_PKEY_get_raw_public_key(k, raw, &n) == 1 && n == 32;
}

/* The key as PEM (its public half, or the private key), malloc'd. */
static char *key_pem(EVP_PKEY *k, bool private)
{
	BIO *b = BIO_new(BIO_s_mem());
	char *out = NULL, *data = NULL;
	int wrote = !b        ? 0
		    : private ? PEM_write_bio_PrivateKey(b, k, NULL, NULL, 0, NULL, NULL)
			      : PEM_write_bio_PUBKEY(b, k);
	if (wrote == 1) {
		long n = BIO_get_mem_data(b, &data);
		out = n > 0 ? malloc((size_t)n + 1) : NULL;
		if (out) {
			memcpy(out, data, (size_t)n);
			out[n] = '\0';
		}
	}
	BIO_free(b);
	return out;
}

/* The id and the base64url public key of id->key. */
static bool derive(pc_cli_identity_t *id)
{
	unsigned char raw[32];
	if (!raw_public(id->key, raw) || !pc_gateway_device_id(raw, id->id))
		return false;
	pc_base64url_encode(raw, sizeof(raw), id->pub);
	return true;
}

/* ---- the file ---- */

static int save(const pc_cli_identity_t *id, char *err, size_t cap)
{
	char *text = cJSON_Print(id->doc);
	if (!text)
		return fail(PC_ENOMEM, err, cap, id->path, "out of memory");
	size_t n = strlen(id->path) + 8;
	char *tmp = malloc(n);
	if (!tmp) {
		cJSON_free(text);
		return fail(PC_ENOMEM, err, cap, id->path, "out of memory");
	}
	snprintf(tmp, n, "%s.tmp", id->path);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	size_t len = strlen(text);
	bool ok = fd >= 0 && write(fd, text, len) == (ssize_t)len && write(fd, "\n", 1) == 1 && fsync(fd) == 0;
	int e = errno;
	if (fd >= 0 && close(fd) != 0 && ok) {
		ok = false;
		e = errno;
	}
	if (ok && rename(tmp, id->path) != 0) {
		ok = false;
		e = errno;
	}
	if (!ok && fd >= 0)
		(void)unlink(tmp);
	free(tmp);
	OPENSSL_cleanse(text, len); /* it holds the private key */
	cJSON_free(text);
	char why[160];
	snprintf(why, sizeof(why), "cannot write it: %s", strerror(e));
	return ok ? 0 : fail(PC_ESYS, err, cap, id->path, why);
}

static int generate(pc_cli_identity_t *id, char *err, size_t cap)
{
	id->key = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
	char *pub = id->key ? key_pem(id->key, false) : NULL;
	char *priv = pub ? key_pem(id->key, true) : NULL;
	id->doc = cJSON_CreateObject();
	bool ok = priv && derive(id) && id->doc && cJSON_AddNumberToObject(id->doc, "version", 1) &&
		  cJSON_AddStringToObject(id->doc, "deviceId", id->id) &&
		  cJSON_AddStringToObject(id->doc, "publicKeyPem", pub) &&
		  cJSON_AddStringToObject(id->doc, "privateKeyPem", priv) &&
		  cJSON_AddNumberToObject(id->doc, "createdAtMs", (double)pc__clock_wall_ms());
	if (priv)
		OPENSSL_cleanse(priv, strlen(priv));
	free(pub);
	free(priv);
	if (!ok)
		return fail(PC_ENOMEM, err, cap, id->path, "cannot make a key");
	return save(id, err, cap);
}

/* Reads the file into id->doc: 0, PC_ENOTFOUND when there is none. */
static int read_doc(pc_cli_identity_t *id, char *err, size_t cap)
{
	FILE *f = fopen(id->path, "re");
	if (!f)
		return errno == ENOENT ? PC_ENOTFOUND : fail(PC_ESYS, err, cap, id->path, strerror(errno));
	char *buf = malloc(MAX_FILE + 1);
	size_t n = buf ? fread(buf, 1, MAX_FILE + 1, f) : 0;
	bool bad = ferror(f);
	fclose(f);
	if (!buf)
		return fail(PC_ENOMEM, err, cap, id->path, "out of memory");
	int rc = 0;
	if (bad)
		rc = fail(PC_ESYS, err, cap, id->path, "cannot read it");
	else if (n > MAX_FILE)
		rc = fail(PC_EINVAL, err, cap, id->path, NOT_ONE "larger than 128 KiB");
	else if (!(id->doc = cJSON_ParseWithLength(buf, n)) || !cJSON_IsObject(id->doc))
		rc = fail(PC_EINVAL, err, cap, id->path, NOT_ONE "not a JSON object");
	free(buf);
	return rc;
}

/* Checks the file's key pair and id, as OpenClaw does before it uses one. */
static int load(pc_cli_identity_t *id, char *err, size_t cap)
{
	const char *dev = jstr(id->doc, "deviceId"), *pub = jstr(id->doc, "publicKeyPem");
	const char *priv = jstr(id->doc, "privateKeyPem");
	if (cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(id->doc, "version")) != 1 || !dev || !pub || !priv)
		return fail(PC_EINVAL, err, cap, id->path,
			    NOT_ONE "it needs version 1, deviceId, publicKeyPem and privateKeyPem");
	id->key = pem_key(priv, true);
	EVP_PKEY *pk = pem_key(pub, false);
	unsigned char a[32], b[32];
	bool pair = id->key && pk && raw_public(id->key, a) && raw_public(pk, b) && !memcmp(a, b, sizeof(a));
	EVP_PKEY_free(pk);
	if (!id->key || !pair)
		return fail(PC_EINVAL, err, cap, id->path,
			    !id->key ? NOT_ONE "privateKeyPem is no Ed25519 private key"
				     : NOT_ONE "publicKeyPem is not the private key's public key");
	if (!derive(id))
		return fail(PC_ENOMEM, err, cap, id->path, "cannot read the key");
	if (strcmp(dev, id->id) != 0)
		return fail(PC_EINVAL, err, cap, id->path, NOT_ONE "deviceId is not the SHA-256 of the public key");
	return 0;
}

int pc_cli_identity_open(const char *path, const char *gateway, pc_cli_identity_t **out, char *err, size_t cap)
{
	*out = NULL;
	pc_cli_identity_t *id = calloc(1, sizeof(*id));
	if (!id || !(id->path = strdup(path)) || !(id->gateway = strdup(gateway))) {
		pc_cli_identity_free(id);
		return fail(PC_ENOMEM, err, cap, path, "out of memory");
	}
	int rc = read_doc(id, err, cap);
	if (rc == PC_ENOTFOUND)
		rc = generate(id, err, cap);
	else if (rc == 0)
		rc = load(id, err, cap);
	if (rc != 0) {
		pc_cli_identity_free(id);
		return rc;
	}
	*out = id;
	return 0;
}

const char *pc_cli_identity_id(const pc_cli_identity_t *id) { return id->id; }

/* The token kept for this gateway, or NULL. */
static const cJSON *kept(const pc_cli_identity_t *id)
{
	const cJSON *t = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(id->doc, "tokens"), ROLE);
	const char *gw = jstr(t, "gateway");
	return jstr(t, "token") && gw && !strcmp(gw, id->gateway) ? t : NULL;
}

int pc_cli_identity_keep(pc_cli_identity_t *id, const cJSON *hello, char *err, size_t cap)
{
	const cJSON *auth = cJSON_GetObjectItemCaseSensitive(hello, "auth");
	const char *token = jstr(auth, "deviceToken");
	const char *role = jstr(auth, "role");
	const cJSON *old = kept(id);
	if (!token || !*token || (role && strcmp(role, ROLE) != 0) || (old && !strcmp(jstr(old, "token"), token)))
		return 0;
	cJSON *tokens = cJSON_GetObjectItemCaseSensitive(id->doc, "tokens");
	if (!cJSON_IsObject(tokens)) {
		cJSON_DeleteItemFromObjectCaseSensitive(id->doc, "tokens");
		tokens = cJSON_AddObjectToObject(id->doc, "tokens");
	}
	const cJSON *scopes = cJSON_GetObjectItemCaseSensitive(auth, "scopes");
	cJSON *t = cJSON_CreateObject();
	bool ok = tokens && t && cJSON_AddStringToObject(t, "token", token) &&
		  cJSON_AddStringToObject(t, "role", ROLE) &&
		  cJSON_AddItemToObject(t, "scopes",
					cJSON_IsArray(scopes) ? cJSON_Duplicate(scopes, true) : cJSON_CreateArray()) &&
		  cJSON_AddNumberToObject(t, "updatedAtMs", (double)pc__clock_wall_ms()) &&
		  cJSON_AddStringToObject(t, "gateway", id->gateway);
	cJSON_DeleteItemFromObjectCaseSensitive(tokens, ROLE);
	if (!ok || !cJSON_AddItemToObject(tokens, ROLE, t)) {
		cJSON_Delete(t);
		return fail(PC_ENOMEM, err, cap, id->path, "out of memory");
	}
	return save(id, err, cap);
}

/* ---- signing ---- */

static bool sign(const pc_cli_identity_t *id, const char *msg, char *out)
{
	unsigned char sig[64];
	size_t n = sizeof(sig);
	EVP_MD_CTX *m = EVP_MD_CTX_new();
	bool ok = m && EVP_DigestSignInit(m, NULL, NULL, NULL, id->key) == 1 &&
		  EVP_DigestSign(m, sig, &n, (const unsigned char *)msg, strlen(msg)) == 1 && n == sizeof(sig);
	EVP_MD_CTX_free(m);
	if (ok)
		pc_base64url_encode(sig, n, out);
	return ok;
}

static cJSON *default_scopes(void)
{
	const char *names[] = {"operator.read", "operator.write"};
	return cJSON_CreateStringArray(names, 2);
}

int pc_cli_identity_sign(const pc_cli_identity_t *id, cJSON *params, const cJSON *challenge)
{
	const char *nonce = jstr(challenge, "nonce");
	const cJSON *ts = cJSON_GetObjectItemCaseSensitive(challenge, "ts");
	if (!nonce || !*nonce)
		return PC_EINVAL;
	cJSON *auth = cJSON_GetObjectItemCaseSensitive(params, "auth");
	const cJSON *stored = kept(id);
	/* OpenClaw's client: a stored device token only when no shared
	 * secret is given, and then with the scopes it was issued for */
	bool use_stored = stored && !jstr(auth, "token") && !jstr(auth, "password");
	if (use_stored && !auth && !(auth = cJSON_AddObjectToObject(params, "auth")))
		return PC_ENOMEM;
	if (use_stored && !cJSON_AddStringToObject(auth, "deviceToken", jstr(stored, "token")))
		return PC_ENOMEM;
	if (!cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(params, "scopes"))) {
		const cJSON *ss = use_stored ? cJSON_GetObjectItemCaseSensitive(stored, "scopes") : NULL;
		cJSON *s = cJSON_GetArraySize(ss) > 0 ? cJSON_Duplicate(ss, true) : default_scopes();
		cJSON_DeleteItemFromObjectCaseSensitive(params, "scopes");
		if (!s || !cJSON_AddItemToObject(params, "scopes", s)) {
			cJSON_Delete(s);
			return PC_ENOMEM;
		}
	}
	const cJSON *client = cJSON_GetObjectItemCaseSensitive(params, "client");
	const char *role = jstr(params, "role"), *token = jstr(auth, "token");
	/* the challenge's time, as OpenClaw's client signs */
	double at = cJSON_IsNumber(ts) ? ts->valuedouble : (double)pc__clock_wall_ms();
	pc_gateway_device_claim_t c = {
		.device_id = id->id,
		.client_id = jstr(client, "id"),
		.client_mode = jstr(client, "mode"),
		.role = role ? role : ROLE,
		.scopes = cJSON_GetObjectItemCaseSensitive(params, "scopes"),
		.signed_at = at,
		.token = token ? token : jstr(auth, "deviceToken"),
		.nonce = nonce,
		.platform = jstr(client, "platform"),
		.family = jstr(client, "deviceFamily"),
	};
	char *msg = pc_gateway_device_payload(&c, true);
	char sig[PC_BASE64URL_LEN(64) + 1];
	bool ok = msg && sign(id, msg, sig);
	free(msg);
	cJSON *d = ok ? cJSON_AddObjectToObject(params, "device") : NULL;
	ok = d && cJSON_AddStringToObject(d, "id", id->id) && cJSON_AddStringToObject(d, "publicKey", id->pub) &&
	     cJSON_AddStringToObject(d, "signature", sig) && cJSON_AddNumberToObject(d, "signedAt", at) &&
	     cJSON_AddStringToObject(d, "nonce", nonce);
	return ok ? 0 : PC_ENOMEM;
}

void pc_cli_identity_free(pc_cli_identity_t *id)
{
	if (!id)
		return;
	EVP_PKEY_free(id->key);
	cJSON_Delete(id->doc);
	free(id->path);
	free(id->gateway);
	free(id);
}
