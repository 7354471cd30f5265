# Elementwise binary kernels: per-row merges of two sparse patterns (union for add, sub,
# maximum and minimum; intersection for mul), the gather of a dense operand at a sparse
# pattern (sparse * dense), the key (de)linearisation that lets COO tensors use the same
# merges, and one-pass COO unions (as rows, or on keys computed on the fly).
#
# The merges see the canonical form compressed (B, n + 1), plain (B, nnz), values
# (B, nnz, E), E = the values of one entry (block x dense), for two operands with one
# index dtype and one value dtype. Plain indices are sorted and distinct within a row
# (invariant 5.6: the wrapper coalesces first), so a two-pointer merge gives sorted,
# distinct output rows. Two passes: merge_count counts every output row, the wrapper
# allocates the output once after a prefix sum, and merge_fill writes it. Both passes
# walk the same rows the same way, so even unsorted input cannot make the fill overrun
# a row; indices must satisfy 5.1-5.5 (the wrapper scans unchecked input).
cimport cython
from cython.parallel cimport prange
from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy, memmove

import numpy as np

from ._types cimport index_t, value_t

cdef extern from *:
    """
    #include <stdint.h>
    #include <string.h>
    /* v if t else 0, without a branch (t is 0 or 1): the merge loops stay branch free. */
    static inline float st_sel_f32(int t, float v) { uint32_t u; memcpy(&u, &v, 4); u &= -(uint32_t)t; memcpy(&v, &u, 4); return v; }
    static inline double st_sel_f64(int t, double v) { uint64_t u; memcpy(&u, &v, 8); u &= -(uint64_t)t; memcpy(&v, &u, 8); return v; }
    static inline int64_t st_sel_i64(int t, int64_t v) { return v & -(int64_t)t; }
    """
    float st_sel_f32(int t, float v) nogil
    double st_sel_f64(int t, double v) nogil
    int64_t st_sel_i64(int t, int64_t v) nogil

# The operations of merge_fill (keep in sync with sparsetensor.ops.binary).
cdef enum:
    OP_ADD = 0   # x + alpha * y      (bool: x | (alpha & y))
    OP_MUL = 1   # x * y              (bool: x & y)
    OP_MAX = 2   # numpy.maximum      (bool: x | y)
    OP_MIN = 3   # numpy.minimum      (bool: x & y)
    OP_PLUS = 4  # x + y: OP_ADD with alpha == 1, internal (bool: x | y)

ADD, MUL, MAX, MIN, PLUS = OP_ADD, OP_MUL, OP_MAX, OP_MIN, OP_PLUS

# Rows per scheduling chunk of the row-parallel passes.
cdef Py_ssize_t ROW_CHUNK = 512

# Element types the gather moves: raw bytes of 1, 2, 4 or 8 bytes, and complex128.
ctypedef fused move_t:
    uint8_t
    uint16_t
    uint32_t
    uint64_t
    double complex


cdef inline value_t _apply(int op, value_t x, value_t y, value_t alpha, bint logical) noexcept nogil:
    cdef bint keep
    if op == OP_PLUS:
        if value_t is uint8_t:
            if logical:
                return x | y
        return x + y
    if value_t is uint8_t:
        if logical:
            if op == OP_ADD:
                return x | (alpha & y)
            if op == OP_MUL or op == OP_MIN:
                return x & y
            return x | y
    if op == OP_ADD:
        return x + alpha * y
    if op == OP_MUL:
        return x * y
    if value_t is cython.floatcomplex or value_t is cython.doublecomplex:
        return x  # maximum/minimum of complex values are refused by the wrapper
    else:
        # NaN wins, as in numpy.maximum; no short-circuit, so that the select compiles without a branch
        if op == OP_MAX:
            keep = (x >= y) | (x != x)
        else:
            keep = (x <= y) | (x != x)
        return x if keep else y


cdef inline value_t _sel(bint t, value_t v) noexcept nogil:
    """v if t else 0, branch free for real types."""
    cdef value_t zero = 0
    if value_t is float:
        return st_sel_f32(t, v)
    elif value_t is double:
        return st_sel_f64(t, v)
    elif value_t is cython.floatcomplex or value_t is cython.doublecomplex:
        return v if t else zero
    else:
        return <value_t>st_sel_i64(t, <int64_t>v)


# -- counting ----------------------------------------------------------------------------------
cdef inline int64_t _count_union(const index_t* ap, Py_ssize_t a0, Py_ssize_t a1,
                                 const index_t* bp, Py_ssize_t b0, Py_ssize_t b1) noexcept nogil:
    """The size of the union of two sorted rows, merged from both ends at once (two independent
    dependency chains); _fill_union walks the rows the same way."""
    cdef Py_ssize_t ia = a0, ib = b0, ja = a1 - 1, jb = b1 - 1
    cdef int64_t cnt = 0
    cdef index_t x, y, u, v
    while ia <= ja and ib <= jb:
        x = ap[ia]
        y = bp[ib]
        ia += x <= y
        ib += y <= x
        cnt += 1
        if ia > ja or ib > jb:
            break
        u = ap[ja]
        v = bp[jb]
        ja -= u >= v
        jb -= v >= u
        cnt += 1
    return cnt + (ja - ia + 1) + (jb - ib + 1)


cdef inline int64_t _count_intersection(const index_t* ap, Py_ssize_t a0, Py_ssize_t a1,
                                        const index_t* bp, Py_ssize_t b0, Py_ssize_t b1) noexcept nogil:
    cdef Py_ssize_t ia = a0, ib = b0
    cdef int64_t cnt = 0
    cdef index_t x, y
    while ia < a1 and ib < b1:
        x = ap[ia]
        y = bp[ib]
        ia += x <= y
        ib += y <= x
        cnt += x == y
    return cnt


cdef inline void _count2(const index_t* ap, Py_ssize_t a0, Py_ssize_t a1,
                         const index_t* bp, Py_ssize_t b0, Py_ssize_t b1,
                         const index_t* cp, Py_ssize_t c0, Py_ssize_t c1,
                         const index_t* dp, Py_ssize_t d0, Py_ssize_t d1,
                         int64_t* out) noexcept nogil:
    """Two intersection counts at once (rows a, b and c, d): the two dependency chains overlap.
    Each row is walked exactly as _fill_intersection walks it."""
    cdef Py_ssize_t ia = a0, ib = b0, ic = c0, id_ = d0
    cdef int64_t n1 = 0, n2 = 0
    cdef index_t x, y, u, v
    while ia < a1 and ib < b1 and ic < c1 and id_ < d1:
        x = ap[ia]
        y = bp[ib]
        u = cp[ic]
        v = dp[id_]
        ia += x <= y
        ib += y <= x
        ic += u <= v
        id_ += v <= u
        n1 += x == y
        n2 += u == v
    out[0] = n1 + _count_intersection(ap, ia, a1, bp, ib, b1)
    out[1] = n2 + _count_intersection(cp, ic, c1, dp, id_, d1)


