/*
 * Auth-profile cooldowns shared by every run of a process (spec §1.8,
 * §1.11): a profile that failed in one session is skipped by the others
 * until its cooldown ends, and the §1.12 probe throttle per provider.
 * Thread-safe (one mutex; every call is a few comparisons).
 */
#include "cooldowns.h"
#include "io/io.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct probe {
	const pc_provider_config_t *provider;
	uint64_t at_ms;
};

typedef struct cooldown {
	const pc_provider_config_t *provider;
	uint32_t profile;
	uint32_t errors;
	uint64_t until_ms, last_failure_ms;
	pc_failover_reason_t reason; /* of the latest failure */
	char *model; /* a rate limit's model (§1.8 cooldownModel), NULL: the whole profile */
} cooldown_t;

struct pc_cooldowns {
	pthread_mutex_t lock;
	cooldown_t *v;
	size_t n, cap;
	/* when each provider's cooled-down primary was last probed
	 * (§1.12 MIN_PROBE_INTERVAL_MS), one entry per provider */
	struct probe *probes;
	size_t nprobes;
};

int pc_cooldowns_new(pc_cooldowns_t **out)
{
	pc_cooldowns_t *c = calloc(1, sizeof(*c));
	if (!c)
		return PC_ENOMEM;
	if (pthread_mutex_init(&c->lock, NULL) != 0) {
		free(c);
		return PC_ESYS;
	}
	*out = c;
	return 0;
}

void pc_cooldowns_free(pc_cooldowns_t *c)
{
	if (!c)
		return;
	for (size_t i = 0; i < c->n; i++)
		free(c->v[i].model);
	free(c->v);
	free(c->probes);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

/* The entry of provider/profile (locked), created when `create`. */
static cooldown_t *cooldown_find(pc_cooldowns_t *a, const pc_provider_config_t *p, uint32_t profile, bool create)
{
	for (size_t i = 0; i < a->n; i++)
		if (a->v[i].provider == p && a->v[i].profile == profile)
			return &a->v[i];
	if (!create)
		return NULL;
	if (PC__GROW(a->v, a->cap, a->n + 1, 8))
		return NULL;
	cooldown_t *e = &a->v[a->n++];
	*e = (cooldown_t){.provider = p, .profile = profile, .reason = PC_FAILOVER_REASON_COUNT};
	return e;
}

void pc_cooldowns_failed(pc_cooldowns_t *a, const pc_provider_config_t *provider, uint32_t profile,
			 const char *model, pc_failover_reason_t reason, uint64_t cooldown_ms, uint64_t now_ms)
{
	/* a rate limit is the model's; anything else blocks the profile */
	char *scope = reason == PC_FAILOVER_RATE_LIMIT && model ? strdup(model) : NULL;
	pthread_mutex_lock(&a->lock);
	cooldown_t *e = cooldown_find(a, provider, profile, true);
	if (e) {
		free(e->model);
		e->model = scope; /* out of memory: the whole profile, the safer side */
		scope = NULL;
		if (e->last_failure_ms && now_ms - e->last_failure_ms >= PC_AUTH_FAILURE_WINDOW_MS)
			e->errors = 0;
		e->errors++;
		e->last_failure_ms = now_ms;
		e->until_ms = now_ms + cooldown_ms;
		e->reason = reason;
	}
	pthread_mutex_unlock(&a->lock);
	free(scope);
}

void pc_cooldowns_succeeded(pc_cooldowns_t *a, const pc_provider_config_t *provider, uint32_t profile,
			    const char *model)
{
	pthread_mutex_lock(&a->lock);
	cooldown_t *e = cooldown_find(a, provider, profile, false);
	/* a success on another model says nothing of a model's rate limit */
	if (e && !(e->model && (!model || strcmp(e->model, model) != 0))) {
		free(e->model);
		*e = (cooldown_t){.provider = provider, .profile = profile, .reason = PC_FAILOVER_REASON_COUNT};
	}
	pthread_mutex_unlock(&a->lock);
}

void pc_cooldowns_get(pc_cooldowns_t *a, const pc_provider_config_t *provider, uint32_t profile, const char *model,
		      uint64_t *until_ms, uint64_t *last_failure_ms, uint32_t *errors, pc_failover_reason_t *reason)
{
	pthread_mutex_lock(&a->lock);
	cooldown_t *e = cooldown_find(a, provider, profile, false);
	/* another model's rate limit leaves this model free; the error count
	 * stays the profile's */
	bool other_model = e && e->model && (!model || strcmp(e->model, model) != 0);
	*until_ms = e && !other_model ? e->until_ms : 0;
	*last_failure_ms = e ? e->last_failure_ms : 0;
	*errors = e ? e->errors : 0;
	*reason = e && !other_model ? e->reason : PC_FAILOVER_REASON_COUNT;
	pthread_mutex_unlock(&a->lock);
}


uint64_t pc_cooldowns_probe_last(pc_cooldowns_t *a, const pc_provider_config_t *provider)
{
	uint64_t at = 0;
	pthread_mutex_lock(&a->lock);
	for (size_t i = 0; i < a->nprobes; i++)
		if (a->probes[i].provider == provider)
			at = a->probes[i].at_ms;
	pthread_mutex_unlock(&a->lock);
	return at;
}

void pc_cooldowns_probe_mark(pc_cooldowns_t *a, const pc_provider_config_t *provider, uint64_t now_ms)
{
	pthread_mutex_lock(&a->lock);
	size_t i = 0;
	while (i < a->nprobes && a->probes[i].provider != provider)
		i++;
	if (i == a->nprobes) {
		/* one entry per configured provider: a few at most */
		struct probe *v = realloc(a->probes, (i + 1) * sizeof(*v));
		if (v) {
			a->probes = v;
			v[a->nprobes++] = (struct probe){.provider = provider};
		}
	}
	/* out of memory: unthrottled, the side that keeps probing */
	if (i < a->nprobes)
		a->probes[i].at_ms = now_ms;
	pthread_mutex_unlock(&a->lock);
}
