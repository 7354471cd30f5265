# Scratch memory of the kernels: buffers from 4 MiB up start on a 2 MiB boundary and ask for
# transparent huge pages (as NumPy does for its arrays), so that touching them costs one page
# fault per 2 MiB instead of 512. On a VM whose host backs fresh memory lazily a 4 KiB fault
# can cost tens of microseconds: a 32 MB scratch of the 10^7-nnz transpose took 100-150 ms
# of faults after another library had churned through gigabytes, against 33 ms for the whole
# transpose otherwise. Free with free().
cdef extern from *:
    """
    #include <stdlib.h>
    #include <string.h>
    #if defined(__linux__)
    #include <sys/mman.h>
    #endif
    #define ST_SCRATCH_HUGE ((size_t)4 << 20)
    #define ST_SCRATCH_ALIGN ((size_t)2 << 20)
    static inline void *st_scratch_alloc(size_t nbytes) {
        void *p = NULL;
        if (nbytes < ST_SCRATCH_HUGE) return malloc(nbytes ? nbytes : 1);
        if (posix_memalign(&p, ST_SCRATCH_ALIGN, nbytes)) return NULL;
    #if defined(__linux__) && defined(MADV_HUGEPAGE)
        madvise(p, nbytes, MADV_HUGEPAGE);  /* a hint: where THP is off, plain pages */
    #endif
        return p;
    }
    static inline void *st_scratch_calloc(size_t count, size_t size) {
        void *p;
        if (size && count > (size_t)-1 / size) return NULL;
        p = st_scratch_alloc(count * size);
        if (p != NULL) memset(p, 0, count * size);
        return p;
    }
    """
    void* scratch_alloc "st_scratch_alloc"(size_t nbytes) nogil
    void* scratch_calloc "st_scratch_calloc"(size_t count, size_t size) nogil
