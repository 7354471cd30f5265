# Elementwise binary kernels: per-row merges of two sparse patterns (union for add, sub,
# maximum and minimum; intersection for mul). The gather of a dense operand at a sparse pattern
# (sparse * dense) is _dense.pyx's gather_compressed. COO operands use these merges through _coo_merge.pyx (its key
# (de)linearisation, or its one-pass unions as rows or on keys computed on the fly).
#
# The merges see the canonical form compressed (B, n + 1), plain (B, nnz), values
# (B, nnz, E), E = the values of one entry (block x dense), for two operands with one
# index dtype and one value dtype. Plain indices are sorted and distinct within a row
# (invariant 5.6: the wrapper coalesces first), so a two-pointer merge gives sorted,
# distinct output rows. One pass (merge_fused, the wrapper's path): the output is allocated
# for the upper bound of the result and closed up after the merge. Two passes (entries
# without values, or an upper bound past the index dtype): merge_count counts every output
# row, the wrapper allocates the output once after a prefix sum, and merge_fill writes it.
# Either way a row never writes past its room, so even unsorted input cannot make a merge
# overrun; the compressed indices must satisfy 5.1-5.3 (the wrapper scans unchecked input, and
# every merge looks at them again first, O(n): their memory may have changed since it was
# checked, issue 34), the plain indices are only compared, never followed.
cimport cython
from cython.parallel cimport prange
from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.stdlib cimport calloc, free, malloc
from libc.string cimport memcpy, memmove

import numpy as np

from ._balance cimport balanced_split
from ._guard cimport bad_compressed, bad_index, clamp
from ._types cimport index_t, value_t

include "_merge_ops.pxi"

# Row ranges per thread of the two-pass merges (dynamic schedule). Small merges are handed
# nthreads = 1 by the one gate, sparsetensor._config.num_threads.
cdef Py_ssize_t PARTS_PER_THREAD = 8



# -- counting ----------------------------------------------------------------------------------
cdef extern from *:
    """
    #include <stdint.h>
    #include <string.h>
    /* Whether n bytes at a and b are equal, 32 bytes per step: inline, where a call to memcmp
       per row made the merge loop save its vector registers around every call. */
    static inline int st_same_bytes(const void *a, const void *b, size_t n) {
        const char *p = (const char *)a, *q = (const char *)b;
        uint64_t x[4], y[4];
        size_t k = 0;
        for (; k + 32 <= n; k += 32) {
            memcpy(x, p + k, 32); memcpy(y, q + k, 32);
            if ((x[0] ^ y[0]) | (x[1] ^ y[1]) | (x[2] ^ y[2]) | (x[3] ^ y[3])) return 0;
        }
        for (; k + 8 <= n; k += 8) {
            memcpy(x, p + k, 8); memcpy(y, q + k, 8);
            if (x[0] != y[0]) return 0;
        }
        for (; k < n; k++)
            if (p[k] != q[k]) return 0;
        return 1;
    }
    """
    bint st_same_bytes(const void* a, const void* b, size_t n) noexcept nogil


cdef inline bint _same_row(const index_t* ap, Py_ssize_t a0, Py_ssize_t a1,
                           const index_t* bp, Py_ssize_t b0, Py_ssize_t b1) noexcept nogil:
    """Whether two rows hold the same indices: operands of one pattern (A + A.T of a symmetric
    pattern, a stiffness plus a mass matrix) skip the merge for a copy and a straight loop over
    the values (a failed compare stops at the first differing 32 bytes)."""
    return a1 - a0 == b1 - b0 and a1 > a0 and st_same_bytes(ap + a0, bp + b0, (a1 - a0) * sizeof(index_t))


