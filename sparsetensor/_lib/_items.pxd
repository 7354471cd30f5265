# Moving the raw items of one entry (block x dense), shared by the conversion kernels.
from ._types cimport raw_t


cdef inline void copy_items(raw_t* dst, const raw_t* src, Py_ssize_t E) noexcept nogil:
    cdef Py_ssize_t e
    if E == 1:
        dst[0] = src[0]
    else:
        for e in range(E):
            dst[e] = src[e]
