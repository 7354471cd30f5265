# One-pass union merges of coalesced COO operands (add, sub, maximum, minimum), and the COO
# key (de)linearisation that lets the two-pass merges of _elementwise.pyx take COO tensors.
# Split from _elementwise.pyx, whose op codes and value ops it shares (_merge_ops.pxi).
cimport cython
from cython.parallel cimport prange
from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy, memmove

import numpy as np

from ._radix cimport _key_quot
from ._pool cimport empty
from ._types cimport index_t, value_t

include "_merge_ops.pxi"


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
    cdef int64_t key, q
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
                q = _key_quot(key, shape[d], inv[d] if fast else 0)
                out[d, k] = <index_t>(key - q * shape[d])
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
        return empty((0, nnz), dtype=np.asarray(out_indices).dtype), nnz
    if nnz == ub:
        return np.asarray(out_indices), nnz
    result = empty((S, nnz), dtype=np.asarray(out_indices).dtype)
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