cdef inline Py_ssize_t _fill_same(int op, const index_t* ap, const value_t* av, Py_ssize_t a0, Py_ssize_t a1,
                                  const value_t* bv, Py_ssize_t b0, Py_ssize_t E, value_t alpha, bint logical,
                                  index_t* op_, value_t* ov) noexcept nogil:
    """Rows of one pattern (_same_row): the indices copied, the values combined in order (one
    loop for both where E == 1, which the compiler keeps inline and vectorises)."""
    cdef Py_ssize_t k, cnt = a1 - a0
    ap = ap + a0
    av = av + a0 * E
    bv = bv + b0 * E
    if E == 1:
        for k in range(cnt):
            op_[k] = ap[k]
            ov[k] = _apply(op, av[k], bv[k], alpha, logical)
        return cnt
    for k in range(cnt):
        op_[k] = ap[k]
    for k in range(cnt * E):
        ov[k] = _apply(op, av[k], bv[k], alpha, logical)
    return cnt


cdef inline int64_t _count_union(const index_t* ap, Py_ssize_t a0, Py_ssize_t a1,
                                 const index_t* bp, Py_ssize_t b0, Py_ssize_t b1) noexcept nogil:
    """The size of the union of two sorted rows, merged from both ends at once (two independent
    dependency chains); _fill_union walks the rows the same way."""
    cdef Py_ssize_t ia = a0, ib = b0, ja = a1 - 1, jb = b1 - 1
    cdef int64_t cnt = 0
    cdef index_t x, y, u, v
    if _same_row(ap, a0, a1, bp, b0, b1):
        return a1 - a0
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
    if _same_row(ap, a0, a1, bp, b0, b1):
        return a1 - a0
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
    cdef Py_ssize_t R = B * n, ch, nparts
    cdef int T = _threads(nthreads, R)
    cdef Py_ssize_t sa = a_plain.shape[1], sb = b_plain.shape[1]
    cdef const index_t* ap = NULL
    cdef const index_t* bp = NULL
    cdef Py_ssize_t* bounds
    _check_pair(a_compressed, a_plain, b_compressed, b_plain)
    if counts.shape[0] != B or counts.shape[1] != n:
        raise ValueError(f"counts must have shape ({B}, {n}), got ({counts.shape[0]}, {counts.shape[1]})")
    if R == 0:
        return
    if sa:
        ap = &a_plain[0, 0]
    if sb:
        bp = &b_plain[0, 0]
    if T == 1:
        with nogil:
            _count_chunk(0, R, n, union, &a_compressed[0, 0], ap, sa, &b_compressed[0, 0], bp, sb, &counts[0, 0])
        return
    nparts = min(R, PARTS_PER_THREAD * T)
    bounds = _row_parts(&a_compressed[0, 0], sa, &b_compressed[0, 0], sb, B, n, nparts)
    with nogil:
        for ch in prange(nparts, num_threads=T, schedule="dynamic", chunksize=1):
            _count_chunk(bounds[ch], bounds[ch + 1], n, union, &a_compressed[0, 0], ap, sa, &b_compressed[0, 0], bp,
                         sb, &counts[0, 0])
    free(bounds)


cdef int _threads(int nthreads, Py_ssize_t rows) noexcept nogil:
    """Threads for a merge of this many rows: the count handed in, one for fewer than two rows."""
    if nthreads <= 1 or rows < 2:
        return 1
    return nthreads


cdef Py_ssize_t* _row_parts(const index_t* ac, Py_ssize_t sa, const index_t* bc, Py_ssize_t sb, Py_ssize_t B,
                            Py_ssize_t n, Py_ssize_t nparts) except NULL:
    """nparts + 1 bounds of flat row ranges of about equal work (rows + entries of a and b);
    free() them."""
    cdef Py_ssize_t* bounds = <Py_ssize_t*>malloc((nparts + 1) * sizeof(Py_ssize_t))
    if bounds == NULL:
        raise MemoryError()
    balanced_split(ac, sa, bc, sb, B, n, 1, 1, nparts, bounds)
    return bounds


