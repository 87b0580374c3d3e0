/*
 * What the files of agents/config/ share: private to the part.
 */
#ifndef PINCER_AGENTS_CONFIG_CONFIG_INTERNAL_H
#define PINCER_AGENTS_CONFIG_CONFIG_INTERNAL_H

#include "config.h"

#define PC__CONFIG_MAX_FILE_BYTES ((size_t)16 << 20)

/* One error on its own in *errs (NULL: dropped), for failures before
 * parsing; returns rc, or PC_ENOMEM when the message could not be kept. */
int pc__config_single_error(pc_config_errors_t *errs, int rc, const char *path, const char *msg);

/* "cloud", "self-hosted", "local" (§9.1); PC__CONFIG_CLASSES of them. */
#define PC__CONFIG_CLASSES 3u
const char *pc__config_class_name(pc_provider_class_t cls);

/* The host of an http(s) URL, lowercased, without brackets, port or
 * user info. False when the URL has no host. */
bool pc__config_url_host(const char *url, char *host, size_t cap);
uint64_t pc__config_class_idle_ms(pc_provider_class_t cls);
/* §9.1's resolution order: a genuinely local address first (no gap
 * watchdog), then the self-hosted servers, else cloud. The embedded mock
 * listens on loopback, so it is local. */
pc_provider_class_t pc__config_classify(const pc_provider_config_t *p);

/* Splits "provider/model" in place; false unless both halves are there. */
bool pc__config_split_ref(char *s, pc_model_ref_t *out);

#endif
