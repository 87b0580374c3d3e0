/*
 * Auth-profile cooldowns shared by every run of a process (spec §1.8,
 * §1.11, §1.12): per process, and so per node in a cluster.
 *
 * A failure of `profile` of `provider` on `model` (cooldown and reason from
 * the run's decision; a rate limit cools only that model, §1.8
 * cooldownModel), a success on `model` (the error count starts over;
 * another model's rate limit stays), and the state to seed a run on `model`
 * with (no cooldown and PC_FAILOVER_REASON_COUNT, "none", when it never
 * failed or only another model is rate-limited). The reason is kept so a
 * later run's skip can name it. One entry per profile: its latest failure
 * sets its scope. The probe throttle: when the process last probed
 * `provider` while all its profiles cooled down (wall ms, 0: never), and a
 * probe now.
 *
 * Thread-safe. Providers are compared by address: the configuration's
 * entries, which outlive the table.
 */
#ifndef PINCER_AGENTS_PROVIDERS_COOLDOWNS_H
#define PINCER_AGENTS_PROVIDERS_COOLDOWNS_H

#include <stdint.h>

#include "agents/config/config.h"
#include "failover.h"

typedef struct pc_cooldowns pc_cooldowns_t;

/* PC_ENOMEM, PC_ESYS. The caller frees with pc_cooldowns_free (NULL: a no-op). */
int pc_cooldowns_new(pc_cooldowns_t **out);
void pc_cooldowns_free(pc_cooldowns_t *c);

void pc_cooldowns_failed(pc_cooldowns_t *c, const pc_provider_config_t *provider, uint32_t profile,
			 const char *model, pc_failover_reason_t reason, uint64_t cooldown_ms, uint64_t now_ms);
void pc_cooldowns_succeeded(pc_cooldowns_t *c, const pc_provider_config_t *provider, uint32_t profile,
			    const char *model);
void pc_cooldowns_get(pc_cooldowns_t *c, const pc_provider_config_t *provider, uint32_t profile, const char *model,
		      uint64_t *until_ms, uint64_t *last_failure_ms, uint32_t *errors, pc_failover_reason_t *reason);

uint64_t pc_cooldowns_probe_last(pc_cooldowns_t *c, const pc_provider_config_t *provider);
void pc_cooldowns_probe_mark(pc_cooldowns_t *c, const pc_provider_config_t *provider, uint64_t now_ms);

#endif
