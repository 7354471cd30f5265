"""Segmented reductions and softmax (Cython, OpenMP), for sparsetensor.ops.reduce.

A *segment* is a run of rows ``offsets[g]:offsets[g + 1]`` of a values array viewed
as ``(n, K * E)``: ``K`` items per row that the segment reduces over as well (the
items of a block along the reduced dim) and ``E`` independent lanes (the other items
of a block, times the dense items). Rows are read in order, or through ``perm``
(row ``perm[i]`` for position ``i``) when that is not empty.

Segments are independent: the kernels run in parallel over them, each writing its
own output row(s). The ``def`` wrappers check shapes, offsets and permutations, so
the ``nogil`` loops never read or write out of bounds.
"""

from cython.parallel cimport prange
from libc.math cimport exp, expf, log, logf, INFINITY
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint64_t
from libc.stdlib cimport free, malloc, qsort

cimport numpy as cnp
import numpy as np

from ._arrays cimport _array, _dim, _index_code
from ._balance cimport balanced_split
from ._parallel cimport split_threads
from ._types cimport index_t, real_t, value_t

ctypedef float complex cfloat_t
ctypedef double complex cdouble_t

ctypedef fused float_t:
    float
    double

# Segment ranges per thread (dynamic schedule).
cdef Py_ssize_t PARTS_PER_THREAD = 8

cdef enum:
    OP_SUM = 0
    OP_MAX = 1
    OP_MIN = 2

OPS = {"sum": OP_SUM, "max": OP_MAX, "min": OP_MIN}

cnp.import_array()


cdef int _threads(int nthreads) noexcept nogil:
    """The count handed in (small inputs get 1 from the gate, sparsetensor._config.num_threads)."""
    return 1 if nthreads < 1 else nthreads


def _check(const int64_t[::1] offsets, const int64_t[::1] perm, Py_ssize_t n, Py_ssize_t G):
    """Offsets non-decreasing within [0, n] (G + 1 of them); perm empty or of length n with entries in [0, n)."""
    cdef Py_ssize_t g, i
    cdef bint bad = False
    if offsets.shape[0] != G + 1:
        raise ValueError(f"offsets must have {G + 1} entries, got {offsets.shape[0]}")
    if G:
        bad = offsets[0] < 0 or offsets[G] > n
        for g in range(G):
            bad = bad | (offsets[g + 1] < offsets[g])
        if bad:
            raise ValueError(f"offsets must be non-decreasing within [0, {n}]")
    if perm.shape[0]:
        bad = perm.shape[0] != n
        if not bad:
            for i in range(n):
                bad = bad | (<uint64_t>perm[i] >= <uint64_t>n)
        if bad:
            raise ValueError(f"perm must hold {n} rows in [0, {n})")


# ---------------------------------------------------------------------------
# segment reductions
# ---------------------------------------------------------------------------

cdef inline Py_ssize_t _row(const int64_t* perm, Py_ssize_t i) noexcept nogil:
    return perm[i] if perm != NULL else i


cdef void _segment_sum(const int64_t* off, const int64_t* perm, const value_t* x, value_t* out, Py_ssize_t g0,
                       Py_ssize_t g1, Py_ssize_t K, Py_ssize_t E) noexcept nogil:
    """Segments [g0, g1)."""
    cdef Py_ssize_t W = K * E, g, i, k, e, r
    cdef value_t acc
    for g in range(g0, g1):
        for e in range(E):  # a local accumulator per lane (out may alias nothing, but the compiler cannot know)
            acc = 0
            for i in range(off[g], off[g + 1]):
                r = _row(perm, i) * W + e
                for k in range(K):
                    acc = acc + x[r + k * E]
            out[g * E + e] = acc


cdef void _segment_minmax(const int64_t* off, const int64_t* perm, const real_t* x, real_t* out, Py_ssize_t g0,
                          Py_ssize_t g1, Py_ssize_t K, Py_ssize_t E, bint is_max) noexcept nogil:
    """Segments [g0, g1); out[g, e] starts as the identity (the caller fills it); NaN propagates,
    as in np.maximum."""
    cdef Py_ssize_t W = K * E, g, i, k, e, r
    cdef real_t v, acc
    for g in range(g0, g1):
        for e in range(E):
            acc = out[g * E + e]
            for i in range(off[g], off[g + 1]):
                r = _row(perm, i) * W + e
                for k in range(K):
                    v = x[r + k * E]
                    if is_max:
                        if v > acc or v != v:
                            acc = v
                    elif v < acc or v != v:
                        acc = v
            out[g * E + e] = acc


cdef Py_ssize_t* _segment_parts(const int64_t* off, Py_ssize_t n, Py_ssize_t G, Py_ssize_t W, int nt,
                                Py_ssize_t* nparts) except NULL:
    """Segment ranges of about equal work (W per row plus one per segment), a few per thread;
    free() them."""
    nparts[0] = min(G, PARTS_PER_THREAD * nt)
    cdef Py_ssize_t* bounds = <Py_ssize_t*>malloc((nparts[0] + 1) * sizeof(Py_ssize_t))
    if bounds == NULL:
        raise MemoryError()
    balanced_split(off, n, <const int64_t*>NULL, 0, 1, G, 1, W, nparts[0], bounds)
    return bounds


