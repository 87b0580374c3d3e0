/*
 * Paired devices and pairing requests (docs/gateway.md, "Device
 * identity"): the table of devices holding a device token, kept in the
 * store so that a restart keeps them (the token as its SHA-256 only); the
 * pending requests of devices that connected from elsewhere and wait for
 * an operator (in memory: at most PC__GW_PENDING_MAX, each for
 * PC__GW_PENDING_TTL_MS, one per device); and the methods an operator
 * uses on them, under OpenClaw's names: device.pair.list, .approve,
 * .reject, .remove, device.token.rotate and device.token.revoke.
 *
 * Everything here is under ws->lock. Store writes are built under it and
 * sent without waiting for the commit. One connection's writes reach the
 * store in the order it made them, but two connections' writes may cross:
 * so a change to a known device only updates its row, and an unpairing's
 * delete that overtakes it is not undone. What can still cross is a new
 * pairing and a delete of that same device sent at the same instant (two
 * operators racing each other): the store then keeps the earlier state.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include "io/io.h"
#include "rpc_internal.h"
#include "runtime/clock.h"

/* ---- scopes as text (the store's form) ---- */

static void scopes_text(uint32_t bits, char *out, size_t cap)
{
	size_t off = 0;
	out[0] = '\0';
	for (int i = 0; i < PC__GW_SCOPE_COUNT; i++)
		if (bits & (1u << i) && off < cap)
			off += (size_t)snprintf(out + off, cap - off, "%s%s", off ? "," : "", pc__gw_scope_name(i));
}

static uint32_t scopes_of_text(const char *text)
{
	uint32_t bits = 0;
	char name[64];
	while (text && *text) {
		size_t n = strcspn(text, ",");
		snprintf(name, sizeof(name), "%.*s", (int)(n < sizeof(name) ? n : sizeof(name) - 1), text);
		bits |= pc__gw_scope_bit(name);
		text += n + (text[n] == ',');
	}
	return bits;
}

static cJSON *scopes_json(uint32_t bits)
{
	cJSON *a = cJSON_CreateArray();
	for (int i = 0; a && i < PC__GW_SCOPE_COUNT; i++)
		if (bits & (1u << i))
			cJSON_AddItemToArray(a, cJSON_CreateString(pc__gw_scope_name(i)));
	return a;
}

/* ---- the store ---- */

static pc_store_t *store_of(struct pc__gw_ws *ws) { return pc_agent_store(ws->g->agent); }

/* Sends `req` (built, or NULL when building failed: nothing to send) to
 * the store, committed at once. The answer is not awaited: a write that
 * fails shows in the store's health, and the table in memory still
 * holds. */
static void store_send(struct pc__gw_ws *ws, pc_msg_t *req)
{
	if (!req)
		return;
	pc_store_req_urgent(req);
	(void)pc_send(pc_store_actor(store_of(ws)), req);
}

static void store_delete(struct pc__gw_ws *ws, const char *id)
{
	pc_msg_t *req = NULL;
	(void)pc_store_req_device_delete(id, &req);
	store_send(ws, req);
}

/* Writes d's row: a new device's, or (`known`) a change to one the store
 * has, which a racing unpairing's delete must not see undone. */
static void persist(struct pc__gw_ws *ws, const pc__gw_device_t *d, bool known)
{
	char hash[2 * sizeof(d->token_hash) + 1], scopes[256];
	for (size_t i = 0; i < sizeof(d->token_hash); i++)
		snprintf(hash + 2 * i, 3, "%02x", d->token_hash[i]);
	scopes_text(d->scopes, scopes, sizeof(scopes));
	pc_store_device_t sd = {.id = d->id, .public_key = d->public_key, .token_hash = hash, .scopes = scopes,
				.approved_ms = d->approved_ms, .issued_ms = d->issued_ms, .update_only = known};
	pc_msg_t *req = NULL;
	(void)pc_store_req_device_put(&sd, &req);
	store_send(ws, req);
}

static bool hash_of_hex(const char *hex, unsigned char out[32])
{
	if (!hex || strlen(hex) != 64)
		return false;
	for (size_t i = 0; i < 32; i++) {
		unsigned v;
		if (sscanf(hex + 2 * i, "%2x", &v) != 1)
			return false;
		out[i] = (unsigned char)v;
	}
	return true;
}