cdef _check_pair(const index_t[:, ::1] a_compressed, const index_t[:, ::1] a_plain,
                 const index_t[:, ::1] b_compressed, const index_t[:, ::1] b_plain):
    cdef Py_ssize_t B = a_compressed.shape[0], n = a_compressed.shape[1]
    cdef bint bad
    if (a_plain.shape[0] != B or b_compressed.shape[0] != B or b_plain.shape[0] != B
            or b_compressed.shape[1] != n or n < 1):
        raise ValueError(f"a and b must have compressed indices of one shape (B, n + 1) and plain indices "
                         f"(B, nnz): got ({a_compressed.shape[0]}, {a_compressed.shape[1]}), ({a_plain.shape[0]}, {a_plain.shape[1]}), "
                         f"({b_compressed.shape[0]}, {b_compressed.shape[1]}), ({b_plain.shape[0]}, {b_plain.shape[1]})")
    if B == 0:
        return
    with nogil:
        bad = (bad_compressed(&a_compressed[0, 0], B, n - 1, a_plain.shape[1])
               or bad_compressed(&b_compressed[0, 0], B, n - 1, b_plain.shape[1]))
    if bad:
        raise ValueError("merge: a compressed index changed after validation (5.1-5.3 no longer hold)")


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
    if _same_row(ap, a0, a1, bp, b0, b1):
        return _fill_same(op, ap, av, a0, a1, bv, b0, E, alpha, logical, op_, ov)
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
                                          index_t* op_, value_t* ov, bint spare) noexcept nogil:
    """Intersect one row; returns the count. ``spare``: the output has room for the shorter row
    (not only for the count), so that a scalar row is merged branch free, every step writing."""
    cdef Py_ssize_t ia = a0, ib = b0, o = 0, e
    cdef index_t x, y
    if _same_row(ap, a0, a1, bp, b0, b1):
        return _fill_same(op, ap, av, a0, a1, bv, b0, E, alpha, logical, op_, ov)
    if spare and E == 1:
        while ia < a1 and ib < b1:
            x = ap[ia]
            y = bp[ib]
            if x == y:  # values are read only for matches (rare in unrelated patterns)
                op_[o] = x
                ov[o] = _apply(op, av[ia], bv[ib], alpha, logical)
                o += 1
            ia += x <= y
            ib += y <= x
        return o
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


cdef Py_ssize_t _fill_union_op(int op, const index_t* ap, const value_t* av, Py_ssize_t a0, Py_ssize_t a1,
                               const index_t* bp, const value_t* bv, Py_ssize_t b0, Py_ssize_t b1,
                               Py_ssize_t E, value_t alpha, bint logical,
                               index_t* op_, value_t* ov, Py_ssize_t count) noexcept nogil:
    """_fill_union with one call per constant op, so that the compiler specialises each inlined
    merge loop (callers branch once per row, predictably)."""
    if op == OP_PLUS:
        return _fill_union(OP_PLUS, ap, av, a0, a1, bp, bv, b0, b1, E, alpha, logical, op_, ov, count)
    if op == OP_ADD:
        return _fill_union(OP_ADD, ap, av, a0, a1, bp, bv, b0, b1, E, alpha, logical, op_, ov, count)
    if op == OP_MAX:
        return _fill_union(OP_MAX, ap, av, a0, a1, bp, bv, b0, b1, E, alpha, logical, op_, ov, count)
    if op == OP_MIN:
        return _fill_union(OP_MIN, ap, av, a0, a1, bp, bv, b0, b1, E, alpha, logical, op_, ov, count)
    return _fill_union(OP_MUL, ap, av, a0, a1, bp, bv, b0, b1, E, alpha, logical, op_, ov, count)


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
        if union:
            _fill_union_op(op, ap + b * sa, av + b * sa * E, ac[b * (n + 1) + i], ac[b * (n + 1) + i + 1],
                           bp + b * sb, bv + b * sb * E, bc[b * (n + 1) + i], bc[b * (n + 1) + i + 1], E, alpha,
                           logical, op_ + b * so + o, ov + (b * so + o) * E, cnt)
        else:
            _fill_intersection(op, ap + b * sa, av + b * sa * E, ac[b * (n + 1) + i], ac[b * (n + 1) + i + 1],
                               bp + b * sb, bv + b * sb * E, bc[b * (n + 1) + i], bc[b * (n + 1) + i + 1], E, alpha,
                               logical, op_ + b * so + o, ov + (b * so + o) * E, False)


