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
# sums over one sparse dim of compressed storage (the row and column sums of csr)
# ---------------------------------------------------------------------------
#
cdef extern from "_reduce_simd.h" nogil:
    double st_sum_f64(const double* x, int64_t lo, int64_t hi, int64_t n, int wide)
    float st_sum_f32(const float* x, int64_t lo, int64_t hi, int64_t n, int wide)
    int64_t st_sum_i64(const int64_t* x, int64_t lo, int64_t hi, int64_t n, int wide)

# The compressed index c is (B, G + 1) (G slots: rows of csr, columns of csc), the plain
# index p (B, nnz), the values x (B, nnz, A, K, E): an entry holds A * K * E values, of
# which the K items are summed and the L = A * E lanes kept (a block row of bsr is
# A = Rb lanes of K = Cb items, a dense dim E lanes). The wrappers check every shape, and
# that c[b, 0] == 0 and c[b, G] == nnz; each slot is checked (0 <= c[b, g] <= c[b, g + 1]
# <= nnz) as the loops reach it, and no value is read through a slot that is not.

cdef enum:
    BAD_COMPRESSED = 1
    BAD_PLAIN = 2
    # keys sampled per thread to split the plain range of a column sum
    SAMPLES_PER_THREAD = 256


cdef inline value_t _run_sum(const value_t* x, Py_ssize_t m) noexcept nogil:
    """x[0] + ... + x[m - 1]: floats and complex in four interleaved partial sums (independent
    adds the CPU overlaps; no less accurate than one running sum), integers in one (any order
    gives the same sum, and the compiler vectorises it; GCC 12 miscompiles the four-sum
    loop for int8/int16 at -O3, tests/test_kernel_reduce.py)."""
    cdef value_t s0 = 0, s1 = 0, s2 = 0, s3 = 0
    cdef Py_ssize_t i = 0
    if value_t is int8_t or value_t is int16_t or value_t is int32_t or value_t is int64_t or value_t is uint8_t:
        for i in range(m):
            s0 = s0 + x[i]
        return s0
    while i + 4 <= m:
        s0 = s0 + x[i]
        s1 = s1 + x[i + 1]
        s2 = s2 + x[i + 2]
        s3 = s3 + x[i + 3]
        i = i + 4
    while i < m:
        s0 = s0 + x[i]
        i = i + 1
    return (s0 + s1) + (s2 + s3)


cdef inline void _lanes_add(const value_t* x, Py_ssize_t count, Py_ssize_t A, Py_ssize_t K, Py_ssize_t E,
                            value_t* acc) noexcept nogil:
    """acc[a * E + e] += x[j, a, k, e] over the count entries j and the K items k."""
    cdef Py_ssize_t j, a, k, e, KE = K * E
    cdef const value_t* row
    cdef value_t* o
    if E == 1:
        if A == 1:
            acc[0] = acc[0] + _run_sum(x, count * K)
            return
        for j in range(count):
            for a in range(A):
                acc[a] = acc[a] + _run_sum(x + (j * A + a) * K, K)
        return
    for j in range(count):
        for a in range(A):
            row = x + (j * A + a) * KE
            o = acc + a * E
            for k in range(K):
                for e in range(E):
                    o[e] = o[e] + row[k * E + e]


cdef inline void _zero(value_t* o, Py_ssize_t m) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(m):
        o[i] = 0


cdef inline bint _bad_slot(int64_t lo, int64_t hi, int64_t nnz) noexcept nogil:
    return lo < 0 or hi < lo or hi > nnz


cdef inline int64_t _clamp(int64_t v, int64_t nnz) noexcept nogil:
    return 0 if v < 0 else (nnz if v > nnz else v)


cdef Py_ssize_t _bad_ends(const index_t* c, Py_ssize_t B, Py_ssize_t G, int64_t nnz) noexcept nogil:
    """The first batch whose compressed indices do not start at 0 and end at nnz, or -1."""
    cdef Py_ssize_t b
    for b in range(B):
        if c[b * (G + 1)] != 0 or c[b * (G + 1) + G] != nnz:
            return b
    return -1


cdef enum:
    # the value dtypes of the sums (_sum_code)
    V_I8, V_I16, V_I32, V_I64, V_U8, V_F32, V_F64, V_C64, V_C128