cdef void _count_chunk(Py_ssize_t r0, Py_ssize_t r1, Py_ssize_t n, bint union,
                       const index_t* ac, const index_t* ap, Py_ssize_t sa,
                       const index_t* bc, const index_t* bp, Py_ssize_t sb, int64_t* counts) noexcept nogil:
    cdef Py_ssize_t r, b, i, b2, i2
    r = r0
    while not union and r + 1 < r1:  # intersections: two rows at once (unions run from both ends instead)
        b = r // n
        i = r - b * n
        b2 = (r + 1) // n
        i2 = r + 1 - b2 * n
        _count2(ap + b * sa, ac[b * (n + 1) + i], ac[b * (n + 1) + i + 1],
                bp + b * sb, bc[b * (n + 1) + i], bc[b * (n + 1) + i + 1],
                ap + b2 * sa, ac[b2 * (n + 1) + i2], ac[b2 * (n + 1) + i2 + 1],
                bp + b2 * sb, bc[b2 * (n + 1) + i2], bc[b2 * (n + 1) + i2 + 1], counts + r)
        r += 2
    while r < r1:
        b = r // n
        i = r - b * n
        if union:
            counts[r] = _count_union(ap + b * sa, ac[b * (n + 1) + i], ac[b * (n + 1) + i + 1],
                                     bp + b * sb, bc[b * (n + 1) + i], bc[b * (n + 1) + i + 1])
        else:
            counts[r] = _count_intersection(ap + b * sa, ac[b * (n + 1) + i], ac[b * (n + 1) + i + 1],
                                            bp + b * sb, bc[b * (n + 1) + i], bc[b * (n + 1) + i + 1])
        r += 1


def merge_count(const index_t[:, ::1] a_compressed, const index_t[:, ::1] a_plain,
                const index_t[:, ::1] b_compressed, const index_t[:, ::1] b_plain,
                bint union, int64_t[:, ::1] counts, int nthreads):
    """counts[b, i] = the size of the union (or intersection) of row i's plain indices in a and b."""
    cdef Py_ssize_t B = a_compressed.shape[0], n = a_compressed.shape[1] - 1
    cdef Py_ssize_t R = B * n, ch, r0, r1
    cdef Py_ssize_t nchunks = (R + ROW_CHUNK - 1) // ROW_CHUNK
    cdef int T = max(1, min(nthreads, nchunks))
    cdef Py_ssize_t sa = a_plain.shape[1], sb = b_plain.shape[1]
    cdef const index_t* ap = NULL
    cdef const index_t* bp = NULL
    _check_pair(a_compressed, a_plain, b_compressed, b_plain)
    if counts.shape[0] != B or counts.shape[1] != n:
        raise ValueError(f"counts must have shape ({B}, {n}), got ({counts.shape[0]}, {counts.shape[1]})")
    if R == 0:
        return
    if sa:
        ap = &a_plain[0, 0]
    if sb:
        bp = &b_plain[0, 0]
    with nogil:
        for ch in prange(nchunks, num_threads=T, schedule="dynamic", chunksize=1):
            r0 = ch * ROW_CHUNK
            r1 = min(R, r0 + ROW_CHUNK)
            _count_chunk(r0, r1, n, union, &a_compressed[0, 0], ap, sa, &b_compressed[0, 0], bp, sb, &counts[0, 0])


cdef _check_pair(const index_t[:, ::1] a_compressed, const index_t[:, ::1] a_plain,
                 const index_t[:, ::1] b_compressed, const index_t[:, ::1] b_plain):
    cdef Py_ssize_t B = a_compressed.shape[0], n = a_compressed.shape[1]
    if (a_plain.shape[0] != B or b_compressed.shape[0] != B or b_plain.shape[0] != B
            or b_compressed.shape[1] != n or n < 1):
        raise ValueError(f"a and b must have compressed indices of one shape (B, n + 1) and plain indices "
                         f"(B, nnz): got ({a_compressed.shape[0]}, {a_compressed.shape[1]}), ({a_plain.shape[0]}, {a_plain.shape[1]}), "
                         f"({b_compressed.shape[0]}, {b_compressed.shape[1]}), ({b_plain.shape[0]}, {b_plain.shape[1]})")


# -- filling ------------------------------------------------------------------------------------
cdef inline Py_ssize_t _fill_union(int op, const index_t* ap, const value_t* av, Py_ssize_t a0, Py_ssize_t a1,
                                   const index_t* bp, const value_t* bv, Py_ssize_t b0, Py_ssize_t b1,
                                   Py_ssize_t E, value_t alpha, bint logical,
                                   index_t* op_, value_t* ov, Py_ssize_t count) noexcept nogil:
    """Merge one row; an index missing from one side takes the value 0 there. Returns the count.
    The scalar loop is branch free: each step selects pointers (to the value or to a zero).
    ``count`` may be an upper bound (the two row lengths added) for E == 1: the row is then
    closed up and the true count returned."""
    cdef Py_ssize_t ia = a0, ib = b0, o = 0, e, ja, jb, ob
    cdef index_t x, y
    cdef bint ta, tb
    cdef value_t zero = 0
    if E == 1:
        # from both ends at once, as _count_union: the front writes upwards from 0, the back
        # downwards from count - 1, and what is left comes from one side only
        ja = a1 - 1
        jb = b1 - 1
        ob = count - 1
        while ia <= ja and ib <= jb:
            x = ap[ia]
            y = bp[ib]
            ta = x <= y
            tb = y <= x
            op_[o] = x if ta else y
            ov[o] = _apply(op, _sel(ta, av[ia]), _sel(tb, bv[ib]), alpha, logical)
            ia += ta
            ib += tb
            o += 1
            if ia > ja or ib > jb:
                break
            x = ap[ja]
            y = bp[jb]
            ta = x >= y
            tb = y >= x
            op_[ob] = x if ta else y
            ov[ob] = _apply(op, _sel(ta, av[ja]), _sel(tb, bv[jb]), alpha, logical)
            ja -= ta
            jb -= tb
            ob -= 1
        while ia <= ja and o <= ob:  # (o <= ob always holds for sorted rows: a guard, not a rule)
            op_[o] = ap[ia]
            ov[o] = _apply(op, av[ia], zero, alpha, logical)
            ia += 1
            o += 1
        while ib <= jb and o <= ob:
            op_[o] = bp[ib]
            ov[o] = _apply(op, zero, bv[ib], alpha, logical)
            ib += 1
            o += 1
        if o <= ob:  # count was an upper bound: move the back part down to close the gap
            for e in range(ob + 1, count):
                op_[o] = op_[e]
                ov[o] = ov[e]
                o += 1
            return o
        return count
    while ia < a1 or ib < b1:
        ta = ib >= b1 or (ia < a1 and ap[ia] <= bp[ib])
        tb = ia >= a1 or (ib < b1 and bp[ib] <= ap[ia])
        op_[o] = ap[ia] if ta else bp[ib]
        for e in range(E):
            ov[o * E + e] = _apply(op, av[ia * E + e] if ta else zero, bv[ib * E + e] if tb else zero, alpha,
                                   logical)
        ia += ta
        ib += tb
        o += 1
    return o


cdef inline Py_ssize_t _fill_intersection(int op, const index_t* ap, const value_t* av, Py_ssize_t a0,
                                          Py_ssize_t a1, const index_t* bp, const value_t* bv, Py_ssize_t b0,
                                          Py_ssize_t b1, Py_ssize_t E, value_t alpha, bint logical,
                                          index_t* op_, value_t* ov) noexcept nogil:
    cdef Py_ssize_t ia = a0, ib = b0, o = 0, e
    cdef index_t x, y
    while ia < a1 and ib < b1:
        x = ap[ia]
        y = bp[ib]
        if x == y:
            op_[o] = x
            for e in range(E):
                ov[o * E + e] = _apply(op, av[ia * E + e], bv[ib * E + e], alpha, logical)
            o += 1
        ia += x <= y
        ib += y <= x
    return o


