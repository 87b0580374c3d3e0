/*
 * Pincer: an actor runtime on a work-stealing thread pool.
 * The umbrella header: include this one. Link with -lpincer (pkg-config
 * pincer) or find_package(pincer) -> pincer::pincer.
 */
#ifndef PINCER_H
#define PINCER_H

#include "runtime/version.h"
#include "runtime/error.h"
#include "mailbox/msg.h"
#include "runtime/runtime.h"
#include "runtime/blocking.h"
#include "actors/actor.h"
#include "actors/timer.h"
#include "actors/registry.h"
#include "actors/supervisor.h"
#include "actors/deadline.h"
#include "io/sse.h"

#endif
