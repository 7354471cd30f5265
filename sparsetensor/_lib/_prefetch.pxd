# Software prefetch (_prefetch.h): the line at p, or `off` bytes past p (never faults).
cdef extern from "_prefetch.h" nogil:
    void st_prefetch(const void* p)
    void st_prefetch_past(const void* p, size_t off)