cdef void _fill_chunk(Py_ssize_t r0, Py_ssize_t r1, Py_ssize_t n, int op, bint union,
                      const index_t* ac, const index_t* ap, const value_t* av, Py_ssize_t sa,
                      const index_t* bc, const index_t* bp, const value_t* bv, Py_ssize_t sb,
                      const index_t* oc, index_t* op_, value_t* ov, Py_ssize_t so,
                      Py_ssize_t E, value_t alpha, bint logical) noexcept nogil:
    """Rows r0 <= r < r1 (flat: batch r // n, row r % n); sa, sb, so are the nnz of a batch."""
    cdef Py_ssize_t r, b, i, o, cnt
    r = r0
    while r < r1:
        b = r // n
        i = r - b * n
        r += 1
        o = oc[b * (n + 1) + i]
        cnt = oc[b * (n + 1) + i + 1] - o
        if cnt <= 0:
            continue
        # one call per constant op, so that the compiler specialises each inlined merge loop
        if union:
            if op == OP_ADD:
                _fill_union(OP_ADD, ap + b * sa, av + b * sa * E, ac[b * (n + 1) + i], ac[b * (n + 1) + i + 1],
                            bp + b * sb, bv + b * sb * E, bc[b * (n + 1) + i], bc[b * (n + 1) + i + 1], E, alpha,
                            logical, op_ + b * so + o, ov + (b * so + o) * E, cnt)
            elif op == OP_MAX:
                _fill_union(OP_MAX, ap + b * sa, av + b * sa * E, ac[b * (n + 1) + i], ac[b * (n + 1) + i + 1],
                            bp + b * sb, bv + b * sb * E, bc[b * (n + 1) + i], bc[b * (n + 1) + i + 1], E, alpha,
                            logical, op_ + b * so + o, ov + (b * so + o) * E, cnt)
            elif op == OP_MIN:
                _fill_union(OP_MIN, ap + b * sa, av + b * sa * E, ac[b * (n + 1) + i], ac[b * (n + 1) + i + 1],
                            bp + b * sb, bv + b * sb * E, bc[b * (n + 1) + i], bc[b * (n + 1) + i + 1], E, alpha,
                            logical, op_ + b * so + o, ov + (b * so + o) * E, cnt)
            else:
                _fill_union(OP_MUL, ap + b * sa, av + b * sa * E, ac[b * (n + 1) + i], ac[b * (n + 1) + i + 1],
                            bp + b * sb, bv + b * sb * E, bc[b * (n + 1) + i], bc[b * (n + 1) + i + 1], E, alpha,
                            logical, op_ + b * so + o, ov + (b * so + o) * E, cnt)
        else:
            _fill_intersection(op, ap + b * sa, av + b * sa * E, ac[b * (n + 1) + i], ac[b * (n + 1) + i + 1],
                               bp + b * sb, bv + b * sb * E, bc[b * (n + 1) + i], bc[b * (n + 1) + i + 1], E, alpha,
                               logical, op_ + b * so + o, ov + (b * so + o) * E)


# -- one pass: union merges of one batch into an upper-bound output ------------------------------
cdef inline Py_ssize_t _union_range(int op, Py_ssize_t r0, Py_ssize_t r1, const index_t* ac, const index_t* ap,
                                    const value_t* av, const index_t* bc, const index_t* bp, const value_t* bv,
                                    index_t* oc, index_t* op_, value_t* ov, Py_ssize_t E, value_t alpha,
                                    bint logical) noexcept nogil:
    """Rows [r0, r1) merged (union) one after another from position ac[r0] + bc[r0] on (an upper
    bound of where they start), each row closed up; oc[i + 1] = the end of row i. Returns the end."""
    cdef Py_ssize_t i, o = ac[r0] + bc[r0]
    for i in range(r0, r1):
        o += _fill_union(op, ap, av, ac[i], ac[i + 1], bp, bv, bc[i], bc[i + 1], E, alpha, logical, op_ + o,
                         ov + o * E, (ac[i + 1] - ac[i]) + (bc[i + 1] - bc[i]))
        oc[i + 1] = <index_t>o
    return o


cdef Py_ssize_t _union_range_op(int op, Py_ssize_t r0, Py_ssize_t r1, const index_t* ac, const index_t* ap,
                                const value_t* av, const index_t* bc, const index_t* bp, const value_t* bv,
                                index_t* oc, index_t* op_, value_t* ov, Py_ssize_t E, value_t alpha,
                                bint logical) noexcept nogil:
    # one call per constant op, so that the compiler specialises each inlined merge loop
    if op == OP_PLUS:
        return _union_range(OP_PLUS, r0, r1, ac, ap, av, bc, bp, bv, oc, op_, ov, E, alpha, logical)
    if op == OP_ADD:
        return _union_range(OP_ADD, r0, r1, ac, ap, av, bc, bp, bv, oc, op_, ov, E, alpha, logical)
    if op == OP_MAX:
        return _union_range(OP_MAX, r0, r1, ac, ap, av, bc, bp, bv, oc, op_, ov, E, alpha, logical)
    if op == OP_MIN:
        return _union_range(OP_MIN, r0, r1, ac, ap, av, bc, bp, bv, oc, op_, ov, E, alpha, logical)
    return _union_range(OP_MUL, r0, r1, ac, ap, av, bc, bp, bv, oc, op_, ov, E, alpha, logical)


