# Bounds guards for kernels that trust validated indices (issue 34): memory can still change
# behind our back (a user's array shared zero-copy, another thread), so a position computed
# from an index is compared with its bound before it is read or written. One unsigned compare
# covers both ends: a negative value becomes a huge unsigned one.
from libc.stdint cimport int64_t, uint64_t


cdef inline bint bad_index(int64_t j, int64_t n) noexcept nogil:
    """j is outside [0, n)."""
    return <uint64_t>j >= <uint64_t>n


cdef inline bint bad_segment(int64_t lo, int64_t hi, int64_t nnz) noexcept nogil:
    """[lo, hi) is not a segment of [0, nnz): lo < 0, hi < lo or hi > nnz."""
    return <uint64_t>lo > <uint64_t>hi or <uint64_t>hi > <uint64_t>nnz


cdef inline int64_t clamp(int64_t v, int64_t lo, int64_t hi) noexcept nogil:
    """v within [lo, hi] (hi >= lo): a bound on a trip count or a segment end."""
    return lo if v < lo else (hi if v > hi else v)