# -- one pass: union merges of one batch into an upper-bound output ------------------------------
cdef Py_ssize_t _union_range(int op, Py_ssize_t r0, Py_ssize_t r1, const index_t* ac, const index_t* ap,
                             const value_t* av, const index_t* bc, const index_t* bp, const value_t* bv,
                             index_t* oc, index_t* op_, value_t* ov, Py_ssize_t E, value_t alpha,
                             bint logical) noexcept nogil:
    """Rows [r0, r1) merged (union) one after another from position ac[r0] + bc[r0] on (an upper
    bound of where they start), each row closed up; oc[i + 1] = the end of row i. Returns the end."""
    cdef Py_ssize_t i, o = ac[r0] + bc[r0]
    for i in range(r0, r1):
        o += _fill_union_op(op, ap, av, ac[i], ac[i + 1], bp, bv, bc[i], bc[i + 1], E, alpha, logical, op_ + o,
                            ov + o * E, (ac[i + 1] - ac[i]) + (bc[i + 1] - bc[i]))
        oc[i + 1] = <index_t>o
    return o


# Entries per piece of a parallel move down (below two pieces a move runs on one thread).
cdef Py_ssize_t MOVE_PIECE = 1 << 16


cdef void _move_down(index_t* p, value_t* v, Py_ssize_t E, Py_ssize_t dst, Py_ssize_t src, Py_ssize_t count,
                     int T) noexcept nogil:
    """Entries [src, src + count) of p (and rows of E values of v) to dst <= src. Where the two
    ranges do not overlap (the common case: a range closes up past its own length) the copy is
    split among T threads; else one memmove."""
    cdef Py_ssize_t pieces = count // MOVE_PIECE, q, lo, hi
    if count <= 0 or dst == src:
        return
    if T > 1 and pieces >= 2 and src - dst >= count:
        for q in prange(pieces, num_threads=T, schedule="static"):
            lo = count * q // pieces
            hi = count * (q + 1) // pieces
            memcpy(p + dst + lo, p + src + lo, (hi - lo) * sizeof(index_t))
            memcpy(v + (dst + lo) * E, v + (src + lo) * E, (hi - lo) * E * sizeof(value_t))
        return
    memmove(p + dst, p + src, count * sizeof(index_t))
    memmove(v + dst * E, v + src * E, count * E * sizeof(value_t))


