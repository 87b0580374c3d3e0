/*
 * Names and paths of the provider APIs.
 */
#include "provider.h"

#include <string.h>

const char *pc_provider_api_name(pc_provider_api_t api)
{
	switch (api) {
	case PC_API_OPENAI_COMPLETIONS: return "openai-completions";
	case PC_API_ANTHROPIC_MESSAGES: return "anthropic-messages";
	default: return "none";
	}
}

int pc_provider_api_parse(const char *name, pc_provider_api_t *out)
{
	if (!name || !out)
		return PC_EINVAL;
	if (strcmp(name, "openai-completions") == 0)
		*out = PC_API_OPENAI_COMPLETIONS;
	else if (strcmp(name, "anthropic-messages") == 0)
		*out = PC_API_ANTHROPIC_MESSAGES;
	else
		return PC_ENOTFOUND;
	return 0;
}

const char *pc_provider_api_path(pc_provider_api_t api)
{
	switch (api) {
	case PC_API_OPENAI_COMPLETIONS: return "/chat/completions";
	case PC_API_ANTHROPIC_MESSAGES: return "/v1/messages";
	default: return NULL;
	}
}
