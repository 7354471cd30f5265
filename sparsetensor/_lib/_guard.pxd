# Bounds guards for kernels that trust validated indices (issue 34): memory can still change
# behind our back (a user's array shared zero-copy, another thread), so a position computed
# from an index is compared with its bound before it is read or written. One unsigned compare
# covers both ends: a negative value becomes a huge unsigned one.
from libc.stdint cimport int64_t, uint64_t

from ._types cimport index_t


cdef inline bint bad_index(int64_t j, int64_t n) noexcept nogil:
    """j is outside [0, n)."""
    return <uint64_t>j >= <uint64_t>n


cdef inline bint bad_segment(int64_t lo, int64_t hi, int64_t nnz) noexcept nogil:
    """[lo, hi) is not a segment of [0, nnz): lo < 0, hi < lo or hi > nnz."""
    return <uint64_t>lo > <uint64_t>hi or <uint64_t>hi > <uint64_t>nnz


cdef inline int64_t clamp(int64_t v, int64_t lo, int64_t hi) noexcept nogil:
    """v within [lo, hi] (hi >= lo): a bound on a trip count or a segment end."""
    return lo if v < lo else (hi if v > hi else v)


cdef inline bint bad_compressed(const index_t* c, Py_ssize_t B, Py_ssize_t n, int64_t nnz) noexcept nogil:
    """Whether a (B, n + 1) compressed index breaks 5.1-5.3: a batch that does not start at 0 or
    end at nnz, or an entry below the one before it. Branch free (vectorised): an O(n) look for
    kernels whose loops follow the rows and write by them (merges), run where they start."""
    cdef Py_ssize_t b, i
    cdef const index_t* cb
    cdef int bad = 0
    for b in range(B):
        cb = c + b * (n + 1)
        bad = bad | (cb[0] != 0) | (cb[n] != nnz)
        for i in range(n):
            bad = bad | (cb[i + 1] < cb[i])
    return bad != 0


cdef inline bint bad_plain(const index_t* p, Py_ssize_t N, int64_t bound) noexcept nogil:
    """Whether an entry of p[0:N] is outside [0, bound). Branch free (vectorised)."""
    cdef Py_ssize_t k
    cdef int bad = 0
    for k in range(N):
        bad = bad | (<uint64_t><int64_t>p[k] >= <uint64_t>bound)
    return bad != 0
