/*
 * A device identity for the gateway's `connect` (docs/gateway.md, "Device
 * identity"; docs/load.md, --identity): an Ed25519 key kept in a file, in
 * the shape OpenClaw's CLI kept its own in (identity/device.json, which
 * `openclaw doctor` still imports):
 *
 *   {"version":1, "deviceId":"<hex SHA-256 of the raw public key>",
 *    "publicKeyPem":"-----BEGIN PUBLIC KEY-----…", "privateKeyPem":"-----BEGIN PRIVATE KEY-----…",
 *    "createdAtMs":…,
 *    "tokens":{"operator":{"token":"…","role":"operator","scopes":[…],"updatedAtMs":…,"gateway":"ws://…"}}}
 *
 * `tokens` holds the device token a gateway gave in hello-ok, as
 * OpenClaw's identity/device-auth.json did, with the gateway it is for.
 * The file is created with mode 0600 and rewritten whole (a temporary
 * file, then rename); keys this code does not know are kept.
 *
 * Threads: pc_cli_identity_sign from any number at once; the others from
 * one, not while signing goes on.
 */
#ifndef PC_AGENTS_CLI_DEVICE_IDENTITY_H
#define PC_AGENTS_CLI_DEVICE_IDENTITY_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

typedef struct pc_cli_identity pc_cli_identity_t;

/* Loads FILE, or generates a new identity into it when it does not exist,
 * for use against `gateway` (its URL: the device token kept is that
 * gateway's). PC_EINVAL for a file that is not an identity, PC_ESYS when
 * it cannot be read or written, with the reason in *err for the user. The
 * caller owns *out (pc_cli_identity_free). */
int pc_cli_identity_open(const char *path, const char *gateway, pc_cli_identity_t **out, char *err, size_t cap);

/* Its device id (64 lower-case hex digits). */
const char *pc_cli_identity_id(const pc_cli_identity_t *id);

/* Completes `connect` params for the challenge's payload ({nonce, ts}) as
 * OpenClaw's client does: without auth.token or auth.password, the device
 * token kept for this gateway goes as auth.deviceToken (and its scopes
 * are asked for); scopes, when none are set, are operator.read and
 * operator.write; then the `device` block, signed (v3) over the params as
 * they now are. PC_ENOMEM, or PC_EINVAL for a challenge without a nonce. */
int pc_cli_identity_sign(const pc_cli_identity_t *id, cJSON *params, const cJSON *challenge);

/* Keeps the device token of a hello-ok payload (auth.deviceToken, with
 * its role and scopes) in the file when it is new for this gateway.
 * 0 (also when there is none), or PC_ESYS / PC_ENOMEM with *err. */
int pc_cli_identity_keep(pc_cli_identity_t *id, const cJSON *hello, char *err, size_t cap);

/* NULL is a no-op. */
void pc_cli_identity_free(pc_cli_identity_t *id);

#endif
