# The work split shared by the row-parallel kernels: contiguous ranges of units (a unit is
# `step` consecutive compressed slots of one batch, flattened over batches) of about equal
# work, w per entry plus 1 per unit, found by binary searches of the compressed index. One
# hub row then holds up one range, not one thread for a fixed share of the rows.
#
# Safe on broken input: each compressed entry is clamped to [0, nnz] before use, so the
# bounds are non-decreasing, within [0, units], and no read leaves c[0 .. B * (n + 1)).
from libc.stdint cimport int64_t

from ._types cimport index_t


cdef inline int64_t _entries_before(const index_t* c, Py_ssize_t n, Py_ssize_t nnz, Py_ssize_t step,
                                    Py_ssize_t nu, Py_ssize_t u) noexcept nogil:
    """Entries of the batches before unit u's plus c at its first slot (clamped to [0, nnz])."""
    cdef Py_ssize_t b = u // nu, i = u - b * nu
    cdef int64_t x
    if i == 0:  # a batch starts here (or the end): only whole batches before it
        return <int64_t>b * nnz
    x = c[b * (n + 1) + i * step]
    if x < 0:
        x = 0
    elif x > nnz:
        x = nnz
    return <int64_t>b * nnz + x


cdef inline int64_t _work_before(const index_t* c, Py_ssize_t nnz, const index_t* c2, Py_ssize_t nnz2,
                                 Py_ssize_t n, Py_ssize_t step, Py_ssize_t nu, int64_t w,
                                 Py_ssize_t u) noexcept nogil:
    cdef int64_t x = _entries_before(c, n, nnz, step, nu, u)
    if c2 != NULL:
        x += _entries_before(c2, n, nnz2, step, nu, u)
    return x * w + u


cdef inline void balanced_split(const index_t* c, Py_ssize_t nnz, const index_t* c2, Py_ssize_t nnz2,
                                Py_ssize_t B, Py_ssize_t n, Py_ssize_t step, int64_t w, Py_ssize_t parts,
                                Py_ssize_t* bounds) noexcept nogil:
    """bounds[0 .. parts]: the B * (n // step) units of compressed index c ((B, n + 1) with nnz
    entries per batch; c2 a second one of the same shape, or NULL) split into `parts` ranges of
    about equal work: w per entry (of c and c2) plus 1 per unit."""
    cdef Py_ssize_t nu = n // step, U = B * (n // step), lo, hi, mid, t
    cdef int64_t total, goal
    bounds[0] = 0
    bounds[parts] = U
    if U == 0:
        for t in range(1, parts):
            bounds[t] = 0
        return
    total = _work_before(c, nnz, c2, nnz2, n, step, nu, w, U)
    for t in range(1, parts):
        goal = total * t // parts
        lo = bounds[t - 1]
        hi = U
        while lo < hi:
            mid = lo + (hi - lo) // 2
            if _work_before(c, nnz, c2, nnz2, n, step, nu, w, mid) < goal:
                lo = mid + 1
            else:
                hi = mid
        bounds[t] = lo
