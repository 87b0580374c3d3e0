/*
 * A name registry per runtime: name -> actor. A registered actor is
 * unregistered automatically when it stops. Any thread.
 */
#ifndef PINCER_ACTORS_REGISTRY_H
#define PINCER_ACTORS_REGISTRY_H

#include "actor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Registers `a` under `name` (copied; at most 255 bytes). The registry
 * holds its own reference. PC_EEXIST if the name is taken, PC_ESTOPPED if
 * `a` has stopped, PC_ESTATE if `a` already has a name. */
int pc_register(pc_actor_t *a, const char *name);

/* Removes `name`. PC_ENOTFOUND if it is not registered. */
int pc_unregister(pc_runtime_t *rt, const char *name);

/* The actor registered as `name` with a new reference owned by the
 * caller, or NULL. */
pc_actor_t *pc_whereis(pc_runtime_t *rt, const char *name);

#ifdef __cplusplus
}
#endif
#endif
