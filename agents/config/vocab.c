/*
 * The configuration's vocabulary (vocab.h): names, parsing and defaults.
 */
#include "vocab.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* ---- provider APIs ---- */

static const char *const api_names[PC_API_COUNT] = {
	[PC_API_OPENAI_COMPLETIONS] = "openai-completions",
	[PC_API_ANTHROPIC_MESSAGES] = "anthropic-messages",
};

const char *pc_provider_api_name(pc_provider_api_t api)
{
	return api > PC_API_NONE && api < PC_API_COUNT ? api_names[api] : "none";
}

int pc_provider_api_parse(const char *name, pc_provider_api_t *out)
{
	if (!name || !out)
		return PC_EINVAL;
	for (int api = PC_API_NONE + 1; api < PC_API_COUNT; api++) {
		if (strcmp(name, api_names[api]) == 0) {
			*out = (pc_provider_api_t)api;
			return 0;
		}
	}
	return PC_ENOTFOUND;
}

void pc_provider_api_names(const char *sep, char *out, size_t cap)
{
	size_t n = 0;
	if (cap)
		out[0] = '\0';
	for (int api = PC_API_NONE + 1; api < PC_API_COUNT && n < cap; api++) {
		int k = snprintf(out + n, cap - n, "%s%s", api > PC_API_NONE + 1 ? sep : "", api_names[api]);
		if (k < 0)
			break;
		n += (size_t)k;
	}
}

/* ---- thinking levels ---- */

static const char *const level_names[] = {
	[PC_THINK_OFF] = "off",       [PC_THINK_MINIMAL] = "minimal", [PC_THINK_LOW] = "low",
	[PC_THINK_MEDIUM] = "medium", [PC_THINK_HIGH] = "high",       [PC_THINK_XHIGH] = "xhigh",
	[PC_THINK_ADAPTIVE] = "adaptive", [PC_THINK_MAX] = "max",
};

#define NLEVELS (sizeof(level_names) / sizeof(level_names[0]))

const char *pc_think_level_name(pc_think_level_t l)
{
	return (unsigned)l < NLEVELS ? level_names[l] : "off";
}

int pc_think_level_parse(const char *s, pc_think_level_t *out)
{
	if (!s || !out)
		return PC_EINVAL;
	char buf[32];
	size_t n = 0;
	while (isspace((unsigned char)*s))
		s++;
	for (; *s && n < sizeof(buf) - 1; s++)
		buf[n++] = (char)tolower((unsigned char)*s);
	if (*s)
		return PC_ENOTFOUND; /* longer than any level */
	while (n && isspace((unsigned char)buf[n - 1]))
		n--;
	buf[n] = 0;
	for (size_t i = 0; i < NLEVELS; i++) {
		if (strcmp(buf, level_names[i]) == 0) {
			*out = (pc_think_level_t)i;
			return 0;
		}
	}
	static const char *const xhigh[] = {"x-high", "x_high", "extra-high", "extra high",
					    "extra_high"};
	for (size_t i = 0; i < sizeof(xhigh) / sizeof(xhigh[0]); i++) {
		if (strcmp(buf, xhigh[i]) == 0) {
			*out = PC_THINK_XHIGH;
			return 0;
		}
	}
	if (strcmp(buf, "highest") == 0) {
		*out = PC_THINK_HIGH;
		return 0;
	}
	return PC_ENOTFOUND;
}

/* ---- queue modes ---- */

static const char *const mode_names[PC_QUEUE_MODE_COUNT] = {
	[PC_QUEUE_STEER] = "steer",
	[PC_QUEUE_FOLLOWUP] = "followup",
	[PC_QUEUE_COLLECT] = "collect",
	[PC_QUEUE_INTERRUPT] = "interrupt",
	[PC_QUEUE_STEER_BACKLOG] = "steer-backlog",
};

