/*
 * A node's proof that it knows the cluster's secret. The secret never goes
 * on the wire: the node answers the other's connect.challenge with an
 * HMAC of that connection's fresh nonce, so a proof seen once opens
 * nothing else. What travels after it is not encrypted (docs/cluster.md:
 * node-to-node traffic belongs on a private network).
 */
#include <stdio.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "gateway_internal.h"
#include "io/io.h"

int pc__gw_node_proof(const char *secret, const char *node, const char *nonce, char out[PC__GW_NODE_PROOF_MAX])
{
	char msg[PC_CLUSTER_NAME_MAX + 128];
	int n = snprintf(msg, sizeof(msg), "pincer-node\n%s\n%s", node, nonce);
	if (n < 0 || (size_t)n >= sizeof(msg))
		return PC_EINVAL;
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	if (!HMAC(EVP_sha256(), secret, (int)strlen(secret), (const unsigned char *)msg, (size_t)n, md, &mdlen) ||
	    mdlen != 32)
		return PC_ENOMEM;
	pc_base64url_encode(md, mdlen, out);
	return 0;
}

bool pc__gw_node_proof_ok(const char *secret, const char *node, const char *nonce, const char *proof)
{
	char want[PC__GW_NODE_PROOF_MAX];
	if (!secret || !node || !nonce || !proof || pc__gw_node_proof(secret, node, nonce, want) != 0)
		return false;
	size_t n = strlen(want);
	return strlen(proof) == n && CRYPTO_memcmp(want, proof, n) == 0;
}
