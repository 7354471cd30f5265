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

#endif
