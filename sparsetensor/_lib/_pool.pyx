# The memory pool of large arrays: the outputs of the kernels from 256 KiB up are taken from
# blocks that earlier outputs gave back, instead of fresh memory from the operating system.
#
# Why: a fresh page costs a fault and the kernel's zeroing of it before the first store, a
# large share of a memory-bound kernel, and far more on a VM whose host takes back free memory
# (virtio-balloon free page reporting) and hands back huge pages to be zeroed again.
# glibc keeps allocations up to 32 MiB in its heap but maps and unmaps every larger one, so a
# loop over a large operator paid that on every call. Below 32 MiB its threshold follows the
# last freed mapping, so an allocation of the same size as the one just freed is mapped
# again: every few-MB np.empty in a loop faulted all its pages, and so did a small SpGEMM's
# per-thread parts on every call. Hence arrays from 256 KiB
# up come from the pool too, in blocks of at least 4 MiB (only the pages used are touched). Peers of PyTorch's caching allocator on
# the GPU and of jemalloc's retained extents.
#
# Kernels take their scratch memory from the pool as well (pool_alloc / pool_free, through
# _scratch.pxd): a 10^7-nnz SpGEMM's per-thread parts, a transpose's counters, the scatter
# product's per-thread outputs.
#
# What: blocks are 2 MiB aligned multiples of 2 MiB (4 MiB at least), asked for transparent
# huge pages; a 64-byte header before the data records the block's size. A freed block is kept (up to `limit` bytes,
# oldest first out, at most POOL_SLOTS blocks) after MADV_FREE, which lets the kernel take its
# pages back under memory pressure without a write to them; while it does not, the pages stay
# mapped and a reuse costs nothing. A request takes the smallest kept block that is at least
# its size and at most 1.25x it, of those the one freed last: its pages are the likeliest to be
# faulted in and in cache. (Oldest first, a loop over one output after a SpGEMM had given back
# many blocks went through all of them, faulting each one's untouched huge page in turn.) `empty` hands out arrays that are NumPy's own (NEP 49
# handler), so they behave as any other (resize, pickle, buffer protocol); `pool_alloc` hands
# out raw blocks for scratch.
#
# Locking: a spin lock around the table (a few dozen loads; no system call is made while it is
# held), so that a block may be freed from any thread, with or without the GIL.
cimport numpy as cnp
from cpython.pycapsule cimport PyCapsule_New

import numpy as np

cnp.import_array()

cdef extern from "numpy/arrayobject.h":
    object PyDataMem_SetHandler(object handler)

