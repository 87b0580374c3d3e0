/*
 * The string hash: 64-bit FNV-1a, the one every table and fingerprint of
 * the project uses. It is fast on short keys and has no adversary to fear
 * here (names, session keys and run ids come from the process or an
 * authenticated client), so it is not seeded.
 *
 * Its values are kept: a session's submit fingerprint (recovery) is written
 * to the store and compared after a restart, so the algorithm and its
 * constants must not change. The actors' (the name registry is the lowest
 * user), for every part above it (not installed).
 */
#ifndef PC_ACTORS_HASH_H
#define PC_ACTORS_HASH_H

#include <stddef.h>
#include <stdint.h>

#define PC__FNV64_OFFSET 0xcbf29ce484222325ull
#define PC__FNV64_PRIME 0x100000001b3ull

/* The hash of `n` bytes at `p` (NULL with n == 0 is fine). */
static inline uint64_t pc__hash64(const void *p, size_t n)
{
	const unsigned char *b = p;
	uint64_t h = PC__FNV64_OFFSET;
	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * PC__FNV64_PRIME;
	return h;
}

/* The hash of a C string (its bytes, not the NUL); the same value as
 * pc__hash64(s, strlen(s)). NULL hashes as "". */
static inline uint64_t pc__hash64_str(const char *s)
{
	uint64_t h = PC__FNV64_OFFSET;
	for (; s && *s; s++)
		h = (h ^ (unsigned char)*s) * PC__FNV64_PRIME;
	return h;
}

#endif