int pc__gw_devices_load(struct pc__gw_ws *ws)
{
	pc_store_devices_t *l = NULL;
	int rc = pc_store_devices(store_of(ws), &l);
	if (rc != 0)
		return rc;
	size_t n = pc_store_devices_count(l);
	ws->devices = n ? calloc(n, sizeof(*ws->devices)) : NULL;
	if (n && !ws->devices) {
		pc_store_devices_free(l);
		return PC_ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		pc_store_device_t sd;
		pc_store_devices_get(l, i, &sd);
		pc__gw_device_t *d = &ws->devices[ws->ndevices];
		/* a row this gateway cannot use (written by hand) is left out */
		if (strlen(sd.id) >= sizeof(d->id) || strlen(sd.public_key) >= sizeof(d->public_key) ||
		    !hash_of_hex(sd.token_hash, d->token_hash))
			continue;
		snprintf(d->id, sizeof(d->id), "%s", sd.id);
		snprintf(d->public_key, sizeof(d->public_key), "%s", sd.public_key);
		d->scopes = scopes_of_text(sd.scopes);
		d->approved_ms = sd.approved_ms;
		d->issued_ms = sd.issued_ms;
		ws->ndevices++;
	}
	pc_store_devices_free(l);
	return 0;
}

void pc__gw_devices_free(struct pc__gw_ws *ws)
{
	/* Tokens are secrets: wipe them before the memory goes back. */
	if (ws->devices)
		OPENSSL_cleanse(ws->devices, ws->ndevices * sizeof(*ws->devices));
	free(ws->devices);
	ws->devices = NULL;
	ws->ndevices = 0;
}

/* ---- the paired devices ---- */

static pc__gw_device_t *device_find(struct pc__gw_ws *ws, const char *id)
{
	for (size_t i = 0; i < ws->ndevices; i++)
		if (!strcmp(ws->devices[i].id, id))
			return &ws->devices[i];
	return NULL;
}

/* A free entry: a new one, or (full) the one whose token is oldest: that
 * device pairs again. Its id is "" until filled. */
static pc__gw_device_t *device_slot(struct pc__gw_ws *ws)
{
	if (ws->ndevices == PC__GW_DEVICES_MAX) {
		size_t oldest = 0;
		for (size_t i = 1; i < ws->ndevices; i++)
			if (ws->devices[i].issued_ms < ws->devices[oldest].issued_ms)
				oldest = i;
		store_delete(ws, ws->devices[oldest].id);
		memset(&ws->devices[oldest], 0, sizeof(ws->devices[oldest]));
		return &ws->devices[oldest];
	}
	pc__gw_device_t *v = realloc(ws->devices, (ws->ndevices + 1) * sizeof(*v));
	if (!v)
		return NULL;
	ws->devices = v;
	memset(&v[ws->ndevices], 0, sizeof(*v));
	return &v[ws->ndevices++];
}

static void device_drop(struct pc__gw_ws *ws, pc__gw_device_t *d)
{
	store_delete(ws, d->id);
	OPENSSL_cleanse(d, sizeof(*d));
	*d = ws->devices[--ws->ndevices];
}

/* A new random token for d (PC_ESYS when no randomness). */
static int issue_token(pc__gw_device_t *d)
{
	unsigned char r[32];
	if (RAND_bytes(r, sizeof(r)) != 1)
		return PC_ESYS;
	pc_base64url_encode(r, sizeof(r), d->token);
	OPENSSL_cleanse(r, sizeof(r));
	if (!SHA256((const unsigned char *)d->token, strlen(d->token), d->token_hash))
		return PC_ESYS;
	d->issued_ms = pc__clock_wall_ms();
	return 0;
}

/* Pairs, under the lock: see pc__gw_device_pair. The entry is filled
 * aside and copied in, so a failure changes nothing. */
