# Sparse @ sparse (SpGEMM) and sampled dense @ dense (SDDMM) kernels.
#
# SpGEMM is row-parallel over the canonical form compressed (B, n + 1), plain (B, nnz),
# values (B, nnz, Rb * Kb) of both operands (rows compressed: csr/bsr; the Python wrapper
# turns every other layout into it). A csr row picks how its products are summed per column by
# the number k of B rows it combines, its products ub and the span [lo, hi] of its columns
# (Gustavson's row-by-row product with the accumulators of Nagasaka et al. 2018, plus two):
#
# - merge (k <= MERGE_MAX): the k sorted B rows are merged, a scaled copy for k = 1;
# - dense (a span of at most DENSE_MAX columns, and at most DENSE_SPAN columns per product:
#   stencils, banded rows, hubs of small graphs): the sums go to a dense array over the span and
#   a flag byte per column (a plain store: no branch, no read-modify-write chain) or, for spans
#   wider than FLAG_SPAN columns per product, a bit marks the columns hit; reading the marks in
#   order gives the row sorted, without a sort;
# - expand-sort-compress (ub <= ESC_MAX, and no more products than output columns): the
#   products are collected with their columns, sorted (in place for a few products of a narrow span;
#   else a counting sort on the high bits of the row's column range, then an insertion pass;
#   quicksort for crowded buckets) and summed per
#   column in order of discovery; everything stays in a few KiB of scratch;
# - the slot array (the other rows, and every block row): a per-thread array over the output
#   columns says where each column's sum is; the distinct columns are collected and sorted as above.
#
# All sum in the same order (A's entries, then B's), so the results are the same bit for bit.
# csr products run in one fused pass (spgemm_flops, then spgemm_fused): the output has room for
# every product; the rows are split into parts of about equal products, each part's rows are
# written one after another (the first part's into the output, the others' into buffers of their
# own) and the parts are copied together. Products with more room than the wrapper allows, and
# bsr, run two passes: symbolic (the distinct columns of every row, counted with per-thread
# flags or a bitmap for rows of a narrow span, else a per-thread marker array), then numeric
# into the exact output. Output rows are canonical (invariant 5.6). Explicit zeros from cancellation stay
# entries (a structural product). Inputs satisfy 5.1-5.5 (the wrapper scans unchecked input
# first), so that no kernel reads out of bounds; no row writes past its room. Every entry point
# looks at the indices again first (_changed: branch-free passes, small beside the products),
# since their memory may have changed after they were checked (issue 34).
#
# The parts live in include files (one extension module): the symbolic pass and the row helpers
# in _spgemm_symbolic.pxi, the numeric scratch and the accumulators in _spgemm_accumulators.pxi;
# this file keeps the tunables, the row driver (_row) and the entry points.
from cython.parallel cimport parallel, prange
from libc.stdint cimport int32_t, int64_t, uint8_t, uint64_t
from libc.stdlib cimport calloc, free, malloc
from libc.string cimport memcpy, memset

from ._prefetch cimport st_prefetch
from ._scratch cimport scratch_alloc, scratch_calloc, scratch_free

import numpy as np

from ._types cimport index_t, value_t
from ._guard cimport bad_compressed, bad_index, bad_plain, clamp

cdef extern from *:
    """
    #include <stdint.h>
    #include <string.h>
    #include <stddef.h>
    static inline int st_bitlen64(uint64_t x) { return x ? 64 - __builtin_clzll(x) : 0; }
    static inline int st_ctz64(uint64_t x) { return __builtin_ctzll(x); }
    static inline int st_popcount64(uint64_t x) { return __builtin_popcountll(x); }

    /* Dot products with four independent vector accumulators (SSE2 baseline). */
    typedef float st_v4f __attribute__((vector_size(16)));
    typedef double st_v2d __attribute__((vector_size(16)));
    #define ST_DEFINE_DOT(NAME, T, VT, L, HSUM)                                 \\
    static inline T st_dot_##NAME(const T* x, const T* y, ptrdiff_t n) {          \\
        VT s0 = {0}, s1 = s0, s2 = s0, s3 = s0, a, b;                             \\
        ptrdiff_t k = 0;                                                          \\
        T s;                                                                      \\
        for (; k + 4 * L <= n; k += 4 * L) {                                      \\
            memcpy(&a, x + k, 16); memcpy(&b, y + k, 16); s0 += a * b;            \\
            memcpy(&a, x + k + L, 16); memcpy(&b, y + k + L, 16); s1 += a * b;    \\
            memcpy(&a, x + k + 2 * L, 16); memcpy(&b, y + k + 2 * L, 16); s2 += a * b; \\
            memcpy(&a, x + k + 3 * L, 16); memcpy(&b, y + k + 3 * L, 16); s3 += a * b; \\
        }                                                                         \\
        for (; k + L <= n; k += L) { memcpy(&a, x + k, 16); memcpy(&b, y + k, 16); s0 += a * b; } \\
        s0 = (s0 + s1) + (s2 + s3);                                               \\
        s = HSUM(s0);                                                             \\
        for (; k < n; k++) s += x[k] * y[k];                                      \\
        return s;                                                                 \\
    }
    #define ST_HSUM4(v) ((v[0] + v[1]) + (v[2] + v[3]))
    #define ST_HSUM2(v) (v[0] + v[1])
    ST_DEFINE_DOT(f32, float, st_v4f, 4, ST_HSUM4)
    ST_DEFINE_DOT(f64, double, st_v2d, 2, ST_HSUM2)
    """
    int st_bitlen64(uint64_t x) nogil
    int st_ctz64(uint64_t x) nogil
    int st_popcount64(uint64_t x) nogil
    float st_dot_f32(const float* x, const float* y, Py_ssize_t n) nogil
    double st_dot_f64(const double* x, const double* y, Py_ssize_t n) nogil

