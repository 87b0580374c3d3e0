/*
 * providers: the model APIs Pincer speaks. This is the part's one public
 * header; the pieces it gathers say the details.
 *
 *   provider.h   the APIs and their names (one table of functions per
 *                wire format, wire.h)
 *   request.h    a provider request's body and headers from a run's
 *                transcript, tools and settings
 *   model_call.h one model call: an actor that sends the request on the
 *                I/O layer and streams the answer back as messages
 *                (model_call_lifecycle.h: its states)
 *   usage.h      token usage read from an answer, and its cost
 *   failover.h   the reason a call failed (rate limit, overload, auth...)
 *                read from its status, headers and body
 *   cooldowns.h  per-profile cooldowns that outlive a run
 *
 * Ownership: a model call owns its request and stream until it sends its
 * end; the caller owns what it is sent. Request builders return memory
 * the caller frees.
 * Threads: everything but a model call's actor is pure or guarded and may
 * run on any thread; a model call is driven by its own actor's turns.
 */
#ifndef PINCER_AGENTS_PROVIDERS_PROVIDERS_H
#define PINCER_AGENTS_PROVIDERS_PROVIDERS_H

#include "cooldowns.h"
#include "failover.h"
#include "model_call.h"
#include "model_call_lifecycle.h"
#include "provider.h"
#include "request.h"
#include "usage.h"
#include "wire.h"

#endif
