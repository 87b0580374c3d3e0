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

#include "../../runtime/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum pc_provider_api {
	PC_API_NONE = 0,
	PC_API_OPENAI_COMPLETIONS = 1, /* "openai-completions": OpenAI chat completions
					* and every compatible server (vLLM, llama.cpp,
					* Ollama, LM Studio, OpenRouter, ...) */
	PC_API_ANTHROPIC_MESSAGES = 2, /* "anthropic-messages" */
	PC_API_COUNT                   /* one past the last */
} pc_provider_api_t;

/* The spec's id for `api` ("openai-completions", "anthropic-messages"), or
 * "none" for anything else. Static, never NULL. */
const char *pc_provider_api_name(pc_provider_api_t api);

/* The reverse of pc_provider_api_name. PC_EINVAL for NULL arguments,
 * PC_ENOTFOUND for a name it does not know. */
int pc_provider_api_parse(const char *name, pc_provider_api_t *out);

/* Every API's name, in the registry's order, joined with `sep`, into `out`
 * (`cap` bytes, truncated, always NUL-terminated when cap > 0). For
 * messages that list what is accepted. */
void pc_provider_api_names(const char *sep, char *out, size_t cap);

/* The request path to append to a base URL: "/chat/completions" (OpenAI
 * base URLs carry their "/v1") or "/v1/messages" (Anthropic's do not).
 * NULL for PC_API_NONE. */
const char *pc_provider_api_path(pc_provider_api_t api);

#ifdef __cplusplus
}
#endif
#endif