# Rows per scheduling chunk of the row-parallel passes (dynamic schedule).
cdef Py_ssize_t ROW_CHUNK = 256
# Buckets of the row sort holding more keys than this are quicksorted before the insertion pass.
cdef Py_ssize_t CROWDED = 24
# csr rows of at most this many products, and no more products than output columns, are summed
# by expand-sort-compress (_esc_row); longer ones (and block rows) with the slot array over the
# output columns, whose random accesses cost more than sorting unless the columns are few.
cdef Py_ssize_t ESC_MAX = 8192
# csr rows of at most ESC_SMALL products whose columns span less than ESC_SMALL_SPAN columns per
# product sort them in place (insertion sort below 17, quicksort above) instead of by the
# counting sort, whose passes over the span cost more than sorting a few products that lie
# close together (rows with more products, or spread wider, sort faster by counting).
cdef Py_ssize_t ESC_SMALL = 32
cdef Py_ssize_t ESC_SMALL_SPAN = 256
# The sorting path's counting sort uses fewer than 2 ** (bitlen(products) - ESC_SHIFT) buckets
# (at most 4 per product for -1: the scratch's histogram has that room).
cdef int ESC_SHIFT = -1
# Parts per thread of the fused pass (dynamic schedule); more balance the load, each adds a move.
cdef Py_ssize_t PARTS_PER_THREAD = 4
# csr rows combining at most this many rows of B are merged (MERGE_CAP: the most a merge can take).
cdef enum:
    MERGE_CAP = 64
cdef Py_ssize_t MERGE_MAX = 2
# csr rows whose output columns span at most DENSE_MAX columns, and at most DENSE_SPAN per
# product, are summed in a dense accumulator over that span (_dense_row).
cdef Py_ssize_t DENSE_MAX = 1 << 16
cdef Py_ssize_t DENSE_SPAN = 128
# Such rows whose span is at most FLAG_SPAN columns per product mark the columns hit with a flag
# byte each (stencils: the scan of the span is cheap next to the products), wider ones with a bit.
cdef Py_ssize_t FLAG_SPAN = 16
# The accumulator of every csr row that it can take, for tests and benchmarks (AUTO: by the row).
cdef enum:
    AUTO = 0
    MERGE = 1
    DENSE = 2
    ESC = 3
    SLOTS = 4
cdef int FORCE = AUTO
_ACCUMULATORS = {"auto": AUTO, "merge": MERGE, "dense": DENSE, "esc": ESC, "slots": SLOTS}