cdef Py_ssize_t _union_batch(int op, int T, Py_ssize_t n, const index_t* ac, const index_t* ap, const value_t* av,
                             Py_ssize_t sa, const index_t* bc, const index_t* bp, const value_t* bv, Py_ssize_t sb,
                             index_t* oc, index_t* op_, value_t* ov, Py_ssize_t E, value_t alpha,
                             bint logical) except -1:
    """The union of one batch into room for sa + sb entries: each of T row ranges (about equal
    work) merges from the upper bound of its start on, then moves down to close up. Fills oc
    (n + 1) and returns the nnz."""
    cdef Py_ssize_t i, pos, start, t
    cdef int64_t shift
    cdef Py_ssize_t[::1] bounds = np.zeros(T + 1, dtype=np.intp)
    cdef Py_ssize_t[::1] ends = np.zeros(T, dtype=np.intp)
    oc[0] = 0
    balanced_split(ac, sa, bc, sb, 1, n, 1, 1, T, &bounds[0])  # row ranges of about equal work
    with nogil:
        if T == 1:
            ends[0] = _union_range(op, 0, n, ac, ap, av, bc, bp, bv, oc, op_, ov, E, alpha, logical)
        else:
            for t in prange(T, num_threads=T, schedule="static", chunksize=1):
                ends[t] = _union_range(op, bounds[t], bounds[t + 1], ac, ap, av, bc, bp, bv, oc, op_, ov, E,
                                          alpha, logical)
        pos = ends[0]
        for t in range(1, T):  # in order: a range moves to where the ones before it end
            start = ac[bounds[t]] + bc[bounds[t]]
            shift = start - pos
            if shift:
                _move_down(op_, ov, E, pos, start, ends[t] - start, T)
                for i in range(bounds[t] + 1, bounds[t + 1] + 1):
                    oc[i] = <index_t>(oc[i] - shift)
            pos += ends[t] - start
    return pos


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
    prefix of out_plain and out_values). op and alpha as for merge_fill. (merge_fused with
    union=True for one batch, with outputs of one batch.)"""
    if a_compressed.shape[0] != 1 or out_plain.shape[0] != 1 or out_values.shape[0] != 1:
        raise ValueError("merge_union: one batch with E >= 1 and outputs of the upper bound nnz_a + nnz_b")
    return merge_fused(a_compressed, a_plain, a_values, b_compressed, b_plain, b_values, out_compressed,
                       out_plain[0], out_values[0], op, True, alpha, logical, nthreads)


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
    cdef Py_ssize_t R = B * n, E = out_values.shape[2], ch, nparts
    cdef int T = _threads(nthreads, R)
    cdef Py_ssize_t* bounds
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
    if T == 1:
        with nogil:
            _fill_chunk(0, R, n, op, union, &a_compressed[0, 0], ap, av, sa, &b_compressed[0, 0], bp, bv, sb,
                        &out_compressed[0, 0], &out_plain[0, 0], &out_values[0, 0, 0], so, E, alpha, logical)
        return
    nparts = min(R, PARTS_PER_THREAD * T)
    bounds = _row_parts(&a_compressed[0, 0], sa, &b_compressed[0, 0], sb, B, n, nparts)
    with nogil:
        for ch in prange(nparts, num_threads=T, schedule="dynamic", chunksize=1):
            _fill_chunk(bounds[ch], bounds[ch + 1], n, op, union, &a_compressed[0, 0], ap, av, sa, &b_compressed[0, 0],
                        bp, bv, sb, &out_compressed[0, 0], &out_plain[0, 0], &out_values[0, 0, 0], so, E, alpha,
                        logical)
    free(bounds)


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


# -- one pass, any batch count: union or intersection into an upper-bound output ----------------
# Flat row r (batch r // n, row r % n) may write at most its upper bound of entries: the two row
# lengths added (union) or the length of the row in the operand with fewer entries per batch
# (intersection; a row's intersection is no longer than either row). Rows are split into parts
# of about equal work; each part writes its rows one after another from the upper bound of its
# first row's start on, and the parts then move down, in order, to close up (no move where the
# bound was met, e.g. the intersection of two equal patterns). (Separate buffers per part, copied
# together at the end as SpGEMM's fused pass does, were slower here: their pages are
# touched twice.) The rows of all batches run one after another, so a batch starts where the one
# before it ends: with one nnz per batch the output is (B, nnz) C-contiguous. A union of one
# batch runs _union_batch (the same scheme, one range per thread, its row ends counted from
# the upper bound on, which saves _fused_rows' separate counting pass).
cdef inline void _intersect2(int op, const index_t* pa, const value_t* va, Py_ssize_t a0, Py_ssize_t a1,
                             const index_t* pb, const value_t* vb, Py_ssize_t b0, Py_ssize_t b1,
                             const index_t* pc, const value_t* vc, Py_ssize_t c0, Py_ssize_t c1,
                             const index_t* pd, const value_t* vd, Py_ssize_t d0, Py_ssize_t d1,
                             index_t* o1p, value_t* o1v, index_t* o2p, value_t* o2v, value_t alpha, bint logical,
                             Py_ssize_t* counts) noexcept nogil:
    """Two scalar rows intersected at once (rows a, b into o1 and rows c, d into o2): the two
    dependency chains overlap, as in _count2. counts[0], counts[1] = the entries of each."""
    cdef Py_ssize_t ia = a0, ib = b0, ic = c0, id_ = d0, n1 = 0, n2 = 0
    cdef index_t x, y, u, v
    while ia < a1 and ib < b1 and ic < c1 and id_ < d1:
        x = pa[ia]
        y = pb[ib]
        u = pc[ic]
        v = pd[id_]
        if x == y:  # values are read only for matches (rare in unrelated patterns)
            o1p[n1] = x
            o1v[n1] = _apply(op, va[ia], vb[ib], alpha, logical)
            n1 += 1
        if u == v:
            o2p[n2] = u
            o2v[n2] = _apply(op, vc[ic], vd[id_], alpha, logical)
            n2 += 1
        ia += x <= y
        ib += y <= x
        ic += u <= v
        id_ += v <= u
    counts[0] = n1 + _fill_intersection(op, pa, va, ia, a1, pb, vb, ib, b1, 1, alpha, logical, o1p + n1, o1v + n1,
                                        True)
    counts[1] = n2 + _fill_intersection(op, pc, vc, ic, c1, pd, vd, id_, d1, 1, alpha, logical, o2p + n2, o2v + n2,
                                        True)


cdef inline Py_ssize_t _intersect_rows(int op, Py_ssize_t r0, Py_ssize_t r1, Py_ssize_t n,
                                       const index_t* ac, const index_t* ap, const value_t* av, Py_ssize_t sa,
                                       const index_t* bc, const index_t* bp, const value_t* bv, Py_ssize_t sb,
                                       index_t* oc, index_t* op_, value_t* ov, value_t alpha,
                                       bint logical) noexcept nogil:
    """_fused_rows for scalar intersections, two rows at a time: the second row writes from the
    first's bound on (its length in the operand of fewer entries) and moves down after."""
    cdef Py_ssize_t r = r0, b = r0 // n, k, b2, k2, pos = 0, room
    cdef Py_ssize_t cnt[2]
    k = b * (n + 1) + r0 - b * n
    while r < r1:
        if k == (b + 1) * (n + 1) - 1:  # past the last row of batch b
            b += 1
            k += 1
        if r + 1 == r1:
            pos += _fill_intersection(op, ap + b * sa, av + b * sa, ac[k], ac[k + 1], bp + b * sb, bv + b * sb,
                                      bc[k], bc[k + 1], 1, alpha, logical, op_ + pos, ov + pos, True)
            oc[k + 1] = <index_t>pos
            break
        b2 = b
        k2 = k + 1
        if k2 == (b2 + 1) * (n + 1) - 1:
            b2 += 1
            k2 += 1
        room = (ac[k + 1] - ac[k]) if sa <= sb else (bc[k + 1] - bc[k])
        _intersect2(op, ap + b * sa, av + b * sa, ac[k], ac[k + 1], bp + b * sb, bv + b * sb, bc[k], bc[k + 1],
                    ap + b2 * sa, av + b2 * sa, ac[k2], ac[k2 + 1], bp + b2 * sb, bv + b2 * sb, bc[k2], bc[k2 + 1],
                    op_ + pos, ov + pos, op_ + pos + room, ov + pos + room, alpha, logical, cnt)
        if cnt[0] < room and cnt[1]:
            memmove(op_ + pos + cnt[0], op_ + pos + room, cnt[1] * sizeof(index_t))
            memmove(ov + pos + cnt[0], ov + pos + room, cnt[1] * sizeof(value_t))
        pos += cnt[0]
        oc[k + 1] = <index_t>pos
        pos += cnt[1]
        oc[k2 + 1] = <index_t>pos
        b = b2
        k = k2 + 1
        r += 2
    return pos