cdef Py_ssize_t _segment_items(const int64_t[::1] offsets, const int64_t[::1] perm, Py_ssize_t n,
                               Py_ssize_t ncols, Py_ssize_t G, Py_ssize_t E) except -2:
    """K, the items per row of x (n, ncols = K * E) for out (G, E), after checking the
    arguments; -1 when there is nothing to reduce (G == 0 or E == 0)."""
    if (E == 0 and ncols != 0) or (E and ncols % E):
        raise ValueError(f"x has {ncols} columns, not a multiple of out's {E}")
    _check(offsets, perm, n, G)
    if G == 0 or E == 0:
        return -1
    return ncols // E


def segment_sum(const int64_t[::1] offsets, const int64_t[::1] perm, const value_t[:, ::1] x,
                value_t[:, ::1] out, int nthreads):
    """out[g, e] = sum of x[rows of segment g, k * E + e] over rows and k (empty segments: 0)."""
    cdef Py_ssize_t n = x.shape[0], G = out.shape[0], E = out.shape[1]
    cdef Py_ssize_t K = _segment_items(offsets, perm, n, x.shape[1], G, E)
    if K < 0:
        return
    cdef int nt = _threads(nthreads)
    cdef const int64_t* pp = &perm[0] if perm.shape[0] else NULL
    cdef const value_t* xp = &x[0, 0] if n else NULL
    cdef Py_ssize_t part, nparts
    cdef Py_ssize_t* bounds
    if nt == 1:
        with nogil:
            _segment_sum(&offsets[0], pp, xp, &out[0, 0], 0, G, K, E)
        return
    bounds = _segment_parts(&offsets[0], n, G, K * E, nt, &nparts)
    with nogil:
        for part in prange(nparts, schedule="dynamic", num_threads=nt):
            _segment_sum(&offsets[0], pp, xp, &out[0, 0], bounds[part], bounds[part + 1], K, E)
    free(bounds)


def segment_minmax(const int64_t[::1] offsets, const int64_t[::1] perm, const real_t[:, ::1] x,
                   real_t[:, ::1] out, bint is_max, int nthreads):
    """out[g, e] = max (min) of out[g, e] and x[rows of segment g, k * E + e]; NaN propagates."""
    cdef Py_ssize_t n = x.shape[0], G = out.shape[0], E = out.shape[1]
    cdef Py_ssize_t K = _segment_items(offsets, perm, n, x.shape[1], G, E)
    if K < 0:
        return
    cdef int nt = _threads(nthreads)
    cdef const int64_t* pp = &perm[0] if perm.shape[0] else NULL
    cdef const real_t* xp = &x[0, 0] if n else NULL
    cdef Py_ssize_t part, nparts
    cdef Py_ssize_t* bounds
    if nt == 1:
        with nogil:
            _segment_minmax(&offsets[0], pp, xp, &out[0, 0], 0, G, K, E, is_max)
        return
    bounds = _segment_parts(&offsets[0], n, G, K * E, nt, &nparts)
    with nogil:
        for part in prange(nparts, schedule="dynamic", num_threads=nt):
            _segment_minmax(&offsets[0], pp, xp, &out[0, 0], bounds[part], bounds[part + 1], K, E, is_max)
    free(bounds)


# ---------------------------------------------------------------------------
# scatter reductions (a key per row)
# ---------------------------------------------------------------------------

cdef Py_ssize_t _scatter_chunk(const index_t* keys, const value_t* x, value_t* out, Py_ssize_t M, Py_ssize_t E,
                               Py_ssize_t lo, Py_ssize_t hi, int op) noexcept nogil:
    """Rows [lo, hi) of x (n, E) into out (M, E); returns the first row whose key is out of range, or -1."""
    cdef Py_ssize_t i, e
    cdef int64_t key
    cdef value_t v
    cdef value_t* o
    for i in range(lo, hi):
        key = keys[i]
        if key < 0 or key >= M:
            return i
        o = out + key * E
        for e in range(E):
            v = x[i * E + e]
            if value_t is cfloat_t or value_t is cdouble_t:
                o[e] = o[e] + v
            else:
                if op == OP_SUM:
                    o[e] = o[e] + v
                elif op == OP_MAX:
                    if v > o[e] or v != v:
                        o[e] = v
                else:
                    if v < o[e] or v != v:
                        o[e] = v
    return -1


