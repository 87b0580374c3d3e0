/*
 * Secrets out of text that leaves the process: a provider's error message
 * on its way to a client (docs/gateway-http.md) often quotes the key it
 * refused, and an echoed request can quote a header.
 *
 *   pc_redact("Incorrect API key provided: sk-proj-abc...xyz")
 *     -> "Incorrect API key provided: sk-***"
 *
 * What is masked (the value becomes ***, the name stays):
 *   - OpenAI / Anthropic style keys: "sk-" and 8 or more of [A-Za-z0-9_*.-]
 *     (sk-proj-..., sk-ant-..., a partly starred key);
 *   - Google API keys: "AIza" and 20 or more of [A-Za-z0-9_-];
 *   - "Bearer <token>" and "Basic <token>" (any case);
 *   - the value after a secret's name and ':' or '=' (any case, quotes and
 *     blanks allowed around them): authorization, api_key, api-key, apikey,
 *     x-api-key, access_token, refresh_token, client_secret, password,
 *     secret, token. An Authorization value is masked whole (to the end of
 *     the line, a quote, ',', ';' or a closing bracket), the others to the
 *     first blank, quote, ',', ';', '&' or closing bracket.
 * Anything else is kept byte for byte. Not a guarantee against every
 * secret shape: a guard for the ones providers are known to echo.
 */
#ifndef PINCER_AGENTS_OBS_REDACT_H
#define PINCER_AGENTS_OBS_REDACT_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* `in` with its secrets masked: malloc'd (the caller frees), NULL when
 * out of memory or `in` is NULL. */
char *pc_redact(const char *in);

#ifdef __cplusplus
}
#endif
#endif