static int device_pair_locked(struct pc__gw_ws *ws, const char *id, const char *public_key, uint32_t scopes,
			      bool allow_new, pc__gw_device_t **out)
{
	pc__gw_device_t *d = device_find(ws, id);
	if (!d && !allow_new)
		return PC_ENOTFOUND;
	pc__gw_device_t nd = d ? *d : (pc__gw_device_t){0};
	int rc = !d || !nd.token[0] ? issue_token(&nd) : 0;
	if (rc == 0 && !d) {
		snprintf(nd.id, sizeof(nd.id), "%s", id);
		snprintf(nd.public_key, sizeof(nd.public_key), "%s", public_key);
		nd.approved_ms = nd.issued_ms;
		if (!(d = device_slot(ws)))
			rc = PC_ENOMEM;
	}
	if (rc == 0) {
		nd.scopes = scopes;
		bool known = d->id[0] != '\0';
		*d = nd;
		persist(ws, d, known);
		*out = d;
	}
	OPENSSL_cleanse(&nd, sizeof(nd));
	return rc;
}

int pc__gw_device_pair(struct pc__gw_ws *ws, const char *id, const char *public_key, uint32_t scopes,
		       bool allow_new, pc__gw_auth_t *out)
{
	pthread_mutex_lock(&ws->lock);
	pc__gw_device_t *d = NULL;
	int rc = device_pair_locked(ws, id, public_key, scopes, allow_new, &d);
	if (rc == 0) {
		memcpy(out->device_token, d->token, sizeof(out->device_token));
		out->issued_ms = d->issued_ms;
	}
	pthread_mutex_unlock(&ws->lock);
	return rc;
}

bool pc__gw_device_token_ok(struct pc__gw_ws *ws, const char *id, const char *token, uint32_t *scopes,
			    int64_t *issued)
{
	unsigned char h[SHA256_DIGEST_LENGTH];
	if (!SHA256((const unsigned char *)token, strlen(token), h))
		return false;
	pthread_mutex_lock(&ws->lock);
	pc__gw_device_t *d = device_find(ws, id);
	bool ok = d && CRYPTO_memcmp(h, d->token_hash, sizeof(h)) == 0;
	if (ok) {
		*scopes = d->scopes;
		*issued = d->issued_ms;
	}
	pthread_mutex_unlock(&ws->lock);
	return ok;
}

/* ---- pending requests ---- */

static void pending_expire(struct pc__gw_ws *ws, int64_t now)
{
	for (size_t i = 0; i < ws->npending;) {
		if (now - ws->pending[i].ts >= PC__GW_PENDING_TTL_MS)
			ws->pending[i] = ws->pending[--ws->npending];
		else
			i++;
	}
}

static pc__gw_pairing_t *pending_find(struct pc__gw_ws *ws, const char *request_id, const char *device_id)
{
	for (size_t i = 0; i < ws->npending; i++)
		if ((request_id && !strcmp(ws->pending[i].request_id, request_id)) ||
		    (device_id && !strcmp(ws->pending[i].device_id, device_id)))
			return &ws->pending[i];
	return NULL;
}

static void pending_remove(struct pc__gw_ws *ws, pc__gw_pairing_t *p)
{
	*p = ws->pending[--ws->npending];
}

/* A random version-4 UUID. */
static int new_request_id(char out[PC__GW_REQUEST_ID_MAX])
{
	unsigned char r[16];
	if (RAND_bytes(r, sizeof(r)) != 1)
		return PC_ESYS;
	r[6] = (unsigned char)((r[6] & 0x0f) | 0x40);
	r[8] = (unsigned char)((r[8] & 0x3f) | 0x80);
	size_t off = 0;
	for (size_t i = 0; i < sizeof(r); i++)
		off += (size_t)snprintf(out + off, PC__GW_REQUEST_ID_MAX - off, "%s%02x",
					i == 4 || i == 6 || i == 8 || i == 10 ? "-" : "", r[i]);
	return 0;
}