def _tune(accumulator=None, merge_max=None, dense_max=None, dense_span=None, esc_max=None, parts_per_thread=None,
          flag_span=None, esc_small=None, esc_small_span=None):
    """Set the csr accumulator choice (benchmarks and tests only): ``accumulator`` forces one of
    "merge", "dense", "esc", "slots" for every row it can take ("auto": by the row); the others are
    the thresholds above. Returns the previous settings, as keyword arguments."""
    global FORCE, MERGE_MAX, DENSE_MAX, DENSE_SPAN, ESC_MAX, PARTS_PER_THREAD, FLAG_SPAN, ESC_SMALL, ESC_SMALL_SPAN
    names = {v: k for k, v in _ACCUMULATORS.items()}
    old = dict(accumulator=names[FORCE], merge_max=MERGE_MAX, dense_max=DENSE_MAX, dense_span=DENSE_SPAN,
               esc_max=ESC_MAX, parts_per_thread=PARTS_PER_THREAD, flag_span=FLAG_SPAN, esc_small=ESC_SMALL,
               esc_small_span=ESC_SMALL_SPAN)
    if accumulator is not None:
        if accumulator not in _ACCUMULATORS:
            raise ValueError(f"accumulator must be one of {sorted(_ACCUMULATORS)}, got {accumulator!r}")
        FORCE = _ACCUMULATORS[accumulator]
    if merge_max is not None:
        MERGE_MAX = min(max(int(merge_max), 0), MERGE_CAP)
    if dense_max is not None:
        DENSE_MAX = max(int(dense_max), 0)
    if dense_span is not None:
        DENSE_SPAN = max(int(dense_span), 0)
    if esc_max is not None:
        ESC_MAX = max(int(esc_max), 0)
    if parts_per_thread is not None:
        PARTS_PER_THREAD = max(int(parts_per_thread), 1)
    if flag_span is not None:
        FLAG_SPAN = max(int(flag_span), 0)
    if esc_small is not None:
        ESC_SMALL = max(int(esc_small), 0)
    if esc_small_span is not None:
        ESC_SMALL_SPAN = max(int(esc_small_span), 0)
    return old
cdef uint64_t LOW32 = 0xffffffffu


include "_spgemm_symbolic.pxi"


cdef _changed(const index_t[:, ::1] a_compressed, const index_t[:, ::1] a_plain,
              const index_t[:, ::1] b_compressed, const index_t[:, ::1] b_plain, Py_ssize_t ncols,
              bint has_b=True):
    """ValueError where A's or B's compressed index breaks 5.1-5.3, an A column is not a B row,
    or (has_b) a B column is not below ncols; without b_plain B's nnz is taken from its first
    batch's end (every batch ends there when valid)."""
    cdef Py_ssize_t B = a_compressed.shape[0], n = a_compressed.shape[1] - 1, nb = b_compressed.shape[1] - 1
    cdef Py_ssize_t sa = a_plain.shape[1]
    cdef Py_ssize_t sb = b_plain.shape[1] if has_b else 0
    cdef bint bad = False
    if B == 0 or n < 0 or nb < 0:
        return
    with nogil:
        bad = bad_compressed(&a_compressed[0, 0], B, n, sa)
        if not bad and sa:
            bad = bad_plain(&a_plain[0, 0], B * sa, nb)
        if not bad:
            bad = bad_compressed(&b_compressed[0, 0], B, nb, sb if has_b else b_compressed[0, nb])
        if not bad and sb:
            bad = bad_plain(&b_plain[0, 0], B * sb, ncols)
    if bad:
        raise ValueError("spgemm: an index changed after validation (5.1-5.5 no longer hold)")


def spgemm_symbolic(const index_t[:, ::1] a_compressed, const index_t[:, ::1] a_plain,
                    const index_t[:, ::1] b_compressed, const index_t[:, ::1] b_plain,
                    Py_ssize_t ncols, int64_t[:, ::1] counts, int nthreads):
    """counts[b, i] = the number of distinct (block) columns of row i of A[b] @ B[b]."""
    cdef Py_ssize_t B = a_compressed.shape[0], n = a_compressed.shape[1] - 1
    cdef Py_ssize_t R = B * n, ch, r0, r1
    cdef Py_ssize_t nchunks = (R + ROW_CHUNK - 1) // ROW_CHUNK
    cdef int T = max(1, min(nthreads, nchunks))
    cdef Marks* m
    cdef int[::1] failed = np.zeros(1, dtype=np.intc)
    if b_compressed.shape[0] != B or a_plain.shape[0] != B or b_plain.shape[0] != B:
        raise ValueError("a and b must have the same number of batches")
    if counts.shape[0] != B or counts.shape[1] != n:
        raise ValueError(f"counts must have shape ({B}, {n}), got ({counts.shape[0]}, {counts.shape[1]})")
    if R == 0:
        return
    if a_plain.shape[1] == 0 or b_plain.shape[1] == 0:
        counts[:, :] = 0
        return
    _changed(a_compressed, a_plain, b_compressed, b_plain, ncols)
    with nogil, parallel(num_threads=T):
        m = _marks_new(ncols)
        if m == NULL:
            failed[0] = 1
        for ch in prange(nchunks, schedule="dynamic", chunksize=1):
            if m != NULL:
                r0 = ch * ROW_CHUNK
                r1 = min(R, r0 + ROW_CHUNK)
                _symbolic_chunk(r0, r1, n, &a_compressed[0, 0], a_compressed.shape[1], &a_plain[0, 0],
                                a_plain.shape[1], &b_compressed[0, 0], b_compressed.shape[1], &b_plain[0, 0],
                                b_plain.shape[1], &counts[0, 0], m)
        _marks_free(m)
    if failed[0]:
        raise MemoryError(f"spgemm: out of memory for the per-thread marker arrays ({ncols} columns)")