cdef extern from *:
    """
    #include <stdint.h>
    #include <stdlib.h>
    #include <string.h>
    #if defined(__linux__) || defined(__APPLE__)
    #include <pthread.h>
    #include <sys/mman.h>
    #endif
    #include "numpy/arrayobject.h"

    #define STP_FLOOR ((size_t)256 << 10)  /* pooled from here up ... */
    #define STP_MIN ((size_t)4 << 20)       /* ... in blocks of at least this */
    #define STP_LAZY ((size_t)16 << 20)     /* freed or shrunk: MADV_FREE from here up */
    #define STP_ALIGN ((size_t)2 << 20)
    #define STP_HEAD ((size_t)64)
    #define STP_SLOTS 32
    #define STP_SMALL 0x736d616c6c504f4full
    #define STP_BIG 0x626967626c6f636bull

    typedef struct { size_t cap; uint64_t magic; } stp_head;
    static struct {
        int lock;
        size_t limit, cached;
        int n;
        void *blk[STP_SLOTS];      /* oldest first */
        size_t cap[STP_SLOTS];
        uint64_t hits, misses;
    } stp;

    static inline void stp_lock(void) {
        while (__atomic_exchange_n(&stp.lock, 1, __ATOMIC_ACQUIRE))
            while (__atomic_load_n(&stp.lock, __ATOMIC_RELAXED)) {}
    }
    static inline void stp_unlock(void) { __atomic_store_n(&stp.lock, 0, __ATOMIC_RELEASE); }
    static inline size_t stp_limit(void) { return __atomic_load_n(&stp.limit, __ATOMIC_RELAXED); }
    #if defined(__linux__) || defined(__APPLE__)
    static void stp_after_fork(void) { stp.lock = 0; }  /* the child has one thread */
    #endif

    static void stp_drop(int i) {  /* removes table entry i; the lock is held */
        stp.cached -= stp.cap[i];
        memmove(stp.blk + i, stp.blk + i + 1, (size_t)(stp.n - i - 1) * sizeof(void *));
        memmove(stp.cap + i, stp.cap + i + 1, (size_t)(stp.n - i - 1) * sizeof(size_t));
        stp.n--;
    }

    /* At least n bytes, 64-byte aligned; NULL when out of memory. Release with stp_free. */
    static void *stp_alloc(size_t n) {
        stp_head *h = NULL;
        size_t need;
        int i, best = -1;
        if (n > SIZE_MAX / 2) return NULL;
        if (n + STP_HEAD < STP_FLOOR) {
            h = (stp_head *)malloc(n + STP_HEAD);
            if (h == NULL) return NULL;
            h->cap = n;  /* a small block records the size asked for */
            h->magic = STP_SMALL;
            return (char *)h + STP_HEAD;
        }
        need = (n + STP_HEAD + STP_ALIGN - 1) & ~(STP_ALIGN - 1);
        if (need < STP_MIN) need = STP_MIN;
        stp_lock();
        for (i = 0; i < stp.n; i++)
            if (stp.cap[i] >= need && stp.cap[i] - need <= need / 4 && (best < 0 || stp.cap[i] <= stp.cap[best]))
                best = i;
        if (best >= 0) {
            h = (stp_head *)stp.blk[best];
            need = stp.cap[best];
            stp_drop(best);
            stp.hits++;
        } else {
            stp.misses++;
        }
        stp_unlock();
        if (h == NULL) {
            void *p = NULL;
            if (posix_memalign(&p, STP_ALIGN, need)) return NULL;
    #if defined(__linux__) && defined(MADV_HUGEPAGE)
            madvise(p, need, MADV_HUGEPAGE);  /* a hint: where THP is off, plain pages */
    #endif
            h = (stp_head *)p;
        }
        h->cap = need;
        h->magic = STP_BIG;
        return (char *)h + STP_HEAD;
    }

    static void stp_free(void *p) {
        stp_head *h;
        void *out[STP_SLOTS + 1];
        size_t cap;
        int i, k = 0;
        if (p == NULL) return;
        h = (stp_head *)((char *)p - STP_HEAD);
        if (h->magic != STP_BIG) {  /* a small block (or, were it ever torn, never cached) */
            free(h);
            return;
        }
        cap = h->cap;
        h->magic = 0;
        if (cap > stp_limit()) {
            free(h);
            return;
        }
    #if defined(__linux__) && defined(MADV_FREE)
        if (cap >= STP_LAZY) madvise(h, cap, MADV_FREE);
    #endif
        stp_lock();
        while (stp.n > 0 && (stp.n == STP_SLOTS || stp.cached + cap > stp.limit)) {
            out[k++] = stp.blk[0];
            stp_drop(0);
        }
        if (stp.cached + cap <= stp.limit) {
            stp.blk[stp.n] = h;
            stp.cap[stp.n++] = cap;
            stp.cached += cap;
            h = NULL;
        }
        stp_unlock();
        for (i = 0; i < k; i++) free(out[i]);
        if (h != NULL) free(h);
    }

    /* Sets the limit and gives back kept blocks beyond it; returns the old limit. */
    static size_t stp_set_limit(size_t limit) {
        void *out[STP_SLOTS];
        size_t old;
        int i, k = 0;
        stp_lock();
        old = stp.limit;
        __atomic_store_n(&stp.limit, limit, __ATOMIC_RELAXED);
        while (stp.n > 0 && stp.cached > limit) {
            out[k++] = stp.blk[0];
            stp_drop(0);
        }
        stp_unlock();
        for (i = 0; i < k; i++) free(out[i]);
        return old;
    }

    static void stp_stats(size_t *out) {
        stp_lock();
        out[0] = stp.limit; out[1] = stp.cached; out[2] = (size_t)stp.n;
        out[3] = (size_t)stp.hits; out[4] = (size_t)stp.misses;
        stp_unlock();
    }

    /* NumPy's allocator interface (NEP 49). */
    static void *stp_np_malloc(void *ctx, size_t n) { (void)ctx; return stp_alloc(n); }
    static void *stp_np_calloc(void *ctx, size_t count, size_t size) {
        void *p;
        (void)ctx;
        if (size && count > SIZE_MAX / size) return NULL;
        p = stp_alloc(count * size);
        if (p != NULL) memset(p, 0, count * size);
        return p;
    }
    static void *stp_np_realloc(void *ctx, void *p, size_t n) {
        stp_head *h;
        size_t have;
        void *q;
        (void)ctx;
        if (p == NULL) return stp_alloc(n);
        h = (stp_head *)((char *)p - STP_HEAD);
        have = h->magic == STP_BIG ? h->cap - STP_HEAD : h->cap;
        if (h->magic == STP_BIG && n <= have) {
            /* a shrink of a kept block stays in place (no copy, no fresh pages for a new one);
               its whole 2 MiB pages past the new end go to the kernel lazily (MADV_FREE), so that
               the memory is the system's again once it needs it, when they are STP_LAZY or more
               (below, the system call and its TLB flush cost more than the pages are worth).
               The block keeps its size. */
    #if defined(__linux__) && defined(MADV_FREE)
            size_t end = (n + STP_HEAD + STP_ALIGN - 1) & ~(STP_ALIGN - 1);
            if (end + STP_LAZY <= h->cap) madvise((char *)h + end, h->cap - end, MADV_FREE);
    #endif
            return p;
        }
        q = stp_alloc(n);
        if (q == NULL) return NULL;
        memcpy(q, p, have < n ? have : n);
        stp_free(p);
        return q;
    }
    static void stp_np_free(void *ctx, void *p, size_t n) { (void)ctx; (void)n; stp_free(p); }

    static PyDataMem_Handler stp_handler = {
        "sparsetensor_pool", 1, {NULL, stp_np_malloc, stp_np_calloc, stp_np_realloc, stp_np_free}
    };

    static void stp_init(size_t limit) {
        stp.limit = limit;
    #if defined(__linux__) || defined(__APPLE__)
        pthread_atfork(NULL, NULL, stp_after_fork);
    #endif
    }
    """
    size_t POOL_MIN "STP_MIN"
    size_t POOL_FLOOR "STP_FLOOR"
    void stp_init(size_t limit)
    size_t stp_set_limit(size_t limit) nogil
    void stp_stats(size_t* out) nogil
    size_t stp_limit() nogil
    void* stp_alloc(size_t nbytes) nogil
    void stp_free(void* p) nogil
    void* stp_handler_ptr "(&stp_handler)"


