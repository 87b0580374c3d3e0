/*
 * The one place Pincer touches atomics: the lowest part's, for every part
 * of the project (not installed).
 *
 * Normal builds map onto concurrencykit's ck_pr; the ThreadSanitizer build
 * (PC_ATOMICS_BUILTIN) maps onto the compiler's __atomic builtins, because
 * ck's inline-asm barriers are invisible to TSan, which would then report
 * races on correct code. Every lock-free structure in the tree goes through
 * these functions so both builds run the same algorithm.
 *
 * Orderings are named the C11 way. On x86-64 (TSO) ck's acquire and release
 * fences are compiler barriers and its read-modify-write operations are
 * full barriers, which is what the comments at each call site rely on.
 */
#ifndef PC_MAILBOX_ATOMICS_H
#define PC_MAILBOX_ATOMICS_H

#include <stdbool.h>
#include <stdint.h>

#if defined(PC_ATOMICS_BUILTIN)

#define PC__LOAD(p, o) __atomic_load_n((p), (o))
#define PC__STORE(p, v, o) __atomic_store_n((p), (v), (o))

static inline void *pc_atomic_load_ptr(void *const *p) { return PC__LOAD(p, __ATOMIC_RELAXED); }
static inline void *pc_atomic_load_ptr_acq(void *const *p) { return PC__LOAD(p, __ATOMIC_ACQUIRE); }
static inline void pc_atomic_store_ptr(void **p, void *v) { PC__STORE(p, v, __ATOMIC_RELAXED); }
static inline void pc_atomic_store_ptr_rel(void **p, void *v) { PC__STORE(p, v, __ATOMIC_RELEASE); }
static inline void *pc_atomic_xchg_ptr(void **p, void *v) { return __atomic_exchange_n(p, v, __ATOMIC_ACQ_REL); }
static inline bool pc_atomic_cas_ptr(void **p, void *expect, void *v)
{
	return __atomic_compare_exchange_n(p, &expect, v, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}
static inline uintptr_t pc_atomic_load_uptr_acq(const uintptr_t *p) { return PC__LOAD(p, __ATOMIC_ACQUIRE); }
static inline uintptr_t pc_atomic_xchg_uptr(uintptr_t *p, uintptr_t v) { return __atomic_exchange_n(p, v, __ATOMIC_ACQ_REL); }
static inline bool pc_atomic_cas_uptr(uintptr_t *p, uintptr_t expect, uintptr_t v)
{
	return __atomic_compare_exchange_n(p, &expect, v, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}
static inline uint32_t pc_atomic_load_u32(const uint32_t *p) { return PC__LOAD(p, __ATOMIC_RELAXED); }
static inline uint32_t pc_atomic_load_u32_acq(const uint32_t *p) { return PC__LOAD(p, __ATOMIC_ACQUIRE); }
static inline void pc_atomic_store_u32(uint32_t *p, uint32_t v) { PC__STORE(p, v, __ATOMIC_RELAXED); }
static inline void pc_atomic_store_u32_rel(uint32_t *p, uint32_t v) { PC__STORE(p, v, __ATOMIC_RELEASE); }
static inline uint32_t pc_atomic_faa_u32(uint32_t *p, uint32_t d) { return __atomic_fetch_add(p, d, __ATOMIC_ACQ_REL); }
static inline bool pc_atomic_cas_u32(uint32_t *p, uint32_t expect, uint32_t v)
{
	return __atomic_compare_exchange_n(p, &expect, v, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}
static inline void pc_atomic_or_u32(uint32_t *p, uint32_t v) { __atomic_fetch_or(p, v, __ATOMIC_ACQ_REL); }
static inline void pc_atomic_and_u32(uint32_t *p, uint32_t v) { __atomic_fetch_and(p, v, __ATOMIC_ACQ_REL); }
static inline uint64_t pc_atomic_load_u64(const uint64_t *p) { return PC__LOAD(p, __ATOMIC_RELAXED); }
static inline uint64_t pc_atomic_load_u64_acq(const uint64_t *p) { return PC__LOAD(p, __ATOMIC_ACQUIRE); }
static inline void pc_atomic_store_u64(uint64_t *p, uint64_t v) { PC__STORE(p, v, __ATOMIC_RELAXED); }
static inline void pc_atomic_store_u64_rel(uint64_t *p, uint64_t v) { PC__STORE(p, v, __ATOMIC_RELEASE); }
static inline uint64_t pc_atomic_faa_u64(uint64_t *p, uint64_t d) { return __atomic_fetch_add(p, d, __ATOMIC_ACQ_REL); }
/* TSan does not model fences; a sequentially consistent read-modify-write
 * of one shared word gives the same store->load ordering in the C11 model
 * (all such operations are totally ordered) and TSan understands it. */
extern uint32_t pc__tsan_fence_word;
static inline void pc_atomic_fence(void) { __atomic_fetch_add(&pc__tsan_fence_word, 0, __ATOMIC_SEQ_CST); }

#undef PC__LOAD
#undef PC__STORE

#else /* ck_pr */

#include <ck_pr.h>

static inline void *pc_atomic_load_ptr(void *const *p) { return ck_pr_load_ptr(p); }
static inline void *pc_atomic_load_ptr_acq(void *const *p)
{
	void *v = ck_pr_load_ptr(p);
	ck_pr_fence_acquire();
	return v;
}
static inline void pc_atomic_store_ptr(void **p, void *v) { ck_pr_store_ptr(p, v); }
static inline void pc_atomic_store_ptr_rel(void **p, void *v)
{
	ck_pr_fence_release();
	ck_pr_store_ptr(p, v);
}
static inline void *pc_atomic_xchg_ptr(void **p, void *v) { return ck_pr_fas_ptr(p, v); }
static inline bool pc_atomic_cas_ptr(void **p, void *expect, void *v) { return ck_pr_cas_ptr(p, expect, v); }
static inline uintptr_t pc_atomic_load_uptr_acq(const uintptr_t *p)
{
	uintptr_t v = (uintptr_t)ck_pr_load_ptr((void *const *)p);
	ck_pr_fence_acquire();
	return v;
}
static inline uintptr_t pc_atomic_xchg_uptr(uintptr_t *p, uintptr_t v)
{
	return (uintptr_t)ck_pr_fas_ptr((void *)p, (void *)v);
}
static inline bool pc_atomic_cas_uptr(uintptr_t *p, uintptr_t expect, uintptr_t v)
{
	return ck_pr_cas_ptr((void *)p, (void *)expect, (void *)v);
}
static inline uint32_t pc_atomic_load_u32(const uint32_t *p) { return ck_pr_load_32(p); }
static inline uint32_t pc_atomic_load_u32_acq(const uint32_t *p)
{
	uint32_t v = ck_pr_load_32(p);
	ck_pr_fence_acquire();
	return v;
}
static inline void pc_atomic_store_u32(uint32_t *p, uint32_t v) { ck_pr_store_32(p, v); }
static inline void pc_atomic_store_u32_rel(uint32_t *p, uint32_t v)
{
	ck_pr_fence_release();
	ck_pr_store_32(p, v);
}
static inline uint32_t pc_atomic_faa_u32(uint32_t *p, uint32_t d) { return ck_pr_faa_32(p, d); }
static inline bool pc_atomic_cas_u32(uint32_t *p, uint32_t expect, uint32_t v) { return ck_pr_cas_32(p, expect, v); }
static inline void pc_atomic_or_u32(uint32_t *p, uint32_t v) { ck_pr_or_32(p, v); }
static inline void pc_atomic_and_u32(uint32_t *p, uint32_t v) { ck_pr_and_32(p, v); }
static inline uint64_t pc_atomic_load_u64(const uint64_t *p) { return ck_pr_load_64(p); }
static inline uint64_t pc_atomic_load_u64_acq(const uint64_t *p)
{
	uint64_t v = ck_pr_load_64(p);
	ck_pr_fence_acquire();
	return v;
}
static inline void pc_atomic_store_u64(uint64_t *p, uint64_t v) { ck_pr_store_64(p, v); }
static inline void pc_atomic_store_u64_rel(uint64_t *p, uint64_t v)
{
	ck_pr_fence_release();
	ck_pr_store_64(p, v);
}
static inline uint64_t pc_atomic_faa_u64(uint64_t *p, uint64_t d) { return ck_pr_faa_64(p, d); }
static inline void pc_atomic_fence(void)
{
#if defined(__x86_64__)
	/* A locked add of zero below the stack pointer is a full barrier, like
	 * mfence, and cheaper on current x86 cores (Linux's smp_mb does the
	 * same). The value there is unchanged. */
	__asm__ __volatile__("lock; addl $0,-4(%%rsp)" ::: "memory", "cc");
#else
	ck_pr_fence_memory();
#endif
}

#endif

/* A pause for bounded spin loops: tells the core we are spinning. */
static inline void pc_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

#endif