cdef int _sum_code(cnp.ndarray a) noexcept:
    """The V_* code of a's dtype (native byte order), or -1."""
    cdef int t = cnp.PyArray_TYPE(a)
    cdef Py_ssize_t size = cnp.PyArray_ITEMSIZE(a)
    if not cnp.PyArray_ISNOTSWAPPED(a):
        return -1
    if t == cnp.NPY_BYTE:
        return V_I8
    if t == cnp.NPY_SHORT:
        return V_I16
    if t == cnp.NPY_INT or t == cnp.NPY_LONG or t == cnp.NPY_LONGLONG:
        return V_I32 if size == 4 else (V_I64 if size == 8 else -1)
    if t == cnp.NPY_UBYTE:
        return V_U8
    if t == cnp.NPY_FLOAT:
        return V_F32
    if t == cnp.NPY_DOUBLE:
        return V_F64
    if t == cnp.NPY_CFLOAT:
        return V_C64
    if t == cnp.NPY_CDOUBLE:
        return V_C128
    return -1


cdef int _check_ends(cnp.ndarray c, int icode, Py_ssize_t B, Py_ssize_t G, Py_ssize_t nnz) except -1:
    """c[b, 0] == 0 and c[b, G] == nnz for every batch (the slots are checked as they are read)."""
    cdef Py_ssize_t b = (_bad_ends(<const int32_t*>cnp.PyArray_DATA(c), B, G, nnz) if icode == 0 else
                         _bad_ends(<const int64_t*>cnp.PyArray_DATA(c), B, G, nnz))
    if b >= 0:
        raise ValueError(f"compressed indices of batch {b} must start at 0 and end at nnz = {nnz}, "
                         f"got {c[b, 0]} and {c[b, G]}")
    return 0


def _raise_found(int kind, int64_t where, Py_ssize_t G, Py_ssize_t nnz):
    if kind == BAD_COMPRESSED:
        raise ValueError(f"compressed indices must be non-decreasing within [0, {nnz}]: batch {where // G}, "
                         f"slot {where % G}")
    raise ValueError(f"plain index out of range: batch {where // nnz}, entry {where % nnz}")


# -- row sums (the plain dim reduced): a sum per slot, threads on merge-path ranges ------------------

cdef inline int64_t _slot_end(const index_t* c, Py_ssize_t G, int64_t nnz, Py_ssize_t u) noexcept nogil:
    """Where flattened slot u (batch u // G, slot u % G) ends in the flattened entries (clamped)."""
    cdef Py_ssize_t b = u // G
    return b * nnz + _clamp(c[b * (G + 1) + u - b * G + 1], nnz)


cdef void _merge_path(const index_t* c, Py_ssize_t G, int64_t nnz, Py_ssize_t U, int64_t N, int64_t d,
                      Py_ssize_t* slot, int64_t* entry) noexcept nogil:
    """The point of the merge path (U slot ends against N entries) on diagonal d: the slots
    before it end at or before `entry`, and slot + entry == d (Merrill and Garland, 2016)."""
    cdef int64_t lo = d - N if d > N else 0, hi = d if d < U else U, mid
    while lo < hi:
        mid = lo + (hi - lo) // 2
        if _slot_end(c, G, nnz, mid) <= d - 1 - mid:
            lo = mid + 1
        else:
            hi = mid
    slot[0] = lo
    entry[0] = d - lo