int pc__gw_pairing_request(struct pc__gw_ws *ws, pc__gw_pairing_t *r)
{
	int rc = 0;
	int64_t now = pc__clock_wall_ms();
	r->ts = now;
	pthread_mutex_lock(&ws->lock);
	pending_expire(ws, now);
	pc__gw_pairing_t *p = pending_find(ws, NULL, r->device_id);
	if (p) {
		/* the same device again: its request, with what it asks now */
		memcpy(r->request_id, p->request_id, sizeof(r->request_id));
	} else {
		rc = new_request_id(r->request_id);
		if (rc == 0 && ws->npending == PC__GW_PENDING_MAX) {
			/* full: the oldest request goes (its device asks again) */
			p = &ws->pending[0];
			for (size_t i = 1; i < ws->npending; i++)
				if (ws->pending[i].ts < p->ts)
					p = &ws->pending[i];
		} else if (rc == 0) {
			p = &ws->pending[ws->npending++];
		}
	}
	if (p)
		*p = *r;
	pthread_mutex_unlock(&ws->lock);
	return rc;
}

/* ---- the methods ---- */

const pc__gw_param_t pc__gw_pair_request_spec[1] = {{"requestId", PC__GW_T_NESTR, true}};
const pc__gw_param_t pc__gw_pair_device_spec[1] = {{"deviceId", PC__GW_T_NESTR, true}};
const pc__gw_param_t pc__gw_token_revoke_spec[2] = {{"deviceId", PC__GW_T_NESTR, true},
						      {"role", PC__GW_T_NESTR, true}};
const pc__gw_param_t pc__gw_token_rotate_spec[3] = {{"deviceId", PC__GW_T_NESTR, true},
						      {"role", PC__GW_T_NESTR, true},
						      {"scopes", PC__GW_T_ARRAY, false}};

static void add_str_if(cJSON *o, const char *k, const char *v)
{
	if (v && *v)
		cJSON_AddStringToObject(o, k, v);
}

static cJSON *pending_json(const pc__gw_pairing_t *p)
{
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "requestId", p->request_id);
	cJSON_AddStringToObject(o, "deviceId", p->device_id);
	cJSON_AddStringToObject(o, "publicKey", p->public_key);
	add_str_if(o, "platform", p->platform);
	add_str_if(o, "deviceFamily", p->family);
	add_str_if(o, "clientId", p->client_id);
	add_str_if(o, "clientMode", p->client_mode);
	cJSON_AddStringToObject(o, "role", "operator");
	cJSON *roles = cJSON_AddArrayToObject(o, "roles");
	cJSON_AddItemToArray(roles, cJSON_CreateString("operator"));
	cJSON_AddItemToObject(o, "scopes", scopes_json(p->scopes));
	add_str_if(o, "remoteIp", p->remote_ip);
	cJSON_AddNumberToObject(o, "ts", (double)p->ts);
	return o;
}

/* A paired device as operators see it: no token, its summary instead. */
static cJSON *paired_json(const pc__gw_device_t *d)
{
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "deviceId", d->id);
	cJSON_AddStringToObject(o, "publicKey", d->public_key);
	cJSON_AddStringToObject(o, "role", "operator");
	cJSON *roles = cJSON_AddArrayToObject(o, "roles");
	cJSON_AddItemToArray(roles, cJSON_CreateString("operator"));
	cJSON_AddItemToObject(o, "scopes", scopes_json(d->scopes));
	cJSON *tokens = cJSON_AddArrayToObject(o, "tokens");
	cJSON *t = cJSON_CreateObject();
	cJSON_AddStringToObject(t, "role", "operator");
	cJSON_AddItemToObject(t, "scopes", scopes_json(d->scopes));
	cJSON_AddNumberToObject(t, "createdAtMs", (double)d->issued_ms);
	cJSON_AddItemToArray(tokens, t);
	cJSON_AddNumberToObject(o, "createdAtMs", (double)d->approved_ms);
	cJSON_AddNumberToObject(o, "approvedAtMs", (double)d->approved_ms);
	return o;
}

void pc__gw_m_device_pair_list(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *id, const cJSON *params)
{
	(void)ctx;
	(void)params;
	struct pc__gw_ws *ws = c->ws;
	cJSON *p = cJSON_CreateObject();
	cJSON *pending = cJSON_AddArrayToObject(p, "pending");
	cJSON *paired = cJSON_AddArrayToObject(p, "paired");
	pthread_mutex_lock(&ws->lock);
	pending_expire(ws, pc__clock_wall_ms());
	for (size_t i = 0; i < ws->npending; i++)
		cJSON_AddItemToArray(pending, pending_json(&ws->pending[i]));
	for (size_t i = 0; i < ws->ndevices; i++)
		cJSON_AddItemToArray(paired, paired_json(&ws->devices[i]));
	pthread_mutex_unlock(&ws->lock);
	pc__gw_reply_ok(c, id, p);
}

