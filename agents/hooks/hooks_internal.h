/*
 * The hook registry's insides, shared by hooks.c (the registry),
 * hook_chain.c (the chains) and plugin.c (the loader). Not API.
 */
#ifndef PINCER_AGENTS_HOOKS_HOOKS_INTERNAL_H
#define PINCER_AGENTS_HOOKS_HOOKS_INTERNAL_H

#include <stdarg.h>

#include "hooks.h"

typedef struct pc__plugin pc__plugin_t;

/* One registered handler. Immutable once registered. */
typedef struct pc__hook_entry {
	pc_hook_point_t point;
	int priority;
	char **matcher; /* NULL: every name */
	size_t matcher_count;
	uint32_t timeout_ms; /* resolved: never 0 */
	pc_hook_fn fn;
	void *user;
	char *owner;
	pc__plugin_t *plugin; /* the plugin that registered it; NULL for C */
} pc__hook_entry_t;

struct pc_hooks {
	uint32_t refs;   /* atomic: the owner's reference, chains, running jobs */
	uint8_t sealed;  /* atomic: set by the first run */
	/* Per point, the handlers in run order (each entry its own allocation). */
	pc__hook_entry_t **by_point[PC_HOOK__COUNT];
	uint32_t n[PC_HOOK__COUNT];
	uint32_t cap[PC_HOOK__COUNT];
	uint32_t unmatched[PC_HOOK__COUNT]; /* entries with no matcher */
	pc_hook_report_fn report;
	void *report_user;
	pc__plugin_t *plugins; /* loaded plugins, newest first */
};

/* Registers on behalf of `plugin` (NULL: a C handler). */
int pc__hooks_register_as(pc_hooks_t *h, const pc_hook_def_t *def, pc__plugin_t *plugin);
/* Removes every entry `plugin` registered (a failed init). */
void pc__hooks_remove_plugin(pc_hooks_t *h, const pc__plugin_t *plugin);
/* True if `e` runs for `match_name`. */
bool pc__hook_entry_matches(const pc__hook_entry_t *e, const char *match_name);
bool pc__hooks_sealed(const pc_hooks_t *h);

/* Sends one report (to the callback, or stderr). */
void pc__hooks_report(const pc_hooks_t *h, pc_hook_report_kind_t kind, pc_hook_point_t point, const char *owner,
		      int code, int level, const char *fmt, ...) __attribute__((format(printf, 7, 8)));

/* plugin.c: at the registry's end, every plugin's fini (newest first),
 * then, once the entries are gone, dlclose and free. */
void pc__plugins_fini(pc__plugin_t *list);
void pc__plugins_close(pc__plugin_t *list);

#endif
