/*
 * What the commands that run agents share: the configuration (loaded and
 * validated, errors printed), its plugins, and a runtime, I/O layer, store
 * and agent host built on it; then the teardown in the one safe order.
 */
#ifndef PC_AGENTS_CLI_HOST_H
#define PC_AGENTS_CLI_HOST_H

#include <stdint.h>

#include "agents/agent.h"

typedef struct pc_cli_host {
	pc_config_t *cfg;
	pc_hooks_t *hooks;
	pc_runtime_t *rt;
	pc_io_t *io;
	pc_store_t *store;
	pc_agent_t *agent;
} pc_cli_host_t;

typedef struct pc_cli_host_options {
	const char *command;     /* for messages: "pincer agent" */
	const char *config_path; /* NULL: the search of pc_config_load */
	uint32_t workers;        /* 0: the runtime's default (one per core) */
	uint32_t io_threads;     /* 0: 1 */
	uint32_t blocking_threads; /* 0: the runtime's default */
	pc_log_t *log;           /* the agent's lines (borrowed); NULL: none */
	bool log_content;        /* lines may carry message text */
} pc_cli_host_options_t;

/* Loads the configuration (pc_cli_host_config), then builds the rest.
 * Prints what went wrong on stderr and returns non-zero; *h is then
 * already torn down. */
int pc_cli_host_start(const pc_cli_host_options_t *o, pc_cli_host_t *h);

/* The configuration alone, every error printed as "path: message". */
int pc_cli_host_config(const pc_cli_host_options_t *o, pc_cli_host_t *h);

/* Frees what was built (the agent with `grace_ms` for its runs). */
void pc_cli_host_stop(pc_cli_host_t *h, int64_t grace_ms);

#endif