include "_spgemm_accumulators.pxi"


# -- numeric SpGEMM: the driver ------------------------------------------------------------------
cdef Py_ssize_t _row(const index_t* ac, const index_t* ap, const value_t* av,
                     const index_t* bc, const index_t* bp, const value_t* bv,
                     Py_ssize_t i, Py_ssize_t Rb, Py_ssize_t Kb, Py_ssize_t Cb, bint logical,
                     Scratch* s, Py_ssize_t cap, index_t* out_p, value_t* out_v) noexcept nogil:
    """Row i of A @ B, at most ``cap`` entries. csr rows pick their accumulator by the rows of B
    they combine (k), their products (ub) and the span of their columns: merge (k <= MERGE_MAX),
    dense (a span of at most DENSE_MAX columns and DENSE_SPAN per product), expand-sort-compress
    (ub <= ESC_MAX), else the slot array, which also takes every block row. Returns the number
    written, -1 when out of memory."""
    cdef Py_ssize_t ub, lo, hi, k, width
    cdef int acc = FORCE
    if Rb == 1 and Kb == 1 and Cb == 1:
        ub = _row_span(ac, ap, bc, bp, i, &lo, &hi)
        if ub == 0 or cap <= 0:
            return 0
        k = ac[i + 1] - ac[i]
        width = hi - lo + 1
        if acc == MERGE and k > MERGE_CAP or acc == DENSE and width > s.dense_room or \
                acc == ESC and (ub > s.room or ub > s.n):
            acc = AUTO
        if acc == AUTO:
            if k <= MERGE_MAX:
                acc = MERGE
            elif width <= s.dense_room and width <= DENSE_SPAN * ub:
                acc = DENSE
            elif ub <= ESC_MAX and ub <= s.n and ub <= s.room:
                acc = ESC
            else:
                acc = SLOTS
        if acc == MERGE:
            return _merge_row(ac, ap, av, bc, bp, bv, i, logical, cap, out_p, out_v)
        if acc == DENSE:
            if not _scratch_dense(s, _identity(av)):
                return -1
            if width <= FLAG_SPAN * ub:
                return _dense_flags_row(ac, ap, av, bc, bp, bv, i, logical, s, lo, width, cap, out_p, out_v)
            return _dense_row(ac, ap, av, bc, bp, bv, i, logical, s, lo, width, cap, out_p, out_v)
        if acc == ESC:
            return _esc_row(ac, ap, av, bc, bp, bv, i, logical, s, ub, lo, hi, cap, out_p, out_v)
    if not _scratch_slots(s):
        return -1
    return _spa_row(ac, ap, av, bc, bp, bv, i, Rb, Kb, Cb, logical, s, min(cap, s.room), out_p, out_v)


cdef int _numeric_chunk(Py_ssize_t r0, Py_ssize_t r1, Py_ssize_t n,
                        const index_t* ac, Py_ssize_t sac, const index_t* ap, Py_ssize_t sap, const value_t* av,
                        const index_t* bc, Py_ssize_t sbc, const index_t* bp, Py_ssize_t sbp, const value_t* bv,
                        const index_t* oc, Py_ssize_t soc, index_t* op, Py_ssize_t sop, value_t* ov,
                        Py_ssize_t Rb, Py_ssize_t Kb, Py_ssize_t Cb, bint logical, Scratch* s) noexcept nogil:
    """The flat rows r0 <= r < r1; s* are batch strides of the index arrays (in entries).
    Returns 1 when out of memory."""
    cdef Py_ssize_t r, b, i, o, cnt, EA = Rb * Kb, EB = Kb * Cb, EO = Rb * Cb
    for r in range(r0, r1):
        b = r // n
        i = r - b * n
        o = oc[b * soc + i]
        cnt = oc[b * soc + i + 1] - o
        _prefetch_ahead(ac + b * sac, ap + b * sap, bc + b * sbc, bp + b * sbp, <const char*>(bv + b * sbp * EB),
                        EB * sizeof(value_t), i, n)
        if cnt > 0:
            if _row(ac + b * sac, ap + b * sap, av + b * sap * EA, bc + b * sbc, bp + b * sbp,
                    bv + b * sbp * EB, i, Rb, Kb, Cb, logical, s, cnt, op + b * sop + o,
                    ov + (b * sop + o) * EO) < 0:
                return 1
    return 0


