/*
 * Token usage, normalized across providers (spec §11.3, normalizeUsage):
 * whatever a provider calls its counters, a pc_usage_t says how many input
 * tokens were read uncached, how many came from or went into the prompt
 * cache, how many were generated, and the total.
 *
 * Pure: no I/O, no state. Any thread.
 */
#ifndef PINCER_AGENTS_PROVIDERS_USAGE_H
#define PINCER_AGENTS_PROVIDERS_USAGE_H

#include <stdbool.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "runtime/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Every field is >= 0. `input` never includes cached tokens. */
typedef struct pc_usage {
	int64_t input;       /* prompt tokens read at the full rate */
	int64_t output;      /* generated tokens (reasoning included) */
	int64_t cache_read;  /* prompt tokens served from the cache */
	int64_t cache_write; /* prompt tokens written into the cache */
	int64_t total;       /* the provider's total, else the sum of the parts */
} pc_usage_t;

/* Counts larger than this are clamped to it, so sums never overflow. */
#define PC_USAGE_MAX ((int64_t)1 << 50)

/*
 * Reads a provider usage object. Aliases, first positive value wins (else
 * the first number present):
 *   input       input, inputTokens, input_tokens, promptTokens, prompt_tokens
 *   output      output, outputTokens, output_tokens, completionTokens,
 *               completion_tokens
 *   cache_read  cacheRead, cache_read, cache_read_input_tokens, cached_tokens,
 *               input_tokens_details.cached_tokens,
 *               prompt_tokens_details.cached_tokens
 *   cache_write cacheWrite, cache_write, cache_creation_input_tokens,
 *               cache_write_tokens, prompt_tokens_details.cache_write_tokens
 *   total       total, totalTokens, total_tokens
 * Only JSON numbers count; negative ones read as 0, fractions are dropped.
 *
 * OpenAI-style prompt totals include the cached tokens; Anthropic's
 * input_tokens do not. The input is treated as OpenAI-style, and cache_read
 * is subtracted from it (clamped at 0), when it came from prompt_tokens /
 * promptTokens, or from input_tokens / inputTokens while the cached count
 * came from an *_tokens_details object (the Responses shape).
 * When the object gives no total (or 0), total is the sum of the parts.
 *
 * Returns 0 with *out filled, PC_ENOTFOUND (with *out zeroed) when `obj`
 * is not an object or holds none of the fields, PC_EINVAL for a NULL `out`.
 */
int pc_usage_from_json(const cJSON *obj, pc_usage_t *out);

/* True when any field is > 0. NULL is false. */
bool pc_usage_is_nonzero(const pc_usage_t *u);

/*
 * Accumulates `u` into `acc` (spec: mergeUsageIntoAccumulator): an all-zero
 * `u` changes nothing; otherwise each part is added, and the total grows by
 * u->total, or by the sum of u's parts when u->total is 0. Sums saturate at
 * PC_USAGE_MAX. NULL arguments are ignored.
 */
void pc_usage_add(pc_usage_t *acc, const pc_usage_t *u);

/* input + cache_read + cache_write: the prompt side of one call. 0 for NULL. */
int64_t pc_usage_prompt_tokens(const pc_usage_t *u);

/*
 * What a run reports as its usage (spec §11.3, toNormalizedUsage with the
 * latest call's API total; §1.19 agentMeta.usage), from the run's
 * accumulated usage `acc` and its latest call that reported any, `last`:
 * input, cache_read and cache_write of the latest call (its prompt, for
 * the context display, not the sum over a tool loop's calls), output
 * accumulated over every call, and total the latest call's total (else
 * its prompt plus the accumulated output). A zero `last` reads as `acc`.
 * *out is zero when `acc` and `last` are. NULL arguments read as zero;
 * a NULL `out` is ignored.
 */
void pc_usage_report(const pc_usage_t *acc, const pc_usage_t *last, pc_usage_t *out);

/* A new object {input, output, cacheRead, cacheWrite, totalTokens} (the
 * unified message model's names; pc_usage_from_json reads it back), or
 * NULL when out of memory or `u` is NULL. The caller owns it (cJSON_Delete). */
cJSON *pc_usage_to_json(const pc_usage_t *u);

#ifdef __cplusplus
}
#endif
#endif