cdef Py_ssize_t _fused_rows(int op, bint union, Py_ssize_t r0, Py_ssize_t r1, Py_ssize_t n,
                            const index_t* ac, const index_t* ap, const value_t* av, Py_ssize_t sa,
                            const index_t* bc, const index_t* bp, const value_t* bv, Py_ssize_t sb,
                            index_t* oc, index_t* op_, value_t* ov, Py_ssize_t E, value_t alpha,
                            bint logical) noexcept nogil:
    """Rows r0 <= r < r1 written one after another from op_/ov on; oc[b, i + 1] = the end of row
    (b, i) counted from op_. Returns the number written."""
    cdef Py_ssize_t r, b = r0 // n, k, a0, a1, b0, b1, pos = 0
    cdef const index_t* pa
    cdef const index_t* pb
    cdef const value_t* va
    cdef const value_t* vb
    if not union and E == 1 and op == OP_MUL:  # (other ops: the row loop below; fewer inlined copies)
        return _intersect_rows(OP_MUL, r0, r1, n, ac, ap, av, sa, bc, bp, bv, sb, oc, op_, ov, alpha, logical)
    k = b * (n + 1) + r0 - b * n  # slot of row (b, i) in the compressed index: (n + 1) per batch
    for r in range(r0, r1):
        if k == (b + 1) * (n + 1) - 1:  # past the last row of batch b (no division per row)
            b += 1
            k += 1
        a0 = ac[k]
        a1 = ac[k + 1]
        b0 = bc[k]
        b1 = bc[k + 1]
        pa = ap + b * sa
        pb = bp + b * sb
        va = av + b * sa * E
        vb = bv + b * sb * E
        if union:
            pos += _fill_union_op(op, pa, va, a0, a1, pb, vb, b0, b1, E, alpha, logical, op_ + pos, ov + pos * E,
                                  (a1 - a0) + (b1 - b0))
        elif op == OP_MUL:
            pos += _fill_intersection(OP_MUL, pa, va, a0, a1, pb, vb, b0, b1, E, alpha, logical, op_ + pos,
                                      ov + pos * E, True)
        else:
            pos += _fill_intersection(op, pa, va, a0, a1, pb, vb, b0, b1, E, alpha, logical, op_ + pos,
                                      ov + pos * E, True)
        oc[k + 1] = <index_t>pos
        k += 1
    return pos