static void unknown(pc__gw_conn_t *c, const char *id, const char *what)
{
	pc__gw_reply_error(c, id, "INVALID_REQUEST", what, NULL, NULL, false);
}

void pc__gw_m_device_pair_approve(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *id, const cJSON *params)
{
	(void)ctx;
	struct pc__gw_ws *ws = c->ws;
	const char *rid = pc__gw_str(params, "requestId");
	pthread_mutex_lock(&ws->lock);
	pending_expire(ws, pc__clock_wall_ms());
	pc__gw_pairing_t *p = pending_find(ws, rid, NULL);
	pc__gw_device_t *d = NULL;
	int rc = p ? device_pair_locked(ws, p->device_id, p->public_key, p->scopes, true, &d) : PC_ENOTFOUND;
	cJSON *dev = rc == 0 ? paired_json(d) : NULL;
	if (rc == 0)
		pending_remove(ws, p);
	pthread_mutex_unlock(&ws->lock);
	if (rc == PC_ENOTFOUND) {
		unknown(c, id, "unknown requestId");
		return;
	}
	if (rc != 0) {
		pc__gw_reply_error(c, id, "UNAVAILABLE", "the device token could not be issued", NULL, NULL, true);
		return;
	}
	cJSON *res = cJSON_CreateObject();
	cJSON_AddStringToObject(res, "requestId", rid);
	cJSON_AddItemToObject(res, "device", dev);
	pc__gw_reply_ok(c, id, res);
}

void pc__gw_m_device_pair_reject(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *id, const cJSON *params)
{
	(void)ctx;
	struct pc__gw_ws *ws = c->ws;
	const char *rid = pc__gw_str(params, "requestId");
	char device_id[65] = "";
	pthread_mutex_lock(&ws->lock);
	pending_expire(ws, pc__clock_wall_ms());
	pc__gw_pairing_t *p = pending_find(ws, rid, NULL);
	if (p) {
		memcpy(device_id, p->device_id, sizeof(device_id));
		pending_remove(ws, p);
	}
	pthread_mutex_unlock(&ws->lock);
	if (!device_id[0]) {
		unknown(c, id, "unknown requestId");
		return;
	}
	cJSON *res = cJSON_CreateObject();
	cJSON_AddStringToObject(res, "requestId", rid);
	cJSON_AddStringToObject(res, "deviceId", device_id);
	pc__gw_reply_ok(c, id, res);
}

/* Closes the connections device `device_id` has open (under the lock). A
 * signal that cannot be allocated leaves that connection open until it
 * ends; the token it used works no more either way. */
static void close_device_conns(struct pc__gw_ws *ws, const char *device_id)
{
	for (pc__gw_conn_t *c = ws->conns; c; c = c->next)
		if (!strcmp(c->device_id, device_id))
			(void)pc_send_signal(c->self, PC__GW_MSG_UNPAIRED);
}

/* Forgets device `device_id` (its token, its row in the store and any
 * request it has pending) and closes the connections it has open: true
 * when it was paired. */
static bool unpair(struct pc__gw_ws *ws, const char *device_id)
{
	pthread_mutex_lock(&ws->lock);
	pc__gw_device_t *d = device_find(ws, device_id);
	bool paired = d != NULL;
	if (d)
		device_drop(ws, d);
	pc__gw_pairing_t *p = pending_find(ws, NULL, device_id);
	if (p)
		pending_remove(ws, p);
	if (paired)
		close_device_conns(ws, device_id);
	pthread_mutex_unlock(&ws->lock);
	return paired;
}

void pc__gw_m_device_pair_remove(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *id, const cJSON *params)
{
	(void)ctx;
	const char *dev = pc__gw_str(params, "deviceId");
	if (!unpair(c->ws, dev)) {
		unknown(c, id, "unknown deviceId");
		return;
	}
	cJSON *res = cJSON_CreateObject();
	cJSON_AddStringToObject(res, "deviceId", dev);
	pc__gw_reply_ok(c, id, res);
}

