/*
 * Rendezvous placement (placement.h).
 */
#include "placement.h"

#include "actors/hash.h"

uint64_t pc__placement_weight(const char *node, const char *key)
{
	/* FNV-1a over "node\0key", then a 64-bit finaliser (splitmix64's):
	 * FNV alone leaves the high bits of keys that differ in their last
	 * byte too alike to rank nodes fairly */
	uint64_t h = pc__hash64_str(node);
	h = (h ^ 0u) * PC__FNV64_PRIME;
	for (const char *p = key; p && *p; p++)
		h = (h ^ (unsigned char)*p) * PC__FNV64_PRIME;
	h ^= h >> 30;
	h *= 0xbf58476d1ce4e5b9ull;
	h ^= h >> 27;
	h *= 0x94d049bb133111ebull;
	h ^= h >> 31;
	return h;
}

size_t pc__placement_pick(const char *const *nodes, size_t n, const char *key)
{
	size_t best = n;
	uint64_t top = 0;
	for (size_t i = 0; i < n; i++) {
		uint64_t w = pc__placement_weight(nodes[i], key);
		if (best == n || w > top) {
			best = i;
			top = w;
		}
	}
	return best;
}