static const struct {
	const char *name;
	pc_queue_mode_t mode;
} mode_aliases[] = {
	{"steer", PC_QUEUE_STEER},         {"steering", PC_QUEUE_STEER},
	{"queue", PC_QUEUE_STEER},         {"queued", PC_QUEUE_STEER},
	{"followup", PC_QUEUE_FOLLOWUP},   {"follow-ups", PC_QUEUE_FOLLOWUP},
	{"followups", PC_QUEUE_FOLLOWUP},  {"collect", PC_QUEUE_COLLECT},
	{"coalesce", PC_QUEUE_COLLECT},    {"interrupt", PC_QUEUE_INTERRUPT},
	{"interrupts", PC_QUEUE_INTERRUPT}, {"abort", PC_QUEUE_INTERRUPT},
	{"steer-backlog", PC_QUEUE_STEER_BACKLOG}, {"steer+backlog", PC_QUEUE_STEER_BACKLOG},
	{"steer_backlog", PC_QUEUE_STEER_BACKLOG},
};

static const char *const drop_names[PC_QUEUE_DROP_COUNT] = {
	[PC_QUEUE_DROP_OLD] = "old",
	[PC_QUEUE_DROP_NEW] = "new",
	[PC_QUEUE_DROP_SUMMARIZE] = "summarize",
};

/* s equals name, ignoring case and surrounding spaces. */
static bool name_eq(const char *s, const char *name)
{
	while (isspace((unsigned char)*s))
		s++;
	size_t n = strlen(name);
	if (strncasecmp(s, name, n) != 0)
		return false;
	for (s += n; *s; s++)
		if (!isspace((unsigned char)*s))
			return false;
	return true;
}

const char *pc_queue_mode_name(pc_queue_mode_t m)
{
	return (unsigned)m < PC_QUEUE_MODE_COUNT ? mode_names[m] : "unknown";
}

int pc_queue_mode_parse(const char *s, pc_queue_mode_t *out)
{
	if (!s || !out)
		return PC_EINVAL;
	for (size_t i = 0; i < sizeof(mode_aliases) / sizeof(mode_aliases[0]); i++) {
		if (name_eq(s, mode_aliases[i].name)) {
			*out = mode_aliases[i].mode;
			return 0;
		}
	}
	return PC_ENOTFOUND;
}

const char *pc_queue_drop_name(pc_queue_drop_t d)
{
	return (unsigned)d < PC_QUEUE_DROP_COUNT ? drop_names[d] : "unknown";
}

int pc_queue_drop_parse(const char *s, pc_queue_drop_t *out)
{
	if (!s || !out)
		return PC_EINVAL;
	if (name_eq(s, "old") || name_eq(s, "oldest"))
		*out = PC_QUEUE_DROP_OLD;
	else if (name_eq(s, "new") || name_eq(s, "newest"))
		*out = PC_QUEUE_DROP_NEW;
	else if (name_eq(s, "summarize"))
		*out = PC_QUEUE_DROP_SUMMARIZE;
	else
		return PC_ENOTFOUND;
	return 0;
}

void pc_queue_settings_default(pc_queue_settings_t *out)
{
	*out = (pc_queue_settings_t){
		.mode = PC_QUEUE_STEER,
		.debounce_ms = PC_QUEUE_DEFAULT_DEBOUNCE_MS,
		.cap = PC_QUEUE_DEFAULT_CAP,
		.drop = PC_QUEUE_DROP_SUMMARIZE,
	};
}

/* ---- stuck-session diagnostics ---- */

uint64_t pc_diag_warn_ms(uint64_t configured)
{
	if (configured < PC_DIAG_WARN_MIN_MS || configured > PC_DIAG_WARN_MAX_MS)
		return PC_DIAG_WARN_DEFAULT_MS;
	return configured;
}

uint64_t pc_diag_abort_ms(uint64_t warn_ms, uint64_t configured)
{
	if (configured)
		return configured < warn_ms ? warn_ms : configured;
	uint64_t scaled = warn_ms * PC_DIAG_ABORT_WARN_FACTOR;
	return scaled > PC_DIAG_ABORT_FLOOR_MS ? scaled : PC_DIAG_ABORT_FLOOR_MS;
}
