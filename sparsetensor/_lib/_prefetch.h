/* Software prefetch for every CPU kernel (one definition).
 *
 * A prefetch never faults, so an address past the end of an array is harmless; st_prefetch_past
 * forms it as an integer, so no pointer arithmetic leaves its object. It reads into all cache
 * levels (prefetcht0 on x86). Without the GCC/Clang builtin it is nothing. */
#ifndef ST_PREFETCH_H
#define ST_PREFETCH_H

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__) || defined(__clang__)
#define ST_PREFETCH_ADDRESS(a) __builtin_prefetch((const void *)(a), 0, 3)
#else
#define ST_PREFETCH_ADDRESS(a) ((void)(a))
#endif

/* the cache line holding p */
static inline void st_prefetch(const void *p) { ST_PREFETCH_ADDRESS(p); }

/* the cache line `off` bytes past p */
static inline void st_prefetch_past(const void *p, size_t off) { ST_PREFETCH_ADDRESS((uintptr_t)p + off); }

/* The product kernels' distances and bounds (_spmm_simd.h's AVX-512 paths and _spmm.pyx's
 * portable loops, every build level): SpMV looks ST_SPMV_PF entries ahead, blocks x vector
 * ST_BSR_PF bytes; a row shorter than a chunk (AVX-512), or every row (portable stream loop),
 * prefetches where values and indices take ST_SHORT_PF_MIN_BYTES or more, blocks where they
 * take ST_BSR_PF_MIN_BYTES or more (smaller ones stay in the caches; measured in
 * _spmm_simd.h and _spmm_gather.pxi). -D overrides them for A/B builds. */
#ifndef ST_SPMV_PF
#define ST_SPMV_PF 512
#endif
#ifndef ST_BSR_PF
#define ST_BSR_PF 4096
#endif
#ifndef ST_SHORT_PF_MIN_BYTES
#define ST_SHORT_PF_MIN_BYTES (32 << 20)
#endif
#ifndef ST_BSR_PF_MIN_BYTES
#define ST_BSR_PF_MIN_BYTES (4 << 20)
#endif

#endif