cdef void* pool_alloc(size_t nbytes) noexcept nogil:
    """At least nbytes, 64-byte aligned (a kept block from 256 KiB up); NULL when out of memory.
    Release with pool_free, from any thread."""
    return stp_alloc(nbytes)


cdef void pool_free(void* p) noexcept nogil:
    stp_free(p)


def _memory_bytes():
    """The memory this process may use: the machine's, or its cgroup's limit where lower (a
    batch job's allocation)."""
    import os
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):  # pragma: no cover - no sysconf
        return 8 << 30
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path) as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit():
            total = min(total, int(text))
    return total


def _default_limit():
    """An eighth of the memory this process may use, or SPARSETENSOR_POOL_BYTES."""
    import os
    env = os.environ.get("SPARSETENSOR_POOL_BYTES", "").strip()
    if env:
        try:
            value = int(env)
        except ValueError:
            raise ValueError(f"SPARSETENSOR_POOL_BYTES must be a number of bytes, got {env!r}") from None
        if value < 0:
            raise ValueError(f"SPARSETENSOR_POOL_BYTES must be >= 0, got {value}")
        return value
    return _memory_bytes() // 8


stp_init(_default_limit())
_HANDLER = PyCapsule_New(stp_handler_ptr, b"mem_handler", NULL)
MIN_BYTES = POOL_FLOOR        # the smallest array the pool serves
BLOCK_MIN_BYTES = POOL_MIN    # the smallest block it keeps


cpdef object empty(object shape, object dtype):
    """``np.empty(shape, dtype)``; from 256 KiB up (and while the pool's limit is not 0) its memory
    comes from the pool, 64-byte aligned."""
    cdef Py_ssize_t count = 1
    cdef cnp.dtype dt
    if type(shape) is tuple:
        for x in shape:
            count *= <Py_ssize_t>x
    else:
        count *= <Py_ssize_t>shape
    if count < <Py_ssize_t>(POOL_FLOOR >> 6) or stp_limit() == 0:  # small whatever the dtype's size
        return np.empty(shape, dtype)
    dt = dtype if isinstance(dtype, cnp.dtype) else np.dtype(dtype)
    if count * dt.itemsize < <Py_ssize_t>POOL_FLOOR:
        return np.empty(shape, dt)
    old = PyDataMem_SetHandler(_HANDLER)
    try:
        return np.empty(shape, dt)
    finally:
        PyDataMem_SetHandler(old)


def set_limit(limit):
    """Keep at most ``limit`` bytes of freed blocks (0: keep none, and give back what is kept);
    returns the old limit."""
    limit = int(limit)
    if limit < 0:
        raise ValueError(f"the pool's limit must be >= 0 bytes, got {limit}")
    return stp_set_limit(<size_t>limit)


def stats():
    """``{"limit", "cached_bytes", "cached_blocks", "hits", "misses"}``."""
    cdef size_t st[5]
    stp_stats(st)
    return {"limit": st[0], "cached_bytes": st[1], "cached_blocks": st[2], "hits": st[3], "misses": st[4]}
