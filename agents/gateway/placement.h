/*
 * Where a session goes in a cluster: rendezvous (highest random weight)
 * hashing over the live nodes' ids. Every node computes the same answer
 * from the same listing, with nothing shared but the listing; a node that
 * joins or leaves moves only the sessions that prefer it.
 */
#ifndef PINCER_AGENTS_GATEWAY_PLACEMENT_H
#define PINCER_AGENTS_GATEWAY_PLACEMENT_H

#include <stddef.h>
#include <stdint.h>

/* The weight of node `node` for session `key`. */
uint64_t pc__placement_weight(const char *node, const char *key);

/* The index in nodes[0..n) of the node session `key` prefers (the
 * highest weight; ties to the lower index); n when n is 0. */
size_t pc__placement_pick(const char *const *nodes, size_t n, const char *key);

#endif