cdef int64_t _slot_sums(const index_t* c, const value_t* x, value_t* out, Py_ssize_t G, int64_t nnz,
                        Py_ssize_t A, Py_ssize_t K, Py_ssize_t E, Py_ssize_t u0, Py_ssize_t u1, int64_t j0,
                        int64_t j1, Py_ssize_t U, value_t* tail) noexcept nogil:
    """out rows of the flattened slots [u0, u1), counting their entries from j0 on (those
    before are an earlier range's tail); then, when tail is not NULL and u1 < U, slot u1's
    entries before j1 summed into tail. Returns the first broken slot, or -1."""
    cdef Py_ssize_t W = A * K * E, L = A * E, u, b, r
    cdef int64_t lo, hi, n = (U // G) * nnz
    cdef const index_t* cb
    cdef value_t* o
    cdef int wide = n > 8 * U  # two vectors a trip, unless the slots are short (_reduce_simd.h)
    b = u0 // G
    r = u0 - b * G
    cb = c + b * (G + 1) + r
    for u in range(u0, u1):
        if r == G:  # the next batch
            b = b + 1
            r = 0
            cb = cb + 1
        lo = cb[0]
        hi = cb[1]
        cb = cb + 1
        r = r + 1
        if _bad_slot(lo, hi, nnz):
            return u
        lo = lo + b * nnz
        hi = hi + b * nnz
        if lo < j0:
            lo = j0 if j0 < hi else hi
        o = out + u * L
        if W == 1:
            if value_t is double:
                o[0] = st_sum_f64(x, lo, hi, n, wide)
            elif value_t is float:
                o[0] = st_sum_f32(x, lo, hi, n, wide)
            elif value_t is int64_t:
                o[0] = st_sum_i64(x, lo, hi, n, wide)
            else:
                o[0] = _run_sum(x + lo, hi - lo)
        elif L == 1:
            o[0] = _run_sum(x + lo * W, (hi - lo) * K)
        else:
            _zero(o, L)
            _lanes_add(x + lo * W, hi - lo, A, K, E, o)
    if tail != NULL:
        _zero(tail, L)
        if u1 < U:
            b = u1 // G
            cb = c + b * (G + 1) + (u1 - b * G)
            lo = b * nnz + _clamp(cb[0], nnz)
            hi = b * nnz + _clamp(cb[1], nnz)
            if lo < j0:
                lo = j0
            if hi > j1:
                hi = j1
            if hi > lo:
                _lanes_add(x + lo * W, hi - lo, A, K, E, tail)
    return -1


cdef int64_t _compressed_core(const index_t* cp, const value_t* xp, value_t* op_, Py_ssize_t B, Py_ssize_t G,
                             Py_ssize_t nnz, Py_ssize_t A, Py_ssize_t K, Py_ssize_t E, int nt) noexcept nogil:
    """compressed_sum on checked shapes (B * G > 0, A * E > 0); returns the first broken slot,
    -1, or -2 when out of memory."""
    cdef Py_ssize_t L = A * E, U = B * G, part, s
    cdef int64_t N = <int64_t>B * nnz, found = -1
    cdef Py_ssize_t* slots
    cdef int64_t* entries
    cdef int64_t* bad
    cdef value_t* tails
    if nt == 1:
        return _slot_sums(cp, xp, op_, G, nnz, A, K, E, 0, U, 0, N, U, <value_t*>NULL)
    slots = <Py_ssize_t*>malloc((nt + 1) * sizeof(Py_ssize_t))
    entries = <int64_t*>malloc((nt + 1) * sizeof(int64_t))
    bad = <int64_t*>malloc(nt * sizeof(int64_t))
    tails = <value_t*>malloc(nt * L * sizeof(value_t))
    if slots == NULL or entries == NULL or bad == NULL or tails == NULL:
        found = -2
    else:
        for part in range(nt + 1):
            _merge_path(cp, G, nnz, U, N, (<int64_t>U + N) * part // nt, &slots[part], &entries[part])
            if part:  # broken indices may bend the path: keep the ranges in order
                slots[part] = max(slots[part], slots[part - 1])
                entries[part] = max(entries[part], entries[part - 1])
        slots[nt] = U
        entries[nt] = N
        for part in prange(nt, schedule="static", num_threads=nt):
            bad[part] = _slot_sums(cp, xp, op_, G, nnz, A, K, E, slots[part], slots[part + 1], entries[part],
                                   entries[part + 1], U, tails + part * L)
        for part in range(nt):
            found = bad[part] if found < 0 else found
        if found < 0:  # a range's tail belongs to the slot the next range starts in
            for part in range(nt - 1):
                if slots[part + 1] < U:
                    for s in range(L):
                        op_[slots[part + 1] * L + s] = op_[slots[part + 1] * L + s] + tails[part * L + s]
    free(slots)
    free(entries)
    free(bad)
    free(tails)
    return found


cdef int64_t _compressed_typed(const index_t* c, int vcode, const void* x, void* out, Py_ssize_t B, Py_ssize_t G,
                               Py_ssize_t nnz, Py_ssize_t A, Py_ssize_t K, Py_ssize_t E, int nt) noexcept nogil:
    if vcode == V_I8:
        return _compressed_core(c, <const int8_t*>x, <int8_t*>out, B, G, nnz, A, K, E, nt)
    if vcode == V_I16:
        return _compressed_core(c, <const int16_t*>x, <int16_t*>out, B, G, nnz, A, K, E, nt)
    if vcode == V_I32:
        return _compressed_core(c, <const int32_t*>x, <int32_t*>out, B, G, nnz, A, K, E, nt)
    if vcode == V_I64:
        return _compressed_core(c, <const int64_t*>x, <int64_t*>out, B, G, nnz, A, K, E, nt)
    if vcode == V_U8:
        return _compressed_core(c, <const uint8_t*>x, <uint8_t*>out, B, G, nnz, A, K, E, nt)
    if vcode == V_F32:
        return _compressed_core(c, <const float*>x, <float*>out, B, G, nnz, A, K, E, nt)
    if vcode == V_F64:
        return _compressed_core(c, <const double*>x, <double*>out, B, G, nnz, A, K, E, nt)
    if vcode == V_C64:
        return _compressed_core(c, <const cfloat_t*>x, <cfloat_t*>out, B, G, nnz, A, K, E, nt)
    return _compressed_core(c, <const cdouble_t*>x, <cdouble_t*>out, B, G, nnz, A, K, E, nt)


def compressed_sum(compressed, x, out, int nthreads):
    """out[b, g, a, e] = sum of x[b, j, a, k, e] over the entries j of slot g (c[b, g] <= j <
    c[b, g + 1]) and the K items k: the row sums of csr (column sums of csc).

    Threads split the slots and entries together (merge-path ranges: one long slot is
    shared by several threads, whose partial sums are added at the end), so a hub row
    holds up no thread. Floating sums are sets of partial sums added pairwise.
    """
    cdef cnp.ndarray c = _array(compressed, "compressed", 2), xa = _array(x, "x", 5), o = _array(out, "out", 4)
    cdef int icode = _index_code(c), vcode = _sum_code(xa)
    cdef Py_ssize_t B = _dim(c, 0), G = _dim(c, 1) - 1, nnz = _dim(xa, 1)
    cdef Py_ssize_t A = _dim(xa, 2), K = _dim(xa, 3), E = _dim(xa, 4)
    cdef int64_t found = -1
    if icode < 0:
        raise TypeError(f"compressed must be int32 or int64, got {compressed.dtype}")
    if vcode < 0 or cnp.PyArray_TYPE(o) != cnp.PyArray_TYPE(xa) or not cnp.PyArray_ISWRITEABLE(o):
        raise TypeError(f"x and out must have one sum dtype (int8..int64, uint8, float32/64, complex64/128) and out "
                        f"be writeable, got {x.dtype} and {out.dtype}")
    if G < 0:
        raise ValueError("compressed indices must have at least one entry per batch")
    if _dim(xa, 0) != B or _dim(o, 0) != B or _dim(o, 1) != G or _dim(o, 2) != A or _dim(o, 3) != E:
        raise ValueError(f"compressed {compressed.shape}, x {x.shape} and out {out.shape} disagree: want "
                         "x (B, nnz, A, K, E) and out (B, G, A, E)")
    _check_ends(c, icode, B, G, nnz)
    if B * G == 0 or A * E == 0:
        return
    cdef const void* cp = cnp.PyArray_DATA(c)
    cdef const void* xp = cnp.PyArray_DATA(xa)
    cdef void* op_ = cnp.PyArray_DATA(o)
    cdef int nt = split_threads(_threads(nthreads), <int64_t>B * nnz * A * K * E)
    with nogil:
        if icode == 0:
            found = _compressed_typed(<const int32_t*>cp, vcode, xp, op_, B, G, nnz, A, K, E, nt)
        else:
            found = _compressed_typed(<const int64_t*>cp, vcode, xp, op_, B, G, nnz, A, K, E, nt)
    if found == -2:
        raise MemoryError()
    if found >= 0:
        _raise_found(BAD_COMPRESSED, found, G, nnz)


# -- column sums (the compressed dim reduced): a scatter by plain index ------------------------------

cdef inline void _add_entry(const value_t* xe, value_t* o, Py_ssize_t A, Py_ssize_t K, Py_ssize_t E) noexcept nogil:
    """o[a * E + e] += x[a, k, e] summed over k, for one entry's values xe."""
    if A == 1 and E == 1:
        o[0] = o[0] + (xe[0] if K == 1 else _run_sum(xe, K))
    else:
        _lanes_add(xe, 1, A, K, E, o)


cdef Py_ssize_t _first_descent(const index_t* c, Py_ssize_t B, Py_ssize_t G) noexcept nogil:
    """The first flattened slot where c[b, g + 1] < c[b, g], or -1 (one branch-free pass first)."""
    cdef Py_ssize_t b, g
    cdef bint bad = False
    for b in range(B):
        for g in range(G):
            bad = bad | (c[b * (G + 1) + g + 1] < c[b * (G + 1) + g])
    if bad:
        for b in range(B):
            for g in range(G):
                if c[b * (G + 1) + g + 1] < c[b * (G + 1) + g]:
                    return b * G + g
    return -1


cdef int64_t _scatter_serial(const index_t* c, const index_t* p, const value_t* x, value_t* out, Py_ssize_t B,
                             Py_ssize_t G, int64_t nnz, Py_ssize_t P, Py_ssize_t A, Py_ssize_t K, Py_ssize_t E,
                             int* kind) noexcept nogil:
    """out (zeroed here) += every entry at its plain index; returns -1, or the flattened slot
    (kind BAD_COMPRESSED) or entry (BAD_PLAIN) where an index is broken. The slots only need
    to be in order (their ends are checked by the wrapper): then every entry is in exactly
    one slot, and the entries are added in one flat pass."""
    cdef Py_ssize_t W = A * K * E, L = A * E, b
    cdef int64_t j, q, found = _first_descent(c, B, G)
    cdef const index_t* pb
    cdef const value_t* xb
    cdef value_t* ob
    if found >= 0:
        kind[0] = BAD_COMPRESSED
        return found
    _zero(out, B * P * L)
    for b in range(B):
        pb = p + b * nnz
        xb = x + b * nnz * W
        ob = out + b * P * L
        if W == 1:
            for j in range(nnz):
                q = pb[j]
                if <uint64_t>q >= <uint64_t>P:
                    kind[0] = BAD_PLAIN
                    return b * nnz + j
                ob[q] = ob[q] + xb[j]
        else:
            for j in range(nnz):
                q = pb[j]
                if <uint64_t>q >= <uint64_t>P:
                    kind[0] = BAD_PLAIN
                    return b * nnz + j
                _add_entry(xb + j * W, ob + q * L, A, K, E)
    return -1


cdef int64_t _scatter_range(const index_t* c, const index_t* p, const value_t* x, value_t* out, Py_ssize_t B,
                            Py_ssize_t G, int64_t nnz, Py_ssize_t P, Py_ssize_t A, Py_ssize_t K, Py_ssize_t E,
                            int64_t qlo, int64_t qhi, int where, int64_t* done) noexcept nogil:
    """The entries with plain index in [qlo, qhi) into out[:, qlo:qhi] (zeroed here), found in
    each slot as a run of its sorted plain indices: from the slot's start (where < 0: the
    first range), from its end backwards (where > 0: the last range), or by a binary search.
    done[0] counts the entries added: if the plain indices of a slot are not sorted, some
    are missed, which the caller sees in the total. Returns the first broken slot, or -1."""
    cdef Py_ssize_t W = A * K * E, L = A * E, b, r
    cdef int64_t j, lo, hi, s, m, q, count = 0
    cdef const index_t* pb
    cdef const value_t* xb
    cdef value_t* ob
    for b in range(B):
        _zero(out + (b * P + qlo) * L, (qhi - qlo) * L)
    for b in range(B):
        pb = p + b * nnz
        xb = x + b * nnz * W
        ob = out + b * P * L
        for r in range(G):
            lo = c[b * (G + 1) + r]
            hi = c[b * (G + 1) + r + 1]
            if _bad_slot(lo, hi, nnz):
                done[0] = count
                return b * G + r
            if where > 0:  # the last range: from the end, back to the first index below qlo
                j = hi
                while j > lo and pb[j - 1] >= qlo and pb[j - 1] < qhi:
                    j = j - 1
                s, hi = j, hi
            else:
                if where < 0:
                    s = lo
                else:  # the first index >= qlo (binary search)
                    s, m = lo, hi
                    while s < m:
                        j = s + (m - s) // 2
                        if pb[j] < qlo:
                            s = j + 1
                        else:
                            m = j
                j = s
                while j < hi and pb[j] >= qlo and pb[j] < qhi:
                    j = j + 1
                hi = j
            count = count + (hi - s)
            if W == 1:
                for j in range(s, hi):
                    q = pb[j]
                    ob[q] = ob[q] + xb[j]
            else:
                for j in range(s, hi):
                    _add_entry(xb + j * W, ob + pb[j] * L, A, K, E)
    done[0] = count
    return -1


cdef int _cmp_int64(const void* a, const void* b) noexcept nogil:
    cdef int64_t x = (<const int64_t*>a)[0], y = (<const int64_t*>b)[0]
    return (x > y) - (x < y)


cdef int _plain_splits(const index_t* p, int64_t N, Py_ssize_t P, int nparts, int64_t* bounds) noexcept nogil:
    """bounds[0 .. nparts]: the plain range [0, P) split at quantiles of a sample of the plain
    indices (entries of about equal count per range); -1 when out of memory."""
    cdef int64_t S = min(N, <int64_t>SAMPLES_PER_THREAD * nparts), s, q
    cdef int64_t* sample = <int64_t*>malloc(max(S, 1) * sizeof(int64_t))
    cdef int t
    if sample == NULL:
        return -1
    for s in range(S):
        q = p[(N - 1) * s // max(S - 1, 1)] if S > 1 else p[0]
        sample[s] = q if 0 <= q < P else (0 if q < 0 else P - 1)
    qsort(sample, S, sizeof(int64_t), _cmp_int64)
    bounds[0] = 0
    for t in range(1, nparts):
        bounds[t] = max(sample[S * t // nparts], bounds[t - 1])
    bounds[nparts] = P
    free(sample)
    return 0


cdef int64_t _plain_core(const index_t* cp, const index_t* pp, const value_t* xp, value_t* op_, Py_ssize_t B,
                        Py_ssize_t G, Py_ssize_t nnz, Py_ssize_t P, Py_ssize_t A, Py_ssize_t K, Py_ssize_t E, int nt,
                        int* kind) noexcept nogil:
    """plain_sum on checked shapes (B * G > 0); returns -1, the flattened slot (kind
    BAD_COMPRESSED) or entry (BAD_PLAIN) of the first broken index, or -2 when out of memory."""
    cdef int64_t N = <int64_t>B * nnz, found = -1, total = 0
    cdef int part
    cdef int64_t* bounds
    cdef int64_t* bad
    cdef int64_t* done
    kind[0] = BAD_COMPRESSED
    # a range per thread pays when the slots are not many more than the entries per thread:
    # every thread walks every slot
    if nt > 1 and P > 1 and A * E and <int64_t>B * G * 2 <= N:
        bounds = <int64_t*>malloc((nt + 1) * sizeof(int64_t))
        bad = <int64_t*>malloc(nt * sizeof(int64_t))
        done = <int64_t*>malloc(nt * sizeof(int64_t))
        if bounds == NULL or bad == NULL or done == NULL or _plain_splits(pp, N, P, nt, bounds) != 0:
            total = -1
        else:
            for part in prange(nt, schedule="static", num_threads=nt):
                bad[part] = _scatter_range(cp, pp, xp, op_, B, G, nnz, P, A, K, E, bounds[part], bounds[part + 1],
                                           -1 if part == 0 else (1 if part == nt - 1 else 0), &done[part])
            for part in range(nt):
                found = bad[part] if found < 0 else found
                total = total + done[part]
        free(bounds)
        free(bad)
        free(done)
        if found >= 0 or total == N:
            return found
    # one thread: also where a slot's plain indices are unsorted or out of range
    return _scatter_serial(cp, pp, xp, op_, B, G, nnz, P, A, K, E, kind)


cdef int64_t _plain_typed(const index_t* c, const index_t* p, int vcode, const void* x, void* out, Py_ssize_t B,
                          Py_ssize_t G, Py_ssize_t nnz, Py_ssize_t P, Py_ssize_t A, Py_ssize_t K, Py_ssize_t E, int nt,
                          int* kind) noexcept nogil:
    if vcode == V_I8:
        return _plain_core(c, p, <const int8_t*>x, <int8_t*>out, B, G, nnz, P, A, K, E, nt, kind)
    if vcode == V_I16:
        return _plain_core(c, p, <const int16_t*>x, <int16_t*>out, B, G, nnz, P, A, K, E, nt, kind)
    if vcode == V_I32:
        return _plain_core(c, p, <const int32_t*>x, <int32_t*>out, B, G, nnz, P, A, K, E, nt, kind)
    if vcode == V_I64:
        return _plain_core(c, p, <const int64_t*>x, <int64_t*>out, B, G, nnz, P, A, K, E, nt, kind)
    if vcode == V_U8:
        return _plain_core(c, p, <const uint8_t*>x, <uint8_t*>out, B, G, nnz, P, A, K, E, nt, kind)
    if vcode == V_F32:
        return _plain_core(c, p, <const float*>x, <float*>out, B, G, nnz, P, A, K, E, nt, kind)
    if vcode == V_F64:
        return _plain_core(c, p, <const double*>x, <double*>out, B, G, nnz, P, A, K, E, nt, kind)
    if vcode == V_C64:
        return _plain_core(c, p, <const cfloat_t*>x, <cfloat_t*>out, B, G, nnz, P, A, K, E, nt, kind)
    return _plain_core(c, p, <const cdouble_t*>x, <cdouble_t*>out, B, G, nnz, P, A, K, E, nt, kind)


def plain_sum(compressed, plain, x, out, int nthreads):
    """out[b, q, a, e] = sum of x[b, j, a, k, e] over the entries j with plain[b, j] == q and the
    K items k: the column sums of csr (row sums of csc). Plain indices out of [0, P) raise
    ValueError naming the entry.

    Threads own ranges of the plain dim (split at quantiles of a sample of the plain
    indices) and take, in every slot, the run of its sorted plain indices that falls in
    their range: no per-thread copies of the output, no atomics, and each sum is added in
    the order one thread would add it. Slots whose plain indices are not sorted show up in
    the count of entries added; the sum is then redone on one thread.
    """
    cdef cnp.ndarray c = _array(compressed, "compressed", 2), pa = _array(plain, "plain", 2)
    cdef cnp.ndarray xa = _array(x, "x", 5), o = _array(out, "out", 4)
    cdef int icode = _index_code(c), vcode = _sum_code(xa), kind = BAD_COMPRESSED
    cdef Py_ssize_t B = _dim(c, 0), G = _dim(c, 1) - 1, nnz = _dim(pa, 1), P = _dim(o, 1)
    cdef Py_ssize_t A = _dim(xa, 2), K = _dim(xa, 3), E = _dim(xa, 4)
    cdef int64_t found = -1
    if icode < 0 or _index_code(pa) != icode:
        raise TypeError(f"compressed and plain must be int32 or int64, of one dtype, got {compressed.dtype} and "
                        f"{plain.dtype}")
    if vcode < 0 or cnp.PyArray_TYPE(o) != cnp.PyArray_TYPE(xa) or not cnp.PyArray_ISWRITEABLE(o):
        raise TypeError(f"x and out must have one sum dtype (int8..int64, uint8, float32/64, complex64/128) and out "
                        f"be writeable, got {x.dtype} and {out.dtype}")
    if G < 0:
        raise ValueError("compressed indices must have at least one entry per batch")
    if (_dim(pa, 0) != B or _dim(xa, 0) != B or _dim(xa, 1) != nnz or _dim(o, 0) != B or _dim(o, 2) != A
            or _dim(o, 3) != E):
        raise ValueError(f"compressed {compressed.shape}, plain {plain.shape}, x {x.shape} and out {out.shape} "
                         "disagree: want plain (B, nnz), x (B, nnz, A, K, E), out (B, P, A, E)")
    _check_ends(c, icode, B, G, nnz)
    if B * G == 0:
        out[...] = 0
        return
    cdef const void* cp = cnp.PyArray_DATA(c)
    cdef const void* pp = cnp.PyArray_DATA(pa)
    cdef const void* xp = cnp.PyArray_DATA(xa)
    cdef void* op_ = cnp.PyArray_DATA(o)
    cdef int nt = split_threads(_threads(nthreads), <int64_t>B * nnz * A * K * E)
    with nogil:
        if icode == 0:
            found = _plain_typed(<const int32_t*>cp, <const int32_t*>pp, vcode, xp, op_, B, G, nnz, P, A, K, E, nt,
                                 &kind)
        else:
            found = _plain_typed(<const int64_t*>cp, <const int64_t*>pp, vcode, xp, op_, B, G, nnz, P, A, K, E, nt,
                                 &kind)
    if found == -2:
        raise MemoryError()
    if found >= 0:
        _raise_found(kind, found, G, nnz)


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
