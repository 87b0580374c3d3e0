/*
 * --identity before the run (load.h): one connection signed with the
 * device, so that the gateway pairs it once (a loopback client with the
 * shared secret is paired at once, by Pincer's gateway and OpenClaw's)
 * rather than once per session, its device token is kept in the identity
 * file, and a gateway that waits for an operator's approval ends the run
 * with what to run instead of failing every turn.
 */
#include "load.h"

#include <string.h>

#include "commands.h"
#include "device_identity.h"
#include "rpc_client.h"

static const char *jstr(const cJSON *o, const char *k)
{
	const char *s = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, k));
	return s ? s : "";
}

/* The refusal in words on stderr. */
static void refused(const pc_load_opts_t *o, const cJSON *e)
{
	const cJSON *det = cJSON_GetObjectItemCaseSensitive(e, "details");
	const char *id = pc_cli_identity_id(o->identity), *rid = jstr(det, "requestId");
	if (strcmp(jstr(e, "code"), "NOT_PAIRED") != 0 && strcmp(jstr(det, "code"), "PAIRING_REQUIRED") != 0) {
		fprintf(stderr, PC_LOAD_CMD ": the gateway refused device %s: %s: %s\n", id, jstr(e, "code"),
			jstr(e, "message"));
		return;
	}
	fprintf(stderr,
		PC_LOAD_CMD ": the gateway has not paired device %s yet (%s). Approve it on the gateway's host,\n"
			    "then run again:\n"
			    "  openclaw devices approve %s    (OpenClaw's gateway)\n"
			    "  pincer devices approve %s      (Pincer's gateway)\n",
		id, jstr(e, "message"), rid[0] ? rid : "REQUEST_ID", rid[0] ? rid : "REQUEST_ID");
	if (!rid[0])
		fprintf(stderr, "(`openclaw devices list` / `pincer devices list` show the request id)\n");
}

int pc_load_identity_pair(const pc_load_opts_t *o)
{
	cJSON *refusal = NULL;
	pc_cli_rpc_options_t ro = {.host = o->host, .port = o->port, .path = o->path, .token = o->token,
				   .password = o->password, .identity = o->identity,
				   .timeout_ms = (int64_t)o->connect_timeout_ms, .refused = &refusal};
	pc_cli_rpc_t *c = NULL;
	char err[512];
	if (pc_cli_rpc_connect(&ro, &c, err, sizeof(err)) != 0) {
		if (!refusal)
			return PC_CLI_OK; /* no connection: the turns will say so */
		refused(o, refusal);
		cJSON_Delete(refusal);
		return PC_CLI_FAIL;
	}
	int rc = pc_cli_identity_keep(o->identity, pc_cli_rpc_hello(c), err, sizeof(err));
	pc_cli_rpc_free(c);
	if (rc != 0) {
		fprintf(stderr, PC_LOAD_CMD ": --identity %s\n", err);
		return PC_CLI_FAIL;
	}
	return PC_CLI_OK;
}