def scatter_reduce(const index_t[::1] keys, const value_t[:, ::1] x, value_t[:, :, ::1] out, str op,
                   int nthreads):
    """out[c, keys[i], :] op= x[i, :] with rows split into C = out.shape[0] chunks, chunk c into out[c].

    ``out`` is prefilled with the identity; the caller combines the C partial results
    (C = 1: no combining, serial). Keys out of [0, M) raise ValueError naming the row.
    Complex values only sum.
    """
    cdef Py_ssize_t n = x.shape[0], C = out.shape[0], c, lo, hi
    cdef int code = OPS[op]
    if keys.shape[0] != n or out.shape[2] != x.shape[1]:
        raise ValueError(f"keys ({keys.shape[0]}), x ({n}, {x.shape[1]}) and out (C, M, {out.shape[2]}) disagree")
    if value_t is cfloat_t or value_t is cdouble_t:
        if code != OP_SUM:
            raise TypeError("complex values can only be summed")
    if C == 0 or n == 0:
        return
    bad_arr = np.full(C, -1, dtype=np.int64)
    cdef int64_t[::1] bad = bad_arr
    cdef int nt = _threads(nthreads) if C > 1 else 1
    cdef Py_ssize_t M = out.shape[1], E = out.shape[2]
    if M == 0 or E == 0:
        if M == 0:
            raise ValueError(f"key {keys[0]} of row 0 is out of range [0, 0)")
        return
    cdef const index_t* kp = &keys[0]
    cdef const value_t* xp = &x[0, 0]
    cdef value_t* op_ = &out[0, 0, 0]
    with nogil:
        for c in prange(C, schedule="static", num_threads=nt):
            lo = (n // C) * c + (c if c < n % C else n % C)
            hi = lo + n // C + (1 if c < n % C else 0)
            bad[c] = _scatter_chunk(kp, xp, op_ + c * M * E, M, E, lo, hi, code)
    hits = bad_arr[bad_arr >= 0]
    if hits.size:
        i = int(hits.min())
        raise ValueError(f"key {keys[i]} of row {i} is out of range [0, {out.shape[1]})")


# ---------------------------------------------------------------------------
# sums over one sparse dim of compressed storage: _reduce_sums.pxi
# ---------------------------------------------------------------------------

include "_reduce_sums.pxi"


# ---------------------------------------------------------------------------
# segment softmax
# ---------------------------------------------------------------------------

cdef inline float_t _exp(float_t v) noexcept nogil:
    if float_t is float:
        return expf(v)
    return exp(v)


cdef inline float_t _log(float_t v) noexcept nogil:
    if float_t is float:
        return logf(v)
    return log(v)


cdef void _segment_softmax(const int64_t* off, const int64_t* perm, const float_t* x, float_t* out,
                           Py_ssize_t G, Py_ssize_t K, Py_ssize_t E, bint take_log, int nthreads) noexcept nogil:
    cdef Py_ssize_t W = K * E, g, i, k, e, r
    cdef float_t top, total, v, z, shift
    for g in prange(G, schedule="guided", num_threads=nthreads):
        for e in range(E):
            top = -INFINITY
            for i in range(off[g], off[g + 1]):
                r = _row(perm, i) * W + e
                for k in range(K):
                    v = x[r + k * E]
                    if v > top or v != v:
                        top = v
            total = 0
            for i in range(off[g], off[g + 1]):
                r = _row(perm, i) * W + e
                for k in range(K):
                    z = _exp(x[r + k * E] - top)
                    out[r + k * E] = z
                    total = total + z
            if take_log:
                shift = top + _log(total)
                for i in range(off[g], off[g + 1]):
                    r = _row(perm, i) * W + e
                    for k in range(K):
                        out[r + k * E] = x[r + k * E] - shift
            else:
                shift = 1 / total
                for i in range(off[g], off[g + 1]):
                    r = _row(perm, i) * W + e
                    for k in range(K):
                        out[r + k * E] = out[r + k * E] * shift


def segment_softmax(const int64_t[::1] offsets, const int64_t[::1] perm, const float_t[:, ::1] x,
                    float_t[:, ::1] out, Py_ssize_t E, bint take_log, int nthreads):
    """Softmax (or log-softmax) of x (n, K * E) over each segment's rows and K items, per lane e < E.

    out has x's shape; row perm[i] (or i) of out gets the result for row perm[i] of x.
    Rows outside every segment are left as they are.
    """
    cdef Py_ssize_t n = x.shape[0], G = offsets.shape[0] - 1
    if out.shape[0] != n or out.shape[1] != x.shape[1]:
        raise ValueError(f"out {out.shape[0], out.shape[1]} must have x's shape {n, x.shape[1]}")
    if G < 0 or E < 0 or (E == 0 and x.shape[1] != 0) or (E and x.shape[1] % E):
        raise ValueError(f"E={E} must divide x's {x.shape[1]} columns; offsets must not be empty")
    _check(offsets, perm, n, G)
    if G == 0 or E == 0 or n == 0:
        return
    cdef Py_ssize_t K = x.shape[1] // E
    cdef int nt = _threads(nthreads)
    with nogil:
        _segment_softmax(&offsets[0], &perm[0] if perm.shape[0] else NULL, &x[0, 0], &out[0, 0], G, K, E,
                         take_log, nt)
