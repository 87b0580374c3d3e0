/*
 * Providers' classes and model references: which class (cloud,
 * self-hosted, local) a provider is from its id and base URL, and the
 * model idle time that follows (§9.1); "provider/model" references split
 * and resolved against the configured providers, with their context
 * windows.
 */
#include "config.h"
#include "config_internal.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- provider classes (§9.1 "Model idle") ---- */

/* The host of an http(s) URL, lowercased, without brackets, port or
 * user info. False when the URL has no host. */
bool pc__config_url_host(const char *url, char *host, size_t cap)
{
	const char *s = strstr(url, "://");
	if (!s)
		return false;
	s += 3;
	size_t auth = strcspn(s, "/?#");
	const char *at_sign = NULL;
	for (size_t i = 0; i < auth; i++)
		if (s[i] == '@')
			at_sign = s + i;
	if (at_sign) {
		auth -= (size_t)(at_sign + 1 - s);
		s = at_sign + 1;
	}
	size_t n;
	if (auth && s[0] == '[') {
		const char *close = memchr(s, ']', auth);
		if (!close)
			return false;
		s++;
		n = (size_t)(close - s);
	} else {
		const char *colon = memchr(s, ':', auth);
		n = colon ? (size_t)(colon - s) : auth;
	}
	if (n == 0 || n >= cap)
		return false;
	for (size_t i = 0; i < n; i++)
		host[i] = (char)((s[i] >= 'A' && s[i] <= 'Z') ? s[i] - 'A' + 'a' : s[i]);
	host[n] = 0;
	if (n > 1 && host[n - 1] == '.') /* "localhost." is localhost */
		host[n - 1] = 0;
	return true;
}

static bool ipv4_local(const unsigned char *b)
{
	return b[0] == 127 || b[0] == 10 || (b[0] == 172 && (b[1] & 0xF0) == 16) ||
	       (b[0] == 192 && b[1] == 168) || (b[0] == 100 && (b[1] & 0xC0) == 64) ||
	       (b[0] == 0 && b[1] == 0 && b[2] == 0 && b[3] == 0);
}

/* Literal addresses only (inet_pton): a name is never resolved, so loading
 * a config does no DNS and cannot hang. */
static bool host_is_local(const char *host)
{
	static const unsigned char zero[16], loop6[16] = {[15] = 1};
	static const unsigned char mapped[12] = {[10] = 0xFF, [11] = 0xFF};
	unsigned char b[16];
	size_t n = strlen(host);
	if (strcmp(host, "localhost") == 0 || (n > 6 && strcmp(host + n - 6, ".local") == 0))
		return true;
	if (inet_pton(AF_INET, host, b) == 1)
		return ipv4_local(b);
	if (inet_pton(AF_INET6, host, b) == 1) {
		if (memcmp(b, loop6, 16) == 0 || memcmp(b, zero, 16) == 0)
			return true;
		if ((b[0] & 0xFE) == 0xFC || (b[0] == 0xFE && (b[1] & 0xC0) == 0x80))
			return true;
		if (memcmp(b, mapped, 12) == 0)
			return ipv4_local(b + 12);
	}
	return false;
}

static bool id_is_self_hosted(const char *id)
{
	static const char *const ids[] = {"ollama", "lmstudio", "vllm", "sglang", "llama-cpp"};
	for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
		size_t n = strlen(ids[i]);
		if (strncasecmp(id, ids[i], n) == 0 && (id[n] == 0 || id[n] == '-'))
			return true;
	}
	return false;
}

static bool host_is_self_hosted(const char *host)
{
	return strcmp(host, "host.docker.internal") == 0 || strcmp(host, "docker.orb.internal") == 0 ||
	       strcmp(host, "host.orb.internal") == 0;
}

/* §9.1's resolution order: a genuinely local address first (no gap
 * watchdog), then the self-hosted servers, else cloud. The embedded mock
 * listens on loopback, so it is local. */
pc_provider_class_t pc__config_classify(const pc_provider_config_t *p)
{
	char host[256];
	bool have_host = p->base_url && pc__config_url_host(p->base_url, host, sizeof(host));
	if (p->embedded || (have_host && host_is_local(host)))
		return PC_PROVIDER_LOCAL;
	if (id_is_self_hosted(p->id) || (have_host && host_is_self_hosted(host)))
		return PC_PROVIDER_SELF_HOSTED;
	return PC_PROVIDER_CLOUD;
}

static const char *const class_names[] = {
	[PC_PROVIDER_CLOUD] = "cloud",
	[PC_PROVIDER_SELF_HOSTED] = "self-hosted",
	[PC_PROVIDER_LOCAL] = "local",
};

const char *pc__config_class_name(pc_provider_class_t cls)
{
	return (unsigned)cls < sizeof(class_names) / sizeof(class_names[0]) ? class_names[cls] : "cloud";
}

uint64_t pc__config_class_idle_ms(pc_provider_class_t cls)
{
	switch (cls) {
	case PC_PROVIDER_CLOUD:
		return PC_CONFIG_IDLE_CLOUD_MS;
	case PC_PROVIDER_SELF_HOSTED:
		return PC_CONFIG_IDLE_SELF_HOSTED_MS;
	default:
		return 0;
	}
}

/* ---- model references ---- */

/* Splits at the first '/': the model part may hold more ("openrouter/
 * anthropic/claude"), the provider part may not. */
bool pc__config_split_ref(char *s, pc_model_ref_t *out)
{
	char *slash = strchr(s, '/');
	if (!slash || slash == s || !slash[1])
		return false;
	*slash = 0;
	out->provider = s;
	out->model = slash + 1;
	return true;
}

int pc_config_model_ref_parse(const char *text, pc_model_ref_t *out, char **buf)
{
	if (!text || !out || !buf)
		return PC_EINVAL;
	char *copy = strdup(text);
	if (!copy)
		return PC_ENOMEM;
	pc_model_ref_t ref;
	if (!pc__config_split_ref(copy, &ref)) {
		free(copy);
		return PC_EINVAL;
	}
	*out = ref;
	*buf = copy;
	return 0;
}

const pc_provider_config_t *pc_config_provider(const pc_config_t *c, const char *id)
{
	if (!c || !id)
		return NULL;
	for (size_t i = 0; i < c->provider_count; i++)
		if (c->providers[i].id && strcmp(c->providers[i].id, id) == 0)
			return &c->providers[i];
	return NULL;
}

const pc_model_config_t *pc_config_model(const pc_provider_config_t *p, const char *model)
{
	if (!p || !model)
		return NULL;
	for (size_t i = 0; i < p->model_count; i++)
		if (strcmp(p->models[i].id, model) == 0)
			return &p->models[i];
	return NULL;
}

/* A provider-level contextTokens is both its models' default and a cap on
 * them; a model's own value wins when the provider gives none. */
uint64_t pc_config_context_tokens(const pc_config_t *c, const pc_model_ref_t *ref)
{
	const pc_provider_config_t *p = ref ? pc_config_provider(c, ref->provider) : NULL;
	const pc_model_config_t *m = p ? pc_config_model(p, ref->model) : NULL;
	uint64_t prov = p ? p->context_tokens : 0;
	uint64_t mod = m ? m->context_tokens : 0;
	if (mod && prov)
		return mod < prov ? mod : prov;
	if (mod)
		return mod;
	return prov ? prov : PC_CONFIG_DEFAULT_CONTEXT_TOKENS;
}