def spgemm_numeric(const index_t[:, ::1] a_compressed, const index_t[:, ::1] a_plain,
                   const value_t[:, :, ::1] a_values,
                   const index_t[:, ::1] b_compressed, const index_t[:, ::1] b_plain,
                   const value_t[:, :, ::1] b_values,
                   Py_ssize_t ncols, Py_ssize_t Rb, Py_ssize_t Kb, Py_ssize_t Cb,
                   const index_t[:, ::1] out_compressed, index_t[:, ::1] out_plain,
                   value_t[:, :, ::1] out_values, bint logical, int nthreads):
    """Fill out_plain/out_values of A @ B per batch, rows sorted; out_compressed holds the
    prefix sums of spgemm_symbolic's counts. Values are (B, nnz, E) with E = Rb*Kb for A,
    Kb*Cb for B and Rb*Cb for the output (1 for csr). ``logical``: uint8 values are bools
    (products are and, sums are or)."""
    cdef Py_ssize_t B = a_compressed.shape[0], n = a_compressed.shape[1] - 1
    cdef Py_ssize_t R = B * n, b, i, EO = Rb * Cb, maxc = 0, cnt, ch, r0, r1
    cdef Py_ssize_t nchunks = (R + ROW_CHUNK - 1) // ROW_CHUNK
    cdef int T = max(1, min(nthreads, nchunks))
    cdef Scratch* s
    cdef int[::1] failed = np.zeros(1, dtype=np.intc)
    cdef Py_ssize_t onnz = out_plain.shape[1]
    if (a_values.shape[0] != B or b_values.shape[0] != B or out_values.shape[0] != B
            or out_compressed.shape[0] != B or out_compressed.shape[1] != n + 1 or out_plain.shape[0] != B
            or out_values.shape[1] != onnz or a_values.shape[1] != a_plain.shape[1]
            or b_values.shape[1] != b_plain.shape[1]):
        raise ValueError("spgemm_numeric: inconsistent batch, row or nnz counts")
    if a_values.shape[2] != Rb * Kb or b_values.shape[2] != Kb * Cb or out_values.shape[2] != EO:
        raise ValueError("spgemm_numeric: values do not match the block sizes")
    if R == 0 or onnz == 0 or EO == 0:
        return
    _changed(a_compressed, a_plain, b_compressed, b_plain, ncols)
    for b in range(B):
        if out_compressed[b, 0] != 0 or out_compressed[b, n] != onnz:
            raise ValueError("spgemm_numeric: out_compressed must run from 0 to nnz in every batch")
        for i in range(n):
            cnt = out_compressed[b, i + 1] - out_compressed[b, i]
            if cnt < 0:
                raise ValueError("spgemm_numeric: out_compressed must be non-decreasing")
            if cnt > maxc:
                maxc = cnt
    if EO == 1 and Kb == 1 and maxc < min(ESC_MAX, ncols):
        maxc = min(ESC_MAX, ncols)
    with nogil, parallel(num_threads=T):
        s = _scratch_new(ncols, EO, sizeof(value_t), maxc)
        if s == NULL:
            failed[0] = 1
        for ch in prange(nchunks, schedule="dynamic", chunksize=1):
            if s != NULL and not failed[0]:
                r0 = ch * ROW_CHUNK
                r1 = min(R, r0 + ROW_CHUNK)
                if _numeric_chunk(r0, r1, n, &a_compressed[0, 0], a_compressed.shape[1], &a_plain[0, 0],
                               a_plain.shape[1], &a_values[0, 0, 0], &b_compressed[0, 0], b_compressed.shape[1],
                               &b_plain[0, 0], b_plain.shape[1], &b_values[0, 0, 0], &out_compressed[0, 0],
                               n + 1, &out_plain[0, 0], onnz, &out_values[0, 0, 0], Rb, Kb, Cb, logical, s):
                    failed[0] = 1
        _scratch_free(s)
    if failed[0]:
        raise MemoryError(f"spgemm: out of memory for the per-thread accumulators ({ncols} x {EO} values)")


