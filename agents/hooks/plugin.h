/*
 * The plugin loader: shared objects speaking the ABI of pincer_plugin.h,
 * whose hooks join a hook registry (hooks.h).
 *
 * A plugin's hooks are ordinary registry entries whose owner is the
 * plugin's id; the loader bridges the ABI (JSON text in, JSON text out
 * through the host's set_result) to pc_hook_fn. A plugin is finished
 * (pincer_plugin_fini) and unloaded (dlclose) when the registry goes: the
 * last reference to it, after the last running hook has returned.
 *
 * Threads: like pc_hooks_register, on the thread that builds the registry,
 * before its first run.
 */
#ifndef PINCER_AGENTS_HOOKS_PLUGIN_H
#define PINCER_AGENTS_HOOKS_PLUGIN_H

#include <stddef.h>

#include "hooks.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PC_PLUGIN_ID_MAX 64u

/*
 * Loads the plugin at `path` under `id` ([A-Za-z0-9._-], 1..PC_PLUGIN_ID_MAX,
 * unique in the registry) with its configuration `config_json` (a JSON
 * object; NULL reads as "{}"), and calls its init, which registers its
 * hooks into `h`.
 *
 * Returns 0, or an error with a one-line explanation in err[0..errlen)
 * (when err is not NULL) and the registry exactly as it was: no hook of
 * the plugin stays registered, and the object is unloaded. Errors:
 *   PC_EINVAL     a bad id, path or configuration;
 *   PC_EEXIST     the id is taken;
 *   PC_ESTATE     the registry is already sealed (it has run);
 *   PC_ENOTFOUND  the file cannot be loaded (missing, not a shared
 *                 object: dlerror's text), or it is not a Pincer plugin
 *                 (no pincer_plugin_abi or pincer_plugin_init);
 *   PC_ELIMIT     it was built for another ABI version;
 *   PC_ESTOPPED   its init returned an error (the code is in the text);
 *   PC_ENOMEM.
 * The caller reports the error and goes on without the plugin.
 */
int pc_plugin_load(pc_hooks_t *h, const char *id, const char *path, const char *config_json, char *err,
		   size_t errlen);

/* Plugins loaded into `h`. */
size_t pc_plugin_count(const pc_hooks_t *h);

#ifdef __cplusplus
}
#endif
#endif