cdef inline int64_t _room_before(bint union, Py_ssize_t r, Py_ssize_t n, const index_t* ac, Py_ssize_t sa,
                                 const index_t* bc, Py_ssize_t sb) noexcept nogil:
    """The upper bound of the entries of the flat rows before r (r == B * n: all of them)."""
    cdef Py_ssize_t b = r // n, i = r - b * n
    if i == 0:  # a batch starts here (r == B * n: the end); compressed indices start at 0
        return <int64_t>b * ((sa + sb) if union else min(sa, sb))
    if union:
        return <int64_t>b * (sa + sb) + ac[b * (n + 1) + i] + bc[b * (n + 1) + i]
    if sa <= sb:
        return <int64_t>b * sa + ac[b * (n + 1) + i]
    return <int64_t>b * sb + bc[b * (n + 1) + i]


def merge_fused(const index_t[:, ::1] a_compressed, const index_t[:, ::1] a_plain,
                const value_t[:, :, ::1] a_values,
                const index_t[:, ::1] b_compressed, const index_t[:, ::1] b_plain,
                const value_t[:, :, ::1] b_values,
                index_t[:, ::1] out_compressed, index_t[::1] out_plain, value_t[:, ::1] out_values,
                int op, bint union, value_t alpha, bint logical, int nthreads):
    """The union (or intersection) of a and b for B >= 1 batches and E >= 1 in one pass, without
    merge_count. out_plain (room,) and out_values (room, E) have room for the upper bound:
    B * (nnz_a + nnz_b) entries for a union, B * min(nnz_a, nnz_b) for an intersection; room
    must fit the index dtype. Fills out_compressed (B, n + 1), each batch's row pointers from 0,
    and the first sum(out_compressed[:, n]) entries of out_plain and out_values (batch after
    batch); returns that sum. op, alpha, logical as for merge_fill (PLUS too). Batches of
    different nnz are not refused here: the caller compares out_compressed[:, n]."""
    cdef Py_ssize_t B = a_compressed.shape[0], n = a_compressed.shape[1] - 1, E = out_values.shape[1]
    cdef Py_ssize_t R = B * n, sa = a_plain.shape[1], sb = b_plain.shape[1], room, p, nparts, r, b, k
    cdef Py_ssize_t pos, start, base, end
    cdef int64_t limit = 2147483647 if index_t is int32_t else 9223372036854775807
    cdef int T = _threads(nthreads, R)
    cdef value_t zero = 0
    cdef const value_t* av = &zero
    cdef const value_t* bv = &zero
    cdef const index_t* ap = NULL
    cdef const index_t* bp = NULL
    cdef const index_t* ac = &a_compressed[0, 0]
    cdef const index_t* bc = &b_compressed[0, 0]
    cdef index_t* oc
    cdef Py_ssize_t* bounds
    cdef Py_ssize_t[::1] written
    cdef Py_ssize_t[::1] offsets
    _check_pair(a_compressed, a_plain, b_compressed, b_plain)
    if op < OP_ADD or op > OP_PLUS:
        raise ValueError(f"unknown op {op}")
    room = B * (sa + sb) if union else B * min(sa, sb)
    if (E < 1 or a_values.shape[0] != B or a_values.shape[1] != sa or a_values.shape[2] != E
            or b_values.shape[0] != B or b_values.shape[1] != sb or b_values.shape[2] != E):
        raise ValueError(f"merge_fused: values (B, nnz, E) with E >= 1 do not match: a ({a_values.shape[0]}, "
                         f"{a_values.shape[1]}, {a_values.shape[2]}), b ({b_values.shape[0]}, {b_values.shape[1]}, "
                         f"{b_values.shape[2]}), out (..., {E})")
    if (out_compressed.shape[0] != B or out_compressed.shape[1] != n + 1 or out_plain.shape[0] != room
            or out_values.shape[0] != room):
        raise ValueError(f"merge_fused: out_compressed must be ({B}, {n + 1}) and out_plain, out_values have "
                         f"room for {room} entries; got ({out_compressed.shape[0]}, {out_compressed.shape[1]}), "
                         f"{out_plain.shape[0]}, {out_values.shape[0]}")
    if room > limit:
        raise ValueError(f"merge_fused: room for {room} entries does not fit the index dtype")
    if R == 0 or room == 0:
        out_compressed[:, :] = 0
        return 0
    oc = &out_compressed[0, 0]
    for b in range(B):  # every row's end is written by the merge
        oc[b * (n + 1)] = 0
    if sa:
        ap = &a_plain[0, 0]
        av = &a_values[0, 0, 0]
    if sb:
        bp = &b_plain[0, 0]
        bv = &b_values[0, 0, 0]
    if union and B == 1:  # row ends counted from the upper bound on (one pass fewer for one batch)
        return _union_batch(op, T, n, ac, ap, av, sa, bc, bp, bv, sb, oc, &out_plain[0], &out_values[0, 0], E, alpha,
                            logical)
    # a union moves all but the first part (it never meets its bound): one part per thread; an
    # intersection moves only what falls short of its bound: more parts, dynamically scheduled
    nparts = 1 if T == 1 else (T if union else min(R, PARTS_PER_THREAD * T))
    written = np.zeros(nparts, dtype=np.intp)
    offsets = np.zeros(nparts, dtype=np.intp)
    bounds = _row_parts(ac, sa, bc, sb, B, n, nparts)
    with nogil:
        if nparts == 1:
            written[0] = _fused_rows(op, union, 0, R, n, ac, ap, av, sa, bc, bp, bv, sb, oc, &out_plain[0],
                                        &out_values[0, 0], E, alpha, logical)
        else:  # each part from the upper bound of its first row's start on
            for p in prange(nparts, num_threads=T, schedule="dynamic", chunksize=1):
                start = _room_before(union, bounds[p], n, ac, sa, bc, sb)
                written[p] = _fused_rows(op, union, bounds[p], bounds[p + 1], n, ac, ap, av, sa, bc, bp, bv, sb,
                                            oc, &out_plain[start], &out_values[start, 0], E, alpha, logical)
        pos = 0
        for p in range(nparts):  # in order: a part moves down to where the ones before it end
            offsets[p] = pos
            start = _room_before(union, bounds[p], n, ac, sa, bc, sb)
            if written[p] and start != pos:
                _move_down(&out_plain[0], &out_values[0, 0], E, pos, start, written[p], T)
            pos += written[p]
    # Row ends so far count from their part's start; make them count from their batch's start.
    if B > 1 or nparts > 1:
        with nogil:
            base = 0
            end = 0
            for p in range(nparts):
                for r in range(bounds[p], bounds[p + 1]):
                    b = r // n
                    k = b * (n + 1) + r - b * n
                    if k == b * (n + 1):
                        base = end  # batch b starts where the row before it ended
                    end = offsets[p] + oc[k + 1]
                    oc[k + 1] = <index_t>(end - base)
    free(bounds)
    return pos