# -- fused SpGEMM (csr) ---------------------------------------------------------------------------
# One pass instead of symbolic + numeric: every row may write its upper bound of entries (the
# products it forms), so the output is allocated with room for all products (prefix sums from
# spgemm_flops); rows are split into parts of about equal products, each part writes its rows one
# after another, and the parts are copied together at the end (one part, and no copy, on one
# thread).
def spgemm_flops(const index_t[:, ::1] a_compressed, const index_t[:, ::1] a_plain,
                 const index_t[:, ::1] b_compressed, int64_t[::1] prefix, int nthreads):
    """prefix[r + 1] - prefix[r] = the products of flat row r (batch r // n, row r % n) of
    A @ B, the sum of the lengths of the B rows it combines; prefix[0] = 0. Returns the
    largest number of products of a row."""
    cdef Py_ssize_t B = a_compressed.shape[0], n = a_compressed.shape[1] - 1
    cdef Py_ssize_t R = B * n, r, b, i, ka, sac = a_compressed.shape[1], sap = a_plain.shape[1]
    cdef Py_ssize_t sbc = b_compressed.shape[1]
    cdef int64_t acc, mx = 0
    cdef int T = max(1, min(nthreads, R // 4096 + 1))
    cdef const index_t* a_c
    cdef const index_t* a_p
    cdef const index_t* b_c
    if a_plain.shape[0] != B or b_compressed.shape[0] != B:
        raise ValueError("a and b must have the same number of batches")
    if prefix.shape[0] != R + 1:
        raise ValueError(f"prefix must have {R + 1} entries, got {prefix.shape[0]}")
    prefix[0] = 0
    if R == 0:
        return 0
    _changed(a_compressed, a_plain, b_compressed, a_plain, 0, False)
    with nogil:
        for r in prange(R, num_threads=T, schedule="static"):
            b = r // n
            i = r - b * n
            a_c = &a_compressed[0, 0] + b * sac
            a_p = &a_plain[0, 0] + b * sap if sap else NULL
            b_c = &b_compressed[0, 0] + b * sbc
            acc = 0
            for ka in range(a_c[i], a_c[i + 1]):
                acc = acc + (b_c[a_p[ka] + 1] - b_c[a_p[ka]])
            prefix[r + 1] = acc
        for r in range(R):
            if prefix[r + 1] > mx:
                mx = prefix[r + 1]
            prefix[r + 1] += prefix[r]
    return mx


cdef Py_ssize_t _fused_part(Py_ssize_t r0, Py_ssize_t r1, Py_ssize_t n, const int64_t* prefix,
                            const index_t* ac, Py_ssize_t sac, const index_t* ap, Py_ssize_t sap, const value_t* av,
                            const index_t* bc, Py_ssize_t sbc, const index_t* bp, Py_ssize_t sbp, const value_t* bv,
                            int64_t* counts, index_t* op, value_t* ov, bint logical, Scratch* s) noexcept nogil:
    """The flat rows r0 <= r < r1, written one after another into op/ov (room for
    prefix[r1] - prefix[r0] entries); each row at most up to the next row's bound. Returns the
    number written, -1 when out of memory."""
    cdef Py_ssize_t r, b, i, c, pos = 0, base = prefix[r0]
    for r in range(r0, r1):
        b = r // n
        i = r - b * n
        _prefetch_ahead(ac + b * sac, ap + b * sap, bc + b * sbc, bp + b * sbp, <const char*>(bv + b * sbp),
                        sizeof(value_t), i, n)
        c = _row(ac + b * sac, ap + b * sap, av + b * sap, bc + b * sbc, bp + b * sbp, bv + b * sbp, i, 1, 1, 1,
                 logical, s, prefix[r + 1] - base - pos, op + pos, ov + pos)
        if c < 0:
            return -1
        counts[r] = c
        pos += c
    return pos


def spgemm_fused(const index_t[:, ::1] a_compressed, const index_t[:, ::1] a_plain,
                 const value_t[:, ::1] a_values,
                 const index_t[:, ::1] b_compressed, const index_t[:, ::1] b_plain,
                 const value_t[:, ::1] b_values, Py_ssize_t ncols,
                 const int64_t[::1] prefix, Py_ssize_t maxub, int64_t[::1] counts,
                 index_t[::1] out_plain, value_t[::1] out_values, bint logical, int nthreads):
    """csr A @ B in one pass: counts[r] = the entries of flat row r (batch r // n, row r % n),
    whose sorted columns and sums are out_plain/out_values[sum(counts[:r]):][:counts[r]] on
    return (rows of all batches one after another). ``prefix``/``maxub`` come from spgemm_flops;
    out_plain and out_values have room for prefix[-1] entries, of which only the first
    sum(counts) are written (the others are never touched). Values are (B, nnz). Returns
    the number of entries written (sum(counts))."""
    cdef Py_ssize_t B = a_compressed.shape[0], n = a_compressed.shape[1] - 1
    cdef Py_ssize_t R = B * n, r, p, lo_p, hi_p, mid, pos, c, room, room_p
    cdef int64_t total
    cdef int T
    cdef Py_ssize_t nparts
    cdef Scratch* s
    cdef int[::1] failed = np.zeros(1, dtype=np.intc)
    cdef int64_t[::1] bounds
    cdef int64_t[::1] written
    cdef int64_t[::1] offsets
    cdef index_t** part_p = NULL
    cdef value_t** part_v = NULL
    cdef index_t* dst_p
    cdef value_t* dst_v
    if (a_plain.shape[0] != B or b_compressed.shape[0] != B or b_plain.shape[0] != B or a_values.shape[0] != B
            or b_values.shape[0] != B or a_values.shape[1] != a_plain.shape[1]
            or b_values.shape[1] != b_plain.shape[1]):
        raise ValueError("spgemm_fused: inconsistent batch or nnz counts")
    if prefix.shape[0] != R + 1 or counts.shape[0] != R:
        raise ValueError(f"spgemm_fused: prefix and counts must have {R + 1} and {R} entries")
    total = prefix[R]
    if prefix[0] != 0 or out_plain.shape[0] != total or out_values.shape[0] != total:
        raise ValueError("spgemm_fused: prefix must run from 0 to the room of out_plain and out_values")
    for r in range(R):
        if prefix[r + 1] < prefix[r]:
            raise ValueError("spgemm_fused: prefix must be non-decreasing")
    counts[:] = 0
    if R == 0 or total == 0:
        return 0
    _changed(a_compressed, a_plain, b_compressed, b_plain, ncols)
    room = max(min(maxub, ncols), min(maxub, ESC_MAX))
    T = max(1, min(nthreads, total // 65536 + 1))
    nparts = 1 if T == 1 else min(R, T * PARTS_PER_THREAD)
    bounds = np.empty(nparts + 1, dtype=np.int64)
    written = np.zeros(nparts, dtype=np.int64)
    offsets = np.zeros(nparts, dtype=np.int64)
    bounds[0] = 0
    bounds[nparts] = R
    for p in range(1, nparts):  # the first row whose products start at or after p / nparts of them
        lo_p = bounds[p - 1]
        hi_p = R
        while lo_p < hi_p:
            mid = (lo_p + hi_p) // 2
            if prefix[mid] * nparts < total * p:
                lo_p = mid + 1
            else:
                hi_p = mid
        bounds[p] = lo_p
    # Part 0 writes at the start of the output, every other part into a buffer of its own (only the
    # pages it writes are ever touched), which is copied after the parts before it at the end: the
    # output's pages are touched once, in order (no room left between parts, no move).
    part_p = <index_t**>calloc(nparts, sizeof(index_t*))
    part_v = <value_t**>calloc(nparts, sizeof(value_t*))
    if part_p == NULL or part_v == NULL:
        free(part_p)
        free(part_v)
        raise MemoryError("spgemm: out of memory for the parts of the output")
    with nogil, parallel(num_threads=T):
        s = _scratch_new(ncols, 1, sizeof(value_t), room)
        if s == NULL:
            failed[0] = 1
        for p in prange(nparts, schedule="dynamic", chunksize=1):
            if s != NULL and not failed[0] and bounds[p] < bounds[p + 1]:
                if p == 0:
                    dst_p = &out_plain[0]
                    dst_v = &out_values[0]
                else:
                    room_p = prefix[bounds[p + 1]] - prefix[bounds[p]]
                    part_p[p] = <index_t*>scratch_alloc(room_p * sizeof(index_t) + 1)
                    part_v[p] = <value_t*>scratch_alloc(room_p * sizeof(value_t) + 1)
                    dst_p = part_p[p]
                    dst_v = part_v[p]
                if dst_p == NULL or dst_v == NULL:
                    failed[0] = 1
                else:
                    c = _fused_part(bounds[p], bounds[p + 1], n, &prefix[0], &a_compressed[0, 0],
                                    a_compressed.shape[1], &a_plain[0, 0], a_plain.shape[1], &a_values[0, 0],
                                    &b_compressed[0, 0], b_compressed.shape[1], &b_plain[0, 0], b_plain.shape[1],
                                    &b_values[0, 0], &counts[0], dst_p, dst_v, logical, s)
                    if c < 0:
                        failed[0] = 1
                    else:
                        written[p] = c
        _scratch_free(s)
    pos = 0
    for p in range(nparts):
        offsets[p] = pos
        pos += written[p]
    if not failed[0]:
        with nogil:
            for p in prange(1, nparts, num_threads=T, schedule="dynamic", chunksize=1):
                if written[p]:
                    memcpy(&out_plain[offsets[p]], part_p[p], written[p] * sizeof(index_t))
                    memcpy(&out_values[offsets[p]], part_v[p], written[p] * sizeof(value_t))
    for p in range(nparts):
        scratch_free(part_p[p])
        scratch_free(part_v[p])
    free(part_p)
    free(part_v)
    if failed[0]:
        raise MemoryError(f"spgemm: out of memory for the per-thread accumulators ({ncols} columns)")
    return pos


# -- SDDMM ---------------------------------------------------------------------------------------
# Each entry's dot product reads a row of mat2t picked by its column: a random row, so the first
# lines of the row SDDMM_AHEAD entries on are prefetched (the hardware prefetcher follows a row
# once it is read, not a jump to the next one).
cdef Py_ssize_t SDDMM_AHEAD = 16
cdef Py_ssize_t SDDMM_LINES = 4
cdef inline value_t _dot(const value_t* x, const value_t* y, Py_ssize_t K) noexcept nogil:
    cdef value_t s0 = 0, s1 = 0, s2 = 0, s3 = 0
    cdef Py_ssize_t k = 0
    if value_t is float:
        return st_dot_f32(x, y, K)
    elif value_t is double:
        return st_dot_f64(x, y, K)
    else:
        while k + 4 <= K:
            s0 = s0 + x[k] * y[k]
            s1 = s1 + x[k + 1] * y[k + 1]
            s2 = s2 + x[k + 2] * y[k + 2]
            s3 = s3 + x[k + 3] * y[k + 3]
            k += 4
        while k < K:
            s0 = s0 + x[k] * y[k]
            k += 1
        return (s0 + s1) + (s2 + s3)


def sampled_addmm(const index_t[:, ::1] compressed, const index_t[:, ::1] plain,
                  const value_t[:, ::1] values, const value_t[:, :, ::1] mat1,
                  const value_t[:, :, ::1] mat2t, const int64_t[::1] batch1, const int64_t[::1] batch2,
                  value_t beta, value_t alpha, value_t[:, ::1] out, int nthreads):
    """out[b, k] = beta * values[b, k] + alpha * dot(mat1[batch1[b], i], mat2t[batch2[b], j]) for
    every entry k = (i, j) of the csr pattern of batch b. mat1 is (B1, M, K), mat2t (B2, N, K)
    (mat2 transposed, rows contiguous); values and out are (B, nnz)."""
    cdef Py_ssize_t B = compressed.shape[0], n = compressed.shape[1] - 1, nnz = plain.shape[1]
    cdef Py_ssize_t K = mat1.shape[2], N = mat2t.shape[1]
    cdef Py_ssize_t R = B * n, r, b, i, k, line
    cdef int64_t lo, hi
    cdef int T = max(1, min(nthreads, R // 64 + 1))
    cdef const value_t* x
    cdef const value_t* y
    cdef value_t zero = 0
    if (plain.shape[0] != B or values.shape[0] != B or out.shape[0] != B or values.shape[1] != nnz
            or out.shape[1] != nnz or batch1.shape[0] != B or batch2.shape[0] != B):
        raise ValueError("sampled_addmm: inconsistent batch or nnz counts")
    if mat1.shape[1] != n or mat2t.shape[2] != K:
        raise ValueError(f"sampled_addmm: mat1 ({mat1.shape[0]}, {mat1.shape[1]}, {mat1.shape[2]}) and mat2t ({mat2t.shape[0]}, "
                         f"{mat2t.shape[1]}, {mat2t.shape[2]}) do not "
                         f"match a pattern of {n} rows")
    for b in range(B):
        if not (0 <= batch1[b] < mat1.shape[0] and 0 <= batch2[b] < mat2t.shape[0]):
            raise ValueError("sampled_addmm: batch map out of range")
    if R == 0 or nnz == 0:
        return
    with nogil:
        for r in prange(R, num_threads=T, schedule="dynamic", chunksize=16):
            b = r // n
            i = r - b * n
            lo = clamp(compressed[b, i], 0, nnz)  # the memory may have changed since it was checked
            hi = clamp(compressed[b, i + 1], lo, nnz)
            if hi == lo:
                continue
            x = &mat1[batch1[b], i, 0] if K else NULL
            for k in range(lo, hi):
                if bad_index(plain[b, k], N):
                    out[b, k] = beta * values[b, k]
                    continue
                if K and k + SDDMM_AHEAD < nnz:  # the row of mat2t an entry ahead needs: its first lines
                    y = &mat2t[batch2[b], plain[b, k + SDDMM_AHEAD], 0]  # (an address to prefetch, not read)
                    for line in range(0, min(K * <Py_ssize_t>sizeof(value_t), SDDMM_LINES * 64), 64):
                        st_prefetch(<const char*>y + line)
                y = &mat2t[batch2[b], plain[b, k], 0] if K else NULL
                out[b, k] = beta * values[b, k] + alpha * (_dot(x, y, K) if K else zero)