def merge_union(const index_t[:, ::1] a_compressed, const index_t[:, ::1] a_plain,
                const value_t[:, :, ::1] a_values,
                const index_t[:, ::1] b_compressed, const index_t[:, ::1] b_plain,
                const value_t[:, :, ::1] b_values,
                index_t[:, ::1] out_compressed, index_t[:, ::1] out_plain, value_t[:, :, ::1] out_values,
                int op, value_t alpha, bint logical, int nthreads):
    """The union of a and b (one batch, E >= 1) in one pass, without merge_count: out_plain
    (1, nnz_a + nnz_b) and out_values (1, nnz_a + nnz_b, E) have room for the upper bound.
    Each thread merges a range of rows from the upper bound of its start on; the ranges then
    move down to close up. Fills out_compressed (1, n + 1) and returns the nnz (the filled
    prefix of out_plain and out_values). op and alpha as for merge_fill."""
    cdef Py_ssize_t n = a_compressed.shape[1] - 1, E = out_values.shape[2], i, lo, hi, mid, pos, start
    cdef Py_ssize_t sa = a_plain.shape[1], sb = b_plain.shape[1], ub = sa + sb
    cdef int T = max(1, min(nthreads, n // ROW_CHUNK + 1)), t
    cdef int64_t goal, shift
    cdef value_t zero = 0
    cdef const value_t* av = &zero
    cdef const value_t* bv = &zero
    cdef const index_t* ap = NULL
    cdef const index_t* bp = NULL
    cdef const index_t* ac = &a_compressed[0, 0]
    cdef const index_t* bc = &b_compressed[0, 0]
    _check_pair(a_compressed, a_plain, b_compressed, b_plain)
    if op < OP_ADD or op > OP_PLUS:
        raise ValueError(f"unknown op {op}")
    if (a_compressed.shape[0] != 1 or E < 1 or out_compressed.shape[0] != 1 or out_compressed.shape[1] != n + 1
            or out_plain.shape[0] != 1 or out_plain.shape[1] != ub or out_values.shape[0] != 1
            or out_values.shape[1] != ub or a_values.shape[0] != 1 or a_values.shape[1] != sa
            or a_values.shape[2] != E or b_values.shape[0] != 1 or b_values.shape[1] != sb or b_values.shape[2] != E):
        raise ValueError("merge_union: one batch with E >= 1 and outputs of the upper bound nnz_a + nnz_b")
    cdef Py_ssize_t[::1] bounds = np.zeros(T + 1, dtype=np.intp)
    cdef Py_ssize_t[::1] ends = np.zeros(T, dtype=np.intp)
    cdef index_t* oc = &out_compressed[0, 0]
    oc[0] = 0
    if ub == 0:
        out_compressed[:, :] = 0
        return 0
    if sa:
        ap = &a_plain[0, 0]
        av = &a_values[0, 0, 0]
    if sb:
        bp = &b_plain[0, 0]
        bv = &b_values[0, 0, 0]
    # row ranges of about equal work (entries + rows)
    bounds[T] = n
    for t in range(1, T):
        goal = (<int64_t>ub + n) * t // T
        lo, hi = bounds[t - 1], n
        while lo < hi:
            mid = (lo + hi) // 2
            if ac[mid] + bc[mid] + mid < goal:
                lo = mid + 1
            else:
                hi = mid
        bounds[t] = lo
    with nogil:
        if T == 1:
            ends[0] = _union_range_op(op, 0, n, ac, ap, av, bc, bp, bv, oc, &out_plain[0, 0], &out_values[0, 0, 0],
                                      E, alpha, logical)
        else:
            for t in prange(T, num_threads=T, schedule="static", chunksize=1):
                ends[t] = _union_range_op(op, bounds[t], bounds[t + 1], ac, ap, av, bc, bp, bv, oc,
                                          &out_plain[0, 0], &out_values[0, 0, 0], E, alpha, logical)
        pos = ends[0]
        for t in range(1, T):  # in order: a range moves to where the ones before it end
            start = ac[bounds[t]] + bc[bounds[t]]
            shift = start - pos
            if shift:
                memmove(&out_plain[0, pos], &out_plain[0, start], (ends[t] - start) * sizeof(index_t))
                memmove(&out_values[0, pos, 0], &out_values[0, start, 0], (ends[t] - start) * E * sizeof(value_t))
                for i in range(bounds[t] + 1, bounds[t + 1] + 1):
                    oc[i] = <index_t>(oc[i] - shift)
            pos += ends[t] - start
    return pos


def merge_fill(const index_t[:, ::1] a_compressed, const index_t[:, ::1] a_plain,
               const value_t[:, :, ::1] a_values,
               const index_t[:, ::1] b_compressed, const index_t[:, ::1] b_plain,
               const value_t[:, :, ::1] b_values,
               const index_t[:, ::1] out_compressed, index_t[:, ::1] out_plain, value_t[:, :, ::1] out_values,
               int op, bint union, value_t alpha, bint logical, int nthreads):
    """Write the union (or intersection) of a and b, combining values with ``op`` (ADD: x + alpha*y,
    MUL, MAX, MIN; an index missing on one side counts as the value 0 there). out_compressed holds
    the prefix sums of merge_count's counts. ``logical``: uint8 values are bools (ADD and MAX are or,
    MUL and MIN are and)."""
    cdef Py_ssize_t B = a_compressed.shape[0], n = a_compressed.shape[1] - 1
    cdef Py_ssize_t R = B * n, E = out_values.shape[2], ch, r0, r1
    cdef Py_ssize_t nchunks = (R + ROW_CHUNK - 1) // ROW_CHUNK
    cdef int T = max(1, min(nthreads, nchunks))
    cdef Py_ssize_t sa = a_plain.shape[1], sb = b_plain.shape[1], so = out_plain.shape[1]
    cdef value_t zero = 0
    cdef const value_t* av = &zero
    cdef const value_t* bv = &zero
    cdef const index_t* ap = NULL
    cdef const index_t* bp = NULL
    _check_pair(a_compressed, a_plain, b_compressed, b_plain)
    if op < OP_ADD or op > OP_MIN:
        raise ValueError(f"unknown op {op}")
    if (a_values.shape[0] != B or b_values.shape[0] != B or out_values.shape[0] != B
            or a_values.shape[1] != sa or b_values.shape[1] != sb
            or a_values.shape[2] != E or b_values.shape[2] != E):
        raise ValueError(f"values (B, nnz, E) do not match: a ({a_values.shape[0]}, {a_values.shape[1]}, "
                         f"{a_values.shape[2]}), b ({b_values.shape[0]}, {b_values.shape[1]}, {b_values.shape[2]}), "
                         f"out ({out_values.shape[0]}, {out_values.shape[1]}, {out_values.shape[2]})")
    if (out_compressed.shape[0] != B or out_compressed.shape[1] != n + 1 or out_plain.shape[0] != B
            or out_values.shape[1] != so):
        raise ValueError("merge_fill: the output does not match the operands")
    if R == 0 or so == 0:
        return
    if E == 0:  # entries without values still need their indices
        return _fill_indices_only(a_compressed, a_plain, b_compressed, b_plain, out_compressed, out_plain, union)
    if sa:
        ap = &a_plain[0, 0]
        av = &a_values[0, 0, 0]
    if sb:
        bp = &b_plain[0, 0]
        bv = &b_values[0, 0, 0]
    with nogil:
        for ch in prange(nchunks, num_threads=T, schedule="dynamic", chunksize=1):
            r0 = ch * ROW_CHUNK
            r1 = min(R, r0 + ROW_CHUNK)
            _fill_chunk(r0, r1, n, op, union, &a_compressed[0, 0], ap, av, sa, &b_compressed[0, 0], bp, bv, sb,
                        &out_compressed[0, 0], &out_plain[0, 0], &out_values[0, 0, 0], so, E, alpha, logical)


def _fill_indices_only(const index_t[:, ::1] a_compressed, const index_t[:, ::1] a_plain,
                       const index_t[:, ::1] b_compressed, const index_t[:, ::1] b_plain,
                       const index_t[:, ::1] out_compressed, index_t[:, ::1] out_plain, bint union):
    """merge_fill for entries of zero values (a zero-size dense dim): indices only."""
    cdef Py_ssize_t B = a_compressed.shape[0], n = a_compressed.shape[1] - 1, b, i, ia, ib, ia1, ib1, o
    cdef index_t x, y
    for b in range(B):
        for i in range(n):
            ia, ia1 = a_compressed[b, i], a_compressed[b, i + 1]
            ib, ib1 = b_compressed[b, i], b_compressed[b, i + 1]
            o = out_compressed[b, i]
            while ia < ia1 or ib < ib1:
                if ib >= ib1 or (ia < ia1 and a_plain[b, ia] < b_plain[b, ib]):
                    if union:
                        out_plain[b, o] = a_plain[b, ia]
                        o += 1
                    ia += 1
                elif ia >= ia1 or b_plain[b, ib] < a_plain[b, ia]:
                    if union:
                        out_plain[b, o] = b_plain[b, ib]
                        o += 1
                    ib += 1
                else:
                    out_plain[b, o] = a_plain[b, ia]
                    o += 1
                    ia += 1
                    ib += 1


# -- gather: a dense operand sampled at a compressed pattern --------------------------------------
def gather_compressed(const index_t[:, ::1] compressed, const index_t[:, ::1] plain,
                      const move_t[:, :, :, :] dense, Py_ssize_t Rb, Py_ssize_t Cb, bint compressed_rows,
                      move_t[:, :, ::1] out, int nthreads):
    """out[b, k, (i * Cb + j) * D + d] = dense[b, r * Rb + i, c * Cb + j, d] for every entry k of batch b,
    (r, c) its block row and column. ``dense`` is (B, R, C, D) with any strides (broadcast views
    welcome); ``out`` is (B, nnz, Rb * Cb * D)."""
    cdef Py_ssize_t B = compressed.shape[0], n = compressed.shape[1] - 1, nnz = plain.shape[1]
    cdef Py_ssize_t D = dense.shape[3], R = B * n, r, b, s, k, q, br, bc, i, j, d, E = Rb * Cb * D
    cdef int T = max(1, min(nthreads, R // ROW_CHUNK + 1))
    if plain.shape[0] != B or dense.shape[0] != B or out.shape[0] != B or out.shape[1] != nnz or out.shape[2] != E:
        raise ValueError(f"gather_compressed: shapes do not match: compressed ({compressed.shape[0]}, {compressed.shape[1]}), "
                         f"plain ({plain.shape[0]}, {plain.shape[1]}), dense ({dense.shape[0]}, {dense.shape[1]}, {dense.shape[2]}, {dense.shape[3]}), out ({out.shape[0]}, {out.shape[1]}, {out.shape[2]})")
    if compressed_rows:
        if dense.shape[1] != n * Rb or dense.shape[2] % Cb:
            raise ValueError("gather_compressed: dense rows do not match the compressed index")
    elif dense.shape[2] != n * Cb or dense.shape[1] % Rb:
        raise ValueError("gather_compressed: dense columns do not match the compressed index")
    if R == 0 or nnz == 0 or E == 0:
        return
    with nogil:
        for r in prange(R, num_threads=T, schedule="dynamic", chunksize=ROW_CHUNK):
            b = r // n
            s = r - b * n
            for k in range(compressed[b, s], compressed[b, s + 1]):
                q = plain[b, k]
                if compressed_rows:
                    br = s
                    bc = q
                else:
                    br = q
                    bc = s
                if E == 1:
                    out[b, k, 0] = dense[b, br, bc, 0]
                else:
                    for i in range(Rb):
                        for j in range(Cb):
                            for d in range(D):
                                out[b, k, (i * Cb + j) * D + d] = dense[b, br * Rb + i, bc * Cb + j, d]


# -- COO keys --------------------------------------------------------------------------------------
def coo_ravel(const index_t[:, ::1] indices, const int64_t[::1] shape, int64_t[::1] keys, int nthreads):
    """keys[k] = the row-major linear index of column k of ``indices`` in ``shape`` (whose product must
    fit int64). Returns None, or the first out-of-bounds index as ("C4" | "C5", dim, position, value)."""
    cdef Py_ssize_t S = indices.shape[0], N = indices.shape[1], k, d, t, lo, hi
    cdef int T = max(1, min(nthreads, N // 65536 + 1))
    cdef int64_t key, v
    cdef int64_t[::1] bad = np.full(T, -1, dtype=np.int64)
    if shape.shape[0] != S or keys.shape[0] != N:
        raise ValueError(f"coo_ravel: indices ({indices.shape[0]}, {indices.shape[1]}), shape ({shape.shape[0]},) and keys "
                         f"({keys.shape[0]},) do not match")
    if N == 0:
        return None
    with nogil:
        for t in prange(T, num_threads=T, schedule="static", chunksize=1):
            lo = N * t // T
            hi = N * (t + 1) // T
            for k in range(lo, hi):
                key = 0
                for d in range(S):
                    v = indices[d, k]
                    if v < 0 or v >= shape[d]:
                        bad[t] = k
                        break
                    key = key * shape[d] + v
                if bad[t] >= 0:
                    break
                keys[k] = key
    for t in range(T):
        if bad[t] >= 0:
            k = bad[t]
            for d in range(S):
                v = indices[d, k]
                if v < 0:
                    return ("C4", d, k, int(v))
                if v >= shape[d]:
                    return ("C5", d, k, int(v))
    return None


def coo_unravel(const int64_t[::1] keys, const int64_t[::1] shape, index_t[:, ::1] out, int nthreads):
    """out[:, k] = the multi-index of the row-major linear index keys[k] in ``shape`` (keys trusted to be
    in range). Below 2**52 the divisions are done with a double reciprocal and an exact correction."""
    cdef Py_ssize_t S = out.shape[0], N = keys.shape[0], k, d
    cdef int T = max(1, min(nthreads, N // 65536 + 1))
    cdef int64_t key, q, rem, dim
    cdef double[::1] inv = np.zeros(max(S, 1), dtype=np.float64)
    cdef int64_t span = 1
    cdef bint fast = True
    if shape.shape[0] != S or out.shape[1] != N:
        raise ValueError(f"coo_unravel: keys ({N},), shape ({shape.shape[0]},) and out ({out.shape[0]}, "
                         f"{out.shape[1]}) do not match")
    if N == 0 or S == 0:
        return
    for d in range(S):
        if shape[d] <= 0:
            raise ValueError("coo_unravel: sizes must be positive when there are keys")
        inv[d] = 1.0 / <double>shape[d]
        if span > (1 << 52) // shape[d]:
            fast = False
        else:
            span *= shape[d]
    with nogil:
        for k in prange(N, num_threads=T, schedule="static"):
            key = keys[k]
            for d in range(S - 1, 0, -1):
                dim = shape[d]
                if fast:
                    q = <int64_t>(<double>key * inv[d])
                    rem = key - q * dim
                    if rem < 0:
                        q = q - 1
                        rem = rem + dim
                    elif rem >= dim:
                        q = q + 1
                        rem = rem - dim
                else:
                    q = key // dim
                    rem = key - q * dim
                out[d, k] = <index_t>rem
                key = q
            out[0, k] = <index_t>key


# -- COO union merges in one pass ------------------------------------------------------------------
# Coalesced COO operands are merged in one pass over their index columns, compared as row-major
# linear keys computed on the fly (unsigned: the product of the sparse sizes fits int64). The
# output has room for the upper bound nnz_a + nnz_b: each thread merges one key range (split by
# merge path) from the upper bound of its start on, in chunks of at most COO_CHUNK entries from
# each side merged from both ends at once and closed up in cache; the ranges then move down in
# order. Indices are not trusted: a check pass per chunk (in cache) flags an out-of-bounds index
# and output keys that do not increase strictly (which happens exactly when an operand that
# claims to be coalesced is not); the wrapper then finds and raises the error.
cdef Py_ssize_t COO_CHUNK = 1024
cdef uint64_t KEY_END = 0xFFFFFFFFFFFFFFFF  # above every key: the end of a side


# Tags that specialise the merge for sparse_dim 1, 2 or any (a compile-time S: unrolled key and
# copy loops); the value is never read.
cdef struct Dims1:
    char unused
cdef struct Dims2:
    char unused
cdef struct DimsN:
    char unused

ctypedef fused dims_t:
    Dims1
    Dims2
    DimsN


cdef inline Py_ssize_t _nd(dims_t dims, Py_ssize_t S) noexcept nogil:
    if dims_t is Dims1:
        return 1
    elif dims_t is Dims2:
        return 2
    else:
        return S


cdef inline uint64_t _key(dims_t dims, const index_t* idx, Py_ssize_t stride, Py_ssize_t k, Py_ssize_t S,
                          const uint64_t* shape) noexcept nogil:
    """The row-major linear index of column k (wrapping for out-of-bounds indices, which the
    check pass flags)."""
    cdef uint64_t key = 0
    cdef Py_ssize_t d
    if dims_t is Dims1:
        return <uint64_t>idx[k]
    elif dims_t is Dims2:
        return <uint64_t>idx[k] * shape[1] + <uint64_t>idx[stride + k]
    else:
        for d in range(S):
            key = key * shape[d] + <uint64_t>idx[d * stride + k]
        return key


cdef inline Py_ssize_t _lower_bound(dims_t dims, const index_t* idx, Py_ssize_t stride, Py_ssize_t lo, Py_ssize_t hi,
                                    uint64_t key, Py_ssize_t S, const uint64_t* shape) noexcept nogil:
    """The first k in [lo, hi) whose key is >= ``key`` (hi if none), for sorted columns; some k in
    [lo, hi] for any columns."""
    cdef Py_ssize_t mid
    while lo < hi:
        mid = lo + (hi - lo) // 2
        if _key(dims, idx, stride, mid, S, shape) < key:
            lo = mid + 1
        else:
            hi = mid
    return lo


cdef inline void _coo_move(dims_t dims, index_t* oi, Py_ssize_t so, value_t* ov, Py_ssize_t E, Py_ssize_t S,
                           Py_ssize_t dst, Py_ssize_t src, Py_ssize_t count) noexcept nogil:
    """Output entries [src, src + count) moved down to dst (dst <= src)."""
    cdef Py_ssize_t d
    if count <= 0 or dst == src:
        return
    for d in range(_nd(dims, S)):
        memmove(oi + d * so + dst, oi + d * so + src, count * sizeof(index_t))
    if E:
        memmove(ov + dst * E, ov + src * E, count * E * sizeof(value_t))


cdef inline Py_ssize_t _coo_union_chunk(dims_t dims, int op, Py_ssize_t S, const uint64_t* shape,
                                        const index_t* ai, Py_ssize_t sa, const value_t* av,
                                        Py_ssize_t ia, Py_ssize_t a1,
                                        const index_t* bi, Py_ssize_t sb, const value_t* bv,
                                        Py_ssize_t ib, Py_ssize_t b1,
                                        Py_ssize_t E, value_t alpha, bint logical,
                                        index_t* oi, Py_ssize_t so, value_t* ov, Py_ssize_t o) noexcept nogil:
    """The union of a[ia:a1] and b[ib:b1] written from output position o on, closed up; returns its end."""
    cdef Py_ssize_t ja = a1 - 1, jb = b1 - 1, ob = o + (a1 - ia) + (b1 - ib) - 1, end = ob + 1, d, e
    cdef uint64_t x, y
    cdef index_t u, v
    cdef bint ta, tb
    cdef value_t zero = 0
    if E == 1:
        # from both ends at once (two independent dependency chains), as _fill_union
        while ia <= ja and ib <= jb:
            x = _key(dims, ai, sa, ia, S, shape)
            y = _key(dims, bi, sb, ib, S, shape)
            ta = x <= y
            tb = y <= x
            for d in range(_nd(dims, S)):  # both loaded, then selected: no branch
                u = ai[d * sa + ia]
                v = bi[d * sb + ib]
                oi[d * so + o] = u if ta else v
            ov[o] = _apply(op, _sel(ta, av[ia]), _sel(tb, bv[ib]), alpha, logical)
            ia += ta
            ib += tb
            o += 1
            if ia > ja or ib > jb:
                break
            x = _key(dims, ai, sa, ja, S, shape)
            y = _key(dims, bi, sb, jb, S, shape)
            ta = x >= y
            tb = y >= x
            for d in range(_nd(dims, S)):
                u = ai[d * sa + ja]
                v = bi[d * sb + jb]
                oi[d * so + ob] = u if ta else v
            ov[ob] = _apply(op, _sel(ta, av[ja]), _sel(tb, bv[jb]), alpha, logical)
            ja -= ta
            jb -= tb
            ob -= 1
        while ia <= ja:
            for d in range(_nd(dims, S)):
                oi[d * so + o] = ai[d * sa + ia]
            ov[o] = _apply(op, av[ia], zero, alpha, logical)
            ia += 1
            o += 1
        while ib <= jb:
            for d in range(_nd(dims, S)):
                oi[d * so + o] = bi[d * sb + ib]
            ov[o] = _apply(op, zero, bv[ib], alpha, logical)
            ib += 1
            o += 1
        _coo_move(dims, oi, so, ov, E, S, o, ob + 1, end - ob - 1)
        return o + end - ob - 1
    while ia <= ja or ib <= jb:
        x = _key(dims, ai, sa, ia, S, shape) if ia <= ja else KEY_END
        y = _key(dims, bi, sb, ib, S, shape) if ib <= jb else KEY_END
        ta = ia <= ja and x <= y
        tb = ib <= jb and y <= x
        for d in range(_nd(dims, S)):
            oi[d * so + o] = ai[d * sa + ia] if ta else bi[d * sb + ib]
        for e in range(E):
            ov[o * E + e] = _apply(op, av[ia * E + e] if ta else zero, bv[ib * E + e] if tb else zero, alpha,
                                   logical)
        ia += ta
        ib += tb
        o += 1
    return o


cdef inline bint _coo_in_bounds(dims_t dims, const index_t* idx, Py_ssize_t stride, Py_ssize_t k0, Py_ssize_t k1,
                                Py_ssize_t S, const uint64_t* shape) noexcept nogil:
    """Whether the columns [k0, k1) are in bounds (before they are merged: equal keys of wrapped
    out-of-bounds indices would hide one of them)."""
    cdef Py_ssize_t k, d
    cdef bint ok = True
    for d in range(_nd(dims, S)):
        for k in range(k0, k1):
            ok &= <uint64_t>idx[d * stride + k] < shape[d]
    return ok


cdef inline bint _coo_check(dims_t dims, const index_t* oi, Py_ssize_t so, Py_ssize_t o0, Py_ssize_t o1, Py_ssize_t S,
                            const uint64_t* shape, uint64_t* last, bint* first) noexcept nogil:
    """False when the output keys in [o0, o1) do not increase strictly (after ``last`` unless ``first``),
    or an index is out of bounds."""
    cdef Py_ssize_t k, d
    cdef uint64_t key, v, prev = last[0]
    cdef bint ok = True, start = first[0]
    for k in range(o0, o1):
        key = 0
        for d in range(_nd(dims, S)):
            v = <uint64_t>oi[d * so + k]
            ok &= v < shape[d]
            key = key * shape[d] + v
        ok &= start or key > prev
        start = False
        prev = key
    last[0] = prev
    first[0] = start
    return ok


cdef inline Py_ssize_t _coo_union_range(dims_t dims, int op, Py_ssize_t S, const uint64_t* shape,
                                 const index_t* ai, Py_ssize_t sa, const value_t* av, Py_ssize_t ia, Py_ssize_t a1,
                                 const index_t* bi, Py_ssize_t sb, const value_t* bv, Py_ssize_t ib, Py_ssize_t b1,
                                 Py_ssize_t E, value_t alpha, bint logical, index_t* oi, Py_ssize_t so, value_t* ov,
                                 bint check, int* ok) noexcept nogil:
    """a[ia:a1] and b[ib:b1] merged chunk by chunk from position ia + ib on; returns the end."""
    cdef Py_ssize_t o = ia + ib, ea, eb, o1
    cdef uint64_t pa, pb, last = 0
    cdef bint first = True
    ok[0] = 1
    while ia < a1 or ib < b1:
        # a chunk: at most COO_CHUNK entries from each side, all keys below the pivot (the key
        # after COO_CHUNK entries of one side), so that equal keys stay in one chunk
        pa = _key(dims, ai, sa, ia + COO_CHUNK, S, shape) if a1 - ia > COO_CHUNK else KEY_END
        pb = _key(dims, bi, sb, ib + COO_CHUNK, S, shape) if b1 - ib > COO_CHUNK else KEY_END
        if pa == KEY_END and pb == KEY_END:
            ea, eb = a1, b1
        elif pa <= pb:
            ea = ia + COO_CHUNK
            eb = _lower_bound(dims, bi, sb, ib, min(b1, ib + COO_CHUNK), pa, S, shape)
        else:
            eb = ib + COO_CHUNK
            ea = _lower_bound(dims, ai, sa, ia, min(a1, ia + COO_CHUNK), pb, S, shape)
        if check and not (_coo_in_bounds(dims, ai, sa, ia, ea, S, shape)
                          and _coo_in_bounds(dims, bi, sb, ib, eb, S, shape)):
            ok[0] = 0
            return o
        # one call per constant op, so that the compiler specialises each inlined merge loop
        if op == OP_PLUS:
            o1 = _coo_union_chunk(dims, OP_PLUS, S, shape, ai, sa, av, ia, ea, bi, sb, bv, ib, eb, E, alpha, logical,
                                  oi, so, ov, o)
        elif op == OP_ADD:
            o1 = _coo_union_chunk(dims, OP_ADD, S, shape, ai, sa, av, ia, ea, bi, sb, bv, ib, eb, E, alpha, logical,
                                  oi, so, ov, o)
        elif op == OP_MAX:
            o1 = _coo_union_chunk(dims, OP_MAX, S, shape, ai, sa, av, ia, ea, bi, sb, bv, ib, eb, E, alpha, logical,
                                  oi, so, ov, o)
        else:
            o1 = _coo_union_chunk(dims, OP_MIN, S, shape, ai, sa, av, ia, ea, bi, sb, bv, ib, eb, E, alpha, logical,
                                  oi, so, ov, o)
        if check and not _coo_check(dims, oi, so, o, o1, S, shape, &last, &first):
            ok[0] = 0
            return o1
        o = o1
        ia, ib = ea, eb
    return o


cdef Py_ssize_t _coo_union_range_op(int op, Py_ssize_t S, const uint64_t* shape,
                                    const index_t* ai, Py_ssize_t sa, const value_t* av, Py_ssize_t ia,
                                    Py_ssize_t a1, const index_t* bi, Py_ssize_t sb, const value_t* bv,
                                    Py_ssize_t ib, Py_ssize_t b1, Py_ssize_t E, value_t alpha, bint logical,
                                    index_t* oi, Py_ssize_t so, value_t* ov, bint check, int* ok) noexcept nogil:
    cdef Dims1 one
    cdef Dims2 two
    cdef DimsN any_
    if S == 2:
        return _coo_union_range(two, op, S, shape, ai, sa, av, ia, a1, bi, sb, bv, ib, b1, E, alpha, logical,
                                oi, so, ov, check, ok)
    if S == 1:
        return _coo_union_range(one, op, S, shape, ai, sa, av, ia, a1, bi, sb, bv, ib, b1, E, alpha, logical,
                                oi, so, ov, check, ok)
    return _coo_union_range(any_, op, S, shape, ai, sa, av, ia, a1, bi, sb, bv, ib, b1, E, alpha, logical, oi, so,
                            ov, check, ok)


cdef void _coo_split(dims_t dims, Py_ssize_t k, Py_ssize_t S, const uint64_t* shape,
                     const index_t* ai, Py_ssize_t sa, const index_t* bi, Py_ssize_t sb,
                     Py_ssize_t* i_out, Py_ssize_t* j_out) noexcept nogil:
    """A split (i, j) of the sorted columns of a and b near the merge path's diagonal i + j = k: all
    keys of a[:i] and b[:j] are below those of a[i:] and b[j:] (equal keys stay on one side)."""
    cdef Py_ssize_t lo = max(0, k - sb), hi = min(k, sa), i, j
    cdef uint64_t pa, pb, pivot
    while lo < hi:  # the merge path: the largest i with a[i - 1] < b[k - i] (ties go to b first)
        i = lo + (hi - lo) // 2
        j = k - i
        if _key(dims, ai, sa, i, S, shape) < _key(dims, bi, sb, j - 1, S, shape):
            lo = i + 1
        else:
            hi = i
    i = lo
    j = k - lo
    pa = _key(dims, ai, sa, i, S, shape) if i < sa else KEY_END
    pb = _key(dims, bi, sb, j, S, shape) if j < sb else KEY_END
    pivot = min(pa, pb)
    i_out[0] = _lower_bound(dims, ai, sa, 0, sa, pivot, S, shape)
    j_out[0] = _lower_bound(dims, bi, sb, 0, sb, pivot, S, shape)


def coo_merge_union(const index_t[:, ::1] a_indices, const value_t[:, ::1] a_values,
                    const index_t[:, ::1] b_indices, const value_t[:, ::1] b_values,
                    const int64_t[::1] shape, index_t[:, ::1] out_indices, value_t[:, ::1] out_values,
                    int op, value_t alpha, bint logical, bint check, int nthreads):
    """The union of two coalesced COO operands in one pass: a_indices (S, nnz_a), a_values (nnz_a, E),
    the same for b, ``shape`` the S sparse sizes (their product fits int64); out_indices (S, nnz_a +
    nnz_b) and out_values (nnz_a + nnz_b, E) are scratch of the upper bound. op, alpha and logical
    as for merge_union. Returns (indices, nnz): the result's C-contiguous (S, nnz) index array
    (out_indices itself when nnz is the upper bound) and values out_values[:nnz]; or None when
    ``check`` finds an index out of bounds or an operand whose columns are not sorted and distinct
    (the output is then garbage)."""
    cdef Py_ssize_t S = a_indices.shape[0], sa = a_indices.shape[1], sb = b_indices.shape[1], ub = sa + sb
    cdef Py_ssize_t E = out_values.shape[1], t, d, pos, start, cnt
    cdef int T = max(1, min(nthreads, ub // 2 + 1))
    cdef value_t zero = 0
    cdef const value_t* av = &zero
    cdef const value_t* bv = &zero
    cdef value_t* ov = &zero
    cdef index_t dummy = 0
    cdef const index_t* ai = &dummy
    cdef const index_t* bi = &dummy
    cdef index_t* oi = &dummy
    cdef int good = 1
    cdef DimsN dims
    if op < OP_ADD or op > OP_PLUS or op == OP_MUL:
        raise ValueError(f"coo_merge_union: unknown op {op}")
    if (b_indices.shape[0] != S or shape.shape[0] != S or out_indices.shape[0] != S or out_indices.shape[1] != ub
            or a_values.shape[0] != sa or b_values.shape[0] != sb or out_values.shape[0] != ub
            or a_values.shape[1] != E or b_values.shape[1] != E):
        raise ValueError(f"coo_merge_union: indices ({S}, {sa}) and ({b_indices.shape[0]}, {sb}), values "
                         f"({a_values.shape[0]}, {a_values.shape[1]}) and ({b_values.shape[0]}, {b_values.shape[1]}), "
                         f"shape ({shape.shape[0]},), out ({out_indices.shape[0]}, {out_indices.shape[1]}) and "
                         f"({out_values.shape[0]}, {out_values.shape[1]}) do not match")
    for d in range(_nd(dims, S)):
        if shape[d] < 0:
            raise ValueError("coo_merge_union: negative size")
    if ub == 0:
        return np.asarray(out_indices), 0
    cdef uint64_t[::1] ushape = np.asarray(shape).astype(np.uint64)
    cdef Py_ssize_t[::1] ia = np.zeros(T + 1, dtype=np.intp)
    cdef Py_ssize_t[::1] jb = np.zeros(T + 1, dtype=np.intp)
    cdef Py_ssize_t[::1] ends = np.zeros(T, dtype=np.intp)
    cdef int[::1] oks = np.ones(T, dtype=np.intc)
    cdef const uint64_t* sh = &ushape[0] if S else NULL
    if sa and S:
        ai = &a_indices[0, 0]
    if sb and S:
        bi = &b_indices[0, 0]
    if S:
        oi = &out_indices[0, 0]
    if E:
        if sa:
            av = &a_values[0, 0]
        if sb:
            bv = &b_values[0, 0]
        ov = &out_values[0, 0]
    cdef int* okp
    with nogil:
        ia[T] = sa
        jb[T] = sb
        for t in range(1, T):  # thread ranges of about equal size (monotone even for unsorted columns)
            _coo_split(dims, ub * t // T, S, sh, ai, sa, bi, sb, &ia[t], &jb[t])
            ia[t] = max(ia[t], ia[t - 1])
            jb[t] = max(jb[t], jb[t - 1])
        if T == 1:
            ends[0] = _coo_union_range_op(op, S, sh, ai, sa, av, 0, sa, bi, sb, bv, 0, sb, E, alpha, logical,
                                          oi, ub, ov, check, &good)
            oks[0] = good
        else:
            for t in prange(T, num_threads=T, schedule="static", chunksize=1):
                okp = &oks[t]
                ends[t] = _coo_union_range_op(op, S, sh, ai, sa, av, ia[t], ia[t + 1], bi, sb, bv, jb[t], jb[t + 1],
                                              E, alpha, logical, oi, ub, ov, check, okp)
    for t in range(T):
        if not oks[t]:
            return None
    # close up: every range moves down to where the ones before it end (values in place, in order)
    cdef Py_ssize_t last_end = ends[0]  # the end (in out_indices) of the last range with entries
    pos = ends[0]
    for t in range(1, T):
        start = ia[t] + jb[t]
        cnt = ends[t] - start
        if check and cnt > 0 and pos > 0 and S and (
                _key(dims, oi, ub, last_end - 1, S, sh) >= _key(dims, oi, ub, start, S, sh)):
            return None
        if cnt > 0:
            last_end = ends[t]
        if E and start != pos:
            memmove(ov + pos * E, ov + start * E, cnt * E * sizeof(value_t))
        ends[t] = pos  # now: where range t begins in the result
        pos += cnt
    cdef Py_ssize_t nnz = pos
    if S == 0:
        return np.empty((0, nnz), dtype=np.asarray(out_indices).dtype), nnz
    if nnz == ub:
        return np.asarray(out_indices), nnz
    result = np.empty((S, nnz), dtype=np.asarray(out_indices).dtype)
    cdef index_t[:, ::1] res = result
    cdef index_t* ri = &res[0, 0]
    ends[0] = 0
    with nogil:
        for t in prange(T, num_threads=T, schedule="static", chunksize=1):
            for d in range(_nd(dims, S)):
                memmove(ri + d * nnz + ends[t], oi + d * ub + ia[t] + jb[t],
                        ((ends[t + 1] if t + 1 < T else nnz) - ends[t]) * sizeof(index_t))
    return result, nnz


def coo_rows_indices(const index_t[:, ::1] compressed, const index_t[:, ::1] plain, const int64_t[::1] sizes,
                     index_t[:, ::1] out, int nthreads):
    """The (S, nnz) indices of a coalesced COO result from its rows form: compressed (1, F + 1) over
    the flat index of the leading S - 1 dims (of ``sizes``, row-major), plain (1, >= nnz) the last
    index. out[S - 1] is plain's first nnz, out[:S - 1] the digits of each entry's flat row.
    ``compressed`` is trusted (merge_union's output: nondecreasing, at most nnz)."""
    cdef Py_ssize_t S = out.shape[0], nnz = out.shape[1], F = compressed.shape[1] - 1, ch, r, r1, k, k0, k1, d
    cdef Py_ssize_t nchunks = (F + ROW_CHUNK - 1) // ROW_CHUNK
    cdef int T = max(1, min(nthreads, nchunks))
    cdef int64_t rest
    cdef index_t digit
    if (S < 2 or sizes.shape[0] != S - 1 or compressed.shape[0] != 1 or plain.shape[0] != 1
            or plain.shape[1] < nnz or compressed[0, F] != nnz):
        raise ValueError(f"coo_rows_indices: compressed ({compressed.shape[0]}, {compressed.shape[1]}), plain "
                         f"({plain.shape[0]}, {plain.shape[1]}), sizes ({sizes.shape[0]},) and out ({S}, {nnz}) "
                         "do not match")
    if nnz == 0:
        return
    cdef const index_t* c = &compressed[0, 0]
    cdef const index_t* p = &plain[0, 0]
    cdef index_t* o = &out[0, 0]
    with nogil:
        for ch in prange(nchunks, num_threads=T, schedule="dynamic", chunksize=1):
            r1 = min(F, (ch + 1) * ROW_CHUNK)
            k0 = max(0, min(<Py_ssize_t>c[ch * ROW_CHUNK], nnz))
            k1 = max(k0, min(<Py_ssize_t>c[r1], nnz))
            memcpy(o + (S - 1) * nnz + k0, p + k0, (k1 - k0) * sizeof(index_t))  # the chunk's entries
            for r in range(ch * ROW_CHUNK, r1):
                k0 = max(0, min(<Py_ssize_t>c[r], nnz))
                k1 = max(k0, min(<Py_ssize_t>c[r + 1], nnz))
                if S == 2:
                    for k in range(k0, k1):
                        o[k] = <index_t>r
                else:
                    rest = r
                    for d in range(S - 2, -1, -1):
                        digit = <index_t>(rest % sizes[d])  # once per row (out may alias sizes for the compiler)
                        rest = rest // sizes[d]
                        for k in range(k0, k1):
                            o[d * nnz + k] = digit
