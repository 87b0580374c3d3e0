/*
 * The Pincer plugin ABI: the only header a plugin includes.
 *
 * A plugin is a shared object (dlopen'd with RTLD_NOW | RTLD_LOCAL) that
 * exports, with default visibility:
 *
 *   const uint32_t pincer_plugin_abi = PINCER_PLUGIN_ABI_VERSION;
 *   int  pincer_plugin_init(const pincer_plugin_host_t *host);
 *   void pincer_plugin_fini(void);                       (optional)
 *
 * The host reads pincer_plugin_abi first and calls nothing in a plugin
 * built for another ABI version (loading the file does run its static
 * constructors, as any dlopen does: keep them trivial). Then it calls
 * pincer_plugin_init once per id it loads the plugin under (one file
 * loaded under two ids is one object in memory: its globals are shared),
 * on the loading thread: the plugin reads its id and configuration and
 * registers its hooks. init returns 0, or a negative code to refuse to
 * load; a plugin whose init fails has its hooks removed, is never called
 * again (fini included: init cleans up after itself when it fails) and is
 * unloaded. pincer_plugin_fini runs once per successful init, when the
 * host releases the plugin, after the last of its hooks has returned.
 *
 * Hooks. A hook function receives the call as JSON text:
 *     {"hook": "<point name>", "event": {...}, "ctx": {...}}
 * (borrowed for the call) and answers, if it has something to say, with
 * host->set_result(result, json, len): the host copies the text, so no
 * memory changes hands across the boundary. The answer is a JSON object
 * whose shape depends on the hook point (see the host's documentation,
 * agents/hooks/hooks.h). A hook returns 0, or a negative code when it
 * failed (the host reports it and applies the point's failure rule: a
 * failing before_tool_call hook blocks the call). Hooks run on the host's
 * blocking pool threads, possibly several at once: a plugin's hooks must
 * be thread-safe. A hook that crashes the process cannot be contained.
 *
 * Compatibility. The host struct starts with its own size; fields are
 * only ever appended. A plugin reading a field added after version 1
 * checks PINCER_PLUGIN_HOST_HAS(host, field) first.
 *
 * This header depends on nothing but the C standard library.
 */
#ifndef PINCER_PLUGIN_H
#define PINCER_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PINCER_PLUGIN_ABI_VERSION 1u

#if defined(__GNUC__)
#define PINCER_PLUGIN_EXPORT __attribute__((visibility("default")))
#else
#define PINCER_PLUGIN_EXPORT
#endif

/* Return codes (the same values as the host's PC_E* codes). */
#define PINCER_PLUGIN_OK 0
#define PINCER_PLUGIN_ENOMEM (-1)    /* out of memory */
#define PINCER_PLUGIN_EINVAL (-2)    /* a bad argument */
#define PINCER_PLUGIN_ENOTFOUND (-6) /* no such hook point */
#define PINCER_PLUGIN_ESTATE (-9)    /* not allowed now (register_hook after init) */

/* Log levels. */
#define PINCER_LOG_DEBUG 0
#define PINCER_LOG_INFO 1
#define PINCER_LOG_WARN 2
#define PINCER_LOG_ERROR 3

/* Where a hook writes its answer; valid only during the hook call. */
typedef struct pincer_hook_result pincer_hook_result_t;

/* A hook. `input` is `input_len` bytes of JSON text, NUL-terminated. */
typedef int (*pincer_hook_fn)(void *user, const char *input, size_t input_len, pincer_hook_result_t *result);

typedef struct pincer_plugin_host {
	uint32_t size;        /* sizeof(pincer_plugin_host_t) as the host knows it */
	uint32_t abi_version; /* PINCER_PLUGIN_ABI_VERSION of the host */
	void *host_ctx;       /* the first argument of register_hook and log */
	const char *plugin_id;   /* the id the host gave this plugin */
	const char *config_json; /* its configuration, a JSON object ("{}" when none) */

	/* Registers `fn` for the hook point `hook_name` ("before_tool_call", ...).
	 * Only during pincer_plugin_init. priority: higher runs first.
	 * matcher: tool names for before_tool_call / after_tool_call, comma
	 * separated ("exec, read"), or NULL / "" for every tool. timeout_ms: 0
	 * for the host's default. `user` is passed back to fn. Returns 0,
	 * PINCER_PLUGIN_ENOTFOUND for an unknown hook name, PINCER_PLUGIN_EINVAL
	 * (a matcher on another point, no fn), PINCER_PLUGIN_ESTATE after init,
	 * PINCER_PLUGIN_ENOMEM. */
	int (*register_hook)(void *host_ctx, const char *hook_name, int priority, const char *matcher,
			     uint32_t timeout_ms, pincer_hook_fn fn, void *user);

	/* A log line through the host's logger; any thread, until fini returns. */
	void (*log)(void *host_ctx, int level, const char *msg);

	/* A hook's answer: `len` bytes of JSON text (need not be NUL-terminated),
	 * copied by the host. Called again, it replaces the previous answer.
	 * Returns 0, PINCER_PLUGIN_EINVAL or PINCER_PLUGIN_ENOMEM. */
	int (*set_result)(pincer_hook_result_t *result, const char *json, size_t len);
} pincer_plugin_host_t;

/* True if the host's struct is recent enough to hold `field`. */
#define PINCER_PLUGIN_HOST_HAS(host, field)                                                       \
	((host)->size >= offsetof(pincer_plugin_host_t, field) + sizeof((host)->field))

/* What a plugin defines. */
extern PINCER_PLUGIN_EXPORT const uint32_t pincer_plugin_abi;
PINCER_PLUGIN_EXPORT int pincer_plugin_init(const pincer_plugin_host_t *host);
PINCER_PLUGIN_EXPORT void pincer_plugin_fini(void);

#ifdef __cplusplus
}
#endif
#endif
