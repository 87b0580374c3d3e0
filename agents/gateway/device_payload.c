/*
 * The string a device signs in `connect` and its id (gateway.h, docs/
 * gateway.md "Device identity"), as OpenClaw's client builds them
 * (buildDeviceAuthPayloadV3): the gateway checks them (device_auth.c) and
 * `pincer load --identity` signs them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <openssl/sha.h>

#include "gateway.h"

/* Lower-case ASCII, trimmed: how v3 normalises platform and family. */
static void norm_meta(const char *in, char *out, size_t cap)
{
	size_t n = 0;
	if (in) {
		while (*in == ' ' || *in == '\t' || *in == '\n' || *in == '\r')
			in++;
		size_t len = strlen(in);
		while (len > 0 && (in[len - 1] == ' ' || in[len - 1] == '\t' || in[len - 1] == '\n' ||
				   in[len - 1] == '\r'))
			len--;
		for (size_t i = 0; i < len && n + 1 < cap; i++)
			out[n++] = in[i] >= 'A' && in[i] <= 'Z' ? (char)(in[i] + 32) : in[i];
	}
	out[n] = '\0';
}

static const char *or_empty(const char *s) { return s ? s : ""; }

char *pc_gateway_device_payload(const pc_gateway_device_claim_t *c, bool v3)
{
	size_t scopes_len = 1;
	const cJSON *s;
	cJSON_ArrayForEach(s, c->scopes) scopes_len += strlen(or_empty(cJSON_GetStringValue(s))) + 1;
	char *scopes = malloc(scopes_len);
	if (!scopes)
		return NULL;
	scopes[0] = '\0';
	size_t off = 0;
	cJSON_ArrayForEach(s, c->scopes) {
		off += (size_t)snprintf(scopes + off, scopes_len - off, "%s%s", off ? "," : "",
					 or_empty(cJSON_GetStringValue(s)));
	}
	char platform[128], family[128], at[32];
	norm_meta(c->platform, platform, sizeof(platform));
	norm_meta(c->family, family, sizeof(family));
	snprintf(at, sizeof(at), "%.0f", c->signed_at);
	const char *parts[] = {v3 ? "v3" : "v2", or_empty(c->device_id), or_empty(c->client_id),
			       or_empty(c->client_mode), or_empty(c->role), scopes, at, or_empty(c->token),
			       or_empty(c->nonce), platform, family};
	size_t nparts = v3 ? 11 : 9;
	size_t len = 1;
	for (size_t i = 0; i < nparts; i++)
		len += strlen(parts[i]) + 1;
	char *out = malloc(len);
	if (out) {
		off = 0;
		for (size_t i = 0; i < nparts; i++)
			off += (size_t)snprintf(out + off, len - off, "%s%s", i ? "|" : "", parts[i]);
	}
	free(scopes);
	return out;
}

bool pc_gateway_device_id(const unsigned char key[32], char out[65])
{
	unsigned char md[SHA256_DIGEST_LENGTH];
	if (!SHA256(key, 32, md))
		return false;
	for (size_t i = 0; i < sizeof(md); i++)
		snprintf(out + 2 * i, 3, "%02x", md[i]);
	return true;
}
