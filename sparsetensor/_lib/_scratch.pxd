# Scratch memory of the kernels, from the memory pool of _pool.pyx: buffers from 4 MiB up are
# blocks on 2 MiB boundaries with transparent huge pages (one page fault per 2 MiB instead of
# 512), kept after use so that the next call finds them already mapped; smaller ones come from
# malloc. A fresh page costs a fault and the kernel's zeroing: a 10^7-nnz SpGEMM spent about a
# quarter of its time so, and on a VM whose host takes back free memory a 4 KiB fault costs tens
# of microseconds. Release with scratch_free (never free()), from any thread.
from libc.string cimport memset

from sparsetensor._lib._pool cimport pool_alloc, pool_free


cdef inline void* scratch_alloc(size_t nbytes) noexcept nogil:
    return pool_alloc(nbytes)


cdef inline void* scratch_calloc(size_t count, size_t size) noexcept nogil:
    cdef void* p
    if size and count > (<size_t>-1) // size:
        return NULL
    p = pool_alloc(count * size)
    if p != NULL:
        memset(p, 0, count * size)
    return p


cdef inline void scratch_free(void* p) noexcept nogil:
    pool_free(p)
