/*
 * The provider APIs Pincer speaks (spec §11.1): which wire protocol a
 * model endpoint uses. Each has a table of functions and facts (wire.h)
 * that the rest of agents/providers/ goes through; the names and paths
 * below are read from it.
 *
 * Pure: no I/O, no state. Any thread.
 */
#ifndef PINCER_AGENTS_PROVIDERS_PROVIDER_H
#define PINCER_AGENTS_PROVIDERS_PROVIDER_H

#include <stddef.h>

#include "runtime/error.h"
#include "agents/config/config.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The request path to append to a base URL: "/chat/completions" (OpenAI
 * base URLs carry their "/v1") or "/v1/messages" (Anthropic's do not).
 * NULL for PC_API_NONE. */
const char *pc_provider_api_path(pc_provider_api_t api);

#ifdef __cplusplus
}
#endif
#endif
