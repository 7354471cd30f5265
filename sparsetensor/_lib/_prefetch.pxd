# Software prefetch (_prefetch.h): the line at p, or `off` bytes past p (never faults).
cdef extern from "_prefetch.h" nogil:
    void st_prefetch(const void* p)
    void st_prefetch_past(const void* p, size_t off)
    # the product kernels' prefetch distances and bounds (see _prefetch.h)
    enum:
        ST_SPMV_PF
        ST_BSR_PF
        ST_SHORT_PF_MIN_BYTES
        ST_BSR_PF_MIN_BYTES