/* Devices hold one token, the operator role's: revoking it unpairs the
 * device, which must be approved again. */
void pc__gw_m_device_token_revoke(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *id, const cJSON *params)
{
	(void)ctx;
	const char *dev = pc__gw_str(params, "deviceId");
	const char *role = pc__gw_str(params, "role");
	if (strcmp(role, "operator") != 0 || !unpair(c->ws, dev)) {
		pc__gw_reply_error(c, id, "INVALID_REQUEST", "device token revocation denied", NULL, NULL, false);
		return;
	}
	cJSON *res = cJSON_CreateObject();
	cJSON_AddStringToObject(res, "deviceId", dev);
	cJSON_AddStringToObject(res, "role", role);
	cJSON_AddNumberToObject(res, "revokedAtMs", (double)pc__clock_wall_ms());
	pc__gw_reply_ok(c, id, res);
}

/* True when `granted` satisfies every scope of `want` (admin all of them,
 * write read too). */
static bool scopes_within(uint32_t granted, uint32_t want)
{
	for (int i = 0; i < PC__GW_SCOPE_COUNT; i++)
		if ((want & (1u << i)) && !pc__gw_scope_has(granted, 1u << i))
			return false;
	return true;
}

/* The scopes a rotation asks for: the device's own when `asked` is
 * absent, else those named (an unknown name: UINT32_MAX, never granted). */
static uint32_t rotate_scopes(const cJSON *asked, uint32_t current)
{
	if (!asked)
		return current;
	uint32_t bits = 0;
	const cJSON *s;
	cJSON_ArrayForEach(s, asked) {
		uint32_t b = pc__gw_scope_bit(cJSON_GetStringValue(s));
		if (!b)
			return UINT32_MAX;
		bits |= b;
	}
	return bits;
}

/* A new token for the device, within the scopes it was approved for (and,
 * for a caller without operator.admin, within the caller's). The old token
 * stops working and the device's connections close. Only the device
 * itself hears the new token; anyone else learns that it changed. */
void pc__gw_m_device_token_rotate(pc_ctx_t *ctx, pc__gw_conn_t *c, const char *id, const cJSON *params)
{
	(void)ctx;
	struct pc__gw_ws *ws = c->ws;
	const char *dev = pc__gw_str(params, "deviceId");
	const char *role = pc__gw_str(params, "role");
	bool self = !strcmp(c->device_id, dev);
	pthread_mutex_lock(&ws->lock);
	pc__gw_device_t *d = device_find(ws, dev);
	uint32_t want = d ? rotate_scopes(cJSON_GetObjectItemCaseSensitive(params, "scopes"), d->scopes) : 0;
	bool allowed = d && !strcmp(role, "operator") && want != UINT32_MAX && scopes_within(d->scopes, want) &&
		       scopes_within(c->scopes, want);
	pc__gw_device_t nd = allowed ? *d : (pc__gw_device_t){0};
	int rc = allowed ? issue_token(&nd) : PC_EPERM;
	if (rc == 0) {
		nd.scopes = want;
		*d = nd;
		persist(ws, d, true);
		close_device_conns(ws, dev);
	}
	pthread_mutex_unlock(&ws->lock);
	if (rc != 0) {
		OPENSSL_cleanse(&nd, sizeof(nd));
		pc__gw_reply_error(c, id, "INVALID_REQUEST", "device token rotation denied", NULL, NULL, false);
		return;
	}
	cJSON *res = cJSON_CreateObject();
	cJSON_AddStringToObject(res, "deviceId", dev);
	cJSON_AddStringToObject(res, "role", role);
	if (self)
		cJSON_AddStringToObject(res, "token", nd.token);
	cJSON_AddItemToObject(res, "scopes", scopes_json(want));
	cJSON_AddNumberToObject(res, "rotatedAtMs", (double)nd.issued_ms);
	cJSON_AddStringToObject(res, "tokenDelivery", self ? "in-band" : "withheld-cross-device");
	OPENSSL_cleanse(&nd, sizeof(nd));
	pc__gw_reply_ok(c, id, res);
}
