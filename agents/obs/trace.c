/*
 * Lifecycle traces (trace.h).
 */
#include "trace.h"

#include <stdio.h>
#include <string.h>

static const struct {
	const char *name;
	unsigned bit;
} machines[] = {
	{"run", PC_TRACE_RUN},
	{"attempt", PC_TRACE_ATTEMPT},
	{"session", PC_TRACE_SESSION},
	{"model_call", PC_TRACE_MODEL_CALL},
	{"tool_call", PC_TRACE_TOOL_CALL},
	{"tool", PC_TRACE_TOOL},
	{"gwclient", PC_TRACE_GWCLIENT},
};

unsigned pc_trace_parse(const char *spec)
{
	unsigned mask = 0;
	while (spec && *spec) {
		size_t n = strcspn(spec, ",");
		/* surrounding blanks are not part of a name */
		const char *p = spec;
		size_t len = n;
		while (len && (*p == ' ' || *p == '\t'))
			p++, len--;
		while (len && (p[len - 1] == ' ' || p[len - 1] == '\t'))
			len--;
		if (len == 3 && !strncmp(p, "all", 3))
			mask |= PC_TRACE_ALL;
		for (size_t i = 0; i < sizeof(machines) / sizeof(machines[0]); i++)
			if (strlen(machines[i].name) == len && !strncmp(p, machines[i].name, len))
				mask |= machines[i].bit;
		spec += n + (spec[n] == ',');
	}
	return mask;
}

void pc_trace_transition(pc_log_t *lg, const char *machine, const char *id, const char *from, const char *to,
			 const char *why)
{
	char line[512];
	snprintf(line, sizeof(line), "trace %s %s %s -> %s (%s)", machine, id ? id : "-", from, to,
		 why ? why : "");
	if (lg)
		(void)pc_log_kv(lg, PC_LOG_INFO, line);
	else
		fprintf(stderr, "%s\n", line);
}

void pc_trace_io_line(void *lg, const char *line)
{
	if (lg)
		(void)pc_log_kv((pc_log_t *)lg, PC_LOG_INFO, line);
	else
		fprintf(stderr, "%s\n", line);
}
